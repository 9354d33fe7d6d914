"""Instructions a pair executes in the exact engine, function by function (callgrind).

The ahead-of-time build (:mod:`mwsp_torch._aot`) is an ordinary shared library whose
functions keep their names, so callgrind can say which of them the instructions are
spent in: the solver's own body (pricing and the cycle are inlined into it), the re-hang,
the start, the gather of costs around the solve, and numba's runtime (allocations and
reference counts). numba's JIT code has no names for valgrind, and ``solver_phases.py``
times phases with counters that themselves cost, so this is the one exact split.

The pairs are every ``--stride``-th upper pair of the dataset, at most ``--pairs`` of them,
posed as :func:`mwsp_torch.transport.exact_distances` poses them (the same choice of ground
costs: the table where it fits, else inverted lists, a scattered buffer or merged rows).
A child process loads the extension alone (no torch, no numba at run time) and runs the
engine's per-thread entry point (``pairs_chunks``) on one thread, once to warm up and
then ``R`` times, under ``valgrind --tool=callgrind``; a second child does the warm-up
alone. The difference of the two, per function, over ``R x pairs`` is what a pair costs.
Instruction counts do not depend on the load of this shared machine; they are not time
(instructions per cycle differ from function to function).

Usage (needs ``valgrind``; 20,000 NCI1 pairs take about a minute)::

    python benchmarks/engine_profile.py --dataset NCI1 --d 2 --k 0 --pairs 20000 --stride 211
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import types
from collections import defaultdict
from pathlib import Path

os.environ.setdefault("KEOPS_VERBOSE", "0")

import numpy as np  # noqa: E402

#: callgrind_annotate's lines: a count, its share, then ``file:function [object]``.
_LINE = re.compile(r"^\s*([\d,]+) \(\s*[\d.]+%\)\s+(\S.*)$")


PACKAGE = Path(__file__).resolve().parent.parent / "mwsp_torch"


def _child(extension: str, arrays: str, repeats: int) -> None:
    """Load ``extension`` by itself and run its ``pairs_chunks`` on one thread, 1 + ``repeats`` times.
    ``mwsp_torch._aot`` is imported without the package's ``__init__``, which loads torch
    (minutes under valgrind); ``_aot`` itself needs only numpy."""
    package = types.ModuleType("mwsp_torch")
    package.__path__ = [str(PACKAGE)]
    sys.modules["mwsp_torch"] = package
    from mwsp_torch._aot import _load

    module = _load(Path(extension))
    with np.load(arrays) as npz:
        data = {key: npz[key] for key in npz.files}
    sets = [data[f"set{i}"] for i in range(4)]
    out = np.empty(len(data["pairs"]), dtype=np.float64)
    args = (
        data["pairs"], *sets, *sets, data["indptr"], data["indices"], data["data"], data["table"], data["squares"],
        int(data["dense_columns"]), int(data["head_columns"]), out,
    )  # fmt: skip
    for _ in range(1 + repeats):
        module.pairs_chunks(*args, 0, 1)
    print(f"sum {out.sum()!r}")


def _prepare(args, directory: str) -> tuple[str, str, int]:
    """The extension's path, the arrays' file and the number of pairs."""
    from mwsp_torch import MWSP, _aot
    from mwsp_torch.datasets import default_labels, load_dataset
    from mwsp_torch.transport import (
        _auto_costs,
        _bank_arrays,
        _cost_buffers,
        _num_columns,
        _row_distance_table,
        _shared_bank,
        upper_pairs,
    )

    extension = _aot.module()
    if extension is None:
        raise SystemExit("the ahead-of-time kernels are off or failed to build (MWSP_KERNELS)")
    graphs, _ = load_dataset(args.dataset)
    support, _ = MWSP(d=args.d, k=args.k, labels=default_labels(args.dataset))._features(graphs, fitted=False)
    pairs = np.ascontiguousarray(upper_pairs(support.num_graphs)[:: args.stride][: args.pairs])
    indptr, indices, data = _bank_arrays(_shared_bank(support, support))
    num_columns = _num_columns(indices)
    method = _auto_costs(indptr, indices, num_columns)  # exact_distances's choice by default
    table = _row_distance_table(indptr, indices, data) if method == "table" else np.empty((0, 0))
    squares, dense_columns, head_columns = _cost_buffers(indptr, data, method, num_columns)
    path = f"{directory}/arrays.npz"
    np.savez(
        path, pairs=pairs, indptr=indptr, indices=indices, data=data, table=table, squares=squares,
        dense_columns=dense_columns, head_columns=head_columns,
        **{f"set{i}": a for i, a in enumerate(support.arrays())},
    )  # fmt: skip
    print(f"{args.dataset} d={args.d},k={args.k}: {len(pairs):,} pairs, costs by {method}")
    return extension.__file__, path, len(pairs)


def _per_function(path: str) -> dict[str, int]:
    """Instructions by function (self cost) in one callgrind output."""
    annotated = subprocess.run(
        ["callgrind_annotate", "--auto=no", "--threshold=100", "--inclusive=no", path],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    counts: dict[str, int] = defaultdict(int)
    for line in annotated.splitlines():
        found = _LINE.match(line)
        if found is None or "PROGRAM TOTALS" in line or "events annotated" in line:
            continue
        where = re.sub(r"\s+\[[^\]]*\]$", "", found.group(2))  # the object file
        function = where.split(":", 1)[1] if ":" in where and not where.startswith("mwsp_torch") else where
        if function.startswith("???:"):
            function = function[4:]
        function = function.split("[abi:")[0].split("(")[0]  # numba's mangled signature
        counts[function] += int(found.group(1).replace(",", ""))
    return counts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", default="NCI1")
    parser.add_argument("--d", type=int, default=2)
    parser.add_argument("--k", type=int, default=0)
    parser.add_argument("--pairs", type=int, default=20_000)
    parser.add_argument("--stride", type=int, default=211, help="every stride-th upper pair")
    parser.add_argument("--repeats", type=int, default=2, help="passes counted (R)")
    parser.add_argument("--top", type=int, default=16, help="functions listed")
    parser.add_argument("--child", nargs=3, metavar=("EXTENSION", "ARRAYS", "R"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        _child(args.child[0], args.child[1], int(args.child[2]))
        return
    with tempfile.TemporaryDirectory() as directory:
        extension, arrays, count = _prepare(args, directory)
        counts = []
        for repeats in (0, args.repeats):
            out = f"{directory}/callgrind.{repeats}"
            subprocess.run(
                [
                    "valgrind", "--tool=callgrind", f"--callgrind-out-file={out}",
                    sys.executable, __file__, "--child", extension, arrays, str(repeats),
                ],
                check=True, capture_output=True, text=True, env={**os.environ, "OPENBLAS_NUM_THREADS": "1"},
            )  # fmt: skip
            counts.append(_per_function(out))
    per_pair = {f: (counts[1].get(f, 0) - counts[0].get(f, 0)) / (args.repeats * count) for f in counts[1]}
    total = sum(per_pair.values())
    print(f"instructions a pair: {total:,.0f}")
    print("| function | instructions a pair | share |")
    print("|---|---|---|")
    for function, value in sorted(per_pair.items(), key=lambda item: -item[1])[: args.top]:
        print(f"| `{function}` | {value:,.0f} | {value / total:.1%} |")


if __name__ == "__main__":
    main()
