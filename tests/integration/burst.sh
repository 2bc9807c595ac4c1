#!/usr/bin/env bash
# burst.sh - the burst policy acting, end to end: a real cnlabd, a real
# agent on one fake H100 (the GPUs owned) and a loopback EC2
# (fake_ec2.py: SigV4 checked, client tokens honoured) whose instances
# boot their user data, so that each cloud "instance" is a real
# cnlab-agent that joins with its one-time join token.  Typed as an
# operator would: cnlab cloud add aws ..., cnlab policy burst ...,
# cnlab project mark ... --on-prem-only.
#   - work beyond the owned GPUs bursts: spot first, on-demand when spot
#     has no capacity (InsufficientInstanceCapacity); the job runs on the
#     new node, and its audit says why it went and what it cost;
#   - the join token in the user data joins once only;
#   - on-prem-only work never goes to the cloud node;
#   - an idle instance is fenced and terminated within 30 s;
#   - a spot interruption requeues the work, which bursts again;
#   - a provider outage (503) launches nothing, audited; throttling is
#     retried; after the outage the burst launches again;
#   - the budget is a hard stop: instances given back, no launch, the
#     warning metric set; the metrics pass promtool;
#   - the instances' records survive a restart of cnlabd.
# Waits poll with generous bounds; no assertion depends on speed.
set -u
cnlabd=$(realpath "$1")
agent=$(realpath "$2")
cnlab=$(realpath "$3")
here=$(cd "$(dirname "$0")" && pwd)
tmp=$(mktemp -d)
run=bu$$
pids=()
cleanup() {
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done
	sleep 0.5
	for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null; done
	wait 2>/dev/null
	# The agents' workloads: thawed (a frozen process does not die),
	# killed, their cgroups removed.
	for d in /sys/fs/cgroup/*/cnlab/* /sys/fs/cgroup/cnlab/*; do
		[ -d "$d" ] || continue
		case "$d" in *"$run"* | *cloud-*) ;; *) continue ;; esac
		find "$d" -name freezer.state -exec sh -c 'echo THAWED >"$1"' _ {} \; 2>/dev/null
		find "$d" -name cgroup.freeze -exec sh -c 'echo 0 >"$1"' _ {} \; 2>/dev/null
		find "$d" -name cgroup.procs -exec cat {} + 2>/dev/null |
			xargs -r kill -9 2>/dev/null
	done
	pkill -9 -f "$tmp/" 2>/dev/null
	sleep 0.3
	for d in /sys/fs/cgroup/*/cnlab/* /sys/fs/cgroup/cnlab/*; do
		case "$d" in *"$run"* | *cloud-*) find "$d" -depth -type d -exec rmdir {} + 2>/dev/null ;; esac
	done
	[ -n "${KEEP_TMP:-}" ] || rm -rf "$tmp"
}
trap cleanup EXIT
# shellcheck source=tests/integration/lib.sh
. "$here/lib.sh" # ok, bad, wait_for, $fails

export CNLAB_JWT_SECRET=burst-integration-secret-0123456789abcdef
export CNLAB_ADMIN_PASSWORD=admin-password-1
export HOME=$tmp/home XDG_CONFIG_HOME=$tmp/xdg
shared=$tmp/shared
mkdir -p "$shared" "$HOME" "$tmp/ec2"
chmod 755 "$tmp"
chmod 1777 "$shared"
unset CNLAB_SERVER CNLAB_TOKEN CNLAB_CONFIG
AKID=AKIACNLABBURSTTEST01
SECRET='burst/Test+Secret0123456789abcdefEXAMPLE'
printf '%s' "$SECRET" >"$tmp/aws-secret"
openssl rand -hex 32 >"$tmp/secrets.key" && chmod 600 "$tmp/secrets.key"

# The machine image's own settings: the shared folder every node mounts.
CNLAB_AGENT_MOUNTS=$shared:/shared python3 "$here/fake_ec2.py" "$tmp/ec2" \
	"$AKID" "$SECRET" "$tmp/ec2.port" 2>"$tmp/ec2.err" &
pids+=($!)
wait_for 20 test -s "$tmp/ec2.port" || { cat "$tmp/ec2.err"; exit 1; }
ec2=http://127.0.0.1:$(cat "$tmp/ec2.port")

start_cnlabd() {
	: >"$tmp/cnlabd.out"
	"$cnlabd" --data-dir "$tmp/db" --listen "127.0.0.1:${port:-0}" \
		--bootstrap-admin root --cycle-interval 200ms \
		--secrets-key-file "$tmp/secrets.key" \
		--burst-image ami-0c1ab7e57000b0057 --burst-agent "$agent" \
		--burst-idle 3s --burst-interval 300ms \
		>"$tmp/cnlabd.out" 2>>"$tmp/cnlabd.err" &
	cnlabd_pid=$!
	pids+=($!)
	wait_for 20 grep -q '^listening on' "$tmp/cnlabd.out"
}
start_cnlabd || { cat "$tmp/cnlabd.err"; exit 1; }
port=$(sed -n 's/^listening on 127\.0\.0\.1:\([0-9]*\)$/\1/p' "$tmp/cnlabd.out")
base=http://127.0.0.1:$port
echo admin-password-1 | "$cnlab" login --server "$base" --user root --password-stdin >/dev/null ||
	bad "login"
"$cnlab" project create lab >/dev/null && "$cnlab" project member add lab root >/dev/null &&
	"$cnlab" project use lab >/dev/null || bad "project"

# The GPUs owned: one node, one H100.
tok=$("$cnlab" node join-token --node "$run-a" -o json | jq -r .token)
CNLAB_AGENT_TOKEN=$tok "$agent" --server "$base" --name "$run-a" \
	--gpus fake:1xH100-80GB-SXM --work-dir "$tmp/agent-a" --cpu-milli 4000 \
	--mem-mib 8192 --mounts "$shared:/shared" >"$tmp/agent-a.out" 2>"$tmp/agent-a.err" &
pids+=($!)
wait_for 20 grep -q 'msg=registered' "$tmp/agent-a.err" || bad "agent a: $(cat "$tmp/agent-a.err")"

# --- the operator's set-up, as typed ---------------------------------------
"$cnlab" cloud add aws --account 123456789012 --region us-east-1 \
	--instance-types p5.48xlarge,g6.xlarge,g6.12xlarge --endpoint "$ec2" \
	--access-key-id "$AKID" --secret-from-file "$tmp/aws-secret" \
	--prices p5.48xlarge=90.5 >"$tmp/add.out" 2>&1 &&
	ok "cloud add aws with credentials and a price of its own" || bad "cloud add: $(cat "$tmp/add.out")"
"$cnlab" cloud add aws --account 123456789012 --region us-east-1 --instance-types g6.xlarge \
	--prices g6.xlarge=cheap >/dev/null 2>"$tmp/bad.err"
[ $? = 2 ] && grep -q -- '--prices' "$tmp/bad.err" && ok "a bad price: exit 2 naming --prices" ||
	bad "bad price: $(cat "$tmp/bad.err")"
"$cnlab" policy burst --threshold 0.50 --provider aws --strategy spot-then-on-demand \
	--max-cloud-budget 1000 >"$tmp/pol.out" 2>&1 && ok "policy burst" ||
	bad "policy burst: $(cat "$tmp/pol.out")"
"$cnlab" project create sensitive-research >/dev/null &&
	"$cnlab" project member add sensitive-research root >/dev/null &&
	"$cnlab" project mark sensitive-research --on-prem-only >/dev/null ||
	bad "project mark --on-prem-only"

cat >"$shared/wait.sh" <<'SH'
while [ ! -e "/shared/$1" ]; do sleep 0.1; done
SH
cp "$shared/wait.sh" "$tmp/wait.sh"
cd "$tmp" || exit 1
state() { "$cnlab" jobs show "$1" -o json | jq -r .state; }
node_of() { "$cnlab" jobs show "$1" -o json | jq -r '.placement.node // empty'; }
is_state() { [ "$(state "$1")" = "$2" ]; }
on_cloud() { is_state "$1" running && case "$(node_of "$1")" in cloud-*) true ;; *) false ;; esac; }
calls() { jq -c "select(.action==\"$1\")" "$tmp/ec2/calls.log" 2>/dev/null; }
inst() { jq -r "$1" "$tmp/ec2/instances.json" 2>/dev/null; }
audit() { "$cnlab" audit --limit 1000 -o json 2>/dev/null | jq -r '.items[] | .action + " " + .target + " " + .result'; }
has_audit() { audit | grep -q "$1"; }
moved_from() { local on; on=$(node_of "$1"); [ -n "$on" ] && [ "$on" != "$2" ]; }

# --- work beyond the owned GPUs bursts: spot first, then on-demand ---------
echo "InsufficientInstanceCapacity 500 spot" >"$tmp/ec2/fail-run"
j1=$("$cnlab" run --detach --gpu h100-100 wait.sh go1 2>/dev/null)
wait_for 30 is_state "$j1" running && [ "$(node_of "$j1")" = "$run-a" ] ||
	bad "j1 on the owned node: $(state "$j1") $(node_of "$j1")"
j2=$("$cnlab" run --detach --gpu h100-100 wait.sh go2 2>/dev/null)
wait_for 60 on_cloud "$j2" && ok "waiting work bursts: j2 runs on cloud node $(node_of "$j2")" ||
	bad "j2: $(state "$j2") on $(node_of "$j2"); $(tail -5 "$tmp/cnlabd.err")"
cloud1=$(node_of "$j2")
[ "$(calls RunInstances | head -1 | jq -r '.form["InstanceMarketOptions.MarketType"] + " " + (.status|tostring)')" = "spot 500" ] &&
	[ "$(calls RunInstances | sed -n 2p | jq -r '(.form["InstanceMarketOptions.MarketType"] // "on-demand") + " " + (.status|tostring)')" = "on-demand 200" ] &&
	ok "spot first; InsufficientInstanceCapacity, then on-demand" ||
	bad "launch calls: $(calls RunInstances | jq -c '[.form.InstanceType, .form["InstanceMarketOptions.MarketType"], .status]')"
[ "$(calls RunInstances | sed -n 2p | jq -r '.form.InstanceType + " " + .form.ImageId')" = "p5.48xlarge ami-0c1ab7e57000b0057" ] &&
	ok "the type that fits (H100: p5.48xlarge) and the image configured" || bad "type/image"
[ -n "$(calls RunInstances | sed -n 2p)" ] && calls RunInstances | sed -n 2p | jq -e '.form | to_entries | map(select(.key|test("TagSpecification.1.Tag.*.Value"))) | map(.value) | index("'"$cloud1"'")' >/dev/null &&
	ok "the instance is tagged with its node" || bad "tags: $(calls RunInstances | sed -n 2p)"
"$cnlab" node show "$cloud1" -o json | jq -e '.labels.cluster == "cloud-aws" or .cluster == "cloud-aws"' >/dev/null &&
	ok "the instance joined cluster cloud-aws" || bad "node: $("$cnlab" node show "$cloud1" -o json)"
audit | grep -q "job.cloud_burst.*$j2.*launched for it" &&
	audit | grep -q "cloud.launch.*launched p5.48xlarge .* on-demand 90.5000/h: default forecast" &&
	ok "the job's audit says why it went to the cloud" ||
	bad "audit: $(audit | grep -E 'cloud|burst')"

# The user data's join token joins once only.
ud=$(ls "$tmp"/ec2/i-*/user-data | head -1)
stolen=$(sed -n "s/^export CNLAB_AGENT_TOKEN='\(.*\)'$/\1/p" "$ud")
[ -n "$stolen" ] && CNLAB_AGENT_TOKEN=$stolen timeout 10 "$agent" --server "$base" --name "$cloud1" \
	--gpus fake:1xH100-80GB-SXM --work-dir "$tmp/thief" >/dev/null 2>"$tmp/thief.err"
! grep -q 'msg=registered' "$tmp/thief.err" &&
	ok "the join token in the user data joins once only" || bad "thief joined: $(cat "$tmp/thief.err")"

# --- on-prem-only work never leaves -----------------------------------------
"$cnlab" project use sensitive-research >/dev/null
j3=$("$cnlab" run --detach --gpu h100-100 wait.sh go3 2>/dev/null)
j3c=$("$cnlab" run --detach --cluster cloud-aws --gpu h100-25 wait.sh go3 2>/dev/null)
"$cnlab" project use lab >/dev/null
sleep 4
[ -n "$j3c" ] && is_state "$j3c" pending &&
	ok "on-prem-only work that asks for the cloud cluster is not sent there" ||
	bad "j3c: $(state "$j3c") on $(node_of "$j3c")"
"$cnlab" jobs cancel "$j3c" >/dev/null 2>&1
is_state "$j3" pending && [ "$(calls RunInstances | jq -s 'map(select(.status==200)) | length')" = 1 ] &&
	ok "on-prem-only work waits, though the cloud node has 7 free GPUs; nothing launched for it" ||
	bad "j3: $(state "$j3") on $(node_of "$j3")"
touch "$shared/go1"
wait_for 30 is_state "$j3" running && [ "$(node_of "$j3")" = "$run-a" ] &&
	ok "... and runs on the owned GPUs once they free" || bad "j3: $(state "$j3") on $(node_of "$j3")"

# --- idle: fenced and terminated within 30 s --------------------------------
touch "$shared/go2"
wait_for 30 is_state "$j2" succeeded || bad "j2 end: $(state "$j2")"
i1=$(inst "to_entries[] | select(.value.tags[\"cnlab:node\"]==\"$cloud1\") | .key")
wait_for 40 sh -c "[ \"\$(jq -r '.\"$i1\".state' '$tmp/ec2/instances.json')\" = terminated ]" &&
	ok "the idle instance is terminated" || bad "instance $i1: $(inst ".\"$i1\"")"
end_s=$("$cnlab" jobs show "$j2" -o json | jq -r '.updated_at' | xargs -I{} date -d {} +%s.%N)
term_s=$(calls TerminateInstances | jq -r "select(.form[\"InstanceId.1\"]==\"$i1\") | .at" | head -1)
[ -n "$end_s" ] && [ -n "$term_s" ] &&
	awk -v a="$end_s" -v b="$term_s" 'BEGIN { exit !(b - a <= 30 && b >= a) }' &&
	ok "terminated $(awk -v a="$end_s" -v b="$term_s" 'BEGIN { printf "%.1f", b - a }') s after its last work ended (promise: 30 s)" ||
	bad "end $end_s, terminate $term_s"
"$cnlab" node show "$cloud1" -o json | jq -e '.state == "lost"' >/dev/null &&
	ok "its node is fenced (lost, credentials revoked)" || bad "fenced: $("$cnlab" node show "$cloud1" -o json | jq -c .)"
audit | grep -q "job.cloud_cost.*$j2.*cloud node $cloud1" &&
	ok "what the job's cloud run cost is audited on the job" || bad "cost: $(audit | grep cloud_cost)"

# --- a spot interruption requeues the work, which bursts again ---------------
# An L4 job: no GPU owned is an L4, so only the cloud can run it (g6.xlarge,
# whose spot market has capacity).
# Its launch's answer is lost on the way (EC2 launched it): the retry,
# with the same client token, launches nothing twice.
echo "drop 0" >"$tmp/ec2/fail-run"
j4=$("$cnlab" run --detach --gpu l4-100 wait.sh go4 2>/dev/null)
wait_for 60 on_cloud "$j4" && ok "work no owned GPU can run bursts at once (L4: g6.xlarge)" ||
	bad "j4: $(state "$j4") $(node_of "$j4")"
cloud2=$(node_of "$j4")
# No instance type has 4 TiB of memory: refused at submission, not
# launched for over and over.
"$cnlab" run --detach --gpu l4-100 --memory 4096Gi wait.sh go4 >/dev/null 2>"$tmp/huge.err"
rc=$?
[ $rc != 0 ] && grep -q 'could ever run this job: mem_mib' "$tmp/huge.err" &&
	ok "work no node and no instance type could run is refused ($rc)" ||
	bad "huge: rc $rc $(cat "$tmp/huge.err")"
i2=$(inst "to_entries[] | select(.value.tags[\"cnlab:node\"]==\"$cloud2\") | .key")
[ "$(inst ".\"$i2\".spot")" = true ] && [ "$(inst ".\"$i2\".type")" = g6.xlarge ] &&
	audit | grep -q "cloud.launch.*launched g6.xlarge .* spot 0.3100/h" &&
	ok "a spot instance, at the spot price the provider gave" || bad "i2: $(inst ".\"$i2\"") $(audit | grep cloud.launch)"
tok2=$(inst ".\"$i2\".token")
[ "$(inst "[.[] | select(.tags[\"cnlab:node\"]==\"$cloud2\")] | length")" = 1 ] &&
	[ "$(calls RunInstances | jq -s --arg t "$tok2" 'map(select(.form.ClientToken==$t)) | length')" -ge 2 ] &&
	ok "an answer lost on the way: retried with the same client token, launched once" ||
	bad "lost answer: $(calls RunInstances | jq -c '[.form.ClientToken, .status]')"
echo "$i2" >"$tmp/ec2/interrupt"
wait_for 30 has_audit "cloud.return.*$cloud2.*spot interruption" &&
	ok "the spot interruption is seen and audited" || bad "interrupt: $(audit | grep cloud)"
wait_for 60 moved_from "$j4" "$cloud2" &&
	wait_for 60 on_cloud "$j4" &&
	ok "its work is requeued and bursts again, onto a new instance" ||
	bad "j4 after: $(state "$j4") $(node_of "$j4")"
"$cnlab" jobs cancel "$j4" >/dev/null

# --- a provider outage, then throttling --------------------------------------
touch "$tmp/ec2/fail-all"
touch "$shared/go3"
wait_for 30 is_state "$j3" succeeded || bad "j3 end"
j1b=$("$cnlab" run --detach --gpu h100-100 wait.sh go5 2>/dev/null)
j5=$("$cnlab" run --detach --no-preempt --gpu h100-100 wait.sh go6 2>/dev/null)
wait_for 60 has_audit "cloud.launch.*launch failed (unavailable Unavailable" &&
	ok "an outage (503): the launch fails, audited, nothing launched" ||
	bad "outage: $(audit | grep cloud.launch)"
n_before=$(jq -s length "$tmp/ec2/instances.json" >/dev/null 2>&1 && inst 'length')
echo "RequestLimitExceeded 503" >"$tmp/ec2/fail-run"
rm -f "$tmp/ec2/fail-all"
wait_for 90 on_cloud "$j5" && ok "after the outage the burst launches again" ||
	bad "j5: $(state "$j5") $(audit | grep cloud.launch | tail -3)"
calls RunInstances | jq -s -e 'map(.status) | any(.[]; . == 503) and .[-1] == 200' >/dev/null &&
	ok "throttling (RequestLimitExceeded) is retried" || bad "throttle: $(calls RunInstances | jq -c .status)"

# --- owned GPUs free again: work that resumes from its checkpoint comes back,
# the rest drains, then the node is given back ---------------------------------
cloud3=$(node_of "$j5")
jp=$("$cnlab" run --detach --gpu h100-25 wait.sh go10 2>/dev/null)
wait_for 30 on_cloud "$jp" && [ "$(node_of "$jp")" = "$cloud3" ] ||
	bad "jp: $(state "$jp") $(node_of "$jp")"
"$cnlab" jobs cancel "$j1b" >/dev/null
wait_for 60 has_audit "job.cloud_return $jp requeued from cloud node $cloud3" &&
	wait_for 60 sh -c "[ \"\$('$cnlab' jobs show $jp -o json | jq -r '.placement.node // empty')\" = $run-a ]" &&
	is_state "$jp" running &&
	ok "owned GPUs free: preemptible work on the cloud is requeued and comes back to them" ||
	bad "return: $(audit | grep -E 'cloud_return|cloud.drain') jp $(state "$jp") on $(node_of "$jp")"
"$cnlab" jobs cancel "$jp" >/dev/null
wait_for 30 has_audit "cloud.drain $cloud3 cordoned" &&
	[ "$("$cnlab" node show "$cloud3" -o json | jq -r .state)" = cordoned ] && is_state "$j5" running &&
	ok "... the cloud node is cordoned, its work that cannot move finishes there" ||
	bad "drain: $(audit | grep cloud.drain) $("$cnlab" node show "$cloud3" -o json | jq -r .state) $("$cnlab" cluster list -o json | jq -c .)"
touch "$shared/go6"
wait_for 30 is_state "$j5" succeeded || bad "j5 end: $(state "$j5")"
i3=$(inst "to_entries[] | select(.value.tags[\"cnlab:node\"]==\"$cloud3\") | .key")
wait_for 40 sh -c "[ \"\$(jq -r '.\"$i3\".state' '$tmp/ec2/instances.json')\" = terminated ]" &&
	ok "... and, once empty, it is given back" || bad "i3: $(inst ".\"$i3\"")"

# --- the budget is a hard stop -------------------------------------------------
# The owned GPU empty again first (jp's cancel has reached its agent), so
# that j6 takes it and j7 must burst.
owned_empty() { [ "$("$cnlab" node show "$run-a" -o json | jq '.workloads // 0')" = 0 ]; }
wait_for 60 owned_empty || bad "owned node not empty: $("$cnlab" node show "$run-a" -o json | jq -c .running)"
j6=$("$cnlab" run --detach --gpu h100-100 wait.sh go7 2>/dev/null)
wait_for 30 is_state "$j6" running && [ "$(node_of "$j6")" = "$run-a" ] ||
	bad "j6: $(state "$j6") on $(node_of "$j6")"
# cnlabd dies while EC2 launches (the answer is slow): after its restart
# the instance is found by its record's tag and given back, not paid for
# forever.
n0=$(inst 'length')
echo "hang 20" >"$tmp/ec2/fail-run"
j7=$("$cnlab" run --detach --gpu h100-100 wait.sh go8 2>/dev/null)
wait_for 60 sh -c "[ \$(jq length '$tmp/ec2/instances.json') -gt $n0 ]" || bad "no hung launch"
orphan=$(inst "to_entries | map(.value) | sort_by(.id) | last | .id")
kill -9 "$cnlabd_pid"
wait "$cnlabd_pid" 2>/dev/null
start_cnlabd || bad "restart after kill -9: $(tail -3 "$tmp/cnlabd.err")"
wait_for 60 has_audit "cloud.return .* fenced, given back: its launch.s answer never came; found by its tag" &&
	wait_for 40 sh -c "[ \"\$(jq -r '.\"$orphan\".state' '$tmp/ec2/instances.json')\" = terminated ]" &&
	ok "cnlabd killed during a launch: after the restart the instance is found by its tag and given back" ||
	bad "orphan $orphan: $(inst ".\"$orphan\".state") $(audit | grep cloud.return | tail -2)"
wait_for 90 on_cloud "$j7" || bad "j7: $(state "$j7") $(node_of "$j7")"
i4=$(inst "to_entries[] | select(.value.tags[\"cnlab:node\"]==\"$(node_of "$j7")\") | .key")
"$cnlab" policy burst --threshold 0.50 --provider aws --strategy spot-then-on-demand \
	--max-cloud-budget 0.01 >/dev/null || bad "budget lowered"
wait_for 30 has_audit "cloud.budget.*budget exhausted" &&
	ok "the budget spent: audited" || bad "budget: $(audit | grep budget)"
wait_for 30 sh -c "[ \"\$(jq -r '[.[] | select(.state!=\"terminated\")] | length' '$tmp/ec2/instances.json')\" = 0 ]" &&
	ok "... every instance is given back" || bad "left: $(inst '[.[] | select(.state!="terminated") | .id]')"
wait_for 30 is_state "$j7" pending && ok "... its work requeued" || bad "j7: $(state "$j7")"
launched=$(calls RunInstances | jq -s 'map(select(.status==200)) | length')
sleep 3
[ "$(calls RunInstances | jq -s 'map(select(.status==200)) | length')" = "$launched" ] && is_state "$j7" pending &&
	ok "... and nothing more is launched" || bad "launched past the budget"
curl -sf "$base/metrics" >"$tmp/metrics.txt" || bad "metrics"
grep -q '^cnlab_cloud_budget_exhausted 1$' "$tmp/metrics.txt" &&
	ok "the warning metric is set" || bad "metric: $(grep cnlab_cloud "$tmp/metrics.txt")"
promtool check metrics <"$tmp/metrics.txt" >"$tmp/promtool.out" 2>&1 &&
	ok "metrics pass promtool" || bad "promtool: $(cat "$tmp/promtool.out")"

# --- the records survive a restart ---------------------------------------------
kill "$cnlabd_pid"
wait "$cnlabd_pid" 2>/dev/null
start_cnlabd || bad "restart: $(tail -3 "$tmp/cnlabd.err")"
sleep 2
! grep -q 'cannot load the cloud instances' "$tmp/cnlabd.err" &&
	"$cnlab" cloud instances -o json | jq -e --arg i "$i4" '.items[] | select(.instance == $i) | .state == "ended" and .cost > 0 and .reason == "the cloud budget is spent"' >/dev/null &&
	"$cnlab" cloud instances | grep -q "p5.48xlarge .* ended" &&
	ok "the instances' records survive a restart (cnlab cloud instances)" ||
	bad "after restart: $(tail -3 "$tmp/cnlabd.err")"
"$cnlab" jobs cancel "$j6" "$j7" >/dev/null 2>&1
touch "$shared/go5" "$shared/go7" "$shared/go8" "$shared/go10"
"$cnlab" jobs cancel "$jp" >/dev/null 2>&1

[ $fails = 0 ] && echo "all passed" || echo "$fails failed"
[ $fails = 0 ]
