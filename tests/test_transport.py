"""The compiled exact solver against POT, the cancellation of shared rows, and resumable tiles."""

import numpy as np
import ot
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mwsp_torch import MWSP, make_csl
from mwsp_torch._simplex import transport_cost
from mwsp_torch.transport import exact_distances, pot_distances, upper_pairs

from conftest import make_data


def _check(counts_a, counts_b, cost):
    na, nb = counts_a.sum(), counts_b.sum()
    expected = ot.emd2(counts_a / na, counts_b / nb, cost)
    cost = np.ascontiguousarray(cost)
    # Both starting rules (Vogel's, row-minimum) and pricing blocks of one row, the default, all rows.
    for vogel_min_arcs, min_block_arcs in ((0, 96), (1 << 62, 1), (1 << 62, 96), (1 << 62, 1 << 30)):
        got = transport_cost(counts_a * nb, counts_b * na, cost, vogel_min_arcs, min_block_arcs) / (na * nb)
        assert abs(got - expected) <= 1e-9 * abs(expected) + 1e-14, (vogel_min_arcs, min_block_arcs)


@settings(max_examples=300, deadline=None)
@given(st.integers(1, 30), st.integers(1, 30), st.integers(0, 2**32 - 1), st.sampled_from(["random", "ties", "points"]))
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


@pytest.mark.parametrize("size", [60, 150])
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


def test_compiled_engine_equals_pot_on_collapsed_pairs():
    graphs, _ = make_csl(graphs_per_class=2, num_nodes=13, seed=3)
    model = MWSP(d=2, k=1).fit(graphs)
    pairs = upper_pairs(len(graphs))
    reference = pot_distances(model.support_, model.support_, pairs)
    got = model.distances_[pairs[:, 0], pairs[:, 1]]
    np.testing.assert_allclose(got, reference, rtol=1e-9, atol=1e-14)


def test_without_distance_table_gives_the_same(monkeypatch):
    graphs, _ = make_csl(graphs_per_class=2, num_nodes=11)
    model = MWSP(d=2, k=1).fit(graphs)
    pairs = upper_pairs(len(graphs))
    on_the_fly = exact_distances(model.support_, model.support_, pairs, table_bytes=0)
    np.testing.assert_array_equal(on_the_fly, model.distances_[pairs[:, 0], pairs[:, 1]])


def test_checkpoint_resume_recomputes_only_missing_tiles(tmp_path, monkeypatch):
    graphs, _ = make_csl(graphs_per_class=3, num_nodes=15)
    support = MWSP(d=3, k=1).fit(graphs).support_
    pairs = upper_pairs(len(graphs))
    full = exact_distances(support, support, pairs, tile_size=50, checkpoint=tmp_path)
    tiles = sorted(tmp_path.rglob("tile-*.npy"))
    assert len(tiles) == -(-len(pairs) // 50)
    # A killed run: some tiles never written, one corrupted mid-way is impossible (atomic rename).
    for tile in tiles[1::2]:
        tile.unlink()
    import mwsp_torch.transport as transport

    calls = []
    kernel = transport._pairs_kernel

    def counting(*args):
        calls.append(len(args[0]))
        return kernel(*args)

    monkeypatch.setattr(transport, "_pairs_kernel", counting)
    resumed = exact_distances(support, support, pairs, tile_size=50, checkpoint=tmp_path)
    assert np.array_equal(resumed, full)
    assert len(calls) == len(tiles[1::2])


def test_checkpoint_is_keyed_by_inputs(tmp_path):
    graphs, _ = make_csl(graphs_per_class=2, num_nodes=11)
    a = MWSP(d=1, k=0, checkpoint=str(tmp_path)).fit(graphs).distances_
    b = MWSP(d=3, k=1, checkpoint=str(tmp_path)).fit(graphs).distances_
    assert not np.array_equal(a, b)
    assert len([p for p in tmp_path.iterdir() if p.is_dir()]) == 2
    np.testing.assert_array_equal(MWSP(d=3, k=1, checkpoint=str(tmp_path)).fit(graphs).distances_, b)


def test_sinkhorn_buckets_and_backends_agree():
    """Size buckets reorder pairs internally: results must come back in the caller's order,
    equal to one-pair-at-a-time, and the pykeops online backend must equal the tensorized one."""
    from mwsp_torch.transport import sinkhorn_distances

    rng = np.random.default_rng(4)
    graphs = []
    for size in (5, 9, 6, 12, 7, 9):
        edges = [(i, i + 1) for i in range(size - 1)] + [tuple(rng.choice(size, 2, replace=False)) for _ in range(3)]
        graphs.append(make_data(size, edges, rng.integers(0, 3, size)))
    graphs.append(graphs[1])  # a pair at distance 0 (a zero-diameter batch of one)
    support = MWSP(d=2, k=1).fit(graphs).support_
    pairs = upper_pairs(support.num_graphs)[::-1].copy()  # not in size order
    batched = sinkhorn_distances(support, support, pairs, blur=0.05, scaling=0.9, batch_size=4)
    one_by_one = np.array(
        [sinkhorn_distances(support, support, pairs[t : t + 1], blur=0.05, scaling=0.9)[0] for t in range(len(pairs))]
    )
    np.testing.assert_allclose(batched, one_by_one, rtol=1e-6, atol=1e-9)
    online = sinkhorn_distances(support, support, pairs, blur=0.05, scaling=0.9, backend="online")
    # KeOps's p=1 cost is smoothed at zero distance: measured here, online is 1.0e-4 above tensorized.
    np.testing.assert_allclose(online, batched, rtol=0, atol=2e-4)
    exact = exact_distances(support, support, pairs)
    assert np.all(np.abs(batched - exact) <= 0.05 * exact + 1e-3)  # an approximation of W, not garbage
    with pytest.raises(ValueError, match="backend must be one of"):
        sinkhorn_distances(support, support, pairs, backend="keops")


@settings(max_examples=80, deadline=None)
@given(
    st.integers(1, 12),
    st.integers(1, 12),
    st.integers(1, 5),
    st.integers(0, 2**32 - 1),
    st.sampled_from(["random", "ties", "points"]),
)
def test_batched_simplex_equals_pot(m, n, batch, seed, kind):
    """The torch batched solver (the GPU engine's logic, here on CPU tensors) against POT."""
    import torch

    from mwsp_torch._batched_simplex import batched_transport_cost

    rng = np.random.default_rng(seed)
    counts_a = rng.integers(1, 4, size=(batch, m))
    counts_b = rng.integers(1, 4, size=(batch, n))
    na, nb = counts_a.sum(1), counts_b.sum(1)
    if kind == "random":
        cost = rng.random((batch, m, n))
    elif kind == "ties":
        cost = rng.integers(0, 3, size=(batch, m, n)).astype(np.float64)
    else:
        points = [(rng.integers(0, 3, (m, 3)), rng.integers(0, 3, (n, 3))) for _ in range(batch)]
        cost = np.stack([ot.dist(a.astype(float), b.astype(float), "euclidean") for a, b in points])
    got = batched_transport_cost(
        torch.from_numpy(counts_a * nb[:, None]), torch.from_numpy(counts_b * na[:, None]), torch.from_numpy(cost)
    ).numpy() / (na * nb)
    expected = np.array([ot.emd2(counts_a[b] / na[b], counts_b[b] / nb[b], cost[b]) for b in range(batch)])
    np.testing.assert_allclose(got, expected, rtol=1e-9, atol=1e-14)


@pytest.mark.parametrize(("d", "k", "pad_to"), [(2, 0, 4), (3, 1, 4), (3, 1, 8)])
def test_batched_engine_equals_compiled_engine(mutag, d, k, pad_to):
    """Cancellation, padded buckets and GEMM-built costs: the batched engine gives the compiled engine's W."""
    from mwsp_torch.transport import batched_exact_distances

    graphs = mutag[0][:30]
    model = MWSP(d=d, k=k).fit(graphs)
    pairs = upper_pairs(len(graphs))
    got = batched_exact_distances(model.support_, model.support_, pairs, batch_size=64, pad_to=pad_to)
    np.testing.assert_allclose(got, model.distances_[pairs[:, 0], pairs[:, 1]], rtol=1e-9, atol=1e-14)


def test_batched_engine_refuses_bad_input():
    import torch

    from mwsp_torch._batched_simplex import batched_transport_cost
    from mwsp_torch.transport import batched_exact_distances

    one = torch.ones((1, 2), dtype=torch.int64)
    with pytest.raises(ValueError, match="totals differ"):
        batched_transport_cost(one, 2 * one, torch.zeros((1, 2, 2), dtype=torch.float64))
    with pytest.raises(ValueError, match="> 0"):
        batched_transport_cost(one - 1, one - 1, torch.zeros((1, 2, 2), dtype=torch.float64))
    with pytest.raises(ValueError, match="shapes disagree"):
        batched_transport_cost(one, one, torch.zeros((1, 3, 2), dtype=torch.float64))
    graphs, _ = make_csl(graphs_per_class=2, num_nodes=11)
    model = MWSP(d=2, k=1).fit(graphs)
    with pytest.raises(ValueError, match="use exact_distances"):
        batched_exact_distances(model.support_, model.support_, upper_pairs(len(graphs)), table_bytes=8)
    with pytest.raises(ValueError, match="checkpoint is only kept"):
        MWSP(device="cuda", checkpoint="somewhere").fit(graphs)


def test_batched_simplex_on_costs_far_below_one(mutag):
    """Padding must not swamp tiny costs: the dummies' wall scales with the costs
    (a wall of 2 max + 1 made MUTAG's W at this scale 125 % off)."""
    from mwsp_torch.transport import batched_exact_distances

    model = MWSP(d=3, k=1).fit(mutag[0][:30])
    support = model.support_
    tiny = type(support)(support.rows * 1e-15, support.graph_ptr, support.support, support.counts, support.sizes)
    pairs = upper_pairs(support.num_graphs)
    got = batched_exact_distances(tiny, tiny, pairs, pad_to=4)
    np.testing.assert_allclose(got, 1e-15 * model.distances_[pairs[:, 0], pairs[:, 1]], rtol=1e-9, atol=0)


def test_batched_simplex_refuses_what_it_cannot_solve():
    import torch

    from mwsp_torch._batched_simplex import batched_transport_cost

    big = 2**61  # units * (2m + 1) would overflow the int64 flow keys
    supply = torch.tensor([[big, big, 1, 1]])
    with pytest.raises(ValueError, match="too large for int64"):
        batched_transport_cost(supply, supply.flip(1), torch.zeros((1, 4, 4), dtype=torch.float64))
    one = torch.ones((1, 2), dtype=torch.int64)
    with pytest.raises(ValueError, match="finite"):
        batched_transport_cost(one, one, torch.full((1, 2, 2), float("nan"), dtype=torch.float64))
    with pytest.raises(ValueError, match="int64"):
        batched_transport_cost(one.int(), one.int(), torch.zeros((1, 2, 2), dtype=torch.float64))
