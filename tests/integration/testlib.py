"""testlib.py - what the Python integration tests share: the "ok ..." and
"FAIL ..." lines they print, the count of failures that makes their exit
status, and a bounded wait (a guard against a hung daemon, never an
assertion on speed).  A test imports it from its own folder (Python puts
a script's folder first on sys.path) and ends with sys.exit(status())."""
import sys
import time

fails = 0


def ok(msg):
    print("ok   " + msg, flush=True)


def bad(msg):
    global fails
    fails += 1
    print("FAIL " + msg, flush=True)


def die(msg):
    """A failure after which the test cannot go on."""
    bad(msg)
    sys.exit(1)


def status():
    """The exit status: 1 when anything failed."""
    return 1 if fails else 0


def wait_for(what, fn, secs=60, step=0.1):
    """fn()'s first true value, polled every @step seconds; a failure
    (die) when none came within @secs."""
    end = time.monotonic() + secs
    while time.monotonic() < end:
        v = fn()
        if v:
            return v
        time.sleep(step)
    die("timed out waiting for " + what)
