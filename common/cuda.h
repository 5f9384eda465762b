/*
 * cuda.h - the CUDA runtime services that kernels/ and tiers/ share: device
 * selection, streams, device allocations and copies.  A C API with no CUDA
 * types (a stream is a void *, a cudaStream_t underneath; NULL is the
 * default stream), valid C and C++, so callers need no CUDA headers.
 * common/cuda.cu implements it in a CUDA build, common/cuda_none.c
 * otherwise (every int function -ENODEV, "built without CUDA"; the void
 * ones do nothing).
 *
 * Errors: 0, or the negative errno of the failed CUDA call (cuda_check.h:
 * -ENOMEM for an allocation, -ENODEV for no device or driver, -EINVAL, else
 * -EIO) with a detail (ts_err) naming the call and CUDA's error string.
 * No fault sites.
 */
#ifndef TIER_COMMON_CUDA_H
#define TIER_COMMON_CUDA_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Makes device @gpu current on the calling thread (cudaSetDevice). */
int ts_cuda_use_device(int gpu);

/*
 * Makes @gpu current on the calling thread and creates a non-blocking
 * stream on it in *stream (NULL on failure).
 */
int ts_cuda_stream_open(int gpu, void **stream);

/* Waits for @stream, then destroys it; errors are ignored.  NULL: nothing. */
void ts_cuda_stream_close(void *stream);

/* Waits for the work queued on @stream (cudaStreamSynchronize). */
int ts_cuda_stream_sync(void *stream);

/*
 * cudaMalloc of @len bytes (1 for 0) on the current device into *ptr
 * (NULL on failure).
 */
int ts_cuda_alloc(size_t len, void **ptr);

/* cudaFree; errors are ignored.  NULL: nothing. */
void ts_cuda_free(void *ptr);

/*
 * The calling thread's own default stream (cudaStreamPerThread), as a
 * stream argument: it follows the work on the device's default stream (NULL)
 * as NULL does, but two threads' work on it runs at once.
 */
#define TS_CUDA_STREAM_THREAD ((void *)2)

/*
 * Copies @len bytes from @src to @dst, each host or device memory (h2d,
 * d2h, d2d or h2h: cudaMemcpyDefault), on @stream, and waits for @stream.
 * 0 bytes: 0 without calling CUDA.
 */
int ts_cuda_copy(void *dst, const void *src, size_t len, void *stream);

/*
 * The asynchronous services of a pipelined lane (runtime/optim/optim_gpu.c).
 *
 * ts_cuda_copy_async: queues the copy of ts_cuda_copy on @stream and
 * returns; from pinned host memory (or to it) the copy is a DMA that
 * overlaps the caller and the other streams, from pageable memory CUDA
 * stages it (and may wait).  0 bytes: 0 without calling CUDA.
 */
int ts_cuda_copy_async(void *dst, const void *src, size_t len, void *stream);

/*
 * An event (cudaEventDisableTiming): ts_cuda_event_open creates one in
 * *ev (NULL on failure), _record queues it on @stream (it completes when
 * the work queued before it does), _sync waits for it, and _close
 * destroys it (NULL: nothing; errors ignored).
 */
int ts_cuda_event_open(void **ev);
int ts_cuda_event_record(void *ev, void *stream);
int ts_cuda_event_sync(void *ev);
void ts_cuda_event_close(void *ev);

/*
 * A timing event (the trace's view of a stream): ts_cuda_timer_open
 * creates one in *ev that records the device's time when it completes
 * (closed, recorded and waited for as above); ts_cuda_event_elapsed puts
 * the milliseconds from @from's completion to @to's in *ms (both recorded
 * and complete, @from first).  0 or -EIO with the CUDA call named.
 */
int ts_cuda_timer_open(void **ev);
int ts_cuda_event_elapsed(void *from, void *to, float *ms);

/*
 * Page-locked host memory (cudaHostAlloc, portable): @len bytes (1 for
 * 0) into *ptr (NULL on failure), which the CPU reads and writes and the
 * copy engines reach by DMA.  ts_cuda_host_free: NULL is nothing.
 */
int ts_cuda_host_alloc(size_t len, void **ptr);
void ts_cuda_host_free(void *ptr);

/* What memory @ptr is (cudaPointerGetAttributes): */
enum ts_cuda_mem {
	TS_CUDA_MEM_PAGEABLE = 0, /* host memory CUDA does not know */
	TS_CUDA_MEM_PINNED = 1,   /* page-locked host memory (allocated or registered) */
	TS_CUDA_MEM_DEVICE = 2,   /* device or managed memory */
};
/* The kind of @ptr, or a negative errno (no CUDA: -ENODEV). */
int ts_cuda_mem_kind(const void *ptr);

#ifdef __cplusplus
}
#endif

#endif
