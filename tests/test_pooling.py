"""WassersteinPooling and the dense exact transport under it: W equal to POT's full network
simplex, gradients equal to autograd through ``ot.dist`` + ``ot.emd2`` and to finite
differences, finite gradients at ties and zero distances, bad input refused by name."""

import copy

import numpy as np
import ot
import pytest
import torch
from scipy.spatial.distance import cdist

from mwsp_torch.nn import WassersteinPooling
from mwsp_torch.transport.dense import dense_exact_transport

from helpers import DEVICES

#: Graph sizes of the test batches: single nodes, and one graph large enough (with the
#: template, over 63 points) for the solver's thread-based basis tree rather than bit masks.
SIZES = (1, 2, 5, 9, 17, 30, 70)


def _batch(sizes, width, seed, dtype=torch.float64):
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(sum(sizes), width, generator=generator, dtype=dtype)
    batch = torch.repeat_interleave(torch.arange(len(sizes)), torch.tensor(sizes))
    return x, batch


def _pool(width, num_templates, size, cost, learn, seed, dtype=torch.float64):
    torch.manual_seed(seed)
    pool = WassersteinPooling(width, num_templates, size, cost=cost, learn_template_weights=learn).to(dtype)
    if learn:
        with torch.no_grad():
            pool.template_logits.normal_()
    return pool


def _pot_reference(pool, x, sizes, node_weight, num_iter_max=100_000, backend_dist=True):
    """W of every (graph, template) by ``ot.emd2``, on fresh leaves; returns the values and the leaves."""
    leaves = {"x": x.detach().clone().requires_grad_(), "templates": pool.templates.detach().clone().requires_grad_()}
    if pool.template_logits is not None:
        leaves["template_logits"] = pool.template_logits.detach().clone().requires_grad_()
    if node_weight is not None:
        leaves["node_weight"] = node_weight.detach().clone().requires_grad_()
    ptr = np.concatenate([[0], np.cumsum(sizes)])
    rows = []
    for g, n in enumerate(sizes):
        nodes = leaves["x"][ptr[g] : ptr[g + 1]]
        if node_weight is None:
            a = torch.full((n,), 1.0 / n, dtype=torch.float64)
        else:
            a = leaves["node_weight"][ptr[g] : ptr[g + 1]]
            a = a / a.sum()
        row = []
        for t in range(pool.num_templates):
            points = leaves["templates"][t]
            if "template_logits" in leaves:
                b = torch.softmax(leaves["template_logits"], dim=1)[t]
            else:
                b = torch.full((pool.template_size,), 1.0 / pool.template_size, dtype=torch.float64)
            if backend_dist:
                costs = ot.dist(nodes, points, metric=pool.cost)
            else:  # differences first (scipy), for values to 1e-9
                costs = torch.from_numpy(cdist(nodes.detach().numpy(), points.detach().numpy(), pool.cost))
            row.append(ot.emd2(a, b, costs, numItermax=num_iter_max))
        rows.append(torch.stack(row))
    return torch.stack(rows), leaves


CASES = [
    (cost, learn, weighted)
    for cost in ("euclidean", "sqeuclidean")
    for learn in (False, True)
    for weighted in (False, True)
]


@pytest.mark.parametrize(("cost", "learn", "weighted"), CASES)
def test_values_equal_pot_network_simplex(cost, learn, weighted):
    for seed in range(3):
        x, batch = _batch(SIZES, 8, seed)
        pool = _pool(8, 4, 11, cost, learn, seed)
        weight = torch.rand(len(x), dtype=torch.float64) + 0.05 if weighted else None
        got = pool(x, batch, weight).detach()
        reference, _ = _pot_reference(pool, x, SIZES, weight, backend_dist=False)
        torch.testing.assert_close(got, reference.detach(), rtol=1e-9, atol=1e-12)
        assert got.min() > 0


@pytest.mark.parametrize("cost", ["euclidean", "sqeuclidean"])
def test_values_equal_pot_far_from_the_origin(cost):
    # Nodes and template points nearly coincident, far from the origin: a Gram product
    # alone would lose most digits of their distances to cancellation.
    x, batch = _batch((6, 9), 5, 12)
    pool = _pool(5, 2, 4, cost, False, 12)
    with torch.no_grad():
        pool.templates.mul_(1e-3).add_(1e3)
    x = 1e3 + 1e-3 * x
    reference, _ = _pot_reference(pool, x, (6, 9), None, backend_dist=False)
    torch.testing.assert_close(pool(x, batch).detach(), reference.detach(), rtol=1e-9, atol=0.0)


@pytest.mark.parametrize(("cost", "learn", "weighted"), CASES)
def test_gradients_equal_autograd_through_pot(cost, learn, weighted):
    sizes = SIZES[:-1]
    x, batch = _batch(sizes, 6, 10)
    pool = _pool(6, 3, 5, cost, learn, 10)
    weight = (torch.rand(len(x), dtype=torch.float64) + 0.05) if weighted else None
    x = x.requires_grad_()
    if weight is not None:
        weight.requires_grad_()
    out = pool(x, batch, weight)
    upstream = torch.randn(out.shape, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    names = ["x", "templates"] + (["template_logits"] if learn else []) + (["node_weight"] if weighted else [])
    ours = torch.autograd.grad((out * upstream).sum(), [_input(pool, x, weight, n) for n in names])
    ours = dict(zip(names, ours, strict=True))
    reference, leaves = _pot_reference(pool, x, sizes, weight)
    torch.testing.assert_close(out.detach(), reference.detach(), rtol=1e-9, atol=1e-12)
    theirs = torch.autograd.grad((reference * upstream).sum(), [leaves[n] for n in names])
    theirs = dict(zip(names, theirs, strict=True))
    for name in names:
        torch.testing.assert_close(ours[name], theirs[name], rtol=1e-6, atol=1e-6, msg=name)
        assert ours[name].abs().max() > 0, name


def _input(pool, x, weight, name):
    return {"x": x, "node_weight": weight, "templates": pool.templates, "template_logits": pool.template_logits}[name]


@pytest.mark.parametrize("cost", ["euclidean", "sqeuclidean"])
def test_gradcheck(cost):
    # Generic random inputs: the optimal plan and the duals are unique there, so W is
    # differentiable and finite differences apply. The parameters are inputs too
    # (torch.func.functional_call), through the module's normalisation and softmax.
    sizes = (3, 1, 6)
    x, batch = _batch(sizes, 4, 3)
    pool = _pool(4, 2, 3, cost, True, 3)
    weight = torch.rand(len(x), dtype=torch.float64, generator=torch.Generator().manual_seed(2)) + 0.2

    def function(x, weight, templates, logits):
        parameters = {"templates": templates, "template_logits": logits}
        return torch.func.functional_call(pool, parameters, (x, batch, weight))

    inputs = (x.requires_grad_(), weight.requires_grad_(), pool.templates.detach().clone().requires_grad_(),
              pool.template_logits.detach().clone().requires_grad_())  # fmt: skip
    assert torch.autograd.gradcheck(function, inputs, eps=1e-6, atol=1e-6, rtol=1e-5)


def test_gradcheck_through_the_module():
    # The module's own path (its normalisation and softmax), parameters perturbed in place.
    sizes = (4, 2)
    x, batch = _batch(sizes, 3, 5)
    pool = _pool(3, 2, 3, "euclidean", True, 5)
    assert torch.autograd.gradcheck(lambda x: pool(x, batch), (x.requires_grad_(),), eps=1e-6, atol=1e-6)


@pytest.mark.parametrize("cost", ["euclidean", "sqeuclidean"])
def test_ties_and_zero_distances_give_finite_gradients(cost):
    pool = WassersteinPooling(3, 2, 4, cost=cost, learn_template_weights=True).double()
    points = pool.templates.detach()[0]
    # Graph 0 is template 0 itself (W = 0, every used cost 0); graph 1 repeats one node
    # (tied plans); graph 2 sits on one template point (zero distances, one-point support).
    x = torch.cat([points, points[:1].repeat(3, 1), points[2:3].repeat(2, 1)]).clone().requires_grad_()
    batch = torch.tensor([0, 0, 0, 0, 1, 1, 1, 2, 2])
    out = pool(x, batch)
    assert out[0, 0].abs() < 1e-12
    out.sum().backward()
    for grad in (x.grad, pool.templates.grad, pool.template_logits.grad):
        assert grad is not None and torch.isfinite(grad).all()
    if cost == "euclidean":
        # POT's own Euclidean cost has no gradient at coincident points; ours is 0 there.
        a = torch.full((4,), 0.25, dtype=torch.float64)
        leaf = points.clone().requires_grad_()
        ot.emd2(a, a, ot.dist(leaf, points, metric="euclidean")).backward()
        assert not torch.isfinite(leaf.grad).all()


def test_float32_follows_float64():
    x, batch = _batch(SIZES, 8, 4)
    pool = _pool(8, 3, 6, "euclidean", True, 4)
    pool32 = copy.deepcopy(pool).float()
    x64 = x.clone().requires_grad_()
    x32 = x.float().requires_grad_()
    out64 = pool(x64, batch)
    out32 = pool32(x32, batch)
    assert out32.dtype == torch.float32
    torch.testing.assert_close(out32.double(), out64.detach(), rtol=1e-5, atol=1e-5)
    out64.sum().backward()
    out32.sum().backward()
    assert x32.grad.dtype == torch.float32 and pool32.templates.grad.dtype == torch.float32
    torch.testing.assert_close(x32.grad.double(), x64.grad, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(pool32.template_logits.grad.double(), pool.template_logits.grad, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("device", DEVICES)
def test_device_and_threads(device):
    x, batch = _batch(SIZES, 5, 6)
    pool = _pool(5, 4, 7, "sqeuclidean", True, 6)
    expected = pool(x, batch).detach()
    pool.n_jobs = 1
    assert torch.equal(pool(x, batch).detach(), expected)  # threads change nothing, bit for bit
    pool = pool.to(device)
    x = x.to(device).requires_grad_()
    out = pool(x, batch.to(device))
    assert out.device == x.device
    out.sum().backward()
    assert x.grad.device == x.device and pool.templates.grad.device == x.device
    torch.testing.assert_close(out.detach().cpu(), expected)


def test_graph_order_and_node_order():
    sizes = (4, 7, 3)
    x, batch = _batch(sizes, 5, 7)
    pool = _pool(5, 3, 4, "euclidean", False, 7)
    out = pool(x, batch).detach()
    # Graphs reversed, and the nodes of each permuted: the rows reverse, nothing else.
    ptr = np.concatenate([[0], np.cumsum(sizes)])
    order = np.concatenate([ptr[g] + np.random.default_rng(g).permutation(sizes[g]) for g in (2, 1, 0)])
    flipped = pool(x[order], torch.repeat_interleave(torch.arange(3), torch.tensor(sizes[::-1]))).detach()
    torch.testing.assert_close(flipped, out.flip(0), rtol=1e-12, atol=1e-14)


def test_node_weights_zero_and_uniform():
    x, batch = _batch((5, 3), 4, 8)
    pool = _pool(4, 2, 3, "euclidean", False, 8)
    # Uniform weights given are uniform weights; a zero weight removes its node.
    torch.testing.assert_close(pool(x, batch, torch.full((8,), 2.5, dtype=torch.float64)), pool(x, batch))
    weight = torch.tensor([1.0, 0.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0], dtype=torch.float64, requires_grad=True)
    keep = torch.tensor([0, 2, 3, 4, 5, 6, 7])
    out = pool(x, batch, weight)
    torch.testing.assert_close(out, pool(x[keep], batch[keep]))
    out.sum().backward()
    assert torch.isfinite(weight.grad).all()


BAD_INPUTS = [
    ("empty", lambda x, b: (x[:0], b[:0], None), "graph 0 has no nodes"),
    ("width", lambda x, b: (x[:, :3], b, None), "x has 3 features a node, the templates 4"),
    (
        "nan",
        lambda x, b: (x.index_fill(0, torch.tensor([5]), float("nan")), b, None),
        "graph 1 has a non-finite feature",
    ),
    (
        "inf",
        lambda x, b: (x.index_fill(0, torch.tensor([0]), float("inf")), b, None),
        "graph 0 has a non-finite feature",
    ),
    ("negative", lambda x, b: (x, b, -torch.ones(len(x), dtype=x.dtype)), "graph 0 has node weight -1.0"),
    ("massless", lambda x, b: (x, b, (b != 1).to(x.dtype)), "graph 1's node weights sum to 0"),
    ("unsorted", lambda x, b: (x, b[[0, 3, 1, 2, 4, 5, 6]], None), "batch is not sorted .node 2 of graph 0"),
    ("gap", lambda x, b: (x, torch.where(b == 1, 2, b), None), "graph 1 has no nodes"),
    ("late start", lambda x, b: (x, b + 1, None), "graph 0 has no nodes"),
    ("batch length", lambda x, b: (x, b[:-1], None), "batch must be"),
]


@pytest.mark.parametrize(("name", "make", "message"), BAD_INPUTS, ids=[case[0] for case in BAD_INPUTS])
def test_bad_input_refused_by_name(name, make, message):
    x, batch = _batch((3, 4), 4, 9)
    pool = _pool(4, 2, 3, "euclidean", False, 9)
    x, batch, weight = make(x, batch)
    with pytest.raises(ValueError, match=message):
        pool(x, batch, weight)


def test_bad_parameters_refused():
    with pytest.raises(ValueError, match="cost="):
        WassersteinPooling(4, 2, 3, cost="cosine")
    with pytest.raises(ValueError, match="template_size"):
        WassersteinPooling(4, 2, 0)
    pool = WassersteinPooling(4, 2, 3)
    with torch.no_grad():
        pool.templates[1, 0, 0] = float("nan")
    with pytest.raises(ValueError, match="templates hold a non-finite"):
        pool(torch.zeros(3, 4))
    assert "num_templates=2" in repr(pool)


def test_dense_transport_plans_and_duals():
    rng = np.random.default_rng(11)
    row_ptr = np.array([0, 4, 9, 10])
    col_ptr = np.array([0, 3, 8])
    costs = rng.random((10, 8))
    pairs = np.array([[0, 0], [1, 1], [2, 0], [0, 1], [1, 0]])
    weights = rng.random(8)
    weights[4] = 0.0  # a column of no mass: left out of the solve, given a feasible dual
    out = dense_exact_transport(costs, row_ptr, col_ptr, pairs, col_weights=weights, n_jobs=1)
    for k, (i, j) in enumerate(pairs):
        rows, cols = slice(row_ptr[i], row_ptr[i + 1]), slice(col_ptr[j], col_ptr[j + 1])
        a = np.full(row_ptr[i + 1] - row_ptr[i], 1.0 / (row_ptr[i + 1] - row_ptr[i]))
        b = weights[cols] / weights[cols].sum()
        M = costs[rows, cols]
        assert out.values[k] == pytest.approx(ot.emd2(a, b, M), rel=1e-12)
        plan = np.zeros_like(M)
        mine = out.plan_pair == k
        assert mine.sum() <= len(a) + len(b) - 1
        np.add.at(plan, (out.plan_row[mine] - rows.start, out.plan_col[mine] - cols.start), out.plan_mass[mine])
        np.testing.assert_allclose(plan.sum(1), a, atol=1e-14)
        np.testing.assert_allclose(plan.sum(0), b, atol=1e-14)
        u = out.row_duals[out.row_offsets[k] : out.row_offsets[k + 1]]
        v = out.col_duals[out.col_offsets[k] : out.col_offsets[k + 1]]
        assert abs(u.mean()) < 1e-14
        assert (M - u[:, None] - v[None, :]).min() > -1e-12  # feasible, the massless column too
        assert a @ u + b @ v == pytest.approx(out.values[k], rel=1e-12)


def test_dense_transport_refuses_bad_input():
    costs = np.ones((3, 2))
    ptr_r, ptr_c, pairs = np.array([0, 3]), np.array([0, 2]), np.array([[0, 0]])
    with pytest.raises(ValueError, match="finite"):
        dense_exact_transport(np.full((3, 2), np.nan), ptr_r, ptr_c, pairs)
    with pytest.raises(ValueError, match="without points"):
        dense_exact_transport(costs, np.array([0, 0, 3]), ptr_c, pairs)
    with pytest.raises(ValueError, match="row weight 1 is -1.0"):
        dense_exact_transport(costs, ptr_r, ptr_c, pairs, row_weights=np.array([1.0, -1.0, 1.0]))
    with pytest.raises(ValueError, match="column group 0 has no mass"):
        dense_exact_transport(costs, ptr_r, ptr_c, pairs, col_weights=np.zeros(2))
    with pytest.raises(ValueError, match="do not exist"):
        dense_exact_transport(costs, ptr_r, ptr_c, np.array([[0, 1]]))


def test_templates_learn_towards_the_graphs():
    # Gradient steps on the templates (points and weights) lower the W they are steps on,
    # in float32 as a model would train.
    x, batch = _batch((5, 8, 3), 4, 13, dtype=torch.float32)
    torch.manual_seed(13)
    pool = WassersteinPooling(4, 2, 3, learn_template_weights=True)
    optimizer = torch.optim.SGD(pool.parameters(), lr=0.1)
    first = None
    for _ in range(30):
        optimizer.zero_grad()
        loss = pool(x, batch).mean()
        loss.backward()
        optimizer.step()
        first = loss.item() if first is None else first
    assert pool(x, batch).mean().item() < 0.95 * first
