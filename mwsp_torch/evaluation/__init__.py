"""Evaluation: the protocols around the kernel, on one selection engine.

- :mod:`~mwsp_torch.evaluation.validation`: what the protocols accept (labels, folds, grids,
  seeds, distance and kernel matrices), checked once with messages that name the argument.
- :mod:`~mwsp_torch.evaluation.selection`: the engine. Inner cross-validation over
  ``(setting, param, C)`` candidates, the first best mean wins, fits that can no longer win
  are skipped, steps run in parallel and resume from a checkpoint.
- :mod:`~mwsp_torch.evaluation.learners`: an SVM on precomputed kernels, made from W
  (``exp(-lam W)``) or given (:class:`Precomputed`: GraKeL's WL, a fused kernel).
- :mod:`~mwsp_torch.evaluation.protocols`: the paper's protocol, its pick of ``(d, k)`` by
  test accuracy, and the nested protocol, as adapters of the engine.
- :mod:`~mwsp_torch.evaluation.nystroem`: the nested protocol on Nystroem features, the
  engine with a linear SVM as its learner.
- :mod:`~mwsp_torch.evaluation.results`: summaries, ceilings, digests, joining repetitions.
- :mod:`~mwsp_torch.evaluation.store`: selection checkpoints on disk.
"""

from mwsp_torch.evaluation.learners import SVMS, KernelSVM, Precomputed
from mwsp_torch.evaluation.nystroem import nystroem_protocol
from mwsp_torch.evaluation.protocols import (
    NESTED_INNER_FOLDS,
    PAPER_CS,
    PAPER_LAMS,
    nested_folds,
    nested_protocol,
    ordered_settings,
    paper_pick,
    paper_protocol,
)
from mwsp_torch.evaluation.results import (
    accuracy_ceiling,
    combine_repetitions,
    inputs_digest,
    majority_rate,
    repetition_summary,
    reported_std,
    selected_setting,
)
from mwsp_torch.evaluation.selection import can_still_win, memory_mapped, select, step_scores
from mwsp_torch.evaluation.validation import (
    DISTANCE_SYMMETRY_TOL,
    SEED_RANGE,
    check_folds,
    check_grid,
    check_inner_folds,
    check_labels,
    check_n_jobs,
    check_outer_folds,
    check_seeds,
    check_setting_keys,
    max_folds,
)

__all__ = [
    "DISTANCE_SYMMETRY_TOL",
    "NESTED_INNER_FOLDS",
    "PAPER_CS",
    "PAPER_LAMS",
    "SEED_RANGE",
    "SVMS",
    "KernelSVM",
    "Precomputed",
    "accuracy_ceiling",
    "can_still_win",
    "check_folds",
    "check_grid",
    "check_inner_folds",
    "check_labels",
    "check_n_jobs",
    "check_outer_folds",
    "check_seeds",
    "check_setting_keys",
    "combine_repetitions",
    "inputs_digest",
    "majority_rate",
    "max_folds",
    "memory_mapped",
    "nested_folds",
    "nested_protocol",
    "nystroem_protocol",
    "ordered_settings",
    "paper_pick",
    "paper_protocol",
    "repetition_summary",
    "reported_std",
    "select",
    "selected_setting",
    "step_scores",
]
