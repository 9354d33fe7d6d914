"""SVM evaluation of precomputed MWSP distances.

Two protocols, always named in their results:

- ``paper``: the authors' script. One fixed ``(d, k)``; ``np.random.seed(42)``
  then ``StratifiedKFold(10, shuffle=True)`` outer folds; on each training fold
  an unshuffled inner ``StratifiedKFold(5)`` picks ``lam`` (outer loop) and
  ``C`` (inner loop) jointly, the first best mean accuracy winning; then
  ``SVC(kernel="precomputed")`` on ``exp(-lam W)``; mean and std over the 10
  folds (fewer only when asked: ``n_splits``, for a class smaller than 10).
  The paper then picked ``(d, k)`` per dataset by this test accuracy, which is
  optimistic.
- ``nested``: the honest one. For each seed, shuffled stratified outer folds;
  on each training fold a shuffled, seeded inner CV selects ``(d, k, lam, C)``
  from the whole grid, the held-out fold is scored once. Mean and std over
  the repetitions' accuracies.

Accuracies are in percent. Every result carries the majority-class rate (a
selection that predicts one class is visible at a glance) and the accuracy ceiling of
the distances themselves (:func:`accuracy_ceiling`).
"""

from __future__ import annotations

import hashlib
import inspect
import os
import tempfile
from collections.abc import Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import torch
from joblib import Parallel, delayed, effective_n_jobs, parallel_config
from sklearn.model_selection import StratifiedKFold
from sklearn.svm import SVC
from tqdm.auto import tqdm

from mwsp_torch import kernel as kernel_module
from mwsp_torch import svm as svm_module
from mwsp_torch._checks import is_integer, is_positive_number
from mwsp_torch.kernel import KREIN_MODES, krein_projector, laplacian_kernel
from mwsp_torch.selection_store import open_store
from mwsp_torch.svm import SVM_SOLVERS, accuracy_path

#: The paper's grids (Sec. V-A).
PAPER_LAMS = tuple(float(v) for v in np.logspace(-4, 1, num=6))
PAPER_CS = tuple(float(v) for v in np.logspace(-3, 3, num=7))
SVMS = ("svc", "krein")

#: How far from symmetric (relative to the largest distance) W may be, from rounding, before the
#: protocols refuse it: an SVM on a visibly asymmetric kernel scores nonsense, and slowly.
DISTANCE_SYMMETRY_TOL = 1e-9
#: The seeds numpy's and scikit-learn's random states take.
SEED_RANGE = (0, 2**32 - 1)
#: The nested protocol's inner folds by default (the command line's too).
NESTED_INNER_FOLDS = 5
#: Rows of W checked at a time, so that the checks need no [n, n] temporaries.
_CHECK_ROWS = 512
#: How far below a fold's best mean a ``C``'s best possible mean must fall before its fits stop
#: (:func:`can_still_win`): far above rounding, far below the 1 / n steps of an accuracy.
_FLOOR_MARGIN = 1e-9


def majority_rate(y: np.ndarray) -> float:
    """Accuracy of always predicting the most frequent class, in percent."""
    _, counts = np.unique(y, return_counts=True)
    return float(100.0 * counts.max() / len(y))


class _Kernels:
    """``exp(-lam W)`` on fold slices, optionally Krein-treated per training fold.

    Kernels are made per slice from the distances, never stored for the whole
    grid: 12 settings x 6 lams of NCI1's 4110 x 4110 would be 9.7 GB.
    """

    def __init__(self, distances: Mapping, svm: str, krein: str, solver: str = "libsvm") -> None:
        if svm not in SVMS:
            raise ValueError(f"svm must be one of {SVMS}, got {svm!r}")
        if krein not in KREIN_MODES:
            raise ValueError(f"krein must be one of {KREIN_MODES}, got {krein!r}")
        if solver not in SVM_SOLVERS:
            raise ValueError(f"svm_solver must be one of {SVM_SOLVERS}, got {solver!r}")
        self.svm, self.krein, self.solver = svm, krein, solver
        self.distances = distances

    def inner(self, key, lam: float, train: np.ndarray, splits: list):
        """``(k_train, k_valid)`` for each inner split of the training fold ``train``, as
        :meth:`fold` treats an outer fold: a Krein projector comes from the inner training
        graphs alone, so the graphs a split validates on never shape the kernel it trains on.
        Yielded one split at a time (``svc``: slices of one kernel, the same values)."""
        if self.svm == "krein":
            for inner_train, inner_valid in splits:
                yield self.fold(key, lam, train[inner_train], train[inner_valid])
            return
        k_train = laplacian_kernel(self.distances[key][np.ix_(train, train)], lam)
        for inner_train, inner_valid in splits:
            yield k_train[np.ix_(inner_train, inner_train)], k_train[np.ix_(inner_valid, inner_train)]

    def fold(self, key, lam: float, train: np.ndarray, test: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        w = self.distances[key]
        k_train = laplacian_kernel(w[np.ix_(train, train)], lam)
        k_test = laplacian_kernel(w[np.ix_(test, train)], lam)
        if self.svm == "krein":
            projector = krein_projector(k_train, self.krein)
            k_train, k_test = k_train @ projector, k_test @ projector
        return k_train, k_test


def repetition_summary(fold_accuracies: Sequence[float], n_outer: int) -> dict:
    """The accuracy entries of a repeated protocol's result, from its folds' accuracies in
    order (``n_outer`` a repetition): the mean and std over the repetitions' means (each
    repetition scores every graph once), and the folds' own std."""
    folds = [float(a) for a in fold_accuracies]
    repetitions = [float(np.mean(folds[r : r + n_outer])) for r in range(0, len(folds), n_outer)]
    return {
        "accuracy_unit": "percent",
        "accuracy_mean": float(np.mean(repetitions)),
        "accuracy_std": float(np.std(repetitions)),
        "repetition_accuracies": repetitions,
        "fold_accuracies": folds,
        "fold_accuracy_std": float(np.std(folds)),
    }


def reported_std(result: dict) -> tuple[float, str]:
    """The std to give beside a protocol result's mean, and what it is over, ``"folds"`` or
    ``"repetitions"``: the paper protocol's is over its folds; the nested one's over its
    repetitions' means, but with one repetition that is 0 by construction, so then the
    std over that repetition's folds (``fold_accuracy_std``)."""
    if result["protocol"] != "nested":
        return result["accuracy_std"], "folds"
    if len(result["seeds"]) == 1:
        return result["fold_accuracy_std"], "folds"
    return result["accuracy_std"], "repetitions"


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
    label, count, kept = _weakest_class(y, n_outer)
    if kept < n_inner:
        raise ValueError(
            f"n_inner={n_inner} stratified inner folds need every class to keep {n_inner} graphs in each outer "
            f"training fold, but class {label!r} ({count} graphs, n_outer={n_outer}) keeps as few as "
            f"{kept}: pass n_inner={max(kept, 2)} or fewer, or more outer folds (--folds) if the classes allow"
        )


def _weakest_class(y: np.ndarray, n_outer: int) -> tuple[object, int, int]:
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
            part = _as_array(part)
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


def _as_array(values) -> np.ndarray:
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
    y = _as_array(y)
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
    if not is_integer(n_jobs) or (n_jobs < 1 and n_jobs != -1):
        raise ValueError(f"n_jobs must be an integer >= 1, or -1 for every core, got {n_jobs!r}")


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
        if not _is_seed(seed):
            raise ValueError(f"seeds must hold integers in [0, 2**32 - 1], got {seed!r}: results must be reproducible")
    if len(set(seeds)) != len(seeds):
        raise ValueError(
            f"seeds must differ, got {list(seeds)}: a repeated seed repeats a repetition and shrinks the reported std"
        )
    return seeds


def _is_seed(seed) -> bool:
    """An integer numpy and scikit-learn take as a seed (None, which draws a fresh one, is not)."""
    return is_integer(seed) and SEED_RANGE[0] <= seed <= SEED_RANGE[1]


def _check_distances(distances, n: int, name: str) -> np.ndarray:
    """W as a numpy array, refused unless ``[n, n]``, real, finite, >= 0, symmetric and zero
    on the diagonal (to ``DISTANCE_SYMMETRY_TOL`` of its largest entry).

    Every entry is checked here, once: the fold slices never look at the pairs inside
    one test fold, and an asymmetric W gives an SVM nonsense to fit (and fits slowly).
    A W asymmetric within the tolerance is returned as ``(W + W^T) / 2`` (a copy), so that
    every kernel built from it is symmetric: the Krein treatment refuses any other.
    """
    w = _as_array(distances)
    if w.dtype.kind not in "iuf":
        raise ValueError(f"{name} must be a matrix of real numbers, got dtype {w.dtype}")
    if w.ndim != 2 or w.shape[0] != w.shape[1]:
        raise ValueError(f"{name} must be a square [n, n] matrix, got shape {tuple(int(s) for s in w.shape)}")
    if len(w) != n:
        raise ValueError(
            f"{name} is {len(w)} x {len(w)} but y has {n} labels: W needs one row and column per labelled graph"
        )
    largest = 0.0
    for start in range(0, n, _CHECK_ROWS):
        rows = np.asarray(w[start : start + _CHECK_ROWS], dtype=np.float64)
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
    for start in range(0, n, _CHECK_ROWS):
        rows = np.asarray(w[start : start + _CHECK_ROWS], dtype=np.float64)
        gap = np.abs(rows - np.asarray(w[:, start : start + _CHECK_ROWS], dtype=np.float64).T)
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


def _svc_accuracy(k_train, y_train, k_test, y_test, C: float) -> float:
    model = SVC(kernel="precomputed", C=C).fit(k_train, y_train)
    return float(np.mean(model.predict(k_test) == y_test))


def _accuracies(solver: str, k_train, y_train, k_test, y_test, Cs) -> np.ndarray:
    """The test accuracy of the SVM at each ``C``, by ``solver`` (:data:`SVM_SOLVERS`): the
    path solver takes the whole grid in one call, libsvm one fit a ``C``."""
    if solver == "path":
        return accuracy_path(k_train, y_train, k_test, y_test, Cs)
    return np.array([_svc_accuracy(k_train, y_train, k_test, y_test, C) for C in Cs])


def _inner_scores(kernels: _Kernels, key, lam: float, Cs, y: np.ndarray, train: np.ndarray, splits: list, floor=None):
    """Mean inner-validation accuracy of each ``C`` for one setting ``key`` and ``lam`` on the
    training fold ``train``: one step of a fold's selection.

    ``floor`` is a mean another step of the same fold has already reached. A ``C`` whose mean
    stays below it even if every remaining split scored 100 % cannot be selected (the first
    best wins, and this one is not even level), so it is not fitted on the remaining splits
    and its score is NaN, which never wins a comparison. Selections do not change; the work
    does (NCI1: ``benchmarks/README.md``). The path solver fits the whole ``C`` grid per split,
    so for it a split is skipped only when no ``C`` can still win."""
    floor = -np.inf if floor is None else floor
    totals = np.zeros(len(Cs))
    alive = np.ones(len(Cs), dtype=bool)
    y_train = y[train]
    for j, ((inner_train, inner_test), (kt, kv)) in enumerate(
        zip(splits, kernels.inner(key, lam, train, splits), strict=True)
    ):
        fit = alive if kernels.solver == "libsvm" else np.ones(len(Cs), dtype=bool)
        Cs_fit = [C for C, wanted in zip(Cs, fit, strict=True) if wanted]
        totals[fit] += _accuracies(kernels.solver, kt, y_train[inner_train], kv, y_train[inner_test], Cs_fit)
        alive &= can_still_win(totals, len(splits) - j - 1, len(splits), floor)
        if not alive.any():
            break
    return np.where(alive, totals / len(splits), np.nan)


def can_still_win(totals: np.ndarray, remaining: int, n_splits: int, floor: float) -> np.ndarray:
    """Which candidates, with inner accuracies summing to ``totals`` so far and ``remaining``
    of ``n_splits`` splits to come, could still reach the mean ``floor`` that another
    candidate of the same fold has reached (each accuracy is at most 1). A candidate that
    cannot is never selected, since the first best wins, so both nested protocols stop
    fitting it."""
    return (totals + remaining) / n_splits >= floor - _FLOOR_MARGIN


def _best_score(scores: np.ndarray) -> float:
    """A step's best mean, ``-inf`` when every ``C`` was cut (:func:`_inner_scores`)."""
    kept = scores[~np.isnan(scores)]
    return float(kept.max()) if kept.size else -np.inf


def _fold_accuracy(kernels: _Kernels, choice, y: np.ndarray, train: np.ndarray, test: np.ndarray) -> float:
    key, lam, C = choice
    k_train, k_test = kernels.fold(key, lam, train, test)
    return 100.0 * float(_accuracies(kernels.solver, k_train, y[train], k_test, y[test], [C])[0])


def _score_code() -> str:
    """A digest of the code that computes a step's scores: a selection checkpoint written by
    other code is not read."""
    parts = [inspect.getsource(module) for module in (kernel_module, svm_module)]
    parts += [inspect.getsource(code) for code in (_Kernels, _inner_scores, _accuracies, _svc_accuracy)]
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()


@contextmanager
def memory_mapped(arrays: Mapping, n_jobs: int):
    """``arrays`` (a mapping to arrays) with each array memory-mapped from one temporary file
    when more than one process works, so that every task names the files instead of carrying
    the arrays, or joblib hashing them once a task to map them itself: 9 settings of NCI1's
    W are 1.2 GB. With one process, ``arrays`` as given. The files go when the block ends."""
    if effective_n_jobs(n_jobs) == 1:
        yield arrays
        return
    with tempfile.TemporaryDirectory(prefix="mwsp-protocol-") as folder:
        mapped = {}
        for i, (key, array) in enumerate(arrays.items()):
            path = Path(folder) / f"a{i}.npy"
            np.save(path, np.ascontiguousarray(array))
            mapped[key] = np.load(path, mmap_mode="r")
        yield mapped


@contextmanager
def _shared(kernels: _Kernels, n_jobs: int):
    """``kernels`` reading each W from one memory-mapped copy (:func:`memory_mapped`)."""
    with memory_mapped(kernels.distances, n_jobs) as distances:
        yield _Kernels(distances, kernels.svm, kernels.krein, kernels.solver)


def _run_folds(
    kernels, keys, lams, Cs, y, folds, n_jobs: int, progress: bool | None, desc: str, store=None
) -> tuple[list, int]:
    """``(accuracy, (key, lam, C))`` for each ``(train, test, inner_splits)`` fold, in order
    (``inner_splits``: ``(inner_train, inner_test)`` positions in ``train``), and how many
    steps came from ``store`` (a :class:`~mwsp_torch.selection_store.SelectionStore`).

    The work runs over ``n_jobs`` processes (one BLAS thread each) as one step per fold,
    setting and ``lam`` (the inner cross-validation of every ``C``), then one final fit per
    fold, under one progress bar over all of them; the processes read W from one
    memory-mapped copy (:func:`_shared`). A fold selects in grid order (setting, then
    ``lam``, then ``C``): the first best mean inner accuracy wins, whatever ``n_jobs``.
    Steps skip the ``C`` that can no longer win their fold (:func:`_inner_scores`), led by
    the step likeliest to win (:func:`_led_by_last_best`); what is selected does not change.
    With a store, its steps are read instead of computed and each new one is kept there.
    """
    splits = [inner_splits for _, _, inner_splits in folds]
    steps = [(f, key, lam) for f in range(len(folds)) for key in keys for lam in lams]
    with _shared(kernels, n_jobs) as kernels, parallel_config(backend="loky", inner_max_num_threads=1):
        runner = Parallel(n_jobs=n_jobs, return_as="generator")
        return _selected_and_scored(kernels, keys, lams, Cs, y, folds, splits, steps, runner, progress, desc, store)


def _selected_and_scored(kernels, keys, lams, Cs, y, folds, splits, steps, runner, progress, desc, store):
    """:func:`_run_folds`' work on ``runner``."""
    names = {step: (step[0], keys.index(step[1]), lams.index(step[2])) for step in steps}
    scores = {} if store is None else {step: store.steps[names[step]] for step in steps if names[step] in store.steps}
    resumed = len(scores)
    # Resumed steps are the bar's start, not progress: its rate and estimate count new steps only.
    bar = tqdm(total=len(steps) + len(folds), initial=resumed, desc=desc, unit="step", disable=_hidden(progress))
    # Each fold's best mean so far: a step made later skips the C it cannot beat (_inner_scores).
    # Steps are made as workers take them, so the floor is as fresh as the finished work.
    reached = {}
    for (f, _, _), step_scores in scores.items():
        reached[f] = max(reached.get(f, -np.inf), _best_score(step_scores))
    made = []  # the steps in the order their tasks were made, which is the order results come in

    def tasks():
        for f, key, lam in _led_by_last_best([step for step in steps if step not in scores], scores):
            made.append((f, key, lam))
            yield delayed(_inner_scores)(kernels, key, lam, Cs, y, folds[f][0], splits[f], reached.get(f))

    with bar:
        for i, step_scores in enumerate(runner(tasks())):
            step = made[i]
            scores[step] = step_scores
            if store is not None:
                store.add(names[step], step_scores)
            # After the store: a step cut by this floor is never on disk without the step behind it.
            reached[step[0]] = max(reached.get(step[0], -np.inf), _best_score(step_scores))
            bar.update()
        chosen = []
        for f in range(len(folds)):
            best, best_score = None, -1.0
            for key in keys:
                for lam in lams:
                    for c, C in enumerate(Cs):
                        if scores[(f, key, lam)][c] > best_score:
                            best, best_score = (key, lam, C), scores[(f, key, lam)][c]
            chosen.append(best)
        tasks = (
            delayed(_fold_accuracy)(kernels, choice, y, train, test)
            for choice, (train, test, _) in zip(chosen, folds, strict=True)
        )
        accuracies = []
        for accuracy in runner(tasks):
            accuracies.append(accuracy)
            bar.update()
    return list(zip(accuracies, chosen, strict=True)), resumed


def _led_by_last_best(todo: list, scores: Mapping):
    """``todo``'s steps fold by fold, each fold led by the ``(setting, lam)`` with the best
    mean of the fold before it so far: its floor is then high from the first step on, so
    the others skip more (:func:`_inner_scores`; on NCI1 this is what knowing each fold's
    winner in advance would skip). Read lazily, as workers take steps."""
    folds = {}
    for step in todo:
        folds.setdefault(step[0], []).append(step)
    for f, fold_steps in folds.items():
        done = {}
        for _, key, lam in fold_steps:
            if (f - 1, key, lam) in scores:
                done[(key, lam)] = _best_score(scores[(f - 1, key, lam)])
        if done:
            leader = max(done, key=done.get)
            fold_steps.sort(key=lambda step: step[1:] != leader)
        yield from fold_steps


def _hidden(progress: bool | None) -> bool | None:
    """tqdm's ``disable`` for a ``progress`` argument: ``None`` shows the bar on a terminal
    only (so not under pytest, in a pipe or a log file)."""
    return None if progress is None else not progress


def accuracy_ceiling(distances, y) -> float:
    """The highest accuracy, in percent, that any classifier on kernels of W can reach.

    Graphs at ``W = 0`` from each other have equal rows in every kernel ``exp(-lam W)`` (W
    is a metric, so ``W(a, c) = W(b, c)``) and get one prediction: a group of them scores
    at most its most frequent class. Generated CSL at ``paths="split"`` has such a group:
    its skip-6 and skip-16 graphs see the same number of nodes at every distance, and
    every node the same tree, so they are one measure and the ceiling is 90 %.

    Args:
        distances: ``[n, n]`` W, or ``{(d, k): W}`` (then the best setting's ceiling: a
            fold selects one setting).
        y (np.ndarray): ``[n]`` class labels.

    Returns:
        The ceiling in percent (100 where no two graphs of different classes are at 0).
    """
    from scipy.sparse import coo_matrix
    from scipy.sparse.csgraph import connected_components

    if isinstance(distances, Mapping):
        return max(accuracy_ceiling(w, y) for w in distances.values())
    y = _as_array(y)
    w = _as_array(distances)
    n = len(y)
    rows, cols = [], []
    for start in range(0, n, _CHECK_ROWS):
        i, j = np.nonzero(np.asarray(w[start : start + _CHECK_ROWS]) == 0)
        rows.append(i + start)
        cols.append(j)
    rows, cols = np.concatenate(rows), np.concatenate(cols)
    _, group = connected_components(coo_matrix((np.ones(len(rows)), (rows, cols)), shape=(n, n)), directed=False)
    _, classes = np.unique(y, return_inverse=True)
    counts = np.zeros((group.max() + 1, classes.max() + 1), dtype=np.int64)
    np.add.at(counts, (group, classes), 1)
    return float(100.0 * counts.max(axis=1).sum() / n)


def paper_protocol(
    distances: np.ndarray,
    y: np.ndarray,
    lams: Sequence[float] = PAPER_LAMS,
    Cs: Sequence[float] = PAPER_CS,
    seed: int = 42,
    svm: str = "svc",
    krein: str = "flip",
    n_jobs: int = -1,
    progress: bool | None = None,
    n_splits: int = 10,
    svm_solver: str = "libsvm",
    checkpoint: str | os.PathLike | None = None,
) -> dict:
    """The authors' procedure on one distance matrix (one fixed ``(d, k)``).

    Args:
        distances (np.ndarray): ``[n, n]`` W: finite, ``>= 0``, symmetric, zero on the diagonal.
        y (np.ndarray): ``[n]`` class labels (a numpy array, list or torch tensor), at least 2 classes.
        lams, Cs: grids of finite numbers ``> 0`` (default: the paper's); any iterable, read once.
        seed (int): the global numpy seed the script sets before drawing its folds
            (default ``42``); numpy's global state is restored afterwards, so the caller's
            own draws do not change.
        svm (str): ``"svc"`` or ``"krein"`` (default ``"svc"``).
        krein (str): ``"flip"`` or ``"clip"`` when ``svm="krein"`` (default ``"flip"``).
        n_jobs (int): processes for the selection (default ``-1``: every core; results do not
            depend on it).
        progress (bool, optional): one tqdm bar over the whole selection (every fold's
            inner cross-validation of each ``lam``, then its final fit); ``True``, ``False``,
            or ``None`` (default): on a terminal only, so not under pytest or in a log.
        n_splits (int): outer folds (default ``10``, the authors'); a dataset whose
            smallest class has fewer graphs (Cuneiform: 8) needs fewer, and
            :func:`max_folds` says how many. Stated in the result.
        svm_solver (str): ``"libsvm"`` (default: scikit-learn's ``SVC``, the results of
            earlier runs) or ``"path"`` (:mod:`mwsp_torch.svm`: the same problem, each
            split's whole ``C`` grid in one call; equal to libsvm's within its stopping
            tolerance, and many times faster on small graphs sets, ``benchmarks/README.md``).
        checkpoint (path, optional): a directory where each finished selection step is kept
            (:mod:`mwsp_torch.selection_store`), so that the same call started again after a
            kill computes only the rest and selects exactly the same; created if missing,
            and shared freely (each call's steps go to a file named by its inputs). Delete
            it when the results are saved.

    Returns:
        dict with ``accuracy_mean``, ``accuracy_std`` (percent, std over the
        outer folds), ``fold_accuracies``, ``selected`` (lam, C per fold),
        ``majority_rate``, ``accuracy_ceiling`` (:func:`accuracy_ceiling`), ``grid``,
        ``resumed_steps`` (steps read from ``checkpoint``) and ``protocol``.

    Raises:
        ValueError: naming the argument, for a ``y`` that is not 1-D (a column ``[n, 1]``
            included) or has one class, a W that is not ``[len(y), len(y)]``, finite, ``>= 0``,
            symmetric and zero on the diagonal (to ``DISTANCE_SYMMETRY_TOL`` of its largest
            entry: a kernel in place of W is refused), an empty or
            non-positive grid, a seed that is not an integer, or too many folds.
    """
    y = check_labels(y)
    lams, Cs = check_grid(lams, "lams"), check_grid(Cs, "Cs")
    if not _is_seed(seed):
        raise ValueError(f"seed must be an integer in [0, 2**32 - 1], got {seed!r}: results must be reproducible")
    distances = _check_distances(distances, len(y), "distances")
    check_n_jobs(n_jobs)
    check_folds(y, n_splits, "n_splits")
    label, _, kept = _weakest_class(y, n_splits)
    if kept < 5:  # its inner StratifiedKFold(5) (the script's), not a parameter
        raise ValueError(
            f"the paper protocol's 5 inner folds need every class to keep 5 graphs in each training fold, but "
            f"class {label!r} keeps as few as {kept} with n_splits={n_splits}"
        )
    kernels = _Kernels({None: distances}, svm, krein, svm_solver)
    # The script seeds numpy's global generator, and its folds and SVCs draw from it (each
    # SVC fit draws a libsvm seed, unused without probability estimates). The caller's
    # global state is put back afterwards.
    caller_state = np.random.get_state()
    try:
        np.random.seed(seed)
        outer = StratifiedKFold(n_splits=n_splits, shuffle=True)
        inner = StratifiedKFold(n_splits=5, shuffle=False)
        folds = [
            (train, test, list(inner.split(np.zeros(len(train)), y[train])))
            for train, test in outer.split(np.zeros(len(y)), y)
        ]
        options = (svm, krein, svm_solver, _score_code())
        with open_store(checkpoint, "paper", {0: distances}, y, folds, lams, Cs, options) as store:
            scored, resumed = _run_folds(kernels, [None], lams, Cs, y, folds, n_jobs, progress, "paper protocol", store)
    finally:
        np.random.set_state(caller_state)
    accuracies = [acc for acc, _ in scored]
    selected = [{"lam": lam, "C": C} for _, (_, lam, C) in scored]
    return {
        "protocol": "paper",
        "accuracy_unit": "percent",
        "accuracy_mean": float(np.mean(accuracies)),
        "accuracy_std": float(np.std(accuracies)),
        "fold_accuracies": accuracies,
        "selected": selected,
        "majority_rate": majority_rate(y),
        "accuracy_ceiling": accuracy_ceiling(distances, y),
        "grid": {"lam": list(lams), "C": list(Cs)},
        "outer_folds": n_splits,
        "svm": svm if svm == "svc" else f"krein-{krein}",
        "svm_solver": svm_solver,
        "seed": seed,
        "resumed_steps": resumed,
    }


def check_setting_keys(distances) -> None:
    """``distances`` must be a non-empty mapping keyed by ``(d, k)`` (integers ``>= 0``), or
    by ``(d, k, beta)`` (``beta > 0``, a grid over the attributes' weight), not both."""
    if not isinstance(distances, Mapping):
        raise ValueError(f"distances must be a mapping {{(d, k): W}}, got {type(distances).__name__}")
    if len(distances) == 0:
        raise ValueError("distances is empty: give W for at least one (d, k)")
    for key in distances:
        if not (
            isinstance(key, tuple)
            and len(key) in (2, 3)
            and all(is_integer(v) and v >= 0 for v in key[:2])
            and (len(key) == 2 or is_positive_number(key[2]))
        ):
            raise ValueError(f"distances keys must be (d, k) pairs of integers >= 0, got {key!r}")
    if len({len(key) for key in distances}) > 1:
        raise ValueError("distances keys must all be (d, k) or all (d, k, beta), not both")


def selected_setting(seed: int, key: tuple, lam: float, C: float) -> dict:
    """One fold's selection as the protocols record it: ``seed, d, k[, beta], lam, C``."""
    return {"seed": seed, "d": key[0], "k": key[1], **({"beta": key[2]} if len(key) == 3 else {}), "lam": lam, "C": C}


def nested_folds(
    y: np.ndarray,
    seeds: Sequence[int],
    n_outer: int = 10,
    n_inner: int = NESTED_INNER_FOLDS,
    outer_folds: Sequence | None = None,
) -> list[tuple[int, np.ndarray, np.ndarray, list]]:
    """The nested protocol's folds: ``(seed, train, test, inner_splits)`` for each outer fold
    of each repetition, ``inner_splits`` being ``(inner_train, inner_test)`` positions in
    ``train``. Each seed draws ``StratifiedKFold(n_outer, shuffle=True, random_state=seed)``
    outside (or takes ``outer_folds``, already checked) and the same with ``n_inner`` inside
    each training fold. Every protocol scored on "the nested protocol's folds" (the Nystroem
    one included) takes them from here."""
    folds = []
    for seed in seeds:
        inner = StratifiedKFold(n_splits=n_inner, shuffle=True, random_state=seed)
        if outer_folds is None:
            outer = StratifiedKFold(n_splits=n_outer, shuffle=True, random_state=seed)
            given = list(outer.split(np.zeros(len(y)), y))
        else:
            given = outer_folds
        for train, test in given:
            folds.append((seed, train, test, list(inner.split(np.zeros(len(train)), y[train]))))
    return folds


def nested_protocol(
    distances: Mapping[tuple[int, int], np.ndarray],
    y: np.ndarray,
    lams: Sequence[float] = PAPER_LAMS,
    Cs: Sequence[float] = PAPER_CS,
    seeds: Sequence[int] | None = None,
    n_outer: int = 10,
    n_inner: int = NESTED_INNER_FOLDS,
    svm: str = "svc",
    krein: str = "flip",
    n_jobs: int = -1,
    progress: bool | None = None,
    outer_folds: Sequence | None = None,
    svm_solver: str = "libsvm",
    checkpoint: str | os.PathLike | None = None,
) -> dict:
    """Nested cross-validation selecting ``(d, k, lam, C)`` inside each training fold.

    Args:
        distances: ``{(d, k): W}`` for every setting of the grid; ``d``, ``k`` integers ``>= 0``,
            each W as in :func:`paper_protocol`; or ``{(d, k, beta): W}`` where the grid also
            spans the attributes' weight ``beta`` (``MWSP(attributes=..., beta=...)``).
        y (np.ndarray): ``[n]`` class labels (a numpy array, list or torch tensor), at least 2 classes.
        lams, Cs: grids of finite numbers ``> 0`` (default: the paper's); any iterable, read once.
        seeds: one repetition per seed, distinct integers (default ``0..9``; ``(0,)`` with
            ``outer_folds``).
        n_outer, n_inner (int): folds (default ``10`` and ``5``); ``n_outer`` is ignored when
            ``outer_folds`` is given.
        svm, krein (str): as in :func:`paper_protocol`.
        n_jobs (int): processes for the selection (default ``-1``: every core; results do not
            depend on it).
        progress (bool, optional): as in :func:`paper_protocol` (a step: one outer fold's
            inner cross-validation of one ``(d, k)`` and ``lam``).
        outer_folds: the outer folds of one repetition, ``[(train, test), ...]`` index arrays
            (a split file's folds, :mod:`mwsp_torch.splits`, shared with other methods): the
            test folds must partition ``0..n-1`` and each train must not meet its test. Then
            ``seeds`` holds one seed, which draws the inner folds.
        svm_solver (str): as in :func:`paper_protocol`.
        checkpoint (path, optional): as in :func:`paper_protocol`: a killed selection
            started again resumes from its finished steps.

    Returns:
        dict with ``accuracy_mean`` and ``accuracy_std`` (percent; over the
        repetitions' mean accuracies: each repetition scores every graph once, so a model
        that errs on the same graphs whatever the folds has a std of 0),
        ``repetition_accuracies``, ``fold_accuracies``, ``fold_accuracy_std``, ``selected``,
        ``majority_rate``, ``accuracy_ceiling`` (:func:`accuracy_ceiling`), ``grid``,
        ``outer_folds``, ``inner_folds``, ``outer_folds_given``, ``inputs_sha256``
        (:func:`inputs_digest`), ``svm``, ``svm_solver``, ``seeds``, ``resumed_steps`` and
        ``protocol``.

    Raises:
        ValueError: as :func:`paper_protocol` does (a W's messages name its ``(d, k)``), and
            for keys that are not ``(d, k)`` pairs of integers ``>= 0`` or empty ``seeds``.
    """
    y = check_labels(y)
    lams, Cs = check_grid(lams, "lams"), check_grid(Cs, "Cs")
    if seeds is None:
        seeds = (0,) if outer_folds is not None else tuple(range(10))
    seeds = check_seeds(seeds)
    check_setting_keys(distances)
    distances = {key: _check_distances(w, len(y), f"distances[{key!r}]") for key, w in distances.items()}
    check_n_jobs(n_jobs)
    if outer_folds is not None:
        if len(seeds) != 1:
            raise ValueError(
                f"with outer_folds, seeds must hold one seed (it draws the inner folds), got {list(seeds)}: "
                "the outer folds are fixed, so further repetitions would repeat them"
            )
        given = check_outer_folds(outer_folds, y, n_inner)
        n_outer = len(given)
    else:
        check_folds(y, n_outer, "n_outer")
        check_inner_folds(y, n_outer, n_inner)
    keys = sorted(distances)
    kernels = _Kernels(distances, svm, krein, svm_solver)
    folds = nested_folds(y, seeds, n_outer, n_inner, None if outer_folds is None else given)
    fold_seeds = [seed for seed, *_ in folds]
    jobs = [(train, test, splits) for _, train, test, splits in folds]
    with open_store(
        checkpoint, "nested", distances, y, jobs, lams, Cs, (svm, krein, svm_solver, _score_code())
    ) as store:
        scored, resumed = _run_folds(kernels, keys, lams, Cs, y, jobs, n_jobs, progress, "nested CV", store)
    folds = [acc for acc, _ in scored]
    selected = [
        selected_setting(seed, key, lam, C) for seed, (_, (key, lam, C)) in zip(fold_seeds, scored, strict=True)
    ]
    return {
        "protocol": "nested",
        **repetition_summary(folds, n_outer),
        "selected": selected,
        "majority_rate": majority_rate(y),
        "accuracy_ceiling": accuracy_ceiling(distances, y),
        "grid": {
            "d": sorted({key[0] for key in keys}),
            "k": sorted({key[1] for key in keys}),
            **({"beta": sorted({key[2] for key in keys})} if len(keys[0]) == 3 else {}),
            "settings": [list(key) for key in keys],
            "lam": list(lams),
            "C": list(Cs),
        },
        "outer_folds": n_outer,
        "inner_folds": n_inner,
        "outer_folds_given": outer_folds is not None,
        "inputs_sha256": inputs_digest(distances, y),
        "svm": svm if svm == "svc" else f"krein-{krein}",
        "svm_solver": svm_solver,
        "seeds": list(seeds),
        "resumed_steps": resumed,
    }


def inputs_digest(distances: Mapping, y: np.ndarray) -> str:
    """SHA-256 of a protocol's inputs: every setting's key and W (as float64) and the labels,
    so that results of other data are told apart (:func:`combine_repetitions`)."""
    digest = hashlib.sha256()
    for key in sorted(distances):
        digest.update(repr(key).encode())
        digest.update(np.ascontiguousarray(distances[key], dtype=np.float64).tobytes())
    digest.update(repr(np.asarray(y).tolist()).encode())
    return digest.hexdigest()


#: Entries of nested results that must agree for their repetitions to be one result.
_SAME_RUN = (
    "protocol",
    "inputs_sha256",
    "grid",
    "outer_folds",
    "inner_folds",
    "svm",
    "svm_solver",
    "majority_rate",
    "accuracy_ceiling",
)


def combine_repetitions(results: Sequence[dict]) -> dict:
    """One nested result from nested results over disjoint seeds of the same run, as if
    :func:`nested_protocol` had been called once with all their seeds in that order.

    Each repetition depends on its seed alone (its folds and its selection), so
    ``nested_protocol(W, y, seeds=(0, 1, 2))`` equals ``combine_repetitions([nested_protocol(
    W, y, seeds=(0, 1)), nested_protocol(W, y, seeds=(2,))])``: a run of hours can be split
    over sessions (``experiments/accuracy.py --repetitions-now``). ``resumed_steps`` add up;
    other entries a caller added (``seconds``) are left out.

    Raises:
        ValueError: for no results, a result that is not nested or lacks an entry, results
            of other labels or distances (``inputs_sha256``), grid, folds or SVM, a seed in
            more than one result, or runs on given outer folds (one call takes one seed
            there).
    """
    results = list(results)
    if not results:
        raise ValueError("combine_repetitions needs at least one result")
    for i, result in enumerate(results):
        if result.get("protocol") != "nested":
            raise ValueError(f"results[{i}] is not a nested protocol result (protocol {result.get('protocol')!r})")
        missing = [entry for entry in (*_SAME_RUN, "seeds", "selected", "fold_accuracies") if entry not in result]
        if missing:
            raise ValueError(f"results[{i}] lacks {missing}: not a whole nested_protocol result of this version")
        if result.get("outer_folds_given"):
            raise ValueError(
                f"results[{i}] was scored on given outer folds (a split file): its repetitions would repeat "
                "the same folds, so they are not combined"
            )
        for entry in _SAME_RUN:
            if result[entry] != results[0][entry]:
                raise ValueError(
                    f"results[{i}] differs from results[0] in {entry!r} ({result[entry]!r} against "
                    f"{results[0][entry]!r}): its repetitions come from another run"
                )
    seeds = [seed for result in results for seed in result["seeds"]]
    repeated = sorted({seed for seed in seeds if seeds.count(seed) > 1})
    if repeated:
        raise ValueError(f"seeds {repeated} are in more than one result: a repetition would count twice")
    folds = [a for result in results for a in result["fold_accuracies"]]
    return {
        **{entry: results[0][entry] for entry in _SAME_RUN},
        **repetition_summary(folds, results[0]["outer_folds"]),
        "outer_folds_given": False,
        "selected": [s for result in results for s in result["selected"]],
        "seeds": seeds,
        "resumed_steps": sum(result.get("resumed_steps", 0) for result in results),
    }
