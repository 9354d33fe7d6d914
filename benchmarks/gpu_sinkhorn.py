"""Sinkhorn (geomloss, ``solver="sinkhorn"``) on a torch device: pairs per second and error against exact.

For each blur and epsilon-scaling ratio, times :func:`mwsp_torch.transport.sinkhorn_distances`
on the same random pairs (after one warm-up batch, with the device synchronised; with
``--repeats N`` the fastest of N calls, all of them listed) and
compares with the compiled exact engine on those pairs: relative error |S - W| / W over
pairs with W > 0. One JSON object per setting.

Usage (on a GPU machine; ``--device cpu`` works too, slowly)::

    python benchmarks/gpu_sinkhorn.py --dataset NCI1 --d 2 --k 0 --pairs 100000 --device cuda --n-jobs 16
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import time

os.environ.setdefault("KEOPS_VERBOSE", "0")

import numpy as np  # noqa: E402
import torch  # noqa: E402

from mwsp_torch import MWSP  # noqa: E402
from mwsp_torch.datasets import default_labels, load_dataset  # noqa: E402
from mwsp_torch.transport import exact_distances, sinkhorn_distances  # noqa: E402


def random_pairs(n: int, count: int, seed: int) -> np.ndarray:
    """``count`` distinct pairs ``i < j`` drawn uniformly from ``n`` graphs."""
    rng = np.random.default_rng(seed)
    total = n * (n - 1) // 2
    flat = np.sort(rng.choice(total, size=min(count, total), replace=False))
    # Row i of the upper triangle starts at i n - i (i + 1) / 2.
    starts = np.arange(n) * n - np.arange(n) * (np.arange(n) + 1) // 2
    i = np.searchsorted(starts, flat, side="right") - 1
    j = flat - starts[i] + i + 1
    return np.stack([i, j], axis=1).astype(np.int64)


def add_problem_arguments(parser: argparse.ArgumentParser, pairs: int) -> None:
    """``--dataset --d --k --graphs --pairs --seed``: which pairs a GPU benchmark times."""
    parser.add_argument("--dataset", default="NCI1")
    parser.add_argument("--d", type=int, default=2)
    parser.add_argument("--k", type=int, default=0)
    parser.add_argument("--graphs", type=int, default=0, help="first N graphs (0: all)")
    parser.add_argument("--pairs", type=int, default=pairs, help="random pairs timed")
    parser.add_argument("--seed", type=int, default=0)


def support_and_pairs(args: argparse.Namespace):
    """The collapsed supports of ``args``'s graphs and ``args.pairs`` random pairs of them."""
    graphs, _ = load_dataset(args.dataset)
    if args.graphs:
        graphs = graphs[: args.graphs]
    support, _ = MWSP(d=args.d, k=args.k, labels=default_labels(args.dataset)).supports(graphs)
    return support, random_pairs(support.num_graphs, args.pairs, args.seed)


def synchronize(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_problem_arguments(parser, pairs=20000)
    parser.add_argument("--blurs", type=float, nargs="+", default=[0.1, 0.01, 0.001])
    parser.add_argument("--scalings", type=float, nargs="+", default=[0.99, 0.9])
    parser.add_argument("--batch-size", type=int, default=8192)
    parser.add_argument("--max-bytes", type=int, default=1 << 31)
    parser.add_argument("--backend", nargs="+", default=["auto"], help="one or more, timed on the same pairs")
    parser.add_argument(
        "--dtypes", nargs="+", default=["float64"], help="float32 too: backend triton only (others skip it)"
    )
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--n-jobs", type=int, default=-1)
    parser.add_argument(
        "--repeats", type=int, default=1,
        help="timed calls on the same pairs; the first compiles any kernel shape the warm-up missed",
    )  # fmt: skip
    args = parser.parse_args()
    support, pairs = support_and_pairs(args)
    start = time.perf_counter()
    exact = exact_distances(support, support, pairs, n_jobs=args.n_jobs)
    exact_seconds = time.perf_counter() - start
    positive = exact > 0
    device_name = torch.cuda.get_device_name() if args.device.startswith("cuda") else "cpu"
    runs = [(b, d) for b in args.backend for d in args.dtypes if d == "float64" or b == "triton"]
    for (backend, dtype), scaling, blur in itertools.product(runs, args.scalings, args.blurs):
        options = dict(
            blur=blur, scaling=scaling, device=args.device, batch_size=args.batch_size,
            max_bytes=args.max_bytes, backend=backend, dtype=dtype,
        )  # fmt: skip
        sinkhorn_distances(support, support, pairs[: min(len(pairs), 512)], **options)  # warm-up
        calls = []
        for _ in range(args.repeats):
            synchronize(args.device)
            start = time.perf_counter()
            approx = sinkhorn_distances(support, support, pairs, **options)
            synchronize(args.device)
            calls.append(time.perf_counter() - start)
        seconds = min(calls)
        rel = np.abs(approx[positive] - exact[positive]) / exact[positive]
        print(json.dumps({
            "dataset": args.dataset, "d": args.d, "k": args.k, "graphs": support.num_graphs,
            "pairs": len(pairs), "backend": backend, "dtype": dtype, "device": device_name,
            "blur": blur, "scaling": scaling, "batch_size": args.batch_size,
            "seconds": seconds, "seconds_per_call": calls, "pairs_per_second": len(pairs) / seconds,
            "median_rel_error": float(np.median(rel)), "max_rel_error": float(rel.max()),
            "exact_cpu_seconds": exact_seconds, "exact_cpu_threads": args.n_jobs,
        }), flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
