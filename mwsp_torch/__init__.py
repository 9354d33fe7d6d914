"""mwsp_torch: the MWSP graph kernel (Multi-scale Wasserstein Shortest-Path) for PyTorch Geometric.

Data flows one way: ``graphs -> labels -> trees -> paths -> transport -> kernel -> evaluation``;
:class:`MWSP` is the scikit-learn estimator on top, :class:`TreeIDs` the PyG transform,
:class:`MWSPNystroem` Nystroem features from landmark graphs (and :func:`nystroem_protocol`
their nested cross-validation), :func:`explain` the node-level plan behind one distance, and
:mod:`mwsp_torch.distributed` runs the exact engine on a Dask cluster.
"""

from mwsp_torch.datasets import load_dataset, load_tudataset, make_csl
from mwsp_torch.estimator import MWSP
from mwsp_torch.evaluation import Precomputed, combine_repetitions, nested_protocol, nystroem_protocol, paper_protocol
from mwsp_torch.explain import explain, plot_explanation
from mwsp_torch.kernel import krein_projector, laplacian_kernel
from mwsp_torch.nystroem import MWSPNystroem
from mwsp_torch.trees import TreeIDs

__all__ = [
    "MWSP",
    "MWSPNystroem",
    "Precomputed",
    "TreeIDs",
    "combine_repetitions",
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
