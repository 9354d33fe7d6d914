"""A grid search over ``lam`` and ``C`` computes W once per training fold: the clones of one
``MWSP`` share their fits and transforms (``mwsp_torch.estimator``'s cache), keyed by the
graphs' content and every parameter but ``lam``, ``n_jobs`` and ``progress``. Also: graphs from
``load_tudataset`` pickle at their own size, and inside a joblib worker ``n_jobs=-1`` is the
worker's share of the cores."""

from __future__ import annotations

import os
import pickle
import sys

import numpy as np
import pytest
from sklearn.base import clone
from sklearn.model_selection import GridSearchCV, StratifiedKFold
from sklearn.pipeline import make_pipeline
from sklearn.svm import SVC

from mwsp_torch import MWSP
from mwsp_torch.fit_cache import FIT_CACHE, FIT_CACHE_ENV, clear_fit_cache, joblib_worker_threads
from mwsp_torch.transport import Exact, solvers


@pytest.fixture
def counted(monkeypatch):
    """Every W computed (a fit's pairs or a transform's), counted by the call that solves them."""
    calls = []
    solve = MWSP._distances

    def counting(self, left, right, pairs, stats=None):
        calls.append(len(pairs))
        return solve(self, left, right, pairs, stats=stats)

    monkeypatch.setattr(MWSP, "_distances", counting)
    clear_fit_cache()
    yield calls
    clear_fit_cache()


def _search(graphs, y):
    search = GridSearchCV(
        make_pipeline(MWSP(n_jobs=1), SVC(kernel="precomputed")),
        {"mwsp__lam": [0.01, 0.1, 1.0, 10.0], "svc__C": [1.0, 10.0]},
        cv=StratifiedKFold(3, shuffle=True, random_state=0),
    )
    return search.fit(graphs, y)


def test_a_grid_search_computes_w_once_per_fold(mutag, counted, monkeypatch):
    graphs, y = mutag
    graphs, y = graphs[:60], y[:60]
    cached = _search(graphs, y)
    # 3 folds x (fit + transform), then the refit on all graphs: 7, not 8 candidates x 3 x 2 + 1
    assert len(counted) == 7
    counted.clear()
    monkeypatch.setenv(FIT_CACHE_ENV, "0")  # the cache off: every candidate refits
    uncached = _search(graphs, y)
    assert len(counted) == 8 * 3 * 2 + 1
    for name in ("mean_test_score", "std_test_score", "rank_test_score"):
        np.testing.assert_array_equal(cached.cv_results_[name], uncached.cv_results_[name])
    assert cached.best_params_ == uncached.best_params_


def test_cached_w_equals_uncached_w(mutag, counted, monkeypatch):
    graphs = mutag[0][:40]
    base = MWSP(d=2, k=1, n_jobs=1)
    first = clone(base).fit(graphs)
    again = clone(base).set_params(lam=5.0, n_jobs=2).fit([g.clone() for g in graphs])  # equal content
    assert len(counted) == 1 and again.timings_["from_cache"] and "from_cache" not in first.timings_
    monkeypatch.setenv(FIT_CACHE_ENV, "0")
    fresh = clone(base).fit(graphs)
    assert len(counted) == 2
    np.testing.assert_array_equal(again.distances_, fresh.distances_)
    np.testing.assert_array_equal(again.cross_distances(mutag[0][40:50]), fresh.cross_distances(mutag[0][40:50]))
    np.testing.assert_array_equal(again.kernel(), np.exp(-5.0 * fresh.distances_))
    assert (again.features_ != fresh.features_).nnz == 0


def test_what_changes_w_misses_the_cache(mutag, counted):
    graphs = mutag[0][:30]
    base = MWSP(n_jobs=1)
    clone(base).fit(graphs)
    clone(base).set_params(d=3).fit(graphs)  # another setting
    clone(base).fit(graphs[:29])  # other graphs
    changed = [g.clone() for g in graphs]
    changed[3].node_label = changed[3].node_label.flip(0)
    clone(base).fit(changed)  # other content
    assert len(counted) == 4
    clone(base).set_params(progress=True, lam=0.5).fit(graphs)  # neither changes W
    assert len(counted) == 4


def test_only_clones_share_fits_and_not_with_a_checkpoint(mutag, counted, tmp_path):
    graphs = mutag[0][:20]
    MWSP(n_jobs=1).fit(graphs)
    MWSP(n_jobs=1).fit(graphs)  # two estimators made apart: no family, no sharing
    base = MWSP(n_jobs=1, checkpoint=str(tmp_path / "tiles"))
    clone(base).fit(graphs)
    clone(base).fit(graphs)  # a checkpoint is there to be resumed from: never cached
    assert len(counted) == 4


def test_a_hit_is_a_copy(mutag, counted):
    graphs = mutag[0][:20]
    base = MWSP(n_jobs=1)
    first = clone(base).fit(graphs)
    expected = first.distances_.copy()
    first.distances_[:] = -1.0
    second = clone(base).fit(graphs)
    second.distances_[:] = -2.0
    np.testing.assert_array_equal(clone(base).fit(graphs).distances_, expected)
    out = second.transform(mutag[0][20:25])
    out[:] = 7.0
    assert np.all(clone(base).fit(graphs).transform(mutag[0][20:25]) < 1.0)
    assert len(counted) == 2  # one fit, one transform


def test_the_cache_is_bounded(mutag, counted, monkeypatch):
    graphs = mutag[0][:20]
    base = MWSP(n_jobs=1)
    monkeypatch.setenv(FIT_CACHE_ENV, "0.001")  # 1 KB: no fit fits
    clone(base).fit(graphs)
    clone(base).fit(graphs)
    assert len(counted) == 2 and len(FIT_CACHE) == 0
    monkeypatch.setenv(FIT_CACHE_ENV, "many")
    with pytest.raises(ValueError, match="MWSP_FIT_CACHE_MB='many': expected a number of MiB"):
        clone(base).fit(graphs)


def test_n_jobs_in_a_joblib_worker_is_the_workers_share(monkeypatch, mutag):
    loky = pytest.importorskip("joblib.externals.loky.process_executor")
    assert joblib_worker_threads() is None and MWSP()._n_threads() == -1
    monkeypatch.setattr(loky, "_CURRENT_DEPTH", 1)  # as in a loky worker
    monkeypatch.setenv("OMP_NUM_THREADS", "1")  # what joblib sets there: cores // workers
    assert joblib_worker_threads() == 1 and MWSP()._n_threads() == 1
    assert MWSP(n_jobs=3)._n_threads() == 3  # an explicit n_jobs is kept
    monkeypatch.setenv("OMP_NUM_THREADS", "4")
    assert MWSP()._n_threads() == 4
    seen = []
    solve = solvers.exact_distances

    def recording(*args, n_jobs, **kwargs):
        seen.append(n_jobs)
        return solve(*args, n_jobs=n_jobs, **kwargs)

    monkeypatch.setattr(solvers, "exact_distances", recording)
    MWSP(solver=Exact(engine="compiled")).fit(mutag[0][:10])
    assert seen == [4]
    monkeypatch.delitem(sys.modules, "joblib.externals.loky.process_executor")
    assert joblib_worker_threads() is None


def test_graphs_from_load_tudataset_pickle_at_their_own_size(mutag):
    """A graph sliced from a PyG dataset would pickle the whole dataset's storage."""
    graphs = mutag[0]
    one = len(pickle.dumps(graphs[0]))
    assert one * 20 < len(pickle.dumps(graphs))  # 188 graphs: each a small share of all


def test_y_is_ignored_but_must_match_the_graphs(mutag):
    graphs, y = mutag
    np.testing.assert_array_equal(
        MWSP(n_jobs=1).fit(graphs[:10], y[:10]).distances_, MWSP(n_jobs=1).fit(graphs[:10]).distances_
    )
    with pytest.raises(ValueError, match="y has 9 labels for 10 graphs"):
        MWSP(n_jobs=1).fit(graphs[:10], y[:9])


def test_progress_rates_and_estimates_start_at_the_first_step():
    """A first step after slow set-up, or of many graphs at once, is not the pace of the rest."""
    from mwsp_torch.progress import ProgressBar

    clock = [100.0]
    bar = ProgressBar(total=10_000, disable=False, file=open(os.devnull, "w"), mininterval=0)
    bar._time = lambda: clock[0]  # tqdm's clock
    bar.start_t = bar.last_print_t = clock[0]
    clock[0] = 160.0  # a minute of set-up, then 1,000 done at once
    bar.update(1000)
    assert bar.format_dict["rate"] is None and bar.format_dict["elapsed"] == 0  # no rate from one step
    clock[0] = 170.0  # 900 more in 10 s: 90 a second
    bar.update(900)
    meter = bar.format_dict
    assert meter["n"] - meter["initial"] == 900 and meter["elapsed"] == 10.0
    line = ProgressBar.format_meter(**meter)
    assert "90.00" in line and "01:30" in line, line  # 8,100 left at 90 a second: 90 s
    bar.close()


def test_graphs_of_a_pyg_dataset_pickle_compactly_once_compacted(fixture_root, tmp_path):
    """``list(dataset)`` pickles the dataset's whole storage with each graph; compact_graphs not."""
    import shutil

    from torch_geometric.datasets import TUDataset

    from mwsp_torch.graphs import compact_graphs

    shutil.copytree(fixture_root / "MUTAG" / "raw", tmp_path / "MUTAG" / "raw")
    dataset = TUDataset(str(tmp_path), "MUTAG")
    views, compact = list(dataset), compact_graphs(dataset)
    assert len(pickle.dumps(compact)) * 20 < len(pickle.dumps(views))
    w = MWSP(n_jobs=1).fit(compact[:20]).distances_
    np.testing.assert_array_equal(w, MWSP(n_jobs=1).fit(views[:20]).distances_)
