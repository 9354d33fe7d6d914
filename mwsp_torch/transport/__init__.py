"""Pairwise 1-Wasserstein distances between graphs as point clouds.

A graph is the uniform measure on the feature rows of its nodes, and ``W(G, H)`` the
optimal transport cost between two graphs' measures under the Euclidean ground cost
between rows (``docs/definition.md``). One file per job, in the order data flows:

- :mod:`~mwsp_torch.transport.measures`: graphs as weighted sets of distinct rows of one
  row bank (:class:`SupportSet`, :class:`RowVocabulary`, :func:`collapse`), and the
  cancellation of the mass two graphs share;
- :mod:`~mwsp_torch.transport.costs`: ground costs between rows, several ways that agree
  to rounding, and their checks against cancellation in floating point;
- :mod:`~mwsp_torch.transport.store`: finished tiles of pairs on disk (checkpoints);
- :mod:`~mwsp_torch.transport.exact`: the CPU exact engine (:func:`exact_distances`), a
  compiled transportation simplex on threads;
- :mod:`~mwsp_torch.transport.sinkhorn`: the Sinkhorn approximation on any torch device
  (:func:`sinkhorn_distances`);
- :mod:`~mwsp_torch.transport.gpu`: the exact engine for GPUs (:func:`thread_exact_distances`);
- :mod:`~mwsp_torch.transport.engines`: which exact engine ``Exact(engine="auto")`` runs;
- :mod:`~mwsp_torch.transport.solvers`: the one entry point, :func:`distances`, with the solver's
  options (:class:`Exact`, :class:`Sinkhorn`) as an argument and the engine chosen inside.
"""

from mwsp_torch.transport.costs import COST_METHODS
from mwsp_torch.transport.exact import exact_distances, pot_distances, resolve_n_jobs
from mwsp_torch.transport.gpu import thread_exact_distances
from mwsp_torch.transport.measures import RowVocabulary, SupportSet, collapse, upper_pairs
from mwsp_torch.transport.sinkhorn import SINKHORN_BACKENDS, sinkhorn_diameter, sinkhorn_distances
from mwsp_torch.transport.solvers import Exact, Sinkhorn, distances
from mwsp_torch.transport.store import checkpoint_directory

#: ``solver=`` of :class:`mwsp_torch.MWSP`: the exact W, or its Sinkhorn approximation.
SOLVERS = ("exact", "sinkhorn")

__all__ = [
    "COST_METHODS",
    "Exact",
    "SINKHORN_BACKENDS",
    "SOLVERS",
    "Sinkhorn",
    "RowVocabulary",
    "SupportSet",
    "checkpoint_directory",
    "collapse",
    "distances",
    "exact_distances",
    "pot_distances",
    "resolve_n_jobs",
    "sinkhorn_diameter",
    "sinkhorn_distances",
    "thread_exact_distances",
    "upper_pairs",
]
