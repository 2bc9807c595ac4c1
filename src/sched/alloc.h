/*
 * alloc.h - the resource model and the two-tier slice allocator.
 *
 * A cluster is a set of nodes; a node has CPUs (milli-cores), host memory
 * (MiB), labels (cluster, zone, rack, datasets), a state, and 0..16 GPUs of
 * one catalog type.  Each GPU is in one of two modes:
 *
 *   block mode  a pool of 100 blocks; a block is 1% of the GPU's compute
 *               time share and 1% of its VRAM.  Blocks are named (bit i of
 *               the GPU's block mask is block i), so the allocator can prove
 *               that none is promised twice.
 *   MIG mode    a set of MIG instances laid out by the profile geometry of
 *               the catalog.  An instance is dedicated to one allocation or
 *               hosts blocks of one project (the host profile: the smallest
 *               1g profile with room for 14 blocks of VRAM; at most 14).
 *
 * An empty GPU may be used in either mode; a GPU changes mode only when it
 * is empty, and a MIG instance is torn down when its last allocation goes.
 *
 * Requests (struct cnl_alloc_req) ask for N blocks, a named MIG profile,
 * K whole GPUs of one node (a gang: all or nothing), or no GPU at all, with
 * a project, an optional GPU type (or set of types), CPU and memory.  The
 * tenant rules of the seeds:
 *
 *   R1  Blocks of different projects may share a block-mode GPU as long as
 *       every allocation on it is at most 14 blocks.
 *   R2  A request above 14 blocks never shares a GPU with another project.
 *       On a block-mode GPU it may join only allocations of its own
 *       project, and while it lives the GPU takes no other project.  On a
 *       MIG-capable type it otherwise gets a dedicated MIG instance of the
 *       smallest profile whose compute and memory both cover the request
 *       (25% of an H100 -> 2g.20gb, 50% -> 4g.40gb).
 *   R3  Small requests (<= 14 blocks) may also go into a block-hosting 1g
 *       instance of their own project on a GPU that is already in MIG mode.
 *   R4  Whole-GPU requests take empty GPUs.
 *
 * Placement is split in two so that a scheduler can weigh candidates:
 * cnl_alloc_plan_node() proposes the best option on one node without
 * changing anything, and cnl_alloc_commit() applies a plan after checking
 * it still fits.  cnl_alloc_place() does both with the built-in choice:
 * nodes already in use before empty ones (bin-packing), then the GPU option
 * that leaves the least free capacity behind (best fit), then the lowest
 * node index, so results are deterministic.
 *
 * The library is pure: no I/O, no clock, no globals.  All functions return
 * >= 0 on success and a negative CNL_E* code or -errno on failure; on
 * failure nothing has changed.
 */
#ifndef CNL_SCHED_ALLOC_H
#define CNL_SCHED_ALLOC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "sched/catalog.h"

#define CNL_BLOCKS_PER_GPU    100
#define CNL_SMALL_BLOCKS_MAX  14 /* above this, R2 applies */
#define CNL_NODE_MAX_GPUS     16
#define CNL_NODE_MAX_DATASETS 8
#define CNL_DATASET_MAX       64 /* dataset name, NUL included */
#define CNL_GPU_TYPE_ANY      (-1)
#define CNL_PROJECT_NONE      UINT32_MAX

/* Plan scores (lower is better): a plan on a node with nothing on it
 * scores at least CNL_SCORE_OPEN_NODE; one that opens an empty GPU at
 * least CNL_SCORE_OPEN_GPU. */
#define CNL_SCORE_OPEN_GPU  1000
#define CNL_SCORE_OPEN_NODE 100000

enum cnl_node_state {
	CNL_NODE_UP,       /* takes new work */
	CNL_NODE_CORDONED, /* keeps its work, takes no new work */
	CNL_NODE_DRAINING, /* work is being moved away; takes none */
	CNL_NODE_DOWN,     /* unreachable; takes none */
};

enum cnl_gpu_mode { CNL_GPU_BLOCK, CNL_GPU_MIG };

enum cnl_req_kind {
	CNL_REQ_BLOCKS, /* `blocks` 1% blocks of one GPU */
	CNL_REQ_MIG,    /* a dedicated instance of the named `profile` */
	CNL_REQ_WHOLE,  /* `gpus` whole GPUs of one node */
	CNL_REQ_CPU,    /* no GPU: CPU and memory only, any node */
};

/* How an allocation sits on its node. */
enum cnl_place_kind {
	CNL_PLACE_BLOCKS,     /* blocks `mask` of block-mode GPU `gpu` */
	CNL_PLACE_MIG,        /* dedicated instance (profile, start) */
	CNL_PLACE_MIG_BLOCKS, /* blocks `mask` of a host instance */
	CNL_PLACE_WHOLE,      /* GPUs `gpu_mask`, all blocks of each */
	CNL_PLACE_CPU,        /* CPU and memory of the node only */
};

struct cnl_node_spec {
	const char *name;
	int gpu_type; /* catalog index; ignored when n_gpus == 0 */
	int n_gpus;   /* 0..16 */
	int64_t cpu_milli;
	int64_t mem_mib;
	const char *cluster, *zone, *rack;           /* may be NULL */
	const char *datasets[CNL_NODE_MAX_DATASETS]; /* NULL-terminated */
};

struct cnl_alloc_req {
	enum cnl_req_kind kind;
	int blocks;          /* CNL_REQ_BLOCKS: 1..100 */
	const char *profile; /* CNL_REQ_MIG: profile name, e.g. "2g.20gb" */
	int gpus;            /* CNL_REQ_WHOLE: 1..16 */
	int gpu_type;        /* catalog index or CNL_GPU_TYPE_ANY */
	uint64_t gpu_types;  /* if not 0: allowed types (bit t = type t) */
	uint32_t project;    /* tenant; any value but CNL_PROJECT_NONE */
	int64_t cpu_milli;   /* >= 0 */
	int64_t mem_mib;     /* >= 0 */
	/* If not NULL: the only nodes it may use.  Not owned: its owner
	 * keeps it alive, and unchanged while the request is planned. */
	const struct cnl_node_set *nodes;
};

/* A set of nodes by index: bit i of bits for node i of the len first
 * (any later node is not in it). */
struct cnl_node_set {
	uint64_t *bits;
	uint32_t len;
};

/* Whether node @node is in set @s. */
static inline bool cnl_node_set_has(const struct cnl_node_set *s, uint32_t node)
{
	return node < s->len && (s->bits[node >> 6] >> (node & 63) & 1);
}

/* Whether request @r may use node @node at all (its node set). */
static inline bool cnl_req_node_ok(const struct cnl_alloc_req *r, uint32_t node)
{
	return !r->nodes || cnl_node_set_has(r->nodes, node);
}

/*
 * A request checked against the catalog once, so that planning it on many
 * nodes costs no string compares: per GPU type, whether it can run there
 * and which MIG profile it would use.
 */
struct cnl_req_prep {
	struct cnl_alloc_req req;
	uint64_t type_ok;                   /* bit t: may run on type t */
	int8_t prof[CNL_CATALOG_MAX_TYPES]; /* MIG profile per type, or -1 */
};

/* A proposed placement; `score` is lower-is-better. */
struct cnl_plan {
	uint32_t node;
	uint8_t kind;      /* enum cnl_place_kind */
	uint8_t gpu;       /* BLOCKS, MIG, MIG_BLOCKS */
	uint8_t profile;   /* MIG, MIG_BLOCKS: profile index of the instance */
	uint8_t start;     /* MIG, MIG_BLOCKS: start slot of the instance */
	uint8_t new_inst;  /* MIG_BLOCKS: the host instance is created */
	uint8_t n_blocks;  /* blocks held (BLOCKS, MIG_BLOCKS) */
	uint16_t gpu_mask; /* WHOLE */
	uint64_t mask[2];  /* BLOCKS: GPU blocks; MIG_BLOCKS: host blocks */
	int64_t score;
};

struct cnl_mig_inst {
	uint8_t profile;
	uint8_t start;
	uint8_t host;     /* hosts blocks */
	uint8_t used;     /* host: blocks in use */
	uint16_t mask;    /* host: which of its 14 blocks are in use */
	uint32_t project; /* owner */
	uint32_t alloc;   /* dedicated: the allocation's id */
};

struct cnl_gpu_proj {
	uint32_t project;
	uint16_t allocs;
};

struct cnl_gpu {
	uint8_t mode;     /* enum cnl_gpu_mode */
	uint8_t used;     /* block mode: blocks in use */
	uint8_t big;      /* block mode: allocations above 14 blocks */
	uint8_t n_inst;   /* MIG mode: instances */
	uint8_t mem_mask; /* MIG mode: memory slices in use */
	uint8_t sm_mask;  /* MIG mode: compute slices in use */
	uint16_t n_allocs;
	uint64_t mask[2]; /* block mode: blocks in use */
	struct cnl_mig_inst inst[CNL_MIG_COMPUTE_SLICES];
	/* Projects with allocations on this GPU and how many each. */
	uint8_t n_projs, cap_projs;
	struct cnl_gpu_proj *projs;
};

struct cnl_node {
	char name[64];
	char cluster[CNL_NAME_MAX], zone[CNL_NAME_MAX], rack[CNL_NAME_MAX];
	char datasets[CNL_NODE_MAX_DATASETS][CNL_DATASET_MAX];
	uint8_t n_datasets;
	uint8_t state; /* enum cnl_node_state */
	uint8_t n_gpus;
	int16_t gpu_type;
	int64_t cpu_total, cpu_used;
	int64_t mem_total, mem_used;
	/* What work CNLab did not place holds (cnl_cluster_set_node_others):
	 * not in cpu_used and mem_used, which are CNLab's allocations (so
	 * that one freed and put back always fits again), but out of the
	 * free capacity that searches read (struct cnl_node_hot). */
	int64_t cpu_others, mem_others;
	/* How many workloads the node may hold at once, CNLab's and
	 * others' together (a Kubernetes node's allocatable pods), and how
	 * many of others' it holds (cnl_cluster_set_node_pods); 0: no
	 * limit. */
	int32_t pods_max, pods_others;
	uint32_t n_allocs;
	uint32_t n_shared; /* allocations of part of one GPU (blocks, MIG) */
	uint32_t n_whole;  /* whole-GPU allocations */
	/* Summary for fast rejection, recomputed after every change. */
	uint8_t n_empty;        /* GPUs with nothing on them */
	uint8_t max_block_free; /* most free blocks on a block-mode GPU */
	uint8_t max_mig_free;   /* most free compute slices on a MIG GPU */
	uint8_t max_host_free;  /* most free blocks in a host instance */
	struct cnl_gpu *gpus;
};

/*
 * Whether @p could ever run on node @n were it empty: a GPU type it
 * allows (with its MIG profile), enough GPUs, CPU and memory.  Neither
 * the node's state nor the request's node set is looked at: the callers
 * add what they need of those.
 */
static inline bool cnl_node_could_host(const struct cnl_node *n,
                                       const struct cnl_req_prep *p)
{
	const struct cnl_alloc_req *r = &p->req;

	if (n->cpu_total < r->cpu_milli || n->mem_total < r->mem_mib)
		return false;
	if (r->kind == CNL_REQ_CPU)
		return true;
	if (n->n_gpus == 0 || n->gpu_type < 0 ||
	    !(p->type_ok >> n->gpu_type & 1))
		return false;
	if (r->kind == CNL_REQ_WHOLE)
		return n->n_gpus >= r->gpus;
	if (r->kind == CNL_REQ_MIG)
		return p->prof[n->gpu_type] >= 0;
	return true;
}

/*
 * The fields a cluster-wide search reads for every node, packed together
 * so that rejecting a node touches one cache line.  A copy of the node's
 * state, refreshed after every change of the node.
 */
struct cnl_node_hot {
	int64_t cpu_free, mem_free;
	int16_t gpu_type;
	uint8_t state, n_gpus;
	uint8_t n_empty, max_block_free, max_mig_free, max_host_free;
	uint32_t n_allocs;
	/* Workloads it may still take (pods_max); INT32_MAX: no limit. */
	int32_t slots_free;
};

struct cnl_alloc {
	uint32_t id; /* 0 when the slot is free */
	uint32_t project;
	uint32_t node;
	uint8_t req_kind; /* enum cnl_req_kind */
	uint8_t kind;     /* enum cnl_place_kind */
	uint8_t gpu, profile, start;
	uint8_t blocks; /* blocks requested (BLOCKS requests) */
	uint16_t gpu_mask;
	uint64_t mask[2];
	int64_t cpu_milli, mem_mib;
};

struct cnl_cluster {
	const struct cnl_catalog *cat;
	uint32_t n_nodes, cap_nodes;
	struct cnl_node *nodes;
	struct cnl_node_hot *hot; /* parallel to nodes */
	/* Per MIG type, memoised room_left() over (memory, compute) masks:
	 * index mem | sm << 8.  Built when a node of the type is added. */
	int16_t *room[CNL_CATALOG_MAX_TYPES];
	uint32_t n_allocs;           /* live allocations */
	uint32_t cap_slots, n_slots; /* allocation table */
	struct cnl_alloc *slots;
	uint32_t *free_slots; /* stack of reusable slot indexes */
	uint32_t n_free_slots;
	uint32_t gen; /* generation for new ids */
};

/* cnl_cluster_new - an empty cluster over `cat`, which must outlive it. */
int cnl_cluster_new(const struct cnl_catalog *cat, struct cnl_cluster **ret);
void cnl_cluster_free(struct cnl_cluster *c);

/*
 * cnl_cluster_add_node - add a node in state UP.  Errors: -CNL_ESIZE
 * (negative CPU or memory, GPU count outside 0..16), -CNL_EGPUTYPE,
 * -CNL_EDUP (name taken), -CNL_ELIMIT (name or label too long, too many
 * datasets).  Returns the node index.
 */
int cnl_cluster_add_node(struct cnl_cluster *c,
                         const struct cnl_node_spec *spec);
int cnl_cluster_find_node(const struct cnl_cluster *c, const char *name);
int cnl_cluster_set_node_state(struct cnl_cluster *c, uint32_t node,
                               enum cnl_node_state state);

/*
 * cnl_cluster_set_node_labels - replace the node's labels (cluster, zone,
 * rack, datasets) with those of @spec; its other fields are ignored.  For
 * an agent that registers again with other datasets: placement reads the
 * labels at every decision, so the next cycle uses the new ones.  Errors:
 * -CNL_ENODE, -CNL_ELIMIT (a label too long); nothing changes on failure.
 */
int cnl_cluster_set_node_labels(struct cnl_cluster *c, uint32_t node,
                                const struct cnl_node_spec *spec);

/*
 * cnl_cluster_set_node_others - the CPU (millicores) and memory (MiB) of
 * the node that work CNLab did not place holds now (the pods of another
 * Kubernetes scheduler): not free, so that placement leaves it
 * alone.  It may exceed what is free (that work came after CNLab's): the
 * node then takes no more until enough ends, and what CNLab placed there
 * stays placed.  Errors: -CNL_ENODE,
 * -CNL_ESIZE (negative); nothing changes on failure.
 */
int cnl_cluster_set_node_others(struct cnl_cluster *c, uint32_t node,
                                int64_t cpu_milli, int64_t mem_mib);

/*
 * cnl_cluster_set_node_pods - how many workloads node @node may hold at
 * once (@max, 0: no limit), CNLab's and others' together, and how many
 * work CNLab did not place holds there now (@others): a Kubernetes node's
 * allocatable pods and the other schedulers' pods on it.  A node holding
 * @max takes nothing more (what it holds stays placed).  Errors:
 * -CNL_ENODE, -CNL_ESIZE (negative); nothing changes on failure.
 */
int cnl_cluster_set_node_pods(struct cnl_cluster *c, uint32_t node, int32_t max,
                              int32_t others);

/* cnl_alloc_prepare - check `req` (see errors.h: CNL_EBLOCKS, CNL_EPROFILE,
 * CNL_ENOMIG, CNL_ESIZE, CNL_EGPUTYPE, CNL_EGANG) and resolve it per type. */
int cnl_alloc_prepare(const struct cnl_cluster *c,
                      const struct cnl_alloc_req *req,
                      struct cnl_req_prep *ret);

/* cnl_alloc_plan_node - the best option for `p` on `node`, or
 * -CNL_ENOSPACE / -CNL_ENODESTATE.  Changes nothing. */
int cnl_alloc_plan_node(const struct cnl_cluster *c,
                        const struct cnl_req_prep *p, uint32_t node,
                        struct cnl_plan *ret);

/*
 * For callers that score many nodes per request (the scheduler, the trace
 * simulator): cnl_alloc_may_fit() is the cheap summary test (false: the
 * request cannot fit node `node`); cnl_alloc_plan_fast() is
 * cnl_alloc_plan_node() without the block masks, and
 * cnl_alloc_plan_masks() fills them in for the plan finally chosen.
 */
bool cnl_alloc_may_fit(const struct cnl_cluster *c, uint32_t node,
                       const struct cnl_req_prep *p);
bool cnl_alloc_plan_fast(const struct cnl_cluster *c,
                         const struct cnl_req_prep *p, uint32_t node,
                         struct cnl_plan *ret);
void cnl_alloc_plan_masks(const struct cnl_cluster *c, struct cnl_plan *pl);

/* cnl_alloc_plan - the best option over the whole cluster. */
int cnl_alloc_plan(const struct cnl_cluster *c, const struct cnl_req_prep *p,
                   struct cnl_plan *ret);

/* cnl_alloc_commit - apply `plan`, re-checked against the current state
 * (-CNL_ENOSPACE when it no longer fits).  Returns the allocation id
 * (> 0) through ret_id. */
int cnl_alloc_commit(struct cnl_cluster *c, const struct cnl_req_prep *p,
                     const struct cnl_plan *plan, uint32_t *ret_id);

/* cnl_alloc_place - prepare, plan and commit in one call. */
int cnl_alloc_place(struct cnl_cluster *c, const struct cnl_alloc_req *req,
                    uint32_t *ret_id);

/* cnl_alloc_free - release everything allocation `id` holds, tearing down a
 * MIG instance it leaves empty.  -CNL_ENOALLOC for an unknown id. */
int cnl_alloc_free(struct cnl_cluster *c, uint32_t id);

/*
 * cnl_alloc_resize - change a block allocation to `blocks` in place: on its
 * block-mode GPU (growing obeys R1/R2) or within its host instance (at most
 * 14).  -CNL_EKIND for MIG and whole-GPU allocations, -CNL_EBLOCKS for a
 * size outside 1..100, -CNL_ENOSPACE when there is no room in place.
 */
int cnl_alloc_resize(struct cnl_cluster *c, uint32_t id, int blocks);

/*
 * cnl_alloc_restore - put back an allocation released by cnl_alloc_free(),
 * under its old id, from a copy of its record taken before the free.  For
 * what-if questions ("would this job fit if those ended?"): free, ask,
 * restore in reverse order, and the cluster is as it was.  -CNL_EDUP when
 * the id's slot has been reused, -CNL_ENOSPACE when its resources have.
 */
int cnl_alloc_restore(struct cnl_cluster *c, const struct cnl_alloc *saved);

/*
 * cnl_alloc_adopt - re-create, under a new id returned in *ret_id, the
 * placement a saved record describes (node, GPU, MIG instance, blocks):
 * how a restarted control plane rebuilds the allocations of the work that
 * was running.  Errors as cnl_alloc_restore() and -CNL_ENOALLOC for a node
 * index outside the cluster.
 */
int cnl_alloc_adopt(struct cnl_cluster *c, const struct cnl_alloc *saved,
                    uint32_t *ret_id);

/* cnl_alloc_get - the live allocation `id`, or NULL. */
const struct cnl_alloc *cnl_alloc_get(const struct cnl_cluster *c, uint32_t id);

/* cnl_alloc_vram_mib - VRAM the allocation is promised. */
uint64_t cnl_alloc_vram_mib(const struct cnl_cluster *c,
                            const struct cnl_alloc *a);

/* cnl_alloc_blocks_held - GPU capacity the allocation takes, in blocks
 * (a MIG instance counts its compute share, 100 * compute / 7). */
int cnl_alloc_blocks_held(const struct cnl_cluster *c,
                          const struct cnl_alloc *a);

/*
 * cnl_cluster_check - verify every invariant by rebuilding the state from
 * the allocation table: no block, VRAM byte, CPU, memory or MIG slice is
 * promised twice; every instance sits at an allowed start slot, within its
 * profile's instance limit, without overlap; host instances are non-empty
 * and hold at most 14 blocks of one project; counters and summaries match.
 * Returns 0 or -CNL_ECONFIG with a description in `err`.
 */
int cnl_cluster_check(const struct cnl_cluster *c, char *err, size_t errlen);

/* ---- fragmentation -------------------------------------------------- */

#define CNL_MIX_MAX 128

/* A typical request mix: task shapes with weights (need not sum to 1). */
struct cnl_task_mix {
	int n;
	struct {
		enum cnl_req_kind kind; /* BLOCKS, WHOLE or CPU */
		int blocks;             /* BLOCKS: 1..100 */
		int gpus;               /* WHOLE: 1..16 */
		int64_t cpu_milli, mem_mib;
		uint64_t gpu_types; /* allowed types; 0: any */
		double weight;
	} t[CNL_MIX_MAX];
};

/* The mix used when a caller has none: mostly small notebook slices. */
void cnl_task_mix_default(struct cnl_task_mix *mix);

/*
 * cnl_frag_gpu / cnl_frag_node - expected free capacity, in blocks, that a
 * task drawn from `mix` cannot use (after FGD, ATC'23): for each task, the
 * free blocks of every GPU where the task cannot be placed, weighted by the
 * task's share of the mix.  Capacity only: tenant rules are not applied.
 * At node level a task that does not fit the node's free CPU or memory
 * finds all of the node's free GPU capacity unusable, and a K-GPU task can
 * use only fully free GPUs, and only when K of them are free.
 */
double cnl_frag_gpu(const struct cnl_cluster *c, uint32_t node, int gpu,
                    const struct cnl_task_mix *mix);
double cnl_frag_node(const struct cnl_cluster *c, uint32_t node,
                     const struct cnl_task_mix *mix);

/*
 * cnl_frag_node_after - cnl_frag_node() as it would be once `plan` were
 * committed for a request of `cpu_milli` and `mem_mib`, without changing
 * anything: the gradient a placement policy descends.  Returns a negative
 * value for plans it cannot evaluate this way (MIG plans); commit and
 * measure those instead.
 */
double cnl_frag_node_after(const struct cnl_cluster *c, uint32_t node,
                           const struct cnl_task_mix *mix,
                           const struct cnl_plan *plan, int64_t cpu_milli,
                           int64_t mem_mib);

/* cnl_gpu_free_blocks - free capacity of a GPU in blocks (MIG: free compute
 * slices as 100 * n / 7, plus free blocks in host instances). */
int cnl_gpu_free_blocks(const struct cnl_cluster *c, uint32_t node, int gpu);

#endif /* CNL_SCHED_ALLOC_H */
