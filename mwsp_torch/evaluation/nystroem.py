"""The nested protocol on Nystroem features: ``n x p`` distances, a linear SVM.

The folds are :func:`~mwsp_torch.evaluation.nested_protocol`'s, drawn the same way
(``StratifiedKFold(n_outer, shuffle=True, random_state=seed)`` outside, the same with
``n_inner`` inside each training fold), so the two protocols score the same test folds.
Inside each fold:

- **Landmarks from the training side only.** Each repetition draws one random order of all
  graphs (:func:`landmark_order`, seeded, blind to labels); the landmarks of a training set
  are its first ``m`` graphs in that order (:func:`fold_landmarks`), which is a uniform draw
  of ``m`` of its graphs. An outer fold's landmarks come from its training fold, an inner
  split's from its inner training graphs: never from the graphs it is scored on.
- **Distances once per setting.** Since every training set takes a prefix of one order, all
  landmarks of all folds are a few more than ``m`` graphs (:func:`landmark_pool`: about
  ``m / 0.72`` for 10 x 5 folds); W from every graph to that pool is computed once per
  ``(d, k)`` (:func:`landmark_distances`) and each fold reads its landmarks' columns.
- **Selection.** The nested protocol's engine (:func:`~mwsp_torch.evaluation.selection.select`:
  the first best mean inner accuracy in grid order wins, fits that cannot win are skipped;
  ``m`` fixed per run), with :class:`NystroemSVM` as its learner:
  scikit-learn's ``LinearSVC`` (squared hinge, L2, primal solver) on the features
  ``K(G, L) U S^(-1/2) U^T`` (:func:`~mwsp_torch.nystroem.nystroem_normalization`, small
  eigenvalues dropped); the outer fold is then fitted and scored once. An entry of the
  ``lam`` grid may be a tuple of scales: its features are every scale's side by side.

Figures against the full kernel: ``benchmarks/nystroem_accuracy.py``.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from contextlib import contextmanager

import numpy as np
from sklearn.svm import LinearSVC

from mwsp_torch._checks import is_integer
from mwsp_torch.estimator import MWSP
from mwsp_torch.evaluation.protocols import NESTED_INNER_FOLDS, PAPER_CS, PAPER_LAMS, nested_folds, ordered_settings
from mwsp_torch.evaluation.results import majority_rate, repetition_summary, selected_setting
from mwsp_torch.evaluation.selection import memory_mapped, select
from mwsp_torch.evaluation.validation import (
    check_folds,
    check_grid,
    check_inner_folds,
    check_labels,
    check_n_jobs,
    check_seeds,
    check_setting_keys,
)
from mwsp_torch.nystroem import lam_scales, scale_features
from mwsp_torch.transport import exact_distances

__all__ = [
    "MAX_ITER",
    "NystroemSVM",
    "PoolFeatures",
    "check_lam_grid",
    "fold_landmarks",
    "landmark_distances",
    "landmark_order",
    "landmark_pool",
    "nystroem_protocol",
]

#: Iterations of LinearSVC's primal solver (scikit-learn's default is 1000).
MAX_ITER = 10000


def landmark_order(n: int, seed: int) -> np.ndarray:
    """The repetition's random order of all ``n`` graphs (labels play no part)."""
    return np.random.default_rng(seed).permutation(n)


def fold_landmarks(order: np.ndarray, train: np.ndarray, m: int) -> np.ndarray:
    """The first ``m`` graphs of ``order`` that are in ``train``: ``m`` uniformly drawn
    training graphs, and never a graph outside ``train``.

    Raises:
        ValueError: when ``train`` has fewer than ``m`` graphs.
    """
    inside = np.zeros(len(order), dtype=bool)
    inside[train] = True
    chosen = order[inside[order]][:m]
    if len(chosen) < m:
        raise ValueError(
            f"n_components={m} landmarks cannot be drawn from a training set of {len(chosen)} graphs: pass fewer"
        )
    return chosen


def landmark_pool(
    y, n_components: int, seeds: Sequence[int] = (0,), n_outer: int = 10, n_inner: int = NESTED_INNER_FOLDS
) -> np.ndarray:
    """Sorted indices of every graph that some fold of :func:`nystroem_protocol` (same
    arguments) takes as a landmark: the columns of W it reads."""
    y = check_labels(y)
    pool = set()
    for seed, train, _, splits in nested_folds(y, seeds, n_outer, n_inner):
        order = landmark_order(len(y), seed)
        pool.update(fold_landmarks(order, train, n_components).tolist())
        for inner_train, _ in splits:
            pool.update(fold_landmarks(order, train[inner_train], n_components).tolist())
    return np.array(sorted(pool), dtype=np.int64)


def landmark_distances(graphs, pool: np.ndarray, d: int = 2, k: int = 0, n_jobs: int = -1, **params) -> np.ndarray:
    """Exact W ``[n, p]`` from every graph to the graphs ``pool``: the ``n x p`` problems
    alone (the compiled CPU engine; equal to the full matrix's values to rounding, about 1e-16).

    Args:
        graphs: all graphs (a list of PyG ``Data`` or a PyG dataset).
        pool (np.ndarray): ``[p]`` indices of the landmark graphs.
        d, k, n_jobs, params: as in :class:`~mwsp_torch.MWSP` (``paths``, ``labels``).
    """
    pool = np.asarray(pool, dtype=np.int64)
    support, _ = MWSP(d=d, k=k, n_jobs=n_jobs, **params).supports(graphs)
    n = support.num_graphs
    if len(pool) and (pool.min() < 0 or pool.max() >= n):
        raise ValueError(f"pool holds indices outside 0..{n - 1}")
    i, j = np.meshgrid(np.arange(n), pool, indexing="ij")
    pairs = np.stack([np.minimum(i, j).ravel(), np.maximum(i, j).ravel()], axis=1)
    return exact_distances(support, support, pairs, n_jobs=n_jobs).reshape(n, len(pool))


class PoolFeatures:
    """Nystroem features ``[rows, m]`` of any rows from the pool's columns of W (``pool``: the
    graph indices of those columns): ``PoolFeatures(W, pool, n, eigen_tol)(rows, landmarks, lam)``
    gives ``(features, dropped eigenvalues)``."""

    def __init__(self, distances: np.ndarray, pool: np.ndarray, n: int, eigen_tol: float) -> None:
        self.distances, self.eigen_tol, self.pool, self.n = distances, eigen_tol, pool, n
        self.column = np.full(n, -1, dtype=np.int64)
        self.column[pool] = np.arange(len(pool))

    def with_distances(self, distances: np.ndarray) -> PoolFeatures:
        """The same features read from another copy of W (a memory-mapped one)."""
        return PoolFeatures(distances, self.pool, self.n, self.eigen_tol)

    def __call__(self, rows: np.ndarray, landmarks: np.ndarray, lam) -> tuple[np.ndarray, int]:
        """``lam``: a scale or a tuple of them (features side by side, :func:`scale_features`)."""
        columns = self.column[landmarks]
        if (columns < 0).any():
            missing = int(landmarks[np.argmax(columns < 0)])
            raise ValueError(f"graph {missing} is a landmark but not in the pool: compute W to landmark_pool(...)")
        features, _, _, dropped = scale_features(
            self.distances[np.ix_(landmarks, columns)], self.distances[np.ix_(rows, columns)], lam, self.eigen_tol
        )
        return features, dropped


def check_lam_grid(lams) -> tuple:
    """The Nystroem protocol's ``lams``: a non-empty grid whose entries are scales or tuples
    of scales (:func:`~mwsp_torch.nystroem.lam_scales`), tuples kept as tuples."""
    lams = tuple(lams) if isinstance(lams, (tuple, list)) else tuple(check_grid(lams, "lams"))
    if not lams:
        raise ValueError("lams is empty: give at least one value")
    grid = []
    for i, lam in enumerate(lams):
        scales = lam_scales(lam, f"lams[{i}]")
        grid.append(scales if isinstance(lam, (tuple, list)) else scales[0])
    return tuple(grid)


class NystroemSVM:
    """The Nystroem protocol's learner for :func:`~mwsp_torch.evaluation.selection.select`:
    scikit-learn's ``LinearSVC`` on each setting's Nystroem features, whose landmarks come
    from the training side of each split (:func:`fold_landmarks`, by the fold's seed).

    Args:
        features: ``{key: PoolFeatures}``.
        folds: ``(seed, train, test, inner_splits)`` for each outer fold (:func:`nested_folds`).
        n_components (int): landmarks per training set.
        n (int): graphs in all.
    """

    fits_whole_grid = False

    def __init__(self, features: dict, folds: Sequence, n_components: int, n: int) -> None:
        self.features, self.folds, self.n_components, self.n = features, folds, n_components, n
        # Each fold's landmarks, drawn once: every inner split's, then the outer fit's.
        self.landmarks = []
        for seed, train, _, splits in folds:
            order = landmark_order(n, seed)
            inner = [fold_landmarks(order, train[inner_train], n_components) for inner_train, _ in splits]
            self.landmarks.append((inner, fold_landmarks(order, train, n_components)))

    def inner(self, key, lam, train: np.ndarray, splits: list, fold: int = 0):
        """``(features_fit, features_valid)`` of each inner split, landmarks from its inner
        training graphs."""
        for (inner_train, inner_valid), chosen in zip(splits, self.landmarks[fold][0], strict=True):
            phi, _ = self.features[key](train, chosen, lam)
            yield phi[inner_train], phi[inner_valid]

    def accuracies(self, x_fit, y_fit, x_score, y_score, Cs) -> np.ndarray:
        return np.array([np.mean(_linear_svm(x_fit, y_fit, C).predict(x_score) == y_score) for C in Cs])

    def test(self, key, lam, C: float, y: np.ndarray, train: np.ndarray, test: np.ndarray, fold: int = 0):
        """The outer fold's fit and score: ``(accuracy in percent, predictions, info)``, info
        holding the fold's landmarks and the eigenvalues its normalisation dropped."""
        chosen = self.landmarks[fold][1]
        phi, dropped = self.features[key](np.concatenate([train, test]), chosen, lam)
        predictions = _linear_svm(phi[: len(train)], y[train], C).predict(phi[len(train) :])
        accuracy = 100.0 * float(np.mean(predictions == y[test]))
        return accuracy, predictions, {"landmarks": chosen.tolist(), "dropped_eigenvalues": dropped}

    @contextmanager
    def shared(self, n_jobs: int):
        """This learner reading each W from one memory-mapped file when more than one process works."""
        distances = {key: features.distances for key, features in self.features.items()}
        with memory_mapped(distances, n_jobs) as mapped:
            features = {key: self.features[key].with_distances(np.asarray(mapped[key])) for key in self.features}
            shared = NystroemSVM.__new__(NystroemSVM)
            shared.__dict__.update(self.__dict__, features=features)
            yield shared


def _linear_svm(features, y, C: float) -> LinearSVC:
    return LinearSVC(C=C, dual=False, max_iter=MAX_ITER).fit(features, y)


def nystroem_protocol(
    distances: Mapping[tuple[int, int], np.ndarray],
    y,
    n_components: int,
    pool: np.ndarray | None = None,
    lams: Sequence[float] = PAPER_LAMS,
    Cs: Sequence[float] = PAPER_CS,
    seeds: Sequence[int] = (0,),
    n_outer: int = 10,
    n_inner: int = NESTED_INNER_FOLDS,
    eigen_tol: float = 1e-12,
    progress: bool | None = None,
    n_jobs: int = -1,
) -> dict:
    """Nested cross-validation of a linear SVM on Nystroem features of ``n_components``
    landmarks, selecting ``(d, k, lam, C)`` inside each training fold.

    Args:
        distances: ``{(d, k): W}`` with ``W[i, j]`` the distance from graph ``i`` to graph
            ``pool[j]``, ``[n, p]`` (:func:`landmark_distances`); a full ``[n, n]`` W works
            with ``pool=None``.
        y: ``[n]`` class labels, at least 2 classes.
        n_components (int): landmarks ``m`` per fold.
        pool (np.ndarray, optional): ``[p]`` graph indices of W's columns, holding
            :func:`landmark_pool`'s (default: all graphs).
        lams, Cs: grids of finite numbers ``> 0``; an entry of ``lams`` may be a tuple of
            them, one candidate whose features are every scale's side by side (same
            distances; :mod:`mwsp_torch.nystroem`).
        seeds: one repetition per seed (default ``(0,)``).
        n_outer, n_inner (int): folds (default ``10`` and ``5``).
        eigen_tol (float): :func:`~mwsp_torch.nystroem.nystroem_normalization`'s floor.
        progress (bool, optional): a tqdm bar over the folds (``None``: on a terminal only).
        n_jobs (int): processes, one outer fold each (default ``-1``: every core, one BLAS
            thread each); results do not depend on it.

    Returns:
        dict as :func:`~mwsp_torch.evaluation.nested_protocol`'s (accuracies in percent,
        ``accuracy_std`` over repetitions, ``fold_accuracy_std`` over folds), plus
        ``landmarks`` (each outer fold's), ``dropped_eigenvalues`` (each outer fold's
        final fit), ``svm_fits``, ``svm_not_converged`` and ``selection_seconds``.

    Raises:
        ValueError: for bad labels, folds, grids, ``n_components`` or W.
    """
    y = check_labels(y)
    n = len(y)
    lams, Cs = check_lam_grid(lams), check_grid(Cs, "Cs")
    seeds = check_seeds(seeds)
    if not is_integer(n_components) or n_components < 1:
        raise ValueError(f"n_components must be an integer >= 1, got {n_components!r}")
    check_folds(y, n_outer, "n_outer")
    check_inner_folds(y, n_outer, n_inner)
    check_n_jobs(n_jobs)
    if pool is None:
        pool = np.arange(n)
    else:
        pool = np.asarray(pool)
        if pool.ndim != 1 or pool.dtype.kind not in "iu" or len(np.unique(pool)) != len(pool):
            raise ValueError("pool must be a 1-D array of distinct graph indices (integers)")
        if len(pool) and (pool.min() < 0 or pool.max() >= n):
            raise ValueError(f"pool holds index {int(pool[(pool < 0) | (pool >= n)][0])}, outside 0..{n - 1}")
        pool = pool.astype(np.int64)
    check_setting_keys(distances)
    for key, w in distances.items():
        if np.shape(w) != (n, len(pool)):
            raise ValueError(f"distances[{key!r}] has shape {np.shape(w)}, expected [n, p] = [{n}, {len(pool)}]")
        if not np.isfinite(w).all() or (np.asarray(w) < 0).any():
            raise ValueError(f"distances[{key!r}] must be finite and >= 0")
    keys = ordered_settings(distances)
    start = time.perf_counter()
    folds = nested_folds(y, seeds, n_outer, n_inner)
    features = {key: PoolFeatures(np.asarray(distances[key]), pool, n, eigen_tol) for key in keys}
    learner = NystroemSVM(features, folds, n_components, n)
    jobs = [(train, test, splits) for _, train, test, splits in folds]
    selection = select(learner, keys, {key: lams for key in keys}, Cs, y, jobs, n_jobs, progress, "Nystroem nested CV")
    outcomes = selection.folds
    return {
        "protocol": "nystroem-nested",
        **repetition_summary([fold.accuracy for fold in outcomes], n_outer),
        "selected": [selected_setting(seed, *fold.choice) for (seed, *_), fold in zip(folds, outcomes, strict=True)],
        "fold_predictions": [fold.predictions.tolist() for fold in outcomes],
        "majority_rate": majority_rate(y),
        "grid": {
            "settings": [list(key) if isinstance(key, tuple) else key for key in keys],
            "lam": list(lams),
            "C": list(Cs),
        },
        "n_components": n_components,
        "pool_size": len(pool),
        "outer_folds": n_outer,
        "inner_folds": n_inner,
        "svm": f"LinearSVC(squared hinge, L2, dual=False, max_iter={MAX_ITER})",
        "seeds": list(seeds),
        "landmarks": [fold.info["landmarks"] for fold in outcomes],
        "dropped_eigenvalues": [fold.info["dropped_eigenvalues"] for fold in outcomes],
        "svm_fits": selection.fits,
        "svm_not_converged": selection.not_converged,
        "selection_seconds": time.perf_counter() - start,
    }
