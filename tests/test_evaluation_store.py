"""A protocol's selection killed part way and started again computes only the missing steps
and selects exactly what an uninterrupted run selects; other inputs never read its steps."""

import json

import numpy as np
import pytest

import mwsp_torch.evaluation.selection as selection
from mwsp_torch import MWSP, nested_protocol, paper_protocol
from mwsp_torch.evaluation.store import SelectionStore, step_checksum

from random_graphs import random_graphs

LAMS = (1e-2, 1e-1, 1.0)
CS = (1e-1, 1.0, 10.0)
SETTINGS = [(1, 0), (2, 0)]


@pytest.fixture(scope="module")
def problem():
    graphs = random_graphs(48, seed=5, max_nodes=10)
    y = np.array([int(g.num_nodes > 7) ^ int(int(g.node_label.sum()) % 3 == 0) for g in graphs])
    distances = {(d, k): MWSP(d=d, k=k).fit(graphs).distances_ for d, k in SETTINGS}
    return distances, y


@pytest.fixture
def counted(monkeypatch):
    """How many steps the selection computes (in this process: ``n_jobs=1``)."""
    calls = []
    original = selection.step_scores

    def step_scores(*args):
        calls.append(1)
        return original(*args)

    monkeypatch.setattr(selection, "step_scores", step_scores)
    return calls


def _nested(distances, y, **kwargs):
    return nested_protocol(distances, y, LAMS, CS, seeds=(0, 1), n_outer=4, n_inner=3, n_jobs=1, **kwargs)


def _same(a: dict, b: dict) -> None:
    assert a["selected"] == b["selected"]
    assert a["fold_accuracies"] == b["fold_accuracies"]
    assert a["accuracy_mean"] == b["accuracy_mean"]


def test_a_killed_nested_selection_resumes_with_the_same_selections(problem, counted, tmp_path):
    distances, y = problem
    plain = _nested(distances, y)
    steps = 2 * 4 * len(SETTINGS) * len(LAMS)
    assert len(counted) == steps and plain["resumed_steps"] == 0
    first = _nested(distances, y, checkpoint=tmp_path)
    _same(first, plain)
    (path,) = tmp_path.glob("selection-*.jsonl")
    lines = path.read_text().splitlines()
    assert len(lines) == steps
    # As a kill leaves it: the first 17 steps, then half a line.
    path.write_text("\n".join(lines[:17]) + "\n" + lines[17][: len(lines[17]) // 2])
    counted.clear()
    with pytest.warns(UserWarning, match="last line was cut short"):
        resumed = _nested(distances, y, checkpoint=tmp_path)
    _same(resumed, plain)
    assert resumed["resumed_steps"] == 17
    assert len(counted) == steps - 17
    assert len(path.read_text().splitlines()) == steps  # the torn line was dropped, not kept
    counted.clear()
    again = _nested(distances, y, checkpoint=tmp_path)
    _same(again, plain)
    assert again["resumed_steps"] == steps and counted == []


def test_stored_scores_are_what_selects(problem, tmp_path):
    """The stored scores are read, not recomputed: rewriting fold 0's changes its selection."""
    distances, y = problem
    plain = _nested(distances, y, checkpoint=tmp_path)
    (path,) = tmp_path.glob("selection-*.jsonl")
    entries = [json.loads(line) for line in path.read_text().splitlines()]
    for entry in entries:
        if entry["step"][0] == 0:
            last = entry["step"][1:] == [len(SETTINGS) - 1, len(LAMS) - 1]
            entry["scores"] = [0.0, 0.0, 1.0] if last else [0.0] * len(CS)
            entry["sha"] = step_checksum(entry["step"], np.array(entry["scores"]))
    path.write_text("".join(json.dumps(e) + "\n" for e in entries))
    resumed = _nested(distances, y, checkpoint=tmp_path)
    d, k = SETTINGS[-1]
    assert resumed["selected"][0] == {"seed": 0, "d": d, "k": k, "lam": LAMS[-1], "C": CS[-1]}
    assert resumed["selected"][0] != plain["selected"][0]
    assert resumed["selected"][1:] == plain["selected"][1:]


OTHER_CALLS = {
    "W": lambda d, y: ({key: w * 1.5 for key, w in d.items()}, y, {}),
    "labels": lambda d, y: (d, 1 - y, {}),
    "Cs": lambda d, y: (d, y, {"Cs": CS[:2]}),
    "lams order": lambda d, y: (d, y, {"lams": LAMS[::-1]}),
    "seeds": lambda d, y: (d, y, {"seeds": (0, 2)}),
    "inner folds": lambda d, y: (d, y, {"n_inner": 2}),
    "solver": lambda d, y: (d, y, {"svm_solver": "path"}),
    "krein": lambda d, y: (d, y, {"svm": "krein"}),
}


@pytest.mark.parametrize("change", sorted(OTHER_CALLS))
def test_other_inputs_never_read_the_steps(problem, counted, tmp_path, change):
    distances, y = problem
    _nested(distances, y, checkpoint=tmp_path)
    counted.clear()
    other, other_y, kwargs = OTHER_CALLS[change](distances, y)
    args = {"lams": LAMS, "Cs": CS, "seeds": (0, 1), "n_outer": 4, "n_inner": 3, **kwargs}
    result = nested_protocol(other, other_y, n_jobs=1, checkpoint=tmp_path, **args)
    assert result["resumed_steps"] == 0
    assert len(counted) == 2 * 4 * len(SETTINGS) * len(args["lams"])
    assert len(list(tmp_path.glob("selection-*.jsonl"))) == 2


def test_a_damaged_line_is_recomputed_with_a_warning(problem, counted, tmp_path):
    distances, y = problem
    plain = _nested(distances, y, checkpoint=tmp_path)
    (path,) = tmp_path.glob("selection-*.jsonl")
    lines = path.read_text().splitlines()
    lines[3] = '{"step": [0, 1, "'
    entry = json.loads(lines[5])
    entry["scores"][0] = 1.0 if entry["scores"][0] != 1.0 else 0.0  # another valid number
    lines[5] = json.dumps(entry)
    lines[7] = json.dumps({**json.loads(lines[7]), "scores": [0.5]})
    path.write_text("\n".join(lines) + "\n")
    counted.clear()
    with pytest.warns(UserWarning) as record:
        resumed = _nested(distances, y, checkpoint=tmp_path)
    messages = " ".join(str(w.message) for w in record)
    assert "line 4: unreadable" in messages
    assert "line 6: does not match its checksum" in messages and "line 8: does not match" in messages
    _same(resumed, plain)
    assert len(counted) == 3


def test_paper_protocol_resumes(problem, counted, tmp_path):
    distances, y = problem
    w = distances[(2, 0)]
    plain = paper_protocol(w, y, LAMS, CS, n_jobs=1, n_splits=4)
    paper_protocol(w, y, LAMS, CS, n_jobs=1, n_splits=4, checkpoint=tmp_path)
    (path,) = tmp_path.glob("selection-*.jsonl")
    lines = path.read_text().splitlines()
    path.write_text("\n".join(lines[:5]) + "\n")
    counted.clear()
    resumed = paper_protocol(w, y, LAMS, CS, n_jobs=1, n_splits=4, checkpoint=tmp_path)
    _same(resumed, plain)
    assert resumed["resumed_steps"] == 5 and len(counted) == 4 * len(LAMS) - 5


def test_resuming_on_two_processes_selects_the_same(problem, tmp_path):
    distances, y = problem
    plain = _nested(distances, y)
    _nested(distances, y, checkpoint=tmp_path)
    (path,) = tmp_path.glob("selection-*.jsonl")
    lines = path.read_text().splitlines()
    path.write_text("\n".join(lines[::2]) + "\n")
    resumed = nested_protocol(distances, y, LAMS, CS, seeds=(0, 1), n_outer=4, n_inner=3, n_jobs=2, checkpoint=tmp_path)
    _same(resumed, plain)
    assert resumed["resumed_steps"] == len(lines[::2])


def test_a_second_process_on_the_same_selection_is_refused(problem, tmp_path):
    distances, y = problem
    _nested(distances, y, checkpoint=tmp_path)
    (path,) = tmp_path.glob("selection-*.jsonl")
    fingerprint = path.stem.removeprefix("selection-")
    with SelectionStore(tmp_path, fingerprint, len(CS)) as held:  # as a running process holds it
        assert len(held.steps) == 2 * 4 * len(SETTINGS) * len(LAMS)
        with pytest.raises(ValueError, match="in use by another process running the same selection"):
            _nested(distances, y, checkpoint=tmp_path)
    _nested(distances, y, checkpoint=tmp_path)  # released


def test_a_file_as_checkpoint_is_refused(problem, tmp_path):
    distances, y = problem
    target = tmp_path / "file"
    target.write_text("")
    with pytest.raises(ValueError, match="exists and is not a directory"):
        _nested(distances, y, checkpoint=target)
