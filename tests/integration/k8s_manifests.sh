#!/usr/bin/env bash
# k8s_manifests.sh - the Kubernetes manifests of deploy/k8s and the Helm
# chart of deploy/helm/cnlab (issue 22, first part), with real tools:
#
#   - every overlay renders with `kubectl kustomize`, and every object of
#     the output (and the base's, and the ServiceMonitor component's) is
#     valid against the Kubernetes OpenAPI schemas (kubernetes-models 5.1,
#     which has resource.k8s.io/v1; the Prometheus operator's for
#     ServiceMonitor and PodMonitor), and objects broken on purpose are
#     refused by the same validators;
#   - the rendered output's security: every pod template but the agent's
#     non-root, read-only root, no capabilities, no privilege escalation,
#     RuntimeDefault seccomp, no host namespaces or paths; the agent's host
#     paths are the listed ones; no Role or ClusterRole grants * or
#     escalate/bind/impersonate; cnlabd cannot read Secrets cluster-wide;
#     the agent cannot create pods or read Secrets; production's containers
#     all have a memory limit;
#   - custom resources against the CRDs' schemas and CEL rules: the valid
#     samples of tests/k8s/samples/valid are taken, each invalid one is
#     refused for the reason its cnlab.io/expect annotation names;
#   - the chart: values.yaml satisfies values.schema.json and the files of
#     tests/k8s/bad-values are refused; its crds/ are the base's, byte for
#     byte.  Its templates are NOT rendered: there is no helm binary here
#     (and no faithful Go-template engine besides it); the Kustomize base
#     is the tested path.
#
# kubectl missing, or tests/k8s/node_modules, is a failure (scripts/bootstrap
# installs both).  No cluster is needed or used.
set -u
. "$(dirname "$0")/lib.sh"
root=$(cd "$(dirname "$0")/../.." && pwd)
need_tools kubectl node cmp
k8s=$root/deploy/k8s
chart=$root/deploy/helm/cnlab
t=$root/tests/k8s
[ -d "$t/node_modules/kubernetes-models" ] || {
	echo "FAIL tests/k8s/node_modules is missing (scripts/bootstrap runs npm ci --prefix tests/k8s)"
	exit 1
}
# kubectl's own kustomize renders; Debian 12's kubernetes-client (1.20,
# kustomize v2.0) knows neither components nor labels: say so at once.
kv=$(kubectl version --client 2>/dev/null | sed -n 's/^Kustomize Version: v//p')
[ "${kv%%.*}" -ge 5 ] 2>/dev/null || {
	echo "FAIL kubectl's kustomize is ${kv:-older than v4 (no version line)}; the overlays need v5 (kubectl 1.27 or later)"
	exit 1
}
ok "kubectl $(kubectl version --client 2>/dev/null | sed -n 's/^Client Version: //p'), kustomize v$kv"
check() { node "$t/check.mjs" "$@"; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# Render: the base, each overlay.
rendered=()
for d in "$k8s/base" "$k8s"/overlays/*/; do
	d=${d%/}
	n=$(basename "$d")
	if out=$(kubectl kustomize "$d" 2>&1 >"$tmp/$n.yaml"); then
		ok "kubectl kustomize ${d#"$root"/}: $(grep -c '^kind:' "$tmp/$n.yaml") objects"
		rendered+=("$tmp/$n.yaml")
	else
		bad "kubectl kustomize ${d#"$root"/}: $out"
	fi
done
[ -s "$tmp/production.yaml" ] && [ -s "$tmp/dev.yaml" ] || bad "the production and dev overlays are not both there"

# Schemas: every rendered object, the component's objects, and the
# validators' own negative control.
mapfile -t parts < <(find "$k8s/components" -name '*.yaml' ! -name kustomization.yaml | sort)
out=$(check objects "${rendered[@]}" "${parts[@]}" 2>&1)
echo "$out"
fails=$((fails + $(grep -c '^FAIL' <<<"$out")))
for kind in "resource.k8s.io/v1 DeviceClass" "apiextensions.k8s.io/v1 CustomResourceDefinition" \
	"monitoring.coreos.com/v1 ServiceMonitor" "apps/v1 DaemonSet" "apps/v1 StatefulSet"; do
	grep -q "kinds:.*$kind" <<<"$out" && ok "validated a $kind" || bad "no $kind was validated"
done
out=$(check refused "$t/bad-objects/broken.yaml" 2>&1)
echo "$out"
fails=$((fails + $(grep -c '^FAIL' <<<"$out")))

# What each overlay must and must not have.
grep -q '^kind: ServiceMonitor' "$tmp/production.yaml" && ok "production has the ServiceMonitor" ||
	bad "production has no ServiceMonitor"
grep -q '^kind: ServiceMonitor' "$tmp/dev.yaml" && bad "dev has a ServiceMonitor" || ok "dev has no ServiceMonitor"
grep -q '^kind: StatefulSet' "$tmp/dev.yaml" && ok "dev has its PostgreSQL StatefulSet" || bad "dev has no PostgreSQL"
# The DeviceClass is cluster-scoped: no namespace (Kustomize would add
# one if the namespace were set above base/cnlab).
for f in "${rendered[@]}"; do
	awk '/^---/{k=""} /^kind: /{k=$2} k=="DeviceClass" && /^  namespace:/{bad=1} END{exit bad}' "$f" &&
		ok "$(basename "$f"): the DeviceClass has no namespace" ||
		bad "$(basename "$f"): the DeviceClass was given a namespace"
done
# Every cnlabd setting and agent setting named in an environment variable
# exists (src/server/main.c's, src/agent/main.c's and src/agent/dra/main.c's tables).
for f in "${rendered[@]}" "$chart"/templates/*.yaml; do
	grep -o 'CNLAB_[A-Z_]*' "$f"
done | sort -u >"$tmp/envs"
bad_env=
while read -r e; do
	case $e in
	CNLAB_JWT_SECRET | CNLAB_ADMIN_PASSWORD | CNLAB_AGENT_TOKEN) continue ;;
	CNLAB_AGENT_*) key=$(tr '[:upper:]' '[:lower:]' <<<"${e#CNLAB_AGENT_}") src=src/agent/main.c ;;
	CNLAB_DRA_*) key=$(tr '[:upper:]' '[:lower:]' <<<"${e#CNLAB_DRA_}") src=src/agent/dra/main.c ;;
	*) key=$(tr '[:upper:]' '[:lower:]' <<<"${e#CNLAB_}") src=src/server/main.c ;;
	esac
	grep -q "^ *{\"$key\", CNL_CONFIG_" "$root/$src" || bad_env="$bad_env $e"
done <"$tmp/envs"
[ -z "$bad_env" ] && ok "$(wc -l <"$tmp/envs") CNLAB_* variables, each a real setting or secret" ||
	bad "no such setting:$bad_env"

# Security of what is deployed.
for f in "${rendered[@]}"; do
	n=$(basename "$f" .yaml)
	flag=
	[ "$n" = production ] && flag=--resources
	out=$(check security $flag "$f" 2>&1)
	sed "s/^\(ok  \|FAIL\) /\1 $n: /" <<<"$out"
	fails=$((fails + $(grep -c '^FAIL' <<<"$out")))
done

# Custom resources against the CRDs.
out=$(check crs "$k8s/base/crds" "$t/samples/valid" "$t/samples/invalid" 2>&1)
echo "$out"
fails=$((fails + $(grep -c '^FAIL' <<<"$out")))

# The chart.
for f in Chart.yaml values.yaml values.schema.json templates/NOTES.txt templates/_helpers.tpl; do
	[ -s "$chart/$f" ] && ok "chart has $f" || bad "chart lacks $f"
done
grep -q '^apiVersion: v2$' "$chart/Chart.yaml" && ok "Chart.yaml is apiVersion v2" || bad "Chart.yaml: not apiVersion v2"
out=$(check values "$chart/values.schema.json" "$chart/values.yaml" "$t/bad-values" 2>&1)
echo "$out"
fails=$((fails + $(grep -c '^FAIL' <<<"$out")))
n=0
for f in "$k8s"/base/crds/*.yaml; do
	n=$((n + 1))
	cmp -s "$f" "$chart/crds/$(basename "$f")" && ok "chart crds/$(basename "$f") is the base's" ||
		bad "chart crds/$(basename "$f") differs from deploy/k8s/base/crds (copy it)"
done
[ "$(find "$chart/crds" -name '*.yaml' | wc -l)" = "$n" ] && [ "$n" = 2 ] && ok "chart has the base's $n CRDs, no other" ||
	bad "chart crds/ and the base's CRDs differ in number"
# NOTES.txt says what reconciles the CRDs, and where it may make pods.
grep -q 'reconciles TrainingJobs and NotebookServers' "$chart/templates/NOTES.txt" &&
	grep -q 'cnlabd" . }}-workloads' "$chart/templates/NOTES.txt" &&
	ok "NOTES.txt says what reconciles the CRDs and which namespaces it may make pods in" ||
	bad "NOTES.txt does not say what reconciles the CRDs"
if command -v helm >/dev/null; then
	out=$(helm lint "$chart" 2>&1) && ok "helm lint" || bad "helm lint: $out"
	out=$(helm template cnlab "$chart" --namespace cnlab 2>&1 >"$tmp/helm.yaml") && ok "helm template" || bad "helm template: $out"
	[ -s "$tmp/helm.yaml" ] && {
		out=$(check objects "$tmp/helm.yaml" && check security --resources "$tmp/helm.yaml")
		echo "$out"
		fails=$((fails + $(grep -c '^FAIL' <<<"$out")))
	}
else
	echo "note the chart's templates are not rendered: no helm binary on this machine (the Kustomize base is the tested path)"
fi

[ "$fails" = 0 ] && echo "all passed" || echo "$fails failed"
[ "$fails" = 0 ]
