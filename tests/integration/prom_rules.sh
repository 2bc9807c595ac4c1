#!/usr/bin/env bash
# prom_rules.sh - the Prometheus files of deploy/prometheus (issue 20):
# `promtool check config` accepts the example prometheus.yml, `promtool
# check rules` the alert rules, and `promtool test rules` runs
# alerts_test.yml, which must test every alert of alerts.yml both firing
# and not firing.  promtool missing is a failure (scripts/bootstrap
# installs the prometheus package).
set -u
dir=$1
. "$(dirname "$0")/lib.sh"
command -v promtool >/dev/null || {
	echo "FAIL promtool is not installed (scripts/bootstrap installs prometheus)"
	exit 1
}
cd "$dir" || exit 1
out=$(promtool check config prometheus.yml 2>&1) && ok "promtool check config prometheus.yml" || bad "check config: $out"
out=$(promtool check rules alerts.yml 2>&1) && ok "promtool check rules alerts.yml" || bad "check rules: $out"
out=$(promtool test rules alerts_test.yml 2>&1) && ok "promtool test rules alerts_test.yml" || bad "test rules: $out"
alerts=$(sed -n 's/^ *- alert: *\([A-Za-z]*\)$/\1/p' alerts.yml)
[ "$(echo "$alerts" | wc -w)" -ge 6 ] && ok "$(echo $alerts | wc -w) alerts" || bad "alerts: $alerts"
for a in $alerts; do
	# Each alert: one eval expecting it to fire, one expecting nothing.
	fire=$(awk -v a="$a" '/alertname:/{n=$2} /exp_alerts:$/{if(n==a)c++} END{print c+0}' alerts_test.yml)
	quiet=$(awk -v a="$a" '/alertname:/{n=$2} /exp_alerts: \[\]/{if(n==a)c++} END{print c+0}' alerts_test.yml)
	[ "$fire" -ge 1 ] && [ "$quiet" -ge 1 ] && ok "$a tested firing ($fire) and not ($quiet)" ||
		bad "$a: tested firing $fire, not firing $quiet"
done
[ "$fails" = 0 ] && echo "all passed" || echo "$fails failed"
[ "$fails" = 0 ]
