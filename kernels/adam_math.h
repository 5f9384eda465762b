/*
 * adam_math.h - the one definition of the Adam/AdamW update of one
 * element, shared by the CPU kernels (scalar and SIMD) and the CUDA kernel
 * so that every device computes the same thing.  Pure C, no state; the
 * CUDA compiler sees it as __host__ __device__.
 *
 * Semantics: torch.optim.AdamW and torch.optim.Adam (PyTorch 1.13,
 * foreach=False, maximize=False, amsgrad=False), per element, in fp32:
 *
 *   g  = grad * grad_scale                  (1/loss_scale * clip_coef, fused)
 *   Adam (L2):       g = g + wd * p
 *   AdamW (decoupled): p = p * (1 - lr * wd)
 *   m  = beta1 * m + (1 - beta1) * g
 *   v  = beta2 * v + ((1 - beta2) * g) * g
 *   denom = sqrt(v) * (1 / sqrt(1 - beta2^t)) + eps   (torch divides by
 *           sqrt(1 - beta2^t); a multiply by the reciprocal, rounded once
 *           per step, frees a divide per element: within an ulp of denom)
 *   p  = p + (-lr / (1 - beta1^t)) * (m / denom)
 *
 * The per-step scalars (struct adam_consts) are computed once per step in
 * double, as torch computes them in Python, and rounded to float.  Every
 * operation below is a separate IEEE fp32 operation in this order (no
 * fused multiply-add: the kernels are compiled with -ffp-contract=off and
 * the SIMD versions use separate multiplies and adds), so the scalar and
 * every SIMD version agree bit for bit; torch's vectorised CPU kernels use
 * FMA in places, so results differ from torch's by an ulp or so
 * (docs/kernels.md states the bound the tests check).
 */
#ifndef TIER_KERNELS_ADAM_MATH_H
#define TIER_KERNELS_ADAM_MATH_H

#include <math.h>
#include <stdbool.h>
#include <stdint.h>

#include "tierstore/kernels.h" /* struct tier_adam_params */

#ifdef __CUDACC__
#define ADAM_HD __host__ __device__ __forceinline__
#else
#define ADAM_HD static inline
#endif

/* The per-step scalars every element uses, rounded to float. */
struct adam_consts {
	float beta1, beta2, one_minus_beta1, one_minus_beta2;
	float decay;           /* 1 - lr*wd for AdamW, 1 for Adam */
	float l2;              /* wd for Adam, 0 for AdamW */
	float bc2_sqrt;        /* sqrt(1 - beta2^step) */
	float inv_bc2_sqrt;    /* 1 / sqrt(1 - beta2^step) */
	float neg_step_size;   /* -lr / (1 - beta1^step) */
	float eps;
	float grad_scale;
	/* stochastic rounding (docs/kernels.md, "Rounding"): the key of this
	 * call's random stream (seed and step), and whether the bf16 moments
	 * and the bf16 parameter copy round stochastically (1) or to nearest
	 * even (0) */
	uint64_t sr_base;
	uint32_t sr_moments, sr_out;
};

/*
 * 0, or -EINVAL naming the first hyperparameter torch.optim would reject
 * (and a struct of an unknown size), as "@who: ...".  The one check of
 * struct tier_adam_params, for the CPU (kernels/adamw.c) and the CUDA
 * (kernels/adamw.cu) update alike.
 */
#ifdef __cplusplus
extern "C"
#endif
int adam_params_check(const struct tier_adam_params *p, const char *who);

/*
 * Stochastic rounding's random stream: counter-based, so that the bits an
 * element gets depend only on (seed, step, its index in the parameter),
 * never on the shard, the tile, the thread or the device that updates it.
 * sr_mix64 is SplitMix64's finaliser (Steele, Lea and Flood, "Fast
 * splittable pseudorandom number generators", OOPSLA 2014); sr_hash32 is
 * "lowbias32" (C. Wellons, hash-prospector), one 32-bit hash per element,
 * cheap in SIMD (two 32-bit multiplies).  Per step and per 2^32 elements
 * of index: key = sr_key(sr_base, index >> 32); per element:
 * r = sr_hash32(key ^ (uint32_t)index).  exp_avg takes the low 16 bits of
 * r, exp_avg_sq the high 16, the parameter copy the high 16 of
 * r * 0x9e3779b1.
 */
ADAM_HD uint64_t sr_mix64(uint64_t z)
{
	z += 0x9e3779b97f4a7c15ull;
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

ADAM_HD uint32_t sr_key(uint64_t sr_base, uint32_t index_hi)
{
	return (uint32_t)sr_mix64(sr_base + index_hi);
}

#define SR_HASH_K1 0x7feb352du
#define SR_HASH_K2 0x846ca68bu

ADAM_HD uint32_t sr_hash32(uint32_t x)
{
	x ^= x >> 16;
	x *= SR_HASH_K1;
	x ^= x >> 15;
	x *= SR_HASH_K2;
	x ^= x >> 16;
	return x;
}

/* The seed of parameter @id's stream in an optimizer seeded @seed. */
ADAM_HD uint64_t sr_param_seed(uint64_t seed, uint32_t id)
{
	return sr_mix64(seed ^ sr_mix64(0x7a11ull << 32 | id));
}

ADAM_HD uint32_t sr_out_bits(uint32_t r)
{
	return (r * 0x9e3779b1u) >> 16;
}

/* torch's scalars: computed in double (Python floats), used as fp32. */
static inline void adam_consts_init(const struct tier_adam_params *h, struct adam_consts *c)
{
	double t = (double)h->step;
	double bc1 = 1.0 - pow(h->beta1, t), bc2 = 1.0 - pow(h->beta2, t);

	c->beta1 = (float)h->beta1;
	c->beta2 = (float)h->beta2;
	c->one_minus_beta1 = (float)(1.0 - h->beta1);
	c->one_minus_beta2 = (float)(1.0 - h->beta2);
	c->decay = h->decoupled ? (float)(1.0 - h->lr * h->weight_decay) : 1.0f;
	c->l2 = h->decoupled ? 0.0f : (float)h->weight_decay;
	c->bc2_sqrt = (float)sqrt(bc2);
	c->inv_bc2_sqrt = (float)(1.0 / sqrt(bc2));
	c->neg_step_size = (float)(-(h->lr / bc1));
	c->eps = (float)h->eps;
	c->grad_scale = (float)h->grad_scale;
	c->sr_base = sr_mix64(h->seed ^ sr_mix64(h->step));
	c->sr_moments = h->rounding == TIER_ROUND_STOCHASTIC;
	c->sr_out = h->out_rounding == TIER_ROUND_STOCHASTIC;
}

/*
 * One element: gradient @g (already converted to fp32, not yet scaled),
 * master parameter *p, moments *m and *v (fp32 values; the caller converts
 * bf16 storage).  The order of operations is the contract.
 */
ADAM_HD void adam_elem(const struct adam_consts *c, float g, float *p, float *m, float *v)
{
	float pp = *p, mm, vv, denom;

	g = g * c->grad_scale;
	if (c->l2 != 0.0f)
		g = g + c->l2 * pp;
	pp = pp * c->decay;
	mm = *m * c->beta1 + c->one_minus_beta1 * g;
	vv = *v * c->beta2 + (c->one_minus_beta2 * g) * g;
	denom = sqrtf(vv) * c->inv_bc2_sqrt + c->eps;
	pp = pp + c->neg_step_size * (mm / denom);
	*p = pp;
	*m = mm;
	*v = vv;
}

/* The bits of an fp32 value, and the value of bits (a union: the one
 * type-pun C and CUDA both define). */
ADAM_HD uint32_t f32_bits(float f)
{
	union {
		uint32_t u;
		float f;
	} x;

	x.f = f;
	return x.u;
}

ADAM_HD float f32_from_bits(uint32_t u)
{
	union {
		uint32_t u;
		float f;
	} x;

	x.u = u;
	return x.f;
}

/* bf16 <-> fp32.  To bf16: round to nearest even; NaN stays a (quiet) NaN. */
ADAM_HD float bf16_to_f32(uint16_t h)
{
	return f32_from_bits((uint32_t)h << 16);
}

ADAM_HD uint16_t f32_to_bf16(float f)
{
	uint32_t u = f32_bits(f);

	if ((u & 0x7fffffffu) > 0x7f800000u)
		return (uint16_t)((u >> 16) | 0x0040u);
	u += 0x7fffu + ((u >> 16) & 1u);
	return (uint16_t)(u >> 16);
}

/*
 * To bf16, rounded stochastically: up (away from zero) with probability
 * equal to the distance from the value below, in units of its last place,
 * using the 16 random bits @r (the low half; the high half must be 0).  The
 * expected result is the fp32 value, so a moment multiplied by beta2 =
 * 0.999 decays on average where round to nearest would keep it.  A NaN
 * stays a quiet NaN as f32_to_bf16() makes it; an inf stays an inf; the
 * largest finite values may round to inf with their probability.
 */
ADAM_HD uint16_t f32_to_bf16_sr(float f, uint32_t r)
{
	uint32_t u = f32_bits(f);

	if ((u & 0x7fffffffu) > 0x7f800000u)
		return (uint16_t)((u >> 16) | 0x0040u);
	return (uint16_t)((u + r) >> 16);
}

/*
 * fp16 (IEEE binary16) <-> fp32, bit for bit as x86 F16C converts
 * (VCVTPH2PS, and VCVTPS2PH with round to nearest even), so that the scalar
 * and SIMD kernels agree.  To fp32 is exact (subnormals included).  To
 * fp16: round to nearest even; subnormal results rounded likewise; values
 * from 65520 up become inf.  A NaN stays a NaN of the same sign with its
 * payload's top bits, made quiet (F16C's rule both ways), so a signalling
 * NaN does not round-trip unchanged; every other value does.
 */
ADAM_HD float f16_to_f32(uint16_t h)
{
	uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
	uint32_t exp = (h >> 10) & 0x1fu, mant = h & 0x3ffu;

	if (exp == 0x1fu) /* inf, or a NaN made quiet */
		return f32_from_bits(sign | 0x7f800000u | (mant << 13) | (mant != 0 ? 0x00400000u : 0u));
	if (exp != 0)
		return f32_from_bits(sign | ((exp + 112u) << 23) | (mant << 13));
	/* zero or subnormal: mant * 2^-24, exact in fp32 */
	return f32_from_bits(f32_bits((float)mant * 5.9604644775390625e-8f) | sign);
}

ADAM_HD uint16_t f32_to_f16(float f)
{
	uint32_t u = f32_bits(f);
	uint32_t sign = (u >> 16) & 0x8000u;
	uint32_t a = u & 0x7fffffffu;
	if (a > 0x7f800000u) /* NaN: quiet, top 9 bits of the payload */
		return (uint16_t)(sign | 0x7e00u | ((a >> 13) & 0x1ffu));
	if (a >= 0x47800000u) /* >= 65536 (and inf): inf */
		return (uint16_t)(sign | 0x7c00u);
	if (a >= 0x38800000u) { /* >= 2^-14: normal (a carry may reach inf) */
		a += 0xfffu + ((a >> 13) & 1u);
		return (uint16_t)(sign | ((a >> 13) - (112u << 10)));
	}
	if (a < 0x33000000u) /* < 2^-25: rounds to zero (2^-25 itself is a tie to 0) */
		return (uint16_t)sign;
	{
		/* subnormal result: k = round(M * 2^(e - 126)), shift in [14, 24] */
		uint32_t e = a >> 23, shift = 126u - e;
		uint32_t m = (a & 0x7fffffu) | 0x800000u;
		uint32_t k = m >> shift, rem = m & ((1u << shift) - 1u), half = 1u << (shift - 1u);

		if (rem > half || (rem == half && (k & 1u)))
			k++; /* k may become 0x400: the smallest normal */
		return (uint16_t)(sign | k);
	}
}


/*
 * q8 moments (docs/kernels.md, "q8 moments"): per block of TIER_Q8_BLOCK
 * elements an fp32 scale, the block's largest |value|, and per element an
 * 8-bit float code of x = |value| / scale in [0, 1]: exp_avg a sign bit and
 * 7 bits "E4M3 relative" (exponent bias 15: normal from 2^-14, subnormal
 * steps of 2^-17, 1.0 is code 120), exp_avg_sq 8 bits "E5M3 relative"
 * (bias 31: normal from 2^-30, subnormal steps of 2^-33, 1.0 is 248).  A
 * code is made with integer operations on the bits of x (no table), so
 * every kernel, scalar, SIMD or CUDA, makes the same byte.
 *
 * Rounding: a code is (bits of x + rnd) >> 20 (less the exponent bias),
 * rnd = 0x80000 rounding to nearest with ties away from zero ("half up"),
 * or the element's 16 random bits shifted left by 4 (stochastic: up with
 * the probability of x's distance from the code below, to 2^-16).
 */
#define Q8_M_BIAS_OFF ((127u - 15u) << 3) /* exponent rebias, in code units */
#define Q8_V_BIAS_OFF ((127u - 31u) << 3)
#define Q8_M_MIN_NORMAL 0x38800000u       /* 2^-14: bits of the first normal x */
#define Q8_V_MIN_NORMAL 0x30800000u       /* 2^-30 */
#define Q8_M_SUB_MUL 0x1p37f              /* subnormal x * 2^(bias + 22) */
#define Q8_V_SUB_MUL 0x1p53f
#define Q8_M_SUB_STEP 0x1p-17f            /* value of subnormal code 1 */
#define Q8_V_SUB_STEP 0x1p-33f
#define Q8_RND_NEAREST 0x80000u
#define Q8_SCALE_NAN 0x7fc00000u          /* the scale of a block with a NaN */
#define Q8_MIN_SCALE 0x00800000u          /* bits of 2^-126: smaller maxima are 0 */
/* 2^(bias_off >> 3): a normal code's value is the float with bits
 * mag << 20 times this (the SIMD kernels' fast path, adamw_simd.h) */
#define Q8_M_REBIAS 0x1p112f
#define Q8_V_REBIAS 0x1p96f

/* The magnitude code of x in [0, 1] (bits @u). */
ADAM_HD uint32_t q8_enc_mag(float x, uint32_t rnd, uint32_t min_normal, uint32_t bias_off,
			    float sub_mul)
{
	uint32_t u = f32_bits(x);

	if (u >= min_normal)
		return ((u + rnd) >> 20) - bias_off;
	return ((uint32_t)(x * sub_mul) + rnd) >> 20; /* exact multiply, truncating conversion */
}

/* x of a magnitude code (exact). */
ADAM_HD float q8_dec_mag(uint32_t mag, uint32_t bias_off, float sub_step)
{
	if (mag >= 8u)
		return f32_from_bits((mag + bias_off) << 20);
	return (float)mag * sub_step;
}

/*
 * The scale of a block from the largest of its values' bits with the sign
 * cleared (@maxbits: an integer maximum, so a NaN, whose bits exceed inf's,
 * wins in any order): a NaN block gets the one NaN Q8_SCALE_NAN, an inf
 * block inf, a block whose largest value is below 2^-126 (zero, or
 * subnormal) 0; each with *inv = 0: its codes are all 0 (which decode to
 * NaN, NaN and 0).  Otherwise the largest value, and *inv = 1 / scale,
 * rounded once.
 */
ADAM_HD float q8_scale(uint32_t maxbits, float *inv)
{
	*inv = 0.0f;
	if (maxbits > 0x7f800000u)
		return f32_from_bits(Q8_SCALE_NAN);
	if (maxbits < Q8_MIN_SCALE)
		return 0.0f;
	if (maxbits == 0x7f800000u)
		return f32_from_bits(maxbits);
	*inv = 1.0f / f32_from_bits(maxbits);
	return f32_from_bits(maxbits);
}

/* Codes of an exp_avg value @m and an exp_avg_sq value @v of a block whose
 * *inv (q8_scale) is @inv != 0; @rnd: Q8_RND_NEAREST or 16 random bits << 4. */
ADAM_HD uint32_t q8_enc_m(float m, float inv, uint32_t rnd)
{
	uint32_t u = f32_bits(m);
	float x = f32_from_bits(u & 0x7fffffffu) * inv;

	x = x < 1.0f ? x : 1.0f;
	return q8_enc_mag(x, rnd, Q8_M_MIN_NORMAL, Q8_M_BIAS_OFF, Q8_M_SUB_MUL) | (u >> 31) << 7;
}

/* exp_avg_sq: a positive value never becomes code 0 (it becomes at least
 * code 1, 2^-33 of the block's largest).  Else an element 5 decades below
 * its block's largest, whose exp_avg keeps a code (exp_avg's smallest is
 * 2^-17 of its block's largest), would step by exp_avg / eps. */
ADAM_HD uint32_t q8_enc_v(float v, float inv, uint32_t rnd)
{
	float x = f32_from_bits(f32_bits(v) & 0x7fffffffu) * inv;
	uint32_t c;

	x = x < 1.0f ? x : 1.0f;
	c = q8_enc_mag(x, rnd, Q8_V_MIN_NORMAL, Q8_V_BIAS_OFF, Q8_V_SUB_MUL);
	return c == 0 && x > 0.0f ? 1u : c;
}

/* The values of codes: x * scale (one multiply), exp_avg's sign applied. */
ADAM_HD float q8_dec_m(uint32_t code, float scale)
{
	float y = q8_dec_mag(code & 0x7fu, Q8_M_BIAS_OFF, Q8_M_SUB_STEP) * scale;

	return f32_from_bits(f32_bits(y) | (code & 0x80u) << 24);
}

ADAM_HD float q8_dec_v(uint32_t code, float scale)
{
	return q8_dec_mag(code, Q8_V_BIAS_OFF, Q8_V_SUB_STEP) * scale;
}

#endif
