"""Fig. 5: paper-protocol accuracy over d, k in 0..6 as heatmaps (DHFR_MD, PTC_FM, IMDB-BINARY, Cuneiform).

Each cell is the authors' procedure (seed-42 folds, inner CV for lam and C) at one
fixed (d, k), as in the paper's figure. Settings whose distances would exceed
``--budget`` seconds in total are left blank and listed. Writes
``results/sensitivity-NAME.png`` and ``results/sensitivity.csv``; resumable.

Usage::

    MWSP_DATA_ROOT=DIR python experiments/sensitivity.py --datasets PTC_FM Cuneiform
"""

from __future__ import annotations

import argparse
import csv

import numpy as np
from common import (
    RESULTS,
    add_run_arguments,
    check_arguments,
    distances,
    hop_distances,
    load,
    load_raw,
    outer_folds,
    save_raw,
)

from mwsp_torch import paper_protocol

DATASETS = ("DHFR_MD", "PTC_FM", "IMDB-BINARY", "Cuneiform")

#: Fig. 5's grid: d and k from 0 to this.
GRID_MAX = 6


def diameter(graphs, labels: str) -> int:
    """The longest shortest path (in edges) of any graph: paths never exceed it."""
    longest = 0
    for _, dist in hop_distances(graphs, labels):
        finite = dist[np.isfinite(dist)]
        longest = max(longest, int(finite.max()) if finite.size else 0)
    return longest


def run_dataset(name: str, args) -> dict:
    raw = load_raw(f"sensitivity-{name}") or {"dataset": name, "cells": {}}
    graphs, y, labels = load(name)
    folds = outer_folds(y)
    # Beyond the longest shortest path, a larger d adds no path: W (and the cell) is that of d = diameter.
    raw["diameter"] = longest = diameter(graphs, labels)
    spent = sum(cell["distance_seconds"] for cell in raw["cells"].values())
    for d, k in sorted(((d, k) for d in args.d for k in args.k), key=lambda s: (s[0] + s[1], s)):
        key = f"{d},{k}"
        same = f"{longest},{k}"
        if key not in raw["cells"] and d > longest and same in raw["cells"]:  # free: no budget needed
            raw["cells"][key] = {**raw["cells"][same], "distance_seconds": 0.0, "same_as": same}
        if key in raw["cells"] or spent > args.budget:
            continue
        w, seconds = distances(name, graphs, labels, d, k, n_jobs=args.n_jobs, progress=False)
        result = paper_protocol(w, y, n_splits=folds, n_jobs=args.eval_jobs, progress=True)
        raw["cells"][key] = {"accuracy_mean": result["accuracy_mean"], "accuracy_std": result["accuracy_std"],
                             "distance_seconds": seconds, "outer_folds": folds}  # fmt: skip
        spent += seconds
        save_raw(f"sensitivity-{name}", raw)
        print(f"{name} d={d} k={k}: {result['accuracy_mean']:.2f} ({seconds:.1f} s)", flush=True)
    save_raw(f"sensitivity-{name}", raw)  # reused cells after the last computed one
    return raw


def plot(raw: dict, path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    grid = np.full((GRID_MAX + 1, GRID_MAX + 1), np.nan)
    for key, cell in raw["cells"].items():
        d, k = (int(v) for v in key.split(","))
        grid[k, d] = cell["accuracy_mean"]
    fig, ax = plt.subplots(figsize=(5, 4.2))
    image = ax.imshow(grid, origin="lower", cmap="viridis")
    for k in range(GRID_MAX + 1):
        for d in range(GRID_MAX + 1):
            if not np.isnan(grid[k, d]):
                ax.text(d, k, f"{grid[k, d]:.1f}", ha="center", va="center", fontsize=7, color="white")
    ax.set_xlabel("d (max path length in edges; paper's d + 1)")
    ax.set_ylabel("k (tree depth)")
    ax.set_title(f"{raw['dataset']}: accuracy %, paper protocol")
    fig.colorbar(image, ax=ax)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_run_arguments(parser, DATASETS)
    args = parser.parse_args()
    # Datasets outside Fig. 5 would be skipped without a word; its grid is d, k in 0..6.
    check_arguments(parser, args, DATASETS, max_scale=GRID_MAX)
    RESULTS.mkdir(parents=True, exist_ok=True)
    rows = []
    for name in DATASETS:
        raw = run_dataset(name, args) if name in args.datasets else load_raw(f"sensitivity-{name}")
        if raw is None:
            continue
        plot(raw, RESULTS / f"sensitivity-{name}.png")
        for key, cell in sorted(raw["cells"].items()):
            d, k = key.split(",")
            rows.append({"dataset": name, "d": d, "k": k, **cell})
    with open(RESULTS / "sensitivity.csv", "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=["dataset", "d", "k", "accuracy_mean", "accuracy_std",
                                                    "distance_seconds", "outer_folds", "same_as"])  # fmt: skip
        writer.writeheader()
        writer.writerows(rows)


if __name__ == "__main__":
    main()
