"""Shortest-path representations and sparse multi-scale node feature maps (``docs/definition.md``).

For a root ``v`` every node ``u`` with ``dist(v, u) <= d`` is an endpoint
(``v`` itself included). The shortest paths from ``v`` are exactly the
root-to-node chains of ``v``'s unfolded shortest-path DAG, so they are
enumerated level by level; paths that end at the same node with the same
representation are merged with a count, so graphs with many tied shortest
paths cost no more than their distinct representations.

A representation at scale ``s`` is interned as the pair chain
``(-1 - s, t_s(w0)), (., t_s(w1)), ...``, so its ID is also its column in the
concatenated map ``phi = phi_0 || ... || phi_k`` (the first key tags the scale). With edge
labels, each step adds the key ``-2 - e`` of the edge's label before the next tree ID, so the
representation is ``(t_s(w0), e(w0,w1), t_s(w1), ...)``; the IDs of those half steps are
columns that no row uses.
Weights: ``paths="split"`` gives each endpoint mass 1 split evenly over its
``sigma(v, u)`` shortest paths, ``paths="all"`` gives every path 1. Per root,
contributions are summed in a canonical order (sorted by column, then value),
so identical rows come out bit-identical whatever the node numbering.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import scipy.sparse as sp
from numba import njit

from mwsp_torch._interning import Vocabulary, intern_pair
from mwsp_torch.compiled import kernel
from mwsp_torch.graphs import CHUNK_NODES, GraphSet, graph_chunks

__all__ = [
    "MAX_PATHS",
    "PATH_MODES",
    "SMALL_SORT",
    "insertion_order",
    "insertion_order_by_pair",
    "node_feature_maps",
]


PATH_MODES = ("split", "all")

#: Sorts of at most this many entries (a node's paths, nearly always) are insertion sorts
#: into a kept buffer: ``np.argsort`` allocates, and on such short arrays its calls were
#: most of a node's time. Longer ones (hubs of REDDIT-BINARY) keep ``np.argsort``.
SMALL_SORT = 32

#: The most shortest paths between two nodes that int64 counts hold. Every count of paths
#: ending at a node is at most that node's ``sigma``, so checking ``sigma`` covers them all;
#: beyond it (a chain of 64 complete bipartite 2 x 2 blocks at ``d >= 64``, or 10 layers of
#: 128 nodes at ``d = 10``) the counts would wrap to negative weights.
MAX_PATHS = np.iinfo(np.int64).max


@njit(cache=True, nogil=True)
def _grow(arr, need):
    if need <= arr.shape[0]:
        return arr
    new = np.empty(max(need, 2 * arr.shape[0]), dtype=arr.dtype)
    new[: arr.shape[0]] = arr
    return new


@njit(cache=True, nogil=True, inline="always")
def insertion_order(key, n, perm):
    """``perm[:n]``: the indices ``0 .. n - 1`` by ascending ``key``, ties in index order."""
    for j in range(n):
        x = key[j]
        i = j
        while i > 0 and key[perm[i - 1]] > x:
            perm[i] = perm[i - 1]
            i -= 1
        perm[i] = j


@njit(cache=True, nogil=True, inline="always")
def insertion_order_by_pair(major, minor, n, perm):
    """``perm[:n]``: the indices by ascending ``(major, minor)``, ties in index order: the order
    of a stable sort by ``minor`` followed by a stable sort by ``major``."""
    for j in range(n):
        a = major[j]
        b = minor[j]
        i = j
        while i > 0:
            k = perm[i - 1]
            if major[k] > a or (major[k] == a and minor[k] > b):
                perm[i] = k
                i -= 1
            else:
                break
        perm[i] = j


@njit(cache=True, nogil=True)
def _path_features_kernel(
    indptr, indices, edge_labels, tree_ids, d, split, frozen, fresh, offset, lo, hi, row_ptr, cols, vals, nnz
):
    """Rows of nodes ``lo .. hi - 1``, whole graphs (a BFS never leaves its graph, so the
    per-node arrays are indexed from ``lo``), appended to ``cols``/``vals`` after entry ``nnz``
    and ended in ``row_ptr[lo + 1 .. hi]``. Returns ``(cols, vals, nnz, fresh)``, the buffers grown
    by doubling: one pair of buffers serves every run, as in a single call (buffers per run
    raised the peak RSS of REDDIT-BINARY d=2,k=2's features by 0.35 GiB). If some node ``v``
    has more than ``MAX_PATHS`` shortest paths to one node, ``nnz`` is ``-1 - v`` instead.
    ``edge_labels`` is empty, or the label of each entry of ``indices``: then a step appends
    the key ``-2 - edge label`` before the next tree ID (negative, unlike every tree ID)."""
    labelled = edge_labels.shape[0] > 0
    num_nodes = hi - lo
    num_scales = tree_ids.shape[1]
    dist = np.full(num_nodes, -1, dtype=np.int64)
    sigma = np.zeros(num_nodes, dtype=np.int64)
    pos = np.empty(num_nodes, dtype=np.int64)
    order = np.empty(num_nodes, dtype=np.int64)
    level_end = np.empty(d + 1, dtype=np.int64)
    # States of the current / next level: (end node, representation, count).
    st_node = np.empty(64, dtype=np.int64)
    st_rep = np.empty(64, dtype=np.int64)
    st_cnt = np.empty(64, dtype=np.int64)
    nx_node = np.empty(64, dtype=np.int64)
    nx_rep = np.empty(64, dtype=np.int64)
    nx_cnt = np.empty(64, dtype=np.int64)
    em_rep = np.empty(64, dtype=np.int64)
    em_w = np.empty(64, dtype=np.float64)
    key = np.empty(64, dtype=np.int64)
    perm = np.empty(64, dtype=np.int64)
    for v in range(lo, hi):
        # BFS to depth d with shortest-path counts sigma.
        order[0] = v
        dist[v - lo] = 0
        sigma[v - lo] = 1
        pos[v - lo] = 0
        tail = 1
        level_end[0] = 1
        start = 0
        for level in range(d):
            for i in range(start, level_end[level]):
                u = order[i]
                for e in range(indptr[u], indptr[u + 1]):
                    w = indices[e] - lo
                    if dist[w] == -1:
                        dist[w] = level + 1
                        sigma[w] = 0
                        pos[w] = tail
                        order[tail] = w + lo
                        tail += 1
                    if dist[w] == level + 1:
                        if sigma[w] > MAX_PATHS - sigma[u - lo]:
                            return cols, vals, -1 - v, fresh  # the count would wrap: the caller names v
                        sigma[w] += sigma[u - lo]
            start = level_end[level]
            level_end[level + 1] = tail
        n_emit = 0
        for s in range(num_scales):
            n_st = 1
            st_node[0] = v
            st_rep[0], fresh = intern_pair(frozen, fresh, offset, -1 - s, tree_ids[v, s])
            st_cnt[0] = 1
            for level in range(d + 1):
                # Emit this level's states.
                em_rep = _grow(em_rep, n_emit + n_st)
                em_w = _grow(em_w, n_emit + n_st)
                for i in range(n_st):
                    em_rep[n_emit] = st_rep[i]
                    if split:
                        em_w[n_emit] = st_cnt[i] / sigma[st_node[i] - lo]
                    else:
                        em_w[n_emit] = float(st_cnt[i])
                    n_emit += 1
                if level == d:
                    break
                # Extend every state by one edge down the DAG.
                n_nx = 0
                for i in range(n_st):
                    u = st_node[i]
                    for e in range(indptr[u], indptr[u + 1]):
                        w = indices[e]
                        if dist[w - lo] == level + 1:
                            if n_nx >= nx_node.shape[0]:
                                nx_node = _grow(nx_node, n_nx + 1)
                                nx_rep = _grow(nx_rep, n_nx + 1)
                                nx_cnt = _grow(nx_cnt, n_nx + 1)
                            nx_node[n_nx] = w
                            h = st_rep[i]
                            if labelled:
                                h, fresh = intern_pair(frozen, fresh, offset, h, -2 - edge_labels[e])
                            nx_rep[n_nx], fresh = intern_pair(frozen, fresh, offset, h, tree_ids[w, s])
                            nx_cnt[n_nx] = st_cnt[i]
                            n_nx += 1
                if n_nx == 0:
                    break
                # Merge states with equal (end node, representation).
                key = _grow(key, n_nx)
                perm = _grow(perm, n_nx)
                for i in range(n_nx):
                    key[i] = nx_rep[i] * tail + pos[nx_node[i] - lo]
                if n_nx <= SMALL_SORT:
                    insertion_order(key, n_nx, perm)
                else:
                    perm[:n_nx] = np.argsort(key[:n_nx])
                st_node = _grow(st_node, n_nx)
                st_rep = _grow(st_rep, n_nx)
                st_cnt = _grow(st_cnt, n_nx)
                n_st = 0
                last = -1
                for j in range(n_nx):
                    i = perm[j]
                    if j > 0 and key[i] == last:
                        st_cnt[n_st - 1] += nx_cnt[i]
                    else:
                        st_node[n_st] = nx_node[i]
                        st_rep[n_st] = nx_rep[i]
                        st_cnt[n_st] = nx_cnt[i]
                        n_st += 1
                        last = key[i]
        # Canonical summation: sort by (column, value), then add runs.
        perm = _grow(perm, n_emit)
        if n_emit <= SMALL_SORT:
            insertion_order_by_pair(em_rep, em_w, n_emit, perm)
        else:
            by_w = np.argsort(em_w[:n_emit], kind="mergesort")
            by_rep = np.argsort(em_rep[:n_emit][by_w], kind="mergesort")
            perm[:n_emit] = by_w[by_rep]
        cols = _grow(cols, nnz + n_emit)
        vals = _grow(vals, nnz + n_emit)
        last = -1
        for j in range(n_emit):
            i = perm[j]
            if j > 0 and em_rep[i] == last:
                vals[nnz - 1] += em_w[i]
            else:
                cols[nnz] = em_rep[i]
                vals[nnz] = em_w[i]
                nnz += 1
                last = em_rep[i]
        row_ptr[v + 1] = nnz
        for i in range(tail):
            dist[order[i] - lo] = -1
    return cols, vals, nnz, fresh


_path_features = kernel(
    "path_features", "i1 i1 i1 i2 i b i1 i1 i i i i1 i1 f1 i", "Tuple((int64[::1], float64[::1], int64, int64[::1]))"
)(_path_features_kernel)


def node_feature_maps(
    graph_set: GraphSet,
    tree_ids: np.ndarray,
    d: int,
    paths: str,
    vocab: Vocabulary,
    frozen: Vocabulary | None = None,
    progress: Callable[[int], None] | None = None,
    chunk_nodes: int = CHUNK_NODES,
) -> sp.csr_matrix:
    """Multi-scale node feature maps ``phi(v)`` of every node, sparse.

    Args:
        graph_set (GraphSet): the graphs.
        tree_ids (np.ndarray): ``[num_nodes, k + 1]`` from :func:`mwsp_torch.trees.tree_ids`.
        d (int): maximal path length in edges, ``d >= 0``.
        paths (str): ``"split"`` or ``"all"``.
        vocab (Vocabulary): table that unseen path representations join.
        frozen (Vocabulary, optional): fitted table, consulted first, never changed.
        progress (callable, optional): called with the number of graphs done, after each
            run of about ``chunk_nodes`` nodes.
        chunk_nodes (int): nodes per call of the compiled kernel (default ``CHUNK_NODES``;
            the result does not depend on it).

    Returns:
        ``[num_nodes, vocab.size]`` CSR float64 matrix, columns sorted per row.
    """
    if d < 0:
        raise ValueError(f"d must be >= 0, got {d}")
    if paths not in PATH_MODES:
        raise ValueError(f"paths must be one of {PATH_MODES}, got {paths!r}")
    frozen_table = frozen.table if frozen is not None else Vocabulary().table
    tree_ids = np.ascontiguousarray(tree_ids, dtype=np.int64)
    edge_labels = (
        np.empty(0, dtype=np.int64)
        if graph_set.edge_labels is None
        else np.ascontiguousarray(graph_set.edge_labels, dtype=np.int64)
    )
    row_ptr = np.zeros(graph_set.num_nodes + 1, dtype=np.int64)
    cols = np.empty(1024, dtype=np.int64)
    vals = np.empty(1024, dtype=np.float64)
    nnz = 0
    for first, stop in graph_chunks(graph_set.ptr, chunk_nodes):
        lo, hi = int(graph_set.ptr[first]), int(graph_set.ptr[stop])
        cols, vals, nnz, vocab.table = _path_features(
            graph_set.indptr, graph_set.indices, edge_labels, tree_ids, d, paths == "split", frozen_table, vocab.table,
            vocab.offset, lo, hi, row_ptr, cols, vals, nnz,
        )  # fmt: skip
        if nnz < 0:
            node = -1 - nnz
            graph = int(np.searchsorted(graph_set.ptr, node, side="right")) - 1
            raise ValueError(
                f"graph {graph}: node {node - int(graph_set.ptr[graph])} has more than 2^63 - 1 shortest paths "
                f"of at most d={d} edges to one node, too many to count in int64; use a smaller d"
            )
        if progress is not None:
            progress(stop - first)
    width = max(vocab.size, frozen.size if frozen is not None else 0)
    return sp.csr_matrix((vals[:nnz].copy(), cols[:nnz].copy(), row_ptr), shape=(graph_set.num_nodes, width))
