#!/usr/bin/env bash
# agent_protocol.sh - cnlab-agent against a fake cnlabd (a small Python
# server) that records every body the agent sends and answers what the
# test tells it to:
#   - replies that do not decode (a heartbeat whose "stop" is no list, an
#     assignment with a field the protocol does not know): the agent logs
#     the field the decoder names, treats the call as failed, starts
#     nothing and keeps running;
#   - then good replies: the agent runs the assigned job, and every body it
#     sends is the typed protocol's, field for field: heartbeat, reports
#     (running, succeeded), log chunks of both streams, the artifact and
#     the checkpoint it restored (streamed, with their SHA-256), and the
#     input it fetched into a subfolder;
#   - an inputs list naming a path out of the job's folder does not
#     decode: the job fails saying so, and nothing is written there;
#   - the heartbeat lists the servers' workspaces the node keeps; those
#     the reply drops go (folder and image), nothing it did not list does.
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
# POST is appended to $tmp/posts.jsonl as {"path", "body"}, every PUT (a
# file, streamed) to $tmp/puts.jsonl as {"path", "sha256", "data"}.
cat >"$tmp/fake.py" <<'PY'
import base64, hashlib, http.server, json, sys, time, urllib.parse

d = sys.argv[1]
node = {"id": "node_fake", "name": "n", "epoch": 1, "state": "up",
        "lease_ms": 60000, "heartbeat_ms": 200}
job = {"id": "job_1", "kind": "job", "epoch": 3, "action": "run",
       "project_id": "prj_1", "user_id": "usr_1", "user": "ana",
       "shape": "cpu", "gpu": {"blocks": 0, "vram_mib": 0, "gpu_mask": 0},
       "cpu_milli": 1000, "mem_mib": 256,
       "command": "cat 'in dir/\u00efn.txt' $CNLAB_CHECKPOINT_DIR/ck.txt; "
                  "echo out; echo err >&2; "
                  "printf w >$CNLAB_ARTIFACTS_DIR/a.txt; sleep 1"}
# The second job gets an inputs list that does not decode.
job2 = dict(job, id="job_2", command="echo never")
files = {"inputs": {"in dir/\u00efn.txt": b"hi\n"},
         "checkpoints": {"ck.txt": b"ck\n"}}
ended = set()

def mode():
    with open(d + "/mode") as f:
        return f.read().strip()

def sha(b):
    return hashlib.sha256(b).hexdigest()

class H(http.server.BaseHTTPRequestHandler):
    def reply(self, code, doc, raw=None, digest=None):
        b = raw if raw is not None else json.dumps(doc).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/octet-stream"
                         if raw is not None else "application/json")
        if digest:
            self.send_header("X-Content-SHA256", digest)
        self.send_header("Content-Length", str(len(b)))
        self.end_headers()
        self.wfile.write(b)

    def do_POST(self):
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
            if mode() == "drop":
                # Deleted servers' workspaces, and names the agent did
                # not list: those must be left alone.
                return self.reply(200, dict(node, stop=[], drop=[
                    "srv_gone", "srv_unlisted", "../victim",
                    "srv_gone/../../victim"]))
            return self.reply(200, dict(node, stop=[]))
        if p.endswith("/reports"):
            if body.get("state") != "running":
                ended.add(body.get("id"))
            return self.reply(200, {})
        return self.reply(200, {})

    def do_PUT(self):
        n = int(self.headers.get("Content-Length", "0"))
        data = self.rfile.read(n)
        q = urllib.parse.parse_qs(urllib.parse.urlparse(self.path).query)
        with open(d + "/puts.jsonl", "a") as f:
            f.write(json.dumps({
                "path": self.path,
                "sha256": self.headers.get("X-Content-SHA256"),
                "data": data.decode("latin-1")}) + "\n")
        return self.reply(201, {"path": q["path"][0], "size": len(data),
                                "sha256": sha(data)})

    def do_GET(self):
        u = urllib.parse.urlparse(self.path)
        p, q = u.path, urllib.parse.parse_qs(u.query)
        if "/assignments" in p:
            time.sleep(0.3)  # a short long poll
            if mode() == "bad":
                return self.reply(200, {"version": 1, "epoch": 1,
                                        "assignments": [dict(job, colour="red")]})
            todo = [j for j in (job, job2) if j["id"] not in ended][:1]
            return self.reply(200, {"version": 2, "epoch": 1,
                                    "assignments": todo})
        for what in ("inputs", "checkpoints"):
            if p.endswith("/" + what + "/file"):
                b = files[what][q["path"][0]]
                return self.reply(200, None, raw=b, digest=sha(b))
            if p.endswith("/" + what):
                if what == "inputs" and q["job"][0] == "job_2":
                    return self.reply(200, {"items": [
                        {"path": "../escape", "size": 2,
                         "sha256": sha(b"hi")}]})
                return self.reply(200, {"items": [
                    {"path": k, "size": len(v), "sha256": sha(v)}
                    for k, v in files[what].items()]})
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
: >"$tmp/puts.jsonl"
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
# "volumes": the servers' workspaces it keeps (none here), protocol 3.
[ "$hb" = '{"running":[],"volumes":[]}' ] && ok "heartbeat body is the protocol's" || bad "heartbeat body: $hb"

# --- good replies: a job runs, every body is the protocol's -----------------
echo good >"$tmp/mode"
wait_for 30 sh -c "grep -q '\"id\": \"job_1\", \"epoch\": 3, \"state\": \"succeeded\"' '$tmp/posts.jsonl'" ||
	bad "job did not end: $(tail -5 "$tmp/agent.err")"
r=$(posts /reports | grep '"job_1"' | head -1)
[ "$r" = '{"epoch":3,"exit_code":0,"id":"job_1","state":"running"}' ] &&
	ok "report running" || bad "report running: $r"
r=$(posts /reports | grep '"job_1"' | tail -1)
[ "$r" = '{"epoch":3,"exit_code":0,"id":"job_1","state":"succeeded"}' ] &&
	ok "report succeeded" || bad "report succeeded: $r"
out=$(posts /logs | jq -r 'select(.id == "job_1" and .epoch == 3 and .stream == "stdout") | .data' | tr -d '\n')
err=$(posts /logs | jq -r 'select(.id == "job_1" and .epoch == 3 and .stream == "stderr") | .data' | tr -d '\n')
[ "$out" = hickout ] && [ "$err" = err ] &&
	ok "log chunks of both streams (the input, in a subfolder with a non-ASCII name, and the checkpoint were restored)" ||
	bad "logs: stdout=$out stderr=$err"
[ -z "$(posts /logs | jq -c 'del(.id, .epoch, .stream, .offset, .data) | select(. != {})')" ] ||
	bad "log chunk fields: $(posts /logs | head -1)"
[ -z "$(posts /logs | jq -c 'select((.offset | type) != "number")')" ] ||
	bad "log chunk without its offset: $(posts /logs | head -1)"
# puts SUFFIX: the PUTs to paths with SUFFIX before the query.
puts() { jq -cS --arg s "$1" 'select(.path | split("?")[0] | endswith($s))' "$tmp/puts.jsonl"; }
a=$(puts /artifacts)
[ "$a" = "{\"data\":\"w\",\"path\":\"/v1/nodes/node_fake/artifacts?job=job_1&epoch=3&path=a.txt\",\"sha256\":\"$(printf w | sha256sum | cut -d' ' -f1)\"}" ] &&
	ok "artifact upload: streamed bytes with their SHA-256" || bad "artifact: $a"
c=$(puts /checkpoints)
[ "$c" = "{\"data\":\"ck\\n\",\"path\":\"/v1/nodes/node_fake/checkpoints?job=job_1&epoch=3&path=ck.txt\",\"sha256\":\"$(printf 'ck\n' | sha256sum | cut -d' ' -f1)\"}" ] &&
	ok "checkpoint upload" || bad "checkpoint: $c"
posts /heartbeat | grep -q '{"running":\[{"epoch":3,"id":"job_1"}\],"volumes":\[\]}' &&
	ok "heartbeat lists the running job" || bad "heartbeats: $(posts /heartbeat | sort -u)"
# The second job's inputs list names a path out of its folder: refused
# by the decoder, and the job fails with the reason instead of running
# without its inputs.
wait_for 30 sh -c "grep -q '\"id\": \"job_2\", \"epoch\": 3, \"state\": \"failed\"' '$tmp/posts.jsonl'" &&
	undecoded 'items\[0\].path' && grep 'reply does not decode' "$tmp/agent.err" | grep -q 'what=inputs' &&
	posts /reports | grep '"job_2"' | grep -q 'inputs' &&
	ok "bad inputs reply: logged, naming the field; the job failed saying so" ||
	bad "inputs: $(grep -i decode "$tmp/agent.err" | tail -3) $(posts /reports | grep job_2)"
[ ! -e "$tmp/escape" ] && [ ! -e "$tmp/agent/escape" ] && [ ! -e "$tmp/agent/jobs/escape" ] ||
	bad "a file was written out of the job's folder"
[ "$(grep -c 'workload started' "$tmp/agent.err")" = 1 ] &&
	ok "started once" || bad "starts: $(grep 'workload started' "$tmp/agent.err")"

# --- workspaces of deleted servers ("drop", protocol 3) ---------------------
# The agent lists the workspaces it keeps; it removes those the reply
# drops, and nothing it did not list (a name out of its folder included).
ws=$tmp/agent/workspaces
mkdir -p "$ws/srv_gone" "$ws/srv_kept" "$tmp/agent/victim"
echo x >"$ws/srv_gone/f"
echo x >"$ws/srv_kept/f"
echo x >"$tmp/agent/victim/f"
echo x >"$tmp/agent/volumes/srv_gone.img"
: >"$tmp/posts.jsonl"
wait_for 10 sh -c "grep -q srv_kept '$tmp/posts.jsonl'"
hb=$(posts /heartbeat | tail -1)
[ "$(echo "$hb" | jq -c '.volumes | sort')" = '["srv_gone","srv_kept"]' ] &&
	ok "the heartbeat lists the servers' workspaces it keeps" || bad "heartbeat volumes: $hb"
echo drop >"$tmp/mode"
wait_for 10 sh -c "[ ! -e '$ws/srv_gone' ]"
[ ! -e "$ws/srv_gone" ] && [ ! -e "$tmp/agent/volumes/srv_gone.img" ] &&
	ok "a dropped workspace goes: folder and image" || bad "srv_gone: $(ls -la "$ws" "$tmp/agent/volumes")"
[ -f "$ws/srv_kept/f" ] && [ -f "$tmp/agent/victim/f" ] &&
	ok "nothing it did not list goes (srv_kept, ../victim)" || bad "removed too much: $(ls -la "$ws" "$tmp/agent")"

kill -TERM "$apid" 2>/dev/null
wait "$apid" 2>/dev/null
echo "$fails failure(s)"
[ "$fails" = 0 ]
