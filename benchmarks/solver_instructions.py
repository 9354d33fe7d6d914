"""Instructions a solve executes (callgrind), against the cycles it takes: is the solver
bound by its instruction count or by waiting (latency, mispredicted branches)?

The problems are those the engine poses (``solver_settings.problems``: collapsed rows,
shared mass cancelled, integer masses, two or more points a side). A child process solves
them ``R`` times under ``valgrind --tool=callgrind --branch-sim=yes``, and once more with
``R = 0``; the difference of the two totals over ``R x problems`` is what one solve
executes, without Python's start-up and the loading of the problems. Instruction counts
do not depend on the load of the machine, so they also compare two versions of the solver
on this shared machine where timings are noisy.

The cycles are the solve's best time natively (one thread) times the clock, which is
measured by a dependent chain of two one-cycle operations (an xor and an add) a step.
Instructions per cycle (IPC) near 1 or below would mean a solve mostly waits, and
interleaving two solves in one thread could fill the gaps; well above 2 means the
instructions themselves are the cost.

The solver is compiled as the ahead-of-time build compiles it (``--lowering build``, the
default: this package's indexing without numba's negative-index wraparound, ``_aot``'s
docstring), or as numba's JIT does (``--lowering numba``), so the two can be compared. Each
lowering gets its own numba cache in a scratch directory: numba's cache does not tell them
apart, and the JIT path's cache is left alone. The children do all the solving, the native
timing included.

The mispredictions are those of callgrind's simple simulated predictor, not of the CPU's,
which is likely to miss fewer. This machine's VM has no hardware counters (``perf`` shows
software events only), hence the simulation.

Usage (needs ``valgrind``; 5,000 NCI1 problems took 3 min 30 s here, most of it the two
children starting Python and numba under valgrind)::

    python benchmarks/solver_instructions.py --problems NCI1:2:0 --pairs 5000
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
import types
from pathlib import Path

os.environ.setdefault("KEOPS_VERBOSE", "0")

import numpy as np  # noqa: E402
from llvmlite import binding as llvm  # noqa: E402
from numba import njit, typed  # noqa: E402

PACKAGE = Path(__file__).resolve().parent.parent / "mwsp_torch"


def _solver():
    """``transport_cost``; in a child, imported without the package's ``__init__`` (which
    loads torch: minutes under valgrind), as the solver needs only numpy, numba and ``_simd``."""
    if "--child" in sys.argv and "mwsp_torch" not in sys.modules:
        package = types.ModuleType("mwsp_torch")
        package.__path__ = [str(PACKAGE)]
        sys.modules["mwsp_torch"] = package
    from mwsp_torch._simplex import transport_cost

    return transport_cost


transport_cost = _solver()


@njit(cache=True)
def _solve_all(supplies, demands, costs, repeats):
    """The sum of ``repeats`` passes of optimal costs. Not ``solver_settings._solver_loop``:
    that loop is a closure numba cannot cache, and importing that module loads torch, so a
    child under valgrind would compile it and load torch (minutes each)."""
    total = 0.0
    for _ in range(repeats):
        for i in range(len(costs)):
            total += transport_cost(supplies[i], demands[i], costs[i])
    return total


@njit(cache=True)
def _chain(steps, x):
    for i in range(steps):
        x = (x ^ i) + 1  # two dependent one-cycle operations a step
    return x


def clock_ghz(steps: int = 400_000_000, repeats: int = 3) -> float:
    """The core's clock: best of ``repeats`` timings of :func:`_chain` (two cycles a step)."""
    _chain(10, 1)
    best = np.inf
    for _ in range(repeats):
        start = time.perf_counter()
        _chain(steps, 1)
        best = min(best, time.perf_counter() - start)
    return 2 * steps / best / 1e9


def _save(path: Path, supplies, demands, costs) -> None:
    np.savez(
        path,
        supply=np.concatenate(supplies),
        demand=np.concatenate(demands),
        cost=np.concatenate([c.ravel() for c in costs]),
        shape=np.array([(len(a), len(b), c.shape[1]) for a, b, c in zip(supplies, demands, costs, strict=True)]),
    )


def _load(path: Path):
    """The problems :func:`_save` wrote, as numba typed lists."""
    with np.load(path) as npz:
        data = {key: npz[key] for key in npz.files}  # each npz[key] reads the file again
    supplies, demands, costs = typed.List(), typed.List(), typed.List()
    s = d = c = 0
    for rows, columns, width in data["shape"]:
        supplies.append(data["supply"][s : s + rows].copy())
        demands.append(data["demand"][d : d + columns].copy())
        costs.append(data["cost"][c : c + rows * width].reshape(rows, width).copy())
        s, d, c = s + rows, d + columns, c + rows * width
    return supplies, demands, costs


LOWERINGS = ("build", "numba")
_LOWERING_ENV = "MWSP_BENCH_LOWERING"


def _child(path: str, repeats: int, timed: bool) -> None:
    """Solve the problems ``repeats`` times and print the total; with ``timed``, print the
    best of 7 timings of one pass too."""
    if os.environ[_LOWERING_ENV] == "build":
        from mwsp_torch._aot import _index_without_wraparound

        _index_without_wraparound()  # before the first call compiles anything
    supplies, demands, costs = _load(Path(path))
    _solve_all(supplies, demands, costs, 1)  # numba's cache is filled natively first (see main)
    print(f"total {_solve_all(supplies, demands, costs, repeats)!r}")
    if timed:
        best = np.inf
        for _ in range(7):
            start = time.perf_counter()
            _solve_all(supplies, demands, costs, 1)
            best = min(best, time.perf_counter() - start)
        print(f"best {best!r}")


_COLLECTED = re.compile(r"Collected : (\d+) (\d+) (\d+) (\d+) (\d+)")


def _callgrind(path: Path, repeats: int, directory: str) -> np.ndarray:
    """Callgrind's totals (instructions, conditional branches and their simulated
    mispredictions, indirect branches and theirs) for a child solving ``repeats`` times."""
    out = subprocess.run(
        [
            "valgrind", "--tool=callgrind", "--branch-sim=yes",
            f"--callgrind-out-file={directory}/callgrind.{repeats}",
            sys.executable, __file__, "--child", str(path), str(repeats),
        ],
        check=True, capture_output=True, text=True,
    )  # fmt: skip
    found = _COLLECTED.search(out.stderr)
    if found is None:
        raise SystemExit(f"no callgrind summary in:\n{out.stderr[-2000:]}")
    return np.array([int(x) for x in found.groups()], dtype=np.float64)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--problems", default="NCI1:2:0", help="DATASET:d:k")
    parser.add_argument("--pairs", type=int, default=5000)
    parser.add_argument("--repeats", type=int, default=2, help="solves of each problem under callgrind (R)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--lowering", choices=LOWERINGS, default="build",
        help="index lowering: the ahead-of-time build's (default) or numba's JIT's (with the wraparound)",
    )  # fmt: skip
    parser.add_argument("--child", nargs=2, metavar=("PROBLEMS", "R"), help=argparse.SUPPRESS)
    parser.add_argument("--timed", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        _child(args.child[0], int(args.child[1]), args.timed)
        return
    from solver_settings import problems

    name, d, k = args.problems.split(":")
    supplies, demands, costs = problems(name, int(d), int(k), args.pairs, args.seed, 1)
    count = len(costs)
    # Valgrind's CPUID says "haswell": left alone, numba would compile the children for that
    # CPU under valgrind (a cache miss, and other code). Naming this CPU runs the native code.
    # OpenBLAS's idle threads spin in the children and callgrind counts every thread: about
    # 3,000 instructions a solve on NCI1, none of them the solver's. The solver calls no BLAS.
    os.environ.update(
        NUMBA_CPU_NAME=llvm.get_host_cpu_name(),
        NUMBA_CPU_FEATURES=llvm.get_host_cpu_features().flatten(),
        OPENBLAS_NUM_THREADS="1",
    )
    with tempfile.TemporaryDirectory() as directory:
        os.environ.update({_LOWERING_ENV: args.lowering, "NUMBA_CACHE_DIR": f"{directory}/numba"})
        path = Path(directory) / "problems.npz"
        _save(path, list(supplies), list(demands), list(costs))
        native = subprocess.run(
            [sys.executable, __file__, "--child", str(path), "1", "--timed"], check=True, capture_output=True, text=True
        )  # compiles into the scratch cache, so that no child compiles under valgrind; times a pass
        totals = [_callgrind(path, r, directory) for r in (0, args.repeats)]
    found = re.search(r"^best (\S+)$", native.stdout, re.MULTILINE)
    best = float(found.group(1))
    ghz = clock_ghz()
    instructions, branches, missed, indirect, indirect_missed = (totals[1] - totals[0]) / (args.repeats * count)
    us = best / count * 1e6
    cycles = us * 1e3 * ghz
    size = np.mean([(len(a), len(b)) for a, b in zip(supplies, demands, strict=True)], axis=0)
    print(native.stdout.splitlines()[0], f"(lowering: {args.lowering})")
    print("| problems | mean size | us a solve | clock GHz | cycles a solve | instructions a solve | IPC | "
          "cond. branches | simulated misses | indirect | simulated misses |")  # fmt: skip
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    print(
        f"| {name} d={d},k={k} ({count:,}) | {size[0]:.1f} x {size[1]:.1f} | {us:.2f} | {ghz:.2f} | {cycles:,.0f} | "
        f"{instructions:,.0f} | {instructions / cycles:.2f} | {branches:,.0f} | {missed:,.0f} | {indirect:,.0f} | "
        f"{indirect_missed:,.0f} |"
    )


if __name__ == "__main__":
    main()
