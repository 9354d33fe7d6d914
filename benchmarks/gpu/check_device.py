"""One pass over what a lent GPU should show, written as one JSON (``check_device.sh`` runs it).

Steps, each in its own try block (a failure is recorded and the next step runs) and each
under a time budget, so that the whole run ends within the lease (about 6.5 minutes of
steps on an H100/H200, beside the shell's set-up):

- ``tests``: the CUDA-relevant tests (``MWSP_TEST_CUDA=1``, ``-k "(cuda or thread or
  triton) and not online"``): passed / failed / skipped counts, parsed from ``-v`` lines
  as they come, so a run cut at its budget still reports what finished.
- ``exact_NCI1_d2_k0``, ``exact_NCI1_d3_k1``, ``exact_REDDIT-BINARY_d2_k0``:
  ``MWSP(device=...)`` with the default engine (``timings_["engine"]`` says which ran) on a
  seeded subset (300 graphs), after a warm-up fit of 20 (which compiles the CUDA kernel), compared with
  the compiled CPU engine's W on that subset (max relative difference); then all pairs when
  the subset's timing says they fit the step's budget, otherwise the largest seeded sample
  that fits, with the all-pairs seconds extrapolated (transport linear in pairs, features
  linear in graphs) and the extrapolation stated in the record.
- ``sinkhorn_NCI1``: ``transport.sinkhorn_distances`` with ``Sinkhorn()``'s defaults (blur,
  scaling, ``backend="auto"``, the diameter ``fit`` uses) on 1e6 random NCI1 pairs
  (or as many as fit, extrapolated): pairs/s, and the error against the exact engine on
  the same pairs (median, 90th and 99th percentile, max; pairs with W > 0).
- ``gin``: one epoch of Errica et al.'s largest GIN setting (batch 32, hidden 64, 4 layers,
  dropout 0.5, lr 0.01; one-hot labels, degrees on REDDIT-BINARY) on NCI1, DD and
  REDDIT-BINARY (90 % train / 10 % validation, the validation pass included), after a
  warm-up epoch on 64 graphs; beside it the CPU epoch of ``cpu_reference.json``.
- ``dask``: a one-worker ``dask_cuda.LocalCUDACluster`` (a ``LocalCluster`` where there is
  no CUDA or no dask_cuda, said in ``cluster``) computing W of 500 NCI1 graphs through
  ``MWSP(client=...)``, compared bit for bit with the in-process matrix.

Without a CUDA device, or with ``--dry-run``, every step runs on the CPU at tiny sizes
through the same code (``device="cpu"``: the engine choice is then ``"compiled"``).

``--cpu-reference PATH`` instead times the GIN epochs on the CPU at full size and writes
them to PATH (``benchmarks/gpu/cpu_reference.json``, which the ``gin`` step reads).

Usage::

    python benchmarks/gpu/check_device.py --out $OUT/check_device.json --budget 390
    python benchmarks/gpu/check_device.py --dry-run --out benchmarks/gpu_results/cpu_dry_run.json
    python benchmarks/gpu/check_device.py --cpu-reference benchmarks/gpu/cpu_reference.json --threads 1
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import subprocess
import sys
import time
import traceback
from pathlib import Path

os.environ.setdefault("KEOPS_VERBOSE", "0")

import numpy as np  # noqa: E402
import torch  # noqa: E402

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
sys.path.insert(0, str(HERE.parent))
from gpu_sinkhorn import random_pairs  # noqa: E402

from mwsp_torch import MWSP  # noqa: E402
from mwsp_torch.datasets import default_labels, load_dataset  # noqa: E402
from mwsp_torch.gnn import GIN, OneHotLabels, TreeIDVocabulary, train_classifier, tree_id_inputs  # noqa: E402
from mwsp_torch.transport import Exact, Sinkhorn, exact_distances, sinkhorn_diameter, sinkhorn_distances  # noqa: E402
from mwsp_torch.transport.engines import build_cpu_kernels  # noqa: E402

CPU_REFERENCE = HERE / "cpu_reference.json"
GIN_DATASETS = ("NCI1", "DD", "REDDIT-BINARY")
#: Errica et al.'s largest GIN setting.
GIN_SETTING = {"batch": 32, "hidden": 64, "layers": 4, "dropout": 0.5, "lr": 0.01}
#: The exact steps: (dataset, d, k).
EXACT = (("NCI1", 2, 0), ("NCI1", 3, 1), ("REDDIT-BINARY", 2, 0))

#: Sizes and per-step budgets (seconds). ``graphs``: graphs read of each dataset (0: all).
SIZES = {
    "device": {
        "graphs": 0,
        "exact_subset": 300,
        "sinkhorn_pairs": 1_000_000,
        "sinkhorn_sample": 20_000,
        "gin_graphs": 0,
        "dask_graphs": 500,
        "dask_threads": 4,
        "budgets": {
            "tests": 70,
            "exact_NCI1_d2_k0": 35,
            "exact_NCI1_d3_k1": 55,
            "exact_REDDIT-BINARY_d2_k0": 65,
            "sinkhorn_NCI1": 70,
            "gin": 50,
            "dask": 35,
        },
    },
    "dry_run": {
        "graphs": 400,
        "exact_subset": 40,
        "sinkhorn_pairs": 60,
        "sinkhorn_sample": 16,
        "gin_graphs": 100,
        "dask_graphs": 40,
        "dask_threads": 1,
        "budgets": {
            "tests": 60,
            "exact_NCI1_d2_k0": 12,
            "exact_NCI1_d3_k1": 12,
            "exact_REDDIT-BINARY_d2_k0": 12,
            "sinkhorn_NCI1": 15,
            "gin": 60,
            "dask": 40,
        },
    },
}


def now() -> float:
    return time.perf_counter()


def sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def subset(n: int, size: int, seed: int = 0) -> np.ndarray:
    """A seeded sample of ``size`` of ``range(n)``, in increasing order (all of it when ``size >= n``)."""
    if size >= n:
        return np.arange(n)
    return np.sort(np.random.default_rng(seed).choice(n, size, replace=False))


def jsonable(value):
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    if isinstance(value, (np.integer,)):
        return int(value)
    if isinstance(value, (np.floating,)):
        return float(value)
    if isinstance(value, (np.bool_,)):
        return bool(value)
    return value


class Run:
    """The run's settings, its datasets (read once) and its record, written after every step."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.cuda = torch.cuda.is_available() and not args.dry_run
        self.device = "cuda" if self.cuda else "cpu"
        self.mode = "device" if self.cuda else "dry_run"
        self.sizes = SIZES[self.mode]
        self.out = Path(args.out)
        self.log_dir = Path(args.log_dir)
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self.deadline = now() + args.budget
        self._graphs: dict[str, tuple] = {}
        self.record = {
            "mode": self.mode,
            "why": "CUDA device" if self.cuda else ("--dry-run" if args.dry_run else "no CUDA device: CPU fallback"),
            "device": torch.cuda.get_device_name() if self.cuda else "cpu",
            "started_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "host": {"cpus": os.cpu_count(), "load_average": list(os.getloadavg()), "machine": platform.machine()},
            "versions": versions(),
            "budget_seconds": args.budget,
            "sizes": self.sizes,
            "steps": {},
        }

    def graphs(self, name: str):
        if name not in self._graphs:
            graphs, y = load_dataset(name)
            if self.sizes["graphs"]:
                keep = subset(len(graphs), self.sizes["graphs"])
                graphs, y = [graphs[i] for i in keep], np.asarray(y)[keep]
            self._graphs[name] = (list(graphs), np.asarray(y))
        return self._graphs[name]

    def left(self) -> float:
        return self.deadline - now()

    def write(self) -> None:
        self.out.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.out.with_suffix(".tmp")
        tmp.write_text(json.dumps(jsonable(self.record), indent=1) + "\n")
        tmp.replace(self.out)

    def step(self, name: str, budget: float, function, *args) -> None:
        """Run ``function(self, budget, *args)`` into ``record["steps"][name]``, within what is left."""
        budget = min(budget, self.left() - 5)
        if budget < 3:
            self.record["steps"][name] = {"status": "skipped", "why": f"{self.left():.0f} s left of the run's budget"}
            self.write()
            return
        start = now()
        print(f"== {name} (budget {budget:.0f} s)", flush=True)
        try:
            out = {"status": "ok", **function(self, budget, *args)}
        except Exception as err:  # noqa: BLE001  one step's failure must not lose the others
            out = {"status": "error", "error": repr(err), "traceback": traceback.format_exc()[-4000:]}
        out["step_seconds"] = now() - start
        out["budget_seconds"] = budget
        self.record["steps"][name] = out
        print(json.dumps(jsonable({k: v for k, v in out.items() if k != "traceback"}))[:2000], flush=True)
        self.write()


def versions() -> dict:
    """Installed versions, read from the distributions' metadata (nothing imported: pykeops, say)."""
    from importlib import metadata

    out = {"python": platform.python_version(), "torch": torch.__version__, "torch_cuda": torch.version.cuda}
    names = ("numba", "numba-cuda", "torch_geometric", "POT", "geomloss", "pykeops", "keopscore", "triton")
    for name in names + ("dask", "distributed", "dask-cuda", "numpy"):
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = "absent"
    try:
        from mwsp_torch.transport.engines import numba_cuda_available

        out["numba_cuda_available"] = numba_cuda_available()
    except Exception as err:  # noqa: BLE001
        out["numba_cuda_available"] = repr(err)
    return out


# ---------------------------------------------------------------- tests

RESULT = re.compile(r"\b(PASSED|FAILED|ERROR|SKIPPED|XFAIL|XPASS)\b")
NODE = re.compile(r"(tests/\S+::\S+)")


def parse_pytest(lines: list[str]) -> dict:
    """Counts of ``-v`` result lines (with or without xdist's ``[gwN]`` prefix) and the failing ids."""
    counts: dict[str, int] = {}
    failed, cuda_ids = [], 0
    for line in lines:
        result, node = RESULT.search(line), NODE.search(line)
        if result is None or node is None or line.startswith(("FAILED ", "ERROR ")):  # -r summary lines
            continue
        kind = result.group(1).lower()
        counts[kind] = counts.get(kind, 0) + 1
        cuda_ids += "cuda" in node.group(1)
        if kind in ("failed", "error"):
            failed.append(node.group(1))
    summary = next((line.strip("= \n") for line in reversed(lines) if re.search(r"\d+ (passed|failed)", line)), None)
    return {"counts": counts, "results_naming_cuda": cuda_ids, "failed": failed, "summary": summary}


def tests_step(run: Run, budget: float) -> dict:
    env = dict(os.environ)
    if run.cuda:
        env["MWSP_TEST_CUDA"] = "1"
        files = [
            "tests/test_transport_exact.py",
            "tests/test_transport_gpu.py",
            "tests/test_transport_sinkhorn.py",
            "tests/test_gnn_vs_kernel.py",
            "tests/test_defaults.py",
        ]
        files += ["tests/test_estimator.py", "tests/test_distributed.py"]
        select = "(cuda or thread or triton) and not online"
    else:  # the same parsing, on a few fast tests
        env.pop("MWSP_TEST_CUDA", None)
        files, select = ["tests/test_defaults.py"], "auto_takes_the_thread_engine"
    plugins = ["-p", "no:cacheprovider", "-p", "no:benchmark"]
    command = [sys.executable, "-m", "pytest", *files, "-v", "-k", select, *plugins]
    try:
        import xdist  # noqa: F401

        if run.cuda:
            command += ["-n", "8"]
    except ImportError:
        pass
    lines: list[str] = []
    start = now()
    process = subprocess.Popen(command, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    timed_out = False
    try:
        import selectors

        sel = selectors.DefaultSelector()
        sel.register(process.stdout, selectors.EVENT_READ)
        while True:
            if now() - start > budget:
                timed_out = True
                process.kill()
                break
            if sel.select(timeout=1.0):
                line = process.stdout.readline()
                if not line:
                    break
                lines.append(line.rstrip("\n"))
        process.wait(timeout=30)
    finally:
        if process.poll() is None:
            process.kill()
    log = run.log_dir / "tests.log"
    log.write_text("\n".join(lines) + "\n")
    return {
        "command": " ".join(command),
        "MWSP_TEST_CUDA": env.get("MWSP_TEST_CUDA"),
        "returncode": process.returncode,
        "cut_at_budget": timed_out,
        "seconds": now() - start,
        "log": str(log),
        **parse_pytest(lines),
    }


# ---------------------------------------------------------------- exact engines


def fit_record(model: MWSP, seconds: float) -> dict:
    return {"engine": model.timings_.get("engine"), "seconds": seconds, "timings": dict(model.timings_)}


def timed_fit(graphs, device: str, **params) -> tuple[MWSP, dict]:
    start = now()
    model = MWSP(device=device, **params).fit(graphs)
    sync(device)
    return model, fit_record(model, now() - start)


def relative_difference(got: np.ndarray, want: np.ndarray) -> dict:
    gap = np.abs(got - want)
    positive = want > 0
    rel = gap[positive] / want[positive]
    return {
        "max_relative_difference": float(rel.max()) if rel.size else 0.0,
        "max_absolute_difference": float(gap.max()) if gap.size else 0.0,
        "equal_share": float(np.mean(got == want)),
    }


def exact_step(run: Run, budget: float, name: str, d: int, k: int) -> dict:
    start = now()
    graphs, _ = run.graphs(name)
    n_all = len(graphs)
    params = {"d": d, "k": k, "labels": default_labels(name)}
    chosen = subset(n_all, run.sizes["exact_subset"])
    part = [graphs[i] for i in chosen]
    # A first call on 20 graphs compiles the CUDA kernel (or loads it from numba's cache), so
    # that the subset's timing, which sizes what follows, is of warm calls.
    _, first = timed_fit(part[:20], run.device, **params)
    test, second = timed_fit(part, run.device, **params)
    reference, cpu = timed_fit(part, "cpu", solver=Exact(engine="compiled"), **params)
    out = {
        "dataset": name,
        "d": d,
        "k": k,
        "device": run.device,
        "exact_engine": "auto",
        "graphs": n_all,
        "subset": {
            "graphs": len(part),
            "warm_up_20_graphs": first,
            "default_engine": second,
            "cpu_compiled": cpu,
            **relative_difference(test.distances_, reference.distances_),
        },
    }
    features = second["timings"]["features"] / len(part)
    transport = second["timings"]["transport"] / max(second["timings"]["pairs"], 1)
    estimate = features * n_all + transport * n_all * (n_all - 1) / 2
    left = budget - (now() - start)
    out["all_pairs_estimate_from_subset_seconds"] = estimate
    if estimate <= 0.8 * left:
        _, full = timed_fit(graphs, run.device, **params)
        out["all_pairs"] = full
        out["engine"] = full["engine"]
        return out
    # The largest sample whose estimate fits 60 % of what is left: features * n + transport * n^2 / 2.
    target = 0.6 * left
    if target <= second["seconds"]:  # the subset took the step's time: extrapolate from it
        n, timed = len(part), second
        out["sample_is_the_subset"] = True
    else:
        n = int((-features + np.sqrt(features**2 + 2 * transport * target)) / transport) if transport > 0 else n_all
        n = int(np.clip(n, min(len(part) + 1, n_all), n_all))
        _, timed = timed_fit([graphs[i] for i in subset(n_all, n, seed=1)], run.device, **params)
    scale = (n_all * (n_all - 1)) / max(n * (n - 1), 1)
    t = timed["timings"]
    out["sample"] = timed | {"graphs": n}
    out["engine"] = timed["engine"]
    out["all_pairs_extrapolated"] = {
        "transport_seconds": t["transport"] * scale,
        "features_seconds": t["features"] * n_all / n,
        "seconds": t["transport"] * scale + t["features"] * n_all / n,
        "how": (
            f"a seeded sample of {n} of the {n_all} graphs fitted in full (the subset itself where the step had "
            f"no time left for more); its transport seconds scaled by the "
            f"ratio of graph pairs ({scale:.1f}x, linear in pairs), its features by graphs ({n_all / n:.1f}x). "
            "The full dataset's row bank is larger than the sample's, so the engine chosen on all graphs "
            "(the thread engine's table limit) can differ from the sample's engine."
        ),
    }
    return out


# ---------------------------------------------------------------- Sinkhorn


def sinkhorn_step(run: Run, budget: float) -> dict:
    start = now()
    graphs, _ = run.graphs("NCI1")
    defaults = Sinkhorn()
    support, _ = MWSP(d=2, k=0, labels=default_labels("NCI1")).supports(graphs)
    options = {
        "blur": defaults.blur,
        "scaling": defaults.scaling,
        "backend": defaults.backend,
        "device": run.device,
        # as MWSP.fit passes it: the training rows' diameter
        "diameter": sinkhorn_diameter(support.rows[np.unique(support.support)], defaults.blur),
    }
    wanted = run.sizes["sinkhorn_pairs"]
    pairs = random_pairs(support.num_graphs, wanted, seed=0)
    sample = pairs[: run.sizes["sinkhorn_sample"]]
    sinkhorn_distances(support, support, pairs[: min(512, len(sample))], **options)  # warm-up: compiles, allocates
    sync(run.device)
    t0 = now()
    sinkhorn_distances(support, support, sample, **options)
    sync(run.device)
    rate = len(sample) / (now() - t0)
    left = budget - (now() - start)
    count = len(pairs) if len(pairs) / rate <= 0.7 * left else max(len(sample), int(0.55 * left * rate))
    timed = pairs[:count]
    sync(run.device)
    t0 = now()
    approx = sinkhorn_distances(support, support, timed, **options)
    sync(run.device)
    seconds = now() - t0
    t0 = now()
    exact = exact_distances(support, support, timed, n_jobs=-1)
    exact_seconds = now() - t0
    positive = exact > 0
    rel = np.abs(approx[positive] - exact[positive]) / exact[positive]
    out = {
        "dataset": "NCI1",
        "d": 2,
        "k": 0,
        "graphs": support.num_graphs,
        "options": {k: v for k, v in options.items() if k != "diameter"} | {"diameter": float(options["diameter"])},
        "pairs_wanted": wanted,
        "pairs_timed": count,
        "seconds": seconds,
        "pairs_per_second": count / seconds,
        "sample_pairs_per_second": rate,
        "median_rel_error": float(np.median(rel)),
        "p90_rel_error": float(np.quantile(rel, 0.9)),
        "p99_rel_error": float(np.quantile(rel, 0.99)),
        "max_rel_error": float(rel.max()),
        "pairs_with_positive_W": int(positive.sum()),
        "exact_cpu_seconds": exact_seconds,
    }
    if count < wanted:
        out["extrapolated_seconds_for_wanted"] = wanted / out["pairs_per_second"]
        out["how"] = f"{count} of the {wanted} pairs timed (the budget); seconds for all of them = pairs / pairs_per_s"
    return out


# ---------------------------------------------------------------- GIN


def neural_labels(name: str) -> str:
    """As ``experiments/gnn_vs_kernel.py``: node labels where there are some, degrees otherwise (Errica et al.)."""
    return "auto" if default_labels(name) == "auto" else "degree"


def gin_epoch(name: str, graphs, y, device: str, limit: int = 0) -> dict:
    if limit:
        keep = subset(len(graphs), limit)
        graphs, y = [graphs[i] for i in keep], np.asarray(y)[keep]
    order = np.random.default_rng(0).permutation(len(graphs))
    cut = max(1, len(graphs) // 10)
    valid_idx, train_idx = order[:cut], order[cut:]
    start = now()
    vocabulary = TreeIDVocabulary(k=0, labels=neural_labels(name)).fit([graphs[i] for i in train_idx])
    data = tree_id_inputs(graphs, y, vocabulary)
    prepare = now() - start
    train, valid = [data[i] for i in train_idx], [data[i] for i in valid_idx]
    classes = int(np.max(y)) + 1
    s = GIN_SETTING

    def model():
        return GIN(OneHotLabels(vocabulary.sizes_), s["hidden"], s["layers"], classes, dropout=s["dropout"])

    # A warm-up epoch on 64 graphs: CUDA context, cuBLAS and the allocator, not timed.
    train_classifier(model(), train[:64], valid[:32], lr=s["lr"], batch_size=s["batch"], max_epochs=1, device=device)
    sync(device)
    log = train_classifier(
        model(), train, valid, lr=s["lr"], batch_size=s["batch"], max_epochs=1, patience=1, device=device, seed=0
    )
    sync(device)
    return {
        "graphs": len(graphs),
        "train_graphs": len(train),
        "validation_graphs": len(valid),
        "nodes": int(sum(g.num_nodes for g in graphs)),
        "epoch_seconds": log["seconds"],
        "prepare_seconds": prepare,
        "setting": s,
        "device": device,
        "torch_threads": torch.get_num_threads(),
    }


def gin_step(run: Run, budget: float) -> dict:
    start = now()
    reference = json.loads(CPU_REFERENCE.read_text()) if CPU_REFERENCE.exists() else None
    out = {"datasets": {}, "cpu_reference": reference}
    for name in GIN_DATASETS:
        if now() - start > budget:
            out["datasets"][name] = {"status": "skipped", "why": "step budget spent"}
            continue
        try:
            graphs, y = run.graphs(name)
            row = gin_epoch(name, graphs, y, run.device, run.sizes["gin_graphs"])
            cpu = (reference or {}).get("datasets", {}).get(name, {})
            if cpu.get("epoch_seconds"):
                row["cpu_reference_epoch_seconds"] = cpu["epoch_seconds"]
                if row["graphs"] == cpu.get("graphs"):
                    row["speedup_over_cpu_reference"] = cpu["epoch_seconds"] / row["epoch_seconds"]
            out["datasets"][name] = {"status": "ok", **row}
        except Exception as err:  # noqa: BLE001
            out["datasets"][name] = {"status": "error", "error": repr(err), "traceback": traceback.format_exc()[-3000:]}
    return out


# ---------------------------------------------------------------- Dask


def cluster(run: Run):
    """A one-worker cluster: ``LocalCUDACluster`` on a CUDA device, else a ``LocalCluster``; and why."""
    import dask
    from distributed import Client, LocalCluster

    from mwsp_torch.distributed import WORKER_ENV

    environ = {**dask.config.get("distributed.nanny.pre-spawn-environ", {}), **WORKER_ENV}
    kind, why = "LocalCluster", "no CUDA device (dry run)"
    threads = run.sizes["dask_threads"]
    with dask.config.set({"distributed.nanny.pre-spawn-environ": environ}):
        if run.cuda:
            try:
                from dask_cuda import LocalCUDACluster

                made = LocalCUDACluster(n_workers=1, threads_per_worker=threads, dashboard_address=None)
                return Client(made), made, "LocalCUDACluster", None
            except Exception as err:  # noqa: BLE001
                why = f"LocalCUDACluster failed: {err!r}"
        made = LocalCluster(n_workers=1, threads_per_worker=threads, processes=True, dashboard_address=None)
    return Client(made), made, kind, why


def dask_step(run: Run, budget: float) -> dict:
    graphs, _ = run.graphs("NCI1")
    part = [graphs[i] for i in subset(len(graphs), run.sizes["dask_graphs"], seed=2)]
    params = {"d": 2, "k": 0, "labels": default_labels("NCI1")}
    local, local_record = timed_fit(part, "cpu", solver=Exact(engine="compiled"), **params)
    start = now()
    client, made, kind, why = cluster(run)
    try:
        up = now() - start
        workers = client.scheduler_info()["workers"]
        # The workers' CPU kernels loaded (or built, where their sources differ from any build)
        # before the timer, as fit leaves its own process's build out of its timings.
        t0 = now()
        client.run(build_cpu_kernels)
        kernels = now() - t0
        remote, remote_record = timed_fit(part, "cpu", client=client, **params)
    finally:
        client.close()
        made.close()
    return {
        "cluster": kind,
        "fallback_why": why,
        "workers": len(workers),
        "threads_per_worker": run.sizes["dask_threads"],
        "cluster_start_seconds": up,
        "worker_kernels_seconds": kernels,
        "graphs": len(part),
        "in_process": local_record,
        "dask": remote_record,
        "equal_bit_for_bit": bool(np.array_equal(remote.distances_, local.distances_)),
        **relative_difference(remote.distances_, local.distances_),
    }


# ---------------------------------------------------------------- main


def cpu_reference(args: argparse.Namespace) -> None:
    torch.set_num_threads(args.threads)
    record = {
        "what": "one GIN epoch per dataset on this CPU, batch 32, hidden 64 x 4 (check_device.py --cpu-reference)",
        "measured_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "host": {"cpus": os.cpu_count(), "load_average_before": list(os.getloadavg()), "cpu": platform.processor()},
        "torch_threads": torch.get_num_threads(),
        "note": "a single short run, 1 epoch each, on 2 cores shared with other jobs (under load): indicative only",
        "versions": versions(),
        "datasets": {},
    }
    for name in GIN_DATASETS:
        graphs, y = load_dataset(name)
        record["datasets"][name] = gin_epoch(name, list(graphs), np.asarray(y), "cpu")
        print(name, json.dumps(record["datasets"][name]), flush=True)
    record["host"]["load_average_after"] = list(os.getloadavg())
    Path(args.cpu_reference).write_text(json.dumps(jsonable(record), indent=1) + "\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    default_out = Path(os.environ["OUT"]) / "check_device.json" if os.environ.get("OUT") else Path("check_device.json")
    parser.add_argument("--out", default=str(default_out), help="the JSON written (after every step)")
    parser.add_argument(
        "--log-dir", default=os.environ.get("OUT") or str(REPO / "scratch" / "gpu_check"), help="the tests' log"
    )
    parser.add_argument("--dry-run", action="store_true", help="on the CPU at tiny sizes, even with a GPU")
    parser.add_argument("--budget", type=float, default=390.0, help="seconds for all steps together")
    parser.add_argument("--steps", nargs="+", default=["tests", "exact", "sinkhorn", "gin", "dask"])
    parser.add_argument("--cpu-reference", help="time the GIN epochs on the CPU into this JSON instead")
    parser.add_argument("--threads", type=int, default=1, help="torch threads for --cpu-reference")
    args = parser.parse_args()
    if args.cpu_reference:
        cpu_reference(args)
        return
    run = Run(args)
    budgets = run.sizes["budgets"]
    run.write()
    if "tests" in args.steps:
        run.step("tests", budgets["tests"], tests_step)
    if "exact" in args.steps:
        for name, d, k in EXACT:
            step = f"exact_{name}_d{d}_k{k}"
            run.step(step, budgets[step], exact_step, name, d, k)
    if "sinkhorn" in args.steps:
        run.step("sinkhorn_NCI1", budgets["sinkhorn_NCI1"], sinkhorn_step)
    if "gin" in args.steps:
        run.step("gin", budgets["gin"], gin_step)
    if "dask" in args.steps:
        run.step("dask", budgets["dask"], dask_step)
    run.record["finished_utc"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    run.record["seconds"] = args.budget - run.left()
    run.write()
    statuses = {name: step["status"] for name, step in run.record["steps"].items()}
    print("== done:", json.dumps(statuses), "->", run.out, flush=True)


if __name__ == "__main__":
    main()
