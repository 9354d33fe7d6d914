"""Exact interning of integer pairs, the building block of every canonical ID.

A tree code ``(label, c1, ..., cm)`` or a path representation ``(t0, ..., tj)``
is interned as a chain of pairs in a trie: ``h = intern(-1, first)`` then
``h = intern(h, next)`` for each further element. Two sequences get the same ID
iff they are equal, because each trie node is keyed by its exact parent and
element (a table lookup that compares both, never an unchecked hash).

Fitting and transforming differ only in which table may grow: lookups go to
``frozen`` (what ``fit`` learned) first, and unseen keys are added to ``fresh``
with IDs ``offset + len(fresh)``. ``fit`` passes an empty ``frozen`` and keeps
``fresh``; ``transform`` passes the fitted table as ``frozen`` and throws
``fresh`` away, so the fitted vocabulary is never mutated.

A table is one int64 array: ``[count, mask]`` then ``mask + 1`` slots of
``(a, b, id)``, open addressing with linear probing, at most three quarters full
(a full one is copied into one twice the size, so :func:`intern_pair` returns the
table it wrote to, which the caller keeps). Three quarters rather than half full
because the largest tables dominate the features' memory (DD d=2,k=1's row chains hold
20.7 M keys): the higher load halves them, for a little more probing.

Why not numba's typed dict: with tuple keys it took about six times as long an intern
as this table, at a time when interning was about half of the features' time
(``docs/performance.md``). The IDs are the same: both hand them out in the order keys
are first seen.
"""

from __future__ import annotations

import numpy as np
from numba import njit

#: An unused slot's ID (IDs are offsets plus counts, never negative).
EMPTY = -1
#: Entries before the slots: the count of keys and the slot mask.
HEADER = 2
#: Slots of a new table (a power of two).
INITIAL_SLOTS = 64


def new_table(slots: int = INITIAL_SLOTS) -> np.ndarray:
    """An empty pair -> ID table with ``slots`` slots (a power of two)."""
    if slots < 2 or slots & (slots - 1):
        raise ValueError(f"slots must be a power of two >= 2, got {slots}")
    table = np.full(HEADER + 3 * slots, EMPTY, dtype=np.int64)
    table[0] = 0
    table[1] = slots - 1
    return table


@njit(cache=True, nogil=True, inline="always")
def _slot(a, b, mask):
    """The first slot to probe for ``(a, b)``: murmur3's 64-bit finaliser of a mix of both
    (float bit patterns as ``b`` vary only in their high bits, so those must reach the mask)."""
    x = a * np.int64(-7046029254386353131) + b
    x ^= (x >> 33) & np.int64(0x7FFFFFFF)
    x *= np.int64(-49064778989728563)
    x ^= (x >> 33) & np.int64(0x7FFFFFFF)
    x *= np.int64(-4265267296055464877)
    x ^= (x >> 33) & np.int64(0x7FFFFFFF)
    return x & mask


@njit(cache=True, nogil=True, inline="always")
def _probe(table, a, b):
    """Index in ``table`` of the slot that holds ``(a, b)``, else of the empty slot where it
    would go (linear probing from :func:`_slot`; a table always keeps an empty slot)."""
    mask = table[1]
    i = _slot(a, b, mask)
    while True:
        base = HEADER + 3 * i
        if table[base + 2] == EMPTY:
            return base
        if table[base] == a and table[base + 1] == b:
            return base
        i = (i + 1) & mask


@njit(cache=True, nogil=True, inline="always")
def _put(table, base, a, b, key_id):
    table[base] = a
    table[base + 1] = b
    table[base + 2] = key_id


@njit(cache=True, nogil=True)
def _doubled(table):
    """``table`` copied into one of twice as many slots."""
    old_slots = table[1] + 1
    out = np.full(HEADER + 6 * old_slots, EMPTY, dtype=np.int64)
    out[0] = table[0]
    out[1] = 2 * old_slots - 1
    for s in range(old_slots):
        base = HEADER + 3 * s
        if table[base + 2] != EMPTY:  # keys are distinct: the probe ends at an empty slot
            _put(out, _probe(out, table[base], table[base + 1]), table[base], table[base + 1], table[base + 2])
    return out


@njit(cache=True, nogil=True, inline="always")
def lookup(table, a, b):
    """ID of ``(a, b)`` in ``table``, or ``EMPTY``."""
    return table[_probe(table, a, b) + 2]


@njit(cache=True, nogil=True, inline="always")
def intern_pair(frozen, fresh, offset, a, b):
    """``(ID of the pair (a, b), fresh)``: the pair is added to ``fresh`` when unseen, and
    ``fresh`` is the table to keep using (a larger copy once the old one is three quarters full)."""
    if frozen[0] > 0:
        found = lookup(frozen, a, b)
        if found != EMPTY:
            return found, fresh
    # _probe's loop, written out on this hottest path rather than called (a call measured
    # slower on NCI1's features).
    mask = fresh[1]
    i = _slot(a, b, mask)
    while True:
        base = HEADER + 3 * i
        found = fresh[base + 2]
        if found == EMPTY:
            break
        if fresh[base] == a and fresh[base + 1] == b:
            return found, fresh
        i = (i + 1) & mask
    new_id = offset + fresh[0]
    _put(fresh, base, a, b, new_id)
    fresh[0] += 1
    if 4 * fresh[0] > 3 * (mask + 1):
        fresh = _doubled(fresh)
    return new_id, fresh


def table_to_arrays(table: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Serialise a table as ``(keys [n, 2], values [n])``, in ID order, for pickling."""
    slots = table[HEADER:].reshape(-1, 3)
    used = slots[slots[:, 2] != EMPTY]
    used = used[np.argsort(used[:, 2], kind="stable")]
    return np.ascontiguousarray(used[:, :2]), np.ascontiguousarray(used[:, 2])


def table_from_arrays(keys: np.ndarray, values: np.ndarray) -> np.ndarray:
    """Inverse of :func:`table_to_arrays`."""
    slots = INITIAL_SLOTS
    while 4 * (len(values) + 1) > 3 * slots:
        slots *= 2
    table = new_table(slots)
    _fill_table(table, np.ascontiguousarray(keys, dtype=np.int64), np.ascontiguousarray(values, dtype=np.int64))
    return table


@njit(cache=True)
def _fill_table(table, keys, values):
    for t in range(values.shape[0]):
        base = _probe(table, keys[t, 0], keys[t, 1])
        if table[base + 2] != EMPTY:
            raise ValueError("table_from_arrays: a key occurs twice")
        _put(table, base, keys[t, 0], keys[t, 1], values[t])
    table[0] = values.shape[0]


class Vocabulary:
    """A growing pair table with its ID offset, picklable.

    Args:
        offset (int): the first ID handed out (default ``0``).

    Attributes:
        table (np.ndarray): the table (see the module docstring); a compiled kernel that
            interns into it returns the table to keep, which the caller stores here.
    """

    def __init__(self, offset: int = 0) -> None:
        self.offset = offset
        self.table = new_table()

    def __len__(self) -> int:
        return int(self.table[0])

    @property
    def size(self) -> int:
        """One past the largest ID handed out."""
        return self.offset + len(self)

    def __getstate__(self) -> dict:
        keys, values = table_to_arrays(self.table)
        return {"offset": self.offset, "keys": keys, "values": values}

    def __setstate__(self, state: dict) -> None:
        self.offset = state["offset"]
        self.table = table_from_arrays(state["keys"], state["values"])

    def __repr__(self) -> str:
        return f"Vocabulary(size={self.size})"
