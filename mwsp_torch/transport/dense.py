"""Exact transport for batches of small dense-cost problems, with optimal plans and duals.

The all-pairs engine (:mod:`~mwsp_torch.transport.exact`) needs only W; a layer trained
through W (:class:`mwsp_torch.nn.WassersteinPooling`) needs the optimal plan and the dual
potentials too, for problems whose costs are a dense matrix (points in ``R^d``, not rows of
a bank). :func:`dense_exact_transport` solves many such problems in one call into compiled
code, on threads, with the same transportation simplex (:func:`mwsp_torch.transport._simplex.transport_cost`,
asked for its final basis and potentials), so its W is the all-pairs engine's method and
threshold (``docs/exactness.md``), checked against POT's ``ot.emd2`` in ``tests/test_pooling.py``.

Problems are blocks of one cost matrix: problem ``k`` transports row group ``pairs[k, 0]``
(rows ``row_ptr[i]:row_ptr[i + 1]``) to column group ``pairs[k, 1]`` (columns
``col_ptr[j]:col_ptr[j + 1]``), the shape in which graphs meet templates (every node of a
batch against every template point, one cost matrix).

Masses: the solver works in exact integers (Orden's perturbation needs them). Uniform
sides are exact: ``n`` rows and ``m`` columns get ``m`` and ``n`` units, as in the
all-pairs engine. Given weights are normalised per group and rounded to integer multiples
of ``1 / MASS_UNITS`` of the total (cumulative sums rounded, so both sides total the same),
about float64's own resolution: a change of W of at most the largest cost times the number
of points over ``MASS_UNITS``. Points whose mass rounds to zero take no part in the solve;
their dual is the tightest feasible one, ``u_p = min_q (c_pq - v_q)``.
"""

from __future__ import annotations

import itertools
from concurrent.futures import ThreadPoolExecutor
from typing import NamedTuple

import numpy as np
from numba import njit

from mwsp_torch.compiled import numba_ready
from mwsp_torch.transport._simplex import (
    FULL_PRICING_MAX_ARCS,
    MASK_MAX_NODES,
    MIN_BLOCK_ARCS,
    cost_width,
    transport_cost,
)
from mwsp_torch.transport.exact import resolve_n_jobs

__all__ = [
    "MASS_UNITS",
    "PAIRS_PER_RUN",
    "DenseTransport",
    "dense_exact_transport",
]

#: Integer units of mass a problem with given weights is solved in (``2^50``): flows stay
#: exact integers well inside int64 (the solver keys flows as ``units * 256``).
MASS_UNITS = 1 << 50

#: Problems a thread takes at a time from a batch (each call into compiled code takes a run).
PAIRS_PER_RUN = 64


class DenseTransport(NamedTuple):
    """Optimal values, plans and dual potentials of a batch of problems (:func:`dense_exact_transport`).

    Attributes:
        values: ``[P]`` optimal costs, for masses normalised to 1 a side.
        plan_pair: ``[A]`` the problem of each plan entry (sorted; at most ``n + m - 1`` a problem).
        plan_row: ``[A]`` its row in the cost matrix.
        plan_col: ``[A]`` its column in the cost matrix.
        plan_mass: ``[A]`` its mass (> 0; a problem's masses sum to 1).
        row_duals: ``[sum_k n_k]`` problem ``k``'s row potentials ``u`` at
            ``row_offsets[k]:row_offsets[k + 1]``, one per row of its group, mean 0.
        col_duals: ``[sum_k m_k]`` its column potentials ``v`` likewise: ``u_p + v_q = c_pq``
            on the plan, ``c_pq - u_p - v_q`` non-negative up to the solver's threshold,
            and ``sum a u + sum b v`` the value.
        row_offsets: ``[P + 1]`` offsets into ``row_duals``.
        col_offsets: ``[P + 1]`` offsets into ``col_duals``.
    """

    values: np.ndarray
    plan_pair: np.ndarray
    plan_row: np.ndarray
    plan_col: np.ndarray
    plan_mass: np.ndarray
    row_duals: np.ndarray
    col_duals: np.ndarray
    row_offsets: np.ndarray
    col_offsets: np.ndarray


@njit(cache=True, nogil=True)
def _integer_masses(weights, start, count, uniform, unit, total, out):
    """``count`` masses into ``out`` summing to ``total``: ``unit`` each if ``uniform``, else
    ``weights[start:start + count]`` normalised and rounded through their cumulative sums."""
    if uniform:
        for p in range(count):
            out[p] = unit
        return
    weight_sum = 0.0
    for p in range(count):
        weight_sum += weights[start + p]
    running = 0.0
    previous = 0
    for p in range(count):
        running += weights[start + p]
        reached = total if p == count - 1 else min(total, np.int64(np.rint(running / weight_sum * total)))
        reached = max(reached, previous)
        out[p] = reached - previous
        previous = reached


@njit(cache=True, nogil=True)
def _solve_run(
    costs, row_ptr, col_ptr, pairs, row_weights, col_weights, arc_ptr, row_offsets, col_offsets, values, arc_row,
    arc_col, arc_mass, row_duals, col_duals, first, stop,
):  # fmt: skip
    """Problems ``first .. stop - 1`` of :func:`dense_exact_transport`, in this thread."""
    uniform_rows = row_weights.shape[0] == 0
    uniform_cols = col_weights.shape[0] == 0
    for k in range(first, stop):
        r0 = row_ptr[pairs[k, 0]]
        n = row_ptr[pairs[k, 0] + 1] - r0
        c0 = col_ptr[pairs[k, 1]]
        m = col_ptr[pairs[k, 1] + 1] - c0
        if uniform_rows and uniform_cols:
            total = n * m
            row_unit, col_unit = m, n
        elif uniform_rows:
            row_unit = MASS_UNITS // n
            total = n * row_unit
            col_unit = 0
        elif uniform_cols:
            col_unit = MASS_UNITS // m
            total = m * col_unit
            row_unit = 0
        else:
            total = MASS_UNITS
            row_unit, col_unit = 0, 0
        supply_all = np.empty(n, dtype=np.int64)
        demand_all = np.empty(m, dtype=np.int64)
        _integer_masses(row_weights, r0, n, uniform_rows, row_unit, total, supply_all)
        _integer_masses(col_weights, c0, m, uniform_cols, col_unit, total, demand_all)
        # Points of zero mass leave the solve (the solver needs every mass > 0).
        rows = np.empty(n, dtype=np.int64)
        cols = np.empty(m, dtype=np.int64)
        na = 0
        for p in range(n):
            if supply_all[p] > 0:
                rows[na] = p
                na += 1
        ma = 0
        for q in range(m):
            if demand_all[q] > 0:
                cols[ma] = q
                ma += 1
        supply = np.empty(na, dtype=np.int64)
        demand = np.empty(ma, dtype=np.int64)
        for p in range(na):
            supply[p] = supply_all[rows[p]]
        for q in range(ma):
            demand[q] = demand_all[cols[q]]
        # Rows padded as the solver prices them (columns past ma are its scratch).
        cost = np.empty((na, cost_width(ma)), dtype=np.float64)
        for p in range(na):
            for q in range(ma):
                cost[p, q] = costs[r0 + rows[p], c0 + cols[q]]
        basis = np.empty((3, na + ma - 1), dtype=np.int64)
        potentials = np.empty(na + ma, dtype=np.float64)
        best = transport_cost(
            supply, demand, cost, MIN_BLOCK_ARCS, MASK_MAX_NODES, FULL_PRICING_MAX_ARCS, basis,
            potentials,
        )  # fmt: skip
        values[k] = best / total
        base = arc_ptr[k]
        for a in range(na + ma - 1):
            arc_row[base + a] = r0 + rows[basis[0, a]]
            arc_col[base + a] = c0 + cols[basis[1, a]]
            arc_mass[base + a] = basis[2, a] / total
        # Duals of every point: the solver's for those it solved, the tightest feasible
        # for the rest (columns first, from the solved rows; then rows, from all columns).
        u = row_duals[row_offsets[k] : row_offsets[k] + n]
        v = col_duals[col_offsets[k] : col_offsets[k] + m]
        u[:] = np.inf
        v[:] = np.inf
        for p in range(na):
            u[rows[p]] = potentials[p]
        for q in range(ma):
            v[cols[q]] = potentials[na + q]
        if ma < m:
            for q in range(m):
                if demand_all[q] == 0:
                    for p in range(na):
                        v[q] = min(v[q], costs[r0 + rows[p], c0 + q] - u[rows[p]])
        if na < n:
            for p in range(n):
                if supply_all[p] == 0:
                    for q in range(m):
                        u[p] = min(u[p], costs[r0 + p, c0 + q] - v[q])
        # One gauge for all: u of mean 0 (v shifted the other way keeps u + v = c).
        shift = 0.0
        for p in range(n):
            shift += u[p]
        shift /= n
        for p in range(n):
            u[p] -= shift
        for q in range(m):
            v[q] += shift


def dense_exact_transport(
    costs: np.ndarray,
    row_ptr: np.ndarray,
    col_ptr: np.ndarray,
    pairs: np.ndarray,
    row_weights: np.ndarray | None = None,
    col_weights: np.ndarray | None = None,
    n_jobs: int = -1,
) -> DenseTransport:
    """Exact optimal transport, plan and duals of each problem ``k``: row group ``pairs[k, 0]``
    of ``costs`` to column group ``pairs[k, 1]``.

    Problem ``k`` with rows ``R`` and columns ``C`` solves ``min sum_pq P_pq costs[p, q]``
    over plans ``P >= 0`` with row sums ``a`` and column sums ``b``: ``a`` uniform on ``R``
    (``row_weights`` omitted) or ``row_weights[R]`` normalised, ``b`` likewise. Compiled
    end to end, problems spread over ``n_jobs`` threads.

    Args:
        costs (np.ndarray): ``[R, C]`` finite float64 costs.
        row_ptr (np.ndarray): ``[num_row_groups + 1]`` non-decreasing offsets into the rows.
        col_ptr (np.ndarray): ``[num_col_groups + 1]`` offsets into the columns.
        pairs (np.ndarray): ``[P, 2]`` (row group, column group) of each problem.
        row_weights (np.ndarray, optional): ``[R]`` non-negative row weights, normalised
            per group (default: uniform).
        col_weights (np.ndarray, optional): ``[C]`` non-negative column weights likewise.
        n_jobs (int): threads (default ``-1``: all cores).

    Returns:
        :class:`DenseTransport`: values, plans (sparse) and duals.

    Raises:
        ValueError: on costs that are not finite, a group without points or without mass
            in a problem, negative or non-finite weights, or groups out of range.

    Example:
        >>> import numpy as np
        >>> costs = np.array([[0.0, 1.0], [1.0, 0.0]])
        >>> out = dense_exact_transport(costs, np.array([0, 2]), np.array([0, 2]), np.array([[0, 0]]))
        >>> float(out.values[0])
        0.0
    """
    costs = np.ascontiguousarray(costs, dtype=np.float64)
    row_ptr = np.ascontiguousarray(row_ptr, dtype=np.int64)
    col_ptr = np.ascontiguousarray(col_ptr, dtype=np.int64)
    pairs = np.ascontiguousarray(pairs, dtype=np.int64).reshape(-1, 2)
    if costs.ndim != 2 or not np.isfinite(costs).all():
        raise ValueError("dense_exact_transport: costs must be a finite [R, C] matrix")
    for name, ptr, size in (("row_ptr", row_ptr, costs.shape[0]), ("col_ptr", col_ptr, costs.shape[1])):
        if ptr.ndim != 1 or len(ptr) < 1 or ptr[0] != 0 or ptr[-1] != size or (np.diff(ptr) < 0).any():
            raise ValueError(f"dense_exact_transport: {name} must rise from 0 to {size}")
    if len(pairs) and (
        (pairs < 0).any() or (pairs[:, 0] >= len(row_ptr) - 1).any() or (pairs[:, 1] >= len(col_ptr) - 1).any()
    ):
        raise ValueError("dense_exact_transport: pairs name groups that do not exist")
    rows_per = np.diff(row_ptr)[pairs[:, 0]]
    cols_per = np.diff(col_ptr)[pairs[:, 1]]
    empty = np.flatnonzero((rows_per == 0) | (cols_per == 0))
    if len(empty):
        raise ValueError(f"dense_exact_transport: problem {empty[0]} has a group without points")
    row_weights = _checked_weights(row_weights, costs.shape[0], row_ptr, pairs[:, 0], "row")
    col_weights = _checked_weights(col_weights, costs.shape[1], col_ptr, pairs[:, 1], "column")
    arc_ptr = np.zeros(len(pairs) + 1, dtype=np.int64)
    np.cumsum(rows_per + cols_per - 1, out=arc_ptr[1:])
    row_offsets = np.zeros(len(pairs) + 1, dtype=np.int64)
    np.cumsum(rows_per, out=row_offsets[1:])
    col_offsets = np.zeros(len(pairs) + 1, dtype=np.int64)
    np.cumsum(cols_per, out=col_offsets[1:])
    values = np.empty(len(pairs), dtype=np.float64)
    arc_row = np.zeros(arc_ptr[-1], dtype=np.int64)
    arc_col = np.zeros(arc_ptr[-1], dtype=np.int64)
    arc_mass = np.zeros(arc_ptr[-1], dtype=np.float64)  # slots of points left out stay 0
    row_duals = np.empty(row_offsets[-1], dtype=np.float64)
    col_duals = np.empty(col_offsets[-1], dtype=np.float64)
    arrays = (costs, row_ptr, col_ptr, pairs, row_weights, col_weights, arc_ptr, row_offsets, col_offsets)
    outputs = (values, arc_row, arc_col, arc_mass, row_duals, col_duals)
    numba_ready()
    threads = min(resolve_n_jobs(n_jobs), -(-len(pairs) // PAIRS_PER_RUN))
    if threads <= 1:
        _solve_run(*arrays, *outputs, 0, len(pairs))
    else:
        starts = itertools.count(0, PAIRS_PER_RUN)  # next() holds the GIL: each run to one thread

        def work(_) -> None:
            for lo in starts:
                if lo >= len(pairs):
                    return
                _solve_run(*arrays, *outputs, lo, min(lo + PAIRS_PER_RUN, len(pairs)))

        with ThreadPoolExecutor(max_workers=threads, thread_name_prefix="mwsp-dense") as pool:
            for _ in pool.map(work, range(threads)):
                pass
    kept = arc_mass > 0
    plan_pair = np.repeat(np.arange(len(pairs), dtype=np.int64), np.diff(arc_ptr))[kept]
    return DenseTransport(
        values, plan_pair, arc_row[kept], arc_col[kept], arc_mass[kept], row_duals, col_duals, row_offsets, col_offsets
    )


def _checked_weights(weights, size: int, ptr: np.ndarray, groups: np.ndarray, side: str) -> np.ndarray:
    """``weights`` as float64 (empty for uniform), refused unless finite, non-negative and
    of positive sum on every group a problem uses."""
    if weights is None:
        return np.empty(0, dtype=np.float64)
    weights = np.ascontiguousarray(weights, dtype=np.float64)
    if weights.shape != (size,):
        raise ValueError(f"dense_exact_transport: {side} weights must have shape ({size},), got {weights.shape}")
    bad = np.flatnonzero(~np.isfinite(weights) | (weights < 0))
    if len(bad):
        raise ValueError(f"dense_exact_transport: {side} weight {bad[0]} is {weights[bad[0]]}: expected finite, >= 0")
    positive = np.concatenate([[0], np.cumsum(weights > 0)])  # counts: exact, unlike sums of weights
    massless = np.flatnonzero(positive[ptr[groups + 1]] == positive[ptr[groups]])
    if len(massless):
        raise ValueError(f"dense_exact_transport: {side} group {groups[massless[0]]} has no mass")
    return weights
