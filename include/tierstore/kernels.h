/*
 * tierstore/kernels.h - the compute kernels of the public API: the CPU
 * Adam/AdamW update and its roofline, q8 moments, gradient checks,
 * clipping and the dynamic loss scaler.  Part of the toolkit (the calls a
 * benchmark or a program of its own kernels uses; a trainer's optimizer
 * runs them for it): include tierstore/toolkit.h.  Implemented in
 * kernels/, which of the public headers may include this one and
 * tierstore/common.h.
 */
#ifndef TIERSTORE_KERNELS_H
#define TIERSTORE_KERNELS_H

#include "tierstore/common.h"
#include "tierstore/pool.h"

#ifdef __cplusplus
extern "C" {
#endif

/*
 * One step's hyperparameters, with the semantics of torch.optim.AdamW
 * (decoupled = true) and torch.optim.Adam (decoupled = false: the weight
 * decay is an L2 term added to the gradient).  docs/kernels.md gives the
 * formula.
 */
struct tier_adam_params {
	uint32_t size;            /* sizeof, set by tier_adam_params_init */
	double lr, beta1, beta2, eps, weight_decay;
	bool decoupled;
	uint64_t step;            /* 1 for the first step (bias correction) */
	double grad_scale;        /* multiplies every gradient: clip_coef / loss_scale */
	/* bf16 moments and the bf16 parameter copy: enum tier_rounding
	 * (tierstore/common.h) */
	int rounding, out_rounding;
	/* the random stream's seed (stochastic rounding): one per tensor, e.g.
	 * a run seed mixed with the parameter's id */
	uint64_t seed;
};

/* torch.optim.AdamW's defaults (lr 1e-3, betas 0.9/0.999, eps 1e-8, weight
 * decay 0.01, decoupled), step 1, grad_scale 1, round to nearest even,
 * seed 0. */
TIER_API void tier_adam_params_init(struct tier_adam_params *p);

/*
 * The arrays of one update, all of @n elements: fp32 master parameters,
 * moments in @moment_dtype (FP32, BF16 or Q8, rounded as the params'
 * rounding says), the gradient in @grad_dtype (FP32, BF16 or FP16), and an
 * optional copy of the updated parameters (@param_out, NULL for none) in
 * @out_dtype (FP32, BF16 or FP16).  Updated in place, in one pass over
 * memory.  Any alignment.  @index0: the index, in its whole tensor, of
 * element 0 of these arrays (the stochastic rounding's counter; 0 for a
 * whole tensor).
 *
 * Q8 moments (docs/kernels.md, "q8 moments"): @exp_avg is @n signed 8-bit
 * codes, @exp_avg_sq @n unsigned ones, and @exp_avg_scale,
 * @exp_avg_sq_scale are ceil(n / TIER_Q8_BLOCK) floats each, the absolute
 * maximum of each block of TIER_Q8_BLOCK elements (the last block may be
 * partial); @index0 must be a multiple of TIER_Q8_BLOCK, so that the
 * blocks are the same whatever the split of a tensor.  The scale arrays
 * are not read for other moment dtypes.
 */
#define TIER_Q8_BLOCK 256
struct tier_adam_tensors {
	size_t n;
	float *param;
	void *exp_avg, *exp_avg_sq;
	enum tier_dtype moment_dtype;
	const void *grad;
	enum tier_dtype grad_dtype;
	void *param_out;
	enum tier_dtype out_dtype;
	uint64_t index0;
	float *exp_avg_scale, *exp_avg_sq_scale; /* Q8 moments only */
};

/*
 * q8 moments to and from fp32 values: @n codes of exp_avg
 * (TIER_Q8_EXP_AVG, signed) or exp_avg_sq (TIER_Q8_EXP_AVG_SQ) with their
 * ceil(n / TIER_Q8_BLOCK) scales, block 0 starting at element 0.  Decoding
 * is exact (code value times scale, one fp32 multiply); encoding scales
 * each block by its largest |value| and rounds to nearest, as the update
 * does with TIER_ROUND_NEAREST, so decode then encode gives the same
 * codes and scales.  0, -EINVAL (@which, a NULL array), or -EOVERFLOW
 * (@n fp32 values would be more than PTRDIFF_MAX bytes).
 */
#define TIER_Q8_EXP_AVG 0
#define TIER_Q8_EXP_AVG_SQ 1
TIER_API int tier_q8_decode(const void *codes, const float *scales, size_t n, int which,
			    float *out);
TIER_API int tier_q8_encode(const float *in, size_t n, int which, void *codes, float *scales);

/*
 * The CPU Adam/AdamW update over @t, in contiguous runs that @pool's
 * threads claim (NULL: the calling thread alone), with the best SIMD
 * version this CPU has (TIER_SIMD may force one).  0, -EINVAL (a dtype
 * not allowed for that array, a NULL array with n > 0, non-finite
 * hyperparameters), or -EOVERFLOW (n fp32 parameters would be more than
 * PTRDIFF_MAX bytes).
 */
TIER_API int tier_adam_step(struct tier_pool *pool, const struct tier_adam_params *p,
			    const struct tier_adam_tensors *t);

/*
 * The roofline of tier_adam_step: reads and writes exactly the bytes the
 * update does for @t (same runs, same SIMD width), with trivial
 * arithmetic, so step time / roofline time is the update's distance from
 * the memory bound.  It changes the arrays' contents.
 */
TIER_API int tier_adam_roofline(struct tier_pool *pool, const struct tier_adam_tensors *t);

/* The SIMD version tier_adam_step uses: "scalar", "avx2" or "avx512". */
TIER_API const char *tier_adam_isa(void);

/*
 * Gradient checks, one pass: adds the squares of @n elements of @grad
 * (accumulated in double) to @sumsq and sets @nonfinite when any element
 * is inf or nan.  Call once per tensor; the global norm is sqrt(sumsq).
 * 0, -EINVAL (@acc NULL, a dtype not FP32, BF16 or FP16, @grad NULL with
 * n > 0), -EOVERFLOW (@n elements would be more than PTRDIFF_MAX bytes)
 * or @pool's error; @acc is left as it was on an error.
 */
struct tier_grad_stats {
	double sumsq;
	bool nonfinite;
};
TIER_API int tier_grad_check(struct tier_pool *pool, const void *grad, enum tier_dtype dtype,
			     size_t n, struct tier_grad_stats *acc);

/* Clipping by total norm: max_norm / (norm + 1e-6) when that is below 1,
 * else 1 (torch.nn.utils.clip_grad_norm_). */
TIER_API double tier_clip_coef(double total_norm, double max_norm);

/*
 * The dynamic loss scaler (struct tier_loss_scaler, tierstore/common.h):
 * init sets its parameters and state; 0, or -EINVAL naming the bad
 * parameter.
 */
TIER_API int tier_loss_scaler_init(struct tier_loss_scaler *s, double initial_scale,
				   double min_scale, double growth_factor, double backoff_factor,
				   uint32_t growth_interval, uint32_t hysteresis);
/* Feeds one step's overflow flag; returns true when that step must be
 * skipped (it overflowed). */
TIER_API bool tier_loss_scaler_update(struct tier_loss_scaler *s, bool found_inf);

#ifdef __cplusplus
}
#endif

#endif /* TIERSTORE_KERNELS_H */
