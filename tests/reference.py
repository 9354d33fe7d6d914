"""A deliberately naive implementation of docs/definition.md, sections 2-4 and 7 (edge labels,
attributes), for tests only.

Trees are nested tuples, every shortest path is enumerated one by one, rows
stay un-collapsed and W comes from ``ot.emd2`` on ``cdist`` costs. Slow and
obviously right is the point.
"""

from __future__ import annotations

from collections import deque

import numpy as np
import ot
from scipy.spatial.distance import cdist


def adjacency(num_nodes: int, edges) -> list[set[int]]:
    adj = [set() for _ in range(num_nodes)]
    for u, v in edges:
        if u != v:
            adj[u].add(v)
            adj[v].add(u)
    return adj


def bfs(adj, root: int) -> dict[int, int]:
    dist = {root: 0}
    queue = deque([root])
    while queue:
        u = queue.popleft()
        for w in adj[u]:
            if w not in dist:
                dist[w] = dist[u] + 1
                queue.append(w)
    return dist


def edge_label_map(edges, edge_labels):
    """``{(u, w): label}`` both ways (None without edge labels)."""
    if edge_labels is None:
        return None
    out = {}
    for (u, v), e in zip(edges, edge_labels, strict=True):
        if u != v:
            out[(u, v)] = out[(v, u)] = e
    return out


def tree(adj, labels, root: int, depth: int, elab=None):
    """T_depth(root) as a canonical nested tuple (label, sorted children); with edge labels a
    child is (label of the edge from its parent, its subtree)."""
    dist = bfs(adj, root)

    def sub(u, remaining):
        if remaining == 0:
            return (labels[u], ())
        if elab is None:
            kids = sorted(sub(w, remaining - 1) for w in adj[u] if dist.get(w) == dist[u] + 1)
        else:
            kids = sorted((elab[(u, w)], sub(w, remaining - 1)) for w in adj[u] if dist.get(w) == dist[u] + 1)
        return (labels[u], tuple(kids))

    return sub(root, depth)


def shortest_paths(adj, root: int, max_len: int):
    """Every shortest path from root with at most max_len edges, as node lists."""
    dist = bfs(adj, root)
    out = []

    def walk(path):
        out.append(list(path))
        u = path[-1]
        if dist[u] == max_len:
            return
        for w in sorted(adj[u]):
            if dist.get(w) == dist[u] + 1:
                walk(path + [w])

    walk([root])
    return out


def feature_rows(graphs, d: int, k: int, paths: str):
    """Dense node feature rows per graph over one shared column dictionary.

    graphs: list of (num_nodes, edges, labels) or (num_nodes, edges, labels, edge_labels),
    edge_labels one per item of edges.
    """
    per_node = []
    for graph in graphs:
        num_nodes, edges, labels = graph[:3]
        elab = edge_label_map(edges, graph[3] if len(graph) > 3 else None)
        adj = adjacency(num_nodes, edges)
        trees = [[tree(adj, labels, v, s, elab) for s in range(k + 1)] for v in range(num_nodes)]
        rows = []
        for v in range(num_nodes):
            all_paths = shortest_paths(adj, v, d)
            sigma = {}
            for p in all_paths:
                sigma[p[-1]] = sigma.get(p[-1], 0) + 1
            row = {}
            for s in range(k + 1):
                for p in all_paths:
                    rep = [trees[p[0]][s]]
                    for u, w in zip(p[:-1], p[1:], strict=True):
                        rep += ([] if elab is None else [("edge", elab[(u, w)])]) + [trees[w][s]]
                    rep = (s, tuple(rep))
                    weight = 1.0 / sigma[p[-1]] if paths == "split" else 1.0
                    row[rep] = row.get(rep, 0.0) + weight
            rows.append(row)
        per_node.append(rows)
    columns = sorted({c for rows in per_node for row in rows for c in row}, key=repr)
    index = {c: i for i, c in enumerate(columns)}
    dense = []
    for rows in per_node:
        mat = np.zeros((len(rows), len(columns)))
        for i, row in enumerate(rows):
            for c, value in row.items():
                mat[i, index[c]] = value
        dense.append(mat)
    return dense


def wasserstein(a: np.ndarray, b: np.ndarray) -> float:
    cost = cdist(a, b)  # differences first: exactly 0 between equal rows, unlike ot.dist's Gram form
    return float(ot.emd2(np.full(len(a), 1 / len(a)), np.full(len(b), 1 / len(b)), cost))


def attribute_rows(graphs, attributes, mode: str, d: int) -> list[np.ndarray]:
    """Standardised attributes (population std over all nodes; a constant column only
    centred, to zeros), then for ``"multiscale"`` the mean over the nodes at each distance
    1..d (zeros if none)."""
    stacked = np.concatenate([np.asarray(a, dtype=float) for a in attributes])
    mean, std = stacked.mean(0), stacked.std(0)
    constant = np.ptp(stacked, axis=0) == 0
    mean[constant], std[constant] = stacked[0, constant], 1.0
    out = []
    for graph, a in zip(graphs, attributes, strict=True):
        a = (np.asarray(a, dtype=float) - mean) / std
        if mode == "multiscale":
            adj = adjacency(graph[0], graph[1])
            blocks = [a]
            for j in range(1, d + 1):
                level = np.zeros_like(a)
                for v in range(graph[0]):
                    at = [u for u, dv in bfs(adj, v).items() if dv == j]
                    if at:
                        level[v] = a[at].mean(0)
                blocks.append(level)
            a = np.concatenate(blocks, axis=1)
        out.append(a)
    return out


def distance_matrix(
    graphs, d: int, k: int, paths: str, attributes=None, mode: str = "node", beta: float = 1.0
) -> np.ndarray:
    """All-pairs W; with ``attributes`` (one ``[n, width]`` array per graph) the rows are
    ``phi(v) || beta a(v)``."""
    rows = feature_rows(graphs, d, k, paths)
    if attributes is not None:
        extra = attribute_rows(graphs, attributes, mode, d)
        rows = [np.concatenate([r, beta * a], axis=1) for r, a in zip(rows, extra, strict=True)]
    n = len(rows)
    out = np.zeros((n, n))
    for i in range(n):
        for j in range(i + 1, n):
            out[i, j] = out[j, i] = wasserstein(rows[i], rows[j])
    return out
