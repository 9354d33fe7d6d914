"""Checkpoints of the exact engine: finished tiles of pairs on disk, so that a long run
killed part way computes only the rest when started again.

A tile's file is named by a fingerprint of everything that determines its values (the
pairs, both support sets, the row bank, the tile size and the cost method) and carries the
SHA-1 of its values in its name, so that a tile of other inputs is never read and a damaged
one is recomputed. Saves are atomic (a temporary file renamed into place).
"""

from __future__ import annotations

import hashlib
import os
import threading
import warnings
from pathlib import Path

import numpy as np

from mwsp_torch.transport.measures import SupportSet, bank_arrays

__all__ = [
    "TileStore",
    "checkpoint_directory",
    "stored_tiles",
]


def checkpoint_directory(directory) -> Path:
    """``directory`` as a ``Path``, refused unless it can hold checkpoint tiles: a non-empty
    path that is a directory or does not exist yet (it is then created)."""
    if not isinstance(directory, (str, os.PathLike)) or str(directory) == "":
        raise ValueError(f"checkpoint must be a directory path, got {directory!r}")
    path = Path(directory)
    if path.exists() and not path.is_dir():
        raise ValueError(f"checkpoint {str(directory)!r} exists and is not a directory")
    return path


class TileStore:
    """Finished tiles on disk, keyed by a fingerprint of everything that determines them
    (the tiles of :func:`~mwsp_torch.transport.exact_distances` with ``checkpoint=``)."""

    def __init__(
        self, directory, left: SupportSet, right: SupportSet, pairs: np.ndarray, tile_size: int, costs: str
    ) -> None:
        digest = hashlib.sha1()
        for array in (pairs, *left.arrays(), *right.arrays(), *bank_arrays(left.rows)):
            digest.update(np.ascontiguousarray(array).tobytes())
        # The cost method too: the methods agree only to rounding, so tiles of two would mix.
        digest.update(f"{tile_size} {costs}".encode())
        self.directory = checkpoint_directory(directory) / digest.hexdigest()[:20]
        self.directory.mkdir(parents=True, exist_ok=True)
        # A run killed while saving leaves its temporary file (see save): drop those of dead runs.
        for stale in self.directory.glob(".tile-*.npy"):
            pid = stale.name.split(".")[2]
            if pid.isdigit() and not _process_alive(int(pid)):
                stale.unlink(missing_ok=True)

    @staticmethod
    def _checksum(values: np.ndarray) -> str:
        return hashlib.sha1(np.ascontiguousarray(values).tobytes()).hexdigest()[:16]

    def _path(self, index: int, values: np.ndarray) -> Path:
        """``tile-INDEX-CHECKSUM.npy``: the name carries the SHA-1 of the values, so damage
        that leaves a readable array (a flipped bit) is seen too."""
        return self.directory / f"tile-{index:07d}-{self._checksum(values)}.npy"

    def load(self, index: int, out: np.ndarray) -> bool:
        """Tile ``index`` into ``out``; False (it is then recomputed and saved again) if it is
        missing, or damaged by something outside this code (saves are atomic), with a warning."""
        for path in sorted(self.directory.glob(f"tile-{index:07d}-*.npy")):
            try:
                values = np.load(path)
            except Exception as err:  # a damaged header can raise SyntaxError, TokenError, ...
                warnings.warn(f"checkpoint tile {path} cannot be read ({err}); recomputing it", stacklevel=3)
                continue
            if values.shape != out.shape or values.dtype != np.float64:
                warnings.warn(
                    f"checkpoint tile {path} holds {values.dtype} {list(values.shape)}, not float64 "
                    f"{list(out.shape)}; recomputing it",
                    stacklevel=3,
                )
                continue
            if path.name != self._path(index, values).name:
                warnings.warn(
                    f"checkpoint tile {path} does not match its checksum (damaged); recomputing it", stacklevel=3
                )
                continue
            out[:] = values
            return True
        return False

    def save(self, index: int, values: np.ndarray) -> None:
        # The process and the thread name it (the stale-file sweep above reads the process).
        tmp = self.directory / f".tile-{index:07d}.{os.getpid()}.{threading.get_ident()}.npy"
        np.save(tmp, values)
        for damaged in self.directory.glob(f"tile-{index:07d}-*.npy"):  # refused by load
            damaged.unlink(missing_ok=True)
        os.replace(tmp, self._path(index, values))  # atomic: a killed run leaves no half tile


def stored_tiles(store: TileStore | None, num_pairs: int, tile_size: int, out: np.ndarray, progress=None):
    """Read the finished tiles of ``num_pairs`` pairs in tiles of ``tile_size`` from ``store``
    (if any) into ``out``, reporting each to ``progress``; what is left is computed by the
    caller (the in-process engine's threads, or Dask's workers).

    Returns:
        ``(todo, loaded)``: ``[(index, lo, hi)]`` of the tiles still to compute, in order,
        and how many pairs were read.
    """
    todo, loaded = [], 0
    for index, lo in enumerate(range(0, num_pairs, tile_size)):
        hi = min(lo + tile_size, num_pairs)
        if store is not None and store.load(index, out[lo:hi]):
            loaded += hi - lo
            if progress is not None:
                progress(hi - lo)
        else:
            todo.append((index, lo, hi))
    return todo, loaded


def _process_alive(pid: int) -> bool:
    """Whether process ``pid`` exists (on POSIX; elsewhere assumed alive, so nothing is removed)."""
    if os.name != "posix":
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
