"""Training and scoring: graphs packed once (:class:`PackedGraphs`), Errica et al.'s ``Patience``
and :func:`fit_classifier`, and the PyG-loader loop :func:`train_classifier`."""

from __future__ import annotations

import copy
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn
from torch_geometric.data import Data
from torch_geometric.loader import DataLoader
from tqdm.auto import tqdm

from mwsp_torch.gnn.models import graph_readout

__all__ = [
    "GraphBatch",
    "MONITORS",
    "PackedGraphs",
    "Patience",
    "accuracy",
    "evaluate",
    "fit_classifier",
    "graph_embeddings",
    "predict",
    "train_classifier",
]


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
        sums = graph_readout(self.x, graph_of_node, len(self), "sum")
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
