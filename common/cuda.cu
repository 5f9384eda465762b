/*
 * cuda.cu - common/cuda.h on the CUDA runtime: device selection, streams,
 * device allocations and copies, for the kernels, the HBM tier and the
 * optimizer.  Built by nvcc in a CUDA build (common/cuda_none.c otherwise).
 */
#include "config.h"

#include "common/cuda.h"
#include "common/cuda_check.h"

/* A stream argument as CUDA's stream (TS_CUDA_STREAM_THREAD: the
 * thread's own default stream). */
static cudaStream_t stream_of(void *stream)
{
	return stream == TS_CUDA_STREAM_THREAD ? cudaStreamPerThread : (cudaStream_t)stream;
}

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
	TIER_CUDA_CHECK_GOTO(cudaMemcpyAsync(dst, src, len, cudaMemcpyDefault, stream_of(stream)),
			     rc, out);
	TIER_CUDA_CHECK_GOTO(cudaStreamSynchronize(stream_of(stream)), rc, out);
out:
	return rc;
}

extern "C" int ts_cuda_copy_async(void *dst, const void *src, size_t len, void *stream)
{
	int rc = 0;

	if (!len)
		return 0;
	TIER_CUDA_CHECK_GOTO(cudaMemcpyAsync(dst, src, len, cudaMemcpyDefault, (cudaStream_t)stream),
			     rc, out);
out:
	return rc;
}

/* An event with @flags into *ev (NULL on failure). */
static int event_create(unsigned flags, void **ev)
{
	cudaEvent_t e = NULL;
	int rc = 0;

	*ev = NULL;
	TIER_CUDA_CHECK_GOTO(cudaEventCreateWithFlags(&e, flags), rc, out);
	*ev = e;
out:
	return rc;
}

extern "C" int ts_cuda_event_open(void **ev)
{
	return event_create(cudaEventDisableTiming, ev);
}

extern "C" int ts_cuda_timer_open(void **ev)
{
	return event_create(cudaEventDefault, ev);
}

extern "C" int ts_cuda_event_elapsed(void *from, void *to, float *ms)
{
	int rc = 0;

	*ms = 0;
	TIER_CUDA_CHECK_GOTO(cudaEventElapsedTime(ms, (cudaEvent_t)from, (cudaEvent_t)to), rc, out);
out:
	return rc;
}

extern "C" int ts_cuda_event_record(void *ev, void *stream)
{
	int rc = 0;

	TIER_CUDA_CHECK_GOTO(cudaEventRecord((cudaEvent_t)ev, (cudaStream_t)stream), rc, out);
out:
	return rc;
}

extern "C" int ts_cuda_event_sync(void *ev)
{
	int rc = 0;

	TIER_CUDA_CHECK_GOTO(cudaEventSynchronize((cudaEvent_t)ev), rc, out);
out:
	return rc;
}

extern "C" void ts_cuda_event_close(void *ev)
{
	if (ev)
		(void)cudaEventDestroy((cudaEvent_t)ev);
}

extern "C" int ts_cuda_host_alloc(size_t len, void **ptr)
{
	int rc = 0;

	*ptr = NULL;
	TIER_CUDA_CHECK_GOTO(cudaHostAlloc(ptr, len ? len : 1, cudaHostAllocPortable), rc, out);
out:
	return rc;
}

extern "C" void ts_cuda_host_free(void *ptr)
{
	if (ptr)
		(void)cudaFreeHost(ptr);
}

extern "C" int ts_cuda_mem_kind(const void *ptr)
{
	cudaPointerAttributes a;
	int rc = 0;

	TIER_CUDA_CHECK_GOTO(cudaPointerGetAttributes(&a, ptr), rc, out);
	switch (a.type) {
	case cudaMemoryTypeHost:
		return TS_CUDA_MEM_PINNED;
	case cudaMemoryTypeDevice:
	case cudaMemoryTypeManaged:
		return TS_CUDA_MEM_DEVICE;
	default:
		return TS_CUDA_MEM_PAGEABLE;
	}
out:
	return rc;
}
