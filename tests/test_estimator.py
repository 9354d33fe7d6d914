"""The scikit-learn estimator: fit/transform, unseen graphs, clone, pickling, Krein treatment."""

import pickle

import numpy as np
import pytest
import torch
from sklearn.base import clone
from torch_geometric.data import Data

from mwsp_torch import MWSP, TreeIDs, krein_projector, make_csl
from mwsp_torch.datasets import CSL_SKIPS
from mwsp_torch.transport import Exact, Sinkhorn
from mwsp_torch.transport.engines import ExactEngineFallbackWarning

from helpers import make_data
from reference import distance_matrix

TRAIN = [
    (4, [(0, 1), (1, 2), (2, 3), (3, 0)], [0, 1, 0, 1]),
    (5, [(0, 1), (1, 2), (2, 3), (3, 4), (4, 0), (0, 2)], [0, 0, 1, 1, 0]),
    (3, [(0, 1), (1, 2)], [1, 0, 1]),
]
# Unseen labels (5), unseen trees and paths.
NEW = [
    (4, [(0, 1), (1, 2), (2, 3)], [5, 1, 0, 5]),
    (4, [(0, 1), (1, 2), (2, 3), (3, 0)], [1, 0, 1, 0]),
]


def datas(graphs):
    return [make_data(*g) for g in graphs]


@pytest.mark.parametrize("d,k", [(1, 0), (2, 1), (3, 2)])
def test_transform_on_unseen_graphs_matches_reference(d, k):
    model = MWSP(d=d, k=k, lam=0.5).fit(datas(TRAIN))
    fitted = (model.distances_.copy(), model.tree_vocab_.size, model.path_vocab_.size, model.row_vocab_.size)
    kernel = model.transform(datas(NEW))
    full = distance_matrix(TRAIN + NEW, d, k, "split")
    expected = full[len(TRAIN) :, : len(TRAIN)]
    np.testing.assert_allclose(model.cross_distances(datas(NEW)), expected, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(kernel, np.exp(-0.5 * expected), rtol=1e-9)
    # The fitted state is untouched.
    assert np.array_equal(model.distances_, fitted[0])
    assert (model.tree_vocab_.size, model.path_vocab_.size, model.row_vocab_.size) == fitted[1:]
    # A renumbered training graph is at distance 0 from itself.
    assert kernel[1, 0] == 1.0


def test_transform_of_training_graphs_equals_fit():
    model = MWSP(d=2, k=1).fit(datas(TRAIN))
    np.testing.assert_allclose(model.transform(datas(TRAIN)), model.kernel(), rtol=1e-12)


def test_clone_and_get_params():
    model = MWSP(d=3, k=2, lam=0.1, paths="all", n_jobs=2)
    params = model.get_params()
    assert params["d"] == 3 and params["paths"] == "all" and params["n_jobs"] == 2
    copy = clone(model)
    assert copy.get_params() == params
    copy.set_params(lam=5.0)
    assert copy.lam == 5.0 and model.lam == 0.1


def test_pickle_roundtrip_keeps_vocabularies():
    model = MWSP(d=2, k=1).fit(datas(TRAIN))
    restored = pickle.loads(pickle.dumps(model))
    np.testing.assert_array_equal(restored.transform(datas(NEW)), model.transform(datas(NEW)))


def test_threads_give_the_same_matrix():
    graphs, _ = make_csl(graphs_per_class=2, num_nodes=11)
    one = MWSP(d=2, k=1, n_jobs=1).fit(graphs).distances_
    two = MWSP(d=2, k=1, n_jobs=2).fit(graphs).distances_
    assert np.array_equal(one, two)


def test_csl_copies_are_isomorphic_and_classes_separate():
    graphs, y = make_csl(graphs_per_class=3)
    w = MWSP(d=4, k=0).fit(graphs).distances_
    same = y[:, None] == y[None, :]
    assert np.all(w[same] == 0.0)
    # Skips 6 and 16 give every node the same distance layers (measured: also at
    # d=20 and k up to 3), so MWSP cannot tell them apart; every other pair of classes it can.
    skips = np.array(CSL_SKIPS)[y]
    twins = np.isin(skips[:, None], (6, 16)) & np.isin(skips[None, :], (6, 16))
    assert np.all(w[~same & ~twins] > 1e-3)
    assert np.all(w[twins] == 0.0)


def test_multi_column_labels_are_categorical_rows():
    def graph(rows):
        return Data(edge_index=torch.tensor([[0, 1], [1, 2]]), num_nodes=3, node_label=torch.tensor(rows))

    a = graph([[0, 1], [1, 0], [0, 1]])
    b = graph([[0, 1], [1, 0], [0, 1]])
    c = graph([[0, 1], [1, 1], [0, 1]])  # differs only in the second column of the middle node
    w = MWSP(d=1, k=0).fit([a, b, c]).distances_
    assert w[0, 1] == 0.0 and w[0, 2] > 0.0


def test_one_hot_x_equals_node_label():
    labels = torch.tensor([0, 2, 1, 2])
    edges = torch.tensor([[0, 1, 2], [1, 2, 3]])
    via_x = Data(edge_index=edges, x=torch.nn.functional.one_hot(labels, 4).float())
    via_label = Data(edge_index=edges, num_nodes=4, node_label=labels)
    other = make_data(4, [(0, 1), (1, 2), (2, 3)], [2, 0, 1, 2])
    other_x = Data(edge_index=other.edge_index, x=torch.nn.functional.one_hot(other.node_label, 4).float())
    w_x = MWSP(d=2, k=1).fit([via_x, other_x]).distances_  # one field for all graphs (never mixed)
    w_l = MWSP(d=2, k=1).fit([via_label, other]).distances_
    assert w_x[0, 1] == w_l[0, 1] > 0


def test_single_column_x_is_a_label_column_in_every_graph():
    # One column is never one-hot: all-ones x is label 1 here too, as in the graph that mixes
    # 0 and 1 (read per graph, it was label 0 there, and W(all ones, all zeros) was 0).
    edges = torch.tensor([[0], [1]])
    columns = [[[1], [1]], [[1], [0]], [[0], [0]]]
    via_x = [Data(edge_index=edges, x=torch.tensor(c, dtype=torch.float)) for c in columns]
    via_label = [Data(edge_index=edges, num_nodes=2, node_label=torch.tensor(c)[:, 0]) for c in columns]
    w_x = MWSP(d=1, k=0).fit(via_x).distances_
    w_l = MWSP(d=1, k=0).fit(via_label).distances_
    np.testing.assert_array_equal(w_x, w_l)
    assert w_x[0, 2] > 0
    # The same when the fit sees only all-ones columns (one-hot-looking) and transform the zeros.
    fitted_x, fitted_l = MWSP(d=1, k=0).fit(via_x[:1]), MWSP(d=1, k=0).fit(via_label[:1])
    cross = fitted_x.cross_distances(via_x[2:])
    np.testing.assert_array_equal(cross, fitted_l.cross_distances(via_label[2:]))
    assert cross[0, 0] == w_x[2, 0] > 0


def test_krein_projector_flip_and_clip():
    rng = np.random.default_rng(0)
    a = rng.normal(size=(6, 6))
    kernel = (a + a.T) / 2
    eig = np.linalg.eigvalsh(kernel)
    assert eig.min() < 0
    flipped = kernel @ krein_projector(kernel, "flip")
    clipped = kernel @ krein_projector(kernel, "clip")
    np.testing.assert_allclose(np.sort(np.linalg.eigvalsh(flipped)), np.sort(np.abs(eig)), atol=1e-10)
    np.testing.assert_allclose(np.sort(np.linalg.eigvalsh(clipped)), np.sort(np.maximum(eig, 0)), atol=1e-10)
    np.testing.assert_allclose(flipped, flipped.T, atol=1e-12)


def test_tree_ids_transform_writes_consistent_ids():
    transform = TreeIDs(k=2)
    a = transform(make_data(4, [(0, 1), (1, 2), (2, 3)], [0, 1, 1, 0]))
    b = transform(make_data(4, [(3, 2), (2, 1), (1, 0)], [0, 1, 1, 0]))  # the same path, reversed
    assert a.tree_ids.shape == (4, 3) and a.tree_ids.dtype == torch.long
    # Node i of a is node 3 - i of b.
    assert torch.equal(a.tree_ids, b.tree_ids.flip(0))
    # The ends and the middle differ at every scale; ends share scale 0 with each other.
    assert a.tree_ids[0, 0] == a.tree_ids[3, 0] and a.tree_ids[0, 0] != a.tree_ids[1, 0]
    assert "TreeIDs(k=2" in repr(transform)


def test_protocols_do_not_depend_on_n_jobs():
    from mwsp_torch import nested_protocol, paper_protocol

    graphs, y = make_csl(graphs_per_class=4, num_nodes=13, seed=1)
    w = {(2, 0): MWSP(d=2, k=0).fit(graphs).distances_, (4, 1): MWSP(d=4, k=1).fit(graphs).distances_}
    one = nested_protocol(w, y, lams=(0.1, 1.0), Cs=(1.0, 100.0), seeds=(0, 1), n_outer=4, n_inner=2)
    two = nested_protocol(w, y, lams=(0.1, 1.0), Cs=(1.0, 100.0), seeds=(0, 1), n_outer=4, n_inner=2, n_jobs=2)
    assert one["fold_accuracies"] == two["fold_accuracies"] and one["selected"] == two["selected"]
    assert len(one["fold_accuracies"]) == 8 and len(one["repetition_accuracies"]) == 2
    many, labels = make_csl(graphs_per_class=10, num_nodes=13, seed=2)
    w_paper = MWSP(d=3, k=0).fit(many).distances_
    paper_two = paper_protocol(w_paper, labels, lams=(0.1, 1.0), Cs=(1.0, 100.0), n_jobs=2)
    assert (
        paper_two["fold_accuracies"]
        == paper_protocol(w_paper, labels, lams=(0.1, 1.0), Cs=(1.0, 100.0))["fold_accuracies"]
    )


def test_protocols_name_a_class_too_small_for_the_folds():
    from mwsp_torch import paper_protocol
    from mwsp_torch.evaluation import max_folds

    graphs, y = make_csl(graphs_per_class=8, num_nodes=13, seed=3)  # like Cuneiform: 8 graphs a class
    w = MWSP(d=3, k=0).fit(graphs).distances_
    assert max_folds(y) == 8
    with pytest.raises(ValueError, match="smallest class has 8: pass n_splits=8"):
        paper_protocol(w, y, lams=(1.0,), Cs=(1.0,))
    result = paper_protocol(w, y, lams=(1.0,), Cs=(1.0,), n_splits=8)
    assert result["outer_folds"] == 8 and len(result["fold_accuracies"]) == 8
    # A class of one graph: no number of folds helps, and the message does not suggest one.
    keep = np.r_[np.flatnonzero(y != 0), np.flatnonzero(y == 0)[:1]]
    with pytest.raises(ValueError, match="smallest class has 1, and no number of folds"):
        paper_protocol(w[np.ix_(keep, keep)], y[keep], lams=(1.0,), Cs=(1.0,), n_splits=2)


def test_graphs_of_one_measure_are_solved_once_and_match_reference():
    square = TRAIN[0]
    two_squares = (8, square[1] + [(a + 4, b + 4) for a, b in square[1]], square[2] * 2)  # same measure, twice the mass
    renumbered = (4, [(3, 2), (2, 1), (1, 0), (0, 3)], [1, 0, 1, 0])  # the square, nodes relabelled
    graphs = [square, TRAIN[1], two_squares, TRAIN[2], renumbered]
    model = MWSP(d=2, k=1).fit(datas(graphs))
    assert model.timings_["distinct_measures"] == 3 and model.timings_["pairs"] == 3
    np.testing.assert_allclose(model.distances_, distance_matrix(graphs, 2, 1, "split"), rtol=1e-9, atol=1e-12)
    assert model.distances_[0, 2] == model.distances_[0, 4] == model.distances_[2, 4] == 0.0


def test_measures_are_equal_only_for_proportional_counts():
    # Counts (2, 3) and (1, 1) on the same rows are not one measure; (1, 1) and (2, 2) are.
    graphs = [(5, [], [0, 0, 1, 1, 1]), (2, [], [0, 1]), (4, [], [0, 0, 1, 1])]
    model = MWSP(d=0, k=0).fit(datas(graphs))
    assert model.timings_["distinct_measures"] == 2
    np.testing.assert_allclose(model.distances_, distance_matrix(graphs, 0, 0, "split"), rtol=1e-12)
    assert model.distances_[0, 1] == pytest.approx(0.1 * np.sqrt(2), rel=1e-12)


def test_pipeline_with_a_precomputed_svc_equals_slices_of_the_full_kernel(mutag):
    """``make_pipeline(MWSP(), SVC(kernel="precomputed"))`` in scikit-learn's model
    selection: each fold fits MWSP on its training graphs and transforms its test graphs,
    which must give the SVC the slices of the whole dataset's kernel (W of a pair does not
    depend on the other graphs)."""
    from sklearn.model_selection import GridSearchCV, StratifiedKFold, cross_val_score
    from sklearn.pipeline import make_pipeline
    from sklearn.svm import SVC

    graphs, y = mutag[0][:60], mutag[1][:60]
    folds = list(StratifiedKFold(3, shuffle=True, random_state=0).split(np.zeros(len(y)), y))
    pipeline = make_pipeline(MWSP(d=2, k=0, lam=0.5), SVC(kernel="precomputed", C=10.0))
    scores = cross_val_score(pipeline, graphs, y, cv=folds)
    kernel = MWSP(d=2, k=0, lam=0.5).fit(graphs).kernel()
    expected = [
        SVC(kernel="precomputed", C=10.0)
        .fit(kernel[np.ix_(train, train)], y[train])
        .score(kernel[np.ix_(test, train)], y[test])
        for train, test in folds
    ]
    np.testing.assert_array_equal(scores, expected)
    fitted = make_pipeline(MWSP(d=2, k=0, lam=0.5), SVC(kernel="precomputed")).fit(
        [graphs[i] for i in folds[0][0]], y[folds[0][0]]
    )
    np.testing.assert_allclose(
        fitted[0].transform([graphs[i] for i in folds[0][1]]), kernel[np.ix_(folds[0][1], folds[0][0])], rtol=1e-12
    )
    search = GridSearchCV(pipeline, {"mwsp__lam": [0.1, 1.0], "svc__C": [1.0, 10.0]}, cv=folds).fit(graphs, y)
    w = MWSP(d=2, k=0).fit(graphs).distances_
    for params, mean in zip(search.cv_results_["params"], search.cv_results_["mean_test_score"], strict=True):
        k = np.exp(-params["mwsp__lam"] * w)
        svc = SVC(kernel="precomputed", C=params["svc__C"])
        manual = [svc.fit(k[np.ix_(tr, tr)], y[tr]).score(k[np.ix_(te, tr)], y[te]) for tr, te in folds]
        assert mean == pytest.approx(np.mean(manual), abs=1e-12)


def test_paper_grids_are_the_spec_grids():
    from mwsp_torch.evaluation import PAPER_CS, PAPER_LAMS

    assert PAPER_LAMS == pytest.approx((1e-4, 1e-3, 1e-2, 1e-1, 1.0, 10.0), rel=1e-12)
    assert PAPER_CS == pytest.approx((1e-3, 1e-2, 1e-1, 1.0, 10.0, 100.0, 1000.0), rel=1e-12)


def _svc_accuracy_by_hand(k_fit, y_fit, k_test, y_test, C):
    """``SVC(kernel="precomputed")`` fitted on one kernel block, scored on the test rows'."""
    from sklearn.svm import SVC

    svc = SVC(kernel="precomputed", C=C).fit(k_fit, y_fit)
    return float(np.mean(svc.predict(k_test) == y_test))


def _nested_by_hand(w, y, lams, Cs, seeds, n_outer, n_inner):
    """docs/definition.md, section 5 written out loop by loop: shuffled, seeded outer and inner stratified
    folds; (d, k), then lam, then C, the first best mean inner accuracy wins."""
    from sklearn.model_selection import StratifiedKFold

    def accuracy(k, fit_rows, test_rows, labels, C):
        k_fit, k_test = k[np.ix_(fit_rows, fit_rows)], k[np.ix_(test_rows, fit_rows)]
        return _svc_accuracy_by_hand(k_fit, labels[fit_rows], k_test, labels[test_rows], C)

    folds, selected = [], []
    for seed in seeds:
        outer = StratifiedKFold(n_outer, shuffle=True, random_state=seed)
        for train, test in outer.split(np.zeros(len(y)), y):
            inner = list(StratifiedKFold(n_inner, shuffle=True, random_state=seed).split(train, y[train]))
            best, best_score = None, -1.0
            for key in sorted(w):
                for lam in lams:
                    k_train = np.exp(-lam * w[key][np.ix_(train, train)])
                    for C in Cs:
                        score = sum(accuracy(k_train, a, b, y[train], C) for a, b in inner) / len(inner)
                        if score > best_score:
                            best, best_score = (key, lam, C), score
            key, lam, C = best
            k = np.exp(-lam * w[key])
            all_rows = np.concatenate([train, test])
            fit_rows, test_rows = np.arange(len(train)), np.arange(len(train), len(all_rows))
            folds.append(100.0 * accuracy(k[np.ix_(all_rows, all_rows)], fit_rows, test_rows, y[all_rows], C))
            selected.append({"seed": seed, "d": key[0], "k": key[1], "lam": lam, "C": C})
    return folds, selected


def test_nested_protocol_equals_the_spec_written_out(mutag):
    from mwsp_torch import nested_protocol

    graphs, y = mutag
    w = {(1, 0): MWSP(d=1, k=0).fit(graphs).distances_, (2, 0): MWSP(d=2, k=0).fit(graphs).distances_}
    grid = {"lams": (0.01, 1.0, 10.0), "Cs": (0.1, 1.0, 100.0), "seeds": (0, 3), "n_outer": 3, "n_inner": 3}
    result = nested_protocol(w, y, **grid)
    folds, selected = _nested_by_hand(w, y, **grid)
    assert result["fold_accuracies"] == pytest.approx(folds, abs=1e-12)
    assert result["selected"] == selected
    repetitions = [np.mean(folds[:3]), np.mean(folds[3:])]
    assert result["repetition_accuracies"] == pytest.approx(repetitions, abs=1e-12)
    assert result["accuracy_mean"] == pytest.approx(np.mean(repetitions), abs=1e-12)
    assert result["accuracy_std"] == pytest.approx(np.std(repetitions), abs=1e-12)
    assert result["fold_accuracy_std"] == pytest.approx(np.std(folds), abs=1e-12)


def _spectral_map(k_train, mode):
    """Loosli et al.'s treatment written out: with ``K = U diag(L) U^T`` the treated training
    kernel is ``U diag(f(L)) U^T`` (``f = |.|`` for flip, ``max(., 0)`` for clip), so training
    and test rows alike are multiplied by ``U diag(f(L) / L) U^T``. Returns it and ``L``."""
    values, vectors = np.linalg.eigh(k_train)
    ratio = np.sign(values) if mode == "flip" else (values > 0).astype(np.float64)  # f(L) / L
    return (vectors * ratio) @ vectors.T, values


def _paper_by_hand(w, y, lams, Cs, krein=None, map_test_rows=True):
    """docs/definition.md, section 5's account of the authors' script, loop by loop: ``np.random.seed(42)``,
    shuffled ``StratifiedKFold(10)`` outer folds drawn from numpy's global state, an unshuffled
    ``StratifiedKFold(5)`` on each training fold, lam then C, the first best mean inner accuracy
    wins; ``SVC(kernel="precomputed")``. With ``krein``, every training kernel, an inner
    split's as an outer fold's, is treated from its own graphs (:func:`_spectral_map`), and the
    rows it is scored on take the same map. Returns fold accuracies, selections and the least
    eigenvalue met."""
    from sklearn.model_selection import StratifiedKFold

    least = np.inf

    def treated(k_train, k_test):
        nonlocal least
        if krein is None:
            return k_train, k_test
        projector, values = _spectral_map(k_train, krein)
        least = min(least, values.min())
        return k_train @ projector, (k_test @ projector if map_test_rows else k_test)

    np.random.seed(42)
    outer = StratifiedKFold(n_splits=10, shuffle=True)
    folds, selected = [], []
    for train, test in outer.split(np.zeros(len(y)), y):
        y_train = y[train]
        inner = list(StratifiedKFold(n_splits=5, shuffle=False).split(np.zeros(len(train)), y_train))
        best, best_score = None, -1.0
        for lam in lams:
            k_whole = np.exp(-lam * w[np.ix_(train, train)])
            blocks = []
            for a, b in inner:
                k_fit, k_valid = treated(k_whole[np.ix_(a, a)], k_whole[np.ix_(b, a)])
                blocks.append((k_fit, y_train[a], k_valid, y_train[b]))
            for C in Cs:
                score = sum(_svc_accuracy_by_hand(*block, C) for block in blocks) / len(inner)
                if score > best_score:
                    best, best_score = (lam, C), score
        lam, C = best
        k_train, k_test = treated(np.exp(-lam * w[np.ix_(train, train)]), np.exp(-lam * w[np.ix_(test, train)]))
        folds.append(100.0 * _svc_accuracy_by_hand(k_train, y_train, k_test, y[test], C))
        selected.append({"lam": lam, "C": C})
    return folds, selected, least


@pytest.mark.parametrize("svm,krein", [("svc", None), ("krein", "flip"), ("krein", "clip")])
def test_paper_protocol_equals_the_authors_procedure_written_out(mutag, svm, krein):
    """Folds, selections, mean and std (numpy's, ddof 0, as the script's ``np.std``) of the
    paper protocol against docs/definition.md, section 5 written out. MUTAG's ``exp(-lam W)`` is nearly positive
    semi-definite, so the Krein cases take ``W**2``, whose kernels are far from it (checked),
    and where leaving the test rows unmapped changes the fold accuracies (checked)."""
    from mwsp_torch import paper_protocol

    graphs, y = mutag
    w = MWSP(d=2, k=0).fit(graphs).distances_
    if krein is not None:
        w = w**2
    grid = {"lams": (0.01, 1.0, 10.0), "Cs": (0.1, 1.0, 100.0)}
    result = paper_protocol(w, y, svm=svm, krein=krein or "flip", **grid)
    folds, selected, least = _paper_by_hand(w, y, krein=krein, **grid)
    assert result["fold_accuracies"] == pytest.approx(folds, abs=1e-12)
    assert result["selected"] == selected
    assert result["accuracy_mean"] == pytest.approx(np.mean(folds), abs=1e-12)
    assert result["accuracy_std"] == pytest.approx(np.std(folds), abs=1e-12)
    assert result["svm"] == (svm if krein is None else f"krein-{krein}")
    if krein is not None:
        assert least < -0.01
        assert _paper_by_hand(w, y, krein=krein, map_test_rows=False, **grid)[0] != pytest.approx(folds, abs=1e-9)


@pytest.mark.parametrize("mode", ["flip", "clip"])
def test_krein_fold_maps_test_rows_like_training_rows(mutag, mode):
    """The protocols' Krein kernels for one fold, against :func:`_spectral_map`: the training
    rows and the test rows take the training kernel's map (checked to move them)."""
    from mwsp_torch.evaluation import KernelSVM

    graphs, _ = mutag
    w = MWSP(d=2, k=0).fit(graphs).distances_ ** 2  # exp(-lam W) itself is nearly PSD on MUTAG
    train, test, lam = np.arange(0, len(graphs), 3), np.arange(1, len(graphs), 3), 0.1
    k_train, k_test = KernelSVM({None: w}, "krein", mode).fold(None, lam, train, test)
    projector, values = _spectral_map(np.exp(-lam * w[np.ix_(train, train)]), mode)
    raw_train, raw_test = np.exp(-lam * w[np.ix_(train, train)]), np.exp(-lam * w[np.ix_(test, train)])
    assert values.min() < -0.01
    np.testing.assert_allclose(k_train, raw_train @ projector, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(k_test, raw_test @ projector, rtol=1e-10, atol=1e-12)
    assert np.abs(raw_test @ projector - raw_test).max() > 0.01


@pytest.mark.parametrize("svm", ["svc", "krein"])
def test_inner_split_kernels_ignore_the_graphs_they_validate_on(mutag, svm):
    """An inner split is treated as an outer fold is: its training kernel (Krein's projector
    included) comes from its training graphs alone, so distances among its validation graphs
    cannot change it, and the validation rows take that split's own map."""
    from mwsp_torch.evaluation import KernelSVM

    graphs, _ = mutag
    w = MWSP(d=2, k=0).fit(graphs).distances_ ** 2  # exp(-lam W) itself is nearly PSD on MUTAG
    train, lam = np.arange(150), 0.1
    splits = [(np.arange(0, 150, 2), np.arange(1, 150, 2)), (np.arange(1, 150, 2), np.arange(0, 150, 2))]
    moved = w.copy()
    valid = train[splits[0][1]]
    moved[np.ix_(valid, valid)] *= 3  # only distances among the first split's validation graphs
    before = list(KernelSVM({None: w}, svm, "flip").inner(None, lam, train, splits))
    after = list(KernelSVM({None: moved}, svm, "flip").inner(None, lam, train, splits))
    np.testing.assert_array_equal(before[0][0], after[0][0])
    np.testing.assert_array_equal(before[0][1], after[0][1])
    assert np.abs(before[1][0] - after[1][0]).max() > 0.01  # the other split trains on those graphs
    for (a, b), (k_fit, k_valid) in zip(splits, before, strict=True):
        expected = KernelSVM({None: w}, svm, "flip").fold(None, lam, train[a], train[b])
        np.testing.assert_array_equal(k_fit, expected[0])
        np.testing.assert_array_equal(k_valid, expected[1])


def test_sinkhorn_transform_does_not_depend_on_the_other_new_graphs(mutag):
    """Sinkhorn's schedule starts from the training rows' diameter: a new graph's row of W is
    the same alone or beside others (it was not, by 3e-4, when the call's own rows counted),
    and fit's values are those of the whole bank's diameter, as before."""
    from mwsp_torch.transport import sinkhorn_distances, upper_pairs

    graphs = mutag[0]
    model = MWSP(d=2, k=0, solver=Sinkhorn(blur=0.01, scaling=0.9)).fit(graphs[:20])
    alone = model.cross_distances(graphs[20:21])[0]
    together = model.cross_distances(graphs[20:30])
    np.testing.assert_allclose(together[0], alone, rtol=1e-12, atol=0)
    pairs = upper_pairs(20)
    whole_bank = sinkhorn_distances(model.support_, model.support_, pairs, blur=0.01, scaling=0.9)
    np.testing.assert_allclose(model.distances_[pairs[:, 0], pairs[:, 1]], whole_bank, rtol=1e-12, atol=0)


def test_sinkhorn_fit_measures_its_error_against_exact(mutag):
    """docs/definition.md, section 4: Sinkhorn says how far it is from W at its blur. With a check of every pair,
    the reported figures are those of the two whole matrices."""
    graphs = mutag[0][:12]
    exact = MWSP(d=2, k=0).fit(graphs).distances_
    model = MWSP(d=2, k=0, solver=Sinkhorn(blur=0.05, scaling=0.9, check_pairs=1000)).fit(graphs)
    iu = np.triu_indices(len(graphs), 1)
    assert model.timings_["distinct_measures"] == len(graphs)  # so the check's pairs are these
    gap = np.abs(model.distances_[iu] - exact[iu])
    relative = gap / exact[iu]
    report = model.sinkhorn_error_
    assert report["pairs"] == len(iu[0]) and report["blur"] == 0.05 and report["scaling"] == 0.9
    np.testing.assert_allclose(report["median_relative"], np.median(relative), rtol=1e-12)
    np.testing.assert_allclose(report["max_relative"], relative.max(), rtol=1e-12)
    np.testing.assert_allclose(report["max_absolute"], gap.max(), rtol=1e-12)
    assert model.timings_["sinkhorn_median_relative_error"] == report["median_relative"]
    # A sample: 10 of the 66 pairs, its error no larger than the whole's; blur 1.0 errs 9x more (measured).
    sample = MWSP(d=2, k=0, solver=Sinkhorn(blur=0.05, scaling=0.9, check_pairs=10)).fit(graphs)
    assert sample.sinkhorn_error_["pairs"] == sample.timings_["sinkhorn_check_pairs"] == 10
    assert 0 < sample.sinkhorn_error_["max_relative"] <= relative.max()
    coarse = MWSP(d=2, k=0, solver=Sinkhorn(blur=1.0, scaling=0.9)).fit(graphs)
    assert coarse.sinkhorn_error_["median_relative"] > 5 * report["median_relative"]
    assert MWSP(d=2, k=0, solver=Sinkhorn(check_pairs=0)).fit(graphs[:3]).sinkhorn_error_ is None
    assert MWSP(d=2, k=0).fit(graphs[:3]).sinkhorn_error_ is None
    for bad in (-1, True, 2.5):
        with pytest.raises(ValueError, match="check_pairs must be an integer >= 0"):
            MWSP(solver=Sinkhorn(check_pairs=bad)).fit(graphs[:3])


@pytest.mark.parametrize(
    "name,value",
    [("d", 3), ("k", 1), ("paths", "all"), ("labels", "degree"), ("solver", "sinkhorn")],
)
def test_transform_refuses_settings_changed_since_fit(name, value):
    model = MWSP(d=2, k=0).fit(datas(TRAIN))
    expected = model.transform(datas(NEW))
    model.set_params(**{name: value})
    with pytest.raises(ValueError, match=f"{name} is {value!r} but the model was fitted with"):
        model.transform(datas(NEW))
    model.set_params(**{name: MWSP().get_params()[name]})  # set back: no refit needed
    np.testing.assert_array_equal(model.transform(datas(NEW)), expected)
    # What W does not depend on may change freely.
    model.set_params(lam=2.0, n_jobs=1, solver=Exact(engine="thread"), progress=False)
    np.testing.assert_allclose(model.transform(datas(NEW)), expected**2, rtol=1e-12)


def test_sinkhorn_blur_changed_since_fit_is_refused():
    model = MWSP(solver=Sinkhorn(blur=0.05, scaling=0.9)).fit(datas(TRAIN))
    model.set_params(solver__blur=0.1)
    with pytest.raises(ValueError, match="blur is 0.1 but the model was fitted with 0.05"):
        model.transform(datas(NEW))


def test_device_is_checked_before_any_work(monkeypatch):
    for device in ("tpu", "bogus", 3):
        with pytest.raises(ValueError, match="device must be"):
            MWSP(solver="sinkhorn", device=device).fit(datas(TRAIN))
    with pytest.raises(ValueError, match="device must be"):
        MWSP(device="bogus").fit(datas(TRAIN))  # parsed even where unused
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    for options in ({"solver": "sinkhorn"},):
        with pytest.raises(ValueError, match="torch sees no CUDA device"):
            MWSP(device="cuda", **options).fit(datas(TRAIN))
    # The compiled engine runs on the CPU whatever device says; the default ("auto") falls
    # back to it, with a warning, where the CUDA device cannot be used.
    cpu = MWSP().fit(datas(TRAIN)).distances_
    compiled = MWSP(device="cuda:1", solver=Exact(engine="compiled"))
    np.testing.assert_array_equal(compiled.fit(datas(TRAIN)).distances_, cpu)
    with pytest.warns(ExactEngineFallbackWarning, match="device='cuda:1', but torch sees no usable CUDA device"):
        np.testing.assert_array_equal(MWSP(device="cuda:1").fit(datas(TRAIN)).distances_, cpu)


def test_sinkhorn_backend_reaches_the_solver():
    with pytest.raises(ValueError, match="backend must be one of"):
        MWSP(solver=Sinkhorn(backend="keops")).fit(datas(TRAIN))
    with pytest.raises(ValueError, match="runs on a CUDA device, not device="):  # Triton asked for on a CPU
        MWSP(solver=Sinkhorn(backend="triton")).fit(datas(TRAIN))
    options = dict(blur=0.05, scaling=0.9, check_pairs=0)
    fused = MWSP(solver=Sinkhorn(backend="fused", **options)).fit(datas(TRAIN)).distances_
    geomloss = MWSP(solver=Sinkhorn(backend="tensorized", **options)).fit(datas(TRAIN)).distances_
    np.testing.assert_allclose(geomloss, fused, rtol=1e-9, atol=1e-12)


def test_an_interrupted_refit_leaves_the_previous_fit_whole(mutag, monkeypatch):
    """Ctrl-C during a refit (here in the transport, after the new vocabularies are built)
    must leave the old fit usable as it was, not new vocabularies beside the old W."""
    from sklearn.exceptions import NotFittedError
    from sklearn.utils.validation import check_is_fitted

    graphs = mutag[0]
    model = MWSP(d=1, k=0).fit(graphs[:10])
    before = {name: value for name, value in vars(model).items() if name.endswith("_")}
    expected = model.cross_distances(graphs[10:13])

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(MWSP, "_distances", interrupted)
    with pytest.raises(KeyboardInterrupt):
        model.fit(graphs[:40])
    after = {name: value for name, value in vars(model).items() if name.endswith("_")}
    assert after.keys() == before.keys() and all(after[name] is before[name] for name in before)
    fresh = MWSP(d=1, k=0)
    with pytest.raises(KeyboardInterrupt):
        fresh.fit(graphs[:5])
    with pytest.raises(NotFittedError):
        check_is_fitted(fresh)
    monkeypatch.undo()
    np.testing.assert_array_equal(model.cross_distances(graphs[10:13]), expected)
    assert model.cross_distances(graphs[10:13]).shape == (3, 10)
