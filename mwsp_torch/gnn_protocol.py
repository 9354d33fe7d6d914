"""Errica et al.'s protocol for GNNs on one outer fold: select on the hold-out, retrain 3 times, test once.

Errica, Podda, Bacciu and Micheli (2020, "A Fair Comparison of Graph Neural Networks for
Graph Classification", diningphil/gnn-comparison) assess a GNN on each outer fold so: every
setting of a grid is trained on the fold's inner training part and early-stopped on its
validation part (their ``Patience`` stopper); the setting with the best validation accuracy
(ties: the first in grid order) is trained 3 more times from new initial weights, each
early-stopped on the same validation part, and the fold's score is the mean of the three
test accuracies. The test part is read once per retrain, after training; nothing else sees
it. :func:`run_gnn_fold` is that, for :class:`mwsp_torch.gnn.ErricaGIN` (``method="gin"``)
and their structure-agnostic baseline (``method="baseline"``:
:class:`mwsp_torch.gnn.MolecularFingerprint` on chemical data,
:class:`mwsp_torch.gnn.DeepMultisets` on ENZYMES and the social datasets, as their configs),
and for GIN with template pooling (:data:`POOLING_METHODS`, :class:`mwsp_torch.gnn.GINTemplatePooling`:
``gin_pool``, ``gin_pool_tree_ids`` on tree IDs fitted on each fold's training graphs,
:func:`tree_id_fold_inputs`, and ``gin_tfgw``), on GIN's grid and budget.

Grids and budgets come in profiles (:data:`PROFILES`):

- ``"errica"``: their grids and epochs (GIN: 128 settings, up to 1000 epochs, patience 500,
  Adam lr 0.01 halved every 50 epochs; baseline: their per-family grids, 3000-5000 epochs).
  Meant for a GPU.
- ``"cpu"``: a subset fixed before any test fold was scored, the same on every dataset,
  with GIN's epochs capped at 300 (by then its step schedule has halved the learning rate
  five times: the last 50 epochs train at 1/32 of it).
  The subset, the cap and their cost are in ``docs/gnn_vs_kernel.md``.
- ``"cpu-1000"``: the ``"cpu"`` grids with their budget (1000 epochs, patience 500), to show
  on a few folds that the cap does not decide the result.
- ``"cpu-errica-dropout"`` (GIN only): ``"cpu"`` with their first stage's dropout left on in
  evaluation, as their code has it, to measure what that difference does to the score.

:func:`run_gnn_cell` keeps one fold's result as a JSON cell (``DATASET/METHOD/fold-NN.json``
under a results folder, :func:`cell_path`) and returns it on the next call, refusing a cell
of another grid, budget, seed or split file unless ``force``.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Sequence
from itertools import product
from pathlib import Path

import numpy as np
import torch
from torch_geometric.data import Data

from mwsp_torch.compare.methods import GNN_METHODS, POOLING_METHODS
from mwsp_torch.gnn import (
    DeepMultisets,
    ErricaGIN,
    GINTemplatePooling,
    MolecularFingerprint,
    PackedGraphs,
    errica_node_features,
    evaluate,
    fit_classifier,
    tree_id_features,
)
from mwsp_torch.splits import Fold
from mwsp_torch.trees import TreeIDs

__all__ = [
    "BASELINE_FAMILY",
    "ERRICA_DATA",
    "ERRICA_LABELS_ONLY",
    "ERRICA_SPLIT_FILES",
    "METHODS",
    "POOLING_METHODS",
    "PROFILES",
    "TREE_ID_METHODS",
    "CellMismatchError",
    "build_model",
    "cell_path",
    "dataset_node_features",
    "grid_settings",
    "pack_dataset",
    "protocol_of",
    "run_gnn_cell",
    "run_gnn_fold",
    "tree_id_fold_inputs",
]

#: ``gin``, ``baseline`` and the template-pooling GINs (:data:`POOLING_METHODS`).
METHODS = GNN_METHODS
#: The methods whose node inputs are MWSP's tree IDs, fitted on each fold's training graphs.
TREE_ID_METHODS = ("gin_pool_tree_ids",)

#: Errica et al.'s split file of each dataset, relative to their ``data_splits/`` folder
#: (``../shared/errica_splits`` here); the social datasets use their degree-feature folds.
ERRICA_SPLIT_FILES = {
    "NCI1": "CHEMICAL/NCI1_splits.json",
    "PROTEINS": "CHEMICAL/PROTEINS_full_splits.json",
    "DD": "CHEMICAL/DD_splits.json",
    "ENZYMES": "CHEMICAL/ENZYMES_splits.json",
    "IMDB-BINARY": "COLLABORATIVE_DEGREE/IMDB-BINARY_splits.json",
    "REDDIT-BINARY": "COLLABORATIVE_DEGREE/REDDIT-BINARY_splits.json",
}

#: The TU dataset Errica et al.'s split file indexes, where it is not the dataset's name:
#: their PROTEINS is PROTEINS_full (the same 1,113 graphs and labels, with 29 attributes).
ERRICA_DATA = {"PROTEINS": "PROTEINS_full"}
#: Datasets whose continuous node attributes Errica et al.'s GNNs do not read although the
#: files carry them: their ``PrepareDatasets.py`` turns attributes on for ENZYMES only, and
#: their PROTEINS_full has 3 input features (``datasets/manager.py``), the one-hot labels.
ERRICA_LABELS_ONLY = frozenset({"PROTEINS"})


def dataset_node_features(graphs: Sequence[Data], dataset: str | None = None) -> list[torch.Tensor]:
    """The node inputs the GNNs of a comparison read on ``dataset``: Errica et al.'s
    (:func:`~mwsp_torch.gnn.errica_node_features`), with the attributes where the graphs carry
    them, except on the datasets where they left them out (:data:`ERRICA_LABELS_ONLY`)."""
    return errica_node_features(graphs, attributes=dataset not in ERRICA_LABELS_ONLY)


def pack_dataset(graphs: Sequence[Data], y, dataset: str | None = None) -> PackedGraphs:
    """The GNNs' inputs of a whole dataset, packed once: :func:`dataset_node_features` beside each
    graph's edges and ``y`` (a :class:`~mwsp_torch.gnn.PackedGraphs`, which folds then subset)."""
    return PackedGraphs(dataset_node_features(graphs, dataset), [g.edge_index for g in graphs], y)


#: Which of their baseline configs a dataset takes (``config_Baseline*.yml``); others: chemical.
BASELINE_FAMILY = {"ENZYMES": "enzymes", "IMDB-BINARY": "imdb", "REDDIT-BINARY": "social"}

_GIN_FIXED = {"lr": 0.01, "weight_decay": 0.0, "step_size": 50, "gamma": 0.5}
#: The template-pooling GINs train as GIN does; what they fix beyond it: the pooling (exact W
#: with MWSP's Euclidean cost and uniform template weights, or POT's TFGW with its defaults)
#: and, for tree-ID inputs, the scales (0..2, MWSP's k grid) and that a tree at scale >= 1
#: held by fewer than 2 training graphs is "unseen" (so that row is trained).
_POOL_FIXED = {
    "gin_pool": {**_GIN_FIXED, "pooling": "wasserstein", "cost": "euclidean"},
    "gin_pool_tree_ids": {**_GIN_FIXED, "pooling": "wasserstein", "cost": "euclidean", "tree_ids_k": 2,
                          "tree_ids_min_graphs": 2},
    "gin_tfgw": {**_GIN_FIXED, "pooling": "tfgw"},
}  # fmt: skip
_BASELINE_FIXED = {"step_size": None, "gamma": 1.0}

#: ``config_GIN.yml``: 2 x 4 x 2 x 2 x 2 x 2 = 128 settings.
_GIN_GRID = {
    "batch_size": [32, 128],
    "hidden_units": [[64, 64, 64, 64], [32, 32, 32, 32], [64], [32, 32]],
    "train_eps": [True, False],
    "aggregation": ["mean", "sum"],
    "dropout": [0.5, 0.0],
    "monitor": ["accuracy", "loss"],
}
_STOPPERS = ["accuracy", "loss"]
#: ``config_BaselineChemical.yml``, ``config_BaselineENZYMES.yml``, ``config_BaselineIMDB.yml``,
#: ``config_BaselineSocial.yml``: (grid, epochs).
_BASELINE_GRIDS = {
    "chemical": (
        {"model": ["molecular_fingerprint"], "batch_size": [32, 128], "hidden_units": [32, 128, 256],
         "lr": [1e-6, 1e-3, 0.1], "weight_decay": [1e-4, 1e-3, 1e-2], "monitor": _STOPPERS},
        5000,
    ),
    "enzymes": (
        {"model": ["deep_multisets"], "batch_size": [32], "hidden_units": [32, 64, 128, 256],
         "lr": [1e-5, 1e-4, 1e-3], "weight_decay": [1e-2, 1e-4, 1e-5], "monitor": _STOPPERS},
        5000,
    ),
    "imdb": (
        {"model": ["deep_multisets"], "batch_size": [32, 128], "hidden_units": [32, 128, 256],
         "lr": [1e-6, 1e-3, 0.1], "weight_decay": [1e-4, 1e-3, 1e-2], "monitor": _STOPPERS},
        3000,
    ),
    "social": (
        {"model": ["deep_multisets"], "batch_size": [32], "hidden_units": [32, 128],
         "lr": [1e-3, 0.1], "weight_decay": [1e-4, 1e-3, 1e-2], "monitor": _STOPPERS},
        3000,
    ),
}  # fmt: skip

#: The CPU subset of GIN's grid (4 settings): capacity (4 layers of 64, or 2 of 32) and
#: regularisation (dropout 0.5 or none), at their larger batch, a trained eps, a sum readout,
#: stopping on validation accuracy.
_GIN_CPU_GRID = {
    "batch_size": [128],
    "hidden_units": [[64, 64, 64, 64], [32, 32]],
    "train_eps": [True],
    "aggregation": ["sum"],
    "dropout": [0.5, 0.0],
    "monitor": ["accuracy"],
}


def _pooling_grid(gin_grid: dict) -> dict:
    """A GIN grid for a template-pooling GIN: its settings without ``aggregation`` (the
    readout it replaces), crossed with the templates: ``T = 10`` templates of ``m = 10`` points,
    POT's TFGW example's count and the issue's benchmark size, fixed before any fold was scored."""
    grid = {key: values for key, values in gin_grid.items() if key != "aggregation"}
    return {**grid, "num_templates": [10], "template_size": [10]}


#: The CPU subset of every baseline family's grid (2 settings): the values all four families
#: share (batch 32, lr 1e-3, l2 1e-4, hidden 32 or 128), stopping on validation accuracy.
_BASELINE_CPU = {"batch_size": [32], "hidden_units": [32, 128], "lr": [1e-3], "weight_decay": [1e-4],
                 "monitor": ["accuracy"]}  # fmt: skip

#: Profiles: per method, ``grid`` (or ``None``: the dataset's own family's), ``max_epochs``,
#: ``patience``. The baseline's grid is completed by :func:`protocol_of` with its model.
#: The template-pooling GINs take GIN's grid (less ``aggregation``) and budget in every profile:
#: ``cpu``, 4 settings (batch 128, hidden {[64]x4, [32,32]}, trained eps, dropout {0.5, 0},
#: stopper on accuracy, T = m = 10), 300 epochs.
PROFILES = {
    "errica": {
        "gin": {"grid": _GIN_GRID, "max_epochs": 1000, "patience": 500},
        "baseline": {"grid": None, "max_epochs": None, "patience": 500},
        **{m: {"grid": _pooling_grid(_GIN_GRID), "max_epochs": 1000, "patience": 500} for m in POOLING_METHODS},
    },
    "cpu": {
        "gin": {"grid": _GIN_CPU_GRID, "max_epochs": 300, "patience": 500},
        "baseline": {"grid": _BASELINE_CPU, "max_epochs": 1000, "patience": 500},
        **{m: {"grid": _pooling_grid(_GIN_CPU_GRID), "max_epochs": 300, "patience": 500} for m in POOLING_METHODS},
    },
    "cpu-1000": {
        "gin": {"grid": _GIN_CPU_GRID, "max_epochs": 1000, "patience": 500},
        "baseline": {"grid": _BASELINE_CPU, "max_epochs": 3000, "patience": 500},
        **{m: {"grid": _pooling_grid(_GIN_CPU_GRID), "max_epochs": 1000, "patience": 500} for m in POOLING_METHODS},
    },
    # A diagnostic, GIN only: the `cpu` protocol with their first stage's dropout left on in
    # evaluation, as their GIN.py does, to measure what that oversight costs (docs/gnn_vs_kernel.md).
    "cpu-errica-dropout": {
        "gin": {"grid": _GIN_CPU_GRID, "max_epochs": 300, "patience": 500, "fixed": {"first_dropout_at_eval": True}},
    },
}

RETRAINS = 3
CELL_FORMAT = 1


class CellMismatchError(ValueError):
    """A result cell on disk was computed under another grid, budget, seed or split file."""


def grid_settings(grid: dict) -> list[dict]:
    """Every setting of ``grid`` (``{name: [values]}``), in a fixed order: the product of the
    value lists, the first key varying slowest.

    Examples:
        >>> grid_settings({"a": [1, 2], "b": ["x"]})
        [{'a': 1, 'b': 'x'}, {'a': 2, 'b': 'x'}]
    """
    keys = list(grid)
    return [dict(zip(keys, values, strict=True)) for values in product(*(grid[k] for k in keys))]


def protocol_of(method: str, dataset: str | None = None, profile: str = "cpu") -> dict:
    """The grid, fixed training parameters and budget of ``method`` on ``dataset`` under ``profile``.

    Args:
        method (str): one of :data:`METHODS`.
        dataset (str, optional): the dataset's name, which picks the baseline's family
            (:data:`BASELINE_FAMILY`; default: chemical).
        profile (str): a key of :data:`PROFILES` (default ``"cpu"``).

    Returns:
        dict: ``grid``, ``fixed`` (the training parameters no setting varies), ``max_epochs``,
        ``patience``, ``profile``.

    Examples:
        >>> p = protocol_of("gin", "NCI1", "errica")
        >>> len(grid_settings(p["grid"])), p["max_epochs"], p["fixed"]["step_size"]
        (128, 1000, 50)
    """
    if method not in METHODS:
        raise ValueError(f"method must be one of {METHODS}, got {method!r}")
    if profile not in PROFILES:
        raise ValueError(f"profile must be one of {sorted(PROFILES)}, got {profile!r}")
    if method not in PROFILES[profile]:
        raise ValueError(f"profile {profile!r} has no protocol for {method!r}; it has {sorted(PROFILES[profile])}")
    spec = PROFILES[profile][method]
    if method == "gin" or method in POOLING_METHODS:
        fixed = dict(_GIN_FIXED) if method == "gin" else dict(_POOL_FIXED[method])
        fixed.update(spec.get("fixed", {}))
        return {"grid": spec["grid"], "fixed": fixed, "max_epochs": spec["max_epochs"],
                "patience": spec["patience"], "profile": profile}  # fmt: skip
    family_grid, family_epochs = _BASELINE_GRIDS[BASELINE_FAMILY.get(dataset or "", "chemical")]
    grid = family_grid if spec["grid"] is None else {"model": family_grid["model"], **spec["grid"]}
    return {"grid": grid, "fixed": dict(_BASELINE_FIXED), "max_epochs": spec["max_epochs"] or family_epochs,
            "patience": spec["patience"], "profile": profile}  # fmt: skip


def build_model(
    method: str, setting: dict, in_dim: int, num_classes: int, fixed: dict | None = None
) -> torch.nn.Module:
    """The model of one grid setting: :class:`~mwsp_torch.gnn.ErricaGIN` for ``"gin"``, the
    baseline its ``setting["model"]`` names for ``"baseline"``, and for the template-pooling
    methods :class:`~mwsp_torch.gnn.GINTemplatePooling` with the pooling of ``fixed`` (default:
    the method's), its Wasserstein solver on torch's thread count (the result does not depend on it).
    ``fixed["first_dropout_at_eval"]`` (profile ``cpu-errica-dropout``) gives GIN their evaluation-time dropout."""
    if method == "gin":
        return ErricaGIN(in_dim, num_classes, hidden_units=setting["hidden_units"], train_eps=setting["train_eps"],
                         aggregation=setting["aggregation"], dropout=setting["dropout"],
                         first_dropout_at_eval=bool((fixed or {}).get("first_dropout_at_eval", False)))  # fmt: skip
    if method in POOLING_METHODS:
        fixed = _POOL_FIXED[method] if fixed is None else fixed
        return GINTemplatePooling(
            in_dim, num_classes, hidden_units=setting["hidden_units"], train_eps=setting["train_eps"],
            dropout=setting["dropout"], num_templates=setting["num_templates"],
            template_size=setting["template_size"], pooling=fixed["pooling"], cost=fixed.get("cost", "euclidean"),
            n_jobs=torch.get_num_threads(),
        )  # fmt: skip
    if method == "baseline":
        model = {"molecular_fingerprint": MolecularFingerprint, "deep_multisets": DeepMultisets}[setting["model"]]
        return model(in_dim, num_classes, hidden_units=setting["hidden_units"])
    raise ValueError(f"method must be one of {METHODS}, got {method!r}")


def _train_one(method, setting, fixed, budget, in_dim, num_classes, train, validation, seed, device):
    torch.manual_seed(seed)
    model = build_model(method, setting, in_dim, num_classes, fixed)
    if method == "baseline" and setting["model"] == "molecular_fingerprint":
        train, validation = train.pooled(), validation.pooled()  # it reads only each graph's sum
    log = fit_classifier(
        model, train, validation, batch_size=setting["batch_size"], lr=setting.get("lr", fixed.get("lr")),
        weight_decay=setting.get("weight_decay", fixed.get("weight_decay", 0.0)), step_size=fixed["step_size"],
        gamma=fixed["gamma"], max_epochs=budget["max_epochs"], patience=budget["patience"],
        monitor=setting["monitor"], seed=seed, device=device,
    )  # fmt: skip
    return model, log


def _fold_parts(fold, n: int, where: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    if isinstance(fold, Fold):
        parts = (fold.inner_train, fold.validation, fold.test)
    elif isinstance(fold, dict) and {"train", "validation", "test"} <= set(fold):
        parts = (fold["train"], fold["validation"], fold["test"])  # train: the inner training part
    else:
        raise ValueError(f"{where}: fold must be a mwsp_torch.splits.Fold or a dict of train, validation, test")
    out = []
    for name, part in zip(("train", "validation", "test"), parts, strict=True):
        part = np.asarray(part, dtype=np.int64).reshape(-1)
        if part.size == 0:
            raise ValueError(f"{where}: the {name} part is empty")
        if part.min() < 0 or part.max() >= n:
            raise ValueError(f"{where}: {name} holds a graph index outside 0..{n - 1}")
        out.append(part)
    for (a, an), (b, bn) in (((0, "train"), (1, "validation")), ((0, "train"), (2, "test")), ((1, "validation"),
                                                                                             (2, "test"))):  # fmt: skip
        met = np.intersect1d(out[a], out[b])
        if len(met):
            raise ValueError(f"{where}: graph {met[0]} is in both {an} and {bn}")
    return out[0], out[1], out[2]


def run_gnn_fold(
    graphs: Sequence[Data] | PackedGraphs,
    y,
    fold: Fold | dict,
    *,
    method: str = "gin",
    dataset: str | None = None,
    profile: str = "cpu",
    grid: dict | None = None,
    max_epochs: int | None = None,
    patience: int | None = None,
    seed: int = 0,
    split_sha256: str = "",
    device=None,
    on_training: Callable[[str, dict], None] | None = None,
) -> dict:
    """Errica et al.'s assessment of ``method`` on one outer fold.

    Every setting of the grid is trained on the fold's inner training part (seed ``seed``)
    and early-stopped on its validation part; the setting with the best validation accuracy
    (ties: the first) is trained :data:`RETRAINS` more times (seeds ``seed + 1, ...``), each
    early-stopped on the same validation part, and scored once on the test part. Only those
    retrained models ever see a test graph, and only after their training ended.

    Args:
        graphs (Sequence[Data] | PackedGraphs): the dataset's graphs, whose node inputs are
            :func:`dataset_node_features` (computed here from ``Data``), or
            already packed node inputs (indexed as ``y``). The tree-ID methods
            (:data:`TREE_ID_METHODS`) take ``Data`` only: their inputs are fitted here, on the
            fold's training part (:func:`tree_id_fold_inputs`).
        y: ``[n]`` class labels.
        fold (Fold | dict): the outer fold: a :class:`mwsp_torch.splits.Fold` (its
            ``inner_train``, ``validation``, ``test``), or a dict of ``train`` (the inner
            training part), ``validation`` and ``test`` indices.
        method (str): one of :data:`METHODS` (default ``"gin"``).
        dataset (str, optional): the dataset's name (picks the baseline's family).
        profile (str): grid and budget, a key of :data:`PROFILES` (default ``"cpu"``).
        grid (dict, optional): a grid of its own instead of the profile's (same keys).
        max_epochs, patience (int, optional): instead of the profile's.
        seed (int): seed of the selection runs; retrains use the next ones (default ``0``).
        split_sha256 (str): the split file's SHA-256, carried into the result (default ``""``).
        device: torch device to train on (default None: the CPU, or where packed graphs are).
        on_training (callable, optional): called as ``on_training(what, log)`` after each
            training (for progress).

    Returns:
        dict: ``device``, ``method``, ``dataset``, ``profile``, ``grid``, ``fixed``, ``max_epochs``,
        ``patience``, ``seed``, ``split_sha256``; ``settings`` (each with its
        ``validation_accuracy``, ``validation_loss``, ``best_epoch``, ``epochs``,
        ``seconds``); ``selected`` (the setting) and ``selected_index``; ``retrains`` (each
        with ``seed``, ``test_accuracy``, ``validation_accuracy``, ``best_epoch``,
        ``epochs``, ``seconds``, ``test_predictions``); ``test_accuracies``, ``accuracy``
        (their mean, percent), ``test_indices``, ``seconds_selection``, ``seconds_retrain``;
        for a tree-ID method, ``tree_id_sizes`` (the fitted table sizes, unseen row included).

    Raises:
        ValueError: naming the fold's fault (an empty part, parts that meet, an index out
            of range), or a bad method, profile or grid.

    Examples:
        >>> import numpy as np, torch
        >>> from torch_geometric.data import Data
        >>> ring = lambda n: torch.tensor([[i for i in range(n)] + [(i + 1) % n for i in range(n)],
        ...                                [(i + 1) % n for i in range(n)] + [i for i in range(n)]])
        >>> graphs = [Data(edge_index=ring(3 + i % 2), num_nodes=3 + i % 2,
        ...                node_label=torch.zeros(3 + i % 2, dtype=torch.long)) for i in range(12)]
        >>> y = np.arange(12) % 2
        >>> fold = {"train": np.arange(6), "validation": np.arange(6, 9), "test": np.arange(9, 12)}
        >>> out = run_gnn_fold(graphs, y, fold, method="baseline", max_epochs=5)
        >>> len(out["settings"]), len(out["test_accuracies"]), out["test_indices"]
        (2, 3, [9, 10, 11])
    """
    y = np.asarray(y, dtype=np.int64).reshape(-1)
    protocol = protocol_of(method, dataset, profile)
    if grid is not None:
        protocol["grid"] = grid
    budget = {
        "max_epochs": int(max_epochs or protocol["max_epochs"]),
        "patience": int(patience or protocol["patience"]),
    }
    settings = grid_settings(protocol["grid"])
    if not settings:
        raise ValueError("the grid has no setting")
    if not isinstance(graphs, PackedGraphs) and len(graphs) != len(y):
        raise ValueError(f"{len(graphs)} graphs but {len(y)} labels")
    train_idx, valid_idx, test_idx = _fold_parts(fold, len(y), f"{dataset or 'dataset'} fold")
    tree_ids = None
    if method in TREE_ID_METHODS:
        if isinstance(graphs, PackedGraphs):
            raise ValueError(
                f"{method} reads tree IDs fitted on each fold's training graphs: pass the graphs (Data), not "
                "PackedGraphs"
            )
        fixed = protocol["fixed"]
        packed, tree_ids = tree_id_fold_inputs(
            graphs, y, train_idx, k=fixed["tree_ids_k"], min_graphs=fixed["tree_ids_min_graphs"]
        )
    elif isinstance(graphs, PackedGraphs):
        packed = graphs
    else:
        packed = pack_dataset(graphs, y, dataset)
    if len(packed) != len(y):
        raise ValueError(f"{len(packed)} packed graphs but {len(y)} labels")
    num_classes = int(y.max()) + 1
    in_dim = int(packed.x.shape[1])
    # The labels the training code sees: the test part's are never read before scoring.
    device = torch.device(device) if device is not None else packed.device
    train, validation = packed.subset(train_idx), packed.subset(valid_idx)
    train.y, validation.y = torch.from_numpy(y[train_idx]), torch.from_numpy(y[valid_idx])
    train, validation = train.to(device), validation.to(device)
    fixed = protocol["fixed"]

    start = time.perf_counter()
    scored = []
    for s, setting in enumerate(settings):
        _, log = _train_one(method, setting, fixed, budget, in_dim, num_classes, train, validation, seed, device)
        scored.append({"setting": setting, **{k: log[k] for k in ("validation_accuracy", "validation_loss",
                                                                   "best_epoch", "epochs", "seconds")}})  # fmt: skip
        if on_training is not None:
            on_training(f"setting {s + 1}/{len(settings)}", log)
    best = max(range(len(settings)), key=lambda s: (scored[s]["validation_accuracy"], -s))
    seconds_selection = time.perf_counter() - start

    start = time.perf_counter()
    test = packed.subset(test_idx)
    test.y = torch.from_numpy(y[test_idx])
    test = test.to(device)
    retrains = []
    for r in range(1, RETRAINS + 1):
        model, log = _train_one(
            method, settings[best], fixed, budget, in_dim, num_classes, train, validation, seed + r, device
        )
        part = test.pooled() if method == "baseline" and settings[best]["model"] == "molecular_fingerprint" else test
        accuracy, _, predicted = evaluate(model, part)
        kept = {k: log[k] for k in ("validation_accuracy", "best_epoch", "epochs", "seconds")}
        retrains.append({"seed": seed + r, "test_accuracy": accuracy, "test_predictions": predicted.tolist(), **kept})
        if on_training is not None:
            on_training(f"retrain {r}/{RETRAINS}", log)
    tests = [r["test_accuracy"] for r in retrains]
    extra = {} if tree_ids is None else {"tree_id_sizes": list(tree_ids.sizes_)}
    return {
        "device": str(device),
        "method": method,
        "dataset": dataset,
        "profile": profile,
        "grid": protocol["grid"],
        "fixed": fixed,
        **budget,
        "seed": seed,
        "split_sha256": split_sha256,
        "settings": scored,
        "selected": settings[best],
        "selected_index": best,
        "retrains": retrains,
        "test_accuracies": tests,
        "accuracy": float(np.mean(tests)),
        "test_indices": test_idx.tolist(),
        "seconds_selection": seconds_selection,
        "seconds_retrain": time.perf_counter() - start,
        **extra,
    }


def tree_id_fold_inputs(
    graphs: Sequence[Data], y, train_index, *, k: int = 2, min_graphs: int = 2
) -> tuple[PackedGraphs, TreeIDs]:
    """One fold's tree-ID node inputs: a :class:`mwsp_torch.TreeIDs` fitted on the graphs
    ``train_index`` only (those the networks train on; never the validation or test graphs),
    and every graph described by it (:func:`mwsp_torch.gnn.tree_id_features`): a tree the
    fit did not see, or saw in fewer than ``min_graphs`` training graphs, is the "unseen"
    column of its scale.

    Args:
        graphs (Sequence[Data]): the dataset's graphs.
        y: ``[n]`` class labels (packed beside the inputs; not read by the fit).
        train_index: the fold's inner training part.
        k (int): deepest scale (default ``2``).
        min_graphs (int): as :class:`mwsp_torch.TreeIDs` (default ``2``).

    Returns:
        ``(PackedGraphs of all graphs, the fitted TreeIDs)``.
    """
    train_index = np.asarray(train_index, dtype=np.int64).reshape(-1)
    tree_ids = TreeIDs(k=k, min_graphs=min_graphs).fit([graphs[int(i)] for i in train_index])
    x = tree_id_features(graphs, tree_ids)
    return PackedGraphs(x, [g.edge_index for g in graphs], y), tree_ids


def cell_path(root: str | os.PathLike, dataset: str, method: str, fold: int) -> Path:
    """``root/DATASET/METHOD/fold-NN.json``: where :func:`run_gnn_cell` keeps one fold's result."""
    return Path(root) / dataset / method / f"fold-{int(fold):02d}.json"


def _request(method, dataset, profile, grid, max_epochs, patience, seed, split_sha256, fold, input_width) -> dict:
    protocol = protocol_of(method, dataset, profile)
    request = {
        "format": CELL_FORMAT,
        "dataset": dataset,
        "method": method,
        "fold": int(fold),
        "input_width": input_width,
        "profile": profile,
        "grid": grid if grid is not None else protocol["grid"],
        "fixed": protocol["fixed"],
        "max_epochs": int(max_epochs or protocol["max_epochs"]),
        "patience": int(patience or protocol["patience"]),
        "seed": int(seed),
        "split_sha256": split_sha256,
    }
    return json.loads(json.dumps(request))  # as a cell on disk holds it (tuples as lists)


def run_gnn_cell(
    root: str | os.PathLike,
    graphs: Sequence[Data] | PackedGraphs,
    y,
    fold: Fold | dict,
    fold_index: int,
    *,
    method: str = "gin",
    dataset: str,
    profile: str = "cpu",
    grid: dict | None = None,
    max_epochs: int | None = None,
    patience: int | None = None,
    seed: int = 0,
    split_sha256: str = "",
    device=None,
    force: bool = False,
    on_training: Callable[[str, dict], None] | None = None,
) -> dict:
    """:func:`run_gnn_fold` kept as one JSON cell, :func:`cell_path` under ``root``.

    A cell already there is returned as it is when it was computed under the same request
    (method, dataset, fold, node inputs' width, profile, grid, fixed parameters, budget, seed,
    split file);
    one of another request is refused, so that a table never mixes protocols; ``force``
    recomputes it. The cell is written whole (a temporary file renamed), so a killed run
    leaves either the old cell or none.

    Args:
        root: the results folder (``experiments/results/raw/compare``, say).
        graphs, y, fold, method, dataset, profile, grid, max_epochs, patience, seed,
            split_sha256, device, on_training: as :func:`run_gnn_fold` (the device is kept in
            the cell but is not part of its request: a cell computed on a GPU serves a CPU run).
        fold_index (int): the fold's number in its split file (the cell's name).
        force (bool): recompute and overwrite a cell of any request (default ``False``).

    Returns:
        dict: the cell: ``request`` and :func:`run_gnn_fold`'s result, plus ``computed``
        (False where it was read from disk).

    Raises:
        CellMismatchError: the cell on disk has another request (and not ``force``).

    Examples:
        >>> import tempfile, numpy as np, torch
        >>> from torch_geometric.data import Data
        >>> graphs = [Data(edge_index=torch.zeros(2, 0, dtype=torch.long), num_nodes=1 + i % 2,
        ...                node_label=torch.zeros(1 + i % 2, dtype=torch.long)) for i in range(12)]
        >>> fold = {"train": np.arange(6), "validation": np.arange(6, 9), "test": np.arange(9, 12)}
        >>> root = tempfile.mkdtemp()
        >>> a = run_gnn_cell(root, graphs, np.arange(12) % 2, fold, 0, method="baseline", dataset="toy",
        ...                  max_epochs=3)
        >>> b = run_gnn_cell(root, graphs, np.arange(12) % 2, fold, 0, method="baseline", dataset="toy",
        ...                  max_epochs=3)
        >>> a["computed"], b["computed"], a["accuracy"] == b["accuracy"]
        (True, False, True)
    """
    if method not in TREE_ID_METHODS and not isinstance(graphs, PackedGraphs):
        graphs = pack_dataset(graphs, y, dataset)
    # The node inputs' width is part of the request (tree IDs: fitted per fold, named by `fixed`),
    # so that a cell computed on other inputs is refused, not reused.
    width = None if method in TREE_ID_METHODS else int(graphs.x.shape[1])
    request = _request(method, dataset, profile, grid, max_epochs, patience, seed, split_sha256, fold_index, width)
    path = cell_path(root, dataset, method, fold_index)
    if path.is_file() and not force:
        cell = json.loads(path.read_text())
        if cell.get("request") != request:
            stored = cell.get("request") or {}
            differ = sorted(k for k in set(stored) | set(request) if stored.get(k) != request.get(k))
            raise CellMismatchError(
                f"{path}: computed under another request ({', '.join(differ)} differ); "
                "pass force=True (--force) to recompute it, or use another results folder"
            )
        return {**cell, "computed": False}
    result = run_gnn_fold(
        graphs, y, fold, method=method, dataset=dataset, profile=profile, grid=request["grid"],
        max_epochs=request["max_epochs"], patience=request["patience"], seed=seed, split_sha256=split_sha256,
        device=device, on_training=on_training,
    )  # fmt: skip
    cell = {"request": request, "fold": int(fold_index), **result}
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(cell, indent=1) + "\n")
    tmp.replace(path)
    return {**cell, "computed": True}
