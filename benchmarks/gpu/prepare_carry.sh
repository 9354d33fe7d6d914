#!/usr/bin/env bash
# Builds, on this (CPU) machine, what a device run carries beside the working tree:
#   .whl/  POT, geomloss, pykeops and keopscore for the device image's Python 3.12
#          (its image lacks them; numba, torch and torch_geometric are there);
#   .data/ the TU datasets' raw files from $MWSP_DATA_ROOT, one xz tarball.
# Both folders are ignored through .git/info/exclude, as the device tool's `carry` needs.
# Then, with the device tool: carry [".whl", ".data"], command
#   bash benchmarks/gpu/run_on_device.sh thread      (or: tests, sinkhorn)
#
# Usage: MWSP_DATA_ROOT=DIR bash benchmarks/gpu/prepare_carry.sh   (DATASETS="MUTAG NCI1" to pack fewer)
set -euo pipefail
cd "$(git rev-parse --show-toplevel)"
source_root=${MWSP_DATA_ROOT:?set MWSP_DATA_ROOT to the folder holding NAME/raw/NAME_*.txt}
datasets=${DATASETS:-MUTAG PTC_MR ENZYMES PROTEINS NCI1 IMDB-BINARY Cuneiform DD}
mkdir -p .git/info
for folder in /.whl/ /.data/; do
    grep -qxF "$folder" .git/info/exclude 2>/dev/null || echo "$folder" >>.git/info/exclude
done
rm -rf .whl .data
mkdir -p .whl .data
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
    -d .whl POT==0.9.7.post1
python3 -m pip wheel -q --no-deps -w .whl geomloss==0.3.1 pykeops==2.3 keopscore==2.3
# shellcheck disable=SC2086  # one word per dataset
tar -C "$source_root" -cJf .data/tudatasets.tar.xz $datasets
du -sh .whl .data
