/*
 * cuda_none.c - the contract of common/cuda.h in a build without CUDA:
 * every int function fails with -ENODEV, "built without CUDA"; the void
 * ones do nothing.
 */
#include "config.h"

#include <errno.h>
#include <stddef.h>

#include "common/cuda.h"
#include "common/error.h"

int ts_cuda_use_device(int gpu)
{
	(void)gpu;
	return ts_err(-ENODEV, "cuda: device: built without CUDA");
}

int ts_cuda_stream_open(int gpu, void **stream)
{
	(void)gpu;
	*stream = NULL;
	return ts_err(-ENODEV, "cuda: stream: built without CUDA");
}

void ts_cuda_stream_close(void *stream)
{
	(void)stream;
}

int ts_cuda_stream_sync(void *stream)
{
	(void)stream;
	return ts_err(-ENODEV, "cuda: sync: built without CUDA");
}

int ts_cuda_alloc(size_t len, void **ptr)
{
	(void)len;
	*ptr = NULL;
	return ts_err(-ENODEV, "cuda: alloc: built without CUDA");
}

void ts_cuda_free(void *ptr)
{
	(void)ptr;
}

int ts_cuda_copy(void *dst, const void *src, size_t len, void *stream)
{
	(void)dst;
	(void)src;
	(void)len;
	(void)stream;
	return ts_err(-ENODEV, "cuda: copy: built without CUDA");
}

int ts_cuda_copy_async(void *dst, const void *src, size_t len, void *stream)
{
	(void)dst;
	(void)src;
	(void)len;
	(void)stream;
	return ts_err(-ENODEV, "cuda: copy: built without CUDA");
}

int ts_cuda_event_open(void **ev)
{
	*ev = NULL;
	return ts_err(-ENODEV, "cuda: event: built without CUDA");
}

int ts_cuda_event_record(void *ev, void *stream)
{
	(void)ev;
	(void)stream;
	return ts_err(-ENODEV, "cuda: event: built without CUDA");
}

int ts_cuda_event_sync(void *ev)
{
	(void)ev;
	return ts_err(-ENODEV, "cuda: event: built without CUDA");
}

void ts_cuda_event_close(void *ev)
{
	(void)ev;
}

int ts_cuda_timer_open(void **ev)
{
	*ev = NULL;
	return ts_err(-ENODEV, "cuda: event: built without CUDA");
}

int ts_cuda_event_elapsed(void *from, void *to, float *ms)
{
	(void)from;
	(void)to;
	*ms = 0;
	return ts_err(-ENODEV, "cuda: event: built without CUDA");
}

int ts_cuda_host_alloc(size_t len, void **ptr)
{
	(void)len;
	*ptr = NULL;
	return ts_err(-ENODEV, "cuda: host alloc: built without CUDA");
}

void ts_cuda_host_free(void *ptr)
{
	(void)ptr;
}

int ts_cuda_mem_kind(const void *ptr)
{
	(void)ptr;
	return ts_err(-ENODEV, "cuda: pointer: built without CUDA");
}
