/*
 * kube.h - a Kubernetes API client on CNLab's HTTP client (client.h):
 * in-cluster configuration, the service account's token read again before
 * every request (a projected token rotates), its CA, JSON in and out, and
 * retries with backoff.
 *
 * In a pod (the defaults): the server is https://$KUBERNETES_SERVICE_HOST:
 * $KUBERNETES_SERVICE_PORT, the token /var/run/secrets/kubernetes.io/
 * serviceaccount/token and the CA ca.crt beside it.  Each may be given
 * instead (tests point the client at a loopback server).
 *
 * Retried, with a backoff that starts at backoff_ms and doubles (with
 * jitter) up to 5 s, at most `retries` times: no reply at all, 429 Too Many
 * Requests, and 500, 502, 503, 504.  A create (POST) retried after a reply
 * that was lost may meet its own object: 409 AlreadyExists is then the
 * caller's to read.  Every other status is returned as it is.
 *
 * A client is used by one thread at a time (its connection is kept for
 * the next request; a watch holds it as long as it lasts): a program that
 * calls the API from several threads opens one client for each.
 */
#ifndef CNL_NET_KUBE_H
#define CNL_NET_KUBE_H

#include <stdbool.h>
#include <stddef.h>

#include <jansson.h>

struct cnl_kube_config {
	const char *server;     /* NULL: in-cluster */
	const char *token_file; /* NULL: the service account's */
	const char *cafile;     /* NULL: the service account's (https) */
	int retries;            /* 0: 5; < 0: none */
	long backoff_ms;        /* 0: 200 */
	long timeout_ms;        /* per request; 0: 30 s */
};

struct cnl_kube;

/* cnl_kube_open - a client for @cfg (NULL: all defaults).  0, or
 * -CNL_ECONFIG with @err saying what is missing (not in a pod and no
 * server given). */
int cnl_kube_open(const struct cnl_kube_config *cfg, struct cnl_kube **ret,
                  char *err, size_t errlen);
void cnl_kube_close(struct cnl_kube *k);

/*
 * cnl_kube_call - @method @path (from the server's root: "/apis/resource.
 * k8s.io/v1/resourceslices") with @body (NULL: none; not stolen) sent as
 * @content_type (NULL: application/json; a PATCH names its kind, e.g.
 * application/merge-patch+json).  Returns the HTTP status with the reply
 * parsed into *@ret (NULL when not JSON; @ret may be NULL), or -EIO when
 * no reply came after the retries.  @err gets "METHOD PATH: STATUS
 * message" (the API's Status message) for a status of 400 or more, or
 * why no reply came.
 */
long cnl_kube_call(struct cnl_kube *k, const char *method, const char *path,
                   json_t *body, const char *content_type, json_t **ret,
                   char *err, size_t errlen);

/*
 * cnl_kube_get_text - GET @path whose reply is text, not JSON (a pod's
 * log): the HTTP status, with a 2xx body into *@ret (malloc'd, NUL after
 * its *@ret_len bytes; NULL otherwise), or -EIO (no reply after the
 * retries) with @err, as cnl_kube_call().
 */
long cnl_kube_get_text(struct cnl_kube *k, const char *path, char **ret,
                       size_t *ret_len, char *err, size_t errlen);

/*
 * A watch: one GET of @path (a collection, with its own query, e.g. a
 * fieldSelector) with watch=1, resourceVersion=*@rv, allowWatchBookmarks
 * and a timeoutSeconds of @timeout_s, read as the stream of JSON lines it
 * is.  Each ADDED, MODIFIED or DELETED event goes to @fn with its type and
 * object; a BOOKMARK only moves *@rv (as every event does, from the
 * object's metadata.resourceVersion), so the next watch resumes after it.
 * @fn returns 0 to go on, non-zero to end the watch.
 *
 * Returns 0 when the server ended the stream (its timeout: watch again
 * from *@rv), -ESTALE when the server says the version is gone (HTTP 410,
 * or an ERROR event with code 410 "Expired"): list again and watch from
 * the list's version; -ECANCELED when @fn ended it; -EIO (no reply, with
 * the usual retries first) or -EPROTO (another status, a broken line)
 * with @err.
 */
typedef int (*cnl_kube_event_fn)(void *ud, const char *type, json_t *object);

int cnl_kube_watch(struct cnl_kube *k, const char *path, char *rv, size_t rvlen,
                   long timeout_s, cnl_kube_event_fn fn, void *ud, char *err,
                   size_t errlen);

/*
 * Exec in a container, as kubectl does it since 1.30: GET .../pods/POD/
 * exec?container=C&command=A&command=B&stdout=true&stderr=true upgraded
 * to a WebSocket (RFC 6455) of subprotocol v5.channel.k8s.io (or v4): each
 * binary message is one channel's, its first byte the channel (0 stdin,
 * 1 stdout, 2 stderr, 3 the end: a v1 Status; 255 (v5) a channel
 * closed).  The command's stdin is closed unless @flags has
 * CNL_KUBE_EXEC_STDIN.  On a connection of its
 * own (cnl_client_dial), so that @k may go on with other requests.
 *
 * cnl_kube_exec_open returns 101 with the exec in *@ret, else the HTTP
 * status (403 when RBAC does not grant pods/exec, 404 no such pod, 400
 * no such container or a pod not running) with @err "GET PATH: STATUS
 * message", or -EIO (no reply) or -EPROTO (not a WebSocket of one of
 * those subprotocols, a Sec-WebSocket-Accept that is not the key's).
 */
struct cnl_kube_exec;

/* The largest message taken (bytes, the channel's byte included). */
#define CNL_KUBE_EXEC_MSG_MAX (1 << 20)

/* The command's stdin is ours (stdin=true): cnl_kube_exec_send(). */
#define CNL_KUBE_EXEC_STDIN 1u

long cnl_kube_exec_open(struct cnl_kube *k, const char *ns, const char *pod,
                        const char *container, const char *const *argv,
                        size_t argc, unsigned flags, struct cnl_kube_exec **ret,
                        char *err, size_t errlen);
/*
 * The next message, waiting up to @wait_ms: 1 with its channel in
 * *@channel and its bytes (without the channel's) in *@data, *@len (valid
 * until the next call); 0 when the server ended the stream (a close
 * frame, or the connection); -EAGAIN when none came in time; -EPROTO (a
 * masked or malformed frame, a message past CNL_KUBE_EXEC_MSG_MAX), or
 * another negative errno.  Pings are answered here.
 */
int cnl_kube_exec_next(struct cnl_kube_exec *x, int wait_ms, int *channel,
                       const char **data, size_t *len);
/* The subprotocol's version agreed (5 or 4). */
int cnl_kube_exec_version(const struct cnl_kube_exec *x);
/* The connection's descriptor, to poll for input; but first
 * cnl_kube_exec_pending(), which says when a frame (or the rest of a TLS
 * record) is there already, and a poll would wait for nothing. */
int cnl_kube_exec_fd(const struct cnl_kube_exec *x);
bool cnl_kube_exec_pending(struct cnl_kube_exec *x);
/* @n bytes to the command's stdin (opened with CNL_KUBE_EXEC_STDIN), as
 * messages of channel 0: 0, or -EIO (the write waits as the client's
 * writes do). */
int cnl_kube_exec_send(struct cnl_kube_exec *x, const void *data, size_t n);
/* The end of the command's stdin: v5's close message for channel 0 (the
 * command reads its end of input); -ENOTSUP on v4 (only closing the
 * stream ends it), -EAGAIN when the server takes no bytes now (not
 * waited for), -EIO. */
int cnl_kube_exec_send_eof(struct cnl_kube_exec *x);
/* Close (a close frame first) and free; NULL-safe. */
void cnl_kube_exec_close(struct cnl_kube_exec *x);

#endif /* CNL_NET_KUBE_H */
