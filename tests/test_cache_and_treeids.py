"""The distance cache's key follows what W is computed from, whatever form the graphs take;
``TreeIDs`` checks its parameters and refuses to run in ``DataLoader`` workers."""

import re

import numpy as np
import pytest
import torch
import torch_geometric.transforms as T
from torch_geometric.data import Data
from torch_geometric.loader import DataLoader

from mwsp_torch import MWSP, TreeIDs
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


@pytest.mark.parametrize("k", [1.5, True, None, -1, "1", np.float64(2.0), np.bool_(True)])
def test_tree_ids_refuses_a_bad_k(k):
    with pytest.raises(ValueError, match=re.escape(f"k must be an integer >= 0, got {k!r}")):
        TreeIDs(k=k)


@pytest.mark.parametrize("labels", ["bogus", None, 1])
def test_tree_ids_refuses_bad_labels(labels):
    message = f"labels must be one of ('auto', 'degree', 'uniform'), got {labels!r}"
    with pytest.raises(ValueError, match=re.escape(message)):
        TreeIDs(labels=labels)


def test_tree_ids_takes_numpy_integers():
    transform = TreeIDs(k=np.int64(2), labels="degree")
    assert transform(graph(PATH)).tree_ids.shape == (4, 3)


class TransformedGraphs(torch.utils.data.Dataset):
    """Graphs with a transform applied on access, where the loader reads them (its workers)."""

    def __init__(self, graphs, transform):
        self.graphs, self.transform = graphs, transform

    def __len__(self):
        return len(self.graphs)

    def __getitem__(self, index):
        return self.transform(self.graphs[index])


def test_tree_ids_refuses_to_run_in_a_dataloader_worker():
    loader = DataLoader(TransformedGraphs([graph(PATH), graph(STAR), graph(CYCLE)], TreeIDs(k=1)), num_workers=1)
    with pytest.raises(RuntimeError, match="TreeIDs runs in DataLoader worker 0 of 1, but it keeps one vocabulary per"):
        list(loader)


def test_tree_ids_in_the_main_process_agree_across_batches():
    graphs = [graph(PATH), graph(STAR), graph(CYCLE), graph(PATH)]
    loader = DataLoader(TransformedGraphs(graphs, TreeIDs(k=1)), batch_size=2, num_workers=0)
    from_loader = torch.cat([batch.tree_ids for batch in loader])
    reference = TreeIDs(k=1)
    expected = torch.cat([reference(g).tree_ids for g in graphs])
    assert torch.equal(from_loader, expected)
    assert torch.equal(from_loader[:4], from_loader[12:])  # the same graph in another batch, the same IDs
    # Across all graphs, two nodes share a scale-1 ID iff they have the same depth-1 tree:
    # their label and the multiset of their neighbours' labels.
    trees = [
        (LABELS[v], tuple(sorted(LABELS[u] for u in g.edge_index[1][g.edge_index[0] == v].tolist())))
        for g in graphs
        for v in range(g.num_nodes)
    ]
    ids = from_loader[:, 1].tolist()
    assert len(set(trees)) == len(set(ids)) == len(set(zip(trees, ids, strict=True)))


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
