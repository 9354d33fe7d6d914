"""Exact W without a distance table: costs by merging sorted rows against scattered rows.

Both ways run in one process on the same pairs (``n_jobs`` threads, each measure once,
as ``MWSP.fit`` poses them), first merged (``dense_max_columns=0``), then scattered; the
largest relative difference between the two is printed too.

Usage::

    python benchmarks/scattered_costs.py --problems DD:2:0:1000 ENZYMES:3:1:0 PROTEINS:2:0:0

``DATASET:d:k:SAMPLE`` with ``SAMPLE`` random pairs, 0 for all pairs.
"""

from __future__ import annotations

import argparse
import os
import time

os.environ.setdefault("KEOPS_VERBOSE", "0")

import numpy as np  # noqa: E402

from mwsp_torch import MWSP  # noqa: E402
from mwsp_torch.datasets import default_labels, load_dataset  # noqa: E402
from mwsp_torch.transport import DENSE_MAX_COLUMNS, exact_distances, upper_pairs  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--problems", nargs="+", default=["DD:2:0:1000"], help="DATASET:d:k:SAMPLE")
    parser.add_argument("--n-jobs", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    print("| problems | pairs | columns | merged s | scattered s | ratio | max rel. difference |")
    print("|---|---|---|---|---|---|---|")
    for spec in args.problems:
        name, d, k, sample = spec.split(":")
        graphs, _ = load_dataset(name)
        support, _ = MWSP(d=int(d), k=int(k), labels=default_labels(name))._features(graphs, fitted=False)
        representatives, _ = support.distinct_measures()
        measures = support.take(representatives)
        if int(sample):
            pairs = np.random.default_rng(args.seed).integers(measures.num_graphs, size=(int(sample), 2))
            pairs = pairs[pairs[:, 0] != pairs[:, 1]]
        else:
            pairs = upper_pairs(measures.num_graphs)
        seconds, values = {}, {}
        for label, limit in (("merged", 0), ("scattered", DENSE_MAX_COLUMNS)):
            exact_distances(measures, measures, pairs[:50], n_jobs=args.n_jobs, dense_max_columns=limit)  # compile
            start = time.perf_counter()
            values[label] = exact_distances(measures, measures, pairs, n_jobs=args.n_jobs, dense_max_columns=limit)
            seconds[label] = time.perf_counter() - start
        difference = np.abs(values["merged"] - values["scattered"]) / np.maximum(values["merged"], 1e-300)
        print(
            f"| {name} d={d},k={k} | {len(pairs):,} | {support.rows.shape[1]:,} | {seconds['merged']:.2f} | "
            f"{seconds['scattered']:.2f} | {seconds['merged'] / seconds['scattered']:.2f}x | {difference.max():.1e} |",
            flush=True,
        )


if __name__ == "__main__":
    main()
