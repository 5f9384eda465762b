/*
 * test_adamw_q8.c - q8 moments in the CPU Adam/AdamW kernels (TIER_Q8:
 * 8-bit float codes with an fp32 absmax scale per block of TIER_Q8_BLOCK
 * elements; kernels/adam_math.h, docs/kernels.md "q8 moments").
 *
 * Covers:
 *  - the definition: the scalar kernel against a reference written here
 *    from the format (decode, adam_elem(), the blocks' maxima, encode; the
 *    codes computed in double from frexp, not from the bits), five steps,
 *    round to nearest and stochastic, a partial last block, every byte;
 *  - every SIMD version this CPU runs equals the scalar one bit for bit
 *    (codes, scales, parameters, the copy, and the bytes around them), for
 *    every grad dtype and copy dtype, AdamW and Adam, nearest and
 *    stochastic, lengths 0, 1, 255, 256, 257, 4099, 65537, index0 0 and
 *    2^32 - 256 (the random stream's key changes inside the array),
 *    misaligned arrays, state with zero, inf and NaN scales; the same
 *    through a thread pool with tiles of 256 elements;
 *  - the SIMD versions' fast paths for blocks whose codes and values are
 *    all normal, and each edge of them (a code of magnitude 7 or 8, also
 *    with subnormal inputs read as zero; the scales at +-2^16 and 2^32;
 *    the smallest x at 2^-14 and 2^-30, and a subnormal code whose
 *    truncation and rounding differ; the largest value at 2^14 and 2^30,
 *    and an odd inverse past them; an exp_avg of 0), on the fast side and
 *    past it;
 *  - split invariance: one call equals calls on pieces cut at block
 *    boundaries, each with its index0;
 *  - encode/decode: the error of nearest rounding is within half a step of
 *    the code for normal codes; stochastic rounding is unbiased (the mean
 *    of many encodings within 5 sigma); scale special cases;
 *  - decay: 2^20 elements, one step of N(0, 1) gradients then 200 of zero
 *    gradients: the mean exp_avg_sq within 1% of fp32's (both roundings);
 *  - argument errors (q8 gradients or copies, NULL scales, index0 not a
 *    multiple of the block): -EINVAL naming the thing, nothing written;
 *  - the roofline kernel writes exactly the arrays the update writes;
 *  - block size: the relative error of the update direction m / (sqrt(v) +
 *    eps) after 100 steps of a gradient stream with row scales over 3
 *    decades, for blocks of 64, 256 and 2048 (an emulation of the format
 *    with any block size, which for 256 equals the kernel): printed.
 */
#include "config.h"

#include <check.h>
#include <errno.h>
#include <float.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#if defined(__x86_64__) || defined(__i386__)
#include <xmmintrin.h>
#endif

#include "common/pool.h"
#include "kernels/adam_math.h"
#include "kernels/adamw.h"
#include "t_helpers.h"

#define QB TIER_Q8_BLOCK

/* ------------------------------------------------------------- helpers */

static float f_of(uint32_t u)
{
	float f;

	memcpy(&f, &u, 4);
	return f;
}

static uint32_t u_of(float f)
{
	uint32_t u;

	memcpy(&u, &f, 4);
	return u;
}

static size_t nblocks(size_t n)
{
	return (n + QB - 1) / QB;
}

/* ------------------------------------------------------------- a world */

enum { W_PARAM, W_M, W_V, W_SM, W_SV, W_GRAD, W_OUT, W__N };
static const char *const w_name[W__N] = { "param", "exp_avg", "exp_avg_sq", "exp_avg_scale",
					  "exp_avg_sq_scale", "grad", "param_out" };

#define SLACK 64

struct world {
	size_t n;
	int gd, od; /* od -1: no copy */
	size_t es[W__N], cnt[W__N];
	unsigned char *buf[W__N];
	size_t size[W__N], off[W__N];
	struct tier_adam_tensors t;
};

/* @mis: arrays off their natural alignment (floats by elements, bytes and
 * 16-bit arrays by odd amounts); @special: zero, inf and NaN scales, and
 * inf and NaN gradients. */
static void world_init(struct world *w, size_t n, int gd, int od, bool mis, uint64_t seed,
		       bool special)
{
	uint64_t s = seed;

	memset(w, 0, sizeof(*w));
	w->n = n;
	w->gd = gd;
	w->od = od;
	for (int a = 0; a < W__N; a++) {
		size_t extra;

		w->es[a] = a == W_M || a == W_V ? 1 : a == W_GRAD ? tier_dtype_size((enum tier_dtype)gd)
			   : a == W_OUT ? (od < 0 ? 0 : tier_dtype_size((enum tier_dtype)od)) : 4;
		w->cnt[a] = a == W_SM || a == W_SV ? nblocks(n) : n;
		if (!w->es[a])
			continue;
		extra = !mis ? 0 : w->es[a] == 4 ? 4 * (1 + (size_t)a % 3) : 1 + 2 * ((size_t)a % 3);
		if (w->es[a] == 2)
			extra = mis ? 2 + (size_t)a % 2 : 0;
		w->off[a] = SLACK + extra;
		w->size[a] = (w->off[a] + w->cnt[a] * w->es[a] + SLACK + 63) & ~(size_t)63;
		w->buf[a] = aligned_alloc(64, w->size[a]);
		ck_assert_ptr_nonnull(w->buf[a]);
		for (size_t i = 0; i < w->size[a]; i++)
			w->buf[a][i] = (unsigned char)(t_rnd_next(&s) >> 56);
	}
	for (size_t i = 0; i < n; i++) {
		float p = (float)(t_rnd_normal(&s) * 0.1);
		double mag = pow(10.0, -6.0 + 8.0 * t_rnd_unit(&s));
		float g = (float)(t_rnd_normal(&s) * mag);
		unsigned char *gp = w->buf[W_GRAD] + w->off[W_GRAD] + i * w->es[W_GRAD];

		if (t_rnd_below(&s, 50) == 0)
			g = 0.0f;
		if (special && t_rnd_below(&s, 3000) == 0)
			g = t_rnd_below(&s, 2) ? INFINITY : NAN;
		memcpy(w->buf[W_PARAM] + w->off[W_PARAM] + 4 * i, &p, 4);
		if (gd == TIER_FP32) {
			memcpy(gp, &g, 4);
		} else {
			uint16_t h = gd == TIER_BF16 ? f32_to_bf16(g) : f32_to_f16(g);

			memcpy(gp, &h, 2);
		}
		/* codes: any byte (already random) */
	}
	for (size_t b = 0; b < nblocks(n); b++) {
		float sm = (float)pow(10.0, -8.0 + 8.0 * t_rnd_unit(&s));
		float sv = (float)pow(10.0, -14.0 + 12.0 * t_rnd_unit(&s));
		size_t r = t_rnd_below(&s, 40);

		if (r == 0)
			sm = sv = 0.0f;
		else if (special && r == 1)
			sm = INFINITY;
		else if (special && r == 2)
			sv = NAN;
		else if (r == 3)
			sm = 0x1p-130f; /* subnormal: a zero block's next scale */
		memcpy(w->buf[W_SM] + w->off[W_SM] + 4 * b, &sm, 4);
		memcpy(w->buf[W_SV] + w->off[W_SV] + 4 * b, &sv, 4);
	}
	w->t.n = n;
	w->t.param = (float *)(void *)(w->buf[W_PARAM] + w->off[W_PARAM]);
	w->t.exp_avg = w->buf[W_M] + w->off[W_M];
	w->t.exp_avg_sq = w->buf[W_V] + w->off[W_V];
	w->t.exp_avg_scale = (float *)(void *)(w->buf[W_SM] + w->off[W_SM]);
	w->t.exp_avg_sq_scale = (float *)(void *)(w->buf[W_SV] + w->off[W_SV]);
	w->t.moment_dtype = TIER_Q8;
	w->t.grad = w->buf[W_GRAD] + w->off[W_GRAD];
	w->t.grad_dtype = (enum tier_dtype)gd;
	w->t.param_out = od >= 0 ? w->buf[W_OUT] + w->off[W_OUT] : NULL;
	w->t.out_dtype = od >= 0 ? (enum tier_dtype)od : TIER_FP32;
}

static void world_point(struct world *w)
{
	w->t.param = (float *)(void *)(w->buf[W_PARAM] + w->off[W_PARAM]);
	w->t.exp_avg = w->buf[W_M] + w->off[W_M];
	w->t.exp_avg_sq = w->buf[W_V] + w->off[W_V];
	w->t.exp_avg_scale = (float *)(void *)(w->buf[W_SM] + w->off[W_SM]);
	w->t.exp_avg_sq_scale = (float *)(void *)(w->buf[W_SV] + w->off[W_SV]);
	w->t.grad = w->buf[W_GRAD] + w->off[W_GRAD];
	w->t.param_out = w->od >= 0 ? w->buf[W_OUT] + w->off[W_OUT] : NULL;
}

static void world_copy(struct world *dst, const struct world *src)
{
	*dst = *src;
	for (int a = 0; a < W__N; a++) {
		if (!src->buf[a])
			continue;
		dst->buf[a] = aligned_alloc(64, src->size[a]);
		ck_assert_ptr_nonnull(dst->buf[a]);
		memcpy(dst->buf[a], src->buf[a], src->size[a]);
	}
	world_point(dst);
}

static void world_free(struct world *w)
{
	for (int a = 0; a < W__N; a++)
		free(w->buf[a]);
}

static bool nan_bits(size_t es, int dt, uint32_t u)
{
	if (es == 4)
		return (u & 0x7fffffffu) > 0x7f800000u;
	return dt == TIER_BF16 ? (u & 0x7fffu) > 0x7f80u : (u & 0x7fffu) > 0x7c00u;
}

/* Every byte equal; in the parameters and the copy, two NaNs may differ in
 * sign and payload (which NaN operand an operation passes on is up to the
 * compiler's operand order).  Codes and scales: every bit. */
static void world_expect(const struct world *got, const struct world *want, const char *what)
{
	for (int a = 0; a < W__N; a++) {
		size_t es = want->es[a], b = 0;
		bool nan_ok = a == W_PARAM || a == W_OUT;

		if (!want->buf[a] || memcmp(got->buf[a], want->buf[a], want->size[a]) == 0)
			continue;
		if (nan_ok && memcmp(got->buf[a], want->buf[a], want->off[a]) == 0 &&
		    memcmp(got->buf[a] + want->off[a] + want->cnt[a] * es,
			   want->buf[a] + want->off[a] + want->cnt[a] * es,
			   want->size[a] - want->off[a] - want->cnt[a] * es) == 0) {
			size_t i;
			int dt = a == W_OUT ? want->od : TIER_FP32;

			for (i = 0; i < want->cnt[a]; i++) {
				uint32_t x = 0, y = 0;

				memcpy(&x, got->buf[a] + want->off[a] + i * es, es);
				memcpy(&y, want->buf[a] + want->off[a] + i * es, es);
				if (x != y && !(nan_bits(es, dt, x) && nan_bits(es, dt, y)))
					break;
			}
			if (i == want->cnt[a])
				continue;
		}
		while (got->buf[a][b] == want->buf[a][b])
			b++;
		{
			long long e = b < want->off[a] ? -1LL : (long long)((b - want->off[a]) / es);
			uint32_t x = 0, y = 0;

			if (e >= 0 && (size_t)e < want->cnt[a]) {
				memcpy(&x, got->buf[a] + want->off[a] + (size_t)e * es, es);
				memcpy(&y, want->buf[a] + want->off[a] + (size_t)e * es, es);
			}
			ck_abort_msg("%s: %s differs at byte %zu (element %lld of %zu): 0x%x, want 0x%x",
				     what, w_name[a], b, e, want->cnt[a], x, y);
		}
	}
}

/* ---------------------------------------------------- hyperparameters */

static const struct tier_adam_params hp_adamw = { .size = sizeof(struct tier_adam_params),
	.lr = 1e-3, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8, .weight_decay = 0.01,
	.decoupled = true, .step = 1, .grad_scale = 1.0 / 1024, .seed = 0x1234,
};

static const struct tier_adam_params hp_adam = { .size = sizeof(struct tier_adam_params),
	.lr = 3e-2, .beta1 = 0.8, .beta2 = 0.99, .eps = 1e-6, .weight_decay = 0.05,
	.decoupled = false, .step = 1, .grad_scale = 0.37, .seed = 99,
};

static struct tier_adam_params hp_with(const struct tier_adam_params *hp, bool sr, uint64_t step)
{
	struct tier_adam_params h = *hp;

	h.step = step;
	h.rounding = h.out_rounding = sr ? TIER_ROUND_STOCHASTIC : TIER_ROUND_NEAREST;
	return h;
}

static void run_steps(struct world *w, struct tier_pool *pool, enum adamw_isa isa,
		      const struct tier_adam_params *hp, bool sr, int steps)
{
	for (int st = 1; st <= steps; st++) {
		struct tier_adam_params h = hp_with(hp, sr, (uint64_t)st);
		struct adam_consts c;

		adam_consts_init(&h, &c);
		ck_assert_int_eq(adamw_step_isa(pool, isa, &c, &w->t), 0);
	}
}

static const enum adamw_isa simd_isas[] = { ADAMW_AVX2, ADAMW_AVX512 };

/* -------------------------------------------- the reference (definition) */

/* The x of magnitude code @mag with exponent bias @B, from its fields. */
static double ref_dec_mag(unsigned mag, int B)
{
	unsigned e = mag >> 3, f = mag & 7;

	return e ? ldexp(1.0 + f / 8.0, (int)e - B) : ldexp((double)f, -(B + 2));
}

/* The magnitude code of x in [0, 1] with bias @B: x = 2^E * (1 + frac),
 * code (E + B) * 8 + floor(frac * 8 + t), t the rounding's threshold
 * (rnd / 2^20: 1/2, or the 16 random bits / 2^16); below 2^(1 - B),
 * floor(trunc(x * 2^(B + 22)) / 2^20 + t). */
static unsigned ref_enc_mag(float xf, int B, double t)
{
	double x = (double)xf;
	int E;
	double fr;

	if (x == 0)
		return (unsigned)floor(t);
	fr = frexp(x, &E); /* x = fr * 2^E, fr in [0.5, 1) */
	E -= 1;
	if (E >= 1 - B)
		return (unsigned)((E + B) * 8 + (int)floor((fr * 2 - 1) * 8 + t));
	return (unsigned)floor(floor(ldexp(x, B + 22)) / 1048576.0 + t);
}

/* One step of the reference over @w's arrays (scalar, element by element). */
static void ref_step(struct world *w, const struct tier_adam_params *h, uint64_t index0)
{
	struct adam_consts c;
	float mb[QB], vb[QB];

	adam_consts_init(h, &c);
	for (size_t b = 0; b < nblocks(w->n); b++) {
		size_t n = w->n - b * QB < QB ? w->n - b * QB : QB;
		float sm = w->t.exp_avg_scale[b], sv = w->t.exp_avg_sq_scale[b];
		float mxm = 0, mxv = 0, invm, invv;
		bool nanm = false, nanv = false;

		for (size_t j = 0; j < n; j++) {
			size_t i = b * QB + j;
			unsigned cm = ((unsigned char *)w->t.exp_avg)[i];
			unsigned cv = ((unsigned char *)w->t.exp_avg_sq)[i];
			float m = (float)ref_dec_mag(cm & 0x7f, 15) * sm;
			float v = (float)ref_dec_mag(cv, 31) * sv;
			float g, p;
			uint64_t idx = index0 + i;
			uint32_t r = sr_hash32(sr_key(c.sr_base, (uint32_t)(idx >> 32)) ^ (uint32_t)idx);

			if (cm & 0x80)
				m = -m;
			if (w->gd == TIER_FP32)
				memcpy(&g, (char *)w->buf[W_GRAD] + w->off[W_GRAD] + 4 * i, 4);
			else {
				uint16_t hh;

				memcpy(&hh, (char *)w->buf[W_GRAD] + w->off[W_GRAD] + 2 * i, 2);
				g = w->gd == TIER_BF16 ? bf16_to_f32(hh) : f16_to_f32(hh);
			}
			memcpy(&p, &w->t.param[i], 4);
			adam_elem(&c, g, &p, &m, &v);
			memcpy(&w->t.param[i], &p, 4);
			if (w->od == TIER_FP32) {
				memcpy((char *)w->t.param_out + 4 * i, &p, 4);
			} else if (w->od >= 0) {
				uint16_t o = w->od == TIER_FP16 ? f32_to_f16(p)
					     : c.sr_out ? f32_to_bf16_sr(p, sr_out_bits(r)) : f32_to_bf16(p);

				memcpy((char *)w->t.param_out + 2 * i, &o, 2);
			}
			mb[j] = m;
			vb[j] = v;
			nanm |= isnan(m);
			nanv |= isnan(v);
			mxm = fmaxf(mxm, fabsf(m));
			mxv = fmaxf(mxv, fabsf(v));
		}
		/* the scales: NaN, inf, 0 below 2^-126: codes 0 */
		sm = nanm ? f_of(0x7fc00000u) : mxm < 0x1p-126f ? 0.0f : mxm;
		sv = nanv ? f_of(0x7fc00000u) : mxv < 0x1p-126f ? 0.0f : mxv;
		invm = isfinite(sm) && sm != 0 ? 1.0f / sm : 0.0f;
		invv = isfinite(sv) && sv != 0 ? 1.0f / sv : 0.0f;
		w->t.exp_avg_scale[b] = sm;
		w->t.exp_avg_sq_scale[b] = sv;
		for (size_t j = 0; j < n; j++) {
			size_t i = b * QB + j;
			uint64_t idx = index0 + i;
			uint32_t r = sr_hash32(sr_key(c.sr_base, (uint32_t)(idx >> 32)) ^ (uint32_t)idx);
			double tm = c.sr_moments ? (r & 0xffff) / 65536.0 : 0.5;
			double tv = c.sr_moments ? (r >> 16) / 65536.0 : 0.5;
			unsigned cm = 0, cv = 0;

			if (invm != 0) {
				cm = ref_enc_mag(fminf(fabsf(mb[j]) * invm, 1.0f), 15, tm);
				cm |= signbit(mb[j]) ? 0x80u : 0u;
			}
			if (invv != 0) {
				float xv = fminf(fabsf(vb[j]) * invv, 1.0f);

				cv = ref_enc_mag(xv, 31, tv);
				if (cv == 0 && xv > 0)
					cv = 1; /* a positive exp_avg_sq is never code 0 */
			}
			if ((cm & 0x7f) > 120 || cv > 248) /* (not ck_assert: a mark per call) */
				ck_abort_msg("codes 0x%x, 0x%x past 1.0", cm, cv);
			((unsigned char *)w->t.exp_avg)[i] = (unsigned char)cm;
			((unsigned char *)w->t.exp_avg_sq)[i] = (unsigned char)cv;
		}
	}
}

/* _i: 0 nearest, 1 stochastic; x grad/out dtypes in two combinations. */
START_TEST(q8_definition)
{
	bool sr = _i % 2;
	int gd = _i / 2 ? TIER_BF16 : TIER_FP32, od = _i / 2 ? TIER_BF16 : TIER_FP16;
	struct world base, want, got;
	const size_t n = 5 * QB + 77;

	world_init(&base, n, gd, od, false, 0xDEF0u + (uint64_t)_i, false);
	world_copy(&want, &base);
	world_copy(&got, &base);
	for (int st = 1; st <= 5; st++) {
		struct tier_adam_params h = hp_with(&hp_adamw, sr, (uint64_t)st);
		struct adam_consts c;
		char what[96];

		ref_step(&want, &h, 0);
		adam_consts_init(&h, &c);
		ck_assert_int_eq(adamw_step_isa(NULL, ADAMW_SCALAR, &c, &got.t), 0);
		snprintf(what, sizeof(what), "scalar vs reference, %s, step %d",
			 sr ? "stochastic" : "nearest", st);
		world_expect(&got, &want, what);
	}
	world_free(&base);
	world_free(&want);
	world_free(&got);
}
END_TEST

/* ------------------------------------------- SIMD versions vs scalar */

static const size_t lengths[] = { 0, 1, 255, 256, 257, 4099, 65537 };

/* _i = ((grad * 4 + out) * 2 + adam) * 2 + sr */
START_TEST(q8_simd_vs_scalar)
{
	bool sr = _i % 2;
	const struct tier_adam_params *hp = _i / 2 % 2 ? &hp_adam : &hp_adamw;
	int od = _i / 4 % 4 - 1, gd = _i / 16;
	bool ran = false;

	for (size_t li = 0; li < ARRAY_SIZE(lengths); li++) {
		for (int var = 0; var < 4; var++) {
			size_t n = lengths[li];
			bool mis = var & 1, hi = var & 2;
			struct world base, want;
			char what[192];

			world_init(&base, n, gd, od, mis, 0x5EEDu + (uint64_t)_i * 977 + li * 31 + (uint64_t)var,
				   true);
			base.t.index0 = hi ? ((uint64_t)1 << 32) - QB : 0;
			world_copy(&want, &base);
			run_steps(&want, NULL, ADAMW_SCALAR, hp, sr, 2);
			for (size_t v = 0; v < ARRAY_SIZE(simd_isas); v++) {
				struct world got;

				if (!adamw_isa_supported(simd_isas[v]))
					continue;
				ran = true;
				world_copy(&got, &base);
				run_steps(&got, NULL, simd_isas[v], hp, sr, 2);
				snprintf(what, sizeof(what),
					 "%s vs scalar, %s, %s, grad %s, copy %s, n %zu, %s, index0 %llu",
					 adamw_isa_name(simd_isas[v]), hp->decoupled ? "AdamW" : "Adam",
					 sr ? "stochastic" : "nearest", t_dtype_name(gd), t_dtype_name(od), n,
					 mis ? "misaligned" : "aligned", (unsigned long long)base.t.index0);
				world_expect(&got, &want, what);
				world_free(&got);
			}
			world_free(&base);
			world_free(&want);
		}
	}
	if (!ran && _i == 0)
		printf("note: this CPU runs no SIMD version of the adam kernel; q8_simd_vs_scalar compares nothing\n");
}
END_TEST

/*
 * The SIMD kernels' fast paths (adamw_simd.h, simd_q8_update: a block whose
 * codes and values are all normal) and each of their edges.  A world of 4
 * whole blocks and a partial one; every block takes both fast paths (codes
 * of magnitude >= 96 and >= 200, exp_avg's scale within 2^-20..2^10 and
 * exp_avg_sq's near its square, a gradient of the sign of exp_avg, 1x to
 * 2x its value) except block 1, which the case puts on an edge: on the
 * fast side of it, or just past it.  The encode edges choose the betas
 * (0 or 1/2) so that block 1's new moments are exact sums of values the
 * case chose.  Every SIMD version equals the scalar one, bit for bit, both
 * roundings.
 */
enum fast_edge {
	FE_NONE,          /* block 1 as the others */
	FE_M_CODE7,       /* decode: one exp_avg code of magnitude 7 (any) */
	FE_M_CODE8,       /* its smallest magnitude 8 (fast) */
	FE_V_CODE7,       /* one exp_avg_sq code 7 */
	FE_V_CODE0,       /* one exp_avg_sq code 0 */
	FE_M_CODE7_DAZ,   /* FE_M_CODE7 with subnormal inputs read as 0 (x86 DAZ) */
	FE_V_CODE7_DAZ,
	FE_SM_2P16,       /* exp_avg's scale 2^16: scale * rebias overflows */
	FE_SM_BELOW_2P16, /* the float below 2^16 (fast) */
	FE_SV_NEG,        /* a negative exp_avg_sq scale: values with the sign set */
	FE_SV_2P32,       /* exp_avg_sq's scale 2^32 */
	FE_SV_BELOW_2P32, /* the float below (fast) */
	FE_SM_NEG_2P16,   /* -2^16 */
	FE_SM_NEG,        /* -1 (any: the sign of a code applies after the multiply) */
	FE_SM_NEG_ZERO,   /* -0 */
	FE_SM_SUBNORMAL,  /* exp_avg's scale 2^-130 (fast: scale * 2^112 is exact) */
	/* encode, betas 0, 0: exp_avg = g, exp_avg_sq = g * g */
	FE_X_M_MIN,       /* the smallest x of exp_avg exactly 2^-14 (fast) */
	FE_X_M_BELOW,     /* one float below 2^-14 */
	FE_X_M_HALF,      /* a subnormal code's x * 2^37 = 7.5 * 2^20 - 1/2: its
			   * truncation and its rounding differ by a code */
	FE_INV_M_MIN,     /* exp_avg's largest value 2^14: inverse 2^-14 (fast) */
	FE_INV_M_PAST,    /* the float above 2^14 */
	FE_INV_M_ODD,     /* largest 20000: an odd inverse, whose last bit is lost
			   * below 2^-126, and an x next to a code boundary that
			   * the product with that shorter inverse crosses */
	FE_M_ZERO,        /* an exp_avg of +0 (gradient -0: 0 * exp_avg + -0) */
	/* encode, betas 1/2, 0: exp_avg = old / 2 + g / 2 (old of g's sign),
	 * exp_avg_sq = g * g */
	FE_X_V_MIN,       /* the smallest x of exp_avg_sq exactly 2^-30 (fast) */
	FE_X_V_BELOW,     /* 2^-30 (1 - 2^-23) */
	FE_X_V_HALF,      /* a subnormal code's x * 2^53 = k * 2^20 + 2^19 - 1/2 or
			   * - 1/4 */
	/* encode, betas 1/2, 0: exp_avg 1024 from -30720 and g = 2^15 */
	FE_INV_V_MIN,     /* exp_avg_sq's largest value 2^30: inverse 2^-30 (fast) */
	FE_INV_V_PAST,    /* 2^30 (1 + 2^-22) */
	FE_INV_V_ODD,     /* largest 1.6e9, an odd inverse, as FE_INV_M_ODD */
	FE__N,
};

static const struct {
	const char *name;
	double beta1, beta2; /* for the encode edges; else hp_adamw's */
} fast_edges[FE__N] = {
	[FE_NONE] = { "all normal", -1, -1 },
	[FE_M_CODE7] = { "exp_avg code 7", -1, -1 },
	[FE_M_CODE8] = { "exp_avg code 8", -1, -1 },
	[FE_V_CODE7] = { "exp_avg_sq code 7", -1, -1 },
	[FE_V_CODE0] = { "exp_avg_sq code 0", -1, -1 },
	[FE_M_CODE7_DAZ] = { "exp_avg code 7, DAZ", -1, -1 },
	[FE_V_CODE7_DAZ] = { "exp_avg_sq code 7, DAZ", -1, -1 },
	[FE_SM_2P16] = { "exp_avg scale 2^16", -1, -1 },
	[FE_SM_BELOW_2P16] = { "exp_avg scale below 2^16", -1, -1 },
	[FE_SV_NEG] = { "exp_avg_sq scale negative", -1, -1 },
	[FE_SV_2P32] = { "exp_avg_sq scale 2^32", -1, -1 },
	[FE_SV_BELOW_2P32] = { "exp_avg_sq scale below 2^32", -1, -1 },
	[FE_SM_NEG_2P16] = { "exp_avg scale -2^16", -1, -1 },
	[FE_SM_NEG] = { "exp_avg scale -1", -1, -1 },
	[FE_SM_NEG_ZERO] = { "exp_avg scale -0", -1, -1 },
	[FE_SM_SUBNORMAL] = { "exp_avg scale 2^-130", -1, -1 },
	[FE_X_M_MIN] = { "exp_avg x 2^-14", 0, 0 },
	[FE_X_M_BELOW] = { "exp_avg x below 2^-14", 0, 0 },
	[FE_X_M_HALF] = { "exp_avg x (7.5 2^20 - 1/2) 2^-37", 0, 0 },
	[FE_INV_M_MIN] = { "exp_avg max 2^14", 0, 0 },
	[FE_INV_M_PAST] = { "exp_avg max past 2^14", 0, 0 },
	[FE_INV_M_ODD] = { "exp_avg max 20000", 0, 0 },
	[FE_M_ZERO] = { "exp_avg 0", 0, 0 },
	[FE_X_V_MIN] = { "exp_avg_sq x 2^-30", 0.5, 0 },
	[FE_X_V_BELOW] = { "exp_avg_sq x below 2^-30", 0.5, 0 },
	[FE_X_V_HALF] = { "exp_avg_sq x (k 2^20 + 2^19 - 1/2) 2^-53", 0.5, 0 },
	[FE_INV_V_MIN] = { "exp_avg_sq max 2^30", 0.5, 0 },
	[FE_INV_V_PAST] = { "exp_avg_sq max past 2^30", 0.5, 0 },
	[FE_INV_V_ODD] = { "exp_avg_sq max 1.6e9", 0.5, 0 },
};

/* fl(a * b) in fp32 (through a volatile: no wider intermediate). */
static float mul_f(float a, float b)
{
	volatile float r = a * b;

	return r;
}

/*
 * A float g whose x = fl(g * @inv) (@sq: fl(fl(g * g) * @inv)) is a
 * normal code's value next to a boundary of rounding to nearest, codes
 * @c_lo to @c_hi of exponent bias offset @bias_off, and whose product with
 * the inverse as the fast path would have it, fl(@inv / @rebias) (inexact
 * when that is below 2^-126), rounds to the other side: a fast path taken
 * with that inverse would make another code.  Asserts that one is found.
 */
static float g_on_boundary(float inv, float rebias, uint32_t bias_off, uint32_t c_lo,
			   uint32_t c_hi, bool sq)
{
	float inv2 = inv / rebias;

	for (uint32_t c = c_lo; c <= c_hi; c++) {
		for (int d = -2; d <= 1; d++) {
			float xt = f_of(((c + bias_off) << 20) + 0x80000u + (uint32_t)d);
			float g = sq ? sqrtf(xt / inv) : xt / inv;

			for (int k = 0; k < 16; k++)
				g = nextafterf(g, 0.0f);
			for (int k = 0; k < 32; k++, g = nextafterf(g, INFINITY)) {
				float y = sq ? mul_f(g, g) : g;
				float x = mul_f(y, inv), x2 = mul_f(y, inv2);

				if (x < 1.0f &&
				    ((u_of(x) + 0x80000u) >> 20) - bias_off != (u_of(x2) + 0x80000u) >> 20)
					return g;
			}
		}
	}
	ck_abort_msg("no gradient on a code boundary with inverse %a", (double)inv);
	return 0.0f;
}

/*
 * A float g whose x = fl(g * g) * 2^6 (exp_avg_sq's largest value 2^-6)
 * is (k 2^20 + 2^19 - f) 2^-53, k in 1..7 and f 1/4 or 1/2: then
 * trunc(x * 2^53) + 2^19 and round(x * 2^53) + 2^19 differ at bit 20.
 */
static float g_v_half(void)
{
	for (int k = 7; k >= 1; k--) {
		for (int q = 1; q <= 2; q++) {
			double x = ((double)k * 0x1p20 + 0x1p19 - 0.25 * q) * 0x1p-53;
			float g = (float)sqrt(x * 0x1p-6);

			if ((double)(float)x != x)
				continue;
			for (int d = 0; d < 8; d++)
				g = nextafterf(g, 0.0f);
			for (int d = 0; d < 16; d++, g = nextafterf(g, INFINITY))
				if ((double)mul_f(g, g) * 0x1p6 == x)
					return g;
		}
	}
	ck_abort_msg("no gradient whose square is on an exp_avg_sq subnormal code's half");
	return 0.0f;
}

/* Block 1 of a world_fast() world for the encode edge @e. */
static void world_fast_encode(unsigned char *cm, float *sm, float *g, enum fast_edge e,
			      uint64_t *s)
{
	const size_t j = QB + 9; /* the element on the edge */

	for (size_t i = QB; i < 2 * QB; i++) {
		bool neg = t_rnd_below(s, 2);
		double u = 1.0 - 0.5 * t_rnd_unit(s); /* (0.5, 1] */
		int k = e == FE_INV_M_MIN || e == FE_INV_M_PAST || e == FE_INV_M_ODD ? 14 : -3;

		if (e <= FE_M_ZERO) {
			/* within (1/2, 1] of the largest, 2^-3 or 2^14 */
			g[i] = (float)((neg ? -1.0 : 1.0) * ldexp(u, k));
		} else if (e <= FE_X_V_HALF) {
			/* exp_avg half of the old (scale 1: >= 2^-3) and g / 2 of
			 * the same sign; exp_avg_sq g^2, the largest 2^-6 */
			g[i] = (float)((cm[i] & 0x80 ? -1.0 : 1.0) * ldexp(u, -3));
		} else {
			/* old exp_avg -30720 s, g = 2^15 s: exp_avg 1024 s, exp_avg_sq 2^30 */
			cm[i] = (unsigned char)(119u | (neg ? 0u : 0x80u));
			g[i] = neg ? -0x1p15f : 0x1p15f;
		}
	}
	switch (e) {
	case FE_X_M_MIN: g[QB] = 0x1p-3f; g[j] = -0x1p-17f; break;
	case FE_X_M_BELOW: g[QB] = 0x1p-3f; g[j] = -nextafterf(0x1p-17f, 0.0f); break;
	case FE_X_M_HALF: g[QB] = 0x1p-3f; g[j] = (float)(15728639.0 * 0x1p-41); break;
	case FE_INV_M_MIN: g[QB] = 0x1p14f; break;
	case FE_INV_M_PAST: g[QB] = nextafterf(0x1p14f, INFINITY); break;
	case FE_INV_M_ODD:
		g[QB] = 20000.0f;
		ck_assert_uint_eq(u_of(1.0f / 20000.0f) & 1, 1);
		/* x in [1/4, 1) */
		g[j] = g_on_boundary(1.0f / 20000.0f, Q8_M_REBIAS, Q8_M_BIAS_OFF, 104, 119, false);
		break;
	case FE_M_ZERO: g[j] = -0.0f; break;
	case FE_X_V_MIN: g[QB] = 0x1p-3f; g[j] = 0x1p-18f; break;
	/* g^2 rounds to 2^-36 (1 - 2^-23) */
	case FE_X_V_BELOW: g[QB] = 0x1p-3f; g[j] = nextafterf(0x1p-18f, 0.0f); break;
	case FE_X_V_HALF: g[QB] = 0x1p-3f; g[j] = g_v_half(); break;
	case FE_INV_V_MIN: break;
	/* g^2 rounds to 2^30 (1 + 2^-22); exp_avg 1024 + 2^-9 */
	case FE_INV_V_PAST: cm[j] = 119; g[j] = -nextafterf(0x1p15f, INFINITY); break;
	case FE_INV_V_ODD: {
		float inv = 1.0f / mul_f(40000.0f, 40000.0f);

		ck_assert_uint_eq(u_of(inv) & 1, 1);
		cm[QB] = 119 | 0x80;
		g[QB] = 40000.0f; /* exp_avg 4640 */
		cm[j] = 119 | 0x80;
		/* x in [1/4, 1/2): g in [20000, 28285), exp_avg in [-5360, -1217] */
		g[j] = g_on_boundary(inv, Q8_V_REBIAS, Q8_V_BIAS_OFF, 232, 239, true);
		break;
	}
	default: break;
	}
	if (e >= FE_X_V_MIN)
		sm[1] = e >= FE_INV_V_MIN ? 0x1p15f : 1.0f;
}

static void world_fast(struct world *w, enum fast_edge e, uint64_t seed)
{
	unsigned char *cm = w->t.exp_avg, *cv = w->t.exp_avg_sq;
	float *sm = (float *)w->t.exp_avg_scale, *sv = (float *)w->t.exp_avg_sq_scale;
	float *g = (float *)(void *)(w->buf[W_GRAD] + w->off[W_GRAD]);
	uint64_t s = seed;

	ck_assert_int_eq(w->gd, TIER_FP32);
	for (size_t b = 0; b < nblocks(w->n); b++) {
		sm[b] = (float)pow(2.0, -20.0 + 30.0 * t_rnd_unit(&s));
		sv[b] = sm[b] * sm[b] * (float)pow(2.0, -2.0 + 4.0 * t_rnd_unit(&s));
	}
	for (size_t i = 0; i < w->n; i++) {
		unsigned mag = 96 + (unsigned)t_rnd_below(&s, 25), neg = (unsigned)t_rnd_below(&s, 2);
		/* the code's value; the gradient (hp_adamw's grad_scale 2^-10) of its sign */
		double m = ldexp(1.0 + (mag & 7) / 8.0, (int)(mag >> 3) - 15) * (double)sm[i / QB];

		cm[i] = (unsigned char)(mag | neg << 7);
		cv[i] = (unsigned char)(200 + t_rnd_below(&s, 49));
		g[i] = (float)((neg ? -1.0 : 1.0) * m * (1.0 + t_rnd_unit(&s)) * 1024.0);
	}
	switch (e) {
	case FE_M_CODE7:
	case FE_M_CODE7_DAZ: cm[QB + 77] = 7 | 0x80; break;
	case FE_M_CODE8: cm[QB + 77] = 8; break;
	case FE_V_CODE7:
	case FE_V_CODE7_DAZ: cv[QB + 200] = 7; break;
	case FE_V_CODE0: cv[QB + 3] = 0; break;
	case FE_SM_2P16: sm[1] = 0x1p16f; break;
	case FE_SM_BELOW_2P16: sm[1] = nextafterf(0x1p16f, 0.0f); break;
	case FE_SV_NEG: sv[1] = -sv[1]; break;
	case FE_SV_2P32: sv[1] = 0x1p32f; break;
	case FE_SV_BELOW_2P32: sv[1] = nextafterf(0x1p32f, 0.0f); break;
	case FE_SM_NEG_2P16: sm[1] = -0x1p16f; break;
	case FE_SM_NEG: sm[1] = -1.0f; break;
	case FE_SM_NEG_ZERO: sm[1] = -0.0f; break;
	case FE_SM_SUBNORMAL: sm[1] = 0x1p-130f; break;
	default:
		if (fast_edges[e].beta1 >= 0)
			world_fast_encode(cm, sm, g, e, &s);
		break;
	}
}

/* Subnormal inputs read as 0 and results flushed (x86's MXCSR DAZ and
 * FTZ) while @on; returns the state to restore.  Elsewhere nothing. */
static unsigned daz_set(bool on)
{
#if defined(__x86_64__) || defined(__i386__)
	unsigned old = _mm_getcsr();

	if (on)
		_mm_setcsr(old | 0x8040u);
	return old;
#else
	(void)on;
	return 0;
#endif
}

static void daz_restore(unsigned old)
{
#if defined(__x86_64__) || defined(__i386__)
	_mm_setcsr(old);
#else
	(void)old;
#endif
}

/* _i = edge * 2 + sr */
START_TEST(q8_fast_paths)
{
	enum fast_edge e = (enum fast_edge)(_i / 2);
	bool sr = _i % 2, daz = e == FE_M_CODE7_DAZ || e == FE_V_CODE7_DAZ;
	struct tier_adam_params hp = hp_adamw;
	unsigned csr;
	struct world base, want;
	bool ran = false;

	if (fast_edges[e].beta1 >= 0) {
		hp.beta1 = fast_edges[e].beta1;
		hp.beta2 = fast_edges[e].beta2;
		hp.grad_scale = 1.0;
	}
	world_init(&base, 4 * QB + 100, TIER_FP32, TIER_BF16, false, 0xFA57u + (uint64_t)_i, false);
	world_fast(&base, e, 0x5EEDu + (uint64_t)e);
	world_copy(&want, &base);
	csr = daz_set(daz);
	run_steps(&want, NULL, ADAMW_SCALAR, &hp, sr, 1);
	daz_restore(csr);
	for (size_t v = 0; v < ARRAY_SIZE(simd_isas); v++) {
		struct world got;
		char what[160];

		if (!adamw_isa_supported(simd_isas[v]))
			continue;
		ran = true;
		world_copy(&got, &base);
		csr = daz_set(daz);
		run_steps(&got, NULL, simd_isas[v], &hp, sr, 1);
		daz_restore(csr);
		snprintf(what, sizeof(what), "%s vs scalar, block 1 with %s, %s",
			 adamw_isa_name(simd_isas[v]), fast_edges[e].name,
			 sr ? "stochastic" : "nearest");
		world_expect(&got, &want, what);
		world_free(&got);
	}
	if (!ran && _i == 0)
		printf("note: this CPU runs no SIMD version of the adam kernel; q8_fast_paths compares nothing\n");
	world_free(&base);
	world_free(&want);
}
END_TEST

/* Through a pool of 3 threads with tiles of 256 elements; _i = grad * 4 + out. */
START_TEST(q8_pool_tiles)
{
	int gd = _i / 4, od = _i % 4 - 1;
	struct tier_pool *pool;
	struct world base, want;
	size_t n = QB * 37 + 100;

	ck_assert_int_eq(tier_pool_create(3, &pool), 0);
	world_init(&base, n, gd, od, true, 0xB001u + (uint64_t)_i, false);
	base.t.index0 = ((uint64_t)1 << 32) - 8 * QB;
	world_copy(&want, &base);
	run_steps(&want, NULL, ADAMW_SCALAR, &hp_adamw, true, 2);
	adamw_set_tile(200); /* rounded up to 256 */
	for (int v = 0; v < ADAMW_ISA__COUNT; v++) {
		struct world got;

		if (!adamw_isa_supported((enum adamw_isa)v))
			continue;
		world_copy(&got, &base);
		run_steps(&got, pool, (enum adamw_isa)v, &hp_adamw, true, 2);
		world_expect(&got, &want, adamw_isa_name((enum adamw_isa)v));
		world_free(&got);
	}
	{
		struct world got;
		struct tier_adam_params h = hp_with(&hp_adamw, true, 1);

		world_copy(&got, &base);
		ck_assert_int_eq(tier_adam_step(pool, &h, &got.t), 0);
		h.step = 2;
		ck_assert_int_eq(tier_adam_step(pool, &h, &got.t), 0);
		world_expect(&got, &want, "tier_adam_step");
		world_free(&got);
	}
	adamw_set_tile(0);
	world_free(&base);
	world_free(&want);
	tier_pool_destroy(pool);
}
END_TEST

/* ------------------------------------------------------ split invariance */

/* One call over the whole array equals calls over pieces cut at block
 * boundaries (each with its index0 and its scales), every version. */
START_TEST(q8_split)
{
	const size_t n = 40 * QB + 13;
	const size_t cuts[] = { 0, QB, 3 * QB, 16 * QB, 17 * QB, 39 * QB, n };
	const uint64_t index0 = ((uint64_t)3 << 32) - 20 * QB; /* crosses 2^32 * 3 */

	for (int v = 0; v < ADAMW_ISA__COUNT; v++) {
		struct world base, want, got;

		if (!adamw_isa_supported((enum adamw_isa)v))
			continue;
		world_init(&base, n, TIER_BF16, TIER_BF16, false, 0x5A17u, false);
		base.t.index0 = index0;
		world_copy(&want, &base);
		world_copy(&got, &base);
		run_steps(&want, NULL, ADAMW_SCALAR, &hp_adamw, true, 1);
		for (size_t k = 0; k + 1 < ARRAY_SIZE(cuts); k++) {
			struct tier_adam_tensors t = got.t;
			size_t o = cuts[k];
			struct tier_adam_params h = hp_with(&hp_adamw, true, 1);
			struct adam_consts c;

			t.n = cuts[k + 1] - o;
			t.param += o;
			t.exp_avg = (char *)t.exp_avg + o;
			t.exp_avg_sq = (char *)t.exp_avg_sq + o;
			t.exp_avg_scale += o / QB;
			t.exp_avg_sq_scale += o / QB;
			t.grad = (const char *)t.grad + 2 * o;
			t.param_out = (char *)t.param_out + 2 * o;
			t.index0 = index0 + o;
			adam_consts_init(&h, &c);
			ck_assert_int_eq(adamw_step_isa(NULL, (enum adamw_isa)v, &c, &t), 0);
		}
		world_expect(&got, &want, adamw_isa_name((enum adamw_isa)v));
		world_free(&base);
		world_free(&want);
		world_free(&got);
	}
}
END_TEST

/* ------------------------------------------------ encode and decode */

/* Nearest: |decode(encode(x)) - x| within half a step for normal codes
 * (the step of a code with exponent field e >= 1 is 2^(e - B - 3)); the
 * value through a scale within that (and an ulp of the scale multiply). */
START_TEST(q8_round_trip)
{
	uint64_t s = 0xC0DEu;
	size_t normal = 0, sub = 0;

	for (int blk = 0; blk < 400; blk++) {
		float vals[QB], inv, scale;
		uint32_t mx = 0;
		bool isv = blk % 2;
		double mu = -10.0 + 8.0 * t_rnd_unit(&s), sigma = 0.5 + 3.0 * t_rnd_unit(&s);

		for (int j = 0; j < QB; j++) {
			double x = exp(mu + sigma * t_rnd_normal(&s));

			vals[j] = (float)(isv || t_rnd_below(&s, 2) ? x : -x);
			mx = (u_of(vals[j]) & 0x7fffffffu) > mx ? u_of(vals[j]) & 0x7fffffffu : mx;
		}
		scale = q8_scale(mx, &inv);
		ck_assert(inv != 0.0f);
		ck_assert(scale == f_of(mx));
		for (int j = 0; j < QB; j++) {
			float x = fminf(fabsf(vals[j]) * inv, 1.0f);
			uint32_t code = isv ? q8_enc_v(vals[j], inv, Q8_RND_NEAREST)
					    : q8_enc_m(vals[j], inv, Q8_RND_NEAREST);
			uint32_t mag = isv ? code : code & 0x7f;
			int B = isv ? 31 : 15;
			double xd = ref_dec_mag(mag, B);
			float dec = isv ? q8_dec_v(code, scale) : q8_dec_m(code, scale);
			double half, e;

			/* (if, not ck_assert: a mark per call) */
			if (code > 255)
				ck_abort_msg("code %u", code);
			if (isv && (code & 0x80) && code > 248)
				ck_abort_msg("v code %u", code);
			if (!isv && !signbit(dec) != !signbit(vals[j]))
				ck_abort_msg("sign of %g", (double)vals[j]);
			if ((double)(isv ? q8_dec_v(code, 1.0f) : fabsf(q8_dec_m(code, 1.0f))) != xd)
				ck_abort_msg("code %u does not decode to %g", code, xd);
			if (mag >> 3) {
				half = ldexp(1.0, (int)(mag >> 3) - B - 4);
				normal++;
			} else {
				half = ldexp(1.0, -(B + 3));
				sub++;
			}
			e = fabs(xd - (double)x);
			ck_assert_msg(e <= half, "x %a code %u: error %g > half step %g", (double)x, code, e, half);
			e = fabs((double)dec - (double)vals[j]);
			ck_assert_msg(e <= half * (double)scale * (1 + 0x1p-20) + (double)scale * 0x1p-23,
				      "value %g code %u scale %g: error %g", (double)vals[j], code,
				      (double)scale, e);
		}
	}
	printf("round trip: %zu normal and %zu subnormal codes within half a step\n", normal, sub);
	fflush(stdout);
	ck_assert_uint_gt(normal, 50000);
	ck_assert_uint_gt(sub, 100);
}
END_TEST

/* Stochastic: the mean of many encodings of one value is the value. */
START_TEST(q8_unbiased)
{
	static const float xs[] = { 0.7071f, 0.33f, 0.01234f, 3.1e-5f, 4.2e-6f, 1.1e-9f, 1.0f, 0.999f };
	const int N = 1 << 16;

	for (size_t k = 0; k < ARRAY_SIZE(xs); k++) {
		for (int isv = 0; isv < 2; isv++) {
			double sum = 0, lo = 0, hi = 0;
			float x = xs[k];

			for (int i = 0; i < N; i++) {
				uint32_t r = sr_hash32(0xABCDu ^ (uint32_t)i), code;
				double d;

				code = isv ? q8_enc_v(x, 1.0f, (r >> 16) << 4) : q8_enc_m(-x, 1.0f, (r & 0xffff) << 4);
				d = isv ? (double)q8_dec_v(code, 1.0f) : -(double)q8_dec_m(code, 1.0f);
				sum += d;
				if (i == 0 || d < lo)
					lo = d;
				if (i == 0 || d > hi)
					hi = d;
			}
			{
				double mean = sum / N, p = hi > lo ? ((double)x - lo) / (hi - lo) : 0;
				double sigma = (hi - lo) * sqrt(p * (1 - p) / N) + (hi - lo) * 0x1p-16;

				ck_assert_msg(fabs(mean - (double)x) <= 5 * sigma,
					      "%s x %g: mean %.9g (codes %g..%g), 5 sigma %g",
					      isv ? "v" : "m", (double)x, mean, lo, hi, 5 * sigma);
			}
		}
	}
}
END_TEST

/* Scales of special blocks; codes of the edges. */
START_TEST(q8_scale_cases)
{
	float inv;

	ck_assert(u_of(q8_scale(0x7fc12345u, &inv)) == 0x7fc00000u && inv == 0);
	ck_assert(q8_scale(0x7f800000u, &inv) == INFINITY && inv == 0);
	ck_assert(q8_scale(0, &inv) == 0 && inv == 0);
	ck_assert(q8_scale(0x007fffffu, &inv) == 0 && inv == 0); /* subnormal max: 0 */
	ck_assert(q8_scale(0x00800000u, &inv) == 0x1p-126f && inv == 0x1p126f);
	ck_assert(q8_scale(u_of(FLT_MAX), &inv) == FLT_MAX && inv > 0);
	/* the codes of 1 and of the edges of the normal range */
	ck_assert_uint_eq(q8_enc_m(1.0f, 1.0f, Q8_RND_NEAREST), 120);
	ck_assert_uint_eq(q8_enc_m(-1.0f, 1.0f, Q8_RND_NEAREST), 0x80 | 120);
	ck_assert_uint_eq(q8_enc_v(1.0f, 1.0f, Q8_RND_NEAREST), 248);
	ck_assert_uint_eq(q8_enc_m(0x1p-14f, 1.0f, Q8_RND_NEAREST), 8);
	ck_assert_uint_eq(q8_enc_v(0x1p-30f, 1.0f, Q8_RND_NEAREST), 8);
	ck_assert_uint_eq(q8_enc_m(7.5f * 0x1p-17f, 1.0f, Q8_RND_NEAREST), 8); /* carry into normal */
	ck_assert_uint_eq(q8_enc_m(0x1p-18f, 1.0f, Q8_RND_NEAREST), 1);         /* half: up */
	ck_assert_uint_eq(q8_enc_m(0x1p-19f, 1.0f, Q8_RND_NEAREST), 0);
	ck_assert_uint_eq(q8_enc_m(1.0625f * 0.5f, 1.0f, Q8_RND_NEAREST), 113); /* tie: up */
	ck_assert_uint_eq(q8_enc_m(2.0f, 1.0f, Q8_RND_NEAREST), 120);           /* clamped */
	ck_assert_uint_eq(q8_enc_m(1.0f, 1.0f, 0xffff0u), 120);                 /* 1 never rounds up */
	ck_assert_uint_eq(q8_enc_v(1.0f, 1.0f, 0xffff0u), 248);
	/* decode: non-finite scales poison every element, zero codes included */
	ck_assert(isnan(q8_dec_m(0, INFINITY)) && isinf(q8_dec_m(5, INFINITY)));
	ck_assert(isnan(q8_dec_v(0, f_of(0x7fc00000u))) && isnan(q8_dec_v(200, f_of(0x7fc00000u))));
	ck_assert(q8_dec_m(0x80 | 120, 3.0f) == -3.0f && q8_dec_v(248, 3.0f) == 3.0f);
	ck_assert(q8_dec_m(1, 1.0f) == 0x1p-17f && q8_dec_v(7, 1.0f) == 7 * 0x1p-33f);
	for (uint32_t c = 1; c < 256; c++) /* monotonic */
		ck_assert(q8_dec_v(c, 1.0f) > q8_dec_v(c - 1, 1.0f));
}
END_TEST

/* ------------------------------------------------------------- decay */

/* Mean exp_avg_sq after one step of N(0, 1) gradients and 200 of 0. */
static double decay_mean_v(struct tier_pool *pool, int md, bool sr)
{
	const size_t n = (size_t)1 << (T_SANITIZED ? 16 : 20); /* t_helpers.h */
	uint64_t s = 0xDECAu;
	float *p = calloc(n, 4), *g = malloc(n * 4), *sm = calloc(nblocks(n), 4), *sv = calloc(nblocks(n), 4);
	void *m = calloc(n, md == TIER_Q8 ? 1 : 4), *v = calloc(n, md == TIER_Q8 ? 1 : 4);
	struct tier_adam_tensors t = { .n = n, .param = p, .exp_avg = m, .exp_avg_sq = v,
				       .moment_dtype = (enum tier_dtype)md, .grad = g,
				       .grad_dtype = TIER_FP32, .exp_avg_scale = sm,
				       .exp_avg_sq_scale = sv };
	double sum = 0;

	ck_assert(p && g && m && v && sm && sv);
	for (size_t i = 0; i < n; i++)
		g[i] = (float)t_rnd_normal(&s);
	for (uint64_t st = 1; st <= 201; st++) {
		struct tier_adam_params h = hp_with(&hp_adamw, sr, st);

		h.grad_scale = 1.0;
		ck_assert_int_eq(tier_adam_step(pool, &h, &t), 0);
		if (st == 1)
			memset(g, 0, n * 4);
	}
	for (size_t i = 0; i < n; i++)
		sum += md == TIER_Q8 ? (double)q8_dec_v(((unsigned char *)v)[i], sv[i / QB]) : (double)((float *)v)[i];
	free(p), free(g), free(m), free(v), free(sm), free(sv);
	return sum / (double)n;
}

START_TEST(q8_decay)
{
	struct tier_pool *pool;
	double f32, rn, sr;

	ck_assert_int_eq(tier_pool_create(2, &pool), 0);
	f32 = decay_mean_v(pool, TIER_FP32, false);
	rn = decay_mean_v(pool, TIER_Q8, false);
	sr = decay_mean_v(pool, TIER_Q8, true);
	tier_pool_destroy(pool);
	printf("q8 decay: mean exp_avg_sq after 1 + 200 steps: fp32 %.6g, q8 nearest %.6g (%+.3f%%), "
	       "q8 stochastic %.6g (%+.3f%%)\n", f32, rn, 100 * (rn / f32 - 1), sr, 100 * (sr / f32 - 1));
	fflush(stdout);
	ck_assert_msg(fabs(rn / f32 - 1) < 0.01, "q8 nearest: mean %g, fp32 %g", rn, f32);
	ck_assert_msg(fabs(sr / f32 - 1) < 0.01, "q8 stochastic: mean %g, fp32 %g", sr, f32);
}
END_TEST

/* ---------------------------------------------------------- arguments */

static const struct {
	const char *name, *msg;
} bad_cases[] = {
	{ "grad q8", "grad dtype 3 (q8" },
	{ "out q8", "param_out dtype 3 (q8" },
	{ "no exp_avg_scale", "exp_avg_scale is NULL" },
	{ "no exp_avg_sq_scale", "exp_avg_sq_scale is NULL" },
	{ "index0 misaligned", "index0 100" },
	{ "index0 misaligned, n 0", "index0 257" },
};

START_TEST(q8_bad_arguments)
{
	float p[5] = { 1, 2, 3, 4, 5 }, g[5] = { 1, 1, 1, 1, 1 }, o[5] = { 0 }, sm[1] = { 0 }, sv[1] = { 0 };
	unsigned char m[5] = { 0 }, v[5] = { 0 };
	const float p0[5] = { 1, 2, 3, 4, 5 };
	struct tier_adam_tensors t = { .n = 5, .param = p, .exp_avg = m, .exp_avg_sq = v,
				       .moment_dtype = TIER_Q8, .grad = g, .grad_dtype = TIER_FP32,
				       .param_out = o, .out_dtype = TIER_FP32,
				       .exp_avg_scale = sm, .exp_avg_sq_scale = sv };
	struct adam_consts c;
	int rc;

	switch (_i) {
	case 0: t.grad_dtype = TIER_Q8; break;
	case 1: t.out_dtype = TIER_Q8; break;
	case 2: t.exp_avg_scale = NULL; break;
	case 3: t.exp_avg_sq_scale = NULL; break;
	case 4: t.index0 = 100; break;
	case 5: t.index0 = 257; t.n = 0; break;
	default: ck_abort_msg("no case %d", _i);
	}
	rc = tier_adam_step(NULL, &hp_adamw, &t);
	ck_assert_msg(rc == -EINVAL, "%s: %d", bad_cases[_i].name, rc);
	ck_assert_msg(strstr(tier_last_error(), bad_cases[_i].msg), "%s: message '%s' lacks '%s'",
		      bad_cases[_i].name, tier_last_error(), bad_cases[_i].msg);
	adam_consts_init(&hp_adamw, &c);
	ck_assert_int_eq(adamw_check(&t), -EINVAL);
	ck_assert_int_eq(tier_adam_roofline(NULL, &t), -EINVAL);
	ck_assert_int_eq(adamw_step_isa(NULL, ADAMW_SCALAR, &c, &t), -EINVAL);
	ck_assert_int_eq(adamw_roofline_isa(NULL, ADAMW_SCALAR, &t), -EINVAL);
	ck_assert(memcmp(p, p0, sizeof(p)) == 0);
	/* and the good case */
	t = (struct tier_adam_tensors){ .n = 5, .param = p, .exp_avg = m, .exp_avg_sq = v,
					.moment_dtype = TIER_Q8, .grad = g, .grad_dtype = TIER_FP32,
					.exp_avg_scale = sm, .exp_avg_sq_scale = sv, .index0 = 512 };
	ck_assert_int_eq(tier_adam_step(NULL, &hp_adamw, &t), 0);
	ck_assert(sm[0] > 0 && sv[0] > 0 && m[0] == 120 && v[0] == 248);
	t.n = 0;
	t.exp_avg_scale = t.exp_avg_sq_scale = NULL;
	ck_assert_int_eq(tier_adam_step(NULL, &hp_adamw, &t), 0);
}
END_TEST

/* ------------------------------------------------------------ roofline */

/* The roofline writes the arrays the update writes and nothing around
 * them; every version the same bytes.  _i = out (-1..2). */
START_TEST(q8_roofline)
{
	int od = _i - 1;
	struct world base, want;

	world_init(&base, 4 * QB + 9, TIER_BF16, od, true, 0x400Fu, false);
	world_copy(&want, &base);
	ck_assert_int_eq(adamw_roofline_isa(NULL, ADAMW_SCALAR, &want.t), 0);
	for (int a = 0; a < W__N; a++) {
		if (!base.buf[a])
			continue;
		/* guards untouched; the written arrays changed, the gradient not */
		ck_assert(memcmp(want.buf[a], base.buf[a], base.off[a]) == 0);
		ck_assert(memcmp(want.buf[a] + base.off[a] + base.cnt[a] * base.es[a],
				 base.buf[a] + base.off[a] + base.cnt[a] * base.es[a],
				 base.size[a] - base.off[a] - base.cnt[a] * base.es[a]) == 0);
		ck_assert_msg((memcmp(want.buf[a], base.buf[a], base.size[a]) == 0) == (a == W_GRAD),
			      "%s", w_name[a]);
	}
	for (int v = 1; v < ADAMW_ISA__COUNT; v++) {
		struct world got;

		if (!adamw_isa_supported((enum adamw_isa)v))
			continue;
		world_copy(&got, &base);
		ck_assert_int_eq(adamw_roofline_isa(NULL, (enum adamw_isa)v, &got.t), 0);
		world_expect(&got, &want, adamw_isa_name((enum adamw_isa)v));
		world_free(&got);
	}
	world_free(&base);
	world_free(&want);
}
END_TEST

/* ---------------------------------------------------------- block size */

/*
 * The format with blocks of @B elements (the kernel's is TIER_Q8_BLOCK),
 * emulated element by element with adam_math.h's functions; moments only
 * (the direction m / (sqrt(v) + eps) does not depend on the parameters).
 */
struct emu {
	size_t n, B;
	unsigned char *m, *v;
	float *sm, *sv;
};

static void emu_step(struct emu *e, const float *g, const struct adam_consts *c)
{
	float mb[4096], vb[4096];

	for (size_t b0 = 0; b0 < e->n; b0 += e->B) {
		size_t n = e->n - b0 < e->B ? e->n - b0 : e->B, blk = b0 / e->B;
		uint32_t mxm = 0, mxv = 0;
		float invm, invv, p = 0;

		for (size_t j = 0; j < n; j++) {
			size_t i = b0 + j;

			mb[j] = q8_dec_m(e->m[i], e->sm[blk]);
			vb[j] = q8_dec_v(e->v[i], e->sv[blk]);
			adam_elem(c, g[i], &p, &mb[j], &vb[j]);
			mxm = (u_of(mb[j]) & 0x7fffffffu) > mxm ? u_of(mb[j]) & 0x7fffffffu : mxm;
			mxv = (u_of(vb[j]) & 0x7fffffffu) > mxv ? u_of(vb[j]) & 0x7fffffffu : mxv;
		}
		e->sm[blk] = q8_scale(mxm, &invm);
		e->sv[blk] = q8_scale(mxv, &invv);
		for (size_t j = 0; j < n; j++) {
			size_t i = b0 + j;
			uint32_t r = sr_hash32(sr_key(c->sr_base, 0) ^ (uint32_t)i);

			e->m[i] = (unsigned char)(invm != 0 ? q8_enc_m(mb[j], invm, c->sr_moments ? (r & 0xffff) << 4 : Q8_RND_NEAREST) : 0);
			e->v[i] = (unsigned char)(invv != 0 ? q8_enc_v(vb[j], invv, c->sr_moments ? (r >> 16) << 4 : Q8_RND_NEAREST) : 0);
		}
	}
}

/*
 * A gradient stream of R rows of C: element (r, c) at step t is
 * s_r * t_c * (mu_rc + N(0, 1)), row scales s_r log-uniform over 3
 * decades (_i = 0; 6 decades, _i = 1), column scales t_c over 1 decade, a persistent mean mu_rc ~
 * N(0, 0.3^2) (the signal), fresh noise each step; 100 steps of AdamW
 * with fp32 moments and with q8 moments of blocks of 64, 256, 2048.  The
 * error: ||u_q8 - u_fp32|| / ||u_fp32||, u = m / (sqrt(v) * inv_bc2_sqrt +
 * eps) * (bias correction of m), over all elements.
 */
START_TEST(q8_block_size)
{
	/* 128 rows; 32 in a sanitizer build (t_helpers.h), which runs this
	 * emulation ten times slower */
	enum { R = T_SANITIZED ? 32 : 128, C = 1024, STEPS = 100 };
	const size_t n = (size_t)R * C, Bs[] = { 64, 256, 2048 };
	float *g = malloc(n * 4), *mu = malloc(n * 4), *rs = malloc(R * 4), *cs = malloc(C * 4);
	float *m32 = calloc(n, 4), *v32 = calloc(n, 4);
	struct emu e[3][2];
	uint64_t s = 0xB10Cu;
	double err[3][2];

	ck_assert(g && mu && rs && cs && m32 && v32);
	for (int r = 0; r < R; r++)
		rs[r] = (float)pow(10.0, -(_i ? 6.0 : 3.0) * t_rnd_unit(&s));
	for (int c = 0; c < C; c++)
		cs[c] = (float)pow(10.0, -1.0 * t_rnd_unit(&s));
	for (size_t i = 0; i < n; i++)
		mu[i] = (float)(0.3 * t_rnd_normal(&s));
	for (int k = 0; k < 3; k++)
		for (int sr = 0; sr < 2; sr++) {
			e[k][sr].n = n;
			e[k][sr].B = Bs[k];
			e[k][sr].m = calloc(n, 1);
			e[k][sr].v = calloc(n, 1);
			e[k][sr].sm = calloc(n / Bs[k] + 1, 4);
			e[k][sr].sv = calloc(n / Bs[k] + 1, 4);
		}
	for (uint64_t st = 1; st <= STEPS; st++) {
		struct adam_consts cn, cs2;
		struct tier_adam_params h = hp_with(&hp_adamw, false, st);

		h.grad_scale = 1.0;
		adam_consts_init(&h, &cn);
		h.rounding = TIER_ROUND_STOCHASTIC;
		adam_consts_init(&h, &cs2);
		for (size_t i = 0; i < n; i++)
			g[i] = rs[i / C] * cs[i % C] * (mu[i] + (float)t_rnd_normal(&s));
		for (size_t i = 0; i < n; i++) {
			float p = 0;

			adam_elem(&cn, g[i], &p, &m32[i], &v32[i]);
		}
		for (int k = 0; k < 3; k++) {
			emu_step(&e[k][0], g, &cn);
			emu_step(&e[k][1], g, &cs2);
		}
		if (st == STEPS) {
			for (int k = 0; k < 3; k++)
				for (int sr = 0; sr < 2; sr++) {
					double num = 0, den = 0;

					for (size_t i = 0; i < n; i++) {
						size_t b = i / Bs[k];
						float mq = q8_dec_m(e[k][sr].m[i], e[k][sr].sm[b]);
						float vq = q8_dec_v(e[k][sr].v[i], e[k][sr].sv[b]);
						double u = (double)m32[i] / (sqrt((double)v32[i]) * (double)cn.inv_bc2_sqrt + (double)cn.eps);
						double uq = (double)mq / (sqrt((double)vq) * (double)cn.inv_bc2_sqrt + (double)cn.eps);

						num += (uq - u) * (uq - u);
						den += u * u;
					}
					err[k][sr] = sqrt(num / den);
				}
		}
	}
	for (int k = 0; k < 3; k++)
		printf("q8 block %4zu, row scales over %d decades: relative error of the update "
		       "direction after %d steps: nearest %.4f, stochastic %.4f\n", Bs[k],
		       _i ? 6 : 3, STEPS, err[k][0], err[k][1]);
	fflush(stdout);
	for (int k = 0; k < 3; k++)
		for (int sr = 0; sr < 2; sr++) {
			free(e[k][sr].m), free(e[k][sr].v), free(e[k][sr].sm), free(e[k][sr].sv);
		}
	/* loose: the format works at the chosen block size (3 bits of mantissa:
	 * a relative step of 1/8 to 1/16 per requantization, each step) */
	ck_assert_msg(err[1][0] < 0.25 && err[1][1] < 0.25, "block 256: %g %g", err[1][0], err[1][1]);
	free(g), free(mu), free(rs), free(cs), free(m32), free(v32);
}
END_TEST

/* The emulation with blocks of TIER_Q8_BLOCK is the kernel (so the block
 * size figures are the kernel's). */
START_TEST(q8_emulation_is_kernel)
{
	const size_t n = 9 * QB + 5;
	uint64_t s = 0xE1u;
	float *g = malloc(n * 4), *p = calloc(n, 4), *sm = calloc(nblocks(n), 4), *sv = calloc(nblocks(n), 4);
	unsigned char *m = calloc(n, 1), *v = calloc(n, 1);
	struct emu e = { n, QB, calloc(n, 1), calloc(n, 1), calloc(nblocks(n), 4), calloc(nblocks(n), 4) };
	struct tier_adam_tensors t = { .n = n, .param = p, .exp_avg = m, .exp_avg_sq = v,
				       .moment_dtype = TIER_Q8, .grad = g, .grad_dtype = TIER_FP32,
				       .exp_avg_scale = sm, .exp_avg_sq_scale = sv };

	for (uint64_t st = 1; st <= 10; st++) {
		struct tier_adam_params h = hp_with(&hp_adamw, st % 2, st);
		struct adam_consts c;

		h.weight_decay = 0;
		adam_consts_init(&h, &c);
		for (size_t i = 0; i < n; i++)
			g[i] = (float)(t_rnd_normal(&s) * pow(10.0, -3.0 * (double)(i / QB) / 9));
		emu_step(&e, g, &c);
		ck_assert_int_eq(tier_adam_step(NULL, &h, &t), 0);
		ck_assert(memcmp(e.m, m, n) == 0 && memcmp(e.v, v, n) == 0);
		ck_assert(memcmp(e.sm, sm, 4 * nblocks(n)) == 0 && memcmp(e.sv, sv, 4 * nblocks(n)) == 0);
	}
	free(g), free(p), free(sm), free(sv), free(m), free(v);
	free(e.m), free(e.v), free(e.sm), free(e.sv);
}
END_TEST

/* ----------------------------------------------------------------- suite */

static Suite *q8_suite(void)
{
	Suite *s = suite_create("adamw_q8");
	TCase *tc;

	tc = tcase_create("definition");
	tcase_set_timeout(tc, 300);
	tcase_add_loop_test(tc, q8_definition, 0, 4);
	tcase_add_test(tc, q8_emulation_is_kernel);
	suite_add_tcase(s, tc);

	tc = tcase_create("simd");
	tcase_set_timeout(tc, 600);
	tcase_add_loop_test(tc, q8_simd_vs_scalar, 0, 3 * 4 * 2 * 2);
	tcase_add_loop_test(tc, q8_fast_paths, 0, 2 * FE__N);
	tcase_add_loop_test(tc, q8_pool_tiles, 0, 3 * 4);
	tcase_add_test(tc, q8_split);
	tcase_add_loop_test(tc, q8_roofline, 0, 4);
	suite_add_tcase(s, tc);

	tc = tcase_create("format");
	tcase_set_timeout(tc, 300);
	tcase_add_test(tc, q8_scale_cases);
	tcase_add_test(tc, q8_round_trip);
	tcase_add_test(tc, q8_unbiased);
	tcase_add_test(tc, q8_decay);
	tcase_add_loop_test(tc, q8_block_size, 0, 2);
	suite_add_tcase(s, tc);

	tc = tcase_create("arguments");
	tcase_add_loop_test(tc, q8_bad_arguments, 0, (int)ARRAY_SIZE(bad_cases));
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	for (int v = 1; v < ADAMW_ISA__COUNT; v++)
		if (!adamw_isa_supported((enum adamw_isa)v))
			printf("note: this CPU (or build) cannot run the %s adam kernel: its comparisons are skipped\n",
			       adamw_isa_name((enum adamw_isa)v));
	return t_run_suite(q8_suite());
}
