#!/usr/bin/env bash
# sim.sh - cnlab-sim end to end on hand-made traces: the fgd protocol's
# JSON, table and SVG plot, the replay's JSON and CSV, and clear errors
# (message naming the problem, exit status 2 for usage, 1 for bad data).
set -u
sim=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fails=0
count=0

expect() { # expect NAME STATUS PATTERN -- command...
	local name=$1 want=$2 pat=$3
	shift 4
	local out got
	out=$("$@" 2>&1)
	got=$?
	count=$((count + 1))
	if [ "$got" != "$want" ] || ! grep -qE -- "$pat" <<<"$out"; then
		echo "FAIL $name: status $got (want $want), output:"
		echo "$out" | tail -5
		fails=$((fails + 1))
	else
		echo "ok   $name"
	fi
}

check() { # check NAME CONDITION-COMMAND...
	local name=$1
	shift
	count=$((count + 1))
	if "$@"; then
		echo "ok   $name"
	else
		echo "FAIL $name"
		fails=$((fails + 1))
	fi
}

jqok() { jq -e "$1" >/dev/null; }

mkdir -p "$tmp/t/csv"
cat >"$tmp/t/csv/openb_node_list_gpu_node.csv" <<'CSV'
sn,cpu_milli,memory_mib,gpu,model
n0,32000,65536,1,T4
n1,32000,65536,1,T4
CSV
hdr=name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,scheduled_time
cat >"$tmp/t/csv/openb_pod_list_small.csv" <<CSV
$hdr
p0,1000,1024,1,500,,LS,Running,0,3600,0
p1,1000,1024,1,500,,BE,Running,10,7200,10
p2,1000,1024,1,1000,,LS,Running,20,3620,20
CSV
# Six one-GPU pods of an hour each on two GPUs: four wait, unless the
# cloud takes them.
{
	echo "$hdr"
	for i in 0 1 2 3 4 5; do echo "b$i,1000,1024,1,1000,,LS,Running,$((i * 10)),$((i * 10 + 3600)),$((i * 10))"; done
} >"$tmp/t/csv/openb_pod_list_burst.csv"
printf '%s\np0,1000,1024,1,oops,,LS,Running,0,10,0\n' "$hdr" \
	>"$tmp/t/csv/openb_pod_list_bad.csv"
printf 'name,cpu_milli,memory_mib,num_gpu,gpu_milli\np0,1000,1024,1,1000\n' \
	>"$tmp/t/csv/openb_pod_list_notimes.csv"

# fgd: two half-GPU pods and a whole one fill two GPUs exactly.
out=$("$sim" fgd --trace "$tmp/t" --pods small --policy fgd,bestfit \
	--seeds 1-3 --tune 1.0 --json --plot "$tmp/p.svg")
check "fgd json: two policies" test "$(jq '.results | length' <<<"$out")" = 2
check "fgd json: fgd fills 100%" \
	test "$(jq '.results[0].alloc_pct_at_end' <<<"$out")" = 100
check "fgd json: fields" jqok '.results[1] | .policy == "bestfit" and
	(.seeds | length) == 3 and .failed_pods == 0 and .seconds >= 0 and
	(.curve | length) > 90 and .frag_pct_at_90 >= 0' <<<"$out"
check "fgd plot is an SVG with both curves" \
	test "$(grep -c '<polyline' "$tmp/p.svg")" = 2
expect "fgd table" 0 '^fgd +100\.00' -- \
	"$sim" fgd --trace "$tmp/t" --pods small --policy FGD --tune 1.0
expect "fgd usage" 2 'usage: cnlab-sim' -- "$sim"
expect "fgd missing options" 2 'needs --trace, --pods and --policy' -- \
	"$sim" fgd --trace "$tmp/t"
expect "fgd unknown policy" 2 'unknown policy "tetris"' -- \
	"$sim" fgd --trace "$tmp/t" --pods small --policy fgd,tetris
expect "fgd bad seeds" 2 'bad list "9-3"' -- \
	"$sim" fgd --trace "$tmp/t" --pods small --policy fgd --seeds 9-3
expect "fgd bad tune" 2 'not a number in \(0, 10\]: "x"' -- \
	"$sim" fgd --trace "$tmp/t" --pods small --policy fgd --tune x
expect "fgd unknown option" 2 'unknown option "--fast"' -- \
	"$sim" fgd --trace "$tmp/t" --pods small --policy fgd --fast 1
expect "fgd missing pod list" 1 'openb_pod_list_none.csv.*No such file' -- \
	"$sim" fgd --trace "$tmp/t" --pods none --policy fgd
expect "fgd malformed pod list" 1 'openb_pod_list_bad.csv:2:5: gpu_milli' -- \
	"$sim" fgd --trace "$tmp/t" --pods bad --policy fgd
expect "fgd unwritable plot" 1 'nodir/p.svg' -- \
	"$sim" fgd --trace "$tmp/t" --pods small --policy fgd --tune 1 \
	--plot "$tmp/nodir/p.svg"

# replay: all three run; the CSV is a time series.
out=$("$sim" replay --trace "$tmp/t" --pods small --json --csv "$tmp/r.csv" \
	--plot "$tmp/r.svg")
check "replay json" jqok '.started == 3 and .never_started == 0 and
	.pods_total == 3 and .jain_fairness > 0' <<<"$out"
check "replay csv header" test "$(head -1 "$tmp/r.csv")" = \
	"t_seconds,alloc_pct,pending"
check "replay csv rows" test "$(wc -l <"$tmp/r.csv")" -ge 4
check "replay plot" grep -q '<polyline' "$tmp/r.svg"
expect "replay table" 0 'started 3, never started 0' -- \
	"$sim" replay --trace "$tmp/t" --pods small --teams 2
expect "replay no times" 1 'carries no times' -- \
	"$sim" replay --trace "$tmp/t" --pods notimes
expect "replay bad teams" 2 'not a number in 1..64: "0"' -- \
	"$sim" replay --trace "$tmp/t" --pods small --teams 0
# replay with a cloud burst: at the stall and at the forecast, the waits
# shrink, instances are launched and given back, and the cost is what
# their lives cost at the price (2 GPUs each, 3.0 per GPU-hour).
none=$("$sim" replay --trace "$tmp/t" --pods burst --json --burst none)
check "burst none: four pods wait an hour" jqok '.wait_p95_s >= 3500 and
	.cloud_launched == 0 and .cloud_cost == 0 and .cloud_only_cost == 18' <<<"$none"
for m in stall forecast; do
	out=$("$sim" replay --trace "$tmp/t" --pods burst --json --burst $m \
		--cloud-gpus 2 --cloud-boot 60 --cloud-gpu-price 3)
	check "burst $m: the cloud takes the waiting pods" jqok '.wait_p95_s <= 120 and
		.never_started == 0 and .cloud_launched >= 2' <<<"$out"
	check "burst $m: cost is instance life at the price, and returned" jqok '
		(.cloud_cost - .cloud_gpu_hours * 3 | fabs) < 0.01 and
		.cloud_gpu_hours >= 4 and .cloud_gpu_hours <= 3 * 2 * (3600 + 60 + 60 + 30) / 3600 + 0.01' <<<"$out"
done
expect "replay bad burst" 2 'burst: none, stall or forecast' -- \
	"$sim" replay --trace "$tmp/t" --pods small --burst always
expect "replay bad threshold" 2 'burst-threshold: not a number in \(0, 1\]' -- \
	"$sim" replay --trace "$tmp/t" --pods small --burst stall --burst-threshold 1.5
expect "replay bad cloud gpus" 2 'cloud-gpus: not a number in 1..16' -- \
	"$sim" replay --trace "$tmp/t" --pods small --cloud-gpus 0
expect "replay unknown mode" 2 'unknown mode "simulate"' -- "$sim" simulate

echo "$((count - fails)) passed, $fails failed"
[ "$fails" = 0 ]
