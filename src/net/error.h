/*
 * error.h - the one shape of an error reply in CNLab's HTTP APIs, made in
 * one place and read back in one place:
 *
 *   {"error": {"code": "not_found", "message": "no such path"}}
 *
 * @code is a stable snake_case word that programs may act on ("not_found",
 * "quota_exceeded"); @message is a sentence for people.  The server wrapper
 * (cnl_http_error() in http_server.h) builds every error body with
 * cnl_http_error_body(); the clients (the CLI's exit codes and messages,
 * the node agent's log lines, cnlabd's audit of a refused request) take
 * the two fields apart with cnl_http_error_read().  Needs only jansson, so
 * a client links it without the server's libmicrohttpd.
 */
#ifndef CNL_NET_ERROR_H
#define CNL_NET_ERROR_H

#include <stdbool.h>

#include <jansson.h>

/*
 * cnl_http_error_body - a new {"error": {"code": @code, "message":
 * @message}} object (NULL strings count as ""), or NULL when jansson
 * cannot allocate or a string is not UTF-8.
 */
json_t *cnl_http_error_body(const char *code, const char *message);

/*
 * cnl_http_error_read - whether @body (may be NULL) is an error reply; the
 * "code" and "message" strings, or NULL where one is missing or not a
 * string, in *@ret_code and *@ret_message (each pointer may be NULL; the
 * strings live as long as @body).  Both outputs are set even when the
 * answer is false, so a caller can always fall back on its own text.
 */
bool cnl_http_error_read(const json_t *body, const char **ret_code,
                         const char **ret_message);

#endif /* CNL_NET_ERROR_H */
