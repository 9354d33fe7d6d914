"""Ground costs: Euclidean distances between the sparse feature rows of one row bank.

A distance is found from the rows' differences, not as ``|a|^2 + |b|^2 - 2 a.b`` alone:
rows of huge counts that differ little (a hub's) would lose their small distance to
cancellation. The exact engine finds a pair's costs one of four ways (``costs=`` of
:func:`~mwsp_torch.transport.exact_distances`), which agree to rounding:

- ``"table"``: all row-to-row distances once (:func:`row_distance_table`), each by
  merging two sorted rows (:func:`_row_distance`);
- ``"merged"``: the same merges per pair (:func:`merged_costs`), so bit for bit the table's;
- ``"lists"``: inverted lists of the first side's columns (:func:`inverted_costs`);
- ``"scattered"``: each row of the second side scattered into a dense buffer
  (:func:`scattered_costs`).

The last two take full squared norms less sums over shared columns and merge a pair of
rows again where that may have cost digits (:func:`_checked_cost`); :func:`auto_costs`
chooses among the four. The GPU engines and fused Sinkhorn take one table built from the
Gram matrix on a torch device (:func:`distance_table`), whose cancelled entries are
computed again the same way (:func:`recomputed_where_cancelled`).
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp
from numba import njit, prange

from mwsp_torch.compiled import kernel

__all__ = [
    "BUFFER_MAX_COLUMNS",
    "CANCELLATION",
    "COST_METHODS",
    "DENSE_GRAM_BYTES",
    "TABLE_BYTES",
    "auto_costs",
    "bank_columns",
    "column_method",
    "cost_buffers",
    "cost_matrix",
    "distance_table",
    "distance_table_bytes",
    "inverted_costs",
    "merged_costs",
    "recomputed_where_cancelled",
    "row_distance_table",
    "row_squares",
    "scattered_costs",
]


#: Ways to the ground costs of :func:`~mwsp_torch.transport.exact_distances` (``costs=``).
COST_METHODS = ("auto", "table", "lists", "scattered", "merged")

#: ``"lists"`` and ``"scattered"`` keep one buffer entry per column of the bank in each
#: thread (int32 list heads or float64 values, zeroed lazily by the system: at most
#: 128 MiB at this limit); ``"auto"`` merges rows beyond it. DD d=3,k=1 has 15.1 M
#: columns, REDDIT-BINARY d=2,k=2 6.9 M.
BUFFER_MAX_COLUMNS = 1 << 24

#: The largest row-to-row table of a bank's ground costs that ``costs="auto"`` builds
#: (128 MiB: a larger table makes every lookup a cache miss, slower than recomputing).
TABLE_BYTES = 1 << 27


@njit(cache=True, nogil=True, inline="always")
def _row_distance(indptr, indices, data, a, b):
    """``|a - b|`` for rows ``a`` and ``b`` of the bank, by merging their sorted columns."""
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
def merged_costs(indptr, indices, data, support_a, support_b, out):
    """Euclidean costs between two lists of row IDs into ``out``, each by merging two rows."""
    for p in range(support_a.shape[0]):
        for q in range(support_b.shape[0]):
            out[p, q] = _row_distance(indptr, indices, data, support_a[p], support_b[q])


@njit(cache=True, nogil=True)
def cost_matrix(indptr, indices, data, support_a, support_b):
    """Euclidean ground costs between two lists of row IDs of one CSR bank."""
    out = np.empty((support_a.shape[0], support_b.shape[0]), dtype=np.float64)
    merged_costs(indptr, indices, data, support_a, support_b, out)
    return out


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
    part in ``|a|^2 - sum_shared a_f^2``: on hub graphs W was off by up to 1e-7 relative
    without this check. Each sum of ``n`` squares is off by at most about ``n u`` of itself, so
    a square under ``CANCELLATION (n_a |a|^2 + n_b |b|^2)`` is computed again from the
    differences themselves. Rows of the TU datasets are rarely that close to each other.
    """
    n_a = indptr[a + 1] - indptr[a]
    n_b = indptr[b + 1] - indptr[b]
    if squared < CANCELLATION * (n_a * squares[a] + n_b * squares[b]):
        return _row_distance(indptr, indices, data, a, b)
    return np.sqrt(squared)


@njit(cache=True, nogil=True)
def scattered_costs(indptr, indices, data, squares, pos_ids, neg_ids, dense, cost):
    """Euclidean costs between two row lists, each row of the second scattered into ``dense``.

    ``dense`` is all zeros, as long as the bank has columns, and is left all zeros. For
    each row ``b`` of the second list, scattered, a row ``a`` of the first costs one
    lookup per entry of ``a``: ``|a - b|^2`` is ``sum_(f in a) (a_f - b_f)^2`` plus
    ``|b|^2 - sum_(f in a) b_f^2``, the mass of ``b`` outside ``a``. Both sums run in
    column order as ``squares`` did, so a ``b`` inside ``a`` leaves exactly 0 there and
    no term can go negative; a cost that cancellation may have robbed of digits is merged
    again (:func:`_checked_cost`). The way for rows that share most of their few columns
    (REDDIT-BINARY d=2,k=0: 3 columns), where :func:`inverted_costs` walks long lists.
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
def inverted_costs(indptr, indices, data, squares, pos_ids, neg_ids, head, cost):
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
    is merged again (:func:`_checked_cost`). The costs of rows that share nothing are
    filled first, a row of ``cost`` at a time (vector square roots), then overwritten
    where rows share columns. The way for rows that share few of their many columns (DD),
    where :func:`scattered_costs` looks up every entry; it agrees with the merge of two
    sorted rows (:func:`_row_distance`) to rounding, about 1e-15 relative.
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


@njit(cache=True)
def row_squares(indptr, data):
    """Each row's squared norm, summed in column order (as the scattered and listed costs sum)."""
    out = np.zeros(indptr.shape[0] - 1, dtype=np.float64)
    for a in range(out.shape[0]):
        total = 0.0
        for t in range(indptr[a], indptr[a + 1]):
            total += data[t] * data[t]
        out[a] = total
    return out


_row_squares_kernel = kernel("row_squares", "i1 f1", "float64[::1]")(row_squares)


@njit(cache=True, nogil=True)
def _table_row(indptr, indices, data, a, out):
    """Row ``a`` of the table right of its diagonal."""
    for b in range(a + 1, out.shape[0]):
        out[a, b] = _row_distance(indptr, indices, data, a, b)


@njit(cache=True, parallel=True)
def row_distance_table(indptr, indices, data):
    """All row-to-row distances, each by merging two rows (:func:`_row_distance`).

    Row ``a`` costs ``num_rows - 1 - a`` merges, so each iteration takes a row from each
    end: with rows in order, numba's equal chunks would give the first thread three
    quarters of the work."""
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
    """Row ``a`` of the table left of its diagonal, from the entries right of it."""
    for b in range(a):
        out[a, b] = out[b, a]


@njit(cache=True, nogil=True)
def _table_part(indptr, indices, data, out, first, step):
    """The ahead-of-time engine's share of :func:`row_distance_table` for one thread: the
    iterations ``first, first + step, ...`` of its first loop (``out`` zeroed by the caller)."""
    for s in range(first, (out.shape[0] + 1) // 2, step):
        _table_rows_from_both_ends(indptr, indices, data, s, out)


@njit(cache=True, nogil=True)
def _mirror_part(out, first, step):
    """The second loop of :func:`row_distance_table`, rows ``first, first + step, ...``."""
    for a in range(first, out.shape[0], step):
        _mirror_row(out, a)


# Called through the extension by the exact engine's threads (its ``table``).
kernel("table_part", "i1 i1 f1 f2 i i", "void")(_table_part)
kernel("mirror_part", "f2 i i", "void")(_mirror_part)


def column_method(indptr: np.ndarray, indices: np.ndarray, num_columns: int) -> str:
    """``"lists"`` or ``"scattered"``, whichever the bank's rows should find their costs by.

    Scattered costs take about ``1 + 1.3 e`` ns an entry of a cost matrix, ``e`` the
    entries a row holds; inverted lists about ``4 + 4 s``, ``s`` the columns two rows
    share (fitted on DD, ENZYMES and REDDIT-BINARY problems, one thread, costs alone).
    ``s`` is estimated for two random rows of the
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


def auto_costs(indptr: np.ndarray, indices: np.ndarray, num_columns: int, table_bytes: int = TABLE_BYTES) -> str:
    """The way ``costs="auto"`` finds a bank's ground costs (see
    :func:`~mwsp_torch.transport.exact_distances`):
    the table if it fits ``table_bytes``, else lists or scattered by :func:`column_method`
    up to ``BUFFER_MAX_COLUMNS`` columns, else merged."""
    num_rows = len(indptr) - 1
    if 0 < num_rows * num_rows * 8 <= table_bytes:
        return "table"
    if num_columns <= BUFFER_MAX_COLUMNS:
        return column_method(indptr, indices, num_columns)
    return "merged"


def bank_columns(indices: np.ndarray) -> int:
    """Columns a bank's rows span: one past the highest column index (0 for no entries)."""
    return int(indices.max()) + 1 if len(indices) else 0


def cost_buffers(indptr: np.ndarray, data: np.ndarray, costs: str, num_columns: int) -> tuple[np.ndarray, int, int]:
    """What the pairs' kernel needs beside the bank to find ground costs by ``costs`` (a
    method, not ``"auto"``): the rows' squared norms (lists and scattered), the columns of
    a thread's dense buffer (scattered) and of its list heads (lists); empty or 0 if unused."""
    by_columns = costs in ("lists", "scattered")
    squares = _row_squares_kernel(indptr, data) if by_columns else np.empty(0, dtype=np.float64)
    return squares, num_columns if costs == "scattered" else 0, num_columns if costs == "lists" else 0


def distance_table_bytes(bank: sp.csr_matrix) -> int:
    """Bytes of the row-to-row distance table (float64)."""
    return bank.shape[0] ** 2 * 8


#: Largest dense copy of the row bank (bytes) whose Gram matrix :func:`distance_table` takes
#: by one dense product on a CUDA device; above it, or on a CPU, a sparse product. That
#: copy lives only while the table is built and is not counted in ``max_bytes`` or ``table_bytes``.
DENSE_GRAM_BYTES = 1 << 28


def distance_table(bank: sp.csr_matrix, device: str, floor: float, dense_gram_bytes: int | None = None):
    """All row-to-row Euclidean distances of ``bank`` on ``device``.

    ``sqrt(max(|a|^2 + |b|^2 - 2 a.b, floor))`` from the Gram matrix ``bank bank^T``: on a
    CUDA device, when the bank's dense rows take ``dense_gram_bytes`` or fewer (default
    :data:`DENSE_GRAM_BYTES` there, 0 on a CPU), one dense product on the device; else a
    sparse product on the host (rows are never made dense: ENZYMES at d=3, k=1 has
    16,022 rows of 101,697 columns), then uploaded. The diagonal's squared distance is set to 0 first (so it
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


def recomputed_where_cancelled(table, bank: sp.csr_matrix, chunk: int = 1 << 16):
    """``table`` (:func:`distance_table`, floor 0) with each entry that cancellation may
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
