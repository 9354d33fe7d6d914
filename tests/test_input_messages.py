"""Error messages for bad input name the graph (or the raw file and line) and the actual problem.

Graphs are tiny synthetic ``Data``; TU datasets are fake ones written into ``tmp_path`` in the
raw layout ``ROOT/NAME/raw/NAME_*.txt``.
"""

import os
import re
import subprocess
import sys

import numpy as np
import pytest
import torch
from torch_geometric.data import Data

from mwsp_torch import MWSP, load_tudataset
from mwsp_torch.cli import main

from helpers import make_data

GOOD = make_data(3, [(0, 1), (1, 2)], [0, 1, 0])
PATH = torch.tensor([[0, 1], [1, 2]])
ONE_HOT_X = torch.eye(2)[[0, 1, 0]]


def fit(graphs, **kwargs):
    return MWSP(d=1, k=0, **kwargs).fit(graphs)


# --- labels.py: graphs -------------------------------------------------------------------------


@pytest.mark.parametrize("field", ["x", "node_label"])
def test_label_field_without_columns_says_so_and_names_the_policies(field):
    # PyG's TUDataset leaves x of shape [num_nodes, 0] for a dataset with node attributes only.
    first = Data(edge_index=PATH, num_nodes=3, **{field: ONE_HOT_X if field == "x" else torch.tensor([0, 1, 0])})
    empty = Data(edge_index=PATH, num_nodes=3, **{field: torch.empty((3, 0), dtype=torch.long)})
    message = (
        rf"graph 1: {field} has no columns \(shape \[3, 0\]\), so no node labels; "
        r"choose labels='degree' or labels='uniform'"
    )
    with pytest.raises(ValueError, match=message):
        fit([first, empty])
    # The suggested policies do read it.
    assert fit([first, empty], labels="degree").distances_.shape == (2, 2)


@pytest.mark.parametrize("field", ["x", "node_label"])
@pytest.mark.parametrize("layout", ["coo", "csr"])
def test_sparse_labels_are_refused_by_graph_and_field(field, layout):
    dense = ONE_HOT_X if field == "x" else torch.tensor([[0, 1], [1, 0], [0, 0]])
    sparse = dense.to_sparse() if layout == "coo" else dense.to_sparse_csr()
    first = Data(edge_index=PATH, num_nodes=3, **{field: dense})
    bad = Data(edge_index=PATH, num_nodes=3, **{field: sparse})
    message = rf"graph 1: {field} must be a dense tensor, got a sparse one; pass {field}\.to_dense\(\)"
    with pytest.raises(ValueError, match=message):
        fit([first, bad])
    # What the message suggests works, and gives the dense graph's labels.
    fixed = Data(edge_index=PATH, num_nodes=3, **{field: sparse.to_dense()})
    assert fit([first, fixed]).distances_[0, 1] == 0.0


@pytest.mark.parametrize("as_torch", [False, True])
def test_uint64_edge_index_reports_the_true_node(as_torch):
    big = 2**63 + 5
    edges = np.array([[0, 1], [1, big]], dtype=np.uint64)
    bad = Data(edge_index=torch.from_numpy(edges) if as_torch else edges, num_nodes=3, node_label=GOOD.node_label)
    with pytest.raises(ValueError, match=rf"graph 1: edge_index contains node {big}, outside 0\.\.2 \(num_nodes=3\)"):
        fit([GOOD, bad])
    # Unsigned edges that int64 holds are read as they are.
    fine = np.array([[0, 1], [1, 2]], dtype=np.uint64)
    ok = Data(edge_index=torch.from_numpy(fine) if as_torch else fine, num_nodes=3, node_label=GOOD.node_label)
    assert fit([GOOD, ok]).distances_[0, 1] == 0.0


@pytest.mark.parametrize(
    ("num_nodes", "message"),
    [
        ("3", "graph 1: num_nodes must be a whole number, got '3'"),
        (True, "graph 1: num_nodes must be a whole number, got True"),
        (-1, "graph 1: num_nodes must be non-negative, got -1"),
    ],
    ids=["str", "bool", "negative"],
)
def test_bad_num_nodes_says_what_is_wrong(num_nodes, message):
    # PyG's data.num_nodes gives None for "3" and 1 for True: the value set is what is checked.
    bad = Data(edge_index=torch.tensor([[0], [1]]), num_nodes=num_nodes, node_label=torch.tensor([0, 1, 0]))
    with pytest.raises(ValueError, match=re.escape(message)):
        fit([GOOD, bad])


@pytest.mark.parametrize("values", [torch.tensor([0.0, 1.0, 0.0]), torch.tensor([False, True, False])])
def test_non_integer_node_label_says_why(values):
    # x may be float (PyG stores one-hot x as float) with whole values; node_label is never cast.
    bad = Data(edge_index=PATH, num_nodes=3, node_label=values)
    dtype = str(values.numpy().dtype)
    message = (
        rf"graph 1: node_label must be an integer tensor, got {dtype} \(node_label is read as given, never cast; "
        r"only x may be float, as PyG stores one-hot x as float\); if its values are whole numbers, "
        r"pass node_label\.long\(\)"
    )
    with pytest.raises(ValueError, match=message):
        fit([GOOD, bad])
    assert fit([GOOD, Data(edge_index=PATH, num_nodes=3, node_label=values.long())]).distances_[0, 1] == 0.0
    # The same values as x are read (whole-number float, or bool one-hot).
    other = ~values if values.dtype == torch.bool else 1 - values
    as_x = Data(edge_index=PATH, x=torch.stack([other, values], 1))  # ONE_HOT_X, as float or bool
    assert fit([Data(edge_index=PATH, x=ONE_HOT_X), as_x]).distances_[0, 1] == 0.0


# --- datasets.py: TU raw files -----------------------------------------------------------------

NAME = "FAKE"
# Three graphs: a path of 3 nodes, then two edges.
EDGES = ["1, 2", "2, 1", "2, 3", "3, 2", "4, 5", "5, 4", "6, 7", "7, 6"]
INDICATOR = ["1", "1", "1", "2", "2", "3", "3"]
GRAPH_LABELS = ["1", "-1", "1"]
NODE_LABELS = ["0", "1", "0", "2", "0", "1", "0"]


def write_tu(root, indicator=INDICATOR, graph_labels=GRAPH_LABELS, node_labels=NODE_LABELS, end="\n"):
    """A fake TU dataset ``root/FAKE/raw/FAKE_*.txt``; each file's lines joined by newlines, then ``end``."""
    raw = root / NAME / "raw"
    raw.mkdir(parents=True)
    files = {"A": EDGES, "graph_indicator": indicator, "graph_labels": graph_labels, "node_labels": node_labels}
    for suffix, lines in files.items():
        if lines is not None:
            (raw / f"{NAME}_{suffix}.txt").write_text("\n".join(lines) + end)
    return raw


def load(root):
    return load_tudataset(NAME, root=root, cache_dir=root / "cache")


def test_a_read_only_root_gives_a_writable_removable_copy(tmp_path):
    raw = write_tu(tmp_path, end="")  # without final newlines: the copy gets them appended
    for path in raw.iterdir():
        path.chmod(0o444)
    raw.chmod(0o555)
    try:
        graphs, _ = load(tmp_path)
    finally:
        raw.chmod(0o755)
    assert [g.num_nodes for g in graphs] == [3, 2, 2]
    copies = list((tmp_path / "cache").rglob(f"{NAME}_A.txt"))
    assert len(copies) == 1
    # Owner-writable (a non-root user could append the newlines and delete the cache);
    # root ignores modes, so the modes themselves are checked.
    for path in [copies[0].parent, *copies[0].parent.iterdir()]:
        assert path.stat().st_mode & 0o200, path


def test_a_raw_file_edited_in_place_is_read_again(tmp_path):
    raw = write_tu(tmp_path)
    assert load(tmp_path)[0][1].edge_index.tolist() == [[0, 1], [1, 0]]
    edges = raw / f"{NAME}_A.txt"
    stat = edges.stat()
    text = edges.read_text()
    assert "4, 5\n5, 4" in text
    edges.write_text(text.replace("4, 5\n5, 4", "4, 4\n5, 5"))  # same size, then the same time
    os.utime(edges, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert edges.stat().st_size == stat.st_size and edges.stat().st_mtime_ns == stat.st_mtime_ns
    graphs, _ = load(tmp_path)
    assert graphs[1].edge_index.tolist() != [[0, 1], [1, 0]]  # the edge 0-1 became two self-loops
    assert MWSP(d=1, k=0).fit(graphs).distances_[1, 2] > 0  # graph 2 still has its edge


def test_parallel_first_loads_share_one_copy(tmp_path):
    write_tu(tmp_path)
    script = (
        "import sys; from mwsp_torch import load_tudataset; "
        f"g, y = load_tudataset({NAME!r}, root=sys.argv[1], cache_dir=sys.argv[2]); "
        "print([x.num_nodes for x in g], y.tolist())"
    )
    runs = [
        subprocess.Popen(
            [sys.executable, "-c", script, str(tmp_path), str(tmp_path / "cache")],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(4)
    ]
    for run in runs:
        out, err = run.communicate(timeout=300)
        assert run.returncode == 0, err
        assert out.strip().splitlines()[-1] == "[3, 2, 2] [1, 0, 1]"
    folders = [p.name for p in (tmp_path / "cache").rglob("*") if p.is_dir()]
    assert sorted(folders).count("raw") == 1 and not [f for f in folders if f.startswith("raw.tmp")]


def test_the_copy_and_processing_run_under_the_lock(tmp_path, monkeypatch):
    """Deterministic half of the test above: while the copy is made and while PyG processes it,
    a second lock on the same file (another open file, as another process would hold) is refused."""
    import fcntl

    import torch_geometric.datasets

    import mwsp_torch.datasets as datasets

    write_tu(tmp_path)
    held = []

    def lock_is_held():
        (lock,) = (tmp_path / "cache").rglob(".lock")
        with open(lock, "a") as other:
            try:
                fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                return True
            fcntl.flock(other, fcntl.LOCK_UN)
            return False

    copyfile, process = datasets.shutil.copyfile, torch_geometric.datasets.TUDataset.process

    def checked_copy(*args, **kwargs):
        held.append(("copy", lock_is_held()))
        return copyfile(*args, **kwargs)

    def checked_process(self):
        held.append(("process", lock_is_held()))
        return process(self)

    monkeypatch.setattr(datasets.shutil, "copyfile", checked_copy)
    monkeypatch.setattr(torch_geometric.datasets.TUDataset, "process", checked_process)
    load(tmp_path)
    assert ("copy", True) in held and ("process", True) in held and all(ok for _, ok in held)
    assert not lock_is_held()  # and released afterwards


def test_a_dataset_name_in_the_wrong_case_gets_a_suggestion(tmp_path):
    write_tu(tmp_path)
    with pytest.raises(FileNotFoundError, match=r"dataset 'fake' not found .*; did you mean 'FAKE'\?"):
        load_tudataset("fake", root=tmp_path, cache_dir=tmp_path / "cache")
    with pytest.raises(FileNotFoundError) as missing:  # no near miss, no suggestion
        load_tudataset("OTHER", root=tmp_path, cache_dir=tmp_path / "cache")
    assert "did you mean" not in str(missing.value)


@pytest.mark.parametrize("end", ["\n", ""])
def test_fake_dataset_loads(tmp_path, end):
    # Without a final newline, PyG's reader would drop each file's last line; the copy gets one.
    write_tu(tmp_path, end=end)
    graphs, y = load(tmp_path)
    assert [g.num_nodes for g in graphs] == [3, 2, 2]
    assert [g.node_label.tolist() for g in graphs] == [[0, 1, 0], [2, 0], [1, 0]]
    assert y.tolist() == [1, 0, 1]
    assert (tmp_path / NAME / "raw" / f"{NAME}_A.txt").read_text().endswith("7, 6" + end)  # the root is not written


@pytest.mark.parametrize(
    ("node_labels", "rows"),
    [(NODE_LABELS[:-1], 6), (NODE_LABELS + ["1"], 8)],
)
def test_node_labels_row_count_is_checked_before_pyg(tmp_path, node_labels, rows):
    raw = write_tu(tmp_path, node_labels=node_labels)
    message = f"{raw / 'FAKE_node_labels.txt'}: {rows} rows for 7 nodes (FAKE_graph_indicator.txt has 7 lines)"
    with pytest.raises(ValueError, match=re.escape(message)):
        load(tmp_path)
    assert not (tmp_path / "cache").exists()  # refused before anything is copied or processed


@pytest.mark.parametrize(("graph_labels", "rows"), [(GRAPH_LABELS[:-1], 2), (GRAPH_LABELS + ["-1"], 4)])
def test_graph_labels_row_count_is_checked(tmp_path, graph_labels, rows):
    # One short: PyG fails on a slice; one long: PyG keeps the extra label (y longer than the dataset).
    raw = write_tu(tmp_path, graph_labels=graph_labels)
    message = f"{raw / 'FAKE_graph_labels.txt'}: {rows} rows for 3 graphs (the graph IDs of FAKE_graph_indicator.txt"
    with pytest.raises(ValueError, match=re.escape(message)):
        load(tmp_path)


@pytest.mark.parametrize(
    ("kwargs", "file", "line", "text"),
    [
        ({"node_labels": ["0", "1", "1.5", "2", "0", "1", "0"]}, "node_labels", 3, "'1.5'"),
        ({"graph_labels": ["1", "1.5", "1"]}, "graph_labels", 2, "'1.5'"),
        ({"node_labels": ["0", "1", "0", "", "0", "1", "0"]}, "node_labels", 4, "''"),  # numpy would skip it
        ({"indicator": ["1", "1", "1", "2", "x", "3", "3"]}, "graph_indicator", 5, "'x'"),
    ],
    ids=["float-node-label", "float-graph-label", "blank-line", "indicator"],
)
def test_non_integer_line_names_the_file_and_line(tmp_path, kwargs, file, line, text):
    raw = write_tu(tmp_path, **kwargs)
    message = f"{raw / f'FAKE_{file}.txt'}, line {line}: expected comma-separated integers, got {text}"
    with pytest.raises(ValueError, match=re.escape(message)):
        load(tmp_path)


def test_ragged_node_labels_name_the_line(tmp_path):
    raw = write_tu(tmp_path, node_labels=["0, 1", "1, 1", "0", "2, 0", "0, 0", "1, 0", "0, 2"])
    message = f"{raw / 'FAKE_node_labels.txt'}, line 3: 1 values, but line 1 has 2"
    with pytest.raises(ValueError, match=re.escape(message)):
        load(tmp_path)


def test_graph_ids_out_of_order_are_refused(tmp_path):
    # PyG slices nodes by counts of each graph ID: out of order, graphs get other graphs' nodes.
    raw = write_tu(tmp_path, indicator=["1", "1", "2", "1", "2", "3", "3"])
    message = (
        f"{raw / 'FAKE_graph_indicator.txt'}, line 4: graph ID 1 after 2; "
        "nodes must be listed graph by graph, in the order of their graph IDs"
    )
    with pytest.raises(ValueError, match=re.escape(message)):
        load(tmp_path)


def test_cli_reports_a_short_node_labels_file_without_a_traceback(tmp_path, capsys):
    raw = write_tu(tmp_path, node_labels=NODE_LABELS[:-1])
    argv = ["distances", "--dataset", NAME, "--root", str(tmp_path), "--cache-dir", str(tmp_path / "cache")]
    assert main(argv + ["--out", str(tmp_path / "w.npy"), "--quiet"]) == 2
    err = capsys.readouterr().err
    message = f"{raw / 'FAKE_node_labels.txt'}: 6 rows for 7 nodes (FAKE_graph_indicator.txt has 7 lines)"
    assert err == f"mwsp: error: {message}\n"
