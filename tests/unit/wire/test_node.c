/*
 * test_node.c - the node protocol's messages (wire/node.h): every message
 * round-trips (encode, decode, the same struct, encode again, the same
 * JSON), and every strict decoder refuses what it must, naming the field:
 * an unknown field, a wrong type, a number out of range, a string too
 * long or outside its alphabet, a missing field, another protocol
 * version.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "cnlab/errors.h"
#include "wire/node.h"

/* Decode @text with @decode into @ret, expecting success. */
#define DECODE_OK(decode, text, ret)                      \
	do {                                              \
		json_error_t je_;                         \
		json_t *j_ = json_loads(text, 0, &je_);   \
		char e_[256] = "";                        \
		assert_non_null(j_);                      \
		if (decode(j_, ret, e_, sizeof(e_)) != 0) \
			fail_msg("%s: %s", text, e_);     \
		json_decref(j_);                          \
	} while (0)

/* Decode @text, expecting a refusal whose message contains @field. */
#define DECODE_BAD(decode, type, done, text, field)                           \
	do {                                                                  \
		json_error_t je_;                                             \
		json_t *j_ = json_loads(text, 0, &je_);                       \
		char e_[256] = "";                                            \
		type m_;                                                      \
		int r_;                                                       \
		assert_non_null(j_);                                          \
		r_ = decode(j_, &m_, e_, sizeof(e_));                         \
		done;                                                         \
		json_decref(j_);                                              \
		if (r_ != -CNL_EFIELD)                                        \
			fail_msg("accepted: %s", text);                       \
		if (!strstr(e_, field))                                       \
			fail_msg("%s: message \"%s\" does not name %s", text, \
			         e_, field);                                  \
	} while (0)

#define NOTHING (void)0

/* encode -> decode -> same -> encode -> same JSON */
#define ROUND(type, encode, decode, done, m)                        \
	do {                                                        \
		json_t *j1_ = encode(m), *j2_;                      \
		type back_;                                         \
		char e_[256] = "";                                  \
		if (decode(j1_, &back_, e_, sizeof(e_)) != 0)       \
			fail_msg("decode of own encoding: %s", e_); \
		j2_ = encode(&back_);                               \
		if (!json_equal(j1_, j2_)) {                        \
			char *a_ = json_dumps(j1_, JSON_SORT_KEYS); \
			char *b_ = json_dumps(j2_, JSON_SORT_KEYS); \
			fail_msg("round trip: %s != %s", a_, b_);   \
		}                                                   \
		json_decref(j1_);                                   \
		json_decref(j2_);                                   \
		{                                                   \
			type *p_ = &back_;                          \
			(void)p_;                                   \
			done;                                       \
		}                                                   \
	} while (0)

static void test_register(void **state)
{
	struct cnl_wire_register m = {0}, got;

	(void)state;
	m.protocol = CNL_WIRE_PROTOCOL;
	snprintf(m.name, sizeof(m.name), "%s", "gpu-01");
	snprintf(m.gpu_type, sizeof(m.gpu_type), "%s", "H100-80GB-SXM");
	m.gpus = 2;
	m.cpu_milli = 64000;
	m.mem_mib = 512000;
	snprintf(m.zone, sizeof(m.zone), "%s", "z1");
	snprintf(m.rack, sizeof(m.rack), "%s", "r7");
	snprintf(m.address, sizeof(m.address), "%s", "10.0.0.7");
	m.has_datasets = true;
	snprintf(m.datasets[0], sizeof(m.datasets[0]), "%s", "imagenet");
	m.n_datasets = 1;
	m.has_devices = true;
	m.n_devices = 2;
	for (int i = 0; i < 2; i++) {
		m.devices[i].index = i;
		snprintf(m.devices[i].uuid, sizeof(m.devices[i].uuid), "GPU-%d",
		         i);
		m.devices[i].mem_mib = 81559;
		m.devices[i].healthy = i == 0;
	}
	ROUND(struct cnl_wire_register, cnl_wire_register_encode,
	      cnl_wire_register_decode, NOTHING, &m);
	DECODE_OK(cnl_wire_register_decode,
	          "{\"protocol\":5,\"name\":\"n\",\"gpus\":0,\"cpu_milli\":1,"
	          "\"mem_mib\":1}",
	          &got);
	assert_string_equal(got.name, "n");
	assert_false(got.has_datasets);
	/* Protocol 5 (node credentials) is spoken; an older agent is
	 * refused above and below (it holds no node credential). */
	DECODE_OK(cnl_wire_register_decode,
	          "{\"protocol\":5,\"name\":\"n\",\"gpus\":0,\"cpu_milli\":1,"
	          "\"mem_mib\":1}",
	          &got);
	assert_int_equal(got.protocol, 5);
	/* Protocol 6 (slice usage in heartbeats, for resizes) too. */
	DECODE_OK(cnl_wire_register_decode,
	          "{\"protocol\":6,\"name\":\"n\",\"gpus\":0,\"cpu_milli\":1,"
	          "\"mem_mib\":1}",
	          &got);
	assert_int_equal(got.protocol, 6);
	/* Protocol 7 (each GPU's use in heartbeats) too. */
	DECODE_OK(cnl_wire_register_decode,
	          "{\"protocol\":7,\"name\":\"n\",\"gpus\":0,\"cpu_milli\":1,"
	          "\"mem_mib\":1}",
	          &got);
	assert_int_equal(got.protocol, 7);
	/* Protocol 8 (assignments with secrets) too. */
	DECODE_OK(cnl_wire_register_decode,
	          "{\"protocol\":8,\"name\":\"n\",\"gpus\":0,\"cpu_milli\":1,"
	          "\"mem_mib\":1}",
	          &got);
	assert_int_equal(got.protocol, 8);
	/* Protocol 9 (ssh tunnels), the current one. */
	DECODE_OK(cnl_wire_register_decode,
	          "{\"protocol\":9,\"name\":\"n\",\"gpus\":0,\"cpu_milli\":1,"
	          "\"mem_mib\":1}",
	          &got);
	assert_int_equal(got.protocol, 9);
#define R(text, field)                                                 \
	DECODE_BAD(cnl_wire_register_decode, struct cnl_wire_register, \
	           NOTHING, text, field)
	R("{\"name\":\"n\",\"gpus\":0,\"cpu_milli\":1,\"mem_mib\":1}",
	  "protocol");
	R("{\"protocol\":1,\"name\":\"n\",\"gpus\":0,\"cpu_milli\":1,"
	  "\"mem_mib\":1}",
	  "protocol");
	R("{\"protocol\":10,\"name\":\"n\",\"gpus\":0,\"cpu_milli\":1,"
	  "\"mem_mib\":1}",
	  "protocol");
	R("{\"protocol\":4,\"name\":\"n\",\"gpus\":0,\"cpu_milli\":1,"
	  "\"mem_mib\":1}",
	  "protocol");
	R("{\"protocol\":2,\"name\":\"n\",\"gpus\":0,\"cpu_milli\":1,"
	  "\"mem_mib\":1}",
	  "protocol");
	R("{\"protocol\":5,\"name\":\"n\",\"gpus\":0,\"cpu_milli\":1,"
	  "\"mem_mib\":1,\"color\":\"red\"}",
	  "color");
	R("{\"protocol\":5,\"name\":7,\"gpus\":0,\"cpu_milli\":1,"
	  "\"mem_mib\":1}",
	  "name");
	R("{\"protocol\":5,\"name\":\"\",\"gpus\":0,\"cpu_milli\":1,"
	  "\"mem_mib\":1}",
	  "name");
	R("{\"protocol\":5,\"name\":\"n\",\"gpus\":17,\"cpu_milli\":1,"
	  "\"mem_mib\":1}",
	  "gpus");
	R("{\"protocol\":5,\"name\":\"n\",\"gpus\":0,\"cpu_milli\":-1,"
	  "\"mem_mib\":1}",
	  "cpu_milli");
	R("{\"protocol\":5,\"name\":\"n\",\"gpus\":0,\"cpu_milli\":1}",
	  "mem_mib");
	R("{\"protocol\":5,\"name\":"
	  "\"nnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnn"
	  "nnnnnnnnnnnnnnnnnnnnnn\",\"gpus\":0,\"cpu_milli\":1,\"mem_mib\":1}",
	  "name");
	R("{\"protocol\":5,\"name\":\"n\",\"gpus\":0,\"cpu_milli\":1,"
	  "\"mem_mib\":1,\"datasets\":\"imagenet\"}",
	  "datasets");
	R("{\"protocol\":5,\"name\":\"n\",\"gpus\":0,\"cpu_milli\":1,"
	  "\"mem_mib\":1,\"datasets\":[1]}",
	  "datasets[0]");
	R("{\"protocol\":5,\"name\":\"n\",\"gpus\":1,\"cpu_milli\":1,"
	  "\"mem_mib\":1,\"devices\":[]}",
	  "devices");
	R("{\"protocol\":5,\"name\":\"n\",\"gpus\":1,\"cpu_milli\":1,"
	  "\"mem_mib\":1,\"devices\":[{\"index\":0,\"uuid\":\"u\","
	  "\"mem_mib\":1,\"healthy\":\"yes\"}]}",
	  "devices[0].healthy");
	R("{\"protocol\":5,\"name\":\"n\",\"gpus\":1,\"cpu_milli\":1,"
	  "\"mem_mib\":1,\"devices\":[{\"index\":0,\"uuid\":\"u\","
	  "\"mem_mib\":1,\"healthy\":true,\"x\":1}]}",
	  "devices[0].x");
#undef R
}

static void test_node_and_heartbeat(void **state)
{
	struct cnl_wire_node n = {0};
	struct cnl_wire_heartbeat h = {0};
	struct cnl_wire_running run[2] = {
	    {"job_a", 3, false, false, 0, 0, false, 0},
	    {"srv_b", 1, true, true, 5 << 20, 8 << 20, true, 25}};
	char stop[1][CNL_WIRE_ID_MAX] = {"job_c"};
	char vols[2][CNL_WIRE_ID_MAX] = {"srv_d", "srv_e"};

	(void)state;
	snprintf(n.id, sizeof(n.id), "%s", "node_1");
	snprintf(n.name, sizeof(n.name), "%s", "gpu-01");
	n.epoch = 4;
	snprintf(n.state, sizeof(n.state), "%s", "draining");
	n.lease_ms = 15000;
	n.heartbeat_ms = 5000;
	ROUND(struct cnl_wire_node, cnl_wire_node_encode, cnl_wire_node_decode,
	      cnl_wire_node_done(p_), &n);
	n.has_stop = true;
	n.stop = stop;
	n.n_stop = 1;
	ROUND(struct cnl_wire_node, cnl_wire_node_encode, cnl_wire_node_decode,
	      cnl_wire_node_done(p_), &n);
	n.has_drop = true;
	n.drop = vols;
	n.n_drop = 1;
	ROUND(struct cnl_wire_node, cnl_wire_node_encode, cnl_wire_node_decode,
	      cnl_wire_node_done(p_), &n);
	/* A registration by join token brings the node's credential. */
	snprintf(n.credential, sizeof(n.credential), "cnln_x");
	ROUND(struct cnl_wire_node, cnl_wire_node_encode, cnl_wire_node_decode,
	      cnl_wire_node_done(p_), &n);
	n.credential[0] = '\0';
	{
		struct cnl_wire_credential cr = {"cnln_y", 1700000000000};

		ROUND(struct cnl_wire_credential, cnl_wire_credential_encode,
		      cnl_wire_credential_decode, NOTHING, &cr);
	}
	h.has_running = true;
	h.running = run;
	h.n_running = 2;
	ROUND(struct cnl_wire_heartbeat, cnl_wire_heartbeat_encode,
	      cnl_wire_heartbeat_decode, cnl_wire_heartbeat_done(p_), &h);
	h.has_volumes = true;
	h.volumes = vols;
	h.n_volumes = 2;
	ROUND(struct cnl_wire_heartbeat, cnl_wire_heartbeat_encode,
	      cnl_wire_heartbeat_decode, cnl_wire_heartbeat_done(p_), &h);
	h.n_volumes = 0; /* an empty list is a list */
	ROUND(struct cnl_wire_heartbeat, cnl_wire_heartbeat_encode,
	      cnl_wire_heartbeat_decode, cnl_wire_heartbeat_done(p_), &h);
	/* Protocol 7: each GPU's use; what the driver cannot tell (-1) is
	 * left out and comes back as -1. */
	h.gpus[0] = (struct cnl_wire_gpu_use){0, 37, 5LL << 30};
	h.gpus[1] = (struct cnl_wire_gpu_use){1, -1, -1};
	h.gpus[2] = (struct cnl_wire_gpu_use){3, 100, 0};
	h.n_gpus = 3;
	ROUND(struct cnl_wire_heartbeat, cnl_wire_heartbeat_encode,
	      cnl_wire_heartbeat_decode, cnl_wire_heartbeat_done(p_), &h);
	/* cnlabd's Kubernetes scheduler: what other pods hold. */
	h.has_others = true;
	h.others_cpu_milli = 3500;
	h.others_mem_mib = 0;
	ROUND(struct cnl_wire_heartbeat, cnl_wire_heartbeat_encode,
	      cnl_wire_heartbeat_decode, cnl_wire_heartbeat_done(p_), &h);
	/* ... and a node's limit on pods, with how many are others'. */
	h.has_pods = true;
	h.pods_max = 110;
	h.others_pods = 3;
	ROUND(struct cnl_wire_heartbeat, cnl_wire_heartbeat_encode,
	      cnl_wire_heartbeat_decode, cnl_wire_heartbeat_done(p_), &h);
	h.has_pods = false;
	h.pods_max = h.others_pods = 0;
	h.has_others = false;
	h.others_cpu_milli = 0;
	{
		struct cnl_wire_heartbeat got;

		DECODE_OK(cnl_wire_heartbeat_decode,
		          "{\"running\":[],\"gpus\":[{\"index\":1,"
		          "\"util_pct\":42,\"mem_used\":1048576},"
		          "{\"index\":0}]}",
		          &got);
		assert_int_equal(got.n_gpus, 2);
		assert_int_equal(got.n_running, 0);
		assert_int_equal(got.gpus[0].index, 1);
		assert_int_equal(got.gpus[0].util_pct, 42);
		assert_int_equal(got.gpus[0].mem_used, 1048576);
		assert_int_equal(got.gpus[1].util_pct, -1);
		assert_int_equal(got.gpus[1].mem_used, -1);
		cnl_wire_heartbeat_done(&got);
		/* A protocol 6 agent's heartbeat (no "gpus") is taken. */
		DECODE_OK(cnl_wire_heartbeat_decode,
		          "{\"running\":[{\"id\":\"j\",\"epoch\":1,"
		          "\"vram_used\":1}]}",
		          &got);
		assert_int_equal(got.n_gpus, 0);
		assert_false(got.running[0].has_util);
		cnl_wire_heartbeat_done(&got);
		/* A slice's compute use, when the agent measured one. */
		DECODE_OK(cnl_wire_heartbeat_decode,
		          "{\"running\":[{\"id\":\"j\",\"epoch\":1,"
		          "\"util_pct\":0},{\"id\":\"k\",\"epoch\":2,"
		          "\"util_pct\":64}]}",
		          &got);
		assert_true(got.running[0].has_util);
		assert_int_equal(got.running[0].util_pct, 0);
		assert_int_equal(got.running[1].util_pct, 64);
		cnl_wire_heartbeat_done(&got);
	}
#define N(text, field)                                         \
	DECODE_BAD(cnl_wire_node_decode, struct cnl_wire_node, \
	           cnl_wire_node_done(&m_), text, field)
	N("{\"id\":\"n\",\"name\":\"x\",\"epoch\":1,\"state\":\"sleepy\","
	  "\"lease_ms\":1,\"heartbeat_ms\":1}",
	  "state");
	N("{\"id\":\"n\",\"name\":\"x\",\"epoch\":1.5,\"state\":\"up\","
	  "\"lease_ms\":1,\"heartbeat_ms\":1}",
	  "epoch");
	N("{\"id\":\"n\",\"name\":\"x\",\"epoch\":1,\"state\":\"up\","
	  "\"lease_ms\":1,\"heartbeat_ms\":1,\"stop\":[3]}",
	  "stop[0]");
	N("{\"id\":\"n\",\"name\":\"x\",\"epoch\":1,\"state\":\"up\","
	  "\"lease_ms\":1,\"heartbeat_ms\":1,\"drop\":\"srv_a\"}",
	  "drop");
#undef N
#define H(text, field)                                                   \
	DECODE_BAD(cnl_wire_heartbeat_decode, struct cnl_wire_heartbeat, \
	           cnl_wire_heartbeat_done(&m_), text, field)
	H("{\"running\":{}}", "running");
	H("{\"running\":[{\"id\":\"j\"}]}", "running[0].epoch");
	H("{\"running\":[{\"id\":\"j\",\"epoch\":-1}]}", "running[0].epoch");
	H("{\"running\":[],\"beat\":1}", "beat");
	/* The pods limit comes with others' count, within bounds. */
	H("{\"running\":[],\"pods_max\":10}", "pods_max");
	H("{\"running\":[],\"pods_max\":10,\"others\":{\"cpu_milli\":0,"
	  "\"mem_mib\":0}}",
	  "pods_max");
	H("{\"running\":[],\"others\":{\"cpu_milli\":0,\"mem_mib\":0,"
	  "\"pods\":1}}",
	  "pods_max");
	H("{\"running\":[],\"pods_max\":0,\"others\":{\"cpu_milli\":0,"
	  "\"mem_mib\":0,\"pods\":1}}",
	  "pods_max");
	H("{\"running\":[],\"pods_max\":5,\"others\":{\"cpu_milli\":0,"
	  "\"mem_mib\":0,\"pods\":-1}}",
	  "others.pods");
	/* A slice's VRAM use (protocol 6) is a count of bytes. */
	H("{\"running\":[{\"id\":\"j\",\"epoch\":1,\"vram_used\":-1}]}",
	  "running[0].vram_used");
	H("{\"running\":[{\"id\":\"j\",\"epoch\":1,\"vram_used\":\"1\"}]}",
	  "running[0].vram_used");
	H("{\"running\":[{\"id\":\"j\",\"epoch\":1,\"vram_quota\":-4}]}",
	  "running[0].vram_quota");
	H("{\"running\":[],\"volumes\":[\"srv_a\",7]}", "volumes[1]");
	/* A slice's compute use (protocol 7) is a percentage of its GPU. */
	H("{\"running\":[{\"id\":\"j\",\"epoch\":1,\"util_pct\":101}]}",
	  "running[0].util_pct");
	H("{\"running\":[{\"id\":\"j\",\"epoch\":1,\"util_pct\":-1}]}",
	  "running[0].util_pct");
	/* A GPU's use (protocol 7): strict, each field named. */
	H("{\"gpus\":{}}", "gpus");
	H("{\"gpus\":[7]}", "gpus[0]");
	H("{\"gpus\":[{}]}", "gpus[0].index");
	H("{\"gpus\":[{\"index\":16}]}", "gpus[0].index");
	H("{\"gpus\":[{\"index\":0,\"util_pct\":101}]}", "gpus[0].util_pct");
	H("{\"gpus\":[{\"index\":0,\"util_pct\":-1}]}", "gpus[0].util_pct");
	H("{\"gpus\":[{\"index\":0,\"mem_used\":-5}]}", "gpus[0].mem_used");
	H("{\"gpus\":[{\"index\":0,\"temp\":5}]}", "gpus[0].temp");
	H("{\"gpus\":[{\"index\":0},{\"index\":0}]}", "gpus[1].index");
	/* What others hold: both counts, not negative, nothing else. */
	H("{\"others\":5}", "others");
	H("{\"others\":{\"cpu_milli\":1}}", "others.mem_mib");
	H("{\"others\":{\"cpu_milli\":-1,\"mem_mib\":0}}", "others.cpu_milli");
	H("{\"others\":{\"cpu_milli\":1,\"mem_mib\":2,\"pods\":3}}",
	  "others.pods");
	H("{\"gpus\":[{\"index\":0},{\"index\":1},{\"index\":2},"
	  "{\"index\":3},{\"index\":4},{\"index\":5},{\"index\":6},"
	  "{\"index\":7},{\"index\":8},{\"index\":9},{\"index\":10},"
	  "{\"index\":11},{\"index\":12},{\"index\":13},{\"index\":14},"
	  "{\"index\":15},{\"index\":0}]}",
	  "gpus");
#undef H
}

static void test_assignments(void **state)
{
	struct cnl_wire_assignment a[2];
	struct cnl_wire_assignments m = {.version = 9, .epoch = 2};

	(void)state;
	memset(a, 0, sizeof(a));
	snprintf(a[0].id, sizeof(a[0].id), "%s", "job_1");
	a[0].kind = CNL_WIRE_JOB;
	a[0].epoch = 5;
	a[0].action = CNL_WIRE_RUN;
	snprintf(a[0].project_id, sizeof(a[0].project_id), "%s", "prj_1");
	snprintf(a[0].user_id, sizeof(a[0].user_id), "%s", "usr_1");
	snprintf(a[0].user, sizeof(a[0].user), "%s", "alice");
	snprintf(a[0].shape, sizeof(a[0].shape), "%s", "h100-25");
	snprintf(a[0].command, sizeof(a[0].command), "%s",
	         "python3 train.py --lr 0.1");
	a[0].gpu = (struct cnl_wire_slice){.blocks = 28,
	                                   .vram_mib = 20096,
	                                   .gpu_mask = 1,
	                                   .mig_profile = "2g.20gb",
	                                   .mig_start = 4};
	a[0].has_gang = true;
	snprintf(a[0].gang.id, sizeof(a[0].gang.id), "%s", "job_1");
	a[0].gang.rank = 1;
	a[0].gang.size = 2;
	snprintf(a[0].gang.nodes[0], sizeof(a[0].gang.nodes[0]), "%s", "n1");
	snprintf(a[0].gang.nodes[1], sizeof(a[0].gang.nodes[1]), "%s", "n2");
	a[0].gang.n_nodes = 2;
	a[0].cpu_milli = 1000;
	a[0].mem_mib = 4096;
	a[0].not_before_ms = INT64_C(1700000000000);
	a[0].secrets = 3;
	snprintf(a[0].traceparent, sizeof(a[0].traceparent), "%s",
	         "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01");
	snprintf(a[1].id, sizeof(a[1].id), "%s", "srv_1");
	a[1].kind = CNL_WIRE_SERVER;
	a[1].epoch = 1;
	a[1].action = CNL_WIRE_STOP;
	snprintf(a[1].project_id, sizeof(a[1].project_id), "%s", "prj_1");
	snprintf(a[1].user_id, sizeof(a[1].user_id), "%s", "usr_1");
	snprintf(a[1].shape, sizeof(a[1].shape), "%s", "h100-10");
	snprintf(a[1].image, sizeof(a[1].image), "%s", "pytorch:2.4-cuda12.4");
	snprintf(a[1].image_digest, sizeof(a[1].image_digest), "sha256:%064d",
	         7);
	a[1].image_bytes = INT64_C(5) << 30;
	snprintf(a[1].name, sizeof(a[1].name), "%s", "nb");
	a[1].storage_gb = 50;
	a[1].idle_timeout_s = 14400;
	a[1].gpu = (struct cnl_wire_slice){
	    .blocks = 10, .vram_mib = 8155, .gpu_mask = 2, .mig_start = -1};
	a[1].signal_ms = INT64_C(1700000001000);
	a[1].kill_ms = INT64_C(1700000031000);
	m.items = a;
	m.n = 2;
	ROUND(struct cnl_wire_assignments, cnl_wire_assignments_encode,
	      cnl_wire_assignments_decode, cnl_wire_assignments_done(p_), &m);
#define BASE                                                              \
	"{\"version\":1,\"epoch\":1,\"assignments\":[{\"id\":\"j\","      \
	"\"kind\":\"job\",\"epoch\":1,\"action\":\"run\",\"project_id\":" \
	"\"p\",\"user_id\":\"u\",\"shape\":\"h100-1\",\"cpu_milli\":1,"   \
	"\"mem_mib\":1,"
#define A(tail, field)                                                       \
	DECODE_BAD(cnl_wire_assignments_decode, struct cnl_wire_assignments, \
	           cnl_wire_assignments_done(&m_), BASE tail, field)
	A("\"gpu\":{\"blocks\":1,\"vram_mib\":1,\"gpu_mask\":1},"
	  "\"kind2\":1}]}",
	  "assignments[0].kind2");
	A("\"gpu\":{\"blocks\":1,\"vram_mib\":1}}]}",
	  "assignments[0].gpu.gpu_mask");
	A("\"gpu\":{\"blocks\":1,\"vram_mib\":1,\"gpu_mask\":1,"
	  "\"mig_start\":2}}]}",
	  "assignments[0].gpu.mig_start");
	A("\"gpu\":{\"blocks\":1,\"vram_mib\":1,\"gpu_mask\":1},"
	  "\"gang\":{\"id\":\"g\",\"rank\":2,\"size\":2,\"nodes\":[]}}]}",
	  "assignments[0].gang.rank");
	A("\"gpu\":{\"blocks\":1,\"vram_mib\":1,\"gpu_mask\":1},"
	  "\"kill_at\":\"yesterday\"}]}",
	  "assignments[0].kill_at");
	/* A trace context is a W3C traceparent or nothing. */
	A("\"gpu\":{\"blocks\":1,\"vram_mib\":1,\"gpu_mask\":1},"
	  "\"traceparent\":\"00-4BF92F3577B34DA6A3CE929D0E0E4736-"
	  "00f067aa0ba902b7-01\"}]}",
	  "traceparent");
	A("\"gpu\":{\"blocks\":1,\"vram_mib\":1,\"gpu_mask\":1},"
	  "\"action\":\"pause\"}]}",
	  "assignments[0].action");
	/* Secrets: a count of 0..32, never a value. */
	A("\"gpu\":{\"blocks\":1,\"vram_mib\":1,\"gpu_mask\":1},"
	  "\"secrets\":33}]}",
	  "assignments[0].secrets");
	A("\"gpu\":{\"blocks\":1,\"vram_mib\":1,\"gpu_mask\":1},"
	  "\"secrets\":[\"hunter2\"]}]}",
	  "assignments[0].secrets");
	A("\"gpu\":{\"blocks\":1,\"vram_mib\":1,\"gpu_mask\":1},"
	  "\"image\":\"x:1\",\"image_digest\":\"md5:0123\"}]}",
	  "assignments[0].image_digest");
#undef A
#undef BASE
	DECODE_BAD(cnl_wire_assignments_decode, struct cnl_wire_assignments,
	           cnl_wire_assignments_done(&m_),
	           "{\"version\":1,\"epoch\":1}", "assignments");
}

/* The GPU memory audit's kill record: round trip, and every bad field
 * named. */
static void test_gpu_kill(void **state)
{
	struct cnl_wire_gpu_kill k = {.epoch = 2,
	                              .pid = 4242,
	                              .gpu = 1,
	                              .used = 6LL << 30,
	                              .pid_used = 5LL << 30,
	                              .quota = 4LL << 30};

	(void)state;
	snprintf(k.id, sizeof(k.id), "%s", "job_1");
	ROUND(struct cnl_wire_gpu_kill, cnl_wire_gpu_kill_encode,
	      cnl_wire_gpu_kill_decode, NOTHING, &k);
#define K(text, field)                                                 \
	DECODE_BAD(cnl_wire_gpu_kill_decode, struct cnl_wire_gpu_kill, \
	           NOTHING, text, field)
#define OK_ "\"id\":\"j\",\"epoch\":1,"
	K("{" OK_ "\"pid\":0,\"gpu\":0,\"used\":5,\"pid_used\":5,"
	  "\"quota\":1}",
	  "pid");
	K("{" OK_ "\"pid\":5000000,\"gpu\":0,\"used\":5,\"pid_used\":5,"
	  "\"quota\":1}",
	  "pid");
	K("{" OK_ "\"pid\":7,\"gpu\":16,\"used\":5,\"pid_used\":5,"
	  "\"quota\":1}",
	  "gpu");
	K("{" OK_ "\"pid\":7,\"gpu\":0,\"used\":-1,\"pid_used\":0,"
	  "\"quota\":1}",
	  "used");
	K("{" OK_ "\"pid\":7,\"gpu\":0,\"used\":5,\"pid_used\":6,"
	  "\"quota\":1}",
	  "pid_used");
	K("{" OK_ "\"pid\":7,\"gpu\":0,\"used\":5,\"pid_used\":5,"
	  "\"quota\":-1}",
	  "quota");
	K("{" OK_ "\"pid\":7,\"gpu\":0,\"used\":5,\"pid_used\":5}", "quota");
	K("{" OK_ "\"pid\":7,\"gpu\":0,\"used\":5,\"pid_used\":5,"
	  "\"quota\":1,\"project\":\"p\"}",
	  "project");
	K("{\"id\":\"\",\"epoch\":1,\"pid\":7,\"gpu\":0,\"used\":5,"
	  "\"pid_used\":5,\"quota\":1}",
	  "id");
#undef OK_
#undef K
}

static void test_report_log_files(void **state)
{
	struct cnl_wire_report r = {0};
	struct cnl_wire_log l = {0};
	struct cnl_wire_file f = {0}, items[1];
	struct cnl_wire_files fs;

	(void)state;
	snprintf(r.id, sizeof(r.id), "%s", "job_1");
	r.epoch = 3;
	r.state = CNL_WIRE_REPORT_FAILED;
	r.has_exit_code = true;
	r.exit_code = -9;
	snprintf(r.message, sizeof(r.message), "%s",
	         "killed by the out-of-memory killer");
	ROUND(struct cnl_wire_report, cnl_wire_report_encode,
	      cnl_wire_report_decode, NOTHING, &r);
	snprintf(l.id, sizeof(l.id), "%s", "job_1");
	l.epoch = 3;
	l.stderr_ = true;
	l.has_offset = true;
	l.offset = 4096;
	l.dropped = 1000;
	l.data = (char *)"h\xc3\xa9llo\n";
	l.len = strlen(l.data);
	ROUND(struct cnl_wire_log, cnl_wire_log_encode, cnl_wire_log_decode,
	      cnl_wire_log_done(p_), &l);
	f.size = 5 << 20;
	snprintf(f.path, sizeof(f.path), "%s", "sub dir/r\xc3\xa9sultat 1.txt");
	memset(f.sha256, 'a', 64);
	ROUND(struct cnl_wire_file, cnl_wire_file_encode, cnl_wire_file_decode,
	      NOTHING, &f);
	items[0] = f;
	fs.items = items;
	fs.n = 1;
	ROUND(struct cnl_wire_files, cnl_wire_files_encode,
	      cnl_wire_files_decode, cnl_wire_files_done(p_), &fs);
#define R(text, field)                                                      \
	DECODE_BAD(cnl_wire_report_decode, struct cnl_wire_report, NOTHING, \
	           text, field)
	R("{\"id\":\"j\",\"epoch\":1,\"state\":\"done\"}", "state");
	R("{\"id\":\"j\",\"epoch\":1,\"state\":\"failed\",\"exit_code\":256}",
	  "exit_code");
	R("{\"id\":\"j\",\"state\":\"failed\"}", "epoch");
#undef R
	DECODE_BAD(
	    cnl_wire_log_decode, struct cnl_wire_log, cnl_wire_log_done(&m_),
	    "{\"id\":\"j\",\"epoch\":1,\"stream\":\"stdin\",\"data\":\"\"}",
	    "stream");
	DECODE_BAD(cnl_wire_log_decode, struct cnl_wire_log,
	           cnl_wire_log_done(&m_),
	           "{\"id\":\"j\",\"epoch\":1,\"stream\":\"stdout\","
	           "\"offset\":-1,\"data\":\"\"}",
	           "offset");
	DECODE_BAD(cnl_wire_log_decode, struct cnl_wire_log,
	           cnl_wire_log_done(&m_),
	           "{\"id\":\"j\",\"epoch\":1,\"stream\":\"stdout\","
	           "\"offset\":5,\"dropped\":6,\"data\":\"\"}",
	           "dropped");
	{
		struct cnl_wire_log_ack ack = {.has_next = true, .next = 77};
		ROUND(struct cnl_wire_log_ack, cnl_wire_log_ack_encode,
		      cnl_wire_log_ack_decode, NOTHING, &ack);
		DECODE_BAD(cnl_wire_log_ack_decode, struct cnl_wire_log_ack,
		           NOTHING, "{\"next\":\"7\"}", "next");
	}
#define F(text, field)                                                        \
	DECODE_BAD(cnl_wire_file_decode, struct cnl_wire_file, NOTHING, text, \
	           field)
#define SHA             \
	"\"sha256\":\"" \
	"0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef\""
	F("{\"path\":\"../etc/passwd\",\"size\":1," SHA "}", "path");
	F("{\"path\":\"a/../../b\",\"size\":1," SHA "}", "path");
	F("{\"path\":\"/etc/shadow\",\"size\":1," SHA "}", "path");
	F("{\"path\":\"a//b\",\"size\":1," SHA "}", "path");
	F("{\"path\":\"a\\nb\",\"size\":1," SHA "}", "path");
	F("{\"path\":\"a\",\"size\":-1," SHA "}", "size");
	F("{\"path\":\"a\",\"size\":1,\"sha256\":\"ABC\"}", "sha256");
	F("{\"path\":\"a\",\"size\":1}", "sha256");
	F("{\"path\":\"a\",\"size\":1," SHA ",\"data_base64\":\"\"}",
	  "data_base64");
#undef F
#undef SHA
}

/* Output travels byte for byte: text as text, anything else as base64. */
static void test_log_bytes(void **state)
{
	static const char raw[] = "h\xc3\xa9llo \xff\xfe\0end\n";
	struct cnl_wire_log l = {.epoch = 1}, back;
	char e[256];
	json_t *j;

	(void)state;
	snprintf(l.id, sizeof(l.id), "job_1");
	l.data = (char *)raw;
	l.len = sizeof(raw) - 1;
	j = cnl_wire_log_encode(&l);
	assert_null(json_object_get(j, "data"));
	assert_non_null(json_object_get(j, "data_base64"));
	assert_int_equal(cnl_wire_log_decode(j, &back, e, sizeof(e)), 0);
	assert_int_equal(back.len, sizeof(raw) - 1);
	assert_memory_equal(back.data, raw, sizeof(raw) - 1);
	cnl_wire_log_done(&back);
	json_decref(j);
	/* UTF-8 text goes as a string, unchanged. */
	l.data = (char *)"h\xc3\xa9llo \xf0\x9f\x98\x80\n";
	l.len = strlen(l.data);
	j = cnl_wire_log_encode(&l);
	assert_string_equal(json_string_value(json_object_get(j, "data")),
	                    l.data);
	json_decref(j);
	/* Not UTF-8: overlong, surrogate, cut short, beyond U+10FFFF. */
	assert_false(cnl_wire_utf8_ok("\xc0\xaf", 2));
	assert_false(cnl_wire_utf8_ok("\xed\xa0\x80", 3));
	assert_false(cnl_wire_utf8_ok("\xc3", 1));
	assert_false(cnl_wire_utf8_ok("\xf4\x90\x80\x80", 4));
	assert_true(cnl_wire_utf8_ok("\xf4\x8f\xbf\xbf", 4));
	/* Exactly one of data and data_base64. */
	DECODE_BAD(cnl_wire_log_decode, struct cnl_wire_log,
	           cnl_wire_log_done(&m_),
	           "{\"id\":\"j\",\"epoch\":1,\"stream\":\"stdout\","
	           "\"data\":\"a\",\"data_base64\":\"YQ==\"}",
	           "data");
	DECODE_BAD(cnl_wire_log_decode, struct cnl_wire_log,
	           cnl_wire_log_done(&m_),
	           "{\"id\":\"j\",\"epoch\":1,\"stream\":\"stdout\","
	           "\"data_base64\":\"a*==\"}",
	           "data_base64");
}

/* Paths: any UTF-8 name in subfolders; nothing that leaves the folder. */
static void test_paths(void **state)
{
	static const char *const good[] = {
	    "a",
	    "model v1.bin",
	    "sub/dir/r\xc3\xa9sum\xc3\xa9.txt",
	    "\xe6\x97\xa5\xe6\x9c\xac/\xe8\xaa\x9e",
	    ".hidden",
	    "a..b",
	    "...",
	    "back\\slash"};
	static const char *const bad[] = {
	    "",        "/abs",     "a/",       "a//b", ".",
	    "..",      "a/./b",    "a/../b",   "../x", "tab\there",
	    "del\x7f", "\xff\xfe", "new\nline"};
	char e[128], longp[CNL_WIRE_PATH_MAX + 2], comp[300];

	(void)state;
	for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++)
		if (cnl_wire_path_check(good[i], e, sizeof(e)) != 0)
			fail_msg("refused \"%s\": %s", good[i], e);
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		if (cnl_wire_path_check(bad[i], e, sizeof(e)) != -CNL_EFIELD)
			fail_msg("accepted \"%s\"", bad[i]);
	memset(longp, 'a', sizeof(longp) - 1);
	longp[sizeof(longp) - 1] = '\0';
	for (size_t i = 100; i < sizeof(longp) - 1; i += 100)
		longp[i] = '/';
	assert_int_equal(cnl_wire_path_check(longp, e, sizeof(e)), -CNL_EFIELD);
	memset(comp, 'b', 256);
	comp[256] = '\0';
	assert_int_equal(cnl_wire_path_check(comp, e, sizeof(e)), -CNL_EFIELD);
	comp[255] = '\0';
	assert_int_equal(cnl_wire_path_check(comp, e, sizeof(e)), 0);
}

/* The proxy's tunnels: a port tunnel, an exec with its command; strict. */
static void test_tunnels(void **state)
{
	struct cnl_wire_tunnels t;
	char big[40];

	DECODE_OK(cnl_wire_tunnels_decode,
	          "{\"tunnels\":[{\"id\":\"tun_1\",\"workload\":\"srv_1\"},"
	          "{\"id\":\"tun_2\",\"workload\":\"srv_1\","
	          "\"command\":[\"sh\",\"-c\",\"id\"]}]}",
	          &t);
	assert_int_equal(t.n, 2);
	assert_null(t.items[0].argv);
	assert_int_equal(t.items[1].argc, 3);
	assert_string_equal(t.items[1].argv[2], "id");
	assert_null(t.items[1].argv[3]);
	{
		json_t *j = cnl_wire_tunnels_encode(&t);
		struct cnl_wire_tunnels back;
		char e[256];

		assert_int_equal(
		    cnl_wire_tunnels_decode(j, &back, e, sizeof(e)), 0);
		assert_string_equal(back.items[1].argv[1], "-c");
		cnl_wire_tunnels_done(&back);
		json_decref(j);
	}
	cnl_wire_tunnels_done(&t);
	DECODE_BAD(cnl_wire_tunnels_decode, struct cnl_wire_tunnels,
	           cnl_wire_tunnels_done(&m_),
	           "{\"tunnels\":[{\"id\":\"t\",\"workload\":\"w\","
	           "\"port\":1}]}",
	           "port");
	DECODE_BAD(cnl_wire_tunnels_decode, struct cnl_wire_tunnels,
	           cnl_wire_tunnels_done(&m_),
	           "{\"tunnels\":[{\"id\":\"t\",\"workload\":\"w\","
	           "\"command\":[]}]}",
	           "command");
	DECODE_BAD(cnl_wire_tunnels_decode, struct cnl_wire_tunnels,
	           cnl_wire_tunnels_done(&m_),
	           "{\"tunnels\":[{\"id\":\"t\",\"workload\":\"w\","
	           "\"command\":[\"a\",1]}]}",
	           "command");
	/* A NUL inside an argument would cut it short in C. */
	{
		json_t *j = json_pack("{s:[{s:s,s:s,s:[o]}]}", "tunnels", "id",
		                      "t", "workload", "w", "command",
		                      json_stringn("a\0b", 3));
		struct cnl_wire_tunnels m;
		char e[256] = "";

		assert_int_equal(cnl_wire_tunnels_decode(j, &m, e, sizeof(e)),
		                 -CNL_EFIELD);
		assert_non_null(strstr(e, "NUL"));
		cnl_wire_tunnels_done(&m);
		json_decref(j);
	}
	/* 65 arguments: one too many. */
	{
		json_t *c = json_array(), *j;
		struct cnl_wire_tunnels m;
		char e[256] = "";

		for (int i = 0; i <= CNL_WIRE_EXEC_ARGS; i++) {
			snprintf(big, sizeof(big), "a%d", i);
			json_array_append_new(c, json_string(big));
		}
		j = json_pack("{s:[{s:s,s:s,s:o}]}", "tunnels", "id", "t",
		              "workload", "w", "command", c);
		assert_int_equal(cnl_wire_tunnels_decode(j, &m, e, sizeof(e)),
		                 -CNL_EFIELD);
		assert_non_null(strstr(e, "command"));
		cnl_wire_tunnels_done(&m);
		json_decref(j);
	}
}

/* ssh tunnels (protocol 9): the host key and authorized_keys, strict. */
static void test_tunnels_ssh(void **state)
{
	struct cnl_wire_tunnels t;

	(void)state;
	DECODE_OK(cnl_wire_tunnels_decode,
	          "{\"tunnels\":[{\"id\":\"tun_1\",\"workload\":\"srv_1\","
	          "\"ssh\":{\"host_key\":\"K\",\"authorized_keys\":"
	          "\"ssh-ed25519 AAAA a\\n\"}}]}",
	          &t);
	assert_int_equal(t.n, 1);
	assert_null(t.items[0].argv);
	assert_string_equal(t.items[0].ssh_host_key, "K");
	assert_string_equal(t.items[0].ssh_keys, "ssh-ed25519 AAAA a\n");
	{
		json_t *j = cnl_wire_tunnels_encode(&t);
		struct cnl_wire_tunnels back;
		char e[256];

		assert_int_equal(
		    cnl_wire_tunnels_decode(j, &back, e, sizeof(e)), 0);
		assert_string_equal(back.items[0].ssh_host_key, "K");
		assert_string_equal(back.items[0].ssh_keys,
		                    "ssh-ed25519 AAAA a\n");
		cnl_wire_tunnels_done(&back);
		json_decref(j);
	}
	cnl_wire_tunnels_done(&t);
#define S(text, field)                                               \
	DECODE_BAD(cnl_wire_tunnels_decode, struct cnl_wire_tunnels, \
	           cnl_wire_tunnels_done(&m_), text, field)
	/* An unknown member, a missing or empty host key, a number. */
	S("{\"tunnels\":[{\"id\":\"t\",\"workload\":\"w\",\"ssh\":"
	  "{\"host_key\":\"K\",\"authorized_keys\":\"\",\"user\":\"x\"}}]}",
	  "user");
	S("{\"tunnels\":[{\"id\":\"t\",\"workload\":\"w\",\"ssh\":"
	  "{\"authorized_keys\":\"\"}}]}",
	  "host_key");
	S("{\"tunnels\":[{\"id\":\"t\",\"workload\":\"w\",\"ssh\":"
	  "{\"host_key\":\"\",\"authorized_keys\":\"\"}}]}",
	  "host_key");
	S("{\"tunnels\":[{\"id\":\"t\",\"workload\":\"w\",\"ssh\":"
	  "{\"host_key\":\"K\",\"authorized_keys\":1}}]}",
	  "authorized_keys");
	/* Both an sshd and a command: which one? */
	S("{\"tunnels\":[{\"id\":\"t\",\"workload\":\"w\",\"ssh\":"
	  "{\"host_key\":\"K\",\"authorized_keys\":\"\"},"
	  "\"command\":[\"id\"]}]}",
	  "command");
#undef S
	/* A NUL would end the file early; a key past the limit. */
	{
		json_t *j =
		    json_pack("{s:[{s:s,s:s,s:{s:s,s:o}}]}", "tunnels", "id",
		              "t", "workload", "w", "ssh", "host_key", "K",
		              "authorized_keys", json_stringn("a\0b", 3));
		struct cnl_wire_tunnels m;
		char e[256] = "";

		assert_int_equal(cnl_wire_tunnels_decode(j, &m, e, sizeof(e)),
		                 -CNL_EFIELD);
		assert_non_null(strstr(e, "authorized_keys"));
		cnl_wire_tunnels_done(&m);
		json_decref(j);
	}
	{
		char *big = calloc(1, CNL_WIRE_SSH_HOST_KEY_MAX + 2);
		json_t *j;
		struct cnl_wire_tunnels m;
		char e[256] = "";

		memset(big, 'k', CNL_WIRE_SSH_HOST_KEY_MAX + 1);
		j = json_pack("{s:[{s:s,s:s,s:{s:s,s:s}}]}", "tunnels", "id",
		              "t", "workload", "w", "ssh", "host_key", big,
		              "authorized_keys", "");
		assert_int_equal(cnl_wire_tunnels_decode(j, &m, e, sizeof(e)),
		                 -CNL_EFIELD);
		assert_non_null(strstr(e, "host_key"));
		cnl_wire_tunnels_done(&m);
		json_decref(j);
		free(big);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_register),
	    cmocka_unit_test(test_node_and_heartbeat),
	    cmocka_unit_test(test_assignments),
	    cmocka_unit_test(test_report_log_files),
	    cmocka_unit_test(test_gpu_kill),
	    cmocka_unit_test(test_log_bytes),
	    cmocka_unit_test(test_paths),
	    cmocka_unit_test(test_tunnels),
	    cmocka_unit_test(test_tunnels_ssh),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
