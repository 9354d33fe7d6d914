"""A scikit-learn grid search over lam and C on MWSP's kernel: how long, against one fold's fit.

    python benchmarks/grid_search.py --root DIR [--label after] [--out benchmarks/results-grid-search.json]

The search is the one a scikit-learn user writes::

    GridSearchCV(make_pipeline(MWSP(), SVC(kernel="precomputed")),
                 {"mwsp__lam": [0.01, 0.1, 1, 10], "svc__C": [1, 10]}, cv=3, n_jobs=...)

W depends on neither lam nor C, so the search needs W once per training fold (and its
transform of the test fold), then the refit on all graphs; with ``n_jobs`` > 1 the
workers' start-up is timed apart, after the search, on fresh workers. The unit is one fold's fit and
transform (``MWSP().fit(train).transform(test)``, the median of three after a first); the search's seconds are given
against it (a search that refits W for every candidate takes about 24 of them: 8 candidates x
3 folds). Each search runs serially and with ``n_jobs=2``, once each. Datasets: MUTAG, and 300
PROTEINS graphs (seed 0).

``--label`` names the run in the results file, which keeps the other labels' rows: run it once
on the code before a change (``PYTHONPATH`` at a copy of it) and once after. Each row records the
load average before it ran, since the figures depend on what else the machine runs.
"""

from __future__ import annotations

import argparse
import json
import os
import pickle
import time
from pathlib import Path

import numpy as np
from sklearn.model_selection import GridSearchCV, StratifiedKFold
from sklearn.pipeline import make_pipeline
from sklearn.svm import SVC

import mwsp_torch
from mwsp_torch import MWSP, load_tudataset

GRID = {"mwsp__lam": [0.01, 0.1, 1.0, 10.0], "svc__C": [1.0, 10.0]}
FOLDS = 3


def _dataset(name: str, root: str) -> tuple[list, np.ndarray]:
    graphs, y = load_tudataset("PROTEINS" if name == "PROTEINS-300" else name, root=root)
    if name == "PROTEINS-300":
        picked = np.random.default_rng(0).permutation(len(graphs))[:300]
        graphs, y = [graphs[i] for i in picked], y[picked]
    return graphs, y


def _fold_fit_seconds(graphs, y) -> float:
    """The median of three fits and transforms of the first fold, after one unmeasured (a first
    call's set-up is not a fold's cost)."""
    train, test = next(StratifiedKFold(FOLDS, shuffle=True, random_state=0).split(np.zeros(len(y)), y))
    train, test = [graphs[i] for i in train], [graphs[i] for i in test]
    seconds = []
    for _ in range(4):
        start = time.perf_counter()
        MWSP().fit(train).transform(test)
        seconds.append(time.perf_counter() - start)
    return float(np.median(seconds[1:]))


def _search_seconds(graphs, y, n_jobs: int) -> tuple[float, dict]:
    search = GridSearchCV(
        make_pipeline(MWSP(), SVC(kernel="precomputed")),
        GRID,
        cv=StratifiedKFold(FOLDS, shuffle=True, random_state=0),
        n_jobs=n_jobs,
    )
    start = time.perf_counter()
    search.fit(graphs, y)
    return time.perf_counter() - start, search.best_params_


def _probe(graphs) -> int:
    """What a search's worker does before its first candidate: unpickle MWSP and graphs, fit."""
    return MWSP().fit(graphs).distances_.shape[0]


def _worker_startup_seconds(graphs, n_jobs: int) -> float:
    """Seconds for ``n_jobs`` fresh joblib workers to start and fit a few graphs each: the
    start-up a search with ``n_jobs`` pays (mostly importing torch, PyG and mwsp_torch there)."""
    from joblib import Parallel, delayed
    from joblib.externals.loky import get_reusable_executor

    get_reusable_executor().shutdown(wait=True)  # no worker left from an earlier search
    start = time.perf_counter()
    Parallel(n_jobs=n_jobs)(delayed(_probe)(graphs[:4]) for _ in range(n_jobs))
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", default=os.environ.get("MWSP_DATA_ROOT"), help="TU data root")
    parser.add_argument("--label", default="after", help="the run's name in the results file")
    parser.add_argument("--datasets", nargs="+", default=["MUTAG", "PROTEINS-300"])
    parser.add_argument("--n-jobs", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--out", default=str(Path(__file__).with_name("results-grid-search.json")))
    args = parser.parse_args()
    out = Path(args.out)
    results = json.loads(out.read_text()) if out.is_file() else {}
    MWSP().fit(_dataset("MUTAG", args.root)[0][:4])  # kernels built and loaded before any timer
    rows = []
    for name in args.datasets:
        graphs, y = _dataset(name, args.root)
        row = {
            "dataset": name,
            "graphs": len(graphs),
            "candidates": 8,
            "folds": FOLDS,
            "pickled_graphs_bytes": len(pickle.dumps(graphs)),
            "load_average_before": os.getloadavg()[0],
            "fold_fit_seconds": _fold_fit_seconds(graphs, y),
        }
        for n_jobs in args.n_jobs:
            row[f"load_average_before_n_jobs_{n_jobs}"] = os.getloadavg()[0]
            seconds, best = _search_seconds(graphs, y, n_jobs)
            row[f"search_seconds_n_jobs_{n_jobs}"] = seconds
            row[f"search_in_fold_fits_n_jobs_{n_jobs}"] = seconds / row["fold_fit_seconds"]
            row[f"best_params_n_jobs_{n_jobs}"] = best
            if n_jobs > 1:
                row[f"worker_startup_seconds_n_jobs_{n_jobs}"] = _worker_startup_seconds(graphs, n_jobs)
        rows.append(row)
        print(json.dumps(row), flush=True)
    results[args.label] = {
        "package": str(Path(mwsp_torch.__file__).parent),
        "cpu_count": os.cpu_count(),
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "rows": rows,
    }
    out.write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
