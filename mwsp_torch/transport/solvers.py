"""W between graphs' measures through one entry point: :func:`distances`, the solver an argument.

The solver is an options object: :class:`Exact` (the transportation simplex in float64, equal
to POT's network simplex to 1e-9, by one of several engines) or :class:`Sinkhorn` (geomloss's
entropic approximation, its error measured by ``MWSP.fit``). Which engine runs is decided here
and nowhere else: an explicit ``Exact(engine=...)``, or for ``"auto"``
:func:`~mwsp_torch.transport.engines.choose_exact_engine` on what the machine offers; a Dask
``client`` sends the compiled engine's tiles to its workers (:mod:`mwsp_torch.distributed`,
imported only then). The estimator, its Nystroem features, the cache of W and the command line
all reach the engines through :func:`distances`.

The options objects follow scikit-learn's parameter protocol (``get_params``, ``set_params``),
so ``clone`` copies them and a grid search sets them as nested parameters of the estimator
(``GridSearchCV(MWSP(solver=Sinkhorn()), {"solver__blur": [0.01, 0.05]})``).
"""

from __future__ import annotations

import dataclasses
import os
import warnings
from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from mwsp_torch._checks import ParameterError, check_parameter
from mwsp_torch.transport.engines import (
    THREAD_TABLE_BYTES,
    ExactEngineFallbackWarning,
    choose_exact_engine,
    numba_cuda_available,
)
from mwsp_torch.transport.exact import exact_distances
from mwsp_torch.transport.gpu import BATCHED_REMOVED, thread_exact_distances
from mwsp_torch.transport.measures import SupportSet
from mwsp_torch.transport.sinkhorn import sinkhorn_diameter, sinkhorn_distances
from mwsp_torch.transport.store import checkpoint_directory

__all__ = ["Exact", "Sinkhorn", "check_execution", "distances", "solver_options"]


class _Options:
    """scikit-learn's parameter protocol over a dataclass's fields, and their check against
    :data:`mwsp_torch._checks.PARAMETERS`."""

    name: ClassVar[str]

    def get_params(self, deep: bool = True) -> dict:
        return {field.name: getattr(self, field.name) for field in dataclasses.fields(self)}

    def set_params(self, **params) -> _Options:
        for name, value in params.items():
            if name not in self.get_params():
                raise ValueError(f"{type(self).__name__} has no option {name!r}: it has {sorted(self.get_params())}")
            setattr(self, name, value)
        return self

    def validate(self) -> None:
        """Refuse an option outside what it takes (a :class:`~mwsp_torch._checks.ParameterError`
        naming it)."""
        if getattr(self, "engine", None) == "batched":
            raise ParameterError("engine", f"'batched': {BATCHED_REMOVED}")
        for name, value in self.get_params().items():
            check_parameter(name, value)


@dataclass
class Exact(_Options):
    """The exact W: a transportation simplex in float64, equal to POT's network simplex to 1e-9.

    Args:
        engine (str): which engine solves the pairs (default ``"auto"``; all give W to 1e-9):

            - ``"auto"``: ``"thread"`` on a CUDA ``device`` that torch and numba can use, else
              ``"compiled"`` (also with a ``checkpoint`` or a ``client``, or a row bank too
              large for the thread engine's table: :func:`~mwsp_torch.transport.engines.choose_exact_engine`).
              A CUDA ``device`` it cannot use warns (:class:`~mwsp_torch.transport.engines.ExactEngineFallbackWarning`).
            - ``"compiled"``: the numba CPU engine on ``n_jobs`` threads, whatever ``device`` is;
              the only one that keeps a ``checkpoint`` or runs on a Dask ``client``.
            - ``"thread"``: one pair per CUDA thread on ``device``
              (:func:`~mwsp_torch.transport.thread_exact_distances`); pairs whose supports hold
              more than 63 points go to the compiled engine on the host meanwhile. On
              ``device="cpu"``, the same solver compiled for the CPU (how it is tested).

            ``"batched"`` (the torch batched simplex) was removed: naming it raises.

    Why each engine stays, and how fast each is: ``docs/engines.md``, ``docs/performance.md``.
    """

    name: ClassVar[str] = "exact"
    engine: str = "auto"


@dataclass
class Sinkhorn(_Options):
    """The Sinkhorn approximation of W (geomloss's epsilon-scaling, float64, any torch device).

    Args:
        blur (float): the entropic blur, in the units of the ground cost; smaller is closer
            to W and slower (default ``0.01``).
        scaling (float): the epsilon-scaling ratio, in (0, 1); closer to 1 is slower and more
            accurate (default ``0.99``).
        backend (str): :func:`~mwsp_torch.transport.sinkhorn_distances`' ``backend`` (default
            ``"auto"``: the fused torch loop when the row-to-row table fits, else geomloss's
            ``"tensorized"`` or ``"online"``); ``"triton"`` (experimental, CUDA) runs the fused
            loop as Triton kernels, equal to ``"fused"`` to 1e-9.
        check_pairs (int): ``MWSP.fit`` also solves this many random training pairs exactly
            and reports Sinkhorn's error on them in ``sinkhorn_error_`` (default ``64``;
            ``0``: not measured).

    ``blur`` and ``scaling`` decide W; ``backend`` and ``check_pairs`` do not. Sinkhorn pays on
    a GPU; on a CPU the exact solver is faster and exact. Its measured error and speed:
    ``benchmarks/README.md``.
    """

    name: ClassVar[str] = "sinkhorn"
    blur: float = 0.01
    scaling: float = 0.99
    backend: str = "auto"
    check_pairs: int = 64


def solver_options(solver) -> Exact | Sinkhorn:
    """``solver`` as an options object: ``"exact"`` and ``"sinkhorn"`` stand for ``Exact()`` and
    ``Sinkhorn()``; an :class:`Exact` or :class:`Sinkhorn` is checked and returned as it is.

    Raises:
        ParameterError: for anything else, or an option outside what it takes.
    """
    if isinstance(solver, (Exact, Sinkhorn)):
        solver.validate()
        return solver
    if isinstance(solver, str):
        check_parameter("solver", solver)
        return Exact() if solver == "exact" else Sinkhorn()
    raise ParameterError(
        "solver", f"must be one of ('exact', 'sinkhorn'), an Exact or a Sinkhorn, got {type(solver).__name__}"
    )


def check_execution(solver, device="cpu", checkpoint=None, client=None) -> None:
    """Refuse, before any work, what :func:`distances` could not run as asked: a ``checkpoint``
    or a ``client`` with another engine than the compiled one, a ``device`` that is no CPU or
    CUDA device, or a CUDA device that the engine asked for cannot use (the compiled engine
    runs on the CPU whatever ``device`` says, and ``"auto"`` falls back to it, warning).

    Raises:
        ParameterError: naming the parameter and what it needs.
    """
    import torch

    options = solver_options(solver)
    compiled = isinstance(options, Exact) and options.engine in ("auto", "compiled")
    if checkpoint is not None:
        checkpoint_directory(checkpoint)
        if not compiled:
            refused = f"solver={options.name!r}" if isinstance(options, Sinkhorn) else f"engine={options.engine!r}"
            raise ParameterError("checkpoint", f"is only kept by the compiled exact engine, not by {refused}")
    if client is not None:
        if not (isinstance(client, str) or callable(getattr(client, "submit", None))):
            raise ParameterError(
                "client", f"must be a distributed.Client or a scheduler address, got {type(client).__name__}"
            )
        if not compiled:
            raise ParameterError(
                "client",
                "runs the compiled exact engine's tiles on Dask workers: it needs Exact(engine='auto') or "
                f"Exact(engine='compiled'), got {options!r}",
            )
    try:
        torch_device = torch.device(device)
    except (RuntimeError, TypeError) as err:
        raise ParameterError("device", f"must be a torch device such as 'cpu' or 'cuda:0', got {device!r}") from err
    if torch_device.type not in ("cpu", "cuda"):
        raise ParameterError("device", f"must be 'cpu' or a CUDA device, got {device!r}")
    if (
        isinstance(options, Sinkhorn)
        and options.backend == "triton"
        and torch_device.type != "cuda"
        and os.environ.get("TRITON_INTERPRET") != "1"
    ):
        raise ParameterError(
            "backend",
            f"'triton' runs on a CUDA device, not device={device!r} "
            "(or on the CPU under Triton's interpreter, TRITON_INTERPRET=1); use 'fused' on the CPU",
        )
    if torch_device.type != "cuda" or compiled:
        return
    if isinstance(options, Exact) and options.engine == "thread":
        if not numba_cuda_available():
            raise ParameterError(
                "engine",
                f"'thread' on device={device!r} needs numba's CUDA support, which sees no usable CUDA device "
                "here; use device='cpu' or Exact(engine='compiled')",
            )
    elif not torch.cuda.is_available():
        raise ParameterError("device", f"is {device!r}, but torch sees no CUDA device here; use device='cpu'")


def engine_for(solver, device="cpu", num_rows: int = 0, checkpoint=None, client=None) -> str:
    """The engine that :func:`distances` runs: ``"sinkhorn"``, ``"dask"`` (with a ``client``),
    or the exact engine, ``"auto"`` resolved by
    :func:`~mwsp_torch.transport.engines.choose_exact_engine` (``num_rows``: the shared row
    bank's size, which sizes the thread engine's table). Warns where ``"auto"`` is given a CUDA
    device it cannot use."""
    import torch

    options = solver_options(solver)
    if isinstance(options, Sinkhorn):
        return "sinkhorn"
    if client is not None:
        return "dask"
    if options.engine != "auto":
        return options.engine
    torch_device = torch.device(device)
    cuda = torch_device.type == "cuda"
    # A CUDA device torch does not have (cuda:1 on one GPU) is not usable either.
    torch_cuda = cuda and torch.cuda.is_available() and (torch_device.index or 0) < torch.cuda.device_count()
    numba_cuda = cuda and numba_cuda_available()
    table_fits = num_rows**2 * 8 <= THREAD_TABLE_BYTES
    engine = choose_exact_engine(
        device, torch_cuda, numba_cuda, checkpoint=checkpoint is not None, table_fits=table_fits
    )
    if cuda and not (torch_cuda and numba_cuda):
        missing = "torch" if not torch_cuda else "numba"
        warnings.warn(
            f"Exact(engine='auto') with device={str(device)!r}, but {missing} sees no usable CUDA device: "
            "the compiled CPU engine computes W instead (pass device='cpu' to silence this)",
            ExactEngineFallbackWarning,
            stacklevel=4,
        )
    return engine


def distances(
    left: SupportSet,
    right: SupportSet,
    pairs: np.ndarray,
    *,
    solver: str | Exact | Sinkhorn = "exact",
    device: str = "cpu",
    n_jobs: int = -1,
    checkpoint: str | os.PathLike | None = None,
    client=None,
    progress: Callable[[int], None] | None = None,
    stats: dict | None = None,
) -> np.ndarray:
    """W (or its Sinkhorn approximation) for each pair ``(i, j)``: graph ``i`` of ``left``
    against graph ``j`` of ``right``.

    Args:
        left, right (SupportSet): the two sides' measures on one row bank, as
            ``MWSP.supports`` makes them (the same set twice for W among one set's graphs).
            With Sinkhorn, ``right`` is the training side: the epsilon schedule starts from
            the diameter of its rows alone, so a pair's value does not depend on the other
            graphs of ``left``.
        pairs (np.ndarray): ``[m, 2]`` integer pairs of graph indices.
        solver (str, Exact or Sinkhorn): ``"exact"`` (``Exact()``, the default), ``"sinkhorn"``
            (``Sinkhorn()``) or an options object.
        device (str): torch device of Sinkhorn and of the thread exact engine
            (default ``"cpu"``; the compiled engine runs on the CPU whatever it says).
        n_jobs (int): CPU threads of the exact engines, ``-1`` for every core (default ``-1``;
            W does not depend on it).
        checkpoint (path, optional): a directory of the compiled engine's finished tiles: a
            killed call started again solves only the tiles not on disk (default: none).
        client (distributed.Client or str, optional): a Dask client or a scheduler's address:
            the compiled engine's tiles run as tasks on its workers, the same W bit for bit
            (default ``None``: this process).
        progress (callable, optional): called with a number of pairs done, as they are done.
        stats (dict, optional): gets ``engine``, the engine that ran (``"compiled"``,
            ``"thread"``, ``"sinkhorn"`` or ``"dask"``), and with a checkpoint
            ``pairs_from_checkpoint``.

    Returns:
        ``[m]`` float64 values.

    Raises:
        ParameterError: a ValueError naming a parameter the chosen engine cannot run with.

    Examples:
        >>> from mwsp_torch import MWSP, make_csl
        >>> from mwsp_torch.transport import distances, upper_pairs
        >>> graphs, _ = make_csl(graphs_per_class=1)
        >>> support, _ = MWSP(d=3).supports(graphs[:4])
        >>> distances(support, support, upper_pairs(4), n_jobs=1).round(3)
        array([2.828, 5.657, 7.211, 2.828, 4.472, 2.   ])
    """
    check_parameter("n_jobs", n_jobs)
    check_execution(solver, device, checkpoint, client)
    options = solver_options(solver)
    engine = engine_for(options, device, left.rows.shape[0], checkpoint, client)
    if stats is not None:
        stats["engine"] = engine
    if engine == "thread":
        return thread_exact_distances(
            left, right, pairs, device=device, n_jobs=n_jobs, table_bytes=THREAD_TABLE_BYTES, progress=progress
        )
    if engine == "dask":
        from mwsp_torch.distributed import dask_distances

        with _connected(client) as connected:
            return dask_distances(left, right, pairs, connected, checkpoint=checkpoint, progress=progress, stats=stats)
    if engine == "compiled":
        return exact_distances(left, right, pairs, n_jobs=n_jobs, checkpoint=checkpoint, progress=progress, stats=stats)
    training_rows = right.rows[np.unique(right.support)]
    return sinkhorn_distances(
        left,
        right,
        pairs,
        blur=options.blur,
        scaling=options.scaling,
        device=device,
        backend=options.backend,
        progress=progress,
        diameter=sinkhorn_diameter(training_rows, options.blur),
    )


@contextmanager
def _connected(client):
    """The Dask client to use: ``client`` itself, or one connected to its address for this call."""
    if not isinstance(client, str):
        yield client
        return
    from mwsp_torch.distributed import connect

    connected = connect(scheduler=client)
    try:
        yield connected
    finally:
        connected.close()
