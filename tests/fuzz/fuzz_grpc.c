/*
 * fuzz_grpc.c - fuzz target for cnlab-dra-plugin's gRPC side: the input
 * is the bytes a kubelet (or anything that reached the plugin's socket)
 * sends on one connection.  They go through the real server
 * (agent/dra/grpc.c: nghttp2's HTTP/2 session, our gRPC framing, method
 * routing) into the real handlers (agent/dra/rpc.c: protobuf-c's decoding
 * of the kubelet's messages, the claims' checks) over a plugin on a fake
 * pool whose API server is unreachable (a closed loopback port: every
 * prepare of a well-formed claim fails at once, as its claim's error).
 * Any crash, leak or sanitizer report is a finding.
 *
 * Built twice, as every target (tests/fuzz/README.md).  Seeds: the
 * kubelet's calls as Python's grpcio sends them (GetInfo, Notify...,
 * prepare, unprepare, an undecodable request), captured from
 * tests/k8s/dra_client.py.
 */
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "agent/dra/grpc.h"
#include "agent/dra/plugin.h"
#include "agent/dra/rpc.h"
#include "common/log.h"
#include "net/kube.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static struct cnl_grpc_server *srv;
static char dir[64];

/* The plugin's folders, empty after each input: gone at exit. */
static void drop_dir(void)
{
	char p[96];

	snprintf(p, sizeof(p), "%s/claims", dir);
	rmdir(p);
	snprintf(p, sizeof(p), "%s/regions", dir);
	rmdir(p);
	rmdir(dir);
}

static void setup(void)
{
	static struct cnl_catalog cat;
	static struct cnl_dra_rpc rpc;
	struct cnl_gpus *gpus;
	struct cnl_kube *kube;
	struct cnl_dra *dra;
	struct cnl_grpc_method m[4];
	char err[256];

	signal(SIGPIPE, SIG_IGN);
	cnl_log_set_level(CNL_LOG_ERROR + 1);
	cnl_catalog_init(&cat);
	snprintf(dir, sizeof(dir), "/tmp/cnlab-fuzz-grpc-%d", (int)getpid());
	if (cnl_gpus_open("fake:2xH100-80GB-SXM", &cat, &gpus, err,
	                  sizeof(err)) < 0 ||
	    cnl_kube_open(
	        &(struct cnl_kube_config){.server = "http://127.0.0.1:1",
	                                  .token_file = "/dev/null",
	                                  .retries = -1},
	        &kube, err, sizeof(err)) < 0 ||
	    cnl_dra_new(&(struct cnl_dra_config){.node = "node1",
	                                         .plugin_dir = dir,
	                                         .cdi_dir = dir},
	                gpus, &cat, kube, kube, &dra, err, sizeof(err)) < 0) {
		fprintf(stderr, "fuzz_grpc: %s\n", err);
		abort();
	}
	atexit(drop_dir);
	rpc.dra = dra;
	rpc.endpoint = "/dev/null";
	cnl_dra_rpc_methods(&rpc, m, m + 2);
	srv = cnl_grpc_server_new(m, 4);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (!srv)
		setup();
	cnl_grpc_server_feed(srv, data, size);
	return 0;
}
