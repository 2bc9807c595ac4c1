/*
 * shape.h - GPU shapes as users write them ("h100-25", "a100-3g.20gb",
 * "h100x8", "cpu") turned into allocator requests.
 *
 * Grammar (case-insensitive):
 *   cpu                    no GPU: CPU and memory only
 *   TYPE                   one whole GPU
 *   TYPE-full              one whole GPU
 *   TYPExK                 K whole GPUs of one node (1..16)
 *   TYPE-N  |  TYPE-Npct   N 1% blocks of one GPU (1..100)
 *   TYPE-PROFILE           a dedicated MIG instance, e.g. a100-3g.20gb
 * TYPE is a GPU type of the catalog ("H100-80GB-SXM"), a family that
 * prefixes one or more at a '-' boundary ("h100" = both H100 types,
 * "a100-80gb" = A100-80GB), or "any": every type of the catalog ("any-25"
 * is 25 blocks of whatever GPU; a job's gpu_types then says which types
 * it accepts).  A family matching several types lets the scheduler use
 * any of them; a MIG profile limits "any" to the types that have it.  Every
 * shape stored with a job or profile is re-parsed the same way after a restart,
 * so the text is the record.
 */
#ifndef CNL_SERVER_SHAPE_H
#define CNL_SERVER_SHAPE_H

#include <stddef.h>

#include "sched/alloc.h"
#include "sched/catalog.h"

/* Longest shape text, NUL included. */
#define CNL_SHAPE_MAX 64

/*
 * cnl_shape_parse - fill @ret (kind, blocks, profile, gpus, gpu_type,
 * gpu_types; project, CPU and memory are left 0) from @shape.  The
 * profile pointer points into @shape's storage in @ret_buf (CNL_SHAPE_MAX
 * bytes), which must outlive @ret.  Returns 0, or -CNL_EFIELD with a
 * message naming the problem in @err.
 */
int cnl_shape_parse(const struct cnl_catalog *cat, const char *shape,
                    struct cnl_alloc_req *ret, char *ret_buf, char *err,
                    size_t errlen);

/*
 * cnl_shape_family - the types a type name or family stands for ("h100":
 * both H100 types), as a bit mask over the catalog; 0 when none.  For a
 * job's gpu_types, which narrow its shape.
 */
uint64_t cnl_shape_family(const struct cnl_catalog *cat, const char *name);

/* cnl_shape_type_name - the first type of @req for display
 * ("H100-80GB-SXM"), "any" for a shape of any type, "-" for none. */
const char *cnl_shape_type_name(const struct cnl_catalog *cat,
                                const struct cnl_alloc_req *req);

#endif /* CNL_SERVER_SHAPE_H */
