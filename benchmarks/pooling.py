"""Seconds a forward + backward NCI1 epoch of template Wasserstein pooling: this library's
exact layer (:class:`mwsp_torch.nn.WassersteinPooling`) against POT's ``ot.gnn.TWPooling``,
in the same process, on the same inputs and templates; and how far POT's W (its simplex
stopped at 50 iterations) is from the exact W.

Inputs: every NCI1 graph, node features a fixed 64-wide random projection (seed 0) of the
one-hot node labels, in batches of 128 graphs (the dataset's order); templates of
``m`` points, point weights learned (POT's default, ``train_node_weights=True``), POT's
initialisation. An epoch is, per batch, the layer's forward, the sum of its output, and the
backward to the node features and the parameters. Our layer runs with POT's ground cost
(squared Euclidean: the same problem) and with MWSP's (Euclidean). POT's layer is timed
on the first ``--pot-graphs`` graphs and its epoch extrapolated by graph count (all graphs
with ``--pot-graphs 0``); its error is measured on those graphs against our layer's
values, and against ``ot.emd2`` run to its default iteration limit on POT's own float32
costs (what the truncation alone costs, apart from float32 rounding).

Usage::

    MWSP_DATA_ROOT=../shared/tudatasets python benchmarks/pooling.py --threads 2
"""

from __future__ import annotations

import argparse
import json
import platform
import time
import warnings
from pathlib import Path

import numpy as np
import torch

from mwsp_torch.datasets import load_dataset
from mwsp_torch.nn import WassersteinPooling

HERE = Path(__file__).resolve().parent


def node_inputs(graphs, width: int, seed: int) -> list[torch.Tensor]:
    """Each graph's node features: one-hot labels times a fixed random ``[labels, width]`` projection."""
    labels = [g.node_label.long() for g in graphs]
    num_labels = int(max(int(lab.max()) for lab in labels)) + 1
    projection = torch.randn(num_labels, width, generator=torch.Generator().manual_seed(seed))
    return [projection[lab] for lab in labels]


def batches(features: list[torch.Tensor], batch_size: int) -> list[tuple[torch.Tensor, torch.Tensor, int]]:
    """``(x, batch, num_graphs)`` of consecutive runs of ``batch_size`` graphs."""
    out = []
    for lo in range(0, len(features), batch_size):
        part = features[lo : lo + batch_size]
        sizes = torch.tensor([len(f) for f in part])
        out.append((torch.cat(part), torch.repeat_interleave(torch.arange(len(part)), sizes), len(part)))
    return out


def epoch_seconds(layer, data, call) -> tuple[float, list[torch.Tensor]]:
    """One pass of forward + backward over ``data``; the seconds and the outputs."""
    outputs = []
    start = time.perf_counter()
    for x, batch, _ in data:
        x = x.clone().requires_grad_()
        layer.zero_grad()
        out = call(layer, x, batch)
        out.sum().backward()
        outputs.append(out.detach())
    return time.perf_counter() - start, outputs


def ours(layer, x, batch):
    return layer(x, batch)


def pots(layer, x, batch):
    return layer(x, None, batch)


def measure(data, num_graphs: int, templates: int, size: int, epochs: int, pot_graphs: int, n_jobs: int) -> dict:
    from ot import dist, emd2
    from ot.gnn import TWPooling

    torch.manual_seed(0)
    pot = TWPooling(64, n_tplt=templates, n_tplt_nodes=size, train_node_weights=True)
    row = {"templates": templates, "template_size": size, "graphs": num_graphs}
    exact_sq = None
    for cost in ("sqeuclidean", "euclidean"):
        layer = WassersteinPooling(64, templates, size, cost=cost, learn_template_weights=True, n_jobs=n_jobs)
        with torch.no_grad():  # POT's templates and weights (logits) exactly
            layer.templates.copy_(pot.tplt_features)
            layer.template_logits.copy_(pot.q0)
        epoch_seconds(layer, data[:2], ours)  # warm (compiled code loaded)
        times = []
        for _ in range(epochs):
            seconds, outputs = epoch_seconds(layer, data, ours)
            times.append(seconds)
        row[f"ours_{cost}_epoch_s"] = float(np.median(times))
        row[f"ours_{cost}_epoch_s_all"] = times
        if cost == "sqeuclidean":
            exact_sq = torch.cat(outputs)
    # POT's layer on the first pot_graphs graphs (whole batches), extrapolated by graph count.
    subset, count = [], 0
    for item in data:
        if pot_graphs and count >= pot_graphs:
            break
        subset.append(item)
        count += item[2]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # numItermax reached: a warning every call
        seconds, pot_out = epoch_seconds(pot, subset, pots)
        pot_out = torch.cat(pot_out).double()
        # ot.emd2 to its default iteration limit on POT's own (float32) costs.
        full = []
        q = torch.softmax(pot.q0.detach(), dim=1)
        for x, batch, n in subset:
            for g in range(n):
                nodes = x[batch == g]
                a = torch.ones(len(nodes)) / len(nodes)
                for t in range(templates):
                    costs = dist(nodes, pot.tplt_features.detach()[t]).float()  # as TWPooling forms them
                    full.append(float(emd2(a, q[t], costs)))
    full = torch.tensor(full, dtype=torch.float64).reshape(-1, templates)
    row["pot_graphs_timed"] = count
    row["pot_subset_s"] = seconds
    row["pot_epoch_s"] = seconds * num_graphs / count
    row["pot_extrapolated"] = count < num_graphs
    row["speedup_sqeuclidean"] = row["pot_epoch_s"] / row["ours_sqeuclidean_epoch_s"]
    row["speedup_euclidean"] = row["pot_epoch_s"] / row["ours_euclidean_epoch_s"]
    exact = exact_sq[:count]
    relative = ((pot_out - exact).abs() / exact).flatten()
    row["pot_relative_error_median"] = float(relative.median())
    row["pot_relative_error_p90"] = float(relative.quantile(0.9))
    row["pot_relative_error_max"] = float(relative.max())
    row["pot_share_off_by_1e-4"] = float((relative > 1e-4).double().mean())
    row["pot_full_emd2_relative_error_max"] = float(((full - exact).abs() / exact).max())
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dataset", default="NCI1")
    parser.add_argument("--root", default=None, help="data root (default $MWSP_DATA_ROOT)")
    parser.add_argument("--shapes", default="10x10,20x20", help="comma-separated TxM")
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--epochs", type=int, default=3, help="timed epochs of our layer (median)")
    parser.add_argument("--pot-graphs", type=int, default=512, help="graphs POT's layer is timed on (0: all)")
    parser.add_argument("--threads", type=int, default=2, help="our solver's threads")
    parser.add_argument("--torch-threads", type=int, default=1, help="torch's threads (both layers)")
    parser.add_argument("--max-graphs", type=int, default=0, help="first graphs only, for a quick check (0: all)")
    parser.add_argument("--out", type=Path, default=HERE / "results-pooling.json")
    args = parser.parse_args()
    torch.set_num_threads(args.torch_threads)
    graphs, _ = load_dataset(args.dataset, root=args.root)
    if args.max_graphs:
        graphs = graphs[: args.max_graphs]
    data = batches(node_inputs(graphs, 64, seed=0), args.batch_size)
    rows = []
    for shape in args.shapes.split(","):
        templates, size = (int(v) for v in shape.split("x"))
        row = measure(data, len(graphs), templates, size, args.epochs, args.pot_graphs, args.threads)
        print(json.dumps(row), flush=True)
        rows.append(row)
    result = {
        "dataset": args.dataset,
        "batch_size": args.batch_size,
        "threads": args.threads,
        "torch_threads": args.torch_threads,
        "inputs": "64-wide random projection (seed 0) of one-hot node labels",
        "machine": platform.processor() or platform.machine(),
        "torch": torch.__version__,
        "rows": rows,
    }
    args.out.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
