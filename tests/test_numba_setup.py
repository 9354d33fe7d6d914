"""numba's per-process set-up runs once, with the garbage collector paused, and leaves the
collector as it found it."""

from __future__ import annotations

import gc
import os
import subprocess
import sys
from pathlib import Path

import pytest

from mwsp_torch import compiled


@pytest.fixture
def fresh(monkeypatch):
    """The module as in a new process, its first dispatch recording the collector's state."""
    seen = []
    monkeypatch.setattr(compiled, "_ready", False)
    monkeypatch.setattr(compiled, "_first_dispatch", lambda: seen.append(gc.isenabled()))
    enabled = gc.isenabled()
    yield seen
    if enabled:
        gc.enable()
    else:
        gc.disable()


@pytest.mark.parametrize("enabled", [True, False])
def test_collector_paused_during_set_up_and_restored(fresh, enabled):
    if enabled:
        gc.enable()
    else:
        gc.disable()
    compiled.numba_ready()
    assert fresh == [False]
    assert gc.isenabled() is enabled


def test_set_up_runs_once(fresh):
    compiled.numba_ready()
    compiled.numba_ready()
    assert fresh == [False]


def test_failed_set_up_restores_the_collector_and_is_retried(fresh, monkeypatch):
    gc.enable()

    def fail():
        raise RuntimeError("no numba")

    monkeypatch.setattr(compiled, "_first_dispatch", fail)
    with pytest.raises(RuntimeError, match="no numba"):
        compiled.numba_ready()
    assert gc.isenabled()
    assert not compiled._ready


def test_real_first_dispatch_runs():
    # The compiled function itself (not a stand-in): numba must load or compile it.
    assert compiled._first_dispatch() == 0
    compiled.numba_ready()
    assert compiled._ready


def test_child_forked_during_the_pause_gets_its_collector_and_lock_back(monkeypatch):
    # What a child inherits when another thread forks in the middle of the set-up.
    enabled = gc.isenabled()
    held = compiled.threading.Lock()
    held.acquire()
    monkeypatch.setattr(compiled, "_setup_lock", held)
    monkeypatch.setattr(compiled, "_paused_from", True)
    gc.disable()
    try:
        compiled._after_fork_in_child()
        assert gc.isenabled()
        assert compiled._paused_from is None
        assert compiled._setup_lock.acquire(blocking=False)
        compiled._setup_lock.release()
    finally:
        if enabled:
            gc.enable()
        else:
            gc.disable()


FORKED = """
import gc, os
from mwsp_torch import compiled as s
s._lock.acquire()
s._paused_from = True
gc.disable()
pid = os.fork()
if pid == 0:
    ok = gc.isenabled() and s._paused_from is None and s._lock.acquire(blocking=False)
    os._exit(0 if ok else 3)
_, status = os.waitpid(pid, 0)
print(os.waitstatus_to_exitcode(status))
"""


@pytest.mark.skipif(not hasattr(os, "fork"), reason="os.fork is POSIX only")
def test_fork_hook_is_registered():
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[1]))
    done = subprocess.run([sys.executable, "-c", FORKED], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-1] == "0"
