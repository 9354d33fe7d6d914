"""Continuous node attributes: the dense part ``beta * a(v)`` of a node's row (``docs/definition.md``, section 7).

With ``MWSP(attributes="node" | "multiscale", beta=...)`` a node's row is
``phi(v) || beta * a(v)``, and the ground cost stays Euclidean on these rows, so W stays the
exact W of the longer rows. Attributes are read from ``data.node_attr`` (what
:func:`mwsp_torch.datasets.load_tudataset` attaches from ``NAME_node_attributes.txt``), else
from ``data.x`` when ``x`` does not hold the labels (it is not one-hot, and labels come from
``node_label`` or a policy). Each column is standardised with the mean and standard deviation
of the graphs given to ``fit`` (:func:`standardisation`); ``"multiscale"`` appends, for
``j = 1..d``, the mean attribute vector of the nodes at distance exactly ``j``
(:func:`multiscale_attributes`, zeros where there is none).

PyG's own layout is read too: ``TUDataset(name, use_node_attr=True)`` puts each node's
continuous attributes and then its one-hot labels side by side in ``x``. With the number of
attribute columns (``MWSP(num_node_attributes=...)``, or read from the dataset itself:
:func:`dataset_attribute_columns`), :func:`split_attribute_columns` reads the first columns
as ``node_attr`` and the rest as the labels, so W is the W of ``node_attr`` and the labels given
apart.

Sums are taken over sorted values, so a mean is the same bits whatever the order of the
nodes or the graphs: renumbering a graph still gives W = 0 exactly. The attribute columns go
in front of the path columns of the sparse rows (:func:`with_attributes`): the ground costs
of :mod:`mwsp_torch.transport.costs` read them like any other column, and no dense
node x vocabulary array is built.
"""

from __future__ import annotations

import copy

import numpy as np
import scipy.sparse as sp
from scipy.sparse.csgraph import shortest_path

from mwsp_torch.graphs import GraphSet, as_numpy

__all__ = [
    "ATTRIBUTE_MODES",
    "dataset_attribute_columns",
    "multiscale_attributes",
    "read_attributes",
    "split_attribute_columns",
    "standardisation",
    "with_attributes",
]

ATTRIBUTE_MODES = ("node", "multiscale")


def _is_one_hot(values: np.ndarray) -> bool:
    return (
        values.ndim == 2
        and values.shape[1] >= 2
        and bool(np.all((values == 0) | (values == 1)) and np.all(values.sum(1) == 1))
    )


def dataset_attribute_columns(graphs) -> int:
    """How many leading columns of ``x`` are continuous attributes in a PyG ``TUDataset``
    loaded with ``use_node_attr=True`` (its ``num_node_attributes``); 0 for any other
    dataset or list of graphs.

    ``TUDataset`` keeps ``num_node_attributes`` whether or not ``x`` holds them (without
    ``use_node_attr`` it cuts them off), so the count is taken only where ``x`` is as wide as
    the attributes and the labels together.
    """
    sizes = getattr(graphs, "sizes", None)
    if not isinstance(sizes, dict) or "num_node_attributes" not in sizes:
        return 0
    count = int(sizes["num_node_attributes"])
    x = getattr(getattr(graphs, "_data", None), "x", None)
    if count <= 0 or x is None or x.dim() != 2 or x.size(1) != count + int(sizes.get("num_node_labels", 0)):
        return 0
    return count


def split_attribute_columns(graphs, num_node_attributes: int, labels: str = "auto") -> list:
    """Graphs whose ``x`` is ``[attributes | one-hot labels]`` (PyG's ``TUDataset`` with
    ``use_node_attr=True``) as graphs with ``node_attr = x[:, :num_node_attributes]`` and
    ``x = x[:, num_node_attributes:]``, the labels; shallow copies, the input untouched.

    A graph that already has ``node_attr`` keeps it, and one with ``node_label`` takes its
    labels from there, as everywhere else.

    Args:
        graphs: a list of PyG ``Data`` or a PyG dataset.
        num_node_attributes (int): the leading attribute columns of ``x`` (``0``: the graphs as
            they are).
        labels (str): the label policy; under ``"auto"`` a graph whose ``x`` holds attributes
            only, and no ``node_label``, has no labels.

    Raises:
        ValueError: naming the graph, for an ``x`` missing or narrower than
            ``num_node_attributes``, or (``labels="auto"``) holding no label columns.
    """
    from mwsp_torch.graphs import as_graph_list

    graphs = as_graph_list(graphs)
    if num_node_attributes == 0:
        return graphs
    out = []
    for index, data in enumerate(graphs):
        x = getattr(data, "x", None)
        if x is None or getattr(x, "ndim", 0) != 2 or x.shape[1] < num_node_attributes:
            shape = "none" if x is None else f"shape {list(getattr(x, 'shape', []))}"
            raise ValueError(
                f"graph {index}: num_node_attributes={num_node_attributes} reads the first "
                f"{num_node_attributes} columns of x as attributes, but x has {shape}"
            )
        view = copy.copy(data)
        if getattr(data, "node_attr", None) is None:
            view.node_attr = x[:, :num_node_attributes]
        if x.shape[1] > num_node_attributes:
            view.x = x[:, num_node_attributes:]
        else:
            if labels == "auto" and getattr(data, "node_label", None) is None:
                raise ValueError(
                    f"graph {index}: x holds its {num_node_attributes} attribute columns and no label columns "
                    "(num_node_attributes); choose labels='degree' or labels='uniform', or pass node_label"
                )
            del view.x
        out.append(view)
    return out


def read_attributes(graphs, sizes: np.ndarray, labels: str = "auto") -> np.ndarray:
    """Every node's attribute vector, ``[num_nodes, width]`` float64, graphs in order.

    Args:
        graphs: a list of PyG ``Data`` (already checked by :func:`mwsp_torch.labels.to_graph_set`).
        sizes (np.ndarray): their numbers of nodes (``GraphSet.sizes``).
        labels (str): the label policy; under ``"auto"`` a graph without ``node_label`` has its
            labels in ``x``, so ``x`` cannot be its attributes.

    Raises:
        ValueError: naming the graph, for a graph without attributes, attributes that are NaN
            or infinite, not one row per node, or of another width than the graphs before it.
    """
    blocks = []
    width = None
    for index, data in enumerate(graphs):
        n = int(sizes[index])
        value = getattr(data, "node_attr", None)
        source = "node_attr"
        if value is None:
            x = getattr(data, "x", None)
            labels_in_x = labels == "auto" and getattr(data, "node_label", None) is None
            if x is not None and not labels_in_x:
                value, source = x, "x"
        if value is None:
            raise ValueError(
                f"graph {index}: has no node attributes (node_attr, or an x that does not hold the labels); "
                "attributes= needs them on every graph"
            )
        values = as_numpy(value, source, index)
        if values.dtype.kind not in "biuf":
            raise ValueError(f"graph {index}: {source} has dtype {values.dtype}; attributes must be numbers")
        if values.ndim == 1:
            values = values[:, None]
        if values.ndim != 2 or values.shape[0] != n or values.shape[1] == 0:
            raise ValueError(
                f"graph {index}: {source} must have one row per node ({n}), got shape {list(values.shape)}"
            )
        if source == "x" and _is_one_hot(values):
            raise ValueError(
                f"graph {index}: x is one-hot, which reads as labels, not attributes; pass the attributes as node_attr"
            )
        values = values.astype(np.float64)
        if not np.all(np.isfinite(values)):
            node = int(np.argmax(~np.all(np.isfinite(values), axis=1)))
            raise ValueError(f"graph {index}: node {node}'s attributes ({source}) are NaN or infinite")
        if width is None:
            width = values.shape[1]
        elif values.shape[1] != width:
            raise ValueError(
                f"graph {index}: {values.shape[1]} attribute columns ({source}), the graphs before it have {width}"
            )
        blocks.append(values)
    return np.concatenate(blocks)


def _sorted_sum(values: np.ndarray, axis: int) -> np.ndarray:
    """Sum along ``axis`` of the values sorted along it: the same bits for any order of them."""
    return np.sort(values, axis=axis).sum(axis=axis)


def standardisation(attributes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(mean, scale)`` of each column (population standard deviation), from sorted sums, so
    that listing the nodes or graphs in another order changes no bit. A constant column (its
    largest value equal to its smallest) gets that value as mean and scale 1: centred only,
    to exact zeros (its rounded deviation, about 1e-17, would otherwise blow it up)."""
    n = attributes.shape[0]
    mean = _sorted_sum(attributes, 0) / n
    scale = np.sqrt(_sorted_sum((attributes - mean) ** 2, 0) / n)
    constant = attributes.max(axis=0) == attributes.min(axis=0)
    mean[constant] = attributes[0, constant]
    scale[constant] = 1.0
    return mean, scale


def multiscale_attributes(graph_set: GraphSet, attributes: np.ndarray, d: int) -> np.ndarray:
    """``a(v) || m_1(v) || ... || m_d(v)``, ``m_j(v)`` the mean attribute vector of the nodes at
    shortest-path distance exactly ``j`` from ``v`` (zeros when there is none).

    One all-pairs BFS per graph (``scipy.sparse.csgraph``); each mean a sorted sum divided by
    the count. Memory: ``n^2 x width`` floats for a graph of ``n`` nodes.
    """
    width = attributes.shape[1]
    out = np.zeros((attributes.shape[0], width * (d + 1)))
    out[:, :width] = attributes
    if d == 0:
        return out
    for g in range(graph_set.num_graphs):
        lo, hi = int(graph_set.ptr[g]), int(graph_set.ptr[g + 1])
        n = hi - lo
        block = sp.csr_matrix(
            (
                np.ones(graph_set.indptr[hi] - graph_set.indptr[lo]),
                graph_set.indices[graph_set.indptr[lo] : graph_set.indptr[hi]] - lo,
                graph_set.indptr[lo : hi + 1] - graph_set.indptr[lo],
            ),
            shape=(n, n),
        )
        dist = shortest_path(block, unweighted=True, directed=False)
        x = attributes[lo:hi]
        for j in range(1, d + 1):
            at = dist == j
            count = at.sum(1)
            if not count.any():
                break
            sums = _sorted_sum(np.where(at[:, :, None], x[None, :, :], 0.0), 1)
            out[lo:hi, j * width : (j + 1) * width] = sums / np.maximum(count, 1)[:, None]
    return out


def with_attributes(features: sp.csr_matrix, attributes: np.ndarray, beta: float) -> sp.csr_matrix:
    """Rows ``beta * a(v) || phi(v)``: the attribute columns first (``0 .. width - 1``), the path
    columns after them, shifted by ``width``; explicit zeros dropped, columns sorted per row.
    (The order of columns changes no Euclidean distance; first, their positions do not move
    when ``transform`` meets new path columns.)"""
    rows = sp.hstack([sp.csr_matrix(beta * attributes), features], format="csr")  # hstack shifts the paths
    rows.eliminate_zeros()
    rows.sort_indices()
    return rows
