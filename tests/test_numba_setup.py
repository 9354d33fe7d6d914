"""numba's one-time registry fill runs with the cyclic garbage collector paused, and leaves
the collector as it found it."""

from __future__ import annotations

import gc

import pytest
from numba.core.registry import cpu_target

from mwsp_torch import MWSP, _numba_setup, estimator
from mwsp_torch.datasets import make_csl

prepare = _numba_setup.prepare_numba.__wrapped__  # the body, without the once-per-process cache


@pytest.fixture
def collector_restored():
    enabled = gc.isenabled()
    yield
    _set_collector(enabled)


def _set_collector(enabled: bool) -> None:
    if enabled:
        gc.enable()
    else:
        gc.disable()


@pytest.mark.parametrize("enabled", [True, False])
def test_registries_filled_with_the_collector_paused_then_restored(monkeypatch, collector_restored, enabled):
    seen = []
    monkeypatch.setattr(cpu_target.typing_context, "refresh", lambda: seen.append(("typing", gc.isenabled())))
    monkeypatch.setattr(cpu_target.target_context, "refresh", lambda: seen.append(("target", gc.isenabled())))
    _set_collector(enabled)
    prepare()
    assert seen == [("typing", False), ("target", False)]
    assert gc.isenabled() is enabled


def test_collector_restored_when_the_fill_fails(monkeypatch, collector_restored):
    def fail():
        raise RuntimeError("registry fill failed")

    monkeypatch.setattr(cpu_target.typing_context, "refresh", fail)
    gc.enable()
    with pytest.raises(RuntimeError, match="registry fill failed"):
        prepare()
    assert gc.isenabled()


def test_estimator_prepares_numba_before_its_features(monkeypatch):
    calls = []
    monkeypatch.setattr(estimator, "prepare_numba", lambda: calls.append("prepared"))
    graphs, _ = make_csl(graphs_per_class=2, num_nodes=11)
    model = MWSP(d=2, k=1).fit(graphs[:6])
    assert calls == ["prepared"]
    model.cross_distances(graphs[6:])
    assert calls == ["prepared", "prepared"]
