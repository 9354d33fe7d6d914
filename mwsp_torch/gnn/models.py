"""The GNNs: PyG-layer GIN and baseline, Errica et al.'s GIN and structure-agnostic baselines
(on plain tensors), and GIN with template pooling."""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import torch
from torch import nn
from torch_geometric.nn import GINConv, global_add_pool, global_mean_pool

from mwsp_torch.nn import WassersteinPooling

__all__ = [
    "graph_readout",
    "Baseline",
    "DeepMultisets",
    "ErricaGIN",
    "GIN",
    "GINTemplatePooling",
    "MolecularFingerprint",
    "READOUTS",
    "TEMPLATE_POOLINGS",
]


READOUTS = ("sum", "mean")


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


def graph_readout(h: torch.Tensor, batch: torch.Tensor, num_graphs: int, aggregation: str) -> torch.Tensor:
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
    first stage's dropout also acts at evaluation (``F.dropout`` without ``training=``); here
    evaluation is deterministic unless ``first_dropout_at_eval`` asks for theirs (profile
    ``cpu-errica-dropout`` of :mod:`mwsp_torch.gnn_protocol`, which measures what it costs).

    Args:
        in_dim (int): node input width.
        num_classes (int): classes.
        hidden_units (Sequence[int]): widths of the GIN layers (``[64, 64, 64, 64]``, ...).
        train_eps (bool): learn ``eps`` (initially 0) (default ``True``).
        aggregation (str): graph readout, ``"sum"`` or ``"mean"`` (default ``"sum"``).
        dropout (float): dropout on each stage's class scores (default ``0.5``).
        first_dropout_at_eval (bool): drop the first stage's class scores in evaluation too,
            as their code does (default ``False``).
    """

    def __init__(
        self,
        in_dim: int,
        num_classes: int,
        hidden_units: Sequence[int] = (64, 64, 64, 64),
        train_eps: bool = True,
        aggregation: str = "sum",
        dropout: float = 0.5,
        first_dropout_at_eval: bool = False,
    ) -> None:
        super().__init__()
        if aggregation not in READOUTS:
            raise ValueError(f"aggregation must be one of {READOUTS}, got {aggregation!r}")
        self.aggregation, self.dropout = aggregation, float(dropout)
        self.first_dropout_at_eval = bool(first_dropout_at_eval)
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
                out = drop(graph_readout(self.linears[0](h), batch, num_graphs, self.aggregation), self.dropout,
                           self.training or self.first_dropout_at_eval)  # fmt: skip
            else:
                pooled = graph_readout(h, batch, num_graphs, self.aggregation)
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
        return self.mlp(graph_readout(x, batch, num_graphs, "sum"))


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
        h = graph_readout(torch.relu(self.vertex(x)), batch, num_graphs, "sum")
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
