#!/usr/bin/env bash
# hip_exports.sh - libcnlab-hip.so exports HIP runtime entry points, dlsym,
# dlmopen and the calls that close descriptors (guard.c), nothing else;
# every row of src/shim/hip/hooks.def is exported; and it needs nothing
# beyond libc, libdl, pthread and the loader (it never links libamdhip64:
# the real runtime is found at run time, after it).
set -euo pipefail
so=$1
hooks=$2
syms=$(nm -D --defined-only "$so" | awk '{print $3}')
# hip_ext.h's two launches are exported by the runtime under C++ names.
bad=$(grep -Ev '^(hip[A-Z][A-Za-z0-9_]*|_Z24hip(Ext|Hcc)ModuleLaunchKernel[A-Za-z0-9_]*|dlsym|dlmopen|close|close_range|closefrom|dup2|dup3)$' <<<"$syms" || true)
if [ -n "$bad" ]; then
	echo "hip exports: unexpected exported symbols:"; echo "$bad"; exit 1
fi
wanted=$(sed -n '/^CNL_HIP_HOOK(/{N;p}' "$hooks" | tr -d '\n' |
	grep -o 'CNL_HIP_HOOK([^,]*, *[A-Za-z0-9_]*' | sed 's/.*, *//')
[ -n "$wanted" ] || { echo "hip exports: no hooks read from $hooks"; exit 1; }
for want in $wanted dlsym dlmopen close close_range closefrom dup2 dup3; do
	grep -qx "$want" <<<"$syms" || { echo "hip exports: $want missing"; exit 1; }
done
needed=$(readelf -d "$so" | awk '/NEEDED/ {print $5}' | tr -d '[]' | sort | tr '\n' ' ')
for lib in $needed; do
	case $lib in
	libc.so.6|libdl.so.2|libpthread.so.0|ld-linux-*.so.*) ;;
	*) echo "hip exports: unexpected dependency $lib"; exit 1 ;;
	esac
done
echo "hip exports: $(wc -l <<<"$syms") symbols, all hip*/dlsym/dlmopen/close*/dup*, $(wc -w <<<"$wanted") hooks; needs: $needed"
