# burst_lib.sh - what the loopback-cloud burst tests share (burst_gcp.sh,
# burst_azure.sh, burst_naver.sh, burst_kt.sh); sourced after lib.sh,
# never run.  Bash.  The caller sets $cnlabd $agent $cnlab $here $tmp $run
# (the run's node names carry it) and $cloud (its cluster: cloud-gcp), and
# pids=(): burst_cleanup is the EXIT trap.
#
#   burst_env DIR      the run's environment: the JWT secret and admin
#                      password, HOME, $shared (world-writable, mounted in
#                      workloads as /shared), $tmp/DIR for the fake cloud,
#                      and the secrets key $tmp/secrets.key
#   burst_cleanup      every process started, the cgroups of the run's
#                      nodes and of cluster $cloud, and $tmp (kept with
#                      KEEP_TMP set)
#   burst_start IMAGE  a real cnlabd with the burst on (--burst-image
#                      IMAGE, idle 3 s, a tick of 300 ms, the secrets key
#                      $tmp/secrets.key), root logged in, project "lab",
#                      and an agent "$run-a" on one fake H100 (the GPUs
#                      owned); then $shared/wait.sh NAME waits for
#                      /shared/NAME, the caller is in $tmp, and $base is
#                      cnlabd's URL
#   state J, node_of J, is_state J S, on_cloud J (running on a cloud-*
#   node), audit (action, target and result of each record), has_audit RE,
#   moved_from J NODE
burst_cleanup() {
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done
	sleep 0.5
	for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null; done
	wait 2>/dev/null
	for d in /sys/fs/cgroup/*/cnlab/* /sys/fs/cgroup/cnlab/*; do
		[ -d "$d" ] || continue
		case "$d" in *"$run"* | *"$cloud"*) ;; *) continue ;; esac
		find "$d" -name freezer.state -exec sh -c 'echo THAWED >"$1"' _ {} \; 2>/dev/null
		find "$d" -name cgroup.freeze -exec sh -c 'echo 0 >"$1"' _ {} \; 2>/dev/null
		find "$d" -name cgroup.procs -exec cat {} + 2>/dev/null |
			xargs -r kill -9 2>/dev/null
	done
	pkill -9 -f "$tmp/" 2>/dev/null
	sleep 0.3
	for d in /sys/fs/cgroup/*/cnlab/* /sys/fs/cgroup/cnlab/*; do
		case "$d" in *"$run"* | *"$cloud"*) find "$d" -depth -type d -exec rmdir {} + 2>/dev/null ;; esac
	done
	[ -n "${KEEP_TMP:-}" ] || rm -rf "$tmp"
}

burst_env() {
	export CNLAB_JWT_SECRET=burst-$cloud-integration-secret-0123456789abcdef
	export CNLAB_ADMIN_PASSWORD=admin-password-1
	export HOME=$tmp/home XDG_CONFIG_HOME=$tmp/xdg
	shared=$tmp/shared
	mkdir -p "$shared" "$HOME" "$tmp/$1"
	chmod 755 "$tmp"
	chmod 1777 "$shared"
	unset CNLAB_SERVER CNLAB_TOKEN CNLAB_CONFIG
	openssl rand -hex 32 >"$tmp/secrets.key" && chmod 600 "$tmp/secrets.key"
}

burst_start() {
	"$cnlabd" --data-dir "$tmp/db" --listen 127.0.0.1:0 \
		--bootstrap-admin root --cycle-interval 200ms \
		--secrets-key-file "$tmp/secrets.key" \
		--burst-image "$1" \
		--burst-agent "$agent" --burst-idle 3s --burst-interval 300ms \
		>"$tmp/cnlabd.out" 2>"$tmp/cnlabd.err" &
	pids+=($!)
	wait_for 20 grep -q '^listening on' "$tmp/cnlabd.out" || { cat "$tmp/cnlabd.err"; exit 1; }
	base=http://127.0.0.1:$(sed -n 's/^listening on 127\.0\.0\.1:\([0-9]*\)$/\1/p' "$tmp/cnlabd.out")
	echo admin-password-1 | "$cnlab" login --server "$base" --user root --password-stdin >/dev/null ||
		bad "login"
	"$cnlab" project create lab >/dev/null && "$cnlab" project member add lab root >/dev/null &&
		"$cnlab" project use lab >/dev/null || bad "project"
	local tok
	tok=$("$cnlab" node join-token --node "$run-a" -o json | jq -r .token)
	CNLAB_AGENT_TOKEN=$tok "$agent" --server "$base" --name "$run-a" \
		--gpus fake:1xH100-80GB-SXM --work-dir "$tmp/agent-a" --cpu-milli 4000 \
		--mem-mib 8192 --mounts "$shared:/shared" >"$tmp/agent-a.out" 2>"$tmp/agent-a.err" &
	pids+=($!)
	wait_for 20 grep -q 'msg=registered' "$tmp/agent-a.err" || bad "agent a: $(cat "$tmp/agent-a.err")"
	cat >"$shared/wait.sh" <<'SH'
while [ ! -e "/shared/$1" ]; do sleep 0.1; done
SH
	cp "$shared/wait.sh" "$tmp/wait.sh"
}

state() { "$cnlab" jobs show "$1" -o json | jq -r .state; }
node_of() { "$cnlab" jobs show "$1" -o json | jq -r '.placement.node // empty'; }
is_state() { [ "$(state "$1")" = "$2" ]; }
on_cloud() { is_state "$1" running && case "$(node_of "$1")" in cloud-*) true ;; *) false ;; esac; }
audit() { "$cnlab" audit --limit 1000 -o json 2>/dev/null | jq -r '.items[] | .action + " " + .target + " " + .result'; }
has_audit() { audit | grep -q "$1"; }
moved_from() { local on; on=$(node_of "$1"); [ -n "$on" ] && [ "$on" != "$2" ]; }
