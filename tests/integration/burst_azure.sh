#!/usr/bin/env bash
# burst_azure.sh - the burst policy on Microsoft Azure, end to end: a real
# cnlabd, a real agent on one fake H100 (the GPUs owned) and a loopback
# Azure (fake_azure.py: the client credentials grant, bearer tokens, ARM's
# VM PUT checked as ARM checks it, VMs that are made, or fail with
# AllocationFailed, after the PUT answers) whose VMs boot their
# customData, so that each cloud "instance" is a real cnlab-agent that
# joins with its one-time join token.  Typed as an operator would:
# cnlab cloud add azure ... --tenant-id --client-id --secret-from-file,
# cnlab policy burst --provider azure ...
#   - the client secret is sealed: never shown, never in cnlabd's logs; a
#     subnet of another subscription is refused, naming subnet;
#   - work no owned GPU can run bursts: spot first, then on-demand when
#     the spot VM fails to be made (AllocationFailed), the failed VM
#     deleted; the VM is made as ARM wants it (size, image URN, NIC on the
#     account's subnet, customData, tags); the job runs on it;
#   - an idle VM is fenced and deleted within 30 s;
#   - a spot eviction requeues the work, which bursts again (SkuNotAvailable
#     and 429 on the way);
#   - an outage (503) launches nothing, audited; after it the burst
#     launches again.
# Waits poll with generous bounds; no assertion depends on speed.
set -u
cnlabd=$(realpath "$1")
agent=$(realpath "$2")
cnlab=$(realpath "$3")
here=$(cd "$(dirname "$0")" && pwd)
tmp=$(mktemp -d)
run=ba$$
cloud=cloud-azure
pids=()
# shellcheck source=tests/integration/lib.sh
. "$here/lib.sh" # ok, bad, wait_for, $fails
# shellcheck source=tests/integration/burst_lib.sh
. "$here/burst_lib.sh" # burst_env, burst_cleanup, burst_start, state, ...
trap burst_cleanup EXIT


burst_env az
SUB=0b1f6471-1bf0-4dda-aec3-cb9272f09590
TENANT=72f988bf-86f1-41af-91ab-2d7cd011db47
CLIENT=5c1f2a4b-8d3e-4f60-9a7b-0c1d2e3f4a5b
SECRET='Azure~Burst.Test_Secret-0123456789abcdefXYZ'
SUBNET=/subscriptions/$SUB/resourceGroups/cnlab-rg/providers/Microsoft.Network/virtualNetworks/cnlab-vnet/subnets/gpu
printf '%s' "$SECRET" >"$tmp/az-secret"

CNLAB_AGENT_MOUNTS=$shared:/shared python3 "$here/fake_azure.py" "$tmp/az" \
	"$TENANT" "$CLIENT" "$SECRET" "$SUBNET" "$tmp/az.port" 2>"$tmp/az.err" &
pids+=($!)
wait_for 20 test -s "$tmp/az.port" || { cat "$tmp/az.err"; exit 1; }
az=http://127.0.0.1:$(cat "$tmp/az.port")

burst_start Canonical:0001-com-ubuntu-server-jammy:22_04-lts-gen2:latest

# --- the operator's set-up, as typed ---------------------------------------
add() {
	"$cnlab" cloud add azure --account "$SUB" --region eastus --resource-group cnlab-rg \
		--instance-types Standard_NC4as_T4_v3,Standard_NV36ads_A10_v5,Standard_NC24ads_A100_v4 \
		--endpoint "$az" --authority "$az" --tenant-id "$TENANT" --client-id "$CLIENT" \
		--secret-from-file "$tmp/az-secret" "$@"
}
add --subnet "/subscriptions/00000000-0000-0000-0000-000000000000/resourceGroups/x/providers/Microsoft.Network/virtualNetworks/v/subnets/s" \
	>/dev/null 2>"$tmp/bad.err"
[ $? != 0 ] && grep -q 'subnet' "$tmp/bad.err" &&
	ok "a subnet of another subscription is refused, naming subnet" || bad "subnet: $(cat "$tmp/bad.err")"
"$cnlab" cloud add azure --account "$SUB" --region eastus --resource-group cnlab-rg --subnet "$SUBNET" \
	--instance-types Standard_NC4as_T4_v3 --client-id "$CLIENT" --secret-from-file "$tmp/az-secret" \
	>/dev/null 2>"$tmp/bad.err"
[ $? = 2 ] && grep -q -- '--tenant-id' "$tmp/bad.err" &&
	ok "credentials without --tenant-id: exit 2 naming it" || bad "tenant: $(cat "$tmp/bad.err")"
add --subnet "$SUBNET" >"$tmp/add.out" 2>&1 && grep -q 'credentials sealed' "$tmp/add.out" &&
	ok "cloud add azure with a service principal" || bad "cloud add: $(cat "$tmp/add.out")"
"$cnlab" cloud list -o json >"$tmp/list.json"
jq -e --arg c "$CLIENT" '.items[0].credentials.client_id == $c and .items[0].credentials.secret_set' \
	"$tmp/list.json" >/dev/null && ! grep -q -- "$SECRET" "$tmp/list.json" &&
	ok "the API shows the client id, never the secret" || bad "list: $(cat "$tmp/list.json")"
"$cnlab" policy burst --threshold 0.50 --provider azure --strategy spot-then-on-demand \
	--max-cloud-budget 1000 >"$tmp/pol.out" 2>&1 && ok "policy burst --provider azure" ||
	bad "policy burst: $(cat "$tmp/pol.out")"

cd "$tmp" || exit 1
calls() { jq -c "$1" "$tmp/az/calls.log" 2>/dev/null; }
puts() { calls 'select(.method=="PUT")'; }
vm() { jq -r "$1" "$tmp/az/vms.json" 2>/dev/null; }
vm_of_node() { vm "to_entries[] | select(.value.tags[\"cnlab:node\"]==\"$1\" and .value.fail == null) | .key"; }

# --- spot fails as it is made (AllocationFailed): on-demand -----------------
echo "AllocationFailed spot" >"$tmp/az/fail-run"
j1=$("$cnlab" run --detach --gpu t4-100 wait.sh go1 2>/dev/null)
wait_for 60 on_cloud "$j1" && ok "T4 work bursts to Azure: j1 runs on cloud node $(node_of "$j1")" ||
	bad "j1: $(state "$j1") on $(node_of "$j1"); $(tail -5 "$tmp/cnlabd.err")"
cloud1=$(node_of "$j1")
[ "$(puts | head -1 | jq -r '.body.properties.priority + " " + (.status|tostring)')" = "Spot 201" ] &&
	[ "$(puts | sed -n 2p | jq -r .body.properties.priority)" = Regular ] &&
	[ "$(vm '[.[] | select(.fail == "AllocationFailed" and .deleted == true)] | length')" = 1 ] &&
	has_audit "cloud.launch.*launched Standard_NC4as_T4_v3 .* on-demand 0.5260/h" &&
	ok "spot first; AllocationFailed as the VM is made (that VM deleted), then on-demand" ||
	bad "puts: $(puts | jq -c '[.body.properties.priority, .status]') $(vm 'map_values(.fail)') $(audit | grep cloud.launch)"
[ -n "$(puts | sed -n 2p)" ] && puts | sed -n 2p | jq -e --arg s "$SUBNET" '.body.properties.hardwareProfile.vmSize == "Standard_NC4as_T4_v3" and
	.body.properties.storageProfile.imageReference.offer == "0001-com-ubuntu-server-jammy" and
	.body.properties.networkProfile.networkInterfaceConfigurations[0].properties.ipConfigurations[0].properties.subnet.id == $s and
	.body.properties.osProfile.customData == true and .body.tags["cnlab-managed"] == "true" and
	(.body.tags["cnlab:record"] | startswith("cin_")) and (.query["api-version"] == "2024-03-01")' >/dev/null &&
	ok "the VM is made as ARM wants it: size, image URN, NIC on the subnet, customData, tags" ||
	bad "PUT body: $(puts | sed -n 2p)"
[ "$(calls 'select(.grant==200)' | wc -l)" = 1 ] && [ "$(calls 'select(.status==401)' | wc -l)" = 0 ] &&
	ok "one client-credentials grant served every call" || bad "grants: $(calls 'select(.grant)' | wc -l)"

# --- idle: fenced and deleted within 30 s -----------------------------------
touch "$shared/go1"
wait_for 30 is_state "$j1" succeeded || bad "j1 end: $(state "$j1")"
n1=$(vm_of_node "$cloud1")
wait_for 40 sh -c "[ \"\$(jq -r '.\"$n1\".deleted' '$tmp/az/vms.json')\" = true ]" &&
	ok "the idle VM is deleted" || bad "VM $n1: $(vm ".\"$n1\"")"
end_s=$("$cnlab" jobs show "$j1" -o json | jq -r '.updated_at' | xargs -I{} date -d {} +%s.%N)
del_s=$(calls "select(.method==\"DELETE\" and (.path|endswith(\"/$n1\"))) | .at" | head -1)
[ -n "$end_s" ] && [ -n "$del_s" ] &&
	awk -v a="$end_s" -v b="$del_s" 'BEGIN { exit !(b - a <= 30 && b >= a) }' &&
	ok "deleted $(awk -v a="$end_s" -v b="$del_s" 'BEGIN { printf "%.1f", b - a }') s after its last work ended (promise: 30 s)" ||
	bad "end $end_s, delete $del_s"

# --- a spot eviction requeues the work, which bursts again --------------------
# An A10 job: its first PUT is throttled (429, retried).
echo "429 spot" >"$tmp/az/fail-run"
j2=$("$cnlab" run --detach --gpu a10-100 wait.sh go2 2>/dev/null)
wait_for 60 on_cloud "$j2" || bad "j2: $(state "$j2") $(node_of "$j2")"
cloud2=$(node_of "$j2")
n2=$(vm_of_node "$cloud2")
[ "$(vm ".\"$n2\".spot")" = true ] && has_audit "cloud.launch.*launched Standard_NV36ads_A10_v5 .* spot 1.2800/h" &&
	ok "a spot VM, at the recorded spot price" || bad "n2: $(vm ".\"$n2\"") $(audit | grep cloud.launch)"
puts | jq -s -e 'map(.status) | index(429) != null' >/dev/null &&
	ok "throttling (429) is retried" || bad "429: $(puts | jq -c .status)"
echo "$n2" >"$tmp/az/interrupt"
wait_for 30 has_audit "cloud.return.*$cloud2.*spot interruption" &&
	ok "the eviction is seen (a spot VM deallocated) and audited" || bad "evict: $(audit | grep cloud)"
wait_for 40 sh -c "[ \"\$(jq -r '.\"$n2\".deleted' '$tmp/az/vms.json')\" = true ]" &&
	ok "... the evicted VM is deleted" || bad "n2 after: $(vm ".\"$n2\"")"
wait_for 60 moved_from "$j2" "$cloud2" && wait_for 60 on_cloud "$j2" &&
	ok "... and its work is requeued and bursts again, onto a new VM" ||
	bad "j2 after: $(state "$j2") $(node_of "$j2")"
"$cnlab" jobs cancel "$j2" >/dev/null

# --- an outage launches nothing; after it the burst launches again ----------
wait_for 40 sh -c "[ \"\$(jq '[.[] | select(.deleted != true)] | length' '$tmp/az/vms.json')\" = 0 ]" ||
	bad "VMs left: $(vm '[.[] | select(.deleted != true) | .name]')"
echo "SkuNotAvailable spot" >"$tmp/az/fail-run"
touch "$tmp/az/fail-all"
n_before=$(vm 'length')
j3=$("$cnlab" run --detach --gpu a100-100 wait.sh go3 2>/dev/null)
wait_for 60 has_audit "cloud.launch.*launch failed (unavailable" &&
	[ "$(vm 'length')" = "$n_before" ] &&
	ok "an outage (503): the launch fails, audited, nothing made" ||
	bad "outage: $(audit | grep cloud.launch | tail -2)"
rm -f "$tmp/az/fail-all"
wait_for 90 on_cloud "$j3" && ok "after the outage the burst launches again" ||
	bad "j3: $(state "$j3") $(audit | grep cloud.launch | tail -3)"
sku_refused() {
	puts | jq -s -e 'map(select(.status == 409)) | length == 1' >/dev/null &&
		has_audit "cloud.launch.*launched Standard_NC24ads_A100_v4 .* on-demand"
}
wait_for 20 sku_refused &&
	ok "SkuNotAvailable (409) for spot: on-demand instead" || bad "sku: $(puts | jq -c .status) $(audit | grep cloud.launch | tail -2)"
"$cnlab" jobs cancel "$j3" >/dev/null

! grep -q -- "$SECRET" "$tmp/cnlabd.out" "$tmp/cnlabd.err" &&
	! grep -q 'eyJ0eXAiOiJKV1Qi' "$tmp/cnlabd.out" "$tmp/cnlabd.err" &&
	! grep -rqs -- "$SECRET" "$tmp/db" &&
	ok "neither the secret nor a token is in cnlabd's logs, nor the secret in its database in clear" ||
	bad "a secret leaked"
touch "$shared/go2" "$shared/go3"

[ $fails = 0 ] && echo "all passed" || echo "$fails failed"
[ $fails = 0 ]
