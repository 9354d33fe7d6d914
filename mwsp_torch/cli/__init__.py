"""Command line: ``mwsp evaluate``, ``mwsp distances``, ``mwsp compare`` and ``mwsp explain``.

This module holds ``evaluate`` and ``distances`` and the entry point; ``compare`` and
``explain`` have modules of their own, and :mod:`mwsp_torch.cli.options` declares the options
the subcommands share, once.

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

from mwsp_torch._checks import ParameterError
from mwsp_torch.cli.compare import add_compare
from mwsp_torch.cli.explain import add_explain
from mwsp_torch.cli.options import check_output, data_options, execution_options, kernel_options

__all__ = ["build_parser", "check_args", "main", "solver_from_args", "summary"]

if TYPE_CHECKING:  # imported at run time by _load()
    import numpy as np

    from mwsp_torch.cache import cached_distances
    from mwsp_torch.datasets import CSL_SKIPS, default_labels, load_dataset
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
    "NESTED_INNER_FOLDS": ("mwsp_torch.evaluation", "NESTED_INNER_FOLDS"),
    "SEED_RANGE": ("mwsp_torch.evaluation", "SEED_RANGE"),
    "check_folds": ("mwsp_torch.evaluation", "check_folds"),
    "check_inner_folds": ("mwsp_torch.evaluation", "check_inner_folds"),
    "check_labels": ("mwsp_torch.evaluation", "check_labels"),
    "nested_protocol": ("mwsp_torch.evaluation", "nested_protocol"),
    "paper_pick": ("mwsp_torch.evaluation", "paper_pick"),
    "reported_std": ("mwsp_torch.evaluation", "reported_std"),
}


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


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="mwsp", description="MWSP graph kernel (Multi-scale Wasserstein Shortest-Path)"
    )
    sub = parser.add_subparsers(dest="command", required=True)
    ev = sub.add_parser("evaluate", help="SVM accuracy under the paper's or the nested protocol")
    ev.set_defaults(func=_evaluate_command)
    data_options(ev)
    kernel_options(ev, many=True)
    execution_options(ev, many=True)
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
    data_options(dist)
    kernel_options(dist, many=False)
    execution_options(dist, many=False)
    dist.add_argument(
        "--out", required=True, help="output path (.npy format, written to exactly this path; the directory must exist)"
    )
    dist.add_argument(
        "--stream",
        action="store_true",
        help="write tiles straight into --out (memory-mapped) so that n x n values are never held in memory; "
        "exact compiled engine only, no cache or checkpoint",
    )
    add_compare(sub)
    add_explain(sub)
    return parser


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
    check_output(parser, "--json", getattr(args, "json", None))
    check_output(parser, "--out", getattr(args, "out", None))
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
