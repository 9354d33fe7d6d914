"""What a selection fits and scores: an SVM on precomputed kernels, each kernel made from a
setting's matrix on the rows and columns a fold needs.

A setting is a distance matrix W, whose kernels are ``exp(-lam W)`` over a ``lam`` grid, or
a :class:`Precomputed` kernel (GraKeL's WL, a kernel fused from MWSP's and a GNN's), which
has no grid of its own. :class:`KernelSVM` holds the settings of one selection and makes,
for a training part and its inner splits, the fit and validation kernels, then scores each
``C`` by scikit-learn's ``SVC(kernel="precomputed")`` (libsvm) or by the path solver
(:mod:`mwsp_torch.svm`). The selection itself (which candidates, in which order, what is
cut) is :mod:`mwsp_torch.evaluation.selection`'s, the same for every learner.

Kernels are made per slice, never stored for the whole grid: 12 settings x 6 lams of NCI1's
4110 x 4110 would be 9.7 GB.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from contextlib import contextmanager

import numpy as np
from sklearn.svm import SVC

from mwsp_torch.evaluation.selection import memory_mapped
from mwsp_torch.kernel import KREIN_MODES, krein_projector, laplacian_kernel
from mwsp_torch.svm import SVM_SOLVERS, accuracy_path, predict_path

__all__ = ["SVMS", "KernelSVM", "Precomputed", "svc_accuracy"]

SVMS = ("svc", "krein")


class Precomputed:
    """A kernel matrix given as it is, to select among beside distance matrices.

    ``nested_protocol({(2, 0): W, "wl": Precomputed(K_wl)}, y)`` selects among MWSP's
    ``exp(-lam W)`` over ``lam`` and the WL kernel (no ``lam``), each with every ``C``.

    Args:
        kernel: ``[n, n]`` symmetric real matrix over all graphs, or a sequence of them, one
            per outer fold in the protocol's fold order: a kernel that depends on the fold, such
            as one fused with embeddings of a network trained on that fold's training part.

    Examples:
        >>> import numpy as np
        >>> from mwsp_torch.evaluation import Precomputed
        >>> Precomputed(np.eye(3)).per_fold
        False
    """

    def __init__(self, kernel) -> None:
        self.per_fold = isinstance(kernel, (list, tuple))
        self.matrices = list(kernel) if self.per_fold else [kernel]
        if not self.matrices:
            raise ValueError("Precomputed needs a kernel matrix, or one per outer fold, got an empty sequence")

    def matrix(self, fold: int) -> np.ndarray:
        """The kernel that outer fold ``fold`` (its position in the protocol's folds) reads."""
        return self.matrices[fold if self.per_fold else 0]

    def __repr__(self) -> str:
        shape = np.shape(self.matrices[0])
        return f"Precomputed({len(self.matrices)} x {shape})" if self.per_fold else f"Precomputed({shape})"


def svc_accuracy(k_train, y_train, k_test, y_test, C: float) -> float:
    """libsvm's accuracy (a fraction) at one ``C`` on a precomputed kernel."""
    model = SVC(kernel="precomputed", C=C).fit(k_train, y_train)
    return float(np.mean(model.predict(k_test) == y_test))


class KernelSVM:
    """An SVM on precomputed kernels of each setting, optionally Krein-treated per training part.

    Args:
        settings: ``{key: W or Precomputed}``, already checked (:mod:`~mwsp_torch.evaluation.validation`).
        svm (str): ``"svc"`` (the kernel as it is) or ``"krein"`` (its spectrum treated, ``krein``).
        krein (str): ``"flip"`` or ``"clip"`` (:func:`~mwsp_torch.kernel.krein_projector`).
        solver (str): ``"libsvm"`` or ``"path"`` (:data:`~mwsp_torch.svm.SVM_SOLVERS`).
    """

    def __init__(self, settings: Mapping, svm: str = "svc", krein: str = "flip", solver: str = "libsvm") -> None:
        if svm not in SVMS:
            raise ValueError(f"svm must be one of {SVMS}, got {svm!r}")
        if krein not in KREIN_MODES:
            raise ValueError(f"krein must be one of {KREIN_MODES}, got {krein!r}")
        if solver not in SVM_SOLVERS:
            raise ValueError(f"svm_solver must be one of {SVM_SOLVERS}, got {solver!r}")
        self.svm, self.krein, self.solver = svm, krein, solver
        self.settings = dict(settings)

    @property
    def fits_whole_grid(self) -> bool:
        """Whether one call scores every ``C`` (the path solver), so a split is skipped only
        when no ``C`` can still win."""
        return self.solver == "path"

    def params(self, key, lams: Sequence) -> tuple:
        """A setting's own grid: ``lams`` for a W, ``(None,)`` for a :class:`Precomputed` kernel."""
        return (None,) if isinstance(self.settings[key], Precomputed) else tuple(lams)

    def block(self, key, param, rows: np.ndarray, cols: np.ndarray, fold: int = 0) -> np.ndarray:
        """The raw kernel of ``key`` at ``param`` on ``rows x cols``."""
        value = self.settings[key]
        if isinstance(value, Precomputed):
            return np.asarray(value.matrix(fold)[np.ix_(rows, cols)], dtype=np.float64)
        return laplacian_kernel(value[np.ix_(rows, cols)], param)

    def inner(self, key, param, train: np.ndarray, splits: list, fold: int = 0):
        """``(k_fit, k_valid)`` for each inner split of the training part ``train``, as
        :meth:`fold` treats an outer fold: a Krein projector comes from the inner training
        graphs alone, so the graphs a split validates on never shape the kernel it trains on.
        Yielded one split at a time (``svc``: slices of one kernel, the same values)."""
        if self.svm == "krein":
            for inner_train, inner_valid in splits:
                yield self.fold(key, param, train[inner_train], train[inner_valid], fold)
            return
        k_train = self.block(key, param, train, train, fold)
        for inner_train, inner_valid in splits:
            yield k_train[np.ix_(inner_train, inner_train)], k_train[np.ix_(inner_valid, inner_train)]

    def fold(self, key, param, train: np.ndarray, test: np.ndarray, fold: int = 0) -> tuple[np.ndarray, np.ndarray]:
        """``(k_train, k_test)`` of an outer fold (or of any training and scored part)."""
        k_train = self.block(key, param, train, train, fold)
        k_test = self.block(key, param, test, train, fold)
        if self.svm == "krein":
            projector = krein_projector(k_train, self.krein)
            k_train, k_test = k_train @ projector, k_test @ projector
        return k_train, k_test

    def accuracies(self, k_fit, y_fit, k_score, y_score, Cs) -> np.ndarray:
        """The accuracy (fractions) of the SVM at each ``C``: the path solver takes the whole
        grid in one call, libsvm one fit a ``C``."""
        if self.solver == "path":
            return accuracy_path(k_fit, y_fit, k_score, y_score, Cs)
        return np.array([svc_accuracy(k_fit, y_fit, k_score, y_score, C) for C in Cs])

    def test(self, key, param, C: float, y: np.ndarray, train: np.ndarray, test: np.ndarray, fold: int = 0):
        """The chosen candidate fitted on ``train`` and scored on ``test``: ``(accuracy in
        percent, predictions, {})``."""
        k_train, k_test = self.fold(key, param, train, test, fold)
        if self.solver == "path":
            predictions = predict_path(k_train, y[train], k_test, [C])[0]
        else:
            predictions = SVC(kernel="precomputed", C=C).fit(k_train, y[train]).predict(k_test)
        return 100.0 * float(np.mean(predictions == y[test])), predictions, {}

    @contextmanager
    def shared(self, n_jobs: int):
        """This learner with every matrix read from one memory-mapped copy when more than one
        process works (:func:`~mwsp_torch.evaluation.selection.memory_mapped`)."""
        arrays = {}
        for i, value in enumerate(self.settings.values()):
            matrices = value.matrices if isinstance(value, Precomputed) else [value]
            arrays.update({(i, j): m for j, m in enumerate(matrices)})
        with memory_mapped(arrays, n_jobs) as mapped:
            settings = {}
            for i, (key, value) in enumerate(self.settings.items()):
                if isinstance(value, Precomputed):
                    matrices = [mapped[(i, j)] for j in range(len(value.matrices))]
                    settings[key] = Precomputed(matrices if value.per_fold else matrices[0])
                else:
                    settings[key] = mapped[(i, 0)]
            yield KernelSVM(settings, self.svm, self.krein, self.solver)
