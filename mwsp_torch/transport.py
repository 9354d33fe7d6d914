"""Pairwise 1-Wasserstein distances between graphs as point clouds (SPEC section 4).

A graph is the uniform measure on the rows ``phi(v)`` of its nodes. Identical
rows are collapsed into one support point carrying their summed mass (the
optimum is unchanged, SPEC 4); rows are interned across the whole dataset so a
row shared by two graphs has one ID and ground cost exactly 0.

Ground costs are Euclidean distances between sparse rows, computed by merging
the two sorted rows and summing squared differences (no ``|a|^2 + |b|^2 - 2ab``
cancellation, so near-identical rows keep their small distances accurate).

``solver="exact"`` runs a compiled transportation simplex
(:mod:`mwsp_torch._simplex`, exact integer flows, float64 costs) over chunks of pairs,
one call per thread of the ahead-of-time compiled extension (:mod:`mwsp_torch._aot`), or
numba's ``prange`` loop on the JIT path, in tiles that can be checkpointed; mass on rows that
both graphs carry is cancelled first (exact for W1 with a metric cost). POT's
network simplex (:func:`pot_distances`) is the reference it is tested against.

:func:`batched_exact_distances` is the same exact W for GPUs: the problems left after
cancellation, padded to a few shapes, go through a transportation simplex written
as tensor operations over a batch (:mod:`mwsp_torch._batched_simplex`), with ground
costs from a distance table built from the Gram matrix (:func:`_distance_table`). It is tested
on CPU tensors against the compiled engine (1e-9), where it is much slower.

``solver="sinkhorn"`` computes geomloss's debiased Sinkhorn divergence with ``p=1`` on
batches of padded pairs on any torch device; padding carries zero weight. By default
(``backend="fused"``, :mod:`mwsp_torch._batched_sinkhorn`) geomloss's loop runs on cost
tensors gathered from the distance table, with the debiasing terms solved once per
graph; geomloss itself (tensorized, or pykeops online) serves banks whose table does not
fit. It is an approximation of W whose measured error is reported in ``benchmarks/README.md``.
"""

from __future__ import annotations

import hashlib
import itertools
import os
import threading
import warnings
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import scipy.sparse as sp
from numba import njit, prange

from mwsp_torch import _aot
from mwsp_torch._borrow import borrowed, borrowed_run, release
from mwsp_torch._checks import is_integer, is_positive_number
from mwsp_torch._interning import Vocabulary, intern_pair
from mwsp_torch._numba_setup import numba_ready
from mwsp_torch._simplex import cost_width, transport_cost

SOLVERS = ("exact", "sinkhorn")

#: Pairs per chunk of the exact kernel's parallel loop (each chunk zeroes its own column buffer).
PAIR_CHUNK = 256

#: A chunk takes its pairs in blocks of this many, every ``num_chunks``-th block of the tile.
#: numba's ``prange`` hands each thread one contiguous run of chunks (its OpenMP layer
#: ignores ``set_parallel_chunksize`` here), so contiguous chunks left one thread with
#: whatever heavy pairs a run of the tile held: on DD's heavy-tailed sizes two threads did
#: 1,000 pairs only 1.44x faster than one. Interleaved blocks give each thread a sample.
#: (The ahead-of-time engine hands out runs of consecutive pairs instead: _ExactWorkers.each_chunk.)
PAIR_BLOCK = 8

#: Runs of pairs a thread of the ahead-of-time engine takes at least from a tile
#: (:meth:`_ExactWorkers.each_chunk`), fewer pairs a run where a tile is small.
RUNS_PER_THREAD = 8

#: Cost entries of the buffer each thread of the exact kernel keeps for its pairs' cost
#: matrices (64 K float64, 512 KiB: problems to 256 x 256); larger ones are allocated per pair.
COST_POOL = 1 << 16

#: Ways to the ground costs of :func:`exact_distances` (``costs=``); see there.
COST_METHODS = ("auto", "table", "lists", "scattered", "merged")

#: ``"lists"`` and ``"scattered"`` keep one buffer entry per column of the bank in each
#: thread (int32 list heads or float64 values, zeroed lazily by the system: at most
#: 128 MiB at this limit); ``"auto"`` merges rows beyond it. DD d=3,k=1 has 15.1 M
#: columns, REDDIT-BINARY d=2,k=2 6.9 M.
BUFFER_MAX_COLUMNS = 1 << 24

#: The largest row-to-row table of a bank's ground costs that ``costs="auto"`` builds
#: (128 MiB: a larger table makes every lookup a cache miss, slower than recomputing).
TABLE_BYTES = 1 << 27
SINKHORN_BACKENDS = ("auto", "fused", "triton", "tensorized", "online")


@dataclass(frozen=True)
class SupportSet:
    """Graphs as weighted sets of distinct feature rows.

    Attributes:
        rows: ``[num_rows, num_features]`` CSR matrix of distinct rows.
        graph_ptr: ``[num_graphs + 1]`` offsets into ``support`` / ``counts``.
        support: row IDs of each graph's support points, sorted per graph.
        counts: how many nodes share each support point (int64).
        sizes: ``[num_graphs]`` node counts; a point's mass is ``count / size``.
    """

    rows: sp.csr_matrix
    graph_ptr: np.ndarray
    support: np.ndarray
    counts: np.ndarray
    sizes: np.ndarray

    @property
    def num_graphs(self) -> int:
        return len(self.graph_ptr) - 1

    def arrays(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """``(graph_ptr, support, counts, sizes)``, the order the compiled kernels take."""
        return self.graph_ptr, self.support, self.counts, self.sizes

    def graph(self, g: int) -> tuple[np.ndarray, np.ndarray]:
        """Support row IDs and masses of graph ``g``."""
        lo, hi = self.graph_ptr[g], self.graph_ptr[g + 1]
        return self.support[lo:hi], self.counts[lo:hi] / self.sizes[g]

    def take(self, graphs: np.ndarray) -> SupportSet:
        """The graphs ``graphs`` (indices), on the same row bank."""
        graphs = np.asarray(graphs, dtype=np.int64)
        lengths = np.diff(self.graph_ptr)[graphs]
        graph_ptr = np.zeros(len(graphs) + 1, dtype=np.int64)
        np.cumsum(lengths, out=graph_ptr[1:])
        entries = np.concatenate([np.arange(self.graph_ptr[g], self.graph_ptr[g + 1]) for g in graphs] or [[]])
        entries = entries.astype(np.int64)
        return SupportSet(self.rows, graph_ptr, self.support[entries], self.counts[entries], self.sizes[graphs])

    def distinct_measures(self) -> tuple[np.ndarray, np.ndarray]:
        """Graphs that are one measure: the same support points with proportional counts.

        W between such graphs is 0 and their distances to every other graph are equal,
        so all-pairs work needs only one of each (IMDB-BINARY: 537 of 1,000 graphs).

        Returns:
            ``(representatives, inverse)``: the first graph of each measure, and for
            every graph the index of its measure among the representatives.
        """
        seen: dict[tuple[bytes, bytes], int] = {}
        inverse = np.empty(self.num_graphs, dtype=np.int64)
        representatives = []
        for g in range(self.num_graphs):
            lo, hi = self.graph_ptr[g], self.graph_ptr[g + 1]
            counts = self.counts[lo:hi]
            reduced = counts // np.gcd.reduce(counts) if hi > lo else counts
            key = (self.support[lo:hi].tobytes(), reduced.tobytes())
            inverse[g] = seen.setdefault(key, len(representatives))
            if inverse[g] == len(representatives):
                representatives.append(g)
        return np.asarray(representatives, dtype=np.int64), inverse


@njit(cache=True)
def _intern_sparse_rows(indptr, indices, data, chain_frozen, chain_fresh, chain_offset, frozen, fresh, offset):
    out = np.empty(indptr.shape[0] - 1, dtype=np.int64)
    bits = data.view(np.int64)
    for i in range(out.shape[0]):
        h = -1
        for e in range(indptr[i], indptr[i + 1]):
            h, chain_fresh = intern_pair(chain_frozen, chain_fresh, chain_offset, h, indices[e])
            h, chain_fresh = intern_pair(chain_frozen, chain_fresh, chain_offset, h, bits[e])
        # The chain's trie has a node per prefix; a second table numbers whole rows densely.
        out[i], fresh = intern_pair(frozen, fresh, offset, -1, h)
    return out, chain_fresh, fresh


_intern_sparse_rows_kernel = _aot.Kernel("intern_sparse_rows", _intern_sparse_rows)


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
        out, self.chain.table, self.rows.table = _intern_sparse_rows_kernel(
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
        return out


def collapse(row_ids: np.ndarray, ptr: np.ndarray, num_rows: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per graph: distinct row IDs (sorted) and how many nodes carry each.

    Returns:
        ``(graph_ptr, support, counts)`` as in :class:`SupportSet`.
    """
    graph_of_node = np.repeat(np.arange(len(ptr) - 1), np.diff(ptr))
    keys = graph_of_node * np.int64(num_rows) + row_ids
    uniq, counts = np.unique(keys, return_counts=True)
    graph = uniq // num_rows
    support = uniq % num_rows
    graph_ptr = np.zeros(len(ptr), dtype=np.int64)
    np.cumsum(np.bincount(graph, minlength=len(ptr) - 1), out=graph_ptr[1:])
    return graph_ptr, support, counts.astype(np.int64)


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
def _merged_costs(indptr, indices, data, support_a, support_b, out):
    """Euclidean costs between two lists of row IDs into ``out``, each by merging two rows."""
    for p in range(support_a.shape[0]):
        for q in range(support_b.shape[0]):
            out[p, q] = _row_distance(indptr, indices, data, support_a[p], support_b[q])


@njit(cache=True, nogil=True)
def cost_matrix(indptr, indices, data, support_a, support_b):
    """Euclidean ground costs between two lists of row IDs of one CSR bank."""
    out = np.empty((support_a.shape[0], support_b.shape[0]), dtype=np.float64)
    _merged_costs(indptr, indices, data, support_a, support_b, out)
    return out


def upper_pairs(n: int) -> np.ndarray:
    """All ``(i, j)`` with ``i < j``, as an ``[m, 2]`` array."""
    i, j = np.triu_indices(n, k=1)
    return np.stack([i, j], axis=1)


@njit(cache=True, nogil=True, inline="always")
def _cancel(sa, ca, na, sb, cb, nb, pos_ids, pos_mass, neg_ids, neg_mass):
    """Net integer masses ``count * other size`` of two sorted supports, shared mass cancelled.

    Writes the rows left on each side into the four output arrays (sized ``len(sa)`` and
    ``len(sb)``) and returns how many there are, ``(n_pos, n_neg)``.
    """
    n_pos = 0
    n_neg = 0
    i = 0
    j = 0
    while i < sa.shape[0] or j < sb.shape[0]:
        if j == sb.shape[0] or (i < sa.shape[0] and sa[i] < sb[j]):
            net = ca[i] * nb
            row = sa[i]
            i += 1
        elif i == sa.shape[0] or sb[j] < sa[i]:
            net = -cb[j] * na
            row = sb[j]
            j += 1
        else:
            net = ca[i] * nb - cb[j] * na
            row = sa[i]
            i += 1
            j += 1
        if net > 0:
            pos_ids[n_pos] = row
            pos_mass[n_pos] = net
            n_pos += 1
        elif net < 0:
            neg_ids[n_neg] = row
            neg_mass[n_neg] = -net
            n_neg += 1
    return n_pos, n_neg


#: :func:`_checked_cost` merges two rows again when their squared distance, found as full
#: sums less partial ones, is under this fraction of ``n_a |a|^2 + n_b |b|^2`` (``n``: a row's
#: entries); those sums are off by at most about twice that in units of float64's rounding
#: unit ``u = 2^-53``. Above it the square is off by at most ``2 u / CANCELLATION`` = 2^-32
#: = 2.3e-10 relative, and the cost by half that.
CANCELLATION = 2.0**-20


@njit(cache=True, nogil=True, inline="always")
def _checked_cost(indptr, indices, data, squares, a, b, squared):
    """``sqrt(squared)``, where ``squared`` is ``|a - b|^2`` found as full squared norms less
    sums over shared columns; if cancellation may have cost it digits, :func:`_row_distance`.

    A row with a large shared entry (a hub's count) and small unshared ones loses the small
    part in ``|a|^2 - sum_shared a_f^2``: on a review's hub graphs W was off by 1.8e-9 and
    1.1e-7 relative. Each sum of ``n`` squares is off by at most about ``n u`` of itself, so
    a square under ``CANCELLATION (n_a |a|^2 + n_b |b|^2)`` is computed again from the
    differences themselves. Rows of the TU datasets are rarely that close to each other.
    """
    n_a = indptr[a + 1] - indptr[a]
    n_b = indptr[b + 1] - indptr[b]
    if squared < CANCELLATION * (n_a * squares[a] + n_b * squares[b]):
        return _row_distance(indptr, indices, data, a, b)
    return np.sqrt(squared)


@njit(cache=True, nogil=True)
def _scattered_costs(indptr, indices, data, squares, pos_ids, neg_ids, dense, cost):
    """Euclidean costs between two row lists, each row of the second scattered into ``dense``.

    ``dense`` is all zeros, as long as the bank has columns, and is left all zeros. For
    each row ``b`` of the second list, scattered, a row ``a`` of the first costs one
    lookup per entry of ``a``: ``|a - b|^2`` is ``sum_(f in a) (a_f - b_f)^2`` plus
    ``|b|^2 - sum_(f in a) b_f^2``, the mass of ``b`` outside ``a``. Both sums run in
    column order as ``squares`` did, so a ``b`` inside ``a`` leaves exactly 0 there and
    no term can go negative; a cost that cancellation may have robbed of digits is merged
    again (:func:`_checked_cost`). The way for rows that share most of their few columns
    (REDDIT-BINARY d=2,k=0: 3 columns), where :func:`_inverted_costs` walks long lists.
    """
    for q in range(neg_ids.shape[0]):
        b = neg_ids[q]
        for t in range(indptr[b], indptr[b + 1]):
            dense[indices[t]] = data[t]
        for p in range(pos_ids.shape[0]):
            a = pos_ids[p]
            inside = 0.0
            shared = 0.0
            for t in range(indptr[a], indptr[a + 1]):
                other = dense[indices[t]]
                diff = data[t] - other
                inside += diff * diff
                shared += other * other
            cost[p, q] = _checked_cost(indptr, indices, data, squares, a, b, inside + (squares[b] - shared))
        for t in range(indptr[b], indptr[b + 1]):
            dense[indices[t]] = 0.0


@njit(cache=True, nogil=True)
def _inverted_costs(indptr, indices, data, squares, pos_ids, neg_ids, head, cost):
    """Euclidean costs between two row lists, from inverted lists of the first list's columns.

    ``head`` is int32 zeros, one per column of the bank, and is left all zeros. Each column
    of the first list's rows heads a linked list of the entries that hold it; a row ``b``
    of the second list walks only the lists of its own columns, so the work is the number
    of columns two rows share (DD: 0.15 per pair of rows, against 16-35 entries a row).
    Then ``|a - b|^2`` is ``|a|^2 + |b|^2`` for rows that share none, and otherwise
    ``sum_shared (a_f - b_f)^2 + (|a|^2 - sum_shared a_f^2) + (|b|^2 - sum_shared b_f^2)``.
    The shared sums run in column order as ``squares`` did, so each bracket is a full sum
    less a partial one of the same terms in the same order: never negative, and exactly 0
    when a row lies inside the other; a cost that cancellation may have robbed of digits
    is merged again (:func:`_checked_cost`). Against :func:`_scattered_costs` (the only way without
    a table until 2026-11-22), measured by ``benchmarks/costs_without_table.py`` (costs
    alone, one thread): 7.5x fewer seconds on DD d=2,k=1 problems, 4.7x on DD d=2,k=0,
    2.1x on ENZYMES d=3,k=1, 0.39x on REDDIT-BINARY d=2,k=0 (3 columns, all shared);
    rounding as the merge of two sorted rows (:func:`_row_distance`) to 1.3e-15 on DD,
    3.5e-14 on ENZYMES. Filling the costs of rows that share nothing first, a row at a
    time, instead of a column of ``cost`` per row ``b``, gave the same matrices, bit for bit,
    in 1.63x fewer seconds on DD d=2,k=1 problems (0.315 against 0.513 s for 1,000 pairs,
    one thread; ENZYMES d=3,k=1 1.06x). A hash table of the first list's columns in place
    of ``head`` (small, so always in cache) was 1.14x slower on DD d=2,k=1 and d=2,k=0.
    """
    n_pos = pos_ids.shape[0]
    total = 0
    for p in range(n_pos):
        total += indptr[pos_ids[p] + 1] - indptr[pos_ids[p]]
    # Entry e of the first list: next entry of its column (e + 1 coded, 0 ends), bank position, row.
    nxt = np.empty(total, dtype=np.int32)
    where = np.empty(total, dtype=np.int64)
    owner = np.empty(total, dtype=np.int64)
    e = 0
    for p in range(n_pos):
        a = pos_ids[p]
        for t in range(indptr[a], indptr[a + 1]):
            nxt[e] = head[indices[t]]
            head[indices[t]] = e + 1
            where[e] = t
            owner[e] = p
            e += 1
    pos_squares = np.empty(n_pos)
    for p in range(n_pos):
        pos_squares[p] = squares[pos_ids[p]]
    neg_squares = np.empty(neg_ids.shape[0])
    for q in range(neg_ids.shape[0]):
        neg_squares[q] = squares[neg_ids[q]]
    # Every cost as if the rows shared no column, row by row (vector square roots); the
    # walk below overwrites the entries of rows that share some.
    for p in range(n_pos):
        row = cost[p]
        for q in range(neg_ids.shape[0]):
            row[q] = np.sqrt(pos_squares[p] + neg_squares[q])
    inside = np.zeros(n_pos)
    shared_a = np.zeros(n_pos)
    shared_b = np.zeros(n_pos)
    marked = np.zeros(n_pos, dtype=np.bool_)
    touched = np.empty(n_pos, dtype=np.int64)
    for q in range(neg_ids.shape[0]):
        b = neg_ids[q]
        num_touched = 0
        for t in range(indptr[b], indptr[b + 1]):
            x = head[indices[t]]
            while x:
                p = owner[x - 1]
                if not marked[p]:
                    marked[p] = True
                    touched[num_touched] = p
                    num_touched += 1
                va = data[where[x - 1]]
                diff = va - data[t]
                inside[p] += diff * diff
                shared_a[p] += va * va
                shared_b[p] += data[t] * data[t]
                x = nxt[x - 1]
        for i in range(num_touched):
            p = touched[i]
            squared = inside[p] + (pos_squares[p] - shared_a[p]) + (squares[b] - shared_b[p])
            cost[p, q] = _checked_cost(indptr, indices, data, squares, pos_ids[p], b, squared)
            inside[p] = 0.0
            shared_a[p] = 0.0
            shared_b[p] = 0.0
            marked[p] = False
    for p in range(n_pos):
        a = pos_ids[p]
        for t in range(indptr[a], indptr[a + 1]):
            head[indices[t]] = 0


@njit(cache=True, nogil=True)
def _pair_distance(
    sa, ca, na, sb, cb, nb, indptr, indices, data, table, squares, dense, head, pos_ids, pos_mass, neg_ids, neg_mass,
    cost_pool,
):  # fmt: skip
    """Exact W between two collapsed graphs sharing one row bank.

    W1 with a metric ground cost depends only on ``a - b`` (Kantorovich-Rubinstein),
    so mass on rows both graphs carry cancels exactly; what is left is a smaller
    transportation problem between disjoint point sets, in integer masses
    (``count * other graph's size``). ``pos_*`` and ``neg_*`` are work arrays of at least
    ``len(sa)`` and ``len(sb)`` entries; the costs are carved from ``cost_pool`` (a borrowed
    view, :mod:`mwsp_torch._borrow`) when they fit, else allocated.
    """
    n_pos, n_neg = _cancel(sa, ca, na, sb, cb, nb, pos_ids, pos_mass, neg_ids, neg_mass)
    if n_pos == 0:
        return 0.0
    # Rows padded as the solver prices them (columns past n_neg are its scratch): no copy there.
    width = cost_width(n_neg)
    if n_pos * width <= cost_pool.shape[0]:
        cost = cost_pool[: n_pos * width].reshape((n_pos, width))
    else:
        cost = np.empty((n_pos, width), dtype=np.float64)
    if table.shape[0] > 0:
        for p in range(n_pos):
            for q in range(n_neg):
                cost[p, q] = table[pos_ids[p], neg_ids[q]]
    elif head.shape[0] > 0:
        _inverted_costs(indptr, indices, data, squares, pos_ids[:n_pos], neg_ids[:n_neg], head, cost)
    elif dense.shape[0] > 0:
        _scattered_costs(indptr, indices, data, squares, pos_ids[:n_pos], neg_ids[:n_neg], dense, cost)
    else:
        _merged_costs(indptr, indices, data, pos_ids[:n_pos], neg_ids[:n_neg], cost)
    if n_pos == 1 or n_neg == 1:
        total = 0.0  # a single source or sink: the plan is forced
        for p in range(n_pos):
            for q in range(n_neg):
                total += (pos_mass[p] if n_neg == 1 else neg_mass[q]) * cost[p, q]
        return total / (na * nb)
    return transport_cost(pos_mass[:n_pos], neg_mass[:n_neg], cost) / (na * nb)


@njit(cache=True, nogil=True, inline="always")
def _pair_supports(g, h, l_ptr, l_sup, l_cnt, l_size, r_ptr, r_sup, r_cnt, r_size):
    """``(support, counts, size)`` of graph ``g`` of the left set, then of graph ``h`` of the right."""
    lo, hi = l_ptr[g], l_ptr[g + 1]
    r_lo, r_hi = r_ptr[h], r_ptr[h + 1]
    return l_sup[lo:hi], l_cnt[lo:hi], l_size[g], r_sup[r_lo:r_hi], r_cnt[r_lo:r_hi], r_size[h]


@njit(cache=True, parallel=True)
def _pairs_kernel(
    pairs, l_ptr, l_sup, l_cnt, l_size, r_ptr, r_sup, r_cnt, r_size, indptr, indices, data, table, squares,
    dense_columns, head_columns, out,
):  # fmt: skip
    """Exact W of each pair, in chunks of about ``PAIR_CHUNK`` pairs so that each chunk has
    its own zeroed buffers: ``dense_columns`` values for scattered costs, ``head_columns``
    list heads for inverted lists (both 0 without: a table, or merged rows). Chunk ``c``
    takes blocks ``c, c + num_chunks, ...`` of ``PAIR_BLOCK`` pairs (see there)."""
    num_chunks = (pairs.shape[0] + PAIR_CHUNK - 1) // PAIR_CHUNK
    for c in prange(num_chunks):
        _pairs_chunks(
            pairs, l_ptr, l_sup, l_cnt, l_size, r_ptr, r_sup, r_cnt, r_size, indptr, indices, data, table, squares,
            dense_columns, head_columns, out, c, num_chunks,
        )  # fmt: skip


@njit(cache=True, nogil=True)
def _pairs_chunks(
    pairs, l_ptr, l_sup, l_cnt, l_size, r_ptr, r_sup, r_cnt, r_size, indptr, indices, data, table, squares,
    dense_columns, head_columns, out, first, step,
):  # fmt: skip
    """Chunks ``first, first + step, ...`` of :func:`_pairs_kernel`, each with its own zeroed
    buffers, in this thread: :func:`_pairs_kernel` and the ahead-of-time compiled engine
    (:mod:`mwsp_torch._aot`, :meth:`_ExactWorkers.each_chunk`) call it for one chunk."""
    num_pairs = pairs.shape[0]
    num_blocks = (num_pairs + PAIR_BLOCK - 1) // PAIR_BLOCK
    num_chunks = (num_pairs + PAIR_CHUNK - 1) // PAIR_CHUNK
    # Every array a pair reads or writes as a borrowed view (mwsp_torch._borrow): numba's
    # atomic reference counts, about 230 increments a pair on NCI1 with the solver's and none
    # now, cost 1.13-1.5x on an Intel Xeon. The caller holds the arguments for the whole call.
    pairs, out, table, squares = borrowed(pairs), borrowed(out), borrowed(table), borrowed(squares)
    l_ptr, l_sup, l_cnt, l_size = borrowed(l_ptr), borrowed(l_sup), borrowed(l_cnt), borrowed(l_size)
    r_ptr, r_sup, r_cnt, r_size = borrowed(r_ptr), borrowed(r_sup), borrowed(r_cnt), borrowed(r_size)
    indptr, indices, data = borrowed(indptr), borrowed(indices), borrowed(data)
    # Work arrays for the cancelled supports, and costs up to COST_POOL entries, once per call.
    most_a = _longest_run(l_ptr)
    most_b = _longest_run(r_ptr)
    work_owner = np.empty(2 * most_a + 2 * most_b, dtype=np.int64)
    cost_owner = np.empty(COST_POOL, dtype=np.float64)
    pos_ids, pos_mass = borrowed_run(work_owner, 0, most_a), borrowed_run(work_owner, most_a, most_a)
    neg_ids, neg_mass = (
        borrowed_run(work_owner, 2 * most_a, most_b),
        borrowed_run(work_owner, 2 * most_a + most_b, most_b),
    )
    cost_pool = borrowed(cost_owner)
    for c in range(first, num_chunks, step):
        dense_owner = np.zeros(dense_columns, dtype=np.float64)
        head_owner = np.zeros(head_columns, dtype=np.int32)
        dense, head = borrowed(dense_owner), borrowed(head_owner)
        for b in range(c, num_blocks, num_chunks):
            for t in range(b * PAIR_BLOCK, min((b + 1) * PAIR_BLOCK, num_pairs)):
                sa, ca, na, sb, cb, nb = _pair_supports(
                    pairs[t, 0], pairs[t, 1], l_ptr, l_sup, l_cnt, l_size, r_ptr, r_sup, r_cnt, r_size
                )
                out[t] = _pair_distance(
                    sa, ca, na, sb, cb, nb, indptr, indices, data, table, squares, dense, head, pos_ids, pos_mass,
                    neg_ids, neg_mass, cost_pool,
                )  # fmt: skip
        release(dense_owner)
        release(head_owner)
    release(work_owner)
    release(cost_owner)


@njit(cache=True, nogil=True)
def _longest_run(ptr):
    """The most entries between consecutive offsets of ``ptr`` (0 for one offset)."""
    most = 0
    for g in range(ptr.shape[0] - 1):
        most = max(most, ptr[g + 1] - ptr[g])
    return most


@njit(cache=True)
def _row_squares(indptr, data):
    """Each row's squared norm, summed in column order (as the scattered and listed costs sum)."""
    out = np.zeros(indptr.shape[0] - 1, dtype=np.float64)
    for a in range(out.shape[0]):
        total = 0.0
        for t in range(indptr[a], indptr[a + 1]):
            total += data[t] * data[t]
        out[a] = total
    return out


_row_squares_kernel = _aot.Kernel("row_squares", _row_squares)


@njit(cache=True, nogil=True)
def _table_row(indptr, indices, data, a, out):
    """Row ``a`` of the table right of its diagonal."""
    for b in range(a + 1, out.shape[0]):
        out[a, b] = _row_distance(indptr, indices, data, a, b)


@njit(cache=True, parallel=True)
def _row_distance_table(indptr, indices, data):
    """All row-to-row distances. Row ``a`` costs ``num_rows - 1 - a`` merges, so each
    iteration takes a row from each end: with rows in order, numba's equal chunks gave the
    first thread three quarters of the work (1.37x faster balanced on the check's 400 NCI1
    graphs, 19.1 to 14.0 ms; 1.22x on all NCI1; the same table bit for bit)."""
    num_rows = indptr.shape[0] - 1
    out = np.zeros((num_rows, num_rows), dtype=np.float64)
    for s in prange((num_rows + 1) // 2):
        _table_rows_from_both_ends(indptr, indices, data, np.int64(s), out)
    for a in prange(num_rows):
        _mirror_row(out, a)
    return out


@njit(cache=True, nogil=True, inline="always")
def _table_rows_from_both_ends(indptr, indices, data, s, out):
    """Rows ``s`` and ``num_rows - 1 - s`` of the table, right of the diagonal."""
    num_rows = out.shape[0]
    _table_row(indptr, indices, data, s, out)
    if num_rows - 1 - s != s:
        _table_row(indptr, indices, data, num_rows - 1 - s, out)


@njit(cache=True, nogil=True, inline="always")
def _mirror_row(out, a):
    for b in range(a):
        out[a, b] = out[b, a]


@njit(cache=True, nogil=True)
def _table_part(indptr, indices, data, out, first, step):
    """The ahead-of-time engine's share of :func:`_row_distance_table` for one thread: the
    iterations ``first, first + step, ...`` of its first loop (``out`` zeroed by the caller)."""
    for s in range(first, (out.shape[0] + 1) // 2, step):
        _table_rows_from_both_ends(indptr, indices, data, s, out)


@njit(cache=True, nogil=True)
def _mirror_part(out, first, step):
    """The second loop of :func:`_row_distance_table`, rows ``first, first + step, ...``."""
    for a in range(first, out.shape[0], step):
        _mirror_row(out, a)


def _column_method(indptr: np.ndarray, indices: np.ndarray, num_columns: int) -> str:
    """``"lists"`` or ``"scattered"``, whichever the bank's rows should find their costs by.

    Scattered costs take about ``1 + 1.3 e`` ns an entry of a cost matrix, ``e`` the
    entries a row holds; inverted lists about ``4 + 4 s``, ``s`` the columns two rows
    share (fitted on DD, ENZYMES and REDDIT-BINARY problems by
    ``benchmarks/costs_without_table.py``). ``s`` is estimated for two random rows of the
    bank as ``sum_f (rows holding f / rows)^2``: 0.15 on DD (``e`` 16-35), 2.6 on
    ENZYMES d=3,k=1 (``e`` 26), 3 on REDDIT-BINARY d=2,k=0 (``e`` 3).
    """
    num_rows = len(indptr) - 1
    if num_rows == 0 or len(indices) == 0:
        return "lists"
    holding = np.bincount(indices, minlength=num_columns) / num_rows
    shared = float(np.dot(holding, holding))
    entries = len(indices) / num_rows
    return "lists" if 4 + 4 * shared < 1 + 1.3 * entries else "scattered"


def _auto_costs(indptr: np.ndarray, indices: np.ndarray, num_columns: int, table_bytes: int = TABLE_BYTES) -> str:
    """The way ``costs="auto"`` finds a bank's ground costs (see :func:`exact_distances`):
    the table if it fits ``table_bytes``, else lists or scattered by :func:`_column_method`
    up to ``BUFFER_MAX_COLUMNS`` columns, else merged."""
    num_rows = len(indptr) - 1
    if 0 < num_rows * num_rows * 8 <= table_bytes:
        return "table"
    if num_columns <= BUFFER_MAX_COLUMNS:
        return _column_method(indptr, indices, num_columns)
    return "merged"


def _num_columns(indices: np.ndarray) -> int:
    """Columns a bank's rows span: one past the highest column index (0 for no entries)."""
    return int(indices.max()) + 1 if len(indices) else 0


def _cost_buffers(indptr: np.ndarray, data: np.ndarray, costs: str, num_columns: int) -> tuple[np.ndarray, int, int]:
    """What the pairs' kernel needs beside the bank to find ground costs by ``costs`` (a
    method, not ``"auto"``): the rows' squared norms (lists and scattered), the columns of
    a thread's dense buffer (scattered) and of its list heads (lists); empty or 0 if unused."""
    by_columns = costs in ("lists", "scattered")
    squares = _row_squares_kernel(indptr, data) if by_columns else np.empty(0, dtype=np.float64)
    return squares, num_columns if costs == "scattered" else 0, num_columns if costs == "lists" else 0


def exact_distances(
    left: SupportSet,
    right: SupportSet,
    pairs: np.ndarray,
    n_jobs: int = -1,
    tile_size: int = 1 << 16,
    table_bytes: int = TABLE_BYTES,
    checkpoint: str | os.PathLike | None = None,
    progress: Callable[[int], None] | None = None,
    costs: str = "auto",
    table: np.ndarray | None = None,
    stats: dict | None = None,
) -> np.ndarray:
    """Exact W for each pair ``(i, j)``: graph ``i`` of ``left`` against graph ``j`` of ``right``.

    Compiled end to end (:mod:`mwsp_torch._simplex`), pairs spread over ``n_jobs``
    threads (:class:`_ExactWorkers`), in tiles of ``tile_size`` pairs.

    Args:
        left (SupportSet): graphs of the first index.
        right (SupportSet): graphs of the second index, sharing ``left``'s row bank.
        pairs (np.ndarray): ``[m, 2]`` pairs of graph indices.
        n_jobs (int): threads (default ``-1``: all cores).
        tile_size (int): pairs per tile, the unit of progress and checkpoints (default ``65536``).
        table_bytes (int): with ``costs="auto"``, precompute all row-to-row distances
            when that table fits in this many bytes (default 128 MiB; a larger table
            makes every lookup a cache miss, slower than recomputing).
        checkpoint (path, optional): directory keeping finished tiles; a run
            started again with the same inputs reloads them and computes only the rest.
        progress (callable, optional): called with the number of pairs done.
        costs (str): how ground costs are found (all agree to rounding): ``"table"``,
            all row-to-row distances once; per pair, ``"lists"`` (inverted lists of
            columns, :func:`_inverted_costs`), ``"scattered"`` (a dense buffer,
            :func:`_scattered_costs`) or ``"merged"`` (two sorted rows merged, how the
            table is built, so bit for bit the table's); ``"auto"`` (default): the table
            if it fits ``table_bytes``, else lists or scattered by :func:`_column_method`
            up to ``BUFFER_MAX_COLUMNS`` columns, else merged.
        table (np.ndarray, optional): the bank's row-to-row table, as
            :func:`_row_distance_table` builds it, if the caller already holds one (the
            thread engine does): with ``costs="auto"`` or ``"table"`` it is used instead
            of building another.
        stats (dict, optional): with a checkpoint, gets ``pairs_from_checkpoint``, how many of the pairs were
            read from checkpoint tiles rather than computed (so a resumed run's time is
            read as the part it computed).

    Returns:
        ``[m]`` float64 distances.
    """
    indptr, indices, data = _bank_arrays(_shared_bank(left, right))
    pairs = np.ascontiguousarray(pairs, dtype=np.int64)
    num_rows = len(indptr) - 1
    num_columns = _num_columns(indices)
    if costs not in COST_METHODS:
        raise ValueError(f"costs={costs!r}: expected one of {COST_METHODS}")
    if table is not None:
        if costs not in ("auto", "table"):
            raise ValueError(f"a table was given, but costs={costs!r}: expected 'auto' or 'table'")
        if table.shape != (num_rows, num_rows):
            raise ValueError(f"the table is {table.shape}, the bank has {num_rows} rows")
        costs = "table"
    if costs == "auto":
        costs = _auto_costs(indptr, indices, num_columns, table_bytes)
    use_table = costs == "table"
    squares, dense_columns, head_columns = _cost_buffers(indptr, data, costs, num_columns)
    store = _TileStore(checkpoint, left, right, pairs, tile_size, costs) if checkpoint is not None else None
    out = np.empty(len(pairs), dtype=np.float64)
    loaded = 0
    if table is None:
        table = np.empty((0, 0), dtype=np.float64)
    arrays = (pairs, *left.arrays(), *right.arrays(), indptr, indices, data, table, squares)
    with _ExactWorkers(n_jobs, arrays) as workers:
        for index, lo in enumerate(range(0, len(pairs), tile_size)):
            hi = min(lo + tile_size, len(pairs))
            if store is not None and store.load(index, out[lo:hi]):
                loaded += hi - lo
                if progress is not None:
                    progress(hi - lo)
                continue
            if use_table and table.shape[0] == 0:  # built once, and only if some tile needs it
                table = workers.table(indptr, indices, data)
            _tile_kernel(
                workers, pairs[lo:hi], *left.arrays(), *right.arrays(), indptr, indices, data, table, squares,
                dense_columns, head_columns, out[lo:hi],
            )  # fmt: skip
            if store is not None:
                store.save(index, out[lo:hi])
            if progress is not None:
                progress(hi - lo)
    if stats is not None and store is not None:
        stats["pairs_from_checkpoint"] = loaded
    return out


class _ExactWorkers:
    """The threads of :func:`exact_distances`: numba's, for its ``prange`` kernels, or a
    thread pool calling the ahead-of-time compiled extension (:mod:`mwsp_torch._aot`) once
    per chunk of pairs (:meth:`each_chunk`); a pair's value is the same either way."""

    def __init__(self, n_jobs: int, arrays: tuple) -> None:
        self.n_jobs = n_jobs
        extension = _aot.module()
        # ``arrays`` are the leading arguments of the pairs' entry point; the rest are scalars and ``out``.
        codes = " ".join(_aot.ENTRIES["pairs_chunks"][2].split()[: len(arrays)])
        self.extension = extension if extension is not None and _aot.conforms(codes, arrays) else None
        self.count = resolve_n_jobs(n_jobs)
        self._context = None
        self._pool = None

    def __enter__(self) -> _ExactWorkers:
        if self.extension is None:
            numba_ready()
            self._context = _numba_threads(self.n_jobs)
            self._context.__enter__()
        else:
            self._pool = ThreadPoolExecutor(max_workers=self.count, thread_name_prefix="mwsp-exact")
        return self

    def __exit__(self, *exc) -> None:
        if self._context is not None:
            self._context.__exit__(*exc)
        if self._pool is not None:
            self._pool.shutdown()

    def each_thread(self, function, *args) -> None:
        """``function(*args, t, count)`` for ``t = 0 .. count - 1``, one call per thread."""
        for _ in self._pool.map(lambda t: function(*args, t, self.count), range(self.count)):
            pass

    def each_chunk(self, function, pairs: np.ndarray, *args) -> None:
        """``function(pairs[lo:hi], *rest, out[lo:hi], 0, 1)`` (``args`` is ``*rest, out``)
        for each run ``lo:hi`` of ``PAIR_CHUNK`` consecutive pairs (fewer where the tile has
        under ``RUNS_PER_THREAD`` such runs a thread), the runs handed out one at a time to
        whichever thread asks next.

        Not a fixed share each: on this VM one core at times ran its share of a tile
        1.3-1.4x slower than the other (0.25 s against 0.35 s on 400 NCI1 graphs), and the
        tile waited for it. Consecutive pairs, not :func:`_pairs_kernel`'s interleaved
        blocks (which balance numba's fixed shares): consecutive pairs share their first
        graph, whose rows of the distance table stay in cache, 1.06x on one thread. A pair's
        value does not depend on its chunk or its thread."""
        *rest, out = args
        # Shorter runs where a tile is small (a sample of pairs), so that it still has
        # RUNS_PER_THREAD runs a thread to balance: a sorted sample's runs differ in cost.
        run = max(1, min(PAIR_CHUNK, -(-len(pairs) // (RUNS_PER_THREAD * self.count))))
        starts = itertools.count(0, run)  # next() holds the GIL: each run to one thread

        def work(_) -> None:
            for lo in starts:
                if lo >= len(pairs):
                    return
                hi = min(lo + run, len(pairs))
                function(pairs[lo:hi], *rest, out[lo:hi], 0, 1)

        for _ in self._pool.map(work, range(self.count)):
            pass

    def table(self, indptr: np.ndarray, indices: np.ndarray, data: np.ndarray) -> np.ndarray:
        """:func:`_row_distance_table`."""
        if self.extension is None:
            return _row_distance_table(indptr, indices, data)
        out = np.zeros((len(indptr) - 1, len(indptr) - 1), dtype=np.float64)
        self.each_thread(self.extension.table_part, indptr, indices, data, out)
        self.each_thread(self.extension.mirror_part, out)
        return out


def _tile_kernel(workers: _ExactWorkers, *args) -> None:
    """One tile of :func:`exact_distances` (arguments as :func:`_pairs_kernel`'s) on ``workers``."""
    if workers.extension is None:
        _pairs_kernel(*args)
    else:
        workers.each_chunk(workers.extension.pairs_chunks, *args)


def checkpoint_directory(directory) -> Path:
    """``directory`` as a ``Path``, refused unless it can hold checkpoint tiles: a non-empty
    path that is a directory or does not exist yet (it is then created)."""
    if not isinstance(directory, (str, os.PathLike)) or str(directory) == "":
        raise ValueError(f"checkpoint must be a directory path, got {directory!r}")
    path = Path(directory)
    if path.exists() and not path.is_dir():
        raise ValueError(f"checkpoint {str(directory)!r} exists and is not a directory")
    return path


class _TileStore:
    """Finished tiles on disk, keyed by a fingerprint of everything that determines them."""

    def __init__(
        self, directory, left: SupportSet, right: SupportSet, pairs: np.ndarray, tile_size: int, costs: str
    ) -> None:
        digest = hashlib.sha1()
        for array in (pairs, *left.arrays(), *right.arrays(), *_bank_arrays(left.rows)):
            digest.update(np.ascontiguousarray(array).tobytes())
        # The cost method too: the methods agree only to rounding, so tiles of two would mix.
        digest.update(f"{tile_size} {costs}".encode())
        self.directory = checkpoint_directory(directory) / digest.hexdigest()[:20]
        self.directory.mkdir(parents=True, exist_ok=True)
        # A run killed while saving leaves its temporary file (see save): drop those of dead runs.
        for stale in self.directory.glob(".tile-*.npy"):
            pid = stale.name.split(".")[2]
            if pid.isdigit() and not _process_alive(int(pid)):
                stale.unlink(missing_ok=True)

    @staticmethod
    def _checksum(values: np.ndarray) -> str:
        return hashlib.sha1(np.ascontiguousarray(values).tobytes()).hexdigest()[:16]

    def _path(self, index: int, values: np.ndarray) -> Path:
        """``tile-INDEX-CHECKSUM.npy``: the name carries the SHA-1 of the values, so damage
        that leaves a readable array (a flipped bit) is seen too."""
        return self.directory / f"tile-{index:07d}-{self._checksum(values)}.npy"

    def load(self, index: int, out: np.ndarray) -> bool:
        """Tile ``index`` into ``out``; False (it is then recomputed and saved again) if it is
        missing, or damaged by something outside this code (saves are atomic), with a warning."""
        for path in sorted(self.directory.glob(f"tile-{index:07d}-*.npy")):
            try:
                values = np.load(path)
            except Exception as err:  # a damaged header can raise SyntaxError, TokenError, ...
                warnings.warn(f"checkpoint tile {path} cannot be read ({err}); recomputing it", stacklevel=3)
                continue
            if values.shape != out.shape or values.dtype != np.float64:
                warnings.warn(
                    f"checkpoint tile {path} holds {values.dtype} {list(values.shape)}, not float64 "
                    f"{list(out.shape)}; recomputing it",
                    stacklevel=3,
                )
                continue
            if path.name != self._path(index, values).name:
                warnings.warn(
                    f"checkpoint tile {path} does not match its checksum (damaged); recomputing it", stacklevel=3
                )
                continue
            out[:] = values
            return True
        return False

    def save(self, index: int, values: np.ndarray) -> None:
        # The process and the thread name it (the stale-file sweep above reads the process).
        tmp = self.directory / f".tile-{index:07d}.{os.getpid()}.{threading.get_ident()}.npy"
        np.save(tmp, values)
        for damaged in self.directory.glob(f"tile-{index:07d}-*.npy"):  # refused by load
            damaged.unlink(missing_ok=True)
        os.replace(tmp, self._path(index, values))  # atomic: a killed run leaves no half tile


def _process_alive(pid: int) -> bool:
    """Whether process ``pid`` exists (on POSIX; elsewhere assumed alive, so nothing is removed)."""
    if os.name != "posix":
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def pot_distances(left: SupportSet, right: SupportSet, pairs: np.ndarray) -> np.ndarray:
    """Reference path: POT's network simplex (``ot.lp.emd_c``) per collapsed pair, no cancellation."""
    from ot.lp.emd_wrap import emd_c

    indptr, indices, data = _bank_arrays(_shared_bank(left, right))
    out = np.empty(len(pairs), dtype=np.float64)
    for p, (i, j) in enumerate(pairs):
        sa, wa = left.graph(i)
        sb, wb = right.graph(j)
        _, out[p], _, _, status = emd_c(wa, wb, cost_matrix(indptr, indices, data, sa, sb), 1_000_000, 1)
        if status != 1:
            raise RuntimeError(f"POT's network simplex stopped with status {status} on pair ({i}, {j})")
    return out


def _shared_bank(left: SupportSet, right: SupportSet) -> sp.csr_matrix:
    if left.rows is not right.rows:
        raise ValueError("both support sets must share one row bank")
    return left.rows


def _bank_arrays(bank: sp.csr_matrix) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """CSR arrays of a row bank in the dtypes the compiled kernels take."""
    return bank.indptr.astype(np.int64), bank.indices.astype(np.int64), bank.data.astype(np.float64)


@contextmanager
def _numba_threads(n_jobs: int):
    """numba's thread count set to ``n_jobs`` (at most ``NUMBA_NUM_THREADS``) inside the block, restored after."""
    import numba

    previous = numba.get_num_threads()
    numba.set_num_threads(min(resolve_n_jobs(n_jobs), numba.config.NUMBA_NUM_THREADS))
    try:
        yield
    finally:
        numba.set_num_threads(previous)


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
    of a batch stays small: for geomloss's backends by :func:`_padding_batches` (padding
    adds at most 56 % to a batch's cost entries; 18-46 % over all pairs of NCI1 d=2,k=0,
    PROTEINS d=2,k=0, ENZYMES d=3,k=1 and REDDIT-BINARY d=2,k=0), for the fused ones by
    shape (widths rounded up to a multiple of 4). Every backend gives
    geomloss's value (the ``fused`` one to 1e-9 relative in float64, tested).

    Args:
        left, right, pairs: as in :func:`exact_distances`.
        blur (float): geomloss ``blur``, the entropic length scale (default ``0.01``).
        scaling (float): epsilon-scaling ratio (default ``0.99``).
        device (str): torch device (default ``"cpu"``).
        batch_size (int): pairs per batch (default ``65536``); a batch whose padded
            dense points or cost matrices would exceed ``max_bytes`` (default
            512 MiB) is cut smaller.
        backend (str): ``"fused"`` (:mod:`mwsp_torch._batched_sinkhorn`: geomloss's
            loop on cost tensors gathered from one row-to-row distance table built from
            the Gram matrix (:func:`_distance_table`), on ``device``; debiasing terms once per graph; needs
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
            equal to geomloss's float64 value but within 1e-3 relative plus 1e-4 of it (tested on
            an H100 and under Triton's interpreter). On an H100, all NCI1 pairs at
            blur 0.01, scaling 0.9: 3.2x the pairs per second of float64 (4.4e6 against
            1.4e6), the same median error against exact, 1.48 % (``benchmarks/HISTORY.md``).
            The result is float64 either way.
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
    bank = _shared_bank(left, right)
    if diameter is None:
        diameter = sinkhorn_diameter(bank, blur)
    elif not is_positive_number(diameter):
        raise ValueError(f"diameter must be > 0 and finite, got {diameter!r}")
    pairs = np.asarray(pairs, dtype=np.int64).reshape(-1, 2)
    if backend in ("fused", "triton") or (backend == "auto" and _table_bytes(bank) <= max_bytes):
        triton = backend == "triton"
        return _fused_sinkhorn(
            left, right, pairs, blur, scaling, diameter, device, batch_size, max_bytes, progress, triton, dtype
        )
    width_l, width_r = np.diff(left.graph_ptr)[pairs[:, 0]], np.diff(right.graph_ptr)[pairs[:, 1]]
    losses = {}  # one geomloss object per backend used
    out = np.empty(len(pairs), dtype=np.float64)
    pending = _padding_batches(width_l, width_r, batch_size)
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


def _width_class(width: np.ndarray) -> np.ndarray:
    """``width`` rounded up to a coarse grid: exact to 8, then 4 steps an octave (a step is
    an eighth to a quarter of the width), so a class's widths are within 25 % of its top."""
    width = np.asarray(width, dtype=np.int64)
    step = np.left_shift(1, np.maximum(np.floor(np.log2(np.maximum(width - 1, 1))).astype(np.int64) - 2, 0))
    return np.where(width <= 8, width, -(-width // step) * step)


def _padding_batches(width_l: np.ndarray, width_r: np.ndarray, batch_size: int, slack: float = 1.5) -> list[np.ndarray]:
    """Pair indices in batches of at most ``batch_size`` for zero-weight padding to a batch's
    widest sides.

    Pairs are grouped by the classes of their two widths (:func:`_width_class`), the groups
    taken in class order, and consecutive groups merged into one batch while its padded
    area (pairs x widest left x widest right) stays within ``slack`` times the real one
    (the sum of ``width_l * width_r``), so that few small groups do not each cost a call.
    Sorting all pairs by their exact widths and cutting the order into batches, as before,
    padded PROTEINS d=2,k=0's cost matrices 20.5x (one batch spans many left widths,
    each with the whole range of right ones). Every index appears in exactly one batch.
    """
    width_l = np.asarray(width_l, dtype=np.int64)
    width_r = np.asarray(width_r, dtype=np.int64)
    batches: list[np.ndarray] = []
    current: list[np.ndarray] = []
    count = real = top_l = top_r = 0
    for group in _shape_buckets(_width_class(width_l), _width_class(width_r)):
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


def _table_bank(left: SupportSet, right: SupportSet, table_bytes: int, engine: str) -> sp.csr_matrix:
    """The shared row bank, if its distance table fits ``table_bytes`` (else a ValueError)."""
    bank = _shared_bank(left, right)
    rows = bank.shape[0]
    if _table_bytes(bank) > table_bytes:
        raise ValueError(
            f"the {engine} exact engine needs a {rows} x {rows} distance table, "
            f"over table_bytes={table_bytes}; for this dataset use MWSP(exact_engine='compiled') "
            "(exact_distances), which needs no such table"
        )
    return bank


def _table_bytes(bank: sp.csr_matrix) -> int:
    """Bytes of the row-to-row distance table (float64)."""
    return bank.shape[0] ** 2 * 8


#: Largest dense copy of the row bank (bytes) whose Gram matrix :func:`_distance_table` takes
#: by one dense product on a CUDA device; above it, or on a CPU, a sparse product. That
#: copy lives only while the table is built and is not counted in ``max_bytes`` or ``table_bytes``.
DENSE_GRAM_BYTES = 1 << 28


def _distance_table(bank: sp.csr_matrix, device: str, floor: float, dense_gram_bytes: int | None = None):
    """All row-to-row Euclidean distances of ``bank`` on ``device``.

    ``sqrt(max(|a|^2 + |b|^2 - 2 a.b, floor))`` from the Gram matrix ``bank bank^T``: on a
    CUDA device, when the bank's dense rows take ``dense_gram_bytes`` or fewer (default
    :data:`DENSE_GRAM_BYTES` there, 0 on a CPU), one dense product on the device; else a
    sparse product on the host (rows are never made dense: ENZYMES at d=3, k=1 has
    16,022 rows of 101,697 columns), then uploaded. On an H100 the sparse product and the
    upload of its dense result took 0.10 s of a 0.34 s Triton Sinkhorn call on 1 M NCI1
    pairs (3,280 rows of 353 columns: a 9 MB dense bank, a 86 MB table;
    ``benchmarks/HISTORY.md``). The diagonal's squared distance is set to 0 first (so it
    is ``sqrt(floor)``). The two products agree to rounding (tested).
    """
    import torch

    if dense_gram_bytes is None:
        dense_gram_bytes = DENSE_GRAM_BYTES if torch.device(device).type == "cuda" else 0
    if bank.shape[0] * bank.shape[1] * 8 <= dense_gram_bytes:
        dense = torch.from_numpy(bank.toarray()).to(device=device, dtype=torch.float64)
        gram = dense @ dense.T
    else:
        gram = torch.from_numpy((bank @ bank.T).toarray()).to(device=device, dtype=torch.float64)
    squared = gram.diagonal().clone()
    table = gram.mul_(-2.0).add_(squared[:, None]).add_(squared[None, :])
    table.fill_diagonal_(0.0)
    return table.clamp_(min=floor).sqrt_()


def _recomputed_where_cancelled(table, bank: sp.csr_matrix, chunk: int = 1 << 16):
    """``table`` (:func:`_distance_table`, floor 0) with each entry that cancellation may
    have robbed of digits computed again from the two rows' differences, in place.

    ``|a|^2 + |b|^2 - 2 a.b`` is off by at most about ``3 u (n_a |a|^2 + n_b |b|^2)``
    (``n``: a row's entries, ``u = 2^-53``), so an entry whose square is under
    ``CANCELLATION`` times that weight (as :func:`_checked_cost` tests it) is replaced by
    ``|a - b|`` from the sparse rows; the rest are within 1.7e-10 relative. Rows of the TU
    datasets are rarely that close; a hub's rows, whose counts are huge and differ little, are.
    """
    import torch

    if bank.shape[0] < 2:
        return table
    entries = np.diff(bank.indptr).astype(np.float64)
    weight = torch.from_numpy(entries * np.asarray(bank.multiply(bank).sum(axis=1)).ravel()).to(table)
    suspect = table.square() < CANCELLATION * (weight[:, None] + weight[None, :])
    suspect.fill_diagonal_(False)
    where = suspect.nonzero().cpu().numpy()
    for lo in range(0, len(where), chunk):
        a, b = where[lo : lo + chunk].T
        difference = bank[a] - bank[b]
        exact = np.sqrt(np.asarray(difference.multiply(difference).sum(axis=1)).ravel())
        table[torch.from_numpy(a).to(table.device), torch.from_numpy(b).to(table.device)] = torch.from_numpy(exact).to(
            table
        )
    return table


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


def _shape_buckets(rows: np.ndarray, cols: np.ndarray | None = None) -> list[np.ndarray]:
    """Indices grouped by equal shape ``rows`` (or ``(rows, cols)``), never an empty group;
    within a group the indices keep their order."""
    key = rows if cols is None else rows * (int(cols.max(initial=0)) + 1) + cols
    order = np.argsort(key, kind="stable")
    return [group for group in np.split(order, np.flatnonzero(np.diff(key[order])) + 1) if len(group)]


def _triton_kernels(table):
    """:mod:`mwsp_torch._triton_sinkhorn` for ``backend="triton"``: CUDA tensors, or CPU
    tensors under Triton's interpreter (``TRITON_INTERPRET=1``, as the tests run it)."""
    if not (table.is_cuda or os.environ.get("TRITON_INTERPRET") == "1"):
        raise ValueError("backend='triton' runs on CUDA tensors (or on CPU ones with TRITON_INTERPRET=1)")
    try:
        from mwsp_torch import _triton_sinkhorn
    except ImportError as error:
        raise ImportError("backend='triton' needs the triton package: pip install 'mwsp_torch[gpu]'") from error
    return _triton_sinkhorn


def _fused_sinkhorn(
    left, right, pairs, blur, scaling, diameter, device, batch_size, max_bytes, progress, triton, dtype="float64"
):
    """``sinkhorn_distances`` with the ``"fused"`` backend (:mod:`mwsp_torch._batched_sinkhorn`),
    or its Triton kernels (``triton``: :mod:`mwsp_torch._triton_sinkhorn`, see :func:`_triton_sinkhorn`)."""
    import torch

    from mwsp_torch._batched_sinkhorn import cross_terms, epsilon_schedule, self_terms

    bank = _shared_bank(left, right)
    if _table_bytes(bank) > max_bytes:
        rows = bank.shape[0]
        raise ValueError(
            f"the fused Sinkhorn backend needs a {rows} x {rows} distance table, "
            f"over max_bytes={max_bytes}; use backend='tensorized' or 'online'"
        )
    eps_list = epsilon_schedule(diameter, blur, scaling)
    table = _distance_table(bank, device, floor=1e-8)  # geomloss's p=1 cost
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
        for bucket in _shape_buckets(width):
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
        for bucket in _shape_buckets(width_l, width_r):
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

    kernels = _triton_kernels(table)
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


@njit(cache=True, parallel=True)
def _cancel_pairs(pairs, l_ptr, l_sup, l_cnt, l_size, r_ptr, r_sup, r_cnt, r_size):
    """Per pair, the rows left after cancelling shared mass (:func:`_cancel`).

    Returns ``(pos_ptr, pos_ids, pos_mass, pos_len, neg_ptr, neg_ids, neg_mass, neg_len, scale)``:
    pair ``t``'s supplies are ``pos_*[pos_ptr[t] : pos_ptr[t] + pos_len[t]]`` (likewise
    its demands), with integer masses (``count * other graph's size``); W is the
    optimal cost divided by ``scale[t] = n_G n_H``.
    """
    num = pairs.shape[0]
    pos_ptr = np.zeros(num + 1, dtype=np.int64)
    neg_ptr = np.zeros(num + 1, dtype=np.int64)
    for t in range(num):
        g, h = pairs[t, 0], pairs[t, 1]
        pos_ptr[t + 1] = pos_ptr[t] + l_ptr[g + 1] - l_ptr[g]
        neg_ptr[t + 1] = neg_ptr[t] + r_ptr[h + 1] - r_ptr[h]
    pos_ids = np.empty(pos_ptr[num], dtype=np.int64)
    pos_mass = np.empty(pos_ptr[num], dtype=np.int64)
    neg_ids = np.empty(neg_ptr[num], dtype=np.int64)
    neg_mass = np.empty(neg_ptr[num], dtype=np.int64)
    pos_len = np.zeros(num, dtype=np.int64)
    neg_len = np.zeros(num, dtype=np.int64)
    scale = np.empty(num, dtype=np.int64)
    for t in prange(num):
        sa, ca, na, sb, cb, nb = _pair_supports(
            pairs[t, 0], pairs[t, 1], l_ptr, l_sup, l_cnt, l_size, r_ptr, r_sup, r_cnt, r_size
        )
        scale[t] = na * nb
        p_lo, q_lo = pos_ptr[t], neg_ptr[t]
        pos_len[t], neg_len[t] = _cancel(
            sa,
            ca,
            na,
            sb,
            cb,
            nb,
            pos_ids[p_lo : pos_ptr[t + 1]],
            pos_mass[p_lo : pos_ptr[t + 1]],
            neg_ids[q_lo : neg_ptr[t + 1]],
            neg_mass[q_lo : neg_ptr[t + 1]],
        )
    return pos_ptr, pos_ids, pos_mass, pos_len, neg_ptr, neg_ids, neg_mass, neg_len, scale


def batched_exact_distances(
    left: SupportSet,
    right: SupportSet,
    pairs: np.ndarray,
    device: str = "cpu",
    batch_size: int = 1 << 15,
    table_bytes: int = 1 << 30,
    pad_to: int = 4,
    progress: Callable[[int], None] | None = None,
) -> np.ndarray:
    """Exact W for each pair, solved in batches on a torch device (:mod:`mwsp_torch._batched_simplex`).

    Shared mass is cancelled as in :func:`exact_distances`. What is left is padded to
    a few shapes (next multiple of ``pad_to`` above each side's size, default 4), so
    that batches are large: dummy supplies of ``N - n`` units each and dummy demands
    of ``M - m`` units each (equal totals) trade at cost 0 among themselves and at
    ``3 max(cost)`` (1 if all costs are 0) with real points: a plan moving ``F`` units
    across pays at least ``6 max F`` where keeping them apart costs at most ``max F``, so
    the optimum is the real problem's. Each padded shape is solved ``batch_size`` problems at a time.
    Ground costs come from one table of all row-to-row distances, built on ``device`` from
    the Gram matrix (:func:`_distance_table`: ``|a|^2 + |b|^2 - 2 a.b``, clamped at 0; after
    cancellation no row meets itself). That formula's rounding is about ``1e-16 |a|^2 / |a - b|^2``
    of a cost, so rows of huge counts that differ little lost digits (a review's synthetic
    10,000-node hub graph: 1.1e-8 relative in W; 90,000 nodes: 7.2e-7); the entries where
    that can pass 2e-10 are taken again from the rows' differences
    (:func:`_recomputed_where_cancelled`), as the compiled and thread engines take them. The bank's table must fit in
    ``table_bytes`` (default 1 GiB): this engine is for datasets of small graphs.
    On a CPU it is much slower than :func:`exact_distances`; it exists for GPUs and is
    tested on CPU tensors.

    Args:
        left, right, pairs, progress: as in :func:`exact_distances`.
        device (str): torch device (default ``"cpu"``).
        batch_size (int): problems per batch (default ``32768``).
        table_bytes (int): the most bytes the distance table and one batch's cost
            tensor may take; batches of large
            padded shapes are cut smaller than ``batch_size`` to fit.
        pad_to (int): granularity of the padded shapes (default ``4``).

    Returns:
        ``[m]`` float64 distances.
    """
    from mwsp_torch._batched_simplex import batched_transport_cost

    bank = _table_bank(left, right, table_bytes, "batched")
    pairs = np.ascontiguousarray(pairs, dtype=np.int64).reshape(-1, 2)
    pos_ptr, pos_ids, pos_mass, pos_len, neg_ptr, neg_ids, neg_mass, neg_len, scale = _cancel_pairs(
        pairs, *left.arrays(), *right.arrays()
    )
    table = _recomputed_where_cancelled(_distance_table(bank, device, floor=0.0), bank)
    out = np.zeros(len(pairs), dtype=np.float64)  # pairs with nothing left (same measure): 0
    # Buckets: problems with one point on a side (forced plans) by exact shape, the rest
    # padded to the next multiple of `pad_to` above their shape (at least one dummy a side).
    forced = (pos_len <= 1) | (neg_len <= 1)
    rows_to = np.where(forced, pos_len, (pos_len // pad_to + 1) * pad_to)
    cols_to = np.where(forced, neg_len, (neg_len // pad_to + 1) * pad_to)
    for bucket in _shape_buckets(rows_to, cols_to):
        big_m, big_n = int(rows_to[bucket[0]]), int(cols_to[bucket[0]])
        step = max(1, min(batch_size, table_bytes // max(1, big_m * big_n * 8)))
        for lo in range(0, len(bucket) if big_m else 0, step):
            chunk = bucket[lo : lo + step]
            supply, demand, cost = _padded_problems(
                chunk, big_m, big_n, pos_ptr, pos_ids, pos_mass, pos_len, neg_ptr, neg_ids, neg_mass, neg_len, table
            )
            out[chunk] = batched_transport_cost(supply, demand, cost).cpu().numpy() / scale[chunk]
        if progress is not None:
            progress(len(bucket))
    return out


def _padded_problems(
    chunk, big_m, big_n, pos_ptr, pos_ids, pos_mass, pos_len, neg_ptr, neg_ids, neg_mass, neg_len, table
):
    """Torch ``(supply, demand, cost)`` of the pairs ``chunk``, padded to ``big_m x big_n``."""
    import torch

    device = table.device
    m, n = pos_len[chunk], neg_len[chunk]
    real_p = np.arange(big_m)[None, :] < m[:, None]
    real_q = np.arange(big_n)[None, :] < n[:, None]
    p_at = np.where(real_p, pos_ptr[chunk][:, None] + np.arange(big_m), 0)
    q_at = np.where(real_q, neg_ptr[chunk][:, None] + np.arange(big_n), 0)
    # Dummies: each dummy supply N - n units, each dummy demand M - m units.
    # (Called only for shapes with points on both sides, so the index arrays are not empty.)
    supply = np.where(real_p, pos_mass[p_at], (big_n - n)[:, None])
    demand = np.where(real_q, neg_mass[q_at], (big_m - m)[:, None])
    p_ids = torch.from_numpy(np.where(real_p, pos_ids[p_at], 0)).to(device)
    q_ids = torch.from_numpy(np.where(real_q, neg_ids[q_at], 0)).to(device)
    cost = table[p_ids[:, :, None], q_ids[:, None, :]]
    rp = torch.from_numpy(real_p).to(device)[:, :, None]
    rq = torch.from_numpy(real_q).to(device)[:, None, :]
    real = rp & rq
    cost = torch.where(real, cost, torch.zeros_like(cost))
    # Dummy-real costs: above every real cost, and on the real costs' scale (the solver's
    # tolerance is relative to the largest cost; a +1 would swamp costs far below 1).
    largest = cost.reshape(len(chunk), -1).amax(1)
    wall = torch.where(largest > 0, 3.0 * largest, torch.ones_like(largest))
    cost = torch.where(rp ^ rq, wall[:, None, None].expand_as(cost), cost)
    return torch.from_numpy(supply).to(device), torch.from_numpy(demand).to(device), cost


def thread_exact_distances(
    left: SupportSet,
    right: SupportSet,
    pairs: np.ndarray,
    device: str = "cpu",
    chunk_size: int = 1 << 18,
    table_bytes: int = 1 << 30,
    n_jobs: int = -1,
    threads_per_block: int = 128,
    progress: Callable[[int], None] | None = None,
) -> np.ndarray:
    """Exact W for each pair, one pair per CUDA thread (:mod:`mwsp_torch._thread_simplex`).

    Each thread cancels its pair's shared mass, gathers its costs from one table of all
    row-to-row distances (built on the host by the CPU engine's own code, so the costs
    are bit for bit :func:`exact_distances`' with ``costs="table"``) and runs the
    transportation simplex on bit masks. Pairs whose two supports hold more than
    :data:`mwsp_torch._thread_simplex.MAX_NODES` points together go to
    :func:`exact_distances` on the host (``n_jobs`` threads).

    On ``cuda`` one worker thread makes every CUDA call (so one thread's device and
    context): it takes chunks of the small pairs from the front of a shared queue,
    launches the kernel on each and fetches its values before taking the next. Meanwhile
    the calling thread solves the large pairs, then takes small pairs from the back of
    the queue, a quarter chunk at a time, for :func:`exact_distances`. Each side so gets
    work at its own pace, whether or not a launch returns before its kernel ends: on an
    H100 it did not (2026-11-24, ``benchmarks/HISTORY.md``), and launching everything first
    left the host's share to run after the GPU's. The host's ``prange`` kernel lets other
    Python threads run (measured: a spinning thread kept half its pace beside it), and the
    CUDA driver bindings release the GIL in their calls (cuda-bindings 12.9.1 and later).
    Which side solves a small pair depends on timing, and the two solvers agree to about
    1e-15 relative, not bit for bit; under ``torch.use_deterministic_algorithms(True)``
    the host takes no small pairs, so a run repeats bit for bit.

    On ``device="cpu"`` the same solver runs compiled for the CPU in a ``prange`` loop,
    chunk after chunk, after the large pairs: that is how it is tested without a GPU, and
    it is slower than :func:`exact_distances`.

    Args:
        left, right, pairs, progress: as in :func:`exact_distances`.
        device (str): ``"cuda"`` (or ``"cuda:N"``) or ``"cpu"`` (default).
        chunk_size (int): pairs per kernel launch, the unit of the GPU's progress (default
            ``2**18``: the GPU's last chunk is what the host may wait for at the end). The
            host reports its large pairs at once and its share in quarter chunks.
        table_bytes (int): the most bytes the distance table may take (default 1 GiB):
            this engine is for datasets of small graphs.
        n_jobs (int): host threads for the CPU kernel and for the large pairs (default ``-1``: all).
        threads_per_block (int): CUDA threads per block (default ``128``).

    Returns:
        ``[m]`` float64 distances.
    """
    numba_ready()
    from mwsp_torch import _thread_simplex as ts

    bank = _table_bank(left, right, table_bytes, "thread")
    device = str(device)  # a torch.device too, as the other engines take
    kind = device.split(":")[0]
    if kind not in ("cpu", "cuda"):
        raise ValueError(f"device={device!r}: expected 'cpu' or 'cuda[:N]'")
    if not is_integer(chunk_size) or chunk_size < 1:
        raise ValueError(f"chunk_size must be a positive integer, got {chunk_size!r}")
    pairs = np.ascontiguousarray(pairs, dtype=np.int64).reshape(-1, 2)
    out = np.zeros(len(pairs), dtype=np.float64)
    # Cancelling only removes points, so pairs of at most MAX_NODES points before it fit.
    points = np.diff(left.graph_ptr)[pairs[:, 0]] + np.diff(right.graph_ptr)[pairs[:, 1]]
    small = np.flatnonzero(points <= ts.MAX_NODES)
    large = np.flatnonzero(points > ts.MAX_NODES)
    status = np.zeros(len(small), dtype=np.int8)
    values = np.zeros(len(small), dtype=np.float64)
    table = _row_distance_table(*_bank_arrays(bank)) if len(pairs) else None  # one, for both engines
    sets = (*left.arrays(), *right.arrays())
    chosen = np.ascontiguousarray(pairs[small])
    if kind == "cuda" and len(small):
        import torch

        # A broken numba CUDA or a device numba does not see fails here, before any work;
        # the worker thread has no current context, so it is given the caller's device.
        index = _cuda_device_index(ts.import_numba_cuda(), device)
        queue = _PairQueue(len(small))
        report = _serialized(progress)
        with ThreadPoolExecutor(max_workers=1, thread_name_prefix="mwsp-cuda") as worker:
            gpu = worker.submit(
                _thread_kernels_on_cuda, index, chosen, sets, table, queue, chunk_size, threads_per_block, values,
                status, report,
            )  # fmt: skip
            try:
                _large_pairs_on_host(left, right, pairs, large, n_jobs, table, out, report)
                while not torch.are_deterministic_algorithms_enabled() and not gpu.done():
                    span = queue.take(max(1, chunk_size // 4), from_back=True)
                    if span is None:
                        break
                    lo, hi = span
                    values[lo:hi] = exact_distances(left, right, chosen[lo:hi], n_jobs=n_jobs, table=table)
                    status[lo:hi] = ts.SOLVED
                    if report is not None:
                        report(hi - lo)
                gpu.result()
            except BaseException:
                queue.close()  # the worker stops after its current chunk
                raise
    else:
        _large_pairs_on_host(left, right, pairs, large, n_jobs, table, out, progress)
        if len(small):
            _run_thread_kernels_on_cpu(chosen, sets, table, chunk_size, n_jobs, values, status, progress)
    out[small] = values
    if np.any(status == ts.PIVOT_LIMIT):
        bad = pairs[small[np.flatnonzero(status == ts.PIVOT_LIMIT)[0]]]
        raise RuntimeError(
            f"thread_exact_distances: pivot limit reached on pair {tuple(bad)}: "
            "the basis tree or its potentials are inconsistent"
        )
    if np.any(status == ts.TOO_LARGE):  # cannot happen (see above); a guard, not a path
        raise RuntimeError("thread_exact_distances: a pair grew past MAX_NODES points")
    return out


def _run_thread_kernels_on_cpu(pairs, sets, table, chunk_size, n_jobs, values, status, progress):
    from mwsp_torch._thread_simplex import cpu_kernel

    kernel = cpu_kernel()
    with _numba_threads(n_jobs):
        for lo in range(0, len(pairs), chunk_size):
            hi = min(lo + chunk_size, len(pairs))
            kernel(pairs[lo:hi], *sets, table, values[lo:hi], status[lo:hi])
            if progress is not None:
                progress(hi - lo)


class _PairQueue:
    """Spans of ``range(total)`` handed out once each, from the front or from the back."""

    def __init__(self, total: int) -> None:
        self._lo, self._hi = 0, total
        self._lock = threading.Lock()

    def take(self, size: int, from_back: bool = False) -> tuple[int, int] | None:
        """The next ``size`` indices (fewer at the end) as ``(lo, hi)``, or None when none are left."""
        with self._lock:
            if self._lo >= self._hi:
                return None
            if from_back:
                lo = max(self._hi - size, self._lo)
                span, self._hi = (lo, self._hi), lo
            else:
                hi = min(self._lo + size, self._hi)
                span, self._lo = (self._lo, hi), hi
            return span

    def close(self) -> None:
        """Hand out nothing more."""
        with self._lock:
            self._lo = self._hi


def _serialized(progress):
    """``progress`` behind a lock (two threads report), or None."""
    if progress is None:
        return None
    lock = threading.Lock()

    def report(done: int) -> None:
        with lock:
            progress(done)

    return report


def _large_pairs_on_host(left, right, pairs, large, n_jobs, table, out, progress):
    """``out[large]``: the pairs too large for the thread engine, by :func:`exact_distances`."""
    if len(large):
        out[large] = exact_distances(left, right, pairs[large], n_jobs=n_jobs, table=table)
        if progress is not None:
            progress(len(large))


def _thread_kernels_on_cuda(index, pairs, sets, table, queue, chunk_size, threads_per_block, values, status, report):
    """The CUDA kernel on chunks of ``pairs`` taken from the front of ``queue`` until it is
    empty, each fetched into ``values`` and ``status`` (which waits for the kernel) before
    the next is taken: every CUDA call of :func:`thread_exact_distances`, in the thread that
    runs this, on CUDA device ``index``."""
    cuda, kernel, on_device = _cuda_thread_kernel(index, sets, table)
    while (span := queue.take(chunk_size)) is not None:
        lo, hi = span
        d_values, d_status = _launch_chunk(cuda, kernel, on_device, pairs[lo:hi], threads_per_block)
        d_values.copy_to_host(values[lo:hi])
        d_status.copy_to_host(status[lo:hi])
        if report is not None:
            report(hi - lo)


def _cuda_device_index(cuda, device: str) -> int:
    """The CUDA device ``device`` names: ``cuda:N``, or for ``cuda`` the calling thread's
    current one (torch's, say, after ``torch.cuda.set_device``), else 0."""
    if ":" in device:
        index = int(device.split(":")[1])
    else:
        current = cuda.gpus.current
        index = 0 if current is None else int(current.id)
    if not 0 <= index < len(cuda.gpus):
        raise ValueError(f"device={device!r}: numba sees {len(cuda.gpus)} CUDA device(s)")
    return index


def _cuda_thread_kernel(index, sets, table):
    """``numba.cuda``, the thread engine's CUDA kernel and its read-only inputs on CUDA
    device ``index``, selected for the calling thread."""
    from mwsp_torch._thread_simplex import cuda_kernel, import_numba_cuda

    cuda = import_numba_cuda()
    cuda.select_device(index)
    return cuda, cuda_kernel(), [cuda.to_device(np.ascontiguousarray(a)) for a in (*sets, table)]


def _launch_chunk(cuda, kernel, on_device, chunk, threads_per_block):
    """The kernel launched on the pairs ``chunk``; returns its ``values`` and ``status``
    device arrays (filled once the kernel ends)."""
    d_values = cuda.device_array(len(chunk), dtype=np.float64)
    d_status = cuda.device_array(len(chunk), dtype=np.int8)
    blocks = (len(chunk) + threads_per_block - 1) // threads_per_block
    kernel[blocks, threads_per_block](cuda.to_device(chunk), *on_device, d_values, d_status)
    return d_values, d_status
