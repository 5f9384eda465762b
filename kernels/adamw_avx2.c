/*
 * adamw_avx2.c - the AVX2 version of the Adam/AdamW kernel: 8 floats per
 * vector, fp16 through F16C.  Built with -mavx2 -mfma -mf16c (and, as every
 * Adam kernel, -ffp-contract=off: the multiplies and adds stay separate, so
 * the results equal the scalar version's bit for bit); called only where
 * cpuid reports AVX2, FMA and F16C and the OS saves the YMM state.  The
 * loop itself is kernels/adamw_simd.h.
 */
#include "config.h"

#include <immintrin.h>

#include "kernels/adamw_impl.h"

#define ADAMW_W 8
typedef __m256 vf;

ADAMW_INLINE vf v_set1(float x)
{
	return _mm256_set1_ps(x);
}

ADAMW_INLINE vf v_add(vf a, vf b)
{
	return _mm256_add_ps(a, b);
}

ADAMW_INLINE vf v_mul(vf a, vf b)
{
	return _mm256_mul_ps(a, b);
}

ADAMW_INLINE vf v_div(vf a, vf b)
{
	return _mm256_div_ps(a, b);
}

ADAMW_INLINE vf v_sqrt(vf a)
{
	return _mm256_sqrt_ps(a);
}

/* 8 16-bit elements at element @i of @base. */
ADAMW_INLINE __m128i ld_u16x8(const void *base, size_t i)
{
	return _mm_loadu_si128((const __m128i *)(const void *)((const char *)base + i * 2));
}

ADAMW_INLINE void st_u16x8(void *base, size_t i, __m128i h)
{
	_mm_storeu_si128((__m128i *)(void *)((char *)base + i * 2), h);
}

ADAMW_INLINE vf v_ld(int dt, const void *base, size_t i)
{
	switch (dt) {
	case TIER_BF16: {
		/* bf16 is the high half of fp32: interleave with zeros (shuffles,
		 * which Zen 1/2 run on more pipes than shifts) */
		__m128i h = ld_u16x8(base, i), z = _mm_setzero_si128();

		return _mm256_castsi256_ps(
			_mm256_set_m128i(_mm_unpackhi_epi16(z, h), _mm_unpacklo_epi16(z, h)));
	}
	case TIER_FP16:
		return _mm256_cvtph_ps(ld_u16x8(base, i));
	default:
		return _mm256_loadu_ps((const float *)(const void *)((const char *)base + i * 4));
	}
}

/*
 * f32_to_bf16() on 8 lanes of x, an arithmetic result (so a NaN in it is
 * quiet): the high halves of u + 0x7fff + lsb (lsb: bit 16 of u, so that
 * ties go to even), the bias written 0x8000 - (lsb == 0) to spare shifts;
 * a NaN gets no bias, which leaves its high half, quiet bit set, as
 * f32_to_bf16() returns it.  (Cheaper than a blend, which matters on Zen 1,
 * where this conversion is a good part of the loop.)
 */
ADAMW_INLINE __m128i to_bf16(vf x)
{
	__m256i u = _mm256_castps_si256(x);
	__m256i even = _mm256_cmpeq_epi32(_mm256_and_si256(u, _mm256_set1_epi32(0x10000)),
					  _mm256_setzero_si256()); /* -1 where lsb == 0 */
	__m256i nan = _mm256_castps_si256(_mm256_cmp_ps(x, x, _CMP_UNORD_Q));
	__m256i bias = _mm256_andnot_si256(nan, _mm256_add_epi32(_mm256_set1_epi32(0x8000), even));
	__m256i h = _mm256_srli_epi32(_mm256_add_epi32(u, bias), 16);

	/* each lane <= 0xffff: packus is exact */
	return _mm_packus_epi32(_mm256_castsi256_si128(h), _mm256_extracti128_si256(h, 1));
}

ADAMW_INLINE void v_st(int dt, void *base, size_t i, vf x)
{
	switch (dt) {
	case TIER_FP32:
		_mm256_storeu_ps((float *)(void *)((char *)base + i * 4), x);
		break;
	case TIER_BF16:
		st_u16x8(base, i, to_bf16(x));
		break;
	case TIER_FP16:
		st_u16x8(base, i, _mm256_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
		break;
	default:
		break;
	}
}

/* ---------------------------------------------- stochastic rounding */

typedef __m256i vi;

ADAMW_INLINE vi v_mullo(vi x, uint32_t k)
{
	return _mm256_mullo_epi32(x, _mm256_set1_epi32((int)k));
}

/* lo + lane, in each lane */
ADAMW_INLINE vi v_lane_index(uint32_t lo)
{
	return _mm256_add_epi32(_mm256_set1_epi32((int)lo), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

/* sr_hash32's last step, x ^ (x >> 16) */
ADAMW_INLINE vi v_sr_fin(vi x)
{
	return _mm256_xor_si256(x, _mm256_srli_epi32(x, 16));
}

/* sr_hash32 from its first multiply on, before its last step */
ADAMW_INLINE vi v_sr_hash_k1_pre(vi x)
{
	x = _mm256_xor_si256(x, _mm256_srli_epi32(x, 15));
	return v_mullo(x, SR_HASH_K2);
}

/* sr_hash32 from its first multiply on */
ADAMW_INLINE vi v_sr_hash_k1(vi x)
{
	return v_sr_fin(v_sr_hash_k1_pre(x));
}

/* sr_hash32(key ^ idx) of each lane */
ADAMW_INLINE vi v_sr_hash(uint32_t key, vi idx)
{
	vi x = _mm256_xor_si256(idx, _mm256_set1_epi32((int)key));

	x = _mm256_xor_si256(x, _mm256_srli_epi32(x, 16));
	return v_sr_hash_k1(v_mullo(x, SR_HASH_K1));
}

/* sr_lane_split's table (adamw_impl.h) for 8 lanes */
static const uint32_t sr_lane_mul[8][8] __attribute__((aligned(32))) = {
	{ SR_LANE_MUL8(0, 0) }, { SR_LANE_MUL8(1, 0) }, { SR_LANE_MUL8(2, 0) }, { SR_LANE_MUL8(3, 0) },
	{ SR_LANE_MUL8(4, 0) }, { SR_LANE_MUL8(5, 0) }, { SR_LANE_MUL8(6, 0) }, { SR_LANE_MUL8(7, 0) },
};

/* sr_hash32(key ^ (lo + lane)) before its last step (v_sr_fin), @lo a
 * multiple of 8 (sr_lane_split) */
ADAMW_INLINE vi v_sr_bits_al_pre(uint32_t key, uint32_t lo)
{
	uint32_t row, h = sr_lane_split(key, lo, 8, &row);

	return v_sr_hash_k1_pre(_mm256_add_epi32(
		_mm256_load_si256((const __m256i *)(const void *)sr_lane_mul[row]),
		_mm256_set1_epi32((int)h)));
}

/* sr_hash32(key ^ (lo + lane)), @lo a multiple of 8 */
ADAMW_INLINE vi v_sr_bits_al(uint32_t key, uint32_t lo)
{
	return v_sr_fin(v_sr_bits_al_pre(key, lo));
}

/* sr_hash32(key ^ (lo + lane)) */
ADAMW_INLINE vi v_sr_bits(uint32_t key, uint32_t lo)
{
	if (lo % 8 == 0)
		return v_sr_bits_al(key, lo);
	return v_sr_hash(key, v_lane_index(lo));
}

ADAMW_INLINE vi v_lo16(vi r)
{
	return _mm256_and_si256(r, _mm256_set1_epi32(0xffff));
}

ADAMW_INLINE vi v_hi16(vi r)
{
	return _mm256_srli_epi32(r, 16);
}

ADAMW_INLINE vi v_out_bits(vi r)
{
	return _mm256_srli_epi32(v_mullo(r, 0x9e3779b1u), 16);
}

/* f32_to_bf16_sr() on 8 lanes of x, an arithmetic result (a NaN in it is
 * quiet, so adding nothing to it leaves what f32_to_bf16_sr() returns). */
ADAMW_INLINE void v_st_bf16_sr(void *base, size_t i, vf x, vi r16)
{
	__m256i u = _mm256_castps_si256(x);
	__m256i nan = _mm256_castps_si256(_mm256_cmp_ps(x, x, _CMP_UNORD_Q));
	__m256i h = _mm256_srli_epi32(_mm256_add_epi32(u, _mm256_andnot_si256(nan, r16)), 16);

	st_u16x8(base, i, _mm_packus_epi32(_mm256_castsi256_si128(h), _mm256_extracti128_si256(h, 1)));
}

/* ---------------------------------------------- q8 moments */

ADAMW_INLINE vi v_iset1(int k)
{
	return _mm256_set1_epi32(k);
}

/* The rounding bits of q8 codes (adam_math.h, q8_enc_m), (r & 0xffff) << 4
 * for exp_avg and (r >> 16) << 4 for exp_avg_sq, of the random bits r =
 * v_sr_fin(x), from x: r's low half is x's low half ^ its high half, its
 * high half x's, so they are (x << 4 ^ x >> 12) and x >> 12, each & 0xffff0 */
ADAMW_INLINE void v_q8_rnd_pre(vi x, vi *rm, vi *rv)
{
	vi t = _mm256_srli_epi32(x, 12), mask = _mm256_set1_epi32(0xffff0);

	*rm = _mm256_and_si256(_mm256_xor_si256(_mm256_slli_epi32(x, 4), t), mask);
	*rv = _mm256_and_si256(t, mask);
}

ADAMW_INLINE vi v_iand(vi a, vi b)
{
	return _mm256_and_si256(a, b);
}

ADAMW_INLINE vi v_xor1(vi c)
{
	return _mm256_xor_si256(c, _mm256_set1_epi32(1));
}

ADAMW_INLINE vi v_ld_i32(const uint32_t *base, size_t i)
{
	return _mm256_loadu_si256((const __m256i *)(const void *)((const uint32_t *)base + i));
}

ADAMW_INLINE void v_st_i32(uint32_t *base, size_t i, vi r)
{
	_mm256_storeu_si256((__m256i *)(void *)((uint32_t *)base + i), r);
}

ADAMW_INLINE vi v_ld_u8(const void *base, size_t i)
{
	return _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(const void *)((const char *)base + i)));
}

ADAMW_INLINE vi v_ld_s8(const void *base, size_t i)
{
	return _mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)(const void *)((const char *)base + i)));
}

ADAMW_INLINE vi v_bits(vf x)
{
	return _mm256_castps_si256(x);
}

ADAMW_INLINE void v_st_u8(void *base, size_t i, vi c)
{
	/* each lane <= 255: both packs are exact */
	__m128i h = _mm_packus_epi32(_mm256_castsi256_si128(c), _mm256_extracti128_si256(c, 1));

	_mm_storel_epi64((__m128i *)(void *)((char *)base + i), _mm_packus_epi16(h, h));
}

/*
 * The lanes of a, b, c, d (each <= 255) as 32 bytes at @i, in that order:
 * the saturating packs are exact, and leave each 128-bit lane's four
 * elements of a, b, c and d side by side as dwords, which one dword
 * permutation puts in order (4 shuffles where 4 v_st_u8 take 12).
 */
ADAMW_INLINE void v_st_u8x4(void *base, size_t i, vi a, vi b, vi c, vi d)
{
	__m256i x = _mm256_packus_epi16(_mm256_packus_epi32(a, b), _mm256_packus_epi32(c, d));

	_mm256_storeu_si256((__m256i *)(void *)((char *)base + i),
			    _mm256_permutevar8x32_epi32(x, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7)));
}

/* v_st_u8x4 and v_st_u8 of codes with the sign at bit 11, as
 * adamw_avx512.c's: (w & 0x7f) | (w >> 4 & 0x80) on 16-bit lanes. */
ADAMW_INLINE __m256i q8_sign_to_7(__m256i w, __m256i w4)
{
	return _mm256_or_si256(_mm256_and_si256(w, _mm256_set1_epi16(0x7f)),
			       _mm256_and_si256(w4, _mm256_set1_epi16(0x80)));
}

ADAMW_INLINE void v_st_u8x4_sgn(void *base, size_t i, vi a, vi b, vi c, vi d)
{
	__m256i ab = _mm256_packus_epi32(a, b), cd = _mm256_packus_epi32(c, d);
	__m256i x;

	ab = q8_sign_to_7(ab, _mm256_srli_epi16(ab, 4));
	cd = q8_sign_to_7(cd, _mm256_srli_epi16(cd, 4));
	x = _mm256_packus_epi16(ab, cd);
	_mm256_storeu_si256((__m256i *)(void *)((char *)base + i),
			    _mm256_permutevar8x32_epi32(x, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7)));
}

ADAMW_INLINE void v_st_u8_sgn(void *base, size_t i, vi c)
{
	v_st_u8(base, i, _mm256_or_si256(_mm256_and_si256(c, _mm256_set1_epi32(0x7f)),
					 _mm256_and_si256(_mm256_srli_epi32(c, 4), _mm256_set1_epi32(0x80))));
}

ADAMW_INLINE vi v_absbits(vf x)
{
	return _mm256_and_si256(_mm256_castps_si256(x), _mm256_set1_epi32(0x7fffffff));
}

ADAMW_INLINE vi v_imax(vi a, vi b)
{
	return _mm256_max_epi32(a, b); /* lanes < 2^31: signed is unsigned */
}

ADAMW_INLINE uint32_t v_hmax(vi a)
{
	__m128i x = _mm_max_epi32(_mm256_castsi256_si128(a), _mm256_extracti128_si256(a, 1));

	x = _mm_max_epi32(x, _mm_shuffle_epi32(x, 0x4e));
	x = _mm_max_epi32(x, _mm_shuffle_epi32(x, 0xb1));
	return (uint32_t)_mm_cvtsi128_si32(x);
}

/* q8_dec_mag() per lane: normal (mag >= 8) from the bits, else mag * step. */
ADAMW_INLINE vf v_q8_dec_mag(vi mag, uint32_t bias_off, float sub_step)
{
	vi nb = _mm256_slli_epi32(_mm256_add_epi32(mag, _mm256_set1_epi32((int)bias_off)), 20);
	vf sub = _mm256_mul_ps(_mm256_cvtepi32_ps(mag), _mm256_set1_ps(sub_step));
	vi normal = _mm256_cmpgt_epi32(mag, _mm256_set1_epi32(7));

	return _mm256_blendv_ps(sub, _mm256_castsi256_ps(nb), _mm256_castsi256_ps(normal));
}

ADAMW_INLINE vf v_q8_dec_m(vi code, vf scale)
{
	vf y = _mm256_mul_ps(v_q8_dec_mag(_mm256_and_si256(code, _mm256_set1_epi32(0x7f)),
					  Q8_M_BIAS_OFF, Q8_M_SUB_STEP), scale);
	vi sign = _mm256_slli_epi32(_mm256_and_si256(code, _mm256_set1_epi32(0x80)), 24);

	return _mm256_castsi256_ps(_mm256_or_si256(_mm256_castps_si256(y), sign));
}

ADAMW_INLINE vf v_q8_dec_v(vi code, vf scale)
{
	return _mm256_mul_ps(v_q8_dec_mag(code, Q8_V_BIAS_OFF, Q8_V_SUB_STEP), scale);
}

/* q8_enc_mag() per lane, x in [0, 1]. */
ADAMW_INLINE vi v_q8_enc_mag(vf x, vi rnd, uint32_t min_normal, uint32_t bias_off, float sub_mul)
{
	vi u = _mm256_castps_si256(x);
	/* ((u + rnd) >> 20) - bias_off, the rebias before the shift (exact:
	 * a normal x's bits are above bias_off << 20), where it folds into a
	 * constant rnd */
	vi nrm = _mm256_srli_epi32(
		_mm256_add_epi32(u, _mm256_sub_epi32(rnd, _mm256_set1_epi32((int)(bias_off << 20)))),
		20);
	vi y = _mm256_cvttps_epi32(_mm256_mul_ps(x, _mm256_set1_ps(sub_mul)));
	vi sub = _mm256_srli_epi32(_mm256_add_epi32(y, rnd), 20);
	vi is_sub = _mm256_cmpgt_epi32(_mm256_set1_epi32((int)min_normal), u); /* u < 2^31 */

	return _mm256_blendv_epi8(nrm, sub, is_sub);
}

/* x = min(|value| * inv, 1): _mm256_min_ps(a, b) is a < b ? a : b, as q8_enc_*. */
ADAMW_INLINE vi v_q8_enc_m(vf m, vf inv, vi rnd)
{
	vi u = _mm256_castps_si256(m);
	vf x = _mm256_mul_ps(_mm256_castsi256_ps(_mm256_and_si256(u, _mm256_set1_epi32(0x7fffffff))), inv);

	x = _mm256_min_ps(x, _mm256_set1_ps(1.0f));
	return _mm256_or_si256(v_q8_enc_mag(x, rnd, Q8_M_MIN_NORMAL, Q8_M_BIAS_OFF, Q8_M_SUB_MUL),
			       _mm256_slli_epi32(_mm256_srli_epi32(u, 31), 7));
}

ADAMW_INLINE vi v_q8_enc_v(vf v, vf inv, vi rnd)
{
	vf x = _mm256_mul_ps(_mm256_castsi256_ps(v_absbits(v)), inv);

	x = _mm256_min_ps(x, _mm256_set1_ps(1.0f));
	/* a positive value is at least code 1 (q8_enc_v) */
	return _mm256_max_epi32(v_q8_enc_mag(x, rnd, Q8_V_MIN_NORMAL, Q8_V_BIAS_OFF, Q8_V_SUB_MUL),
				_mm256_and_si256(_mm256_castps_si256(_mm256_cmp_ps(x, _mm256_setzero_ps(),
										   _CMP_GT_OQ)),
						 _mm256_set1_epi32(1)));
}

ADAMW_INLINE vi v_imin(vi a, vi b)
{
	return _mm256_min_epi32(a, b); /* lanes < 2^31, as v_imax */
}

ADAMW_INLINE uint32_t v_hmin(vi a)
{
	__m128i x = _mm_min_epi32(_mm256_castsi256_si128(a), _mm256_extracti128_si256(a, 1));

	x = _mm_min_epi32(x, _mm_shuffle_epi32(x, 0x4e));
	x = _mm_min_epi32(x, _mm_shuffle_epi32(x, 0xb1));
	return (uint32_t)_mm_cvtsi128_si32(x);
}

/* The fast path of a q8 block, as adamw_avx512.c's (the rebias folded
 * into @scale2 and @inv2). */
ADAMW_INLINE vf v_q8_dec_m_nrm(vi scode, vf scale2)
{
	/* @scode sign-extended (v_ld_s8), as adamw_avx512.c's */
	vi b = _mm256_and_si256(_mm256_slli_epi32(scode, 20), _mm256_set1_epi32((int)0x87f00000u));

	return _mm256_mul_ps(_mm256_castsi256_ps(b), scale2);
}

ADAMW_INLINE vf v_q8_dec_v_nrm(vi code, vf scale2)
{
	return _mm256_mul_ps(_mm256_castsi256_ps(_mm256_slli_epi32(code, 20)), scale2);
}

/* The code of a normal x, for either moment, exp_avg's with its sign at
 * bit 11, as adamw_avx512.c's */
ADAMW_INLINE vi v_q8_enc_nrm(vf x, vf inv2, vi rnd)
{
	return _mm256_srli_epi32(_mm256_add_epi32(_mm256_castps_si256(_mm256_mul_ps(x, inv2)), rnd), 20);
}

/* Whether every exp_avg code of the block at @cm has a magnitude >= 8 and
 * every exp_avg_sq code at @cv is >= 8: (c + c) is the magnitude times 2,
 * and x >= k is max(x, k) == x. */
ADAMW_INLINE bool v_q8_codes_normal(const void *cm, const void *cv)
{
	__m256i lm = _mm256_set1_epi8((char)0xff), lv = lm;

	for (size_t o = 0; o < TIER_Q8_BLOCK; o += 32) {
		__m256i a = _mm256_loadu_si256((const __m256i *)(const void *)((const char *)cm + o));

		lm = _mm256_min_epu8(lm, _mm256_add_epi8(a, a));
		lv = _mm256_min_epu8(lv, _mm256_loadu_si256((const __m256i *)(const void *)((const char *)cv + o)));
	}
	lm = _mm256_cmpeq_epi8(_mm256_max_epu8(lm, _mm256_set1_epi8(16)), lm);
	lv = _mm256_cmpeq_epi8(_mm256_max_epu8(lv, _mm256_set1_epi8(8)), lv);
	return _mm256_movemask_epi8(_mm256_and_si256(lm, lv)) == -1;
}

#define ADAMW_SIMD_KERNEL adamw_avx2_kernel
#define ADAMW_SIMD_ROOFLINE adamw_avx2_roofline
#include "kernels/adamw_simd.h"
