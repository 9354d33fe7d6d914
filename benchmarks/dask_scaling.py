"""Dask against the in-process exact engine on the same pairs: pairs per second, memory, equality.

For each worker count, a fresh ``LocalCluster`` (one thread per worker) computes the pairs
through :func:`mwsp_torch.distributed.dask_distances`; the in-process engine computes them
with ``--n-jobs`` threads in the same run. Every run's values must equal the in-process
ones bit for bit. Peak resident memory is read per worker and for the driver.

    python benchmarks/dask_scaling.py --dataset DBLP_v1 --d 2 --k 0 --pairs 2000000 --workers 1 2
    python benchmarks/dask_scaling.py --dataset DBLP_v1 --d 2 --k 0 --workers 2   # all pairs

Writes (or updates, keyed by dataset, setting and pair count) ``benchmarks/results-dask.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import time
from pathlib import Path

import numpy as np

from mwsp_torch import MWSP, load_dataset
from mwsp_torch.distributed import connect, dask_distances
from mwsp_torch.transport import exact_distances, upper_pairs

RESULTS = Path(__file__).with_name("results-dask.json")


def _peak_rss_gib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20  # Linux: KiB


def _sampled_pairs(n: int, count: int | None, seed: int) -> np.ndarray:
    """All ``i < j`` pairs, or ``count`` of them drawn without replacement (sorted, as tiles of all pairs run)."""
    total = n * (n - 1) // 2
    if count is None or count >= total:
        return upper_pairs(n)
    flat = np.sort(np.random.default_rng(seed).choice(total, size=count, replace=False))
    # Row i of the upper triangle starts at flat index i * n - i * (i + 1) / 2.
    starts = np.arange(n) * n - np.arange(n) * (np.arange(n) + 1) // 2
    i = np.searchsorted(starts, flat, side="right") - 1
    j = flat - starts[i] + i + 1
    return np.stack([i, j], axis=1).astype(np.int64)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--dataset", default="DBLP_v1")
    parser.add_argument("--root", default=None, help="data root (default $MWSP_DATA_ROOT)")
    parser.add_argument("--d", type=int, default=2)
    parser.add_argument("--k", type=int, default=0)
    parser.add_argument("--pairs", type=int, default=None, help="random pairs (default: all)")
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--n-jobs", type=int, default=-1, help="in-process threads (default: all cores)")
    parser.add_argument("--tile-size", type=int, default=1 << 16)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    graphs, _ = load_dataset(args.dataset, root=args.root)
    start = time.perf_counter()
    support, _ = MWSP(d=args.d, k=args.k).supports(graphs)
    features = time.perf_counter() - start
    pairs = _sampled_pairs(support.num_graphs, args.pairs, args.seed)
    print(f"{args.dataset}: {support.num_graphs} graphs, {len(pairs)} pairs, features {features:.1f} s", flush=True)

    start = time.perf_counter()
    expected = exact_distances(support, support, pairs, n_jobs=args.n_jobs, tile_size=args.tile_size)
    local = time.perf_counter() - start
    print(f"in process, {args.n_jobs} threads: {local:.1f} s, {len(pairs) / local:,.0f} pairs/s", flush=True)
    runs = []
    for workers in args.workers:
        client = connect(n_workers=workers)
        try:
            client.run(lambda: None)  # workers up and importing done before the clock starts
            start = time.perf_counter()
            stats = {}
            values = dask_distances(support, support, pairs, client, tile_size=args.tile_size, stats=stats)
            seconds = time.perf_counter() - start
            worker_rss = client.run(_peak_rss_gib)
        finally:
            cluster = client.cluster
            client.close()
            cluster.close()
        equal = bool(np.array_equal(values, expected))
        runs.append(
            {
                "workers": workers,
                "seconds": round(seconds, 2),
                "pairs_per_second": round(len(pairs) / seconds),
                "tasks": stats["tasks"],
                "peak_rss_gib_per_worker": round(max(worker_rss.values()), 2),
                "equal_to_in_process": equal,
            }
        )
        print(json.dumps(runs[-1]), flush=True)
        if not equal:
            raise SystemExit(f"{workers} workers: values differ from the in-process engine")
    row = {
        "dataset": args.dataset,
        "d": args.d,
        "k": args.k,
        "graphs": support.num_graphs,
        "pairs": len(pairs),
        "all_pairs": args.pairs is None,
        "tile_size": args.tile_size,
        "features_seconds": round(features, 2),
        "in_process": {
            "threads": os.cpu_count() if args.n_jobs == -1 else args.n_jobs,
            "seconds": round(local, 2),
            "pairs_per_second": round(len(pairs) / local),
        },
        "dask": runs,
        "driver_peak_rss_gib": round(_peak_rss_gib(), 2),
        "machine": f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores",
        "command": "python benchmarks/dask_scaling.py "
        + " ".join(
            f"--{name.replace('_', '-')} {' '.join(map(str, v)) if isinstance(v, list) else v}"
            for name, v in vars(args).items()
            if v is not None and name != "root"
        ),
    }
    rows = json.loads(RESULTS.read_text()) if RESULTS.exists() else []
    key = (row["dataset"], row["d"], row["k"], row["pairs"])
    rows = [r for r in rows if (r["dataset"], r["d"], r["k"], r["pairs"]) != key] + [row]
    RESULTS.write_text(json.dumps(rows, indent=2) + "\n")
    print(json.dumps(row, indent=2))


if __name__ == "__main__":
    main()
