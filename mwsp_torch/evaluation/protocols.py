"""The protocols around the kernel, as adapters of one selection engine
(:mod:`~mwsp_torch.evaluation.selection`) and one learner, an SVM on precomputed kernels
(:mod:`~mwsp_torch.evaluation.learners`). Both are named in their results:

- ``paper``: the authors' script. One fixed ``(d, k)``; ``np.random.seed(42)``
  then ``StratifiedKFold(10, shuffle=True)`` outer folds; on each training fold
  an unshuffled inner ``StratifiedKFold(5)`` picks ``lam`` (outer loop) and
  ``C`` (inner loop) jointly, the first best mean accuracy winning; then
  ``SVC(kernel="precomputed")`` on ``exp(-lam W)``; mean and std over the 10
  folds (fewer only when asked: ``n_splits``, for a class smaller than 10).
  The paper then picked ``(d, k)`` per dataset by this test accuracy, which is
  optimistic (:func:`paper_pick`).
- ``nested``: the honest one. For each seed, shuffled stratified outer folds (or a split
  file's, shared with other methods); on each training fold a shuffled, seeded inner CV
  selects ``(setting, lam, C)`` from the whole grid, which may mix W matrices and named
  precomputed kernels; the held-out fold is scored once. Mean and std over the
  repetitions' accuracies.

Accuracies are in percent. Every result carries the majority-class rate (a selection that
predicts one class is visible at a glance) and the accuracy ceiling of the inputs
(:func:`~mwsp_torch.evaluation.results.accuracy_ceiling`).
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence

import numpy as np
from sklearn.model_selection import StratifiedKFold

from mwsp_torch.evaluation.learners import KernelSVM, Precomputed
from mwsp_torch.evaluation.results import (
    accuracy_ceiling,
    inputs_digest,
    kernel_ceiling,
    majority_rate,
    repetition_summary,
    selected_setting,
)
from mwsp_torch.evaluation.selection import select
from mwsp_torch.evaluation.store import open_store
from mwsp_torch.evaluation.validation import (
    check_distances,
    check_folds,
    check_grid,
    check_inner_folds,
    check_kernel,
    check_labels,
    check_n_jobs,
    check_outer_folds,
    check_seeds,
    check_setting_keys,
    is_seed,
    weakest_class,
)

__all__ = [
    "NESTED_INNER_FOLDS",
    "PAPER_CS",
    "PAPER_LAMS",
    "nested_folds",
    "nested_protocol",
    "ordered_settings",
    "paper_pick",
    "paper_protocol",
]

#: The paper's grids (Sec. V-A).
PAPER_LAMS = tuple(float(v) for v in np.logspace(-4, 1, num=6))
PAPER_CS = tuple(float(v) for v in np.logspace(-3, 3, num=7))
#: The nested protocol's inner folds by default (the command line's too).
NESTED_INNER_FOLDS = 5


def paper_protocol(
    distances: np.ndarray,
    y: np.ndarray,
    lams: Sequence[float] = PAPER_LAMS,
    Cs: Sequence[float] = PAPER_CS,
    seed: int = 42,
    svm: str = "svc",
    krein: str = "flip",
    n_jobs: int = -1,
    progress: bool | None = None,
    n_splits: int = 10,
    svm_solver: str = "libsvm",
    checkpoint: str | os.PathLike | None = None,
) -> dict:
    """The authors' procedure on one distance matrix (one fixed ``(d, k)``).

    Args:
        distances (np.ndarray): ``[n, n]`` W: finite, ``>= 0``, symmetric, zero on the diagonal.
        y (np.ndarray): ``[n]`` class labels (a numpy array, list or torch tensor), at least 2 classes.
        lams, Cs: grids of finite numbers ``> 0`` (default: the paper's); any iterable, read once.
        seed (int): the global numpy seed the script sets before drawing its folds
            (default ``42``); numpy's global state is restored afterwards, so the caller's
            own draws do not change.
        svm (str): ``"svc"`` or ``"krein"`` (default ``"svc"``).
        krein (str): ``"flip"`` or ``"clip"`` when ``svm="krein"`` (default ``"flip"``).
        n_jobs (int): processes for the selection (default ``-1``: every core; results do not
            depend on it).
        progress (bool, optional): one tqdm bar over the whole selection (every fold's
            inner cross-validation of each ``lam``, then its final fit); ``True``, ``False``,
            or ``None`` (default): on a terminal only, so not under pytest or in a log.
        n_splits (int): outer folds (default ``10``, the authors'); a dataset whose
            smallest class has fewer graphs (Cuneiform: 8) needs fewer, and
            :func:`max_folds` says how many. Stated in the result.
        svm_solver (str): ``"libsvm"`` (default: scikit-learn's ``SVC``, the results of
            earlier runs) or ``"path"`` (:mod:`mwsp_torch.svm`: the same problem, each
            split's whole ``C`` grid in one call; equal to libsvm's within its stopping
            tolerance, and many times faster on small graphs sets, ``benchmarks/README.md``).
        checkpoint (path, optional): a directory where each finished selection step is kept
            (:mod:`mwsp_torch.evaluation.store`), so that the same call started again after a
            kill computes only the rest and selects exactly the same; created if missing,
            and shared freely (each call's steps go to a file named by its inputs). Delete
            it when the results are saved.

    Returns:
        dict with ``accuracy_mean``, ``accuracy_std`` (percent, std over the
        outer folds), ``fold_accuracies``, ``selected`` (lam, C per fold),
        ``majority_rate``, ``accuracy_ceiling`` (:func:`accuracy_ceiling`), ``grid``,
        ``resumed_steps`` (steps read from ``checkpoint``) and ``protocol``.

    Raises:
        ValueError: naming the argument, for a ``y`` that is not 1-D (a column ``[n, 1]``
            included) or has one class, a W that is not ``[len(y), len(y)]``, finite, ``>= 0``,
            symmetric and zero on the diagonal (to ``DISTANCE_SYMMETRY_TOL`` of its largest
            entry: a kernel in place of W is refused), an empty or
            non-positive grid, a seed that is not an integer, or too many folds.
    """
    y = check_labels(y)
    lams, Cs = check_grid(lams, "lams"), check_grid(Cs, "Cs")
    if not is_seed(seed):
        raise ValueError(f"seed must be an integer in [0, 2**32 - 1], got {seed!r}: results must be reproducible")
    distances = check_distances(distances, len(y), "distances")
    check_n_jobs(n_jobs)
    check_folds(y, n_splits, "n_splits")
    label, _, kept = weakest_class(y, n_splits)
    if kept < 5:  # its inner StratifiedKFold(5) (the script's), not a parameter
        raise ValueError(
            f"the paper protocol's 5 inner folds need every class to keep 5 graphs in each training fold, but "
            f"class {label!r} keeps as few as {kept} with n_splits={n_splits}"
        )
    learner = KernelSVM({None: distances}, svm, krein, svm_solver)
    # The script seeds numpy's global generator, and its folds and SVCs draw from it (each
    # SVC fit draws a libsvm seed, unused without probability estimates). The caller's
    # global state is put back afterwards.
    caller_state = np.random.get_state()
    try:
        np.random.seed(seed)
        outer = StratifiedKFold(n_splits=n_splits, shuffle=True)
        inner = StratifiedKFold(n_splits=5, shuffle=False)
        folds = [
            (train, test, list(inner.split(np.zeros(len(train)), y[train])))
            for train, test in outer.split(np.zeros(len(y)), y)
        ]
        params = {None: lams}
        inputs = [(None, "distances", [distances])]
        with open_store(checkpoint, "paper", inputs, y, folds, params, Cs, (svm, krein, svm_solver)) as store:
            selection = select(learner, [None], params, Cs, y, folds, n_jobs, progress, "paper protocol", store)
    finally:
        np.random.set_state(caller_state)
    accuracies = [fold.accuracy for fold in selection.folds]
    return {
        "protocol": "paper",
        "accuracy_unit": "percent",
        "accuracy_mean": float(np.mean(accuracies)),
        "accuracy_std": float(np.std(accuracies)),
        "fold_accuracies": accuracies,
        "selected": [{"lam": fold.choice[1], "C": fold.choice[2]} for fold in selection.folds],
        "majority_rate": majority_rate(y),
        "accuracy_ceiling": accuracy_ceiling(distances, y),
        "grid": {"lam": list(lams), "C": list(Cs)},
        "outer_folds": n_splits,
        "svm": svm if svm == "svc" else f"krein-{krein}",
        "svm_solver": svm_solver,
        "seed": seed,
        "resumed_steps": selection.resumed_steps,
        "svm_fits": selection.fits,
    }


def paper_pick(distances: Mapping, y, **options) -> tuple:
    """The paper's choice among settings: :func:`paper_protocol` on each W, and the setting
    whose *test* accuracy is best. Optimistic by construction (the test folds pick the
    setting), which is how the paper's tables were made; :func:`nested_protocol` is the
    honest alternative.

    Args:
        distances: ``{key: W}``, in the order ties are broken (the first best wins).
        y: ``[n]`` class labels.
        **options: :func:`paper_protocol`'s other arguments, the same for every setting.

    Returns:
        ``(best_key, {key: result})``.

    Examples:
        >>> best, runs = paper_pick({(2, 0): W20, (3, 1): W31}, y)  # doctest: +SKIP
        >>> runs[best]["accuracy_mean"]  # doctest: +SKIP
    """
    if not isinstance(distances, Mapping) or not distances:
        raise ValueError("distances must be a non-empty mapping {setting: W}")
    runs = {key: paper_protocol(w, y, **options) for key, w in distances.items()}
    best = max(runs, key=lambda key: runs[key]["accuracy_mean"])
    return best, runs


def nested_folds(
    y: np.ndarray,
    seeds: Sequence[int],
    n_outer: int = 10,
    n_inner: int = NESTED_INNER_FOLDS,
    outer_folds: Sequence | None = None,
) -> list[tuple[int, np.ndarray, np.ndarray, list]]:
    """The nested protocol's folds: ``(seed, train, test, inner_splits)`` for each outer fold
    of each repetition, ``inner_splits`` being ``(inner_train, inner_test)`` positions in
    ``train``. Each seed draws ``StratifiedKFold(n_outer, shuffle=True, random_state=seed)``
    outside (or takes ``outer_folds``, already checked) and the same with ``n_inner`` inside
    each training fold. Every protocol scored on "the nested protocol's folds" (the Nystroem
    one included) takes them from here."""
    folds = []
    for seed in seeds:
        inner = StratifiedKFold(n_splits=n_inner, shuffle=True, random_state=seed)
        if outer_folds is None:
            outer = StratifiedKFold(n_splits=n_outer, shuffle=True, random_state=seed)
            given = list(outer.split(np.zeros(len(y)), y))
        else:
            given = outer_folds
        for train, test in given:
            folds.append((seed, train, test, list(inner.split(np.zeros(len(train)), y[train]))))
    return folds


def nested_protocol(
    distances: Mapping,
    y: np.ndarray,
    lams: Sequence[float] = PAPER_LAMS,
    Cs: Sequence[float] = PAPER_CS,
    seeds: Sequence[int] | None = None,
    n_outer: int = 10,
    n_inner: int = NESTED_INNER_FOLDS,
    svm: str = "svc",
    krein: str = "flip",
    n_jobs: int = -1,
    progress: bool | None = None,
    outer_folds: Sequence | None = None,
    svm_solver: str = "libsvm",
    checkpoint: str | os.PathLike | None = None,
) -> dict:
    """Nested cross-validation selecting ``(setting, lam, C)`` inside each training fold.

    Args:
        distances: ``{(d, k): W}`` for every setting of the grid; ``d``, ``k`` integers ``>= 0``,
            each W as in :func:`paper_protocol`; or ``{(d, k, beta): W}`` where the grid also
            spans the attributes' weight ``beta`` (``MWSP(attributes=..., beta=...)``). Named
            settings (string keys) may stand beside them: a W (its kernels over ``lams``) or a
            :class:`~mwsp_torch.evaluation.learners.Precomputed` kernel (GraKeL's WL, a
            fused kernel; no ``lam``), one matrix or one per outer fold. Ties go to the
            first in grid order (:func:`ordered_settings`).
        y (np.ndarray): ``[n]`` class labels (a numpy array, list or torch tensor), at least 2 classes.
        lams, Cs: grids of finite numbers ``> 0`` (default: the paper's); any iterable, read once.
        seeds: one repetition per seed, distinct integers (default ``0..9``; ``(0,)`` with
            ``outer_folds``).
        n_outer, n_inner (int): folds (default ``10`` and ``5``); ``n_outer`` is ignored when
            ``outer_folds`` is given.
        svm, krein (str): as in :func:`paper_protocol`.
        n_jobs (int): processes for the selection (default ``-1``: every core; results do not
            depend on it).
        progress (bool, optional): as in :func:`paper_protocol` (a step: one outer fold's
            inner cross-validation of one ``(d, k)`` and ``lam``).
        outer_folds: the outer folds of one repetition, ``[(train, test), ...]`` index arrays
            (a split file's folds, :mod:`mwsp_torch.splits`, shared with other methods): the
            test folds must partition ``0..n-1`` and each train must not meet its test. Then
            ``seeds`` holds one seed, which draws the inner folds.
        svm_solver (str): as in :func:`paper_protocol`.
        checkpoint (path, optional): as in :func:`paper_protocol`: a killed selection
            started again resumes from its finished steps.

    Returns:
        dict with ``accuracy_mean`` and ``accuracy_std`` (percent; over the
        repetitions' mean accuracies: each repetition scores every graph once, so a model
        that errs on the same graphs whatever the folds has a std of 0),
        ``repetition_accuracies``, ``fold_accuracies``, ``fold_accuracy_std``, ``selected``,
        ``majority_rate``, ``accuracy_ceiling`` (:func:`accuracy_ceiling`), ``grid``,
        ``outer_folds``, ``inner_folds``, ``outer_folds_given``, ``inputs_sha256``
        (:func:`inputs_digest`), ``svm``, ``svm_solver``, ``seeds``, ``resumed_steps``,
        ``svm_fits`` (the fits this call made), ``fold_predictions`` (each outer fold's
        predictions on its test graphs, in their order: for paired tests) and ``protocol``.
        A named setting's selections read ``kernel`` instead of ``d`` and ``k``.

    Examples:
        >>> from mwsp_torch import MWSP, load_tudataset, nested_protocol
        >>> from mwsp_torch.evaluation import Precomputed
        >>> graphs, y = load_tudataset("MUTAG", root="tests/data")  # doctest: +SKIP
        >>> W = {(d, 0): MWSP(d=d, k=0).fit(graphs).distances_ for d in (1, 2)}  # doctest: +SKIP
        >>> nested_protocol({**W, "wl": Precomputed(K_wl)}, y)["accuracy_mean"]  # doctest: +SKIP

    Raises:
        ValueError: as :func:`paper_protocol` does (a W's messages name its key), for keys
            that are neither ``(d, k)`` pairs of integers ``>= 0`` nor names, a kernel that is
            not square, finite and symmetric, or empty ``seeds``.
    """
    y = check_labels(y)
    lams, Cs = check_grid(lams, "lams"), check_grid(Cs, "Cs")
    if seeds is None:
        seeds = (0,) if outer_folds is not None else tuple(range(10))
    seeds = check_seeds(seeds)
    check_setting_keys(distances)
    check_n_jobs(n_jobs)
    if outer_folds is not None:
        if len(seeds) != 1:
            raise ValueError(
                f"with outer_folds, seeds must hold one seed (it draws the inner folds), got {list(seeds)}: "
                "the outer folds are fixed, so further repetitions would repeat them"
            )
        given = check_outer_folds(outer_folds, y, n_inner)
        n_outer = len(given)
    else:
        check_folds(y, n_outer, "n_outer")
        check_inner_folds(y, n_outer, n_inner)
    keys = ordered_settings(distances)
    folds = nested_folds(y, seeds, n_outer, n_inner, None if outer_folds is None else given)
    settings, kernels = _checked_settings(distances, keys, len(y), len(folds))
    learner = KernelSVM(settings, svm, krein, svm_solver)
    params = {key: learner.params(key, lams) for key in keys}
    fold_seeds = [seed for seed, *_ in folds]
    jobs = [(train, test, splits) for _, train, test, splits in folds]
    inputs = [
        (key, "kernel", settings[key].matrices) if key in kernels else (key, "distances", [settings[key]])
        for key in keys
    ]
    with open_store(checkpoint, "nested", inputs, y, jobs, params, Cs, (svm, krein, svm_solver)) as store:
        selection = select(learner, keys, params, Cs, y, jobs, n_jobs, progress, "nested CV", store)
    distance_settings = {key: settings[key] for key in keys if key not in kernels}
    tuple_keys = [key for key in keys if isinstance(key, tuple)]
    ceilings = [accuracy_ceiling(w, y) for w in distance_settings.values()]
    ceilings += [kernel_ceiling(settings[key].matrix(0), y) for key in kernels if not settings[key].per_fold]
    return {
        "protocol": "nested",
        **repetition_summary([fold.accuracy for fold in selection.folds], n_outer),
        "selected": [
            selected_setting(seed, *fold.choice) for seed, fold in zip(fold_seeds, selection.folds, strict=True)
        ],
        "fold_predictions": [fold.predictions.tolist() for fold in selection.folds],
        "majority_rate": majority_rate(y),
        "accuracy_ceiling": max(ceilings) if ceilings else None,
        "grid": {
            **(
                {"d": sorted({key[0] for key in tuple_keys}), "k": sorted({key[1] for key in tuple_keys})}
                if tuple_keys
                else {}
            ),
            **({"beta": sorted({key[2] for key in tuple_keys})} if tuple_keys and len(tuple_keys[0]) == 3 else {}),
            "settings": [list(key) if isinstance(key, tuple) else key for key in keys],
            **({"kernels": list(kernels)} if kernels else {}),
            "lam": list(lams),
            "C": list(Cs),
        },
        "outer_folds": n_outer,
        "inner_folds": n_inner,
        "outer_folds_given": outer_folds is not None,
        "inputs_sha256": inputs_digest(
            distance_settings, y, {key: settings[key].matrices for key in kernels} if kernels else None
        ),
        "svm": svm if svm == "svc" else f"krein-{krein}",
        "svm_solver": svm_solver,
        "seeds": list(seeds),
        "resumed_steps": selection.resumed_steps,
        "svm_fits": selection.fits,
    }


def ordered_settings(settings: Mapping) -> list:
    """Setting keys in grid order, the order ties are broken in: ``(d, k[, beta])`` keys
    sorted, then named ones sorted."""
    tuples = sorted(key for key in settings if isinstance(key, tuple))
    return tuples + sorted(key for key in settings if not isinstance(key, tuple))


def _checked_settings(settings: Mapping, keys: list, n: int, n_folds: int) -> tuple[dict, list]:
    """Every setting checked once (W by :func:`check_distances`, a :class:`Precomputed`
    kernel by :func:`check_kernel`, one matrix or one per outer fold), and the keys of the
    kernels."""
    checked, kernels = {}, []
    for key in keys:
        value = settings[key]
        if isinstance(value, Precomputed):
            if value.per_fold and len(value.matrices) != n_folds:
                raise ValueError(
                    f"distances[{key!r}] holds {len(value.matrices)} kernels, one per outer fold, but the protocol "
                    f"scores {n_folds} outer folds"
                )
            matrices = [
                check_kernel(k, n, f"distances[{key!r}]" + (f"[{i}]" if value.per_fold else ""))
                for i, k in enumerate(value.matrices)
            ]
            checked[key] = Precomputed(matrices if value.per_fold else matrices[0])
            kernels.append(key)
        else:
            checked[key] = check_distances(value, n, f"distances[{key!r}]")
    return checked, kernels
