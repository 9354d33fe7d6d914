"""``mwsp explain``: the optimal node-to-node plan behind W between two graphs of a dataset."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from mwsp_torch.cli.options import check_output, data_options, kernel_options

__all__ = ["add_explain", "run"]


def add_explain(sub) -> None:
    """The ``explain`` subcommand, on the subparsers ``sub``."""
    ex = sub.add_parser(
        "explain", help="the optimal node-to-node plan behind W between two graphs of a dataset, as text and a PNG"
    )
    ex.set_defaults(func=run)
    data_options(ex, dataset="MUTAG")
    ex.add_argument(
        "--graphs", type=int, nargs=2, required=True, metavar=("G", "H"), help="the two graphs' indices, from 0"
    )
    kernel_options(ex, many=False)
    ex.add_argument("--top", type=int, default=5, help="pairs of rows to list, largest part of W first (default 5)")
    ex.add_argument("--out", default=None, help="draw the two graphs and the plan into this PNG")
    ex.add_argument("--json", default=None, help="also write the explanation here (JSON, the plan included)")


def run(parser: argparse.ArgumentParser, args) -> int:
    """``mwsp explain``: fit on the two graphs alone (one pair of transport, whatever the
    dataset's size; W is the same as in the whole dataset's matrix), then print, draw, write."""
    check_output(parser, "--out", args.out)
    check_output(parser, "--json", args.json)
    if args.top < 0:
        parser.error(f"--top must be >= 0, got {args.top}")
    from mwsp_torch.datasets import default_labels, load_dataset, node_label_names
    from mwsp_torch.estimator import MWSP
    from mwsp_torch.explain import explain, plot_explanation

    try:
        graphs, y = load_dataset(args.dataset, root=args.root, cache_dir=args.cache_dir)
        for index in args.graphs:
            if not 0 <= index < len(graphs):
                raise ValueError(
                    f"--graphs {args.graphs[0]} {args.graphs[1]}: {args.dataset} has {len(graphs)} graphs, "
                    f"numbered 0 to {len(graphs) - 1}; {index} is not one of them"
                )
        labels = args.labels or default_labels(args.dataset)
        names = node_label_names(args.dataset, args.root) if labels == "auto" and args.dataset != "CSL" else None
        pair = [graphs[i] for i in args.graphs]
        model = MWSP(d=args.d, k=args.k, paths=args.paths, labels=labels, n_jobs=1).fit(pair)
        explanation = explain(model, pair[0], pair[1], top=args.top, label_names=names)
        i, j = args.graphs
        print(f"{args.dataset} graphs {i} (class {y[i]}) and {j} (class {y[j]})")
        print(explanation.report())
        if args.out is not None:
            titles = tuple(f"{args.dataset} graph {i}\nclass {y[i]}, {graphs[i].num_nodes} nodes" for i in args.graphs)
            plot_explanation(explanation, pair[0], pair[1], args.out, titles=titles)
            print(f"figure: {args.out}")
        if args.json is not None:
            Path(args.json).write_text(
                json.dumps({"dataset": args.dataset, "graphs": args.graphs, **explanation.to_dict()})
            )
    except (ValueError, OSError, ImportError) as err:  # ImportError: matplotlib or networkx missing
        print(f"mwsp: error: {err}", file=sys.stderr)
        return 2
    return 0
