"""Edge labels and continuous node attributes against label-only MWSP, nested protocol.

Two groups of datasets (``docs/definition.md``, section 7):

- edge labels (MUTAG, PTC_MR, PTC_FM, DHFR_MD, Tox21_AHR): ``labels`` (label-only) against
  ``edges`` (``MWSP(edge_labels=True)``), the same (d, k) grid;
- node attributes (ENZYMES, PROTEINS_full, SYNTHETICnew, Synthie): ``labels`` against
  ``node`` and ``multiscale`` (``MWSP(attributes=...)``), whose grid adds ``beta``.
  SYNTHETICnew and Synthie have no node labels: their ``phi`` uses degree labels.

Each variant runs the nested protocol (d, k[, beta], lam, C selected inside each training
fold; ``--repeats`` repetitions with seeds 0..R-1) and is kept as
``results/raw/extensions-NAME-VARIANT.json`` (resumable; ``--force`` recomputes). Then
``results/extensions.csv`` and ``results/extensions.md`` list every variant run so far, with
WWL's published accuracy beside the attribute datasets where it is known.

Usage::

    MWSP_DATA_ROOT=DIR python experiments/extensions.py --datasets DHFR_MD --d 1 2 3 --k 0 1 --repeats 10
    MWSP_DATA_ROOT=DIR python experiments/extensions.py --datasets ENZYMES --d 1 2 3 --k 0 --beta 0.3 1 3
"""

from __future__ import annotations

import argparse
import csv
import time

import numpy as np
from common import RESULTS, load_raw, outer_folds, save_raw

from mwsp_torch import MWSP, nested_protocol
from mwsp_torch.cache import cached_distances
from mwsp_torch.datasets import default_labels, load_dataset
from mwsp_torch.evaluation import PAPER_CS, PAPER_LAMS

EDGE_DATASETS = ("MUTAG", "PTC_MR", "PTC_FM", "DHFR_MD", "Tox21_AHR")
ATTRIBUTE_DATASETS = ("ENZYMES", "PROTEINS_full", "SYNTHETICnew", "Synthie")

#: WWL (Togninalli et al., NeurIPS 2019), continuous attributes: mean, std (percent).
WWL = {"ENZYMES": (73.25, 0.87), "PROTEINS_full": (77.91, 0.80)}


#: What a reader must know beside a dataset's rows (grids cut to fit the time, shortfalls).
NOTES_FILE = RESULTS / "extensions-notes.md"


def variants(name: str) -> tuple[str, ...]:
    return ("labels", "edges") if name in EDGE_DATASETS else ("labels", "node", "multiscale")


def run_variant(name: str, variant: str, graphs, y, args) -> dict:
    key = f"extensions-{name}-{variant}"
    grid = {"d": list(args.d), "k": list(args.k), "beta": list(args.beta) if variant in ("node", "multiscale") else []}
    asked = {**grid, "repeats": args.repeats, "lams": list(args.lams), "Cs": list(args.Cs)}
    raw = load_raw(key)
    if raw is not None and not args.force:
        if raw["asked"] != asked:
            raise SystemExit(f"{name} {variant}: results/raw/{key}.json holds another grid; add --force to replace it")
        print(f"{name} {variant}: reusing results/raw/{key}.json", flush=True)
        return raw
    labels = default_labels(name)
    edge_labels = variant == "edges"
    attributes = variant if variant in ("node", "multiscale") else None
    betas = grid["beta"] or [None]
    ws, seconds = {}, {}
    for d in args.d:
        for k in args.k:
            for beta in betas:
                extension = {
                    "edge_labels": edge_labels,
                    "attributes": attributes,
                    "beta": 1.0 if beta is None else beta,
                }
                model = MWSP(d=d, k=k, labels=labels, **extension, n_jobs=args.n_jobs, progress=not args.quiet)
                w, timings = cached_distances(model, graphs, name)
                spent = timings["features"] + timings["transport"]  # the fit's, a kernel build excluded
                setting = (d, k) if beta is None else (d, k, beta)
                ws[setting] = w
                seconds[",".join(map(str, setting))] = spent
    start = time.perf_counter()
    result = nested_protocol(
        ws,
        y,
        lams=args.lams,
        Cs=args.Cs,
        seeds=tuple(range(args.repeats)),
        n_outer=outer_folds(y),
        n_jobs=args.eval_jobs,
        progress=not args.quiet,
    )
    payload = {
        "dataset": name,
        "variant": variant,
        "labels": labels,
        "asked": asked,
        "num_graphs": len(y),
        "distance_seconds": seconds,
        "evaluation_seconds": time.perf_counter() - start,
        "nested": result,
    }
    save_raw(key, payload)
    return payload


def _grid_text(raw: dict) -> str:
    asked = raw["asked"]
    text = f"d in {asked['d']} x k in {asked['k']}"
    if asked["beta"]:
        text += f" x beta in {asked['beta']}"
    return text + f"; lam in {asked['lams']}, C in {asked['Cs']}"


def write_tables() -> None:
    rows = []
    for name in EDGE_DATASETS + ATTRIBUTE_DATASETS:
        for variant in variants(name):
            raw = load_raw(f"extensions-{name}-{variant}")
            if raw is None:
                continue
            nested = raw["nested"]
            wwl = WWL.get(name) if variant in ("node", "multiscale") else None
            rows.append(
                {
                    "dataset": name,
                    "variant": variant,
                    "accuracy_mean": round(nested["accuracy_mean"], 2),
                    "accuracy_std": round(nested["accuracy_std"], 2),
                    "repetitions": len(nested["seeds"]),
                    "majority_rate": round(nested["majority_rate"], 2),
                    "wwl_mean": "" if wwl is None else wwl[0],
                    "wwl_std": "" if wwl is None else wwl[1],
                    "distance_seconds": round(sum(raw["distance_seconds"].values()), 1),
                    "labels": raw["labels"],
                    "grid": _grid_text(raw),
                }
            )
    if not rows:
        return
    with open(RESULTS / "extensions.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    lines = [
        "# Extensions: edge labels and continuous node attributes (nested protocol)",
        "",
        "Written by `experiments/extensions.py` (commands in `experiments/README.md`). Accuracy in percent,",
        "mean +- std over the repetitions' means (seeds 0..R-1, 10 outer folds, 5 inner); (d, k[, beta],",
        "lam, C) selected inside each training fold over the grid in the last column. `labels`: label-only",
        "MWSP; `edges`: `edge_labels=True`; `node` / `multiscale`: `attributes=` with `beta` in the grid.",
        "WWL: Togninalli et al. 2019, continuous attributes, as published (their protocol, not rerun here).",
        "Distance seconds: all W of the grid, on this machine's 2 shared cores (0 where cached).",
        "",
        "| dataset | variant | accuracy % | reps | majority % | WWL % | W seconds | labels | grid |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        wwl = f"{r['wwl_mean']} +- {r['wwl_std']}" if r["wwl_mean"] != "" else ""
        lines.append(
            f"| {r['dataset']} | {r['variant']} | {r['accuracy_mean']:.1f} +- {r['accuracy_std']:.1f} | "
            f"{r['repetitions']} | {r['majority_rate']:.1f} | {wwl} | {r['distance_seconds']} | {r['labels']} | "
            f"{r['grid']} |"
        )
    if NOTES_FILE.is_file():  # hand-written notes on these runs, kept beside the generated table
        lines += ["", NOTES_FILE.read_text().strip()]
    (RESULTS / "extensions.md").write_text("\n".join(lines) + "\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--datasets", nargs="+", default=list(EDGE_DATASETS + ATTRIBUTE_DATASETS))
    parser.add_argument("--variants", nargs="+", default=None, help="default: every variant of each dataset")
    parser.add_argument("--d", type=int, nargs="+", default=[1, 2, 3])
    parser.add_argument("--k", type=int, nargs="+", default=[0, 1])
    parser.add_argument("--beta", type=float, nargs="+", default=[0.3, 1.0, 3.0])
    parser.add_argument("--lams", type=float, nargs="+", default=list(PAPER_LAMS))
    parser.add_argument("--Cs", type=float, nargs="+", default=list(PAPER_CS))
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--n-jobs", type=int, default=-1, help="threads for the exact solver")
    parser.add_argument("--eval-jobs", type=int, default=1, help="processes of the nested selection")
    parser.add_argument("--force", action="store_true")
    parser.add_argument("--quiet", action="store_true")
    args = parser.parse_args()
    known = EDGE_DATASETS + ATTRIBUTE_DATASETS
    unknown = [name for name in args.datasets if name not in known]
    if unknown:
        parser.error(f"--datasets: {', '.join(unknown)} not among {', '.join(known)}")
    if args.repeats < 1 or any(b <= 0 or not np.isfinite(b) for b in args.beta):
        parser.error("--repeats must be >= 1 and every --beta > 0")
    for name in args.datasets:
        graphs, y = load_dataset(name)
        for variant in variants(name):
            if args.variants is not None and variant not in args.variants:
                continue
            raw = run_variant(name, variant, graphs, y, args)
            nested = raw["nested"]
            print(
                f"{name} {variant}: {nested['accuracy_mean']:.2f} +- {nested['accuracy_std']:.2f} "
                f"({len(nested['seeds'])} reps; majority {nested['majority_rate']:.1f})",
                flush=True,
            )
            write_tables()


if __name__ == "__main__":
    main()
