"""Exact W without a distance table: three ways to the ground costs, timed in one process.

- *merged*: each cost by merging the two sorted rows (``costs="merged"``);
- *scattered*: each row ``b`` scattered into a dense buffer, one lookup per entry of
  every ``a`` (``costs="scattered"``, the only way without a table until 2026-11-22);
- *lists*: inverted lists of the first side's columns (``costs="lists"``).

Costs alone: one thread, on the problems as the engine poses them (shared mass
cancelled), best of ``--repeats``. Whole transport (costs and solver):
``exact_distances`` with ``n_jobs`` threads, once each way. The largest relative
differences from *merged* are printed too, and the way ``costs="auto"`` takes.

Usage::

    python benchmarks/costs_without_table.py --problems DD:2:1:300 DD:2:0:300 ENZYMES:3:1:5000

``DATASET:d:k:SAMPLE`` with ``SAMPLE`` random pairs, 0 for all pairs.
"""

from __future__ import annotations

import argparse
import os
import time

os.environ.setdefault("KEOPS_VERBOSE", "0")

import numpy as np  # noqa: E402
from numba import njit  # noqa: E402

from mwsp_torch import MWSP  # noqa: E402
from mwsp_torch.datasets import default_labels, load_dataset  # noqa: E402
from mwsp_torch.transport import (  # noqa: E402
    _bank_arrays,
    _cancel,
    _column_method,
    _inverted_costs,
    _merged_costs,
    _pair_supports,
    _row_squares,
    _scattered_costs,
    exact_distances,
    upper_pairs,
)


@njit(cache=True)
def _costs_only(pairs, ptr, sup, cnt, size, indptr, indices, data, squares, dense, head, method, reference):
    """Every pair's cost matrix by ``method`` (0 merged, 1 scattered, 2 lists); returns the
    entries computed and, when ``reference``, the largest relative difference from merged."""
    entries = 0
    worst = 0.0
    for t in range(pairs.shape[0]):
        g, h = pairs[t, 0], pairs[t, 1]
        sa, ca, na, sb, cb, nb = _pair_supports(g, h, ptr, sup, cnt, size, ptr, sup, cnt, size)
        pos_ids = np.empty(sa.shape[0], np.int64)
        pos_mass = np.empty(sa.shape[0], np.int64)
        neg_ids = np.empty(sb.shape[0], np.int64)
        neg_mass = np.empty(sb.shape[0], np.int64)
        n_pos, n_neg = _cancel(sa, ca, na, sb, cb, nb, pos_ids, pos_mass, neg_ids, neg_mass)
        pos_ids, neg_ids = pos_ids[:n_pos], neg_ids[:n_neg]
        cost = np.empty((n_pos, n_neg))
        if method == 0:
            _merged_costs(indptr, indices, data, pos_ids, neg_ids, cost)
        elif method == 1:
            _scattered_costs(indptr, indices, data, squares, pos_ids, neg_ids, dense, cost)
        else:
            _inverted_costs(indptr, indices, data, squares, pos_ids, neg_ids, head, cost)
        if reference:
            merged = np.empty((n_pos, n_neg))
            _merged_costs(indptr, indices, data, pos_ids, neg_ids, merged)
            for p in range(n_pos):
                for q in range(n_neg):
                    worst = max(worst, abs(cost[p, q] - merged[p, q]) / max(merged[p, q], 1e-300))
        entries += n_pos * n_neg
    return entries, worst


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--problems", nargs="+", default=["DD:2:1:300"], help="DATASET:d:k:SAMPLE")
    parser.add_argument("--n-jobs", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    methods = ("merged", "scattered", "lists")
    print(
        "| problems | pairs | columns | cost entries / pair | costs: merged ms/pair | scattered | lists | "
        "lists vs scattered | max rel. diff. scattered / lists | whole: merged s | scattered s | lists s | auto |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
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
        indptr, indices, data = _bank_arrays(measures.rows)
        squares = _row_squares(indptr, data)
        dense = np.zeros(measures.rows.shape[1])
        head = np.zeros(measures.rows.shape[1], dtype=np.int32)
        arrays = (*measures.arrays(), indptr, indices, data, squares, dense, head)
        per_pair, worst = {}, {}
        for method, label in enumerate(methods):
            entries, worst[label] = _costs_only(pairs, *arrays, method, True)
            best = np.inf
            for _ in range(args.repeats):
                start = time.perf_counter()
                _costs_only(pairs, *arrays, method, False)
                best = min(best, time.perf_counter() - start)
            per_pair[label] = best / len(pairs) * 1e3
        whole, values = {}, {}
        for label in methods:
            exact_distances(measures, measures, pairs[:50], n_jobs=args.n_jobs, costs=label)  # compile
            start = time.perf_counter()
            values[label] = exact_distances(measures, measures, pairs, n_jobs=args.n_jobs, costs=label)
            whole[label] = time.perf_counter() - start
        print(
            f"| {name} d={d},k={k} | {len(pairs):,} | {measures.rows.shape[1]:,} | {entries / len(pairs):,.0f} | "
            f"{per_pair['merged']:.3f} | {per_pair['scattered']:.3f} | {per_pair['lists']:.3f} | "
            f"{per_pair['scattered'] / per_pair['lists']:.2f}x | {worst['scattered']:.1e} / {worst['lists']:.1e} | "
            f"{whole['merged']:.2f} | {whole['scattered']:.2f} | {whole['lists']:.2f} | "
            f"{_column_method(indptr, indices, measures.rows.shape[1])} |",
            flush=True,
        )
        for label in methods[1:]:
            difference = np.abs(values["merged"] - values[label]) / np.maximum(values["merged"], 1e-300)
            print(f"  whole transport, max rel. difference {label} vs merged: {difference.max():.1e}", flush=True)


if __name__ == "__main__":
    main()
