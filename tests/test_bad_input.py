"""Bad input gets a ValueError that names the graph and the problem (docs/definition.md, section 1)."""

import warnings

import numpy as np
import pytest
import torch
from torch_geometric.data import Data

from mwsp_torch import MWSP, TreeIDs
from mwsp_torch.transport import Exact, Sinkhorn

from helpers import make_data

GOOD = make_data(3, [(0, 1), (1, 2)], [0, 1, 0])


def fit(graphs, **kwargs):
    return MWSP(d=1, k=0, **kwargs).fit(graphs)


def test_edge_index_out_of_range():
    bad = Data(edge_index=torch.tensor([[0, 1], [1, 3]]), num_nodes=3, node_label=torch.zeros(3, dtype=torch.long))
    with pytest.raises(ValueError, match=r"graph 1: edge_index contains node 3, outside 0\.\.2"):
        fit([GOOD, bad])


def test_negative_edge_index():
    bad = Data(edge_index=torch.tensor([[0], [-1]]), num_nodes=3, node_label=torch.zeros(3, dtype=torch.long))
    with pytest.raises(ValueError, match="graph 0: edge_index contains node -1"):
        fit([bad, GOOD])


def test_edge_index_wrong_shape():
    bad = Data(edge_index=torch.tensor([0, 1, 2]), num_nodes=3, node_label=torch.zeros(3, dtype=torch.long))
    with pytest.raises(ValueError, match=r"graph 1: edge_index must have shape \[2, num_edges\]"):
        fit([GOOD, bad])


def test_graph_without_nodes():
    bad = Data(
        edge_index=torch.zeros((2, 0), dtype=torch.long), num_nodes=0, node_label=torch.zeros(0, dtype=torch.long)
    )
    with pytest.raises(ValueError, match="graph 2: has no nodes"):
        fit([GOOD, GOOD, bad])


def test_fractional_num_nodes_is_not_truncated():
    bad = Data(edge_index=torch.tensor([[0], [1]]), num_nodes=2.7, node_label=torch.zeros(2, dtype=torch.long))
    with pytest.raises(ValueError, match="graph 1: num_nodes must be a whole number, got 2.7"):
        fit([GOOD, bad])


def test_negative_label():
    bad = make_data(3, [(0, 1)], [0, -2, 1])
    with pytest.raises(ValueError, match=r"graph 1: node_label has a negative label \(-2\)"):
        fit([GOOD, bad])


def test_float_node_label_is_not_coerced():
    bad = Data(edge_index=torch.tensor([[0], [1]]), num_nodes=2, node_label=torch.tensor([0.0, 1.0]))
    with pytest.raises(ValueError, match="graph 0: node_label must be an integer tensor"):
        fit([bad])


def test_non_integer_x():
    bad = Data(edge_index=torch.tensor([[0], [1]]), x=torch.tensor([[0.5], [1.0]]))
    with pytest.raises(ValueError, match="graph 1: x has non-integer values"):
        fit([GOOD, bad])


def test_label_count_mismatch():
    bad = Data(edge_index=torch.tensor([[0], [1]]), num_nodes=3, node_label=torch.tensor([0, 1]))
    with pytest.raises(ValueError, match=r"graph 0: node_label must have one row per node \(3\)"):
        fit([bad])


def test_missing_labels_under_auto_names_the_policies():
    bare = Data(edge_index=torch.tensor([[0], [1]]), num_nodes=2)
    with pytest.raises(ValueError, match="graph 0: has neither node_label nor x; choose labels='degree'"):
        fit([bare])
    # The policies make it legal.
    assert fit([bare, bare], labels="degree").distances_[0, 1] == 0.0
    assert fit([bare], labels="uniform").distances_.shape == (1, 1)


def test_label_width_mismatch():
    two = Data(edge_index=torch.tensor([[0], [1]]), num_nodes=2, node_label=torch.tensor([[0, 1], [1, 1]]))
    with pytest.raises(ValueError, match=r"graph 1: labels have 1 columns \(node_label\), the graphs read before it"):
        fit([two, GOOD])


def test_transform_label_width_must_match_fit():
    # Multi-column rows become trie IDs, single columns stay raw: mixing them would alias
    # labels (W = 0 between graphs with different labels).
    edge = torch.tensor([[0], [1]])
    fitted = fit([Data(edge_index=edge, num_nodes=2, node_label=torch.tensor([[3, 7], [5, 9]]))] * 2)
    one = Data(edge_index=edge, num_nodes=2, node_label=torch.tensor([1, 3]))
    with pytest.raises(ValueError, match=r"graph 0: labels have 1 columns \(node_label\), the graphs read before"):
        fitted.cross_distances([one])


def test_transform_x_must_be_one_hot_when_fit_x_was():
    one_hot = torch.nn.functional.one_hot(torch.tensor([0, 2, 1]), 3).float()
    edges = torch.tensor([[0, 1], [1, 2]])
    fitted = fit([Data(edge_index=edges, x=one_hot), Data(edge_index=edges, x=one_hot.flip(0))])
    multi_hot = Data(edge_index=edges, x=torch.tensor([[1.0, 1.0, 0.0], [0.0, 0.0, 1.0], [0.0, 1.0, 0.0]]))
    with pytest.raises(ValueError, match="graph 0: x is not one-hot .* the graphs read before it had one-hot x"):
        fitted.cross_distances([multi_hot])


def test_tree_ids_transform_checks_label_width_across_graphs():
    transform = TreeIDs(k=1)
    edge = torch.tensor([[0], [1]])
    transform(Data(edge_index=edge, num_nodes=2, node_label=torch.tensor([[3, 7], [5, 9]])))
    transform(Data(edge_index=edge, num_nodes=2, node_label=torch.tensor([[3, 7], [3, 7]])))
    # The refused graph is named by its place among the graphs the transform saw
    # (as a dataset's pre_transform: its index), not as "graph 0" of a list of one.
    with pytest.raises(ValueError, match=r"^graph 2 given to this TreeIDs \(counting from 0\): labels have 1 columns"):
        transform(Data(edge_index=edge, num_nodes=2, node_label=torch.tensor([1, 3])))
    with pytest.raises(ValueError, match=r"^graph 3 given to this TreeIDs \(counting from 0\): node_label has a neg"):
        transform(Data(edge_index=edge, num_nodes=2, node_label=torch.tensor([[3, 7], [-1, 9]])))


def test_one_hot_x_with_unlabelled_nodes_is_refused_not_read_as_rows():
    edges = torch.tensor([[0, 1], [1, 2]])

    def one_hot(labels):
        return torch.nn.functional.one_hot(torch.tensor(labels), 3).float()

    graphs = [Data(edge_index=edges, x=one_hot([0, 1, 2])), Data(edge_index=edges, x=one_hot([2, 2, 1]))]
    graphs.append(Data(edge_index=edges, x=one_hot([1, 0, 1])))
    graphs[2].x[1] = 0.0  # node 1 has no label
    with pytest.raises(ValueError, match=r"graph 2: node 1's row of x is all zeros \(no label\)"):
        fit(graphs)
    with pytest.raises(ValueError, match=r"graph 0: node 0's row of x is all zeros"):
        fit([Data(edge_index=edges, x=torch.zeros(3, 3)), Data(edge_index=edges, x=one_hot([0, 1, 2]))])
    # Rows that are multi-hot somewhere are label rows, zero rows included, as node_label reads them.
    graphs[1].x[0, 0] = 1.0
    as_rows = [Data(edge_index=edges, node_label=g.x.long()) for g in graphs]
    assert np.array_equal(fit(graphs).distances_, fit(as_rows).distances_)
    assert fit(graphs).distances_[0, 2] > 0


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float8_e4m3fn, torch.bool])
def test_x_in_any_real_dtype_reads_as_its_values_without_warnings(dtype):
    edges = torch.tensor([[0, 1], [1, 2]])
    labels = ([0, 1, 2], [1, 1, 2], [2, 0, 0])
    graphs = [Data(edge_index=edges, x=torch.nn.functional.one_hot(torch.tensor(v), 3)) for v in labels]
    expected = fit([Data(edge_index=g.edge_index, x=g.x.float()) for g in graphs]).distances_
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # float16 once overflowed a cast of 2**63 in the int64 check
        got = fit([Data(edge_index=g.edge_index, x=g.x.to(dtype)) for g in graphs]).distances_
    assert np.array_equal(got, expected) and expected[0, 1] > 0


@pytest.mark.parametrize("field", ["x", "node_label"])
def test_complex_labels_are_refused_not_cast(field):
    edges = torch.tensor([[0, 1], [1, 2]])
    bad = Data(edge_index=edges, **{field: torch.tensor([0, 1, 0]) + 1j})  # astype(int64) would drop 1j
    with pytest.raises(ValueError, match=rf"graph 1: {field} has dtype complex64; node labels must be integers"):
        fit([GOOD, bad] if field == "node_label" else [Data(edge_index=edges, x=torch.eye(3)), bad])
    # Every graph alike: the whole-dataset path, not graph by graph, sees them first.
    with pytest.raises(ValueError, match=rf"graph 0: {field} has dtype complex64; node labels must be integers"):
        fit([bad, bad])


def test_bad_parameters():
    with pytest.raises(ValueError, match="d must be an integer >= 0"):
        MWSP(d=-1).fit([GOOD])
    with pytest.raises(ValueError, match="paths must be one of"):
        MWSP(paths="one").fit([GOOD])
    with pytest.raises(ValueError, match="solver must be one of"):
        MWSP(solver="greedy").fit([GOOD])
    with pytest.raises(ValueError, match="lam must be > 0"):
        MWSP(lam=0).fit([GOOD])


def test_not_a_graph_list():
    with pytest.raises(ValueError, match="expected a list of torch_geometric Data"):
        fit(42)
    with pytest.raises(ValueError, match="no graphs given"):
        fit([])


def test_self_loops_and_duplicate_edges_are_dropped():
    messy = make_data(3, [(0, 1), (1, 0), (0, 1), (2, 2), (1, 2)], [0, 1, 0])
    w = fit([GOOD, messy]).distances_
    assert w[0, 1] == 0.0
    assert np.isfinite(w).all()


def test_labels_from_node_label_and_x_are_never_mixed(mutag):
    # TUDataset's one-hot x starts at the smallest label and node_label at the raw one:
    # read from both, equal nodes would get different labels (W != 0 between a graph and itself).
    one_hot = make_data(3, [(0, 1), (1, 2)], [0, 1, 0])
    one_hot.x = torch.eye(2)[[0, 1, 0]]
    del one_hot.node_label
    with pytest.raises(ValueError, match="graph 1: labels are read from x, but the graphs read before it had theirs"):
        fit([GOOD, one_hot])
    graphs = mutag[0][:6]
    fitted = MWSP(d=2).fit(graphs)
    x_only = [g.clone() for g in graphs]
    for g in x_only:
        del g.node_label
    with pytest.raises(ValueError, match="graph 0: labels are read from x, .* from node_label"):
        fitted.cross_distances(x_only)
    # Either field alone is read consistently: a graph is at W = 0 from itself.
    assert np.all(np.diag(MWSP(d=2).fit(x_only).cross_distances(x_only)) == 0)
    assert np.all(np.diag(fitted.cross_distances(graphs)) == 0)


def test_batches_loaders_and_non_graphs_are_refused():
    from torch_geometric.data import Batch, HeteroData
    from torch_geometric.loader import DataLoader

    batch = Batch.from_data_list([GOOD, GOOD])
    with pytest.raises(ValueError, match=r"graph 1: is a Batch of 2 graphs; pass batch.to_data_list\(\)"):
        fit([GOOD, batch])
    with pytest.raises(ValueError, match="got a Batch of 2; pass batch.to_data_list"):
        fit(batch)
    with pytest.raises(ValueError, match="got a DataLoader, which yields batches; pass loader.dataset"):
        fit(DataLoader([GOOD] * 3, batch_size=2))
    with pytest.raises(ValueError, match="got one Data; wrap it in a list"):
        fit(GOOD)
    with pytest.raises(ValueError, match="graph 1: expected a torch_geometric Data, got NoneType"):
        fit([GOOD, None])
    with pytest.raises(ValueError, match="graph 0: HeteroData is not supported"):
        fit([HeteroData()])
    with pytest.raises(ValueError, match="expected a list of torch_geometric Data or a PyG dataset, got str"):
        fit("MUTAG")


def test_sparse_adjacencies_give_the_edge_index_graph():
    import torch_geometric.transforms as T

    graphs = [
        make_data(5, [(0, 1), (1, 2), (2, 3), (3, 0), (3, 4)], [0, 1, 0, 1, 2]),
        make_data(4, [(0, 1), (1, 2), (2, 0), (2, 3)], [1, 1, 0, 2]),
    ]
    dense = fit(graphs + [GOOD]).distances_
    # T.ToSparseTensor() leaves adj_t and drops edge_index (a torch sparse CSR tensor here).
    as_adj_t = [T.ToSparseTensor()(g.clone()) for g in graphs]
    assert all(g.edge_index is None and g.adj_t is not None for g in as_adj_t)
    np.testing.assert_array_equal(fit(as_adj_t + [GOOD]).distances_, dense)
    as_sparse = [g.clone() for g in graphs]
    for g in as_sparse:
        n = g.num_nodes
        g.edge_index = torch.sparse_coo_tensor(g.edge_index, torch.ones(g.edge_index.shape[1]), (n, n))
    np.testing.assert_array_equal(fit(as_sparse + [GOOD]).distances_, dense)
    assert dense[0, 1] > 0  # the edges were read: edgeless graphs would differ


def test_labels_beyond_int64_are_not_wrapped():
    huge_x = Data(edge_index=torch.tensor([[0], [1]]), x=torch.tensor([[1e30], [1.0]], dtype=torch.float64))
    with pytest.raises(ValueError, match=r"graph 1: x has a label that int64 cannot hold \(1e\+30\)"):
        fit([Data(edge_index=torch.tensor([[0], [1]]), x=torch.tensor([[3.0], [1.0]])), huge_x])
    huge = Data(edge_index=torch.tensor([[0], [1]]), num_nodes=2, node_label=np.array([2**63, 1], dtype=np.uint64))
    with pytest.raises(
        ValueError, match=r"graph 0: node_label has a label that int64 cannot hold \(9223372036854775808\)"
    ):
        fit([huge])
    small = Data(edge_index=torch.tensor([[0], [1]]), num_nodes=2, node_label=np.array([5, 1], dtype=np.uint64))
    assert fit([small, small]).distances_[0, 1] == 0.0


def test_num_nodes_must_be_one_number():
    bad = Data(edge_index=torch.tensor([[0], [1]]), num_nodes=torch.tensor([3, 4]), node_label=torch.zeros(3))
    with pytest.raises(ValueError, match=r"graph 1: num_nodes must be one number, got a tensor of shape \[2\]"):
        fit([GOOD, bad])


@pytest.mark.parametrize(
    "params, message",
    [
        ({"d": True}, "d must be an integer >= 0, got True"),
        ({"k": 1.0}, "k must be an integer >= 0, got 1.0"),
        ({"lam": float("inf")}, "lam must be > 0 and finite, got inf"),
        ({"lam": "1"}, "lam must be > 0 and finite, got '1'"),
        ({"n_jobs": 0}, "n_jobs must be an integer >= 1, or -1"),
        ({"n_jobs": 1.5}, "n_jobs must be an integer >= 1, or -1"),
        ({"n_jobs": None}, "n_jobs must be an integer >= 1, or -1"),
        ({"solver": Sinkhorn(blur=0.0)}, "blur must be > 0 and finite, got 0.0"),
        ({"solver": Sinkhorn(blur=float("nan"))}, "blur must be > 0 and finite, got nan"),
        ({"solver": Sinkhorn(scaling=1.5)}, r"scaling must be in \(0, 1\), got 1.5"),
        ({"solver": Sinkhorn(scaling=0.0)}, r"scaling must be in \(0, 1\), got 0.0"),
        ({"solver": Exact(engine="simplex")}, "engine must be one of"),
        ({"solver": "greedy"}, r"solver must be one of \('exact', 'sinkhorn'\), got 'greedy'"),
        ({"solver": object()}, "solver must be one of .*, an Exact or a Sinkhorn, got object"),
        ({"checkpoint": ""}, "checkpoint must be a directory path, got ''"),
        ({"solver": "sinkhorn", "checkpoint": "ckpt"}, "checkpoint is only kept by the compiled exact engine"),
    ],
)
def test_bad_parameters_fail_before_any_work(params, message, monkeypatch):
    import mwsp_torch.estimator as estimator

    def no_features(*args, **kwargs):
        raise AssertionError("features computed before the parameters were checked")

    monkeypatch.setattr(estimator, "to_graph_set", no_features)
    with pytest.raises(ValueError, match=message):
        MWSP(**params).fit([GOOD])


def test_checkpoint_that_is_a_file(tmp_path):
    path = tmp_path / "a_file"
    path.write_text("")
    with pytest.raises(ValueError, match="exists and is not a directory"):
        MWSP(checkpoint=str(path)).fit([GOOD])


def test_kernels_of_impossible_distances_are_refused():
    from mwsp_torch.kernel import krein_projector, laplacian_kernel

    with pytest.raises(ValueError, match=r"distances must be finite and >= 0, got -0.5 at index \(1, 0\)"):
        laplacian_kernel(np.array([[0.0, 1.0], [-0.5, 0.0]]), 1.0)
    with pytest.raises(ValueError, match=r"distances must be finite and >= 0, got nan at index \(0, 1\)"):
        laplacian_kernel(np.array([[0.0, np.nan], [1.0, 0.0]]), 1.0)
    with pytest.raises(ValueError, match="train_kernel must be symmetric, but K and K\\^T differ by up to 2"):
        krein_projector(np.array([[1.0, 2.0], [0.0, 1.0]]), "flip")
    for bad in (np.nan, np.inf):  # named as such, not as an asymmetry of nan
        with pytest.raises(ValueError, match=rf"train_kernel must be finite, got {bad} at K\[1, 0\]"):
            krein_projector(np.array([[1.0, 0.5], [bad, 1.0]]), "clip")
    # Rounding-level asymmetry is still symmetrised.
    nearly = np.array([[1.0, 0.5], [0.5 + 1e-15, 1.0]])
    np.testing.assert_allclose(nearly @ krein_projector(nearly, "clip"), [[1.0, 0.5], [0.5, 1.0]], atol=1e-12)


def _diamond_chain(layers: int, paths: str) -> Data:
    """Node 0, then ``layers`` layers of two nodes, each layer joined to the next by all four
    edges: node 0 has ``2^(L - 1)`` shortest paths to each node of layer ``L``. Under
    ``paths="split"`` layer 1's two nodes get two labels, so paths differ and weights split."""
    edges = [(0, 1), (0, 2)] + [
        (a, b) for layer in range(1, layers) for a in (2 * layer - 1, 2 * layer) for b in (2 * layer + 1, 2 * layer + 2)
    ]
    edge_index = torch.tensor(edges).T
    labels = torch.zeros(2 * layers + 1, dtype=torch.long)
    if paths == "split":
        labels[2] = 1
    return Data(edge_index=torch.cat([edge_index, edge_index.flip(0)], 1), node_label=labels, num_nodes=2 * layers + 1)


@pytest.mark.parametrize("paths", ["all", "split"])
def test_more_shortest_paths_than_int64_counts_is_refused_not_wrapped(paths):
    """At d=64 node 0 of the chain has 2^63 shortest paths to layer 64: the int64 counts
    wrapped (a review saw features of -1.8e19 under "all", -1 under "split" and, at d=65, a
    ZeroDivisionError). At d=63 the counts fit and every weight is positive."""
    graphs = [make_data(2, [(0, 1)], [0, 0]), _diamond_chain(70, paths)]
    model = MWSP(d=63, k=0, paths=paths, n_jobs=1).fit(graphs)
    assert model.features_.data.min() > 0
    assert model.features_.data.max() >= (2.0**62 if paths == "all" else 1.0)
    for d in (64, 65):
        with pytest.raises(
            ValueError, match=rf"graph 1: node 0 has more than 2\^63 - 1 shortest paths of at most d={d} edges"
        ):
            MWSP(d=d, k=0, paths=paths, n_jobs=1).fit(graphs)
