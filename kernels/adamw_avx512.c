/*
 * adamw_avx512.c - the AVX-512 version of the Adam/AdamW kernel: 16 floats
 * per vector, the AVX2 version (kernels/adamw_avx2.c) widened.  Built with
 * -mavx512f -mavx512bw -mavx512vl -mf16c (and -ffp-contract=off: no fused
 * multiply-adds, so the results equal the scalar version's bit for bit);
 * called only where cpuid reports AVX-512 F, BW and VL and the OS saves
 * the ZMM state.  The loop itself is kernels/adamw_simd.h.
 */
#include "config.h"

#include <immintrin.h>

#include "kernels/adamw_impl.h"

#define ADAMW_W 16
typedef __m512 vf;

ADAMW_INLINE vf v_set1(float x)
{
	return _mm512_set1_ps(x);
}

ADAMW_INLINE vf v_add(vf a, vf b)
{
	return _mm512_add_ps(a, b);
}

ADAMW_INLINE vf v_mul(vf a, vf b)
{
	return _mm512_mul_ps(a, b);
}

ADAMW_INLINE vf v_div(vf a, vf b)
{
	return _mm512_div_ps(a, b);
}

ADAMW_INLINE vf v_sqrt(vf a)
{
	return _mm512_sqrt_ps(a);
}

/* 16 16-bit elements at element @i of @base. */
ADAMW_INLINE __m256i ld_u16x16(const void *base, size_t i)
{
	return _mm256_loadu_si256((const __m256i *)(const void *)((const char *)base + i * 2));
}

ADAMW_INLINE void st_u16x16(void *base, size_t i, __m256i h)
{
	_mm256_storeu_si256((__m256i *)(void *)((char *)base + i * 2), h);
}

ADAMW_INLINE vf v_ld(int dt, const void *base, size_t i)
{
	switch (dt) {
	case TIER_BF16:
		return _mm512_castsi512_ps(
			_mm512_slli_epi32(_mm512_cvtepu16_epi32(ld_u16x16(base, i)), 16));
	case TIER_FP16:
		return _mm512_cvtph_ps(ld_u16x16(base, i));
	default:
		return _mm512_loadu_ps((const float *)(const void *)((const char *)base + i * 4));
	}
}

/*
 * f32_to_bf16() on 16 lanes: the high halves of u + 0x7fff + lsb (lsb: bit
 * 16 of u, so that ties go to even), the bias written 0x8000 - (lsb == 0);
 * a NaN lane is u with the quiet bit set instead.  The results are in the
 * low halves of the 32-bit lanes.
 */
ADAMW_INLINE __m512i to_bf16(vf x)
{
	__m512i u = _mm512_castps_si512(x);
	__mmask16 even = _mm512_testn_epi32_mask(u, _mm512_set1_epi32(0x10000)); /* lsb == 0 */
	__mmask16 nan = _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q);
	__m512i r = _mm512_add_epi32(u, _mm512_set1_epi32(0x8000));

	r = _mm512_mask_sub_epi32(r, even, r, _mm512_set1_epi32(1));
	r = _mm512_mask_or_epi32(r, nan, u, _mm512_set1_epi32(0x00400000));
	return _mm512_srli_epi32(r, 16);
}

ADAMW_INLINE void v_st(int dt, void *base, size_t i, vf x)
{
	switch (dt) {
	case TIER_FP32:
		_mm512_storeu_ps((float *)(void *)((char *)base + i * 4), x);
		break;
	case TIER_BF16:
		/* vpmovdw keeps the low 16 bits of each lane: exact, as each is <= 0xffff */
		st_u16x16(base, i, _mm512_cvtepi32_epi16(to_bf16(x)));
		break;
	case TIER_FP16:
		st_u16x16(base, i, _mm512_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
		break;
	default:
		break;
	}
}

/* ---------------------------------------------- stochastic rounding */

typedef __m512i vi;

ADAMW_INLINE vi v_mullo(vi x, uint32_t k)
{
	return _mm512_mullo_epi32(x, _mm512_set1_epi32((int)k));
}

/*
 * x >> 16 and x >> 24 in each 32-bit lane, and x << 24 of a lane < 256,
 * as byte shuffles: they run on port 5, where the shifts of 512-bit
 * vectors take port 0, with the multiplies, the divider's uops and the
 * other shifts.
 */
ADAMW_INLINE vi v_srl16(vi x)
{
	return _mm512_shuffle_epi8(x, _mm512_set4_epi32((int)0x80800f0eu, (int)0x80800b0au,
							(int)0x80800706u, (int)0x80800302u));
}

ADAMW_INLINE vi v_srl24(vi x)
{
	return _mm512_shuffle_epi8(x, _mm512_set4_epi32((int)0x8080800fu, (int)0x8080800bu,
							(int)0x80808007u, (int)0x80808003u));
}

ADAMW_INLINE vi v_shl24_u8(vi x)
{
	return _mm512_shuffle_epi8(x, _mm512_set4_epi32((int)0x0c808080u, (int)0x08808080u,
							(int)0x04808080u, (int)0x00808080u));
}

/* lo + lane, in each lane */
ADAMW_INLINE vi v_lane_index(uint32_t lo)
{
	return _mm512_add_epi32(_mm512_set1_epi32((int)lo),
				_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15));
}

/* sr_hash32's last step, x ^ (x >> 16) */
ADAMW_INLINE vi v_sr_fin(vi x)
{
	return _mm512_xor_si512(x, v_srl16(x));
}

/* sr_hash32 from its first multiply on, before its last step */
ADAMW_INLINE vi v_sr_hash_k1_pre(vi x)
{
	x = _mm512_xor_si512(x, _mm512_srli_epi32(x, 15));
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
	vi x = _mm512_xor_si512(idx, _mm512_set1_epi32((int)key));

	x = _mm512_xor_si512(x, v_srl16(x));
	return v_sr_hash_k1(v_mullo(x, SR_HASH_K1));
}

/* sr_lane_split's table (adamw_impl.h) for 16 lanes */
#define SR_ROW(c) { SR_LANE_MUL8(c, 0), SR_LANE_MUL8(c, 8) }
static const uint32_t sr_lane_mul[16][16] __attribute__((aligned(64))) = {
	SR_ROW(0), SR_ROW(1), SR_ROW(2),  SR_ROW(3),  SR_ROW(4),  SR_ROW(5),  SR_ROW(6),  SR_ROW(7),
	SR_ROW(8), SR_ROW(9), SR_ROW(10), SR_ROW(11), SR_ROW(12), SR_ROW(13), SR_ROW(14), SR_ROW(15),
};
#undef SR_ROW

/* sr_hash32(key ^ (lo + lane)) before its last step (v_sr_fin), @lo a
 * multiple of 16 (sr_lane_split) */
ADAMW_INLINE vi v_sr_bits_al_pre(uint32_t key, uint32_t lo)
{
	uint32_t row, h = sr_lane_split(key, lo, 16, &row);

	return v_sr_hash_k1_pre(_mm512_add_epi32(_mm512_load_si512((const void *)sr_lane_mul[row]),
						 _mm512_set1_epi32((int)h)));
}

/* sr_hash32(key ^ (lo + lane)), @lo a multiple of 16 */
ADAMW_INLINE vi v_sr_bits_al(uint32_t key, uint32_t lo)
{
	return v_sr_fin(v_sr_bits_al_pre(key, lo));
}

/* sr_hash32(key ^ (lo + lane)) */
ADAMW_INLINE vi v_sr_bits(uint32_t key, uint32_t lo)
{
	if (lo % 16 == 0)
		return v_sr_bits_al(key, lo);
	return v_sr_hash(key, v_lane_index(lo));
}

ADAMW_INLINE vi v_lo16(vi r)
{
	return _mm512_and_si512(r, _mm512_set1_epi32(0xffff));
}

ADAMW_INLINE vi v_hi16(vi r)
{
	return _mm512_srli_epi32(r, 16);
}

ADAMW_INLINE vi v_out_bits(vi r)
{
	return _mm512_srli_epi32(v_mullo(r, 0x9e3779b1u), 16);
}

/* f32_to_bf16_sr() on 16 lanes: a NaN keeps its high half, quiet bit set. */
ADAMW_INLINE void v_st_bf16_sr(void *base, size_t i, vf x, vi r16)
{
	__m512i u = _mm512_castps_si512(x);
	__mmask16 nan = _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q);
	__m512i r = _mm512_add_epi32(u, r16);

	r = _mm512_mask_or_epi32(r, nan, u, _mm512_set1_epi32(0x00400000));
	st_u16x16(base, i, _mm512_cvtepi32_epi16(_mm512_srli_epi32(r, 16)));
}

/* ---------------------------------------------- q8 moments */

ADAMW_INLINE vi v_iset1(int k)
{
	return _mm512_set1_epi32(k);
}

/* The rounding bits of q8 codes (adam_math.h, q8_enc_m), (r & 0xffff) << 4
 * for exp_avg and (r >> 16) << 4 for exp_avg_sq, of the random bits r =
 * v_sr_fin(x), from x: r's low half is x's low half ^ its high half, its
 * high half x's, so they are (x << 4 ^ x >> 12) and x >> 12, each &
 * 0xffff0 (ternary logic 0x28: (a ^ b) & c) */
ADAMW_INLINE void v_q8_rnd_pre(vi x, vi *rm, vi *rv)
{
	vi t = _mm512_srli_epi32(x, 12), mask = _mm512_set1_epi32(0xffff0);

	*rm = _mm512_ternarylogic_epi32(_mm512_slli_epi32(x, 4), t, mask, 0x28);
	*rv = _mm512_and_si512(t, mask);
}

ADAMW_INLINE vi v_iand(vi a, vi b)
{
	return _mm512_and_si512(a, b);
}

ADAMW_INLINE vi v_xor1(vi c)
{
	return _mm512_xor_si512(c, _mm512_set1_epi32(1));
}

ADAMW_INLINE vi v_ld_i32(const uint32_t *base, size_t i)
{
	return _mm512_loadu_si512((const void *)((const uint32_t *)base + i));
}

ADAMW_INLINE void v_st_i32(uint32_t *base, size_t i, vi r)
{
	_mm512_storeu_si512((void *)((uint32_t *)base + i), r);
}

ADAMW_INLINE vi v_ld_u8(const void *base, size_t i)
{
	return _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(const void *)((const char *)base + i)));
}

ADAMW_INLINE vi v_ld_s8(const void *base, size_t i)
{
	return _mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(const void *)((const char *)base + i)));
}

ADAMW_INLINE vi v_bits(vf x)
{
	return _mm512_castps_si512(x);
}

ADAMW_INLINE void v_st_u8(void *base, size_t i, vi c)
{
	/* vpmovdb keeps the low byte of each lane: exact, each is <= 255 */
	_mm_storeu_si128((__m128i *)(void *)((char *)base + i), _mm512_cvtepi32_epi8(c));
}

/*
 * The lanes of a, b, c, d (each <= 255) as 64 bytes at @i, in that order:
 * the saturating packs are exact, and leave each 128-bit lane's four
 * elements of a, b, c and d side by side as dwords, which one dword
 * permutation puts in order (3 shuffles where 4 vpmovdb take 8).
 */
ADAMW_INLINE void v_st_u8x4(void *base, size_t i, vi a, vi b, vi c, vi d)
{
	__m512i ab = _mm512_packus_epi32(a, b), cd = _mm512_packus_epi32(c, d);
	__m512i x = _mm512_packus_epi16(ab, cd);
	const __m512i order = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);

	_mm512_storeu_si512((void *)((char *)base + i), _mm512_permutexvar_epi32(order, x));
}

/*
 * v_st_u8x4 and v_st_u8 of codes with the sign at bit 11 (v_q8_enc_nrm),
 * stored with it at bit 7: after the first pack each 16-bit lane is
 * sign << 11 | code (code < 128), and (w & 0x7f) | (w >> 4 & 0x80) is the
 * byte, one shift and one ternary logic operation (0xe4: c ? a : b) for
 * two vectors.
 */
ADAMW_INLINE __m512i q8_sign_to_7(__m512i w, __m512i w4)
{
	return _mm512_ternarylogic_epi32(w, w4, _mm512_set1_epi16(0x7f), 0xe4);
}

ADAMW_INLINE void v_st_u8x4_sgn(void *base, size_t i, vi a, vi b, vi c, vi d)
{
	__m512i ab = _mm512_packus_epi32(a, b), cd = _mm512_packus_epi32(c, d);
	__m512i x;
	const __m512i order = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);

	ab = q8_sign_to_7(ab, _mm512_srli_epi16(ab, 4));
	cd = q8_sign_to_7(cd, _mm512_srli_epi16(cd, 4));
	x = _mm512_packus_epi16(ab, cd);
	_mm512_storeu_si512((void *)((char *)base + i), _mm512_permutexvar_epi32(order, x));
}

ADAMW_INLINE void v_st_u8_sgn(void *base, size_t i, vi c)
{
	v_st_u8(base, i, _mm512_ternarylogic_epi32(c, _mm512_srli_epi32(c, 4), _mm512_set1_epi32(0x7f), 0xe4));
}

ADAMW_INLINE vi v_absbits(vf x)
{
	return _mm512_and_si512(_mm512_castps_si512(x), _mm512_set1_epi32(0x7fffffff));
}

ADAMW_INLINE vi v_imax(vi a, vi b)
{
	return _mm512_max_epi32(a, b); /* lanes < 2^31: signed is unsigned */
}

ADAMW_INLINE uint32_t v_hmax(vi a)
{
	return (uint32_t)_mm512_reduce_max_epi32(a);
}

/*
 * q8_dec_mag() on 16 lanes.  A normal code's value is the float with bits
 * (mag + bias_off) << 20; a subnormal one's (mag < 8) is mag * sub_step,
 * computed as the normal value of mag + 8, 2^(1-B) * (1 + mag/8), less
 * 2^(1-B) = 8 * sub_step: exact (Sterbenz: the two are within a factor of
 * 2), +0 for mag 0, and no integer-to-float conversion.
 */
ADAMW_INLINE vf v_q8_dec_mag(vi mag, uint32_t bias_off, float sub_step)
{
	vi nb = _mm512_slli_epi32(_mm512_add_epi32(mag, _mm512_set1_epi32((int)bias_off)), 20);
	__mmask16 sub = _mm512_cmplt_epi32_mask(mag, _mm512_set1_epi32(8));
	vi nb8 = _mm512_add_epi32(nb, _mm512_set1_epi32(8 << 20));

	return _mm512_mask_sub_ps(_mm512_castsi512_ps(nb), sub, _mm512_castsi512_ps(nb8),
				  _mm512_set1_ps(8.0f * sub_step));
}

/* The sign: bit 7 of the code to bit 31, merged by one ternary logic
 * operation (0xf8: a | (b & c)). */
ADAMW_INLINE vf v_q8_dec_m(vi code, vf scale)
{
	vf y = _mm512_mul_ps(v_q8_dec_mag(_mm512_and_si512(code, _mm512_set1_epi32(0x7f)),
					  Q8_M_BIAS_OFF, Q8_M_SUB_STEP), scale);

	return _mm512_castsi512_ps(_mm512_ternarylogic_epi32(
		_mm512_castps_si512(y), v_shl24_u8(code),
		_mm512_set1_epi32((int)0x80000000u), 0xf8));
}

ADAMW_INLINE vf v_q8_dec_v(vi code, vf scale)
{
	return _mm512_mul_ps(v_q8_dec_mag(code, Q8_V_BIAS_OFF, Q8_V_SUB_STEP), scale);
}

ADAMW_INLINE vi v_q8_enc_mag(vf x, vi rnd, uint32_t min_normal, uint32_t bias_off, float sub_mul)
{
	vi u = _mm512_castps_si512(x);
	/* ((u + rnd) >> 20) - bias_off, the rebias before the shift (exact:
	 * a normal x's bits are above bias_off << 20), where it folds into a
	 * constant rnd */
	vi nrm = _mm512_srli_epi32(
		_mm512_add_epi32(u, _mm512_sub_epi32(rnd, _mm512_set1_epi32((int)(bias_off << 20)))),
		20);
	vi y = _mm512_cvttps_epi32(_mm512_mul_ps(x, _mm512_set1_ps(sub_mul)));
	vi sub = _mm512_srli_epi32(_mm512_add_epi32(y, rnd), 20);
	__mmask16 is_sub = _mm512_cmplt_epi32_mask(u, _mm512_set1_epi32((int)min_normal));

	return _mm512_mask_blend_epi32(is_sub, nrm, sub);
}

/* _mm512_min_ps(a, b) is a < b ? a : b, as q8_enc_*. */
ADAMW_INLINE vi v_q8_enc_m(vf m, vf inv, vi rnd)
{
	vi u = _mm512_castps_si512(m);
	vf x = _mm512_mul_ps(_mm512_castsi512_ps(_mm512_and_si512(u, _mm512_set1_epi32(0x7fffffff))), inv);

	x = _mm512_min_ps(x, _mm512_set1_ps(1.0f));
	/* the sign, bit 31 of m, to bit 7 of the code: a | (b & c) */
	return _mm512_ternarylogic_epi32(v_q8_enc_mag(x, rnd, Q8_M_MIN_NORMAL, Q8_M_BIAS_OFF,
						      Q8_M_SUB_MUL),
					 v_srl24(u), _mm512_set1_epi32(0x80), 0xf8);
}

ADAMW_INLINE vi v_q8_enc_v(vf v, vf inv, vi rnd)
{
	vf x = _mm512_mul_ps(_mm512_castsi512_ps(v_absbits(v)), inv);
	vi c;

	x = _mm512_min_ps(x, _mm512_set1_ps(1.0f));
	/* a positive value is at least code 1 (q8_enc_v) */
	c = v_q8_enc_mag(x, rnd, Q8_V_MIN_NORMAL, Q8_V_BIAS_OFF, Q8_V_SUB_MUL);
	return _mm512_mask_max_epi32(c, _mm512_cmp_ps_mask(x, _mm512_setzero_ps(), _CMP_GT_OQ), c,
				     _mm512_set1_epi32(1));
}

ADAMW_INLINE vi v_imin(vi a, vi b)
{
	return _mm512_min_epi32(a, b); /* lanes < 2^31, as v_imax */
}

ADAMW_INLINE uint32_t v_hmin(vi a)
{
	return (uint32_t)_mm512_reduce_min_epi32(a);
}

/*
 * The fast path of a q8 block (adamw_simd.h, simd_q8_update): the same
 * values as v_q8_dec_m/v and the same codes as v_q8_enc_m/v, for blocks
 * whose codes and values are all normal.  A normal code's value is the
 * float with bits mag << 20 times the rebias (Q8_M_REBIAS), folded into
 * @scale2 = scale * Q8_M_REBIAS; a normal x's code is (bits of
 * x * 2^-112 + rnd) >> 20, the rebias folded into @inv2 = inv * 2^-112.
 */
ADAMW_INLINE vf v_q8_dec_m_nrm(vi scode, vf scale2)
{
	/* @scode sign-extended (v_ld_s8): << 20 leaves the sign at bit 31,
	 * copies of it at 27..30 (cleared), the magnitude at 20..26 */
	vi b = _mm512_and_si512(_mm512_slli_epi32(scode, 20), _mm512_set1_epi32((int)0x87f00000u));

	return _mm512_mul_ps(_mm512_castsi512_ps(b), scale2);
}

ADAMW_INLINE vf v_q8_dec_v_nrm(vi code, vf scale2)
{
	return _mm512_mul_ps(_mm512_castsi512_ps(_mm512_slli_epi32(code, 20)), scale2);
}

/* The code of a normal x, for either moment (@x's sign clear for
 * exp_avg_sq); exp_avg's with its sign at bit 11, not 7 (v_st_u8x4_sgn
 * moves it): the sign of x * inv2 stays where it is through the add
 * (|x| / rebias has bits below 2^27, rnd below 2^20) and the shift. */
ADAMW_INLINE vi v_q8_enc_nrm(vf x, vf inv2, vi rnd)
{
	return _mm512_srli_epi32(_mm512_add_epi32(_mm512_castps_si512(_mm512_mul_ps(x, inv2)), rnd), 20);
}

/* Whether every exp_avg code of the TIER_Q8_BLOCK at @cm has a magnitude
 * >= 8 and every exp_avg_sq code at @cv is >= 8 (all normal): c + c is a
 * byte's magnitude times 2. */
ADAMW_INLINE bool v_q8_codes_normal(const void *cm, const void *cv)
{
	__m512i lm = _mm512_set1_epi8((char)0xff), lv = lm;

	for (size_t o = 0; o < TIER_Q8_BLOCK; o += 64) {
		__m512i a = _mm512_loadu_si512((const void *)((const char *)cm + o));

		lm = _mm512_min_epu8(lm, _mm512_add_epi8(a, a));
		lv = _mm512_min_epu8(lv, _mm512_loadu_si512((const void *)((const char *)cv + o)));
	}
	return (_mm512_cmplt_epu8_mask(lm, _mm512_set1_epi8(16)) |
		_mm512_cmplt_epu8_mask(lv, _mm512_set1_epi8(8))) == 0;
}

#define ADAMW_SIMD_KERNEL adamw_avx512_kernel
#define ADAMW_SIMD_ROOFLINE adamw_avx512_roofline
#include "kernels/adamw_simd.h"
