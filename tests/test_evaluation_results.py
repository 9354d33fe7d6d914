"""A nested run split over seeds and combined is the run made in one call, and results of
other runs are refused rather than averaged together."""

import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from mwsp_torch import MWSP, nested_protocol, paper_protocol
from mwsp_torch.evaluation import combine_repetitions

from random_graphs import random_graphs

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "experiments"))

LAMS = (1e-2, 1e-1, 1.0)
CS = (1e-1, 1.0, 10.0)


@pytest.fixture(scope="module")
def problem():
    graphs = random_graphs(40, seed=11, max_nodes=10)
    y = np.array([int(g.num_nodes > 6) ^ int(int(g.node_label.sum()) % 2 == 0) for g in graphs])
    distances = {(d, 0): MWSP(d=d, k=0).fit(graphs).distances_ for d in (1, 2)}
    return distances, y


def _nested(problem, seeds, Cs=CS, n_outer=4, n_inner=3, **kwargs):
    distances, y = problem
    return nested_protocol(distances, y, LAMS, Cs, seeds=seeds, n_outer=n_outer, n_inner=n_inner, n_jobs=1, **kwargs)


def test_seeds_run_apart_and_combined_equal_one_run(problem):
    whole = _nested(problem, (0, 1, 2))
    combined = combine_repetitions([_nested(problem, (0, 1)), _nested(problem, (2,))])
    assert "svm_fits" not in combined  # the work of one call (its floors), not a result
    assert combined == {name: value for name, value in whole.items() if name != "svm_fits"}
    # The repetitions differ from each other, so an order or a seed mixed up would show.
    assert len(set(whole["repetition_accuracies"])) > 1 or len({str(s) for s in whole["selected"]}) > 1


def test_the_order_of_the_parts_is_the_order_of_the_seeds(problem):
    parts = [_nested(problem, (0,)), _nested(problem, (1,))]
    swapped = combine_repetitions(parts[::-1])
    assert swapped["seeds"] == [1, 0]
    assert swapped["fold_accuracies"] == parts[1]["fold_accuracies"] + parts[0]["fold_accuracies"]


def test_results_of_other_runs_are_refused(problem):
    distances, y = problem
    first = _nested(problem, (0,))
    with pytest.raises(ValueError, match=r"seeds \[0\] are in more than one result"):
        combine_repetitions([first, _nested(problem, (0,))])
    with pytest.raises(ValueError, match="differs from results\\[0\\] in 'grid'"):
        combine_repetitions([first, _nested(problem, (1,), Cs=CS[:2])])
    with pytest.raises(ValueError, match="differs from results\\[0\\] in 'outer_folds'"):
        combine_repetitions([first, _nested(problem, (1,), n_outer=5)])
    with pytest.raises(ValueError, match="results\\[1\\] is not a nested protocol result"):
        combine_repetitions([first, paper_protocol(distances[(1, 0)], y, LAMS, CS, n_splits=4, n_jobs=1)])
    with pytest.raises(ValueError, match="differs from results\\[0\\] in 'inner_folds'"):
        combine_repetitions([first, _nested(problem, (1,), n_inner=2)])
    with pytest.raises(ValueError, match="differs from results\\[0\\] in 'svm'"):
        combine_repetitions([first, _nested(problem, (1,), svm="krein")])
    flipped = nested_protocol(distances, 1 - y, LAMS, CS, seeds=(1,), n_outer=4, n_inner=3, n_jobs=1)
    with pytest.raises(ValueError, match="differs from results\\[0\\] in 'inputs_sha256'"):
        combine_repetitions([first, flipped])  # other labels (the same majority rate)
    scaled = {key: 2 * w for key, w in distances.items()}
    other = nested_protocol(scaled, y, LAMS, CS, seeds=(1,), n_outer=4, n_inner=3, n_jobs=1)
    with pytest.raises(ValueError, match="differs from results\\[0\\] in 'inputs_sha256'"):
        combine_repetitions([first, other])  # other distances
    folds = [(np.setdiff1d(np.arange(len(y)), test), test) for test in np.array_split(np.arange(len(y)), 4)]
    given = nested_protocol(distances, y, LAMS, CS, seeds=(1,), outer_folds=folds, n_inner=3, n_jobs=1)
    with pytest.raises(ValueError, match="given outer folds"):
        combine_repetitions([given])
    with pytest.raises(ValueError, match=r"results\[0\] lacks \['inner_folds'\]"):
        combine_repetitions([{k: v for k, v in first.items() if k != "inner_folds"}])
    with pytest.raises(ValueError, match="at least one result"):
        combine_repetitions([])


def test_accuracy_script_grows_a_stored_run_to_the_result_of_one_run(tmp_path, monkeypatch):
    """Two calls of one repetition each store what one call of two stores (MUTAG, one
    setting), the paper protocol kept from the first; a smaller target is refused."""
    import accuracy
    import common

    monkeypatch.setenv("MWSP_DATA_ROOT", str(Path(__file__).parent / "data"))
    monkeypatch.setenv("MWSP_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(common, "RAW", tmp_path / "raw")

    def args(repeats, now=0, force=False):
        return SimpleNamespace(d=[1], k=[0], repeats=repeats, repetitions_now=now, subset=0, force=force,
                               budget=1e9, n_jobs=1, eval_jobs=1, quiet=True)  # fmt: skip

    first = accuracy.run_dataset("MUTAG", args(2, now=1, force=True))
    assert first["nested"]["seeds"] == [0]
    grown = accuracy.run_dataset("MUTAG", args(2, now=1))
    whole = accuracy.run_dataset("MUTAG", args(2, force=True))
    graphs, y, labels = common.load("MUTAG")
    w, _ = common.distances("MUTAG", graphs, labels, 1, 0, n_jobs=1, progress=False)
    direct = nested_protocol({(1, 0): w}, y, seeds=(0, 1), n_outer=common.outer_folds(y), n_jobs=1)
    for entry in ("fold_accuracies", "selected", "seeds", "accuracy_mean", "accuracy_std", "repetition_accuracies"):
        assert grown["nested"][entry] == whole["nested"][entry] == direct[entry], entry
    assert grown["paper"] == first["paper"]
    with pytest.raises(SystemExit, match="2 repetitions"):
        accuracy.run_dataset("MUTAG", args(1))


def test_accuracy_script_keeps_each_finished_repetition(tmp_path, monkeypatch):
    """A run stopped during its second repetition has saved its first, and the next call
    runs only the second."""
    import accuracy
    import common

    monkeypatch.setenv("MWSP_DATA_ROOT", str(Path(__file__).parent / "data"))
    monkeypatch.setenv("MWSP_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(common, "RAW", tmp_path / "raw")
    calls, stop_at = [], [(1,)]

    def counted(*a, seeds, **kw):
        calls.append(seeds)
        if seeds in stop_at:
            raise KeyboardInterrupt
        return nested_protocol(*a, seeds=seeds, **kw)

    args = SimpleNamespace(d=[1], k=[0], repeats=2, repetitions_now=0, subset=0, force=True, budget=1e9,
                           n_jobs=1, eval_jobs=1, quiet=True)  # fmt: skip
    monkeypatch.setattr(accuracy, "nested_protocol", counted)
    with pytest.raises(KeyboardInterrupt):
        accuracy.run_dataset("MUTAG", args)
    assert common.load_raw("accuracy-MUTAG")["nested"]["seeds"] == [0]
    assert calls == [(0,), (1,)]
    selection = tmp_path / "cache" / "selection"
    assert not [p for p in selection.iterdir() if p.name.endswith(("-paper", "-s0"))]  # saved, so dropped
    calls.clear()
    stop_at.clear()
    args.force = False
    assert accuracy.run_dataset("MUTAG", args)["nested"]["seeds"] == [0, 1]
    assert calls == [(1,)]
    assert not list(selection.iterdir())


def test_accuracy_script_runs_only_the_missing_seeds():
    from accuracy import missing_seeds

    stored = {"nested": {"seeds": [0, 1, 2]}}
    assert missing_seeds(SimpleNamespace(repeats=10, repetitions_now=4), stored) == [3, 4, 5, 6]
    assert missing_seeds(SimpleNamespace(repeats=10, repetitions_now=0), stored) == list(range(3, 10))
    assert missing_seeds(SimpleNamespace(repeats=5, repetitions_now=4), None) == [0, 1, 2, 3]
