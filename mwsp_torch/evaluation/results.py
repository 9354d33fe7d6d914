"""What a protocol returns, and how results are read and joined: the accuracy summary of
repeated folds, the majority-class rate and the accuracy ceiling of W, the record of one
fold's selection, the digest that tells inputs apart, and the joining of repetitions run
apart.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence

import numpy as np

from mwsp_torch.evaluation.validation import CHECK_ROWS, as_numpy

__all__ = [
    "accuracy_ceiling",
    "combine_repetitions",
    "inputs_digest",
    "kernel_ceiling",
    "majority_rate",
    "repetition_summary",
    "reported_std",
    "selected_setting",
]


def majority_rate(y: np.ndarray) -> float:
    """Accuracy of always predicting the most frequent class, in percent."""
    _, counts = np.unique(y, return_counts=True)
    return float(100.0 * counts.max() / len(y))


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
    y = as_numpy(y)
    w = as_numpy(distances)
    n = len(y)
    rows, cols = [], []
    for start in range(0, n, CHECK_ROWS):
        i, j = np.nonzero(np.asarray(w[start : start + CHECK_ROWS]) == 0)
        rows.append(i + start)
        cols.append(j)
    rows, cols = np.concatenate(rows), np.concatenate(cols)
    _, group = connected_components(coo_matrix((np.ones(len(rows)), (rows, cols)), shape=(n, n)), directed=False)
    _, classes = np.unique(y, return_inverse=True)
    counts = np.zeros((group.max() + 1, classes.max() + 1), dtype=np.int64)
    np.add.at(counts, (group, classes), 1)
    return float(100.0 * counts.max(axis=1).sum() / n)


def selected_setting(seed: int, key, lam, C: float) -> dict:
    """One fold's selection as the protocols record it: ``seed, d, k[, beta], lam, C`` for an
    MWSP setting, ``seed, kernel, [lam,] C`` for a named one (``lam`` ``None``: a kernel
    without a grid of its own, left out)."""
    named = {"kernel": key} if isinstance(key, str) else {"d": key[0], "k": key[1]}
    beta = {"beta": key[2]} if isinstance(key, tuple) and len(key) == 3 else {}
    return {"seed": seed, **named, **beta, **({} if lam is None else {"lam": lam}), "C": C}


def kernel_ceiling(kernel, y) -> float:
    """:func:`accuracy_ceiling` for a kernel matrix: graphs whose rows are equal get one
    prediction from any classifier on it, so a group of them scores at most its most
    frequent class."""
    _, group = np.unique(np.asarray(kernel, dtype=np.float64), axis=0, return_inverse=True)
    _, classes = np.unique(np.asarray(y), return_inverse=True)
    counts = np.zeros((group.max() + 1, classes.max() + 1), dtype=np.int64)
    np.add.at(counts, (group.ravel(), classes), 1)
    return float(100.0 * counts.max(axis=1).sum() / len(classes))


def inputs_digest(settings: Mapping, y: np.ndarray, kernels: Mapping | None = None) -> str:
    """SHA-256 of a protocol's inputs: every setting's key and matrix (as float64) and the
    labels, so that results of other data are told apart (:func:`combine_repetitions`).

    Args:
        settings: ``{key: W}`` in grid order.
        y (np.ndarray): the labels.
        kernels: ``{key: [K, ...]}``, the precomputed kernels (each tagged as one, so a kernel
            and a W of the same values differ).
    """
    digest = hashlib.sha256()
    for key, w in settings.items():
        digest.update(repr(key).encode())
        digest.update(np.ascontiguousarray(w, dtype=np.float64).tobytes())
    for key, matrices in (kernels or {}).items():
        digest.update(repr(("kernel", key, len(matrices))).encode())
        for k in matrices:
            digest.update(np.ascontiguousarray(k, dtype=np.float64).tobytes())
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
    ``fold_predictions`` are joined when every result has them; ``svm_fits`` (the work one
    call did, which its floors shape) and other entries a caller added (``seconds``) are left
    out.

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
        **(
            {"fold_predictions": [p for result in results for p in result["fold_predictions"]]}
            if all("fold_predictions" in result for result in results)
            else {}
        ),
    }
