#!/usr/bin/env bash
# replicas_bench.sh - issue 21's figures, side by side in one run:
#   1. durable submissions/s (wrk -t2 -c64, bench/wrk_submit.lua) to cnlabd
#      on SQLite (the baseline), on PostgreSQL with one replica, with three
#      (to the leader, and through a follower that forwards to it), and
#      through pgbouncer in transaction mode; beside each, wrk on GET
#      /healthz of the same daemon; and GETs of one job with three
#      replicas, to the leader alone beside spread over all three (the
#      followers answer reads from the database themselves);
#   2. failover time over KILLS kills (default 20) of the leader of three
#      replicas with the default lease (5 s) unless --lease: from kill -9
#      to the first submission acknowledged by the new leader (a client
#      retrying every 20 ms on every replica), median and max; then
#      STOPS clean stops (SIGTERM: the lease given up, the followers told
#      through LISTEN/NOTIFY) timed the same way.
# A real PostgreSQL 15 and pgbouncer, started by tests/lib/pg-tmp.
#
#   bench/replicas_bench.sh [--seconds S] [--kills N] [--lease D] [--no-build]
set -u
here=$(cd "$(dirname "$0")/.." && pwd)
seconds=5
kills=20
stops=5
lease=5s
build=1
while [ $# -gt 0 ]; do
	case $1 in
	--seconds) seconds=$2; shift 2 ;;
	--kills) kills=$2; shift 2 ;;
	--lease) lease=$2; shift 2 ;;
	--no-build) build=0; shift ;;
	*) echo "usage: bench/replicas_bench.sh [--seconds S] [--kills N] [--lease D] [--no-build]" >&2; exit 2 ;;
	esac
done
for t in wrk curl jq psql python3; do
	command -v $t >/dev/null || { echo "replicas_bench: $t is not installed (scripts/bootstrap --bench)" >&2; exit 1; }
done
if [ "$build" = 1 ]; then
	cmake --build "$here/build" -j2 --target cnlabd >/dev/null || exit 1
fi
if [ -z "${CNLAB_TEST_STORE_PG:-}" ]; then
	exec "$here/tests/lib/pg-tmp" run --pgbouncer -- "$0" --seconds "$seconds" \
		--kills "$kills" --lease "$lease" --no-build
fi
cnlabd=$here/build/src/server/cnlabd
tmp=$(mktemp -d)
declare -A pids=()
cleanup() {
	local p
	for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null; done
	wait 2>/dev/null
	rm -rf "$tmp"
}
trap cleanup EXIT
export CNLAB_JWT_SECRET=replicas-bench-secret-0123456789abcdef-xyz
export CNLAB_ADMIN_PASSWORD=replicas-bench-admin
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()'; }
direct=$CNLAB_TEST_PG_DIRECT
bouncer=$CNLAB_TEST_STORE_PG
n=0
newdb() { # newdb: a fresh database, named in $db
	n=$((n + 1))
	db=b$n
	psql -X -q "$direct/postgres" -c "CREATE DATABASE $db" >/dev/null
}
# start NAME STORE [PORT]: one cnlabd (on PORT, else a free one); sets
# port.
start() {
	local name=$1 store=$2 l=$lease
	port=${3:-$(free_port)}
	local np
	np=$(free_port)
	"$cnlabd" ${store:+--store "$store"} --data-dir "$tmp/$name" --lease "$l" \
		--listen "127.0.0.1:$port" --notebook-listen "127.0.0.1:$np" \
		--bootstrap-admin admin --log-level warn >"$tmp/$name.out" 2>"$tmp/$name.err" &
	pids[$name]=$!
}
up() { # up PORT: wait until it answers
	for _ in $(seq 600); do
		curl -fsS --max-time 1 "http://127.0.0.1:$1/healthz" >/dev/null 2>&1 && return 0
		sleep 0.05
	done
	return 1
}
rate() { # rate PORT [nohz]: "submissions/s healthz/s" (healthz/s "-" with nohz)
	local p=$1 tok proj sub hz
	tok=$(curl -sS -X POST -d "{\"user\":\"admin\",\"password\":\"$CNLAB_ADMIN_PASSWORD\"}" \
		"http://127.0.0.1:$p/v1/auth/login" | jq -r .token)
	proj=$(curl -sS -X POST -H "Authorization: Bearer $tok" -d "{\"name\":\"bench-$p\"}" \
		"http://127.0.0.1:$p/v1/projects" | jq -r .id)
	sub=$(CNLAB_TOKEN=$tok CNLAB_PROJECT=$proj wrk -t2 -c64 -d"${seconds}s" \
		-s "$here/bench/wrk_submit.lua" "http://127.0.0.1:$p" 2>&1)
	grep -q 'Non-2xx' <<<"$sub" && { echo "errors: $(grep Non-2xx <<<"$sub")" >&2; }
	if [ "${2:-}" = nohz ]; then
		echo "$(awk '/Requests\/sec/ {printf "%.0f", $2}' <<<"$sub") -"
		return
	fi
	echo "$(awk '/Requests\/sec/ {printf "%.0f", $2}' <<<"$sub") $(hzrate "$p")"
}
hzrate() { # hzrate PORT: GET /healthz/s
	wrk -t2 -c64 -d"${seconds}s" "http://127.0.0.1:$1/healthz" 2>&1 | awk '/Requests\/sec/ {printf "%.0f", $2}'
}

echo "replicas_bench, $(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) cores, load $(cut -d' ' -f1 /proc/loadavg), $(psql -X -t -A "$direct/postgres" -c 'SHOW server_version')"
echo
echo "| store | submissions/s (wrk -t2 -c64, ${seconds}s) | GET /healthz/s, same daemon |"
echo "|---|---:|---:|"
start sqlite ""
up "$port" && read -r s h < <(rate "$port") && echo "| SQLite (group commit) | $s | $h |"
kill -TERM "${pids[sqlite]}"; wait "${pids[sqlite]}" 2>/dev/null; unset "pids[sqlite]"
newdb
start pg1 "$direct/$db"
up "$port" && read -r s h < <(rate "$port") && echo "| PostgreSQL, 1 replica | $s | $h |"
kill -TERM "${pids[pg1]}"; wait "${pids[pg1]}" 2>/dev/null; unset "pids[pg1]"
newdb
start pg3a "$direct/$db"
up "$port" || exit 1
lport=$port
start pg3b "$direct/$db"
fport=$port
start pg3c "$direct/$db"
sleep 1
# The /healthz floods of this set come last: 64 connections of them
# (40k+/s) take both cores from PostgreSQL for seconds, and the leader's
# lease renewals with them (see docs/benchmarks.md).
read -r s h < <(rate "$lport" nohz) && echo "| PostgreSQL, 3 replicas, to the leader | $s | (below) |"
read -r s h < <(rate "$fport" nohz) && echo "| PostgreSQL, 3 replicas, through a follower (forwarded to the leader) | $s | (below) |"
# Reads: GET of one job (its row and the leader's live status), wrk with
# 64 connections to the leader alone, then 64 spread over the three
# replicas at once (the followers answer from the database: the status
# mirrored by the leader), summed.
tok=$(curl -sS -X POST -d "{\"user\":\"admin\",\"password\":\"$CNLAB_ADMIN_PASSWORD\"}" \
	"http://127.0.0.1:$lport/v1/auth/login" | jq -r .token)
rproj=$(curl -sS -X POST -H "Authorization: Bearer $tok" -d '{"name":"reads"}' "http://127.0.0.1:$lport/v1/projects" | jq -r .id)
jid=$(curl -sS -X POST -H "Authorization: Bearer $tok" -d '{"command":"true","gpu":"h100-25"}' \
	"http://127.0.0.1:$lport/v1/projects/$rproj/jobs" | jq -r .id)
sleep 1
cpu() { # cpu PID: its CPU time so far, in clock ticks
	awk '{print $14 + $15}' "/proc/$1/stat"
}
c0=$(cpu "${pids[pg3a]}")
one=$(wrk -t2 -c64 -d"${seconds}s" -H "Authorization: Bearer $tok" "http://127.0.0.1:$lport/v1/jobs/$jid" 2>&1 |
	awk '/Requests\/sec/ {printf "%.0f", $2}')
lcpu1=$(($(cpu "${pids[pg3a]}") - c0))
c0=$(cpu "${pids[pg3a]}")
spread=0
wp=()
for p in "$lport" "$fport" "${port}"; do
	wrk -t1 -c21 -d"${seconds}s" -H "Authorization: Bearer $tok" "http://127.0.0.1:$p/v1/jobs/$jid" >"$tmp/reads.$p" 2>&1 &
	wp+=($!)
done
wait "${wp[@]}"
lcpu3=$(($(cpu "${pids[pg3a]}") - c0))
parts=()
for p in "$lport" "$fport" "${port}"; do
	grep -q 'Non-2xx' "$tmp/reads.$p" && echo "errors on $p: $(grep Non-2xx "$tmp/reads.$p")" >&2
	x=$(awk '/Requests\/sec/ {printf "%.0f", $2}' "$tmp/reads.$p")
	parts+=("$x")
	spread=$((spread + ${x:-0}))
done
hz=$(getconf CLK_TCK)
echo "| PostgreSQL, 3 replicas: GET of a job/s, 64 connections to the leader alone / spread over the 3 replicas (leader + followers: ${parts[*]}) | $one / $spread | the leader's CPU: $(awk -v a="$lcpu1" -v b="$lcpu3" -v h="$hz" -v s="$seconds" 'BEGIN { printf "%.0f%% / %.0f%% of a core", 100 * a / h / s, 100 * b / h / s }') |"
echo "| PostgreSQL, 3 replicas: GET /healthz/s of the leader / of a follower (its own answer) | | $(hzrate "$lport") / $(hzrate "$fport") |"
for r in pg3a pg3b pg3c; do kill -TERM "${pids[$r]}"; wait "${pids[$r]}" 2>/dev/null; unset "pids[$r]"; done
newdb
start pgb "$bouncer/$db"
up "$port" && read -r s h < <(rate "$port") && echo "| PostgreSQL through pgbouncer (transaction mode), 1 replica | $s | $h |"
kill -TERM "${pids[pgb]}"; wait "${pids[pgb]}" 2>/dev/null; unset "pids[pgb]"

# Failover.
newdb
ports=()
for r in 1 2 3; do
	start "f$r" "$direct/$db"
	ports+=("$port")
	[ "$r" = 1 ] && { up "$port" || exit 1; }
done
sleep 1
tok=$(curl -sS -X POST -d "{\"user\":\"admin\",\"password\":\"$CNLAB_ADMIN_PASSWORD\"}" \
	"http://127.0.0.1:${ports[0]}/v1/auth/login" | jq -r .token)
proj=$(curl -sS -X POST -H "Authorization: Bearer $tok" -d '{"name":"failover"}' \
	"http://127.0.0.1:${ports[0]}/v1/projects" | jq -r .id)
# One node agent given every replica's address (real containers, fake
# GPUs): the new leader's first placement is what the failover ends with.
agent=$here/build/src/agent/cnlab-agent
jt=$(curl -sS -X POST -H "Authorization: Bearer $tok" -d '{"node":"fo-node","expires_in_seconds":600}' \
	"http://127.0.0.1:${ports[0]}/v1/nodes/join-tokens" | jq -r .token)
CNLAB_AGENT_TOKEN=$jt "$agent" --server "http://127.0.0.1:${ports[0]},http://127.0.0.1:${ports[1]},http://127.0.0.1:${ports[2]}" \
	--name fo-node --gpus fake:8xH100-80GB-SXM --work-dir "$tmp/agent" --cpu-milli 64000 --mem-mib 65536 \
	--log-level warn >"$tmp/agent.out" 2>"$tmp/agent.err" &
pids[agent]=$!
placed() { # placed ID: the job has left pending (a node took it)
	local st
	st=$(curl -sS --max-time 2 -H "Authorization: Bearer $tok" "http://127.0.0.1:${ports[$1]}/v1/jobs/$2" 2>/dev/null |
		jq -r '.state // empty' 2>/dev/null)
	[ -n "$st" ] && [ "$st" != pending ]
}
leader_of() { # the replica number that leads, or ""
	local r
	for r in 1 2 3; do
		[ "$(curl -sS --max-time 1 "http://127.0.0.1:${ports[$((r - 1))]}/healthz" 2>/dev/null | jq -r '.role // empty' 2>/dev/null)" = leader ] &&
			{ echo "$r"; return; }
	done
}
times=()
ptimes=()
for k in $(seq "$kills"); do
	# A random moment in the leader's renewal period (a third of the
	# lease), so that the kills do not all land at one phase of it.
	sleep "$(awk -v r="$RANDOM" -v l="${lease%s}" 'BEGIN { printf "%.3f", 1 + (r % 1000) / 1000 * l / 3 }')"
	lr=$(leader_of)
	[ -n "$lr" ] || { echo "no leader before kill $k" >&2; break; }
	kill -9 "${pids[f$lr]}"
	t0=$(date +%s%3N)
	wait "${pids[f$lr]}" 2>/dev/null
	i=0
	while :; do
		p=${ports[$((i % 3))]}
		body=$(curl -sS --max-time 2 -w ' %{http_code}' -X POST \
			-H "Authorization: Bearer $tok" -d '{"command":"true","gpu":"h100-25"}' \
			"http://127.0.0.1:$p/v1/projects/$proj/jobs" 2>/dev/null)
		[ "${body##* }" = 201 ] && break
		i=$((i + 1))
		[ $((i % 3)) = 0 ] && sleep 0.02
	done
	times+=($(($(date +%s%3N) - t0)))
	id=$(jq -r .id <<<"${body% *}")
	for _ in $(seq 1500); do
		placed $((i % 3)) "$id" && break
		sleep 0.02
	done
	ptimes+=($(($(date +%s%3N) - t0)))
	start "f$lr" "$direct/$db" "${ports[$((lr - 1))]}" # back as a follower
done
sorted=$(printf '%s\n' "${times[@]}" | sort -n)
cnt=${#times[@]}
med=$(sed -n "$(((cnt + 1) / 2))p" <<<"$sorted")
max=$(tail -1 <<<"$sorted")
echo
echo "Failover, lease $lease, $cnt kills of the leader of 3 replicas, kill -9 to the first submission acknowledged: median $med ms, max $max ms"
echo "each: ${times[*]}"
sorted=$(printf '%s\n' "${ptimes[@]}" | sort -n)
med=$(sed -n "$(((cnt + 1) / 2))p" <<<"$sorted")
max=$(tail -1 <<<"$sorted")
echo "Failover, kill -9 to that submission placed on the node by the new leader (the agent following it): median $med ms, max $max ms"
echo "each: ${ptimes[*]}"
# Clean stops: the lease is released and the followers hear of it.
gone() { # gone PID: it has exited (a zombie not yet waited for counts)
	local st
	st=$(cut -d' ' -f3 "/proc/$1/stat" 2>/dev/null)
	[ -z "$st" ] || [ "$st" = Z ]
}
times=()
for k in $(seq "$stops"); do
	sleep 1
	lr=$(leader_of)
	[ -n "$lr" ] || { echo "no leader before stop $k" >&2; break; }
	kill -TERM "${pids[f$lr]}"
	t0=$(date +%s%3N)
	i=0
	while :; do
		p=${ports[$((i % 3))]}
		code=$(curl -sS --max-time 2 -o /dev/null -w '%{http_code}' -X POST \
			-H "Authorization: Bearer $tok" -d '{"command":"true","gpu":"h100-25"}' \
			"http://127.0.0.1:$p/v1/projects/$proj/jobs" 2>/dev/null)
		[ "$code" = 201 ] && gone "${pids[f$lr]}" && break
		i=$((i + 1))
		[ $((i % 3)) = 0 ] && sleep 0.02
	done
	times+=($(($(date +%s%3N) - t0)))
	wait "${pids[f$lr]}" 2>/dev/null
	start "f$lr" "$direct/$db" "${ports[$((lr - 1))]}"
done
sorted=$(printf '%s\n' "${times[@]}" | sort -n)
cnt=${#times[@]}
med=$(sed -n "$(((cnt + 1) / 2))p" <<<"$sorted")
max=$(tail -1 <<<"$sorted")
echo "Clean stops (SIGTERM), $cnt of the leader of 3 replicas (to the first submission acknowledged once it has exited): median $med ms, max $max ms"
echo "each: ${times[*]}"
