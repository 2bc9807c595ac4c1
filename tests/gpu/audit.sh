#!/usr/bin/env bash
# audit.sh - the agent's GPU memory audit on a real GPU: a CUDA program
# holds 256 MiB; what the audit reads through the real NVML (audit_probe,
# the agent's own nvml provider) lists its host pid with at least that
# much, and the audit's decision picks it under a smaller quota.  Exits 77
# (skipped) with the reason where there is no GPU or no toolkit.
#   tests/gpu/audit.sh AUDIT_PROBE
set -euo pipefail
probe=$1
skip() {
	echo "SKIP: $*"
	exit 77
}
command -v nvidia-smi >/dev/null 2>&1 || skip "no NVIDIA driver (nvidia-smi not found); the GPU checks need a GPU"
nvidia-smi -L 2>/dev/null | grep -q '^GPU' || skip "nvidia-smi lists no GPU"
command -v nvcc >/dev/null 2>&1 || skip "no nvcc: the check compiles a CUDA program (CUDA toolkit)"
work=$(mktemp -d)
holder=
trap '[ -n "$holder" ] && kill "$holder" 2>/dev/null; rm -rf "$work"' EXIT
cat >"$work/hold.cu" <<'CU'
#include <cstdio>
#include <cstdlib>
#include <unistd.h>
// Hold N bytes of device memory until stdin closes.
int main(int argc, char **argv)
{
	size_t n = strtoull(argv[1], 0, 10);
	void *p = 0;
	char c;
	if (cudaMalloc(&p, n) != cudaSuccess || cudaMemset(p, 1, n) != cudaSuccess)
		return 1;
	cudaDeviceSynchronize();
	printf("held\n");
	fflush(stdout);
	while (read(0, &c, 1) > 0)
		;
	return 0;
}
CU
nvcc -O2 -o "$work/hold" "$work/hold.cu"
bytes=$((256 << 20))
mkfifo "$work/in"
"$work/hold" "$bytes" <"$work/in" >"$work/out" &
holder=$!
exec 3>"$work/in"
for _ in $(seq 100); do grep -q held "$work/out" && break; sleep 0.1; done
grep -q held "$work/out" || { echo "FAIL: the CUDA program did not allocate"; exit 1; }
"$probe" "$holder" "$bytes"
exec 3>&-
wait "$holder"
holder=
echo "gpu audit: all checks passed"
