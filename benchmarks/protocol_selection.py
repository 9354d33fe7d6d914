"""The nested protocol's SVM selection against the distances it selects from, in one run.

Computes W for every (d, k) of the grid (timed, no cache), then runs ``nested_protocol`` over
them with each ``--svm-solver`` and each ``--n-jobs`` asked for (timed). Runs of one solver must
select the same settings and score the same accuracies (else it exits with an error); another
solver's runs say how many folds selected otherwise and the accuracy's difference:

    python benchmarks/protocol_selection.py --dataset MUTAG --d 1 2 3 --k 0 1 2 --repeats 3 --n-jobs -1 \
        --svm-solver libsvm path

Writes (or updates, keyed by dataset, grid and repetitions) ``benchmarks/results-protocol.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time
from pathlib import Path

from mwsp_torch import MWSP, load_dataset, nested_protocol
from mwsp_torch.datasets import default_labels

RESULTS = Path(__file__).with_name("results-protocol.json")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--dataset", default="MUTAG")
    parser.add_argument("--root", default=None, help="data root (default $MWSP_DATA_ROOT)")
    parser.add_argument("--d", type=int, nargs="+", default=[1, 2, 3])
    parser.add_argument("--k", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--n-jobs", type=int, nargs="+", default=[1, -1])
    parser.add_argument("--svm-solver", nargs="+", default=["libsvm"], choices=["libsvm", "path"])
    args = parser.parse_args()

    graphs, y = load_dataset(args.dataset, root=args.root)
    labels = default_labels(args.dataset)
    start = time.perf_counter()
    distances = {(d, k): MWSP(d=d, k=k, labels=labels).fit(graphs).distances_ for d in args.d for k in args.k}
    distance_seconds = time.perf_counter() - start
    print(f"{args.dataset}: {len(graphs)} graphs, {len(distances)} settings, W in {distance_seconds:.1f} s", flush=True)
    runs, firsts = [], {}
    for solver in args.svm_solver:
        for n_jobs in args.n_jobs:
            start = time.perf_counter()
            result = nested_protocol(
                distances, y, seeds=tuple(range(args.repeats)), n_jobs=n_jobs, progress=False, svm_solver=solver
            )
            seconds = time.perf_counter() - start
            first = firsts.setdefault(solver, result)
            same = result["selected"] == first["selected"] and result["fold_accuracies"] == first["fold_accuracies"]
            reference = firsts[args.svm_solver[0]]
            runs.append(
                {
                    "svm_solver": solver,
                    "n_jobs": n_jobs,
                    "seconds": round(seconds, 2),
                    "selection_over_distances": round(seconds / distance_seconds, 2),
                    "accuracy_mean": round(result["accuracy_mean"], 2),
                    "same_selections_as_first": same,
                    f"folds_selecting_otherwise_than_{args.svm_solver[0]}": sum(
                        a != b for a, b in zip(result["selected"], reference["selected"], strict=True)
                    ),
                    f"accuracy_minus_{args.svm_solver[0]}": round(
                        result["accuracy_mean"] - reference["accuracy_mean"], 2
                    ),
                }
            )
            print(json.dumps(runs[-1]), flush=True)
            if not same:
                raise SystemExit(f"{solver} with n_jobs={n_jobs} selected differently from n_jobs={args.n_jobs[0]}")
    row = {
        "dataset": args.dataset,
        "graphs": len(graphs),
        "d": args.d,
        "k": args.k,
        "repeats": args.repeats,
        "distance_seconds": round(distance_seconds, 2),
        "selection": runs,
        "machine": f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores",
        "command": f"python benchmarks/protocol_selection.py --dataset {args.dataset} "
        f"--d {' '.join(map(str, args.d))} --k {' '.join(map(str, args.k))} --repeats {args.repeats} "
        f"--n-jobs {' '.join(map(str, args.n_jobs))} --svm-solver {' '.join(args.svm_solver)}",
    }
    rows = json.loads(RESULTS.read_text()) if RESULTS.exists() else []
    key = (row["dataset"], row["d"], row["k"], row["repeats"])
    rows = [r for r in rows if (r["dataset"], r["d"], r["k"], r["repeats"]) != key] + [row]
    RESULTS.write_text(json.dumps(rows, indent=2) + "\n")


if __name__ == "__main__":
    main()
