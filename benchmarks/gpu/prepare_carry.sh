#!/usr/bin/env bash
# Builds, on this (CPU) machine, the folder a device run carries beside the working tree
# (default scratch/gpu_carry, ignored through .gitignore's /scratch/):
#   whl/                 what the device image (Python 3.12; torch, torch_geometric, numba,
#                        scikit-learn there) lacks: POT, geomloss, pykeops, keopscore, and
#                        dask, distributed, dask-cuda with the dependencies the image lacks
#                        (tornado, zict, tblib, partd, locket);
#   tudatasets.tar.xz    the TU datasets' raw files from $MWSP_DATA_ROOT: NCI1, DD and
#                        REDDIT-BINARY (check_device.py) and those the tests read.
# Then prints the sizes, with the working tree's (tracked and untracked-not-ignored files, which
# travel too), and fails if the total is over the device tool's 64 MiB.
# With the device tool: carry ["scratch/gpu_carry"], command
#   bash benchmarks/gpu/check_device.sh           (or: bash benchmarks/gpu/run_on_device.sh thread|tests|sinkhorn)
#
# Usage: MWSP_DATA_ROOT=DIR bash benchmarks/gpu/prepare_carry.sh
#   DATASETS="NCI1 DD"   pack fewer;  CARRY_DIR=DIR  another folder (an ignored one, relative to the root)
set -euo pipefail
cd "$(git rev-parse --show-toplevel)"
source_root=${MWSP_DATA_ROOT:?set MWSP_DATA_ROOT to the folder holding NAME/raw/NAME_*.txt}
datasets=${DATASETS:-NCI1 DD REDDIT-BINARY MUTAG PTC_MR ENZYMES PROTEINS IMDB-BINARY Cuneiform}
carry=${CARRY_DIR:-scratch/gpu_carry}
if ! git check-ignore -q "$carry"; then
    echo "$carry is not ignored by git: the device tool carries ignored paths only" >&2
    exit 1
fi
# POT 0.9.6.post1, not 0.9.7.post1 (the version here): 0.9.7's wheel is 33 MB (its ot/bsp
# extension alone 175 MB unpacked), half the 64 MiB that travels; 0.9.6's is 1.5 MB with the
# same network simplex (ot.lp.emd_wrap), which is all mwsp_torch and its tests use.
pot=${POT_VERSION:-0.9.6.post1}
# dask and distributed at the versions dask-cuda 26.10 pins (rapids-dask-dependency 26.10:
# >=2026.7.1,<2026.7.2); installed --no-deps there, so the pin is kept by hand here.
binary=(POT=="$pot" dask==2026.7.1 distributed==2026.7.1 dask-cuda==26.10.0
    tornado==6.6.1 zict==3.0.0 tblib==3.2.2 partd==1.4.2 locket==1.0.0)
rm -rf "$carry"
mkdir -p "$carry/whl"
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_24_x86_64 --platform manylinux_2_17_x86_64 \
    --platform manylinux2014_x86_64 --platform manylinux1_x86_64 -d "$carry/whl" "${binary[@]}"
# Source-only on PyPI; pure Python, so a wheel built here installs there.
python3 -m pip wheel -q --no-deps -w "$carry/whl" geomloss==0.3.1 pykeops==2.3 keopscore==2.3
# shellcheck disable=SC2086  # one word per dataset
tar -C "$source_root" -cf - $datasets | xz -6 -T2 >"$carry/tudatasets.tar.xz"
ls -l "$carry/whl"
size() { du -sb "$@" | awk '{s += $1} END {print s}'; }
wheels=$(size "$carry/whl")
data=$(size "$carry/tudatasets.tar.xz")
tree=$(git ls-files -co --exclude-standard -z | du -cb --files0-from=- 2>/dev/null | tail -n 1 | cut -f1)
all=$((wheels + data + tree))
limit=$((64 * 1024 * 1024))
printf '%-32s %6.1f MiB\n' "wheels ($carry/whl)" "$(bc -l <<<"$wheels / 1048576")" \
    "datasets (tudatasets.tar.xz)" "$(bc -l <<<"$data / 1048576")" \
    "working tree (travels too)" "$(bc -l <<<"$tree / 1048576")" \
    "total" "$(bc -l <<<"$all / 1048576")" "limit" 64
if [ "$all" -gt "$limit" ]; then
    echo "over the device tool's 64 MiB: pack fewer DATASETS or leave a wheel out" >&2
    exit 1
fi
