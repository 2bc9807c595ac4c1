/*
 * test_trace.c - the Alibaba GPU trace v2023 loader: small hand-made node
 * and pod lists (written to a temporary directory) load into the exact
 * nodes and pods they describe; every malformed input is refused with the
 * right code and a message naming file, line and column, leaving the
 * cluster and the caller's pointers untouched; pods map to the right
 * allocator requests; and, when the real trace is at hand (CNL_TRACE_DIR,
 * else $CNL_SOURCE_DIR/../shared/traces/alibaba-gpu-v2023), every file of
 * it loads with the counts its README gives.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <cmocka.h>

#include "cnlab/errors.h"
#include "sim/trace.h"

#define NODE_HDR "sn,cpu_milli,memory_mib,gpu,model\n"
#define POD_HDR                                                               \
	"name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase," \
	"creation_time,deletion_time,scheduled_time\n"
#define POD_SHORT_HDR "name,cpu_milli,memory_mib,num_gpu,gpu_milli\n"

static char tmpdir[PATH_MAX];
static char path_buf[PATH_MAX + 64];

/* Write `text` to a file `name` in the temporary directory; returns its
 * path (valid until the next call). */
static const char *put(const char *name, const char *text)
{
	FILE *f;

	snprintf(path_buf, sizeof(path_buf), "%s/%s", tmpdir, name);
	f = fopen(path_buf, "w");
	assert_non_null(f);
	assert_int_equal(fwrite(text, 1, strlen(text), f), strlen(text));
	assert_int_equal(fclose(f), 0);
	return path_buf;
}

static int group_setup(void **state)
{
	const char *base = getenv("TMPDIR");

	(void)state;
	snprintf(tmpdir, sizeof(tmpdir), "%s/cnl-trace-XXXXXX",
	         base && base[0] ? base : "/tmp");
	return mkdtemp(tmpdir) ? 0 : -1;
}

static int group_teardown(void **state)
{
	DIR *d = opendir(tmpdir);
	struct dirent *e;
	char p[PATH_MAX + 300];

	(void)state;
	if (!d)
		return -1;
	while ((e = readdir(d)) != NULL) {
		if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
			continue;
		snprintf(p, sizeof(p), "%s/%s", tmpdir, e->d_name);
		if (rmdir(p) != 0)
			unlink(p);
	}
	closedir(d);
	return rmdir(tmpdir);
}

/* A catalog and an empty cluster over it. */
struct world {
	struct cnl_catalog cat;
	struct cnl_cluster *c;
};

static void world_init(struct world *w)
{
	cnl_catalog_init(&w->cat);
	assert_int_equal(cnl_cluster_new(&w->cat, &w->c), 0);
}

static int tidx(const struct cnl_catalog *cat, const char *name)
{
	int t = cnl_catalog_find(cat, name);
	assert_true(t >= 0);
	return t;
}

/* ---- GPU models ------------------------------------------------------ */

static void test_gpu_type(void **state)
{
	struct cnl_catalog cat;
	int n0, g1, g2;

	(void)state;
	cnl_catalog_init(&cat);
	n0 = cat.n;
	assert_int_equal(cnl_trace_gpu_type(&cat, "T4"), tidx(&cat, "T4"));
	assert_int_equal(cnl_trace_gpu_type(&cat, "P100"), tidx(&cat, "P100"));
	assert_int_equal(cnl_trace_gpu_type(&cat, "V100M16"),
	                 tidx(&cat, "V100-16GB"));
	assert_int_equal(cnl_trace_gpu_type(&cat, "V100M32"),
	                 tidx(&cat, "V100-32GB"));
	assert_int_equal(cnl_trace_gpu_type(&cat, "A10"), tidx(&cat, "A10"));
	assert_int_equal(cat.n, n0);

	/* G types are added once, on first use. */
	g1 = cnl_trace_gpu_type(&cat, "G1");
	assert_int_equal(g1, n0);
	assert_int_equal(cat.n, n0 + 1);
	assert_int_equal(cnl_trace_gpu_type(&cat, "G1"), g1);
	assert_int_equal(cat.n, n0 + 1);
	g2 = cnl_trace_gpu_type(&cat, "G2");
	assert_int_equal(g2, n0 + 1);
	assert_int_equal(cnl_trace_gpu_type(&cat, "G3"), n0 + 2);
	assert_int_equal(cat.n, n0 + 3);
	assert_string_equal(cat.types[g1].name, "G1");
	assert_string_equal(cat.types[g2].name, "G2");
	assert_int_equal(cat.types[g2].n_mig, 0);
	assert_int_equal(cat.types[g2].sm_count, CNL_TRACE_G_SM_COUNT);
	assert_int_equal(cat.types[g2].vram_mib, CNL_TRACE_G_VRAM_MIB);
	assert_int_equal(cnl_catalog_find(&cat, "G2"), g2);

	/* Only the trace's own spelling. */
	assert_int_equal(cnl_trace_gpu_type(&cat, "V100"), -CNL_EGPUTYPE);
	assert_int_equal(cnl_trace_gpu_type(&cat, "V100-16GB"), -CNL_EGPUTYPE);
	assert_int_equal(cnl_trace_gpu_type(&cat, "t4"), -CNL_EGPUTYPE);
	assert_int_equal(cnl_trace_gpu_type(&cat, "G4"), -CNL_EGPUTYPE);
	assert_int_equal(cnl_trace_gpu_type(&cat, ""), -CNL_EGPUTYPE);
	assert_int_equal(cnl_trace_gpu_type(&cat, NULL), -CNL_EGPUTYPE);
	assert_int_equal(cat.n, n0 + 3);
}

/* A full catalog cannot take a G type. */
static void test_gpu_type_catalog_full(void **state)
{
	struct cnl_catalog cat;

	(void)state;
	cnl_catalog_init(&cat);
	while (cat.n < CNL_CATALOG_MAX_TYPES) {
		struct cnl_gpu_type t = {.sm_count = 1, .vram_mib = 1};
		snprintf(t.name, sizeof(t.name), "filler-%d", cat.n);
		assert_true(cnl_catalog_add(&cat, &t, NULL, 0) >= 0);
	}
	assert_int_equal(cnl_trace_gpu_type(&cat, "G2"), -CNL_ELIMIT);
	assert_true(cnl_trace_gpu_type(&cat, "T4") >= 0);
}

/* ---- node lists ------------------------------------------------------ */

static void test_nodes(void **state)
{
	struct world w;
	char err[256] = "";
	const struct cnl_node *n;
	/* CRLF line ends, no final newline. */
	const char *p = put("nodes.csv", "sn,cpu_milli,memory_mib,gpu,model\r\n"
	                                 "openb-node-0000,64000,262144,2,T4\r\n"
	                                 "openb-node-0001,96000,786432,8,G2\r\n"
	                                 "cpu-only,32000,131072,0,\r\n"
	                                 "v,8000,32768,1,V100M32");

	(void)state;
	world_init(&w);
	assert_int_equal(cnl_trace_load_nodes(p, &w.cat, w.c, err, sizeof(err)),
	                 4);
	assert_string_equal(err, "");
	assert_int_equal(w.c->n_nodes, 4);

	n = &w.c->nodes[0];
	assert_string_equal(n->name, "openb-node-0000");
	assert_int_equal(n->cpu_total, 64000);
	assert_int_equal(n->mem_total, 262144);
	assert_int_equal(n->n_gpus, 2);
	assert_int_equal(n->gpu_type, tidx(&w.cat, "T4"));

	n = &w.c->nodes[1];
	assert_string_equal(n->name, "openb-node-0001");
	assert_int_equal(n->cpu_total, 96000);
	assert_int_equal(n->mem_total, 786432);
	assert_int_equal(n->n_gpus, 8);
	assert_int_equal(n->gpu_type, tidx(&w.cat, "G2"));
	assert_int_equal(w.cat.types[n->gpu_type].n_mig, 0);

	n = &w.c->nodes[2];
	assert_string_equal(n->name, "cpu-only");
	assert_int_equal(n->cpu_total, 32000);
	assert_int_equal(n->mem_total, 131072);
	assert_int_equal(n->n_gpus, 0);

	n = &w.c->nodes[3];
	assert_string_equal(n->name, "v");
	assert_int_equal(n->n_gpus, 1);
	assert_int_equal(n->gpu_type, tidx(&w.cat, "V100-32GB"));
	assert_int_equal(cnl_cluster_check(w.c, err, sizeof(err)), 0);

	/* The loaded cluster takes work: 46 blocks of a T4. */
	{
		struct cnl_trace_pod pod = {.cpu_milli = 1000,
		                            .mem_mib = 1024,
		                            .num_gpu = 1,
		                            .gpu_milli = 460};
		struct cnl_alloc_req req;
		uint32_t id;
		pod.gpu_types = UINT64_C(1) << tidx(&w.cat, "T4");
		assert_int_equal(cnl_trace_pod_req(&w.cat, &pod, 1, &req), 0);
		assert_int_equal(cnl_alloc_place(w.c, &req, &id), 0);
		assert_int_equal(cnl_alloc_get(w.c, id)->node, 0);
	}
	cnl_cluster_free(w.c);
}

static void test_nodes_header_only(void **state)
{
	struct world w;
	char err[256] = "";

	(void)state;
	world_init(&w);
	assert_int_equal(cnl_trace_load_nodes(put("hdr.csv", NODE_HDR), &w.cat,
	                                      w.c, err, sizeof(err)),
	                 0);
	assert_int_equal(cnl_trace_load_nodes(put("hdr-nonl.csv",
	                                          "sn,cpu_milli,memory_mib,gpu,"
	                                          "model"),
	                                      &w.cat, w.c, err, sizeof(err)),
	                 0);
	assert_int_equal(w.c->n_nodes, 0);
	cnl_cluster_free(w.c);
}

struct bad_case {
	const char *text;
	int code;
	const char *where; /* "file:line:col:" */
	const char *what;  /* part of the message after it */
};

static const struct bad_case bad_nodes[] = {
    {"", -CNL_EPARSE, ":1:1:", "file is empty"},
    {"\n", -CNL_EPARSE, ":1:1:", "empty line"},
    {"sn,cpu,memory_mib,gpu,model\n", -CNL_EPARSE,
     ":1:2:", "header: expected \"cpu_milli\", found \"cpu\""},
    {"sn,cpu_milli,memory_mib,gpu\n", -CNL_EPARSE,
     ":1:5:", "too few fields: expected 5, found 4"},
    {"sn,cpu_milli,memory_mib,gpu,model,x\n", -CNL_EPARSE,
     ":1:6:", "too many fields"},
    {"name,cpu_milli,memory_mib,num_gpu,gpu_milli\n", -CNL_EPARSE,
     ":1:1:", "expected \"sn\", found \"name\""},
    {NODE_HDR "a,1,1,1,T4\nb,1,1,1,T4,\n", -CNL_EPARSE,
     ":3:6:", "too many fields: expected 5, found 6"},
    {NODE_HDR "a,1,1,1,T4\nb,1,1\n", -CNL_EPARSE,
     ":3:4:", "too few fields: expected 5, found 3"},
    {NODE_HDR "a,1,1,1,T4\n\nb,1,1,1,T4\n", -CNL_EPARSE, ":3:1:", "empty line"},
    {NODE_HDR "a,abc,1,1,T4\n", -CNL_EPARSE,
     ":2:2:", "cpu_milli: not a number: \"abc\""},
    {NODE_HDR "a,12x,1,1,T4\n", -CNL_EPARSE,
     ":2:2:", "cpu_milli: not a number: \"12x\""},
    {NODE_HDR "a, 12,1,1,T4\n", -CNL_EPARSE, ":2:2:", "not a number"},
    {NODE_HDR "a,+12,1,1,T4\n", -CNL_EPARSE, ":2:2:", "not a number"},
    {NODE_HDR "a,,1,1,T4\n", -CNL_EPARSE, ":2:2:", "cpu_milli: missing"},
    {NODE_HDR "a,1,99999999999999999999,1,T4\n", -CNL_EPARSE,
     ":2:3:", "memory_mib: number out of range"},
    {NODE_HDR "a,1,-1,1,T4\n", -CNL_EPARSE,
     ":2:3:", "memory_mib: must not be negative: \"-1\""},
    {NODE_HDR "a,1,1,17,T4\n", -CNL_EPARSE, ":2:4:", "gpu: out of range 0..16"},
    {NODE_HDR "a,1,1,-2,T4\n", -CNL_EPARSE, ":2:4:", "must not be negative"},
    {NODE_HDR "a,1,1,1,T4\nb,1,1,8,H800\n", -CNL_EGPUTYPE,
     ":3:5:", "model: unknown GPU model \"H800\""},
    {NODE_HDR "a,1,1,1,t4\n", -CNL_EGPUTYPE, ":2:5:", "\"t4\""},
    {NODE_HDR "a,1,1,0,T4\n", -CNL_EPARSE,
     ":2:5:", "GPU model \"T4\" on a node without GPUs"},
    {NODE_HDR "a,1,1,2,\n", -CNL_EPARSE,
     ":2:5:", "missing value on a node with GPUs"},
    {NODE_HDR ",1,1,2,T4\n", -CNL_EPARSE, ":2:1:", "sn: missing value"},
    {NODE_HDR "a123456789a123456789a123456789a123456789a123456789a123456789"
              "a123,1,1,2,T4\n",
     -CNL_EPARSE, ":2:1:", "sn: longer than 63 characters"},
    {NODE_HDR "a,1,1,1,T4\nb,1,1,1,T4\nc,1,1,1,T4\na,1,1,1,P100\n", -CNL_EDUP,
     ":5:1:", "node \"a\" already defined on line 2"},
    {NODE_HDR "\"a\",1,1,1,T4\n", -CNL_EPARSE,
     ":2:1:", "quoted fields are not supported"},
    {NODE_HDR "a,1,1,1,T4\r\nb,1,1,1,T4\r\nc,1,x,1,T4", -CNL_EPARSE,
     ":4:3:", "memory_mib: not a number: \"x\""},
};

static void check_err(const char *kind, size_t i, const char *file,
                      const struct bad_case *bc, int r, const char *err)
{
	char where[128];

	snprintf(where, sizeof(where), "%s%s", file, bc->where);
	if (r != bc->code || !strstr(err, where) || !strstr(err, bc->what))
		fail_msg("%s case %zu: got %d (%s) \"%s\"; want %d, \"%s\" "
		         "and \"%s\"",
		         kind, i, r, cnl_errname(r), err, bc->code, where,
		         bc->what);
}

static void test_nodes_bad(void **state)
{
	(void)state;
	for (size_t i = 0; i < sizeof(bad_nodes) / sizeof(bad_nodes[0]); i++) {
		struct world w;
		char err[512] = "";
		char file[64];
		int r;

		snprintf(file, sizeof(file), "badnodes-%02zu.csv", i);
		world_init(&w);
		r = cnl_trace_load_nodes(put(file, bad_nodes[i].text), &w.cat,
		                         w.c, err, sizeof(err));
		check_err("node", i, file, &bad_nodes[i], r, err);
		/* Checked before anything is added. */
		assert_int_equal(w.c->n_nodes, 0);
		cnl_cluster_free(w.c);
	}
}

static void test_nodes_io(void **state)
{
	struct world w;
	struct cnl_catalog other;
	char err[512] = "";
	char p[PATH_MAX + 32];
	const char *ok;

	(void)state;
	world_init(&w);
	snprintf(p, sizeof(p), "%s/no-such-file.csv", tmpdir);
	assert_int_equal(cnl_trace_load_nodes(p, &w.cat, w.c, err, sizeof(err)),
	                 -ENOENT);
	assert_non_null(strstr(err, "no-such-file.csv"));
	assert_non_null(strstr(err, strerror(ENOENT)));

	/* A directory opens but cannot be read. */
	snprintf(p, sizeof(p), "%s/a-dir.csv", tmpdir);
	assert_int_equal(mkdir(p, 0700), 0);
	assert_int_equal(cnl_trace_load_nodes(p, &w.cat, w.c, err, sizeof(err)),
	                 -EISDIR);
	assert_non_null(strstr(err, "a-dir.csv"));
	assert_non_null(strstr(err, strerror(EISDIR)));

	/* No error buffer at all is fine. */
	assert_int_equal(cnl_trace_load_nodes(p, &w.cat, w.c, NULL, 0),
	                 -EISDIR);

	/* The cluster must be over the catalog that takes the G types. */
	ok = put("g.csv", NODE_HDR "g,1,1,1,G3\n");
	cnl_catalog_init(&other);
	assert_int_equal(
	    cnl_trace_load_nodes(ok, &other, w.c, err, sizeof(err)), -EINVAL);
	assert_int_equal(other.n, w.cat.n);

	/* A node already in the cluster: nothing of the file is added. */
	assert_int_equal(
	    cnl_trace_load_nodes(ok, &w.cat, w.c, err, sizeof(err)), 1);
	ok = put("g2.csv", NODE_HDR "h,1,1,1,G3\ng,1,1,1,G3\n");
	assert_int_equal(
	    cnl_trace_load_nodes(ok, &w.cat, w.c, err, sizeof(err)), -CNL_EDUP);
	assert_non_null(strstr(err, "g2.csv:3:1:"));
	assert_non_null(strstr(err, "already in the cluster"));
	assert_int_equal(w.c->n_nodes, 1);
	cnl_cluster_free(w.c);
}

/* ---- pod lists ------------------------------------------------------- */

static void test_pods(void **state)
{
	struct cnl_catalog cat;
	struct cnl_trace_pod *pods = NULL;
	size_t n = 0;
	char err[256] = "";
	const struct cnl_trace_pod *p;
	const char *path =
	    put("pods.csv",
	        "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,"
	        "pod_phase,creation_time,deletion_time,scheduled_time\r\n"
	        "openb-pod-0000,12000,16384,1,1000,,LS,Running,0,12537496,0\r\n"
	        "openb-pod-0001,6000,12288,1,460,V100M16|V100M32,BE,Pending,"
	        "427061,12902960,\r\n"
	        "openb-pod-0002,88000,327680,0,0,,Burstable,Failed,5,6,7\r\n"
	        "openb-pod-0003,4000,8192,8,1000,G2|T4|G2,Guaranteed,Succeeded,"
	        "9223372036854775807,10,11");

	(void)state;
	cnl_catalog_init(&cat);
	assert_int_equal(
	    cnl_trace_load_pods(path, &cat, &pods, &n, err, sizeof(err)), 4);
	assert_string_equal(err, "");
	assert_int_equal(n, 4);
	assert_non_null(pods);

	p = &pods[0];
	assert_string_equal(p->name, "openb-pod-0000");
	assert_int_equal(p->cpu_milli, 12000);
	assert_int_equal(p->mem_mib, 16384);
	assert_int_equal(p->num_gpu, 1);
	assert_int_equal(p->gpu_milli, 1000);
	assert_int_equal(p->gpu_types, 0);
	assert_string_equal(p->qos, "LS");
	assert_string_equal(p->phase, "Running");
	assert_int_equal(p->creation, 0);
	assert_int_equal(p->deletion, 12537496);
	assert_int_equal(p->scheduled, 0);

	p = &pods[1];
	assert_string_equal(p->name, "openb-pod-0001");
	assert_int_equal(p->cpu_milli, 6000);
	assert_int_equal(p->mem_mib, 12288);
	assert_int_equal(p->num_gpu, 1);
	assert_int_equal(p->gpu_milli, 460);
	assert_int_equal(p->gpu_types,
	                 (UINT64_C(1) << tidx(&cat, "V100-16GB")) |
	                     (UINT64_C(1) << tidx(&cat, "V100-32GB")));
	assert_string_equal(p->qos, "BE");
	assert_string_equal(p->phase, "Pending");
	assert_int_equal(p->creation, 427061);
	assert_int_equal(p->deletion, 12902960);
	assert_int_equal(p->scheduled, -1);

	p = &pods[2];
	assert_int_equal(p->num_gpu, 0);
	assert_int_equal(p->gpu_milli, 0);
	assert_int_equal(p->cpu_milli, 88000);
	assert_int_equal(p->mem_mib, 327680);
	assert_string_equal(p->qos, "Burstable");
	assert_string_equal(p->phase, "Failed");
	assert_int_equal(p->creation, 5);
	assert_int_equal(p->deletion, 6);
	assert_int_equal(p->scheduled, 7);

	/* A repeated model is harmless; G2 joined the catalog. */
	p = &pods[3];
	assert_int_equal(p->num_gpu, 8);
	assert_int_equal(p->gpu_types, (UINT64_C(1) << tidx(&cat, "G2")) |
	                                   (UINT64_C(1) << tidx(&cat, "T4")));
	assert_string_equal(p->qos, "Guaranteed");
	assert_string_equal(p->phase, "Succeeded");
	assert_true(p->creation == INT64_MAX);
	assert_int_equal(p->scheduled, 11);
	free(pods);
}

/* The multigpu variants: five columns, no spec, QoS, phase or times. */
static void test_pods_short(void **state)
{
	struct cnl_catalog cat;
	struct cnl_trace_pod *pods = NULL;
	size_t n = 0;
	char err[256] = "";

	(void)state;
	cnl_catalog_init(&cat);
	assert_int_equal(
	    cnl_trace_load_pods(put("short.csv", POD_SHORT_HDR "a,1,2,4,1000\n"
	                                                       "b,3,4,1,50\n"),
	                        &cat, &pods, &n, err, sizeof(err)),
	    2);
	assert_int_equal(n, 2);
	assert_string_equal(pods[0].name, "a");
	assert_int_equal(pods[0].cpu_milli, 1);
	assert_int_equal(pods[0].mem_mib, 2);
	assert_int_equal(pods[0].num_gpu, 4);
	assert_int_equal(pods[0].gpu_milli, 1000);
	assert_int_equal(pods[0].gpu_types, 0);
	assert_string_equal(pods[0].qos, "");
	assert_string_equal(pods[0].phase, "");
	assert_int_equal(pods[0].creation, -1);
	assert_int_equal(pods[0].deletion, -1);
	assert_int_equal(pods[0].scheduled, -1);
	assert_int_equal(pods[1].gpu_milli, 50);
	free(pods);

	/* Only a header: no pods, a NULL array. */
	pods = (struct cnl_trace_pod *)&cat;
	n = 99;
	assert_int_equal(cnl_trace_load_pods(put("none.csv", POD_HDR), &cat,
	                                     &pods, &n, err, sizeof(err)),
	                 0);
	assert_null(pods);
	assert_int_equal(n, 0);
}

#define ROW_OK "p,1,1,1,1000,,LS,Running,1,2,3\n"

static const struct bad_case bad_pods[] = {
    {"", -CNL_EPARSE, ":1:1:", "file is empty"},
    {"\r\n", -CNL_EPARSE, ":1:1:", "empty line"},
    {"name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phrase,"
     "creation_time,deletion_time,scheduled_time\n",
     -CNL_EPARSE, ":1:8:", "header: expected \"pod_phase\""},
    {"name,cpu_milli,memory_mib,num_gpu,gpu\n", -CNL_EPARSE,
     ":1:5:", "expected \"gpu_milli\", found \"gpu\""},
    {"name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec\n", -CNL_EPARSE,
     ":1:7:", "too few fields: expected 11, found 6"},
    {NODE_HDR, -CNL_EPARSE, ":1:1:", "expected \"name\", found \"sn\""},
    {POD_HDR ROW_OK "p,1,1,1,1000\n", -CNL_EPARSE,
     ":3:6:", "too few fields: expected 11, found 5"},
    {POD_SHORT_HDR "p,1,1,1,1000,,LS\n", -CNL_EPARSE,
     ":2:6:", "too many fields: expected 5, found 7"},
    {POD_HDR ROW_OK ROW_OK "p,1,1,x,1000,,LS,Running,1,2,3\n", -CNL_EPARSE,
     ":4:4:", "num_gpu: not a number: \"x\""},
    {POD_HDR "p,1,1,1,1001,,LS,Running,1,2,3\n", -CNL_EPARSE,
     ":2:5:", "gpu_milli out of range 0..1000"},
    {POD_HDR "p,1,1,2,500,,LS,Running,1,2,3\n", -CNL_EPARSE,
     ":2:5:", "below 1000 on a multi-GPU task"},
    {POD_HDR "p,1,1,17,1000,,LS,Running,1,2,3\n", -CNL_EPARSE,
     ":2:4:", "num_gpu out of range 0..16"},
    {POD_HDR "p,1,1,0,300,,LS,Running,1,2,3\n", -CNL_EPARSE,
     ":2:5:", "gpu_milli set on a task without GPUs"},
    {POD_HDR "p,1,1,1,-5,,LS,Running,1,2,3\n", -CNL_EPARSE,
     ":2:5:", "gpu_milli: must not be negative"},
    {POD_HDR "p,1,1,99999999999,1000,,LS,Running,1,2,3\n", -CNL_EPARSE,
     ":2:4:", "num_gpu: out of range"},
    {POD_HDR "p,-1,1,1,1000,,LS,Running,1,2,3\n", -CNL_EPARSE,
     ":2:2:", "cpu_milli: must not be negative"},
    {POD_HDR "p,1,1.5,1,1000,,LS,Running,1,2,3\n", -CNL_EPARSE,
     ":2:3:", "memory_mib: not a number: \"1.5\""},
    {POD_HDR "p,1,1,1,1000,T4|,LS,Running,1,2,3\n", -CNL_EPARSE,
     ":2:6:", "gpu_spec: empty GPU model"},
    {POD_HDR "p,1,1,1,1000,T4|H20,LS,Running,1,2,3\n", -CNL_EGPUTYPE,
     ":2:6:", "gpu_spec: unknown GPU model \"H20\""},
    {POD_HDR "p,1,1,1,1000,,,Running,1,2,3\n", -CNL_EPARSE,
     ":2:7:", "qos: missing value"},
    {POD_HDR "p,1,1,1,1000,,LS,RunningRunningRunning,1,2,3\n", -CNL_EPARSE,
     ":2:8:", "pod_phase: longer than 15 characters"},
    {POD_HDR "p,1,1,1,1000,,LS,Running,-1,2,3\n", -CNL_EPARSE,
     ":2:9:", "creation_time: must not be negative"},
    {POD_HDR "p,1,1,1,1000,,LS,Running,9223372036854775808,2,3\n", -CNL_EPARSE,
     ":2:9:", "creation_time: number out of range"},
    {POD_HDR "p,1,1,1,1000,,LS,Running,1,,3\n", -CNL_EPARSE,
     ":2:10:", "deletion_time: missing value"},
    {POD_HDR "p,1,1,1,1000,,LS,Running,1,2,x3\n", -CNL_EPARSE,
     ":2:11:", "scheduled_time: not a number"},
    {POD_HDR "openb-pod-0000-openb-pod-0000-openb-pod-0000-openb,1,1,1,"
             "1000,,LS,Running,1,2,3\n",
     -CNL_EPARSE, ":2:1:", "name: longer than 47 characters"},
    {POD_HDR ROW_OK "\n", -CNL_EPARSE, ":3:1:", "empty line"},
};

static void test_pods_bad(void **state)
{
	(void)state;
	for (size_t i = 0; i < sizeof(bad_pods) / sizeof(bad_pods[0]); i++) {
		struct cnl_catalog cat;
		struct cnl_trace_pod *pods = (struct cnl_trace_pod *)&cat;
		size_t n = 12345;
		char err[512] = "";
		char file[64];
		int r;

		snprintf(file, sizeof(file), "badpods-%02zu.csv", i);
		cnl_catalog_init(&cat);
		r = cnl_trace_load_pods(put(file, bad_pods[i].text), &cat,
		                        &pods, &n, err, sizeof(err));
		check_err("pod", i, file, &bad_pods[i], r, err);
		/* Output parameters untouched on failure. */
		assert_ptr_equal(pods, (struct cnl_trace_pod *)&cat);
		assert_int_equal(n, 12345);
	}
}

static void test_pods_io(void **state)
{
	struct cnl_catalog cat;
	struct cnl_trace_pod *pods = NULL;
	size_t n = 0;
	char err[512] = "";
	char p[PATH_MAX + 32];

	(void)state;
	cnl_catalog_init(&cat);
	snprintf(p, sizeof(p), "%s/missing-pods.csv", tmpdir);
	assert_int_equal(
	    cnl_trace_load_pods(p, &cat, &pods, &n, err, sizeof(err)), -ENOENT);
	assert_non_null(strstr(err, "missing-pods.csv"));
	assert_non_null(strstr(err, strerror(ENOENT)));
	assert_null(pods);

	/* A message that does not fit is cut, not overrun. */
	{
		char small[8];
		memset(small, 'Z', sizeof(small));
		assert_int_equal(cnl_trace_load_pods(p, &cat, &pods, &n, small,
		                                     sizeof(small) - 2),
		                 -ENOENT);
		assert_int_equal(strlen(small), sizeof(small) - 3);
		assert_int_equal(small[sizeof(small) - 1], 'Z');
	}
}

/* ---- requests -------------------------------------------------------- */

static void test_pod_req(void **state)
{
	struct cnl_catalog cat;
	struct cnl_alloc_req q, keep;
	struct cnl_trace_pod p = {.cpu_milli = 6000, .mem_mib = 12288};
	static const struct {
		int milli, blocks;
	} shares[] = {{460, 46}, {55, 6}, {50, 5}, {999, 100},
	              {1, 1},    {0, 1},  {10, 1}, {11, 2}};

	(void)state;
	cnl_catalog_init(&cat);

	/* CPU only. */
	assert_int_equal(cnl_trace_pod_req(&cat, &p, 7, &q), 0);
	assert_int_equal(q.kind, CNL_REQ_CPU);
	assert_int_equal(q.project, 7);
	assert_int_equal(q.cpu_milli, 6000);
	assert_int_equal(q.mem_mib, 12288);
	assert_int_equal(q.gpu_type, CNL_GPU_TYPE_ANY);
	assert_int_equal(q.gpu_types, 0);

	/* Sharing: 1000 milli = 100 blocks, rounded up. */
	p.num_gpu = 1;
	p.gpu_types = (UINT64_C(1) << tidx(&cat, "T4")) |
	              (UINT64_C(1) << tidx(&cat, "P100"));
	for (size_t i = 0; i < sizeof(shares) / sizeof(shares[0]); i++) {
		p.gpu_milli = shares[i].milli;
		assert_int_equal(cnl_trace_pod_req(&cat, &p, 7, &q), 0);
		assert_int_equal(q.kind, CNL_REQ_BLOCKS);
		assert_int_equal(q.blocks, shares[i].blocks);
		assert_int_equal(q.gpu_types, p.gpu_types);
		assert_int_equal(q.gpu_type, CNL_GPU_TYPE_ANY);
		assert_int_equal(q.cpu_milli, 6000);
	}

	/* Whole GPUs. */
	p.gpu_milli = 1000;
	assert_int_equal(cnl_trace_pod_req(&cat, &p, 7, &q), 0);
	assert_int_equal(q.kind, CNL_REQ_WHOLE);
	assert_int_equal(q.gpus, 1);
	assert_int_equal(q.gpu_types, p.gpu_types);
	p.num_gpu = 8;
	assert_int_equal(cnl_trace_pod_req(&cat, &p, 7, &q), 0);
	assert_int_equal(q.kind, CNL_REQ_WHOLE);
	assert_int_equal(q.gpus, 8);
	assert_int_equal(q.mem_mib, 12288);

	/* Impossible rows; the output stays as it was. */
	keep = q;
	p.num_gpu = 1;
	p.gpu_milli = 1001;
	assert_int_equal(cnl_trace_pod_req(&cat, &p, 7, &q), -CNL_EPARSE);
	p.num_gpu = 2;
	p.gpu_milli = 500;
	assert_int_equal(cnl_trace_pod_req(&cat, &p, 7, &q), -CNL_EPARSE);
	p.num_gpu = 17;
	p.gpu_milli = 1000;
	assert_int_equal(cnl_trace_pod_req(&cat, &p, 7, &q), -CNL_EPARSE);
	p.num_gpu = -1;
	assert_int_equal(cnl_trace_pod_req(&cat, &p, 7, &q), -CNL_EPARSE);
	p.num_gpu = 0;
	p.gpu_milli = 300;
	assert_int_equal(cnl_trace_pod_req(&cat, &p, 7, &q), -CNL_EPARSE);
	p.num_gpu = 1;
	p.gpu_milli = -1;
	assert_int_equal(cnl_trace_pod_req(&cat, &p, 7, &q), -CNL_EPARSE);
	p.gpu_milli = 500;
	p.cpu_milli = -1;
	assert_int_equal(cnl_trace_pod_req(&cat, &p, 7, &q), -CNL_EPARSE);
	p.cpu_milli = 1;
	p.gpu_types = UINT64_C(1) << cat.n; /* no such type */
	assert_int_equal(cnl_trace_pod_req(&cat, &p, 7, &q), -CNL_EGPUTYPE);
	assert_memory_equal(&q, &keep, sizeof(q));
}

/* ---- the real trace -------------------------------------------------- */

static const char *trace_dir(char *buf, size_t size)
{
	const char *d = getenv("CNL_TRACE_DIR");
	const char *src = getenv("CNL_SOURCE_DIR");
	struct stat st;

	if (d && d[0])
		snprintf(buf, size, "%s", d);
	else if (src && src[0])
		snprintf(buf, size, "%s/../shared/traces/alibaba-gpu-v2023",
		         src);
	else
		return NULL;
	if (stat(buf, &st) != 0 || !S_ISDIR(st.st_mode))
		return NULL;
	return buf;
}

static void load_real_nodes(const char *dir, const char *file, struct world *w)
{
	char p[PATH_MAX + 64], err[512] = "";
	int r;

	snprintf(p, sizeof(p), "%s/csv/%s", dir, file);
	world_init(w);
	r = cnl_trace_load_nodes(p, &w->cat, w->c, err, sizeof(err));
	if (r < 0)
		fail_msg("%s: %d %s", file, r, err);
}

/* Totals of a loaded node list; the GPUs of catalog type `type` (may be
 * NULL) through ret_type_gpus. */
struct node_sums {
	int nodes, cpu_only, gpus;
	int64_t cpu, mem;
};

static struct node_sums sum_nodes(const struct world *w, const char *type,
                                  int *ret_type_gpus)
{
	struct node_sums s = {0};
	int t = type ? tidx(&w->cat, type) : -1;

	*ret_type_gpus = 0;
	for (uint32_t i = 0; i < w->c->n_nodes; i++) {
		const struct cnl_node *n = &w->c->nodes[i];
		s.nodes++;
		s.cpu_only += n->n_gpus == 0;
		s.gpus += n->n_gpus;
		s.cpu += n->cpu_total;
		s.mem += n->mem_total;
		if (n->n_gpus > 0 && n->gpu_type == t)
			*ret_type_gpus += n->n_gpus;
	}
	return s;
}

static void test_real_nodes(void **state)
{
	char buf[PATH_MAX];
	const char *dir = trace_dir(buf, sizeof(buf));
	static const struct {
		const char *type;
		int gpus;
	} per_type[] = {{"G2", 4392},       {"T4", 842}, {"P100", 265},
	                {"V100-16GB", 195}, {"G3", 312}, {"V100-32GB", 204},
	                {"A10", 2}};
	struct world w;
	struct node_sums s;
	int g;

	(void)state;
	if (!dir)
		skip();
	load_real_nodes(dir, "openb_node_list_gpu_node.csv", &w);
	s = sum_nodes(&w, NULL, &g);
	assert_int_equal(s.nodes, 1213);
	assert_int_equal(s.cpu_only, 0);
	assert_int_equal(s.gpus, 6212);
	assert_int_equal(s.cpu, INT64_C(107018000));
	assert_int_equal(s.mem, INT64_C(503828480));
	for (size_t i = 0; i < sizeof(per_type) / sizeof(per_type[0]); i++) {
		sum_nodes(&w, per_type[i].type, &g);
		assert_int_equal(g, per_type[i].gpus);
	}
	assert_int_equal(cnl_catalog_find(&w.cat, "G1"), -CNL_EGPUTYPE);
	cnl_cluster_free(w.c);

	load_real_nodes(dir, "openb_node_list_all_node.csv", &w);
	s = sum_nodes(&w, NULL, &g);
	assert_int_equal(s.nodes, 1523);
	assert_int_equal(s.cpu_only, 310);
	assert_int_equal(s.gpus, 6212);
	cnl_cluster_free(w.c);
}

static void test_real_default_pods(void **state)
{
	char buf[PATH_MAX], p[PATH_MAX + 64], err[512] = "";
	const char *dir = trace_dir(buf, sizeof(buf));
	struct world w;
	struct cnl_trace_pod *pods = NULL;
	size_t n = 0;
	int by_gpus[17] = {0}, sharing = 0, pending = 0, unscheduled = 0;
	int ls = 0, be = 0, burstable = 0, guaranteed = 0;

	(void)state;
	if (!dir)
		skip();
	load_real_nodes(dir, "openb_node_list_gpu_node.csv", &w);
	snprintf(p, sizeof(p), "%s/csv/openb_pod_list_default.csv", dir);
	if (cnl_trace_load_pods(p, &w.cat, &pods, &n, err, sizeof(err)) < 0)
		fail_msg("%s", err);
	assert_int_equal(n, 8152);
	for (size_t i = 0; i < n; i++) {
		struct cnl_alloc_req q;
		struct cnl_req_prep prep;
		assert_int_equal(cnl_trace_pod_req(&w.cat, &pods[i], 1, &q), 0);
		assert_int_equal(cnl_alloc_prepare(w.c, &q, &prep), 0);
		by_gpus[pods[i].num_gpu]++;
		sharing += q.kind == CNL_REQ_BLOCKS;
		pending += strcmp(pods[i].phase, "Pending") == 0;
		unscheduled += pods[i].scheduled == -1;
		ls += strcmp(pods[i].qos, "LS") == 0;
		be += strcmp(pods[i].qos, "BE") == 0;
		burstable += strcmp(pods[i].qos, "Burstable") == 0;
		guaranteed += strcmp(pods[i].qos, "Guaranteed") == 0;
		assert_int_equal(pods[i].gpu_types, 0);
		assert_true(pods[i].deletion >= 0);
		if (i > 0)
			assert_true(pods[i].creation >= pods[i - 1].creation);
	}
	assert_int_equal(by_gpus[0], 1088);
	assert_int_equal(by_gpus[1], 6989);
	assert_int_equal(sharing, 3078);
	assert_int_equal(by_gpus[2], 16);
	assert_int_equal(by_gpus[4], 15);
	assert_int_equal(by_gpus[8], 44);
	assert_int_equal(pending, 897);
	assert_int_equal(unscheduled, 897);
	assert_int_equal(ls, 4647);
	assert_int_equal(be, 3398);
	assert_int_equal(burstable, 100);
	assert_int_equal(guaranteed, 7);
	assert_string_equal(pods[0].name, "openb-pod-0000");
	assert_int_equal(pods[n - 1].creation, 12901761);
	free(pods);
	cnl_cluster_free(w.c);
}

/* Every pod list of csv/ loads, with the row count the README gives. */
static void test_real_all_pod_lists(void **state)
{
	static const struct {
		const char *file;
		size_t rows;
	} want[] = {
	    {"openb_pod_list_default.csv", 8152},
	    {"openb_pod_list_gpushare20.csv", 8152},
	    {"openb_pod_list_gpushare40.csv", 8152},
	    {"openb_pod_list_gpushare60.csv", 8152},
	    {"openb_pod_list_gpushare80.csv", 8152},
	    {"openb_pod_list_gpushare100.csv", 8152},
	    {"openb_pod_list_multigpu20.csv", 8324},
	    {"openb_pod_list_multigpu30.csv", 8508},
	    {"openb_pod_list_multigpu40.csv", 8746},
	    {"openb_pod_list_multigpu50.csv", 9061},
	    {"openb_pod_list_gpuspec05.csv", 8152},
	    {"openb_pod_list_gpuspec10.csv", 8152},
	    {"openb_pod_list_gpuspec20.csv", 8152},
	    {"openb_pod_list_gpuspec25.csv", 8152},
	    {"openb_pod_list_gpuspec33.csv", 8152},
	    {"openb_pod_list_cpu0.csv", 7064},
	    {"openb_pod_list_cpu037.csv", 7336},
	    {"openb_pod_list_cpu050.csv", 7439},
	    {"openb_pod_list_cpu072.csv", 7608},
	    {"openb_pod_list_cpu100.csv", 7853},
	    {"openb_pod_list_cpu200.csv", 8832},
	    {"openb_pod_list_cpu235.csv", 9240},
	    {"openb_pod_list_cpu250.csv", 9420},
	    {"openb_pod_list_cpu300.csv", 10094},
	};
	char buf[PATH_MAX], p[PATH_MAX + 300], err[512] = "";
	const char *dir = trace_dir(buf, sizeof(buf));
	size_t seen = 0;
	DIR *d;
	struct dirent *e;

	(void)state;
	if (!dir)
		skip();
	for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++) {
		struct cnl_catalog cat;
		struct cnl_trace_pod *pods = NULL;
		size_t n = 0, with_spec = 0, timed = 0;
		int r;

		cnl_catalog_init(&cat);
		snprintf(p, sizeof(p), "%s/csv/%s", dir, want[i].file);
		r = cnl_trace_load_pods(p, &cat, &pods, &n, err, sizeof(err));
		if (r < 0)
			fail_msg("%s: %d %s", want[i].file, r, err);
		assert_int_equal(r, (int)want[i].rows);
		assert_int_equal(n, want[i].rows);
		for (size_t k = 0; k < n; k++) {
			struct cnl_alloc_req q;
			assert_int_equal(
			    cnl_trace_pod_req(&cat, &pods[k], 1, &q), 0);
			with_spec += pods[k].gpu_types != 0;
			timed += pods[k].creation >= 0;
			/* gpu_spec is never set on CPU-only tasks. */
			if (pods[k].num_gpu == 0)
				assert_int_equal(pods[k].gpu_types, 0);
		}
		if (strstr(want[i].file, "gpuspec"))
			assert_true(with_spec > 0);
		else
			assert_int_equal(with_spec, 0);
		assert_int_equal(timed,
		                 strstr(want[i].file, "multigpu") ? 0 : n);
		free(pods);
	}

	/* No pod list was left out of the table above. */
	snprintf(p, sizeof(p), "%s/csv", dir);
	d = opendir(p);
	assert_non_null(d);
	while ((e = readdir(d)) != NULL)
		if (strncmp(e->d_name, "openb_pod_list_", 15) == 0)
			seen++;
	closedir(d);
	assert_int_equal(seen, sizeof(want) / sizeof(want[0]));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_gpu_type),
	    cmocka_unit_test(test_gpu_type_catalog_full),
	    cmocka_unit_test(test_nodes),
	    cmocka_unit_test(test_nodes_header_only),
	    cmocka_unit_test(test_nodes_bad),
	    cmocka_unit_test(test_nodes_io),
	    cmocka_unit_test(test_pods),
	    cmocka_unit_test(test_pods_short),
	    cmocka_unit_test(test_pods_bad),
	    cmocka_unit_test(test_pods_io),
	    cmocka_unit_test(test_pod_req),
	    cmocka_unit_test(test_real_nodes),
	    cmocka_unit_test(test_real_default_pods),
	    cmocka_unit_test(test_real_all_pod_lists),
	};
	return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
