"""What edge labels and continuous attributes cost against label-only MWSP, all pairs, exact.

Rows with attributes rarely repeat, so collapsing identical rows (one support point for equal
rows, mass on shared rows cancelled) helps less, and every pair solves a larger transport
problem. Per dataset and setting, in this one process (the CPU kernels built beforehand), one
fit per variant: seconds of features and transport, the distinct rows of the bank and the mean
support size of a graph, and each variant's total time over the label-only one:

    python benchmarks/extensions_cost.py --datasets ENZYMES PROTEINS_full --d 2 --k 0 --n-jobs 2
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

os.environ.setdefault("KEOPS_VERBOSE", "0")

import numpy as np  # noqa: E402

from mwsp_torch import MWSP  # noqa: E402
from mwsp_torch.datasets import default_labels, load_dataset  # noqa: E402
from mwsp_torch.transport.engines import build_cpu_kernels  # noqa: E402

VARIANTS = {
    "labels": {},
    "edges": {"edge_labels": True},
    "node": {"attributes": "node"},
    "multiscale": {"attributes": "multiscale"},
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--datasets", nargs="+", default=["ENZYMES", "PROTEINS_full"])
    parser.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=list(VARIANTS))
    parser.add_argument("--d", type=int, default=2)
    parser.add_argument("--k", type=int, default=0)
    parser.add_argument("--beta", type=float, default=1.0)
    parser.add_argument("--n-jobs", type=int, default=2)
    parser.add_argument("--out", default=str(Path(__file__).resolve().parent / "results-extensions.json"))
    args = parser.parse_args()
    build_cpu_kernels()
    results = []
    for name in args.datasets:
        graphs, _ = load_dataset(name)
        base = None
        for variant in args.variants:
            params = dict(VARIANTS[variant])
            if "attributes" in params:
                params["beta"] = args.beta
            model = MWSP(d=args.d, k=args.k, labels=default_labels(name), n_jobs=args.n_jobs, **params)
            try:
                start = time.perf_counter()
                model.fit(graphs)
                total = time.perf_counter() - start
            except ValueError as err:  # a dataset without edge labels or attributes
                print(f"{name} {variant}: skipped ({err})", flush=True)
                continue
            support = model.support_
            row = {
                "dataset": name,
                "variant": variant,
                "d": args.d,
                "k": args.k,
                "beta": args.beta if "attributes" in params else None,
                "features_s": round(model.timings_["features"], 3),
                "transport_s": round(model.timings_["transport"], 3),
                "total_s": round(total, 3),
                "distinct_rows": int(support.rows.shape[0]),
                "mean_support": round(float(np.mean(np.diff(support.graph_ptr))), 2),
                "mean_nodes": round(float(np.mean(support.sizes)), 2),
                "pairs": int(model.timings_["pairs"]),
                "n_jobs": args.n_jobs,
            }
            if variant == "labels":
                base = total
            row["vs_labels"] = round(total / base, 2) if base else None
            results.append(row)
            print(json.dumps(row), flush=True)
    Path(args.out).write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
