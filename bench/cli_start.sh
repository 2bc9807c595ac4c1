#!/usr/bin/env bash
# cli_start.sh BUILD_DIR [N] - the CLI's start-up cost (issue 19: "one
# static binary, <= 2 ms CPU"), user + system CPU per run over N runs
# (default 1000), beside its baselines measured in the same run:
#
#   /bin/true                      the cost of fork + exec + exit here
#   static-true                    the same for a static program that
#                                  does nothing: the floor for cnlab
#   cnlab --version                the static CLI (src/cli, -static)
#   cnlab-dynamic --version        the same code linked dynamically
#   cnlab jobs list                a real request to a local cnlabd
#   cnlab-dynamic jobs list        the same, dynamically linked
#   $CNLAB_BASELINE --version ...  any other cnlab given (e.g. the
#                                  libcurl build of an older release)
#
# The cnlabd is the one built beside it, on loopback, with a scratch data
# directory; the CLI logs in as its bootstrap admin first.
set -euo pipefail
build=$(realpath "${1:?usage: cli_start.sh BUILD_DIR [N]}")
n=${2:-1000}
cpu_per_run=$build/bench/cpu_per_run
cnlab=$build/src/cli/cnlab
dyn=$build/bench/cnlab-dynamic
cnlabd=$build/src/server/cnlabd
for f in "$cpu_per_run" "$cnlab" "$dyn" "$cnlabd" "$build/bench/static-true"; do
	[ -x "$f" ] || { echo "cli_start: $f not built" >&2; exit 1; }
done
# runs N LABEL COMMAND [ARG...]: one row, "LABEL cpu_ms wall_ms" per run,
# from cpu_per_run's figures (which stops the bench when a run fails: a
# failing command costs less than a working one and would flatter it).
runs() {
	local n=$1 label=$2
	shift 2
	"$cpu_per_run" "$n" "$@" | awk -v l="$label" '{
		for (i = 1; i <= NF; i++) { split($i, kv, "="); v[kv[1]] = kv[2] }
		printf "%-44s %8.3f %8.3f\n", l, v["cpu_us_per_run"] / 1000, v["wall_us_per_run"] / 1000
	}'
}
tmp=$(mktemp -d)
pid=
cleanup() {
	[ -n "$pid" ] && kill "$pid" 2>/dev/null
	wait 2>/dev/null || true
	rm -rf "$tmp"
}
trap cleanup EXIT
export CNLAB_JWT_SECRET=bench-secret-0123456789abcdef-0123456789
export CNLAB_ADMIN_PASSWORD=bench-password-long-enough
export HOME=$tmp/home XDG_CONFIG_HOME=$tmp/xdg CNLAB_CONFIG=$tmp/cnlab.json
unset CNLAB_SERVER CNLAB_TOKEN
mkdir -p "$HOME"
"$cnlabd" --data-dir "$tmp/d" --listen 127.0.0.1:0 --bootstrap-admin root \
	>"$tmp/out" 2>"$tmp/err" &
pid=$!
port=
for _ in $(seq 200); do
	port=$(sed -n 's/^listening on 127\.0\.0\.1:\([0-9][0-9]*\)$/\1/p' "$tmp/out")
	[ -n "$port" ] && break
	sleep 0.05
done
[ -n "$port" ] || { echo "cli_start: cnlabd did not start: $(cat "$tmp/err")" >&2; exit 1; }
echo "$CNLAB_ADMIN_PASSWORD" | "$cnlab" login --server "http://127.0.0.1:$port" \
	--user root --password-stdin >/dev/null
"$cnlab" project create bench >/dev/null
"$cnlab" project member add bench root >/dev/null

echo "cnlab start-up: CPU (user+sys) and wall time per run, $n runs each"
echo "static: $(file -b "$cnlab" | cut -d, -f1-4)"
echo "size: $(stat -c %s "$cnlab") bytes ($(strip -o "$tmp/s" "$cnlab" && stat -c %s "$tmp/s") stripped)"
printf '%-44s %8s %8s\n' "command" "cpu_ms" "wall_ms"
runs "$n" "/bin/true (baseline: dynamic exec)" /bin/true
runs "$n" "static-true (baseline: static exec)" "$build/bench/static-true"
runs "$n" "cnlab --version (static)" "$cnlab" --version
runs "$n" "cnlab-dynamic --version (baseline)" "$dyn" --version
runs "$n" "cnlab jobs list (static, local cnlabd)" "$cnlab" jobs list
runs "$n" "cnlab-dynamic jobs list (baseline)" "$dyn" jobs list
if [ -n "${CNLAB_BASELINE:-}" ]; then
	runs "$n" "$CNLAB_BASELINE --version" "$CNLAB_BASELINE" --version
	runs "$n" "$CNLAB_BASELINE jobs list" "$CNLAB_BASELINE" jobs list
fi
