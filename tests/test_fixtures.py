"""The small datasets under ``tests/data`` are what ``tests/data/make_fixtures.py`` cuts from
the full ones: where the full datasets are (``$MWSP_DATA_ROOT``, as in CI), cut them again
and compare, byte for byte."""

from __future__ import annotations

import importlib.util
from pathlib import Path

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


def test_each_fixture_loads_with_the_graphs_its_table_says(fixture_root, cache_dir):
    assert sorted(p.name for p in fixture_root.iterdir() if (p / "raw").is_dir()) == sorted(make_fixtures.FIXTURES)
    for name, (count, _) in make_fixtures.FIXTURES.items():
        graphs, y = load_tudataset(name, root=fixture_root, cache_dir=cache_dir)
        assert len(graphs) == len(y) == (count or 188), name  # MUTAG (whole): 188 graphs
