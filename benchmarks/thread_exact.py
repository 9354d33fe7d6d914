"""The one-pair-per-thread exact engine against the compiled CPU engine, on the same pairs.

Times :func:`mwsp_torch.transport.thread_exact_distances` on ``--device`` (``cuda``: the
numba CUDA kernel; ``cpu``: the same solver compiled for the CPU) for each
``--threads-per-block``, after a warm-up call that compiles, and
:func:`mwsp_torch.transport.exact_distances` on ``--n-jobs`` host threads, once. Both
include the row-to-row table. Prints one JSON object per timing, with the largest
relative difference from the compiled engine and the share of pairs equal bit for bit.

On ``cuda`` each setting is timed twice per repeat: ``shared`` (the default: the host
takes small pairs from the GPU's queue once its large pairs are done) and
``gpu_only`` (under ``torch.use_deterministic_algorithms(True)``, where the host leaves
the small pairs to the GPU), with ``host_pairs``, the pairs the host solved.

Usage (on a GPU machine; ``--pairs`` at or above the number of pairs takes all of them)::

    python benchmarks/thread_exact.py --dataset NCI1 --pairs 8443995 --device cuda --n-jobs 16
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("KEOPS_VERBOSE", "0")

import numpy as np  # noqa: E402
import torch  # noqa: E402

sys.path.insert(0, str(Path(__file__).parent))
from gpu_sinkhorn import add_problem_arguments, support_and_pairs  # noqa: E402

from mwsp_torch.transport import exact_distances, thread_exact_distances  # noqa: E402
from mwsp_torch.transport import gpu as gpu_engines  # noqa: E402
from mwsp_torch.transport._thread_simplex import MAX_NODES  # noqa: E402

HOST_PAIRS = [0]


def _counted(left, right, chosen, **kwargs):
    """``exact_distances``, counting the pairs the thread engine hands the host."""
    HOST_PAIRS[0] += len(chosen)
    return exact_distances(left, right, chosen, **kwargs)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_problem_arguments(parser, pairs=200000)
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--threads-per-block", type=int, nargs="+", default=[128])
    parser.add_argument("--n-jobs", type=int, default=-1, help="host threads (compiled engine, large pairs)")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--chunk-size", type=int, default=1 << 18, help="pairs per kernel launch")
    args = parser.parse_args()
    support, pairs = support_and_pairs(args)
    base = {"dataset": args.dataset, "d": args.d, "k": args.k, "pairs": len(pairs), "device": args.device}
    sizes = np.diff(support.graph_ptr)
    base["pairs_over_max_nodes_before_cancelling"] = int(np.sum(sizes[pairs[:, 0]] + sizes[pairs[:, 1]] > MAX_NODES))
    exact_distances(support, support, pairs[:1000], n_jobs=args.n_jobs)  # compiles
    start = time.perf_counter()
    expected = exact_distances(support, support, pairs, n_jobs=args.n_jobs)
    seconds = time.perf_counter() - start
    print(json.dumps(base | {"engine": "compiled", "n_jobs": args.n_jobs, "seconds": seconds}), flush=True)
    gpu_engines.exact_distances = _counted  # the host's share, as the thread engine calls it
    modes = ("shared", "gpu_only") if args.device.startswith("cuda") else ("shared",)
    for threads_per_block in args.threads_per_block:
        kwargs = {"device": args.device, "n_jobs": args.n_jobs, "threads_per_block": threads_per_block}
        kwargs["chunk_size"] = args.chunk_size
        thread_exact_distances(support, support, pairs[:1000], **kwargs)  # compiles
        for _ in range(args.repeats):
            for mode in modes:
                torch.use_deterministic_algorithms(mode == "gpu_only")
                HOST_PAIRS[0] = 0
                start = time.perf_counter()
                got = thread_exact_distances(support, support, pairs, **kwargs)
                seconds = time.perf_counter() - start
                rel = np.abs(got - expected) / np.maximum(np.abs(expected), 1e-300)
                print(json.dumps(base | {
                    "engine": "thread", "mode": mode, "threads_per_block": threads_per_block,
                    "chunk_size": args.chunk_size, "seconds": seconds, "host_pairs": HOST_PAIRS[0],
                    "pairs_per_second": len(pairs) / seconds, "max_rel_diff": float(rel.max()),
                    "equal_share": float(np.mean(got == expected)),
                }), flush=True)  # fmt: skip
    torch.use_deterministic_algorithms(False)


if __name__ == "__main__":
    main()
