/*
 * devices.c - the public face of device discovery (tiers/gpu.h), GPU
 * buffers (common/cuda.h) and the CUDA update (kernels/adamw_cuda.h).
 */
#include "config.h"

#include <errno.h>
#include <stddef.h>
#include <limits.h>

#include "common/cuda.h"
#include "common/error.h"
#include "kernels/adamw_cuda.h"
#include "tiers/gpu.h"
#include "tierstore/toolkit.h"

int tier_gpu_count(int *count, char *why, size_t whylen)
{
	TS_NONNULL(count);
	ts_err_clear();
	return gpu_count(count, why, whylen > INT_MAX ? INT_MAX : (int)whylen);
}

int tier_gpu_selftest(int index)
{
	ts_err_clear();
	return gpu_selftest(index);
}

/* ------------------------------------------------------------ GPU buffers */

static int use_gpu(int gpu)
{
	if (gpu < 0)
		return ts_err(-ENODEV, "GPU %d: no such device (devices are numbered from 0)", gpu);
	return ts_cuda_use_device(gpu);
}

int tier_gpu_alloc(int gpu, enum tier_gpu_mem kind, size_t len, void **ptr)
{
	int rc;

	TS_NONNULL(ptr);
	*ptr = NULL;
	ts_err_clear();
	if (kind != TIER_GPU_DEVICE && kind != TIER_GPU_PINNED)
		return ts_err(-EINVAL, "tier_gpu_alloc: memory kind %d (TIER_GPU_DEVICE or TIER_GPU_PINNED)",
				(int)kind);
	if ((rc = use_gpu(gpu)))
		return rc;
	return kind == TIER_GPU_DEVICE ? ts_cuda_alloc(len, ptr) : ts_cuda_host_alloc(len, ptr);
}

void tier_gpu_free(enum tier_gpu_mem kind, void *ptr)
{
	if (kind == TIER_GPU_DEVICE)
		ts_cuda_free(ptr);
	else if (kind == TIER_GPU_PINNED)
		ts_cuda_host_free(ptr);
}

int tier_gpu_copy(void *dst, const void *src, size_t len)
{
	ts_err_clear();
	if (len) {
		TS_NONNULL(dst);
		TS_NONNULL(src);
	}
	return ts_cuda_copy(dst, src, len, TS_CUDA_STREAM_THREAD);
}

int tier_gpu_sync(int gpu)
{
	int rc;

	ts_err_clear();
	if ((rc = use_gpu(gpu)))
		return rc;
	return ts_cuda_stream_sync(NULL);
}

/* A count no buffer holds (the fp32 param array is the widest): refused
 * before anything reaches the GPU, as the CPU update refuses it. */
static int gpu_count_check(const struct tier_adam_tensors *t, const char *who)
{
	if (t->n > (size_t)PTRDIFF_MAX / sizeof(float))
		return ts_err(-EOVERFLOW, "%s: n = %zu: the fp32 param array of n elements is more than PTRDIFF_MAX bytes, larger than any buffer",
			      who, t->n);
	return 0;
}

int tier_adam_step_gpu(int gpu, const struct tier_adam_params *p, const struct tier_adam_tensors *t)
{
	struct adamw_chunk c;
	int rc;

	TS_NONNULL(p);
	TS_NONNULL(t);
	ts_err_clear();
	if ((rc = gpu_count_check(t, "tier_adam_step_gpu")) || (rc = use_gpu(gpu)))
		return rc;
	c = adamw_chunk_of(t);
	return adamw_cuda_step(p, t->moment_dtype, t->grad_dtype, t->out_dtype, &c, 1, NULL);
}

int tier_adam_roofline_gpu(int gpu, const struct tier_adam_tensors *t)
{
	struct adamw_chunk c;
	int rc;

	TS_NONNULL(t);
	ts_err_clear();
	if ((rc = gpu_count_check(t, "tier_adam_roofline_gpu")) || (rc = use_gpu(gpu)))
		return rc;
	c = adamw_chunk_of(t);
	return adamw_cuda_roofline(t->moment_dtype, t->grad_dtype,
				   t->param_out ? t->out_dtype : TIER_FP32, &c, 1, NULL);
}
