"""Where one ``sinkhorn_distances(backend="triton")`` call spends its time, phase by phase.

After two warm-up calls (the first compiles every tile shape), times the call's parts
with the device synchronised after each: the shared row bank, its span (the diameter, with the schedule: ``span``),
the row-to-row table, the upload of the support set, the debiasing terms, the host side
of the cross terms (tile codes, sort, uploads, launches: ``cross_host``) and all of it
with the kernels (``cross_total``), the copy back; then the whole call. The debiasing
terms are computed for every graph, while the call computes them only for the graphs
its pairs use: on 1 M random NCI1 pairs, every graph. Two repetitions, one JSON object
each. Figures: ``benchmarks/HISTORY.md``, ``gpu_results/*triton_phases*``.

Usage (on a GPU machine)::

    python benchmarks/triton_sinkhorn_phases.py --dataset NCI1 --pairs 1000000 --dtype float32 --scaling 0.9
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
from gpu_sinkhorn import add_problem_arguments, support_and_pairs  # noqa: E402

from mwsp_torch import _triton_sinkhorn as kernels  # noqa: E402
from mwsp_torch._batched_sinkhorn import epsilon_schedule  # noqa: E402
from mwsp_torch.transport import _distance_table, _shared_bank, sinkhorn_diameter, sinkhorn_distances  # noqa: E402


class Laps:
    """Seconds between calls of :meth:`lap`, the device synchronised before each reading."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}
        torch.cuda.synchronize()
        self.start = time.perf_counter()

    def lap(self, name: str) -> None:
        torch.cuda.synchronize()
        self.seconds[name] = round(time.perf_counter() - self.start, 4)
        self.start = time.perf_counter()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_problem_arguments(parser, pairs=1000000)
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--blur", type=float, default=0.01)
    parser.add_argument("--scaling", type=float, default=0.9)
    args = parser.parse_args()
    support, pairs = support_and_pairs(args)
    options = dict(blur=args.blur, scaling=args.scaling, device="cuda", backend="triton", dtype=args.dtype)
    sinkhorn_distances(support, support, pairs[:20000], **options)
    sinkhorn_distances(support, support, pairs, **options)
    for _ in range(2):
        laps = Laps()
        lap = laps.lap
        bank = _shared_bank(support, support)
        lap("bank")
        eps_list = epsilon_schedule(sinkhorn_diameter(bank, args.blur), args.blur, args.scaling)
        lap("span")  # the diameter and the schedule
        table = _distance_table(bank, "cuda", floor=1e-8).to(getattr(torch, args.dtype))
        lap("table")
        sset = kernels.measures(*support.arrays(), table.dtype, table.device)
        lap("upload")
        half = kernels.self_terms(table, sset, np.arange(support.num_graphs), eps_list)
        lap("self")
        host = time.perf_counter()
        out = kernels.cross_terms(table, sset, sset, pairs, eps_list, half, half)
        laps.seconds["cross_host"] = round(time.perf_counter() - host, 4)
        lap("cross_total")
        out.to(torch.float64).cpu().numpy()
        lap("copy_back")
        sinkhorn_distances(support, support, pairs, **options)
        lap("whole_call")
        print(json.dumps({
            "dtype": args.dtype, "scaling": args.scaling, "temperatures": len(eps_list), "pairs": len(pairs),
        } | laps.seconds), flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
