"""GNNs against graph kernels on the same outer folds: our table, over :func:`mwsp_torch.compare.compare`.

For each dataset, every method reads one split file: Errica et al.'s own (``--errica-dir``,
their ``data_splits/``) for NCI1, PROTEINS (their file indexes PROTEINS_full), DD, ENZYMES, IMDB-BINARY
and REDDIT-BINARY, the project's seed-42 files (``results/folds/NAME.json``) for MUTAG and
PTC_MR. Kernels (``mwsp``, ``mwsp_attributes`` where the GNN reads attributes, ``wl``,
``sp``) select by the nested protocol on those folds; GNNs (``gin``, ``baseline``) follow
Errica et al.'s protocol (``--profile``). Each cell is kept under ``--raw-dir``, so a killed
run resumes; ``--report-only`` builds the table from the cells there, with the folds that
finished. Output: ``results/gnn_vs_kernel.csv`` and ``.md`` (every dataset's rows and paired
tests) and ``results/gnn_vs_kernel-NAME.png``.

Usage::

    MWSP_DATA_ROOT=DIR python experiments/gnn_vs_kernel.py --datasets MUTAG PTC_MR --methods mwsp wl sp gin baseline
    python experiments/gnn_vs_kernel.py --report-only
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

import numpy as np

from mwsp_torch.compare import KernelGrid, compare, comparison_data
from mwsp_torch.compare.report import best_pairs, method_row, paired_rows, write_report

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results"
DATASETS = ("MUTAG", "PTC_MR", "ENZYMES", "IMDB-BINARY", "PROTEINS", "NCI1", "DD", "REDDIT-BINARY")
#: The project's split files, where Errica et al. published none.
OWN_SPLITS = {"MUTAG", "PTC_MR"}
#: Datasets whose GNN inputs carry continuous attributes: MWSP runs with them too. Errica et
#: al.'s PROTEINS nodes are the labels only (``gnn_protocol.ERRICA_LABELS_ONLY``), so there
#: every method reads labels.
ATTRIBUTED = {"ENZYMES"}
METHODS = ("mwsp", "mwsp_attributes", "wl", "sp", "gin", "baseline", "fusion", "gin_pool", "gin_pool_tree_ids")
#: The kernels' grids (``mwsp compare``'s defaults with --attributes-k 0): attribute W costs
#: several times label W, so mwsp_attributes searches k = 0 only.
GRID = KernelGrid(attributes=((1, 0), (2, 0), (3, 0)))


def splits_of(name: str) -> Path | None:
    return RESULTS / "folds" / f"{name}.json" if name in OWN_SPLITS else None


def methods_of(name: str, asked) -> list[str]:
    return [m for m in asked if m != "mwsp_attributes" or name in ATTRIBUTED]


def report(names, methods, raw: Path, data_root) -> list[str]:
    """Rows and paired tests of every dataset from the cells under ``raw``; writes the table."""
    rows, tests, lines = [], [], []
    for name in names:
        _, y, outer, _, _ = comparison_data(name, data_root, splits_of(name))
        found = [r for m in methods_of(name, methods) if (r := method_row(raw, name, m, len(outer.folds)))]
        if not found:
            continue
        n_test = float(np.mean([len(f.test) for f in outer.folds]))
        found_tests = paired_rows(found, len(y) - n_test, n_test, best_pairs(found))
        write_report(found, found_tests, RESULTS / f"gnn_vs_kernel-{name}")
        for suffix in (".csv", ".md"):  # one table for all datasets below; the figure stays per dataset
            (RESULTS / f"gnn_vs_kernel-{name}{suffix}").unlink()
        rows += found
        tests += found_tests
        for row in found:
            lines.append(f"{name:14s} {row['method']:16s} {row['folds_done']:2d}/{row['folds']} folds "
                         f"{row['accuracy_mean']:5.1f} +- {row['accuracy_std']:4.1f}")  # fmt: skip
    if rows:
        write_report(rows, tests, RESULTS / "gnn_vs_kernel", figure=False)
    return lines


def main(argv=None) -> list[str]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--datasets", nargs="+", default=list(DATASETS[:6]), choices=DATASETS)
    parser.add_argument("--methods", nargs="+", default=list(METHODS), choices=METHODS)
    parser.add_argument("--profile", default="cpu", help="the GNNs' grid and budget (mwsp_torch.gnn_protocol.PROFILES)")
    parser.add_argument("--folds", type=int, nargs="+", default=None, help="GNN folds to compute now (default all)")
    parser.add_argument("--raw-dir", default=str(RESULTS / "raw" / "compare"), help="the cells' folder")
    parser.add_argument("--root", default=None, help="data root (default $MWSP_DATA_ROOT)")
    parser.add_argument("--n-jobs", type=int, default=1, help="processes for the kernels (default 1)")
    parser.add_argument("--max-epochs", type=int, default=None, help="the GNNs' epochs instead of the profile's")
    parser.add_argument("--patience", type=int, default=None, help="the GNNs' patience instead of the profile's")
    parser.add_argument("--report-only", action="store_true", help="build the table from the cells there, run nothing")
    parser.add_argument("--quiet", action="store_true")
    args = parser.parse_args(argv)
    if not args.report_only:
        for name in args.datasets:
            compare(name, root=args.raw_dir, out=Path(args.raw_dir) / name / "comparison",
                    methods=methods_of(name, args.methods), data_root=args.root, splits=splits_of(name),
                    profile=args.profile, grid=GRID, folds=args.folds, max_epochs=args.max_epochs,
                    patience=args.patience, n_jobs=args.n_jobs, progress=not args.quiet)  # fmt: skip
    lines = report(args.datasets, args.methods, Path(args.raw_dir), args.root)
    for line in lines:
        print(line)
    return lines


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    main()
