"""The exact engine's tiles as Dask tasks: one matrix from many machines' cores.

:func:`~mwsp_torch.transport.exact_distances` runs tiles of pairs on one machine's threads.
Here each tile is a ``dask.distributed`` task running that same function on a worker, so a
pair's value is the one the in-process engine gives, bit for bit (a pair's value depends
neither on its tile nor on its thread). Why Dask: it already schedules, retries tasks of a
worker that died, and reaches clusters (``dask-jobqueue`` for SLURM, ``dask-cuda`` for one
worker per GPU) without code of ours.

- The two support sets (the row bank and each graph's measure) are scattered once to every
  worker; a task carries only its tile of pairs (16 bytes a pair) and returns its values.
- Finished tiles go to the driver as they complete, and, with ``checkpoint``, into the same
  tile store as the in-process engine's (:class:`~mwsp_torch.transport.store.TileStore`,
  same tile size and fingerprint): a driver killed and started again submits only the
  tiles not on disk, and an in-process run and a Dask run of the same inputs share tiles.
- A worker killed mid-task loses only that task, which the scheduler runs again elsewhere.

Tiles should be large enough that scheduling (about a millisecond a task) is a small share
of a task: the default 65,536 pairs take seconds on NCI1-sized graphs.
"""

from __future__ import annotations

import os
import pickle
from collections.abc import Callable

import numpy as np

from mwsp_torch._checks import check_parameter, is_integer
from mwsp_torch.transport.costs import auto_costs, bank_columns
from mwsp_torch.transport.exact import exact_distances
from mwsp_torch.transport.measures import SupportSet, bank_arrays, shared_bank
from mwsp_torch.transport.solvers import Exact, solver_options
from mwsp_torch.transport.store import TileStore, stored_tiles

__all__ = [
    "CONNECT_TIMEOUT",
    "EXPAND_ROWS",
    "IN_FLIGHT_PER_THREAD",
    "TILE_SIZE",
    "WORKER_ENV",
    "connect",
    "dask_distances",
    "stream_distances",
    "upper_pairs_between",
]

#: Pairs per task by default: the in-process engine's tile, so checkpoints are shared.
TILE_SIZE = 1 << 16
#: Tasks kept in flight per worker thread: enough that no worker waits for the next tile.
IN_FLIGHT_PER_THREAD = 4
#: Seconds to wait for a scheduler before saying it cannot be reached.
CONNECT_TIMEOUT = 10.0
#: The worker processes' environment: one BLAS / OpenMP thread each (the workers are the
#: parallelism), and glibc's heap neither trimmed after every free nor bypassed by mmap for
#: buffers up to 32 MiB. Dask's nannies set ``MALLOC_TRIM_THRESHOLD_=65536``, which also
#: freezes glibc's mmap threshold at 128 KiB, so the engine's per-run column buffers
#: (megabytes on banks of a million columns) came back as fresh pages each time: 4.2x slower
#: on DBLP_v1 (1.33 against 0.32 s for 65,536 pairs, one thread). Set both on workers
#: started by hand too (``docs/scaleout.md``).
WORKER_ENV = {
    "OMP_NUM_THREADS": "1",
    "OPENBLAS_NUM_THREADS": "1",
    "MKL_NUM_THREADS": "1",
    "MALLOC_TRIM_THRESHOLD_": str(1 << 30),
    "MALLOC_MMAP_THRESHOLD_": str(1 << 25),
}


def connect(scheduler: str | None = None, n_workers: int | None = None, threads_per_worker: int = 1):
    """A ``distributed.Client``: to a running scheduler at ``scheduler`` (``"tcp://host:8786"``),
    or to a new ``LocalCluster`` of ``n_workers`` processes, one BLAS thread each.

    Args:
        scheduler (str, optional): the scheduler's address.
        n_workers (int, optional): worker processes of a local cluster (when ``scheduler`` is None).
        threads_per_worker (int): task threads per local worker (default ``1``).

    Raises:
        ValueError: neither or both given, or ``n_workers < 1``.
        ConnectionError: the scheduler cannot be reached within ``CONNECT_TIMEOUT`` seconds.
        ImportError: ``dask.distributed`` is not installed (``pip install "mwsp_torch[dask]"``).
    """
    if (scheduler is None) == (n_workers is None):
        raise ValueError("give a scheduler address or a number of local workers (n_workers), not both or neither")
    try:
        from distributed import Client, LocalCluster
    except ImportError as err:
        raise ImportError('Dask scale-out needs dask.distributed: pip install "mwsp_torch[dask]"') from err
    if scheduler is not None:
        try:
            return Client(scheduler, timeout=CONNECT_TIMEOUT)
        except (OSError, TimeoutError) as err:
            raise ConnectionError(
                f"no Dask scheduler answered at {scheduler!r} within {CONNECT_TIMEOUT:g} s ({err}); "
                "start one with `dask scheduler` and workers with `dask worker ADDRESS`"
            ) from err
    if not is_integer(n_workers) or n_workers < 1:
        raise ValueError(f"n_workers must be an integer >= 1, got {n_workers!r}")
    if not is_integer(threads_per_worker) or threads_per_worker < 1:
        raise ValueError(f"threads_per_worker must be an integer >= 1, got {threads_per_worker!r}")
    import dask

    # Before the worker processes start (glibc reads its settings once): Dask's own
    # pre-spawn environment, with ours over it.
    environ = {**dask.config.get("distributed.nanny.pre-spawn-environ", {}), **WORKER_ENV}
    with dask.config.set({"distributed.nanny.pre-spawn-environ": environ}):
        cluster = LocalCluster(
            n_workers=n_workers, threads_per_worker=threads_per_worker, processes=True, dashboard_address=None
        )
    return Client(cluster)


class _Sets:
    """The two support sets of a run, pickled as one object and in band: Dask would otherwise
    hand the worker arrays backed by its receive buffers, read-only, which the compiled
    extension refuses (the engine then falls back to numba's JIT path, 4-5x slower)."""

    def __init__(self, left: SupportSet, right: SupportSet) -> None:
        self.left, self.right = left, right

    def __getstate__(self) -> dict:
        return {"sets": pickle.dumps((self.left, self.right), protocol=pickle.HIGHEST_PROTOCOL)}

    def __setstate__(self, state: dict) -> None:
        self.left, self.right = pickle.loads(state["sets"])


def _tile(sets: _Sets, pairs: np.ndarray, n_jobs: int, costs: str) -> np.ndarray:
    """One task: a tile's values by the in-process engine, on the worker (``pairs`` copied:
    Dask's may be read-only, as :class:`_Sets` says)."""
    pairs = np.array(pairs, dtype=np.int64, order="C", copy=True)
    return exact_distances(sets.left, sets.right, pairs, n_jobs=n_jobs, tile_size=max(len(pairs), 1), costs=costs)


def _check_tiling(tile_size, n_jobs) -> None:
    if not is_integer(tile_size) or tile_size < 1:
        raise ValueError(f"tile_size must be an integer >= 1, got {tile_size!r}")
    check_parameter("n_jobs", n_jobs)


def _windowed(client, tasks):
    """``(key, result)`` of each ``(key, (function, *args))`` task run on ``client``, as they
    finish. A window of tasks in flight, a few per worker thread, not all at once: each
    carries its arguments, and tasks that wait on scattered data are not queued by the
    scheduler but sent to the workers at once."""
    from distributed import as_completed

    window = max(IN_FLIGHT_PER_THREAD * sum(client.nthreads().values()), 2)
    running = as_completed()
    keys = {}

    def submit_next() -> None:
        for key, (function, *args) in tasks:
            future = client.submit(function, *args, pure=False)
            keys[future] = key
            running.add(future)
            return

    for _ in range(window):
        submit_next()
    for future in running:
        key = keys.pop(future)
        result = future.result()
        future.release()
        submit_next()
        yield key, result


def upper_pairs_between(n: int, lo: int, hi: int) -> np.ndarray:
    """The pairs ``lo`` to ``hi - 1`` of :func:`~mwsp_torch.transport.upper_pairs` ``(n)``
    (row-major ``i < j``), ``[hi - lo, 2]``, without making the others."""
    flat = np.arange(lo, hi, dtype=np.int64)
    rows = np.arange(n, dtype=np.int64)
    starts = rows * n - rows * (rows + 1) // 2  # flat index of (i, i + 1)
    i = np.searchsorted(starts, flat, side="right") - 1
    return np.stack([i, flat - starts[i] + i + 1], axis=1)


def _flat_tile(sets: _Sets, n: int, lo: int, hi: int, n_jobs: int, costs: str) -> np.ndarray:
    """One task of :func:`stream_distances`: its pairs made on the worker from two integers."""
    pairs = upper_pairs_between(n, lo, hi)
    return exact_distances(sets.left, sets.right, pairs, n_jobs=n_jobs, tile_size=max(hi - lo, 1), costs=costs)


def dask_distances(
    left: SupportSet,
    right: SupportSet,
    pairs: np.ndarray,
    client,
    tile_size: int = TILE_SIZE,
    n_jobs: int = 1,
    checkpoint: str | os.PathLike | None = None,
    progress: Callable[[int], None] | None = None,
    stats: dict | None = None,
) -> np.ndarray:
    """Exact W for each pair, each tile of ``tile_size`` pairs a task on ``client``'s workers.

    Args:
        left, right (SupportSet): as :func:`~mwsp_torch.transport.exact_distances` takes them.
        pairs (np.ndarray): ``[m, 2]`` pairs of graph indices.
        client (distributed.Client): the cluster (:func:`connect` makes one).
        tile_size (int): pairs per task and per checkpoint tile (default ``65536``).
        n_jobs (int): threads each task uses (default ``1``: one task per worker thread).
        checkpoint (path, optional): directory of finished tiles, shared with the in-process engine.
        progress (callable, optional): called with the number of pairs done, tile by tile.
        stats (dict, optional): gets ``pairs_from_checkpoint`` and ``tasks``.

    Returns:
        ``[m]`` float64 distances, equal bit for bit to ``exact_distances``'.
    """
    _check_tiling(tile_size, n_jobs)
    pairs = np.ascontiguousarray(pairs, dtype=np.int64)
    indptr, indices, _ = bank_arrays(shared_bank(left, right))
    costs = auto_costs(indptr, indices, bank_columns(indices))  # as exact_distances resolves "auto"
    store = TileStore(checkpoint, left, right, pairs, tile_size, costs) if checkpoint is not None else None
    out = np.empty(len(pairs), dtype=np.float64)
    todo, loaded = stored_tiles(store, len(pairs), tile_size, out, progress)
    if todo:
        # One object (not a tuple, which Dask serialises item by item), so that the two sets
        # still share one row bank once unpickled on a worker; a key of its own (hash=False):
        # a second run scattering equal data must not share the key of the first run's, which
        # the scheduler may be releasing at that very moment.
        [sets] = client.scatter([_Sets(left, right)], broadcast=True, hash=False)
        tasks = ((tile, (_tile, sets, pairs[tile[1] : tile[2]], n_jobs, costs)) for tile in todo)
        for (index, lo, hi), values in _windowed(client, tasks):
            out[lo:hi] = values
            if store is not None:
                store.save(index, out[lo:hi])
            if progress is not None:
                progress(hi - lo)
    if stats is not None:
        stats["pairs_from_checkpoint"] = loaded
        stats["tasks"] = len(todo)
    return out


#: Rows of the ``n x n`` file written at a time when graphs of one measure are expanded.
EXPAND_ROWS = 256


def stream_distances(model, graphs, out: str | os.PathLike, *, tile_size: int = TILE_SIZE) -> np.ndarray:
    """All-pairs W of ``model`` written tile by tile into an ``[n, n]`` float64 ``.npy`` at
    ``out``, so that the driver never holds ``n^2`` values (nor ``n^2`` pairs: a task gets two
    integers).

    The same problems as :meth:`MWSP.fit <mwsp_torch.MWSP.fit>` (one per pair of distinct
    measures, the others' rows copied), so the file equals ``model.fit(graphs).distances_``
    bit for bit. The pages written belong to the operating system's file cache, which writes
    them back and drops them under memory pressure.

    Args:
        model (MWSP): the setting, with the exact solver's compiled engine (``"auto"`` or
            ``"compiled"``) and no ``checkpoint``; its ``client`` (a Dask client or a
            scheduler's address) runs the tiles on Dask workers, else the in-process engine
            runs them; its ``n_jobs`` threads in process, or per task on a worker (then ``1``
            is usual); its ``progress`` a tqdm bar over the pairs.
        graphs: a list of PyG ``Data`` or a PyG dataset.
        out (path): the ``.npy`` file to write (replaced).
        tile_size (int): pairs per tile (default ``65536``).

    Returns:
        The file, memory-mapped read-only.

    Raises:
        ValueError: for a model that is not the compiled exact engine, or has a ``checkpoint``.
    """
    from tqdm.auto import tqdm

    solver = solver_options(model.solver)
    if not (isinstance(solver, Exact) and solver.engine in ("auto", "compiled")) or model.checkpoint is not None:
        raise ValueError(
            "stream_distances runs the compiled exact engine: a model with Exact(engine='auto') or "
            f"Exact(engine='compiled') and no checkpoint, got solver={solver!r}, checkpoint={model.checkpoint!r}"
        )
    n_jobs, progress = model.n_jobs, model.progress
    _check_tiling(tile_size, n_jobs)
    support, _ = model.supports(graphs)
    representatives, inverse = support.distinct_measures()
    distinct = support.take(representatives)
    n, total = distinct.num_graphs, distinct.num_graphs * (distinct.num_graphs - 1) // 2
    indptr, indices, _ = bank_arrays(distinct.rows)
    costs = auto_costs(indptr, indices, bank_columns(indices))
    out = os.fspath(out)
    expand = n < support.num_graphs
    target = out + ".distinct.npy" if expand else out
    matrix = np.lib.format.open_memmap(target, mode="w+", dtype=np.float64, shape=(n, n))
    tiles = [(lo, min(lo + tile_size, total)) for lo in range(0, total, tile_size)]
    client = connect(scheduler=model.client) if isinstance(model.client, str) else model.client
    try:
        if client is not None and tiles:
            [sets] = client.scatter([_Sets(distinct, distinct)], broadcast=True, hash=False)
            done = _windowed(client, ((tile, (_flat_tile, sets, n, *tile, n_jobs, costs)) for tile in tiles))
        else:
            sets = _Sets(distinct, distinct)
            done = ((tile, _flat_tile(sets, n, *tile, n_jobs, costs)) for tile in tiles)
        with tqdm(total=total, desc="transport", unit="pair", disable=not progress) as bar:
            for (lo, hi), values in done:
                i, j = upper_pairs_between(n, lo, hi).T
                matrix[i, j] = values
                matrix[j, i] = values
                bar.update(hi - lo)
    finally:
        if client is not model.client:  # connected here, to an address
            client.close()
    matrix.flush()
    del matrix
    if expand:
        source = np.load(target, mmap_mode="r")
        full = np.lib.format.open_memmap(out, mode="w+", dtype=np.float64, shape=(len(inverse), len(inverse)))
        for start in range(0, len(inverse), EXPAND_ROWS):
            full[start : start + EXPAND_ROWS] = source[inverse[start : start + EXPAND_ROWS]][:, inverse]
        full.flush()
        del full, source
        os.remove(target)
    return np.load(out, mmap_mode="r")
