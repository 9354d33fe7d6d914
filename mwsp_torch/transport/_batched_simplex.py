"""An exact transportation simplex over a batch of same-shape problems, in torch (GPU or CPU).

Why our own: POT's network simplex and our compiled one (:mod:`mwsp_torch.transport._simplex`)
solve one problem at a time on a CPU core. An all-pairs MWSP matrix is millions of
small problems (8.4 M on NCI1, 18 x 18 on average after cancellation), which a GPU
can solve side by side if every step of the simplex is a tensor operation over the
batch. No library offers an exact batched solver: geomloss and pykeops are Sinkhorn
(approximate), POT's ``emd`` is sequential. The same code runs on a CPU tensor, which
is how CI checks it against POT (``tests/test_transport.py``, 1e-9 relative).

Method: the primal transportation simplex of :mod:`mwsp_torch.transport._simplex`, re-cast so
that each step is a handful of gathers and scatters over ``[batch, nodes]`` tensors.

- Nodes ``0..m-1`` are supplies, ``m..m+n-1`` demands. The basis is a spanning tree
  stored by ``parent`` only; the flow of each tree arc is kept at its child node, so
  no arc list is needed.
- Orden's perturbation (every supply ``+eps``, the last demand ``+m eps``) makes every
  basis non-degenerate. A flow ``units + e eps`` has ``|e| <= m`` and is stored as
  the one integer ``units * (2m + 1) + e``: integer order is the lexicographic order.
- Start: the north-west corner rule on supplies and demands ordered along the line
  between the two farthest points of the problem (a 1-D sort; the rule is optimal
  on a line). Pricing: Dantzig's rule (the most negative reduced cost over all arcs,
  one ``argmin`` of the batch's reduced-cost tensor).
- Cycle: both endpoints of the entering arc walk up to the root marking their paths
  (as many steps as the deepest tree in the batch); the cycle is the symmetric
  difference. Potentials are recomputed after each pivot by pointer doubling
  (``log2(m + n)`` gathers), never by a loop over the tree.
- Problems leave the batch as soon as they are optimal.

Lock step has a price: every problem of a batch waits for the one with the most pivots,
and every pivot touches the whole ``[batch, nodes]`` tensors, so one problem per GPU
thread (:mod:`mwsp_torch.transport._thread_simplex`) is the faster GPU engine; this one needs
nothing but torch. This module does no CUDA work at import. Developers:
``benchmarks/gpu_exact.py`` times it against the compiled solver.
"""

from __future__ import annotations

import math

import torch


def batched_transport_cost(supply: torch.Tensor, demand: torch.Tensor, cost: torch.Tensor) -> torch.Tensor:
    """Optimal ``sum_pq flow_pq * cost_pq`` of each problem of a batch (equal totals per problem).

    Args:
        supply: ``[B, m]`` int64 masses, all > 0.
        demand: ``[B, n]`` int64 masses, all > 0, each row summing to its ``supply`` row.
        cost: ``[B, m, n]`` float64 costs.

    Returns:
        ``[B]`` float64 optimal costs (not divided by the total mass), on ``cost``'s device.
    """
    if supply.dim() != 2 or demand.dim() != 2 or cost.dim() != 3:
        raise ValueError("supply [B, m], demand [B, n] and cost [B, m, n] expected")
    batch, m = supply.shape
    n = demand.shape[1]
    if cost.shape != (batch, m, n) or demand.shape[0] != batch:
        raise ValueError(f"shapes disagree: supply {tuple(supply.shape)}, demand {tuple(demand.shape)}, "
                         f"cost {tuple(cost.shape)}")  # fmt: skip
    if supply.dtype != torch.int64 or demand.dtype != torch.int64:
        raise ValueError(f"masses must be int64 tensors, got {supply.dtype} and {demand.dtype}")
    if not cost.dtype.is_floating_point:
        raise ValueError(f"costs must be a floating-point tensor, got {cost.dtype}")
    if batch and ((supply <= 0).any() or (demand <= 0).any()):
        raise ValueError("every mass must be > 0")
    totals = supply.sum(1)
    if batch and (totals != demand.sum(1)).any():
        raise ValueError("supply and demand totals differ")
    if batch and not bool(torch.isfinite(cost).all()):
        raise ValueError("costs must be finite")
    # Flows are stored as units * (2m + 1) + eps-multiples in one int64.
    if batch and int(totals.max()) > (torch.iinfo(torch.int64).max - m) // (2 * m + 1):
        raise ValueError(f"total mass {int(totals.max())} too large for int64 flow keys with m={m}")
    device = cost.device
    out = torch.zeros(batch, dtype=torch.float64, device=device)
    if batch == 0:
        return out
    supply, demand, cost = supply.to(device), demand.to(device), cost.to(device=device, dtype=torch.float64)
    if m == 1 or n == 1:  # a single source or sink: the plan is forced
        mass = demand if m == 1 else supply
        return (mass.to(torch.float64) * (cost[:, 0, :] if m == 1 else cost[:, :, 0])).sum(1)
    state = _start(supply, demand, cost)
    _iterate(state, out)
    return out


class _State:
    """The batch's problems still being solved, where each one's answer goes, and its
    pricing tolerance (relative to its largest cost)."""

    def __init__(self, cost, parent, flow, index, m, n, key_scale):
        self.cost, self.parent, self.flow, self.index = cost, parent, flow, index
        self.m, self.n, self.key_scale = m, n, key_scale
        self.tol = 1e-14 * cost.abs().reshape(cost.shape[0], -1).amax(1).clamp(min=1e-300)

    def keep(self, rows: torch.Tensor) -> None:
        self.cost, self.parent, self.flow, self.index, self.tol = (
            self.cost[rows],
            self.parent[rows],
            self.flow[rows],
            self.index[rows],
            self.tol[rows],
        )


def _start(supply, demand, cost) -> _State:
    """North-west corner basis on a 1-D ordering of both sides; costs permuted to match."""
    batch, m = supply.shape
    n = demand.shape[1]
    device = cost.device
    rows = torch.arange(batch, device=device)
    # The farthest (supply, demand) pair spans the problem; order supplies by their cost
    # to that demand (far first) and demands by their cost to that supply (near first).
    far = cost.reshape(batch, -1).argmax(1)
    far_p, far_q = far // n, far % n
    row_order = torch.argsort(cost[rows, :, far_q], dim=1, descending=True, stable=True)
    col_order = torch.argsort(cost[rows, far_p, :], dim=1, stable=True)
    supply = torch.gather(supply, 1, row_order)
    demand = torch.gather(demand, 1, col_order)
    cost = torch.gather(torch.gather(cost, 1, row_order[:, :, None].expand(-1, -1, n)), 2,
                        col_order[:, None, :].expand(-1, m, -1))  # fmt: skip
    # Perturbed masses as single integers (units * K + eps-multiples, |eps part| <= m).
    key_scale = 2 * m + 1
    s_key = supply * key_scale + 1
    d_key = demand * key_scale
    d_key[:, -1] += m
    # North-west corner: m + n - 1 steps, each adding the arc (i, j) and the one node it reaches.
    nodes = m + n + 1  # the last slot is a sink for masked scatters
    parent = torch.full((batch, nodes), -1, dtype=torch.int64, device=device)
    flow = torch.zeros((batch, nodes), dtype=torch.int64, device=device)
    i = torch.zeros(batch, dtype=torch.int64, device=device)
    j = torch.zeros(batch, dtype=torch.int64, device=device)
    rem_s = s_key[:, 0].clone()
    rem_d = d_key[:, 0].clone()
    parent[:, m] = 0  # first arc (0, 0): demand 0 hangs below supply 0, the root
    flow[:, m] = torch.minimum(rem_s, rem_d)
    for _ in range(m + n - 2):
        row_done = rem_s < rem_d  # non-degenerate: never equal before the last arc
        child = torch.where(row_done, i + 1, m + j + 1)
        parent[rows, child] = torch.where(row_done, m + j, i)
        moved = torch.minimum(rem_s, rem_d)
        i = torch.where(row_done, i + 1, i)
        j = torch.where(row_done, j, j + 1)
        rem_s = torch.where(row_done, s_key[rows, i.clamp(max=m - 1)], rem_s - moved)
        rem_d = torch.where(row_done, rem_d - moved, d_key[rows, j.clamp(max=n - 1)])
        flow[rows, child] = torch.minimum(rem_s, rem_d)
    parent[:, 0] = 0  # the root is its own parent
    parent[:, -1] = nodes - 1
    index = torch.arange(batch, device=device)
    return _State(cost, parent, flow, index, m, n, key_scale)


def _arc_cost(state: _State) -> torch.Tensor:
    """Cost of each node's parent arc (0 at the root and the sink slot)."""
    m, n = state.m, state.n
    batch, nodes = state.parent.shape
    node = torch.arange(nodes, device=state.cost.device).expand(batch, -1)
    row = torch.where(node < m, node, state.parent).clamp(0, m - 1)
    col = (torch.where(node < m, state.parent, node) - m).clamp(0, n - 1)
    flat = state.cost.reshape(batch, -1)
    values = torch.gather(flat, 1, row * n + col)
    values[:, 0] = 0.0
    values[:, -1] = 0.0
    return values


def _potentials(state: _State) -> tuple[torch.Tensor, torch.Tensor]:
    """Potentials (``u_p + v_q = c_pq`` on tree arcs, root 0) and depths, by pointer doubling."""
    batch, nodes = state.parent.shape
    value = _arc_cost(state)  # pot[x] = value[x] + sign[x] * pot[anc[x]]
    sign = torch.full((batch, nodes), -1.0, dtype=torch.float64, device=value.device)
    sign[:, 0] = 0.0
    sign[:, -1] = 0.0
    depth = torch.ones((batch, nodes), dtype=torch.int64, device=value.device)
    depth[:, 0] = 0
    depth[:, -1] = 0
    anc = state.parent
    for _ in range(math.ceil(math.log2(nodes)) + 1):
        value = value + sign * torch.gather(value, 1, anc)
        sign = sign * torch.gather(sign, 1, anc)
        depth = depth + torch.gather(depth, 1, anc)
        anc = torch.gather(anc, 1, anc)
    return value, depth


def _iterate(state: _State, out: torch.Tensor) -> None:
    m, n = state.m, state.n
    # Every pivot strictly improves a non-degenerate basis, so this many is a bug, not a hard problem.
    cap = 50 * (m + n) ** 2 + 1000
    for _ in range(cap):
        pot, depth = _potentials(state)
        reduced = state.cost - pot[:, :m, None] - pot[:, None, m : m + n]
        best, arc = reduced.reshape(reduced.shape[0], -1).min(1)
        finished = best >= -state.tol
        if bool(finished.any()):
            _finish(state, out, finished)
            keep = ~finished
            state.keep(keep)
            if not state.index.numel():
                return
            depth, arc = depth[keep], arc[keep]
        _pivot(state, arc // n, m + arc % n, depth)
    raise RuntimeError(f"batched simplex did not finish {state.index.numel()} problems in {cap} pivots")


def _pivot(state: _State, enter_p, enter_q, depth) -> None:
    parent, flow = state.parent, state.flow
    batch, nodes = parent.shape
    m = state.m
    device = parent.device
    rows = torch.arange(batch, device=device)
    # Mark the paths of both endpoints up to the root; the cycle is their symmetric difference.
    on_p = torch.zeros((batch, nodes), dtype=torch.bool, device=device)
    on_q = torch.zeros((batch, nodes), dtype=torch.bool, device=device)
    cur_p, cur_q = enter_p.clone(), enter_q.clone()
    for _ in range(int(depth.max()) + 1):
        on_p[rows, cur_p] = True
        on_q[rows, cur_q] = True
        cur_p = parent[rows, cur_p]
        cur_q = parent[rows, cur_q]
    p_side = on_p & ~on_q  # nodes whose parent arc lies on the cycle, supply end's side
    q_side = on_q & ~on_p
    node = torch.arange(nodes, device=device)
    is_supply = (node < m)[None, :]
    plus = (q_side & is_supply) | (p_side & ~is_supply)
    minus = (q_side & ~is_supply) | (p_side & is_supply)
    # Leaving arc: the smallest flow among the '-' arcs (unique: no basis is degenerate).
    big = torch.iinfo(torch.int64).max
    masked = torch.where(minus, flow, torch.full_like(flow, big))
    theta, leave = masked.min(1)
    flow = flow + torch.where(plus, theta[:, None], 0) - torch.where(minus, theta[:, None], 0)
    # Re-hang the cut-off subtree (below `leave`) from the entering arc's endpoint inside it.
    leave_on_p = p_side[rows, leave]
    inner = torch.where(leave_on_p, enter_p, enter_q)  # endpoint inside the cut-off subtree
    outer = torch.where(leave_on_p, enter_q, enter_p)
    # Segment: the path from `inner` up to `leave`, both included.
    segment = torch.zeros((batch, nodes), dtype=torch.bool, device=device)
    cur = inner.clone()
    going = torch.ones(batch, dtype=torch.bool, device=device)
    for _ in range(int(depth.max()) + 1):
        segment[rows, cur] |= going
        going = going & (cur != leave)
        cur = torch.where(going, parent[rows, cur], cur)
    # Reverse the segment's arcs: each node's old parent (but leave's) now hangs below it.
    reverse = segment.clone()
    reverse[rows, leave] = False
    sink = nodes - 1
    target = torch.where(reverse, parent, torch.full_like(parent, sink))
    new_parent = parent.clone()
    new_flow = flow.clone()
    src = node.expand(batch, -1)
    new_parent.scatter_(1, target, torch.where(reverse, src, torch.full_like(src, sink)))
    new_flow.scatter_(1, target, torch.where(reverse, flow, torch.zeros_like(flow)))
    new_parent[rows, inner] = outer
    new_flow[rows, inner] = theta
    new_parent[:, sink] = sink
    new_flow[:, sink] = 0
    state.parent, state.flow = new_parent, new_flow


def _finish(state: _State, out: torch.Tensor, finished: torch.Tensor) -> None:
    """Write the optimal cost of the finished problems: tree-arc units times arc costs."""
    m = state.m
    units = torch.div(state.flow + m, state.key_scale, rounding_mode="floor")
    units[:, 0] = 0
    units[:, -1] = 0
    total = (units.to(torch.float64) * _arc_cost(state)).sum(1)
    out[state.index[finished]] = total[finished]
