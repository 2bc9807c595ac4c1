#!/usr/bin/env bash
# grafana_panels.sh - every panel of the Grafana dashboards of
# deploy/grafana/dashboards works on a real platform (issue 20): a real
# Prometheus (Debian's /usr/bin/prometheus, its TSDB in a temporary
# folder, on a free loopback port, scraping every second) scrapes a
# running all-in-one cnlabd and its embedded agent (the fake
# libnvidia-ml.so.1 through the real NVML calls, the agent's /metrics on
# loopback) while a job runs under a project quota; then each panel's
# PromQL expression, with the dashboards' template variables substituted
# (all values, $__rate_interval as 1m), is evaluated through Prometheus's
# HTTP API (/api/v1/query): each must parse (status success) and return
# data (a non-empty result).  Each template variable's label_values()
# query must find values too, and each panel must name the datasource uid
# the provisioning file fixes.
set -u
cnlabd=$1
fake_nvml=$2
dash_dir=$3
tmp=$(mktemp -d)
pid=
ppid_=
cleanup() {
	[ -n "$ppid_" ] && kill "$ppid_" 2>/dev/null && wait "$ppid_" 2>/dev/null
	[ -n "$pid" ] && kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null
	rm -rf "$tmp"
}
trap cleanup EXIT
. "$(dirname "$0")/lib.sh"
need_tools prometheus jq curl python3
dashboards=("$dash_dir"/dashboards/*.json)
[ "${#dashboards[@]}" -ge 4 ] || {
	echo "FAIL no dashboards under $dash_dir/dashboards"
	exit 1
}
uid=$(sed -n 's/^ *uid: *\([^ ]*\)$/\1/p' "$dash_dir/provisioning/datasources/cnlab.yaml")
[ -n "$uid" ] && ok "the datasource has a fixed uid ($uid)" || bad "no datasource uid"

export FAKE_NVML_GPUS=2 FAKE_NVML_MEM_MIB=81559
allinone_nvml_start "$cnlabd" "$tmp" "$fake_nvml"
api() { curl -sS -X "$1" -H "Authorization: Bearer $tok" ${3:+-d "$3"} "$url$2"; }
proj=$(api GET /v1/projects | jq -r '.items[] | select(.name=="default") | .id')
api PUT "/v1/projects/$proj/quota" '{"gpu_hours":100}' >/dev/null
job=$(api POST "/v1/projects/$proj/jobs" '{"command":"sleep 300","gpu":"h100-25"}' | jq -r .id)
for _ in $(seq 150); do
	[ "$(api GET "/v1/jobs/$job" | jq -r .state)" = running ] && break
	sleep 0.2
done
[ "$(api GET "/v1/jobs/$job" | jq -r .state)" = running ] && ok "a job runs under a quota" ||
	bad "job: $(api GET "/v1/jobs/$job")"

# A free loopback port for Prometheus.
pport=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
cport=${url##*:}
cport=${cport%%/*}
cat >"$tmp/prometheus.yml" <<YML
global:
  scrape_interval: 1s
  evaluation_interval: 1s
scrape_configs:
  - job_name: cnlabd
    static_configs:
      - targets: ["127.0.0.1:$cport"]
  - job_name: cnlab-agent
    honor_labels: true
    static_configs:
      - targets: ["127.0.0.1:$mport"]
YML
prometheus --config.file "$tmp/prometheus.yml" --storage.tsdb.path "$tmp/tsdb" \
	--web.listen-address "127.0.0.1:$pport" >"$tmp/prom.log" 2>&1 &
ppid_=$!
prom=http://127.0.0.1:$pport
q() { curl -sS --get --data-urlencode "query=$1" "$prom/api/v1/query"; }
# Both targets up, and enough scrapes for rate() over 1m.
for _ in $(seq 300); do
	n=$(q 'count(count_over_time(up[1m]) >= 8 and up == 1)' 2>/dev/null | jq -r '.data.result[0].value[1] // 0' 2>/dev/null)
	[ "$n" = 2 ] && break
	sleep 0.2
done
[ "$n" = 2 ] && ok "Prometheus scrapes cnlabd and the agent" || {
	bad "targets not up: $(curl -sS "$prom/api/v1/targets" | jq -c '[.data.activeTargets[] | {scrapeUrl,health,lastError}]')"
	tail -5 "$tmp/prom.log"
}

nexpr=0
for d in "${dashboards[@]}"; do
	name=$(basename "$d")
	jq -e . "$d" >/dev/null || {
		bad "$name is not JSON"
		continue
	}
	# Panels name the fixed datasource.
	other=$(jq -r --arg u "$uid" '[.. | objects | select(has("datasource")) | .datasource | objects | .uid | select(. != $u)] | length' "$d")
	[ "$other" = 0 ] && ok "$name: every datasource is $uid" || bad "$name: datasources other than $uid"
	# Template variables: label_values(METRIC, LABEL) finds values.
	while IFS= read -r v; do
		[ -n "$v" ] || continue
		metric=$(echo "$v" | sed -n 's/^label_values(\(.*\), *\([A-Za-z_]*\))$/\1/p' | sed 's/\$[a-z]*/.*/g')
		label=$(echo "$v" | sed -n 's/^label_values(\(.*\), *\([A-Za-z_]*\))$/\2/p')
		vals=$(curl -sS --get --data-urlencode "match[]=$metric" "$prom/api/v1/label/$label/values" | jq -r '.data | length')
		[ -n "$label" ] && [ "${vals:-0}" -gt 0 ] && ok "$name: variable $v has values" || bad "$name: variable $v: none"
	done < <(jq -r '.templating.list[]?.query | if type == "object" then .query else . end' "$d")
	# Every panel's expressions, variables substituted.
	while IFS=$'\t' read -r title expr; do
		nexpr=$((nexpr + 1))
		e=$(echo "$expr" | sed 's/\$__rate_interval/1m/g; s/\$[a-z_]*/.*/g')
		r=$(q "$e")
		st=$(echo "$r" | jq -r .status 2>/dev/null)
		len=$(echo "$r" | jq -r '.data.result | length' 2>/dev/null)
		[ "$st" = success ] && [ "${len:-0}" -gt 0 ] && ok "$name: $title: $e" ||
			bad "$name: $title: $e -> $(echo "$r" | head -c 300)"
	done < <(jq -r '.. | objects | select(has("targets")) | .title as $t | .targets[] | [$t, .expr] | @tsv' "$d")
done
[ "$nexpr" -ge 20 ] && ok "$nexpr panel expressions evaluated" || bad "only $nexpr expressions found"
api POST "/v1/jobs/$job/cancel" '{}' >/dev/null
[ "$fails" = 0 ] && echo "all passed" || echo "$fails failed"
[ "$fails" = 0 ]
