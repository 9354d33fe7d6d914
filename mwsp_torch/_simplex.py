"""A compiled exact solver for small transportation problems (the EMD between two graphs).

Why our own and not POT's: ``ot.emd2`` spends 150-260 us per call at MWSP's sizes,
about 80 % of it in its Python wrapper, and an all-pairs matrix is millions of calls
(8.4 M on NCI1). This solver is called from a numba ``prange`` loop over pairs, so
no Python runs per pair and threads need no GIL. It is checked against POT's
network simplex to 1e-9 relative in ``tests/test_transport.py`` and timed against it in
``benchmarks/``.

Method: the primal transportation simplex on the bipartite spanning-tree basis.

- Masses are exact integers: graph ``G`` with ``n_G`` nodes gives support point ``p``
  the mass ``count_p * n_H`` and ``H``'s point ``q`` the mass ``count_q * n_G``, both
  sides summing to ``n_G * n_H``; the distance is the optimal cost divided by that.
- Degeneracy (ubiquitous here: uniform masses) is removed by the classic
  perturbation (Orden 1956): every supply gets ``+eps`` and the last demand
  ``+m eps``. Flows are pairs ``(units, eps-multiples)`` compared lexicographically,
  so every basis is non-degenerate, every pivot strictly improves, and the method
  cannot cycle. At ``eps -> 0`` the final basis is optimal for the real problem
  (reduced costs do not depend on the masses).
- Pricing: block search over whole rows (POT's block size ~sqrt(m n) arcs, but at
  least ``MIN_BLOCK_ARCS``, rounded to rows), each row's minimum reduced cost a
  vectorised loop: 1.1-1.2x fewer seconds than arc-by-arc blocks on NCI1, ENZYMES
  and REDDIT problems.
- Start: the row-minimum rule (each row fills its cheapest open columns; a
  sort of all costs for the least-cost rule was slower overall); from
  ``VOGEL_MIN_ARCS`` arcs on, Vogel's approximation.
- The basis tree keeps parents, depths and potentials; a pivot re-hangs only the
  subtree cut off by the leaving arc (linked adjacency lists, one traversal of
  that subtree), and recomputes its potentials from the arc costs (no drift).

Measured on 3,000 NCI1 pairs (d=2, k=0; 16 x 16 after collapsing): 20 us per solve,
POT's own C++ ``EMD_wrap`` called the same way (no Python) 23 us; on 280 x 280 both
take 4.7 ms. Developers: numba caches a caller by its own file, so after editing this
module delete the ``*.nbi``/``*.nbc`` files under ``mwsp_torch/__pycache__``.
"""

from __future__ import annotations

import numpy as np
from numba import njit

#: Problems with at least this many arcs start from Vogel's approximation, smaller
#: ones from the row-minimum rule (measured crossover: Vogel 1.5x faster on DD's
#: ~300 x 300, 1.2x slower on REDDIT's ~70 x 70 and NCI1's ~18 x 18).
VOGEL_MIN_ARCS = 20_000

#: Pricing blocks span at least this many arcs. On problems of 18-30 points a block
#: of one row (POT's sqrt(m n) rule) finds poor entering arcs: 3-5 rows cut pivots
#: by 20-25 % and time by 1.08-1.16x (NCI1, ENZYMES, PROTEINS; measured by
#: ``benchmarks/solver_settings.py``); from ~60 points on, where sqrt(m n) already
#: exceeds this, the rule is unchanged (REDDIT, DD).
MIN_BLOCK_ARCS = 96


@njit(cache=True, nogil=True, inline="always")
def _lex_less(a_units, a_eps, b_units, b_eps):
    return a_units < b_units or (a_units == b_units and a_eps < b_eps)


@njit(cache=True, nogil=True, inline="always")
def _take(pool, offset, size):
    """The next ``size`` entries of ``pool`` and the offset after them."""
    return pool[offset : offset + size], offset + size


@njit(cache=True, nogil=True, inline="always")
def _unlink(head, nxt, node, slot):
    """Remove half-edge ``slot`` from ``node``'s adjacency list."""
    cur = head[node]
    if cur == slot:
        head[node] = nxt[slot]
        return
    while nxt[cur] != slot:
        cur = nxt[cur]
    nxt[cur] = nxt[slot]


@njit(cache=True, nogil=True)
def transport_cost(supply, demand, cost, vogel_min_arcs=VOGEL_MIN_ARCS, min_block_arcs=MIN_BLOCK_ARCS):
    """Optimal ``sum_pq flow_pq * cost_pq`` for integer masses (equal totals).

    Args:
        supply: ``[m]`` int64 masses, all > 0.
        demand: ``[n]`` int64 masses, all > 0, same total as ``supply``.
        cost: ``[m, n]`` float64 costs.
        vogel_min_arcs: start from Vogel's approximation when ``m * n`` reaches
            this, else from the row-minimum rule (the optimum does not depend on it).
        min_block_arcs: the fewest arcs a pricing block spans (nor does the optimum).

    Returns:
        float64 optimal cost (not divided by the total mass).
    """
    m = supply.shape[0]
    n = demand.shape[0]
    num_basic = m + n - 1
    num_nodes = m + n
    # One integer pool, carved into the working arrays (fewer allocations per solve).
    pool = np.empty(2 * m + 2 * n + 8 * num_basic + 5 * num_nodes, dtype=np.int64)
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
    head, o = _take(pool, o, num_nodes)
    parent, o = _take(pool, o, num_nodes)
    parent_arc, o = _take(pool, o, num_nodes)
    depth, o = _take(pool, o, num_nodes)
    queue, o = _take(pool, o, num_nodes)
    pot = np.empty(num_nodes, dtype=np.float64)  # u_p at p, v_q at m + q
    # Residual masses as (units, eps) pairs: Orden's perturbation.
    rs_u[:] = supply
    rs_e[:] = 1
    rd_u[:] = demand
    rd_e[:] = 0
    rd_e[n - 1] = m
    if m * n >= vogel_min_arcs:
        _vogel_start(cost, rs_u, rs_e, rd_u, rd_e, b_p, b_q, f_u, f_e)
    else:
        _row_minimum_start(cost, rs_u, rs_e, rd_u, rd_e, b_p, b_q, f_u, f_e)
    # Linked adjacency: arc a has half-edges 2a (at its supply) and 2a + 1 (at its demand).
    head[:] = -1
    for a in range(num_basic):
        nxt[2 * a] = head[b_p[a]]
        head[b_p[a]] = 2 * a
        nxt[2 * a + 1] = head[m + b_q[a]]
        head[m + b_q[a]] = 2 * a + 1
    # Parents, depths and potentials by one BFS from node 0.
    depth[:] = -1
    depth[0] = 0
    parent[0] = -1
    parent_arc[0] = -1
    pot[0] = 0.0
    _hang(0, m, b_p, b_q, head, nxt, parent, parent_arc, depth, pot, queue, cost)
    # Pricing blocks of ~sqrt(m n) arcs (POT's default), at least MIN_BLOCK_ARCS, in whole rows.
    rows_per_block = max(1, max(int(np.sqrt(m * n)), min_block_arcs) // n)
    demand_pot = pot[m:]
    scale = 0.0
    for p in range(m):
        for q in range(n):
            scale = max(scale, abs(cost[p, q]))
    tol = 1e-14 * max(scale, 1e-300)
    p = 0
    while True:
        # Block search by whole rows: the most negative reduced cost in the first block
        # of rows that has one. A row's minimum is a vectorised loop (_row_min); the
        # entering column is then found in that row alone.
        enter_p = -1
        enter_q = -1
        best = -tol
        rows_scanned = 0
        while rows_scanned < m:
            stop = min(rows_scanned + rows_per_block, m)
            while rows_scanned < stop:
                low = _row_min(cost[p], demand_pot, n) - pot[p]
                if low < best:
                    best = low
                    enter_p = p
                rows_scanned += 1
                p += 1
                if p == m:
                    p = 0
            if enter_p >= 0:
                break
        if enter_p < 0:
            break
        best = np.inf
        for q in range(n):
            reduced = cost[enter_p, q] - demand_pot[q]
            if reduced < best:
                best = reduced
                enter_q = q
        # Cycle: enter_p -> enter_q (+), then the tree path from enter_q back to enter_p.
        # Demand side, step child -> parent: '+' iff the child is a supply.
        # Supply side, traversed parent -> child: '+' iff the child is a demand.
        a_node = m + enter_q
        b_node = enter_p
        len_a = 0
        len_b = 0
        top = 2 * num_basic - 1
        while depth[a_node] > depth[b_node]:
            cyc_arc[len_a] = parent_arc[a_node] if a_node < m else -1 - parent_arc[a_node]
            len_a += 1
            a_node = parent[a_node]
        while depth[b_node] > depth[a_node]:
            cyc_arc[top - len_b] = parent_arc[b_node] if b_node >= m else -1 - parent_arc[b_node]
            len_b += 1
            b_node = parent[b_node]
        while a_node != b_node:
            cyc_arc[len_a] = parent_arc[a_node] if a_node < m else -1 - parent_arc[a_node]
            len_a += 1
            a_node = parent[a_node]
            cyc_arc[top - len_b] = parent_arc[b_node] if b_node >= m else -1 - parent_arc[b_node]
            len_b += 1
            b_node = parent[b_node]
        # theta: the lexicographically smallest flow on a '-' arc (encoded -1 - arc);
        # unique, because every basis is non-degenerate.
        leave = -1
        leave_on_a = False
        th_u = 0
        th_e = 0
        for i in range(len_a):
            if cyc_arc[i] < 0:
                a = -1 - cyc_arc[i]
                if leave < 0 or _lex_less(f_u[a], f_e[a], th_u, th_e):
                    leave, th_u, th_e, leave_on_a = a, f_u[a], f_e[a], True
        for i in range(top - len_b + 1, top + 1):
            if cyc_arc[i] < 0:
                a = -1 - cyc_arc[i]
                if leave < 0 or _lex_less(f_u[a], f_e[a], th_u, th_e):
                    leave, th_u, th_e, leave_on_a = a, f_u[a], f_e[a], False
        for i in range(len_a):
            if cyc_arc[i] >= 0:
                f_u[cyc_arc[i]] += th_u
                f_e[cyc_arc[i]] += th_e
            else:
                f_u[-1 - cyc_arc[i]] -= th_u
                f_e[-1 - cyc_arc[i]] -= th_e
        for i in range(top - len_b + 1, top + 1):
            if cyc_arc[i] >= 0:
                f_u[cyc_arc[i]] += th_u
                f_e[cyc_arc[i]] += th_e
            else:
                f_u[-1 - cyc_arc[i]] -= th_u
                f_e[-1 - cyc_arc[i]] -= th_e
        # Swap arcs in the adjacency lists; slot `leave` now holds the entering arc.
        _unlink(head, nxt, b_p[leave], 2 * leave)
        _unlink(head, nxt, m + b_q[leave], 2 * leave + 1)
        b_p[leave] = enter_p
        b_q[leave] = enter_q
        f_u[leave] = th_u
        f_e[leave] = th_e
        nxt[2 * leave] = head[enter_p]
        head[enter_p] = 2 * leave
        nxt[2 * leave + 1] = head[m + enter_q]
        head[m + enter_q] = 2 * leave + 1
        # The side the leaving arc was on is cut off; re-hang it below the other endpoint.
        if leave_on_a:
            inner, outer = m + enter_q, enter_p
        else:
            inner, outer = enter_p, m + enter_q
        parent[inner] = outer
        parent_arc[inner] = leave
        depth[inner] = depth[outer] + 1
        pot[inner] = cost[enter_p, enter_q] - pot[outer]
        _hang(inner, m, b_p, b_q, head, nxt, parent, parent_arc, depth, pot, queue, cost)
    total = 0.0
    for a in range(num_basic):
        total += f_u[a] * cost[b_p[a], b_q[a]]
    return total


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
def _row_minimum_start(cost, rs_u, rs_e, rd_u, rd_e, b_p, b_q, f_u, f_e):
    """Rows in turn send to their cheapest open columns (cheap; good for small problems)."""
    m, n = cost.shape
    col_open = np.ones(n, dtype=np.bool_)
    count = 0
    for p in range(m):
        while rs_u[p] != 0 or rs_e[p] != 0:
            q = -1
            best_c = np.inf
            for j in range(n):
                if col_open[j] and cost[p, j] < best_c:
                    best_c = cost[p, j]
                    q = j
            _allocate(p, q, count, rs_u, rs_e, rd_u, rd_e, b_p, b_q, f_u, f_e)
            count += 1
            if rd_u[q] == 0 and rd_e[q] == 0:
                col_open[q] = False


@njit(cache=True, nogil=True)
def _vogel_start(cost, rs_u, rs_e, rd_u, rd_e, b_p, b_q, f_u, f_e):
    """Vogel's approximation: fill the cheapest cell of the line whose two cheapest open
    cells differ most. Costlier than the row-minimum rule but far fewer pivots follow on
    large problems (DD's 300 x 300: 2,200 instead of 3,800)."""
    m, n = cost.shape
    row_open = np.ones(m, dtype=np.bool_)
    col_open = np.ones(n, dtype=np.bool_)
    r1 = np.empty(m, dtype=np.int64)  # each open row's cheapest and second-cheapest open column
    r2 = np.empty(m, dtype=np.int64)
    c1 = np.empty(n, dtype=np.int64)
    c2 = np.empty(n, dtype=np.int64)
    for p in range(m):
        r1[p], r2[p] = _two_cheapest(cost[p, :], col_open)
    for q in range(n):
        c1[q], c2[q] = _two_cheapest(cost[:, q], row_open)
    for count in range(m + n - 1):
        best_pen = -1.0
        bp = -1
        bq = -1
        for p in range(m):
            if row_open[p]:
                pen = cost[p, r2[p]] - cost[p, r1[p]] if r2[p] >= 0 else np.inf
                if pen > best_pen:
                    best_pen, bp, bq = pen, p, r1[p]
        for q in range(n):
            if col_open[q]:
                pen = cost[c2[q], q] - cost[c1[q], q] if c2[q] >= 0 else np.inf
                if pen > best_pen:
                    best_pen, bp, bq = pen, c1[q], q
        _allocate(bp, bq, count, rs_u, rs_e, rd_u, rd_e, b_p, b_q, f_u, f_e)
        if rs_u[bp] == 0 and rs_e[bp] == 0:
            row_open[bp] = False
            for j in range(n):
                if col_open[j] and (c1[j] == bp or c2[j] == bp):
                    c1[j], c2[j] = _two_cheapest(cost[:, j], row_open)
        if rd_u[bq] == 0 and rd_e[bq] == 0:
            col_open[bq] = False
            for i in range(m):
                if row_open[i] and (r1[i] == bq or r2[i] == bq):
                    r1[i], r2[i] = _two_cheapest(cost[i, :], col_open)


@njit(cache=True, nogil=True, inline="always")
def _two_cheapest(costs, is_open):
    """Indices of the cheapest and second-cheapest open entries (-1 where none)."""
    a = -1
    b = -1
    for j in range(costs.shape[0]):
        if is_open[j]:
            if a < 0 or costs[j] < costs[a]:
                b = a
                a = j
            elif b < 0 or costs[j] < costs[b]:
                b = j
    return a, b


@njit(cache=True, nogil=True, fastmath=True, inline="always")
def _row_min(row, demand_pot, n):
    """``min_q row[q] - demand_pot[q]`` (fastmath: a vectorised min; the values are finite)."""
    low = np.inf
    for q in range(n):
        low = min(low, row[q] - demand_pot[q])
    return low


@njit(cache=True, nogil=True)
def _hang(root, m, b_p, b_q, head, nxt, parent, parent_arc, depth, pot, queue, cost):
    """Set parents, depths and potentials of ``root``'s subtree (root's own already set)."""
    queue[0] = root
    read = 0
    write = 1
    while read < write:
        v = queue[read]
        read += 1
        slot = head[v]
        while slot >= 0:
            a = slot >> 1
            w = b_p[a] if slot & 1 else m + b_q[a]
            if w != parent[v]:
                parent[w] = v
                parent_arc[w] = a
                depth[w] = depth[v] + 1
                pot[w] = cost[b_p[a], b_q[a]] - pot[v]
                queue[write] = w
                write += 1
            slot = nxt[slot]
