"""The in-process cache of fits that the clones of an :class:`~mwsp_torch.MWSP` share.

W depends on neither ``lam`` nor an SVM's ``C``, so a search over them needs it once per
training fold; ``GridSearchCV`` fits a fresh clone per candidate and fold. The clones share
their fitted states and cross distances here, keyed by the graphs' content
(:func:`graphs_digest`) and every parameter but :data:`NOT_IN_KEY`, least recently used first
out and bounded in bytes (:data:`FIT_CACHE_ENV`). Inside a joblib worker process,
:func:`joblib_worker_threads` says how many threads the worker's share of the cores is.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import sys
import threading
from collections import OrderedDict

import numpy as np
import scipy.sparse as sp

__all__ = [
    "FIT_CACHE",
    "FIT_CACHE_ENV",
    "NOT_IN_KEY",
    "FitCache",
    "clear_fit_cache",
    "graphs_digest",
    "joblib_worker_threads",
    "nbytes",
]


#: Parameters that change neither W nor the fitted state: left out of the cache's keys.
NOT_IN_KEY = ("lam", "n_jobs", "progress")

#: Environment variable bounding the in-process cache of fits, in MiB (default 512; 0: off).
FIT_CACHE_ENV = "MWSP_FIT_CACHE_MB"


class FitCache:
    """Fitted states and cross distances by key, least recently used first out, bounded in bytes
    (``$MWSP_FIT_CACHE_MB``, read at each call); safe to share between threads."""

    def __init__(self) -> None:
        self._entries: OrderedDict[str, tuple[object, int]] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()

    @staticmethod
    def limit() -> int:
        value = os.environ.get(FIT_CACHE_ENV, "512")
        try:
            megabytes = float(value)
        except ValueError:
            raise ValueError(f"{FIT_CACHE_ENV}={value!r}: expected a number of MiB (0: no cache)") from None
        return int(max(megabytes, 0.0) * 2**20)

    def get(self, key: str):
        if self.limit() == 0:  # off: nothing is served, whatever was stored before
            return None
        with self._lock:
            entry = self._entries.get(key)
            if entry is None:
                return None
            self._entries.move_to_end(key)
            return entry[0]

    def put(self, key: str, value, nbytes: int) -> None:
        limit = self.limit()
        with self._lock:
            if key in self._entries:
                self._bytes -= self._entries.pop(key)[1]
            if nbytes > limit:
                return
            self._entries[key] = (value, nbytes)
            self._bytes += nbytes
            while self._bytes > limit:
                self._bytes -= self._entries.popitem(last=False)[1][1]

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
            self._bytes = 0

    def __len__(self) -> int:
        return len(self._entries)


#: The cache the clones of an estimator share, in this process.
FIT_CACHE = FitCache()


def clear_fit_cache() -> None:
    """Empty this process's cache of fits and transforms shared by the clones of an estimator
    (:class:`MWSP`'s docstring)."""
    FIT_CACHE.clear()


def joblib_worker_threads() -> int | None:
    """In a joblib (loky) worker process, the threads its inner pools may use: the
    ``OMP_NUM_THREADS`` joblib set there (its cores divided by the workers, or the parent's own
    setting, or ``inner_max_num_threads``), at least 1; None outside such a worker."""
    loky = sys.modules.get("joblib.externals.loky.process_executor")
    if loky is None or getattr(loky, "_CURRENT_DEPTH", 0) < 1:
        return None
    try:
        return max(1, int(os.environ.get("OMP_NUM_THREADS", "1")))
    except ValueError:
        return 1


def graphs_digest(graphs) -> str | None:
    """SHA-1 of every field of every graph (names, dtypes, shapes, bytes): graphs equal in
    content share it, whatever objects hold them. None for anything but plain ``Data`` with
    dense tensors, numbers and strings (such graphs are not cached)."""
    import torch
    from torch_geometric.data import Data

    digest = hashlib.sha1()
    for data in graphs:
        if type(data) is not Data:
            return None
        digest.update(b"graph")
        for name in sorted(data.keys()):
            value = data[name]
            digest.update(f"|{name}:".encode())
            if isinstance(value, torch.Tensor):
                if value.layout != torch.strided:
                    return None
                value = value.detach().cpu().contiguous()
                digest.update(f"{value.dtype}{tuple(value.shape)}".encode())
                digest.update(value.reshape(-1).view(torch.uint8).numpy())
            elif isinstance(value, np.ndarray) and value.dtype.kind in "biuf":
                digest.update(f"{value.dtype}{value.shape}".encode())
                digest.update(np.ascontiguousarray(value).view(np.uint8))
            elif value is None or isinstance(value, (bool, int, float, str, np.integer, np.floating)):
                digest.update(f"{type(value).__name__}{value!r}".encode())
            else:
                return None
    return digest.hexdigest()


def nbytes(value, depth: int = 0) -> int:
    """About how many bytes the arrays in ``value`` hold (arrays, sparse matrices, dataclasses,
    objects, containers): what a cached fit costs."""
    if depth > 6:
        return 0
    if isinstance(value, np.ndarray):
        return value.nbytes
    if sp.issparse(value):
        return sum(getattr(value, name).nbytes for name in ("data", "indices", "indptr") if hasattr(value, name))
    if isinstance(value, dict):
        return sum(nbytes(item, depth + 1) for item in value.values())
    if isinstance(value, (list, tuple)):
        return sum(nbytes(item, depth + 1) for item in value)
    if dataclasses.is_dataclass(value):
        return sum(nbytes(getattr(value, f.name), depth + 1) for f in dataclasses.fields(value))
    if hasattr(value, "__dict__"):
        return nbytes(vars(value), depth + 1)
    return 0
