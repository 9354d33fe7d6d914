"""Which exact engine runs: the choice behind ``exact_engine="auto"``, and the warnings that
say when a request cannot be met as asked.

The engines themselves are in :mod:`~mwsp_torch.transport.exact` (CPU) and
:mod:`~mwsp_torch.transport.gpu`; this module only decides between them, so the decision
is a pure function tested in every combination without a GPU.
"""

from __future__ import annotations

import importlib

__all__ = [
    "EXACT_ENGINES",
    "THREAD_TABLE_BYTES",
    "ExactEngineFallbackWarning",
    "SinkhornOnCPUWarning",
    "build_cpu_kernels",
    "choose_exact_engine",
    "numba_cuda_available",
]

EXACT_ENGINES = ("auto", "compiled", "thread")

#: The largest row-to-row distance table (bytes) that ``exact_engine="auto"`` gives the thread
#: engine (:func:`transport.thread_exact_distances`' own default limit); a larger bank goes to
#: the compiled engine, which needs no table.
THREAD_TABLE_BYTES = 1 << 30


class SinkhornOnCPUWarning(UserWarning):
    """``solver="sinkhorn"`` on a CPU, where the exact solver is both faster and exact."""


class ExactEngineFallbackWarning(UserWarning):
    """``exact_engine="auto"`` on a CUDA device it cannot use: the compiled CPU engine runs instead."""


def choose_exact_engine(
    device,
    cuda_available: bool,
    numba_cuda_available: bool,
    checkpoint: bool = False,
    table_fits: bool = True,
) -> str:
    """The exact engine that ``exact_engine="auto"`` runs.

    The thread engine (one pair per CUDA thread) on a CUDA device that both torch and numba
    can use (faster there than the compiled engine on the same machine's CPU threads:
    ``docs/gpu.md``), the compiled CPU engine otherwise. The compiled engine is kept where
    only it can do the job: with a ``checkpoint`` (the only engine that keeps tiles), or
    when the thread engine's row-to-row distance table would not fit
    :data:`THREAD_TABLE_BYTES` (datasets of large graphs).

    Args:
        device (str or torch.device): ``MWSP``'s ``device``.
        cuda_available (bool): torch sees a CUDA device.
        numba_cuda_available (bool): ``numba.cuda`` imports and sees a CUDA device.
        checkpoint (bool): a checkpoint directory is set (default ``False``).
        table_fits (bool): the thread engine's distance table fits (default ``True``).

    Returns:
        ``"thread"`` or ``"compiled"``.
    """
    import torch

    on_cuda = torch.device(device).type == "cuda"
    if on_cuda and cuda_available and numba_cuda_available and not checkpoint and table_fits:
        return "thread"
    return "compiled"


def numba_cuda_available() -> bool:
    """Whether ``numba.cuda`` imports and sees a usable CUDA device (never raises: a numba
    CUDA that fails to import, as against a numpy it does not support, counts as absent)."""
    try:
        cuda = importlib.import_module("numba.cuda")
        return bool(cuda.is_available())
    except Exception:
        return False


def build_cpu_kernels() -> None:
    """Build (about a minute, once per machine and source) or load the CPU kernels compiled
    ahead of time, now rather than inside the first fit: ``fit`` calls it before its timer
    starts, and the command line before its progress bars, so the build's minute is
    never counted as the features' time. A build that fails falls back to numba's JIT with
    a warning (``MWSP_KERNELS`` decides; see ``docs/engines.md``)."""
    from mwsp_torch.compiled import extension

    extension()
