"""Label reading: the whole-dataset fast path must agree with graph-by-graph reading.

``to_graph_set`` checks and decodes every graph's labels in a few numpy calls on their
concatenation, and falls back to reading graph by graph (which names the bad graph)
whenever the fast path declines. So for any input, with any prior label scheme, the two
must give the same labels and the same scheme, or raise the same error.
"""

import copy

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from torch_geometric.data import Data

from mwsp_torch import labels as labels_module
from mwsp_torch.labels import LabelScheme, to_graph_set

SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])

KINDS = ("one_hot_x", "int_x", "float_x", "fractional_x", "node_label", "node_label_2d", "float_node_label")


@st.composite
def label_graph(draw, kind, width):
    n = draw(st.integers(1, 5))
    rows = draw(st.integers(n - 1, n + 1)) if draw(st.integers(0, 9)) == 0 else n  # now and then a wrong count
    rows = max(rows, 0)
    low = -1 if draw(st.integers(0, 9)) == 0 else 0  # now and then a negative label
    values = np.array(draw(st.lists(st.integers(low, 3), min_size=rows * width, max_size=rows * width)), dtype=np.int64)
    values = values.reshape(rows, width)
    data = Data(edge_index=torch.empty((2, 0), dtype=torch.long), num_nodes=n)
    if kind == "one_hot_x":
        data.x = torch.nn.functional.one_hot(torch.as_tensor(np.abs(values[:, 0]) % width), width).float()
        if rows and draw(st.integers(0, 9)) == 0:
            data.x[0, :] = 0.0  # not one-hot
    elif kind == "int_x":
        data.x = torch.as_tensor(values)
    elif kind == "float_x":
        data.x = torch.as_tensor(values, dtype=torch.float32)
    elif kind == "fractional_x":
        data.x = torch.as_tensor(values, dtype=torch.float32) + 0.5
    elif kind == "node_label":
        data.node_label = torch.as_tensor(values[:, 0])
    elif kind == "node_label_2d":
        data.node_label = torch.as_tensor(values)
    else:
        data.node_label = torch.as_tensor(values, dtype=torch.float64)
    return data


@st.composite
def datasets(draw):
    count = draw(st.integers(1, 4))
    kind = draw(st.sampled_from(KINDS))
    width = draw(st.integers(1, 3))
    graphs = []
    for _ in range(count):
        mixed = draw(st.integers(0, 9)) == 0  # now and then another kind or width in the same dataset
        graphs.append(
            draw(
                label_graph(
                    draw(st.sampled_from(KINDS)) if mixed else kind,
                    draw(st.integers(1, 3)) if mixed else width,
                )
            )
        )
    scheme = LabelScheme(
        one_hot_x=draw(st.sampled_from([None, True, False])), width=draw(st.sampled_from([None, 1, 2, 3]))
    )
    return graphs, scheme


def _read(graphs, scheme):
    try:
        graph_set = to_graph_set(graphs, scheme=scheme)
    except ValueError as error:
        return "error", str(error)
    return "ok", graph_set.labels, scheme.one_hot_x, scheme.width


@SETTINGS
@given(datasets())
def test_fast_label_path_equals_graph_by_graph(case):
    graphs, scheme = case
    fast = _read(graphs, copy.deepcopy(scheme))
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(labels_module, "_labels_at_once", lambda raw, sizes, scheme: None)
        slow = _read(graphs, copy.deepcopy(scheme))
    assert fast[0] == slow[0], (fast, slow)
    if fast[0] == "error":
        assert fast[1] == slow[1]
    else:
        np.testing.assert_array_equal(fast[1], slow[1])
        assert fast[1].dtype == slow[1].dtype
        assert fast[2:] == slow[2:]


def test_fast_label_path_is_taken_on_a_uniform_dataset(monkeypatch):
    graphs = [Data(x=torch.eye(3)[[0, 2, 1]], edge_index=torch.empty((2, 0), dtype=torch.long)) for _ in range(3)]
    calls = []
    original = labels_module._labels_at_once

    def spy(raw, sizes, scheme):
        calls.append(original(raw, sizes, scheme))
        return calls[-1]

    monkeypatch.setattr(labels_module, "_labels_at_once", spy)
    graph_set = to_graph_set(graphs)
    assert calls[0] is not None
    np.testing.assert_array_equal(graph_set.labels, [0, 2, 1] * 3)


def test_bad_graph_is_named_after_the_fast_path_declines():
    graphs = [Data(x=torch.eye(2), edge_index=torch.empty((2, 0), dtype=torch.long)) for _ in range(3)]
    graphs[2].x = torch.tensor([[0.0, 1.0], [0.5, 0.5]])
    with pytest.raises(ValueError, match="graph 2: x has non-integer values"):
        to_graph_set(graphs)
