/*
 * gpu.cu - CUDA device discovery, a self-test and host memory registration,
 * on the CUDA runtime.
 *
 * cudart is linked statically, so a CUDA build loads on any machine; on one
 * without a driver or device cudaGetDeviceCount() fails and we report zero
 * devices with the reason, never an error.
 */
#include "config.h"

#include <dlfcn.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "common/cuda.h"
#include "common/cuda_check.h"
#include "common/fault.h"
#include "tiers/gpu.h"

/*
 * Why there is no GPU, in words for a user: a machine without a driver
 * gets cudaErrorInsufficientDriver from the runtime, whose own text ("CUDA
 * driver version is insufficient for CUDA runtime version") suggests an
 * old driver when there is none at all.
 */
static void no_gpu_why(cudaError_t e, char *why, int whylen)
{
	int drv = 0, rt = 0;
	void *lib;

	if (e == cudaErrorNoDevice) {
		snprintf(why, (size_t)whylen, "no CUDA device");
		return;
	}
	if (e != cudaErrorInsufficientDriver) {
		snprintf(why, (size_t)whylen, "%s", cudaGetErrorString(e));
		return;
	}
	lib = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_LOCAL);
	if (!lib) {
		snprintf(why, (size_t)whylen, "no CUDA driver found: libcuda.so.1 is not installed");
		return;
	}
	dlclose(lib);
	(void)cudaDriverGetVersion(&drv);
	(void)cudaRuntimeGetVersion(&rt);
	snprintf(why, (size_t)whylen,
		 "the CUDA driver (%d.%d) is older than the CUDA runtime of this build (%d.%d)",
		 drv / 1000, drv % 1000 / 10, rt / 1000, rt % 1000 / 10);
}

extern "C" int gpu_count(int *count, char *why, int whylen)
{
	int n = 0, rc;
	cudaError_t e;

	*count = 0;
	rc = ts_fault_check(TIER_FAULT_GPU_PROBE);
	if (rc)
		return ts_err(rc, "cudaGetDeviceCount: %s", tier_strerror(rc));
	e = cudaGetDeviceCount(&n);
	if (e != cudaSuccess) {
		(void)cudaGetLastError();
		if (why && whylen > 0)
			no_gpu_why(e, why, whylen);
		return 0;
	}
	if (n == 0 && why && whylen > 0)
		snprintf(why, (size_t)whylen, "no CUDA device");
	*count = n;
	return 0;
}

extern "C" int gpu_info(int index, struct ts_gpu_info *out)
{
	cudaDeviceProp prop;
	int n = 0, rc = 0;

	rc = gpu_count(&n, NULL, 0);
	if (rc)
		return rc;
	if (index < 0 || index >= n)
		return ts_err(-ENODEV, "GPU %d: no such device (%d present)", index, n);
	TIER_CUDA_CHECK_GOTO(cudaGetDeviceProperties(&prop, index), rc, out);
	memset(out, 0, sizeof(*out));
	out->index = index;
	snprintf(out->name, sizeof(out->name), "%s", prop.name);
	out->total_mem = prop.totalGlobalMem;
	out->cc_major = prop.major;
	out->cc_minor = prop.minor;
	TIER_CUDA_CHECK_GOTO(cudaDeviceGetPCIBusId(out->pci_bus_id,
						   (int)sizeof(out->pci_bus_id), index),
			     rc, out);
out:
	return rc;
}

__global__ static void selftest_fill(unsigned *p, size_t n, unsigned seed)
{
	size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;

	for (; i < n; i += (size_t)gridDim.x * blockDim.x)
		p[i] = (unsigned)i * 2654435761u ^ seed;
}

extern "C" int gpu_selftest(int index)
{
	const size_t n = 1u << 20;
	const unsigned seed = 0x7165u;
	unsigned *dev = NULL, *host = NULL;
	void *devmem = NULL, *st = NULL;
	cudaStream_t stream;
	int rc = 0, count = 0;
	char why[160] = "";

	if ((rc = gpu_count(&count, why, (int)sizeof(why))))
		return rc;
	if (index < 0 || index >= count)
		return count ? ts_err(-ENODEV, "GPU %d: no such device (%d present)", index, count)
			     : ts_err(-ENODEV, "no GPU: %s", why);
	if ((rc = ts_cuda_use_device(index)) || (rc = ts_cuda_alloc(n * sizeof(unsigned), &devmem)))
		goto out;
	dev = (unsigned *)devmem;
	TIER_CUDA_CHECK_GOTO(cudaMallocHost((void **)&host, n * sizeof(unsigned)), rc, out);
	if ((rc = ts_cuda_stream_open(index, &st)))
		goto out;
	stream = (cudaStream_t)st;
	selftest_fill<<<256, 256, 0, stream>>>(dev, n, seed);
	TIER_CUDA_CHECK_GOTO(cudaGetLastError(), rc, out);
	TIER_CUDA_CHECK_GOTO(cudaMemcpyAsync(host, dev, n * sizeof(unsigned),
					     cudaMemcpyDeviceToHost, stream), rc, out);
	TIER_CUDA_CHECK_GOTO(cudaStreamSynchronize(stream), rc, out);
	for (size_t i = 0; i < n; i++) {
		if (host[i] != ((unsigned)i * 2654435761u ^ seed)) {
			rc = ts_err(-EIO, "GPU %d self-test: word %zu is %#x, expected %#x",
				      index, i, host[i], (unsigned)i * 2654435761u ^ seed);
			break;
		}
	}
out:
	/* Cleanup keeps the first error: failures here are not checked again. */
	ts_cuda_stream_close(st);
	if (host)
		cudaFreeHost(host);
	ts_cuda_free(devmem);
	return rc;
}

extern "C" int gpu_host_register(void *base, uint64_t len, int gpu)
{
	int n = 0, rc = 0;
	cudaError_t e = cudaGetDeviceCount(&n);

	if (e != cudaSuccess) {
		(void)cudaGetLastError();
		return ts_err(-ENODEV, "GPU %d: cannot register host memory: cudaGetDeviceCount: %s",
				gpu, cudaGetErrorString(e));
	}
	if (gpu < 0 || gpu >= n)
		return ts_err(-ENODEV, "GPU %d: no such device (%d present)", gpu, n);
	if ((rc = ts_cuda_use_device(gpu)))
		goto out;
	TIER_CUDA_CHECK_GOTO(cudaHostRegister(base, (size_t)len, cudaHostRegisterPortable), rc, out);
out:
	return rc;
}

extern "C" void gpu_host_unregister(void *base)
{
	if (cudaHostUnregister(base) != cudaSuccess)
		(void)cudaGetLastError();
}
