#!/usr/bin/env bash
# burst_naver.sh - the burst policy on NAVER Cloud Platform, end to end: a
# real cnlabd, a real agent on one fake H100 (the GPUs owned) and a
# loopback Naver Server (VPC) API (fake_naver.py: every call's
# x-ncp-apigw-signature-v2 checked with the account's secret key, init
# scripts, servers that are INIT then RUN, returned only once stopped)
# whose servers run their init script, so that each cloud "server" is a
# real cnlab-agent that joins with its one-time join token.  Typed as an
# operator would: cnlab cloud add naver --account VPC --region KR --subnet
# N --access-key-id ... --secret-from-file ..., cnlab policy burst
# --provider naver ...
#   - the secret key is sealed: never shown by the API, never in cnlabd's
#     logs nor its database in clear; a region or subnet not in Naver's
#     form is refused, naming it;
#   - work no owned GPU can run bursts: Naver sells no spot servers, so
#     spot-then-on-demand goes on to on-demand; a product out of stock
#     moves to the next type; a create whose answer is lost (504) is found
#     by its name, not made twice; the server is made as Naver wants it
#     (the VPC, subnet, image, product, first network interface, hourly
#     rate, an init script holding the user data, CNLab's description);
#     the job runs on it;
#   - an idle server is fenced, stopped within 30 s (Naver returns only a
#     stopped server) and then returned; its init script deleted; a slow
#     stop holds no launch back (terminations have a thread of their own);
#   - rate limiting (429) is retried; an outage (503) launches nothing,
#     audited, and after it the burst launches again.
# Waits poll with generous bounds; no assertion depends on speed.
set -u
cnlabd=$(realpath "$1")
agent=$(realpath "$2")
cnlab=$(realpath "$3")
here=$(cd "$(dirname "$0")" && pwd)
tmp=$(mktemp -d)
run=bn$$
cloud=cloud-naver
pids=()
# shellcheck source=tests/integration/lib.sh
. "$here/lib.sh" # ok, bad, wait_for, $fails
# shellcheck source=tests/integration/burst_lib.sh
. "$here/burst_lib.sh" # burst_env, burst_cleanup, burst_start, state, ...
trap burst_cleanup EXIT

burst_env ncp
VPC=31337
SUBNET=42424
AKID=ncp_iam_BPAMKR5xTestAccessKey01
SECRET='ncp_iam_BPKMKRtestSecretKey-0123456789abcdefXYZ'
T1=SVR.VSVR.GPU.T4.G001.C004.M020.NET.SSD.B050.G001
T2=SVR.VSVR.GPU.T4.G002.C016.M080.NET.SSD.B050.G001
T3=SVR.VSVR.GPU.L4.G001.C008.M032.NET.SSD.B050.G001
printf '%s' "$SECRET" >"$tmp/ncp-secret"

CNLAB_AGENT_MOUNTS=$shared:/shared python3 "$here/fake_naver.py" "$tmp/ncp" \
	"$AKID" "$tmp/ncp-secret" "$VPC" "$SUBNET" "$tmp/ncp.port" 2>"$tmp/ncp.err" &
pids+=($!)
wait_for 20 test -s "$tmp/ncp.port" || { cat "$tmp/ncp.err"; exit 1; }
ncp=http://127.0.0.1:$(cat "$tmp/ncp.port")

burst_start SW.VSVR.OS.LNX64.UBNTU.SVR2004.B050

# --- the operator's set-up, as typed ---------------------------------------
add() {
	"$cnlab" cloud add naver --account "$VPC" --instance-types "$T1,$T2,$T3" --endpoint "$ncp" \
		--access-key-id "$AKID" --secret-from-file "$tmp/ncp-secret" "$@"
}
add --region kr --subnet "$SUBNET" >/dev/null 2>"$tmp/bad.err"
[ $? != 0 ] && grep -q 'region.*KR' "$tmp/bad.err" &&
	ok "a region not as Naver writes it is refused, naming region" || bad "region: $(cat "$tmp/bad.err")"
add --region KR --subnet "$SUBNET" --type-specs "$T3=1xL4:8:32" >/dev/null 2>"$tmp/bad.err"
[ $? = 2 ] && grep -q -- '--type-specs' "$tmp/bad.err" &&
	ok "a type spec without its price: exit 2 naming --type-specs" || bad "spec: $(cat "$tmp/bad.err")"
add --region KR --subnet "$SUBNET" --type-specs "$T3=1xQ9000:8:32:1.25" >/dev/null 2>"$tmp/bad.err"
[ $? != 0 ] && grep -q 'types.*catalog' "$tmp/bad.err" &&
	ok "a type spec of a GPU the catalog does not know is refused, naming types" || bad "model: $(cat "$tmp/bad.err")"
add --region KR >/dev/null 2>"$tmp/bad.err"
[ $? != 0 ] && grep -q 'subnet' "$tmp/bad.err" &&
	ok "an account without its subnet is refused, naming subnet" || bad "subnet: $(cat "$tmp/bad.err")"
add --region KR --subnet "$SUBNET" --type-specs "$T3=1xL4:8:32:1.25" >"$tmp/add.out" 2>&1 &&
	grep -q 'credentials sealed' "$tmp/add.out" &&
	ok "cloud add naver with an API key, and a type of its own" || bad "cloud add: $(cat "$tmp/add.out")"
"$cnlab" cloud list -o json >"$tmp/list.json"
jq -e --arg k "$AKID" --arg t "$T3" '.items[0].credentials.access_key_id == $k and .items[0].credentials.secret_set and
	.items[0].subnet == "42424" and .items[0].types[$t].model == "L4"' "$tmp/list.json" >/dev/null && ! grep -q -- "$SECRET" "$tmp/list.json" &&
	ok "the API shows the access key, never the secret" || bad "list: $(cat "$tmp/list.json")"
"$cnlab" policy burst --threshold 0.50 --provider naver --strategy spot-then-on-demand \
	--max-cloud-budget 1000 >"$tmp/pol.out" 2>&1 && ok "policy burst --provider naver" ||
	bad "policy burst: $(cat "$tmp/pol.out")"

cd "$tmp" || exit 1
calls() { jq -c "$1" "$tmp/ncp/calls.log" 2>/dev/null; }
creates() { calls 'select(.action=="createServerInstances")'; }
srv() { jq -r "$1" "$tmp/ncp/servers.json" 2>/dev/null; }
server_of_node() { srv "to_entries[] | select(.value.tags[\"cnlab:node\"]==\"$1\") | .key"; }

# --- work no owned GPU can run bursts: on-demand (no spot), out of stock,
# --- a lost answer -----------------------------------------------------------
printf 'stock\nlost\n' >"$tmp/ncp/fail-run"
j1=$("$cnlab" run --detach --gpu t4-100 wait.sh go1 2>/dev/null)
wait_for 90 on_cloud "$j1" && ok "T4 work bursts to Naver: j1 runs on cloud node $(node_of "$j1")" ||
	bad "j1: $(state "$j1") on $(node_of "$j1"); $(tail -5 "$tmp/cnlabd.err")"
cloud1=$(node_of "$j1")
s1=$(server_of_node "$cloud1")
[ "$(creates | jq -s -c 'map(.status)')" = "[400,504]" ] &&
	[ "$(srv 'length')" = 1 ] && [ "$(srv ".\"$s1\".serverProductCode")" = "$T2" ] &&
	has_audit "cloud.launch.*launched $T2 .* on-demand" &&
	! audit | grep -q "cloud.launch.*spot [0-9]" &&
	ok "no spot on Naver: on-demand; the first type out of stock, the next made once though its answer was lost" ||
	bad "creates: $(creates | jq -c '[.query.serverProductCode, .status]') servers: $(srv 'keys') $(audit | grep cloud.launch)"
[ -n "$s1" ] && creates | tail -1 | jq -e --arg v "$VPC" --arg s "$SUBNET" --arg t "$T2" \
	'.query.vpcNo == $v and .query.subnetNo == $s and .query.serverProductCode == $t and
	.query.serverImageProductCode == "SW.VSVR.OS.LNX64.UBNTU.SVR2004.B050" and
	.query["networkInterfaceList.1.networkInterfaceOrder"] == "0" and .query.feeSystemTypeCode == "MTRAT" and
	(.query.serverName | test("^cnlab-[0-9a-f]{12}-0$")) and (.query.initScriptNo | length > 0) and
	(.query.serverDescription | startswith("cnlab-managed "))' >/dev/null &&
	srv ".\"$s1\".tags[\"cnlab:record\"]" | grep -q . &&
	ok "the server is made as Naver wants it: VPC, subnet, product, image, NIC order, hourly rate, init script, description" ||
	bad "create: $(creates | tail -1)"
grep -q "join" "$tmp/ncp/$s1/user-data" 2>/dev/null && [ "$(jq length "$tmp/ncp/scripts.json")" -ge 1 ] &&
	ok "the user data went in an init script, which the server ran" || bad "init script: $(cat "$tmp/ncp/scripts.json")"
"$cnlab" node show "$cloud1" -o json | jq -e '.labels.cluster == "cloud-naver" or .cluster == "cloud-naver"' >/dev/null &&
	ok "the server joined cluster cloud-naver" || bad "node: $("$cnlab" node show "$cloud1" -o json)"
[ "$(calls 'select(.status==401)' | wc -l)" = 0 ] && [ "$(calls . | wc -l)" -ge 6 ] &&
	ok "every call was signed with the account's key (no 401 in $(calls . | wc -l) calls)" ||
	bad "401s: $(calls 'select(.status==401)' | wc -l)"
"$cnlab" cloud instances | grep -q "$T2" &&
	ok "cnlab cloud instances lists the server" || bad "cloud instances: $("$cnlab" cloud instances)"

# --- idle: fenced, stopped within 30 s, then returned ------------------------
# Its stop takes 12 s; L4 work (j4) that comes meanwhile launches at once.
echo 12 >"$tmp/ncp/slow-stop"
touch "$shared/go1"
wait_for 30 is_state "$j1" succeeded || bad "j1 end: $(state "$j1")"
wait_for 40 sh -c "jq -e 'select(.action==\"stopServerInstances\" and .status==200)' '$tmp/ncp/calls.log' >/dev/null" ||
	bad "no stop: $(srv ".\"$s1\"")"
j4=$("$cnlab" run --detach --gpu l4-100 wait.sh go4 2>/dev/null)
wait_for 60 on_cloud "$j4" || bad "j4: $(state "$j4") $(audit | grep cloud.launch | tail -2)"
wait_for 60 sh -c "[ \"\$(jq -r '.\"$s1\".deleted' '$tmp/ncp/servers.json')\" = true ]" &&
	ok "the idle server is returned" || bad "server $s1: $(srv ".\"$s1\"")"
end_s=$("$cnlab" jobs show "$j1" -o json | jq -r '.updated_at' | xargs -I{} date -d {} +%s.%N)
stop_s=$(calls "select(.action==\"stopServerInstances\" and .status==200 and .query[\"serverInstanceNoList.1\"]==\"$s1\") | .at" | head -1)
[ -n "$end_s" ] && [ -n "$stop_s" ] &&
	awk -v a="$end_s" -v b="$stop_s" 'BEGIN { exit !(b - a <= 30 && b >= a) }' &&
	ok "stopped $(awk -v a="$end_s" -v b="$stop_s" 'BEGIN { printf "%.1f", b - a }') s after its last work ended (promise: 30 s)" ||
	bad "end $end_s, stop $stop_s"
[ "$(calls 'select(.action=="terminateServerInstances")' | jq -s -c 'map(.status)')" = "[200]" ] &&
	ok "returned once stopped (never refused)" ||
	bad "terminate: $(calls 'select(.action=="terminateServerInstances")' | jq -c .status)"
term_s=$(calls 'select(.action=="terminateServerInstances" and .status==200) | .at' | head -1)
make_s=$(creates | jq -r 'select(.status==200) | .at' | tail -1)
[ -n "$term_s" ] && [ -n "$make_s" ] && awk -v a="$make_s" -v b="$term_s" 'BEGIN { exit !(a < b) }' &&
	ok "j4's server was made while j1's was still stopping (no launch waits for a return)" ||
	bad "made $make_s, returned $term_s"
rm -f "$tmp/ncp/slow-stop"
"$cnlab" jobs cancel "$j4" >/dev/null
touch "$shared/go4"
wait_for 60 sh -c "[ \"\$(jq '[.[] | select(.deleted != true)] | length' '$tmp/ncp/servers.json')\" = 0 ]" &&
	[ "$(jq length "$tmp/ncp/scripts.json")" = 0 ] &&
	ok "every server returned, and their init scripts deleted" ||
	bad "left: $(srv '[.[] | select(.deleted != true) | .serverName]') scripts $(cat "$tmp/ncp/scripts.json")"
"$cnlab" node show "$cloud1" -o json | jq -e '.state == "lost"' >/dev/null &&
	ok "its node is fenced" || bad "fenced: $("$cnlab" node show "$cloud1" -o json | jq -c .)"

# --- an outage launches nothing; after it, a 429 retried, then a launch ------
# (L4 work: only the account's own type has L4s.)
touch "$tmp/ncp/fail-all"
n_before=$(srv 'length')
j2=$("$cnlab" run --detach --gpu l4-100 wait.sh go2 2>/dev/null)
wait_for 60 has_audit "cloud.launch.*launch failed (unavailable" &&
	[ "$(srv 'length')" = "$n_before" ] &&
	ok "an outage (503): the launch fails, audited, nothing made" ||
	bad "outage: $(audit | grep cloud.launch | tail -2)"
echo 429 >"$tmp/ncp/fail-run"
rm -f "$tmp/ncp/fail-all"
wait_for 90 on_cloud "$j2" && ok "after the outage the burst launches again" ||
	bad "j2: $(state "$j2") $(audit | grep cloud.launch | tail -3)"
creates | jq -s -e 'map(.status) | index(429) != null' >/dev/null && [ "$(srv 'length')" = $((n_before + 1)) ] &&
	ok "rate limiting (429) is retried, one server made" || bad "429: $(creates | jq -c .status) $(srv 'keys')"
has_audit "cloud.launch.*launched $T3 .* on-demand 1.2500/h" &&
	ok "L4 work went to the account's own type, at its declared price" ||
	bad "declared type: $(audit | grep cloud.launch | tail -2)"
"$cnlab" jobs cancel "$j2" >/dev/null

! grep -q -- "$SECRET" "$tmp/cnlabd.out" "$tmp/cnlabd.err" &&
	! grep -rqs -- "$SECRET" "$tmp/db" &&
	ok "the secret key is neither in cnlabd's logs nor in its database in clear" ||
	bad "the secret leaked"
touch "$shared/go2"

[ $fails = 0 ] && echo "all passed" || echo "$fails failed"
[ $fails = 0 ]
