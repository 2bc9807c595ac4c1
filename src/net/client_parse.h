/*
 * client_parse.h - the reply parser of the HTTP client (client.c): the
 * status line, header lines and chunk sizes of an HTTP/1.x reply, each
 * checked strictly, so what the server sends is either understood or
 * refused, never guessed at.  Pure functions over one line each (the
 * client cuts the lines), so tests and the fuzz target (tests/fuzz)
 * drive them without a socket.
 *
 * Refused (-EBADMSG): a status line other than "HTTP/1.0" or "HTTP/1.1",
 * one space, three digits, then a space or the end; a header line without
 * a colon, with an empty name, a name with characters outside RFC 9110's
 * token, or a continuation line (obsolete folding); a Content-Length that
 * is not all digits, overflows, or is given twice with different values;
 * a Transfer-Encoding other than "chunked" (with or without "identity");
 * both Transfer-Encoding and Content-Length; a chunk size that is not hex
 * or overflows.
 */
#ifndef CNL_NET_CLIENT_PARSE_H
#define CNL_NET_CLIENT_PARSE_H

#include <stdbool.h>
#include <stdint.h>

/* What the client keeps of a reply head. */
struct cnl_client_head {
	int minor;              /* HTTP/1.<minor> */
	int status;             /* 100..999 */
	int64_t content_length; /* -1: none given */
	bool chunked;           /* Transfer-Encoding: chunked */
	bool close;             /* Connection: close */
	char sha256[65];        /* X-Content-SHA256, "" when none */
};

/* cnl_client_head_init - an empty head (no length, no flags). */
void cnl_client_head_init(struct cnl_client_head *h);

/* cnl_client_status_line - parse @line (no CRLF) into @h: 0 or -EBADMSG. */
int cnl_client_status_line(const char *line, struct cnl_client_head *h);

/* cnl_client_header_line - parse one header @line (no CRLF) into @h:
 * 0 or -EBADMSG. */
int cnl_client_header_line(const char *line, struct cnl_client_head *h);

/* cnl_client_head_has_body - whether a body follows @h (not for 1xx, 204
 * and 304). */
bool cnl_client_head_has_body(const struct cnl_client_head *h);

/* cnl_client_chunk_size - the size on a chunk-size @line (hex, then
 * optional ";extensions"): 0 or -EBADMSG. */
int cnl_client_chunk_size(const char *line, uint64_t *ret);

#endif /* CNL_NET_CLIENT_PARSE_H */
