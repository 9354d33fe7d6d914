"""How the compiled exact engine scales with threads, on one machine, on the same pairs.

Times :func:`mwsp_torch.transport.exact_distances` (the row-to-row table, the tiles, the
solver: everything ``MWSP.fit`` runs per pair) on random pairs of one dataset, once per
thread count, after a warm-up call that compiles; one JSON object per thread count with
seconds, pairs per second, and microseconds per pair per thread (flat if threads scale).
The results of every run must equal the first's bit for bit.

Usage::

    python benchmarks/engine_threads.py --dataset NCI1 --pairs 1000000 --threads 1 2 4 8 16
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path

os.environ.setdefault("KEOPS_VERBOSE", "0")

import numba  # noqa: E402
import numpy as np  # noqa: E402

sys.path.insert(0, str(Path(__file__).parent))
from gpu_sinkhorn import add_problem_arguments, support_and_pairs  # noqa: E402

from mwsp_torch.transport import exact_distances  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_problem_arguments(parser, pairs=200000)
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    parser.add_argument(
        "--single-pairs", type=int, default=200000, help="pairs timed at 1 thread (the rest take all --pairs)"
    )
    args = parser.parse_args()
    support, pairs = support_and_pairs(args)
    exact_distances(support, support, pairs[:1000], n_jobs=max(args.threads))  # compiles
    base = {"dataset": args.dataset, "d": args.d, "k": args.k, "machine": platform.processor() or platform.machine()}
    base |= {"cpus": os.cpu_count(), "threading_layer": numba.threading_layer()}
    first = None
    for threads in args.threads:
        threads = min(threads, numba.config.NUMBA_NUM_THREADS)  # what exact_distances can use
        chosen = pairs[: args.single_pairs] if threads == 1 else pairs
        start = time.perf_counter()
        values = exact_distances(support, support, chosen, n_jobs=threads)
        seconds = time.perf_counter() - start
        if first is None or len(first) < len(values):
            same = first is None or np.array_equal(first, values[: len(first)])
            first = values
        else:
            same = np.array_equal(first[: len(values)], values)
        print(json.dumps(base | {
            "threads": threads, "pairs": len(chosen), "seconds": seconds, "pairs_per_second": len(chosen) / seconds,
            "us_per_pair_thread": 1e6 * seconds * threads / len(chosen), "equal_to_first": bool(same),
        }), flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
