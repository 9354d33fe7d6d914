"""The command line's options, each declared once, with the values the library takes.

``choices`` come from the estimator's constraint table (:data:`mwsp_torch._checks.PARAMETERS`,
which imports nothing heavy), so the parser and :class:`~mwsp_torch.MWSP` refuse the same values.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from mwsp_torch._checks import PARAMETERS

__all__ = ["check_output", "choices", "data_options", "execution_options", "kernel_options"]


def choices(name: str) -> tuple[str, ...]:
    """The values the estimator's parameter ``name`` takes: the parser's ``choices``."""
    return PARAMETERS[name][1]


def data_options(parser: argparse.ArgumentParser, dataset: str = "CSL") -> None:
    """``--dataset`` (default ``dataset``), ``--root`` and ``--cache-dir``."""
    if dataset == "CSL":
        parser.add_argument("--dataset", default="CSL", help="TU dataset name, or CSL (generated, offline; default)")
    else:
        parser.add_argument("--dataset", default=dataset, help=f"TU dataset name, or CSL (default {dataset})")
    parser.add_argument("--root", default=None, help="data root holding NAME/raw/ (default $MWSP_DATA_ROOT)")
    parser.add_argument("--cache-dir", default=None, help="processed data and distance cache (default $MWSP_CACHE_DIR)")


def kernel_options(parser: argparse.ArgumentParser, many: bool) -> None:
    """MWSP's shape: ``--d``, ``--k`` (several values each where ``many``: a grid), ``--paths``
    and ``--labels``."""
    nargs = "+" if many else None
    several = " (one or more: a grid)" if many else ""
    parser.add_argument(
        "--d", type=int, nargs=nargs, default=[2] if many else 2, help=f"max path length in edges{several} (default 2)"
    )
    parser.add_argument(
        "--k", type=int, nargs=nargs, default=[0] if many else 0, help=f"deepest tree scale{several} (default 0)"
    )
    parser.add_argument(
        "--paths",
        choices=choices("paths"),
        default="split",
        help="tied shortest paths: split (each endpoint has mass 1, split evenly; default) or all (each path 1)",
    )
    parser.add_argument(
        "--labels",
        choices=choices("labels"),
        default=None,
        help="node labels: auto (the dataset's node labels, node_label or one-hot x), degree or uniform "
        "(default: the paper's choice for the dataset, auto where it has node labels)",
    )


def execution_options(parser: argparse.ArgumentParser, many: bool) -> None:
    """The solver, where it runs, the extensions, and progress."""
    nargs = "+" if many else None
    several = " (one or more: a grid)" if many else ""
    parser.add_argument("--solver", choices=choices("solver"), default="exact", help="default exact")
    parser.add_argument("--blur", type=float, default=None, help="Sinkhorn blur (default 0.01)")
    parser.add_argument(
        "--scaling", type=float, default=None, help="Sinkhorn epsilon-scaling ratio, in (0, 1) (default 0.99)"
    )
    parser.add_argument(
        "--sinkhorn-backend",
        choices=choices("backend"),
        default=None,
        help="auto (default), fused, triton (experimental, CUDA), tensorized or online",
    )
    parser.add_argument(
        "--device",
        default="cpu",
        help="torch device, cpu (default) or cuda[:N]: where Sinkhorn runs, and the exact solver with "
        "--exact-engine auto or thread",
    )
    parser.add_argument(
        "--exact-engine",
        choices=choices("engine"),
        default=None,
        help="auto (default: thread on a CUDA --device that torch and numba can use, else compiled), "
        "compiled (the CPU engine, --n-jobs threads), thread (one pair per CUDA thread on --device; "
        "on --device cpu the same solver built for the CPU, slower than compiled)",
    )
    parser.add_argument(
        "--n-jobs",
        type=int,
        default=-1,
        help="cores for the exact solver's threads and the SVM selection's processes (default -1: all cores)",
    )
    parser.add_argument(
        "--checkpoint",
        default=None,
        help="directory for the compiled exact engine's finished tiles and, with evaluate, the selection's "
        "finished steps: the same command started again after a kill resumes",
    )
    parser.add_argument(
        "--scheduler",
        default=None,
        help="run the compiled exact engine's tiles on the Dask cluster whose scheduler is at this address "
        "(tcp://HOST:8786)",
    )
    parser.add_argument(
        "--dask-workers",
        type=int,
        default=None,
        help="run the compiled exact engine's tiles on a local Dask cluster of this many worker processes",
    )
    parser.add_argument(
        "--edge-labels",
        action="store_true",
        help="read edge labels (NAME_edge_labels.txt, or edge_attr) into the trees and paths (default off)",
    )
    parser.add_argument(
        "--attributes",
        choices=choices("attributes"),
        default=None,
        help="append standardised continuous node attributes (NAME_node_attributes.txt) to each node's row: "
        "node (its own) or multiscale (its own, then their means at distance 1..d) (default off)",
    )
    parser.add_argument(
        "--beta",
        type=float,
        nargs=nargs,
        default=None,
        help=f"weight of the attributes in a row, > 0{several} (default 1; read only with --attributes)",
    )
    parser.add_argument("--quiet", action="store_true", help="no progress bars")


def check_output(parser: argparse.ArgumentParser, flag: str, path: str | None) -> None:
    """Refuse an output path that cannot be written before any work, not after it."""
    if path is None:
        return
    target = Path(path)
    folder = target.parent
    if target.is_dir():
        parser.error(f"{flag} {path} is a directory; give a file path")
    if not folder.is_dir():
        parser.error(f"{flag} {path}: the directory {folder} does not exist")
    if not os.access(folder, os.W_OK) or (target.exists() and not os.access(target, os.W_OK)):
        parser.error(f"{flag} {path}: not writable")
