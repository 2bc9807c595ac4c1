/*
 * client.h - the agent's HTTP client for cnlabd: JSON requests with a
 * bearer token over one kept-alive libcurl handle per client.  A client is
 * used by one thread at a time; the agent gives each of its threads one.
 */
#ifndef CNL_AGENT_CLIENT_H
#define CNL_AGENT_CLIENT_H

#include <stddef.h>

#include <jansson.h>

struct cnl_client;

/*
 * cnl_client_new - a client for @base ("http://127.0.0.1:8080" or https)
 * sending "Authorization: Bearer @token"; @cafile (NULL: system CAs)
 * verifies a TLS server.
 */
int cnl_client_new(const char *base, const char *token, const char *cafile,
                   struct cnl_client **ret);
void cnl_client_free(struct cnl_client *cl);

/*
 * cnl_client_call - @method @path with @body (NULL: none; not stolen),
 * waiting at most @timeout_s.  Returns the HTTP status (> 0) with the
 * reply in *@ret (NULL when it is not JSON; may be NULL), or -EIO when no
 * reply came (the server is unreachable), with the reason in @err.
 */
long cnl_client_call(struct cnl_client *cl, const char *method,
                     const char *path, json_t *body, long timeout_s,
                     json_t **ret, char *err, size_t errlen);

#endif /* CNL_AGENT_CLIENT_H */
