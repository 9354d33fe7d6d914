"""A deliberately naive implementation of SPEC sections 2-4, for tests only.

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


def tree(adj, labels, root: int, depth: int):
    """T_depth(root) as a canonical nested tuple (label, sorted children)."""
    dist = bfs(adj, root)

    def sub(u, remaining):
        if remaining == 0:
            return (labels[u], ())
        kids = sorted(sub(w, remaining - 1) for w in adj[u] if dist.get(w) == dist[u] + 1)
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

    graphs: list of (num_nodes, edges, labels).
    """
    per_node = []
    for num_nodes, edges, labels in graphs:
        adj = adjacency(num_nodes, edges)
        trees = [[tree(adj, labels, v, s) for s in range(k + 1)] for v in range(num_nodes)]
        rows = []
        for v in range(num_nodes):
            all_paths = shortest_paths(adj, v, d)
            sigma = {}
            for p in all_paths:
                sigma[p[-1]] = sigma.get(p[-1], 0) + 1
            row = {}
            for s in range(k + 1):
                for p in all_paths:
                    rep = (s, tuple(trees[w][s] for w in p))
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


def distance_matrix(graphs, d: int, k: int, paths: str) -> np.ndarray:
    rows = feature_rows(graphs, d, k, paths)
    n = len(rows)
    out = np.zeros((n, n))
    for i in range(n):
        for j in range(i + 1, n):
            out[i, j] = out[j, i] = wasserstein(rows[i], rows[j])
    return out
