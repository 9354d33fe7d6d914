"""A comparison's table: one row per method from its cells, paired tests between methods, and
the CSV, markdown and accuracy-against-seconds figure written from them."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np

from mwsp_torch.compare.kernels import KERNEL_METHODS, kernel_cell_path
from mwsp_torch.compare.methods import POOLING_METHODS
from mwsp_torch.compare.stats import paired_test

__all__ = ["ERRICA_PUBLISHED", "method_row", "paired_rows", "write_report"]

#: Errica et al. 2020, Table 3 (mean, std, percent), on the folds of their split files.
ERRICA_PUBLISHED = {
    "NCI1": {"gin": (80.0, 1.4), "baseline": (69.8, 2.2)},
    "PROTEINS": {"gin": (73.3, 4.0), "baseline": (75.8, 3.7)},
    "DD": {"gin": (75.3, 2.9), "baseline": (78.4, 4.5)},
    "ENZYMES": {"gin": (59.6, 4.5), "baseline": (65.2, 6.4)},
    "IMDB-BINARY": {"gin": (71.2, 3.9), "baseline": (70.8, 5.0)},
    "REDDIT-BINARY": {"gin": (89.9, 1.9), "baseline": (82.2, 3.0)},
}


def method_row(root, dataset: str, method: str, num_folds: int) -> dict | None:
    """A method's row from its cells under ``root``: fold accuracies in fold order (``None``
    for a fold not computed yet), mean and std over the finished folds, seconds, and what was
    searched; ``None`` when no fold is finished."""
    from mwsp_torch.gnn_protocol import cell_path

    accuracies = [None] * num_folds
    seconds, grid, split = 0.0, None, None
    if method in KERNEL_METHODS or method == "fusion":
        path = kernel_cell_path(root, dataset, method)  # fusion's result cell has the same path and format
        if not path.is_file():
            return None
        cell = json.loads(path.read_text())
        for fold in cell["folds"]:
            accuracies[fold["fold"]] = fold["accuracy"]
        seconds, grid, split = (
            cell["seconds_kernel"] + cell["seconds_selection"],
            cell["grid_text"],
            cell["split_sha256"],
        )
    else:
        for f in range(num_folds):
            path = cell_path(root, dataset, method, f)
            if path.is_file():
                cell = json.loads(path.read_text())
                accuracies[f] = cell["accuracy"]
                seconds += cell["seconds_selection"] + cell["seconds_retrain"]
                grid = (
                    " x ".join(f"{name} in {values}" for name, values in cell["grid"].items())
                    + f"; up to {cell['max_epochs']} epochs, patience {cell['patience']}; best of the hold-out "
                    "retrained 3 times"
                )
                split = cell["split_sha256"]
    done = [a for a in accuracies if a is not None]
    if not done:
        return None
    published = ERRICA_PUBLISHED.get(dataset, {}).get(method)
    return {
        "dataset": dataset,
        "method": method,
        "folds_done": len(done),
        "folds": num_folds,
        "accuracy_mean": float(np.mean(done)),
        "accuracy_std": float(np.std(done)),
        "fold_accuracies": accuracies,
        "seconds": seconds,
        "published": None if published is None else f"{published[0]:.1f} +- {published[1]:.1f}",
        "grid": grid,
        "split_sha256": split,
    }


def paired_rows(rows: list[dict], n_train: float, n_test: float, pairs: list[tuple[str, str]]) -> list[dict]:
    """:func:`~mwsp_torch.compare.stats.paired_test` for each ``(a, b)`` of ``pairs`` whose
    rows both have every fold."""
    by_method = {row["method"]: row for row in rows if row["folds_done"] == row["folds"]}
    tests = []
    for a, b in pairs:
        if a in by_method and b in by_method and a != b:
            result = paired_test(by_method[a]["fold_accuracies"], by_method[b]["fold_accuracies"], n_train, n_test)
            tests.append({"dataset": rows[0]["dataset"], "a": a, "b": b, **result})
    return tests


def best_pairs(rows: list[dict]) -> list[tuple[str, str]]:
    """The pairs a table tests: the best kernel against the best GNN (``gin`` or a
    template-pooling GIN; Errica et al.'s ``baseline`` reads no edge, so it is no GNN here),
    ``fusion`` against the better of its parents (``mwsp``, ``gin``), each template-pooling GIN
    against ``gin`` (the network whose readout it replaces), and every other method against
    the best of all (rows with every fold only)."""
    whole = [row for row in rows if row["folds_done"] == row["folds"]]
    if len(whole) < 2:
        return []
    kernels = [r for r in whole if r["method"] in KERNEL_METHODS]
    gnns = [r for r in whole if r["method"] in ("gin", *POOLING_METHODS)]
    pairs = []
    if kernels and gnns:
        pairs.append((max(kernels, key=_mean)["method"], max(gnns, key=_mean)["method"]))
    parents = [r for r in whole if r["method"] in ("mwsp", "gin")]
    if parents and any(r["method"] == "fusion" for r in whole):
        pairs.append(("fusion", max(parents, key=_mean)["method"]))
    if any(r["method"] == "gin" for r in whole):
        pairs += [(r["method"], "gin") for r in whole if r["method"] in POOLING_METHODS]
    best = max(whole, key=_mean)["method"]
    tested = {frozenset(pair) for pair in pairs}
    for row in whole:
        if row["method"] != best and frozenset((best, row["method"])) not in tested:
            pairs.append((best, row["method"]))
    return pairs


def _mean(row: dict) -> float:
    return row["accuracy_mean"]


def write_report(rows: list[dict], tests: list[dict], out: str | Path, figure: bool = True) -> dict:
    """``out.csv`` (one line per row), ``out.md`` (the table, then the paired tests) and, with
    ``figure``, ``out.png`` (accuracy against seconds, one point per method). Returns the paths."""
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    fields = ["dataset", "method", "folds_done", "folds", "accuracy_mean", "accuracy_std", "seconds", "published",
              "split_sha256", "grid"]  # fmt: skip
    with open(out.with_suffix(".csv"), "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=fields, extrasaction="ignore")
        writer.writeheader()
        writer.writerows(rows)
    lines = [
        "| dataset | method | accuracy % | folds | Errica et al. | seconds | grid |",
        "|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        lines.append(
            f"| {row['dataset']} | {row['method']} | {row['accuracy_mean']:.1f} +- {row['accuracy_std']:.1f} | "
            f"{row['folds_done']}/{row['folds']} | {row['published'] or ''} | {row['seconds']:.0f} | "
            f"{row['grid']} |"
        )
    lines += [
        "",
        "Paired tests over the outer folds (a - b in points; Wilcoxon signed-rank and Nadeau-Bengio's "
        "corrected resampled t-test; * where both p < 0.05):",
        "",
        "| dataset | a | b | a - b | Wilcoxon p | corrected t p | |",
        "|---|---|---|---|---|---|---|",
    ]
    for t in tests:
        mark = "*" if t["significant"] else ""
        lines.append(
            f"| {t['dataset']} | {t['a']} | {t['b']} | {t['mean_difference']:+.1f} | {t['wilcoxon_p']:.3f} | "
            f"{t['corrected_t_p']:.3f} | {mark} |"
        )
    out.with_suffix(".md").write_text("\n".join(lines) + "\n")
    paths = {"csv": out.with_suffix(".csv"), "md": out.with_suffix(".md")}
    if figure and rows:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots(figsize=(5, 3.5))
        for row in rows:
            ax.errorbar(max(row["seconds"], 1e-2), row["accuracy_mean"], yerr=row["accuracy_std"], fmt="o", capsize=3)
            ax.annotate(row["method"], (max(row["seconds"], 1e-2), row["accuracy_mean"]), textcoords="offset points",
                        xytext=(5, 3), fontsize=8)  # fmt: skip
        ax.set_xscale("log")
        ax.set_xlabel("seconds (kernels: matrices + selection; GNNs: every training)")
        ax.set_ylabel("test accuracy %")
        ax.set_title(rows[0]["dataset"])
        fig.tight_layout()
        fig.savefig(out.with_suffix(".png"), dpi=120)
        plt.close(fig)
        paths["png"] = out.with_suffix(".png")
    return paths
