#!/usr/bin/env bash
# links.sh BUILD_DIR SERVER_LIB STORE_LIB TARGET=BINARY... - fail if a
# binary links any of the control plane: libsqlite3 (ldd), an object or
# symbol of src/server or src/store (nm: the cnl_store_, cnl_api_,
# cnl_ctl_, cnl_auth_, cnl_oidc_, cnl_aio_, cnl_shape_ and sqlite3_
# prefixes, and every global symbol that SERVER_LIB and STORE_LIB define),
# or those libraries on its link line (build.ninja, or link.txt with
# Makefiles).  CTest runs it on cnlab-agent and cnlab (build.links), and
# on cnlabd, where it must fail (build.links_detects), so the checks are
# known to see what they look for.
set -euo pipefail
build=$(cd "$1" && pwd)
server_lib=$2
store_lib=$3
shift 3
fails=0
bad() {
	echo "FAIL $1"
	fails=$((fails + 1))
}

# The control plane's own symbols, as its libraries define them (not the
# compiler's and sanitizers' "__" ones, which every object may carry).
cp_syms=$(mktemp)
trap 'rm -f "$cp_syms"' EXIT
nm -g --defined-only "$server_lib" "$store_lib" 2>/dev/null |
	awk 'NF == 3 && $3 !~ /^__/ { print $3 }' | sort -u >"$cp_syms"
[ -s "$cp_syms" ] || {
	echo "links: no symbols in $server_lib $store_lib"
	exit 1
}
prefixes='^(cnl_store_|cnl_api_|cnl_ctl_|cnl_auth_|cnl_oidc_|cnl_aio_|cnl_shape_|sqlite3_)'

# The link line of TARGET that builds BINARY.
link_line() {
	local target=$1 bin=$2 rel
	rel=${bin#"$build"/}
	if [ -f "$build/build.ninja" ]; then
		# The build statement of the binary and its indented variables.
		awk -v rel="$rel" '
			index($0, "build " rel ":") == 1 { on = 1; print; next }
			on && /^  / { print; next }
			on { exit }' "$build/build.ninja"
	else
		find "$build" -path "*/CMakeFiles/$target.dir/link.txt" \
			-exec cat {} +
	fi
}

for pair in "$@"; do
	target=${pair%%=*}
	bin=${pair#*=}
	[ -x "$bin" ] || {
		bad "$target: $bin not built"
		continue
	}
	n=$fails

	if ldd "$bin" | grep -E 'libsqlite3|libpq\.' >/dev/null; then
		bad "$target: ldd shows $(ldd "$bin" | grep -oE 'lib(sqlite3|pq)[^ ]*' | sort -u | tr '\n' ' ')"
	fi

	syms=$(nm "$bin" | awk '{ print $NF }' | sort -u)
	hits=$(grep -E "$prefixes" <<<"$syms" || true)
	[ -z "$hits" ] ||
		bad "$target: control-plane symbols: $(head -5 <<<"$hits" | tr '\n' ' ')"
	hits=$(comm -12 <(grep -v '^$' <<<"$syms") "$cp_syms" || true)
	[ -z "$hits" ] ||
		bad "$target: symbols of $(basename "$server_lib") or $(basename "$store_lib"): $(head -5 <<<"$hits" | tr '\n' ' ')"

	line=$(link_line "$target" "$bin")
	if [ -z "$line" ]; then
		bad "$target: no link command found for $bin"
	elif grep -oE 'libcnlab-(server|store)\.a|libsqlite3[^ ]*|-lsqlite3|libpq\.[^ ]*|-lpq' <<<"$line" >/dev/null; then
		bad "$target: the link line names $(grep -oE 'libcnlab-(server|store)\.a|libsqlite3[^ ]*|-lsqlite3|libpq\.[^ ]*|-lpq' <<<"$line" | sort -u | tr '\n' ' ')"
	fi

	[ "$fails" = "$n" ] && echo "ok   $target ($bin): no SQLite, no server or store object, symbol or library"
done
[ "$fails" = 0 ]
