#!/usr/bin/env bash
# burst_kt.sh - the burst policy on KT Cloud, end to end: a real cnlabd, a
# real agent on one fake H100 (the GPUs owned) and a loopback KT Cloud
# server API (fake_kt.py: Apache CloudStack's API, every request's
# signature checked with the account's secret key, deploys as asynchronous
# jobs) whose VMs run their user data, so that each cloud "VM" is a real
# cnlab-agent that joins with its one-time join token.  Typed as an
# operator would: cnlab cloud add kt --account NAME --region ZONE-ID
# --type-specs OFFERING=1xT4:8:32:0.95 --access-key-id ... --secret-from-file
# ..., cnlab policy burst --provider kt ...
#   - the secret key is sealed: never shown by the API, never in cnlabd's
#     logs nor its database in clear; an endpoint without the API's path is
#     refused; KT's offerings are the account's own types;
#   - work no owned GPU can run bursts: KT sells no spot VMs, so
#     spot-then-on-demand goes on to on-demand; an offering without
#     capacity (the deploy job fails with 533 and leaves a VM in Error,
#     which is destroyed) moves to the next; a deploy whose answer is lost
#     (504) is found by its name, not made twice; the job runs on the VM;
#   - an idle VM is fenced and destroyed within 30 s;
#   - rate limiting (429) is retried; an outage (530) launches nothing,
#     audited, and after it the burst launches again.
# Waits poll with generous bounds; no assertion depends on speed.
set -u
cnlabd=$(realpath "$1")
agent=$(realpath "$2")
cnlab=$(realpath "$3")
here=$(cd "$(dirname "$0")" && pwd)
tmp=$(mktemp -d)
run=bk$$
cloud=cloud-kt
pids=()
# shellcheck source=tests/integration/lib.sh
. "$here/lib.sh" # ok, bad, wait_for, $fails
# shellcheck source=tests/integration/burst_lib.sh
. "$here/burst_lib.sh" # burst_env, burst_cleanup, burst_start, state, ...
trap burst_cleanup EXIT

burst_env kt
ZONE=95e2f517-d64a-4866-8585-5177c256f7c7
APIKEY=miVr6X7u6bN_sdahOBpjNejPgEsT35eXq-jB8CG20YI3yaxXcgpyuaIRmFI_EJTVwZ0nUkkJbPmY3y2bciKwFQ
SECRET='kt-burst-test-secret+/=0123456789abcdefXYZ'
T1=5b8a7f40-t4x1-4c3e-9d51-000000000001
T2=5b8a7f40-t4x2-4c3e-9d51-000000000002
TEMPLATE=0c3f9a55-6d2e-4e0f-b7a1-ubuntu2204gpu
printf '%s' "$SECRET" >"$tmp/kt-secret"

CNLAB_AGENT_MOUNTS=$shared:/shared python3 "$here/fake_kt.py" "$tmp/kt" \
	"$APIKEY" "$tmp/kt-secret" "$ZONE" "$tmp/kt.port" 2>"$tmp/kt.err" &
pids+=($!)
wait_for 20 test -s "$tmp/kt.port" || { cat "$tmp/kt.err"; exit 1; }
kt=http://127.0.0.1:$(cat "$tmp/kt.port")

burst_start "$TEMPLATE"

# --- the operator's set-up, as typed ---------------------------------------
add() {
	"$cnlab" cloud add kt --account cnlab-lab --region "$ZONE" --instance-types "$T1,$T2" \
		--type-specs "$T1=1xT4:8:32:0.95,$T2=2xT4:16:64:1.80" \
		--access-key-id "$APIKEY" --secret-from-file "$tmp/kt-secret" "$@"
}
add --endpoint "http://127.0.0.1:${kt##*:}" >/dev/null 2>"$tmp/bad.err"
[ $? != 0 ] && grep -q 'endpoint' "$tmp/bad.err" &&
	ok "an endpoint without the API's path is refused, naming endpoint" || bad "endpoint: $(cat "$tmp/bad.err")"
add --endpoint "$kt/server/v1/client/api" >"$tmp/add.out" 2>&1 && grep -q 'credentials sealed' "$tmp/add.out" &&
	ok "cloud add kt with an API key and its offerings as types" || bad "cloud add: $(cat "$tmp/add.out")"
"$cnlab" cloud list -o json >"$tmp/list.json"
jq -e --arg k "$APIKEY" --arg t "$T1" '.items[0].credentials.access_key_id == $k and .items[0].credentials.secret_set and
	.items[0].types[$t].gpus == 1' "$tmp/list.json" >/dev/null && ! grep -q -- "$SECRET" "$tmp/list.json" &&
	ok "the API shows the API key, never the secret" || bad "list: $(cat "$tmp/list.json")"
"$cnlab" policy burst --threshold 0.50 --provider kt --strategy spot-then-on-demand \
	--max-cloud-budget 1000 >"$tmp/pol.out" 2>&1 && ok "policy burst --provider kt" ||
	bad "policy burst: $(cat "$tmp/pol.out")"

cd "$tmp" || exit 1
calls() { jq -c "$1" "$tmp/kt/calls.log" 2>/dev/null; }
deploys() { calls 'select(.command=="deployVirtualMachine")'; }
vm() { jq -r "$1" "$tmp/kt/vms.json" 2>/dev/null; }
vm_of_node() { vm "to_entries[] | select(.value.tags[\"cnlab:node\"]==\"$1\" and .value.expunged != true) | .key"; }

# --- work no owned GPU can run bursts: on-demand (no spot), no capacity, a
# --- lost answer ---------------------------------------------------------------
printf 'capacity\nlost\n' >"$tmp/kt/fail-run"
j1=$("$cnlab" run --detach --gpu t4-100 wait.sh go1 2>/dev/null)
wait_for 90 on_cloud "$j1" && ok "T4 work bursts to KT Cloud: j1 runs on cloud node $(node_of "$j1")" ||
	bad "j1: $(state "$j1") on $(node_of "$j1"); $(tail -5 "$tmp/cnlabd.err")"
cloud1=$(node_of "$j1")
v1=$(vm_of_node "$cloud1")
[ "$(deploys | jq -s -c 'map(.status)')" = "[200,504]" ] &&
	[ "$(vm '[.[] | select(.expunged != true)] | length')" = 1 ] &&
	[ "$(vm ".\"$v1\".serviceofferingid")" = "$T2" ] &&
	has_audit "cloud.launch.*launched $T2 .* on-demand 1.8000/h" &&
	! audit | grep -q "cloud.launch.*spot [0-9]" &&
	ok "no spot on KT: on-demand; no capacity for the first offering (533), the next made once though its answer was lost" ||
	bad "deploys: $(deploys | jq -c '[.query.serviceofferingid, .status]') vms: $(vm '[.[] | [.name,.state]]') $(audit | grep cloud.launch)"
wait_for 20 sh -c "[ \"\$(jq '[.[] | select(.state == \"Error\" and .expunged != true)] | length' '$tmp/kt/vms.json')\" = 0 ]" &&
	ok "the VM the failed deploy left (state Error) is destroyed" || bad "error VMs: $(vm '[.[] | select(.state == "Error")]')"
[ -n "$v1" ] && deploys | tail -1 | jq -e --arg z "$ZONE" --arg t "$T2" --arg i "$TEMPLATE" \
	'.query.zoneid == $z and .query.serviceofferingid == $t and .query.templateid == $i and
	.query.usageplantype == "hourly" and (.query.name | test("^cnlab-[0-9a-f]{12}-0$")) and
	(.query.displayname | startswith("cnlab-managed "))' >/dev/null &&
	grep -q "join" "$tmp/kt/$v1/user-data" 2>/dev/null &&
	ok "the VM is made as CloudStack wants it: zone, offering, template, hourly, host name, user data that ran" ||
	bad "deploy: $(deploys | tail -1)"
[ "$(calls 'select(.command=="queryAsyncJobResult")' | wc -l)" -ge 2 ] &&
	ok "the deploys were followed as asynchronous jobs" || bad "jobs: $(calls 'select(.command=="queryAsyncJobResult")' | wc -l)"
"$cnlab" node show "$cloud1" -o json | jq -e '.labels.cluster == "cloud-kt" or .cluster == "cloud-kt"' >/dev/null &&
	ok "the VM joined cluster cloud-kt" || bad "node: $("$cnlab" node show "$cloud1" -o json)"
[ "$(calls 'select(.status==401)' | wc -l)" = 0 ] && [ "$(calls . | wc -l)" -ge 6 ] &&
	ok "every request was signed with the account's key (no 401 in $(calls . | wc -l))" ||
	bad "401s: $(calls 'select(.status==401)' | wc -l)"

# --- idle: fenced and destroyed within 30 s ----------------------------------
touch "$shared/go1"
wait_for 30 is_state "$j1" succeeded || bad "j1 end: $(state "$j1")"
wait_for 40 sh -c "[ \"\$(jq -r '.\"$v1\".expunged' '$tmp/kt/vms.json')\" = true ]" &&
	ok "the idle VM is destroyed" || bad "VM $v1: $(vm ".\"$v1\"")"
end_s=$("$cnlab" jobs show "$j1" -o json | jq -r '.updated_at' | xargs -I{} date -d {} +%s.%N)
del_s=$(calls "select(.command==\"destroyVirtualMachine\" and .status==200 and .query.id==\"$v1\") | .at" | head -1)
[ -n "$end_s" ] && [ -n "$del_s" ] &&
	awk -v a="$end_s" -v b="$del_s" 'BEGIN { exit !(b - a <= 30 && b >= a) }' &&
	ok "destroyed $(awk -v a="$end_s" -v b="$del_s" 'BEGIN { printf "%.1f", b - a }') s after its last work ended (promise: 30 s)" ||
	bad "end $end_s, destroy $del_s"
"$cnlab" node show "$cloud1" -o json | jq -e '.state == "lost"' >/dev/null &&
	ok "its node is fenced" || bad "fenced: $("$cnlab" node show "$cloud1" -o json | jq -c .)"

# --- an outage launches nothing; after it, a 429 retried, then a launch ------
touch "$tmp/kt/fail-all"
n_before=$(vm 'length')
j2=$("$cnlab" run --detach --gpu t4-100 wait.sh go2 2>/dev/null)
wait_for 60 has_audit "cloud.launch.*launch failed (unavailable" &&
	[ "$(vm 'length')" = "$n_before" ] &&
	ok "an outage (530): the launch fails, audited, nothing made" ||
	bad "outage: $(audit | grep cloud.launch | tail -2)"
echo 429 >"$tmp/kt/fail-run"
rm -f "$tmp/kt/fail-all"
wait_for 90 on_cloud "$j2" && ok "after the outage the burst launches again" ||
	bad "j2: $(state "$j2") $(audit | grep cloud.launch | tail -3)"
deploys | jq -s -e 'map(.status) | index(429) != null' >/dev/null && [ "$(vm 'length')" = $((n_before + 1)) ] &&
	ok "rate limiting (429) is retried, one VM made" || bad "429: $(deploys | jq -c .status) $(vm 'keys')"
"$cnlab" jobs cancel "$j2" >/dev/null

! grep -q -- "$SECRET" "$tmp/cnlabd.out" "$tmp/cnlabd.err" &&
	! grep -rqs -- "$SECRET" "$tmp/db" &&
	ok "the secret key is neither in cnlabd's logs nor in its database in clear" ||
	bad "the secret leaked"
touch "$shared/go2"

[ $fails = 0 ] && echo "all passed" || echo "$fails failed"
[ $fails = 0 ]
