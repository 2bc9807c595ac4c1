#!/usr/bin/env bash
# cli.sh - the cnlab binary against a real cnlabd: help and usage errors,
# login (password on stdin, API token, OIDC ID token), the config file's 0600 mode, the
# not-logged-in error, profiles, servers (create/list/open/stop/start), run
# (inline script, live output, artifacts, exit code, priority and deadline),
# Ctrl-C detaching, jobs, quota (shown and enforced), project isolation,
# project mark, burst policy and cloud accounts, nodes and audit for
# admins only, and bash completion sourced and asked.
#
# No node agent exists yet, so this script plays one over HTTP (a node
# registered by a user with the "agent" role): it takes assignments, runs
# a job's command with sh in a scratch folder, posts its output and
# artifacts, and reports its exit status; a server is reported running
# with a URL.
set -u
cnlab=$(realpath "$1")
cnlabd=$(realpath "$2")
tmp=$(mktemp -d)
pid=
agent_pid=
cleanup() {
	[ -n "$agent_pid" ] && kill "$agent_pid" 2>/dev/null
	[ -n "$pid" ] && kill "$pid" 2>/dev/null
	wait 2>/dev/null
	[ -n "${KEEP_TMP:-}" ] && echo "kept $tmp" || rm -rf "$tmp"
}
trap cleanup EXIT
fails=0
ok() { echo "ok   $1"; }
bad() {
	echo "FAIL $1"
	fails=$((fails + 1))
}
# check NAME COMMAND...: ok when the command succeeds.
check() {
	local name=$1
	shift
	if "$@"; then ok "$name"; else bad "$name"; fi
}

export CNLAB_JWT_SECRET=integration-test-secret-0123456789abcdef
export CNLAB_ADMIN_PASSWORD=hunter2-but-longer
export CNLAB_NODE_LOST_TIMEOUT=1h
export HOME=$tmp/home XDG_CONFIG_HOME=$tmp/xdg
unset CNLAB_SERVER CNLAB_TOKEN CNLAB_CONFIG DISPLAY WAYLAND_DISPLAY
mkdir -p "$HOME"

# An OIDC identity provider of our own: an RSA key, its JWKS, ID tokens.
b64url() { openssl base64 -A | tr '+/' '-_' | tr -d '='; }
openssl genrsa -out "$tmp/idp.pem" 2048 2>/dev/null
n=$(openssl rsa -in "$tmp/idp.pem" -noout -modulus 2>/dev/null | cut -d= -f2 |
	xxd -r -p | b64url)
printf '{"keys":[{"kty":"RSA","kid":"k1","use":"sig","alg":"RS256","n":"%s","e":"AQAB"}]}' \
	"$n" >"$tmp/jwks.json"
cat >"$tmp/oidc.conf" <<CONF
oidc_issuer = https://idp.example
oidc_audience = cnlab-cli
oidc_jwks_file = $tmp/jwks.json
CONF
idtoken() { # idtoken USER [ISSUER]
	local h p s now
	now=$(date +%s)
	h=$(printf '{"alg":"RS256","kid":"k1","typ":"JWT"}' | b64url)
	p=$(printf '{"iss":"%s","aud":"cnlab-cli","sub":"u-%s","preferred_username":"%s","iat":%d,"exp":%d}' \
		"${2:-https://idp.example}" "$1" "$1" "$now" $((now + 600)) | b64url)
	s=$(printf '%s.%s' "$h" "$p" | openssl dgst -sha256 -sign "$tmp/idp.pem" -binary | b64url)
	printf '%s.%s.%s' "$h" "$p" "$s"
}

"$cnlabd" --data-dir "$tmp/d" --listen 127.0.0.1:0 --bootstrap-admin root \
	--config "$tmp/oidc.conf" >"$tmp/out" 2>"$tmp/err" &
pid=$!
port=
for _ in $(seq 100); do
	port=$(sed -n 's/^listening on 127\.0\.0\.1:\([0-9][0-9]*\)$/\1/p' "$tmp/out")
	[ -n "$port" ] && break
	sleep 0.05
done
[ -n "$port" ] || { echo "FAIL cnlabd did not start: $(cat "$tmp/err")"; exit 1; }
base=http://127.0.0.1:$port
# Notebooks are served on an origin of their own (notebook_listen).
nbase=http://$(sed -n 's/^notebooks on \(127\.0\.0\.1:[0-9][0-9]*\)$/\1/p' "$tmp/out")

# api TOKEN METHOD PATH [BODY]: curl the API, print the body.
api() {
	curl -sS -X "$2" -H "Authorization: Bearer $1" ${4:+-d "$4"} "$base$3"
}
login_api() {
	curl -sS -X POST -d "{\"user\":\"$1\",\"password\":\"$2\"}" \
		"$base/v1/auth/login" | jq -r .token
}

# --- Set-up as the administrator, over plain HTTP --------------------------
root=$(login_api root hunter2-but-longer)
for u in alice bob agent; do
	api "$root" POST /v1/users "{\"name\":\"$u\",\"password\":\"pw-$u-long-enough\"}" >/dev/null
done
sys=$(api "$root" GET /v1/projects | jq -r '.items[] | select(.name=="system") | .id')
ml=$(api "$root" POST /v1/projects '{"name":"ml"}' | jq -r .id)
nlp=$(api "$root" POST /v1/projects '{"name":"nlp"}' | jq -r .id)
api "$root" POST "/v1/projects/$sys/members" '{"user":"agent","role":"agent"}' >/dev/null
api "$root" POST "/v1/projects/$ml/members" '{"user":"alice","role":"project-admin"}' >/dev/null
api "$root" POST "/v1/projects/$nlp/members" '{"user":"bob","role":"member"}' >/dev/null
# The node joins with a join token and acts with the credential it gets.
jt=$(api "$root" POST /v1/nodes/join-tokens '{"node":"n1"}' | jq -r .token)
reg=$(api "$jt" POST /v1/nodes '{"protocol":5,"name":"n1","gpu_type":"H100-80GB-SXM","gpus":2,"cpu_milli":64000,"mem_mib":512000}')
node=$(jq -r .id <<<"$reg")
agent=$(jq -r .credential <<<"$reg")
[ -n "$node" ] && [ "$node" != null ] && ok setup || bad "setup: node $node"
# An A100 node, cordoned: work for it is admitted (the node exists) and
# waits (the Ctrl-C tests below hold such a job).
jt2=$(api "$root" POST /v1/nodes/join-tokens '{"node":"n2"}' | jq -r .token)
api "$jt2" POST /v1/nodes '{"protocol":5,"name":"n2","gpu_type":"A100-80GB","gpus":1,"cpu_milli":8000,"mem_mib":65536}' >/dev/null
api "$root" PATCH /v1/nodes/n2 '{"state":"cordoned"}' >/dev/null

# --- The fake agent ----------------------------------------------------------
# One pass over the node's assignments; each (id, epoch, action) once.
agent_step() {
	local as line id kind ep action cmd dir rc st
	as=$(api "$agent" GET "/v1/nodes/$node/assignments") || return
	jq -c '.assignments[]' <<<"$as" 2>/dev/null | while read -r line; do
		id=$(jq -r .id <<<"$line")
		kind=$(jq -r .kind <<<"$line")
		ep=$(jq -r .epoch <<<"$line")
		action=$(jq -r .action <<<"$line")
		grep -qx "$id $ep $action" "$tmp/handled" 2>/dev/null && continue
		echo "$id $ep $action" >>"$tmp/handled"
		if [ "$action" = stop ]; then
			api "$agent" POST "/v1/nodes/$node/reports" \
				"{\"id\":\"$id\",\"epoch\":$ep,\"state\":\"stopped\"}" >/dev/null
			continue
		fi
		if [ "$kind" = server ]; then
			api "$agent" POST "/v1/nodes/$node/reports" \
				"{\"id\":\"$id\",\"epoch\":$ep,\"state\":\"running\",\"url\":\"http://127.0.0.1:9/?token=tok-$id\"}" >/dev/null
			continue
		fi
		cmd=$(jq -r .command <<<"$line")
		# Jobs on the hold list wait (the Ctrl-C test).
		grep -q "hold-me" <<<"$cmd" && continue
		api "$agent" POST "/v1/nodes/$node/reports" \
			"{\"id\":\"$id\",\"epoch\":$ep,\"state\":\"running\"}" >/dev/null
		# Live output: the second chunk goes only once the CLI has
		# printed the first, while the job still runs.
		if grep -q "live-me" <<<"$cmd"; then
			api "$agent" POST "/v1/nodes/$node/logs" \
				"{\"id\":\"$id\",\"epoch\":$ep,\"stream\":\"stdout\",\"data\":\"first\\n\"}" >/dev/null
			for _ in $(seq 200); do
				grep -q first "$tmp/live.out" 2>/dev/null && { echo yes >"$tmp/live.seen"; break; }
				sleep 0.05
			done
			api "$agent" POST "/v1/nodes/$node/logs" \
				"{\"id\":\"$id\",\"epoch\":$ep,\"stream\":\"stdout\",\"data\":\"second\\n\"}" >/dev/null
			api "$agent" POST "/v1/nodes/$node/reports" \
				"{\"id\":\"$id\",\"epoch\":$ep,\"state\":\"succeeded\",\"exit_code\":0}" >/dev/null
			continue
		fi
		dir=$tmp/work/$id
		mkdir -p "$dir/art"
		# The job's input files (a script sent by cnlab run), as the
		# real agent writes them into the working directory: the list,
		# then each file streamed, checked against its SHA-256.
		api "$agent" GET "/v1/nodes/$node/inputs?job=$id&epoch=$ep" |
			jq -r '.items[] | "\(.sha256) \(.path)"' |
			while read -r fsha fname; do
				curl -sS -H "Authorization: Bearer $agent" -o "$dir/$fname" \
					"$base/v1/nodes/$node/inputs/file?job=$id&epoch=$ep&path=$(jq -rn --arg p "$fname" '$p|@uri')"
				[ "$(sha256sum <"$dir/$fname" | cut -d' ' -f1)" = "$fsha" ] ||
					echo "input $fname damaged" >>"$tmp/agent.problems"
			done
		(cd "$dir" && CNLAB_ARTIFACTS_DIR=$dir/art sh -c "$cmd" \
			>"$dir/.stdout" 2>"$dir/.stderr")
		rc=$?
		for st in stdout stderr; do
			[ -s "$dir/.$st" ] || continue
			jq -n --arg id "$id" --argjson ep "$ep" --arg st "$st" \
				--rawfile d "$dir/.$st" \
				'{id:$id,epoch:$ep,stream:$st,data:$d}' >"$dir/.body"
			api "$agent" POST "/v1/nodes/$node/logs" "@$dir/.body" >/dev/null
		done
		for f in "$dir"/art/*; do
			[ -f "$f" ] || continue
			curl -sS -o /dev/null -X PUT -H "Authorization: Bearer $agent" \
				-H "X-Content-SHA256: $(sha256sum <"$f" | cut -d' ' -f1)" \
				--data-binary @"$f" \
				"$base/v1/nodes/$node/artifacts?job=$id&epoch=$ep&path=$(jq -rn --arg p "$(basename "$f")" '$p|@uri')"
		done
		if [ "$rc" = 0 ]; then st=succeeded; else st=failed; fi
		api "$agent" POST "/v1/nodes/$node/reports" \
			"{\"id\":\"$id\",\"epoch\":$ep,\"state\":\"$st\",\"exit_code\":$rc}" >/dev/null
	done
}
(while :; do agent_step; sleep 0.2; done) >/dev/null 2>&1 &
agent_pid=$!

# --- Help and usage -----------------------------------------------------------
out=$("$cnlab" --help)
check help-lists-commands grep -q 'server create' <<<"$out"
out=$("$cnlab" server create --help)
check help-subcommand grep -q -- '--storage SIZE' <<<"$out"
"$cnlab" bogus >/dev/null 2>&1
check unknown-command-exit-2 [ $? = 2 ]
out=$("$cnlab" server bogus 2>&1)
[ $? = 2 ] && grep -q "unknown command 'server bogus'" <<<"$out" &&
	ok unknown-subcommand-exit-2 || bad "unknown-subcommand-exit-2: $out"
"$cnlab" server >/dev/null 2>"$tmp/group.err"
[ $? = 2 ] && grep -q 'server stop NAME' "$tmp/group.err" && ok group-alone-help ||
	bad group-alone-help
"$cnlab" run >/dev/null 2>&1
check run-needs-script-exit-2 [ $? = 2 ]
"$cnlab" profiles list --colour >/dev/null 2>&1
check unknown-flag-exit-2 [ $? = 2 ]

# --- Not logged in, login, config file ---------------------------------------
out=$("$cnlab" --server "$base" profiles list 2>&1)
rc=$?
[ $rc = 3 ] && grep -q 'not logged in: run cnlab login' <<<"$out" &&
	ok not-logged-in || bad "not-logged-in: rc=$rc $out"

cfg=$XDG_CONFIG_HOME/cnlab/config.json
out=$(echo pw-alice-long-enough | "$cnlab" login --server "$base" --user alice --password-stdin 2>&1)
rc=$?
[ $rc = 0 ] && grep -q '✓ Logged in' <<<"$out" && ok login-password-stdin ||
	bad "login-password-stdin: rc=$rc $out"
check config-mode-0600 [ "$(stat -c %a "$cfg")" = 600 ]
check config-default-project [ "$(jq -r .project "$cfg")" = ml ]
check config-server [ "$(jq -r .server "$cfg")" = "$base" ]
chmod 644 "$cfg"
out=$("$cnlab" whoami 2>&1)
grep -q 'mode is now 0600' <<<"$out" && [ "$(stat -c %a "$cfg")" = 600 ] &&
	ok config-mode-tightened || bad "config-mode-tightened: $out"
check whoami grep -q 'User:     alice' <<<"$out"

out=$(echo wrong-password | CNLAB_CONFIG=$tmp/wrong.json "$cnlab" login --server "$base" --user alice 2>&1)
rc=$?
[ $rc = 3 ] && grep -q 'refused these credentials' <<<"$out" &&
	ok login-wrong-password || bad "login-wrong-password: rc=$rc $out"

# bob, in his own config, logs in with a password piped (stdin not a tty).
bobcfg=$tmp/bob.json
echo pw-bob-long-enough | CNLAB_CONFIG=$bobcfg "$cnlab" login --server "$base" --user bob >/dev/null 2>&1
check login-stdin-not-tty [ "$(jq -r .project "$bobcfg")" = nlp ]
bob() { CNLAB_CONFIG=$bobcfg "$cnlab" "$@"; }
rootcfg=$tmp/root.json
echo hunter2-but-longer | CNLAB_CONFIG=$rootcfg "$cnlab" login --server "$base" --user root --password-stdin >/dev/null 2>&1
admin() { CNLAB_CONFIG=$rootcfg "$cnlab" "$@"; }

# An API token stored with --token.
alice_jwt=$(jq -r .token "$cfg")
apitok=$(api "$alice_jwt" POST /v1/auth/tokens '{"name":"cli","expires_in_days":1}' | jq -r .token)
CNLAB_CONFIG=$tmp/tok.json "$cnlab" login --server "$base" --token "$apitok" >/dev/null 2>&1 &&
	out=$(CNLAB_CONFIG=$tmp/tok.json "$cnlab" whoami) &&
	grep -q 'alice' <<<"$out" && [ "$(jq -r .token "$tmp/tok.json")" = "$apitok" ] &&
	ok login-api-token || bad "login-api-token: $out"
CNLAB_CONFIG=$tmp/tok2.json "$cnlab" login --server "$base" --token cnl_bogus >/dev/null 2>&1
check login-bad-token-exit-3 [ $? = 3 ]
# OIDC: an ID token from the provider the server trusts, for a user an
# administrator linked to its subject, is exchanged for a session.
admin user link alice --oidc-subject u-alice >/dev/null 2>&1 || bad user-link-alice
CNLAB_CONFIG=$tmp/oidc.json "$cnlab" login --server "$base" --id-token "$(idtoken alice)" >/dev/null 2>&1 &&
	out=$(CNLAB_CONFIG=$tmp/oidc.json "$cnlab" whoami) && grep -q 'User:     alice' <<<"$out" &&
	ok login-oidc-id-token || bad "login-oidc-id-token: $out"
CNLAB_CONFIG=$tmp/oidc2.json "$cnlab" login --server "$base" \
	--id-token "$(idtoken alice https://evil.example)" >/dev/null 2>&1
rc=$?
[ $rc = 3 ] && [ ! -e "$tmp/oidc2.json" ] && ok login-oidc-wrong-issuer-exit-3 ||
	bad "login-oidc-wrong-issuer-exit-3: rc=$rc"

# --- The stored token goes to its own server only --------------------------------
# Another --server (a typo, a look-alike) gets no credential of ours.
python3 - "$tmp/other.port" "$tmp/other.headers" <<'PY' &
import http.server, sys
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        with open(sys.argv[2], "a") as f:
            f.write("Authorization: %s\n" % self.headers.get("Authorization", "-"))
        body = b'{"error":{"code":"unauthenticated","message":"who are you"}}'
        self.send_response(401)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *a):
        pass
s = http.server.HTTPServer(("127.0.0.1", 0), H)
open(sys.argv[1], "w").write(str(s.server_port))
s.timeout = 30
s.handle_request()
PY
other_pid=$!
for _ in $(seq 50); do [ -s "$tmp/other.port" ] && break; sleep 0.1; done
out=$("$cnlab" --server "http://127.0.0.1:$(cat "$tmp/other.port")" profiles list 2>&1)
rc=$?
wait "$other_pid" 2>/dev/null
[ $rc = 3 ] && grep -qx 'Authorization: -' "$tmp/other.headers" 2>/dev/null ||
	{ [ $rc = 3 ] && [ ! -s "$tmp/other.headers" ]; } &&
	ok "another --server gets no stored token (not logged in there)" ||
	bad "token to another server: rc=$rc $out $(cat "$tmp/other.headers" 2>&1)"
"$cnlab" --server "$base/" profiles list >/dev/null 2>&1 &&
	ok "the stored server with a trailing / still gets it" || bad "trailing slash"

# --- Profiles -----------------------------------------------------------------
out=$("$cnlab" profiles list)
head -1 <<<"$out" | grep -Eq '^NAME +GPU +SLICE +AVAILABLE$' &&
	grep -Eq '^h100-25pct +H100 +25% +✓ now$' <<<"$out" &&
	ok profiles-table || bad "profiles-table: $out"
n=$("$cnlab" profiles list -o json | jq '.items | length')
check profiles-json [ "$n" = 4 ]
"$cnlab" profiles list --output yaml >/dev/null 2>&1
check output-bad-format-exit-2 [ $? = 2 ]

# --- Images ---------------------------------------------------------------------
# The seeds' image name is whatever the site imports under it.
out=$("$cnlab" server create --name first-experiment --image pytorch:2.4-cuda12.4 \
	--profile h100-25pct --no-wait 2>&1)
rc=$?
[ $rc = 2 ] && grep -q 'no image "pytorch:2.4-cuda12.4" on this platform; there are: host' <<<"$out" &&
	ok image-unknown-refused || bad "image-unknown-refused: rc=$rc $out"
"$(dirname "$0")/../../scripts/build-image" busybox "$tmp/img.tar" >/dev/null || bad "build-image"
out=$("$cnlab" image import "$tmp/img.tar" --name pytorch:2.4-cuda12.4 2>&1)
rc=$?
[ $rc = 5 ] && grep -q 'not permitted' <<<"$out" &&
	ok image-import-admin-only || bad "image-import-admin-only: rc=$rc $out"
out=$(admin image import "$tmp/img.tar" --name pytorch:2.4-cuda12.4 2>&1)
grep -Eq '^✓ Imported pytorch:2.4-cuda12.4 \(1\.[0-9] MB, 1 layer, sha256:[0-9a-f]{12}…\)$' <<<"$out" &&
	ok image-import || bad "image-import: $out"
admin image import "$tmp/img.tar" >/dev/null 2>&1
check image-import-needs-name-exit-2 [ $? = 2 ]
admin image import "$tmp/nosuchfile.tar" --name x:1 >/dev/null 2>&1
check image-import-missing-file-exit-2 [ $? = 2 ]
head -c 3000 "$tmp/img.tar" >"$tmp/cut.tar"
out=$(admin image import "$tmp/cut.tar" --name cut:1 2>&1)
grep -q 'truncated' <<<"$out" && ! admin image list | grep -q '^cut:1' &&
	ok image-import-truncated-refused || bad "image-import-truncated-refused: $out"
out=$("$cnlab" image list)
head -1 <<<"$out" | grep -Eq '^NAME +SIZE +DIGEST +IMPORTED$' &&
	grep -Eq '^pytorch:2.4-cuda12.4 +1\.[0-9] MB +sha256:[0-9a-f]{12} +[0-9-]{10} by root$' <<<"$out" &&
	grep -Eq '^host +- +built in +-$' <<<"$out" &&
	ok image-list || bad "image-list: $out"

# --- Servers --------------------------------------------------------------------
out=$("$cnlab" server create --name first-experiment --image pytorch:2.4-cuda12.4 \
	--profile h100-25pct --storage 50gb --idle 2h 2>"$tmp/create.err")
rc=$?
[ $rc = 0 ] && grep -q "^✓ Ready: $nbase/s/srv_.*/?token=tok-srv_" <<<"$out" &&
	grep -q '✓ Provisioning' "$tmp/create.err" &&
	ok server-create || bad "server-create: rc=$rc $out $(cat "$tmp/create.err")"
srv=$(api "$alice_jwt" GET "/v1/projects/$ml/servers" | jq -c '.items[0]')
[ "$(jq -r .storage_gb <<<"$srv")" = 50 ] && [ "$(jq -r .idle_timeout_s <<<"$srv")" = 7200 ] &&
	ok server-create-sizes || bad "server-create-sizes: $srv"
srvid=$(jq -r .id <<<"$srv")
out=$("$cnlab" server list)
grep -Eq '^first-experiment +running +h100-25pct +50 GB +pytorch:2.4-cuda12.4 +'"$nbase/s/srv_" <<<"$out" &&
	ok server-list || bad "server-list: $out"
check server-list-json [ "$("$cnlab" server list -o json | jq -r '.items[0].name')" = first-experiment ]
out=$("$cnlab" server open first-experiment)
# Users get cnlabd's proxy, never the node's address.
check server-open [ "$out" = "$nbase/s/$srvid/?token=tok-$srvid" ]
"$cnlab" server create --name x --image i --profile h100-25pct --storage lots >/dev/null 2>&1
check server-create-bad-storage-exit-2 [ $? = 2 ]

# A second project's user can neither see nor stop it.
out=$(bob server list 2>&1)
! grep -q first-experiment <<<"$out" && ok isolation-list || bad "isolation-list: $out"
out=$(bob server stop first-experiment 2>&1)
rc=$?
[ $rc = 4 ] && grep -q 'not found' <<<"$out" && ok isolation-stop || bad "isolation-stop: rc=$rc $out"
bob --project ml server list >/dev/null 2>&1
check isolation-other-project-exit-4 [ $? = 4 ]

out=$("$cnlab" server stop first-experiment)
check server-stop grep -q '✓ Stopped first-experiment' <<<"$out"
for _ in $(seq 50); do
	st=$(api "$alice_jwt" GET "/v1/servers/$srvid" | jq -r .state)
	[ "$st" = stopped ] && break
	sleep 0.1
done
check server-stopped [ "$st" = stopped ]
out=$("$cnlab" server open first-experiment 2>&1)
check server-open-stopped-fails [ $? = 1 ]
out=$("$cnlab" server start first-experiment 2>&1)
rc=$?
[ $rc = 0 ] && grep -q "✓ Ready: $nbase/s/$srvid/" <<<"$out" &&
	ok server-start || bad "server-start: rc=$rc $out"

# --- Run ----------------------------------------------------------------------------
cat >"$tmp/train.sh" <<'SCRIPT'
echo "epoch 1 loss 0.5 args=$*"
echo "warming up" >&2
echo weights >"$CNLAB_ARTIFACTS_DIR/model.txt"
exit 3
SCRIPT
deadline=$(date -u -d '+2 days' +%Y-%m-%dT%H:%M)
(cd "$tmp" && "$cnlab" run train.sh --lr 0.1 --gpu h100-25 --priority high \
	--deadline "$deadline" >"$tmp/run.out" 2>"$tmp/run.err")
rc=$?
check run-exit-code [ $rc = 3 ]
check run-stdout grep -qx 'epoch 1 loss 0.5 args=--lr 0.1' "$tmp/run.out"
check run-stderr grep -qx 'warming up' "$tmp/run.err"
check run-queued-line grep -q '^✓ Queued job_' "$tmp/run.err"
job=$(grep -o 'job_[0-9A-Z]*' "$tmp/run.err" | head -1)
check run-artifact [ "$(cat "$tmp/artifacts/$job/model.txt" 2>/dev/null)" = weights ]
j=$(api "$alice_jwt" GET "/v1/jobs/$job")
[ "$(jq -r .priority <<<"$j")" = high ] &&
	[ "$(jq -r .deadline <<<"$j")" = "${deadline}:00.000Z" ] &&
	[ "$(jq -r .state <<<"$j")" = failed ] &&
	ok run-priority-deadline || bad "run-priority-deadline: $j"

cat >"$tmp/ok.sh" <<'SCRIPT'
echo all good
SCRIPT
"$cnlab" run "$tmp/ok.sh" --gpu h100-25pct --artifacts "$tmp/arts" >"$tmp/ok.out" 2>&1
check run-success-and-profile-name [ $? = 0 ]
check run-success-output grep -qx 'all good' "$tmp/ok.out"

"$cnlab" run "echo live-me" --gpu h100-25 >"$tmp/live.out" 2>/dev/null
rc=$?
[ $rc = 0 ] && [ "$(cat "$tmp/live.out")" = "$(printf 'first\nsecond')" ] &&
	[ -e "$tmp/live.seen" ] && ok run-streams-live || bad "run-streams-live: rc=$rc $(cat "$tmp/live.out")"

cat >"$tmp/eval.py" <<'SCRIPT'
import os, sys
print("python", sys.argv[1:], os.path.basename(__file__))
open(os.path.join(os.environ["CNLAB_ARTIFACTS_DIR"], "metrics.json"), "w").write('{"acc": 0.9}')
SCRIPT
if command -v python3 >/dev/null; then
	"$cnlab" run "$tmp/eval.py" a "b c" --gpu h100-25 --artifacts "$tmp/py" >"$tmp/py.out" 2>/dev/null
	rc=$?
	[ $rc = 0 ] && grep -qx "python \['a', 'b c'\] eval.py" "$tmp/py.out" &&
		[ "$(jq -r .acc "$tmp/py/metrics.json")" = 0.9 ] &&
		ok run-python-script || bad "run-python-script: rc=$rc $(cat "$tmp/py.out")"
fi
# A script far over the command's 1 KiB travels as a job file.
big=$tmp/big.sh
for _ in $(seq 100); do echo 'echo "a fairly long line of script text"'; done >"$big"
echo 'echo big-script-done' >>"$big"
out=$("$cnlab" run "$big" --gpu h100-25 2>/dev/null)
rc=$?
[ $rc = 0 ] && [ "$(grep -c 'a fairly long line' <<<"$out")" = 100 ] &&
	grep -q big-script-done <<<"$out" && ok run-large-script ||
	bad "run-large-script: rc=$rc $(tail -2 <<<"$out")"
# Past the old 512 KiB limit: streamed as an upload, whole (the fake
# agent checks its SHA-256).
{ echo 'echo huge-ran'; head -c 600000 /dev/zero | tr '\0' '#'; echo; } >"$tmp/huge.sh"
out=$("$cnlab" run "$tmp/huge.sh" --gpu h100-25 2>&1)
rc=$?
[ $rc = 0 ] && grep -q huge-ran <<<"$out" && [ ! -e "$tmp/agent.problems" ] &&
	ok run-script-past-old-limit ||
	bad "run-script-past-old-limit: rc=$rc $out $(cat "$tmp/agent.problems" 2>/dev/null)"

out=$("$cnlab" jobs list)
grep -Eq "^$job +failed +high +h100-25 +3 " <<<"$out" && ok jobs-list || bad "jobs-list: $out"
out=$("$cnlab" jobs logs "$job" 2>&1)
grep -q 'epoch 1 loss' <<<"$out" && grep -q 'warming up' <<<"$out" &&
	ok jobs-logs || bad "jobs-logs: $out"
check jobs-show-json [ "$("$cnlab" jobs show "$job" -o json | jq -r .id)" = "$job" ]

# Ctrl-C without a terminal detaches and says how to follow.
"$cnlab" run "echo hold-me" --gpu a100-50 >"$tmp/hold.out" 2>"$tmp/hold.err" &
cpid=$!
# The progress line comes after "Queued job_" (from the job's first
# event): interrupting before it would race the line under test below.
for _ in $(seq 400); do
	grep -q 'Queued job_' "$tmp/hold.err" &&
		grep -q '^✓ Queued\.\.\. ' "$tmp/hold.err" && break
	sleep 0.05
done
kill -INT $cpid
wait $cpid
rc=$?
[ $rc = 0 ] && grep -q 'cnlab jobs logs --follow job_' "$tmp/hold.err" &&
	ok run-ctrl-c-detaches || bad "run-ctrl-c-detaches: rc=$rc $(cat "$tmp/hold.err")"
check run-progress-eta grep -q '^✓ Queued\.\.\. ETA ' "$tmp/hold.err"
hold=$(grep -o 'job_[0-9A-Z]*' "$tmp/hold.err" | head -1)
"$cnlab" jobs cancel "$hold" >/dev/null
check jobs-cancel [ "$(api "$alice_jwt" GET "/v1/jobs/$hold" | jq -r .state)" = cancelled ]

# On a terminal (a pty from script(1)), Ctrl-C asks; "c" cancels the job.
if command -v script >/dev/null; then
	mkfifo "$tmp/tty.in"
	script -qefc "'$cnlab' run 'echo hold-me' --gpu a100-50" /dev/null \
		<"$tmp/tty.in" >"$tmp/tty.out" 2>&1 &
	spid=$!
	exec 7>"$tmp/tty.in"
	for _ in $(seq 200); do
		grep -q 'Queued job_' "$tmp/tty.out" && break
		sleep 0.05
	done
	printf '\003' >&7
	for _ in $(seq 200); do
		grep -q 'cancel the job or detach? \[c/d\]' "$tmp/tty.out" && break
		sleep 0.05
	done
	printf 'c\n' >&7
	wait $spid
	rc=$?
	exec 7>&-
	tj=$(grep -o 'job_[0-9A-Z]*' "$tmp/tty.out" | head -1)
	[ $rc = 130 ] && grep -q "✓ Cancelling $tj" "$tmp/tty.out" &&
		[ "$(api "$alice_jwt" GET "/v1/jobs/$tj" | jq -r .state)" = cancelled ] &&
		ok run-ctrl-c-cancel-on-tty || bad "run-ctrl-c-cancel-on-tty: rc=$rc $(cat "$tmp/tty.out")"
fi
bob jobs cancel "$job" >/dev/null 2>&1
check jobs-cancel-other-project-exit-4 [ $? = 4 ]

# --- Quota ----------------------------------------------------------------------------
api "$root" PUT "/v1/projects/$ml/quota" \
	'{"gpu_hours":1000,"storage_gb_days":5000,"concurrent_servers":5}' >/dev/null
out=$("$cnlab" quota show)
grep -qx 'Project: ml' <<<"$out" &&
	grep -Eq '^  GPU-hours used: +[0-9.,]+ / 1,000 \([0-9]+%\)$' <<<"$out" &&
	grep -Eq '^  Storage GB-days: +[0-9.,]+ / 5,000 \([0-9]+%\)$' <<<"$out" &&
	grep -Eq '^  Concurrent srvs: +1 / 5$' <<<"$out" &&
	grep -Eq '^  GPU-hours used: +[0-9.,]+ / unlimited$' <<<"$out" &&
	ok quota-show || bad "quota-show: $out"
check quota-json [ "$("$cnlab" quota show -o json | jq -r '.projects[0].gpu_hours.limit')" = 1000 ]
api "$root" PUT "/v1/projects/$ml/quota" '{"gpu_hours":0}' >/dev/null
out=$("$cnlab" run "$tmp/ok.sh" --gpu h100-25 2>&1)
rc=$?
[ $rc = 5 ] && grep -q 'quota exceeded' <<<"$out" && grep -q 'GPU-hours' <<<"$out" &&
	ok quota-refused || bad "quota-refused: rc=$rc $out"

# --- Project, policy, cloud --------------------------------------------------------------
out=$("$cnlab" project mark ml --on-prem-only)
[ $? = 0 ] && [ "$(api "$alice_jwt" GET "/v1/projects/$ml" | jq -r .on_prem_only)" = true ] &&
	ok project-mark || bad "project-mark: $out"
"$cnlab" project mark ml --no-on-prem-only >/dev/null
check project-unmark [ "$(api "$alice_jwt" GET "/v1/projects/$ml" | jq -r .on_prem_only)" = false ]
bob project mark ml --on-prem-only >/dev/null 2>&1
check project-mark-other-exit-4 [ $? = 4 ]
"$cnlab" project mark ml >/dev/null 2>&1
check project-mark-needs-flag-exit-2 [ $? = 2 ]

admin cloud add aws --account 123456789012 --region ap-northeast-2 \
	--instance-types g5.xlarge,g5.2xlarge,p5.48xlarge >"$tmp/cloud.out" 2>&1
check cloud-add [ $? = 0 ]
[ "$(api "$root" GET /v1/cloud/accounts | jq -c '.items[0].instance_types')" = '["g5.xlarge","g5.2xlarge","p5.48xlarge"]' ] &&
	ok cloud-add-types || bad cloud-add-types
admin policy burst --threshold 0.90 --provider aws --strategy spot-then-on-demand \
	--max-cloud-budget 50000 >"$tmp/burst.out" 2>&1
p=$(api "$root" GET /v1/policy/burst)
[ "$(jq -r '.provider + " " + .strategy + " " + (.threshold|tostring) + " " + (.max_cloud_budget|tostring)' <<<"$p")" = \
	"aws spot-then-on-demand 0.9 50000" ] && ok policy-burst || bad "policy-burst: $p $(cat "$tmp/burst.out")"
"$cnlab" policy burst --threshold 0.5 --provider aws --strategy x --max-cloud-budget 1 >/dev/null 2>&1
check policy-burst-member-exit-5 [ $? = 5 ]

# --- Administrators only ------------------------------------------------------------------
out=$(admin nodes list)
grep -Eq '^n1 +H100-80GB-SXM +2 +up ' <<<"$out" && ok nodes-list || bad "nodes-list: $out"
"$cnlab" nodes list >/dev/null 2>&1
check nodes-list-member-exit-5 [ $? = 5 ]
out=$(admin audit --limit 1000)
grep -q 'job.create' <<<"$out" && grep -q 'server.stop' <<<"$out" &&
	ok audit || bad "audit: $out"
"$cnlab" audit >/dev/null 2>&1
check audit-member-exit-5 [ $? = 5 ]

# --- Bash completion, sourced and asked ---------------------------------------------------
mkdir -p "$tmp/bin"
ln -s "$cnlab" "$tmp/bin/cnlab"
"$cnlab" completion bash >"$tmp/cnlab.bash"
# complete WORDS...: COMPREPLY for the last word, space-separated, sorted.
complete_words() {
	PATH=$tmp/bin:$PATH bash -c '
		source "$1"; shift
		COMP_WORDS=("$@"); COMP_CWORD=$(($# - 1))
		_cnlab
		printf "%s\n" "${COMPREPLY[@]}" | sort | tr "\n" " "' _ "$tmp/cnlab.bash" "$@"
}
check complete-pro [ "$(complete_words cnlab pro)" = "profile profiles project " ]
check complete-server-st [ "$(complete_words cnlab server st)" = "start stop " ]
out=$(complete_words cnlab run train.py --gpu "")
grep -q 'h100-25pct' <<<"$out" && grep -q 'h100-25 ' <<<"$out" &&
	ok complete-gpu-from-server || bad "complete-gpu-from-server: $out"
out=$(complete_words cnlab server create --profile h1)
check complete-profile-from-server [ "$out" = "h100-25pct h100-full " ]
out=$(complete_words cnlab server create --pro)
check complete-flags [ "$out" = "--profile --project " ]
check complete-priority [ "$(complete_words cnlab run x --priority h)" = "high " ]
check complete-shell [ "$(complete_words cnlab completion z)" = "zsh " ]
"$cnlab" completion fish | grep -q "complete -c cnlab" &&
	"$cnlab" completion zsh | grep -q '^#compdef cnlab' && ok completion-other-shells ||
	bad completion-other-shells
if command -v zsh >/dev/null; then
	"$cnlab" completion zsh | zsh -n && ok zsh-syntax || bad zsh-syntax
else
	bad "zsh missing (scripts/bootstrap installs it)"
fi
# fish answers completions non-interactively: complete -C "LINE".
fish_words() {
	"$cnlab" completion fish >"$tmp/cnlab.fish"
	PATH=$tmp/bin:$PATH fish -c "source $tmp/cnlab.fish; complete -C '$1'" |
		cut -f1 | sort | tr '\n' ' '
}
if command -v fish >/dev/null; then
	check fish-complete-pro [ "$(fish_words 'cnlab pro')" = "profile profiles project " ]
	check fish-complete-server-st [ "$(fish_words 'cnlab server st')" = "start stop " ]
	check fish-complete-profile-from-server \
		[ "$(fish_words 'cnlab server create --profile h1')" = "h100-25pct h100-full " ]
else
	bad "fish missing (scripts/bootstrap installs it)"
fi

# --- A reply that is not a valid document -----------------------------------------
# A server whose job documents do not decode (a field cnlab does not know,
# a number of the wrong type): cnlab says which field, exits 1, no crash.
if command -v python3 >/dev/null; then
	cat >"$tmp/badsrv.py" <<'PY'
import http.server, json, sys
job = {"id": "job_x", "project_id": "prj_x", "user_id": "usr_x",
       "command": "true", "profile": "", "gpu": "h100-25",
       "priority": "normal", "state": "pending", "exit_code": 0,
       "deadline": None, "runtime_s": 0,
       "created_at": "2026-04-30T17:00:00.000Z",
       "updated_at": "2026-04-30T17:00:00.000Z",
       "status": {"phase": "pending", "epoch": 1, "eta": 5},
       "preemptible": True, "nodes": 1}
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        doc = dict(job)
        if self.path.endswith("job_type"):
            doc["exit_code"] = "0"
            doc.pop("status")
        b = json.dumps(doc).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(b)))
        self.end_headers()
        self.wfile.write(b)
    def log_message(self, *a):
        pass
s = http.server.HTTPServer(("127.0.0.1", 0), H)
open(sys.argv[1], "w").write(str(s.server_port))
s.serve_forever()
PY
	python3 "$tmp/badsrv.py" "$tmp/badsrv.port" &
	bad_pid=$!
	for _ in $(seq 100); do
		[ -s "$tmp/badsrv.port" ] && break
		sleep 0.05
	done
	badcli() {
		CNLAB_CONFIG=$tmp/badsrv.json CNLAB_SERVER="http://127.0.0.1:$(cat "$tmp/badsrv.port")" \
			CNLAB_TOKEN=cnl_x "$cnlab" "$@"
	}
	out=$(badcli jobs show job_x 2>&1)
	rc=$?
	[ $rc = 1 ] && grep -q 'field "status.eta": unknown field' <<<"$out" &&
		ok bad-reply-unknown-field || bad "bad-reply-unknown-field: rc=$rc $out"
	out=$(badcli jobs show job_type 2>&1)
	rc=$?
	[ $rc = 1 ] && grep -q 'field "exit_code"' <<<"$out" &&
		ok bad-reply-wrong-type || bad "bad-reply-wrong-type: rc=$rc $out"
	kill "$bad_pid" 2>/dev/null
	wait "$bad_pid" 2>/dev/null
fi

# --- Logout ------------------------------------------------------------------------------
last_jwt=$(jq -r .token "$cfg")
"$cnlab" logout >/dev/null 2>&1
"$cnlab" profiles list >/dev/null 2>&1
rc=$?
[ $rc = 3 ] && [ "$(jq -r .token "$cfg")" = null ] && ok logout || bad "logout: rc=$rc"
# The session ended on the server too: the old token replayed is 401.
code=$(curl -sS -o /dev/null -w '%{http_code}' -H "Authorization: Bearer $last_jwt" "$base/v1/auth/whoami")
[ "$code" = 401 ] && ok logout-ends-session || bad "logout-ends-session: $code"

echo "$fails failure(s)"
[ "$fails" = 0 ]
