"""fake_machine.py - a cloud instance of the loopback clouds (fake_ec2.py,
fake_gce.py): the machine image booting, and the machine going away.

boot() runs the user data with /bin/sh in a process group of its own,
with the hardware of the instance's type in the environment
(CNLAB_AGENT_GPUS: fake GPUs, CNLAB_AGENT_WORK_DIR), so that the
cnlab-agent it starts really joins cnlabd with the join token it was
given; halt() kills everything the machine ran.
"""
import glob
import os
import signal
import subprocess
import time


def boot(state, name, gpus, user_data, i):
    """The machine @name boots: its user data runs, with its hardware;
    its process is kept in @i ("pid", "proc")."""
    d = os.path.join(state, name)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "user-data"), "w") as f:
        f.write(user_data)
    env = dict(os.environ)
    env["CNLAB_AGENT_GPUS"] = gpus
    env["CNLAB_AGENT_WORK_DIR"] = os.path.join(d, "work")
    env["CNLAB_AGENT_CPU_MILLI"] = "4000"
    env["CNLAB_AGENT_MEM_MIB"] = "8192"
    out = open(os.path.join(d, "console.log"), "w")
    p = subprocess.Popen(["/bin/sh", os.path.join(d, "user-data")],
                         stdin=subprocess.DEVNULL, stdout=out, stderr=out,
                         env=env, start_new_session=True)
    i["pid"] = p.pid
    i["proc"] = p
    i["disk"] = d


def halt(state, i, node):
    """The machine @i goes away, and everything on it: the user data's
    process group, every process naming its disk (the workloads'
    supervisors and runtimes, which outlive an agent by design), and the
    processes in its node's cgroups (thawed first: a frozen process does
    not die), whose folders are then removed.  @node: the cnlab node it
    joined as, "" when unknown."""
    p = i.pop("proc", None)
    if p:
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        p.wait()
    disk = i.get("disk", os.path.join(state, i["id"])) + "/"
    pids = set()
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open("/proc/%s/cmdline" % pid, "rb") as f:
                if disk.encode() in f.read():
                    pids.add(int(pid))
        except OSError:
            pass
    roots = glob.glob("/sys/fs/cgroup/*/cnlab/%s" % node) + \
        glob.glob("/sys/fs/cgroup/cnlab/%s" % node) if node else []
    for root in roots:
        for d, _, files in os.walk(root):
            for name, val in (("freezer.state", "THAWED"), ("cgroup.freeze", "0")):
                if name in files:
                    try:
                        with open(os.path.join(d, name), "w") as f:
                            f.write(val)
                    except OSError:
                        pass
            try:
                with open(os.path.join(d, "cgroup.procs")) as f:
                    pids.update(int(x) for x in f.read().split())
            except OSError:
                pass
    # All stopped first, then killed: a machine that goes away takes all
    # at once, and no supervisor must live to report its workload's death
    # (as it would if killed after the workload).
    for sig in (signal.SIGSTOP, signal.SIGKILL):
        for pid in pids:
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
    time.sleep(0.2)
    for root in roots:
        for d, _, _ in sorted(os.walk(root), key=lambda w: -len(w[0])):
            try:
                os.rmdir(d)
            except OSError:
                pass


def halt_all(state, machines, node_of):
    """Every machine of @machines goes away (the fake stopping): first
    all of their process groups at once (the test's clean-up gives the
    fake half a second before SIGKILL), then each one's leftovers."""
    for i in machines:
        p = i.get("proc")
        if p:
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
    for i in machines:
        halt(state, i, node_of(i))

