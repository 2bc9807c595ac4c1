/*
 * common.h - what the real-GPU checks share: CHECK, the clock, and the
 * share measurement.  A check program keeps four kernels in flight for a
 * few seconds and takes the GPU time of each from its own event pair
 * (alone on the GPU, kernel time is what the events bracket); the share it
 * got is that time over the wall time.
 */
#ifndef CNL_TESTS_GPU_COMMON_H
#define CNL_TESTS_GPU_COMMON_H

#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static int failures;

#define CHECK(cond, ...)                                                     \
	do {                                                                 \
		if (!(cond)) {                                               \
			fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__); \
			fprintf(stderr, __VA_ARGS__);                        \
			fputc('\n', stderr);                                 \
			failures++;                                          \
		} else {                                                     \
			printf("ok   ");                                     \
			printf(__VA_ARGS__);                                 \
			putchar('\n');                                       \
		}                                                            \
	} while (0)

static double wall_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

#define MiB (1ULL << 20)

#endif
