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
its callable kernels work on vectors, not graphs. The transport is :class:`MWSP`'s own.

``K`` is not positive semi-definite in general (SPEC section 4): eigenvalues of ``K(L, L)``
at or below ``floor = eigen_tol * max eigenvalue`` are dropped (their directions get zero
weight), as a pseudo-inverse square root would; how many were dropped is in
``dropped_eigenvalues_``.
"""

from __future__ import annotations

import numpy as np
from sklearn.base import BaseEstimator, TransformerMixin
from sklearn.utils.validation import check_is_fitted

from mwsp_torch._checks import is_integer, is_positive_number
from mwsp_torch.estimator import MWSP

LANDMARK_METHODS = ("random", "kmeans++")


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
        n_components (int): number of landmark graphs ``m``, ``1 <= m <= n`` training graphs
            (default ``100``).
        landmarks (str): ``"random"`` (``m`` training graphs drawn uniformly without
            replacement) or ``"kmeans++"`` (k-means++ seeding in the kernel's feature space:
            each next landmark drawn with probability proportional to
            ``min_l (2 - 2 K(G, l))``, the squared feature-space distance to the nearest
            landmark so far; it solves the same ``n x m`` problems as the features, in ``m``
            rounds) (default ``"random"``).
        d, k, lam, paths, labels, n_jobs, exact_engine, device, progress: as in :class:`MWSP`
            (defaults ``2``, ``0``, ``1.0``, ``"split"``, ``"auto"``, ``-1``, ``"auto"``,
            ``"cpu"``, ``False``). The transport is always exact.
        eigen_tol (float): eigenvalues of ``K(L, L)`` at or below ``eigen_tol`` times the
            largest are dropped (default ``1e-12``).
        random_state (int, optional): seed of the landmark draw (default ``None``: fresh).

    Attributes:
        landmark_indices_ (np.ndarray): ``[m]`` indices of the landmarks among the training graphs.
        model_ (MWSP): the MWSP model fitted on the landmarks.
        normalization_ (np.ndarray): ``[m, m]`` matrix ``U S^(-1/2) U^T`` over the kept eigenvalues.
        eigenvalues_ (np.ndarray): ``[m]`` eigenvalues of ``K(L, L)``, ascending.
        dropped_eigenvalues_ (int): how many were at or below the floor (negative ones included).
    """

    def __init__(
        self,
        n_components: int = 100,
        landmarks: str = "random",
        d: int = 2,
        k: int = 0,
        lam: float = 1.0,
        paths: str = "split",
        labels: str = "auto",
        n_jobs: int = -1,
        exact_engine: str = "auto",
        device: str = "cpu",
        eigen_tol: float = 1e-12,
        random_state: int | None = None,
        progress: bool = False,
    ) -> None:
        self.n_components = n_components
        self.landmarks = landmarks
        self.d = d
        self.k = k
        self.lam = lam
        self.paths = paths
        self.labels = labels
        self.n_jobs = n_jobs
        self.exact_engine = exact_engine
        self.device = device
        self.eigen_tol = eigen_tol
        self.random_state = random_state
        self.progress = progress

    def _mwsp(self) -> MWSP:
        return MWSP(
            d=self.d,
            k=self.k,
            lam=self.lam,
            paths=self.paths,
            labels=self.labels,
            n_jobs=self.n_jobs,
            exact_engine=self.exact_engine,
            device=self.device,
            progress=self.progress,
        )

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
        normalization, eigenvalues, dropped = nystroem_normalization(model.kernel(), self.eigen_tol)
        self.landmark_indices_ = indices
        self.model_ = model
        self.eigenvalues_ = eigenvalues
        self.dropped_eigenvalues_ = dropped
        self.normalization_ = normalization
        return self

    def _kmeans_plus_plus(self, graphs, rng: np.random.Generator) -> np.ndarray:
        """k-means++ seeding with the kernel's feature-space distance ``2 - 2 K``."""
        n = len(graphs)
        chosen = [int(rng.integers(n))]
        nearest = np.full(n, np.inf)
        for _ in range(self.n_components - 1):
            model = self._mwsp().fit([graphs[chosen[-1]]])
            sq = 2.0 - 2.0 * model.transform(graphs)[:, 0]
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
        """Features ``[n, m]`` of ``graphs``: ``K(graphs, L) @ normalization_``."""
        check_is_fitted(self, "normalization_")
        return self.model_.transform(graphs) @ self.normalization_
