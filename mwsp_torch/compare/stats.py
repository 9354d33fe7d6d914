"""Paired tests between two methods scored on the same outer folds.

Two methods' fold accuracies on one split file are paired (the same test graphs, the same
training parts), so their difference is tested fold by fold, not by comparing means and
standard deviations:

- the Wilcoxon signed-rank test (``scipy.stats.wilcoxon``, two-sided, exact for 10 folds),
  which assumes nothing of the differences' distribution;
- the corrected resampled t-test of Nadeau and Bengio (2003), which widens the paired
  t-test's variance by ``n_test / n_train`` for the overlap of the training parts:
  ``t = mean(d) / sqrt((1 / J + n_test / n_train) var(d))`` on ``J - 1`` degrees of freedom.

A difference is called significant at 5 % when both agree (:func:`paired_test`'s
``significant``): the table is then conservative rather than a pick of the friendlier test.
"""

from __future__ import annotations

import numpy as np
from scipy import stats

__all__ = ["ALPHA", "corrected_t_test", "paired_test"]

ALPHA = 0.05


def corrected_t_test(differences, n_train: float, n_test: float) -> float:
    """The two-sided p-value of Nadeau and Bengio's corrected resampled t-test.

    Args:
        differences: ``[J]`` paired differences (one per fold).
        n_train, n_test: the mean training and test part sizes.
    """
    d = np.asarray(differences, dtype=np.float64)
    if len(d) < 2:
        raise ValueError(f"a paired test needs at least 2 folds, got {len(d)}")
    variance = float(np.var(d, ddof=1))
    if variance == 0.0:
        return 1.0 if float(np.mean(d)) == 0.0 else 0.0
    t = float(np.mean(d)) / np.sqrt((1.0 / len(d) + n_test / n_train) * variance)
    return float(2.0 * stats.t.sf(abs(t), df=len(d) - 1))


def paired_test(a, b, n_train: float, n_test: float) -> dict:
    """Method ``a`` against method ``b`` on the same folds.

    Args:
        a, b: ``[J]`` fold accuracies, in the same fold order.
        n_train, n_test: the mean training and test part sizes (the correction's ratio).

    Returns:
        dict with ``mean_difference`` (``a - b``, points), ``wilcoxon_p``, ``corrected_t_p``
        and ``significant`` (both below :data:`ALPHA`).

    Examples:
        >>> paired_test([80, 82, 81, 79, 83], [70, 71, 72, 69, 70], 900, 100)["significant"]
        False
    """
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    if a.shape != b.shape or a.ndim != 1:
        raise ValueError(f"paired fold accuracies must have one shape, got {a.shape} and {b.shape}")
    d = a - b
    if np.all(d == 0):
        wilcoxon_p = 1.0
    else:
        wilcoxon_p = float(stats.wilcoxon(a, b, zero_method="wilcox", alternative="two-sided").pvalue)
    corrected_p = corrected_t_test(d, n_train, n_test)
    return {
        "mean_difference": float(np.mean(d)),
        "wilcoxon_p": wilcoxon_p,
        "corrected_t_p": corrected_p,
        "significant": bool(wilcoxon_p < ALPHA and corrected_p < ALPHA),
    }
