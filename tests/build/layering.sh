#!/usr/bin/env bash
# layering.sh BUILD_DIR - prove that the build enforces the floors
# (docs/internals/layering.md): compile small probe sources with the exact
# flags of real targets, read from BUILD_DIR/compile_commands.json, and
# expect every include that crosses a floor the wrong way, or reaches into
# another module's *-internal.h, to fail with "No such file", while the
# control includes each target may use compile.  A probe that compiles
# where it must not, or fails where it must compile, fails the test.
set -euo pipefail
build=$(cd "$1" && pwd)
src=$(cd "$(dirname "$0")/../.." && pwd)
db=$build/compile_commands.json
[ -f "$db" ] || {
	echo "layering: $db missing (CMAKE_EXPORT_COMPILE_COMMANDS)"
	exit 1
}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fails=0
checks=0

# flags SOURCE: the compiler and flags that build SOURCE (relative to the
# source tree) into ${out[@]}, without the output, the input and the
# dependency-file arguments.  Fails when SOURCE is not in the database.
flags() {
	local cmd
	cmd=$(jq -r --arg f "$src/$1" \
		'[.[] | select(.file == $f)][0].command // empty' "$db")
	[ -n "$cmd" ] || return 1
	eval "set -- $cmd"
	out=()
	while [ $# -gt 0 ]; do
		case $1 in
		-o | -MT | -MF | -MQ) shift ;;
		-c | -MD | -MMD) ;;
		*) out+=("$1") ;;
		esac
		shift
	done
}

# probe deny|allow SOURCE HEADER
probe() {
	local want=$1 file=$2 header=$3 p=$tmp/probe.c log=$tmp/probe.log
	checks=$((checks + 1))
	if ! flags "$file"; then
		echo "FAIL $file is not in compile_commands.json"
		fails=$((fails + 1))
		return
	fi
	# Drop the real source from the arguments, keep everything else.
	local args=() a
	for a in "${out[@]}"; do
		[ "$a" = "$src/$file" ] || args+=("$a")
	done
	printf '#include "%s"\ntypedef int cnl_layering_probe;\n' "$header" >"$p"
	if (cd "$build" && "${args[@]}" -fsyntax-only "$p") >"$log" 2>&1; then
		if [ "$want" = deny ]; then
			echo "FAIL $file can include $header"
			fails=$((fails + 1))
		else
			echo "ok   $file may include $header"
		fi
	elif [ "$want" = deny ] &&
		grep -q "fatal error: $header: No such file or directory" "$log"; then
		echo "ok   $file cannot include $header"
	else
		echo "FAIL $file: $header: $(head -3 "$log")"
		fails=$((fails + 1))
	fi
}

# common: libc, jansson and include/cnlab only.
probe allow src/common/log.c cnlab/errors.h
probe deny src/common/log.c net/client.h
probe deny src/common/log.c wire/state.h
probe deny src/common/log.c sched/sched.h
# net: common only.
probe allow src/net/client.c common/util.h
probe allow src/net/client.c net/jwt.h
probe deny src/net/client.c server/api.h
probe deny src/net/client.c server/auth.h
probe deny src/net/client.c store/store.h
probe deny src/net/client.c sched/sched.h
probe deny src/net/client.c wire/state.h
probe deny src/net/client.c agent/agent.h
probe deny src/net/client.c cli/cli.h
# wire: common only.
probe allow src/wire/state.c common/json.h
probe deny src/wire/state.c net/client.h
probe deny src/wire/state.c store/store.h
# sched (pure): common only; its own private headers.
probe allow src/sched/sched.c sched/sched-internal.h
probe allow src/sched/sched.c common/util.h
probe deny src/sched/sched.c store/store.h
probe deny src/sched/sched.c server/ctl.h
probe deny src/sched/sched.c net/client.h
probe deny src/sched/sched.c wire/state.h
# store: below the server; no one else's internals.
probe allow src/store/store.c wire/state.h
probe allow src/store/sqlite.c store/sqlite-internal.h
probe deny src/store/store.c server/api.h
probe deny src/store/store.c net/http_server.h
probe deny src/store/store.c sched/alloc-internal.h
# server: everything below it, no internals of other modules, nothing
# of the agent or the CLI.
probe allow src/server/api.c store/store.h
probe allow src/server/api.c net/http_server.h
probe allow src/server/api.c server/api-internal.h
probe deny src/server/api.c store/sqlite-internal.h
probe deny src/server/api.c sched/sched-internal.h
probe deny src/server/api.c agent/agent.h
probe deny src/server/api.c cli/cli.h
probe deny src/server/main.c agent/launch.h
# agent (library and binary): common, net, the shim's region, sched's
# catalog; no control plane, no CLI.
probe allow src/agent/agent.c net/http_server.h
probe allow src/agent/agent.c shim/region.h
probe deny src/agent/agent.c store/store.h
probe deny src/agent/agent.c server/api.h
probe deny src/agent/agent.c server/auth.h
probe deny src/agent/agent.c server/ctl.h
probe deny src/agent/agent.c cli/cli.h
probe deny src/agent/agent.c sched/alloc-internal.h
probe deny src/agent/agent.c shim/shim-internal.h
probe deny src/agent/launch.c net/client.h
# the daemon speaks the node protocol through wire's public header only;
# its own agent-internal.h stays inside src/agent (a test linking the
# daemon's library sees agent.h, not the internals).
probe allow src/agent/reporter.c wire/node.h
probe allow src/agent/supervisor.c agent/agent-internal.h
probe deny src/agent/reporter.c wire/codec-internal.h
probe allow tests/unit/agent/test_gpu.c agent/agent.h
probe deny tests/unit/agent/test_gpu.c agent/agent-internal.h
probe deny src/agent/main.c store/store.h
probe deny src/agent/main.c server/api.h
# cli (library and binary): common and net only.
probe allow src/cli/cli.c net/client.h
probe allow src/cli/cli.c cli/format.h
probe deny src/cli/cli.c agent/agent.h
probe deny src/cli/cli.c server/api.h
probe deny src/cli/cli.c store/store.h
probe deny src/cli/cli.c sched/sched.h
probe deny src/cli/format.c agent/launch.h
probe deny src/cli/format.c server/auth.h
# shim: alone.
probe allow src/shim/shim.c shim/shim-internal.h
probe deny src/shim/shim.c common/util.h
probe deny src/shim/shim.c cnlab/errors.h
probe deny src/shim/region.c net/client.h
# sim: on the scheduler, not on the control plane.
probe allow src/sim/replay.c sched/sched.h
probe deny src/sim/replay.c store/store.h
probe deny src/sim/replay.c server/api.h

echo "layering: $checks probes, $fails failed"
[ "$fails" = 0 ]
