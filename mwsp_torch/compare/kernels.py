"""The kernel methods of a comparison, each a nested protocol on the split file's outer folds.

- ``mwsp``: MWSP's W over a ``(d, k)`` grid, labels only (the dataset's label policy).
- ``mwsp_attributes``: MWSP with the continuous node attributes (``attributes="node"``,
  ``beta`` in the grid), for datasets whose GNN inputs carry them: the same node
  information as the GNN reads.
- ``wl``: GraKeL's Weisfeiler-Lehman subtree kernel (normalised), ``h`` in the grid, labels only.
- ``sp``: GraKeL's labelled shortest-path kernel (normalised), labels only.

Every method selects ``(setting, lam, C)`` by the same seeded inner 5-fold cross-validation
of each outer training part (train and validation together) through
:func:`mwsp_torch.nested_protocol`: WL and SP enter it as named precomputed kernels
(:class:`~mwsp_torch.evaluation.Precomputed`), so one selection engine scores every kernel.
A method's result is one JSON cell (``DATASET/METHOD/all-folds.json``) with each fold's
accuracy, selection, test indices and predictions; its selection steps are checkpointed, so
a killed run resumes.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from mwsp_torch.cache import cached_distances, graphs_fingerprint
from mwsp_torch.compare.methods import KERNEL_METHODS
from mwsp_torch.datasets import resolve_cache_dir
from mwsp_torch.estimator import MWSP
from mwsp_torch.evaluation import PAPER_CS, PAPER_LAMS, Precomputed, nested_protocol
from mwsp_torch.labels import to_graph_set
from mwsp_torch.splits import OuterSplits

__all__ = [
    "KERNEL_METHODS",
    "KernelGrid",
    "drop_checkpoint",
    "grakel_kernel",
    "kernel_cell_path",
    "kernel_settings",
    "run_kernel_cell",
    "selection_checkpoint",
]

#: Raised whenever a kernel cell's content changes meaning.
CELL_FORMAT = 1


@dataclass(frozen=True)
class KernelGrid:
    """The kernel methods' grids: MWSP's ``(d, k)`` settings (``mwsp``; ``attributes`` for
    ``mwsp_attributes``, default the same) and attribute weights, WL's iterations, and the
    ``lam`` and ``C`` every method searches (the paper's by default)."""

    mwsp: tuple = tuple((d, k) for d in (1, 2, 3) for k in (0, 1, 2))
    attributes: tuple | None = None
    betas: tuple = (0.3, 1.0, 3.0)
    wl_h: tuple = (1, 2, 3, 4, 5)
    lams: tuple = PAPER_LAMS
    Cs: tuple = PAPER_CS

    @property
    def attribute_settings(self) -> tuple:
        """The ``(d, k)`` settings of ``mwsp_attributes``."""
        return self.mwsp if self.attributes is None else self.attributes

    def describe(self, method: str) -> str:
        """What ``method`` searched, in words (a table's ``grid`` column)."""
        cs = f"C in {list(self.Cs)}; inner 5-fold CV on each outer training part"
        settings = " ".join(f"({d},{k})" for d, k in self.mwsp)
        if method == "mwsp":
            return f"(d,k) in {settings} x lam in {list(self.lams)} x {cs}; labels only"
        if method == "mwsp_attributes":
            settings = " ".join(f"({d},{k})" for d, k in self.attribute_settings)
            return f"(d,k) in {settings} x beta in {list(self.betas)} x lam in {list(self.lams)} x {cs}; attributes"
        if method == "wl":
            return f"h in {list(self.wl_h)} x {cs}; GraKeL WL subtree, normalised, labels only"
        return f"{cs}; GraKeL shortest path (labelled), normalised, labels only"


def _grakel_graphs(graphs, labels: str, dense: bool) -> list:
    """The graphs as GraKeL reads them (adjacency dict, or with ``dense`` a 0/1 matrix, and a
    node-label dict), labels as MWSP reads them. GraKeL's Dijkstra loses isolated nodes of an
    adjacency dict, so SP takes matrices and Floyd-Warshall."""
    gs = to_graph_set(graphs, labels=labels)
    out = []
    for g in range(gs.num_graphs):
        lo, hi = int(gs.ptr[g]), int(gs.ptr[g + 1])
        neighbours = {u - lo: [int(v) - lo for v in gs.indices[gs.indptr[u] : gs.indptr[u + 1]]] for u in range(lo, hi)}
        node_labels = {u - lo: int(gs.labels[u]) for u in range(lo, hi)}
        if dense:
            matrix = np.zeros((hi - lo, hi - lo))
            for u, vs in neighbours.items():
                matrix[u, vs] = 1.0
            out.append([matrix, node_labels])
        else:
            out.append([neighbours, node_labels])
    return out


def grakel_kernel(graphs, dataset: str, labels: str, kind: str, h: int = 1, cache_dir=None) -> tuple[np.ndarray, float]:
    """GraKeL's normalised WL subtree kernel (``kind="wl"``, ``h`` iterations) or labelled
    shortest-path kernel (``"sp"``) on all graphs, and the seconds it took (cached on disk by
    the graphs' content). Computed on all graphs at once: neither kernel reads class labels,
    and a pair's value does not depend on the other graphs."""
    from grakel.kernels import ShortestPath, VertexHistogram, WeisfeilerLehman

    key = f"{dataset}-{kind}{h if kind == 'wl' else ''}-{graphs_fingerprint(graphs, labels)[:12]}"
    cache = resolve_cache_dir(cache_dir) / "grakel" / f"{key}.npz"
    if cache.is_file():
        stored = np.load(cache)
        return stored["K"], float(stored["seconds"])
    start = time.perf_counter()
    data = _grakel_graphs(graphs, labels, dense=kind == "sp")
    if kind == "wl":
        kernel = WeisfeilerLehman(n_iter=h, base_graph_kernel=VertexHistogram, normalize=True)
    else:
        kernel = ShortestPath(normalize=True, with_labels=True, algorithm_type="floyd_warshall")
    K = np.nan_to_num(kernel.fit_transform(data).astype(np.float64))
    seconds = time.perf_counter() - start
    cache.parent.mkdir(parents=True, exist_ok=True)
    np.savez(cache, K=K, seconds=seconds)
    return K, seconds


def kernel_settings(method: str, graphs, dataset: str, labels: str, grid: KernelGrid, n_jobs: int = -1, progress=False):
    """``({setting: W or Precomputed}, seconds)``: what ``method`` selects among, and the
    seconds its matrices took (0 where cached)."""
    settings, seconds = {}, 0.0
    if method in ("mwsp", "mwsp_attributes"):
        betas = grid.betas if method == "mwsp_attributes" else (None,)
        for d, k in grid.attribute_settings if method == "mwsp_attributes" else grid.mwsp:
            for beta in betas:
                extra = {} if beta is None else {"attributes": "node", "beta": beta}
                w, timings = cached_distances(
                    MWSP(d=d, k=k, labels=labels, n_jobs=n_jobs, progress=progress, **extra), graphs, dataset
                )
                settings[(d, k) if beta is None else (d, k, beta)] = w
                seconds += 0.0 if timings.get("cached") else timings["features"] + timings["transport"]
    elif method in ("wl", "sp"):
        for h in grid.wl_h if method == "wl" else (0,):
            K, spent = grakel_kernel(graphs, dataset, labels, method, h)
            settings[f"wl-h{h}" if method == "wl" else "sp"] = Precomputed(K)
            seconds += spent
    else:
        raise ValueError(f"method must be one of {KERNEL_METHODS}, got {method!r}")
    return settings, seconds


def _searched(method: str, grid: KernelGrid) -> dict:
    """The part of ``grid`` that ``method`` searches (a cell's request)."""
    names = {"mwsp": ("mwsp", "lams", "Cs"), "mwsp_attributes": ("betas", "lams", "Cs"), "wl": ("wl_h", "Cs")}
    searched = {name: value for name, value in asdict(grid).items() if name in names.get(method, ("Cs",))}
    if method == "mwsp_attributes":
        searched["settings"] = grid.attribute_settings
    return searched


def kernel_cell_path(root, dataset: str, method: str) -> Path:
    """``root/DATASET/METHOD/all-folds.json``: one nested protocol selects every fold at once."""
    return Path(root) / dataset / method / "all-folds.json"


def selection_checkpoint(dataset: str, method: str, splits: OuterSplits) -> Path:
    """The folder of a cell's selection checkpoint (:mod:`mwsp_torch.evaluation.store`), in the
    cache: a selection killed part way resumes from its finished steps; the cell, once written,
    replaces it (:func:`drop_checkpoint`)."""
    return resolve_cache_dir(None) / "selection" / f"compare-{dataset}-{method}-{splits.sha256[:12]}"


def drop_checkpoint(checkpoint: Path) -> None:
    """Remove a selection checkpoint's step files once their cell is on disk."""
    for stale in checkpoint.glob("selection-*.jsonl"):
        stale.unlink()


def run_kernel_cell(
    root,
    method: str,
    graphs,
    y,
    splits: OuterSplits,
    *,
    dataset: str,
    labels: str = "auto",
    grid: KernelGrid | None = None,
    seed: int = 0,
    n_jobs: int = -1,
    progress: bool | None = None,
    force: bool = False,
) -> dict:
    """One kernel method on every outer fold of ``splits``, kept as a JSON cell.

    The nested protocol runs on the split file's folds (``outer_folds``: each fold's train
    and validation together as its training part, its test part held out), its inner folds
    drawn by ``seed``. A cell already there for the same request is returned; one of
    another request (grid, seed, split file) raises unless ``force``.

    Returns:
        The cell: ``request``, ``folds`` (per fold: ``accuracy``, ``selected``,
        ``test_indices``, ``test_predictions``), ``accuracy_mean``, ``accuracy_std`` (over
        folds), ``seconds_kernel``, ``seconds_selection`` and ``computed``.
    """
    grid = grid or KernelGrid()
    request = json.loads(
        json.dumps(
            {
                "format": CELL_FORMAT,
                "dataset": dataset,
                "method": method,
                "labels": labels,
                "grid": _searched(method, grid),
                "seed": int(seed),
                "split_sha256": splits.sha256,
            }
        )
    )
    path = kernel_cell_path(root, dataset, method)
    if path.is_file() and not force:
        cell = json.loads(path.read_text())
        if cell.get("request") != request:
            differ = sorted(
                k for k in set(cell.get("request", {})) | set(request) if cell["request"].get(k) != request.get(k)
            )
            raise ValueError(f"{path}: computed under another request ({', '.join(differ)} differ): pass force=True")
        return {**cell, "computed": False}
    settings, kernel_seconds = kernel_settings(method, graphs, dataset, labels, grid, n_jobs, bool(progress))
    start = time.perf_counter()
    checkpoint = selection_checkpoint(dataset, method, splits)
    result = nested_protocol(
        settings,
        y,
        lams=grid.lams,
        Cs=grid.Cs,
        seeds=(seed,),
        outer_folds=splits.pairs(),
        n_jobs=n_jobs,
        progress=progress,
        checkpoint=checkpoint,
    )
    accuracies = result["fold_accuracies"]
    cell = {
        "request": request,
        "dataset": dataset,
        "method": method,
        "folds": [
            {
                "fold": f,
                "accuracy": accuracies[f],
                "selected": result["selected"][f],
                "test_indices": np.asarray(fold.test).tolist(),
                "test_predictions": result["fold_predictions"][f],
            }
            for f, fold in enumerate(splits.folds)
        ],
        "accuracy_mean": float(np.mean(accuracies)),
        "accuracy_std": float(np.std(accuracies)),
        "majority_rate": result["majority_rate"],
        "grid_text": grid.describe(method),
        "seconds_kernel": kernel_seconds,
        "seconds_selection": time.perf_counter() - start,
        "split_sha256": splits.sha256,
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(cell, indent=1) + "\n")
    tmp.replace(path)
    drop_checkpoint(checkpoint)
    return {**cell, "computed": True}
