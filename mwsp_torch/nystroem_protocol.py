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
- **Selection.** ``(d, k, lam, C)`` by the mean inner accuracy (first best in grid order,
  as :func:`~mwsp_torch.evaluation.nested_protocol` does; ``m`` fixed per run) of
  scikit-learn's ``LinearSVC`` (squared hinge, L2, primal solver) on the features
  ``K(G, L) U S^(-1/2) U^T`` (:func:`~mwsp_torch.nystroem.nystroem_normalization`, small
  eigenvalues dropped); the outer fold is then fitted and scored once. An entry of the
  ``lam`` grid may be a tuple of scales: its features are every scale's side by side.

Figures against the full kernel: ``benchmarks/nystroem_accuracy.py``.
"""

from __future__ import annotations

import time
import warnings
from collections.abc import Mapping, Sequence

import numpy as np
from joblib import Parallel, delayed, parallel_config
from sklearn.exceptions import ConvergenceWarning
from sklearn.svm import LinearSVC
from tqdm.auto import tqdm

from mwsp_torch._checks import is_integer
from mwsp_torch.estimator import MWSP
from mwsp_torch.evaluation import (
    NESTED_INNER_FOLDS,
    PAPER_CS,
    PAPER_LAMS,
    can_still_win,
    check_folds,
    check_grid,
    check_inner_folds,
    check_labels,
    check_n_jobs,
    check_seeds,
    check_setting_keys,
    majority_rate,
    memory_mapped,
    nested_folds,
    repetition_summary,
    selected_setting,
)
from mwsp_torch.nystroem import lam_scales, scale_features
from mwsp_torch.transport import exact_distances

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
        self.distances, self.eigen_tol = distances, eigen_tol
        self.column = np.full(n, -1, dtype=np.int64)
        self.column[pool] = np.arange(len(pool))

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


def _accuracy(features, y, train, test, C: float, stats: dict) -> float:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ConvergenceWarning)
        model = LinearSVC(C=C, dual=False, max_iter=MAX_ITER).fit(features[train], y[train])
    stats["not_converged"] += sum(issubclass(w.category, ConvergenceWarning) for w in caught)
    stats["fits"] += 1
    return float(np.mean(model.predict(features[test]) == y[test]))


def _fold(features, keys, lams, Cs, y, n_components, seed, train, test, splits, leader):
    """One outer fold: its inner selection of ``(setting, lam, C)``, then its fit and score.

    Candidates are walked ``(setting, lam)`` by ``(setting, lam)``, starting with ``leader``
    (the latest fold's winner), each ``C`` on every inner split in turn; a ``C`` that can no
    longer reach the best mean found so far is not fitted further
    (:func:`~mwsp_torch.evaluation.can_still_win`), so it is never selected and the first
    best in grid order of the inner accuracies' sums wins, as with every fit made."""
    stats = {"fits": 0, "not_converged": 0}
    order = landmark_order(len(y), seed)
    inner_landmarks = [fold_landmarks(order, train[inner_train], n_components) for inner_train, _ in splits]
    sums = np.full((len(keys), len(lams), len(Cs)), -np.inf)  # -inf: cut, never the first best
    floor = -np.inf
    candidates = [(a, b) for a in range(len(keys)) for b in range(len(lams))]
    if leader is not None:
        candidates.sort(key=lambda candidate: candidate != leader)
    for a, b in candidates:
        totals = np.zeros(len(Cs))
        alive = np.ones(len(Cs), dtype=bool)
        for j, ((inner_train, inner_valid), chosen) in enumerate(zip(splits, inner_landmarks, strict=True)):
            phi, _ = features[keys[a]](train, chosen, lams[b])
            for c in np.flatnonzero(alive):
                totals[c] += _accuracy(phi, y[train], inner_train, inner_valid, Cs[c], stats)
            alive &= can_still_win(totals, len(splits) - j - 1, len(splits), floor)
            if not alive.any():
                break
        sums[a, b, alive] = totals[alive]
        if alive.any():
            floor = max(floor, float(totals[alive].max()) / len(splits))
    a, b, c = np.unravel_index(int(np.argmax(sums)), sums.shape)  # the first best, grid order
    chosen = fold_landmarks(order, train, n_components)
    rows = np.concatenate([train, test])
    phi, fold_dropped = features[keys[a]](rows, chosen, lams[b])
    positions = np.arange(len(rows))
    accuracy = 100.0 * _accuracy(phi, y[rows], positions[: len(train)], positions[len(train) :], Cs[c], stats)
    return accuracy, (int(a), int(b), int(c)), chosen, fold_dropped, stats


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
    keys = sorted(distances)
    start = time.perf_counter()
    folds = nested_folds(y, seeds, n_outer, n_inner)
    stats = {"fits": 0, "not_converged": 0}
    accuracies, selected, landmarks, dropped = [], [], [], []
    last_winner = []  # the latest finished fold's (setting, lam): the next folds start with it

    def tasks():
        for seed, train, test, splits in folds:
            leader = last_winner[-1] if last_winner else None
            yield delayed(_fold)(features, keys, lams, Cs, y, n_components, seed, train, test, splits, leader)

    # The workers read each W from one memory-mapped file (evaluation.memory_mapped).
    with memory_mapped(distances, n_jobs) as mapped, parallel_config(backend="loky", inner_max_num_threads=1):
        features = {key: PoolFeatures(np.asarray(mapped[key]), pool, n, eigen_tol) for key in keys}
        runner = Parallel(n_jobs=n_jobs, return_as="generator")
        bar = tqdm(total=len(folds), desc="Nystroem nested CV", disable=None if progress is None else not progress)
        with bar:
            for (seed, _, _, _), (accuracy, (a, b, c), chosen, fold_dropped, fold_stats) in zip(
                folds, runner(tasks()), strict=True
            ):
                accuracies.append(accuracy)
                selected.append(selected_setting(seed, keys[a], lams[b], Cs[c]))
                landmarks.append(chosen.tolist())
                dropped.append(fold_dropped)
                for name in stats:
                    stats[name] += fold_stats[name]
                last_winner.append((a, b))
                bar.update()
    return {
        "protocol": "nystroem-nested",
        **repetition_summary(accuracies, n_outer),
        "selected": selected,
        "majority_rate": majority_rate(y),
        "grid": {"settings": [list(key) for key in keys], "lam": list(lams), "C": list(Cs)},
        "n_components": n_components,
        "pool_size": len(pool),
        "outer_folds": n_outer,
        "inner_folds": n_inner,
        "svm": f"LinearSVC(squared hinge, L2, dual=False, max_iter={MAX_ITER})",
        "seeds": list(seeds),
        "landmarks": landmarks,
        "dropped_eigenvalues": dropped,
        "svm_fits": stats["fits"],
        "svm_not_converged": stats["not_converged"],
        "selection_seconds": time.perf_counter() - start,
    }
