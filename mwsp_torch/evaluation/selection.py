"""The selection engine every protocol runs: inner cross-validation over candidates, the first
best mean inner accuracy wins, then one fit and score per outer fold.

A candidate is ``(setting, param, C)``: a setting (a W, a precomputed kernel, Nystroem
features of a W), one value of its own grid (``lam``; none for a fixed kernel) and the SVM's
``C``. A *learner* (:class:`~mwsp_torch.evaluation.learners.KernelSVM`, the Nystroem
protocol's linear SVM) makes a setting's data on a training part and its inner splits and
scores each ``C``; this module decides what to fit and in which order, the same for all:

- **Steps.** One step is one outer fold's inner cross-validation of one ``(setting, param)``
  over every ``C``. Steps run over ``n_jobs`` processes (one BLAS thread each) under one
  progress bar; the processes read the matrices from one memory-mapped copy.
- **Grid order.** A fold selects in grid order (setting, then param, then ``C``): the first
  best mean wins, whatever ``n_jobs`` and whatever was cut.
- **Floors.** A ``C`` whose partial sum, plus 100 % on every inner split still to come,
  stays below a mean its fold has already reached can never be selected, so its remaining
  fits are skipped and its score is NaN, which loses every comparison
  (:func:`can_still_win`). Each fold starts with the step that led the fold before
  (:func:`leader_first`), so the bar is high from the start. Selections do not change.
- **Checkpoints.** With a store (:mod:`~mwsp_torch.evaluation.store`) finished steps are read
  instead of computed and each new one is kept as it finishes.
"""

from __future__ import annotations

import tempfile
import warnings
from collections.abc import Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from joblib import Parallel, delayed, effective_n_jobs, parallel_config
from sklearn.exceptions import ConvergenceWarning
from tqdm.auto import tqdm

__all__ = [
    "FoldOutcome",
    "Selection",
    "can_still_win",
    "leader_first",
    "memory_mapped",
    "progress_disabled",
    "select",
    "step_scores",
]

#: How far below a fold's best mean a ``C``'s best possible mean must fall before its fits stop
#: (:func:`can_still_win`): far above rounding, far below the 1 / n steps of an accuracy.
FLOOR_MARGIN = 1e-9


@dataclass
class FoldOutcome:
    """One outer fold's result: the chosen ``(setting, param, C)``, its test accuracy in
    percent, its predictions on the fold's test graphs (in their order) and what the learner
    adds (the Nystroem protocol's landmarks)."""

    choice: tuple
    accuracy: float
    predictions: np.ndarray
    info: dict = field(default_factory=dict)


@dataclass
class Selection:
    """What :func:`select` returns: each fold's outcome, in fold order; how many steps a store
    gave; how many SVM fits this call made, and how many of them did not converge."""

    folds: list
    resumed_steps: int
    fits: int
    not_converged: int


def can_still_win(totals: np.ndarray, remaining: int, n_splits: int, floor: float) -> np.ndarray:
    """Which candidates, with inner accuracies summing to ``totals`` so far and ``remaining``
    of ``n_splits`` splits to come, could still reach the mean ``floor`` that another
    candidate of the same fold has reached (each accuracy is at most 1). A candidate that
    cannot is never selected, since the first best wins."""
    return (totals + remaining) / n_splits >= floor - FLOOR_MARGIN


def step_scores(learner, key, param, Cs, y: np.ndarray, train: np.ndarray, splits: list, floor=None, fold: int = 0):
    """One step: the mean inner-validation accuracy of each ``C`` for ``(key, param)`` on the
    training part ``train``, and the number of fits made.

    ``floor`` is a mean another step of the same fold has already reached: a ``C`` that cannot
    reach it (:func:`can_still_win`) is not fitted further and scores NaN. A learner that
    fits the whole ``C`` grid per call (``fits_whole_grid``) skips a split only when no ``C``
    can still win.

    Returns:
        ``(scores, fits)``: ``[len(Cs)]`` means (NaN where cut) and the SVM fits made.
    """
    floor = -np.inf if floor is None else floor
    totals = np.zeros(len(Cs))
    alive = np.ones(len(Cs), dtype=bool)
    fits = 0
    y_train = y[train]
    for j, ((inner_train, inner_valid), (x_fit, x_valid)) in enumerate(
        zip(splits, learner.inner(key, param, train, splits, fold), strict=True)
    ):
        fit = np.ones(len(Cs), dtype=bool) if learner.fits_whole_grid else alive
        Cs_fit = [C for C, wanted in zip(Cs, fit, strict=True) if wanted]
        totals[fit] += learner.accuracies(x_fit, y_train[inner_train], x_valid, y_train[inner_valid], Cs_fit)
        fits += len(Cs_fit)
        alive &= can_still_win(totals, len(splits) - j - 1, len(splits), floor)
        if not alive.any():
            break
    return np.where(alive, totals / len(splits), np.nan), fits


def _best_score(scores: np.ndarray) -> float:
    """A step's best mean, ``-inf`` when every ``C`` was cut."""
    kept = scores[~np.isnan(scores)]
    return float(kept.max()) if kept.size else -np.inf


@contextmanager
def _counting_convergence():
    """Counts scikit-learn's ConvergenceWarnings instead of showing them (a selection's result
    reports the count); other warnings pass through."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ConvergenceWarning)
        counter = [0]
        yield counter
    for warning in caught:
        if issubclass(warning.category, ConvergenceWarning):
            counter[0] += 1
        else:
            warnings.warn_explicit(warning.message, warning.category, warning.filename, warning.lineno)


def _step_task(learner, key, param, Cs, y, train, splits, floor, fold):
    with _counting_convergence() as counter:
        scores, fits = step_scores(learner, key, param, Cs, y, train, splits, floor, fold)
    return scores, fits, counter[0]


def _test_task(learner, choice, y, train, test, fold):
    with _counting_convergence() as counter:
        accuracy, predictions, info = learner.test(*choice, y, train, test, fold)
    return accuracy, predictions, info, counter[0]


def leader_first(todo: list, scores: Mapping):
    """``todo``'s steps ``(fold, key, param)`` fold by fold, each fold led by the
    ``(key, param)`` with the best mean of the fold before it so far: its floor is then high
    from the first step on, so the others skip more. Read lazily, as workers take steps."""
    folds = {}
    for step in todo:
        folds.setdefault(step[0], []).append(step)
    for f, fold_steps in folds.items():
        done = {}
        for _, key, param in fold_steps:
            if (f - 1, key, param) in scores:
                done[(key, param)] = _best_score(scores[(f - 1, key, param)])
        if done:
            leader = max(done, key=done.get)
            fold_steps.sort(key=lambda step: step[1:] != leader)
        yield from fold_steps


def progress_disabled(progress: bool | None) -> bool | None:
    """tqdm's ``disable`` for a ``progress`` argument: ``None`` shows the bar on a terminal
    only (so not under pytest, in a pipe or a log file)."""
    return None if progress is None else not progress


@contextmanager
def memory_mapped(arrays: Mapping, n_jobs: int):
    """``arrays`` (a mapping to arrays) with each array memory-mapped from one temporary file
    when more than one process works, so that every task names the files instead of carrying
    the arrays, or joblib hashing them once a task to map them itself: 9 settings of NCI1's
    W are 1.2 GB. With one process, ``arrays`` as given. The files go when the block ends."""
    if effective_n_jobs(n_jobs) == 1:
        yield arrays
        return
    with tempfile.TemporaryDirectory(prefix="mwsp-protocol-") as folder:
        mapped = {}
        for i, (key, array) in enumerate(arrays.items()):
            path = Path(folder) / f"a{i}.npy"
            np.save(path, np.ascontiguousarray(array))
            mapped[key] = np.load(path, mmap_mode="r")
        yield mapped


def select(
    learner,
    settings: Sequence,
    params: Mapping,
    Cs: Sequence[float],
    y: np.ndarray,
    folds: Sequence,
    n_jobs: int = 1,
    progress: bool | None = None,
    desc: str = "selection",
    store=None,
    floors: bool = True,
) -> Selection:
    """Select a candidate inside each outer fold and score it on the fold's test part.

    Args:
        learner: makes and scores a setting's data (``inner``, ``accuracies``, ``test``,
            ``shared``, ``fits_whole_grid``), as :class:`~mwsp_torch.evaluation.learners.KernelSVM`.
        settings: the setting keys in grid order.
        params: ``{key: tuple}``, each setting's own grid in order (``(None,)`` for none).
        Cs: the ``C`` grid.
        y (np.ndarray): ``[n]`` labels.
        folds: ``(train, test, inner_splits)`` for each outer fold, ``inner_splits`` being
            ``(inner_train, inner_valid)`` positions in ``train``.
        n_jobs (int): processes (results do not depend on it).
        progress (bool, optional): a bar over steps and final fits (``None``: on a terminal).
        desc (str): the bar's label.
        store: a :class:`~mwsp_torch.evaluation.store.SelectionStore`, or ``None``.
        floors (bool): skip the fits that can no longer win (default); ``False`` makes every
            fit, which selects the same.

    Returns:
        :class:`Selection`.
    """
    splits = [inner_splits for _, _, inner_splits in folds]
    steps = [(f, key, param) for f in range(len(folds)) for key in settings for param in params[key]]
    names = {step: (step[0], settings.index(step[1]), params[step[1]].index(step[2])) for step in steps}
    scores = {} if store is None else {step: store.steps[names[step]] for step in steps if names[step] in store.steps}
    resumed = len(scores)
    counts = {"fits": 0, "not_converged": 0}
    # Each fold's best mean so far: a step made later skips the C it cannot beat. Steps are made
    # as workers take them, so the floor is as fresh as the finished work.
    reached = {}
    for (f, _, _), step_result in scores.items():
        reached[f] = max(reached.get(f, -np.inf), _best_score(step_result))
    made = []  # the steps in the order their tasks were made, which is the order results come in

    def step_tasks():
        for f, key, param in leader_first([step for step in steps if step not in scores], scores):
            made.append((f, key, param))
            floor = reached.get(f) if floors else None
            yield delayed(_step_task)(shared, key, param, Cs, y, folds[f][0], splits[f], floor, f)

    # Resumed steps are the bar's start, not progress: its rate and estimate count new steps only.
    bar = tqdm(
        total=len(steps) + len(folds), initial=resumed, desc=desc, unit="step", disable=progress_disabled(progress)
    )
    with learner.shared(n_jobs) as shared, parallel_config(backend="loky", inner_max_num_threads=1), bar:
        # One step a task and no more in flight than workers: a step made later sees the floors
        # of every step finished before it (joblib's default would batch quick steps ahead).
        runner = Parallel(n_jobs=n_jobs, return_as="generator", batch_size=1, pre_dispatch="n_jobs")
        for i, (step_result, fits, not_converged) in enumerate(runner(step_tasks())):
            step = made[i]
            scores[step] = step_result
            counts["fits"] += fits
            counts["not_converged"] += not_converged
            if store is not None:
                store.add(names[step], step_result)
            # After the store: a step cut by this floor is never on disk without the step behind it.
            reached[step[0]] = max(reached.get(step[0], -np.inf), _best_score(step_result))
            bar.update()
        chosen = []
        for f in range(len(folds)):
            best, best_score = None, -1.0
            for key in settings:
                for param in params[key]:
                    for c, C in enumerate(Cs):
                        if scores[(f, key, param)][c] > best_score:
                            best, best_score = (key, param, C), scores[(f, key, param)][c]
            chosen.append(best)
        tasks = (
            delayed(_test_task)(shared, choice, y, train, test, f)
            for f, (choice, (train, test, _)) in enumerate(zip(chosen, folds, strict=True))
        )
        outcomes = []
        for choice, (accuracy, predictions, info, not_converged) in zip(chosen, runner(tasks), strict=True):
            outcomes.append(FoldOutcome(choice, accuracy, np.asarray(predictions), info))
            counts["fits"] += 1
            counts["not_converged"] += not_converged
            bar.update()
    return Selection(outcomes, resumed, counts["fits"], counts["not_converged"])
