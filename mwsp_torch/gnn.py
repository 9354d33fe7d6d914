"""GNN inputs from MWSP's canonical tree IDs, and the GIN and structure-agnostic models on them.

The hybrid "GIN on tree IDs" feeds a GIN learned embeddings of each node's canonical trees
at scales ``0..k`` (:class:`mwsp_torch.TreeIDs`) instead of its label alone. Honesty needs
the embedding's vocabulary to come from the training graphs only: :class:`TreeIDVocabulary`
is fitted on them, maps each scale's trees seen there to ``1..V_s``, and every other tree to
index 0, :data:`UNSEEN`, one shared "unseen" embedding; so no test graph shapes what is
learned. Scale 0 trees are the node labels themselves (or degrees, on unlabelled graphs), so
the same vocabulary at ``k=0`` gives the plain GIN and the structure-agnostic baseline their
one-hot labels (:class:`OneHotLabels`), as Errica et al. (2020) feed them.

The models are PyG's own layers (``GINConv``, ``global_add_pool``/``global_mean_pool``):

- :class:`GIN` (Xu et al. 2019, as in Errica et al.'s ``GIN``): GIN layers with a
  two-layer MLP each, a readout of every layer's node states (the input's too), each read
  out graph-wise and mapped to class scores by its own linear layer, the scores summed.
- :class:`Baseline`: Errica et al.'s structure-agnostic baseline: the sum (readout) of the
  node inputs, then an MLP; it sees no edges.

:func:`train_classifier` trains either with Adam on cross-entropy and early stopping on a
validation set's accuracy (ties: its loss), as Errica et al. select; :func:`graph_embeddings`
gives a trained GIN's graph embeddings of new graphs, from which
``experiments/gnn_vs_kernel.py`` builds the RBF kernel it fuses with MWSP's.

Errica et al.'s own models and training, for :mod:`mwsp_torch.gnn_protocol`:

- :func:`errica_node_features`: their node inputs (one-hot labels, continuous attributes
  beside them where the dataset has some, one-hot degrees on unlabelled graphs).
- :class:`ErricaGIN`, :class:`MolecularFingerprint`, :class:`DeepMultisets`: their GIN and
  their two structure-agnostic baselines (``models/graph_classifiers/`` of
  diningphil/gnn-comparison), on plain tensors ``(x, edge_index, batch, num_graphs)``.
- :class:`PackedGraphs`: graphs collated once into one set of tensors; a mini-batch is
  gathered from it by index (a few tensor ops, no per-graph Python), so an epoch costs the
  model's arithmetic and not PyG's ``Batch.from_data_list`` per step.
- :func:`fit_classifier`: Adam with their optional ``StepLR`` and their ``Patience`` early
  stopper (on validation accuracy or loss), keeping the best epoch's weights.
"""

from __future__ import annotations

import copy
import time
import warnings
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn
from torch_geometric.data import Data
from torch_geometric.loader import DataLoader
from torch_geometric.nn import GINConv, global_add_pool, global_mean_pool
from tqdm.auto import tqdm

from mwsp_torch.nn import WassersteinPooling
from mwsp_torch.trees import TreeIDs

READOUTS = ("sum", "mean")


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


def _pool(readout: str):
    if readout not in READOUTS:
        raise ValueError(f"readout must be one of {READOUTS}, got {readout!r}")
    return global_add_pool if readout == "sum" else global_mean_pool


class GIN(nn.Module):
    """GIN on PyG's ``GINConv``, every layer read out (Xu et al. 2019; Errica et al. 2020).

    Args:
        encoder (nn.Module): node inputs from ``tree_tokens`` (:class:`OneHotLabels` or
            :class:`TreeIDEmbedding`), with an ``out_dim``.
        hidden (int): width of every layer.
        num_layers (int): GIN layers.
        num_classes (int): classes.
        dropout (float): dropout on each layer's class scores (default ``0.5``).
        readout (str): ``"sum"`` or ``"mean"`` (default ``"sum"``).
    """

    def __init__(
        self,
        encoder: nn.Module,
        hidden: int,
        num_layers: int,
        num_classes: int,
        dropout: float = 0.5,
        readout: str = "sum",
    ) -> None:
        super().__init__()
        self.encoder = encoder
        self.pool = _pool(readout)
        dims = [encoder.out_dim] + [hidden] * num_layers
        self.convs = nn.ModuleList(
            GINConv(
                nn.Sequential(
                    nn.Linear(dims[i], hidden),
                    nn.BatchNorm1d(hidden),
                    nn.ReLU(),
                    nn.Linear(hidden, hidden),
                    nn.BatchNorm1d(hidden),
                    nn.ReLU(),
                ),
                train_eps=True,
            )
            for i in range(num_layers)
        )
        self.heads = nn.ModuleList(nn.Linear(dim, num_classes) for dim in dims)
        self.dropout = nn.Dropout(dropout)

    def _readouts(self, data) -> list[torch.Tensor]:
        h = self.encoder(data.tree_tokens)
        out = [self.pool(h, data.batch)]
        for conv in self.convs:
            h = conv(h, data.edge_index)
            out.append(self.pool(h, data.batch))
        return out

    def forward(self, data) -> torch.Tensor:
        return sum(self.dropout(head(r)) for head, r in zip(self.heads, self._readouts(data), strict=True))

    def embed(self, data) -> torch.Tensor:
        """``[num_graphs, in + layers * hidden]``: every layer's readout, concatenated."""
        return torch.cat(self._readouts(data), dim=1)


class Baseline(nn.Module):
    """Errica et al.'s structure-agnostic baseline: the readout of the node inputs (no edges), then an MLP.

    Args:
        encoder (nn.Module): node inputs (:class:`OneHotLabels`: the sum of one-hot labels).
        hidden (int): the MLP's width.
        num_classes (int): classes.
        dropout (float): dropout before the output layer (default ``0.0``).
        readout (str): ``"sum"`` (Errica's) or ``"mean"`` (default ``"sum"``).
    """

    def __init__(
        self, encoder: nn.Module, hidden: int, num_classes: int, dropout: float = 0.0, readout: str = "sum"
    ) -> None:
        super().__init__()
        self.encoder = encoder
        self.pool = _pool(readout)
        self.mlp = nn.Sequential(
            nn.Linear(encoder.out_dim, hidden), nn.ReLU(), nn.Dropout(dropout), nn.Linear(hidden, num_classes)
        )

    def forward(self, data) -> torch.Tensor:
        return self.mlp(self.pool(self.encoder(data.tree_tokens), data.batch))

    def embed(self, data) -> torch.Tensor:
        return self.pool(self.encoder(data.tree_tokens), data.batch)


@torch.no_grad()
def _scores(model: nn.Module, batches, device, embed: bool = False) -> torch.Tensor:
    model.eval()
    out = []
    for batch in batches:
        batch = batch.to(device)
        out.append((model.embed(batch) if embed else model(batch)).cpu())
    return torch.cat(out)


def predict(model: nn.Module, graphs: list[Data], device="cpu", batch_size: int = 256) -> np.ndarray:
    """Predicted classes of ``graphs`` (``tree_id_inputs``' Data)."""
    return _scores(model, DataLoader(graphs, batch_size=batch_size), device).argmax(1).numpy()


def accuracy(model: nn.Module, graphs: list[Data], device="cpu", batch_size: int = 256) -> float:
    """Accuracy in percent on ``graphs`` (their ``y``)."""
    y = torch.cat([g.y for g in graphs]).numpy()
    return float(100.0 * np.mean(predict(model, graphs, device, batch_size) == y))


def graph_embeddings(model: nn.Module, graphs: list[Data], device="cpu", batch_size: int = 256) -> np.ndarray:
    """``[num_graphs, dim]`` float64 graph embeddings of a trained model (``model.embed``), for new graphs too."""
    return _scores(model, DataLoader(graphs, batch_size=batch_size), device, embed=True).double().numpy()


def train_classifier(
    model: nn.Module,
    train: list[Data],
    validation: list[Data],
    lr: float = 0.01,
    batch_size: int = 32,
    max_epochs: int = 100,
    patience: int = 20,
    device="cpu",
    seed: int = 0,
    progress: bool | None = False,
    desc: str = "train",
) -> dict:
    """Train with Adam on cross-entropy, stopping early on the validation set.

    The model kept is that of the epoch with the best validation accuracy (ties: the lower
    validation loss), as Errica et al. select; training stops ``patience`` epochs after it.

    Args:
        model (nn.Module): :class:`GIN` or :class:`Baseline`, moved to ``device`` here.
        train, validation (list[Data]): :func:`tree_id_inputs`' graphs.
        lr (float): Adam's learning rate (default ``0.01``).
        batch_size (int): graphs per step (default ``32``).
        max_epochs (int): at most this many epochs (default ``100``).
        patience (int): epochs without a better validation score before stopping (default ``20``).
        device: torch device (default ``"cpu"``).
        seed (int): seeds torch (initialisation, dropout, shuffling) (default ``0``).
        progress (bool, optional): a tqdm bar over epochs (default ``False``).
        desc (str): the bar's label.

    Returns:
        dict with ``validation_accuracy`` (percent), ``validation_loss``, ``best_epoch``
        (from 1), ``epochs`` (run), ``seconds``; the model holds the best epoch's weights.
    """
    if not train or not validation:
        raise ValueError(f"training needs graphs to train and validate on, got {len(train)} and {len(validation)}")
    torch.manual_seed(seed)
    generator = torch.Generator().manual_seed(seed)
    model.to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    loader = DataLoader(
        train, batch_size=batch_size, shuffle=True, generator=generator, drop_last=len(train) > batch_size
    )
    y_valid = torch.cat([g.y for g in validation])
    valid_batches = list(DataLoader(validation, batch_size=256, shuffle=False))  # collated once, not per epoch
    best, best_state, best_epoch, epoch = (-1.0, float("inf")), None, 0, 0
    start = time.perf_counter()
    with tqdm(total=max_epochs, desc=desc, unit="epoch", disable=None if progress is None else not progress) as bar:
        for epoch in range(1, max_epochs + 1):
            model.train()
            for batch in loader:
                batch = batch.to(device)
                optimizer.zero_grad()
                loss = nn.functional.cross_entropy(model(batch), batch.y)
                loss.backward()
                optimizer.step()
            scores = _scores(model, valid_batches, device)
            valid = (
                float(100.0 * (scores.argmax(1) == y_valid).float().mean()),
                float(nn.functional.cross_entropy(scores, y_valid)),
            )
            if valid[0] > best[0] or (valid[0] == best[0] and valid[1] < best[1]):
                best, best_epoch = valid, epoch
                best_state = copy.deepcopy(model.state_dict())
            bar.update()
            bar.set_postfix(valid=f"{valid[0]:.1f}", best=f"{best[0]:.1f}")
            if epoch - best_epoch >= patience:
                break
    model.load_state_dict(best_state)
    return {
        "validation_accuracy": best[0],
        "validation_loss": best[1],
        "best_epoch": best_epoch,
        "epochs": epoch,
        "seconds": time.perf_counter() - start,
    }


# ---------------------------------------------------------------- Errica et al.'s models and training


def errica_node_features(graphs: Sequence[Data], attributes: bool = True) -> list[torch.Tensor]:
    """Per graph, ``[num_nodes, F]`` float32 node inputs as Errica et al. build them.

    One-hot node labels (``node_label``, one column per label value from the smallest to the
    largest in the dataset), preceded by the continuous ``node_attr`` where the graphs carry
    them and ``attributes`` is true (ENZYMES: 18 + 3 = 21 features; PROTEINS_full: 29 + 3);
    on graphs without node labels, the one-hot degree (0 to the dataset's largest degree), as
    their ``COLLABORATIVE_DEGREE`` setting. The widths come from the whole dataset's labels and
    degrees (no class label is read), as theirs do.

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
    if labelled[0]:
        codes = [g.node_label.reshape(g.num_nodes, -1)[:, 0].long() for g in graphs]
    else:
        codes = [torch.bincount(g.edge_index[0], minlength=g.num_nodes).long() for g in graphs]
    low = 0 if not labelled[0] else min(int(c.min()) for c in codes if c.numel())
    high = max((int(c.max()) for c in codes if c.numel()), default=low)
    out = []
    for data, code in zip(graphs, codes, strict=True):
        one_hot = nn.functional.one_hot(code - low, high - low + 1).float()
        out.append(torch.cat([data.node_attr.float(), one_hot], dim=1) if use_attr else one_hot)
    return out


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


@dataclass
class GraphBatch:
    """A mini-batch as the models here read it: node inputs ``x [N, F]``, ``edge_index [2, E]``
    (batch-local), ``batch [N]`` (each node's graph), ``num_graphs`` and class labels ``y``."""

    x: torch.Tensor
    edge_index: torch.Tensor
    batch: torch.Tensor
    num_graphs: int
    y: torch.Tensor


def _concat_ranges(starts: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """``cat([arange(s, s + l) for s, l in zip(starts, lengths)])`` without a Python loop."""
    total = int(lengths.sum())
    if total == 0:
        return torch.zeros(0, dtype=torch.long)
    begins = torch.cumsum(lengths, 0) - lengths
    return torch.arange(total) + torch.repeat_interleave(starts - begins, lengths)


class PackedGraphs:
    """Graphs collated once: every node's input in one matrix, every edge in one list.

    ``batch(index)`` gathers the graphs ``index`` (positions in this set) into a
    :class:`GraphBatch` with a handful of tensor operations whose cost grows with the batch,
    not the set; PyG's ``DataLoader`` instead rebuilds a ``Batch`` from a list of ``Data``
    at every step. The batch is exactly the one PyG would collate (same node order, edges
    renumbered the same way). Node inputs, edges and labels live on one device (:meth:`to`);
    the bookkeeping of where each graph starts stays on the CPU, where the gathering indices
    are computed.

    Args:
        x (Sequence[torch.Tensor]): per graph, ``[num_nodes, F]`` node inputs.
        edge_index (Sequence[torch.Tensor]): per graph, ``[2, E]`` graph-local edges.
        y: ``[num_graphs]`` class labels.

    Raises:
        ValueError: naming the graph, for inputs of another width, edges outside the graph,
            or lengths that differ.
    """

    def __init__(self, x: Sequence[torch.Tensor], edge_index: Sequence[torch.Tensor], y) -> None:
        y = (y.detach().cpu() if torch.is_tensor(y) else torch.as_tensor(np.asarray(y))).long().reshape(-1)
        if not (len(x) == len(edge_index) == len(y)):
            raise ValueError(f"{len(x)} node-input matrices, {len(edge_index)} edge lists and {len(y)} labels")
        if len(x) == 0:
            raise ValueError("no graphs to pack")
        width = x[0].shape[1]
        nodes = torch.tensor([int(m.shape[0]) for m in x], dtype=torch.long)
        edges = torch.tensor([int(e.shape[1]) for e in edge_index], dtype=torch.long)
        for g, (m, e) in enumerate(zip(x, edge_index, strict=True)):
            if m.dim() != 2 or m.shape[1] != width:
                raise ValueError(f"graph {g}: node inputs of shape {tuple(m.shape)}, expected [num_nodes, {width}]")
            if e.numel() and (int(e.min()) < 0 or int(e.max()) >= m.shape[0]):
                raise ValueError(f"graph {g}: an edge outside its {m.shape[0]} nodes")
        self.x = torch.cat([m.float() for m in x])
        self.node_ptr = torch.cat([torch.zeros(1, dtype=torch.long), torch.cumsum(nodes, 0)])
        self.edge_ptr = torch.cat([torch.zeros(1, dtype=torch.long), torch.cumsum(edges, 0)])
        device = self.x.device
        self.edge_index = torch.cat([e.long() for e in edge_index], dim=1).to(device)  # graph-local node ids
        self.num_nodes, self.num_edges, self.y = nodes, edges, y.to(device)

    @property
    def device(self) -> torch.device:
        return self.x.device

    def to(self, device) -> PackedGraphs:
        """The same graphs with node inputs, edges and labels on ``device`` (self where they are)."""
        if torch.device(device) == self.device:
            return self
        out = copy.copy(self)
        out.x, out.edge_index, out.y = self.x.to(device), self.edge_index.to(device), self.y.to(device)
        return out

    @classmethod
    def from_data(cls, graphs: Sequence[Data], y=None) -> PackedGraphs:
        """Pack PyG ``Data`` carrying ``x`` (and ``y``, unless given)."""
        if y is None:
            y = [int(g.y.reshape(-1)[0]) for g in graphs]
        return cls([g.x for g in graphs], [g.edge_index for g in graphs], y)

    def __len__(self) -> int:
        return len(self.y)

    def pooled(self) -> PackedGraphs:
        """Each graph as one node carrying the sum of its node inputs, and no edges: what a
        model that reads only the sum (:class:`MolecularFingerprint`) sees, gathered once."""
        graph_of_node = torch.repeat_interleave(torch.arange(len(self)), self.num_nodes).to(self.device)
        sums = _readout(self.x, graph_of_node, len(self), "sum")
        empty = torch.zeros(2, 0, dtype=torch.long, device=self.device)
        return PackedGraphs(list(sums.unsqueeze(1)), [empty] * len(self), self.y)

    def subset(self, index) -> PackedGraphs:
        """The graphs ``index`` as a set of their own (for a fold's train, validation or test part)."""
        index = torch.as_tensor(np.asarray(index), dtype=torch.long).reshape(-1)
        nodes = _concat_ranges(self.node_ptr[index], self.num_nodes[index]).to(self.device)
        edges = _concat_ranges(self.edge_ptr[index], self.num_edges[index]).to(self.device)
        out = PackedGraphs.__new__(PackedGraphs)
        out.x, out.edge_index = self.x.index_select(0, nodes), self.edge_index.index_select(1, edges)
        out.y = self.y.index_select(0, index.to(self.device))
        out.num_nodes, out.num_edges = self.num_nodes[index], self.num_edges[index]
        out.node_ptr = torch.cat([torch.zeros(1, dtype=torch.long), torch.cumsum(out.num_nodes, 0)])
        out.edge_ptr = torch.cat([torch.zeros(1, dtype=torch.long), torch.cumsum(out.num_edges, 0)])
        return out

    def batch(self, index: torch.Tensor | None = None) -> GraphBatch:
        """The graphs ``index`` (default: all, in order) as one :class:`GraphBatch`."""
        index = torch.arange(len(self)) if index is None else index.cpu()
        nodes_per_graph, edges_per_graph = self.num_nodes[index], self.num_edges[index]
        nodes = _concat_ranges(self.node_ptr[index], nodes_per_graph)
        edges = _concat_ranges(self.edge_ptr[index], edges_per_graph)
        # Graph-local ids plus where each graph starts in the batch, as PyG's collate does.
        starts = torch.cumsum(nodes_per_graph, 0) - nodes_per_graph
        shift = torch.repeat_interleave(starts, edges_per_graph)
        batch = torch.repeat_interleave(torch.arange(len(index)), nodes_per_graph)
        device = self.device
        return GraphBatch(
            self.x.index_select(0, nodes.to(device)),
            self.edge_index.index_select(1, edges.to(device)) + shift.to(device),
            batch.to(device),
            len(index),
            self.y.index_select(0, index.to(device)),
        )


def _readout(h: torch.Tensor, batch: torch.Tensor, num_graphs: int, aggregation: str) -> torch.Tensor:
    out = h.new_zeros(num_graphs, h.shape[1]).index_add_(0, batch, h)
    if aggregation == "mean":
        out = out / torch.bincount(batch, minlength=num_graphs).clamp(min=1).unsqueeze(1).to(h.dtype)
    return out


def _mlp2(dim_in: int, dim: int) -> nn.Sequential:
    return nn.Sequential(
        nn.Linear(dim_in, dim), nn.BatchNorm1d(dim), nn.ReLU(), nn.Linear(dim, dim), nn.BatchNorm1d(dim), nn.ReLU()
    )


class ErricaGIN(nn.Module):
    """Errica et al.'s GIN (``models/graph_classifiers/GIN.py``; Xu et al. 2019).

    A first two-layer MLP (Linear, BatchNorm, ReLU twice) of width ``hidden_units[0]``, then
    one GIN layer ``h' = MLP((1 + eps) h + sum of neighbours' h)`` per entry of
    ``hidden_units``; each of these ``1 + len(hidden_units)`` stages is read out graph-wise
    (sum or mean), mapped to class scores by its own linear layer, dropped out, and the scores
    summed. As theirs, the first stage is mapped before it is read out, the others after. Their
    first stage's dropout also acts at evaluation (``F.dropout`` without ``training=``), an
    oversight not copied here: evaluation is deterministic.

    Args:
        in_dim (int): node input width.
        num_classes (int): classes.
        hidden_units (Sequence[int]): widths of the GIN layers (``[64, 64, 64, 64]``, ...).
        train_eps (bool): learn ``eps`` (initially 0) (default ``True``).
        aggregation (str): graph readout, ``"sum"`` or ``"mean"`` (default ``"sum"``).
        dropout (float): dropout on each stage's class scores (default ``0.5``).
    """

    def __init__(
        self,
        in_dim: int,
        num_classes: int,
        hidden_units: Sequence[int] = (64, 64, 64, 64),
        train_eps: bool = True,
        aggregation: str = "sum",
        dropout: float = 0.5,
    ) -> None:
        super().__init__()
        if aggregation not in READOUTS:
            raise ValueError(f"aggregation must be one of {READOUTS}, got {aggregation!r}")
        self.aggregation, self.dropout = aggregation, float(dropout)
        dims = _gin_stages(self, in_dim, hidden_units, train_eps)
        self.linears = nn.ModuleList(nn.Linear(d, num_classes) for d in dims)

    def node_states(self, x: torch.Tensor, edge_index: torch.Tensor) -> list[torch.Tensor]:
        """Each stage's ``[N, width]`` node states: the first MLP's, then every GIN layer's."""
        return list(_gin_node_states(self, x, edge_index))

    def forward(self, x: torch.Tensor, edge_index: torch.Tensor, batch: torch.Tensor, num_graphs: int):
        drop = nn.functional.dropout
        out = None
        # Each stage read out as soon as it is computed: the order autograd sums gradients in.
        for stage, h in enumerate(_gin_node_states(self, x, edge_index)):
            if stage == 0:
                out = drop(_readout(self.linears[0](h), batch, num_graphs, self.aggregation), self.dropout,
                           self.training)  # fmt: skip
            else:
                pooled = _readout(h, batch, num_graphs, self.aggregation)
                out = out + drop(self.linears[stage](pooled), self.dropout, self.training)
        return out


def _gin_stages(module: nn.Module, in_dim: int, hidden_units: Sequence[int], train_eps: bool) -> list[int]:
    """Give ``module`` Errica et al.'s GIN stages (``first``, ``mlps``, ``eps``), built in
    this order (so seeded weights are the same wherever they are built); returns each stage's width."""
    if not hidden_units:
        raise ValueError("hidden_units needs at least one layer width")
    dims = [int(hidden_units[0])] + [int(h) for h in hidden_units]
    module.first = _mlp2(in_dim, dims[0])
    module.mlps = nn.ModuleList(_mlp2(dims[i - 1], dims[i]) for i in range(1, len(dims)))
    if train_eps:
        module.eps = nn.Parameter(torch.zeros(len(module.mlps)))
    else:
        module.register_buffer("eps", torch.zeros(len(module.mlps)))
    return dims


def _gin_node_states(module: nn.Module, x: torch.Tensor, edge_index: torch.Tensor) -> Iterator[torch.Tensor]:
    """The node states of :func:`_gin_stages`' stages, one at a time: ``first(x)``, then
    ``h' = MLP((1 + eps) h + sum of neighbours' h)`` per GIN layer."""
    h = module.first(x)
    yield h
    src, dst = edge_index[0], edge_index[1]
    for layer, mlp in enumerate(module.mlps):
        # GINConv's sum of the neighbours' states (messages flow source -> target).
        neighbours = torch.zeros_like(h).index_add_(0, dst, h.index_select(0, src))  # 7x h[src]
        h = mlp((1 + module.eps[layer]) * h + neighbours)
        yield h


class MolecularFingerprint(nn.Module):
    """Errica et al.'s baseline for the chemical datasets: ``ReLU(Linear(ReLU(Linear(sum of x))))``.

    It sees no edges. The final ReLU is theirs (``MolecularFingerprint.py``): class scores are
    non-negative. As the sum of the inputs does not change in training, it may be trained on
    :meth:`PackedGraphs.pooled` graphs (one node carrying that sum), which is the same model
    at a fraction of the cost.

    Args:
        in_dim (int): node input width.
        num_classes (int): classes.
        hidden_units (int): the MLP's width (default ``64``).
    """

    def __init__(self, in_dim: int, num_classes: int, hidden_units: int = 64) -> None:
        super().__init__()
        self.mlp = nn.Sequential(
            nn.Linear(in_dim, hidden_units), nn.ReLU(), nn.Linear(hidden_units, num_classes), nn.ReLU()
        )

    def forward(self, x: torch.Tensor, edge_index: torch.Tensor, batch: torch.Tensor, num_graphs: int):
        return self.mlp(_readout(x, batch, num_graphs, "sum"))


class DeepMultisets(nn.Module):
    """Errica et al.'s baseline for ENZYMES and the social datasets (``DeepMultisets.py``):
    ``Linear(ReLU(Linear(sum of ReLU(Linear(x)))))``; it sees no edges.

    Args:
        in_dim (int): node input width.
        num_classes (int): classes.
        hidden_units (int): the width of both hidden layers (default ``64``).
    """

    def __init__(self, in_dim: int, num_classes: int, hidden_units: int = 64) -> None:
        super().__init__()
        self.vertex = nn.Linear(in_dim, hidden_units)
        self.global1 = nn.Linear(hidden_units, hidden_units)
        self.global2 = nn.Linear(hidden_units, num_classes)

    def forward(self, x: torch.Tensor, edge_index: torch.Tensor, batch: torch.Tensor, num_graphs: int):
        h = _readout(torch.relu(self.vertex(x)), batch, num_graphs, "sum")
        return self.global2(torch.relu(self.global1(h)))


#: ``pooling=`` of :class:`GINTemplatePooling`: exact W (:class:`mwsp_torch.nn.WassersteinPooling`)
#: or POT's fused Gromov-Wasserstein (``ot.gnn.TFGWPooling``).
TEMPLATE_POOLINGS = ("wasserstein", "tfgw")


class GINTemplatePooling(nn.Module):
    """GIN whose readout is template pooling: the graph read out as its distances to learned templates.

    The node side is Errica et al.'s GIN (:class:`ErricaGIN`'s stages, built by the same
    code: a first two-layer MLP, then one GIN layer per entry of ``hidden_units``). Where
    their GIN reads every stage out by a sum and maps each to class scores, here every
    stage's node states are concatenated (``[N, hidden_units[0] + sum(hidden_units)]``), so
    the pooling sees what their readouts saw, and each graph, the uniform measure on its
    nodes' embeddings, is read out as its distances to ``num_templates`` learned templates:

    - ``pooling="wasserstein"``: the exact W to point clouds of ``template_size`` points
      (:class:`mwsp_torch.nn.WassersteinPooling`, the OT-GNN readout of Becigneul et al.,
      2020), ground cost ``cost`` (MWSP's Euclidean by default), template weights uniform;
    - ``pooling="tfgw"``: POT's ``ot.gnn.TFGWPooling`` (Vincent-Cuaz et al., 2022), the
      fused Gromov-Wasserstein distance to templates with features, adjacency and node
      weights of their own (its defaults: weights and ``alpha`` learned).

    The ``[G, num_templates]`` distances go to an MLP, ``Linear(T, hidden_units[-1])``, ReLU,
    dropout, ``Linear(hidden_units[-1], num_classes)``, as they are (no normalisation, as POT's
    TFGW example). Why this shape: only the readout differs from the GIN it is tested against,
    so a difference between the two rows is the readout's, not the node encoder's.

    Args:
        in_dim (int): node input width.
        num_classes (int): classes.
        hidden_units (Sequence[int]): widths of the GIN layers (default ``(64, 64, 64, 64)``).
        train_eps (bool): learn GIN's ``eps`` (default ``True``).
        dropout (float): dropout before the MLP's output layer (default ``0.5``).
        num_templates (int): templates ``T`` (default ``10``).
        template_size (int): points (nodes) per template ``m`` (default ``10``).
        pooling (str): ``"wasserstein"`` (default) or ``"tfgw"``.
        cost (str): the Wasserstein pooling's ground cost (default ``"euclidean"``).
        n_jobs (int): the Wasserstein pooling's solver threads (default ``1``).

    Example:
        >>> import torch
        >>> model = GINTemplatePooling(3, 2, hidden_units=[8], num_templates=4, template_size=3)
        >>> x, edge_index = torch.eye(3)[[0, 1, 2, 0]], torch.tensor([[0, 1, 2], [1, 2, 3]])
        >>> model(x, edge_index, torch.tensor([0, 0, 1, 1]), 2).shape
        torch.Size([2, 2])
    """

    def __init__(
        self,
        in_dim: int,
        num_classes: int,
        hidden_units: Sequence[int] = (64, 64, 64, 64),
        train_eps: bool = True,
        dropout: float = 0.5,
        num_templates: int = 10,
        template_size: int = 10,
        pooling: str = "wasserstein",
        cost: str = "euclidean",
        n_jobs: int = 1,
    ) -> None:
        super().__init__()
        if pooling not in TEMPLATE_POOLINGS:
            raise ValueError(f"pooling must be one of {TEMPLATE_POOLINGS}, got {pooling!r}")
        dims = _gin_stages(self, in_dim, hidden_units, train_eps)
        self.pooling = pooling
        width = sum(dims)
        if pooling == "wasserstein":
            self.pool = WassersteinPooling(width, num_templates, template_size, cost=cost, n_jobs=n_jobs)
        else:
            from ot.gnn import TFGWPooling  # POT: an optional dependency of this one model

            self.pool = TFGWPooling(width, n_tplt=num_templates, n_tplt_nodes=template_size)
        self.mlp = nn.Sequential(
            nn.Linear(num_templates, dims[-1]), nn.ReLU(), nn.Dropout(dropout), nn.Linear(dims[-1], num_classes)
        )

    def node_embeddings(self, x: torch.Tensor, edge_index: torch.Tensor) -> torch.Tensor:
        """``[N, hidden_units[0] + sum(hidden_units)]``: every stage's node states, concatenated."""
        return torch.cat(list(_gin_node_states(self, x, edge_index)), dim=1)

    def forward(self, x: torch.Tensor, edge_index: torch.Tensor, batch: torch.Tensor, num_graphs: int):
        h = self.node_embeddings(x, edge_index)
        distances = self.pool(h, edge_index, batch) if self.pooling == "tfgw" else self.pool(h, batch)
        if distances.shape[0] != num_graphs:
            raise ValueError(f"template pooling read {distances.shape[0]} graphs out of {num_graphs}: an empty graph?")
        return self.mlp(distances)


MONITORS = ("accuracy", "loss")


class Patience:
    """Errica et al.'s ``Patience`` early stopper (``models/utils/EarlyStopper.py``).

    An epoch whose validation accuracy is at least the best so far (``monitor="accuracy"``;
    ties count, so the later of equal epochs is kept), or whose validation loss is at most the
    lowest so far (``"loss"``), becomes the best epoch; after ``patience`` epochs in a row
    without one, training should stop.

    Args:
        patience (int): epochs without a new best before stopping.
        monitor (str): ``"accuracy"`` or ``"loss"`` (default ``"accuracy"``).

    Examples:
        >>> stopper = Patience(2)
        >>> [stopper.update(e, acc, 0.0) for e, acc in enumerate([50.0, 60.0, 60.0, 55.0, 55.0], 1)]
        [True, True, True, False, False]
        >>> stopper.best_epoch, stopper.should_stop
        (3, True)
    """

    def __init__(self, patience: int, monitor: str = "accuracy") -> None:
        if monitor not in MONITORS:
            raise ValueError(f"monitor must be one of {MONITORS}, got {monitor!r}")
        if isinstance(patience, bool) or not isinstance(patience, (int, np.integer)) or patience < 1:
            raise ValueError(f"patience must be an integer >= 1, got {patience!r}")
        self.patience, self.monitor = int(patience), monitor
        self.best_accuracy, self.best_loss, self.best_epoch, self.waited = -float("inf"), float("inf"), 0, 0

    def update(self, epoch: int, accuracy: float, loss: float) -> bool:
        """Record one epoch's validation scores; True where it is the new best epoch."""
        better = accuracy >= self.best_accuracy if self.monitor == "accuracy" else loss <= self.best_loss
        if better:
            self.best_accuracy, self.best_loss, self.best_epoch, self.waited = accuracy, loss, epoch, 0
        else:
            self.waited += 1
        return better

    @property
    def should_stop(self) -> bool:
        """``patience`` epochs in a row have passed without a new best."""
        return self.waited >= self.patience


@torch.no_grad()
def evaluate(model: nn.Module, graphs: PackedGraphs | GraphBatch) -> tuple[float, float, torch.Tensor]:
    """``(accuracy in percent, mean cross-entropy, predicted classes)`` of ``model`` on ``graphs``
    (in evaluation mode, one batch)."""
    batch = graphs.batch() if isinstance(graphs, PackedGraphs) else graphs
    was_training = model.training
    model.eval()
    scores = model(batch.x, batch.edge_index, batch.batch, batch.num_graphs)
    model.train(was_training)
    predicted = scores.argmax(1)
    accuracy = float(100.0 * (predicted == batch.y).float().mean())
    return accuracy, float(nn.functional.cross_entropy(scores, batch.y)), predicted


def fit_classifier(
    model: nn.Module,
    train: PackedGraphs,
    validation: PackedGraphs,
    *,
    batch_size: int = 32,
    lr: float = 0.01,
    weight_decay: float = 0.0,
    step_size: int | None = 50,
    gamma: float = 0.5,
    max_epochs: int = 1000,
    patience: int = 500,
    monitor: str = "accuracy",
    seed: int = 0,
    device=None,
    on_epoch: Callable[[int, dict], None] | None = None,
) -> dict:
    """Train as Errica et al. train: Adam on cross-entropy, ``StepLR``, ``Patience`` early stopping.

    Each epoch visits the training graphs once in a seeded random order, in mini-batches of
    ``batch_size`` (the last one smaller, as their ``DataLoader``), and then scores the whole
    validation set. Epoch ``e`` (from 1) trains at ``lr * gamma ** ((e - 1) // step_size)``
    (their ``StepLR(step_size, gamma)``; no schedule when ``step_size`` is None). The
    stopper is theirs (:class:`Patience`); training stops after ``patience`` epochs without
    a new best, or at ``max_epochs``. The model keeps the best epoch's
    weights, and the validation scores reported are that epoch's.

    Args:
        model (nn.Module): called as ``model(x, edge_index, batch, num_graphs)``.
        train (PackedGraphs): the graphs trained on.
        validation (PackedGraphs): the graphs early stopping reads (never trained on).
        batch_size (int): graphs per step (default ``32``).
        lr (float): Adam's initial learning rate (default ``0.01``).
        weight_decay (float): Adam's L2 penalty (their ``l2``) (default ``0.0``).
        step_size (int, optional): epochs per ``StepLR`` step (default ``50``; None: constant lr).
        gamma (float): ``StepLR``'s factor (default ``0.5``).
        max_epochs (int): at most this many epochs (default ``1000``).
        patience (int): epochs without a new best before stopping (default ``500``).
        monitor (str): ``"accuracy"`` or ``"loss"``, what the stopper reads (default ``"accuracy"``).
        seed (int): seeds torch (dropout) and the order of the training graphs; the initial
            weights are drawn where the model is built (default ``0``).
        device: torch device to train on; the model and both graph sets are moved there
            (default None: where they are).
        on_epoch (callable, optional): called as ``on_epoch(epoch, info)`` after each epoch.

    Returns:
        dict: ``validation_accuracy`` (percent) and ``validation_loss`` of the best epoch,
        ``best_epoch`` (from 1), ``epochs`` (run), ``lrs`` (the learning rate of each epoch
        run), ``seconds``, ``seconds_per_epoch``.

    Raises:
        ValueError: for an empty training or validation set, or a bad ``monitor``,
            ``batch_size``, ``max_epochs`` or ``patience``.

    Examples:
        >>> import torch
        >>> xs = [torch.eye(2)[[i % 2]] for i in range(8)]
        >>> graphs = PackedGraphs(xs, [torch.zeros(2, 0, dtype=torch.long)] * 8, [i % 2 for i in range(8)])
        >>> model = MolecularFingerprint(2, 2, hidden_units=8)
        >>> log = fit_classifier(model, graphs, graphs, batch_size=4, max_epochs=3, patience=3)
        >>> log["epochs"], log["lrs"]
        (3, [0.01, 0.01, 0.01])
    """
    if len(train) == 0 or len(validation) == 0:
        raise ValueError(f"training needs graphs to train and validate on, got {len(train)} and {len(validation)}")
    stopper = Patience(patience, monitor)
    for name, value in (("batch_size", batch_size), ("max_epochs", max_epochs)):
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
            raise ValueError(f"{name} must be an integer >= 1, got {value!r}")
    if device is not None:
        model.to(device)
        train, validation = train.to(device), validation.to(device)
    torch.manual_seed(seed)
    generator = torch.Generator().manual_seed(seed)
    try:  # the fused kernel: one call a step instead of a few per parameter
        optimizer = torch.optim.Adam(model.parameters(), lr=lr, weight_decay=weight_decay, fused=True)
    except (RuntimeError, TypeError):  # a device or dtype the fused kernel lacks
        optimizer = torch.optim.Adam(model.parameters(), lr=lr, weight_decay=weight_decay)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size, gamma) if step_size else None
    batch_norm = any(isinstance(m, nn.BatchNorm1d) for m in model.modules())
    valid_batch = validation.batch()  # gathered once: the validation set is scored whole every epoch
    best_state = None
    lrs: list[float] = []
    start = time.perf_counter()
    epoch = 0
    for epoch in range(1, max_epochs + 1):
        lrs.append(float(optimizer.param_groups[0]["lr"]))
        model.train()
        order = torch.randperm(len(train), generator=generator)
        for begin in range(0, len(train), batch_size):
            b = train.batch(order[begin : begin + batch_size])
            if b.x.shape[0] == 1 and batch_norm:
                continue  # BatchNorm cannot train on a single node (PyG's loop would fail on it)
            optimizer.zero_grad(set_to_none=True)
            nn.functional.cross_entropy(model(b.x, b.edge_index, b.batch, b.num_graphs), b.y).backward()
            optimizer.step()
        if scheduler is not None:
            scheduler.step()
        acc, loss, _ = evaluate(model, valid_batch)
        if stopper.update(epoch, acc, loss):
            best_state = {k: v.detach().clone() for k, v in model.state_dict().items()}
        if on_epoch is not None:
            on_epoch(epoch, {"validation_accuracy": acc, "validation_loss": loss, "lr": lrs[-1]})
        if stopper.should_stop:
            break
    seconds = time.perf_counter() - start
    model.load_state_dict(best_state)
    return {
        "validation_accuracy": stopper.best_accuracy,
        "validation_loss": stopper.best_loss,
        "best_epoch": stopper.best_epoch,
        "epochs": epoch,
        "lrs": lrs,
        "seconds": seconds,
        "seconds_per_epoch": seconds / max(epoch, 1),
    }
