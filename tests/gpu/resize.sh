#!/usr/bin/env bash
# resize.sh - an in-flight resize on a real GPU (gpu_resize.c): the quota
# of a running CUDA program's region lowered below its use and raised
# again, as the node agent does for `cnlab server resize`.  Exits 77
# (CTest: skipped) with the reason where there is no GPU or no toolkit.
#   tests/gpu/resize.sh LIBCNLAB_CUDA_SO CNLAB_REGION_TOOL
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
shim=$1
tool=$2
skip() {
	echo "SKIP: $*"
	exit 77
}
command -v nvidia-smi >/dev/null 2>&1 || skip "no NVIDIA driver (nvidia-smi not found); the GPU checks need a GPU"
nvidia-smi -L 2>/dev/null | grep -q '^GPU' || skip "nvidia-smi lists no GPU"
command -v nvcc >/dev/null 2>&1 || skip "no nvcc: the GPU checks compile CUDA programs (CUDA toolkit)"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
nvcc -O2 -I"$here" -o "$work/gpu_resize" "$here/gpu_resize.c" -lcuda
"$tool" create "$work/r" --quota 4G --share 50 --project gpu
CNLAB_REGION="$work/r" LD_PRELOAD="$shim" "$work/gpu_resize" "$work/r" "$tool"
"$tool" stat "$work/r"
echo "gpu: resize checks passed"
