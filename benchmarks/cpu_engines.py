"""A path a user could ask for on a CPU that no default takes, timed against the default, in one run.

``exact_distances`` (the compiled engine) against ``thread_exact_distances(device="cpu")`` (the
CUDA thread engine's solver compiled for the CPU, how CI tests it without a GPU) on the same
support and pairs, each once untimed (compilation) and then timed ``--repeats`` times. (At
commit 9a0b14d this script also timed the batched engine and Vogel's start, since removed:
``docs/engines.md``.)

Usage::

    python benchmarks/cpu_engines.py --repeats 1 --out benchmarks/results-cpu-engines.json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np  # noqa: E402

from mwsp_torch import MWSP, load_tudataset  # noqa: E402
from mwsp_torch.transport import exact_distances, thread_exact_distances, upper_pairs  # noqa: E402


def timed(function, repeats: int) -> tuple[float, np.ndarray]:
    values = function()  # compiles, untimed
    seconds = []
    for _ in range(repeats):
        start = time.perf_counter()
        values = function()
        seconds.append(time.perf_counter() - start)
    return statistics.median(seconds), values


def engines(dataset: str, d: int, k: int, graphs: int, repeats: int, n_jobs: int) -> dict:
    data, _ = load_tudataset(dataset)
    support = MWSP(d=d, k=k, n_jobs=n_jobs).fit(data[:graphs]).support_
    pairs = upper_pairs(min(graphs, len(data)))
    runs = {
        "compiled": lambda: exact_distances(support, support, pairs, n_jobs=n_jobs),
        "thread_cpu": lambda: thread_exact_distances(support, support, pairs, device="cpu", n_jobs=n_jobs),
    }
    seconds, values = {}, {}
    for name, run in runs.items():
        seconds[name], values[name] = timed(run, repeats)
    worst = {
        name: float(np.max(np.abs(v - values["compiled"]) / np.maximum(values["compiled"], 1e-300)))
        for name, v in values.items()
    }
    return {
        "dataset": dataset, "d": d, "k": k, "graphs": min(graphs, len(data)), "pairs": len(pairs),
        "seconds": seconds, "vs_compiled": {n: s / seconds["compiled"] for n, s in seconds.items()},
        "max_rel_diff_vs_compiled": worst,
    }  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--engines", nargs="*", default=["MUTAG:2:1:188"], help="NAME:d:k:graphs")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--n-jobs", type=int, default=2)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    load_before = os.getloadavg()
    result = {"command": " ".join(["python", "benchmarks/cpu_engines.py", *sys.argv[1:]]), "engines": []}
    for spec in args.engines:
        name, d, k, graphs = spec.split(":")
        result["engines"].append(engines(name, int(d), int(k), int(graphs), args.repeats, args.n_jobs))
        print(json.dumps(result["engines"][-1]), flush=True)
    result["load_average_before_after"] = [load_before, os.getloadavg()]
    result["cpu_count"] = os.cpu_count()
    if args.out is not None:
        args.out.write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
