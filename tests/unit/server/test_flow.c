/*
 * test_flow.c - cnlabd's control loop end to end over real HTTP on
 * loopback, with a real SQLite file: node agents register, heartbeat and
 * long-poll their assignments; jobs and notebook servers are scheduled,
 * run, report and end; pre-emption; node loss with requeue and fencing;
 * quotas refused by name; profiles with availability; /metrics checked by
 * promtool; the whole route x role x own/other-project matrix; and the
 * job fields beyond the shape: GPU types, datasets and locality, gangs
 * (one node per member, started, requeued and cancelled together), the
 * placement explanation, node relabelling, and a restart that rebuilds
 * the same scheduler jobs.
 *
 * The scheduling loop thread is not started: the test drives time with
 * cnl_api_tick(), so that "ten minutes later" and "the node has been
 * silent past its timeout" are exact and nothing depends on how fast this
 * machine is.
 */
#define _GNU_SOURCE /* nftw */
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cmocka.h>

#include <curl/curl.h>
#include <jansson.h>

#include "client.h"
#include "cnlab/errors.h"
#include "common/id.h"
#include "common/time.h"
#include "common/util.h"
#include "net/http_server.h"
#include "server/api.h"
#include "server/auth.h"
#include "store/store.h"
#include "wire/job.h"
#include "wire/node.h"

#define SECRET  "test secret for cnlabd, 32+ bytes long"
#define LOST_MS (3600 * 1000) /* node_lost_ms of the server under test */
/* How long a rotated node credential lives on, in the server under test. */
#define OVERLAP_MS 1000
/* The CLI binary the server under test serves (cli_dir is F.s.dir). */
#define CLI_FILE "cnlab-test-x86_64"

enum who { ADMIN, AGENT, PADMIN, MEMBER, VIEWER, BOB, NWHO };
static const char *const who_name[NWHO] = {"root", "agent", "alice",
                                           "mem",  "view",  "bob"};

static struct {
	struct tc_server s;
	char token[NWHO][CNL_AUTH_JWT_MAX];
	char uid[NWHO][CNL_ID_MAX];
	char sys[CNL_ID_MAX], proj_a[CNL_ID_MAX], proj_b[CNL_ID_MAX];
	char node1[CNL_ID_MAX], node2[CNL_ID_MAX];
} F;

/* ---- helpers ------------------------------------------------------------- */

/*
 * Every job and server document the daemon sends here, and every page of
 * them, must decode with the CLI's strict decoders (wire/job.h): what
 * cnlabd emits and what the CLI accepts are the same documents.
 */
static void check_doc(const char *method, const char *path, long status,
                      const json_t *body)
{
	char p[256], *seg[8], *save = NULL, *t, err[256] = "";
	int n = 0, r = 0;
	bool get = strcmp(method, "GET") == 0;

	if (status < 200 || status > 299 || strcmp(method, "DELETE") == 0)
		return;
	snprintf(p, sizeof(p), "%s", path);
	p[strcspn(p, "?")] = '\0';
	for (t = strtok_r(p, "/", &save); t && n < 8;
	     t = strtok_r(NULL, "/", &save))
		seg[n++] = t;
	if (n < 3 || strcmp(seg[0], "v1") != 0)
		return;
	if (strcmp(seg[1], "jobs") == 0 &&
	    (n == 3 || (n == 4 && strcmp(seg[3], "cancel") == 0))) {
		struct cnl_wire_job m;

		r = cnl_wire_job_decode(body, &m, err, sizeof(err));
		cnl_wire_job_done(&m);
	} else if (strcmp(seg[1], "servers") == 0 &&
	           (n == 3 || (n == 4 && (strcmp(seg[3], "stop") == 0 ||
	                                  strcmp(seg[3], "start") == 0)))) {
		struct cnl_wire_server m;

		r = cnl_wire_server_decode(body, &m, err, sizeof(err));
	} else if (strcmp(seg[1], "projects") == 0 && n == 4 &&
	           strcmp(seg[3], "jobs") == 0) {
		struct cnl_wire_jobs m;
		struct cnl_wire_job one;

		r = get ? cnl_wire_jobs_decode(body, &m, err, sizeof(err))
		        : cnl_wire_job_decode(body, &one, err, sizeof(err));
		if (get)
			cnl_wire_jobs_done(&m);
		else
			cnl_wire_job_done(&one);
	} else if (strcmp(seg[1], "projects") == 0 && n == 4 &&
	           strcmp(seg[3], "servers") == 0) {
		struct cnl_wire_servers m;
		struct cnl_wire_server one;

		r = get ? cnl_wire_servers_decode(body, &m, err, sizeof(err))
		        : cnl_wire_server_decode(body, &one, err, sizeof(err));
		if (get)
			cnl_wire_servers_done(&m);
	}
	if (r < 0) {
		char *text = json_dumps(body, JSON_COMPACT);

		fail_msg("%s %s: the reply does not decode: %s\n%s", method,
		         path, err, text);
	}
}

/*
 * AGENT stands for each node's own agent: on a node route it sends the
 * credential of the node the path names, and registers a node with that
 * node's credential, or, the first time, with a join token an
 * administrator made for its name (and keeps the credential the reply
 * brings).  Elsewhere it is the user "agent" (role "agent"), whom node
 * routes refuse.
 */
static struct {
	char name[64], id[CNL_ID_MAX], cred[CNL_API_NODE_SECRET_MAX];
} NC[64];
static int n_nc;

static int nc_by_name(const char *name, bool add)
{
	for (int i = 0; i < n_nc; i++)
		if (strcmp(NC[i].name, name) == 0)
			return i;
	if (!add || n_nc == 64)
		return -1;
	snprintf(NC[n_nc].name, sizeof(NC[0].name), "%s", name);
	return n_nc++;
}

static json_t *call_ok(const char *method, const char *path, int who,
                       const char *body, long status);

/* The credential of node @id (as registered here), or "". */
static const char *node_cred(const char *id)
{
	for (int i = 0; i < n_nc; i++)
		if (strcmp(NC[i].id, id) == 0)
			return NC[i].cred;
	return "";
}

static const char *agent_tok(const char *path, const char *body)
{
	json_t *b;
	int i = -1;

	for (int k = 0; k < n_nc; k++)
		if (NC[k].id[0] && strncmp(path, "/v1/nodes/", 10) == 0 &&
		    strncmp(path + 10, NC[k].id, strlen(NC[k].id)) == 0 &&
		    strchr("/?", path[10 + strlen(NC[k].id)]))
			return NC[k].cred;
	if (strcmp(path, "/v1/nodes") != 0 || !body ||
	    !(b = json_loads(body, 0, NULL)))
		return F.token[AGENT];
	if (json_is_string(json_object_get(b, "name")))
		i = nc_by_name(json_string_value(json_object_get(b, "name")),
		               true);
	json_decref(b);
	if (i < 0)
		return F.token[AGENT];
	if (!NC[i].cred[0]) {
		char jb[128];
		json_t *o;

		snprintf(jb, sizeof(jb), "{\"node\":\"%s\"}", NC[i].name);
		o = call_ok("POST", "/v1/nodes/join-tokens", ADMIN, jb, 201);
		snprintf(NC[i].cred, sizeof(NC[i].cred), "%s", str(o, "token"));
		json_decref(o);
	}
	return NC[i].cred;
}

static void node_http(const char *method, const char *path, const char *body,
                      struct reply *r)
{
	http(method, path, agent_tok(path, body), body, r);
	if (strcmp(path, "/v1/nodes") == 0 && r->status < 300 &&
	    json_is_string(json_object_get(r->body, "name"))) {
		int i = nc_by_name(str(r->body, "name"), true);

		snprintf(NC[i].id, sizeof(NC[i].id), "%s", str(r->body, "id"));
		if (json_is_string(json_object_get(r->body, "credential")))
			snprintf(NC[i].cred, sizeof(NC[i].cred), "%s",
			         str(r->body, "credential"));
	}
}

static json_t *call_ok(const char *method, const char *path, int who,
                       const char *body, long status)
{
	struct reply r;
	json_t *out;

	if (who == AGENT)
		node_http(method, path, body, &r);
	else
		http(method, path, who >= 0 ? F.token[who] : NULL, body, &r);
	expect(&r, status, path);
	check_doc(method, path, status, r.body);
	out = json_incref(r.body);
	reply_done(&r);
	return out;
}

static void tick(int64_t now)
{
	cnl_api_tick(F.s.api, now);
}

static int64_t now_ms(void)
{
	return cnl_time_now_ms();
}

static void submit(int who, const char *proj, const char *body, char *id)
{
	char path[128];
	json_t *o;

	snprintf(path, sizeof(path), "/v1/projects/%s/jobs", proj);
	o = call_ok("POST", path, who, body, 201);
	snprintf(id, CNL_ID_MAX, "%s", str(o, "id"));
	json_decref(o);
}

static json_t *job(const char *id)
{
	char path[128];

	snprintf(path, sizeof(path), "/v1/jobs/%s", id);
	return call_ok("GET", path, ADMIN, NULL, 200);
}

/* The assignments of @node (no wait). */
static json_t *assignments(const char *node)
{
	char path[160];

	snprintf(path, sizeof(path), "/v1/nodes/%s/assignments", node);
	return call_ok("GET", path, AGENT, NULL, 200);
}

/* The assignment of @id in @list, or NULL. */
static json_t *find(json_t *list, const char *id)
{
	json_t *a = json_object_get(list, "assignments");

	for (size_t i = 0; i < json_array_size(a); i++)
		if (strcmp(str(json_array_get(a, i), "id"), id) == 0)
			return json_array_get(a, i);
	return NULL;
}

static long report(const char *node, const char *id, int64_t epoch,
                   const char *state, int code)
{
	char path[160], body[256];
	struct reply r;
	long st;

	snprintf(path, sizeof(path), "/v1/nodes/%s/reports", node);
	snprintf(body, sizeof(body),
	         "{\"id\":\"%s\",\"epoch\":%lld,\"state\":\"%s\","
	         "\"exit_code\":%d}",
	         id, (long long)epoch, state, code);
	node_http("POST", path, body, &r);
	st = r.status;
	reply_done(&r);
	return st;
}

static int64_t epoch_of(json_t *assignment)
{
	return json_integer_value(json_object_get(assignment, "epoch"));
}

/* Where @id is assigned now: 1, 2, or 0 for neither; never both. */
static int placed_on(const char *id)
{
	json_t *a1 = assignments(F.node1), *a2 = assignments(F.node2);
	bool on1 = find(a1, id) != NULL, on2 = find(a2, id) != NULL;

	json_decref(a1);
	json_decref(a2);
	assert_false(on1 && on2); /* never on two nodes at once */
	return on1 ? 1 : on2 ? 2 : 0;
}

/* Run a job to its end on whatever node holds it. */
static void finish(const char *id, const char *state, int code)
{
	int n = placed_on(id);
	const char *node = n == 1 ? F.node1 : F.node2;
	json_t *a;

	assert_true(n > 0);
	a = assignments(node);
	assert_int_equal(report(node, id, epoch_of(find(a, id)), state, code),
	                 200);
	json_decref(a);
}

/* ---- setup --------------------------------------------------------------- */

static void make_user(int w)
{
	char body[256];
	json_t *o;

	snprintf(body, sizeof(body), "{\"name\":\"%s\",\"password\":\"pw-%s\"}",
	         who_name[w], who_name[w]);
	o = call_ok("POST", "/v1/users", ADMIN, body, 201);
	snprintf(F.uid[w], CNL_ID_MAX, "%s", str(o, "id"));
	json_decref(o);
}

static void login(int w)
{
	char body[256];
	json_t *o;

	snprintf(body, sizeof(body), "{\"user\":\"%s\",\"password\":\"pw-%s\"}",
	         who_name[w], w == ADMIN ? "root" : who_name[w]);
	o = call_ok("POST", "/v1/auth/login", -1, body, 200);
	snprintf(F.token[w], CNL_AUTH_JWT_MAX, "%s", str(o, "token"));
	json_decref(o);
}

static void grant(const char *proj, int w, const char *role)
{
	char path[128], body[128];

	snprintf(path, sizeof(path), "/v1/projects/%s/members", proj);
	snprintf(body, sizeof(body), "{\"user\":\"%s\",\"role\":\"%s\"}",
	         who_name[w], role);
	json_decref(call_ok("POST", path, ADMIN, body, 200));
}

static void make_project(const char *name, char *id)
{
	char body[128];
	json_t *o;

	snprintf(body, sizeof(body), "{\"name\":\"%s\"}", name);
	o = call_ok("POST", "/v1/projects", ADMIN, body, 201);
	snprintf(id, CNL_ID_MAX, "%s", str(o, "id"));
	json_decref(o);
}

static void register_node(const char *name, int gpus, char *id)
{
	char body[256];
	json_t *o;

	snprintf(body, sizeof(body),
	         "{\"protocol\":5,\"name\":\"%s\",\"gpu_type\":\"H100-80GB-"
	         "SXM\",\"gpus\":%d,"
	         "\"cpu_milli\":64000,\"mem_mib\":512000,\"address\":"
	         "\"127.0.0.1\"}",
	         name, gpus);
	o = call_ok("POST", "/v1/nodes", AGENT, body, 201);
	snprintf(id, CNL_ID_MAX, "%s", str(o, "id"));
	assert_int_equal(json_integer_value(json_object_get(o, "epoch")), 1);
	json_decref(o);
}

/* nftw: files 0600, folders 0700, no file named after the user's. */
static int priv_files, priv_bad;

static int priv_check(const char *p, const struct stat *st, int flag,
                      struct FTW *f)
{
	if (flag == FTW_F) {
		priv_files++;
		priv_bad += (st->st_mode & 0777) != 0600 ||
		            strstr(p + f->base, "mod") != NULL;
	} else if (flag == FTW_D) {
		priv_bad += (st->st_mode & 0777) != 0700;
	}
	return 0;
}

/* Start the opened server F.s (no loop: tests tick it) and sign everyone
 * in; @cli_dir and @files_dir may be NULL. */
static void server_up(const char *cli_dir, const char *files_dir)
{
	tc_server_start(&F.s,
	                &(struct cnl_api_config){
	                    .jwt_key = (const uint8_t *)SECRET,
	                    .jwt_key_len = strlen(SECRET),
	                    .node_lost_ms = LOST_MS,
	                    .node_credential_overlap_ms = OVERLAP_MS,
	                    .cli_dir = cli_dir,
	                    .files_dir = files_dir,
	                },
	                false);
	login(ADMIN);
	for (int w = AGENT; w < NWHO; w++) {
		make_user(w);
		login(w);
	}
}

static int group_setup(void **state)
{
	char path[160], files_dir[200];
	json_t *o;
	int fd;

	tc_server_open(&F.s, "cnl-flow");
	snprintf(files_dir, sizeof(files_dir), "%s/files", F.s.dir);
	snprintf(path, sizeof(path), "%s/" CLI_FILE, F.s.dir);
	fd = open(path, O_WRONLY | O_CREAT | O_EXCL, 0755);
	assert_true(fd >= 0);
	assert_int_equal(write(fd, "binary", 6), 6);
	close(fd);
	server_up(F.s.dir, files_dir);
	o = call_ok("GET", "/v1/projects", ADMIN, NULL, 200);
	snprintf(F.sys, sizeof(F.sys), "%s",
	         str(json_array_get(json_object_get(o, "items"), 0), "id"));
	json_decref(o);
	grant(F.sys, AGENT, "agent");
	make_project("vision", F.proj_a);
	make_project("nlp", F.proj_b);
	grant(F.proj_a, PADMIN, "project-admin");
	grant(F.proj_a, MEMBER, "member");
	grant(F.proj_a, VIEWER, "viewer");
	grant(F.proj_b, BOB, "member");
	register_node("n1", 2, F.node1);
	register_node("n2", 1, F.node2);
	return 0;
}

/* A server with users and no node (test_mig_profile_moves' group): its
 * work stays pending, read by every cycle. */
static int registry_setup(void **state)
{
	tc_server_open(&F.s, "cnl-flow-reg");
	server_up(NULL, NULL);
	return 0;
}

static int registry_teardown(void **state)
{
	tc_server_close(&F.s);
	memset(&F, 0, sizeof(F));
	return 0;
}

static int group_teardown(void **state)
{
	char path[160];

	snprintf(path, sizeof(path), "%s/" CLI_FILE, F.s.dir);
	unlink(path);
	tc_server_close(&F.s);
	return 0;
}

/* ---- tests --------------------------------------------------------------- */

static void test_node_registration(void **state)
{
	struct reply r;
	json_t *o;

	/* An agent restarting registers again: the same node. */
	o = call_ok("POST", "/v1/nodes", AGENT,
	            "{\"protocol\":5,\"name\":\"n1\",\"gpu_type\":\"H100-80GB-"
	            "SXM\",\"gpus\":"
	            "2,\"cpu_milli\":64000,\"mem_mib\":512000}",
	            200);
	assert_string_equal(str(o, "id"), F.node1);
	assert_true(json_integer_value(json_object_get(o, "lease_ms")) <
	            LOST_MS);
	json_decref(o);
	/* Same name, other inventory: refused. */
	node_http(
	    "POST", "/v1/nodes",
	    "{\"protocol\":5,\"name\":\"n1\",\"gpu_type\":\"H100-80GB-SXM\","
	    "\"gpus\":4,"
	    "\"cpu_milli\":64000,\"mem_mib\":512000}",
	    &r);
	assert_error(&r, 409, "conflict");
	reply_done(&r);
	/* Bad inventory names the field. */
	node_http(
	    "POST", "/v1/nodes",
	    "{\"protocol\":5,\"name\":\"n9\",\"gpu_type\":\"Z80\",\"gpus\":1,"
	    "\"cpu_milli\":1,\"mem_mib\":1}",
	    &r);
	assert_error(&r, 400, "bad_request");
	assert_non_null(strstr(err_message(&r), "gpu_type"));
	reply_done(&r);
	node_http(
	    "POST", "/v1/nodes",
	    "{\"protocol\":5,\"name\":\"n9\",\"gpus\":1,\"cpu_milli\":1,\"mem_"
	    "mib\":1,"
	    "\"colour\":\"red\"}",
	    &r);
	assert_error(&r, 400, "bad_request");
	assert_non_null(strstr(err_message(&r), "colour"));
	reply_done(&r);
	/* An agent of another protocol version, or one that says none, is
	 * refused naming the field: neither side reads the other's messages
	 * by guesswork. */
	node_http("POST", "/v1/nodes",
	          "{\"protocol\":1,\"name\":\"n9\",\"gpus\":0,\"cpu_milli\":1,"
	          "\"mem_mib\":1}",
	          &r);
	assert_error(&r, 400, "bad_request");
	assert_non_null(strstr(err_message(&r), "protocol"));
	reply_done(&r);
	node_http("POST", "/v1/nodes",
	          "{\"name\":\"n9\",\"gpus\":0,\"cpu_milli\":1,\"mem_mib\":1}",
	          &r);
	assert_error(&r, 400, "bad_request");
	assert_non_null(strstr(err_message(&r), "protocol"));
	reply_done(&r);
	/* The GPU inventory lists one device per GPU. */
	node_http(
	    "POST", "/v1/nodes",
	    "{\"protocol\":5,\"name\":\"n8\",\"gpu_type\":\"H100-80GB-SXM\","
	    "\"gpus\":2,"
	    "\"cpu_milli\":1,\"mem_mib\":1,\"devices\":[{\"uuid\":\"GPU-1\","
	    "\"mem_mib\":81559,\"healthy\":true}]}",
	    &r);
	assert_error(&r, 400, "bad_request");
	assert_non_null(strstr(err_message(&r), "devices"));
	reply_done(&r);
	/* Only agents and admins register nodes. */
	http("POST", "/v1/nodes", F.token[MEMBER], "{}", &r);
	assert_error(&r, 403, "forbidden");
	reply_done(&r);
	o = call_ok("GET", "/v1/nodes", ADMIN, NULL, 200);
	assert_int_equal(json_array_size(json_object_get(o, "items")), 2);
	json_decref(o);
}

static void test_job_lifecycle(void **state)
{
	char id[CNL_ID_MAX], path[160], body[256];
	json_t *o, *a, *as;
	int64_t ep;
	int n;

	submit(MEMBER, F.proj_a,
	       "{\"command\":\"python train.py\",\"gpu\":\"h100-25\","
	       "\"priority\":\"high\"}",
	       id);
	o = job(id);
	assert_string_equal(str(o, "state"), "pending");
	assert_string_equal(str(o, "priority"), "high");
	json_decref(o);

	tick(now_ms());
	n = placed_on(id);
	assert_true(n == 1 || n == 2);
	const char *node = n == 1 ? F.node1 : F.node2;
	as = assignments(node);
	a = find(as, id);
	assert_string_equal(str(a, "action"), "run");
	assert_string_equal(str(a, "command"), "python train.py");
	assert_string_equal(str(a, "kind"), "job");
	/* 25% of an H100 is above 14: a MIG instance covering it (R2). */
	assert_true(json_integer_value(json_object_get(
	                json_object_get(a, "gpu"), "blocks")) >= 25);
	assert_true(json_is_string(
	    json_object_get(json_object_get(a, "gpu"), "mig_profile")));
	ep = epoch_of(a);
	assert_true(ep >= 1);
	json_decref(as);
	o = job(id);
	assert_string_equal(str(o, "state"), "running");
	assert_string_equal(str(json_object_get(o, "status"), "phase"),
	                    "assigned");
	json_decref(o);

	/* The agent starts it, streams output, and it ends. */
	assert_int_equal(report(node, id, ep, "running", 0), 200);
	snprintf(path, sizeof(path), "/v1/nodes/%s/logs", node);
	snprintf(body, sizeof(body),
	         "{\"id\":\"%s\",\"epoch\":%lld,\"stream\":\"stdout\","
	         "\"data\":\"epoch 1 loss 0.5\\n\"}",
	         id, (long long)ep);
	json_decref(call_ok("POST", path, AGENT, body, 201));
	snprintf(path, sizeof(path), "/v1/jobs/%s/logs", id);
	o = call_ok("GET", path, VIEWER, NULL, 200);
	assert_int_equal(json_array_size(json_object_get(o, "items")), 1);
	assert_string_equal(
	    str(json_array_get(json_object_get(o, "items"), 0), "data"),
	    "epoch 1 loss 0.5\n");
	json_decref(o);
	/* The other project cannot read them. */
	o = call_ok("GET", path, BOB, NULL, 404);
	json_decref(o);
	/* Output comes back byte for byte: UTF-8 as text, other bytes (a
	 * lone \xff) as base64, as the agent sent them. */
	snprintf(path, sizeof(path), "/v1/nodes/%s/logs", node);
	snprintf(body, sizeof(body),
	         "{\"id\":\"%s\",\"epoch\":%lld,\"stream\":\"stdout\","
	         "\"data_base64\":\"aMOpbGxvIP8K\"}",
	         id, (long long)ep);
	json_decref(call_ok("POST", path, AGENT, body, 201));
	snprintf(path, sizeof(path), "/v1/jobs/%s/logs", id);
	o = call_ok("GET", path, VIEWER, NULL, 200);
	assert_int_equal(json_array_size(json_object_get(o, "items")), 2);
	assert_string_equal(
	    str(json_array_get(json_object_get(o, "items"), 1), "data_base64"),
	    "aMOpbGxvIP8K");
	json_decref(o);
	/* An artifact comes back byte for byte ("model\0v1" has a NUL),
	 * streamed, in a subfolder, with a name of spaces and non-ASCII. */
	{
		static const char sha_model[] = "d474fb31a7355c32563533d8ab1166"
		                                "2bc5ca0dc87f867567499b9745d64b"
		                                "cc54";
		static const char sha_x[] = "2d711642b726b04401627ca9fbac32f5"
		                            "c8530fb1903cc4db02258717921a4881";
		static const char enc[] = "sub%20dir%2Fmod%C3%A8le%201.bin";
		char hdr[128];
		struct reply rr;

		snprintf(hdr, sizeof(hdr), "X-Content-SHA256: %s", sha_model);
		snprintf(path, sizeof(path),
		         "/v1/nodes/%s/artifacts?job=%s&epoch=%lld&path=%s",
		         node, id, (long long)ep, enc);
		http_n("PUT", path, agent_tok(path, NULL), "model\0v1", 8, hdr,
		       &rr);
		expect(&rr, 201, "artifact upload");
		assert_int_equal(
		    json_integer_value(json_object_get(rr.body, "size")), 8);
		assert_string_equal(str(rr.body, "path"),
		                    "sub dir/mod\xc3\xa8le 1.bin");
		assert_string_equal(str(rr.body, "sha256"), sha_model);
		reply_done(&rr);
		/* A digest that is not the body's stores nothing. */
		snprintf(hdr, sizeof(hdr), "X-Content-SHA256: %s", sha_x);
		snprintf(path, sizeof(path),
		         "/v1/nodes/%s/artifacts?job=%s&epoch=%lld&path=y",
		         node, id, (long long)ep);
		http_n("PUT", path, agent_tok(path, NULL), "model\0v1", 8, hdr,
		       &rr);
		assert_error(&rr, 400, "digest_mismatch");
		assert_non_null(strstr(err_message(&rr), "\"y\""));
		reply_done(&rr);
		/* A path that leaves the folder is refused. */
		snprintf(
		    path, sizeof(path),
		    "/v1/nodes/%s/artifacts?job=%s&epoch=%lld&path=..%%2Fx",
		    node, id, (long long)ep);
		http_n("PUT", path, agent_tok(path, NULL), "x", 1, hdr, &rr);
		assert_error(&rr, 400, "bad_request");
		reply_done(&rr);
		/* A stale epoch is fenced. */
		snprintf(path, sizeof(path),
		         "/v1/nodes/%s/artifacts?job=%s&epoch=%lld&path=x",
		         node, id, (long long)ep + 7);
		http_n("PUT", path, agent_tok(path, NULL), "x", 1, hdr, &rr);
		assert_error(&rr, 409, "fenced");
		reply_done(&rr);
		snprintf(path, sizeof(path), "/v1/jobs/%s/artifacts", id);
		o = call_ok("GET", path, VIEWER, NULL, 200);
		assert_int_equal(json_array_size(json_object_get(o, "items")),
		                 1);
		assert_null(json_object_get(
		    json_array_get(json_object_get(o, "items"), 0), "blob"));
		json_decref(o);
		snprintf(path, sizeof(path), "/v1/jobs/%s/artifact?path=%s", id,
		         enc);
		http("GET", path, F.token[MEMBER], NULL, &rr);
		expect(&rr, 200, "artifact");
		assert_int_equal(rr.len, 8);
		assert_memory_equal(rr.raw, "model\0v1", 8);
		reply_done(&rr);
		json_decref(call_ok("GET", path, BOB, NULL, 404));
		/* The file is kept 0600 in 0700 folders, under a name of its
		 * own, not the job's. */
		{
			char dir[256];

			snprintf(dir, sizeof(dir), "%s/files", F.s.dir);
			priv_files = priv_bad = 0;
			assert_int_equal(nftw(dir, priv_check, 8, FTW_PHYS), 0);
			assert_int_equal(priv_bad, 0);
			assert_int_equal(priv_files, 1);
		}
	}
	assert_int_equal(report(node, id, ep, "succeeded", 0), 200);
	o = job(id);
	assert_string_equal(str(o, "state"), "succeeded");
	assert_int_equal(json_integer_value(json_object_get(o, "exit_code")),
	                 0);
	assert_null(json_object_get(o, "status"));
	json_decref(o);
	assert_int_equal(placed_on(id), 0);
	/* A late report about it is fenced. */
	assert_int_equal(report(node, id, ep, "failed", 1), 409);
}

struct poll_arg {
	uint64_t since;
	json_t *got;
	int rc;
	char buf[65536];
	size_t len;
};

static size_t poll_data(char *p, size_t size, size_t n, void *ud)
{
	struct poll_arg *pa = ud;
	size_t add = size * n;

	if (pa->len + add < sizeof(pa->buf)) {
		memcpy(pa->buf + pa->len, p, add);
		pa->len += add;
	}
	return add;
}

/* A long poll in its own thread: plain libcurl, no cmocka asserts here. */
static void *poll_thread(void *p)
{
	struct poll_arg *pa = p;
	char url[300], auth[CNL_AUTH_JWT_MAX + 32];
	struct curl_slist *h = NULL;
	CURL *c = curl_easy_init();

	snprintf(url, sizeof(url),
	         "%s/v1/nodes/%s/assignments?since=%llu&wait=30", tc_base,
	         F.node2, (unsigned long long)pa->since);
	snprintf(auth, sizeof(auth), "Authorization: Bearer %s",
	         node_cred(F.node2));
	h = curl_slist_append(h, auth);
	curl_easy_setopt(c, CURLOPT_URL, url);
	curl_easy_setopt(c, CURLOPT_HTTPHEADER, h);
	curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, poll_data);
	curl_easy_setopt(c, CURLOPT_WRITEDATA, pa);
	curl_easy_setopt(c, CURLOPT_TIMEOUT, 60L);
	pa->rc = (int)curl_easy_perform(c);
	curl_slist_free_all(h);
	curl_easy_cleanup(c);
	pa->buf[pa->len] = '\0';
	pa->got = json_loads(pa->buf, 0, NULL);
	return NULL;
}

static void test_long_poll(void **state)
{
	static struct poll_arg pa;
	char id[CNL_ID_MAX], path[128], cordon[128];
	pthread_t t;
	json_t *o;

	/* Cordon n1, so that new work can only go to n2. */
	snprintf(cordon, sizeof(cordon), "/v1/nodes/%s", F.node1);
	json_decref(
	    call_ok("PATCH", cordon, ADMIN, "{\"state\":\"cordoned\"}", 200));
	tick(now_ms());
	o = assignments(F.node2);
	pa.since = (uint64_t)json_integer_value(json_object_get(o, "version"));
	json_decref(o);
	/* A poll with nothing new returns at once when asked not to wait. */
	snprintf(path, sizeof(path), "/v1/nodes/%s/assignments?since=%llu",
	         F.node2, (unsigned long long)pa.since);
	o = call_ok("GET", path, AGENT, NULL, 200);
	assert_int_equal(json_integer_value(json_object_get(o, "version")),
	                 (json_int_t)pa.since);
	assert_int_equal(json_array_size(json_object_get(o, "assignments")), 0);
	json_decref(o);

	assert_int_equal(pthread_create(&t, NULL, poll_thread, &pa), 0);
	/* Let the poll get parked (if it is not yet, it returns at once
	 * with the new version anyway), then give n2 work. */
	usleep(200 * 1000);
	submit(MEMBER, F.proj_a, "{\"command\":\"lp\",\"gpu\":\"h100-25\"}",
	       id);
	tick(now_ms());
	pthread_join(t, NULL);
	if (!pa.got)
		fail_msg("long poll: curl %d, reply %s", pa.rc, pa.buf);
	assert_true(json_integer_value(json_object_get(pa.got, "version")) >
	            (json_int_t)pa.since);
	assert_non_null(find(pa.got, id));
	json_decref(pa.got);
	json_decref(call_ok("PATCH", cordon, ADMIN, "{\"state\":\"up\"}", 200));
	finish(id, "succeeded", 0);
}

static void test_servers(void **state)
{
	char path[160], body[256], id[CNL_ID_MAX];
	json_t *o, *as, *a;
	int n;

	snprintf(path, sizeof(path), "/v1/projects/%s/servers", F.proj_a);
	/* An image the platform does not have is refused, naming those it
	 * has (an import, as `cnlab image import` makes, is the store's
	 * document "image" under its name). */
	o = call_ok("POST", path, MEMBER,
	            "{\"name\":\"s0\",\"image\":\"pytorch:2.4\","
	            "\"profile\":\"h100-25pct\"}",
	            400);
	assert_non_null(strstr(json_string_value(json_object_get(
	                           json_object_get(o, "error"), "message")),
	                       "no image \"pytorch:2.4\" on this platform; "
	                       "there are: host"));
	json_decref(o);
	assert_int_equal(
	    cnl_store_doc_put(
	        F.s.store,
	        &(struct cnl_store_doc){
	            .kind = "image",
	            .id = "pytorch:2.4",
	            .body = "{\"name\":\"pytorch:2.4\",\"manifest\":\"sha256:"
	                    "1111111111111111111111111111111111111111111111111"
	                    "111111111111111\",\"layers\":[]}",
	        },
	        true),
	    0);
	o = call_ok("POST", path, MEMBER,
	            "{\"name\":\"first-experiment\",\"image\":\"pytorch:2.4\","
	            "\"profile\":\"h100-25pct\",\"storage_gb\":20,"
	            "\"idle_timeout_s\":1800}",
	            201);
	snprintf(id, sizeof(id), "%s", str(o, "id"));
	assert_string_equal(str(o, "state"), "pending");
	json_decref(o);
	/* Names are unique in a project. */
	json_decref(call_ok("POST", path, MEMBER,
	                    "{\"name\":\"first-experiment\",\"image\":\"host\","
	                    "\"profile\":\"h100-25pct\"}",
	                    409));
	/* Unknown profile: named. */
	json_decref(call_ok("POST", path, MEMBER,
	                    "{\"name\":\"s2\",\"image\":\"host\",\"profile\":"
	                    "\"tpu-v5\"}",
	                    400));
	tick(now_ms());
	n = placed_on(id);
	assert_true(n > 0);
	as = assignments(n == 1 ? F.node1 : F.node2);
	a = find(as, id);
	assert_string_equal(str(a, "kind"), "server");
	assert_string_equal(str(a, "image"), "pytorch:2.4");
	assert_string_equal(str(a, "image_digest"),
	                    "sha256:111111111111111111111111111111111111111111"
	                    "1111111111111111111111");
	int64_t ep = epoch_of(a);
	json_decref(as);
	snprintf(path, sizeof(path), "/v1/nodes/%s/reports",
	         n == 1 ? F.node1 : F.node2);
	snprintf(body, sizeof(body),
	         "{\"id\":\"%s\",\"epoch\":%lld,\"state\":\"running\","
	         "\"url\":\"http://127.0.0.1:8888/?token=abc123\"}",
	         id, (long long)ep);
	json_decref(call_ok("POST", path, AGENT, body, 200));
	snprintf(path, sizeof(path), "/v1/servers/%s", id);
	o = call_ok("GET", path, MEMBER, NULL, 200);
	assert_string_equal(str(o, "state"), "running");
	/* Users get cnlabd's proxy, never the node's address. */
	{
		char want[256];
		const char *u = str(o, "url");

		snprintf(want, sizeof(want), "/s/%s/?token=abc123", id);
		assert_true(strncmp(u, "http://127.0.0.1:", 17) == 0);
		assert_true(strlen(u) > strlen(want));
		assert_string_equal(u + strlen(u) - strlen(want), want);
		assert_null(strstr(u, ":8888"));
	}
	json_decref(o);
	/* ssh: its owner only; and never through an agent older than node
	 * protocol 9 (these register with 5), whose strict decoder would
	 * refuse its whole tunnel list: 409 naming it, nothing queued. */
	{
		struct reply r;
		char sp[200], tp[200];

		snprintf(sp, sizeof(sp), "/v1/servers/%s/ssh", id);
		http_n("POST", sp, F.token[PADMIN], NULL, 0,
		       "Upgrade: cnlab-ssh", &r);
		assert_error(&r, 403, "forbidden");
		assert_non_null(strstr(err_message(&r), "only its owner"));
		reply_done(&r);
		http_n("POST", sp, F.token[MEMBER], NULL, 0,
		       "Upgrade: cnlab-ssh", &r);
		assert_error(&r, 409, "conflict");
		assert_non_null(strstr(err_message(&r), "too old for ssh"));
		assert_non_null(strstr(err_message(&r), "node protocol 5"));
		reply_done(&r);
		snprintf(tp, sizeof(tp), "/v1/nodes/%s/tunnels?wait=0",
		         n == 1 ? F.node1 : F.node2);
		o = call_ok("GET", tp, AGENT, NULL, 200);
		assert_int_equal(json_array_size(json_object_get(o, "tunnels")),
		                 0);
		json_decref(o);
	}
	/* Another project's member can neither see nor stop it. */
	json_decref(call_ok("GET", path, BOB, NULL, 404));
	snprintf(path, sizeof(path), "/v1/servers/%s/stop", id);
	json_decref(call_ok("POST", path, BOB, "{}", 404));
	json_decref(call_ok("POST", path, VIEWER, "{}", 403));
	o = call_ok("POST", path, MEMBER, "{}", 200);
	assert_string_equal(str(o, "state"), "stopping");
	json_decref(o);
	as = assignments(n == 1 ? F.node1 : F.node2);
	assert_string_equal(str(find(as, id), "action"), "stop");
	json_decref(as);
	assert_int_equal(
	    report(n == 1 ? F.node1 : F.node2, id, ep, "stopped", 0), 200);
	snprintf(path, sizeof(path), "/v1/servers/%s", id);
	o = call_ok("GET", path, MEMBER, NULL, 200);
	assert_string_equal(str(o, "state"), "stopped");
	json_decref(o);
	/* Work on the other node makes it the packing policy's choice; the
	 * server still goes home, where its workspace is. */
	{
		int home = n;
		char filler[CNL_ID_MAX], cordon[160];

		snprintf(cordon, sizeof(cordon), "/v1/nodes/%s",
		         home == 1 ? F.node1 : F.node2);
		json_decref(call_ok("PATCH", cordon, ADMIN,
		                    "{\"state\":\"cordoned\"}", 200));
		submit(MEMBER, F.proj_a,
		       "{\"command\":\"f\",\"gpu\":\"h100-1\"}", filler);
		tick(now_ms());
		assert_int_equal(placed_on(filler), home == 1 ? 2 : 1);
		json_decref(
		    call_ok("PATCH", cordon, ADMIN, "{\"state\":\"up\"}", 200));
		/* Start again: pending, then home under a new epoch. */
		snprintf(path, sizeof(path), "/v1/servers/%s/start", id);
		o = call_ok("POST", path, MEMBER, "{}", 200);
		assert_string_equal(str(o, "state"), "pending");
		json_decref(o);
		tick(now_ms());
		n = placed_on(id);
		assert_int_equal(n, home);
		as = assignments(n == 1 ? F.node1 : F.node2);
		assert_true(epoch_of(find(as, id)) > ep);
		json_decref(as);
		finish(filler, "succeeded", 0);
	}
	/* Running: cannot be deleted. */
	snprintf(path, sizeof(path), "/v1/servers/%s", id);
	json_decref(call_ok("DELETE", path, MEMBER, NULL, 409));
	snprintf(path, sizeof(path), "/v1/servers/%s/stop", id);
	json_decref(call_ok("POST", path, MEMBER, "{}", 200));
	finish(id, "stopped", 0);
	/* Stopped: deleted, by a member only, and gone. */
	snprintf(path, sizeof(path), "/v1/servers/%s", id);
	json_decref(call_ok("DELETE", path, BOB, NULL, 404));
	json_decref(call_ok("DELETE", path, VIEWER, NULL, 403));
	json_decref(call_ok("DELETE", path, MEMBER, NULL, 200));
	json_decref(call_ok("GET", path, MEMBER, NULL, 404));
}

static void test_profiles(void **state)
{
	json_t *o, *items;
	bool saw_h100 = false, saw_a100 = false;

	o = call_ok("GET", "/v1/profiles", VIEWER, NULL, 200);
	items = json_object_get(o, "items");
	assert_int_equal(json_array_size(items), 4);
	for (size_t i = 0; i < json_array_size(items); i++) {
		json_t *p = json_array_get(items, i);
		json_t *av = json_object_get(p, "availability");

		if (strcmp(str(p, "name"), "h100-25pct") == 0) {
			saw_h100 = true;
			assert_string_equal(str(p, "slice"), "25%");
			assert_true(json_is_true(json_object_get(av, "now")));
		}
		if (strcmp(str(p, "name"), "a100-50pct") == 0) {
			/* No A100 in this cluster: never, not "now". */
			saw_a100 = true;
			assert_true(json_is_false(json_object_get(av, "now")));
			assert_true(json_is_null(
			    json_object_get(av, "estimated_start")));
		}
	}
	assert_true(saw_h100 && saw_a100);
	json_decref(o);
	/* Admins define profiles; the shape is checked and named. */
	json_decref(call_ok("POST", "/v1/profiles", PADMIN,
	                    "{\"name\":\"x\",\"gpu\":\"h100-5\"}", 403));
	o = call_ok("POST", "/v1/profiles", ADMIN,
	            "{\"name\":\"h100-tiny\",\"gpu\":\"h100-200\"}", 400);
	assert_non_null(strstr(json_string_value(json_object_get(
	                           json_object_get(o, "error"), "message")),
	                       "\"gpu\""));
	json_decref(o);
	o = call_ok("POST", "/v1/profiles", ADMIN,
	            "{\"name\":\"h100-tiny\",\"gpu\":\"h100-5\"}", 200);
	assert_string_equal(str(o, "slice"), "5%");
	json_decref(o);
	json_decref(
	    call_ok("DELETE", "/v1/profiles/h100-tiny", ADMIN, NULL, 200));
	json_decref(
	    call_ok("DELETE", "/v1/profiles/h100-tiny", ADMIN, NULL, 404));
}

static void test_quota(void **state)
{
	char path[160], id[CNL_ID_MAX];
	struct reply r;
	json_t *o, *p;

	/* Run a 25-block job for 10 (metered) seconds. */
	submit(PADMIN, F.proj_a, "{\"command\":\"q\",\"gpu\":\"h100-25\"}", id);
	int64_t t = now_ms();
	tick(t);
	tick(t + 10000);
	finish(id, "succeeded", 0);
	/* 25 blocks x 10 s = 250 block-s = 0.000694 GPU-hours. */
	snprintf(path, sizeof(path), "/v1/projects/%s/quota", F.proj_a);
	json_decref(call_ok("PUT", path, PADMIN, "{\"gpu_hours\":1}", 403));
	json_decref(call_ok("PUT", path, ADMIN, "{\"gpu_hours\":-1}", 400));
	o = call_ok("PUT", path, ADMIN,
	            "{\"gpu_hours\":0.0005,\"concurrent_servers\":5}", 200);
	json_decref(o);
	o = call_ok("GET", "/v1/quota", MEMBER, NULL, 200);
	p = json_array_get(json_object_get(o, "projects"), 0);
	assert_string_equal(str(p, "project"), "vision");
	json_t *gh = json_object_get(p, "gpu_hours");
	assert_true(json_real_value(json_object_get(gh, "used")) >= 0.0006);
	assert_true(json_real_value(json_object_get(gh, "limit")) == 0.0005);
	assert_true(json_real_value(json_object_get(gh, "percent")) >= 100);
	json_decref(o);
	/* Beyond quota: refused, naming the limit; nothing is stored. */
	snprintf(path, sizeof(path), "/v1/projects/%s/jobs", F.proj_a);
	http("POST", path, F.token[MEMBER],
	     "{\"command\":\"more\",\"gpu\":\"h100-25\"}", &r);
	assert_error(&r, 403, "quota_exceeded");
	assert_non_null(strstr(err_message(&r), "GPU-hours"));
	assert_non_null(strstr(err_message(&r), "vision"));
	reply_done(&r);
	/* Project B is not affected. */
	submit(BOB, F.proj_b, "{\"command\":\"b\",\"gpu\":\"h100-10\"}", id);
	tick(now_ms());
	finish(id, "succeeded", 0);
	/* Concurrent servers. */
	snprintf(path, sizeof(path), "/v1/projects/%s/quota", F.proj_b);
	json_decref(
	    call_ok("PUT", path, ADMIN, "{\"concurrent_servers\":1}", 200));
	snprintf(path, sizeof(path), "/v1/projects/%s/servers", F.proj_b);
	o = call_ok("POST", path, BOB,
	            "{\"name\":\"nb1\",\"image\":\"host\",\"profile\":"
	            "\"h100-25pct\"}",
	            201);
	snprintf(id, sizeof(id), "%s", str(o, "id"));
	json_decref(o);
	http("POST", path, F.token[BOB],
	     "{\"name\":\"nb2\",\"image\":\"host\",\"profile\":\"h100-25pct\"}",
	     &r);
	assert_error(&r, 403, "quota_exceeded");
	assert_non_null(strstr(err_message(&r), "concurrent servers"));
	reply_done(&r);
	snprintf(path, sizeof(path), "/v1/servers/%s/stop", id);
	json_decref(call_ok("POST", path, BOB, "{}", 200));
	/* Lift A's limit for the tests that follow. */
	snprintf(path, sizeof(path), "/v1/projects/%s/quota", F.proj_a);
	json_decref(call_ok("PUT", path, ADMIN, "{\"gpu_hours\":null}", 200));
}

static void restart_cnlabd(void);

/* The entry named @name in the snapshot's list @list, or NULL. */
static json_t *dash_item(json_t *snap, const char *list, const char *name)
{
	json_t *it;
	size_t i;

	json_array_foreach (json_object_get(snap, list), i, it)
		if (json_is_string(json_object_get(it, "name")) &&
		    strcmp(str(it, "name"), name) == 0)
			return it;
	return NULL;
}

/* Today's figure (the last) of @it's usage_7d; 7 days, oldest first. */
static double today_of(json_t *it)
{
	json_t *a = json_object_get(it, "usage_7d");

	assert_int_equal(json_array_size(a), 7);
	return json_number_value(json_array_get(a, 6));
}

/*
 * The dashboard's tenants: gpu_limit is the GPU-hours quota (null:
 * none), usage_7d the per-day record, which survives a restart without
 * counting twice and matches the metered total; another project's use is
 * not shown to a non-member.
 */
static void test_dashboard_usage(void **state)
{
	char path[160], id[CNL_ID_MAX];
	double v0, v1, sum = 0;
	json_t *o, *p, *u, *a, *x;
	size_t i;

	submit(BOB, F.proj_b, "{\"command\":\"u\",\"gpu\":\"h100-10\"}", id);
	/* Past the meter's last instant (test_quota's ticks). */
	int64_t t = now_ms() + 20000;
	tick(t);
	tick(t + 10000); /* 10 blocks x 10 s, flushed with the totals */
	snprintf(path, sizeof(path), "/v1/projects/%s/quota", F.proj_b);
	json_decref(call_ok("PUT", path, ADMIN, "{\"gpu_hours\":5}", 200));
	o = call_ok("GET", "/v1/dashboard", BOB, NULL, 200);
	assert_non_null(p = dash_item(o, "projects", "nlp"));
	assert_true(json_number_value(json_object_get(p, "gpu_limit")) == 5);
	v0 = today_of(p);
	assert_true(v0 >= 10 * 10.0 / 100 / 3600 - 1e-9);
	assert_non_null(u = dash_item(o, "users", "bob"));
	assert_true(today_of(u) >= 10 * 10.0 / 100 / 3600 - 1e-9);
	assert_true(json_is_null(json_object_get(u, "gpu_limit")));
	json_decref(o);
	/* A non-member of nlp sees neither the project nor its user. */
	o = call_ok("GET", "/v1/dashboard", MEMBER, NULL, 200);
	assert_null(dash_item(o, "projects", "nlp"));
	assert_null(dash_item(o, "users", "bob"));
	json_decref(o);
	/* Restarted mid-run: the day's figure is the stored one, not
	 * charged again for the time already accounted. */
	restart_cnlabd();
	json_decref(call_ok("PUT", path, ADMIN, "{\"gpu_hours\":6}", 200));
	o = call_ok("GET", "/v1/dashboard", BOB, NULL, 200);
	assert_non_null(p = dash_item(o, "projects", "nlp"));
	assert_true(json_number_value(json_object_get(p, "gpu_limit")) == 6);
	v1 = today_of(p);
	assert_true(v1 >= v0 - 1e-9 && v1 <= v0 + 1e-9);
	/* The days add up to the metered total. */
	a = json_object_get(p, "usage_7d");
	json_array_foreach (a, i, x)
		sum += json_number_value(x);
	assert_true(sum <=
	            json_number_value(json_object_get(p, "gpu_hours")) + 1e-9);
	json_decref(o);
	tick(now_ms());
	finish(id, "succeeded", 0);
	json_decref(call_ok("PUT", path, ADMIN, "{\"gpu_hours\":null}", 200));
	o = call_ok("GET", "/v1/dashboard", BOB, NULL, 200);
	assert_non_null(p = dash_item(o, "projects", "nlp"));
	assert_true(json_is_null(json_object_get(p, "gpu_limit")));
	assert_true(today_of(p) >= v1 - 1e-9);
	json_decref(o);
}

/*
 * Whether the victim's decisions (GET /v1/jobs/{job}/decisions, seen by
 * its project's member) record its pre-emption for job @for, after its
 * placement: the audit chain has the scheduler's side of the story.
 */
static bool preempt_decided(const char *victim, const char *for_job)
{
	char path[128];
	bool placed = false, found = false;
	json_t *o, *it;
	size_t i;

	snprintf(path, sizeof(path), "/v1/jobs/%s/decisions", victim);
	o = call_ok("GET", path, MEMBER, NULL, 200);
	json_array_foreach (json_object_get(o, "items"), i, it) {
		const char *st = str(it, "stage"), *d = str(it, "decision");

		placed |= strcmp(st, "slice") == 0 &&
		          strncmp(d, "placed on node", 14) == 0;
		found |= placed && strcmp(st, "preempt") == 0 &&
		         strstr(d, for_job) != NULL;
	}
	json_decref(o);
	return found;
}

static void test_preemption(void **state)
{
	char low[3][CNL_ID_MAX], crit[CNL_ID_MAX];
	json_t *o;
	int64_t t = now_ms();
	int victims = 0;

	/* Three GPUs, three low-priority whole-GPU jobs. */
	for (int i = 0; i < 3; i++)
		submit(MEMBER, F.proj_a,
		       "{\"command\":\"low\",\"gpu\":\"h100-full\","
		       "\"priority\":\"low\"}",
		       low[i]);
	tick(t);
	for (int i = 0; i < 3; i++)
		assert_true(placed_on(low[i]) > 0);
	submit(BOB, F.proj_b,
	       "{\"command\":\"urgent\",\"gpu\":\"h100-full\",\"priority\":"
	       "\"critical\"}",
	       crit);
	/* Eleven minutes on (victims must have run ten). */
	tick(t + 11 * 60 * 1000);
	for (int i = 0; i < 3; i++) {
		int n = placed_on(low[i]);
		json_t *as = assignments(n == 1 ? F.node1 : F.node2);
		json_t *a = find(as, low[i]);

		if (strcmp(str(a, "action"), "stop") == 0) {
			victims++;
			assert_true(
			    json_is_string(json_object_get(a, "kill_at")));
			/* It exits on the signal: requeued, not failed. */
			assert_int_equal(report(n == 1 ? F.node1 : F.node2,
			                        low[i], epoch_of(a), "failed",
			                        143),
			                 200);
			o = job(low[i]);
			assert_string_equal(str(o, "state"), "pending");
			json_decref(o);
			assert_true(preempt_decided(low[i], crit));
		}
		json_decref(as);
	}
	assert_int_equal(victims, 1);
	assert_true(placed_on(crit) > 0);
	/* Clean up: cancel everything still active. */
	for (int i = 0; i < 3; i++) {
		char path[128];

		snprintf(path, sizeof(path), "/v1/jobs/%s/cancel", low[i]);
		json_decref(call_ok("POST", path, MEMBER, "{}", 200));
		if (placed_on(low[i]))
			finish(low[i], "failed", 143);
	}
	finish(crit, "succeeded", 0);
}

/*
 * Deadline admission says which estimate it used: with a run time the job
 * must finish by the deadline, without one only start by it; a refusal
 * gives the earliest start and the same account.
 */
static void test_deadline_admission(void **state)
{
	char busy[3][CNL_ID_MAX], id[CNL_ID_MAX], path[160], body[256],
	    when[CNL_TIME_RFC3339_MAX];
	struct reply r;
	json_t *o, *dc;
	int64_t t = now_ms(), start;

	/* Every GPU busy for two hours with work nobody may pre-empt. */
	for (int i = 0; i < 3; i++)
		submit(
		    MEMBER, F.proj_a,
		    "{\"command\":\"busy\",\"gpu\":\"h100-full\",\"priority\":"
		    "\"critical\",\"preemptible\":false,\"runtime_s\":7200}",
		    busy[i]);
	tick(t);
	for (int i = 0; i < 3; i++)
		assert_true(placed_on(busy[i]) > 0);
	snprintf(path, sizeof(path), "/v1/projects/%s/jobs", F.proj_a);
	/* Finish within an hour, running 30 minutes: impossible. */
	cnl_time_format_rfc3339(t + 3600 * 1000, when, sizeof(when));
	snprintf(body, sizeof(body),
	         "{\"command\":\"d\",\"gpu\":\"h100-full\",\"deadline\":\"%s\","
	         "\"runtime_s\":1800}",
	         when);
	http("POST", path, F.token[MEMBER], body, &r);
	assert_error(&r, 422, "deadline_infeasible");
	assert_non_null(strstr(err_message(&r), "earliest possible start"));
	assert_non_null(strstr(err_message(&r), "finishes by then with its "
	                                        "run time of 30m"));
	reply_done(&r);
	/* Start within an hour, no run time: still impossible, said so. */
	snprintf(
	    body, sizeof(body),
	    "{\"command\":\"d\",\"gpu\":\"h100-full\",\"deadline\":\"%s\"}",
	    when);
	http("POST", path, F.token[MEMBER], body, &r);
	assert_error(&r, 422, "deadline_infeasible");
	assert_non_null(
	    strstr(err_message(&r), "checked only that it starts by then"));
	reply_done(&r);
	/* Start within three hours: admitted, and the reply says how. */
	cnl_time_format_rfc3339(t + 3 * 3600 * 1000, when, sizeof(when));
	snprintf(
	    body, sizeof(body),
	    "{\"command\":\"d\",\"gpu\":\"h100-full\",\"deadline\":\"%s\"}",
	    when);
	o = call_ok("POST", path, MEMBER, body, 201);
	snprintf(id, sizeof(id), "%s", str(o, "id"));
	dc = json_object_get(o, "deadline_check");
	assert_string_equal(str(dc, "checked"), "start");
	assert_true(json_is_null(json_object_get(dc, "runtime_s")));
	assert_int_equal(
	    json_integer_value(json_object_get(dc, "unestimated_running")), 0);
	assert_int_equal(
	    cnl_time_parse_rfc3339(str(dc, "earliest_start"), &start), 0);
	/* The busy work ends two hours from its start. */
	assert_true(start >= t + 7200 * 1000 - 60000 &&
	            start <= t + 7200 * 1000 + 60000);
	json_decref(o);
	snprintf(path, sizeof(path), "/v1/jobs/%s/cancel", id);
	json_decref(call_ok("POST", path, MEMBER, "{}", 200));
	for (int i = 0; i < 3; i++) {
		snprintf(path, sizeof(path), "/v1/jobs/%s/cancel", busy[i]);
		json_decref(call_ok("POST", path, MEMBER, "{}", 200));
		finish(busy[i], "failed", 143);
	}
	tick(now_ms());
}

static void test_node_loss_and_fencing(void **state)
{
	char id[CNL_ID_MAX], path[160], body[256];
	json_t *o, *as;
	int64_t ep, t1;
	int n;

	/* A whole GPU on n2 (n1 is cordoned meanwhile). */
	snprintf(path, sizeof(path), "/v1/nodes/%s", F.node1);
	json_decref(
	    call_ok("PATCH", path, ADMIN, "{\"state\":\"cordoned\"}", 200));
	submit(MEMBER, F.proj_a, "{\"command\":\"long\",\"gpu\":\"h100-full\"}",
	       id);
	tick(now_ms());
	assert_int_equal(placed_on(id), 2);
	json_decref(call_ok("PATCH", path, ADMIN, "{\"state\":\"up\"}", 200));
	as = assignments(F.node2);
	ep = epoch_of(find(as, id));
	json_decref(as);
	assert_int_equal(report(F.node2, id, ep, "running", 0), 200);
	t1 = now_ms(); /* n2's last word */
	usleep(5000);
	/* n1 keeps heartbeating; n2 falls silent past the timeout. */
	snprintf(path, sizeof(path), "/v1/nodes/%s/heartbeat", F.node1);
	json_decref(call_ok("POST", path, AGENT, "{}", 200));
	tick(t1 + LOST_MS + 1);
	o = call_ok("GET", "/v1/nodes", ADMIN, NULL, 200);
	for (size_t i = 0; i < 2; i++) {
		json_t *nd = json_array_get(json_object_get(o, "items"), i);

		assert_string_equal(str(nd, "state"),
		                    strcmp(str(nd, "id"), F.node2) == 0 ? "lost"
		                                                        : "up");
	}
	json_decref(o);
	/* The job moved to n1 under a new epoch; never on both. */
	n = placed_on(id);
	assert_int_equal(n, 1);
	as = assignments(F.node1);
	assert_true(epoch_of(find(as, id)) > ep);
	int64_t ep2 = epoch_of(find(as, id));
	json_decref(as);
	/* n2 comes back: its report under the old epoch is refused, and its
	 * heartbeat tells it to stop the job. */
	assert_int_equal(report(F.node2, id, ep, "succeeded", 0), 409);
	snprintf(path, sizeof(path), "/v1/nodes/%s/heartbeat", F.node2);
	snprintf(body, sizeof(body),
	         "{\"epoch\":1,\"running\":[{\"id\":\"%s\",\"epoch\":%lld}]}",
	         id, (long long)ep);
	o = call_ok("POST", path, AGENT, body, 200);
	assert_int_equal(json_array_size(json_object_get(o, "stop")), 1);
	assert_string_equal(
	    json_string_value(json_array_get(json_object_get(o, "stop"), 0)),
	    id);
	assert_int_equal(json_integer_value(json_object_get(o, "epoch")), 2);
	assert_string_equal(str(o, "state"), "up");
	json_decref(o);
	o = job(id);
	assert_string_equal(str(o, "state"), "running");
	json_decref(o);
	assert_int_equal(report(F.node1, id, ep2, "succeeded", 0), 200);
	o = job(id);
	assert_string_equal(str(o, "state"), "succeeded");
	json_decref(o);
	/* The audit log recorded the stop order and verifies. */
	o = call_ok("GET", "/v1/audit/verify", ADMIN, NULL, 200);
	assert_true(json_is_true(json_object_get(o, "ok")));
	json_decref(o);
}

/* An agent that no longer lists started work (it lost it) gets it
 * requeued after two heartbeats without it; one is not enough. */
static void test_work_lost_by_agent(void **state)
{
	char id[CNL_ID_MAX], path[160], body[256];
	json_t *as, *o;
	int64_t ep;
	int n;

	submit(MEMBER, F.proj_a, "{\"command\":\"x\",\"gpu\":\"h100-10\"}", id);
	tick(now_ms());
	n = placed_on(id);
	assert_true(n > 0);
	const char *node = n == 1 ? F.node1 : F.node2;
	as = assignments(node);
	ep = epoch_of(find(as, id));
	json_decref(as);
	assert_int_equal(report(node, id, ep, "running", 0), 200);
	snprintf(path, sizeof(path), "/v1/nodes/%s/heartbeat", node);
	/* Listed: nothing happens, however often. */
	snprintf(body, sizeof(body),
	         "{\"running\":[{\"id\":\"%s\",\"epoch\":%lld}]}", id,
	         (long long)ep);
	for (int i = 0; i < 3; i++)
		json_decref(call_ok("POST", path, AGENT, body, 200));
	o = job(id);
	assert_string_equal(str(json_object_get(o, "status"), "phase"),
	                    "started");
	json_decref(o);
	/* Missing once: still started. */
	json_decref(call_ok("POST", path, AGENT, "{\"running\":[]}", 200));
	o = job(id);
	assert_string_equal(str(json_object_get(o, "status"), "phase"),
	                    "started");
	json_decref(o);
	/* Missing twice in a row: requeued, and placed again anew. */
	json_decref(call_ok("POST", path, AGENT, "{\"running\":[]}", 200));
	o = job(id);
	assert_string_equal(str(o, "state"), "pending");
	json_decref(o);
	tick(now_ms());
	n = placed_on(id);
	assert_true(n > 0);
	as = assignments(n == 1 ? F.node1 : F.node2);
	assert_true(epoch_of(find(as, id)) > ep);
	ep = epoch_of(find(as, id));
	json_decref(as);
	assert_int_equal(
	    report(n == 1 ? F.node1 : F.node2, id, ep, "succeeded", 0), 200);
}

/* The value of the sample of /metrics text @raw whose line starts with
 * @series (name and labels), or -1 when there is none. */
static double sample(const char *raw, const char *series)
{
	size_t n = strlen(series);

	for (const char *p = raw; p && *p;
	     p = strchr(p, '\n'), p = p ? p + 1 : p)
		if (strncmp(p, series, n) == 0 && p[n] == ' ')
			return strtod(p + n + 1, NULL);
	return -1;
}

static void test_metrics_promtool(void **state)
{
	char file[128];
	struct reply r;
	FILE *f;
	pid_t pid;
	int st, fd[2];
	char out[4096] = "";
	ssize_t got, len = 0;

	http("GET", "/metrics", NULL, NULL, &r);
	expect(&r, 200, "metrics");
	assert_non_null(strstr(r.content_type, "text/plain"));
	assert_non_null(strstr(r.raw, "cnlab_queue_depth{priority=\"low\"}"));
	assert_non_null(strstr(r.raw, "cnlab_gpu_blocks{gpu_type="
	                              "\"H100-80GB-SXM\",state=\"free\"}"));
	assert_non_null(strstr(r.raw, "cnlab_scheduling_cycle_seconds_count"));
	assert_non_null(strstr(r.raw, "cnlab_http_requests_total{method="
	                              "\"POST\",route=\"/v1/projects/"
	                              "{project}/jobs\",code=\"2xx\"}"));
	assert_non_null(strstr(r.raw, "cnlab_quota_used_ratio"));
	/* Issue 20's families, after the flows above: placements, the
	 * pre-emptions of test_preemption and its critical job's wait, API
	 * latency by status class, quota amounts and fair share. */
	assert_true(sample(r.raw, "cnlab_placements_total") >= 1);
	assert_true(sample(r.raw, "cnlab_preemptions_total") >= 1);
	assert_true(sample(r.raw, "cnlab_scheduling_cycles_total") >= 1);
	assert_true(sample(r.raw, "cnlab_queue_wait_seconds_count{priority="
	                          "\"critical\"}") >= 1);
	assert_true(sample(r.raw, "cnlab_queue_wait_seconds_bucket{priority="
	                          "\"normal\",le=\"+Inf\"}") >= 1);
	assert_true(sample(r.raw, "cnlab_http_request_duration_seconds_count{"
	                          "method=\"POST\",route=\"/v1/projects/"
	                          "{project}/jobs\",code=\"2xx\"}") >= 1);
	assert_non_null(strstr(r.raw, "\ncnlab_quota_limit{owner="));
	assert_non_null(strstr(r.raw, "\ncnlab_quota_used{owner="));
	assert_non_null(strstr(r.raw, "\ncnlab_fairshare_factor{project="));
	assert_non_null(
	    strstr(r.raw, "\ncnlab_fairshare_usage_ratio{project="));
	snprintf(file, sizeof(file), "%s/metrics.txt", F.s.dir);
	f = fopen(file, "w");
	assert_non_null(f);
	fputs(r.raw, f);
	fclose(f);
	reply_done(&r);
	/* promtool check metrics < file: no output, exit 0. */
	assert_int_equal(pipe(fd), 0);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		int in = open(file, 0);

		dup2(in, 0);
		dup2(fd[1], 1);
		dup2(fd[1], 2);
		execlp("promtool", "promtool", "check", "metrics",
		       (char *)NULL);
		_exit(127);
	}
	close(fd[1]);
	while ((got = read(fd[0], out + len, sizeof(out) - 1 - (size_t)len)) >
	       0)
		len += got;
	close(fd[0]);
	waitpid(pid, &st, 0);
	if (WEXITSTATUS(st) == 127)
		fail_msg("promtool is not installed (scripts/bootstrap "
		         "installs it)");
	if (!WIFEXITED(st) || WEXITSTATUS(st) != 0 || len > 0)
		fail_msg("promtool: status %d: %s", WEXITSTATUS(st), out);
	unlink(file);
}

/*
 * Every route x every role x own and other project.  The expected answer
 * comes from the row's permission: anonymous callers get 401; a role
 * below the route's gets 403; a caller with no role in the project the
 * path names gets 404 (as if it did not exist); everyone else passes
 * authorization (whatever the handler then says about the empty body).
 */
static void test_route_role_matrix(void **state)
{
	enum { OWN, OTHER };
	const int roles[] = {ADMIN, AGENT, PADMIN, MEMBER, VIEWER, -1};
	const struct cnl_http_route *rt;
	char job_a[CNL_ID_MAX], job_b[CNL_ID_MAX], srv_a[CNL_ID_MAX],
	    srv_b[CNL_ID_MAX], path[256], victim[CNL_ID_MAX];
	size_t n;
	json_t *o;
	int checked = 0;

	submit(MEMBER, F.proj_a, "{\"command\":\"m\",\"gpu\":\"h100-1\"}",
	       job_a);
	submit(BOB, F.proj_b, "{\"command\":\"m\",\"gpu\":\"h100-1\"}", job_b);
	snprintf(path, sizeof(path), "/v1/projects/%s/servers", F.proj_a);
	o = call_ok("POST", path, MEMBER,
	            "{\"name\":\"mx\",\"image\":\"host\",\"profile\":"
	            "\"h100-25pct\"}",
	            201);
	snprintf(srv_a, sizeof(srv_a), "%s", str(o, "id"));
	json_decref(o);
	snprintf(path, sizeof(path), "/v1/projects/%s/quota", F.proj_b);
	json_decref(
	    call_ok("PUT", path, ADMIN, "{\"concurrent_servers\":null}", 200));
	snprintf(path, sizeof(path), "/v1/projects/%s/servers", F.proj_b);
	o = call_ok("POST", path, BOB,
	            "{\"name\":\"mx\",\"image\":\"host\",\"profile\":"
	            "\"h100-25pct\"}",
	            201);
	snprintf(srv_b, sizeof(srv_b), "%s", str(o, "id"));
	json_decref(o);

	/* Place both jobs and give each an artifact called "none". */
	tick(now_ms());
	for (int k = 0; k < 2; k++) {
		const char *jid = k ? job_b : job_a;
		int on = placed_on(jid);
		const char *node = on == 1 ? F.node1 : F.node2;
		json_t *as = assignments(node);
		char body[256];

		assert_true(on > 0);
		struct reply rr;

		snprintf(path, sizeof(path),
		         "/v1/nodes/%s/artifacts?job=%s&epoch=%lld&path=none",
		         node, jid, (long long)epoch_of(find(as, jid)));
		snprintf(body, sizeof(body), "X-Content-SHA256: %s",
		         "2d711642b726b04401627ca9fbac32f5c8530fb1903cc4db022"
		         "58717921a4881");
		http_n("PUT", path, agent_tok(path, NULL), "x", 1, body, &rr);
		expect(&rr, 201, "artifact upload");
		reply_done(&rr);
		json_decref(as);
	}

	/* Disable and enable act on a user of their own (enable ends the
	 * user's sessions, and a disabled bob would answer 401). */
	{
		json_t *v = call_ok("POST", "/v1/users", ADMIN,
		                    "{\"name\":\"matrix-victim\","
		                    "\"password\":\"pw-victim-1\"}",
		                    201);

		snprintf(victim, sizeof(victim), "%s", str(v, "id"));
		json_decref(v);
	}
	rt = cnl_api_routes(&n);
	for (size_t i = 0; i < n; i++) {
		bool project = rt[i].perm == CNL_PERM_PROJECT_VIEW ||
		               rt[i].perm == CNL_PERM_PROJECT_MEMBER ||
		               rt[i].perm == CNL_PERM_PROJECT_ADMIN;
		int need = rt[i].perm == CNL_PERM_PROJECT_VIEW     ? 1
		           : rt[i].perm == CNL_PERM_PROJECT_MEMBER ? 2
		                                                   : 3;
		long public_status = 0;

		/* Logging in and out is tested elsewhere (a logout would end
		 * the callers' sessions); skip token deletion, which would
		 * need a token per caller. */
		if (strcmp(rt[i].pattern, "/v1/auth/login") == 0 ||
		    strcmp(rt[i].pattern, "/v1/auth/logout") == 0)
			continue;
		for (int side = OWN; side <= OTHER; side++) {
			if (!project && side == OTHER)
				continue;
			for (size_t k = 0; k < CNL_ARRAY_SIZE(roles); k++) {
				int w = roles[k];
				const char *p = rt[i].pattern;
				char *o2 = path;
				struct reply r;
				long want;

				/* Fill in the path's parameters. */
				while (*p) {
					const char *v = NULL;
					size_t len = 0;

					if (*p == '{') {
						const char *e = strchr(p, '}');

						len = (size_t)(e - p + 1);
						if (!strncmp(p, "{project}",
						             len))
							v = side ? F.proj_b
							         : F.proj_a;
						else if (!strncmp(p, "{job}",
						                  len))
							v = side ? job_b
							         : job_a;
						else if (!strncmp(p, "{server}",
						                  len))
							v = side ? srv_b
							         : srv_a;
						else if (!strncmp(p, "{node}",
						                  len))
							/* Revoking n1 would
							 * cut it off (see
							 * test_node_identity)
							 */
							v = strstr(
							        rt[i].pattern,
							        "/revoke")
							        ? "no-such-node"
							        : F.node1;
						else if (!strncmp(p, "{user}",
						                  len))
							v = strstr(
							        rt[i].pattern,
							        "able")
							        ? victim
							        : F.uid[BOB];
						else if (!strncmp(p, "{file}",
						                  len))
							v = CLI_FILE;
						else
							v = "none";
						o2 += snprintf(
						    o2,
						    sizeof(path) -
						        (size_t)(o2 - path),
						    "%s", v);
						p += len;
					} else {
						*o2++ = *p++;
					}
				}
				*o2 = '\0';
				/* The expectation. */
				if (rt[i].perm == CNL_PERM_PUBLIC)
					want = 0;
				else if (w < 0)
					want = 401;
				else if (rt[i].perm == CNL_PERM_COLLECT)
					/* A run pod's collector's token
					 * only: no user, administrators
					 * included. */
					want = 401;
				else if (rt[i].perm == CNL_PERM_AUTHENTICATED)
					want = 0;
				else if (rt[i].perm == CNL_PERM_ADMIN)
					want = w == ADMIN ? 0 : 403;
				else if (rt[i].perm == CNL_PERM_AGENT)
					/* A node's own credential only:
					 * no user, administrators and the
					 * role "agent" included. */
					want = 403;
				else if (w == ADMIN)
					want = 0;
				else if (side == OTHER || w == AGENT)
					want = 404;
				else
					want = (w == PADMIN   ? 3
					        : w == MEMBER ? 2
					                      : 1) >= need
					           ? 0
					           : 403;
				http(rt[i].method, path,
				     w >= 0 ? F.token[w] : NULL,
				     strcmp(rt[i].method, "GET") == 0 ? NULL
				                                      : "{}",
				     &r);
				/* A 404 of authorization names the
				 * project, job or server of the path; a
				 * handler's own 404 (no such member) is
				 * not a refusal. */
				bool hidden =
				    r.status == 404 &&
				    (strstr(r.raw, "\"project not found") ||
				     strstr(r.raw, "\"job not found") ||
				     strstr(r.raw, "\"server not found"));
				if (want
				        ? r.status != want
				        : (r.status == 401 || r.status == 403 ||
				           (project && hidden)))
					fail_msg(
					    "%s %s as %s: want %ld, got %ld "
					    "%s",
					    rt[i].method, path,
					    w >= 0 ? who_name[w] : "anonymous",
					    want, r.status, r.raw);
				/* A PUBLIC route ignores tokens: every caller,
				 * anonymous too, gets the same answer. */
				if (rt[i].perm == CNL_PERM_PUBLIC &&
				    public_status && r.status != public_status)
					fail_msg(
					    "%s %s as %s: got %ld, but %ld "
					    "for another caller",
					    rt[i].method, path,
					    w >= 0 ? who_name[w] : "anonymous",
					    r.status, public_status);
				if (rt[i].perm == CNL_PERM_PUBLIC)
					public_status = r.status;
				reply_done(&r);
				checked++;
			}
		}
	}
	assert_true(checked > 200);
}

/* ---- job fields: GPU types, datasets, gangs, the explanation ---------- */

/*
 * Three nodes of their own (n1 and n2 are cordoned meanwhile): d1 and d2
 * H100s in zone za, d1 holding "imagenet"; d3 an A100 in zone zb.  Jobs go
 * to a project of their own, so that its listing counts only them.
 */
static struct {
	char node[3][CNL_ID_MAX];
	char proj[CNL_ID_MAX];
} D;

/* Where @id is assigned among d1..d3: 0..2, or -1; never on two. */
static int d_where(const char *id)
{
	int at = -1;

	for (int i = 0; i < 3; i++) {
		json_t *a = assignments(D.node[i]);

		if (find(a, id)) {
			assert_int_equal(at, -1);
			at = i;
		}
		json_decref(a);
	}
	return at;
}

/* The assignment of @id on d@at+1 (a new reference). */
static json_t *d_assignment(const char *id, int at)
{
	json_t *a = assignments(D.node[at]), *it = json_incref(find(a, id));

	json_decref(a);
	assert_non_null(it);
	return it;
}

/* Report @id's end (or "running") from wherever it is assigned. */
static void d_report(const char *id, const char *state, int code)
{
	int at = d_where(id);
	json_t *it;

	assert_true(at >= 0);
	it = d_assignment(id, at);
	assert_int_equal(report(D.node[at], id, epoch_of(it), state, code),
	                 200);
	json_decref(it);
}

static void set_state(const char *node, const char *state)
{
	char path[160], body[64];

	snprintf(path, sizeof(path), "/v1/nodes/%s", node);
	snprintf(body, sizeof(body), "{\"state\":\"%s\"}", state);
	json_decref(call_ok("PATCH", path, ADMIN, body, 200));
}

static void d_register(int i, const char *type, const char *zone,
                       const char *rack, const char *datasets, long status)
{
	char body[512];
	json_t *o;

	snprintf(
	    body, sizeof(body),
	    "{\"protocol\":5,\"name\":\"d%d\",\"gpu_type\":\"%s\",\"gpus\":1,"
	    "\"cpu_milli\":64000,\"mem_mib\":512000,\"zone\":\"%s\","
	    "\"rack\":\"%s\"%s%s%s}",
	    i + 1, type, zone, rack, datasets ? ",\"datasets\":" : "",
	    datasets ? datasets : "", "");
	o = call_ok("POST", "/v1/nodes", AGENT, body, status);
	snprintf(D.node[i], CNL_ID_MAX, "%s", str(o, "id"));
	json_decref(o);
}

static void d_submit(const char *body, char *id)
{
	submit(MEMBER, D.proj, body, id);
}

static const char *placement_str(json_t *job, const char *key)
{
	return json_string_value(
	    json_object_get(json_object_get(job, "placement"), key));
}

static bool placement_true(json_t *job, const char *key)
{
	return json_is_true(
	    json_object_get(json_object_get(job, "placement"), key));
}

static void test_job_fields_setup(void **state)
{
	make_project("data", D.proj);
	grant(D.proj, MEMBER, "member");
	set_state(F.node1, "cordoned");
	set_state(F.node2, "cordoned");
	d_register(0, "H100-80GB-SXM", "za", "r1", "[\"imagenet\"]", 201);
	d_register(1, "H100-80GB-SXM", "za", "r2", NULL, 201);
	d_register(2, "A100-80GB", "zb", "r3", NULL, 201);
}

/* Each field is stored, shown, and reaches the scheduler; the dataset
 * wins over packing, and the explanation says so only when true. */
static void test_job_fields_stored_and_explained(void **state)
{
	char filler[CNL_ID_MAX], plain[CNL_ID_MAX], near[CNL_ID_MAX];
	json_t *o, *a;

	/* d2 busy, so packing prefers it (the control shows it does). */
	set_state(D.node[0], "cordoned");
	set_state(D.node[2], "cordoned");
	d_submit("{\"command\":\"f\",\"gpu\":\"h100-5\"}", filler);
	tick(now_ms());
	assert_int_equal(d_where(filler), 1);
	set_state(D.node[0], "up");
	set_state(D.node[2], "up");
	d_submit("{\"command\":\"plain\",\"gpu\":\"h100-5\"}", plain);
	tick(now_ms());
	assert_int_equal(d_where(plain), 1);
	o = job(plain);
	assert_string_equal(placement_str(o, "node"), "d2");
	assert_null(
	    json_object_get(json_object_get(o, "placement"), "dataset_local"));
	assert_null(json_object_get(json_object_get(o, "placement"),
	                            "gpu_type_allowed"));
	json_decref(o);

	d_submit("{\"command\":\"near\",\"gpu\":\"any-5\",\"gpu_types\":"
	         "[\"h100\",\"a100-80gb\"],\"dataset\":\"imagenet\","
	         "\"preemptible\":false,\"cpu_milli\":500,\"mem_mib\":2048}",
	         near);
	o = job(near);
	assert_string_equal(str(o, "gpu"), "any-5");
	assert_int_equal(json_array_size(json_object_get(o, "gpu_types")), 2);
	assert_string_equal(json_string_value(json_array_get(
	                        json_object_get(o, "gpu_types"), 1)),
	                    "a100-80gb");
	assert_string_equal(str(o, "dataset"), "imagenet");
	assert_int_equal(json_integer_value(json_object_get(o, "nodes")), 1);
	assert_true(json_is_false(json_object_get(o, "preemptible")));
	assert_int_equal(json_integer_value(json_object_get(o, "cpu_milli")),
	                 500);
	assert_int_equal(json_integer_value(json_object_get(o, "mem_mib")),
	                 2048);
	assert_null(json_object_get(o, "gang"));
	assert_null(json_object_get(o, "placement")); /* not placed yet */
	json_decref(o);
	tick(now_ms());
	assert_int_equal(d_where(near), 0); /* d1 holds imagenet */
	a = d_assignment(near, 0);
	assert_int_equal(json_integer_value(json_object_get(a, "cpu_milli")),
	                 500);
	assert_int_equal(json_integer_value(json_object_get(a, "mem_mib")),
	                 2048);
	assert_null(json_object_get(a, "gang"));
	json_decref(a);
	o = job(near);
	assert_string_equal(placement_str(o, "node"), "d1");
	assert_string_equal(placement_str(o, "gpu_type"), "H100-80GB-SXM");
	assert_string_equal(placement_str(o, "zone"), "za");
	assert_string_equal(placement_str(o, "rack"), "r1");
	assert_string_equal(placement_str(o, "reason"), "started");
	assert_true(placement_true(o, "dataset_local"));
	assert_true(placement_true(o, "gpu_type_allowed"));
	assert_int_equal(
	    json_integer_value(json_object_get(json_object_get(o, "placement"),
	                                       "dataset_elsewhere")),
	    0);
	json_decref(o);
	/* It ends: where it ran stays in the record. */
	d_report(near, "succeeded", 0);
	o = job(near);
	assert_string_equal(str(o, "state"), "succeeded");
	assert_string_equal(placement_str(o, "node"), "d1");
	json_decref(o);

	/* A dataset no node holds: placed, and said not to be local. */
	d_submit("{\"command\":\"far\",\"gpu\":\"h100-5\",\"dataset\":"
	         "\"laion-5b\"}",
	         near);
	tick(now_ms());
	o = job(near);
	assert_true(json_is_false(
	    json_object_get(json_object_get(o, "placement"), "dataset_local")));
	json_decref(o);
	d_report(near, "succeeded", 0);
	d_report(plain, "succeeded", 0);
	d_report(filler, "succeeded", 0);
}

/* gpu_types narrows a shape of any type: A100 only, although the H100
 * nodes are busy and packing would pick them. */
static void test_job_gpu_types_restrict(void **state)
{
	char filler[CNL_ID_MAX], ctl[CNL_ID_MAX], a100[CNL_ID_MAX];
	json_t *o;

	set_state(D.node[2], "cordoned");
	d_submit("{\"command\":\"f\",\"gpu\":\"h100-5\"}", filler);
	tick(now_ms());
	set_state(D.node[2], "up");
	d_submit("{\"command\":\"c\",\"gpu\":\"any-5\"}", ctl);
	d_submit("{\"command\":\"a\",\"gpu\":\"any-5\",\"gpu_types\":"
	         "[\"a100\"]}",
	         a100);
	tick(now_ms());
	assert_true(d_where(ctl) == d_where(filler));
	assert_int_equal(d_where(a100), 2);
	o = job(a100);
	assert_string_equal(placement_str(o, "gpu_type"), "A100-80GB");
	assert_true(placement_true(o, "gpu_type_allowed"));
	json_decref(o);
	d_report(filler, "succeeded", 0);
	d_report(ctl, "succeeded", 0);
	d_report(a100, "succeeded", 0);
}

/* The gang's members by rank, from the leader's JSON. */
static void gang_members(const char *leader, char ids[][CNL_ID_MAX], int n)
{
	json_t *o = job(leader);
	json_t *g = json_object_get(o, "gang");
	json_t *m = json_object_get(g, "members");

	assert_int_equal(json_array_size(m), (size_t)n);
	assert_string_equal(str(g, "id"), leader);
	assert_int_equal(json_integer_value(json_object_get(g, "rank")), 0);
	assert_int_equal(json_integer_value(json_object_get(g, "size")), n);
	assert_int_equal(json_integer_value(json_object_get(o, "nodes")), n);
	for (int i = 0; i < n; i++)
		snprintf(ids[i], CNL_ID_MAX, "%s",
		         json_string_value(json_array_get(m, i)));
	assert_string_equal(ids[0], leader);
	json_decref(o);
}

static int count_jobs(void)
{
	char path[160];
	json_t *o;
	int n;

	snprintf(path, sizeof(path), "/v1/projects/%s/jobs?limit=1000", D.proj);
	o = call_ok("GET", path, MEMBER, NULL, 200);
	n = (int)json_array_size(json_object_get(o, "items"));
	json_decref(o);
	return n;
}

static void test_gang(void **state)
{
	char g[2][CNL_ID_MAX], w3[3][CNL_ID_MAX], path[160], hdr[160];
	int64_t ep[2];
	int at[2], before = count_jobs();
	struct reply r;
	json_t *o, *a;

	/* Two members, retried with the same key: one gang of two. */
	snprintf(path, sizeof(path), "/v1/projects/%s/jobs", D.proj);
	snprintf(hdr, sizeof(hdr), "Idempotency-Key: gang-%lld",
	         (long long)now_ms());
	for (int k = 0; k < 2; k++) {
		http_n("POST", path, F.token[MEMBER],
		       "{\"command\":\"train\",\"gpu\":\"any-10\","
		       "\"gpu_types\":[\"h100\"],\"nodes\":2}",
		       0, hdr, &r);
		expect(&r, k ? 200 : 201, "gang submit");
		if (k)
			assert_string_equal(str(r.body, "id"), g[0]);
		else
			snprintf(g[0], CNL_ID_MAX, "%s", str(r.body, "id"));
		reply_done(&r);
	}
	assert_int_equal(count_jobs(), before + 2);
	gang_members(g[0], g, 2);
	o = job(g[1]);
	assert_string_equal(str(json_object_get(o, "gang"), "id"), g[0]);
	assert_int_equal(json_integer_value(json_object_get(
	                     json_object_get(o, "gang"), "rank")),
	                 1);
	assert_string_equal(str(o, "command"), "train");
	json_decref(o);

	/* Both start in one cycle, each on a node of its own (H100s).  Both
	 * places are known before either assignment's node list is read. */
	tick(now_ms());
	/* Where each runs, before any assignment's node list is checked
	 * against both. */
	for (int i = 0; i < 2; i++)
		at[i] = d_where(g[i]);
	for (int i = 0; i < 2; i++) {
		assert_true(at[i] == 0 || at[i] == 1);
	}
	for (int i = 0; i < 2; i++) {
		a = d_assignment(g[i], at[i]);
		ep[i] = epoch_of(a);
		json_t *ga = json_object_get(a, "gang");
		assert_string_equal(str(ga, "id"), g[0]);
		assert_int_equal(
		    json_integer_value(json_object_get(ga, "rank")), i);
		assert_int_equal(
		    json_integer_value(json_object_get(ga, "size")), 2);
		for (int k = 0; k < 2; k++)
			assert_string_equal(
			    json_string_value(json_array_get(
			        json_object_get(ga, "nodes"), k)),
			    k == 0 ? (at[0] ? "d2" : "d1")
			           : (at[1] ? "d2" : "d1"));
		json_decref(a);
	}
	assert_int_not_equal(at[0], at[1]);
	/* One job shows the whole gang's placement. */
	o = job(g[1]);
	json_t *pl = json_object_get(json_object_get(o, "gang"), "placements");
	assert_int_equal(json_array_size(pl), 2);
	for (int i = 0; i < 2; i++) {
		json_t *it = json_array_get(pl, (size_t)i);

		assert_string_equal(str(it, "id"), g[i]);
		assert_string_equal(str(it, "node"), at[i] ? "d2" : "d1");
		assert_string_equal(str(it, "zone"), "za");
		assert_string_equal(str(it, "rack"), at[i] ? "r2" : "r1");
	}
	json_decref(o);

	/* A member its agent lost takes the gang back to the queue: the
	 * other is stopped (keeping its place until it has left), and they
	 * start again together. */
	for (int i = 0; i < 2; i++)
		d_report(g[i], "running", 0);
	snprintf(path, sizeof(path), "/v1/nodes/%s/heartbeat", D.node[at[1]]);
	for (int k = 0; k < 2; k++)
		json_decref(
		    call_ok("POST", path, AGENT, "{\"running\":[]}", 200));
	o = job(g[1]);
	assert_string_equal(str(o, "state"), "pending");
	json_decref(o);
	tick(now_ms());
	a = d_assignment(g[0], at[0]);
	assert_string_equal(str(a, "action"), "stop");
	json_decref(a);
	assert_int_equal(d_where(g[1]), -1); /* waits for its gang */
	o = job(g[1]);
	assert_string_equal(str(json_object_get(o, "status"), "reason"),
	                    "gang members missing or not placeable");
	json_decref(o);
	d_report(g[0], "failed", 143); /* exits on the signal */
	o = job(g[0]);
	assert_string_equal(str(o, "state"), "pending");
	json_decref(o);
	tick(now_ms());
	for (int i = 0; i < 2; i++) {
		a = d_assignment(g[i], d_where(g[i]));
		assert_string_equal(str(a, "action"), "run");
		assert_true(epoch_of(a) > ep[i]);
		json_decref(a);
	}
	assert_int_not_equal(d_where(g[0]), d_where(g[1]));

	/* Three members on two H100 nodes: all wait, none holds anything. */
	d_submit("{\"command\":\"big\",\"gpu\":\"any-10\",\"gpu_types\":"
	         "[\"h100\"],\"nodes\":3}",
	         w3[0]);
	gang_members(w3[0], w3, 3);
	tick(now_ms());
	for (int i = 0; i < 3; i++) {
		assert_int_equal(d_where(w3[i]), -1);
		o = job(w3[i]);
		assert_string_equal(str(o, "state"), "pending");
		assert_string_equal(str(json_object_get(o, "status"), "reason"),
		                    "gang members missing or not placeable");
		json_decref(o);
	}

	/* Cancelling any member cancels its gang: the placed ones are
	 * told to stop, the waiting ones end at once. */
	snprintf(path, sizeof(path), "/v1/jobs/%s/cancel", g[1]);
	json_decref(call_ok("POST", path, MEMBER, "{}", 200));
	for (int i = 0; i < 2; i++) {
		a = d_assignment(g[i], d_where(g[i]));
		assert_string_equal(str(a, "action"), "stop");
		json_decref(a);
		d_report(g[i], "failed", 143);
		o = job(g[i]);
		assert_string_equal(str(o, "state"), "cancelled");
		json_decref(o);
	}
	snprintf(path, sizeof(path), "/v1/jobs/%s/cancel", w3[2]);
	json_decref(call_ok("POST", path, MEMBER, "{}", 200));
	for (int i = 0; i < 3; i++) {
		o = job(w3[i]);
		assert_string_equal(str(o, "state"), "cancelled");
		json_decref(o);
	}
	/* A gang that has ended cannot be cancelled again. */
	json_decref(call_ok("POST", path, MEMBER, "{}", 409));
}

/* The blocks in use on node @id. */
static int node_blocks(const char *id)
{
	json_t *o = call_ok("GET", "/v1/nodes", ADMIN, NULL, 200);
	json_t *items = json_object_get(o, "items");
	int used = -1;

	for (size_t i = 0; i < json_array_size(items); i++)
		if (strcmp(str(json_array_get(items, i), "id"), id) == 0)
			used = (int)json_integer_value(json_object_get(
			    json_array_get(items, i), "blocks_used"));
	json_decref(o);
	assert_true(used >= 0);
	return used;
}

/* cnlabd stopped and started on the same store, as after a crash. */
static void restart_cnlabd(void)
{
	char err[512], path[160], files_dir[200];

	cnl_http_server_free(F.s.srv);
	cnl_api_free(F.s.api);
	cnl_store_close(F.s.store);
	snprintf(path, sizeof(path), "%s/cnlab.db", F.s.dir);
	snprintf(files_dir, sizeof(files_dir), "%s/files", F.s.dir);
	assert_int_equal(
	    cnl_store_open_sqlite(path, &F.s.store, err, sizeof(err)), 0);
	assert_int_equal(cnl_api_new(
	                     &(struct cnl_api_config){
	                         .store = F.s.store,
	                         .jwt_key = (const uint8_t *)SECRET,
	                         .jwt_key_len = strlen(SECRET),
	                         .scrypt_ln = CNL_AUTH_SCRYPT_LN_MIN,
	                         .node_lost_ms = LOST_MS,
	                         .node_credential_overlap_ms = OVERLAP_MS,
	                         .cli_dir = F.s.dir,
	                         .files_dir = files_dir,
	                     },
	                     &F.s.api),
	                 0);
	struct cnl_api_listen l = {.host = "127.0.0.1"};
	l.routes = cnl_api_routes(&l.nroutes);
	if (cnl_api_start(F.s.api, &l, &F.s.srv, err, sizeof(err)) < 0)
		fail_msg("restart: %s", err);
	snprintf(tc_base, sizeof(tc_base), "http://127.0.0.1:%u",
	         (unsigned)cnl_http_server_port(F.s.srv));
}

/* A job held to its nodelist waits for them, though others are free,
 * across a restart; a nodelist less its exclude that leaves no node able
 * to run the shape (d3 is an A100) is refused; an unknown node is named. */
static void test_job_nodelist(void **state)
{
	char only3[CNL_ID_MAX], path[128], *t;
	json_t *o;

	snprintf(path, sizeof(path), "/v1/projects/%s/jobs", D.proj);
	o = call_ok("POST", path, MEMBER,
	            "{\"command\":\"x\",\"gpu\":\"h100-5\",\"nodelist\":"
	            "[\"d1\",\"d3\"],\"exclude\":[\"d1\"]}",
	            422);
	t = json_dumps(o, 0);
	assert_non_null(strstr(t, "nodes it may use"));
	free(t);
	json_decref(o);
	o = call_ok("POST", path, MEMBER,
	            "{\"command\":\"x\",\"gpu\":\"any-5\",\"nodelist\":"
	            "[\"d3\",\"d9\"]}",
	            400);
	t = json_dumps(o, 0);
	assert_non_null(strstr(t, "nodelist[1]"));
	free(t);
	json_decref(o);
	set_state(D.node[2], "cordoned");
	d_submit("{\"command\":\"x\",\"gpu\":\"any-5\",\"nodelist\":"
	         "[\"d3\"]}",
	         only3);
	tick(now_ms());
	assert_int_equal(d_where(only3), -1);
	restart_cnlabd();
	tick(now_ms());
	assert_int_equal(d_where(only3), -1);
	o = job(only3);
	assert_string_equal(json_string_value(json_array_get(
	                        json_object_get(o, "nodelist"), 0)),
	                    "d3");
	json_decref(o);
	set_state(D.node[2], "up");
	tick(now_ms());
	assert_int_equal(d_where(only3), 2);
	d_report(only3, "succeeded", 0);
}

/* A restarted cnlabd rebuilds the same scheduler jobs from the store: the
 * spread gang still cannot start on two nodes, the A100-only job still
 * waits for an A100, a running job keeps its explanation, a gang member
 * being stopped keeps its resources and its final state, and work on a
 * cordoned node stays there. */
static void test_job_fields_survive_restart(void **state)
{
	char w3[3][CNL_ID_MAX], a100[CNL_ID_MAX], run[CNL_ID_MAX];
	char g2[2][CNL_ID_MAX];
	int lost, kept, at, used, n1_used;
	json_t *o, *a, *before;

	set_state(D.node[2], "cordoned");
	d_submit("{\"command\":\"big\",\"gpu\":\"any-10\",\"nodes\":3,"
	         "\"dataset\":\"imagenet\"}",
	         w3[0]);
	gang_members(w3[0], w3, 3);
	d_submit("{\"command\":\"a\",\"gpu\":\"any-5\",\"gpu_types\":"
	         "[\"a100\"]}",
	         a100);
	d_submit("{\"command\":\"r\",\"gpu\":\"h100-5\",\"dataset\":"
	         "\"imagenet\",\"preemptible\":false}",
	         run);
	d_submit("{\"command\":\"g\",\"gpu\":\"any-10\",\"gpu_types\":"
	         "[\"h100\"],\"nodes\":2}",
	         g2[0]);
	gang_members(g2[0], g2, 2);
	tick(now_ms());
	assert_int_equal(d_where(a100), -1);
	assert_int_equal(d_where(run), 0);
	for (int i = 0; i < 3; i++)
		assert_int_equal(d_where(w3[i]), -1);
	before = job(run);
	/* A gang member is lost by its agent; the other, told to stop with
	 * its gang, is then cancelled: it keeps its resources until it has
	 * left, and ends cancelled, not requeued, across the restart. */
	for (int i = 0; i < 2; i++)
		d_report(g2[i], "running", 0);
	lost = d_where(g2[0]) == 0 ? 1 : 0;
	kept = 1 - lost;
	{
		char path[160];

		snprintf(path, sizeof(path), "/v1/nodes/%s/heartbeat",
		         D.node[d_where(g2[lost])]);
		for (int k = 0; k < 2; k++)
			json_decref(call_ok("POST", path, AGENT,
			                    "{\"running\":[]}", 200));
		tick(now_ms());
		snprintf(path, sizeof(path), "/v1/jobs/%s/cancel", g2[lost]);
		json_decref(call_ok("POST", path, MEMBER, "{}", 200));
	}
	o = job(g2[lost]);
	assert_string_equal(str(o, "state"), "cancelled");
	json_decref(o);
	at = d_where(g2[kept]);
	assert_true(at >= 0);
	used = node_blocks(D.node[at]);
	assert_true(used >= 10);
	/* Work kept on cordoned nodes (n1, n2: the route matrix's). */
	n1_used = node_blocks(F.node1);
	assert_true(n1_used > 0);

	restart_cnlabd();
	tick(now_ms());
	/* A cordoned node's work is re-adopted, not requeued. */
	assert_int_equal(node_blocks(F.node1), n1_used);
	assert_int_equal(d_where(g2[kept]), at);
	a = d_assignment(g2[kept], at);
	assert_string_equal(str(a, "action"), "stop");
	json_decref(a);
	assert_int_equal(node_blocks(D.node[at]), used);
	d_report(g2[kept], "failed", 143);
	o = job(g2[kept]);
	assert_string_equal(str(o, "state"), "cancelled");
	json_decref(o);
	assert_int_equal(node_blocks(D.node[at]), used - 10);
	o = job(run);
	assert_true(json_equal(json_object_get(o, "placement"),
	                       json_object_get(before, "placement")));
	assert_string_equal(str(o, "dataset"), "imagenet");
	assert_true(json_is_false(json_object_get(o, "preemptible")));
	json_decref(o);
	json_decref(before);
	assert_int_equal(d_where(run), 0);
	assert_int_equal(d_where(a100), -1); /* still A100 only */
	for (int i = 0; i < 3; i++) {
		assert_int_equal(d_where(w3[i]), -1); /* still spread */
		o = job(w3[i]);
		assert_int_equal(json_integer_value(json_object_get(
		                     json_object_get(o, "gang"), "size")),
		                 3);
		assert_string_equal(str(o, "dataset"), "imagenet");
		json_decref(o);
	}
	o = job(w3[1]);
	assert_int_equal(json_array_size(json_object_get(
	                     json_object_get(o, "gang"), "members")),
	                 3);
	json_decref(o);
	/* The A100 comes back: the job goes there, nowhere else. */
	set_state(D.node[2], "up");
	tick(now_ms());
	assert_int_equal(d_where(a100), 2);
	/* Cancelling its leader ends the waiting gang. */
	{
		char path[128];

		snprintf(path, sizeof(path), "/v1/jobs/%s/cancel", w3[0]);
		json_decref(call_ok("POST", path, MEMBER, "{}", 200));
	}
	d_report(a100, "succeeded", 0);
	d_report(run, "succeeded", 0);
}

/* The seq of the audit log's last record (nothing runs meanwhile: the
 * loop thread is not started). */
static int64_t audit_count(void)
{
	struct cnl_store_audit *a = cnl_xcalloc(256, sizeof(*a));
	int64_t last = 0;
	int n;

	do {
		assert_int_equal(
		    cnl_store_audit_list(F.s.store, last, 256, a, &n), 0);
		if (n)
			last = a[n - 1].seq;
	} while (n == 256);
	free(a);
	return last;
}

/* Every job of project @proj as the API lists it, all pages. */
static json_t *list_jobs(const char *proj)
{
	json_t *all = json_array();
	char path[256], after[CNL_ID_MAX] = "";

	for (;;) {
		json_t *page, *next;

		snprintf(path, sizeof(path),
		         "/v1/projects/%s/jobs?limit=500%s%s", proj,
		         after[0] ? "&after=" : "", after);
		page = call_ok("GET", path, MEMBER, NULL, 200);
		json_array_extend(all, json_object_get(page, "items"));
		next = json_object_get(page, "next");
		if (!json_is_string(next)) {
			json_decref(page);
			return all;
		}
		snprintf(after, sizeof(after), "%s", json_string_value(next));
		json_decref(page);
	}
}

/*
 * A restart shows the same jobs the same way: 1,200 jobs of every
 * priority wait (their only node is cordoned), one in seven is cancelled,
 * a cycle gives the rest their wait reasons; the API's listing, page by
 * page, is then identical before the restart, right after it (the wait
 * reasons come back from the audit log, not "being scheduled") and after
 * the next cycle, which finds nothing to change: it records no decision.
 * The controller's registry of so many is its id index at work: each
 * cancellation removes one entry and moves another.
 */
static void test_restart_same_view(void **state)
{
	enum { N = 1200 };
	char(*ids)[CNL_ID_MAX] = cnl_xcalloc(N, sizeof(*ids));
	char body[160], path[128];
	json_t *before, *after, *o;
	int64_t t, n_audit;

	set_state(D.node[2], "cordoned");
	for (int i = 0; i < N; i++) {
		snprintf(body, sizeof(body),
		         "{\"command\":\"bulk %d\",\"gpu\":\"any-5\","
		         "\"gpu_types\":[\"a100\"],\"priority\":%d}",
		         i, i % 4);
		d_submit(body, ids[i]);
	}
	for (int i = 0; i < N; i += 7) {
		snprintf(path, sizeof(path), "/v1/jobs/%s/cancel", ids[i]);
		json_decref(call_ok("POST", path, MEMBER, "{}", 200));
	}
	t = now_ms();
	tick(t);
	before = list_jobs(D.proj);
	assert_true(json_array_size(before) >= N);
	o = job(ids[1]);
	assert_string_equal(str(o, "state"), "pending");
	assert_string_not_equal(json_string_value(json_object_get(
	                            json_object_get(o, "status"), "reason")),
	                        "being scheduled");
	json_decref(o);

	restart_cnlabd();
	after = list_jobs(D.proj);
	assert_true(json_equal(before, after));
	json_decref(after);
	n_audit = audit_count();
	tick(t);
	after = list_jobs(D.proj);
	assert_true(json_equal(before, after));
	assert_int_equal(audit_count(), n_audit);
	json_decref(after);
	json_decref(before);

	for (int i = 0; i < N; i++) {
		if (i % 7 == 0)
			continue;
		snprintf(path, sizeof(path), "/v1/jobs/%s/cancel", ids[i]);
		json_decref(call_ok("POST", path, MEMBER, "{}", 200));
	}
	set_state(D.node[2], "up");
	free(ids);
}

/* A restart loads the active jobs in one walk of the store per state; a
 * job whose shape the catalog no longer knows is failed in the store
 * during that walk, and the jobs after it are loaded all the same. */
static void test_restart_fails_unknown_shape(void **state)
{
	char ids[3][CNL_ID_MAX], bad[CNL_ID_MAX], path[128];
	struct cnl_store_job sj;
	struct cnl_id_gen g;
	json_t *o;

	(void)state;
	set_state(D.node[2], "cordoned");
	for (int i = 0; i < 2; i++)
		d_submit("{\"command\":\"before\",\"gpu\":\"any-5\","
		         "\"gpu_types\":[\"a100\"]}",
		         ids[i]);
	/* Stored as the catalog of an older release would have let it be:
	 * between the two jobs above and the one below in id order. */
	assert_int_equal(cnl_store_job_get(F.s.store, ids[1], &sj), 0);
	/* Ids order by millisecond, then at random within one: each id here
	 * is made in a later millisecond than the one before it. */
	usleep(2000);
	cnl_id_gen_init_random(&g);
	assert_true(cnl_id_new(&g, "job", now_ms(), bad, sizeof(bad)) > 0);
	usleep(2000);
	memcpy(sj.id, bad, sizeof(sj.id));
	snprintf(sj.gpu_shape, sizeof(sj.gpu_shape), "nosuch-5");
	assert_int_equal(cnl_store_job_create(F.s.store, &sj, NULL, NULL),
	                 CNL_STORE_CREATED);
	d_submit("{\"command\":\"after\",\"gpu\":\"any-5\","
	         "\"gpu_types\":[\"a100\"]}",
	         ids[2]);
	assert_true(strcmp(ids[1], bad) < 0 && strcmp(bad, ids[2]) < 0);

	restart_cnlabd();
	o = job(bad);
	assert_string_equal(str(o, "state"), "failed");
	json_decref(o);
	for (int i = 0; i < 3; i++) {
		o = job(ids[i]);
		assert_string_equal(str(o, "state"), "pending");
		json_decref(o);
		snprintf(path, sizeof(path), "/v1/jobs/%s/cancel", ids[i]);
		json_decref(call_ok("POST", path, MEMBER, "{}", 200));
	}
	set_state(D.node[2], "up");
}

/* An agent registering again with other datasets relabels its node, and
 * the next placement uses the new labels. */
static void test_node_datasets_relabel(void **state)
{
	char filler[CNL_ID_MAX], id[CNL_ID_MAX];
	json_t *o, *items;
	struct reply r;

	/* d1 busy: packing would pick it; "coco" is only on d2. */
	set_state(D.node[1], "cordoned");
	set_state(D.node[2], "cordoned");
	d_submit("{\"command\":\"f\",\"gpu\":\"h100-5\"}", filler);
	tick(now_ms());
	assert_int_equal(d_where(filler), 0);
	set_state(D.node[1], "up");
	d_register(1, "H100-80GB-SXM", "za", "r2", "[\"coco\",\"imagenet\"]",
	           200);
	o = call_ok("GET", "/v1/nodes", ADMIN, NULL, 200);
	items = json_object_get(o, "items");
	for (size_t i = 0; i < json_array_size(items); i++)
		if (strcmp(str(json_array_get(items, i), "name"), "d2") == 0)
			assert_int_equal(
			    json_array_size(json_object_get(
			        json_array_get(items, i), "datasets")),
			    2);
	json_decref(o);
	d_submit("{\"command\":\"c\",\"gpu\":\"h100-5\",\"dataset\":\"coco\"}",
	         id);
	tick(now_ms());
	assert_int_equal(d_where(id), 1);
	o = job(id);
	assert_true(placement_true(o, "dataset_local"));
	json_decref(o);
	/* Bad dataset names are refused, naming the field. */
	node_http(
	    "POST", "/v1/nodes",
	    "{\"protocol\":5,\"name\":\"d2\",\"gpu_type\":\"H100-80GB-SXM\","
	    "\"gpus\":1,"
	    "\"cpu_milli\":64000,\"mem_mib\":512000,\"datasets\":[\"a b\"]}",
	    &r);
	assert_error(&r, 400, "bad_request");
	assert_non_null(strstr(err_message(&r), "datasets"));
	reply_done(&r);
	d_report(id, "succeeded", 0);
	d_report(filler, "succeeded", 0);
	set_state(D.node[2], "up");
	set_state(F.node1, "up");
	set_state(F.node2, "up");
}

/*
 * Idempotency-Key on server creation, as on jobs: per user, with the
 * request's hash.  The same user, key and body get the original (200);
 * another body is 422; another user's identical key is invisible (their
 * own server, 201).
 */
static void test_server_idempotency_per_user(void **state)
{
	const char *b1 = "{\"name\":\"idem-a\",\"image\":\"host\","
	                 "\"profile\":\"h100-25pct\"}";
	const char *b2 = "{\"name\":\"idem-b\",\"image\":\"host\","
	                 "\"profile\":\"h100-25pct\"}";
	const char *key = "Idempotency-Key: server-key-1";
	char path[160], id[CNL_ID_MAX], other[CNL_ID_MAX];
	struct reply r;

	(void)state;
	snprintf(path, sizeof(path), "/v1/projects/%s/servers", F.proj_a);
	http_n("POST", path, F.token[MEMBER], b1, 0, key, &r);
	expect(&r, 201, "server with a key");
	snprintf(id, sizeof(id), "%s", str(r.body, "id"));
	reply_done(&r);
	http_n("POST", path, F.token[MEMBER], b1, 0, key, &r);
	expect(&r, 200, "the same request again");
	assert_string_equal(str(r.body, "id"), id);
	reply_done(&r);
	http_n("POST", path, F.token[MEMBER], b2, 0, key, &r);
	assert_error(&r, 422, "idempotency_conflict");
	reply_done(&r);
	http_n("POST", path, F.token[PADMIN], b2, 0, key, &r);
	expect(&r, 201, "another user, the same key");
	snprintf(other, sizeof(other), "%s", str(r.body, "id"));
	assert_string_not_equal(other, id);
	reply_done(&r);
	snprintf(path, sizeof(path), "/v1/servers/%s", id);
	http("DELETE", path, F.token[MEMBER], NULL, &r);
	reply_done(&r);
	snprintf(path, sizeof(path), "/v1/servers/%s", other);
	http("DELETE", path, F.token[PADMIN], NULL, &r);
	reply_done(&r);
}

/* Status of @method @path with bearer @tok and @body; the reply freed. */
static long st_as(const char *method, const char *path, const char *tok,
                  const char *body)
{
	struct reply r;
	long st;

	http(method, path, tok, body, &r);
	st = r.status;
	reply_done(&r);
	return st;
}

static void join_token(const char *node, char *ret)
{
	char b[128];
	json_t *o;

	snprintf(b, sizeof(b), "{\"node\":\"%s\"}", node);
	o = call_ok("POST", "/v1/nodes/join-tokens", ADMIN, b, 201);
	snprintf(ret, CNL_API_NODE_SECRET_MAX, "%s", str(o, "token"));
	assert_int_equal(strncmp(ret, "cnlj_", 5), 0);
	json_decref(o);
}

/*
 * Node identity: a node's credential acts for that node and the work
 * assigned to it only; join tokens register their node once; rotation
 * keeps the old credential an overlap; revocation cuts a node off.
 */
static void test_node_identity(void **state)
{
	char id[CNL_ID_MAX], path[300], body[512], jt[CNL_API_NODE_SECRET_MAX];
	char cred[CNL_API_NODE_SECRET_MAX], old[CNL_API_NODE_SECRET_MAX];
	char jx[CNL_ID_MAX];
	const char *mine, *other, *ocred;
	static const char reg[] =
	    "{\"protocol\":5,\"name\":\"%s\",\"gpus\":0,\"cpu_milli\":1000,"
	    "\"mem_mib\":1024}";
	json_t *o, *as;
	int64_t ep;
	int n;

	submit(MEMBER, F.proj_a, "{\"command\":\"x\",\"gpu\":\"h100-5\"}", id);
	tick(now_ms());
	o = job(id);
	n = nc_by_name(placement_str(o, "node"), false);
	json_decref(o);
	assert_true(n >= 0);
	mine = NC[n].id;
	other = strcmp(mine, F.node1) == 0 ? F.node2 : F.node1;
	ocred = node_cred(other);
	as = assignments(mine);
	ep = epoch_of(find(as, id));
	json_decref(as);

	/* The other node's credential on this node's routes: refused. */
	static const char *const routes[][2] = {
	    {"GET", "assignments"}, {"POST", "heartbeat"},
	    {"POST", "reports"},    {"POST", "logs"},
	    {"GET", "inputs"},      {"GET", "tunnels"},
	    {"PUT", "artifacts"},   {"GET", "checkpoints"},
	    {"POST", "credential"}, {"GET", "blobs/sha256:0"}};
	for (size_t i = 0; i < sizeof(routes) / sizeof(routes[0]); i++) {
		snprintf(path, sizeof(path),
		         "/v1/nodes/%s/%s?job=%s&epoch=%lld", mine,
		         routes[i][1], id, (long long)ep);
		if (st_as(routes[i][0], path, ocred, "{}") != 403)
			fail_msg("%s %s with another node's credential: not "
			         "403",
			         routes[i][0], path);
		/* Nor a user's: administrators and role "agent" too. */
		assert_int_equal(
		    st_as(routes[i][0], path, F.token[ADMIN], "{}"), 403);
		assert_int_equal(
		    st_as(routes[i][0], path, F.token[AGENT], "{}"), 403);
		assert_int_equal(st_as(routes[i][0], path, "cnln_bogus", "{}"),
		                 401);
	}
	/* On its own routes, naming work that is not its: fenced. */
	snprintf(path, sizeof(path), "/v1/nodes/%s/reports", other);
	snprintf(body, sizeof(body),
	         "{\"id\":\"%s\",\"epoch\":%lld,\"state\":\"failed\","
	         "\"exit_code\":1}",
	         id, (long long)ep);
	assert_int_equal(st_as("POST", path, ocred, body), 409);
	snprintf(path, sizeof(path), "/v1/nodes/%s/logs", other);
	snprintf(body, sizeof(body),
	         "{\"id\":\"%s\",\"epoch\":%lld,\"stream\":\"stdout\","
	         "\"data\":\"forged\"}",
	         id, (long long)ep);
	assert_int_equal(st_as("POST", path, ocred, body), 409);
	snprintf(path, sizeof(path), "/v1/nodes/%s/inputs?job=%s&epoch=%lld",
	         other, id, (long long)ep);
	assert_int_equal(st_as("GET", path, ocred, NULL), 409);
	/* Registering as the other node: refused. */
	o = call_ok("GET", "/v1/nodes", ADMIN, NULL, 200);
	for (size_t i = 0; i < json_array_size(json_object_get(o, "items"));
	     i++) {
		json_t *it = json_array_get(json_object_get(o, "items"), i);

		if (strcmp(str(it, "id"), mine) == 0)
			snprintf(body, sizeof(body),
			         "{\"protocol\":5,\"name\":\"%s\","
			         "\"gpu_type\":\"H100-80GB-SXM\",\"gpus\":%lld,"
			         "\"cpu_milli\":64000,\"mem_mib\":512000}",
			         str(it, "name"),
			         (long long)json_integer_value(
			             json_object_get(it, "gpus")));
	}
	json_decref(o);
	assert_int_equal(st_as("POST", "/v1/nodes", ocred, body), 403);
	/* Nothing changed: the job runs where it ran, no output. */
	o = job(id);
	assert_string_equal(placement_str(o, "node"), NC[n].name);
	assert_string_equal(str(o, "state"), "running");
	json_decref(o);
	snprintf(path, sizeof(path), "/v1/jobs/%s/logs", id);
	o = call_ok("GET", path, MEMBER, NULL, 200);
	{
		char *text = json_dumps(o, 0);

		assert_null(strstr(text, "forged"));
		free(text);
	}
	json_decref(o);
	assert_int_equal(report(mine, id, ep, "succeeded", 0), 200);

	/* A join token registers its node, once. */
	join_token("jx", jt);
	snprintf(body, sizeof(body), reg, "jy");
	assert_int_equal(st_as("POST", "/v1/nodes", jt, body), 403);
	snprintf(path, sizeof(path), "/v1/nodes/%s/heartbeat", F.node1);
	assert_int_equal(st_as("POST", path, jt, "{}"), 401);
	snprintf(body, sizeof(body), reg, "jx");
	{
		struct reply r;

		http("POST", "/v1/nodes", jt, body, &r);
		expect(&r, 201, "join");
		snprintf(cred, sizeof(cred), "%s", str(r.body, "credential"));
		snprintf(jx, sizeof(jx), "%s", str(r.body, "id"));
		reply_done(&r);
	}
	assert_int_equal(strncmp(cred, "cnln_", 5), 0);
	assert_int_equal(st_as("POST", "/v1/nodes", jt, body), 401);
	/* Its credential registers it again (a restart), gets no other. */
	assert_int_equal(st_as("POST", "/v1/nodes", cred, body), 200);
	snprintf(path, sizeof(path), "/v1/nodes/%s/heartbeat", jx);
	assert_int_equal(st_as("POST", path, cred, "{}"), 200);
	/* Rotation: the new one works, the old one for the overlap. */
	snprintf(path, sizeof(path), "/v1/nodes/%s/credential", jx);
	o = call_ok("POST", path, -1, NULL, 401);
	json_decref(o);
	{
		struct reply r;
		struct cnl_wire_credential m;
		char err[256];

		http("POST", path, cred, NULL, &r);
		expect(&r, 200, "rotate");
		assert_int_equal(
		    cnl_wire_credential_decode(r.body, &m, err, sizeof(err)),
		    0);
		reply_done(&r);
		snprintf(old, sizeof(old), "%s", cred);
		snprintf(cred, sizeof(cred), "%.63s", m.credential);
	}
	assert_string_not_equal(old, cred);
	snprintf(path, sizeof(path), "/v1/nodes/%s/heartbeat", jx);
	assert_int_equal(st_as("POST", path, old, "{}"), 200);
	assert_int_equal(st_as("POST", path, cred, "{}"), 200);
	usleep((OVERLAP_MS + 300) * 1000);
	assert_int_equal(st_as("POST", path, old, "{}"), 401);
	assert_int_equal(st_as("POST", path, cred, "{}"), 200);
	/* A re-join (an administrator's new join token): the node's
	 * earlier credentials die. */
	join_token("jx", jt);
	snprintf(body, sizeof(body), reg, "jx");
	{
		struct reply r;

		http("POST", "/v1/nodes", jt, body, &r);
		expect(&r, 200, "re-join");
		snprintf(old, sizeof(old), "%s", cred);
		snprintf(cred, sizeof(cred), "%s", str(r.body, "credential"));
		reply_done(&r);
	}
	assert_int_equal(st_as("POST", path, old, "{}"), 401);
	assert_int_equal(st_as("POST", path, cred, "{}"), 200);
	/* Revocation: only administrators; the next request is refused,
	 * unused join tokens die too, and the node is lost. */
	join_token("jx", jt);
	snprintf(path, sizeof(path), "/v1/nodes/%s/revoke", jx);
	json_decref(call_ok("POST", path, MEMBER, NULL, 403));
	json_decref(
	    call_ok("POST", "/v1/nodes/nosuch/revoke", ADMIN, NULL, 404));
	json_decref(call_ok("POST", "/v1/nodes/jx/revoke", ADMIN, NULL, 200));
	snprintf(path, sizeof(path), "/v1/nodes/%s/heartbeat", jx);
	assert_int_equal(st_as("POST", path, cred, "{}"), 401);
	assert_int_equal(st_as("POST", "/v1/nodes", jt, body), 401);
	snprintf(path, sizeof(path), "/v1/nodes/%s", jx);
	o = call_ok("GET", path, ADMIN, NULL, 200);
	assert_string_equal(str(o, "state"), "lost");
	json_decref(o);
	/* A new join token brings it back. */
	join_token("jx", jt);
	assert_int_equal(st_as("POST", "/v1/nodes", jt, body), 200);
	/* Join tokens: a node name is required; the lifetime is short. */
	json_decref(call_ok("POST", "/v1/nodes/join-tokens", ADMIN, "{}", 400));
	json_decref(call_ok("POST", "/v1/nodes/join-tokens", ADMIN,
	                    "{\"node\":\"a\",\"expires_in_hours\":73}", 400));
	json_decref(call_ok("POST", "/v1/nodes/join-tokens", MEMBER,
	                    "{\"node\":\"a\"}", 403));
}

/* ---- in-flight resize (PATCH /v1/jobs/{job}, /v1/servers/{server}) ----- */

/* PATCH @path with @body as @who; the reply's status and body. */
static json_t *rz_patch(const char *path, int who, const char *body,
                        long status)
{
	return call_ok("PATCH", path, who, body, status);
}

/* The "gpu" of @id's assignment on @node: blocks and vram_mib. */
static void rz_slice(const char *node, const char *id, int *blocks,
                     int64_t *vram)
{
	json_t *as = assignments(node), *a = find(as, id), *g;

	assert_non_null(a);
	g = json_object_get(a, "gpu");
	*blocks = (int)json_integer_value(json_object_get(g, "blocks"));
	*vram = json_integer_value(json_object_get(g, "vram_mib"));
	json_decref(as);
}

/* A heartbeat of @node running @ids (their epochs in @eps), the first
 * with its slice's use and quota in MiB (-1: not sent). */
static void rz_heartbeat(const char *node, char ids[][CNL_ID_MAX],
                         const int64_t *eps, int n, int64_t used_mib,
                         int64_t quota_mib)
{
	char path[160], body[1024];
	size_t k;
	json_t *o;

	k = (size_t)snprintf(body, sizeof(body), "{\"running\":[");
	for (int i = 0; i < n; i++) {
		k += (size_t)snprintf(body + k, sizeof(body) - k,
		                      "%s{\"id\":\"%s\",\"epoch\":%lld",
		                      i ? "," : "", ids[i], (long long)eps[i]);
		if (i == 0 && used_mib >= 0)
			k += (size_t)snprintf(
			    body + k, sizeof(body) - k,
			    ",\"vram_used\":%lld,\"vram_quota\":%lld",
			    (long long)used_mib << 20,
			    (long long)quota_mib << 20);
		k += (size_t)snprintf(body + k, sizeof(body) - k, "}");
	}
	snprintf(body + k, sizeof(body) - k, "]}");
	snprintf(path, sizeof(path), "/v1/nodes/%s/heartbeat", node);
	o = call_ok("POST", path, AGENT, body, 200);
	assert_int_equal(json_array_size(json_object_get(o, "stop")), 0);
	json_decref(o);
}

static int rz_status_int(json_t *doc, const char *key)
{
	return (int)json_integer_value(
	    json_object_get(json_object_get(doc, "status"), key));
}

/* How many audit records of @action on @target have a result @result. */
static int rz_audited(const char *action, const char *target,
                      const char *result)
{
	char path[96];
	long long after = 0;
	int n = 0;

	for (;;) {
		json_t *o, *it, *next;
		size_t i;

		snprintf(path, sizeof(path), "/v1/audit?after=%lld&limit=1000",
		         after);
		o = call_ok("GET", path, ADMIN, NULL, 200);
		json_array_foreach (json_object_get(o, "items"), i, it)
			n += strcmp(str(it, "action"), action) == 0 &&
			     strcmp(str(it, "target"), target) == 0 &&
			     strcmp(str(it, "result"), result) == 0;
		next = json_object_get(o, "next");
		after = json_is_integer(next) ? json_integer_value(next) : 0;
		json_decref(o);
		if (!after)
			return n;
	}
}

/* Whether @id's decisions hold a "resize" stage. */
static bool rz_decided(const char *id)
{
	char path[128];
	bool found = false;
	json_t *o, *it;
	size_t i;

	snprintf(path, sizeof(path), "/v1/jobs/%s/decisions", id);
	o = call_ok("GET", path, MEMBER, NULL, 200);
	json_array_foreach (json_object_get(o, "items"), i, it)
		found |= strcmp(str(it, "stage"), "resize") == 0 &&
		         strstr(str(it, "decision"), "shrunk from 30 to 20");
	json_decref(o);
	return found;
}

/*
 * A node of its own (one L40S, 46068 MiB, which no other test uses) and a
 * project of its own: a pending job's request changes; a running one
 * grows in place at once, is refused growing past its GPU's free blocks
 * (409 naming them), and shrinks in two steps: the node is told the
 * smaller size at once while its blocks stay held, until a heartbeat says
 * the region's quota was lowered and its use fits; then the blocks are
 * released and other work is placed on them.  Only the owner and project
 * admins resize (another member 403, another project 404); bad bodies
 * are 400 naming the field; whole GPUs 409.
 */
static void test_resize(void **state)
{
	char proj[CNL_ID_MAX], node[CNL_ID_MAX], j1[CNL_ID_MAX], j2[CNL_ID_MAX],
	    j3[CNL_ID_MAX], jw[CNL_ID_MAX], path[160], p1[160],
	    ids[2][CNL_ID_MAX];
	int64_t eps[2], vram;
	int blocks;
	json_t *o, *as;
	struct reply r;

	(void)state;
	make_project("resize", proj);
	grant(proj, PADMIN, "project-admin");
	grant(proj, MEMBER, "member");
	grant(proj, VIEWER, "member"); /* a member, not the owner */
	o = call_ok("POST", "/v1/nodes", AGENT,
	            "{\"protocol\":6,\"name\":\"rz\",\"gpu_type\":\"L40S\","
	            "\"gpus\":1,\"cpu_milli\":64000,\"mem_mib\":512000}",
	            201);
	snprintf(node, sizeof(node), "%s", str(o, "id"));
	json_decref(o);

	/* Pending: the request changes. */
	submit(MEMBER, proj, "{\"command\":\"a\",\"gpu\":\"l40s-10\"}", j1);
	snprintf(p1, sizeof(p1), "/v1/jobs/%s", j1);
	o = rz_patch(p1, MEMBER, "{\"blocks\":12}", 200);
	assert_string_equal(str(o, "state"), "pending");
	assert_int_equal(rz_status_int(o, "resized"), 12);
	json_decref(o);
	/* Bad bodies name the field; others may not. */
	http("PATCH", p1, F.token[MEMBER], "{\"blocks\":0}", &r);
	expect(&r, 400, "blocks 0");
	assert_non_null(strstr(r.raw, "blocks"));
	reply_done(&r);
	http("PATCH", p1, F.token[MEMBER], "{\"blocks\":\"5\"}", &r);
	expect(&r, 400, "blocks \"5\"");
	assert_non_null(strstr(r.raw, "blocks"));
	reply_done(&r);
	http("PATCH", p1, F.token[MEMBER], "{\"blocks\":5,\"vram\":1}", &r);
	expect(&r, 400, "unknown field");
	assert_non_null(strstr(r.raw, "vram"));
	reply_done(&r);
	json_decref(rz_patch(p1, MEMBER, "{\"blocks\":101}", 400));
	json_decref(rz_patch(p1, VIEWER, "{\"blocks\":40}", 403));
	json_decref(rz_patch(p1, BOB, "{\"blocks\":40}", 404));

	/* Placed at its new size. */
	tick(now_ms());
	rz_slice(node, j1, &blocks, &vram);
	assert_int_equal(blocks, 12);
	assert_int_equal(vram, 46068 * 12 / 100);
	as = assignments(node);
	eps[0] = epoch_of(find(as, j1));
	json_decref(as);
	snprintf(ids[0], CNL_ID_MAX, "%s", j1);
	assert_int_equal(report(node, j1, eps[0], "running", 0), 200);

	/* Growing: at once, in place. */
	o = rz_patch(p1, MEMBER, "{\"blocks\":30}", 200);
	assert_int_equal(rz_status_int(o, "blocks"), 30);
	json_decref(o);
	rz_slice(node, j1, &blocks, &vram);
	assert_int_equal(blocks, 30);
	assert_int_equal(vram, 46068 * 30 / 100);
	assert_int_equal(node_blocks(node), 30);

	/* Another job takes 60 of the 70 left; growing past the free
	 * blocks is refused, naming them. */
	submit(MEMBER, proj, "{\"command\":\"b\",\"gpu\":\"l40s-60\"}", j2);
	tick(now_ms());
	as = assignments(node);
	assert_non_null(find(as, j2));
	eps[1] = epoch_of(find(as, j2));
	json_decref(as);
	snprintf(ids[1], CNL_ID_MAX, "%s", j2);
	assert_int_equal(node_blocks(node), 90);
	http("PATCH", p1, F.token[MEMBER], "{\"blocks\":50}", &r);
	expect(&r, 409, "grow past the GPU");
	assert_non_null(strstr(r.raw, "has 10 free blocks"));
	reply_done(&r);
	o = job(j1);
	assert_int_equal(rz_status_int(o, "blocks"), 30);
	json_decref(o);

	/* Shrinking (by a project admin): the node is told 20 at once; the
	 * 30 blocks stay held while the slice uses more than 20's VRAM. */
	o = rz_patch(p1, PADMIN, "{\"blocks\":20}", 200);
	assert_int_equal(rz_status_int(o, "blocks"), 30);
	assert_int_equal(rz_status_int(o, "shrinking_to"), 20);
	json_decref(o);
	rz_slice(node, j1, &blocks, &vram);
	assert_int_equal(blocks, 20);
	assert_int_equal(vram, 46068 * 20 / 100);
	/* A third job of 20 blocks does not fit yet. */
	submit(MEMBER, proj, "{\"command\":\"c\",\"gpu\":\"l40s-20\"}", j3);
	tick(now_ms());
	as = assignments(node);
	assert_null(find(as, j3));
	json_decref(as);
	/* Use above the new quota: held. */
	rz_heartbeat(node, ids, eps, 2, 12000, 46068 * 20 / 100);
	tick(now_ms());
	assert_int_equal(node_blocks(node), 90);
	o = job(j1);
	assert_int_equal(rz_status_int(o, "shrinking_to"), 20);
	json_decref(o);
	/* Use that fits, but the quota not lowered yet (the agent has not
	 * applied it): held. */
	rz_heartbeat(node, ids, eps, 2, 1024, 46068 * 30 / 100);
	tick(now_ms());
	assert_int_equal(node_blocks(node), 90);
	/* An older agent's heartbeat (no use sent): held. */
	rz_heartbeat(node, ids, eps, 2, -1, -1);
	assert_int_equal(node_blocks(node), 90);
	/* A restarted cnlabd carries on: still 30 held, 20 told. */
	restart_cnlabd();
	o = job(j1);
	assert_int_equal(rz_status_int(o, "blocks"), 30);
	assert_int_equal(rz_status_int(o, "shrinking_to"), 20);
	assert_int_equal(rz_status_int(o, "resized"), 20);
	json_decref(o);
	rz_slice(node, j1, &blocks, &vram);
	assert_int_equal(blocks, 20);
	assert_int_equal(node_blocks(node), 90);
	/* Quota lowered and use within it: released, audited, and the
	 * third job is placed on the blocks. */
	rz_heartbeat(node, ids, eps, 2, 1024, 46068 * 20 / 100);
	o = job(j1);
	assert_int_equal(rz_status_int(o, "blocks"), 20);
	assert_null(
	    json_object_get(json_object_get(o, "status"), "shrinking_to"));
	json_decref(o);
	assert_true(rz_decided(j1));
	/* Each resize asked is in the audit log, with its answer. */
	assert_int_equal(rz_audited("job.resize", j1, "200 blocks 12"), 1);
	assert_int_equal(rz_audited("job.resize", j1, "200 blocks 30"), 1);
	assert_int_equal(rz_audited("job.resize", j1, "409 conflict"), 1);
	assert_int_equal(rz_audited("job.resize", j1, "403 forbidden"), 1);
	assert_int_equal(rz_audited("job.resize", j1, "200 blocks 20"), 1);
	tick(now_ms());
	as = assignments(node);
	assert_non_null(find(as, j3));
	json_decref(as);
	assert_int_equal(node_blocks(node), 100);

	/* Whole GPUs do not resize. */
	submit(MEMBER, proj, "{\"command\":\"w\",\"gpu\":\"l40s-full\"}", jw);
	snprintf(path, sizeof(path), "/v1/jobs/%s", jw);
	http("PATCH", path, F.token[MEMBER], "{\"blocks\":50}", &r);
	expect(&r, 409, "whole GPU");
	assert_non_null(strstr(r.raw, "whole GPUs"));
	reply_done(&r);

	/* Servers: the same route, the owner's. */
	json_decref(call_ok("POST", "/v1/profiles", ADMIN,
	                    "{\"name\":\"l40s-10pct\",\"gpu\":\"l40s-10\","
	                    "\"description\":\"resize test\"}",
	                    200));
	snprintf(path, sizeof(path), "/v1/projects/%s/servers", proj);
	o = call_ok("POST", path, MEMBER,
	            "{\"name\":\"rz\",\"image\":\"host\",\"profile\":"
	            "\"l40s-10pct\"}",
	            201);
	snprintf(path, sizeof(path), "/v1/servers/%s", str(o, "id"));
	snprintf(p1, sizeof(p1), "/v1/servers/%s/stop", str(o, "id"));
	json_decref(o);
	json_decref(rz_patch(path, VIEWER, "{\"blocks\":20}", 403));
	json_decref(rz_patch(path, BOB, "{\"blocks\":20}", 404));
	o = rz_patch(path, MEMBER, "{\"blocks\":20}", 200);
	assert_int_equal(rz_status_int(o, "resized"), 20);
	json_decref(o);
	json_decref(call_ok("POST", p1, MEMBER, NULL, 200));

	/* Clean up. */
	for (int i = 0; i < 4; i++) {
		const char *id = i == 0 ? j1 : i == 1 ? j2 : i == 2 ? j3 : jw;

		snprintf(path, sizeof(path), "/v1/jobs/%s/cancel", id);
		json_decref(call_ok("POST", path, MEMBER, NULL, 200));
	}
}

/*
 * A MIG request's profile lives in its workload's own record, which moves:
 * the registry grows (realloc) as jobs arrive and a removal fills its hole
 * with the last record.  Many MIG jobs, half of them cancelled, then a
 * cycle that reads every pending request: under ASan (the CI runs this
 * file so) a profile left pointing at the old record is a use after free.
 */
static void test_mig_profile_moves(void **state)
{
	enum { N = 300 };
	static char ids[N][CNL_ID_MAX];
	char proj[CNL_ID_MAX], path[CNL_ID_MAX + 32];
	json_t *o;

	(void)state;
	make_project("migmoves", proj);
	grant(proj, MEMBER, "member");
	for (int i = 0; i < N; i++)
		submit(MEMBER, proj,
		       "{\"command\":\"m\",\"gpu\":\"h100-1g.10gb\","
		       "\"priority\":\"low\"}",
		       ids[i]);
	for (int i = 0; i < N; i += 2) {
		snprintf(path, sizeof(path), "/v1/jobs/%.*s/cancel",
		         CNL_ID_MAX - 1, ids[i]);
		json_decref(call_ok("POST", path, MEMBER, "{}", 200));
	}
	tick(now_ms());
	tick(now_ms());
	for (int i = 1; i < N; i += 2) {
		o = job(ids[i]);
		assert_string_not_equal(str(o, "state"), "failed");
		json_decref(o);
	}
	for (int i = 1; i < N; i += 2) {
		snprintf(path, sizeof(path), "/v1/jobs/%.*s/cancel",
		         CNL_ID_MAX - 1, ids[i]);
		json_decref(call_ok("POST", path, MEMBER, "{}", 200));
	}
	tick(now_ms());
}

/*
 * Shrink instead of pre-empt: a critical block job that does not fit
 * beside a low-priority preemptible slice that has run long enough to be
 * a victim gets room by shrinking the slice (not below its reported VRAM
 * use) rather than by killing it; it starts once the slice's node reports
 * the smaller quota applied and the use within it, and the slice runs on.
 */
static void test_resize_admit(void **state)
{
	char proj[CNL_ID_MAX], node[CNL_ID_MAX], v[CNL_ID_MAX], jc[CNL_ID_MAX],
	    ids[1][CNL_ID_MAX], path[160];
	int64_t eps[1], t = now_ms(), vram;
	int blocks;
	bool found = false;
	json_t *o, *as, *it;
	size_t i;

	(void)state;
	make_project("admit", proj);
	grant(proj, MEMBER, "member");
	/* An L4: 23034 MiB, a block is 230 MiB. */
	o = call_ok("POST", "/v1/nodes", AGENT,
	            "{\"protocol\":6,\"name\":\"rza\",\"gpu_type\":\"L4\","
	            "\"gpus\":1,\"cpu_milli\":64000,\"mem_mib\":512000}",
	            201);
	snprintf(node, sizeof(node), "%s", str(o, "id"));
	json_decref(o);
	submit(MEMBER, proj,
	       "{\"command\":\"v\",\"gpu\":\"l4-60\",\"priority\":\"low\"}", v);
	tick(t);
	as = assignments(node);
	assert_non_null(find(as, v));
	eps[0] = epoch_of(find(as, v));
	json_decref(as);
	snprintf(ids[0], CNL_ID_MAX, "%s", v);
	assert_int_equal(report(node, v, eps[0], "running", 0), 200);
	/* It uses 2 GiB (9 blocks' worth). */
	rz_heartbeat(node, ids, eps, 1, 2048, 23034 * 60 / 100);
	submit(MEMBER, proj,
	       "{\"command\":\"c\",\"gpu\":\"l4-50\",\"priority\":"
	       "\"critical\"}",
	       jc);
	/* Eleven minutes on, it could be a victim: it is shrunk to 50. */
	tick(t + 11 * 60 * 1000);
	as = assignments(node);
	assert_string_equal(str(find(as, v), "action"), "run");
	assert_null(find(as, jc));
	json_decref(as);
	rz_slice(node, v, &blocks, &vram);
	assert_int_equal(blocks, 50);
	assert_int_equal(vram, 23034 * 50 / 100);
	o = job(v);
	assert_string_equal(str(o, "state"), "running");
	assert_int_equal(rz_status_int(o, "shrinking_to"), 50);
	json_decref(o);
	tick(t + 11 * 60 * 1000 + 1000);
	as = assignments(node);
	assert_string_equal(str(find(as, v), "action"), "run");
	assert_null(find(as, jc));
	json_decref(as);
	/* The node applied it: released, and the critical job starts. */
	rz_heartbeat(node, ids, eps, 1, 2048, 23034 * 50 / 100);
	tick(t + 11 * 60 * 1000 + 2000);
	as = assignments(node);
	assert_string_equal(str(find(as, v), "action"), "run");
	assert_non_null(find(as, jc));
	json_decref(as);
	assert_int_equal(node_blocks(node), 100);
	snprintf(path, sizeof(path), "/v1/jobs/%s/decisions", v);
	o = call_ok("GET", path, MEMBER, NULL, 200);
	json_array_foreach (json_object_get(o, "items"), i, it)
		found |= strcmp(str(it, "stage"), "preempt") == 0 &&
		         strstr(str(it, "decision"),
		                "shrinking from 60 to 50 blocks") != NULL;
	json_decref(o);
	assert_true(found);
	/* Both end. */
	as = assignments(node);
	assert_int_equal(report(node, v, eps[0], "succeeded", 0), 200);
	assert_int_equal(
	    report(node, jc, epoch_of(find(as, jc)), "succeeded", 0), 200);
	json_decref(as);

	/* A slice whose use does not fall: the shrink is given up after
	 * two minutes, its size comes back, and the critical job is
	 * scheduled as any other (here: it pre-empts the slice). */
	t += 12 * 60 * 1000;
	submit(MEMBER, proj,
	       "{\"command\":\"v2\",\"gpu\":\"l4-60\",\"priority\":\"low\"}",
	       v);
	tick(t);
	as = assignments(node);
	eps[0] = epoch_of(find(as, v));
	json_decref(as);
	snprintf(ids[0], CNL_ID_MAX, "%s", v);
	assert_int_equal(report(node, v, eps[0], "running", 0), 200);
	rz_heartbeat(node, ids, eps, 1, 2048, 23034 * 60 / 100);
	submit(MEMBER, proj,
	       "{\"command\":\"c2\",\"gpu\":\"l4-50\",\"priority\":"
	       "\"critical\"}",
	       jc);
	tick(t + 11 * 60 * 1000);
	rz_slice(node, v, &blocks, &vram);
	assert_int_equal(blocks, 50);
	rz_heartbeat(node, ids, eps, 1, 15000, 23034 * 50 / 100);
	tick(t + 12 * 60 * 1000);
	as = assignments(node);
	assert_string_equal(str(find(as, v), "action"), "run");
	assert_null(find(as, jc));
	json_decref(as);
	tick(t + 13 * 60 * 1000 + 1000);
	as = assignments(node);
	assert_string_equal(str(find(as, v), "action"), "stop");
	assert_int_equal(json_integer_value(json_object_get(
	                     json_object_get(find(as, v), "gpu"), "blocks")),
	                 60);
	json_decref(as);
	assert_int_equal(report(node, v, eps[0], "failed", 143), 200);
	tick(t + 13 * 60 * 1000 + 2000);
	as = assignments(node);
	assert_non_null(find(as, jc));
	assert_int_equal(
	    report(node, jc, epoch_of(find(as, jc)), "succeeded", 0), 200);
	json_decref(as);
	snprintf(path, sizeof(path), "/v1/jobs/%s/cancel", v);
	json_decref(call_ok("POST", path, MEMBER, NULL, 200));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_node_registration),
	    cmocka_unit_test(test_job_lifecycle),
	    cmocka_unit_test(test_long_poll),
	    cmocka_unit_test(test_servers),
	    cmocka_unit_test(test_profiles),
	    cmocka_unit_test(test_quota),
	    cmocka_unit_test(test_dashboard_usage),
	    cmocka_unit_test(test_preemption),
	    cmocka_unit_test(test_deadline_admission),
	    cmocka_unit_test(test_node_loss_and_fencing),
	    cmocka_unit_test(test_work_lost_by_agent),
	    cmocka_unit_test(test_metrics_promtool),
	    cmocka_unit_test(test_route_role_matrix),
	    cmocka_unit_test(test_job_fields_setup),
	    cmocka_unit_test(test_job_fields_stored_and_explained),
	    cmocka_unit_test(test_job_gpu_types_restrict),
	    cmocka_unit_test(test_gang),
	    cmocka_unit_test(test_job_fields_survive_restart),
	    cmocka_unit_test(test_job_nodelist),
	    cmocka_unit_test(test_restart_same_view),
	    cmocka_unit_test(test_restart_fails_unknown_shape),
	    cmocka_unit_test(test_node_datasets_relabel),
	    cmocka_unit_test(test_server_idempotency_per_user),
	    cmocka_unit_test(test_node_identity),
	    cmocka_unit_test(test_resize),
	    cmocka_unit_test(test_resize_admit),
	};

	/* On a server of its own, whose registry is still small enough to
	 * grow (the main group's reaches thousands of workloads). */
	const struct CMUnitTest registry[] = {
	    cmocka_unit_test(test_mig_profile_moves),
	};

	if (cmocka_run_group_tests_name("registry", registry, registry_setup,
	                                registry_teardown) != 0)
		return 1;
	return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
