"""Sinkhorn (transport.sinkhorn, its fused and Triton loops): backends that agree, padding
batches, one-point sides, and the fused loop against geomloss."""

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mwsp_torch import MWSP
from mwsp_torch.transport import (
    Sinkhorn,
    exact_distances,
    upper_pairs,
)
from mwsp_torch.transport.sinkhorn import padding_batches, width_class

from helpers import DEVICES, make_data, require_extra


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
