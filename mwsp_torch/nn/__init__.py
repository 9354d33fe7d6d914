"""Neural-network layers on the library's exact transport, for PyTorch Geometric models.

- :class:`WassersteinPooling` (:mod:`~mwsp_torch.nn.pooling`): a graph read out as its exact
  Wasserstein distances to learned template point clouds (the OT-GNN readout), differentiable
  through the optimal plan and the duals.
"""

from mwsp_torch.nn.pooling import POOLING_COSTS, WassersteinPooling

__all__ = ["POOLING_COSTS", "WassersteinPooling"]
