#!/usr/bin/env python3
"""cut_proxy.py - a TCP proxy in front of cnlabd that drops event streams.

Usage: cut_proxy.py PORT_FILE UPSTREAM_PORT LOG CUTS

Forwards every connection to 127.0.0.1:UPSTREAM_PORT.  On the first CUTS
requests for a job's events (GET /v1/jobs/.../events, on a connection of
its own or a kept-alive one), the connection is cut (both sockets shut
down, the chunked reply left without its end) right after the reply
carried its first output chunk ("event: log"): a connection dropped in
the middle of a job, which the client must resume without losing or
repeating output.  Each request line, and each cut, goes to LOG; the port
it listens on to PORT_FILE.
"""
import os
import re
import socket
import sys
import threading

port_file, upstream, log_path, cut_max = (sys.argv[1], int(sys.argv[2]),
                                          sys.argv[3], int(sys.argv[4]))
lock = threading.Lock()
cuts = [0]
REQ = re.compile(rb"(GET|POST|PUT|PATCH|DELETE) (\S+) HTTP/1\.1\r\n")


def log(line):
    with lock, open(log_path, "a") as f:
        f.write(line + "\n")


def close(*socks):
    for s in socks:
        try:
            s.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass


def upward(c, u, st):
    """Client to cnlabd: note each request; arm the cut on an events one."""
    try:
        while True:
            data = c.recv(65536)
            if not data:
                break
            for m in REQ.finditer(data):
                path = m.group(2).decode("latin-1")
                log(m.group(1).decode() + " " + path)
                if "/events" in path:
                    with lock:
                        if cuts[0] < cut_max:
                            cuts[0] += 1
                            st["armed"] = True
            u.sendall(data)
    except OSError:
        pass
    close(c, u)


def downward(u, c, st):
    """cnlabd to client: once armed, cut after the first output event."""
    seen = b""
    try:
        while True:
            data = u.recv(65536)
            if not data:
                break
            if st.get("armed"):
                seen += data
                i = seen.find(b"event: log")
                end = seen.find(b"\n\n", i) if i >= 0 else -1
                if end >= 0:
                    keep = len(data) - (len(seen) - (end + 2))
                    if keep > 0:
                        c.sendall(data[:keep])
                    log("cut")
                    break
            c.sendall(data)
    except OSError:
        pass
    close(c, u)


def serve(c):
    try:
        u = socket.create_connection(("127.0.0.1", upstream))
    except OSError:
        c.close()
        return
    st = {}
    t = threading.Thread(target=upward, args=(c, u, st), daemon=True)
    t.start()
    downward(u, c, st)
    t.join(5)
    c.close()
    u.close()


ls = socket.socket()
ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
ls.bind(("127.0.0.1", 0))
ls.listen(64)
with open(port_file + ".tmp", "w") as f:
    f.write(str(ls.getsockname()[1]))
os.rename(port_file + ".tmp", port_file)
while True:
    conn, _ = ls.accept()
    threading.Thread(target=serve, args=(conn,), daemon=True).start()
