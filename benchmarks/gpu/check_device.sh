#!/usr/bin/env bash
# The one device check (docs/gpu.md, "Checking a lent GPU"): set up the device machine from the
# carry folder (device_env.sh), build the CPU kernels once, then benchmarks/gpu/check_device.py,
# which writes $OUT/check_device.json (after every step, so a cut run keeps what finished), with
# its log $OUT/check_device.log and the tests' log $OUT/tests.log. All in about 7.5 minutes on
# an H100/H200: TOTAL seconds (default 450) from this script's start, the steps getting what
# the set-up and the kernel build leave.
#
# On the device machine, with the `run` tool:
#   command  bash benchmarks/gpu/check_device.sh
#   carry    ["scratch/gpu_carry"]          (made here by benchmarks/gpu/prepare_carry.sh)
#   timeout_s 540
#
# Here, without a GPU (the CPU dry run: every step at tiny sizes, from this checkout's venv
# and $MWSP_DATA_ROOT, default /work/shared/tudatasets):
#   bash benchmarks/gpu/check_device.sh --dry-run      (writes benchmarks/gpu_results/cpu_dry_run.json)
set -uo pipefail
cd "$(dirname "$0")/../.."
total=${TOTAL:-450}
if [ "${1:-}" = --dry-run ]; then
    export MWSP_DATA_ROOT=${MWSP_DATA_ROOT:-/work/shared/tudatasets} PYTHONUNBUFFERED=1
    [ -f .venv/bin/activate ] && . .venv/bin/activate
    out=${DRY_RUN_OUT:-benchmarks/gpu_results/cpu_dry_run.json}
    mkdir -p scratch/gpu_check
    python3 benchmarks/gpu/check_device.py --dry-run --out "$out" --log-dir scratch/gpu_check --budget 300 2>&1 |
        tee scratch/gpu_check/check_device.log
    exit "${PIPESTATUS[0]}"
fi
# shellcheck source=benchmarks/gpu/device_env.sh
. benchmarks/gpu/device_env.sh || exit 1
echo "set-up: ${setup_seconds} s"
start=$SECONDS
python3 -c 'from mwsp_torch.transport.engines import build_cpu_kernels; build_cpu_kernels()' >"$OUT/kernels.log" 2>&1
echo "CPU kernels (MWSP_KERNELS=$MWSP_KERNELS): rc=$? after $((SECONDS - start)) s"
left=$((total - SECONDS))
echo "steps get $left s"
timeout --kill-after=10 $((left + 30)) python3 benchmarks/gpu/check_device.py --out "$OUT/check_device.json" \
    --log-dir "$OUT" --budget "$left" 2>&1 | tee "$OUT/check_device.log"
rc=${PIPESTATUS[0]}
echo "check_device.py rc=$rc after $SECONDS s in all"
exit "$rc"
