"""Run by ``test_transport_sinkhorn.py`` in a subprocess with ``TRITON_INTERPRET=1`` (set before Triton
is imported): the fused backend's Triton kernels on CPU tensors. Prints one JSON object of
the largest relative differences."""

import json
import sys

import numpy as np
import torch

import mwsp_torch.transport._batched_sinkhorn as loop
import mwsp_torch.transport._triton_sinkhorn as kernels
from mwsp_torch import MWSP, load_tudataset
from mwsp_torch.transport import sinkhorn_distances, upper_pairs
from mwsp_torch.transport.sinkhorn import triton_kernels


def relative(got, expected):
    return float((np.abs(got - expected) / np.maximum(np.abs(expected), 1e-12)).max())


def padded(ptr, ids, mass, graphs):
    """The torch loop's inputs: row IDs and masses ``[len(graphs), width]``, 0 on padding."""
    width = max(1, int(np.diff(ptr)[graphs].max()))
    out_ids = torch.zeros(len(graphs), width, dtype=torch.int64)
    out_mass = torch.zeros(len(graphs), width, dtype=torch.float64)
    for r, g in enumerate(graphs):
        lo, hi = ptr[g], ptr[g + 1]
        out_ids[r, : hi - lo], out_mass[r, : hi - lo] = torch.from_numpy(ids[lo:hi]), torch.from_numpy(mass[lo:hi])
    return out_ids, out_mass


def main(data_root: str, cache_dir: str) -> None:
    assert triton_kernels(torch.zeros(1)) is kernels  # CPU tensors are accepted under the interpreter
    rng = np.random.default_rng(0)
    torch.manual_seed(0)
    points = torch.rand(40, 5, dtype=torch.float64)
    table = torch.cdist(points, points).clamp_min(1e-4)
    eps = loop.epsilon_schedule(2.0, 0.05, 0.8)
    # Supports below and above tile sides (8, 16, 32, 64), one empty; masses count / size.
    lengths = np.array([1, 3, 8, 9, 16, 17, 5, 33, 0, 2, 12])
    ptr = np.r_[0, np.cumsum(lengths)]
    ids = np.concatenate([rng.choice(40, size=n, replace=False) for n in lengths])
    counts = rng.integers(1, 4, size=ptr[-1])
    sizes = np.array([counts[ptr[g] : ptr[g + 1]].sum() for g in range(len(lengths))])
    mass = counts / np.repeat(sizes, lengths)
    sset = kernels.measures(ptr, ids, counts, sizes, torch.float64, "cpu")
    graphs = np.flatnonzero(lengths)
    pairs = np.array([(i, j) for i in graphs for j in graphs])[rng.permutation(len(graphs) ** 2)[:40]]
    expected = loop_cross(table, ptr, ids, mass, pairs, eps)
    worst = {"cross": relative(kernels.cross_terms(table, sset, sset, pairs, eps).numpy(), expected)}
    ids_g, w = padded(ptr, ids, mass, graphs)
    half = kernels.self_terms(table, sset, graphs, eps)
    assert float(half[lengths == 0].abs().max()) == 0.0  # an empty support's term stays 0
    worst["self"] = relative(
        half[graphs].numpy(), loop.self_terms(table[ids_g[:, :, None], ids_g[:, None, :]], w, eps).numpy()
    )
    # The debiasing terms subtracted in the kernel; a pair with an empty side gives 0.
    got = kernels.cross_terms(table, sset, sset, np.r_[pairs, [[8, 2], [2, 8]]], eps, half, half).numpy()
    assert np.all(got[-2:] == 0)
    debiased = expected - half[pairs[:, 0]].numpy() - half[pairs[:, 1]].numpy()
    worst["debiased"] = float(np.abs(got[:-2] - debiased).max() / np.abs(expected).max())
    graphs, _ = load_tudataset("MUTAG", root=data_root, cache_dir=cache_dir)
    support = MWSP(d=2, k=0).fit(graphs[:12]).support_
    pairs = upper_pairs(support.num_graphs)
    options = dict(blur=0.05, scaling=0.9)
    fused = sinkhorn_distances(support, support, pairs, backend="triton", **options)
    geomloss = sinkhorn_distances(support, support, pairs, backend="tensorized", **options)
    worst["mutag_vs_geomloss"] = float((np.abs(fused - geomloss) / np.maximum(geomloss, 1e-3)).max())
    # float32 (opt-in): the same kernels in single precision, near the float64 values.
    single = sinkhorn_distances(support, support, pairs, backend="triton", dtype="float32", **options)
    worst["float32_vs_float64"] = float((np.abs(single - fused) / np.maximum(fused, 1e-3)).max())
    print(json.dumps(worst))


def loop_cross(table, ptr, ids, mass, pairs, eps):
    ids_a, a = padded(ptr, ids, mass, pairs[:, 0])
    ids_b, b = padded(ptr, ids, mass, pairs[:, 1])
    return loop.cross_terms(table[ids_a[:, :, None], ids_b[:, None, :]], a, b, eps).numpy()


if __name__ == "__main__":
    main(*sys.argv[1:])
