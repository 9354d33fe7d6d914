"""Graphs in, flat arrays out: the first step of the flow ``graphs -> labels -> trees -> paths``.

Every graph is validated and its structure turned into plain arrays (:class:`GraphSet`): an
undirected simple adjacency in CSR form over global node indices, self-loops and repeated
edges dropped. Edges come from ``data.edge_index`` (dense, or a sparse adjacency), else from
a sparse ``data.adj_t`` (what ``ToSparseTensor`` leaves); edge weights are not read: MWSP's
paths run over plain edges. Edge labels (``MWSP(edge_labels=True)``) are read by
:mod:`mwsp_torch.labels` and carried here onto both directions of each edge. Nothing is
coerced silently: bad input raises a ``ValueError`` that names the graph's index. Node labels
are read by :mod:`mwsp_torch.labels`, which calls :func:`read_graphs`; the feature kernels
take the graphs in runs of whole graphs (:func:`graph_chunks`), so that a long extraction
reports progress.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import TypeVar

import numpy as np
import torch
from torch_geometric.data import Batch, Data, HeteroData

__all__ = [
    "CHUNK_NODES",
    "GraphSet",
    "as_graph_list",
    "as_numpy",
    "compact_graphs",
    "graph_chunks",
    "read_graphs",
]

T = TypeVar("T")

#: Nodes per call of the compiled feature kernels (:func:`graph_chunks`), so that a long
#: extraction reports progress (REDDIT-BINARY's 860,000 nodes take minutes at d=2, k=2);
#: at this size a call's fixed cost is negligible.
CHUNK_NODES = 1 << 14


@dataclass(frozen=True)
class GraphSet:
    """A batch of graphs as flat arrays (all node indices global).

    Attributes:
        ptr: ``[num_graphs + 1]`` node offsets; graph ``g`` owns nodes
            ``ptr[g]:ptr[g + 1]``.
        indptr: ``[num_nodes + 1]`` CSR offsets of the symmetric adjacency.
        indices: neighbours, sorted within each row, no self-loops or repeats.
        labels: ``[num_nodes]`` non-negative integer node labels.
        edge_labels: ``[len(indices)]`` non-negative integer label of each adjacency entry
            (both directions of an edge carry its label), or None without edge labels.
    """

    ptr: np.ndarray
    indptr: np.ndarray
    indices: np.ndarray
    labels: np.ndarray
    edge_labels: np.ndarray | None = None

    @property
    def num_graphs(self) -> int:
        return len(self.ptr) - 1

    @property
    def num_nodes(self) -> int:
        return int(self.ptr[-1])

    @property
    def sizes(self) -> np.ndarray:
        return np.diff(self.ptr)


def graph_chunks(ptr: np.ndarray, chunk_nodes: int) -> list[tuple[int, int]]:
    """Consecutive runs ``(first graph, stop graph)`` of whole graphs, each of about
    ``chunk_nodes`` nodes (at least one graph): the unit of the feature kernels' progress."""
    if chunk_nodes < 1:
        raise ValueError(f"chunk_nodes must be >= 1, got {chunk_nodes}")
    chunks = []
    first = 0
    num_graphs = len(ptr) - 1
    while first < num_graphs:
        stop = int(np.searchsorted(ptr, ptr[first] + chunk_nodes, side="left"))
        stop = min(max(stop, first + 1), num_graphs)
        chunks.append((first, stop))
        first = stop
    return chunks


#: torch's 8-bit float dtypes present in this torch (numpy has none of them).
_FLOAT8 = tuple(
    getattr(torch, name)
    for name in ("float8_e4m3fn", "float8_e4m3fnuz", "float8_e5m2", "float8_e5m2fnuz")
    if hasattr(torch, name)
)


def as_numpy(value, what: str, index: int) -> np.ndarray:
    """A field ``what`` of graph ``index`` (a dense tensor or a numpy array) as a numpy array;
    bfloat16 and float8 read as float32, which holds their every value; a ValueError for
    a sparse tensor or a dtype numpy lacks."""
    if _is_sparse(value):  # labels are read row by row; edges come here already as index pairs
        raise ValueError(f"graph {index}: {what} must be a dense tensor, got a sparse one; pass {what}.to_dense()")
    if isinstance(value, torch.Tensor):
        value = value.detach().cpu()
        if value.dtype in (torch.bfloat16, *_FLOAT8):  # no numpy dtype; float32 holds every value exactly
            value = value.to(torch.float32)
        try:
            return value.numpy()
        except TypeError as err:  # dtypes numpy lacks (complex32, quantized, ...)
            raise ValueError(f"graph {index}: {what} has dtype {value.dtype}, which MWSP cannot read ({err})") from None
    if isinstance(value, np.ndarray):
        return value
    raise ValueError(f"graph {index}: {what} must be a torch.Tensor or numpy array, got {type(value).__name__}")


def _num_nodes(data, index: int) -> int:
    # A num_nodes that was set is read as set: PyG's data.num_nodes turns "3" into None
    # (it sums the stores' counts and gives None on a TypeError) and True into 1.
    n = data["num_nodes"] if "num_nodes" in data else data.num_nodes
    if n is None:
        raise ValueError(f"graph {index}: cannot tell its number of nodes (set num_nodes, x or node_label)")
    if isinstance(n, torch.Tensor):
        if n.numel() != 1:
            raise ValueError(f"graph {index}: num_nodes must be one number, got a tensor of shape {list(n.shape)}")
        n = n.item()
    whole = isinstance(n, (int, np.integer)) or (isinstance(n, (float, np.floating)) and float(n).is_integer())
    if isinstance(n, bool) or not whole:
        raise ValueError(f"graph {index}: num_nodes must be a whole number, got {n!r}")
    n = int(n)
    if n < 0:
        raise ValueError(f"graph {index}: num_nodes must be non-negative, got {n}")
    if n == 0:
        raise ValueError(f"graph {index}: has no nodes")
    return n


def _edge_index(data, index: int, num_nodes: int) -> np.ndarray:
    """``[2, num_edges]`` int64 ``edge_index`` of one graph, its shape and type checked
    (its node range is checked for all graphs at once, by :func:`_adjacency`, except for
    unsigned nodes that int64 cannot hold, which would wrap to negative ones)."""
    edge_index = getattr(data, "edge_index", None)
    what = "edge_index"
    if edge_index is None:
        edge_index, what = getattr(data, "adj_t", None), "adj_t"
        if edge_index is None:
            return np.empty((2, 0), dtype=np.int64)
    if what == "adj_t" or _is_sparse(edge_index):
        edge_index = _sparse_edges(edge_index, what, index)
    ei = as_numpy(edge_index, what, index)
    if ei.ndim != 2 or ei.shape[0] != 2:
        raise ValueError(f"graph {index}: edge_index must have shape [2, num_edges], got {list(ei.shape)}")
    if not np.issubdtype(ei.dtype, np.integer):
        raise ValueError(f"graph {index}: edge_index must be integer, got {ei.dtype}")
    if np.issubdtype(ei.dtype, np.unsignedinteger) and ei.size and ei.max() > np.iinfo(np.int64).max:
        raise ValueError(
            f"graph {index}: edge_index contains node {ei.max()}, outside 0..{num_nodes - 1} (num_nodes={num_nodes})"
        )
    return ei.astype(np.int64, copy=False)


def _is_sparse(value) -> bool:
    """A sparse adjacency: a torch sparse tensor (any sparse layout) or a ``torch_sparse.SparseTensor``."""
    if isinstance(value, torch.Tensor):
        return value.layout != torch.strided
    return type(value).__name__ == "SparseTensor" and hasattr(value, "coo")


def _sparse_edges(adjacency, what: str, index: int) -> torch.Tensor:
    """``[2, num_edges]`` node pairs of a sparse adjacency's stored entries (their values,
    edge weights, are not read; ``adj_t`` is transposed, which an undirected graph ignores)."""
    if not _is_sparse(adjacency):
        raise ValueError(
            f"graph {index}: {what} must be a sparse adjacency (a torch sparse tensor or a SparseTensor), "
            f"got {type(adjacency).__name__}"
        )
    if isinstance(adjacency, torch.Tensor):
        if adjacency.dim() != 2:
            raise ValueError(f"graph {index}: {what} must be a 2-D adjacency, got shape {list(adjacency.shape)}")
        return adjacency.to_sparse_coo().coalesce().indices()
    row, col, _ = adjacency.coo()
    return torch.stack([row, col])


def _adjacency(
    edges: list[np.ndarray], ptr: np.ndarray, edge_values: list[np.ndarray] | None = None
) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """Symmetrised, deduplicated, loop-free adjacency of all graphs, as global CSR arrays.

    One pass over every graph's edges, not one per graph: per-graph numpy calls cost
    more than the work on graphs of 30 nodes (NCI1: 4,110 of them).

    Args:
        edges: each graph's ``[2, num_edges]`` int64 edges, local node indices.
        ptr: ``[num_graphs + 1]`` node offsets.
        edge_values (optional): each graph's ``[num_edges]`` int64 edge labels; an edge's
            label goes to both its directions, and every listing of one undirected edge
            (both directions, repeats) must carry the same label.

    Returns:
        ``(indptr [num_nodes + 1], indices, values)``, indices global and sorted within each
        row, ``values`` the label of each entry (None without ``edge_values``).

    Raises:
        ValueError: naming the first graph with an edge outside its nodes, or (with
            ``edge_values``) an edge listed with two different labels.
    """
    num_edges = np.fromiter((e.shape[1] for e in edges), dtype=np.int64, count=len(edges))
    graph = np.repeat(np.arange(len(edges)), num_edges)
    src, dst = np.concatenate(edges, axis=1)
    size = np.diff(ptr)[graph]
    outside = (src < 0) | (src >= size) | (dst < 0) | (dst >= size)
    if outside.any():
        g = int(graph[np.argmax(outside)])
        local = edges[g]
        bad = int(local.min()) if local.min() < 0 else int(local.max())
        n = int(ptr[g + 1] - ptr[g])
        raise ValueError(f"graph {g}: edge_index contains node {bad}, outside 0..{n - 1} (num_nodes={n})")
    keep = src != dst
    first_node = ptr[graph[keep]]
    src = src[keep] + first_node
    dst = dst[keep] + first_node
    num_nodes = int(ptr[-1])  # keys below fit int64 up to 3e9 nodes
    keys = np.concatenate([src * num_nodes + dst, dst * num_nodes + src])
    values = None
    if edge_values is None:
        keys = np.sort(keys)
    else:
        values = np.concatenate(edge_values)[keep] if edges else np.empty(0, dtype=np.int64)
        values = np.concatenate([values, values])
        order = np.argsort(keys, kind="stable")
        keys, values = keys[order], values[order]
        clash = (keys[1:] == keys[:-1]) & (values[1:] != values[:-1])
        if clash.any():
            at = int(np.argmax(clash))
            u, w = divmod(int(keys[at]), num_nodes)
            g = int(np.searchsorted(ptr, u, side="right")) - 1
            raise ValueError(
                f"graph {g}: edge {u - int(ptr[g])}-{w - int(ptr[g])} is listed with two edge labels "
                f"({int(values[at])} and {int(values[at + 1])}); both directions of an edge, and its repeats, "
                "must carry the same label"
            )
    first = np.ones(len(keys), dtype=bool)  # np.unique's hash path is 8x slower on these keys
    first[1:] = keys[1:] != keys[:-1]
    keys = keys[first]
    if values is not None:
        values = values[first]
    indptr = np.zeros(num_nodes + 1, dtype=np.int64)
    np.cumsum(np.bincount(keys // num_nodes, minlength=num_nodes), out=indptr[1:])
    return indptr, keys % num_nodes, values


def as_graph_list(graphs) -> Sequence:
    """``graphs`` as a list (a PyG dataset or other iterable read once); a ValueError for a
    single graph, a ``Batch`` or a ``DataLoader`` given in place of a list."""
    if isinstance(graphs, Batch):
        raise ValueError(f"expected a list of graphs, got a Batch of {graphs.num_graphs}; pass batch.to_data_list()")
    if isinstance(graphs, (Data, HeteroData)):
        raise ValueError(f"expected a list of graphs, got one {type(graphs).__name__}; wrap it in a list")
    if isinstance(graphs, torch.utils.data.DataLoader):
        raise ValueError("expected a list of graphs, got a DataLoader, which yields batches; pass loader.dataset")
    if isinstance(graphs, (list, tuple)):
        return graphs
    if isinstance(graphs, Iterable) and not isinstance(graphs, (str, bytes, dict)):
        return list(graphs)
    raise ValueError(f"expected a list of torch_geometric Data or a PyG dataset, got {type(graphs).__name__}")


def compact_graphs(graphs) -> list[Data]:
    """The graphs as a list of ``Data`` that each hold their own tensors (clones).

    An item of a PyG dataset (``dataset[i]``, ``list(dataset)``) is a view of the dataset's
    storage, and pickling it writes all of that storage; so does pickling a dataset whose items
    were read before (it keeps them). Where graphs travel to other processes (a
    ``GridSearchCV(..., n_jobs=2)`` sends them with every task), clones travel at their own
    size. :func:`mwsp_torch.datasets.load_tudataset` returns them so already.

    Args:
        graphs: a list of PyG ``Data`` or a PyG dataset.

    Returns:
        A new list of cloned ``Data``, in the same order.

    Example:
        >>> from torch_geometric.data import Data
        >>> import torch
        >>> graphs = compact_graphs([Data(edge_index=torch.tensor([[0], [1]]), num_nodes=2)])
        >>> graphs[0].num_nodes
        2
    """
    return [data.clone() for data in as_graph_list(graphs)]


def _check_graph(data, index: int) -> None:
    """One item of the list: a plain ``Data`` (a ``Batch`` would be read as one graph)."""
    if isinstance(data, Batch):
        raise ValueError(f"graph {index}: is a Batch of {data.num_graphs} graphs; pass batch.to_data_list()")
    if isinstance(data, HeteroData):
        raise ValueError(f"graph {index}: HeteroData is not supported (MWSP reads one node type and one edge type)")
    if not isinstance(data, Data):
        raise ValueError(f"graph {index}: expected a torch_geometric Data, got {type(data).__name__}")


def read_graphs(
    graphs,
    each: Callable[[Data, int], T] | None = None,
    each_edges: Callable[[Data, int, int], np.ndarray] | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, list[T]]:
    """Validate graphs and flatten their structure.

    Args:
        graphs: a list of PyG ``Data`` or a PyG dataset.
        each (callable, optional): ``each(graph, index)``, called on every graph once its own
            checks passed and before the next graph's (so the first bad graph is the one
            named, whatever is wrong with it); what it returns is collected.
        each_edges (callable, optional): ``each_edges(graph, index, num_edges)``, the graph's
            ``[num_edges]`` int64 edge labels, one per column of its ``edge_index``
            (:func:`mwsp_torch.labels.to_graph_set` passes its reader of edge labels). With
            it, the adjacency's labels are appended to what is returned.

    Returns:
        ``(ptr, indptr, indices, found)`` as in :class:`GraphSet`, and ``found``, what
        ``each`` returned for each graph (empty without ``each``); with ``each_edges``, a
        fifth item, the label of each entry of ``indices``.

    Raises:
        ValueError: naming the graph's index, for an item that is not a ``Data`` (a ``Batch``
            included), an empty graph or a bad ``num_nodes``, or a bad ``edge_index``;
            without an index, for no graphs, or a single graph, a ``Batch`` or a
            ``DataLoader`` in place of a list.
    """
    graphs = as_graph_list(graphs)
    if len(graphs) == 0:
        raise ValueError("no graphs given")
    sizes = np.empty(len(graphs), dtype=np.int64)
    edges, found, edge_values = [], [], []
    for i, data in enumerate(graphs):
        _check_graph(data, i)
        sizes[i] = _num_nodes(data, i)
        edges.append(_edge_index(data, i, int(sizes[i])))
        if each_edges is not None:
            if getattr(data, "edge_index", None) is None and getattr(data, "adj_t", None) is not None:
                raise ValueError(f"graph {i}: edge labels are read with edge_index, not adj_t; pass edge_index")
            edge_values.append(each_edges(data, i, edges[-1].shape[1]))
        if each is not None:
            found.append(each(data, i))
    ptr = np.zeros(len(graphs) + 1, dtype=np.int64)
    np.cumsum(sizes, out=ptr[1:])
    indptr, indices, values = _adjacency(edges, ptr, edge_values if each_edges is not None else None)
    if each_edges is not None:
        return ptr, indptr, indices, found, values
    return ptr, indptr, indices, found
