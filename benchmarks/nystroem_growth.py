"""Nystroem features on generated sets of 10^4 to 10^6 graphs: time and peak memory.

The graphs are drawn from NCI1: graph ``i`` of a set is NCI1's graph ``s_i`` (``s`` drawn
uniformly with replacement, seeded), with its nodes renumbered by a random permutation,
one random node's label replaced by a label drawn from NCI1's alphabet, and one random
node pair's edge toggled (added where absent, removed where present). So no graph is a
mere copy of another (the measures differ), yet each stays NCI1-sized (about 30 nodes).

The landmarks are ``--m`` graphs drawn from NCI1 itself (``MWSPNystroem(random_state=0)``,
fitted once); the generated graphs are made, transformed and written in chunks of
``--chunk`` graphs into a memory-mapped ``[n, m]`` float64 ``.npy``, so no step holds all
the graphs at once. One size per process, so that the peak resident memory is this size's.

    python benchmarks/nystroem_growth.py --size 10000 --m 100
    python benchmarks/nystroem_growth.py --size 100000 --m 100
    python benchmarks/nystroem_growth.py --size 1000000 --m 100

Writes (or updates) the ``growth`` entries of ``benchmarks/results-nystroem.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
from torch_geometric.data import Data
from tqdm.auto import tqdm

from mwsp_torch import MWSP, MWSPNystroem, load_dataset

RESULTS = Path(__file__).with_name("results-nystroem.json")


def _peak_rss_gib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20  # Linux: KiB


def _labels(graph: Data) -> np.ndarray:
    return graph.node_label.numpy() if getattr(graph, "node_label", None) is not None else graph.x.argmax(1).numpy()


def perturbed_copies(sources: list[Data], count: int, alphabet: np.ndarray, rng: np.random.Generator) -> list[Data]:
    """``count`` graphs, each a random source renumbered, one label replaced and one edge toggled."""
    out = []
    for s in rng.integers(len(sources), size=count):
        graph = sources[int(s)]
        n = int(graph.num_nodes)
        labels = _labels(graph).copy()
        labels[rng.integers(n)] = alphabet[rng.integers(len(alphabet))]
        edges = {tuple(sorted(e)) for e in graph.edge_index.t().tolist() if e[0] != e[1]}
        if n > 1:
            a, b = rng.choice(n, size=2, replace=False)
            edges ^= {(int(min(a, b)), int(max(a, b)))}
        perm = rng.permutation(n)
        pairs = np.array(sorted(edges), dtype=np.int64).reshape(-1, 2)
        pairs = perm[pairs]
        edge_index = torch.from_numpy(np.concatenate([pairs, pairs[:, ::-1]]).T.copy())
        new_labels = np.empty(n, dtype=np.int64)
        new_labels[perm] = labels
        out.append(Data(edge_index=edge_index, num_nodes=n, node_label=torch.from_numpy(new_labels)))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--size", type=int, required=True, help="generated graphs")
    parser.add_argument("--m", type=int, default=100, help="landmarks")
    parser.add_argument("--d", type=int, default=2)
    parser.add_argument("--k", type=int, default=0)
    parser.add_argument("--lam", type=float, default=0.1)
    parser.add_argument("--chunk", type=int, default=20000)
    parser.add_argument("--n-jobs", type=int, default=-1)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default=None, help="features .npy (default: a temporary file, deleted)")
    args = parser.parse_args()

    sources, _ = load_dataset("NCI1")
    alphabet = np.unique(np.concatenate([_labels(g) for g in sources]))
    start = time.perf_counter()
    nys = MWSPNystroem(
        mwsp=MWSP(d=args.d, k=args.k, n_jobs=args.n_jobs), n_components=args.m, lam=args.lam, random_state=0
    )
    nys.fit(sources)
    fit_s = time.perf_counter() - start
    folder = tempfile.TemporaryDirectory(prefix="nystroem-growth-")
    path = Path(args.out) if args.out else Path(folder.name) / "features.npy"
    features = np.lib.format.open_memmap(path, mode="w+", dtype=np.float64, shape=(args.size, args.m))
    rng = np.random.default_rng(args.seed)
    make_s = transform_s = 0.0
    with tqdm(total=args.size, desc=f"{args.size} graphs", unit="graph", mininterval=30) as bar:
        for lo in range(0, args.size, args.chunk):
            hi = min(lo + args.chunk, args.size)
            t0 = time.perf_counter()
            graphs = perturbed_copies(sources, hi - lo, alphabet, rng)
            t1 = time.perf_counter()
            features[lo:hi] = nys.transform(graphs)
            t2 = time.perf_counter()
            make_s, transform_s = make_s + t1 - t0, transform_s + t2 - t1
            del graphs
            bar.update(hi - lo)
    features.flush()
    finite = bool(np.isfinite(features).all())
    del features
    folder.cleanup()
    row = {
        "size": args.size,
        "m": args.m,
        "d": args.d,
        "k": args.k,
        "lam": args.lam,
        "chunk": args.chunk,
        "pairs": args.size * args.m,
        "fit_s": round(fit_s, 2),
        "generate_s": round(make_s, 2),
        "transform_s": round(transform_s, 2),
        "pairs_per_s": round(args.size * args.m / transform_s),
        "peak_rss_gib": round(_peak_rss_gib(), 3),
        "features_gib": round(args.size * args.m * 8 / 2**30, 3),
        "features_finite": finite,
        "n_jobs": args.n_jobs,
        "machine": f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores",
    }
    print(json.dumps(row), flush=True)
    results = json.loads(RESULTS.read_text()) if RESULTS.exists() else {}
    growth = [r for r in results.get("growth", []) if (r["size"], r["m"]) != (args.size, args.m)]
    results["growth"] = sorted([*growth, row], key=lambda r: (r["m"], r["size"]))
    RESULTS.write_text(json.dumps(results, indent=1) + "\n")


if __name__ == "__main__":
    main()
