// spin.cu - a kernel that keeps one SM busy for a number of GPU clock
// cycles; loaded as PTX by gpu_driver.c and linked into gpu_runtime.cu.
extern "C" __global__ void spin(long long cycles)
{
	long long t0 = clock64();
	while (clock64() - t0 < cycles)
		;
}
