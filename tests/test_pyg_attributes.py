"""PyG's layout of attributed datasets: ``TUDataset(name, use_node_attr=True)`` puts each node's
continuous attributes and then its one-hot labels in ``x``. ``MWSP`` reads it with
``num_node_attributes`` (or from the dataset itself) and gives the W of the ``node_attr`` /
``node_label`` route on the same values."""

from __future__ import annotations

import shutil

import numpy as np
import pytest
import torch
from torch_geometric.data import Data
from torch_geometric.datasets import TUDataset

from mwsp_torch import MWSP, load_tudataset
from mwsp_torch.attributes import dataset_attribute_columns, split_attribute_columns


def _pyg_dataset(source_root, name, tmp_path, use_node_attr=True):
    """PyG's own TUDataset on a copy of ``source_root/NAME/raw`` (nothing written to the source)."""
    shutil.copytree(source_root / name / "raw", tmp_path / name / "raw")
    return TUDataset(str(tmp_path), name, use_node_attr=use_node_attr)


def _node_attr_route(graphs, dataset, width):
    """``load_tudataset``'s graphs (``node_label`` from the raw file) with PyG's attribute values
    (float32, as PyG reads them) as ``node_attr``: what the layout must be read as."""
    out = []
    for g, p in zip(graphs, dataset, strict=True):
        g = g.clone()
        g.node_attr = p.x[:, :width]
        out.append(g)
    return out


def _check_same_w(dataset, graphs, width, count):
    """W from PyG's layout equals W of the node_attr / node_label route, bit for bit, in fit and
    transform, for both attribute modes; and is within float32's rounding of the float64 route."""
    train, test = dataset[:count], dataset[count : count + 10]
    explicit = _node_attr_route(graphs[: count + 10], dataset[: count + 10], width)
    for mode in ("node", "multiscale"):
        from_dataset = MWSP(d=2, k=1, attributes=mode, n_jobs=1).fit(train)
        assert from_dataset.num_node_attributes_ == width
        from_list = MWSP(d=2, k=1, attributes=mode, num_node_attributes=width, n_jobs=1).fit(list(train))
        expected = MWSP(d=2, k=1, attributes=mode, n_jobs=1).fit(explicit[:count])
        np.testing.assert_array_equal(from_dataset.distances_, expected.distances_)
        np.testing.assert_array_equal(from_list.distances_, expected.distances_)
        np.testing.assert_array_equal(from_dataset.transform(test), expected.transform(explicit[count:]))
        np.testing.assert_array_equal(from_list.transform(list(test)), expected.transform(explicit[count:]))
        # load_tudataset reads the attributes in float64: the same W up to float32's rounding
        float64 = MWSP(d=2, k=1, attributes=mode, n_jobs=1).fit(graphs[:count]).distances_
        np.testing.assert_allclose(from_dataset.distances_, float64, rtol=1e-6, atol=1e-6)
        assert from_dataset.distances_.max() > 0


def test_enzymes_fixture_in_pygs_layout_gives_the_node_attr_routes_w(fixture_root, cache_dir, tmp_path):
    dataset = _pyg_dataset(fixture_root, "ENZYMES", tmp_path)
    assert dataset.num_node_attributes == 18 and dataset_attribute_columns(dataset) == 18
    graphs, _ = load_tudataset("ENZYMES", root=fixture_root, cache_dir=cache_dir)
    _check_same_w(dataset, graphs, 18, 40)


@pytest.mark.tudata("ENZYMES", "PROTEINS_full")
@pytest.mark.parametrize("name, width", [("ENZYMES", 18), ("PROTEINS_full", 29)])
def test_full_datasets_in_pygs_layout_give_the_node_attr_routes_w(tu_root, cache_dir, tmp_path, name, width):
    dataset = _pyg_dataset(tu_root, name, tmp_path)
    assert dataset_attribute_columns(dataset) == width
    graphs, _ = load_tudataset(name, root=tu_root, cache_dir=cache_dir)
    # graphs from across the dataset (it lists them class by class), in the same order on both routes
    picked = np.random.default_rng(0).permutation(len(graphs))[:70]
    _check_same_w(dataset[torch.from_numpy(picked)], [graphs[i] for i in picked], width, 60)


def test_without_use_node_attr_the_dataset_holds_labels_only(fixture_root, cache_dir, tmp_path):
    """``TUDataset`` keeps ``num_node_attributes`` when it cuts them off ``x``: nothing is split then."""
    dataset = _pyg_dataset(fixture_root, "ENZYMES", tmp_path, use_node_attr=False)
    assert dataset.num_node_attributes == 18 and dataset_attribute_columns(dataset) == 0
    graphs, _ = load_tudataset("ENZYMES", root=fixture_root, cache_dir=cache_dir)
    model = MWSP(d=2, k=1, n_jobs=1).fit(dataset[:30])
    assert model.num_node_attributes_ == 0
    np.testing.assert_array_equal(model.distances_, MWSP(d=2, k=1, n_jobs=1).fit(graphs[:30]).distances_)


def test_labels_alone_from_pygs_layout(fixture_root, cache_dir, tmp_path):
    """Without ``attributes`` the layout's labels are read and its attributes left aside."""
    dataset = _pyg_dataset(fixture_root, "ENZYMES", tmp_path)
    graphs, _ = load_tudataset("ENZYMES", root=fixture_root, cache_dir=cache_dir)
    np.testing.assert_array_equal(
        MWSP(d=2, k=1, n_jobs=1).fit(dataset[:30]).distances_, MWSP(d=2, k=1, n_jobs=1).fit(graphs[:30]).distances_
    )


def _float_x_graph(columns, label_columns=0):
    rng = np.random.default_rng(1)
    x = torch.from_numpy(rng.normal(size=(4, columns)).astype(np.float32))
    if label_columns:
        x = torch.cat([x, torch.eye(label_columns)[[0, 1, 0, 1]]], dim=1)
    return Data(edge_index=torch.tensor([[0, 1, 2], [1, 2, 3]]), num_nodes=4, x=x)


def test_a_float_x_is_refused_with_what_to_pass():
    graphs = [_float_x_graph(3), _float_x_graph(3)]
    with pytest.raises(ValueError, match=r"graph 0: x has non-integer values.*num_node_attributes=.*labels='degree'"):
        MWSP(attributes="node").fit(graphs)
    with pytest.raises(ValueError, match=r"graph 0: x holds its 3 attribute columns and no label columns"):
        MWSP(attributes="node", num_node_attributes=3).fit(graphs)
    with pytest.raises(ValueError, match=r"graph 1: num_node_attributes=3 reads the first 3 columns of x"):
        MWSP(attributes="node", num_node_attributes=3).fit([_float_x_graph(3, 2), _float_x_graph(2)])
    with pytest.raises(ValueError, match="num_node_attributes must be None or an integer >= 0"):
        MWSP(num_node_attributes=-1).fit(graphs)
    # attributes only, labels from a policy: the split or x itself, the same W
    split = MWSP(attributes="node", labels="degree", num_node_attributes=3, n_jobs=1).fit(graphs).distances_
    np.testing.assert_array_equal(split, MWSP(attributes="node", labels="degree", n_jobs=1).fit(graphs).distances_)


def test_the_split_leaves_the_graphs_alone_and_keeps_what_they_give_apart():
    graph = _float_x_graph(3, 2)
    x = graph.x.clone()
    (view,) = split_attribute_columns([graph], 3)
    assert torch.equal(graph.x, x) and "node_attr" not in graph
    assert torch.equal(view.node_attr, x[:, :3]) and torch.equal(view.x, x[:, 3:])
    graph.node_attr = torch.ones(4, 1)
    assert torch.equal(split_attribute_columns([graph], 3)[0].node_attr, torch.ones(4, 1))  # its own kept
    assert split_attribute_columns([graph], 0) == [graph]
