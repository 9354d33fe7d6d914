"""Sinkhorn: an approximation of W on any torch device, batched over pairs.

``solver="sinkhorn"`` computes geomloss's debiased Sinkhorn divergence with ``p=1`` on
batches of padded pairs; padding carries zero weight, which leaves the value unchanged. By
default (``backend="fused"``, :mod:`mwsp_torch.transport._batched_sinkhorn`) geomloss's loop runs on
cost tensors gathered from one row-to-row distance table
(:func:`~mwsp_torch.transport.costs.distance_table`), with the debiasing terms solved once
per graph; Triton kernels (:mod:`mwsp_torch.transport._triton_sinkhorn`) run the same loop one
program per problem on CUDA, and geomloss itself (tensorized, or pykeops online) serves
banks whose table does not fit. It approximates W; its measured error against the exact
engine is in ``benchmarks/README.md``.
"""

from __future__ import annotations

import os
from collections.abc import Callable

import numpy as np
import scipy.sparse as sp

from mwsp_torch._checks import is_positive_number
from mwsp_torch.transport.costs import distance_table, distance_table_bytes
from mwsp_torch.transport.measures import SupportSet, shared_bank

__all__ = [
    "SINKHORN_BACKENDS",
    "padding_batches",
    "shape_buckets",
    "sinkhorn_diameter",
    "sinkhorn_distances",
    "triton_kernels",
    "width_class",
]


#: ``backend=`` of :func:`sinkhorn_distances`.
SINKHORN_BACKENDS = ("auto", "fused", "triton", "tensorized", "online")


def sinkhorn_distances(
    left: SupportSet,
    right: SupportSet,
    pairs: np.ndarray,
    blur: float = 0.01,
    scaling: float = 0.99,
    device: str = "cpu",
    batch_size: int = 1 << 16,
    max_bytes: int = 1 << 29,
    backend: str = "auto",
    online_from: int = 1 << 20,
    progress: Callable[[int], None] | None = None,
    dtype: str = "float64",
    diameter: float | None = None,
) -> np.ndarray:
    """Debiased Sinkhorn approximation of W (geomloss's algorithm, ``p=1``), batched on ``device``.

    Pairs are batched by the sizes of their two supports, so that the zero-weight padding
    of a batch stays small: for geomloss's backends by :func:`padding_batches` (padding
    adds at most 56 % to a batch's cost entries), for the fused ones by
    shape (widths rounded up to a multiple of 4). Every backend gives
    geomloss's value (the ``fused`` one to 1e-9 relative in float64, tested).

    Args:
        left, right, pairs: as in :func:`~mwsp_torch.transport.exact_distances`.
        blur (float): geomloss ``blur``, the entropic length scale (default ``0.01``).
        scaling (float): epsilon-scaling ratio (default ``0.99``).
        device (str): torch device (default ``"cpu"``).
        batch_size (int): pairs per batch (default ``65536``); a batch whose padded
            dense points or cost matrices would exceed ``max_bytes`` (default
            512 MiB) is cut smaller.
        backend (str): ``"fused"`` (:mod:`mwsp_torch.transport._batched_sinkhorn`: geomloss's
            loop on cost tensors gathered from one row-to-row distance table built from
            the Gram matrix, on ``device``; debiasing terms once per graph; needs
            the table, ``rows^2`` float64, within ``max_bytes``), ``"tensorized"``
            (geomloss on dense padded points), ``"online"`` (geomloss with pykeops,
            costs computed on the fly: memory linear in the points), ``"triton"``
            (experimental: the fused loop as Triton kernels, one program per problem;
            CUDA only; equal to ``"fused"`` to 1e-9 in float64, tested) or ``"auto"``:
            fused when the table fits, else online for a batch whose pairs have
            ``online_from`` or more cost entries each (default ``2**20``, e.g.
            REDDIT-BINARY's large graphs) and tensorized for the others.
        progress (callable, optional): called with the number of pairs done (with
            ``"triton"``: queued on the device).
        dtype (str): ``"float64"`` (default) or, with ``backend="triton"`` only,
            ``"float32"`` (experimental): the kernels in single precision, no longer
            equal to geomloss's float64 value but within 1e-3 relative plus 1e-4 of it (tested
            on CUDA and under Triton's interpreter), faster than float64 with the same median
            error against exact (``docs/gpu.md``). The result is float64 either way.
        diameter (float, optional): where the epsilon schedule starts (default:
            :func:`sinkhorn_diameter` of the whole row bank). A fitted model passes its
            training rows' own, so that a new graph's values do not depend on which other
            new graphs share the call.

    Returns:
        ``[m]`` float64 approximate distances.
    """
    import torch
    from geomloss import SamplesLoss

    if backend not in SINKHORN_BACKENDS:
        raise ValueError(f"backend must be one of {SINKHORN_BACKENDS}, got {backend!r}")
    if dtype not in ("float64", "float32") or (dtype == "float32" and backend != "triton"):
        raise ValueError(f"dtype must be 'float64' (or 'float32' with backend='triton'), got {dtype!r}")
    bank = shared_bank(left, right)
    if diameter is None:
        diameter = sinkhorn_diameter(bank, blur)
    elif not is_positive_number(diameter):
        raise ValueError(f"diameter must be > 0 and finite, got {diameter!r}")
    pairs = np.asarray(pairs, dtype=np.int64).reshape(-1, 2)
    if backend in ("fused", "triton") or (backend == "auto" and distance_table_bytes(bank) <= max_bytes):
        triton = backend == "triton"
        return _fused_sinkhorn(
            left, right, pairs, blur, scaling, diameter, device, batch_size, max_bytes, progress, triton, dtype
        )
    width_l, width_r = np.diff(left.graph_ptr)[pairs[:, 0]], np.diff(right.graph_ptr)[pairs[:, 1]]
    losses = {}  # one geomloss object per backend used
    out = np.empty(len(pairs), dtype=np.float64)
    pending = padding_batches(width_l, width_r, batch_size)
    while pending:
        at = pending.pop(0)
        chunk = pairs[at]
        sup_a = [left.graph(i) for i in chunk[:, 0]]
        sup_b = [right.graph(j) for j in chunk[:, 1]]
        used = np.unique(np.concatenate([s for s, _ in sup_a] + [s for s, _ in sup_b]))
        # Keep only the columns these rows use: Euclidean distances are unchanged.
        sub = bank[used]
        columns = np.unique(sub.indices)
        wa, wb = max(len(s) for s, _ in sup_a), max(len(s) for s, _ in sup_b)
        mode = backend if backend != "auto" else ("online" if wa * wb >= online_from else "tensorized")
        per_pair = (wa + wb) * max(len(columns), 1) * 8 + (wa * wb * 8 if mode == "tensorized" else 0)
        if len(at) > 1 and len(at) * per_pair > max_bytes:
            mid = len(at) // 2  # too large for one padded batch: halve it
            pending[:0] = [at[:mid], at[mid:]]
            continue
        dense = sub[:, columns].toarray()
        local = np.full(bank.shape[0], -1, dtype=np.int64)
        local[used] = np.arange(len(used))
        # pykeops' reduction over a side of one point in a batch of several pairs fails
        # inside geomloss (a view of the wrong shape), so online sides have two or more.
        min_width = 2 if mode == "online" else 1
        x, a = _padded(sup_a, local, dense, min_width)
        y, b = _padded(sup_b, local, dense, min_width)
        if mode not in losses:
            losses[mode] = SamplesLoss(
                "sinkhorn", p=1, blur=blur, diameter=diameter, scaling=scaling, debias=True, backend=mode
            )
        with torch.no_grad():
            value = losses[mode](
                torch.from_numpy(a).to(device),
                torch.from_numpy(x).to(device),
                torch.from_numpy(b).to(device),
                torch.from_numpy(y).to(device),
            )
        out[at] = value.double().cpu().numpy().reshape(-1)
        if progress is not None:
            progress(len(at))
    return out


def width_class(width: np.ndarray) -> np.ndarray:
    """``width`` rounded up to a coarse grid: exact to 8, then 4 steps an octave (a step is
    an eighth to a quarter of the width), so a class's widths are within 25 % of its top."""
    width = np.asarray(width, dtype=np.int64)
    step = np.left_shift(1, np.maximum(np.floor(np.log2(np.maximum(width - 1, 1))).astype(np.int64) - 2, 0))
    return np.where(width <= 8, width, -(-width // step) * step)


def padding_batches(width_l: np.ndarray, width_r: np.ndarray, batch_size: int, slack: float = 1.5) -> list[np.ndarray]:
    """Pair indices in batches of at most ``batch_size`` for zero-weight padding to a batch's
    widest sides.

    Pairs are grouped by the classes of their two widths (:func:`width_class`), the groups
    taken in class order, and consecutive groups merged into one batch while its padded
    area (pairs x widest left x widest right) stays within ``slack`` times the real one
    (the sum of ``width_l * width_r``), so that few small groups do not each cost a call.
    (Sorting all pairs by their exact widths and cutting the order into batches would let
    one batch span many left widths, each with the whole range of right ones, and pad
    its cost matrices many times over.) Every index appears in exactly one batch.
    """
    width_l = np.asarray(width_l, dtype=np.int64)
    width_r = np.asarray(width_r, dtype=np.int64)
    batches: list[np.ndarray] = []
    current: list[np.ndarray] = []
    count = real = top_l = top_r = 0
    for group in shape_buckets(width_class(width_l), width_class(width_r)):
        for lo in range(0, len(group), batch_size):
            piece = group[lo : lo + batch_size]
            piece_real = int((width_l[piece] * width_r[piece]).sum())
            wl, wr = max(top_l, int(width_l[piece].max())), max(top_r, int(width_r[piece].max()))
            too_many = count + len(piece) > batch_size
            if current and (too_many or (count + len(piece)) * wl * wr > slack * (real + piece_real)):
                batches.append(np.concatenate(current))
                current, count, real = [], 0, 0
                wl, wr = int(width_l[piece].max()), int(width_r[piece].max())
            current.append(piece)
            count, real, top_l, top_r = count + len(piece), real + piece_real, wl, wr
    if current:
        batches.append(np.concatenate(current))
    return batches


def sinkhorn_diameter(bank: sp.csr_matrix, blur: float) -> float:
    """Where geomloss's epsilon schedule starts, one value for every batch: the diagonal
    of the bounding box of all rows and the origin (where padding sits), at least ``blur``.
    A per-batch diameter would make a pair's value depend on its batch, and geomloss fails
    on a batch of equal points (diameter 0)."""
    span = (bank.max(axis=0) - bank.min(axis=0)).toarray() if bank.nnz else np.zeros(1)
    return max(float(np.linalg.norm(span)), blur)


def _graph_batch(sset: SupportSet, graphs: np.ndarray, width: int) -> tuple[np.ndarray, np.ndarray]:
    """Row IDs ``[len(graphs), width]`` (0 on padding) and masses (0 on padding) of ``graphs``."""
    lo = sset.graph_ptr[graphs]
    length = sset.graph_ptr[graphs + 1] - lo
    real = np.arange(width)[None, :] < length[:, None]
    at = np.where(real, lo[:, None] + np.arange(width), 0)
    ids = np.where(real, sset.support[at], 0)
    mass = np.where(real, sset.counts[at] / sset.sizes[graphs][:, None], 0.0)
    return ids, mass


def _padded_width(sizes: np.ndarray, pad_to: int = 4) -> np.ndarray:
    """Sizes rounded up to a multiple of ``pad_to``: few shapes, little padding."""
    return -(-sizes // pad_to) * pad_to


def shape_buckets(rows: np.ndarray, cols: np.ndarray | None = None) -> list[np.ndarray]:
    """Indices grouped by equal shape ``rows`` (or ``(rows, cols)``), never an empty group;
    within a group the indices keep their order. How the fused Sinkhorn batches problems of
    one shape."""
    key = rows if cols is None else rows * (int(cols.max(initial=0)) + 1) + cols
    order = np.argsort(key, kind="stable")
    return [group for group in np.split(order, np.flatnonzero(np.diff(key[order])) + 1) if len(group)]


def triton_kernels(table):
    """:mod:`mwsp_torch.transport._triton_sinkhorn` for ``backend="triton"``: CUDA tensors, or CPU
    tensors under Triton's interpreter (``TRITON_INTERPRET=1``, as the tests run it)."""
    if not (table.is_cuda or os.environ.get("TRITON_INTERPRET") == "1"):
        raise ValueError("backend='triton' runs on CUDA tensors (or on CPU ones with TRITON_INTERPRET=1)")
    try:
        import mwsp_torch.transport._triton_sinkhorn as kernels
    except ImportError as error:
        raise ImportError("backend='triton' needs the triton package: pip install 'mwsp_torch[gpu]'") from error
    return kernels


def _fused_sinkhorn(
    left, right, pairs, blur, scaling, diameter, device, batch_size, max_bytes, progress, triton, dtype="float64"
):
    """``sinkhorn_distances`` with the ``"fused"`` backend (:mod:`mwsp_torch.transport._batched_sinkhorn`),
    or its Triton kernels (``triton``: :mod:`mwsp_torch.transport._triton_sinkhorn`, see :func:`_triton_sinkhorn`)."""
    import torch

    from mwsp_torch.transport._batched_sinkhorn import cross_terms, epsilon_schedule, self_terms

    bank = shared_bank(left, right)
    if distance_table_bytes(bank) > max_bytes:
        rows = bank.shape[0]
        raise ValueError(
            f"the fused Sinkhorn backend needs a {rows} x {rows} distance table, "
            f"over max_bytes={max_bytes}; use backend='tensorized' or 'online'"
        )
    eps_list = epsilon_schedule(diameter, blur, scaling)
    table = distance_table(bank, device, floor=1e-8)  # geomloss's p=1 cost
    if triton:
        return _triton_sinkhorn(left, right, pairs, table, eps_list, progress, dtype)
    per_entry = 8 * 6  # the cost tensor and the torch loop's temporaries, float64

    def ids_and_mass(sset, graphs, width):
        ids, mass = _graph_batch(sset, graphs, width)
        return torch.from_numpy(ids).to(device), torch.from_numpy(mass).to(device)

    def halves(sset, graphs):
        """Half of OT_eps(a, a) for each graph in ``graphs`` (geomloss's debiasing terms)."""
        out = torch.zeros(len(graphs), dtype=torch.float64, device=device)
        width = _padded_width(np.diff(sset.graph_ptr)[graphs])
        for bucket in shape_buckets(width):
            w = int(width[bucket[0]])
            step = max(1, min(batch_size, max_bytes // max(1, w * w * per_entry)))
            for lo in range(0, len(bucket) if w else 0, step):
                chunk = bucket[lo : lo + step]
                ids, mass = ids_and_mass(sset, graphs[chunk], w)
                value = self_terms(table[ids[:, :, None], ids[:, None, :]], mass, eps_list)
                out[torch.from_numpy(chunk).to(device)] = value
        return out

    used_l, at_l = np.unique(pairs[:, 0], return_inverse=True)
    used_r, at_r = np.unique(pairs[:, 1], return_inverse=True)
    with torch.no_grad():
        half_l, half_r = halves(left, used_l), halves(right, used_r)
        width_l = _padded_width(np.diff(left.graph_ptr)[pairs[:, 0]])
        width_r = _padded_width(np.diff(right.graph_ptr)[pairs[:, 1]])
        out = np.zeros(len(pairs), dtype=np.float64)
        for bucket in shape_buckets(width_l, width_r):
            wa, wb = int(width_l[bucket[0]]), int(width_r[bucket[0]])
            step = max(1, min(batch_size, max_bytes // max(1, wa * wb * per_entry)))
            for lo in range(0, len(bucket) if wa and wb else 0, step):
                chunk = bucket[lo : lo + step]
                ids_a, a = ids_and_mass(left, pairs[chunk, 0], wa)
                ids_b, b = ids_and_mass(right, pairs[chunk, 1], wb)
                value = cross_terms(table[ids_a[:, :, None], ids_b[:, None, :]], a, b, eps_list)
                value -= half_l[torch.from_numpy(at_l[chunk]).to(device)]
                value -= half_r[torch.from_numpy(at_r[chunk]).to(device)]
                out[chunk] = value.cpu().numpy()
            if progress is not None:
                progress(len(bucket))
    return out


def _triton_sinkhorn(left, right, pairs, table, eps_list, progress, dtype):
    """The ``"triton"`` backend: support sets and pairs uploaded once, each Triton program
    slicing its pair's supports itself; one launch per tile shape and one copy back."""
    import torch

    kernels = triton_kernels(table)
    table = table.to(getattr(torch, dtype))

    def upload(sset):
        return kernels.measures(*sset.arrays(), table.dtype, table.device)

    def used(sset, *columns):
        flags = np.zeros(sset.num_graphs, dtype=bool)
        for column in columns:
            flags[pairs[:, column]] = True
        return np.flatnonzero(flags)

    with torch.no_grad():
        if right is left:  # one debiasing term per graph, whichever side it is on
            measures_l = measures_r = upload(left)
            half_l = half_r = kernels.self_terms(table, measures_l, used(left, 0, 1), eps_list)
        else:
            measures_l, measures_r = upload(left), upload(right)
            half_l = kernels.self_terms(table, measures_l, used(left, 0), eps_list)
            half_r = kernels.self_terms(table, measures_r, used(right, 1), eps_list)
        out = kernels.cross_terms(table, measures_l, measures_r, pairs, eps_list, half_l, half_r, progress)
        return out.to(torch.float64).cpu().numpy()


def _padded(supports, local, dense, min_width: int = 1):
    """Dense points and weights of ``supports``, zero-weight zero points padding each to the
    widest (at least ``min_width``); a zero-weight point leaves geomloss's value unchanged."""
    width = max(min_width, *(len(s) for s, _ in supports))
    points = np.zeros((len(supports), width, dense.shape[1]), dtype=np.float64)
    weights = np.zeros((len(supports), width), dtype=np.float64)
    for r, (s, w) in enumerate(supports):
        points[r, : len(s)] = dense[local[s]]
        weights[r, : len(s)] = w
    return points, weights
