"""A selection step stops fitting a C that can no longer win its fold (its floor). The plain
loops of ``test_evaluation_protocols.py`` pin what the protocols select; here: the scores kept
are the full ones, only what could not win is cut, and the cutting does happen."""

import functools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import mwsp_torch.evaluation.protocols as protocols
from mwsp_torch import MWSP, nested_protocol, paper_protocol
from mwsp_torch.evaluation import KernelSVM, nested_folds, select, step_scores
from mwsp_torch.evaluation.selection import leader_first

from random_graphs import random_graphs

LAMS = (1e-2, 1e-1, 1.0)
CS = (1e-3, 1e-1, 1.0, 10.0)
SETTINGS = [(1, 0), (2, 0), (2, 1)]


@functools.cache
def _problem():
    graphs = random_graphs(60, seed=21, max_nodes=10)
    y = np.array([int(g.num_nodes > 7) for g in graphs])  # learnable: a floor well above the weak C
    distances = {(d, k): MWSP(d=d, k=k).fit(graphs).distances_ for d, k in SETTINGS}
    return distances, y


def _step(floor, solver="libsvm", key=(2, 0), lam=1e-1, fits=False):
    distances, y = _problem()
    _, train, _, splits = nested_folds(y, seeds=(0,), n_outer=5, n_inner=5)[0]
    scores, made = step_scores(KernelSVM(distances, "svc", "flip", solver), key, lam, CS, y, train, splits, floor)
    return (scores, made) if fits else scores


@pytest.mark.parametrize("solver", ["libsvm", "path"])
@settings(max_examples=15, deadline=None)
@given(floor=st.floats(0.0, 1.0))
def test_a_floor_keeps_the_full_scores_and_cuts_only_what_is_below_it(solver, floor):
    full = _step(None, solver)
    cut = _step(floor, solver)
    kept = ~np.isnan(cut)
    assert np.array_equal(cut[kept], full[kept])  # bit for bit: the same sums in the same order
    assert np.all(full[~kept] < floor)
    assert np.all(kept[full >= floor])


def test_a_floor_no_c_can_reach_ends_the_step_after_one_split():
    scores, fits = _step(1.5, fits=True)
    assert np.isnan(scores).all()
    assert fits == len(CS)  # the first split's fits, then nothing
    assert _step(None, fits=True)[1] == 5 * len(CS)


def _fits_and_result(monkeypatch, protocol, floors: bool):
    # Without floors: the engine asked to make every fit.
    monkeypatch.setattr(protocols, "select", functools.partial(select, floors=floors))
    result = protocol()
    monkeypatch.undo()
    return result["svm_fits"], result


@pytest.mark.parametrize("which", ["nested", "paper"])
def test_floors_cut_fits_and_change_no_selection(monkeypatch, which):
    distances, y = _problem()
    if which == "nested":
        protocol = functools.partial(
            nested_protocol, distances, y, LAMS, CS, seeds=(0, 1), n_outer=5, n_inner=5, n_jobs=1
        )
        steps, inner = 2 * 5 * len(SETTINGS) * len(LAMS), 5
    else:
        protocol = functools.partial(paper_protocol, distances[(2, 0)], y, LAMS, CS, n_jobs=1, n_splits=5)
        steps, inner = 5 * len(LAMS), 5
    plain_fits, plain = _fits_and_result(monkeypatch, protocol, floors=False)
    fits, result = _fits_and_result(monkeypatch, protocol, floors=True)
    assert plain_fits == steps * inner * len(CS) + len(plain["fold_accuracies"])
    assert fits < 0.9 * plain_fits
    for name in ("selected", "fold_accuracies", "accuracy_mean", "accuracy_std"):
        assert result[name] == plain[name]


def test_cut_scores_are_kept_and_read_back_by_a_checkpoint(tmp_path):
    distances, y = _problem()

    def run():
        return nested_protocol(distances, y, LAMS, CS, seeds=(0,), n_outer=5, n_inner=5, n_jobs=1, checkpoint=tmp_path)

    first = run()
    (path,) = tmp_path.glob("selection-*.jsonl")
    assert "NaN" in path.read_text()
    again = run()
    assert again["resumed_steps"] == 5 * len(SETTINGS) * len(LAMS)
    assert again["selected"] == first["selected"] and again["fold_accuracies"] == first["fold_accuracies"]


def test_each_fold_starts_with_the_best_step_of_the_fold_before():
    keys, lams = ["a", "b"], [1, 2, 3]
    todo = [(f, key, lam) for f in range(3) for key in keys for lam in lams]
    scores = {(0, key, lam): np.array([0.5, np.nan]) for key in keys for lam in lams}
    scores[(0, "b", 2)] = np.array([np.nan, 0.75])
    todo = [step for step in todo if step not in scores]
    made = list(leader_first(todo, scores))
    assert made[0] == (1, "b", 2)
    assert made[1:6] == [(1, key, lam) for key in keys for lam in lams if (key, lam) != ("b", 2)]
    assert made[6:] == [(2, key, lam) for key in keys for lam in lams]  # fold 1 not scored yet: grid order
