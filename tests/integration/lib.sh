# lib.sh - what the shell integration tests (and bench/run_bench.sh) share;
# sourced, never run.  Bash.
#
#   ok MSG / bad MSG   print "ok   MSG" / "FAIL MSG"; bad counts $fails
#   wait_for SECS CMD... polls CMD every 0.2 s for SECS seconds: its status
#   need_tools TOOL... exits 1 with "FAIL TOOL is not installed" for the
#                      first one missing (scripts/bootstrap installs them)
#   allinone_start CNLABD DIR
#                      an all-in-one cnlabd (embedded agent, two fake
#                      H100s) on a free loopback port, its data in
#                      DIR/data, its output in DIR/out and DIR/err; sets
#                      $pid and $url, or prints why and exits 1.  The
#                      caller's cleanup kills $pid.
#   allinone_nvml_start CNLABD DIR FAKE_NVML
#                      the same on the fake libnvidia-ml.so.1 (FAKE_NVML_*
#                      from the environment), the agent's /metrics on a
#                      free loopback port; also sets $mport, and $tok (the
#                      admin's token).
fails=0
ok() { echo "ok   $1"; }
bad() {
	echo "FAIL $1"
	fails=$((fails + 1))
}
wait_for() {
	local n=$(($1 * 5))
	shift
	for _ in $(seq "$n"); do
		"$@" && return 0
		sleep 0.2
	done
	return 1
}
need_tools() {
	local t
	for t in "$@"; do
		command -v "$t" >/dev/null || {
			echo "FAIL $t is not installed (scripts/bootstrap installs it)"
			exit 1
		}
	done
}

allinone_start() {
	local cnlabd=$1 dir=$2
	"$cnlabd" --all-in-one --data-dir "$dir/data" --listen 127.0.0.1:0 \
		--gpus fake:2xH100-80GB-SXM --log-level warn >"$dir/out" 2>"$dir/err" &
	pid=$!
	for _ in $(seq 200); do
		grep -q 'CNLab is running' "$dir/out" && break
		sleep 0.05
	done
	url=$(sed -n 's/^CNLab is running at \([^ ]*\).*/\1/p' "$dir/out")
	# The notebook proxy's own origin (notebook_listen).
	nurl=$(sed -n 's/^  notebooks: *\([^ ]*\).*/\1/p' "$dir/out")
	[ -n "$url" ] || {
		echo "cnlabd did not start:" >&2
		cat "$dir/out" "$dir/err" >&2
		exit 1
	}
}

allinone_nvml_start() {
	local cnlabd=$1 dir=$2 nvml=$3 pw
	CNLAB_AGENT_LISTEN=127.0.0.1:0 HOME=$dir "$cnlabd" --all-in-one \
		--data-dir "$dir/data" --listen 127.0.0.1:0 --gpus "nvml:$nvml" \
		--log-level info >"$dir/out" 2>"$dir/err" &
	pid=$!
	for _ in $(seq 200); do
		grep -q 'CNLab is running' "$dir/out" &&
			grep -q 'msg=metrics listen=' "$dir/err" && break
		sleep 0.05
	done
	url=$(sed -n 's/^CNLab is running at \([^ ]*\).*/\1/p' "$dir/out")
	mport=$(grep -o 'msg=metrics listen=127.0.0.1:[0-9]*' "$dir/err" | tail -1 | sed 's/.*://')
	[ -n "$url" ] && [ -n "$mport" ] || {
		echo "cnlabd or its agent's /metrics did not start:" >&2
		cat "$dir/out" "$dir/err" >&2
		exit 1
	}
	pw=$(cat "$dir/data/admin.password")
	tok=$(curl -sS -X POST -d "{\"user\":\"admin\",\"password\":\"$pw\"}" "$url/v1/auth/login" | jq -r .token)
}
