"""GNN node inputs: Errica et al.'s (one-hot labels, attributes, degrees) and MWSP's tree IDs,
with vocabularies fitted on training graphs only (unseen trees to index 0)."""

from __future__ import annotations

import warnings
from collections.abc import Sequence

import numpy as np
import torch
from torch import nn
from torch_geometric.data import Data

from mwsp_torch.trees import TreeIDs

__all__ = [
    "OneHotLabels",
    "TreeIDEmbedding",
    "TreeIDVocabulary",
    "errica_node_features",
    "tree_id_features",
    "tree_id_inputs",
]


class TreeIDVocabulary(TreeIDs):
    """Deprecated alias of a fitted :class:`mwsp_torch.TreeIDs`: ``TreeIDs(k, labels,
    min_graphs=...).fit(training graphs)`` maps each scale's trees to embedding indices (index
    :data:`UNSEEN` for the rest) and writes them onto ``Data``. Kept for code that calls
    :meth:`transform`, which returns each graph's indices without writing them.

    Args:
        k (int): deepest scale (default ``1``).
        labels (str): label policy, as :class:`mwsp_torch.TreeIDs` (default ``"auto"``).
        min_graphs (int): as :class:`mwsp_torch.TreeIDs` (default ``1``).
    """

    def __init__(self, k: int = 1, labels: str = "auto", min_graphs: int = 1) -> None:
        warnings.warn(
            "TreeIDVocabulary is deprecated: use mwsp_torch.TreeIDs(k, labels, min_graphs=...).fit(graphs)",
            DeprecationWarning,
            stacklevel=2,
        )
        super().__init__(k=k, labels=labels, min_graphs=min_graphs)

    def transform(self, graphs) -> list[torch.Tensor]:
        """Per graph, ``[num_nodes, k + 1]`` int64 embedding indices (:data:`UNSEEN` for a tree
        ``fit`` did not see at that scale)."""
        if not hasattr(self, "known_"):
            raise ValueError("this TreeIDVocabulary is not fitted: call fit(training graphs) first")
        return [torch.from_numpy(self.indices(self.raw_ids(data))) for data in graphs]


def tree_id_inputs(graphs, y, vocabulary: TreeIDs) -> list[Data]:
    """The graphs as PyG ``Data`` for the models here: ``edge_index``, ``num_nodes``, ``y`` and
    ``tree_tokens``, the indices of ``vocabulary``, a fitted :class:`mwsp_torch.TreeIDs`."""
    y = np.asarray(y)
    if len(y) != len(graphs):
        raise ValueError(f"{len(graphs)} graphs but {len(y)} labels")
    return [
        Data(edge_index=g.edge_index, num_nodes=g.num_nodes, y=torch.tensor([int(label)]), tree_tokens=index)
        for g, index, label in zip(
            graphs, (torch.from_numpy(vocabulary.indices(vocabulary.raw_ids(g))) for g in graphs), y, strict=True
        )
    ]


class OneHotLabels(nn.Module):
    """One-hot scale-0 trees (the node labels): ``[num_nodes, sizes[0]]``, the column
    :data:`UNSEEN` for a label not seen in training. Errica et al.'s node input."""

    def __init__(self, sizes: Sequence[int]) -> None:
        super().__init__()
        self.out_dim = int(sizes[0])

    def forward(self, tree_tokens: torch.Tensor) -> torch.Tensor:
        return nn.functional.one_hot(tree_tokens[:, 0], self.out_dim).float()


class TreeIDEmbedding(nn.Module):
    """The sum over scales ``0..k`` of a learned embedding of each node's tree at that scale;
    row :data:`UNSEEN` of each scale's table is the one "unseen" embedding."""

    def __init__(self, sizes: Sequence[int], dim: int) -> None:
        super().__init__()
        self.tables = nn.ModuleList(nn.Embedding(int(size), dim) for size in sizes)
        self.out_dim = dim

    def forward(self, tree_tokens: torch.Tensor) -> torch.Tensor:
        return sum(table(tree_tokens[:, s]) for s, table in enumerate(self.tables))


def errica_node_features(graphs: Sequence[Data], attributes: bool = True) -> list[torch.Tensor]:
    """Per graph, ``[num_nodes, F]`` float32 node inputs as Errica et al. build them.

    One-hot node labels (``node_label``, one column per label value from the smallest to the
    largest in the dataset), preceded by the continuous ``node_attr`` where the graphs carry
    them and ``attributes`` is true (ENZYMES: 18 + 3 = 21 features); on graphs without node
    labels, the node's degree as one feature, as their ``--use-degree`` (``COLLABORATIVE_DEGREE``)
    setting builds it (``Graph.get_x``). The widths come from the whole dataset's labels (no
    class label is read), as theirs do. Which datasets they read attributes on is theirs to
    say, not the files': :func:`mwsp_torch.gnn_protocol.dataset_node_features`.

    Args:
        graphs (Sequence[Data]): the dataset's graphs (:func:`mwsp_torch.datasets.load_dataset`).
        attributes (bool): put ``node_attr`` before the labels where present (default ``True``).

    Returns:
        list[torch.Tensor]: one float32 matrix per graph.

    Raises:
        ValueError: naming the graph, where some graphs carry node labels (or attributes) and
            others do not, or attributes of another width.

    Examples:
        >>> import torch
        >>> from torch_geometric.data import Data
        >>> g = Data(edge_index=torch.tensor([[0, 1], [1, 0]]), num_nodes=2, node_label=torch.tensor([1, 3]))
        >>> errica_node_features([g])[0].tolist()
        [[1.0, 0.0, 0.0], [0.0, 0.0, 1.0]]
        >>> errica_node_features([Data(edge_index=torch.tensor([[0, 0, 1, 2], [1, 2, 0, 0]]), num_nodes=3)])[0].tolist()
        [[2.0], [1.0], [1.0]]
    """
    if not graphs:
        return []
    labelled = ["node_label" in g for g in graphs]
    if any(labelled) and not all(labelled):
        g = labelled.index(not labelled[0])
        raise ValueError(f"graph {g} {'has' if labelled[g] else 'lacks'} node_label, unlike graph 0")
    use_attr = attributes and "node_attr" in graphs[0]
    if use_attr:
        width = graphs[0].node_attr.shape[1]
        for g, data in enumerate(graphs):
            if "node_attr" not in data or data.node_attr.dim() != 2 or data.node_attr.shape[1] != width:
                raise ValueError(f"graph {g}: node_attr missing or not [num_nodes, {width}], unlike graph 0")
    if not labelled[0]:  # their degree feature, after the attributes where read
        degrees = [_degrees(g).float().unsqueeze(1) for g in graphs]
        return (
            [torch.cat([g.node_attr.float(), d], dim=1) for g, d in zip(graphs, degrees, strict=True)]
            if use_attr
            else degrees
        )
    codes = [g.node_label.reshape(g.num_nodes, -1)[:, 0].long() for g in graphs]
    low = min(int(c.min()) for c in codes if c.numel())
    high = max((int(c.max()) for c in codes if c.numel()), default=low)
    out = []
    for data, code in zip(graphs, codes, strict=True):
        one_hot = nn.functional.one_hot(code - low, high - low + 1).float()
        out.append(torch.cat([data.node_attr.float(), one_hot], dim=1) if use_attr else one_hot)
    return out


def _degrees(graph: Data) -> torch.Tensor:
    """Each node's degree as networkx's ``Graph.degree`` gives it on the simple graph their
    loader builds from the edge list: distinct neighbours, a self-loop counted twice."""
    edges = graph.edge_index
    loops = edges[0][edges[0] == edges[1]].unique()
    edges = edges[:, edges[0] != edges[1]]
    if edges.numel():
        edges = torch.unique(torch.cat([edges, edges.flip(0)], dim=1), dim=1)
    degree = torch.bincount(edges[0], minlength=graph.num_nodes)
    degree[loops] += 2
    return degree


def tree_id_features(graphs: Sequence[Data], tree_ids: TreeIDs, attributes: bool = True) -> list[torch.Tensor]:
    """Per graph, ``[num_nodes, F]`` float32 node inputs from MWSP's canonical tree IDs.

    For each scale ``s = 0..k`` of ``tree_ids`` (a fitted :class:`mwsp_torch.TreeIDs`), the
    one-hot of each node's index at that scale, ``sizes_[s]`` columns whose first is
    :data:`mwsp_torch.trees.UNSEEN` (a tree the fit did not see, or, with ``min_graphs``, saw
    too rarely), the blocks side by side (``F = sum(sizes_)``), preceded by the continuous
    ``node_attr`` where the graph carries them and ``attributes`` is true, as
    :func:`errica_node_features` puts them. A linear layer on these inputs is the sum over
    scales of a learned embedding of each node's tree (plus a bias). Scale 0 is the node
    label (or degree), so at ``k = 0`` this is Errica et al.'s one-hot input with labels
    unseen in the fit in a column of their own.

    Args:
        graphs (Sequence[Data]): the graphs to describe (training graphs or any other).
        tree_ids (TreeIDs): fitted on the training graphs only; never refitted here.
        attributes (bool): put ``node_attr`` first where present (default ``True``).

    Returns:
        list[torch.Tensor]: one float32 matrix per graph.

    Examples:
        >>> import torch
        >>> from torch_geometric.data import Data
        >>> from mwsp_torch import TreeIDs
        >>> path = Data(edge_index=torch.tensor([[0, 1, 1, 2], [1, 0, 2, 1]]), num_nodes=3,
        ...             node_label=torch.tensor([0, 0, 0]))
        >>> fitted = TreeIDs(k=1).fit([path])
        >>> fitted.sizes_, tree_id_features([path], fitted)[0].tolist()
        ([2, 3], [[0.0, 1.0, 0.0, 1.0, 0.0], [0.0, 1.0, 0.0, 0.0, 1.0], [0.0, 1.0, 0.0, 1.0, 0.0]])
    """
    if not hasattr(tree_ids, "known_"):
        raise ValueError("tree_id_features needs a fitted TreeIDs: call fit(training graphs) first")
    offsets = np.concatenate([[0], np.cumsum(tree_ids.sizes_)[:-1]]).astype(np.int64)
    width = int(sum(tree_ids.sizes_))
    out = []
    for data in graphs:
        index = torch.from_numpy(tree_ids.indices(tree_ids.raw_ids(data)) + offsets)
        one_hot = torch.zeros(index.shape[0], width).scatter_(1, index, 1.0)
        if attributes and "node_attr" in data:
            one_hot = torch.cat([data.node_attr.float(), one_hot], dim=1)
        out.append(one_hot)
    return out
