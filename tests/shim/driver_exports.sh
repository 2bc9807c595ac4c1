#!/usr/bin/env bash
# driver_exports.sh - every symbol the CUDA driver exports is classified in
# src/shim/driver-exports.tsv, and the table agrees with hooks.def.
#
#   driver_exports.sh TABLE HOOKS_DEF SHIM_SO [STUB|none]
#
# Fails naming: each export of the toolkit's stubs/libcuda.so the table
# does not classify; each table row naming a symbol the stub no longer
# exports; each libcuda row of hooks.def missing from the table (or not
# "hook" there) and each "hook" row hooks.def does not have; each hooked
# symbol the built shim does not export; each malformed row; and each
# "pass" row whose base name (without _vN, _ptsz, _ptds) has a hooked
# variant but whose note does not say, starting "variant:", why this one
# needs no hook.  Where no stub is installed, everything but the stub
# comparison is still checked.
set -euo pipefail
table=$1 hooks=$2 so=$3
stub=${4:-}
if [ "$stub" = none ]; then
	stub=""
elif [ -n "$stub" ]; then
	[ -f "$stub" ] || { echo "driver-exports: no stub at $stub"; exit 2; }
else
	for d in "${CUDA_HOME:-}" "${CUDA_PATH:-}" /usr/local/cuda /opt/cuda; do
		[ -n "$d" ] || continue
		f=$d/targets/x86_64-linux/lib/stubs/libcuda.so
		[ -f "$f" ] || f=$d/lib64/stubs/libcuda.so
		[ -f "$f" ] && { stub=$f; break; }
	done
fi
fail=0
err() { echo "driver-exports: $*"; fail=1; }

rows=$(grep -v '^#' "$table" | grep -v '^$' || true)
# Well-formed rows: four tab-separated fields, known verdict, no "?".
while IFS= read -r bad; do
	[ -n "$bad" ] && err "malformed row (want symbol, hook|pass, class, note): $bad"
done < <(awk -F'\t' 'NF != 4 || ($2 != "hook" && $2 != "pass") ||
	$3 == "" || $3 == "?" || $4 == "" || $4 == "unclassified" {print}' <<<"$rows")
while IFS= read -r dup; do
	[ -n "$dup" ] && err "symbol listed twice: $dup"
done < <(cut -f1 <<<"$rows" | sort | uniq -d)

hooked=$(sed -n 's/^CNL_HOOK(CU, *[A-Za-z_]*, *\([A-Za-z0-9_]*\),.*/\1/p' \
	"$hooks" | sort -u)
table_hooks=$(awk -F'\t' '$2 == "hook" {print $1}' <<<"$rows" | sort -u)
while IFS= read -r s; do
	[ -n "$s" ] && err "hooks.def row $s is not a hook row of the table"
done < <(comm -23 <(printf '%s\n' "$hooked") <(printf '%s\n' "$table_hooks"))
while IFS= read -r s; do
	[ -n "$s" ] && err "table says $s is hooked but hooks.def has no row for it"
done < <(comm -13 <(printf '%s\n' "$hooked") <(printf '%s\n' "$table_hooks"))

shim_syms=$(nm -D --defined-only "$so" | awk '{print $3}' | sort -u)
while IFS= read -r s; do
	[ -n "$s" ] && err "hooked $s is not exported by $(basename "$so")"
done < <(comm -23 <(printf '%s\n' "$hooked") <(printf '%s\n' "$shim_syms"))

# A variant of a hooked base passes only with a stated reason.
while IFS= read -r s; do
	[ -n "$s" ] && err "pass row $s has a hooked variant of the same base; hook it or give a 'variant:' reason"
done < <(awk -F'\t' -v hooked="$hooked" '
	function base(s) {
		sub(/_pt(sz|ds)$/, "", s); sub(/_v[0-9]+$/, "", s)
		return s
	}
	BEGIN { n = split(hooked, h, "\n"); for (i = 1; i <= n; i++) hb[base(h[i])] = 1 }
	$2 == "pass" && (base($1) in hb) && $4 !~ /^variant:/ {print $1}' <<<"$rows")

if [ -n "$stub" ]; then
	exports=$(nm -D --defined-only "$stub" | awk '$3 ~ /^cu/ {print $3}' | sort -u)
	while IFS= read -r s; do
		[ -n "$s" ] && err "unclassified export $s (add a row: scripts/gen-driver-exports)"
	done < <(comm -23 <(printf '%s\n' "$exports") <(cut -f1 <<<"$rows" | sort -u))
	while IFS= read -r s; do
		[ -n "$s" ] && err "table row $s: the driver no longer exports it"
	done < <(comm -13 <(printf '%s\n' "$exports") <(cut -f1 <<<"$rows" | sort -u))
	n=$(printf '%s\n' "$exports" | wc -l)
	where="all $n exports of $stub"
else
	where="no stubs/libcuda.so installed: checked against hooks.def only"
fi
[ "$fail" = 0 ] || exit 1
echo "driver-exports: $(wc -l <<<"$rows") rows, $(wc -l <<<"$table_hooks") hooked; $where"
