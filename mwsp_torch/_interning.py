"""Exact interning of integer pairs, the building block of every canonical ID.

A tree code ``(label, c1, ..., cm)`` or a path representation ``(t0, ..., tj)``
is interned as a chain of pairs in a trie: ``h = intern(-1, first)`` then
``h = intern(h, next)`` for each further element. Two sequences get the same ID
iff they are equal, because each trie node is keyed by its exact parent and
element (a dictionary lookup, never an unchecked hash).

Fitting and transforming differ only in which table may grow: lookups go to
``frozen`` (what ``fit`` learned) first, and unseen keys are added to ``fresh``
with IDs ``offset + len(fresh)``. ``fit`` passes an empty ``frozen`` and keeps
``fresh``; ``transform`` passes the fitted table as ``frozen`` and throws
``fresh`` away, so the fitted vocabulary is never mutated.
"""

from __future__ import annotations

import numpy as np
from numba import njit, types
from numba.typed import Dict

PAIR = types.UniTuple(types.int64, 2)


def new_table() -> Dict:
    """An empty pair -> ID table (a numba typed dict).

    Made by a cached compiled function: ``Dict.empty`` called from Python compiles its
    constructor afresh in every process (about 0.4 s, the first ``fit``'s largest cost on
    400 NCI1 graphs), which numba's disk cache does not keep.
    """
    return _empty_table()


@njit(cache=True)
def _empty_table():
    return Dict.empty(key_type=PAIR, value_type=types.int64)


@njit(cache=True)
def table_len(table):
    """``len(table)``, compiled once and cached (``len`` from Python compiles afresh in every
    process, as ``Dict.empty`` does)."""
    return len(table)


@njit(cache=True, nogil=True)
def intern_pair(frozen, fresh, offset, a, b):
    """ID of the pair ``(a, b)``, adding it to ``fresh`` when unseen."""
    key = (a, b)
    if key in frozen:
        return frozen[key]
    if key in fresh:
        return fresh[key]
    new_id = offset + len(fresh)
    fresh[key] = new_id
    return new_id


def table_to_arrays(table: Dict) -> tuple[np.ndarray, np.ndarray]:
    """Serialise a table as ``(keys [n, 2], values [n])`` for pickling."""
    n = table_len(table)
    keys = np.empty((n, 2), dtype=np.int64)
    values = np.empty(n, dtype=np.int64)
    _fill_arrays(table, keys, values)
    return keys, values


def table_from_arrays(keys: np.ndarray, values: np.ndarray) -> Dict:
    """Inverse of :func:`table_to_arrays`."""
    table = new_table()
    _fill_table(table, np.ascontiguousarray(keys, dtype=np.int64), np.ascontiguousarray(values, dtype=np.int64))
    return table


@njit(cache=True)
def _fill_arrays(table, keys, values):
    i = 0
    for key, value in table.items():
        keys[i, 0] = key[0]
        keys[i, 1] = key[1]
        values[i] = value
        i += 1


@njit(cache=True)
def _fill_table(table, keys, values):
    for i in range(values.shape[0]):
        table[(keys[i, 0], keys[i, 1])] = values[i]


class Vocabulary:
    """A growing pair table with its ID offset, picklable.

    Args:
        offset (int): the first ID handed out (default ``0``).
    """

    def __init__(self, offset: int = 0) -> None:
        self.offset = offset
        self.table = new_table()

    def __len__(self) -> int:
        return table_len(self.table)

    @property
    def size(self) -> int:
        """One past the largest ID handed out."""
        return self.offset + table_len(self.table)

    def __getstate__(self) -> dict:
        keys, values = table_to_arrays(self.table)
        return {"offset": self.offset, "keys": keys, "values": values}

    def __setstate__(self, state: dict) -> None:
        self.offset = state["offset"]
        self.table = table_from_arrays(state["keys"], state["values"])

    def __repr__(self) -> str:
        return f"Vocabulary(size={self.size})"
