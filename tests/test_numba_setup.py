"""numba's per-process set-up runs once, with the garbage collector paused, and leaves the
collector as it found it."""

from __future__ import annotations

import gc

import pytest

from mwsp_torch import _numba_setup


@pytest.fixture
def fresh(monkeypatch):
    """The module as in a new process, its first dispatch recording the collector's state."""
    seen = []
    monkeypatch.setattr(_numba_setup, "_ready", False)
    monkeypatch.setattr(_numba_setup, "_first_dispatch", lambda: seen.append(gc.isenabled()))
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
    _numba_setup.numba_ready()
    assert fresh == [False]
    assert gc.isenabled() is enabled


def test_set_up_runs_once(fresh):
    _numba_setup.numba_ready()
    _numba_setup.numba_ready()
    assert fresh == [False]


def test_failed_set_up_restores_the_collector_and_is_retried(fresh, monkeypatch):
    gc.enable()

    def fail():
        raise RuntimeError("no numba")

    monkeypatch.setattr(_numba_setup, "_first_dispatch", fail)
    with pytest.raises(RuntimeError, match="no numba"):
        _numba_setup.numba_ready()
    assert gc.isenabled()
    assert not _numba_setup._ready


def test_real_first_dispatch_runs():
    # The compiled function itself (not a stand-in): numba must load or compile it.
    assert _numba_setup._first_dispatch() == 0
    _numba_setup.numba_ready()
    assert _numba_setup._ready
