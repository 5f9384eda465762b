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

/* X(moment dtype, grad dtype, out dtype) for all 2 x 3 x 4 combinations
 * (ADAMW_DTYPE_CASES), and for the 3 x 4 with q8 moments
 * (ADAMW_Q8_CASES). */
#define ADAMW_DTYPE_CASES_O(X, M, G) \
	X(M, G, ADAMW_OUT_NONE) X(M, G, TIER_FP32) X(M, G, TIER_BF16) X(M, G, TIER_FP16)
#define ADAMW_DTYPE_CASES_G(X, M)                                              \
	ADAMW_DTYPE_CASES_O(X, M, TIER_FP32)                                   \
	ADAMW_DTYPE_CASES_O(X, M, TIER_BF16) ADAMW_DTYPE_CASES_O(X, M, TIER_FP16)
#define ADAMW_DTYPE_CASES(X) ADAMW_DTYPE_CASES_G(X, TIER_FP32) ADAMW_DTYPE_CASES_G(X, TIER_BF16)
#define ADAMW_Q8_CASES(X) ADAMW_DTYPE_CASES_G(X, TIER_Q8)

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

/* ------------------------------------------------------- random bits */

/*
 * The random bits of a vector of @w lanes (w a power of 2, at most 2^16)
 * whose first index @lo is a multiple of w, sr_hash32(key ^ (lo + lane))
 * in each lane, with the hash's first xorshift and multiply done once for
 * the vector in scalar registers, less a table row.  lo + lane is lo ^
 * lane, and lane < 2^16 leaves (key ^ lo) >> 16 as it is, so the first
 * xorshift gives s ^ lane, s = t ^ (t >> 16), t = key ^ lo.  The bits of s
 * at and above w and those below are apart:
 *   s ^ lane = (s & -w) + ((s & (w - 1)) ^ lane),
 * and the first multiply, modulo 2^32, is
 *   (s & -w) * K1 + ((s & (w - 1)) ^ lane) * K1.
 * sr_lane_split returns the first term and
 * sets *row to s & (w - 1); the second is row *row of a constant table,
 * SR_LANE_MUL(row, lane) (each SIMD file's sr_lane_mul).  A broadcast and
 * an add then stand for the hash's first four vector operations, and no
 * lane index is kept.
 */
#define SR_LANE_MUL(c, l) ((uint32_t)((c) ^ (l)) * SR_HASH_K1)
#define SR_LANE_MUL8(c, l)                                                                  \
	SR_LANE_MUL(c, (l) + 0), SR_LANE_MUL(c, (l) + 1), SR_LANE_MUL(c, (l) + 2),          \
		SR_LANE_MUL(c, (l) + 3), SR_LANE_MUL(c, (l) + 4), SR_LANE_MUL(c, (l) + 5),  \
		SR_LANE_MUL(c, (l) + 6), SR_LANE_MUL(c, (l) + 7)

ADAMW_INLINE uint32_t sr_lane_split(uint32_t key, uint32_t lo, uint32_t w, uint32_t *row)
{
	uint32_t t = key ^ lo, s = t ^ (t >> 16);

	*row = s & (w - 1u);
	return (s & ~(w - 1u)) * SR_HASH_K1;
}

/* ------------------------------------------------------- q8 moments */

/*
 * q8 moments (adam_math.h, docs/kernels.md "q8 moments"): the update of
 * one block, elements [begin, end) with begin a multiple of TIER_Q8_BLOCK
 * (index0 is one too, so the block is the tensor's) and end - begin <=
 * TIER_Q8_BLOCK: decode the block's moments, adam_elem() per element (the
 * parameters and their copy stored as for the other moment dtypes), the
 * updated fp32 moments kept in buffers, their largest magnitudes taken
 * (as integers on the bits, sign cleared: order-free, a NaN wins), then
 * the scales (q8_scale) and the codes stored.  The scalar code below is
 * the definition; the SIMD versions split the same work into vectors.
 */

ADAMW_INLINE uint32_t adamw_ld_u8(const void *base, size_t i)
{
	return ((const unsigned char *)base)[i];
}

ADAMW_INLINE void adamw_st_u8(void *base, size_t i, uint32_t x)
{
	((unsigned char *)base)[i] = (unsigned char)x;
}

/* The key of the random stream of the block starting at element @begin
 * (a block never crosses a multiple of 2^32 in the index: 2^32 is a
 * multiple of TIER_Q8_BLOCK, and so is index0). */
ADAMW_INLINE uint32_t adamw_q8_key(const struct adam_consts *c, const struct tier_adam_tensors *a,
				   size_t begin)
{
	return sr_key(c->sr_base, (uint32_t)((a->index0 + begin) >> 32));
}

/* Pass 1 of element @i (scalar): the update of the parameter and its copy;
 * the updated moments into *mo, *vo; the random bits @r (stochastic). */
ADAMW_INLINE void adamw_q8_elem(const struct adam_consts *k, const struct tier_adam_tensors *a,
				size_t i, float sm, float sv, uint32_t r, int gd, int od, bool sro,
				float *mo, float *vo)
{
	float g = adamw_ld(gd, a->grad, i);
	float p = adamw_ld_f32(a->param, i);
	float m = q8_dec_m(adamw_ld_u8(a->exp_avg, i), sm);
	float v = q8_dec_v(adamw_ld_u8(a->exp_avg_sq, i), sv);

	adam_elem(k, g, &p, &m, &v);
	adamw_st_f32(a->param, i, p);
	if (sro)
		adamw_st_u16(a->param_out, i, f32_to_bf16_sr(p, sr_out_bits(r)));
	else
		adamw_st(od, a->param_out, i, p);
	*mo = m;
	*vo = v;
}

/* Pass 2 of element @i (scalar): the codes of the updated moments @m, @v. */
ADAMW_INLINE void adamw_q8_store(const struct tier_adam_tensors *a, size_t i, float m, float v,
				 float invm, float invv, bool srm, uint32_t r)
{
	uint32_t rm = srm ? (r & 0xffffu) << 4 : Q8_RND_NEAREST;
	uint32_t rv = srm ? (r >> 16) << 4 : Q8_RND_NEAREST;

	adamw_st_u8(a->exp_avg, i, invm != 0.0f ? q8_enc_m(m, invm, rm) : 0u);
	adamw_st_u8(a->exp_avg_sq, i, invv != 0.0f ? q8_enc_v(v, invv, rv) : 0u);
}

/* The scales of block @blk from its largest magnitudes' bits; *invm, *invv
 * for the codes (0: all codes 0). */
ADAMW_INLINE void adamw_q8_scales(const struct tier_adam_tensors *a, size_t blk, uint32_t mxm,
				  uint32_t mxv, float *invm, float *invv)
{
	adamw_st_f32(a->exp_avg_scale, blk, q8_scale(mxm, invm));
	adamw_st_f32(a->exp_avg_sq_scale, blk, q8_scale(mxv, invv));
}

ADAMW_INLINE void adamw_q8_block_scalar(const struct adam_consts *c,
					const struct tier_adam_tensors *a, size_t begin,
					size_t end, int gd, int od)
{
	const struct adam_consts k = *c;
	const bool srm = k.sr_moments, sro = od == TIER_BF16 && k.sr_out;
	const size_t blk = begin / TIER_Q8_BLOCK;
	const float sm = adamw_ld_f32(a->exp_avg_scale, blk), sv = adamw_ld_f32(a->exp_avg_sq_scale, blk);
	const uint32_t key = srm || sro ? adamw_q8_key(&k, a, begin) : 0;
	const uint32_t lo = (uint32_t)(a->index0 + begin);
	float mb[TIER_Q8_BLOCK], vb[TIER_Q8_BLOCK], invm, invv;
	uint32_t mxm = 0, mxv = 0;

	for (size_t i = begin; i < end; i++) {
		uint32_t r = srm || sro ? sr_hash32(key ^ (lo + (uint32_t)(i - begin))) : 0;
		uint32_t um, uv;

		adamw_q8_elem(&k, a, i, sm, sv, r, gd, od, sro, &mb[i - begin], &vb[i - begin]);
		um = f32_bits(mb[i - begin]) & 0x7fffffffu;
		uv = f32_bits(vb[i - begin]) & 0x7fffffffu;
		mxm = um > mxm ? um : mxm;
		mxv = uv > mxv ? uv : mxv;
	}
	adamw_q8_scales(a, blk, mxm, mxv, &invm, &invv);
	for (size_t i = begin; i < end; i++) {
		uint32_t r = srm ? sr_hash32(key ^ (lo + (uint32_t)(i - begin))) : 0;

		adamw_q8_store(a, i, mb[i - begin], vb[i - begin], invm, invv, srm, r);
	}
}

/* The blocks of [begin, end): begin a multiple of TIER_Q8_BLOCK, end too or n. */
ADAMW_INLINE void adamw_q8_scalar_range(const struct adam_consts *c,
					const struct tier_adam_tensors *a, size_t begin,
					size_t end, int gd, int od)
{
	for (size_t b = begin; b < end; b += TIER_Q8_BLOCK)
		adamw_q8_block_scalar(c, a, b, end - b < TIER_Q8_BLOCK ? end : b + TIER_Q8_BLOCK, gd, od);
}

/* The roofline of q8 elements [begin, end) (block-aligned as above): the
 * same loads and stores, codes ^ 1, the scales' last bit flipped (so they
 * stay realistic over repeated runs), p += g. */
ADAMW_INLINE void adamw_q8_roof_elems(const struct tier_adam_tensors *a, size_t begin, size_t end,
				      int gd, int od)
{
	for (size_t i = begin; i < end; i++) {
		float g = adamw_ld(gd, a->grad, i);
		float p = adamw_ld_f32(a->param, i) + g;

		adamw_st_f32(a->param, i, p);
		adamw_st_u8(a->exp_avg, i, adamw_ld_u8(a->exp_avg, i) ^ 1u);
		adamw_st_u8(a->exp_avg_sq, i, adamw_ld_u8(a->exp_avg_sq, i) ^ 1u);
		adamw_st(od, a->param_out, i, p);
	}
}

ADAMW_INLINE void adamw_q8_roof_scales(const struct tier_adam_tensors *a, size_t begin, size_t end)
{
	for (size_t b = begin / TIER_Q8_BLOCK; b * TIER_Q8_BLOCK < end; b++) {
		adamw_st_f32(a->exp_avg_scale, b, f32_from_bits(f32_bits(adamw_ld_f32(a->exp_avg_scale, b)) ^ 1u));
		adamw_st_f32(a->exp_avg_sq_scale, b, f32_from_bits(f32_bits(adamw_ld_f32(a->exp_avg_sq_scale, b)) ^ 1u));
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
