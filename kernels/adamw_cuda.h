/*
 * adamw_cuda.h - the Adam/AdamW update and the gradient check on a CUDA
 * device, over many tensors ("chunks") at once.  Internal C API: no CUDA
 * types here (the stream is a void *), so C callers need no CUDA headers.
 * kernels/adamw.cu implements it in a CUDA build, kernels/adamw_cuda_none.c
 * (every function -ENODEV, "built without CUDA") otherwise.  Streams,
 * device memory and copies for callers are common/cuda.h's.
 *
 * Results.  The update is adam_elem() of kernels/adam_math.h, the one
 * definition the CPU kernels use, with the per-step scalars computed on the
 * host by adam_consts_init() and passed by value; adamw.cu is compiled
 * without FMA contraction (--fmad=false) and with IEEE division and square
 * root, so for finite data the parameters, moments and parameter copies
 * equal those of the CPU kernels (tier_adam_step) bit for bit.  The gradient
 * check adds the squares in the order kernels/gradcheck.h defines, so its
 * sum equals tier_grad_check()'s called on the chunks in order, bit for bit.
 * (A NaN the arithmetic produces is a NaN on both, but the GPU's canonical
 * NaN, so NaN results may differ in their bits.)
 *
 * Devices and streams.  Every pointer in a chunk is device memory (or
 * managed memory) of the current device, and the work runs on the current
 * device, on @stream (a cudaStream_t; NULL: the default stream).  Any
 * alignment: a chunk whose arrays are all aligned to their 4-element vector
 * (16 bytes for fp32, 8 for 16-bit types) takes vector loads, any other one
 * scalar loads, with the same results.
 *
 * Errors.  0; -EINVAL (with the detail: a dtype not allowed for that array,
 * a NULL array with n > 0, a NULL argument, hyperparameters that
 * tier_adam_step rejects), or the error of a CUDA call (common/cuda_check.h:
 * mostly -EIO, -ENOMEM for an allocation, -ENODEV for no device or driver)
 * with the detail naming the call and CUDA's error string.  Calls with no
 * element to touch return 0 without calling CUDA at all.
 */
#ifndef TIER_KERNELS_ADAMW_CUDA_H
#define TIER_KERNELS_ADAMW_CUDA_H

#include <stddef.h>
#include <stdint.h>

#include "tierstore/kernels.h"

#ifdef __cplusplus
extern "C" {
#endif

/*
 * One tensor of a launch, all device pointers to @n elements: fp32 master
 * parameters, the two moments, the gradient, and an optional copy of the
 * updated parameters (NULL for none).  The dtypes are per launch.
 */
struct adamw_chunk {
	float *param;
	void *exp_avg, *exp_avg_sq;
	const void *grad;
	void *param_out;
	size_t n;
	uint64_t index0; /* the index of element 0 in its tensor (stochastic rounding) */
	/* q8 moments: ceil(n / TIER_Q8_BLOCK) block scales each (then index0
	 * must be a multiple of TIER_Q8_BLOCK); not read otherwise */
	float *exp_avg_scale, *exp_avg_sq_scale;
};

/* The arrays of @t as one chunk. */
static inline struct adamw_chunk adamw_chunk_of(const struct tier_adam_tensors *t)
{
	struct adamw_chunk c = {
		t->param, t->exp_avg, t->exp_avg_sq, t->grad, t->param_out, t->n, t->index0,
		t->exp_avg_scale, t->exp_avg_sq_scale,
	};

	return c;
}

/*
 * One Adam/AdamW step (@p, tier_adam_params semantics) over @nchunks
 * chunks, in place: moments in @moment_dtype (TIER_FP32, TIER_BF16 or
 * TIER_Q8: codes and block scales, struct tier_adam_tensors; the same
 * bytes as the CPU kernels, one thread block per TIER_Q8_BLOCK block),
 * gradients in @grad_dtype (any), parameter copies in @out_dtype (any;
 * ignored when no chunk has a param_out).  Asynchronous: the kernels are
 * queued on @stream and the call returns; the chunk array itself may be
 * reused at once (it travels by value in the launch parameters, up to 48
 * chunks a launch, so many chunks make several launches).  A chunk may be
 * of any size, 0 included.
 */
int adamw_cuda_step(const struct tier_adam_params *p, enum tier_dtype moment_dtype,
		    enum tier_dtype grad_dtype, enum tier_dtype out_dtype,
		    const struct adamw_chunk *chunks, size_t nchunks, void *stream);

/*
 * The update's same-traffic kernel (the roofline of adamw_cuda_step, as
 * tier_adam_roofline is the CPU kernels'): over the same chunks, the same
 * tiles and the same loads and stores of every array (q8: the block
 * scales too), with one integer operation per word in place of the
 * arithmetic, which leaves every array as it was.  Asynchronous on
 * @stream, as adamw_cuda_step.  0, -EINVAL (a dtype, a NULL array), or a
 * CUDA error.
 */
int adamw_cuda_roofline(enum tier_dtype moment_dtype, enum tier_dtype grad_dtype,
			enum tier_dtype out_dtype, const struct adamw_chunk *chunks, size_t nchunks,
			void *stream);

/*
 * The gradient check over the .grad/.n of @nchunks chunks (the other
 * fields are not read), gradients in @dtype: *sumsq gets the sum of the
 * squares of every element (in double), *nonfinite 1 when any element is
 * an inf or a nan (then *sumsq is +inf or nan), else 0.  Synchronous: it
 * queues its kernels on @stream (after the work already there), waits for
 * @stream (cudaStreamSynchronize) and returns the results in host memory.
 * It allocates a small scratch buffer, stream-ordered from a memory pool
 * of its own that keeps freed memory (cudaMallocFromPoolAsync), where the
 * device supports that, else with cudaMalloc.  *sumsq equals, bit for bit, what
 * tier_grad_check() adds to a zeroed tier_grad_stats called on the chunks
 * in order.
 */
int adamw_cuda_grad_check(const struct adamw_chunk *chunks, size_t nchunks, enum tier_dtype dtype,
			  void *stream, double *sumsq, int *nonfinite);

#ifdef __cplusplus
}
#endif

#endif
