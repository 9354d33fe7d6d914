"""Where the thread engine's time goes on a GPU: table, kernel launches, kernels, host pairs.

Until the third session of 2026-11-24, :func:`mwsp_torch.transport.thread_exact_distances`
launched its CUDA kernels chunk by chunk, then solved the pairs too large for a thread
(more than ``MAX_NODES`` points) on the host, then fetched the GPU's values. That only
overlapped host and GPU work if the launches returned at once. On an H100 (2026-11-24)
they did not: returning from the launch loop took the whole kernel time (4.78 s of the
6.16 s for all NCI1 pairs), and the host's 0.94 s of large pairs came after it. (The
engine now drives the GPU from a worker thread and lets the host share the small pairs;
see there.) This script times each phase on its own, that old launch loop
(:func:`launch_loop`, kept here) included, for each ``--chunk-sizes`` (``0``: one
launch for all pairs), so one call on a GPU shows whether fewer launches let the loop
return before the kernels end. ``whole_s`` times the engine as it is now, with that
chunk size (with ``0`` the GPU takes every small pair in its first chunk, so the host
shares none). Prints one JSON object per repetition and chunk size.

First it prints one ``probe`` object that tells the possible causes apart: the CUDA and
numba settings in the environment and numba's config (``CUDA_LAUNCH_BLOCKING=1`` would
make every launch wait, and so would a kernel built with ``debug=True``, which copies an
error flag back after each launch), then how long a launch call takes against its kernel
for two toy kernels that spin ``--probe-spins`` steps in each thread, one with no local
memory and one with as much as the solver's kernel (``--probe-local-bytes``, its 16,880
bytes a thread rounded up). If only the second launch waits, local memory is the cause;
if both wait, launches wait for any kernel here; if neither, the solver's own launches
wait for something else.

Usage (on a GPU machine)::

    python benchmarks/thread_phases.py --dataset NCI1 --chunk-sizes 2097152 0 --n-jobs 16
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("KEOPS_VERBOSE", "0")

import numpy as np  # noqa: E402

sys.path.insert(0, str(Path(__file__).parent))
from gpu_sinkhorn import add_problem_arguments, support_and_pairs  # noqa: E402

from mwsp_torch import _thread_simplex as ts  # noqa: E402
from mwsp_torch import transport  # noqa: E402


def launch_probe(spins: int, local_bytes: int, blocks: int, threads_per_block: int) -> dict:
    """Launch-call and kernel seconds of two toy kernels: one without local memory, one with
    ``local_bytes`` a thread (touched, so that the compiler keeps it)."""
    global cuda  # a module global, as kernels (and numba's simulator) resolve it
    from numba import cuda, float64

    words = max(1, local_bytes // 8)

    @cuda.jit(device=True)
    def spin(t, spins):
        x = t + 1
        for _ in range(spins):  # a dependent xorshift chain: busy, not optimised away
            x ^= (x << 13) & 0xFFFFFFFF
            x ^= x >> 17
            x ^= (x << 5) & 0xFFFFFFFF
        return x

    @cuda.jit
    def plain(out, spins):
        t = cuda.grid(1)
        x = spin(t, spins)
        if t < out.shape[0]:
            out[t] = x

    @cuda.jit
    def with_local(out, spins):
        t = cuda.grid(1)
        scratch = cuda.local.array(words, float64)
        for i in range(words):
            scratch[i] = t + i
        x = spin(t, spins)
        if t < out.shape[0]:
            out[t] = x + scratch[x % words]

    out = cuda.device_array(blocks * threads_per_block, dtype=np.float64)
    row = {"probe_blocks": blocks, "probe_threads_per_block": threads_per_block, "probe_spins": spins}
    row["probe_local_bytes"] = 8 * words
    for name, kernel in (("plain", plain), ("local", with_local)):
        kernel[blocks, threads_per_block](out, 0)  # compile and load, not timed
        cuda.synchronize()
        start = time.perf_counter()
        kernel[blocks, threads_per_block](out, spins)
        row[f"{name}_launch_s"] = time.perf_counter() - start
        cuda.synchronize()
        row[f"{name}_kernel_s"] = time.perf_counter() - start
    return row


def launch_loop(pairs, sets, table, chunk_size: int, threads_per_block: int) -> list:
    """The engine's launch loop before the third session of 2026-11-24: the CUDA kernel
    launched on every chunk of ``pairs`` in turn, on the current device, nothing fetched;
    returns ``(lo, hi, values, status)`` device arrays per chunk. Launches are meant to
    return at once; on an H100 this loop returned only when the kernels ended."""
    from numba import cuda as numba_cuda

    index = transport._cuda_device_index(numba_cuda, "cuda")
    cuda_module, kernel, on_device = transport._cuda_thread_kernel(index, sets, table)
    launched = []
    for lo in range(0, len(pairs), chunk_size):
        hi = min(lo + chunk_size, len(pairs))
        chunk = pairs[lo:hi]
        launched.append((lo, hi, *transport._launch_chunk(cuda_module, kernel, on_device, chunk, threads_per_block)))
    return launched


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_problem_arguments(parser, pairs=8443995)
    parser.add_argument("--chunk-sizes", type=int, nargs="+", default=[1 << 21, 0], help="0: all pairs in one launch")
    parser.add_argument("--n-jobs", type=int, default=-1, help="host threads (large pairs)")
    parser.add_argument("--threads-per-block", type=int, default=128)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--probe-spins", type=int, default=50_000_000, help="toy kernels' loop (0: no probe)")
    parser.add_argument("--probe-local-bytes", type=int, default=17 * 1024)
    parser.add_argument("--probe-blocks", type=int, default=4 * 132)
    args = parser.parse_args()

    from numba import cuda

    if args.probe_spins:
        import numba

        probe = {"probe": True, "env": {k: v for k, v in sorted(os.environ.items()) if "CUDA" in k or "NUMBA" in k}}
        # A kernel built with debug=True copies an error flag back after each launch: a wait.
        names = ("CUDA_DEBUGINFO_DEFAULT", "CUDA_PER_THREAD_DEFAULT_STREAM", "CUDA_USE_NVIDIA_BINDING")
        probe["numba_config"] = {name: getattr(numba.config, name, None) for name in names}
        probe["solver_kernel_debug"] = getattr(ts.cuda_kernel(), "targetoptions", {}).get("debug")
        sizes = (args.probe_local_bytes, args.probe_blocks, args.threads_per_block)
        probe.update(launch_probe(args.probe_spins, *sizes))
        print(json.dumps(probe), flush=True)

    support, pairs = support_and_pairs(args)
    pairs = np.ascontiguousarray(pairs, dtype=np.int64)
    points = np.diff(support.graph_ptr)[pairs[:, 0]] + np.diff(support.graph_ptr)[pairs[:, 1]]
    small = np.ascontiguousarray(pairs[points <= ts.MAX_NODES])
    large = np.ascontiguousarray(pairs[points > ts.MAX_NODES])
    sets = (*support.arrays(), *support.arrays())
    kwargs = {"device": "cuda", "n_jobs": args.n_jobs, "threads_per_block": args.threads_per_block}
    transport.thread_exact_distances(support, support, pairs[:2000], **kwargs)  # compiles both engines
    for _ in range(args.repeats):
        for chunk_size in args.chunk_sizes:
            chunk = chunk_size or len(small)
            row = {"dataset": args.dataset, "d": args.d, "k": args.k, "small": len(small), "large": len(large)}
            row["chunk_size"] = chunk
            start = time.perf_counter()
            bank = transport._table_bank(support, support, 1 << 30, "thread")
            table = transport._row_distance_table(*transport._bank_arrays(bank))
            row["table_s"] = time.perf_counter() - start
            cuda.synchronize()
            start = time.perf_counter()
            launched = launch_loop(small, sets, table, chunk, args.threads_per_block)
            row["launch_loop_s"] = time.perf_counter() - start
            cuda.synchronize()
            row["kernels_s"] = time.perf_counter() - start
            del launched
            start = time.perf_counter()
            transport.exact_distances(support, support, large, n_jobs=args.n_jobs, table=table)
            row["host_large_s"] = time.perf_counter() - start
            start = time.perf_counter()
            transport.thread_exact_distances(support, support, pairs, chunk_size=chunk, **kwargs)
            row["whole_s"] = time.perf_counter() - start
            print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
