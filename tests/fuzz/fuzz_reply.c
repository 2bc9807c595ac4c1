/*
 * fuzz_reply.c - fuzz target for the HTTP client's reply parser
 * (net/client_parse.h): the input is the bytes a server sends back.  It is
 * cut into lines as the client cuts them (LF, a CR before it dropped) and
 * fed as the client feeds them: the status line, header lines up to the
 * blank one, then, for a chunked reply, each remaining line as a chunk
 * size.  What is accepted must be what the parser promises: a status of
 * 100 to 999 from HTTP/1.0 or 1.1, never both a length and chunked, a
 * length that is -1 or at most 2^62, a SHA-256 of at most 64 characters.
 *
 * Built with libFuzzer (-DCNL_FUZZ=ON) and with replay.c's main(), as
 * fuzz_http.c.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "net/client_parse.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* The next line of @data at *@off into @line (at most @max - 1 bytes,
 * the rest dropped as the client refuses it); false at the end. */
static bool next_line(const uint8_t *data, size_t size, size_t *off, char *line,
                      size_t max)
{
	size_t n = 0;

	if (*off >= size)
		return false;
	while (*off < size && data[*off] != '\n') {
		if (n + 1 < max)
			line[n++] = data[*off] ? (char)data[*off] : ' ';
		(*off)++;
	}
	(*off)++;
	if (n > 0 && line[n - 1] == '\r')
		n--;
	line[n] = '\0';
	return true;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct cnl_client_head h;
	char line[1024];
	size_t off = 0;
	uint64_t chunk;

	cnl_client_head_init(&h);
	if (!next_line(data, size, &off, line, sizeof(line)) ||
	    cnl_client_status_line(line, &h) < 0)
		return 0;
	if (h.status < 100 || h.status > 999 || h.minor < 0 || h.minor > 1)
		abort();
	while (next_line(data, size, &off, line, sizeof(line)) && line[0]) {
		if (cnl_client_header_line(line, &h) < 0)
			return 0;
		if ((h.chunked && h.content_length >= 0) ||
		    h.content_length < -1 ||
		    h.content_length > ((int64_t)1 << 62) ||
		    strlen(h.sha256) > 64)
			abort();
	}
	(void)cnl_client_head_has_body(&h);
	if (!h.chunked)
		return 0;
	while (next_line(data, size, &off, line, sizeof(line)))
		if (cnl_client_chunk_size(line, &chunk) == 0 &&
		    (chunk >> 62) != 0)
			abort();
	return 0;
}
