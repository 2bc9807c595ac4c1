/*
 * plugin.h - cnlab-dra-plugin's work: what the node's GPUs are to
 * Kubernetes (ResourceSlices of the driver gpu.cnlab.io) and what a
 * container gets for an allocated ResourceClaim (a CDI spec).  The gRPC
 * side (rpc.c) and the program (main.c) are around it.
 *
 * Devices, one ResourceSlice per GPU (a slice of the pool named after the
 * node; a GPU's counter set and the devices that consume it must share a
 * slice, and one slice holds at most 64 devices that consume counters):
 *   gpu-N                 the GPU in block mode: capacity "blocks" 100
 *                         (a claim asks for 1..100, whole blocks; none
 *                         asked is the whole GPU) and "memory", with
 *                         allowMultipleAllocations, so that several
 *                         claims share it by blocks;
 *   gpu-N-mig-P-S         on a GPU with MIG, each profile P ("1g-10gb",
 *                         the catalog's name with '.' as '-') at each of
 *                         its start slots S, as a partition.
 * Both consume the GPU's counter set gpu-N (memorySlice0..7, one each, and
 * computeSlices, 7): gpu-N takes all of it, a partition its own memory
 * slices and compute slices, so a GPU serves either 1% blocks or MIG
 * partitions at a time and partitions never overlap, whoever allocates
 * (kube-scheduler or cnlabd).
 *
 * Prepare (of a claim: namespace, name, UID), idempotent:
 *   - the claim is read from the API server; its UID must be the one the
 *     kubelet gave (a claim deleted and made again is another claim), it
 *     must be allocated, and every result of this driver must be of this
 *     node's pool and name one of its devices;
 *   - a block slice gets a region (the shim's limits: VRAM blocks% of the
 *     GPU, compute share by blocks; region.h) under plugin_dir/regions;
 *     a partition gets its MIG instance created (or shared, when one of
 *     the profile already sits at the slot);
 *   - the CDI spec cdi_dir/cnlab.io-gpu_<uid>.json gets one device,
 *     named by the claim's UID, with exactly the allocated GPUs' device
 *     nodes and the driver's control nodes, CUDA_VISIBLE_DEVICES naming
 *     them (the GPU's or MIG instance's UUID), and, for block slices, the
 *     shim read-only at /opt/cnlab/libcnlab-cuda.so, /etc/ld.so.preload
 *     and /etc/cnlab/region naming it (read-only: the tenant cannot take
 *     the preload away), the region's limits read-only and its accounting
 *     writable;
 *   - what was done is kept in plugin_dir/claims/<uid>.json, so that a
 *     second prepare answers the same and unprepare (also after a
 *     restart) undoes exactly it.
 * Unprepare removes the CDI spec, the region and the MIG instances the
 * claim made; a claim never prepared is unprepared already.
 */
#ifndef CNL_AGENT_DRA_PLUGIN_H
#define CNL_AGENT_DRA_PLUGIN_H

#include <stddef.h>

#include <jansson.h>

#include "agent/gpu.h"

struct cnl_kube;

#define CNL_DRA_DRIVER "gpu.cnlab.io"
/* The CDI kind of every device this plugin writes. */
#define CNL_DRA_CDI_KIND "cnlab.io/gpu"

struct cnl_dra_config {
	const char *driver;     /* NULL: CNL_DRA_DRIVER */
	const char *node;       /* this node's name (the pool's) */
	const char *plugin_dir; /* claims/, regions/, the DRA socket */
	const char *cdi_dir;    /* "/var/run/cdi" */
	const char *shim;       /* host path of libcnlab-cuda.so; NULL or
	                           "": no shim (block slices refused) */
	const char *dev_root;   /* prefix of the host's /dev (tests); NULL
	                           or "": "" */
};

struct cnl_dra;

/*
 * cnl_dra_new - the plugin over @gpus and two API clients (all outlive
 * it): @kube for prepare (the gRPC thread), @kube_slices for publish and
 * follow (another thread; a client is one thread's, and a watch holds its
 * connection for minutes).  0 or a negative errno with @err (the folders
 * cannot be made).
 */
int cnl_dra_new(const struct cnl_dra_config *cfg, struct cnl_gpus *gpus,
                const struct cnl_catalog *cat, struct cnl_kube *kube,
                struct cnl_kube *kube_slices, struct cnl_dra **ret, char *err,
                size_t errlen);
void cnl_dra_free(struct cnl_dra *d);

const char *cnl_dra_driver(const struct cnl_dra *d);

/* cnl_dra_slices - the node's ResourceSlices as the API wants them (a
 * JSON array of objects; without the owner reference and generation the
 * publish adds).  New reference. */
json_t *cnl_dra_slices(struct cnl_dra *d);

/*
 * cnl_dra_publish - make the API server's ResourceSlices of this driver
 * and node what cnl_dra_slices says: update those that exist, create the
 * others, delete any left over, at a pool generation one above the
 * highest there.  0, or -EIO / -EPROTO with @err.
 */
int cnl_dra_publish(struct cnl_dra *d, char *err, size_t errlen);

/*
 * cnl_dra_follow - keep the published slices as they should be: list this
 * driver's and node's slices (any difference from cnl_dra_slices' devices,
 * one missing or one too many, is drift), then watch them from the list's
 * version until a change makes them differ (deleted by someone, edited,
 * one added), resuming after each bookmark and each end of the stream,
 * until *@stop.  Returns 1 when they must be published again, 0 when the
 * watch's version expired (410: call again, which lists again) or *@stop
 * was seen, or a negative errno with @err.
 */
int cnl_dra_follow(struct cnl_dra *d, long timeout_s, const volatile int *stop,
                   char *err, size_t errlen);

/*
 * cnl_dra_prepare - prepare one claim; 0 with the kubelet's devices in
 * *@ret (an array of {"request","pool","device","cdi","share_id"}; new
 * reference), or a negative errno with @err (the claim's error text).
 */
int cnl_dra_prepare(struct cnl_dra *d, const char *ns, const char *uid,
                    const char *name, json_t **ret, char *err, size_t errlen);

/* cnl_dra_unprepare - undo the claim @uid's prepare; 0, or a negative
 * errno with @err. */
int cnl_dra_unprepare(struct cnl_dra *d, const char *uid, char *err,
                      size_t errlen);

#endif /* CNL_AGENT_DRA_PLUGIN_H */
