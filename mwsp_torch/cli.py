"""Command line: ``mwsp evaluate``, ``mwsp distances`` and ``mwsp explain``.

Examples::

    mwsp evaluate --d 4 --k 0 1                     # offline demo: generated CSL, nested CV
    mwsp evaluate --dataset MUTAG --root DIR --d 2 --k 0 --protocol paper --json r.json
    mwsp evaluate --dataset PTC_MR --d 1 2 3 --k 0 1      # nested grid over d x k
    mwsp distances --dataset MUTAG --d 2 --k 0 --out W.npy
    mwsp explain --dataset MUTAG --root tests/data --graphs 0 1 --d 2 --k 0 --out explanation.png

The data root is ``--root`` or ``$MWSP_DATA_ROOT``. Distance matrices are cached
under ``--cache-dir`` (default ``$MWSP_CACHE_DIR`` or ``~/.cache/mwsp_torch``),
so a re-run or a larger grid only computes the settings it has not seen.

The library (torch, PyG, numba, scikit-learn) is imported once the arguments are parsed
(:func:`_load`), so that ``mwsp --help`` and a refused argument answer at once.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

from mwsp_torch._checks import PARAMETERS, ParameterError

__all__ = ["build_parser", "check_args", "main", "solver_from_args", "summary"]

if TYPE_CHECKING:  # imported at run time by _load()
    import numpy as np

    from mwsp_torch.cache import cached_distances
    from mwsp_torch.datasets import CSL_SKIPS, default_labels, load_dataset, node_label_names
    from mwsp_torch.estimator import MWSP
    from mwsp_torch.evaluation import (
        NESTED_INNER_FOLDS,
        SEED_RANGE,
        check_folds,
        check_inner_folds,
        check_labels,
        nested_protocol,
        paper_pick,
        reported_std,
    )
    from mwsp_torch.transport import Exact, Sinkhorn

#: The names this module uses from the library, imported on first use (:func:`_load`), so that
#: building the parser imports none of torch, PyG or numba. Module attributes once loaded (a
#: test may replace one, and the replacement is kept).
_LAZY = {
    "np": ("numpy", None),
    "cached_distances": ("mwsp_torch.cache", "cached_distances"),
    "MWSP": ("mwsp_torch.estimator", "MWSP"),
    "Exact": ("mwsp_torch.transport", "Exact"),
    "Sinkhorn": ("mwsp_torch.transport", "Sinkhorn"),
    "CSL_SKIPS": ("mwsp_torch.datasets", "CSL_SKIPS"),
    "default_labels": ("mwsp_torch.datasets", "default_labels"),
    "load_dataset": ("mwsp_torch.datasets", "load_dataset"),
    "node_label_names": ("mwsp_torch.datasets", "node_label_names"),
    "NESTED_INNER_FOLDS": ("mwsp_torch.evaluation", "NESTED_INNER_FOLDS"),
    "SEED_RANGE": ("mwsp_torch.evaluation", "SEED_RANGE"),
    "check_folds": ("mwsp_torch.evaluation", "check_folds"),
    "check_inner_folds": ("mwsp_torch.evaluation", "check_inner_folds"),
    "check_labels": ("mwsp_torch.evaluation", "check_labels"),
    "nested_protocol": ("mwsp_torch.evaluation", "nested_protocol"),
    "paper_pick": ("mwsp_torch.evaluation", "paper_pick"),
    "reported_std": ("mwsp_torch.evaluation", "reported_std"),
}


def _choices(name: str) -> tuple[str, ...]:
    """The values the estimator's parameter ``name`` takes (:data:`mwsp_torch._checks.PARAMETERS`,
    which imports nothing heavy): the parser's ``choices``, the same as the library's."""
    return PARAMETERS[name][1]


def _load() -> None:
    """Import what :data:`_LAZY` names into this module, where not there already."""
    module_globals = globals()
    for name, (module, attribute) in _LAZY.items():
        if name not in module_globals:
            loaded = importlib.import_module(module)
            module_globals[name] = loaded if attribute is None else getattr(loaded, attribute)


def __getattr__(name: str):
    if name in _LAZY:
        _load()
        return globals()[name]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _common(parser: argparse.ArgumentParser, many: bool) -> None:
    nargs = "+" if many else None
    parser.add_argument("--dataset", default="CSL", help="TU dataset name, or CSL (generated, offline; default)")
    parser.add_argument("--root", default=None, help="data root holding NAME/raw/ (default $MWSP_DATA_ROOT)")
    parser.add_argument("--cache-dir", default=None, help="processed data and distance cache (default $MWSP_CACHE_DIR)")
    several = " (one or more: a grid)" if many else ""
    parser.add_argument(
        "--d", type=int, nargs=nargs, default=[2] if many else 2, help=f"max path length in edges{several} (default 2)"
    )
    parser.add_argument(
        "--k", type=int, nargs=nargs, default=[0] if many else 0, help=f"deepest tree scale{several} (default 0)"
    )
    parser.add_argument(
        "--paths",
        choices=_choices("paths"),
        default="split",
        help="tied shortest paths: split (each endpoint has mass 1, split evenly; default) or all (each path 1)",
    )
    parser.add_argument("--solver", choices=_choices("solver"), default="exact", help="default exact")
    parser.add_argument("--blur", type=float, default=None, help="Sinkhorn blur (default 0.01)")
    parser.add_argument(
        "--scaling", type=float, default=None, help="Sinkhorn epsilon-scaling ratio, in (0, 1) (default 0.99)"
    )
    parser.add_argument(
        "--sinkhorn-backend",
        choices=_choices("backend"),
        default=None,
        help="auto (default), fused, triton (experimental, CUDA), tensorized or online",
    )
    parser.add_argument(
        "--labels",
        choices=_choices("labels"),
        default=None,
        help="node labels: auto (the dataset's node labels, node_label or one-hot x), degree or uniform "
        "(default: the paper's choice for the dataset, auto where it has node labels)",
    )
    parser.add_argument(
        "--device",
        default="cpu",
        help="torch device, cpu (default) or cuda[:N]: where Sinkhorn runs, and the exact solver with "
        "--exact-engine auto or thread",
    )
    parser.add_argument(
        "--exact-engine",
        choices=_choices("engine"),
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
        choices=_choices("attributes"),
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


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="mwsp", description="MWSP graph kernel (Multi-scale Wasserstein Shortest-Path)"
    )
    sub = parser.add_subparsers(dest="command", required=True)
    ev = sub.add_parser("evaluate", help="SVM accuracy under the paper's or the nested protocol")
    ev.set_defaults(func=_evaluate_command)
    _common(ev, many=True)
    ev.add_argument(
        "--protocol",
        choices=("nested", "paper"),
        default="nested",
        help="nested (honest: d, k, lam, C selected inside the folds; default) or paper (the authors' script)",
    )
    ev.add_argument(
        "--svm", choices=("svc", "krein"), default="svc", help="SVC on exp(-lam W) (default) or a Krein SVM"
    )
    ev.add_argument(
        "--svm-solver",
        choices=("libsvm", "path"),
        default="libsvm",
        help="libsvm (default: scikit-learn's SVC, as earlier results) or path (the whole C grid per split in one "
        "call; equal to libsvm within its tolerance, many times faster on small graph sets: benchmarks/README.md)",
    )
    ev.add_argument(
        "--krein",
        choices=("flip", "clip"),
        default=None,
        help="with --svm krein: flip (default) or clip the kernel's negative eigenvalues",
    )
    ev.add_argument(
        "--seed", type=int, default=None, help="paper: numpy seed (default 42); nested: first seed (default 0)"
    )
    ev.add_argument(
        "--folds",
        type=int,
        default=10,
        help="outer stratified folds (default 10; Cuneiform's smallest class allows 8)",
    )
    ev.add_argument(
        "--repeats",
        type=int,
        default=None,
        help="nested: repetitions with seeds seed..seed+repeats-1 (default 10)",
    )
    ev.add_argument("--json", default=None, help="also write the results here (JSON; the directory must exist)")
    dist = sub.add_parser("distances", help="the n x n Wasserstein distance matrix as .npy")
    dist.set_defaults(func=_distances_command)
    _common(dist, many=False)
    dist.add_argument(
        "--out", required=True, help="output path (.npy format, written to exactly this path; the directory must exist)"
    )
    dist.add_argument(
        "--stream",
        action="store_true",
        help="write tiles straight into --out (memory-mapped) so that n x n values are never held in memory; "
        "exact compiled engine only, no cache or checkpoint",
    )
    cmp = sub.add_parser(
        "compare",
        help="graph kernels against GNNs on one dataset's outer folds: table, paired tests, figure",
        description="MWSP, WL and SP kernels (nested protocol) and GIN and Errica et al.'s baseline (their "
        "protocol) on the same split file; one resumable cell per method (and fold); writes OUT.csv, OUT.md, OUT.png",
    )
    cmp.set_defaults(func=_compare)
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
    ex = sub.add_parser(
        "explain", help="the optimal node-to-node plan behind W between two graphs of a dataset, as text and a PNG"
    )
    ex.set_defaults(func=_explain)
    ex.add_argument("--dataset", default="MUTAG", help="TU dataset name, or CSL (default MUTAG)")
    ex.add_argument(
        "--root", default=None, help="data root holding NAME/raw/ (default $MWSP_DATA_ROOT; tests/data holds MUTAG)"
    )
    ex.add_argument("--cache-dir", default=None, help="processed data (default $MWSP_CACHE_DIR)")
    ex.add_argument(
        "--graphs", type=int, nargs=2, required=True, metavar=("G", "H"), help="the two graphs' indices, from 0"
    )
    ex.add_argument("--d", type=int, default=2, help="max path length in edges (default 2)")
    ex.add_argument("--k", type=int, default=0, help="deepest tree scale (default 0)")
    ex.add_argument("--paths", choices=_choices("paths"), default="split", help="tied shortest paths (default split)")
    ex.add_argument(
        "--labels",
        choices=_choices("labels"),
        default=None,
        help="node labels (default: the paper's choice for the dataset, auto where it has node labels)",
    )
    ex.add_argument("--top", type=int, default=5, help="pairs of rows to list, largest part of W first (default 5)")
    ex.add_argument("--out", default=None, help="draw the two graphs and the plan into this PNG")
    ex.add_argument("--json", default=None, help="also write the explanation here (JSON, the plan included)")
    return parser


def _explain(parser: argparse.ArgumentParser, args) -> int:
    """``mwsp explain``: fit on the two graphs alone (one pair of transport, whatever the
    dataset's size; W is the same as in the whole dataset's matrix), then print, draw, write."""
    _load()
    from mwsp_torch.explain import explain, plot_explanation

    _check_output(parser, "--out", args.out)
    _check_output(parser, "--json", args.json)
    if args.top < 0:
        parser.error(f"--top must be >= 0, got {args.top}")
    try:
        graphs, y = load_dataset(args.dataset, root=args.root, cache_dir=args.cache_dir)
        for index in args.graphs:
            if not 0 <= index < len(graphs):
                raise ValueError(
                    f"--graphs {args.graphs[0]} {args.graphs[1]}: {args.dataset} has {len(graphs)} graphs, "
                    f"numbered 0 to {len(graphs) - 1}; {index} is not one of them"
                )
        labels = args.labels or default_labels(args.dataset)
        names = node_label_names(args.dataset, args.root) if labels == "auto" and args.dataset != "CSL" else None
        pair = [graphs[i] for i in args.graphs]
        model = MWSP(d=args.d, k=args.k, paths=args.paths, labels=labels, n_jobs=1).fit(pair)
        explanation = explain(model, pair[0], pair[1], top=args.top, label_names=names)
        i, j = args.graphs
        print(f"{args.dataset} graphs {i} (class {y[i]}) and {j} (class {y[j]})")
        print(explanation.report())
        if args.out is not None:
            titles = tuple(f"{args.dataset} graph {i}\nclass {y[i]}, {graphs[i].num_nodes} nodes" for i in args.graphs)
            plot_explanation(explanation, pair[0], pair[1], args.out, titles=titles)
            print(f"figure: {args.out}")
        if args.json is not None:
            Path(args.json).write_text(
                json.dumps({"dataset": args.dataset, "graphs": args.graphs, **explanation.to_dict()})
            )
    except (ValueError, OSError, ImportError) as err:  # ImportError: matplotlib or networkx missing
        print(f"mwsp: error: {err}", file=sys.stderr)
        return 2
    return 0


#: The flags that set the solver's options (the estimator's ``Exact`` and ``Sinkhorn``): the
#: option each sets; an option left out keeps the library's default.
_SOLVER_FLAGS = {"exact_engine": "engine", "blur": "blur", "scaling": "scaling", "sinkhorn_backend": "backend"}


def solver_from_args(args):
    """``--solver`` and the flags it reads, as the estimator's solver options."""
    _load()
    options = Exact if args.solver == "exact" else Sinkhorn
    given = {option: getattr(args, flag) for flag, option in _SOLVER_FLAGS.items() if getattr(args, flag) is not None}
    return options(**given)


def _model(args, d: int, k: int, labels: str, beta: float = 1.0, client=None):
    """The estimator that the flags describe, for one ``(d, k, beta)`` of the grid."""
    _load()
    return MWSP(
        d=d,
        k=k,
        paths=args.paths,
        labels=labels,
        edge_labels=args.edge_labels,
        attributes=args.attributes,
        beta=beta,
        solver=solver_from_args(args),
        device=args.device,
        n_jobs=args.n_jobs,
        checkpoint=args.checkpoint,
        progress=not args.quiet,
        client=client,
    )


def _distances(args, graphs, d: int, k: int, labels: str, beta: float = 1.0) -> tuple:
    _load()
    model = _model(args, d, k, labels, beta, client=args.client)
    return cached_distances(model, graphs, args.dataset, cache_dir=args.cache_dir)


def _evaluate(args) -> dict:
    _load()
    graphs, y = load_dataset(args.dataset, root=args.root, cache_dir=args.cache_dir, log=not args.quiet)
    # What the protocol would refuse only after every W is computed, refused before any.
    y = check_labels(y)
    check_folds(y, args.folds, "n_splits" if args.protocol == "paper" else "n_outer")
    if args.protocol == "nested":
        check_inner_folds(y, args.folds, NESTED_INNER_FOLDS)
    labels = args.labels or default_labels(args.dataset)
    distances, timings = {}, {}
    if args.attributes is None:  # keys (d, k), as without the extensions
        settings = [(d, k) for d in args.d for k in args.k]
        for d, k in settings:
            distances[(d, k)], timings[f"d={d},k={k}"] = _distances(args, graphs, d, k, labels)
    else:  # keys (d, k, beta): beta is part of the grid
        settings = [(d, k, beta) for d in args.d for k in args.k for beta in args.beta]
        for d, k, beta in settings:
            distances[(d, k, beta)], timings[f"d={d},k={k},beta={beta:g}"] = _distances(
                args, graphs, d, k, labels, beta
            )
    start = time.perf_counter()
    progress = not args.quiet
    if args.protocol == "paper":
        best, runs = paper_pick(  # the paper's (optimistic) choice of (d, k): by test accuracy
            distances,
            y,
            seed=42 if args.seed is None else args.seed,
            svm=args.svm,
            krein=args.krein,
            progress=progress,
            n_jobs=args.n_jobs,
            n_splits=args.folds,
            svm_solver=args.svm_solver,
            checkpoint=args.checkpoint,
        )
        result = dict(runs[best])
        result["d"], result["k"] = best[:2]
        names = ("d", "k", "beta")
        result["per_setting"] = [
            {
                **dict(zip(names, key, strict=False)),
                "accuracy_mean": runs[key]["accuracy_mean"],
                "accuracy_std": runs[key]["accuracy_std"],
            }
            for key in settings
        ]
        if len(best) == 3:
            result["beta"] = best[2]
        beta_grid = {} if args.attributes is None else {"beta": list(args.beta)}
        result["grid"] = {"d": list(args.d), "k": list(args.k), **beta_grid, **result["grid"]}
        result["selection"] = (
            "(d, k) picked by test accuracy, as the paper did" if len(settings) > 1 else "fixed (d, k)"
        )
    else:
        first = 0 if args.seed is None else args.seed
        result = nested_protocol(
            distances,
            y,
            seeds=tuple(range(first, first + args.repeats)),
            n_outer=args.folds,
            n_inner=NESTED_INNER_FOLDS,
            svm=args.svm,
            krein=args.krein,
            progress=progress,
            n_jobs=args.n_jobs,
            svm_solver=args.svm_solver,
            checkpoint=args.checkpoint,
        )
    result.update(
        {
            "dataset": args.dataset,
            "num_graphs": len(graphs),
            "paths": args.paths,
            "solver": args.solver,
            "labels": labels,
            "edge_labels": args.edge_labels,
            "attributes": args.attributes,
            "timings_seconds": {"distances": timings, "evaluation": time.perf_counter() - start},
        }
    )
    return result


#: Options that only one choice of another option reads, and that choice: given with another
#: choice they would be ignored, so they are refused instead. The solver's options left out keep
#: the library's defaults (:func:`_solver`); the others get the default here.
_DEPENDENT_OPTIONS = {
    "blur": ("solver", "sinkhorn", None),
    "scaling": ("solver", "sinkhorn", None),
    "sinkhorn_backend": ("solver", "sinkhorn", None),
    "exact_engine": ("solver", "exact", None),
    "repeats": ("protocol", "nested", 10),
    "krein": ("svm", "krein", "flip"),
}

#: The flag of each estimator parameter whose flag is not its name (``n_jobs`` is ``--n-jobs``).
_FLAGS = {"engine": "--exact-engine", "backend": "--sinkhorn-backend", "client": "--scheduler or --dask-workers"}


def _flag(name: str) -> str:
    return _FLAGS.get(name, "--" + name.replace("_", "-"))


def _check_output(parser: argparse.ArgumentParser, flag: str, path: str | None) -> None:
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


def check_args(parser: argparse.ArgumentParser, args) -> None:
    """Refuse, by the flag's name and before any data is read, what the estimator would refuse
    (by building it for each setting of the grid: one check, one error text) and what only the
    command line has (options read only with another choice, outputs, the grid, Dask)."""
    _load()
    for name, (owner, choice, default) in _DEPENDENT_OPTIONS.items():
        if not hasattr(args, name):  # an option of the other command
            continue
        if getattr(args, name) is None:
            setattr(args, name, default)
        elif getattr(args, owner) != choice:
            flag, owner_flag, chosen = "--" + name.replace("_", "-"), "--" + owner, getattr(args, owner)
            parser.error(f"{flag} is read only with {owner_flag} {choice}, not with {owner_flag} {chosen}")
    if getattr(args, "stream", False) and (args.edge_labels or args.attributes is not None):
        parser.error("--stream writes label-only W: it does not take --edge-labels or --attributes yet")
    if args.beta is None:
        args.beta = [1.0] if args.command == "evaluate" else 1.0
    elif args.attributes is None:
        parser.error("--beta is read only with --attributes")
    betas = args.beta if isinstance(args.beta, list) else [args.beta]
    if len(set(betas)) != len(betas):
        parser.error(f"--beta lists a value more than once: {' '.join(map(str, betas))}")
    _check_output(parser, "--json", getattr(args, "json", None))
    _check_output(parser, "--out", getattr(args, "out", None))
    if args.scheduler is not None and args.dask_workers is not None:
        parser.error("--scheduler and --dask-workers exclude each other: a running cluster, or a local one")
    if args.dask_workers is not None and args.dask_workers < 1:
        parser.error(f"--dask-workers must be >= 1, got {args.dask_workers}")
    # The estimator checks a client by its type: the address, or one standing for the local cluster.
    client = args.scheduler or ("local cluster" if args.dask_workers is not None else None)
    labels = args.labels or default_labels(args.dataset)
    for d in args.d if isinstance(args.d, list) else [args.d]:
        for k in args.k if isinstance(args.k, list) else [args.k]:
            for beta in betas:
                try:
                    _model(args, d, k, labels, beta, client=client).validate_params()
                except ParameterError as err:
                    parser.error(f"{_flag(err.name)} {err.problem}")
                except ValueError as err:
                    parser.error(str(err))
    if getattr(args, "stream", False) and (
        args.solver != "exact" or args.exact_engine not in (None, "auto", "compiled") or args.checkpoint is not None
    ):
        parser.error(
            "--stream runs the compiled exact engine: --solver exact, --exact-engine auto or compiled, no --checkpoint"
        )
    if args.command == "evaluate":
        if args.repeats < 1:
            parser.error(f"--repeats must be >= 1, got {args.repeats}")
        if args.folds < 2:
            parser.error(f"--folds must be >= 2, got {args.folds}")
        if args.seed is not None:
            last = args.seed + (args.repeats - 1 if args.protocol == "nested" else 0)
            if args.seed < SEED_RANGE[0]:
                parser.error(f"--seed must be >= {SEED_RANGE[0]}, got {args.seed}")
            if last > SEED_RANGE[1]:
                uses = f" with --repeats {args.repeats} uses seeds up to {last}," if last != args.seed else ""
                parser.error(f"--seed {args.seed}{uses} past the largest seed numpy takes, 2**32 - 1")
        for flag, values in (("--d", args.d), ("--k", args.k)):
            if len(set(values)) != len(values):
                parser.error(f"{flag} lists a value more than once: {' '.join(map(str, values))}")


def summary(result: dict) -> str:
    """What is printed: mean +- std and what the std is over (:func:`reported_std`) on the
    first line; then, where the result holds them, the spread of the folds' accuracies and
    the ceiling that the distances themselves put on any kernel's accuracy."""
    _load()
    std, over = reported_std(result)
    folds = result["outer_folds"]
    if over == "repetitions":
        over = f"{len(result['seeds'])} repetitions' means"
    elif result["protocol"] == "nested":
        over = f"the {folds} folds of one repetition"
    else:
        over = f"{folds} folds"
    grid = result["grid"]
    lines = [
        f"{result['dataset']}: {result['accuracy_mean']:.2f} +- {std:.2f} % "
        f"({result['protocol']} protocol, std over {over}, majority class {result['majority_rate']:.2f} %, "
        f"d in {grid['d']}, k in {grid['k']}" + (f", beta in {grid['beta']})" if "beta" in grid else ")")
    ]
    accuracies = result.get("fold_accuracies")
    if accuracies and over.endswith("repetitions' means"):
        lines.append(
            "  the std is over repetitions, each of which scores every graph once; "
            f"the {len(accuracies)} folds scored {min(accuracies):.2f} to {max(accuracies):.2f} %"
        )
    ceiling = result.get("accuracy_ceiling")
    if ceiling is not None and ceiling < 100.0:
        note = "graphs at W = 0 from each other get one prediction, and some such graphs differ in class"
        if result["dataset"] == "CSL" and result.get("paths") == "split" and ceiling == 90.0:
            note = (
                f"CSL's skip-{CSL_SKIPS[4]} and skip-{CSL_SKIPS[9]} graphs have as many nodes at each distance "
                "and one tree at every node: at W = 0, they get one prediction, and a fold loses the test graphs "
                "of one of the two"
            )
        lines.append(f"  accuracy ceiling of these distances: {ceiling:.2f} % ({note})")
    return "\n".join(lines)


def _close(client) -> None:
    """Close a Dask client, and the local cluster it started (``--dask-workers``)."""
    if client is None:
        return
    cluster = getattr(client, "cluster", None)
    client.close()
    if cluster is not None:
        cluster.close()


def _interrupted(args) -> str:
    """The line printed on Ctrl-C: how to resume, and what a re-run keeps."""
    if args.checkpoint is not None:
        return (
            f"mwsp: interrupted; the finished work is kept in --checkpoint {args.checkpoint}: "
            "run the same command again to resume where it stopped"
        )
    return (
        "mwsp: interrupted; distance matrices already computed are cached, the one in progress is lost: "
        "run the same command again to go on (add --checkpoint DIR to also keep finished tiles and selection steps)"
    )


def _compare(parser: argparse.ArgumentParser, args) -> int:
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


def _computing(parser: argparse.ArgumentParser, args, work) -> int:
    """``evaluate`` and ``distances``: the checks, a Dask client where one is asked for, then
    ``work(args)``; an error or Ctrl-C ends in one line, not a traceback."""
    check_args(parser, args)
    args.client = None
    try:
        if args.scheduler is not None or args.dask_workers is not None:
            from mwsp_torch.distributed import connect

            args.client = connect(scheduler=args.scheduler, n_workers=args.dask_workers)
        return work(args)
    except (ValueError, OSError) as err:  # OSError: unreadable roots, unwritable --out or cache, no scheduler
        print(f"mwsp: error: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:  # Ctrl-C: one line that says what is kept, not a traceback
        print(_interrupted(args), file=sys.stderr)
        return 130
    finally:
        _close(args.client)


def _distances_command(parser: argparse.ArgumentParser, args) -> int:
    """``mwsp distances``: W as ``.npy`` at ``--out`` (streamed tile by tile with ``--stream``)."""

    def work(args) -> int:
        graphs, _ = load_dataset(args.dataset, root=args.root, cache_dir=args.cache_dir, log=not args.quiet)
        labels = args.labels or default_labels(args.dataset)
        if args.stream:
            from mwsp_torch.distributed import stream_distances

            start = time.perf_counter()
            model = _model(args, args.d, args.k, labels, client=args.client)
            if args.client is not None:  # one task per worker thread
                model.set_params(n_jobs=1)
            w = stream_distances(model, graphs, args.out)
            timings = {"total": time.perf_counter() - start, "streamed": True}
        else:
            w, timings = _distances(args, graphs, args.d, args.k, labels, args.beta)
            with open(args.out, "wb") as out:  # np.save on a path would append .npy to it
                np.save(out, w)
        print(json.dumps({"out": args.out, "shape": list(w.shape), "timings_seconds": timings}))
        return 0

    return _computing(parser, args, work)


def _evaluate_command(parser: argparse.ArgumentParser, args) -> int:
    """``mwsp evaluate``: the protocol's accuracy, printed (and written to ``--json``)."""

    def work(args) -> int:
        result = _evaluate(args)
        print(summary(result))
        if args.json:
            try:  # checked before the run; printed above, so a late failure loses no result
                Path(args.json).write_text(json.dumps(result, indent=2))
            except OSError as err:
                print(f"mwsp: error: cannot write --json {args.json}: {err}", file=sys.stderr)
                return 2
        return 0

    return _computing(parser, args, work)


def main(argv: list[str] | None = None) -> int:
    # pykeops prints its compilations on stdout (PYKEOPS_VERBOSE), keopscore its CUDA status
    # (KEOPS_VERBOSE): the command line's stdout is its result, so both are quiet, for every
    # subcommand (`explain` imports POT, which imports geomloss and so pykeops).
    os.environ.setdefault("KEOPS_VERBOSE", "0")
    os.environ.setdefault("PYKEOPS_VERBOSE", "0")
    parser = build_parser()
    args = parser.parse_args(argv)
    _load()
    return args.func(parser, args)


if __name__ == "__main__":
    sys.exit(main())
