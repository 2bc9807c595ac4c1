/*
 * rpc.c - the kubelet's two services, Registration and DRAPlugin v1, as
 * gRPC methods (grpc.h) over the plugin (plugin.h): protobuf in and out
 * with protobuf-c's code generated from registration.proto and dra.proto.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agent/dra/grpc.h"
#include "agent/dra/plugin.h"
#include "agent/dra/rpc.h"
#include "common/log.h"
#include "common/util.h"
#include "dra.pb-c.h"
#include "registration.pb-c.h"

typedef K8s__Io__Kubelet__Pkg__Apis__Dra__V1__NodePrepareResourcesRequest
    PrepReq;
typedef K8s__Io__Kubelet__Pkg__Apis__Dra__V1__NodePrepareResourcesResponse
    PrepResp;
typedef K8s__Io__Kubelet__Pkg__Apis__Dra__V1__NodePrepareResourcesResponse__ClaimsEntry
    PrepEntry;
typedef K8s__Io__Kubelet__Pkg__Apis__Dra__V1__NodePrepareResourceResponse
    PrepOne;
typedef K8s__Io__Kubelet__Pkg__Apis__Dra__V1__Device Device;
typedef K8s__Io__Kubelet__Pkg__Apis__Dra__V1__NodeUnprepareResourcesRequest
    UnprepReq;
typedef K8s__Io__Kubelet__Pkg__Apis__Dra__V1__NodeUnprepareResourcesResponse
    UnprepResp;
typedef K8s__Io__Kubelet__Pkg__Apis__Dra__V1__NodeUnprepareResourcesResponse__ClaimsEntry
    UnprepEntry;
typedef K8s__Io__Kubelet__Pkg__Apis__Dra__V1__NodeUnprepareResourceResponse
    UnprepOne;
typedef K8s__Io__Kubelet__Pkg__Apis__Dra__V1__Claim Claim;

#define PB(x) k8s__io__kubelet__pkg__apis__dra__v1__##x

/* A packed message in *resp. */
static int packed(const ProtobufCMessage *m, uint8_t **resp, size_t *len)
{
	*len = protobuf_c_message_get_packed_size(m);
	*resp = cnl_xmalloc(*len ? *len : 1);
	protobuf_c_message_pack(m, *resp);
	return CNL_GRPC_OK;
}

static int get_info(void *ud, const uint8_t *req, size_t len, uint8_t **resp,
                    size_t *resp_len, char *msg, size_t msglen)
{
	const struct cnl_dra_rpc *c = ud;
	Pluginregistration__InfoRequest *in =
	    pluginregistration__info_request__unpack(NULL, len, req);
	Pluginregistration__PluginInfo out =
	    PLUGINREGISTRATION__PLUGIN_INFO__INIT;
	char *versions[] = {(char *)"v1.DRAPlugin"};

	if (!in) {
		snprintf(msg, msglen, "cannot decode InfoRequest");
		return CNL_GRPC_INVALID_ARGUMENT;
	}
	pluginregistration__info_request__free_unpacked(in, NULL);
	out.type = (char *)"DRAPlugin";
	out.name = (char *)cnl_dra_driver(c->dra);
	out.endpoint = (char *)c->endpoint;
	out.n_supported_versions = 1;
	out.supported_versions = versions;
	return packed(&out.base, resp, resp_len);
}

static int notify(void *ud, const uint8_t *req, size_t len, uint8_t **resp,
                  size_t *resp_len, char *msg, size_t msglen)
{
	struct cnl_dra_rpc *c = ud;
	Pluginregistration__RegistrationStatus *in =
	    pluginregistration__registration_status__unpack(NULL, len, req);
	Pluginregistration__RegistrationStatusResponse out =
	    PLUGINREGISTRATION__REGISTRATION_STATUS_RESPONSE__INIT;

	if (!in) {
		snprintf(msg, msglen, "cannot decode RegistrationStatus");
		return CNL_GRPC_INVALID_ARGUMENT;
	}
	c->registered = in->plugin_registered;
	if (in->plugin_registered)
		cnl_log(CNL_LOG_INFO, "registered with the kubelet",
		        "driver=%s", cnl_dra_driver(c->dra));
	else
		cnl_log(CNL_LOG_ERROR, "the kubelet refused the registration",
		        "driver=%s error=\"%.200s\"", cnl_dra_driver(c->dra),
		        in->error ? in->error : "");
	pluginregistration__registration_status__free_unpacked(in, NULL);
	return packed(&out.base, resp, resp_len);
}

/* A claim of the request as the kubelet must send it. */
static bool claim_ok(const Claim *cl, char *msg, size_t msglen)
{
	if (!cl || !cl->uid || !cl->uid[0] || !cl->namespace_ ||
	    !cl->namespace_[0] || !cl->name || !cl->name[0]) {
		snprintf(msg, msglen,
		         "every claim needs namespace, uid and name");
		return false;
	}
	return true;
}

static int prepare(void *ud, const uint8_t *req, size_t len, uint8_t **resp,
                   size_t *resp_len, char *msg, size_t msglen)
{
	struct cnl_dra_rpc *c = ud;
	PrepReq *in =
	    PB(node_prepare_resources_request__unpack)(NULL, len, req);
	PrepResp out =
	    K8S__IO__KUBELET__PKG__APIS__DRA__V1__NODE_PREPARE_RESOURCES_RESPONSE__INIT;
	int code;

	if (!in) {
		snprintf(msg, msglen,
		         "cannot decode NodePrepareResourcesRequest");
		return CNL_GRPC_INVALID_ARGUMENT;
	}
	for (size_t i = 0; i < in->n_claims; i++)
		if (!claim_ok(in->claims[i], msg, msglen)) {
			PB(node_prepare_resources_request__free_unpacked)
			(in, NULL);
			return CNL_GRPC_INVALID_ARGUMENT;
		}
	out.n_claims = in->n_claims;
	out.claims = cnl_xcalloc(in->n_claims + 1, sizeof(*out.claims));
	for (size_t i = 0; i < in->n_claims; i++) {
		const Claim *cl = in->claims[i];
		PrepEntry *e = cnl_xcalloc(1, sizeof(*e));
		PrepOne *one = cnl_xcalloc(1, sizeof(*one));
		char err[1024] = "";
		json_t *devs = NULL, *x;
		size_t k;

		PB(node_prepare_resources_response__claims_entry__init)(e);
		PB(node_prepare_resource_response__init)(one);
		e->key = cl->uid;
		e->value = one;
		out.claims[i] = e;
		if (cnl_dra_prepare(c->dra, cl->namespace_, cl->uid, cl->name,
		                    &devs, err, sizeof(err)) < 0) {
			one->error =
			    cnl_xstrdup(err[0] ? err : "prepare failed");
			cnl_log(CNL_LOG_WARN, "claim not prepared",
			        "claim=%s/%s error=\"%.300s\"", cl->namespace_,
			        cl->name, one->error);
			continue;
		}
		one->n_devices = json_array_size(devs);
		one->devices =
		    cnl_xcalloc(one->n_devices + 1, sizeof(*one->devices));
		json_array_foreach (devs, k, x) {
			Device *dv = cnl_xcalloc(1, sizeof(*dv));
			PB(device__init)(dv);
			dv->n_request_names = 1;
			dv->request_names = cnl_xcalloc(1, sizeof(char *));
			dv->request_names[0] = cnl_xstrdup(
			    json_string_value(json_object_get(x, "request")));
			dv->pool_name = cnl_xstrdup(
			    json_string_value(json_object_get(x, "pool")));
			dv->device_name = cnl_xstrdup(
			    json_string_value(json_object_get(x, "device")));
			dv->n_cdi_device_ids = 1;
			dv->cdi_device_ids = cnl_xcalloc(1, sizeof(char *));
			dv->cdi_device_ids[0] = cnl_xstrdup(
			    json_string_value(json_object_get(x, "cdi")));
			if (json_object_get(x, "share_id"))
				dv->share_id = cnl_xstrdup(json_string_value(
				    json_object_get(x, "share_id")));
			one->devices[k] = dv;
		}
		json_decref(devs);
	}
	code = packed(&out.base, resp, resp_len);
	for (size_t i = 0; i < out.n_claims; i++) {
		PrepOne *one = out.claims[i]->value;
		for (size_t k = 0; k < one->n_devices; k++) {
			Device *dv = one->devices[k];
			free(dv->request_names[0]);
			free(dv->request_names);
			free(dv->pool_name);
			free(dv->device_name);
			free(dv->cdi_device_ids[0]);
			free(dv->cdi_device_ids);
			if (dv->share_id != protobuf_c_empty_string)
				free(dv->share_id);
			free(dv);
		}
		free(one->devices);
		if (one->error != protobuf_c_empty_string)
			free(one->error);
		free(one);
		free(out.claims[i]);
	}
	free(out.claims);
	PB(node_prepare_resources_request__free_unpacked)(in, NULL);
	return code;
}

static int unprepare(void *ud, const uint8_t *req, size_t len, uint8_t **resp,
                     size_t *resp_len, char *msg, size_t msglen)
{
	struct cnl_dra_rpc *c = ud;
	UnprepReq *in =
	    PB(node_unprepare_resources_request__unpack)(NULL, len, req);
	UnprepResp out =
	    K8S__IO__KUBELET__PKG__APIS__DRA__V1__NODE_UNPREPARE_RESOURCES_RESPONSE__INIT;
	int code;

	if (!in) {
		snprintf(msg, msglen,
		         "cannot decode NodeUnprepareResourcesRequest");
		return CNL_GRPC_INVALID_ARGUMENT;
	}
	for (size_t i = 0; i < in->n_claims; i++)
		if (!claim_ok(in->claims[i], msg, msglen)) {
			PB(node_unprepare_resources_request__free_unpacked)
			(in, NULL);
			return CNL_GRPC_INVALID_ARGUMENT;
		}
	out.n_claims = in->n_claims;
	out.claims = cnl_xcalloc(in->n_claims + 1, sizeof(*out.claims));
	for (size_t i = 0; i < in->n_claims; i++) {
		UnprepEntry *e = cnl_xcalloc(1, sizeof(*e));
		UnprepOne *one = cnl_xcalloc(1, sizeof(*one));
		char err[512] = "";

		PB(node_unprepare_resources_response__claims_entry__init)(e);
		PB(node_unprepare_resource_response__init)(one);
		e->key = in->claims[i]->uid;
		e->value = one;
		out.claims[i] = e;
		if (cnl_dra_unprepare(c->dra, in->claims[i]->uid, err,
		                      sizeof(err)) < 0)
			one->error =
			    cnl_xstrdup(err[0] ? err : "unprepare failed");
	}
	code = packed(&out.base, resp, resp_len);
	for (size_t i = 0; i < out.n_claims; i++) {
		if (out.claims[i]->value->error != protobuf_c_empty_string)
			free(out.claims[i]->value->error);
		free(out.claims[i]->value);
		free(out.claims[i]);
	}
	free(out.claims);
	PB(node_unprepare_resources_request__free_unpacked)(in, NULL);
	return code;
}

int cnl_dra_rpc_methods(struct cnl_dra_rpc *c, struct cnl_grpc_method *reg,
                        struct cnl_grpc_method *dra)
{
	reg[0] = (struct cnl_grpc_method){
	    "/pluginregistration.Registration/GetInfo", get_info, c};
	reg[1] = (struct cnl_grpc_method){
	    "/pluginregistration.Registration/NotifyRegistrationStatus", notify,
	    c};
	dra[0] = (struct cnl_grpc_method){
	    "/k8s.io.kubelet.pkg.apis.dra.v1.DRAPlugin/NodePrepareResources",
	    prepare, c};
	dra[1] = (struct cnl_grpc_method){
	    "/k8s.io.kubelet.pkg.apis.dra.v1.DRAPlugin/NodeUnprepareResources",
	    unprepare, c};
	return 2;
}
