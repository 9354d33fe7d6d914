"""Nystroem features: exact at m = n, exact on landmark rows, scikit-learn pipelines, bad input."""

import importlib

import numpy as np
import pytest
from sklearn.base import clone
from sklearn.linear_model import LogisticRegression
from sklearn.pipeline import make_pipeline

from mwsp_torch import MWSP, MWSPNystroem

from random_graphs import random_graphs

GRAPHS = random_graphs(24, seed=0)


def test_all_graphs_as_landmarks_give_the_full_kernel():
    # lam large enough that exp(-lam W) is positive definite on these graphs (asserted below),
    # so at m = n the features are K^(1/2) in the landmarks' order and their Gram matrix is K.
    full = MWSP(d=2, k=1, lam=2.0).fit(GRAPHS).kernel()
    nys = MWSPNystroem(mwsp=MWSP(d=2, k=1), n_components=len(GRAPHS), lam=2.0, random_state=0).fit(GRAPHS)
    assert nys.dropped_eigenvalues_ == 0
    features = nys.transform(GRAPHS)
    np.testing.assert_allclose(features @ features.T, full, rtol=0, atol=1e-10)
    order = nys.landmark_indices_
    eigenvalues, vectors = np.linalg.eigh(full[np.ix_(order, order)])
    root = (vectors * np.sqrt(eigenvalues)) @ vectors.T
    np.testing.assert_allclose(features[order], root, rtol=0, atol=1e-10)


@pytest.mark.parametrize("landmarks", ["random", "kmeans++"])
def test_landmark_rows_are_exact_and_the_rest_approximate(landmarks):
    full = MWSP(d=2, k=0, lam=2.0).fit(GRAPHS).kernel()
    nys = MWSPNystroem(mwsp=MWSP(d=2, k=0), n_components=8, landmarks=landmarks, lam=2.0, random_state=3).fit(GRAPHS)
    order = nys.landmark_indices_
    assert len(order) == 8 and len(set(order.tolist())) == 8
    features = nys.transform(GRAPHS)
    assert features.shape == (len(GRAPHS), 8)
    approx = features @ features.T
    # A landmark's features reproduce its kernel row against every graph (K(L, L) is inverted exactly).
    np.testing.assert_allclose(approx[order], full[order], rtol=0, atol=1e-10)
    # Elsewhere an approximation from below: with K positive definite, K - phi phi^T is the Schur
    # complement of K(L, L), positive semi-definite and zero on the landmarks' rows (a wrong
    # normalisation, say S^-1 for S^-1/2, breaks both).
    residual = full - approx
    assert np.linalg.eigvalsh(full).min() > 0
    assert np.linalg.eigvalsh(residual).min() > -1e-10
    others = np.setdiff1d(np.arange(len(GRAPHS)), order)
    assert residual[others, others].min() > 1e-6  # 8 landmarks cannot give 16 further graphs exactly


def test_same_seed_same_landmarks_and_features():
    a = MWSPNystroem(n_components=6, landmarks="kmeans++", random_state=7).fit(GRAPHS)
    b = MWSPNystroem(n_components=6, landmarks="kmeans++", random_state=7).fit(GRAPHS)
    assert np.array_equal(a.landmark_indices_, b.landmark_indices_)
    assert np.array_equal(a.transform(GRAPHS[:5]), b.transform(GRAPHS[:5]))


@pytest.mark.parametrize("landmarks", ["random", "kmeans++"])
def test_a_tuple_of_scales_puts_each_scale_s_features_side_by_side(landmarks):
    both = MWSPNystroem(n_components=8, landmarks=landmarks, lam=(0.5, 2.0), random_state=4).fit(GRAPHS)
    features = both.transform(GRAPHS)
    assert features.shape == (len(GRAPHS), 16) and both.normalization_.shape == (2, 8, 8)
    if landmarks == "random":  # the same draw whatever lam: each block is that scale's transformer
        for block, lam in zip((features[:, :8], features[:, 8:]), (0.5, 2.0), strict=True):
            one = MWSPNystroem(n_components=8, lam=lam, random_state=4).fit(GRAPHS)
            assert np.array_equal(one.landmark_indices_, both.landmark_indices_)
            np.testing.assert_allclose(block, one.transform(GRAPHS), rtol=0, atol=1e-12)
    # On the landmarks' rows the Gram matrix is the sum kernel, exactly (both scales' K(L, L)
    # positive definite on these graphs, as asserted).
    w = MWSP(d=2, k=0).fit(GRAPHS).distances_
    order = both.landmark_indices_
    assert both.dropped_eigenvalues_ == 0
    summed = np.exp(-0.5 * w) + np.exp(-2.0 * w)
    np.testing.assert_allclose((features @ features.T)[order], summed[order], rtol=0, atol=1e-10)


def test_one_scale_keeps_its_shapes_and_a_fit_keeps_its_scales():
    one = MWSPNystroem(n_components=6, lam=0.5, random_state=1).fit(GRAPHS)
    assert one.normalization_.shape == (6, 6) and one.eigenvalues_.shape == (6,) and one.lams_ == 0.5
    before = one.transform(GRAPHS[:4])
    one.set_params(lam=(0.5, 2.0))  # not fitted yet: transform keeps the fitted scale
    assert np.array_equal(one.transform(GRAPHS[:4]), before)


def test_kmeans_plus_plus_draws_by_the_distance_summed_over_the_scales():
    # The draw replayed from the full W: each next landmark with probability proportional to
    # min over landmarks of sum_s (2 - 2 exp(-s W)); one scale's distance would draw others.
    lams, m = (0.5, 4.0), 6
    w = MWSP(d=2, k=0).fit(GRAPHS).distances_
    rng = np.random.default_rng(9)
    chosen = [int(rng.integers(len(GRAPHS)))]
    nearest = np.full(len(GRAPHS), np.inf)
    for _ in range(m - 1):
        sq = sum(2.0 - 2.0 * np.exp(-lam * w[:, chosen[-1]]) for lam in lams)
        nearest = np.minimum(nearest, np.maximum(sq, 0.0))
        nearest[chosen] = 0.0
        chosen.append(int(rng.choice(len(GRAPHS), p=nearest / nearest.sum())))
    fitted = MWSPNystroem(n_components=m, landmarks="kmeans++", lam=lams, random_state=9).fit(GRAPHS)
    assert fitted.landmark_indices_.tolist() == chosen


@pytest.mark.parametrize(
    "lam,message",
    [
        ((), "empty tuple of scales"),
        ((0.5, 0.5), "repeats a scale"),
        ((0.5, -1.0), r"lam\[1\] must be a number > 0"),
        ((0.5, [1.0]), r"lam\[1\] must be a number > 0"),
        (np.array([0.5, 1.0]), "a number > 0 or a tuple or list"),
    ],
)
def test_bad_scales_are_refused_before_any_work(lam, message, monkeypatch):
    monkeypatch.setattr(MWSP, "fit", lambda *a, **k: (_ for _ in ()).throw(AssertionError("work started")))
    with pytest.raises(ValueError, match=message):
        MWSPNystroem(n_components=5, lam=lam).fit(GRAPHS)


def test_kmeans_plus_plus_never_picks_a_copy_of_a_landmark():
    # Six copies of one graph and three distinct others: after the first landmark, a copy of a
    # chosen graph is at feature-space distance 0, so k-means++ must take the distinct ones.
    base = random_graphs(4, seed=5)
    graphs = [base[0]] * 6 + base[1:]
    for seed in range(5):
        nys = MWSPNystroem(n_components=4, landmarks="kmeans++", random_state=seed).fit(graphs)
        kernel = MWSP().fit([graphs[i] for i in nys.landmark_indices_]).distances_
        off_diagonal = kernel[~np.eye(4, dtype=bool)]
        assert (off_diagonal > 0).all(), nys.landmark_indices_


def test_in_a_pipeline_with_a_linear_classifier():
    y = np.array([int(g.num_nodes > 6) for g in GRAPHS])
    pipe = make_pipeline(MWSPNystroem(MWSP(), n_components=10, random_state=0), LogisticRegression(max_iter=1000))
    pipe.fit(GRAPHS, y)
    assert pipe.predict(GRAPHS).shape == (len(GRAPHS),)
    copy = clone(pipe)
    copy.set_params(mwspnystroem__n_components=5, mwspnystroem__mwsp__d=3)
    assert copy.get_params()["mwspnystroem__n_components"] == 5
    assert copy.fit(GRAPHS, y).named_steps["mwspnystroem"].model_.d == 3


@pytest.mark.parametrize(
    "params,message",
    [
        ({"n_components": 0}, "n_components must be an integer >= 1"),
        ({"n_components": 25}, "n_components=25 landmarks cannot be drawn from 24 training graphs"),
        ({"n_components": 2.5}, "n_components must be an integer"),
        ({"landmarks": "farthest"}, "landmarks must be one of"),
        ({"eigen_tol": 0}, "eigen_tol must be in"),
        ({"random_state": -1}, "random_state must be None or an integer"),
        ({"mwsp": MWSP(d=-1)}, "d must be an integer >= 0"),
        ({"mwsp": MWSP(lam=0)}, "mwsp.lam must be a number > 0"),
        ({"mwsp": "MWSP"}, "mwsp must be an MWSP or None, got str"),
    ],
)
def test_bad_parameters_fail_before_any_work(params, message, monkeypatch):
    def no_work(*args, **kwargs):
        raise AssertionError("fit started transport before checking its parameters")

    monkeypatch.setattr(MWSP, "fit", no_work)
    with pytest.raises(ValueError, match=message):
        MWSPNystroem(**{"n_components": 5, **params}).fit(GRAPHS)


# The nested protocol on Nystroem features.
PROTOCOL_GRAPHS = random_graphs(40, seed=2)
PROTOCOL_Y = np.array([int(g.num_nodes > 5) for g in PROTOCOL_GRAPHS])
PROTOCOL = {"lams": (0.5, 2.0), "Cs": (1.0, 10.0), "seeds": (0, 1), "n_outer": 3, "n_inner": 2}


@pytest.fixture(scope="module")
def protocol_w():
    return MWSP(d=2, k=0).fit(PROTOCOL_GRAPHS).distances_


def test_landmarks_never_come_from_the_graphs_a_fold_scores(protocol_w, monkeypatch):
    from sklearn.model_selection import StratifiedKFold

    # The module, not the function of the same name that mwsp_torch exports.
    module = importlib.import_module("mwsp_torch.evaluation.nystroem")

    calls = []

    def recorded(order, train, m):
        chosen = fold_landmarks(order, train, m)
        calls.append((np.sort(train), chosen))
        return chosen

    fold_landmarks = module.fold_landmarks
    monkeypatch.setattr(module, "fold_landmarks", recorded)
    y = PROTOCOL_Y
    result = module.nystroem_protocol({(2, 0): protocol_w}, y, 6, **PROTOCOL, n_jobs=1)  # in this process: recorded
    # The folds nested_protocol draws; per outer fold: its inner splits, then the outer fit.
    expected = []
    for seed in PROTOCOL["seeds"]:
        outer = StratifiedKFold(3, shuffle=True, random_state=seed).split(np.zeros(len(y)), y)
        for train, test in outer:
            inner = StratifiedKFold(2, shuffle=True, random_state=seed).split(np.zeros(len(train)), y[train])
            expected += [(np.sort(train[it]), np.sort(train[iv])) for it, iv in inner]
            expected.append((np.sort(train), np.sort(test)))
    assert len(calls) == len(expected) == 2 * 3 * 3
    for (train_seen, chosen), (train, scored) in zip(calls, expected, strict=True):
        assert np.array_equal(train_seen, train)
        assert len(chosen) == 6 and np.isin(chosen, train).all()
        assert not np.isin(chosen, scored).any()
    outer_tests = [scored for i, (_, scored) in enumerate(expected) if i % 3 == 2]
    for landmarks, test in zip(result["landmarks"], outer_tests, strict=True):
        assert not np.isin(landmarks, test).any()
    assert len(result["fold_accuracies"]) == 6 and result["protocol"] == "nystroem-nested"


def test_distances_to_the_pool_alone_give_the_same_result(protocol_w):
    from mwsp_torch.evaluation.nystroem import landmark_distances, landmark_pool, nystroem_protocol

    pool = landmark_pool(PROTOCOL_Y, 6, PROTOCOL["seeds"], PROTOCOL["n_outer"], PROTOCOL["n_inner"])
    assert 6 < len(pool) < len(PROTOCOL_Y)
    w_pool = landmark_distances(PROTOCOL_GRAPHS, pool, d=2, k=0, n_jobs=1)
    np.testing.assert_allclose(w_pool, protocol_w[:, pool], rtol=0, atol=1e-12)
    full = nystroem_protocol({(2, 0): protocol_w}, PROTOCOL_Y, 6, **PROTOCOL)
    pooled = nystroem_protocol({(2, 0): protocol_w[:, pool]}, PROTOCOL_Y, 6, pool=pool, **PROTOCOL)
    assert pooled["fold_accuracies"] == full["fold_accuracies"]
    assert pooled["selected"] == full["selected"] and pooled["landmarks"] == full["landmarks"]
    with pytest.raises(ValueError, match="is a landmark but not in the pool"):
        nystroem_protocol({(2, 0): protocol_w[:, pool[1:]]}, PROTOCOL_Y, 6, pool=pool[1:], **PROTOCOL)


def test_the_protocol_features_are_the_transformer_features(protocol_w):
    # The outer fold's features, as the protocol builds them from W, against MWSPNystroem's
    # from the graphs, with the same landmarks (MWSPNystroem draws its own: use all of them).
    from mwsp_torch.evaluation.nystroem import PoolFeatures

    landmarks = np.arange(10, 20)
    nys = MWSPNystroem(mwsp=MWSP(d=2, k=0), n_components=10, lam=0.5, random_state=0).fit(
        [PROTOCOL_GRAPHS[i] for i in landmarks]
    )
    features, _ = PoolFeatures(protocol_w, np.arange(40), 40, 1e-12)(
        np.arange(40), landmarks[nys.landmark_indices_], 0.5
    )
    np.testing.assert_allclose(features, nys.transform(PROTOCOL_GRAPHS), rtol=0, atol=1e-9)


def test_the_protocol_takes_a_tuple_of_scales_as_one_candidate(protocol_w):
    from mwsp_torch.evaluation.nystroem import PoolFeatures, nystroem_protocol

    pool_features = PoolFeatures(protocol_w, np.arange(40), 40, 1e-12)
    rows, landmarks = np.arange(40), np.arange(5, 15)
    both, dropped = pool_features(rows, landmarks, (0.5, 2.0))
    halves = [pool_features(rows, landmarks, lam) for lam in (0.5, 2.0)]
    assert np.array_equal(both, np.hstack([halves[0][0], halves[1][0]]))
    assert dropped == halves[0][1] + halves[1][1]
    only = nystroem_protocol({(2, 0): protocol_w}, PROTOCOL_Y, 6, **{**PROTOCOL, "lams": [(0.5, 2.0)]})
    assert all(s["lam"] == (0.5, 2.0) for s in only["selected"]) and only["grid"]["lam"] == [(0.5, 2.0)]
    # A tuple is one candidate beside the single scales: the grid keeps it whole, and a fold
    # that selects it scores what a grid of that tuple alone scores there.
    mixed = nystroem_protocol({(2, 0): protocol_w}, PROTOCOL_Y, 6, **{**PROTOCOL, "lams": [0.5, (0.5, 2.0)]})
    assert mixed["grid"]["lam"] == [0.5, (0.5, 2.0)]
    for fold, selected in enumerate(mixed["selected"]):
        if selected["lam"] == (0.5, 2.0) and selected["C"] == only["selected"][fold]["C"]:
            assert mixed["fold_accuracies"][fold] == only["fold_accuracies"][fold]


@pytest.mark.parametrize(
    "kwargs,message",
    [
        ({"lams": [0.5, (0.5, "x")]}, r"lams\[1\]\[1\] must be a number > 0"),
        ({"lams": [()]}, r"lams\[0\] is an empty tuple"),
        ({"n_components": 30}, "landmarks cannot be drawn from a training set of"),
        ({"n_components": 0}, "n_components must be an integer >= 1"),
        ({"lams": ()}, "lams is empty: give at least one value"),
        ({"seeds": (1, 1)}, "seeds must differ"),
        ({"pool": np.arange(39)}, r"expected \[n, p\] = \[40, 39\]"),
        ({"pool": np.r_[np.arange(39), -1]}, r"pool holds index -1, outside 0..39"),
        ({"pool": np.r_[np.arange(39), 0]}, "pool must be a 1-D array of distinct graph indices"),
    ],
)
def test_the_protocol_refuses_bad_input(protocol_w, kwargs, message):
    from mwsp_torch.evaluation.nystroem import nystroem_protocol

    args = {**PROTOCOL, "n_components": 6, **kwargs}
    with pytest.raises(ValueError, match=message):
        nystroem_protocol({(2, 0): protocol_w}, PROTOCOL_Y, **args)


def test_the_protocol_reads_beta_settings_and_refuses_other_keys(protocol_w):
    from mwsp_torch.evaluation.nystroem import nystroem_protocol

    args = {**PROTOCOL, "n_components": 6}
    result = nystroem_protocol({(2, 0, 0.5): protocol_w, (2, 0, 2.0): protocol_w}, PROTOCOL_Y, **args)
    assert all(s["beta"] in (0.5, 2.0) for s in result["selected"])  # the weight chosen, recorded
    with pytest.raises(ValueError, match="distances keys must be"):
        nystroem_protocol({(2, -1): protocol_w}, PROTOCOL_Y, **args)


def _plain_nystroem(distances, y, m, lams, Cs, seeds, n_outer, n_inner):
    """The Nystroem protocol as one plain loop, every fit made: first best sum in grid order."""
    from sklearn.svm import LinearSVC

    from mwsp_torch.evaluation import nested_folds
    from mwsp_torch.evaluation.nystroem import MAX_ITER, PoolFeatures, fold_landmarks, landmark_order

    keys = sorted(distances)
    features = {key: PoolFeatures(distances[key], np.arange(len(y)), len(y), 1e-12) for key in keys}

    def accuracy(phi, labels, train, test, C):
        model = LinearSVC(C=C, dual=False, max_iter=MAX_ITER).fit(phi[train], labels[train])
        return float(np.mean(model.predict(phi[test]) == labels[test]))

    selected, accuracies = [], []
    for seed, train, test, splits in nested_folds(y, seeds, n_outer, n_inner):
        order = landmark_order(len(y), seed)
        sums = np.zeros((len(keys), len(lams), len(Cs)))
        for inner_train, inner_valid in splits:
            chosen = fold_landmarks(order, train[inner_train], m)
            for a, key in enumerate(keys):
                for b, lam in enumerate(lams):
                    phi, _ = features[key](train, chosen, lam)
                    for c, C in enumerate(Cs):
                        sums[a, b, c] += accuracy(phi, y[train], inner_train, inner_valid, C)
        a, b, c = np.unravel_index(int(np.argmax(sums)), sums.shape)
        rows = np.concatenate([train, test])
        phi, _ = features[keys[a]](rows, fold_landmarks(order, train, m), lams[b])
        at = np.arange(len(rows))
        accuracies.append(100.0 * accuracy(phi, y[rows], at[: len(train)], at[len(train) :], Cs[c]))
        selected.append({"seed": seed, "d": keys[a][0], "k": keys[a][1], "lam": lams[b], "C": Cs[c]})
    return selected, accuracies


@pytest.mark.parametrize("n_jobs", [1, 2])
def test_the_protocol_selects_what_every_fit_would_select_with_fewer_fits(n_jobs):
    from mwsp_torch.evaluation.nystroem import nystroem_protocol

    graphs = random_graphs(60, seed=21, max_nodes=10)
    y = np.array([int(g.num_nodes > 7) for g in graphs])  # learnable: weak C fall well below the best
    distances = {(d, 0): MWSP(d=d, k=0).fit(graphs).distances_ for d in (1, 2)}
    grid = {"lams": (0.1, 0.5, 2.0), "Cs": (1e-3, 1e-1, 1.0, 10.0), "seeds": (0, 1), "n_outer": 3, "n_inner": 5}
    selected, accuracies = _plain_nystroem(distances, y, 10, **grid)
    result = nystroem_protocol(distances, y, 10, **grid, n_jobs=n_jobs)
    assert result["selected"] == selected
    assert result["fold_accuracies"] == accuracies
    every_fit = 2 * 3 * (5 * 2 * 3 * 4 + 1)  # folds x (inner splits x settings x lams x Cs + the outer fit)
    # Folds running side by side start from an older winner, so they cut less.
    assert result["svm_fits"] < (0.9 if n_jobs == 1 else 1.0) * every_fit
