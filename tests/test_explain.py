"""Explanations (``mwsp_torch.explain``, docs/definition.md, section 7): the node plan is optimal (its
marginals, its cost equal to the exact W), deterministic, decoded correctly, drawn; an SVM's
decision splits into its support vectors' terms."""

import json

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from scipy.spatial.distance import cdist
from sklearn.svm import SVC

from mwsp_torch import MWSP
from mwsp_torch.cli import main
from mwsp_torch.datasets import node_label_names
from mwsp_torch.explain import explain, explain_prediction, plot_explanation, svm_contributions

from helpers import make_data, require_extra
from random_graphs import random_graphs
from reference import adjacency, edge_label_map, feature_rows, shortest_paths, tree, wasserstein

MUTAG_NAMES = {0: "C", 1: "N", 2: "O", 3: "F", 4: "I", 5: "Cl", 6: "Br"}


def check_optimal_plan(explanation, distance: float) -> None:
    """Marginals 1/|V|, non-negative, cost equal to W to 1e-12, shares summing to W."""
    plan = explanation.plan
    n_g, n_h = plan.shape
    assert plan.min() >= 0
    np.testing.assert_allclose(plan.sum(axis=1), 1 / n_g, rtol=1e-13, atol=0)
    np.testing.assert_allclose(plan.sum(axis=0), 1 / n_h, rtol=1e-13, atol=0)
    cost = float((plan * explanation.costs).sum())
    assert abs(cost - distance) <= 1e-12 * distance
    assert abs(explanation.distance - distance) <= 1e-12 * distance
    assert abs(explanation.node_share_g.sum() - distance) <= 1e-12 * distance
    assert abs(explanation.node_share_h.sum() - distance) <= 1e-12 * distance
    assert explanation.node_share_g.min() >= 0 and explanation.node_share_h.min() >= 0


@pytest.fixture(scope="module")
def mutag_model(mutag):
    graphs, _ = mutag
    return MWSP(d=2, k=1, n_jobs=1).fit(graphs[:40])


@pytest.mark.parametrize(("d", "k"), [(2, 0), (3, 1)])
def test_plan_is_optimal_on_mutag_pairs(mutag, d, k):
    graphs, _ = mutag
    model = MWSP(d=d, k=k, n_jobs=1).fit(graphs[:30])
    for i, j in [(0, 1), (2, 17), (5, 29), (13, 13), (8, 21)]:
        explanation = explain(model, graphs[i], graphs[j])
        assert explanation.plan.shape == (graphs[i].num_nodes, graphs[j].num_nodes)
        if i == j:
            assert explanation.distance == 0 and model.distances_[i, j] == 0
            continue
        check_optimal_plan(explanation, model.distances_[i, j])
        # The listed pairs carry their flow at their cost, largest part of W first.
        parts = [p.contribution for p in explanation.pairs]
        assert len(parts) == 5 and parts == sorted(parts, reverse=True)
        for pair in explanation.pairs:
            block = np.ix_(pair.nodes_g, pair.nodes_h)
            assert explanation.plan[block].sum() == pytest.approx(pair.flow, rel=1e-12)
            # nodes sharing a row split its flow evenly (in proportion to their equal masses)
            np.testing.assert_allclose(explanation.plan[block], pair.flow / explanation.plan[block].size, rtol=1e-12)
            assert np.all(explanation.costs[block] == pair.cost)
            squares = sum((diff.weight_g - diff.weight_h) ** 2 for diff in pair.differences)
            assert np.sqrt(squares) == pytest.approx(pair.cost, rel=1e-12)


def render(tree, edges: bool = False) -> str:
    """A reference tree ``(label, children)`` as the decoder writes it: ``label(child,...)``;
    with ``edges`` each child is ``(e, subtree)``, written ``[e]subtree``."""
    label, children = tree

    def child(c) -> str:
        return f"[{c[0]}]" + render(c[1], True) if edges else render(c)

    return str(label) + ("(" + ",".join(sorted(child(c) for c in children)) + ")" if children else "")


def as_reference(data):
    edges = data.edge_index.numpy().T.tolist()
    if "edge_label" in data:
        return data.num_nodes, edges, data.node_label.tolist(), data.edge_label.tolist()
    return data.num_nodes, edges, data.node_label.tolist()


def with_edge_labels(data, seed: int):
    """``data`` with an edge label in 0..2 on each edge, the same both ways."""
    u, v = data.edge_index
    low, high = torch.minimum(u, v), torch.maximum(u, v)
    data.edge_label = (low * 7 + high * 3 + seed) % 3
    return data


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    seed=st.integers(0, 10_000),
    d=st.integers(0, 3),
    k=st.integers(0, 2),
    paths=st.sampled_from(["split", "all"]),
    edge_labels=st.booleans(),
)
def test_plan_costs_and_decoded_paths_match_the_naive_reference(seed, d, k, paths, edge_labels):
    graphs = random_graphs(4, seed, min_nodes=3, max_nodes=9)
    if edge_labels:
        graphs = [with_edge_labels(g, seed) for g in graphs]
    # Fitted on two other graphs: the pair's unseen trees and paths get fresh IDs, decoded too.
    model = MWSP(d=d, k=k, paths=paths, n_jobs=1, edge_labels=edge_labels).fit(graphs[:2])
    G, H = graphs[2], graphs[3]
    explanation = explain(model, G, H, top=3)
    rows_g, rows_h = feature_rows([as_reference(G), as_reference(H)], d, k, paths)
    reference_w = wasserstein(rows_g, rows_h)
    assert explanation.distance == pytest.approx(reference_w, rel=1e-9, abs=1e-12)
    np.testing.assert_allclose(explanation.costs, cdist(rows_g, rows_h), rtol=1e-9, atol=1e-12)
    if explanation.distance == 0:
        assert not explanation.pairs and not explanation.node_share_g.any()
        return
    check_optimal_plan(explanation, explanation.distance)
    # Decoded differences against the reference's own path representations, by name.
    reference_g, reference_h = as_reference(G), as_reference(H)

    def named_row(graph, v):
        num, edges, labels = graph[:3]
        elab = edge_label_map(edges, graph[3]) if len(graph) > 3 else None
        adj = adjacency(num, edges)
        all_paths = shortest_paths(adj, v, d)
        sigma = {}
        for p in all_paths:
            sigma[p[-1]] = sigma.get(p[-1], 0) + 1
        row = {}
        for s in range(k + 1):
            for p in all_paths:
                edges_on = elab is not None
                name = render(tree(adj, labels, p[0], s, elab), edges_on)
                for u, w in zip(p[:-1], p[1:], strict=True):
                    step = f"-[{elab[(u, w)]}]-" if edges_on else "-"
                    name += step + render(tree(adj, labels, w, s, elab), edges_on)
                key = (s, name)
                row[key] = row.get(key, 0.0) + (1.0 / sigma[p[-1]] if paths == "split" else 1.0)
        return row

    for pair in explanation.pairs:
        row_g = named_row(reference_g, pair.nodes_g[0])
        row_h = named_row(reference_h, pair.nodes_h[0])
        expected = {
            key: (row_g.get(key, 0.0), row_h.get(key, 0.0))
            for key in set(row_g) | set(row_h)
            if abs(row_g.get(key, 0.0) - row_h.get(key, 0.0)) > 1e-9
        }
        found = {(diff.scale, diff.path): (diff.weight_g, diff.weight_h) for diff in pair.differences}
        assert found.keys() == expected.keys()
        for key, weights in expected.items():
            np.testing.assert_allclose(found[key], weights, rtol=1e-12)


def test_same_input_same_explanation(mutag):
    graphs, _ = mutag
    runs = [explain(MWSP(d=2, k=1, n_jobs=1).fit(graphs[:12]), graphs[3], graphs[7]) for _ in range(2)]
    runs.append(MWSP(d=2, k=1, n_jobs=1).fit(graphs[:12]).explain(graphs[3], graphs[7]))
    for other in runs[1:]:
        np.testing.assert_array_equal(other.plan, runs[0].plan)
        np.testing.assert_array_equal(other.node_share_g, runs[0].node_share_g)
        np.testing.assert_array_equal(other.node_share_h, runs[0].node_share_h)
        assert other.pairs == runs[0].pairs and other.distance == runs[0].distance


def test_identical_graphs_give_zero_and_no_pairs(mutag_model, mutag):
    graphs, _ = mutag
    G = graphs[4]
    perm = torch.randperm(G.num_nodes, generator=torch.Generator().manual_seed(0))
    inverse = torch.argsort(perm)
    renumbered = make_data(G.num_nodes, inverse[G.edge_index].T.numpy(), G.node_label[perm].tolist())
    for H in (G, renumbered):
        explanation = explain(mutag_model, G, H)
        assert explanation.distance == 0
        assert not explanation.node_share_g.any() and not explanation.node_share_h.any()
        assert explanation.pairs == []
        np.testing.assert_allclose(explanation.plan.sum(axis=1), 1 / G.num_nodes, rtol=1e-13)
        assert float((explanation.plan * explanation.costs).sum()) == 0


def test_labels_decoded_by_name(mutag_model, mutag, fixture_root):
    graphs, _ = mutag
    names = node_label_names("MUTAG", fixture_root)
    assert names == MUTAG_NAMES
    assert node_label_names("NCI1", fixture_root) is None  # its README has no table of names
    explanation = explain(mutag_model, graphs[0], graphs[1], label_names=names)
    assert explanation.labels_g == [names[int(v)] for v in graphs[0].node_label]
    assert explanation.pairs[0].differences[0].path.replace("(", "-").replace(")", "-").split("-")[0] in names.values()
    assert "W = " in explanation.report() and "% of W" in explanation.report()


def test_multi_column_labels_decode_as_tuples(fixture_root, cache_dir):
    from mwsp_torch import load_tudataset

    graphs, _ = load_tudataset("Cuneiform", root=fixture_root, cache_dir=cache_dir)
    model = MWSP(d=1, k=0, n_jobs=1).fit(graphs[:4])
    explanation = explain(model, graphs[0], graphs[1])
    rows = graphs[0].node_label.numpy()
    assert explanation.labels_g == ["(" + ",".join(map(str, row)) + ")" for row in rows]
    check_optimal_plan(explanation, model.distances_[0, 1])


def test_plot_writes_a_png(mutag_model, mutag, tmp_path):
    require_extra("networkx", "explain")
    image_io = require_extra("matplotlib.image", "explain")
    graphs, _ = mutag
    explanation = explain(mutag_model, graphs[0], graphs[1], label_names=MUTAG_NAMES)
    path = plot_explanation(explanation, graphs[0], graphs[1], tmp_path / "e.png", dpi=40)
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    image = image_io.imread(path)
    assert image.ndim == 3 and image.shape[0] > 100 and image.shape[1] > 200
    with pytest.raises(ValueError, match="H has 17 nodes, the explanation's H has 13"):
        plot_explanation(explanation, graphs[0], graphs[0], tmp_path / "f.png")


def test_svm_contributions_sum_to_the_decision_function(mutag):
    graphs, y = mutag
    model = MWSP(d=2, k=0, lam=0.5, n_jobs=1).fit(graphs[:60])
    svc = SVC(kernel="precomputed", C=10.0).fit(model.kernel(), y[:60])
    new = model.transform(graphs[60:70])
    decision = svc.decision_function(new)
    for t in range(len(new)):
        terms = svm_contributions(svc, new[t])
        assert terms.contributions.sum() + terms.intercept == pytest.approx(decision[t], rel=1e-12, abs=1e-12)
        assert terms.decision == pytest.approx(decision[t], rel=1e-12, abs=1e-12)
        magnitudes = np.abs(terms.contributions)
        assert np.all(magnitudes[:-1] >= magnitudes[1:])
        assert sorted(terms.indices.tolist()) == sorted(svc.support_.tolist())
        np.testing.assert_array_equal(terms.kernel, new[t, terms.indices])
        np.testing.assert_array_equal(terms.classes, np.where(terms.dual_coef > 0, svc.classes_[1], svc.classes_[0]))
        np.testing.assert_array_equal(terms.classes, y[terms.indices])  # a support vector pulls to its class
    by_graph = explain_prediction(model, svc, graphs[65])
    np.testing.assert_array_equal(by_graph.contributions, svm_contributions(svc, new[5:6]).contributions)


def test_svm_contributions_refuse_what_they_cannot_read(mutag):
    graphs, y = mutag
    model = MWSP(d=1, k=0, n_jobs=1).fit(graphs[:20])
    row = model.transform(graphs[20:21])[0]
    with pytest.raises(ValueError, match="needs a fitted SVC"):
        svm_contributions(SVC(kernel="precomputed"), row)
    with pytest.raises(ValueError, match="precomputed kernel, got kernel='rbf'"):
        svm_contributions(SVC().fit(np.eye(20), y[:20]), row)
    three = np.arange(20) % 3
    with pytest.raises(ValueError, match="binary SVC, this one has 3 classes"):
        svm_contributions(SVC(kernel="precomputed").fit(model.kernel(), three), row)
    svc = SVC(kernel="precomputed").fit(model.kernel(), y[:20])
    with pytest.raises(ValueError, match=r"one value per training graph \(20\), got shape \[19\]"):
        svm_contributions(svc, row[:19])


def test_bad_input_is_refused_clearly(mutag):
    graphs, _ = mutag
    with pytest.raises(ValueError, match="needs a fitted MWSP"):
        explain(MWSP(), graphs[0], graphs[1])
    with pytest.raises(ValueError, match="needs a fitted MWSP"):
        explain(SVC(), graphs[0], graphs[1])
    model = MWSP(d=1, k=0, n_jobs=1).fit(graphs[:5])
    with pytest.raises(ValueError, match="top must be an integer >= 0"):
        explain(model, graphs[0], graphs[1], top=-1)
    negative = make_data(3, [(0, 1), (1, 2)], [0, -1, 0])
    with pytest.raises(ValueError, match=r"^H: node_label has a negative label"):
        explain(model, graphs[0], negative)
    with pytest.raises(ValueError, match="^G: "):
        explain(model, "not a graph", graphs[0])
    model.set_params(d=3)
    with pytest.raises(ValueError, match="d is 3 but the model was fitted with 1"):
        explain(model, graphs[0], graphs[1])


def test_cli_explain_prints_draws_and_writes(fixture_root, cache_dir, tmp_path, capsys, mutag):
    require_extra("matplotlib", "explain")
    require_extra("networkx", "explain")
    graphs, _ = mutag
    png, out = tmp_path / "e.png", tmp_path / "e.json"
    argv = ["explain", "--dataset", "MUTAG", "--root", str(fixture_root), "--cache-dir", str(cache_dir)]
    assert main([*argv, "--graphs", "0", "1", "--d", "2", "--k", "0", "--out", str(png), "--json", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "MUTAG graphs 0 (class 1) and 1 (class 0)" in printed and "scale 0 C-C" in printed
    assert png.read_bytes()[:4] == b"\x89PNG"
    written = json.loads(out.read_text())
    expected = MWSP(d=2, k=0, n_jobs=1).fit(graphs).distances_[0, 1]
    assert written["distance"] == pytest.approx(expected, rel=1e-12)
    assert written["graphs"] == [0, 1] and len(written["plan"]) == graphs[0].num_nodes
    assert main([*argv, "--graphs", "0", "188"]) == 2
    assert "MUTAG has 188 graphs, numbered 0 to 187; 188 is not one of them" in capsys.readouterr().err
    assert main([*argv, "--graphs", "-1", "3"]) == 2
    assert "-1 is not one of them" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main([*argv, "--graphs", "0", "1", "--top", "-2"])
    assert "--top must be >= 0" in capsys.readouterr().err


@pytest.mark.parametrize("mode", ["node", "multiscale"])
def test_attribute_columns_are_named_apart_from_the_paths(mode):
    graphs = random_graphs(4, 11, min_nodes=3, max_nodes=8)
    for i, g in enumerate(graphs):
        g.node_attr = torch.arange(2 * g.num_nodes, dtype=torch.float64).reshape(-1, 2) * (i + 1) % 5
    model = MWSP(d=1, k=0, attributes=mode, beta=0.5, n_jobs=1).fit(graphs)
    explanation = explain(model, graphs[0], graphs[3], top=10)
    check_optimal_plan(explanation, model.distances_[0, 3])
    rows, ptr = model.node_features()
    plain, plain_ptr = MWSP(d=1, k=0, n_jobs=1).fit(graphs).node_features()  # the path columns alone
    attribute_columns = 2 * (2 if mode == "multiscale" else 1)
    assert explanation.pairs
    for pair in explanation.pairs:
        g, h = ptr[0] + pair.nodes_g[0], ptr[3] + pair.nodes_h[0]
        row_g, row_h = rows[g].toarray()[0], rows[h].toarray()[0]
        on_attributes = [diff for diff in pair.differences if diff.scale == -1]
        on_paths = [diff for diff in pair.differences if diff.scale >= 0]
        for diff in on_attributes:  # "attribute j" or "attribute j, mean at distance r": column r * 2 + j
            words = diff.path.replace(",", "").split()
            column = int(words[-1]) * 2 + int(words[1]) if "distance" in diff.path else int(words[1])
            assert column < attribute_columns
            assert (diff.weight_g, diff.weight_h) == (row_g[column], row_h[column])
        squares = sum((diff.weight_g - diff.weight_h) ** 2 for diff in on_attributes)
        assert squares == pytest.approx(((row_g - row_h)[:attribute_columns] ** 2).sum(), rel=1e-12, abs=1e-15)
        # the rest are the label-only rows' paths, decoded as such ("0-1"), not shifted columns
        assert all(diff.scale == 0 and all(p.isdigit() for p in diff.path.split("-")) for diff in on_paths)
        plain_g = plain[plain_ptr[0] + pair.nodes_g[0]].toarray()[0]
        plain_h = plain[plain_ptr[3] + pair.nodes_h[0]].toarray()[0]
        squares = sum((diff.weight_g - diff.weight_h) ** 2 for diff in on_paths)
        assert squares == pytest.approx(((plain_g - plain_h) ** 2).sum(), rel=1e-12, abs=1e-15)
