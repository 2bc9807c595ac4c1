/*
 * api_ops.c - operations: /healthz and /metrics (Prometheus text: the
 * controller's families, quotas, and requests per route).
 */
#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include <openssl/evp.h>
#include <openssl/sha.h>

#include "cnlab/errors.h"
#include "common/id.h"
#include "common/json.h"
#include "common/label.h"
#include "common/log.h"
#include "common/time.h"
#include "common/util.h"
#include "sched/sched.h"
#include "net/otel.h"
#include "server/api-internal.h"
#include "server/auth.h"
#include "server/leader.h"
#include "server/oidc.h"
#include "server/shape.h"

void cnl_api_h_healthz(void *call, struct cnl_http_request *req,
                       struct cnl_http_response *resp)
{
	struct call *c = call;

	/* The all-in-one is a platform only with its node agent: without
	 * it nothing runs, and a load balancer or a script must see so. */
	int health = atomic_load(&c->api->agent_health);
	int64_t epoch = atomic_load(&c->api->leader_epoch);
	json_t *o =
	    json_pack("{s:s}", "status", health == 2 ? "degraded" : "ok");

	if (health)
		json_object_set_new(o, "agent",
		                    json_string(health == 1 ? "up" : "down"));
	/* Several cnlabd over one PostgreSQL: this one leads (a follower's
	 * own listener answers "follower", forward.c). */
	if (epoch > 0) {
		json_object_set_new(
		    o, "store", json_string(cnl_store_backend(c->api->store)));
		json_object_set_new(o, "role", json_string("leader"));
		json_object_set_new(o, "epoch", json_integer(epoch));
		json_object_set_new(
		    o, "store_lag_ms",
		    json_integer(cnl_leader_lag_ms(c->api->leader)));
		/* Its lease not renewed for a whole lease: another may
		 * lead now; a load balancer must look elsewhere. */
		if (!cnl_leader_valid(c->api->leader)) {
			json_object_set_new(o, "status", json_string("unsure"));
			health = 2;
		}
	}
	cnl_http_reply(resp, health == 2 ? 503 : 200, o);
}

bool cnl_api_node_silent(struct cnl_api *api, const char *name, int64_t now)
{
	bool r;

	pthread_mutex_lock(&api->mu);
	r = cnl_ctl_node_silent(api->ctl, name, now);
	pthread_mutex_unlock(&api->mu);
	return r;
}

void cnl_api_agent_health(struct cnl_api *api, bool up)
{
	if (api)
		atomic_store(&api->agent_health, up ? 1 : 2);
}

void cnl_api_set_leader(struct cnl_api *api, struct cnl_leader *leader)
{
	if (!api)
		return;
	api->leader = leader;
	atomic_store(&api->leader_epoch, cnl_leader_epoch(leader));
}

void cnl_api_h_metrics(void *call, struct cnl_http_request *req,
                       struct cnl_http_response *resp)
{
	static const char *const classes[] = {"1xx", "2xx", "3xx", "4xx",
	                                      "5xx"};
	struct call *c = call;
	struct cnl_api *api = c->api;
	struct cnl_metrics_buf b = {0};
	char labels[256];

	pthread_mutex_lock(&api->stats_mu);
	cnl_mb_family(&b, "cnlab_http_requests_total", "counter",
	              "API requests by route and status class.");
	for (size_t i = 0; i < api->nstats; i++)
		for (int k = 0; k < 5; k++)
			if (api->stats[i].by_class[k])
				cnl_mb_printf(
				    &b,
				    "cnlab_http_requests_total{method=\"%s\","
				    "route=\"%s\",code=\"%s\"} %llu\n",
				    api->routes[i].method,
				    api->routes[i].pattern, classes[k],
				    (unsigned long long)api->stats[i]
				        .by_class[k]);
	cnl_mb_family(&b, "cnlab_http_request_duration_seconds", "histogram",
	              "API request latency by route and status class, "
	              "including waits.");
	for (size_t i = 0; i < api->nstats; i++)
		for (int k = 0; k < 5; k++) {
			if (!api->stats[i].latency[k].count)
				continue;
			snprintf(labels, sizeof(labels),
			         "method=\"%s\",route=\"%s\",code=\"%s\"",
			         api->routes[i].method, api->routes[i].pattern,
			         classes[k]);
			cnl_hist_write(&b,
			               "cnlab_http_request_duration_seconds",
			               labels, &api->stats[i].latency[k]);
		}
	pthread_mutex_unlock(&api->stats_mu);
	cnl_mb_family(&b, "cnlab_leader_epoch", "gauge",
	              "The epoch of the leader's lease this cnlabd holds (0: "
	              "a store of one writer); it grows at each takeover.");
	cnl_mb_printf(&b, "cnlab_leader_epoch %lld\n",
	              (long long)atomic_load(&api->leader_epoch));
	cnl_mb_family(&b, "cnlab_leader", "gauge",
	              "1 when this cnlabd leads (a store of one writer: "
	              "always), 0 when it follows or is unsure.");
	cnl_mb_printf(&b, "cnlab_leader %d\n",
	              !api->leader || cnl_leader_valid(api->leader) ? 1 : 0);
	if (api->leader) {
		cnl_mb_family(&b, "cnlab_store_lag_seconds", "gauge",
		              "How old this cnlabd's view of the lease is: "
		              "the leader's last renewal.");
		cnl_mb_printf(&b, "cnlab_store_lag_seconds %.3f\n",
		              (double)cnl_leader_lag_ms(api->leader) / 1000.0);
	}
	cnl_ctl_metrics(api->ctl, &b);
	if (api->burst)
		cnl_burst_metrics(api->burst, &b);
	if (api->federate)
		cnl_federate_metrics(api->federate, &b);
	cnl_api_events_metrics(api, &b);
	cnl_api_dash_metrics(api, &b);
	cnl_api_quota_metrics(c, &b);
	cnl_telemetry_metrics(&b);
	resp->status = 200;
	resp->text = b.p ? b.p : cnl_xstrdup("");
	resp->content_type = "text/plain; version=0.0.4; charset=utf-8";
}
