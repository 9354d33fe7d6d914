"""Run by ``test_transport.py`` in a subprocess with ``TRITON_INTERPRET=1`` (set before Triton
is imported): the fused backend's Triton kernels on CPU tensors. Prints one JSON object of
the largest relative differences."""

import json
import sys

import numpy as np
import torch

from mwsp_torch import MWSP, load_tudataset
from mwsp_torch import _batched_sinkhorn as loop
from mwsp_torch import _triton_sinkhorn as kernels
from mwsp_torch.transport import _triton_kernels, sinkhorn_distances, upper_pairs


def relative(got, expected):
    return float((np.abs(got - expected) / np.maximum(np.abs(expected), 1e-12)).max())


def main(data_root: str, cache_dir: str) -> None:
    assert _triton_kernels(torch.zeros(1)) is kernels  # CPU tensors are accepted under the interpreter
    torch.manual_seed(0)
    points = torch.rand(40, 5, dtype=torch.float64)
    table = torch.cdist(points, points).clamp_min(1e-4)
    eps = loop.epsilon_schedule(2.0, 0.05, 0.8)
    worst = {"cross": 0.0, "self": 0.0}
    for batch, m, n in ((6, 8, 12), (3, 5, 3), (4, 20, 36), (2, 1, 7)):  # widths below and above a power of 2
        ids_a, ids_b = torch.randint(0, 40, (batch, m)), torch.randint(0, 40, (batch, n))
        a, b = torch.rand(batch, m, dtype=torch.float64), torch.rand(batch, n, dtype=torch.float64)
        a[:, m - 1 :] = 0 if m > 1 else 1  # zero-weight padding on a side
        a, b = a / a.sum(1, keepdim=True), b / b.sum(1, keepdim=True)
        expected = loop.cross_terms(table[ids_a[:, :, None], ids_b[:, None, :]], a, b, eps).numpy()
        got = kernels.cross_terms(table, ids_a, a, ids_b, b, eps).numpy()
        worst["cross"] = max(worst["cross"], relative(got, expected))
        expected = loop.self_terms(table[ids_a[:, :, None], ids_a[:, None, :]], a, eps).numpy()
        worst["self"] = max(worst["self"], relative(kernels.self_terms(table, ids_a, a, eps).numpy(), expected))
    graphs, _ = load_tudataset("MUTAG", root=data_root, cache_dir=cache_dir)
    support = MWSP(d=2, k=0).fit(graphs[:12]).support_
    pairs = upper_pairs(support.num_graphs)
    options = dict(blur=0.05, scaling=0.9)
    fused = sinkhorn_distances(support, support, pairs, backend="triton", **options)
    geomloss = sinkhorn_distances(support, support, pairs, backend="tensorized", **options)
    worst["mutag_vs_geomloss"] = float((np.abs(fused - geomloss) / np.maximum(geomloss, 1e-3)).max())
    print(json.dumps(worst))


if __name__ == "__main__":
    main(*sys.argv[1:])
