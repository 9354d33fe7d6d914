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
the thread only, 63 for ancestor masks up to 63 points) is a setting; the ratio is
the first setting's time over the last's. ``--pot`` adds a column for POT's network
simplex (``ot.lp.emd_wrap.emd_c``, the C++ solver behind ``ot.emd2``, called from Python
once per problem) on the same problems, best of the same repeats, its costs checked too.

    python benchmarks/solver_settings.py --problems DD:2:0 --pairs 100 --pot

``--baseline REV`` adds a column for the solver as it was at git revision ``REV``
(``mwsp_torch/_simplex.py`` read by ``git show``, compiled in a temporary directory) with
the first setting, on the same problems, best of the same repeats, its costs checked:

    python benchmarks/solver_settings.py --problems DD:2:1 --pairs 150 --baseline cc9dc13
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("KEOPS_VERBOSE", "0")

import numpy as np  # noqa: E402
from numba import njit, typed  # noqa: E402

from mwsp_torch import MWSP  # noqa: E402
from mwsp_torch._simplex import MASK_MAX_NODES, MIN_BLOCK_ARCS, VOGEL_MIN_ARCS, transport_cost  # noqa: E402
from mwsp_torch.datasets import default_labels, load_dataset  # noqa: E402
from mwsp_torch.transport import _bank_arrays, _cancel_pairs, _shared_bank, cost_matrix  # noqa: E402


def problems(name: str, d: int, k: int, pairs: int, seed: int, stride: int):
    """``(supplies, demands, costs)`` of ``pairs`` random pairs with two or more points a side."""
    support, candidates = support_and_pairs(name, d, k, pairs, seed, stride)
    return pair_problems(support, candidates, limit=pairs)


def support_and_pairs(name: str, d: int, k: int, pairs: int, seed: int, stride: int = 1):
    """The collapsed graphs (``SupportSet``) of every ``stride``-th graph of ``name``, and
    ``4 * pairs`` random pairs of two different graphs (candidates: :func:`pair_problems`
    keeps the first ``pairs`` that need a solve)."""
    graphs, _ = load_dataset(name)
    graphs = graphs[::stride]
    support, _ = MWSP(d=d, k=k, labels=default_labels(name))._features(graphs, fitted=False)
    rng = np.random.default_rng(seed)
    candidates = rng.integers(support.num_graphs, size=(4 * pairs, 2))
    return support, candidates[candidates[:, 0] != candidates[:, 1]]


def posed_problems(support, pairs: np.ndarray, limit: int | None = None):
    """``(pos_ids, supply, neg_ids, demand)`` of each problem the engine poses for ``pairs``
    of graphs of ``support`` (row IDs and integer masses after cancelling; the first
    ``limit`` of them), leaving out pairs with fewer than two points on a side (forced
    plans: no solve)."""
    pos_ptr, pos_ids, pos_mass, pos_len, neg_ptr, neg_ids, neg_mass, neg_len, _ = _cancel_pairs(
        pairs, *support.arrays(), *support.arrays()
    )
    for t in np.flatnonzero((pos_len >= 2) & (neg_len >= 2))[:limit]:
        pos = slice(pos_ptr[t], pos_ptr[t] + pos_len[t])
        neg = slice(neg_ptr[t], neg_ptr[t] + neg_len[t])
        yield pos_ids[pos], pos_mass[pos], neg_ids[neg], neg_mass[neg]


def pair_problems(support, pairs: np.ndarray, limit: int | None = None):
    """``(supplies, demands, costs)`` of :func:`posed_problems`, as numba typed lists."""
    indptr, indices, data = _bank_arrays(_shared_bank(support, support))
    supplies, demands, costs = typed.List(), typed.List(), typed.List()
    for pos, supply, neg, demand in posed_problems(support, pairs, limit):
        supplies.append(supply.copy())
        demands.append(demand.copy())
        costs.append(cost_matrix(indptr, indices, data, pos, neg))
    return supplies, demands, costs


def _solver_loop(solve):
    """A compiled loop summing ``solve``'s optimal costs over a list of problems."""

    @njit
    def solve_all(supplies, demands, costs, vogel_min_arcs, min_block_arcs, mask_max_nodes):
        total = 0.0
        for i in range(len(costs)):
            total += solve(supplies[i], demands[i], costs[i], vogel_min_arcs, min_block_arcs, mask_max_nodes)
        return total

    return solve_all


_solve_all = _solver_loop(transport_cost)


def _baseline_solver(revision: str, directory: str):
    """:func:`_solver_loop` over the solver of git revision ``revision``, compiled from a copy in ``directory``."""
    source = subprocess.run(
        ["git", "show", f"{revision}:mwsp_torch/_simplex.py"],
        cwd=Path(__file__).resolve().parent,
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    return _solver_loop(solver_module(source, directory, f"_simplex_{revision}").transport_cost)


def solver_module(source: str, directory: str, name: str):
    """A solver's ``source`` imported as module ``name``, from a file written in ``directory``
    (numba compiles from files)."""
    path = Path(directory) / f"{name}.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


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
    parser.add_argument("--baseline", metavar="REV", help="also time the solver of git revision REV")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as directory:
        baseline = _baseline_solver(args.baseline, directory) if args.baseline else None
        _compare(args, baseline)


def _compare(args, baseline) -> None:
    settings = [(b, mask) for b in args.min_block_arcs for mask in args.mask_max_nodes]
    columns = " | ".join(f"blocks >= {b} arcs, masks <= {mask} points, us" for b, mask in settings)
    pot_column = " POT emd_c, us |" if args.pot else ""
    baseline_column = f" {args.baseline}, us | {args.baseline} / first |" if baseline else ""
    print(f"| problems | mean size | {columns} | ratio |{pot_column}{baseline_column}")
    print("|---|---|" + "---|" * (len(settings) + 1 + args.pot + 2 * (baseline is not None)))
    for spec in args.problems:
        name, d, k = spec.split(":")
        supplies, demands, costs = problems(name, int(d), int(k), args.pairs, args.seed, args.stride)
        best = {setting: np.inf for setting in settings}
        totals = {}
        for setting in settings:
            _solve_all(supplies, demands, costs, VOGEL_MIN_ARCS, *setting)  # compile, warm caches
        if baseline is not None:
            baseline(supplies, demands, costs, VOGEL_MIN_ARCS, *settings[0])
        for _ in range(args.repeats):
            for setting in settings:
                start = time.perf_counter()
                totals[setting] = _solve_all(supplies, demands, costs, VOGEL_MIN_ARCS, *setting)
                best[setting] = min(best[setting], time.perf_counter() - start)
            if args.pot:
                start = time.perf_counter()
                totals["pot"] = _solve_all_pot(supplies, demands, costs)
                best["pot"] = min(best.get("pot", np.inf), time.perf_counter() - start)
            if baseline is not None:
                start = time.perf_counter()
                totals["baseline"] = baseline(supplies, demands, costs, VOGEL_MIN_ARCS, *settings[0])
                best["baseline"] = min(best.get("baseline", np.inf), time.perf_counter() - start)
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
            + (f" {best['pot'] / len(costs) * 1e6:.1f} |" if args.pot else "")
            + (
                f" {best['baseline'] / len(costs) * 1e6:.1f} | {best['baseline'] / best[settings[0]]:.2f}x |"
                if baseline is not None
                else ""
            ),
            flush=True,
        )


if __name__ == "__main__":
    main()
