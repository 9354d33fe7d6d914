"""How close any rank-``m`` feature map can come to the full kernel, on the nested protocol's folds.

For every outer fold (seed 0) and every ``(lam, C)`` of the grid, with no selection (each
setting scored on every fold, so the rows compare representations, not selections):

- ``full``: SVC on the precomputed kernel ``exp(-lam W)`` of the training graphs;
- ``rank r``: LinearSVC on the best rank-``r`` map of the training kernel (its ``r`` largest
  eigenpairs, ``V S^(1/2)`` for training graphs and ``K(G, train) V S^(-1/2)`` for test ones).
  This is an oracle: it needs the full training kernel, which Nystroem exists to avoid, and
  its rank-``r`` kernel is the best rank-``r`` approximation of the training kernel
  (``--svc-ranks``: the same kernel through SVC, hinge loss and a free bias, instead);
- ``random m``: Nystroem features on the protocol's own random landmarks (``fold_landmarks``);
- ``greedy m``: Nystroem features on landmarks chosen by pivoted Cholesky on the training
  kernel (next landmark: the largest residual diagonal). It reads only the ``m`` landmarks'
  columns, so it costs the same ``n x m`` problems as random landmarks, but depends on lam.

The LinearSVC is the Nystroem protocol's (squared hinge, L2, primal). W is the full matrix
from the distance cache (computed and cached when absent).

    python benchmarks/nystroem_ceiling.py --dataset NCI1 --ranks 500 1000 2000 --m 500 1000

Writes the ``ceiling`` entry of ``benchmarks/results-nystroem.json`` (per dataset: each
row's accuracy on every fold; a run on other ``--lams`` or ``--Cs`` with the same setting
and folds adds its columns) and prints the table of ``benchmarks/README.md``.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np
from sklearn.svm import SVC, LinearSVC

from mwsp_torch import MWSP, load_dataset
from mwsp_torch.cache import cached_distances
from mwsp_torch.evaluation import nested_folds
from mwsp_torch.evaluation.nystroem import MAX_ITER, fold_landmarks, landmark_order
from mwsp_torch.kernel import laplacian_kernel
from mwsp_torch.nystroem import nystroem_normalization

RESULTS = Path(__file__).with_name("results-nystroem.json")


def pivoted_cholesky(kernel: np.ndarray, m: int) -> np.ndarray:
    """Positions of ``m`` landmarks picked greedily by the residual diagonal of ``kernel``
    (a unit diagonal, as ``exp(-lam W)`` has); reads ``m`` columns of it."""
    n = len(kernel)
    factor = np.zeros((n, m))
    residual = np.diag(kernel).astype(float).copy()
    chosen = []
    for t in range(m):
        j = int(np.argmax(residual))
        chosen.append(j)
        column = (kernel[:, j] - factor[:, :t] @ factor[j, :t]) / np.sqrt(residual[j])
        factor[:, t] = column
        residual = np.maximum(residual - column * column, 0.0)
        residual[chosen] = 0.0
    return np.array(chosen, dtype=np.int64)


def _linear(features_train, y_train, features_test, y_test, C: float) -> float:
    return LinearSVC(C=C, dual=False, max_iter=MAX_ITER).fit(features_train, y_train).score(features_test, y_test)


def _nystroem(kernel, landmarks, train, test, y, C) -> float:
    normalization, _, _ = nystroem_normalization(kernel[np.ix_(landmarks, landmarks)])
    features = kernel[:, landmarks] @ normalization
    return _linear(features[train], y[train], features[test], y[test], C)


def table(entry: dict) -> str:
    """Mean accuracy over the folds, one row per ``(lam, C)``, one column per method."""
    methods = list(entry["accuracies"])
    lines = ["| lam | C | " + " | ".join(methods) + " |", "|---|---|" + "---|" * len(methods)]
    for lam, C in sorted(map(tuple, entry["settings"])):
        scores = [entry["accuracies"][method].get(f"{lam}/{C}") for method in methods]
        cells = ["-" if score is None else f"{100 * np.mean(score):.2f}" for score in scores]
        lines.append(f"| {lam:g} | {C:g} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--dataset", default="NCI1")
    parser.add_argument("--d", type=int, default=2)
    parser.add_argument("--k", type=int, default=0)
    parser.add_argument("--ranks", type=int, nargs="+", default=[500, 1000, 2000])
    parser.add_argument("--m", type=int, nargs="*", default=[500, 1000])
    parser.add_argument(
        "--svc-ranks",
        type=int,
        nargs="*",
        default=[],
        help="also score SVC (hinge loss, free bias) on these ranks' kernels, to check the oracle's loss",
    )
    parser.add_argument("--lams", type=float, nargs="+", default=[0.01, 0.1])
    parser.add_argument("--Cs", type=float, nargs="+", default=[1.0, 10.0, 100.0])
    parser.add_argument("--n-outer", type=int, default=10)
    parser.add_argument("--n-jobs", type=int, default=-1)
    parser.add_argument("--table", action="store_true", help="print the stored table and stop")
    args = parser.parse_args()
    results = json.loads(RESULTS.read_text()) if RESULTS.exists() else {}
    if args.table:
        print(table(results["ceiling"][args.dataset]))
        return

    graphs, y = load_dataset(args.dataset)
    y = np.asarray(y)
    distances, _ = cached_distances(MWSP(d=args.d, k=args.k, n_jobs=args.n_jobs), graphs, args.dataset)
    order = landmark_order(len(y), 0)
    settings = [(lam, C) for lam in args.lams for C in args.Cs]
    accuracies: dict[str, dict[str, list]] = {}

    def record(method: str, lam: float, C: float, value: float) -> None:
        accuracies.setdefault(method, {}).setdefault(f"{lam}/{C}", []).append(float(value))

    start = time.perf_counter()
    for fold, (_, train, test, _) in enumerate(nested_folds(y, [0], args.n_outer)):
        for lam in args.lams:
            kernel = laplacian_kernel(distances, lam)
            k_train, k_test = kernel[np.ix_(train, train)], kernel[np.ix_(test, train)]
            values, vectors = np.linalg.eigh(k_train)
            values, vectors = values[::-1], vectors[:, ::-1]
            greedy = {m: train[pivoted_cholesky(k_train, m)] for m in args.m}
            # Each rank's positive eigenpairs, and for --svc-ranks its kernels, once per fold and lam.
            truncation = {r: (vectors[:, :r][:, values[:r] > 0], values[:r][values[:r] > 0])
                          for r in {*args.ranks, *args.svc_ranks}}  # fmt: skip
            low_kernels = {r: ((basis * values_r) @ basis.T, k_test @ basis @ basis.T)
                           for r, (basis, values_r) in truncation.items() if r in args.svc_ranks}  # fmt: skip
            for C in args.Cs:
                svc = SVC(kernel="precomputed", C=C).fit(k_train, y[train])
                record("full (SVC)", lam, C, svc.score(k_test, y[test]))
                for r in args.ranks:
                    basis, scale = truncation[r][0], np.sqrt(truncation[r][1])
                    accuracy = _linear(basis * scale, y[train], k_test @ basis / scale, y[test], C)
                    record(f"rank {r} (oracle)", lam, C, accuracy)
                for r in args.svc_ranks:
                    low_train, low_test = low_kernels[r]
                    low = SVC(kernel="precomputed", C=C).fit(low_train, y[train])
                    record(f"rank {r} (oracle, SVC)", lam, C, low.score(low_test, y[test]))
                for m in args.m:
                    random = fold_landmarks(order, train, m)
                    record(f"random m={m}", lam, C, _nystroem(kernel, random, train, test, y, C))
                    record(f"greedy m={m}", lam, C, _nystroem(kernel, greedy[m], train, test, y, C))
        print(f"fold {fold} done ({time.perf_counter() - start:.0f} s)", flush=True)

    entry = {
        "setting": [args.d, args.k],
        "settings": settings,
        "folds": f"nested_folds(y, [0], {args.n_outer}): the outer folds, no selection",
        "accuracies": accuracies,
        "seconds": time.perf_counter() - start,
    }
    results = json.loads(RESULTS.read_text()) if RESULTS.exists() else {}
    earlier = results.setdefault("ceiling", {}).get(args.dataset)
    if earlier and earlier["setting"] == entry["setting"] and earlier["folds"] == entry["folds"]:
        # Another lam or C grid on the same folds adds its columns; a setting run again is replaced.
        settings = [list(s) for s in earlier["settings"] if tuple(s) not in settings] + [list(s) for s in settings]
        for method, by_setting in earlier["accuracies"].items():
            accuracies[method] = {**by_setting, **accuracies.get(method, {})}
        entry = {**entry, "settings": settings, "accuracies": accuracies,
                 "seconds": earlier["seconds"] + entry["seconds"]}  # fmt: skip
    results["ceiling"][args.dataset] = entry
    RESULTS.write_text(json.dumps(results, indent=1) + "\n")
    print(table(entry))


if __name__ == "__main__":
    main()
