"""The compiled exact solver under different settings, on the problems a dataset really poses.

Problems are taken from random pairs of graphs exactly as the engine poses them
(collapsed rows, shared mass cancelled, integer masses), then every setting solves
the same list in one process, single-threaded, best of ``--repeats`` runs, settings
interleaved so that machine noise hits them alike. The optimal costs must agree.

Usage::

    python benchmarks/solver_settings.py --problems NCI1:2:0 ENZYMES:3:1 PROTEINS:2:0 \\
        --pairs 3000 --min-block-arcs 16 96
    python benchmarks/solver_settings.py --problems NCI1:2:0 --pairs 20000 --mask-max-nodes 0 63

Every combination of ``--min-block-arcs`` and ``--mask-max-nodes`` (the basis tree: 0 for
the preorder array only, 63 for ancestor masks up to 63 points) is a setting; the ratio is
the first setting's time over the last's. ``--pot`` adds a column for POT's network
simplex (``ot.lp.emd_wrap.emd_c``, the C++ solver behind ``ot.emd2``, called from Python
once per problem) on the same problems, best of the same repeats, its costs checked too.

    python benchmarks/solver_settings.py --problems DD:2:0 --pairs 100 --pot
"""

from __future__ import annotations

import argparse
import os
import time

os.environ.setdefault("KEOPS_VERBOSE", "0")

import numpy as np  # noqa: E402
from numba import njit, typed  # noqa: E402

from mwsp_torch import MWSP  # noqa: E402
from mwsp_torch._simplex import MASK_MAX_NODES, MIN_BLOCK_ARCS, VOGEL_MIN_ARCS, transport_cost  # noqa: E402
from mwsp_torch.datasets import default_labels, load_dataset  # noqa: E402
from mwsp_torch.transport import _bank_arrays, _cancel_pairs, _shared_bank, cost_matrix  # noqa: E402


def problems(name: str, d: int, k: int, pairs: int, seed: int, stride: int):
    """``(supplies, demands, costs)`` of ``pairs`` random pairs with two or more points a side."""
    graphs, _ = load_dataset(name)
    graphs = graphs[::stride]
    support, _ = MWSP(d=d, k=k, labels=default_labels(name))._features(graphs, fitted=False)
    indptr, indices, data = _bank_arrays(_shared_bank(support, support))
    rng = np.random.default_rng(seed)
    candidates = rng.integers(support.num_graphs, size=(4 * pairs, 2))
    candidates = candidates[candidates[:, 0] != candidates[:, 1]]
    pos_ptr, pos_ids, pos_mass, pos_len, neg_ptr, neg_ids, neg_mass, neg_len, _ = _cancel_pairs(
        candidates, *support.arrays(), *support.arrays()
    )
    supplies, demands, costs = typed.List(), typed.List(), typed.List()
    # Pairs with one point on a side have forced plans and never reach the simplex.
    for t in np.flatnonzero((pos_len >= 2) & (neg_len >= 2))[:pairs]:
        pos = pos_ids[pos_ptr[t] : pos_ptr[t] + pos_len[t]]
        neg = neg_ids[neg_ptr[t] : neg_ptr[t] + neg_len[t]]
        supplies.append(pos_mass[pos_ptr[t] : pos_ptr[t] + pos_len[t]].copy())
        demands.append(neg_mass[neg_ptr[t] : neg_ptr[t] + neg_len[t]].copy())
        costs.append(cost_matrix(indptr, indices, data, pos, neg))
    return supplies, demands, costs


@njit
def _solve_all(supplies, demands, costs, vogel_min_arcs, min_block_arcs, mask_max_nodes):
    total = 0.0
    for i in range(len(costs)):
        total += transport_cost(supplies[i], demands[i], costs[i], vogel_min_arcs, min_block_arcs, mask_max_nodes)
    return total


def _solve_all_pot(supplies, demands, costs):
    from ot.lp.emd_wrap import emd_c

    total = 0.0
    for supply, demand, cost in zip(supplies, demands, costs, strict=True):
        total += emd_c(supply.astype(np.float64), demand.astype(np.float64), cost, 10**9, 1)[1]
    return total


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--problems", nargs="+", default=["NCI1:2:0"], help="DATASET:d:k")
    parser.add_argument("--pairs", type=int, default=3000)
    parser.add_argument("--stride", type=int, default=1, help="use every STRIDE-th graph (REDDIT: features are slow)")
    parser.add_argument("--min-block-arcs", type=int, nargs="+", default=[MIN_BLOCK_ARCS])
    parser.add_argument("--mask-max-nodes", type=int, nargs="+", default=[MASK_MAX_NODES])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--pot", action="store_true", help="also time POT's emd_c on the same problems")
    args = parser.parse_args()
    settings = [(b, mask) for b in args.min_block_arcs for mask in args.mask_max_nodes]
    columns = " | ".join(f"blocks >= {b} arcs, masks <= {mask} points, us" for b, mask in settings)
    pot_column = " POT emd_c, us |" if args.pot else ""
    print(f"| problems | mean size | {columns} | ratio |{pot_column}")
    print("|---|---|" + "---|" * (len(settings) + 1 + args.pot))
    for spec in args.problems:
        name, d, k = spec.split(":")
        supplies, demands, costs = problems(name, int(d), int(k), args.pairs, args.seed, args.stride)
        best = {setting: np.inf for setting in settings}
        totals = {}
        for setting in settings:
            _solve_all(supplies, demands, costs, VOGEL_MIN_ARCS, *setting)  # compile, warm caches
        for _ in range(args.repeats):
            for setting in settings:
                start = time.perf_counter()
                totals[setting] = _solve_all(supplies, demands, costs, VOGEL_MIN_ARCS, *setting)
                best[setting] = min(best[setting], time.perf_counter() - start)
            if args.pot:
                start = time.perf_counter()
                totals["pot"] = _solve_all_pot(supplies, demands, costs)
                best["pot"] = min(best.get("pot", np.inf), time.perf_counter() - start)
        reference = totals[settings[0]]
        for total in totals.values():
            if abs(total - reference) > 1e-9 * abs(reference):
                raise SystemExit(f"{spec}: settings disagree ({total!r} vs {reference!r})")
        size = np.mean([c.shape for c in costs], axis=0)
        us = [best[setting] / len(costs) * 1e6 for setting in settings]
        print(
            f"| {name} d={d},k={k} ({len(costs):,}) | {size[0]:.0f} x {size[1]:.0f} | "
            + " | ".join(f"{u:.1f}" for u in us)
            + f" | {us[0] / us[-1]:.2f}x |"
            + (f" {best['pot'] / len(costs) * 1e6:.1f} |" if args.pot else ""),
            flush=True,
        )


if __name__ == "__main__":
    main()
