"""A compiled exact solver for small transportation problems (the EMD between two graphs).

Why our own and not POT's: an all-pairs matrix is millions of small problems (8.4 M on
NCI1), and ``ot.emd2`` spends most of each call at MWSP's sizes in its Python wrapper
(about 80 % of 150-260 us). This solver is called from a numba ``prange`` loop over pairs,
so no Python runs per pair and threads need no GIL. It is checked against POT's network
simplex to 1e-9 relative in ``tests/test_transport_simplex.py``; its speed against POT's is in
``benchmarks/README.md``, and the designs measured on the way in ``docs/performance.md``.

Method: the primal transportation simplex on the bipartite spanning-tree basis
(Dantzig 1951; Ahuja, Magnanti and Orlin, *Network Flows*, ch. 11).

- Masses are exact integers: graph ``G`` with ``n_G`` nodes gives support point ``p``
  the mass ``count_p * n_H`` and ``H``'s point ``q`` the mass ``count_q * n_G``, both
  sides summing to ``n_G * n_H``; the distance is the optimal cost divided by that.
- Degeneracy (ubiquitous here: uniform masses) is removed by the classic
  perturbation (Orden 1956): every supply gets ``+eps`` and the last demand
  ``+m eps``. Flows are pairs ``(units, eps-multiples)`` compared lexicographically,
  so every basis is non-degenerate, every pivot strictly improves, and the method
  cannot cycle. At ``eps -> 0`` the final basis is optimal for the real problem
  (reduced costs do not depend on the masses). That holds in exact arithmetic; in floats
  an arc may enter only past a threshold that grows with the potentials (``POT_REL_TOL``).
- Pricing: rows of fewer than ``ROW_MIN_SIMD`` columns are padded to whole vector
  registers (:func:`cost_width`; the engine allocates its costs so, else the solver copies)
  and a row's minimum reduced cost is one inlined vector loop
  (:func:`mwsp_torch.transport._simd.padded_row_min`). Problems of at most ``FULL_PRICING_MAX_ARCS``
  such arcs price every row each pivot and take the most negative arc of all (Dantzig's
  rule), with no branch per row: fewer pivots for little more per pivot. Larger ones
  search blocks of whole rows (POT's block size ~sqrt(m n) arcs, but at least
  ``MIN_BLOCK_ARCS``, rounded to rows), then scan the winning row once for the column that
  attains it. Rows of ``ROW_MIN_SIMD`` columns or more take their minimum in four vector
  registers (:func:`mwsp_torch.transport._simd.row_min`).
- Start: the row-minimum rule (each row fills its cheapest open columns), rows taken in
  the order of their minima, which leaves fewer pivots than index order. It also gives
  the first basis tree's parents and an order with parents first, so problems on ancestor
  masks need no walk over the tree. (Vogel's approximation leaves fewer pivots but cost
  more than it saved on every dataset measured, and was removed: ``docs/engines.md``.)
- The basis tree keeps parents and potentials. A pivot re-hangs only the subtree T cut
  off by the leaving arc, in one of two ways:

  - up to ``MASK_MAX_NODES`` (63) points, every node's ancestors are an int64 bit mask:
    the cycle's tree arcs are the two ends' ancestors but not both, its '-' arcs one mask
    more, so theta and the flow changes come from walking bits (independent loads), not
    from climbing parents (each load waiting on the last); parents change only along the
    stem from the entering arc to the leaving one, T's potentials move by one shift
    (``u + v = c`` on the entering arc), and T's ancestor masks are rebuilt by bit
    operations, node by node over T's bits. No traversal, no adjacency lists.
  - larger problems keep the tree's preorder as a doubly linked cycle (a thread), with
    subtree sizes and each subtree's last node, as network simplex codes such as LEMON's
    do: the cycle is found by climbing the end with the smaller subtree; T, re-rooted at
    the entering arc, is relinked by a few pointers per node of the stem and spliced in
    after its new parent; and the potentials of T, or of the rest of the tree when that
    is smaller, move by one shift, walked from both ends of their run at once. Only that
    shift visits more than the stem and the cycle; a walk over adjacency lists, or a
    preorder array whose entries move, would visit T and more on every pivot.

Why a primal method: the dual methods measured on NCI1's problems, successive shortest
paths and a primal-dual (Hungarian) method on bit masks, did about as many searches as
the simplex does pivots, at no less cost each (``docs/performance.md``).

Developers: numba caches a caller by its own file, so after editing this module (or
:mod:`mwsp_torch.transport._simd`) delete the ``*.nbi``/``*.nbc`` files under ``mwsp_torch/__pycache__``.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from mwsp_torch.transport._borrow import borrowed, borrowed_run, release
from mwsp_torch.transport._simd import LANES, argmin_difference, lowest_bit, padded_first_at, padded_row_min
from mwsp_torch.transport._simd import popcount as _popcount
from mwsp_torch.transport._simd import row_min as row_min_simd

#: Pricing blocks span at least this many arcs. On problems of 18-30 points a block
#: of one row (POT's sqrt(m n) rule) finds poor entering arcs; 3-5 rows cut the pivots
#: by about a fifth (``docs/performance.md``). From ~60 points on, where sqrt(m n)
#: already exceeds this, the rule is POT's.
MIN_BLOCK_ARCS = 96

#: Problems of at most this many arcs (and rows under ``ROW_MIN_SIMD`` columns) price every
#: row each pivot and take the most negative reduced cost of all (Dantzig's rule). That
#: takes fewer pivots than block pricing, and with rows padded to whole vector registers
#: (:func:`mwsp_torch.transport._simd.padded_row_min`) and no branch per row the full scan costs little
#: more than a block, so small problems solve faster. The scan grows with ``m n`` while the
#: pivots saved do not: beyond about 700 arcs blocks win again (``docs/performance.md``).
FULL_PRICING_MAX_ARCS = 600

#: Cost offset of a closed column in the row-minimum start: finite (the fastmath minimum
#: assumes no infinities) and beyond any cost.
CLOSED = 1e300

#: Pricing and the start take the minima of rows of at least this many columns in four
#: vector registers (:func:`mwsp_torch.transport._simd.row_min`); shorter rows are padded to whole
#: registers and take theirs in one (:func:`mwsp_torch.transport._simd.padded_row_min`). Merging four
#: registers is a fixed cost that only long rows repay: a scalar running minimum and the
#: four registers measured equal at about 40 columns.
ROW_MIN_SIMD = 40

#: A solve gives up with an error after this many pivots per squared point count. With
#: Orden's perturbation the method cannot cycle, and real problems take a few pivots per
#: point, so only a broken basis tree gets there; it turns what would be an endless loop
#: into an error.
MAX_PIVOTS_PER_NODE_SQUARED = 50

#: An arc enters only if its reduced cost is below ``-(1e-14 * max cost + POT_REL_TOL *
#: bound on max |potential|)``: ``(c - v) - u`` carries rounding of the size of the
#: potentials, which drift far beyond the costs over many pivots. With a cost-relative
#: threshold alone, DD's pair of graphs 5 and 21 (4,142 x 696 points) never ended: an arc
#: of true reduced cost 0 kept entering on rounding noise. POT's network simplex scales its
#: threshold with the potentials too; ``tests/test_transport_exact.py`` holds that pair equal to
#: POT. At the end every reduced cost is above ``-threshold``, so the cost found exceeds the
#: optimum by at most ``threshold`` times the total mass: with potentials 1,000 times the
#: largest cost, 1e-12 of the largest cost per unit of mass.
POT_REL_TOL = 1e-15

#: Problems of at most this many points (both sides; 63 at most) keep the basis tree's
#: ancestor sets as int64 bit masks, larger ones as a thread (see the module notes).
MASK_MAX_NODES = 63

#: The start orders up to this many rows by counting, for each row, the rows before it in
#: the order (``m^2`` branch-free comparisons, vectorised), where an insertion sort's
#: data-dependent loop exits are mispredicted about once a row. Larger problems sort stably
#: (the same order).
RANK_SORT_MAX_ROWS = 64


@njit(cache=True, nogil=True)
def cost_width(n):
    """Columns the solver prices for ``n`` demand points: rows under ``ROW_MIN_SIMD``
    columns are padded to whole vector registers of ``LANES``. A caller that allocates
    ``[m, cost_width(n)]`` costs spares the solver a padded copy (:func:`transport_cost`)."""
    return LANES * ((n + LANES - 1) // LANES) if n < ROW_MIN_SIMD else n


@njit(cache=True, nogil=True, inline="always")
def _lex_less(a_units, a_eps, b_units, b_eps):
    return a_units < b_units or (a_units == b_units and a_eps < b_eps)


@njit(cache=True, nogil=True, inline="always")
def _take(pool, offset, size):
    """The next ``size`` entries of ``pool`` (a borrowed view: :mod:`mwsp_torch.transport._borrow`)
    and the offset after them."""
    return borrowed_run(pool, offset, size), offset + size


@njit(cache=True, nogil=True)
def _check_masses(supply, demand, cost):
    """Raise ``ValueError`` unless the masses are a balanced problem over ``cost``."""
    if supply.shape[0] == 0 or demand.shape[0] == 0:
        raise ValueError("transport_cost: supply and demand need at least one point each")
    if cost.shape[0] != supply.shape[0] or cost.shape[1] < demand.shape[0]:
        raise ValueError("transport_cost: cost must have a row per supply point and a column per demand point")
    total = 0
    for s in supply:
        if s <= 0:
            raise ValueError("transport_cost: every supply mass must be > 0")
        total += s
    for d in demand:
        if d <= 0:
            raise ValueError("transport_cost: every demand mass must be > 0")
        total -= d
    if total != 0:
        raise ValueError("transport_cost: supply and demand must have the same total")


@njit(cache=True, nogil=True)
def transport_cost(
    supply,
    demand,
    cost,
    min_block_arcs=MIN_BLOCK_ARCS,
    mask_max_nodes=MASK_MAX_NODES,
    full_pricing_max_arcs=FULL_PRICING_MAX_ARCS,
    basis=None,
    potentials=None,
):
    """Optimal ``sum_pq flow_pq * cost_pq`` for integer masses (equal totals).

    Args:
        supply: ``[m]`` int64 masses, all > 0.
        demand: ``[n]`` int64 masses, all > 0, same total as ``supply``.
        cost: ``[m, n]`` float64 costs, or ``[m, w]`` with ``w >= n``: columns past ``n``
            are scratch that the solver may overwrite. With ``w >= cost_width(n)`` and C
            order the solver prices the rows in place; otherwise it makes a padded copy.
        min_block_arcs: the fewest arcs a pricing block spans (the optimum does not depend
            on it).
        mask_max_nodes: keep the basis tree as ancestor bit masks when ``m + n`` is at
            most this (at most 63), else as a thread (nor does the optimum).
        full_pricing_max_arcs: price all rows each pivot (Dantzig's rule) when ``m * n``
            is at most this and rows are padded, else in blocks (nor does the optimum).
        basis: optional ``[3, m + n - 1]`` int64 output: the optimal basis's arcs, as supply
            point, demand point and integer flow (degenerate arcs carry flow 0), the optimal
            plan (:mod:`mwsp_torch.transport.dense`). Omitted, nothing is written and the
            solve compiles as without it.
        potentials: optional ``[m + n]`` float64 output: the final dual potentials, ``u_p`` at
            ``p`` and ``v_q`` at ``m + q``, with ``u_p + v_q = cost_pq`` on the basis and
            ``cost_pq - u_p - v_q`` above minus the stopping threshold everywhere.

    Returns:
        float64 optimal cost (not divided by the total mass).

    Raises:
        ValueError: on an empty side, a mass that is not positive, unequal totals, or
            costs without exactly one row per supply point or with fewer columns than
            demand points (the start would otherwise read and write past its arrays).
    """
    m = supply.shape[0]
    n = demand.shape[0]
    _check_masses(supply, demand, cost)
    num_basic = m + n - 1
    num_nodes = m + n
    # One integer pool, carved into the working arrays (fewer allocations per solve).
    pool_owner = np.empty(2 * m + 2 * n + 10 * num_basic + 15 * num_nodes + 2, dtype=np.int64)
    pool = borrowed(pool_owner)  # see `pot` below
    rs_u, o = _take(pool, 0, m)
    rs_e, o = _take(pool, o, m)
    rd_u, o = _take(pool, o, n)
    rd_e, o = _take(pool, o, n)
    b_p, o = _take(pool, o, num_basic)
    b_q, o = _take(pool, o, num_basic)
    f_u, o = _take(pool, o, num_basic)
    f_e, o = _take(pool, o, num_basic)
    nxt, o = _take(pool, o, 2 * num_basic)
    cyc_arc, o = _take(pool, o, 2 * num_basic)
    cyc_node, o = _take(pool, o, 2 * num_basic)
    head, o = _take(pool, o, num_nodes)
    parent, o = _take(pool, o, num_nodes)
    parent_arc, o = _take(pool, o, num_nodes)
    order, o = _take(pool, o, num_nodes)  # preorder of the first basis tree
    size, o = _take(pool, o, num_nodes)  # subtree sizes
    thread, o = _take(pool, o, num_nodes)  # the preorder as a cycle: next node
    rev, o = _take(pool, o, num_nodes)  # and previous node
    last, o = _take(pool, o, num_nodes)  # each subtree's last node in the preorder
    scratch, o = _take(pool, o, num_nodes)
    anc, o = _take(pool, o, num_nodes)
    stem, o = _take(pool, o, num_nodes)
    down, o = _take(pool, o, num_nodes + 2)
    stem_last, o = _take(pool, o, num_nodes)
    stem_rev, o = _take(pool, o, num_nodes)
    stem_next, o = _take(pool, o, num_nodes)
    # u_p at p, v_q at m + q; zeros past the last v_q, read by the padded row minima.
    pot_owner = np.zeros(num_nodes + LANES, dtype=np.float64)
    # The work arrays and the costs as borrowed views, not reference-counted (numba's
    # atomic reference counts are a cost per access on some CPUs; mwsp_torch.transport._borrow). The
    # owners are released at the end; the caller holds `cost` for the whole call.
    pot = borrowed(pot_owner)
    cost = borrowed(cost)
    # Rows under ROW_MIN_SIMD columns are priced padded to `width` columns, the padding
    # CLOSED (beyond any difference), from `flat` with `stride` entries a row.
    padded = n < ROW_MIN_SIMD
    width = cost_width(n)
    chunks = width // LANES
    stride = cost.shape[1]
    flat_owner = np.empty(m * width if padded and stride < width else 0, dtype=np.float64)
    if padded and stride < width:
        flat = borrowed(flat_owner)
        for p in range(m):
            for q in range(n):
                flat[p * width + q] = cost[p, q]
            for q in range(n, width):
                flat[p * width + q] = CLOSED
        stride = width
    else:
        for p in range(m):
            for q in range(n, width):
                cost[p, q] = CLOSED
        flat = cost.ravel()  # a view of C-ordered costs (numba copies other layouts)
    # Residual masses as (units, eps) pairs: Orden's perturbation.
    rs_u[:] = supply
    rs_e[:] = 1
    rd_u[:] = demand
    rd_e[:] = 0
    rd_e[n - 1] = m
    use_masks = num_nodes <= min(mask_max_nodes, 63)
    root = _row_minimum_start(
        cost, n, flat, stride, chunks, padded, rs_u, rs_e, rd_u, rd_e, b_p, b_q, f_u, f_e, parent, parent_arc, order
    )
    if use_masks:
        # The row-minimum start closes a node's parent after the node (see there), so its
        # closing order, reversed, puts parents first: no walk over the tree needed.
        parent[root] = -1
        parent_arc[root] = -1
        pot[root] = 0.0
        anc[root] = np.int64(1) << root
        for i in range(num_basic - 1, -1, -1):
            v = order[i]
            a = parent_arc[v]
            pot[v] = cost[b_p[a], b_q[a]] - pot[parent[v]]
            anc[v] = anc[parent[v]] | (np.int64(1) << v)
    else:
        _first_tree(
            m, num_basic, num_nodes, use_masks, b_p, b_q, head, nxt, parent, parent_arc, pot, order, scratch, cost,
            anc, size, thread, rev, last,
        )  # fmt: skip
    # Pricing: every row (small padded problems), or blocks of ~sqrt(m n) arcs (POT's
    # default), at least MIN_BLOCK_ARCS, in whole rows.
    full_pricing = padded and m * n <= full_pricing_max_arcs
    row_mins_owner = np.empty(m if full_pricing else 0, dtype=np.float64)
    row_mins = borrowed(row_mins_owner)
    rows_per_block = max(1, max(int(np.sqrt(m * n)), min_block_arcs) // n)
    demand_pot = pot[m:]
    scale = 0.0
    for p in range(m):
        scale = max(scale, max_abs(cost[p], n))
    tol = 1e-14 * max(scale, 1e-300)
    # Reduced costs are (c - v) - u: their rounding grows with the potentials, which drift
    # far beyond the costs over many pivots (DD graphs 5 and 21: |u| two orders of magnitude
    # over the costs). So the pricing threshold grows with a bound on max |pot|: the true maximum
    # every num_nodes pivots, plus every shift since (a shift moves a potential by the
    # entering arc's reduced cost). See POT_REL_TOL.
    pot_bound = max_abs(pot, num_nodes)
    since_bound = 0
    top = 2 * num_basic - 1
    p = 0
    pivots_left = MAX_PIVOTS_PER_NODE_SQUARED * num_nodes * num_nodes
    while True:
        threshold = tol + POT_REL_TOL * pot_bound
        if full_pricing:
            enter_p, enter_q = _price_all(
                flat, stride, chunks, cost, pot, demand_pot, m, n, threshold, row_mins
            )  # fmt: skip
        else:
            enter_p, enter_q, p = _price(
                cost, flat, stride, chunks, padded, pot, demand_pot, m, n, rows_per_block, threshold, p
            )  # fmt: skip
        if enter_p < 0:
            break
        pivots_left -= 1
        if pivots_left < 0:
            raise RuntimeError("transport_cost: pivot limit reached: the basis tree or its potentials are inconsistent")
        since_bound += 1
        if since_bound == num_nodes:
            pot_bound = max_abs(pot, num_nodes)
            since_bound = 0
        pot_bound += abs(cost[enter_p, enter_q] - pot[enter_p] - demand_pot[enter_q])
        # Cycle: enter_p -> enter_q (+), then the tree path from enter_q back to enter_p.
        if use_masks:
            pushed = _cycle_push_masks(m, enter_p, enter_q, parent_arc, anc, f_u, f_e)
            leave, leave_node, leave_on_a, th_u, th_e = pushed
            join = -1
        else:  # the demand side stored from the front of cyc_arc, the supply side from the back
            len_a, len_b, join = _cycle_by_size(m, enter_p, enter_q, parent, parent_arc, size, cyc_arc, cyc_node, top)
            leave, leave_node, leave_on_a, th_u, th_e = _push(cyc_arc, cyc_node, len_a, len_b, top, f_u, f_e)
        if use_masks:
            _rehang_masks(
                m, num_nodes, enter_p, enter_q, leave, leave_node, leave_on_a, parent, parent_arc, anc, pot, stem,
                down, cost,
            )  # fmt: skip
        else:
            _rehang_thread(
                m, enter_p, enter_q, leave, leave_node, leave_on_a, parent, parent_arc, size, thread, rev, last, pot,
                stem, down, stem_last, stem_rev, stem_next, cost, join,
            )  # fmt: skip
        # Slot `leave` now holds the entering arc.
        b_p[leave] = enter_p
        b_q[leave] = enter_q
        f_u[leave] = th_u
        f_e[leave] = th_e
    total = 0.0
    for a in range(num_basic):
        total += f_u[a] * cost[b_p[a], b_q[a]]
    if basis is not None:  # pruned by numba where omitted
        for a in range(num_basic):
            basis[0, a] = b_p[a]
            basis[1, a] = b_q[a]
            basis[2, a] = f_u[a]
    if potentials is not None:
        for v in range(num_nodes):
            potentials[v] = pot[v]
    release(pool_owner)
    release(pot_owner)
    release(flat_owner)
    release(row_mins_owner)
    return total


@njit(cache=True, nogil=True)
def _first_tree(
    m, num_basic, num_nodes, use_masks, b_p, b_q, head, nxt, parent, parent_arc, pot, order, scratch, cost, anc, size,
    thread, rev, last,
):  # fmt: skip
    """Parents, potentials and a preorder of the first basis tree, hung from node 0 by a
    depth-first walk over adjacency lists; then ancestor masks, or the thread's lists."""
    # Linked adjacency: arc a has half-edges 2a (at its supply) and 2a + 1 (at its demand).
    head[:num_nodes] = -1
    for a in range(num_basic):
        nxt[2 * a] = head[b_p[a]]
        head[b_p[a]] = 2 * a
        nxt[2 * a + 1] = head[m + b_q[a]]
        head[m + b_q[a]] = 2 * a + 1
    parent[0] = -1
    parent_arc[0] = -1
    pot[0] = 0.0
    _preorder(m, b_p, b_q, head, nxt, parent, parent_arc, pot, order, scratch, cost)
    if use_masks:
        anc[0] = 1
        for i in range(1, num_nodes):  # preorder: parents first
            anc[order[i]] = anc[parent[order[i]]] | (1 << order[i])
    else:
        size[:] = 1
        for i in range(num_nodes - 1, 0, -1):  # reverse preorder: children first
            size[parent[order[i]]] += size[order[i]]
        for i in range(num_nodes):
            thread[order[i]] = order[(i + 1) % num_nodes]
            rev[order[(i + 1) % num_nodes]] = order[i]
            last[order[i]] = order[i + size[order[i]] - 1]


@njit(cache=True, nogil=True, fastmath=True)
def max_abs(values, n):
    """``max(abs(values[:n]))`` (0 for ``n == 0``): the pricing threshold's cost scale and
    potential bound. ``fastmath`` lets LLVM vectorise it (the maximum is exact in any order,
    and costs and potentials are finite); numba's own ``max`` of floats handles NaN and so
    runs one element at a time, a visible share of a small solve over all ``m n`` costs."""
    top = 0.0
    for i in range(n):
        top = max(top, abs(values[i]))
    return top


@njit(cache=True, nogil=True, inline="always")
def _price_all(flat, stride, chunks, cost, pot, demand_pot, m, n, tol, row_mins):
    """Dantzig's rule: the first arc of the most negative reduced cost of all (``-1, -1`` at
    optimality). Every row's minimum in vector registers, the best row kept by selects, no
    branch per row (cheaper than a second scan for the row); then the column by one
    branch-free search of that row (:func:`mwsp_torch.transport._simd.padded_first_at`)."""
    low = CLOSED
    best = 0
    for p in range(m):
        row_min = padded_row_min(flat, p * stride, demand_pot, chunks)
        row_mins[p] = row_min
        r = row_min - pot[p]
        better = r < low
        low = r if better else low
        best = p if better else best
    if not (low < -tol):
        return -1, -1
    return best, padded_first_at(flat, best * stride, demand_pot, chunks, n, row_mins[best])


@njit(cache=True, nogil=True, inline="always")
def _price(cost, flat, stride, chunks, padded, pot, demand_pot, m, n, rows_per_block, tol, p):
    """Entering arc ``(enter_p, enter_q)`` (``-1, -1`` at optimality) and the next row to scan.

    Block search by whole rows from row ``p``: the most negative reduced cost in the first
    block of rows that has one. A row's minimum is a branch-free loop (padded rows:
    :func:`~._simd.padded_row_min`, else :func:`~._simd.row_min`), the best row kept
    by selects rather than a branch, which would be mispredicted; the entering column is
    then found in that row alone.
    """
    enter_p = -1
    enter_q = -1
    best = -tol
    best_row_min = 0.0
    rows_scanned = 0
    while rows_scanned < m:
        stop = min(rows_scanned + rows_per_block, m)
        while rows_scanned < stop:
            if padded:
                row_min = padded_row_min(flat, p * stride, demand_pot, chunks)
            else:
                row_min = row_min_simd(cost[p], demand_pot, n)
            r = row_min - pot[p]
            better = r < best
            best = r if better else best
            best_row_min = row_min if better else best_row_min
            enter_p = p if better else enter_p
            rows_scanned += 1
            p += 1
            if p == m:
                p = 0
        if enter_p >= 0:
            break
    if enter_p >= 0 and padded:
        enter_q = padded_first_at(flat, enter_p * stride, demand_pot, chunks, n, best_row_min)
    elif enter_p >= 0:
        enter_q = _first_at(cost[enter_p], demand_pot, n, best_row_min)
    return enter_p, enter_q, p


@njit(cache=True, nogil=True, inline="always")
def _cycle_step(node, m, demand_side, parent_arc, cyc_arc, cyc_node, at):
    """Record the tree arc from ``node`` to its parent at ``cyc_arc[at]``, signed: on the
    demand side (walked child -> parent) it is '+' iff the child is a supply, on the supply
    side iff the child is a demand; '-' arcs are stored as ``-1 - arc``."""
    plus = (node < m) if demand_side else (node >= m)
    cyc_arc[at] = parent_arc[node] if plus else -1 - parent_arc[node]
    cyc_node[at] = node


@njit(cache=True, nogil=True)
def _cycle_by_size(m, enter_p, enter_q, parent, parent_arc, size, cyc_arc, cyc_node, top):
    """The entering arc's cycle by subtree sizes: of two distinct nodes, the one with the
    smaller subtree is no ancestor of the other, so it climbs; they meet at the join.
    Returns ``(len_a, len_b, join)``."""
    a_node = m + enter_q
    b_node = enter_p
    len_a = 0
    len_b = 0
    while a_node != b_node:
        if size[a_node] < size[b_node]:
            _cycle_step(a_node, m, True, parent_arc, cyc_arc, cyc_node, len_a)
            len_a += 1
            a_node = parent[a_node]
        else:
            _cycle_step(b_node, m, False, parent_arc, cyc_arc, cyc_node, top - len_b)
            len_b += 1
            b_node = parent[b_node]
    return len_a, len_b, a_node


@njit(cache=True, nogil=True)
def _cycle_push_masks(m, enter_p, enter_q, parent_arc, anc, f_u, f_e):
    """The entering arc's cycle, its leaving arc and the flow pushed round it, by ancestor masks.

    A tree arc is named by its child end. The cycle's tree arcs are the nodes in either
    end's ancestors but not both: ``side_a`` on the demand end's side, ``side_b`` on the
    supply end's. Walked from the demand end, an arc is '-' iff its child is a demand; on
    the supply end's side iff its child is a supply. So the '-' arcs are one mask, and
    theta, the leaving arc and the flow changes come from walking bits (independent
    loads), not from climbing parents (one load waiting on the last).

    Returns ``(leave, leave_node, leave_on_a, theta_units, theta_eps)``, as :func:`_push`.
    """
    a_anc = anc[m + enter_q]
    b_anc = anc[enter_p]
    side_a = a_anc & ~b_anc
    side_b = b_anc & ~a_anc
    supplies = (np.int64(1) << m) - 1
    minus = (side_a & ~supplies) | (side_b & supplies)
    plus = (side_a & supplies) | (side_b & ~supplies)
    # theta: the lexicographically smallest flow on a '-' arc (unique: see _push), found by
    # selects on one integer key per flow, `units * 256 + eps`. The key orders flows as
    # (units, eps) does because |eps| < 128: a basic arc's eps part is the net perturbation on
    # one side of the tree's cut, between -m and m, and m <= 62 on masks. Selects, because
    # a branch per arc would be mispredicted.
    leave_node = -1
    best = np.int64(0x7FFFFFFFFFFFFFFF)
    bits = minus
    while bits:
        w = lowest_bit(bits)
        bits &= bits - 1
        a = parent_arc[w]
        key = (f_u[a] << 8) + f_e[a]
        better = key < best
        best = key if better else best
        leave_node = w if better else leave_node
    leave = parent_arc[leave_node]
    th_u = f_u[leave]
    th_e = f_e[leave]
    bits = minus
    while bits:
        a = parent_arc[lowest_bit(bits)]
        bits &= bits - 1
        f_u[a] -= th_u
        f_e[a] -= th_e
    bits = plus
    while bits:
        a = parent_arc[lowest_bit(bits)]
        bits &= bits - 1
        f_u[a] += th_u
        f_e[a] += th_e
    return leave, leave_node, ((side_a >> leave_node) & 1) == 1, th_u, th_e


@njit(cache=True, nogil=True)
def _push(cyc_arc, cyc_node, len_a, len_b, top, f_u, f_e):
    """Send theta round the cycle: theta is the lexicographically smallest flow on a '-'
    arc, unique because every basis is non-degenerate; that arc leaves.

    Returns ``(leave, leave_node, leave_on_a, theta_units, theta_eps)``: the leaving arc,
    its child end, and whether it lay on the demand side of the cycle.
    """
    leave = -1
    leave_node = -1
    leave_on_a = False
    th_u = 0
    th_e = 0
    for i in range(len_a):
        if cyc_arc[i] < 0:
            a = -1 - cyc_arc[i]
            if leave < 0 or _lex_less(f_u[a], f_e[a], th_u, th_e):
                leave, leave_node, leave_on_a, th_u, th_e = a, cyc_node[i], True, f_u[a], f_e[a]
    for i in range(top - len_b + 1, top + 1):
        if cyc_arc[i] < 0:
            a = -1 - cyc_arc[i]
            if leave < 0 or _lex_less(f_u[a], f_e[a], th_u, th_e):
                leave, leave_node, leave_on_a, th_u, th_e = a, cyc_node[i], False, f_u[a], f_e[a]
    for i in range(len_a):
        _add_flow(cyc_arc[i], th_u, th_e, f_u, f_e)
    for i in range(top - len_b + 1, top + 1):
        _add_flow(cyc_arc[i], th_u, th_e, f_u, f_e)
    return leave, leave_node, leave_on_a, th_u, th_e


@njit(cache=True, nogil=True, inline="always")
def _add_flow(signed_arc, th_u, th_e, f_u, f_e):
    if signed_arc >= 0:
        f_u[signed_arc] += th_u
        f_e[signed_arc] += th_e
    else:
        f_u[-1 - signed_arc] -= th_u
        f_e[-1 - signed_arc] -= th_e


@njit(cache=True, nogil=True, inline="always")
def _reverse_stem(outer, leave, k, stem, parent, parent_arc):
    """Parents along the stem ``stem[0] = inner, ..., stem[k] = leave_node`` reversed:
    ``inner`` hangs from ``outer`` by the entering arc (which takes the leaving arc's slot
    ``leave``), and each ``stem[i]`` from ``stem[i - 1]`` by the arc that joined them."""
    carry = parent_arc[stem[0]]
    parent[stem[0]] = outer
    parent_arc[stem[0]] = leave
    for i in range(1, k + 1):
        held = parent_arc[stem[i]]
        parent_arc[stem[i]] = carry
        carry = held
        parent[stem[i]] = stem[i - 1]


@njit(cache=True, nogil=True)
def _rehang_masks(
    m, num_nodes, enter_p, enter_q, leave, leave_node, leave_on_a, parent, parent_arc, anc, pot, stem, down, cost
):
    """Re-hang the subtree cut off by the leaving arc below the entering arc, on masks.

    The subtree T (nodes whose ancestors include ``leave_node``) hangs again from its
    entering-arc end ``inner``: parents change only along the stem ``inner -> leave_node``
    (reversed), T's potentials move by one shift (``+`` on ``inner``'s side of the
    bipartition, ``-`` on the other), and a node's ancestors within T become its old ones
    off the stem plus the stem from its attachment point down to ``inner`` (which the
    count of its old stem ancestors identifies), then ``outer``'s. One branch-free pass
    over all nodes finds T as a mask; then only T's nodes are visited, by its bits.
    """
    if leave_on_a:
        inner, outer = m + enter_q, enter_p
    else:
        inner, outer = enter_p, m + enter_q
    above = anc[parent[leave_node]]  # T's old ancestors outside T
    anc_outer = anc[outer]
    # Potentials: u_p + v_q = c_pq on the entering arc, + on inner's side.
    shift = cost[enter_p, enter_q] - pot[outer] - pot[inner]
    shift_supply = shift if inner < m else -shift
    k = 0  # the stem climbed in registers (its arrays are only written here)
    node = inner
    stem_mask = np.int64(1) << inner
    stem[0] = node
    down[0] = stem_mask
    while node != leave_node:
        node = parent[node]
        stem_mask |= np.int64(1) << node
        k += 1
        stem[k] = node
        down[k] = stem_mask
    _reverse_stem(outer, leave, k, stem, parent, parent_arc)
    members = 0  # T as a mask
    for w in range(num_nodes):
        members |= ((anc[w] >> leave_node) & 1) << w
    while members:
        lowest = members & -members
        members ^= lowest
        w = lowest_bit(lowest)
        within = anc[w] & ~above
        attach = k + 1 - _popcount(within & stem_mask)  # stem index of w's attachment
        anc[w] = (within & ~stem_mask) | down[attach] | anc_outer
        pot[w] += shift_supply if w < m else -shift_supply


@njit(cache=True, nogil=True)
def _rehang_thread(
    m, enter_p, enter_q, leave, leave_node, leave_on_a, parent, parent_arc, size, thread, rev, last, pot, stem,
    stem_size, stem_last, stem_rev, stem_next, cost, join,
):  # fmt: skip
    """Re-hang the subtree cut off by the leaving arc below the entering arc, on a thread.

    The tree's preorder is a doubly linked cycle (``thread`` to the next node, ``rev`` to
    the previous one) with subtree sizes and each subtree's last node ``last``, so a
    subtree is the run ``v .. last[v]``. The cut-off subtree T (rooted at ``leave_node``)
    re-rooted at its entering-arc end ``inner`` along the stem ``inner = s_0, ..., s_k =
    leave_node`` has the preorder: s_0's old run, then s_1's old run without s_0's, ...,
    s_k's without s_(k-1)'s. Each such piece is at most two stretches of the old thread,
    so T is relinked by a few pointers per stem node, cut out and spliced in after
    ``outer`` (as its first child); ``last`` changes on the stem and on the two paths
    where a run ended at T's old end or at ``outer``. Sizes change along the stem and from
    either end of the cycle up to the join, parents along the stem, and T's potentials by
    one shift (``u + v = c`` on the entering arc), a walk of T's thread, or the rest of
    the tree (``size[0]`` nodes in all) by the opposite shift when that is smaller: the
    only step that visits more than the stem and the cycle. Classic network simplex codes
    (LEMON's ``thread``, ``succ_num`` and ``last_succ``) keep the same lists.
    """
    if leave_on_a:
        inner, outer = m + enter_q, enter_p
    else:
        inner, outer = enter_p, m + enter_q
    t_size = size[leave_node]
    old_parent = parent[leave_node]
    # The stem, with its old sizes and thread ends (read before any pointer changes).
    k = 0
    stem[0] = inner
    while True:
        v = stem[k]
        stem_size[k] = size[v]
        stem_last[k] = last[v]
        stem_rev[k] = rev[v]
        stem_next[k] = thread[last[v]]
        if v == leave_node:
            break
        stem[k + 1] = parent[v]
        k += 1
    # Cut T out of the thread; runs that ended with T now end just before it.
    before = stem_rev[k]
    thread[before] = stem_next[k]
    rev[stem_next[k]] = before
    v = old_parent
    while v >= 0 and last[v] == stem_last[k]:
        last[v] = before
        v = parent[v]
    # Relink T: s_0's old run, then each s_i's old run without s_(i-1)'s.
    tail = stem_last[0]
    for i in range(1, k + 1):
        thread[tail] = stem[i]
        rev[stem[i]] = tail
        tail = stem_rev[i - 1]  # s_i's stretch before s_(i-1)'s old run ends here
        if stem_last[i - 1] != stem_last[i]:  # and one after it
            thread[tail] = stem_next[i - 1]
            rev[stem_next[i - 1]] = tail
            tail = stem_last[i]
    for i in range(k + 1):
        last[stem[i]] = tail
    # Splice T in after outer; runs that ended at outer now end with T.
    follow = thread[outer]
    thread[outer] = inner
    rev[inner] = outer
    thread[tail] = follow
    rev[follow] = tail
    v = outer
    while v >= 0 and last[v] == outer:
        last[v] = tail
        v = parent[v]
    # Sizes: along the stem (s_i keeps its old run less s_(i-1)'s, plus s_(i+1)'s new
    # subtree), then T leaves old_parent's path to the join and joins outer's.
    grown = 0
    for i in range(k, 0, -1):
        grown += stem_size[i] - stem_size[i - 1]
        size[stem[i]] = grown
    size[inner] = t_size
    v = old_parent
    while v != join:
        size[v] -= t_size
        v = parent[v]
    v = outer
    while v != join:
        size[v] += t_size
        v = parent[v]
    _reverse_stem(outer, leave, k, stem, parent, parent_arc)
    shift = cost[enter_p, enter_q] - pot[outer] - pot[inner]
    shift_supply = shift if inner < m else -shift
    # T's potentials move by the shift, or (when T is the larger part) everything else's
    # by its opposite: only the sums u_p + v_q matter, and they are the same either way.
    # T is the thread's run inner .. tail, the rest the run follow .. outer.
    if 2 * t_size <= size[0]:
        _shift_run(m, inner, tail, t_size, shift_supply, thread, rev, pot)
    else:
        _shift_run(m, follow, outer, size[0] - t_size, -shift_supply, thread, rev, pot)


@njit(cache=True, nogil=True, inline="always")
def _shift_run(m, first, final, count, shift_supply, thread, rev, pot):
    """Shift the potentials of the ``count`` nodes of the thread's run ``first .. final``
    (``+`` on supplies, ``-`` on demands), walked from both ends at once.

    Each step of a walk waits for the load of the next node, so two walks that meet in
    the middle take about half as long as one; it matters on large problems (DD's).
    """
    v = first
    w = final
    for _ in range(count >> 1):
        pot[v] += shift_supply if v < m else -shift_supply
        pot[w] += shift_supply if w < m else -shift_supply
        v = thread[v]
        w = rev[w]
    if count & 1:
        pot[v] += shift_supply if v < m else -shift_supply


@njit(cache=True, nogil=True, inline="always")
def _allocate(p, q, count, rs_u, rs_e, rd_u, rd_e, b_p, b_q, f_u, f_e):
    """Send as much as possible from supply ``p`` to demand ``q`` as basic arc ``count``."""
    if _lex_less(rs_u[p], rs_e[p], rd_u[q], rd_e[q]):
        fu, fe = rs_u[p], rs_e[p]
    else:
        fu, fe = rd_u[q], rd_e[q]
    rs_u[p] -= fu
    rs_e[p] -= fe
    rd_u[q] -= fu
    rd_e[q] -= fe
    b_p[count] = p
    b_q[count] = q
    f_u[count] = fu
    f_e[count] = fe


@njit(cache=True, nogil=True)
def _row_minimum_start(
    cost, n, flat, stride, chunks, padded, rs_u, rs_e, rd_u, rd_e, b_p, b_q, f_u, f_e, parent, parent_arc, finish
):  # fmt: skip
    """Rows in turn send to their cheapest open columns (cheap; good for small problems),
    rows with the cheapest minimum first (sorted by their minima, ties by index: fewer pivots
    follow than in index order; a true least-cost start, the cheapest open cell of all each
    time, leaves fewer still but is slower overall, ``docs/performance.md``).

    A closed column is priced out by a ``-CLOSED`` offset, so each choice is one branch-free
    minimum (:func:`mwsp_torch.transport._simd.padded_row_min` on padded rows, else
    :func:`mwsp_torch.transport._simd.row_min`) and a search for the first column that attains it (padded rows:
    :func:`mwsp_torch.transport._simd.padded_first_at`, branch-free; else a scan, unguarded, unlike
    :func:`_first_at`: the minimum is one of the very differences it scans, so it is found).

    Also the first basis tree, for free: each allocation closes its column or its row,
    never both (Orden's perturbation) except the last. A closed column hangs from the row
    that closed it; a closed row from the column it sent to last, which is still open and
    so closes later. Parents thus close after their children: ``finish`` lists the nodes
    in closing order (``m + n - 1`` of them) and the last row is the root, returned, which
    spares small problems the depth-first walk of :func:`_first_tree`.
    """
    m = cost.shape[0]
    # Borrowed views, not reference-counted in the loops (see transport_cost).
    offset_owner = np.zeros(max(n, LANES * chunks), dtype=np.float64)
    lows_owner = np.empty(m, dtype=np.float64)
    rows_owner = np.empty(m, dtype=np.int64)
    offset, lows, rows = borrowed(offset_owner), borrowed(lows_owner), borrowed(rows_owner)
    for p in range(m):
        lows[p] = _start_row_min(cost, n, flat, stride, chunks, padded, offset, p)
    rows_by_minimum(lows, rows, RANK_SORT_MAX_ROWS)
    count = 0
    for p in rows:
        row = cost[p]
        while rs_u[p] != 0 or rs_e[p] != 0:
            low = _start_row_min(cost, n, flat, stride, chunks, padded, offset, p)
            if padded:
                q = padded_first_at(flat, p * stride, offset, chunks, n, low)
            else:
                q = 0
                while row[q] - offset[q] != low:  # found: low is one of these same differences
                    q += 1
            _allocate(p, q, count, rs_u, rs_e, rd_u, rd_e, b_p, b_q, f_u, f_e)
            if rd_u[q] == 0 and rd_e[q] == 0:
                offset[q] = -CLOSED
                parent[m + q] = p
                parent_arc[m + q] = count
                finish[count] = m + q
            else:
                parent[p] = m + q
                parent_arc[p] = count
                finish[count] = p
            count += 1
    root = rows[m - 1]
    release(offset_owner)
    release(lows_owner)
    release(rows_owner)
    return root


@njit(cache=True, nogil=True)
def rows_by_minimum(lows, rows, rank_sort_max_rows):
    """Row indices into ``rows`` in ascending order of ``lows``, ties by index (a stable
    sort): up to ``rank_sort_max_rows`` rows, each row's rank counted branch-free
    (``RANK_SORT_MAX_ROWS``), else ``np.argsort``'s merge sort."""
    m = lows.shape[0]
    if m <= rank_sort_max_rows:
        for p in range(m):
            low = lows[p]
            rank = 0
            for j in range(m):
                rank += (lows[j] < low) | ((lows[j] == low) & (j < p))
            rows[rank] = p
    else:
        rows[:] = np.argsort(lows, kind="mergesort")


@njit(cache=True, nogil=True, inline="always")
def _start_row_min(cost, n, flat, stride, chunks, padded, offset, p):
    """Row ``p``'s cheapest open difference ``cost[p, q] - offset[q]`` (the start's choice)."""
    if padded:
        return padded_row_min(flat, p * stride, offset, chunks)
    return row_min_simd(cost[p], offset, n)


@njit(cache=True, nogil=True, fastmath=True)
def _max(values, n):
    """``max(values[:n])``, ``n >= 1``, in any order (fastmath: no infinities here); the
    result is one of the values, bit for bit."""
    high = values[0]
    for i in range(1, n):
        high = max(high, values[i])
    return high


@njit(cache=True, nogil=True, inline="always")
def _first_at(row, offset, n, low):
    """The first ``q`` with ``row[q] - offset[q] == low``, the minimum
    :func:`mwsp_torch.transport._simd.row_min` gave (the same subtractions, so one scan with one
    mispredicted branch, not a running argmin; :func:`mwsp_torch.transport._simd.argmin_difference`
    is a guard that runs only if a compiler ever broke that equality)."""
    q = 0
    while q < n and row[q] - offset[q] != low:
        q += 1
    if q == n:
        q = argmin_difference(row, offset, n)
    return q


@njit(cache=True, nogil=True)
def _preorder(m, b_p, b_q, head, nxt, parent, parent_arc, pot, order, stack, cost):
    """Parents, potentials and a preorder of the basis tree hung from node 0 (whose own
    are set), by a depth-first walk over the adjacency lists."""
    stack[0] = 0
    top = 1
    visited = 0
    while top > 0:
        top -= 1
        v = stack[top]
        order[visited] = v
        visited += 1
        slot = head[v]
        while slot >= 0:
            a = slot >> 1
            w = b_p[a] if slot & 1 else m + b_q[a]
            if w != parent[v]:
                parent[w] = v
                parent_arc[w] = a
                pot[w] = cost[b_p[a], b_q[a]] - pot[v]
                stack[top] = w
                top += 1
            slot = nxt[slot]
