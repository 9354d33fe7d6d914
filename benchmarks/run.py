"""Benchmarks of mwsp_torch: feature time and peak memory, distance time per solver, the naive baseline.

Each (dataset, d, k) runs in a fresh subprocess so its peak RSS is its own. Per run:

- features: seconds and peak RSS of labels -> trees -> paths -> collapsed supports;
- exact: the compiled engine on all pairs (or, when the estimate exceeds
  ``--budget`` seconds, on a random sample of pairs, extrapolated and marked so);
- naive: the authors' approach (dense node rows, ``ot.dist`` + ``ot.emd2`` per pair)
  on a random sample of pairs in the same process, extrapolated to all pairs;
  the ratio naive / library includes the library's feature time; the library's
  distances are compared with the naive ones and, untimed, with a reference that takes
  its costs from ``scipy``'s ``cdist`` (``ot.dist`` rounds equal rows to ~1e-8 apart);
- sinkhorn: geomloss on the same sample, time and relative error against exact, per blur.

Usage::

    python benchmarks/run.py --root DIR --out benchmarks/results.json
    python benchmarks/run.py --datasets MUTAG NCI1 --settings 2,0 --budget 120
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

DATASETS = ("MUTAG", "PTC_MR", "ENZYMES", "PROTEINS", "NCI1", "DD", "REDDIT-BINARY")
SETTINGS = ((2, 0), (3, 1))
BLURS = (0.1, 0.01, 0.001)


def _peak_rss_gib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20


def sample_pairs(pairs, size: int):
    """The seeded random sample of ``pairs`` that estimates are taken on, in pair order
    (``sample_seconds.py`` times the same one)."""
    import numpy as np

    rng = np.random.default_rng(0)
    return pairs[np.sort(rng.choice(len(pairs), size=min(len(pairs), size), replace=False))]


def _reference_distance(features, ptr, i: int, j: int) -> float:
    """W of graphs ``i`` and ``j`` by ``ot.emd2`` on dense rows, with Euclidean costs from
    ``scipy``'s ``cdist`` (differences first, so equal rows cost exactly 0)."""
    import numpy as np
    import ot
    from scipy.spatial.distance import cdist

    a = features[ptr[i] : ptr[i + 1]].toarray()
    b = features[ptr[j] : ptr[j + 1]].toarray()
    return ot.emd2(np.full(len(a), 1 / len(a)), np.full(len(b), 1 / len(b)), cdist(a, b))


def one(args) -> dict:
    """One (dataset, d, k) in this process."""
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    import numpy as np
    import ot

    from mwsp_torch import MWSP
    from mwsp_torch.datasets import default_labels, load_dataset
    from mwsp_torch.transport import exact_distances, sinkhorn_distances, upper_pairs

    graphs, _ = load_dataset(args.dataset, root=args.root)
    labels = default_labels(args.dataset)
    n = len(graphs)
    model = MWSP(d=args.d, k=args.k, labels=labels, n_jobs=args.n_jobs)
    warm = MWSP(d=args.d, k=args.k, labels=labels).fit(graphs[:3])  # numba compile, not timed
    del warm
    start = time.perf_counter()
    support, features = model.supports(graphs)
    feature_seconds = time.perf_counter() - start
    feature_rss = _peak_rss_gib()
    pairs = upper_pairs(n)
    sample = sample_pairs(pairs, args.sample)

    start = time.perf_counter()
    sample_exact = exact_distances(support, support, sample, n_jobs=args.n_jobs)
    sample_seconds = time.perf_counter() - start
    estimate = sample_seconds * len(pairs) / len(sample)
    if estimate <= args.budget:
        start = time.perf_counter()
        exact_distances(support, support, pairs, n_jobs=args.n_jobs)
        exact_seconds, exact_measured = time.perf_counter() - start, "all pairs"
    else:
        exact_seconds, exact_measured = estimate, f"extrapolated from {len(sample)} random pairs"

    # The authors' approach on a smaller sample: dense rows, one ot.emd2 per pair.
    naive_pairs = sample[: args.naive_sample]
    sizes = support.sizes
    ptr = np.concatenate([[0], np.cumsum(sizes)])
    dense_cols = features.shape[1]
    start = time.perf_counter()
    naive = []
    try:
        for i, j in naive_pairs:
            a = features[ptr[i] : ptr[i + 1]].toarray()
            b = features[ptr[j] : ptr[j + 1]].toarray()
            cost = ot.dist(a, b, "euclidean")
            naive.append(ot.emd2(np.full(len(a), 1 / len(a)), np.full(len(b), 1 / len(b)), cost))
            if time.perf_counter() - start > args.naive_budget and len(naive) >= 5:
                break  # big dense rows: a time-boxed sample is enough for the extrapolation
        naive_error = None
    except MemoryError as error:  # the authors' dense rows do not fit: the library's figures still count
        naive_error = f"dense rows out of memory: {error}"
    if naive:
        naive_pairs = naive_pairs[: len(naive)]
        naive_seconds = (time.perf_counter() - start) * len(pairs) / len(naive_pairs)
        naive = np.array(naive)
        library = sample_exact[: len(naive_pairs)]
        max_rel = float(np.max(np.abs(naive - library) / np.maximum(np.abs(naive), 1e-300)))
        # ot.dist forms |a|^2 + |b|^2 - 2 a.b, which leaves ~sqrt(rounding) where two rows are
        # equal: the naive values themselves can be off by 1e-9 (ENZYMES d=2,k=0). The
        # reference takes differences first (scipy's cdist), untimed, on the same pairs.
        reference = np.array([_reference_distance(features, ptr, i, j) for i, j in naive_pairs])
        reference_rel = float(np.max(np.abs(reference - library) / np.maximum(np.abs(reference), 1e-300)))
    else:
        naive_pairs, naive_seconds, max_rel, reference_rel = naive_pairs[:0], None, None, None

    sinkhorn = []
    sk_pairs = sample[: args.sinkhorn_sample]
    for blur in BLURS if len(sk_pairs) else ():  # --sinkhorn-sample 0: no Sinkhorn rows
        start = time.perf_counter()
        approx = []
        for lo in range(0, len(sk_pairs), 32):  # time-boxed: big graphs make Sinkhorn slow on a CPU
            approx.append(sinkhorn_distances(support, support, sk_pairs[lo : lo + 32], blur=blur))
            if time.perf_counter() - start > args.sinkhorn_budget:
                break
        approx = np.concatenate(approx)
        seconds = time.perf_counter() - start
        exact_sk = sample_exact[: len(approx)]
        keep = exact_sk > 0
        rel = np.abs(approx[keep] - exact_sk[keep]) / exact_sk[keep]
        sinkhorn.append(
            {
                "blur": blur,
                "seconds_per_pair": seconds / len(approx),
                "rel_error_median": float(np.median(rel)),
                "rel_error_max": float(rel.max()),
                "pairs": len(approx),
            }
        )
    return {
        "dataset": args.dataset,
        "d": args.d,
        "k": args.k,
        "graphs": n,
        "pairs": len(pairs),
        "nodes_mean": float(sizes.mean()),
        "support_mean": float(np.diff(support.graph_ptr).mean()),
        "distinct_rows": int(support.rows.shape[0]),
        "feature_columns": int(dense_cols),
        "features_seconds": feature_seconds,
        "features_peak_rss_gib": feature_rss,
        "exact_seconds": exact_seconds,
        "exact_measured": exact_measured,
        "exact_us_per_pair": 1e6 * sample_seconds / len(sample),
        "naive_seconds_extrapolated": naive_seconds,
        "naive_sample_pairs": len(naive_pairs),
        "speedup_vs_naive": naive_seconds / (feature_seconds + exact_seconds) if naive_seconds else None,
        "naive_error": naive_error,
        "naive_vs_library_max_rel_diff": max_rel,
        "reference_vs_library_max_rel_diff": reference_rel,
        "sinkhorn_cpu": sinkhorn,
        "peak_rss_gib": _peak_rss_gib(),
        "n_jobs": args.n_jobs,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", default=os.environ.get("MWSP_DATA_ROOT"))
    parser.add_argument("--datasets", nargs="+", default=list(DATASETS))
    parser.add_argument("--settings", nargs="+", default=[f"{d},{k}" for d, k in SETTINGS], help="d,k pairs")
    parser.add_argument("--budget", type=float, default=600.0, help="max seconds for an all-pairs exact run")
    parser.add_argument("--sample", type=int, default=20000, help="random pairs for estimates")
    parser.add_argument("--naive-sample", type=int, default=500)
    parser.add_argument("--naive-budget", type=float, default=60.0, help="seconds for the naive sample")
    parser.add_argument("--sinkhorn-sample", type=int, default=256, help="0: no Sinkhorn (big graphs on a CPU)")
    parser.add_argument("--sinkhorn-budget", type=float, default=60.0, help="seconds per blur for the Sinkhorn sample")
    parser.add_argument("--n-jobs", type=int, default=2)
    parser.add_argument("--out", default="benchmarks/results.json")
    parser.add_argument("--one", nargs=3, metavar=("DATASET", "D", "K"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        args.dataset, args.d, args.k = args.one[0], int(args.one[1]), int(args.one[2])
        print(json.dumps(one(args)))
        return 0
    out = Path(args.out)
    results = json.loads(out.read_text()) if out.is_file() else []
    done = {(r["dataset"], r["d"], r["k"]) for r in results}
    for dataset in args.datasets:
        for setting in args.settings:
            d, k = (int(v) for v in setting.split(","))
            if (dataset, d, k) in done:
                print(f"{dataset} d={d} k={k}: already in {out}, skipped", file=sys.stderr)
                continue
            cmd = [
                sys.executable,
                __file__,
                "--one",
                dataset,
                str(d),
                str(k),
                "--budget",
                str(args.budget),
                "--sample",
                str(args.sample),
                "--naive-sample",
                str(args.naive_sample),
                "--naive-budget",
                str(args.naive_budget),
                "--sinkhorn-sample",
                str(args.sinkhorn_sample),
                "--sinkhorn-budget",
                str(args.sinkhorn_budget),
                "--n-jobs",
                str(args.n_jobs),
            ]
            if args.root:
                cmd += ["--root", args.root]
            print(f"{dataset} d={d} k={k} ...", file=sys.stderr, flush=True)
            proc = subprocess.run(cmd, capture_output=True, text=True)
            if proc.returncode != 0:
                results.append({"dataset": dataset, "d": d, "k": k, "error": proc.stderr.strip().splitlines()[-1]})
            else:
                results.append(json.loads(proc.stdout.strip().splitlines()[-1]))
            out.write_text(json.dumps(results, indent=2))  # resumable: finished runs are kept
            print(json.dumps(results[-1])[:400], file=sys.stderr, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
