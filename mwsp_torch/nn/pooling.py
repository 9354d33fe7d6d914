"""Template Wasserstein pooling: a graph read out as its exact W to learned point clouds.

The OT-GNN readout (Becigneul et al., 2020; POT's ``ot.gnn.TWPooling``): a graph, the
measure of its node embeddings, is read out as its Wasserstein distances to ``T`` learned
templates, point clouds in the embeddings' space. This layer computes those distances
exactly, for every (graph, template) pair of a batch in one call into the library's
compiled transportation simplex (:func:`mwsp_torch.transport.dense.dense_exact_transport`,
threads over pairs), and differentiates them through the optimal plan and the dual
potentials (:class:`_TemplateDistances`, a ``torch.autograd.Function``).

Why not POT's layer: it solves one ``ot.emd2`` per graph and template from a Python loop,
and that Python (a call, a backend's conversions, a cost matrix per pair) costs far more
than the solve itself on graphs of tens of nodes; it also stops its simplex after 50
iterations (``numItermax=50``), so its W is not the optimum once a problem needs more
pivots, which graphs of a few tens of nodes already do. Here no Python runs per pair, and
the simplex runs to optimality. The measured speeds and POT's truncation error are in
``benchmarks/README.md`` and ``docs/pooling.md``.

Device: the solver runs on the CPU. On a CUDA device the inputs are copied to the host,
solved there, and the distances (and gradients) copied back to the input's device; the
library's GPU exact engine solves graph-to-graph problems on a row bank and returns no
plans, so it does not serve this layer.
"""

from __future__ import annotations

import numpy as np
import torch
from numba import njit
from torch import Tensor
from torch.autograd.function import once_differentiable

from mwsp_torch.compiled import numba_ready
from mwsp_torch.transport.dense import dense_exact_transport

__all__ = ["CANCELLATION", "POOLING_COSTS", "WassersteinPooling"]

#: A squared distance from the Gram product under this share of the squared norms it came
#: from is taken again from differences (:func:`_ground_costs`); above it the product's
#: relative error is at most about ``eps / CANCELLATION``, 2.3e-10 (as in
#: :mod:`mwsp_torch.transport.costs`).
CANCELLATION = 2.0**-20

#: ``cost=`` of :class:`WassersteinPooling`: the ground cost between a node and a template point.
POOLING_COSTS = ("euclidean", "sqeuclidean")


class WassersteinPooling(torch.nn.Module):
    r"""Exact Wasserstein distances between each graph's node measure and ``T`` learned templates.

    For a graph with node features :math:`x_1, \dots, x_n \in \mathbb{R}^d` and node weights
    :math:`a` (uniform :math:`1/n`, or ``node_weight`` normalised per graph), and template
    :math:`t` with points :math:`y_{t1}, \dots, y_{tm}` and weights :math:`b_t` (uniform, or
    a softmax of learned logits),

    .. math::
        \mathrm{out}_{t} = W(a, b_t) = \min_{P \in \Pi(a, b_t)} \sum_{i, j} P_{ij}\, c(x_i, y_{tj}),
        \qquad c(x, y) = \|x - y\|_2 \ \text{(``"euclidean"``, MWSP's cost)} \ \text{or}\
        \|x - y\|_2^2 \ \text{(``"sqeuclidean"``, POT's ``TWPooling``)},

    over plans :math:`P \ge 0` with row sums :math:`a` and column sums :math:`b_t`, solved
    exactly (the transportation simplex to optimality, not truncated). Gradients come from
    the optimal plan :math:`P^*` and the dual potentials :math:`(u, v)`:
    :math:`\partial W / \partial x_i = \sum_j P^*_{ij} \nabla_x c(x_i, y_{tj})` (and the
    opposite for :math:`y_{tj}`; the Euclidean cost's gradient at coincident points is taken
    as 0, a subgradient), :math:`\partial W / \partial a = u - \bar u` and
    :math:`\partial W / \partial b_t = v - \bar v`, centred so that they are gradients on the
    simplex (as POT's ``ot.emd2``). W is not differentiable where the optimal plan or the
    duals are not unique (ties); there these are one element of its subdifferential, finite.

    The solver runs on the CPU, in float64, over every (graph, template) pair of the batch in
    one compiled call on ``n_jobs`` threads; inputs on a CUDA device are copied to the host and
    the output comes back on their device, in the inputs' dtype (float32 or float64).

    Args:
        in_channels (int): width :math:`d` of the node features.
        num_templates (int): number of templates :math:`T`.
        template_size (int): points per template :math:`m`.
        cost (str): ``"euclidean"`` (default) or ``"sqeuclidean"``.
        learn_template_weights (bool): learn each template's point weights (a softmax of
            logits initialised to 0, i.e. uniform) instead of keeping them uniform
            (default ``False``).
        n_jobs (int): solver threads (default ``-1``: every core).

    Shapes:
        - **input:** node features :math:`(N, d)`, batch vector :math:`(N)` (optional; sorted,
          graphs ``0..G-1`` each with at least one node), node weights :math:`(N)` (optional,
          non-negative, a positive sum per graph)
        - **output:** distances :math:`(G, T)`

    Example:
        >>> import torch
        >>> from mwsp_torch.nn import WassersteinPooling
        >>> pool = WassersteinPooling(16, num_templates=4, template_size=5)
        >>> x, batch = torch.randn(7, 16), torch.tensor([0, 0, 0, 1, 1, 1, 1])
        >>> pool(x, batch).shape
        torch.Size([2, 4])
    """

    def __init__(
        self,
        in_channels: int,
        num_templates: int,
        template_size: int,
        *,
        cost: str = "euclidean",
        learn_template_weights: bool = False,
        n_jobs: int = -1,
    ) -> None:
        super().__init__()
        for name, value in (
            ("in_channels", in_channels),
            ("num_templates", num_templates),
            ("template_size", template_size),
        ):
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"WassersteinPooling: {name} must be a positive integer, got {value!r}")
        if cost not in POOLING_COSTS:
            raise ValueError(f"WassersteinPooling: cost={cost!r}: expected one of {POOLING_COSTS}")
        if not isinstance(n_jobs, int) or (n_jobs < 1 and n_jobs != -1):
            raise ValueError(f"WassersteinPooling: n_jobs must be >= 1 or -1, got {n_jobs!r}")
        self.in_channels = in_channels
        self.num_templates = num_templates
        self.template_size = template_size
        self.cost = cost
        self.learn_template_weights = learn_template_weights
        self.n_jobs = n_jobs
        self.templates = torch.nn.Parameter(torch.empty(num_templates, template_size, in_channels))
        if learn_template_weights:
            self.template_logits = torch.nn.Parameter(torch.empty(num_templates, template_size))
        else:
            self.register_parameter("template_logits", None)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Template points from a standard normal (as POT's ``TWPooling``), weights uniform."""
        torch.nn.init.normal_(self.templates)
        if self.template_logits is not None:
            torch.nn.init.zeros_(self.template_logits)

    def template_weights(self) -> Tensor | None:
        """``[T, m]`` template point weights (a softmax of the logits), or ``None`` when uniform."""
        return None if self.template_logits is None else torch.softmax(self.template_logits, dim=1)

    def forward(self, x: Tensor, batch: Tensor | None = None, node_weight: Tensor | None = None) -> Tensor:
        """The distances of each graph of the batch to each template.

        Args:
            x (Tensor): ``[N, in_channels]`` finite node features.
            batch (Tensor, optional): ``[N]`` graph of each node, sorted, graphs ``0..G-1``
                each with a node (default: one graph).
            node_weight (Tensor, optional): ``[N]`` non-negative node weights, normalised per
                graph (default: uniform). Differentiable.

        Returns:
            ``[G, num_templates]`` exact W, on ``x``'s device.

        Raises:
            ValueError: on an input the layer cannot read as graphs (naming the graph where
                there is one): no nodes, a feature width other than ``in_channels``,
                non-finite features or templates, a batch vector that is not sorted or skips
                a graph, node weights that are negative, not finite or of zero sum.
        """
        ptr = _graph_offsets(x, batch, self.in_channels)
        _check_finite(x, ptr)
        if not bool(torch.isfinite(self.templates).all()):
            raise ValueError("WassersteinPooling: the templates hold a non-finite value (a diverged step?)")
        weights = None
        if node_weight is not None:
            weights = _normalised_node_weights(node_weight, ptr, x)
        return _TemplateDistances.apply(
            x, weights, self.templates, self.template_weights(), ptr, self.cost == "sqeuclidean", self.n_jobs
        )

    def __repr__(self) -> str:
        return (
            f"{self.__class__.__name__}({self.in_channels}, num_templates={self.num_templates}, "
            f"template_size={self.template_size}, cost={self.cost!r}, "
            f"learn_template_weights={self.learn_template_weights})"
        )


class _TemplateDistances(torch.autograd.Function):
    """``[G, T]`` exact W of graphs (rows of ``x`` cut by ``ptr``) to templates, and its
    gradient through the optimal plans and the centred duals (see :class:`WassersteinPooling`)."""

    @staticmethod
    def forward(ctx, x, node_weight, templates, template_weight, ptr, squared, n_jobs):
        num_graphs = len(ptr) - 1
        num_templates, size, width = templates.shape
        points = x.detach().to("cpu", torch.float64, copy=True)  # kept for backward: not the caller's memory
        template_points = templates.detach().to("cpu", torch.float64, copy=True).reshape(num_templates * size, width)
        costs = _ground_costs(points, template_points, squared)
        col_ptr = np.arange(0, num_templates * size + 1, size, dtype=np.int64)
        pairs = np.stack(np.meshgrid(np.arange(num_graphs), np.arange(num_templates), indexing="ij"), -1)
        out = dense_exact_transport(
            costs.numpy(),
            ptr,
            col_ptr,
            pairs.reshape(-1, 2),
            None if node_weight is None else node_weight.detach().to("cpu", torch.float64).numpy(),
            None if template_weight is None else template_weight.detach().to("cpu", torch.float64).reshape(-1).numpy(),
            n_jobs,
        )
        ctx.solved = (out, points, template_points, costs, ptr, squared)
        ctx.places = [
            None if t is None else (t.shape, t.device, t.dtype) for t in (x, node_weight, templates, template_weight)
        ]
        dtype = torch.promote_types(x.dtype, templates.dtype)
        return torch.from_numpy(out.values).reshape(num_graphs, num_templates).to(x.device, dtype)

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_out):
        out, points, template_points, costs, ptr, squared = ctx.solved
        x, node_weight, templates, template_weight = ctx.places  # (shape, device, dtype) of each input
        per_pair = grad_out.detach().to("cpu", torch.float64).reshape(-1)
        pair = torch.from_numpy(out.plan_pair)
        row = torch.from_numpy(out.plan_row)
        col = torch.from_numpy(out.plan_col)
        scale = torch.from_numpy(out.plan_mass) * per_pair[pair]
        grad_x = grad_templates = grad_node_weight = grad_template_weight = None
        if ctx.needs_input_grad[0] or ctx.needs_input_grad[2]:
            # Each plan entry's mass times the upstream gradient, times the cost's gradient
            # factor: 2 (x - y) for the squared cost, (x - y) / |x - y| for the Euclidean one,
            # taken as 0 at coincident points (a subgradient).
            if squared:
                entry = 2.0 * scale
            else:
                distance = costs[row, col]
                entry = torch.where(distance > 0, scale / torch.where(distance > 0, distance, 1.0), 0.0)
            grad_points = torch.zeros_like(points)
            grad_template_points = torch.zeros_like(template_points)
            numba_ready()
            _plan_gradients(
                points.numpy(), template_points.numpy(), out.plan_row, out.plan_col, entry.numpy(),
                grad_points.numpy(), grad_template_points.numpy(),
            )  # fmt: skip
            if ctx.needs_input_grad[0]:
                grad_x = grad_points.to(x[1], x[2])
            if ctx.needs_input_grad[2]:
                grad_templates = grad_template_points.reshape(templates[0]).to(templates[1], templates[2])
        num_pairs = len(out.values)
        if ctx.needs_input_grad[1] and node_weight is not None:
            # Row duals are centred per pair (mean 0); entry e of pair k is row ptr[g] + e - offset[k].
            rows_per = np.diff(out.row_offsets)
            first_row = ptr[np.arange(num_pairs) // templates[0][0]]
            dual_row = np.repeat(first_row - out.row_offsets[:-1], rows_per) + np.arange(out.row_offsets[-1])
            weighted = torch.from_numpy(out.row_duals) * torch.repeat_interleave(per_pair, torch.from_numpy(rows_per))
            grad_node_weight = torch.zeros(len(points), dtype=torch.float64)
            grad_node_weight.index_add_(0, torch.from_numpy(dual_row), weighted)
            grad_node_weight = grad_node_weight.to(node_weight[1], node_weight[2])
        if ctx.needs_input_grad[3] and template_weight is not None:
            num_templates, size = template_weight[0]
            duals = out.col_duals.reshape(num_pairs, size)
            duals = duals - duals.mean(axis=1, keepdims=True)  # centred, as the row duals are
            duals = torch.from_numpy(duals) * per_pair.unsqueeze(1)
            grad_template_weight = duals.reshape(-1, num_templates, size).sum(0)
            grad_template_weight = grad_template_weight.to(template_weight[1], template_weight[2])
        return grad_x, grad_node_weight, grad_templates, grad_template_weight, None, None, None


@njit(cache=True, nogil=True)
def _plan_gradients(points, template_points, plan_row, plan_col, entry, grad_points, grad_template_points):
    """Add ``entry[a] * (x_r - y_c)`` to ``grad_points[r]`` and its opposite to
    ``grad_template_points[c]`` for each plan entry ``a = (r, c)``: one pass over the plan,
    where a gather of ``x_r - y_c`` rows and two scatter-adds in torch cost ten times more."""
    width = points.shape[1]
    for a in range(plan_row.shape[0]):
        r = plan_row[a]
        c = plan_col[a]
        e = entry[a]
        for k in range(width):
            step = e * (points[r, k] - template_points[c, k])
            grad_points[r, k] += step
            grad_template_points[c, k] -= step


def _ground_costs(points: Tensor, template_points: Tensor, squared: bool) -> Tensor:
    """``[N, T m]`` float64 costs between nodes and template points, squared Euclidean or Euclidean.

    As a Gram product (``|x|^2 + |y|^2 - 2 x.y``, one matrix product), and, where that
    lost digits to cancellation (a result under ``CANCELLATION`` of the squared norms it
    came from: nearly coincident points), again from the points' differences, as the
    library's other costs are (``docs/exactness.md``)."""
    point_norms = points.square().sum(1, keepdim=True)
    template_norms = template_points.square().sum(1)
    scale = point_norms + template_norms
    costs = torch.addmm(scale, points, template_points.T, alpha=-2.0).clamp_(min=0.0)
    row, col = torch.nonzero(costs < CANCELLATION * scale, as_tuple=True)
    if len(row):
        costs[row, col] = (points[row] - template_points[col]).square().sum(1)
    return costs if squared else costs.sqrt_()


def _graph_offsets(x: Tensor, batch: Tensor | None, width: int) -> np.ndarray:
    """``[G + 1]`` offsets of each graph's nodes in ``x``, refused unless the batch is sorted,
    starts at graph 0 and skips none (a skipped graph would be empty)."""
    if not isinstance(x, Tensor) or x.dim() != 2 or not x.is_floating_point():
        raise ValueError(f"WassersteinPooling: x must be a [N, {width}] floating tensor")
    if x.shape[1] != width:
        raise ValueError(f"WassersteinPooling: x has {x.shape[1]} features a node, the templates {width}")
    if x.shape[0] == 0:
        raise ValueError("WassersteinPooling: graph 0 has no nodes (x is empty)")
    if batch is None:
        return np.array([0, x.shape[0]], dtype=np.int64)
    if batch.dim() != 1 or batch.shape[0] != x.shape[0] or batch.dtype.is_floating_point:
        raise ValueError(f"WassersteinPooling: batch must be [N] = [{x.shape[0]}] graph indices")
    index = batch.detach().to("cpu", torch.int64).numpy()
    if index[0] != 0:
        raise ValueError(f"WassersteinPooling: graph 0 has no nodes (the batch starts at graph {index[0]})")
    steps = np.diff(index)
    down = np.flatnonzero(steps < 0)
    if len(down):
        raise ValueError(
            f"WassersteinPooling: batch is not sorted (node {down[0] + 1} of graph {index[down[0] + 1]} "
            f"follows graph {index[down[0]]}): nodes of a graph must be consecutive"
        )
    gap = np.flatnonzero(steps > 1)
    if len(gap):
        raise ValueError(f"WassersteinPooling: graph {index[gap[0]] + 1} has no nodes (the batch skips it)")
    starts = np.flatnonzero(np.concatenate([[1], steps]))
    return np.append(starts, len(index)).astype(np.int64)


def _check_finite(x: Tensor, ptr: np.ndarray) -> None:
    finite = torch.isfinite(x).all(dim=1)
    if not bool(finite.all()):
        node = int(torch.nonzero(~finite)[0, 0])
        graph = int(np.searchsorted(ptr, node, side="right") - 1)
        raise ValueError(f"WassersteinPooling: graph {graph} has a non-finite feature (node {node})")


def _normalised_node_weights(node_weight: Tensor, ptr: np.ndarray, x: Tensor) -> Tensor:
    """``node_weight`` divided by its graph's sum (differentiably), refused unless it is
    finite, non-negative and of positive sum on every graph."""
    if node_weight.dim() != 1 or node_weight.shape[0] != x.shape[0] or not node_weight.is_floating_point():
        raise ValueError(f"WassersteinPooling: node_weight must be a floating [N] = [{x.shape[0]}] tensor")
    values = node_weight.detach().to("cpu", torch.float64).numpy()
    bad = np.flatnonzero(~np.isfinite(values) | (values < 0))
    if len(bad):
        graph = int(np.searchsorted(ptr, bad[0], side="right") - 1)
        raise ValueError(
            f"WassersteinPooling: graph {graph} has node weight {values[bad[0]]} (node {bad[0]}): expected finite, >= 0"
        )
    positive = np.concatenate([[0], np.cumsum(values > 0)])
    massless = np.flatnonzero(positive[ptr[1:]] == positive[ptr[:-1]])
    if len(massless):
        raise ValueError(f"WassersteinPooling: graph {massless[0]}'s node weights sum to 0")
    sizes = torch.from_numpy(np.diff(ptr)).to(node_weight.device)
    graph_of_node = torch.repeat_interleave(torch.arange(len(ptr) - 1, device=node_weight.device), sizes)
    sums = torch.zeros(len(ptr) - 1, dtype=node_weight.dtype, device=node_weight.device)
    sums = sums.index_add(0, graph_of_node, node_weight)
    return node_weight / sums[graph_of_node]
