#!/usr/bin/env bash
# platform_images.sh - CNLab's own container images (scripts/build-image
# cnlabd|cnlab-agent, issue 22), built from this build's binaries and run
# with crun, as a kubelet's runtime would run them:
#
#   - each is an OCI image (umoci unpacks it); cnlabd's entrypoint is
#     /usr/bin/cnlabd and its user 10001 (the Deployment's runAsUser);
#   - in it, cnlabd starts from the environment alone (the Deployment's way)
#     and answers GET /healthz; the init container's command (sh, cp,
#     chmod) works; cnlab runs;
#   - the agent's image runs cnlab-agent, cnlab-dra-plugin, crun and
#     mkfs.ext4 (every shared library each needs is in it), has cnlab-init
#     beside the agent (where it looks), and the shim where the
#     DaemonSets take it from; `cnlab-agent collect` (run pods' collector)
#     runs in it.
#
# Usage: platform_images.sh BUILD_DIR
set -u
. "$(dirname "$0")/lib.sh"
root=$(cd "$(dirname "$0")/../.." && pwd)
build=$(realpath "$1")
need_tools umoci crun jq unshare python3
[ "$(id -u)" = 0 ] || { echo "SKIP needs root (crun, files with their owners)"; exit 77; }
tmp=$(mktemp -d /tmp/cnlab-images.XXXXXX)
trap 'rm -rf "$tmp"' EXIT

# run_image TAR NAME ENV_JSON ARGS...: unpack the image and run ARGS in it
# as its config says (user, environment), its output on stdout.
run_image() {
	local tar=$1 name=$2 env=$3
	shift 3
	mkdir -p "$tmp/$name.layout"
	tar -C "$tmp/$name.layout" -xf "$tar"
	umoci unpack --image "$tmp/$name.layout:latest" "$tmp/$name.bundle" >/dev/null || return 1
	cp "$tmp/$name.bundle/config.json" "$tmp/$name.image.json"
	# (Not jq --args: it would read a "-c" among them as its own flag.)
	local args
	args=$(python3 -c 'import json, sys; print(json.dumps(sys.argv[1:]))' "$@")
	jq --argjson env "$env" --argjson args "$args" '.process.terminal = false |
		.process.env += $env | .process.args = $args' "$tmp/$name.image.json" >"$tmp/$name.bundle/config.json"
	# crun 1.8 refuses a hybrid cgroup host: it runs without the cgroup2
	# mount in a mount namespace of its own, managing no cgroup (as the
	# agent does, src/agent/container.c).
	unshare -m sh -c 'umount /sys/fs/cgroup/unified 2>/dev/null; exec "$@"' sh \
		crun --cgroup-manager=disabled --root "$tmp/crun" run --bundle "$tmp/$name.bundle" "img-$name-$$" 2>&1
}

out=$("$root/scripts/build-image" cnlabd "$tmp/cnlabd.tar" "$build" 2>&1) &&
	ok "scripts/build-image cnlabd: ${out#build-image: }" || bad "build-image cnlabd: $out"
out=$("$root/scripts/build-image" cnlab-agent "$tmp/agent.tar" "$build" 2>&1) &&
	ok "scripts/build-image cnlab-agent: ${out#build-image: }" || bad "build-image cnlab-agent: $out"

env='["CNLAB_JWT_SECRET=image-test-secret-0123456789abcdef0123","CNLAB_ADMIN_PASSWORD=image-admin-password-1","CNLAB_DATA_DIR=/tmp/d","CNLAB_LISTEN=127.0.0.1:8080"]'
out=$(run_image "$tmp/cnlabd.tar" cnlabd "$env" /bin/sh -c '
	id -u
	cp /etc/passwd /tmp/key && chmod 0400 /tmp/key && echo init-container-ok
	cnlab --version
	cnlabd --bootstrap-admin admin >/tmp/out 2>/tmp/err &
	for i in $(seq 100); do wget -qO- http://127.0.0.1:8080/healthz 2>/dev/null && break; sleep 0.1; done
	echo
	kill %1')
echo "$out" | sed 's/^/    /'
ic=$tmp/cnlabd.image.json
[ "$(jq -c .process.args "$ic")" = '["/usr/bin/cnlabd"]' ] && [ "$(jq -r .process.user.uid "$ic")" = 10001 ] &&
	grep -qx 10001 <<<"$out" &&
	ok "cnlabd's image: entrypoint /usr/bin/cnlabd, user 10001 (the Deployment's runAsUser)" ||
	bad "cnlabd's image config: $(jq -c '{args: .process.args, user: .process.user}' "$ic")"
grep -q '"status":"ok"' <<<"$out" &&
	ok "in its image, cnlabd starts from the environment alone and answers GET /healthz" ||
	bad "cnlabd in its image did not serve /healthz"
grep -qx init-container-ok <<<"$out" && grep -q '^cnlab [0-9]' <<<"$out" &&
	ok "the init container's sh, cp and chmod work; cnlab runs" || bad "sh/cp/chmod or cnlab in the cnlabd image"

# A Kubernetes server's init container, as cnlabd makes it (kube_ops.c,
# NOTEBOOK_INIT; kube_sched.sh checks the pod's), then the sshd it lent
# run from where it put it.
init='cp /usr/bin/cnlab-notebook.py /opt/cnlab/cnlab-notebook.py && if [ -d /usr/lib/cnlab/sshd ]; then cp -R /usr/lib/cnlab/sshd /opt/cnlab/sshd; fi'
out=$(run_image "$tmp/agent.tar" agent "$(jq -nc --arg i "$init" '["NOTEBOOK_INIT=" + $i]')" /bin/sh -c '
	cnlab-agent --help >/dev/null && echo agent-ok
	cnlab-dra-plugin --help >/dev/null && echo plugin-ok
	crun --version | head -1
	mkfs.ext4 -V 2>&1 | head -1
	test -s /usr/lib/cnlab/libcnlab-cuda.so && echo shim-ok
	test -x /usr/bin/cnlab-init && test -s /usr/bin/cnlab-notebook.py && echo beside-ok
	mkdir -p /opt/cnlab && sh -c "$NOTEBOOK_INIT" &&
		v=$(/opt/cnlab/sshd/ld.so --library-path /opt/cnlab/sshd/lib /opt/cnlab/sshd/sshd -h 2>&1)
	case $v in *OpenSSH_*) echo lent-sshd-ok ;; *) echo "lent-sshd: $v" ;; esac
	mkdir -p /tmp/a && printf t >/tmp/t && printf w >/tmp/a/model.txt
	CNLAB_SERVER=http://127.0.0.1:9 CNLAB_JOB=job_1 CNLAB_EPOCH=1 CNLAB_COLLECT_DIR=/tmp/a \
		CNLAB_COLLECT_TOKEN_FILE=/tmp/t CNLAB_COLLECT_POD_TOKEN_FILE=/tmp/t CNLAB_COLLECT_MESSAGE_FILE=/tmp/m \
		cnlab-agent collect --now 2>/dev/null
	echo "collect-exit $?: $(cat /tmp/m)"
	id -u')
echo "$out" | sed 's/^/    /'
ia=$tmp/agent.image.json
grep -qx agent-ok <<<"$out" && grep -qx plugin-ok <<<"$out" && grep -q '^crun version' <<<"$out" &&
	grep -q '^mke2fs' <<<"$out" && grep -qx shim-ok <<<"$out" && grep -qx beside-ok <<<"$out" &&
	grep -qx lent-sshd-ok <<<"$out" &&
	[ "$(jq -c .process.args "$ia")" = '["cnlab-agent"]' ] &&
	ok "the agent's image runs cnlab-agent (its command), cnlab-dra-plugin, crun and mkfs.ext4, and has cnlab-init and the notebook launcher beside the agent, and the shim; a server's init container copies its sshd out, which runs there with its own loader and libraries" ||
	bad "the agent's image: $(tr '\n' '|' <<<"$out")"
# Run pods' collector: the same binary in the same image (kube_collect_image);
# with cnlabd unreachable it fails, naming the file, in its termination
# message, which cnlabd reads from the pod's status.
grep -q '^collect-exit 1: artifact "model.txt": not delivered' <<<"$out" &&
	ok "the agent's image runs cnlab-agent collect, run pods' collector (cnlabd unreachable: $(grep '^collect-exit' <<<"$out"))" ||
	bad "cnlab-agent collect in the agent's image: $(grep '^collect-exit' <<<"$out")"
[ $fails = 0 ] || exit 1
