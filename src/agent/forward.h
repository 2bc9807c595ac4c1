/*
 * forward.h - the node end of a notebook server's port: the agent listens on
 * the node's loopback and relays each connection to 127.0.0.1:PORT inside
 * the server's own network namespace, where the server listens; and
 * cnl_fwd_dial, which the tunnels of cnlabd's proxy (tunnel.c) use to
 * reach the same port.
 *
 * A server's container has its own network namespace (only loopback), so
 * nothing it listens on, on any address, is reachable from the node's
 * network.  Users come through cnlabd's proxy, over a tunnel the agent
 * opens (tunnel.c); this forwarder listens on the node's loopback only,
 * for the node's operator, with the server's token checked by the
 * server.  The forwarder holds its port from the start, so no other
 * process can take it between choosing and binding (the old free_port
 * race).  The network namespace is the one of the workload's processes
 * (found by its cgroup, as the node sees it), looked up per connection: a
 * restarted container is found again.
 *
 * Threads: one per forwarder (accept), one per open connection (connect
 * inside the namespace, then relay both ways until the server's side
 * ends); at most CNL_FWD_CONNS connections at once and CNL_FWD_PER_SOURCE
 * from one address, beyond which a new one is closed at once, and a
 * connection that sends nothing within CNL_FWD_FIRST_BYTE_MS is closed:
 * holding idle connections does not lock a server's users out.
 */
#ifndef CNL_AGENT_FORWARD_H
#define CNL_AGENT_FORWARD_H

#include <stdbool.h>

#include "agent/launch.h"

#define CNL_FWD_CONNS         256
#define CNL_FWD_PER_SOURCE    16
#define CNL_FWD_FIRST_BYTE_MS 30000

struct cnl_fwd;

/*
 * cnl_fwd_start - listen on @addr (an IPv4 or IPv6 address or a host name)
 * at @port (0: one the kernel picks) for workload @id of launcher @l, and
 * relay to 127.0.0.1:<the port> in the workload's network namespace.  The
 * port in *ret_port.  0 or a negative errno.
 */
int cnl_fwd_start(struct cnl_launcher *l, const char *id, const char *addr,
                  int port, struct cnl_fwd **ret, int *ret_port);

/*
 * cnl_fwd_dial - a connection to 127.0.0.1:@port in workload @id's network
 * namespace (@own_netns; else in this one), tried for a while when
 * refused.  Moves the calling thread into that namespace for good: call
 * it from a thread of its own, after any connection elsewhere is made.
 * The socket, or a negative errno (-ESRCH: no process of @id found).
 */
int cnl_fwd_dial(struct cnl_launcher *l, const char *id, int port,
                 bool own_netns);

/* cnl_fwd_stop - stop listening and free; open connections end with the
 * server's.  NULL-safe. */
void cnl_fwd_stop(struct cnl_fwd *f);

#endif /* CNL_AGENT_FORWARD_H */
