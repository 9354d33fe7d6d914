"""The selection engine on any kernel: named precomputed kernels (GraKeL's WL) beside W in one
nested protocol select exactly what a plain loop over the mixed grid selects; a kernel given
per outer fold is read by that fold alone; bad kernels are refused by name."""

import numpy as np
import pytest
from sklearn.model_selection import StratifiedKFold
from sklearn.svm import SVC

from mwsp_torch import MWSP, Precomputed, nested_protocol
from mwsp_torch.evaluation import ordered_settings

from helpers import require_extra
from random_graphs import random_graphs

grakel = require_extra("grakel", "kernels")

LAMS = (1e-2, 1e-1, 1.0)
CS = (1e-1, 1.0, 10.0)


def _wl_kernel(graphs, h: int) -> np.ndarray:
    """GraKeL's normalised WL subtree kernel on the graphs' node labels."""
    grakel_graphs = []
    for g in graphs:
        edges = {(int(a), int(b)) for a, b in g.edge_index.t().tolist()}
        labels = {i: int(v) for i, v in enumerate(g.node_label.tolist())}
        grakel_graphs.append(grakel.Graph(edges or {(0, 0)}, node_labels=labels))
    return grakel.kernels.WeisfeilerLehman(n_iter=h, normalize=True).fit_transform(grakel_graphs)


@pytest.fixture(scope="module")
def problem():
    graphs = random_graphs(60, seed=21, max_nodes=10)
    y = np.array([int(g.num_nodes > 7) ^ int(int(g.node_label.sum()) % 3 == 0) for g in graphs])
    settings = {(d, 0): MWSP(d=d, k=0).fit(graphs).distances_ for d in (1, 2)}
    settings["wl-h1"] = Precomputed(_wl_kernel(graphs, 1))
    settings["wl-h3"] = Precomputed(_wl_kernel(graphs, 3))
    return settings, y


def _kernel(value, lam):
    return value.matrix(0) if isinstance(value, Precomputed) else np.exp(-lam * value)


def _accuracy(k, y, C, train, test) -> float:
    model = SVC(kernel="precomputed", C=C).fit(k[np.ix_(train, train)], y[train])
    return float(np.mean(model.predict(k[np.ix_(test, train)]) == y[test]))


def reference_nested(settings, y, seed, n_outer=5, n_inner=3):
    """The nested protocol as one plain loop: (d, k) settings sorted, then the named ones
    sorted; lam for a W (none for a kernel); then C; strictly better wins."""
    keys = sorted(k for k in settings if isinstance(k, tuple)) + sorted(k for k in settings if isinstance(k, str))
    folds, selected = [], []
    outer = StratifiedKFold(n_splits=n_outer, shuffle=True, random_state=seed)
    inner = StratifiedKFold(n_splits=n_inner, shuffle=True, random_state=seed)
    for train, test in outer.split(np.zeros(len(y)), y):
        splits = list(inner.split(np.zeros(len(train)), y[train]))
        best, best_score = None, -1.0
        for key in keys:
            for lam in (None,) if isinstance(settings[key], Precomputed) else LAMS:
                k = _kernel(settings[key], lam)
                for C in CS:
                    score = np.mean([_accuracy(k, y, C, train[a], train[b]) for a, b in splits])
                    if score > best_score:
                        best, best_score = (key, lam, C), score
        key, lam, C = best
        folds.append(100.0 * _accuracy(_kernel(settings[key], lam), y, C, train, test))
        named = {"kernel": key} if isinstance(key, str) else {"d": key[0], "k": key[1]}
        selected.append({"seed": seed, **named, **({} if lam is None else {"lam": lam}), "C": C})
    return folds, selected


@pytest.mark.parametrize("n_jobs", [1, 2])
def test_a_mixed_grid_selects_what_the_plain_loop_selects(problem, n_jobs):
    settings, y = problem
    folds, selected = reference_nested(settings, y, seed=3)
    result = nested_protocol(settings, y, LAMS, CS, seeds=(3,), n_outer=5, n_inner=3, n_jobs=n_jobs)
    assert result["selected"] == selected
    assert result["fold_accuracies"] == folds
    assert result["grid"]["kernels"] == ["wl-h1", "wl-h3"]
    assert result["grid"]["settings"] == [[1, 0], [2, 0], "wl-h1", "wl-h3"]
    # Both kinds win somewhere, so the grid order between them is exercised.
    assert {"kernel" in s for s in selected} == {True, False} or len({str(s) for s in selected}) > 1


def test_a_kernel_of_w_selects_what_w_at_that_lam_selects(problem):
    settings, y = problem
    w = settings[(2, 0)]
    as_w = nested_protocol({(2, 0): w}, y, (0.1,), CS, seeds=(0, 1), n_outer=5, n_inner=3, n_jobs=1)
    as_kernel = nested_protocol(
        {"mwsp": Precomputed(np.exp(-0.1 * w))}, y, LAMS, CS, seeds=(0, 1), n_outer=5, n_inner=3, n_jobs=1
    )
    assert as_kernel["fold_accuracies"] == as_w["fold_accuracies"]
    assert [s["C"] for s in as_kernel["selected"]] == [s["C"] for s in as_w["selected"]]
    assert as_kernel["fold_predictions"] == as_w["fold_predictions"]
    assert as_kernel["inputs_sha256"] != as_w["inputs_sha256"]


def test_fold_predictions_score_the_fold_accuracies(problem):
    settings, y = problem
    result = nested_protocol(settings, y, LAMS, CS, seeds=(0,), n_outer=5, n_inner=3, n_jobs=1)
    outer = StratifiedKFold(n_splits=5, shuffle=True, random_state=0).split(np.zeros(len(y)), y)
    for (_, test), predictions, accuracy in zip(
        outer, result["fold_predictions"], result["fold_accuracies"], strict=True
    ):
        assert len(predictions) == len(test)
        assert 100.0 * np.mean(np.array(predictions) == y[test]) == accuracy


def test_a_kernel_per_fold_is_read_by_its_fold_alone(problem):
    settings, y = problem
    k = settings["wl-h3"].matrix(0)
    folds = list(StratifiedKFold(n_splits=5, shuffle=True, random_state=0).split(np.zeros(len(y)), y))
    common = dict(lams=LAMS, Cs=CS, seeds=(0,), n_inner=3, n_jobs=1, outer_folds=folds)
    same = nested_protocol({"wl": Precomputed([k] * 5)}, y, **common)
    assert same["fold_accuracies"] == nested_protocol({"wl": Precomputed(k)}, y, **common)["fold_accuracies"]
    rng = np.random.default_rng(0)
    noise = rng.random(k.shape)
    swapped = [k] * 5
    swapped[2] = noise @ noise.T  # only fold 2 reads it
    other = nested_protocol({"wl": Precomputed(swapped)}, y, **common)
    for f in range(5):
        if f != 2:
            assert other["fold_accuracies"][f] == same["fold_accuracies"][f]
            assert other["fold_predictions"][f] == same["fold_predictions"][f]
    assert other["fold_predictions"][2] != same["fold_predictions"][2]
    with pytest.raises(ValueError, match=r"holds 4 kernels, one per outer fold, but the protocol scores 5"):
        nested_protocol({"wl": Precomputed([k] * 4)}, y, **common)


def test_named_settings_come_after_the_d_k_ones_in_sorted_order():
    assert ordered_settings({"wl": 0, (2, 0): 0, "sp": 0, (1, 1): 0}) == [(1, 1), (2, 0), "sp", "wl"]


@pytest.mark.parametrize(
    "kernel, message",
    [
        (np.ones((60, 59)), r"distances\['wl'\] must be a square \[n, n\] matrix, got shape \(60, 59\)"),
        (np.ones((59, 59)), r"distances\['wl'\] is 59 x 59 but y has 60 labels"),
        (np.triu(np.ones((60, 60))), r"distances\['wl'\] must be symmetric"),
        (np.full((60, 60), np.nan), r"distances\['wl'\] must be finite, got nan at \[0, 0\]"),
        (np.full((60, 60), "a"), r"distances\['wl'\] must be a matrix of real numbers"),
    ],
)
def test_bad_kernels_are_refused_by_name(problem, kernel, message):
    _, y = problem
    with pytest.raises(ValueError, match=message):
        nested_protocol({"wl": Precomputed(kernel)}, y, LAMS, CS, seeds=(0,), n_outer=5, n_inner=3, n_jobs=1)


def test_an_empty_kernel_sequence_is_refused():
    with pytest.raises(ValueError, match="got an empty sequence"):
        Precomputed([])
