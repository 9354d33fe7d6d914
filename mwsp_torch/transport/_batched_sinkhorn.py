"""Geomloss's debiased Sinkhorn loop on batches of padded cost tensors (the ``"fused"`` backend).

Why our own loop and not geomloss's: ``geomloss.SamplesLoss`` takes point coordinates, so
each batch needs its pairs' rows as dense vectors (MWSP rows have thousands of
columns) and recomputes every cost matrix; and it solves the two debiasing problems
``OT_eps(a, a)`` and ``OT_eps(b, b)`` again for every pair, which held it to a few
thousand NCI1 pairs per second on an H100 (``docs/performance.md``). Here the cost
matrices are gathered from one row-to-row distance table, the debiasing terms are
computed once per graph, and batches hold as many pairs as memory allows.

The arithmetic is geomloss's own (``geomloss._legacy``, tensorized backend, ``p=1``,
balanced, debiased): the epsilon schedule of :func:`epsilon_schedule`, symmetric
averaged updates at every epsilon, one last extrapolation step at ``blur``, weights of 0
logged as ``-1e5``, and the cost ``sqrt(max(|x - y|^2, 1e-8))``. ``tests/test_transport_sinkhorn.py``
checks it against ``SamplesLoss`` to 1e-9 relative in float64.
"""

from __future__ import annotations

import numpy as np
import torch

LOG_ZERO = -100000.0  # geomloss's log of a zero weight


def epsilon_schedule(diameter: float, blur: float, scaling: float) -> list[float]:
    """Temperatures of geomloss's epsilon-scaling for ``p=1``: from ``diameter`` down to ``blur``."""
    return [diameter] + [float(np.exp(e)) for e in np.arange(np.log(diameter), np.log(blur), np.log(scaling))] + [blur]


def log_weights(weights: torch.Tensor) -> torch.Tensor:
    """``log`` of the weights, ``-1e5`` where a weight is 0 (padding), as geomloss."""
    return torch.where(weights > 0, weights.clamp_min(1e-300).log(), torch.full_like(weights, LOG_ZERO))


def _softmin_rows(eps: float, cost: torch.Tensor, h: torch.Tensor) -> torch.Tensor:
    """``f_i = -eps log sum_j exp(h_j - C_ij / eps)`` for ``cost [B, m, n]``, ``h [B, n]``."""
    return -eps * (h[:, None, :] - cost / eps).logsumexp(2)


def _softmin_cols(eps: float, cost: torch.Tensor, h: torch.Tensor) -> torch.Tensor:
    """``g_j = -eps log sum_i exp(h_i - C_ij / eps)`` for ``cost [B, m, n]``, ``h [B, m]``."""
    return -eps * (h[:, :, None] - cost / eps).logsumexp(1)


def self_terms(cost: torch.Tensor, weights: torch.Tensor, eps_list: list[float]) -> torch.Tensor:
    """``sum_i a_i f_i`` of the symmetric problem ``a <-> a``: half of ``OT_eps(a, a)``.

    Args:
        cost: ``[B, m, m]`` costs among each measure's points.
        weights: ``[B, m]`` masses (0 on padding).
        eps_list: the temperatures (:func:`epsilon_schedule`).
    """
    log_w = log_weights(weights)
    f = _softmin_rows(eps_list[0], cost, log_w)
    for eps in eps_list:
        f = 0.5 * (f + _softmin_rows(eps, cost, log_w + f / eps))
    eps = eps_list[-1]
    f = _softmin_rows(eps, cost, log_w + f / eps)
    return (weights * f).sum(1)


def cross_terms(cost: torch.Tensor, a: torch.Tensor, b: torch.Tensor, eps_list: list[float]) -> torch.Tensor:
    """``sum_i a_i f_i + sum_j b_j g_j`` of the problem ``a <-> b``: ``OT_eps(a, b)``.

    Args:
        cost: ``[B, m, n]`` costs from ``a``'s points to ``b``'s.
        a, b: ``[B, m]`` and ``[B, n]`` masses (0 on padding).
        eps_list: the temperatures (:func:`epsilon_schedule`).
    """
    log_a, log_b = log_weights(a), log_weights(b)
    g = _softmin_cols(eps_list[0], cost, log_a)
    f = _softmin_rows(eps_list[0], cost, log_b)
    for eps in eps_list:
        f_new = _softmin_rows(eps, cost, log_b + g / eps)
        g_new = _softmin_cols(eps, cost, log_a + f / eps)
        f, g = 0.5 * (f + f_new), 0.5 * (g + g_new)
    eps = eps_list[-1]
    f, g = _softmin_rows(eps, cost, log_b + g / eps), _softmin_cols(eps, cost, log_a + f / eps)
    return (a * f).sum(1) + (b * g).sum(1)
