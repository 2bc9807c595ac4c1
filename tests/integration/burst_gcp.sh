#!/usr/bin/env bash
# burst_gcp.sh - the burst policy on Google Compute Engine, end to end: a
# real cnlabd, a real agent on one fake H100 (the GPUs owned) and a
# loopback Compute Engine (fake_gce.py: the service account's RS256
# assertion checked with its public key, bearer tokens, operations that
# report capacity when they end) whose instances boot their startup
# script, so that each cloud "instance" is a real cnlab-agent that joins
# with its one-time join token.  Typed as an operator would:
# cnlab cloud add gcp --key-file KEY.json ..., cnlab policy burst
# --provider gcp ...
#   - the service account's key is sealed: never shown by the API, never
#     in cnlabd's logs; a file that is no service account key is refused
#     (exit 2, naming --key-file); a region that is no zone is refused;
#   - work no owned GPU can run bursts: spot first, on-demand when spot
#     has no capacity (ZONE_RESOURCE_POOL_EXHAUSTED in the operation); the
#     VM is made as Compute Engine wants a GPU VM (machine type of the
#     zone, the image configured, onHostMaintenance TERMINATE, the label
#     CNLab finds its VMs by, its tags as metadata); the job runs on it;
#   - one assertion earns a token that serves many calls;
#   - an idle VM is fenced and deleted within 30 s;
#   - a spot preemption requeues the work, which bursts again;
#   - rate limiting (429) is retried; an outage (503) launches nothing,
#     audited, and after it the burst launches again.
# Waits poll with generous bounds; no assertion depends on speed.
set -u
cnlabd=$(realpath "$1")
agent=$(realpath "$2")
cnlab=$(realpath "$3")
here=$(cd "$(dirname "$0")" && pwd)
tmp=$(mktemp -d)
run=bg$$
cloud=cloud-gcp
pids=()
# shellcheck source=tests/integration/lib.sh
. "$here/lib.sh" # ok, bad, wait_for, $fails
# shellcheck source=tests/integration/burst_lib.sh
. "$here/burst_lib.sh" # burst_env, burst_cleanup, burst_start, state, ...
trap burst_cleanup EXIT

burst_env gce
EMAIL=cnlab-burst@cnlab-burst.iam.gserviceaccount.com
openssl genpkey -algorithm RSA -pkeyopt rsa_keygen_bits:2048 -out "$tmp/sa.pem" 2>/dev/null &&
	openssl pkey -in "$tmp/sa.pem" -pubout -out "$tmp/sa.pub" || bad "key pair"

CNLAB_AGENT_MOUNTS=$shared:/shared python3 "$here/fake_gce.py" "$tmp/gce" \
	"$EMAIL" "$tmp/sa.pub" "$tmp/gce.port" 2>"$tmp/gce.err" &
pids+=($!)
wait_for 20 test -s "$tmp/gce.port" || { cat "$tmp/gce.err"; exit 1; }
gce=http://127.0.0.1:$(cat "$tmp/gce.port")
# The key as Google's console downloads it (its token URI: the loopback's).
jq -n --rawfile k "$tmp/sa.pem" --arg e "$EMAIL" --arg t "$gce/token" \
	'{type: "service_account", project_id: "cnlab-burst", private_key_id: "0123abcd",
	  private_key: $k, client_email: $e, client_id: "1234567890",
	  auth_uri: "https://accounts.google.com/o/oauth2/auth", token_uri: $t}' >"$tmp/sa.json"
chmod 600 "$tmp/sa.json"
# A line of the key's body, to look for where it must never be.
keyline=$(sed -n 5p "$tmp/sa.pem")

burst_start projects/debian-cloud/global/images/family/debian-12

# --- the operator's set-up, as typed ---------------------------------------
echo '{"type": "authorized_user", "client_id": "x"}' >"$tmp/user.json"
"$cnlab" cloud add gcp --account cnlab-burst --region us-central1-a --instance-types g2-standard-4 \
	--key-file "$tmp/user.json" >/dev/null 2>"$tmp/bad.err"
[ $? = 2 ] && grep -q -- '--key-file' "$tmp/bad.err" &&
	ok "a file that is no service account key: exit 2 naming --key-file" || bad "user key: $(cat "$tmp/bad.err")"
"$cnlab" cloud add gcp --account cnlab-burst --region us-central1 --instance-types g2-standard-4 \
	--key-file "$tmp/sa.json" >/dev/null 2>"$tmp/bad.err"
[ $? != 0 ] && grep -q 'region.*zone' "$tmp/bad.err" &&
	ok "a GCP region that is no zone is refused, naming region" || bad "region: $(cat "$tmp/bad.err")"
"$cnlab" cloud add gcp --account cnlab-burst --region us-central1-a \
	--instance-types g2-standard-4,a2-highgpu-1g,a3-highgpu-8g --endpoint "$gce" \
	--key-file "$tmp/sa.json" >"$tmp/add.out" 2>&1 &&
	grep -q 'credentials sealed' "$tmp/add.out" &&
	ok "cloud add gcp with the service account's key" || bad "cloud add: $(cat "$tmp/add.out")"
"$cnlab" cloud list -o json >"$tmp/list.json"
jq -e --arg e "$EMAIL" '.items[0].credentials.client_email == $e and .items[0].credentials.secret_set' \
	"$tmp/list.json" >/dev/null && ! grep -q -- "$keyline" "$tmp/list.json" &&
	! grep -q 'PRIVATE KEY' "$tmp/list.json" &&
	ok "the API shows whose key it is, never the key" || bad "list: $(cat "$tmp/list.json")"
"$cnlab" policy burst --threshold 0.50 --provider gcp --strategy spot-then-on-demand \
	--max-cloud-budget 1000 >"$tmp/pol.out" 2>&1 && ok "policy burst --provider gcp" ||
	bad "policy burst: $(cat "$tmp/pol.out")"

cd "$tmp" || exit 1
calls() { jq -c "$1" "$tmp/gce/calls.log" 2>/dev/null; }
inserts() { calls 'select(.method=="POST" and (.path|endswith("/instances")))'; }
inst() { jq -r "$1" "$tmp/gce/instances.json" 2>/dev/null; }
name_of_node() { inst "to_entries[] | select(.value.tags[\"cnlab-node\"]==\"$1\") | .key"; }

# --- work no owned GPU can run bursts: spot first, then on-demand -----------
echo "ZONE_RESOURCE_POOL_EXHAUSTED spot" >"$tmp/gce/fail-run"
j1=$("$cnlab" run --detach --gpu l4-100 wait.sh go1 2>/dev/null)
wait_for 60 on_cloud "$j1" && ok "L4 work bursts to GCP: j1 runs on cloud node $(node_of "$j1")" ||
	bad "j1: $(state "$j1") on $(node_of "$j1"); $(tail -5 "$tmp/cnlabd.err")"
cloud1=$(node_of "$j1")
[ "$(inserts | head -1 | jq -r '.body.scheduling.provisioningModel + " " + (.status|tostring)')" = "SPOT 200" ] &&
	[ "$(calls 'select(.path|endswith("/wait"))' | wc -l)" -ge 2 ] &&
	[ "$(inserts | sed -n 2p | jq -r .body.scheduling.provisioningModel)" = STANDARD ] &&
	has_audit "cloud.launch.*launched g2-standard-4 .* on-demand 0.7100/h" &&
	ok "spot first; ZONE_RESOURCE_POOL_EXHAUSTED when its operation ends, then on-demand" ||
	bad "inserts: $(inserts | jq -c '[.body.scheduling.provisioningModel, .status]') $(audit | grep cloud.launch)"
[ -n "$(inserts | sed -n 2p)" ] && inserts | sed -n 2p | jq -e '.body.machineType == "zones/us-central1-a/machineTypes/g2-standard-4" and
	.body.disks[0].initializeParams.sourceImage == "projects/debian-cloud/global/images/family/debian-12" and
	.body.scheduling.onHostMaintenance == "TERMINATE" and .body.labels["cnlab-managed"] == "true" and
	(.metadata_keys | index("startup-script") and index("cnlab-node") and index("cnlab-record")) and
	(.query.requestId | test("^[0-9a-f-]{36}$"))' >/dev/null &&
	ok "the VM is made as Compute Engine wants a GPU VM: zone's machine type, the image, TERMINATE on maintenance, label, metadata, requestId" ||
	bad "insert body: $(inserts | sed -n 2p)"
"$cnlab" node show "$cloud1" -o json | jq -e '.labels.cluster == "cloud-gcp" or .cluster == "cloud-gcp"' >/dev/null &&
	ok "the VM joined cluster cloud-gcp" || bad "node: $("$cnlab" node show "$cloud1" -o json)"
[ "$(calls 'select(.grant==200)' | wc -l)" = 1 ] &&
	[ "$(calls 'select(.path|startswith("/compute/"))' | wc -l)" -ge 4 ] &&
	[ "$(calls 'select(.status==401)' | wc -l)" = 0 ] &&
	ok "one signed assertion earned the token that served every call" ||
	bad "grants: $(calls 'select(.grant)' | wc -l), 401s: $(calls 'select(.status==401)' | wc -l)"
"$cnlab" cloud instances | grep -q "g2-standard-4" &&
	ok "cnlab cloud instances lists the VM" || bad "cloud instances: $("$cnlab" cloud instances)"

# --- idle: fenced and deleted within 30 s -----------------------------------
touch "$shared/go1"
wait_for 30 is_state "$j1" succeeded || bad "j1 end: $(state "$j1")"
n1=$(name_of_node "$cloud1")
wait_for 40 sh -c "[ \"\$(jq -r '.\"$n1\".deleted' '$tmp/gce/instances.json')\" = true ]" &&
	ok "the idle VM is deleted" || bad "VM $n1: $(inst ".\"$n1\"")"
end_s=$("$cnlab" jobs show "$j1" -o json | jq -r '.updated_at' | xargs -I{} date -d {} +%s.%N)
del_s=$(calls "select(.method==\"DELETE\" and (.path|endswith(\"/$n1\"))) | .at" | head -1)
[ -n "$end_s" ] && [ -n "$del_s" ] &&
	awk -v a="$end_s" -v b="$del_s" 'BEGIN { exit !(b - a <= 30 && b >= a) }' &&
	ok "deleted $(awk -v a="$end_s" -v b="$del_s" 'BEGIN { printf "%.1f", b - a }') s after its last work ended (promise: 30 s)" ||
	bad "end $end_s, delete $del_s"
"$cnlab" node show "$cloud1" -o json | jq -e '.state == "lost"' >/dev/null &&
	ok "its node is fenced" || bad "fenced: $("$cnlab" node show "$cloud1" -o json | jq -c .)"

# --- a spot preemption requeues the work, which bursts again ----------------
# An A100 job (a2-highgpu-1g: its spot market has capacity; g2-standard-4's
# had none a moment ago).  The first insert is rate limited (429): retried.
echo "429 spot" >"$tmp/gce/fail-run"
j2=$("$cnlab" run --detach --gpu a100-100 wait.sh go2 2>/dev/null)
wait_for 60 on_cloud "$j2" || bad "j2: $(state "$j2") $(node_of "$j2")"
cloud2=$(node_of "$j2")
n2=$(name_of_node "$cloud2")
[ "$(inst ".\"$n2\".spot")" = true ] && has_audit "cloud.launch.*launched a2-highgpu-1g .* spot 1.1000/h" &&
	ok "a spot VM, at Google's published spot price" || bad "n2: $(inst ".\"$n2\"") $(audit | grep cloud.launch)"
inserts | jq -s -e 'map(.status) | index(429) != null' >/dev/null &&
	ok "rate limiting (429) is retried" || bad "429: $(inserts | jq -c .status)"
echo "$n2" >"$tmp/gce/interrupt"
wait_for 30 has_audit "cloud.return.*$cloud2.*spot interruption" &&
	ok "the preemption is seen (a spot VM stopped by Compute Engine) and audited" ||
	bad "preempt: $(audit | grep cloud)"
wait_for 40 sh -c "[ \"\$(jq -r '.\"$n2\".deleted' '$tmp/gce/instances.json')\" = true ]" &&
	ok "... the preempted VM is deleted (no disk left to pay for)" || bad "n2 after: $(inst ".\"$n2\"")"
wait_for 60 moved_from "$j2" "$cloud2" && wait_for 60 on_cloud "$j2" &&
	ok "... and its work is requeued and bursts again, onto a new VM" ||
	bad "j2 after: $(state "$j2") $(node_of "$j2")"
"$cnlab" jobs cancel "$j2" >/dev/null

# --- an outage launches nothing; after it the burst launches again ----------
# Every VM given back first (j3 must launch one).
wait_for 40 sh -c "[ \"\$(jq '[.[] | select(.deleted != true)] | length' '$tmp/gce/instances.json')\" = 0 ]" ||
	bad "VMs left: $(inst '[.[] | select(.deleted != true) | .name]')"
touch "$tmp/gce/fail-all"
n_before=$(inst 'length')
j3=$("$cnlab" run --detach --gpu l4-100 wait.sh go3 2>/dev/null)
wait_for 60 has_audit "cloud.launch.*launch failed (unavailable" &&
	[ "$(inst 'length')" = "$n_before" ] &&
	ok "an outage (503): the launch fails, audited, nothing made" ||
	bad "outage: $(audit | grep cloud.launch | tail -2)"
rm -f "$tmp/gce/fail-all"
wait_for 90 on_cloud "$j3" && ok "after the outage the burst launches again" ||
	bad "j3: $(state "$j3") $(audit | grep cloud.launch | tail -3)"
"$cnlab" jobs cancel "$j3" >/dev/null

! grep -q -- "$keyline" "$tmp/cnlabd.out" "$tmp/cnlabd.err" &&
	! grep -q 'ya29\.' "$tmp/cnlabd.out" "$tmp/cnlabd.err" &&
	! grep -rqs -- "$keyline" "$tmp/db" &&
	ok "neither the key nor a token is in cnlabd's logs, nor the key in its database in clear" ||
	bad "a secret leaked"
touch "$shared/go2" "$shared/go3"

[ $fails = 0 ] && echo "all passed" || echo "$fails failed"
[ $fails = 0 ]
