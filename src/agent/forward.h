/*
 * forward.h - the node end of a notebook server's port: the agent listens on
 * the node and relays each connection to 127.0.0.1:PORT inside the server's
 * own network namespace, where the server listens.
 *
 * A server's container has its own network namespace (only loopback), so
 * nothing it listens on, on any address, is reachable from the node's
 * network; the one way in is this forwarder's port, on the address the
 * operator gave (address setting), with the server's token checked by the
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

/* cnl_fwd_stop - stop listening and free; open connections end with the
 * server's.  NULL-safe. */
void cnl_fwd_stop(struct cnl_fwd *f);

#endif /* CNL_AGENT_FORWARD_H */
