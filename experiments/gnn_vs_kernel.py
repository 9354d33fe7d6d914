"""GNNs and graph kernels on the same outer folds: MWSP, WL, SP, GIN, a structure-agnostic
baseline, GIN on MWSP's tree IDs, and an SVM on a fusion of MWSP's and a GIN's kernels.

Protocol (Errica et al. 2020 for the neural methods, the nested protocol for the kernels):

- One split file per dataset (``--folds-dir``, ``mwsp_torch.splits``): 10 stratified outer
  folds, seed 42, and a stratified 10 % hold-out inside each training fold. Every method
  reads it; every row carries its SHA-256. Nothing selects on a test fold.
- ``mwsp``: :func:`mwsp_torch.nested_protocol` on those folds (``outer_folds=``): ``(d, k,
  lam, C)`` chosen by a seeded 5-fold CV inside each training fold.
- ``wl`` (WL subtree, ``h`` iterations) and ``sp`` (shortest path, labelled): GraKeL's
  kernels (normalised) with an SVM, ``(h, C)`` / ``C`` chosen by the same seeded 5-fold CV
  inside the training fold.
- ``gin``, ``baseline``, ``gin_tree_ids``: each setting of the grid trained on the training
  fold less its hold-out, early-stopped on the hold-out; the setting with the best hold-out
  accuracy is trained 3 times in all (seeds ``seed``, ``seed + 1``, ``seed + 2``; the
  selection's own run is the first) and its test accuracies averaged, as Errica et al.
- ``kernel_fusion``: an SVM on ``a * exp(-lam W) + (1 - a) * exp(-gamma |e_i - e_j|^2)`` with
  ``e`` the graph embeddings of the fold's first ``gin`` run (trained on the training fold
  only). ``(d, k, a, lam, gamma, C)`` is chosen on the hold-out (an SVM on the rest of the
  training fold), since the GIN has fitted the rest's embeddings; the chosen SVM is then fit
  on the whole training fold.

Each (dataset, method, fold) is kept as a JSON cell under ``--raw-dir`` (``mwsp``: one cell
per dataset, as the nested protocol selects all folds in one run; its W are cached under
``$MWSP_CACHE_DIR``), so a killed run resumes; a cell of another grid, epochs or seed is
refused (``--force`` recomputes). Then ``--out`` (CSV), a markdown table beside it, and a
figure per dataset (``plot_gnn_vs_kernel.py``).

Usage::

    MWSP_DATA_ROOT=DIR python experiments/gnn_vs_kernel.py --datasets MUTAG PTC_MR --methods gin baseline
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import sys
import time
from itertools import product
from pathlib import Path

import numpy as np
import torch
from sklearn.model_selection import StratifiedKFold
from sklearn.svm import SVC
from tqdm.auto import tqdm

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import PAPER_ACCURACY, RESULTS, code_version, hardware  # noqa: E402

from mwsp_torch import nested_protocol  # noqa: E402
from mwsp_torch.cache import cached_distances, graphs_fingerprint  # noqa: E402
from mwsp_torch.datasets import default_labels, load_dataset, resolve_cache_dir  # noqa: E402
from mwsp_torch.evaluation import PAPER_CS, PAPER_LAMS  # noqa: E402
from mwsp_torch.gnn import (  # noqa: E402
    GIN,
    Baseline,
    OneHotLabels,
    TreeIDEmbedding,
    TreeIDVocabulary,
    accuracy,
    graph_embeddings,
    train_classifier,
    tree_id_inputs,
)
from mwsp_torch.kernel import laplacian_kernel  # noqa: E402
from mwsp_torch.labels import to_graph_set  # noqa: E402
from mwsp_torch.splits import OuterSplits, ensure_splits, sha256_of  # noqa: E402

METHODS = ("mwsp", "wl", "sp", "gin", "baseline", "gin_tree_ids", "kernel_fusion")
NEURAL = ("gin", "baseline", "gin_tree_ids")
#: gin_tree_ids: a tree at scale >= 1 held by fewer training graphs than this shares the
#: "unseen" embedding, so that row is trained (on rare trees) before it meets a new tree.
TREE_MIN_GRAPHS = 2
#: Small to large: the order a run takes them in.
DATASETS = ("MUTAG", "PTC_MR", "ENZYMES", "IMDB-BINARY", "PROTEINS", "NCI1", "DD", "REDDIT-BINARY")

#: Errica et al. 2020, Table 3 (mean, std, percent): GIN and the structure-agnostic baseline
#: (degree features on the social sets). MUTAG and PTC_MR are not in their study.
ERRICA = {
    "NCI1": {"gin": (80.0, 1.4), "baseline": (69.8, 2.2)},
    "PROTEINS": {"gin": (73.3, 4.0), "baseline": (75.8, 3.7)},
    "DD": {"gin": (75.3, 2.9), "baseline": (78.4, 4.5)},
    "ENZYMES": {"gin": (59.6, 4.5), "baseline": (65.2, 6.4)},
    "IMDB-BINARY": {"gin": (71.2, 3.9), "baseline": (70.8, 5.0)},
    "REDDIT-BINARY": {"gin": (89.9, 1.9), "baseline": (82.2, 3.0)},
}

#: Where Errica et al.'s node inputs differ from ours (their repository's dataset classes,
#: ``datasets/manager.py``): the gap in a row's note is then not the grid's alone.
ERRICA_INPUTS = {
    "ENZYMES": "their nodes carry the 18 continuous attributes beside the 3 one-hot labels "
    "(21 features), ours the labels only",
}

#: The grids, by profile. Errica et al. searched 32-64 settings with up to 1000 epochs
#: (patience 20-50); two shared CPU cores allow far less, so each dataset gets a profile
#: sized from a measured epoch, and every row's ``grid`` column says what was searched.
PROFILES = {
    # CI: seconds.
    "tiny": {
        "gnn": {"layers": [2], "hidden": [16], "lr": [0.01], "batch": [32], "dropout": [0.0]},
        "baseline": {"hidden": [16], "lr": [0.01], "batch": [32], "dropout": [0.0]},
        "epochs": 2,
        "patience": 2,
        "tree_k": 1,
        "mwsp": [(1, 0)],
        "wl_h": [1, 2],
        "Cs": [1.0, 10.0],
        "lams": [0.1, 1.0],
        "fusion_a": [0.0, 0.5, 1.0],
        "fusion_gamma": [1.0],
    },
    # MUTAG, PTC_MR (0.1-0.2 s an epoch on the loaded 2 cores these runs had).
    "small": {
        "gnn": {"layers": [2, 4], "hidden": [32, 64], "lr": [0.01], "batch": [32], "dropout": [0.5]},
        "baseline": {"hidden": [32, 64], "lr": [0.01], "batch": [32], "dropout": [0.5]},
        "epochs": 40,
        "patience": 10,
        "tree_k": 2,
        "mwsp": [(d, k) for d in (1, 2, 3) for k in (0, 1, 2)],
        "wl_h": [1, 2, 3, 4, 5],
        "Cs": list(PAPER_CS),
        "lams": list(PAPER_LAMS),
        "fusion_a": [0.0, 0.25, 0.5, 0.75, 1.0],
        "fusion_gamma": [0.1, 1.0, 10.0],
    },
    # ENZYMES, IMDB-BINARY.
    "medium": {
        "gnn": {"layers": [3], "hidden": [32, 64], "lr": [0.01], "batch": [32], "dropout": [0.5]},
        "baseline": {"hidden": [32, 64], "lr": [0.01], "batch": [32], "dropout": [0.5]},
        "epochs": 40,
        "patience": 10,
        "tree_k": 2,
        "mwsp": None,
        "wl_h": [1, 2, 3, 4, 5],
        "Cs": list(PAPER_CS),
        "lams": list(PAPER_LAMS),
        "fusion_a": [0.0, 0.25, 0.5, 0.75, 1.0],
        "fusion_gamma": [0.1, 1.0, 10.0],
    },
    # PROTEINS (0.4 s an epoch at batch 32, measured with a lighter load).
    "large": {
        "gnn": {"layers": [3], "hidden": [64], "lr": [0.01], "batch": [64], "dropout": [0.5]},
        "baseline": {"hidden": [64], "lr": [0.01], "batch": [64], "dropout": [0.5]},
        "epochs": 25,
        "patience": 6,
        "tree_k": 1,
        "mwsp": None,
        "wl_h": [1, 3, 5],
        "Cs": [0.1, 1.0, 10.0, 100.0],
        "lams": [0.001, 0.01, 0.1, 1.0],
        "fusion_a": [0.0, 0.5, 1.0],
        "fusion_gamma": [0.1, 1.0, 10.0],
    },
    # NCI1 (1.9 s an epoch at batch 32, with a lighter load): one setting, larger batches, fewer epochs.
    "xlarge": {
        "gnn": {"layers": [3], "hidden": [64], "lr": [0.01], "batch": [128], "dropout": [0.5]},
        "baseline": {"hidden": [64], "lr": [0.01], "batch": [128], "dropout": [0.5]},
        "epochs": 15,
        "patience": 4,
        "tree_k": 1,
        "mwsp": None,
        "wl_h": [2, 4],
        "Cs": [0.1, 1.0, 10.0, 100.0],
        "lams": [0.01, 0.1, 1.0],
        "fusion_a": [0.0, 0.5, 1.0],
        "fusion_gamma": [0.1, 1.0, 10.0],
    },
}
DATASET_PROFILE = {
    "MUTAG": "small",
    "PTC_MR": "medium",
    "ENZYMES": "medium",
    "IMDB-BINARY": "medium",
    "PROTEINS": "large",
    "NCI1": "xlarge",
    "DD": "large",
    "REDDIT-BINARY": "large",
}
#: MWSP's (d, k) grid where the profile leaves it open: modest subsets of ``accuracy.py``'s
#: grids (each W is computed once and cached; the SVM selection is what costs here).
MWSP_GRID = {
    "PTC_MR": [(d, k) for d in (1, 2) for k in (0, 1, 2)],
    "ENZYMES": [(2, 0), (3, 0), (2, 1)],
    "IMDB-BINARY": [(1, 0), (1, 1), (2, 0)],
    "PROTEINS": [(2, 1), (3, 1)],
    "NCI1": [(2, 0)],
    "DD": [(2, 0)],
    "REDDIT-BINARY": [(1, 0), (2, 0)],
}
INNER_FOLDS = 5


def profile_of(name: str, args) -> dict:
    profile = dict(PROFILES[args.profile or DATASET_PROFILE.get(name, "small")])
    if profile["mwsp"] is None:
        profile["mwsp"] = MWSP_GRID[name]
    if args.epochs is not None:
        profile["epochs"] = args.epochs
    if args.patience is not None:
        profile["patience"] = args.patience
    return profile


def settings(grid: dict) -> list[dict]:
    keys = list(grid)
    return [dict(zip(keys, values, strict=True)) for values in product(*(grid[key] for key in keys))]


def grid_text(method: str, profile: dict) -> str:
    """What a row searched, in words: the ``grid`` column."""

    def text(grid):
        return " x ".join(f"{key} in {values}" for key, values in grid.items())

    epochs = (
        f"; up to {profile['epochs']} epochs, patience {profile['patience']}, Adam, early stopping on the 10% hold-out"
    )
    Cs = f"C in {profile['Cs']}"
    if method == "gin":
        return text(profile["gnn"]) + "; sum readout of every layer; one-hot labels" + epochs + "; best retrained x3"
    if method == "gin_tree_ids":
        return (
            text(profile["gnn"]) + f"; tree IDs at scales 0..{profile['tree_k']} (summed embeddings of width "
            f"hidden; unseen trees, and at scales >= 1 those in fewer than {TREE_MIN_GRAPHS} training graphs, "
            "-> one embedding)" + epochs + "; best retrained x3"
        )
    if method == "baseline":
        return text(profile["baseline"]) + "; MLP on the sum of one-hot labels" + epochs + "; best retrained x3"
    settings_text = " ".join(f"({d},{k})" for d, k in profile["mwsp"])
    if method == "mwsp":
        return f"(d,k) in {settings_text} x lam in {profile['lams']} x {Cs}; 5-fold inner CV"
    if method == "wl":
        return f"h in {profile['wl_h']} x {Cs}; GraKeL WL subtree (VertexHistogram), normalised; 5-fold inner CV"
    if method == "sp":
        return f"{Cs}; GraKeL shortest path (labelled), normalised; 5-fold inner CV"
    return (
        f"(d,k) in {settings_text} x a in {profile['fusion_a']} x lam in {profile['lams']} x "
        f"gamma in {profile['fusion_gamma']} / median sq. distance x {Cs}; on the 10% hold-out; "
        "K_gin from the fold's first gin run"
    )


# ---------------------------------------------------------------- cells (resumable)


def cell_path(args, name: str, method: str, fold: int | None) -> Path:
    return Path(args.raw_dir) / name / method / ("all-folds.json" if fold is None else f"fold-{fold}.json")


def read_cell(path: Path, request: dict, force: bool) -> dict | None:
    """A finished cell for the same request, else None; one for another request is refused."""
    if not path.is_file() or force:
        return None
    cell = json.loads(path.read_text())
    if cell["request"] != request:
        raise SystemExit(
            f"{path} holds a run of another request ({cell['request']}); this asks for {request}: add --force to "
            "recompute it"
        )
    return cell


def chosen_folds(splits: OuterSplits, args) -> list:
    """``(index, fold)`` of the folds ``--folds`` names (default: all), so that a run short of
    time can take a few folds of every method before the rest."""
    wanted = range(len(splits.folds)) if args.folds is None else args.folds
    return [(f, splits.folds[f]) for f in wanted if f < len(splits.folds)]


def claim(path: Path, force: bool = False) -> bool:
    """Take the cell for this process (a ``.lock`` file naming its pid), so that two runs of
    the script share the work; False while another live process holds it, or when the cell
    was finished by another run meanwhile (unless ``force``). A lock whose process is gone
    (a killed run), or that names no process (a run killed while writing it), is taken over."""
    lock = path.with_suffix(".lock")
    lock.parent.mkdir(parents=True, exist_ok=True)
    try:
        handle = os.open(lock, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
    except FileExistsError:
        try:
            pid = int(lock.read_text() or 0)
            if pid > 0 and pid != os.getpid():
                os.kill(pid, 0)
                return False  # a live process holds it
        except PermissionError:  # alive, under another user
            return False
        except (ValueError, ProcessLookupError, FileNotFoundError):
            pass
        lock.write_text(str(os.getpid()))
    else:
        os.write(handle, str(os.getpid()).encode())
        os.close(handle)
    if path.is_file() and not force:  # finished by another run between its check and this claim
        release(path)
        return False
    return True


def release(path: Path) -> None:
    path.with_suffix(".lock").unlink(missing_ok=True)


def write_cell(path: Path, cell: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(cell, indent=1))
    tmp.replace(path)
    release(path)


# ---------------------------------------------------------------- SVM selection


def inner_select(kernels: dict, y: np.ndarray, train: np.ndarray, Cs, seed: int) -> tuple:
    """``(key, C)`` with the best mean accuracy of a seeded stratified 5-fold CV on ``train``
    (first best in grid order), as :func:`mwsp_torch.nested_protocol` selects."""
    splits = list(StratifiedKFold(INNER_FOLDS, shuffle=True, random_state=seed).split(train, y[train]))
    best, best_score = None, -1.0
    for key, kernel in kernels.items():
        k_train = kernel[np.ix_(train, train)]
        scores = np.zeros(len(Cs))
        for inner_train, inner_valid in splits:
            kt, kv = k_train[np.ix_(inner_train, inner_train)], k_train[np.ix_(inner_valid, inner_train)]
            for c, C in enumerate(Cs):
                model = SVC(kernel="precomputed", C=C).fit(kt, y[train][inner_train])
                scores[c] += np.mean(model.predict(kv) == y[train][inner_valid])
        for c, C in enumerate(Cs):
            if scores[c] / len(splits) > best_score:
                best, best_score = (key, C), scores[c] / len(splits)
    return best


def svm_accuracy(kernel: np.ndarray, y: np.ndarray, train: np.ndarray, test: np.ndarray, C: float) -> float:
    model = SVC(kernel="precomputed", C=C).fit(kernel[np.ix_(train, train)], y[train])
    return float(100.0 * np.mean(model.predict(kernel[np.ix_(test, train)]) == y[test]))


# ---------------------------------------------------------------- kernels


def grakel_graphs(graphs, labels: str, dense: bool = False) -> list:
    """The graphs as GraKeL input (adjacency dict, or with ``dense`` a 0/1 matrix; node-label
    dict), labels as MWSP reads them. GraKeL's Dijkstra loses isolated nodes of an adjacency
    dict (``KeyError`` on ENZYMES), so SP takes the matrices and Floyd-Warshall."""
    gs = to_graph_set(graphs, labels=labels)
    out = []
    for g in range(gs.num_graphs):
        lo, hi = int(gs.ptr[g]), int(gs.ptr[g + 1])
        neighbours = {u - lo: [int(v) - lo for v in gs.indices[gs.indptr[u] : gs.indptr[u + 1]]] for u in range(lo, hi)}
        if dense:
            matrix = np.zeros((hi - lo, hi - lo))
            for u, vs in neighbours.items():
                matrix[u, vs] = 1.0
            out.append([matrix, {u - lo: int(gs.labels[u]) for u in range(lo, hi)}])
        else:
            out.append([neighbours, {u - lo: int(gs.labels[u]) for u in range(lo, hi)}])
    return out


def grakel_kernel(name: str, graphs, labels: str, kind: str, h: int = 1) -> tuple[np.ndarray, float]:
    """Normalised WL subtree (``h`` iterations) or labelled SP kernel on all graphs, and its seconds.

    Computed on all graphs at once: neither kernel reads class labels, and a pair's value does
    not depend on the other graphs (the label dictionaries only rename)."""
    from grakel.kernels import ShortestPath, VertexHistogram, WeisfeilerLehman

    key = f"{name}-{kind}{h if kind == 'wl' else ''}-{graphs_fingerprint(graphs, labels)[:12]}"
    cache = resolve_cache_dir(None) / "grakel" / f"{key}.npz"
    if cache.is_file():
        stored = np.load(cache)
        return stored["K"], float(stored["seconds"])
    start = time.perf_counter()
    data = grakel_graphs(graphs, labels, dense=kind == "sp")
    if kind == "wl":
        kernel = WeisfeilerLehman(n_iter=h, base_graph_kernel=VertexHistogram, normalize=True)
    else:
        kernel = ShortestPath(normalize=True, with_labels=True, algorithm_type="floyd_warshall")
    K = np.nan_to_num(kernel.fit_transform(data).astype(np.float64))
    seconds = time.perf_counter() - start
    cache.parent.mkdir(parents=True, exist_ok=True)
    np.savez(cache, K=K, seconds=seconds)
    return K, seconds


def run_mwsp(name, graphs, y, splits: OuterSplits, profile, args) -> None:
    request = {
        "grid": [list(s) for s in profile["mwsp"]],
        "lams": profile["lams"],
        "Cs": profile["Cs"],
        "seed": args.seed,
        "split_sha256": splits.sha256,
    }
    path = cell_path(args, name, "mwsp", None)
    if read_cell(path, request, args.force) is not None or not claim(path, args.force):
        return
    ws, kernel_seconds = {}, 0.0
    for d, k in profile["mwsp"]:
        ws[(d, k)], seconds = mwsp_distances(name, graphs, d, k, args)
        kernel_seconds += seconds
    start = time.perf_counter()
    result = nested_protocol(
        ws,
        y,
        lams=profile["lams"],
        Cs=profile["Cs"],
        seeds=(args.seed,),
        outer_folds=splits.pairs(),
        n_jobs=1,
        progress=not args.quiet,
    )
    seconds = time.perf_counter() - start
    write_cell(
        path,
        {
            "request": request,
            "dataset": name,
            "method": "mwsp",
            "fold_accuracies": result["fold_accuracies"],
            "selected": result["selected"],
            "seconds_kernel": kernel_seconds,
            "seconds_selection": seconds,
            "seconds_training": 0.0,
            "device": "cpu",
            "split_sha256": splits.sha256,
            "code": code_version(),
        },
    )


def mwsp_distances(name, graphs, d, k, args) -> tuple[np.ndarray, float]:
    w, timings = cached_distances(
        graphs, name, d, k, labels=default_labels(name), n_jobs=1, device=args.device, progress=not args.quiet
    )
    # The fit's own seconds (a first use's build of the CPU kernels excluded), cached or not.
    return w, timings["features"] + timings["transport"]


def run_grakel(name, method, graphs, y, splits: OuterSplits, profile, args) -> None:
    hs = profile["wl_h"] if method == "wl" else [0]
    kernels, kernel_seconds = None, 0.0
    for f, fold in tqdm(chosen_folds(splits, args), desc=f"{name} {method}", disable=args.quiet):
        request = {"h": hs, "Cs": profile["Cs"], "seed": args.seed, "split_sha256": splits.sha256}
        path = cell_path(args, name, method, f)
        if read_cell(path, request, args.force) is not None or not claim(path, args.force):
            continue
        if kernels is None:
            kernels = {}
            for h in hs:
                kernels[h], seconds = grakel_kernel(name, graphs, default_labels(name), method, h)
                kernel_seconds += seconds
        start = time.perf_counter()
        h, C = inner_select(kernels, y, fold.train, profile["Cs"], args.seed + f)
        selection = time.perf_counter() - start
        start = time.perf_counter()
        acc = svm_accuracy(kernels[h], y, fold.train, fold.test, C)
        write_cell(
            path,
            {
                "request": request,
                "dataset": name,
                "method": method,
                "fold": f,
                "accuracy": acc,
                "selected": {"h": h, "C": C},
                "seconds_kernel": kernel_seconds / len(splits.folds),
                "seconds_selection": selection,
                "seconds_training": time.perf_counter() - start,
                "device": "cpu",
                "split_sha256": splits.sha256,
                "code": code_version(),
            },
        )


# ---------------------------------------------------------------- neural methods


def neural_labels(name: str) -> str:
    """Node labels where the dataset has them; degrees on unlabelled graphs (Errica et al.)."""
    return "auto" if default_labels(name) == "auto" else "degree"


def build(method: str, setting: dict, sizes, num_classes: int):
    if method == "baseline":
        return Baseline(OneHotLabels(sizes), setting["hidden"], num_classes, dropout=setting["dropout"])
    encoder = OneHotLabels(sizes) if method == "gin" else TreeIDEmbedding(sizes, setting["hidden"])
    return GIN(encoder, setting["hidden"], setting["layers"], num_classes, dropout=setting["dropout"])


def train_setting(method, setting, seed, vocabulary, inner, valid, num_classes, profile, args, desc):
    """One model of ``setting`` trained on ``inner``, early-stopped on ``valid``; ``(model, log)``."""
    torch.manual_seed(seed)
    model = build(method, setting, vocabulary.sizes_, num_classes)
    log = train_classifier(
        model,
        inner,
        valid,
        lr=setting["lr"],
        batch_size=setting["batch"],
        max_epochs=profile["epochs"],
        patience=profile["patience"],
        device=args.device,
        seed=seed,
        progress=not args.quiet,
        desc=desc,
    )
    return model, log


def fold_inputs(name, graphs, y, fold, k: int):
    """``(vocabulary, data, inner, valid, test)`` of one outer fold: the vocabulary (one-hot
    width, tree embeddings at scales ``0..k``) comes from the training fold only."""
    vocabulary = TreeIDVocabulary(k=k, labels=neural_labels(name), min_graphs=TREE_MIN_GRAPHS)
    vocabulary.fit([graphs[i] for i in fold.train])
    data = tree_id_inputs(graphs, y, vocabulary)
    parts = (fold.inner_train, fold.validation, fold.test)
    return (vocabulary, data, *([data[i] for i in part] for part in parts))


def save_embeddings(path: Path, model, data, args) -> None:
    """A gin cell's first model's embeddings of every graph, beside the cell (the kernel
    fusion's ``K_gin``)."""
    np.save(path.with_suffix(".embeddings.npy"), graph_embeddings(model, data, args.device).astype(np.float32))


def run_neural(name, method, graphs, y, splits: OuterSplits, profile, args) -> None:
    grid = profile["baseline"] if method == "baseline" else profile["gnn"]
    candidates = settings(grid)
    k = profile["tree_k"] if method == "gin_tree_ids" else 0
    num_classes = int(np.max(y)) + 1
    for f, fold in chosen_folds(splits, args):
        request = {
            "grid": grid,
            "epochs": profile["epochs"],
            "patience": profile["patience"],
            "tree_k": k,
            **({"tree_min_graphs": TREE_MIN_GRAPHS} if method == "gin_tree_ids" else {}),
            "seed": args.seed,
            "split_sha256": splits.sha256,
        }
        path = cell_path(args, name, method, f)
        if read_cell(path, request, args.force) is not None or not claim(path, args.force):
            continue
        start = time.perf_counter()
        vocabulary, data, inner, valid, test = fold_inputs(name, graphs, y, fold, k)

        runs = []
        for s, setting in enumerate(candidates):
            desc = f"{name} {method} f{f} s{s}/{len(candidates)}"
            model, log = train_setting(
                method, setting, args.seed, vocabulary, inner, valid, num_classes, profile, args, desc
            )
            runs.append((log["validation_accuracy"], -log["validation_loss"], s, model, log))
        best = max(runs, key=lambda r: (r[0], r[1], -r[2]))
        selection = time.perf_counter() - start
        start = time.perf_counter()
        setting, models, logs = candidates[best[2]], [best[3]], [best[4]]
        for r in (1, 2):
            desc = f"{name} {method} f{f} retrain {r + 1}/3"
            model, log = train_setting(
                method, setting, args.seed + r, vocabulary, inner, valid, num_classes, profile, args, desc
            )
            models.append(model)
            logs.append(log)
        tests = [accuracy(model, test, args.device) for model in models]
        cell = {
            "request": request,
            "dataset": name,
            "method": method,
            "fold": f,
            "accuracy": float(np.mean(tests)),
            "run_accuracies": tests,
            "selected": setting,
            "validation_accuracy": best[0],
            "epochs": [log["epochs"] for log in logs],
            "best_epochs": [log["best_epoch"] for log in logs],
            "grid_validation": [{"setting": candidates[r[2]], "validation_accuracy": r[0]} for r in runs],
            "seconds_kernel": 0.0,
            "seconds_selection": selection,
            "seconds_training": time.perf_counter() - start,
            "device": str(args.device),
            "split_sha256": splits.sha256,
            "code": code_version(),
        }
        path.parent.mkdir(parents=True, exist_ok=True)
        if method == "gin":  # the kernel fusion's K_gin: the first run's embeddings of every graph
            save_embeddings(path, models[0], data, args)
        write_cell(path, cell)


# ---------------------------------------------------------------- kernel fusion


def restore_gin_embeddings(name, graphs, y, fold, gin_cell: dict, profile, args, gin_path: Path) -> None:
    """Retrain a finished gin cell's first run (its selected setting, seed ``args.seed``: the
    model whose embeddings the fusion reads) and save its embeddings. Its test accuracy must
    be the cell's first run's to 0.5 points, or the cell is not what this code trains."""
    vocabulary, data, inner, valid, test = fold_inputs(name, graphs, y, fold, 0)
    desc = f"{name} gin f{gin_cell['fold']} again, for its embeddings"
    model, _ = train_setting(
        "gin", gin_cell["selected"], args.seed, vocabulary, inner, valid, int(np.max(y)) + 1, profile, args, desc
    )
    again = accuracy(model, test, args.device)
    if abs(again - gin_cell["run_accuracies"][0]) > 0.5:  # percent
        raise SystemExit(
            f"{gin_path}: retrained for its embeddings, its first run scores {again:.2f} % against the "
            f"cell's {gin_cell['run_accuracies'][0]:.2f} %: rerun the gin cell (--force)"
        )
    print(
        f"{name} gin fold {gin_cell['fold']}: retrained for its embeddings, {again:.2f} % "
        f"(the cell's first run: {gin_cell['run_accuracies'][0]:.2f} %)",
        flush=True,
    )
    save_embeddings(gin_path, model, data, args)


def fused_kernel(ws, gin_kernels, candidate, rows, cols) -> np.ndarray:
    """``a * exp(-lam W[d, k]) + (1 - a) * K_gin(gamma)`` on ``rows x cols``."""
    a, key, lam, g = candidate
    out = 0.0
    if a > 0:
        out = a * laplacian_kernel(ws[tuple(key)][np.ix_(rows, cols)], lam)
    if a < 1:
        out = out + (1 - a) * gin_kernels[g][np.ix_(rows, cols)]
    return out


def run_fusion(name, graphs, y, splits: OuterSplits, profile, args) -> None:
    ws = None
    kernel_seconds = 0.0
    for f, fold in tqdm(chosen_folds(splits, args), desc=f"{name} kernel_fusion", disable=args.quiet):
        request = {
            "grid": [list(s) for s in profile["mwsp"]],
            "a": profile["fusion_a"],
            "lams": profile["lams"],
            "gamma": profile["fusion_gamma"],
            "Cs": profile["Cs"],
            "seed": args.seed,
            "split_sha256": splits.sha256,
        }
        path = cell_path(args, name, "kernel_fusion", f)
        if read_cell(path, request, args.force) is not None or not claim(path, args.force):
            continue
        gin_path = cell_path(args, name, "gin", f)
        if not gin_path.is_file():  # K_gin needs the fold's GIN
            run_neural(name, "gin", graphs, y, splits, profile, args)
        if not gin_path.is_file():  # another run is training it: this fold waits for a later pass
            print(f"{name} kernel_fusion fold {f}: waits for its gin cell (another run holds it)", flush=True)
            release(path)
            continue
        gin_cell = json.loads(gin_path.read_text())
        if gin_cell["split_sha256"] != splits.sha256:
            raise SystemExit(f"{gin_path} was trained on other folds than {splits.sha256}")
        if ws is None:
            ws = {}
            for d, k in profile["mwsp"]:
                ws[(d, k)], seconds = mwsp_distances(name, graphs, d, k, args)
                kernel_seconds += seconds
        start = time.perf_counter()
        if not gin_path.with_suffix(".embeddings.npy").is_file():  # not kept in git: a fresh checkout
            restore_gin_embeddings(name, graphs, y, fold, gin_cell, profile, args, gin_path)
        emb = np.load(gin_path.with_suffix(".embeddings.npy")).astype(np.float64)
        sq = np.maximum(np.sum(emb**2, 1)[:, None] + np.sum(emb**2, 1)[None, :] - 2 * emb @ emb.T, 0.0)
        inner, valid = fold.inner_train, fold.validation
        scale = float(np.median(sq[np.ix_(inner, inner)])) or 1.0  # from training graphs only
        gin_kernels = {g: np.exp(-g / scale * sq) for g in profile["fusion_gamma"]}
        candidates = []
        for a in profile["fusion_a"]:
            for key in profile["mwsp"] if a > 0 else [None]:
                for lam in profile["lams"] if a > 0 else [None]:
                    for g in profile["fusion_gamma"] if a < 1 else [None]:
                        candidates.append((a, key, lam, g))

        best, best_score = None, -1.0
        for candidate in candidates:
            kt, kv = (
                fused_kernel(ws, gin_kernels, candidate, inner, inner),
                fused_kernel(ws, gin_kernels, candidate, valid, inner),
            )
            for C in profile["Cs"]:
                score = np.mean(SVC(kernel="precomputed", C=C).fit(kt, y[inner]).predict(kv) == y[valid])
                if score > best_score:
                    best, best_score = (candidate, C), score
        selection = time.perf_counter() - start
        start = time.perf_counter()
        (a, key, lam, g), C = best
        chosen = (a, key, lam, g)
        model = SVC(kernel="precomputed", C=C).fit(
            fused_kernel(ws, gin_kernels, chosen, fold.train, fold.train), y[fold.train]
        )
        acc = float(
            100.0 * np.mean(model.predict(fused_kernel(ws, gin_kernels, chosen, fold.test, fold.train)) == y[fold.test])
        )
        write_cell(
            path,
            {
                "request": request,
                "dataset": name,
                "method": "kernel_fusion",
                "fold": f,
                "accuracy": acc,
                "selected": {"a": a, "d_k": key, "lam": lam, "gamma": g, "C": C},
                "validation_accuracy": 100.0 * best_score,
                "seconds_kernel": kernel_seconds / len(splits.folds)
                + gin_cell["seconds_selection"]
                + gin_cell["seconds_training"],
                "seconds_selection": selection,
                "seconds_training": time.perf_counter() - start,
                "device": str(args.device),
                "split_sha256": splits.sha256,
                "code": code_version(),
            },
        )


# ---------------------------------------------------------------- tables


FIELDS = [
    "dataset",
    "method",
    "accuracy_mean",
    "accuracy_std",
    "folds",
    "seconds_kernel",
    "seconds_selection",
    "seconds_training",
    "seconds_total",
    "device",
    "grid",
    "split_sha256",
    "errica_mean",
    "errica_std",
    "mwsp_paper_mean",
    "mwsp_paper_std",
    "note",
]


def collect(args, names) -> list[dict]:
    """One row per finished (dataset, method): every fold of the split file done."""
    rows = []
    for name in names:
        folds_file = Path(args.folds_dir) / f"{name}.json"
        if not folds_file.is_file():
            continue
        split = json.loads(folds_file.read_text())
        n_folds = len(split["folds"])
        split_sha256 = sha256_of(folds_file)
        args_profile = profile_of(name, args)
        for method in METHODS:
            if method == "mwsp":
                path = cell_path(args, name, method, None)
                if not path.is_file():
                    continue
                cell = json.loads(path.read_text())
                accs = cell["fold_accuracies"]
                cells = [cell]
            else:
                paths = [cell_path(args, name, method, f) for f in range(n_folds)]
                paths = [p for p in paths if p.is_file()]
                if not paths:
                    continue
                cells = [json.loads(p.read_text()) for p in paths]
                accs = [c["accuracy"] for c in cells]
            hashes = {c["split_sha256"] for c in cells}
            if hashes != {split_sha256}:
                raise SystemExit(
                    f"{name} {method}: cells from split files {sorted(hashes)}, not {folds_file} "
                    f"({split_sha256}): rerun them (--force)"
                )
            requests = {json.dumps(c.get("request"), sort_keys=True) for c in cells}
            if len(requests) != 1:
                raise SystemExit(f"{name} {method}: its folds were run with different requests {sorted(requests)}")
            total = {
                key: float(sum(c[key] for c in cells))
                for key in ("seconds_kernel", "seconds_selection", "seconds_training")
            }
            profile = args_profile
            errica = ERRICA.get(name, {}).get(method, (None, None))
            paper = PAPER_ACCURACY.get(name, (None, None)) if method == "mwsp" else (None, None)
            rows.append(
                {
                    "dataset": name,
                    "method": method,
                    "accuracy_mean": float(np.mean(accs)),
                    "accuracy_std": float(np.std(accs)),
                    "folds": len(accs),
                    **total,
                    "seconds_total": sum(total.values()),
                    "device": cells[0]["device"],
                    "grid": grid_text(method, profile),
                    "split_sha256": cells[0]["split_sha256"],
                    "errica_mean": errica[0],
                    "errica_std": errica[1],
                    "mwsp_paper_mean": paper[0],
                    "mwsp_paper_std": paper[1],
                    "note": row_note(accs, n_folds, errica, ERRICA_INPUTS.get(name)),
                }
            )
    return rows


def row_note(accs, n_folds: int, errica, inputs: str | None = None) -> str:
    """Partial rows say so; rows with an Errica et al. figure say how far from it, that their
    grid is not Errica's (32-64 settings, up to 1000 epochs there), and ``inputs``: how their
    node features differ from ours, where they do."""
    notes = [] if len(accs) == n_folds else [f"only {len(accs)} of {n_folds} outer folds finished"]
    if errica[0] is not None:
        notes.append(
            f"{float(np.mean(accs)) - errica[0]:+.1f} points from Errica et al.'s {errica[0]}, on a smaller grid "
            "and fewer epochs than theirs (the grid column), sized to two shared CPU cores"
        )
        if inputs:
            notes.append(inputs)
    return "; ".join(notes)


def write_tables(rows: list[dict], out: Path) -> None:
    out.parent.mkdir(parents=True, exist_ok=True)
    with open(out, "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=FIELDS)
        writer.writeheader()
        for row in rows:
            writer.writerow(
                {k: (f"{v:.4f}" if isinstance(v, float) else ("" if v is None else v)) for k, v in row.items()}
            )
    names = list(dict.fromkeys(r["dataset"] for r in rows))
    lines = [
        "Accuracy % (mean +- std over the outer folds of one split file per dataset); in brackets the "
        "published figure: Errica et al. 2020 for gin and baseline, the MWSP paper (Table 4, its own "
        "protocol) for mwsp.",
        "",
        "| dataset | " + " | ".join(METHODS) + " |",
        "|---|" + "---|" * len(METHODS),
    ]
    for name in names:
        cells = []
        for method in METHODS:
            row = next((r for r in rows if r["dataset"] == name and r["method"] == method), None)
            if row is None:
                cells.append("-")
                continue
            text = f"{row['accuracy_mean']:.1f} +- {row['accuracy_std']:.1f}"
            if "outer folds finished" in row["note"]:
                text += f" [{row['folds']} folds]"
            published = row["errica_mean"] if row["errica_mean"] is not None else row["mwsp_paper_mean"]
            if published is not None:
                std = row["errica_std"] if row["errica_mean"] is not None else row["mwsp_paper_std"]
                text += f" ({published} +- {std})"
            cells.append(text)
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    lines += [
        "",
        "Seconds (kernel or embedding + selection + training, summed over folds) and grids:",
        "",
        "| dataset | method | folds | seconds | device | grid | split SHA-256 | note |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['dataset']} | {r['method']} | {r['folds']} | {r['seconds_total']:.0f} | {r['device']} "
            f"| {r['grid']} | {r['split_sha256'][:12]} | {r['note']} |"
        )
    out.with_suffix(".md").write_text("\n".join(lines) + "\n")


# ---------------------------------------------------------------- main


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--datasets", nargs="+", default=list(DATASETS[:6]))
    parser.add_argument("--methods", nargs="+", default=list(METHODS), choices=METHODS)
    parser.add_argument("--folds-dir", default=str(RESULTS / "folds"), help="one split file NAME.json per dataset")
    parser.add_argument("--raw-dir", default=str(RESULTS / "raw" / "gnn_vs_kernel"), help="per-cell JSON")
    parser.add_argument("--out", default=str(RESULTS / "gnn_vs_kernel.csv"))
    parser.add_argument("--profile", choices=sorted(PROFILES), help="one grid profile for every dataset")
    parser.add_argument("--epochs", type=int, help="at most this many epochs (default: the profile's)")
    parser.add_argument("--patience", type=int, help="early-stopping patience (default: the profile's)")
    parser.add_argument("--folds", type=int, nargs="+", help="run only these outer folds (0-based; not mwsp's)")
    parser.add_argument("--n-splits", type=int, default=10, help="outer folds when a split file is drawn")
    parser.add_argument("--device", default="cpu", help="torch device of the neural methods (cpu, cuda)")
    parser.add_argument("--seed", type=int, default=0, help="seeds training, inner folds (the folds use 42)")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (default 1)")
    parser.add_argument("--force", action="store_true", help="recompute finished cells")
    parser.add_argument("--quiet", action="store_true", help="no progress bars")
    parser.add_argument("--tables-only", action="store_true", help="rewrite the tables from finished cells")
    args = parser.parse_args(argv)
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        parser.error(f"--device {args.device}: torch sees no CUDA device here")
    for option in ("epochs", "patience"):
        value = getattr(args, option)
        if value is not None and value < 1:
            parser.error(f"--{option} {value}: must be >= 1")
    return args


def main(argv=None) -> list[dict]:
    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    os.environ.setdefault("OMP_NUM_THREADS", str(args.threads))
    order = list(dict.fromkeys(args.methods))  # as given: two runs may take the methods in other orders
    for name in [] if args.tables_only else args.datasets:
        graphs, y = load_dataset(name)
        splits = ensure_splits(Path(args.folds_dir) / f"{name}.json", y, name, n_splits=args.n_splits)
        profile = profile_of(name, args)
        for method in order:
            print(f"{name} {method}", flush=True)
            if method == "mwsp":
                run_mwsp(name, graphs, y, splits, profile, args)
            elif method in ("wl", "sp"):
                run_grakel(name, method, graphs, y, splits, profile, args)
            elif method in NEURAL:
                run_neural(name, method, graphs, y, splits, profile, args)
            else:
                run_fusion(name, graphs, y, splits, profile, args)
    rows = collect(args, list(dict.fromkeys(list(DATASETS) + list(args.datasets))))
    write_tables(rows, Path(args.out))
    if not args.quiet:
        print(Path(args.out).with_suffix(".md").read_text())
    print(f"hardware: {hardware()}", flush=True)
    return rows


if __name__ == "__main__":
    main()
