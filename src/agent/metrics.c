/*
 * metrics.c - the agent's own HTTP endpoints, when cfg.listen is set
 * (agent-internal.h has the map): /healthz, and /metrics in Prometheus
 * text: the blocks of each GPU held by slices, MIG instances, each
 * slice's VRAM and GPU time (read from its shared region, the shim's
 * accounting), and workloads by kind, started and ended.
 *
 * It runs on libmicrohttpd's threads (net/http_server.h) and reads the
 * workload table under the agent's lock; it calls no other file of the
 * daemon.  It never takes a lock a tenant could hold: cnl_region_stat
 * reads a copy of the slice's accounting file and tests its slot locks
 * without waiting (shim/region.h), so a stopped or hostile process of a
 * slice cannot hang or crash /metrics.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agent/agent-internal.h"
#include "common/log.h"
#include "common/util.h"
#include "net/metrics.h"
#include "net/otel.h"
#include "shim/region.h"

static void metrics_serve(void *ud, const struct cnl_http_route *route,
                          struct cnl_http_request *req,
                          struct cnl_http_response *resp)
{
	struct cnl_agent *a = ud;
	struct cnl_metrics_buf b = {0};
	const struct cnl_gpu_dev *devs;
	int n;

	if (strcmp(route->pattern, "/healthz") == 0) {
		cnl_http_reply(resp, 200, json_pack("{s:s}", "status", "ok"));
		return;
	}
	pthread_mutex_lock(&a->mu);
	n = cnl_gpus_list(a->gpus, &devs);
	cnl_mb_family(&b, "cnlab_agent_gpu_blocks_allocated", "gauge",
	              "1% blocks of each GPU held by running slices.");
	for (int g = 0; g < n; g++) {
		int64_t blocks = 0;

		for (size_t i = 0; i < a->n_wk; i++) {
			struct cnl_region_handle h;

			if (a->wk[i]->gpu != g ||
			    cnl_region_map(a->wk[i]->region, &h) < 0)
				continue;
			blocks += h.r->share_pct ? h.r->share_pct : 100;
			cnl_region_unmap(&h);
		}
		cnl_mb_printf(&b,
		              "cnlab_agent_gpu_blocks_allocated{gpu=\"%d\","
		              "uuid=\"%s\"} %lld\n",
		              g, devs[g].uuid, (long long)blocks);
	}
	cnl_mb_family(&b, "cnlab_agent_mig_instances", "gauge",
	              "MIG instances created on each GPU.");
	for (int g = 0; g < n; g++)
		cnl_mb_printf(&b, "cnlab_agent_mig_instances{gpu=\"%d\"} %d\n",
		              g, cnl_gpus_mig_count(a->gpus, g));
	cnl_mb_family(&b, "cnlab_agent_slice_vram_bytes", "gauge",
	              "Device memory a slice's processes hold (the shim's "
	              "accounting).");
	for (size_t i = 0; i < a->n_wk; i++) {
		struct cnl_region_handle h;
		struct cnl_region_stat st;

		if (cnl_region_map(a->wk[i]->region, &h) < 0)
			continue;
		if (cnl_region_stat(h.r, &st) == 0)
			cnl_mb_printf(&b,
			              "cnlab_agent_slice_vram_bytes{workload="
			              "\"%s\"} %llu\n",
			              a->wk[i]->id,
			              (unsigned long long)st.used);
		cnl_region_unmap(&h);
	}
	cnl_mb_family(&b, "cnlab_agent_slice_busy_seconds_total", "counter",
	              "GPU time a slice's kernels used (the shim's ledger).");
	for (size_t i = 0; i < a->n_wk; i++) {
		struct cnl_region_handle h;
		struct cnl_region_stat st;
		uint64_t busy = 0;

		if (cnl_region_map(a->wk[i]->region, &h) < 0)
			continue;
		if (cnl_region_stat(h.r, &st) == 0)
			for (unsigned p = 0; p < st.nprocs; p++)
				busy += st.procs[p].busy_ns;
		cnl_region_unmap(&h);
		cnl_mb_printf(&b,
		              "cnlab_agent_slice_busy_seconds_total{workload="
		              "\"%s\"} %.6f\n",
		              a->wk[i]->id, (double)busy / 1e9);
	}
	cnl_mb_family(&b, "cnlab_agent_workloads", "gauge",
	              "Workloads on this node by kind.");
	{
		int jobs = 0, servers = 0;

		for (size_t i = 0; i < a->n_wk; i++)
			a->wk[i]->server ? servers++ : jobs++;
		cnl_mb_printf(&b, "cnlab_agent_workloads{kind=\"job\"} %d\n",
		              jobs);
		cnl_mb_printf(&b, "cnlab_agent_workloads{kind=\"server\"} %d\n",
		              servers);
	}
	cnl_mb_family(&b, "cnlab_agent_workloads_started_total", "counter",
	              "Workloads started since the agent started.");
	cnl_mb_printf(&b, "cnlab_agent_workloads_started_total %llu\n",
	              (unsigned long long)a->started_total);
	cnl_mb_family(&b, "cnlab_agent_workloads_ended_total", "counter",
	              "Workloads ended since the agent started.");
	cnl_mb_printf(&b, "cnlab_agent_workloads_ended_total %llu\n",
	              (unsigned long long)a->ended_total);
	pthread_mutex_unlock(&a->mu);
	cnl_telemetry_metrics(&b);
	resp->status = 200;
	resp->text = b.p ? b.p : cnl_xstrdup("");
	resp->content_type = "text/plain; version=0.0.4; charset=utf-8";
}

static void no_handler(void *call, struct cnl_http_request *req,
                       struct cnl_http_response *resp)
{
}

static const struct cnl_http_route metrics_routes[] = {
    {"GET", "/healthz", CNL_PERM_PUBLIC, NULL, no_handler},
    {"GET", "/metrics", CNL_PERM_PUBLIC, NULL, no_handler},
};

void cnl_agent_metrics_listen(struct cnl_agent *a)
{
	char host[64], err[512], q[600];
	const char *colon;
	struct cnl_http_config hc = {0};

	if (!a->cfg.listen)
		return;
	colon = strrchr(a->cfg.listen, ':');
	if (!colon || (size_t)(colon - a->cfg.listen) >= sizeof(host))
		return;
	memcpy(host, a->cfg.listen, (size_t)(colon - a->cfg.listen));
	host[colon - a->cfg.listen] = '\0';
	hc.host = host;
	hc.port = (uint16_t)strtoul(colon + 1, NULL, 10);
	hc.routes = metrics_routes;
	hc.nroutes = CNL_ARRAY_SIZE(metrics_routes);
	hc.serve = metrics_serve;
	hc.ud = a;
	if (cnl_http_server_new(&hc, &a->metrics, err, sizeof(err)) < 0)
		cnl_log(CNL_LOG_ERROR, "metrics", "err=%s",
		        cnl_log_quote(q, sizeof(q), err));
	else
		cnl_log(CNL_LOG_INFO, "metrics", "listen=%s:%u", host,
		        (unsigned)cnl_http_server_port(a->metrics));
}

unsigned cnl_agent_metrics_port(const struct cnl_agent *a)
{
	return a->metrics ? cnl_http_server_port(a->metrics) : 0;
}
