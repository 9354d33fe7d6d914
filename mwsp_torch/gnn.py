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
"""

from __future__ import annotations

import copy
import time
from collections.abc import Sequence

import numpy as np
import torch
from torch import nn
from torch_geometric.data import Data
from torch_geometric.loader import DataLoader
from torch_geometric.nn import GINConv, global_add_pool, global_mean_pool
from tqdm.auto import tqdm

from mwsp_torch.trees import TreeIDs

#: The embedding index of a tree never seen in the training graphs.
UNSEEN = 0
READOUTS = ("sum", "mean")


class TreeIDVocabulary:
    """Canonical tree IDs at scales ``0..k`` mapped to embedding indices fitted on training graphs.

    ``fit`` runs a :class:`mwsp_torch.TreeIDs` transform over the training graphs and keeps,
    per scale, the sorted tree IDs it saw; ``transform`` runs the same transform over any
    graphs (its interning table gives a tree the same ID wherever it appears, and new trees
    new IDs) and maps a tree seen in ``fit`` at scale ``s`` to ``1 + its rank``, any other to
    :data:`UNSEEN`. ``fit`` is the only step that changes the mapping.

    With ``min_graphs > 1``, a tree at scale 1 or deeper that fewer than ``min_graphs``
    training graphs hold maps to :data:`UNSEEN` as well. Otherwise no training node is
    unseen, so the "unseen" embedding is never trained and a test node with a new tree gets
    its random initial value; with rare training trees mapped there, it is trained on the
    kind of node a new tree is. Scale 0 (the labels, the plain GIN's one-hot input) keeps
    every label seen.

    Args:
        k (int): deepest scale (default ``1``).
        labels (str): label policy, as :class:`mwsp_torch.TreeIDs` (default ``"auto"``).
        min_graphs (int): training graphs a tree at scale ``>= 1`` must appear in to get an
            embedding of its own (default ``1``: every tree seen).

    Attributes:
        sizes_ (list[int]): per scale, the number of embedding rows (seen trees + 1).
        known_ (list[np.ndarray]): per scale, the sorted tree IDs seen in ``fit``.
        transform_ (TreeIDs): the transform whose interning table gives the IDs.
    """

    def __init__(self, k: int = 1, labels: str = "auto", min_graphs: int = 1) -> None:
        TreeIDs(k=k, labels=labels)  # refuses a bad k or labels now, not at fit
        if isinstance(min_graphs, bool) or not isinstance(min_graphs, (int, np.integer)) or min_graphs < 1:
            raise ValueError(f"min_graphs must be an integer >= 1, got {min_graphs!r}")
        self.k = k
        self.labels = labels
        self.min_graphs = int(min_graphs)

    def _tree_ids(self, graphs) -> list[np.ndarray]:
        out = []
        for data in graphs:
            # A shallow copy: TreeIDs writes tree_ids onto the Data it is given.
            copied = Data(edge_index=data.edge_index, num_nodes=data.num_nodes)
            for key in ("node_label", "x"):
                if key in data:
                    copied[key] = data[key]
            out.append(self.transform_(copied).tree_ids.numpy())
        return out

    def fit(self, graphs) -> TreeIDVocabulary:
        """Learn each scale's trees from ``graphs`` (the training graphs only); a refit starts anew."""
        self.transform_ = TreeIDs(k=self.k, labels=self.labels)
        ids = self._tree_ids(graphs)
        self.known_ = []
        for s in range(self.k + 1):
            # Each graph's distinct trees, so that the counts are of graphs, not nodes.
            per_graph = [np.unique(g[:, s]) for g in ids]
            trees, graphs_holding = np.unique(
                np.concatenate(per_graph) if per_graph else np.zeros(0, dtype=np.int64), return_counts=True
            )
            self.known_.append(trees if s == 0 else trees[graphs_holding >= self.min_graphs])
        self.sizes_ = [len(known) + 1 for known in self.known_]
        return self

    def transform(self, graphs) -> list[torch.Tensor]:
        """Per graph, ``[num_nodes, k + 1]`` int64 embedding indices (:data:`UNSEEN` for a tree
        ``fit`` did not see at that scale)."""
        if not hasattr(self, "known_"):
            raise ValueError("this TreeIDVocabulary is not fitted: call fit(training graphs) first")
        out = []
        for ids in self._tree_ids(graphs):
            index = np.zeros_like(ids)
            for s, known in enumerate(self.known_):
                rank = np.searchsorted(known, ids[:, s])
                hit = rank < len(known)
                hit[hit] = known[rank[hit]] == ids[hit, s]
                index[hit, s] = rank[hit] + 1
            out.append(torch.from_numpy(index))
        return out

    def __repr__(self) -> str:
        return f"{self.__class__.__name__}(k={self.k}, labels={self.labels!r}, min_graphs={self.min_graphs})"


def tree_id_inputs(graphs, y, vocabulary: TreeIDVocabulary) -> list[Data]:
    """The graphs as PyG ``Data`` for the models here: ``edge_index``, ``num_nodes``, ``y`` and
    ``tree_tokens`` (``vocabulary.transform``'s indices)."""
    y = np.asarray(y)
    if len(y) != len(graphs):
        raise ValueError(f"{len(graphs)} graphs but {len(y)} labels")
    return [
        Data(edge_index=g.edge_index, num_nodes=g.num_nodes, y=torch.tensor([int(label)]), tree_tokens=index)
        for g, index, label in zip(graphs, vocabulary.transform(graphs), y, strict=True)
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
