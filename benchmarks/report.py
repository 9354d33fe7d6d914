"""Markdown tables from ``benchmarks/results.json`` (written by ``benchmarks/run.py``).

Usage::

    python benchmarks/report.py benchmarks/results.json
"""

from __future__ import annotations

import json
import sys

#: The authors' script on this 2-core machine, k=0 and paths of <= 2 edges (d=2 here), from issue 3.
AUTHORS_SECONDS = {"MUTAG": 6.1, "PTC_MR": 34.0, "ENZYMES": 107.0, "PROTEINS": 287.0, "NCI1": 55 * 60.0}


def _diff(value) -> str:
    """A relative difference for the table (``-`` where the run did not record one)."""
    return "-" if value is None else f"{value:.1e}"


def main(path: str) -> int:
    results = json.loads(open(path).read())
    print(
        "| dataset | d | k | graphs | pairs | support / graph | features s | features peak RSS GiB "
        "| exact s | exact us/pair | naive s (extrap.) | speedup vs naive | authors' script s | speedup vs authors "
        "| max rel. diff vs naive | vs reference |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in results:
        if "error" in r:
            print(f"| {r['dataset']} | {r['d']} | {r['k']} | error: {r['error']} |")
            continue
        total = r["features_seconds"] + r["exact_seconds"]
        authors = AUTHORS_SECONDS.get(r["dataset"]) if (r["d"], r["k"]) == (2, 0) else None
        exact = f"{r['exact_seconds']:.2f}" + ("" if r["exact_measured"] == "all pairs" else " (extrap.)")
        print(
            f"| {r['dataset']} | {r['d']} | {r['k']} | {r['graphs']} | {r['pairs']:,} | {r['support_mean']:.1f} "
            f"| {r['features_seconds']:.2f} | {r['features_peak_rss_gib']:.2f} | {exact} "
            f"| {r['exact_us_per_pair']:.1f} "
            + (
                f"| {r['naive_seconds_extrapolated']:.0f} | {r['speedup_vs_naive']:.0f}x "
                if r["naive_seconds_extrapolated"] is not None
                else ("| out of memory | - " if r.get("naive_error") else "| not run | - ")
            )
            + f"| {authors if authors else '-'} | {f'{authors / total:.0f}x' if authors else '-'} "
            + f"| {_diff(r.get('naive_vs_library_max_rel_diff'))} "
            + f"| {_diff(r.get('reference_vs_library_max_rel_diff'))} |"
        )
    print()
    print("| dataset | d | k | blur | Sinkhorn (CPU) us/pair | median rel. error | max rel. error | pairs |")
    print("|---|---|---|---|---|---|---|---|")
    for r in results:
        for s in r.get("sinkhorn_cpu", []):
            print(
                f"| {r['dataset']} | {r['d']} | {r['k']} | {s['blur']} | {1e6 * s['seconds_per_pair']:.0f} "
                f"| {100 * s['rel_error_median']:.2f} % | {100 * s['rel_error_max']:.2f} % | {s['pairs']} |"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else "benchmarks/results.json"))
