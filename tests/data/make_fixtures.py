"""Write the test fixtures ``tests/data/NAME/raw/NAME_*.txt`` from the TU datasets' raw files.

    python tests/data/make_fixtures.py SOURCE_ROOT [OUT_ROOT]

``SOURCE_ROOT`` holds the full datasets as ``NAME/raw/NAME_*.txt`` (the layout PyG's
``TUDataset`` reads; ``$MWSP_DATA_ROOT`` in CI); ``OUT_ROOT`` defaults to this folder. Each
fixture is the first ``graphs`` graphs of its dataset, in the same raw format, each kept line
byte for byte as in the source (MUTAG, whole, is copied as it is):

- per graph (``graph_labels``, ``graph_attributes``): the first ``graphs`` lines;
- per node (``graph_indicator``, ``node_labels``, ``node_attributes``): the lines of the
  nodes of those graphs, which come first (graph IDs never go back);
- per edge (``A``, ``edge_labels``, ``edge_attributes``): the lines whose edge starts at one
  of those nodes (no edge joins two graphs: checked).

``drop`` names per-node or per-edge files left out to keep the fixtures small; no test reads
them. The source's ``README.txt`` comes along. ``tests/test_fixtures.py`` rebuilds the
fixtures from ``$MWSP_DATA_ROOT`` and compares them with these, byte for byte.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent

#: name -> (graphs kept, None for all; raw file parts left out)
FIXTURES: dict[str, tuple[int | None, tuple[str, ...]]] = {
    "MUTAG": (None, ()),
    "PTC_MR": (80, ()),
    "NCI1": (140, ()),
    "ENZYMES": (80, ("node_attributes",)),
    "Cuneiform": (30, ()),
    "IMDB-BINARY": (20, ()),
}

PER_GRAPH = ("graph_labels", "graph_attributes")
PER_NODE = ("graph_indicator", "node_labels", "node_attributes")
PER_EDGE = ("A", "edge_labels", "edge_attributes")


def _lines(path: Path) -> list[bytes]:
    data = path.read_bytes()
    lines = data.split(b"\n")
    if lines[-1] == b"":
        lines.pop()
    return lines


def _write(path: Path, lines: list[bytes]) -> None:
    path.write_bytes(b"".join(line + b"\n" for line in lines))


def make(name: str, source_root: Path, out_root: Path) -> None:
    graphs, drop = FIXTURES[name]
    source, out = source_root / name / "raw", out_root / name / "raw"
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    parts = {path.name[len(name) + 1 : -len(".txt")]: path for path in source.glob(f"{name}_*.txt")}
    unknown = set(parts) - set(PER_GRAPH + PER_NODE + PER_EDGE)
    if unknown:
        raise ValueError(f"{source}: raw files of unknown kind: {sorted(unknown)}")
    if (source / "README.txt").is_file():
        shutil.copyfile(source / "README.txt", out / "README.txt")
    if graphs is None:
        for part, path in parts.items():
            if part not in drop:
                shutil.copyfile(path, out / path.name)
        return
    indicator = [int(line) for line in _lines(parts["graph_indicator"])]
    nodes = next((i for i, graph in enumerate(indicator) if graph > graphs), len(indicator))
    edges = _lines(parts["A"])
    keep = []
    for line in edges:
        source_node, target_node = (int(value) for value in line.split(b","))
        if (source_node <= nodes) != (target_node <= nodes):
            raise ValueError(f"{name}: edge {line!r} joins graph {graphs} and a later one")
        keep.append(source_node <= nodes)
    for part, path in parts.items():
        if part in drop:
            continue
        lines = _lines(path)
        if part in PER_GRAPH:
            lines = lines[:graphs]
        elif part in PER_NODE:
            lines = lines[:nodes]
        else:
            if len(lines) != len(edges):
                raise ValueError(f"{path}: {len(lines)} lines for {len(edges)} edges")
            lines = [line for line, kept in zip(lines, keep, strict=True) if kept]
        _write(out / path.name, lines)


def main(argv: list[str]) -> None:
    if not 1 <= len(argv) <= 2:
        raise SystemExit(__doc__)
    source_root = Path(argv[0])
    out_root = Path(argv[1]) if len(argv) > 1 else HERE
    for name in FIXTURES:
        make(name, source_root, out_root)


if __name__ == "__main__":
    main(sys.argv[1:])
