"""Table 6: kernel-matrix time for every dataset at the paper's timing setting (their k=0, d=1: d=2 here).

Times ``MWSP(d=2, k=0, n_jobs=...).fit(graphs)`` (features + exact transport; the
kernel exp(-lam W) itself is negligible) once per dataset, in this process, and puts
the paper's MWSP column beside it. Writes ``results/timing.csv``; DD and
REDDIT-BINARY can be left out with ``--datasets``, or taken with ``--from-cache``
from the timings stored with their cached distance matrix (the run that computed
it, possibly beside other jobs: the ``source`` column says which).

Usage::

    MWSP_DATA_ROOT=DIR python experiments/timing.py --n-jobs 2
"""

from __future__ import annotations

import argparse
import csv
import time

from common import (
    PAPER_SECONDS,
    RESULTS,
    TU_DATASETS,
    cached_distances,
    check_arguments,
    code_version,
    hardware,
    load,
    take_subset,
)

from mwsp_torch import MWSP
from mwsp_torch.transport import resolve_n_jobs


def _whole_run(name: str, timings: dict) -> None:
    """A cached W resumed from checkpoint tiles timed only the tiles it computed: refuse it."""
    if timings.get("pairs_from_checkpoint", 0):
        raise SystemExit(
            f"{name}: the cached W was resumed from a checkpoint ({timings['pairs_from_checkpoint']} of "
            f"{timings['pairs']} pairs read from tiles), so its stored time covers only the rest; "
            "time it without --from-cache (or clear its cache entry)"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--datasets", nargs="+", default=list(TU_DATASETS))
    parser.add_argument("--n-jobs", type=int, default=-1)
    parser.add_argument("--from-cache", nargs="*", default=[], help="datasets timed from their cached W's record")
    parser.add_argument(
        "--subset",
        nargs="*",
        default=[],
        metavar="NAME=SIZE",
        help="time a stratified subset (accuracy.py --subset, from its cached W) and extrapolate by pair count",
    )
    args = parser.parse_args()
    check_arguments(parser, args, TU_DATASETS)
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / "timing.csv"
    rows = {}
    if path.is_file():
        with open(path) as handle:
            rows = {row["dataset"]: row for row in csv.DictReader(handle)}
    subsets = dict(item.split("=") for item in args.subset)
    for name in args.datasets:
        graphs, y, labels = load(name)
        if name in subsets:
            full = len(graphs)
            graphs, _, key, _ = take_subset(name, graphs, y, int(subsets[name]))
            _, timings = cached_distances(MWSP(d=2, k=0, labels=labels, n_jobs=args.n_jobs, progress=True), graphs, key)
            _whole_run(name, timings)
            ratio = full * (full - 1) / (len(graphs) * (len(graphs) - 1))
            cached = timings["cached"]
            timings = {"features": timings["features"] * ratio, "transport": timings["transport"] * ratio}
            seconds = timings["features"] + timings["transport"]
            source = (
                f"extrapolated x{ratio:.2f} (pairs) from a stratified subset of {len(graphs)} graphs"
                f" ({'its cached W' if cached else 'this run'})"
            )
        elif name in args.from_cache:
            _, timings = cached_distances(
                MWSP(d=2, k=0, labels=labels, n_jobs=args.n_jobs, progress=True), graphs, name
            )
            _whole_run(name, timings)
            seconds = timings["features"] + timings["transport"]
            cached = timings["cached"]
            source = "distance cache (computed during the accuracy runs)" if cached else "this run"
        else:
            MWSP(d=2, k=0, labels=labels).fit(graphs[:3])  # numba compile, not timed
            start = time.perf_counter()
            timings = MWSP(d=2, k=0, labels=labels, n_jobs=args.n_jobs, progress=True).fit(graphs).timings_
            seconds = time.perf_counter() - start
            source = "this run"
            cached = False
        rows[name] = {
            "dataset": name,
            "d": 2,
            "k": 0,
            "seconds": f"{seconds:.3f}",
            "features_seconds": f"{timings['features']:.3f}",
            "transport_seconds": f"{timings['transport']:.3f}",
            "source": source,
            "paper_seconds": PAPER_SECONDS[name],
            "speedup_vs_paper": f"{PAPER_SECONDS[name] / seconds:.1f}",
            # A cached W's record keeps its times, not the threads or the code that took them.
            "n_jobs": "not recorded" if cached else resolve_n_jobs(args.n_jobs),
            "hardware": "not recorded" if cached else hardware(),
            "code": "not recorded" if cached else code_version(),
        }
        print(rows[name], flush=True)
        with open(path, "w", newline="") as handle:
            writer = csv.DictWriter(handle, fieldnames=list(rows[name]))
            writer.writeheader()
            writer.writerows(rows[n] for n in TU_DATASETS if n in rows)
    lines = [
        "| dataset | MWSP s (here) | paper s | paper / here | n_jobs | hardware | code | how measured |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for n in TU_DATASETS:
        if n in rows:
            r = rows[n]
            cells = [n, f"{float(r['seconds']):.2f}", f"{float(r['paper_seconds']):.2f}", f"{r['speedup_vs_paper']}x"]
            cells += [r["n_jobs"], r["hardware"], r.get("code") or "not recorded", r["source"]]
            lines.append("| " + " | ".join(str(c) for c in cells) + " |")
    (RESULTS / "timing.md").write_text("\n".join(lines) + "\n")
    print((RESULTS / "timing.md").read_text())


if __name__ == "__main__":
    main()
