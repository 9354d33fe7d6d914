"""Shared pieces of the paper-reproduction scripts: the paper's numbers, data, cached distances.

Every script here is resumable: distance matrices are cached by ``mwsp_torch.cache``
(under ``$MWSP_CACHE_DIR``) and finished per-dataset results are kept as JSON under
``experiments/results/raw/``.
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
import time
from pathlib import Path

os.environ.setdefault("KEOPS_VERBOSE", "0")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np  # noqa: E402
import scipy.sparse as sp  # noqa: E402
from scipy.sparse.csgraph import shortest_path  # noqa: E402

from mwsp_torch import MWSP  # noqa: E402
from mwsp_torch.cache import cached_distances  # noqa: E402
from mwsp_torch.datasets import TU_DATASETS, default_labels, load_dataset, resolve_cache_dir  # noqa: E402
from mwsp_torch.evaluation import max_folds  # noqa: E402
from mwsp_torch.labels import to_graph_set  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"
RAW = RESULTS / "raw"

#: Paper Table 4, MWSP column: mean, std (percent).
PAPER_ACCURACY = {
    "MUTAG": (89.9, 5.0), "DHFR_MD": (73.5, 5.2), "NCI1": (86.3, 1.1), "NCI109": (86.4, 1.4),
    "PTC_MM": (71.1, 6.5), "PTC_MR": (67.1, 4.0), "PTC_FM": (67.7, 4.1), "PTC_FR": (70.1, 5.3),
    "ENZYMES": (66.7, 4.7), "PROTEINS": (76.6, 3.4), "DD": (80.3, 3.3), "IMDB-BINARY": (75.2, 2.7),
    "REDDIT-BINARY": (90.8, 1.2), "Cuneiform": (79.8, 0.7),
}  # fmt: skip

#: Paper Table 5: MWSP, WSP, MWSP-GFM, SP (means, percent).
PAPER_ABLATION = {
    "MUTAG": (89.9, 89.9, 89.9, 84.4), "DHFR_MD": (73.5, 73.5, 68.7, 68.0), "NCI1": (86.3, 86.3, 86.1, 73.1),
    "NCI109": (86.4, 86.1, 85.9, 72.8), "PTC_MM": (71.1, 68.7, 70.2, 62.2), "PTC_MR": (67.1, 63.1, 65.1, 59.9),
    "PTC_FM": (67.7, 64.8, 65.3, 61.4), "PTC_FR": (70.1, 69.8, 69.3, 66.9), "ENZYMES": (66.7, 66.7, 63.0, 41.1),
    "PROTEINS": (76.6, 76.6, 76.3, 75.8), "DD": (80.3, 80.3, 80.1, 79.3), "IMDB-BINARY": (75.2, 74.4, 74.8, 72.2),
    "REDDIT-BINARY": (90.8, 90.8, 86.6, 84.6), "Cuneiform": (79.8, 78.8, 79.2, 74.4),
}  # fmt: skip

#: Paper Table 6, MWSP column: kernel-matrix seconds at their k=0, d=1 (d=2 here), on a 2-core Xeon Gold 6226R.
PAPER_SECONDS = {
    "MUTAG": 3.15, "DHFR_MD": 19.16, "NCI1": 47 * 60 + 31, "NCI109": 46 * 60 + 56, "PTC_MM": 8.86,
    "PTC_MR": 9.59, "PTC_FM": 9.94, "PTC_FR": 9.96, "ENZYMES": 58.92, "PROTEINS": 300.0,
    "DD": 9 * 3600 + 31 * 60 + 10, "IMDB-BINARY": 8 * 60 + 51, "REDDIT-BINARY": 29 * 3600 + 2 * 60 + 26,
    "Cuneiform": 6.61,
}  # fmt: skip

__all__ = [
    "TU_DATASETS",
    "cached_distances",
    "default_labels",
    "add_run_arguments",
    "check_arguments",
    "hardware",
    "hop_distances",
    "load",
    "outer_folds",
    "load_raw",
    "save_raw",
    "take_subset",
]


def load(name: str):
    """``(graphs, y, labels policy)`` of a TU dataset from ``$MWSP_DATA_ROOT``."""
    graphs, y = load_dataset(name)
    return graphs, y, default_labels(name)


def outer_folds(y) -> int:
    """The authors' 10 outer folds, unless a class is smaller (Cuneiform: 8 graphs a class)."""
    return min(10, max_folds(y))


def hop_distances(graphs, labels: str):
    """Per graph, its interned node labels and all-pairs shortest-path lengths in edges (inf: unreachable)."""
    gs = to_graph_set(graphs, labels=labels)
    adjacency = sp.csr_matrix((np.ones(len(gs.indices)), gs.indices, gs.indptr), shape=(gs.num_nodes,) * 2)
    for g in range(gs.num_graphs):
        lo, hi = gs.ptr[g], gs.ptr[g + 1]
        yield gs.labels[lo:hi], shortest_path(adjacency[lo:hi, lo:hi], unweighted=True, directed=False)


def add_run_arguments(parser, datasets) -> None:
    """The options the grid scripts share: datasets, the (d, k) grid, its time budget, workers."""
    parser.add_argument("--datasets", nargs="+", default=list(datasets))
    parser.add_argument("--d", type=int, nargs="+", default=list(range(7)))
    parser.add_argument("--k", type=int, nargs="+", default=list(range(7)))
    parser.add_argument("--budget", type=float, default=1800.0, help="seconds of distance computation per dataset")
    parser.add_argument("--n-jobs", type=int, default=-1, help="threads for the exact solver (default -1: all cores)")
    parser.add_argument("--eval-jobs", type=int, default=2, help="processes over outer folds of the SVM protocols")


def check_arguments(parser, args, datasets, max_scale: int | None = None) -> None:
    """Refuse, by ``parser.error`` and before any work, what the scripts' options cannot mean:
    a dataset outside ``datasets``, a value given twice, ``d`` or ``k`` below 0 (or above
    ``max_scale``), a budget that is not positive, 0 or < -1 workers, fewer than 1 repeat, a
    negative subset. Without it these failed as tracebacks, some only after every distance
    matrix was computed (``--repeats 0``), or were done twice (``--datasets MUTAG MUTAG``)."""
    names = list(getattr(args, "datasets", []))
    unknown = [name for name in names if name not in datasets]
    if unknown:
        parser.error(f"--datasets: {', '.join(unknown)} not among {', '.join(datasets)}")
    lists = {"--datasets": names, "--d": getattr(args, "d", []), "--k": getattr(args, "k", [])}
    for option, values in lists.items():
        repeated = sorted({str(v) for v in values if list(values).count(v) > 1})
        if repeated:
            parser.error(f"{option}: {', '.join(repeated)} given more than once")
    for option in ("d", "k"):
        for value in getattr(args, option, []):
            if value < 0 or (max_scale is not None and value > max_scale):
                top = f" and <= {max_scale}" if max_scale is not None else ""
                parser.error(f"--{option} {value}: must be >= 0{top}")
    if getattr(args, "budget", 1.0) <= 0 or not np.isfinite(getattr(args, "budget", 1.0)):
        parser.error(f"--budget {args.budget}: must be a number of seconds > 0")
    for option in ("n_jobs", "eval_jobs"):
        value = getattr(args, option, -1)
        if value == 0 or value < -1:
            parser.error(f"--{option.replace('_', '-')} {value}: must be >= 1, or -1 for all cores")
    if getattr(args, "repeats", 1) < 1:
        parser.error(f"--repeats {args.repeats}: must be >= 1")
    if getattr(args, "repetitions_now", 0) < 0:
        parser.error(f"--repetitions-now {args.repetitions_now}: must be >= 1, or 0 for all")
    subset = getattr(args, "subset", 0)
    if isinstance(subset, int) and subset < 0:  # timing.py's --subset is NAME=SIZE pairs
        parser.error(f"--subset {subset}: must be >= 0 (0: all graphs)")


def take_subset(name: str, graphs, y, size: int, seed: int = 0):
    """A stratified random subset of ``size`` graphs, for a dataset whose full W is out of reach here.

    Returns ``(graphs, y, cache name, description)``; all graphs (and ``None``) when
    ``size`` is 0 or not smaller than the dataset.
    """
    if not size or size >= len(graphs):
        return graphs, y, name, None
    from sklearn.model_selection import train_test_split

    keep, _ = train_test_split(np.arange(len(y)), train_size=size, stratify=np.asarray(y), random_state=seed)
    keep = np.sort(keep)
    text = f"stratified random subset of {size} of {len(graphs)} graphs (seed {seed})"
    return [graphs[i] for i in keep], np.asarray(y)[keep], f"{name}-subset{size}", text


def distances(name: str, graphs, labels: str, d: int, k: int, n_jobs: int = -1, progress: bool = True):
    """Cached W for one setting, and the seconds the run that computed it took.

    While a matrix is being computed its finished tiles are kept under the cache
    directory's ``tiles/``, so a killed run started again resumes (REDDIT-BINARY at
    d=3 takes hours here); they are deleted once the matrix is cached.
    """
    import shutil

    start = time.perf_counter()
    tiles = resolve_cache_dir(None) / "tiles" / f"{name}-d{d}-k{k}"
    w, timings = cached_distances(
        MWSP(d=d, k=k, labels=labels, n_jobs=n_jobs, checkpoint=str(tiles), progress=progress), graphs, name
    )
    shutil.rmtree(tiles, ignore_errors=True)
    seconds = timings["features"] + timings["transport"] if timings["cached"] else time.perf_counter() - start
    return w, seconds


def hardware() -> str:
    cpu = "unknown CPU"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"{cpu}, {os.cpu_count()} cores, {platform.python_implementation()} {platform.python_version()}"


def code_version() -> str:
    """The checkout's commit, ``-dirty`` with uncommitted changes outside ``results/``
    (which the experiments themselves write), so a stored time names the code it timed."""
    try:
        run = {"cwd": RESULTS.parent, "capture_output": True, "text": True, "check": True}
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], **run).stdout.strip()
        changed = subprocess.run(
            ["git", "status", "--porcelain", "--", ":(top)", ":(top,exclude)experiments/results"], **run
        ).stdout
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return commit + ("-dirty" if changed.strip() else "")


def load_raw(name: str) -> dict | None:
    path = RAW / f"{name}.json"
    return json.loads(path.read_text()) if path.is_file() else None


def save_raw(name: str, payload: dict) -> None:
    RAW.mkdir(parents=True, exist_ok=True)
    tmp = RAW / f".{name}.json.tmp"
    tmp.write_text(json.dumps(payload, indent=2))
    tmp.replace(RAW / f"{name}.json")
