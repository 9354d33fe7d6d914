"""Bad input gets a ValueError that names the graph and the problem (SPEC section 1)."""

import numpy as np
import pytest
import torch
from torch_geometric.data import Data

from mwsp_torch import MWSP, TreeIDs

from conftest import make_data

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
    transform(Data(edge_index=torch.tensor([[0], [1]]), num_nodes=2, node_label=torch.tensor([[3, 7], [5, 9]])))
    with pytest.raises(ValueError, match="graph 0: labels have 1 columns"):
        transform(Data(edge_index=torch.tensor([[0], [1]]), num_nodes=2, node_label=torch.tensor([1, 3])))


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
