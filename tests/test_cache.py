"""The distance cache (mwsp_torch.cache): its key follows what W is computed from, whatever form
the graphs take; damaged or foreign files are named and recomputed."""

import io
import zipfile

import numpy as np
import pytest
import torch
import torch_geometric.transforms as T
from torch_geometric.data import Data

from mwsp_torch import MWSP
from mwsp_torch.cache import cached_distances, graphs_fingerprint
from mwsp_torch.transport import Sinkhorn

# Distinct node labels so that W tells paths, stars and cycles apart at d=1, k=0.
PATH = [(0, 1), (1, 2), (2, 3)]


STAR = [(0, 1), (0, 2), (0, 3)]


CYCLE = [(0, 1), (1, 2), (2, 3), (3, 0)]


LABELS = [0, 1, 2, 1]


def undirected(edges) -> torch.Tensor:
    edge_index = torch.tensor(edges, dtype=torch.long).T
    return torch.cat([edge_index, edge_index.flip(0)], dim=1)


def graph(edges, labels=LABELS, **fields) -> Data:
    return Data(edge_index=undirected(edges), num_nodes=len(labels), node_label=torch.tensor(labels), **fields)


def as_adj_t(graphs) -> list[Data]:
    return [T.ToSparseTensor()(g.clone()) for g in graphs]


def with_sparse_edge_index(graphs, layout: torch.layout) -> list[Data]:
    out = []
    for g in graphs:
        n = g.num_nodes
        adjacency = torch.sparse_coo_tensor(g.edge_index, torch.ones(g.edge_index.shape[1]), (n, n)).coalesce()
        if layout == torch.sparse_csr:
            adjacency = adjacency.to_sparse_csr()
        out.append(Data(edge_index=adjacency, num_nodes=n, node_label=g.node_label))
    return out


def true_distances(graphs, **params) -> np.ndarray:
    return MWSP(d=1, k=0, n_jobs=1, **params).fit(graphs).distances_


def test_adj_t_datasets_that_differ_in_one_edge_get_their_own_distances(tmp_path):
    first = as_adj_t([graph(PATH), graph(STAR), graph(PATH[:2])])
    second = as_adj_t([graph(PATH), graph(STAR), graph(PATH[:2] + [(0, 3)])])  # one edge more in graph 2
    assert all(g.edge_index is None and g.adj_t is not None for g in first + second)
    assert graphs_fingerprint(first) != graphs_fingerprint(second)
    w_first, w_second = true_distances(first), true_distances(second)
    assert not np.array_equal(w_first, w_second)
    for graphs, expected in [(first, w_first), (second, w_second)]:
        served, timings = cached_distances(MWSP(d=1, k=0, n_jobs=1), graphs, "toy", cache_dir=tmp_path)
        assert not timings["cached"]
        np.testing.assert_array_equal(served, expected)
    for graphs, expected in [(first, w_first), (second, w_second)]:
        served, timings = cached_distances(MWSP(d=1, k=0, n_jobs=1), graphs, "toy", cache_dir=tmp_path)
        assert timings["cached"]
        np.testing.assert_array_equal(served, expected)


def test_the_same_graphs_in_every_accepted_form_share_a_fingerprint(tmp_path):
    dense = [graph(PATH), graph(STAR), graph(CYCLE)]
    one_direction = [
        Data(edge_index=torch.tensor(e).T, num_nodes=4, node_label=torch.tensor(LABELS)) for e in (PATH, STAR, CYCLE)
    ]
    # x and edge_attr beside node_label are not read by W; one-hot x alone gives the same labels.
    extra_fields = [graph(e, x=torch.full((4, 3), 0.5), edge_attr=torch.ones(2 * len(e))) for e in (PATH, STAR, CYCLE)]
    one_hot_x = [Data(edge_index=undirected(e), x=torch.eye(3)[LABELS]) for e in (PATH, STAR, CYCLE)]
    forms = {
        "sparse COO edge_index": with_sparse_edge_index(dense, torch.sparse_coo),
        "sparse CSR edge_index": with_sparse_edge_index(dense, torch.sparse_csr),
        "adj_t": as_adj_t(dense),
        "one direction of each edge": one_direction,
        "x and edge_attr beside node_label": extra_fields,
        "one-hot x": one_hot_x,
    }
    expected = graphs_fingerprint(dense)
    assert {name: graphs_fingerprint(graphs) for name, graphs in forms.items()} == dict.fromkeys(forms, expected)
    assert graphs_fingerprint(dense[::-1]) != expected  # order is part of W
    w, timings = cached_distances(MWSP(d=1, k=0, n_jobs=1), dense, "toy", cache_dir=tmp_path)
    assert not timings["cached"]
    for name, graphs in forms.items():
        served, timings = cached_distances(MWSP(d=1, k=0, n_jobs=1), graphs, "toy", cache_dir=tmp_path)
        assert timings["cached"], name
        np.testing.assert_array_equal(served, w)
        np.testing.assert_array_equal(served, true_distances(graphs))


def test_sparse_edge_index_is_cached(tmp_path):
    graphs = with_sparse_edge_index([graph(PATH), graph(STAR), graph(CYCLE)], torch.sparse_coo)
    assert len(graphs_fingerprint(graphs)) == 40
    served, timings = cached_distances(MWSP(d=1, k=0, n_jobs=1), graphs, "toy", cache_dir=tmp_path)
    assert not timings["cached"]
    np.testing.assert_array_equal(served, true_distances(graphs))
    assert cached_distances(MWSP(d=1, k=0, n_jobs=1), graphs, "toy", cache_dir=tmp_path)[1]["cached"]


def test_fingerprint_reads_graphs_as_mwsp_does(tmp_path):
    outside = [graph(PATH), Data(edge_index=torch.tensor([[0], [5]]), num_nodes=4, node_label=torch.tensor(LABELS))]
    with pytest.raises(ValueError, match=r"graph 1: edge_index contains node 5, outside 0\.\.3 \(num_nodes=4\)"):
        graphs_fingerprint(outside)
    with pytest.raises(ValueError, match="graph 1: edge_index contains node 5"):
        cached_distances(MWSP(d=1, k=0, n_jobs=1), outside, "toy", cache_dir=tmp_path)
    assert not (tmp_path / "distances").exists()
    unlabelled = [Data(edge_index=undirected(e), num_nodes=4) for e in (PATH, STAR, CYCLE)]
    with pytest.raises(ValueError, match="graph 0: has neither node_label nor x"):
        graphs_fingerprint(unlabelled)
    # Under a label policy the labels come from the structure, so unlabelled graphs have a key.
    served, timings = cached_distances(MWSP(d=1, k=0, labels="degree", n_jobs=1), unlabelled, "toy", cache_dir=tmp_path)
    assert not timings["cached"]
    np.testing.assert_array_equal(served, true_distances(unlabelled, labels="degree"))
    assert graphs_fingerprint(unlabelled, labels="degree") != graphs_fingerprint(unlabelled, labels="uniform")


def test_a_cache_hit_returns_the_fits_timings_with_sinkhorn_error(tmp_path):
    graphs = [
        Data(
            edge_index=torch.tensor([[i for i in range(n - 1)], [i + 1 for i in range(n - 1)]]),
            node_label=torch.arange(n) % 3,
            num_nodes=n,
        )
        for n in (4, 5, 6, 7)
    ]
    w, first = cached_distances(MWSP(d=2, k=0, solver=Sinkhorn(blur=0.05)), graphs, "PATHS", cache_dir=tmp_path)
    again, hit = cached_distances(MWSP(d=2, k=0, solver=Sinkhorn(blur=0.05)), graphs, "PATHS", cache_dir=tmp_path)
    assert not first["cached"] and hit["cached"]
    np.testing.assert_array_equal(again, w)
    assert first["sinkhorn_median_relative_error"] > 0
    assert {name: value for name, value in hit.items() if name != "cached"} == {
        name: value for name, value in first.items() if name != "cached"
    }


def test_every_setting_w_depends_on_is_in_the_cache_key(tmp_path):
    """Each parameter ``MWSP.feature_settings`` names (what W depends on) changes the key:
    computed again, not served another setting's W. The graphs are chosen so that every
    change gives a different W (checked), and the list must cover every such parameter."""
    unlabelled = [
        Data(edge_index=undirected(edges), num_nodes=n)
        for edges, n in [(CYCLE, 4), (PATH, 4), (STAR, 4), (CYCLE + [(0, 2)], 4), ([(0, 1), (1, 2), (2, 3), (3, 4)], 5)]
    ]
    base = {"d": 2, "k": 0, "paths": "split", "labels": "degree", "solver": "exact"}
    changes = [("d", 3), ("k", 1), ("paths", "all"), ("labels", "uniform"), ("solver", "sinkhorn")]
    sinkhorn = {**base, "solver": "sinkhorn", "blur": 0.05, "scaling": 0.9}
    sinkhorn_changes = [("blur", 0.2), ("scaling", 0.5)]

    def model(solver="exact", blur=None, scaling=None, **params):
        """The estimator of flat settings: Sinkhorn's blur and scaling are its options'."""
        if solver == "sinkhorn":
            solver = Sinkhorn(**{name: v for name, v in (("blur", blur), ("scaling", scaling)) if v is not None})
        return MWSP(solver=solver, n_jobs=1, **params)

    assert {name for name, _ in changes} == set(model(**base).feature_settings())
    assert {name for name, _ in changes + sinkhorn_changes} == set(model(**sinkhorn).feature_settings())
    for start, edits in [(base, changes), (sinkhorn, sinkhorn_changes)]:
        first, timings = cached_distances(model(**start), unlabelled, "toy", cache_dir=tmp_path)
        assert not timings["cached"]
        for name, value in edits:
            params = {**start, name: value}
            served, timings = cached_distances(model(**params), unlabelled, "toy", cache_dir=tmp_path)
            expected = model(**params).fit(unlabelled).distances_
            assert not timings["cached"], name
            np.testing.assert_allclose(served, expected, rtol=1e-12, atol=1e-15, err_msg=name)
            assert np.abs(expected - first).max() > 1e-3, name  # the change matters on these graphs
            assert cached_distances(model(**params), unlabelled, "toy", cache_dir=tmp_path)[1]["cached"], name


def test_distance_cache_is_keyed_by_graph_content(mutag, tmp_path):
    graphs = mutag[0][:12]
    first, timings = cached_distances(MWSP(d=2, k=0), graphs, "MUTAG", cache_dir=tmp_path)
    again, timings_again = cached_distances(MWSP(d=2, k=0), graphs, "MUTAG", cache_dir=tmp_path)
    assert not timings["cached"] and timings_again["cached"]
    np.testing.assert_array_equal(again, first)
    # Same name, same size, other labels (another copy of the raw files): computed, not served.
    relabelled = [g.clone() for g in graphs]
    for g in relabelled:
        g.node_label = torch.zeros_like(g.node_label)
        g.x = torch.ones_like(g.x[:, :1])
    other, timings_other = cached_distances(MWSP(d=2, k=0), relabelled, "MUTAG", cache_dir=tmp_path)
    assert not timings_other["cached"]
    np.testing.assert_array_equal(other, MWSP(d=2, k=0).fit(relabelled).distances_)
    assert not np.array_equal(other, first)


def test_damaged_distance_cache_is_named_and_recomputed(mutag, tmp_path):
    graphs = mutag[0][:8]
    first, _ = cached_distances(MWSP(d=2, k=0), graphs, "MUTAG", cache_dir=tmp_path)
    (stored,) = (tmp_path / "distances").glob("MUTAG-d2-k0-*.npz")
    stored.write_bytes(stored.read_bytes()[:100])
    with pytest.warns(UserWarning, match=f"cached distances {stored} cannot be read"):
        again, timings = cached_distances(MWSP(d=2, k=0), graphs, "MUTAG", cache_dir=tmp_path)
    assert not timings["cached"]
    np.testing.assert_array_equal(again, first)
    assert cached_distances(MWSP(d=2, k=0), graphs, "MUTAG", cache_dir=tmp_path)[1]["cached"]


def _bare_npy(path):
    """A bare ``.npy`` array in the archive's place (``np.load`` then returns the array)."""
    with open(path, "wb") as handle:
        np.save(handle, np.zeros((8, 8)))


def _damaged_header(path):
    """The archive rewritten with a ``distances.npy`` whose header is damaged (its dtype
    ``'<f8'`` made ``',f8'``) but whose zip checksum is right, as another writer might leave
    it: numpy's header parser raises SyntaxError."""
    with np.load(path) as stored:
        entries = {name: stored[name] for name in stored.files}
    with zipfile.ZipFile(path, "w") as archive:
        for name, values in entries.items():
            buffer = io.BytesIO()
            np.save(buffer, values)
            data = buffer.getvalue()
            if name == "distances":
                data = data.replace(b"'<f8'", b"',f8'", 1)
            archive.writestr(f"{name}.npy", data)


@pytest.mark.parametrize(
    "damage, problem",
    [(_bare_npy, "not an .npz archive but a bare ndarray"), (_damaged_header, "invalid syntax")],
    ids=["a-bare-npy", "a-damaged-header"],
)
def test_a_cache_file_that_is_not_an_npz_of_arrays_is_recomputed(mutag, tmp_path, damage, problem):
    graphs = mutag[0][:8]
    first, _ = cached_distances(MWSP(d=2, k=0), graphs, "MUTAG", cache_dir=tmp_path)
    (stored,) = (tmp_path / "distances").glob("MUTAG-d2-k0-*.npz")
    damage(stored)
    with pytest.warns(UserWarning, match=f"cached distances {stored} cannot be read \\(.*{problem}"):
        again, timings = cached_distances(MWSP(d=2, k=0), graphs, "MUTAG", cache_dir=tmp_path)
    assert not timings["cached"]
    np.testing.assert_array_equal(again, first)


@pytest.mark.parametrize(
    "content, problem",
    [
        (lambda w: w[:3, :3], r"shape \(3, 3\), not \(8, 8\)"),
        (lambda w: w.astype(np.float32), "float32 matrix"),
        (lambda w: np.where(np.eye(len(w), k=1, dtype=bool), np.nan, w), "not finite and >= 0"),
        (lambda w: w + np.triu(np.full_like(w, 1e-3), 1), "not symmetric with a zero diagonal"),
        (lambda w: w + np.eye(len(w)), "not symmetric with a zero diagonal"),
    ],
    ids=["shape", "dtype", "nan", "asymmetric", "diagonal"],
)
def test_a_readable_cache_file_with_wrong_contents_is_recomputed(mutag, tmp_path, content, problem):
    graphs = mutag[0][:8]
    first, timings = cached_distances(MWSP(d=2, k=0), graphs, "MUTAG", cache_dir=tmp_path)
    (stored,) = (tmp_path / "distances").glob("MUTAG-d2-k0-*.npz")
    np.savez(stored, distances=content(first), features=1.0, transport=1.0)  # valid npz, wrong W
    with pytest.warns(UserWarning, match=f"cached distances {stored} cannot be read .*{problem}"):
        again, timings = cached_distances(MWSP(d=2, k=0), graphs, "MUTAG", cache_dir=tmp_path)
    assert not timings["cached"]
    np.testing.assert_array_equal(again, first)


def test_the_cache_key_holds_the_format_and_the_name_stays_in_the_cache(mutag, tmp_path, monkeypatch):
    import mwsp_torch.cache as cache

    graphs = mutag[0][:6]
    assert not cached_distances(MWSP(d=1, k=0), graphs, "MUTAG", cache_dir=tmp_path)[1]["cached"]
    assert cached_distances(MWSP(d=1, k=0), graphs, "MUTAG", cache_dir=tmp_path)[1]["cached"]
    monkeypatch.setattr(cache, "CACHE_FORMAT", cache.CACHE_FORMAT + 1)  # a release whose W differs
    assert not cached_distances(MWSP(d=1, k=0), graphs, "MUTAG", cache_dir=tmp_path)[1]["cached"]
    for name in ("../MUTAG", "a/b", "..", "", None):
        with pytest.raises(ValueError, match="dataset must be a plain name"):
            cached_distances(MWSP(d=1, k=0), graphs, name, cache_dir=tmp_path / "inner")
    assert not (tmp_path / "inner").exists()


def test_sinkhorn_scaling_is_part_of_the_cache_key(mutag, tmp_path):
    graphs = mutag[0][:6]

    def model(scaling):
        return MWSP(d=2, k=0, solver=Sinkhorn(blur=0.05, scaling=scaling))

    coarse, first = cached_distances(model(0.5), graphs, "MUTAG", cache_dir=tmp_path)
    fine, second = cached_distances(model(0.9), graphs, "MUTAG", cache_dir=tmp_path)
    assert not first["cached"] and not second["cached"]
    assert np.abs(coarse - fine).max() > 1e-6  # another W, not the first one served again
    assert cached_distances(model(0.5), graphs, "MUTAG", cache_dir=tmp_path)[1]["cached"]


def test_cached_distances_check_parameters_on_a_cache_hit(mutag, tmp_path):
    graphs = mutag[0][:8]
    cached_distances(MWSP(d=2, k=0), graphs, "MUTAG", cache_dir=tmp_path)
    with pytest.raises(ValueError, match="n_jobs must be an integer >= 1, or -1"):
        cached_distances(MWSP(d=2, k=0, n_jobs=0), graphs, "MUTAG", cache_dir=tmp_path)
    with pytest.raises(ValueError, match="checkpoint is only kept by the compiled exact engine"):
        cached_distances(MWSP(d=2, k=0, solver="sinkhorn", checkpoint="ckpt"), graphs, "MUTAG", cache_dir=tmp_path)
