/*
 * trace.h - load the Alibaba GPU cluster trace v2023 ("openb", the FGD
 * paper's trace, USENIX ATC '23) into CNLab's resource model.
 *
 * The trace is a set of plain CSV files (see shared/traces/README.md):
 *
 *   node lists  sn,cpu_milli,memory_mib,gpu,model
 *   pod lists   name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,
 *               pod_phase,creation_time,deletion_time,scheduled_time
 *               (the multigpu variants carry only the first five columns)
 *
 * The loader is strict because a silently misread trace skews every figure
 * the benchmark and the simulator (cnlab-sim) draw from it: the header must
 * match exactly, every row must have exactly the header's fields, numbers
 * are decimal integers read with full overflow checks, sizes are never
 * negative, and GPU models must be known.  The first problem found stops the
 * load, and the message in the caller's buffer names the file, the 1-based
 * line and the 1-based column (the field number) in the usual compiler form:
 *
 *   openb_pod_list_x.csv:17:4: num_gpu: not a number: "x"
 *
 * Fields are not quoted in the trace, so quoting is not supported: a '"'
 * anywhere is an error.  Lines may end in "\n" or "\r\n", the last line
 * may lack its newline, and an empty line is an error (it is a row with too
 * few fields).
 *
 * Return codes: -CNL_EPARSE for format errors, -CNL_EGPUTYPE for unknown
 * GPU models, -CNL_ELIMIT for a file past the limits below, -CNL_EDUP for a
 * node name used twice, a negated errno for I/O and memory errors (-ENOENT,
 * -EISDIR, -ENOMEM, ...).  The library does not abort on out-of-memory and
 * does not log.
 */
#ifndef CNL_SIM_TRACE_H
#define CNL_SIM_TRACE_H

#include <stddef.h>
#include <stdint.h>

#include "sched/alloc.h"
#include "sched/catalog.h"

/* Explicit limits on untrusted input: rows per file and bytes per line
 * (the real files have at most 10,094 rows and lines below 100 bytes). */
#define CNL_TRACE_MAX_ROWS 10000000
#define CNL_TRACE_MAX_LINE 65536

/*
 * The trace does not disclose the GPU models it calls G1, G2 and G3, so
 * CNLab models them as generic types without MIG whose SM count and VRAM
 * are placeholders, not facts: 80 SMs and 32 GiB.  Only the GPU count of a
 * node and the 1/1000 share of a GPU matter to the trace's workloads.
 */
#define CNL_TRACE_G_SM_COUNT 80
#define CNL_TRACE_G_VRAM_MIB 32768

/* One row of a pod list: a task. */
struct cnl_trace_pod {
	char name[48];      /* "openb-pod-0042"; not stable across files */
	int64_t cpu_milli;  /* CPU request, milli-cores, >= 0 */
	int64_t mem_mib;    /* memory request, MiB, >= 0 */
	int num_gpu;        /* GPUs requested, 0..16 */
	int gpu_milli;      /* share of each GPU, 0..1000 (see below) */
	uint64_t gpu_types; /* bit per catalog type from gpu_spec, 0 = any */
	char qos[16];       /* "LS", "BE", "Burstable", "Guaranteed"; "" in
	                       five-column files */
	char phase[16];     /* pod_phase: "Running", "Failed", "Pending",
	                       "Succeeded"; "" in five-column files */
	/* Seconds, relative to the start of the trace.  scheduled is -1 when
	 * the field is empty (pods that were never scheduled); all three are
	 * -1 in five-column files, which carry no times. */
	int64_t creation, deletion, scheduled;
};

/*
 * cnl_trace_gpu_type - the catalog index for a GPU model as the trace
 * spells it (case-sensitive): T4 -> "T4", P100 -> "P100", V100M16 ->
 * "V100-16GB", V100M32 -> "V100-32GB", A10 -> "A10" (built-in types), and
 * the undisclosed G1, G2, G3 -> site types of the same names.  A G type is
 * added to `cat` on first use (see CNL_TRACE_G_*); a type of that name
 * already in the catalog is used as it is.  Returns the index,
 * -CNL_EGPUTYPE for any other model (or a built-in type missing from
 * `cat`), or cnl_catalog_add()'s error (-CNL_ELIMIT when the catalog is
 * full).
 */
int cnl_trace_gpu_type(struct cnl_catalog *cat, const char *model);

/*
 * cnl_trace_load_nodes - add every node of the node list at `path` to `c`:
 * name sn, cpu_milli, memory_mib, `gpu` GPUs of the type `model`.  A row
 * with gpu 0 and an empty model is a CPU-only node; gpu 0 with a model, or
 * GPUs without a model, is an error.  G types are added to `cat` as needed,
 * so `c` must have been created over this same catalog
 * (cnl_cluster_new(cat, ...)); otherwise -EINVAL.
 *
 * The whole file is read and checked first (format, sizes, models, names
 * that are too long, already in `c` or used twice) and only then are the
 * nodes added, so on any such error `c` is unchanged.  Only if adding fails
 * midway, which takes an out-of-memory error, do the nodes added before it
 * stay in `c`.  G types that the file named stay in `cat` even on error;
 * they are harmless there.
 *
 * Returns the number of nodes added (0 for a file with only the header),
 * or a negative code with a message in `err` (which may be NULL).
 */
int cnl_trace_load_nodes(const char *path, struct cnl_catalog *cat,
                         struct cnl_cluster *c, char *err, size_t errlen);

/*
 * cnl_trace_load_pods - read the pod list at `path` into a new array of
 * pods, in file order.  Two headers are accepted, exactly: the eleven
 * columns above and the first five alone (the multigpu variants).
 * gpu_spec is empty (any type) or model names joined with '|', each mapped
 * with cnl_trace_gpu_type() (so G types may be added to `cat`); a
 * repeated name is harmless.  scheduled_time may be empty; every other
 * field must be present.  A row must describe a possible request (see
 * cnl_trace_pod_req()): 0..16 GPUs, gpu_milli 0..1000, gpu_milli 0 without
 * GPUs, and below 1000 only for one GPU.
 *
 * On success stores the array (NULL when there are no rows; free it with
 * free()) and its length through ret and ret_n, and returns the number of
 * pods.  On failure returns a negative code with a message in `err` and
 * leaves ret and ret_n untouched.
 */
int cnl_trace_load_pods(const char *path, struct cnl_catalog *cat,
                        struct cnl_trace_pod **ret, size_t *ret_n, char *err,
                        size_t errlen);

/*
 * cnl_trace_pod_req - the allocator request for pod `p` of `project`:
 *
 *   num_gpu 0                     CNL_REQ_CPU
 *   num_gpu 1, gpu_milli < 1000   CNL_REQ_BLOCKS, blocks = ceil(gpu_milli
 *                                 / 10), at least 1 (1000 milli = 100
 *                                 blocks, so 460 -> 46 and 55 -> 6)
 *   num_gpu >= 1, gpu_milli 1000  CNL_REQ_WHOLE, gpus = num_gpu
 *
 * with gpu_type CNL_GPU_TYPE_ANY, gpu_types = p->gpu_types, and the CPU and
 * memory of the pod.  Rows that cannot be a request are refused with
 * -CNL_EPARSE: negative sizes, num_gpu outside 0..16, gpu_milli outside
 * 0..1000, gpu_milli below 1000 with more than one GPU, gpu_milli set
 * without GPUs.  A type bit beyond the catalog gives -CNL_EGPUTYPE.
 * `*ret` is untouched on failure.
 */
int cnl_trace_pod_req(const struct cnl_catalog *cat,
                      const struct cnl_trace_pod *p, uint32_t project,
                      struct cnl_alloc_req *ret);

#endif /* CNL_SIM_TRACE_H */
