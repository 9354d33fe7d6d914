"""Warps per program for the Triton Sinkhorn kernels (``backend="triton"``), by tile shape.

For the most common tile shapes of random pairs, times the cross kernel alone (the
debiasing terms and the host-side preparation excluded, the device synchronised) at a
few ``num_warps``, in each dtype; then the whole ``sinkhorn_distances`` call at the
defaults and at the best warps found, and the largest difference from the torch loop
(``backend="fused"``) on a subset. One JSON object per line.

Usage (on a GPU machine)::

    python benchmarks/triton_sinkhorn_tuning.py --dataset NCI1 --pairs 2000000
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("KEOPS_VERBOSE", "0")

import numpy as np  # noqa: E402
import torch  # noqa: E402

sys.path.insert(0, str(Path(__file__).parent))
from gpu_sinkhorn import add_problem_arguments, support_and_pairs, synchronize  # noqa: E402

from mwsp_torch import _triton_sinkhorn as kernels  # noqa: E402
from mwsp_torch._batched_sinkhorn import epsilon_schedule  # noqa: E402
from mwsp_torch.transport import _distance_table, _shared_bank, sinkhorn_diameter, sinkhorn_distances  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_problem_arguments(parser, pairs=2000000)
    parser.add_argument("--shape-pairs", type=int, default=500000, help="pairs timed per tile shape")
    parser.add_argument("--shapes", type=int, default=4, help="most common tile shapes swept")
    parser.add_argument("--check-pairs", type=int, default=100000, help="pairs compared with the torch loop")
    parser.add_argument("--blur", type=float, default=0.01)
    parser.add_argument("--scaling", type=float, default=0.9)
    parser.add_argument("--dtypes", nargs="+", default=["float64", "float32"])
    parser.add_argument("--device", default="cuda")
    args = parser.parse_args()
    support, pairs = support_and_pairs(args)
    bank = _shared_bank(support, support)
    eps_list = epsilon_schedule(sinkhorn_diameter(bank, args.blur), args.blur, args.scaling)
    blocks = kernels.block_sizes(np.diff(support.graph_ptr))
    shapes, counts = np.unique(np.stack([blocks[pairs[:, 0]], blocks[pairs[:, 1]]], 1), axis=0, return_counts=True)
    common = [tuple(int(v) for v in shapes[s]) for s in np.argsort(-counts)[: args.shapes]]
    device_name = torch.cuda.get_device_name() if args.device.startswith("cuda") else "cpu"
    base = {"dataset": args.dataset, "d": args.d, "k": args.k, "blur": args.blur, "scaling": args.scaling}
    base |= {"device": device_name, "temperatures": len(eps_list)}
    print(
        json.dumps(base | {"shapes": {f"{m}x{n}": int(c) for (m, n), c in zip(shapes.tolist(), counts, strict=True)}})
    )
    best = {}
    for dtype in args.dtypes:
        table = _distance_table(bank, args.device, floor=1e-8).to(getattr(torch, dtype))
        sset = kernels.measures(*support.arrays(), table.dtype, table.device)
        for bm, bn in common:
            chosen = pairs[(blocks[pairs[:, 0]] == bm) & (blocks[pairs[:, 1]] == bn)][: args.shape_pairs]
            entries = bm * bn
            timings = {}
            for warps in sorted({min(16, max(1, entries // per)) for per in (32 * 32, 32 * 16, 32 * 8, 32 * 4)}):
                kernels.NUM_WARPS[(bm, bn)] = warps
                start = time.perf_counter()
                kernels.cross_terms(table, sset, sset, chosen[:64], eps_list)  # compiles
                synchronize(args.device)
                compile_seconds = time.perf_counter() - start
                synchronize(args.device)
                start = time.perf_counter()
                kernels.cross_terms(table, sset, sset, chosen, eps_list)
                synchronize(args.device)
                seconds = time.perf_counter() - start
                timings[warps] = seconds
                print(json.dumps(base | {
                    "dtype": dtype, "shape": f"{bm}x{bn}", "num_warps": warps, "pairs": len(chosen),
                    "seconds": seconds, "pairs_per_second": len(chosen) / seconds,
                    "first_call_seconds": compile_seconds,
                }), flush=True)  # fmt: skip
            best[(dtype, bm, bn)] = min(timings, key=timings.get)
            kernels.NUM_WARPS.pop((bm, bn))
        del table, sset
    print(json.dumps(base | {"best_num_warps": {f"{d} {m}x{n}": w for (d, m, n), w in best.items()}}), flush=True)
    for dtype in args.dtypes:  # the parts of one call: launches (host) and the kernels' end
        table = _distance_table(bank, args.device, floor=1e-8).to(getattr(torch, dtype))
        sset = kernels.measures(*support.arrays(), table.dtype, table.device)
        synchronize(args.device)
        start = time.perf_counter()
        kernels.cross_terms(table, sset, sset, pairs, eps_list)
        launched = time.perf_counter() - start
        synchronize(args.device)
        seconds = time.perf_counter() - start
        start = time.perf_counter()
        sinkhorn_distances(
            support,
            support,
            pairs[:1000],
            blur=args.blur,
            scaling=args.scaling,
            device=args.device,
            backend="triton",
            dtype=dtype,
        )
        small = time.perf_counter() - start
        print(json.dumps(base | {
            "dtype": dtype, "pairs": len(pairs), "cross_launch_seconds": launched, "cross_seconds": seconds,
            "call_seconds_1000_pairs": small,
        }), flush=True)  # fmt: skip
        del table, sset
    check = pairs[: args.check_pairs]
    options = dict(blur=args.blur, scaling=args.scaling, device=args.device, backend="triton")
    fused = sinkhorn_distances(support, support, check, **(options | {"backend": "fused", "batch_size": 1 << 20}))
    for dtype in args.dtypes:
        for tuned in (False, True):
            kernels.NUM_WARPS.clear()
            if tuned:
                kernels.NUM_WARPS.update({(m, n): w for (d, m, n), w in best.items() if d == dtype})
            sinkhorn_distances(support, support, pairs[:20000], dtype=dtype, **options)  # compiles the rest
            calls = []
            for _ in range(2):
                synchronize(args.device)
                start = time.perf_counter()
                sinkhorn_distances(support, support, pairs, dtype=dtype, **options)
                synchronize(args.device)
                calls.append(time.perf_counter() - start)
            got = sinkhorn_distances(support, support, check, dtype=dtype, **options)
            rel = np.abs(got - fused) / np.maximum(np.abs(fused), 1e-12)
            print(json.dumps(base | {
                "dtype": dtype, "tuned_warps": tuned, "pairs": len(pairs), "seconds_per_call": calls,
                "pairs_per_second": len(pairs) / min(calls), "check_pairs": len(check),
                "max_rel_diff_vs_fused": float(rel.max()), "median_rel_diff_vs_fused": float(np.median(rel)),
            }), flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
