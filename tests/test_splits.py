"""Split files: Errica et al.'s ``data_splits`` read back index for index, and the seed-42 writer
equal to the folds a reference draws.

A comparison on "their folds" is only that if every index of their file reaches the methods
unchanged; and the project's own files are only "StratifiedKFold(shuffle=True, seed) and a
stratified hold-out" if a reference call draws the very same folds.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import numpy as np
import pytest
from sklearn.model_selection import StratifiedKFold, train_test_split

from mwsp_torch.splits import load_errica_splits, make_splits, read_split_file, save_splits

FIXTURE = Path(__file__).resolve().parent / "data" / "errica_splits" / "MUTAG_splits.json"
#: Errica et al.'s files, where the project's shared data folder is beside the checkout.
SHARED_SPLITS = Path(os.environ.get("MWSP_ERRICA_SPLITS", Path(__file__).resolve().parents[2] / "shared" /
                                    "errica_splits"))  # fmt: skip


def _check_read_back(path: Path, y) -> None:
    raw = json.loads(path.read_text())
    splits = load_errica_splits(path, y=y)
    assert splits.sha256 == hashlib.sha256(path.read_bytes()).hexdigest()
    assert splits.source == "errica" and splits.num_graphs == len(y) and len(splits.folds) == len(raw)
    for fold, file_fold in zip(splits.folds, raw, strict=True):
        (selection,) = file_fold["model_selection"]
        assert fold.test.tolist() == file_fold["test"]  # the file's order, index for index
        assert fold.validation.tolist() == selection["validation"]
        assert fold.inner_train.tolist() == sorted(selection["train"])
        assert fold.train.tolist() == sorted(selection["train"] + selection["validation"])
    assert read_split_file(path, y=y).sha256 == splits.sha256


def test_errica_fixture_read_back_index_for_index(mutag):
    _, y = mutag
    _check_read_back(FIXTURE, y)
    splits = load_errica_splits(FIXTURE, y=y)
    # Values written in the fixture (tests/data/errica_splits/README.md), not re-derived here.
    assert splits.folds[0].test[:5].tolist() == [44, 138, 165, 120, 25]
    assert splits.folds[0].validation[:5].tolist() == [116, 94, 5, 147, 108]
    assert [len(f.test) for f in splits.folds] == [63, 63, 62]
    assert [len(f.validation) for f in splits.folds] == [13, 13, 13]
    assert splits.dataset == "MUTAG" and splits.seed == -1
    # Without y the size comes from the largest index; the class labels' hash is then unknown.
    assert load_errica_splits(FIXTURE).num_graphs == 188 and load_errica_splits(FIXTURE).labels_sha256 == ""


@pytest.mark.tudata("NCI1", "PROTEINS_full", "DD", "ENZYMES", "IMDB-BINARY")
def test_errica_published_files_read_back_index_for_index(tu_root, cache_dir):
    from mwsp_torch.datasets import load_tudataset

    assert SHARED_SPLITS.is_dir(), f"Errica et al.'s split files not found at {SHARED_SPLITS} (MWSP_ERRICA_SPLITS)"
    for folder, name in (("CHEMICAL", "NCI1"), ("CHEMICAL", "PROTEINS_full"), ("CHEMICAL", "DD"),
                         ("CHEMICAL", "ENZYMES"), ("COLLABORATIVE_DEGREE", "IMDB-BINARY")):  # fmt: skip
        _, y = load_tudataset(name, root=tu_root, cache_dir=cache_dir)
        _check_read_back(SHARED_SPLITS / folder / f"{name}_splits.json", y)


def _fixture_payload() -> list:
    return json.loads(FIXTURE.read_text())


@pytest.mark.parametrize(
    "edit, message",
    [
        (lambda p: p[0]["test"].append(p[0]["model_selection"][0]["train"][0]), "in both train and test"),
        (lambda p: p[0]["model_selection"][0]["validation"].append(p[0]["test"][0]), "in both validation and test"),
        (lambda p: p[0]["model_selection"][0]["train"].pop(), "in none of test, train and validation"),
        (lambda p: p[0]["test"].append(188), "graph index 188 outside 0..187"),
        (lambda p: p[0]["model_selection"].append(p[0]["model_selection"][0]), "expected one model_selection"),
        (lambda p: p[0].update(extra=1), "expected the keys test and model_selection"),
        (lambda p: p[0]["test"].append(p[0]["test"][0]), "a graph index repeats"),
    ],
)
def test_bad_errica_files_are_refused_naming_the_fold(tmp_path, mutag, edit, message):
    payload = _fixture_payload()
    edit(payload)
    path = tmp_path / "MUTAG_splits.json"
    path.write_text(json.dumps(payload))
    with pytest.raises(ValueError, match=f"fold 0.*{message}"):
        load_errica_splits(path, y=mutag[1])


def test_errica_test_parts_must_partition_the_graphs(tmp_path, mutag):
    payload = _fixture_payload()
    # Fold 1's test part swapped for fold 0's (each fold still covers every graph): graphs
    # of fold 0's test are now in two test parts, those of fold 1's in none.
    payload[1] = json.loads(json.dumps(payload[0]))
    path = tmp_path / "MUTAG_splits.json"
    path.write_text(json.dumps(payload))
    with pytest.raises(ValueError, match="in 2 test folds|in no test fold"):
        load_errica_splits(path, y=mutag[1])
    path.write_text(json.dumps({"folds": []}))
    with pytest.raises(ValueError, match="not an Errica et al. split file"):
        load_errica_splits(path)
    with pytest.raises(ValueError, match="fold 0, test: graph index .* outside 0..99"):
        load_errica_splits(FIXTURE, y=mutag[1][:100])
    with pytest.raises(ValueError, match="num_graphs=200 but y has 188 labels"):
        load_errica_splits(FIXTURE, y=mutag[1], num_graphs=200)


@pytest.mark.parametrize("seed", [0, 1, 7, 42, 2020])
def test_seeded_split_file_equals_a_reference_draw(tmp_path, seed):
    """The project's split files hold exactly ``StratifiedKFold(10, shuffle=True, random_state=seed)``
    and, in each training fold, ``train_test_split(test_size=0.1, stratify, random_state=seed)``."""
    rng = np.random.default_rng(seed)
    y = rng.permutation(np.repeat([0, 1, 2], [50, 31, 20]))
    path = tmp_path / "toy.json"
    save_splits(make_splits(y, "toy", seed=seed), path)
    splits = read_split_file(path, y=y)
    reference = StratifiedKFold(n_splits=10, shuffle=True, random_state=seed).split(np.zeros(len(y)), y)
    for fold, (train, test) in zip(splits.folds, reference, strict=True):
        _, validation = train_test_split(train, test_size=0.1, stratify=y[train], random_state=seed)
        assert fold.test.tolist() == test.tolist()
        assert fold.train.tolist() == train.tolist()
        assert fold.validation.tolist() == sorted(validation.tolist())
        # Stratified: every class's share of a test fold within one graph of its share overall.
        for c, count in zip(*np.unique(y, return_counts=True), strict=True):
            assert abs((y[fold.test] == c).sum() - count / 10) < 1
    # Another seed draws other folds (the seed is not ignored).
    other = make_splits(y, "toy", seed=seed + 1)
    assert any(a.test.tolist() != b.test.tolist() for a, b in zip(splits.folds, other.folds, strict=True))
