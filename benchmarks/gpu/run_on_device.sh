#!/usr/bin/env bash
# On the device machine, from the repository root, with .whl and .data carried (see
# prepare_carry.sh): installs the carried wheels, unpacks the datasets, and runs one job.
# Each step's full log goes to $OUT/<step>.log (the device tool brings $OUT back); its
# exit status and last lines go to stdout.
#
#   thread    the thread engine's CUDA tests, then benchmarks/thread_exact.py on NCI1:
#             200,000 pairs at 32-256 threads a block, then all 8,443,995 pairs
#   tests     the whole suite with the CUDA tests on (pykeops' online backend left out:
#             its nvrtc compile segfaulted on this image, third session of 2026-11-22)
#   sinkhorn  benchmarks/gpu_sinkhorn.py on NCI1, 1,000,000 random pairs
set -uo pipefail
job=${1:-thread}
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH="/tmp/site:$PWD" KEOPS_VERBOSE=0 MWSP_TEST_CUDA=1
export MWSP_DATA_ROOT=/tmp/tudatasets MWSP_CACHE_DIR=/tmp/mwsp_cache
mkdir -p "$MWSP_DATA_ROOT" && tar -C "$MWSP_DATA_ROOT" -xJf .data/tudatasets.tar.xz || exit 1
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
nvidia-smi -L | tee "$OUT/device.txt"

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
    step tests_thread python3 -m pytest tests -q -k thread -p no:benchmark
    step thread_nci1_200k python3 benchmarks/thread_exact.py --dataset NCI1 --pairs 200000 --device cuda \
        --n-jobs 16 --threads-per-block 32 64 128 256
    step thread_nci1_all python3 benchmarks/thread_exact.py --dataset NCI1 --pairs 8443995 --device cuda --n-jobs 16
    ;;
tests)
    step tests_all python3 -m pytest tests -q -n 8 -k "not online" -p no:benchmark
    ;;
sinkhorn)
    step sinkhorn_nci1 python3 benchmarks/gpu_sinkhorn.py --dataset NCI1 --pairs 1000000
    ;;
*)
    echo "unknown job $job: expected thread, tests or sinkhorn" >&2
    exit 2
    ;;
esac
