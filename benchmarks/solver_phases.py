"""Where the compiled exact solver spends its time: CPU cycles per phase of a solve.

``perf`` sees no symbols in numba's cached code, and timing a phase by running it twice
fails because LLVM merges the duplicate calls. This script instead compiles a copy of
``mwsp_torch/_simplex.py`` with the CPU's cycle counter (``llvm.readcyclecounter``) read
between the phases of :func:`transport_cost`, solves the problems ``solver_settings.py``
poses (collapsed, cancelled, integer masses), and prints cycles per solve for each phase
and pivots per solve. The readings themselves cost about 20-40 cycles each, four per
pivot, so the instrumented total exceeds the plain solve; compare phases, not totals.

Usage::

    python benchmarks/solver_phases.py --problems NCI1:2:0 --pairs 3000
    python benchmarks/solver_phases.py --problems DD:2:1 --pairs 100

The copy is made by inserting counter reads at fixed lines of the solver; if the solver's
text has changed so that one of them is not found, the script stops and says which.
"""

from __future__ import annotations

import argparse
import os
import tempfile
from pathlib import Path

os.environ.setdefault("KEOPS_VERBOSE", "0")

import numpy as np  # noqa: E402
from numba import njit  # noqa: E402
from solver_settings import problems, solver_module  # noqa: E402

PHASES = ("arrays", "start", "first tree", "pricing", "cycle and push", "re-hang")

_COUNTER = """
from llvmlite import ir as _ir
from numba.core import types as _types
from numba.extending import intrinsic as _intrinsic


@_intrinsic
def _cycles(typingctx):
    def codegen(context, builder, signature, args):
        counter = builder.module.declare_intrinsic("llvm.readcyclecounter", fnty=_ir.FunctionType(_ir.IntType(64), []))
        return builder.call(counter, [])

    return _types.int64(), codegen
"""


def _probe(indent: int, name: str, slot: int | None = None, since: str = "") -> str:
    """Solver text that reads the counter into ``name`` and adds the cycles since ``since`` to ``spent[slot]``."""
    pad = " " * indent
    text = f"{pad}{name} = _cycles()\n"
    return text + (f"{pad}spent[{slot}] += {name} - {since}\n" if slot is not None else "")


# (anchor, text put before it); `spent` is an int64 array: one slot per phase, then pivots, then all.
_PROBES = (
    ("    m = supply.shape[0]\n    n = demand.shape[0]\n", _probe(4, "t_begin")),
    ("    if m * n >= vogel_min_arcs:\n", _probe(4, "t_start", 0, "t_begin")),
    ("    if use_masks and root >= 0:\n", _probe(4, "t_tree", 1, "t_start")),
    ("    # Pricing: every row (small padded problems)", _probe(4, "t_loop", 2, "t_tree")),
    ("        if full_pricing:\n", _probe(8, "t_mark")),
    ("        if enter_p < 0:\n            break\n", _probe(8, "t_priced", 3, "t_mark") + "        spent[6] += 1\n"),
    ("        if use_masks:\n            _rehang_masks(", _probe(8, "t_pushed", 4, "t_priced")),
    ("        # Slot `leave` now holds the entering arc.\n", _probe(8, "t_rehung", 5, "t_pushed")),
    ("    total = 0.0\n    for a in range(num_basic):", "    spent[7] += _cycles() - t_begin\n"),
)
_SIGNATURE = (
    "    full_pricing_max_arcs=FULL_PRICING_MAX_ARCS,\n):",
    "    full_pricing_max_arcs=FULL_PRICING_MAX_ARCS,\n    spent=None,\n):",
)


def instrumented_solver(directory: str):
    """``transport_cost`` of a copy of the solver with cycle counts (its last argument ``spent``)."""
    source = (Path(__file__).resolve().parents[1] / "mwsp_torch" / "_simplex.py").read_text()
    source = source.replace("cache=True, ", "")
    anchor = "from numba import njit\n"
    source = source.replace(anchor, anchor + _COUNTER, 1)
    for anchor, replacement in (_SIGNATURE, *((anchor, probe + anchor) for anchor, probe in _PROBES)):
        if source.count(anchor) != 1:
            raise SystemExit(f"solver_phases.py: the solver has no single {anchor.strip()!r}; update _PROBES")
        source = source.replace(anchor, replacement, 1)
    module = solver_module(source, directory, "_simplex_phases")
    settings = module.VOGEL_MIN_ARCS, module.MIN_BLOCK_ARCS, module.MASK_MAX_NODES, module.FULL_PRICING_MAX_ARCS
    return module.transport_cost, *settings


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--problems", nargs="+", default=["NCI1:2:0"], help="DATASET:d:k")
    parser.add_argument("--pairs", type=int, default=3000)
    parser.add_argument("--stride", type=int, default=1, help="use every STRIDE-th graph (REDDIT: features are slow)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as directory:
        solve, vogel_min_arcs, min_block_arcs, mask_max_nodes, full_max = instrumented_solver(directory)

        @njit
        def solve_all(supplies, demands, costs, spent):
            for i in range(len(costs)):
                solve(
                    supplies[i], demands[i], costs[i], vogel_min_arcs, min_block_arcs, mask_max_nodes, full_max, spent
                )

        print("| problems | " + " | ".join(PHASES) + " | all (instrumented) | pivots |")
        print("|---|" + "---|" * (len(PHASES) + 2))
        for spec in args.problems:
            name, d, k = spec.split(":")
            supplies, demands, costs = problems(name, int(d), int(k), args.pairs, args.seed, args.stride)
            spent = np.zeros(len(PHASES) + 2, dtype=np.int64)
            solve_all(supplies, demands, costs, spent)  # compile, warm caches
            spent[:] = 0
            solve_all(supplies, demands, costs, spent)
            per_solve = spent / len(costs)
            total = per_solve[len(PHASES) + 1]
            cells = [f"{per_solve[i]:,.0f} ({per_solve[i] / total:.0%})" for i in range(len(PHASES))]
            print(
                f"| {name} d={d},k={k} ({len(costs):,}) | " + " | ".join(cells)
                + f" | {total:,.0f} | {per_solve[len(PHASES)]:,.1f} |",
                flush=True,
            )  # fmt: skip


if __name__ == "__main__":
    main()
