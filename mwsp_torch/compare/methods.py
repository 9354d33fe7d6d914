"""The names of a comparison's methods, in one place that imports nothing.

``mwsp compare --methods`` reads its choices from here while it builds its parser (before
torch, PyG or numba are imported), and :mod:`mwsp_torch.gnn_protocol` and
:mod:`mwsp_torch.compare.kernels` take their lists from here, so the three cannot disagree.
"""

__all__ = ["DEFAULT_METHODS", "FUSION_METHODS", "GNN_METHODS", "KERNEL_METHODS", "METHODS", "POOLING_METHODS"]

#: Graph kernels selected by the nested protocol (:mod:`mwsp_torch.compare.kernels`).
KERNEL_METHODS = ("mwsp", "mwsp_attributes", "wl", "sp")
#: GIN with its readout replaced by template pooling (:mod:`mwsp_torch.gnn_protocol`): exact
#: Wasserstein pooling on one-hot labels or on MWSP's tree IDs, and POT's TFGW pooling.
POOLING_METHODS = ("gin_pool", "gin_pool_tree_ids", "gin_tfgw")
#: Networks trained and selected by Errica et al.'s protocol (:mod:`mwsp_torch.gnn_protocol`).
GNN_METHODS = ("gin", "baseline", *POOLING_METHODS)
#: MWSP's kernel fused with cross-fitted GIN probabilities (:mod:`mwsp_torch.compare.fusion`).
FUSION_METHODS = ("fusion",)
#: Every method :func:`mwsp_torch.compare.compare` runs.
METHODS = KERNEL_METHODS + GNN_METHODS + FUSION_METHODS
#: What ``mwsp compare`` runs unless told.
DEFAULT_METHODS = ("mwsp", "wl", "sp", "gin", "baseline")
