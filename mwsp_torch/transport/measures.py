"""Graphs as measures on one bank of feature rows, and what is left of two after cancelling.

A graph is the uniform measure on the rows ``phi(v)`` of its nodes. Identical rows are
collapsed into one support point carrying their summed mass (:func:`collapse`; the optimum
is unchanged), and rows are interned across the whole dataset (:class:`RowVocabulary`,
exact bitwise equality), so that a row two graphs share is one ID of one row bank
(:class:`SupportSet`), at ground cost exactly 0 from itself.

W1 with a metric ground cost depends only on ``a - b`` (Kantorovich-Rubinstein duality),
so mass on rows both graphs carry cancels exactly (:func:`cancel`): every exact engine
solves the smaller problem left, between disjoint point sets, in integer masses
(``count * other graph's size``), and divides its optimum by the two sizes.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp
from numba import njit

from mwsp_torch._interning import Vocabulary, intern_pair
from mwsp_torch.compiled import kernel

__all__ = [
    "RowVocabulary",
    "SupportSet",
    "bank_arrays",
    "cancel",
    "collapse",
    "pair_supports",
    "shared_bank",
    "upper_pairs",
]


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
    """Row IDs of a CSR matrix: each row's (column, value bits) pairs chained through a trie."""
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


_intern_sparse_rows_kernel = kernel(
    "intern_sparse_rows", "i1 i1 f1 i1 i1 i i1 i1 i", "Tuple((int64[::1], int64[::1], int64[::1]))"
)(_intern_sparse_rows)


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


def upper_pairs(n: int) -> np.ndarray:
    """All ``(i, j)`` with ``i < j``, as an ``[m, 2]`` array."""
    i, j = np.triu_indices(n, k=1)
    return np.stack([i, j], axis=1)


def shared_bank(left: SupportSet, right: SupportSet) -> sp.csr_matrix:
    """The row bank both support sets index (a ValueError if they index two)."""
    if left.rows is not right.rows:
        raise ValueError("both support sets must share one row bank")
    return left.rows


def bank_arrays(bank: sp.csr_matrix) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """CSR arrays of a row bank in the dtypes the compiled kernels take."""
    return bank.indptr.astype(np.int64), bank.indices.astype(np.int64), bank.data.astype(np.float64)


@njit(cache=True, nogil=True, inline="always")
def pair_supports(g, h, l_ptr, l_sup, l_cnt, l_size, r_ptr, r_sup, r_cnt, r_size):
    """``(support, counts, size)`` of graph ``g`` of the left set, then of graph ``h`` of the right."""
    lo, hi = l_ptr[g], l_ptr[g + 1]
    r_lo, r_hi = r_ptr[h], r_ptr[h + 1]
    return l_sup[lo:hi], l_cnt[lo:hi], l_size[g], r_sup[r_lo:r_hi], r_cnt[r_lo:r_hi], r_size[h]


@njit(cache=True, nogil=True, inline="always")
def cancel(sa, ca, na, sb, cb, nb, pos_ids, pos_mass, neg_ids, neg_mass):
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
