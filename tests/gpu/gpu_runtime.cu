// gpu_runtime.cu - the shim against the CUDA runtime API, which reaches
// the driver through cuGetProcAddress: memory information is the quota,
// cudaMalloc stops at the quota and recovers, and a spinning kernel gets
// the slice's share of GPU time.
//
//   CNLAB_REGION=R LD_PRELOAD=libcnlab-cuda.so gpu_runtime QUOTA PCT
//   gpu_runtime 0 0          without the shim: the real values
#include <cuda_runtime.h>
#include <stdint.h>

extern "C" {
#include "common.h"
}

extern "C" __global__ void spin(long long cycles)
{
	long long t0 = clock64();
	while (clock64() - t0 < cycles)
		;
}

int main(int argc, char **argv)
{
	uint64_t quota = argc > 1 ? strtoull(argv[1], NULL, 10) : 0;
	double pct = argc > 2 ? strtod(argv[2], NULL) : 0;
	size_t f, t;
	void *p[64];
	int n = 0, clock_khz = 0;

	cudaFree(0);
	cudaMemGetInfo(&f, &t);
	if (!quota) {
		CHECK(t > 0 && f <= t, "without the shim: total %zu free %zu", t, f);
		return failures ? 1 : 0;
	}
	CHECK(t == quota, "cudaMemGetInfo total %zu = quota", t);
	while (n < 64 && cudaMalloc(&p[n], 256 * MiB) == cudaSuccess)
		n++;
	CHECK(n == (int)(quota / (256 * MiB)) || n == (int)(quota / (256 * MiB)) - 1,
	      "cudaMalloc stopped at the quota after %d x 256 MiB", n);
	CHECK(cudaGetLastError() == cudaErrorMemoryAllocation,
	      "over quota: cudaErrorMemoryAllocation");
	while (n)
		cudaFree(p[--n]);
	CHECK(cudaMalloc(&p[0], quota / 2) == cudaSuccess, "recovered");
	cudaFree(p[0]);

	cudaDeviceGetAttribute(&clock_khz, cudaDevAttrClockRate, 0);
	{
		cudaEvent_t s[4], e[4];
		double busy = 0, t0 = wall_s(), t1;
		unsigned k = 0;
		for (int i = 0; i < 4; i++) {
			cudaEventCreate(&s[i]);
			cudaEventCreate(&e[i]);
		}
		for (; wall_s() - t0 < 4.0; k++) {
			float ms;
			if (k >= 4) {
				cudaEventSynchronize(e[k % 4]);
				cudaEventElapsedTime(&ms, s[k % 4], e[k % 4]);
				busy += ms / 1e3;
			}
			cudaEventRecord(s[k % 4]);
			spin<<<1, 1>>>((long long)clock_khz * 2);
			cudaEventRecord(e[k % 4]);
		}
		cudaDeviceSynchronize();
		t1 = wall_s();
		for (unsigned i = k - 4; i < k; i++) {
			float ms;
			cudaEventElapsedTime(&ms, s[i % 4], e[i % 4]);
			busy += ms / 1e3;
		}
		CHECK(busy / (t1 - t0) * 100 > pct - 5 && busy / (t1 - t0) * 100 < pct + 5,
		      "runtime API compute share %.1f%% (want %.0f%% +- 5)",
		      busy / (t1 - t0) * 100, pct);
	}
	return failures ? 1 : 0;
}
