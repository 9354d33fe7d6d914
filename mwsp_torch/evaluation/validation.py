"""What the protocols accept, checked once at their door: labels, folds, grids, seeds, and the
distance or kernel matrices a selection reads. Every message names the argument and what
would do instead; nothing is coerced silently.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import torch

from mwsp_torch._checks import check_parameter, is_integer, is_positive_number

__all__ = [
    "DISTANCE_SYMMETRY_TOL",
    "SEED_RANGE",
    "as_numpy",
    "check_distances",
    "check_folds",
    "check_grid",
    "check_inner_folds",
    "check_kernel",
    "check_labels",
    "check_n_jobs",
    "check_outer_folds",
    "check_seeds",
    "check_setting_key",
    "check_setting_keys",
    "is_seed",
    "max_folds",
    "weakest_class",
]

#: How far from symmetric (relative to the largest distance) W may be, from rounding, before
#: the protocols refuse it: an SVM on a visibly asymmetric kernel scores nonsense, and slowly.
DISTANCE_SYMMETRY_TOL = 1e-9
#: The seeds numpy's and scikit-learn's random states take.
SEED_RANGE = (0, 2**32 - 1)
#: Rows of a matrix checked at a time, so that the checks need no [n, n] temporaries.
CHECK_ROWS = 512


def max_folds(y: np.ndarray) -> int:
    """The most stratified folds ``y`` allows: every class needs a member in each fold."""
    _, counts = np.unique(np.asarray(y), return_counts=True)
    return int(counts.min())


def check_folds(y: np.ndarray, n_splits: int, what: str) -> None:
    """Refuse ``n_splits`` stratified folds that ``y`` cannot fill: every class needs a graph
    in each fold. The protocols call it; a caller that computes W first (the command line)
    calls it before, so that a bad fold count fails in seconds.

    Args:
        y (np.ndarray): ``[n]`` class labels.
        n_splits (int): the number of folds asked for.
        what (str): the argument's name, for the message (``"n_splits"``, ``"n_outer"``).

    Raises:
        ValueError: naming ``what`` and the largest number of folds ``y`` allows.
    """
    if n_splits < 2:
        raise ValueError(f"{what} must be at least 2, got {n_splits}")
    most = max_folds(y)
    if most < 2:
        raise ValueError(
            f"{what}={n_splits} stratified folds need every class to have at least {n_splits} graphs, but the "
            "smallest class has 1, and no number of folds (at least 2) allows that: drop the class or add graphs"
        )
    if n_splits > most:
        raise ValueError(
            f"{what}={n_splits} stratified folds need every class to have at least {n_splits} graphs, "
            f"but the smallest class has {most}: pass {what}={most} or fewer (--folds {most} on the command line)"
        )


def check_inner_folds(y: np.ndarray, n_outer: int, n_inner: int) -> None:
    """Refuse ``n_inner`` inner folds unless every class keeps ``n_inner`` graphs in every
    outer training fold (a stratified test fold takes at most ``ceil(count / n_outer)`` of a
    class); scikit-learn would only warn, and select ``(d, k, lam, C)`` on inner folds that
    miss a class.

    Args:
        y (np.ndarray): ``[n]`` class labels.
        n_outer, n_inner (int): outer and inner fold counts.

    Raises:
        ValueError: naming the class that falls short and the counts that would do.
    """
    if not is_integer(n_inner) or n_inner < 2:
        raise ValueError(f"n_inner must be an integer >= 2, got {n_inner!r}")
    label, count, kept = weakest_class(y, n_outer)
    if kept < n_inner:
        raise ValueError(
            f"n_inner={n_inner} stratified inner folds need every class to keep {n_inner} graphs in each outer "
            f"training fold, but class {label!r} ({count} graphs, n_outer={n_outer}) keeps as few as "
            f"{kept}: pass n_inner={max(kept, 2)} or fewer, or more outer folds (--folds) if the classes allow"
        )


def weakest_class(y: np.ndarray, n_outer: int) -> tuple[object, int, int]:
    """``(label, graphs, kept)`` of the class that keeps fewest graphs in an outer training
    fold: a stratified test fold takes at most ``ceil(count / n_outer)`` of it."""
    classes, counts = np.unique(y, return_counts=True)
    kept = counts - -(-counts // n_outer)
    c = int(np.argmin(kept))
    return classes[c].item(), int(counts[c]), int(kept[c])


def check_outer_folds(outer_folds, y: np.ndarray, n_inner: int) -> list[tuple[np.ndarray, np.ndarray]]:
    """Outer folds given by the caller (a split file's), as index arrays, refused unless they
    can be used honestly.

    Args:
        outer_folds: ``[(train, test), ...]`` index sequences, at least 2 folds.
        y (np.ndarray): ``[n]`` class labels.
        n_inner (int): inner folds each training part must allow.

    Returns:
        ``[(train, test), ...]`` as int64 arrays.

    Raises:
        ValueError: naming the fold, for indices out of ``0..n-1`` or repeated, a train
            that meets its test, test folds that do not cover every graph exactly once, or
            a training part with a class too small for ``n_inner`` stratified inner folds.
    """
    if not is_integer(n_inner) or n_inner < 2:
        raise ValueError(f"n_inner must be an integer >= 2, got {n_inner!r}")
    n = len(y)
    folds = []
    for f, fold in enumerate(outer_folds):
        try:
            train, test = fold
        except (TypeError, ValueError):
            raise ValueError(f"outer_folds[{f}] must be a (train, test) pair of index arrays") from None
        parts = []
        for name, part in (("train", train), ("test", test)):
            part = as_numpy(part)
            if part.ndim != 1 or len(part) == 0 or part.dtype.kind not in "iu":
                raise ValueError(f"outer_folds[{f}]'s {name} must be a non-empty 1-D array of integer indices")
            outside = part[(part < 0) | (part >= n)]
            if len(outside):
                raise ValueError(f"outer_folds[{f}]'s {name} has index {int(outside[0])}, outside 0..{n - 1}")
            if len(np.unique(part)) != len(part):
                raise ValueError(f"outer_folds[{f}]'s {name} repeats an index")
            parts.append(part.astype(np.int64))
        train, test = parts
        shared = np.intersect1d(train, test)
        if len(shared):
            raise ValueError(f"outer_folds[{f}] trains on graph {int(shared[0])}, which it also tests on")
        classes, counts = np.unique(y[train], return_counts=True)
        if len(classes) < len(np.unique(y)) or counts.min() < n_inner:
            raise ValueError(
                f"outer_folds[{f}]'s training part needs every class with at least n_inner={n_inner} graphs "
                "for stratified inner folds"
            )
        folds.append((train, test))
    if len(folds) < 2:
        raise ValueError(f"outer_folds must hold at least 2 folds, got {len(folds)}")
    tested = np.concatenate([test for _, test in folds])
    if len(tested) != n or len(np.unique(tested)) != n:
        raise ValueError(f"the test folds of outer_folds must cover each of the {n} graphs exactly once")
    return folds


def as_numpy(values) -> np.ndarray:
    """A numpy view of an array, list or (any-device) torch tensor, values and dtype unchanged."""
    if isinstance(values, torch.Tensor):
        return values.detach().cpu().numpy()
    return np.asarray(values)


def check_labels(y) -> np.ndarray:
    """Class labels as the protocols take them.

    Args:
        y: ``[n]`` labels, a numpy array, list or (any-device) torch tensor.

    Returns:
        ``y`` as a 1-D numpy array (values and dtype unchanged).

    Raises:
        ValueError: for labels that are not 1-D (a column included), empty, not finite, or
            of a single class.
    """
    y = as_numpy(y)
    if y.ndim != 1:
        shape = tuple(int(s) for s in y.shape)
        # A column or row of labels would broadcast against predictions (m vs m x 1 gives m x m).
        hint = "; for a column of labels pass y.ravel()" if y.ndim > 1 and max(shape) == y.size else ""
        raise ValueError(f"y must be 1-D with one label per graph, got shape {shape}{hint}")
    if len(y) == 0:
        raise ValueError("y is empty: give one label per graph")
    if y.dtype.kind in "fc" and not np.isfinite(y).all():
        where = int(np.argmax(~np.isfinite(y)))
        raise ValueError(f"y must hold finite labels, got {y[where]} at index {where}")
    classes = np.unique(y)
    if len(classes) < 2:
        raise ValueError(f"y has a single class ({classes[0].item()!r}): the protocol needs at least 2 classes")
    return y


def _as_tuple(values, name: str) -> tuple:
    """Any iterable as a tuple, read once: a generator would otherwise be spent by the first fold."""
    if isinstance(values, (str, bytes)):
        raise ValueError(f"{name} must be a sequence of numbers, got {values!r}")
    try:
        return tuple(values)
    except TypeError:
        raise ValueError(f"{name} must be a sequence of numbers, got {values!r}") from None


def check_n_jobs(n_jobs) -> None:
    """``n_jobs`` as joblib takes it: an integer >= 1, or -1 for every core (the estimator's
    constraint, :data:`mwsp_torch._checks.PARAMETERS`, so both say the same)."""
    check_parameter("n_jobs", n_jobs)


def check_grid(values, name: str) -> tuple:
    """``values`` (any iterable, a generator included) as a non-empty tuple of finite numbers
    > 0, or a ValueError naming ``name``: the ``lams`` and ``Cs`` of every protocol."""
    values = _as_tuple(values, name)
    if not values:
        raise ValueError(f"{name} is empty: give at least one value")
    for value in values:
        if not is_positive_number(value):
            raise ValueError(f"{name} must hold finite numbers > 0, got {value!r}")
    return values


def check_seeds(seeds) -> tuple:
    """``seeds`` (one repetition each) as a non-empty tuple of distinct integer seeds, or a
    ValueError saying which rule was broken."""
    seeds = _as_tuple(seeds, "seeds")
    if len(seeds) == 0:
        raise ValueError("seeds is empty: the nested protocol needs at least one repetition")
    for seed in seeds:
        if not is_seed(seed):
            raise ValueError(f"seeds must hold integers in [0, 2**32 - 1], got {seed!r}: results must be reproducible")
    if len(set(seeds)) != len(seeds):
        raise ValueError(
            f"seeds must differ, got {list(seeds)}: a repeated seed repeats a repetition and shrinks the reported std"
        )
    return seeds


def is_seed(seed) -> bool:
    """An integer numpy and scikit-learn take as a seed (None, which draws a fresh one, is not)."""
    return is_integer(seed) and SEED_RANGE[0] <= seed <= SEED_RANGE[1]


def check_distances(distances, n: int, name: str) -> np.ndarray:
    """W as a numpy array, refused unless ``[n, n]``, real, finite, >= 0, symmetric and zero
    on the diagonal (to ``DISTANCE_SYMMETRY_TOL`` of its largest entry).

    Every entry is checked here, once: the fold slices never look at the pairs inside
    one test fold, and an asymmetric W gives an SVM nonsense to fit (and fits slowly).
    A W asymmetric within the tolerance is returned as ``(W + W^T) / 2`` (a copy), so that
    every kernel built from it is symmetric: the Krein treatment refuses any other.
    """
    w = _square_matrix(distances, n, name)
    largest = 0.0
    for start in range(0, n, CHECK_ROWS):
        rows = np.asarray(w[start : start + CHECK_ROWS], dtype=np.float64)
        bad = ~np.isfinite(rows) | (rows < 0)
        if bad.any():
            i, j = np.unravel_index(int(np.argmax(bad)), bad.shape)
            raise ValueError(f"{name} must be finite and >= 0, got {float(rows[i, j])} at W[{start + i}, {j}]")
        largest = max(largest, float(rows.max(initial=0.0)))
    tol = DISTANCE_SYMMETRY_TOL * largest
    diagonal = np.asarray(np.diagonal(w), dtype=np.float64)
    if n and diagonal.max() > tol:
        i = int(np.argmax(diagonal))
        raise ValueError(
            f"{name} must be 0 on the diagonal (a graph's distance to itself), got W[{i}, {i}] = {float(w[i, i])!r}; "
            "pass distances W, not a kernel such as exp(-lam W): the protocols build the kernels themselves"
        )
    symmetric = True
    for start in range(0, n, CHECK_ROWS):
        rows = np.asarray(w[start : start + CHECK_ROWS], dtype=np.float64)
        gap = np.abs(rows - np.asarray(w[:, start : start + CHECK_ROWS], dtype=np.float64).T)
        symmetric = symmetric and not gap.any()
        if gap.max(initial=0.0) > tol:
            i, j = np.unravel_index(int(np.argmax(gap)), gap.shape)
            i = start + i
            raise ValueError(
                f"{name} must be symmetric, but W[{i}, {j}] = {float(w[i, j])!r} and W[{j}, {i}] = {float(w[j, i])!r} "
                f"(allowed: a difference of {DISTANCE_SYMMETRY_TOL:g} x max W = {tol:.3g})"
            )
    if not symmetric:
        w = np.asarray(w, dtype=np.float64)
        w = (w + w.T) / 2
    return w


def _square_matrix(values, n: int, name: str) -> np.ndarray:
    """``values`` as a numpy array, refused unless a real ``[n, n]`` matrix (graphs in its
    place get a message that says to compute W first)."""
    if _holds_graphs(values):
        raise ValueError(
            f"{name} must be W, an [n, n] matrix of distances, got {len(values)} graphs: compute W first, "
            "MWSP(d=..., k=...).fit(graphs).distances_, and pass that"
        )
    matrix = as_numpy(values)
    if matrix.dtype.kind not in "iuf":
        raise ValueError(f"{name} must be a matrix of real numbers, got dtype {matrix.dtype}")
    if matrix.ndim != 2 or matrix.shape[0] != matrix.shape[1]:
        raise ValueError(f"{name} must be a square [n, n] matrix, got shape {tuple(int(s) for s in matrix.shape)}")
    if len(matrix) != n:
        raise ValueError(
            f"{name} is {len(matrix)} x {len(matrix)} but y has {n} labels: one row and column per labelled graph"
        )
    return matrix


def _holds_graphs(values) -> bool:
    """Graphs (PyG ``Data``, a list of them or a dataset) where a matrix was expected."""
    if isinstance(values, (np.ndarray, torch.Tensor)) or not hasattr(values, "__len__") or len(values) == 0:
        return False
    try:
        first = values[0]
    except (TypeError, KeyError, IndexError):
        return False
    return hasattr(first, "edge_index")


def check_kernel(kernel, n: int, name: str) -> np.ndarray:
    """A precomputed kernel matrix as a float64 array, refused unless ``[n, n]``, real, finite
    and symmetric (to ``DISTANCE_SYMMETRY_TOL`` of its largest magnitude). A kernel within
    the tolerance of symmetric is returned symmetrised, as W is (:func:`check_distances`)."""
    k = np.asarray(_square_matrix(kernel, n, name), dtype=np.float64)
    if not np.isfinite(k).all():
        i, j = np.unravel_index(int(np.argmax(~np.isfinite(k))), k.shape)
        raise ValueError(f"{name} must be finite, got {float(k[i, j])} at [{i}, {j}]")
    gap = np.abs(k - k.T)
    if gap.max(initial=0.0) > DISTANCE_SYMMETRY_TOL * np.abs(k).max(initial=0.0):
        i, j = np.unravel_index(int(np.argmax(gap)), gap.shape)
        raise ValueError(f"{name} must be symmetric, but [{i}, {j}] = {k[i, j]!r} and [{j}, {i}] = {k[j, i]!r}")
    return (k + k.T) / 2 if gap.any() else k


def check_setting_key(key) -> None:
    """A selection's setting key: ``(d, k)`` (integers ``>= 0``), ``(d, k, beta)`` (``beta > 0``,
    a grid over the attributes' weight), or a name (a non-empty string: ``"wl-h3"``)."""
    if isinstance(key, str) and key:
        return
    if not (
        isinstance(key, tuple)
        and len(key) in (2, 3)
        and all(is_integer(v) and v >= 0 for v in key[:2])
        and (len(key) == 2 or is_positive_number(key[2]))
    ):
        raise ValueError(
            f"distances keys must be (d, k) pairs of integers >= 0, (d, k, beta) triples or names, got {key!r}"
        )


def check_setting_keys(settings: Mapping) -> None:
    """``settings`` must be a non-empty mapping of :func:`check_setting_key` keys, whose tuple
    keys are all ``(d, k)`` or all ``(d, k, beta)``, not both."""
    if not isinstance(settings, Mapping):
        raise ValueError(f"distances must be a mapping {{(d, k): W}}, got {type(settings).__name__}")
    if len(settings) == 0:
        raise ValueError("distances is empty: give W for at least one (d, k)")
    for key in settings:
        check_setting_key(key)
    if len({len(key) for key in settings if isinstance(key, tuple)}) > 1:
        raise ValueError("distances keys must all be (d, k) or all (d, k, beta), not both")
