#!/usr/bin/env python3
"""hold_proxy.py - a TCP proxy that can hold traffic: a network partition.

Usage: hold_proxy.py PORT_FILE UPSTREAM_PORT HOLD_FILE

Forwards every connection to 127.0.0.1:UPSTREAM_PORT.  While HOLD_FILE
exists, bytes are neither forwarded nor refused, and no connection is
closed: the peer's calls just never get an answer, as across a cut
network (the proxy's kernel still acknowledges, so no TCP timeout fires
either: only the caller's own clocks can tell).  When HOLD_FILE goes, the
held bytes flow on.  The port it listens on goes to PORT_FILE.
"""
import os
import socket
import sys
import threading
import time

port_file, upstream, hold = sys.argv[1], int(sys.argv[2]), sys.argv[3]


def pump(src, dst):
    try:
        while True:
            data = src.recv(65536)
            while os.path.exists(hold):
                time.sleep(0.05)
            if not data:
                break
            dst.sendall(data)
    except OSError:
        pass
    for s in (src, dst):
        try:
            s.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass


def serve(client):
    try:
        up = socket.create_connection(("127.0.0.1", upstream))
    except OSError:
        client.close()
        return
    threading.Thread(target=pump, args=(client, up), daemon=True).start()
    threading.Thread(target=pump, args=(up, client), daemon=True).start()


srv = socket.socket()
srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
srv.bind(("127.0.0.1", 0))
srv.listen(64)
with open(port_file + ".tmp", "w") as f:
    f.write(str(srv.getsockname()[1]))
os.rename(port_file + ".tmp", port_file)
while True:
    c, _ = srv.accept()
    serve(c)
