"""Write the test fixtures ``tests/data/NAME/raw/NAME_*.txt`` from the TU datasets' raw files.

    python tests/data/make_fixtures.py SOURCE_ROOT [OUT_ROOT]

``SOURCE_ROOT`` holds the full datasets as ``NAME/raw/NAME_*.txt`` (the layout PyG's
``TUDataset`` reads; ``$MWSP_DATA_ROOT`` in CI); ``OUT_ROOT`` defaults to this folder. Each
fixture is the first ``first`` graphs of its dataset, then, for each class that has fewer
than ``per_class`` graphs among them, its next graphs in the file until it has that many
(the datasets list their graphs class by class, so the first graphs alone are often one
class), in the same raw format (MUTAG, whole, is copied as it is):

- per graph (``graph_labels``, ``graph_attributes``): the lines of the graphs kept;
- per node (``graph_indicator``, ``node_labels``, ``node_attributes``): the lines of their
  nodes;
- per edge (``A``, ``edge_labels``, ``edge_attributes``): the lines whose edge starts at one
  of their nodes (no edge joins two graphs: checked).

Every kept line is byte for byte as in the source, except the node numbers of ``A`` and the
graph IDs of ``graph_indicator`` of the graphs appended after the first ones, which are
renumbered to follow on (the first graphs' lines are unchanged). ``drop`` names per-node or
per-edge files left out to keep the fixtures small; no test reads them. The source's
``README.txt`` comes along. ``tests/test_fixtures.py`` rebuilds the fixtures from
``$MWSP_DATA_ROOT`` and compares them with these, byte for byte.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent

#: name -> (first graphs kept, None for all; graphs each class is topped up to; raw file parts left out)
FIXTURES: dict[str, tuple[int | None, int, tuple[str, ...]]] = {
    "MUTAG": (None, 0, ()),
    "PTC_MR": (80, 0, ()),
    "NCI1": (140, 40, ()),
    "ENZYMES": (80, 4, ()),
    "Cuneiform": (30, 3, ()),
    "IMDB-BINARY": (20, 10, ()),
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


def kept_graphs(labels: list[bytes], first: int, per_class: int) -> list[int]:
    """The graphs a fixture keeps (0-based, in file order): the first ``first``, then for each
    class with fewer than ``per_class`` among them its next graphs until it has that many."""
    kept = list(range(min(first, len(labels))))
    counts: dict[bytes, int] = {}
    for graph in kept:
        counts[labels[graph].strip()] = counts.get(labels[graph].strip(), 0) + 1
    for graph in range(len(kept), len(labels)):
        label = labels[graph].strip()
        if counts.get(label, 0) < per_class:
            counts[label] = counts.get(label, 0) + 1
            kept.append(graph)
    return kept


def _renumbered(line: bytes, values: list[int]) -> bytes:
    """``line``'s comma-separated integers replaced by ``values``, its spacing kept."""
    fields = line.split(b",")
    out = []
    for field, value in zip(fields, values, strict=True):
        stripped = field.strip()
        start = field.index(stripped)
        out.append(field[:start] + str(value).encode() + field[start + len(stripped) :])
    return b",".join(out)


def make(name: str, source_root: Path, out_root: Path) -> None:
    first, per_class, drop = FIXTURES[name]
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
    if first is None:
        for part, path in parts.items():
            if part not in drop:
                shutil.copyfile(path, out / path.name)
        return
    graphs = kept_graphs(_lines(parts["graph_labels"]), first, per_class)
    new_graph = {graph + 1: index + 1 for index, graph in enumerate(graphs)}  # graph IDs, 1-based
    indicator = [int(line) for line in _lines(parts["graph_indicator"])]
    nodes = [node for node, graph in enumerate(indicator, 1) if graph in new_graph]  # node IDs, 1-based
    new_node = {node: index + 1 for index, node in enumerate(nodes)}
    edges = _lines(parts["A"])
    keep = []
    for line in edges:
        source_node, target_node = (int(value) for value in line.split(b","))
        if (source_node in new_node) != (target_node in new_node):
            raise ValueError(f"{name}: edge {line!r} joins a kept graph and one left out")
        keep.append(source_node in new_node)
    for part, path in parts.items():
        if part in drop:
            continue
        lines = _lines(path)
        if part in PER_GRAPH:
            lines = [lines[graph] for graph in graphs]
        elif part in PER_NODE:
            lines = [lines[node - 1] for node in nodes]
            if part == "graph_indicator":
                lines = [_renumbered(line, [new_graph[int(line)]]) for line in lines]
        else:
            if len(lines) != len(edges):
                raise ValueError(f"{path}: {len(lines)} lines for {len(edges)} edges")
            lines = [line for line, kept in zip(lines, keep, strict=True) if kept]
            if part == "A":
                lines = [_renumbered(line, [new_node[int(value)] for value in line.split(b",")]) for line in lines]
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
