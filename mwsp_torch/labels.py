"""Graphs in, one integer label per node out (SPEC section 1).

Every graph is validated and turned into plain arrays: an undirected simple
adjacency in CSR form and a label per node. Labels come from
``data.node_label`` if present, else from a discrete ``data.x`` (one-hot, as
``TUDataset`` stores it, or several one-hot blocks), else from a policy:
``"degree"`` (the paper's choice for IMDB-BINARY) or ``"uniform"`` (its choice
for REDDIT-BINARY). Multi-column labels (``node_label`` of shape
``[num_nodes, c]``, or a multi-hot ``x``) become one categorical label per
distinct row. Nothing is coerced silently: bad input raises a ``ValueError``
that names the graph's index.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np
import torch
from numba import njit

from mwsp_torch._interning import Vocabulary, intern_pair

LABEL_POLICIES = ("auto", "degree", "uniform")


@dataclass(frozen=True)
class GraphSet:
    """A batch of graphs as flat arrays (all node indices global).

    Attributes:
        ptr: ``[num_graphs + 1]`` node offsets; graph ``g`` owns nodes
            ``ptr[g]:ptr[g + 1]``.
        indptr: ``[num_nodes + 1]`` CSR offsets of the symmetric adjacency.
        indices: neighbours, sorted within each row, no self-loops or repeats.
        labels: ``[num_nodes]`` non-negative integer node labels.
    """

    ptr: np.ndarray
    indptr: np.ndarray
    indices: np.ndarray
    labels: np.ndarray

    @property
    def num_graphs(self) -> int:
        return len(self.ptr) - 1

    @property
    def num_nodes(self) -> int:
        return int(self.ptr[-1])

    @property
    def sizes(self) -> np.ndarray:
        return np.diff(self.ptr)


def _as_numpy(value, what: str, index: int) -> np.ndarray:
    if isinstance(value, torch.Tensor):
        return value.detach().cpu().numpy()
    if isinstance(value, np.ndarray):
        return value
    raise ValueError(f"graph {index}: {what} must be a torch.Tensor or numpy array, got {type(value).__name__}")


def _num_nodes(data, index: int) -> int:
    n = getattr(data, "num_nodes", None)
    if n is None:
        raise ValueError(f"graph {index}: cannot tell its number of nodes (set num_nodes, x or node_label)")
    n = int(n)
    if n <= 0:
        raise ValueError(f"graph {index}: has no nodes")
    return n


def edge_arrays(data, index: int, num_nodes: int) -> tuple[np.ndarray, np.ndarray]:
    """Symmetrised, deduplicated, loop-free edges of one graph as CSR arrays.

    Returns:
        ``(indptr [n + 1], indices)`` with local node indices.
    """
    edge_index = getattr(data, "edge_index", None)
    if edge_index is None:
        src = dst = np.empty(0, dtype=np.int64)
    else:
        ei = _as_numpy(edge_index, "edge_index", index)
        if ei.ndim != 2 or ei.shape[0] != 2:
            raise ValueError(f"graph {index}: edge_index must have shape [2, num_edges], got {list(ei.shape)}")
        if not np.issubdtype(ei.dtype, np.integer):
            raise ValueError(f"graph {index}: edge_index must be integer, got {ei.dtype}")
        if ei.size and (ei.min() < 0 or ei.max() >= num_nodes):
            bad = int(ei.min()) if ei.min() < 0 else int(ei.max())
            raise ValueError(
                f"graph {index}: edge_index contains node {bad}, outside 0..{num_nodes - 1} (num_nodes={num_nodes})"
            )
        src = ei[0].astype(np.int64)
        dst = ei[1].astype(np.int64)
    keep = src != dst
    src, dst = src[keep], dst[keep]
    both_src = np.concatenate([src, dst])
    both_dst = np.concatenate([dst, src])
    keys = np.unique(both_src * num_nodes + both_dst)
    rows, cols = keys // num_nodes, keys % num_nodes
    indptr = np.zeros(num_nodes + 1, dtype=np.int64)
    np.cumsum(np.bincount(rows, minlength=num_nodes), out=indptr[1:])
    return indptr, cols


def _label_matrix(data, index: int, num_nodes: int) -> np.ndarray | None:
    """Integer label rows ``[num_nodes, c]`` from ``node_label`` or ``x``; None if neither."""
    node_label = getattr(data, "node_label", None)
    if node_label is not None:
        lab = _as_numpy(node_label, "node_label", index)
        if not np.issubdtype(lab.dtype, np.integer):
            raise ValueError(f"graph {index}: node_label must be an integer tensor, got {lab.dtype}")
        source = "node_label"
    else:
        x = getattr(data, "x", None)
        if x is None:
            return None
        lab = _as_numpy(x, "x", index)
        if not np.issubdtype(lab.dtype, np.integer):
            if not np.all(np.isfinite(lab)) or np.any(lab != np.round(lab)):
                raise ValueError(
                    f"graph {index}: x has non-integer values; MWSP needs discrete node labels "
                    "(pass node_label, or labels='degree'/'uniform')"
                )
            lab = lab.astype(np.int64)
        if lab.ndim == 2 and lab.shape[1] > 0 and np.all((lab == 0) | (lab == 1)) and np.all(lab.sum(1) == 1):
            lab = lab.argmax(1)  # one-hot, what TUDataset stores
        source = "x"
    if lab.ndim == 1:
        lab = lab[:, None]
    if lab.ndim != 2 or lab.shape[0] != num_nodes or lab.shape[1] == 0:
        raise ValueError(
            f"graph {index}: {source} must have one row per node ({num_nodes}), got shape {list(lab.shape)}"
        )
    if lab.size and lab.min() < 0:
        raise ValueError(f"graph {index}: {source} has a negative label ({int(lab.min())})")
    return lab.astype(np.int64)


def _as_graph_list(graphs) -> Sequence:
    if isinstance(graphs, (list, tuple)):
        return graphs
    if isinstance(graphs, Iterable):
        return list(graphs)
    raise ValueError(f"expected a list of torch_geometric Data or a PyG dataset, got {type(graphs).__name__}")


def to_graph_set(graphs, labels: str = "auto", label_vocab: Vocabulary | None = None) -> GraphSet:
    """Validate graphs and flatten them into a :class:`GraphSet`.

    Args:
        graphs: a list of PyG ``Data`` or a PyG dataset.
        labels (str): ``"auto"`` (``node_label``, else discrete ``x``),
            ``"degree"`` or ``"uniform"`` (default ``"auto"``).
        label_vocab (Vocabulary, optional): table for multi-column label rows,
            shared between fit and transform so equal rows get equal labels.

    Raises:
        ValueError: naming the graph's index, for an empty graph, a bad
            ``edge_index``, negative or non-integer labels, missing labels
            under ``"auto"``, or label rows of differing widths.
    """
    if labels not in LABEL_POLICIES:
        raise ValueError(f"labels must be one of {LABEL_POLICIES}, got {labels!r}")
    graphs = _as_graph_list(graphs)
    if len(graphs) == 0:
        raise ValueError("no graphs given")
    sizes, indptrs, indices, label_rows = [], [], [], []
    width = None
    for i, data in enumerate(graphs):
        n = _num_nodes(data, i)
        indptr, cols = edge_arrays(data, i, n)
        if labels == "auto":
            lab = _label_matrix(data, i, n)
            if lab is None:
                raise ValueError(f"graph {i}: has neither node_label nor x; choose labels='degree' or labels='uniform'")
            if width is None:
                width = lab.shape[1]
            elif lab.shape[1] != width:
                raise ValueError(f"graph {i}: labels have {lab.shape[1]} columns, earlier graphs have {width}")
        elif labels == "degree":
            lab = np.diff(indptr)[:, None]
        else:
            lab = np.zeros((n, 1), dtype=np.int64)
        sizes.append(n)
        indptrs.append(indptr)
        indices.append(cols)
        label_rows.append(lab)
    ptr = np.zeros(len(graphs) + 1, dtype=np.int64)
    np.cumsum(sizes, out=ptr[1:])
    degree = np.concatenate([np.diff(p) for p in indptrs])
    indptr = np.zeros(ptr[-1] + 1, dtype=np.int64)
    np.cumsum(degree, out=indptr[1:])
    flat_indices = np.concatenate([cols + ptr[g] for g, cols in enumerate(indices)])
    label_mat = np.concatenate(label_rows)
    if label_mat.shape[1] == 1:
        node_labels = label_mat[:, 0].copy()
    else:
        if label_vocab is None:
            label_vocab = Vocabulary()
        node_labels = intern_rows(label_mat, label_vocab)
    return GraphSet(ptr=ptr, indptr=indptr, indices=flat_indices, labels=node_labels)


def intern_rows(rows: np.ndarray, vocab: Vocabulary) -> np.ndarray:
    """One categorical ID per distinct integer row, exact (a trie of pairs); grows ``vocab``."""
    return _intern_rows(np.ascontiguousarray(rows, dtype=np.int64), Vocabulary().table, vocab.table, vocab.offset)


@njit(cache=True)
def _intern_rows(rows, frozen, fresh, offset):
    out = np.empty(rows.shape[0], dtype=np.int64)
    for i in range(rows.shape[0]):
        h = -1
        for j in range(rows.shape[1]):
            h = intern_pair(frozen, fresh, offset, h, rows[i, j])
        out[i] = h
    return out
