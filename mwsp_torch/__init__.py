"""mwsp_torch: the MWSP graph kernel (Multi-scale Wasserstein Shortest-Path) for PyTorch Geometric.

Data flows one way: ``graphs -> labels -> trees -> paths -> transport -> kernel -> evaluation``;
:class:`MWSP` is the scikit-learn estimator on top, :class:`TreeIDs` the PyG transform,
:class:`MWSPNystroem` Nystroem features from landmark graphs (and :func:`nystroem_protocol`
their nested cross-validation), :func:`explain` the node-level plan behind one distance,
:mod:`mwsp_torch.distributed` runs the exact engine on a Dask cluster,
:class:`WassersteinPooling` is exact template Wasserstein pooling inside a GNN, and
:mod:`mwsp_torch.compare` compares kernels with GNNs on the same folds.
"""

import importlib

#: Each public name and the module it lives in, imported on first use (PEP 562), so that
#: ``mwsp --help`` and a single submodule's import need none of torch, PyG or numba.
_EXPORTS = {
    "MWSP": "mwsp_torch.estimator",
    "MWSPNystroem": "mwsp_torch.nystroem",
    "Precomputed": "mwsp_torch.evaluation",
    "TreeIDs": "mwsp_torch.trees",
    "WassersteinPooling": "mwsp_torch.nn",
    "combine_repetitions": "mwsp_torch.evaluation",
    "compact_graphs": "mwsp_torch.graphs",
    "explain": "mwsp_torch.explain",
    "krein_projector": "mwsp_torch.kernel",
    "laplacian_kernel": "mwsp_torch.kernel",
    "load_dataset": "mwsp_torch.datasets",
    "load_tudataset": "mwsp_torch.datasets",
    "make_csl": "mwsp_torch.datasets",
    "nested_protocol": "mwsp_torch.evaluation",
    "nystroem_protocol": "mwsp_torch.evaluation",
    "paper_protocol": "mwsp_torch.evaluation",
    "plot_explanation": "mwsp_torch.explain",
}


def __getattr__(name: str):
    if name in _EXPORTS:
        value = getattr(importlib.import_module(_EXPORTS[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'mwsp_torch' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_EXPORTS))


__all__ = [
    "MWSP",
    "MWSPNystroem",
    "Precomputed",
    "TreeIDs",
    "WassersteinPooling",
    "combine_repetitions",
    "compact_graphs",
    "explain",
    "krein_projector",
    "laplacian_kernel",
    "load_dataset",
    "load_tudataset",
    "make_csl",
    "nested_protocol",
    "nystroem_protocol",
    "paper_protocol",
    "plot_explanation",
]
__version__ = "0.1.0"
