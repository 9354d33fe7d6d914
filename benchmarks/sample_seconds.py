"""Exact transport on ``run.py``'s random pair sample, best of several runs, for any checkout.

``run.py`` times its sample once, so its extrapolations carry first-call costs and noise.
This script times the same pairs (``run.sample_pairs``, ``--sample`` of the upper pairs)
``--repeats`` times and prints every time. ``--tree`` picks the checkout whose
``mwsp_torch`` is imported, so an older revision can be timed back to back with this one:

    git worktree add ../mwsp-old OLD_COMMIT
    python benchmarks/sample_seconds.py --tree ../mwsp-old --dataset DD --d 2 --k 1
    python benchmarks/sample_seconds.py --dataset DD --d 2 --k 1
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("KEOPS_VERBOSE", "0")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tree", default=str(Path(__file__).resolve().parents[1]), help="checkout to import")
    parser.add_argument("--dataset", default="DD")
    parser.add_argument("--d", type=int, default=2)
    parser.add_argument("--k", type=int, default=1)
    parser.add_argument("--sample", type=int, default=1000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--n-jobs", type=int, default=2)
    args = parser.parse_args()
    sys.path.insert(0, str(Path(args.tree).resolve()))
    from run import sample_pairs

    import mwsp_torch
    from mwsp_torch import MWSP
    from mwsp_torch.datasets import default_labels, load_dataset
    from mwsp_torch.transport import exact_distances, upper_pairs

    graphs, _ = load_dataset(args.dataset)
    support, _ = MWSP(d=args.d, k=args.k, labels=default_labels(args.dataset)).supports(graphs)
    pairs = upper_pairs(len(graphs))
    sample = sample_pairs(pairs, args.sample)
    exact_distances(support, support, sample[:20], n_jobs=args.n_jobs)  # compile, warm
    seconds = []
    for _ in range(args.repeats):
        start = time.perf_counter()
        exact_distances(support, support, sample, n_jobs=args.n_jobs)
        seconds.append(time.perf_counter() - start)
    best = min(seconds)
    print(
        f"{args.dataset} d={args.d},k={args.k} {Path(mwsp_torch.__file__).parent}: {len(sample)} pairs, seconds "
        + ", ".join(f"{s:.2f}" for s in seconds)
        + f"; best extrapolated to all {len(pairs):,} pairs: {best * len(pairs) / len(sample):,.0f} s"
    )


if __name__ == "__main__":
    main()
