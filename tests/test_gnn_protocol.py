"""Errica et al.'s GNN protocol (``mwsp_torch.gnn_protocol``) and the models and loop under it.

What must hold for the GIN column to be theirs: their models' arithmetic (checked against
PyG's own ``GINConv`` and ``Batch``), their learning-rate schedule epoch by epoch, their
stopper's patience, a selection that never reads a test graph, and result cells that are
reused only under the request they were computed for.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from torch_geometric.data import Batch, Data
from torch_geometric.nn import GINConv

import mwsp_torch.gnn as gnn
import mwsp_torch.gnn.training as training
from mwsp_torch.gnn import (
    DeepMultisets,
    ErricaGIN,
    MolecularFingerprint,
    PackedGraphs,
    Patience,
    errica_node_features,
    fit_classifier,
)
from mwsp_torch.gnn_protocol import (
    PROFILES,
    CellMismatchError,
    cell_path,
    dataset_node_features,
    grid_settings,
    pack_dataset,
    protocol_of,
    run_gnn_cell,
    run_gnn_fold,
)

from helpers import DEVICES, make_data

TINY_GIN = {"batch_size": [8], "hidden_units": [[8, 8], [8]], "train_eps": [True], "aggregation": ["sum"],
            "dropout": [0.0], "monitor": ["accuracy"]}  # fmt: skip


def _toy(n: int = 36, seed: int = 0):
    """Cycles (class 0) and paths (class 1) of 4-7 nodes, all label 0: only structure parts them."""
    rng = np.random.default_rng(seed)
    graphs, y = [], []
    for i in range(n):
        size, cls = int(rng.integers(4, 8)), i % 2
        edges = [[j, j + 1] for j in range(size - 1)] + ([[size - 1, 0]] if cls == 0 else [])
        both = edges + [[b, a] for a, b in edges]
        graphs.append(make_data(size, both, [0] * size))
        y.append(cls)
    return graphs, np.array(y)


def _fold(n: int = 36):
    idx = np.arange(n)
    return {"train": idx[: n // 2], "validation": idx[n // 2 : 3 * n // 4], "test": idx[3 * n // 4 :]}


def _packed(graphs, y):
    return PackedGraphs(errica_node_features(graphs), [g.edge_index for g in graphs], y)


def test_packed_batch_is_the_batch_pyg_collates():
    graphs, y = _toy(12)
    x = [torch.randn(g.num_nodes, 3) for g in graphs]
    packed = PackedGraphs(x, [g.edge_index for g in graphs], y)
    index = torch.tensor([7, 2, 9, 0])
    ours = packed.subset([1, 2, 7, 9, 0]).batch(torch.tensor([2, 1, 3, 4]))  # the same four graphs
    theirs = Batch.from_data_list([Data(x=x[i], edge_index=graphs[i].edge_index, y=torch.tensor([int(y[i])]))
                                   for i in index.tolist()])  # fmt: skip
    assert torch.equal(ours.x, theirs.x) and torch.equal(ours.edge_index, theirs.edge_index)
    assert torch.equal(ours.batch, theirs.batch) and torch.equal(ours.y, theirs.y) and ours.num_graphs == 4
    # One node carrying each graph's sum: what MolecularFingerprint reads, and it scores the same.
    pooled = packed.pooled()
    assert torch.allclose(pooled.batch(index).x, torch.stack([x[i].sum(0) for i in index.tolist()]))
    model = MolecularFingerprint(3, 2, hidden_units=5)
    whole, summed = packed.batch(index), pooled.batch(index)
    from_nodes = model(whole.x, whole.edge_index, whole.batch, 4)
    assert torch.allclose(from_nodes, model(summed.x, summed.edge_index, summed.batch, 4), atol=1e-6)


def test_errica_gin_layer_equals_pyg_ginconv_and_reads_out_as_theirs():
    graphs, y = _toy(6)
    x = [torch.randn(g.num_nodes, 4) for g in graphs]
    b = PackedGraphs(x, [g.edge_index for g in graphs], y).batch()
    torch.manual_seed(0)
    model = ErricaGIN(4, 2, hidden_units=[5, 5], aggregation="mean", dropout=0.5).eval()
    with torch.no_grad():
        model.eps.copy_(torch.tensor([0.3, -0.2]))
    h0 = model.first(b.x)
    conv = GINConv(model.mlps[0], train_eps=True)
    with torch.no_grad():
        conv.eps.fill_(0.3)
    h1 = conv(h0, b.edge_index)
    conv2 = GINConv(model.mlps[1], train_eps=True)
    with torch.no_grad():
        conv2.eps.fill_(-0.2)
    h2 = conv2(h1, b.edge_index)
    counts = torch.bincount(b.batch).unsqueeze(1).float()

    def mean(h):
        return torch.zeros(b.num_graphs, h.shape[1]).index_add_(0, b.batch, h) / counts

    # Stage 0: mapped, then read out; stages 1-2: read out, then mapped (their forward).
    expected = mean(model.linears[0](h0)) + model.linears[1](mean(h1)) + model.linears[2](mean(h2))
    assert torch.allclose(model(b.x, b.edge_index, b.batch, b.num_graphs), expected, atol=1e-5)
    frozen = ErricaGIN(4, 2, hidden_units=[5], train_eps=False)
    assert "eps" not in dict(frozen.named_parameters()) and float(frozen.eps[0]) == 0.0
    # Their evaluation-time dropout, on request: stage 0's scores dropped (zeroed or doubled)
    # while the later stages stay deterministic.
    theirs = ErricaGIN(4, 2, hidden_units=[5, 5], aggregation="mean", dropout=0.5, first_dropout_at_eval=True)
    theirs.load_state_dict(model.state_dict())
    theirs.eval()
    torch.manual_seed(1)
    out = theirs(b.x, b.edge_index, b.batch, b.num_graphs)
    rest = model.linears[1](mean(h1)) + model.linears[2](mean(h2))
    first = (out - rest) / mean(model.linears[0](h0))
    assert torch.allclose(first, first.round(), atol=1e-3) and set(first.round().unique().tolist()) == {0.0, 2.0}


def test_errica_node_features_labels_attributes_and_degrees(fixture_root, cache_dir):
    from mwsp_torch.datasets import load_tudataset

    enzymes, _ = load_tudataset("ENZYMES", root=fixture_root, cache_dir=cache_dir)
    x = errica_node_features(enzymes)
    assert x[0].shape == (enzymes[0].num_nodes, 21)  # 18 attributes, then 3 one-hot labels
    assert torch.allclose(x[0][:, :18], enzymes[0].node_attr.float())
    labels = enzymes[0].node_label.reshape(-1)
    assert torch.equal(x[0][:, 18:].argmax(1), labels - min(int(g.node_label.min()) for g in enzymes))
    assert errica_node_features(enzymes, attributes=False)[0].shape[1] == 3
    # No node labels: the degree as one feature (their --use-degree): distinct neighbours, a
    # self-loop twice (networkx's Graph.degree), an edge listed once or in both directions alike.
    star = Data(edge_index=torch.tensor([[0, 0, 0, 1, 2, 3], [1, 2, 3, 0, 0, 0]]), num_nodes=4)
    pair = Data(edge_index=torch.tensor([[0, 1], [1, 0]]), num_nodes=2)
    loop = Data(edge_index=torch.tensor([[0, 0, 0, 1], [1, 1, 0, 2]]), num_nodes=4)
    degrees = errica_node_features([star, pair, loop])
    assert [d.tolist() for d in degrees] == [[[3], [1], [1], [1]], [[1], [1]], [[3], [2], [1], [0]]]
    # Which datasets read the attributes is Errica et al.'s rule: PROTEINS_full's are left out.
    assert dataset_node_features(enzymes, "ENZYMES")[0].shape[1] == 21
    assert dataset_node_features(enzymes, None)[0].shape[1] == 21
    assert torch.equal(dataset_node_features(enzymes, "PROTEINS")[0], x[0][:, 18:])
    packed = pack_dataset(enzymes, np.arange(len(enzymes)) % 6, "PROTEINS")
    assert torch.equal(packed.x, torch.cat(x)[:, 18:]) and torch.equal(packed.edge_index, torch.cat(
        [g.edge_index for g in enzymes], dim=1))  # fmt: skip
    with pytest.raises(ValueError, match="graph 1 lacks node_label"):
        errica_node_features([make_data(2, [[0, 1]], [0, 1]), pair])


def test_learning_rate_halves_every_50_epochs():
    graphs, y = _toy(12)
    packed = _packed(graphs, y)
    model = DeepMultisets(1, 2, hidden_units=4)
    log = fit_classifier(model, packed.subset(range(8)), packed.subset(range(8, 12)), batch_size=4,
                         max_epochs=120, patience=500)  # fmt: skip
    assert log["epochs"] == 120
    assert log["lrs"] == [0.01] * 50 + [0.005] * 50 + [0.0025] * 20
    constant = fit_classifier(DeepMultisets(1, 2, 4), packed.subset(range(8)), packed.subset(range(8, 12)),
                              batch_size=4, lr=0.001, step_size=None, max_epochs=60, patience=500)  # fmt: skip
    assert constant["lrs"] == [0.001] * 60


def test_patience_counts_epochs_without_a_new_best_and_keeps_ties_later():
    stopper = Patience(3)
    improved = [stopper.update(e, acc, 1.0) for e, acc in enumerate([50, 60, 60, 55, 58, 59], 1)]
    assert improved == [True, True, True, False, False, False]
    assert stopper.best_epoch == 3 and stopper.should_stop
    on_loss = Patience(2, monitor="loss")
    assert [on_loss.update(e, 0.0, loss) for e, loss in enumerate([0.9, 0.7, 0.7, 0.8], 1)] == [True, True, True,
                                                                                                False]  # fmt: skip
    assert on_loss.best_epoch == 3 and not on_loss.should_stop
    with pytest.raises(ValueError, match="monitor must be one of"):
        Patience(3, monitor="f1")


def test_fit_stops_after_patience_and_keeps_the_best_epochs_weights(monkeypatch):
    """Validation accuracies scripted 50, 70, 60, 65, 70, 40, 40, 40 (patience 3): the best
    epoch is 5 (a tie with 2, later kept), training stops at 8, and the model holds epoch 5's weights."""
    graphs, y = _toy(12)
    packed = _packed(graphs, y)
    script = iter([50.0, 70.0, 60.0, 65.0, 70.0, 40.0, 40.0, 40.0, 99.0, 99.0])
    real = training.evaluate  # what fit_classifier calls
    monkeypatch.setattr(training, "evaluate", lambda model, graphs: (next(script), 0.5, real(model, graphs)[2]))
    snapshots = {}
    model = ErricaGIN(1, 2, hidden_units=[4], dropout=0.0)

    def snapshot(epoch, info):
        snapshots[epoch] = {k: v.clone() for k, v in model.state_dict().items()}

    log = fit_classifier(model, packed.subset(range(8)), packed.subset(range(8, 12)), batch_size=4, max_epochs=50,
                         patience=3, on_epoch=snapshot)  # fmt: skip
    assert (log["epochs"], log["best_epoch"], log["validation_accuracy"]) == (8, 5, 70.0)
    state = model.state_dict()
    assert all(torch.equal(state[k], snapshots[5][k]) for k in state)
    assert not all(torch.equal(state[k], snapshots[8][k]) for k in state)


def test_selection_never_reads_the_test_graphs():
    """Flip the test graphs' labels and scramble their node inputs: every setting's validation
    score, the selection and the retrains' training are unchanged, and only the test scores move
    (with flipped binary labels and unchanged inputs, each test accuracy becomes 100 minus itself)."""
    graphs, y = _toy(36)
    fold = _fold(36)
    packed = _packed(graphs, y)
    clean = run_gnn_fold(packed, y, fold, method="gin", grid=TINY_GIN, max_epochs=6)
    flipped_y = y.copy()
    flipped_y[fold["test"]] = 1 - flipped_y[fold["test"]]
    flipped = run_gnn_fold(packed, flipped_y, fold, method="gin", grid=TINY_GIN, max_epochs=6)
    scrambled = _packed(graphs, y)
    rows = torch.cat([torch.arange(int(scrambled.node_ptr[i]), int(scrambled.node_ptr[i + 1])) for i in fold["test"]])
    scrambled.x[rows] = torch.randn(len(rows), scrambled.x.shape[1]) * 10
    poisoned = run_gnn_fold(scrambled, flipped_y, fold, method="gin", grid=TINY_GIN, max_epochs=6)
    for other in (flipped, poisoned):
        assert [s["validation_accuracy"] for s in other["settings"]] == [
            s["validation_accuracy"] for s in clean["settings"]
        ]
        assert [s["validation_loss"] for s in other["settings"]] == [s["validation_loss"] for s in clean["settings"]]
        assert other["selected"] == clean["selected"]
        assert [r["best_epoch"] for r in other["retrains"]] == [r["best_epoch"] for r in clean["retrains"]]
    assert [r["test_predictions"] for r in flipped["retrains"]] == [r["test_predictions"] for r in clean["retrains"]]
    assert flipped["test_accuracies"] == pytest.approx([100 - a for a in clean["test_accuracies"]])
    assert clean["test_indices"] == fold["test"].tolist() and len(clean["retrains"]) == 3
    assert clean["accuracy"] == pytest.approx(np.mean(clean["test_accuracies"]))
    # The check can fail: a protocol that validated on the test graphs would see the flip.
    leaky = {**fold, "validation": fold["test"], "test": fold["validation"]}
    honest_y = y.copy()
    honest_y[fold["test"]] = 1 - honest_y[fold["test"]]
    seen = run_gnn_fold(packed, y, leaky, method="gin", grid=TINY_GIN, max_epochs=6)
    seen_flipped = run_gnn_fold(packed, honest_y, leaky, method="gin", grid=TINY_GIN, max_epochs=6)
    assert [s["validation_accuracy"] for s in seen_flipped["settings"]] != [
        s["validation_accuracy"] for s in seen["settings"]
    ]


def test_selection_takes_the_best_validation_accuracy_first_on_ties(monkeypatch):
    graphs, y = _toy(24)
    calls = iter([60.0, 80.0, 80.0, 70.0])  # four settings' validation accuracies
    real = gnn.fit_classifier

    def scripted(*args, **kwargs):
        log = real(*args, **{**kwargs, "max_epochs": 1})
        return {**log, "validation_accuracy": next(calls, log["validation_accuracy"])}

    import mwsp_torch.gnn_protocol as protocol

    monkeypatch.setattr(protocol, "fit_classifier", scripted)
    grid = {**TINY_GIN, "hidden_units": [[4], [5], [6], [7]]}
    out = run_gnn_fold(graphs, y, _fold(24), grid=grid, max_epochs=1)
    assert out["selected_index"] == 1 and out["selected"]["hidden_units"] == [5]
    assert [s["validation_accuracy"] for s in out["settings"]] == [60.0, 80.0, 80.0, 70.0]
    assert [r["seed"] for r in out["retrains"]] == [1, 2, 3]


def test_cells_resume_and_refuse_another_grid_or_split(tmp_path):
    graphs, y = _toy(24)
    fold = _fold(24)
    kwargs = {"method": "baseline", "dataset": "toy", "max_epochs": 4, "split_sha256": "abc"}
    first = run_gnn_cell(tmp_path, graphs, y, fold, 3, **kwargs)
    path = cell_path(tmp_path, "toy", "baseline", 3)
    assert path == tmp_path / "toy" / "baseline" / "fold-03.json" and first["computed"]
    stamp = path.stat().st_mtime_ns
    again = run_gnn_cell(tmp_path, graphs, y, fold, 3, **kwargs)
    assert not again["computed"] and again["accuracy"] == first["accuracy"] and path.stat().st_mtime_ns == stamp
    assert json.loads(path.read_text())["request"]["split_sha256"] == "abc"
    other_grid = {**protocol_of("baseline", "toy")["grid"], "hidden_units": [16]}
    with pytest.raises(CellMismatchError, match="grid differ"):
        run_gnn_cell(tmp_path, graphs, y, fold, 3, grid=other_grid, **kwargs)
    with pytest.raises(CellMismatchError, match="split_sha256 differ"):
        run_gnn_cell(tmp_path, graphs, y, fold, 3, **{**kwargs, "split_sha256": "def"})
    with pytest.raises(CellMismatchError, match="max_epochs, profile differ"):
        run_gnn_cell(tmp_path, graphs, y, fold, 3, **{**kwargs, "profile": "cpu-1000", "max_epochs": 5})
    wider = PackedGraphs([torch.ones(g.num_nodes, 2) for g in graphs], [g.edge_index for g in graphs], y)
    with pytest.raises(CellMismatchError, match="input_width differ"):  # other node inputs
        run_gnn_cell(tmp_path, wider, y, fold, 3, **kwargs)
    assert path.stat().st_mtime_ns == stamp  # refusals leave the cell alone
    forced = run_gnn_cell(tmp_path, graphs, y, fold, 3, force=True, **kwargs)
    assert forced["computed"] and forced["accuracy"] == first["accuracy"]  # seeded: the same result
    assert forced["retrains"][0]["test_predictions"] == first["retrains"][0]["test_predictions"]


def test_profiles_hold_errica_grids_and_the_cpu_subset():
    sizes = {(m, d, p): len(grid_settings(protocol_of(m, d, p)["grid"])) for m in ("gin", "baseline")
             for d in ("NCI1", "ENZYMES", "IMDB-BINARY") for p in PROFILES if m in PROFILES[p]}  # fmt: skip
    assert sizes[("gin", "NCI1", "errica")] == 128 and sizes[("gin", "NCI1", "cpu")] == 4
    assert sizes[("baseline", "NCI1", "errica")] == 108 and sizes[("baseline", "ENZYMES", "errica")] == 72
    assert sizes[("baseline", "IMDB-BINARY", "errica")] == 108
    assert {sizes[("baseline", d, "cpu")] for d in ("NCI1", "ENZYMES", "IMDB-BINARY")} == {2}
    errica = protocol_of("gin", "NCI1", "errica")
    assert (errica["max_epochs"], errica["patience"], errica["fixed"]) == (
        1000, 500, {"lr": 0.01, "weight_decay": 0.0, "step_size": 50, "gamma": 0.5})  # fmt: skip
    assert protocol_of("baseline", "ENZYMES", "errica")["max_epochs"] == 5000
    assert protocol_of("baseline", "IMDB-BINARY", "errica")["max_epochs"] == 3000
    assert protocol_of("baseline", "ENZYMES", "cpu")["grid"]["model"] == ["deep_multisets"]
    assert protocol_of("baseline", "NCI1", "cpu")["grid"]["model"] == ["molecular_fingerprint"]
    # The cap study runs the CPU grids, only with Errica's budget.
    assert protocol_of("gin", "NCI1", "cpu-1000")["grid"] == protocol_of("gin", "NCI1", "cpu")["grid"]
    assert protocol_of("gin", "NCI1", "cpu-1000")["max_epochs"] == 1000
    # The dropout diagnostic is `cpu` but for their evaluation-time dropout, and GIN only.
    diagnostic, cpu = protocol_of("gin", "ENZYMES", "cpu-errica-dropout"), protocol_of("gin", "ENZYMES", "cpu")
    assert diagnostic["fixed"] == {**cpu["fixed"], "first_dropout_at_eval": True}
    assert (diagnostic["grid"], diagnostic["max_epochs"]) == (cpu["grid"], cpu["max_epochs"])
    with pytest.raises(ValueError, match="no protocol for 'baseline'"):
        protocol_of("baseline", "ENZYMES", "cpu-errica-dropout")


def test_bad_folds_are_refused_naming_the_fault():
    graphs, y = _toy(12)
    with pytest.raises(ValueError, match="graph 5 is in both train and test"):
        run_gnn_fold(graphs, y, {"train": [0, 1, 5], "validation": [2, 3], "test": [4, 5]}, max_epochs=1)
    with pytest.raises(ValueError, match="the validation part is empty"):
        run_gnn_fold(graphs, y, {"train": [0, 1], "validation": [], "test": [4, 5]}, max_epochs=1)
    with pytest.raises(ValueError, match="test holds a graph index outside 0..11"):
        run_gnn_fold(graphs, y, {"train": [0, 1], "validation": [2], "test": [12]}, max_epochs=1)
    with pytest.raises(ValueError, match="12 graphs but 11 labels"):
        run_gnn_fold(graphs, y[:11], _fold(12), max_epochs=1)


def test_runner_writes_one_cell_per_fold_and_resumes(tmp_path, fixture_root, cache_dir, monkeypatch):
    """``experiments/errica_gnn.py`` on the MUTAG fixture (2 epochs, 2 folds): one cell per
    (method, fold) on the seed-42 split file, with its SHA-256; a rerun recomputes nothing."""
    import sys
    from pathlib import Path

    from mwsp_torch.splits import sha256_of

    monkeypatch.setenv("MWSP_DATA_ROOT", str(fixture_root))
    monkeypatch.setenv("MWSP_CACHE_DIR", str(cache_dir))
    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parents[1] / "experiments"))
    sys.modules.pop("errica_gnn", None)
    import errica_gnn

    assert errica_gnn.parse_folds("0,3,5-6") == [0, 3, 5, 6]
    argv = ["--datasets", "MUTAG", "--folds", "0-1", "--max-epochs", "2", "--quiet", "--raw-dir",
            str(tmp_path / "raw"), "--folds-dir", str(tmp_path / "folds")]  # fmt: skip
    lines = errica_gnn.main(argv)
    cells = sorted((tmp_path / "raw").rglob("fold-*.json"))
    assert [c.relative_to(tmp_path / "raw").as_posix() for c in cells] == [
        "MUTAG/baseline/fold-00.json", "MUTAG/baseline/fold-01.json", "MUTAG/gin/fold-00.json",
        "MUTAG/gin/fold-01.json"]  # fmt: skip
    digest = sha256_of(tmp_path / "folds" / "MUTAG.json")
    loaded = [json.loads(c.read_text()) for c in cells]
    assert {c["split_sha256"] for c in loaded} == {digest}
    assert all(c["max_epochs"] == 2 and max(r["epochs"] for r in c["retrains"]) == 2 for c in loaded)
    assert [line.split()[:3] for line in lines] == [["MUTAG", "gin", "2"], ["MUTAG", "baseline", "2"]]
    stamps = [c.stat().st_mtime_ns for c in cells]
    assert errica_gnn.main(argv) == lines
    assert [c.stat().st_mtime_ns for c in cells] == stamps


@pytest.mark.parametrize("device", DEVICES)
def test_fold_runs_on_each_device(device):
    """The protocol on the CPU always and on CUDA where there is one: the stored predictions
    give the stored test accuracies, and on the CPU the result is the default-device run's."""
    graphs, y = _toy(36, seed=1)
    fold = _fold(36)
    out = run_gnn_fold(graphs, y, fold, method="gin", grid=TINY_GIN, max_epochs=5, device=device)
    assert out["device"].startswith(device)
    for retrain in out["retrains"]:
        predicted = np.array(retrain["test_predictions"])
        assert retrain["test_accuracy"] == pytest.approx(100 * np.mean(predicted == y[fold["test"]]))
    if device == "cpu":
        default = run_gnn_fold(graphs, y, fold, method="gin", grid=TINY_GIN, max_epochs=5)
        assert default["test_accuracies"] == out["test_accuracies"]
        assert [s["validation_loss"] for s in default["settings"]] == [s["validation_loss"] for s in out["settings"]]
