"""``fusion``: MWSP's kernel fused with a GIN's class probabilities, selected as honestly as MWSP.

On each outer fold, with MWSP's distances W and per-graph GIN class probabilities p, the
candidates are the kernels

    K = a * exp(-lam * W) + (1 - a) * exp(-gamma * ||p_i - p_j||^2)

over ``a`` in :attr:`FusionGrid.a` (``a = 1``: MWSP alone, exactly its candidates; ``a = 0``:
the GIN's probabilities alone), the ``mwsp`` grid's ``(d, k)`` and ``lam``, ``gamma`` in
:attr:`FusionGrid.gammas`, and every ``C``. Probabilities, not embeddings: the networks of
different folds embed into spaces that are not aligned, while their probability vectors all
live in one simplex. The GIN is one fixed setting (:data:`FUSION_GIN`) and budget, chosen
before any fold was scored, never tuned on a test fold.

**Cross-fitting, at both levels.** ``(a, d, k, lam, gamma, C)`` is chosen by the same seeded
inner 5-fold CV of the outer training part T as the ``mwsp`` method (the folds
:func:`mwsp_torch.evaluation.nested_folds` draws, ``J_1 .. J_5``), then refitted on T and
scored once on the test part S. Each (fit part, scored part) pair of that procedure gets
probabilities that no label of its scored part shaped, made the same way:

- the outer fit (T against S): GIN ``m`` is trained on ``T - J_m``; each training graph in
  ``J_m`` gets GIN ``m``'s probabilities (out of fold: its own label never trained the
  network that describes it), each test graph the mean of the five GINs' (stacking);
- inner split ``j`` (``T - J_j`` against ``J_j``): the same construction on the fit part
  ``T - J_j`` with its four inner folds. GIN ``{j, m}`` is trained on ``T - J_j - J_m``; a
  graph of ``J_m`` gets its probabilities, a graph of ``J_j`` the mean of the four GINs
  trained without ``J_j``. One GIN per unordered pair serves both splits ``j`` and ``m``.

So 5 + 10 GINs per outer fold, each early-stopped on a stratified hold-out drawn inside its
own training graphs. Cross-fitting the outer probabilities alone is not enough: the inner CV
would fit its SVM on graphs of ``J_m`` described by GIN ``m``, which trained on ``J_j``, the
fold it scores, so the selection would read the labels it is scored on. Hence the inner
splits' own probabilities, and a learner (:class:`FusedKernels`) that gives each inner split
its kernel. The selection is the library's engine (:func:`mwsp_torch.evaluation.select`,
the same grid-order ties, first best wins) over the same folds as ``nested_protocol``; only
the kernels differ by split, which ``Precomputed`` (one matrix per outer fold) cannot carry.

Cells under ``root/DATASET/fusion/``: ``fold-NN.npz`` holds an outer fold's probabilities
(resumable; refused for another request), ``all-folds.json`` the result, in the kernel
methods' format (:func:`mwsp_torch.compare.kernels.run_kernel_cell`). The selection keeps its
finished steps in a checkpoint, as the kernel cells' does
(:func:`~mwsp_torch.compare.kernels.selection_checkpoint`): on NCI1 it runs for many hours, and
a run killed part way computes only the steps left.
"""

from __future__ import annotations

import json
import os
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from itertools import combinations
from pathlib import Path

import numpy as np
from tqdm.auto import tqdm

from mwsp_torch.compare.kernels import KernelGrid, drop_checkpoint, kernel_settings, selection_checkpoint
from mwsp_torch.evaluation import KernelSVM, check_outer_folds, majority_rate, memory_mapped, nested_folds, select
from mwsp_torch.evaluation.selection import progress_disabled
from mwsp_torch.evaluation.store import open_store
from mwsp_torch.kernel import laplacian_kernel

__all__ = [
    "FUSION_GIN",
    "FusedKernels",
    "FusionGrid",
    "fold_probabilities",
    "fusion_candidates",
    "fusion_cell_path",
    "gin_probabilities",
    "probability_cell_path",
    "run_fusion_cell",
]

CELL_FORMAT = 1
#: The one GIN setting fusion trains: the CPU grid's 2 layers of 32 with dropout 0.5 (its
#: smallest regularised member: fusion trains 15 networks per outer fold, each on 3/5 or 4/5
#: of the training part).
FUSION_GIN = {"batch_size": 128, "hidden_units": [32, 32], "train_eps": True, "aggregation": "sum", "dropout": 0.5,
              "monitor": "accuracy"}  # fmt: skip


@dataclass(frozen=True)
class FusionGrid:
    """What fusion searches beside the ``mwsp`` grid's ``(d, k)``, ``lam`` and ``C``, and its GIN.

    ``a`` in grid order: ties between candidates go to the first, so ``a = 1`` first keeps MWSP
    alone where a fused kernel does not score strictly better. ``gammas`` scale squared
    distances between probability vectors, which lie in ``[0, 2]``. ``max_epochs`` and
    ``patience`` ``None``: the ``gin`` method's profile's budget."""

    a: tuple = (1.0, 0.75, 0.5, 0.25, 0.0)
    gammas: tuple = (1.0, 10.0, 100.0)
    gin: dict = field(default_factory=lambda: dict(FUSION_GIN))
    max_epochs: int | None = None
    patience: int | None = None
    holdout: float = 0.1

    def describe(self, grid: KernelGrid) -> str:
        """What fusion searched, in words (a table's ``grid`` column)."""
        settings = " ".join(f"({d},{k})" for d, k in grid.mwsp)
        return (
            f"a in {list(self.a)} x (d,k) in {settings} x lam in {list(grid.lams)} x gamma in {list(self.gammas)} x "
            f"C in {list(grid.Cs)}; inner 5-fold CV on each outer training part, each split with its own "
            f"cross-fitted GIN probabilities (GIN {self.gin['hidden_units']}, dropout {self.gin['dropout']})"
        )


def fusion_candidates(settings, lams, grid: FusionGrid) -> dict:
    """``{name: (setting, a, lam, gamma)}`` in grid order (``a``, then ``(d, k)``, ``lam``,
    ``gamma``); ``a = 1`` takes no ``gamma`` and ``a = 0`` no setting or ``lam``, so no two
    candidates are one kernel."""
    out = {}
    for a in grid.a:
        a = float(a)
        for setting in (None,) if a == 0 else sorted(settings):
            for lam in (None,) if a == 0 else lams:
                for gamma in (None,) if a == 1 else grid.gammas:
                    where = "" if setting is None else f"-d{setting[0]}k{setting[1]}-lam{lam:g}"
                    out[f"fusion-a{a:g}{where}" + ("" if gamma is None else f"-g{gamma:g}")] = (setting, a, lam, gamma)
    return out


def _fused(distances, probabilities, candidate, rows, cols) -> np.ndarray:
    setting, a, lam, gamma = candidate
    if a > 0:
        k_w = laplacian_kernel(distances[setting][np.ix_(rows, cols)], lam)
        if a == 1:
            return k_w  # exactly MWSP's kernel
    p, q = probabilities[rows], probabilities[cols]
    k_p = np.exp(-gamma * np.maximum(((p[:, None, :] - q[None, :, :]) ** 2).sum(-1), 0.0))
    return k_p if a == 0 else a * k_w + (1 - a) * k_p


class FusedKernels(KernelSVM):
    """An SVM on fused kernels whose probabilities depend on the split: the outer fit and test
    read ``outer[f]``, inner split ``j`` of outer fold ``f`` reads ``inner[f][j]`` (each
    ``[n, classes]``, rows for the graphs of that fold's training and test parts).

    Args:
        distances: ``{(d, k): W}``.
        candidates: :func:`fusion_candidates`.
        outer: per outer fold, the probabilities of its outer fit and test.
        inner: per outer fold, per inner split, the probabilities that split reads.
        solver (str): ``"libsvm"`` or ``"path"``.
    """

    def __init__(self, distances, candidates, outer, inner, solver: str = "libsvm") -> None:
        super().__init__({}, "svc", "flip", solver)
        self.distances, self.candidates, self.outer, self.inner_probabilities = distances, candidates, outer, inner

    def params(self, key, lams) -> tuple:
        return (None,)

    def block(self, key, param, rows, cols, fold: int = 0) -> np.ndarray:
        return _fused(self.distances, self.outer[fold], self.candidates[key], rows, cols)

    def inner(self, key, param, train, splits, fold: int = 0):
        for j, (inner_train, inner_valid) in enumerate(splits):
            probabilities = self.inner_probabilities[fold][j]
            fit, scored = train[inner_train], train[inner_valid]
            candidate = self.candidates[key]
            yield (
                _fused(self.distances, probabilities, candidate, fit, fit),
                _fused(self.distances, probabilities, candidate, scored, fit),
            )

    @contextmanager
    def shared(self, n_jobs: int):
        arrays = {("w", key): w for key, w in self.distances.items()}
        arrays.update({("outer", f): p for f, p in enumerate(self.outer)})
        arrays.update({("inner", f, j): p for f, ps in enumerate(self.inner_probabilities) for j, p in enumerate(ps)})
        with memory_mapped(arrays, n_jobs) as m:
            yield FusedKernels(
                {key: m[("w", key)] for key in self.distances},
                self.candidates,
                [m[("outer", f)] for f in range(len(self.outer))],
                [[m[("inner", f, j)] for j in range(len(ps))] for f, ps in enumerate(self.inner_probabilities)],
                self.solver,
            )


def gin_probabilities(packed, fit, y_fit, scored, num_classes: int, *, setting: dict, fixed: dict, max_epochs: int,
                      patience: int, holdout: float = 0.1, seed: int = 0, device=None) -> np.ndarray:  # fmt: skip
    """A GIN trained on the graphs ``fit`` (labels ``y_fit``, the only labels it is given),
    early-stopped on a stratified ``holdout`` share of them, and its class probabilities
    (softmax) of the graphs ``scored``: ``[len(scored), num_classes]``."""
    import torch
    from sklearn.model_selection import StratifiedShuffleSplit

    from mwsp_torch.gnn import fit_classifier
    from mwsp_torch.gnn_protocol import build_model

    fit, y_fit = np.asarray(fit), np.asarray(y_fit, dtype=np.int64)
    held = max(int(round(holdout * len(fit))), num_classes)
    part, valid = next(StratifiedShuffleSplit(1, test_size=held, random_state=seed).split(fit, y_fit))
    train, validation = packed.subset(fit[part]), packed.subset(fit[valid])
    train.y, validation.y = torch.from_numpy(y_fit[part]), torch.from_numpy(y_fit[valid])
    torch.manual_seed(seed)
    model = build_model("gin", setting, int(packed.x.shape[1]), num_classes)
    fit_classifier(
        model, train, validation, batch_size=setting["batch_size"], lr=fixed["lr"],
        weight_decay=fixed.get("weight_decay", 0.0), step_size=fixed["step_size"], gamma=fixed["gamma"],
        max_epochs=max_epochs, patience=patience, monitor=setting["monitor"], seed=seed, device=device,
    )  # fmt: skip
    batch = packed.subset(np.asarray(scored)).to(next(model.parameters()).device).batch()
    model.eval()
    with torch.no_grad():
        scores = model(batch.x, batch.edge_index, batch.batch, batch.num_graphs)
    return torch.softmax(scores.double(), 1).cpu().numpy()


def fold_probabilities(packed, y, train, test, inner_splits, num_classes: int, *, seed: int = 0, **gin) -> dict:
    """One outer fold's cross-fitted probabilities (the module's scheme).

    Args:
        packed: the graphs' GIN inputs (:class:`~mwsp_torch.gnn.PackedGraphs`; its labels unread).
        y: ``[n]`` labels; only those of ``train`` are read.
        train, test: the outer fold's parts (graph indices).
        inner_splits: ``(inner_train, inner_valid)`` positions in ``train``, the selection's.
        num_classes (int): classes.
        seed (int): the GINs' seeds are ``seed + 0 .. seed + 14``.
        **gin: :func:`gin_probabilities`'s ``setting``, ``fixed``, ``max_epochs``, ``patience``,
            ``holdout``, ``device``.

    Returns:
        dict: ``outer`` ``[n, classes]`` (rows of ``train`` out of fold, of ``test`` stacked,
        NaN elsewhere) and ``inner`` ``[splits, n, classes]`` (split ``j``'s rows of ``train``).
    """
    y, train, test = np.asarray(y), np.asarray(train), np.asarray(test)
    parts = [train[valid] for _, valid in inner_splits]
    n, folds = len(y), len(parts)
    outer = np.full((n, num_classes), np.nan)
    inner = np.full((folds, n, num_classes), np.nan)
    stacked = np.zeros((len(test), num_classes))
    gins = [(m,) for m in range(folds)] + list(combinations(range(folds), 2))
    for g, left_out in enumerate(gins):
        fit = np.concatenate([parts[m] for m in range(folds) if m not in left_out])
        scored = [parts[m] for m in left_out] + ([test] if len(left_out) == 1 else [])
        p = gin_probabilities(packed, fit, y[fit], np.concatenate(scored), num_classes, seed=seed + g, **gin)
        pieces = np.split(p, np.cumsum([len(s) for s in scored])[:-1])
        if len(left_out) == 1:
            outer[parts[left_out[0]]] = pieces[0]
            stacked += pieces[1] / folds
        else:
            j, m = left_out
            inner[j][parts[m]], inner[m][parts[j]] = pieces[1], pieces[0]  # out of fold within each split's fit
            inner[j][parts[j]] = np.nan_to_num(inner[j][parts[j]]) + pieces[0] / (folds - 1)  # stacked
            inner[m][parts[m]] = np.nan_to_num(inner[m][parts[m]]) + pieces[1] / (folds - 1)
    outer[test] = stacked
    return {"outer": outer, "inner": inner}


def probability_cell_path(root, dataset: str, fold: int) -> Path:
    """``root/DATASET/fusion/fold-NN.npz``: one outer fold's probabilities."""
    return Path(root) / dataset / "fusion" / f"fold-{int(fold):02d}.npz"


def fusion_cell_path(root, dataset: str) -> Path:
    """``root/DATASET/fusion/all-folds.json``: the result, as a kernel method's cell."""
    return Path(root) / dataset / "fusion" / "all-folds.json"


def _gin_request(grid: FusionGrid, dataset: str, profile: str) -> dict:
    from mwsp_torch.gnn_protocol import protocol_of

    protocol = protocol_of("gin", dataset, profile)
    return {
        "setting": grid.gin,
        "fixed": protocol["fixed"],
        "max_epochs": int(grid.max_epochs or protocol["max_epochs"]),
        "patience": int(grid.patience or protocol["patience"]),
        "holdout": grid.holdout,
    }


def _write(path: Path, write) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.stem}.{os.getpid()}.tmp{path.suffix}")
    write(tmp)
    tmp.replace(path)


def _refuse(path, stored: dict, request: dict) -> None:
    if stored != request:
        differ = sorted(k for k in set(stored) | set(request) if stored.get(k) != request.get(k))
        raise ValueError(f"{path}: computed under another request ({', '.join(differ)} differ): pass force=True")


def run_fusion_cell(
    root,
    graphs,
    y,
    splits,
    *,
    dataset: str,
    labels: str = "auto",
    grid: KernelGrid | None = None,
    fusion: FusionGrid | None = None,
    profile: str = "cpu",
    seed: int = 0,
    n_jobs: int = -1,
    progress: bool | None = None,
    force: bool = False,
    device=None,
) -> dict:
    """``fusion`` on every outer fold of ``splits`` (a :class:`~mwsp_torch.splits.OuterSplits`),
    kept as cells: each fold's probabilities (:func:`probability_cell_path`), then the result
    (:func:`fusion_cell_path`), each returned when there for the same request and refused for
    another unless ``force``.

    Args:
        root: the cells' folder.
        graphs, y: the dataset.
        splits: the split file's folds.
        dataset (str): its name.
        labels (str): MWSP's label policy.
        grid (KernelGrid, optional): ``(d, k)``, ``lam`` and ``C`` (the ``mwsp`` method's).
        fusion (FusionGrid, optional): ``a``, ``gamma`` and the GIN.
        profile (str): the GIN's fixed training parameters and default budget.
        seed (int): draws the inner folds, as the kernel methods' (default ``0``).
        n_jobs (int): processes for W and the selection.
        progress (bool, optional): bars.
        force (bool): recompute cells of another request.
        device: torch device of the GINs.

    Returns:
        The cell: as :func:`~mwsp_torch.compare.kernels.run_kernel_cell`'s (``selected`` with
        ``d, k, a, lam, gamma, C``; ``None`` where a candidate has none), plus ``computed``
        and, when computed, ``resumed_steps`` (selection steps read from the checkpoint).
    """
    from mwsp_torch.gnn_protocol import pack_dataset

    grid, fusion = grid or KernelGrid(), fusion or FusionGrid()
    y = np.asarray(y)
    # labels zero: the networks read only the labels they are given
    packed = pack_dataset(graphs, np.zeros(len(y)), dataset)
    # The inputs' width is part of the request, so that cells of other node inputs are refused.
    gin = {**_gin_request(fusion, dataset, profile), "input_width": int(packed.x.shape[1])}
    base = {"format": CELL_FORMAT, "dataset": dataset, "seed": int(seed), "split_sha256": splits.sha256, "gin": gin}
    grid_request = {"mwsp": grid.mwsp, "lams": grid.lams, "Cs": grid.Cs, "a": fusion.a, "gammas": fusion.gammas}
    request = json.loads(json.dumps({**base, "method": "fusion", "labels": labels, "grid": grid_request}))
    path = fusion_cell_path(root, dataset)
    if path.is_file() and not force:
        cell = json.loads(path.read_text())
        _refuse(path, cell.get("request", {}), request)
        return {**cell, "computed": False}
    folds = nested_folds(y, (seed,), outer_folds=check_outer_folds(splits.pairs(), y, 5))
    num_classes = len(np.unique(y))
    outer, inner, gin_seconds = [], [], 0.0
    bar = tqdm(folds, desc=f"{dataset} fusion GINs", unit="fold", disable=progress_disabled(progress))
    for f, (_, train, test, inner_splits) in enumerate(bar):
        cell_path = probability_cell_path(root, dataset, f)
        fold_request = json.loads(json.dumps({**base, "fold": f}))
        if cell_path.is_file() and not force:
            stored = np.load(cell_path)
            _refuse(cell_path, json.loads(str(stored["request"])), fold_request)
            probabilities = {"outer": stored["outer"], "inner": stored["inner"]}
            gin_seconds += float(stored["seconds"])
        else:
            start = time.perf_counter()
            probabilities = fold_probabilities(
                packed, y, train, test, inner_splits, num_classes, seed=1000 * f, setting=gin["setting"],
                fixed=gin["fixed"], max_epochs=gin["max_epochs"], patience=gin["patience"],
                holdout=gin["holdout"], device=device,
            )  # fmt: skip
            seconds = time.perf_counter() - start
            gin_seconds += seconds
            _write(cell_path, lambda tmp, p=probabilities, s=seconds, r=fold_request: np.savez(
                tmp, request=json.dumps(r), outer=p["outer"], inner=p["inner"], seconds=s))  # fmt: skip
        outer.append(probabilities["outer"])
        inner.append(list(probabilities["inner"]))
    distances, kernel_seconds = kernel_settings("mwsp", graphs, dataset, labels, grid, n_jobs, bool(progress))
    candidates = fusion_candidates(distances, grid.lams, fusion)
    learner = FusedKernels(distances, candidates, outer, inner)
    keys = list(candidates)
    start = time.perf_counter()
    jobs = [(train, test, inner_splits) for _, train, test, inner_splits in folds]
    params = {key: (None,) for key in keys}
    checkpoint = selection_checkpoint(dataset, "fusion", splits)
    inputs, named, options = _fingerprinted(learner, candidates)
    with open_store(checkpoint, "fusion", inputs, y, jobs, named, grid.Cs, options) as store:
        selection = select(learner, keys, params, grid.Cs, y, jobs, n_jobs, progress, "fusion", store)
    accuracies = [fold.accuracy for fold in selection.folds]
    cell = {
        "request": request,
        "dataset": dataset,
        "method": "fusion",
        "folds": [
            {
                "fold": f,
                "accuracy": outcome.accuracy,
                "selected": _selected(seed, outcome.choice, candidates),
                "test_indices": np.asarray(test).tolist(),
                "test_predictions": outcome.predictions.tolist(),
            }
            for f, (outcome, (_, test, _)) in enumerate(zip(selection.folds, jobs, strict=True))
        ],
        "accuracy_mean": float(np.mean(accuracies)),
        "accuracy_std": float(np.std(accuracies)),
        "majority_rate": majority_rate(y),
        "grid_text": fusion.describe(grid),
        "seconds_kernel": kernel_seconds + gin_seconds,
        "seconds_gin": gin_seconds,
        "seconds_selection": time.perf_counter() - start,
        "split_sha256": splits.sha256,
    }
    _write(path, lambda tmp: tmp.write_text(json.dumps(cell, indent=1) + "\n"))
    drop_checkpoint(checkpoint)
    return {**cell, "computed": True, "resumed_steps": selection.resumed_steps}


def _fingerprinted(learner: FusedKernels, candidates: dict) -> tuple:
    """What names a fusion selection's checkpoint (:func:`~mwsp_torch.evaluation.store.open_store`'s
    ``inputs``, ``params`` and ``options``): each W and probability matrix once (not once a
    candidate), and the candidates in grid order, which the steps are numbered by."""
    inputs = [(f"W{key}", "distances", [w]) for key, w in sorted(learner.distances.items())]
    inputs += [(f"outer{f}", "probabilities", [p]) for f, p in enumerate(learner.outer)]
    inputs += [(f"inner{f}", "probabilities", list(ps)) for f, ps in enumerate(learner.inner_probabilities)]
    grid_order = json.dumps([[name, *map(repr, c)] for name, c in candidates.items()])
    options = (learner.svm, learner.krein, learner.solver, grid_order)
    return inputs, {name: (None,) for name, _, _ in inputs}, options


def _selected(seed: int, choice: tuple, candidates: dict) -> dict:
    key, _, C = choice
    setting, a, lam, gamma = candidates[key]
    d, k = (None, None) if setting is None else (int(setting[0]), int(setting[1]))
    return {"seed": seed, "kernel": key, "d": d, "k": k, "a": a, "lam": lam, "gamma": gamma, "C": C}
