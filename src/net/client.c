/*
 * client.c - CNLab's one HTTP/1.1 client, over plain sockets and mbedTLS
 * (see client.h).
 *
 * Why our own: the CLI is one statically linked executable that starts in
 * well under 2 ms of CPU.  libcurl as Debian builds it drags in gnutls,
 * krb5, ldap, ssh, idn2, psl and nghttp2 (17 ms of dynamic linking per
 * start) for the one protocol we speak: HTTP/1.1 to our own server, JSON
 * in, JSON out, a file up or down, an Upgrade for tunnels.  mbedTLS links
 * statically in a few hundred KiB and needs no dlopen (libssl.a and
 * libcrypto.a would add ~4 MiB and load providers and config files at
 * start).  Nothing about TLS is touched before the first https request.
 *
 * A request, step by step:
 *
 *   url = base + path --parse--> scheme, host, port, target
 *     (only http/https; no userinfo: "http://srv@evil/" is refused, so a
 *      path can never move the bearer token to another host)
 *   connection: the kept one when it was made for the same
 *     scheme://host:port and has not been closed by the server (a
 *     readable idle socket is EOF or junk: it is dropped); else connect
 *     (non-blocking, within the connect timeout) and, for https, the TLS
 *     handshake (CA file or the system bundle; the host name checked, an
 *     IP address against the certificate's IP SANs)
 *   send the head and the body (an upload announces "Expect:
 *     100-continue" and waits a second for the server's word before
 *     sending the file)
 *   read the head: a strict status line and header lines, 1xx skipped
 *   read the body: chunked, Content-Length, or until the server closes;
 *     each piece goes to the sink: the download descriptor or on_data for
 *     a 2xx when asked, else memory up to the limit
 *   keep the connection when the reply was whole and HTTP/1.1 without
 *     "Connection: close"
 *
 * A kept connection the server closed meanwhile fails on the first read;
 * when no byte of a reply came, the request is sent once more on a fresh
 * connection (as libcurl does).
 *
 * Time: every wait is a poll() bounded by the request's deadline (the
 * whole-request timeout) and, once connected, by the idle timeout, which
 * restarts whenever a byte moves either way.  Which ran out is reported.
 *
 * Errors keep libcurl's short reasons ("Couldn't connect to server",
 * "Timeout was reached"...), which users and scripts already know, with a
 * detail naming host and port.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <mbedtls/ctr_drbg.h>
#include <mbedtls/entropy.h>
#include <mbedtls/error.h>
#include <mbedtls/net_sockets.h>
#include <mbedtls/sha256.h>
#include <mbedtls/ssl.h>
#include <mbedtls/x509_crt.h>

#include "common/fs.h"
#include "common/util.h"
#include "net/client.h"
#include "net/client_parse.h"
#include "net/error.h"

#if MBEDTLS_VERSION_NUMBER >= 0x03000000
#define sha_starts mbedtls_sha256_starts
#define sha_update mbedtls_sha256_update
#define sha_finish mbedtls_sha256_finish
#define sha_once   mbedtls_sha256
#else
#define sha_starts mbedtls_sha256_starts_ret
#define sha_update mbedtls_sha256_update_ret
#define sha_finish mbedtls_sha256_finish_ret
#define sha_once   mbedtls_sha256_ret
#endif

/* libcurl's default connect timeout, kept for a config that says 0. */
#define CONNECT_TIMEOUT_DEFAULT_MS 300000L
/* Largest reply head (status line and headers). */
#define HEAD_MAX (64 * 1024)
/* Largest header or chunk-size line. */
#define LINE_MAX_ (16 * 1024)
/* How long an upload waits for "100 Continue" before sending anyway. */
#define EXPECT_WAIT_MS 1000

/* What TLS needs, made on the first https request of a client. */
struct tls {
	mbedtls_entropy_context entropy;
	mbedtls_ctr_drbg_context drbg;
	mbedtls_x509_crt ca;
	mbedtls_ssl_config conf;
};

/* One connection; fd -1 when none. */
struct conn {
	int fd;
	bool tls;
	mbedtls_ssl_context ssl;
	char key[CNL_CLIENT_BASE_MAX + 16]; /* "https://host:port" */
	char in[16384];                     /* read ahead, not yet used */
	size_t in_off, in_n;
	uint64_t moved; /* bytes received, to tell a stale connection */
};

struct cnl_client {
	char *base; /* the base in use (one of @bases), without trailing '/' */
	/* Several replicas' addresses ("http://a:8080,http://b:8080"): a
	 * request that cannot connect to one tries the next, and the one
	 * that answered is used first from then on. */
	char **bases;
	int nbases;
	char *auth; /* "Authorization: Bearer ..." or NULL */
	void (*token_fn)(void *ud, char *buf, size_t len);
	void *token_ud;
	char *cafile;      /* or NULL */
	char *user_agent;  /* or NULL */
	char *traceparent; /* or NULL */
	long connect_timeout_ms;
	long timeout_ms;
	long idle_timeout_ms;
	size_t reply_max;
	struct tls *tls; /* NULL until the first https request */
	struct conn conn;
};

/* The clock of one request. */
struct io {
	int64_t deadline; /* monotonic ms; 0: none */
	long idle_ms;     /* <= 0: none */
	int timed_out;    /* CNL_CLIENT_TIMEOUT_* once one ran out */
	bool connecting;
};

/* What goes wrong, for the reply: libcurl's words. */
struct fail {
	const char *error;
	char detail[CNL_CLIENT_DETAIL_MAX];
};

/* The detail of @f (vsnprintf: truncation is fine, a detail is a hint). */
__attribute__((format(printf, 2, 3))) static void
set_detail(struct fail *f, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(f->detail, sizeof(f->detail), fmt, ap);
	va_end(ap);
}

static int64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Wait for @events on @fd within the request's limits: 0, or -ETIMEDOUT
 * with io->timed_out set, or -EIO. */
static int wait_io(int fd, short events, struct io *io, long cap_ms)
{
	for (;;) {
		int64_t left = -1;
		int which = 0, r;
		struct pollfd p = {fd, events, 0};

		if (io->deadline) {
			left = io->deadline - now_ms();
			if (left < 0)
				left = 0;
			which = io->connecting ? CNL_CLIENT_TIMEOUT_CONNECT
			                       : CNL_CLIENT_TIMEOUT_TOTAL;
		}
		if (!io->connecting && io->idle_ms > 0 &&
		    (left < 0 || io->idle_ms < left)) {
			left = io->idle_ms;
			which = CNL_CLIENT_TIMEOUT_IDLE;
		}
		if (cap_ms >= 0 && (left < 0 || cap_ms < left)) {
			left = cap_ms;
			which = -1;
		}
		r = poll(&p, 1, left > INT32_MAX ? INT32_MAX : (int)left);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0)
			return -EIO;
		if (r > 0)
			return 0;
		if (which == -1)
			return -EAGAIN; /* the caller's own cap */
		io->timed_out = which;
		return -ETIMEDOUT;
	}
}

/* ---- connections ------------------------------------------------------ */

static int bio_send(void *ctx, const unsigned char *buf, size_t n)
{
	struct conn *c = ctx;
	ssize_t w = send(c->fd, buf, n, MSG_NOSIGNAL);

	if (w >= 0)
		return (int)w;
	if (errno == EAGAIN || errno == EINTR)
		return MBEDTLS_ERR_SSL_WANT_WRITE;
	return MBEDTLS_ERR_NET_SEND_FAILED;
}

static int bio_recv(void *ctx, unsigned char *buf, size_t n)
{
	struct conn *c = ctx;
	ssize_t r = recv(c->fd, buf, n, 0);

	if (r >= 0)
		return (int)r;
	if (errno == EAGAIN || errno == EINTR)
		return MBEDTLS_ERR_SSL_WANT_READ;
	return MBEDTLS_ERR_NET_RECV_FAILED;
}

static void conn_close(struct conn *c)
{
	if (c->fd < 0)
		return;
	if (c->tls) {
		mbedtls_ssl_close_notify(&c->ssl);
		mbedtls_ssl_free(&c->ssl);
		c->tls = false;
	}
	close(c->fd);
	c->fd = -1;
	c->key[0] = '\0';
	c->in_off = c->in_n = 0;
}

/* Read up to @n bytes from the socket (or TLS): > 0, 0 at the end,
 * -EAGAIN when none is there now, -EIO on failure. */
static ssize_t conn_recv_now(struct conn *c, char *buf, size_t n, short *want)
{
	*want = POLLIN;
	if (c->tls) {
		int r = mbedtls_ssl_read(&c->ssl, (unsigned char *)buf, n);

		if (r == MBEDTLS_ERR_SSL_WANT_READ)
			return -EAGAIN;
		if (r == MBEDTLS_ERR_SSL_WANT_WRITE) {
			*want = POLLOUT;
			return -EAGAIN;
		}
		if (r == MBEDTLS_ERR_SSL_PEER_CLOSE_NOTIFY)
			return 0;
		return r < 0 ? -EIO : r;
	}
	for (;;) {
		ssize_t r = recv(c->fd, buf, n, 0);

		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0 && errno == EAGAIN)
			return -EAGAIN;
		return r < 0 ? -EIO : r;
	}
}

/* Read some bytes, waiting within @io: > 0, 0 at the end, negative on
 * failure or timeout. */
static ssize_t conn_read(struct conn *c, char *buf, size_t n, struct io *io)
{
	if (c->in_off < c->in_n) {
		size_t k = c->in_n - c->in_off;

		k = k < n ? k : n;
		memcpy(buf, c->in + c->in_off, k);
		c->in_off += k;
		return (ssize_t)k;
	}
	for (;;) {
		short want;
		ssize_t r = conn_recv_now(c, buf, n, &want);
		int w;

		if (r > 0)
			c->moved += (uint64_t)r;
		if (r != -EAGAIN)
			return r;
		if ((w = wait_io(c->fd, want, io, -1)) < 0)
			return w;
	}
}

/* Send all @n bytes within @io: 0 or negative. */
static int conn_write(struct conn *c, const char *buf, size_t n, struct io *io)
{
	while (n > 0) {
		ssize_t w;
		short want = POLLOUT;

		if (c->tls) {
			int r = mbedtls_ssl_write(
			    &c->ssl, (const unsigned char *)buf, n);

			if (r == MBEDTLS_ERR_SSL_WANT_READ)
				want = POLLIN;
			w = r >= 0 ? r
			    : (r == MBEDTLS_ERR_SSL_WANT_READ ||
			       r == MBEDTLS_ERR_SSL_WANT_WRITE)
			        ? -EAGAIN
			        : -EIO;
		} else {
			w = send(c->fd, buf, n, MSG_NOSIGNAL);
			if (w < 0)
				w = errno == EAGAIN || errno == EINTR ? -EAGAIN
				                                      : -EIO;
		}
		if (w == -EAGAIN) {
			int r = wait_io(c->fd, want, io, -1);

			if (r < 0)
				return r;
			continue;
		}
		if (w < 0)
			return (int)w;
		buf += w;
		n -= (size_t)w;
	}
	return 0;
}

/* The next byte-line of the reply (CRLF or LF stripped) into @line;
 * 0, -E2BIG when longer than @max, or a read error (-ENODATA at the end
 * of the stream). */
static int conn_line(struct conn *c, char *line, size_t max, struct io *io)
{
	size_t n = 0;

	for (;;) {
		char *nl;

		if (c->in_off == c->in_n) {
			ssize_t r;

			c->in_off = c->in_n = 0;
			r = conn_read(c, c->in, sizeof(c->in), io);
			if (r == 0)
				return -ENODATA;
			if (r < 0)
				return (int)r;
			c->in_n = (size_t)r;
		}
		nl = memchr(c->in + c->in_off, '\n', c->in_n - c->in_off);
		size_t k = nl ? (size_t)(nl - (c->in + c->in_off)) + 1
		              : c->in_n - c->in_off;

		if (n + k >= max)
			return -E2BIG;
		memcpy(line + n, c->in + c->in_off, k);
		n += k;
		c->in_off += k;
		if (nl)
			break;
	}
	line[--n] = '\0';
	if (n > 0 && line[n - 1] == '\r')
		line[--n] = '\0';
	if (memchr(line, '\0', n))
		return -EBADMSG;
	return 0;
}

/* The TLS settings of @cl, made once: 0, or -EIO with @f set. */
static int tls_setup(struct cnl_client *cl, struct fail *f)
{
	static const char *bundles[] = {
	    "/etc/ssl/certs/ca-certificates.crt",
	    "/etc/pki/tls/certs/ca-bundle.crt",
	    "/etc/ssl/ca-bundle.pem",
	    "/etc/ssl/cert.pem",
	};
	struct tls *t;
	int r = -1;

	if (cl->tls)
		return 0;
	t = cnl_xcalloc(1, sizeof(*t));
	mbedtls_entropy_init(&t->entropy);
	mbedtls_ctr_drbg_init(&t->drbg);
	mbedtls_x509_crt_init(&t->ca);
	mbedtls_ssl_config_init(&t->conf);
	if (mbedtls_ctr_drbg_seed(&t->drbg, mbedtls_entropy_func, &t->entropy,
	                          (const unsigned char *)"cnlab", 5) != 0) {
		f->error = "SSL connect error";
		set_detail(f, "TLS: cannot seed the random generator");
		goto fail;
	}
	if (cl->cafile) {
		r = mbedtls_x509_crt_parse_file(&t->ca, cl->cafile);
	} else {
		for (size_t i = 0; i < sizeof(bundles) / sizeof(*bundles); i++)
			if (access(bundles[i], R_OK) == 0 &&
			    (r = mbedtls_x509_crt_parse_file(&t->ca,
			                                     bundles[i])) >= 0)
				break;
		if (r < 0)
			r = mbedtls_x509_crt_parse_path(&t->ca,
			                                "/etc/ssl/certs");
	}
	/* > 0: some certificates of a bundle did not parse; the rest do. */
	if (r < 0 || t->ca.version == 0) {
		f->error =
		    "Problem with the SSL CA cert (path? access rights?)";
		set_detail(f, "TLS: cannot load the CA certificates from %s",
		           cl->cafile ? cl->cafile : "the system bundle");
		goto fail;
	}
	if (mbedtls_ssl_config_defaults(&t->conf, MBEDTLS_SSL_IS_CLIENT,
	                                MBEDTLS_SSL_TRANSPORT_STREAM,
	                                MBEDTLS_SSL_PRESET_DEFAULT) != 0) {
		f->error = "SSL connect error";
		set_detail(f, "TLS: bad defaults");
		goto fail;
	}
	mbedtls_ssl_conf_authmode(&t->conf, MBEDTLS_SSL_VERIFY_REQUIRED);
	mbedtls_ssl_conf_ca_chain(&t->conf, &t->ca, NULL);
	mbedtls_ssl_conf_rng(&t->conf, mbedtls_ctr_drbg_random, &t->drbg);
	mbedtls_ssl_conf_min_version(&t->conf, MBEDTLS_SSL_MAJOR_VERSION_3,
	                             MBEDTLS_SSL_MINOR_VERSION_3);
	cl->tls = t;
	return 0;
fail:
	mbedtls_ssl_config_free(&t->conf);
	mbedtls_x509_crt_free(&t->ca);
	mbedtls_ctr_drbg_free(&t->drbg);
	mbedtls_entropy_free(&t->entropy);
	free(t);
	return -EIO;
}

static void tls_free(struct tls *t)
{
	if (!t)
		return;
	mbedtls_ssl_config_free(&t->conf);
	mbedtls_x509_crt_free(&t->ca);
	mbedtls_ctr_drbg_free(&t->drbg);
	mbedtls_entropy_free(&t->entropy);
	free(t);
}

/* Whether the peer's certificate names the IP address @host (binary
 * @addr of @alen bytes) in an iPAddress SAN: mbedTLS 2 checks DNS names
 * only. */
static bool cert_has_ip(const mbedtls_x509_crt *crt, const void *addr,
                        size_t alen)
{
	const mbedtls_x509_sequence *s;

	if (!crt)
		return false;
	for (s = &crt->subject_alt_names; s && s->buf.p; s = s->next)
		if ((s->buf.tag & MBEDTLS_ASN1_TAG_VALUE_MASK) ==
		        MBEDTLS_X509_SAN_IP_ADDRESS &&
		    s->buf.len == alen && memcmp(s->buf.p, addr, alen) == 0)
			return true;
	return false;
}

/* The TLS handshake on @c for @host: 0, or -EIO/-ETIMEDOUT with @f. */
static int tls_handshake(struct cnl_client *cl, struct conn *c,
                         const char *host, struct io *io, struct fail *f)
{
	unsigned char ip[16];
	size_t iplen = 0;
	int r;

	if (tls_setup(cl, f) < 0)
		return -EIO;
	if (inet_pton(AF_INET, host, ip) == 1)
		iplen = 4;
	else if (inet_pton(AF_INET6, host, ip) == 1)
		iplen = 16;
	mbedtls_ssl_init(&c->ssl);
	c->tls = true;
	if (mbedtls_ssl_setup(&c->ssl, &cl->tls->conf) != 0 ||
	    mbedtls_ssl_set_hostname(&c->ssl, iplen ? NULL : host) != 0) {
		f->error = "SSL connect error";
		set_detail(f, "TLS: cannot set up");
		return -EIO;
	}
	mbedtls_ssl_set_bio(&c->ssl, c, bio_send, bio_recv, NULL);
	while ((r = mbedtls_ssl_handshake(&c->ssl)) != 0) {
		int w;

		if (r != MBEDTLS_ERR_SSL_WANT_READ &&
		    r != MBEDTLS_ERR_SSL_WANT_WRITE)
			break;
		w = wait_io(c->fd,
		            r == MBEDTLS_ERR_SSL_WANT_READ ? POLLIN : POLLOUT,
		            io, -1);
		if (w < 0) {
			f->error = w == -ETIMEDOUT ? "Timeout was reached"
			                           : "SSL connect error";
			set_detail(f, "TLS handshake with %s timed out", host);
			return w;
		}
	}
	if (r == 0 && iplen &&
	    !cert_has_ip(mbedtls_ssl_get_peer_cert(&c->ssl), ip, iplen)) {
		f->error = "SSL peer certificate or SSH remote key was not OK";
		set_detail(f,
		           "TLS: the certificate of %s does not name that "
		           "address",
		           host);
		return -EIO;
	}
	if (r != 0) {
		uint32_t flags = mbedtls_ssl_get_verify_result(&c->ssl);
		char why[160] = "";

		if (r == MBEDTLS_ERR_X509_CERT_VERIFY_FAILED && flags) {
			mbedtls_x509_crt_verify_info(why, sizeof(why), "",
			                             flags);
			why[strcspn(why, "\n")] = '\0';
			f->error = "SSL peer certificate or SSH remote key was "
			           "not OK";
		} else {
			mbedtls_strerror(r, why, sizeof(why));
			f->error = "SSL connect error";
		}
		set_detail(f, "TLS with %s: %s", host, why);
		return -EIO;
	}
	return 0;
}

/* A parsed URL. */
struct url {
	bool https;
	char host[256];
	char port[8];
	const char *target; /* "/path?query" within the URL; "" means "/" */
	char hostport[300]; /* for the Host header */
};

/* Parse @s: 0, or -EINVAL with @f set. */
static int url_parse(const char *s, struct url *u, struct fail *f)
{
	const char *a, *end, *colon;
	size_t hn;

	memset(u, 0, sizeof(*u));
	if (strncasecmp(s, "http://", 7) == 0) {
		a = s + 7;
	} else if (strncasecmp(s, "https://", 8) == 0) {
		a = s + 8;
		u->https = true;
	} else {
		f->error = strstr(s, "://") ? "Unsupported protocol"
		                            : "URL using bad/illegal format or "
		                              "missing URL";
		set_detail(f, "%.200s", s);
		return -EINVAL;
	}
	end = a + strcspn(a, "/?#");
	u->target = end;
	if (*end == '#')
		u->target = "";
	if (memchr(a, '@', (size_t)(end - a)) || end == a)
		goto bad;
	if (*a == '[') {
		const char *rb = memchr(a, ']', (size_t)(end - a));

		if (!rb)
			goto bad;
		hn = (size_t)(rb - a - 1);
		if (hn == 0 || hn >= sizeof(u->host))
			goto bad;
		memcpy(u->host, a + 1, hn);
		colon = rb + 1 < end && rb[1] == ':' ? rb + 1 : NULL;
		if (!colon && rb + 1 != end)
			goto bad;
	} else {
		colon = memchr(a, ':', (size_t)(end - a));
		hn = (size_t)((colon ? colon : end) - a);
		if (hn == 0 || hn >= sizeof(u->host))
			goto bad;
		memcpy(u->host, a, hn);
		for (size_t i = 0; i < hn; i++)
			if (!strchr("abcdefghijklmnopqrstuvwxyz"
			            "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.-_",
			            u->host[i]))
				goto bad;
	}
	if (colon) {
		size_t pn = (size_t)(end - colon - 1);
		unsigned long p = 0;

		if (pn == 0 || pn > 5)
			goto bad;
		for (size_t i = 0; i < pn; i++) {
			if (colon[1 + i] < '0' || colon[1 + i] > '9')
				goto bad;
			p = p * 10 + (unsigned long)(colon[1 + i] - '0');
		}
		if (p == 0 || p > 65535)
			goto bad;
		snprintf(u->port, sizeof(u->port), "%lu", p);
	} else {
		snprintf(u->port, sizeof(u->port), "%s",
		         u->https ? "443" : "80");
	}
	snprintf(u->hostport, sizeof(u->hostport), "%.*s", (int)(end - a), a);
	for (const char *t = u->target; *t; t++)
		if ((unsigned char)*t <= ' ' || *t == 0x7f)
			goto bad;
	return 0;
bad:
	f->error = "URL using bad/illegal format or missing URL";
	set_detail(f, "%.200s", s);
	return -EINVAL;
}

/* Connect @c to @u (TLS included): 0, or negative with @f set. */
static int conn_open(struct cnl_client *cl, struct conn *c, const struct url *u,
                     struct io *io, struct fail *f)
{
	struct addrinfo hints = {.ai_socktype = SOCK_STREAM,
	                         .ai_flags = AI_ADDRCONFIG};
	struct addrinfo *res = NULL, *ai;
	int r, err = ECONNREFUSED;
	int64_t t0 = now_ms();

	unsigned char lit[16];

	/* An address literal needs no look-up (nor AI_ADDRCONFIG's netlink
	 * query). */
	if (inet_pton(AF_INET, u->host, lit) == 1 ||
	    inet_pton(AF_INET6, u->host, lit) == 1)
		hints.ai_flags = AI_NUMERICHOST;
	r = getaddrinfo(u->host, u->port, &hints, &res);
	if (r != 0) {
		f->error = "Couldn't resolve host name";
		set_detail(f, "Could not resolve host: %s", u->host);
		return -EIO;
	}
	io->connecting = true;
	for (ai = res; ai; ai = ai->ai_next) {
		int fd = socket(ai->ai_family,
		                ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC,
		                ai->ai_protocol);
		socklen_t el = sizeof(err);

		if (fd < 0) {
			err = errno;
			continue;
		}
		if (connect(fd, ai->ai_addr, ai->ai_addrlen) == 0 ||
		    errno == EINPROGRESS) {
			r = wait_io(fd, POLLOUT, io, -1);
			if (r == 0 &&
			    getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &el) ==
			        0 &&
			    err == 0) {
				c->fd = fd;
				break;
			}
			if (r == -ETIMEDOUT) {
				close(fd);
				freeaddrinfo(res);
				io->connecting = false;
				f->error = "Timeout was reached";
				set_detail(f,
				           "Failed to connect to %s port %s "
				           "after %lld ms: Timeout was reached",
				           u->host, u->port,
				           (long long)(now_ms() - t0));
				return -ETIMEDOUT;
			}
		} else {
			err = errno;
		}
		close(fd);
	}
	freeaddrinfo(res);
	io->connecting = false;
	if (c->fd < 0) {
		f->error = "Couldn't connect to server";
		set_detail(f,
		           "Failed to connect to %s port %s after %lld ms: %s",
		           u->host, u->port, (long long)(now_ms() - t0),
		           strerror(err));
		return -EIO;
	}
	setsockopt(c->fd, IPPROTO_TCP, TCP_NODELAY, &(int){1}, sizeof(int));
	c->moved = 0;
	c->in_off = c->in_n = 0;
	if (u->https && (r = tls_handshake(cl, c, u->host, io, f)) < 0) {
		conn_close(c);
		return r;
	}
	snprintf(c->key, sizeof(c->key), "%s://%s:%s",
	         u->https ? "https" : "http", u->host, u->port);
	return 0;
}

/* Whether a kept connection still looks usable: nothing readable (a
 * server that closed it, or sent something unasked, makes it readable). */
static bool conn_idle_ok(struct conn *c)
{
	struct pollfd p = {c->fd, POLLIN, 0};

	if (c->in_off < c->in_n)
		return false;
	if (c->tls && mbedtls_ssl_get_bytes_avail(&c->ssl) > 0)
		return false;
	return poll(&p, 1, 0) == 0;
}

/* ---- the reply --------------------------------------------------------- */

/* Where the body goes. */
struct sink {
	const struct cnl_client_request *rq;
	size_t max;
	char *p;
	size_t n;
	bool too_large;
	bool write_failed;
	bool to_fd;   /* download of a 2xx */
	bool to_user; /* on_data of a 2xx */
	bool cancelled;
	uint64_t written;
	mbedtls_sha256_context sha;
};

/* Take @n bytes of the body: 0, or -EFBIG/-EIO/-ECANCELED. */
static int sink_put(struct sink *s, const char *data, size_t n)
{
	if (n == 0)
		return 0;
	if (s->to_user) {
		if (s->rq->on_data(s->rq->on_data_ud, data, n) != 0) {
			s->cancelled = true;
			return -ECANCELED;
		}
		return 0;
	}
	if (s->to_fd) {
		if (s->rq->download_max &&
		    n > s->rq->download_max - s->written) {
			s->too_large = true;
			return -EFBIG;
		}
		if (cnl_write_all(s->rq->download_fd, data, n) < 0) {
			s->write_failed = true;
			return -EIO;
		}
		sha_update(&s->sha, (const unsigned char *)data, n);
		s->written += n;
		return 0;
	}
	if (n > s->max - s->n) {
		s->too_large = true;
		return -EFBIG;
	}
	s->p = cnl_xrealloc(s->p, s->n + n + 1);
	memcpy(s->p + s->n, data, n);
	s->n += n;
	s->p[s->n] = '\0';
	return 0;
}

/* Read the reply head into @h: 0, or -EBADMSG, -E2BIG, -ENODATA, or an
 * I/O error. */
static int read_head(struct conn *c, struct io *io, struct cnl_client_head *h)
{
	char *line = cnl_xmalloc(LINE_MAX_);
	size_t total = 0;
	int r;

	cnl_client_head_init(h);
	if ((r = conn_line(c, line, LINE_MAX_, io)) < 0)
		goto out;
	total += strlen(line);
	if ((r = cnl_client_status_line(line, h)) < 0)
		goto out;
	for (;;) {
		if ((r = conn_line(c, line, LINE_MAX_, io)) < 0) {
			if (r == -ENODATA)
				r = -EBADMSG; /* cut inside the head */
			goto out;
		}
		if (!line[0])
			break;
		total += strlen(line);
		if (total > HEAD_MAX) {
			r = -E2BIG;
			goto out;
		}
		if ((r = cnl_client_header_line(line, h)) < 0)
			goto out;
	}
	r = 0;
out:
	free(line);
	return r;
}

/* Read the body described by @h into @s: 0 once whole, else negative. */
static int read_body(struct conn *c, struct io *io,
                     const struct cnl_client_head *h, struct sink *s)
{
	char *buf;
	int r = 0;

	if (!cnl_client_head_has_body(h))
		return 0;
	buf = cnl_xmalloc(LINE_MAX_);
	if (h->chunked) {
		for (;;) {
			uint64_t left;

			if ((r = conn_line(c, buf, LINE_MAX_, io)) < 0)
				break;
			if ((r = cnl_client_chunk_size(buf, &left)) < 0)
				break;
			if (left == 0) {
				/* Trailers, up to the blank line. */
				while ((r = conn_line(c, buf, LINE_MAX_, io)) ==
				           0 &&
				       buf[0])
					;
				break;
			}
			while (left > 0) {
				ssize_t k = conn_read(
				    c, buf,
				    left < LINE_MAX_ ? (size_t)left : LINE_MAX_,
				    io);

				if (k <= 0) {
					r = k == 0 ? -ENODATA : (int)k;
					goto out;
				}
				left -= (uint64_t)k;
				if ((r = sink_put(s, buf, (size_t)k)) < 0)
					goto out;
			}
			if ((r = conn_line(c, buf, LINE_MAX_, io)) < 0)
				break;
			if (buf[0]) {
				r = -EBADMSG;
				break;
			}
		}
	} else {
		uint64_t left = (uint64_t)h->content_length;

		while (h->content_length < 0 || left > 0) {
			size_t want = LINE_MAX_;
			ssize_t k;

			if (h->content_length >= 0 && left < want)
				want = (size_t)left;
			k = conn_read(c, buf, want, io);
			if (k == 0 && h->content_length < 0)
				break; /* delimited by the close */
			if (k <= 0) {
				r = k == 0 ? -ENODATA : (int)k;
				goto out;
			}
			left -= (uint64_t)k;
			if ((r = sink_put(s, buf, (size_t)k)) < 0)
				goto out;
		}
	}
out:
	free(buf);
	return r;
}

/* ---- requests ------------------------------------------------------------ */

/* SHA-256 of @len bytes at @buf into @ret. */
void cnl_client_sha256(const void *buf, size_t len, uint8_t ret[32])
{
	if (sha_once(buf, len, ret, 0) != 0)
		abort(); /* cannot fail for SHA-256 */
}

int cnl_client_file_sha256(int fd, uint64_t size, char ret_hex[65])
{
	unsigned char md[32];
	mbedtls_sha256_context ctx;
	char *buf = cnl_xmalloc(1 << 16);
	uint64_t off = 0;
	int r = 0;

	mbedtls_sha256_init(&ctx);
	sha_starts(&ctx, 0);
	while (off < size) {
		size_t want = size - off < (1 << 16) ? (size_t)(size - off)
		                                     : (size_t)1 << 16;
		ssize_t got = pread(fd, buf, want, (off_t)off);

		if (got < 0 && errno == EINTR)
			continue;
		if (got <= 0) {
			r = got < 0 ? -EIO : -ENODATA;
			break;
		}
		sha_update(&ctx, (const unsigned char *)buf, (size_t)got);
		off += (uint64_t)got;
	}
	if (r == 0) {
		sha_finish(&ctx, md);
		cnl_hex(md, sizeof(md), ret_hex);
	}
	mbedtls_sha256_free(&ctx);
	free(buf);
	return r;
}

/* The bearer token of the next request (malloc'd), or NULL. */
static char *auth_token(struct cnl_client *cl)
{
	char tok[CNL_CLIENT_TOKEN_MAX + 1];

	if (!cl->token_fn)
		return cl->auth ? cnl_xstrdup(cl->auth) : NULL;
	tok[0] = '\0';
	cl->token_fn(cl->token_ud, tok, sizeof(tok));
	if (!tok[0])
		return NULL;
	char *t = cnl_xstrdup(tok);

	explicit_bzero(tok, sizeof(tok));
	return t;
}

static void secret_free(char *s)
{
	if (s) {
		explicit_bzero(s, strlen(s));
		free(s);
	}
}

static char *dup_or_null(const char *s)
{
	return s && *s ? cnl_xstrdup(s) : NULL;
}

/* A list of http(s) URLs separated by commas is several bases; anything
 * else (one URL, "", a URL with a comma in its path) is one. */
static void split_bases(struct cnl_client *cl, const char *base)
{
	const char *p = base;
	int n = 1;

	for (const char *c = base; *c; c++)
		n += *c == ',';
	if (n > 1) {
		for (const char *c = base;; c = strchr(c, ',') + 1) {
			if (strncmp(c, "http://", 7) != 0 &&
			    strncmp(c, "https://", 8) != 0) {
				n = 1;
				break;
			}
			if (!strchr(c, ','))
				break;
		}
	}
	cl->bases = cnl_xcalloc((size_t)n, sizeof(*cl->bases));
	cl->nbases = n;
	if (n == 1) {
		cl->bases[0] = cnl_xstrdup(base);
		return;
	}
	for (int i = 0; i < n; i++) {
		const char *e = strchr(p, ',');
		size_t len = e ? (size_t)(e - p) : strlen(p);

		cl->bases[i] = cnl_xmalloc(len + 1);
		memcpy(cl->bases[i], p, len);
		cl->bases[i][len] = '\0';
		p = e ? e + 1 : p + len;
	}
}

int cnl_client_new(const struct cnl_client_config *cfg, struct cnl_client **ret)
{
	struct cnl_client *cl;
	size_t n;

	if (!cfg || !ret || !cfg->base)
		return -EINVAL;
	if (strlen(cfg->base) >= CNL_CLIENT_BASE_MAX ||
	    (cfg->token && strnlen(cfg->token, CNL_CLIENT_TOKEN_MAX + 1) >
	                       CNL_CLIENT_TOKEN_MAX))
		return -EINVAL;
	cl = cnl_xcalloc(1, sizeof(*cl));
	cl->conn.fd = -1;
	split_bases(cl, cfg->base);
	for (int i = 0; i < cl->nbases; i++) {
		n = strlen(cl->bases[i]);
		while (n > 0 && cl->bases[i][n - 1] == '/')
			cl->bases[i][--n] = '\0';
	}
	cl->base = cl->bases[0];
	cl->auth = dup_or_null(cfg->token);
	cl->token_fn = cfg->token_fn;
	cl->token_ud = cfg->token_ud;
	cl->cafile = dup_or_null(cfg->cafile);
	cl->user_agent = dup_or_null(cfg->user_agent);
	cl->traceparent = dup_or_null(cfg->traceparent);
	cl->connect_timeout_ms = cfg->connect_timeout_ms;
	cl->timeout_ms = cfg->timeout_ms;
	cl->idle_timeout_ms = cfg->idle_timeout_ms;
	cl->reply_max =
	    cfg->reply_max ? cfg->reply_max : CNL_CLIENT_REPLY_MAX_DEFAULT;
	*ret = cl;
	return 0;
}

void cnl_client_free(struct cnl_client *cl)
{
	if (!cl)
		return;
	conn_close(&cl->conn);
	tls_free(cl->tls);
	for (int i = 0; i < cl->nbases; i++)
		free(cl->bases[i]);
	free(cl->bases);
	secret_free(cl->auth);
	free(cl->cafile);
	free(cl->user_agent);
	free(cl->traceparent);
	free(cl);
}

void cnl_client_reply_done(struct cnl_client_reply *r)
{
	if (!r)
		return;
	free(r->body);
	json_decref(r->json);
	r->body = NULL;
	r->json = NULL;
}

char *cnl_client_url_escape(const char *s)
{
	static const char hex[] = "0123456789ABCDEF";
	char *out = cnl_xmalloc(strlen(s) * 3 + 1), *o = out;

	for (; *s; s++) {
		unsigned char ch = (unsigned char)*s;

		if ((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
		    (ch >= '0' && ch <= '9') || strchr("-._~", ch)) {
			*o++ = (char)ch;
		} else {
			*o++ = '%';
			*o++ = hex[ch >> 4];
			*o++ = hex[ch & 15];
		}
	}
	*o = '\0';
	return out;
}

/* A growing string for the request head. */
struct str {
	char *p;
	size_t n, cap;
};

static void str_add(struct str *s, const char *a, size_t n)
{
	if (s->n + n + 1 > s->cap) {
		s->cap = (s->n + n + 1) * 2;
		s->p = cnl_xrealloc(s->p, s->cap);
	}
	memcpy(s->p + s->n, a, n);
	s->n += n;
	s->p[s->n] = '\0';
}

static void str_cat(struct str *s, const char *a)
{
	str_add(s, a, strlen(a));
}

/* Header lines may not carry CR or LF (a header injected through a
 * key, a token or a content type). */
static bool header_safe(const char *v)
{
	return v && !v[strcspn(v, "\r\n")];
}

/* A caller's header line: an HTTP token, ": ", a value without control
 * characters (a tab aside); none of the headers that frame the request
 * or that the client writes itself (Content-Type: the request's
 * content_type), and no Authorization when the client has its bearer. */
static bool extra_header_ok(const struct cnl_client *cl, const char *l)
{
	static const char *const own[] = {"Host",
	                                  "Content-Length",
	                                  "Transfer-Encoding",
	                                  "Expect",
	                                  "Connection",
	                                  "Upgrade",
	                                  "Content-Type",
	                                  "TE",
	                                  "Trailer",
	                                  "Keep-Alive",
	                                  NULL};
	size_t n = strcspn(l, ":");

	if (!header_safe(l) || n == 0 || l[n] != ':' || l[n + 1] != ' ')
		return false;
	for (size_t i = 0; i < n; i++) {
		unsigned char c = (unsigned char)l[i];

		if (c <= ' ' || c >= 0x7f || strchr("\"(),/;<=>?@[\\]{}", c))
			return false;
	}
	for (const char *v = l + n + 2; *v; v++)
		if (((unsigned char)*v < ' ' && *v != '\t') || *v == 0x7f)
			return false;
	for (int i = 0; own[i]; i++)
		if (strlen(own[i]) == n && strncasecmp(l, own[i], n) == 0)
			return false;
	if ((cl->auth || cl->token_fn) && n == 13 &&
	    strncasecmp(l, "Authorization", 13) == 0)
		return false;
	return true;
}

/* Send the upload's bytes. */
static int send_file(struct conn *c, const struct cnl_client_request *rq,
                     struct io *io)
{
	char *buf = cnl_xmalloc(1 << 16);
	uint64_t off = 0;
	int r = 0;

	while (off < rq->upload_size) {
		size_t want = rq->upload_size - off < (1 << 16)
		                  ? (size_t)(rq->upload_size - off)
		                  : (size_t)1 << 16;
		ssize_t got = pread(rq->upload_fd, buf, want, (off_t)off);

		if (got < 0 && errno == EINTR)
			continue;
		if (got <= 0) {
			r = -ENODATA;
			break;
		}
		if ((r = conn_write(c, buf, (size_t)got, io)) < 0)
			break;
		off += (uint64_t)got;
	}
	free(buf);
	return r;
}

/* Why a reply could not be read, in libcurl's words. */
static void read_failed(int r, struct conn *c, uint64_t moved0, struct fail *f,
                        const struct url *u)
{
	if (r == -ETIMEDOUT)
		f->error = "Timeout was reached";
	else if (r == -EBADMSG || r == -E2BIG)
		f->error = "Weird server reply";
	else if (r == -ENODATA && c->moved == moved0)
		f->error = "Server returned nothing (no headers, no data)";
	else if (r == -ENODATA)
		f->error = "Transferred a partial file";
	else
		f->error = "Failure when receiving data from the peer";
	set_detail(f, "%s from %s port %s", f->error, u->host, u->port);
}

/*
 * One try of @rq on @c: 0 with the reply's head in *@h and the body in
 * @s, -EAGAIN when a kept connection turned out stale before any byte of
 * a reply came (the caller tries once more on a new one), else negative
 * with @f set.
 */
static int attempt(struct cnl_client *cl, struct conn *c, const struct url *u,
                   const char *head, size_t head_n, const char *body,
                   size_t body_n, const struct cnl_client_request *rq,
                   struct io *io, struct cnl_client_head *h, struct sink *s,
                   bool reused, struct fail *f)
{
	uint64_t moved0 = c->moved;
	bool body_sent = !rq->upload;
	int r;

	if ((r = conn_write(c, head, head_n, io)) < 0 ||
	    (body_n && (r = conn_write(c, body, body_n, io)) < 0)) {
		if (reused && r != -ETIMEDOUT)
			return -EAGAIN;
		f->error = r == -ETIMEDOUT ? "Timeout was reached"
		                           : "Failed sending data to the peer";
		set_detail(f, "%s to %s port %s", f->error, u->host, u->port);
		return r;
	}
	if (rq->upload) {
		/* "Expect: 100-continue": a refusal from the headers comes
		 * before the file; a server silent for a second gets it. */
		r = wait_io(c->fd, POLLIN, io, EXPECT_WAIT_MS);
		if (r == -EAGAIN) {
			r = send_file(c, rq, io);
			body_sent = true;
		}
		if (r < 0) {
			f->error = r == -ETIMEDOUT
			               ? "Timeout was reached"
			               : "Failed sending data to the peer";
			set_detail(f, "%s to %s port %s", f->error, u->host,
			           u->port);
			return r;
		}
	}
	for (;;) {
		r = read_head(c, io, h);
		if (r < 0) {
			if (reused && c->moved == moved0 &&
			    (r == -ENODATA || r == -EIO))
				return -EAGAIN;
			read_failed(r, c, moved0, f, u);
			return r;
		}
		if (h->status == 100 && !body_sent) {
			if ((r = send_file(c, rq, io)) < 0) {
				f->error =
				    r == -ETIMEDOUT
				        ? "Timeout was reached"
				        : "Failed sending data to the peer";
				set_detail(f, "%s to %s port %s", f->error,
				           u->host, u->port);
				return r;
			}
			body_sent = true;
			continue;
		}
		if (h->status >= 100 && h->status < 200 && h->status != 101)
			continue;
		break;
	}
	if (!body_sent)
		h->close = true; /* the file is still owed: start afresh */
	if (h->status == 101) {
		f->error = "Weird server reply";
		set_detail(f, "an unasked-for 101 from %s port %s", u->host,
		           u->port);
		return -EBADMSG;
	}
	if (h->status >= 200 && h->status < 300) {
		if (rq->download) {
			s->to_fd = true;
			if (rq->download_max && h->content_length >= 0 &&
			    (uint64_t)h->content_length > rq->download_max)
				s->too_large = true;
		} else if (rq->on_data) {
			s->to_user = true;
		}
	}
	if (!s->to_fd && !s->to_user && h->content_length >= 0 &&
	    (uint64_t)h->content_length > s->max)
		s->too_large = true;
	if (s->too_large) {
		f->error = "Maximum file size exceeded";
		return -EFBIG;
	}
	r = read_body(c, io, h, s);
	if (r < 0 && r != -EFBIG && r != -ECANCELED) {
		if (s->write_failed)
			f->error = "cannot write the download";
		else
			read_failed(r, c, moved0, f, u);
	}
	return r;
}

/* Fill @ret for a request that got no reply; returns -EIO (or @rc). */
static int no_reply(struct cnl_client_reply *ret, struct sink *s,
                    const struct fail *f, int timed_out, int rc)
{
	ret->too_large = s->too_large;
	ret->timed_out = timed_out;
	snprintf(ret->error, sizeof(ret->error), "%s",
	         s->too_large      ? "response too large"
	         : s->write_failed ? "cannot write the download"
	         : f->error        ? f->error
	                           : "Failure when receiving data from the "
	                             "peer");
	snprintf(ret->detail, sizeof(ret->detail), "%s",
	         s->too_large || s->write_failed ? "" : f->detail);
	free(s->p);
	s->p = NULL;
	return rc;
}

/* The head of @rq for @u into @hd. */
static void build_head(struct cnl_client *cl,
                       const struct cnl_client_request *rq, const struct url *u,
                       size_t body_n, bool json, struct str *hd)
{
	char num[32];
	char *tok = auth_token(cl);

	str_cat(hd, rq->method);
	str_cat(hd, " ");
	str_cat(hd, *u->target == '/' ? u->target : "/");
	if (*u->target == '?')
		str_cat(hd, u->target);
	str_cat(hd, " HTTP/1.1\r\nHost: ");
	str_cat(hd, u->hostport);
	str_cat(hd, "\r\n");
	if (tok && header_safe(tok)) {
		str_cat(hd, "Authorization: Bearer ");
		str_cat(hd, tok);
		str_cat(hd, "\r\n");
	}
	secret_free(tok);
	str_cat(hd, "Accept: application/json\r\n");
	if (cl->user_agent && header_safe(cl->user_agent)) {
		str_cat(hd, "User-Agent: ");
		str_cat(hd, cl->user_agent);
		str_cat(hd, "\r\n");
	}
	if (cl->traceparent && header_safe(cl->traceparent)) {
		str_cat(hd, "traceparent: ");
		str_cat(hd, cl->traceparent);
		str_cat(hd, "\r\n");
	}
	if (rq->sha256 && header_safe(rq->sha256)) {
		str_cat(hd, "X-Content-SHA256: ");
		str_cat(hd, rq->sha256);
		str_cat(hd, "\r\n");
	}
	if (rq->idempotency_key && header_safe(rq->idempotency_key)) {
		str_cat(hd, "Idempotency-Key: ");
		str_cat(hd, rq->idempotency_key);
		str_cat(hd, "\r\n");
	}
	for (const char *const *l = rq->headers; l && *l; l++) {
		str_cat(hd, *l); /* checked: extra_header_ok() */
		str_cat(hd, "\r\n");
	}
	if (rq->upload) {
		snprintf(num, sizeof(num), "%llu",
		         (unsigned long long)rq->upload_size);
		str_cat(hd, "Content-Type: application/octet-stream\r\n"
		            "Expect: 100-continue\r\nContent-Length: ");
		str_cat(hd, num);
		str_cat(hd, "\r\n");
	} else if (json || (rq->body && !rq->json) ||
	           strcmp(rq->method, "GET") != 0) {
		if (json) {
			str_cat(hd, "Content-Type: application/json\r\n");
		} else if (rq->content_type && header_safe(rq->content_type)) {
			str_cat(hd, "Content-Type: ");
			str_cat(hd, rq->content_type);
			str_cat(hd, "\r\n");
		}
		snprintf(num, sizeof(num), "%zu", body_n);
		str_cat(hd, "Content-Length: ");
		str_cat(hd, num);
		str_cat(hd, "\r\n");
	}
	str_cat(hd, "\r\n");
}

static int request_one(struct cnl_client *cl,
                       const struct cnl_client_request *rq,
                       struct cnl_client_reply *ret, bool *ret_unconnected);

/* A replica that is not the leader said so (503, error code
 * "not_leader"): it did nothing, and another address may lead. */
static bool not_leader(const struct cnl_client_reply *r)
{
	json_t *e;

	if (r->status != 503 || !r->json)
		return false;
	e = json_object_get(json_object_get(r->json, "error"), "code");
	return json_is_string(e) &&
	       strcmp(json_string_value(e), "not_leader") == 0;
}

/*
 * Over several bases: a request that could not connect (nothing was
 * sent: safe for any method), or that a standby refused (503
 * "not_leader": it did nothing), goes to the next, each tried once; the
 * one that answered stays first.  A body read from a descriptor is sent
 * from its start by each try (upload_fd is read from offset 0 by
 * pread).
 */
int cnl_client_request(struct cnl_client *cl,
                       const struct cnl_client_request *rq,
                       struct cnl_client_reply *ret)
{
	int first, r = -EINVAL;

	if (!cl || cl->nbases <= 1)
		return request_one(cl, rq, ret, NULL);
	first = 0;
	for (int i = 0; i < cl->nbases; i++)
		if (cl->bases[i] == cl->base)
			first = i;
	for (int k = 0; k < cl->nbases; k++) {
		bool unconnected = false;
		int i = (first + k) % cl->nbases;

		if (k > 0)
			cnl_client_reply_done(ret);
		if (cl->base != cl->bases[i]) {
			conn_close(&cl->conn);
			cl->base = cl->bases[i];
		}
		r = request_one(cl, rq, ret, &unconnected);
		if (!unconnected && !not_leader(ret))
			break;
	}
	return r;
}

static int request_one(struct cnl_client *cl,
                       const struct cnl_client_request *rq,
                       struct cnl_client_reply *ret, bool *ret_unconnected)
{
	_cleanup_free_ char *urlbuf = NULL, *text = NULL;
	struct str hd = {0};
	struct sink s = {0};
	struct fail f = {0};
	struct io io = {0};
	struct cnl_client_head h;
	struct url u;
	const char *body = NULL;
	size_t body_n = 0, n;
	long timeout_ms;
	bool json = false;
	int r;

	if (!ret)
		return -EINVAL;
	memset(ret, 0, sizeof(*ret));
	if (!cl || !rq || !rq->method || !rq->path)
		return -EINVAL;
	for (const char *const *l = rq->headers; l && *l; l++)
		if (!extra_header_ok(cl, *l)) {
			snprintf(ret->error, sizeof(ret->error),
			         "bad header line (want \"Name: value\", no "
			         "CR or LF)");
			return -EINVAL;
		}
	s.rq = rq;
	s.max = cl->reply_max;
	n = strlen(cl->base) + strlen(rq->path) + 1;
	urlbuf = cnl_xmalloc(n);
	snprintf(urlbuf, n, "%s%s", cl->base, rq->path);
	if (rq->json && !(text = json_dumps(rq->json, JSON_COMPACT))) {
		snprintf(ret->error, sizeof(ret->error),
		         "cannot encode the request");
		return -ENOMEM;
	}
	if (!header_safe(rq->method) || strchr(rq->method, ' ') ||
	    !*rq->method || url_parse(urlbuf, &u, &f) < 0) {
		if (!f.error)
			f.error = "URL using bad/illegal format or missing URL";
		return no_reply(ret, &s, &f, 0, -EIO);
	}
	if (rq->upload) {
		/* the file */
	} else if (text) {
		body = text;
		body_n = strlen(text);
		json = true;
	} else if (rq->body) {
		body = rq->body;
		body_n = rq->body_len;
	} else if (strcmp(rq->method, "GET") != 0) {
		body = "{}";
		body_n = 2;
		json = true;
	}
	build_head(cl, rq, &u, body_n, json, &hd);

	timeout_ms = rq->timeout_ms > 0 ? rq->timeout_ms : cl->timeout_ms;
	io.idle_ms =
	    rq->idle_timeout_ms ? rq->idle_timeout_ms : cl->idle_timeout_ms;
	if (rq->download)
		mbedtls_sha256_init(&s.sha), sha_starts(&s.sha, 0);

	for (int tries = 0;; tries++) {
		struct conn *c = &cl->conn;
		char key[sizeof(c->key)];
		bool reused = false;
		long cms = cl->connect_timeout_ms > 0
		               ? cl->connect_timeout_ms
		               : CONNECT_TIMEOUT_DEFAULT_MS;
		int64_t t0 = now_ms();

		snprintf(key, sizeof(key), "%s://%s:%s",
		         u.https ? "https" : "http", u.host, u.port);
		if (c->fd >= 0 &&
		    (strcmp(c->key, key) != 0 || !conn_idle_ok(c)))
			conn_close(c);
		if (c->fd >= 0) {
			reused = true;
		} else {
			io.deadline = t0 + (timeout_ms > 0 && timeout_ms < cms
			                        ? timeout_ms
			                        : cms);
			r = conn_open(cl, c, &u, &io, &f);
			if (r < 0) {
				/* Not connected yet: the connect timeout,
				 * even when the whole limit was shorter. */
				int to = io.timed_out;

				if (r == -ETIMEDOUT && !to)
					to = CNL_CLIENT_TIMEOUT_CONNECT;
				secret_free(hd.p); /* a bearer, a signature */
				if (rq->download)
					mbedtls_sha256_free(&s.sha);
				if (ret_unconnected)
					*ret_unconnected = true;
				return no_reply(ret, &s, &f, to, -EIO);
			}
		}
		io.deadline = timeout_ms > 0 ? t0 + timeout_ms : 0;
		r = attempt(cl, c, &u, hd.p, hd.n, body, body_n, rq, &io, &h,
		            &s, reused, &f);
		if (r == -EAGAIN && tries == 0) {
			conn_close(c);
			continue;
		}
		if (r < 0 || h.close || h.minor == 0 ||
		    (!h.chunked && h.content_length < 0))
			conn_close(c);
		break;
	}
	secret_free(hd.p); /* a bearer, a signature */
	if (r == -ECANCELED) {
		ret->status = h.status;
		if (rq->download)
			mbedtls_sha256_free(&s.sha);
		free(s.p);
		snprintf(ret->error, sizeof(ret->error), "cancelled");
		return -ECANCELED;
	}
	if (r < 0) {
		if (rq->download)
			mbedtls_sha256_free(&s.sha);
		return no_reply(ret, &s, &f, r == -ETIMEDOUT ? io.timed_out : 0,
		                -EIO);
	}
	ret->status = h.status;
	ret->body = s.p ? s.p : cnl_xstrdup("");
	ret->len = s.n;
	snprintf(ret->server_sha256, sizeof(ret->server_sha256), "%s",
	         h.sha256);
	if (rq->download) {
		if (s.to_fd) {
			unsigned char md[32];

			ret->downloaded = true;
			ret->download_len = s.written;
			sha_finish(&s.sha, md);
			cnl_hex(md, sizeof(md), ret->download_sha256);
		}
		mbedtls_sha256_free(&s.sha);
	}
	if (ret->len && (ret->body[0] == '{' || ret->body[0] == '['))
		ret->json = json_loadb(ret->body, ret->len, 0, NULL);
	return 0;
}

int cnl_client_send(struct cnl_client *cl, const char *method, const char *path,
                    json_t *body, const char *idem,
                    struct cnl_client_reply *ret)
{
	return cnl_client_request(cl,
	                          &(struct cnl_client_request){
	                              .method = method,
	                              .path = path,
	                              .json = body,
	                              .idempotency_key = idem,
	                          },
	                          ret);
}

long cnl_client_call(struct cnl_client *cl, const char *method,
                     const char *path, json_t *body, long timeout_s,
                     json_t **ret, char *err, size_t errlen)
{
	struct cnl_client_reply r;
	const char *msg;
	int rc;

	if (ret)
		*ret = NULL;
	rc = cnl_client_request(cl,
	                        &(struct cnl_client_request){
	                            .method = method,
	                            .path = path,
	                            .json = body,
	                            .timeout_ms = timeout_s * 1000,
	                        },
	                        &r);
	if (rc < 0) {
		snprintf(err, errlen, "%s %s: %s", method ? method : "",
		         path ? path : "", r.error);
		cnl_client_reply_done(&r);
		return rc;
	}
	if (r.status >= 400) {
		cnl_http_error_read(r.json, NULL, &msg);
		snprintf(err, errlen, "%s %s: %ld %s", method, path, r.status,
		         msg ? msg : "");
	}
	if (ret)
		*ret = json_incref(r.json);
	cnl_client_reply_done(&r);
	return r.status;
}

/* ---- upgraded connections -------------------------------------------- */

struct cnl_client_stream {
	struct conn c;
	struct tls *tls; /* its own, freed with it */
};

int cnl_client_stream_fd(const struct cnl_client_stream *s)
{
	return s->c.fd;
}

bool cnl_client_stream_pending(struct cnl_client_stream *s)
{
	return s->c.in_off < s->c.in_n ||
	       (s->c.tls && mbedtls_ssl_get_bytes_avail(&s->c.ssl) > 0);
}

void cnl_client_stream_free(struct cnl_client_stream *s)
{
	if (!s)
		return;
	conn_close(&s->c);
	tls_free(s->tls);
	free(s);
}

ssize_t cnl_client_stream_read(struct cnl_client_stream *s, char *buf, size_t n)
{
	short want;

	if (s->c.in_off < s->c.in_n) {
		size_t k = s->c.in_n - s->c.in_off;

		k = k < n ? k : n;
		memcpy(buf, s->c.in + s->c.in_off, k);
		s->c.in_off += k;
		return (ssize_t)k;
	}
	return conn_recv_now(&s->c, buf, n, &want);
}

int cnl_client_stream_write(struct cnl_client_stream *s, const char *buf,
                            size_t n)
{
	struct io io = {.idle_ms = 60 * 1000};
	int r = conn_write(&s->c, buf, n, &io);

	return r == -ETIMEDOUT ? -ETIMEDOUT : r < 0 ? -EIO : 0;
}

int cnl_client_dial(struct cnl_client *cl, struct cnl_client_stream **ret,
                    char *err, size_t errlen)
{
	struct cnl_client_stream *s;
	struct cnl_client tmp;
	struct fail f = {0};
	struct io io = {0};
	struct url u;
	long ms = cl->connect_timeout_ms ? cl->connect_timeout_ms : 10000;
	int r;

	if (url_parse(cl->bases[0], &u, &f) < 0) {
		snprintf(err, errlen, "bad URL %s", cl->bases[0]);
		return -EIO;
	}
	s = cnl_xcalloc(1, sizeof(*s));
	s->c.fd = -1;
	tmp = *cl;
	tmp.tls = NULL;
	io.deadline = now_ms() + ms;
	r = conn_open(&tmp, &s->c, &u, &io, &f);
	s->tls = tmp.tls;
	if (r < 0) {
		snprintf(err, errlen, "%s", f.detail[0] ? f.detail : f.error);
		cnl_client_stream_free(s);
		return r == -ETIMEDOUT ? -ETIMEDOUT : -EIO;
	}
	*ret = s;
	return 0;
}

int cnl_client_upgrade(struct cnl_client *cl, const char *path,
                       const char *proto, struct cnl_client_stream **ret,
                       char *err, size_t errlen)
{
	struct cnl_client_stream *s;
	struct cnl_client tmp;
	struct fail f = {0};
	struct io io = {0};
	struct cnl_client_head h;
	struct str hd = {0};
	struct url u;
	char *tok;
	int r;
	long ms = cl->connect_timeout_ms ? cl->connect_timeout_ms : 10000;

	if (!path || !proto || !header_safe(proto) ||
	    url_parse(cl->base, &u, &f) < 0)
		return -EINVAL;
	s = cnl_xcalloc(1, sizeof(*s));
	s->c.fd = -1;
	/* The stream's TLS settings are its own: it outlives no client but
	 * may be used on another thread than the client's. */
	tmp = *cl;
	tmp.tls = NULL;
	/* Several bases: the first that takes the connection, as
	 * cnl_client_request() does. */
	for (int k = 0;; k++) {
		io.deadline = now_ms() + ms;
		if (conn_open(&tmp, &s->c, &u, &io, &f) == 0)
			break;
		if (k + 1 >= cl->nbases) {
			s->tls = tmp.tls;
			snprintf(err, errlen,
			         "POST %s: cannot connect to %s (%s)", path,
			         cl->base, f.detail[0] ? f.detail : f.error);
			goto fail;
		}
		for (int i = 0; i < cl->nbases; i++)
			if (cl->bases[i] == cl->base) {
				cl->base = cl->bases[(i + 1) % cl->nbases];
				break;
			}
		conn_close(&cl->conn);
		memset(&f, 0, sizeof(f));
		memset(&io, 0, sizeof(io));
		if (url_parse(cl->base, &u, &f) < 0) {
			s->tls = tmp.tls;
			snprintf(err, errlen, "POST %s: bad URL %s", path,
			         cl->base);
			goto fail;
		}
	}
	s->tls = tmp.tls;
	str_cat(&hd, "POST ");
	str_cat(&hd, *u.target == '/' ? u.target : "");
	str_cat(&hd, path);
	str_cat(&hd, " HTTP/1.1\r\nHost: ");
	str_cat(&hd, u.hostport);
	str_cat(&hd, "\r\n");
	tok = auth_token(cl);
	if (tok && header_safe(tok)) {
		str_cat(&hd, "Authorization: Bearer ");
		str_cat(&hd, tok);
		str_cat(&hd, "\r\n");
	}
	secret_free(tok);
	str_cat(&hd, "Connection: Upgrade\r\nUpgrade: ");
	str_cat(&hd, proto);
	str_cat(&hd, "\r\nContent-Length: 0\r\n\r\n");
	io.deadline = now_ms() + 30 * 1000;
	r = conn_write(&s->c, hd.p, hd.n, &io);
	explicit_bzero(hd.p, hd.n);
	free(hd.p);
	if (r < 0) {
		snprintf(err, errlen, "POST %s: cannot send the request", path);
		goto fail;
	}
	if ((r = read_head(&s->c, &io, &h)) < 0) {
		snprintf(err, errlen, "POST %s: %s", path,
		         r == -ETIMEDOUT ? "no reply"
		         : r == -ENODATA ? "connection closed before a reply"
		         : r == -EBADMSG || r == -E2BIG
		             ? "malformed reply head"
		             : "cannot read the reply");
		goto fail;
	}
	if (h.status != 101) {
		struct sink sk = {.max = 64 * 1024};
		const char *msg = NULL;
		json_t *j = NULL;

		io.deadline = now_ms() + 5000;
		if (read_body(&s->c, &io, &h, &sk) == 0 && sk.p)
			j = json_loadb(sk.p, sk.n, 0, NULL);
		cnl_http_error_read(j, NULL, &msg);
		snprintf(err, errlen, "POST %s: %d %s", path, h.status,
		         msg ? msg : "(no upgrade)");
		json_decref(j);
		free(sk.p);
		goto fail;
	}
	/* What came after the head stays in s->c.in: the stream's first
	 * bytes. */
	*ret = s;
	return 0;
fail:
	cnl_client_stream_free(s);
	return -EIO;
}
