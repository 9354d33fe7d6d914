"""Datasets: the TU benchmarks through PyG's ``TUDataset``, offline, and a generated CSL.

The data root (``--root`` or ``MWSP_DATA_ROOT``) is only read: its
``NAME/raw/`` files are copied into a cache directory (``--cache-dir``,
``MWSP_CACHE_DIR``, default ``~/.cache/mwsp_torch``) keyed by the raw files'
names, sizes and modification times, and ``TUDataset`` writes ``processed/``
there. This also avoids PyG reusing a stale ``processed/`` after raw files change.

Node labels are read from the raw ``NAME_node_labels.txt`` (all its columns;
Cuneiform has two) and attached as ``data.node_label``, so multi-column labels
are not lost in PyG's concatenated one-hot ``x``.
"""

from __future__ import annotations

import hashlib
import os
import shutil
from pathlib import Path

import numpy as np
import torch
from torch_geometric.data import Data

DATA_ROOT_ENV = "MWSP_DATA_ROOT"
CACHE_DIR_ENV = "MWSP_CACHE_DIR"

#: The paper's label policy for datasets without node labels (after Xu et al. 2019).
DEFAULT_LABELS = {"IMDB-BINARY": "degree", "REDDIT-BINARY": "uniform"}

#: The TU datasets of the paper.
TU_DATASETS = (
    "MUTAG",
    "PTC_MR",
    "PTC_MM",
    "PTC_FM",
    "PTC_FR",
    "NCI1",
    "NCI109",
    "ENZYMES",
    "PROTEINS",
    "DD",
    "DHFR_MD",
    "IMDB-BINARY",
    "REDDIT-BINARY",
    "Cuneiform",
)

#: Skip lengths of the circular skip-link graphs (Murphy et al. 2019), one class each.
CSL_SKIPS = (2, 3, 4, 5, 6, 9, 11, 12, 13, 16)


def resolve_root(root: str | os.PathLike | None) -> Path:
    """``root``, else ``$MWSP_DATA_ROOT``; an error if neither is set."""
    value = root if root is not None else os.environ.get(DATA_ROOT_ENV)
    if not value:
        raise ValueError(f"no data root: pass --root DIR (root=...) or set {DATA_ROOT_ENV}")
    return Path(value).expanduser()


def resolve_cache_dir(cache_dir: str | os.PathLike | None) -> Path:
    """``cache_dir``, else ``$MWSP_CACHE_DIR``, else ``~/.cache/mwsp_torch``."""
    value = cache_dir if cache_dir is not None else os.environ.get(CACHE_DIR_ENV)
    return Path(value).expanduser() if value else Path.home() / ".cache" / "mwsp_torch"


def _fingerprint(raw: Path) -> str:
    digest = hashlib.sha1()
    for path in sorted(raw.iterdir()):
        if path.is_file():
            stat = path.stat()
            digest.update(f"{path.name}:{stat.st_size}:{stat.st_mtime_ns};".encode())
    return digest.hexdigest()[:16]


def load_tudataset(
    name: str, root: str | os.PathLike | None = None, cache_dir: str | os.PathLike | None = None
) -> tuple[list[Data], np.ndarray]:
    """Load a TU dataset from ``root/NAME/raw`` without any download.

    Args:
        name (str): dataset name, e.g. ``"MUTAG"``.
        root (str, optional): data root (default ``$MWSP_DATA_ROOT``).
        cache_dir (str, optional): where processed files go (default
            ``$MWSP_CACHE_DIR`` or ``~/.cache/mwsp_torch``).

    Returns:
        ``(graphs, y)``: a list of ``Data`` (with ``node_label`` where the
        dataset has node labels) and the ``[n]`` int64 class labels 0..C-1.

    Raises:
        FileNotFoundError: naming the raw files that were expected.
    """
    from torch_geometric.datasets import TUDataset

    raw = resolve_root(root) / name / "raw"
    required = [raw / f"{name}_A.txt", raw / f"{name}_graph_indicator.txt", raw / f"{name}_graph_labels.txt"]
    missing = [str(p) for p in required if not p.is_file()]
    if missing:
        raise FileNotFoundError(
            f"dataset {name!r} not found and nothing is downloaded; expected the TU raw files "
            f"{', '.join(missing)} (layout ROOT/{name}/raw/{name}_*.txt)"
        )
    cache_root = resolve_cache_dir(cache_dir) / "tudatasets" / _fingerprint(raw)
    target = cache_root / name / "raw"
    if not target.is_dir():
        staging = cache_root / name / f"raw.tmp{os.getpid()}"
        shutil.copytree(raw, staging, dirs_exist_ok=True)
        staging.rename(target)
    dataset = TUDataset(str(cache_root), name)
    graphs = [dataset[i] for i in range(len(dataset))]
    label_file = raw / f"{name}_node_labels.txt"
    if label_file.is_file():
        labels = np.loadtxt(label_file, delimiter=",", dtype=np.int64, ndmin=2)
        sizes = np.array([g.num_nodes for g in graphs])
        if labels.shape[0] != sizes.sum():
            raise ValueError(f"{label_file}: {labels.shape[0]} rows for {sizes.sum()} nodes")
        offsets = np.concatenate([[0], np.cumsum(sizes)])
        for g, data in enumerate(graphs):
            block = labels[offsets[g] : offsets[g + 1]]
            data.node_label = torch.from_numpy(block[:, 0].copy() if block.shape[1] == 1 else block.copy())
    y = dataset.y.numpy().astype(np.int64)
    return graphs, y


def default_labels(name: str) -> str:
    """The paper's label policy for ``name`` (``"auto"`` where it has node labels)."""
    return DEFAULT_LABELS.get(name, "auto")


def make_csl(graphs_per_class: int = 15, num_nodes: int = 41, seed: int = 0) -> tuple[list[Data], np.ndarray]:
    """Circular skip-link graphs: 10 classes WL cannot separate but shortest paths can.

    Each graph is a cycle of ``num_nodes`` nodes plus the chords ``i -- i + R``
    for the class's skip length ``R`` (:data:`CSL_SKIPS`); every graph is
    4-regular, and each copy gets a random node numbering. All nodes carry
    label 0.

    Args:
        graphs_per_class (int): copies per class (default ``15``, as in Murphy et al.).
        num_nodes (int): cycle length (default ``41``).
        seed (int): seed of the node permutations (default ``0``).

    Returns:
        ``(graphs, y)``.
    """
    rng = np.random.default_rng(seed)
    graphs, y = [], []
    ring = np.arange(num_nodes)
    for cls, skip in enumerate(CSL_SKIPS):
        src = np.concatenate([ring, ring])
        dst = np.concatenate([(ring + 1) % num_nodes, (ring + skip) % num_nodes])
        for _ in range(graphs_per_class):
            perm = rng.permutation(num_nodes)
            edge_index = torch.from_numpy(np.stack([perm[src], perm[dst]]))
            graphs.append(
                Data(edge_index=edge_index, num_nodes=num_nodes, node_label=torch.zeros(num_nodes, dtype=torch.long))
            )
            y.append(cls)
    return graphs, np.asarray(y, dtype=np.int64)


def load_dataset(
    name: str, root: str | os.PathLike | None = None, cache_dir: str | os.PathLike | None = None
) -> tuple[list[Data], np.ndarray]:
    """``"CSL"`` (generated, offline) or a TU dataset, as ``(graphs, y)``."""
    if name == "CSL":
        return make_csl()
    return load_tudataset(name, root=root, cache_dir=cache_dir)
