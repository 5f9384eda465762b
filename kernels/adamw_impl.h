/*
 * adamw_impl.h - what the versions of the CPU Adam/AdamW kernel share
 * (internal to kernels/adamw*.c): element access by dtype, the scalar
 * bodies (the scalar version, and the ragged tails of the SIMD ones), and
 * the table of dtype combinations every version specialises its loop on.
 *
 * Element access goes through memcpy, so an array may have any alignment;
 * compilers turn it into plain loads and stores.  The dtype arguments of
 * the inline functions below are compile-time constants at every call
 * (the ADAMW_DTYPE_CASES expansions), so each combination gets its own loop
 * with no branch on a dtype inside.
 */
#ifndef TIER_KERNELS_ADAMW_IMPL_H
#define TIER_KERNELS_ADAMW_IMPL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "kernels/adam_math.h"
#include "kernels/adamw.h"

#define ADAMW_INLINE static inline __attribute__((always_inline))

/* The "dtype" of an absent param_out. */
#define ADAMW_OUT_NONE 3

/* One number per combination of moment, gradient and copy-out dtypes. */
#define ADAMW_KEY(md, gd, od) ((((int)(md)) * 3 + (int)(gd)) * 4 + (int)(od))

/* X(moment dtype, grad dtype, out dtype) for all 2 x 3 x 4 combinations. */
#define ADAMW_DTYPE_CASES_O(X, M, G) \
	X(M, G, ADAMW_OUT_NONE) X(M, G, TIER_FP32) X(M, G, TIER_BF16) X(M, G, TIER_FP16)
#define ADAMW_DTYPE_CASES_G(X, M)                                              \
	ADAMW_DTYPE_CASES_O(X, M, TIER_FP32)                                   \
	ADAMW_DTYPE_CASES_O(X, M, TIER_BF16) ADAMW_DTYPE_CASES_O(X, M, TIER_FP16)
#define ADAMW_DTYPE_CASES(X) ADAMW_DTYPE_CASES_G(X, TIER_FP32) ADAMW_DTYPE_CASES_G(X, TIER_BF16)

/* The key of @a's combination (adamw_check() has vetted the dtypes). */
static inline int adamw_key(const struct tier_adam_tensors *a)
{
	return ADAMW_KEY(a->moment_dtype, a->grad_dtype,
			 a->param_out ? (int)a->out_dtype : ADAMW_OUT_NONE);
}

/* ------------------------------------------------------- element access */

ADAMW_INLINE float adamw_ld_f32(const void *base, size_t i)
{
	float x;

	memcpy(&x, (const char *)base + i * 4, sizeof(x));
	return x;
}

ADAMW_INLINE void adamw_st_f32(void *base, size_t i, float x)
{
	memcpy((char *)base + i * 4, &x, sizeof(x));
}

ADAMW_INLINE uint16_t adamw_ld_u16(const void *base, size_t i)
{
	uint16_t x;

	memcpy(&x, (const char *)base + i * 2, sizeof(x));
	return x;
}

ADAMW_INLINE void adamw_st_u16(void *base, size_t i, uint16_t x)
{
	memcpy((char *)base + i * 2, &x, sizeof(x));
}

/* Any dtype to fp32 (exact). */
ADAMW_INLINE float adamw_ld(int dt, const void *base, size_t i)
{
	switch (dt) {
	case TIER_BF16:
		return bf16_to_f32(adamw_ld_u16(base, i));
	case TIER_FP16:
		return f16_to_f32(adamw_ld_u16(base, i));
	default:
		return adamw_ld_f32(base, i);
	}
}

/* fp32 to any dtype, rounded to nearest even; ADAMW_OUT_NONE stores nothing. */
ADAMW_INLINE void adamw_st(int dt, void *base, size_t i, float x)
{
	switch (dt) {
	case TIER_FP32:
		adamw_st_f32(base, i, x);
		break;
	case TIER_BF16:
		adamw_st_u16(base, i, f32_to_bf16(x));
		break;
	case TIER_FP16:
		adamw_st_u16(base, i, f32_to_f16(x));
		break;
	default:
		break;
	}
}

/* ------------------------------------------------------- scalar bodies */

/*
 * The update of elements [begin, end): adam_elem() on each, the bf16
 * moments (and a bf16 copy) rounded as c says: stochastically with the
 * element's random bits (adam_math.h, sr_hash32), else to nearest even.
 */
ADAMW_INLINE void adamw_scalar_range(const struct adam_consts *c, const struct tier_adam_tensors *a,
				     size_t begin, size_t end, int md, int gd, int od)
{
	/* In locals: the stores through them could alias *a and *c otherwise. */
	void *const param = a->param, *const exp_avg = a->exp_avg, *const exp_avg_sq = a->exp_avg_sq;
	void *const param_out = a->param_out;
	const void *const grad = a->grad;
	const struct adam_consts k = *c;
	const bool srm = md == TIER_BF16 && k.sr_moments, sro = od == TIER_BF16 && k.sr_out;
	uint64_t idx = a->index0 + begin;
	uint32_t key = srm || sro ? sr_key(k.sr_base, (uint32_t)(idx >> 32)) : 0;

	for (size_t i = begin; i < end; i++, idx++) {
		float g = adamw_ld(gd, grad, i);
		float p = adamw_ld_f32(param, i);
		float m = adamw_ld(md, exp_avg, i);
		float v = adamw_ld(md, exp_avg_sq, i);
		uint32_t r = 0;

		adam_elem(&k, g, &p, &m, &v);
		if (srm || sro) {
			if ((uint32_t)idx == 0)
				key = sr_key(k.sr_base, (uint32_t)(idx >> 32));
			r = sr_hash32(key ^ (uint32_t)idx);
		}
		adamw_st_f32(param, i, p);
		if (srm) {
			adamw_st_u16(exp_avg, i, f32_to_bf16_sr(m, r & 0xffffu));
			adamw_st_u16(exp_avg_sq, i, f32_to_bf16_sr(v, r >> 16));
		} else {
			adamw_st(md, exp_avg, i, m);
			adamw_st(md, exp_avg_sq, i, v);
		}
		if (sro)
			adamw_st_u16(param_out, i, f32_to_bf16_sr(p, sr_out_bits(r)));
		else
			adamw_st(od, param_out, i, p);
	}
}

/* The roofline of elements [begin, end): the same loads and stores, with
 * p += g, m += g, v += g in fp32. */
ADAMW_INLINE void adamw_scalar_roof_range(const struct tier_adam_tensors *a, size_t begin,
					  size_t end, int md, int gd, int od)
{
	void *const param = a->param, *const exp_avg = a->exp_avg, *const exp_avg_sq = a->exp_avg_sq;
	void *const param_out = a->param_out;
	const void *const grad = a->grad;

	for (size_t i = begin; i < end; i++) {
		float g = adamw_ld(gd, grad, i);
		float p = adamw_ld_f32(param, i) + g;
		float m = adamw_ld(md, exp_avg, i) + g;
		float v = adamw_ld(md, exp_avg_sq, i) + g;

		adamw_st_f32(param, i, p);
		adamw_st(md, exp_avg, i, m);
		adamw_st(md, exp_avg_sq, i, v);
		adamw_st(od, param_out, i, p);
	}
}

/* The SIMD versions' bodies (kernels/adamw_avx2.c, adamw_avx512.c). */
void adamw_avx2_kernel(const struct adam_consts *c, const struct tier_adam_tensors *a,
		       size_t begin, size_t end);
void adamw_avx2_roofline(const struct adam_consts *c, const struct tier_adam_tensors *a,
			 size_t begin, size_t end);
void adamw_avx512_kernel(const struct adam_consts *c, const struct tier_adam_tensors *a,
			 size_t begin, size_t end);
void adamw_avx512_roofline(const struct adam_consts *c, const struct tier_adam_tensors *a,
			   size_t begin, size_t end);

#endif
