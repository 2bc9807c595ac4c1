/*
 * random.c - FGD baseline (see fgd-internal.h): a uniform choice among
 * the feasible nodes, by independent random scores drawn from the cycle's
 * seed, the job and the node (so a replay draws the same); the simulator
 * also picks a fitting GPU at random (CNL_GPU_RANDOM).
 */
#include "sched/policy/fgd-internal.h"

static uint64_t mix64(uint64_t x)
{
	x ^= x >> 30;
	x *= 0xbf58476d1ce4e5b9ULL;
	x ^= x >> 27;
	x *= 0x94d049bb133111ebULL;
	return x ^ (x >> 31);
}

static double random_score(const struct cnl_sched_view *v,
                           const struct cnl_job *j, const struct cnl_plan *plan)
{
	uint64_t h = mix64(v->seed ^ mix64(j->id) ^ mix64(plan->node + 1));
	return (double)(h >> 11) / 9007199254740992.0;
}

const struct cnl_policy_ops cnl_policy_random = {
    .name = "random",
    .summary = "a feasible node and a fitting GPU at random (FGD baseline)",
    .gpu_choice = CNL_GPU_RANDOM,
    .score = random_score,
};
