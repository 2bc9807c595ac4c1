#!/usr/bin/env bash
# run.sh - the shim's checks on a real GPU, with real CUDA programs built
# here by nvcc (driver API: gpu_driver.c, runtime API: gpu_runtime.cu).
# Exits 77 (CTest: skipped) with the reason where there is no GPU or no
# toolkit, so it runs as it is on a GPU machine and costs nothing elsewhere.
#   tests/gpu/run.sh LIBCNLAB_CUDA_SO CNLAB_REGION_TOOL
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
nvcc -O2 -I"$here" -o "$work/gpu_runtime" "$here/gpu_runtime.cu"
nvcc -O2 -I"$here" -o "$work/gpu_driver" "$here/gpu_driver.c" -lcuda -ldl
nvcc -O2 -I"$here" -o "$work/gpu_escapes" "$here/gpu_escapes.c" -lcuda -ldl
nvcc -O2 -shared -Xcompiler -fPIC -I"$here/../../src" -o "$work/libescape_ns.so" "$here/../shim/escape_ns.c" -lcuda
nvcc -ptx -o "$work/spin.ptx" "$here/spin.cu"
# The framework-shaped programs of tests/shim, built against the real driver.
for fw in fw_torch fw_jax; do
	nvcc -O2 -DCNL_HAVE_CUDA_H=1 -I"$here/../shim" -o "$work/$fw" "$here/../shim/$fw.c" -lcuda -ldl
done
quota=$((1 << 30))

echo "== without the shim"
"$work/gpu_runtime" 0 0

echo "== driver API, quota 1 GiB, share 25%"
"$tool" create "$work/r1" --quota "$quota" --share 25 --project gpu
CNLAB_REGION="$work/r1" LD_PRELOAD="$shim" "$work/gpu_driver" "$work/spin.ptx" "$quota" 25
"$tool" stat "$work/r1"

echo "== runtime API, quota 1 GiB, share 30%"
"$tool" create "$work/r2" --quota "$quota" --share 30 --project gpu
CNLAB_REGION="$work/r2" LD_PRELOAD="$shim" "$work/gpu_runtime" "$quota" 30
"$tool" stat "$work/r2"
echo "== escapes (heap, graph memory, 32-bit info, shareable fds, wrapping stack, dlmopen), quota 1 GiB"
"$tool" create "$work/r3" --quota "$quota" --project gpu
CNLAB_REGION="$work/r3" LD_PRELOAD="$shim" "$work/gpu_escapes" "$quota" "$work/libescape_ns.so"
"$tool" stat "$work/r3"
echo "== framework-shaped programs, quota 1 GiB (PyTorch caching and expandable segments, JAX)"
"$tool" create "$work/r4" --quota "$quota" --project gpu
fw() { CNLAB_REGION="$work/r4" CNL_TEST_QUOTA="$quota" LD_PRELOAD="$shim" "$@"; }
fw "$work/fw_torch" caching
fw "$work/fw_torch" expandable
# 75% of 1 GiB for JAX: 600 MiB of work fits, 900 MiB does not (with and
# without preallocation).  Output captured, then matched: no early-closing
# pipe under pipefail.
jax() {
	local out
	out=$(XLA_PYTHON_CLIENT_PREALLOCATE=$1 fw "$work/fw_jax" "$2")
	echo "$out"
	grep -q "^$3 " <<<"$out" || { echo "FAIL: fw_jax preallocate=$1 $2 MiB: want $3"; exit 1; }
}
jax true 600 ok
jax true 900 oom
jax false 600 ok
jax false 900 oom
"$tool" stat "$work/r4"
echo "== a killed process leaves the accounting on its own (issue 18)"
"$tool" create "$work/r5" --quota "$quota" --project gpu
CNLAB_REGION="$work/r5" LD_PRELOAD="$shim" "$work/gpu_driver" --hold $((256 << 20)) >"$work/hold.out" &
holder=$!
for _ in $(seq 200); do grep -q held "$work/hold.out" 2>/dev/null && break; sleep 0.05; done
grep -q held "$work/hold.out" || { echo "FAIL: the holder did not allocate"; exit 1; }
"$tool" stat "$work/r5" | grep -qx "used=$((256 << 20))" || { echo "FAIL: 256 MiB not charged"; "$tool" stat "$work/r5"; exit 1; }
kill -9 "$holder"
wait "$holder" 2>/dev/null || true
gone=
for _ in $(seq 200); do
	if "$tool" stat "$work/r5" | grep -qx 'used=0'; then gone=1; break; fi
	sleep 0.05
done
[ -n "$gone" ] || { echo "FAIL: a killed process still counts"; "$tool" stat "$work/r5"; exit 1; }
echo "ok   a killed process's 256 MiB left the accounting"

echo "== the limits file is not the tenant's"
if [ "$(id -u)" = 0 ] && command -v setpriv >/dev/null 2>&1; then
	chmod 755 "$work" # so that only the file's own mode stops the write
	if setpriv --reuid=65534 --regid=65534 --clear-groups sh -c "printf x >>'$work/r5'" 2>/dev/null; then
		echo "FAIL: uid 65534 wrote the limits file"
		exit 1
	fi
	echo "ok   uid 65534 cannot write the limits file"
else
	echo "skip limits check: needs root and setpriv"
fi
# Blocks inside MIG: 5 blocks in a 1g instance are 35% of the instance
# (src/agent/share.h), enforced on the instance's own time.  Runs where an
# administrator has created a 1g instance; this test changes no MIG setting.
mig=$(nvidia-smi -L 2>/dev/null | sed -n 's/^ *MIG 1g\.[^ ]* .*(UUID: \(MIG-[^)]*\)).*/\1/p' | head -n 1)
if [ -n "$mig" ]; then
	echo "== driver API in 1g instance $mig, quota 1 GiB, 5 blocks (share 35% of it)"
	"$tool" create "$work/r6" --quota "$quota" --share 35 --project gpu
	CUDA_VISIBLE_DEVICES="$mig" CNLAB_REGION="$work/r6" LD_PRELOAD="$shim" \
		"$work/gpu_driver" "$work/spin.ptx" "$quota" 35
	"$tool" stat "$work/r6"
else
	echo "== no 1g MIG instance on this machine: the MIG share check did not run"
fi
echo "gpu: all checks passed"
