"""The fused Sinkhorn loop as Triton kernels (``backend="triton"``, experimental): one program
solves one problem in registers.

Status: equal to the torch loop under Triton's interpreter (tests) and compiled for sm_90
by Triton 3.6 on a machine without a GPU, but not yet run on one: the one GPU run
(H100) timed out compiling its many tile shapes before printing a figure, and the
session's GPU time ran out. Use ``backend="fused"`` (the torch loop) for measured speed.

Why a kernel of our own: :mod:`mwsp_torch._batched_sinkhorn` runs geomloss's loop as
torch operations, about ten kernel launches per temperature, each streaming the whole
batch of cost matrices through GPU memory; on an H100 that gave 1.26e5 NCI1 pairs per
second (``benchmarks/README.md``), and ``torch.compile`` did not help (1.04e5). Here each
program gathers its problem's costs once from the row-to-row distance table and runs
every temperature of the schedule on them where they sit. The arithmetic is that of
:mod:`mwsp_torch._batched_sinkhorn` (geomloss's): the tests compare the two to 1e-9 in
float64, on CPU tensors through Triton's interpreter (``TRITON_INTERPRET=1``) and on a
GPU where there is one.

Imported only when used (CUDA tensors, or the interpreter): Triton is not a dependency
of the CPU install.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from mwsp_torch import _batched_sinkhorn

LOG_ZERO = tl.constexpr(_batched_sinkhorn.LOG_ZERO)  # a constexpr: kernels read no other globals


@triton.jit
def _softmin_rows(h, cost, eps):
    """``f_i = -eps log sum_j exp(h_j - C_ij / eps)``; ``h`` along columns."""
    x = h[None, :] - cost / eps
    top = tl.max(x, 1)
    return -eps * (top + tl.log(tl.sum(tl.exp(x - top[:, None]), 1)))


@triton.jit
def _softmin_cols(h, cost, eps):
    """``g_j = -eps log sum_i exp(h_i - C_ij / eps)``; ``h`` along rows."""
    x = h[:, None] - cost / eps
    top = tl.max(x, 0)
    return -eps * (top + tl.log(tl.sum(tl.exp(x - top[None, :]), 0)))


@triton.jit
def _log_weights(w):
    return tl.where(w > 0, tl.log(tl.maximum(w, 1e-300)), LOG_ZERO)


@triton.jit(do_not_specialize=["m", "n"])
def _cross_kernel(
    table, stride, ids_a, a_ptr, ids_b, b_ptr, eps_ptr, out, m, n,
    N_EPS: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr,
):  # fmt: skip
    p = tl.program_id(0).to(tl.int64)
    rows = tl.arange(0, BM)
    cols = tl.arange(0, BN)
    in_m = rows < m
    in_n = cols < n
    ia = tl.load(ids_a + p * m + rows, mask=in_m, other=0)
    ib = tl.load(ids_b + p * n + cols, mask=in_n, other=0)
    a = tl.load(a_ptr + p * m + rows, mask=in_m, other=0.0)
    b = tl.load(b_ptr + p * n + cols, mask=in_n, other=0.0)
    cost = tl.load(table + ia[:, None] * stride + ib[None, :], mask=in_m[:, None] & in_n[None, :], other=0.0)
    log_a = _log_weights(a)
    log_b = _log_weights(b)
    eps = tl.load(eps_ptr)
    g = _softmin_cols(log_a, cost, eps)
    f = _softmin_rows(log_b, cost, eps)
    for i in range(N_EPS):
        eps = tl.load(eps_ptr + i)
        f_new = _softmin_rows(log_b + g / eps, cost, eps)
        g_new = _softmin_cols(log_a + f / eps, cost, eps)
        f = 0.5 * (f + f_new)
        g = 0.5 * (g + g_new)
    eps = tl.load(eps_ptr + N_EPS - 1)
    f_last = _softmin_rows(log_b + g / eps, cost, eps)
    g_last = _softmin_cols(log_a + f / eps, cost, eps)
    tl.store(out + p, tl.sum(a * f_last, 0) + tl.sum(b * g_last, 0))


@triton.jit(do_not_specialize=["m"])
def _self_kernel(table, stride, ids, w_ptr, eps_ptr, out, m, N_EPS: tl.constexpr, BM: tl.constexpr):
    p = tl.program_id(0).to(tl.int64)
    rows = tl.arange(0, BM)
    inside = rows < m
    ids_p = tl.load(ids + p * m + rows, mask=inside, other=0)
    w = tl.load(w_ptr + p * m + rows, mask=inside, other=0.0)
    cost = tl.load(table + ids_p[:, None] * stride + ids_p[None, :], mask=inside[:, None] & inside[None, :], other=0.0)
    log_w = _log_weights(w)
    eps = tl.load(eps_ptr)
    f = _softmin_rows(log_w, cost, eps)
    for i in range(N_EPS):
        eps = tl.load(eps_ptr + i)
        f = 0.5 * (f + _softmin_rows(log_w + f / eps, cost, eps))
    eps = tl.load(eps_ptr + N_EPS - 1)
    f = _softmin_rows(log_w + f / eps, cost, eps)
    tl.store(out + p, tl.sum(w * f, 0))


def _launch_options(entries: int) -> dict:
    """About 8 tile entries per thread: fp64 code is unrolled per entry, and at 32 per
    thread a 32 x 32 kernel took 4.5 s to compile for sm_90 (1.0 s at 8)."""
    return {"num_warps": min(16, max(1, entries // 256))}


def cross_terms(
    table: torch.Tensor, ids_a: torch.Tensor, a: torch.Tensor, ids_b: torch.Tensor, b: torch.Tensor, eps_list
) -> torch.Tensor:
    """:func:`mwsp_torch._batched_sinkhorn.cross_terms` of ``table[ids_a][:, ids_b]``, without that tensor."""
    batch, m = ids_a.shape
    n = ids_b.shape[1]
    out = torch.empty(batch, dtype=table.dtype, device=table.device)
    if batch == 0:
        return out
    eps = torch.tensor(eps_list, dtype=table.dtype, device=table.device)
    bm, bn = triton.next_power_of_2(max(m, 2)), triton.next_power_of_2(max(n, 2))
    _cross_kernel[(batch,)](
        table, table.stride(0), ids_a.contiguous(), a.contiguous(), ids_b.contiguous(), b.contiguous(),
        eps, out, m, n, N_EPS=len(eps_list), BM=bm, BN=bn, **_launch_options(bm * bn),
    )  # fmt: skip
    return out


def self_terms(table: torch.Tensor, ids: torch.Tensor, weights: torch.Tensor, eps_list) -> torch.Tensor:
    """:func:`mwsp_torch._batched_sinkhorn.self_terms` of ``table[ids][:, ids]``, without that tensor."""
    batch, m = ids.shape
    out = torch.empty(batch, dtype=table.dtype, device=table.device)
    if batch == 0:
        return out
    eps = torch.tensor(eps_list, dtype=table.dtype, device=table.device)
    bm = triton.next_power_of_2(max(m, 2))
    _self_kernel[(batch,)](
        table, table.stride(0), ids.contiguous(), weights.contiguous(), eps, out, m,
        N_EPS=len(eps_list), BM=bm, **_launch_options(bm * bm),
    )  # fmt: skip
    return out
