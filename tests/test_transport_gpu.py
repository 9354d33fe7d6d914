"""The thread engine (transport.gpu, transport._thread_simplex): equal to the compiled engine,
its CUDA kernel in numba's simulator, the host's share, and its errors."""

import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mwsp_torch import MWSP, make_csl
from mwsp_torch.transport import (
    Exact,
    exact_distances,
    upper_pairs,
)
from mwsp_torch.transport.measures import bank_arrays

from helpers import make_data


def test_thread_engine_takes_a_torch_device():
    import torch

    graphs = [make_data(3, [(0, 1), (1, 2)], [0, 1, 0]), make_data(2, [(0, 1)], [1, 1]), make_data(1, [], [2])]
    compiled = MWSP().fit(graphs).distances_
    thread = MWSP(solver=Exact(engine="thread"), device=torch.device("cpu")).fit(graphs).distances_
    np.testing.assert_allclose(thread, compiled, rtol=1e-12, atol=0)


def _random_graphs(seed, count, low, high, num_labels):
    rng = np.random.default_rng(seed)
    graphs = []
    for _ in range(count):
        n = int(rng.integers(low, high + 1))
        edges = [(u, u + 1) for u in range(n - 1)] + [tuple(rng.choice(n, 2, replace=False)) for _ in range(n // 2)]
        graphs.append(make_data(n, edges, rng.integers(0, num_labels, n).tolist()))
    return graphs


def test_thread_engine_hands_large_problems_to_the_compiled_engine(monkeypatch):
    """Pairs left with more than 63 points go to ``exact_distances``, the rest are solved by
    the thread kernel, and together they give the compiled engine's W."""
    import mwsp_torch.transport.gpu as transport
    from mwsp_torch.transport._thread_simplex import MAX_NODES

    graphs = _random_graphs(0, 16, 12, 60, 6)
    model = MWSP(d=3, k=1).fit(graphs)
    pairs = upper_pairs(len(graphs))
    handed = []
    compiled = transport.exact_distances

    def counting(left, right, chosen, **kwargs):
        handed.append(np.array(chosen))
        return compiled(left, right, chosen, **kwargs)

    monkeypatch.setattr(transport, "exact_distances", counting)
    got = transport.thread_exact_distances(model.support_, model.support_, pairs, chunk_size=7)
    np.testing.assert_allclose(got, model.distances_[pairs[:, 0], pairs[:, 1]], rtol=1e-12, atol=1e-15)
    assert len(handed) == 1
    sizes = np.diff(model.support_.graph_ptr)
    large = sizes[handed[0][:, 0]] + sizes[handed[0][:, 1]]
    assert 0 < len(handed[0]) < len(pairs) and np.all(large > MAX_NODES)
    # Called on every pair, the kernel itself refuses (flags) what would overflow its arrays.
    from mwsp_torch.transport._thread_simplex import SOLVED, TOO_LARGE, cpu_kernel
    from mwsp_torch.transport.costs import row_distance_table

    values = np.zeros(len(pairs))
    status = np.zeros(len(pairs), dtype=np.int8)
    table = row_distance_table(*bank_arrays(model.support_.rows))
    cpu_kernel()(pairs, *model.support_.arrays(), *model.support_.arrays(), table, values, status)
    assert np.any(status == TOO_LARGE) and np.all((status == TOO_LARGE) <= (sizes[pairs].sum(1) > MAX_NODES))
    solved = status == SOLVED
    np.testing.assert_allclose(values[solved], got[solved], rtol=1e-12, atol=1e-15)
    assert np.all(np.isin(status, [SOLVED, TOO_LARGE]))


@pytest.mark.parametrize("broken", ["missing", "numpy_mismatch"])
def test_thread_engine_names_why_numba_cuda_cannot_be_imported(monkeypatch, broken):
    """On the GPU image of 2026-11-24 ``import numba.cuda`` raised ``AttributeError`` (numba-cuda
    against numpy 2.5, which dropped ``row_stack``) from deep inside numba. The thread engine
    on ``cuda`` now says what failed and what to do, before it builds any kernel."""
    import importlib
    import sys

    import mwsp_torch.transport._thread_simplex as thread_simplex
    from mwsp_torch.transport import thread_exact_distances

    if broken == "missing":
        monkeypatch.setitem(sys.modules, "numba.cuda", None)  # import numba.cuda raises ImportError
    else:
        real = importlib.import_module

        def import_module(name, package=None):
            if name == "numba.cuda":
                raise AttributeError("module 'numpy' has no attribute 'row_stack'")
            return real(name, package)

        monkeypatch.setattr(importlib, "import_module", import_module)
    monkeypatch.setattr(thread_simplex, "_KERNELS", {})
    graphs, _ = make_csl(graphs_per_class=2, num_nodes=11)
    model = MWSP(d=2, k=1).fit(graphs)
    pairs = upper_pairs(len(graphs))
    expected = "needs numba.cuda, which failed to import" + (".*row_stack" if broken == "numpy_mismatch" else "")
    with pytest.raises(RuntimeError, match=expected):
        thread_exact_distances(model.support_, model.support_, pairs, device="cuda")


def test_thread_engine_refuses_bad_input():
    from mwsp_torch.transport import thread_exact_distances

    graphs, _ = make_csl(graphs_per_class=2, num_nodes=11)
    model = MWSP(d=2, k=1).fit(graphs)
    pairs = upper_pairs(len(graphs))
    with pytest.raises(ValueError, match=r"use MWSP\(exact_engine='compiled'\) \(exact_distances\)"):
        thread_exact_distances(model.support_, model.support_, pairs, table_bytes=8)
    with pytest.raises(ValueError, match="expected 'cpu' or 'cuda"):
        thread_exact_distances(model.support_, model.support_, pairs, device="mps")
    with pytest.raises(ValueError, match="checkpoint is only kept"):
        MWSP(solver=Exact(engine="thread"), checkpoint="somewhere").fit(graphs)
    assert len(thread_exact_distances(model.support_, model.support_, pairs[:0])) == 0
    rows = model.support_.rows.shape[0]
    with pytest.raises(ValueError, match="a table was given, but costs='merged'"):
        exact_distances(model.support_, model.support_, pairs, costs="merged", table=np.zeros((rows, rows)))
    with pytest.raises(ValueError, match=f"the bank has {rows} rows"):
        exact_distances(model.support_, model.support_, pairs, table=np.zeros((rows + 1, rows + 1)))


SIMULATED = """
import numpy as np
from mwsp_torch import MWSP, load_tudataset
import mwsp_torch.transport._thread_simplex as thread_simplex
from mwsp_torch.transport import thread_exact_distances, upper_pairs
graphs = load_tudataset("MUTAG", root={root!r}, cache_dir={cache!r})[0][:24]
model = MWSP(d=3, k=1).fit(graphs)
pairs = upper_pairs(len(graphs))
# A lower limit, so that some pairs go to the host while the worker thread runs the kernel.
thread_simplex.MAX_NODES = 30
print(int(np.sum(np.diff(model.support_.graph_ptr)[pairs].sum(axis=1) > 30)))
got = thread_exact_distances(model.support_, model.support_, pairs, device="cuda", threads_per_block=32)
want = model.distances_[pairs[:, 0], pairs[:, 1]]
print(float(np.max(np.abs(got - want) / np.maximum(want, 1e-300))))
"""


def test_thread_engine_cuda_kernel_in_the_simulator(fixture_root, cache_dir):
    """The CUDA kernel itself (its ``cuda.local`` arrays, thread indexing and launch), run
    by numba's CUDA simulator on the CPU: CI has no GPU, and the CPU kernel shares every
    function of the solver but not these."""
    env = dict(os.environ, NUMBA_ENABLE_CUDASIM="1", PYTHONPATH=str(Path(__file__).resolve().parents[1]))
    script = SIMULATED.format(root=str(fixture_root), cache=str(cache_dir))
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    large, error = done.stdout.strip().splitlines()[-2:]
    assert 0 < int(large) < 276  # pairs on the host and pairs on the (simulated) GPU
    # Relative, not bit for bit: the CPU solver prices every row of small problems and roots
    # its first tree elsewhere, so the two take different pivots to the same optimum.
    assert float(error) <= 1e-12


def _fake_cuda_worker(monkeypatch, wait_for=None, fail=False, host_fails=False):
    """``thread_exact_distances`` on ``cuda`` with its CUDA worker replaced by one that takes
    chunks from the same queue and solves them with the CPU build of the kernel: the
    engine's threads and queue as on a GPU. Returns what each side did. One lock keeps the
    two sides' numba ``prange`` kernels apart (numba's workqueue layer aborts on two at
    once; the real worker runs none)."""

    import mwsp_torch.transport._thread_simplex as thread_simplex
    import mwsp_torch.transport.gpu as transport

    record = {"host": [], "host_done": 0, "worker": [], "host_thread": set(), "worker_thread": None}
    compiled = transport.exact_distances
    one_kernel = threading.Lock()

    def host(left, right, chosen, **kwargs):
        record["host_thread"].add(threading.current_thread())
        record["host"].append(np.array(chosen))
        if host_fails:
            raise MemoryError("host failed")
        with one_kernel:
            values = compiled(left, right, chosen, **kwargs)
        record["host_done"] += 1
        return values

    def worker(index, chosen, sets, table, queue, chunk_size, threads_per_block, values, status, report):
        record["worker_thread"] = threading.current_thread()
        record["index"] = index
        if fail:
            raise RuntimeError("CUDA_ERROR_LAUNCH_FAILED")
        record["waited"] = wait_for is None or wait_for(record, queue)
        if not record["waited"]:
            raise AssertionError("the host did not do its part while the CUDA worker waited")
        while (span := queue.take(chunk_size)) is not None:
            lo, hi = span
            with one_kernel:
                thread_simplex.cpu_kernel()(chosen[lo:hi], *sets, table, values[lo:hi], status[lo:hi])
            record["worker"].append(chosen[lo:hi])
            report(hi - lo)

    monkeypatch.setattr(transport, "exact_distances", host)
    monkeypatch.setattr(transport, "_thread_kernels_on_cuda", worker)
    monkeypatch.setattr(transport, "cuda_device_index", lambda cuda, device: 0)
    monkeypatch.setattr(thread_simplex, "import_numba_cuda", lambda: None)
    return record


def _wait_until(condition, timeout=60.0):

    stop = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > stop:
            return False
        time.sleep(0.001)
    return True


@pytest.mark.parametrize("deterministic", [False, True])
def test_thread_engine_shares_the_pairs_between_host_and_gpu(monkeypatch, deterministic):
    """On an H100 the launch loop returned only when the kernels ended, so the host's large
    pairs, solved after it, did not overlap the GPU. Now the calling thread solves them while
    one worker thread makes every CUDA call, then takes small pairs from the back of the
    worker's queue. Here the worker's stand-in waits until the host has solved its large
    pairs and a share of the small ones: run one after the other, it would wait in vain.
    Under torch's deterministic mode the host takes no small pairs (the two solvers differ
    in the last bits)."""

    import torch

    import mwsp_torch.transport.gpu as transport

    graphs = _random_graphs(0, 16, 12, 60, 6)
    model = MWSP(d=3, k=1).fit(graphs)
    pairs = upper_pairs(len(graphs))
    import time

    def wait_for(record, queue):
        if not _wait_until(lambda: record["host_done"] >= (1 if deterministic else 2)):
            return False  # neither the large pairs nor (unless deterministic) a share of small ones
        time.sleep(0.5 if deterministic else 0.0)  # time enough to take a share it must not take
        return True

    record = _fake_cuda_worker(monkeypatch, wait_for=wait_for)
    monkeypatch.setattr(torch, "are_deterministic_algorithms_enabled", lambda: deterministic)
    done = []
    got = transport.thread_exact_distances(
        model.support_, model.support_, pairs, device="cuda", chunk_size=8, progress=done.append
    )
    np.testing.assert_allclose(got, model.distances_[pairs[:, 0], pairs[:, 1]], rtol=1e-12, atol=1e-15)
    assert record["host_thread"] == {threading.main_thread()}
    assert record["worker_thread"] is not threading.main_thread()
    # Every pair solved exactly once: the large ones by the host's first call, each small one
    # by the host (two at a time, a quarter chunk) or by the worker (eight at a time).
    sizes = np.diff(model.support_.graph_ptr)
    large = record["host"][0]
    assert len(large) and np.all(sizes[large].sum(axis=1) > 63)
    shares = record["host"][1:]
    assert (len(shares) == 0) if deterministic else (len(shares) >= 1 and all(len(s) <= 2 for s in shares))
    solved = np.concatenate([large, *shares, *record["worker"]])
    assert len(solved) == len(pairs)
    assert len(np.unique(solved[:, 0] * len(graphs) + solved[:, 1])) == len(pairs)
    assert sum(done) == len(pairs)


def test_thread_engine_raises_what_its_cuda_worker_raised(monkeypatch):
    import mwsp_torch.transport.gpu as transport

    graphs = _random_graphs(0, 16, 12, 60, 6)
    model = MWSP(d=3, k=1).fit(graphs)
    _fake_cuda_worker(monkeypatch, fail=True)
    with pytest.raises(RuntimeError, match="CUDA_ERROR_LAUNCH_FAILED"):
        transport.thread_exact_distances(model.support_, model.support_, upper_pairs(len(graphs)), device="cuda")
    with pytest.raises(ValueError, match="chunk_size must be a positive integer, got 0"):
        transport.thread_exact_distances(model.support_, model.support_, upper_pairs(3), chunk_size=0)
    with pytest.raises(ValueError, match="chunk_size must be a positive integer, got True"):
        transport.thread_exact_distances(model.support_, model.support_, upper_pairs(3), chunk_size=True)


def test_thread_engine_stops_its_cuda_worker_when_the_host_fails(monkeypatch):
    """An error on the host (here its large pairs) closes the queue: the worker, waiting
    until the host has failed, then finds nothing left to launch."""
    import mwsp_torch.transport.gpu as transport

    graphs = _random_graphs(0, 16, 12, 60, 6)
    model = MWSP(d=3, k=1).fit(graphs)

    def wait_for(record, queue):
        _wait_until(lambda: len(record["host"]) >= 1)  # the host has been called and fails
        return _wait_until(lambda: queue.take(0) is None, timeout=30)  # an empty span until closed

    record = _fake_cuda_worker(monkeypatch, wait_for=wait_for, host_fails=True)
    with pytest.raises(MemoryError, match="host failed"):
        transport.thread_exact_distances(model.support_, model.support_, upper_pairs(len(graphs)), device="cuda")
    assert record["waited"] and record["worker"] == []


def test_cuda_device_index_follows_the_name_or_the_current_device():
    """The worker thread starts without a CUDA context, so the caller resolves the device:
    ``cuda:N``, else the caller's current device (torch's, say), else 0; one numba does not
    see is refused before any work."""
    from types import SimpleNamespace

    from mwsp_torch.transport.gpu import cuda_device_index

    class Devices(list):
        current = None

    devices = Devices([SimpleNamespace(id=0), SimpleNamespace(id=1)])
    cuda = SimpleNamespace(gpus=devices)
    assert cuda_device_index(cuda, "cuda") == 0
    assert cuda_device_index(cuda, "cuda:1") == 1
    devices.current = devices[1]
    assert cuda_device_index(cuda, "cuda") == 1
    assert cuda_device_index(cuda, "cuda:0") == 0
    with pytest.raises(ValueError, match=r"device='cuda:2': numba sees 2 CUDA device\(s\)"):
        cuda_device_index(cuda, "cuda:2")


@settings(max_examples=200, deadline=None)
@given(
    total=st.integers(0, 60),
    takes=st.lists(st.tuples(st.integers(1, 9), st.booleans()), max_size=40),
)
def test_pair_queue_hands_out_each_index_once(total, takes):
    """The thread engine's queue: spans taken from either end never overlap, and together
    with what is left they cover the range; once closed it hands out nothing."""
    from mwsp_torch.transport.gpu import PairQueue

    queue = PairQueue(total)
    taken = []
    for size, from_back in takes:
        span = queue.take(size, from_back=from_back)
        if span is None:
            assert sum(hi - lo for lo, hi in taken) == total
            continue
        lo, hi = span
        assert 0 <= lo < hi <= total and hi - lo <= size
        taken.append(span)
    covered = [i for lo, hi in taken for i in range(lo, hi)]
    assert len(covered) == len(set(covered))
    rest = []
    while (span := queue.take(7)) is not None:
        rest.extend(range(*span))
    assert sorted(covered + rest) == list(range(total))
    queue = PairQueue(total)
    queue.close()
    assert queue.take(1) is None and queue.take(1, from_back=True) is None
