"""Datasets: the TU benchmarks through PyG's ``TUDataset``, offline, and a generated CSL.

The data root (``--root`` or ``MWSP_DATA_ROOT``) is only read: its
``NAME/raw/`` files are copied into a cache directory (``--cache-dir``,
``MWSP_CACHE_DIR``, default ``~/.cache/mwsp_torch``) keyed by the raw files'
names and contents, and ``TUDataset`` writes ``processed/`` there, under a file lock
(parallel first runs share one copy). The copy takes the files' contents, not their
modes, so a read-only root works for any user. Keying by content also keeps PyG from
reusing a stale ``processed/`` after raw files change.

Node labels are read from the raw ``NAME_node_labels.txt`` (all its columns;
Cuneiform has two) and attached as ``data.node_label``, so multi-column labels
are not lost in PyG's concatenated one-hot ``x``. Likewise ``NAME_edge_labels.txt`` becomes
``data.edge_label`` (one per column of ``edge_index``) and ``NAME_node_attributes.txt``
``data.node_attr`` (float64, ``[num_nodes, width]``), which ``MWSP(edge_labels=True)`` and
``MWSP(attributes=...)`` read.

The graph indicator, graph labels and node labels are checked before PyG reads
them (integers, one row per node or per graph, graphs in order): PyG's own
errors name neither the file nor the line, and some faults it does not see at
all (extra graph labels, nodes out of graph order).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import warnings
from pathlib import Path

import numpy as np
import torch
from torch_geometric.data import Data

from mwsp_torch.graphs import compact_graphs

__all__ = [
    "CACHE_DIR_ENV",
    "CSL_SKIPS",
    "DATA_ROOT_ENV",
    "DEFAULT_LABELS",
    "ONE_HOT_LIMIT_BYTES",
    "TU_DATASETS",
    "default_labels",
    "load_dataset",
    "load_tudataset",
    "make_csl",
    "node_label_names",
    "resolve_cache_dir",
    "resolve_root",
]

try:
    import fcntl
except ImportError:  # not POSIX: no lock, parallel first runs may race
    fcntl = None

DATA_ROOT_ENV = "MWSP_DATA_ROOT"
CACHE_DIR_ENV = "MWSP_CACHE_DIR"

#: The paper's label policy for datasets without node labels (after Xu et al. 2019).
DEFAULT_LABELS = {"IMDB-BINARY": "degree", "REDDIT-BINARY": "uniform", "SYNTHETICnew": "degree", "Synthie": "degree"}

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
#: The largest one-hot ``x`` (bytes, float32) that PyG's ``TUDataset`` is let build from
#: node labels; past it (DBLP_v1: 41,325 labels on 203,954 nodes, 31 GiB) the graphs carry
#: ``node_label`` only, which is what MWSP reads.
ONE_HOT_LIMIT_BYTES = 1 << 30

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
    """SHA-1 of the raw files' names and contents (sizes and times would miss an edit that
    keeps both, as ``cp -p`` or ``rsync -t`` leave them): 0.05 s for REDDIT-BINARY's 32 MB."""
    digest = hashlib.sha1()
    for path in sorted(raw.iterdir()):
        if path.is_file():
            digest.update(f"{path.name}:{path.stat().st_size};".encode())
            with open(path, "rb") as f:
                for block in iter(lambda: f.read(1 << 20), b""):
                    digest.update(block)
    return digest.hexdigest()[:16]


@contextlib.contextmanager
def _locked(folder: Path):
    """An exclusive lock on ``folder`` (a file in it) while the copy is made and PyG
    writes ``processed/``: parallel first runs would otherwise race on both."""
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / ".lock", "a") as handle:
        if fcntl is not None:
            fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            if fcntl is not None:
                fcntl.flock(handle, fcntl.LOCK_UN)


def _read_int_rows(path: Path) -> np.ndarray:
    """The rows of a TU raw file of integers, ``[rows, columns]`` int64.

    Read as PyG's ``TUDataset`` reads it (each line split at commas, ``int()`` of each
    value), but checked here: PyG's ``invalid literal for int()`` names neither the file
    nor the line.

    Raises:
        ValueError: naming the file and the line, for a line that is not comma-separated
            integers (a blank line included), a value beyond int64, or a line with another
            number of values than the first.
    """
    try:
        lines = path.read_text().split("\n")
    except UnicodeDecodeError as err:
        raise ValueError(f"{path}: not a text file ({err})") from None
    if lines[-1] == "":
        lines.pop()  # after the final newline
    if not lines:
        return np.empty((0, 1), dtype=np.int64)
    try:  # numpy's parser is 20x faster than int() a value (REDDIT-BINARY: 859,254 lines)
        rows = np.loadtxt(lines, delimiter=",", dtype=np.int64, ndmin=2, comments=None)
        if rows.shape[0] == len(lines):  # else it skipped blank lines, which int() refuses
            return rows
    except ValueError:
        pass
    parsed = []
    for number, line in enumerate(lines, 1):
        try:
            row = [int(value) for value in line.split(",")]
        except ValueError:
            raise ValueError(f"{path}, line {number}: expected comma-separated integers, got {line!r}") from None
        for value in row:
            if not -(2**63) <= value < 2**63:
                raise ValueError(f"{path}, line {number}: {value} does not fit in int64")
        if parsed and len(row) != len(parsed[0]):
            raise ValueError(f"{path}, line {number}: {len(row)} values, but line 1 has {len(parsed[0])}")
        parsed.append(row)
    return np.array(parsed, dtype=np.int64)


def _checked_raw_files(raw: Path, name: str) -> np.ndarray | None:
    """Check ``NAME_graph_indicator.txt``, ``NAME_graph_labels.txt`` and (if present)
    ``NAME_node_labels.txt`` against each other, before PyG reads them; return the node
    labels ``[num_nodes, columns]``, or None without that file.

    PyG slices its arrays by the graph indicator without checking them: a node labels file
    a row short fails there with ``start (6) + length (2) exceeds dimension size (7)``,
    extra graph labels are kept (``y`` longer than the dataset), and a graph ID out of order
    mixes nodes of different graphs.

    Raises:
        ValueError: naming the file, for a line that is not integers (and the line), a graph
            ID below 1 or out of order (and the line), or a row count that differs from the
            number of nodes (node labels) or of graphs (graph labels), with both counts.
    """
    indicator_file = raw / f"{name}_graph_indicator.txt"
    graph_ids = _read_int_rows(indicator_file)
    if graph_ids.shape[0] == 0:
        raise ValueError(f"{indicator_file}: no nodes (the file is empty)")
    if graph_ids.shape[1] != 1:
        raise ValueError(f"{indicator_file}: expected one graph ID a line, got {graph_ids.shape[1]} values a line")
    graph_ids = graph_ids[:, 0]
    if graph_ids.min() < 1:
        line = int(np.argmax(graph_ids < 1))
        raise ValueError(f"{indicator_file}, line {line + 1}: graph ID {graph_ids[line]}; graph IDs start at 1")
    back = np.diff(graph_ids) < 0
    if back.any():
        line = int(np.argmax(back)) + 1
        raise ValueError(
            f"{indicator_file}, line {line + 1}: graph ID {graph_ids[line]} after {graph_ids[line - 1]}; "
            "nodes must be listed graph by graph, in the order of their graph IDs"
        )
    num_nodes, num_graphs = len(graph_ids), int(graph_ids[-1])
    graph_label_file = raw / f"{name}_graph_labels.txt"
    num_graph_labels = _read_int_rows(graph_label_file).shape[0]
    if num_graph_labels != num_graphs:
        raise ValueError(
            f"{graph_label_file}: {num_graph_labels} rows for {num_graphs} graphs "
            f"(the graph IDs of {indicator_file.name} go up to {num_graphs})"
        )
    label_file = raw / f"{name}_node_labels.txt"
    if not label_file.is_file():
        return None
    labels = _read_int_rows(label_file)
    if labels.shape[0] != num_nodes:
        raise ValueError(
            f"{label_file}: {labels.shape[0]} rows for {num_nodes} nodes ({indicator_file.name} has {num_nodes} lines)"
        )
    return labels


def _end_lines(raw: Path) -> None:
    """Give every ``.txt`` file in ``raw`` (a copy) a final newline: PyG's reader drops a last
    line that has none, which :func:`_read_int_rows` counts."""
    for path in raw.glob("*.txt"):
        with open(path, "rb+") as f:
            if f.seek(0, os.SEEK_END) == 0:
                continue
            f.seek(-1, os.SEEK_END)
            if f.read(1) != b"\n":
                f.write(b"\n")


def load_tudataset(
    name: str,
    root: str | os.PathLike | None = None,
    cache_dir: str | os.PathLike | None = None,
    log: bool = True,
) -> tuple[list[Data], np.ndarray]:
    """Load a TU dataset from ``root/NAME/raw`` without any download.

    Args:
        name (str): dataset name, e.g. ``"MUTAG"``.
        root (str, optional): data root (default ``$MWSP_DATA_ROOT``).
        cache_dir (str, optional): where processed files go (default
            ``$MWSP_CACHE_DIR`` or ``~/.cache/mwsp_torch``).
        log (bool): let PyG print ``Processing... Done!`` on stderr when it processes the raw
            files, a dataset's first load (default ``True``, as PyG; ``mwsp --quiet`` turns it off).

    Returns:
        ``(graphs, y)``: a list of ``Data`` (with ``node_label``, ``edge_label`` and
        ``node_attr`` where the dataset has node labels, edge labels and node attributes)
        and the ``[n]`` int64 class labels 0..C-1.

    Raises:
        FileNotFoundError: naming the raw files that were expected.
        ValueError: naming the raw file (and the line), for graph indicator, graph
            labels or node labels that are not integers, graph IDs out of order, or
            row counts that do not match (see :func:`_checked_raw_files`).
    """
    from torch_geometric.datasets import TUDataset

    data_root = resolve_root(root)
    raw = data_root / name / "raw"
    required = [raw / f"{name}_A.txt", raw / f"{name}_graph_indicator.txt", raw / f"{name}_graph_labels.txt"]
    missing = [str(p) for p in required if not p.is_file()]
    if missing:
        meant = _root_above(data_root, name)
        if meant is not None:
            raise FileNotFoundError(
                f"the data root {str(data_root)!r} is inside the dataset's own folder: the root (root=, --root or "
                f"${DATA_ROOT_ENV}) should be the folder that holds {name}/raw/; did you mean {str(meant)!r}?"
            )
        try:  # names are case-sensitive (files are NAME_*.txt): point at a near miss
            near = sorted(p.name for p in data_root.iterdir() if p.is_dir() and p.name.lower() == name.lower())
        except OSError:
            near = []
        hint = f"; did you mean {' or '.join(map(repr, near))}?" if near and name not in near else ""
        raise FileNotFoundError(
            f"dataset {name!r} not found and nothing is downloaded; expected the TU raw files "
            f"{', '.join(missing)} (layout ROOT/{name}/raw/{name}_*.txt){hint}"
        )
    labels = _checked_raw_files(raw, name)
    one_hot = 0 if labels is None else 4 * len(labels) * int((labels.max(axis=0) - labels.min(axis=0) + 1).sum())
    skipped = f"{name}_node_labels.txt" if one_hot > ONE_HOT_LIMIT_BYTES else None
    if skipped is not None:
        warnings.warn(
            f"{name}'s node labels would make PyG's one-hot x {one_hot / 2**30:.1f} GiB: its graphs carry the "
            "labels as node_label only (MWSP reads them; a GNN needs an embedding of node_label instead of x)",
            stacklevel=2,
        )
    cache_root = resolve_cache_dir(cache_dir) / "tudatasets" / _fingerprint(raw)
    target = cache_root / name / "raw"
    with _locked(cache_root):
        if not target.is_dir():
            staging = cache_root / name / "raw.tmp"  # a killed copy's leftovers go first
            shutil.rmtree(staging, ignore_errors=True)
            staging.mkdir(parents=True)
            for path in raw.iterdir():
                # contents only: a read-only root's modes would make the copy unwritable
                if path.is_file() and path.name != skipped:
                    shutil.copyfile(path, staging / path.name)
            _end_lines(staging)
            staging.rename(target)
        dataset = (TUDataset if log else _quiet_tudataset())(str(cache_root), name)
    # A graph sliced from a PyG dataset shares the dataset's storage, and pickles all of it: a
    # clone holds its own tensors only, so the graphs travel to a search's worker processes at
    # their own size (benchmarks/README.md).
    graphs = compact_graphs(dataset)
    sizes = np.array([g.num_nodes for g in graphs])
    offsets = np.concatenate([[0], np.cumsum(sizes)])
    if labels is not None:  # as many rows as nodes: checked above
        for g, data in enumerate(graphs):
            block = labels[offsets[g] : offsets[g + 1]]
            data.node_label = torch.from_numpy(block[:, 0].copy() if block.shape[1] == 1 else block.copy())
    attributes = _read_node_attributes(raw, name, int(offsets[-1]))
    if attributes is not None:
        for g, data in enumerate(graphs):
            data.node_attr = torch.from_numpy(attributes[offsets[g] : offsets[g + 1]].copy())
    _attach_edge_labels(raw, name, graphs, offsets)
    y = dataset.y.numpy().astype(np.int64)
    return graphs, y


def _quiet_tudataset():
    from torch_geometric.datasets import TUDataset

    class QuietTUDataset(TUDataset):
        """PyG's ``TUDataset`` without its ``Processing... Done!`` (which ``log`` controls in PyG's
        ``Dataset``, and ``TUDataset`` does not pass on)."""

        def _process(self) -> None:
            self.log = False
            super()._process()

    return QuietTUDataset


def _read_node_attributes(raw: Path, name: str, num_nodes: int) -> np.ndarray | None:
    """``NAME_node_attributes.txt`` as ``[num_nodes, width]`` float64, or None without the file.

    Raises:
        ValueError: naming the file, for values that are not numbers or a row count other
            than the number of nodes.
    """
    path = raw / f"{name}_node_attributes.txt"
    if not path.is_file():
        return None
    try:
        values = np.loadtxt(path, delimiter=",", dtype=np.float64, ndmin=2, comments=None)
    except ValueError as err:
        raise ValueError(f"{path}: expected comma-separated numbers ({err})") from None
    if values.shape[0] != num_nodes:
        raise ValueError(f"{path}: {values.shape[0]} rows for {num_nodes} nodes")
    return values


def _attach_edge_labels(raw: Path, name: str, graphs: list, offsets: np.ndarray) -> None:
    """``data.edge_label`` from ``NAME_edge_labels.txt``, one row per column of each graph's
    ``edge_index``. PyG sorts and coalesces the edges of ``NAME_A.txt`` (so its rows no longer
    line up with the file), and its ``edge_attr`` puts edge attributes before the one-hot
    labels (DHFR_MD): each edge's label is looked up by its two end nodes instead. An edge
    the file lists twice with different labels is left to the reader of the labels, which
    names the graph (:func:`mwsp_torch.labels.edge_label_reader`).

    Raises:
        ValueError: naming the file, for a row count other than ``NAME_A.txt``'s.
    """
    path = raw / f"{name}_edge_labels.txt"
    if not path.is_file():
        return
    labels = _read_int_rows(path)
    pairs = _read_int_rows(raw / f"{name}_A.txt")
    if labels.shape[0] != pairs.shape[0] or pairs.shape[1] != 2:
        raise ValueError(f"{path}: {labels.shape[0]} rows for the {pairs.shape[0]} edges of {name}_A.txt")
    num_nodes = int(offsets[-1]) + 1
    keys = (pairs[:, 0] - 1) * num_nodes + (pairs[:, 1] - 1)
    order = np.argsort(keys, kind="stable")
    keys, labels = keys[order], labels[order]
    for g, data in enumerate(graphs):
        edge_index = data.edge_index.numpy() + offsets[g]
        wanted = edge_index[0] * num_nodes + edge_index[1]
        at = np.minimum(np.searchsorted(keys, wanted), max(len(keys) - 1, 0))
        rows = labels[at] if len(keys) else np.empty((0, labels.shape[1]), dtype=np.int64)
        if len(wanted) and not np.array_equal(keys[at], wanted):
            raise ValueError(f"{path}: graph {g} has an edge that {name}_A.txt does not list")
        data.edge_label = torch.from_numpy(rows[:, 0].copy() if rows.shape[1] == 1 else rows.copy())


def _root_above(folder: Path, name: str) -> Path | None:
    """The data root that ``folder`` was likely meant to be, where it is ``ROOT/NAME`` or
    ``ROOT/NAME/raw`` (or any folder holding ``NAME_A.txt`` itself): ``ROOT``, or None."""
    if folder.name == "raw" and folder.parent.name.lower() == name.lower():
        return folder.parent.parent
    if folder.name.lower() == name.lower() and (folder / "raw").is_dir():
        return folder.parent
    if (folder / f"{name}_A.txt").is_file():
        return folder.parent.parent if folder.name == "raw" else folder.parent
    return None


def default_labels(name: str) -> str:
    """The paper's label policy for ``name`` (``"auto"`` where it has node labels)."""
    return DEFAULT_LABELS.get(name, "auto")


def node_label_names(name: str, root: str | os.PathLike | None = None) -> dict[int, str] | None:
    """The names of a TU dataset's node labels, from the ``Node labels:`` table of its
    ``README.txt`` (MUTAG: ``{0: "C", 1: "N", 2: "O", ...}``), for explanations to print.

    Args:
        name (str): dataset name.
        root (str, optional): data root (default ``$MWSP_DATA_ROOT``).

    Returns:
        ``{label: name}``, or None where the README is missing or has no such table (a
        dataset without node labels, or one whose labels have several columns, as
        Cuneiform's).
    """
    readme = resolve_root(root) / name / "raw" / "README.txt"
    if not readme.is_file():
        return None
    names: dict[int, str] = {}
    in_table = False
    for line in readme.read_text(errors="replace").splitlines():
        if not in_table:
            in_table = line.strip().lower() == "node labels:"
            continue
        fields = line.split(None, 1)
        if len(fields) == 2 and fields[0].isdigit():
            names[int(fields[0])] = fields[1].strip()
        elif line.strip() or names:  # a blank line may come before the table, not inside it
            break
    return names or None


def make_csl(graphs_per_class: int = 15, num_nodes: int = 41, seed: int = 0) -> tuple[list[Data], np.ndarray]:
    """Circular skip-link graphs: 10 classes that WL cannot separate (Murphy et al. 2019).

    Each graph is a cycle of ``num_nodes`` nodes plus the chords ``i -- i + R``
    for the class's skip length ``R`` (:data:`CSL_SKIPS`); every graph is
    4-regular, and each copy gets a random node numbering. All nodes carry
    label 0.

    Every node of a CSL graph sees the same thing, so MWSP compares the graphs' counts of
    nodes at each distance up to ``d`` (how many paths reach them too, with
    ``paths="all"``). With 41 nodes and ``paths="split"``, skips 6 and 16 have equal counts
    at every distance, so they are at W = 0 at any ``d`` and ``k``: no kernel of W parts
    them, and accuracy is at most 90 % (``d >= 4``; fewer classes part at smaller ``d``).
    In the demo (``mwsp evaluate --d 4 --k 0 1``) each of the nested protocol's 100 folds
    scores 13 of 15 (86.67 %, a std of 0): a fold gives the pair's test graphs one class
    and loses the 2 test graphs of the other.

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
    name: str,
    root: str | os.PathLike | None = None,
    cache_dir: str | os.PathLike | None = None,
    log: bool = True,
) -> tuple[list[Data], np.ndarray]:
    """``"CSL"`` (generated, offline) or a TU dataset, as ``(graphs, y)`` (``log``: as in
    :func:`load_tudataset`)."""
    if name == "CSL":
        return make_csl()
    return load_tudataset(name, root=root, cache_dir=cache_dir, log=log)
