#!/usr/bin/env bash
# On the device machine, from the repository root, with .whl and .data carried (see
# prepare_carry.sh): installs the carried wheels, unpacks the datasets, and runs one job.
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
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH="/tmp/site:$PWD" KEOPS_VERBOSE=0 MWSP_TEST_CUDA=1
# The image's numba-cuda registers an overload of np.row_stack, which its numpy (2.5) has
# dropped, so `numba.cuda` fails to import. A sitecustomize on the
# path puts the alias back before anything imports numba.
[ -f /tmp/site/sitecustomize.py ] || printf '%s\n' 'import numpy' 'if not hasattr(numpy, "row_stack"):' \
    '    numpy.row_stack = numpy.vstack' >/tmp/site/sitecustomize.py
export MWSP_DATA_ROOT=/tmp/tudatasets MWSP_CACHE_DIR=/tmp/mwsp_cache
# The CPU kernels are compiled ahead of time on first use (mwsp_torch/_aot.py, about a minute),
# which needs the C compiler Python was built with. Where the image has none, numba's JIT runs
# them (the same values) and tests/test_aot.py, which requires the build, is left out.
aot_skip=()
if python3 -c 'import shutil, sys, sysconfig; sys.exit(shutil.which((sysconfig.get_config_var("CC") or "cc").split()[0]) is None)'; then
    export MWSP_KERNELS=aot
else
    export MWSP_KERNELS=jit
    aot_skip=(--ignore=tests/test_aot.py)
    echo "no C compiler on this image: MWSP_KERNELS=jit, tests/test_aot.py left out"
fi
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
