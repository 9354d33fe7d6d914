"""The fused Sinkhorn loop as Triton kernels (``backend="triton"``, experimental): one program
solves one problem in registers.

Why a kernel of our own: :mod:`mwsp_torch.transport._batched_sinkhorn` runs geomloss's loop as
torch operations, about ten kernel launches per temperature, each streaming the whole
batch of cost matrices through GPU memory, so it is bound by memory traffic, not
arithmetic (``torch.compile`` of that loop did not fuse it away; ``docs/performance.md``).
Here each program gathers its problem's costs once from the row-to-row distance table and
runs every temperature of the schedule on them where they sit; ``benchmarks/README.md``
has its pairs per second and error on an H100.

No padded arrays are built on the host: the support sets (``graph_ptr``, row IDs and
masses) and the pairs are uploaded once, and each program reads its pair's two graphs
and slices their supports itself. Problems are grouped only by the kernel's tile shape
(powers of two, at least :data:`MIN_BLOCK`), one launch per shape, every result written
into one device tensor: no synchronisation until the caller copies it back.

The arithmetic is that of :mod:`mwsp_torch.transport._batched_sinkhorn` (geomloss's), except that
``C / eps`` and ``f / eps`` are products with ``1 / eps`` (a division per cost entry
and temperature cost more than the exponential's polynomial): the tests compare the two
to 1e-9 in float64, on CPU tensors through Triton's interpreter (``TRITON_INTERPRET=1``)
and on a GPU where there is one. float32 (an opt-in of ``sinkhorn_distances``) runs the
same kernels in single precision.

Imported only when used (CUDA tensors, or the interpreter): Triton is not a dependency
of the CPU install.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import torch
import triton
import triton.language as tl

import mwsp_torch.transport._batched_sinkhorn as _batched_sinkhorn

LOG_ZERO = tl.constexpr(_batched_sinkhorn.LOG_ZERO)  # a constexpr: kernels read no other globals
MIN_BLOCK = 8  # smallest tile side: fewer shapes to compile, little padding on small graphs


@triton.jit
def _softmin_rows(h, cost, eps, inv_eps):
    """``f_i = -eps log sum_j exp(h_j - C_ij / eps)``; ``h`` along columns."""
    x = h[None, :] - cost * inv_eps
    top = tl.max(x, 1)
    return -eps * (top + tl.log(tl.sum(tl.exp(x - top[:, None]), 1)))


@triton.jit
def _softmin_cols(h, cost, eps, inv_eps):
    """``g_j = -eps log sum_i exp(h_i - C_ij / eps)``; ``h`` along rows."""
    x = h[:, None] - cost * inv_eps
    top = tl.max(x, 0)
    return -eps * (top + tl.log(tl.sum(tl.exp(x - top[None, :]), 0)))


@triton.jit
def _log_weights(w):
    # No constant of float64 range (1e-300) here: it would promote float32 weights, and
    # with them the whole loop, to float64.
    return tl.where(w > 0, tl.log(tl.where(w > 0, w, 1.0)), LOG_ZERO)


@triton.jit
def _measure(ptr, ids, mass, g, BLOCK: tl.constexpr):
    """Row IDs (0 on padding), masses (0 on padding) and mask of graph ``g``'s support."""
    lo = tl.load(ptr + g)
    size = tl.load(ptr + g + 1) - lo
    offsets = tl.arange(0, BLOCK)
    inside = offsets < size
    return (
        tl.load(ids + lo + offsets, mask=inside, other=0),
        tl.load(mass + lo + offsets, mask=inside, other=0.0),
        inside,
    )


@triton.jit(do_not_specialize=["start"])
def _cross_kernel(
    table, stride, eps_ptr, inv_ptr, pairs, order, start,
    l_ptr, l_ids, l_mass, r_ptr, r_ids, r_mass, half_l, half_r, out,
    N_EPS: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr,
):  # fmt: skip
    """``out[q] = OT_eps(a, b) - half_l[i] - half_r[j]`` for ``(i, j) = pairs[q]``, ``q = order[start + program]``."""
    q = tl.load(order + start + tl.program_id(0))
    gi = tl.load(pairs + 2 * q)
    gj = tl.load(pairs + 2 * q + 1)
    ia, a, in_m = _measure(l_ptr, l_ids, l_mass, gi, BM)
    ib, b, in_n = _measure(r_ptr, r_ids, r_mass, gj, BN)
    cost = tl.load(table + ia[:, None] * stride + ib[None, :], mask=in_m[:, None] & in_n[None, :], other=0.0)
    log_a = _log_weights(a)
    log_b = _log_weights(b)
    eps = tl.load(eps_ptr)
    inv = tl.load(inv_ptr)
    g = _softmin_cols(log_a, cost, eps, inv)
    f = _softmin_rows(log_b, cost, eps, inv)
    for i in range(N_EPS):
        eps = tl.load(eps_ptr + i)
        inv = tl.load(inv_ptr + i)
        f_new = _softmin_rows(log_b + g * inv, cost, eps, inv)
        g_new = _softmin_cols(log_a + f * inv, cost, eps, inv)
        f = 0.5 * (f + f_new)
        g = 0.5 * (g + g_new)
    eps = tl.load(eps_ptr + N_EPS - 1)
    inv = tl.load(inv_ptr + N_EPS - 1)
    f_last = _softmin_rows(log_b + g * inv, cost, eps, inv)
    g_last = _softmin_cols(log_a + f * inv, cost, eps, inv)
    value = tl.sum(a * f_last, 0) + tl.sum(b * g_last, 0)
    tl.store(out + q, value - tl.load(half_l + gi) - tl.load(half_r + gj))


@triton.jit(do_not_specialize=["start"])
def _self_kernel(
    table, stride, eps_ptr, inv_ptr, graphs, start, ptr, ids, mass, out, N_EPS: tl.constexpr, BM: tl.constexpr
):
    """``out[g] = sum_i w_i f_i`` (half of ``OT_eps(w, w)``) for ``g = graphs[start + program]``."""
    g = tl.load(graphs + start + tl.program_id(0))
    ids_g, w, inside = _measure(ptr, ids, mass, g, BM)
    cost = tl.load(table + ids_g[:, None] * stride + ids_g[None, :], mask=inside[:, None] & inside[None, :], other=0.0)
    log_w = _log_weights(w)
    eps = tl.load(eps_ptr)
    inv = tl.load(inv_ptr)
    f = _softmin_rows(log_w, cost, eps, inv)
    for i in range(N_EPS):
        eps = tl.load(eps_ptr + i)
        inv = tl.load(inv_ptr + i)
        f = 0.5 * (f + _softmin_rows(log_w + f * inv, cost, eps, inv))
    eps = tl.load(eps_ptr + N_EPS - 1)
    inv = tl.load(inv_ptr + N_EPS - 1)
    f = _softmin_rows(log_w + f * inv, cost, eps, inv)
    tl.store(out + g, tl.sum(w * f, 0))


# Warps per program by tile shape, overriding the default (mutable, for tuning).
NUM_WARPS: dict[tuple[int, int], int] = {}


def _launch_options(bm: int, bn: int) -> dict:
    """4 tile entries per thread up to 4 warps, then 8: the fastest warp counts measured
    for NCI1's tile shapes in float64 on an H100 (``docs/performance.md``). More entries
    per thread compile slower: fp64 code is unrolled per entry, so a large tile at 32
    entries per thread takes seconds to compile."""
    entries = bm * bn
    return {"num_warps": NUM_WARPS.get((bm, bn), min(max(1, entries // 128), max(4, entries // 256), 16))}


class Measures(NamedTuple):
    """One support set on the device: ``ptr`` ``[G + 1]``, row ``ids`` and ``mass`` per support point."""

    ptr: torch.Tensor
    ids: torch.Tensor
    mass: torch.Tensor
    lengths: np.ndarray  # support sizes, on the host (for the tile shapes)


def measures(graph_ptr, support, counts, sizes, dtype, device) -> Measures:
    """Upload a support set (:meth:`mwsp_torch.transport.SupportSet.arrays`); a point's
    mass is ``count / size`` in float64, as the torch loop's, then cast to ``dtype``."""
    graph_ptr = np.asarray(graph_ptr, dtype=np.int64)
    lengths = np.diff(graph_ptr)
    mass = np.asarray(counts) / np.repeat(np.asarray(sizes), lengths)
    return Measures(
        torch.from_numpy(graph_ptr).to(device),
        torch.from_numpy(np.asarray(support, dtype=np.int64)).to(device),
        torch.from_numpy(mass).to(device=device, dtype=dtype),
        lengths,
    )


def block_sizes(lengths: np.ndarray) -> np.ndarray:
    """Tile side for supports of ``lengths`` points: the next power of 2, at least :data:`MIN_BLOCK`."""
    lengths = np.asarray(lengths, dtype=np.int64)
    blocks = np.full(lengths.shape, MIN_BLOCK, dtype=np.int64)
    while np.any(short := blocks < lengths):
        blocks[short] *= 2
    return blocks


def _exponents(lengths: np.ndarray) -> np.ndarray:
    """``log2`` of each support's tile side (:func:`block_sizes`) as ``uint16``, 0 for an empty support."""
    exponents = np.log2(block_sizes(lengths)).astype(np.uint16)
    exponents[np.asarray(lengths) == 0] = 0
    return exponents


def _schedule(eps_list, dtype, device) -> tuple[torch.Tensor, torch.Tensor]:
    """The temperatures and their reciprocals (computed in float64) on the device."""
    eps = torch.tensor(eps_list, dtype=torch.float64)
    return eps.to(device=device, dtype=dtype), (1.0 / eps).to(device=device, dtype=dtype)


def _groups(key: np.ndarray) -> list[tuple[int, int]]:
    """``(start, stop)`` runs of equal ``key`` (already sorted)."""
    cuts = np.flatnonzero(np.diff(key)) + 1
    return list(zip(np.r_[0, cuts].tolist(), np.r_[cuts, len(key)].tolist(), strict=True))


def self_terms(
    table: torch.Tensor, sset: Measures, graphs: np.ndarray, eps_list, out: torch.Tensor | None = None
) -> torch.Tensor:
    """Half of ``OT_eps(w, w)`` (:func:`mwsp_torch.transport._batched_sinkhorn.self_terms`) for each graph
    in ``graphs``, written at its graph index of ``out`` (``[G]``, zeros elsewhere when made here)."""
    if out is None:
        out = torch.zeros(len(sset.ptr) - 1, dtype=table.dtype, device=table.device)
    graphs = np.asarray(graphs, dtype=np.int64)
    graphs = graphs[sset.lengths[graphs] > 0]  # an empty support's term stays 0
    if len(graphs) == 0:
        return out
    blocks = block_sizes(sset.lengths[graphs])
    order = np.argsort(blocks, kind="stable")
    blocks, graphs_dev = blocks[order], torch.from_numpy(graphs[order]).to(table.device)
    eps, inv = _schedule(eps_list, table.dtype, table.device)
    for lo, hi in _groups(blocks):
        bm = int(blocks[lo])
        _self_kernel[(hi - lo,)](
            table, table.stride(0), eps, inv, graphs_dev, lo, sset.ptr, sset.ids, sset.mass, out,
            N_EPS=len(eps_list), BM=bm, **_launch_options(bm, bm),
        )  # fmt: skip
    return out


def cross_terms(
    table: torch.Tensor,
    left: Measures,
    right: Measures,
    pairs: np.ndarray,
    eps_list,
    half_l: torch.Tensor | None = None,
    half_r: torch.Tensor | None = None,
    progress=None,
) -> torch.Tensor:
    """``OT_eps(a_i, b_j) - half_l[i] - half_r[j]`` for each pair ``(i, j)`` of ``pairs``
    (:func:`mwsp_torch.transport._batched_sinkhorn.cross_terms`, less the debiasing terms when given);
    0 where a support is empty. On the device, not synchronised."""
    pairs = np.ascontiguousarray(pairs, dtype=np.int64).reshape(-1, 2)
    out = torch.zeros(len(pairs), dtype=table.dtype, device=table.device)
    if len(pairs) == 0:
        return out
    zeros_l = half_l if half_l is not None else torch.zeros(len(left.ptr) - 1, dtype=table.dtype, device=table.device)
    zeros_r = half_r if half_r is not None else torch.zeros(len(right.ptr) - 1, dtype=table.dtype, device=table.device)
    # Tile shape of each pair as a 12-bit code of its two sides' exponents (a side is
    # 2**e, 3 <= e < 64), 0 where a side is empty (such pairs stay 0): a stable sort of
    # 16-bit keys is a radix sort, 3x faster than sorting the shapes themselves as int64.
    code_l = _exponents(left.lengths)[pairs[:, 0]]
    code_r = _exponents(right.lengths)[pairs[:, 1]]
    key = (code_l << 6) | code_r
    key[(code_l == 0) | (code_r == 0)] = 0
    order = np.argsort(key, kind="stable")
    key = key[order]
    pairs_dev = torch.from_numpy(pairs).to(table.device)
    order_dev = torch.from_numpy(order).to(table.device)
    eps, inv = _schedule(eps_list, table.dtype, table.device)
    for lo, hi in _groups(key):
        if key[lo] > 0:
            bm, bn = 1 << (int(key[lo]) >> 6), 1 << (int(key[lo]) & 63)
            for start in range(lo, hi, 1 << 30):  # grid dimension 0 is below 2**31
                _cross_kernel[(min(hi, start + (1 << 30)) - start,)](
                    table, table.stride(0), eps, inv, pairs_dev, order_dev, start,
                    left.ptr, left.ids, left.mass, right.ptr, right.ids, right.mass, zeros_l, zeros_r, out,
                    N_EPS=len(eps_list), BM=bm, BN=bn, **_launch_options(bm, bn),
                )  # fmt: skip
        if progress is not None:
            progress(hi - lo)
    return out
