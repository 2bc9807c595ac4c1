/*
 * weblogin.c - cnlab login --web: browser sign-in at the server's OIDC
 * provider, as gh and gcloud do it.
 *
 *   1. GET /v1/auth/oidc (public) says the issuer, the client id and the
 *      provider's authorization and token endpoints.
 *   2. We listen on 127.0.0.1, a port the kernel picks, and send the
 *      browser to the authorization endpoint with a random "state" and a
 *      PKCE challenge (S256 of a random verifier, RFC 7636), the redirect
 *      being http://127.0.0.1:PORT/callback (RFC 8252 section 7.3).
 *   3. The redirect brings a code and the state; a state that is not ours
 *      is refused (a request forged by another page), as is an error.
 *   4. The code and the verifier go to the token endpoint (a public
 *      client: no secret; a code stolen on the way is useless without the
 *      verifier), which answers with an ID token.
 * The caller then exchanges the ID token at cnlabd for a session
 * (POST /v1/auth/session), so that the login is revocable as a password
 * login is.
 *
 * The browser is $BROWSER when set (run with the URL as its argument, no
 * shell), else xdg-open when there is a display; the URL is always printed
 * too, for a browser elsewhere.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cli/cli.h"
#include "common/base64.h"
#include "common/time.h"
#include "common/util.h"
#include "net/client.h"

/* How long we wait for the browser to come back (a hung sign-in). */
#define WEB_WAIT_MS (5 * 60 * 1000)
/* Largest request line we read from the browser. */
#define REQ_MAX 8192

static char *xstrndup(const char *s, size_t n)
{
	char *d = cnl_xmalloc(n + 1);

	memcpy(d, s, n);
	d[n] = '\0';
	return d;
}

/* @n random bytes as base64url in @out (no padding). */
static int random_b64(size_t n, char *out, size_t len)
{
	uint8_t b[64];

	if (n > sizeof(b) || getrandom(b, n, 0) != (ssize_t)n)
		return -1;
	return cnl_b64_encode(b, n, CNL_B64_URL, out, len) < 0 ? -1 : 0;
}

/* Run the browser on @url in the background: its pid, or -1. */
static pid_t open_browser(const char *url)
{
	const char *b = getenv("BROWSER");
	bool have_display = getenv("DISPLAY") || getenv("WAYLAND_DISPLAY");
	pid_t pid;

	if ((!b || !*b) && !have_display)
		return -1;
	pid = fork();
	if (pid == 0) {
		int fd = open("/dev/null", O_RDWR);

		if (fd >= 0) {
			dup2(fd, STDIN_FILENO);
			dup2(fd, STDOUT_FILENO);
		}
		if (b && *b)
			execlp(b, b, url, (char *)NULL);
		else
			execlp("xdg-open", "xdg-open", url, (char *)NULL);
		_exit(127);
	}
	return pid;
}

/* Decode %XX and '+' of a query value in place. */
static void url_decode(char *s)
{
	char *w = s;

	for (; *s; s++) {
		if (*s == '+') {
			*w++ = ' ';
		} else if (*s == '%' && s[1] && s[2]) {
			char hex[3] = {s[1], s[2], 0}, *end;
			long v = strtol(hex, &end, 16);

			if (*end) {
				*w++ = *s;
				continue;
			}
			*w++ = (char)v;
			s += 2;
		} else {
			*w++ = *s;
		}
	}
	*w = '\0';
}

/* The value of @key in the query @q ("a=1&b=2"), decoded, malloc'd. */
static char *query_get(const char *q, const char *key)
{
	size_t k = strlen(key);

	while (q && *q) {
		const char *amp = strchr(q, '&');
		size_t n = amp ? (size_t)(amp - q) : strlen(q);

		if (n > k && strncmp(q, key, k) == 0 && q[k] == '=') {
			char *v = xstrndup(q + k + 1, n - k - 1);

			url_decode(v);
			return v;
		}
		q = amp ? amp + 1 : NULL;
	}
	return NULL;
}

static void answer(int fd, int status, const char *text)
{
	char buf[1024];
	int n = snprintf(buf, sizeof(buf),
	                 "HTTP/1.1 %d %s\r\nContent-Type: text/plain; "
	                 "charset=utf-8\r\nContent-Length: %zu\r\n"
	                 "Connection: close\r\n\r\n%s",
	                 status, status == 200 ? "OK" : "Bad Request",
	                 strlen(text), text);

	if (n > 0 && write(fd, buf, (size_t)n) < 0)
		return; /* the browser went: nothing to tell it */
}

/*
 * Wait on @lfd for the browser's GET /callback: its query, malloc'd, or
 * NULL after a message.  Other paths (a favicon) get 404 and we go on.
 */
static char *wait_callback(int lfd, int *ret_fd)
{
	/* One deadline for the whole wait: a local process that connects
	 * now and then does not keep the login waiting for ever. */
	int64_t deadline = cnl_time_mono_ns() / 1000000 + WEB_WAIT_MS;

	for (;;) {
		struct pollfd p = {.fd = lfd, .events = POLLIN};
		char req[REQ_MAX + 1];
		int64_t left = deadline - cnl_time_mono_ns() / 1000000;
		size_t got = 0;
		int fd, r;

		r = left > 0 ? poll(&p, 1, (int)left) : 0;
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0) {
			cnl_cli_fail(CNL_EXIT_AUTH,
			             "no sign-in came back from the browser "
			             "within 5 minutes");
			return NULL;
		}
		if ((fd = accept(lfd, NULL, NULL)) < 0)
			continue;
		/* The request line is all we need. */
		while (got < REQ_MAX && !memchr(req, '\n', got)) {
			struct pollfd q = {.fd = fd, .events = POLLIN};
			ssize_t n;

			if (poll(&q, 1, 10000) <= 0)
				break;
			n = read(fd, req + got, REQ_MAX - got);
			if (n <= 0)
				break;
			got += (size_t)n;
		}
		req[got] = '\0';
		if (strncmp(req, "GET /callback?", 14) == 0) {
			char *sp = strchr(req + 14, ' ');

			if (sp) {
				*ret_fd = fd;
				return xstrndup(req + 14,
				                (size_t)(sp - (req + 14)));
			}
		}
		answer(fd, 404, "not found\n");
		close(fd);
	}
}

/* URL of the authorization request. */
static char *authorize_url(const char *endpoint, const char *client_id,
                           const char *redirect, const char *scope,
                           const char *state, const char *challenge)
{
	_cleanup_free_ char *c = cnl_client_url_escape(client_id);
	_cleanup_free_ char *r = cnl_client_url_escape(redirect);
	_cleanup_free_ char *s = cnl_client_url_escape(scope);
	char *url = NULL;

	if (asprintf(&url,
	             "%s%cresponse_type=code&client_id=%s&redirect_uri=%s&"
	             "scope=%s&state=%s&code_challenge=%s&"
	             "code_challenge_method=S256",
	             endpoint, strchr(endpoint, '?') ? '&' : '?', c, r, s,
	             state, challenge) < 0)
		abort();
	return url;
}

/* POST the code to the token endpoint: the ID token, or NULL after a
 * message. */
static char *redeem_code(struct cnl_cli *cli, const char *endpoint,
                         const char *client_id, const char *redirect,
                         const char *code, const char *verifier)
{
	_cleanup_free_ char *c = cnl_client_url_escape(client_id);
	_cleanup_free_ char *r = cnl_client_url_escape(redirect);
	_cleanup_free_ char *k = cnl_client_url_escape(code);
	struct cnl_client *cl = NULL;
	struct cnl_client_reply rep;
	char *form = NULL, *idt = NULL;
	const char *v;

	(void)cli;
	if (asprintf(&form,
	             "grant_type=authorization_code&code=%s&redirect_uri=%s&"
	             "client_id=%s&code_verifier=%s",
	             k, r, c, verifier) < 0)
		abort();
	if (cnl_client_new(
	        &(struct cnl_client_config){.base = "",
	                                    .connect_timeout_ms = 10000,
	                                    .timeout_ms = 30000},
	        &cl) < 0) {
		free(form);
		cnl_cli_fail(CNL_EXIT_ERROR, "cannot start libcurl");
		return NULL;
	}
	if (cnl_client_request(
	        cl,
	        &(struct cnl_client_request){
	            .method = "POST",
	            .path = endpoint,
	            .body = form,
	            .body_len = strlen(form),
	            .content_type = "application/x-www-form-urlencoded"},
	        &rep) < 0) {
		cnl_cli_fail(CNL_EXIT_ERROR,
		             "cannot reach the token endpoint %s: %s", endpoint,
		             rep.error);
	} else if (rep.status != 200 || !(v = json_string_value(json_object_get(
	                                      rep.json, "id_token")))) {
		cnl_cli_fail(
		    CNL_EXIT_AUTH,
		    "the identity provider refused the code (HTTP %ld): %s",
		    rep.status,
		    json_string_value(json_object_get(rep.json, "error"))
		        ? json_string_value(json_object_get(rep.json, "error"))
		        : "no id_token in its answer");
	} else {
		idt = cnl_xstrdup(v);
	}
	explicit_bzero(form, strlen(form));
	free(form);
	cnl_client_reply_done(&rep);
	cnl_client_free(cl);
	return idt;
}

int cnl_cli_web_id_token(struct cnl_cli *cli, char **ret)
{
	struct sockaddr_in a = {.sin_family = AF_INET,
	                        .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t alen = sizeof(a);
	char state[64], verifier[64], challenge[64], redirect[64];
	uint8_t md[32];
	json_t *cfg = NULL;
	_cleanup_free_ char *url = NULL;
	char *q = NULL, *got_state = NULL, *code_v = NULL, *err_v = NULL;
	const char *authz, *tokep, *client;
	int lfd = -1, cfd = -1, code;
	pid_t browser = -1;

	*ret = NULL;
	if ((code = cnl_cli_call(cli, "GET", "/v1/auth/oidc", NULL, NULL,
	                         "browser sign-in", &cfg)))
		return code;
	authz =
	    json_string_value(json_object_get(cfg, "authorization_endpoint"));
	tokep = json_string_value(json_object_get(cfg, "token_endpoint"));
	client = json_string_value(json_object_get(cfg, "client_id"));
	if (!authz || !tokep || !client) {
		json_decref(cfg);
		return cnl_cli_fail(CNL_EXIT_ERROR,
		                    "the server's GET /v1/auth/oidc lacks the "
		                    "endpoints or the client id");
	}
	if (random_b64(16, state, sizeof(state)) < 0 ||
	    random_b64(32, verifier, sizeof(verifier)) < 0) {
		json_decref(cfg);
		return cnl_cli_fail(CNL_EXIT_ERROR, "no randomness");
	}
	cnl_client_sha256(verifier, strlen(verifier), md);
	cnl_b64_encode(md, sizeof(md), CNL_B64_URL, challenge,
	               sizeof(challenge));
	if ((lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0)) < 0 ||
	    bind(lfd, (struct sockaddr *)&a, sizeof(a)) < 0 ||
	    listen(lfd, 8) < 0 ||
	    getsockname(lfd, (struct sockaddr *)&a, &alen) < 0) {
		code = cnl_cli_fail(CNL_EXIT_ERROR,
		                    "cannot listen on 127.0.0.1: %s",
		                    strerror(errno));
		goto out;
	}
	snprintf(redirect, sizeof(redirect), "http://127.0.0.1:%u/callback",
	         ntohs(a.sin_port));
	url =
	    authorize_url(authz, client, redirect,
	                  json_string_value(json_object_get(cfg, "scope"))
	                      ? json_string_value(json_object_get(cfg, "scope"))
	                      : "openid",
	                  state, challenge);
	fprintf(stderr,
	        "Sign in in your browser; if it does not open, visit:\n  "
	        "%s\n",
	        url);
	browser = open_browser(url);
	if (!(q = wait_callback(lfd, &cfd))) {
		code = CNL_EXIT_AUTH;
		goto out;
	}
	got_state = query_get(q, "state");
	code_v = query_get(q, "code");
	err_v = query_get(q, "error");
	if (!got_state || strcmp(got_state, state) != 0) {
		answer(cfd, 400,
		       "Sign-in refused: the state does not match this "
		       "login.\n");
		code = cnl_cli_fail(CNL_EXIT_AUTH,
		                    "browser sign-in refused: the redirect's "
		                    "state is not this login's (a forged "
		                    "request?)");
		goto out;
	}
	if (err_v || !code_v) {
		answer(cfd, 400, "Sign-in failed.\n");
		code = cnl_cli_fail(CNL_EXIT_AUTH, "browser sign-in failed: %s",
		                    err_v ? err_v : "no code in the redirect");
		goto out;
	}
	answer(cfd, 200, "Signed in to CNLab: you can close this window.\n");
	close(cfd);
	cfd = -1;
	if (!(*ret =
	          redeem_code(cli, tokep, client, redirect, code_v, verifier)))
		code = CNL_EXIT_AUTH;
	else
		code = 0;
out:
	explicit_bzero(verifier, sizeof(verifier));
	if (cfd >= 0)
		close(cfd);
	if (lfd >= 0)
		close(lfd);
	if (browser > 0)
		waitpid(browser, NULL, WNOHANG);
	free(q);
	free(got_state);
	free(code_v);
	free(err_v);
	json_decref(cfg);
	return code;
}
