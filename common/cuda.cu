/*
 * cuda.cu - common/cuda.h on the CUDA runtime: device selection, streams,
 * device allocations and copies, for the kernels, the HBM tier and the
 * optimizer.  Built by nvcc in a CUDA build (common/cuda_none.c otherwise).
 */
#include "config.h"

#include "common/cuda.h"
#include "common/cuda_check.h"

extern "C" int ts_cuda_use_device(int gpu)
{
	int rc = 0;

	TIER_CUDA_CHECK_GOTO(cudaSetDevice(gpu), rc, out);
out:
	return rc;
}

extern "C" int ts_cuda_stream_open(int gpu, void **stream)
{
	cudaStream_t st = NULL;
	int rc = 0;

	*stream = NULL;
	TIER_CUDA_CHECK_GOTO(cudaSetDevice(gpu), rc, out);
	TIER_CUDA_CHECK_GOTO(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking), rc, out);
	*stream = st;
out:
	return rc;
}

extern "C" void ts_cuda_stream_close(void *stream)
{
	if (stream) {
		(void)cudaStreamSynchronize((cudaStream_t)stream);
		(void)cudaStreamDestroy((cudaStream_t)stream);
	}
}

extern "C" int ts_cuda_stream_sync(void *stream)
{
	int rc = 0;

	TIER_CUDA_CHECK_GOTO(cudaStreamSynchronize((cudaStream_t)stream), rc, out);
out:
	return rc;
}

extern "C" int ts_cuda_alloc(size_t len, void **ptr)
{
	int rc = 0;

	*ptr = NULL;
	TIER_CUDA_CHECK_GOTO(cudaMalloc(ptr, len ? len : 1), rc, out);
out:
	return rc;
}

extern "C" void ts_cuda_free(void *ptr)
{
	if (ptr)
		(void)cudaFree(ptr);
}

extern "C" int ts_cuda_copy(void *dst, const void *src, size_t len, void *stream)
{
	int rc = 0;

	if (!len)
		return 0;
	TIER_CUDA_CHECK_GOTO(cudaMemcpyAsync(dst, src, len, cudaMemcpyDefault, (cudaStream_t)stream),
			     rc, out);
	TIER_CUDA_CHECK_GOTO(cudaStreamSynchronize((cudaStream_t)stream), rc, out);
out:
	return rc;
}
