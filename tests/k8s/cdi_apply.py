#!/usr/bin/python3
"""cdi_apply.py - what a CDI-aware container runtime (containerd, CRI-O)
does with a device the kubelet names: find the device's fully qualified
name (vendor.com/class=name) in the spec files of CDI_DIR and apply the
spec's and the device's containerEdits to an OCI config.json, following
the CDI spec: env appended, device nodes added to linux.devices (type,
major and minor from the spec, else from the host node) and allowed in
the device cgroup, mounts appended, hooks added by name, additional GIDs.

  cdi_apply.py CDI_DIR DEVICE CONFIG_JSON
Exits 1 naming the problem when the kind or the device is not there.
"""
import json
import os
import stat
import sys

cdi_dir, device, config = sys.argv[1:4]
kind, name = device.split("=", 1)
spec = dev = None
for f in sorted(os.listdir(cdi_dir)):
    if not f.endswith(".json"):
        continue
    s = json.load(open(os.path.join(cdi_dir, f)))
    if s.get("kind") != kind:
        continue
    for d in s.get("devices", []):
        if d["name"] == name:
            spec, dev = s, d
if not dev:
    print("cdi_apply: no CDI device %s in %s" % (device, cdi_dir), file=sys.stderr)
    sys.exit(1)
c = json.load(open(config))
proc = c.setdefault("process", {})
linux = c.setdefault("linux", {})
for edits in (spec.get("containerEdits") or {}, dev.get("containerEdits") or {}):
    proc.setdefault("env", []).extend(edits.get("env", []))
    for n in edits.get("deviceNodes", []):
        host = n.get("hostPath", n["path"])
        st = os.stat(host)
        typ = n.get("type") or ("c" if stat.S_ISCHR(st.st_mode) else "b")
        major = n.get("major", os.major(st.st_rdev))
        minor = n.get("minor", os.minor(st.st_rdev))
        linux.setdefault("devices", []).append({
            "path": n["path"], "type": typ, "major": major, "minor": minor,
            "fileMode": n.get("fileMode", stat.S_IMODE(st.st_mode)),
            "uid": n.get("uid", 0), "gid": n.get("gid", 0)})
        perms = n.get("permissions") or "rwm"
        if perms != "none":
            linux.setdefault("resources", {}).setdefault("devices", []).append(
                {"allow": True, "type": typ, "major": major, "minor": minor, "access": perms})
    for m in edits.get("mounts", []):
        c.setdefault("mounts", []).append({
            "destination": m["containerPath"], "source": m["hostPath"],
            "type": m.get("type", "bind"), "options": m.get("options", [])})
    for h in edits.get("hooks", []):
        entry = {k: h[k] for k in ("path", "args", "env", "timeout") if k in h}
        c.setdefault("hooks", {}).setdefault(h["hookName"], []).append(entry)
    for g in edits.get("additionalGids", []):
        if g:
            proc.setdefault("user", {}).setdefault("additionalGids", []).append(g)
json.dump(c, open(config, "w"), indent=1)
