"""Checkpoints of the protocols' selection: each finished step's inner scores on disk, so that
a selection killed part way computes only the rest when started again.

A step is one outer fold's inner cross-validation of one setting and ``lam`` (every ``C``);
NCI1 over d 1..3 x k 0..2 has 540 a repetition and a repetition takes about 17 minutes on
two cores, so ten of them are hours of work worth keeping. The steps of one call go to one
file in the checkpoint directory, named by a fingerprint of everything that determines the
scores (the protocol, every W, the labels, every fold and inner split, the grids, the SVM and
its solver): the same call started again reads them, any other call never does. The file is
JSON lines, one step a line, appended and flushed as each step finishes; a line cut short by
a kill, or damaged, is recomputed. Floats are written as Python's ``repr``, which reads back
to the same bits, so a resumed selection selects exactly what an uninterrupted one does.
"""

from __future__ import annotations

import hashlib
import json
import os
import warnings
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

from mwsp_torch.transport.store import checkpoint_directory

#: Rows of W hashed at a time: no ``[n, n]`` copy of a non-contiguous or memory-mapped W.
_HASH_ROWS = 512


def selection_fingerprint(
    protocol: str,
    distances: Mapping,
    y: np.ndarray,
    folds: Sequence,
    lams: Sequence[float],
    Cs: Sequence[float],
    options: Sequence[str],
) -> str:
    """A SHA-256 (hex) of everything that determines a selection's step scores.

    Args:
        protocol (str): the protocol's name.
        distances: ``{key: W}``, hashed in sorted key order.
        y (np.ndarray): the labels.
        folds: ``(train, test, inner_splits)`` for each outer fold.
        lams, Cs: the grids.
        options: the SVM, its Krein treatment and solver, as strings.
    """
    digest = hashlib.sha256()
    digest.update(repr((protocol, [float(v) for v in lams], [float(v) for v in Cs], list(options))).encode())
    for key in sorted(distances):
        w = distances[key]
        digest.update(repr((key, w.shape)).encode())
        for start in range(0, len(w), _HASH_ROWS):
            digest.update(np.ascontiguousarray(w[start : start + _HASH_ROWS], dtype=np.float64).tobytes())
    classes, index = np.unique(np.asarray(y), return_inverse=True)
    digest.update(repr([str(c) for c in classes]).encode())
    digest.update(np.ascontiguousarray(index, dtype=np.int64).tobytes())
    for train, test, splits in folds:
        for part in (train, test, *(p for split in splits for p in split)):
            digest.update(np.ascontiguousarray(part, dtype=np.int64).tobytes())
            digest.update(b"|")
    return digest.hexdigest()


class SelectionStore:
    """The finished steps of one selection in ``DIRECTORY/selection-FINGERPRINT.jsonl``.

    Steps are named by integer tuples ``(fold, setting, lam)`` (positions in the protocol's
    folds and grids); each holds one score per ``C``.
    """

    def __init__(self, directory, fingerprint: str, num_scores: int) -> None:
        folder = checkpoint_directory(directory)
        folder.mkdir(parents=True, exist_ok=True)
        self.path = folder / f"selection-{fingerprint[:24]}.jsonl"
        self.num_scores = num_scores
        self.steps: dict[tuple[int, ...], np.ndarray] = {}
        if self.path.exists():
            self._read()

    def _read(self) -> None:
        data = self.path.read_bytes()
        end = data.rfind(b"\n") + 1
        if end < len(data):  # a line cut short by a kill: dropped, so appends start on a new line
            with open(self.path, "r+b") as handle:
                handle.truncate(end)
        for number, line in enumerate(data[:end].splitlines(), start=1):
            try:
                entry = json.loads(line)
                step = tuple(int(v) for v in entry["step"])
                scores = np.array(entry["scores"], dtype=np.float64)
            except (ValueError, KeyError, TypeError) as err:
                warnings.warn(
                    f"selection checkpoint {self.path}, line {number}: unreadable ({err}); recomputing it", stacklevel=3
                )
                continue
            if scores.shape != (self.num_scores,):
                warnings.warn(
                    f"selection checkpoint {self.path}, line {number}: {scores.size} scores, not "
                    f"{self.num_scores}; recomputing it",
                    stacklevel=3,
                )
                continue
            self.steps[step] = scores

    def add(self, step: tuple[int, ...], scores: np.ndarray) -> None:
        """Append one finished step (flushed to disk before returning)."""
        line = json.dumps({"step": [int(v) for v in step], "scores": [float(v) for v in scores]})
        with open(self.path, "a", encoding="utf-8") as handle:
            handle.write(line + "\n")
            handle.flush()
            os.fsync(handle.fileno())
        self.steps[step] = np.asarray(scores, dtype=np.float64)


def open_store(checkpoint, protocol: str, distances: Mapping, y, folds, lams, Cs, options) -> SelectionStore | None:
    """The store of this selection in the directory ``checkpoint``, or ``None`` without one."""
    if checkpoint is None:
        return None
    checkpoint_directory(checkpoint)  # refused before the hashing
    fingerprint = selection_fingerprint(protocol, distances, y, folds, lams, Cs, options)
    return SelectionStore(Path(checkpoint), fingerprint, len(Cs))
