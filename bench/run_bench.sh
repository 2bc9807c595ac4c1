#!/usr/bin/env bash
# run_bench.sh - `cnlab run` of a trivial job, end to end: the median of N
# (default 15, at least 9) runs of `cnlab run --gpu h100-10 -- true` on
# the all-in-one (cnlabd --all-in-one, its embedded agent on a fake pool,
# real processes), from the command's start to its exit, beside, in the
# same run and interleaved:
#   events   the CLI following GET /v1/jobs/{id}/events (the default)
#   poll     the old follow loop (CNLAB_FOLLOW=poll: the job polled every
#            250 ms), what this part replaced
#   srun     `srun true` (Slurm), when srun can run here: set SLURM_CONF
#            for a private cluster; otherwise its column says why not
# Prints one table (milliseconds), with the time from the job's end as
# cnlabd recorded it to the CLI's exit (the CLI's following alone).  The figure also holds the scheduling
# cycle's trigger and the agent's launch, which other parts of issue 19
# speed up; the two cnlab columns differ only in how the CLI follows.
#
#   bench/run_bench.sh [BUILD_DIR] [N]
set -u
. "$(cd "$(dirname "$0")/.." && pwd)/tests/integration/lib.sh"
build=${1:-build}
n=${2:-15}
[ "$n" -ge 9 ] 2>/dev/null || {
	echo "run_bench: N must be a number >= 9" >&2
	exit 2
}
cnlabd=$build/src/server/cnlabd
cnlab=$build/src/cli/cnlab
for b in "$cnlabd" "$cnlab" "$build/src/agent/cnlab-agent"; do
	[ -x "$b" ] || {
		echo "run_bench: $b is not built" >&2
		exit 1
	}
done
cnlabd=$(realpath "$cnlabd") cnlab=$(realpath "$cnlab")
tmp=$(mktemp -d)
pid=
cleanup() {
	[ -n "$pid" ] && kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null
	rm -rf "$tmp"
}
trap cleanup EXIT
unset CNLAB_JWT_SECRET CNLAB_ADMIN_PASSWORD CNLAB_SERVER CNLAB_TOKEN CNLAB_CONFIG CNLAB_FOLLOW
export HOME=$tmp/home
mkdir -p "$HOME"
allinone_start "$cnlabd" "$tmp"
"$cnlab" login --server "$url" --user admin --password-stdin \
	<"$tmp/data/admin.password" >/dev/null 2>&1 || exit 1
# The embedded agent registers, then one job of each kind warms up.
for _ in $(seq 100); do
	"$cnlab" run --gpu h100-10 -- true >/dev/null 2>&1 && break
	sleep 0.2
done
CNLAB_FOLLOW=poll "$cnlab" run --gpu h100-10 -- true >/dev/null 2>&1

srun_why=
if ! command -v srun >/dev/null; then
	srun_why="srun is not installed"
elif ! out=$(timeout 30 srun true 2>&1); then
	srun_why="srun cannot run here: $(grep -m1 -E 'fatal|error' <<<"$out" | cut -c1-90)"
fi

ms() { date +%s%3N; }
token=$(jq -r '.. | .token? // empty' "$HOME/.config/cnlab/config.json" 2>/dev/null | head -1)
# one MODE FILE: time one run; also, into FILE.tail, from the job's end
# as cnlabd recorded it (its updated_at) to the CLI's exit: the part of
# the figure that is the CLI's following alone.
one() {
	local t end id upd
	t=$(ms)
	CNLAB_FOLLOW=$1 "$cnlab" run --gpu h100-10 -- true >/dev/null 2>"$tmp/run.err" ||
		echo "run_bench: a run failed: $(cat "$tmp/run.err")" >&2
	end=$(ms)
	echo $((end - t)) >>"$tmp/$2"
	id=$(grep -o 'job_[0-9A-Z]*' "$tmp/run.err" | head -1)
	upd=$(curl -sS -H "Authorization: Bearer $token" "$url/v1/jobs/$id" | jq -r .updated_at)
	upd=$(date -d "$upd" +%s%3N 2>/dev/null) && echo $((end - upd)) >>"$tmp/$2.tail"
}
for _ in $(seq "$n"); do
	one events events
	one poll poll
	if [ -z "$srun_why" ]; then
		t=$(ms)
		srun true >/dev/null 2>&1
		echo $(($(ms) - t)) >>"$tmp/srun"
	fi
done
median() { sort -n "$1" | awk '{a[NR] = $1} END {print (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2}'; }
range() { sort -n "$1" | awk 'NR == 1 {lo = $1} {hi = $1} END {print lo "-" hi}'; }
echo "cnlab run of a trivial job, end to end ($n runs each, interleaved; ms)"
printf '%-44s %8s %12s\n' "how" median range
printf '%-44s %8s %12s\n' "cnlab run (events: GET .../events)" "$(median "$tmp/events")" "$(range "$tmp/events")"
printf '%-44s %8s %12s\n' "cnlab run, old poll (CNLAB_FOLLOW=poll)" "$(median "$tmp/poll")" "$(range "$tmp/poll")"
if [ -s "$tmp/events.tail" ] && [ -s "$tmp/poll.tail" ]; then
	printf '%-44s %8s %12s\n' "  job's end to cnlab's exit, events" "$(median "$tmp/events.tail")" "$(range "$tmp/events.tail")"
	printf '%-44s %8s %12s\n' "  job's end to cnlab's exit, old poll" "$(median "$tmp/poll.tail")" "$(range "$tmp/poll.tail")"
fi
if [ -z "$srun_why" ]; then
	printf '%-44s %8s %12s\n' "srun true (Slurm, baseline)" "$(median "$tmp/srun")" "$(range "$tmp/srun")"
else
	printf '%-44s %8s  (%s)\n' "srun true (Slurm, baseline)" unavailable "$srun_why"
fi
