"""Nystroem features for the MWSP kernel: ``n x m`` distances instead of ``n x n``.

All-pairs MWSP grows as ``n^2`` transport problems. Nystroem's method (Williams and Seeger
2001) picks ``m`` landmark graphs, solves only the ``n x m`` problems between every graph and
the landmarks, and maps each graph ``G`` to

    ``phi(G) = K(G, L) U max(S, floor)^(-1/2) U^T``   (rows ``U S U^T = K(L, L)``, eigenvalues)

so that ``phi(G) . phi(H)`` approximates ``K(G, H) = exp(-lam W(G, H))``, exactly where ``G``
or ``H`` is a landmark (and everywhere at ``m = n`` when ``K`` is positive definite). The
features feed a linear SVM or logistic regression.

Why our own transformer: scikit-learn's ``Nystroem(kernel="precomputed")`` needs the full
``n x n`` kernel and fails when ``n_components < n_samples`` (scikit-learn issue 29353);
its callable kernels work on vectors, not graphs. The kernel is an :class:`MWSP` given as
``mwsp``, and the transport its own.

``K`` is not positive semi-definite in general (``docs/definition.md``, section 4): eigenvalues of ``K(L, L)``
at or below ``floor = eigen_tol * max eigenvalue`` are dropped (their directions get zero
weight), as a pseudo-inverse square root would; how many were dropped is in
``dropped_eigenvalues_``.

**Several scales from the same distances.** ``lam`` may be a tuple of scales: the features
are then the blocks of every scale side by side, ``[phi_lam1(G), phi_lam2(G), ...]``, whose
dot products approximate the sum kernel ``sum_lam exp(-lam W)``. The transport, the costly
part, is the same ``n x m`` problems; only the exponentials and the ``m x m`` normalizations
are per scale. What several scales gain under the nested protocol, against the full kernel:
``benchmarks/README.md``, Nystrom section.
"""

from __future__ import annotations

import numpy as np
from sklearn.base import BaseEstimator, TransformerMixin
from sklearn.utils.validation import check_is_fitted

from mwsp_torch._checks import is_integer, is_positive_number
from mwsp_torch.estimator import MWSP
from mwsp_torch.kernel import laplacian_kernel

__all__ = ["LANDMARK_METHODS", "MWSPNystroem", "lam_scales", "nystroem_normalization", "scale_features"]

LANDMARK_METHODS = ("random", "kmeans++")


def lam_scales(lam, name: str = "lam") -> tuple[float, ...]:
    """``lam`` as the tuple of its scales: a number is one scale, a tuple or list of distinct
    numbers several (Nystroem features of every scale side by side).

    Raises:
        ValueError: naming ``name``, for anything else (an empty or repeated tuple, a value
            that is not a finite number > 0).
    """
    if not isinstance(lam, (tuple, list)):
        if not is_positive_number(lam):
            raise ValueError(f"{name} must be a number > 0 or a tuple or list of them, got {lam!r}")
        return (float(lam),)
    if not lam:
        raise ValueError(f"{name} is an empty tuple of scales: give at least one")
    for i, value in enumerate(lam):
        if not is_positive_number(value):
            raise ValueError(f"{name}[{i}] must be a number > 0 (a scale), got {value!r}")
    scales = tuple(float(value) for value in lam)
    if len(set(scales)) != len(scales):
        raise ValueError(f"{name} {list(scales)} repeats a scale: its features would count twice")
    return scales


def scale_features(landmark_distances: np.ndarray, distances: np.ndarray, lam, eigen_tol: float = 1e-12):
    """Nystroem features of every scale of ``lam`` side by side, from W alone.

    Args:
        landmark_distances (np.ndarray): ``[m, m]`` W between the landmarks.
        distances (np.ndarray): ``[n, m]`` W from the graphs to featurize to the landmarks.
        lam: a scale or a tuple of scales (:func:`lam_scales`).
        eigen_tol (float): :func:`nystroem_normalization`'s floor.

    Returns:
        ``(features [n, m * scales], normalizations [scales, m, m], eigenvalues [scales, m],
        dropped)``, ``dropped`` summed over the scales.
    """
    blocks, normalizations, spectra, dropped = [], [], [], 0
    for scale in lam_scales(lam):
        normalization, eigenvalues, lost = nystroem_normalization(
            laplacian_kernel(landmark_distances, scale), eigen_tol
        )
        blocks.append(laplacian_kernel(distances, scale) @ normalization)
        normalizations.append(normalization)
        spectra.append(eigenvalues)
        dropped += lost
    return np.hstack(blocks), np.stack(normalizations), np.stack(spectra), dropped


def nystroem_normalization(kernel: np.ndarray, eigen_tol: float = 1e-12) -> tuple[np.ndarray, np.ndarray, int]:
    """``U S^(-1/2) U^T`` of the landmarks' kernel ``U S U^T``, over the eigenvalues above
    ``eigen_tol`` times the largest (the others' directions get zero weight).

    Args:
        kernel (np.ndarray): ``[m, m]`` symmetric ``K(L, L)``.
        eigen_tol (float): the relative floor.

    Returns:
        ``(normalization [m, m], eigenvalues [m] ascending, number dropped)``.

    Raises:
        ValueError: when no eigenvalue is above the floor.
    """
    eigenvalues, vectors = np.linalg.eigh(kernel)
    floor = eigen_tol * max(float(eigenvalues[-1]), 0.0)
    kept = eigenvalues > floor
    if not kept.any():
        raise ValueError("K(L, L) has no positive eigenvalue: no Nystroem features exist for these landmarks")
    scaled = vectors[:, kept] / np.sqrt(eigenvalues[kept])
    return scaled @ vectors[:, kept].T, eigenvalues, int((~kept).sum())


class MWSPNystroem(TransformerMixin, BaseEstimator):
    """MWSP kernel features from ``m`` landmark graphs (a scikit-learn transformer).

    Args:
        mwsp (MWSP, optional): the kernel, whose W to the landmarks the features are made of:
            its parameters are nested ones of this transformer (``mwsp__d``) (default
            ``None``: ``MWSP()``).
        n_components (int): number of landmark graphs ``m``, ``1 <= m <= n`` training graphs
            (default ``100``).
        landmarks (str): ``"random"`` (``m`` training graphs drawn uniformly without
            replacement) or ``"kmeans++"`` (k-means++ seeding in the kernel's feature space:
            each next landmark drawn with probability proportional to
            ``min_l (2 - 2 K(G, l))``, the squared feature-space distance to the nearest
            landmark so far; it solves the same ``n x m`` problems as the features, in ``m``
            rounds) (default ``"random"``).
        lam: the kernel's scale, or a tuple or list of scales: ``m`` features for each, side by
            side, from the same distances (module docstring) (default ``None``: ``mwsp``'s
            ``lam``).
        eigen_tol (float): eigenvalues of ``K(L, L)`` at or below ``eigen_tol`` times the
            largest are dropped (default ``1e-12``).
        random_state (int, optional): seed of the landmark draw (default ``None``: fresh).

    Attributes:
        landmark_indices_ (np.ndarray): ``[m]`` indices of the landmarks among the training graphs.
        model_ (MWSP): a copy of ``mwsp`` fitted on the landmarks.
        normalization_ (np.ndarray): ``[m, m]`` matrix ``U S^(-1/2) U^T`` over the kept
            eigenvalues; ``[scales, m, m]``, one per scale, when ``lam`` is a tuple.
        eigenvalues_ (np.ndarray): ``[m]`` eigenvalues of ``K(L, L)``, ascending (``[scales, m]``
            for a tuple).
        dropped_eigenvalues_ (int): how many were at or below the floor (negative ones
            included), over all scales.
        lams_ (tuple): the scales fitted, which ``transform`` uses (a later ``set_params``
            needs a new ``fit``).

    Examples:
        >>> from mwsp_torch import MWSP, MWSPNystroem, make_csl
        >>> graphs, y = make_csl(graphs_per_class=2)
        >>> nystroem = MWSPNystroem(mwsp=MWSP(d=3, lam=0.1), n_components=5, random_state=0)
        >>> nystroem.fit(graphs).transform(graphs).shape
        (20, 5)
    """

    def __init__(
        self,
        mwsp: MWSP | None = None,
        *,
        n_components: int = 100,
        landmarks: str = "random",
        lam=None,
        eigen_tol: float = 1e-12,
        random_state: int | None = None,
    ) -> None:
        self.mwsp = mwsp
        self.n_components = n_components
        self.landmarks = landmarks
        self.lam = lam
        self.eigen_tol = eigen_tol
        self.random_state = random_state

    def _scales(self) -> tuple[float, ...]:
        """The scales: ``lam``'s, or (``lam=None``) the kernel's own ``lam``."""
        if self.lam is None:
            return lam_scales(self._kernel().lam, "mwsp.lam")
        return lam_scales(self.lam)

    def _kernel(self) -> MWSP:
        return MWSP() if self.mwsp is None else self.mwsp

    def _mwsp(self) -> MWSP:
        """A fresh copy of the kernel at the first scale (W does not depend on it; the scales
        apply here), outside any clone family: the landmarks' fits are not worth caching."""
        kernel = self._kernel()
        params = {**kernel.get_params(deep=False), "lam": self._scales()[0]}
        return type(kernel)(**params)

    def _check_params(self, n: int) -> None:
        m = self.n_components
        if not is_integer(m) or m < 1:
            raise ValueError(f"n_components must be an integer >= 1, got {m!r}")
        if m > n:
            raise ValueError(
                f"n_components={m} landmarks cannot be drawn from {n} training graphs: pass n_components <= {n}"
            )
        if self.landmarks not in LANDMARK_METHODS:
            raise ValueError(f"landmarks must be one of {LANDMARK_METHODS}, got {self.landmarks!r}")
        if not is_positive_number(self.eigen_tol) or self.eigen_tol >= 1:
            raise ValueError(f"eigen_tol must be in (0, 1), got {self.eigen_tol!r}")
        if self.random_state is not None and not (is_integer(self.random_state) and self.random_state >= 0):
            raise ValueError(f"random_state must be None or an integer >= 0, got {self.random_state!r}")
        if self.mwsp is not None and not isinstance(self.mwsp, MWSP):
            raise ValueError(f"mwsp must be an MWSP or None, got {type(self.mwsp).__name__}")
        self._scales()
        self._mwsp().validate_params()

    def fit(self, graphs, y=None) -> MWSPNystroem:
        """Pick the landmarks among ``graphs`` and fit the kernel on them.

        Args:
            graphs: a list of PyG ``Data`` or a PyG dataset (the training graphs).
            y: ignored.

        Returns:
            self
        """
        n = len(graphs)
        self._check_params(n)
        rng = np.random.default_rng(self.random_state)
        if self.landmarks == "random":
            indices = np.sort(rng.choice(n, size=self.n_components, replace=False))
        else:
            indices = self._kmeans_plus_plus(graphs, rng)
        model = self._mwsp().fit([graphs[int(i)] for i in indices])
        w = model.distances_
        lams = self._scales()
        _, normalization, eigenvalues, dropped = scale_features(w, w[:0], lams, self.eigen_tol)
        if not isinstance(self.lam, (tuple, list)):
            normalization, eigenvalues = normalization[0], eigenvalues[0]
            lams = lams[0]
        self.lams_ = lams
        self.landmark_indices_ = indices
        self.model_ = model
        self.eigenvalues_ = eigenvalues
        self.dropped_eigenvalues_ = dropped
        self.normalization_ = normalization
        return self

    def _kmeans_plus_plus(self, graphs, rng: np.random.Generator) -> np.ndarray:
        """k-means++ seeding with the kernel's feature-space distance ``2 - 2 K`` (summed over
        the scales of a tuple ``lam``: the distance between side-by-side features)."""
        n = len(graphs)
        chosen = [int(rng.integers(n))]
        nearest = np.full(n, np.inf)
        scales = self._scales()
        for _ in range(self.n_components - 1):
            model = self._mwsp().fit([graphs[chosen[-1]]])
            w = model.cross_distances(graphs)[:, 0]
            sq = sum(2.0 - 2.0 * laplacian_kernel(w, scale) for scale in scales)
            nearest = np.minimum(nearest, np.maximum(sq, 0.0))
            nearest[chosen] = 0.0
            total = nearest.sum()
            if total > 0:
                chosen.append(int(rng.choice(n, p=nearest / total)))
            else:  # every graph sits on a landmark already: the rest uniformly among the unchosen
                rest = np.setdiff1d(np.arange(n), chosen)
                chosen.append(int(rng.choice(rest)))
        return np.asarray(chosen, dtype=np.int64)

    def transform(self, graphs) -> np.ndarray:
        """Features ``[n, m]`` of ``graphs``: ``K(graphs, L) @ normalization_`` (``[n, m *
        scales]`` for a tuple ``lam``: each scale's block in the order of ``lam``)."""
        check_is_fitted(self, "normalization_")
        w = self.model_.cross_distances(graphs)
        normalizations = self.normalization_.reshape(-1, *self.normalization_.shape[-2:])
        scales = lam_scales(self.lams_)
        return np.hstack([laplacian_kernel(w, s) @ n for s, n in zip(scales, normalizations, strict=True)])
