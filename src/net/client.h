/*
 * client.h - CNLab's one HTTP client (HTTP/1.1 of our own over sockets
 * and mbedTLS, client.c): the CLI, the node agent and cnlabd's JWKS fetch
 * all talk HTTP through it.
 *
 * A client is a base URL, an optional bearer token and CA file, timeouts,
 * a reply limit, and one connection kept alive across requests to the
 * same scheme, host and port.  A client is used by one thread at a time; a
 * program with several threads gives each its own (the agent has three).
 *
 * What every request does:
 *   - the URL is the base (trailing '/' dropped) followed by the path; a
 *     client with the base "" takes whole URLs as paths;
 *   - a base of several http(s) URLs separated by commas (the replicas
 *     of one control plane) is several bases: a request that cannot
 *     connect to one (nothing sent), or that one refuses with 503 and
 *     the error code "not_leader" (a standby: it did nothing), tries the
 *     next, each once, and the one that answered is tried first from
 *     then on;
 *   - only http:// and https:// URLs (no user@ part: a path cannot
 *     move the token to another host), no redirects followed, no
 *     signals (no SIGPIPE, no alarm: we live in threaded programs);
 *   - headers: "Authorization: Bearer <token>" when the client has one,
 *     "Accept: application/json", "Idempotency-Key" when the request has
 *     one, "User-Agent" and "traceparent" when the client has them;
 *   - a JSON body goes as compact JSON with "Content-Type:
 *     application/json"; a raw body as is, with its content type; a
 *     method other than GET without either sends "{}" as JSON, since
 *     cnlabd wants a JSON object on every state-changing route;
 *   - the reply is read up to the client's limit; more is an error.
 *
 * Files, streamed.  A request may send its body from a file descriptor
 * (@upload_fd, @upload_size bytes from its start, read as it is sent;
 * with @sha256 as the header X-Content-SHA256) and may write a successful
 * (2xx) reply into a descriptor (@download_fd) instead of memory, with no
 * limit but @download_max; the reply then carries the SHA-256 of the
 * bytes written and the server's X-Content-SHA256, for the caller to
 * compare.  Neither is ever held whole in memory.
 *
 * What counts as unreachable: no HTTP reply at all (DNS, connect, TLS,
 * timeout, a reply over the limit) is -EIO with the reason in the reply
 * (and, for a timeout, which one in timed_out); any HTTP status, 4xx and
 * 5xx included, is a reply and returns 0.
 *
 * Timeouts: connecting (connect_timeout_ms, the TCP connect; 0: 300 s),
 * idle (idle_timeout_ms: no byte either way for that long, TLS handshake
 * included, so a server that accepted and never answers is given up on
 * while a slow transfer that moves goes on), and the whole request
 * (timeout_ms).
 *
 * TLS (https): mbedTLS, TLS 1.2 or later, the server's certificate
 * checked against @cafile or the system bundle and its name against the
 * host (an IP address against its iPAddress names).  Nothing of TLS is
 * set up before the first https request.  Error reasons keep libcurl's
 * words ("Couldn't connect to server", "Timeout was reached", ...).
 */
#ifndef CNL_NET_CLIENT_H
#define CNL_NET_CLIENT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include <jansson.h>

/* Bytes of a base URL, NUL included; longer ones are refused. */
#define CNL_CLIENT_BASE_MAX 1024
/* Bytes of a bearer token (an OIDC ID token may be 8 KiB). */
#define CNL_CLIENT_TOKEN_MAX 16384
/* Default largest reply body (64 MiB). */
#define CNL_CLIENT_REPLY_MAX_DEFAULT ((size_t)64 << 20)
/* Room for the reasons in a reply, NUL included. */
#define CNL_CLIENT_ERROR_MAX  512
#define CNL_CLIENT_DETAIL_MAX 256

/* What timed out (struct cnl_client_reply's timed_out). */
enum {
	CNL_CLIENT_TIMEOUT_CONNECT = 1, /* no connection within the connect
	                                   timeout */
	CNL_CLIENT_TIMEOUT_IDLE,        /* connected, then nothing moved for
	                                   the idle timeout */
	CNL_CLIENT_TIMEOUT_TOTAL,       /* the whole-request limit */
};

/* How a client talks; strings are copied by cnl_client_new(). */
struct cnl_client_config {
	const char *base;  /* "https://host:8443"; "": paths are URLs */
	const char *token; /* bearer; NULL or "": none sent */
	/* When set, asked for the bearer before each request instead of
	 * @token (a credential that rotates, shared by several clients):
	 * writes it NUL-terminated into @buf ("": none sent).  Thread-safe
	 * if the clients sharing it run on several threads. */
	void (*token_fn)(void *ud, char *buf, size_t len);
	void *token_ud;
	const char *cafile;     /* verifies a TLS server; NULL: system CAs */
	const char *user_agent; /* NULL: no User-Agent header */
	/* W3C trace context sent as "traceparent" on every request (the
	 * CLI's, common/trace.h); NULL: none. */
	const char *traceparent;
	long connect_timeout_ms; /* 0: 300 s */
	long timeout_ms;         /* whole request, unless the request says;
	                            0: no limit */
	long idle_timeout_ms;    /* no byte either way for this long ends a
	                            request (a server that accepted and never
	                            answers), unless the request says; 0: no
	                            limit */
	size_t reply_max;        /* 0: CNL_CLIENT_REPLY_MAX_DEFAULT */
};

struct cnl_client;

/*
 * cnl_client_new - a client for @cfg in *@ret.  Returns 0; -EINVAL for a
 * NULL argument, a NULL base, a base of CNL_CLIENT_BASE_MAX bytes or more,
 * or a token over CNL_CLIENT_TOKEN_MAX.
 * Aborts on out-of-memory (util.h).
 */
int cnl_client_new(const struct cnl_client_config *cfg,
                   struct cnl_client **ret);

/* cnl_client_free - close the connection and free; NULL is fine. */
void cnl_client_free(struct cnl_client *cl);

/* One request; zero-initialise and set what applies. */
struct cnl_client_request {
	const char *method; /* "GET", "POST", "PUT", "PATCH", "DELETE" */
	const char *path;   /* after the base: "/v1/projects?limit=10" */
	json_t *json;       /* the body as JSON (not stolen), or NULL */
	const char *body;   /* else a raw body of @body_len bytes, or NULL */
	size_t body_len;
	const char *content_type;    /* of the raw body; NULL: none sent */
	const char *idempotency_key; /* NULL: no Idempotency-Key header */
	long timeout_ms;             /* 0: the client's */
	long idle_timeout_ms;        /* 0: the client's; < 0: none */
	/* A body streamed from a file: @upload_size bytes of @upload_fd
	 * from offset 0 (pread; the offset is left alone). */
	bool upload;
	int upload_fd;
	uint64_t upload_size;
	const char *sha256; /* NULL: no X-Content-SHA256 header */
	/* A 2xx reply streamed into @download_fd (at most @download_max
	 * bytes, 0: no limit); other replies come in memory as usual. */
	bool download;
	int download_fd;
	uint64_t download_max;
	/* A 2xx reply's body handed over as it arrives (chunked or
	 * length-delimited) instead of kept: @on_data returns 0 to go on,
	 * non-zero to end the request (which then returns -ECANCELED). */
	int (*on_data)(void *ud, const char *buf, size_t len);
	void *on_data_ud;
	/* More header lines, "Name: value", after the client's own (a
	 * signed request's X-Amz-Date and Authorization: sigv4.h); NULL
	 * or NULL-terminated.  A line with a control character (a tab
	 * aside), without ": " after an HTTP token, naming a header that
	 * frames the request or that the client writes itself (Host,
	 * Content-Length, Transfer-Encoding, Expect, Connection, Upgrade,
	 * Content-Type, TE, Trailer, Keep-Alive), or an Authorization when
	 * the client has a bearer, fails the request with -EINVAL before
	 * anything is sent. */
	const char *const *headers;
};

/* What came back; free with cnl_client_reply_done(). */
struct cnl_client_reply {
	long status;    /* HTTP status; 0 when no reply came */
	char *body;     /* the bytes, NUL-terminated; owned; NULL on -EIO */
	size_t len;     /* bytes in @body */
	json_t *json;   /* @body parsed when it starts with '{' or '[' */
	bool too_large; /* the reply exceeded the client's limit */
	/* On -EIO: a timeout ended it (CNL_CLIENT_TIMEOUT_*), else 0. */
	int timed_out;
	/* On -EIO: the short reason in libcurl's words ("Couldn't connect
	 * to server"), or "response too large". */
	char error[CNL_CLIENT_ERROR_MAX];
	/* On -EIO, when there is one: the detailed reason, naming host
	 * and port ("Failed to connect to 127.0.0.1 port 1 ..."), else "". */
	char detail[CNL_CLIENT_DETAIL_MAX];
	/* Downloads: whether the body went to the descriptor, how many
	 * bytes, their SHA-256 (hex), and the server's X-Content-SHA256
	 * ("" when it sent none). */
	bool downloaded;
	uint64_t download_len;
	char download_sha256[65];
	char server_sha256[65];
};

/*
 * cnl_client_request - send @rq and fill *@ret (always initialised, so
 * cnl_client_reply_done() is always safe).  Returns 0 when a reply arrived,
 * whatever its status; -EIO when none did (see the header comment; the
 * reasons in ret->error and ret->detail); -ECANCELED when @on_data ended
 * it (ret->status is the reply's); -ENOMEM when the JSON body cannot be
 * encoded; -EINVAL for a NULL argument, method or path, or a bad line in
 * @headers.
 */
int cnl_client_request(struct cnl_client *cl,
                       const struct cnl_client_request *rq,
                       struct cnl_client_reply *ret);

/*
 * cnl_client_send - cnl_client_request() of @method @path with the JSON
 * @body (NULL: none) and the Idempotency-Key @idem (NULL: none), with the
 * client's timeout.  The CLI's form.
 */
int cnl_client_send(struct cnl_client *cl, const char *method, const char *path,
                    json_t *body, const char *idem,
                    struct cnl_client_reply *ret);

/*
 * cnl_client_call - a daemon's form: @method @path with the JSON @body
 * (NULL: none; not stolen) within @timeout_s seconds (0: the client's).
 * Returns the HTTP status (> 0) with the parsed reply in *@ret (NULL when
 * it is not JSON; @ret may be NULL), or -EIO when no reply came (the
 * server is unreachable) or -ENOMEM.  @err gets "METHOD PATH: reason" when
 * no reply came, and "METHOD PATH: STATUS message" (the error reply's
 * message, net/error.h) for a status of 400 or more.
 */
long cnl_client_call(struct cnl_client *cl, const char *method,
                     const char *path, json_t *body, long timeout_s,
                     json_t **ret, char *err, size_t errlen);

/*
 * cnl_client_file_sha256 - the SHA-256 (lower-case hex) of the @size bytes
 * of @fd from offset 0, read in pieces with pread.  0, -EIO on a read error,
 * -ENODATA when the file is shorter than @size.
 */
int cnl_client_file_sha256(int fd, uint64_t size, char ret_hex[65]);

/* cnl_client_sha256 - the SHA-256 of @len bytes at @buf into @ret (32
 * bytes): e.g. the PKCE code challenge of `cnlab login --web`. */
void cnl_client_sha256(const void *buf, size_t len, uint8_t ret[32]);

/* cnl_client_reply_done - free what a reply holds; NULL-safe, repeatable. */
void cnl_client_reply_done(struct cnl_client_reply *r);

/*
 * cnl_client_url_escape - @s percent-encoded for one path segment or
 * query value: everything but A-Z a-z 0-9 - . _ ~ becomes %XX.  Returns a
 * new string to free().
 */
char *cnl_client_url_escape(const char *s);

/*
 * Upgraded connections.  cnl_client_upgrade() opens a connection of its
 * own to the client's server (TLS as for any request), sends
 *   POST <base path><path> HTTP/1.1, Connection: Upgrade, Upgrade: @proto,
 *   the client's bearer token, Content-Length: 0
 * and, once the server answers 101, hands the connection over as a byte
 * stream: a node agent's tunnel to cnlabd.  Its socket is for poll()
 * only: bytes go through read and write, which also carry TLS.
 */
struct cnl_client_stream;

/* 0 with the stream in *@ret; -EIO when no 101 came (@err says what came:
 * the status and the error reply's message, or why none came). */
int cnl_client_upgrade(struct cnl_client *cl, const char *path,
                       const char *proto, struct cnl_client_stream **ret,
                       char *err, size_t errlen);
/*
 * cnl_client_dial - a connection of its own to the client's base (its
 * first address; TLS as for any request) handed over as a byte stream at
 * once, before anything is sent: the caller speaks HTTP on it itself (a
 * follower forwarding a request to the leader, server/forward.c).  0 with
 * the stream in *@ret, or -EIO (-ETIMEDOUT) with @err saying why.
 */
int cnl_client_dial(struct cnl_client *cl, struct cnl_client_stream **ret,
                    char *err, size_t errlen);
/* The socket under the stream, to poll for reading. */
int cnl_client_stream_fd(const struct cnl_client_stream *s);
/* Whether bytes are there to read that a poll of the socket would not
 * show (taken from it already: the rest of a TLS record). */
bool cnl_client_stream_pending(struct cnl_client_stream *s);
/* Up to @n bytes: how many (> 0), 0 at the end, -EAGAIN when none is
 * there now (poll the socket), another negative errno on failure. */
ssize_t cnl_client_stream_read(struct cnl_client_stream *s, char *buf,
                               size_t n);
/* All @n bytes, waiting as needed: 0 or a negative errno. */
int cnl_client_stream_write(struct cnl_client_stream *s, const char *buf,
                            size_t n);
/* Close and free; NULL-safe. */
void cnl_client_stream_free(struct cnl_client_stream *s);

#endif /* CNL_NET_CLIENT_H */
