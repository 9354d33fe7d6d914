"""Split files, tree-ID inputs for GNNs, and ``experiments/gnn_vs_kernel.py`` end to end on MUTAG.

The comparison is only fair if every method reads the same folds (one file, its SHA-256 in
every row), and only honest if nothing learned comes from a test graph: a tree never seen in
the training graphs gets the one "unseen" embedding.
"""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from mwsp_torch.gnn import (
    GIN,
    UNSEEN,
    OneHotLabels,
    TreeIDEmbedding,
    TreeIDVocabulary,
    accuracy,
    graph_embeddings,
    train_classifier,
    tree_id_inputs,
)
from mwsp_torch.splits import ensure_splits, labels_sha256, load_splits, make_splits, save_splits, sha256_of

from conftest import DEVICES, make_data

EXPERIMENTS = Path(__file__).resolve().parents[1] / "experiments"
Y = np.array([0] * 12 + [1] * 9)


def _payload(path: Path) -> dict:
    return json.loads(path.read_text())


def test_split_file_round_trip_and_hash(tmp_path):
    splits = make_splits(Y, "toy", n_splits=3, seed=42)
    path = tmp_path / "toy.json"
    assert save_splits(splits, path) == splits.sha256 == sha256_of(path)
    again = load_splits(path, y=Y)
    assert again.sha256 == splits.sha256 and again.labels_sha256 == labels_sha256(Y)
    tests = np.sort(np.concatenate([fold.test for fold in again.folds]))
    assert np.array_equal(tests, np.arange(len(Y)))
    for fold in again.folds:
        assert not np.intersect1d(fold.train, fold.test).size
        assert np.isin(fold.validation, fold.train).all() and len(fold.validation) >= 1
        assert not np.intersect1d(fold.inner_train, fold.validation).size
    # Drawn again from the same seed: the same bytes; another seed: refused over the file.
    assert save_splits(make_splits(Y, "toy", n_splits=3, seed=42), path) == splits.sha256
    with pytest.raises(FileExistsError, match="holds other folds"):
        save_splits(make_splits(Y, "toy", n_splits=3, seed=7), path)
    assert ensure_splits(path, Y, "toy", n_splits=3).sha256 == splits.sha256


@pytest.mark.parametrize(
    "edit, message",
    [
        (lambda p: p["folds"][0]["test"].append(p["folds"][1]["test"][0]), "in both train and test|in 2 test folds"),
        (lambda p: p["folds"][0]["train"].pop(), "in neither train nor test"),
        (lambda p: p["folds"][0]["test"].append(99), "graph index 99 outside 0..20"),
        (lambda p: p["folds"][0]["validation"].append(p["folds"][0]["test"][0]), "is not in the training fold"),
        (lambda p: p.update(format=0), "not a split file of format 1"),
    ],
)
def test_bad_split_files_are_refused_naming_the_fault(tmp_path, edit, message):
    path = tmp_path / "toy.json"
    save_splits(make_splits(Y, "toy", n_splits=3), path)
    payload = _payload(path)
    edit(payload)
    path.write_text(json.dumps(payload))
    with pytest.raises(ValueError, match=message):
        load_splits(path, y=Y)


def test_split_file_of_another_dataset_is_refused(tmp_path):
    path = tmp_path / "toy.json"
    save_splits(make_splits(Y, "toy", n_splits=3), path)
    with pytest.raises(ValueError, match="folds of 21 graphs, but the dataset has 20"):
        load_splits(path, y=Y[:20])
    with pytest.raises(ValueError, match="other class labels"):
        load_splits(path, y=Y[::-1])


def test_unseen_tree_gets_the_unseen_embedding():
    # Training graphs: paths labelled 0-1. The test graph has a label-2 node (unseen at scale 0)
    # and a label-0 node with two label-1 neighbours (a scale-1 tree the paths never show).
    train = [make_data(2, [[0, 1]], [0, 1]), make_data(3, [[0, 1], [1, 2]], [0, 1, 0])]
    test = make_data(4, [[0, 1], [0, 2], [2, 3]], [0, 1, 1, 2])
    vocabulary = TreeIDVocabulary(k=1).fit(train)
    assert vocabulary.sizes_[0] == 3  # labels 0 and 1, and the unseen row
    known = [ids.copy() for ids in vocabulary.known_]
    (index,) = vocabulary.transform([test])
    assert index[3, 0] == UNSEEN and index[3, 1] == UNSEEN  # label 2: unseen at every scale
    assert index[0, 0] != UNSEEN and index[0, 1] == UNSEEN  # a seen label, an unseen tree
    assert (index[1:3, 0] != UNSEEN).all()
    trained = vocabulary.transform(train)
    assert all((t != UNSEEN).all() for t in trained)  # every training tree has its own row
    # Fitting is the only step that changes the mapping: transforming the test graph did not.
    assert all(np.array_equal(a, b) for a, b in zip(known, vocabulary.known_, strict=True))
    assert vocabulary.transform(train)[1].tolist() == trained[1].tolist()
    embedding = TreeIDEmbedding(vocabulary.sizes_, dim=4)
    out = embedding(index)
    unseen = embedding.tables[0].weight[UNSEEN] + embedding.tables[1].weight[UNSEEN]
    assert torch.equal(out[3], unseen)
    one_hot = OneHotLabels(vocabulary.sizes_)(index)
    assert one_hot[3, UNSEEN] == 1 and one_hot[3].sum() == 1


def test_rare_training_trees_train_the_unseen_embedding():
    """With ``min_graphs=2`` a scale-1 tree held by one training graph maps to UNSEEN, so the
    unseen row receives a gradient from training nodes; with the default it receives none.
    Scale 0 keeps a label held by one graph."""
    train = [
        make_data(2, [[0, 1]], [0, 1]),
        make_data(3, [[0, 1], [1, 2]], [0, 1, 0]),  # label 1 between two 0s: this graph only
        make_data(2, [[0, 1]], [0, 1]),
        make_data(2, [[0, 1]], [0, 2]),  # label 2: this graph only
    ]
    rare = TreeIDVocabulary(k=1, min_graphs=2).fit(train)
    every = TreeIDVocabulary(k=1).fit(train)
    assert rare.sizes_[0] == every.sizes_[0] == 4  # labels 0, 1, 2 and the unseen row
    assert every.sizes_[1] == 6 and rare.sizes_[1] == 3  # (0,{1}), (1,{0}) kept; three rare trees dropped
    index = rare.transform(train)
    assert index[1][1, 1] == UNSEEN and index[1][0, 1] != UNSEEN
    assert index[3][1, 0] != UNSEEN and (index[3][:, 1] == UNSEEN).all()
    for vocabulary, unseen_gets_gradient in ((rare, True), (every, False)):
        embedding = TreeIDEmbedding(vocabulary.sizes_, dim=4)
        embedding(torch.cat(vocabulary.transform(train))).sum().backward()
        assert bool(embedding.tables[1].weight.grad[UNSEEN].abs().sum() > 0) is unseen_gets_gradient
    for bad in (0, -1, 1.5, True):
        with pytest.raises(ValueError, match="min_graphs must be an integer >= 1"):
            TreeIDVocabulary(k=1, min_graphs=bad)


@pytest.mark.parametrize("device", DEVICES)
def test_gin_on_tree_ids_trains_and_embeds_on_each_device(device):
    """Two classes told apart only by structure (a triangle or a path, all labels 0): GIN on
    tree IDs learns them, on the CPU always and on CUDA where there is one."""
    triangle, path = make_data(3, [[0, 1], [1, 2], [2, 0]], [0, 0, 0]), make_data(3, [[0, 1], [1, 2]], [0, 0, 0])
    graphs, y = [triangle, path] * 8, [0, 1] * 8
    vocabulary = TreeIDVocabulary(k=1).fit(graphs)
    data = tree_id_inputs(graphs, y, vocabulary)
    model = GIN(TreeIDEmbedding(vocabulary.sizes_, 8), hidden=8, num_layers=2, num_classes=2)
    log = train_classifier(model, data[:12], data[12:], lr=0.05, batch_size=4, max_epochs=30, patience=30,
                           device=device)  # fmt: skip
    assert log["validation_accuracy"] == 100.0 and 1 <= log["best_epoch"] <= log["epochs"] <= 30
    assert accuracy(model, data, device) == 100.0
    assert graph_embeddings(model, data[:3], device).shape == (3, 8 + 2 * 8)


def test_every_method_end_to_end_on_one_split_file(tmp_path, fixture_root, cache_dir, monkeypatch):
    """The seven methods on MUTAG (tiny grids, 2 epochs, 3 folds): one row each, all on the
    split file's folds (its SHA-256 in every row and cell), and a second run reuses every cell."""
    from mwsp_torch import _aot

    monkeypatch.setenv(_aot.KERNEL_DIR_ENV, str(_aot.kernel_dir()))  # the session's compiled kernels
    monkeypatch.setenv("MWSP_DATA_ROOT", str(fixture_root))
    monkeypatch.setenv("MWSP_CACHE_DIR", str(cache_dir))
    monkeypatch.syspath_prepend(str(EXPERIMENTS))
    sys.modules.pop("gnn_vs_kernel", None)
    import gnn_vs_kernel

    argv = ["--datasets", "MUTAG", "--profile", "tiny", "--n-splits", "3", "--quiet", "--folds-dir",
            str(tmp_path / "folds"), "--raw-dir", str(tmp_path / "raw"), "--out", str(tmp_path / "t.csv")]  # fmt: skip
    rows = gnn_vs_kernel.main(argv)
    split_file = tmp_path / "folds" / "MUTAG.json"
    digest = sha256_of(split_file)
    assert [r["method"] for r in rows] == list(gnn_vs_kernel.METHODS)
    assert {r["split_sha256"] for r in rows} == {digest}
    assert all(r["folds"] == 3 for r in rows)
    cells = list((tmp_path / "raw").rglob("*.json"))
    assert len(cells) == 6 * 3 + 1  # per fold, and the nested protocol's one cell for mwsp
    assert {json.loads(p.read_text())["split_sha256"] for p in cells} == {digest}
    by_method = {r["method"]: r for r in rows}
    assert by_method["mwsp"]["accuracy_mean"] > 80 and by_method["wl"]["accuracy_mean"] > 70  # MUTAG: 66.5 % majority
    with open(tmp_path / "t.csv", newline="") as handle:
        assert len(list(csv.DictReader(handle))) == 7
    assert (tmp_path / "t.md").is_file()
    import plot_gnn_vs_kernel

    assert plot_gnn_vs_kernel.plot(tmp_path / "t.csv", tmp_path) == [tmp_path / "gnn_vs_kernel-MUTAG.png"]
    assert (tmp_path / "gnn_vs_kernel-MUTAG.png").stat().st_size > 10_000
    stamps = {p: p.stat().st_mtime_ns for p in cells}
    again = gnn_vs_kernel.main(argv)
    assert [r["accuracy_mean"] for r in again] == [r["accuracy_mean"] for r in rows]
    assert all(p.stat().st_mtime_ns == stamp for p, stamp in stamps.items())  # nothing recomputed
    # Recomputed from the seed, the neural cells give the same accuracies.
    forced = gnn_vs_kernel.main(argv + ["--methods", "gin", "gin_tree_ids", "baseline", "--force"])
    assert [r["accuracy_mean"] for r in forced] == [r["accuracy_mean"] for r in rows]
    # A fresh checkout has the gin cells but not their embeddings (not kept in git): the fusion
    # retrains each fold's first gin run for them, and scores what it scored before.
    embeddings = sorted((tmp_path / "raw" / "MUTAG" / "gin").glob("*.embeddings.npy"))
    assert len(embeddings) == 3
    for path in embeddings + sorted((tmp_path / "raw" / "MUTAG" / "kernel_fusion").glob("fold-*.json")):
        path.unlink()
    fused = gnn_vs_kernel.main(argv + ["--methods", "kernel_fusion"])
    assert all(path.is_file() for path in embeddings)
    assert fused[-1]["method"] == "kernel_fusion"
    assert fused[-1]["accuracy_mean"] == rows[-1]["accuracy_mean"]


def test_row_notes_name_partial_rows_the_gap_to_errica_and_different_inputs(monkeypatch):
    monkeypatch.syspath_prepend(str(EXPERIMENTS))
    sys.modules.pop("gnn_vs_kernel", None)
    import gnn_vs_kernel

    full = gnn_vs_kernel.row_note([55.0] * 10, 10, (None, None))
    assert full == ""
    partial = gnn_vs_kernel.row_note([54.0, 56.0, 55.0, 55.0], 10, (60.0, 4.0), "their inputs differ")
    assert partial.startswith("only 4 of 10 outer folds finished")
    assert "-5.0 points from Errica et al.'s 60.0" in partial
    assert partial.endswith("their inputs differ")
    assert "ENZYMES" in gnn_vs_kernel.ERRICA_INPUTS  # their 21 features against our 3 labels


def test_cell_locks_share_work_and_recover_from_killed_runs(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(EXPERIMENTS))
    sys.modules.pop("gnn_vs_kernel", None)
    import gnn_vs_kernel

    cell = tmp_path / "MUTAG" / "gin" / "fold-0.json"
    lock = cell.with_suffix(".lock")
    assert gnn_vs_kernel.claim(cell) and lock.read_text() == str(os.getpid())
    assert gnn_vs_kernel.claim(cell)  # this process holds it already
    lock.write_text("1")  # a live process (init) holds it
    assert not gnn_vs_kernel.claim(cell)
    lock.write_text("")  # a run killed while writing its lock
    assert gnn_vs_kernel.claim(cell) and lock.read_text() == str(os.getpid())
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    lock.write_text(str(dead.pid))  # a run killed since
    assert gnn_vs_kernel.claim(cell)
    gnn_vs_kernel.release(cell)
    cell.write_text("{}")  # finished by another run between its check and the claim
    assert not gnn_vs_kernel.claim(cell) and not lock.exists()
    assert gnn_vs_kernel.claim(cell, force=True)
