"""TU data offline (mwsp_torch.datasets): roots, raw files, label columns, and the end-to-end
MUTAG run."""

import numpy as np
import pytest

from mwsp_torch import MWSP, load_tudataset, paper_protocol
from mwsp_torch.cli import main
from mwsp_torch.transport import Sinkhorn


def test_mutag_loads_with_labels(mutag):
    graphs, y = mutag
    assert len(graphs) == 188 and set(np.unique(y)) == {0, 1}
    assert sum(g.num_nodes for g in graphs) == 3371
    assert all(g.node_label.shape == (g.num_nodes,) for g in graphs)
    # PyG's one-hot x is the raw label shifted by its minimum: the same categories.
    assert all(np.array_equal(g.x.argmax(1).numpy(), g.node_label.numpy() - 0) for g in graphs[:20])


def test_root_from_environment(fixture_root, cache_dir, monkeypatch):
    monkeypatch.setenv("MWSP_DATA_ROOT", str(fixture_root))
    graphs, _ = load_tudataset("MUTAG", cache_dir=cache_dir)
    assert len(graphs) == 188


def test_data_root_is_never_written(fixture_root, cache_dir):
    before = sorted(p.name for p in (fixture_root / "MUTAG").iterdir())
    load_tudataset("MUTAG", root=fixture_root, cache_dir=cache_dir)
    assert sorted(p.name for p in (fixture_root / "MUTAG").iterdir()) == before == ["raw"]


def test_missing_dataset_names_the_raw_files(tmp_path, cache_dir):
    with pytest.raises(FileNotFoundError, match=r"NOPE_A\.txt.*NOPE_graph_indicator\.txt"):
        load_tudataset("NOPE", root=tmp_path, cache_dir=cache_dir)


def test_no_root_at_all(monkeypatch, cache_dir):
    monkeypatch.delenv("MWSP_DATA_ROOT", raising=False)
    with pytest.raises(ValueError, match="MWSP_DATA_ROOT"):
        load_tudataset("MUTAG", cache_dir=cache_dir)


def _raw(fixture_root, name: str, part: str) -> np.ndarray:
    """A raw TU file read with numpy alone, independently of the library's loader."""
    return np.loadtxt(fixture_root / name / "raw" / f"{name}_{part}.txt", delimiter=",", dtype=np.int64, ndmin=2)


def _label_histogram_distances(graph_of_node: np.ndarray, labels: np.ndarray, graphs: int) -> np.ndarray:
    """W at d=0, k=0 in closed form: the rows are one-hot labels, pairwise sqrt(2) apart, so
    W(G, H) = sqrt(2) * (total variation of the two label histograms) = sqrt(2)/2 * |p_G - p_H|_1."""
    _, codes = np.unique(labels, axis=0, return_inverse=True)
    codes = codes.ravel()
    hist = np.zeros((graphs, codes.max() + 1))
    keep = graph_of_node < graphs
    np.add.at(hist, (graph_of_node[keep], codes[keep]), 1.0)
    hist /= hist.sum(1, keepdims=True)
    return np.sqrt(2) / 2 * np.abs(hist[:, None, :] - hist[None, :, :]).sum(-1)


def test_cuneiform_two_label_columns(fixture_root, cache_dir):
    """Cuneiform's node labels have two columns; each distinct row is one label (README,
    Data). At d=0, k=0 W is the label histograms' closed form, which merging or dropping
    a column would change (checked below: the first column alone gives other values)."""
    graphs, _ = load_tudataset("Cuneiform", root=fixture_root, cache_dir=cache_dir)
    assert graphs[0].node_label.ndim == 2 and graphs[0].node_label.shape[1] == 2
    count = 30
    graph_of_node = _raw(fixture_root, "Cuneiform", "graph_indicator")[:, 0] - 1
    raw_labels = _raw(fixture_root, "Cuneiform", "node_labels")
    expected = _label_histogram_distances(graph_of_node, raw_labels, count)
    one_column = _label_histogram_distances(graph_of_node, raw_labels[:, :1], count)
    assert np.abs(expected - one_column).max() > 0.1  # the second column matters on these graphs
    w = MWSP(d=0, k=0, n_jobs=1).fit(graphs[:count]).distances_
    np.testing.assert_allclose(w, expected, rtol=1e-12, atol=1e-15)


def test_imdb_needs_degree_labels(fixture_root, cache_dir):
    """IMDB-BINARY has no node labels: refused without a policy; with ``labels="degree"``
    W at d=0, k=0 is the closed form over histograms of degrees counted from the raw edges
    (symmetrised, self-loops and duplicates dropped, docs/definition.md, section 1)."""
    graphs, _ = load_tudataset("IMDB-BINARY", root=fixture_root, cache_dir=cache_dir)
    with pytest.raises(ValueError, match="graph 0: has neither node_label nor x"):
        MWSP().fit(graphs[:5])
    count = 20
    graph_of_node = _raw(fixture_root, "IMDB-BINARY", "graph_indicator")[:, 0] - 1
    edges = _raw(fixture_root, "IMDB-BINARY", "A") - 1
    edges = edges[edges[:, 0] != edges[:, 1]]
    edges = np.unique(np.sort(edges, axis=1), axis=0)
    degree = np.bincount(edges.ravel(), minlength=len(graph_of_node))
    expected = _label_histogram_distances(graph_of_node, degree[:, None], count)
    assert expected.max() > 0.5  # the degree histograms differ
    w = MWSP(d=0, k=0, labels="degree", n_jobs=1).fit(graphs[:count]).distances_
    np.testing.assert_allclose(w, expected, rtol=1e-12, atol=1e-15)
    uniform = MWSP(d=0, k=0, labels="uniform", n_jobs=1).fit(graphs[:count]).distances_
    np.testing.assert_array_equal(uniform, 0.0)  # one label for every node: all graphs alike at d=0


def test_mutag_end_to_end_paper_protocol(mutag):
    graphs, y = mutag
    model = MWSP(d=2, k=0, n_jobs=2).fit(graphs)
    result = paper_protocol(model.distances_, y)
    # The authors' script gives 89.91 here; this library keeps every tied shortest path.
    assert result["accuracy_mean"] >= 88.0
    assert result["majority_rate"] == pytest.approx(100 * 125 / 188)
    assert len(result["fold_accuracies"]) == 10


def test_sinkhorn_error_is_small_on_mutag(mutag):
    graphs = mutag[0][:20]
    exact = MWSP(d=2, k=0).fit(graphs).distances_
    model = MWSP(d=2, k=0, solver=Sinkhorn(blur=0.01)).fit(graphs)
    approx = model.distances_
    iu = np.triu_indices(len(graphs), 1)
    rel = np.abs(approx[iu] - exact[iu]) / exact[iu]
    # Measured on 40 MUTAG graphs: median 0.5 %, max 8 % (benchmarks/HISTORY.md).
    assert np.median(rel) < 0.01 and rel.max() < 0.15
    # fit writes zeros on the diagonal; the debiased divergence of a graph with itself,
    # solved as a cross pair, must vanish too (measured: 3.5e-18 against W >= 0.18).
    cross = model.cross_distances(graphs)
    assert np.abs(np.diag(cross)).max() <= 1e-12 * exact[iu].min()
    np.testing.assert_allclose(cross[iu], approx[iu], rtol=1e-12)


def test_quiet_silences_pygs_processing(fixture_root, tmp_path, monkeypatch, capfd):
    """PyG prints ``Processing... Done!`` on a dataset's first load (not under pytest, which it
    detects by ``PYTEST_CURRENT_TEST``): ``--quiet`` silences it, as it does the bars."""
    monkeypatch.delenv("PYTEST_CURRENT_TEST", raising=False)
    argv = ["distances", "--dataset", "PTC_MR", "--root", str(fixture_root), "--d", "1", "--k", "0"]
    assert main([*argv, "--cache-dir", str(tmp_path / "a"), "--out", str(tmp_path / "a.npy"), "--quiet"]) == 0
    assert "Processing" not in capfd.readouterr().err
    assert main([*argv, "--cache-dir", str(tmp_path / "b"), "--out", str(tmp_path / "b.npy")]) == 0
    assert "Processing..." in capfd.readouterr().err  # without --quiet, PyG's own lines
