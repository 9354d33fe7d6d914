"""Exact transport with one problem per GPU thread (numba CUDA), and the same code on the CPU.

Why our own, again: POT has no GPU solver, and a simplex written as tensor operations over a
batch (this package's removed batched engine) moves every problem of a batch through the same
dense operations in lock step, so every problem pays for the slowest one's pivots and every
pivot for a whole dense matrix: on an H100 it was 40x slower than the compiled CPU engine
(``docs/engines.md``). Here each CUDA thread runs, on its own pair, the
method of the CPU engine's small-problem path (:mod:`mwsp_torch.transport._simplex`: Orden's
perturbation on exact integer masses, the row-minimum start, block pricing by rows, the
basis tree as ancestor bit masks), with its arrays in thread-local memory. Each thread
also does its pair's own preparation from the graphs' collapsed supports: the merge
that cancels shared mass, and the gather of its cost matrix from a table of all
row-to-row distances (:func:`mwsp_torch.transport.costs.row_distance_table`, built on the
host once, bit for bit the CPU engine's costs). So the host sends the supports and the
pairs, and nothing per pair beyond them.

The solver is written once, as plain functions built by :func:`_build` around a ``jit``
decorator, and compiled twice: ``numba.cuda.jit(device=True)`` for the GPU kernel and
``numba.njit`` for a CPU kernel that runs the same functions in a ``prange`` loop. Only
the two kernels differ, in how a thread gets its work arrays (``cuda.local.array``
against ``np.empty``). The CPU kernel is how CI tests the GPU's code (no GPU there); it
is slower than the tuned engine (no vector row minima, an allocation per chunk) and is
not meant for production. Nothing touches CUDA at import.

The CUDA kernel is cached on disk (``cuda.jit(cache=True)``, in this package's
``__pycache__`` or numba's user cache), so that it is compiled once, not in every
process: compiling it takes about as long as the whole exact matrix of NCI1 then takes
on an H100 (``benchmarks/README.md``). numba keys the cache on this file's stamp and the
closure's contents; the constants imported from
:mod:`mwsp_torch.transport._simplex` are frozen into it, so after editing them during development,
delete ``mwsp_torch/__pycache__/_thread_simplex*.nb[ic]``.

These functions repeat the bit-mask path of :mod:`mwsp_torch.transport._simplex` (and
``transport.measures.cancel``) instead of sharing it: the CPU engine's versions take their row
minima through LLVM vector intrinsics (:mod:`mwsp_torch.transport._simd`), fastmath and inlining
flags, none of which compile for CUDA, and its cost is measured per nanosecond. Tests
hold the two to the same W (``tests/test_transport_gpu.py``).

Limits: problems of more than ``MAX_NODES`` (63) points, the bit masks' limit, are not
solved here: :func:`mwsp_torch.transport.thread_exact_distances` hands every pair whose two
supports hold more than 63 points together (before cancelling, which only removes points)
to the CPU engine, and the kernels flag an oversized problem anyway, as a guard that the
caller turns into an error.
"""

from __future__ import annotations

import math

import numpy as np

from mwsp_torch.transport._simplex import CLOSED, MAX_PIVOTS_PER_NODE_SQUARED, MIN_BLOCK_ARCS, POT_REL_TOL

#: The most points (both sides, after cancelling shared mass) a thread solves: the
#: ancestor sets are int64 bit masks.
MAX_NODES = 63

#: The largest cost matrix of such a problem: ``m + n <= 63`` gives ``m n <= 31 * 32``.
MAX_ARCS = (MAX_NODES // 2) * (MAX_NODES - MAX_NODES // 2)

#: ``numba.cuda``, imported on first use by :func:`cuda_kernel`. A module global, not a
#: local name, so that numba's CUDA simulator (``NUMBA_ENABLE_CUDASIM=1``, the tests) can
#: swap in its own module while the kernel runs.
cuda = None

#: Bit masks are int64 whatever the index's type: ``1 << w`` with an int32 ``w`` is int32
#: in numpy (the CUDA simulator), which broke masks past bit 31 there.
ONE = np.int64(1)

#: Pairs per chunk of the CPU kernel's ``prange`` loop (each chunk allocates its work arrays once).
CPU_CHUNK = 256

#: ``status`` codes the kernels write per pair.
SOLVED, TOO_LARGE, PIVOT_LIMIT = 0, 1, 2


def _build(jit):
    """The per-pair solver, its helpers compiled by ``jit`` (see the module notes)."""

    @jit
    def larger(a, b):  # the builtin max does not compile for CUDA in numba 0.68
        return a if a > b else b

    @jit
    def max_abs(values, n):
        """``max(abs(values[:n]))``, 0 for ``n == 0``: the pricing threshold's potential bound."""
        top = 0.0
        for i in range(n):
            top = larger(top, abs(values[i]))
        return top

    @jit
    def lex_less(a_units, a_eps, b_units, b_eps):
        return a_units < b_units or (a_units == b_units and a_eps < b_eps)

    @jit
    def row_min(cost, base, n, offset):
        """``min_q cost[base + q] - offset[q]``: one of the differences, bit for bit."""
        low = cost[base] - offset[0]
        for q in range(1, n):
            d = cost[base + q] - offset[q]
            if d < low:
                low = d
        return low

    @jit
    def first_at(cost, base, n, offset, low):
        """The first ``q`` whose difference is ``low`` (an argmin if none is, as a guard)."""
        q = 0
        while q < n and cost[base + q] - offset[q] != low:
            q += 1
        if q == n:
            q = 0
            for r in range(1, n):
                if cost[base + r] - offset[r] < cost[base + q] - offset[q]:
                    q = r
        return q

    @jit
    def cancel(g, h, l_ptr, l_sup, l_cnt, l_size, r_ptr, r_sup, r_cnt, r_size, pos_ids, rs_u, neg_ids, rd_u):
        """Graph ``g`` (left) minus graph ``h`` (right) as integer masses ``count * other
        size``, shared mass cancelled (as ``transport.measures.cancel``). Returns ``(m, n)``, or
        ``m + n > MAX_NODES`` as soon as the problem is known to exceed the limit."""
        na = l_size[g]
        nb = r_size[h]
        i = l_ptr[g]
        i_end = l_ptr[g + 1]
        j = r_ptr[h]
        j_end = r_ptr[h + 1]
        m = 0
        n = 0
        while i < i_end or j < j_end:
            if j == j_end or (i < i_end and l_sup[i] < r_sup[j]):
                net = l_cnt[i] * nb
                row = l_sup[i]
                i += 1
            elif i == i_end or r_sup[j] < l_sup[i]:
                net = -r_cnt[j] * na
                row = r_sup[j]
                j += 1
            else:
                net = l_cnt[i] * nb - r_cnt[j] * na
                row = l_sup[i]
                i += 1
                j += 1
            if net != 0 and m + n == MAX_NODES:
                return m, n + 1  # one more point than the limit
            if net > 0:
                pos_ids[m] = row
                rs_u[m] = net
                m += 1
            elif net < 0:
                neg_ids[n] = row
                rd_u[n] = -net
                n += 1
        return m, n

    @jit
    def row_minimum_start(cost, m, n, rs_u, rs_e, rd_u, rd_e, b_p, b_q, f_u, f_e, offset, lows, rows, parent,
                          parent_arc, finish):  # fmt: skip
        """Rows, cheapest minimum first, send to their cheapest open columns (as the CPU engine),
        hanging each closed node from what closed it: ``finish`` lists the nodes in closing
        order, parents after children; the last row, the root, is returned."""
        for q in range(n):
            offset[q] = 0.0
        for p in range(m):
            low = row_min(cost, p * n, n, offset)
            i = p
            while i > 0 and lows[i - 1] > low:
                lows[i] = lows[i - 1]
                rows[i] = rows[i - 1]
                i -= 1
            lows[i] = low
            rows[i] = p
        count = 0
        for r in range(m):
            p = rows[r]
            while rs_u[p] != 0 or rs_e[p] != 0:
                q = first_at(cost, p * n, n, offset, row_min(cost, p * n, n, offset))
                if lex_less(rs_u[p], rs_e[p], rd_u[q], rd_e[q]):
                    fu = rs_u[p]
                    fe = rs_e[p]
                else:
                    fu = rd_u[q]
                    fe = rd_e[q]
                rs_u[p] -= fu
                rs_e[p] -= fe
                rd_u[q] -= fu
                rd_e[q] -= fe
                b_p[count] = p
                b_q[count] = q
                f_u[count] = fu
                f_e[count] = fe
                # As the CPU solver's start, written out again: one function compiled for
                # both would cost the CPU solver its vector row minima and inlining.
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
        return rows[m - 1]

    @jit
    def first_tree(m, n, cost, b_p, b_q, parent, parent_arc, pot, anc, finish, root):
        """Potentials and ancestor masks of the start's basis tree, parents first (as the CPU engine)."""
        parent[root] = -1
        parent_arc[root] = -1
        pot[root] = 0.0
        anc[root] = ONE << root
        for i in range(m + n - 2, -1, -1):
            v = finish[i]
            a = parent_arc[v]
            pot[v] = cost[b_p[a] * n + b_q[a]] - pot[parent[v]]
            anc[v] = anc[parent[v]] | (ONE << v)

    @jit
    def cycle_step(node, m, demand_side, parent_arc, cyc_arc, cyc_node, at):
        plus = (node < m) if demand_side else (node >= m)
        cyc_arc[at] = parent_arc[node] if plus else -1 - parent_arc[node]
        cyc_node[at] = node

    @jit
    def push(cyc_arc, cyc_node, len_a, len_b, top, f_u, f_e):
        """Theta round the cycle; returns ``(leave, leave_node, leave_on_a, th_u, th_e)``."""
        leave = -1
        leave_node = -1
        leave_on_a = False
        th_u = 0
        th_e = 0
        for i in range(len_a):
            if cyc_arc[i] < 0:
                a = -1 - cyc_arc[i]
                if leave < 0 or lex_less(f_u[a], f_e[a], th_u, th_e):
                    leave = a
                    leave_node = cyc_node[i]
                    leave_on_a = True
                    th_u = f_u[a]
                    th_e = f_e[a]
        for i in range(top - len_b + 1, top + 1):
            if cyc_arc[i] < 0:
                a = -1 - cyc_arc[i]
                if leave < 0 or lex_less(f_u[a], f_e[a], th_u, th_e):
                    leave = a
                    leave_node = cyc_node[i]
                    leave_on_a = False
                    th_u = f_u[a]
                    th_e = f_e[a]
        for i in range(len_a):
            add_flow(cyc_arc[i], th_u, th_e, f_u, f_e)
        for i in range(top - len_b + 1, top + 1):
            add_flow(cyc_arc[i], th_u, th_e, f_u, f_e)
        return leave, leave_node, leave_on_a, th_u, th_e

    @jit
    def add_flow(signed_arc, th_u, th_e, f_u, f_e):
        if signed_arc >= 0:
            f_u[signed_arc] += th_u
            f_e[signed_arc] += th_e
        else:
            f_u[-1 - signed_arc] -= th_u
            f_e[-1 - signed_arc] -= th_e

    @jit
    def popcount(x):
        x = x - ((x >> 1) & 0x5555555555555555)
        x = (x & 0x3333333333333333) + ((x >> 2) & 0x3333333333333333)
        x = (x + (x >> 4)) & 0x0F0F0F0F0F0F0F0F
        x += x >> 8  # byte sums by shifts, not a multiply (which wraps: a warning in the simulator)
        x += x >> 16
        x += x >> 32
        return x & 0x7F

    @jit
    def rehang(m, n, num_nodes, enter_p, enter_q, leave, leave_node, leave_on_a, parent, parent_arc, anc, pot,
               stem, down, cost):  # fmt: skip
        """Re-hang the subtree cut off by the leaving arc below the entering arc (the CPU
        engine's ``_rehang_masks``: parents along the stem, one shift of potentials, masks)."""
        if leave_on_a:
            inner = m + enter_q
            outer = enter_p
        else:
            inner = enter_p
            outer = m + enter_q
        above = anc[parent[leave_node]]
        anc_outer = anc[outer]
        shift = cost[enter_p * n + enter_q] - pot[outer] - pot[inner]
        shift_supply = shift if inner < m else -shift
        k = 0
        stem[0] = inner
        down[0] = ONE << inner
        while stem[k] != leave_node:
            stem[k + 1] = parent[stem[k]]
            down[k + 1] = down[k] | (ONE << stem[k + 1])
            k += 1
        stem_mask = down[k]
        carry = parent_arc[stem[0]]
        parent[stem[0]] = outer
        parent_arc[stem[0]] = leave
        for i in range(1, k + 1):
            held = parent_arc[stem[i]]
            parent_arc[stem[i]] = carry
            carry = held
            parent[stem[i]] = stem[i - 1]
        members = 0
        for w in range(num_nodes):
            members |= ((anc[w] >> leave_node) & 1) << w
        while members:
            lowest = members & -members
            members ^= lowest
            w = popcount(lowest - 1)
            within = anc[w] & ~above
            attach = k + 1 - popcount(within & stem_mask)
            anc[w] = (within & ~stem_mask) | down[attach] | anc_outer
            pot[w] += shift_supply if w < m else -shift_supply

    @jit
    def solve(m, n, cost, rs_u, rs_e, rd_u, rd_e, b_p, b_q, f_u, f_e, parent, parent_arc, anc, pot, stack,
              cyc_arc, cyc_node, stem, down, offset, lows, rows):  # fmt: skip
        """Optimal cost of the ``m x n`` problem (masses in ``rs_u``, ``rd_u``; ``cost`` row
        major), not divided by the total mass; ``-1.0`` if the pivot limit is reached."""
        num_nodes = m + n
        num_basic = num_nodes - 1
        for p in range(m):
            rs_e[p] = 1
        for q in range(n):
            rd_e[q] = 0
        rd_e[n - 1] = m
        root = row_minimum_start(
            cost, m, n, rs_u, rs_e, rd_u, rd_e, b_p, b_q, f_u, f_e, offset, lows, rows, parent, parent_arc, stack
        )  # fmt: skip
        first_tree(m, n, cost, b_p, b_q, parent, parent_arc, pot, anc, stack, root)
        rows_per_block = larger(1, larger(int(math.sqrt(m * n)), MIN_BLOCK_ARCS) // n)
        tol = 1e-14 * larger(max_abs(cost, m * n), 1e-300)
        pot_bound = max_abs(pot, num_nodes)
        since_bound = 0
        top = 2 * num_basic - 1
        p = 0
        pivots_left = MAX_PIVOTS_PER_NODE_SQUARED * num_nodes * num_nodes
        while True:
            threshold = tol + POT_REL_TOL * pot_bound
            # Pricing: the most negative reduced cost in the first block of rows with one.
            enter_p = -1
            best = -threshold
            best_row_min = 0.0
            scanned = 0
            while scanned < m and enter_p < 0:
                stop = scanned + rows_per_block if scanned + rows_per_block < m else m
                while scanned < stop:
                    low = row_min(cost, p * n, n, pot[m:])
                    if low - pot[p] < best:
                        best = low - pot[p]
                        best_row_min = low
                        enter_p = p
                    scanned += 1
                    p += 1
                    if p == m:
                        p = 0
            if enter_p < 0:
                break
            enter_q = first_at(cost, enter_p * n, n, pot[m:], best_row_min)
            pivots_left -= 1
            if pivots_left < 0:
                return -1.0
            since_bound += 1
            if since_bound == num_nodes:
                pot_bound = max_abs(pot, num_nodes)
                since_bound = 0
            pot_bound += abs(cost[enter_p * n + enter_q] - pot[enter_p] - pot[m + enter_q])
            # The cycle by ancestor masks: the demand end climbs to an ancestor of the supply end.
            a_node = m + enter_q
            b_node = enter_p
            len_a = 0
            len_b = 0
            while not (anc[b_node] >> a_node) & 1:
                cycle_step(a_node, m, True, parent_arc, cyc_arc, cyc_node, len_a)
                len_a += 1
                a_node = parent[a_node]
            while b_node != a_node:
                cycle_step(b_node, m, False, parent_arc, cyc_arc, cyc_node, top - len_b)
                len_b += 1
                b_node = parent[b_node]
            leave, leave_node, leave_on_a, th_u, th_e = push(cyc_arc, cyc_node, len_a, len_b, top, f_u, f_e)
            rehang(
                m, n, num_nodes, enter_p, enter_q, leave, leave_node, leave_on_a, parent, parent_arc, anc, pot, stem,
                down, cost,
            )  # fmt: skip
            b_p[leave] = enter_p
            b_q[leave] = enter_q
            f_u[leave] = th_u
            f_e[leave] = th_e
        total = 0.0
        for a in range(num_basic):
            total += f_u[a] * cost[b_p[a] * n + b_q[a]]
        return total

    @jit
    def solve_pair(t, pairs, l_ptr, l_sup, l_cnt, l_size, r_ptr, r_sup, r_cnt, r_size, table, out, status,
                   pos_ids, neg_ids, cost, rs_u, rs_e, rd_u, rd_e, b_p, b_q, f_u, f_e, parent, parent_arc, anc,
                   pot, stack, cyc_arc, cyc_node, stem, down, offset, lows, rows):  # fmt: skip
        """Pair ``t``: cancel, gather costs, solve; writes ``out[t]`` (W) and ``status[t]``."""
        g = pairs[t, 0]
        h = pairs[t, 1]
        m, n = cancel(g, h, l_ptr, l_sup, l_cnt, l_size, r_ptr, r_sup, r_cnt, r_size, pos_ids, rs_u, neg_ids, rd_u)
        out[t] = 0.0
        status[t] = SOLVED
        if m + n > MAX_NODES:
            status[t] = TOO_LARGE
            return
        if m == 0:  # one measure: nothing left to move
            return
        for p in range(m):
            for q in range(n):
                cost[p * n + q] = table[pos_ids[p], neg_ids[q]]
        total = solve(
            m, n, cost, rs_u, rs_e, rd_u, rd_e, b_p, b_q, f_u, f_e, parent, parent_arc, anc, pot, stack, cyc_arc,
            cyc_node, stem, down, offset, lows, rows,
        )  # fmt: skip
        if total < 0.0:
            status[t] = PIVOT_LIMIT
        else:
            out[t] = total / (l_size[g] * r_size[h])

    return solve_pair


_KERNELS: dict[str, object] = {}


def import_numba_cuda():
    """``numba.cuda``, or a ``RuntimeError`` that says why it cannot be imported.

    A failed import otherwise surfaces as an error deep inside numba: numba-cuda
    releases that register an overload of ``numpy.row_stack``, which numpy 2.5 no longer
    has, make ``import numba.cuda`` raise ``AttributeError``."""
    import importlib

    try:
        return importlib.import_module("numba.cuda")
    except (ImportError, AttributeError) as error:
        import numba

        raise RuntimeError(
            f"exact_engine='thread' on a GPU needs numba.cuda, which failed to import (numba {numba.__version__}, "
            f"numpy {np.__version__}): {type(error).__name__}: {error}. If the error names a numpy function "
            "(numpy.row_stack: numpy 2.5 removed it), install a numba-cuda release that supports this numpy or "
            "an older numpy; solver='exact' with exact_engine='compiled' needs no GPU."
        ) from error


def cpu_kernel():
    """The solver compiled by ``numba.njit``, as a ``prange`` kernel over pairs (built once)."""
    if "cpu" not in _KERNELS:
        from numba import njit, prange

        solve_pair = _build(njit)

        @njit(parallel=True)
        def kernel(pairs, l_ptr, l_sup, l_cnt, l_size, r_ptr, r_sup, r_cnt, r_size, table, out, status):
            num = pairs.shape[0]
            chunk = CPU_CHUNK
            for c in prange((num + chunk - 1) // chunk):
                small = np.empty((9, MAX_NODES + 1), dtype=np.int32)  # indices
                wide = np.empty((2, 2 * MAX_NODES), dtype=np.int32)
                big = np.empty((8, MAX_NODES + 1), dtype=np.int64)  # masses, flows, masks
                floats = np.empty((3, MAX_NODES + 1), dtype=np.float64)
                cost = np.empty(MAX_ARCS, dtype=np.float64)
                for t in range(c * chunk, min((c + 1) * chunk, num)):
                    solve_pair(
                        t, pairs, l_ptr, l_sup, l_cnt, l_size, r_ptr, r_sup, r_cnt, r_size, table, out, status,
                        small[0], small[1], cost, big[0], big[1], big[2], big[3], small[2], small[3], big[4], big[5],
                        small[4], small[5], big[6], floats[0], small[6], wide[0], wide[1], small[7], big[7], floats[1],
                        floats[2], small[8],
                    )  # fmt: skip

        _KERNELS["cpu"] = kernel
    return _KERNELS["cpu"]


def cuda_kernel():
    """The solver compiled by ``numba.cuda.jit``, one pair per thread (built on first use)."""
    global cuda
    if "cuda" not in _KERNELS:
        cuda = import_numba_cuda()
        from numba import float64, int32, int64

        solve_pair = _build(cuda.jit(device=True))
        nodes = MAX_NODES + 1
        wide = 2 * MAX_NODES

        @cuda.jit(cache=True)
        def kernel(pairs, l_ptr, l_sup, l_cnt, l_size, r_ptr, r_sup, r_cnt, r_size, table, out, status):
            t = cuda.grid(1)
            if t < pairs.shape[0]:
                solve_pair(
                    t, pairs, l_ptr, l_sup, l_cnt, l_size, r_ptr, r_sup, r_cnt, r_size, table, out, status,
                    cuda.local.array(nodes, int32), cuda.local.array(nodes, int32), cuda.local.array(MAX_ARCS, float64),
                    cuda.local.array(nodes, int64), cuda.local.array(nodes, int64), cuda.local.array(nodes, int64),
                    cuda.local.array(nodes, int64), cuda.local.array(nodes, int32), cuda.local.array(nodes, int32),
                    cuda.local.array(nodes, int64), cuda.local.array(nodes, int64), cuda.local.array(nodes, int32),
                    cuda.local.array(nodes, int32), cuda.local.array(nodes, int64), cuda.local.array(nodes, float64),
                    cuda.local.array(nodes, int32), cuda.local.array(wide, int32), cuda.local.array(wide, int32),
                    cuda.local.array(nodes, int32),
                    cuda.local.array(nodes, int64), cuda.local.array(nodes, float64), cuda.local.array(nodes, float64),
                    cuda.local.array(nodes, int32),
                )  # fmt: skip

        _KERNELS["cuda"] = kernel
    return _KERNELS["cuda"]
