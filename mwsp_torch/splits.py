"""Outer fold files shared by every method of a comparison, checked, and named by their SHA-256.

A comparison of kernels and GNNs is only fair on identical folds, and only honest when no
method selects on a test fold. Following Errica et al. (2020, diningphil/gnn-comparison,
which ships its ``data_splits/`` as JSON), the folds of a dataset are drawn once, written
to one JSON file, and every method reads that file; the file's SHA-256 goes into every
result row, so two rows that claim the same folds can be checked to have them.

A file holds ``n_splits`` stratified outer folds (``StratifiedKFold(shuffle=True,
random_state=seed)``, seed 42 by default as Errica's), and inside each training fold a
stratified hold-out (``holdout``, 10 %) for the methods that select on one (the GNNs'
model selection and early stopping); the kernel methods draw their inner cross-validation
from the training fold themselves (:func:`mwsp_torch.nested_protocol` with
``outer_folds=``). The class labels' SHA-256 is stored too, so a file read against another
dataset (or another order of its graphs) is refused rather than silently misused.

Errica et al.'s own files (their ``data_splits/NAME_splits.json``, a JSON list of folds
``{"test": [...], "model_selection": [{"train": [...], "validation": [...]}]}``) are read by
:func:`load_errica_splits` into the same :class:`OuterSplits`, with the same checks and the
file's SHA-256, so their published GNN figures can be compared on exactly their folds;
:func:`read_split_file` reads either format.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from sklearn.model_selection import StratifiedKFold, train_test_split

__all__ = [
    "SPLIT_FORMAT",
    "Fold",
    "OuterSplits",
    "ensure_splits",
    "labels_sha256",
    "load_errica_splits",
    "load_splits",
    "make_splits",
    "read_split_file",
    "save_splits",
    "sha256_of",
]

#: Raised whenever the file layout changes; a file of another format is refused.
SPLIT_FORMAT = 1


@dataclass(frozen=True)
class Fold:
    """One outer fold: ``train`` and ``test`` partition the graphs; ``validation`` is the
    hold-out inside ``train`` (a subset of it) and ``inner_train`` the rest of ``train``."""

    train: np.ndarray
    validation: np.ndarray
    test: np.ndarray

    @property
    def inner_train(self) -> np.ndarray:
        return np.setdiff1d(self.train, self.validation)


@dataclass(frozen=True)
class OuterSplits:
    """The outer folds of one dataset, as a split file holds them.

    Attributes:
        dataset (str): the dataset's name.
        num_graphs (int): how many graphs the folds cover (``0..num_graphs - 1``).
        seed (int): the seed the folds were drawn with.
        holdout (float): the share of each training fold held out as ``validation``.
        labels_sha256 (str): SHA-256 of the class labels (int64) the folds were stratified on.
        folds (tuple[Fold, ...]): the folds, in order.
        sha256 (str): SHA-256 of the file's bytes (of the bytes :func:`save_splits` writes).
        source (str): the file's format: ``"mwsp"`` (:func:`save_splits`) or ``"errica"``
            (:func:`load_errica_splits`; ``seed`` is then ``-1``, unknown, and ``holdout`` the
            first fold's share of validation graphs).
    """

    dataset: str
    num_graphs: int
    seed: int
    holdout: float
    labels_sha256: str
    folds: tuple[Fold, ...]
    sha256: str
    source: str = "mwsp"

    def pairs(self) -> list[tuple[np.ndarray, np.ndarray]]:
        """``[(train, test), ...]``, as :func:`mwsp_torch.nested_protocol`'s ``outer_folds`` takes them."""
        return [(fold.train, fold.test) for fold in self.folds]


def labels_sha256(y) -> str:
    """SHA-256 of the class labels as int64, in graph order."""
    return hashlib.sha256(np.ascontiguousarray(np.asarray(y), dtype=np.int64).tobytes()).hexdigest()


def _encode(payload: dict) -> bytes:
    # One line per fold list keeps the file diffable and its bytes fixed by the content alone.
    return (json.dumps(payload, sort_keys=True, separators=(",", ":")) + "\n").encode()


def make_splits(y, dataset: str, n_splits: int = 10, seed: int = 42, holdout: float = 0.1) -> OuterSplits:
    """Draw ``n_splits`` stratified outer folds, and a stratified hold-out in each training fold.

    Args:
        y: ``[n]`` class labels.
        dataset (str): the dataset's name (stored in the file).
        n_splits (int): outer folds (default ``10``).
        seed (int): seed of the outer folds and the hold-outs (default ``42``, Errica's).
        holdout (float): share of each training fold held out for validation, in ``(0, 1)``
            (default ``0.1``).

    Returns:
        The folds, with the SHA-256 of the bytes :func:`save_splits` writes for them.

    Raises:
        ValueError: for a ``holdout`` outside ``(0, 1)`` or a class with fewer graphs than folds.
    """
    y = np.asarray(y)
    if not 0 < holdout < 1:
        raise ValueError(f"holdout must be in (0, 1), got {holdout!r}")
    _, counts = np.unique(y, return_counts=True)
    if counts.min() < n_splits:
        raise ValueError(
            f"{dataset}: {n_splits} stratified folds need every class to have {n_splits} graphs, "
            f"the smallest has {counts.min()}"
        )
    outer = StratifiedKFold(n_splits=n_splits, shuffle=True, random_state=seed)
    folds = []
    for train, test in outer.split(np.zeros(len(y)), y):
        _, validation = train_test_split(train, test_size=holdout, stratify=y[train], random_state=seed)
        folds.append({"train": train.tolist(), "validation": np.sort(validation).tolist(), "test": test.tolist()})
    payload = {
        "format": SPLIT_FORMAT,
        "dataset": dataset,
        "num_graphs": len(y),
        "seed": seed,
        "holdout": holdout,
        "labels_sha256": labels_sha256(y),
        "folds": folds,
    }
    return _from_payload(payload, hashlib.sha256(_encode(payload)).hexdigest(), f"the folds drawn for {dataset}", y)


def save_splits(splits: OuterSplits, path: str | os.PathLike) -> str:
    """Write ``splits`` to ``path`` once; returns the file's SHA-256.

    A file already there with the same bytes is left alone; one with other bytes is
    refused: the folds of a comparison are written once, and every method reads them.

    Raises:
        FileExistsError: ``path`` holds other folds.
    """
    path = Path(path)
    payload = {
        "format": SPLIT_FORMAT,
        "dataset": splits.dataset,
        "num_graphs": splits.num_graphs,
        "seed": splits.seed,
        "holdout": splits.holdout,
        "labels_sha256": splits.labels_sha256,
        "folds": [
            {"train": f.train.tolist(), "validation": f.validation.tolist(), "test": f.test.tolist()}
            for f in splits.folds
        ],
    }
    data = _encode(payload)
    if path.is_file():
        if path.read_bytes() != data:
            raise FileExistsError(
                f"{path} holds other folds (SHA-256 {sha256_of(path)}); a split file is written "
                "once and read by every method: delete it only to start the comparison anew"
            )
        return hashlib.sha256(data).hexdigest()
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_bytes(data)
    tmp.replace(path)
    return hashlib.sha256(data).hexdigest()


def sha256_of(path: str | os.PathLike) -> str:
    """SHA-256 of a file's bytes."""
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def load_splits(path: str | os.PathLike, y=None) -> OuterSplits:
    """Read and check a split file; with ``y``, check it against the dataset too.

    Raises:
        ValueError: naming the file and the fault: another format, a fold whose indices are
            not integers in ``0..num_graphs - 1``, a test fold meeting its train fold, test
            folds that overlap or miss graphs, a ``train`` that is not the complement of its
            ``test``, a ``validation`` outside its ``train``, or (with ``y``) another number
            of graphs or other class labels than the folds were drawn for.
    """
    path = Path(path)
    data = path.read_bytes()
    try:
        payload = json.loads(data)
    except json.JSONDecodeError as err:
        raise ValueError(f"{path}: not a split file (not JSON: {err})") from None
    if not isinstance(payload, dict) or payload.get("format") != SPLIT_FORMAT:
        got = payload.get("format") if isinstance(payload, dict) else type(payload).__name__
        raise ValueError(f"{path}: not a split file of format {SPLIT_FORMAT} (format {got!r})")
    return _from_payload(payload, hashlib.sha256(data).hexdigest(), str(path), y)


def _indices(values, n: int, where: str) -> np.ndarray:
    array = np.asarray(values)
    if array.ndim != 1 or (array.size and array.dtype.kind not in "iu"):
        raise ValueError(f"{where}: expected a list of graph indices (integers)")
    array = array.astype(np.int64)
    if array.size and (array.min() < 0 or array.max() >= n):
        bad = array[(array < 0) | (array >= n)][0]
        raise ValueError(f"{where}: graph index {bad} outside 0..{n - 1}")
    if len(np.unique(array)) != len(array):
        raise ValueError(f"{where}: a graph index repeats")
    return array


def _from_payload(payload: dict, sha256: str, where: str, y) -> OuterSplits:
    try:
        n, folds_raw = int(payload["num_graphs"]), payload["folds"]
        dataset, seed, holdout, stored_labels = (
            payload["dataset"],
            payload["seed"],
            payload["holdout"],
            payload["labels_sha256"],
        )
    except (KeyError, TypeError, ValueError) as err:
        raise ValueError(
            f"{where}: a split file needs num_graphs, folds, dataset, seed, holdout, labels_sha256 ({err!r})"
        ) from None
    if y is not None:
        y = np.asarray(y)
        if len(y) != n:
            raise ValueError(f"{where}: folds of {n} graphs, but the dataset has {len(y)}")
        if labels_sha256(y) != stored_labels:
            raise ValueError(
                f"{where}: the folds were drawn for other class labels (another dataset, or its graphs "
                "in another order)"
            )
    folds, covered = [], np.zeros(n, dtype=np.int64)
    for f, fold in enumerate(folds_raw):
        train, validation, test = (
            _indices(fold.get(key, []), n, f"{where}, fold {f}, {key}") for key in ("train", "validation", "test")
        )
        if len(test) == 0:
            raise ValueError(f"{where}, fold {f}: empty test fold")
        met = np.intersect1d(train, test)
        if len(met):
            raise ValueError(f"{where}, fold {f}: graph {met[0]} is in both train and test")
        if len(train) + len(test) != n:
            missing = np.setdiff1d(np.arange(n), np.concatenate([train, test]))
            raise ValueError(f"{where}, fold {f}: graph {missing[0]} is in neither train nor test")
        outside = np.setdiff1d(validation, train)
        if len(outside):
            raise ValueError(f"{where}, fold {f}: validation graph {outside[0]} is not in the training fold")
        covered[test] += 1
        folds.append(Fold(train=train, validation=validation, test=test))
    if len(folds) < 2:
        raise ValueError(f"{where}: {len(folds)} folds; at least 2 are needed")
    if (covered != 1).any():
        g = int(np.argmax(covered != 1))
        what = "in no test fold" if covered[g] == 0 else f"in {covered[g]} test folds"
        raise ValueError(f"{where}: graph {g} is {what}; the test folds must partition the graphs")
    return OuterSplits(
        dataset=str(dataset),
        num_graphs=n,
        seed=int(seed),
        holdout=float(holdout),
        labels_sha256=str(stored_labels),
        folds=tuple(folds),
        sha256=sha256,
    )


def ensure_splits(
    path: str | os.PathLike, y, dataset: str, n_splits: int = 10, seed: int = 42, holdout: float = 0.1
) -> OuterSplits:
    """The split file at ``path`` checked against ``y``, drawn and written first if there is none.

    Args:
        path: the file (``NAME.json`` under a folds directory, say).
        y, dataset, n_splits, seed, holdout: as in :func:`make_splits` (used only when drawing).

    Returns:
        The folds as read back from the file (so ``sha256`` is the file's).
    """
    path = Path(path)
    if not path.is_file():
        save_splits(make_splits(y, dataset, n_splits=n_splits, seed=seed, holdout=holdout), path)
    return load_splits(path, y=y)


def load_errica_splits(path: str | os.PathLike, y=None, num_graphs: int | None = None) -> OuterSplits:
    """Read and check a split file of Errica et al.'s ``data_splits/`` format.

    The file is a JSON list of outer folds ``{"test": [...], "model_selection": [{"train":
    [...], "validation": [...]}]}`` (graph indices in the order of the TU raw files). Fold
    ``i`` becomes a :class:`Fold` whose ``test`` and ``validation`` are the file's lists in
    the file's order, and whose ``train`` is the sorted union of the file's ``train`` and
    ``validation`` (so :attr:`Fold.inner_train` is the file's ``train``, sorted).

    Args:
        path: the file (``CHEMICAL/NCI1_splits.json``, say).
        y: ``[n]`` class labels of the dataset the folds are read for (optional): sets the
            number of graphs and the stored ``labels_sha256``.
        num_graphs (int, optional): the number of graphs, where ``y`` is not given (default:
            one more than the largest index in the file).

    Returns:
        The folds, with ``source="errica"`` and the SHA-256 of the file's bytes.

    Raises:
        ValueError: naming the file and the fold, for a file that is not such a list, a fold
            with other keys or more than one ``model_selection`` split, indices that are not
            integers in ``0..n - 1`` or repeat, test, train and validation that meet or do not
            cover every graph, or test parts that do not partition the graphs.
    """
    path = Path(path)
    data = path.read_bytes()
    where = str(path)
    try:
        payload = json.loads(data)
    except json.JSONDecodeError as err:
        raise ValueError(f"{where}: not a split file (not JSON: {err})") from None
    if not isinstance(payload, list) or not all(isinstance(fold, dict) for fold in payload):
        raise ValueError(f"{where}: not an Errica et al. split file (expected a JSON list of folds)")
    if y is not None:
        n = len(np.asarray(y))
        if num_graphs is not None and num_graphs != n:
            raise ValueError(f"{where}: num_graphs={num_graphs} but y has {n} labels")
    elif num_graphs is not None:
        n = int(num_graphs)
    else:
        tops = [max(fold.get("test") or [-1]) for fold in payload]
        n = max(tops, default=-1) + 1
    folds = []
    for f, fold in enumerate(payload):
        at = f"{where}, fold {f}"
        if set(fold) != {"test", "model_selection"}:
            raise ValueError(f"{at}: expected the keys test and model_selection, got {sorted(fold)}")
        selection = fold["model_selection"]
        if not isinstance(selection, list) or len(selection) != 1 or not isinstance(selection[0], dict):
            raise ValueError(f"{at}: expected one model_selection split (a hold-out), got {selection!r:.80}")
        test = _indices(fold["test"], n, f"{at}, test")
        inner = _indices(selection[0].get("train", []), n, f"{at}, train")
        validation = _indices(selection[0].get("validation", []), n, f"{at}, validation")
        for (a, name_a), (b, name_b) in (
            ((inner, "train"), (test, "test")),
            ((validation, "validation"), (test, "test")),
            ((inner, "train"), (validation, "validation")),
        ):
            met = np.intersect1d(a, b)
            if len(met):
                raise ValueError(f"{at}: graph {met[0]} is in both {name_a} and {name_b}")
        if len(test) == 0 or len(inner) == 0 or len(validation) == 0:
            raise ValueError(f"{at}: an empty test, train or validation part")
        if len(test) + len(inner) + len(validation) != n:
            missing = np.setdiff1d(np.arange(n), np.concatenate([test, inner, validation]))
            raise ValueError(f"{at}: graph {missing[0]} is in none of test, train and validation")
        folds.append({"train": np.sort(np.concatenate([inner, validation])).tolist(), "validation":
                      validation.tolist(), "test": test.tolist()})  # fmt: skip
    first = folds[0] if folds else {"train": [1], "validation": []}
    checked = _from_payload(
        {
            "num_graphs": n,
            "folds": folds,
            "dataset": path.name.removesuffix("_splits.json"),
            "seed": -1,
            "holdout": len(first["validation"]) / max(len(first["train"]), 1),
            "labels_sha256": labels_sha256(y) if y is not None else "",
        },
        hashlib.sha256(data).hexdigest(),
        where,
        y,
    )
    return OuterSplits(**{**checked.__dict__, "source": "errica"})


def read_split_file(path: str | os.PathLike, y=None) -> OuterSplits:
    """A split file of either format, checked: :func:`load_splits`' own (a JSON object) or
    :func:`load_errica_splits`' (a JSON list)."""
    path = Path(path)
    try:
        head = path.read_bytes().lstrip()[:1]
    except OSError as err:
        raise ValueError(f"{path}: cannot read the split file ({err})") from None
    return load_errica_splits(path, y=y) if head == b"[" else load_splits(path, y=y)
