# Sourced by run_on_device.sh and check_device.sh on the device machine, from the repository
# root, with the carry folder (prepare_carry.sh) beside the working tree: installs its wheels
# into /tmp/site, unpacks its datasets into /tmp/tudatasets, and sets the environment. Leaves
# $OUT made, $aot_skip (pytest arguments) and $setup_seconds set; returns non-zero on failure.
#
#   CARRY_DIR  the carry folder (default scratch/gpu_carry: whl/*.whl and tudatasets.tar.xz)
carry=${CARRY_DIR:-scratch/gpu_carry}
setup_start=$SECONDS
if [ ! -d "$carry/whl" ] || [ ! -f "$carry/tudatasets.tar.xz" ]; then
    echo "no $carry/whl or $carry/tudatasets.tar.xz: run benchmarks/gpu/prepare_carry.sh here and carry [\"$carry\"]" >&2
    return 1
fi
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site "$carry"/whl/*.whl || return 1
export PYTHONPATH="/tmp/site:$PWD" KEOPS_VERBOSE=0 PYTHONUNBUFFERED=1
# The image's numba-cuda registers an overload of np.row_stack, which its numpy (2.5) has
# dropped, so `numba.cuda` fails to import. A sitecustomize on the path puts the alias back
# before anything imports numba (workers of a Dask cluster too: they inherit PYTHONPATH).
[ -f /tmp/site/sitecustomize.py ] || printf '%s\n' 'import numpy' 'if not hasattr(numpy, "row_stack"):' \
    '    numpy.row_stack = numpy.vstack' >/tmp/site/sitecustomize.py
export MWSP_DATA_ROOT=/tmp/tudatasets MWSP_CACHE_DIR=/tmp/mwsp_cache
# The CPU kernels are compiled ahead of time on first use (mwsp_torch/compiled.py, about a minute),
# which needs the C compiler Python was built with. Where the image has none, numba's JIT runs
# them (the same values) and tests/test_compiled.py, which requires the build, is left out.
aot_skip=()
if python3 -c 'import shutil, sys, sysconfig; sys.exit(shutil.which((sysconfig.get_config_var("CC") or "cc").split()[0]) is None)'; then
    export MWSP_KERNELS=aot
else
    export MWSP_KERNELS=jit
    aot_skip=(--ignore=tests/test_compiled.py)
    echo "no C compiler on this image: MWSP_KERNELS=jit, tests/test_compiled.py left out"
fi
mkdir -p "$MWSP_DATA_ROOT" && tar -C "$MWSP_DATA_ROOT" -xJf "$carry/tudatasets.tar.xz" || return 1
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
nvidia-smi -L | tee "$OUT/device.txt"
setup_seconds=$((SECONDS - setup_start))
