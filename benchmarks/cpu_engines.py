"""The paths a user could ask for on a CPU that no default takes: timed against the default, in one run.

- Engines: ``exact_distances`` (the compiled engine, ``exact_engine="compiled"``) against
  ``thread_exact_distances(device="cpu")`` (the CUDA thread engine's solver compiled for the
  CPU) and ``batched_exact_distances(device="cpu")`` (the torch batched simplex) on the same
  support and pairs, each once untimed (compilation) and then timed ``--repeats`` times;
- Starts: the compiled solver (``transport_cost``) from the row-minimum rule (the default)
  against Vogel's approximation (``vogel_min_arcs=0``) on the problems of all pairs of
  ``--start-graphs`` random graphs of each dataset, as formed and as the engine solves them
  (shared mass cancelled).

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
import ot  # noqa: E402

from mwsp_torch import MWSP, load_tudataset  # noqa: E402
from mwsp_torch.transport import batched_exact_distances, exact_distances, thread_exact_distances, upper_pairs  # noqa: E402
from mwsp_torch.transport.exact import transport_cost  # noqa: E402


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
        "batched_cpu": lambda: batched_exact_distances(support, support, pairs, device="cpu"),
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


def problems(dataset: str, d: int, k: int, graphs: int, seed: int, cancelled: bool) -> list:
    """The problems of all pairs of ``graphs`` random graphs: integer masses as the engine
    forms them, ``ot.dist`` costs between the two graphs' distinct rows; ``cancelled``: less
    the mass both put on the same row (points left with none dropped), as the engine solves them."""
    data, _ = load_tudataset(dataset)
    chosen = np.random.default_rng(seed).choice(len(data), size=graphs, replace=False)
    subset = [data[i] for i in chosen]
    model = MWSP(d=d, k=k).fit(subset)
    rows, ptr = model.features_.tocsr(), np.r_[0, np.cumsum([g.num_nodes for g in subset])]
    sides = []
    for g in range(graphs):
        unique, counts = np.unique(rows[ptr[g] : ptr[g + 1]].toarray(), axis=0, return_counts=True)
        sides.append((unique, counts.astype(np.int64)))
    out = []
    for i, j in upper_pairs(graphs):
        (a, ca), (b, cb) = sides[i], sides[j]
        supply, demand = ca * cb.sum(), cb * ca.sum()
        if cancelled:
            same = np.all(a[:, None, :] == b[None, :, :], axis=2)
            p, q = np.nonzero(same)
            shared = np.minimum(supply[p], demand[q])
            supply[p] -= shared
            demand[q] -= shared
            a, supply, b, demand = a[supply > 0], supply[supply > 0], b[demand > 0], demand[demand > 0]
            if len(supply) == 0:
                continue
        out.append((supply, demand, np.ascontiguousarray(ot.dist(a, b, metric="euclidean"))))
    return out


def starts(dataset: str, d: int, k: int, graphs: int, repeats: int, seed: int, cancelled: bool) -> dict:
    chosen = problems(dataset, d, k, graphs, seed, cancelled)

    def solve(vogel_min_arcs: int) -> np.ndarray:
        return np.array([transport_cost(a, b, c.copy(), vogel_min_arcs) for a, b, c in chosen])

    row_minimum = timed(lambda: solve(1 << 62), repeats)
    vogel = timed(lambda: solve(0), repeats)
    same = float(np.max(np.abs(vogel[1] - row_minimum[1]) / np.maximum(row_minimum[1], 1e-300)))
    sizes = np.array([c.size for _, _, c in chosen])
    return {
        "dataset": dataset, "d": d, "k": k, "cancelled": cancelled, "problems": len(chosen),
        "median_arcs": float(np.median(sizes)), "max_arcs": int(sizes.max()),
        "seconds": {"row_minimum": row_minimum[0], "vogel": vogel[0]},
        "vogel_vs_row_minimum": vogel[0] / row_minimum[0], "max_rel_diff": same,
    }  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--engines", nargs="*", default=["MUTAG:2:1:188"], help="NAME:d:k:graphs")
    parser.add_argument("--starts", nargs="*", default=["PROTEINS:2:0", "NCI1:2:0", "ENZYMES:3:1"], help="NAME:d:k")
    parser.add_argument("--start-graphs", type=int, default=25, help="random graphs a dataset, all their pairs")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--n-jobs", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    load_before = os.getloadavg()
    result = {"command": " ".join(["python", "benchmarks/cpu_engines.py", *sys.argv[1:]]), "engines": [], "starts": []}
    for spec in args.engines:
        name, d, k, graphs = spec.split(":")
        result["engines"].append(engines(name, int(d), int(k), int(graphs), args.repeats, args.n_jobs))
        print(json.dumps(result["engines"][-1]), flush=True)
    for spec in args.starts:
        name, d, k = spec.split(":")
        for cancelled in (False, True):
            result["starts"].append(starts(name, int(d), int(k), args.start_graphs, args.repeats, args.seed, cancelled))
            print(json.dumps(result["starts"][-1]), flush=True)
    result["load_average_before_after"] = [load_before, os.getloadavg()]
    result["cpu_count"] = os.cpu_count()
    if args.out is not None:
        args.out.write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
