/*
 * http_server.h - the HTTP server wrapper over libmicrohttpd: request
 * bodies gathered under a size limit, a declarative route table, and JSON
 * error bodies.  cnlabd serves its REST API with it, the node agent its
 * /metrics and /healthz.
 *
 * Design.  The REST API is one static array of struct cnl_http_route rows
 * (after Redis' command table).  Each row names its method, its path
 * pattern, the permission a caller needs, the audit action when the route
 * changes state, and its handler.  This layer owns transport and routing:
 *
 *   request --> body over the limit?        yes: 413
 *           --> a row with this path?        no:  404
 *           --> a row with path and method?  no:  405 + Allow
 *           --> serve(route, request)   (the API layer: auth, RBAC, audit,
 *                                        then route->handler)
 *
 * Policy (who may call what) lives in the layer above, which receives every
 * matched request through one serve callback; this layer only guarantees
 * that it never routes to a row whose permission is unset, because
 * cnl_http_server_new() validates the whole table first and refuses to
 * start otherwise.
 *
 * Every error body has the one shape
 *   {"error": {"code": "not_found", "message": "..."}}
 * made by cnl_http_error() through net/error.h, which clients use to read
 * it back.
 *
 * Streamed bodies.  When the config has open_sink, it is called for each
 * matched request once its headers are in, before any of the body is
 * read, and says whether the route streams its body (file uploads).  Such
 * a route does not gather its body in memory: open_sink authorizes and
 * opens somewhere to put the bytes (or answers at once with an error),
 * each chunk of the body goes to the sink as it arrives, with no size
 * limit but the sink's own, and serve then runs with the sink in
 * req->sink.  A reply may
 * likewise be a file (send_file): sent from its descriptor, never read
 * into memory here.
 *
 * Streamed replies and upgrades.  A reply may be read from a callback as
 * it is sent (stream_read: a proxied body), and may be a 101 that hands
 * the connection's byte stream to the layer above (upgraded: a WebSocket,
 * a node's tunnel); both may carry headers of their own (headers).
 *
 * Passed requests.  A request whose path starts with the config's
 * pass_prefix is not routed: pass_open sees its headers (and may answer
 * at once), pass_body each chunk of its body as it arrives, pass_end
 * makes the reply once the body is in and takes the state (to free, or to
 * hand to the reply); pass_free runs when pass_end never did; pass_open
 * may also decline, and the request is then routed as any other.
 * cnlabd's notebook proxy (/s/) and a follower's listener (every path;
 * the reads it serves itself declined) are two.
 *
 * Threading: by default every connection gets its own thread (so a long
 * poll never holds up other requests).  In event mode (config.quick;
 * cnlabd's API listener has it switched off for now, see
 * CNL_API_EVENT_MODE in server/api.c) a few event threads carry all
 * connections;
 * the routes quick() approves are served on them, and their answer may
 * wait for an event without a thread (resp.wait); every other request
 * runs on a worker thread while its connection is held, so a long poll
 * still holds up nothing.  Either way the serve callback must do its own
 * locking.
 *
 * Connections.  This layer accepts connections itself, in one thread,
 * and hands those it admits to libmicrohttpd, so that it can answer the
 * ones it does not:
 *
 *   accept --> conn_max connections open?              yes: 503
 *          --> conn_per_client open from this address?  yes: 503
 *              (an upgraded connection, a tunnel, counts only in
 *              conn_max: it was authorized, and the layer above caps
 *              tunnels per user)
 *          --> admitted: the request head must be in within
 *              header_timeout of the accept (or of the end of the previous
 *              request on a kept-alive connection); a body must not stall
 *              for body_timeout; either is cut (the socket shut down).
 *
 * A 503 carries Retry-After and the usual error body with the code
 * "overloaded"; on plain HTTP it is written at once by the accepting
 * thread (no thread, no parsing), and the connection is closed once the
 * client has closed its side or after a moment, so the reply is never
 * lost to a reset.  Over TLS a reply needs a handshake first: up to
 * conn_max connections over the limits are handed to libmicrohttpd
 * marked, and answered 503 as soon as their head is in (beyond that they
 * are closed).  Once a request's head is in, nothing here times it out:
 * a long poll, a streamed reply or an upgraded connection (a tunnel)
 * lasts as long as the layer above wants.
 *
 * Framing.  A request head must say how long its body is in one way
 * only: at most one Content-Length (two, even equal, are a 400),
 * never Content-Length with Transfer-Encoding, and no Transfer-Encoding
 * but chunked, one Host, and no header field another parser could read
 * otherwise (a space before the colon, a folded line, a control
 * character in a value) (cnl_http_framing_*() below; libmicrohttpd itself
 * answers
 * 400 to a Content-Length that is not a number).
 */
#ifndef CNL_NET_HTTP_SERVER_H
#define CNL_NET_HTTP_SERVER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include <jansson.h>

/*
 * What a caller needs to be served by a route.  The zero value is not a
 * permission: a row left without one is refused by cnl_http_routes_check().
 * The PROJECT_* levels apply to the project a route's path names, through a
 * {project} segment or, for a {job} segment, the job's project.
 */
enum cnl_http_perm {
	CNL_PERM_UNSET = 0,     /* invalid: every row must choose */
	CNL_PERM_PUBLIC,        /* no token (health, login) */
	CNL_PERM_AUTHENTICATED, /* any valid token */
	CNL_PERM_PROJECT_VIEW,  /* viewer or above in the project */
	CNL_PERM_PROJECT_MEMBER,
	CNL_PERM_PROJECT_ADMIN,
	CNL_PERM_ADMIN,   /* platform administrator */
	CNL_PERM_AGENT,   /* a node agent (or an administrator) */
	CNL_PERM_COLLECT, /* a run pod's collector, for its job and epoch */
	CNL_PERM_COUNT_
};

/* cnl_http_perm_name - "PUBLIC", "ADMIN", ... or "UNSET"/"INVALID". */
const char *cnl_http_perm_name(enum cnl_http_perm p);

/* Largest request body accepted by default (1 MiB); more is a 413. */
#define CNL_HTTP_BODY_MAX_DEFAULT (1024 * 1024)
/* Connection defaults (struct cnl_http_config). */
#define CNL_HTTP_CONN_MAX_DEFAULT        1024
#define CNL_HTTP_CONN_PER_CLIENT_DEFAULT 128
#define CNL_HTTP_HEADER_TIMEOUT_DEFAULT  (20 * 1000) /* ms */
#define CNL_HTTP_BODY_TIMEOUT_DEFAULT    (60 * 1000) /* ms */
#define CNL_HTTP_RETRY_AFTER_DEFAULT     5           /* s */
/* Path parameters per route ({project}, {job}, ...). */
#define CNL_HTTP_PARAMS_MAX 4
/* Bytes of an Allow header value. */
#define CNL_HTTP_ALLOW_MAX 64

/*
 * Where the body of a streamed route goes (made by the config's
 * open_sink; the caller embeds this in its own state).  @write takes each
 * chunk as it arrives and returns 0, or < 0 to refuse the rest: the rest
 * of the body is then read and dropped, and the handler, which sees the
 * sink, says what went wrong.  @free runs once when the request is over,
 * whatever happened (a client that went away included).
 */
struct cnl_http_sink {
	int (*write)(struct cnl_http_sink *s, const char *data, size_t n);
	void (*free)(struct cnl_http_sink *s);
	bool failed; /* set by this layer once @write refused */
};

/* A path parameter: name from the pattern, value from the request path. */
struct cnl_http_param {
	char name[32];
	char value[128];
};

/* One request as the layers above see it.  Strings live until the reply. */
struct cnl_http_request {
	const char *method;
	const char *path;
	struct cnl_http_param params[CNL_HTTP_PARAMS_MAX];
	int nparams;
	const char *body; /* NUL-terminated; "" when there is none */
	size_t body_len;
	struct cnl_http_sink *sink; /* streamed routes; else NULL */
	void *conn;      /* transport handle for the header and query lookups */
	const char *uri; /* the request target as sent (path and query) */
	/* Served on an event thread (cnl_http_config.quick): the handler
	 * must not block, and waits for an event through the response's
	 * @wait instead (below); false: it may block. */
	bool may_wait;
};

/* An upgraded connection (after a 101), closed by cnl_http_upgrade_close. */
struct cnl_http_upgrade;

/* cnl_http_upgrade_close - the layer above is done with an upgraded
 * connection: close it (once, from any thread). */
void cnl_http_upgrade_close(struct cnl_http_upgrade *u);

/*
 * The reply a handler builds.  body is owned (json_decref on reply).  A
 * handler may instead set @text (malloc'd, owned, freed on reply) with its
 * @content_type, which is sent as is; or @send_file with @file_fd (owned:
 * closed once sent, or on error) of which @file_size bytes from its start
 * are sent, streamed.  @sha256, when not "", goes out as the header
 * X-Content-SHA256 (the digest of a file sent).
 */
struct cnl_http_response {
	unsigned status;
	json_t *body;
	char *text;
	size_t text_len; /* 0: strlen(text) */
	const char *content_type;
	bool send_file;
	int file_fd;
	uint64_t file_size;
	char sha256[65];
	char allow[CNL_HTTP_ALLOW_MAX]; /* sent as Allow when not empty */
	/* Headers of the reply's own: "Name: value\r\n" lines, malloc'd,
	 * owned.  With @no_defaults, no Content-Type or Cache-Control is
	 * added (a proxied reply carries its own). */
	char *headers;
	bool no_defaults;
	/* A body read as it is sent: @stream_read puts up to @max bytes in
	 * @buf and returns how many, 0 at the end, < 0 to drop the
	 * connection; @stream_size is the length (-1: unknown, sent
	 * chunked).  @stream_free(@stream_arg) runs once, whatever happened.
	 * May block (a thread of its own reads it). */
	ssize_t (*stream_read)(void *arg, char *buf, size_t max);
	void (*stream_free)(void *arg);
	void *stream_arg;
	int64_t stream_size;
	/* A 101 reply (with status 101): once it is sent, @upgraded gets the
	 * connection's socket @fd, what the client sent past its request
	 * (@extra, @n bytes) and the handle to close it with; it owns
	 * @upgrade_arg from then on, and must not block (over TLS this
	 * server's thread carries the bytes once it returns).  When the 101
	 * is never sent, @upgrade_free(@upgrade_arg) runs instead. */
	void (*upgraded)(void *arg, int fd, const char *extra, size_t n,
	                 struct cnl_http_upgrade *u);
	void (*upgrade_free)(void *arg);
	void *upgrade_arg;
	/* An answer that may go only after an event (cnlabd: the sync of
	 * the request's commits), set by a handler that got req->may_wait.
	 * The server holds the connection (no thread waits) and calls
	 * @wait(@wait_arg, waiter): it returns 1 when the event already
	 * happened, a negative errno when it never will, or 0 and then
	 * calls cnl_http_wake(waiter, r) exactly once, from any thread.
	 * Then, on the server's thread, @waited(@wait_arg, r, resp) may
	 * change the answer (r: 0, the errno, or wake's r) and frees
	 * @wait_arg; it runs whatever happened, the client gone or not. */
	int (*wait)(void *arg, void *waiter);
	void (*waited)(void *arg, int r, struct cnl_http_response *resp);
	void *wait_arg;
	/* Set, and nothing else, by a handler that got req->may_wait and
	 * found it would have to block after all (a lock held long): it did
	 * nothing, and the server serves the request again on a worker. */
	bool retry_blocking;
};

/* cnl_http_wake - the event a response's wait() waits for happened (@r 0)
 * or failed (@r < 0): its answer goes.  Any thread; must not block. */
void cnl_http_wake(void *waiter, int r);

/*
 * A route.  @handler receives the API layer's per-call context as @call.
 * @action names the audit record of a state-changing route ("job.create")
 * and is NULL for reads; every method but GET must have one.
 */
struct cnl_http_route {
	const char *method;  /* "GET", "POST", "PUT", "PATCH", "DELETE" */
	const char *pattern; /* "/v1/projects/{project}/jobs" */
	enum cnl_http_perm perm;
	const char *action;
	void (*handler)(void *call, struct cnl_http_request *req,
	                struct cnl_http_response *resp);
};

/*
 * cnl_http_routes_check - validate a route table: every row has a known
 * method, a pattern that starts with '/' and whose {name} segments are
 * whole, well formed and at most CNL_HTTP_PARAMS_MAX, a permission other
 * than CNL_PERM_UNSET and within the enum, a handler, and an action unless
 * it is a GET; and no two rows share method and pattern.  Returns 0, or
 * -CNL_ECONFIG with the first bad row named in @err.
 */
int cnl_http_routes_check(const struct cnl_http_route *routes, size_t n,
                          char *err, size_t errlen);

/* Results of cnl_http_route_match(). */
enum cnl_http_match {
	CNL_HTTP_MATCH_OK,
	CNL_HTTP_MATCH_NO_PATH,   /* 404 */
	CNL_HTTP_MATCH_NO_METHOD, /* 405: @allow lists the methods */
};

/*
 * cnl_http_route_match - find the row for @method and @path.  On
 * CNL_HTTP_MATCH_OK *@ret_route is set and @req's params are filled from
 * the path; on CNL_HTTP_MATCH_NO_METHOD @allow (CNL_HTTP_ALLOW_MAX bytes)
 * holds the methods the path does take, comma-separated.  A {name} segment
 * matches any non-empty segment of at most 127 bytes.
 */
enum cnl_http_match
cnl_http_route_match(const struct cnl_http_route *routes, size_t n,
                     const char *method, const char *path,
                     struct cnl_http_request *req,
                     const struct cnl_http_route **ret_route, char *allow);

/* cnl_http_param - the value of the path parameter @name, or NULL. */
const char *cnl_http_param(const struct cnl_http_request *req,
                           const char *name);

/* cnl_http_header - a request header (case-insensitive name), or NULL. */
const char *cnl_http_header(const struct cnl_http_request *req,
                            const char *name);

/* cnl_http_headers_each - call @fn for each request header, in order. */
void cnl_http_headers_each(const struct cnl_http_request *req,
                           void (*fn)(void *arg, const char *name,
                                      const char *value),
                           void *arg);

/* cnl_http_query - a query-string argument, or NULL (also when its value
 * holds a NUL byte, %00, which C would read cut short). */
const char *cnl_http_query(const struct cnl_http_request *req,
                           const char *name);

/*
 * cnl_http_error - make @resp the error @status with {"error": {"code":
 * @code, "message": formatted}}, replacing any body it had.
 */
void cnl_http_error(struct cnl_http_response *resp, unsigned status,
                    const char *code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* cnl_http_reply - make @resp @status with @body (reference stolen). */
void cnl_http_reply(struct cnl_http_response *resp, unsigned status,
                    json_t *body);

/* How to run a server. */
struct cnl_http_config {
	const char *host; /* IPv4 literal, e.g. "127.0.0.1" */
	uint16_t port;    /* 0: the kernel picks; see cnl_http_server_port() */
	size_t body_max;  /* 0: CNL_HTTP_BODY_MAX_DEFAULT */
	/* Connection limits and timeouts (see above); 0: the default. */
	unsigned conn_max;         /* connections at once */
	unsigned conn_per_client;  /* connections from one IPv4 address */
	int64_t header_timeout_ms; /* to receive a whole request head */
	int64_t body_timeout_ms;   /* a body with no byte coming */
	unsigned retry_after_s;    /* Retry-After of a 503 */
	/* TLS: PEM text of the certificate chain and key; both or neither. */
	const char *tls_cert_pem;
	const char *tls_key_pem;
	const struct cnl_http_route *routes;
	size_t nroutes;
	/*
	 * Called for each matched request on the server thread; must set
	 * resp->status (a response left at 0 becomes a 500).
	 */
	/*
	 * Event mode, when @quick is set: a few event threads (@threads;
	 * 0: one per CPU, at least 2) carry every connection, instead of a
	 * thread per connection.  A request whose route @quick approves is
	 * served on them (req->may_wait: its handler must not block, and
	 * waits with resp->wait); every other request's serve(), and a
	 * passed request's pass_end(), run on a worker thread while the
	 * connection waits, and a streamed answer's stream_read() on a
	 * thread of its own.  open_sink, a sink's writes, pass_open and
	 * pass_body still run on the event threads: they must be quick.
	 */
	bool (*quick)(void *ud, const struct cnl_http_route *route,
	              const struct cnl_http_request *req);
	unsigned threads;
	void (*serve)(void *ud, const struct cnl_http_route *route,
	              struct cnl_http_request *req,
	              struct cnl_http_response *resp);
	/*
	 * NULL, or called with the headers of each matched request, before
	 * any of its body is read.  Returns 1 for a route whose body is
	 * gathered in memory as usual, 0 with *@ret set for one streamed to
	 * that sink, or -1 with @resp set to the error sent at once.
	 */
	int (*open_sink)(void *ud, const struct cnl_http_route *route,
	                 struct cnl_http_request *req,
	                 struct cnl_http_response *resp,
	                 struct cnl_http_sink **ret);
	/* Passed requests (see above); NULL prefix: none.  pass_open
	 * returns 0 with its state in *@ret_state, -1 with the answer in
	 * @resp, or 1 (@resp untouched) to leave the request to the routes
	 * after all (a follower's reads it serves itself); pass_body < 0 drops
	 * the rest of the body. */
	/* A connection whose request carries the header @trust_header with
	 * a value @trust accepts (a replica forwarding its clients'
	 * requests: server/forward.c) stops counting toward its address's
	 * conn_per_client, as an upgraded one does, and new connections
	 * from that address are not held to it at the door for ten minutes
	 * after (a burst of forwarded requests); NULL: none. */
	const char *trust_header;
	bool (*trust)(void *ud, const char *value);
	void *trust_ud;
	const char *pass_prefix;
	int (*pass_open)(void *ud, struct cnl_http_request *req,
	                 struct cnl_http_response *resp, void **ret_state);
	int (*pass_body)(void *state, const char *data, size_t n);
	void (*pass_end)(void *state, struct cnl_http_request *req,
	                 struct cnl_http_response *resp);
	void (*pass_free)(void *state);
	void *ud;
};

struct cnl_http_server;

/*
 * cnl_http_server_new - validate the route table and start serving in a
 * thread of libmicrohttpd's.  Returns 0, -CNL_ECONFIG (a bad route table,
 * host or config; @err says which), -EADDRINUSE or -EIO when the socket
 * cannot be bound, -ENOMEM.
 */
int cnl_http_server_new(const struct cnl_http_config *cfg,
                        struct cnl_http_server **ret, char *err, size_t errlen);

/* cnl_http_server_port - the port bound, useful after asking for port 0. */
uint16_t cnl_http_server_port(const struct cnl_http_server *srv);

/*
 * Framing of a request body, checked from its head: feed each header with
 * cnl_http_framing_add(), then cnl_http_framing_end() says whether the
 * head is acceptable.  Pure functions, so a fuzzer drives them.
 */
struct cnl_http_framing {
	unsigned n_length;   /* Content-Length headers seen */
	unsigned n_encoding; /* Transfer-Encoding headers seen */
	bool bad_length;     /* a Content-Length that is not digits */
	bool bad_encoding;   /* a Transfer-Encoding other than chunked */
	bool length_overflow;
	unsigned n_host; /* Host headers seen */
	bool bad_field;  /* a name or value HTTP does not allow (below) */
	char field[40];  /* the first such name (cut short, printable) */
	uint64_t length; /* the first Content-Length's value */
};

/* cnl_http_framing_add - note the header @name: @value (either may be
 * NULL, which counts as "").  A name that is not all token characters
 * (a space before the colon, a folded line's leftovers) or a value with a
 * control character but tab (a bare CR) makes the head a 400: another
 * parser in front could read such a head otherwise (request smuggling).
 * So does a name that holds "Content-Length" or "Transfer-Encoding" but
 * is not that name: libmicrohttpd (0.9.75) glues a folded line's text
 * to the name ("Content-Length: 2\r\n 0" reaches us as a header
 * "Content-Length0"), where a proxy in front reads the folded header.
 * Two Host headers are a 400 too (RFC 9112 3.2). */
void cnl_http_framing_add(struct cnl_http_framing *f, const char *name,
                          const char *value);

/* cnl_http_framing_end - 0 when the head is acceptable (*@ret_length: the
 * body's length, or -1 for chunked or none), or -EINVAL with the reason,
 * naming the header, in @err. */
int cnl_http_framing_end(const struct cnl_http_framing *f, int64_t *ret_length,
                         char *err, size_t errlen);

/* Counters of what the connection limits did, since the start. */
struct cnl_http_server_stats {
	uint64_t accepted;   /* handed to libmicrohttpd */
	uint64_t refused;    /* answered 503 (or closed, over TLS) */
	uint64_t header_cut; /* cut by the header timeout */
	uint64_t body_cut;   /* cut by the body timeout */
	unsigned open;       /* admitted connections open now */
};

/* cnl_http_server_stats - a snapshot of the counters. */
void cnl_http_server_stats(struct cnl_http_server *srv,
                           struct cnl_http_server_stats *ret);

/* cnl_http_server_free - stop serving and free; NULL is allowed. */
void cnl_http_server_free(struct cnl_http_server *srv);

#endif /* CNL_NET_HTTP_SERVER_H */
