"""Canonical scale-s tree IDs (``docs/definition.md``).

``T_s(v)`` unfolds the shortest-path DAG of root ``v`` to depth ``s``: the
children of a node at BFS distance ``l < s`` are *all* its neighbours at
distance ``l + 1``, so a node with several parents appears under each. Its ID
is computed bottom-up, AHU style: a subtree is the pair chain
``(label, sorted child IDs...)`` interned exactly (:mod:`mwsp_torch._interning`),
so two nodes anywhere in the dataset share an ID iff their trees are
isomorphic as rooted labelled trees. A single table serves every depth: a leaf
and a depth-0 tree with the same label are the same tree, and get the same ID.
With edge labels (``graph_set.edge_labels``), a child is the pair (label of the edge
from its parent, its subtree), so trees are isomorphic only if edge labels agree too.

The kernel is compiled with numba; one BFS per root, memory linear in the
largest graph. It is called on runs of whole graphs
(:func:`mwsp_torch.graphs.graph_chunks`), each reporting progress.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch
from numba import njit
from torch_geometric.data.datapipes import functional_transform
from torch_geometric.transforms import BaseTransform

from mwsp_torch._checks import is_integer
from mwsp_torch._interning import Vocabulary, intern_pair
from mwsp_torch.compiled import kernel
from mwsp_torch.graphs import CHUNK_NODES, GraphSet, graph_chunks
from mwsp_torch.labels import LABEL_POLICIES, LabelScheme, to_graph_set

# Vocabulary: the fitted dictionary tree_ids takes, public here with it.
__all__ = ["UNSEEN", "TreeIDs", "Vocabulary", "tree_ids"]

#: The index a fitted :class:`TreeIDs` gives a tree without one of its own.
UNSEEN = 0


@njit(cache=True, nogil=True)
def _label_ids_kernel(labels, k, frozen, fresh, offset):
    """``[num_nodes, k + 1]`` tree IDs with scale 0 (the labels as depth-0 trees) filled in,
    and the ``fresh`` table to keep."""
    out = np.empty((labels.shape[0], k + 1), dtype=np.int64)
    for u in range(labels.shape[0]):
        out[u, 0], fresh = intern_pair(frozen, fresh, offset, -1, labels[u])
    return out, fresh


@njit(cache=True, nogil=True)
def _tree_ids_kernel(ptr, indptr, indices, edge_labels, k, frozen, fresh, offset, out, first, stop):
    """Scales ``1..k`` of ``out`` for the nodes of graphs ``first .. stop - 1`` (a BFS never
    leaves its graph, so the per-node arrays are indexed from the first of those nodes).
    ``edge_labels`` is empty, or the label of each entry of ``indices``: then a child is the
    pair ``(-2 - edge label, subtree ID)``, interned (a negative first key, which no tree code
    has). Returns the ``fresh`` table to keep."""
    labelled = edge_labels.shape[0] > 0
    lo = ptr[first]
    num_nodes = ptr[stop] - lo
    max_size = 1
    max_degree = 1
    for g in range(first, stop):
        max_size = max(max_size, ptr[g + 1] - ptr[g])
    for u in range(lo, lo + num_nodes):
        max_degree = max(max_degree, indptr[u + 1] - indptr[u])
    dist = np.full(num_nodes, -1, dtype=np.int64)
    pos = np.empty(num_nodes, dtype=np.int64)
    order = np.empty(max_size, dtype=np.int64)
    level_end = np.empty(k + 1, dtype=np.int64)
    prev = np.empty(max_size, dtype=np.int64)
    cur = np.empty(max_size, dtype=np.int64)
    children = np.empty(max_degree, dtype=np.int64)
    for v in range(lo, lo + num_nodes):
        # BFS to depth k, nodes stored level by level in `order`.
        order[0] = v
        dist[v - lo] = 0
        pos[v - lo] = 0
        tail = 1
        level_end[0] = 1
        start = 0
        for level in range(k):
            for i in range(start, level_end[level]):
                u = order[i]
                for e in range(indptr[u], indptr[u + 1]):
                    w = indices[e]
                    if dist[w - lo] == -1:
                        dist[w - lo] = level + 1
                        pos[w - lo] = tail
                        order[tail] = w
                        tail += 1
            start = level_end[level]
            level_end[level + 1] = tail
        for i in range(tail):
            prev[i] = out[order[i], 0]
        # Remaining depth r: subtrees of nodes at level <= k - r.
        for r in range(1, k + 1):
            for i in range(level_end[k - r]):
                u = order[i]
                m = 0
                for e in range(indptr[u], indptr[u + 1]):
                    w = indices[e]
                    if dist[w - lo] == dist[u - lo] + 1:
                        child = prev[pos[w - lo]]
                        if labelled:
                            child, fresh = intern_pair(frozen, fresh, offset, -2 - edge_labels[e], child)
                        children[m] = child
                        m += 1
                h = out[u, 0]
                if m > 0:
                    sorted_children = np.sort(children[:m])
                    for j in range(m):
                        h, fresh = intern_pair(frozen, fresh, offset, h, sorted_children[j])
                cur[i] = h
            out[v, r] = cur[0]
            prev, cur = cur, prev
        for i in range(tail):
            dist[order[i] - lo] = -1
    return fresh


_label_ids = kernel("label_ids", "i1 i i1 i1 i", "Tuple((int64[:, ::1], int64[::1]))")(_label_ids_kernel)
_tree_ids = kernel("tree_ids", "i1 i1 i1 i1 i i1 i1 i i2 i i", "int64[::1]")(_tree_ids_kernel)


def _edge_label_array(graph_set: GraphSet) -> np.ndarray:
    """The kernels' form of ``graph_set.edge_labels``: empty when there are none."""
    if graph_set.edge_labels is None:
        return np.empty(0, dtype=np.int64)
    return np.ascontiguousarray(graph_set.edge_labels, dtype=np.int64)


def tree_ids(
    graph_set: GraphSet,
    k: int,
    vocab: Vocabulary,
    frozen: Vocabulary | None = None,
    progress: Callable[[int], None] | None = None,
    chunk_nodes: int = CHUNK_NODES,
) -> np.ndarray:
    """Tree IDs ``t_s(v)`` for ``s = 0..k`` of every node.

    Args:
        graph_set (GraphSet): the graphs.
        k (int): deepest scale, ``k >= 0``.
        vocab (Vocabulary): table that unseen trees are added to.
        frozen (Vocabulary, optional): a fitted table consulted first and
            never changed (default: none).
        progress (callable, optional): called with the number of graphs done, after each
            run of about ``chunk_nodes`` nodes.
        chunk_nodes (int): nodes per call of the compiled kernel (default ``CHUNK_NODES``;
            the result does not depend on it).

    Returns:
        ``[num_nodes, k + 1]`` int64 array; equal IDs iff isomorphic trees.
    """
    if k < 0:
        raise ValueError(f"k must be >= 0, got {k}")
    frozen_table = frozen.table if frozen is not None else Vocabulary().table
    edge_labels = _edge_label_array(graph_set)
    out, vocab.table = _label_ids(graph_set.labels, k, frozen_table, vocab.table, vocab.offset)
    for first, stop in graph_chunks(graph_set.ptr, chunk_nodes):
        if k > 0:
            vocab.table = _tree_ids(
                graph_set.ptr, graph_set.indptr, graph_set.indices, edge_labels, k, frozen_table, vocab.table,
                vocab.offset, out, first, stop,
            )  # fmt: skip
        if progress is not None:
            progress(stop - first)
    return out


@functional_transform("tree_ids")
class TreeIDs(BaseTransform):
    """Writes canonical tree IDs onto each ``Data``, ``[num_nodes, k + 1]`` (``data.tree_ids``).

    **Unfitted**, the transform owns one vocabulary, so IDs agree across every graph it sees
    (two nodes share ``tree_ids[:, s]`` iff their depth-``s`` trees are isomorphic); it grows
    as new trees appear. This is what a kernel or an analysis of one dataset wants.

    **Fitted** (:meth:`fit` on training graphs), it writes embedding indices for a GNN
    instead: a tree seen at scale ``s`` in ``fit`` maps to ``1 + its rank`` among that scale's
    trees, every other tree to :data:`UNSEEN` (0), so no graph outside the training set shapes
    what an embedding learns; :attr:`sizes_` gives each scale's table size. With
    ``min_graphs > 1``, a tree at scale 1 or deeper that fewer training graphs hold maps to
    :data:`UNSEEN` too, so that row is trained on the kind of node a new tree is. Scale 0 (the
    labels) keeps every label seen. Only :meth:`fit` changes the mapping.

    The vocabulary lives in one process: a copy in another process would give one ID to
    different trees. So the transform runs in the main process only, and refuses to run in a
    ``DataLoader`` worker (``num_workers > 0``); use ``num_workers=0``, give it to the dataset
    as ``pre_transform``, or apply it once to the list of graphs before the loader.

    Args:
        k (int): deepest scale, an integer >= 0 (default ``1``).
        labels (str): label policy, ``"auto"``, ``"degree"`` or ``"uniform"``
            (default ``"auto"``).
        min_graphs (int): fitted mode: training graphs a tree at scale ``>= 1`` must appear in
            to get an index of its own (default ``1``: every tree seen).
        attr_name (str): the attribute written (default ``"tree_ids"``).

    Attributes:
        sizes_ (list[int]): fitted: per scale, the embedding rows (seen trees + 1).
        known_ (list[np.ndarray]): fitted: per scale, the sorted tree IDs that have an index.

    Raises:
        ValueError: for a ``k``, ``labels`` or ``min_graphs`` outside those (as
            :class:`mwsp_torch.MWSP`).

    Examples:
        >>> import torch
        >>> from torch_geometric.data import Data
        >>> from mwsp_torch import TreeIDs
        >>> path = Data(edge_index=torch.tensor([[0, 1, 1, 2], [1, 0, 2, 1]]), num_nodes=3,
        ...             node_label=torch.tensor([0, 0, 0]))
        >>> ids = TreeIDs(k=1)(path.clone()).tree_ids  # the two ends share their depth-1 tree, the middle differs
        >>> bool(ids[0, 1] == ids[2, 1]), bool(ids[0, 1] == ids[1, 1])
        (True, False)
        >>> star = Data(edge_index=torch.tensor([[0, 1, 0, 2, 0, 3], [1, 0, 2, 0, 3, 0]]), num_nodes=4,
        ...             node_label=torch.tensor([0, 0, 0, 0]))
        >>> fitted = TreeIDs(k=1).fit([path])  # a GNN's input: indices fitted on training graphs
        >>> fitted.sizes_, fitted(star.clone()).tree_ids[:, 1].tolist()  # the hub unseen; leaves = the path's ends
        ([2, 3], [0, 1, 1, 1])
    """

    def __init__(self, k: int = 1, labels: str = "auto", *, min_graphs: int = 1, attr_name: str = "tree_ids") -> None:
        if not is_integer(k) or k < 0:
            raise ValueError(f"k must be an integer >= 0, got {k!r}")
        if not isinstance(labels, str) or labels not in LABEL_POLICIES:
            raise ValueError(f"labels must be one of {LABEL_POLICIES}, got {labels!r}")
        if not is_integer(min_graphs) or min_graphs < 1:
            raise ValueError(f"min_graphs must be an integer >= 1, got {min_graphs!r}")
        if not isinstance(attr_name, str) or not attr_name:
            raise ValueError(f"attr_name must be a non-empty string, got {attr_name!r}")
        self.k = k
        self.labels = labels
        self.min_graphs = int(min_graphs)
        self.attr_name = attr_name
        self.vocab = Vocabulary()
        self.label_scheme = LabelScheme()
        self.graphs_seen = 0  # names a refused graph: as pre_transform, its index in the dataset

    def raw_ids(self, data) -> np.ndarray:
        """``[num_nodes, k + 1]`` canonical tree IDs of one graph in this transform's vocabulary
        (new trees get new IDs), written nowhere.

        Raises:
            RuntimeError: in a ``DataLoader`` worker process (see the class docstring).
            ValueError: for a graph ``MWSP`` would refuse, naming it by how many graphs this
                transform saw before it (as a dataset's ``pre_transform``: its index).
        """
        worker = torch.utils.data.get_worker_info()
        if worker is not None:
            raise RuntimeError(
                f"TreeIDs runs in DataLoader worker {worker.id} of {worker.num_workers}, but it keeps one "
                "vocabulary per process, so IDs from different workers would disagree (one ID for different "
                "trees); run it in the main process: DataLoader(num_workers=0), the dataset's pre_transform, "
                "or applied once to the list of graphs before the loader"
            )
        seen = getattr(self, "graphs_seen", 0)  # transforms pickled before the count read as fresh
        self.graphs_seen = seen + 1
        try:
            graph_set = to_graph_set([data], labels=self.labels, scheme=self.label_scheme)
        except ValueError as err:  # to_graph_set saw a list of one, so it says "graph 0"
            message = str(err).removeprefix("graph 0: ")
            raise ValueError(f"graph {seen} given to this TreeIDs (counting from 0): {message}") from None
        return tree_ids(graph_set, self.k, self.vocab)

    def fit(self, graphs) -> TreeIDs:
        """Learn each scale's trees from ``graphs`` (the training graphs only): from then on the
        transform writes embedding indices. A refit starts anew, vocabulary included."""
        self.vocab, self.label_scheme, self.graphs_seen = Vocabulary(), LabelScheme(), 0
        ids = [self.raw_ids(data) for data in graphs]
        known = []
        for s in range(self.k + 1):
            # Each graph's distinct trees, so that the counts are of graphs, not nodes.
            per_graph = [np.unique(g[:, s]) for g in ids]
            trees, holding = np.unique(
                np.concatenate(per_graph) if per_graph else np.zeros(0, dtype=np.int64), return_counts=True
            )
            known.append(trees if s == 0 else trees[holding >= self.min_graphs])
        self.known_ = known
        self.sizes_ = [len(trees) + 1 for trees in known]
        return self

    def indices(self, raw: np.ndarray) -> np.ndarray:
        """Fitted: the embedding indices of raw tree IDs (:meth:`raw_ids`), :data:`UNSEEN` for
        a tree without one."""
        if not hasattr(self, "known_"):
            raise ValueError("this TreeIDs is not fitted: call fit(training graphs) first")
        index = np.zeros_like(raw)
        for s, trees in enumerate(self.known_):
            rank = np.searchsorted(trees, raw[:, s])
            hit = rank < len(trees)
            hit[hit] = trees[rank[hit]] == raw[hit, s]
            index[hit, s] = rank[hit] + 1
        return index

    def forward(self, data):
        """Adds ``data[attr_name]``: raw tree IDs, or fitted, embedding indices."""
        raw = self.raw_ids(data)
        data[self.attr_name] = torch.from_numpy(self.indices(raw) if hasattr(self, "known_") else raw)
        return data

    def __repr__(self) -> str:
        extra = "" if self.min_graphs == 1 else f", min_graphs={self.min_graphs}"
        extra += "" if self.attr_name == "tree_ids" else f", attr_name={self.attr_name!r}"
        return f"{self.__class__.__name__}(k={self.k}, labels={self.labels!r}{extra})"
