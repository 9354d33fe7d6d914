"""C-SVM on a precomputed kernel, solved for a whole grid of ``C`` at once.

Why our own solver: the protocols fit one SVM per (setting, ``lam``, ``C``, inner split,
fold), 56,700 of them for NCI1 over d 1..3 x k 0..2 with 3 repetitions, and on small graph
sets scikit-learn's ``SVC`` spends most of each fit on per-fit set-up (validation, libsvm's
problem and column cache). Here the kernel is one dense array in memory, and a split's
``C`` grid is one call, walked upwards: a solution with every alpha at a bound, rescaled to
the next ``C``, is kept when it is still optimal (no iteration). scikit-learn's ``SVC`` has no
warm start; ThunderSVM and cuML are GPU solvers that do not run on this CPU.

What: the same problem and the same algorithm as libsvm's ``C``-SVC (Fan, Chen and Lin
2005: SMO with second-order working-set selection and shrinking, stopping when the maximal
violation falls under ``tol``, libsvm's ``eps`` (default ``1e-3``), the bias as libsvm
computes it, the first class as ``+1``), one-against-one for more than two classes with
libsvm's voting (ties to the first class). From :data:`LIBSVM_FROM` training graphs on, the
cold starts call libsvm itself, which was faster there. The solutions agree with libsvm's to
its stopping tolerance, not bit for bit: a prediction can differ where a decision value is
that close to 0 (``tests/test_svm.py``). Agreement and speed, measured: ``docs/protocols.md``.
Its kernels stay on numba's cached JIT, outside the ahead-of-time build (:mod:`mwsp_torch.compiled`): a
selection runs for seconds to hours, so numba's per-process set-up is no share of it.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from numba import njit
from sklearn.svm import SVC

__all__ = [
    "LIBSVM_FROM",
    "SVM_SOLVERS",
    "accuracy_path",
    "decision_path",
    "predict_path",
]

#: libsvm's floor for a non-positive curvature in the two-variable subproblem.
_TAU = 1e-12
#: The solvers the protocols take: ``"path"`` (this module) or ``"libsvm"`` (scikit-learn's SVC).
SVM_SOLVERS = ("path", "libsvm")
#: Training sets from this size on solve a cold start with libsvm (scikit-learn's SVC) and
#: only the rescaled warm starts here: on NCI1's 2,959-graph splits, ill-conditioned kernels
#: (small lam, large C) took libsvm 4-5x fewer cycles an iteration than this module's SMO,
#: whose passes gather through the active set; on MUTAG's 135 it is the other way round.
LIBSVM_FROM = 1500


@njit(cache=True, nogil=True, inline="always")
def _bounds(y_t, alpha_t, C):  # pragma: no cover - compiled
    """Penalties that keep row ``t`` out of ``I_up`` (``-inf``) and ``I_low`` (``+inf``)."""
    up = alpha_t < C if y_t > 0 else alpha_t > 0
    low = alpha_t > 0 if y_t > 0 else alpha_t < C
    return (0.0 if up else -np.inf), (0.0 if low else np.inf)


@njit(cache=True, nogil=True)
def _pick_i(v, up, active, size):  # pragma: no cover - compiled
    """The maximal violator in ``I_up`` among ``active[:size]``: ``(g_max, i)``."""
    g_max = -np.inf
    i = 0
    for k in range(size):
        t = active[k]
        value = v[t] + up[t]
        if value >= g_max:
            g_max = value
            i = t
    return g_max, i


@njit(cache=True, nogil=True)
def _pick_j(K, diagonal, v, low, active, size, g_max, i):  # pragma: no cover - compiled
    """libsvm's second-order choice in ``I_low`` among ``active[:size]``, the largest
    ``diff^2 / quad`` (compared as fractions: no division in the pass): ``(g_min, j)``,
    ``j = -1`` when no row improves."""
    g_min = np.inf
    top, bottom = 0.0, 1.0
    j = -1
    qd_i = diagonal[i]
    row_i = K[i]
    for k in range(size):
        t = active[k]
        g_min = min(g_min, v[t] + low[t])
        diff = g_max - v[t]
        quad = qd_i + diagonal[t] - 2.0 * row_i[t]
        quad = quad if quad > 0 else _TAU
        gain = diff * diff if (diff > 0 and low[t] == 0.0) else -1.0
        if gain * bottom >= top * quad:
            top, bottom = gain, quad
            j = t
    return g_min, j


@njit(cache=True, nogil=True)
def _reconstruct(K, y, alpha, v, active, size):  # pragma: no cover - compiled
    """The exact ``v = -y G`` of the rows left out of the active set, ``active[size:]``."""
    support = np.flatnonzero(alpha > 0)
    weights = alpha[support] * y[support]
    for k in range(size, len(active)):
        t = active[k]
        row = K[t]
        total = 0.0
        for s in range(len(support)):
            total += weights[s] * row[support[s]]
        v[t] = y[t] - total


@njit(cache=True, nogil=True)
def _shrink(v, up, low, active, size, g_max, g_min):  # pragma: no cover - compiled
    """libsvm's shrinking: the bounded rows that cannot enter a working set soon (a row
    only in ``I_low`` above ``g_max``, only in ``I_up`` below ``g_min``) move behind
    ``active[:size]``; returns the new size."""
    k = 0
    while k < size:
        t = active[k]
        if (up[t] == -np.inf and v[t] > g_max) or (low[t] == np.inf and v[t] < g_min):
            size -= 1
            active[k], active[size] = active[size], t
        else:
            k += 1
    return size


@njit(cache=True, nogil=True)
def _smo(K, diagonal, y, C, alpha, G, tol, max_iter):  # pragma: no cover - compiled
    """libsvm's SMO, with its shrinking, on ``min 1/2 a^T Q a - e^T a``, ``y^T a = 0``,
    ``0 <= a <= C``, ``Q = y y^T * K``, from the feasible ``alpha`` whose gradient
    ``G = Q alpha - e`` is given; both are updated in place. ``diagonal`` is ``K``'s,
    contiguous. Returns ``(rho, iterations)``: the decision function is
    ``sum_t alpha_t y_t K(t, x) - rho``.

    Two passes over the active rows an iteration, without branches on the labels
    (``v = -y G``, the index sets as additive penalties), which no branch predictor
    guesses: one picks ``j``, the other updates the gradient and picks the next ``i``.
    """
    n = len(y)
    v = -y * G
    up = np.empty(n)
    low = np.empty(n)
    for t in range(n):
        up[t], low[t] = _bounds(y[t], alpha[t], C)
    active = np.arange(n)
    size = n
    unshrunk = False
    counter = min(n, 1000) + 1
    iterations = 0
    g_max, i = _pick_i(v, up, active, size)
    while iterations < max_iter:
        counter -= 1
        if counter == 0:
            counter = min(n, 1000)
            g_min, _ = _pick_j(K, diagonal, v, low, active, size, g_max, i)
            if not unshrunk and g_max - g_min <= 10 * tol:
                unshrunk = True
                _reconstruct(K, y, alpha, v, active, size)
                size = n
            size = _shrink(v, up, low, active, size, g_max, g_min)
            g_max, i = _pick_i(v, up, active, size)
        g_min, j = _pick_j(K, diagonal, v, low, active, size, g_max, i)
        if g_max - g_min < tol or j < 0:
            if size == n:
                break
            _reconstruct(K, y, alpha, v, active, size)
            size = n
            g_max, i = _pick_i(v, up, active, size)
            g_min, j = _pick_j(K, diagonal, v, low, active, size, g_max, i)
            if g_max - g_min < tol or j < 0:
                break
            counter = 1
        iterations += 1
        old_i, old_j = alpha[i], alpha[j]
        if y[i] != y[j]:
            quad = diagonal[i] + diagonal[j] - 2.0 * K[i, j]
            if quad <= 0:
                quad = _TAU
            delta = (y[i] * v[i] + y[j] * v[j]) / quad
            diff = alpha[i] - alpha[j]
            alpha[i] += delta
            alpha[j] += delta
            if diff > 0:
                if alpha[j] < 0:
                    alpha[j] = 0.0
                    alpha[i] = diff
            elif alpha[i] < 0:
                alpha[i] = 0.0
                alpha[j] = -diff
            if diff > 0:
                if alpha[i] > C:
                    alpha[i] = C
                    alpha[j] = C - diff
            elif alpha[j] > C:
                alpha[j] = C
                alpha[i] = C + diff
        else:
            quad = diagonal[i] + diagonal[j] - 2.0 * K[i, j]
            if quad <= 0:
                quad = _TAU
            delta = (y[j] * v[j] - y[i] * v[i]) / quad
            total = alpha[i] + alpha[j]
            alpha[i] -= delta
            alpha[j] += delta
            if total > C:
                if alpha[i] > C:
                    alpha[i] = C
                    alpha[j] = total - C
            elif alpha[j] < 0:
                alpha[j] = 0.0
                alpha[i] = total
            if total > C:
                if alpha[j] > C:
                    alpha[j] = C
                    alpha[i] = total - C
            elif alpha[i] < 0:
                alpha[i] = 0.0
                alpha[j] = total
        step_i = y[i] * (alpha[i] - old_i)
        step_j = y[j] * (alpha[j] - old_j)
        row_j = K[j]
        up[i], low[i] = _bounds(y[i], alpha[i], C)
        up[j], low[j] = _bounds(y[j], alpha[j], C)
        row_i = K[i]
        g_max = -np.inf
        i = 0
        for k in range(size):
            t = active[k]
            value = v[t] - (row_i[t] * step_i + row_j[t] * step_j)
            v[t] = value
            value += up[t]
            if value >= g_max:
                g_max = value
                i = t
    if size < n:
        _reconstruct(K, y, alpha, v, active, size)
    for t in range(n):
        G[t] = -y[t] * v[t]
    # The bias, as libsvm's calculate_rho.
    upper, lower, free_sum, free = np.inf, -np.inf, 0.0, 0
    for t in range(n):
        yg = y[t] * G[t]
        if alpha[t] >= C:
            if y[t] < 0:
                upper = min(upper, yg)
            else:
                lower = max(lower, yg)
        elif alpha[t] <= 0:
            if y[t] > 0:
                upper = min(upper, yg)
            else:
                lower = max(lower, yg)
        else:
            free += 1
            free_sum += yg
    rho = free_sum / free if free > 0 else (upper + lower) / 2.0
    return rho, iterations


def _violation(y: np.ndarray, C: float, alpha: np.ndarray, gradient: np.ndarray) -> float:
    """The maximal KKT violation of ``alpha`` (libsvm's stopping quantity)."""
    v = -y * gradient
    up = np.where(y > 0, alpha < C, alpha > 0)
    low = np.where(y > 0, alpha > 0, alpha < C)
    return float(v[up].max(initial=-np.inf) - v[low].min(initial=np.inf))


def _check_cs(Cs) -> np.ndarray:
    cs = np.asarray(Cs, dtype=np.float64).reshape(-1)
    if len(cs) == 0 or not np.all(np.isfinite(cs)) or np.any(cs <= 0):
        raise ValueError(f"Cs must be a non-empty sequence of finite numbers > 0, got {list(Cs)!r}")
    return cs


def _check_inputs(k_train: np.ndarray, k_test: np.ndarray, tol: float) -> None:
    if not (np.isfinite(tol) and tol > 0):
        raise ValueError(f"tol must be a finite number > 0, got {tol!r}")
    for name, kernel in (("k_train", k_train), ("k_test", k_test)):
        if not np.isfinite(kernel).all():
            raise ValueError(f"{name} holds NaN or infinite values")


def decision_path(
    k_train: np.ndarray, signs: np.ndarray, k_test: np.ndarray, Cs: Sequence[float], tol: float = 1e-3
) -> np.ndarray:
    """Decision values of the binary C-SVM for each ``C``.

    Args:
        k_train (np.ndarray): ``[n, n]`` kernel of the training graphs.
        signs (np.ndarray): ``[n]`` labels ``+1`` / ``-1``, both present.
        k_test (np.ndarray): ``[m, n]`` kernel of the graphs to score against the training ones.
        Cs: the ``C`` grid, any order (solved in increasing order; a solution with every
            alpha at a bound, scaled, starts the next).
        tol (float): the stopping tolerance on the maximal KKT violation (libsvm's ``eps``).

    Returns:
        ``[len(Cs), m]`` decision values, in the order of ``Cs``; positive means ``+1``.
    """
    cs = _check_cs(Cs)
    k_train = np.ascontiguousarray(k_train, dtype=np.float64)
    y = np.ascontiguousarray(signs, dtype=np.float64)
    n = len(y)
    if not (np.isin(y, (-1.0, 1.0)).all() and (y > 0).any() and (y < 0).any()):
        raise ValueError("signs must be +1 / -1, both present")
    _check_inputs(k_train, k_test, tol)
    alpha = np.zeros(n)
    gradient = None  # G = Q alpha - e, set by the first (cold) solve
    max_iter = max(10_000_000, 100 * n)  # libsvm's (scikit-learn passes -1: none)
    diagonal = np.ascontiguousarray(np.diagonal(k_train))
    values = np.empty((len(cs), len(k_test)))
    previous = None
    for c in np.argsort(cs, kind="stable"):
        C = float(cs[c])
        if previous is not None and not np.any((alpha > 0) & (alpha < previous)):
            # Every alpha at a bound: scaled by C / previous they stay feasible, with the
            # gradient rescaled to match, and are often still optimal (NCI1's small Cs).
            if gradient is None:  # after a libsvm solve: made only when a warm start needs it
                gradient = y * (k_train @ (alpha * y)) - 1.0
            ratio = C / previous
            alpha *= ratio
            gradient *= ratio
            gradient += ratio - 1.0
            if _violation(y, C, alpha, gradient) < tol:
                rho, _ = _smo(k_train, diagonal, y, C, alpha, gradient, float(tol), 0)
                values[c] = k_test @ (alpha * y) - rho
                previous = C
                continue
        # Otherwise a cold start: a solution with free alphas, or a rescaled one that is no
        # longer optimal, was a poor start (up to 6x the iterations on NCI1's largest C).
        previous = C
        if n >= LIBSVM_FROM:
            # libsvm takes its first (sorted) class as +1: -y puts ours first, as in the
            # protocols' SVC (the path, and ill-conditioned solutions, depend on it).
            model = SVC(kernel="precomputed", C=C, tol=tol).fit(k_train, -y)
            values[c] = -model.decision_function(k_test)
            alpha[:] = 0.0
            alpha[model.support_] = np.abs(model.dual_coef_[0])
            gradient = None
            continue
        alpha[:] = 0.0
        gradient = -np.ones(n)
        rho, _ = _smo(k_train, diagonal, y, C, alpha, gradient, float(tol), max_iter)
        values[c] = k_test @ (alpha * y) - rho
    return values


def predict_path(
    k_train: np.ndarray, y_train: np.ndarray, k_test: np.ndarray, Cs: Sequence[float], tol: float = 1e-3
) -> np.ndarray:
    """Class predictions of the C-SVM (one-against-one, libsvm's voting) for each ``C``.

    Args:
        k_train (np.ndarray): ``[n, n]`` kernel of the training graphs.
        y_train (np.ndarray): ``[n]`` class labels, at least two classes.
        k_test (np.ndarray): ``[m, n]`` kernel of the test graphs against the training graphs.
        Cs: the ``C`` grid.
        tol (float): stopping tolerance (libsvm's ``eps``).

    Returns:
        ``[len(Cs), m]`` predicted labels (values of ``y_train``), in the order of ``Cs``.

    Raises:
        ValueError: for mismatched shapes, one class, a kernel with NaN or infinite values,
            ``tol <= 0``, or a bad ``C`` grid.
    """
    y_train = np.asarray(y_train)
    k_train, k_test = np.asarray(k_train), np.asarray(k_test)
    n = len(y_train)
    if k_train.shape != (n, n) or k_test.ndim != 2 or k_test.shape[1] != n:
        raise ValueError(
            f"k_train must be [{n}, {n}] and k_test [m, {n}] for {n} training labels, "
            f"got {k_train.shape} and {k_test.shape}"
        )
    _check_inputs(k_train, k_test, tol)
    classes, index = np.unique(y_train, return_inverse=True)
    if len(classes) < 2:
        raise ValueError(f"y_train has one class ({classes[0]!r}): an SVM needs two")
    cs = _check_cs(Cs)
    votes = np.zeros((len(cs), len(k_test), len(classes)), dtype=np.int64)
    rows = np.arange(len(k_test))
    for a in range(len(classes)):
        for b in range(a + 1, len(classes)):
            if len(classes) == 2:
                members, kt, kv = np.arange(n), k_train, k_test
            else:
                members = np.flatnonzero((index == a) | (index == b))
                kt, kv = k_train[np.ix_(members, members)], k_test[:, members]
            signs = np.where(index[members] == a, 1.0, -1.0)
            values = decision_path(kt, signs, kv, cs, tol)
            for c in range(len(cs)):
                winner = np.where(values[c] > 0, a, b)
                votes[c, rows, winner] += 1
    return classes[np.argmax(votes, axis=2)]


def accuracy_path(
    k_train: np.ndarray,
    y_train: np.ndarray,
    k_test: np.ndarray,
    y_test: np.ndarray,
    Cs: Sequence[float],
    tol: float = 1e-3,
) -> np.ndarray:
    """The fraction of ``y_test`` that :func:`predict_path` gets right, for each ``C``."""
    return np.mean(predict_path(k_train, y_train, k_test, Cs, tol) == np.asarray(y_test)[None, :], axis=1)
