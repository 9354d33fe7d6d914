"""Edge labels and continuous node attributes (docs/definition.md, section 7): the brute-force
reference, renumbering, defaults off, the loader, and bad input."""

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mwsp_torch import MWSP, load_tudataset

from helpers import make_data
from reference import distance_matrix

SETTINGS = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@st.composite
def edge_labelled_graphs(draw, min_nodes=1, max_nodes=7):
    n = draw(st.integers(min_nodes, max_nodes))
    possible = [(u, v) for u in range(n) for v in range(u + 1, n)]
    edges = draw(st.lists(st.sampled_from(possible), unique=True, max_size=len(possible))) if possible else []
    labels = draw(st.lists(st.integers(0, 1), min_size=n, max_size=n))
    edge_labels = draw(st.lists(st.integers(0, 2), min_size=len(edges), max_size=len(edges)))
    return n, edges, labels, edge_labels


def as_data(graph, attributes=None, one_hot_edges=False):
    n, edges, labels, edge_labels = graph
    data = make_data(n, edges, labels)
    labels_t = torch.tensor(edge_labels, dtype=torch.long)
    if one_hot_edges:  # as TUDataset stores them: one-hot rows
        data.edge_attr = torch.nn.functional.one_hot(labels_t, 3).float()
    else:
        data.edge_label = labels_t
    if attributes is not None:
        data.node_attr = torch.tensor(attributes, dtype=torch.float64)
    return data


def renumber(graph, perm, attributes=None):
    n, edges, labels, edge_labels = graph
    new_labels = [0] * n
    for old, new in enumerate(perm):
        new_labels[new] = labels[old]
    moved = None if attributes is None else np.asarray(attributes)[np.argsort(perm)]
    # Each edge listed the other way round too: the direction must not matter.
    return (n, [(perm[v], perm[u]) for u, v in edges], new_labels, edge_labels), moved


def attributes_for(draw, graph, width):
    values = st.floats(-3, 3, allow_nan=False).map(lambda x: round(x, 2))
    return [[draw(values) for _ in range(width)] for _ in range(graph[0])]


@SETTINGS
@given(
    st.lists(edge_labelled_graphs(), min_size=2, max_size=4),
    st.integers(0, 3),
    st.integers(0, 2),
    st.sampled_from(["split", "all"]),
    st.booleans(),
)
def test_edge_labels_match_bruteforce_reference(dataset, d, k, paths, one_hot):
    got = MWSP(d=d, k=k, paths=paths, edge_labels=True).fit([as_data(g, one_hot_edges=one_hot) for g in dataset])
    np.testing.assert_allclose(got.distances_, distance_matrix(dataset, d, k, paths), rtol=1e-9, atol=1e-12)


def test_edge_labels_tell_apart_what_node_labels_cannot():
    """Two paths a-b-c with the same node labels, the edges labelled (0, 1) and (1, 1): W > 0 with
    edge labels, 0 without; the mirror image of the first (edges reversed, labels (1, 0)) is W = 0."""
    graphs = [as_data(g) for g in ((3, [(0, 1), (1, 2)], [0, 0, 0], [0, 1]), (3, [(0, 1), (1, 2)], [0, 0, 0], [1, 1]))]
    graphs.append(as_data((3, [(2, 1), (1, 0)], [0, 0, 0], [0, 1])))
    assert MWSP(d=2, k=1).fit(graphs).distances_.max() == 0.0
    w = MWSP(d=2, k=1, edge_labels=True).fit(graphs).distances_
    assert w[0, 1] > 0 and w[0, 2] == 0.0


@SETTINGS
@given(
    edge_labelled_graphs(min_nodes=2),
    st.randoms(use_true_random=False),
    st.integers(0, 4),
    st.integers(0, 3),
    st.sampled_from(["split", "all"]),
)
def test_edge_labels_renumbering_gives_distance_zero(graph, rnd, d, k, paths):
    perm = list(range(graph[0]))
    rnd.shuffle(perm)
    moved, _ = renumber(graph, perm)
    w = MWSP(d=d, k=k, paths=paths, edge_labels=True).fit([as_data(graph), as_data(moved)]).distances_
    assert w[0, 1] == 0.0


@st.composite
def attributed_dataset(draw):
    dataset = draw(st.lists(edge_labelled_graphs(), min_size=2, max_size=4))
    width = draw(st.integers(1, 3))
    return dataset, [attributes_for(draw, g, width) for g in dataset]


@SETTINGS
@given(
    attributed_dataset(),
    st.integers(0, 3),
    st.integers(0, 1),
    st.sampled_from(["node", "multiscale"]),
    st.sampled_from([0.5, 1.0, 3.0]),
)
def test_attributes_match_bruteforce_reference(data, d, k, mode, beta):
    dataset, attributes = data
    graphs = [as_data(g, a) for g, a in zip(dataset, attributes, strict=True)]
    got = MWSP(d=d, k=k, attributes=mode, beta=beta).fit(graphs).distances_
    plain = [g[:3] for g in dataset]
    expected = distance_matrix(plain, d, k, "split", attributes=attributes, mode=mode, beta=beta)
    np.testing.assert_allclose(got, expected, rtol=1e-9, atol=1e-12)


@SETTINGS
@given(
    st.data(),
    edge_labelled_graphs(min_nodes=2),
    st.randoms(use_true_random=False),
    st.integers(0, 3),
    st.sampled_from(["node", "multiscale"]),
)
def test_attributes_renumbering_gives_distance_zero(data, graph, rnd, d, mode):
    attributes = attributes_for(data.draw, graph, 2)
    perm = list(range(graph[0]))
    rnd.shuffle(perm)
    moved, moved_attributes = renumber(graph, perm, attributes)
    model = MWSP(d=d, k=1, attributes=mode, beta=2.0, edge_labels=True)
    w = model.fit([as_data(graph, attributes), as_data(moved, moved_attributes)]).distances_
    assert w[0, 1] == 0.0


def _dataset():
    rng = np.random.default_rng(0)
    graphs = []
    for n in (5, 6, 7, 5):
        edges = [(i, (i + 1) % n) for i in range(n)]
        graph = (n, edges, [int(v) for v in rng.integers(0, 2, n)], [int(v) for v in rng.integers(0, 2, n)])
        graphs.append(as_data(graph, rng.normal(size=(n, 3)).round(3)))
    return graphs


def test_defaults_off_ignore_edge_labels_and_attributes():
    """With the extensions off W is bit for bit the label-only W, whatever the graphs carry."""
    graphs = _dataset()
    bare = [make_data(g.num_nodes, g.edge_index.t().tolist(), g.node_label.tolist()) for g in graphs]
    assert np.array_equal(MWSP(d=2, k=1).fit(graphs).distances_, MWSP(d=2, k=1).fit(bare).distances_)


@pytest.mark.parametrize("mode", ["node", "multiscale"])
def test_rows_are_the_attribute_columns_then_the_label_only_rows(mode):
    """``beta * a(v)`` in columns ``0 .. w - 1`` (``w``: 3 attributes, times d + 1 for
    multiscale), the label-only ``phi(v)`` right after them, column for column."""
    graphs = _dataset()
    rows = MWSP(d=2, k=1, attributes=mode, beta=0.7).fit(graphs).features_.toarray()
    plain = MWSP(d=2, k=1).fit(graphs).features_.toarray()
    width = 3 * (3 if mode == "multiscale" else 1)
    assert rows.shape == (plain.shape[0], width + plain.shape[1])
    np.testing.assert_array_equal(rows[:, width:], plain)
    stacked = np.concatenate([g.node_attr.numpy() for g in graphs])
    standard = (stacked - stacked.mean(0)) / stacked.std(0)
    np.testing.assert_allclose(rows[:, :3], 0.7 * standard, rtol=1e-12, atol=1e-15)


def test_a_constant_attribute_column_is_only_centred():
    """A column equal to 0.1 on every training node is centred to exact zeros (not divided by
    its rounded deviation): a new graph's 0.2 then moves its rows by beta * 0.1."""
    graphs = _dataset()
    for g in graphs:
        g.node_attr = torch.full((g.num_nodes, 1), 0.1, dtype=torch.float64)
    model = MWSP(d=1, k=0, attributes="node", beta=2.0).fit(graphs)
    assert not model.features_[:, 0].toarray().any()
    shifted = graphs[0].clone()
    shifted.node_attr = torch.full((shifted.num_nodes, 1), 0.2, dtype=torch.float64)
    assert model.cross_distances([shifted])[0, 0] == pytest.approx(2.0 * 0.1, rel=1e-12)


def test_transform_reads_new_graphs_with_the_fitted_standardisation():
    graphs = _dataset()
    model = MWSP(d=2, k=1, attributes="multiscale", beta=0.7, edge_labels=True).fit(graphs)
    np.testing.assert_allclose(model.cross_distances(graphs), model.distances_, rtol=1e-12, atol=1e-14)
    shifted = MWSP(d=2, k=1, attributes="multiscale", beta=0.7, edge_labels=True).fit(graphs[:2])
    # the standardisation of graphs[:2] is not that of all four: the cross distances use the first
    assert not np.allclose(shifted.cross_distances(graphs[2:]), model.distances_[2:, :2])
    rows, ptr = model.node_features()
    assert rows.shape[0] == ptr[-1] == sum(g.num_nodes for g in graphs)
    new_rows, new_ptr = model.node_features(graphs[:1])
    np.testing.assert_array_equal(new_rows.toarray(), rows[: ptr[1]].toarray()[:, : new_rows.shape[1]])


def test_new_graphs_with_another_attribute_width_are_refused():
    model = MWSP(d=1, attributes="node").fit(_dataset())  # 3 attributes a node
    narrow = _dataset()[0].clone()
    narrow.node_attr = narrow.node_attr[:, :2]
    with pytest.raises(ValueError, match="the graphs have 2 attribute columns, the fitted graphs had 3"):
        model.transform([narrow])


def test_changed_extension_after_fit_is_refused():
    model = MWSP(d=1, edge_labels=True).fit(_dataset())
    model.set_params(edge_labels=False)
    with pytest.raises(ValueError, match="edge_labels is False but the model was fitted with True"):
        model.transform(_dataset())
    model = MWSP(d=1, attributes="node", beta=1.0).fit(_dataset())
    model.set_params(beta=2.0)
    with pytest.raises(ValueError, match="beta is 2.0 but the model was fitted with 1.0"):
        model.transform(_dataset())


def _edge_case(edge_index, n=3, **fields):
    data = make_data(n, [], [0] * n)
    data.edge_index = torch.tensor(edge_index, dtype=torch.long)
    for name, value in fields.items():
        setattr(data, name, value)
    return data


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({}, "graph 1: has 2 edges but no edge labels"),
        ({"edge_label": torch.tensor([1])}, "graph 1: edge_label has 1 rows for 2 edges"),
        ({"edge_label": torch.tensor([1, -1])}, "graph 1: edge_label has a negative edge label"),
        ({"edge_attr": torch.tensor([[0.5], [1.0]])}, "graph 1: edge_attr has values that are not whole numbers"),
        ({"edge_attr": torch.tensor([[np.nan], [1.0]])}, "graph 1: edge_attr has values that are not whole numbers"),
        ({"edge_label": torch.tensor([0, 1])}, r"graph 1: edge 0-1 is listed with two edge labels \(0 and 1\)"),
        ({"edge_label": torch.tensor([[0, 1], [0, 1]])}, "graph 1: edge labels have 2 columns"),
        ({"edge_label": torch.tensor([2.0, 2.0])}, "graph 1: edge_label must be an integer tensor, got float32"),
    ],
)
def test_bad_edge_labels_name_the_graph(fields, message):
    good = _edge_case([[0, 1], [1, 0]], edge_label=torch.tensor([2, 2]))
    edge_index = [[0, 1], [1, 0]]  # one edge, both directions
    bad = _edge_case(edge_index, **fields)
    with pytest.raises(ValueError, match=message):
        MWSP(d=1, edge_labels=True).fit([good, bad])


@pytest.mark.parametrize(
    ("attribute", "message"),
    [
        (torch.tensor([[0.0], [np.nan], [1.0]]), "graph 1: node 1's attributes \\(node_attr\\) are NaN or infinite"),
        (torch.tensor([[0.0], [np.inf], [1.0]]), "graph 1: node 1's attributes"),
        (torch.tensor([[0.0, 1.0], [1.0, 1.0], [1.0, 2.0]]), "graph 1: 2 attribute columns"),
        (torch.tensor([[0.0], [1.0]]), "graph 1: node_attr must have one row per node \\(3\\)"),
        (None, "graph 1: has no node attributes"),
    ],
)
def test_bad_attributes_name_the_graph(attribute, message):
    good = make_data(3, [(0, 1)], [0, 0, 0])
    good.node_attr = torch.tensor([[0.0], [1.0], [2.0]])
    bad = make_data(3, [(0, 1)], [0, 0, 0])
    if attribute is not None:
        bad.node_attr = attribute
    with pytest.raises(ValueError, match=message):
        MWSP(d=1, attributes="node").fit([good, bad])


def test_bad_extension_parameters():
    graphs = _dataset()
    for params, message in (
        ({"attributes": "dense"}, "attributes must be None or one of"),
        ({"attributes": "node", "beta": 0.0}, "beta must be > 0"),
        ({"edge_labels": "yes"}, "edge_labels must be True or False"),
    ):
        with pytest.raises(ValueError, match=message):
            MWSP(**params).fit(graphs)


def test_x_as_attributes_only_when_it_does_not_hold_the_labels():
    """x beside node_label is read as attributes; a one-hot x, or x holding the labels, is not."""
    data = make_data(3, [(0, 1), (1, 2)], [0, 1, 0])
    data.x = torch.tensor([[0.5], [1.5], [2.5]])
    other = make_data(3, [(0, 1), (1, 2)], [0, 1, 0])
    other.node_attr = torch.tensor([[0.5], [1.5], [2.5]])
    a = MWSP(d=1, attributes="node").fit([data, data]).features_.toarray()
    b = MWSP(d=1, attributes="node").fit([other, other]).features_.toarray()
    np.testing.assert_array_equal(a, b)
    one_hot = make_data(3, [(0, 1)], [0, 1, 0])
    one_hot.x = torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 0.0]])
    with pytest.raises(ValueError, match="graph 0: x is one-hot"):
        MWSP(d=1, attributes="node").fit([one_hot, one_hot])


def test_loader_attaches_edge_labels_and_attributes(fixture_root, tmp_path):
    graphs, _ = load_tudataset("MUTAG", root=fixture_root, cache_dir=tmp_path)
    # PyG's one-hot edge_attr holds MUTAG's edge labels alone: the two readings agree
    for data in graphs:
        assert torch.equal(data.edge_label, data.edge_attr.argmax(1))
    with_label = MWSP(d=2, k=1, edge_labels=True).fit(graphs[:30]).distances_
    for data in graphs[:30]:
        del data.edge_label
    from_attr = MWSP(d=2, k=1, edge_labels=True).fit(graphs[:30]).distances_
    np.testing.assert_array_equal(with_label, from_attr)
    assert not np.array_equal(with_label, MWSP(d=2, k=1).fit(graphs[:30]).distances_)
    cuneiform, _ = load_tudataset("Cuneiform", root=fixture_root, cache_dir=tmp_path)
    raw = np.loadtxt(fixture_root / "Cuneiform" / "raw" / "Cuneiform_node_attributes.txt", delimiter=",")
    assert torch.equal(torch.cat([g.node_attr for g in cuneiform]), torch.from_numpy(raw))
    w = MWSP(d=1, attributes="node", edge_labels=True).fit(cuneiform[:10]).distances_
    assert np.all(w[np.triu_indices(10, 1)] > 0)


def test_cache_keys_keep_settings_apart(fixture_root, tmp_path):
    """Label-only, edge-labelled and attributed W of one dataset are three cache entries, each
    served back as computed; the label-only key is the one it was before the extensions."""
    from mwsp_torch.cache import cached_distances

    graphs, _ = load_tudataset("MUTAG", root=fixture_root, cache_dir=tmp_path)
    graphs = graphs[:12]
    for data, attribute in zip(graphs, np.random.default_rng(0).normal(size=(12, 30, 2)), strict=True):
        data.node_attr = torch.from_numpy(attribute[: data.num_nodes])
    plain, _ = cached_distances(MWSP(d=1, k=0), graphs, "M12", cache_dir=tmp_path)
    edges, _ = cached_distances(MWSP(d=1, k=0, edge_labels=True), graphs, "M12", cache_dir=tmp_path)
    attrs, _ = cached_distances(MWSP(d=1, k=0, attributes="node", beta=0.5), graphs, "M12", cache_dir=tmp_path)
    attrs2, _ = cached_distances(MWSP(d=1, k=0, attributes="node", beta=2.0), graphs, "M12", cache_dir=tmp_path)
    assert len({plain.tobytes(), edges.tobytes(), attrs.tobytes(), attrs2.tobytes()}) == 4
    other = [data.clone() for data in graphs]
    other[0].node_attr = other[0].node_attr + 1.0  # other attributes: another key, not the cached W
    _, timings = cached_distances(MWSP(d=1, k=0, attributes="node", beta=0.5), other, "M12", cache_dir=tmp_path)
    assert not timings["cached"]
    again, timings = cached_distances(MWSP(d=1, k=0, attributes="node", beta=0.5), graphs, "M12", cache_dir=tmp_path)
    assert timings["cached"] and np.array_equal(again, attrs)
    files = sorted(p.name for p in (tmp_path / "distances").iterdir())
    assert len(files) == 5 and sum("-edges-" in f for f in files) == 1 and sum("-node" in f for f in files) == 3
    np.testing.assert_array_equal(attrs, MWSP(d=1, k=0, attributes="node", beta=0.5).fit(graphs).distances_)


def test_cli_extensions(fixture_root, tmp_path, capsys):
    from mwsp_torch.cli import main

    base = ["--dataset", "Cuneiform", "--root", str(fixture_root), "--cache-dir", str(tmp_path), "--quiet"]
    out = tmp_path / "w.npy"
    assert main(["distances", *base, "--d", "1", "--edge-labels", "--attributes", "node", "--beta", "0.5",
                 "--out", str(out)]) == 0  # fmt: skip
    graphs, _ = load_tudataset("Cuneiform", root=fixture_root, cache_dir=tmp_path)
    expected = MWSP(d=1, edge_labels=True, attributes="node", beta=0.5).fit(graphs).distances_
    np.testing.assert_array_equal(np.load(out), expected)
    with pytest.raises(SystemExit):
        main(["distances", *base, "--beta", "0.5", "--out", str(out)])  # --beta without --attributes
    assert "--beta is read only with --attributes" in capsys.readouterr().err


def test_nested_protocol_selects_beta_inside_the_folds():
    graphs = _dataset() * 5
    y = np.array([0, 1, 0, 1] * 5)
    ws = {(1, 0, beta): MWSP(d=1, attributes="node", beta=beta).fit(graphs).distances_ for beta in (0.5, 2.0)}
    from mwsp_torch import nested_protocol

    result = nested_protocol(ws, y, seeds=(0,), n_outer=2, n_inner=2, lams=(1.0,), Cs=(1.0,), n_jobs=1)
    assert result["grid"]["beta"] == [0.5, 2.0]
    assert {s["beta"] for s in result["selected"]} <= {0.5, 2.0}
    with pytest.raises(ValueError, match="all be \\(d, k\\) or all \\(d, k, beta\\)"):
        nested_protocol({(1, 0): ws[(1, 0, 0.5)], **ws}, y, seeds=(0,), n_outer=2, n_inner=2)
    with pytest.raises(ValueError, match="keys must be \\(d, k\\) pairs"):
        nested_protocol({(1, 0, 0.0): ws[(1, 0, 0.5)]}, y, seeds=(0,), n_outer=2, n_inner=2)
