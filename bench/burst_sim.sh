#!/usr/bin/env bash
# burst_sim.sh BUILD_DIR [ARRIVAL_SCALE] [COPIES] - issue 23's measure:
# cnlab-sim replay of the Alibaba GPU trace (the FGD paper's default pod
# list, read from ../shared/traces) with CNLab's scheduler, three ways in
# the same run, beside the cloud-only baseline (every pod's GPU time
# bought in the cloud at the same price):
#
#   none       on-prem only: the queue waits
#   stall      cloud instances launched when work waits while local use
#              is at the threshold (0.9), sized by the work waiting
#   forecast   cnlabd's policy: when the 90 s demand forecast is at the
#              threshold and beyond the capacity, for that excess (no
#              more than the work waiting)
#
# Price list (stated, not fetched): 3.00 per GPU-hour on demand, billed
# per second of instance life; instances of 8 GPUs of the trace's most
# common type, 120 s from launch to work, at most 128 at once.  The
# trace is compressed (ARRIVAL_SCALE, default 0.0005) and repeated
# (COPIES, default 4) so that on-prem saturates for a while; the forecast
# error is scored while pods arrive, beside the naive "as now".
set -euo pipefail
build=$(realpath "${1:?usage: burst_sim.sh BUILD_DIR [ARRIVAL_SCALE] [COPIES]}")
scale=${2:-0.0005}
copies=${3:-4}
sim=$build/src/sim/cnlab-sim
trace=$(dirname "$0")/../../shared/traces/alibaba-gpu-v2023
[ -x "$sim" ] || { echo "burst_sim: $sim not built" >&2; exit 1; }
[ -d "$trace" ] || { echo "burst_sim: no trace at $trace" >&2; exit 1; }
printf '%-9s %8s %8s %8s %10s %12s %12s %8s %s\n' mode p50_s p95_s mean_s instances cloud_gpu_h cloud_cost share "forecast MAE (naive)"
for mode in none stall forecast; do
	"$sim" replay --trace "$trace" --pods default --arrival-scale "$scale" \
		--copies "$copies" --burst "$mode" --cloud-max 128 --cloud-gpus 8 \
		--cloud-boot 120 --cloud-gpu-price 3 --json |
		jq -r '[.burst, .wait_p50_s, .wait_p95_s, .wait_mean_s, .cloud_launched,
			.cloud_gpu_hours, .cloud_cost, .cloud_only_cost, .forecast_mae, .naive_mae,
			.forecast_scored] | @tsv' |
		while IFS=$'\t' read -r m p50 p95 mean n gh cost only mae naive scored; do
			printf '%-9s %8.0f %8.0f %8.0f %10d %12.1f %12.0f %7.1f%% %.5f (%.5f; %d scored)\n' \
				"$m" "$p50" "$p95" "$mean" "$n" "$gh" "$cost" \
				"$(awk -v c="$cost" -v o="$only" 'BEGIN { print 100 * c / o }')" \
				"$mae" "$naive" "$scored"
		done
done
"$sim" replay --trace "$trace" --pods default --arrival-scale "$scale" --copies "$copies" --json |
	jq -r '"cloud-only baseline: \(.cloud_only_cost | floor) (every pod'"'"'s GPU time at 3.00 per GPU-hour)"'
