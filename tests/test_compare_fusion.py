"""``fusion``: probabilities that no label they score has shaped (inner splits included), a
test fold whose labels change nothing it is scored with, a kernel equal to its definition,
``a = 1`` selecting exactly as MWSP, cells that resume and refuse another request, and the
row and paired test in the comparison's table."""

import shutil
from itertools import combinations
from pathlib import Path

import numpy as np
import pytest
import torch
from sklearn.svm import SVC

from mwsp_torch.compare import KernelGrid, compare, comparison_data
from mwsp_torch.compare import fusion as fusion_module
from mwsp_torch.compare.fusion import (
    FUSION_GIN,
    FusedKernels,
    FusionGrid,
    fold_probabilities,
    fusion_candidates,
    fusion_cell_path,
    gin_probabilities,
    probability_cell_path,
    run_fusion_cell,
)
from mwsp_torch.compare.kernels import drop_checkpoint, kernel_settings, run_kernel_cell, selection_checkpoint
from mwsp_torch.compare.report import best_pairs
from mwsp_torch.evaluation import nested_folds
from mwsp_torch.evaluation.store import SelectionStore
from mwsp_torch.gnn import PackedGraphs, errica_node_features
from mwsp_torch.gnn_protocol import protocol_of
from mwsp_torch.kernel import laplacian_kernel

DATA = Path(__file__).parent / "data"
GRID = KernelGrid(mwsp=((1, 0), (2, 0)), lams=(0.1, 1.0), Cs=(0.1, 1.0, 10.0))
TINY = FusionGrid(a=(1.0, 0.5, 0.0), gammas=(1.0, 10.0), gin={**FUSION_GIN, "hidden_units": [8]}, max_epochs=2,
                  patience=2)  # fmt: skip
GIN = {"setting": TINY.gin, "fixed": protocol_of("gin")["fixed"], "max_epochs": 2, "patience": 2, "holdout": 0.1}


@pytest.fixture(scope="module")
def mutag():
    graphs, y, outer, labels, _ = comparison_data("MUTAG", data_root=DATA)
    packed = PackedGraphs(errica_node_features(graphs), [g.edge_index for g in graphs], np.zeros(len(y)))
    folds = nested_folds(y, (0,), outer_folds=outer.pairs())
    return graphs, y, outer, labels, packed, folds


@pytest.fixture(scope="module")
def plain(mutag, tmp_path_factory):
    graphs, y, outer, labels, *_ = mutag
    root = tmp_path_factory.mktemp("fusion")
    cell = run_fusion_cell(root, graphs, y, outer, dataset="MUTAG", labels=labels, grid=GRID, fusion=TINY, n_jobs=1,
                           progress=False)  # fmt: skip
    return root, cell


def test_no_label_shapes_the_probabilities_that_score_it(mutag):
    """Flipping inner fold 2's labels leaves its out-of-fold probabilities and every probability
    inner split 2 reads as they were (a scheme that let split 2 read the outer probabilities
    fails here), while the other GINs, which trained on fold 2, move."""
    _, y, _, _, packed, folds = mutag
    _, train, test, splits = folds[0]
    j, part = 2, train[splits[2][1]]
    flipped = y.copy()
    flipped[part] = 1 - flipped[part]
    base = fold_probabilities(packed, y, train, test, splits, 2, **GIN)
    moved = fold_probabilities(packed, flipped, train, test, splits, 2, **GIN)
    assert np.array_equal(base["outer"][part], moved["outer"][part])
    assert np.array_equal(base["inner"][j], moved["inner"][j], equal_nan=True)
    other = train[splits[0][1]]
    assert not np.allclose(base["outer"][other], moved["outer"][other])
    assert not np.allclose(base["outer"][test], moved["outer"][test])
    for m in set(range(5)) - {j}:
        assert not np.array_equal(base["inner"][m], moved["inner"][m], equal_nan=True)
    # Every graph of the fold is described, by probabilities that sum to one.
    rows = np.concatenate([train, test])
    assert np.allclose(base["outer"][rows].sum(1), 1.0)
    assert np.allclose(base["inner"][j][train].sum(1), 1.0) and np.isnan(base["inner"][j][test]).all()

    flipped = y.copy()
    flipped[test] = 1 - flipped[test]
    unread = fold_probabilities(packed, flipped, train, test, splits, 2, **GIN)
    assert np.array_equal(base["outer"], unread["outer"], equal_nan=True)
    assert np.array_equal(base["inner"], unread["inner"], equal_nan=True)


def test_the_probabilities_are_cross_fitted_and_stacked_by_definition(mutag):
    """Outer fold 0's probabilities rebuilt GIN by GIN (seeds 0..14 in the module's order):
    a training graph of inner fold m gets GIN m's, a test graph the mean of the five; in split
    j a graph of fold m gets GIN {j, m}'s, a graph of fold j the mean of the four without j."""
    _, y, _, _, packed, folds = mutag
    _, train, test, splits = folds[0]
    parts = [train[valid] for _, valid in splits]
    got = fold_probabilities(packed, y, train, test, splits, 2, **GIN)

    def gin(seed, left_out, scored):
        fit = np.concatenate([parts[m] for m in range(5) if m not in left_out])
        return gin_probabilities(packed, fit, y[fit], scored, 2, seed=seed, **GIN)

    outer = [gin(m, (m,), np.concatenate([parts[m], test])) for m in range(5)]
    for m in range(5):
        assert np.array_equal(got["outer"][parts[m]], outer[m][: len(parts[m])])
    assert np.allclose(got["outer"][test], np.mean([p[-len(test) :] for p in outer], axis=0), atol=1e-12)
    j, fold_j = 1, []
    for g, pair in enumerate(combinations(range(5), 2), start=5):
        if j in pair:
            (m,) = set(pair) - {j}
            assert np.array_equal(got["inner"][j][parts[m]], gin(g, pair, parts[m]))
            fold_j.append(gin(g, pair, parts[j]))
    assert np.allclose(got["inner"][j][parts[j]], np.mean(fold_j, axis=0), atol=1e-12)


def test_the_fused_kernel_is_its_definition_and_a_1_is_mwsp_exactly(mutag):
    graphs, y, _, labels, _, _ = mutag
    W, _ = kernel_settings("mwsp", graphs, "MUTAG", labels, GRID, n_jobs=1)
    p = np.random.default_rng(0).dirichlet([1.0, 1.0], size=len(y))
    candidates = fusion_candidates(W, GRID.lams, TINY)
    learner = FusedKernels(W, candidates, [p], [[p] * 5])
    rows, cols = np.arange(0, 40), np.arange(20, 70)
    (name,) = [n for n, c in candidates.items() if c == ((2, 0), 0.5, 1.0, 10.0)]
    by_hand = np.array(
        [
            [0.5 * np.exp(-1.0 * W[(2, 0)][i, j]) + 0.5 * np.exp(-10.0 * np.sum((p[i] - p[j]) ** 2)) for j in cols]
            for i in rows
        ]
    )
    assert np.allclose(learner.block(name, None, rows, cols), by_hand, rtol=1e-12, atol=0)
    mwsp_alone = [n for n, c in candidates.items() if c[1] == 1.0]
    assert len(mwsp_alone) == len(GRID.mwsp) * len(GRID.lams)
    for n in mwsp_alone:
        setting, _, lam, _ = candidates[n]
        assert np.array_equal(learner.block(n, None, rows, cols), laplacian_kernel(W[setting][np.ix_(rows, cols)], lam))
    (gin_alone,) = [n for n, c in candidates.items() if c[1] == 0.0 and c[3] == 1.0]
    assert np.allclose(learner.block(gin_alone, None, rows, rows).diagonal(), 1.0)
    assert len(candidates) == len(set(candidates))


def test_with_a_1_only_fusion_selects_and_predicts_as_the_mwsp_method(mutag, tmp_path):
    graphs, y, outer, labels, *_ = mutag
    only_mwsp = FusionGrid(a=(1.0,), gin=TINY.gin, max_epochs=2, patience=2)
    fused = run_fusion_cell(tmp_path, graphs, y, outer, dataset="MUTAG", labels=labels, grid=GRID,
                            fusion=only_mwsp, n_jobs=1, progress=False)  # fmt: skip
    mwsp = run_kernel_cell(tmp_path, "mwsp", graphs, y, outer, dataset="MUTAG", labels=labels, grid=GRID, n_jobs=1,
                           progress=False)  # fmt: skip
    for a, b in zip(fused["folds"], mwsp["folds"], strict=True):
        assert {k: a["selected"][k] for k in ("d", "k", "lam", "C")} == {k: b["selected"][k] for k in
                                                                         ("d", "k", "lam", "C")}  # fmt: skip
        assert a["test_predictions"] == b["test_predictions"] and a["accuracy"] == b["accuracy"]


def test_the_result_is_the_svm_on_the_stored_probabilities(mutag, plain):
    """Each fold's predictions are SVC's on the selected kernel rebuilt from the stored
    probabilities and W, fitted on the training part; the accuracies are theirs."""
    graphs, y, outer, labels, *_ = mutag
    root, cell = plain
    W, _ = kernel_settings("mwsp", graphs, "MUTAG", labels, GRID, n_jobs=1)
    assert len(cell["folds"]) == len(outer.folds)
    for f, fold in enumerate(cell["folds"]):
        stored = np.load(probability_cell_path(root, "MUTAG", f))
        s = fold["selected"]
        train, test = outer.pairs()[f]
        assert fold["test_indices"] == np.asarray(test).tolist()

        def kernel(rows, cols, s=s, p=stored["outer"]):
            d2 = ((p[rows][:, None] - p[cols][None]) ** 2).sum(-1)
            k_p = np.exp(-s["gamma"] * d2) if s["a"] < 1 else 0.0
            k_w = np.exp(-s["lam"] * W[(s["d"], s["k"])][np.ix_(rows, cols)]) if s["a"] > 0 else 0.0
            return s["a"] * k_w + (1 - s["a"]) * k_p

        predicted = SVC(kernel="precomputed", C=s["C"]).fit(kernel(train, train), y[train]).predict(kernel(test, train))
        assert predicted.tolist() == fold["test_predictions"]
        assert fold["accuracy"] == pytest.approx(100.0 * np.mean(predicted == y[test]))
    assert cell["accuracy_mean"] == pytest.approx(np.mean([f["accuracy"] for f in cell["folds"]]))


def test_fusion_never_reads_a_test_folds_labels(mutag, plain, tmp_path):
    graphs, y, outer, labels, *_ = mutag
    test = outer.folds[3].test
    flipped = y.copy()
    flipped[test] = 1 - flipped[test]
    poisoned = run_fusion_cell(tmp_path, graphs, flipped, outer, dataset="MUTAG", labels=labels, grid=GRID,
                               fusion=TINY, n_jobs=1, progress=False)["folds"][3]  # fmt: skip
    clean = plain[1]["folds"][3]
    assert clean["selected"] == poisoned["selected"]
    assert clean["test_predictions"] == poisoned["test_predictions"]
    assert clean["accuracy"] + poisoned["accuracy"] == pytest.approx(100.0)


def test_cells_resume_without_training_and_refuse_another_request(mutag, plain, monkeypatch):
    graphs, y, outer, labels, *_ = mutag
    root, first = plain
    kept = {f: probability_cell_path(root, "MUTAG", f).stat().st_mtime_ns for f in range(len(outer.folds))}

    def no_training(*args, **kwargs):
        raise AssertionError("a GIN was trained although its fold's probabilities were on disk")

    monkeypatch.setattr(fusion_module, "gin_probabilities", no_training)
    options = {"dataset": "MUTAG", "labels": labels, "grid": GRID, "n_jobs": 1, "progress": False}
    again = run_fusion_cell(root, graphs, y, outer, fusion=TINY, **options)
    assert not again["computed"] and again["folds"] == first["folds"]
    wider = [g.clone() for g in graphs]  # other node inputs (an attribute column): refused, not reused
    for g in wider:
        g.node_attr = torch.ones(g.num_nodes, 1)
    with pytest.raises(ValueError, match=r"all-folds.json: computed under another request \(gin differ\)"):
        run_fusion_cell(root, wider, y, outer, fusion=TINY, **options)
    fusion_cell_path(root, "MUTAG").unlink()  # a run killed after its probabilities: selection only
    resumed = run_fusion_cell(root, graphs, y, outer, fusion=TINY, **options)
    assert resumed["computed"] and resumed["folds"] == first["folds"]
    assert kept == {f: probability_cell_path(root, "MUTAG", f).stat().st_mtime_ns for f in kept}
    other = FusionGrid(a=TINY.a, gammas=TINY.gammas, gin=TINY.gin, max_epochs=3, patience=2)
    with pytest.raises(ValueError, match="all-folds.json: computed under another request"):
        run_fusion_cell(root, graphs, y, outer, fusion=other, **options)
    fusion_cell_path(root, "MUTAG").unlink()
    with pytest.raises(ValueError, match=r"fold-00.npz: computed under another request \(gin differ\)"):
        run_fusion_cell(root, graphs, y, outer, fusion=other, **options)


def test_a_selection_killed_part_way_resumes_from_its_finished_steps(mutag, plain, tmp_path):
    """A run killed after 5 selection steps (probabilities on disk) leaves those steps in its
    checkpoint; the next run reads them, computes the rest, selects and predicts as the
    uninterrupted run, and removes the checkpoint once the cell is written."""
    graphs, y, outer, labels, *_ = mutag
    root, first = plain
    for f in range(len(outer.folds)):
        target = probability_cell_path(tmp_path, "MUTAG", f)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(probability_cell_path(root, "MUTAG", f), target)
    options = {"dataset": "MUTAG", "labels": labels, "grid": GRID, "fusion": TINY, "n_jobs": 1, "progress": False}
    checkpoint = selection_checkpoint("MUTAG", "fusion", outer)
    drop_checkpoint(checkpoint)

    class Killed(Exception):
        pass

    add = SelectionStore.add

    def killed_after_five(store, step, scores):
        if len(store.steps) == 5:
            raise Killed
        add(store, step, scores)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(SelectionStore, "add", killed_after_five)
        with pytest.raises(Killed):
            run_fusion_cell(tmp_path, graphs, y, outer, **options)
    assert not fusion_cell_path(tmp_path, "MUTAG").exists()
    assert len(list(checkpoint.glob("selection-*.jsonl"))) == 1
    resumed = run_fusion_cell(tmp_path, graphs, y, outer, **options)
    assert resumed["computed"] and resumed["resumed_steps"] == 5
    assert resumed["folds"] == first["folds"]
    assert list(checkpoint.glob("selection-*.jsonl")) == []


def test_the_table_has_a_fusion_row_tested_against_the_better_parent(plain):
    root, cell = plain
    result = compare("MUTAG", root=root, data_root=DATA, methods=("mwsp", "fusion"), grid=GRID, fusion=TINY,
                     n_jobs=1, progress=False)  # fmt: skip
    rows = {row["method"]: row for row in result["rows"]}
    assert rows["fusion"]["fold_accuracies"] == [f["accuracy"] for f in cell["folds"]]
    assert rows["fusion"]["grid"] == cell["grid_text"]
    assert ("fusion", "mwsp") in [(t["a"], t["b"]) for t in result["tests"]]
    assert "| MUTAG | fusion |" in result["paths"]["md"].read_text()

    def row(method, accuracy):
        return {"method": method, "folds_done": 10, "folds": 10, "accuracy_mean": accuracy}

    pairs = best_pairs([row("mwsp", 80.0), row("wl", 79.0), row("gin", 82.0), row("fusion", 85.0)])
    assert pairs[:2] == [("mwsp", "gin"), ("fusion", "gin")]
    assert ("fusion", "mwsp") in pairs and ("gin", "fusion") not in pairs and ("fusion", "gin") in pairs
    assert sum(frozenset(p) == frozenset(("fusion", "gin")) for p in pairs) == 1
    # The structure-agnostic baseline above GIN is not the best GNN; it meets the best of all.
    pairs = best_pairs([row("mwsp", 80.0), row("gin", 70.0), row("baseline", 71.0), row("fusion", 81.0)])
    assert pairs[:2] == [("mwsp", "gin"), ("fusion", "mwsp")] and ("fusion", "baseline") in pairs
