#!/usr/bin/env bash
# hip.sh - the HIP shim's memory checks on a real AMD GPU (MI300X, MI250X,
# MI250): tests/shim/hiptest built here against the installed libamdhip64
# (not the fake), run with libcnlab-hip.so preloaded.  No kernel is
# launched (that needs hipcc); the checks are the quota seen through
# hipMemGetInfo, an allocation over it refused, one under it granted and
# charged in whole 4 KiB pages, a missing region failing closed, and a
# library loaded with dlmopen into a new namespace refused.
# Exits 77 (CTest: skipped) with the reason where there is no AMD GPU or
# no HIP runtime.
#   tests/gpu/hip.sh LIBCNLAB_HIP_SO CNLAB_REGION_TOOL
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
shim=$1
tool=$2
skip() {
	echo "SKIP: $*"
	exit 77
}
[ -c /dev/kfd ] || skip "no /dev/kfd: no AMD GPU (amdgpu driver) on this machine"
ls /dev/dri/renderD* >/dev/null 2>&1 || skip "no /dev/dri/renderD*: no AMD GPU"
[ -f /usr/include/hip/hip_runtime_api.h ] || [ -f /opt/rocm/include/hip/hip_runtime_api.h ] ||
	skip "no HIP headers (libamdhip64-dev or ROCm)"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cc -O2 -I/opt/rocm/include -L/opt/rocm/lib -o "$work/hiptest" \
	"$here/../shim/hiptest.c" -lamdhip64 -ldl ||
	skip "cannot link against libamdhip64"
quota=$((1 << 30))
"$tool" create "$work/r" --quota "$quota" --share 0 --project gpu
out=$(printf 'info\nalloc malloc 2147483648\nalloc malloc 1000000\n' |
	CNLAB_REGION="$work/r" LD_PRELOAD="$shim" "$work/hiptest" repl | tr '\n' ' ')
echo "hiptest: $out"
read -r ready free total a1 r1 a2 _ <<<"$out"
[ "$ready" = ready ] || { echo "FAIL: hiptest did not start"; exit 1; }
[ "$total" -eq "$quota" ] && [ "$free" -le "$quota" ] ||
	{ echo "FAIL: hipMemGetInfo shows $free/$total, not the 1 GiB quota"; exit 1; }
[ "$a1 $r1" = "fail 2" ] || { echo "FAIL: 2 GiB over a 1 GiB quota: $a1 $r1"; exit 1; }
[ "$a2" = ok ] || { echo "FAIL: 1 MB under the quota: $a2"; exit 1; }
"$tool" stat "$work/r"
out=$(printf 'alloc malloc 4096\ninfo\n' |
	CNLAB_REGION="$work/absent" LD_PRELOAD="$shim" "$work/hiptest" repl 2>/dev/null | tr '\n' ' ')
[[ "$out" == "ready fail 2 0 "* ]] || { echo "FAIL: a missing region did not fail closed: $out"; exit 1; }
# A tenant's HIP library loaded with dlmopen into a new link-map namespace
# (a private libamdhip64 the shim is not in front of) is refused in a slice.
cc -O2 -shared -fPIC -I/opt/rocm/include -L/opt/rocm/lib -o "$work/libescape.so" \
	"$here/../shim/escape_hip.c" -lamdhip64 ||
	skip "cannot build a library against libamdhip64"
out=$(printf 'ns direct 2147483648 %s\nns dlopen 2147483648 %s\n' \
	"$work/libescape.so" "$work/libescape.so" |
	CNLAB_REGION="$work/r" LD_PRELOAD="$shim" "$work/hiptest" repl 2>/dev/null | tr '\n' ' ')
[ "$out" = "ready refused fail 2 " ] ||
	{ echo "FAIL: 2 GiB from a library in a new namespace or dlopened: $out"; exit 1; }
echo "gpu hip: all checks passed"
