"""One figure per dataset from ``results/gnn_vs_kernel.csv``: accuracy against wall-clock seconds.

Each method is one point (mean accuracy over the outer folds that finished, a bar of +- one
std; a row of fewer folds is labelled so) at its seconds per fold (kernel or embedding,
selection and training), on a log time axis; Errica et al.'s published GIN and baseline figures are drawn as dashed
lines where they exist. Writes ``results/gnn_vs_kernel-NAME.png``.

Usage::

    python experiments/plot_gnn_vs_kernel.py [--csv results/gnn_vs_kernel.csv]
"""

from __future__ import annotations

import argparse
import csv
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results"
COLOURS = {"mwsp": "tab:red", "wl": "tab:orange", "sp": "tab:brown", "gin": "tab:blue", "baseline": "tab:gray",
           "gin_tree_ids": "tab:purple", "kernel_fusion": "tab:green"}  # fmt: skip


def plot(csv_path: Path, out_dir: Path) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import matplotlib.ticker

    with open(csv_path, newline="") as handle:
        rows = list(csv.DictReader(handle))
    written = []
    for name in dict.fromkeys(r["dataset"] for r in rows):
        mine = [r for r in rows if r["dataset"] == name]
        fig, ax = plt.subplots(figsize=(6, 4))
        for r in mine:
            # Per fold, so that rows of fewer finished folds compare with whole ones.
            x = float(r["seconds_total"]) / int(r["folds"])
            y, err = float(r["accuracy_mean"]), float(r["accuracy_std"])
            label = r["method"] if "outer folds finished" not in r["note"] else f"{r['method']} [{r['folds']} folds]"
            colour = COLOURS.get(r["method"], "black")
            ax.errorbar(max(x, 1e-2), y, yerr=err, fmt="o", color=colour, capsize=3)
            ax.annotate(label, (max(x, 1e-2), y), textcoords="offset points", xytext=(5, 4), fontsize=8)
            if r["errica_mean"]:
                ax.axhline(float(r["errica_mean"]), color=colour, linestyle="--", linewidth=0.8,
                           label=f"{r['method']} (Errica et al.)")  # fmt: skip
        ax.set_xscale("log")
        # Plain numbers at 1, 2 and 5 of each decade, none on the other ticks: a span under
        # one decade otherwise labels minor ticks in scientific notation, on top of each other.
        ax.xaxis.set_major_locator(matplotlib.ticker.LogLocator(subs=(1.0, 2.0, 5.0)))
        ax.xaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(lambda v, _: f"{v:g}"))
        ax.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
        ax.set_xlabel("wall-clock seconds per outer fold (log)")
        ax.set_ylabel("accuracy % (outer folds)")
        ax.set_title(f"{name}: accuracy against time, one split file")
        ax.grid(True, which="both", alpha=0.3)
        if any(r["errica_mean"] for r in mine):
            ax.legend(fontsize=7, loc="best")
        fig.tight_layout()
        path = out_dir / f"gnn_vs_kernel-{name}.png"
        fig.savefig(path, dpi=110)
        plt.close(fig)
        written.append(path)
    return written


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--csv", default=str(RESULTS / "gnn_vs_kernel.csv"))
    parser.add_argument("--out-dir", help="default: beside the CSV")
    args = parser.parse_args(argv)
    csv_path = Path(args.csv)
    for path in plot(csv_path, Path(args.out_dir) if args.out_dir else csv_path.parent):
        print(path)


if __name__ == "__main__":
    main()
