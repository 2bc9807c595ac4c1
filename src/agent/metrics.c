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
 *
/metrics also has the node's GPUs under the names, types and labels of
 * NVIDIA's DCGM exporter where the meaning is the same, so dashboards and
 * alerts written for it work on a CNLab node: DCGM_FI_DEV_GPU_UTIL,
 * _MEM_COPY_UTIL, _FB_USED, _FB_FREE, _FB_TOTAL (MiB, as DCGM), _GPU_TEMP,
 * _POWER_USAGE (W), _SM_CLOCK, each labelled gpu, UUID, device, modelName
 * and Hostname (the node's name), and each present only where the provider
 * gives the value (gpu.h: cnl_gpus_telemetry).  DCGM has no 1% slices:
 * CNLab's own cnlab_slice_* families carry a slice's VRAM use and limit,
 * compute share and measured SM use, labelled project, user, job, gpu,
 * UUID, Hostname, and for a slice in a MIG instance GPU_I_PROFILE and
 * GPU_I_ID.  A GPU in MIG mode also has a series per MIG instance of the
 * families NVML gives on a MIG device's handle (FB_USED, _FREE, _TOTAL;
 * GPU_UTIL where NVML gives it, which it does not today), with the GPU's
 * labels plus GPU_I_PROFILE (the catalog profile) and GPU_I_ID, the
 * driver's GPU instance ID (gpu.h: cnl_gpus_mig_telemetry), never a slot.
 * docs/metrics.md lists them all.
 */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agent/agent-internal.h"
#include "common/log.h"
#include "common/time.h"
#include "common/util.h"
#include "net/metrics.h"
#include "net/otel.h"
#include "shim/region.h"

/* The DCGM families: name, help, and the telemetry field. */
static const struct {
	const char *name, *help;
	size_t off;
	double scale;
} dcgm[] = {
#define F(f) offsetof(struct cnl_gpu_telemetry, f)
    {"DCGM_FI_DEV_GPU_UTIL", "GPU utilization (in %).", F(util_pct), 1},
    {"DCGM_FI_DEV_MEM_COPY_UTIL", "Memory utilization (in %).", F(mem_util_pct),
     1},
    {"DCGM_FI_DEV_FB_FREE", "Framebuffer memory free (in MiB).", F(fb_free_mib),
     1},
    {"DCGM_FI_DEV_FB_USED", "Framebuffer memory used (in MiB).", F(fb_used_mib),
     1},
    {"DCGM_FI_DEV_FB_TOTAL", "Framebuffer memory total (in MiB).",
     F(fb_total_mib), 1},
    {"DCGM_FI_DEV_GPU_TEMP", "GPU temperature (in C).", F(temp_c), 1},
    {"DCGM_FI_DEV_POWER_USAGE", "Power draw (in W).", F(power_mw), 1e-3},
    {"DCGM_FI_DEV_SM_CLOCK", "SM clock frequency (in MHz).", F(sm_clock_mhz),
     1},
#undef F
};

/* The DCGM families that a MIG device has too (its GPU instance's
 * memory and, where NVML gives it, utilization), by name. */
static int64_t mig_value(const char *name,
                         const struct cnl_gpu_mig_telemetry *m)
{
	if (strcmp(name, "DCGM_FI_DEV_FB_FREE") == 0)
		return m->fb_free_mib;
	if (strcmp(name, "DCGM_FI_DEV_FB_USED") == 0)
		return m->fb_used_mib;
	if (strcmp(name, "DCGM_FI_DEV_FB_TOTAL") == 0)
		return m->fb_total_mib;
	if (strcmp(name, "DCGM_FI_DEV_GPU_UTIL") == 0)
		return m->util_pct;
	return -1;
}

/* Per GPU, and per MIG instance with GPU_I_PROFILE and GPU_I_ID (the
 * driver's GPU instance ID) as the DCGM exporter labels them. */
static void dcgm_families(struct cnl_agent *a, struct cnl_metrics_buf *b,
                          const struct cnl_gpu_dev *devs, int n,
                          const struct cnl_gpu_mig_telemetry *mig,
                          const int *n_mig)
{
	struct cnl_gpu_telemetry t[CNL_GPU_MAX];
	bool amd = strcmp(cnl_gpus_vendor(a->gpus), "amd") == 0;
	char host[2 * CNL_NAME_MAX + 1], model[2 * sizeof(devs->model) + 1];
	char prof[2 * CNL_NAME_MAX + 1];

	cnl_mb_escape(a->cfg.name ? a->cfg.name : "", host, sizeof(host));
	for (int g = 0; g < n && g < CNL_GPU_MAX; g++)
		cnl_gpus_telemetry(a->gpus, g, &t[g]);
	for (size_t f = 0; f < CNL_ARRAY_SIZE(dcgm); f++) {
		bool head = false;

		for (int g = 0; g < n && g < CNL_GPU_MAX; g++) {
			int64_t v;

			memcpy(&v, (const char *)&t[g] + dcgm[f].off,
			       sizeof(v));
			if (v < 0)
				continue;
			if (!head)
				cnl_mb_family(b, dcgm[f].name, "gauge",
				              dcgm[f].help);
			head = true;
			cnl_mb_printf(
			    b,
			    "%s{gpu=\"%d\",UUID=\"%s\",device=\"%s%d\","
			    "modelName=\"%s\",Hostname=\"%s\"} %g\n",
			    dcgm[f].name, g, devs[g].uuid,
			    amd ? "card" : "nvidia", g,
			    cnl_mb_escape(devs[g].model, model, sizeof(model)),
			    host, (double)v * dcgm[f].scale);
		}
		for (int g = 0; g < n && g < CNL_GPU_MAX; g++)
			for (int i = 0; i < n_mig[g]; i++) {
				const struct cnl_gpu_mig_telemetry *m =
				    &mig[g * CNL_MIG_COMPUTE_SLICES + i];
				int64_t v = mig_value(dcgm[f].name, m);

				if (v < 0)
					continue;
				if (!head)
					cnl_mb_family(b, dcgm[f].name, "gauge",
					              dcgm[f].help);
				head = true;
				cnl_mb_printf(
				    b,
				    "%s{gpu=\"%d\",UUID=\"%s\",device=\"nvidia%"
				    "d\","
				    "modelName=\"%s\",Hostname=\"%s\","
				    "GPU_I_PROFILE=\"%s\",GPU_I_ID=\"%d\"} "
				    "%g\n",
				    dcgm[f].name, g, devs[g].uuid, g,
				    cnl_mb_escape(devs[g].model, model,
				                  sizeof(model)),
				    host,
				    cnl_mb_escape(m->profile, prof,
				                  sizeof(prof)),
				    m->gi_id, (double)v * dcgm[f].scale);
			}
	}
}

/* A slice's labels: project, user, job, gpu, UUID, Hostname, and its MIG
 * instance's. */
static void slice_labels(struct cnl_agent *a, const struct wk *w,
                         const struct cnl_gpu_dev *devs, int n,
                         const struct cnl_gpu_mig_telemetry *mig,
                         const int *n_mig, char *out, size_t len)
{
	char p[2 * sizeof(w->project) + 1], u[2 * sizeof(w->user) + 1];
	char h[2 * CNL_NAME_MAX + 1];
	size_t l;

	l = (size_t)snprintf(
	    out, len,
	    "project=\"%s\",user=\"%s\",job=\"%s\",gpu=\"%d\",UUID=\"%s\","
	    "Hostname=\"%s\"",
	    cnl_mb_escape(w->project, p, sizeof(p)),
	    cnl_mb_escape(w->user, u, sizeof(u)), w->id, w->gpu,
	    w->gpu >= 0 && w->gpu < n ? devs[w->gpu].uuid : "",
	    cnl_mb_escape(a->cfg.name ? a->cfg.name : "", h, sizeof(h)));
	if (!w->mig_profile[0] || l >= len)
		return;
	/* The driver's GPU instance ID, found by the MIG device's UUID;
	 * none without a driver (the fake pool): GPU_I_ID is then left
	 * out rather than a slot put in its place. */
	l += (size_t)snprintf(out + l, len - l, ",GPU_I_PROFILE=\"%s\"",
	                      w->mig_profile);
	for (int i = 0;
	     w->gpu >= 0 && w->gpu < n && i < n_mig[w->gpu] && l < len; i++) {
		const struct cnl_gpu_mig_telemetry *m =
		    &mig[w->gpu * CNL_MIG_COMPUTE_SLICES + i];

		if (w->mig_uuid[0] && strcmp(m->uuid, w->mig_uuid) == 0) {
			snprintf(out + l, len - l, ",GPU_I_ID=\"%d\"",
			         m->gi_id);
			return;
		}
	}
}

/* The slices' families, from their shared regions. */
static void slice_families(struct cnl_agent *a, struct cnl_metrics_buf *b,
                           const struct cnl_gpu_dev *devs, int n,
                           const struct cnl_gpu_mig_telemetry *mig,
                           const int *n_mig)
{
	static const struct {
		const char *name, *help;
	} fam[] = {
	    {"cnlab_slice_vram_used_bytes",
	     "Device memory a slice's processes hold (the shim's "
	     "accounting)."},
	    {"cnlab_slice_vram_limit_bytes",
	     "A slice's VRAM quota (absent for whole GPUs: no quota)."},
	    {"cnlab_slice_compute_share_ratio",
	     "A slice's compute share of its GPU (1 for whole GPUs)."},
	    {"cnlab_slice_sm_util_ratio",
	     "Fraction of wall time a slice's kernels ran on its GPU since "
	     "the previous scrape (the shim's ledger)."},
	};
	struct {
		bool ok;
		struct cnl_region_stat st;
		unsigned share;
		double util;
	} *v = cnl_xcalloc(a->n_wk ? a->n_wk : 1, sizeof(*v));
	char labels[1024];
	int64_t now = cnl_time_mono_ns();

	for (size_t i = 0; i < a->n_wk; i++) {
		struct wk *w = a->wk[i];
		struct cnl_region_handle h;
		uint64_t busy = 0;

		if (w->gpu < 0 || cnl_region_map(w->region, &h) < 0)
			continue;
		v[i].share = h.r->share_pct ? h.r->share_pct : 100;
		v[i].ok = cnl_region_stat(h.r, &v[i].st) == 0;
		cnl_region_unmap(&h);
		if (!v[i].ok)
			continue;
		for (unsigned p = 0; p < v[i].st.nprocs; p++)
			busy += v[i].st.procs[p].busy_ns;
		/* Over the time since the previous scrape; the first one
		 * reads 0. */
		if (w->m_at_ns && now > w->m_at_ns && busy >= w->m_busy_ns)
			w->m_util = (double)(busy - w->m_busy_ns) /
			            (double)(now - w->m_at_ns);
		if (w->m_util > 1)
			w->m_util = 1;
		w->m_busy_ns = busy;
		w->m_at_ns = now;
		v[i].util = w->m_util;
	}
	for (size_t f = 0; f < CNL_ARRAY_SIZE(fam); f++) {
		cnl_mb_family(b, fam[f].name, "gauge", fam[f].help);
		for (size_t i = 0; i < a->n_wk; i++) {
			if (!v[i].ok || (f == 1 && !v[i].st.quota))
				continue;
			slice_labels(a, a->wk[i], devs, n, mig, n_mig, labels,
			             sizeof(labels));
			switch (f) {
			case 0:
				cnl_mb_printf(b, "%s{%s} %llu\n", fam[f].name,
				              labels,
				              (unsigned long long)v[i].st.used);
				break;
			case 1:
				cnl_mb_printf(
				    b, "%s{%s} %llu\n", fam[f].name, labels,
				    (unsigned long long)v[i].st.quota);
				break;
			case 2:
				cnl_mb_printf(b, "%s{%s} %.2f\n", fam[f].name,
				              labels, v[i].share / 100.0);
				break;
			default:
				cnl_mb_printf(b, "%s{%s} %.6f\n", fam[f].name,
				              labels, v[i].util);
			}
		}
	}
	free(v);
}

static void metrics_serve(void *ud, const struct cnl_http_route *route,
                          struct cnl_http_request *req,
                          struct cnl_http_response *resp)
{
	struct cnl_agent *a = ud;
	struct cnl_metrics_buf b = {0};
	const struct cnl_gpu_dev *devs;
	struct cnl_gpu_mig_telemetry *mig;
	int n, n_mig[CNL_GPU_MAX] = {0};

	if (strcmp(route->pattern, "/healthz") == 0) {
		cnl_http_reply(resp, 200, json_pack("{s:s}", "status", "ok"));
		return;
	}
	pthread_mutex_lock(&a->mu);
	n = cnl_gpus_list(a->gpus, &devs);
	if (n > CNL_GPU_MAX)
		n = CNL_GPU_MAX;
	mig = cnl_xcalloc((size_t)(n ? n : 1) * CNL_MIG_COMPUTE_SLICES,
	                  sizeof(*mig));
	for (int g = 0; g < n; g++)
		n_mig[g] = cnl_gpus_mig_telemetry(
		    a->gpus, g, &mig[g * CNL_MIG_COMPUTE_SLICES],
		    CNL_MIG_COMPUTE_SLICES);
	dcgm_families(a, &b, devs, n, mig, n_mig);
	slice_families(a, &b, devs, n, mig, n_mig);
	free(mig);
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
	cnl_mb_family(&b, "cnlab_agent_gpu_audit_kills_total", "counter",
	              "Processes the GPU memory audit killed for using more "
	              "device memory than their slice's quota.");
	cnl_mb_printf(&b, "cnlab_agent_gpu_audit_kills_total %llu\n",
	              (unsigned long long)atomic_load(&a->audit_kills_total));
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
