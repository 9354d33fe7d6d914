"""How many of a dataset's problems a closed form or a one-pass plan would solve.

Two shortcuts that skip the simplex, counted on the problems the engine poses
(collapsed rows, shared mass cancelled, integer masses; pairs with fewer than two points
on a side need no solve and are left out, as in ``solver_settings.py``):

- **Monge order.** A cost ``sqrt(|a|^2 + |b|^2)`` (two rows that share no column) is a
  concave function of ``|a|^2 + |b|^2``, so with rows and columns sorted by squared norm
  such a matrix is Monge, and then the north-west corner plan is optimal in one pass
  (``m + n - 1`` cells). The script counts the problems whose cost matrix is Monge in that
  order, and those whose north-west corner plan is optimal (compared with the simplex).
- **Small sides.** A side of one or two points has a closed-form or sort-based plan.
  The script counts the problems with a side of at most two and three points.

Usage::

    python benchmarks/monge_share.py --problems NCI1:2:0 ENZYMES:3:1 PROTEINS:2:0 --pairs 5000
"""

from __future__ import annotations

import argparse
import os

os.environ.setdefault("KEOPS_VERBOSE", "0")

import numpy as np  # noqa: E402
from solver_settings import posed_problems, support_and_pairs  # noqa: E402

from mwsp_torch._simplex import transport_cost  # noqa: E402
from mwsp_torch.transport import _bank_arrays, _row_squares, _shared_bank, cost_matrix  # noqa: E402


def north_west_cost(supply: np.ndarray, demand: np.ndarray, cost: np.ndarray) -> float:
    """Cost of the north-west corner plan in the given row and column order."""
    supply, demand = supply.copy(), demand.copy()
    p = q = 0
    total = 0.0
    while p < len(supply) and q < len(demand):
        flow = min(supply[p], demand[q])
        total += flow * cost[p, q]
        supply[p] -= flow
        demand[q] -= flow
        if supply[p] == 0:
            p += 1
        else:
            q += 1
    return total


def is_monge(cost: np.ndarray) -> bool:
    """``c[p, q] + c[p+1, q+1] <= c[p, q+1] + c[p+1, q]`` for all adjacent cells (to 1e-12)."""
    return bool(np.all(cost[:-1, :-1] + cost[1:, 1:] <= cost[:-1, 1:] + cost[1:, :-1] + 1e-12))


def count(name: str, d: int, k: int, pairs: int, seed: int) -> dict:
    support, candidates = support_and_pairs(name, d, k, pairs, seed)
    indptr, indices, data = _bank_arrays(_shared_bank(support, support))
    squares = _row_squares(indptr, data)
    monge = north_west_optimal = 0
    small_sides = []
    for pos, supply, neg, demand in posed_problems(support, candidates, limit=pairs):
        row_order = np.argsort(squares[pos], kind="stable")
        col_order = np.argsort(squares[neg], kind="stable")
        cost = cost_matrix(indptr, indices, data, pos[row_order], neg[col_order])
        supply, demand = supply[row_order], demand[col_order]
        optimum = transport_cost(supply, demand, cost)
        monge += is_monge(cost)
        north_west_optimal += abs(north_west_cost(supply, demand, cost) - optimum) <= 1e-12 * max(optimum, 1.0)
        small_sides.append(min(len(supply), len(demand)))
    small_sides = np.asarray(small_sides)
    return {
        "problems": f"{name}:{d}:{k}",
        "count": len(small_sides),
        "monge": monge,
        "north_west_optimal": north_west_optimal,
        "side_at_most_2": int(np.sum(small_sides <= 2)),
        "side_at_most_3": int(np.sum(small_sides <= 3)),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--problems", nargs="+", default=["NCI1:2:0"], help="NAME:d:k")
    parser.add_argument("--pairs", type=int, default=5000)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    print("| problems | count | Monge (squared-norm order) | north-west optimal | a side <= 2 | a side <= 3 |")
    print("|---|---|---|---|---|---|")
    for spec in args.problems:
        name, d, k = spec.split(":")
        r = count(name, int(d), int(k), args.pairs, args.seed)
        print(
            f"| {r['problems']} | {r['count']:,} | {r['monge']} | {r['north_west_optimal']} | "
            f"{r['side_at_most_2']} | {r['side_at_most_3']} |"
        )


if __name__ == "__main__":
    main()
