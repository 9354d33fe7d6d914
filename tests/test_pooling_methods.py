"""GIN with template pooling in the comparison (``gin_pool``, ``gin_pool_tree_ids``, ``gin_tfgw``).

What must hold for their rows to stand beside GIN's: the model is GIN's stages, then the exact
W to the templates, then the MLP (checked against PyG's ``GINConv`` and ``ot.emd2``); the
tree-ID vocabulary of a fold comes from its training graphs only (a tree seen only in the
validation or test graphs is "unseen"); selection never reads a test graph; they share GIN's
grid, budget and code path, and the table tests each against GIN.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch_geometric.nn import GINConv

from mwsp_torch import TreeIDs
from mwsp_torch.compare.methods import METHODS, POOLING_METHODS
from mwsp_torch.compare.report import best_pairs
from mwsp_torch.gnn import GINTemplatePooling, PackedGraphs, tree_id_features
from mwsp_torch.gnn_protocol import (
    PROFILES,
    grid_settings,
    protocol_of,
    run_gnn_fold,
    tree_id_fold_inputs,
)
from mwsp_torch.trees import UNSEEN

from helpers import make_data

TINY_POOL = {"batch_size": [8], "hidden_units": [[8, 8], [8]], "train_eps": [True], "dropout": [0.0],
             "monitor": ["accuracy"], "num_templates": [3], "template_size": [4]}  # fmt: skip


def _graphs(n: int = 36, seed: int = 0, labels: int = 2):
    """Cycles (class 0) and paths (class 1) of 4-7 nodes, labels ``0..labels - 1``."""
    rng = np.random.default_rng(seed)
    graphs, y = [], []
    for i in range(n):
        size, cls = int(rng.integers(4, 8)), i % 2
        edges = [[j, j + 1] for j in range(size - 1)] + ([[size - 1, 0]] if cls == 0 else [])
        both = edges + [[b, a] for a, b in edges]
        graphs.append(make_data(size, both, rng.integers(0, labels, size).tolist()))
        y.append(cls)
    return graphs, np.array(y)


def _fold(n: int = 36):
    idx = np.arange(n)
    return {"train": idx[: n // 2], "validation": idx[n // 2 : 3 * n // 4], "test": idx[3 * n // 4 :]}


def test_a_folds_tree_id_vocabulary_holds_no_tree_seen_only_outside_its_training_graphs():
    """Validation and test graphs carry a label (7) and stars no training graph has. Each node's
    index at each scale is decoded against one shared vocabulary over all graphs: it is its own
    (not UNSEEN) exactly when its tree is in at least ``min_graphs`` training graphs (any number
    at scale 0). A vocabulary fitted on all graphs would give label 7 and the stars indices."""
    graphs, y = _graphs(30)
    star = make_data(5, [[0, i] for i in range(1, 5)] + [[i, 0] for i in range(1, 5)], [7, 0, 1, 0, 1])
    graphs[20], graphs[27] = star, star.clone()  # one in validation, one in test
    fold = {"train": np.arange(18), "validation": np.arange(18, 24), "test": np.arange(24, 30)}
    packed, fitted = tree_id_fold_inputs(graphs, y, fold["train"], k=2, min_graphs=2)
    shared = TreeIDs(k=2)  # unfitted: one vocabulary, raw IDs comparable across all graphs
    raw = [shared.raw_ids(g) for g in graphs]
    offsets = np.concatenate([[0], np.cumsum(fitted.sizes_)[:-1]])
    for s in range(3):
        holding = {}
        for g in fold["train"]:
            for tree in np.unique(raw[g][:, s]):
                holding[tree] = holding.get(tree, 0) + 1
        known = {tree for tree, count in holding.items() if count >= (1 if s == 0 else 2)}
        assert fitted.sizes_[s] == len(known) + 1
        for g, data in enumerate(graphs):
            block = packed.x[packed.node_ptr[g] : packed.node_ptr[g + 1], offsets[s] : offsets[s] + fitted.sizes_[s]]
            assert torch.equal(block.sum(1), torch.ones(data.num_nodes))  # one index a node and scale
            unseen = block[:, UNSEEN] == 1
            assert unseen.tolist() == [tree not in known for tree in raw[g][:, s]]
    hub = int(packed.node_ptr[20])
    assert packed.x[hub, offsets[0] + UNSEEN] == 1 and packed.x[hub, offsets[1] + UNSEEN] == 1
    # The check can fail: fitted on all graphs, label 7 and the star's hub get indices of their own.
    leaky = TreeIDs(k=2, min_graphs=2).fit(graphs)
    assert leaky.sizes_ != fitted.sizes_
    assert tree_id_features([star], leaky)[0][0, UNSEEN] == 0
    # What the protocol records is this fold's vocabulary.
    out = run_gnn_fold(graphs, y, fold, method="gin_pool_tree_ids", grid={**TINY_POOL, "hidden_units": [[8]]},
                       max_epochs=2)  # fmt: skip
    assert out["tree_id_sizes"] == fitted.sizes_


def test_gin_pool_is_gins_stages_then_exact_w_to_the_templates_then_the_mlp():
    ot = pytest.importorskip("ot")
    graphs, y = _graphs(5)
    x = [torch.randn(g.num_nodes, 3) for g in graphs]
    b = PackedGraphs(x, [g.edge_index for g in graphs], y).batch()
    torch.manual_seed(0)
    model = GINTemplatePooling(3, 2, hidden_units=[5, 4], num_templates=3, template_size=4).eval()
    with torch.no_grad():
        model.eps.copy_(torch.tensor([0.3, -0.2]))
    h0 = model.first(b.x)
    conv1, conv2 = GINConv(model.mlps[0], train_eps=True), GINConv(model.mlps[1], train_eps=True)
    with torch.no_grad():
        conv1.eps.fill_(0.3)
        conv2.eps.fill_(-0.2)
    h1 = conv1(h0, b.edge_index)
    h = torch.cat([h0, h1, conv2(h1, b.edge_index)], dim=1).double()  # every stage: 5 + 5 + 4 wide
    templates = model.pool.templates.double()
    distances = torch.zeros(b.num_graphs, 3, dtype=torch.float64)
    for g in range(b.num_graphs):
        nodes = h[b.batch == g]
        for t in range(3):
            cost = ot.dist(nodes.detach(), templates[t].detach(), metric="euclidean")
            distances[g, t] = ot.emd2(torch.full((len(nodes),), 1 / len(nodes), dtype=torch.float64),
                                      torch.full((4,), 0.25, dtype=torch.float64), cost)  # fmt: skip
    expected = model.mlp(distances.float())
    assert torch.allclose(model(b.x, b.edge_index, b.batch, b.num_graphs), expected, atol=1e-5)
    assert torch.allclose(model.pool(model.node_embeddings(b.x, b.edge_index), b.batch).double(), distances,
                          atol=1e-5)  # fmt: skip


def test_pooling_selection_never_reads_the_test_graphs():
    """Flip the test graphs' labels and change their node labels (the tree IDs' input): every
    setting's validation score and the selection are unchanged, and only the test scores move.
    Were the tree-ID vocabulary fitted on all graphs, the new labels would widen the inputs."""
    graphs, y = _graphs(36)
    fold = _fold(36)
    clean = run_gnn_fold(graphs, y, fold, method="gin_pool_tree_ids", grid=TINY_POOL, max_epochs=4)
    poisoned_graphs = [g.clone() for g in graphs]
    for i in fold["test"]:
        poisoned_graphs[i].node_label = torch.full_like(poisoned_graphs[i].node_label, 5)
    flipped_y = y.copy()
    flipped_y[fold["test"]] = 1 - flipped_y[fold["test"]]
    poisoned = run_gnn_fold(poisoned_graphs, flipped_y, fold, method="gin_pool_tree_ids", grid=TINY_POOL,
                            max_epochs=4)  # fmt: skip
    assert [s["validation_accuracy"] for s in poisoned["settings"]] == [
        s["validation_accuracy"] for s in clean["settings"]
    ]
    assert [s["validation_loss"] for s in poisoned["settings"]] == [s["validation_loss"] for s in clean["settings"]]
    assert poisoned["selected"] == clean["selected"] and poisoned["tree_id_sizes"] == clean["tree_id_sizes"]
    assert [r["best_epoch"] for r in poisoned["retrains"]] == [r["best_epoch"] for r in clean["retrains"]]
    for retrain in clean["retrains"]:
        assert retrain["test_accuracy"] == pytest.approx(100 * np.mean(np.array(retrain["test_predictions"])
                                                                       == y[fold["test"]]))  # fmt: skip
    # One-hot inputs take the same path: flipped test labels leave the test predictions alone.
    plain = run_gnn_fold(graphs, y, fold, method="gin_pool", grid=TINY_POOL, max_epochs=4)
    flipped = run_gnn_fold(graphs, flipped_y, fold, method="gin_pool", grid=TINY_POOL, max_epochs=4)
    assert [r["test_predictions"] for r in flipped["retrains"]] == [r["test_predictions"] for r in plain["retrains"]]
    assert flipped["test_accuracies"] == pytest.approx([100 - a for a in plain["test_accuracies"]])


def test_pooling_methods_take_gins_grid_and_budget_crossed_with_one_template_size():
    assert set(POOLING_METHODS) <= set(METHODS)
    for profile in (p for p in PROFILES if set(POOLING_METHODS) <= set(PROFILES[p])):  # not GIN's diagnostic
        gin = protocol_of("gin", "NCI1", profile)
        for method in POOLING_METHODS:
            pool = protocol_of(method, "NCI1", profile)
            assert (pool["max_epochs"], pool["patience"]) == (gin["max_epochs"], gin["patience"])
            assert {k: v for k, v in pool["fixed"].items() if k in gin["fixed"]} == gin["fixed"]
            assert {k: v for k, v in gin["grid"].items() if k != "aggregation"} == {
                k: v for k, v in pool["grid"].items() if k not in ("num_templates", "template_size")
            }
            assert (pool["grid"]["num_templates"], pool["grid"]["template_size"]) == ([10], [10])
    assert len(grid_settings(protocol_of("gin_pool", "MUTAG", "cpu")["grid"])) == 4
    # GIN's own request is untouched, so its cells on disk stay valid.
    assert protocol_of("gin", "MUTAG", "cpu")["fixed"] == {"lr": 0.01, "weight_decay": 0.0, "step_size": 50,
                                                           "gamma": 0.5}  # fmt: skip
    assert protocol_of("gin_pool_tree_ids", "MUTAG")["fixed"]["tree_ids_k"] == 2


def test_the_table_tests_each_pooling_row_against_gin():
    def row(method, mean, folds_done=10):
        return {"method": method, "accuracy_mean": mean, "folds_done": folds_done, "folds": 10}

    rows = [row("mwsp", 89.0), row("gin", 84.0), row("gin_pool", 82.0), row("gin_pool_tree_ids", 86.0),
            row("gin_tfgw", 80.0, folds_done=3)]  # fmt: skip
    pairs = best_pairs(rows)
    assert ("gin_pool", "gin") in pairs and ("gin_pool_tree_ids", "gin") in pairs
    assert not any("gin_tfgw" in pair for pair in pairs)  # a row with folds missing is not tested
    assert len({frozenset(p) for p in pairs}) == len(pairs)


def test_the_command_lines_methods_are_the_comparisons():
    from mwsp_torch.cli import build_parser

    parser = build_parser()
    compare = parser._subparsers._group_actions[0].choices["compare"]
    methods = next(a for a in compare._actions if a.dest == "methods")
    assert tuple(methods.choices) == METHODS
