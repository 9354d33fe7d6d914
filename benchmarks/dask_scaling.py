"""Dask against the in-process exact engine on the same pairs: pairs per second, memory, equality.

For each worker count, a fresh ``LocalCluster`` (one thread per worker) computes the pairs
through :func:`mwsp_torch.distributed.dask_distances`; the in-process engine computes them
with ``--n-jobs`` threads in the same run. Every run's values must equal the in-process
ones bit for bit. Peak resident memory is read per worker and for the driver.

    python benchmarks/dask_scaling.py --dataset DBLP_v1 --d 2 --k 0 --pairs 2000000 --workers 1 2
    python benchmarks/dask_scaling.py --dataset DBLP_v1 --d 2 --k 0 --workers 2   # all pairs
    python benchmarks/dask_scaling.py --dataset DBLP_v1 --d 2 --k 0 --workers 2 --stream /tmp/w  # as mwsp distances

Writes (or updates, keyed by dataset, setting and pair count) ``benchmarks/results-dask.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import threading
import time
from functools import partial
from pathlib import Path

import numpy as np

from mwsp_torch import MWSP, load_dataset
from mwsp_torch.distributed import connect, dask_distances, stream_distances
from mwsp_torch.transport import exact_distances, upper_pairs

RESULTS = Path(__file__).with_name("results-dask.json")


def _status_gib(field: str) -> float:
    """One ``/proc/self/status`` field (``VmHWM``, ``RssAnon``, ...) in GiB (Linux)."""
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 2**20  # kB
    raise RuntimeError(f"no {field} in /proc/self/status")


def _peak_rss_gib() -> float:
    """This process's peak resident memory (``VmHWM``). Not ``getrusage``'s ``ru_maxrss``:
    Linux carries a process's peak across ``exec``, so a worker spawned by a 6 GiB driver
    reports 6 GiB there however little it uses."""
    return _status_gib("VmHWM")


class _AnonymousPeak:
    """Peak of the driver's anonymous memory (``RssAnon``), sampled every ``interval`` s:
    its resident memory also counts the output file's mapped pages, which the operating
    system writes back and drops under pressure."""

    def __init__(self, interval: float = 0.2) -> None:
        self.peak = _status_gib("RssAnon")
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, args=(interval,), daemon=True)

    def _sample(self, interval: float) -> None:
        while not self._stop.wait(interval):
            self.peak = max(self.peak, _status_gib("RssAnon"))

    def __enter__(self) -> _AnonymousPeak:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, _status_gib("RssAnon"))


def _on_cluster(workers: int, work):
    """``(work(client=client), seconds, {worker: peak GiB})`` on a fresh ``LocalCluster`` of
    ``workers``, timed once the workers are up and have imported."""
    client = connect(n_workers=workers)
    try:
        client.run(lambda: None)
        start = time.perf_counter()
        result = work(client=client)
        seconds = time.perf_counter() - start
        return result, seconds, client.run(_peak_rss_gib)
    finally:
        cluster = client.cluster
        client.close()
        cluster.close()


def _streamed(graphs, target: Path, params: dict, client) -> float:
    """``stream_distances`` on ``client`` into ``target``; the driver's anonymous peak meanwhile."""
    with _AnonymousPeak() as peak:
        model = MWSP(d=params["d"], k=params["k"], n_jobs=1, client=client)
        stream_distances(model, graphs, target, tile_size=params["tile_size"])
    return peak.peak


def _same_file(a: Path, b: Path, rows: int = 1024) -> bool:
    """Two ``.npy`` matrices equal bit for bit, compared a block of rows at a time."""
    x, y = np.load(a, mmap_mode="r"), np.load(b, mmap_mode="r")
    if x.shape != y.shape:
        return False
    return all(np.array_equal(x[i : i + rows], y[i : i + rows]) for i in range(0, len(x), rows))


def stream(args) -> None:
    """``--stream DIR``: the whole matrix through ``stream_distances`` (the path of ``mwsp
    distances --out``), in process and on each cluster, files compared bit for bit."""
    graphs, _ = load_dataset(args.dataset, root=args.root)
    params = {"d": args.d, "k": args.k, "tile_size": args.tile_size}
    folder = Path(args.stream)
    folder.mkdir(parents=True, exist_ok=True)
    reference = folder / "in-process.npy"
    start = time.perf_counter()
    with _AnonymousPeak() as driver:
        stream_distances(MWSP(d=args.d, k=args.k, n_jobs=args.n_jobs), graphs, reference, tile_size=args.tile_size)
    local = time.perf_counter() - start
    support, _ = MWSP(d=args.d, k=args.k).supports(graphs)
    distinct = len(support.distinct_measures()[0])
    pairs = distinct * (distinct - 1) // 2
    print(f"in process: {local:.1f} s, {pairs / local:,.0f} pairs/s, anonymous peak {driver.peak:.2f} GiB", flush=True)
    runs = []
    for workers in args.workers:
        target = folder / f"dask-{workers}.npy"
        driver_peak, seconds, worker_rss = _on_cluster(workers, partial(_streamed, graphs, target, params))
        equal = _same_file(reference, target)
        runs.append(
            {
                "workers": workers,
                "seconds": round(seconds, 2),
                "pairs_per_second": round(pairs / seconds),
                "peak_rss_gib_per_worker": round(max(worker_rss.values()), 2),
                "driver_anonymous_peak_gib": round(driver_peak, 2),
                "equal_to_in_process": equal,
            }
        )
        print(json.dumps(runs[-1]), flush=True)
        target.unlink()
        if not equal:
            raise SystemExit(f"{workers} workers: the file differs from the in-process one")
    reference.unlink()
    _store(
        {
            "dataset": args.dataset,
            "d": args.d,
            "k": args.k,
            "graphs": len(graphs),
            "distinct_measures": distinct,
            "pairs": pairs,
            "all_pairs": True,
            "path": "stream_distances into a memory-mapped .npy",
            "tile_size": args.tile_size,
            "in_process": {
                "threads": os.cpu_count() if args.n_jobs == -1 else args.n_jobs,
                "seconds": round(local, 2),
                "pairs_per_second": round(pairs / local),
                "driver_anonymous_peak_gib": round(driver.peak, 2),
            },
            "dask": runs,
            "driver_peak_rss_gib": round(_peak_rss_gib(), 2),
            "machine": f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores",
            "command": _command(args),
        }
    )


def _command(args) -> str:
    return "python benchmarks/dask_scaling.py " + " ".join(
        f"--{name.replace('_', '-')} {' '.join(map(str, v)) if isinstance(v, list) else v}"
        for name, v in vars(args).items()
        if v is not None and name != "root"
    )


def _store(row: dict) -> None:
    """Replace the row of the same dataset, setting, pair count and path, keep the others."""
    rows = json.loads(RESULTS.read_text()) if RESULTS.exists() else []
    key = (row["dataset"], row["d"], row["k"], row["pairs"], row.get("path"))
    rows = [r for r in rows if (r["dataset"], r["d"], r["k"], r["pairs"], r.get("path")) != key] + [row]
    RESULTS.write_text(json.dumps(rows, indent=2) + "\n")
    print(json.dumps(row, indent=2))


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
    parser.add_argument(
        "--stream", default=None, metavar="DIR", help="all pairs through stream_distances, its files in DIR"
    )
    args = parser.parse_args()
    if args.stream is not None:
        stream(args)
        return

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
        stats = {}
        work = partial(dask_distances, support, support, pairs, tile_size=args.tile_size, stats=stats)
        values, seconds, worker_rss = _on_cluster(workers, work)
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
        "command": _command(args),
    }
    _store(row)


if __name__ == "__main__":
    main()
