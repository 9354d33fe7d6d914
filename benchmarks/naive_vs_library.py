"""The naive loop against the library on the same graphs, in one process.

Naive: the authors' approach, dense node rows and one ``ot.dist`` + ``ot.emd2`` per pair,
on this library's own node feature maps (so both solve the same problems).
Library: ``MWSP(d, k, solver="exact").fit(graphs)``, feature extraction included.

Usage::

    python benchmarks/naive_vs_library.py --dataset NCI1 --graphs 400 --d 2 --k 0

``--n-jobs`` defaults to the estimator's own default (-1, every core), so that run times
``MWSP(d=2, k=0, solver="exact").fit(graphs)`` as the issue writes it. ``--no-warmup``
times the first fit of the process as well: it then loads the ahead-of-time compiled
kernels (``mwsp_torch/compiled.py``; built by the first fit on a machine, so run once before
timing), or with ``MWSP_KERNELS=jit`` numba's functions from numba's disk cache.
"""

from __future__ import annotations

import argparse
import json
import os
import time

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("KEOPS_VERBOSE", "0")

import numpy as np  # noqa: E402
import ot  # noqa: E402

from mwsp_torch import MWSP  # noqa: E402
from mwsp_torch.datasets import default_labels, load_dataset  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", default="NCI1")
    parser.add_argument("--root", default=None)
    parser.add_argument("--graphs", type=int, default=400)
    parser.add_argument("--d", type=int, default=2)
    parser.add_argument("--k", type=int, default=0)
    parser.add_argument("--n-jobs", type=int, default=-1)
    parser.add_argument("--no-warmup", action="store_true", help="time the process's first fit too")
    args = parser.parse_args()
    graphs, _ = load_dataset(args.dataset, root=args.root)
    graphs = graphs[: args.graphs]
    labels = default_labels(args.dataset)
    if not args.no_warmup:
        MWSP(d=args.d, k=args.k, labels=labels).fit(graphs[:3])  # kernels loaded (or built), not timed

    start = time.perf_counter()
    model = MWSP(d=args.d, k=args.k, labels=labels, n_jobs=args.n_jobs).fit(graphs)
    library_seconds = time.perf_counter() - start

    sizes = np.array([g.num_nodes for g in graphs])
    ptr = np.concatenate([[0], np.cumsum(sizes)])
    dense = model.features_.toarray()
    start = time.perf_counter()
    naive = np.zeros_like(model.distances_)
    for i in range(len(graphs)):
        a = dense[ptr[i] : ptr[i + 1]]
        for j in range(i + 1, len(graphs)):
            b = dense[ptr[j] : ptr[j + 1]]
            cost = ot.dist(a, b, metric="euclidean")
            naive[i, j] = naive[j, i] = ot.emd2(np.full(len(a), 1 / len(a)), np.full(len(b), 1 / len(b)), cost)
    naive_seconds = time.perf_counter() - start
    iu = np.triu_indices(len(graphs), 1)
    rel = np.abs(model.distances_[iu] - naive[iu]) / np.maximum(np.abs(naive[iu]), 1e-300)
    print(
        json.dumps(
            {
                "dataset": args.dataset,
                "graphs": len(graphs),
                "d": args.d,
                "k": args.k,
                "pairs": int(len(iu[0])),
                "library_seconds_incl_features": library_seconds,
                "library_timings": model.timings_,
                "naive_seconds": naive_seconds,
                "speedup": naive_seconds / library_seconds,
                "max_rel_diff": float(rel.max()),
                "n_jobs": args.n_jobs,
                "warmup": not args.no_warmup,
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
