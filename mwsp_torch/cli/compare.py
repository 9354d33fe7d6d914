"""``mwsp compare``: graph kernels against GNNs on one dataset's outer folds
(:func:`mwsp_torch.compare.compare`)."""

from __future__ import annotations

import argparse
import importlib
import json
import sys

__all__ = ["add_compare", "run"]


def add_compare(sub) -> None:
    """The ``compare`` subcommand, on the subparsers ``sub``."""
    cmp = sub.add_parser(
        "compare",
        help="graph kernels against GNNs on one dataset's outer folds: table, paired tests, figure",
        description="MWSP, WL and SP kernels (nested protocol) and GIN and Errica et al.'s baseline (their "
        "protocol) on the same split file; one resumable cell per method (and fold); writes OUT.csv, OUT.md, OUT.png",
    )
    cmp.set_defaults(func=run)
    cmp.add_argument("--dataset", required=True, help="TU dataset name")
    cmp.add_argument("--root", default=None, help="data root holding NAME/raw/ (default $MWSP_DATA_ROOT)")
    cmp.add_argument(
        "--splits",
        default=None,
        help="a split file (Errica et al.'s data_splits format or the project's); default: Errica et al.'s for "
        "their datasets ($MWSP_ERRICA_SPLITS), else one drawn by --seed",
    )
    cmp.add_argument("--seed", type=int, default=42, help="seed of a drawn split file (default 42)")
    cmp.add_argument(
        "--methods",
        nargs="+",
        default=["mwsp", "wl", "sp", "gin", "baseline"],
        choices=importlib.import_module("mwsp_torch.compare.methods").METHODS,
        help="methods (default: mwsp wl sp gin baseline; mwsp_attributes where nodes carry attributes; fusion: "
        "MWSP fused with cross-fitted GIN probabilities)",
    )
    cmp.add_argument(
        "--profile",
        default="cpu",
        choices=("cpu", "cpu-1000", "errica"),
        help="the GNNs' grid and budget: cpu (a fixed subset, epochs capped; default), cpu-1000, errica (theirs)",
    )
    cmp.add_argument("--d", type=int, nargs="+", default=[1, 2, 3], help="MWSP's path lengths (default 1 2 3)")
    cmp.add_argument("--k", type=int, nargs="+", default=[0, 1, 2], help="MWSP's tree scales (default 0 1 2)")
    cmp.add_argument(
        "--beta", type=float, nargs="+", default=[0.3, 1.0, 3.0], help="mwsp_attributes' weights (default 0.3 1 3)"
    )
    cmp.add_argument(
        "--attributes-k", type=int, nargs="+", default=None, help="mwsp_attributes' tree scales (default: --k)"
    )
    cmp.add_argument("--wl-h", type=int, nargs="+", default=[1, 2, 3, 4, 5], help="WL's iterations (default 1..5)")
    cmp.add_argument("--folds", type=int, nargs="+", default=None, help="GNN folds to compute now (default all)")
    cmp.add_argument("--raw-dir", default="compare-results", help="the cells' folder (default compare-results)")
    cmp.add_argument("--out", default=None, help="the report's path without suffix (default RAW_DIR/NAME/comparison)")
    cmp.add_argument("--n-jobs", type=int, default=-1, help="processes for the kernels (default -1: every core)")
    cmp.add_argument("--force", action="store_true", help="recompute cells computed under another request")
    cmp.add_argument("--quiet", action="store_true", help="no progress bars")


def run(parser: argparse.ArgumentParser, args) -> int:
    """``mwsp compare``: :func:`mwsp_torch.compare.compare`, then the table on stdout."""
    from mwsp_torch.compare import KernelGrid, compare

    settings = tuple((d, k) for d in args.d for k in args.k)
    attributed = tuple((d, k) for d in args.d for k in (args.attributes_k or args.k))
    grid = KernelGrid(mwsp=settings, attributes=attributed, betas=tuple(args.beta), wl_h=tuple(args.wl_h))
    try:
        result = compare(args.dataset, root=args.raw_dir, out=args.out, methods=args.methods, data_root=args.root,
                         splits=args.splits, seed=args.seed, profile=args.profile, grid=grid, folds=args.folds,
                         n_jobs=args.n_jobs, progress=not args.quiet, force=args.force)  # fmt: skip
    except (ValueError, OSError) as err:
        print(f"mwsp: error: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("mwsp: interrupted; finished cells are kept: run the same command again to go on", file=sys.stderr)
        return 130
    print(result["paths"]["md"].read_text(), end="")
    print(json.dumps({name: str(path) for name, path in result["paths"].items()}))
    return 0
