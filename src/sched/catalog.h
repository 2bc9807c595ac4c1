/*
 * catalog.h - the GPU catalog: every GPU type CNLab knows, with its SM
 * count, VRAM and, for MIG-capable types, the MIG profile table.
 *
 * A MIG-capable GPU has 7 compute slices and 8 memory slices.  A GPU
 * instance of a profile occupies `compute` compute slices and `mem_slots`
 * memory slices starting at one of the profile's allowed start slots; the
 * allowed starts are the placement geometry NVIDIA's MIG user guide gives
 * (1g at 0..6, 1g with two memory slices and 2g at 0/2/4(/6), 3g at 0/4,
 * 4g and 7g at 0).  An instance at start s uses memory slices
 * [s, s + mem_slots) and compute slices [s, s + compute).
 *
 * The catalog is a value, not a global: the built-in types are copied in by
 * cnl_catalog_init(), and a site adds its own types (from config, as JSON)
 * with cnl_catalog_add_json().  The scheduler library never reads files;
 * the caller loads the JSON.
 */
#ifndef CNL_SCHED_CATALOG_H
#define CNL_SCHED_CATALOG_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define CNL_MIG_COMPUTE_SLICES 7
#define CNL_MIG_MEM_SLICES     8
#define CNL_MIG_MAX_PROFILES   12
#define CNL_CATALOG_MAX_TYPES  64
#define CNL_NAME_MAX           32

/* Blocks a block-hosting 1g MIG instance can hold (seeds: "a 1g MIG slice
 * can host 14 1% blocks"). */
#define CNL_MIG_HOST_BLOCKS 14

struct cnl_mig_profile {
	char name[CNL_NAME_MAX]; /* "1g.10gb", "1g.10gb+me" */
	uint8_t compute;         /* compute slices, 1..7 */
	uint8_t mem_slots;       /* memory slices, 1..8 */
	uint8_t max_instances;   /* at most this many at once on one GPU */
	uint8_t starts;          /* bit s set: start slot s allowed */
	bool media;              /* +me variant: only chosen by name */
	uint64_t mem_mib;        /* usable memory of the instance */
};

struct cnl_gpu_type {
	char name[CNL_NAME_MAX]; /* "H100-80GB-SXM" */
	char vendor[16];         /* "nvidia", "amd", or a site's own */
	uint32_t sm_count;       /* SMs (NVIDIA) or compute units (AMD) */
	uint64_t vram_mib;       /* memory the driver reports */
	uint8_t n_mig;           /* 0: no MIG */
	int8_t host_profile;     /* profile that hosts blocks, or -1 */
	struct cnl_mig_profile mig[CNL_MIG_MAX_PROFILES];
};

struct cnl_catalog {
	uint16_t n;
	struct cnl_gpu_type types[CNL_CATALOG_MAX_TYPES];
};

/* cnl_catalog_init - fill `cat` with the built-in types only. */
void cnl_catalog_init(struct cnl_catalog *cat);

/*
 * cnl_catalog_find - index of the type called `name` (case-insensitive),
 * or -CNL_EGPUTYPE.
 */
int cnl_catalog_find(const struct cnl_catalog *cat, const char *name);

/*
 * cnl_catalog_add - validate `t` and append it.  Errors: -CNL_EDUP (name
 * taken), -CNL_ELIMIT (catalog full), -CNL_ECONFIG (an impossible value:
 * empty name, no VRAM, a profile with 0 or too many slices, a start slot
 * whose instance would run past the last slice, no start slot, 0 or more
 * than 7 instances, duplicate profile name).  The host profile is derived,
 * not taken from `t`.  On success returns the new index.
 */
int cnl_catalog_add(struct cnl_catalog *cat, const struct cnl_gpu_type *t,
                    char *err, size_t errlen);

/*
 * cnl_catalog_add_json - add site types from config.  `v` is one object or
 * an array of objects:
 *   {"name": "T4", "vendor": "nvidia", "sm_count": 40, "vram_mib": 15360,
 *    "mig": [{"name": "1g.5gb", "compute": 1, "mem_slots": 1,
 *             "mem_mib": 4864, "max_instances": 7,
 *             "starts": [0,1,2,3,4,5,6], "media": false}]}
 * "mig" and "vendor" are optional.  Unknown fields and wrong types are
 * refused with -CNL_EFIELD, impossible values with -CNL_ECONFIG, and `err`
 * names the type and field.  All or nothing: on error nothing is added.
 */
int cnl_catalog_add_json(struct cnl_catalog *cat, const json_t *v, char *err,
                         size_t errlen);

/* cnl_mig_find - index of profile `name` in `t`, or -CNL_EPROFILE
 * (-CNL_ENOMIG if `t` has no MIG at all). */
int cnl_mig_find(const struct cnl_gpu_type *t, const char *name);

/*
 * cnl_mig_pick - the smallest profile of `t` (not a media variant) whose
 * compute share and memory share both cover `blocks` percent of the GPU:
 * compute/7 >= blocks/100 and mem_slots/8 >= blocks/100.  Returns the
 * profile index, -CNL_ENOMIG, or -CNL_EBLOCKS when blocks is out of 1..100.
 */
int cnl_mig_pick(const struct cnl_gpu_type *t, int blocks);

#endif /* CNL_SCHED_CATALOG_H */
