"""A north-west corner start in a projected order, timed against the row-minimum start.

Tried in the seventh session of 2026-11-23 and not adopted; kept here so that the
measurement can be repeated. The row-minimum start costs about 16 % of an NCI1 solve
(``solver_phases.py``). A north-west corner start costs almost nothing (one pass over the
``m + n - 1`` cells it fills), and if the points of both graphs are sorted along one
line it is the optimal plan of the problem projected on that line. Here the line is the
first principal direction of the dataset's distinct rows (centred, unweighted, by power
iteration on the sparse rows). Row IDs are renumbered in that order, so every problem's
points come sorted, and the same pairs are posed as in :mod:`solver_settings`.

Settings, each timed on the same pairs in one process, one thread, best of ``--repeats``,
interleaved; the optimal costs must agree to 1e-9 relative:

- ``row-minimum, row IDs``: the library's solver as it is;
- ``NW, row IDs``: the north-west corner in the order of row IDs (no projection);
- ``NW, projected``: the north-west corner in the projected order.

The copy of the solver is compiled from ``mwsp_torch/_simplex.py`` with the start added
(anchors checked, as in ``solver_phases.py``); it also counts pivots. Usage::

    python benchmarks/projected_start.py --problems NCI1:2:0 --pairs 20000
    python benchmarks/projected_start.py --problems ENZYMES:3:1 PROTEINS:2:0 --pairs 5000
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

os.environ.setdefault("KEOPS_VERBOSE", "0")

import numpy as np  # noqa: E402
import scipy.sparse as sp  # noqa: E402
from numba import njit  # noqa: E402
from solver_settings import pair_problems, solver_module, support_and_pairs  # noqa: E402

from mwsp_torch._simplex import transport_cost  # noqa: E402
from mwsp_torch.transport import SupportSet  # noqa: E402

#: ``vogel_min_arcs`` value that selects the north-west corner start in the copy.
NORTH_WEST = -1

_NW_START = '''

@njit(nogil=True)
def _north_west_start(m, n, rs_u, rs_e, rd_u, rd_e, b_p, b_q, f_u, f_e):
    """Cells (0, 0), then right when the row is spent, else down: m + n - 1 cells
    (Orden's perturbation: no row and column are spent together before the last cell)."""
    p = 0
    q = 0
    for count in range(m + n - 1):
        _allocate(p, q, count, rs_u, rs_e, rd_u, rd_e, b_p, b_q, f_u, f_e)
        if rs_u[p] == 0 and rs_e[p] == 0:
            p += 1
        else:
            q += 1
'''

_EDITS = (
    (
        "    if m * n >= vogel_min_arcs:\n        _vogel_start(",
        f"    if vogel_min_arcs == {NORTH_WEST}:\n"
        "        _north_west_start(m, n, rs_u, rs_e, rd_u, rd_e, b_p, b_q, f_u, f_e)\n"
        "    elif m * n >= vogel_min_arcs:\n        _vogel_start(",
    ),
    (
        "        total += f_u[a] * cost[b_p[a], b_q[a]]\n    return total\n",
        "        total += f_u[a] * cost[b_p[a], b_q[a]]\n"
        "    return total, MAX_PIVOTS_PER_NODE_SQUARED * num_nodes * num_nodes - pivots_left\n",
    ),
)


def counting_solver(directory: str):
    """``transport_cost`` of a copy of the solver that returns ``(cost, pivots)`` and takes
    ``vogel_min_arcs=NORTH_WEST`` for the north-west corner start."""
    source = (Path(__file__).resolve().parents[1] / "mwsp_torch" / "_simplex.py").read_text()
    source = source.replace("cache=True, ", "")
    for anchor, replacement in _EDITS:
        if source.count(anchor) != 1:
            raise SystemExit(f"projected_start.py: the solver has no single {anchor.strip()!r}; update _EDITS")
        source = source.replace(anchor, replacement, 1)
    return solver_module(source + _NW_START, directory, "_simplex_north_west")


def principal_order(rows: sp.csr_matrix, iterations: int = 50, seed: int = 0) -> np.ndarray:
    """Row indices sorted by their projection on the first principal direction of ``rows``
    (centred, unweighted), by power iteration on the sparse matrix."""
    rows = sp.csr_matrix(rows, dtype=np.float64)
    mean = np.asarray(rows.mean(axis=0)).ravel()
    direction = np.random.default_rng(seed).standard_normal(rows.shape[1])
    for _ in range(iterations):
        scores = rows @ direction - mean @ direction
        direction = rows.T @ scores - mean * scores.sum()
        direction /= np.linalg.norm(direction)
    return np.argsort(rows @ direction - mean @ direction, kind="stable")


def renumbered(support: SupportSet, order: np.ndarray) -> SupportSet:
    """``support`` with row ``order[i]`` renamed ``i`` (each graph's points sorted again)."""
    rank = np.empty(len(order), dtype=np.int64)
    rank[order] = np.arange(len(order))
    new_support = rank[support.support]
    new_counts = support.counts.copy()
    for g in range(support.num_graphs):
        lo, hi = support.graph_ptr[g], support.graph_ptr[g + 1]
        by_id = np.argsort(new_support[lo:hi])
        new_support[lo:hi] = new_support[lo:hi][by_id]
        new_counts[lo:hi] = new_counts[lo:hi][by_id]
    return SupportSet(support.rows[order], support.graph_ptr, new_support, new_counts, support.sizes)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--problems", nargs="+", default=["NCI1:2:0"], help="DATASET:d:k")
    parser.add_argument("--pairs", type=int, default=5000)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as directory:
        module = counting_solver(directory)
        counted = module.transport_cost

        @njit
        def library_all(supplies, demands, costs):
            total = 0.0
            for i in range(len(costs)):
                total += transport_cost(supplies[i], demands[i], costs[i])
            return total, 0

        @njit
        def copy_all(supplies, demands, costs, start):
            total = 0.0
            pivots = 0
            for i in range(len(costs)):
                cost, count = counted(supplies[i], demands[i], costs[i], start)
                total += cost
                pivots += count
            return total, pivots

        print("| problems | mean size | row-minimum, row IDs: us (pivots) | NW, row IDs | NW, projected | ratio |")
        print("|---|---|---|---|---|---|")
        for spec in args.problems:
            name, d, k = spec.split(":")
            support, candidates = support_and_pairs(name, int(d), int(k), args.pairs, args.seed)
            plain = pair_problems(support, candidates, limit=args.pairs)
            projected = pair_problems(renumbered(support, principal_order(support.rows)), candidates, limit=args.pairs)
            runs = {
                "row-minimum": (library_all, plain),
                "NW, row IDs": (copy_all, (*plain, NORTH_WEST)),
                "NW, projected": (copy_all, (*projected, NORTH_WEST)),
            }
            totals = {key: run(*inputs) for key, (run, inputs) in runs.items()}  # compile, warm caches
            # The copy with its own row-minimum start counts the library solver's pivots (not timed).
            totals["copy, row-minimum"] = copy_all(*plain, module.VOGEL_MIN_ARCS)
            best = dict.fromkeys(runs, np.inf)
            for _ in range(args.repeats):
                for key, (run, inputs) in runs.items():
                    start = time.perf_counter()
                    run(*inputs)
                    best[key] = min(best[key], time.perf_counter() - start)
            reference = totals["row-minimum"][0]
            for key, (total, _) in totals.items():
                if abs(total - reference) > 1e-9 * abs(reference):
                    raise SystemExit(f"{spec}: {key} disagrees ({total!r} vs {reference!r})")
            num = len(plain[2])
            us = {key: best[key] / num * 1e6 for key in runs}
            pivots = {key: totals[key][1] / num for key in totals}
            size = np.mean([c.shape for c in plain[2]], axis=0)
            print(
                f"| {name} d={d},k={k} ({num:,}) | {size[0]:.0f} x {size[1]:.0f} "
                f"| {us['row-minimum']:.2f} ({pivots['copy, row-minimum']:.1f}) "
                f"| {us['NW, row IDs']:.2f} ({pivots['NW, row IDs']:.1f}) "
                f"| {us['NW, projected']:.2f} ({pivots['NW, projected']:.1f}) "
                f"| {us['row-minimum'] / us['NW, projected']:.2f}x |",
                flush=True,
            )


if __name__ == "__main__":
    main()
