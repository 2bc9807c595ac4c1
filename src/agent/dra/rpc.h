/*
 * rpc.h - the kubelet's Registration and DRAPlugin (v1) services over the
 * plugin (rpc.c): what cnlab-dra-plugin serves on its two sockets.
 *
 *   Registration (plugins_registry/<driver>-reg.sock): GetInfo answers
 *   type "DRAPlugin", the driver's name, the DRA socket's path and the
 *   version "v1.DRAPlugin"; NotifyRegistrationStatus is logged.
 *   DRAPlugin (plugin_dir/dra.sock): NodePrepareResources and
 *   NodeUnprepareResources, one entry per claim of the request, each with
 *   its own error; a request whose claims lack namespace, uid or name is
 *   INVALID_ARGUMENT as a whole.
 */
#ifndef CNL_AGENT_DRA_RPC_H
#define CNL_AGENT_DRA_RPC_H

#include <stdbool.h>

#include "agent/dra/grpc.h"

struct cnl_dra;

struct cnl_dra_rpc {
	struct cnl_dra *dra;
	const char *endpoint; /* the DRA socket's path, for GetInfo */
	bool registered;      /* the kubelet's last word */
};

/* cnl_dra_rpc_methods - the Registration methods into @reg[2] and the
 * DRAPlugin ones into @dra[2], all over @c; returns 2. */
int cnl_dra_rpc_methods(struct cnl_dra_rpc *c, struct cnl_grpc_method *reg,
                        struct cnl_grpc_method *dra);

#endif /* CNL_AGENT_DRA_RPC_H */
