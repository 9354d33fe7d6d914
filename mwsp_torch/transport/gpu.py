"""The exact engine for GPUs: W for many pairs, the same values as the CPU engine's.

:func:`thread_exact_distances` solves one pair per CUDA thread
(:mod:`mwsp_torch.transport._thread_simplex`, numba CUDA) while the host's CPU engine
(:func:`~mwsp_torch.transport.exact_distances`) takes the large pairs and a share of the
small ones. It takes its ground costs from one table of all row-to-row distances, so it is
for datasets of small graphs; it runs on the CPU too, which is how it is tested without a
GPU, and where it is slower than the CPU engine.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import scipy.sparse as sp

from mwsp_torch._checks import is_integer
from mwsp_torch.compiled import numba_ready
from mwsp_torch.transport.costs import (
    distance_table_bytes,
    row_distance_table,
)
from mwsp_torch.transport.exact import exact_distances, numba_threads
from mwsp_torch.transport.measures import SupportSet, bank_arrays, shared_bank

#: What asking for the removed batched engine says.
BATCHED_REMOVED = (
    "the batched exact engine was removed (slower than the other exact engines everywhere measured: "
    "docs/engines.md); use engine 'auto', 'compiled' or 'thread'"
)

__all__ = [
    "BATCHED_REMOVED",
    "PairQueue",
    "cuda_device_index",
    "thread_exact_distances",
]


def _table_bank(left: SupportSet, right: SupportSet, table_bytes: int, engine: str) -> sp.csr_matrix:
    """The shared row bank, if its distance table fits ``table_bytes`` (else a ValueError)."""
    bank = shared_bank(left, right)
    rows = bank.shape[0]
    if distance_table_bytes(bank) > table_bytes:
        raise ValueError(
            f"the {engine} exact engine needs a {rows} x {rows} distance table, "
            f"over table_bytes={table_bytes}; for this dataset use MWSP(exact_engine='compiled') "
            "(exact_distances), which needs no such table"
        )
    return bank


def thread_exact_distances(
    left: SupportSet,
    right: SupportSet,
    pairs: np.ndarray,
    device: str = "cpu",
    chunk_size: int = 1 << 18,
    table_bytes: int = 1 << 30,
    n_jobs: int = -1,
    threads_per_block: int = 128,
    progress: Callable[[int], None] | None = None,
) -> np.ndarray:
    """Exact W for each pair, one pair per CUDA thread (:mod:`mwsp_torch.transport._thread_simplex`).

    Each thread cancels its pair's shared mass, gathers its costs from one table of all
    row-to-row distances (built on the host by the CPU engine's own code,
    :func:`~mwsp_torch.transport.costs.row_distance_table`, so the costs are bit for bit
    :func:`exact_distances`' with ``costs="table"``) and runs the
    transportation simplex on bit masks. Pairs whose two supports hold more than
    :data:`mwsp_torch.transport._thread_simplex.MAX_NODES` points together go to
    :func:`exact_distances` on the host (``n_jobs`` threads).

    On ``cuda`` one worker thread makes every CUDA call (so one thread's device and
    context): it takes chunks of the small pairs from the front of a shared queue,
    launches the kernel on each and fetches its values before taking the next. Meanwhile
    the calling thread solves the large pairs, then takes small pairs from the back of
    the queue, a quarter chunk at a time, for :func:`exact_distances`. Each side so gets
    work at its own pace, whether or not a launch returns before its kernel ends (on an
    H100 it does not, and launching everything first would leave the host's share to run
    after the GPU's). The host's kernels let other Python threads run, and the
    CUDA driver bindings release the GIL in their calls (cuda-bindings 12.9.1 and later).
    Which side solves a small pair depends on timing, and the two solvers agree to about
    1e-15 relative, not bit for bit; under ``torch.use_deterministic_algorithms(True)``
    the host takes no small pairs, so a run repeats bit for bit.

    On ``device="cpu"`` the same solver runs compiled for the CPU in a ``prange`` loop,
    chunk after chunk, after the large pairs: that is how it is tested without a GPU, and
    it is slower than :func:`exact_distances`.

    Args:
        left, right, pairs, progress: as in :func:`exact_distances`.
        device (str): ``"cuda"`` (or ``"cuda:N"``) or ``"cpu"`` (default).
        chunk_size (int): pairs per kernel launch, the unit of the GPU's progress (default
            ``2**18``: the GPU's last chunk is what the host may wait for at the end). The
            host reports its large pairs at once and its share in quarter chunks.
        table_bytes (int): the most bytes the distance table may take (default 1 GiB):
            this engine is for datasets of small graphs.
        n_jobs (int): host threads for the CPU kernel and for the large pairs (default ``-1``: all).
        threads_per_block (int): CUDA threads per block (default ``128``).

    Returns:
        ``[m]`` float64 distances.
    """
    numba_ready()
    import mwsp_torch.transport._thread_simplex as ts

    bank = _table_bank(left, right, table_bytes, "thread")
    device = str(device)  # a torch.device too, as the other engines take
    kind = device.split(":")[0]
    if kind not in ("cpu", "cuda"):
        raise ValueError(f"device={device!r}: expected 'cpu' or 'cuda[:N]'")
    if not is_integer(chunk_size) or chunk_size < 1:
        raise ValueError(f"chunk_size must be a positive integer, got {chunk_size!r}")
    pairs = np.ascontiguousarray(pairs, dtype=np.int64).reshape(-1, 2)
    out = np.zeros(len(pairs), dtype=np.float64)
    # Cancelling only removes points, so pairs of at most MAX_NODES points before it fit.
    points = np.diff(left.graph_ptr)[pairs[:, 0]] + np.diff(right.graph_ptr)[pairs[:, 1]]
    small = np.flatnonzero(points <= ts.MAX_NODES)
    large = np.flatnonzero(points > ts.MAX_NODES)
    status = np.zeros(len(small), dtype=np.int8)
    values = np.zeros(len(small), dtype=np.float64)
    table = row_distance_table(*bank_arrays(bank)) if len(pairs) else None  # one, for both engines
    sets = (*left.arrays(), *right.arrays())
    chosen = np.ascontiguousarray(pairs[small])
    if kind == "cuda" and len(small):
        import torch

        # A broken numba CUDA or a device numba does not see fails here, before any work;
        # the worker thread has no current context, so it is given the caller's device.
        index = cuda_device_index(ts.import_numba_cuda(), device)
        queue = PairQueue(len(small))
        report = _serialized(progress)
        with ThreadPoolExecutor(max_workers=1, thread_name_prefix="mwsp-cuda") as worker:
            gpu = worker.submit(
                _thread_kernels_on_cuda, index, chosen, sets, table, queue, chunk_size, threads_per_block, values,
                status, report,
            )  # fmt: skip
            try:
                _large_pairs_on_host(left, right, pairs, large, n_jobs, table, out, report)
                while not torch.are_deterministic_algorithms_enabled() and not gpu.done():
                    span = queue.take(max(1, chunk_size // 4), from_back=True)
                    if span is None:
                        break
                    lo, hi = span
                    values[lo:hi] = exact_distances(left, right, chosen[lo:hi], n_jobs=n_jobs, table=table)
                    status[lo:hi] = ts.SOLVED
                    if report is not None:
                        report(hi - lo)
                gpu.result()
            except BaseException:
                queue.close()  # the worker stops after its current chunk
                raise
    else:
        _large_pairs_on_host(left, right, pairs, large, n_jobs, table, out, progress)
        if len(small):
            _run_thread_kernels_on_cpu(chosen, sets, table, chunk_size, n_jobs, values, status, progress)
    out[small] = values
    if np.any(status == ts.PIVOT_LIMIT):
        bad = pairs[small[np.flatnonzero(status == ts.PIVOT_LIMIT)[0]]]
        raise RuntimeError(
            f"thread_exact_distances: pivot limit reached on pair {tuple(bad)}: "
            "the basis tree or its potentials are inconsistent"
        )
    if np.any(status == ts.TOO_LARGE):  # cannot happen (see above); a guard, not a path
        raise RuntimeError("thread_exact_distances: a pair grew past MAX_NODES points")
    return out


def _run_thread_kernels_on_cpu(pairs, sets, table, chunk_size, n_jobs, values, status, progress):
    from mwsp_torch.transport._thread_simplex import cpu_kernel

    kernel = cpu_kernel()
    with numba_threads(n_jobs):
        for lo in range(0, len(pairs), chunk_size):
            hi = min(lo + chunk_size, len(pairs))
            kernel(pairs[lo:hi], *sets, table, values[lo:hi], status[lo:hi])
            if progress is not None:
                progress(hi - lo)


class PairQueue:
    """Spans of ``range(total)`` handed out once each, from the front or from the back."""

    def __init__(self, total: int) -> None:
        self._lo, self._hi = 0, total
        self._lock = threading.Lock()

    def take(self, size: int, from_back: bool = False) -> tuple[int, int] | None:
        """The next ``size`` indices (fewer at the end) as ``(lo, hi)``, or None when none are left."""
        with self._lock:
            if self._lo >= self._hi:
                return None
            if from_back:
                lo = max(self._hi - size, self._lo)
                span, self._hi = (lo, self._hi), lo
            else:
                hi = min(self._lo + size, self._hi)
                span, self._lo = (self._lo, hi), hi
            return span

    def close(self) -> None:
        """Hand out nothing more."""
        with self._lock:
            self._lo = self._hi


def _serialized(progress):
    """``progress`` behind a lock (two threads report), or None."""
    if progress is None:
        return None
    lock = threading.Lock()

    def report(done: int) -> None:
        with lock:
            progress(done)

    return report


def _large_pairs_on_host(left, right, pairs, large, n_jobs, table, out, progress):
    """``out[large]``: the pairs too large for the thread engine, by :func:`exact_distances`."""
    if len(large):
        out[large] = exact_distances(left, right, pairs[large], n_jobs=n_jobs, table=table)
        if progress is not None:
            progress(len(large))


def _thread_kernels_on_cuda(index, pairs, sets, table, queue, chunk_size, threads_per_block, values, status, report):
    """The CUDA kernel on chunks of ``pairs`` taken from the front of ``queue`` until it is
    empty, each fetched into ``values`` and ``status`` (which waits for the kernel) before
    the next is taken: every CUDA call of :func:`thread_exact_distances`, in the thread that
    runs this, on CUDA device ``index``."""
    cuda, kernel, on_device = _cuda_thread_kernel(index, sets, table)
    while (span := queue.take(chunk_size)) is not None:
        lo, hi = span
        d_values, d_status = _launch_chunk(cuda, kernel, on_device, pairs[lo:hi], threads_per_block)
        d_values.copy_to_host(values[lo:hi])
        d_status.copy_to_host(status[lo:hi])
        if report is not None:
            report(hi - lo)


def cuda_device_index(cuda, device: str) -> int:
    """The CUDA device ``device`` names: ``cuda:N``, or for ``cuda`` the calling thread's
    current one (torch's, say, after ``torch.cuda.set_device``), else 0."""
    if ":" in device:
        index = int(device.split(":")[1])
    else:
        current = cuda.gpus.current
        index = 0 if current is None else int(current.id)
    if not 0 <= index < len(cuda.gpus):
        raise ValueError(f"device={device!r}: numba sees {len(cuda.gpus)} CUDA device(s)")
    return index


def _cuda_thread_kernel(index, sets, table):
    """``numba.cuda``, the thread engine's CUDA kernel and its read-only inputs on CUDA
    device ``index``, selected for the calling thread."""
    from mwsp_torch.transport._thread_simplex import cuda_kernel, import_numba_cuda

    cuda = import_numba_cuda()
    cuda.select_device(index)
    return cuda, cuda_kernel(), [cuda.to_device(np.ascontiguousarray(a)) for a in (*sets, table)]


def _launch_chunk(cuda, kernel, on_device, chunk, threads_per_block):
    """The kernel launched on the pairs ``chunk``; returns its ``values`` and ``status``
    device arrays (filled once the kernel ends)."""
    d_values = cuda.device_array(len(chunk), dtype=np.float64)
    d_status = cuda.device_array(len(chunk), dtype=np.int8)
    blocks = (len(chunk) + threads_per_block - 1) // threads_per_block
    kernel[blocks, threads_per_block](cuda.to_device(chunk), *on_device, d_values, d_status)
    return d_values, d_status
