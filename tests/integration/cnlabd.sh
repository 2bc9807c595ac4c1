#!/usr/bin/env bash
# cnlabd.sh - the cnlabd binary end to end: --help, refusal to start without
# a JWT secret (or with a short one), start on port 0 with --bootstrap-admin
# and the "listening on" line, /healthz and a login over real HTTP, a
# restart on the same data directory, and a clean exit on SIGTERM; the
# config file and environment overrides; HTTPS with a certificate made
# here; API tokens; and OIDC ID tokens signed here with a fresh RSA key,
# verified against a JWKS file.
set -u
cnlabd=$1
tmp=$(mktemp -d)
pid=
cleanup() {
	[ -n "$pid" ] && kill "$pid" 2>/dev/null
	rm -rf "$tmp"
}
trap cleanup EXIT
fails=0
ok() { echo "ok   $1"; }
bad() {
	echo "FAIL $1"
	fails=$((fails + 1))
}

"$cnlabd" --help | grep -q -- '--bootstrap-admin' && ok help || bad help

out=$(env -u CNLAB_JWT_SECRET "$cnlabd" --data-dir "$tmp/d" 2>&1)
[ $? = 2 ] && grep -q 'CNLAB_JWT_SECRET must be set' <<<"$out" &&
	ok no-secret || bad "no-secret: $out"
out=$(CNLAB_JWT_SECRET=short "$cnlabd" --data-dir "$tmp/d" 2>&1)
[ $? = 2 ] && grep -q 'at least 32 bytes' <<<"$out" &&
	ok short-secret || bad "short-secret: $out"

export CNLAB_JWT_SECRET=integration-test-secret-0123456789abcdef
export CNLAB_ADMIN_PASSWORD=hunter2-but-longer

# start DIR [ARGS...]: run cnlabd on port 0; sets pid and port.
start() {
	local dir=$1
	shift
	: >"$tmp/out" # no stale "listening on" line from the last run
	"$cnlabd" --data-dir "$dir" --listen 127.0.0.1:0 "$@" \
		>"$tmp/out" 2>"$tmp/err" &
	pid=$!
	port=
	for _ in $(seq 100); do
		port=$(sed -n 's/^listening on 127\.0\.0\.1:\([0-9][0-9]*\)$/\1/p' "$tmp/out")
		[ -n "$port" ] && return 0
		sleep 0.05
	done
	return 1
}

start "$tmp/d" --bootstrap-admin root && ok listening || bad "listening: $(cat "$tmp/err")"
[ -f "$tmp/d/cnlab.db" ] && ok data-dir || bad data-dir
body=$(curl -sS "http://127.0.0.1:$port/healthz")
[ "$body" = '{"status":"ok"}' ] && ok healthz || bad "healthz: $body"
tok=$(curl -sS -X POST -d '{"user":"root","password":"hunter2-but-longer"}' \
	"http://127.0.0.1:$port/v1/auth/login" | jq -r .token)
names=$(curl -sS -H "Authorization: Bearer $tok" \
	"http://127.0.0.1:$port/v1/projects" | jq -r '.items[].name')
[ "$names" = system ] && ok login-and-list || bad "login-and-list: $names"
kill -TERM "$pid"
wait "$pid" && ok sigterm || bad sigterm
pid=

# A restart with the same flag leaves the store as it was.
start "$tmp/d" --bootstrap-admin root && ok restart || bad "restart: $(cat "$tmp/err")"
code=$(curl -sS -o /dev/null -w '%{http_code}' -X POST \
	-d '{"user":"root","password":"hunter2-but-longer"}' \
	"http://127.0.0.1:$port/v1/auth/login")
[ "$code" = 200 ] && ok login-after-restart || bad "login-after-restart: $code"
kill -TERM "$pid"
wait "$pid"
pid=

# --- Settings: file < environment < flags ---------------------------------
cat >"$tmp/bad.conf" <<CONF
data_dir = $tmp/c
colour = blue
CONF
out=$("$cnlabd" --config "$tmp/bad.conf" 2>&1)
[ $? = 2 ] && grep -q colour <<<"$out" && ok config-unknown-key || bad "config-unknown-key: $out"
cat >"$tmp/c.conf" <<CONF
# a comment
data_dir = $tmp/c
policy = no-such-policy
node_lost_timeout = 10s
CONF
out=$("$cnlabd" --config "$tmp/c.conf" --listen 127.0.0.1:0 2>&1)
grep -q 'no-such-policy' <<<"$out" && ok config-file-read || bad "config-file-read: $out"
CNLAB_POLICY=fifo start "$tmp/c" --config "$tmp/c.conf" --bootstrap-admin root &&
	ok env-overrides-file || bad "env-overrides-file: $(cat "$tmp/err")"
grep -q 'policy=fifo' "$tmp/err" && ok env-policy-used || bad "env-policy-used: $(cat "$tmp/err")"
kill -TERM "$pid"; wait "$pid"; pid=
# Every setting is a flag (--KEY VALUE or --KEY=VALUE, '-' or '_'), and
# flags win over the environment, which wins over the file.
CNLAB_POLICY=fifo start "$tmp/c" --config "$tmp/c.conf" --policy bestfit \
	--node-lost-timeout 8s && ok flag-overrides-env || bad "flag-overrides-env: $(cat "$tmp/err")"
grep -q 'policy=bestfit' "$tmp/err" && ok flag-policy-used || bad "flag-policy-used: $(cat "$tmp/err")"
tok=$(curl -sS -X POST -d '{"user":"root","password":"hunter2-but-longer"}' \
	"http://127.0.0.1:$port/v1/auth/login" | jq -r .token)
# An agent's lease is half the node-lost timeout: 8s from the flag, not
# the file's 10s.
# A node registers with a join token an administrator made for it.
register_f1() {
	local jt
	jt=$(curl -sS -X POST -H "Authorization: Bearer $tok" -d '{"node":"f1"}' \
		"http://127.0.0.1:$port/v1/nodes/join-tokens" | jq -r .token)
	curl -sS -X POST -H "Authorization: Bearer $jt" \
		-d '{"protocol":5,"name":"f1","gpus":0,"cpu_milli":1000,"mem_mib":1024}' \
		"http://127.0.0.1:$port/v1/nodes"
}
lease=$(register_f1 | jq -r .lease_ms)
[ "$lease" = 4000 ] && ok flag-duration-used || bad "flag-duration-used: lease_ms $lease"
kill -TERM "$pid"; wait "$pid"; pid=
CNLAB_POLICY=fifo start "$tmp/c" --config "$tmp/c.conf" --node_lost_timeout=6s &&
	ok flag-with-equals || bad "flag-with-equals: $(cat "$tmp/err")"
lease=$(register_f1 | jq -r .lease_ms)
[ "$lease" = 3000 ] && ok flag-underscore-equals || bad "flag-underscore-equals: lease_ms $lease"
kill -TERM "$pid"; wait "$pid"; pid=
out=$(CNLAB_POLICY=fifo "$cnlabd" --config "$tmp/c.conf" --policy=no-such-flag-policy 2>&1)
grep -q 'no-such-flag-policy' <<<"$out" && ok flag-beats-env ||
	bad "flag-beats-env: $out"
out=$("$cnlabd" --data-dir "$tmp/c" --colour blue 2>&1)
[ $? = 2 ] && grep -q -- '--colour' <<<"$out" && ok unknown-flag || bad "unknown-flag: $out"
out=$("$cnlabd" --data-dir "$tmp/c" --node-lost-timeout 1s 2>&1)
[ $? = 2 ] && grep -q -- 'node-lost-timeout' <<<"$out" && ok flag-bad-value || bad "flag-bad-value: $out"
out=$("$cnlabd" --data-dir "$tmp/c" --listen 2>&1)
[ $? = 2 ] && grep -q -- '--listen needs a value' <<<"$out" && ok flag-no-value || bad "flag-no-value: $out"

# --- HTTPS -----------------------------------------------------------------
openssl req -x509 -newkey rsa:2048 -nodes -keyout "$tmp/key.pem" \
	-out "$tmp/cert.pem" -subj /CN=127.0.0.1 -days 1 \
	-addext subjectAltName=IP:127.0.0.1 2>/dev/null
cat >"$tmp/tls.conf" <<CONF
tls_cert = $tmp/cert.pem
tls_key = $tmp/key.pem
CONF
start "$tmp/d" --config "$tmp/tls.conf" && ok tls-start || bad "tls-start: $(cat "$tmp/err")"
body=$(curl -sS --cacert "$tmp/cert.pem" "https://127.0.0.1:$port/healthz")
[ "$body" = '{"status":"ok"}' ] && ok https || bad "https: $body"
curl -sS -m 5 "http://127.0.0.1:$port/healthz" >/dev/null 2>&1 &&
	bad "plain http answered on the TLS port" || ok tls-only
tok=$(curl -sS --cacert "$tmp/cert.pem" -X POST \
	-d '{"user":"root","password":"hunter2-but-longer"}' \
	"https://127.0.0.1:$port/v1/auth/login" | jq -r .token)
[ "${#tok}" -gt 20 ] && ok https-login || bad "https-login: $tok"
# The notebook proxy's own origin is HTTPS too, with the same certificate.
nport=$(sed -n 's/^notebooks on 127\.0\.0\.1:\([0-9][0-9]*\)$/\1/p' "$tmp/out")
[ -n "$nport" ] && [ "$nport" != "$port" ] &&
	[ "$(curl -sS --cacert "$tmp/cert.pem" "https://127.0.0.1:$nport/s/srv_x/" | jq -r .error.code)" = unauthenticated ] &&
	[ "$(curl -sS -o /dev/null -w '%{http_code}' --cacert "$tmp/cert.pem" "https://127.0.0.1:$nport/healthz")" = 404 ] &&
	! curl -sS -m 5 "http://127.0.0.1:$nport/s/srv_x/" >/dev/null 2>&1 &&
	ok notebooks-https || bad "notebooks over https (port $nport): $(cat "$tmp/out")"
loc=$(curl -sS -D - -o /dev/null --cacert "$tmp/cert.pem" -H "Host: 127.0.0.1:$port" \
	"https://127.0.0.1:$port/s/srv_x/a?b=1" | tr -d '\r' | sed -n 's/^[Ll]ocation: //p')
[ "$loc" = "https://127.0.0.1:$nport/s/srv_x/a?b=1" ] && ok notebooks-redirect ||
	bad "/s/ on the API's origin: Location '$loc'"
kill -TERM "$pid"; wait "$pid"; pid=
# notebook_listen must be another port; notebook_url another origin.
out=$("$cnlabd" --data-dir "$tmp/c" --listen 127.0.0.1:18080 --notebook-listen 127.0.0.1:18080 2>&1)
[ $? = 2 ] && grep -q 'notebook_listen must be another port' <<<"$out" && ok notebook-listen-same ||
	bad "notebook-listen-same: $out"
out=$(CNLAB_JWT_SECRET=0123456789abcdef0123456789abcdef0123456789abcdef "$cnlabd" --data-dir "$tmp/nb" \
	--listen 127.0.0.1:0 --public-url https://cnlab.example --notebook-url https://cnlab.example/ 2>&1)
[ $? != 0 ] && grep -q 'notebook_url must be another origin' <<<"$out" && ok notebook-url-same ||
	bad "notebook-url-same: $out"
# listen's port + 1 (the notebook listener's default) taken by another
# program: cnlabd still starts, its notebooks on any free port, said in
# the log; a notebook_listen given explicitly stays an error.
python3 -c '
import socket, sys, time
for _ in range(50):
    h = socket.socket(); h.bind(("127.0.0.1", 0)); q = h.getsockname()[1]
    t = socket.socket()
    try:
        t.bind(("127.0.0.1", q - 1)); t.close(); break
    except OSError:
        h.close()
h.listen(1); print(q - 1, flush=True); sys.stdout.close(); time.sleep(120)
' >"$tmp/held" &
holder=$!
for _ in $(seq 100); do [ -s "$tmp/held" ] && break; sleep 0.05; done
p=$(cat "$tmp/held")
start "$tmp/e" --listen "127.0.0.1:$p" --log-level info && [ "$port" = "$p" ] &&
	for _ in $(seq 100); do grep -q '^notebooks on' "$tmp/out" && break; sleep 0.05; done
nport=$(sed -n 's/^notebooks on 127\.0\.0\.1:\([0-9][0-9]*\)$/\1/p' "$tmp/out")
[ -n "$nport" ] && [ "$nport" != "$((p + 1))" ] && [ "$nport" != "$p" ] &&
	grep -q 'notebook port taken' "$tmp/err" &&
	[ "$(curl -sS -o /dev/null -w '%{http_code}' "http://127.0.0.1:$nport/s/srv_x/")" = 401 ] &&
	ok notebook-port-taken || bad "notebook-port-taken ($p, notebooks '$nport'): $(cat "$tmp/out" "$tmp/err")"
[ -n "$pid" ] && { kill -TERM "$pid"; wait "$pid"; pid=; }
out=$("$cnlabd" --data-dir "$tmp/e" --listen 127.0.0.1:0 --notebook-listen "127.0.0.1:$((p + 1))" 2>&1)
[ $? != 0 ] && grep -q 'notebook_listen: cannot listen' <<<"$out" && ok notebook-listen-taken ||
	bad "notebook-listen-taken: $out"
kill "$holder" 2>/dev/null; wait "$holder" 2>/dev/null

# --- API tokens --------------------------------------------------------------
start "$tmp/d" && ok restart-plain || bad restart-plain
base=http://127.0.0.1:$port
tok=$(curl -sS -X POST -d '{"user":"root","password":"hunter2-but-longer"}' \
	"$base/v1/auth/login" | jq -r .token)
api=$(curl -sS -X POST -H "Authorization: Bearer $tok" \
	-d '{"name":"ci","expires_in_days":1}' "$base/v1/auth/tokens")
atok=$(jq -r .token <<<"$api")
aid=$(jq -r .id <<<"$api")
who=$(curl -sS -H "Authorization: Bearer $atok" "$base/v1/auth/whoami" | jq -r .name)
[ "$who" = root ] && ok api-token || bad "api-token: $api / $who"
curl -sS -H "Authorization: Bearer $tok" "$base/v1/auth/tokens" |
	jq -e '.items[0].name == "ci" and (.items[0] | has("token") | not)' >/dev/null &&
	ok api-token-list-hides-secret || bad api-token-list
curl -sS -o /dev/null -X DELETE -H "Authorization: Bearer $tok" "$base/v1/auth/tokens/$aid"
code=$(curl -sS -o /dev/null -w '%{http_code}' -H "Authorization: Bearer $atok" "$base/v1/auth/whoami")
[ "$code" = 401 ] && ok api-token-revoked || bad "api-token-revoked: $code"
kill -TERM "$pid"; wait "$pid"; pid=

# --- OIDC ------------------------------------------------------------------
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
now=$(date +%s)
idtoken() { # idtoken USER [ISSUER]
	local h p s
	h=$(printf '{"alg":"RS256","kid":"k1","typ":"JWT"}' | b64url)
	p=$(printf '{"iss":"%s","aud":"cnlab-cli","sub":"u-%s","preferred_username":"%s","iat":%d,"exp":%d}' \
		"${2:-https://idp.example}" "$1" "$1" "$now" $((now + 600)) | b64url)
	s=$(printf '%s.%s' "$h" "$p" | openssl dgst -sha256 -sign "$tmp/idp.pem" -binary | b64url)
	printf '%s.%s.%s' "$h" "$p" "$s"
}
start "$tmp/d" --config "$tmp/oidc.conf" && ok oidc-start || bad "oidc-start: $(cat "$tmp/err")"
base=http://127.0.0.1:$port
# Users are matched by (iss, sub), never by name: a new subject whose
# preferred_username is "root" gets a fresh user without any role.
me=$(curl -sS -H "Authorization: Bearer $(idtoken root)" "$base/v1/auth/whoami")
[ "$(jq -r .admin <<<"$me")" = false ] && [ "$(jq -r .name <<<"$me")" != root ] &&
	[ "$(jq -r .name <<<"$me")" != null ] &&
	ok oidc-id-token-name-is-no-key || bad "oidc-id-token-name-is-no-key: $me"
# Linked by an administrator, the subject signs in as root.
rtok=$(curl -sS -X POST -d '{"user":"root","password":"hunter2-but-longer"}' \
	"$base/v1/auth/login" | jq -r .token)
curl -sS -o /dev/null -X POST -H "Authorization: Bearer $rtok" \
	-d '{"subject":"u-rootidp"}' "$base/v1/users/root/oidc"
t=$(idtoken rootidp)
who=$(curl -sS -H "Authorization: Bearer $t" "$base/v1/auth/whoami" | jq -r .name)
[ "$who" = root ] && ok oidc-id-token-linked || bad "oidc-id-token-linked: $who"
code=$(curl -sS -o /dev/null -w '%{http_code}' \
	-H "Authorization: Bearer $(idtoken root https://evil.example)" "$base/v1/auth/whoami")
[ "$code" = 401 ] && ok oidc-wrong-issuer || bad "oidc-wrong-issuer: $code"
t=$(idtoken root)
sig=${t##*.}
c=${sig:20:1}
[ "$c" = A ] && c=B || c=A
t="${t%.*}.${sig:0:20}$c${sig:21}" # one signature byte changed
code=$(curl -sS -o /dev/null -w '%{http_code}' \
	-H "Authorization: Bearer $t" "$base/v1/auth/whoami")
[ "$code" = 401 ] && ok oidc-bad-signature || bad "oidc-bad-signature: $code"
# An unknown subject signs in as a new user, without any role.
code=$(curl -sS -o /dev/null -w '%{http_code}' \
	-H "Authorization: Bearer $(idtoken nobody)" "$base/v1/users")
[ "$code" = 403 ] && ok oidc-unknown-subject-no-role || bad "oidc-unknown-subject-no-role: $code"
kill -TERM "$pid"; wait "$pid"; pid=

[ "$fails" = 0 ] || exit 1
