"""From distances to kernels: ``K = exp(-lam W)`` and its Krein-space treatments.

``K`` is not positive semi-definite in general. ``svm="svc"`` uses it as it is
(what the authors' code does); ``"flip"`` and ``"clip"`` replace the training
kernel's eigenvalues by their absolute values or their positive parts (Loosli
et al. 2015). The same spectral map ``P = U f(Lambda) Lambda^-1 U^T``, written
so that ``K_train P`` is the treated training kernel, is applied to test rows.
"""

from __future__ import annotations

import numpy as np

from mwsp_torch._checks import is_positive_number

__all__ = ["KREIN_MODES", "SYMMETRY_TOL", "krein_projector", "laplacian_kernel"]

KREIN_MODES = ("flip", "clip")

#: How far from symmetric (relative to the largest entry) a training kernel may be, from
#: rounding, before :func:`krein_projector` refuses it rather than symmetrising it.
SYMMETRY_TOL = 1e-10


def laplacian_kernel(distances: np.ndarray, lam: float) -> np.ndarray:
    """``exp(-lam * W)`` elementwise.

    Args:
        distances (np.ndarray): W, any shape.
        lam (float): ``lam > 0``.
    """
    if not is_positive_number(lam):
        raise ValueError(f"lam must be > 0 and finite, got {lam!r}")
    distances = np.asarray(distances, dtype=np.float64)
    bad = ~np.isfinite(distances) | (distances < 0)
    if bad.any():
        where = np.unravel_index(int(np.argmax(bad)), distances.shape)
        raise ValueError(
            f"distances must be finite and >= 0, got {float(distances[where])} at index {tuple(int(i) for i in where)}"
        )
    return np.exp(-lam * distances)


def krein_projector(train_kernel: np.ndarray, mode: str) -> np.ndarray:
    """Matrix ``P`` with ``K P`` the flipped or clipped kernel.

    Args:
        train_kernel (np.ndarray): symmetric ``[n, n]`` kernel.
        mode (str): ``"flip"`` (``|Lambda|``) or ``"clip"`` (``max(Lambda, 0)``).

    Returns:
        ``[n, n]`` matrix; apply as ``K_train @ P`` and ``K_test @ P``.
    """
    if mode not in KREIN_MODES:
        raise ValueError(f"mode must be one of {KREIN_MODES}, got {mode!r}")
    train_kernel = np.asarray(train_kernel, dtype=np.float64)
    if train_kernel.ndim != 2 or train_kernel.shape[0] != train_kernel.shape[1]:
        raise ValueError(f"train_kernel must be a square matrix, got shape {list(train_kernel.shape)}")
    if not np.all(np.isfinite(train_kernel)):
        i, j = np.argwhere(~np.isfinite(train_kernel))[0]
        raise ValueError(f"train_kernel must be finite, got {train_kernel[i, j]} at K[{i}, {j}]")
    asymmetry = float(np.max(np.abs(train_kernel - train_kernel.T), initial=0.0))
    if not asymmetry <= SYMMETRY_TOL * max(float(np.max(np.abs(train_kernel), initial=0.0)), 1.0):
        raise ValueError(f"train_kernel must be symmetric, but K and K^T differ by up to {asymmetry:.3g}")
    sym = (train_kernel + train_kernel.T) / 2  # rounding-level asymmetry only
    eigvals, eigvecs = np.linalg.eigh(sym)
    scale = np.sign(eigvals) if mode == "flip" else (eigvals > 0).astype(np.float64)
    return (eigvecs * scale) @ eigvecs.T
