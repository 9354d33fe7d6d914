"""The compiled exact solver against POT, the cancellation of shared rows, and resumable tiles."""

import json
import os
import re
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import ot
import pytest
import scipy.sparse as sp
from hypothesis import given, settings
from hypothesis import strategies as st
from numba.core.errors import TypingError

from mwsp_torch import MWSP, compiled, make_csl
from mwsp_torch.transport import (
    Exact,
    Sinkhorn,
    SupportSet,
    exact_distances,
    pot_distances,
    upper_pairs,
)
from mwsp_torch.transport._simd import LANES, STEP, lowest_bit, padded_first_at, padded_row_min, popcount, row_min
from mwsp_torch.transport._simplex import CLOSED, max_abs, rows_by_minimum
from mwsp_torch.transport.costs import column_method, cost_matrix, inverted_costs, row_squares, scattered_costs
from mwsp_torch.transport.exact import PAIR_BLOCK, PAIR_CHUNK, RUNS_PER_THREAD, cost_width, transport_cost
from mwsp_torch.transport.measures import bank_arrays
from mwsp_torch.transport.sinkhorn import padding_batches, width_class

from helpers import DEVICES, make_data, require_extra


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 5 * STEP + 3), st.integers(0, 3), st.integers(0, 2**32 - 1), st.booleans())
def test_vector_row_min_is_the_exact_minimum(n, extra, seed, closed):
    rng = np.random.default_rng(seed)
    # Few distinct values, so the minimum is often tied; entries past n must be ignored.
    row = rng.integers(-3, 4, size=n + extra) + rng.random(n + extra).round(1)
    offset = rng.integers(-3, 4, size=n + extra) + rng.random(n + extra).round(2)
    if closed:  # the start prices closed columns out by a -CLOSED offset
        offset[rng.random(n + extra) < 0.5] = -CLOSED
    row[n:] = -1e6
    got = row_min(row, offset, n)
    differences = row[:n] - offset[:n]
    assert got == differences.min()
    assert np.any(differences == got)  # bit for bit one of them, as the solver's scan needs


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 12), st.integers(0, 5), st.integers(0, 2**32 - 1), st.booleans())
def test_padded_row_min_is_the_exact_minimum(chunks, row, seed, closed):
    """The minimum of one padded row of a flat matrix: exact, one of the differences, and
    blind to the other rows (the solver reads row ``p`` at ``p * stride``)."""
    rng = np.random.default_rng(seed)
    width = LANES * chunks
    flat = rng.integers(-3, 4, size=6 * width) + rng.random(6 * width).round(1)
    offset = rng.integers(-3, 4, size=width) + rng.random(width).round(2)
    if closed:  # the start prices closed columns out by a -CLOSED offset
        offset[rng.random(width) < 0.5] = -CLOSED
    flat[: row * width] = -1e6  # rows before and after: must not be read
    flat[(row + 1) * width :] = -1e6
    got = padded_row_min(flat, row * width, offset, chunks)
    differences = flat[row * width : (row + 1) * width] - offset
    assert got == differences.min()
    assert np.any(differences == got)


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 10), st.integers(0, 3), st.integers(0, 2**32 - 1), st.booleans())
def test_padded_first_at_finds_the_first_column_of_a_value(chunks, pad, seed, minimum):
    """The first column whose difference equals a value taken from the row (its minimum, or
    any of its differences); ties are frequent, padding columns are never returned."""
    rng = np.random.default_rng(seed)
    width = LANES * chunks
    n = max(1, width - pad)
    flat = np.full(3 * width, -7.0)
    flat[width : 2 * width] = CLOSED
    flat[width : width + n] = rng.integers(-2, 3, size=n) + rng.random(n).round(1)
    offset = np.zeros(width)
    offset[:n] = rng.integers(-2, 3, size=n) + rng.random(n).round(1)
    differences = flat[width : width + n] - offset[:n]
    value = differences.min() if minimum else differences[rng.integers(n)]
    assert padded_first_at(flat, width, offset, chunks, n, value) == np.flatnonzero(differences == value)[0]
    # A value no column has: the guard's answer, the first column of the least difference.
    assert padded_first_at(flat, width, offset, chunks, n, 99.5) == int(np.argmin(differences))


def test_cost_width_pads_short_rows_only():
    assert [cost_width(n) for n in (1, 4, 5, 18, 39)] == [4, 4, 8, 20, 40]
    assert [cost_width(n) for n in (40, 41, 243)] == [40, 41, 243]


@settings(max_examples=300, deadline=None)
@given(st.integers(1, 2**63 - 1))
def test_bit_counts_are_exact(x):
    assert popcount(x) == bin(x).count("1")
    assert lowest_bit(x) == (x & -x).bit_length() - 1


def test_vector_row_min_refuses_what_it_cannot_read():
    row = np.arange(40.0)
    with pytest.raises(IndexError):
        row_min(row, row, 41)
    with pytest.raises(TypingError, match="_min_difference_blocks"):  # strided rows: no vector loads
        row_min(row[::2], row[::2], 20)


def _check(counts_a, counts_b, cost):
    na, nb = counts_a.sum(), counts_b.sum()
    expected = ot.emd2(counts_a / na, counts_b / nb, cost)
    cost = np.ascontiguousarray(cost)
    # Pricing blocks of one row, the default blocks, the default (all rows of small padded
    # problems), all rows always, and both basis trees (ancestor masks up to 63 points, the thread).
    full = 1 << 30
    pricing = ((1, 0), (96, 0), (96, 600), (full, full))
    for min_block_arcs, full_max in pricing:
        for mask_max_nodes in (63, 0):
            settings_ = (min_block_arcs, mask_max_nodes, full_max)
            got = transport_cost(counts_a * nb, counts_b * na, cost, *settings_) / (na * nb)
            assert abs(got - expected) <= 1e-9 * abs(expected) + 1e-14, settings_
    # Costs with room past n (as the engine allocates them, garbage there) price in place,
    # to the same pivots as a padded copy.
    m, n = cost.shape
    wide = np.full((m, cost_width(n) + 3), np.nan)
    wide[:, :n] = cost
    assert transport_cost(counts_a * nb, counts_b * na, wide) == transport_cost(counts_a * nb, counts_b * na, cost)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(-3, 3), min_size=1, max_size=90), st.sampled_from([0, 64, 1 << 30]))
def test_start_orders_rows_as_a_stable_sort(values, rank_sort_max_rows):
    # The row-minimum start takes rows by their minima, ties by index, whether it counts
    # ranks (up to RANK_SORT_MAX_ROWS rows) or sorts: both must give a stable sort's order.
    lows = np.array(values, dtype=np.float64) / 4
    rows = np.full(len(lows), -1, dtype=np.int64)
    rows_by_minimum(lows, rows, rank_sort_max_rows)
    np.testing.assert_array_equal(rows, np.argsort(lows, kind="stable"))


@settings(deadline=None)  # the first example compiles max_abs (no other test need have yet)
@given(st.lists(st.floats(-1e6, 1e6), min_size=1, max_size=70))
def test_max_abs_is_the_exact_largest_magnitude(values):
    # Vectorised under fastmath, in any order: still exactly one of the magnitudes.
    array = np.array(values, dtype=np.float64)
    assert max_abs(array, len(array)) == np.max(np.abs(array))
    assert max_abs(array, 0) == 0.0


@settings(max_examples=300, deadline=None)
@given(st.integers(1, 40), st.integers(1, 40), st.integers(0, 2**32 - 1), st.sampled_from(["random", "ties", "points"]))
def test_simplex_equals_pot(m, n, seed, kind):
    rng = np.random.default_rng(seed)
    counts_a = rng.integers(1, 4, size=m).astype(np.int64)
    counts_b = rng.integers(1, 4, size=n).astype(np.int64)
    if kind == "random":
        cost = rng.random((m, n))
    elif kind == "ties":  # massive degeneracy: few distinct costs
        cost = rng.integers(0, 3, size=(m, n)).astype(np.float64)
    else:  # Euclidean between integer points: ties and zeros, like MWSP rows
        cost = ot.dist(rng.integers(0, 3, (m, 3)).astype(float), rng.integers(0, 3, (n, 3)).astype(float), "euclidean")
    _check(counts_a, counts_b, cost)


@pytest.mark.parametrize("seed", range(12))
def test_simplex_equals_pot_on_near_ties(seed):
    # Costs on a 0.1 grid plus gaps of 1e-7: an arc whose reduced cost is -1e-7 must still
    # enter (a pricing tolerance of 1e-6 left 1e-7 relative errors, over the 1e-9 bar).
    rng = np.random.default_rng(seed)
    m, n = rng.integers(8, 30, size=2)
    cost = np.round(rng.random((m, n)), 1) + 1e-7 * rng.random((m, n))
    _check(rng.integers(1, 4, size=m).astype(np.int64), rng.integers(1, 4, size=n).astype(np.int64), cost)


@pytest.mark.parametrize("size", [28, 60, 150])
def test_simplex_equals_pot_on_larger_problems(size):
    rng = np.random.default_rng(size)
    x = rng.integers(0, 3, (size, 6)).astype(float) + 0.01 * rng.random((size, 6))
    y = rng.integers(0, 3, (size + 7, 6)).astype(float)
    _check(
        rng.integers(1, 5, size).astype(np.int64),
        rng.integers(1, 5, size + 7).astype(np.int64),
        ot.dist(x, y, "euclidean"),
    )


def test_simplex_on_identical_uniform_problem_is_zero():
    cost = ot.dist(np.eye(5), np.eye(5), "euclidean")
    assert transport_cost(np.full(5, 5, np.int64), np.full(5, 5, np.int64), cost) == 0.0


@pytest.mark.parametrize(
    ("supply", "demand", "shape", "message"),
    [
        ([3, 2], [2, 2], (2, 2), "same total"),
        ([3, 2], [6, -1], (2, 2), "demand mass must be > 0"),
        ([5, 0], [2, 3], (2, 2), "supply mass must be > 0"),
        ([], [1], (0, 1), "at least one point"),
        ([2, 2], [1, 3], (2, 1), "a column per demand point"),
        ([2, 2], [1, 3], (3, 2), "a row per supply point"),
    ],
)
def test_simplex_refuses_unbalanced_or_misshaped_problems(supply, demand, shape, message):
    # Unbalanced masses once ran the start past its arrays (a segfault, not an error).
    with pytest.raises(ValueError, match=message):
        transport_cost(np.array(supply, np.int64), np.array(demand, np.int64), np.ones(shape))


def test_compiled_engine_equals_pot_on_collapsed_pairs(mutag):
    # CSL: equal sizes; MUTAG: sizes 10 to 28 sharing rows, where cancelling shared mass
    # must weigh each side's counts by the other side's size.
    csl, _ = make_csl(graphs_per_class=2, num_nodes=13, seed=3)
    for graphs in (csl, mutag[0][:30]):
        model = MWSP(d=2, k=1).fit(graphs)
        pairs = upper_pairs(len(graphs))
        reference = pot_distances(model.support_, model.support_, pairs)
        got = model.distances_[pairs[:, 0], pairs[:, 1]]
        np.testing.assert_allclose(got, reference, rtol=1e-9, atol=1e-14)
    assert len(set(model.support_.sizes)) > 5


def _hub_supports(seed: int = 0) -> SupportSet:
    """Graphs over rows that share one huge column (a hub's count, 1e5, the same in each) and
    differ only in small unshared ones (1e-4 to 1e-3): ``|a|^2 - sum_shared a_f^2`` loses
    most or all of their digits."""
    rng = np.random.default_rng(seed)
    num_rows, num_graphs = 12, 10
    dense = np.zeros((num_rows, 1 + num_rows))
    dense[:, 0] = 1e5 + 0.25
    dense[np.arange(num_rows), 1 + np.arange(num_rows)] = 1e-4 * (1 + 9 * rng.random(num_rows))
    dense[:, 1 + rng.integers(num_rows, size=num_rows)] += 1e-3 * rng.random(num_rows)
    graph_ptr, support, counts = [0], [], []
    for _ in range(num_graphs):
        rows = np.sort(rng.choice(num_rows, size=int(rng.integers(2, 6)), replace=False))
        support += list(rows)
        counts += list(rng.integers(1, 4, size=len(rows)))
        graph_ptr.append(len(support))
    counts = np.array(counts, dtype=np.int64)
    sizes = np.add.reduceat(counts, np.array(graph_ptr[:-1]))
    return SupportSet(
        sp.csr_matrix(dense), np.array(graph_ptr, dtype=np.int64), np.array(support, dtype=np.int64), counts, sizes
    )


def _dense_emd(support: SupportSet, pairs: np.ndarray) -> np.ndarray:
    """POT on each pair's rows as dense arrays, costs from their differences (scipy's cdist)."""
    from scipy.spatial.distance import cdist

    dense = support.rows.toarray()
    out = []
    for i, j in pairs:
        (sa, wa), (sb, wb) = support.graph(i), support.graph(j)
        out.append(ot.emd2(wa, wb, cdist(dense[sa], dense[sb])))
    return np.array(out)


@pytest.mark.parametrize("costs", ["lists", "scattered", "merged", "table"])
def test_costs_of_rows_sharing_a_huge_column_keep_their_small_differences(costs):
    """A review's hub graphs put W off by 1.8e-9 and 1.1e-7 relative with lists and scattered
    costs (full squared norms less shared sums); those costs are now merged again when
    cancellation may have cost them digits."""
    support = _hub_supports()
    pairs = upper_pairs(support.num_graphs)
    expected = _dense_emd(support, pairs)
    assert np.all(expected > 0) and np.all(expected < 0.01)
    got = exact_distances(support, support, pairs, costs=costs, n_jobs=1)
    np.testing.assert_allclose(got, expected, rtol=1e-9, atol=0)


def test_interleaved_chunks_cover_every_pair(mutag):
    """Each parallel chunk takes every ``num_chunks``-th block of pairs: with several chunks,
    a partial last block and two threads, every pair gets its own distance."""
    support = MWSP(d=2, k=0).fit(mutag[0][:40]).support_
    pairs = upper_pairs(support.num_graphs)[::-1].copy()
    assert len(pairs) > 3 * PAIR_CHUNK and len(pairs) % PAIR_BLOCK
    got = exact_distances(support, support, pairs, n_jobs=2)
    one_by_one = np.concatenate([exact_distances(support, support, pairs[t : t + 1]) for t in range(len(pairs))])
    np.testing.assert_array_equal(got, one_by_one)


@pytest.mark.parametrize(
    ("num_pairs", "threads"), [(0, 2), (1, 3), (PAIR_CHUNK, 2), (7 * PAIR_CHUNK + 5, 2), (3000, 3)]
)
def test_runs_of_pairs_are_handed_out_each_once(num_pairs, threads, monkeypatch):
    """The compiled engine's threads take runs of consecutive pairs one at a time as they
    come free: each pair is in one run, passed with the matching slice of ``out`` and the
    caller's other arguments, whichever thread takes it; runs of PAIR_CHUNK pairs, shorter
    where the tile has fewer than RUNS_PER_THREAD such runs a thread."""
    from mwsp_torch.transport.exact import ExactWorkers

    pairs = np.arange(2 * num_pairs, dtype=np.int64).reshape(-1, 2)
    out = np.full(num_pairs, -1.0)
    threads_seen, lengths, lock = set(), [], threading.Lock()

    def chunk(run, middle, out_run, first, step):
        assert middle == "middle" and (first, step) == (0, 1) and len(run) == len(out_run) <= PAIR_CHUNK
        time.sleep(0.001 * (run[0, 0] % 3))  # uneven chunks, so threads interleave
        with lock:
            threads_seen.add(threading.get_ident())
            lengths.append(len(run))
        out_run[out_run != -1.0] = np.nan  # a pair written twice shows
        out_run[out_run == -1.0] = run[:, 0] / 2

    monkeypatch.setattr(compiled, "extension", lambda: None)  # no build needed: the pool alone
    workers = ExactWorkers(threads, ())
    workers.extension = object()  # the thread pool, as with the extension built
    with workers:
        workers.each_chunk(chunk, pairs, "middle", out)
    np.testing.assert_array_equal(out, np.arange(num_pairs, dtype=np.float64))
    if num_pairs:
        run = min(PAIR_CHUNK, -(-num_pairs // (RUNS_PER_THREAD * threads)))
        assert max(lengths) == run and len(lengths) == -(-num_pairs // run)
    if num_pairs > 7 * PAIR_CHUNK:
        assert len(threads_seen) > 1  # shared out, not run by one thread


def test_a_failing_chunk_is_raised_to_the_caller(monkeypatch):
    from mwsp_torch.transport.exact import ExactWorkers

    def chunk(run, out_run, first, step):
        if run[0, 0] == 3 * PAIR_CHUNK:
            raise ValueError("a run failed")

    monkeypatch.setattr(compiled, "extension", lambda: None)
    workers = ExactWorkers(2, ())
    workers.extension = object()
    pairs = np.zeros((8 * PAIR_CHUNK, 2), dtype=np.int64)
    pairs[:, 0] = np.arange(len(pairs))
    with workers, pytest.raises(ValueError, match="a run failed"):
        workers.each_chunk(chunk, pairs, np.empty(len(pairs)))


def test_without_distance_table_gives_the_same():
    graphs, _ = make_csl(graphs_per_class=2, num_nodes=11)
    model = MWSP(d=2, k=1).fit(graphs)
    pairs = upper_pairs(len(graphs))
    with_table = model.distances_[pairs[:, 0], pairs[:, 1]]
    # Merging sorted rows is how the table is built: the same costs, bit for bit.
    merged = exact_distances(model.support_, model.support_, pairs, costs="merged")
    np.testing.assert_array_equal(merged, with_table)
    reference = pot_distances(model.support_, model.support_, pairs)
    # Lists and scattered rows sum in other orders: equal to rounding, and to POT.
    for costs in ("lists", "scattered"):
        got = exact_distances(model.support_, model.support_, pairs, costs=costs)
        np.testing.assert_allclose(got, with_table, rtol=1e-12, atol=0)
        assert np.all(got[with_table == 0] == 0)
        np.testing.assert_allclose(got, reference, rtol=1e-9, atol=1e-14)
    with pytest.raises(ValueError, match="costs='dense'"):
        exact_distances(model.support_, model.support_, pairs, costs="dense")


def test_column_method_follows_shared_columns():
    # Rows on disjoint columns (DD-like) share none: inverted lists.
    disjoint = sp.csr_matrix(np.kron(np.eye(50), np.ones((1, 8))))
    assert column_method(*bank_arrays(disjoint)[:2], disjoint.shape[1]) == "lists"
    # Rows on the same three columns (REDDIT-BINARY d=2,k=0) share them all: scattered.
    crowded = sp.csr_matrix(np.arange(1, 151, dtype=float).reshape(50, 3))
    assert column_method(*bank_arrays(crowded)[:2], crowded.shape[1]) == "scattered"


@settings(max_examples=40, deadline=None)
@given(st.integers(0, 2**32 - 1))
def test_listed_and_scattered_costs_equal_merged_costs(seed):
    """Sparse rows with shared, disjoint and nested supports (values with rounding)."""
    rng = np.random.default_rng(seed)
    num_rows, num_columns = 12, 9
    dense_rows = rng.integers(0, 4, size=(num_rows, num_columns)) / rng.integers(1, 7, size=(num_rows, 1))
    dense_rows[rng.random(size=dense_rows.shape) < 0.5] = 0.0
    dense_rows[1] = dense_rows[0] * (rng.random(num_columns) < 0.5)  # a row inside another
    bank = sp.csr_matrix(dense_rows)
    indptr, indices, data = bank_arrays(bank)
    ids = np.arange(num_rows, dtype=np.int64)
    merged = cost_matrix(indptr, indices, data, ids, ids)
    squares = row_squares(indptr, data)
    listed = np.empty((num_rows, num_rows))
    head = np.zeros(num_columns, dtype=np.int32)
    inverted_costs(indptr, indices, data, squares, ids, ids, head, listed)
    np.testing.assert_allclose(listed, merged, rtol=1e-12, atol=1e-15)
    assert np.all(np.diag(listed) == 0) and np.all(head == 0)
    exact = np.sqrt(((dense_rows[:, None, :] - dense_rows[None, :, :]) ** 2).sum(-1))
    np.testing.assert_allclose(listed, exact, rtol=1e-12, atol=1e-15)
    # Uneven lists: the first side a prefix, the second reversed (every row against every row).
    uneven = np.empty((5, num_rows))
    inverted_costs(indptr, indices, data, squares, ids[:5], ids[::-1].copy(), head, uneven)
    np.testing.assert_allclose(uneven, exact[:5, ::-1], rtol=1e-12, atol=1e-15)
    assert np.all(head == 0)
    scattered = np.empty((num_rows, num_rows))
    buffer = np.zeros(num_columns)
    scattered_costs(indptr, indices, data, squares, ids, ids, buffer, scattered)
    np.testing.assert_allclose(scattered, merged, rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(scattered, exact, rtol=1e-12, atol=1e-15)
    assert np.all(np.diag(scattered) == 0) and np.all(buffer == 0)


def _checkpointed(directory, graphs_per_class: int, num_nodes: int, d: int, k: int):
    """A CSL dataset's all-pairs W computed into a checkpoint of 50-pair tiles, and a
    function that computes it again from that checkpoint."""
    graphs, _ = make_csl(graphs_per_class=graphs_per_class, num_nodes=num_nodes)
    support = MWSP(d=d, k=k).fit(graphs).support_
    pairs = upper_pairs(len(graphs))

    def run():
        return exact_distances(support, support, pairs, tile_size=50, checkpoint=directory)

    full = run()
    np.testing.assert_array_equal(full, exact_distances(support, support, pairs, tile_size=50))  # no checkpoint
    return pairs, full, run


def test_checkpoint_resume_recomputes_only_missing_tiles(tmp_path, kernel_calls):
    pairs, full, resume = _checkpointed(tmp_path, 3, 15, d=3, k=1)
    tiles = sorted(tmp_path.rglob("tile-*.npy"))
    assert len(tiles) == -(-len(pairs) // 50)
    # A killed run: some tiles never written, one corrupted mid-way is impossible (atomic rename).
    for tile in tiles[1::2]:
        tile.unlink()
    kernel_calls.clear()
    assert np.array_equal(resume(), full)
    assert len(kernel_calls) == len(tiles[1::2])


def test_checkpoint_drops_temporary_tiles_of_dead_runs(tmp_path):
    _, full, resume = _checkpointed(tmp_path, 2, 11, d=2, k=0)
    (directory,) = [p for p in tmp_path.iterdir() if p.is_dir()]
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    left_by_dead = directory / f".tile-0000000.{dead.pid}.npy"  # killed while saving
    left_by_live = directory / f".tile-0000001.{os.getpid()}.npy"  # still saving
    for path in (left_by_dead, left_by_live):
        np.save(path, np.zeros(3))
    np.testing.assert_array_equal(resume(), full)
    assert not left_by_dead.exists() and left_by_live.exists()


def test_checkpoint_is_keyed_by_inputs(tmp_path):
    graphs, _ = make_csl(graphs_per_class=2, num_nodes=11)
    a = MWSP(d=1, k=0, checkpoint=str(tmp_path)).fit(graphs).distances_
    b = MWSP(d=3, k=1, checkpoint=str(tmp_path)).fit(graphs).distances_
    assert not np.array_equal(a, b)
    np.testing.assert_array_equal(a, MWSP(d=1, k=0).fit(graphs).distances_)  # as without a checkpoint
    np.testing.assert_array_equal(b, MWSP(d=3, k=1).fit(graphs).distances_)
    assert len([p for p in tmp_path.iterdir() if p.is_dir()]) == 2
    again = MWSP(d=3, k=1, checkpoint=str(tmp_path)).fit(graphs)
    np.testing.assert_array_equal(again.distances_, b)
    assert again.timings_["pairs_from_checkpoint"] == again.timings_["pairs"] > 0  # all read, none computed


def test_checkpoint_is_keyed_by_the_cost_method(tmp_path):
    """The cost methods agree only to rounding, so one method's tiles must not serve another's."""
    graphs, _ = make_csl(graphs_per_class=2, num_nodes=11)
    support = MWSP(d=2, k=1).fit(graphs).support_
    pairs = upper_pairs(len(graphs))
    for costs in ("table", "lists", "scattered"):
        expected = exact_distances(support, support, pairs, tile_size=50, costs=costs)
        got = exact_distances(support, support, pairs, tile_size=50, costs=costs, checkpoint=tmp_path)
        np.testing.assert_array_equal(got, expected)
    assert len([p for p in tmp_path.iterdir() if p.is_dir()]) == 3


def test_checkpoint_temporary_tiles_are_named_by_process_and_thread(tmp_path, monkeypatch):
    """Two threads of one process saving the same tile must not share a temporary file."""
    saved = []
    real_save = np.save

    def recording(path, values):
        saved.append(Path(path).name)
        real_save(path, values)

    monkeypatch.setattr(np, "save", recording)
    graphs, _ = make_csl(graphs_per_class=1, num_nodes=11)
    support = MWSP(d=2, k=0).fit(graphs).support_
    exact_distances(support, support, upper_pairs(len(graphs)), tile_size=50, checkpoint=tmp_path)
    assert saved and all(
        re.fullmatch(rf"\.tile-\d{{7}}\.{os.getpid()}\.{threading.get_ident()}\.npy", name) for name in saved
    )


def test_checkpoint_is_keyed_by_both_sides_and_the_pairs(tmp_path):
    graphs, _ = make_csl(graphs_per_class=2, num_nodes=11)
    support = MWSP(d=2, k=0).fit(graphs).support_
    pairs = np.array([[0, 0], [1, 1], [2, 0]])
    for right, rows in (
        (support.take([0, 1]), pairs),
        (support.take([2, 3]), pairs),
        (support.take([2, 3]), pairs[:2]),
    ):
        expected = exact_distances(support, right, rows, tile_size=2)
        np.testing.assert_array_equal(exact_distances(support, right, rows, tile_size=2, checkpoint=tmp_path), expected)
    assert len([p for p in tmp_path.iterdir() if p.is_dir()]) == 3


def _sinkhorn_case():
    """Seven small graphs of several sizes (two identical), their support set and pairs in reverse order."""
    rng = np.random.default_rng(4)
    graphs = []
    for size in (5, 9, 6, 12, 7, 9):
        edges = [(i, i + 1) for i in range(size - 1)] + [tuple(rng.choice(size, 2, replace=False)) for _ in range(3)]
        graphs.append(make_data(size, edges, rng.integers(0, 3, size)))
    graphs.append(graphs[1])  # a pair at distance 0 (a zero-diameter batch of one)
    support = MWSP(d=2, k=1).fit(graphs).support_
    return support, upper_pairs(support.num_graphs)[::-1].copy()  # not in size order


@settings(max_examples=200, deadline=None)
@given(
    widths=st.lists(st.tuples(st.integers(1, 3000), st.integers(1, 3000)), min_size=1, max_size=300),
    batch_size=st.integers(1, 64),
)
def test_padding_batches_cover_once_and_pad_little(widths, batch_size):
    """Every pair in exactly one batch of at most ``batch_size``; padding every pair of a batch
    to its widest sides costs at most 1.25**2 times the real area (a width class spans 20 %)."""
    width_l, width_r = np.array(widths).T
    batches = padding_batches(width_l, width_r, batch_size)
    np.testing.assert_array_equal(np.sort(np.concatenate(batches)), np.arange(len(widths)))
    for at in batches:
        assert 1 <= len(at) <= batch_size
        padded = len(at) * width_l[at].max() * width_r[at].max()
        assert padded <= 1.25**2 * (width_l[at] * width_r[at]).sum()


def test_width_classes_and_merged_groups():
    width = np.arange(1, 5000)
    top = width_class(width)
    np.testing.assert_array_equal(top[:8], width[:8])  # exact up to 8
    assert np.all(top >= width) and np.all(np.diff(top) >= 0) and np.all(top <= 1.25 * width)
    assert len(np.unique(top)) <= 8 + 4 * 12  # 4 classes an octave above 8
    # Small groups of nearby widths share one call; far apart widths do not.
    assert len(padding_batches(np.array([20, 20, 21, 22]), np.array([9, 10, 10, 9]), 64)) == 1
    assert len(padding_batches(np.array([20, 300]), np.array([20, 20]), 64)) == 2


def test_sinkhorn_online_takes_one_point_sides_in_a_batch():
    """pykeops' reduction over a side of one point, in a batch of several pairs, failed inside
    geomloss; such sides are now padded with a zero-weight point, which changes nothing."""
    require_extra("pykeops", "keops")
    single = [make_data(1, [], [label]) for label in range(3)]  # one point a graph
    pair = make_data(2, [(0, 1)], [3, 3])  # two nodes, one row: one point
    wider = make_data(3, [(0, 1), (1, 2)], [0, 1, 2])  # three points against one
    graphs = [*single, pair, wider]
    options = dict(blur=0.05, scaling=0.9)
    online = MWSP(solver=Sinkhorn(backend="online", **options)).fit(graphs).distances_
    tensorized = MWSP(solver=Sinkhorn(backend="tensorized", **options)).fit(graphs).distances_
    np.testing.assert_allclose(online, tensorized, rtol=0, atol=2e-4)  # KeOps' smoothing, as below
    assert online[0, 1] > 0.1 and online[0, 4] > 0.1


def test_triton_sinkhorn_off_cuda_is_refused_before_the_features(monkeypatch):
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)

    def features(*args, **kwargs):
        raise AssertionError("the features were computed before the backend was checked")

    monkeypatch.setattr(MWSP, "_features", features)
    graphs = [make_data(2, [(0, 1)], [0, 1]), make_data(2, [(0, 1)], [0, 0])]
    with pytest.raises(ValueError, match=r"backend 'triton' runs on a CUDA device, not device='cpu'"):
        MWSP(solver=Sinkhorn(backend="triton")).fit(graphs)


def test_thread_engine_takes_a_torch_device():
    import torch

    graphs = [make_data(3, [(0, 1), (1, 2)], [0, 1, 0]), make_data(2, [(0, 1)], [1, 1]), make_data(1, [], [2])]
    compiled = MWSP().fit(graphs).distances_
    thread = MWSP(solver=Exact(engine="thread"), device=torch.device("cpu")).fit(graphs).distances_
    np.testing.assert_allclose(thread, compiled, rtol=1e-12, atol=0)


@pytest.mark.parametrize("device", DEVICES)
def test_sinkhorn_online_equals_tensorized(device):
    from mwsp_torch.transport import sinkhorn_distances

    support, pairs = _sinkhorn_case()
    options = dict(blur=0.05, scaling=0.9, device=device, batch_size=4)
    tensorized = sinkhorn_distances(support, support, pairs, backend="tensorized", **options)
    online = sinkhorn_distances(support, support, pairs, backend="online", **options)
    # KeOps's p=1 cost is smoothed at zero distance: measured here, online is 1.0e-4 above tensorized.
    np.testing.assert_allclose(online, tensorized, rtol=0, atol=2e-4)
    assert np.abs(online - tensorized).max() > 0  # the online backend really ran (KeOps, not torch)


@pytest.mark.parametrize("device", DEVICES)
def test_sinkhorn_buckets_and_backends_agree(device):
    """Size buckets reorder pairs internally: results must come back in the caller's order,
    equal to one-pair-at-a-time; the fused backend must give geomloss's value (1e-9) and
    geomloss's tensorized one."""
    from mwsp_torch.transport import sinkhorn_distances

    support, pairs = _sinkhorn_case()
    options = dict(blur=0.05, scaling=0.9, device=device)
    tensorized = sinkhorn_distances(support, support, pairs, batch_size=4, backend="tensorized", **options)
    one_by_one = np.array(
        [
            sinkhorn_distances(support, support, pairs[t : t + 1], backend="tensorized", **options)[0]
            for t in range(len(pairs))
        ]
    )
    np.testing.assert_allclose(tensorized, one_by_one, rtol=1e-12, atol=1e-14)  # padding weighs nothing (2e-16)
    fused = sinkhorn_distances(support, support, pairs, batch_size=4, backend="fused", **options)
    np.testing.assert_allclose(fused, tensorized, rtol=1e-9, atol=1e-12)
    # Batches of one pair and of all pairs give the same values.
    whole = sinkhorn_distances(support, support, pairs, backend="fused", **options)
    np.testing.assert_allclose(whole, fused, rtol=1e-12, atol=1e-15)
    np.testing.assert_array_equal(sinkhorn_distances(support, support, pairs, **options), whole)  # auto: fused
    exact = exact_distances(support, support, pairs)
    assert np.all(np.abs(fused - exact) <= 0.05 * exact + 1e-3)  # an approximation of W, not garbage
    with pytest.raises(ValueError, match="backend must be one of"):
        sinkhorn_distances(support, support, pairs, backend="keops")
    with pytest.raises(ValueError, match="use backend='tensorized' or 'online'"):
        sinkhorn_distances(support, support, pairs, backend="fused", max_bytes=64)
    if device == "cpu":
        with pytest.raises(ValueError, match="runs on CUDA tensors"):
            sinkhorn_distances(support, support, pairs, backend="triton", **options)


@pytest.mark.parametrize("device", DEVICES)
def test_fused_sinkhorn_equals_geomloss_on_mutag(mutag, device):
    """On real MWSP rows, both blurs ends of the range: the fused loop is geomloss's."""
    from mwsp_torch.transport import sinkhorn_distances

    support = MWSP(d=3, k=1).fit(mutag[0][:25]).support_
    pairs = upper_pairs(support.num_graphs)
    for blur, scaling in ((0.1, 0.9), (0.005, 0.95)):
        options = dict(blur=blur, scaling=scaling, device=device)
        expected = sinkhorn_distances(support, support, pairs, backend="tensorized", **options)
        got = sinkhorn_distances(support, support, pairs, backend="fused", **options)
        np.testing.assert_allclose(got, expected, rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dense_gram_bytes", [0, 1 << 40])
def test_distance_table_by_dense_or_sparse_product(mutag, device, dense_gram_bytes):
    """The row-to-row table of the fused and Triton Sinkhorn backends, from a sparse product
    on the host or a dense one on the device (CUDA's default for small banks): both equal
    the distances of the dense rows, and the floor and zero diagonal hold."""
    from scipy.spatial.distance import cdist

    from mwsp_torch.transport.costs import distance_table

    bank = MWSP(d=3, k=1).fit(mutag[0][:40]).support_.rows
    dense = bank.toarray()
    expected = cdist(dense, dense)
    for floor in (0.0, 1e-8):
        table = distance_table(bank, device, floor, dense_gram_bytes=dense_gram_bytes).cpu().numpy()
        assert table.shape == expected.shape and table.dtype == np.float64
        np.testing.assert_allclose(table, np.sqrt(np.maximum(expected**2, floor)), rtol=1e-12, atol=0)
        assert np.all(np.diag(table) == np.sqrt(floor))
    # The default: the dense product on CUDA, the sparse one on a CPU.
    table = distance_table(bank, device, 0.0).cpu().numpy()
    np.testing.assert_allclose(table, expected, rtol=1e-12, atol=0)


@pytest.mark.slow  # 30 s of Triton's interpreter in a child process
def test_triton_kernels_under_interpreter(fixture_root, tmp_path):
    """The ``triton`` Sinkhorn backend's CUDA kernels run on CPU tensors by Triton's
    interpreter, in a subprocess (``TRITON_INTERPRET`` must be set before Triton is
    imported): equal to the torch loop and to geomloss to 1e-9, widths below and above
    powers of 2, an empty support, the debiasing terms subtracted in the kernel; float32
    (opt-in) near float64. CI installs Triton (the gpu extra), so CI runs this."""
    require_extra("triton", "gpu")
    script = Path(__file__).parent / "triton_interpreted.py"
    env = {**os.environ, "TRITON_INTERPRET": "1", "KEOPS_VERBOSE": "0"}
    run = subprocess.run(
        [sys.executable, str(script), str(fixture_root), str(tmp_path)], env=env, capture_output=True, text=True
    )
    assert run.returncode == 0, run.stderr[-3000:]
    worst = json.loads([line for line in run.stdout.splitlines() if line.startswith("{")][-1])
    assert set(worst) == {"cross", "self", "debiased", "mutag_vs_geomloss", "float32_vs_float64"}
    single = worst.pop("float32_vs_float64")
    assert max(worst.values()) <= 1e-9, worst
    assert single <= 1e-4, single


@pytest.mark.skipif("cuda" not in DEVICES, reason="needs a CUDA device")
def test_triton_sinkhorn_on_cuda(mutag):
    """The compiled Triton kernels on a GPU: the torch loop's (and geomloss's) value to 1e-9 in
    float64, the opt-in float32 near it; pairs in the caller's order, whatever their tile shape."""
    require_extra("triton", "gpu")
    from mwsp_torch.transport import sinkhorn_distances

    support = MWSP(d=3, k=1).fit(mutag[0][:60]).support_
    pairs = upper_pairs(support.num_graphs)[::-1]
    other = support.take(np.arange(support.num_graphs)[::-1])  # not the same object: two sets of halves
    for blur, scaling in ((0.1, 0.9), (0.005, 0.95)):
        options = dict(blur=blur, scaling=scaling, device="cuda")
        expected = sinkhorn_distances(support, support, pairs, backend="fused", **options)
        got = sinkhorn_distances(support, support, pairs, backend="triton", **options)
        np.testing.assert_allclose(got, expected, rtol=1e-9, atol=1e-12)
        flipped_pairs = pairs * [1, -1] + [0, support.num_graphs - 1]  # (i, j) -> (i, G - 1 - j)
        flipped = sinkhorn_distances(support, other, flipped_pairs, backend="triton", **options)
        np.testing.assert_allclose(flipped, expected, rtol=1e-9, atol=1e-12)
        single = sinkhorn_distances(support, support, pairs, backend="triton", dtype="float32", **options)
        assert np.all(np.abs(single - expected) <= 1e-3 * expected + 1e-4)
    with pytest.raises(ValueError, match="dtype must be"):
        sinkhorn_distances(support, support, pairs, backend="fused", dtype="float32")


_DD_PAIR = """
import sys
import threading
import numpy as np
from mwsp_torch import MWSP, load_tudataset
from mwsp_torch.transport import exact_distances, pot_distances

graphs, _ = load_tudataset("DD", root=sys.argv[1], cache_dir=sys.argv[2])
support = MWSP(d=2, k=1).fit([graphs[5], graphs[21]]).support_
pairs = np.array([[0, 1]])
got, reference = exact_distances(support, support, pairs)[0], pot_distances(support, support, pairs)[0]
assert abs(got - reference) <= 1e-9 * reference, (got, reference)
"""


@pytest.mark.tudata("DD")  # graph 5 alone has 4,152 nodes (300 KB of raw files)
def test_solver_ends_where_rounding_outgrows_the_cost_tolerance(tu_root, cache_dir):
    """DD graphs 5 and 21 (4,142 x 696 points at d=2,k=1): with a pricing threshold relative
    to the costs alone, potentials drifted to ~1,757 and an arc of reduced cost 0 kept
    entering on rounding noise, forever. It now ends (0.3 s here) and equals POT; a child
    process with a time limit turns a relapse into a failure instead of a hung test run."""
    done = subprocess.run(
        [sys.executable, "-c", _DD_PAIR, str(tu_root), str(cache_dir)], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-2000:]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize(("d", "k"), [(2, 0), (3, 1)])
def test_thread_engine_equals_compiled_engine(mutag, d, k, device):
    """One pair per thread (cancelling, costs from the table, the bit-mask simplex): the
    compiled engine's W, on MUTAG's first 60 graphs, fit and cross distances."""
    from mwsp_torch.transport import thread_exact_distances

    graphs = mutag[0][:60]
    model = MWSP(d=d, k=k).fit(graphs)
    pairs = upper_pairs(len(graphs))
    got = thread_exact_distances(model.support_, model.support_, pairs, device=device, chunk_size=500)
    np.testing.assert_allclose(got, model.distances_[pairs[:, 0], pairs[:, 1]], rtol=1e-12, atol=1e-15)
    thread = MWSP(d=d, k=k, solver=Exact(engine="thread"), device=device).fit(graphs[:40])
    np.testing.assert_allclose(thread.distances_, model.distances_[:40, :40], rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(
        thread.cross_distances(graphs[40:]), model.cross_distances(graphs[40:])[:, :40], rtol=1e-12, atol=1e-15
    )


def _random_graphs(seed, count, low, high, num_labels):
    rng = np.random.default_rng(seed)
    graphs = []
    for _ in range(count):
        n = int(rng.integers(low, high + 1))
        edges = [(u, u + 1) for u in range(n - 1)] + [tuple(rng.choice(n, 2, replace=False)) for _ in range(n // 2)]
        graphs.append(make_data(n, edges, rng.integers(0, num_labels, n).tolist()))
    return graphs


def test_thread_engine_hands_large_problems_to_the_compiled_engine(monkeypatch):
    """Pairs left with more than 63 points go to ``exact_distances``, the rest are solved by
    the thread kernel, and together they give the compiled engine's W."""
    import mwsp_torch.transport.gpu as transport
    from mwsp_torch.transport._thread_simplex import MAX_NODES

    graphs = _random_graphs(0, 16, 12, 60, 6)
    model = MWSP(d=3, k=1).fit(graphs)
    pairs = upper_pairs(len(graphs))
    handed = []
    compiled = transport.exact_distances

    def counting(left, right, chosen, **kwargs):
        handed.append(np.array(chosen))
        return compiled(left, right, chosen, **kwargs)

    monkeypatch.setattr(transport, "exact_distances", counting)
    got = transport.thread_exact_distances(model.support_, model.support_, pairs, chunk_size=7)
    np.testing.assert_allclose(got, model.distances_[pairs[:, 0], pairs[:, 1]], rtol=1e-12, atol=1e-15)
    assert len(handed) == 1
    sizes = np.diff(model.support_.graph_ptr)
    large = sizes[handed[0][:, 0]] + sizes[handed[0][:, 1]]
    assert 0 < len(handed[0]) < len(pairs) and np.all(large > MAX_NODES)
    # Called on every pair, the kernel itself refuses (flags) what would overflow its arrays.
    from mwsp_torch.transport._thread_simplex import SOLVED, TOO_LARGE, cpu_kernel
    from mwsp_torch.transport.costs import row_distance_table

    values = np.zeros(len(pairs))
    status = np.zeros(len(pairs), dtype=np.int8)
    table = row_distance_table(*bank_arrays(model.support_.rows))
    cpu_kernel()(pairs, *model.support_.arrays(), *model.support_.arrays(), table, values, status)
    assert np.any(status == TOO_LARGE) and np.all((status == TOO_LARGE) <= (sizes[pairs].sum(1) > MAX_NODES))
    solved = status == SOLVED
    np.testing.assert_allclose(values[solved], got[solved], rtol=1e-12, atol=1e-15)
    assert np.all(np.isin(status, [SOLVED, TOO_LARGE]))


@pytest.mark.parametrize("broken", ["missing", "numpy_mismatch"])
def test_thread_engine_names_why_numba_cuda_cannot_be_imported(monkeypatch, broken):
    """On the GPU image of 2026-11-24 ``import numba.cuda`` raised ``AttributeError`` (numba-cuda
    against numpy 2.5, which dropped ``row_stack``) from deep inside numba. The thread engine
    on ``cuda`` now says what failed and what to do, before it builds any kernel."""
    import importlib
    import sys

    import mwsp_torch.transport._thread_simplex as thread_simplex
    from mwsp_torch.transport import thread_exact_distances

    if broken == "missing":
        monkeypatch.setitem(sys.modules, "numba.cuda", None)  # import numba.cuda raises ImportError
    else:
        real = importlib.import_module

        def import_module(name, package=None):
            if name == "numba.cuda":
                raise AttributeError("module 'numpy' has no attribute 'row_stack'")
            return real(name, package)

        monkeypatch.setattr(importlib, "import_module", import_module)
    monkeypatch.setattr(thread_simplex, "_KERNELS", {})
    graphs, _ = make_csl(graphs_per_class=2, num_nodes=11)
    model = MWSP(d=2, k=1).fit(graphs)
    pairs = upper_pairs(len(graphs))
    expected = "needs numba.cuda, which failed to import" + (".*row_stack" if broken == "numpy_mismatch" else "")
    with pytest.raises(RuntimeError, match=expected):
        thread_exact_distances(model.support_, model.support_, pairs, device="cuda")


def test_thread_engine_refuses_bad_input():
    from mwsp_torch.transport import thread_exact_distances

    graphs, _ = make_csl(graphs_per_class=2, num_nodes=11)
    model = MWSP(d=2, k=1).fit(graphs)
    pairs = upper_pairs(len(graphs))
    with pytest.raises(ValueError, match=r"use MWSP\(exact_engine='compiled'\) \(exact_distances\)"):
        thread_exact_distances(model.support_, model.support_, pairs, table_bytes=8)
    with pytest.raises(ValueError, match="expected 'cpu' or 'cuda"):
        thread_exact_distances(model.support_, model.support_, pairs, device="mps")
    with pytest.raises(ValueError, match="checkpoint is only kept"):
        MWSP(solver=Exact(engine="thread"), checkpoint="somewhere").fit(graphs)
    assert len(thread_exact_distances(model.support_, model.support_, pairs[:0])) == 0
    rows = model.support_.rows.shape[0]
    with pytest.raises(ValueError, match="a table was given, but costs='merged'"):
        exact_distances(model.support_, model.support_, pairs, costs="merged", table=np.zeros((rows, rows)))
    with pytest.raises(ValueError, match=f"the bank has {rows} rows"):
        exact_distances(model.support_, model.support_, pairs, table=np.zeros((rows + 1, rows + 1)))


SIMULATED = """
import numpy as np
from mwsp_torch import MWSP, load_tudataset
import mwsp_torch.transport._thread_simplex as thread_simplex
from mwsp_torch.transport import thread_exact_distances, upper_pairs
graphs = load_tudataset("MUTAG", root={root!r}, cache_dir={cache!r})[0][:24]
model = MWSP(d=3, k=1).fit(graphs)
pairs = upper_pairs(len(graphs))
# A lower limit, so that some pairs go to the host while the worker thread runs the kernel.
thread_simplex.MAX_NODES = 30
print(int(np.sum(np.diff(model.support_.graph_ptr)[pairs].sum(axis=1) > 30)))
got = thread_exact_distances(model.support_, model.support_, pairs, device="cuda", threads_per_block=32)
want = model.distances_[pairs[:, 0], pairs[:, 1]]
print(float(np.max(np.abs(got - want) / np.maximum(want, 1e-300))))
"""


def test_thread_engine_cuda_kernel_in_the_simulator(fixture_root, cache_dir):
    """The CUDA kernel itself (its ``cuda.local`` arrays, thread indexing and launch), run
    by numba's CUDA simulator on the CPU: CI has no GPU, and the CPU kernel shares every
    function of the solver but not these."""
    env = dict(os.environ, NUMBA_ENABLE_CUDASIM="1", PYTHONPATH=str(Path(__file__).resolve().parents[1]))
    script = SIMULATED.format(root=str(fixture_root), cache=str(cache_dir))
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    large, error = done.stdout.strip().splitlines()[-2:]
    assert 0 < int(large) < 276  # pairs on the host and pairs on the (simulated) GPU
    # Relative, not bit for bit: the CPU solver prices every row of small problems and roots
    # its first tree elsewhere, so the two take different pivots to the same optimum.
    assert float(error) <= 1e-12


def _fake_cuda_worker(monkeypatch, wait_for=None, fail=False, host_fails=False):
    """``thread_exact_distances`` on ``cuda`` with its CUDA worker replaced by one that takes
    chunks from the same queue and solves them with the CPU build of the kernel: the
    engine's threads and queue as on a GPU. Returns what each side did. One lock keeps the
    two sides' numba ``prange`` kernels apart (numba's workqueue layer aborts on two at
    once; the real worker runs none)."""
    import threading

    import mwsp_torch.transport._thread_simplex as thread_simplex
    import mwsp_torch.transport.gpu as transport

    record = {"host": [], "host_done": 0, "worker": [], "host_thread": set(), "worker_thread": None}
    compiled = transport.exact_distances
    one_kernel = threading.Lock()

    def host(left, right, chosen, **kwargs):
        record["host_thread"].add(threading.current_thread())
        record["host"].append(np.array(chosen))
        if host_fails:
            raise MemoryError("host failed")
        with one_kernel:
            values = compiled(left, right, chosen, **kwargs)
        record["host_done"] += 1
        return values

    def worker(index, chosen, sets, table, queue, chunk_size, threads_per_block, values, status, report):
        record["worker_thread"] = threading.current_thread()
        record["index"] = index
        if fail:
            raise RuntimeError("CUDA_ERROR_LAUNCH_FAILED")
        record["waited"] = wait_for is None or wait_for(record, queue)
        if not record["waited"]:
            raise AssertionError("the host did not do its part while the CUDA worker waited")
        while (span := queue.take(chunk_size)) is not None:
            lo, hi = span
            with one_kernel:
                thread_simplex.cpu_kernel()(chosen[lo:hi], *sets, table, values[lo:hi], status[lo:hi])
            record["worker"].append(chosen[lo:hi])
            report(hi - lo)

    monkeypatch.setattr(transport, "exact_distances", host)
    monkeypatch.setattr(transport, "_thread_kernels_on_cuda", worker)
    monkeypatch.setattr(transport, "cuda_device_index", lambda cuda, device: 0)
    monkeypatch.setattr(thread_simplex, "import_numba_cuda", lambda: None)
    return record


def _wait_until(condition, timeout=60.0):
    import time

    stop = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > stop:
            return False
        time.sleep(0.001)
    return True


@pytest.mark.parametrize("deterministic", [False, True])
def test_thread_engine_shares_the_pairs_between_host_and_gpu(monkeypatch, deterministic):
    """On an H100 the launch loop returned only when the kernels ended, so the host's large
    pairs, solved after it, did not overlap the GPU. Now the calling thread solves them while
    one worker thread makes every CUDA call, then takes small pairs from the back of the
    worker's queue. Here the worker's stand-in waits until the host has solved its large
    pairs and a share of the small ones: run one after the other, it would wait in vain.
    Under torch's deterministic mode the host takes no small pairs (the two solvers differ
    in the last bits)."""
    import threading

    import torch

    import mwsp_torch.transport.gpu as transport

    graphs = _random_graphs(0, 16, 12, 60, 6)
    model = MWSP(d=3, k=1).fit(graphs)
    pairs = upper_pairs(len(graphs))
    import time

    def wait_for(record, queue):
        if not _wait_until(lambda: record["host_done"] >= (1 if deterministic else 2)):
            return False  # neither the large pairs nor (unless deterministic) a share of small ones
        time.sleep(0.5 if deterministic else 0.0)  # time enough to take a share it must not take
        return True

    record = _fake_cuda_worker(monkeypatch, wait_for=wait_for)
    monkeypatch.setattr(torch, "are_deterministic_algorithms_enabled", lambda: deterministic)
    done = []
    got = transport.thread_exact_distances(
        model.support_, model.support_, pairs, device="cuda", chunk_size=8, progress=done.append
    )
    np.testing.assert_allclose(got, model.distances_[pairs[:, 0], pairs[:, 1]], rtol=1e-12, atol=1e-15)
    assert record["host_thread"] == {threading.main_thread()}
    assert record["worker_thread"] is not threading.main_thread()
    # Every pair solved exactly once: the large ones by the host's first call, each small one
    # by the host (two at a time, a quarter chunk) or by the worker (eight at a time).
    sizes = np.diff(model.support_.graph_ptr)
    large = record["host"][0]
    assert len(large) and np.all(sizes[large].sum(axis=1) > 63)
    shares = record["host"][1:]
    assert (len(shares) == 0) if deterministic else (len(shares) >= 1 and all(len(s) <= 2 for s in shares))
    solved = np.concatenate([large, *shares, *record["worker"]])
    assert len(solved) == len(pairs)
    assert len(np.unique(solved[:, 0] * len(graphs) + solved[:, 1])) == len(pairs)
    assert sum(done) == len(pairs)


def test_thread_engine_raises_what_its_cuda_worker_raised(monkeypatch):
    import mwsp_torch.transport.gpu as transport

    graphs = _random_graphs(0, 16, 12, 60, 6)
    model = MWSP(d=3, k=1).fit(graphs)
    _fake_cuda_worker(monkeypatch, fail=True)
    with pytest.raises(RuntimeError, match="CUDA_ERROR_LAUNCH_FAILED"):
        transport.thread_exact_distances(model.support_, model.support_, upper_pairs(len(graphs)), device="cuda")
    with pytest.raises(ValueError, match="chunk_size must be a positive integer, got 0"):
        transport.thread_exact_distances(model.support_, model.support_, upper_pairs(3), chunk_size=0)
    with pytest.raises(ValueError, match="chunk_size must be a positive integer, got True"):
        transport.thread_exact_distances(model.support_, model.support_, upper_pairs(3), chunk_size=True)


def test_thread_engine_stops_its_cuda_worker_when_the_host_fails(monkeypatch):
    """An error on the host (here its large pairs) closes the queue: the worker, waiting
    until the host has failed, then finds nothing left to launch."""
    import mwsp_torch.transport.gpu as transport

    graphs = _random_graphs(0, 16, 12, 60, 6)
    model = MWSP(d=3, k=1).fit(graphs)

    def wait_for(record, queue):
        _wait_until(lambda: len(record["host"]) >= 1)  # the host has been called and fails
        return _wait_until(lambda: queue.take(0) is None, timeout=30)  # an empty span until closed

    record = _fake_cuda_worker(monkeypatch, wait_for=wait_for, host_fails=True)
    with pytest.raises(MemoryError, match="host failed"):
        transport.thread_exact_distances(model.support_, model.support_, upper_pairs(len(graphs)), device="cuda")
    assert record["waited"] and record["worker"] == []


def test_cuda_device_index_follows_the_name_or_the_current_device():
    """The worker thread starts without a CUDA context, so the caller resolves the device:
    ``cuda:N``, else the caller's current device (torch's, say), else 0; one numba does not
    see is refused before any work."""
    from types import SimpleNamespace

    from mwsp_torch.transport.gpu import cuda_device_index

    class Devices(list):
        current = None

    devices = Devices([SimpleNamespace(id=0), SimpleNamespace(id=1)])
    cuda = SimpleNamespace(gpus=devices)
    assert cuda_device_index(cuda, "cuda") == 0
    assert cuda_device_index(cuda, "cuda:1") == 1
    devices.current = devices[1]
    assert cuda_device_index(cuda, "cuda") == 1
    assert cuda_device_index(cuda, "cuda:0") == 0
    with pytest.raises(ValueError, match=r"device='cuda:2': numba sees 2 CUDA device\(s\)"):
        cuda_device_index(cuda, "cuda:2")


@settings(max_examples=200, deadline=None)
@given(
    total=st.integers(0, 60),
    takes=st.lists(st.tuples(st.integers(1, 9), st.booleans()), max_size=40),
)
def test_pair_queue_hands_out_each_index_once(total, takes):
    """The thread engine's queue: spans taken from either end never overlap, and together
    with what is left they cover the range; once closed it hands out nothing."""
    from mwsp_torch.transport.gpu import PairQueue

    queue = PairQueue(total)
    taken = []
    for size, from_back in takes:
        span = queue.take(size, from_back=from_back)
        if span is None:
            assert sum(hi - lo for lo, hi in taken) == total
            continue
        lo, hi = span
        assert 0 <= lo < hi <= total and hi - lo <= size
        taken.append(span)
    covered = [i for lo, hi in taken for i in range(lo, hi)]
    assert len(covered) == len(set(covered))
    rest = []
    while (span := queue.take(7)) is not None:
        rest.extend(range(*span))
    assert sorted(covered + rest) == list(range(total))
    queue = PairQueue(total)
    queue.close()
    assert queue.take(1) is None and queue.take(1, from_back=True) is None


def test_damaged_checkpoint_tile_is_named_and_recomputed(tmp_path, kernel_calls):
    _, full, resume = _checkpointed(tmp_path, 2, 11, d=2, k=0)
    tiles = sorted(tmp_path.rglob("tile-*.npy"))
    assert len(tiles) == 4 and all(re.fullmatch(r"tile-000000\d-[0-9a-f]{16}\.npy", t.name) for t in tiles)
    tiles[0].write_bytes(tiles[0].read_bytes()[:90])  # truncated by something outside the library
    np.save(tiles[1], np.zeros(3))  # another array under a tile's name
    flipped = bytearray(tiles[2].read_bytes())
    flipped[-3] ^= 0x40  # one bit of a value: still a readable float64 array of the right shape
    tiles[2].write_bytes(bytes(flipped))
    last = len(np.load(tiles[2]))
    fourth = len(np.load(tiles[3]))
    tiles[3].write_bytes(tiles[3].read_bytes().replace(b"'<f8'", b"',f8'", 1))  # numpy's parser: SyntaxError
    kernel_calls.clear()
    with pytest.warns(UserWarning, match=r"checkpoint tile .*tile-0000000-[0-9a-f]{16}\.npy cannot be read") as record:
        resumed = resume()
    messages = [str(w.message) for w in record]
    assert any(re.search(r"tile-0000001-\w+\.npy holds float64 \[3\], not float64 \[50\]", m) for m in messages)
    assert any(re.search(r"tile-0000002-\w+\.npy does not match its checksum", m) for m in messages)
    assert any(re.search(r"tile-0000003-\w+\.npy cannot be read", m) for m in messages)
    np.testing.assert_array_equal(resumed, full)
    assert kernel_calls == [50, 50, last, fourth]
    kernel_calls.clear()
    np.testing.assert_array_equal(resume(), full)
    assert kernel_calls == []  # both were saved again
