"""Golden values from the paper's worked example (docs/definition.md, section 6, paper Figs. 2-4)."""

import numpy as np
import torch

from mwsp_torch import MWSP
from mwsp_torch.labels import to_graph_set
from mwsp_torch.paths import node_feature_maps
from mwsp_torch.trees import Vocabulary, tree_ids

from helpers import make_data

A, B, C, D, E, G = range(6)
LABELS = [4, 1, 3, 2, 3, 1]
G1 = make_data(6, [(A, B), (A, C), (A, E), (D, C), (G, E)], LABELS)
G2 = make_data(6, [(A, B), (A, C), (A, E), (A, D), (D, C), (G, B)], LABELS)


def _trees(k):
    return tree_ids(to_graph_set([G1, G2]), k, Vocabulary())


def test_node_a_paths_at_d1_k0():
    features = node_feature_maps(to_graph_set([G1]), _trees(0)[:6], 1, "all", Vocabulary())
    row_a = features[A]
    # (4), (4,1), (4,3) twice: three distinct representations with counts 1, 1, 2.
    assert sorted(row_a.data.tolist()) == [1.0, 1.0, 2.0]
    # Node A of G2 adds (4,2): four representations.
    features2 = node_feature_maps(to_graph_set([G2]), _trees(0)[6:], 1, "all", Vocabulary())
    assert sorted(features2[A].data.tolist()) == [1.0, 1.0, 1.0, 2.0]


def test_node_a_paths_at_d1_k0_by_representation():
    """Which representation carries which weight: graphs whose node 0 has only (4), then
    (4) and (4,3), then (4) and (4,1) name the columns of (4), (4,3) and (4,1) in a
    vocabulary shared with G1; node A of G1 has (4,3) twice (via C and E), the others once."""
    alone = make_data(1, [], [4])
    to_3, to_1 = make_data(2, [(0, 1)], [4, 3]), make_data(2, [(0, 1)], [4, 1])
    graph_set = to_graph_set([G1, alone, to_3, to_1])
    features = node_feature_maps(graph_set, tree_ids(graph_set, 0, Vocabulary()), 1, "all", Vocabulary()).tocsr()
    first = graph_set.ptr[1:4]  # node 0 of each small graph

    def columns(row):
        return set(features[row].indices.tolist())

    (col_4,) = columns(first[0])
    (col_43,) = columns(first[1]) - {col_4}
    (col_41,) = columns(first[2]) - {col_4}
    row_a = features[A].toarray().ravel()
    assert columns(A) == {col_4, col_43, col_41}
    assert (row_a[col_4], row_a[col_43], row_a[col_41]) == (1.0, 2.0, 1.0)


def test_depth2_trees_fall_into_eleven_classes():
    trees = _trees(2)
    assert len(np.unique(trees[:, 2])) == 11
    assert trees[C, 2] == trees[6 + C, 2]
    others = [v for v in range(12) if v not in (C, 6 + C)]
    assert len(np.unique(trees[others, 2])) == 10


def test_path_bac_same_at_scale0_differs_at_scale2():
    trees = _trees(2)
    path = [B, A, C]
    g1 = [trees[v, :] for v in path]
    g2 = [trees[6 + v, :] for v in path]
    assert [t[0] for t in g1] == [t[0] for t in g2]
    assert [t[2] for t in g1] != [t[2] for t in g2]


def test_d0_k0_is_one_hot_labels():
    model = MWSP(d=0, k=0).fit([G1, G2])
    dense = model.features_.toarray()
    assert np.all(dense.sum(1) == 1)
    # Same label multiset in both graphs: W = 0.
    assert model.distances_[0, 1] == 0.0


def test_worked_example_distance_matches_reference():
    from reference import distance_matrix

    graphs = [(6, g.edge_index.T.tolist(), LABELS) for g in (G1, G2)]
    for d, k in [(1, 0), (2, 1), (3, 2)]:
        expected = distance_matrix(graphs, d, k, "split")
        got = MWSP(d=d, k=k).fit([G1, G2]).distances_
        assert abs(got[0, 1] - expected[0, 1]) <= 1e-12 * max(1.0, expected[0, 1])
        assert got[0, 1] > 0


def test_tree_ids_dtype_and_shape():
    trees = _trees(3)
    assert trees.shape == (12, 4) and trees.dtype == np.int64
    assert torch.from_numpy(trees).dtype == torch.long
