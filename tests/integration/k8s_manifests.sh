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
#     byte;
#   - the chart's templates rendered: by `helm template` where helm is
#     installed, else by tests/k8s/helm-render (Debian has no helm): Go's
#     own text/template, the engine Helm runs, with Helm's built-in
#     objects and the template functions the chart uses written after
#     Helm's and Sprig's documentation (a function it lacks fails the
#     parse).  The render with the chart's defaults must hold what the
#     Kustomize base holds (the same kinds, as many of each, but the CRDs,
#     which the chart keeps in crds/, and the Namespace, which helm
#     takes from --namespace), valid against the schemas and with the same
#     security properties; so must a render under another release name and
#     namespace with the ServiceMonitor on (names prefixed, the monitor
#     there), and one with the optional parts off (no agent, no DRA plugin,
#     no DeviceClass, no NetworkPolicy); the ServiceMonitor without the
#     Prometheus operator's API fails, as `helm install` would.
#
# kubectl missing, go, or tests/k8s/node_modules, is a failure
# (scripts/bootstrap installs them).  No cluster is needed or used.
set -u
. "$(dirname "$0")/lib.sh"
root=$(cd "$(dirname "$0")/../.." && pwd)
need_tools kubectl node cmp go
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
# render NAME NAMESPACE [ARGS...]: the chart's templates, on stdout.
if command -v helm >/dev/null; then
	out=$(helm lint "$chart" 2>&1) && ok "helm lint" || bad "helm lint: $out"
	render() {
		local name=$1 ns=$2
		shift 2
		helm template "$name" "$chart" --namespace "$ns" "$@"
	}
	how="helm template"
else
	# Built with Debian's Go and its yaml.v3, offline (GOPATH mode).
	if out=$(cd "$t/helm-render" && GO111MODULE=off GOPATH=/usr/share/gocode \
		GOCACHE="$tmp/go-cache" go build -o "$tmp/helm-render" . 2>&1); then
		ok "tests/k8s/helm-render built ($(go version | cut -d' ' -f3))"
	else
		bad "tests/k8s/helm-render does not build: $out"
	fi
	render() {
		local name=$1 ns=$2
		shift 2
		"$tmp/helm-render" --name "$name" --namespace "$ns" "$@" "$chart"
	}
	how="helm-render (no helm here)"
fi
# kinds FILE: "COUNT KIND" lines, sorted.
kinds() { grep '^kind: ' "$1" | sort | uniq -c | sed 's/^ *//'; }
if render cnlab cnlab >"$tmp/helm.yaml" 2>"$tmp/helm.err"; then
	ok "$how: the chart renders with its defaults ($(grep -c '^kind: ' "$tmp/helm.yaml") objects)"
else
	bad "$how: $(cat "$tmp/helm.err")"
fi
# Run pods' collector of artifacts runs the agent's own image, uploading
# to cnlabd's Service: in every render, the overlays' images included.
collect_of() { # collect_of FILE: "COLLECT_IMAGE AGENT_IMAGE URL"
	python3 -c '
import sys, yaml
img = env = None
for d in yaml.safe_load_all(open(sys.argv[1])):
    if not d or d.get("kind") not in ("Deployment", "DaemonSet"):
        continue
    for c in d["spec"]["template"]["spec"]["containers"]:
        e = {v["name"]: v.get("value") for v in c.get("env", [])}
        if "CNLAB_KUBE_COLLECT_IMAGE" in e:
            env = e
        if "CNLAB_AGENT_SERVER" in e:
            img = c["image"]
print(env and env["CNLAB_KUBE_COLLECT_IMAGE"], img, env and env["CNLAB_KUBE_COLLECT_URL"])
' "$1"
}
for f in "${rendered[@]}" "$tmp/helm.yaml"; do
	read -r ci ai cu <<<"$(collect_of "$f")"
	[ "$ci" = "$ai" ] && [[ $cu == http://*cnlabd.*.svc:8080 ]] &&
		ok "$(basename "$f"): the collector's image is the agent's ($ai), uploading to $cu" ||
		bad "$(basename "$f"): collector image '$ci', agent '$ai', URL '$cu'"
done
# What the Kustomize base deploys, the chart deploys (CRDs in crds/).
kinds "$tmp/base.yaml" | grep -v -e ' CustomResourceDefinition$' -e ' Namespace$' >"$tmp/kinds.base"
kinds "$tmp/helm.yaml" >"$tmp/kinds.helm"
if cmp -s "$tmp/kinds.base" "$tmp/kinds.helm"; then
	ok "the chart's objects are the Kustomize base's: $(paste -sd, "$tmp/kinds.helm")"
else
	bad "the chart and the Kustomize base deploy different objects: $(diff "$tmp/kinds.base" "$tmp/kinds.helm" | grep '^[<>]' | paste -sd' ')"
fi
cat >"$tmp/all-on.yaml" <<'VALUES'
serviceMonitor:
  enabled: true
VALUES
cat >"$tmp/parts-off.yaml" <<'VALUES'
agent:
  enabled: false
draPlugin:
  enabled: false
deviceClass:
  create: false
networkPolicy:
  enabled: false
VALUES
if render team-a research -f "$tmp/all-on.yaml" --api-versions monitoring.coreos.com/v1/ServiceMonitor \
	>"$tmp/helm-team.yaml" 2>"$tmp/helm.err"; then
	grep -q '^kind: ServiceMonitor' "$tmp/helm-team.yaml" && ok "$how: release team-a has its ServiceMonitor" ||
		bad "$how: serviceMonitor.enabled made no ServiceMonitor"
	n=$(awk '/^metadata:/{m=1; next} m && /^  name: /{print $2; m=0}' "$tmp/helm-team.yaml" |
		grep -v -e '^team-a-cnlab' -e '^gpu\.cnlab\.io$' | head -3)
	[ -z "$n" ] && ok "$how: release team-a's objects are all named team-a-cnlab-* (but the DeviceClass)" ||
		bad "$how: release team-a has objects not named after it: $n"
	# helm puts namespaced objects in --namespace; what names one (a
	# binding's subjects, a policy's service accounts) says research.
	grep -q 'namespace: research$' "$tmp/helm-team.yaml" && ! grep -q 'namespace: cnlab$' "$tmp/helm-team.yaml" &&
		grep -q 'serviceaccount:research:team-a-cnlab-agent' "$tmp/helm-team.yaml" &&
		ok "$how: release team-a's subjects and policies name its namespace, research" ||
		bad "$how: release team-a's objects name another namespace than research"
else
	bad "$how (team-a): $(cat "$tmp/helm.err")"
fi
if render cnlab cnlab -f "$tmp/parts-off.yaml" >"$tmp/helm-off.yaml" 2>"$tmp/helm.err"; then
	grep -q -e '^kind: DaemonSet' -e '^kind: DeviceClass' -e '^kind: NetworkPolicy' "$tmp/helm-off.yaml" &&
		bad "$how: with the optional parts off, some are still there" ||
		ok "$how: with the optional parts off: no DaemonSet, DeviceClass or NetworkPolicy"
	grep -q '^kind: Deployment' "$tmp/helm-off.yaml" && ok "$how: ... and cnlabd's Deployment" ||
		bad "$how: with the optional parts off, cnlabd is gone too"
else
	bad "$how (parts off): $(cat "$tmp/helm.err")"
fi
if render cnlab cnlab -f "$tmp/all-on.yaml" >/dev/null 2>"$tmp/helm.err"; then
	bad "$how: a ServiceMonitor without the Prometheus operator's API was rendered"
else
	grep -q "needs the Prometheus operator" "$tmp/helm.err" &&
		ok "$how: a ServiceMonitor without the Prometheus operator's API fails, saying why" ||
		bad "$how: a ServiceMonitor without the operator failed otherwise: $(cat "$tmp/helm.err")"
fi
# The security checks want all three pod templates: not the parts-off render.
for f in "$tmp/helm.yaml" "$tmp/helm-team.yaml" "$tmp/helm-off.yaml"; do
	[ -s "$f" ] || continue
	n=$(basename "$f" .yaml)
	ns=cnlab
	[ "$n" = helm-team ] && ns=research
	if [ "$n" = helm-off ]; then
		out=$(check objects "$f" 2>&1)
	else
		out=$(check objects "$f" 2>&1 && check security --resources --namespace "$ns" "$f" 2>&1)
	fi
	sed "s/^\(ok  \|FAIL\) /\1 $n: /" <<<"$out"
	fails=$((fails + $(grep -c '^FAIL' <<<"$out")))
done

[ "$fails" = 0 ] && echo "all passed" || echo "$fails failed"
[ "$fails" = 0 ]
