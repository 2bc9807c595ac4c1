#!/bin/sh
# sched_ab.sh - two sched_bench binaries (a baseline and a candidate)
# interleaved in one run (old, new, old, new ...), since this machine is
# shared and noisy: the steady-state cycle at 100k pending (the incremental
# cycle alone), at 10k (beside the from-scratch cycle, decisions compared),
# and the full-cluster cycle an hour later (pre-emption live).
#
#   bench/sched_ab.sh OLD_BINARY NEW_BINARY [ROUNDS] [TRACE_DIR]
set -eu
old=$1
new=$2
rounds=${3:-2}
trace=${4:-$(dirname "$0")/../../shared/traces/alibaba-gpu-v2023}
r=1
while [ "$r" -le "$rounds" ]; do
	for b in "$old" "$new"; do
		echo "== round $r: $b (load: $(cut -d' ' -f1-3 /proc/loadavg))"
		CNL_BENCH_STEADY_ONLY=1 CNL_BENCH_INC_ONLY=1 \
		    CNL_BENCH_STEADY_PENDING=100000 CNL_BENCH_CYCLES=8 \
		    "$b" "$trace" | grep -E 'incremental:'
		CNL_BENCH_STEADY_ONLY=1 CNL_BENCH_STEADY_PENDING=10000 \
		    CNL_BENCH_CYCLES=20 "$b" "$trace" |
		    grep -E 'from scratch:|incremental:'
		CNL_BENCH_FULL_ONLY=1 CNL_BENCH_PHASE=1 \
		    CNL_BENCH_STEADY_PENDING=0 "$b" "$trace" |
		    grep -E 'pre-empted\)|reference path'
	done
	r=$((r + 1))
done
