"""The small datasets under ``tests/data`` are what ``tests/data/make_fixtures.py`` cuts from
the full ones: where the full datasets are (``$MWSP_DATA_ROOT``, as in CI), cut them again
and compare, byte for byte."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest

from mwsp_torch import load_tudataset

_SCRIPT = Path(__file__).resolve().parent / "data" / "make_fixtures.py"
_spec = importlib.util.spec_from_file_location("make_fixtures", _SCRIPT)
make_fixtures = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(make_fixtures)


def _files(folder: Path) -> dict[str, bytes]:
    return {path.name: path.read_bytes() for path in sorted(folder.iterdir())}


@pytest.mark.tudata(*make_fixtures.FIXTURES)
def test_the_fixtures_are_cut_from_the_full_datasets(tu_root, fixture_root, tmp_path):
    make_fixtures.main([str(tu_root), str(tmp_path)])
    for name in make_fixtures.FIXTURES:
        assert _files(fixture_root / name / "raw") == _files(tmp_path / name / "raw"), name


#: Graphs in each fixture: the first ones its table names, then those that top up its classes.
SIZES = {"MUTAG": 188, "PTC_MR": 80, "NCI1": 180, "ENZYMES": 100, "Cuneiform": 90, "IMDB-BINARY": 30}


def test_each_fixture_loads_with_the_graphs_its_table_says(fixture_root, cache_dir):
    assert sorted(p.name for p in fixture_root.iterdir() if (p / "raw").is_dir()) == sorted(make_fixtures.FIXTURES)
    assert set(SIZES) == set(make_fixtures.FIXTURES)
    for name, (first, _, _) in make_fixtures.FIXTURES.items():
        graphs, y = load_tudataset(name, root=fixture_root, cache_dir=cache_dir)
        assert len(graphs) == len(y) == SIZES[name], name
        assert first is None or len(graphs) >= first, name  # MUTAG (whole): 188 graphs


def test_every_fixture_can_be_classified(fixture_root, cache_dir):
    """Two classes or more, and at least 3 graphs of each: enough for a stratified split
    (a fixture of one class is refused by every protocol: "y has a single class")."""
    for name in make_fixtures.FIXTURES:
        _, y = load_tudataset(name, root=fixture_root, cache_dir=cache_dir)
        counts = np.bincount(y)
        assert len(counts) >= 2 and counts.min() >= 3, (name, counts)


def test_the_first_graphs_come_first_and_the_tops_up_after_them():
    """:func:`kept_graphs`: the first graphs, then each class's next ones until it has enough."""
    labels = [b"0", b"0", b"0", b"1", b"0", b"2", b"1", b"1", b"2"]
    assert make_fixtures.kept_graphs(labels, 3, 2) == [0, 1, 2, 3, 5, 6, 8]
    assert make_fixtures.kept_graphs(labels, 3, 0) == [0, 1, 2]
    assert make_fixtures._renumbered(b"12, 7", [3, 4]) == b"3, 4"
    assert make_fixtures._renumbered(b"12,7", [3, 4]) == b"3,4"


def test_the_attributed_fixture_holds_enzymes_attributes(fixture_root, cache_dir):
    graphs, _ = load_tudataset("ENZYMES", root=fixture_root, cache_dir=cache_dir)
    assert all(g.node_attr.shape == (g.num_nodes, 18) for g in graphs)
