"""Checkpoints of the protocols' selection: each finished step's inner scores on disk, so that
a selection killed part way computes only the rest when started again.

A step is one outer fold's inner cross-validation of one setting and ``lam`` (every ``C``);
NCI1 over d 1..3 x k 0..2 has 540 a repetition, so ten repetitions are hours of work worth
keeping. The steps of one call go to one file in the checkpoint directory, named by a
fingerprint of everything that determines the scores (the protocol, every matrix, the
labels, every fold and inner split, the grids, the SVM and its solver, the format of the
scores (:data:`SCORE_FORMAT`) and the scikit-learn version that computes them): the same
call started again reads them, any other call never does. The file is JSON lines, one step
a line with a checksum of its values, appended and flushed as each step finishes; a line
cut short by a kill, or damaged, is recomputed with a warning. A score may be NaN: a ``C``
its fold could no longer select, cut short
(:func:`~mwsp_torch.evaluation.selection.step_scores`). Floats are written as Python's
``repr``, which reads back to the same bits, so a resumed selection selects exactly what an
uninterrupted one does. One process at a time works on a file (a lock refuses a second).
"""

from __future__ import annotations

import hashlib
import json
import os
import warnings
from collections.abc import Mapping, Sequence
from contextlib import nullcontext
from pathlib import Path

import numpy as np

from mwsp_torch.transport.store import checkpoint_directory

try:  # POSIX: a lock on the file refuses a second process
    import fcntl
except ImportError:  # pragma: no cover - not POSIX: no lock
    fcntl = None

__all__ = ["SCORE_FORMAT", "STORE_FORMAT", "SelectionStore", "open_store", "selection_fingerprint", "step_checksum"]

#: The file layout; a new one starts new files rather than misreading old ones.
STORE_FORMAT = 1
#: The version of what a step's scores mean (how kernels are made, scored and cut): raised
#: whenever a change would give other scores for the same inputs, so that older steps are
#: never read. Not the code's text: a docstring edit changes nothing.
SCORE_FORMAT = 2
#: Rows of W hashed at a time: no ``[n, n]`` copy of a non-contiguous or memory-mapped W.
_HASH_ROWS = 512


def selection_fingerprint(
    protocol: str,
    inputs: Sequence,
    y: np.ndarray,
    folds: Sequence,
    params: Mapping,
    Cs: Sequence[float],
    options: Sequence[str],
) -> str:
    """A SHA-256 (hex) of everything that determines a selection's step scores.

    Args:
        protocol (str): the protocol's name.
        inputs: ``[(key, kind, [matrices])]`` in grid order: each setting's key, what its
            matrices are (``"distances"``, ``"kernel"``) and the matrices.
        y (np.ndarray): the labels.
        folds: ``(train, test, inner_splits)`` for each outer fold.
        params: ``{key: tuple}``, each setting's own grid.
        Cs: the ``C`` grid.
        options: the SVM, its Krein treatment and its solver, as strings.
    """
    import sklearn

    digest = hashlib.sha256()
    head = (STORE_FORMAT, SCORE_FORMAT, sklearn.__version__, protocol, [float(v) for v in Cs])
    digest.update(repr((*head, list(options))).encode())
    for key, kind, matrices in inputs:
        digest.update(repr((key, kind, len(matrices), [repr(p) for p in params[key]])).encode())
        for w in matrices:
            digest.update(repr(w.shape).encode())
            for start in range(0, len(w), _HASH_ROWS):
                digest.update(np.ascontiguousarray(w[start : start + _HASH_ROWS], dtype=np.float64).tobytes())
    classes, index = np.unique(np.asarray(y), return_inverse=True)
    digest.update(repr([str(c) for c in classes]).encode())
    digest.update(np.ascontiguousarray(index, dtype=np.int64).tobytes())
    digest.update(repr([len(splits) for _, _, splits in folds]).encode())
    for train, test, splits in folds:
        for part in (train, test, *(p for split in splits for p in split)):
            digest.update(repr(len(part)).encode())
            digest.update(np.ascontiguousarray(part, dtype=np.int64).tobytes())
    return digest.hexdigest()


def step_checksum(step: Sequence[int], scores: np.ndarray) -> str:
    """The checksum a stored step carries: a damaged line is recomputed, not read."""
    values = np.asarray(step, dtype=np.int64).tobytes() + np.asarray(scores, dtype=np.float64).tobytes()
    return hashlib.sha1(values).hexdigest()[:16]


class SelectionStore:
    """The finished steps of one selection in ``DIRECTORY/selection-FINGERPRINT.jsonl``, held
    open (and locked) from construction to :meth:`close`; a context manager.

    Steps are named by integer tuples ``(fold, setting, lam)`` (positions in the protocol's
    folds and grids); each holds one score per ``C``.
    """

    def __init__(self, directory, fingerprint: str, num_scores: int) -> None:
        folder = checkpoint_directory(directory)
        self.path = folder / f"selection-{fingerprint[:24]}.jsonl"
        self.num_scores = num_scores
        self.steps: dict[tuple[int, ...], np.ndarray] = {}
        try:
            folder.mkdir(parents=True, exist_ok=True)
            self._handle = open(self.path, "a+b")  # noqa: SIM115 - held open until close()
        except OSError as err:
            raise ValueError(f"checkpoint {str(directory)!r}: cannot write {self.path.name} ({err})") from err
        if fcntl is not None:
            try:
                fcntl.flock(self._handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError as err:
                self._handle.close()
                raise ValueError(
                    f"checkpoint {self.path} is in use by another process running the same selection: "
                    "wait for it, or give another checkpoint directory"
                ) from err
        self._read()

    def _read(self) -> None:
        self._handle.seek(0)
        data = self._handle.read()
        end = data.rfind(b"\n") + 1
        if end < len(data):  # a line cut short by a kill: dropped, so appends start on a new line
            warnings.warn(
                f"selection checkpoint {self.path}: its last line was cut short (a run killed while writing "
                "it); recomputing that step",
                stacklevel=4,
            )
            self._handle.truncate(end)
        for number, line in enumerate(data[:end].splitlines(), start=1):
            try:
                entry = json.loads(line)
                step = tuple(int(v) for v in entry["step"])
                scores = np.array(entry["scores"], dtype=np.float64)
                good = entry["sha"] == step_checksum(step, scores) and scores.shape == (self.num_scores,)
            except (ValueError, KeyError, TypeError) as err:
                problem = f"unreadable ({err})"
            else:
                problem = None if good else "does not match its checksum (damaged)"
            if problem is not None:
                warnings.warn(
                    f"selection checkpoint {self.path}, line {number}: {problem}; recomputing it", stacklevel=4
                )
                continue
            self.steps[step] = scores

    def add(self, step: tuple[int, ...], scores: np.ndarray) -> None:
        """Append one finished step (flushed to disk before returning)."""
        scores = np.asarray(scores, dtype=np.float64)
        entry = {
            "step": [int(v) for v in step],
            "scores": [float(v) for v in scores],
            "sha": step_checksum(step, scores),
        }
        self._handle.seek(0, os.SEEK_END)
        self._handle.write((json.dumps(entry) + "\n").encode())
        self._handle.flush()
        os.fsync(self._handle.fileno())
        self.steps[step] = scores

    def close(self) -> None:
        self._handle.close()  # releases the lock

    def __enter__(self) -> SelectionStore:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def open_store(checkpoint, protocol: str, inputs: Sequence, y, folds, params: Mapping, Cs, options):
    """A context holding the store of this selection in the directory ``checkpoint``, or
    ``None`` without one (arguments as :func:`selection_fingerprint`'s)."""
    if checkpoint is None:
        return nullcontext(None)
    checkpoint_directory(checkpoint)  # refused before the hashing
    fingerprint = selection_fingerprint(protocol, inputs, y, folds, params, Cs, options)
    return SelectionStore(Path(checkpoint), fingerprint, len(Cs))
