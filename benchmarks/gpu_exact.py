"""The batched exact engine on a torch device against the compiled CPU engine, same pairs.

Prints seconds, pairs per second and the largest relative difference (must be <= 1e-9).

Usage (on a GPU machine; ``--device cpu`` works too, slowly)::

    python benchmarks/gpu_exact.py --dataset NCI1 --d 2 --k 0 --graphs 4110 --device cuda --n-jobs 16
"""

from __future__ import annotations

import argparse
import json
import os
import time

os.environ.setdefault("KEOPS_VERBOSE", "0")

import numpy as np  # noqa: E402
import torch  # noqa: E402

from mwsp_torch import MWSP  # noqa: E402
from mwsp_torch.datasets import default_labels, load_dataset  # noqa: E402
from mwsp_torch.transport import batched_exact_distances, exact_distances, upper_pairs  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", default="NCI1")
    parser.add_argument("--d", type=int, default=2)
    parser.add_argument("--k", type=int, default=0)
    parser.add_argument("--graphs", type=int, default=400)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--batch-size", type=int, default=1 << 15)
    parser.add_argument("--pad-to", type=int, default=4)
    parser.add_argument("--n-jobs", type=int, default=-1)
    args = parser.parse_args()
    graphs, _ = load_dataset(args.dataset)
    graphs = graphs[: args.graphs]
    support, _ = MWSP(d=args.d, k=args.k, labels=default_labels(args.dataset)).supports(graphs)
    pairs = upper_pairs(support.num_graphs)
    warm = pairs[: min(len(pairs), 2000)]
    batched_exact_distances(support, support, warm, device=args.device, pad_to=args.pad_to)  # CUDA init, compile
    exact_distances(support, support, warm, n_jobs=args.n_jobs)
    if args.device.startswith("cuda"):
        torch.cuda.synchronize()
    start = time.perf_counter()
    got = batched_exact_distances(
        support, support, pairs, device=args.device, batch_size=args.batch_size, pad_to=args.pad_to
    )
    batched_seconds = time.perf_counter() - start
    start = time.perf_counter()
    reference = exact_distances(support, support, pairs, n_jobs=args.n_jobs)
    cpu_seconds = time.perf_counter() - start
    rel = np.abs(got - reference) / np.maximum(np.abs(reference), 1e-300)
    print(json.dumps({
        "dataset": args.dataset, "d": args.d, "k": args.k, "graphs": len(graphs), "pairs": len(pairs),
        "device": str(torch.cuda.get_device_name() if args.device.startswith("cuda") else "cpu"),
        "batched_seconds": batched_seconds, "batched_pairs_per_second": len(pairs) / batched_seconds,
        "cpu_engine_seconds": cpu_seconds, "cpu_engine_threads": args.n_jobs,
        "max_rel_diff": float(rel.max()), "batch_size": args.batch_size, "pad_to": args.pad_to,
    }, indent=2))  # fmt: skip
    if rel.max() > 1e-9:
        raise SystemExit("batched and compiled engines disagree beyond 1e-9")


if __name__ == "__main__":
    main()
