"""Nystroem features against the full kernel under the nested protocol, on the same folds.

For each ``m``: W from every graph to the landmark pool of every fold
(``nystroem_protocol.landmark_pool``, then ``landmark_distances``, timed), then
``nystroem_protocol`` (a LinearSVC on the features, timed). With ``--full``: the full
W (``cache.cached_distances``, computed once and cached) and ``nested_protocol`` on the
same grid, seeds and folds, timed; the pool's columns are then checked against the full
W's (equal to rounding: the full fit solves each distinct measure once, 1e-16 apart).
``--subset N`` draws ``N`` graphs, stratified, seeded, first. ``--multiscale LAM ...``
adds one candidate to the Nystroem grid: those scales' features side by side (the same
distances; ``MWSPNystroem(lam=(...))``). A grid other than the default is part of each
entry's key.

    python benchmarks/nystroem_accuracy.py --dataset NCI1 --m 100 250 500 1000 2000 --full
    python benchmarks/nystroem_accuracy.py --dataset PROTEINS --m 100 250 500 --full
    python benchmarks/nystroem_accuracy.py --dataset DBLP_v1 --m 100 250 500
    python benchmarks/nystroem_accuracy.py --dataset DBLP_v1 --subset 4000 --m 100 250 500 --full
    python benchmarks/nystroem_accuracy.py --dataset NCI1 --m 500 --multiscale 0.01 0.03 0.1 0.3 1
    python benchmarks/nystroem_accuracy.py --table   # the tables of benchmarks/README.md

Writes (or updates, keyed by dataset, subset and m) the ``accuracy`` entries of
``benchmarks/results-nystroem.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import time
from pathlib import Path

import numpy as np
from sklearn.model_selection import train_test_split

from mwsp_torch import MWSP, load_dataset, nested_protocol
from mwsp_torch.cache import cached_distances
from mwsp_torch.evaluation.nystroem import check_lam_grid, landmark_distances, landmark_pool, nystroem_protocol

RESULTS = Path(__file__).with_name("results-nystroem.json")


def _save(key: str, entry: dict) -> None:
    """Read, update and write at once: another benchmark may write its own keys meanwhile."""
    results = json.loads(RESULTS.read_text()) if RESULTS.exists() else {}
    results.setdefault("accuracy", {})[key] = entry
    RESULTS.write_text(json.dumps(results, indent=1) + "\n")


def _summary(result: dict) -> dict:
    keep = ("accuracy_mean", "accuracy_std", "fold_accuracy_std", "fold_accuracies", "selected", "majority_rate")
    return {name: result[name] for name in keep}


def table() -> str:
    """The accuracy entries and the growth rows of the results file as Markdown tables."""
    results = json.loads(RESULTS.read_text())
    lines = [
        "| data | graphs | method | lam grid | m | pool | accuracy % (std: folds) | W pairs | W s | selection s |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for key, r in results.get("accuracy", {}).items():
        method = "full kernel" if "/full" in key else "Nystroem"
        grid = " ".join(f"{lam:g}" for lam in r["protocol"]["lams"])
        if r["protocol"].get("multiscale"):
            grid += " (" + "+".join(f"{lam:g}" for lam in r["protocol"]["multiscale"]) + ")"
        lines.append(
            f"| {key.split('/')[0]} | {r['graphs']} | {method} | {grid} | {r.get('m', '-')} | "
            f"{r.get('pool_size', '-')} | "
            f"{r['accuracy_mean']:.2f} +- {r['fold_accuracy_std']:.2f} | {r['distances_pairs']:,} | "
            f"{r['distances_seconds']:.0f} | {r['selection_seconds']:.0f} |"
        )
    lines += [
        "",
        "| graphs | m | pairs | generate s | transform s | pairs/s | peak RSS GiB |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in results.get("growth", []):
        lines.append(
            f"| {r['size']:,} | {r['m']} | {r['pairs']:,} | {r['generate_s']:.0f} | {r['transform_s']:.0f} | "
            f"{r['pairs_per_s']:,} | {r['peak_rss_gib']:.2f} |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--table", action="store_true", help="print the results file's tables and stop")
    parser.add_argument("--dataset", default="NCI1")
    parser.add_argument("--d", type=int, default=2)
    parser.add_argument("--k", type=int, default=0)
    parser.add_argument("--m", type=int, nargs="*", default=[100, 250, 500, 1000, 2000])
    parser.add_argument("--lams", type=float, nargs="+", default=[0.01, 0.1])
    parser.add_argument("--Cs", type=float, nargs="+", default=[1.0, 10.0, 100.0])
    parser.add_argument(
        "--multiscale", type=float, nargs="+", default=[], help="one more Nystroem candidate: these scales side by side"
    )
    parser.add_argument("--seeds", type=int, nargs="+", default=[0])
    parser.add_argument("--n-outer", type=int, default=10)
    parser.add_argument("--n-inner", type=int, default=3)
    parser.add_argument("--subset", type=int, default=None, help="stratified random subset of this many graphs")
    parser.add_argument("--full", action="store_true", help="also the full kernel's nested protocol")
    parser.add_argument("--n-jobs", type=int, default=-1)
    args = parser.parse_args()
    try:  # before hours of distances
        check_lam_grid([*args.lams, *([tuple(args.multiscale)] if args.multiscale else [])])
    except ValueError as error:
        parser.error(f"--lams/--multiscale: {error}")
    if args.table:
        print(table())
        return

    graphs, y = load_dataset(args.dataset)
    y = np.asarray(y)
    name = args.dataset
    if args.subset is not None:
        keep, _ = train_test_split(np.arange(len(y)), train_size=args.subset, stratify=y, random_state=0)
        keep = np.sort(keep)
        graphs, y = [graphs[int(i)] for i in keep], y[keep]
        name = f"{args.dataset}-subset{args.subset}"
    key = (args.d, args.k)
    common = {"lams": args.lams, "Cs": args.Cs, "seeds": args.seeds, "n_outer": args.n_outer, "n_inner": args.n_inner}
    folds = "StratifiedKFold(shuffle=True, random_state=seed), outer and inner"
    grid = "" if args.lams == [0.01, 0.1] else "/lams=" + ",".join(f"{lam:g}" for lam in args.lams)
    nystroem_grid = grid + ("/multiscale=" + ",".join(f"{lam:g}" for lam in args.multiscale) if args.multiscale else "")
    header = {
        "dataset": args.dataset,
        "graphs": len(y),
        "subset": args.subset,
        "setting": list(key),
        "protocol": {**common, "folds": folds},
        "machine": f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores",
    }
    full_w = None
    if args.full:
        start = time.perf_counter()
        full_w, timings = cached_distances(MWSP(d=args.d, k=args.k, n_jobs=args.n_jobs), graphs, name)
        cached = time.perf_counter() - start
        start = time.perf_counter()
        full = nested_protocol({key: full_w}, y, n_jobs=args.n_jobs, **common)
        entry = {
            **header,
            "method": "full kernel, nested_protocol (SVC precomputed)",
            **_summary(full),
            "distances_seconds": timings.get("transport", cached) if timings else cached,
            "distances_pairs": len(y) * (len(y) - 1) // 2,
            "selection_seconds": time.perf_counter() - start,
        }
        print(f"{name} full: {entry['accuracy_mean']:.2f} (selection {entry['selection_seconds']:.0f} s)", flush=True)
        _save(f"{name}/full{grid}", entry)
    for m in args.m:
        pool = landmark_pool(y, m, args.seeds, args.n_outer, args.n_inner)
        start = time.perf_counter()
        w_pool = landmark_distances(graphs, pool, d=args.d, k=args.k, n_jobs=args.n_jobs)
        distance_s = time.perf_counter() - start
        gap = None if full_w is None else float(np.abs(w_pool - full_w[:, pool]).max())
        if gap is not None and gap > 1e-12 * float(full_w.max()):
            raise AssertionError(f"{name}: the pool's W differs from the full W's columns by {gap}")
        start = time.perf_counter()
        lams = [*args.lams, *([tuple(args.multiscale)] if args.multiscale else [])]
        result = nystroem_protocol({key: w_pool}, y, m, pool=pool, n_jobs=args.n_jobs, **{**common, "lams": lams})
        entry = {
            **header,
            "protocol": {**common, "multiscale": args.multiscale, "folds": folds},
            "method": "Nystroem, nystroem_protocol (LinearSVC)",
            "m": m,
            **_summary(result),
            "pool_size": len(pool),
            "distances_pairs": int(len(y) * len(pool)),
            "distances_seconds": distance_s,
            "max_abs_difference_to_full_columns": gap,
            "selection_seconds": time.perf_counter() - start,
            "dropped_eigenvalues": result["dropped_eigenvalues"],
            "svm_fits": result["svm_fits"],
            "svm_not_converged": result["svm_not_converged"],
            "peak_rss_gib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20, 3),
        }
        print(
            f"{name} m={m}: {entry['accuracy_mean']:.2f} (pool {len(pool)}, distances {distance_s:.0f} s, "
            f"selection {entry['selection_seconds']:.0f} s)",
            flush=True,
        )
        _save(f"{name}/m={m}{nystroem_grid}", entry)


if __name__ == "__main__":
    main()
