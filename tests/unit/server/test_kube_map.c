/*
 * test_kube_map.c - what cnlabd's Kubernetes scheduler reads of pods,
 * claims, slices and TrainingJobs (server/kube_map.c, kube_ops.c):
 * quantities, the claim's shape and its refusals, priorities and
 * annotations, a node from its slices, the allocation written back, and a
 * TrainingJob's children.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include <jansson.h>

#include "server/kube_map.h"
#include "server/kube_ops.h"

static json_t *parse(const char *text)
{
	json_error_t e;
	json_t *j = json_loads(text, 0, &e);

	if (!j)
		fail_msg("bad JSON in the test: %s: %s", e.text, text);
	return j;
}

static void test_quantities(void **state)
{
	(void)state;
	assert_int_equal(cnl_kube_cpu_milli("500m"), 500);
	assert_int_equal(cnl_kube_cpu_milli("2"), 2000);
	assert_int_equal(cnl_kube_cpu_milli("0.25"), 250);
	assert_int_equal(cnl_kube_cpu_milli("1e3"), 1000000);
	assert_int_equal(cnl_kube_mem_mib("1Gi"), 1024);
	assert_int_equal(cnl_kube_mem_mib("512Mi"), 512);
	assert_int_equal(cnl_kube_mem_mib("1G"), 954); /* 10^9 bytes, up */
	assert_int_equal(cnl_kube_mem_mib("1"), 1);    /* a byte is a MiB */
	assert_int_equal(cnl_kube_mem_mib("1Ki"), 1);
	assert_int_equal(cnl_kube_cpu_milli("-1"), -1);
	assert_int_equal(cnl_kube_cpu_milli("1x"), -1);
	assert_int_equal(cnl_kube_mem_mib(""), -1);
	assert_int_equal(cnl_kube_mem_mib("Gi"), -1);
	assert_int_equal(cnl_kube_mem_mib(NULL), -1);
}

#define POD                                                                    \
	"{\"metadata\":{\"name\":\"p\",\"namespace\":\"ns\",\"uid\":\"u\","    \
	"\"annotations\":%s},\"spec\":{\"priority\":%d,\"containers\":["       \
	"{\"resources\":{\"requests\":{\"cpu\":\"1500m\",\"memory\":\"2Gi\"}}" \
	"},"                                                                   \
	"{\"resources\":{\"requests\":{\"cpu\":\"1\"}}}]}}"

static json_t *pod(const char *ann, int prio)
{
	char buf[2048];

	snprintf(buf, sizeof(buf), POD, ann, prio);
	return parse(buf);
}

static json_t *claim(const char *exactly)
{
	char buf[2048];

	snprintf(buf, sizeof(buf),
	         "{\"spec\":{\"devices\":{\"requests\":[{\"name\":\"gpu\","
	         "\"exactly\":%s}]}}}",
	         exactly);
	return parse(buf);
}

/* The shape of a pod with claim request @exactly and annotations @ann;
 * "" with the error in @err when refused. */
static const char *shape_of(const char *ann, const char *exactly, char *err,
                            size_t errlen)
{
	static struct cnl_kube_ask a;
	json_t *p = pod(ann, 0), *c = exactly ? claim(exactly) : NULL;
	int r = cnl_kube_ask_of(p, c, &a, err, errlen);

	json_decref(p);
	json_decref(c);
	return r == 0 ? a.shape : "";
}

static void test_shapes(void **state)
{
	char err[512];

	(void)state;
	assert_string_equal(shape_of("{}", NULL, err, sizeof(err)), "cpu");
	assert_string_equal(
	    shape_of("{}",
	             "{\"deviceClassName\":\"gpu.cnlab.io\",\"count\":1,"
	             "\"capacity\":{\"requests\":{\"blocks\":\"25\"}}}",
	             err, sizeof(err)),
	    "any-25");
	assert_string_equal(
	    shape_of("{\"cnlab.io/gpu-type\":\"h100\"}",
	             "{\"deviceClassName\":\"gpu.cnlab.io\",\"count\":2}", err,
	             sizeof(err)),
	    "h100x2");
	assert_string_equal(shape_of("{}",
	                             "{\"deviceClassName\":\"gpu.cnlab.io\"}",
	                             err, sizeof(err)),
	                    "any-full");
	assert_string_equal(
	    shape_of(
	        "{}",
	        "{\"deviceClassName\":\"gpu.cnlab.io\",\"selectors\":["
	        "{\"cel\":{\"expression\":\"device.driver == "
	        "\\\"gpu.cnlab.io\\\"\"}},"
	        "{\"cel\":{\"expression\":\"device.attributes["
	        "'gpu.cnlab.io'].profile == '3g.40gb'\"}},"
	        "{\"cel\":{\"expression\":\" device.attributes["
	        "\\\"gpu.cnlab.io\\\"].type == \\\"H100-80GB-SXM\\\"\"}}]}",
	        err, sizeof(err)),
	    "H100-80GB-SXM-3g.40gb");
	/* Refusals, each naming what. */
	static const struct {
		const char *exactly, *says;
	} bad[] = {
	    {"{\"deviceClassName\":\"gpu.nvidia.com\"}", "gpu.nvidia.com"},
	    {"{\"deviceClassName\":\"gpu.cnlab.io\",\"allocationMode\":"
	     "\"All\"}",
	     "allocationMode All"},
	    {"{\"deviceClassName\":\"gpu.cnlab.io\",\"count\":17}", "count"},
	    {"{\"deviceClassName\":\"gpu.cnlab.io\",\"capacity\":{"
	     "\"requests\":{\"blocks\":\"101\"}}}",
	     "blocks must be"},
	    {"{\"deviceClassName\":\"gpu.cnlab.io\",\"capacity\":{"
	     "\"requests\":{\"blocks\":\"10Gi\"}}}",
	     "blocks must be"},
	    {"{\"deviceClassName\":\"gpu.cnlab.io\",\"count\":2,\"capacity\":{"
	     "\"requests\":{\"blocks\":\"10\"}}}",
	     "count must be 1"},
	    {"{\"deviceClassName\":\"gpu.cnlab.io\",\"selectors\":[{\"cel\":{"
	     "\"expression\":\"device.attributes[\\\"gpu.cnlab.io\\\"].type "
	     "== \\\"H100\\\" || true\"}}]}",
	     "selector 0"},
	    {"{\"deviceClassName\":\"gpu.cnlab.io\",\"selectors\":[{\"cel\":{"
	     "\"expression\":\"device.attributes[\\\"gpu.cnlab.io\\\"].uuid "
	     "== \\\"GPU-1\\\"\"}}]}",
	     "selector 0"},
	    {"{\"deviceClassName\":\"gpu.cnlab.io\",\"selectors\":[{\"cel\":{"
	     "\"expression\":\"device.attributes[\\\"gpu.cnlab.io\\\"].type "
	     "== \\\"a;b\\\"\"}}]}",
	     "characters"},
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		err[0] = '\0';
		assert_string_equal(
		    shape_of("{}", bad[i].exactly, err, sizeof(err)), "");
		if (!strstr(err, bad[i].says))
			fail_msg("case %zu: \"%s\" does not say \"%s\"", i, err,
			         bad[i].says);
	}
	json_t *two = parse("{\"spec\":{\"devices\":{\"requests\":[{\"name\":"
	                    "\"a\"},{\"name\":\"b\"}]}}}");
	struct cnl_kube_ask a;
	json_t *p = pod("{}", 0);
	assert_int_equal(cnl_kube_ask_of(p, two, &a, err, sizeof(err)),
	                 -EINVAL);
	assert_non_null(strstr(err, "2 requests"));
	json_decref(two);
	json_decref(p);
}

static void test_priority_and_annotations(void **state)
{
	static const struct {
		int prio;
		const char *want;
	} cases[] = {{-5, "low"},    {0, "normal"},    {999, "normal"},
	             {1000, "high"}, {999999, "high"}, {1000000, "critical"}};
	struct cnl_kube_ask a;
	char err[256];
	json_t *p;

	(void)state;
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		p = pod("{}", cases[i].prio);
		assert_int_equal(cnl_kube_ask_of(p, NULL, &a, err, sizeof(err)),
		                 0);
		assert_string_equal(a.priority, cases[i].want);
		json_decref(p);
	}
	p = pod("{\"cnlab.io/priority\":\"low\",\"cnlab.io/deadline\":"
	        "\"2026-12-05T10:00:00Z\",\"cnlab.io/runtime-seconds\":\"600\","
	        "\"cnlab.io/preemptible\":\"false\",\"cnlab.io/dataset\":"
	        "\"imagenet\"}",
	        5000000);
	assert_int_equal(cnl_kube_ask_of(p, NULL, &a, err, sizeof(err)), 0);
	assert_string_equal(a.priority, "low"); /* the annotation wins */
	assert_string_equal(a.deadline, "2026-12-05T10:00:00Z");
	assert_int_equal(a.runtime_s, 600);
	assert_int_equal(a.preemptible, 0);
	assert_string_equal(a.dataset, "imagenet");
	assert_int_equal(a.cpu_milli, 2500); /* 1500m + 1 */
	assert_int_equal(a.mem_mib, 2048);
	json_decref(p);
	static const char *const bad[] = {
	    "{\"cnlab.io/priority\":\"urgent\"}",
	    "{\"cnlab.io/deadline\":\"tomorrow\"}",
	    "{\"cnlab.io/runtime-seconds\":\"0\"}",
	    "{\"cnlab.io/runtime-seconds\":\"12x\"}",
	    "{\"cnlab.io/preemptible\":\"no\"}",
	    "{\"cnlab.io/gpu-types\":\"\"}",
	    "{\"cnlab.io/gpu-types\":\"h100,,a100\"}",
	    "{\"cnlab.io/gpu-types\":\"h100,A100\"}",
	    "{\"cnlab.io/gpu-types\":\"h100,a100,\"}",
	    "{\"cnlab.io/gpu-types\":\"a,b,c,d,e,f,g,h,i,j,k,l,m,n,o,p,q\"}"};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		p = pod(bad[i], 0);
		err[0] = '\0';
		assert_int_equal(cnl_kube_ask_of(p, NULL, &a, err, sizeof(err)),
		                 -EINVAL);
		assert_non_null(strstr(err, "annotation cnlab.io/"));
		json_decref(p);
	}
}

static void test_pod_claim(void **state)
{
	char name[64], err[256];
	json_t *p;

	(void)state;
	p = parse("{\"spec\":{\"resourceClaims\":[{\"name\":\"gpu\","
	          "\"resourceClaimTemplateName\":\"t\"}]},\"status\":{}}");
	assert_int_equal(
	    cnl_kube_pod_claim(p, name, sizeof(name), err, sizeof(err)),
	    -EAGAIN);
	json_object_set_new(
	    json_object_get(p, "status"), "resourceClaimStatuses",
	    parse("[{\"name\":\"gpu\",\"resourceClaimName\":\"p-gpu-x1\"}]"));
	assert_int_equal(
	    cnl_kube_pod_claim(p, name, sizeof(name), err, sizeof(err)), 0);
	assert_string_equal(name, "p-gpu-x1");
	json_decref(p);
	p = parse("{\"spec\":{\"resourceClaims\":[{\"name\":\"a\","
	          "\"resourceClaimName\":\"x\"},{\"name\":\"b\","
	          "\"resourceClaimName\":\"y\"}]}}");
	assert_int_equal(
	    cnl_kube_pod_claim(p, name, sizeof(name), err, sizeof(err)),
	    -EINVAL);
	json_decref(p);
}

/* What a pod holds on its node, as the kubelet counts it. */
static void test_pod_requests(void **state)
{
	int64_t cpu, mem;
	json_t *p;

	(void)state;
	/* Containers together; an init step alone, if larger. */
	p = parse("{\"spec\":{\"containers\":[{\"resources\":{\"requests\":"
	          "{\"cpu\":\"500m\",\"memory\":\"1Gi\"}}},{\"resources\":"
	          "{\"requests\":{\"cpu\":\"1\"}}}],\"initContainers\":[{"
	          "\"resources\":{\"requests\":{\"cpu\":\"4\","
	          "\"memory\":\"512Mi\"}}}]}}");
	assert_int_equal(cnl_kube_pod_requests(p, &cpu, &mem), 0);
	assert_int_equal(cpu, 4000);
	assert_int_equal(mem, 1024);
	json_decref(p);
	/* A sidecar (restartPolicy Always) runs beside the containers and
	 * beside the init steps after it; the overhead comes on top. */
	p = parse("{\"spec\":{\"initContainers\":[{\"restartPolicy\":"
	          "\"Always\",\"resources\":{\"requests\":{\"cpu\":\"2\"}}},"
	          "{\"resources\":{\"requests\":{\"cpu\":\"3\"}}}],"
	          "\"containers\":[{\"resources\":{\"requests\":{\"cpu\":"
	          "\"1\",\"memory\":\"100Mi\"}}}],\"overhead\":{\"cpu\":"
	          "\"250m\",\"memory\":\"10Mi\"}}}");
	assert_int_equal(cnl_kube_pod_requests(p, &cpu, &mem), 0);
	assert_int_equal(cpu, 5250); /* the init step 3 + sidecar 2 */
	assert_int_equal(mem, 110);
	json_decref(p);
	/* Nothing asked: nothing held. */
	p = parse("{\"spec\":{\"containers\":[{\"name\":\"c\"}]}}");
	assert_int_equal(cnl_kube_pod_requests(p, &cpu, &mem), 0);
	assert_int_equal(cpu + mem, 0);
	json_decref(p);
	p = parse("{\"spec\":{\"containers\":[],\"overhead\":{\"cpu\":"
	          "\"lots\"}}}");
	assert_int_equal(cnl_kube_pod_requests(p, &cpu, &mem), -EINVAL);
	json_decref(p);
}

/* Where a pod may go: nodeSelector, required affinity, taints. */
static void test_node_fits(void **state)
{
	char why[256];
	json_t *node =
	    parse("{\"metadata\":{\"name\":\"n1\",\"labels\":{\"zone\":\"a\","
	          "\"gen\":\"5\"}},\"spec\":{\"taints\":[{\"key\":\"gpu\","
	          "\"value\":\"only\",\"effect\":\"NoSchedule\"},{\"key\":"
	          "\"soft\",\"effect\":\"PreferNoSchedule\"}]}}");
	json_t *pod;

	(void)state;
#define FITS(text, want, said)                                              \
	do {                                                                \
		pod = parse(text);                                          \
		why[0] = '\0';                                              \
		assert_int_equal(                                           \
		    cnl_kube_node_fits(pod, node, why, sizeof(why)), want); \
		if (!(want))                                                \
			assert_non_null(strstr(why, said));                 \
		json_decref(pod);                                           \
	} while (0)
	/* Its taint is not tolerated; PreferNoSchedule does not count. */
	FITS("{\"spec\":{}}", false, "taint gpu=only:NoSchedule");
	FITS("{\"spec\":{\"tolerations\":[{\"key\":\"gpu\",\"value\":"
	     "\"other\"}]}}",
	     false, "taint gpu");
	FITS("{\"spec\":{\"tolerations\":[{\"key\":\"gpu\",\"value\":"
	     "\"only\",\"effect\":\"NoExecute\"}]}}",
	     false, "taint gpu");
	FITS("{\"spec\":{\"tolerations\":[{\"key\":\"gpu\",\"operator\":"
	     "\"Exists\"}]}}",
	     true, "");
	FITS("{\"spec\":{\"tolerations\":[{\"operator\":\"Exists\"}]}}", true,
	     "");
	/* An operator Kubernetes does not have tolerates nothing. */
	FITS("{\"spec\":{\"tolerations\":[{\"key\":\"gpu\",\"operator\":"
	     "\"Like\",\"value\":\"only\"}]}}",
	     false, "taint gpu");
#define T "\"tolerations\":[{\"key\":\"gpu\",\"value\":\"only\"}]"
	FITS("{\"spec\":{" T "}}", true, "");
	FITS("{\"spec\":{" T ",\"nodeSelector\":{\"zone\":\"a\"}}}", true, "");
	FITS("{\"spec\":{" T ",\"nodeSelector\":{\"zone\":\"b\"}}}", false,
	     "nodeSelector zone=b");
	FITS("{\"spec\":{" T ",\"nodeSelector\":{\"rack\":\"a\"}}}", false,
	     "nodeSelector rack=a");
#define AFF(terms)                                             \
	"{\"spec\":{" T ",\"affinity\":{\"nodeAffinity\":{"    \
	"\"requiredDuringSchedulingIgnoredDuringExecution\":{" \
	"\"nodeSelectorTerms\":" terms "}}}}}"
	FITS(AFF("[{\"matchExpressions\":[{\"key\":\"zone\",\"operator\":"
	         "\"In\",\"values\":[\"b\",\"a\"]},{\"key\":\"gen\","
	         "\"operator\":\"Gt\",\"values\":[\"4\"]}]}]"),
	     true, "");
	FITS(AFF("[{\"matchExpressions\":[{\"key\":\"gen\",\"operator\":"
	         "\"Lt\",\"values\":[\"5\"]}]}]"),
	     false, "node affinity");
	/* Terms are ORed; expressions in one term ANDed. */
	FITS(AFF("[{\"matchExpressions\":[{\"key\":\"zone\",\"operator\":"
	         "\"NotIn\",\"values\":[\"a\"]}]},{\"matchExpressions\":[{"
	         "\"key\":\"gen\",\"operator\":\"Exists\"},{\"key\":\"x\","
	         "\"operator\":\"DoesNotExist\"}]}]"),
	     true, "");
	FITS(AFF("[{\"matchFields\":[{\"key\":\"metadata.name\",\"operator\":"
	         "\"In\",\"values\":[\"n2\"]}]}]"),
	     false, "node affinity");
	FITS(AFF("[{\"matchFields\":[{\"key\":\"metadata.name\",\"operator\":"
	         "\"In\",\"values\":[\"n1\"]}]}]"),
	     true, "");
	FITS(AFF("[{}]"), false, "node affinity"); /* an empty term: nothing */
	FITS(AFF("[{\"matchExpressions\":[{\"key\":\"gen\",\"operator\":"
	         "\"Gt\",\"values\":[\"x\"]}]}]"),
	     false, "node affinity");
	/* A cordoned node: its taint, unless tolerated. */
	json_object_set_new(json_object_get(node, "spec"), "unschedulable",
	                    json_true());
	FITS("{\"spec\":{" T "}}", false, "unschedulable");
	FITS("{\"spec\":{\"tolerations\":[{\"key\":\"gpu\",\"value\":"
	     "\"only\"},{\"key\":\"node.kubernetes.io/unschedulable\","
	     "\"operator\":\"Exists\",\"effect\":\"NoSchedule\"}]}}",
	     true, "");
#undef AFF
#undef T
#undef FITS
	json_decref(node);
}

static void test_register(void **state)
{
	struct cnl_wire_register m;
	char err[256];
	json_t *node = parse("{\"metadata\":{\"name\":\"n1\"},\"status\":{"
	                     "\"allocatable\":{\"cpu\":\"31500m\",\"memory\":"
	                     "\"125Gi\"}}}");
	json_t *slices = parse(
	    "[{\"spec\":{\"driver\":\"gpu.cnlab.io\",\"nodeName\":\"n1\","
	    "\"devices\":[{\"name\":\"gpu-1\",\"attributes\":{\"index\":{"
	    "\"int\":"
	    "1},\"type\":{\"string\":\"L4\"},\"uuid\":{\"string\":\"GPU-b\"}},"
	    "\"capacity\":{\"memory\":{\"value\":\"24Gi\"}}}]}},"
	    "{\"spec\":{\"driver\":\"gpu.cnlab.io\",\"nodeName\":\"n1\","
	    "\"devices\":[{\"name\":\"gpu-0\",\"attributes\":{\"index\":{"
	    "\"int\":"
	    "0},\"type\":{\"string\":\"L4\"},\"uuid\":{\"string\":\"GPU-a\"}}},"
	    "{\"name\":\"gpu-0-mig-1g-5gb-0\",\"attributes\":{\"index\":{"
	    "\"int\":0}}}]}},"
	    "{\"spec\":{\"driver\":\"other\",\"nodeName\":\"n1\",\"devices\":["
	    "{\"name\":\"gpu-7\"}]}}]");

	(void)state;
	assert_int_equal(
	    cnl_kube_register_of(node, slices, &m, err, sizeof(err)), 0);
	assert_string_equal(m.name, "n1");
	assert_string_equal(m.gpu_type, "L4");
	assert_int_equal(m.gpus, 2);
	assert_string_equal(m.devices[0].uuid, "GPU-a"); /* by index */
	assert_int_equal(m.devices[1].mem_mib, 24576);
	assert_int_equal(m.cpu_milli, 31500);
	assert_int_equal(m.mem_mib, 128000);
	/* Two types on one node; a gap in the indexes. */
	json_object_set_new(
	    json_object_get(
	        json_object_get(
	            json_array_get(
	                json_object_get(
	                    json_object_get(json_array_get(slices, 0), "spec"),
	                    "devices"),
	                0),
	            "attributes"),
	        "type"),
	    "string", json_string("T4"));
	assert_int_equal(
	    cnl_kube_register_of(node, slices, &m, err, sizeof(err)), -EINVAL);
	assert_non_null(strstr(err, "one type"));
	json_array_remove(slices, 1);
	assert_int_equal(
	    cnl_kube_register_of(node, slices, &m, err, sizeof(err)), -EINVAL);
	assert_non_null(strstr(err, "indexes"));
	json_object_set_new(json_object_get(node, "metadata"), "name",
	                    json_string("n2"));
	assert_int_equal(
	    cnl_kube_register_of(node, slices, &m, err, sizeof(err)), -ENOENT);
	json_decref(node);
	json_decref(slices);
}

static void test_allocation(void **state)
{
	unsigned char share[CNL_WIRE_GPUS_MAX][16] = {{0}};
	struct cnl_wire_slice s = {.blocks = 200, .gpu_mask = 0x6};
	json_t *a;

	(void)state;
	a = cnl_kube_allocation(&s, "n1", "gpu", "p", "uid-1", share);
	json_t *res = json_object_get(
	    json_object_get(json_object_get(a, "allocation"), "devices"),
	    "results");
	assert_int_equal(json_array_size(res), 2);
	assert_string_equal(json_string_value(json_object_get(
	                        json_array_get(res, 0), "device")),
	                    "gpu-1");
	assert_string_equal(
	    json_string_value(json_object_get(
	        json_object_get(json_array_get(res, 1), "consumedCapacity"),
	        "blocks")),
	    "100");
	assert_string_equal(json_string_value(json_object_get(
	                        json_array_get(res, 0), "shareID")),
	                    "00000000-0000-4000-8000-000000000000");
	json_decref(a);
	s = (struct cnl_wire_slice){.blocks = 43,
	                            .gpu_mask = 1,
	                            .mig_profile = "3g.40gb",
	                            .mig_start = 4};
	a = cnl_kube_allocation(&s, "n1", "gpu", "p", "uid-1", share);
	res = json_object_get(
	    json_object_get(json_object_get(a, "allocation"), "devices"),
	    "results");
	assert_string_equal(json_string_value(json_object_get(
	                        json_array_get(res, 0), "device")),
	                    "gpu-0-mig-3g-40gb-4");
	assert_null(json_object_get(json_array_get(res, 0), "shareID"));
	assert_string_equal(
	    json_string_value(json_object_get(
	        json_array_get(json_object_get(a, "reservedFor"), 0), "uid")),
	    "uid-1");
	json_decref(a);
}

static void test_trainingjob(void **state)
{
	json_t *tj = parse(
	    "{\"metadata\":{\"name\":\"t\",\"uid\":\"tu\",\"generation\":1},"
	    "\"spec\":{\"command\":\"echo hi\",\"image\":\"busybox\","
	    "\"gpu\":\"a100-80gb-3g.40gb\",\"priority\":\"high\"}}");
	json_t *claim, *pod;
	char err[256];

	(void)state;
	assert_int_equal(cnl_kube_tj_children(tj, "vision", NULL, &claim, &pod,
	                                      err, sizeof(err)),
	                 0);
	assert_string_equal(json_string_value(json_object_get(
	                        json_object_get(pod, "spec"), "schedulerName")),
	                    "cnlab");
	assert_string_equal(
	    json_string_value(json_object_get(
	        json_object_get(json_object_get(pod, "metadata"),
	                        "annotations"),
	        "cnlab.io/gpu-type")),
	    "a100-80gb");
	assert_string_equal(cnl_kube_tj_owner(pod), "t");
	/* The pod's shape, read back as the scheduler reads it. */
	struct cnl_kube_ask a;
	assert_int_equal(cnl_kube_ask_of(pod, claim, &a, err, sizeof(err)), 0);
	assert_string_equal(a.shape, "a100-80gb-3g.40gb");
	assert_string_equal(a.priority, "high");
	assert_int_equal(a.cpu_milli, 1000);
	assert_int_equal(a.mem_mib, 4096);
	json_decref(claim);
	json_decref(pod);
	static const struct {
		const char *gpu, *shape;
	} round[] = {{"h100-25", "h100-25"}, {"h100-25pct", "h100-25"},
	             {"h100x4", "h100x4"},   {"h100-full", "h100-full"},
	             {"h100", "h100-full"},  {"any-10", "any-10"},
	             {"cpu", "cpu"}};
	for (size_t i = 0; i < sizeof(round) / sizeof(round[0]); i++) {
		json_object_set_new(json_object_get(tj, "spec"), "gpu",
		                    json_string(round[i].gpu));
		assert_int_equal(cnl_kube_tj_children(tj, "vision", NULL,
		                                      &claim, &pod, err,
		                                      sizeof(err)),
		                 0);
		assert_int_equal(
		    cnl_kube_ask_of(pod, claim, &a, err, sizeof(err)), 0);
		if (strcmp(a.shape, round[i].shape) != 0)
			fail_msg("gpu %s: shape %s, not %s", round[i].gpu,
			         a.shape, round[i].shape);
		json_decref(claim);
		json_decref(pod);
	}
	/* Refused: another project, a gang, a profile, no image, no shape. */
	json_object_set_new(json_object_get(tj, "spec"), "project",
	                    json_string("other"));
	assert_int_equal(cnl_kube_tj_children(tj, "vision", NULL, &claim, &pod,
	                                      err, sizeof(err)),
	                 -EINVAL);
	assert_non_null(strstr(err, "spec.project other"));
	json_object_del(json_object_get(tj, "spec"), "project");
	json_object_set_new(json_object_get(tj, "spec"), "gpu",
	                    json_string("h100-101"));
	assert_int_equal(cnl_kube_tj_children(tj, "vision", NULL, &claim, &pod,
	                                      err, sizeof(err)),
	                 -EINVAL);
	json_object_set_new(json_object_get(tj, "spec"), "gpu",
	                    json_string("h100x17"));
	assert_int_equal(cnl_kube_tj_children(tj, "vision", NULL, &claim, &pod,
	                                      err, sizeof(err)),
	                 -EINVAL);
	json_object_set_new(json_object_get(tj, "spec"), "gpu",
	                    json_string("h100-10"));
	json_object_set_new(json_object_get(tj, "spec"), "nodes",
	                    json_integer(2));
	assert_int_equal(cnl_kube_tj_children(tj, "vision", NULL, &claim, &pod,
	                                      err, sizeof(err)),
	                 -EINVAL);
	json_object_del(json_object_get(tj, "spec"), "nodes");
	/* A profile: its shape, as the caller looked it up; with gpu too,
	 * refused. */
	json_object_set_new(json_object_get(tj, "spec"), "profile",
	                    json_string("h100-25pct"));
	assert_int_equal(cnl_kube_tj_children(tj, "vision", "h100-25", &claim,
	                                      &pod, err, sizeof(err)),
	                 -EINVAL);
	assert_non_null(strstr(err, "spec.profile"));
	json_object_del(json_object_get(tj, "spec"), "gpu");
	assert_int_equal(cnl_kube_tj_children(tj, "vision", "h100-25", &claim,
	                                      &pod, err, sizeof(err)),
	                 0);
	assert_int_equal(cnl_kube_ask_of(pod, claim, &a, err, sizeof(err)), 0);
	assert_string_equal(a.shape, "h100-25");
	json_decref(claim);
	json_decref(pod);
	/* gpuTypes: the annotation cnlab.io/gpu-types, read back. */
	json_object_del(json_object_get(tj, "spec"), "profile");
	json_object_set_new(json_object_get(tj, "spec"), "gpu",
	                    json_string("any-25"));
	json_object_set_new(json_object_get(tj, "spec"), "gpuTypes",
	                    parse("[\"h100\",\"a100\"]"));
	assert_int_equal(cnl_kube_tj_children(tj, "vision", NULL, &claim, &pod,
	                                      err, sizeof(err)),
	                 0);
	assert_int_equal(cnl_kube_ask_of(pod, claim, &a, err, sizeof(err)), 0);
	assert_string_equal(a.shape, "any-25");
	assert_string_equal(a.gpu_types, "h100,a100");
	json_decref(claim);
	json_decref(pod);
	json_object_del(json_object_get(tj, "spec"), "gpuTypes");
	json_object_del(json_object_get(tj, "spec"), "image");
	assert_int_equal(cnl_kube_tj_children(tj, "vision", NULL, &claim, &pod,
	                                      err, sizeof(err)),
	                 -EINVAL);
	assert_non_null(strstr(err, "spec.image"));
	json_decref(tj);
}

/* Required inter-pod rules, as kube-scheduler reads them. */
static void test_pod_affinity(void **state)
{
	(void)state;
	/* Two zones: a and b in z1, c in z2; d has no zone label. */
	json_t *nodes =
	    parse("{\"a\":{\"metadata\":{\"labels\":{\"zone\":\"z1\"}}},"
	          "\"b\":{\"metadata\":{\"labels\":{\"zone\":\"z1\"}}},"
	          "\"c\":{\"metadata\":{\"labels\":{\"zone\":\"z2\"}}},"
	          "\"d\":{\"metadata\":{}}}");
	/* A db pod on a (ns1), a cache pod on c (ns2) that keeps app=web
	 * out of its zone. */
	json_t *placed = parse(
	    "[[{\"metadata\":{\"uid\":\"u1\",\"namespace\":\"ns1\",\"name\":"
	    "\"db\",\"labels\":{\"app\":\"db\"}}},\"a\"],"
	    "[{\"metadata\":{\"uid\":\"u2\",\"namespace\":\"ns2\",\"name\":"
	    "\"cache\",\"labels\":{\"app\":\"cache\"}},\"spec\":{\"affinity\":"
	    "{\"podAntiAffinity\":{\"requiredDuringSchedulingIgnoredDuring"
	    "Execution\":[{\"labelSelector\":{\"matchExpressions\":[{\"key\":"
	    "\"app\",\"operator\":\"In\",\"values\":[\"web\"]}]},"
	    "\"namespaceSelector\":{},\"topologyKey\":\"zone\"}]}}}},\"c\"]]");
	char why[256];
#define APOD(labels, aff)                                            \
	parse("{\"metadata\":{\"uid\":\"me\",\"namespace\":\"ns1\"," \
	      "\"labels\":" labels "},\"spec\":{\"affinity\":{" aff "}}}")
#define REQ(kind, sel, more)                                                \
	"\"" kind "\":{\"requiredDuringSchedulingIgnoredDuringExecution\":" \
	"[{\"labelSelector\":" sel ",\"topologyKey\":\"zone\"" more "}]}"
#define FITS(pod, node, want)                                                 \
	do {                                                                  \
		why[0] = '\0';                                                \
		assert_int_equal(cnl_kube_pod_affinity_fits(pod, node, nodes, \
		                                            placed, why,      \
		                                            sizeof(why)),     \
		                 want);                                       \
	} while (0)
	/* Near db: its zone (a, b), not z2, not a node without a zone. */
	json_t *p = APOD(
	    "{}", REQ("podAffinity", "{\"matchLabels\":{\"app\":\"db\"}}", ""));
	assert_true(cnl_kube_pod_has_affinity(p, false));
	assert_false(cnl_kube_pod_has_affinity(p, true));
	FITS(p, "a", true);
	FITS(p, "b", true);
	FITS(p, "c", false);
	assert_non_null(strstr(why, "its podAffinity (none at zone=z2)"));
	FITS(p, "d", false);
	json_decref(p);
	/* db is in ns1: a term naming ns2 alone finds nothing; the pod
	 * does not select itself, so it is not the first of a group. */
	p = APOD("{}", REQ("podAffinity", "{\"matchLabels\":{\"app\":\"db\"}}",
	                   ",\"namespaces\":[\"ns2\"]"));
	FITS(p, "a", false);
	json_decref(p);
	/* The first of a group: nothing selected anywhere, it selects
	 * itself: anywhere with a zone. */
	p = APOD("{\"app\":\"new\"}",
	         REQ("podAffinity", "{\"matchLabels\":{\"app\":\"new\"}}", ""));
	FITS(p, "c", true);
	FITS(p, "d", false);
	json_decref(p);
	/* Away from db's zone; a node with no zone has no domain. */
	p = APOD("{}", REQ("podAntiAffinity",
	                   "{\"matchLabels\":{\"app\":\"db\"}}", ""));
	assert_true(cnl_kube_pod_has_affinity(p, true));
	FITS(p, "b", false);
	assert_non_null(strstr(why, "its podAntiAffinity at zone=z1"));
	FITS(p, "c", true);
	FITS(p, "d", true);
	json_decref(p);
	/* An absent labelSelector selects nothing; an empty one all. */
	p = APOD("{}",
	         "\"podAntiAffinity\":{\"requiredDuringScheduling"
	         "IgnoredDuringExecution\":[{\"topologyKey\":\"zone\"}]}");
	FITS(p, "a", true);
	json_decref(p);
	p = APOD("{}",
	         REQ("podAntiAffinity", "{}", ",\"namespaceSelector\":{}"));
	FITS(p, "b", false);
	FITS(p, "c", false);
	FITS(p, "d", true);
	json_decref(p);
	/* Symmetry: cache's anti-affinity keeps an app=web pod (of any
	 * namespace) out of z2, whatever the pod itself says. */
	p = APOD("{\"app\":\"web\"}", "");
	FITS(p, "c", false);
	assert_non_null(strstr(why, "pod ns2/cache's podAntiAffinity"));
	FITS(p, "a", true);
	json_decref(p);
	/* Not read: namespaces by labels, no topologyKey. */
	p = APOD("{}", REQ("podAntiAffinity", "{}",
	                   ",\"namespaceSelector\":{\"matchLabels\":"
	                   "{\"team\":\"x\"}}"));
	FITS(p, "d", false);
	assert_non_null(strstr(why, "not read"));
	json_decref(p);
	p = APOD("{}", "\"podAffinity\":{\"requiredDuringScheduling"
	               "IgnoredDuringExecution\":[{\"labelSelector\":{}}]}");
	FITS(p, "a", false);
	json_decref(p);
#undef APOD
#undef REQ
#undef FITS
	json_decref(nodes);
	json_decref(placed);
}

/* Hard topology spread as kube-scheduler's filter reads it: skew per
 * domain, the nodes and pods that count, minDomains, matchLabelKeys, the
 * node policies, and what is not read (ScheduleAnyway). */
static void test_topology_spread(void **state)
{
	(void)state;
	/* z1: a, b; z2: c; d has no zone; e (z3) is gpu=no and tainted. */
	json_t *nodes =
	    parse("{\"a\":{\"metadata\":{\"labels\":{\"zone\":\"z1\",\"gpu\":"
	          "\"yes\"}}},"
	          "\"b\":{\"metadata\":{\"labels\":{\"zone\":\"z1\",\"gpu\":"
	          "\"yes\"}}},"
	          "\"c\":{\"metadata\":{\"labels\":{\"zone\":\"z2\",\"gpu\":"
	          "\"yes\"}}},"
	          "\"d\":{\"metadata\":{\"labels\":{\"gpu\":\"yes\"}}}}");
	json_t *e =
	    parse("{\"metadata\":{\"labels\":{\"zone\":\"z3\",\"gpu\":\"no\"}},"
	          "\"spec\":{\"taints\":[{\"key\":\"k\",\"effect\":"
	          "\"NoSchedule\"}]}}");
	/* ns1's web pods (rev 1): two on a, one on c; and some that do not
	 * count: another namespace's, an ended one, a terminating one, all
	 * on c. */
#define WEB(uid, ns, more)                                              \
	"[{\"metadata\":{\"uid\":\"" uid "\",\"namespace\":\"" ns "\"," \
	"\"labels\":{\"app\":\"web\",\"rev\":\"1\"}" more "}"
	json_t
	    *placed =
	        parse("[" WEB("w1", "ns1", "") "},\"a\"]," WEB("w2", "ns1", "") "},\"a\"]," WEB(
	            "w3", "ns1",
	            "") "},\"c\"]," WEB("o1", "ns2",
	                                "") "},\"c\"]," WEB("o2", "ns1",
	                                                    "") ",\"status"
	                                                        "\":{"
	                                                        "\"phase\":"
	                                                        "\"Succeede"
	                                                        "d\"}},"
	                                                        "\"c\"]"
	                                                        "," WEB(
	                                                            "o"
	                                                            "3",
	                                                            "ns"
	                                                            "1",
	                                                            ","
	                                                            "\""
	                                                            "de"
	                                                            "le"
	                                                            "ti"
	                                                            "on"
	                                                            "Ti"
	                                                            "me"
	                                                            "st"
	                                                            "am"
	                                                            "p"
	                                                            "\""
	                                                            ":"
	                                                            "\""
	                                                            "20"
	                                                            "26"
	                                                            "-0"
	                                                            "1-"
	                                                            "01"
	                                                            "T0"
	                                                            "0:"
	                                                            "00"
	                                                            ":0"
	                                                            "0Z"
	                                                            "\"") "},"
	                                                                  "\"c"
	                                                                  "\"]"
	                                                                  "]");
	char why[256];
	struct cnl_kube_spread *sp;
#define SPOD(labels, extra, tsc)                                     \
	parse("{\"metadata\":{\"uid\":\"me\",\"namespace\":\"ns1\"," \
	      "\"labels\":" labels "},\"spec\":{" extra              \
	      "\"topologySpreadConstraints\":[" tsc "]}}")
#define TSC(more)                                                        \
	"{\"maxSkew\":1,\"topologyKey\":\"zone\",\"whenUnsatisfiable\":" \
	"\"DoNotSchedule\",\"labelSelector\":{\"matchLabels\":{\"app\":" \
	"\"web\"}}" more "}"
#define SFITS(node, want)                                                    \
	do {                                                                 \
		why[0] = '\0';                                               \
		assert_int_equal(                                            \
		    cnl_kube_spread_fits(sp, node, why, sizeof(why)), want); \
	} while (0)
	/* z1 holds 2, z2 1: a third web pod goes to z2 only (skew 1), not
	 * z1 (3 - 1 = 2), nor to a node without a zone. */
	json_t *p = SPOD("{\"app\":\"web\",\"rev\":\"2\"}", "", TSC(""));
	assert_true(cnl_kube_pod_has_spread(p));
	sp = cnl_kube_spread_new(p, nodes, placed, false);
	assert_non_null(sp);
	SFITS("c", true);
	SFITS("a", false);
	assert_non_null(strstr(
	    why, "its topology spread (zone=z1: 2, fewest 1, maxSkew 1)"));
	SFITS("b", false);
	SFITS("d", false);
	assert_non_null(strstr(why, "its topology spread (no label zone)"));
	SFITS("nowhere", false);
	cnl_kube_spread_free(sp);
	/* maxSkew 2 lets z1 take it too. */
	json_decref(p);
	p = SPOD(
	    "{\"app\":\"web\"}", "",
	    "{\"maxSkew\":2,\"topologyKey\":\"zone\",\"whenUnsatisfiable\":"
	    "\"DoNotSchedule\",\"labelSelector\":{\"matchLabels\":{\"app\":"
	    "\"web\"}}}");
	sp = cnl_kube_spread_new(p, nodes, placed, false);
	SFITS("a", true);
	cnl_kube_spread_free(sp);
	json_decref(p);
	/* An empty zone z3 (node e) makes the fewest 0: only e now. */
	json_object_set(nodes, "e", e);
	p = SPOD("{\"app\":\"web\"}", "", TSC(""));
	sp = cnl_kube_spread_new(p, nodes, placed, false);
	SFITS("e", true);
	SFITS("c", false);
	cnl_kube_spread_free(sp);
	/* nodeTaintsPolicy Honor: e's taint is not tolerated, so z3 does
	 * not count, and c takes it again. */
	json_decref(p);
	p = SPOD("{\"app\":\"web\"}", "",
	         TSC(",\"nodeTaintsPolicy\":\"Honor\""));
	sp = cnl_kube_spread_new(p, nodes, placed, false);
	SFITS("c", true);
	cnl_kube_spread_free(sp);
	/* nodeAffinityPolicy Honor (the default): a pod for gpu=yes does not
	 * count e's zone; with Ignore it does. */
	json_decref(p);
	p = SPOD("{\"app\":\"web\"}", "\"nodeSelector\":{\"gpu\":\"yes\"},",
	         TSC(""));
	sp = cnl_kube_spread_new(p, nodes, placed, false);
	SFITS("c", true);
	cnl_kube_spread_free(sp);
	json_decref(p);
	p = SPOD("{\"app\":\"web\"}", "\"nodeSelector\":{\"gpu\":\"yes\"},",
	         TSC(",\"nodeAffinityPolicy\":\"Ignore\""));
	sp = cnl_kube_spread_new(p, nodes, placed, false);
	SFITS("c", false);
	cnl_kube_spread_free(sp);
	json_object_del(nodes, "e");
	/* minDomains 3 with two zones: the fewest is 0, so no zone with a
	 * web pod takes another. */
	json_decref(p);
	p = SPOD("{\"app\":\"web\"}", "", TSC(",\"minDomains\":3"));
	sp = cnl_kube_spread_new(p, nodes, placed, false);
	SFITS("c", false);
	SFITS("a", false);
	cnl_kube_spread_free(sp);
	/* matchLabelKeys: only rev 2's pods count, and there are none. */
	json_decref(p);
	p = SPOD("{\"app\":\"web\",\"rev\":\"2\"}", "",
	         TSC(",\"matchLabelKeys\":[\"rev\"]"));
	sp = cnl_kube_spread_new(p, nodes, placed, false);
	SFITS("a", true);
	SFITS("c", true);
	cnl_kube_spread_free(sp);
	/* A pod its selector does not select adds nothing: skew 2 - 1. */
	json_decref(p);
	p = SPOD("{\"app\":\"other\"}", "", TSC(""));
	sp = cnl_kube_spread_new(p, nodes, placed, false);
	SFITS("a", true);
	cnl_kube_spread_free(sp);
	/* An empty labelSelector counts no pod (kube-scheduler's
	 * countPodsMatchSelector), though the pod matches it: skew 1 on
	 * every node with the key. */
	json_decref(p);
	p = SPOD(
	    "{\"app\":\"web\"}", "",
	    "{\"maxSkew\":1,\"topologyKey\":\"zone\",\"whenUnsatisfiable\":"
	    "\"DoNotSchedule\",\"labelSelector\":{}}");
	sp = cnl_kube_spread_new(p, nodes, placed, false);
	SFITS("a", true);
	SFITS("c", true);
	SFITS("d", false);
	cnl_kube_spread_free(sp);
	/* ScheduleAnyway is a preference: not read. */
	json_decref(p);
	p = SPOD(
	    "{\"app\":\"web\"}", "",
	    "{\"maxSkew\":1,\"topologyKey\":\"zone\",\"whenUnsatisfiable\":"
	    "\"ScheduleAnyway\",\"labelSelector\":{}}");
	assert_false(cnl_kube_pod_has_spread(p));
	assert_null(cnl_kube_spread_new(p, nodes, placed, false));
	json_decref(p);
#undef SPOD
#undef TSC
#undef SFITS
#undef WEB
	json_decref(e);
	json_decref(placed);
	json_decref(nodes);
}

/* The best of nodes a, b, c, d for @pod: their letters, e.g. "ac". */
static void best_of(const json_t *pod, const json_t *nodes,
                    const json_t *placed, char *out)
{
	static const char *const names[] = {"a", "b", "c", "d"};
	struct cnl_kube_pref pr[4];
	struct cnl_kube_spread *soft =
	    cnl_kube_spread_new(pod, nodes, placed, true);
	bool best[4];
	size_t n, k = 0;

	for (int i = 0; i < 4; i++)
		cnl_kube_pref_of(pod, nodes, names[i], placed, soft, &pr[i]);
	cnl_kube_spread_free(soft);
	n = cnl_kube_pref_best(pr, 4, best);
	for (int i = 0; i < 4; i++)
		if (best[i])
			out[k++] = names[i][0];
	out[k] = '\0';
	assert_int_equal(n, k);
}

static void test_preferences(void **state)
{
	(void)state;
	/* z1: a (ssd), b (a PreferNoSchedule taint); z2: c (hdd); d no
	 * zone.  ns1's web pods: two on a, one on c; a cache pod on c. */
	json_t *nodes = parse(
	    "{\"a\":{\"metadata\":{\"labels\":{\"zone\":\"z1\",\"disk\":"
	    "\"ssd\"}}},"
	    "\"b\":{\"metadata\":{\"labels\":{\"zone\":\"z1\"}},\"spec\":{"
	    "\"taints\":[{\"key\":\"k\",\"value\":\"v\",\"effect\":"
	    "\"PreferNoSchedule\"},{\"key\":\"n\",\"effect\":\"NoSchedule\"}"
	    "]}},"
	    "\"c\":{\"metadata\":{\"labels\":{\"zone\":\"z2\",\"disk\":"
	    "\"hdd\"}}},"
	    "\"d\":{\"metadata\":{\"labels\":{}}}}");
#define PPOD(uid, labels, more)         \
	"{\"metadata\":{\"uid\":\"" uid \
	"\",\"namespace\":\"ns1\",\"labels\":" labels "},\"spec\":{" more "}}"
	json_t *placed = parse("[[" PPOD(
	    "w1", "{\"app\":\"web\"}",
	    "") ",\"a\"],"
	        "[" PPOD("w2", "{\"app\":\"web\"}",
	                 "") ",\"a\"],"
	                     "[" PPOD(
	                         "w3", "{\"app\":\"web\"}",
	                         "") ",\"c\"],"
	                             "[" PPOD(
	                                 "k1", "{\"app\":\"cache\"}",
	                                 "\"affinity\":{\"podAntiAffinity\":{"
	                                 "\"preferredDuringSch"
	                                 "edulingIgnoredDuringExecution\":[{"
	                                 "\"weight\":100,"
	                                 "\"podAffinityTerm\":{\"topologyKey\":"
	                                 "\"zone\","
	                                 "\"labelSelector\":{\"matchLabels\":{"
	                                 "\"app\":\"batch\"}}}"
	                                 "}]}}") ",\"c\"]]");
	json_t *p;
	char best[8];

	/* Nothing preferred: all alike. */
	p = parse(PPOD("me", "{\"app\":\"x\"}",
	               "\"tolerations\":[{\"operator\":\"Exists\"}]"));
	best_of(p, nodes, placed, best);
	assert_string_equal(best, "abcd");
	assert_false(cnl_kube_pod_prefers_pods(p));
	json_decref(p);
	/* Preferred node affinity: the heavier term's node. */
	p = parse(PPOD(
	    "me", "{}",
	    "\"tolerations\":[{\"operator\":\"Exists\"}],\"affinity\":{"
	    "\"nodeAffinity\":{\"preferredDuringSchedulingIgnoredDuringExecu"
	    "tion\":[{\"weight\":20,\"preference\":{\"matchExpressions\":[{"
	    "\"key\":\"disk\",\"operator\":\"In\",\"values\":[\"hdd\"]}]}},"
	    "{\"weight\":80,\"preference\":{\"matchExpressions\":[{\"key\":"
	    "\"disk\",\"operator\":\"In\",\"values\":[\"ssd\"]}]}}]}}"));
	best_of(p, nodes, placed, best);
	assert_string_equal(best, "a");
	assert_false(cnl_kube_pod_prefers_pods(p));
	json_decref(p);
	/* PreferNoSchedule: a pod that does not tolerate it goes elsewhere
	 * first (b's NoSchedule taint is a rule, not scored here); one
	 * that tolerates it (by key, any effect) does not mind. */
	p = parse(PPOD("me", "{}", ""));
	best_of(p, nodes, placed, best);
	assert_string_equal(best, "acd");
	json_decref(p);
	p = parse(PPOD("me", "{}",
	               "\"tolerations\":[{\"key\":\"k\",\"operator\":"
	               "\"Equal\",\"value\":\"v\"}]"));
	best_of(p, nodes, placed, best);
	assert_string_equal(best, "abcd");
	json_decref(p);
	/* ScheduleAnyway spread of web pods by zone: z2 (one) before z1
	 * (two); d, without a zone, last. */
	p = parse(PPOD("me", "{\"app\":\"web\"}",
	               "\"tolerations\":[{\"operator\":\"Exists\"}],"
	               "\"topologySpreadConstraints\":[{\"maxSkew\":1,"
	               "\"topologyKey\":\"zone\",\"whenUnsatisfiable\":"
	               "\"ScheduleAnyway\",\"labelSelector\":{\"matchLabels\":"
	               "{\"app\":\"web\"}}}]"));
	assert_true(cnl_kube_pod_prefers_pods(p));
	assert_false(cnl_kube_pod_has_spread(p));
	best_of(p, nodes, placed, best);
	assert_string_equal(best, "c");
	json_decref(p);
	/* Preferred pod affinity: near the cache (z2). */
	p = parse(PPOD("me", "{}",
	               "\"tolerations\":[{\"operator\":\"Exists\"}],"
	               "\"affinity\":{\"podAffinity\":{\"preferredDuringSche"
	               "dulingIgnoredDuringExecution\":[{\"weight\":50,"
	               "\"podAffinityTerm\":{\"topologyKey\":\"zone\","
	               "\"labelSelector\":{\"matchLabels\":{\"app\":"
	               "\"cache\"}}}}]}}"));
	assert_true(cnl_kube_pod_prefers_pods(p));
	best_of(p, nodes, placed, best);
	assert_string_equal(best, "c");
	json_decref(p);
	/* Preferred anti-affinity to web pods by zone: each web pod in the
	 * node's zone counts against it; d has no zone, so none. */
	p = parse(PPOD("me", "{}",
	               "\"tolerations\":[{\"operator\":\"Exists\"}],"
	               "\"affinity\":{\"podAntiAffinity\":{\"preferredDuringS"
	               "chedulingIgnoredDuringExecution\":[{\"weight\":100,"
	               "\"podAffinityTerm\":{\"topologyKey\":\"zone\","
	               "\"labelSelector\":{\"matchLabels\":{\"app\":"
	               "\"web\"}}}}]}}"));
	best_of(p, nodes, placed, best);
	assert_string_equal(best, "d");
	json_decref(p);
	/* The cache pod's own preferred anti-affinity keeps a batch pod out
	 * of z2 first; another namespace's batch pod is not selected. */
	p = parse(PPOD("me", "{\"app\":\"batch\"}",
	               "\"tolerations\":[{\"operator\":\"Exists\"}]"));
	best_of(p, nodes, placed, best);
	assert_string_equal(best, "abd");
	json_decref(p);
	p = parse("{\"metadata\":{\"uid\":\"me\",\"namespace\":\"ns2\","
	          "\"labels\":{\"app\":\"batch\"}},\"spec\":{\"tolerations\":"
	          "[{\"operator\":\"Exists\"}]}}");
	best_of(p, nodes, placed, best);
	assert_string_equal(best, "abcd");
	json_decref(p);
#undef PPOD
	json_decref(placed);
	json_decref(nodes);
}

/* The collector's CA: certificates only, never a key beside them. */
static void test_pem_certs(void **state)
{
	(void)state;
#define CERT(x) "-----BEGIN CERTIFICATE-----\n" x "\n-----END CERTIFICATE-----"
#define KEY \
	"-----BEGIN PRIVATE KEY-----\nSECRETKEY\n-----END PRIVATE KEY-----\n"
	char *c = cnl_kube_pem_certs(KEY CERT("AAAA") "\n");
	assert_non_null(c);
	assert_string_equal(c, CERT("AAAA") "\n");
	assert_null(strstr(c, "SECRETKEY"));
	free(c);
	/* Two certificates, no newline at the very end: both, whole. */
	c = cnl_kube_pem_certs(CERT("AAAA") "\n" CERT("BBBB"));
	assert_string_equal(c, CERT("AAAA") "\n" CERT("BBBB") "\n");
	free(c);
	/* A key hidden between a certificate's markers is not copied. */
	c = cnl_kube_pem_certs(CERT(KEY) "\n" CERT("CCCC"));
	assert_string_equal(c, CERT("CCCC") "\n");
	free(c);
	assert_null(cnl_kube_pem_certs(KEY));
	assert_null(cnl_kube_pem_certs(""));
	assert_null(cnl_kube_pem_certs("-----BEGIN CERTIFICATE-----\nAAAA"));
#undef CERT
#undef KEY
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_quantities),
	    cmocka_unit_test(test_shapes),
	    cmocka_unit_test(test_priority_and_annotations),
	    cmocka_unit_test(test_pod_claim),
	    cmocka_unit_test(test_pod_requests),
	    cmocka_unit_test(test_node_fits),
	    cmocka_unit_test(test_pod_affinity),
	    cmocka_unit_test(test_topology_spread),
	    cmocka_unit_test(test_preferences),
	    cmocka_unit_test(test_pem_certs),
	    cmocka_unit_test(test_register),
	    cmocka_unit_test(test_allocation),
	    cmocka_unit_test(test_trainingjob),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
