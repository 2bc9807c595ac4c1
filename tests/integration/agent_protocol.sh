#!/usr/bin/env bash
# agent_protocol.sh - cnlab-agent against a fake cnlabd (a small Python
# server) that records every body the agent sends and answers what the
# test tells it to:
#   - replies that do not decode (a heartbeat whose "stop" is no list, an
#     assignment with a field the protocol does not know, an inputs reply
#     with a file name that is not plain): the agent logs the field the
#     decoder names, treats the call as failed, starts nothing and keeps
#     running;
#   - then good replies: the agent runs the assigned job, and every body it
#     sends is the typed protocol's, field for field: heartbeat, reports
#     (running, succeeded), log chunks of both streams, the artifact, and
#     the checkpoint it restored and uploads again.
# Real processes in real cgroups, as integration.agent.
set -u
agent=$1
tmp=$(mktemp -d)
run=ip$$ # the agent's name, and so its cgroup root, unique to this run
pids=()
cleanup() {
	for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null; done
	wait 2>/dev/null
	for d in /sys/fs/cgroup/*/cnlab/$run-* /sys/fs/cgroup/cnlab/$run-*; do
		[ -d "$d" ] || continue
		find "$d" -name cgroup.procs -exec cat {} + 2>/dev/null |
			xargs -r kill -9 2>/dev/null
	done
	sleep 0.3
	for d in /sys/fs/cgroup/*/cnlab/$run-* /sys/fs/cgroup/cnlab/$run-*; do
		[ -d "$d" ] && find "$d" -depth -type d -exec rmdir {} + 2>/dev/null
	done
	rm -rf "$tmp"
}
trap cleanup EXIT
fails=0
ok() { echo "ok   $1"; }
bad() {
	echo "FAIL $1"
	fails=$((fails + 1))
}
# wait_for SECONDS CMD...: poll CMD every 0.2 s until it succeeds.
wait_for() {
	local n=$(($1 * 5))
	shift
	for _ in $(seq "$n"); do
		"$@" && return 0
		sleep 0.2
	done
	return 1
}
command -v python3 >/dev/null && command -v jq >/dev/null || {
	echo "FAIL python3 and jq are needed (scripts/bootstrap installs them)"
	exit 1
}

# The fake cnlabd.  $tmp/mode says how to answer: "bad" or "good".  Every
# POST is appended to $tmp/posts.jsonl as {"path", "body"}.
cat >"$tmp/fake.py" <<'PY'
import http.server, json, sys, time

d = sys.argv[1]
node = {"id": "node_fake", "name": "n", "epoch": 1, "state": "up",
        "lease_ms": 60000, "heartbeat_ms": 200}
job = {"id": "job_1", "kind": "job", "epoch": 3, "action": "run",
       "project_id": "prj_1", "user_id": "usr_1", "user": "ana",
       "shape": "cpu", "gpu": {"blocks": 0, "vram_mib": 0, "gpu_mask": 0},
       "cpu_milli": 1000, "mem_mib": 256,
       "command": "cat $CNLAB_CHECKPOINT_DIR/ck.txt; echo out; "
                  "echo err >&2; printf w >$CNLAB_ARTIFACTS_DIR/a.txt; "
                  "sleep 1"}
ended = False

def mode():
    with open(d + "/mode") as f:
        return f.read().strip()

class H(http.server.BaseHTTPRequestHandler):
    def reply(self, code, doc):
        b = json.dumps(doc).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(b)))
        self.end_headers()
        self.wfile.write(b)

    def do_POST(self):
        global ended
        n = int(self.headers.get("Content-Length", "0"))
        body = json.loads(self.rfile.read(n) or b"{}")
        with open(d + "/posts.jsonl", "a") as f:
            f.write(json.dumps({"path": self.path, "body": body}) + "\n")
        p = self.path
        if p == "/v1/nodes":
            return self.reply(201, node)
        if p.endswith("/heartbeat"):
            if mode() == "bad":
                return self.reply(200, dict(node, stop="job_1"))
            return self.reply(200, dict(node, stop=[]))
        if p.endswith("/reports"):
            if body.get("state") != "running":
                ended = True
            return self.reply(200, {})
        if p.endswith("/artifacts") or p.endswith("/checkpoints"):
            return self.reply(201, {})
        return self.reply(200, {})

    def do_GET(self):
        p = self.path
        if "/assignments" in p:
            time.sleep(0.3)  # a short long poll
            if mode() == "bad":
                return self.reply(200, {"version": 1, "epoch": 1,
                                        "assignments": [dict(job, colour="red")]})
            return self.reply(200, {"version": 2, "epoch": 1,
                                    "assignments": [] if ended else [job]})
        if "/inputs" in p:
            return self.reply(200, {"items": [
                {"name": "../escape", "data_base64": "aGk="}]})
        if "/checkpoints" in p:
            return self.reply(200, {"items": [
                {"name": "ck.txt", "data_base64": "Y2sK"}]})
        return self.reply(404, {"error": {"code": "not_found",
                                          "message": "no"}})

    def log_message(self, *a):
        pass

s = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
with open(d + "/port.tmp", "w") as f:
    f.write(str(s.server_port))
import os
os.rename(d + "/port.tmp", d + "/port")
s.serve_forever()
PY
echo bad >"$tmp/mode"
: >"$tmp/posts.jsonl"
python3 "$tmp/fake.py" "$tmp" &
pids+=($!)
wait_for 10 test -s "$tmp/port" || {
	echo "FAIL the fake cnlabd did not start"
	exit 1
}
base=http://127.0.0.1:$(cat "$tmp/port")

CNLAB_AGENT_TOKEN=cnl_fake "$agent" --server "$base" --name "$run-a" \
	--gpus fake:1xH100-80GB-SXM --work-dir "$tmp/agent" --cpu-milli 4000 \
	--mem-mib 4096 --log-level info >"$tmp/agent.out" 2>"$tmp/agent.err" &
apid=$!
pids+=($apid)
wait_for 10 grep -q 'msg=registered' "$tmp/agent.err" &&
	ok "agent registered with the fake" || bad "agent: $(cat "$tmp/agent.err")"

# posts PATH-SUFFIX: the bodies POSTed to paths ending so, one a line,
# keys sorted.
posts() { jq -cS --arg s "$1" 'select(.path | endswith($s)) | .body' "$tmp/posts.jsonl"; }
undecoded() { grep 'reply does not decode' "$tmp/agent.err" | grep -q "$1"; }

# --- replies that do not decode ---------------------------------------------
wait_for 10 undecoded 'assignments\[0\].colour' &&
	ok "bad assignments reply: logged, naming the field" ||
	bad "assignments: $(grep -i decode "$tmp/agent.err" | head -3)"
wait_for 10 undecoded 'field.*stop' &&
	ok "bad heartbeat reply: logged, naming the field" ||
	bad "heartbeat: $(grep -i decode "$tmp/agent.err" | head -3)"
sleep 1
kill -0 "$apid" 2>/dev/null && ok "agent runs on after bad replies" || bad "agent died: $(tail -5 "$tmp/agent.err")"
[ -z "$(posts /reports)" ] && ! grep -q 'workload started' "$tmp/agent.err" &&
	ok "nothing started from a reply that did not decode" ||
	bad "started: $(posts /reports)"
hb=$(posts /heartbeat | head -1)
[ "$hb" = '{"running":[]}' ] && ok "heartbeat body is the protocol's" || bad "heartbeat body: $hb"

# --- good replies: a job runs, every body is the protocol's -----------------
echo good >"$tmp/mode"
wait_for 30 sh -c "grep -q '\"state\": \"succeeded\"' '$tmp/posts.jsonl'" ||
	bad "job did not end: $(tail -5 "$tmp/agent.err")"
undecoded 'items\[0\].name' && grep 'reply does not decode' "$tmp/agent.err" | grep -q 'what=inputs' &&
	ok "bad inputs reply: logged, naming the field; the job ran without" ||
	bad "inputs: $(grep -i decode "$tmp/agent.err" | tail -3)"
r=$(posts /reports | head -1)
[ "$r" = '{"epoch":3,"exit_code":0,"id":"job_1","state":"running"}' ] &&
	ok "report running" || bad "report running: $r"
r=$(posts /reports | tail -1)
[ "$r" = '{"epoch":3,"exit_code":0,"id":"job_1","state":"succeeded"}' ] &&
	ok "report succeeded" || bad "report succeeded: $r"
out=$(posts /logs | jq -r 'select(.id == "job_1" and .epoch == 3 and .stream == "stdout") | .data' | tr -d '\n')
err=$(posts /logs | jq -r 'select(.id == "job_1" and .epoch == 3 and .stream == "stderr") | .data' | tr -d '\n')
[ "$out" = ckout ] && [ "$err" = err ] &&
	ok "log chunks of both streams (the checkpoint was restored)" || bad "logs: stdout=$out stderr=$err"
[ -z "$(posts /logs | jq -c 'del(.id, .epoch, .stream, .data) | select(. != {})')" ] ||
	bad "log chunk fields: $(posts /logs | head -1)"
a=$(posts /artifacts)
[ "$a" = '{"data_base64":"dw==","epoch":3,"id":"job_1","name":"a.txt"}' ] &&
	ok "artifact upload" || bad "artifact: $a"
c=$(posts /checkpoints)
[ "$c" = '{"data_base64":"Y2sK","epoch":3,"id":"job_1","name":"ck.txt"}' ] &&
	ok "checkpoint upload" || bad "checkpoint: $c"
posts /heartbeat | grep -q '{"running":\[{"epoch":3,"id":"job_1"}\]}' &&
	ok "heartbeat lists the running job" || bad "heartbeats: $(posts /heartbeat | sort -u)"
[ "$(grep -c 'workload started' "$tmp/agent.err")" = 1 ] &&
	ok "started once" || bad "starts: $(grep 'workload started' "$tmp/agent.err")"

kill -TERM "$apid" 2>/dev/null
wait "$apid" 2>/dev/null
echo "$fails failure(s)"
[ "$fails" = 0 ]
