"""Borrowed array views (:mod:`mwsp_torch.transport._borrow`) and the hot loops that use them."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest
from numba import njit

from mwsp_torch import compiled
from mwsp_torch.transport._borrow import borrowed, borrowed_run, release


@njit
def _write_through_views(owner, start, size):
    whole = borrowed(owner)
    run = borrowed_run(owner, start, size)
    for i in range(size):
        run[i] = -run[i]
    whole[0] += 100.0
    total = run.sum()
    shape = run.shape[0]
    release(owner)
    return total, shape


@njit
def _matrix_view(owner):
    view = borrowed(owner)
    flat = view.ravel()
    return view[1, 2], flat[owner.shape[1] + 2], view.shape[0], view.shape[1]


def test_borrowed_views_read_and_write_the_owners_memory():
    owner = np.arange(10.0)
    total, size = _write_through_views(owner, 3, 4)
    assert size == 4
    assert total == -(3.0 + 4.0 + 5.0 + 6.0)
    np.testing.assert_array_equal(owner, [100.0, 1.0, 2.0, -3.0, -4.0, -5.0, -6.0, 7.0, 8.0, 9.0])
    matrix = np.arange(12.0).reshape(3, 4)
    assert _matrix_view(matrix) == (6.0, 6.0, 3, 4)


# Counts numba's reference-count increments of real (owned) arrays: the runtime's atomic add
# is replaced, before anything is compiled, by a plain add that also bumps COUNT. A fresh
# numba cache and the JIT path, so that the engine and solver are compiled with it.
_COUNT_INCREMENTS = """
import numpy as np
from llvmlite import ir
import numba.core.runtime.nrtdynmod as nrt

COUNT = np.zeros(1, dtype=np.int64)

def _define_atomic_inc_dec(module, op, ordering):
    word = nrt._word_type
    function = ir.Function(module, ir.FunctionType(word, [word.as_pointer()]), name="nrt_atomic_" + op)
    builder = ir.IRBuilder(function.append_basic_block())
    [pointer] = function.args
    new = getattr(builder, op)(builder.load(pointer), ir.Constant(word, 1))
    builder.store(new, pointer)
    if op == "add":
        counter = builder.inttoptr(ir.Constant(ir.IntType(64), COUNT.ctypes.data), ir.IntType(64).as_pointer())
        builder.store(builder.add(builder.load(counter), ir.Constant(ir.IntType(64), 1)), counter)
    builder.ret(new)
    return function

nrt._define_atomic_inc_dec = _define_atomic_inc_dec

from mwsp_torch.transport.exact import cost_width, transport_cost

def increments(call):
    call()  # compile
    COUNT[:] = 0
    call()
    return int(COUNT[0])

rng = np.random.default_rng(0)
counts = []
for size in (6, 30):
    cost = np.zeros((size, cost_width(size)))
    cost[:, :size] = rng.random((size, size))
    supply = np.full(size, size + 1, dtype=np.int64)
    demand = np.full(size, size, dtype=np.int64)
    demand[0] += size
    counts.append(increments(lambda: transport_cost(supply, demand, cost)))
print("solver", *counts)

from mwsp_torch import MWSP, load_tudataset
from mwsp_torch.transport import exact_distances, upper_pairs

graphs, _ = load_tudataset("MUTAG")
support, _ = MWSP(d=2, k=0)._features(graphs, fitted=False)
pairs = upper_pairs(support.num_graphs)
counts = [increments(lambda: exact_distances(support, support, pairs[:count], n_jobs=1)) for count in (100, 2000)]
print("engine", *counts)
"""


@pytest.mark.slow  # compiles the solver and the engine anew in a child process
def test_the_solver_and_the_engine_count_no_references_per_pivot_or_pair(tmp_path, fixture_root, cache_dir):
    """The solver's work arrays and the engine's are borrowed views: a solve increments the
    reference counts of real arrays a fixed number of times, not per node and pivot as it did
    (before: 103 times for this 6 x 6 problem, 520 for the 30 x 30 one), and the engine a fixed
    number of times a call, not per pair (before: 11,110 times for 100 MUTAG pairs, 255,881 for
    2,000). Those atomic adds cost 1.13-1.5x on an Intel Xeon (``benchmarks/HISTORY.md``)."""
    env = {
        **os.environ,
        "NUMBA_CACHE_DIR": str(tmp_path),
        compiled.KERNELS_ENV: "jit",
        "MWSP_DATA_ROOT": str(fixture_root),
        "MWSP_CACHE_DIR": str(cache_dir),
    }
    done = subprocess.run(
        [sys.executable, "-c", _COUNT_INCREMENTS], capture_output=True, text=True, env=env, timeout=1200
    )
    assert done.returncode == 0, done.stderr[-3000:]
    lines = dict((line.split()[0], [int(x) for x in line.split()[1:]]) for line in done.stdout.splitlines()[-2:])
    small, large = lines["solver"]
    assert small == large and large <= 8, (small, large)
    few, many = lines["engine"]
    assert few == many, (few, many)
