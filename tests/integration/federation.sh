#!/usr/bin/env bash
# federation.sh - two sites, each its own cnlabd with its own agent (a fake
# H100, real processes in cgroups), federated with the CLI only:
#   - site B (https, a certificate of its own) grants site A a project:
#     `cnlab peer grant site-a --project partners` prints a token, once;
#   - site A adds B with that token and B's CA; a peer whose CA does not
#     match B's certificate is refused at the handshake (peer list says so);
#   - a job that waits at A past its cluster's wait target goes to B: the
#     user's own `cnlab run` follows it to the end there (its output, its
#     exit code), jobs show says where it ran, its input travelled, and
#     both audits say so (A: sched.federation, in jobs explain; B: the job made by peer-site-a);
#   - a cancel at A cancels the job at B;
#   - work of an on-prem-only project never leaves;
#   - B's quota holds for what A sends: beyond it B refuses, and the job
#     goes back to A's queue and runs there (audited, explained);
#   - the peer's token acts in its project only, and once B revokes the
#     grant it acts nowhere: A's forwarding is refused and its work stays.
# Waits poll with generous bounds so a hang fails instead of blocking; no
# assertion depends on how fast the machine is.
set -u
cnlabd=$(realpath "$1")
agent=$(realpath "$2")
cnlab=$(realpath "$3")
tmp=$(mktemp -d)
run=fd$$
pids=()
cleanup() {
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done
	sleep 0.5
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
# shellcheck source=tests/integration/lib.sh
. "$(dirname "$0")/lib.sh" # ok, bad, wait_for, $fails

export CNLAB_JWT_SECRET=federation-integration-secret-0123456789ab
export CNLAB_ADMIN_PASSWORD=admin-password-1
export HOME=$tmp/home
shared=$tmp/shared
mkdir -p "$shared" "$HOME"
chmod 755 "$tmp"
chmod 1777 "$shared"
unset CNLAB_SERVER CNLAB_TOKEN CNLAB_CONFIG
openssl rand -hex 32 >"$tmp/a.key" && chmod 600 "$tmp/a.key"
# Site B's certificate, and another CA that did not sign it.
openssl req -x509 -newkey rsa:2048 -nodes -keyout "$tmp/b-key.pem" -out "$tmp/b-cert.pem" \
	-days 1 -subj /CN=127.0.0.1 -addext "subjectAltName=IP:127.0.0.1" 2>/dev/null
openssl req -x509 -newkey rsa:2048 -nodes -keyout "$tmp/x-key.pem" -out "$tmp/x-cert.pem" \
	-days 1 -subj /CN=127.0.0.1 -addext "subjectAltName=IP:127.0.0.1" 2>/dev/null

# start_site S PORT FLAGS...: cnlabd of site S (PORT 0: any).
start_site() {
	local s=$1 port=$2
	shift 2
	"$cnlabd" --data-dir "$tmp/db-$s" --listen "127.0.0.1:$port" --bootstrap-admin root \
		--cycle-interval 200ms "$@" >"$tmp/cnlabd-$s.out" 2>>"$tmp/cnlabd-$s.err" &
	pids+=($!)
	eval "pid_$s=\$!"
	wait_for 20 grep -q '^listening on' "$tmp/cnlabd-$s.out"
}
start_site a 0 --secrets-key-file "$tmp/a.key" || {
	cat "$tmp/cnlabd-a.err"
	exit 1
}
start_site b 0 --tls-cert "$tmp/b-cert.pem" --tls-key "$tmp/b-key.pem" || {
	cat "$tmp/cnlabd-b.err"
	exit 1
}
pa=$(sed -n 's/^listening on 127\.0\.0\.1:\([0-9]*\)$/\1/p' "$tmp/cnlabd-a.out")
pb=$(sed -n 's/^listening on 127\.0\.0\.1:\([0-9]*\)$/\1/p' "$tmp/cnlabd-b.out")
A=http://127.0.0.1:$pa
B=https://127.0.0.1:$pb

adm_a() { XDG_CONFIG_HOME=$tmp/xdg-adm-a "$cnlab" "$@"; }
adm_b() { XDG_CONFIG_HOME=$tmp/xdg-adm-b CNLAB_CA_FILE=$tmp/b-cert.pem "$cnlab" "$@"; }
ana() { XDG_CONFIG_HOME=$tmp/xdg-ana "$cnlab" "$@"; }
echo admin-password-1 | adm_a login --server "$A" --user root --password-stdin >/dev/null ||
	bad "login at A"
echo admin-password-1 | adm_b login --server "$B" --user root --password-stdin >/dev/null \
	2>"$tmp/login-b.err" || bad "login at B (CNLAB_CA_FILE): $(cat "$tmp/login-b.err")"

# start_agent S: a cnlab-agent with one fake H100 at site S.
start_agent() {
	local s=$1 url tok
	url=$([ "$s" = a ] && echo "$A" || echo "$B")
	tok=$("adm_$s" node join-token --node "$run-$s" -o json | jq -r .token)
	CNLAB_AGENT_TOKEN=$tok "$agent" --server "$url" --cafile "$tmp/b-cert.pem" \
		--name "$run-$s" --gpus fake:1xH100-80GB-SXM --work-dir "$tmp/agent-$s" \
		--cpu-milli 4000 --mem-mib 8192 --mounts "$shared:/shared" \
		>>"$tmp/agent-$s.out" 2>>"$tmp/agent-$s.err" &
	pids+=($!)
	wait_for 20 grep -q 'msg=registered' "$tmp/agent-$s.err"
}
start_agent a || bad "agent a: $(cat "$tmp/agent-a.err")"
start_agent b || bad "agent b: $(tail -5 "$tmp/agent-b.err")"

# --- site B grants site A a project ----------------------------------------
adm_b project create partners >/dev/null && adm_b project create other >/dev/null ||
	bad "projects at B"
adm_b peer grant site-a --project partners >"$tmp/tok" 2>"$tmp/grant.err" &&
	[ "$(wc -l <"$tmp/tok")" = 1 ] && grep -q "shown once" "$tmp/grant.err" &&
	ok "peer grant: the token alone on stdout, shown once" || bad "grant: $(cat "$tmp/grant.err")"
adm_b peer grants | grep -Eq '^site-a +peer-site-a +partners$' &&
	ok "peer grants lists it" || bad "grants: $(adm_b peer grants)"
adm_b peer grant site-a --project partners >/dev/null 2>"$tmp/o"
[ $? != 0 ] && grep -q "has a grant already" "$tmp/o" && ok "a second grant for the same peer: refused" ||
	bad "second grant: $(cat "$tmp/o")"
adm_b peer grant site-z --project nosuch >/dev/null 2>"$tmp/o"
[ $? = 4 ] && grep -q 'project' "$tmp/o" && ok "a grant to a missing project: not found, named" ||
	bad "grant nosuch: $(cat "$tmp/o")"
# The token's reach: its project only.
peer_b() { XDG_CONFIG_HOME=$tmp/xdg-none CNLAB_CA_FILE=$tmp/b-cert.pem CNLAB_TOKEN=$(cat "$tmp/tok") \
	CNLAB_SERVER=$B "$cnlab" "$@"; }
peer_b project list 2>/dev/null | grep -q partners && ! peer_b project list 2>/dev/null | grep -q other &&
	ok "the peer's token sees its project only" || bad "peer projects: $(peer_b project list 2>&1)"
echo 'echo x' >"$tmp/x.sh"
(cd "$tmp" && peer_b run x.sh --project other --gpu h100-25 --detach >/dev/null 2>&1)
rc=$?
[ $rc = 4 ] || [ $rc = 5 ] && ok "nor can it submit to another project there (exit $rc)" ||
	bad "peer submits to other: rc=$rc"
peer_b peer grants >/dev/null 2>&1
[ $? = 5 ] && ok "nor administer the peer site (exit 5)" || bad "peer admin"
peer_b token create more >/dev/null 2>&1
[ $? = 5 ] && ok "nor make tokens of its own, which a revoke would miss (exit 5)" || bad "peer token create"

# --- site A adds B ---------------------------------------------------------
echo ana-password-1 | adm_a user create ana --password-stdin >/dev/null || bad "user create"
adm_a project create lab >/dev/null && adm_a project member add lab ana >/dev/null || bad "lab"
echo ana-password-1 | ana login --server "$A" --user ana --password-stdin >/dev/null || bad "ana login"
ana project use lab >/dev/null || bad "project use"
adm_a cluster set-policy default --wait-target 2 >/dev/null || bad "wait target"
adm_a peer add site-b --url http://10.1.2.3:8443 --token-from-file "$tmp/tok" >/dev/null 2>"$tmp/o"
[ $? = 2 ] && grep -q '"url"' "$tmp/o" && ok "a plain-http URL off the loopback: refused, field named" ||
	bad "http url: $(cat "$tmp/o")"
adm_a peer add site-b --url "$B" >/dev/null 2>"$tmp/o"
[ $? = 2 ] && grep -q 'token-from-file' "$tmp/o" && ok "peer add without a token: usage" ||
	bad "no token: $(cat "$tmp/o")"
adm_a peer add wrong-ca --url "$B" --token-from-file "$tmp/tok" --ca "$tmp/x-cert.pem" >/dev/null ||
	bad "add wrong-ca"
has_error() { adm_a peer list -o json | jq -e --arg p "$1" '.items[] | select(.name == $p) | .error != null' >/dev/null; }
wait_for 30 has_error wrong-ca &&
	ok "a peer whose certificate does not chain to the CA given: refused at the handshake ($(adm_a peer list -o json | jq -r '.items[] | select(.name == "wrong-ca") | .error'))" ||
	bad "wrong CA: $(adm_a peer list)"
adm_a peer remove wrong-ca >/dev/null || bad "remove wrong-ca"
adm_a peer add site-b --url "$B" --token-from-file "$tmp/tok" --ca "$tmp/b-cert.pem" >"$tmp/o" 2>&1 &&
	grep -q "Peer site-b" "$tmp/o" && ok "peer add: B's URL, CA and token" || bad "peer add: $(cat "$tmp/o")"
adm_a peer list -o json | jq -e '.items[0] | has("token") or has("token_sealed") | not' >/dev/null &&
	ok "peer list shows no token" || bad "peer list: $(adm_a peer list -o json)"
[ "$(wc -c <"$tmp/tok")" -gt 30 ] || bad "the grant's token: $(cat "$tmp/tok")"
for db in "$tmp"/db-a/*; do
	[ -f "$db" ] && grep -qaF "$(cat "$tmp/tok")" "$db" && bad "the token is in clear in $db"
done
ok "the token is not in A's database in clear"

# --- a job waits at A past its wait target: it runs at B -------------------
cat >"$tmp/hold.sh" <<'SH'
while [ ! -e "/shared/$1" ]; do sleep 0.1; done
echo "done $1"
SH
cat >"$tmp/hello.sh" <<'SH'
echo "hello from job $CNLAB_JOB_ID"
exit 3
SH
cd "$tmp" || exit 1
h1=$(ana run hold.sh go-h1 --gpu h100-100 --detach 2>/dev/null)
state() { ana jobs show "$1" -o json | jq -r .state; }
is_state() { [ "$(state "$1")" = "$2" ]; }
wait_for 60 is_state "$h1" running || bad "h1: $(state "$h1")"
XDG_CONFIG_HOME=$tmp/xdg-ana timeout 300 "$cnlab" run hello.sh --gpu h100-100 \
	>"$tmp/hello.out" 2>"$tmp/hello.err" </dev/null
rc=$?
j=$(ana jobs list -o json | jq -r '[.items[] | select(.command | test("hello"))][0].id')
rj=$(ana jobs show "$j" -o json | jq -r .peer_job)
[ "$rc" = 3 ] && grep -q "hello from job $rj" "$tmp/hello.out" &&
	ok "cnlab run at A followed the job to its end at B (its job $rj there): its output and exit code (3)" ||
	bad "run: rc=$rc $(cat "$tmp/hello.out" "$tmp/hello.err")"
show=$(ana jobs show "$j")
grep -q '^State:     failed' <<<"$show" && grep -q '^Site:      peer site-b, as job job_' <<<"$show" &&
	ok "jobs show at A: one job, ended as at B, with where it ran" || bad "show: $show"
ana jobs logs "$j" 2>/dev/null | grep -q "hello from job $rj" && ok "logs at A: the output from B" ||
	bad "logs: $(ana jobs logs "$j" 2>&1)"
adm_b jobs show "$rj" -o json >"$tmp/rj.json" 2>&1
[ "$(jq -r .state "$tmp/rj.json")" = failed ] && [ "$(jq -r .exit_code "$tmp/rj.json")" = 3 ] &&
	ok "B ran it as its own job $rj (in project partners)" || bad "B's job: $(cat "$tmp/rj.json")"
audit_a() { adm_a audit --limit 1000 -o json 2>/dev/null | jq -r '.items[] | .action + " " + .target + " " + .result'; }
audit_b() { adm_b audit --limit 1000 -o json 2>/dev/null | jq -r '.items[] | .actor + " " + .action + " " + .target'; }
audit_a | grep -q "^sched.federation $j forwarded to peer site-b as job $rj: waited" &&
	audit_a | grep -q "^sched.federation $j ended failed at peer site-b" &&
	ok "A's audit: the forward (where, why) and its end" || bad "audit A: $(audit_a | tail -5)"
ana jobs explain "$j" | grep -q "federation .*forwarded to peer site-b as job $rj" &&
	ok "jobs explain at A shows the forward among the scheduler's decisions" ||
	bad "explain: $(ana jobs explain "$j")"
uid=$(adm_b user list -o json | jq -r '.items[] | select(.name == "peer-site-a") | .id')
audit_b | grep -q "^$uid job.create $rj" && ok "B's audit: the job made by the peer's service user" ||
	bad "audit B: $(audit_b | grep job.create)"

# --- a cancel at A cancels at B -------------------------------------------
echo 'sleep 300' >"$tmp/long.sh"
l=$(ana run long.sh --gpu h100-100 --detach 2>/dev/null)
remote_of() { ana jobs show "$1" -o json | jq -r '.peer_job // empty'; }
wait_for 60 is_state "$l" running && rl=$(remote_of "$l") && [ -n "$rl" ] ||
	bad "long: $(ana jobs show "$l")"
b_state() { adm_b jobs show "$1" -o json | jq -r .state; }
[ -n "${rl:-}" ] && [ "$(b_state "$rl")" = running ] && ok "the forwarded job runs at B" ||
	bad "long at B: $(b_state "${rl:-x}")"
ana jobs cancel "$l" >/dev/null 2>&1 || bad "cancel"
wait_for 60 is_state "$l" cancelled && [ "$(b_state "$rl")" = cancelled ] &&
	ok "cancelled at A: cancelled at B" || bad "cancel: A $(state "$l") B $(b_state "${rl:-x}")"

# --- A killed while a job of its runs at B: restarted, it follows it on ----
k=$(ana run hold.sh go-k --gpu h100-100 --detach 2>/dev/null)
wait_for 60 is_state "$k" running && rk=$(remote_of "$k") && [ -n "$rk" ] ||
	bad "k: $(ana jobs show "$k")"
kill -9 "$pid_a"
wait "$pid_a" 2>/dev/null
start_site a "$pa" --secrets-key-file "$tmp/a.key" || bad "restart A: $(tail -3 "$tmp/cnlabd-a.err")"
touch "$shared/go-k"
wait_for 60 is_state "$k" succeeded && ana jobs logs "$k" 2>/dev/null | grep -q "done go-k" &&
	[ "$(remote_of "$k")" = "${rk:-x}" ] && [ "$(b_state "${rk:-x}")" = succeeded ] &&
	ok "A killed -9 while its job ran at B: the restarted A followed it to its end (one job at B)" ||
	bad "restart: $(ana jobs show "$k") B: $(b_state "${rk:-x}")"
[ "$(adm_b jobs list --project partners -o json | jq '[.items[] | select(.command | test("go-k"))] | length')" = 1 ] &&
	ok "and B holds it once" || bad "B's copies: $(adm_b jobs list --project partners)"

# --- on-prem-only work never leaves ----------------------------------------
adm_a project create secretlab >/dev/null && adm_a project member add secretlab ana >/dev/null &&
	adm_a project mark secretlab --on-prem-only >/dev/null || bad "secretlab"
s=$(ana run hello.sh --project secretlab --gpu h100-100 --detach 2>/dev/null)
sleep 8 # four wait targets
is_state "$s" pending && [ -z "$(remote_of "$s")" ] && ! audit_a | grep -q "^sched.federation $s" &&
	ok "an on-prem-only project's job waits at A, never forwarded" || bad "on-prem: $(ana jobs show "$s")"

# --- B's quota holds for what A sends ----------------------------------------
adm_b quota set --project partners --gpu-hours 0 >/dev/null || bad "quota at B"
q=$(ana run hello.sh --gpu h100-100 --detach 2>/dev/null)
refused() { audit_a | grep -q "^sched.federation $q refused by peer site-b: .*GPU-hours"; }
wait_for 60 refused && is_state "$q" pending && [ -z "$(remote_of "$q")" ] &&
	ok "beyond B's quota: B refuses, the job is back in A's queue (audited, the limit named)" ||
	bad "quota: $(audit_a | grep "$q" | tail -3) $(ana jobs show "$q") $(adm_a peer list -o json)"
touch "$shared/go-h1"
wait_for 90 is_state "$q" failed && ana jobs logs "$q" | grep -q "hello from job $q" &&
	ok "it then ran at A" || bad "q at A: $(ana jobs show "$q")"
wait_for 90 is_state "$s" failed || bad "s: $(state "$s")"

# --- B revokes the grant --------------------------------------------------
out=$(adm_b peer revoke site-a 2>&1) && grep -q "revoked" <<<"$out" && ok "peer revoke" || bad "revoke: $out"
peer_b jobs list --project partners >/dev/null 2>&1
[ $? = 3 ] && ok "the revoked token is refused (exit 3)" || bad "revoked token works"
adm_b peer grants | grep -q site-a && bad "the grant is still listed"
adm_b quota set --project partners --gpu-hours none >/dev/null || bad "quota none"
h2=$(ana run hold.sh go-h2 --gpu h100-100 --detach 2>/dev/null)
wait_for 60 is_state "$h2" running || bad "h2"
r=$(ana run hello.sh --gpu h100-100 --detach 2>/dev/null)
rev() { audit_a | grep -q "^sched.federation $r refused by peer site-b"; }
wait_for 60 rev && is_state "$r" pending && [ -z "$(remote_of "$r")" ] &&
	ok "after the revoke: A's forward is refused, the job stays at A" || bad "after revoke: $(audit_a | tail -3)"
adm_a peer list -o json | jq -e '.items[] | select(.name == "site-b") | .error | test("401")' >/dev/null &&
	ok "peer list at A names the refusal" || bad "peer list: $(adm_a peer list -o json)"
touch "$shared/go-h2"
wait_for 90 is_state "$r" failed || bad "r: $(state "$r")"
# Granted again: a fresh token; the old one stays dead. A takes it by
# adding the peer again (which replaces it).
adm_b peer grant site-a --project partners >"$tmp/tok2" 2>/dev/null || bad "grant again"
peer_b jobs list --project partners >/dev/null 2>&1
[ $? = 3 ] && [ "$(cat "$tmp/tok2")" != "$(cat "$tmp/tok")" ] &&
	ok "granted again: a new token, and the revoked one still refused" || bad "regrant: old token works"
out=$(adm_a peer add site-b --url "$B" --token-from-file "$tmp/tok2" --ca "$tmp/b-cert.pem" -o json 2>&1)
ok_again() { adm_a peer list -o json | jq -e '.items[] | select(.name == "site-b") | .error == null and .last_ok != null' >/dev/null; }
[ "$(jq -r .replaced <<<"$out")" = true ] && wait_for 30 ok_again &&
	ok "peer add again replaces the peer; A reaches B with the new token" || bad "replace: $out $(adm_a peer list -o json)"
adm_a peer remove site-b >"$tmp/o" 2>&1 && ok "peer remove once nothing is forwarded" ||
	bad "peer remove: $(cat "$tmp/o")"

[ "$fails" = 0 ] || {
	tail -20 "$tmp/cnlabd-a.err"
	tail -20 "$tmp/cnlabd-b.err"
	exit 1
}
echo "all ok"
