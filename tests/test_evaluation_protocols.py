"""The protocols select exactly what the plain loops select: the same folds, grid order and
tie-breaking, on one process or several (the work is split into steps run in any order)."""

from pathlib import Path

import numpy as np
import pytest
from sklearn.model_selection import StratifiedKFold
from sklearn.svm import SVC

from mwsp_torch import MWSP, make_csl, nested_protocol, paper_protocol

from random_graphs import random_graphs

LAMS = (1e-2, 1e-1, 1.0)
CS = (1e-1, 1.0, 10.0)


def _accuracy(w, y, lam, C, train, test) -> float:
    k = np.exp(-lam * w)
    model = SVC(kernel="precomputed", C=C).fit(k[np.ix_(train, train)], y[train])
    return float(np.mean(model.predict(k[np.ix_(test, train)]) == y[test]))


def _select(distances, y, train, inner):
    """The protocol's selection as one plain loop: settings, then lam, then C; strictly better wins."""
    splits = list(inner.split(np.zeros(len(train)), y[train]))
    best, best_score = None, -1.0
    for key in sorted(distances):
        for lam in LAMS:
            scores = np.zeros(len(CS))
            for inner_train, inner_test in splits:
                for c, C in enumerate(CS):
                    scores[c] += _accuracy(distances[key], y, lam, C, train[inner_train], train[inner_test])
            scores /= len(splits)
            for c, C in enumerate(CS):
                if scores[c] > best_score:
                    best, best_score = (key, lam, C), scores[c]
    return best


def reference_nested(distances, y, seeds, n_outer=5, n_inner=3):
    folds, selected = [], []
    for seed in seeds:
        outer = StratifiedKFold(n_splits=n_outer, shuffle=True, random_state=seed)
        inner = StratifiedKFold(n_splits=n_inner, shuffle=True, random_state=seed)
        for train, test in outer.split(np.zeros(len(y)), y):
            key, lam, C = _select(distances, y, train, inner)
            folds.append(100.0 * _accuracy(distances[key], y, lam, C, train, test))
            selected.append({"seed": seed, "d": key[0], "k": key[1], "lam": lam, "C": C})
    return folds, selected


def reference_paper(w, y, seed=42, n_splits=5):
    state = np.random.get_state()
    np.random.seed(seed)
    outer = StratifiedKFold(n_splits=n_splits, shuffle=True)
    inner = StratifiedKFold(n_splits=5, shuffle=False)
    folds, selected = [], []
    for train, test in outer.split(np.zeros(len(y)), y):
        _, lam, C = _select({(0, 0): w}, y, train, inner)
        folds.append(100.0 * _accuracy(w, y, lam, C, train, test))
        selected.append({"lam": lam, "C": C})
    np.random.set_state(state)
    return folds, selected


def _random_dataset():
    graphs = random_graphs(60, seed=21, max_nodes=10)
    y = np.array([int(g.num_nodes > 7) ^ int(int(g.node_label.sum()) % 3 == 0) for g in graphs])
    return graphs, y


def _csl_dataset():
    graphs, y = make_csl(graphs_per_class=8)
    return graphs, np.asarray(y)


@pytest.fixture(scope="module", params=["random", "csl"])
def dataset(request):
    graphs, y = _random_dataset() if request.param == "random" else _csl_dataset()
    distances = {(d, k): MWSP(d=d, k=k).fit(graphs).distances_ for d, k in [(1, 0), (2, 0), (2, 1)]}
    return request.param, distances, y


@pytest.mark.parametrize("n_jobs", [1, 2])
def test_nested_selects_what_the_plain_loop_selects(dataset, n_jobs):
    name, distances, y = dataset
    folds, selected = reference_nested(distances, y, seeds=(0, 1))
    result = nested_protocol(distances, y, LAMS, CS, seeds=(0, 1), n_outer=5, n_inner=3, n_jobs=n_jobs)
    assert result["selected"] == selected
    assert result["fold_accuracies"] == folds
    if name == "random":  # folds select different settings: the order of the grid matters here
        assert len({(s["d"], s["k"], s["lam"], s["C"]) for s in selected}) > 1


@pytest.mark.parametrize("n_jobs", [1, 2])
def test_paper_selects_what_the_plain_loop_selects(dataset, n_jobs):
    _, distances, y = dataset
    w = distances[(2, 0)]
    folds, selected = reference_paper(w, y)
    result = paper_protocol(w, y, LAMS, CS, n_jobs=n_jobs, n_splits=5)
    assert result["selected"] == selected
    assert result["fold_accuracies"] == folds


@pytest.mark.parametrize("n_jobs", [0, -2, 1.5])
def test_bad_n_jobs_is_refused(n_jobs):
    graphs, y = _random_dataset()
    w = MWSP().fit(graphs[:20]).distances_
    with pytest.raises(ValueError, match="n_jobs must be an integer >= 1, or -1"):
        paper_protocol(w, y[:20], n_jobs=n_jobs, n_splits=2)


def test_given_outer_folds_select_what_the_seeded_folds_select(dataset):
    _, distances, y = dataset
    outer = StratifiedKFold(n_splits=5, shuffle=True, random_state=3)
    folds = list(outer.split(np.zeros(len(y)), y))
    seeded = nested_protocol(distances, y, LAMS, CS, seeds=(3,), n_outer=5, n_inner=3, n_jobs=1)
    given = nested_protocol(distances, y, LAMS, CS, seeds=(3,), n_inner=3, n_jobs=1, outer_folds=folds)
    assert given["selected"] == seeded["selected"]
    assert given["fold_accuracies"] == seeded["fold_accuracies"]
    assert given["outer_folds"] == 5


def _bad_folds(y):
    folds = list(StratifiedKFold(n_splits=4, shuffle=True, random_state=0).split(np.zeros(len(y)), y))
    leak = [(np.concatenate([folds[0][0], folds[0][1][:1]]), folds[0][1])] + folds[1:]
    gap = [(train, test[1:]) if f == 0 else (train, test) for f, (train, test) in enumerate(folds)]
    outside = [(np.append(folds[0][0], len(y)), folds[0][1])] + folds[1:]
    return {"also tests on": leak, "exactly once": gap, "outside": outside, "at least 2 folds": folds[:1]}


@pytest.mark.parametrize("problem", ["also tests on", "exactly once", "outside", "at least 2 folds"])
def test_bad_outer_folds_are_refused(problem):
    graphs, y = _random_dataset()
    w = MWSP().fit(graphs).distances_
    with pytest.raises(ValueError, match=problem):
        nested_protocol({(2, 0): w}, y, LAMS, CS, n_inner=3, outer_folds=_bad_folds(y)[problem])


def test_outer_folds_take_one_seed():
    graphs, y = _random_dataset()
    w = MWSP().fit(graphs).distances_
    folds = list(StratifiedKFold(n_splits=4, shuffle=True, random_state=0).split(np.zeros(len(y)), y))
    with pytest.raises(ValueError, match="seeds must hold one seed"):
        nested_protocol({(2, 0): w}, y, LAMS, CS, seeds=(0, 1), n_inner=3, outer_folds=folds)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_workers_get_each_array_as_one_memory_mapped_file_that_goes_afterwards(dtype):
    from mwsp_torch.evaluation import memory_mapped

    rng = np.random.default_rng(0)
    arrays = {(1, 0): rng.random((5, 7)).astype(dtype), (2, 1): np.asfortranarray(rng.random((4, 4)).astype(dtype))}
    with memory_mapped(arrays, 1) as same:
        assert same is arrays
    with memory_mapped(arrays, 2) as mapped:
        assert list(mapped) == list(arrays)
        for key, array in arrays.items():
            assert isinstance(mapped[key], np.memmap) and mapped[key].dtype == dtype
            np.testing.assert_array_equal(mapped[key], array)
        files = [Path(m.filename) for m in mapped.values()]
        assert all(f.exists() for f in files) and len(set(files)) == len(files)
    assert not any(f.exists() for f in files)
