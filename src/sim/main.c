/*
 * main.c - cnlab-sim: run the production scheduler code over a GPU trace.
 *
 *   cnlab-sim fgd --trace DIR --pods NAME --policy P[,P...]
 *                 [--seeds 42-51] [--tune 1.3] [--json] [--plot FILE.svg]
 *
 * fgd: the FGD paper's protocol (see fgd.h) on the Alibaba openb trace at
 * DIR (csv/openb_node_list_gpu_node.csv and csv/openb_pod_list_NAME.csv),
 * for each policy and seed.  Prints a table, or with --json one object:
 *   {"trace": ..., "pods": ..., "tune": ..., "results": [
 *     {"policy", "seeds", "alloc_pct_at_end", "frag_pct_at_90",
 *      "failed_pods", "seconds", "curve": [[arrived_pct, alloc_pct], ...],
 *      "frag_curve": [[arrived_pct, frag_pct], ...]}]}
 * with means over the seeds.  --plot draws allocation against arrived
 * workload for the policies as an SVG.
 */
#include <errno.h>
#include <stddef.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "cnlab/errors.h"
#include "sim/fgd.h"
#include "sim/plot.h"
#include "sim/replay.h"

#define MAX_POLICIES 16
#define MAX_SEEDS    1000

static void usage(FILE *f)
{
	fprintf(
	    f,
	    "usage: cnlab-sim fgd --trace DIR --pods NAME --policy P[,P...]\n"
	    "                     [--seeds A-B|A,B,...] [--tune X] [--json]"
	    " [--plot FILE.svg]\n"
	    "                     [--set w_pack=X,w_frag=Y,w_order=Z,"
	    "order_multi=F]\n"
	    "       cnlab-sim replay --trace DIR --pods NAME [--policy P]"
	    " [--teams N]\n"
	    "                     [--arrival-scale X] [--copies K] [--json]"
	    " [--csv FILE] [--plot FILE.svg]\n"
	    "                     [--burst none|stall|forecast]"
	    " [--burst-threshold F] [--cloud-gpu-price P]\n"
	    "                     [--cloud-gpus N] [--cloud-boot S]"
	    " [--cloud-max N]\n"
	    "policies:");
	for (const struct cnl_policy_ops *const *p = cnl_policy_list(); *p; p++)
		fprintf(f, " %s", (*p)->name);
	fprintf(f, "\n");
}

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* "42-51" or "1,5,9" or "7". */
static int parse_seeds(const char *s, uint64_t *out, int *n)
{
	char *end;

	*n = 0;
	while (*s) {
		errno = 0;
		unsigned long long a = strtoull(s, &end, 10);
		if (end == s || errno)
			return -1;
		unsigned long long b = a;
		s = end;
		if (*s == '-') {
			b = strtoull(s + 1, &end, 10);
			if (end == s + 1 || errno || b < a ||
			    b - a >= MAX_SEEDS)
				return -1;
			s = end;
		}
		for (unsigned long long x = a; x <= b; x++) {
			if (*n >= MAX_SEEDS)
				return -1;
			out[(*n)++] = x;
		}
		if (*s == ',')
			s++;
		else if (*s)
			return -1;
	}
	return *n > 0 ? 0 : -1;
}

static int parse_policies(char *s, const char **out, int *n)
{
	*n = 0;
	for (char *tok = strtok(s, ","); tok; tok = strtok(NULL, ",")) {
		const struct cnl_policy_ops *p = cnl_policy_find(tok);
		if (!p || *n >= MAX_POLICIES) {
			fprintf(stderr, "cnlab-sim: unknown policy \"%s\"\n",
			        tok);
			return -1;
		}
		out[(*n)++] = p->name;
	}
	return *n > 0 ? 0 : -1;
}

/* --set w_pack=1,w_frag=100: the policy weights of the configuration. */
static int set_weights(struct cnl_sched_config *cfg, const char *spec)
{
	static const struct {
		const char *name;
		size_t off;
	} keys[] = {
	    {"w_pack", offsetof(struct cnl_sched_config, w_pack)},
	    {"w_frag", offsetof(struct cnl_sched_config, w_frag)},
	    {"w_locality", offsetof(struct cnl_sched_config, w_locality)},
	    {"w_network", offsetof(struct cnl_sched_config, w_network)},
	    {"w_order", offsetof(struct cnl_sched_config, w_order)},
	    {"order_multi", offsetof(struct cnl_sched_config, order_multi)},
	};
	char buf[512];
	snprintf(buf, sizeof(buf), "%s", spec);
	for (char *tok = strtok(buf, ","); tok; tok = strtok(NULL, ",")) {
		char *eq = strchr(tok, '='), *end;
		size_t k;
		if (!eq) {
			fprintf(stderr,
			        "cnlab-sim: --set: \"%s\" is not "
			        "key=value\n",
			        tok);
			return -1;
		}
		*eq = '\0';
		for (k = 0; k < sizeof(keys) / sizeof(keys[0]); k++)
			if (!strcmp(keys[k].name, tok))
				break;
		double v = strtod(eq + 1, &end);
		if (k == sizeof(keys) / sizeof(keys[0]) || *end || !(v >= 0)) {
			fprintf(stderr, "cnlab-sim: --set: bad \"%s\"\n", tok);
			return -1;
		}
		memcpy((char *)cfg + keys[k].off, &v, sizeof(v));
	}
	return 0;
}

/* Options both modes take, and the trace they name. */
struct common {
	const char *trace, *pods, *plot;
	bool json;
};

/* Walk argv: "--json" or "--name value" pairs.  Each pair is handed to
 * `mode_opt`, after the common ones are taken; it returns 0, 2 after its
 * own message, or -1 for an option it does not know.  Returns 0, or 2
 * after a message. */
static int each_option(int argc, char **argv, struct common *co,
                       int (*mode_opt)(void *ctx, const char *a,
                                       const char *val),
                       void *ctx)
{
	for (int i = 0; i < argc; i++) {
		const char *a = argv[i];
		const char *val = i + 1 < argc ? argv[i + 1] : NULL;
		if (!strcmp(a, "--json")) {
			co->json = true;
			continue;
		}
		if (!val || strncmp(a, "--", 2)) {
			fprintf(stderr, "cnlab-sim: unexpected \"%s\"\n", a);
			usage(stderr);
			return 2;
		}
		i++;
		if (!strcmp(a, "--trace"))
			co->trace = val;
		else if (!strcmp(a, "--pods"))
			co->pods = val;
		else if (!strcmp(a, "--plot"))
			co->plot = val;
		else {
			int r = mode_opt(ctx, a, val);
			if (r < 0) {
				fprintf(stderr,
				        "cnlab-sim: unknown option \"%s\"\n",
				        a);
				usage(stderr);
				return 2;
			}
			if (r)
				return r;
		}
	}
	return 0;
}

/* Load the openb node list and the pod list `pods` of the trace. */
static int load_world(const struct common *co, struct cnl_fgd_world *w,
                      char *path_pods, size_t plen)
{
	char path_nodes[4096], err[1024];

	snprintf(path_nodes, sizeof(path_nodes),
	         "%s/csv/openb_node_list_gpu_node.csv", co->trace);
	snprintf(path_pods, plen, "%s/csv/openb_pod_list_%s.csv", co->trace,
	         co->pods);
	if (cnl_fgd_world_load(w, path_nodes, path_pods, err, sizeof(err)) <
	    0) {
		fprintf(stderr, "cnlab-sim: %s\n", err);
		return -1;
	}
	return 0;
}

struct summary {
	const char *policy;
	int seeds;
	double alloc, frag90, failed, seconds;
	double curve[CNL_FGD_CURVE_MAX], frag_curve[CNL_FGD_CURVE_MAX];
	int curve_n[CNL_FGD_CURVE_MAX];
};

struct fgd_opts {
	char *policies;
	uint64_t *seeds;
	int n_seeds;
	double tune;
	struct cnl_sched_config cfg;
};

static int fgd_opt(void *ctx, const char *a, const char *val)
{
	struct fgd_opts *o = ctx;
	char *end;

	if (!strcmp(a, "--policy")) {
		o->policies = (char *)val;
	} else if (!strcmp(a, "--set")) {
		if (set_weights(&o->cfg, val) < 0)
			return 2;
	} else if (!strcmp(a, "--seeds")) {
		if (parse_seeds(val, o->seeds, &o->n_seeds) < 0) {
			fprintf(stderr, "cnlab-sim: --seeds: bad list \"%s\"\n",
			        val);
			return 2;
		}
	} else if (!strcmp(a, "--tune")) {
		o->tune = strtod(val, &end);
		if (*end || !(o->tune > 0 && o->tune <= 10)) {
			fprintf(stderr,
			        "cnlab-sim: --tune: not a number in (0, 10]: "
			        "\"%s\"\n",
			        val);
			return 2;
		}
	} else {
		return -1; /* not an option of this mode */
	}
	return 0;
}

static int cmd_fgd(int argc, char **argv)
{
	static uint64_t seeds[MAX_SEEDS] = {42};
	struct fgd_opts opt = {.seeds = seeds, .n_seeds = 1, .tune = 1.3};
	struct common co = {0};
	const char *pol[MAX_POLICIES];
	char path_pods[4096], err[1024];
	int n_pol = 0, r;

	cnl_fgd_config_default(&opt.cfg);
	if ((r = each_option(argc, argv, &co, fgd_opt, &opt)) != 0)
		return r;
	if (!co.trace || !co.pods || !opt.policies) {
		fprintf(stderr, "cnlab-sim: fgd needs --trace, --pods and "
		                "--policy\n");
		usage(stderr);
		return 2;
	}
	if (parse_policies(opt.policies, pol, &n_pol) < 0)
		return 2;
	const char *trace = co.trace, *pods = co.pods, *plot = co.plot;
	bool json = co.json;
	int n_seeds = opt.n_seeds;
	double tune = opt.tune;
	struct cnl_sched_config cfg = opt.cfg;
	struct cnl_fgd_world w;
	if (load_world(&co, &w, path_pods, sizeof(path_pods)) < 0)
		return 1;
	struct summary *sum = calloc((size_t)n_pol, sizeof(*sum));
	for (int p = 0; p < n_pol; p++) {
		sum[p].policy = pol[p];
		sum[p].seeds = n_seeds;
		for (int k = 0; k < n_seeds; k++) {
			struct cnl_fgd_result res;
			double t0 = now_s();
			r = cnl_fgd_run_cfg(&w, pol[p], seeds[k], tune, &cfg,
			                    &res);
			double dt = now_s() - t0;
			if (r < 0) {
				fprintf(stderr,
				        "cnlab-sim: %s, seed %llu: %s\n",
				        pol[p], (unsigned long long)seeds[k],
				        cnl_strerror(r));
				free(sum);
				cnl_fgd_world_done(&w);
				return 1;
			}
			sum[p].alloc += res.alloc_pct / n_seeds;
			sum[p].frag90 += res.frag_pct_90 / n_seeds;
			sum[p].failed += (double)res.failed / n_seeds;
			sum[p].seconds += dt;
			for (int q = 0; q < CNL_FGD_CURVE_MAX; q++)
				if (res.curve[q] >= 0) {
					sum[p].curve[q] += res.curve[q];
					sum[p].frag_curve[q] +=
					    res.frag_curve[q];
					sum[p].curve_n[q]++;
				}
		}
		for (int q = 0; q < CNL_FGD_CURVE_MAX; q++)
			if (sum[p].curve_n[q]) {
				sum[p].curve[q] /= sum[p].curve_n[q];
				sum[p].frag_curve[q] /= sum[p].curve_n[q];
			}
	}
	if (json) {
		json_t *o = json_object(), *arr = json_array();
		json_object_set_new(o, "trace", json_string(trace));
		json_object_set_new(o, "pods", json_string(pods));
		json_object_set_new(o, "tune", json_real(tune));
		json_object_set_new(o, "nodes",
		                    json_integer((json_int_t)w.n_nodes));
		json_object_set_new(o, "gpus", json_integer(w.gpus));
		for (int p = 0; p < n_pol; p++) {
			json_t *e = json_object(), *curve = json_array();
			json_t *fcurve = json_array();
			json_t *sd = json_array();
			for (int k = 0; k < n_seeds; k++)
				json_array_append_new(
				    sd, json_integer((json_int_t)seeds[k]));
			for (int q = 0; q < CNL_FGD_CURVE_MAX; q++)
				if (sum[p].curve_n[q] == n_seeds) {
					json_t *pt = json_array();
					json_array_append_new(pt,
					                      json_integer(q));
					json_array_append_new(
					    pt, json_real(sum[p].curve[q]));
					json_array_append_new(curve, pt);
					pt = json_array();
					json_array_append_new(pt,
					                      json_integer(q));
					json_array_append_new(
					    pt,
					    json_real(sum[p].frag_curve[q]));
					json_array_append_new(fcurve, pt);
				}
			json_object_set_new(e, "policy",
			                    json_string(sum[p].policy));
			json_object_set_new(e, "seeds", sd);
			json_object_set_new(e, "alloc_pct_at_end",
			                    json_real(sum[p].alloc));
			json_object_set_new(e, "frag_pct_at_90",
			                    json_real(sum[p].frag90));
			json_object_set_new(e, "failed_pods",
			                    json_real(sum[p].failed));
			json_object_set_new(e, "seconds",
			                    json_real(sum[p].seconds));
			json_object_set_new(e, "curve", curve);
			json_object_set_new(e, "frag_curve", fcurve);
			json_array_append_new(arr, e);
		}
		json_object_set_new(o, "results", arr);
		char *text = json_dumps(o, JSON_INDENT(0) | JSON_COMPACT);
		printf("%s\n", text);
		free(text);
		json_decref(o);
	} else {
		printf("trace %s, pods %s: %zu nodes, %lld GPUs, %zu pods, "
		       "tune %.2f, %d seed(s); typical tasks: %d types "
		       "covering %.1f%% of pods\n\n",
		       trace, pods, w.n_nodes, (long long)w.gpus, w.n_pods,
		       tune, n_seeds, w.mix.n, 100 * w.mix_coverage);
		printf("%-14s %12s %12s %12s %10s\n", "policy", "alloc % end",
		       "frag % @90", "failed pods", "seconds");
		for (int p = 0; p < n_pol; p++)
			printf("%-14s %12.2f %12.2f %12.1f %10.2f\n",
			       sum[p].policy, sum[p].alloc, sum[p].frag90,
			       sum[p].failed, sum[p].seconds);
	}
	if (plot) {
		struct cnl_plot_series ser[MAX_POLICIES];
		for (int p = 0; p < n_pol; p++) {
			ser[p].name = sum[p].policy;
			ser[p].n = 0;
			for (int q = 0; q < CNL_FGD_CURVE_MAX; q++)
				if (sum[p].curve_n[q] == n_seeds) {
					ser[p].x[ser[p].n] = q;
					ser[p].y[ser[p].n++] = sum[p].curve[q];
				}
		}
		char title[256];
		snprintf(title, sizeof(title),
		         "GPU allocation vs. arrived workload (%s, tune %.2f, "
		         "%d seeds)",
		         pods, tune, n_seeds);
		if (cnl_plot_svg(plot, title,
		                 "arrived GPU demand (% of capacity)",
		                 "allocated GPUs (% of capacity)", ser, n_pol,
		                 err, sizeof(err)) < 0) {
			fprintf(stderr, "cnlab-sim: %s\n", err);
			free(sum);
			cnl_fgd_world_done(&w);
			return 1;
		}
	}
	free(sum);
	cnl_fgd_world_done(&w);
	return 0;
}

struct replay_opts {
	struct cnl_replay_config rc;
	const char *csv;
};

static int replay_opt(void *ctx, const char *a, const char *val)
{
	struct replay_opts *o = ctx;
	char *end;

	if (!strcmp(a, "--csv")) {
		o->csv = val;
	} else if (!strcmp(a, "--policy")) {
		const struct cnl_policy_ops *p = cnl_policy_find(val);
		if (!p) {
			fprintf(stderr, "cnlab-sim: unknown policy \"%s\"\n",
			        val);
			return 2;
		}
		o->rc.policy = p->name;
	} else if (!strcmp(a, "--teams")) {
		long v = strtol(val, &end, 10);
		if (*end || v < 1 || v > 64) {
			fprintf(stderr,
			        "cnlab-sim: --teams: not a number in 1..64: "
			        "\"%s\"\n",
			        val);
			return 2;
		}
		o->rc.teams = (int)v;
	} else if (!strcmp(a, "--copies")) {
		long v = strtol(val, &end, 10);
		if (*end || v < 1 || v > 16) {
			fprintf(stderr,
			        "cnlab-sim: --copies: not a number in 1..16: "
			        "\"%s\"\n",
			        val);
			return 2;
		}
		o->rc.copies = (int)v;
	} else if (!strcmp(a, "--burst")) {
		if (!strcmp(val, "none"))
			o->rc.burst = CNL_BURST_NONE;
		else if (!strcmp(val, "stall"))
			o->rc.burst = CNL_BURST_STALL;
		else if (!strcmp(val, "forecast"))
			o->rc.burst = CNL_BURST_FORECAST;
		else {
			fprintf(stderr,
			        "cnlab-sim: --burst: none, stall or forecast, "
			        "not \"%s\"\n",
			        val);
			return 2;
		}
	} else if (!strcmp(a, "--burst-threshold") ||
	           !strcmp(a, "--cloud-gpu-price")) {
		double v = strtod(val, &end);
		bool th = !strcmp(a, "--burst-threshold");

		if (*end || !(v > 0) || (th && v > 1) || !(v < 1e9)) {
			fprintf(stderr,
			        "cnlab-sim: %s: not a number in %s: "
			        "\"%s\"\n",
			        a, th ? "(0, 1]" : "(0, 1e9)", val);
			return 2;
		}
		if (th)
			o->rc.burst_threshold = v;
		else
			o->rc.cloud_gpu_price = v;
	} else if (!strcmp(a, "--cloud-gpus") || !strcmp(a, "--cloud-boot") ||
	           !strcmp(a, "--cloud-max")) {
		long v = strtol(val, &end, 10);
		long max = !strcmp(a, "--cloud-gpus")   ? 16
		           : !strcmp(a, "--cloud-boot") ? 86400
		                                        : 4096;

		if (*end || v < 1 || v > max) {
			fprintf(
			    stderr,
			    "cnlab-sim: %s: not a number in 1..%ld: \"%s\"\n",
			    a, max, val);
			return 2;
		}
		if (!strcmp(a, "--cloud-gpus"))
			o->rc.cloud_gpus = (int)v;
		else if (!strcmp(a, "--cloud-boot"))
			o->rc.cloud_boot_s = v;
		else
			o->rc.cloud_max = (int)v;
	} else if (!strcmp(a, "--arrival-scale")) {
		o->rc.arrival_scale = strtod(val, &end);
		if (*end || !(o->rc.arrival_scale > 0)) {
			fprintf(stderr,
			        "cnlab-sim: --arrival-scale: not a positive "
			        "number: \"%s\"\n",
			        val);
			return 2;
		}
	} else {
		return -1; /* not an option of this mode */
	}
	return 0;
}

static int cmd_replay(int argc, char **argv)
{
	struct replay_opts opt = {.rc = {.policy = "cnlab",
	                                 .teams = 8,
	                                 .arrival_scale = 1.0,
	                                 .copies = 1}};
	struct common co = {0};
	char path_pods[4096], err[1024];
	int r;

	if ((r = each_option(argc, argv, &co, replay_opt, &opt)) != 0)
		return r;
	if (!co.trace || !co.pods) {
		fprintf(stderr, "cnlab-sim: replay needs --trace and --pods\n");
		usage(stderr);
		return 2;
	}
	const char *trace = co.trace, *pods = co.pods, *plot = co.plot;
	const char *csv = opt.csv;
	bool json = co.json;
	struct cnl_replay_config rc = opt.rc;
	struct cnl_fgd_world w;
	if (load_world(&co, &w, path_pods, sizeof(path_pods)) < 0)
		return 1;
	FILE *cf = NULL;
	if (csv && !(cf = fopen(csv, "w"))) {
		fprintf(stderr, "cnlab-sim: %s: %s\n", csv, strerror(errno));
		cnl_fgd_world_done(&w);
		return 1;
	}
	rc.csv = cf;
	struct cnl_replay_result res;
	double t0 = now_s();
	r = cnl_replay_run(&w, &rc, &res);
	double dt = now_s() - t0;
	if (cf && fclose(cf) != 0 && r == 0) {
		fprintf(stderr, "cnlab-sim: %s: %s\n", csv, strerror(errno));
		r = -EIO;
	}
	if (r < 0) {
		fprintf(stderr, "cnlab-sim: replay of %s: %s\n", path_pods,
		        r == -CNL_EPARSE ? "the pod list carries no times"
		                         : cnl_strerror(r));
		cnl_fgd_world_done(&w);
		return 1;
	}
	if (json) {
		json_t *o = json_object();
		json_object_set_new(o, "trace", json_string(trace));
		json_object_set_new(o, "pods", json_string(pods));
		json_object_set_new(o, "policy", json_string(rc.policy));
		json_object_set_new(o, "teams", json_integer(rc.teams));
		json_object_set_new(o, "copies", json_integer(rc.copies));
		json_object_set_new(o, "arrival_scale",
		                    json_real(rc.arrival_scale));
		json_object_set_new(o, "pods_total",
		                    json_integer((json_int_t)res.pods));
		json_object_set_new(o, "started",
		                    json_integer((json_int_t)res.started));
		json_object_set_new(
		    o, "never_started",
		    json_integer((json_int_t)res.never_started));
		json_object_set_new(o, "preemptions",
		                    json_integer((json_int_t)res.preemptions));
		json_object_set_new(o, "cycles",
		                    json_integer((json_int_t)res.cycles));
		json_object_set_new(o, "wait_mean_s", json_real(res.wait_mean));
		json_object_set_new(o, "wait_p50_s", json_real(res.wait_p50));
		json_object_set_new(o, "wait_p95_s", json_real(res.wait_p95));
		json_object_set_new(o, "wait_p99_s", json_real(res.wait_p99));
		json_object_set_new(o, "waited_share",
		                    json_real(res.waited_share));
		json_object_set_new(o, "jain_fairness", json_real(res.jain));
		json_object_set_new(o, "alloc_mean_pct",
		                    json_real(res.alloc_mean));
		json_object_set_new(o, "alloc_peak_pct",
		                    json_real(res.alloc_peak));
		json_object_set_new(o, "lost_gpu_hours",
		                    json_real(res.lost_gpu_hours));
		json_object_set_new(o, "span_s", json_integer(res.span));
		json_object_set_new(o, "forecast_mae", json_real(res.fc_mae));
		json_object_set_new(o, "forecast_p95", json_real(res.fc_p95));
		json_object_set_new(o, "naive_mae", json_real(res.naive_mae));
		json_object_set_new(o, "naive_p95", json_real(res.naive_p95));
		json_object_set_new(o, "forecast_scored",
		                    json_integer((json_int_t)res.fc_scored));
		json_object_set_new(
		    o, "burst",
		    json_string(rc.burst == CNL_BURST_STALL      ? "stall"
		                : rc.burst == CNL_BURST_FORECAST ? "forecast"
		                                                 : "none"));
		json_object_set_new(
		    o, "cloud_launched",
		    json_integer((json_int_t)res.cloud_launched));
		json_object_set_new(o, "cloud_gpu_hours",
		                    json_real(res.cloud_gpu_hours));
		json_object_set_new(o, "cloud_cost", json_real(res.cloud_cost));
		json_object_set_new(o, "cloud_only_cost",
		                    json_real(res.cloud_only_cost));
		json_object_set_new(o, "seconds", json_real(dt));
		char *text = json_dumps(o, JSON_COMPACT);
		printf("%s\n", text);
		free(text);
		json_decref(o);
	} else {
		printf(
		    "replay of %s with %s, %d teams: %zu pods over %.1f days, "
		    "%zu scheduling cycles in %.1f s\n",
		    pods, rc.policy, rc.teams, res.pods,
		    (double)res.span / 86400, res.cycles, dt);
		printf("  started %zu, never started %zu, pre-emptions %zu "
		       "(%.1f GPU-hours lost)\n",
		       res.started, res.never_started, res.preemptions,
		       res.lost_gpu_hours);
		printf("  queueing delay: mean %.0f s, p50 %.0f s, p95 %.0f s, "
		       "p99 %.0f s; %.1f%% of pods waited\n",
		       res.wait_mean, res.wait_p50, res.wait_p95, res.wait_p99,
		       100 * res.waited_share);
		printf("  GPU allocation while pods arrive: mean %.1f%%, peak "
		       "%.1f%%; Jain's fairness over teams: %.3f\n",
		       res.alloc_mean, res.alloc_peak, res.jain);
		printf("  90 s demand forecast: mean absolute error %.4f, p95 "
		       "%.4f of capacity (naive \"as now\": %.4f, %.4f; %zu "
		       "forecasts)\n",
		       res.fc_mae, res.fc_p95, res.naive_mae, res.naive_p95,
		       res.fc_scored);
		if (rc.burst != CNL_BURST_NONE)
			printf("  cloud burst (%s): %zu instances, %.1f "
			       "GPU-hours, "
			       "cost %.0f = %.1f%% of the cloud-only %.0f\n",
			       rc.burst == CNL_BURST_STALL ? "at the stall"
			                                   : "at the forecast",
			       res.cloud_launched, res.cloud_gpu_hours,
			       res.cloud_cost,
			       res.cloud_only_cost > 0
			           ? 100 * res.cloud_cost / res.cloud_only_cost
			           : 0,
			       res.cloud_only_cost);
	}
	if (plot) {
		static struct cnl_plot_series ser[2];
		int stride = (int)(res.n_points / CNL_PLOT_MAX_POINTS) + 1;
		ser[0].name = "GPU allocated %";
		ser[0].n = 0;
		for (size_t i = 0;
		     i < res.n_points && ser[0].n < CNL_PLOT_MAX_POINTS;
		     i += (size_t)stride) {
			ser[0].x[ser[0].n] =
			    (double)(res.points[i].t - res.points[0].t) / 86400;
			ser[0].y[ser[0].n++] = res.points[i].alloc_pct;
		}
		char title[256];
		snprintf(title, sizeof(title),
		         "GPU allocation over time (%s, %s)", pods, rc.policy);
		if (cnl_plot_svg(plot, title, "days", "GPUs allocated (%)", ser,
		                 1, err, sizeof(err)) < 0) {
			fprintf(stderr, "cnlab-sim: %s\n", err);
			free(res.points);
			cnl_fgd_world_done(&w);
			return 1;
		}
	}
	free(res.points);
	cnl_fgd_world_done(&w);
	return 0;
}

int main(int argc, char **argv)
{
	if (argc < 2) {
		usage(stderr);
		return 2;
	}
	if (!strcmp(argv[1], "fgd"))
		return cmd_fgd(argc - 2, argv + 2);
	if (!strcmp(argv[1], "replay"))
		return cmd_replay(argc - 2, argv + 2);
	if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
		usage(stdout);
		return 0;
	}
	fprintf(stderr, "cnlab-sim: unknown mode \"%s\"\n", argv[1]);
	usage(stderr);
	return 2;
}
