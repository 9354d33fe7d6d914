"""numba's one-time set-up, done once per process with the cyclic garbage collector paused.

The first numba function that a process runs, whether compiled or loaded from numba's
disk cache, makes numba fill its typing and target registries: a few thousand template
objects, made in bursts. Each burst triggers Python's cyclic garbage collector, and its
oldest-generation collections walk the whole heap. That heap includes every object of
torch, PyG, scipy and POT.

On the 2-core machine this made a process's first fit of 400 NCI1 graphs about 0.2 s
slower (``benchmarks/naive_vs_library.py --no-warmup``, which imports POT first; three
interleaved runs each, 2026-11-24, ``benchmarks/README.md``):
- with the registries filled under a paused collector: 0.585-0.607 s, the fill included (36.4-37.1x the naive loop);
- without it: 0.785-0.800 s (27.6-28.1x).

The registries are live objects, not garbage, so pausing the collector only skips work.
Only the fill is run with the collector paused. The collector's state is restored after,
even if the fill fails.
"""

from __future__ import annotations

import functools
import gc


@functools.cache
def prepare_numba() -> None:
    """Fill numba's CPU typing and target registries once, with ``gc`` paused meanwhile."""
    from numba.core.registry import cpu_target

    enabled = gc.isenabled()
    gc.disable()
    try:
        cpu_target.typing_context.refresh()
        cpu_target.target_context.refresh()
    finally:
        if enabled:
            gc.enable()
