"""``TreeIDs`` fitted on training graphs: every index that is not "unseen" decodes back to
exactly its tree, every tree outside the fit is unseen, rare trees join it with
``min_graphs``, and the transform is PyG's functional ``tree_ids``."""

import re

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch.utils.data.datapipes.iter import IterableWrapper
from torch_geometric.loader import DataLoader

from mwsp_torch import TreeIDs
from mwsp_torch.trees import UNSEEN

from helpers import make_data
from random_graphs import random_graphs


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 10_000), k=st.integers(0, 2), split=st.integers(3, 12))
def test_fitted_indices_decode_to_their_trees_and_new_trees_are_unseen(seed, k, split):
    graphs = random_graphs(16, seed=seed, max_nodes=9)
    train, test = graphs[:split], graphs[split:]
    fitted = TreeIDs(k=k).fit([g.clone() for g in train])
    assert fitted.sizes_ == [len(trees) + 1 for trees in fitted.known_]
    train_trees = [set() for _ in range(k + 1)]
    for g in train:
        for s, column in enumerate(fitted.raw_ids(g.clone()).T):
            train_trees[s].update(column.tolist())
    assert [set(trees.tolist()) for trees in fitted.known_] == train_trees  # min_graphs=1: every tree seen
    for g in test:
        raw = fitted.raw_ids(g.clone())  # the same vocabulary, as forward reads it
        index = fitted(g.clone()).tree_ids.numpy()
        for s in range(k + 1):
            seen = index[:, s] != UNSEEN
            assert np.array_equal(fitted.known_[s][index[seen, s] - 1], raw[seen, s])
            assert not np.isin(raw[~seen, s], fitted.known_[s]).any()


def test_rare_trees_share_the_unseen_index_and_labels_keep_theirs():
    graphs = random_graphs(30, seed=3, max_nodes=9)
    every = TreeIDs(k=2).fit([g.clone() for g in graphs])
    rare = TreeIDs(k=2, min_graphs=3).fit([g.clone() for g in graphs])
    assert rare.sizes_[0] == every.sizes_[0]  # scale 0, the labels: every one kept
    assert all(r < e for r, e in zip(rare.sizes_[1:], every.sizes_[1:], strict=True))
    counts = {}
    for g in graphs:
        for tree in np.unique(rare.raw_ids(g.clone())[:, 2]):
            counts[tree] = counts.get(tree, 0) + 1
    assert set(rare.known_[2].tolist()) == {tree for tree, n in counts.items() if n >= 3 and tree in every.known_[2]}


def test_a_refit_starts_anew_and_only_fit_changes_the_mapping():
    graphs = random_graphs(20, seed=8)
    transform = TreeIDs(k=1).fit([g.clone() for g in graphs[:5]])
    sizes = list(transform.sizes_)
    for g in graphs[5:]:
        transform(g.clone())  # new trees get raw IDs, but no index
    assert transform.sizes_ == sizes
    refit = TreeIDs(k=1).fit([g.clone() for g in graphs[5:]])
    transform.fit([g.clone() for g in graphs[5:]])
    assert transform.sizes_ == refit.sizes_
    assert all(np.array_equal(a, b) for a, b in zip(transform.known_, refit.known_, strict=True))


def test_attr_name_the_functional_transform_and_bad_arguments():
    graph = random_graphs(1, seed=1)[0]
    out = TreeIDs(k=1, attr_name="tree_tokens")(graph.clone())
    assert "tree_tokens" in out and "tree_ids" not in out
    (piped,) = list(IterableWrapper([graph.clone()]).tree_ids(k=1))
    assert torch.equal(piped.tree_ids, TreeIDs(k=1)(graph.clone()).tree_ids)
    with pytest.raises(ValueError, match="min_graphs must be an integer >= 1, got 0"):
        TreeIDs(min_graphs=0)
    with pytest.raises(ValueError, match="attr_name must be a non-empty string"):
        TreeIDs(attr_name="")
    with pytest.raises(ValueError, match="not fitted"):
        TreeIDs().indices(np.zeros((2, 2), dtype=np.int64))
    assert repr(TreeIDs(k=2, min_graphs=2)) == "TreeIDs(k=2, labels='auto', min_graphs=2)"


# Distinct node labels, as in the cache's tests: paths, stars and cycles of four nodes.
PATH = [(0, 1), (1, 2), (2, 3)]
STAR = [(0, 1), (0, 2), (0, 3)]
CYCLE = [(0, 1), (1, 2), (2, 3), (3, 0)]
LABELS = [0, 1, 2, 1]


def graph(edges):
    """The undirected graph of ``edges`` on four nodes labelled :data:`LABELS`."""
    return make_data(len(LABELS), [*edges, *((b, a) for a, b in edges)], LABELS)


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
