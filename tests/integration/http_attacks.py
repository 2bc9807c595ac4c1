#!/usr/bin/env python3
"""http_attacks.py - the connection attacks of http_limits.sh, over raw
sockets against a real cnlabd on loopback.

Each subcommand performs one attack and prints "ok ..." lines, or "FAIL
..." lines and exits 1.  Timeouts here only guard against a hung server
(a test that would otherwise never end); nothing asserts how long
anything took.

  slowloris PORT N        N half-open connections from 127.0.0.2 (a head
                          never finished); with them held, a client on
                          127.0.0.1 must get its /healthz; then the held
                          ones must be cut by the header timeout.
  flood PORT N            N connections at once, from 40 addresses, each
                          a GET /healthz: every one must get a complete
                          reply, 200 or 503 with the JSON error body.
  stall-head PORT         half a head, then nothing: closed, no reply.
  trickle-head PORT       a head sent a byte at a time, for longer than
                          the header timeout: closed before it is whole.
  stall-body PORT         a whole head, part of the body, then nothing:
                          closed.
  slow-body PORT SECONDS  a body sent a little at a time over SECONDS
                          (longer than the body timeout, each pause
                          shorter): answered.
  silent PORTFILE         (a fake server) listen, accept, never answer;
                          writes its port to PORTFILE; runs until killed.
  full PORTFILE           (a fake server) listen with a full backlog, so
                          a connect never completes; until killed.
  tls-cap PORT CAP        over TLS: CAP connections from 127.0.0.2 held
                          (handshake done, no head), then one more from
                          there must get 503 overloaded once its head is
                          in, and one from 127.0.0.1 a 200.
  raw PORT STATUS TEXT    send TEXT (with \\r\\n escapes) and expect a
                          complete reply with STATUS; prints its body.
"""
import json
import resource
import select
import socket
import ssl
import sys
import time

from testlib import bad, ok, status

HANG = 60.0  # guard against a hung server, never an assertion on speed


def raise_nofile():
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = min(hard, 65536)
    if soft < want:
        resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))


def connect(port, src=None, blocking=True):
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    if src:
        s.bind((src, 0))
    if blocking:
        s.settimeout(HANG)
        s.connect(("127.0.0.1", port))
    else:
        s.setblocking(False)
        try:
            s.connect(("127.0.0.1", port))
        except BlockingIOError:
            pass
    return s


def parse_reply(data, first=False):
    """(status, headers, body) of one complete HTTP reply, or raise;
    @first: of the first of several."""
    head, sep, body = data.partition(b"\r\n\r\n")
    if not sep:
        raise ValueError("no end of head in %r" % data[:200])
    lines = head.decode("latin-1").split("\r\n")
    parts = lines[0].split(" ", 2)
    if len(parts) < 2 or not parts[0].startswith("HTTP/1."):
        raise ValueError("bad status line %r" % lines[0])
    headers = {}
    for ln in lines[1:]:
        k, _, v = ln.partition(":")
        headers[k.strip().lower()] = v.strip()
    if "content-length" in headers:
        n = int(headers["content-length"])
        if first and len(body) > n:
            body = body[:n]
        if len(body) != n:
            raise ValueError("body of %d bytes, Content-Length %d" %
                             (len(body), n))
    return int(parts[1]), headers, body


def check_reply(data, what):
    """A complete 200 {"status":"ok"} or 503 overloaded; else why not."""
    if not data:
        return "empty reply"
    try:
        st, h, body = parse_reply(data)
    except ValueError as e:
        return str(e)
    if st == 200:
        return None if body == b'{"status":"ok"}' else "200 body %r" % body
    if st != 503:
        return "status %d" % st
    if "retry-after" not in h:
        return "503 without Retry-After"
    try:
        code = json.loads(body)["error"]["code"]
    except (ValueError, KeyError, TypeError):
        return "503 body not the JSON error: %r" % body
    return None if code == "overloaded" else "503 code %r" % code


def read_all(s):
    out = b""
    while True:
        try:
            b = s.recv(65536)
        except ConnectionResetError:
            return out, True
        if not b:
            return out, False
        out += b


def healthz(port, src="127.0.0.1"):
    s = connect(port, src)
    s.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    data, _ = read_all(s)
    s.close()
    return data


def slowloris(port, n):
    raise_nofile()
    socks = [connect(port, "127.0.0.2") for _ in range(n)]
    for s in socks:
        s.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Slow: ")
    # The victim, while every attacking connection is still open.
    v = healthz(port)
    why = check_reply(v, "victim")
    if why is None and v.startswith(b"HTTP/1.1 200"):
        ok("a client on 127.0.0.1 is served during %d half-open "
           "connections from 127.0.0.2" % n)
    else:
        bad("victim not served: %s %r" % (why, v[:200]))
    # Each attacking connection ends: a 503 at once for those over the
    # cap, the end of the stream for those cut by the header timeout.
    refused = cut = other = 0
    deadline = time.monotonic() + HANG
    pending = {s.fileno(): s for s in socks}
    got = {fd: b"" for fd in pending}
    while pending and time.monotonic() < deadline:
        r, _, _ = select.select(list(pending), [], [], 1.0)
        for fd in r:
            s = pending[fd]
            try:
                b = s.recv(65536)
            except ConnectionResetError:
                b = b""
            if b:
                got[fd] += b
                continue
            del pending[fd]
            if not got[fd]:
                cut += 1
            elif check_reply(got[fd], "attacker") is None and \
                    got[fd].startswith(b"HTTP/1.1 503"):
                refused += 1
            else:
                other += 1
                bad("attacker got %r" % got[fd][:200])
    for s in socks:
        s.close()
    if pending:
        bad("%d half-open connections still open (never cut)" %
            len(pending))
    print("refused=%d cut=%d other=%d" % (refused, cut, other))
    return refused, cut


def flood(port, n):
    raise_nofile()
    req = b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    conns = {}
    for i in range(n):
        src = "127.0.1.%d" % (1 + i % 40)
        s = connect(port, src, blocking=False)
        conns[s.fileno()] = [s, b"", False]  # socket, reply, sent
    poll = select.poll()
    for fd in conns:
        poll.register(fd, select.POLLOUT | select.POLLIN)
    done = {}
    deadline = time.monotonic() + 3 * HANG
    while len(done) < n and time.monotonic() < deadline:
        for fd, ev in poll.poll(1000):
            c = conns[fd]
            if ev & select.POLLOUT and not c[2]:
                try:
                    c[0].send(req)
                    c[2] = True
                    poll.modify(fd, select.POLLIN)
                except (BlockingIOError, ConnectionError) as e:
                    if not isinstance(e, BlockingIOError):
                        done[fd] = c[1]
                        poll.unregister(fd)
                continue
            if ev & (select.POLLIN | select.POLLHUP | select.POLLERR):
                try:
                    b = c[0].recv(65536)
                except BlockingIOError:
                    continue
                except ConnectionError:
                    b = b""
                if b:
                    c[1] += b
                    continue
                done[fd] = c[1]
                poll.unregister(fd)
    counts = {"200": 0, "503": 0}
    wrong = []
    for fd, c in conns.items():
        data = done.get(fd)
        c[0].close()
        if data is None:
            wrong.append("no end of reply")
            continue
        why = check_reply(data, "flood")
        if why:
            wrong.append(why)
        else:
            counts[data[9:12].decode()] += 1
    print("200=%d 503=%d bad=%d" % (counts["200"], counts["503"],
                                    len(wrong)))
    if wrong:
        bad("%d of %d connections without a complete reply, e.g. %s" %
            (len(wrong), n, wrong[:3]))
    else:
        ok("%d connections at once: every one a complete reply "
           "(%d x 200, %d x 503 overloaded)" % (n, counts["200"],
                                               counts["503"]))
    return counts


def expect_closed(s, what):
    data, reset = read_all(s)
    s.close()
    if data:
        bad("%s: got %r" % (what, data[:200]))
    else:
        ok("%s: closed without a reply%s" % (what,
                                              " (reset)" if reset else ""))


def stall_head(port):
    s = connect(port)
    s.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")
    expect_closed(s, "half a head, then nothing")


def trickle_head(port, seconds):
    s = connect(port)
    head = b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Slow: " + b"a" * 400
    end = time.monotonic() + seconds
    sent = 0
    try:
        while time.monotonic() < end and sent < len(head):
            s.send(head[sent:sent + 1])
            sent += 1
            time.sleep(0.05)
    except (BrokenPipeError, ConnectionResetError):
        pass
    expect_closed(s, "a head trickling a byte at a time")


def stall_body(port):
    s = connect(port)
    s.sendall(b"POST /v1/auth/login HTTP/1.1\r\nHost: x\r\n"
              b"Content-Type: application/json\r\nContent-Length: 100\r\n"
              b"\r\n{\"user\":")
    expect_closed(s, "a body that stops")


def slow_body(port, seconds):
    body = b'{"user":"nobody","password":"' + b"x" * 40 + b'"}'
    s = connect(port)
    s.sendall(b"POST /v1/auth/login HTTP/1.1\r\nHost: x\r\n"
              b"Content-Type: application/json\r\nConnection: close\r\n"
              b"Content-Length: %d\r\n\r\n" % len(body))
    pause = seconds / len(body)
    for i in range(len(body)):
        s.sendall(body[i:i + 1])
        time.sleep(pause)
    data, _ = read_all(s)
    s.close()
    try:
        st, _, _ = parse_reply(data)
        ok("a slow body that keeps coming is answered (%d)" % st)
    except ValueError as e:
        bad("slow body: %s" % e)


def raw(port, status, text):
    s = connect(port)
    s.sendall(text.encode().decode("unicode_escape").encode("latin-1"))
    data, _ = read_all(s)
    s.close()
    try:
        st, _, body = parse_reply(data, first=True)
    except ValueError as e:
        bad("raw: %s" % e)
        return
    if st != status:
        bad("raw: status %d, wanted %d: %r" % (st, status, body[:300]))
    sys.stdout.write(body.decode("utf-8", "replace") + "\n")


def listener(portfile, backlog):
    ls = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    ls.bind(("127.0.0.1", 0))
    ls.listen(backlog)
    return ls


def write_port(ls, portfile):
    with open(portfile + ".tmp", "w") as f:
        f.write("%d\n" % ls.getsockname()[1])
    import os
    os.rename(portfile + ".tmp", portfile)


def silent(portfile):
    ls = listener(portfile, 16)
    write_port(ls, portfile)
    held = []
    while True:
        c, _ = ls.accept()
        held.append(c)  # read nothing, answer nothing


def full(portfile):
    ls = listener(portfile, 0)
    # Fill the accept queue (never accepted), so later SYNs are dropped.
    held = []
    for _ in range(4):
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.setblocking(False)
        try:
            s.connect(ls.getsockname())
        except BlockingIOError:
            pass
        held.append(s)
    time.sleep(0.5)
    write_port(ls, portfile)
    while True:
        time.sleep(60)


def tls_get(port, src, ctx):
    s = ctx.wrap_socket(connect(port, src), server_hostname="127.0.0.1")
    s.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    data = b""
    while True:
        try:
            b = s.recv(65536)
        except (ConnectionError, ssl.SSLError):
            break
        if not b:
            break
        data += b
    s.close()
    return data


def tls_cap(port, cap):
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    held = [ctx.wrap_socket(connect(port, "127.0.0.2"),
                            server_hostname="127.0.0.1") for _ in range(cap)]
    data = tls_get(port, "127.0.0.2", ctx)
    why = check_reply(data, "tls")
    if why is None and data.startswith(b"HTTP/1.1 503"):
        ok("TLS: connection %d from one address: 503 overloaded after "
           "the handshake" % (cap + 1))
    else:
        bad("TLS over the cap: %s %r" % (why, data[:200]))
    data = tls_get(port, "127.0.0.1", ctx)
    if check_reply(data, "tls") is None and data.startswith(b"HTTP/1.1 200"):
        ok("TLS: another address is served")
    else:
        bad("TLS victim: %r" % data[:200])
    for h in held:
        h.close()


def main():
    if sys.argv[1] == "silent":
        silent(sys.argv[2])
    if sys.argv[1] == "full":
        full(sys.argv[2])
    cmd, port = sys.argv[1], int(sys.argv[2])
    if cmd == "slowloris":
        slowloris(port, int(sys.argv[3]))
    elif cmd == "flood":
        flood(port, int(sys.argv[3]))
    elif cmd == "stall-head":
        stall_head(port)
    elif cmd == "trickle-head":
        trickle_head(port, float(sys.argv[3]))
    elif cmd == "stall-body":
        stall_body(port)
    elif cmd == "slow-body":
        slow_body(port, float(sys.argv[3]))
    elif cmd == "tls-cap":
        tls_cap(port, int(sys.argv[3]))
    elif cmd == "raw":
        raw(port, int(sys.argv[3]), sys.argv[4])
    else:
        sys.exit("unknown command " + cmd)
    sys.exit(status())


if __name__ == "__main__":
    main()
