"""The C-grid SVM solver (mwsp_torch.svm) against scikit-learn's libsvm on the same problems,
and in the protocols."""

import numpy as np
import pytest
from sklearn.svm import SVC

from mwsp_torch import MWSP, nested_protocol, paper_protocol
from mwsp_torch.svm import decision_path, predict_path

from random_graphs import random_graphs

CS = (1e-3, 1e-1, 1.0, 10.0, 1000.0)


def _problem(seed, n=120, classes=2, gamma=0.5):
    rng = np.random.default_rng(seed)
    centres = rng.normal(size=(classes, 5))
    y = rng.integers(0, classes, size=n)
    x = centres[y] + rng.normal(scale=1.0, size=(n, 5))
    k = np.exp(-gamma * ((x[:, None, :] - x[None, :, :]) ** 2).sum(-1))
    return k, y


@pytest.mark.parametrize("seed", range(4))
def test_decision_values_equal_libsvm_within_its_tolerance(seed):
    k, y = _problem(seed)
    train, test = np.arange(90), np.arange(90, 120)
    signs = np.where(y[train] == 0, 1.0, -1.0)
    values = decision_path(k[np.ix_(train, train)], signs, k[np.ix_(test, train)], CS)
    for c, C in enumerate(CS):
        model = SVC(kernel="precomputed", C=C).fit(k[np.ix_(train, train)], y[train])
        reference = -model.decision_function(k[np.ix_(test, train)])  # libsvm's +1 is classes_[0]
        scale = max(1.0, np.abs(reference).max())
        assert np.abs(values[c] - reference).max() <= 2e-3 * scale, (C, np.abs(values[c] - reference).max())


@pytest.mark.parametrize("classes", [2, 3, 4])
def test_predictions_equal_libsvm_away_from_the_boundary(classes):
    k, y = _problem(7, n=150, classes=classes)
    train, test = np.arange(110), np.arange(110, 150)
    predicted = predict_path(k[np.ix_(train, train)], y[train], k[np.ix_(test, train)], CS)
    for c, C in enumerate(CS):
        model = SVC(kernel="precomputed", C=C, decision_function_shape="ovo").fit(k[np.ix_(train, train)], y[train])
        reference = model.predict(k[np.ix_(test, train)])
        margin = np.abs(model.decision_function(k[np.ix_(test, train)])).reshape(len(test), -1).min(axis=1)
        clear = margin > 1e-2
        assert clear.sum() >= len(test) // 2
        np.testing.assert_array_equal(predicted[c][clear], reference[clear])


def test_the_path_equals_one_solve_per_c():
    k, y = _problem(3)
    signs = np.where(y == 0, 1.0, -1.0)
    path = decision_path(k, signs, k, CS)
    for c, C in enumerate(CS):
        alone = decision_path(k, signs, k, [C])[0]
        assert np.abs(path[c] - alone).max() <= 2e-3 * max(1.0, np.abs(alone).max())


def test_warm_starts_are_taken_and_each_equals_libsvm(monkeypatch):
    """Small Cs put every alpha at its bound, so each next C starts from the scaled solution
    (an SMO call with no iteration budget): those solutions must be libsvm's too."""
    import mwsp_torch.svm as svm

    k, y = _problem(5, gamma=2.0)
    train, test = np.arange(90), np.arange(90, 120)
    signs = np.where(y[train] == 0, 1.0, -1.0)
    cs = np.logspace(-6, 0, 7)  # up to Cs where the scaled solution is no longer optimal
    warm = []
    solve = svm._smo

    def counted(*args):
        warm.append(args[-1] == 0)
        return solve(*args)

    monkeypatch.setattr(svm, "_smo", counted)
    values = decision_path(k[np.ix_(train, train)], signs, k[np.ix_(test, train)], cs)
    assert sum(warm) >= 3, warm
    for c, C in enumerate(cs):
        model = SVC(kernel="precomputed", C=C).fit(k[np.ix_(train, train)], y[train])
        reference = -model.decision_function(k[np.ix_(test, train)])
        assert np.abs(values[c] - reference).max() <= 2e-3 * max(1.0, np.abs(reference).max()), C


def test_the_grid_order_does_not_matter():
    k, y = _problem(5)
    forward = predict_path(k, y, k, CS)
    backward = predict_path(k, y, k, CS[::-1])
    np.testing.assert_array_equal(forward, backward[::-1])


def test_labels_keep_their_values():
    k, y = _problem(2, classes=3)
    names = np.array(["a", "b", "c"])[y]
    np.testing.assert_array_equal(
        predict_path(k, names, k, [1.0])[0], np.array(["a", "b", "c"])[predict_path(k, y, k, [1.0])[0]]
    )


@pytest.mark.parametrize(
    "args, message",
    [
        ((np.eye(3), np.array([0, 1, 0]), np.eye(2), [1.0]), "k_train must be"),
        ((np.eye(3), np.array([1, 1, 1]), np.eye(3), [1.0]), "one class"),
        ((np.eye(3), np.array([0, 1, 0]), np.eye(3), [0.0]), "Cs must be"),
        ((np.eye(3), np.array([0, 1, 0]), np.eye(3), []), "Cs must be"),
        ((np.full((3, 3), np.nan), np.array([0, 1, 0]), np.eye(3), [1.0]), "k_train holds NaN"),
        ((np.eye(3), np.array([0, 1, 0]), np.full((2, 3), np.inf), [1.0]), "k_test holds NaN or infinite"),
    ],
)
def test_bad_input_is_refused(args, message):
    with pytest.raises(ValueError, match=message):
        predict_path(*args)


def test_decision_path_refuses_labels_other_than_signs_and_a_bad_tolerance():
    with pytest.raises(ValueError, match="signs must be"):
        decision_path(np.eye(3), np.array([0.0, 1.0, 0.0]), np.eye(3), [1.0])
    with pytest.raises(ValueError, match="signs must be"):
        decision_path(np.eye(3), np.ones(3), np.eye(3), [1.0])
    with pytest.raises(ValueError, match="tol must be"):
        predict_path(np.eye(3), np.array([0, 1, 0]), np.eye(3), [1.0], tol=-1e-3)


@pytest.fixture(scope="module")
def graphs_and_distances():
    graphs = random_graphs(60, seed=21, max_nodes=10)
    y = np.array([int(g.num_nodes > 7) ^ int(int(g.node_label.sum()) % 3 == 0) for g in graphs])
    return y, {(d, k): MWSP(d=d, k=k).fit(graphs).distances_ for d, k in [(1, 0), (2, 0), (2, 1)]}


def test_protocols_select_as_libsvm_does(graphs_and_distances):
    y, distances = graphs_and_distances
    grid = {"lams": (1e-2, 1e-1, 1.0), "Cs": (1e-1, 1.0, 10.0), "n_jobs": 1}
    nested = {"seeds": (0, 1), "n_outer": 5, "n_inner": 3, **grid}
    reference = nested_protocol(distances, y, **nested)
    path = nested_protocol(distances, y, svm_solver="path", **nested)
    assert path["selected"] == reference["selected"]
    assert path["fold_accuracies"] == reference["fold_accuracies"]
    assert (path["svm_solver"], reference["svm_solver"]) == ("path", "libsvm")
    reference = paper_protocol(distances[(2, 0)], y, n_splits=5, **grid)
    path = paper_protocol(distances[(2, 0)], y, n_splits=5, svm_solver="path", **grid)
    assert path["selected"] == reference["selected"]
    assert path["fold_accuracies"] == reference["fold_accuracies"]


def test_an_unknown_solver_is_refused(graphs_and_distances):
    y, distances = graphs_and_distances
    with pytest.raises(ValueError, match="svm_solver must be one of"):
        nested_protocol(distances, y, seeds=(0,), n_outer=5, n_inner=3, svm_solver="thunder")


def test_large_sets_take_libsvm_for_cold_starts(monkeypatch):
    from mwsp_torch import svm

    k, y = _problem(11)
    monkeypatch.setattr(svm, "LIBSVM_FROM", 50)  # 120 training graphs: every cold start in libsvm
    path = predict_path(k, y, k, CS)
    for c, C in enumerate(CS):
        np.testing.assert_array_equal(path[c], SVC(kernel="precomputed", C=C).fit(k, y).predict(k))
    monkeypatch.setattr(svm, "LIBSVM_FROM", 10**9)
    signs = np.where(y == 0, 1.0, -1.0)
    ours = decision_path(k, signs, k, CS)
    monkeypatch.setattr(svm, "LIBSVM_FROM", 50)
    theirs = decision_path(k, signs, k, CS)
    assert np.abs(ours - theirs).max() <= 2e-3 * max(1.0, np.abs(theirs).max())
