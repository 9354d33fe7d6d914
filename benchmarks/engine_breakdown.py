"""Where a pair's time goes in the exact engine: the solve, and everything around it.

Times, on one thread and the same pairs (every ``--stride``-th pair of the upper triangle,
at most ``--pairs``), best of ``--repeats``:

- the engine (:func:`mwsp_torch.transport.exact_distances`): per pair, cancelling shared
  mass, gathering ground costs, solving, plus the tile loop; and once per call, the row
  bank and (where it fits) the table of all row-to-row costs, timed as the engine on one pair;
- the solver alone (:func:`mwsp_torch._simplex.transport_cost`) on the problems those
  pairs pose, extracted beforehand as ``solver_settings.py`` does (pairs with one point
  on a side pose none: their plan is forced). It runs as numba's JIT compiles it, with the
  negative-index wraparound that the engine's ahead-of-time build leaves out (``_aot``'s
  docstring), so it is a little slower than the solves inside the engine and the share
  outside the solver comes out low (``solver_instructions.py`` compares the two lowerings).

The engine runs with ``n_jobs=1``. From 54e038f (the engine's default became every core)
to the sixth session of 2026-11-25 the script took that default while it printed "one
thread"; its figures in ``HISTORY.md`` (2d4a4c3) predate that and were on one thread.

The engine less its setup and the solver is what a pair costs outside the solver. Usage::

    python benchmarks/engine_breakdown.py --dataset NCI1 --d 2 --k 0 --stride 40 --pairs 200000
"""

from __future__ import annotations

import argparse
import os
import time

os.environ.setdefault("KEOPS_VERBOSE", "0")

import numpy as np  # noqa: E402
from solver_settings import _solve_all, pair_problems  # noqa: E402

from mwsp_torch import MWSP  # noqa: E402
from mwsp_torch._simplex import MASK_MAX_NODES, MIN_BLOCK_ARCS, VOGEL_MIN_ARCS  # noqa: E402
from mwsp_torch.datasets import default_labels, load_dataset  # noqa: E402
from mwsp_torch.transport import exact_distances, upper_pairs  # noqa: E402


def _best(function, repeats: int) -> tuple[float, object]:
    """Fewest seconds of ``repeats`` calls of ``function``, and its last result."""
    best = np.inf
    for _ in range(repeats):
        start = time.perf_counter()
        result = function()
        best = min(best, time.perf_counter() - start)
    return best, result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", default="NCI1")
    parser.add_argument("--d", type=int, default=2)
    parser.add_argument("--k", type=int, default=0)
    parser.add_argument("--stride", type=int, default=40)
    parser.add_argument("--pairs", type=int, default=200_000)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    graphs, _ = load_dataset(args.dataset)
    support, _ = MWSP(d=args.d, k=args.k, labels=default_labels(args.dataset))._features(graphs, fitted=False)
    pairs = upper_pairs(support.num_graphs)[:: args.stride][: args.pairs]
    supplies, demands, costs = pair_problems(support, pairs)
    settings = (VOGEL_MIN_ARCS, MIN_BLOCK_ARCS, MASK_MAX_NODES)
    exact_distances(support, support, pairs[:100])  # compile (each call builds its own cost table: the setup)
    _solve_all(supplies[:10], demands[:10], costs[:10], *settings)
    engine, distances = _best(lambda: exact_distances(support, support, pairs, n_jobs=1), args.repeats)
    setup, _ = _best(lambda: exact_distances(support, support, pairs[:1], n_jobs=1), args.repeats)
    solver, total = _best(lambda: _solve_all(supplies, demands, costs, *settings), args.repeats)
    if not np.isfinite(distances).all() or not np.isfinite(total):
        raise SystemExit("engine or solver returned a non-finite result")
    us = 1e6 / len(pairs)
    print(f"| {args.dataset} d={args.d},k={args.k} | {len(pairs):,} pairs | {len(costs):,} solves |")
    print(f"engine, one thread: {engine:.3f} s, {engine * us:.2f} us a pair")
    print(f"setup once per call (engine on one pair): {setup:.3f} s, {setup * us:.2f} us a pair here")
    share = f"{solver / (engine - setup):.0%} of the engine less its setup"
    print(f"solver alone on the same pairs' problems: {solver * us:.2f} us a pair ({share})")
    print(f"outside the solver (cancelling, costs, loop): {(engine - setup - solver) * us:.2f} us a pair")


if __name__ == "__main__":
    main()
