"""From distances to kernels: ``K = exp(-lam W)`` and its Krein-space treatments (SPEC section 4).

``K`` is not positive semi-definite in general. ``svm="svc"`` uses it as it is
(what the authors' code does); ``"flip"`` and ``"clip"`` replace the training
kernel's eigenvalues by their absolute values or their positive parts (Loosli
et al. 2015). The same spectral map ``P = U f(Lambda) Lambda^-1 U^T``, written
so that ``K_train P`` is the treated training kernel, is applied to test rows.
"""

from __future__ import annotations

import numpy as np

KREIN_MODES = ("flip", "clip")


def laplacian_kernel(distances: np.ndarray, lam: float) -> np.ndarray:
    """``exp(-lam * W)`` elementwise.

    Args:
        distances (np.ndarray): W, any shape.
        lam (float): ``lam > 0``.
    """
    if lam <= 0:
        raise ValueError(f"lam must be > 0, got {lam}")
    return np.exp(-lam * np.asarray(distances, dtype=np.float64))


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
    sym = (train_kernel + train_kernel.T) / 2
    eigvals, eigvecs = np.linalg.eigh(sym)
    scale = np.sign(eigvals) if mode == "flip" else (eigvals > 0).astype(np.float64)
    return (eigvecs * scale) @ eigvecs.T
