/*
 * forward.h - a follower's listener: every cnlabd over one PostgreSQL
 * serves the API.
 *
 * While another cnlabd leads (leader.h), this one listens on its own
 * address, answers the reads of the database itself (a follower's API:
 * api.h, cnl_api_follower_serves()) and forwards every other request to
 * the leader's replica URL (the label in the lease), streaming both ways
 * (bodies, Server-Sent Events, long polls, upgrades: exec, ssh, node
 * tunnels, WebSockets), so a client or load balancer may use any
 * replica.  It also answers GET /healthz (200
 * {"status":"ok","role":"follower","leader":URL, "epoch":N,"store_lag_ms":MS}
 * while a live leader is known, else 503 "standby") and GET /metrics (its own:
 * cnlab_leader 0, the epoch it sees, its view's age, forwarded requests by
 * outcome, requests answered itself).  When the lease names no URL (the
 * leader's replica_url is unset) or has expired, every request it would forward
 * is 503 "not_leader", which the HTTP client takes as "try the next address".
 */
#ifndef CNL_SERVER_FORWARD_H
#define CNL_SERVER_FORWARD_H

#include <stdbool.h>
#include <stddef.h>

struct cnl_http_config;
struct cnl_http_server;

/* Bytes of a label or CA path, NUL included. */
#define CNL_FORWARD_LABEL_MAX 512

/*
 * What a follower answers itself (main.c fills it from a follower's API:
 * api.h, cnl_api_follower_serves()): @serves says whether @req is one of
 * those, and a request it takes is routed through @routes to @serve, as
 * the leader's listener would, with @ud.
 */
struct cnl_http_request;
struct cnl_http_response;
struct cnl_http_route;
struct cnl_forward_local {
	void *ud;
	bool (*serves)(void *ud, const struct cnl_http_request *req);
	const struct cnl_http_route *routes;
	size_t nroutes;
	void (*serve)(void *ud, const struct cnl_http_route *route,
	              struct cnl_http_request *req,
	              struct cnl_http_response *resp);
};

/*
 * cnl_forward_listen - listen on @cfg's address (host, port, TLS, limits;
 * routes and handlers are set here) as a follower.  @cafile verifies an
 * https leader (NULL: the system's CAs).  @local (copied; NULL: every
 * request is forwarded) answers the reads it serves here.  0 with the
 * server in *@ret (cnl_http_server_port() says which port it got), or the
 * error of cnl_http_server_new().
 */
int cnl_forward_listen(const struct cnl_http_config *cfg, const char *cafile,
                       const struct cnl_forward_local *local,
                       struct cnl_http_server **ret, char *err, size_t errlen);

/* cnl_forward_label - this cnlabd's own replica URL, which other replicas
 * forward to when it leads (a lease naming it is not forwarded to). */
void cnl_forward_label(const char *label);

/*
 * Replicas prove to one another that a connection forwards clients'
 * requests, so that the leader does not count it toward the follower's
 * address's connection limit (each client is counted by the follower):
 * the header CNL_FORWARD_PROOF_HEADER carries an HMAC-SHA256 of a fixed
 * text under the secret the replicas share (CNLAB_JWT_SECRET), in hex.
 * It lifts only that count; it grants nothing else.
 */
#define CNL_FORWARD_PROOF_HEADER "CNLab-Replica"
#define CNL_FORWARD_PROOF_LEN    65 /* hex, NUL included */

/* cnl_forward_proof - the proof for the shared secret @key. */
void cnl_forward_proof(const void *key, size_t len,
                       char out[CNL_FORWARD_PROOF_LEN]);
/* cnl_forward_set_proof - what this follower sends (NULL: nothing). */
void cnl_forward_set_proof(const char *proof);
/* cnl_forward_trusted - whether @value is the proof @proof (a NUL-
 * terminated hex string), in constant time: an http_server trust hook. */
bool cnl_forward_trusted(void *proof, const char *value);

/* cnl_forward_stop - end every forwarded request and relay (within a
 * second) and free @srv: before the leader's own listener takes the
 * port. */
void cnl_forward_stop(struct cnl_http_server *srv);

#endif /* CNL_SERVER_FORWARD_H */
