"""Split files, tree-ID inputs for GNNs, and ``experiments/gnn_vs_kernel.py`` end to end on MUTAG.

The comparison is only fair if every method reads the same folds (one file, its SHA-256 in
every row), and only honest if nothing learned comes from a test graph: a tree never seen in
the training graphs gets the one "unseen" embedding.
"""

from __future__ import annotations

import csv
import json
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from mwsp_torch.gnn import (
    GIN,
    OneHotLabels,
    TreeIDEmbedding,
    TreeIDVocabulary,
    accuracy,
    graph_embeddings,
    train_classifier,
    tree_id_inputs,
)
from mwsp_torch.splits import ensure_splits, labels_sha256, load_splits, make_splits, save_splits, sha256_of
from mwsp_torch.trees import UNSEEN

from helpers import DEVICES, make_data

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


def test_the_table_script_runs_compare_and_rebuilds_the_table_from_its_cells(tmp_path, fixture_root, monkeypatch):
    """``experiments/gnn_vs_kernel.py`` over ``mwsp_torch.compare``: MUTAG's kernel and baseline
    rows on its seed-42 split file (2 epochs), then ``--report-only`` rebuilds the same table
    from the cells alone."""
    import shutil

    monkeypatch.setenv("MWSP_DATA_ROOT", str(fixture_root))
    monkeypatch.syspath_prepend(str(EXPERIMENTS))
    sys.modules.pop("gnn_vs_kernel", None)
    import gnn_vs_kernel

    monkeypatch.setattr(gnn_vs_kernel, "RESULTS", tmp_path)
    (tmp_path / "folds").mkdir()
    shutil.copy(EXPERIMENTS / "results" / "folds" / "MUTAG.json", tmp_path / "folds" / "MUTAG.json")
    argv = ["--datasets", "MUTAG", "--methods", "wl", "sp", "baseline", "--raw-dir", str(tmp_path / "raw"),
            "--max-epochs", "2", "--patience", "2", "--quiet"]  # fmt: skip
    lines = gnn_vs_kernel.main(argv)
    assert [line.split()[1] for line in lines] == ["wl", "sp", "baseline"]
    assert all("10/10 folds" in line for line in lines)
    table = (tmp_path / "gnn_vs_kernel.md").read_text()
    with open(tmp_path / "gnn_vs_kernel.csv", newline="") as handle:
        rows = list(csv.DictReader(handle))
    assert [row["method"] for row in rows] == ["wl", "sp", "baseline"]
    assert {row["split_sha256"] for row in rows} == {sha256_of(tmp_path / "folds" / "MUTAG.json")}
    assert (tmp_path / "gnn_vs_kernel-MUTAG.png").is_file()
    assert gnn_vs_kernel.main(argv + ["--report-only"]) == lines
    assert (tmp_path / "gnn_vs_kernel.md").read_text() == table
