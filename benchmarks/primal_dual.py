"""A primal-dual (Hungarian) transport solver on bit masks, timed against the simplex.

Tried in the sixth session of 2026-11-23 and not adopted: it is kept here, outside the
library, so that the measurement can be repeated. With uniform masses even a problem's own
optimal duals leave the simplex about 20 pivots (fourth session of 2026-11-23), so the hard
part is the primal; a primal-dual method finds flows on tight arcs by search instead:

- start: row reduction, column reduction, a greedy fill of the tight cells;
- each search grows a tree from one row with supply left (``--sources all``: from every
  such row). A row's tight columns and a column's rows that send it flow are 64-bit masks,
  so steps that change no duals cost a few bit operations;
- each column keeps its slack (least reduced cost from a labelled row) and the row giving
  it, so a change of duals is one pass over the columns;
- the search ends at a column with demand left, and flow (exact integers) is pushed back
  along the tree.

It handles up to 63 points a side (one bit mask); the problems timed are those of
:mod:`solver_settings` (collapsed, cancelled, integer masses), one thread, best of
``--repeats``, the simplex (:func:`mwsp_torch._simplex.transport_cost`) in the same process,
both loops compiled. Costs must agree to 1e-9 relative. Usage::

    python benchmarks/primal_dual.py --problems NCI1:2:0 --pairs 5000
    python benchmarks/primal_dual.py --problems NCI1:2:0 --pairs 20000 --by-size
"""

from __future__ import annotations

import argparse
import os
import time

os.environ.setdefault("KEOPS_VERBOSE", "0")

import numpy as np  # noqa: E402
from numba import njit, typed  # noqa: E402
from solver_settings import problems  # noqa: E402

from mwsp_torch._simplex import _popcount, transport_cost  # noqa: E402

#: Slack of a labelled column, and the offset that keeps its slack there.
BIG = 1e300


@njit(cache=True, nogil=True)
def _label_columns(tight, collab, rowlab, slack, blocked, rd, colflow, predr, queue, top):
    """Label the columns of mask ``tight``: the first with demand left ends the search
    (returned), the others label their unlabelled rows that send them flow. Not inlined:
    inlined into both callers, the solve took 19.0-19.3 us instead of 15.1-15.6 (NCI1)."""
    while tight:
        low = tight & -tight
        tight ^= low
        q = _popcount(low - 1)  # the index of low's one set bit
        collab |= low
        slack[q] = BIG
        blocked[q] = BIG
        if rd[q] > 0:
            return q, collab, rowlab, top
        rows = colflow[q] & ~rowlab
        rowlab |= rows
        while rows:
            lr = rows & -rows
            rows ^= lr
            p = _popcount(lr - 1)
            predr[p] = q
            queue[top] = p
            top += 1
    return -1, collab, rowlab, top


@njit(cache=True, nogil=True)
def primal_dual_cost(supply, demand, cost, all_sources):
    """Optimal ``sum flow * cost`` for integer masses of equal totals, ``m, n <= 63``."""
    m, n = cost.shape
    u = np.empty(m)
    v = np.empty(n)
    rs = supply.copy()
    rd = demand.copy()
    x = np.zeros((m, n), dtype=np.int64)
    colflow = np.zeros(n, dtype=np.int64)  # rows sending flow to each column, as a mask
    slack = np.empty(n)
    blocked = np.empty(n)
    sarg = np.empty(n, dtype=np.int64)
    predr = np.empty(m, dtype=np.int64)
    queue = np.empty(m, dtype=np.int64)
    cmax = 0.0
    for p in range(m):
        lo = cost[p, 0]
        for q in range(n):
            lo = min(lo, cost[p, q])
            cmax = max(cmax, cost[p, q])
        u[p] = lo
    for q in range(n):
        lo = cost[0, q] - u[0]
        for p in range(1, m):
            lo = min(lo, cost[p, q] - u[p])
        v[q] = lo
    tol = 1e-13 * cmax
    left = 0
    for p in range(m):
        for q in range(n):
            if rs[p] > 0 and rd[q] > 0 and cost[p, q] - u[p] - v[q] <= tol:
                f = min(rs[p], rd[q])
                x[p, q] += f
                rs[p] -= f
                rd[q] -= f
                colflow[q] |= 1 << p
        left += rs[p]
    while left > 0:
        rowlab = 0
        collab = 0
        top = 0
        for p in range(m):
            if rs[p] > 0:
                rowlab |= 1 << p
                predr[p] = -1
                queue[top] = p
                top += 1
                if not all_sources:
                    break
        for q in range(n):
            slack[q] = BIG
            blocked[q] = 0.0
        found = -1
        while found < 0:
            while top > 0 and found < 0:
                top -= 1
                p = queue[top]
                up = u[p]
                tight = 0
                for q in range(n):
                    r = cost[p, q] - up - v[q] + blocked[q]
                    s = slack[q]
                    sarg[q] = p if r < s else sarg[q]
                    slack[q] = min(r, s)
                    tight |= np.int64(r <= tol) << q
                found, collab, rowlab, top = _label_columns(
                    tight, collab, rowlab, slack, blocked, rd, colflow, predr, queue, top
                )
            if found >= 0:
                break
            delta = slack[0]
            for q in range(1, n):
                delta = min(delta, slack[q])
            for p in range(m):
                if (rowlab >> p) & 1:
                    u[p] += delta
            tight = 0
            for q in range(n):
                if (collab >> q) & 1:
                    v[q] -= delta
                else:
                    slack[q] -= delta
                    tight |= np.int64(slack[q] <= tol) << q
            found, collab, rowlab, top = _label_columns(
                tight, collab, rowlab, slack, blocked, rd, colflow, predr, queue, top
            )
        f = rd[found]
        q = found
        while True:  # the amount: demand left, the source's supply, flows on backward arcs
            p = sarg[q]
            if predr[p] < 0:
                f = min(f, rs[p])
                source = p
                break
            q = predr[p]
            f = min(f, x[p, q])
        q = found
        while True:
            p = sarg[q]
            x[p, q] += f
            colflow[q] |= 1 << p
            if predr[p] < 0:
                break
            q = predr[p]
            x[p, q] -= f
            if x[p, q] == 0:
                colflow[q] &= ~(1 << p)
        rs[source] -= f
        rd[found] -= f
        left -= f
    total = 0.0
    for p in range(m):
        for q in range(n):
            total += x[p, q] * cost[p, q]
    return total


@njit(cache=True)
def _primal_dual_all(supplies, demands, costs, all_sources, out):
    for i in range(len(costs)):
        out[i] = primal_dual_cost(supplies[i], demands[i], costs[i], all_sources)


@njit(cache=True)
def _simplex_all(supplies, demands, costs, out):
    for i in range(len(costs)):
        out[i] = transport_cost(supplies[i], demands[i], costs[i])


def _time(supplies, demands, costs, all_sources: bool, repeats: int) -> tuple[float, float]:
    """Best us a solve of the primal-dual method and of the simplex, costs checked."""
    a = np.empty(len(costs))
    b = np.empty(len(costs))
    _primal_dual_all(supplies, demands, costs, all_sources, a)
    _simplex_all(supplies, demands, costs, b)
    rel = np.max(np.abs(a - b) / np.abs(b))
    if rel > 1e-9:
        raise SystemExit(f"the two solvers disagree: max relative difference {rel:.2e}")
    best_pd = best_simplex = np.inf
    for _ in range(repeats):
        start = time.perf_counter()
        _primal_dual_all(supplies, demands, costs, all_sources, a)
        mid = time.perf_counter()
        _simplex_all(supplies, demands, costs, b)
        best_pd = min(best_pd, mid - start)
        best_simplex = min(best_simplex, time.perf_counter() - mid)
    return best_pd / len(costs) * 1e6, best_simplex / len(costs) * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--problems", nargs="+", default=["NCI1:2:0"], help="DATASET:d:k")
    parser.add_argument("--pairs", type=int, default=5000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--sources", choices=("one", "all"), default="one", help="rows a search starts from")
    parser.add_argument("--by-size", action="store_true", help="one line per range of m + n")
    args = parser.parse_args()
    all_sources = args.sources == "all"
    print("| problems | m + n | count | primal-dual us | simplex us | primal-dual / simplex |")
    print("|---|---|---|---|---|---|")
    for spec in args.problems:
        name, d, k = spec.split(":")
        supplies, demands, costs = problems(name, int(d), int(k), args.pairs, args.seed, 1)
        keep = [i for i, c in enumerate(costs) if max(c.shape) <= 63]
        sizes = np.array([costs[i].shape[0] + costs[i].shape[1] for i in keep])
        edges = [4, 16, 24, 32, 40, 48, 64, 127] if args.by_size else [0, 127]
        for lo, hi in zip(edges[:-1], edges[1:], strict=True):
            chosen = [keep[t] for t in np.flatnonzero((sizes >= lo) & (sizes < hi))]
            if not chosen:
                continue
            pd_us, simplex_us = _time(
                typed.List([supplies[i] for i in chosen]),
                typed.List([demands[i] for i in chosen]),
                typed.List([costs[i] for i in chosen]),
                all_sources,
                args.repeats,
            )
            span = f"{lo}-{hi - 1}" if args.by_size else "all"
            print(
                f"| {name} d={d},k={k} | {span} | {len(chosen):,} | {pd_us:.2f} | {simplex_us:.2f} | "
                f"{pd_us / simplex_us:.2f}x |",
                flush=True,
            )


if __name__ == "__main__":
    main()
