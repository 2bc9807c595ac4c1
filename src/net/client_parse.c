/*
 * client_parse.c - the HTTP/1.x reply parser of the client (see
 * client_parse.h): one line at a time, strict.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "net/client_parse.h"

void cnl_client_head_init(struct cnl_client_head *h)
{
	memset(h, 0, sizeof(*h));
	h->content_length = -1;
}

static bool is_digit(char c)
{
	return c >= '0' && c <= '9';
}

int cnl_client_status_line(const char *line, struct cnl_client_head *h)
{
	if (strncmp(line, "HTTP/1.", 7) != 0 ||
	    (line[7] != '0' && line[7] != '1') || line[8] != ' ' ||
	    !is_digit(line[9]) || !is_digit(line[10]) || !is_digit(line[11]) ||
	    (line[12] != ' ' && line[12] != '\0') || line[9] == '0')
		return -EBADMSG;
	h->minor = line[7] - '0';
	h->status =
	    (line[9] - '0') * 100 + (line[10] - '0') * 10 + (line[11] - '0');
	/* HTTP/1.0 closes unless it says otherwise; we never ask it to. */
	if (h->minor == 0)
		h->close = true;
	return 0;
}

/* RFC 9110 token characters. */
static bool is_tchar(char c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
	       is_digit(c) || (c && strchr("!#$%&'*+-.^_`|~", c));
}

/* Whether the comma-separated list @v holds @word (any case). */
static bool list_has(const char *v, const char *word)
{
	size_t wn = strlen(word);

	while (*v) {
		size_t n;

		while (*v == ' ' || *v == '\t' || *v == ',')
			v++;
		n = strcspn(v, ",");
		while (n > 0 && (v[n - 1] == ' ' || v[n - 1] == '\t'))
			n--;
		if (n == wn && strncasecmp(v, word, n) == 0)
			return true;
		v += strcspn(v, ",");
	}
	return false;
}

int cnl_client_header_line(const char *line, struct cnl_client_head *h)
{
	const char *colon = strchr(line, ':'), *v;
	size_t nn, vn;

	if (!colon || colon == line)
		return -EBADMSG;
	nn = (size_t)(colon - line);
	for (size_t i = 0; i < nn; i++)
		if (!is_tchar(line[i]))
			return -EBADMSG;
	v = colon + 1;
	while (*v == ' ' || *v == '\t')
		v++;
	vn = strlen(v);
	while (vn > 0 && (v[vn - 1] == ' ' || v[vn - 1] == '\t'))
		vn--;
	for (size_t i = 0; i < vn; i++)
		if ((unsigned char)v[i] < ' ' && v[i] != '\t')
			return -EBADMSG;
	if (nn == 14 && strncasecmp(line, "Content-Length", nn) == 0) {
		uint64_t n = 0;

		if (vn == 0 || h->chunked)
			return -EBADMSG;
		for (size_t i = 0; i < vn; i++) {
			if (!is_digit(v[i]) || n > (UINT64_C(1) << 62) / 10)
				return -EBADMSG;
			n = n * 10 + (uint64_t)(v[i] - '0');
		}
		if (h->content_length >= 0 && (uint64_t)h->content_length != n)
			return -EBADMSG;
		h->content_length = (int64_t)n;
	} else if (nn == 17 &&
	           strncasecmp(line, "Transfer-Encoding", nn) == 0) {
		char tmp[64];

		if (vn >= sizeof(tmp) || h->content_length >= 0)
			return -EBADMSG;
		memcpy(tmp, v, vn);
		tmp[vn] = '\0';
		/* "chunked", maybe after "identity"; nothing else is ours. */
		if (strcasecmp(tmp, "chunked") != 0 &&
		    strcasecmp(tmp, "identity, chunked") != 0 &&
		    strcasecmp(tmp, "identity,chunked") != 0)
			return -EBADMSG;
		h->chunked = true;
	} else if (nn == 10 && strncasecmp(line, "Connection", nn) == 0) {
		char tmp[128];

		snprintf(tmp, sizeof(tmp), "%.*s", (int)vn, v);
		if (list_has(tmp, "close"))
			h->close = true;
		else if (list_has(tmp, "keep-alive"))
			h->close = false;
	} else if (nn == 16 && strncasecmp(line, "X-Content-SHA256", nn) == 0) {
		snprintf(h->sha256, sizeof(h->sha256), "%.*s",
		         (int)(vn < 64 ? vn : 64), v);
	}
	return 0;
}

bool cnl_client_head_has_body(const struct cnl_client_head *h)
{
	if ((h->status >= 100 && h->status < 200) || h->status == 204 ||
	    h->status == 304)
		return false;
	return h->content_length != 0;
}

int cnl_client_chunk_size(const char *line, uint64_t *ret)
{
	uint64_t n = 0;
	size_t i = 0;

	for (; line[i]; i++) {
		char c = line[i];
		unsigned d;

		if (is_digit(c))
			d = (unsigned)(c - '0');
		else if (c >= 'a' && c <= 'f')
			d = (unsigned)(c - 'a' + 10);
		else if (c >= 'A' && c <= 'F')
			d = (unsigned)(c - 'A' + 10);
		else
			break;
		if (n >> 58)
			return -EBADMSG;
		n = n * 16 + d;
	}
	if (i == 0)
		return -EBADMSG;
	while (line[i] == ' ' || line[i] == '\t')
		i++;
	if (line[i] && line[i] != ';')
		return -EBADMSG;
	*ret = n;
	return 0;
}
