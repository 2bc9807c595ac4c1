#!/usr/bin/env bash
# images.sh - the platform's images, imported with the CLI and run by the
# node in a container of their own, against a real all-in-one (cnlabd, its
# embedded agent, crun, umoci, overlayfs), and tried the way a careless or
# hostile image would:
#   - `cnlab image import` of an OCI archive built here from Debian's
#     busybox-static; `cnlab image list`; a job and a server named after it
#     run in it (its programs, its PATH; not the node's /usr), as the
#     tenant, on a read-only root with a writable /tmp; two jobs share one
#     unpacked copy on the node
#   - bad archives store nothing and say why: a damaged blob, a truncated
#     archive, a docker-archive, a manifest naming a blob that is not there,
#     a file that is not a tar
#   - an unknown image is refused at submit, naming those there are
#   - an image whose /etc/passwd links to the node's /etc/shadow does not
#     hand the shadow file to the tenant; one whose /workspace is a link is
#     refused with the reason; a layer whose names climb out (../) writes
#     nothing outside
#   - an image a server uses cannot be deleted; once unused it goes, with
#     the blobs cnlabd kept for it
set -u
cnlabd=$(realpath "$1")
cli=$(realpath "$2")
here=$(cd "$(dirname "$0")" && pwd)
tmp=$(mktemp -d)
chmod 755 "$tmp"
pid=
cleanup() {
	[ -n "$pid" ] && kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null
	rm -rf "$tmp"
}
trap cleanup EXIT
fails=0
ok() { echo "ok   $1"; }
bad() {
	echo "FAIL $1"
	fails=$((fails + 1))
}
unset CNLAB_JWT_SECRET CNLAB_ADMIN_PASSWORD CNLAB_SERVER CNLAB_TOKEN
export HOME=$tmp/home CNLAB_CONFIG=$tmp/cli.json
mkdir -p "$HOME"
for b in crun umoci; do
	command -v $b >/dev/null || {
		echo "FAIL $b is not installed (scripts/bootstrap installs it)"
		exit 1
	}
done

"$cnlabd" --all-in-one --data-dir "$tmp/data" \
	--listen 127.0.0.1:0 --gpus fake:2xH100-80GB-SXM >"$tmp/out" 2>"$tmp/err" &
pid=$!
for _ in $(seq 100); do
	grep -q 'CNLab is running' "$tmp/out" && break
	sleep 0.1
done
url=$(sed -n 's/^CNLab is running at \([^ ]*\).*/\1/p' "$tmp/out")
[ -n "$url" ] || {
	echo "FAIL start: $(cat "$tmp/err")"
	exit 1
}
cnlab() { "$cli" "$@"; }
cnlab login --server "$url" --user admin --password-stdin <"$tmp/data/admin.password" >/dev/null ||
	{ echo "FAIL login"; exit 1; }
tok=$(jq -r .token "$CNLAB_CONFIG")
api() { curl -sS -X "$1" -H "Authorization: Bearer $tok" ${3:+-d "$3"} "$url$2"; }
proj=$(api GET /v1/projects | jq -r '.items[0].id')
for _ in $(seq 100); do
	[ "$(api GET /v1/nodes | jq '.items | length')" = 1 ] && break
	sleep 0.1
done
blobs() { find "$tmp/data/files/images/blobs" -type f 2>/dev/null | wc -l; }

# run IMAGE CMD: a job of CMD in IMAGE; its output, its end state in
# $tmp/state and its message in $tmp/msg.
run() {
	local job state=
	job=$(jq -n --arg c "$2" --arg i "$1" '{command:$c,gpu:"h100-25",image:$i}' |
		curl -sS -X POST -H "Authorization: Bearer $tok" -d @- "$url/v1/projects/$proj/jobs" | jq -r .id)
	case $job in job_*) ;; *)
		echo refused >"$tmp/state"
		echo "not submitted" >"$tmp/msg"
		return ;;
	esac
	for _ in $(seq 300); do
		state=$(api GET "/v1/jobs/$job" | jq -r .state)
		case $state in succeeded | failed | cancelled) break ;; esac
		sleep 0.2
	done
	echo "$state" >"$tmp/state"
	api GET "/v1/jobs/$job" | jq -r '.message // ""' >"$tmp/msg"
	api GET "/v1/jobs/$job/logs" | jq -r '.items[].data'
}

# --- import and run -----------------------------------------------------------
"$here/../../scripts/build-image" busybox "$tmp/bb.tar" >/dev/null || bad "build-image busybox"
out=$(cnlab image import "$tmp/bb.tar" --name busybox:1.36 2>&1) &&
	grep -q '^✓ Imported busybox:1.36 ' <<<"$out" && ok "cnlab image import" || bad "import: $out"
cnlab image list | grep -Eq '^busybox:1.36 +1\.[0-9] MB +sha256:' && ok "cnlab image list shows it" ||
	bad "list: $(cnlab image list)"

out=$(run busybox:1.36 'echo PATH=$PATH; id -u; ls /bin/busybox; test -e /usr/bin/python3 && echo node-usr-visible; touch /rootfile 2>/dev/null && echo root-writable; echo x > /tmp/t && cat /tmp/t; head -1 /etc/passwd; grep "^admin:" /etc/passwd')
[ "$(cat "$tmp/state")" = succeeded ] && grep -qx 'PATH=/bin' <<<"$out" && grep -qx /bin/busybox <<<"$out" &&
	ok "a job runs in the image: its programs, its PATH" || bad "job in image: $(cat "$tmp/state") $(cat "$tmp/msg") $out"
! grep -q node-usr-visible <<<"$out" && ok "the node's /usr is not there" || bad "node /usr visible: $out"
grep -qx 1000 <<<"$out" && grep -q '^admin:x:1000:1000:' <<<"$out" && grep -q '^root:x:0:0:root' <<<"$out" &&
	ok "as the tenant (uid 1000), named in the image's own /etc/passwd" || bad "tenant: $out"
! grep -q root-writable <<<"$out" && grep -qx x <<<"$out" &&
	ok "its root is read-only, /tmp is writable" || bad "writable: $out"
n=$(find "$tmp/data/agent/images/rootfs" -mindepth 1 -maxdepth 1 | wc -l)
run busybox:1.36 true >/dev/null
[ "$n" = 1 ] && [ "$(find "$tmp/data/agent/images/rootfs" -mindepth 1 -maxdepth 1 | wc -l)" = 1 ] &&
	ok "the node unpacks an image once for all its workloads" || bad "unpacked copies: $(ls "$tmp/data/agent/images/rootfs")"
[ -z "$(ls "$tmp/data/agent/bundles")" ] && ! grep -q "$tmp/data/agent/bundles" /proc/self/mountinfo &&
	ok "each container's layer and overlay go with it" || bad "left: $(ls "$tmp/data/agent/bundles") $(grep bundles /proc/self/mountinfo)"

# --- from a registry, through skopeo ------------------------------------------------
# A site's registry (Debian's docker-registry on loopback, plain HTTP): the
# image pushed there is imported by its reference; a docker-archive too.
if command -v docker-registry >/dev/null && command -v skopeo >/dev/null; then
	rport=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
	cat >"$tmp/registry.yml" <<YML
version: 0.1
storage:
  filesystem:
    rootdirectory: $tmp/registry
http:
  addr: 127.0.0.1:$rport
YML
	docker-registry serve "$tmp/registry.yml" >"$tmp/registry.log" 2>&1 &
	rpid=$!
	for _ in $(seq 100); do curl -sf "http://127.0.0.1:$rport/v2/" >/dev/null && break; sleep 0.1; done
	skopeo copy --quiet --dest-tls-verify=false "oci-archive:$tmp/bb.tar" \
		"docker://127.0.0.1:$rport/team/busybox:1.36" >/dev/null 2>&1 || bad "push to the registry"
	out=$(cnlab image import "docker://127.0.0.1:$rport/team/busybox:1.36" --name regbox:1 --insecure 2>&1) &&
		grep -q '^✓ Imported regbox:1 ' <<<"$out" && ok "cnlab image import docker://REF pulls through skopeo" ||
		bad "registry import: $out"
	out=$(run regbox:1 'ls /bin/busybox')
	grep -qx /bin/busybox <<<"$out" && ok "a job runs in the image from the registry" || bad "regbox job: $out"
	out=$(cnlab image import "docker://127.0.0.1:$rport/team/nosuch:1" --name nope:1 --insecure 2>&1)
	[ $? = 1 ] && grep -q 'skopeo could not fetch' <<<"$out" && ! cnlab image list | grep -q '^nope:1 ' &&
		ok "a reference the registry lacks: skopeo's error, nothing stored" || bad "registry missing: $out"
	kill "$rpid" 2>/dev/null
	skopeo copy --quiet "oci-archive:$tmp/bb.tar" "docker-archive:$tmp/dock.tar:team/busybox:1.36" >/dev/null 2>&1
	out=$(cnlab image import "docker-archive:$tmp/dock.tar" --name dockbox:1 2>&1) &&
		grep -q '^✓ Imported dockbox:1 ' <<<"$out" && ok "a docker-archive: converted by skopeo" || bad "docker-archive: $out"
	# They share busybox:1.36's blobs: gone, they leave those to it.
	cnlab image delete regbox:1 >/dev/null && cnlab image delete dockbox:1 >/dev/null &&
		[ "$(blobs)" -ge 3 ] || bad "delete regbox, dockbox: blobs $(blobs)"
else
	bad "docker-registry or skopeo is missing (scripts/bootstrap installs them)"
fi

# --- refused at submit -----------------------------------------------------------
out=$(cnlab run /dev/null --gpu h100-25 --image nosuch:1 2>&1)
rc=$?
[ $rc = 2 ] && grep -q 'no image "nosuch:1" on this platform; there are: busybox:1.36, .*host' <<<"$out" &&
	ok "an unknown image is refused at submit, naming those there are" || bad "unknown: rc=$rc $out"

# --- bad archives store nothing --------------------------------------------------
before=$(blobs)
expect_refused() { # NAME FILE WHAT-THE-MESSAGE-SAYS
	local out
	out=$(cnlab image import "$2" --name "bad:$1" 2>&1)
	if [ $? = 2 ] && grep -q "$3" <<<"$out" && ! cnlab image list | grep -q "^bad:$1 " &&
		[ "$(blobs)" = "$before" ] && [ -z "$(ls "$tmp/data/files/images/tmp")" ]; then
		ok "$1 archive refused ($3), nothing stored"
	else
		bad "$1 archive: $out / blobs $(blobs) vs $before / tmp $(ls "$tmp/data/files/images/tmp")"
	fi
}
python3 - "$tmp/bb.tar" "$tmp" <<'PY'
import io, sys, tarfile
src, out = sys.argv[1], sys.argv[2]
with tarfile.open(src) as t:
    members = [(m, t.extractfile(m).read() if m.isfile() else None) for m in t.getmembers()]
def write(name, keep):
    with tarfile.open(f"{out}/{name}.tar", "w") as t:
        for m, data in members:
            r = keep(m, data)
            if r is None:
                continue
            m, data = r
            if data is not None:
                m.size = len(data)
            t.addfile(m, io.BytesIO(data) if data is not None else None)
big = max((m for m, d in members if d is not None), key=lambda m: m.size).name
# damaged: one byte of the layer flipped
write("damaged", lambda m, d: (m, bytes([d[0] ^ 1]) + d[1:]) if m.name == big else (m, d))
# missing: the layer left out
write("missing", lambda m, d: None if m.name == big else (m, d))
PY
expect_refused damaged "$tmp/damaged.tar" 'is damaged'
expect_refused missing "$tmp/missing.tar" 'is not in the archive'
head -c 20000 "$tmp/bb.tar" >"$tmp/cut.tar"
expect_refused truncated "$tmp/cut.tar" 'truncated'
expect_refused notatar /etc/os-release 'not a tar archive'
mkdir -p "$tmp/docker" && echo '[]' >"$tmp/docker/manifest.json" && tar -C "$tmp/docker" -cf "$tmp/docker.tar" manifest.json
expect_refused docker "$tmp/docker.tar" 'docker-archive.*skopeo copy'

# --- hostile images ------------------------------------------------------------------
# mkimage NAME LAYER [POST]: an OCI archive of busybox plus what python
# LAYER adds to its layer (add(name, kind, target)), then POST changes
# (cfg, layers), imported as NAME:1 (mkarchive: only written).
mkarchive() {
	local name=$1
	python3 - "$tmp/bb.tar" "$tmp/$name.tar" "$2" "${3:-}" <<'PY'
import gzip, hashlib, io, json, sys, tarfile
src, dst, extra, post = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4]
blobs = {}
with tarfile.open(src) as t:
    for m in t.getmembers():
        if m.isfile():
            blobs[m.name.split("/")[-1]] = t.extractfile(m).read()
index = json.loads([b for b in blobs.values() if b.startswith(b'{"schemaVersion":2,"manifests"')][0])
man = json.loads(blobs[index["manifests"][0]["digest"][7:]])
cfg = json.loads(blobs[man["config"]["digest"][7:]])
base = gzip.decompress(blobs[man["layers"][0]["digest"][7:]])
buf = io.BytesIO()
with tarfile.open(fileobj=io.BytesIO(base)) as b, tarfile.open(fileobj=buf, mode="w") as out:
    for m in b.getmembers():
        out.addfile(m, b.extractfile(m) if m.isfile() else None)
    def add(name, kind, target=""):
        ti = tarfile.TarInfo(name)
        if kind == "link":
            ti.type, ti.linkname = tarfile.SYMTYPE, target
            out.addfile(ti)
        elif kind == "fifo":
            ti.type, ti.mode = tarfile.FIFOTYPE, 0o644
            out.addfile(ti)
        elif kind == "chr":
            ti.type, ti.mode, ti.devmajor, ti.devminor = tarfile.CHRTYPE, 0o666, 1, 3
            out.addfile(ti)
        else:
            data = target.encode()
            ti.size = len(data)
            if kind == "suid":
                ti.mode, ti.uid = 0o6755, 1000
            out.addfile(ti, io.BytesIO(data))
    exec(extra)
layer = gzip.compress(buf.getvalue())
layers = [layer]
def put(data):
    h = hashlib.sha256(data).hexdigest()
    blobs[h] = data
    return {"digest": "sha256:" + h, "size": len(data)}
diff = "sha256:" + hashlib.sha256(buf.getvalue()).hexdigest()
cfg["rootfs"] = {"type": "layers", "diff_ids": [diff]}
exec(post)
c = put(json.dumps(cfg).encode()); c["mediaType"] = "application/vnd.oci.image.config.v1+json"
ls = []
for data in layers:
    l = put(data); l["mediaType"] = "application/vnd.oci.image.layer.v1.tar+gzip"
    ls.append(l)
m = put(json.dumps({"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json", "config": c, "layers": ls}).encode())
m["mediaType"] = "application/vnd.oci.image.manifest.v1+json"
with tarfile.open(dst, "w") as t:
    def f(name, data):
        ti = tarfile.TarInfo(name); ti.size = len(data); t.addfile(ti, io.BytesIO(data))
    f("oci-layout", b'{"imageLayoutVersion":"1.0.0"}')
    f("index.json", json.dumps({"schemaVersion": 2, "manifests": [m]}).encode())
    for h in sorted({c["digest"][7:], m["digest"][7:]} | {x["digest"][7:] for x in ls}):
        f("blobs/sha256/" + h, blobs[h])
PY
}
mkimage() {
	mkarchive "$@"
	cnlab image import "$tmp/$1.tar" --name "$1:1" >/dev/null 2>&1 || bad "import $1: $(cnlab image import "$tmp/$1.tar" --name "$1:1" 2>&1)"
}

# Its /etc/passwd and /etc/group link to the node's shadow files: the agent
# reads them inside the image's root, never the node's.
mkimage shadowlink 'add("etc/passwd", "link", "/etc/shadow"); add("etc/group", "link", "../../../../../etc/gshadow")'
out=$(run shadowlink:1 'cat /etc/passwd /etc/group; echo done')
shadow_line=$(head -1 /etc/shadow)
grep -qx done <<<"$out" && ! grep -qF "$shadow_line" <<<"$out" && ! grep -qF "$(head -1 /etc/gshadow)" <<<"$out" &&
	ok "an image's /etc/passwd linking to /etc/shadow gives the tenant nothing of the node's" ||
	bad "shadow link: $(cat "$tmp/state") $(cat "$tmp/msg") $out"

# Its /workspace is a link to /etc: refused with the reason, the node untouched.
mkimage wslink 'add("workspace", "link", "/etc")'
out=$(run wslink:1 'echo pwned > /workspace/cnlab-pwned')
[ "$(cat "$tmp/state")" = failed ] && grep -q 'link at a path of /workspace' "$tmp/msg" && [ ! -e /etc/cnlab-pwned ] &&
	ok "an image whose /workspace is a link is refused, saying so" || bad "workspace link: $(cat "$tmp/state") $(cat "$tmp/msg") $out"

# A layer whose names climb out of the root: nothing lands outside it.
esc=cnlab-escape-$$
mkimage climb "add('../../../../../../tmp/$esc', 'file', 'x'); add('/tmp/$esc-abs', 'file', 'x')"
out=$(run climb:1 'echo ran')
[ ! -e "/tmp/$esc" ] && [ ! -e "/tmp/$esc-abs" ] && [ ! -e "$tmp/data/agent/images/$esc" ] &&
	ok "a layer with ../ names writes nothing outside the image ($(cat "$tmp/state"))" ||
	bad "climb: files outside: $(ls /tmp/$esc* 2>&1)"
rm -f "/tmp/$esc" "/tmp/$esc-abs"

# A FIFO where the agent reads the image's /etc/passwd, a device node, a
# set-uid file owned by a node account: the start goes on, and the node's
# copy of the image holds none of them.
mkimage planted 'add("etc/passwd", "fifo"); add("dev-null-again", "chr"); add("bin/suid", "suid", "x")'
out=$(run planted:1 'echo ran; ls -l /bin/suid')
root=$(for d in "$tmp"/data/agent/images/rootfs/*/; do [ -e "$d/bin/suid" ] && echo "$d"; done | head -1)
[ "$(cat "$tmp/state")" = succeeded ] && grep -qx ran <<<"$out" &&
	ok "an image's FIFO at /etc/passwd does not hold up its start" || bad "fifo: $(cat "$tmp/state") $(cat "$tmp/msg") $out"
[ -n "$root" ] && [ ! -e "$root/dev-null-again" ] &&
	[ -z "$(find "$root" \( -perm /6000 -o -type c -o -type b -o -type p -o ! -user 0 \) -print | head -1)" ] &&
	ok "the node's copy has no device, FIFO, set-id bit or node account's file" ||
	bad "planted: root=$root $(find "$root" \( -perm /6000 -o -type c -o -type p -o ! -user 0 \) -print 2>&1 | head -3)"
run busybox:1.36 'echo after' | grep -qx after && ok "and the node runs the next job" || bad "after planted"

# What cnlabd checks of the layers themselves.
before=$(blobs)
mkarchive notgz '' 'layers = [buf.getvalue()]'
expect_refused notgz "$tmp/notgz.tar" 'is not gzip, its media type says gzip'
mkarchive baddiff '' 'cfg["rootfs"]["diff_ids"] = ["sha256:" + "0" * 64]'
expect_refused baddiff "$tmp/baddiff.tar" "the config's diff_id"
mkarchive twice '' 'layers = [layer, layer]; cfg["rootfs"]["diff_ids"] = [diff, diff]'
expect_refused twice "$tmp/twice.tar" 'repeats an earlier layer'
out=$(cnlab image import "$tmp/bb.tar" --name 'x:../y' 2>&1)
[ $? = 2 ] && ok "an image name with a ':' that is no port is refused" || bad "x:../y: $out"
out=$(cnlab image import "$tmp/bb.tar" --name host:latest 2>&1)
[ $? = 2 ] && grep -q 'built-in' <<<"$out" && ok "host:latest is the built-in too" || bad "host:latest: $out"

# --- a server of the image; delete ------------------------------------------------------
cnlab server create --name bbs --image busybox:1.36 --profile h100-25pct --no-wait >/dev/null 2>&1 ||
	bad "server create in busybox:1.36"
out=$(cnlab image delete busybox:1.36 2>&1)
[ $? = 5 ] && grep -q 'used by server "bbs"' <<<"$out" && cnlab image list | grep -q '^busybox:1.36 ' &&
	ok "an image a server uses cannot be deleted" || bad "delete in use: $out"
for _ in $(seq 100); do
	case $(cnlab server list -o json | jq -r '.items[] | select(.name=="bbs") | .state') in running | failed) break ;; esac
	sleep 0.1
done
cnlab server stop bbs >/dev/null 2>&1
for _ in $(seq 100); do
	[ "$(cnlab server list -o json | jq -r '.items[] | select(.name=="bbs") | .state')" = stopped ] && break
	sleep 0.1
done
cnlab server delete bbs >/dev/null 2>&1 || bad "server delete: $(cnlab server delete bbs 2>&1)"
before=$(blobs)
out=$(cnlab image delete busybox:1.36 2>&1) && grep -q '^✓ Deleted image busybox:1.36' <<<"$out" &&
	! cnlab image list | grep -q '^busybox:1.36 ' && [ "$(blobs)" -lt "$before" ] &&
	ok "deleted, with the blobs no other image names" || bad "delete: $out (blobs $(blobs) of $before)"
out=$(cnlab image delete host 2>&1)
[ $? = 5 ] && grep -q 'built in' <<<"$out" && ok "host is built in: not deleted" || bad "delete host: $out"

echo "$fails failed"
[ "$fails" = 0 ]
