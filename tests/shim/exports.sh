#!/usr/bin/env bash
# exports.sh - libcnlab-cuda.so exports CUDA and NVML entry points, dlsym,
# dlmopen and the calls that close descriptors, nothing else, and needs nothing beyond libc, libdl, pthread and the loader.
set -euo pipefail
so=$1
syms=$(nm -D --defined-only "$so" | awk '{print $3}')
bad=$(printf '%s\n' "$syms" | grep -Ev '^(cu[A-Z][A-Za-z0-9_]*|nvml[A-Z][A-Za-z0-9_]*|dlsym|dlmopen|close|close_range|closefrom|dup2|dup3)$' || true)
if [ -n "$bad" ]; then
	echo "exports: unexpected exported symbols:"; echo "$bad"; exit 1
fi
for want in cuMemAlloc_v2 cuGetProcAddress_v2 cuLaunchKernel_ptsz \
	nvmlDeviceGetMemoryInfo_v2 dlsym dlmopen close closefrom; do
	# A here-string, not a pipe: grep -q stops at the first match, and
	# under pipefail the writer's SIGPIPE would read as "missing".
	grep -qx "$want" <<<"$syms" || { echo "exports: $want missing"; exit 1; }
done
needed=$(readelf -d "$so" | awk '/NEEDED/ {print $5}' | tr -d '[]' | sort | tr '\n' ' ')
for lib in $needed; do
	case $lib in
	libc.so.6|libdl.so.2|libpthread.so.0|ld-linux-*.so.*) ;;
	*) echo "exports: unexpected dependency $lib"; exit 1 ;;
	esac
done
echo "exports: $(printf '%s\n' "$syms" | wc -l) symbols, all cu*/nvml*/dlsym/dlmopen/close*/dup*; needs: $needed"
