"""numba's once-per-process set-up, run with Python's cyclic garbage collector paused.

The first call of any numba function in a process, even one loaded from the disk cache,
fills numba's typing and target registries: it imports about 70 of numba's modules and
makes tens of thousands of long-lived Python objects. In a process that has imported
torch, PyG, scikit-learn and POT, that burst of allocations sets off a full (generation
2) collection, which walks every tracked object of the process, however few of them are
garbage. Fitting 400 NCI1 graphs in a fresh process that had imported POT, that one
collection was about a fifth of the first fit (``docs/performance.md``).

:func:`numba_ready` therefore triggers the set-up through a trivial cached function with
the collector paused, and restores the collector's state at once. The registries are
long-lived and hold no garbage, so the collection skipped would have freed little:
garbage cycles already in the process (or dropped by other threads during the pause, a
fraction of a second) wait for the next collection instead. The public entry points that run numba code
call it first; after the first call it costs one check of a flag.
"""

from __future__ import annotations

import gc
import os
import threading

from numba import njit

_ready = False
_lock = threading.Lock()
#: Whether the collector was on when the pause began; ``None`` outside the pause.
_paused_from: bool | None = None


@njit(cache=True)
def _first_dispatch() -> int:
    return 0


def numba_ready() -> None:
    """Run numba's per-process set-up once, with the cyclic garbage collector paused."""
    global _ready, _paused_from
    if _ready:
        return
    with _lock:
        if _ready:
            return
        _paused_from = gc.isenabled()
        gc.disable()
        try:
            _first_dispatch()
        finally:
            if _paused_from:
                gc.enable()
            _paused_from = None
        _ready = True


def _after_fork_in_child() -> None:
    """A child forked by another thread during the pause gets a free lock and its collector back."""
    global _lock, _paused_from
    _lock = threading.Lock()
    if _paused_from:
        gc.enable()
    _paused_from = None


os.register_at_fork(after_in_child=_after_fork_in_child)
