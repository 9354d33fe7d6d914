"""Pairwise 1-Wasserstein distances between graphs as point clouds (SPEC section 4).

A graph is the uniform measure on the rows ``phi(v)`` of its nodes. Identical
rows are collapsed into one support point carrying their summed mass (the
optimum is unchanged, SPEC 4); rows are interned across the whole dataset so a
row shared by two graphs has one ID and ground cost exactly 0.

Ground costs are Euclidean distances between sparse rows, computed by merging
the two sorted rows and summing squared differences (no ``|a|^2 + |b|^2 - 2ab``
cancellation, so near-identical rows keep their small distances accurate).

``solver="exact"`` runs POT's network simplex (``ot.lp.emd_c``, the C++ core of
``ot.emd2``) in float64 on each collapsed pair, spread over ``n_jobs`` threads
(the C++ solve releases the GIL). ``solver="sinkhorn"`` runs geomloss's
debiased Sinkhorn divergence with ``p=1`` on batches of padded pairs on any
torch device; padding points sit at the origin with zero weight, so they
carry no mass. It is an approximation of W whose measured error is reported
in ``benchmarks/README.md``.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp
from numba import njit

from mwsp_torch._interning import Vocabulary, intern_pair

SOLVERS = ("exact", "sinkhorn")


@dataclass(frozen=True)
class SupportSet:
    """Graphs as weighted sets of distinct feature rows.

    Attributes:
        rows: ``[num_rows, num_features]`` CSR matrix of distinct rows.
        graph_ptr: ``[num_graphs + 1]`` offsets into ``support`` / ``weights``.
        support: row IDs of each graph's support points, sorted per graph.
        weights: their masses (each graph sums to 1).
    """

    rows: sp.csr_matrix
    graph_ptr: np.ndarray
    support: np.ndarray
    weights: np.ndarray

    @property
    def num_graphs(self) -> int:
        return len(self.graph_ptr) - 1

    def graph(self, g: int) -> tuple[np.ndarray, np.ndarray]:
        lo, hi = self.graph_ptr[g], self.graph_ptr[g + 1]
        return self.support[lo:hi], self.weights[lo:hi]


@njit(cache=True)
def _intern_sparse_rows(indptr, indices, data, chain_frozen, chain_fresh, chain_offset, frozen, fresh, offset):
    out = np.empty(indptr.shape[0] - 1, dtype=np.int64)
    bits = data.view(np.int64)
    for i in range(out.shape[0]):
        h = -1
        for e in range(indptr[i], indptr[i + 1]):
            h = intern_pair(chain_frozen, chain_fresh, chain_offset, h, indices[e])
            h = intern_pair(chain_frozen, chain_fresh, chain_offset, h, bits[e])
        # The chain's trie has a node per prefix; a second table numbers whole rows densely.
        out[i] = intern_pair(frozen, fresh, offset, -1, h)
    return out


class RowVocabulary:
    """Dense IDs ``0, 1, ...`` for distinct sparse rows, exact bitwise equality.

    Args:
        frozen (RowVocabulary, optional): a fitted vocabulary consulted first
            and never changed; new rows get IDs after its last one.
    """

    def __init__(self, frozen: RowVocabulary | None = None) -> None:
        self.frozen = frozen
        self.chain = Vocabulary(offset=frozen.chain.size if frozen else 0)
        self.rows = Vocabulary(offset=frozen.size if frozen else 0)

    @property
    def size(self) -> int:
        return self.rows.size

    def intern(self, features: sp.csr_matrix) -> np.ndarray:
        """One ID per row of ``features`` (columns sorted per row)."""
        empty = Vocabulary().table
        chain_frozen = self.frozen.chain.table if self.frozen else empty
        rows_frozen = self.frozen.rows.table if self.frozen else empty
        data = np.ascontiguousarray(features.data, dtype=np.float64) + 0.0  # -0.0 becomes 0.0
        return _intern_sparse_rows(
            features.indptr.astype(np.int64),
            features.indices.astype(np.int64),
            data,
            chain_frozen,
            self.chain.table,
            self.chain.offset,
            rows_frozen,
            self.rows.table,
            self.rows.offset,
        )


def collapse(row_ids: np.ndarray, ptr: np.ndarray, num_rows: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per graph: distinct row IDs (sorted) and their masses.

    Returns:
        ``(graph_ptr, support, weights)`` as in :class:`SupportSet`.
    """
    graph_of_node = np.repeat(np.arange(len(ptr) - 1), np.diff(ptr))
    keys = graph_of_node * np.int64(num_rows) + row_ids
    uniq, counts = np.unique(keys, return_counts=True)
    graph = uniq // num_rows
    support = uniq % num_rows
    sizes = np.diff(ptr)
    weights = counts / sizes[graph]
    graph_ptr = np.zeros(len(ptr), dtype=np.int64)
    np.cumsum(np.bincount(graph, minlength=len(ptr) - 1), out=graph_ptr[1:])
    return graph_ptr, support, weights


@njit(cache=True, nogil=True, inline="always")
def _row_distance(indptr, indices, data, a, b):
    if a == b:
        return 0.0
    i, i_end = indptr[a], indptr[a + 1]
    j, j_end = indptr[b], indptr[b + 1]
    total = 0.0
    while i < i_end and j < j_end:
        if indices[i] == indices[j]:
            diff = data[i] - data[j]
            i += 1
            j += 1
        elif indices[i] < indices[j]:
            diff = data[i]
            i += 1
        else:
            diff = data[j]
            j += 1
        total += diff * diff
    while i < i_end:
        total += data[i] * data[i]
        i += 1
    while j < j_end:
        total += data[j] * data[j]
        j += 1
    return np.sqrt(total)


@njit(cache=True, nogil=True)
def cost_matrix(indptr, indices, data, support_a, support_b):
    """Euclidean ground costs between two lists of row IDs of one CSR bank."""
    out = np.empty((support_a.shape[0], support_b.shape[0]), dtype=np.float64)
    for p in range(support_a.shape[0]):
        for q in range(support_b.shape[0]):
            out[p, q] = _row_distance(indptr, indices, data, support_a[p], support_b[q])
    return out


def upper_pairs(n: int) -> np.ndarray:
    """All ``(i, j)`` with ``i < j``, as an ``[m, 2]`` array."""
    i, j = np.triu_indices(n, k=1)
    return np.stack([i, j], axis=1)


def _emd_value(a, b, cost, max_iter):
    from ot.lp.emd_wrap import emd_c

    _, value, _, _, status = emd_c(a, b, cost, max_iter, 1)
    if status != 1:
        raise RuntimeError(f"network simplex did not reach an optimum (status {status}); raise max_iter")
    return value


def exact_distances(
    left: SupportSet,
    right: SupportSet,
    pairs: np.ndarray,
    n_jobs: int = 1,
    max_iter: int = 1_000_000,
    progress: Callable[[int], None] | None = None,
) -> np.ndarray:
    """Exact W for each pair ``(i, j)``: graph ``i`` of ``left`` against graph ``j`` of ``right``.

    Both sets must index rows of one bank (``left.rows is right.rows``), so
    equal rows have equal IDs.

    Args:
        left (SupportSet): graphs of the first index.
        right (SupportSet): graphs of the second index.
        pairs (np.ndarray): ``[m, 2]`` pairs of graph indices.
        n_jobs (int): threads (default ``1``; ``-1`` for all cores).
        max_iter (int): network simplex iteration cap (default ``1e6``).
        progress (callable, optional): called with the number of pairs done.

    Returns:
        ``[m]`` float64 distances.
    """
    bank = _shared_bank(left, right)
    indptr = bank.indptr.astype(np.int64)
    indices = bank.indices.astype(np.int64)
    data = bank.data.astype(np.float64)
    out = np.empty(len(pairs), dtype=np.float64)

    def work(lo: int, hi: int) -> None:
        for p in range(lo, hi):
            i, j = pairs[p]
            sa, wa = left.graph(i)
            sb, wb = right.graph(j)
            cost = cost_matrix(indptr, indices, data, sa, sb)
            out[p] = _emd_value(wa, wb, cost, max_iter)
        if progress is not None:
            progress(hi - lo)

    chunk = 2048
    bounds = [(lo, min(lo + chunk, len(pairs))) for lo in range(0, len(pairs), chunk)]
    workers = resolve_n_jobs(n_jobs)
    if workers == 1:
        for lo, hi in bounds:
            work(lo, hi)
    else:
        with ThreadPoolExecutor(max_workers=workers) as pool:
            list(pool.map(lambda bound: work(*bound), bounds))
    return out


def _shared_bank(left: SupportSet, right: SupportSet) -> sp.csr_matrix:
    if left.rows is not right.rows:
        raise ValueError("both support sets must share one row bank")
    return left.rows


def resolve_n_jobs(n_jobs: int) -> int:
    """``n_jobs`` as a positive worker count (``-1``: every core)."""
    if n_jobs == -1:
        return os.cpu_count() or 1
    if n_jobs < 1:
        raise ValueError(f"n_jobs must be >= 1 or -1, got {n_jobs}")
    return n_jobs


def sinkhorn_distances(
    left: SupportSet,
    right: SupportSet,
    pairs: np.ndarray,
    blur: float = 0.01,
    scaling: float = 0.99,
    device: str = "cpu",
    batch_size: int = 256,
    progress: Callable[[int], None] | None = None,
) -> np.ndarray:
    """Debiased Sinkhorn approximation of W (geomloss, ``p=1``), batched on ``device``.

    Args:
        left, right, pairs: as in :func:`exact_distances`.
        blur (float): geomloss ``blur``, the entropic length scale (default ``0.01``).
        scaling (float): epsilon-scaling ratio (default ``0.99``).
        device (str): torch device (default ``"cpu"``).
        batch_size (int): pairs per batch (default ``256``).
        progress (callable, optional): called with the number of pairs done.

    Returns:
        ``[m]`` float64 approximate distances.
    """
    import torch
    from geomloss import SamplesLoss

    loss = SamplesLoss("sinkhorn", p=1, blur=blur, scaling=scaling, debias=True, backend="tensorized")
    bank = _shared_bank(left, right)
    out = np.empty(len(pairs), dtype=np.float64)
    for lo in range(0, len(pairs), batch_size):
        chunk = pairs[lo : lo + batch_size]
        sup_a = [left.graph(i) for i in chunk[:, 0]]
        sup_b = [right.graph(j) for j in chunk[:, 1]]
        used = np.unique(np.concatenate([s for s, _ in sup_a] + [s for s, _ in sup_b]))
        dense = bank[used].toarray()
        # Keep only the columns these rows use: Euclidean distances are unchanged.
        dense = dense[:, np.flatnonzero(np.any(dense != 0, axis=0))]
        local = np.full(bank.shape[0], -1, dtype=np.int64)
        local[used] = np.arange(len(used))
        x, a = _padded(sup_a, local, dense)
        y, b = _padded(sup_b, local, dense)
        with torch.no_grad():
            value = loss(
                torch.from_numpy(a).to(device),
                torch.from_numpy(x).to(device),
                torch.from_numpy(b).to(device),
                torch.from_numpy(y).to(device),
            )
        out[lo : lo + len(chunk)] = value.double().cpu().numpy()
        if progress is not None:
            progress(len(chunk))
    return out


def _padded(supports, local, dense):
    width = max(len(s) for s, _ in supports)
    points = np.zeros((len(supports), width, dense.shape[1]), dtype=np.float64)
    weights = np.zeros((len(supports), width), dtype=np.float64)
    for r, (s, w) in enumerate(supports):
        points[r, : len(s)] = dense[local[s]]
        weights[r, : len(s)] = w
    return points, weights
