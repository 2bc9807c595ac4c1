/*
 * test_api.c - cnlabd's REST API end to end: the server runs in this
 * process on 127.0.0.1 (port 0) over a fresh SQLite store in a temp
 * directory, and the tests talk real HTTP to it with libcurl.
 *
 * Covered: /healthz; login (success, wrong password and unknown user with
 * byte-identical 401 bodies); refused tokens (none, garbage, alg "none",
 * expired, wrong key, wrong audience, deleted user, a well-signed JWT with
 * no live session); logout replayed, user disable/enable, membership
 * removal (each on the next request, and again for the reads served
without the API's lock, made while this thread holds it); the role
matrix of
 * every route for an administrator, a project-admin, a member and a viewer
 * of project A and a member of project B only (a non-member gets 404, a
 * member whose role is too low 403: see api.h); that a role change takes
 * effect on the next request with the same token; the admin-only rules of
 * memberships; 413 for large bodies (with Content-Length and chunked);
 * strict bodies (unknown field, wrong type, bad JSON) naming the field;
 * 404 and 405 with Allow; paging; idempotent job creation (per user, 422
 * for another body); one audit record
 * per state-changing request and a chain that verifies; and the start-up
 * refusal of route tables with a row lacking a permission.
 *
 * One server serves the whole group (users and projects are set up once,
 * through the API itself); each test creates what else it needs under
 * fresh names.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include <curl/curl.h>
#include <jansson.h>

#include "cnlab/errors.h"
#include "common/time.h"
#include "common/util.h"
#include "common/base64.h"
#include "net/http_server.h"
#include "server/api-internal.h"
#include "server/api.h"
#include "server/auth.h"
#include "store/store.h"
#include "client.h"

#define SECRET "test secret for cnlabd, 32+ bytes long"

enum who { ADMIN, PADMIN, MEMBER, VIEWER, BOB, NWHO };
static const char *const who_name[NWHO] = {"root", "alice", "mem", "view",
                                           "bob"};

struct fixture {
	struct tc_server s;
	char token[NWHO][CNL_AUTH_JWT_MAX];
	char uid[NWHO][CNL_ID_MAX];
	char proj_a[CNL_ID_MAX], proj_b[CNL_ID_MAX];
	char job_a[CNL_ID_MAX], job_b[CNL_ID_MAX];
	int seq; /* for fresh names */
};

static struct fixture F;

static void login(const char *name, const char *password, char *token)
{
	struct reply r;
	char body[256];

	snprintf(body, sizeof(body), "{\"user\":\"%s\",\"password\":\"%s\"}",
	         name, password);
	http("POST", "/v1/auth/login", NULL, body, &r);
	expect(&r, 200, "login");
	snprintf(token, CNL_AUTH_JWT_MAX, "%s", str(r.body, "token"));
	reply_done(&r);
}

/* Create a user as admin and return its id in @id. */
static void make_user(const char *name, char *id)
{
	struct reply r;
	char body[256];

	snprintf(body, sizeof(body), "{\"name\":\"%s\",\"password\":\"pw-%s\"}",
	         name, name);
	http("POST", "/v1/users", F.token[ADMIN], body, &r);
	expect(&r, 201, "create user");
	snprintf(id, CNL_ID_MAX, "%s", str(r.body, "id"));
	reply_done(&r);
}

static void make_project(const char *name, char *id)
{
	struct reply r;
	char body[256];

	snprintf(body, sizeof(body), "{\"name\":\"%s\"}", name);
	http("POST", "/v1/projects", F.token[ADMIN], body, &r);
	expect(&r, 201, "create project");
	snprintf(id, CNL_ID_MAX, "%s", str(r.body, "id"));
	reply_done(&r);
}

static void grant(const char *token, const char *proj, const char *user,
                  const char *role, long status)
{
	struct reply r;
	char path[128], body[256];

	snprintf(path, sizeof(path), "/v1/projects/%s/members", proj);
	snprintf(body, sizeof(body), "{\"user\":\"%s\",\"role\":\"%s\"}", user,
	         role);
	http("POST", path, token, body, &r);
	expect(&r, status, "grant");
	reply_done(&r);
}

static void make_job(const char *token, const char *proj, char *id)
{
	struct reply r;
	char path[128];

	snprintf(path, sizeof(path), "/v1/projects/%s/jobs", proj);
	http("POST", path, token,
	     "{\"command\":\"python train.py\",\"gpu\":\"h200-1g.18gb\"}", &r);
	expect(&r, 201, "create job");
	snprintf(id, CNL_ID_MAX, "%s", str(r.body, "id"));
	reply_done(&r);
}

/* A fresh name for this run. */
static const char *fresh(const char *prefix)
{
	static char buf[64];

	snprintf(buf, sizeof(buf), "%s%d", prefix, ++F.seq);
	return buf;
}

/* ------------------------------------------------------------------------ */
/* Setup                                                                    */
/* ------------------------------------------------------------------------ */

static int group_setup(void **state)
{
	char pw[64];

	tc_server_open(&F.s, "cnl-api");
	tc_server_start(&F.s,
	                &(struct cnl_api_config){
	                    .jwt_key = (const uint8_t *)SECRET,
	                    .jwt_key_len = strlen(SECRET),
	                },
	                true);
	login("root", "pw-root", F.token[ADMIN]);
	for (int w = PADMIN; w < NWHO; w++) {
		make_user(who_name[w], F.uid[w]);
		snprintf(pw, sizeof(pw), "pw-%s", who_name[w]);
		login(who_name[w], pw, F.token[w]);
	}
	make_project("proj-a", F.proj_a);
	make_project("proj-b", F.proj_b);
	grant(F.token[ADMIN], F.proj_a, "alice", "project-admin", 200);
	grant(F.token[PADMIN], F.proj_a, "mem", "member", 200);
	grant(F.token[PADMIN], F.proj_a, "view", "viewer", 200);
	grant(F.token[ADMIN], F.proj_b, "bob", "member", 200);
	make_job(F.token[MEMBER], F.proj_a, F.job_a);
	make_job(F.token[BOB], F.proj_b, F.job_b);
	*state = &F;
	return 0;
}

static int group_teardown(void **state)
{
	tc_server_close(&F.s);
	return 0;
}

/* ------------------------------------------------------------------------ */
/* Tests                                                                    */
/* ------------------------------------------------------------------------ */

static void test_healthz(void **state)
{
	struct reply r;

	http("GET", "/healthz", NULL, NULL, &r);
	assert_int_equal(r.status, 200);
	assert_string_equal(r.raw, "{\"status\":\"ok\"}");
	reply_done(&r);
	/* The all-in-one says when its embedded agent is down, and up. */
	cnl_api_agent_health(F.s.api, false);
	http("GET", "/healthz", NULL, NULL, &r);
	assert_int_equal(r.status, 503);
	assert_string_equal(r.raw,
	                    "{\"agent\":\"down\",\"status\":\"degraded\"}");
	reply_done(&r);
	cnl_api_agent_health(F.s.api, true);
	http("GET", "/healthz", NULL, NULL, &r);
	assert_int_equal(r.status, 200);
	assert_string_equal(r.raw, "{\"agent\":\"up\",\"status\":\"ok\"}");
	reply_done(&r);
}

/*
 * /healthz answers while something holds the API's lock (a scheduling
 * cycle, a burst of submissions): the lock is held here, by this thread,
 * for the whole request.  Before, the request waited for the lock and the
 * client's 30 s timeout ended it without an answer.  A GET that needs the
 * lock still waits for it: the lock is real.
 */
static void test_healthz_without_lock(void **state)
{
	struct reply r;

	pthread_mutex_lock(&F.s.api->mu);
	http("GET", "/healthz", NULL, NULL, &r);
	pthread_mutex_unlock(&F.s.api->mu);
	assert_int_equal(r.status, 200);
	assert_non_null(strstr(r.raw, "\"status\":\"ok\""));
	reply_done(&r);
	/* Counted in /metrics as before. */
	http("GET", "/metrics", F.token[ADMIN], NULL, &r);
	assert_int_equal(r.status, 200);
	assert_non_null(strstr(r.raw, "cnlab_http_requests_total{method="
	                              "\"GET\",route=\"/healthz\",code="
	                              "\"2xx\"}"));
	reply_done(&r);
}

static void user_with_session(char *n, char *uid, char *tok);

/* GET @path as @tok with the API's lock held by this thread: a route
 * served off the lock answers (and is checked against @status); one that
 * waited for the lock would end in the client's timeout (status 0). */
static void get_locked(const char *path, const char *tok, long status,
                       struct reply *r)
{
	pthread_mutex_lock(&F.s.api->mu);
	if (http_try("GET", path, tok, NULL, 10, r) < 0)
		r->status = 0;
	pthread_mutex_unlock(&F.s.api->mu);
	if (r->status != status)
		fail_msg("GET %s with the API's lock held: %ld, expected %ld "
		         "(0: it waited for the lock)",
		         path, r->status, status);
}

/*
 * Issue 19: the reads of a job, its project and the caller's session are
 * served without the API's lock (a scheduling cycle or a burst of
 * submissions holds it), through a read-only store connection and the
 * controller's facts index, and authorize exactly as the locked path
 * does: a stranger gets 404, and a session logged out, a user disabled
 * or a member removed is refused on the next request, here made while
 * the lock is held.  Before, each of these GETs waited for the lock.
 */
static void test_reads_without_lock(void **state)
{
	char n[64], uid[CNL_ID_MAX], tok[CNL_AUTH_JWT_MAX], path[160];
	char job[160], list[160], proj[160];
	json_t *st;
	struct reply r;

	snprintf(job, sizeof(job), "/v1/jobs/%s", F.job_a);
	snprintf(list, sizeof(list), "/v1/projects/%s/jobs", F.proj_a);
	snprintf(proj, sizeof(proj), "/v1/projects/%s", F.proj_a);
	get_locked(job, F.token[MEMBER], 200, &r);
	assert_string_equal(str(r.body, "id"), F.job_a);
	/* The controller's facts: the job is pending, and says why. */
	st = json_object_get(r.body, "status");
	assert_true(json_is_object(st));
	assert_string_equal(str(st, "phase"), "pending");
	assert_non_null(json_object_get(st, "reason"));
	reply_done(&r);
	get_locked(list, F.token[VIEWER], 200, &r);
	assert_true(json_array_size(json_object_get(r.body, "items")) >= 1);
	reply_done(&r);
	get_locked(proj, F.token[VIEWER], 200, &r);
	reply_done(&r);
	get_locked("/v1/auth/whoami", F.token[BOB], 200, &r);
	assert_string_equal(str(r.body, "id"), F.uid[BOB]);
	reply_done(&r);
	get_locked("/v1/projects", F.token[BOB], 200, &r);
	reply_done(&r);
	/* Strangers and forgers, as on the locked path. */
	get_locked(job, F.token[BOB], 404, &r);
	assert_error(&r, 404, "not_found");
	reply_done(&r);
	get_locked(job, NULL, 401, &r);
	reply_done(&r);
	get_locked(job, "eyJhbGciOiJub25lIn0.e30.", 401, &r);
	reply_done(&r);

	/* A member removed: 404 on the next read. */
	user_with_session(n, uid, tok);
	grant(F.token[PADMIN], F.proj_a, n, "viewer", 200);
	get_locked(job, tok, 200, &r);
	reply_done(&r);
	snprintf(path, sizeof(path), "/v1/projects/%s/members/%s", F.proj_a, n);
	http("DELETE", path, F.token[PADMIN], NULL, &r);
	expect(&r, 200, "remove member");
	reply_done(&r);
	get_locked(job, tok, 404, &r);
	reply_done(&r);
	get_locked(list, tok, 404, &r);
	reply_done(&r);

	/* A user disabled: 401 on the next read. */
	grant(F.token[PADMIN], F.proj_a, n, "viewer", 200);
	get_locked(job, tok, 200, &r);
	reply_done(&r);
	snprintf(path, sizeof(path), "/v1/users/%s/disable", n);
	http("POST", path, F.token[ADMIN], NULL, &r);
	expect(&r, 200, "disable");
	reply_done(&r);
	get_locked(job, tok, 401, &r);
	reply_done(&r);
	get_locked("/v1/auth/whoami", tok, 401, &r);
	reply_done(&r);

	/* A session logged out: 401 on the next read. */
	user_with_session(n, uid, tok);
	grant(F.token[PADMIN], F.proj_a, n, "viewer", 200);
	get_locked(job, tok, 200, &r);
	reply_done(&r);
	http("POST", "/v1/auth/logout", tok, NULL, &r);
	expect(&r, 200, "logout");
	reply_done(&r);
	get_locked(job, tok, 401, &r);
	reply_done(&r);
	get_locked("/v1/auth/whoami", tok, 401, &r);
	reply_done(&r);

	/* A job cancelled shows it at once, without the lock. */
	{
		char id[CNL_ID_MAX];

		make_job(F.token[MEMBER], F.proj_a, id);
		snprintf(path, sizeof(path), "/v1/jobs/%s/cancel", id);
		http("POST", path, F.token[MEMBER], NULL, &r);
		expect(&r, 200, "cancel");
		reply_done(&r);
		snprintf(path, sizeof(path), "/v1/jobs/%s", id);
		get_locked(path, F.token[MEMBER], 200, &r);
		assert_string_equal(str(r.body, "state"), "cancelled");
		assert_null(json_object_get(r.body, "status"));
		reply_done(&r);
	}
}

static void test_login(void **state)
{
	struct reply ok, bad_pw, no_user, missing;
	struct cnl_auth_claims c;
	int64_t exp_ms, now = cnl_time_now_ms();

	http("POST", "/v1/auth/login", NULL,
	     "{\"user\":\"mem\",\"password\":\"pw-mem\"}", &ok);
	expect(&ok, 200, "login");
	assert_int_equal(
	    cnl_auth_jwt_verify(str(ok.body, "token"), (const uint8_t *)SECRET,
	                        strlen(SECRET), "cnlab", now / 1000, &c),
	    0);
	assert_string_equal(c.sub, F.uid[MEMBER]);
	assert_int_equal(c.exp - c.iat, 12 * 3600);
	assert_int_equal(
	    cnl_time_parse_rfc3339(str(ok.body, "expires_at"), &exp_ms), 0);
	assert_int_equal(exp_ms, c.exp * 1000);
	assert_true(exp_ms > now + 12 * 3600 * 1000LL - 60000);

	http("POST", "/v1/auth/login", NULL,
	     "{\"user\":\"mem\",\"password\":\"wrong\"}", &bad_pw);
	http("POST", "/v1/auth/login", NULL,
	     "{\"user\":\"nobody\",\"password\":\"wrong\"}", &no_user);
	assert_error(&bad_pw, 401, "unauthenticated");
	assert_error(&no_user, 401, "unauthenticated");
	/* Nothing tells a wrong password from an unknown user. */
	assert_string_equal(bad_pw.raw, no_user.raw);

	http("POST", "/v1/auth/login", NULL, "{\"user\":\"mem\"}", &missing);
	assert_error(&missing, 400, "bad_request");
	assert_non_null(strstr(err_message(&missing), "\"password\""));
	reply_done(&ok);
	reply_done(&bad_pw);
	reply_done(&no_user);
	reply_done(&missing);
}

/* base64url(@json) into @out. */
static void b64(const char *json, char *out, size_t len)
{
	assert_true(cnl_b64_encode(json, strlen(json), CNL_B64_URL, out, len) >
	            0);
}

static void expect_401(const char *token, const char *what)
{
	struct reply r;

	http("GET", "/v1/projects", token, NULL, &r);
	if (r.status != 401)
		fail_msg("%s: want 401, got %ld %s", what, r.status, r.raw);
	assert_error(&r, 401, "unauthenticated");
	reply_done(&r);
}

static void sign(const char *sub, const char *aud, int64_t iat, int64_t exp,
                 const char *key, char *out)
{
	struct cnl_auth_claims c = {0};

	snprintf(c.sub, sizeof(c.sub), "%s", sub);
	snprintf(c.aud, sizeof(c.aud), "%s", aud);
	c.iat = iat;
	c.exp = exp;
	assert_true(cnl_auth_jwt_sign(&c, (const uint8_t *)key, strlen(key),
	                              out, CNL_AUTH_JWT_MAX) > 0);
}

static void test_tokens_refused(void **state)
{
	int64_t now = cnl_time_now_ms() / 1000;
	char tok[CNL_AUTH_JWT_MAX], h[256], p[512], payload[256];
	struct reply r;

	/* No Authorization header; another scheme. */
	http("GET", "/v1/projects", NULL, NULL, &r);
	assert_error(&r, 401, "unauthenticated");
	reply_done(&r);
	http_n("GET", "/v1/projects", NULL, NULL, 0,
	       "Authorization: Basic cm9vdDpwdy1yb290", &r);
	assert_error(&r, 401, "unauthenticated");
	reply_done(&r);

	expect_401("garbage", "garbage");
	expect_401("a.b.c", "three garbage parts");

	/* alg none, with a payload that would otherwise pass. */
	b64("{\"alg\":\"none\",\"typ\":\"JWT\"}", h, sizeof(h));
	snprintf(payload, sizeof(payload),
	         "{\"sub\":\"%s\",\"aud\":\"cnlab\",\"exp\":%lld}",
	         F.uid[MEMBER], (long long)(now + 3600));
	b64(payload, p, sizeof(p));
	snprintf(tok, sizeof(tok), "%s.%s.", h, p);
	expect_401(tok, "alg none");

	sign(F.uid[MEMBER], "cnlab", now - 7200, now - 10, SECRET, tok);
	expect_401(tok, "expired");
	sign(F.uid[MEMBER], "cnlab", now, now + 3600,
	     "some other secret of 32 bytes or more", tok);
	expect_401(tok, "wrong key");
	sign(F.uid[MEMBER], "other", now, now + 3600, SECRET, tok);
	expect_401(tok, "wrong audience");
	sign("usr_01HX5V3J9K2M4N6P8Q0R2S4T6V", "cnlab", now, now + 3600, SECRET,
	     tok);
	expect_401(tok, "unknown user");

	/* Signed with the right key but naming no server-side session (no
	 * "jti", or a made-up one): a forged session is refused. */
	sign(F.uid[MEMBER], "cnlab", now, now + 3600, SECRET, tok);
	expect_401(tok, "no session id");
	{
		struct cnl_auth_claims c = {0};

		snprintf(c.sub, sizeof(c.sub), "%s", F.uid[MEMBER]);
		snprintf(c.aud, sizeof(c.aud), "cnlab");
		snprintf(c.jti, sizeof(c.jti),
		         "ses_01HX5V3J9K2M4N6P8Q0R2S4T6V");
		c.iat = now;
		c.exp = now + 3600;
		assert_true(cnl_auth_jwt_sign(&c, (const uint8_t *)SECRET,
		                              strlen(SECRET), tok,
		                              sizeof(tok)) > 0);
		expect_401(tok, "made-up session id");
	}
	/* The control: a login's token passes. */
	http("GET", "/v1/projects", F.token[MEMBER], NULL, &r);
	expect(&r, 200, "control token");
	reply_done(&r);
}

/* A new user named @n (password pw-@n) with a session in @tok. */
static void user_with_session(char *n, char *uid, char *tok)
{
	char pw[80];

	snprintf(n, 64, "%s", fresh("u"));
	make_user(n, uid);
	snprintf(pw, sizeof(pw), "pw-%s", n);
	login(n, pw, tok);
}

static void whoami_status(const char *tok, long want, const char *what)
{
	struct reply r;

	http("GET", "/v1/auth/whoami", tok, NULL, &r);
	expect(&r, want, what);
	reply_done(&r);
}

/* Logout revokes the session on the server: its JWT replayed is 401, and
 * the user's other sessions live on. */
static void test_logout_revokes(void **state)
{
	char n[64], uid[CNL_ID_MAX], tok[CNL_AUTH_JWT_MAX],
	    tok2[CNL_AUTH_JWT_MAX], pw[80], api_tok[64];
	struct reply r;

	user_with_session(n, uid, tok);
	snprintf(pw, sizeof(pw), "pw-%s", n);
	login(n, pw, tok2);
	whoami_status(tok, 200, "before logout");
	http("POST", "/v1/auth/logout", tok, NULL, &r);
	expect(&r, 200, "logout");
	reply_done(&r);
	/* The attack: the logged-out token replayed. */
	whoami_status(tok, 401, "replayed after logout");
	http("POST", "/v1/auth/logout", tok, NULL, &r);
	assert_error(&r, 401, "unauthenticated");
	reply_done(&r);
	whoami_status(tok2, 200, "the other session");
	/* An API token is not a session: logout says how to revoke it. */
	http("POST", "/v1/auth/tokens", tok2, "{\"name\":\"ci\"}", &r);
	expect(&r, 201, "api token");
	snprintf(api_tok, sizeof(api_tok), "%s", str(r.body, "token"));
	reply_done(&r);
	http("POST", "/v1/auth/logout", api_tok, NULL, &r);
	assert_error(&r, 400, "bad_request");
	assert_non_null(strstr(err_message(&r), "token revoke"));
	reply_done(&r);
}

/* Disable: the user's session, API token and password are refused on the
 * very next request (401 naming the disabled account); enable restores
 * the API token, not the session. */
static void test_user_disable(void **state)
{
	char n[64], uid[CNL_ID_MAX], tok[CNL_AUTH_JWT_MAX], api_tok[64];
	char path[160], body[256], pw[80];
	struct reply r;

	user_with_session(n, uid, tok);
	grant(F.token[PADMIN], F.proj_a, n, "member", 200);
	http("POST", "/v1/auth/tokens", tok, "{\"name\":\"ci\"}", &r);
	expect(&r, 201, "api token");
	snprintf(api_tok, sizeof(api_tok), "%s", str(r.body, "token"));
	reply_done(&r);
	whoami_status(api_tok, 200, "api token before");
	/* Only an administrator may disable. */
	snprintf(path, sizeof(path), "/v1/users/%s/disable", n);
	http("POST", path, F.token[PADMIN], NULL, &r);
	assert_error(&r, 403, "forbidden");
	reply_done(&r);
	http("POST", path, F.token[ADMIN], NULL, &r);
	expect(&r, 200, "disable");
	assert_true(json_is_true(json_object_get(r.body, "disabled")));
	reply_done(&r);
	/* The attacks: each credential on the next request. */
	snprintf(path, sizeof(path), "/v1/projects/%s/jobs", F.proj_a);
	http("GET", path, tok, NULL, &r);
	assert_error(&r, 401, "unauthenticated");
	reply_done(&r);
	http("GET", path, api_tok, NULL, &r);
	assert_error(&r, 401, "unauthenticated");
	assert_non_null(strstr(err_message(&r), "disabled"));
	reply_done(&r);
	snprintf(pw, sizeof(pw), "pw-%s", n);
	snprintf(body, sizeof(body), "{\"user\":\"%s\",\"password\":\"%s\"}", n,
	         pw);
	http("POST", "/v1/auth/login", NULL, body, &r);
	assert_error(&r, 401, "unauthenticated");
	assert_non_null(strstr(err_message(&r), "disabled"));
	reply_done(&r);
	/* Shown in user show and list. */
	snprintf(path, sizeof(path), "/v1/users/%s", n);
	http("GET", path, F.token[ADMIN], NULL, &r);
	expect(&r, 200, "user show");
	assert_true(json_is_true(json_object_get(r.body, "disabled")));
	reply_done(&r);
	/* Enable: the API token works again; the session was ended. */
	snprintf(path, sizeof(path), "/v1/users/%s/enable", n);
	http("POST", path, F.token[ADMIN], NULL, &r);
	expect(&r, 200, "enable");
	assert_true(json_is_false(json_object_get(r.body, "disabled")));
	reply_done(&r);
	whoami_status(api_tok, 200, "api token after enable");
	whoami_status(tok, 401, "session after enable");
	http("POST", "/v1/auth/login", NULL, body, &r);
	expect(&r, 200, "login after enable");
	reply_done(&r);
	/* The last enabled administrator cannot be disabled. */
	snprintf(path, sizeof(path), "/v1/users/%s/disable", who_name[ADMIN]);
	http("POST", path, F.token[ADMIN], NULL, &r);
	assert_error(&r, 409, "conflict");
	assert_non_null(strstr(err_message(&r), "last enabled"));
	reply_done(&r);
	whoami_status(F.token[ADMIN], 200, "admin still in");
	http("POST", "/v1/users/nobody-at-all/disable", F.token[ADMIN], NULL,
	     &r);
	assert_error(&r, 404, "not_found");
	reply_done(&r);
}

/* A membership removed: the user's next request on the project is 404
 * (as for any project they are not in), with the same token. */
static void test_membership_removed_is_immediate(void **state)
{
	char n[64], uid[CNL_ID_MAX], tok[CNL_AUTH_JWT_MAX], path[160];
	struct reply r;

	user_with_session(n, uid, tok);
	grant(F.token[PADMIN], F.proj_a, n, "member", 200);
	snprintf(path, sizeof(path), "/v1/projects/%s/jobs", F.proj_a);
	http("GET", path, tok, NULL, &r);
	expect(&r, 200, "as member");
	reply_done(&r);
	snprintf(path, sizeof(path), "/v1/projects/%s/members/%s", F.proj_a, n);
	http("DELETE", path, F.token[PADMIN], NULL, &r);
	expect(&r, 200, "remove member");
	reply_done(&r);
	snprintf(path, sizeof(path), "/v1/projects/%s/jobs", F.proj_a);
	http("GET", path, tok, NULL, &r);
	assert_error(&r, 404, "not_found");
	reply_done(&r);
	http("POST", path, tok, "{\"command\":\"a\",\"gpu\":\"h200-7g.141gb\"}",
	     &r);
	assert_error(&r, 404, "not_found");
	reply_done(&r);
}

/* One request of the matrix; %A %B %a %b become proj_a/b and job_a/b. */
struct row {
	const char *method;
	const char *path;
	const char *body; /* "%N" becomes a fresh name */
	long want[NWHO];
};

static void expand(const char *in, char *out, size_t len)
{
	size_t o = 0;

	for (const char *s = in; *s && o + 64 < len; s++) {
		const char *sub = NULL;

		if (s[0] == '%' && s[1]) {
			switch (s[1]) {
			case 'A':
				sub = F.proj_a;
				break;
			case 'B':
				sub = F.proj_b;
				break;
			case 'a':
				sub = F.job_a;
				break;
			case 'b':
				sub = F.job_b;
				break;
			case 'N':
				sub = fresh("n");
				break;
			}
		}
		if (sub) {
			o += (size_t)snprintf(out + o, len - o, "%s", sub);
			s++;
		} else {
			out[o++] = *s;
		}
	}
	out[o] = '\0';
}

static void test_role_matrix(void **state)
{
	/* admin, project-admin A, member A, viewer A, member B only */
	static const struct row rows[] = {
	    {"GET", "/v1/projects", NULL, {200, 200, 200, 200, 200}},
	    {"POST",
	     "/v1/projects",
	     "{\"name\":\"%N\"}",
	     {201, 403, 403, 403, 403}},
	    {"POST",
	     "/v1/users",
	     "{\"name\":\"%N\",\"password\":\"x\"}",
	     {201, 403, 403, 403, 403}},
	    {"POST",
	     "/v1/projects/%A/members",
	     "{\"user\":\"view\",\"role\":\"viewer\"}",
	     {200, 200, 403, 403, 404}},
	    {"POST",
	     "/v1/projects/%B/members",
	     "{\"user\":\"bob\",\"role\":\"member\"}",
	     {200, 404, 404, 404, 403}},
	    {"POST",
	     "/v1/projects/%A/jobs",
	     "{\"command\":\"echo\",\"gpu\":\"h200-1g.18gb\",\"priority\":2}",
	     {201, 201, 201, 403, 404}},
	    {"POST",
	     "/v1/projects/%B/jobs",
	     "{\"command\":\"echo\",\"gpu\":\"h200-1g.18gb\"}",
	     {201, 404, 404, 404, 201}},
	    {"GET", "/v1/projects/%A/jobs", NULL, {200, 200, 200, 200, 404}},
	    {"GET", "/v1/projects/%B/jobs", NULL, {200, 404, 404, 404, 200}},
	    {"GET", "/v1/jobs/%a", NULL, {200, 200, 200, 200, 404}},
	    {"GET", "/v1/jobs/%b", NULL, {200, 404, 404, 404, 200}},
	    {"GET",
	     "/v1/projects/prj_01HX5V3J9K2M4N6P8Q0R2S4T6V/jobs",
	     NULL,
	     {404, 404, 404, 404, 404}},
	    {"GET",
	     "/v1/jobs/job_01HX5V3J9K2M4N6P8Q0R2S4T6V",
	     NULL,
	     {404, 404, 404, 404, 404}},
	};
	char path[256], body[256];
	struct reply r;

	/* The grants re-grant roles already held, so the matrix is stable. */
	for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
		for (int w = 0; w < NWHO; w++) {
			expand(rows[i].path, path, sizeof(path));
			if (rows[i].body)
				expand(rows[i].body, body, sizeof(body));
			http(rows[i].method, path, F.token[w],
			     rows[i].body ? body : NULL, &r);
			if (r.status != rows[i].want[w])
				fail_msg("%s %s as %s: want %ld, got %ld %s",
				         rows[i].method, rows[i].path,
				         who_name[w], rows[i].want[w], r.status,
				         r.raw);
			if (r.status >= 400)
				assert_error(&r, r.status,
				             r.status == 403   ? "forbidden"
				             : r.status == 404 ? "not_found"
				                               : "?");
			reply_done(&r);
		}
	}
}

static void test_404_indistinguishable(void **state)
{
	struct reply other, missing;
	char path[128];

	/* A project that exists but is not yours reads as one that does not. */
	snprintf(path, sizeof(path), "/v1/projects/%s/jobs", F.proj_b);
	http("GET", path, F.token[VIEWER], NULL, &other);
	http("GET", "/v1/projects/prj_01HX5V3J9K2M4N6P8Q0R2S4T6V/jobs",
	     F.token[VIEWER], NULL, &missing);
	assert_error(&other, 404, "not_found");
	assert_string_equal(other.raw, missing.raw);
	reply_done(&other);
	reply_done(&missing);
}

static void test_project_visibility(void **state)
{
	struct reply r;
	json_t *it;
	size_t i;
	bool a = false, b = false, sys = false;

	http("GET", "/v1/projects?limit=1000", F.token[VIEWER], NULL, &r);
	expect(&r, 200, "list as viewer");
	json_array_foreach (json_object_get(r.body, "items"), i, it) {
		a |= strcmp(str(it, "id"), F.proj_a) == 0;
		b |= strcmp(str(it, "id"), F.proj_b) == 0;
	}
	assert_true(a);
	assert_false(b);
	assert_int_equal(json_array_size(json_object_get(r.body, "items")), 1);
	reply_done(&r);

	a = b = false;
	http("GET", "/v1/projects?limit=1000", F.token[ADMIN], NULL, &r);
	expect(&r, 200, "list as admin");
	json_array_foreach (json_object_get(r.body, "items"), i, it) {
		a |= strcmp(str(it, "id"), F.proj_a) == 0;
		b |= strcmp(str(it, "id"), F.proj_b) == 0;
		sys |= strcmp(str(it, "name"), "system") == 0;
	}
	assert_true(a && b && sys);
	reply_done(&r);
}

static void test_paging(void **state)
{
	struct reply r;
	char path[256], next[CNL_ID_MAX] = "";
	int pages = 0, total = 0;
	char seen[64][CNL_ID_MAX];

	for (int i = 0; i < 3; i++) {
		char id[CNL_ID_MAX];

		make_project(fresh("page"), id);
	}
	do {
		json_t *items, *it;
		size_t i;

		snprintf(path, sizeof(path), "/v1/projects?limit=2%s%s",
		         next[0] ? "&after=" : "", next);
		http("GET", path, F.token[ADMIN], NULL, &r);
		expect(&r, 200, "page");
		items = json_object_get(r.body, "items");
		assert_true(json_array_size(items) <= 2);
		json_array_foreach (items, i, it) {
			assert_true(total < 64);
			/* Ordered by id, no repeats across pages. */
			if (total)
				assert_true(
				    strcmp(seen[total - 1], str(it, "id")) < 0);
			snprintf(seen[total++], CNL_ID_MAX, "%s",
			         str(it, "id"));
		}
		if (json_is_string(json_object_get(r.body, "next")))
			snprintf(next, sizeof(next), "%s", str(r.body, "next"));
		else
			next[0] = '\0';
		pages++;
		reply_done(&r);
	} while (next[0] && pages < 100);
	assert_true(total >= 6); /* system, A, B and the three above */
	assert_true(pages >= 3);

	http("GET", "/v1/projects?limit=0", F.token[ADMIN], NULL, &r);
	assert_error(&r, 400, "bad_request");
	assert_non_null(strstr(err_message(&r), "\"limit\""));
	reply_done(&r);
	http("GET", "/v1/projects?limit=abc", F.token[ADMIN], NULL, &r);
	assert_error(&r, 400, "bad_request");
	reply_done(&r);
	/* A cursor that cannot be an id (a byte past ASCII, a space, a
	 * control character): refused by name on every store. */
	http("GET", "/v1/projects?after=%ff", F.token[ADMIN], NULL, &r);
	assert_error(&r, 400, "bad_request");
	assert_non_null(strstr(err_message(&r), "\"after\""));
	reply_done(&r);
	http("GET", "/v1/projects?after=a%20b", F.token[ADMIN], NULL, &r);
	assert_error(&r, 400, "bad_request");
	reply_done(&r);
	http("GET", "/v1/projects?after=prj_%01", F.token[ADMIN], NULL, &r);
	assert_error(&r, 400, "bad_request");
	reply_done(&r);
}

static void test_role_change_is_immediate(void **state)
{
	char uid[CNL_ID_MAX], tok[CNL_AUTH_JWT_MAX], path[128];
	const char *name = fresh("temp");
	char n[64];
	struct reply r;

	snprintf(n, sizeof(n), "%s", name);
	make_user(n, uid);
	{
		char pw[80];

		snprintf(pw, sizeof(pw), "pw-%s", n);
		login(n, pw, tok);
	}
	grant(F.token[PADMIN], F.proj_a, n, "member", 200);
	snprintf(path, sizeof(path), "/v1/projects/%s/jobs", F.proj_a);
	http("POST", path, tok, "{\"command\":\"a\",\"gpu\":\"h200-7g.141gb\"}",
	     &r);
	expect(&r, 201, "as member");
	reply_done(&r);
	/* Demoted: the same token can still read but no longer submit. */
	grant(F.token[PADMIN], F.proj_a, n, "viewer", 200);
	http("POST", path, tok, "{\"command\":\"a\",\"gpu\":\"h200-7g.141gb\"}",
	     &r);
	assert_error(&r, 403, "forbidden");
	reply_done(&r);
	http("GET", path, tok, NULL, &r);
	expect(&r, 200, "as viewer");
	reply_done(&r);
}

/* The running server's store is the API's, used under its lock only (the
 * loop thread's cycles commit on it): a test reads the database through a
 * connection of its own. */
static struct cnl_store *own_store(void)
{
	struct cnl_store *s;
	char err[256];

	if (cnl_store_open_sqlite(F.s.path, &s, err, sizeof(err)) < 0)
		fail_msg("open %s: %s", F.s.path, err);
	return s;
}

static void test_admin_rules(void **state)
{
	char uid[CNL_ID_MAX], tok[CNL_AUTH_JWT_MAX], sys[CNL_ID_MAX];
	char n[64], pw[80], path[128];
	struct cnl_store_project p;
	struct reply r;

	struct cnl_store *own = own_store();

	assert_int_equal(cnl_store_project_get_by_name(own, "system", &p), 0);
	cnl_store_close(own);
	snprintf(sys, sizeof(sys), "%s", p.id);
	/* A project-admin cannot hand out "admin" ... */
	snprintf(path, sizeof(path), "/v1/projects/%s/members", F.proj_a);
	http("POST", path, F.token[PADMIN],
	     "{\"user\":\"mem\",\"role\":\"admin\"}", &r);
	assert_error(&r, 400, "bad_request");
	assert_non_null(strstr(err_message(&r), "\"role\""));
	reply_done(&r);
	http("POST", path, F.token[PADMIN],
	     "{\"user\":\"mem\",\"role\":\"god\"}", &r);
	assert_error(&r, 400, "bad_request");
	reply_done(&r);
	http("POST", path, F.token[PADMIN],
	     "{\"user\":\"nosuchuser\",\"role\":\"viewer\"}", &r);
	assert_error(&r, 404, "not_found");
	reply_done(&r);
	/* ... nor touch the system project. */
	grant(F.token[PADMIN], sys, "alice", "admin", 404);

	/* An administrator can make another one, effective at once. */
	snprintf(n, sizeof(n), "%s", fresh("ops"));
	make_user(n, uid);
	snprintf(pw, sizeof(pw), "pw-%s", n);
	login(n, pw, tok);
	http("POST", "/v1/projects", tok, "{\"name\":\"by-new-admin\"}", &r);
	assert_error(&r, 403, "forbidden");
	reply_done(&r);
	grant(F.token[ADMIN], sys, n, "admin", 200);
	http("POST", "/v1/projects", tok, "{\"name\":\"by-new-admin\"}", &r);
	expect(&r, 201, "new admin creates a project");
	reply_done(&r);
	/* Duplicate names are 409. */
	http("POST", "/v1/projects", tok, "{\"name\":\"by-new-admin\"}", &r);
	assert_error(&r, 409, "conflict");
	reply_done(&r);
	http("POST", "/v1/users", tok, "{\"name\":\"mem\",\"password\":\"x\"}",
	     &r);
	assert_error(&r, 409, "conflict");
	reply_done(&r);
}

static void test_body_too_large(void **state)
{
	size_t n = CNL_HTTP_BODY_MAX_DEFAULT + 1;
	char *big = malloc(n + 1);
	struct reply r;

	assert_non_null(big);
	memset(big, ' ', n);
	big[0] = '{';
	big[n - 1] = '}';
	big[n] = '\0';
	http_n("POST", "/v1/projects", F.token[ADMIN], big, n, NULL, &r);
	assert_error(&r, 413, "payload_too_large");
	reply_done(&r);
	/* Refused before authentication too. */
	http_n("POST", "/v1/projects", NULL, big, n, NULL, &r);
	assert_error(&r, 413, "payload_too_large");
	reply_done(&r);
	/* Chunked: no Content-Length, so it is counted as it arrives. */
	http_n("POST", "/v1/projects", F.token[ADMIN], big, n,
	       "Transfer-Encoding: chunked", &r);
	assert_error(&r, 413, "payload_too_large");
	reply_done(&r);
	/* Exactly the limit is read and parsed (and is valid JSON). */
	http_n("POST", "/v1/projects", F.token[ADMIN], big, n - 1, NULL, &r);
	assert_error(&r, 400, "bad_request");
	reply_done(&r);
	free(big);
}

static void test_strict_bodies(void **state)
{
	static const struct {
		const char *body;
		const char *field; /* must appear in the message */
	} cases[] = {
	    {"{\"command\":\"x\",\"gpu\":\"h100-1\",\"bogus\":1}", "\"bogus\""},
	    {"{\"command\":5,\"gpu\":\"h100-1\"}", "\"command\""},
	    {"{\"command\":\"x\",\"gpu\":true}", "\"gpu\""},
	    {"{\"command\":\"x\",\"gpu\":\"h100-1\",\"priority\":\"urgent\"}",
	     "\"priority\""},
	    {"{\"command\":\"x\",\"gpu\":\"h100-1\",\"priority\":9}",
	     "\"priority\""},
	    {"{\"command\":\"x\",\"gpu\":\"h100-1\",\"priority\":1.0}",
	     "\"priority\""},
	    {"{\"gpu\":\"h100-1\"}", "\"command\""},
	    {"{\"command\":\"\",\"gpu\":\"h100-1\"}", "\"command\""},
	    {"{\"command\":\"x\",", "line 1"},
	    {"[1,2]", "JSON object"},
	    {"{\"command\":\"x\",\"command\":\"y\",\"gpu\":\"h100-1\"}",
	     "command"},
	    /* The fields beyond the shape. */
	    {"{\"command\":\"x\",\"gpu\":\"any-5\",\"gpu_types\":\"h100\"}",
	     "\"gpu_types\""},
	    {"{\"command\":\"x\",\"gpu\":\"any-5\",\"gpu_types\":[]}",
	     "\"gpu_types\""},
	    {"{\"command\":\"x\",\"gpu\":\"any-5\",\"gpu_types\":[5]}",
	     "\"gpu_types\""},
	    {"{\"command\":\"x\",\"gpu\":\"any-5\",\"gpu_types\":[\"z80\"]}",
	     "\"z80\" is not a GPU type"},
	    {"{\"command\":\"x\",\"gpu\":\"any-5\",\"gpu_types\":[\"h100\","
	     "\"h1\"]}",
	     "\"h1\" is not a GPU type"},
	    {"{\"command\":\"x\",\"gpu\":\"any-5\",\"gpu_types\":[\"a\",\"a\","
	     "\"a\",\"a\",\"a\",\"a\",\"a\",\"a\",\"a\",\"a\",\"a\",\"a\","
	     "\"a\","
	     "\"a\",\"a\",\"a\",\"a\"]}",
	     "\"gpu_types\""},
	    {"{\"command\":\"x\",\"gpu\":\"h100-25\",\"gpu_types\":"
	     "[\"a100\"]}",
	     "\"gpu_types\": conflicts with the shape \"h100-25\""},
	    {"{\"command\":\"x\",\"gpu\":\"cpu\",\"gpu_types\":[\"a100\"]}",
	     "\"gpu_types\": conflicts with the shape \"cpu\""},
	    {"{\"command\":\"x\",\"gpu\":\"any-3g.40gb\",\"gpu_types\":"
	     "[\"l40s\"]}",
	     "\"gpu_types\": conflicts"},
	    {"{\"command\":\"x\",\"profile\":\"h100-25pct\",\"gpu_types\":"
	     "[\"l4\"]}",
	     "\"gpu_types\": conflicts"},
	    {"{\"command\":\"x\",\"gpu\":\"any-5\",\"dataset\":\"\"}",
	     "\"dataset\""},
	    {"{\"command\":\"x\",\"gpu\":\"any-5\",\"dataset\":\".hidden\"}",
	     "\"dataset\""},
	    {"{\"command\":\"x\",\"gpu\":\"any-5\",\"dataset\":\"a b\"}",
	     "\"dataset\""},
	    {"{\"command\":\"x\",\"gpu\":\"any-5\",\"dataset\":7}",
	     "\"dataset\""},
	    {"{\"command\":\"x\",\"gpu\":\"any-5\",\"dataset\":\"a123456789"
	     "b123456789c123456789d123456789e123456789f123456789g1234567\"}",
	     "\"dataset\""},
	    {"{\"command\":\"x\",\"gpu\":\"any-5\",\"nodes\":0}", "\"nodes\""},
	    {"{\"command\":\"x\",\"gpu\":\"any-5\",\"nodes\":65}", "\"nodes\""},
	    {"{\"command\":\"x\",\"gpu\":\"any-5\",\"nodes\":\"2\"}",
	     "\"nodes\""},
	    {"{\"command\":\"x\",\"gpu\":\"any-5\",\"nodes\":1.5}",
	     "\"nodes\""},
	    {"{\"command\":\"x\",\"gpu\":\"any-5\",\"preemptible\":\"no\"}",
	     "\"preemptible\""},
	    {"{\"command\":\"x\",\"gpu\":\"any-5\",\"cpu_milli\":0}",
	     "\"cpu_milli\""},
	    {"{\"command\":\"x\",\"gpu\":\"any-5\",\"mem_mib\":-1}",
	     "\"mem_mib\""},
	    {"{\"command\":\"x\",\"gpu\":\"anything-5\"}", "\"gpu\""},
	};
	char path[128];
	struct reply r;

	snprintf(path, sizeof(path), "/v1/projects/%s/jobs", F.proj_a);
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		http("POST", path, F.token[MEMBER], cases[i].body, &r);
		assert_error(&r, 400, "bad_request");
		if (!strstr(err_message(&r), cases[i].field))
			fail_msg("body %s: message \"%s\" does not name %s",
			         cases[i].body, err_message(&r),
			         cases[i].field);
		reply_done(&r);
	}
	http_n("POST", path, F.token[MEMBER], "", 0, NULL, &r);
	assert_error(&r, 400, "bad_request");
	reply_done(&r);
	http("POST", "/v1/projects", F.token[ADMIN], "{\"name\":\"a b\"}", &r);
	assert_error(&r, 400, "bad_request");
	assert_non_null(strstr(err_message(&r), "\"name\""));
	reply_done(&r);
}

static void test_404_405(void **state)
{
	struct reply r;
	char path[128];

	http("GET", "/nope", NULL, NULL, &r);
	assert_error(&r, 404, "not_found");
	reply_done(&r);
	http("GET", "/v1/projects/", F.token[ADMIN], NULL, &r);
	assert_error(&r, 404, "not_found");
	reply_done(&r);
	http("DELETE", "/v1/projects", F.token[ADMIN], NULL, &r);
	assert_error(&r, 405, "method_not_allowed");
	assert_string_equal(r.allow, "GET, POST");
	reply_done(&r);
	snprintf(path, sizeof(path), "/v1/projects/%s/members", F.proj_a);
	http("DELETE", path, F.token[ADMIN], NULL, &r);
	assert_error(&r, 405, "method_not_allowed");
	assert_string_equal(r.allow, "GET, POST");
	reply_done(&r);
	http("POST", "/healthz", NULL, "{}", &r);
	assert_error(&r, 405, "method_not_allowed");
	assert_string_equal(r.allow, "GET");
	reply_done(&r);
}

/*
 * An Idempotency-Key is bound to its project: the same key in another
 * project is 422 (never a replay of a job of another project); a key with
 * a byte outside printable ASCII is 400.
 */
static void test_idempotency_scope(void **state)
{
	char path[128], hdr[200];
	const char *body = "{\"command\":\"train\",\"gpu\":\"h200-2g.35gb\"}";
	struct reply r;

	(void)state;
	snprintf(hdr, sizeof(hdr), "Idempotency-Key: %s", fresh("scope-"));
	snprintf(path, sizeof(path), "/v1/projects/%s/jobs", F.proj_a);
	http_n("POST", path, F.token[ADMIN], body, 0, hdr, &r);
	expect(&r, 201, "first, project a");
	reply_done(&r);
	snprintf(path, sizeof(path), "/v1/projects/%s/jobs", F.proj_b);
	http_n("POST", path, F.token[ADMIN], body, 0, hdr, &r);
	assert_error(&r, 422, "idempotency_conflict");
	reply_done(&r);
	snprintf(path, sizeof(path), "/v1/projects/%s/jobs", F.proj_a);
	http_n("POST", path, F.token[ADMIN], body, 0,
	       "Idempotency-Key: caf\xc3\xa9", &r);
	assert_error(&r, 400, "bad_request");
	assert_non_null(strstr(err_message(&r), "Idempotency-Key"));
	reply_done(&r);
}

static void test_idempotent_job(void **state)
{
	char path[128], key[160], id[CNL_ID_MAX], hdr[200];
	struct reply r;

	snprintf(path, sizeof(path), "/v1/projects/%s/jobs", F.proj_a);
	snprintf(hdr, sizeof(hdr), "Idempotency-Key: %s", fresh("key-"));
	http_n(
	    "POST", path, F.token[MEMBER],
	    "{\"command\":\"train\",\"gpu\":\"h200-2g.35gb\",\"priority\":1}",
	    0, hdr, &r);
	expect(&r, 201, "first");
	snprintf(id, sizeof(id), "%s", str(r.body, "id"));
	assert_string_equal(str(r.body, "state"), "pending");
	assert_string_equal(str(r.body, "project_id"), F.proj_a);
	assert_string_equal(str(r.body, "user_id"), F.uid[MEMBER]);
	reply_done(&r);
	/* The retry returns the original, with 200. */
	http_n(
	    "POST", path, F.token[MEMBER],
	    "{\"command\":\"train\",\"gpu\":\"h200-2g.35gb\",\"priority\":1}",
	    0, hdr, &r);
	expect(&r, 200, "retry");
	assert_string_equal(str(r.body, "id"), id);
	assert_string_equal(str(r.body, "command"), "train");
	reply_done(&r);
	/* The same key with another body: 422 naming the conflict, and no
	 * silent replay of the original. */
	http_n(
	    "POST", path, F.token[MEMBER],
	    "{\"command\":\"rm -rf\",\"gpu\":\"h200-2g.35gb\",\"priority\":1}",
	    0, hdr, &r);
	assert_error(&r, 422, "idempotency_conflict");
	assert_non_null(strstr(err_message(&r), "Idempotency-Key"));
	reply_done(&r);
	/* Another user with the same key: the key is invisible to them
	 * (no 409 that tells it exists); they get their own new job. */
	http_n(
	    "POST", path, F.token[PADMIN],
	    "{\"command\":\"train\",\"gpu\":\"h200-2g.35gb\",\"priority\":1}",
	    0, hdr, &r);
	expect(&r, 201, "other user, same key");
	assert_string_not_equal(str(r.body, "id"), id);
	assert_string_equal(str(r.body, "user_id"), F.uid[PADMIN]);
	reply_done(&r);
	/* ... and the first user's retry still replays their own job. */
	http_n(
	    "POST", path, F.token[MEMBER],
	    "{\"command\":\"train\",\"gpu\":\"h200-2g.35gb\",\"priority\":1}",
	    0, hdr, &r);
	expect(&r, 200, "retry after the other user");
	assert_string_equal(str(r.body, "id"), id);
	reply_done(&r);
	/* Without a key, two posts make two jobs. */
	http("POST", path, F.token[MEMBER],
	     "{\"command\":\"train\",\"gpu\":\"h200-2g.35gb\"}", &r);
	expect(&r, 201, "no key");
	assert_string_not_equal(str(r.body, "id"), id);
	reply_done(&r);
	/* A malformed key is named. */
	memset(key, 'k', sizeof(key) - 1);
	key[sizeof(key) - 1] = '\0';
	snprintf(hdr, sizeof(hdr), "Idempotency-Key: %.150s", key);
	http_n("POST", path, F.token[MEMBER],
	       "{\"command\":\"train\",\"gpu\":\"h200-2g.35gb\"}", 0, hdr, &r);
	assert_error(&r, 400, "bad_request");
	assert_non_null(strstr(err_message(&r), "Idempotency-Key"));
	reply_done(&r);
	/* The job reads back. */
	snprintf(path, sizeof(path), "/v1/jobs/%s", id);
	http("GET", path, F.token[VIEWER], NULL, &r);
	expect(&r, 200, "get job");
	assert_string_equal(str(r.body, "gpu"), "h200-2g.35gb");
	assert_string_equal(str(r.body, "priority"), "normal");
	reply_done(&r);
}

/* Read the whole audit log through a second handle. */
static int audit_all(struct cnl_store *s, struct cnl_store_audit **ret)
{
	int total = 0, n;
	int64_t after = 0;
	struct cnl_store_audit *all = NULL;

	do {
		all = realloc(all, (size_t)(total + 1000) * sizeof(*all));
		assert_non_null(all);
		assert_int_equal(
		    cnl_store_audit_list(s, after, 1000, all + total, &n), 0);
		total += n;
		if (n)
			after = all[total - 1].seq;
	} while (n == 1000);
	*ret = all;
	return total;
}

/*
 * Keep the records of requests, dropping the scheduler's decisions
 * ("sched.*", api_decisions.c), which a submission adds besides its own
 * record; their number goes to *@ret_sched.
 */
static int requests_only(struct cnl_store_audit *a, int n, int *ret_sched)
{
	int k = 0;

	*ret_sched = 0;
	for (int i = 0; i < n; i++) {
		if (strncmp(a[i].action, "sched.", 6) == 0) {
			++*ret_sched;
			continue;
		}
		a[k++] = a[i];
	}
	return k;
}

static void test_audit(void **state)
{
	struct cnl_store *s;
	struct cnl_store_audit *a;
	char err[256], path[128], hdr[128];
	int before, after, i, sched0, sched1;
	struct reply r;
	bool login_fail = false, denied = false, bootstrap = false;

	assert_int_equal(cnl_store_open_sqlite(F.s.path, &s, err, sizeof(err)),
	                 0);
	before = requests_only(a, audit_all(s, &a), &sched0);
	free(a);

	/* A read appends nothing. */
	http("GET", "/v1/projects", F.token[MEMBER], NULL, &r);
	reply_done(&r);
	after = requests_only(a, audit_all(s, &a), &sched1);
	free(a);
	assert_int_equal(after, before);

	/* Each state-changing request appends exactly one, whatever result. */
	snprintf(path, sizeof(path), "/v1/projects/%s/jobs", F.proj_a);
	snprintf(hdr, sizeof(hdr), "Idempotency-Key: %s", fresh("audit-"));
	http_n("POST", path, F.token[MEMBER],
	       "{\"command\":\"c\",\"gpu\":\"h100-10\"}", 0, hdr, &r);
	expect(&r, 201, "audited create");
	reply_done(&r);
	http_n("POST", path, F.token[MEMBER],
	       "{\"command\":\"c\",\"gpu\":\"h100-10\"}", 0, hdr, &r);
	expect(&r, 200, "audited replay");
	reply_done(&r);
	http("POST", "/v1/projects", F.token[VIEWER], "{\"name\":\"x\"}", &r);
	reply_done(&r);
	http("POST", "/v1/auth/login", NULL,
	     "{\"user\":\"view\",\"password\":\"nope\"}", &r);
	reply_done(&r);
	after = audit_all(s, &a);
	/* The create's four submission stages, in order, before its own
	 * record (the replay adds none). */
	for (i = 0; i < after; i++)
		if (strcmp(a[i].action, "job.create") == 0 &&
		    strcmp(a[i].result, "201") == 0 && i >= 4 &&
		    strncmp(a[i].target, "job_", 4) == 0 &&
		    strcmp(a[i - 4].target, a[i].target) == 0)
			break;
	assert_true(i < after);
	assert_string_equal(a[i - 4].action, "sched.auth");
	assert_string_equal(a[i - 4].actor, F.uid[MEMBER]);
	assert_string_equal(a[i - 3].action, "sched.quota");
	assert_string_equal(a[i - 2].action, "sched.queue");
	assert_string_equal(a[i - 1].action, "sched.admission");
	after = requests_only(a, after, &sched1);
	assert_true(sched1 >= sched0 + 4);
	assert_int_equal(after, before + 4);

	assert_string_equal(a[before].actor, F.uid[MEMBER]);
	assert_string_equal(a[before].action, "job.create");
	assert_string_equal(a[before].result, "201");
	assert_int_equal(strncmp(a[before].target, "job_", 4), 0);
	assert_string_equal(a[before + 1].result, "200 replayed");
	assert_string_equal(a[before + 1].target, a[before].target);
	assert_string_equal(a[before + 2].actor, F.uid[VIEWER]);
	assert_string_equal(a[before + 2].action, "project.create");
	assert_string_equal(a[before + 2].result, "403 forbidden");
	assert_string_equal(a[before + 3].action, "auth.login");
	assert_string_equal(a[before + 3].result, "401 unauthenticated");
	for (i = 0; i < after; i++) {
		login_fail |= strcmp(a[i].result, "401 unauthenticated") == 0;
		denied |= strcmp(a[i].result, "404 not_found") == 0;
		bootstrap |= strcmp(a[i].action, "admin.bootstrap") == 0;
	}
	assert_true(login_fail && denied && bootstrap);
	free(a);
	assert_int_equal(cnl_store_audit_verify(s, NULL), 0);
	cnl_store_close(s);
}

static void noop_handler(void *call, struct cnl_http_request *req,
                         struct cnl_http_response *resp)
{
	cnl_http_reply(resp, 200, json_object());
}

static void test_route_table_check(void **state)
{
	const struct cnl_http_route *real;
	struct cnl_http_route bad[128];
	struct cnl_http_server *srv = NULL;
	size_t n;
	char err[256];

	real = cnl_api_routes(&n);
	assert_true(n < CNL_ARRAY_SIZE(bad));
	assert_int_equal(cnl_api_routes_check(real, n, err, sizeof(err)), 0);

	/* A row whose permission was left out is refused, naming it. */
	memcpy(bad, real, n * sizeof(*bad));
	bad[n] = (struct cnl_http_route){"GET", "/v1/no-such-thing",
	                                 .handler = noop_handler};
	assert_int_equal(cnl_http_routes_check(bad, n + 1, err, sizeof(err)),
	                 -CNL_ECONFIG);
	assert_non_null(strstr(err, "/v1/no-such-thing"));
	assert_non_null(strstr(err, "no permission"));
	/* ... and the server does not start on it. */
	assert_int_equal(
	    cnl_api_start(F.s.api,
	                  &(struct cnl_api_listen){.host = "127.0.0.1",
	                                           .routes = bad,
	                                           .nroutes = n + 1},
	                  &srv, err, sizeof(err)),
	    -CNL_ECONFIG);
	assert_null(srv);
	assert_int_equal(cnl_http_server_new(
	                     &(struct cnl_http_config){
	                         .host = "127.0.0.1",
	                         .routes = bad,
	                         .nroutes = n + 1,
	                         .serve = cnl_api_serve,
	                         .ud = F.s.api,
	                     },
	                     &srv, err, sizeof(err)),
	                 -CNL_ECONFIG);
	assert_null(srv);

	/* An out-of-range permission value too. */
	bad[n].perm = (enum cnl_http_perm)99;
	assert_int_equal(cnl_http_routes_check(bad, n + 1, err, sizeof(err)),
	                 -CNL_ECONFIG);

	/* PUBLIC anywhere else. */
	bad[n].perm = CNL_PERM_PUBLIC;
	assert_int_equal(cnl_http_routes_check(bad, n + 1, err, sizeof(err)),
	                 0);
	assert_int_equal(cnl_api_routes_check(bad, n + 1, err, sizeof(err)),
	                 -CNL_ECONFIG);
	assert_non_null(strstr(err, "PUBLIC"));

	/* A project permission with no project in the path. */
	bad[n].perm = CNL_PERM_PROJECT_VIEW;
	assert_int_equal(cnl_api_routes_check(bad, n + 1, err, sizeof(err)),
	                 -CNL_ECONFIG);

	/* A state-changing row without an audit action. */
	bad[n] = (struct cnl_http_route){"POST", "/v1/things", CNL_PERM_ADMIN,
	                                 NULL, noop_handler};
	assert_int_equal(cnl_http_routes_check(bad, n + 1, err, sizeof(err)),
	                 -CNL_ECONFIG);
	assert_non_null(strstr(err, "audit"));

	/* Duplicates, malformed patterns, missing handlers. */
	bad[n] = real[0];
	assert_int_equal(cnl_http_routes_check(bad, n + 1, err, sizeof(err)),
	                 -CNL_ECONFIG);
	bad[n] = (struct cnl_http_route){
	    "GET", "/v1/{Bad}", CNL_PERM_AUTHENTICATED, NULL, noop_handler};
	assert_int_equal(cnl_http_routes_check(bad, n + 1, err, sizeof(err)),
	                 -CNL_ECONFIG);
	bad[n] = (struct cnl_http_route){
	    "GET", "/v1//x", CNL_PERM_AUTHENTICATED, NULL, noop_handler};
	assert_int_equal(cnl_http_routes_check(bad, n + 1, err, sizeof(err)),
	                 -CNL_ECONFIG);
	bad[n] = (struct cnl_http_route){"GET", "/v1/x", CNL_PERM_AUTHENTICATED,
	                                 NULL, NULL};
	assert_int_equal(cnl_http_routes_check(bad, n + 1, err, sizeof(err)),
	                 -CNL_ECONFIG);
	bad[n] = (struct cnl_http_route){
	    "FETCH", "/v1/x", CNL_PERM_AUTHENTICATED, NULL, noop_handler};
	assert_int_equal(cnl_http_routes_check(bad, n + 1, err, sizeof(err)),
	                 -CNL_ECONFIG);
	/* The control: a well-formed extra row passes. */
	bad[n] =
	    (struct cnl_http_route){"GET", "/v1/x/{project}",
	                            CNL_PERM_PROJECT_VIEW, NULL, noop_handler};
	assert_int_equal(cnl_api_routes_check(bad, n + 1, err, sizeof(err)), 0);
}

static void test_bootstrap_rules(void **state)
{
	struct cnl_store *s;
	struct cnl_store_project p = {0};
	char dir[64], path[128], err[256];

	/* Already bootstrapped: nothing to do. */
	s = own_store();
	assert_int_equal(
	    cnl_api_bootstrap(s, "other", "pw", 10, err, sizeof(err)), 1);
	cnl_store_close(s);
	/* A store with projects but no system project is refused. */
	snprintf(dir, sizeof(dir), "/tmp/cnl-boot-XXXXXX");
	assert_non_null(mkdtemp(dir));
	snprintf(path, sizeof(path), "%s/cnlab.db", dir);
	assert_int_equal(cnl_store_open_sqlite(path, &s, err, sizeof(err)), 0);
	snprintf(p.id, sizeof(p.id), "prj_01HX5V3J9K2M4N6P8Q0R2S4T6V");
	snprintf(p.name, sizeof(p.name), "existing");
	assert_int_equal(cnl_store_project_create(s, &p), 0);
	assert_int_equal(
	    cnl_api_bootstrap(s, "root", "pw", 10, err, sizeof(err)),
	    -CNL_ECONFIG);
	assert_int_equal(cnl_store_project_get_by_name(s, "system", &p),
	                 -CNL_ENOTFOUND);
	cnl_store_close(s);
	snprintf(path, sizeof(path), "%s/cnlab.db", dir);
	unlink(path);
	snprintf(path, sizeof(path), "%s/cnlab.db-wal", dir);
	unlink(path);
	snprintf(path, sizeof(path), "%s/cnlab.db-shm", dir);
	unlink(path);
	rmdir(dir);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_healthz),
	    cmocka_unit_test(test_healthz_without_lock),
	    cmocka_unit_test(test_reads_without_lock),
	    cmocka_unit_test(test_login),
	    cmocka_unit_test(test_tokens_refused),
	    cmocka_unit_test(test_404_indistinguishable),
	    cmocka_unit_test(test_project_visibility),
	    cmocka_unit_test(test_role_matrix),
	    cmocka_unit_test(test_paging),
	    cmocka_unit_test(test_role_change_is_immediate),
	    cmocka_unit_test(test_logout_revokes),
	    cmocka_unit_test(test_user_disable),
	    cmocka_unit_test(test_membership_removed_is_immediate),
	    cmocka_unit_test(test_admin_rules),
	    cmocka_unit_test(test_body_too_large),
	    cmocka_unit_test(test_strict_bodies),
	    cmocka_unit_test(test_404_405),
	    cmocka_unit_test(test_idempotent_job),
	    cmocka_unit_test(test_idempotency_scope),
	    cmocka_unit_test(test_audit),
	    cmocka_unit_test(test_route_table_check),
	    cmocka_unit_test(test_bootstrap_rules),
	};

	return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
