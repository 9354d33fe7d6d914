#!/usr/bin/env bash
# On the device machine, with scratch/gpu_carry carried (see prepare_carry.sh): installs the
# carried wheels, unpacks the datasets (device_env.sh), and runs one job. For the one-pass
# check of a lent GPU, use check_device.sh instead.
# Each step's full log goes to $OUT/<step>.log (the device tool brings $OUT back); its
# exit status and last lines go to stdout.
#
#   thread    the thread engine's CUDA tests, then benchmarks/thread_exact.py on NCI1:
#             200,000 pairs at 32-256 threads a block, then all 8,443,995 pairs; each
#             timing twice, the host sharing the small pairs and leaving them to the GPU
#   tests     the whole suite with the CUDA tests on (pykeops' online backend left out:
#             its nvrtc compile segfaulted on the H100 image tried)
#   sinkhorn  benchmarks/gpu_sinkhorn.py on NCI1, 1,000,000 random pairs, Triton backend,
#             blur 0.01, scalings 0.9 and 0.5, float32 and float64 (the script's defaults,
#             geomloss at scaling 0.99, ran 1.6e4 pairs/s and took 61-92 s a call on an H100)
set -uo pipefail
job=${1:-thread}
cd "$(dirname "$0")/../.."
# Wheels, datasets, PYTHONPATH, MWSP_KERNELS, $OUT and $aot_skip, from the carry folder.
# shellcheck source=benchmarks/gpu/device_env.sh
. benchmarks/gpu/device_env.sh || exit 1
export MWSP_TEST_CUDA=1

step() {
    local name=$1
    shift
    echo "== $name: $*"
    local start=$SECONDS
    "$@" >"$OUT/$name.log" 2>&1
    echo "rc=$? after $((SECONDS - start)) s"
    grep -v -i warning "$OUT/$name.log" | tail -n 20
}

case "$job" in
thread)
    step tests_thread python3 -m pytest tests -q -k thread -p no:benchmark "${aot_skip[@]}"
    step thread_nci1_200k python3 benchmarks/thread_exact.py --dataset NCI1 --pairs 200000 --device cuda \
        --n-jobs 16 --threads-per-block 32 64 128 256
    step thread_nci1_all python3 benchmarks/thread_exact.py --dataset NCI1 --pairs 8443995 --device cuda --n-jobs 16
    ;;
tests)
    step tests_all python3 -m pytest tests -q -n 8 -k "not online" -p no:benchmark "${aot_skip[@]}"
    ;;
sinkhorn)
    step sinkhorn_nci1 python3 benchmarks/gpu_sinkhorn.py --dataset NCI1 --pairs 1000000 --blurs 0.01 \
        --scalings 0.9 0.5 --backend triton --dtypes float32 float64 --device cuda --n-jobs 16 --repeats 2
    ;;
*)
    echo "unknown job $job: expected thread, tests or sinkhorn" >&2
    exit 2
    ;;
esac
