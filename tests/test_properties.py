"""Hypothesis properties over random small graphs with cycles (so ties between shortest paths)."""

import numpy as np
import ot
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from scipy.spatial.distance import cdist

from mwsp_torch import MWSP
from mwsp_torch.labels import to_graph_set
from mwsp_torch.paths import node_feature_maps
from mwsp_torch.transport import Exact
from mwsp_torch.trees import Vocabulary, tree_ids

from helpers import make_data
from reference import distance_matrix

SETTINGS = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@st.composite
def graphs(draw, min_nodes=1, max_nodes=8):
    n = draw(st.integers(min_nodes, max_nodes))
    possible = [(u, v) for u in range(n) for v in range(u + 1, n)]
    edges = draw(st.lists(st.sampled_from(possible), unique=True, max_size=len(possible))) if possible else []
    labels = draw(st.lists(st.integers(0, 2), min_size=n, max_size=n))
    return n, edges, labels


def as_data(graph):
    n, edges, labels = graph
    return make_data(n, edges, labels)


def renumber(graph, perm):
    n, edges, labels = graph
    new_labels = [0] * n
    for old, new in enumerate(perm):
        new_labels[new] = labels[old]
    return n, [(perm[u], perm[v]) for u, v in edges], new_labels


@SETTINGS
@given(
    st.lists(graphs(), min_size=2, max_size=4), st.integers(0, 3), st.integers(0, 2), st.sampled_from(["split", "all"])
)
# Tied shortest paths with equal representations (opposite corners of a labelled square),
# which random draws can miss: their split weights must add up.
@example(
    [(4, [(0, 1), (1, 2), (2, 3), (3, 0)], [0, 1, 0, 1]), (4, [(0, 1), (1, 2), (2, 3)], [0, 1, 0, 1])], 2, 0, "split"
)
@example(
    [(4, [(0, 1), (1, 2), (2, 3), (3, 0)], [0, 1, 0, 1]), (4, [(0, 1), (1, 2), (2, 3)], [0, 1, 0, 1])], 2, 1, "all"
)
def test_matches_bruteforce_reference(dataset, d, k, paths):
    got = MWSP(d=d, k=k, paths=paths).fit([as_data(g) for g in dataset]).distances_
    expected = distance_matrix(dataset, d, k, paths)
    np.testing.assert_allclose(got, expected, rtol=1e-9, atol=1e-12)


@SETTINGS
@given(st.lists(graphs(), min_size=2, max_size=5), st.integers(0, 3), st.integers(0, 2))
def test_thread_engine_matches_bruteforce_reference(dataset, d, k):
    """The one-pair-per-thread solver (its CPU kernel) against the reference, fit and cross distances."""
    graphs = [as_data(g) for g in dataset]
    model = MWSP(d=d, k=k, solver=Exact(engine="thread")).fit(graphs[1:])
    expected = distance_matrix(dataset, d, k, "split")
    np.testing.assert_allclose(model.distances_, expected[1:, 1:], rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(model.cross_distances(graphs[:1]), expected[:1, 1:], rtol=1e-9, atol=1e-12)


@SETTINGS
@given(
    st.lists(graphs(), min_size=1, max_size=4), st.integers(0, 3), st.integers(0, 2), st.sampled_from(["split", "all"])
)
def test_symmetric_zero_diagonal(dataset, d, k, paths):
    graphs = [as_data(g) for g in dataset]
    model = MWSP(d=d, k=k, paths=paths).fit(graphs)
    w = model.distances_
    assert np.array_equal(w, w.T) and np.all(w >= 0.0)
    # fit solves only upper pairs and writes the diagonal as zeros, so also solve every
    # ordered pair, the diagonal included, as cross distances (new graphs supply the mass).
    cross = model.cross_distances(graphs)
    assert np.all(np.diag(cross) == 0.0)
    np.testing.assert_allclose(cross, cross.T, rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(cross, w, rtol=1e-12, atol=1e-15)


@SETTINGS
@given(
    graphs(min_nodes=2),
    st.randoms(use_true_random=False),
    st.integers(0, 4),
    st.integers(0, 3),
    st.sampled_from(["split", "all"]),
)
def test_renumbering_gives_distance_zero(graph, rnd, d, k, paths):
    perm = list(range(graph[0]))
    rnd.shuffle(perm)
    w = MWSP(d=d, k=k, paths=paths).fit([as_data(graph), as_data(renumber(graph, perm))]).distances_
    assert w[0, 1] == 0.0


@SETTINGS
@given(
    st.lists(graphs(), min_size=3, max_size=5), st.randoms(use_true_random=False), st.integers(0, 3), st.integers(0, 2)
)
def test_dataset_reordering_permutes_matrix(dataset, rnd, d, k):
    order = list(range(len(dataset)))
    rnd.shuffle(order)
    w = MWSP(d=d, k=k).fit([as_data(g) for g in dataset]).distances_
    w_perm = MWSP(d=d, k=k).fit([as_data(dataset[i]) for i in order]).distances_
    # Row IDs follow the order graphs are met in, so the solver sums the same
    # optimal plan in another order: equal up to rounding, not bitwise.
    np.testing.assert_allclose(w_perm, w[np.ix_(order, order)], rtol=1e-12, atol=1e-15)


@SETTINGS
@given(st.lists(graphs(), min_size=2, max_size=4), st.integers(0, 3), st.integers(0, 2))
def test_exact_equals_emd2_on_uncollapsed_rows(dataset, d, k):
    model = MWSP(d=d, k=k).fit([as_data(g) for g in dataset])
    dense = model.features_.toarray()
    ptr = np.cumsum([0] + [g[0] for g in dataset])
    for i in range(len(dataset)):
        for j in range(i + 1, len(dataset)):
            a, b = dense[ptr[i] : ptr[i + 1]], dense[ptr[j] : ptr[j + 1]]
            # cdist takes differences first: ot.dist's |a|^2 + |b|^2 - 2 a.b left 8.5e-9 between
            # identical rows on an H100 host's BLAS (W = 0 exactly), over this 1e-9 test.
            expected = ot.emd2(np.full(len(a), 1 / len(a)), np.full(len(b), 1 / len(b)), cdist(a, b))
            assert abs(model.distances_[i, j] - expected) <= 1e-9 * max(expected, 1e-3)


@SETTINGS
@given(st.lists(graphs(), min_size=2, max_size=4), st.sampled_from([1e-3, 1e-1, 1.0, 10.0]))
def test_kernel_is_exp_of_distances(dataset, lam):
    model = MWSP(d=2, k=1, lam=lam)
    kernel = model.fit_transform([as_data(g) for g in dataset])
    np.testing.assert_array_equal(kernel, np.exp(-lam * model.distances_))
    assert np.all(np.diag(kernel) == 1.0)


def _features_in_chunks(graph_set, d, k, paths, chunk_nodes):
    """Tree IDs and feature maps computed over runs of ``chunk_nodes`` nodes, with the
    graph counts each run reported."""
    done = []
    trees = tree_ids(graph_set, k, Vocabulary(), progress=done.append, chunk_nodes=chunk_nodes)
    features = node_feature_maps(
        graph_set, trees, d, paths, Vocabulary(), progress=done.append, chunk_nodes=chunk_nodes
    )
    return trees, features, done


@SETTINGS
@given(
    st.lists(graphs(), min_size=1, max_size=6),
    st.integers(1, 12),
    st.integers(0, 3),
    st.integers(0, 2),
    st.sampled_from(["split", "all"]),
)
def test_features_do_not_depend_on_chunks(dataset, chunk_nodes, d, k, paths):
    """Runs of whole graphs (the unit of the feature progress bars) give the arrays one run
    gives, bit for bit, and report every graph once per pass."""
    graph_set = to_graph_set([as_data(g) for g in dataset])
    trees, features, done = _features_in_chunks(graph_set, d, k, paths, chunk_nodes)
    whole_trees, whole_features, whole_done = _features_in_chunks(graph_set, d, k, paths, graph_set.num_nodes)
    np.testing.assert_array_equal(trees, whole_trees)
    assert features.shape == whole_features.shape
    np.testing.assert_array_equal(features.indptr, whole_features.indptr)
    np.testing.assert_array_equal(features.indices, whole_features.indices)
    np.testing.assert_array_equal(features.data, whole_features.data)
    assert whole_done == [len(dataset), len(dataset)]
    assert sum(done) == 2 * len(dataset) and min(done) >= 1


@st.composite
def raw_edge_graphs(draw, max_nodes=7):
    """A graph as PyG may hold it: edges in either direction, repeated, and self-loops."""
    n = draw(st.integers(1, max_nodes))
    edges = draw(st.lists(st.tuples(st.integers(0, n - 1), st.integers(0, n - 1)), max_size=3 * n))
    return n, edges


@SETTINGS
@given(st.lists(raw_edge_graphs(), min_size=1, max_size=6), st.sampled_from(["uniform", "degree"]))
def test_adjacency_is_each_graph_symmetrised_without_loops_or_repeats(dataset, labels):
    """The batch's one-pass CSR equals each graph's own neighbour sets, offset by the nodes before it."""
    graph_set = to_graph_set([make_data(n, edges, [0] * n) for n, edges in dataset], labels=labels)
    offset = 0
    for n, edges in dataset:
        neighbours = [set() for _ in range(n)]
        for u, v in edges:
            if u != v:
                neighbours[u].add(v)
                neighbours[v].add(u)
        for u in range(n):
            row = graph_set.indices[graph_set.indptr[offset + u] : graph_set.indptr[offset + u + 1]]
            assert row.tolist() == sorted(offset + v for v in neighbours[u])
            expected_label = len(neighbours[u]) if labels == "degree" else 0
            assert graph_set.labels[offset + u] == expected_label
        offset += n
    assert offset == graph_set.num_nodes == graph_set.indptr.shape[0] - 1


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(-3, 3), st.sampled_from([0.25, 0.5, 1 / 3, 1.0, 2.0])), min_size=0, max_size=40))
def test_insertion_orders_equal_stable_sorts(entries):
    from mwsp_torch.paths import insertion_order, insertion_order_by_pair

    major = np.array([e[0] for e in entries], dtype=np.int64)
    minor = np.array([e[1] for e in entries], dtype=np.float64)
    n = len(entries)
    perm = np.full(n + 3, -7, dtype=np.int64)  # longer than n: the tail must stay untouched
    insertion_order(major, n, perm)
    np.testing.assert_array_equal(perm[:n], np.argsort(major, kind="stable"))
    insertion_order_by_pair(major, minor, n, perm)
    by_minor = np.argsort(minor, kind="stable")
    np.testing.assert_array_equal(perm[:n], by_minor[np.argsort(major[by_minor], kind="stable")])
    np.testing.assert_array_equal(perm[n:], [-7, -7, -7])


def test_tree_ids_ignore_the_numbering_of_siblings():
    """Fixed cases beside the random ones: the same rooted tree with its children (scale 1)
    or grandchildren (scale 2) met in the other index order gets the same ID, and W = 0."""
    star = [(0, 1), (0, 2)]
    deep = [(0, 1), (0, 2), (1, 3), (2, 4)]
    graphs = [
        make_data(3, star, [0, 1, 2]),
        make_data(3, star, [0, 2, 1]),
        make_data(5, deep, [0, 7, 8, 5, 6]),  # 0 -> (7 -> 5), (8 -> 6)
        make_data(5, deep, [0, 8, 7, 6, 5]),  # the same tree, the subtrees numbered the other way
    ]
    trees = tree_ids(to_graph_set(graphs), 2, Vocabulary())
    roots = [0, 3, 6, 11]
    assert trees[roots[0], 1] == trees[roots[1], 1]
    assert trees[roots[2], 2] == trees[roots[3], 2]
    assert trees[roots[0], 1] != trees[roots[2], 1]  # IDs do tell different trees apart
    w = MWSP(d=2, k=2, n_jobs=1).fit(graphs).distances_
    assert w[0, 1] == 0.0 and w[2, 3] == 0.0 and w[0, 2] > 0
