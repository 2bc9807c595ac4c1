// check.mjs - the checks of tests/integration/k8s_manifests.sh that need
// JavaScript: Kubernetes objects against the API's OpenAPI schemas
// (kubernetes-models, @kubernetes-models/prometheus-operator), custom
// resources against our CRDs' openAPIV3Schema (ajv) and CEL rules
// (@marcbachmann/cel-js), the rendered output's security properties, and
// the Helm chart's values against values.schema.json.  Versions are
// pinned by package-lock.json next to this file.
//
//   node check.mjs objects FILE...          every object valid; none of an unknown kind
//   node check.mjs refused FILE...          every object of each file refused
//   node check.mjs security [--resources] [--namespace NS] FILE
//                                           (NS: where objects without a
//                                           namespace go, as helm's)
//   node check.mjs crs CRD_DIR VALID_DIR INVALID_DIR
//   node check.mjs values SCHEMA VALUES BAD_DIR
//   node check.mjs cdi SCHEMA FILE...      CDI spec files valid (tests/k8s/cdi)
//   node check.mjs cdi-refused SCHEMA FILE...  each refused
//   node check.mjs restricted FILE...      each Pod meets Pod Security's
//                                           "restricted" profile (tenant pods)
//   node check.mjs restricted-refused FILE...  each Pod of each file fails it
//
// Each prints "ok   ..." or "FAIL ..." lines, like tests/integration/lib.sh,
// and exits 1 when anything failed (2 on a usage error).
import { readFileSync, readdirSync } from "node:fs";
import { join } from "node:path";
import { parseAllDocuments } from "yaml";
import Ajv from "ajv";
import addFormats from "ajv-formats";
import { evaluate } from "@marcbachmann/cel-js";

let fails = 0;
const ok = (m) => console.log(`ok   ${m}`);
const bad = (m) => {
	console.log(`FAIL ${m}`);
	fails++;
};

function loadYaml(file) {
	const docs = parseAllDocuments(readFileSync(file, "utf8"));
	const out = [];
	for (const d of docs) {
		if (d.errors.length) throw new Error(`${file}: ${d.errors[0].message}`);
		const v = d.toJS();
		if (v !== null && v !== undefined) out.push(v);
	}
	return out;
}

const name = (o) =>
	`${o.kind}/${o.metadata?.namespace ? o.metadata.namespace + "/" : ""}${o.metadata?.name}`;

// The model class of apiVersion + kind: kubernetes-models has one module
// per kind, under its group's folder ("v1" for the core group).
async function modelOf(apiVersion, kind) {
	const [group, version] = apiVersion.includes("/") ? apiVersion.split("/") : ["", apiVersion];
	const base =
		group === "monitoring.coreos.com"
			? "@kubernetes-models/prometheus-operator/monitoring.coreos.com"
			: group === ""
				? "kubernetes-models"
				: `kubernetes-models/${group}`;
	try {
		const m = await import(`${base}/${version}/${kind}`);
		return m[kind];
	} catch {
		return null;
	}
}

async function validateObject(o) {
	const M = await modelOf(o.apiVersion, o.kind);
	if (!M) return `no schema for ${o.apiVersion} ${o.kind}`;
	// Kustomize folds a long Secret value's base64 over lines; the API
	// server's decoder (Go's encoding/base64) skips the newlines, the
	// schema's "byte" format does not: unfold first.
	if (o.kind === "Secret" && o.data)
		o = { ...o, data: Object.fromEntries(Object.entries(o.data).map(([k, v]) => [k, String(v).replace(/[\r\n]/g, "")])) };
	try {
		new M(o).validate();
		return null;
	} catch (e) {
		return e.message.split("\n")[0];
	}
}

async function cmdObjects(files) {
	const seen = new Map();
	for (const f of files) {
		const objs = loadYaml(f);
		if (!objs.length) bad(`${f}: no objects`);
		for (const o of objs) {
			const err = await validateObject(o);
			if (err) bad(`${f}: ${name(o)}: ${err}`);
			seen.set(`${o.apiVersion} ${o.kind}`, (seen.get(`${o.apiVersion} ${o.kind}`) || 0) + 1);
		}
		ok(`${f}: ${objs.length} objects checked against their schemas`);
	}
	console.log(`     kinds: ${[...seen.keys()].sort().join(", ")}`);
}

// The validators must refuse what is wrong: each object of these files
// is broken on purpose (a test that cannot fail is a defect).
async function cmdRefused(files) {
	for (const f of files) {
		for (const o of loadYaml(f)) {
			const err = await validateObject(o);
			if (err && !err.startsWith("no schema")) ok(`${f}: ${name(o)} refused: ${err}`);
			else bad(`${f}: ${name(o)} was accepted${err ? ` (${err})` : ""}`);
		}
	}
}

// --- security -----------------------------------------------------------

const WORKLOADS = new Set(["Deployment", "StatefulSet", "DaemonSet", "ReplicaSet", "Job"]);
// The agent and the DRA plugin alone are privileged (their DaemonSets
// say why), and only these host paths are each's.
const AGENT = "cnlab-agent";
const PLUGIN = "cnlab-dra-plugin";
const HOST_PATHS = {
	[AGENT]: new Set(["/var/lib/cnlab-agent", "/run/cnlab-run", "/sys/fs/cgroup"]),
	[PLUGIN]: new Set(["/var/lib/kubelet/plugins/gpu.cnlab.io", "/var/lib/kubelet/plugins_registry", "/var/run/cdi"]),
};

// Their DaemonSets by their pods' label: the chart prefixes names with
// the release's.
const setOf = (o) => (o.kind === "DaemonSet" ? o.spec?.template?.metadata?.labels?.["app.kubernetes.io/name"] : undefined);
const isAgentSet = (o) => setOf(o) === AGENT;
const isPluginSet = (o) => setOf(o) === PLUGIN;

function podOf(o) {
	if (o.kind === "Pod") return o.spec;
	if (o.kind === "CronJob") return o.spec?.jobTemplate?.spec?.template?.spec;
	if (WORKLOADS.has(o.kind)) return o.spec?.template?.spec;
	return null;
}

function checkPod(o, pod, wantResources) {
	const who = name(o);
	const isAgent = isAgentSet(o) || isPluginSet(o);
	const problems = [];
	const containers = [...(pod.initContainers || []), ...(pod.containers || [])];
	for (const k of ["hostNetwork", "hostPID", "hostIPC"])
		if (pod[k]) problems.push(`${k}: true`);
	for (const v of pod.volumes || []) {
		if (!v.hostPath) continue;
		if (!isAgent) problems.push(`hostPath ${v.hostPath.path}`);
		else if (!HOST_PATHS[setOf(o)].has(v.hostPath.path))
			problems.push(`hostPath ${v.hostPath.path} is not one of ${setOf(o)}'s`);
	}
	if (pod.automountServiceAccountToken !== false)
		problems.push("automountServiceAccountToken is not false");
	const psc = pod.securityContext || {};
	for (const c of containers) {
		const sc = c.securityContext || {};
		const cn = `container ${c.name}`;
		if (wantResources && !c.resources?.limits?.memory) problems.push(`${cn}: no memory limit`);
		if (isAgent) {
			// Privileged, but nothing added on top of it.
			if (sc.capabilities?.add?.length) problems.push(`${cn}: adds capabilities`);
			continue;
		}
		if (sc.privileged) problems.push(`${cn}: privileged`);
		if ((sc.runAsNonRoot ?? psc.runAsNonRoot) !== true) problems.push(`${cn}: runAsNonRoot not true`);
		if ((sc.runAsUser ?? psc.runAsUser) === 0) problems.push(`${cn}: runAsUser 0`);
		if (sc.readOnlyRootFilesystem !== true) problems.push(`${cn}: readOnlyRootFilesystem not true`);
		if (sc.allowPrivilegeEscalation !== false) problems.push(`${cn}: allowPrivilegeEscalation not false`);
		if (!(sc.capabilities?.drop || []).includes("ALL")) problems.push(`${cn}: does not drop ALL capabilities`);
		if (sc.capabilities?.add?.length) problems.push(`${cn}: adds capabilities ${sc.capabilities.add}`);
		if ((sc.seccompProfile?.type ?? psc.seccompProfile?.type) !== "RuntimeDefault")
			problems.push(`${cn}: seccompProfile not RuntimeDefault`);
	}
	if (isAgent && !containers.some((c) => c.securityContext?.privileged))
		problems.push(`${setOf(o)} is expected privileged (this check is stale)`);
	if (problems.length) bad(`${who}: ${problems.join("; ")}`);
	else ok(`${who}: ${isAgent ? `privileged ${setOf(o)}, its host paths only` : "non-root, read-only root, no capabilities, no escalation, RuntimeDefault seccomp"}`);
}

// Pod Security Standards, "restricted" (as the API server's admission
// plugin reads them, v1.34): what a namespace labelled
// pod-security.kubernetes.io/enforce=restricted admits.  The reasons a
// pod is refused, [] when admitted.
const RESTRICTED_VOLUMES = new Set(["configMap", "csi", "downwardAPI", "emptyDir", "ephemeral", "persistentVolumeClaim", "projected", "secret"]);
function restrictedProblems(pod) {
	const problems = [];
	const psc = pod.securityContext || {};
	const all = [...(pod.initContainers || []), ...(pod.containers || []), ...(pod.ephemeralContainers || [])];
	for (const k of ["hostNetwork", "hostPID", "hostIPC"]) if (pod[k]) problems.push(`${k}: true`);
	for (const v of pod.volumes || []) {
		const kinds = Object.keys(v).filter((k) => k !== "name");
		if (kinds.some((k) => !RESTRICTED_VOLUMES.has(k))) problems.push(`volume ${v.name}: ${kinds.join(",")}`);
	}
	const podSeccomp = psc.seccompProfile?.type;
	if (podSeccomp && !["RuntimeDefault", "Localhost"].includes(podSeccomp)) problems.push(`pod seccompProfile ${podSeccomp}`);
	if (psc.runAsUser === 0) problems.push("pod runAsUser 0");
	if (psc.sysctls?.length) problems.push("pod sysctls");
	for (const c of all) {
		const sc = c.securityContext || {};
		const cn = `container ${c.name}`;
		if (sc.privileged) problems.push(`${cn}: privileged`);
		if (sc.allowPrivilegeEscalation !== false) problems.push(`${cn}: allowPrivilegeEscalation not false`);
		if ((sc.runAsNonRoot ?? psc.runAsNonRoot) !== true) problems.push(`${cn}: runAsNonRoot not true`);
		if (sc.runAsUser === 0) problems.push(`${cn}: runAsUser 0`);
		const sec = sc.seccompProfile?.type ?? podSeccomp;
		if (!["RuntimeDefault", "Localhost"].includes(sec)) problems.push(`${cn}: seccompProfile ${sec ?? "unset"}`);
		if (!(sc.capabilities?.drop || []).includes("ALL")) problems.push(`${cn}: does not drop ALL capabilities`);
		for (const a of sc.capabilities?.add || []) if (a !== "NET_BIND_SERVICE") problems.push(`${cn}: adds ${a}`);
		for (const p of c.ports || []) if (p.hostPort) problems.push(`${cn}: hostPort ${p.hostPort}`);
		if (sc.procMount && sc.procMount !== "Default") problems.push(`${cn}: procMount ${sc.procMount}`);
	}
	return problems;
}

function cmdRestricted(files, wantAdmitted) {
	for (const f of files) {
		const pods = loadYaml(f).filter((o) => o.kind === "Pod");
		if (!pods.length) bad(`${f}: no pods`);
		for (const o of pods) {
			const problems = restrictedProblems(o.spec || {});
			if (wantAdmitted === !problems.length) ok(`${name(o)}: ${wantAdmitted ? "Pod Security restricted" : `refused by restricted (${problems.join("; ")})`}`);
			else bad(`${name(o)}: ${wantAdmitted ? problems.join("; ") : "admitted by restricted, should not be"}`);
		}
	}
}

// A ValidatingAdmissionPolicy's verdict on a request, through its own CEL
// (cel-js): "not matched", "allowed" or "denied".
function runPolicy(vap, op, user, extra, obj, old) {
	const request = { operation: op, userInfo: { username: user, extra } };
	const ctx = { request, object: obj, oldObject: old };
	if (!(vap.spec.matchConditions || []).every((m) => evaluate(m.expression, ctx) === true)) return "not matched";
	const variables = {};
	for (const v of vap.spec.variables || []) variables[v.name] = evaluate(v.expression, { ...ctx, variables });
	return vap.spec.validations.every((v) => evaluate(v.expression, { ...ctx, variables }) === true) ? "allowed" : "denied";
}

// Rules reachable by a ServiceAccount through the bindings in @objs.
function rulesOf(objs, sa) {
	const roles = new Map(objs.filter((o) => o.kind === "ClusterRole" || o.kind === "Role").map((r) => [`${r.kind}/${r.metadata.name}`, r]));
	const out = [];
	for (const b of objs.filter((o) => o.kind === "ClusterRoleBinding" || o.kind === "RoleBinding")) {
		if (!(b.subjects || []).some((s) => s.kind === "ServiceAccount" && s.name === sa)) continue;
		const r = roles.get(`${b.roleRef.kind}/${b.roleRef.name}`);
		if (!r) {
			bad(`${name(b)}: binds ${b.roleRef.kind} ${b.roleRef.name}, which is not in the output`);
			continue;
		}
		const clusterWide = b.kind === "ClusterRoleBinding";
		for (const rule of r.rules || []) out.push({ ...rule, clusterWide, from: name(r) });
	}
	return out;
}

const grants = (rule, group, resource, verb) =>
	(rule.apiGroups || []).some((g) => g === group || g === "*") &&
	(rule.resources || []).some((x) => x === resource || x === "*") &&
	(rule.verbs || []).some((v) => v === verb || v === "*");

function cmdSecurity(file, wantResources, namespace) {
	const objs = loadYaml(file);
	let pods = 0;
	for (const o of objs) {
		const pod = podOf(o);
		if (pod) {
			pods++;
			checkPod(o, pod, wantResources);
		}
	}
	if (pods < 2) bad(`${file}: only ${pods} pod templates`);
	for (const r of objs.filter((o) => o.kind === "ClusterRole" || o.kind === "Role")) {
		const wild = (r.rules || []).filter(
			(x) => [...(x.verbs || []), ...(x.resources || []), ...(x.apiGroups || [])].includes("*") || x.nonResourceURLs,
		);
		const esc = (r.rules || []).filter((x) => (x.verbs || []).some((v) => ["escalate", "bind", "impersonate"].includes(v)));
		if (wild.length || esc.length) bad(`${name(r)}: grants * or escalate/bind/impersonate`);
		else ok(`${name(r)}: no wildcard, no escalate/bind/impersonate`);
	}
	const cnlabd = objs.find((o) => o.kind === "Deployment" && /cnlabd$/.test(o.metadata.name));
	const agent = objs.find(isAgentSet);
	const plugin = objs.find(isPluginSet);
	if (!cnlabd || !agent || !plugin) {
		bad(`${file}: the cnlabd Deployment, the agent DaemonSet or the DRA plugin's is missing`);
		return;
	}
	const saCnlabd = podOf(cnlabd).serviceAccountName;
	// The plugin's: the one whose API token writes slices.
	const saAgent = podOf(plugin).serviceAccountName;
	const rc = rulesOf(objs, saCnlabd);
	const ra = rulesOf(objs, saAgent);
	if (!rc.length || !ra.length) bad(`no rules bound to ${saCnlabd} or ${saAgent}`);
	const secretRules = rc.filter((x) => ["get", "list", "watch"].some((v) => grants(x, "", "secrets", v)));
	const wideSecrets = secretRules.filter((x) => x.clusterWide || !(x.resourceNames || []).length);
	if (wideSecrets.length) bad(`${saCnlabd} may read Secrets beyond named ones in its namespace (${wideSecrets.map((x) => x.from)})`);
	else ok(`${saCnlabd} cannot read Secrets cluster-wide (${secretRules.length ? "named ones only" : "none at all"})`);
	// cnlabd runs `cnlab server exec` in its servers' pods, in the
	// namespaces that bind cnlab:cnlabd-workloads to it, nowhere else.
	const wideExec = rc.filter((x) => x.clusterWide && ["get", "create"].some((v) => grants(x, "", "pods/exec", v)));
	if (wideExec.length) bad(`${saCnlabd} may exec in pods cluster-wide (${wideExec.map((x) => x.from)})`);
	else ok(`${saCnlabd} may exec in pods only in namespaces that bind its workloads role`);
	for (const [verb, res] of [["create", "pods"], ["get", "secrets"], ["list", "secrets"], ["create", "pods/exec"]]) {
		const g = ra.filter((x) => grants(x, "", res, verb));
		if (g.length) bad(`${saAgent} may ${verb} ${res} (${g.map((x) => x.from)})`);
		else ok(`${saAgent} cannot ${verb} ${res}`);
	}
	// The agent's slices: what its DRA plugin publishes, and the claims it
	// prepares read, nothing else in resource.k8s.io.
	const other = ra.filter(
		(x) =>
			(x.apiGroups || []).includes("resource.k8s.io") &&
			(x.resources || []).some((r) => r !== "resourceslices" && !(r === "resourceclaims" && (x.verbs || []).every((v) => v === "get"))),
	);
	if (other.length) bad(`${saAgent} reaches resource.k8s.io beyond resourceslices and reading claims`);
	else ok(`${saAgent}: resource.k8s.io limited to resourceslices and reading claims`);
	// Its slices are held to its own node by an admission policy.
	const vap = objs.find((o) => o.kind === "ValidatingAdmissionPolicy" && /own-node-slices$/.test(o.metadata.name));
	const vapb = objs.find((o) => o.kind === "ValidatingAdmissionPolicyBinding" && vap && o.spec?.policyName === vap.metadata.name);
	if (vap && vapb && (vapb.spec.validationActions || []).includes("Deny") && JSON.stringify(vap.spec).includes("authentication.kubernetes.io/node-name"))
		ok(`${name(vap)}: the agent's token writes only its own node's slices (Deny)`);
	else bad("no ValidatingAdmissionPolicy (with a Deny binding) holds the agent to its own node's ResourceSlices");
	// The attack, through the policy's own CEL (cel-js): node-a's agent
	// writing node-b's slice, or deleting it, or a token without a node.
	if (vap) {
		const sa = `system:serviceaccount:${plugin.metadata.namespace || namespace}:${saAgent}`;
		const slice = (n) => ({ spec: { nodeName: n, driver: "gpu.cnlab.io" } });
		const run = (op, user, extra, obj, old) => runPolicy(vap, op, user, extra, obj, old);
		const a = { "authentication.kubernetes.io/node-name": ["node-a"] };
		const cases = [
			["CREATE own node", run("CREATE", sa, a, slice("node-a"), null), "allowed"],
			["UPDATE own node", run("UPDATE", sa, a, slice("node-a"), slice("node-a")), "allowed"],
			["CREATE another node's", run("CREATE", sa, a, slice("node-b"), null), "denied"],
			["UPDATE moving a slice to another node", run("UPDATE", sa, a, slice("node-b"), slice("node-a")), "denied"],
			["UPDATE taking another node's slice over", run("UPDATE", sa, a, slice("node-a"), slice("node-b")), "denied"],
			["DELETE another node's", run("DELETE", sa, a, null, slice("node-b")), "denied"],
			["CREATE with a token bound to no node", run("CREATE", sa, {}, slice("node-a"), null), "denied"],
			["another user (kube-scheduler, the kubelet)", run("CREATE", "system:node:node-b", {}, slice("node-a"), null), "not matched"],
		];
		for (const [what, got, want] of cases)
			if (got === want) ok(`${name(vap)}: ${what}: ${got}`);
			else bad(`${name(vap)}: ${what}: ${got}, want ${want}`);
	}
	// Our devices are allocated by cnlabd alone: kube-scheduler giving a
	// pod of its own a GPU that CNLab counts as free is refused.
	const cap = objs.find((o) => o.kind === "ValidatingAdmissionPolicy" && /claims-allocated-by-cnlab$/.test(o.metadata.name));
	const capb = objs.find((o) => o.kind === "ValidatingAdmissionPolicyBinding" && cap && o.spec?.policyName === cap.metadata.name);
	if (!cap || !capb || !(capb.spec.validationActions || []).includes("Deny"))
		bad("no ValidatingAdmissionPolicy (with a Deny binding) keeps gpu.cnlab.io allocations to cnlabd");
	else {
		const me = `system:serviceaccount:${cnlabd.metadata.namespace || namespace}:${saCnlabd}`;
		const alloc = (driver, pod) => ({
			status: {
				allocation: { devices: { results: [{ request: "gpu", driver, pool: "node1", device: "gpu-0" }] } },
				reservedFor: [{ resource: "pods", name: pod, uid: pod + "-uid" }],
			},
		});
		const none = { spec: {} };
		const cases = [
			["cnlabd allocating gpu.cnlab.io", runPolicy(cap, "UPDATE", me, {}, alloc("gpu.cnlab.io", "a"), none), "allowed"],
			["kube-scheduler allocating gpu.cnlab.io", runPolicy(cap, "UPDATE", "system:kube-scheduler", {}, alloc("gpu.cnlab.io", "a"), none), "denied"],
			["a tenant allocating gpu.cnlab.io", runPolicy(cap, "UPDATE", "alice", {}, alloc("gpu.cnlab.io", "a"), none), "denied"],
			["kube-scheduler allocating another driver's", runPolicy(cap, "UPDATE", "system:kube-scheduler", {}, alloc("gpu.nvidia.com", "a"), none), "not matched"],
			["the claim controller changing reservedFor, allocation kept", runPolicy(cap, "UPDATE", "system:serviceaccount:kube-system:resource-claim-controller", {}, { status: { ...alloc("gpu.cnlab.io", "a").status, reservedFor: [] } }, alloc("gpu.cnlab.io", "a")), "allowed"],
			["the claim controller taking the allocation away", runPolicy(cap, "UPDATE", "system:serviceaccount:kube-system:resource-claim-controller", {}, none, alloc("gpu.cnlab.io", "a")), "not matched"],
		];
		for (const [what, got, want] of cases)
			if (got === want) ok(`${name(cap)}: ${what}: ${got}`);
			else bad(`${name(cap)}: ${what}: ${got}, want ${want}`);
	}
	// The API token is in the DRA plugin's container alone; the agent,
	// which runs tenants' workloads, has none.
	const tokenIn = (pod) => {
		const vols = (pod.volumes || []).filter((v) => (v.projected?.sources || []).some((s) => s.serviceAccountToken)).map((v) => v.name);
		return (pod.containers || []).filter((c) => (c.volumeMounts || []).some((m) => vols.includes(m.name))).map((c) => c.name);
	};
	const pp = podOf(plugin), ap = podOf(agent);
	const withToken = tokenIn(pp);
	if (pp.automountServiceAccountToken === false && withToken.length === 1 && withToken[0] === "dra-plugin")
		ok(`${name(plugin)}: the API token is mounted in the dra-plugin container only`);
	else bad(`${name(plugin)}: API token in ${JSON.stringify(withToken)} (automount ${pp.automountServiceAccountToken})`);
	if (ap.automountServiceAccountToken === false && tokenIn(ap).length === 0) ok(`${name(agent)}: no API token at all`);
	else bad(`${name(agent)}: an API token in ${JSON.stringify(tokenIn(ap))} (automount ${ap.automountServiceAccountToken})`);
	// A node is the agent's or the plugin's, never both.
	const sel = (pod) => JSON.stringify(pod.nodeSelector || {});
	if (sel(ap) !== sel(pp)) ok(`the agent (${sel(ap)}) and the DRA plugin (${sel(pp)}) run on different nodes`);
	else bad(`the agent and the DRA plugin select the same nodes (${sel(ap)})`);
}

// --- custom resources -----------------------------------------------------

// An ajv for a CRD's structural schema: the x-kubernetes-* keywords are the
// API server's (ajv ignores them; the CEL rules are evaluated apart), int64
// and int32 are formats of integers it checks by type already.
function crdAjv() {
	const ajv = new Ajv({ allErrors: true, strict: false, useDefaults: true });
	addFormats(ajv);
	for (const k of [
		"x-kubernetes-validations",
		"x-kubernetes-list-type",
		"x-kubernetes-list-map-keys",
		"x-kubernetes-preserve-unknown-fields",
		"x-kubernetes-int-or-string",
		"x-kubernetes-embedded-resource",
		"x-kubernetes-map-type",
	])
		ajv.addKeyword({ keyword: k });
	ajv.addFormat("int64", { type: "number", validate: (n) => Number.isInteger(n) });
	ajv.addFormat("int32", { type: "number", validate: (n) => Number.isInteger(n) && Math.abs(n) < 2 ** 31 });
	return ajv;
}

// Structural: unknown fields are pruned by the API server, which
// `kubectl apply` (fieldValidation=Strict) refuses.  So: closed objects.
function closeObjects(s) {
	if (!s || typeof s !== "object") return s;
	const c = Array.isArray(s) ? s.map(closeObjects) : Object.fromEntries(Object.entries(s).map(([k, v]) => [k, closeObjects(v)]));
	if (!Array.isArray(c) && c.type === "object" && c.properties && !c["x-kubernetes-preserve-unknown-fields"] && c.additionalProperties === undefined)
		c.additionalProperties = false;
	return c;
}

// The API server's first rules of a structural schema (apiextensions v1
// refuses a CRD without them): every node has a type (unless it is
// int-or-string or keeps unknown fields), properties and
// additionalProperties are not both given, and metadata restricts name
// and generateName only.
function nonStructural(s, path = "", out = []) {
	if (!s.type && !s["x-kubernetes-int-or-string"] && !s["x-kubernetes-preserve-unknown-fields"]) out.push(`${path || "."}: no type`);
	if (s.properties && s.additionalProperties !== undefined) out.push(`${path}: properties and additionalProperties`);
	for (const [k, v] of Object.entries(s.properties || {})) nonStructural(v, `${path}.${k}`, out);
	if (s.items) nonStructural(s.items, `${path}[]`, out);
	if (path === "" && s.properties?.metadata?.properties) {
		const extra = Object.keys(s.properties.metadata.properties).filter((k) => k !== "name" && k !== "generateName");
		if (extra.length) out.push(`metadata restricts ${extra}`);
	}
	return out;
}

// metadata is the API server's own (ObjectMeta), whatever the schema
// says of it beyond name: left open.
function closedSchema(root) {
	const c = closeObjects(root);
	if (c.properties?.metadata) c.properties.metadata = root.properties.metadata;
	return c;
}

// The CEL rules of @schema and below against @value (and @old on update),
// as the API server runs them; messages of those that fail.
function celFailures(schema, value, old, path = "") {
	const out = [];
	if (value === undefined || schema === undefined) return out;
	for (const v of schema["x-kubernetes-validations"] || []) {
		const transition = /\boldSelf\b/.test(v.rule);
		if (transition && old === undefined) continue;
		let r;
		try {
			r = evaluate(v.rule, transition ? { self: value, oldSelf: old } : { self: value });
		} catch (e) {
			out.push(`${path || "."}: rule ${v.rule} does not evaluate: ${e.message}`);
			continue;
		}
		if (r !== true) out.push(`${path || "."}: ${v.message || v.rule}`);
	}
	for (const [k, sub] of Object.entries(schema.properties || {}))
		if (value && typeof value === "object") out.push(...celFailures(sub, value[k], old?.[k], `${path}.${k}`));
	return out;
}

function crdsByKind(dir) {
	const m = new Map();
	for (const f of readdirSync(dir).filter((x) => x.endsWith(".yaml"))) {
		for (const crd of loadYaml(join(dir, f))) {
			for (const v of crd.spec.versions)
				m.set(`${crd.spec.group}/${v.name} ${crd.spec.names.kind}`, { crd, version: v });
		}
	}
	return m;
}

function checkCR(kinds, ajv, cache, o, old) {
	const k = kinds.get(`${o.apiVersion} ${o.kind}`);
	if (!k) return [`no CRD serves ${o.apiVersion} ${o.kind}`];
	let validate = cache.get(k);
	if (!validate) {
		validate = ajv.compile(closedSchema(k.version.schema.openAPIV3Schema));
		cache.set(k, validate);
	}
	const copy = structuredClone(o);
	const errs = [];
	// The stored old object has its defaults, as the new one gets them.
	if (old) {
		old = structuredClone(old);
		validate(old);
	}
	if (!validate(copy)) errs.push(...validate.errors.map((e) => `${e.instancePath || "."} ${e.message}`));
	else errs.push(...celFailures(k.version.schema.openAPIV3Schema, copy, old));
	return errs;
}

function cmdCRs(crdDir, validDir, invalidDir) {
	const kinds = crdsByKind(crdDir);
	const ajv = crdAjv();
	const cache = new Map();
	// The CRDs themselves: every version is the storage one or not, one
	// is; each has the status subresource and conditions of the standard
	// shape.
	for (const [key, { crd, version }] of kinds) {
		const st = version.schema.openAPIV3Schema.properties?.status;
		const cond = st?.properties?.conditions?.items;
		const req = cond?.required || [];
		const want = ["type", "status", "reason", "message", "lastTransitionTime"];
		if (!version.subresources?.status) bad(`${key}: no status subresource`);
		else if (!want.every((f) => req.includes(f)) || !cond.properties.observedGeneration) bad(`${key}: conditions are not metav1.Condition`);
		else if (!/not reconciled|reconciled by cnlabd/i.test(version.schema.openAPIV3Schema.description || "")) bad(`${key}: its description does not say whether anything reconciles it`);
		else ok(`${crd.metadata.name} ${version.name}: status subresource, metav1.Condition conditions, says whether it is reconciled`);
		const ns = nonStructural(version.schema.openAPIV3Schema);
		if (ns.length) bad(`${key}: not a structural schema: ${ns.join("; ")}`);
		else ok(`${key}: structural (a type on every node, no properties beside additionalProperties)`);
		try {
			ajv.compile(closedSchema(version.schema.openAPIV3Schema));
		} catch (e) {
			bad(`${key}: schema does not compile: ${e.message}`);
		}
	}
	let nValid = 0;
	for (const f of readdirSync(validDir).filter((x) => x.endsWith(".yaml")).sort()) {
		const objs = loadYaml(join(validDir, f));
		// Two objects in one file: an update (the second replaces the first).
		const [o, next] = objs;
		const errs = checkCR(kinds, ajv, cache, o);
		if (next) errs.push(...checkCR(kinds, ajv, cache, next, o));
		if (errs.length) bad(`${f}: valid sample refused: ${errs.join("; ")}`);
		else ok(`${f}: accepted`);
		nValid++;
	}
	let nInvalid = 0;
	for (const f of readdirSync(invalidDir).filter((x) => x.endsWith(".yaml")).sort()) {
		const objs = loadYaml(join(invalidDir, f));
		const last = objs[objs.length - 1];
		const errs = objs.length > 1 ? checkCR(kinds, ajv, cache, last, objs[0]) : checkCR(kinds, ajv, cache, last);
		// Refused, and for the reason the sample says: its annotation
		// cnlab.io/expect is a piece of the error.
		const expect = objs[0].metadata?.annotations?.["cnlab.io/expect"];
		if (!expect) bad(`${f}: no cnlab.io/expect annotation`);
		else if (!errs.length) bad(`${f}: invalid sample ACCEPTED (expected: ${expect})`);
		else if (!errs.some((e) => e.includes(expect))) bad(`${f}: refused, but not for "${expect}": ${errs.join("; ")}`);
		else ok(`${f}: refused (${errs.find((e) => e.includes(expect))})`);
		nInvalid++;
	}
	if (nValid < 2 || nInvalid < 4) bad(`too few samples: ${nValid} valid, ${nInvalid} invalid`);
}

// --- Helm values ----------------------------------------------------------

function cmdValues(schemaFile, valuesFile, badDir) {
	const ajv = new Ajv({ allErrors: true, strict: true, strictRequired: false });
	addFormats(ajv);
	const schema = JSON.parse(readFileSync(schemaFile, "utf8"));
	if (schema.$schema !== "http://json-schema.org/draft-07/schema#") bad(`${schemaFile}: not draft-07 ($schema ${schema.$schema})`);
	const validate = ajv.compile(schema);
	const [values] = loadYaml(valuesFile);
	if (validate(values)) ok(`${valuesFile} satisfies ${schemaFile}`);
	else bad(`${valuesFile}: ${ajv.errorsText(validate.errors)}`);
	let n = 0;
	for (const f of readdirSync(badDir).filter((x) => x.endsWith(".yaml")).sort()) {
		// Each bad file is merged over values.yaml, as `helm -f` would.
		const merged = merge(structuredClone(values), loadYaml(join(badDir, f))[0] || {});
		if (validate(merged)) bad(`${f}: bad values ACCEPTED`);
		else ok(`${f}: refused (${ajv.errorsText(validate.errors).slice(0, 140)})`);
		n++;
	}
	if (n < 3) bad(`only ${n} bad values files`);
}

// Helm's merge of a values file over the chart's: maps merge, the rest
// replaces, null deletes.
function merge(a, b) {
	for (const [k, v] of Object.entries(b)) {
		if (v === null) delete a[k];
		else if (v && typeof v === "object" && !Array.isArray(v) && a[k] && typeof a[k] === "object" && !Array.isArray(a[k])) merge(a[k], v);
		else a[k] = v;
	}
	return a;
}

// CDI spec files against tests/k8s/cdi/schema.json (ajv, draft-07).
function cmdCdi(schemaFile, files, wantValid) {
	const ajv = new Ajv({ allErrors: true, strict: false });
	const check = ajv.compile(JSON.parse(readFileSync(schemaFile, "utf8")));
	for (const f of files) {
		const good = check(JSON.parse(readFileSync(f, "utf8")));
		const why = good ? "" : ajv.errorsText(check.errors);
		if (good === wantValid) ok(`CDI ${f} ${good ? "valid" : `refused (${why})`}`);
		else bad(`CDI ${f} ${good ? "taken, should be refused" : `invalid: ${why}`}`);
	}
}

const [cmd, ...args] = process.argv.slice(2);
try {
	if (cmd === "objects" && args.length) await cmdObjects(args);
	else if (cmd === "refused" && args.length) await cmdRefused(args);
	else if (cmd === "security" && args.length) {
		const i = args.indexOf("--namespace");
		cmdSecurity(args[args.length - 1], args.includes("--resources"), i >= 0 ? args[i + 1] : "cnlab");
	}
	else if (cmd === "crs" && args.length === 3) cmdCRs(...args);
	else if (cmd === "values" && args.length === 3) cmdValues(...args);
	else if (cmd === "cdi" && args.length >= 2) cmdCdi(args[0], args.slice(1), true);
	else if (cmd === "cdi-refused" && args.length >= 2) cmdCdi(args[0], args.slice(1), false);
	else if (cmd === "restricted" && args.length) cmdRestricted(args, true);
	else if (cmd === "restricted-refused" && args.length) cmdRestricted(args, false);
	else {
		console.error("usage: check.mjs objects|refused|security|crs|values|cdi|cdi-refused|restricted|restricted-refused ...");
		process.exit(2);
	}
} catch (e) {
	bad(`${cmd}: ${e.stack || e}`);
}
process.exit(fails ? 1 : 0);
