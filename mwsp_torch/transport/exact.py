"""The CPU exact engine: W for many pairs of graphs, compiled end to end, on threads.

Each pair's shared mass is cancelled (:func:`~mwsp_torch.transport.measures.cancel`), its
ground costs gathered (:mod:`mwsp_torch.transport.costs`), and the transportation problem
left solved by a compiled transportation simplex (:mod:`mwsp_torch.transport._simplex`: exact
integer flows, float64 costs). Pairs run in tiles, which can be checkpointed
(:mod:`mwsp_torch.transport.store`); within a tile, threads take runs of consecutive
pairs: a thread pool calling the ahead-of-time compiled extension (:mod:`mwsp_torch.compiled`),
or numba's ``prange`` loop on the JIT path. A pair's value depends neither on its thread
nor on the path. POT's network simplex (:func:`pot_distances`) is the reference it is
tested against (``tests/test_transport_exact.py``, 1e-9 relative).
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager

import numpy as np
from numba import njit, prange

from mwsp_torch import compiled
from mwsp_torch.compiled import kernel, numba_ready
from mwsp_torch.transport._borrow import borrowed, borrowed_run, release

# One problem, solved exactly: public here for callers (and tests) of a single transport.
from mwsp_torch.transport._simplex import cost_width, transport_cost
from mwsp_torch.transport.costs import (
    COST_METHODS,
    TABLE_BYTES,
    auto_costs,
    bank_columns,
    cost_buffers,
    cost_matrix,
    inverted_costs,
    merged_costs,
    row_distance_table,
    scattered_costs,
)
from mwsp_torch.transport.measures import SupportSet, bank_arrays, cancel, pair_supports, shared_bank
from mwsp_torch.transport.store import TileStore, stored_tiles

__all__ = [
    "COST_POOL",
    "PAIR_BLOCK",
    "PAIR_CHUNK",
    "RUNS_PER_THREAD",
    "ExactWorkers",
    "exact_distances",
    "numba_threads",
    "cost_width",
    "pot_distances",
    "resolve_n_jobs",
    "transport_cost",
]


#: Pairs per chunk of the exact kernel's parallel loop (each chunk zeroes its own column buffer).
PAIR_CHUNK = 256

#: A chunk takes its pairs in blocks of this many, every ``num_chunks``-th block of the tile.
#: numba's ``prange`` hands each thread one contiguous run of chunks (its OpenMP layer
#: ignores ``set_parallel_chunksize`` here), so contiguous chunks would leave one thread
#: with whatever heavy pairs a run of the tile held (DD's sizes are heavy-tailed).
#: Interleaved blocks give each thread a sample. (The ahead-of-time engine hands out runs
#: of consecutive pairs instead: :meth:`ExactWorkers.each_chunk`.)
PAIR_BLOCK = 8

#: Runs of pairs a thread of the ahead-of-time engine takes at least from a tile
#: (:meth:`ExactWorkers.each_chunk`), fewer pairs a run where a tile is small.
RUNS_PER_THREAD = 8

#: Cost entries of the buffer each thread of the exact kernel keeps for its pairs' cost
#: matrices (64 K float64, 512 KiB: problems to 256 x 256); larger ones are allocated per pair.
COST_POOL = 1 << 16


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
    view, :mod:`mwsp_torch.transport._borrow`) when they fit, else allocated.
    """
    n_pos, n_neg = cancel(sa, ca, na, sb, cb, nb, pos_ids, pos_mass, neg_ids, neg_mass)
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
        inverted_costs(indptr, indices, data, squares, pos_ids[:n_pos], neg_ids[:n_neg], head, cost)
    elif dense.shape[0] > 0:
        scattered_costs(indptr, indices, data, squares, pos_ids[:n_pos], neg_ids[:n_neg], dense, cost)
    else:
        merged_costs(indptr, indices, data, pos_ids[:n_pos], neg_ids[:n_neg], cost)
    if n_pos == 1 or n_neg == 1:
        total = 0.0  # a single source or sink: the plan is forced
        for p in range(n_pos):
            for q in range(n_neg):
                total += (pos_mass[p] if n_neg == 1 else neg_mass[q]) * cost[p, q]
        return total / (na * nb)
    return transport_cost(pos_mass[:n_pos], neg_mass[:n_neg], cost) / (na * nb)


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
    (:mod:`mwsp_torch.compiled`, :meth:`ExactWorkers.each_chunk`) call it for one chunk."""
    num_pairs = pairs.shape[0]
    num_blocks = (num_pairs + PAIR_BLOCK - 1) // PAIR_BLOCK
    num_chunks = (num_pairs + PAIR_CHUNK - 1) // PAIR_CHUNK
    # Every array a pair reads or writes as a borrowed view (mwsp_torch.transport._borrow): no atomic
    # reference count per slice (hundreds a pair otherwise, up to 1.5x of its time). The
    # caller holds the arguments for the whole call.
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
                sa, ca, na, sb, cb, nb = pair_supports(
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


_PAIRS_CHUNKS_CODES = "i2 i1 i1 i1 i1 i1 i1 i1 i1 i1 i1 f1 f2 f1 i i f1 i i"
_pairs_chunks_kernel = kernel("pairs_chunks", _PAIRS_CHUNKS_CODES, "void")(_pairs_chunks)


@njit(cache=True, nogil=True)
def _longest_run(ptr):
    """The most entries between consecutive offsets of ``ptr`` (0 for one offset)."""
    most = 0
    for g in range(ptr.shape[0] - 1):
        most = max(most, ptr[g + 1] - ptr[g])
    return most


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

    Compiled end to end (:mod:`mwsp_torch.transport._simplex`), pairs spread over ``n_jobs``
    threads (:class:`ExactWorkers`), in tiles of ``tile_size`` pairs.

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
            columns), ``"scattered"`` (a dense buffer) or ``"merged"`` (two sorted rows
            merged, how the table is built, so bit for bit the table's); ``"auto"``
            (default): the table if it fits ``table_bytes``, else lists or scattered by
            the bank's shape, else merged (:mod:`mwsp_torch.transport.costs`).
        table (np.ndarray, optional): the bank's row-to-row table, as
            :func:`~mwsp_torch.transport.costs.row_distance_table` builds it, if the caller
            already holds one (the thread engine does): with ``costs="auto"`` or ``"table"``
            it is used instead of building another.
        stats (dict, optional): with a checkpoint, gets ``pairs_from_checkpoint``, how many of the pairs were
            read from checkpoint tiles rather than computed (so a resumed run's time is
            read as the part it computed).

    Returns:
        ``[m]`` float64 distances.
    """
    indptr, indices, data = bank_arrays(shared_bank(left, right))
    pairs = np.ascontiguousarray(pairs, dtype=np.int64)
    num_rows = len(indptr) - 1
    num_columns = bank_columns(indices)
    if costs not in COST_METHODS:
        raise ValueError(f"costs={costs!r}: expected one of {COST_METHODS}")
    if table is not None:
        if costs not in ("auto", "table"):
            raise ValueError(f"a table was given, but costs={costs!r}: expected 'auto' or 'table'")
        if table.shape != (num_rows, num_rows):
            raise ValueError(f"the table is {table.shape}, the bank has {num_rows} rows")
        costs = "table"
    if costs == "auto":
        costs = auto_costs(indptr, indices, num_columns, table_bytes)
    use_table = costs == "table"
    squares, dense_columns, head_columns = cost_buffers(indptr, data, costs, num_columns)
    store = TileStore(checkpoint, left, right, pairs, tile_size, costs) if checkpoint is not None else None
    out = np.empty(len(pairs), dtype=np.float64)
    todo, loaded = stored_tiles(store, len(pairs), tile_size, out, progress)
    if table is None:
        table = np.empty((0, 0), dtype=np.float64)
    arrays = (pairs, *left.arrays(), *right.arrays(), indptr, indices, data, table, squares)
    with ExactWorkers(n_jobs, arrays) as workers:
        for index, lo, hi in todo:
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


class ExactWorkers:
    """The threads of :func:`exact_distances`: numba's, for its ``prange`` kernels, or a
    thread pool calling the ahead-of-time compiled extension (:mod:`mwsp_torch.compiled`) once
    per chunk of pairs (:meth:`each_chunk`); a pair's value is the same either way."""

    def __init__(self, n_jobs: int, arrays: tuple) -> None:
        self.n_jobs = n_jobs
        extension = compiled.extension()
        # ``arrays`` are the leading arguments of the pairs' entry point; the rest are scalars and ``out``.
        codes = " ".join(_pairs_chunks_kernel.codes.split()[: len(arrays)])
        self.extension = extension if extension is not None and compiled.conforms(codes, arrays) else None
        self.count = resolve_n_jobs(n_jobs)
        self._context = None
        self._pool = None

    def __enter__(self) -> ExactWorkers:
        if self.extension is None:
            numba_ready()
            self._context = numba_threads(self.n_jobs)
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

        Not a fixed share each: a core that runs slower for a while (a shared machine)
        would make the tile wait for its share. Consecutive pairs, not
        :func:`_pairs_kernel`'s interleaved blocks (which balance numba's fixed shares):
        consecutive pairs share their first graph, whose rows of the distance table stay
        in cache. A pair's value does not depend on its chunk or its thread."""
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
        """:func:`~mwsp_torch.transport.costs.row_distance_table`, on these threads."""
        if self.extension is None:
            return row_distance_table(indptr, indices, data)
        out = np.zeros((len(indptr) - 1, len(indptr) - 1), dtype=np.float64)
        self.each_thread(self.extension.table_part, indptr, indices, data, out)
        self.each_thread(self.extension.mirror_part, out)
        return out


def _tile_kernel(workers: ExactWorkers, *args) -> None:
    """One tile of :func:`exact_distances` (arguments as :func:`_pairs_kernel`'s) on ``workers``."""
    if workers.extension is None:
        _pairs_kernel(*args)
    else:
        workers.each_chunk(workers.extension.pairs_chunks, *args)


def pot_distances(left: SupportSet, right: SupportSet, pairs: np.ndarray) -> np.ndarray:
    """Reference path: POT's network simplex (``ot.lp.emd_c``) per collapsed pair, no cancellation."""
    from ot.lp.emd_wrap import emd_c

    indptr, indices, data = bank_arrays(shared_bank(left, right))
    out = np.empty(len(pairs), dtype=np.float64)
    for p, (i, j) in enumerate(pairs):
        sa, wa = left.graph(i)
        sb, wb = right.graph(j)
        _, out[p], _, _, status = emd_c(wa, wb, cost_matrix(indptr, indices, data, sa, sb), 1_000_000, 1)
        if status != 1:
            raise RuntimeError(f"POT's network simplex stopped with status {status} on pair ({i}, {j})")
    return out


@contextmanager
def numba_threads(n_jobs: int):
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
