"""Graph kernels against GNNs on one dataset, on the same outer folds: :func:`compare`.

Every method reads one split file (Errica et al.'s own where they published one, else the
project's seed-42 file, :mod:`mwsp_torch.splits`), and every row carries its SHA-256:

- **GNNs** (``gin``, ``baseline``): Errica et al.'s protocol (:mod:`mwsp_torch.gnn_protocol`):
  each setting trained on a fold's inner training part and early-stopped on its validation
  part, the best retrained 3 times, tested once.
- **Template pooling** (``gin_pool``, ``gin_pool_tree_ids``, ``gin_tfgw``): GIN whose readout
  is the graph's exact Wasserstein distances to learned templates
  (:class:`mwsp_torch.nn.WassersteinPooling`), on one-hot labels or on MWSP's tree IDs fitted
  on each fold's training graphs, or POT's TFGW distances; trained and selected as GIN, by
  the same code, and tested against GIN.
- **Kernels** (``mwsp``, ``mwsp_attributes``, ``wl``, ``sp``, :mod:`~mwsp_torch.compare.kernels`):
  the nested protocol on the same outer folds, ``(setting, lam, C)`` chosen by inner 5-fold
  cross-validation of the outer training part (train and validation together).
- **Fusion** (``fusion``, :mod:`~mwsp_torch.compare.fusion`): MWSP's kernel fused with a fixed
  GIN's cross-fitted class probabilities, ``(a, d, k, lam, gamma, C)`` chosen by the kernels'
  inner folds, each inner split with probabilities no label it scores has shaped.
- **Tests** (:mod:`~mwsp_torch.compare.stats`): the best kernel against the best GNN, and
  the best method against each other, paired over the folds.

Each (dataset, method[, fold]) is a JSON cell under ``root``, so a killed run resumes; then
the CSV, the markdown table and the figure (:mod:`~mwsp_torch.compare.report`).

Examples:
    >>> from mwsp_torch.compare import compare
    >>> result = compare("MUTAG", data_root="tests/data", root="out/raw", out="out/MUTAG",
    ...                  methods=("mwsp", "wl"))  # doctest: +SKIP
    >>> result["rows"][0]["accuracy_mean"]  # doctest: +SKIP
"""

from __future__ import annotations

import importlib
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from mwsp_torch.compare.methods import (
    DEFAULT_METHODS,
    FUSION_METHODS,
    GNN_METHODS,
    KERNEL_METHODS,
    METHODS,
    POOLING_METHODS,
)

if TYPE_CHECKING:
    from mwsp_torch.compare.fusion import FusionGrid
    from mwsp_torch.compare.kernels import KernelGrid

__all__ = [
    "DEFAULT_METHODS",
    "ERRICA_PUBLISHED",
    "FUSION_METHODS",
    "GNN_METHODS",
    "KERNEL_METHODS",
    "METHODS",
    "POOLING_METHODS",
    "FusionGrid",
    "KernelGrid",
    "compare",
    "comparison_data",
    "paired_test",
]

#: The public names of the submodules, imported on first use (PEP 562), so that the method
#: names (:mod:`~mwsp_torch.compare.methods`) cost no import of numpy, torch or scikit-learn.
_EXPORTS = {
    "ERRICA_PUBLISHED": "mwsp_torch.compare.report",
    "FusionGrid": "mwsp_torch.compare.fusion",
    "KernelGrid": "mwsp_torch.compare.kernels",
    "paired_test": "mwsp_torch.compare.stats",
}


def __getattr__(name: str):
    if name in _EXPORTS:
        value = getattr(importlib.import_module(_EXPORTS[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'mwsp_torch.compare' has no attribute {name!r}")


def comparison_data(dataset: str, data_root=None, splits: str | Path | None = None, seed: int = 42):
    """``(graphs, y, outer splits, label policy, the TU dataset read)`` of a comparison.

    The graphs are those Errica et al.'s split file indexes (PROTEINS: PROTEINS_full, the same
    graphs and labels); ``splits`` a split file of either format, else Errica
    et al.'s file for their datasets (``$MWSP_ERRICA_SPLITS`` or ``../shared/errica_splits``
    beside the data root), else the project's file drawn by ``seed`` under the cache
    directory."""
    import numpy as np

    from mwsp_torch.datasets import default_labels, load_dataset, resolve_cache_dir
    from mwsp_torch.gnn_protocol import ERRICA_DATA, ERRICA_SPLIT_FILES
    from mwsp_torch.splits import ensure_splits, load_errica_splits, read_split_file

    source = ERRICA_DATA.get(dataset, dataset)
    graphs, y = load_dataset(source, root=data_root, log=False)
    if splits is not None:
        outer = read_split_file(splits, y=y)
    elif dataset in ERRICA_SPLIT_FILES and _errica_folder(data_root) is not None:
        outer = load_errica_splits(_errica_folder(data_root) / ERRICA_SPLIT_FILES[dataset], y=y)
    else:
        outer = ensure_splits(resolve_cache_dir(None) / "splits" / f"{dataset}-seed{seed}.json", y, dataset, seed=seed)
    labels = default_labels(dataset)
    return graphs, np.asarray(y), outer, labels, source


def _errica_folder(data_root) -> Path | None:
    import os

    candidates = [os.environ.get("MWSP_ERRICA_SPLITS")]
    root = data_root or os.environ.get("MWSP_DATA_ROOT")
    if root:
        candidates.append(str(Path(root).resolve().parent / "errica_splits"))
    for candidate in candidates:
        if candidate and Path(candidate).is_dir():
            return Path(candidate)
    return None


def compare(
    dataset: str,
    *,
    root: str | Path,
    out: str | Path | None = None,
    methods: Sequence[str] = DEFAULT_METHODS,
    data_root=None,
    splits: str | Path | None = None,
    seed: int = 42,
    profile: str = "cpu",
    grid: KernelGrid | None = None,
    fusion: FusionGrid | None = None,
    folds: Sequence[int] | None = None,
    max_epochs: int | None = None,
    patience: int | None = None,
    n_jobs: int = -1,
    progress: bool | None = None,
    force: bool = False,
) -> dict:
    """Run (or resume) ``methods`` on ``dataset``'s outer folds and write the table.

    Args:
        dataset (str): a TU dataset's name (read from ``data_root`` / ``$MWSP_DATA_ROOT``).
        root: the cells' folder (``DATASET/METHOD/...``).
        out: the report's path without suffix (``.csv``, ``.md``, ``.png``); default
            ``root/DATASET/comparison``.
        methods: any of :data:`METHODS` (default :data:`DEFAULT_METHODS`; ``mwsp_attributes``
            only for datasets with node attributes).
        data_root: the TU datasets' folder.
        splits: a split file (Errica et al.'s format or the project's); default as
            :func:`comparison_data`.
        seed (int): draws the project's split file where there is none (default ``42``).
        profile (str): the GNNs' grid and budget (:data:`mwsp_torch.gnn_protocol.PROFILES`).
        grid (KernelGrid, optional): the kernels' grids (``fusion``'s ``(d, k)``, ``lam``, ``C`` too).
        fusion (FusionGrid, optional): ``fusion``'s ``a``, ``gamma`` and GIN (its budget:
            ``max_epochs`` and ``patience`` where given, else the profile's).
        folds: the GNN folds to compute now (default all; the kernels and fusion always run all).
        max_epochs, patience (int, optional): the GNNs' budget instead of the profile's
            (recorded in their cells).
        n_jobs (int): processes for the kernels' selection and W.
        progress (bool, optional): bars (``None``: on a terminal).
        force (bool): recompute cells of another request.

    Returns:
        dict with ``rows`` (:func:`~mwsp_torch.compare.report.method_row`), ``tests``
        (paired tests) and ``paths`` (the report's files).
    """
    from dataclasses import replace

    import numpy as np
    from tqdm.auto import tqdm

    from mwsp_torch.compare.fusion import FusionGrid, run_fusion_cell
    from mwsp_torch.compare.kernels import KernelGrid, run_kernel_cell
    from mwsp_torch.compare.report import best_pairs, method_row, paired_rows, write_report
    from mwsp_torch.gnn_protocol import TREE_ID_METHODS, pack_dataset, run_gnn_cell

    unknown = [m for m in methods if m not in METHODS]
    if unknown:
        raise ValueError(f"methods must be among {METHODS}, got {unknown}")
    graphs, y, outer, labels, source = comparison_data(dataset, data_root, splits, seed)
    if "mwsp_attributes" in methods and getattr(graphs[0], "node_attr", None) is None:
        raise ValueError(f"{dataset} ({source}) has no node attributes: drop mwsp_attributes from methods")
    grid = grid or KernelGrid()
    wanted = list(range(len(outer.folds))) if folds is None else list(folds)
    packed = None
    started = time.perf_counter()
    for method in methods:
        if method in KERNEL_METHODS:
            run_kernel_cell(root, method, graphs, y, outer, dataset=dataset, labels=labels, grid=grid,
                            n_jobs=n_jobs, progress=progress, force=force)  # fmt: skip
            continue
        if method == "fusion":
            chosen = fusion or FusionGrid()
            if max_epochs is not None or patience is not None:
                chosen = replace(chosen, max_epochs=max_epochs or chosen.max_epochs,
                                 patience=patience or chosen.patience)  # fmt: skip
            run_fusion_cell(root, graphs, y, outer, dataset=dataset, labels=labels, grid=grid, fusion=chosen,
                            profile=profile, n_jobs=n_jobs, progress=progress, force=force)  # fmt: skip
            continue
        if packed is None:
            packed = pack_dataset(graphs, y, dataset)
        # Tree-ID inputs are fitted per fold, on its training graphs, so they take the graphs.
        inputs = graphs if method in TREE_ID_METHODS else packed
        for f in tqdm(
            wanted, desc=f"{dataset} {method}", unit="fold", disable=None if progress is None else not progress
        ):
            run_gnn_cell(root, inputs, y, outer.folds[f], f, method=method, dataset=dataset, profile=profile,
                         split_sha256=outer.sha256, force=force, max_epochs=max_epochs,
                         patience=patience)  # fmt: skip
    rows = [row for m in methods if (row := method_row(root, dataset, m, len(outer.folds))) is not None]
    n_test = float(np.mean([len(f.test) for f in outer.folds]))
    tests = paired_rows(rows, len(y) - n_test, n_test, best_pairs(rows))
    out = Path(out) if out is not None else Path(root) / dataset / "comparison"
    paths = write_report(rows, tests, out)
    return {"rows": rows, "tests": tests, "paths": paths, "seconds": time.perf_counter() - started}
