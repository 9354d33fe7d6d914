"""Seconds a GIN epoch on the CPU: ``mwsp_torch.gnn.fit_classifier`` beside PyG's plain ``DataLoader`` loop.

The same model (:class:`mwsp_torch.gnn.ErricaGIN`, Errica et al.'s node inputs), the same
graphs (the inner training part of fold 0 of Errica et al.'s split file), the same batch
size, in the same process: an epoch is one pass over the training graphs in a random order
plus scoring the validation part, as both loops do in training. The library's loop gathers
each mini-batch from graphs collated once (:class:`mwsp_torch.gnn.PackedGraphs`); PyG's
collates a ``Batch`` from a list of ``Data`` at every step. Results go to
``benchmarks/results-gnn.json`` (one object per dataset and batch size).

Usage::

    MWSP_DATA_ROOT=../shared/tudatasets python benchmarks/gnn_epoch.py --threads 1 --epochs 3
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time
from pathlib import Path

import numpy as np
import torch
from torch import nn
from torch_geometric.data import Data
from torch_geometric.loader import DataLoader

from mwsp_torch.datasets import load_dataset
from mwsp_torch.gnn import ErricaGIN, PackedGraphs, fit_classifier
from mwsp_torch.gnn_protocol import ERRICA_DATA, ERRICA_SPLIT_FILES, dataset_node_features
from mwsp_torch.splits import load_errica_splits

HERE = Path(__file__).resolve().parent
DEFAULT_SPLITS = HERE.parent.parent / "shared" / "errica_splits"


def pyg_epoch(model, loader, valid_loader, optimizer) -> None:
    """One epoch of the plain PyG loop: collate every step, then score the validation part."""
    model.train()
    for batch in loader:
        optimizer.zero_grad()
        out = model(batch.x, batch.edge_index, batch.batch, batch.num_graphs)
        nn.functional.cross_entropy(out, batch.y).backward()
        optimizer.step()
    model.eval()
    with torch.no_grad():
        for batch in valid_loader:
            model(batch.x, batch.edge_index, batch.batch, batch.num_graphs)


def measure(name: str, splits_dir: Path, batch_size: int, epochs: int, hidden: list[int]) -> dict:
    graphs, y = load_dataset(ERRICA_DATA.get(name, name))
    splits = load_errica_splits(splits_dir / ERRICA_SPLIT_FILES[name], y=y)
    fold = splits.folds[0]
    x = dataset_node_features(graphs, name)
    packed = PackedGraphs(x, [g.edge_index for g in graphs], y)
    train, valid = packed.subset(fold.inner_train), packed.subset(fold.validation)
    classes = int(y.max()) + 1

    def model():
        torch.manual_seed(0)
        return ErricaGIN(x[0].shape[1], classes, hidden_units=hidden)

    # One untimed epoch first in each loop (allocators warm up), then the median of ``epochs``.
    times = []
    m = model()
    fit_classifier(m, train, valid, batch_size=batch_size, max_epochs=1, patience=1)
    for _ in range(epochs):
        times.append(fit_classifier(m, train, valid, batch_size=batch_size, max_epochs=1, patience=1)["seconds"])
    ours_seconds = float(np.median(times))

    data = [Data(x=x[i], edge_index=graphs[i].edge_index, y=torch.tensor([int(y[i])])) for i in range(len(y))]
    loader = DataLoader([data[i] for i in fold.inner_train], batch_size=batch_size, shuffle=True)
    valid_loader = DataLoader([data[i] for i in fold.validation], batch_size=batch_size)
    m = model()
    optimizer = torch.optim.Adam(m.parameters(), lr=0.01)
    pyg_epoch(m, loader, valid_loader, optimizer)
    times = []
    for _ in range(epochs):
        start = time.perf_counter()
        pyg_epoch(m, loader, valid_loader, optimizer)
        times.append(time.perf_counter() - start)
    pyg_seconds = float(np.median(times))
    return {
        "dataset": name,
        "graphs_train": len(fold.inner_train),
        "graphs_validation": len(fold.validation),
        "features": int(x[0].shape[1]),
        "batch_size": batch_size,
        "hidden_units": hidden,
        "epochs_timed": epochs,
        "seconds_per_epoch_library": ours_seconds,
        "seconds_per_epoch_pyg_dataloader": pyg_seconds,
        "speedup": pyg_seconds / ours_seconds,
    }


def main(argv=None) -> list[dict]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--datasets", nargs="+", default=["NCI1", "PROTEINS", "ENZYMES", "IMDB-BINARY", "DD"])
    parser.add_argument("--batch-sizes", type=int, nargs="+", default=[128, 32])
    parser.add_argument("--hidden", type=int, nargs="+", default=[64, 64, 64, 64])
    parser.add_argument("--epochs", type=int, default=3, help="epochs timed per loop (median), after one warm-up")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--splits-dir", default=str(DEFAULT_SPLITS))
    parser.add_argument("--out", default=str(HERE / "results-gnn.json"))
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    rows = []
    for name in args.datasets:
        for batch_size in args.batch_sizes:
            row = measure(name, Path(args.splits_dir), batch_size, args.epochs, args.hidden)
            row["threads"] = args.threads
            rows.append(row)
            print(
                f"{name:12s} batch {batch_size:3d}: library {row['seconds_per_epoch_library']:.3f} s, "
                f"PyG DataLoader {row['seconds_per_epoch_pyg_dataloader']:.3f} s ({row['speedup']:.2f}x)",
                flush=True,
            )
    out = {
        "benchmark": "gnn_epoch",
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs, torch {torch.__version__}",
        "load_average_at_end": os.getloadavg()[0],
        "rows": rows,
    }
    Path(args.out).write_text(json.dumps(out, indent=1) + "\n")
    return rows


if __name__ == "__main__":
    main()
