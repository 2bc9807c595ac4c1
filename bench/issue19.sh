#!/usr/bin/env bash
# issue19.sh - the table of issue 19 ("fast at every size"), every row with
# CNLab's figure beside its baseline measured in the same run, Slurm 22.05
# included where it is installed (scripts/slurm-bench-up: slurmctld and 8
# slurmd on this host, under a temporary directory, stopped at the end).
#
#   bench/issue19.sh [--build DIR] [--rows 1,2,...] [--no-build] [--no-slurm]
#                    [--seconds S] [--jobs N] [--pending N] [--out FILE]
#                    [--cnlabd PATH] [--cnlab PATH]
#
# Rows (each uses only the CLI, the HTTP API and the bench programs' command
# lines, so it keeps working while the code under it changes):
#   1  durable submissions/s: wrk, 64 connections, bench/wrk_submit.lua
#      POSTing jobs to a fresh cnlabd; baselines: wrk on GET /healthz, and
#      sbatch/s of a trivial job from 64 concurrent submitters
#   2  submissions/s (as in 1) with 50k and 100k jobs already pending;
#      baseline: the same at 0 pending (row 1's figure when it ran)
#   3  `cnlab run --gpu h100-5 true` end to end against `cnlabd --all-in-one`,
#      median of 9 (after one not counted); baseline `srun true`, the same
#   4  trivial jobs dispatched and completed/s on the all-in-one's one node
#      (N jobs POSTed, until all ended); baseline: `sbatch --wrap true` N
#      jobs until the queue is empty.  Rows 3 and 4: the all-in-one's agent
#      has its run_dir on /dev/shm where that is a tmpfs (--no-run-dir: not)
#   5  scheduling cycle: build/bench/sched_bench, its "full cluster" figures
#      (cnlab policy beside fifo), every size it prints
#   6  cnlabd restart (spawn until a job's GET answers 200) with 100k jobs
#      pending; baseline: with 1 pending
#   7  GET of one job, p50/p99/max (one GET after another, timed by curl)
#      while wrk submits with 64 connections, 100k pending; baseline: GET
#      /healthz under the same load
#   8  CLI start: user+sys CPU per `cnlab --version` over 1,000 runs
#      (build/bench/cpu_per_run), beside /bin/true; and `file` of the binary
#
# Pending jobs (rows 2, 6, 7) are made by cloning one job submitted through
# the API in the stopped daemon's SQLite store (the jobs table's columns read
# from the store itself, ids of the same ULID time with sequential random
# parts); when that is not possible (the store changed shape) they are
# submitted through the API with wrk.  The cnlabd without an agent places
# nothing, so they stay pending.
#
# Progress goes to stderr, the table (Markdown) to stdout and, with --out,
# to FILE; the raw output of every tool is kept in the log printed at the
# end.  Exits 1 when a measurement fails (the reason on stderr); a bench, not
# a test: CTest never runs it.
set -u
here=$(cd "$(dirname "$0")/.." && pwd)
build=$here/build
rows=1,2,3,4,5,6,7,8
do_build=1
use_slurm=1
use_run_dir=1
secs=5
njobs=200
pending=100000
outfile=
cnlabd=
cnlab=
usage() {
	sed -n '3,5p' "$0" | sed 's/^# \{0,1\}//'
	echo "rows: 1 submit/s, 2 submit/s at 50k/100k pending, 3 cnlab run, 4 jobs/s on one node,"
	echo "      5 scheduling cycle, 6 restart, 7 GET under load, 8 CLI start"
	echo "--seconds S: each wrk run (5); --jobs N: row 4's jobs (200); --pending N: rows 2/6/7 (100000)"
	echo "--cnlabd, --cnlab: binaries to measure instead of those found under the build directory"
	echo "--no-run-dir: the all-in-one's agent keeps bundles and crun's state in its work folder"
}
while [ $# -gt 0 ]; do
	case $1 in
	--build) build=$(realpath "${2:?--build: give a directory}") && shift ;;
	--rows) rows=${2:?--rows: give a list such as 1,3} && shift ;;
	--no-build) do_build=0 ;;
	--no-slurm) use_slurm=0 ;;
	--no-run-dir) use_run_dir=0 ;;
	--seconds) secs=${2:?--seconds: give a number} && shift ;;
	--jobs) njobs=${2:?--jobs: give a number} && shift ;;
	--pending) pending=${2:?--pending: give a number} && shift ;;
	--out) outfile=${2:?--out: give a file} && shift ;;
	--cnlabd) cnlabd=$(realpath "${2:?--cnlabd: give a file}") && shift ;;
	--cnlab) cnlab=$(realpath "${2:?--cnlab: give a file}") && shift ;;
	-h | --help)
		usage
		exit 0
		;;
	*)
		echo "issue19.sh: unknown argument \"$1\" (see --help)" >&2
		exit 2
		;;
	esac
	shift
done
for v in secs njobs pending; do
	case ${!v} in '' | *[!0-9]* | 0)
		echo "issue19.sh: --${v/secs/seconds}: want a positive integer, got \"${!v}\"" >&2
		exit 2
		;;
	esac
done
[ "$njobs" -le 1000 ] || {
	echo "issue19.sh: --jobs: at most 1000 (one page of the job list)" >&2
	exit 2
}
case ,$rows, in *[!0-9,]* | *,,*)
	echo "issue19.sh: --rows: want a comma-separated list of 1..8, got \"$rows\"" >&2
	exit 2
	;;
esac
for r in ${rows//,/ }; do
	[ "$r" -ge 1 ] && [ "$r" -le 8 ] || {
		echo "issue19.sh: --rows: no row $r (1..8)" >&2
		exit 2
	}
done
want() {
	case ,$rows, in
	*,$1,*) return 0 ;;
	*) return 1 ;;
	esac
}
for t in wrk curl jq sqlite3; do
	command -v "$t" >/dev/null || {
		echo "issue19.sh: $t is needed (scripts/bootstrap --bench installs it)" >&2
		exit 1
	}
done

load_avg=$(cut -d' ' -f1 /proc/loadavg)
tmp=$(mktemp -d /tmp/cnlab-issue19-XXXXXX)
chmod 755 "$tmp"
log=$tmp/log
: >"$log"
say() { echo "issue19: $*" >&2; }
die() {
	say "$*"
	exit 1
}
pids=()
slurm_dir=
run_dir=
cleanup() {
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done
	for p in "${pids[@]}"; do wait "$p" 2>/dev/null; done
	[ -n "$run_dir" ] && rm -rf "$run_dir"
	if [ -n "$slurm_dir" ]; then
		"$here/scripts/slurm-bench-up" --down "$slurm_dir" >>"$log" 2>&1
	fi
	cp "$log" "/tmp/cnlab-issue19.log" 2>/dev/null && say "raw output in /tmp/cnlab-issue19.log"
	rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# -- build ------------------------------------------------------------------
if [ "$do_build" = 1 ]; then
	say "building in $build"
	if [ ! -f "$build/CMakeCache.txt" ]; then
		(cd "$here" && cmake --preset default) >>"$log" 2>&1 || die "cmake --preset default failed (see $log)"
	fi
	# Each target alone: a tree where one was renamed still builds the rest.
	for t in cnlabd cnlab-agent cnlab-cli sched_bench cpu_per_run; do
		cmake --build "$build" --target "$t" -j2 >>"$log" 2>&1 || say "target $t did not build"
	done
fi
find_bin() { # NAME [DIR...]: the first executable file of that name
	local n=$1 f
	shift
	for d in "$@"; do
		[ -x "$build/$d/$n" ] && [ -f "$build/$d/$n" ] && echo "$build/$d/$n" && return 0
	done
	f=$(find "$build" -name "$n" -type f -perm -u+x 2>/dev/null | head -1)
	[ -n "$f" ] && echo "$f"
}
[ -n "$cnlabd" ] || cnlabd=$(find_bin cnlabd src/server)
[ -n "$cnlab" ] || cnlab=$(find_bin cnlab src/cli)
sched_bench=$(find_bin sched_bench bench)
cpu_per_run=$(find_bin cpu_per_run bench)
[ -n "$cnlabd" ] || die "no cnlabd under $build"

# -- the table --------------------------------------------------------------
table=$tmp/table
: >"$table"
row() { # N MEASURE CNLAB BASELINE GOAL (printed in the order of N)
	printf '%s\t| %s | %s | %s | %s |\n' "$1" "$2" "$3" "$4" "$5" >>"$table"
	say "row $1: $2: $3 | $4"
}

# -- Slurm ------------------------------------------------------------------
slurm=absent
if [ "$use_slurm" = 0 ]; then
	slurm_why="Slurm rows skipped (--no-slurm)"
elif want 1 || want 3 || want 4; then
	slurm_dir=$tmp/slurm
	out=$("$here/scripts/slurm-bench-up" "$slurm_dir" 2>&1)
	rc=$?
	echo "$out" >>"$log"
	if [ "$rc" = 0 ]; then
		slurm=up
		export SLURM_CONF=$slurm_dir/slurm.conf
		slurm_ver=$(sinfo -V 2>/dev/null)
		say "$(echo "$out" | head -1)"
	elif [ "$rc" = 3 ]; then
		slurm_why="Slurm not installed"
		slurm_dir=
		say "$slurm_why: Slurm rows skipped"
	else
		slurm_why="Slurm did not start"
		say "$slurm_why: $out"
	fi
fi
slurm_idle() { # wait until no job is queued or running (up to 10 min)
	for _ in $(seq 3000); do
		[ "$(squeue -h -t PD,R,CG,CF 2>/dev/null | wc -l)" = 0 ] && return 0
		sleep 0.2
	done
	return 1
}

# -- helpers ------------------------------------------------------------------
ms() { date +%s%3N; }
median() { sort -n | awk '{a[NR]=$1} END {if (NR) print (NR % 2) ? a[(NR+1)/2] : (a[NR/2] + a[NR/2+1]) / 2}'; }
export CNLAB_JWT_SECRET=issue19-bench-secret-0123456789abcdef0123
export CNLAB_ADMIN_PASSWORD=issue19-admin-password
unset CNLAB_SERVER CNLAB_TOKEN CNLAB_CONFIG
export HOME=$tmp/home XDG_CONFIG_HOME=$tmp/xdg
mkdir -p "$HOME"

# start_cnlabd DATA_DIR [ARGS...]: a cnlabd on a free port; sets base, dpid.
start_cnlabd() {
	local d=$1
	shift
	: >"$tmp/cnlabd.out"
	"$cnlabd" --data-dir "$d" --listen 127.0.0.1:0 --log-level warn "$@" \
		>"$tmp/cnlabd.out" 2>>"$tmp/cnlabd.err" &
	dpid=$!
	pids+=("$dpid")
	for _ in $(seq 30000); do
		grep -q '^listening on' "$tmp/cnlabd.out" && break
		kill -0 "$dpid" 2>/dev/null || break
		sleep 0.02
	done
	port=$(sed -n 's/^listening on 127\.0\.0\.1:\([0-9]*\)$/\1/p' "$tmp/cnlabd.out")
	[ -n "$port" ] || die "cnlabd did not start: $(tail -5 "$tmp/cnlabd.err")"
	base=http://127.0.0.1:$port
}
stop_cnlabd() {
	kill "$dpid" 2>/dev/null
	wait "$dpid" 2>/dev/null
	dpid=
}
api() { curl -sS -X "$1" -H "Authorization: Bearer $tok" ${3:+-d "$3"} "$base$2"; }
code() { curl -s -o /dev/null -w '%{http_code}' -H "Authorization: Bearer $tok" "$base$1"; }
# cnlabd's count of workloads ended since it started (/metrics).
finished() {
	curl -sS -H "Authorization: Bearer $tok" "$base/metrics" |
		awk '/^cnlab_workloads_finished_total[{ ]/ {n += $NF} END {printf "%d\n", n}'
}
login() { # USER PASSWORD: sets tok
	tok=$(curl -sS -X POST -d "{\"user\":\"$1\",\"password\":\"$2\"}" "$base/v1/auth/login" | jq -r .token)
	[ -n "$tok" ] && [ "$tok" != null ] || die "login as $1 failed"
}
# A project "bench" with the administrator as a member: sets proj.
make_project() {
	proj=$(api GET /v1/projects | jq -r '.items[] | select(.name=="bench") | .id')
	if [ -z "$proj" ]; then
		proj=$(api POST /v1/projects '{"name":"bench"}' | jq -r .id)
		api POST "/v1/projects/$proj/members" "{\"user\":\"$1\",\"role\":\"member\"}" >/dev/null
	fi
	[ -n "$proj" ] && [ "$proj" != null ] || die "cannot create a project"
}
# wrk_run NAME ARGS...: runs wrk, keeps its output in $tmp/wrk-NAME.
wrk_run() {
	local name=$1
	shift
	echo "== wrk $name: wrk $*" >>"$log"
	wrk "$@" >"$tmp/wrk-$name" 2>&1
	cat "$tmp/wrk-$name" >>"$log"
}
wrk_rate() { # NAME: requests/s, or "failed" when any answer was not 2xx/3xx
	local f=$tmp/wrk-$1 bad sock
	bad=$(sed -n 's/^ *Non-2xx or 3xx responses: *\([0-9]*\).*/\1/p' "$f")
	sock=$(sed -n 's/^ *Socket errors: *\(.*\)/\1/p' "$f")
	if [ -n "$bad" ] && [ "$bad" != 0 ]; then
		say "wrk $1: $bad answers were not 2xx"
		echo "failed"
		return
	fi
	[ -n "$sock" ] && say "wrk $1: socket errors: $sock"
	if grep -q '^ *0 requests in' "$f"; then
		echo "none answered in ${secs}s"
		return
	fi
	awk '/^Requests\/sec:/ {printf "%.0f", $2}' "$f"
}
submit_wrk() { # NAME SECONDS: wrk_submit.lua with 64 connections
	CNLAB_TOKEN=$tok CNLAB_PROJECT=$proj wrk_run "$1" -t2 -c64 -d"$2"s --timeout 60s \
		-s "$here/bench/wrk_submit.lua" "$base"
}
# sample_get NAME PATH SECONDS: GETs one after another (5 per curl, one
# keep-alive connection) for SECONDS; "code seconds" per request in
# $tmp/lat-NAME.  Not wrk: wrk counts only the requests that end within its
# run, so a GET slower than the run would not count at all.
sample_get() {
	local end=$(($(ms) + $3 * 1000)) u=$base$2
	: >"$tmp/lat-$1"
	while [ "$(ms)" -lt "$end" ]; do
		curl -s -w '%{http_code} %{time_total}\n' --max-time 120 -H "Authorization: Bearer $tok" \
			-o /dev/null "$u" -o /dev/null "$u" -o /dev/null "$u" -o /dev/null "$u" \
			-o /dev/null "$u" >>"$tmp/lat-$1"
	done
	cat "$tmp/lat-$1" >>"$log"
}
lat_of() { # NAME: "p50 / p99 / max ms (N GETs)" of sample_get's times
	awk '$1 != 200 {bad++} {print $2 * 1000} END {if (bad) exit 1}' "$tmp/lat-$1" >"$tmp/lat-$1.ms" ||
		die "row 7: a GET $1 did not answer 200: $(grep -v '^200 ' "$tmp/lat-$1" | head -3)"
	sort -n "$tmp/lat-$1.ms" | awk '{a[NR] = $1}
		function p(q,  i) {i = int(q * NR); if (i < q * NR) i++; if (i < 1) i = 1; return a[i]}
		END {printf "%.1f / %.1f / %.1f ms (%d GETs)", p(0.5), p(0.99), a[NR], NR}'
}
fmt_rate() { case $1 in *[!0-9]*) echo "$1" ;; *) echo "$1/s" ;; esac; }
cpu_ms() { # PID: the CPU (user + system) it has used so far, in ms
	awk -v hz="$(getconf CLK_TCK)" '{printf "%.0f", ($14 + $15) * 1000 / hz}' "/proc/$1/stat" 2>/dev/null
}

# -- row 1 ------------------------------------------------------------------
rate0=
if want 1; then
	say "row 1: wrk, 64 connections, POST jobs ${secs}s, then GET /healthz ${secs}s"
	d1=$tmp/r1
	start_cnlabd "$d1" --bootstrap-admin root
	login root "$CNLAB_ADMIN_PASSWORD"
	make_project root
	submit_wrk r1-submit "$secs"
	wrk_run r1-healthz -t2 -c64 -d"$secs"s --timeout 60s "$base/healthz"
	rate0=$(wrk_rate r1-submit)
	base1="healthz $(fmt_rate "$(wrk_rate r1-healthz)")"
	stop_cnlabd
	if [ "$slurm" = up ]; then
		n=320
		say "row 1: $n sbatch --wrap true from 64 concurrent submitters"
		t0=$(ms)
		seq "$n" | xargs -P 64 -I{} sbatch -Q -o /dev/null --wrap true >>"$log" 2>&1
		t1=$(ms)
		base1="$base1; sbatch $(awk -v n="$n" -v t=$((t1 - t0)) 'BEGIN {printf "%.1f", n * 1000 / t}')/s (64 submitters)"
		scancel --quiet --user "$(id -un)" 2>/dev/null
		slurm_idle
	else
		base1="$base1; sbatch: ${slurm_why:-Slurm not installed}"
	fi
	row 1 "durable REST submissions/s, wrk 64 connections" "$(fmt_rate "$rate0")" "$base1" "≥ 5,000/s"
fi

# -- rows 3 and 4: the all-in-one ---------------------------------------------
if want 3 || want 4; then
	d3=$tmp/r3
	: >"$tmp/cnlabd.out"
	aio_flags=()
	if [ "$use_run_dir" = 1 ] && [ "$(stat -f -c %T /dev/shm 2>/dev/null)" = tmpfs ]; then
		run_dir=$(mktemp -d -p /dev/shm cnlab-issue19.XXXXXX) && chmod 711 "$run_dir"
		aio_flags=(--agent-run-dir "$run_dir/agent")
		say "rows 3 and 4: the agent's run_dir on /dev/shm (a tmpfs)"
	fi
	env -u CNLAB_JWT_SECRET -u CNLAB_ADMIN_PASSWORD "$cnlabd" --all-in-one --data-dir "$d3" --listen 127.0.0.1:0 \
		"${aio_flags[@]}" >"$tmp/cnlabd.out" 2>>"$tmp/cnlabd.err" &
	dpid=$!
	pids+=("$dpid")
	for _ in $(seq 300); do
		grep -q 'CNLab is running' "$tmp/cnlabd.out" && break
		sleep 0.1
	done
	base=$(sed -n 's/^CNLab is running at \([^ ]*\).*/\1/p' "$tmp/cnlabd.out")
	[ -n "$base" ] || die "cnlabd --all-in-one did not start: $(tail -5 "$tmp/cnlabd.err")"
	pw=$(cat "$d3/admin.password")
	login admin "$pw"
	for _ in $(seq 300); do
		[ "$(api GET /v1/nodes | jq '.items | length')" = 1 ] && break
		sleep 0.1
	done
	[ -n "$cnlab" ] || die "no cnlab CLI under $build"
	echo "$pw" | "$cnlab" login --server "$base" --user admin --password-stdin >>"$log" 2>&1 ||
		die "cnlab login failed"
	cd "$tmp" || exit 1
fi
if want 3; then
	say "row 3: cnlab run --gpu h100-5 true, 1 + 9 runs"
	for i in $(seq 0 9); do
		t0=$(ms)
		"$cnlab" run --gpu h100-5 true >>"$log" 2>&1 || die "cnlab run failed (see $log)"
		[ "$i" = 0 ] || echo $(($(ms) - t0)) >>"$tmp/r3-cnlab"
	done
	run_ms=$(median <"$tmp/r3-cnlab")
	if [ "$slurm" = up ]; then
		say "row 3: srun true, 1 + 9 runs"
		for i in $(seq 0 9); do
			t0=$(ms)
			srun true >>"$log" 2>&1 || die "srun true failed (see $log)"
			[ "$i" = 0 ] || echo $(($(ms) - t0)) >>"$tmp/r3-srun"
		done
		base3="srun true $(median <"$tmp/r3-srun") ms"
	else
		base3="srun: ${slurm_why:-Slurm not installed}"
	fi
	row 3 "\`cnlab run\` of a trivial job, end to end (median of 9)" "$run_ms ms" "$base3" "≤ srun"
fi
if want 4; then
	say "row 4: $njobs trivial jobs to completion on one node"
	dproj=$base/v1/projects/$(api GET /v1/projects | jq -r '.items[] | select(.name=="default") | .id')/jobs
	urls=()
	for _ in $(seq "$njobs"); do urls+=("$dproj"); done
	fin0=$(finished)
	t0=$(ms)
	curl -sS -X POST -H "Authorization: Bearer $tok" -H 'Content-Type: application/json' \
		-d '{"command":"true","gpu":"h100-5"}' "${urls[@]}" >"$tmp/r4-ids" 2>>"$log"
	jq -r .id <"$tmp/r4-ids" | sort >"$tmp/r4-want"
	[ "$(grep -c '^job_' "$tmp/r4-want")" = "$njobs" ] || die "row 4: not every job was accepted: $(head -c 300 "$tmp/r4-ids")"
	# Ids are sortable: the jobs from the first one on are this row's.
	first=$(head -1 "$tmp/r4-want")
	# Waited for as squeue waits for Slurm's below: one small answer per
	# look (cnlabd's count of ended workloads in /metrics), not the list of
	# every job parsed by jq each time, whose CPU on this 2-core machine
	# was a tenth of the row's; the list is read once, after, to check.
	for _ in $(seq 9000); do
		[ "$(finished)" -ge "$((fin0 + njobs))" ] && break
		sleep 0.2
	done
	t1=$(ms)
	done4=$(curl -sS -H "Authorization: Bearer $tok" "${dproj}?limit=1000" |
		jq --arg f "$first" '[.items[] | select(.id >= $f and (.state == "succeeded" or
			.state == "failed" or .state == "cancelled"))] | length')
	[ "$done4" = "$njobs" ] || die "row 4: only $done4 of $njobs jobs ended"
	failed4=$(curl -sS -H "Authorization: Bearer $tok" "${dproj}?limit=1000" | jq '[.items[] | select(.state != "succeeded")] | length')
	rate4=$(awk -v n="$njobs" -v t=$((t1 - t0)) 'BEGIN {printf "%.1f", n * 1000 / t}')
	[ "$failed4" = 0 ] || say "row 4: $failed4 jobs did not succeed"
	if [ "$slurm" = up ]; then
		say "row 4: $njobs sbatch --wrap true to completion"
		slurm_idle
		t0=$(ms)
		seq "$njobs" | xargs -P 8 -I{} sbatch -Q -o /dev/null --wrap true >>"$log" 2>&1
		slurm_idle || die "row 4: Slurm's queue did not empty"
		t1=$(ms)
		base4="Slurm (8 slurmd) $(awk -v n="$njobs" -v t=$((t1 - t0)) 'BEGIN {printf "%.1f", n * 1000 / t}')/s"
	else
		base4="Slurm: ${slurm_why:-Slurm not installed}"
	fi
	row 4 "trivial jobs dispatched and completed/s, one node ($njobs jobs)" "$rate4/s" "$base4" "≥ 3× Slurm"
fi
if want 3 || want 4; then
	cd "$here" || exit 1
	stop_cnlabd
fi

# Slurm's rows are done: its daemons leave the CPU to the rest.
if [ -n "$slurm_dir" ]; then
	"$here/scripts/slurm-bench-up" --down "$slurm_dir" >>"$log" 2>&1
	slurm_dir=
fi

# -- rows 2, 6, 7: a store with many pending jobs ----------------------------
# fill_sql DATA_DIR TEMPLATE_ID TARGET: clone the template job in the stopped
# daemon's store until TARGET jobs are pending; 0 when it did.
fill_sql() {
	local db=$1/cnlab.db t=$2 target=$3 cols sel have add
	[ -f "$db" ] || return 1
	cols=$(sqlite3 "$db" "SELECT group_concat(name, ',') FROM pragma_table_info('jobs') WHERE name <> 'id'") || return 1
	case ,$cols, in *,state,*) ;; *) return 1 ;; esac
	have=$(sqlite3 "$db" "SELECT count(*) FROM jobs WHERE state = 'pending'") || return 1
	add=$((target - have))
	[ "$add" -le 0 ] && return 0
	sel=$(sqlite3 "$db" "SELECT count(*) FROM jobs WHERE id LIKE 'job_%'") || return 1
	# New ids: the template's 10-character time and its random part with
	# the last 8 characters replaced by a sequence number (digits are
	# Crockford base32), after those already cloned.
	sqlite3 "$db" "PRAGMA busy_timeout = 10000;
		WITH RECURSIVE seq(n) AS (SELECT $sel UNION ALL SELECT n + 1 FROM seq WHERE n < $sel + $add - 1)
		INSERT OR IGNORE INTO jobs (id, $cols)
		SELECT substr(t.id, 1, length(t.id) - 8) || printf('%08d', seq.n), $(echo "$cols" | sed 's/\([a-z_][a-z0-9_]*\)/t.\1/g')
		FROM seq, (SELECT * FROM jobs WHERE id = '$t') AS t;" >>"$log" 2>&1 || return 1
	have=$(sqlite3 "$db" "SELECT count(*) FROM jobs WHERE state = 'pending'") || return 1
	[ "$have" -ge "$target" ]
}
# fill_api TARGET: submit through the API until TARGET are pending.
fill_api() {
	local need
	need=$(($1 - $(sqlite3 "file:$d2/cnlab.db?mode=ro" "SELECT count(*) FROM jobs WHERE state = 'pending'")))
	[ "$need" -le 0 ] && return 0
	say "filling through the API: $need submissions"
	CNLAB_TOKEN=$tok CNLAB_PROJECT=$proj CNLAB_STOP_AFTER=$(((need + 1) / 2)) \
		wrk_run fill -t2 -c64 -d3600s --timeout 60s -s "$here/bench/wrk_submit.lua" "$base"
}
# fill TARGET: stops the daemon, fills, starts it again (timed: restart_ms).
npend=0
filled_by=
restart50=
fill() {
	local target=$1 t0
	stop_cnlabd
	if [ "$filled_by" != api ] && fill_sql "$d2" "$template" "$target"; then
		filled_by=sql
	else
		filled_by=api
	fi
	t0=$(ms)
	start_cnlabd "$d2"
	# Polled every 50 ms: a tighter loop would take the CPU from the
	# daemon it waits for.
	for _ in $(seq 12000); do
		[ "$(code "/v1/jobs/$template")" = 200 ] && break
		kill -0 "$dpid" 2>/dev/null || die "cnlabd died on restart: $(tail -5 "$tmp/cnlabd.err")"
		sleep 0.05
	done
	restart_ms=$(($(ms) - t0))
	restart_cpu=$(cpu_ms "$dpid")
	[ "$filled_by" = api ] && fill_api "$target"
	npend=$(sqlite3 "file:$d2/cnlab.db?mode=ro" "SELECT count(*) FROM jobs WHERE state = 'pending'" 2>/dev/null || echo "$target")
	# A cloned job must be served like any other.
	if [ "$filled_by" = sql ]; then
		local last
		last=$(sqlite3 "file:$d2/cnlab.db?mode=ro" "SELECT max(id) FROM jobs" 2>/dev/null)
		[ "$(api GET "/v1/jobs/$last" | jq -r .state)" = pending ] ||
			die "a cloned job ($last) is not served as pending: $(api GET "/v1/jobs/$last")"
	fi
	say "$npend pending (filled by $filled_by), restart took $restart_ms ms ($restart_cpu ms CPU)"
}
fmt_s() { awk -v m="$1" 'BEGIN {printf (m < 10000 ? "%.2f s" : "%.1f s"), m / 1000}'; }
if want 2 || want 6 || want 7; then
	d2=$tmp/r2
	start_cnlabd "$d2" --bootstrap-admin root
	login root "$CNLAB_ADMIN_PASSWORD"
	make_project root
	template=$(api POST "/v1/projects/$proj/jobs" '{"command":"true","gpu":"h100-25"}' | jq -r .id)
	case $template in job_*) ;; *) die "cannot submit a job: $template" ;; esac
	fill 1
	restart0="$(fmt_s "$restart_ms"), CPU $(fmt_s "$restart_cpu")"
	if want 2; then
		if [ -z "$rate0" ]; then
			say "row 2: submissions/s at 0 pending"
			submit_wrk r2-0 "$secs"
			rate0=$(wrk_rate r2-0)
		fi
		say "row 2: filling to $((pending / 2)) pending"
		fill $((pending / 2))
		p50k=$npend
		restart50="$(fmt_s "$restart_ms"), CPU $(fmt_s "$restart_cpu")"
		submit_wrk r2-50k "$secs"
		rate50=$(wrk_rate r2-50k)
	fi
	say "rows 2/6/7: filling to $pending pending"
	fill "$pending"
	restart100="$(fmt_s "$restart_ms"), CPU $(fmt_s "$restart_cpu")"
	p100k=$npend
	if want 2; then
		submit_wrk r2-100k "$secs"
		rate100=$(wrk_rate r2-100k)
		row 2 "submissions/s with $p50k / $p100k pending" "$(fmt_rate "$rate50") / $(fmt_rate "$rate100")" \
			"$(fmt_rate "$rate0") at 0 pending" "≥ 2,000/s at 100k"
	fi
	if want 7; then
		lat_job='' lat_healthz='' load_job='' load_healthz=''
		for what in job healthz; do
			say "row 7: GET $what under submit load (wrk, 64 connections)"
			CNLAB_TOKEN=$tok CNLAB_PROJECT=$proj wrk -t1 -c64 -d3600s --timeout 60s \
				-s "$here/bench/wrk_submit.lua" "$base" >"$tmp/wrk-r7-load-$what" 2>&1 &
			lp=$!
			pids+=("$lp")
			sleep 1
			path=/healthz
			[ "$what" = job ] && path=/v1/jobs/$template
			sample_get "$what" "$path" "$secs"
			kill -INT "$lp"
			wait "$lp"
			echo "== row 7 load while sampling $path" >>"$log"
			cat "$tmp/wrk-r7-load-$what" >>"$log"
			load=$(awk '/^Requests\/sec:/ {printf "%.0f", $2}' "$tmp/wrk-r7-load-$what")
			printf -v "lat_$what" '%s' "$(lat_of "$what")"
			printf -v "load_$what" '%s' "${load:-?}"
		done
		row 7 "GET of one job, p50 / p99 / max, under submit load (${load_job}/s), $p100k pending" \
			"$lat_job" "GET /healthz under the same load (${load_healthz}/s): $lat_healthz" "p99 ≤ 20 ms"
	fi
	if want 6; then
		row 6 "cnlabd restart with $p100k pending (spawn until a job's GET answers; the daemon's CPU)" \
			"$restart100${restart50:+ ($restart50 with $p50k)}" \
			"$restart0 with 1 pending" "≤ 3 s"
	fi
	stop_cnlabd
fi

# -- row 5: the scheduling cycle ----------------------------------------------
if want 5; then
	if [ -z "$sched_bench" ]; then
		row 5 "scheduling cycle" "sched_bench not built" "" "< 50 ms at 10k; < 100 ms at 100k"
	else
		say "row 5: $sched_bench"
		"$sched_bench" >"$tmp/sched" 2>&1 || die "sched_bench failed: $(tail -5 "$tmp/sched")"
		cat "$tmp/sched" >>"$log"
		# A paragraph whose "cnlab:" and "fifo:" lines start with a time
		# in ms is one cycle; its first line names it.
		awk '
			/^[^ ]/ { hdr = $0; sub(/ \(median.*$/, "", hdr); sub(/:$/, "", hdr); c = ""; f = ""; next }
			hdr != "" && $1 == "cnlab:" && $3 == "ms" { c = $2 " ms" }
			hdr != "" && $1 == "fifo:" && $3 == "ms" { f = $2 " ms" }
			hdr != "" && c != "" && f != "" { printf "%s\t%s\t%s\n", hdr, c, f; hdr = "" }
		' "$tmp/sched" >"$tmp/sched-rows"
		nodes=$(sed -n 's/^cluster: \([0-9,]*\) nodes.*/\1/p' "$tmp/sched")
		if [ ! -s "$tmp/sched-rows" ]; then
			row 5 "scheduling cycle" "see sched_bench's output in the log" "" "< 50 ms at 10k; < 100 ms at 100k"
		fi
		while IFS=$'\t' read -r hdr c f; do
			row 5 "scheduling cycle, $nodes nodes: $hdr" "$c" "fifo policy $f" "< 50 ms at 10k; < 100 ms at 100k"
		done <"$tmp/sched-rows"
	fi
fi

# -- row 8: CLI start -----------------------------------------------------------
if want 8; then
	if [ -z "$cnlab" ] || [ -z "$cpu_per_run" ]; then
		row 8 "CLI start" "cnlab or cpu_per_run not built" "" "one static binary, ≤ 2 ms CPU"
	else
		say "row 8: 1,000 runs of cnlab --version, then of /bin/true"
		c=$("$cpu_per_run" 1000 "$cnlab" --version) || die "cpu_per_run $cnlab --version failed"
		b=$("$cpu_per_run" 1000 /bin/true) || die "cpu_per_run /bin/true failed"
		echo "cnlab --version: $c" >>"$log"
		echo "/bin/true: $b" >>"$log"
		cms=$(echo "$c" | sed -n 's/.*cpu_us_per_run=\([0-9.]*\).*/\1/p' | awk '{printf "%.2f", $1 / 1000}')
		bms=$(echo "$b" | sed -n 's/.*cpu_us_per_run=\([0-9.]*\).*/\1/p' | awk '{printf "%.2f", $1 / 1000}')
		kind=$(file -L "$cnlab")
		case $kind in
		*"statically linked"* | *"static-pie linked"*) linked="statically linked" ;;
		*) linked="dynamically linked: $(ldd "$cnlab" 2>/dev/null | awk '{print $1}' |
			sed -n 's/^lib\([a-z0-9_+-]*\)\.so.*/\1/p' | grep -v -x -e c -e m -e pthread -e dl -e rt |
			head -8 | paste -sd, -)…" ;;
		esac
		size=$(stat -c %s "$cnlab" | awk '{printf "%.1f MB", $1 / 1e6}')
		row 8 "CLI start, CPU per \`cnlab --version\` (1,000 runs)" "$cms ms, $linked, $size" \
			"/bin/true $bms ms" "one static binary, ≤ 2 ms CPU"
	fi
fi

# -- print ----------------------------------------------------------------------
{
	echo
	echo "Issue 19, measured $(date -u '+%Y-%m-%d %H:%M UTC') on $(nproc) cores of" \
		"$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1)," \
		"tree $(git -C "$here" rev-parse --short HEAD 2>/dev/null), load average $load_avg at the start," \
		"${slurm_ver:-${slurm_why:-no Slurm row}}"
	echo
	echo "| measure | CNLab | baseline, same run | goal |"
	echo "|---|---|---|---|"
	sort -s -n -k1,1 "$table" | cut -f2-
} | tee ${outfile:+"$outfile"}
