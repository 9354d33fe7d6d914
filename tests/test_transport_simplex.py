"""The transportation simplex (transport._simplex) and its vector scans (transport._simd):
exact minima, bit counts, the start's order, and the simplex against POT's network simplex."""

import numpy as np
import ot
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from numba.core.errors import TypingError

from mwsp_torch.transport._simd import LANES, STEP, lowest_bit, padded_first_at, padded_row_min, popcount, row_min
from mwsp_torch.transport._simplex import CLOSED, max_abs, rows_by_minimum
from mwsp_torch.transport.exact import cost_width, transport_cost


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
