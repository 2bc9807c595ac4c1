#!/usr/bin/env bash
# sessions.sh - revocation and identity, tried as an attacker would, with
# the cnlab binary against a real cnlabd and a fake OIDC provider
# (fake_idp.py) whose "browser" is a script ($BROWSER):
#   - browser sign-in (cnlab login --web: authorization code, PKCE S256,
#     loopback redirect, state) ends in a revocable CNLab session;
#   - a redirect with another state, and a code redeemed with another
#     verifier (a challenge swapped on the way), are refused;
#   - an ID token whose preferred_username is the administrator's name
#     gets a fresh user without any role; the same subject with another
#     name stays the same user; a user an admin linked signs in as
#     themselves;
#   - logout ends the session on the server (the token replayed is 401),
#     and still forgets the token, with a warning, when the server is gone;
#   - user disable refuses the user's session, API token and OIDC ID token
#     on the next request; enable restores the API token; the last admin
#     cannot be disabled;
#   - a membership removed or a role lowered takes effect on the next
#     request;
#   - the same three revocations refuse the reads served off the API's
#     lock (a job, a project's jobs, whoami) at once, while a burst of
#     submissions keeps the lock busy;
#   - job and dashboard event streams already open are cut by a logout, an
#     API token revoked, a membership removed or a user disabled: the
#     job's end then reaches only a stream still allowed.
set -u
cnlab=$(realpath "$1")
cnlabd=$(realpath "$2")
here=$(cd "$(dirname "$0")" && pwd)
tmp=$(mktemp -d)
pid=
idp_pid=
cleanup() {
	[ -n "$pid" ] && kill "$pid" 2>/dev/null
	[ -n "$idp_pid" ] && kill "$idp_pid" 2>/dev/null
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

export CNLAB_JWT_SECRET=integration-test-secret-0123456789abcdef
export CNLAB_ADMIN_PASSWORD=hunter2-but-longer
export HOME=$tmp/home XDG_CONFIG_HOME=$tmp/xdg
unset CNLAB_SERVER CNLAB_TOKEN CNLAB_CONFIG DISPLAY WAYLAND_DISPLAY BROWSER
mkdir -p "$HOME"

# --- The identity provider: a key, its JWKS, the fake IdP -------------------
b64url() { openssl base64 -A | tr '+/' '-_' | tr -d '='; }
openssl genrsa -out "$tmp/idp.pem" 2048 2>/dev/null
n=$(openssl rsa -in "$tmp/idp.pem" -noout -modulus 2>/dev/null | cut -d= -f2 |
	xxd -r -p | b64url)
printf '{"keys":[{"kty":"RSA","kid":"k1","use":"sig","alg":"RS256","n":"%s","e":"AQAB"}]}' \
	"$n" >"$tmp/jwks.json"
echo "sub-ada ada" >"$tmp/who"
python3 "$here/fake_idp.py" "$tmp/idp.port" "$tmp/idp.pem" cnlab-cli "$tmp/who" &
idp_pid=$!
for _ in $(seq 200); do [ -s "$tmp/idp.port" ] && break; sleep 0.05; done
[ -s "$tmp/idp.port" ] || { echo "FAIL fake IdP did not start"; exit 1; }
idp=http://127.0.0.1:$(cat "$tmp/idp.port")
# An ID token minted here (the provider's key): SUB NAME.
idtoken() {
	local h p s now
	now=$(date +%s)
	h=$(printf '{"alg":"RS256","kid":"k1","typ":"JWT"}' | b64url)
	p=$(printf '{"iss":"%s","aud":"cnlab-cli","sub":"%s","preferred_username":"%s","iat":%d,"exp":%d}' \
		"$idp" "$1" "$2" "$now" $((now + 600)) | b64url)
	s=$(printf '%s.%s' "$h" "$p" | openssl dgst -sha256 -sign "$tmp/idp.pem" -binary | b64url)
	printf '%s.%s.%s' "$h" "$p" "$s"
}

cat >"$tmp/cnlabd.conf" <<CONF
oidc_issuer = $idp
oidc_audience = cnlab-cli
oidc_jwks_file = $tmp/jwks.json
oidc_authorization_endpoint = $idp/authorize
oidc_token_endpoint = $idp/token
CONF
"$cnlabd" --data-dir "$tmp/d" --listen 127.0.0.1:0 --bootstrap-admin root \
	--config "$tmp/cnlabd.conf" >"$tmp/out" 2>"$tmp/err" &
pid=$!
port=
for _ in $(seq 200); do
	port=$(sed -n 's/^listening on 127\.0\.0\.1:\([0-9][0-9]*\)$/\1/p' "$tmp/out")
	[ -n "$port" ] && break
	sleep 0.05
done
[ -n "$port" ] || { echo "FAIL cnlabd did not start: $(cat "$tmp/err")"; exit 1; }
base=http://127.0.0.1:$port
code_of() { # code_of TOKEN METHOD PATH
	curl -sS -o /dev/null -w '%{http_code}' -X "$2" -H "Authorization: Bearer $1" "$base$3"
}
as() { # as CONFIG-NAME cnlab ARGS...
	local c=$1
	shift
	CNLAB_CONFIG=$tmp/$c.json "$cnlab" --server "$base" "$@"
}

echo hunter2-but-longer | as root login --user root --password-stdin >/dev/null 2>&1 ||
	{ echo "FAIL root login"; exit 1; }

# The browsers: a good one follows the redirect; the others tamper.
cat >"$tmp/browser" <<'SH'
#!/bin/sh
exec curl -sS -L -o /dev/null "$1"
SH
cat >"$tmp/browser-state" <<'SH'
#!/bin/sh
# Follow the IdP's redirect with another state: a forged callback.
loc=$(curl -sS -o /dev/null -w '%{redirect_url}' "$1")
exec curl -sS -o /dev/null "$(printf '%s' "$loc" | sed 's/state=/state=forged/')"
SH
cat >"$tmp/browser-challenge" <<'SH'
#!/bin/sh
# The attacker's own challenge in place of the CLI's: the code is bound to
# a verifier the CLI does not have.
exec curl -sS -L -o /dev/null "$(printf '%s' "$1" |
	sed 's/code_challenge=[^&]*/code_challenge=E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM/')"
SH
chmod +x "$tmp"/browser*

# --- Browser sign-in ---------------------------------------------------------
curl -sS "$base/v1/auth/oidc" | jq -e --arg i "$idp" \
	'.issuer == $i and .client_id == "cnlab-cli" and (.authorization_endpoint | endswith("/authorize"))' \
	>/dev/null && ok oidc-settings-public || bad oidc-settings-public
out=$(BROWSER=$tmp/browser as ada login --web 2>&1)
me=$(as ada -o json whoami 2>&1)
[ "$(jq -r .name <<<"$me")" = ada ] && [ "$(jq -r .admin <<<"$me")" = false ] &&
	ok web-login || bad "web-login: $out / $me"
ada_tok=$(jq -r .token "$tmp/ada.json")
ada_id=$(jq -r .id <<<"$me")
# What is stored is a CNLab session (HS256), not the provider's ID token.
hdr=$(cut -d. -f1 <<<"$ada_tok" | tr '_-' '/+')
hdr=$(printf '%s==' "$hdr" | base64 -d 2>/dev/null)
grep -q HS256 <<<"$hdr" && ok web-login-stores-session || bad "web-login-stores-session: $hdr"

rm -f "$tmp/bad.json"
out=$(BROWSER=$tmp/browser-state as bad login --web 2>&1)
rc=$?
[ $rc = 3 ] && grep -q state <<<"$out" && [ "$(jq -r .token "$tmp/bad.json" 2>/dev/null)" != "${ada_tok}" ] &&
	! jq -e .token "$tmp/bad.json" >/dev/null 2>&1 &&
	ok web-login-wrong-state-refused || bad "web-login-wrong-state-refused: rc=$rc $out"
out=$(BROWSER=$tmp/browser-challenge as bad login --web 2>&1)
rc=$?
[ $rc = 3 ] && grep -q invalid_grant <<<"$out" && ! jq -e .token "$tmp/bad.json" >/dev/null 2>&1 &&
	ok web-login-wrong-verifier-refused || bad "web-login-wrong-verifier-refused: rc=$rc $out"

# --- Identity is (iss, sub), never the name ---------------------------------
echo "sub-mallory root" >"$tmp/who"
BROWSER=$tmp/browser as mal login --web >/dev/null 2>&1
me=$(as mal -o json whoami 2>&1)
[ "$(jq -r .admin <<<"$me")" = false ] && [ "$(jq -r .name <<<"$me")" != root ] &&
	[ "$(jq -r .name <<<"$me")" != null ] &&
	ok forged-admin-name-not-admin || bad "forged-admin-name-not-admin: $me"
code=$(code_of "$(idtoken sub-mallory2 root)" GET /v1/users)
[ "$code" = 403 ] && ok forged-admin-id-token-403 || bad "forged-admin-id-token-403: $code"
# A name that looks like authority is not handed out even when free (the
# administrator here is "root": nobody is called "admin").
for n in admin Administrator system; do
	me=$(curl -sS -H "Authorization: Bearer $(idtoken "sub-$n" "$n")" "$base/v1/auth/whoami")
	nm=$(jq -r .name <<<"$me")
	[ "$(jq -r .admin <<<"$me")" = false ] && [ "$nm" != null ] &&
		[ "$(tr 'A-Z' 'a-z' <<<"$nm")" != "$(tr 'A-Z' 'a-z' <<<"$n")" ] &&
		ok "reserved-name-$n-not-given" || bad "reserved-name-$n-not-given: $me"
done
echo "sub-ada ada-renamed" >"$tmp/who"
BROWSER=$tmp/browser as ada2 login --web >/dev/null 2>&1
[ -n "$ada_id" ] && [ "$(as ada2 -o json whoami | jq -r .id)" = "$ada_id" ] &&
	ok same-subject-same-user || bad same-subject-same-user
echo pw-carol-12345 | as root user create carol --password-stdin >/dev/null 2>&1
as root user link carol --oidc-subject sub-carol >/dev/null 2>&1 && ok user-link || bad user-link
as root user link ada --oidc-subject sub-carol >/dev/null 2>&1
[ $? = 5 ] && ok user-link-taken-refused || bad user-link-taken-refused
echo "sub-carol carol-at-idp" >"$tmp/who"
BROWSER=$tmp/browser as carol login --web >/dev/null 2>&1
[ "$(as carol -o json whoami | jq -r .name)" = carol ] && ok linked-user-signs-in || bad linked-user-signs-in
as root -o json user show carol | jq -e '.oidc[0].subject == "sub-carol"' >/dev/null &&
	ok user-show-oidc || bad user-show-oidc

# --- Logout ends the session on the server ----------------------------------
as ada logout >/dev/null 2>&1
[ "$(jq -r .token "$tmp/ada.json")" = null ] && ok logout-forgets || bad logout-forgets
code=$(code_of "$ada_tok" GET /v1/auth/whoami)
[ "$code" = 401 ] && ok logout-replay-401 || bad "logout-replay-401: $code"
# The server gone: forgotten here anyway, with a warning.
jq --arg s "http://127.0.0.1:1" '.server = $s' "$tmp/ada2.json" >"$tmp/gone.json"
out=$(CNLAB_CONFIG=$tmp/gone.json "$cnlab" logout 2>&1)
rc=$?
[ $rc = 0 ] && grep -q warning <<<"$out" && [ "$(jq -r .token "$tmp/gone.json")" = null ] &&
	ok logout-offline-forgets-with-warning || bad "logout-offline-forgets-with-warning: rc=$rc $out"

# --- Disable and enable --------------------------------------------------------
carol_tok=$(jq -r .token "$tmp/carol.json")
carol_api=$(curl -sS -X POST -H "Authorization: Bearer $carol_tok" -d '{"name":"ci"}' \
	"$base/v1/auth/tokens" | jq -r .token)
[ "$(code_of "$carol_api" GET /v1/auth/whoami)" = 200 ] || bad "carol api token before"
as root user disable carol >/dev/null 2>&1 && ok user-disable || bad user-disable
out=$(as carol whoami 2>&1)
rc=$?
[ $rc = 3 ] && grep -q disabled <<<"$out" && ok disabled-session-401 || bad "disabled-session-401: rc=$rc $out"
[ "$(code_of "$carol_api" GET /v1/auth/whoami)" = 401 ] && ok disabled-api-token-401 || bad disabled-api-token-401
[ "$(code_of "$(idtoken sub-carol carol)" GET /v1/auth/whoami)" = 401 ] &&
	ok disabled-oidc-token-401 || bad disabled-oidc-token-401
as root user list | grep -E '^carol .*disabled' >/dev/null && ok user-list-shows-disabled || bad user-list-shows-disabled
# A pending invitation (a password reset) redeemed while disabled sets no
# password: the old one still works after enable.
inv=$(as root -o json user invite carol | jq -r '.invite.token // .token // empty')
out=$(curl -sS -w ' %{http_code}' -X POST -d "{\"invite\":\"$inv\",\"password\":\"pw-stolen-12345\"}" \
	"$base/v1/auth/redeem")
[ -n "$inv" ] && [ "${out##* }" = 401 ] && grep -q disabled <<<"$out" &&
	ok disabled-redeem-401 || bad "disabled-redeem-401: $inv $out"
as root user enable carol >/dev/null 2>&1
[ "$(code_of "$carol_api" GET /v1/auth/whoami)" = 200 ] && ok enable-restores-api-token || bad enable-restores-api-token
[ "$(code_of "$carol_tok" GET /v1/auth/whoami)" = 401 ] && ok enable-not-sessions || bad enable-not-sessions
login_code() { # login_code USER PASSWORD
	curl -sS -o /dev/null -w '%{http_code}' -X POST -d "{\"user\":\"$1\",\"password\":\"$2\"}" "$base/v1/auth/login"
}
[ "$(login_code carol pw-stolen-12345)" = 401 ] && [ "$(login_code carol pw-carol-12345)" = 200 ] &&
	ok disabled-redeem-set-no-password || bad disabled-redeem-set-no-password
out=$(as root user disable root 2>&1)
rc=$?
[ $rc = 5 ] && grep -q "last enabled" <<<"$out" && ok last-admin-not-disabled || bad "last-admin-not-disabled: rc=$rc $out"

# --- A password reset ends the sessions of the old password ----------------
old_tok=$(curl -sS -X POST -d '{"user":"carol","password":"pw-carol-12345"}' "$base/v1/auth/login" | jq -r .token)
[ "$(code_of "$old_tok" GET /v1/auth/whoami)" = 200 ] || bad "carol password session before reset"
inv=$(as root -o json user invite carol | jq -r '.invite.token // .token // empty')
new_tok=$(curl -sS -X POST -d "{\"invite\":\"$inv\",\"password\":\"pw-carol-67890\"}" \
	"$base/v1/auth/redeem" | jq -r .token)
[ "$(code_of "$old_tok" GET /v1/auth/whoami)" = 401 ] && [ "$(code_of "$new_tok" GET /v1/auth/whoami)" = 200 ] &&
	[ "$(code_of "$carol_api" GET /v1/auth/whoami)" = 200 ] &&
	ok password-reset-ends-old-sessions || bad password-reset-ends-old-sessions

# --- Membership and role changes take effect on the next request ----------
as root project create p1 >/dev/null 2>&1
as root project member add p1 carol >/dev/null 2>&1
as root project member set-role p1 carol viewer >/dev/null 2>&1
p1=$(as root -o json project list | jq -r '.items[] | select(.name == "p1") | .id')
code=$(curl -sS -o /dev/null -w '%{http_code}' -X POST -H "Authorization: Bearer $carol_api" \
	-d '{"command":"true","gpu":"h200-1g.18gb"}' "$base/v1/projects/$p1/jobs")
[ "$code" = 403 ] && ok role-lowered-write-refused || bad "role-lowered-write-refused: $code"
[ "$(code_of "$carol_api" GET "/v1/projects/$p1/jobs")" = 200 ] || bad "viewer reads"
as root project member remove p1 carol >/dev/null 2>&1
code=$(code_of "$carol_api" GET "/v1/projects/$p1/jobs")
[ "$code" = 404 ] && ok membership-removed-404 || bad "membership-removed-404: $code"

# --- OIDC links: audit, unlink, validation, administrators only -----------
root_tok=$(jq -r .token "$tmp/root.json")
audit=$(curl -sS -H "Authorization: Bearer $root_tok" "$base/v1/audit?limit=1000")
mal_id=$(as mal -o json whoami | jq -r .id)
jq -e --arg a "$ada_id" --arg m "$mal_id" '[.items[] | select(.action == "user.create_oidc" and
	.actor == .target and (.target == $a or .target == $m))] | length == 2' <<<"$audit" >/dev/null &&
	ok first-oidc-sign-in-audited || bad "first-oidc-sign-in-audited: $(jq -c '[.items[] | select(.action == "user.create_oidc")]' <<<"$audit")"
# The route matrix of the new routes: a user who is no administrator is 403.
for r in "POST /v1/users/carol/disable" "POST /v1/users/carol/enable" \
	"POST /v1/users/$mal_id/oidc" "DELETE /v1/users/carol/oidc?subject=sub-carol"; do
	code=$(curl -sS -o /dev/null -w '%{http_code}' -X "${r%% *}" -H "Authorization: Bearer $carol_api" \
		-d '{"subject":"sub-carol"}' "$base${r#* }")
	[ "$code" = 403 ] && ok "non-admin $r: 403" || bad "non-admin $r: $code"
done
# ("a\nb", "c") and ("a", "b\nc") must not be one identity: no control bytes.
out=$(curl -sS -w ' %{http_code}' -X POST -H "Authorization: Bearer $root_tok" \
	-d '{"subject":"x\ny"}' "$base/v1/users/carol/oidc")
[ "${out##* }" = 400 ] && grep -q '\\"subject\\"' <<<"$out" && ok link-control-bytes-400 || bad "link-control-bytes-400: $out"
out=$(curl -sS -w ' %{http_code}' -X DELETE -H "Authorization: Bearer $root_tok" "$base/v1/users/carol/oidc")
[ "${out##* }" = 400 ] && grep -q subject <<<"$out" && ok unlink-no-subject-400 || bad "unlink-no-subject-400: $out"
as root user unlink carol >/dev/null 2>&1
[ $? = 2 ] && ok unlink-usage-exit-2 || bad unlink-usage-exit-2
# An identity linked to someone else is not unlinked through another user.
out=$(as root user unlink ada --oidc-subject sub-carol 2>&1)
rc=$?
[ $rc != 0 ] && grep -q "no OIDC link" <<<"$out" && ok unlink-other-users-link-refused || bad "unlink-other-users-link-refused: rc=$rc $out"
# Unlink: the sessions the identity made end, API tokens stay, and the
# identity's next sign-in is a fresh user without any role.
echo "sub-carol carol-at-idp" >"$tmp/who"
BROWSER=$tmp/browser as carol3 login --web >/dev/null 2>&1
carol3_tok=$(jq -r .token "$tmp/carol3.json")
[ "$(code_of "$carol3_tok" GET /v1/auth/whoami)" = 200 ] || bad "carol web session before unlink"
as root user unlink carol --oidc-subject sub-carol >/dev/null 2>&1 && ok user-unlink || bad user-unlink
[ "$(code_of "$carol3_tok" GET /v1/auth/whoami)" = 401 ] && ok unlink-ends-oidc-sessions || bad unlink-ends-oidc-sessions
[ "$(code_of "$carol_api" GET /v1/auth/whoami)" = 200 ] && ok unlink-keeps-api-tokens || bad unlink-keeps-api-tokens
me=$(curl -sS -H "Authorization: Bearer $(idtoken sub-carol carol)" "$base/v1/auth/whoami")
[ "$(jq -r .name <<<"$me")" != carol ] && [ "$(jq -r .name <<<"$me")" != null ] &&
	[ "$(jq -r .admin <<<"$me")" = false ] && ok unlinked-identity-is-a-new-user || bad "unlinked-identity-is-a-new-user: $me"
as root -o json user show carol | jq -e '.oidc == []' >/dev/null && ok user-show-unlinked || bad user-show-unlinked
curl -sS -H "Authorization: Bearer $root_tok" "$base/v1/audit?limit=1000" |
	jq -e '[.items[] | select(.action == "user.unlink" and (.result | startswith("200")))] | length == 1' >/dev/null &&
	ok unlink-audited || bad unlink-audited

# --- Reads served off the API's lock refuse at once, under load -----------
# GETs of a job, a project's jobs and whoami do not wait for the API's lock
# (issue 19): they authorize through a read-only store connection.  While
# submissions keep the lock busy, a membership removed, a user disabled
# and a session logged out are refused by the very next read.
echo pw-erin-12345 | as root user create erin --password-stdin >/dev/null 2>&1
as root project member add p1 erin >/dev/null 2>&1
erin_login() {
	curl -sS -X POST -d '{"user":"erin","password":"pw-erin-12345"}' "$base/v1/auth/login" | jq -r .token
}
erin_tok=$(erin_login)
job=$(curl -sS -X POST -H "Authorization: Bearer $root_tok" \
	-d '{"command":"true","gpu":"h200-1g.18gb"}' "$base/v1/projects/$p1/jobs" | jq -r .id)
loaders=()
for k in 1 2 3 4; do
	(for _ in $(seq 150); do
		curl -sS -o /dev/null -X POST -H "Authorization: Bearer $root_tok" \
			-d '{"command":"true","gpu":"h200-1g.18gb"}' "$base/v1/projects/$p1/jobs"
	done) &
	loaders+=($!)
done
reads() { # reads TOKEN: the codes of GET job, GET jobs, GET whoami
	echo "$(code_of "$1" GET "/v1/jobs/$job") $(code_of "$1" GET "/v1/projects/$p1/jobs") $(code_of "$1" GET /v1/auth/whoami)"
}
[ "$(reads "$erin_tok")" = "200 200 200" ] || bad "erin reads under load: $(reads "$erin_tok")"
as root project member remove p1 erin >/dev/null 2>&1
got=$(reads "$erin_tok")
[ "$got" = "404 404 200" ] && ok under-load-membership-removed-404 || bad "under-load-membership-removed-404: $got"
as root project member add p1 erin >/dev/null 2>&1
[ "$(reads "$erin_tok")" = "200 200 200" ] || bad "erin member again: $(reads "$erin_tok")"
as root user disable erin >/dev/null 2>&1
got=$(reads "$erin_tok")
[ "$got" = "401 401 401" ] && ok under-load-disabled-401 || bad "under-load-disabled-401: $got"
as root user enable erin >/dev/null 2>&1
erin_tok=$(erin_login)
[ "$(reads "$erin_tok")" = "200 200 200" ] || bad "erin enabled again: $(reads "$erin_tok")"
curl -sS -o /dev/null -X POST -H "Authorization: Bearer $erin_tok" "$base/v1/auth/logout"
got=$(reads "$erin_tok")
[ "$got" = "401 401 401" ] && ok under-load-logged-out-401 || bad "under-load-logged-out-401: $got"
kill "${loaders[@]}" 2>/dev/null
wait "${loaders[@]}" 2>/dev/null

# --- Open event streams end on revocation -----------------------------------
# A job's event stream (GET /v1/jobs/{job}/events) and the dashboard's
# (GET /v1/dashboard/events) opened before a logout, an API token revoked,
# a membership removed or a user disabled get nothing after it: the job
# then cancelled, its "end" reaches only a stream still allowed.
p2=$(curl -sS -X POST -H "Authorization: Bearer $root_tok" -d '{"name":"p2"}' "$base/v1/projects" | jq -r .id)
st_login() {
	curl -sS -X POST -d "{\"user\":\"$1\",\"password\":\"pw-$1-12345\"}" "$base/v1/auth/login" | jq -r .token
}
for u in sa sb sc sd se; do
	echo "pw-$u-12345" | as root user create "$u" --password-stdin >/dev/null 2>&1
	curl -sS -o /dev/null -X POST -H "Authorization: Bearer $root_tok" \
		-d "{\"user\":\"$u\",\"role\":\"viewer\"}" "$base/v1/projects/$p2/members"
done
sa_tok=$(st_login sa)
sb_res=$(curl -sS -X POST -H "Authorization: Bearer $(st_login sb)" -d '{"name":"sse"}' "$base/v1/auth/tokens")
sb_api=$(jq -r .token <<<"$sb_res")
sc_tok=$(st_login sc)
sd_tok=$(st_login sd)
se_tok=$(st_login se)
sjob=$(curl -sS -X POST -H "Authorization: Bearer $root_tok" \
	-d '{"command":"sleep 1","gpu":"h200-1g.18gb"}' "$base/v1/projects/$p2/jobs" | jq -r .id)
spids=()
stream() { # stream NAME TOKEN PATH
	curl -sS -N -H "Authorization: Bearer $2" "$base$3" >"$tmp/sse.$1" 2>/dev/null &
	spids+=($!)
}
stream sa "$sa_tok" "/v1/jobs/$sjob/events"
stream sb "$sb_api" "/v1/jobs/$sjob/events"
stream sc "$sc_tok" "/v1/jobs/$sjob/events"
stream sd "$sd_tok" "/v1/jobs/$sjob/events"
stream se "$se_tok" "/v1/jobs/$sjob/events"
stream dash "$sb_api" /v1/dashboard/events
opened=0
for _ in $(seq 100); do
	opened=$(grep -l '^event: job' "$tmp"/sse.s? 2>/dev/null | wc -l)
	[ "$opened" = 5 ] && grep -q '^data:' "$tmp/sse.dash" && break
	sleep 0.1
done
[ "$opened" = 5 ] || bad "event streams did not open: $opened"
curl -sS -o /dev/null -X POST -H "Authorization: Bearer $sa_tok" "$base/v1/auth/logout"
curl -sS -o /dev/null -X DELETE -H "Authorization: Bearer $root_tok" "$base/v1/auth/tokens/$(jq -r .id <<<"$sb_res")"
curl -sS -o /dev/null -X DELETE -H "Authorization: Bearer $root_tok" "$base/v1/projects/$p2/members/sc"
as root user disable sd >/dev/null 2>&1
dash_before=$(grep -c '^data:' "$tmp/sse.dash")
curl -sS -o /dev/null -X POST -H "Authorization: Bearer $root_tok" "$base/v1/jobs/$sjob/cancel"
for _ in $(seq 100); do grep -q '^event: end' "$tmp/sse.se" && break; sleep 0.1; done
grep -q '^event: end' "$tmp/sse.se" && ok "event-stream-still-allowed-gets-the-end" ||
	bad "event-stream-still-allowed-gets-the-end: $(tail -c 300 "$tmp/sse.se")"
sleep 1
for x in "sa logout" "sb api-token-revoked" "sc membership-removed" "sd disabled"; do
	f=$tmp/sse.${x%% *}
	! grep -q '^event: end' "$f" && ! grep -q cancelled "$f" &&
		ok "event-stream-cut-${x#* }" || bad "event-stream-cut-${x#* }: $(tail -c 300 "$f")"
done
[ "$(grep -c '^data:' "$tmp/sse.dash")" = "$dash_before" ] && ! grep -q cancelled "$tmp/sse.dash" &&
	ok "dashboard-stream-cut-api-token-revoked" || bad "dashboard-stream-cut-api-token-revoked: $(tail -c 300 "$tmp/sse.dash")"
kill "${spids[@]}" 2>/dev/null
wait "${spids[@]}" 2>/dev/null

# --- Two administrators disabling each other at once: one stays -----------
echo pw-dora-12345 | as root user create dora --password-stdin >/dev/null 2>&1
as root project member add system dora --role admin >/dev/null 2>&1
dora_tok=$(curl -sS -X POST -d '{"user":"dora","password":"pw-dora-12345"}' "$base/v1/auth/login" | jq -r .token)
root_id=$(as root -o json whoami | jq -r .id)
dora_id=$(curl -sS -H "Authorization: Bearer $dora_tok" "$base/v1/auth/whoami" | jq -r .id)
racers=()
for k in 1 2 3 4; do
	curl -sS -o /dev/null -w '%{http_code}\n' -X POST -H "Authorization: Bearer $root_tok" \
		"$base/v1/users/$dora_id/disable" >"$tmp/race.r$k" &
	racers+=($!)
	curl -sS -o /dev/null -w '%{http_code}\n' -X POST -H "Authorization: Bearer $dora_tok" \
		"$base/v1/users/$root_id/disable" >"$tmp/race.d$k" &
	racers+=($!)
done
wait "${racers[@]}"
enabled=0
for t in "$root_tok" "$dora_tok"; do
	[ "$(code_of "$t" GET /v1/users)" = 200 ] && enabled=$((enabled + 1))
done
[ "$enabled" = 1 ] && ok "admins-disabling-each-other-one-stays ($(cat "$tmp"/race.* | sort | uniq -c | tr -s ' \n' ' '))" ||
	bad "admins-disabling-each-other-one-stays: $enabled enabled"

echo "$fails failure(s)"
[ "$fails" = 0 ]
