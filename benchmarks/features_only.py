"""Feature extraction alone (labels, tree IDs, path features, collapsed supports) for any checkout.

One process, one dataset: prints the seconds ``MWSP.supports`` took on the whole dataset
and the process's peak RSS. ``--tree`` picks the checkout whose ``mwsp_torch`` is imported,
so an older revision can be measured back to back with this one (run each in its own
process: the peak RSS is the process's). ``--check W.npy`` also checks a distance matrix
of the same setting (finite, symmetric, zero diagonal) and compares 30 random pairs of it
with POT's network simplex on the collapsed supports:

    git worktree add ../mwsp-old OLD_COMMIT
    python benchmarks/features_only.py --tree ../mwsp-old --dataset REDDIT-BINARY --d 2 --k 2
    python benchmarks/features_only.py --dataset REDDIT-BINARY --d 2 --k 2 --check W.npy
"""

from __future__ import annotations

import argparse
import os
import resource
import sys
import time
from pathlib import Path

os.environ.setdefault("KEOPS_VERBOSE", "0")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tree", default=str(Path(__file__).resolve().parents[1]), help="checkout to import")
    parser.add_argument("--dataset", default="REDDIT-BINARY")
    parser.add_argument("--d", type=int, default=2)
    parser.add_argument("--k", type=int, default=2)
    parser.add_argument("--check", metavar="W.npy", help="a distance matrix of this setting to check")
    args = parser.parse_args()
    sys.path.insert(0, str(Path(args.tree).resolve()))
    import numpy as np

    import mwsp_torch
    from mwsp_torch import MWSP
    from mwsp_torch.datasets import default_labels, load_dataset

    graphs, _ = load_dataset(args.dataset)
    start = time.perf_counter()
    support, features = MWSP(d=args.d, k=args.k, labels=default_labels(args.dataset)).supports(graphs)
    seconds = time.perf_counter() - start
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20  # kB to GiB
    print(
        f"{Path(mwsp_torch.__file__).parent} {args.dataset} d={args.d} k={args.k}: features {seconds:.2f} s, "
        f"{features.nnz} entries, {support.rows.shape[0]} distinct rows, peak RSS {peak:.2f} GiB"
    )
    if args.check:
        from mwsp_torch.transport import pot_distances

        w = np.load(args.check)
        off_diagonal = w[np.triu_indices(len(w), 1)]
        print(
            f"finite {bool(np.isfinite(w).all())}, symmetric {bool(np.array_equal(w, w.T))}, "
            f"zero diagonal {bool(np.all(np.diag(w) == 0))}, zeros off the diagonal {int(np.sum(off_diagonal == 0))}"
        )
        pairs = np.random.default_rng(0).integers(len(w), size=(40, 2))
        pairs = pairs[pairs[:, 0] != pairs[:, 1]][:30]
        reference = pot_distances(support, support, pairs)
        relative = np.abs(w[pairs[:, 0], pairs[:, 1]] - reference) / np.maximum(reference, 1e-300)
        print(f"{len(pairs)} random pairs against POT: max relative difference {relative.max():.2e}")


if __name__ == "__main__":
    main()
