"""A process's first fit and a warm one: the CPU kernels built ahead of time against numba's cache.

Each fit runs in a fresh child process (``python -c``), timed from the process's start to its
end, import and data loading included, with the fit's own seconds apart. Two ways to get the
kernels:

- ``aot``: ``MWSP_KERNELS=aot``, the extension built with ``numba.pycc`` into an empty
  ``MWSP_KERNEL_DIR`` by the first child (``cold``), loaded by the next (``warm``);
- ``jit``: ``MWSP_KERNELS=jit``, numba's ``@njit(cache=True)`` functions compiled into an empty
  ``NUMBA_CACHE_DIR`` by the first child (``cold``), loaded from it by the next (``warm``).

Both variants get an empty ``NUMBA_CACHE_DIR`` of their own (numba functions outside the
ahead-of-time build are cached there too). The cold child fits ``--cold-dataset``; then
``--repeats`` rounds each run one warm child per (variant, dataset), the variants interleaved,
so that both see the same load on a shared machine. Usage::

    python benchmarks/kernel_build.py --out benchmarks/results-kernel-build.json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

CHILD = """
import json, sys, time
start = time.perf_counter()
from mwsp_torch import MWSP, load_tudataset
imported = time.perf_counter()
graphs, _ = load_tudataset(sys.argv[1])
graphs = graphs[: int(sys.argv[4])]
loaded = time.perf_counter()
model = MWSP(d=int(sys.argv[2]), k=int(sys.argv[3]), n_jobs=int(sys.argv[5])).fit(graphs)
done = time.perf_counter()
print(json.dumps({"import_s": imported - start, "fit_s": done - loaded, "checksum": float(model.distances_.sum())}))
"""


def run_child(variant: str, folder: Path, dataset: str, d: int, k: int, graphs: int, n_jobs: int) -> dict:
    env = {name: value for name, value in os.environ.items() if not name.startswith("NUMBA_")}
    env.update(NUMBA_CACHE_DIR=str(folder / "numba"), MWSP_KERNEL_DIR=str(folder / "kernels"))
    env["MWSP_KERNELS"] = variant
    argv = [sys.executable, "-c", CHILD, dataset, str(d), str(k), str(graphs), str(n_jobs)]
    start = time.perf_counter()
    done = subprocess.run(argv, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - start
    if done.returncode != 0:
        raise RuntimeError(f"{variant} {dataset}: {done.stderr[-2000:]}")
    row = json.loads(done.stdout.strip().splitlines()[-1])
    row["process_s"] = wall
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cold-dataset", default="MUTAG")
    parser.add_argument("--datasets", nargs="+", default=["MUTAG:2:1:188", "PROTEINS:2:0:1113"],
                        help="NAME:d:k:graphs for the warm fits")  # fmt: skip
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--n-jobs", type=int, default=2)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    specs = [(name, int(d), int(k), int(n)) for name, d, k, n in (s.split(":") for s in args.datasets)]
    variants = ("aot", "jit")
    rows = []
    with tempfile.TemporaryDirectory(prefix="mwsp-kernel-build-") as scratch:
        folders = {v: Path(scratch) / v for v in variants}
        load_before = os.getloadavg()
        for variant in variants:
            row = run_child(variant, folders[variant], args.cold_dataset, 2, 1, 10**9, args.n_jobs)
            rows.append({"variant": variant, "state": "cold", "dataset": args.cold_dataset, "d": 2, "k": 1, **row})
            print(json.dumps(rows[-1]), flush=True)
        for _ in range(args.repeats):
            for name, d, k, n in specs:
                for variant in variants:
                    row = run_child(variant, folders[variant], name, d, k, n, args.n_jobs)
                    rows.append({"variant": variant, "state": "warm", "dataset": name, "d": d, "k": k, **row})
                    print(json.dumps(rows[-1]), flush=True)
        load_after = os.getloadavg()
    summary = {}
    for variant in variants:
        for state, name in [("cold", args.cold_dataset), *(("warm", s[0]) for s in specs)]:
            chosen = [r for r in rows if (r["variant"], r["state"], r["dataset"]) == (variant, state, name)]
            summary[f"{variant} {state} {name}"] = {
                key: statistics.median(r[key] for r in chosen) for key in ("process_s", "import_s", "fit_s")
            }
    for name in dict.fromkeys([args.cold_dataset, *(s[0] for s in specs)]):
        for state in ("cold", "warm"):
            aot, jit = summary.get(f"aot {state} {name}"), summary.get(f"jit {state} {name}")
            if aot and jit:
                print(f"{state} {name}: process jit/aot {jit['process_s'] / aot['process_s']:.2f}x, "
                      f"fit jit/aot {jit['fit_s'] / aot['fit_s']:.2f}x")  # fmt: skip
    result = {
        "command": " ".join(["python", "benchmarks/kernel_build.py", *sys.argv[1:]]),
        "load_average_before_after": [load_before, load_after],
        "cpu_count": os.cpu_count(),
        "rows": rows,
        "medians": summary,
    }
    print(json.dumps(summary, indent=1))
    if args.out is not None:
        args.out.write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
