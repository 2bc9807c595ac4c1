#!/usr/bin/env bash
# hip_classify.sh - every entry point of the installed HIP runtime that
# could create device memory, launch work, open another process's memory or
# report memory is classified: hooked by libcnlab-hip.so (a row of
# src/shim/hip/hooks.def) or listed below with the reason it is not.  A new
# runtime with a new such export fails here until someone decides.  Skipped
# (77) where no libamdhip64 is installed.
#   tests/shim/hip_classify.sh HOOKS_DEF [LIBAMDHIP64]
set -euo pipefail
hooks=$1
lib=${2:-}
if [ -z "$lib" ]; then
	for c in /opt/rocm/lib/libamdhip64.so /usr/lib/x86_64-linux-gnu/libamdhip64.so.6 \
		/usr/lib/x86_64-linux-gnu/libamdhip64.so.5; do
		[ -e "$c" ] && lib=$c && break
	done
fi
[ -n "$lib" ] && [ -e "$lib" ] || {
	echo "SKIP: no libamdhip64 installed (libamdhip64-5 or ROCm)"
	exit 77
}
hooked=$(sed -n '/^CNL_HIP_HOOK(/{N;p}' "$hooks" | tr -d '\n' |
	grep -o 'CNL_HIP_HOOK([^,]*, *[A-Za-z0-9_]*' | sed 's/.*, *//' || true)
# Not hooked, and why (name: reason).  "GAP" marks what should be hooked.
known='
hipHostAlloc: host memory, not VRAM
hipHostMalloc: host memory, not VRAM
hipMallocHost: host memory, not VRAM
hipMemAllocHost: host memory, not VRAM
hipHostRegister: pins host memory, not VRAM
hipMemGetAllocationGranularity: a query
hipMemGetAllocationPropertiesFromHandle: a query
hipMemRetainAllocationHandle: a query (no new memory)
hipMemMap: maps memory charged at hipMemCreate
hipMemMapArrayAsync: maps memory charged at hipMemCreate
hipBindTextureToMipmappedArray: binds, allocates nothing
hipGetMipmappedArrayLevel: a view of an existing array
hipMipmappedArrayGetLevel: a view of an existing array
hipTexRefSetMipmappedArray: binds, allocates nothing
hipFreeMipmappedArray: frees what an unhooked path made
hipMipmappedArrayDestroy: frees what an unhooked path made
_ZN8hip_impl22hipLaunchKernelGGLImplEmRK4dim3S2_jP12ihipStream_tPPv: GAP: old C++ launch path, not throttled
hipImportExternalSemaphore: synchronisation only, no memory
'
families='Malloc|Alloc|Launch|MemCreate|IpcOpen|MemGetInfo|TotalMem|ArrayCreate|3DCreate|Mipmapped|ProcAddress|HostRegister|Import|MemMap'
exports=$(nm -D --defined-only "$lib" | awk '{print $3}' | sed 's/@.*//' | grep -E "$families" | sort -u)
bad=0 gaps=0 n=0
for s in $exports; do
	n=$((n + 1))
	grep -qx "$s" <<<"$hooked" && continue
	why=$(grep "^$s: " <<<"$known" | sed 's/^[^:]*: //' || true)
	if [ -z "$why" ]; then
		echo "unclassified: $s (hook it in src/shim/hip/hooks.def or list it here)"
		bad=$((bad + 1))
	elif [[ "$why" == GAP* ]]; then
		gaps=$((gaps + 1))
	fi
done
echo "hip classify: $n exports of $lib in the watched families, $gaps known gaps, $bad unclassified"
[ "$bad" -eq 0 ]
