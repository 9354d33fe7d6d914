"""GIN and the structure-agnostic baseline trained as Errica et al. (2020) trained them, on their folds.

A thin runner over :func:`mwsp_torch.gnn_protocol.run_gnn_cell`: for each dataset, method and
outer fold, every setting of the profile's grid is trained on the fold's inner training part
and early-stopped on its validation part, the best is retrained 3 times and scored on the test
part, and the fold's result is kept as one JSON cell,
``--raw-dir/DATASET/METHOD/fold-NN.json`` (profiles other than ``cpu`` under
``--raw-dir/profile-NAME/``), so a killed run resumes where it stopped; a cell of another
grid, budget, seed or split file is refused (``--force`` recomputes it). GIN with template
pooling (``--methods gin_pool gin_pool_tree_ids gin_tfgw``, ``docs/pooling.md``) is trained
and selected by the same code.

Folds: Errica et al.'s own split files (``--splits-dir``, their ``data_splits/``) for NCI1,
PROTEINS (their file indexes PROTEINS_full), DD, ENZYMES, IMDB-BINARY and REDDIT-BINARY (degree folds);
the project's seed-42 files (``--folds-dir``, drawn there if missing) for the others (MUTAG,
PTC_MR). Node inputs: :func:`mwsp_torch.gnn_protocol.dataset_node_features`; ``gin_pool_tree_ids``:
MWSP's tree IDs fitted on each fold's training graphs
(:func:`mwsp_torch.gnn_protocol.tree_id_fold_inputs`).

Usage::

    MWSP_DATA_ROOT=../shared/tudatasets OMP_NUM_THREADS=1 python experiments/errica_gnn.py \\
        --datasets MUTAG PTC_MR IMDB-BINARY --methods gin baseline --profile cpu --folds 0-9 --threads 1
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import numpy as np
import torch
from tqdm.auto import tqdm

from mwsp_torch.compare.report import ERRICA_PUBLISHED as ERRICA
from mwsp_torch.datasets import load_dataset
from mwsp_torch.gnn_protocol import (
    ERRICA_DATA,
    ERRICA_SPLIT_FILES,
    METHODS,
    PROFILES,
    RETRAINS,
    TREE_ID_METHODS,
    cell_path,
    grid_settings,
    pack_dataset,
    protocol_of,
    run_gnn_cell,
)
from mwsp_torch.splits import ensure_splits, load_errica_splits

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results"
DEFAULT_SPLITS = HERE.parent.parent / "shared" / "errica_splits"


def parse_folds(text: str) -> list[int]:
    """``"0-9"``, ``"0,3,5-6"`` -> sorted fold numbers."""
    out: set[int] = set()
    for part in text.split(","):
        part = part.strip()
        if "-" in part:
            low, high = (int(v) for v in part.split("-", 1))
            out.update(range(low, high + 1))
        elif part:
            out.add(int(part))
    return sorted(out)


def dataset_inputs(name: str, args):
    """``(packed node inputs, y, splits, graphs)`` of one dataset."""
    graphs, y = load_dataset(ERRICA_DATA.get(name, name))
    if name in ERRICA_SPLIT_FILES:
        splits = load_errica_splits(Path(args.splits_dir) / ERRICA_SPLIT_FILES[name], y=y)
    else:
        splits = ensure_splits(Path(args.folds_dir) / f"{name}.json", y, name)
    packed = pack_dataset(graphs, y, name)
    return packed, y, splits, graphs


def raw_root(args) -> Path:
    root = Path(args.raw_dir)
    return root if args.profile == "cpu" else root / f"profile-{args.profile}"


def summary(args, names) -> list[str]:
    import json

    lines = []
    for name in names:
        for method in args.methods:
            accs = []
            for f in range(10):
                path = cell_path(raw_root(args), name, method, f)
                if path.is_file():
                    accs.append(json.loads(path.read_text())["accuracy"])
            if not accs:
                continue
            errica = ERRICA.get(name, {}).get(method)
            theirs = f"  (Errica {errica[0]:.1f} +- {errica[1]:.1f})" if errica else ""
            lines.append(
                f"{name:14s} {method:17s} {len(accs):2d} folds  {np.mean(accs):5.1f} +- {np.std(accs):4.1f}{theirs}"
            )
    return lines


def main(argv=None) -> list[str]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--datasets", nargs="+", default=["MUTAG", "PTC_MR", "IMDB-BINARY", "ENZYMES", "PROTEINS",
                                                          "NCI1"])  # fmt: skip
    parser.add_argument("--methods", nargs="+", default=["gin", "baseline"], choices=METHODS,
                        help="default: gin baseline")  # fmt: skip
    parser.add_argument("--profile", default="cpu", choices=sorted(PROFILES))
    parser.add_argument("--folds", default="0-9", help="outer folds, e.g. 0-9 or 0,2,4-5 (default 0-9)")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (default 1)")
    parser.add_argument("--device", default="cpu", help="torch device to train on (cpu, cuda)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the selection runs; retrains take the next 3")
    parser.add_argument("--splits-dir", default=str(DEFAULT_SPLITS), help="Errica et al.'s data_splits folder")
    parser.add_argument("--folds-dir", default=str(RESULTS / "folds"), help="the project's seed-42 split files")
    parser.add_argument("--raw-dir", default=str(RESULTS / "raw" / "compare"), help="one JSON cell per fold")
    parser.add_argument("--max-epochs", type=int, help="instead of the profile's (recorded in each cell)")
    parser.add_argument("--patience", type=int, help="instead of the profile's (recorded in each cell)")
    parser.add_argument("--force", action="store_true", help="recompute cells of another request")
    parser.add_argument("--quiet", action="store_true", help="no progress bar")
    args = parser.parse_args(argv)
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        parser.error(f"--device {args.device}: torch sees no CUDA device here")
    for option in ("max_epochs", "patience"):
        value = getattr(args, option)
        if value is not None and value < 1:
            parser.error(f"--{option.replace('_', '-')} {value}: must be >= 1")
    torch.set_num_threads(args.threads)
    folds = parse_folds(args.folds)
    root = raw_root(args)

    # What is left, in trainings (every setting, then the retrains), for the bar and its estimate.
    todo = []
    for name in args.datasets:
        for method in args.methods:
            settings = len(grid_settings(protocol_of(method, name, args.profile)["grid"]))
            for f in folds:
                if args.force or not cell_path(root, name, method, f).is_file():
                    todo.append((name, method, f, settings + RETRAINS))
    total = sum(t[3] for t in todo)
    print(f"{len(todo)} cells to compute ({total} trainings), profile {args.profile}, cells under {root}", flush=True)
    bar = tqdm(total=total, unit="training", disable=args.quiet or None, dynamic_ncols=True, file=sys.stdout)
    loaded: dict[str, tuple] = {}
    done, began = 0, time.perf_counter()
    for name, method, f, trainings in todo:
        if name not in loaded:
            loaded.clear()  # one dataset in memory at a time
            loaded[name] = dataset_inputs(name, args)
        packed, y, splits, graphs = loaded[name]
        if f >= len(splits.folds):
            print(f"{name}: no fold {f} (the split file has {len(splits.folds)})", flush=True)
            bar.update(trainings)
            done += trainings
            continue
        start = time.perf_counter()

        def tick(what, log, name=name, method=method, f=f):
            bar.set_description(f"{name} {method} f{f} {what}")
            bar.set_postfix(epochs=log["epochs"], s_epoch=f"{log['seconds_per_epoch']:.3f}")
            bar.update()

        inputs = graphs if method in TREE_ID_METHODS else packed  # tree IDs are fitted per fold
        cell = run_gnn_cell(root, inputs, y, splits.folds[f], f, method=method, dataset=name, profile=args.profile,
                            seed=args.seed, split_sha256=splits.sha256, force=args.force, on_training=tick,
                            max_epochs=args.max_epochs, patience=args.patience, device=args.device)  # fmt: skip
        runs = ", ".join(f"{a:.1f}" for a in cell["test_accuracies"])
        done += trainings
        left = total - done
        # The estimate (also the bar's, when shown): the trainings left at this run's mean pace so far.
        pace = (time.perf_counter() - began) / max(done, 1)
        tqdm.write(
            f"{name} {method} fold {f}: test {cell['accuracy']:.1f} ({runs}), selected {cell['selected']}, "
            f"{time.perf_counter() - start:.0f} s; {left} trainings left, about {left * pace / 3600:.1f} h",
            file=sys.stdout,
        )
        sys.stdout.flush()
    bar.close()
    lines = summary(args, args.datasets)
    for line in lines:
        print(line, flush=True)
    return lines


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    main()
