/*
 * adamw_cuda_none.c - the contract of adamw_cuda.h in a build without
 * CUDA: every call fails with -ENODEV, "built without CUDA".
 */
#include "config.h"

#include <errno.h>
#include <stddef.h>

#include "common/error.h"
#include "kernels/adamw_cuda.h"

int adamw_cuda_step(const struct tier_adam_params *p, enum tier_dtype moment_dtype,
		    enum tier_dtype grad_dtype, enum tier_dtype out_dtype,
		    const struct adamw_chunk *chunks, size_t nchunks, void *stream)
{
	(void)p;
	(void)moment_dtype;
	(void)grad_dtype;
	(void)out_dtype;
	(void)chunks;
	(void)nchunks;
	(void)stream;
	return ts_err(-ENODEV, "adamw cuda: step: built without CUDA");
}

int adamw_cuda_roofline(enum tier_dtype moment_dtype, enum tier_dtype grad_dtype,
			enum tier_dtype out_dtype, const struct adamw_chunk *chunks, size_t nchunks,
			void *stream)
{
	(void)moment_dtype;
	(void)grad_dtype;
	(void)out_dtype;
	(void)chunks;
	(void)nchunks;
	(void)stream;
	return ts_err(-ENODEV, "adamw cuda: roofline: built without CUDA");
}

int adamw_cuda_grad_check(const struct adamw_chunk *chunks, size_t nchunks, enum tier_dtype dtype,
			  void *stream, double *sumsq, int *nonfinite)
{
	(void)chunks;
	(void)nchunks;
	(void)dtype;
	(void)stream;
	(void)sumsq;
	(void)nonfinite;
	return ts_err(-ENODEV, "adamw cuda: grad check: built without CUDA");
}
