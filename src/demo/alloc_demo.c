/*
 * alloc_demo.c - cnlab-demo: a narrated tour of the two-tier allocator on a
 * small mixed cluster.  It is what `scripts/demo` runs until the platform
 * (cnlabd, the agent and the CLI) exists: every step prints the request,
 * the decision and the rule behind it, then the layout of every GPU.
 *
 *   cnlab-demo                         the narrated tour
 *   cnlab-demo --catalog               print the GPU catalog
 *   cnlab-demo --gpu-types FILE.json   add site GPU types first
 */
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "cnlab/errors.h"
#include "common/json.h"
#include "sched/alloc.h"

static const char *const projects[] = {"-",   "cs231n", "vision",
                                       "nlp", "llm",    "robotics"};
enum { CS231N = 1, VISION, NLP, LLM, ROBOTICS };

static struct cnl_catalog cat;
static struct cnl_cluster *cl;

static const char *place_kind(const struct cnl_alloc *a)
{
	switch (a->kind) {
	case CNL_PLACE_BLOCKS:
		return "blocks";
	case CNL_PLACE_MIG:
		return "MIG instance";
	case CNL_PLACE_MIG_BLOCKS:
		return "blocks in a 1g host instance";
	default:
		return "whole GPUs";
	}
}

static uint32_t ask(const char *what, struct cnl_alloc_req r)
{
	uint32_t id = 0;
	int rc = cnl_alloc_place(cl, &r, &id);

	printf("  %-8s %-34s -> ", projects[r.project], what);
	if (rc < 0) {
		printf("refused: %s (%s)\n", cnl_strerror(rc), cnl_errname(rc));
		return 0;
	}
	const struct cnl_alloc *a = cnl_alloc_get(cl, id);
	const struct cnl_node *n = &cl->nodes[a->node];
	const struct cnl_gpu_type *t = &cat.types[n->gpu_type];
	printf("%s/", n->name);
	if (a->kind == CNL_PLACE_WHOLE) {
		printf("gpus");
		for (int g = 0; g < n->n_gpus; g++)
			if (a->gpu_mask >> g & 1)
				printf(" %d", g);
	} else {
		printf("gpu%d", a->gpu);
	}
	printf(": %s", place_kind(a));
	if (a->kind == CNL_PLACE_MIG || a->kind == CNL_PLACE_MIG_BLOCKS)
		printf(" %s@%d", t->mig[a->profile].name, a->start);
	printf(", %llu MiB VRAM\n",
	       (unsigned long long)cnl_alloc_vram_mib(cl, a));
	return id;
}

static struct cnl_alloc_req blocks(uint32_t p, int n)
{
	return (struct cnl_alloc_req){.kind = CNL_REQ_BLOCKS,
	                              .blocks = n,
	                              .gpu_type = CNL_GPU_TYPE_ANY,
	                              .project = p,
	                              .cpu_milli = 500,
	                              .mem_mib = 2048};
}

static void show(void)
{
	struct cnl_task_mix mix;

	cnl_task_mix_default(&mix);
	printf("\n  layout:\n");
	for (uint32_t i = 0; i < cl->n_nodes; i++) {
		const struct cnl_node *n = &cl->nodes[i];
		const struct cnl_gpu_type *t = &cat.types[n->gpu_type];
		printf("  %s (%s, %d GPUs, cpu %lld/%lld m, fragmentation %.1f "
		       "blocks)\n",
		       n->name, t->name, n->n_gpus, (long long)n->cpu_used,
		       (long long)n->cpu_total, cnl_frag_node(cl, i, &mix));
		for (int gi = 0; gi < n->n_gpus; gi++) {
			const struct cnl_gpu *g = &n->gpus[gi];
			printf("    gpu%d ", gi);
			if (g->n_allocs == 0) {
				printf("empty\n");
				continue;
			}
			if (g->mode == CNL_GPU_BLOCK) {
				char bar[41];
				int fill = g->used * 40 / 100;
				memset(bar, '#', (size_t)fill);
				memset(bar + fill, '.', (size_t)(40 - fill));
				bar[40] = '\0';
				printf("blocks [%s] %3d/100, projects:", bar,
				       g->used);
				for (int k = 0; k < g->n_projs; k++)
					printf(" %s x%d",
					       projects[g->projs[k].project],
					       g->projs[k].allocs);
				printf("\n");
				continue;
			}
			printf("MIG   ");
			for (int s = 0; s < CNL_MIG_COMPUTE_SLICES; s++)
				for (int k = 0; k < g->n_inst; k++) {
					const struct cnl_mig_inst *in =
					    &g->inst[k];
					if (in->start != s)
						continue;
					printf(" [%s@%d %s",
					       t->mig[in->profile].name, s,
					       projects[in->project]);
					if (in->host)
						printf(" %d/14 blocks",
						       in->used);
					printf("]");
				}
			printf("  free compute slices: %d/7\n",
			       7 - __builtin_popcount(g->sm_mask));
		}
	}
	printf("\n");
}

static void print_catalog(void)
{
	printf("%-16s %-7s %5s %9s  MIG profiles (compute/7, memory/8, "
	       "max, starts)\n",
	       "type", "vendor", "SMs", "VRAM MiB");
	for (int i = 0; i < cat.n; i++) {
		const struct cnl_gpu_type *t = &cat.types[i];
		printf("%-16s %-7s %5u %9llu ", t->name, t->vendor, t->sm_count,
		       (unsigned long long)t->vram_mib);
		if (t->n_mig == 0)
			printf(" -");
		for (int k = 0; k < t->n_mig; k++) {
			const struct cnl_mig_profile *p = &t->mig[k];
			printf(" %s(%d/%d,x%d,", p->name, p->compute,
			       p->mem_slots, p->max_instances);
			for (int s = 0; s < 7; s++)
				if (p->starts >> s & 1)
					printf("%d", s);
			printf(")");
		}
		printf("\n");
	}
}

static int load_types(const char *path)
{
	char err[256];
	json_t *v = NULL;
	int rc = cnl_json_load_file(path, &v, err, sizeof(err));

	if (rc < 0) {
		fprintf(stderr, "cnlab-demo: %s\n", err);
		return rc;
	}
	rc = cnl_catalog_add_json(&cat, v, err, sizeof(err));
	json_decref(v);
	if (rc < 0)
		fprintf(stderr, "cnlab-demo: %s: %s\n", path, err);
	return rc;
}

int main(int argc, char **argv)
{
	uint32_t ids[64];
	int n = 0;
	char err[256];
	bool catalog = false;

	cnl_catalog_init(&cat);
	for (int i = 1; i < argc; i++) {
		if (strcmp(argv[i], "--catalog") == 0) {
			catalog = true;
		} else if (strcmp(argv[i], "--gpu-types") == 0 &&
		           i + 1 < argc) {
			if (load_types(argv[++i]) < 0)
				return 1;
		} else {
			fprintf(stderr, "usage: cnlab-demo [--catalog] "
			                "[--gpu-types FILE.json]\n");
			return 2;
		}
	}
	if (catalog) {
		print_catalog();
		return 0;
	}
	if (cnl_cluster_new(&cat, &cl) < 0)
		return 1;
	const struct {
		const char *name, *type;
		int gpus;
	} nodes[] = {{"h100-a", "H100-80GB-SXM", 4},
	             {"a100-a", "A100-40GB", 2},
	             {"l40s-a", "L40S", 2}};
	for (size_t i = 0; i < sizeof(nodes) / sizeof(nodes[0]); i++) {
		struct cnl_node_spec s = {
		    .name = nodes[i].name,
		    .gpu_type = cnl_catalog_find(&cat, nodes[i].type),
		    .n_gpus = nodes[i].gpus,
		    .cpu_milli = 64000,
		    .mem_mib = 512 * 1024,
		    .cluster = "campus",
		    .zone = "dc1",
		    .rack = "r1"};
		if (cnl_cluster_add_node(cl, &s) < 0)
			return 1;
	}
	printf("CNLab two-tier allocator demo: 3 nodes, 8 GPUs.\n\n");

	printf("1. A course: 40 students get one 1%% block each (R1: small "
	       "slices share a GPU).\n");
	for (int i = 0; i < 40; i++) {
		uint32_t id;
		struct cnl_alloc_req r = blocks(CS231N, 1);
		if (cnl_alloc_place(cl, &r, &id) == 0)
			ids[n++] = id;
	}
	printf("  cs231n   40 x 1 block                       -> %d placed\n",
	       n);

	printf("\n2. Research teams ask for more than 14%% (R2: MIG at a "
	       "tenant boundary).\n");
	ids[n++] = ask("25% of an H100", blocks(VISION, 25));
	ids[n++] = ask("50% of an H100", blocks(NLP, 50));
	struct cnl_alloc_req mig = {.kind = CNL_REQ_MIG,
	                            .profile = "3g.20gb",
	                            .gpu_type = CNL_GPU_TYPE_ANY,
	                            .project = ROBOTICS};
	ids[n++] = ask("MIG 3g.20gb by name", mig);

	printf("\n3. Small slices on a MIG GPU go into 1g host instances of "
	       "their project (R3).\n");
	struct cnl_alloc_req small = blocks(VISION, 5);
	small.gpu_type = cnl_catalog_find(&cat, "A100-40GB");
	ids[n++] = ask("5 blocks of an A100", small);
	small.blocks = 8;
	ids[n++] = ask("8 more blocks of an A100", small);
	small.project = NLP;
	small.blocks = 3;
	ids[n++] = ask("3 blocks of an A100", small);

	printf("\n4. Whole GPUs, as a gang on one node (R4).\n");
	struct cnl_alloc_req w = {.kind = CNL_REQ_WHOLE,
	                          .gpus = 2,
	                          .gpu_type = CNL_GPU_TYPE_ANY,
	                          .project = LLM,
	                          .cpu_milli = 16000};
	ids[n++] = ask("2 whole GPUs", w);
	w.gpus = 4;
	ask("4 whole GPUs", w);

	show();

	printf("5. Resize in place: a student grows from 1 to 6 blocks.\n");
	int rc = cnl_alloc_resize(cl, ids[0], 6);
	printf("  cs231n   resize 1 -> 6 blocks                -> %s\n",
	       cnl_strerror(rc));

	printf("\n6. Bad requests are refused and change nothing.\n");
	ask("0 blocks", blocks(NLP, 0));
	ask("101 blocks", blocks(NLP, 101));
	mig.profile = "5g.50gb";
	ask("MIG 5g.50gb", mig);
	mig.profile = "2g.20gb";
	mig.gpu_type = cnl_catalog_find(&cat, "L40S");
	ask("MIG 2g.20gb on an L40S", mig);

	printf("\n7. Everything is released; the invariant checker proves "
	       "nothing leaked.\n");
	for (int i = 0; i < n; i++)
		if (ids[i])
			cnl_alloc_free(cl, ids[i]);
	rc = cnl_cluster_check(cl, err, sizeof(err));
	printf("  allocations left: %u, invariants: %s\n", cl->n_allocs,
	       rc == 0 ? "ok" : err);
	cnl_cluster_free(cl);
	return rc == 0 ? 0 : 1;
}
