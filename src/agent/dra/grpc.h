/*
 * grpc.h - a small gRPC server for the kubelet's plugin APIs: unary calls
 * over HTTP/2 without TLS ("h2c" with prior knowledge, as gRPC speaks on a
 * Unix socket), on nghttp2.  The messages stay bytes here: a method's
 * handler decodes its request and encodes its reply (protobuf-c, dra.c).
 *
 * What it does on the wire (gRPC over HTTP/2, PROTOCOL-HTTP2.md):
 *   - a request is a POST whose :path names the method
 *     ("/pluginregistration.Registration/GetInfo"), content-type
 *     application/grpc[+proto], and one length-prefixed message (a flag
 *     byte, 0 for uncompressed, and a 4-byte big-endian length);
 *   - a reply is HEADERS (:status 200, content-type application/grpc),
 *     one length-prefixed message, then trailers with grpc-status 0; an
 *     error is one HEADERS frame ("Trailers-Only") with grpc-status and a
 *     percent-encoded grpc-message;
 *   - an unknown method is UNIMPLEMENTED, a compressed message (we offer
 *     no compression), more or fewer than one message, or a request over
 *     CNL_GRPC_MSG_MAX is INVALID_ARGUMENT / RESOURCE_EXHAUSTED; a method
 *     other than POST or a content type other than gRPC's is refused the
 *     same way, never answered with a reply message.
 *
 * One thread runs the server (cnl_grpc_server_run): it accepts on every
 * socket it listens on and serves each connection's streams in turn, a
 * handler at a time.  A socket is created mode 0600 after any stale file
 * of the same name is removed; its folder's permissions are the caller's
 * (the kubelet's plugin folders are root's).
 */
#ifndef CNL_AGENT_DRA_GRPC_H
#define CNL_AGENT_DRA_GRPC_H

#include <stddef.h>
#include <stdint.h>

/* The largest request message accepted (gRPC's default receive limit). */
#define CNL_GRPC_MSG_MAX (4u << 20)

/* gRPC status codes we answer with. */
enum {
	CNL_GRPC_OK = 0,
	CNL_GRPC_INVALID_ARGUMENT = 3,
	CNL_GRPC_NOT_FOUND = 5,
	CNL_GRPC_RESOURCE_EXHAUSTED = 8,
	CNL_GRPC_FAILED_PRECONDITION = 9,
	CNL_GRPC_UNIMPLEMENTED = 12,
	CNL_GRPC_INTERNAL = 13,
	CNL_GRPC_UNAVAILABLE = 14,
};

/*
 * A method's handler: @req, @len is the request message.  On CNL_GRPC_OK
 * it sets *@resp (malloc'd, freed by the server; NULL with *@resp_len 0
 * for an empty message); else it returns the status code with a message
 * in @msg (@msglen bytes).
 */
typedef int (*cnl_grpc_fn)(void *ud, const uint8_t *req, size_t len,
                           uint8_t **resp, size_t *resp_len, char *msg,
                           size_t msglen);

struct cnl_grpc_method {
	const char *path; /* "/package.Service/Method" */
	cnl_grpc_fn fn;
	void *ud;
};

struct cnl_grpc_server;

/* cnl_grpc_server_new - a server of @n methods (copied; the strings and
 * @ud must outlive it).  Aborts on out-of-memory. */
struct cnl_grpc_server *cnl_grpc_server_new(const struct cnl_grpc_method *m,
                                            int n);

/*
 * cnl_grpc_server_listen - listen on the Unix socket @path too.  Returns
 * 0, or a negative errno with the reason in @err (a path too long for a
 * socket address is -ENAMETOOLONG).
 */
int cnl_grpc_server_listen(struct cnl_grpc_server *s, const char *path,
                           char *err, size_t errlen);

/*
 * cnl_grpc_server_run - serve until @stop_fd is readable (or forever for
 * -1).  Returns 0, or a negative errno when poll() fails.
 */
int cnl_grpc_server_run(struct cnl_grpc_server *s, int stop_fd);

/*
 * cnl_grpc_server_feed - serve one connection whose client sends the @len
 * bytes at @in and then closes its side, on a socket pair, what the server
 * answers read and dropped: the fuzzer's way in (tests/fuzz/fuzz_grpc.c).
 * Returns 0, or a negative errno when the socket pair cannot be made.
 */
int cnl_grpc_server_feed(struct cnl_grpc_server *s, const uint8_t *in,
                         size_t len);

/* cnl_grpc_server_free - close every connection and socket, and unlink
 * the sockets; NULL is fine. */
void cnl_grpc_server_free(struct cnl_grpc_server *s);

#endif /* CNL_AGENT_DRA_GRPC_H */
