"""The protocols refuse bad y, W, grids, keys and seeds with a ValueError that names the problem
(docs/definition.md, section 5)."""

import re

import numpy as np
import pytest
import torch

from mwsp_torch import nested_protocol, paper_protocol

GRID = {"lams": (0.1, 1.0), "Cs": (1.0, 10.0)}
NESTED = {"seeds": (0, 1), "n_outer": 4, "n_inner": 3}


def points_distances(seed: int = 0, per_class: int = 20) -> tuple[np.ndarray, np.ndarray]:
    """Euclidean distances of two overlapping Gaussian clouds, classes interleaved: ``(W, y)``."""
    rng = np.random.default_rng(seed)
    y = np.tile([0, 1], per_class)
    x = rng.normal(size=(len(y), 3))
    x[y == 1, 0] += 2.0
    return np.sqrt(((x[:, None] - x[None]) ** 2).sum(-1)), y


W, Y = points_distances(0)
W2, _ = points_distances(1)


def paper(w=W, y=Y, **kwargs):
    return paper_protocol(w, y, **{**GRID, **kwargs})


def nested(distances=None, y=Y, **kwargs):
    distances = {(1, 0): W, (2, 0): W2} if distances is None else distances
    return nested_protocol(distances, y, **{**GRID, **NESTED, **kwargs})


def with_entry(w, i, j, value, symmetric=True):
    w = w.copy()
    w[i, j] = value
    if symmetric:
        w[j, i] = value
    return w


# Valid input: what it always gave (captured before the checks were added).


@pytest.mark.parametrize("as_y", [np.asarray, list, torch.tensor], ids=["numpy", "list", "torch"])
def test_valid_y_gives_the_accuracies_it_always_did(as_y):
    result = paper(y=as_y(Y))
    assert result["fold_accuracies"] == [75.0, 100.0, 100.0, 50.0, 50.0, 75.0, 100.0, 100.0, 100.0, 100.0]
    assert result["accuracy_mean"] == 85.0
    assert result["majority_rate"] == 50.0
    result = nested(y=as_y(Y))
    assert result["fold_accuracies"] == [90.0, 100.0, 70.0, 80.0, 70.0, 70.0, 80.0, 90.0]
    assert result["accuracy_mean"] == 81.25
    picked = [(s["d"], s["lam"], s["C"]) for s in result["selected"]]
    assert picked[:3] == [(2, 0.1, 1.0), (2, 0.1, 1.0), (1, 0.1, 10.0)]


# 1. y is 1-D: a column would broadcast (m,) == (m, 1) to m x m and score 50 %.


@pytest.mark.parametrize(
    "column",
    [Y[:, None], torch.tensor(Y)[:, None], [[label] for label in Y], Y[None, :]],
    ids=["numpy", "torch", "list", "row"],
)
@pytest.mark.parametrize("protocol", [paper, nested])
def test_column_y_is_refused_not_broadcast(protocol, column):
    shape = re.escape(str(tuple(np.shape(np.asarray(column)))))
    with pytest.raises(ValueError, match=rf"y must be 1-D with one label per graph, got shape {shape}; .*y\.ravel\(\)"):
        protocol(y=column)


def test_two_label_columns_get_no_ravel_hint():
    with pytest.raises(ValueError, match=r"got shape \(40, 2\)$"):
        paper(y=np.stack([Y, Y], axis=1))


@pytest.mark.parametrize("protocol", [paper, nested])
def test_y_of_one_class_empty_or_nan_is_refused(protocol):
    with pytest.raises(ValueError, match=r"y has a single class \(0\): the protocol needs at least 2 classes"):
        protocol(y=np.zeros(len(Y), dtype=np.int64))
    with pytest.raises(ValueError, match="y is empty: give one label per graph"):
        protocol(y=[])
    with pytest.raises(ValueError, match="y must hold finite labels, got nan at index 7"):
        protocol(y=np.where(np.arange(len(Y)) == 7, np.nan, Y.astype(float)))


# 2. W is [len(y), len(y)], real, finite, >= 0 and symmetric.


@pytest.mark.parametrize(
    "w, y, message",
    [
        (W, Y[:30], "distances is 40 x 40 but y has 30 labels"),  # used to score a 30 x 30 block silently
        (W[:30, :30], Y, "distances is 30 x 30 but y has 40 labels"),
        (W[:, :30], Y, r"distances must be a square \[n, n\] matrix, got shape \(40, 30\)"),
        (W.ravel(), Y, r"distances must be a square \[n, n\] matrix, got shape \(1600,\)"),
        (W > 1, Y, "distances must be a matrix of real numbers, got dtype bool"),
    ],
    ids=["larger", "smaller", "non-square", "flat", "bool"],
)
def test_paper_w_must_match_y(w, y, message):
    with pytest.raises(ValueError, match=message):
        paper(w=w, y=y)


def test_nested_ws_must_all_match_y_and_be_named():
    with pytest.raises(ValueError, match=r"distances\[\(2, 0\)\] is 30 x 30 but y has 40 labels"):
        nested({(1, 0): W, (2, 0): W2[:30, :30]})
    with pytest.raises(ValueError, match=r"distances\[\(1, 0\)\] is 40 x 40 but y has 30 labels"):
        nested({(1, 0): W, (2, 0): W2}, y=Y[:30])


@pytest.mark.parametrize(
    "value, shown", [(-1.0, "-1.0"), (np.nan, "nan"), (np.inf, "inf")], ids=["negative", "nan", "inf"]
)
def test_impossible_distances_are_refused_with_their_place(value, shown):
    with pytest.raises(ValueError, match=rf"distances must be finite and >= 0, got {shown} at W\[3, 5\]"):
        paper(w=with_entry(W, 3, 5, value))
    with pytest.raises(ValueError, match=rf"distances\[\(2, 0\)\] must be finite and >= 0, got {shown} at W\[3, 5\]"):
        nested({(1, 0): W, (2, 0): with_entry(W2, 3, 5, value)})


def test_asymmetric_w_is_refused():
    asymmetric = with_entry(W, 3, 5, W[3, 5] + 0.5, symmetric=False)
    with pytest.raises(ValueError, match=r"distances must be symmetric, but W\[3, 5\] = .* and W\[5, 3\] = "):
        paper(w=asymmetric)
    with pytest.raises(ValueError, match=r"distances\[\(1, 0\)\] must be symmetric, but W\[(3, 5|5, 3)\]"):
        nested({(1, 0): asymmetric, (2, 0): W2})
    # Barely past the tolerance (1e-9 of max W) is refused too.
    barely = with_entry(W, 3, 5, W[3, 5] + 2e-9 * W.max(), symmetric=False)
    with pytest.raises(ValueError, match="must be symmetric"):
        paper(w=barely, lams=(1.0,), Cs=(1.0,))


def test_rounding_level_asymmetry_is_accepted_unchanged():
    nearly = W * (1 + 1e-13 * np.triu(np.ones_like(W), 1))
    assert not np.array_equal(nearly, nearly.T)
    assert paper(w=nearly)["fold_accuracies"] == paper()["fold_accuracies"]


def test_accepted_asymmetry_is_averaged_away_for_both_svms():
    """A W the check accepts (asymmetric by 5e-10 of max W) is used as ``(W + W^T) / 2``: the
    Krein treatment, which refuses an asymmetric kernel, must not fail on it halfway through."""
    rng = np.random.default_rng(3)
    nearly = W + np.triu(rng.random(W.shape), 1) * W.max() * 5e-10
    averaged = (nearly + nearly.T) / 2
    for svm in ("svc", "krein"):
        grid = {"lams": (10.0,), "Cs": (1.0,), "svm": svm}
        assert paper(w=nearly, **grid) == paper(w=averaged, **grid)
        assert nested({(1, 0): nearly, (2, 0): W2}, **grid) == nested({(1, 0): averaged, (2, 0): W2}, **grid)


def test_a_kernel_in_place_of_w_is_refused():
    kernel = np.exp(-W)  # symmetric, finite, >= 0: only its diagonal of ones gives it away
    with pytest.raises(ValueError, match=r"distances must be 0 on the diagonal .* W\[0, 0\] = 1\.0; pass distances W"):
        paper(w=kernel)
    with pytest.raises(ValueError, match=r"distances\[\(2, 0\)\] must be 0 on the diagonal"):
        nested({(1, 0): W, (2, 0): kernel})
    one_entry = W.copy()
    one_entry[7, 7] = 2e-9 * W.max()  # just past the tolerance, on one graph
    with pytest.raises(ValueError, match=r"W\[7, 7\] = "):
        paper(w=one_entry, lams=(1.0,), Cs=(1.0,))


def test_rounding_level_diagonal_is_accepted_unchanged():
    nearly = W + np.diag(np.full(len(W), 1e-13 * W.max()))
    assert paper(w=nearly)["fold_accuracies"] == paper()["fold_accuracies"]


def test_paper_protocol_puts_back_numpys_global_state():
    np.random.seed(7)
    expected = np.random.random_sample(3)
    np.random.seed(7)
    first = paper()
    assert np.array_equal(np.random.random_sample(3), expected)
    np.random.seed(8)  # whatever the caller's state, the folds are the seed's
    assert paper()["fold_accuracies"] == first["fold_accuracies"]


def test_torch_w_is_read_as_its_values():
    assert paper(w=torch.from_numpy(W))["fold_accuracies"] == paper()["fold_accuracies"]


# 3. Grids: any iterable, read once; never empty, every value finite and > 0.


@pytest.mark.parametrize("protocol", [paper, nested])
def test_generator_grids_are_read_once_not_spent_on_fold_one(protocol):
    from_generators = protocol(lams=(v for v in GRID["lams"]), Cs=(v for v in GRID["Cs"]))
    expected = protocol()
    assert from_generators["fold_accuracies"] == expected["fold_accuracies"]
    assert from_generators["grid"]["lam"] == list(GRID["lams"]) and from_generators["grid"]["C"] == list(GRID["Cs"])


@pytest.mark.parametrize("name", ["lams", "Cs"])
@pytest.mark.parametrize(
    "values, message",
    [
        ((), "{name} is empty: give at least one value"),
        (iter(()), "{name} is empty: give at least one value"),
        ((1.0, 0.0), r"{name} must hold finite numbers > 0, got 0\.0"),
        ((1.0, -2.0), r"{name} must hold finite numbers > 0, got -2\.0"),
        ((np.inf,), r"{name} must hold finite numbers > 0, got inf"),
        ((np.nan,), r"{name} must hold finite numbers > 0, got nan"),
        ((True,), r"{name} must hold finite numbers > 0, got True"),
        (("1",), r"{name} must hold finite numbers > 0, got '1'"),
        ("0.1", r"{name} must be a sequence of numbers, got '0\.1'"),
        (1.0, r"{name} must be a sequence of numbers, got 1\.0"),
    ],
    ids=["empty", "empty-iterator", "zero", "negative", "inf", "nan", "bool", "str-item", "str", "scalar"],
)
@pytest.mark.parametrize("protocol", [paper, nested])
def test_bad_grids_are_refused(protocol, name, values, message):
    with pytest.raises(ValueError, match=message.format(name=name)):
        protocol(**{name: values})


# 4. nested keys are (d, k) pairs of integers >= 0, (d, k, beta) triples or names; seeds are integers.


@pytest.mark.parametrize(
    "distances, shown",
    [
        ({"": W}, "''"),
        ({(1, 0): W, 3: W2}, "3"),
        ({(2,): W}, r"\(2,\)"),
        ({(1, 0, 0): W}, r"\(1, 0, 0\)"),
        ({(2, -1): W}, r"\(2, -1\)"),
        ({(2.0, 0): W}, r"\(2\.0, 0\)"),
        ({(True, 0): W}, r"\(True, 0\)"),
    ],
    ids=["empty-name", "number", "short", "long", "negative", "float", "bool"],
)
def test_nested_keys_must_be_d_k_pairs(distances, shown):
    with pytest.raises(
        ValueError,
        match=rf"distances keys must be \(d, k\) pairs of integers >= 0, \(d, k, beta\) triples or names, got {shown}$",
    ):
        nested(distances)


def test_nested_distances_must_be_a_mapping():
    with pytest.raises(ValueError, match=r"distances must be a mapping \{\(d, k\): W\}, got ndarray"):
        nested(W)


@pytest.mark.parametrize("seed", [None, 1.5, -1, 2**32, "0", True], ids=str)
def test_seeds_must_be_integers(seed):
    shown = re.escape(repr(seed))
    with pytest.raises(ValueError, match=rf"seeds must hold integers in \[0, 2\*\*32 - 1\], got {shown}: "):
        nested(seeds=(0, seed))
    with pytest.raises(ValueError, match=rf"^seed must be an integer in \[0, 2\*\*32 - 1\], got {shown}: "):
        paper(seed=seed)


def test_nested_seeds_may_be_any_iterable():
    assert nested(seeds=iter((0, 1)))["fold_accuracies"] == nested()["fold_accuracies"]
    assert nested(seeds=np.array([0, 1]))["seeds"] == [0, 1]


def test_nested_seeds_must_differ():
    with pytest.raises(ValueError, match=r"seeds must differ, got \[0, 1, 0\]: a repeated seed repeats a repetition"):
        nested(seeds=(0, 1, 0))


def test_nested_inner_folds_must_fit_every_training_fold():
    y_small = np.r_[np.zeros(34, dtype=int), np.ones(6, dtype=int)]  # class 1: 6 graphs
    # 5 outer folds: a test fold takes 2 of class 1, a training fold keeps 4 < 5 inner folds.
    with pytest.raises(ValueError, match=r"class 1 \(6 graphs, n_outer=5\) keeps as few as 4: pass n_inner=4"):
        nested_protocol({(2, 0): W}, y_small, lams=(1.0,), Cs=(1.0,), seeds=(0,), n_outer=5)
    result = nested_protocol({(2, 0): W}, y_small, lams=(1.0,), Cs=(1.0,), seeds=(0,), n_outer=5, n_inner=4)
    assert len(result["fold_accuracies"]) == 5
    with pytest.raises(ValueError, match="n_inner must be an integer >= 2, got 1"):
        nested_protocol({(2, 0): W}, y_small, lams=(1.0,), Cs=(1.0,), seeds=(0,), n_outer=5, n_inner=1)


def test_paper_protocol_refuses_classes_too_small_for_its_five_inner_folds():
    w, _ = points_distances(0)
    y = np.zeros(40, dtype=int)
    y[:5] = 1  # 5 graphs of class 1: a training fold keeps 4 of them, fewer than 5 inner folds need
    with pytest.raises(ValueError, match="paper protocol's 5 inner folds need every class to keep 5 graphs"):
        paper_protocol(w, y, n_splits=5, **GRID)


def test_graphs_in_place_of_w_say_to_compute_w_first():
    from mwsp_torch import make_csl

    graphs, y = make_csl(graphs_per_class=10)
    for call in (lambda: paper_protocol(graphs, y), lambda: nested({(2, 0): graphs}, y=y)):
        with pytest.raises(ValueError, match=r"got 100 graphs: compute W first, MWSP\(d=\.\.\., k=\.\.\.\)\.fit"):
            call()
