/*
 * test_adamw.c - the CPU Adam/AdamW kernels (kernels/adamw*.c) and the
 * conversions of kernels/adam_math.h.
 *
 * Covers:
 *  - every SIMD version this CPU runs (avx2, avx512) equals the scalar one
 *    bit for bit (memcmp of parameters, moments, the copy, and the bytes
 *    around them), for every dtype combination (moments fp32/bf16 x grads
 *    fp32/bf16/fp16 x copy none/fp32/bf16/fp16), AdamW and Adam, three
 *    steps, over random data (magnitudes from 1e-6 to 1e3, zeros, -0,
 *    subnormals, inf and NaN with random payloads in the gradients, raw bit
 *    patterns in 16-bit arrays), ragged lengths 0..65537 and misaligned
 *    arrays (element offsets 1 and 3, bases off 32-byte alignment, 16-bit
 *    and fp32 arrays at odd byte addresses); the same through a thread
 *    pool with small tiles;
 *  - golden data from torch.optim (tests/golden/adamw, $TIER_GOLDEN): all
 *    steps of each case with fp32 state through every version; the final
 *    parameters and moments within 1e-6 relative (see golden_case);
 *  - a double-precision implementation of torch's formula over 100 steps:
 *    the fp32 state within 1e-6 relative;
 *  - bf16 moments equal adam_elem() in fp32 rounded to bf16 (a reference
 *    loop written here);
 *  - f32_to_bf16 and f32_to_f16: edge cases (ties, NaN, inf, max,
 *    subnormals) and sweeps against reference roundings written here;
 *    every fp16 value round-trips; the SIMD conversions equal the scalar
 *    ones over a sweep of float bit patterns (through the roofline kernel);
 *  - TIER_SIMD: "scalar", "avx2", "avx512" force that version (or warn and
 *    fall back where the CPU lacks it), lists pick the first entry the
 *    kernel knows, unknown entries warn and are ignored;
 *  - argument errors of adamw_check(), tier_adam_step(),
 *    tier_adam_roofline() and adamw_step_isa();
 *  - the roofline kernel reads the gradient, parameters and moments and
 *    writes exactly the arrays the update writes (and nothing around them).
 */
#include "config.h"

#include <check.h>
#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "common/options.h"
#include "common/pool.h"
#include "kernels/adam_math.h"
#include "kernels/adamw.h"
#include "t_helpers.h"

/* ------------------------------------------------------------- helpers */

static float f_from_bits(uint32_t u)
{
	float f;

	memcpy(&f, &u, sizeof(f));
	return f;
}

static uint32_t bits_of(float f)
{
	uint32_t u;

	memcpy(&u, &f, sizeof(u));
	return u;
}

enum val_kind { K_PARAM, K_EXP_AVG, K_EXP_AVG_SQ, K_GRAD };

/* A random value of the kind an array holds; @special allows inf, NaN and
 * raw bit patterns. */
static float rnd_value(uint64_t *s, enum val_kind k, bool special)
{
	size_t r = t_rnd_below(s, 1000);
	double mag;
	float x;

	if (r < 20)
		return 0.0f;
	if (r < 30)
		return -0.0f;
	if (special && r < 40) /* subnormal */
		return f_from_bits((uint32_t)(t_rnd_next(s) >> 32) & 0x807fffffu);
	if (special && r < 45)
		return t_rnd_below(s, 2) ? INFINITY : -INFINITY;
	if (special && r < 55) /* NaN, random payload and sign */
		return f_from_bits(0x7f800001u | ((uint32_t)(t_rnd_next(s) >> 32) & 0x807fffffu));
	if (special && r < 60) /* huge */
		return (float)(t_rnd_unit(s) * 1e30) * (t_rnd_below(s, 2) ? 1.0f : -1.0f);
	mag = pow(10.0, -6.0 + 9.0 * t_rnd_unit(s));
	x = (float)(mag * (0.5 + t_rnd_unit(s)));
	if (k == K_EXP_AVG_SQ)
		return x * x * 1e-3f;
	return t_rnd_below(s, 2) ? x : -x;
}

/* ------------------------------------------------------------- a world */

enum { A_PARAM, A_M, A_V, A_GRAD, A_OUT, A__N };
static const char *const arr_name[A__N] = { "param", "exp_avg", "exp_avg_sq", "grad", "param_out" };

/* Guard bytes on each side of every array. */
#define SLACK 128

/* The arrays of one update, each inside a buffer with SLACK bytes around it. */
struct world {
	size_t n;
	int dt[A__N]; /* dtype of each array; -1: absent (param_out) */
	unsigned char *buf[A__N];
	size_t size[A__N], off[A__N];
	struct tier_adam_tensors t;
};

/* Where each array starts: element offsets and extra bytes from a 64-byte
 * aligned base (param stays 4-byte aligned: it is a float *). */
struct layout {
	size_t elems[A__N];
	size_t bytes[A__N];
};

static const struct layout layouts[] = {
	{ { 0, 0, 0, 0, 0 }, { 0, 0, 0, 0, 0 } },
	{ { 1, 1, 3, 1, 3 }, { 0, 0, 0, 0, 0 } },
	{ { 3, 3, 1, 3, 1 }, { 0, 0, 0, 0, 0 } },
	{ { 1, 0, 0, 0, 0 }, { 0, 1, 3, 2, 1 } },
};

static void world_init(struct world *w, size_t n, int md, int gd, int od, const struct layout *l,
		       uint64_t seed, bool special, bool special_state)
{
	uint64_t s = seed;

	memset(w, 0, sizeof(*w));
	w->n = n;
	w->dt[A_PARAM] = TIER_FP32;
	w->dt[A_M] = w->dt[A_V] = md;
	w->dt[A_GRAD] = gd;
	w->dt[A_OUT] = od;
	for (int a = 0; a < A__N; a++) {
		size_t es;

		if (w->dt[a] < 0)
			continue;
		es = tier_dtype_size((enum tier_dtype)w->dt[a]);
		w->off[a] = SLACK + l->elems[a] * es + l->bytes[a];
		w->size[a] = (w->off[a] + n * es + SLACK + 63) & ~(size_t)63;
		w->buf[a] = aligned_alloc(64, w->size[a]);
		ck_assert_ptr_nonnull(w->buf[a]);
		for (size_t i = 0; i < w->size[a]; i++)
			w->buf[a][i] = (unsigned char)(t_rnd_next(&s) >> 56);
		if (a == A_OUT)
			continue; /* written, not read: random bytes */
		for (size_t i = 0; i < n; i++) {
			unsigned char *p = w->buf[a] + w->off[a] + i * es;
			bool sp = a == A_GRAD ? special : special_state && t_rnd_below(&s, 50) == 0;
			float x = rnd_value(&s, a == A_PARAM ? K_PARAM : a == A_M ? K_EXP_AVG :
						a == A_V ? K_EXP_AVG_SQ : K_GRAD, sp);
			uint16_t h;

			if (es == 4) {
				memcpy(p, &x, 4);
				continue;
			}
			if (sp && t_rnd_below(&s, 20) == 0)
				h = (uint16_t)(t_rnd_next(&s) >> 48); /* any bit pattern */
			else
				h = w->dt[a] == TIER_BF16 ? f32_to_bf16(x) : f32_to_f16(x);
			memcpy(p, &h, 2);
		}
	}
	w->t.n = n;
	w->t.param = (float *)(void *)(w->buf[A_PARAM] + w->off[A_PARAM]);
	w->t.exp_avg = w->buf[A_M] + w->off[A_M];
	w->t.exp_avg_sq = w->buf[A_V] + w->off[A_V];
	w->t.moment_dtype = (enum tier_dtype)md;
	w->t.grad = w->buf[A_GRAD] + w->off[A_GRAD];
	w->t.grad_dtype = (enum tier_dtype)gd;
	w->t.param_out = od >= 0 ? w->buf[A_OUT] + w->off[A_OUT] : NULL;
	w->t.out_dtype = od >= 0 ? (enum tier_dtype)od : TIER_FP32;
}

/* A copy of @src's bytes at the same offsets in fresh buffers. */
static void world_copy(struct world *dst, const struct world *src)
{
	*dst = *src;
	for (int a = 0; a < A__N; a++) {
		if (!src->buf[a])
			continue;
		dst->buf[a] = aligned_alloc(64, src->size[a]);
		ck_assert_ptr_nonnull(dst->buf[a]);
		memcpy(dst->buf[a], src->buf[a], src->size[a]);
	}
	dst->t.param = (float *)(void *)(dst->buf[A_PARAM] + dst->off[A_PARAM]);
	dst->t.exp_avg = dst->buf[A_M] + dst->off[A_M];
	dst->t.exp_avg_sq = dst->buf[A_V] + dst->off[A_V];
	dst->t.grad = dst->buf[A_GRAD] + dst->off[A_GRAD];
	dst->t.param_out = src->t.param_out ? dst->buf[A_OUT] + dst->off[A_OUT] : NULL;
}

static void world_free(struct world *w)
{
	for (int a = 0; a < A__N; a++)
		free(w->buf[a]);
}

/* An element's bits as hex, for messages. */
static unsigned long elem_bits(const struct world *w, int a, size_t byte)
{
	size_t es = tier_dtype_size((enum tier_dtype)w->dt[a]);
	size_t i = byte < w->off[a] ? 0 : (byte - w->off[a]) / es;
	const unsigned char *p = w->buf[a] + w->off[a] + i * es;
	uint32_t u = 0;

	if (i >= w->n)
		return w->buf[a][byte];
	memcpy(&u, p, es);
	return u;
}

static bool is_nan_bits(int dt, uint32_t u)
{
	switch (dt) {
	case TIER_FP32:
		return (u & 0x7fffffffu) > 0x7f800000u;
	case TIER_BF16:
		return (u & 0x7fffu) > 0x7f80u;
	default:
		return (u & 0x7fffu) > 0x7c00u;
	}
}

/*
 * Every byte of every buffer equal (the arrays and the guards around
 * them).  With @nan_any, an element that is a NaN in both may differ in
 * its sign and payload: which NaN comes out where two NaNs meet depends on
 * the order of the operands, which the C compiler is free to swap (IEEE
 * addition and multiplication commute), in the scalar as in the vector
 * code.
 */
static void world_expect_same(const struct world *got, const struct world *want, const char *what,
			      bool nan_any)
{
	for (int a = 0; a < A__N; a++) {
		size_t es, b = 0;

		if (!want->buf[a] || memcmp(got->buf[a], want->buf[a], want->size[a]) == 0)
			continue;
		es = tier_dtype_size((enum tier_dtype)want->dt[a]);
		while (got->buf[a][b] == want->buf[a][b])
			b++;
		if (nan_any && b >= want->off[a] && b < want->off[a] + want->n * es) {
			bool same = memcmp(got->buf[a], want->buf[a], want->off[a]) == 0 &&
				    memcmp(got->buf[a] + want->off[a] + want->n * es,
					   want->buf[a] + want->off[a] + want->n * es,
					   want->size[a] - want->off[a] - want->n * es) == 0;

			for (size_t i = 0; same && i < want->n; i++) {
				uint32_t x = 0, y = 0;

				memcpy(&x, got->buf[a] + want->off[a] + i * es, es);
				memcpy(&y, want->buf[a] + want->off[a] + i * es, es);
				if (x != y && !(is_nan_bits(want->dt[a], x) && is_nan_bits(want->dt[a], y))) {
					b = want->off[a] + i * es;
					same = false;
				}
			}
			if (same)
				continue;
			while (b < want->size[a] && got->buf[a][b] == want->buf[a][b])
				b++;
		}
		ck_abort_msg("%s: %s differs at byte %zu (element %lld of %zu): 0x%lx, want 0x%lx",
			     what, arr_name[a], b,
			     b < want->off[a] ? -1LL : (long long)((b - want->off[a]) / es), want->n,
			     elem_bits(got, a, b), elem_bits(want, a, b));
	}
}

static void world_expect_equal(const struct world *got, const struct world *want, const char *what)
{
	world_expect_same(got, want, what, false);
}

/* The versions to compare with scalar: those this build and CPU run. */
static const enum adamw_isa simd_isas[] = { ADAMW_AVX2, ADAMW_AVX512 };

/* ---------------------------------------------------- hyperparameters */

static const struct tier_adam_params hp_adamw = { .size = sizeof(struct tier_adam_params),
	.lr = 1e-3, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8, .weight_decay = 0.01,
	.decoupled = true, .step = 1, .grad_scale = 1.0 / 1024,
};

static const struct tier_adam_params hp_adam = { .size = sizeof(struct tier_adam_params),
	.lr = 3e-2, .beta1 = 0.8, .beta2 = 0.99, .eps = 1e-6, .weight_decay = 0.05,
	.decoupled = false, .step = 1, .grad_scale = 0.37,
};

/* ------------------------------------------- SIMD versions vs scalar */

static const size_t lengths[] = { 0, 1, 7, 8, 15, 16, 17, 31, 33, 4099, 65537 };

#define N_COMBOS (2 * 3 * 4)
#define STEPS 3

/* Combination @k: moments, grads, copy (-1 = none). */
static void combo(int k, int *md, int *gd, int *od)
{
	*md = k / 12 == 0 ? TIER_FP32 : TIER_BF16;
	*gd = k / 4 % 3;
	*od = k % 4 - 1;
}

/* @steps steps (1, 2, ...) of @hp over @w with version @isa. */
static void run_steps(struct world *w, enum adamw_isa isa, const struct tier_adam_params *hp,
		      int steps)
{
	for (int st = 1; st <= steps; st++) {
		struct tier_adam_params h = *hp;
		struct adam_consts c;

		h.step = (uint64_t)st;
		adam_consts_init(&h, &c);
		ck_assert_int_eq(adamw_step_isa(NULL, isa, &c, &w->t), 0);
	}
}

/*
 * _i = combination * 2 + (Adam ? 1 : 0).  Two runs per length and layout:
 * one step with specials (inf, NaN, subnormals, raw bit patterns) in the
 * gradient only, compared bit for bit (every NaN then descends from one
 * source, so even its payload is determined); and STEPS steps with
 * specials in the state too, where two different NaNs can meet: bit for
 * bit except the sign and payload of NaNs (world_expect_same).
 */
START_TEST(simd_vs_scalar)
{
	int md, gd, od;
	const struct tier_adam_params *hp = _i % 2 ? &hp_adam : &hp_adamw;
	bool ran = false;

	combo(_i / 2, &md, &gd, &od);
	for (size_t li = 0; li < ARRAY_SIZE(lengths); li++) {
		for (size_t l = 0; l < ARRAY_SIZE(layouts); l++) {
			for (int multi = 0; multi < 2; multi++) {
				size_t n = lengths[li];
				int steps = multi ? STEPS : 1;
				struct world base, want;
				char what[192];

				if (n > 5000 && l % 2 == 1)
					continue; /* the long case at two of the layouts */
				world_init(&base, n, md, gd, od, &layouts[l],
					   0x5EED0000u + (uint64_t)_i * 977 + li * 31 + l * 7 + (uint64_t)multi,
					   true, multi);
				world_copy(&want, &base);
				run_steps(&want, ADAMW_SCALAR, hp, steps);
				for (size_t v = 0; v < ARRAY_SIZE(simd_isas); v++) {
					struct world got;

					if (!adamw_isa_supported(simd_isas[v]))
						continue;
					ran = true;
					world_copy(&got, &base);
					run_steps(&got, simd_isas[v], hp, steps);
					snprintf(what, sizeof(what),
						 "%s vs scalar, %s, moments %s, grad %s, copy %s, n %zu, layout %zu, %d step(s)",
						 adamw_isa_name(simd_isas[v]),
						 hp->decoupled ? "AdamW" : "Adam", t_dtype_name(md), t_dtype_name(gd),
						 t_dtype_name(od), n, l, steps);
					world_expect_same(&got, &want, what, multi);
					world_free(&got);
				}
				world_free(&base);
				world_free(&want);
			}
		}
	}
	if (!ran && _i == 0)
		printf("note: this CPU runs no SIMD version of the adam kernel; simd_vs_scalar compares nothing\n");
}
END_TEST

/*
 * Through a thread pool, with tiles of 64 elements (many tiles, a ragged
 * last one): the same bytes as one pass of the scalar version, for every
 * version.  _i = combination.
 */
START_TEST(pool_tiles)
{
	int md, gd, od;
	struct tier_pool *pool;
	struct world base, want;
	size_t n = 64 * 200 + 37;

	combo(_i, &md, &gd, &od);
	ck_assert_int_eq(tier_pool_create(3, &pool), 0);
	world_init(&base, n, md, gd, od, &layouts[1], 0xB001u + (uint64_t)_i, true, false);
	world_copy(&want, &base);
	{
		struct adam_consts c;

		adam_consts_init(&hp_adamw, &c);
		ck_assert_int_eq(adamw_step_isa(NULL, ADAMW_SCALAR, &c, &want.t), 0);
		adamw_set_tile(64);
		for (int v = 0; v < ADAMW_ISA__COUNT; v++) {
			struct world got;

			if (!adamw_isa_supported((enum adamw_isa)v))
				continue;
			world_copy(&got, &base);
			ck_assert_int_eq(adamw_step_isa(pool, (enum adamw_isa)v, &c, &got.t), 0);
			world_expect_equal(&got, &want, adamw_isa_name((enum adamw_isa)v));
			world_free(&got);
		}
		/* the public entry point, the version in use */
		{
			struct world got;

			world_copy(&got, &base);
			ck_assert_int_eq(tier_adam_step(pool, &hp_adamw, &got.t), 0);
			world_expect_equal(&got, &want, "tier_adam_step");
			world_free(&got);
		}
		adamw_set_tile(0);
	}
	world_free(&base);
	world_free(&want);
	tier_pool_destroy(pool);
}
END_TEST

/* ---------------------------------------------------------- golden data */

/*
 * The README's bounds (T_GOLDEN_TOL_*): a float32 implementation of torch's formula is
 * within 1e-7 of the largest |parameter| (this one: 3e-8 to 7e-8 on the
 * three cases), and 1e-6 relative is fair for the moments (this one: up
 * to 1.7e-7 of the largest value).  Element by element, values near zero
 * next to large ones differ more in relative terms (torch's vectorised
 * kernels fuse multiply-adds): not checked.
 */

/* _i = case */
START_TEST(golden_case)
{
	struct t_golden g;
	struct tier_adam_params hp = { .size = sizeof(struct tier_adam_params) };

	t_golden_load(&g, t_golden_cases[_i]);
	hp.beta1 = g.beta1;
	hp.beta2 = g.beta2;
	hp.eps = g.eps;
	hp.weight_decay = g.wd;
	hp.decoupled = g.decoupled;
	hp.grad_scale = 1.0;

	for (int v = 0; v < ADAMW_ISA__COUNT; v++) {
		size_t numel = g.numel;
		float *p = malloc(numel * 4), *m = calloc(numel, 4), *s = calloc(numel, 4);
		struct tier_adam_tensors t = { .n = numel, .param = p, .exp_avg = m, .exp_avg_sq = s,
					       .moment_dtype = TIER_FP32, .grad_dtype = TIER_FP32 };
		double ep, em, es;
		size_t wp = 0, wm = 0, ws = 0;

		if (!adamw_isa_supported((enum adamw_isa)v)) {
			free(p);
			free(m);
			free(s);
			continue;
		}
		ck_assert(p && m && s);
		memcpy(p, g.p0, numel * 4);
		for (size_t st = 0; st < g.steps; st++) {
			struct adam_consts c;

			hp.lr = (double)g.lr[st];
			hp.step = st + 1;
			t.grad = g.grads + st * numel;
			adam_consts_init(&hp, &c);
			ck_assert_int_eq(adamw_step_isa(NULL, (enum adamw_isa)v, &c, &t), 0);
		}
		ep = t_rel_err(p, g.pf, numel, &wp);
		em = t_rel_err(m, g.mf, numel, &wm);
		es = t_rel_err(s, g.vf, numel, &ws);
		ck_assert_msg(ep <= T_GOLDEN_TOL_PARAM && em <= T_GOLDEN_TOL_MOMENT &&
				      es <= T_GOLDEN_TOL_MOMENT,
			      "%s, %s: errors (of the largest |value|) param %.3g (at %zu: %.9g, torch %.9g), exp_avg %.3g (at %zu), exp_avg_sq %.3g (at %zu)",
			      g.name, adamw_isa_name((enum adamw_isa)v), ep, wp,
			      (double)p[wp], (double)g.pf[wp], em, wm, es, ws);
		free(p);
		free(m);
		free(s);
	}
	t_golden_free(&g);
}
END_TEST

/* ---------------------------------------- double-precision reference */

/*
 * torch.optim.AdamW / Adam (foreach=False) with the element arithmetic in
 * double:
 *   g += wd * p (Adam);  p *= 1 - lr * wd (AdamW)
 *   m = b1 m + (1 - b1) g;  v = b2 v + (1 - b2) g g
 *   p -= lr / (1 - b1^t) * m / (sqrt(v) / sqrt(1 - b2^t) + eps)
 * The per-step scalars are torch's: Python floats that its fp32 kernels
 * round to float (1 - lr*wd, for one, is 0.99999 only to 3e-8, which over
 * 100 steps moves the parameters by 3e-6 relative; both torch and this
 * kernel do that rounding, so the reference does it too).
 */
static void ref_step(const struct tier_adam_params *h, const float *grad, double *p, double *m,
		     double *v, size_t n)
{
	struct adam_consts c;

	adam_consts_init(h, &c);
	for (size_t i = 0; i < n; i++) {
		double g = (double)grad[i] * (double)c.grad_scale;

		if (h->decoupled)
			p[i] *= (double)c.decay;
		else
			g += (double)c.l2 * p[i];
		m[i] = (double)c.beta1 * m[i] + (double)c.one_minus_beta1 * g;
		v[i] = (double)c.beta2 * v[i] + (double)c.one_minus_beta2 * g * g;
		p[i] += (double)c.neg_step_size * m[i] / (sqrt(v[i]) / (double)c.bc2_sqrt + (double)c.eps);
	}
}

/* Largest |x - ref| over the largest |ref| (norm-wise relative error). */
static double rel_err_max(const float *x, const double *ref, size_t n)
{
	double big = 0, e = 0;

	for (size_t i = 0; i < n; i++) {
		big = fmax(big, fabs(ref[i]));
		e = fmax(e, fabs((double)x[i] - ref[i]));
	}
	return big > 0 ? e / big : e;
}

#define REF_STEPS 100
#define REF_N 4099
/*
 * Moments: 1e-6 of the largest |value| (measured: 1e-7 to 6e-7).  The
 * parameters: one ulp of the largest |p| per step.  Each step rounds p
 * twice (the decay multiply and the update add, half an ulp each), and
 * with a small lr p moves so little from step to step that the decay's
 * rounding error keeps its sign and adds up: measured 2.7e-6 over 100
 * AdamW steps (near p = 1, about 23 ulps), 2.5e-7 for Adam (no decay).
 */
#define REF_TOL_MOMENT 1e-6
#define REF_TOL_PARAM (REF_STEPS * 0x1p-23)

/* _i: 0 AdamW, 1 Adam */
START_TEST(double_reference)
{
	const struct tier_adam_params *base = _i ? &hp_adam : &hp_adamw;
	uint64_t s = 0xD0B1Eu + (uint64_t)_i;
	float *p = malloc(REF_N * 4), *m = calloc(REF_N, 4), *v = calloc(REF_N, 4);
	float *g = malloc(REF_N * 4);
	double *rp = malloc(REF_N * 8), *rm = calloc(REF_N, 8), *rv = calloc(REF_N, 8);
	struct tier_adam_tensors t = { .n = REF_N, .param = p, .exp_avg = m, .exp_avg_sq = v,
				       .moment_dtype = TIER_FP32, .grad = g,
				       .grad_dtype = TIER_FP32 };
	double ep, em, ev;

	ck_assert(p && m && v && g && rp && rm && rv);
	for (size_t i = 0; i < REF_N; i++) {
		p[i] = (float)(t_rnd_unit(&s) * 2 - 1);
		rp[i] = (double)p[i];
	}
	for (uint64_t st = 1; st <= REF_STEPS; st++) {
		struct tier_adam_params h = *base;

		h.step = st;
		h.grad_scale = 1.0;
		for (size_t i = 0; i < REF_N; i++)
			g[i] = (float)((t_rnd_unit(&s) * 2 - 1) * (i % 7 + 1) * 1e-2);
		ref_step(&h, g, rp, rm, rv, REF_N);
		ck_assert_int_eq(tier_adam_step(NULL, &h, &t), 0);
	}
	ep = rel_err_max(p, rp, REF_N);
	em = rel_err_max(m, rm, REF_N);
	ev = rel_err_max(v, rv, REF_N);
	ck_assert_msg(ep <= REF_TOL_PARAM && em <= REF_TOL_MOMENT && ev <= REF_TOL_MOMENT,
		      "%s (%s), %d steps: relative error param %.3g, exp_avg %.3g, exp_avg_sq %.3g",
		      base->decoupled ? "AdamW" : "Adam", tier_adam_isa(), REF_STEPS, ep, em, ev);
	free(p);
	free(m);
	free(v);
	free(g);
	free(rp);
	free(rm);
	free(rv);
}
END_TEST

/* ---------------------------------------------------------- bf16 state */

/* @n elements of @dt equal bit for bit, but for the sign and payload of
 * NaNs (see world_expect_same). */
static void expect_same_array(const void *got, const void *want, size_t n, int dt, const char *who,
			      const char *what)
{
	size_t es = tier_dtype_size((enum tier_dtype)dt);

	for (size_t i = 0; i < n; i++) {
		uint32_t x = 0, y = 0;

		memcpy(&x, (const char *)got + i * es, es);
		memcpy(&y, (const char *)want + i * es, es);
		if (x != y && !(is_nan_bits(dt, x) && is_nan_bits(dt, y)))
			ck_abort_msg("%s: %s[%zu] = 0x%x, want 0x%x", who, what, i, x, y);
	}
}

/* The bf16-moment update spelled out: adam_elem() in fp32, rounded to bf16. */
static void bf16_reference(const struct adam_consts *c, size_t n, float *p, uint16_t *m,
			   uint16_t *v, const float *g)
{
	for (size_t i = 0; i < n; i++) {
		float mm = bf16_to_f32(m[i]), vv = bf16_to_f32(v[i]);

		adam_elem(c, g[i], &p[i], &mm, &vv);
		m[i] = f32_to_bf16(mm);
		v[i] = f32_to_bf16(vv);
	}
}

START_TEST(bf16_moments)
{
	size_t n = 10007;
	uint64_t s = 0xBF16u;
	float *p0 = malloc(n * 4), *g = malloc(n * 4);
	uint16_t *m0 = malloc(n * 2), *v0 = malloc(n * 2);

	ck_assert(p0 && g && m0 && v0);
	for (size_t i = 0; i < n; i++) {
		p0[i] = rnd_value(&s, K_PARAM, false);
		g[i] = rnd_value(&s, K_GRAD, i % 97 == 0);
		m0[i] = f32_to_bf16(rnd_value(&s, K_EXP_AVG, false));
		v0[i] = f32_to_bf16(rnd_value(&s, K_EXP_AVG_SQ, false));
	}
	for (int v = 0; v < ADAMW_ISA__COUNT; v++) {
		float *pw = malloc(n * 4), *pg = malloc(n * 4);
		uint16_t *mw = malloc(n * 2), *vw = malloc(n * 2), *mg = malloc(n * 2), *vg = malloc(n * 2);
		struct tier_adam_tensors t = { .n = n, .param = pg, .exp_avg = mg, .exp_avg_sq = vg,
					       .moment_dtype = TIER_BF16, .grad = g,
					       .grad_dtype = TIER_FP32 };

		if (!adamw_isa_supported((enum adamw_isa)v)) {
			free(pw), free(pg), free(mw), free(vw), free(mg), free(vg);
			continue;
		}
		memcpy(pw, p0, n * 4);
		memcpy(pg, p0, n * 4);
		memcpy(mw, m0, n * 2);
		memcpy(mg, m0, n * 2);
		memcpy(vw, v0, n * 2);
		memcpy(vg, v0, n * 2);
		for (uint64_t st = 1; st <= 5; st++) {
			struct tier_adam_params h = hp_adamw;
			struct adam_consts c;

			h.step = st;
			adam_consts_init(&h, &c);
			bf16_reference(&c, n, pw, mw, vw, g);
			ck_assert_int_eq(adamw_step_isa(NULL, (enum adamw_isa)v, &c, &t), 0);
		}
		expect_same_array(pg, pw, n, TIER_FP32, adamw_isa_name((enum adamw_isa)v), "params");
		expect_same_array(mg, mw, n, TIER_BF16, adamw_isa_name((enum adamw_isa)v), "exp_avg");
		expect_same_array(vg, vw, n, TIER_BF16, adamw_isa_name((enum adamw_isa)v), "exp_avg_sq");
		free(pw), free(pg), free(mw), free(vw), free(mg), free(vg);
	}
	free(p0);
	free(g);
	free(m0);
	free(v0);
}
END_TEST

/* ------------------------------------------------ stochastic rounding */

/* The random stream, written out again from docs/kernels.md ("Rounding"):
 * SplitMix64's finaliser and lowbias32. */
static uint64_t t_mix64(uint64_t z)
{
	z += 0x9e3779b97f4a7c15ull;
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

static uint32_t t_bits(uint64_t seed, uint64_t step, uint64_t idx)
{
	uint32_t x = (uint32_t)t_mix64(t_mix64(seed ^ t_mix64(step)) + (idx >> 32)) ^ (uint32_t)idx;

	x ^= x >> 16;
	x *= 0x7feb352du;
	x ^= x >> 15;
	x *= 0x846ca68bu;
	x ^= x >> 16;
	return x;
}

/*
 * The scalar version against the definition: each element's fp32 update
 * (adam_elem), then bf16 moments and copy = the high half of the fp32 bits
 * plus 16 of the element's random bits (low half for exp_avg, high half
 * for exp_avg_sq, the high half of r * 0x9e3779b1 for the copy), at an
 * index0 that crosses 2^32.
 */
START_TEST(sr_definition)
{
	size_t n = 4099;
	uint64_t s = 0x5A5Au, index0 = ((uint64_t)1 << 32) - 1000;
	struct world w, ref;
	struct tier_adam_params h = hp_adamw;
	struct adam_consts c;

	world_init(&w, n, TIER_BF16, TIER_FP32, TIER_BF16, &layouts[0], 0x5EEDu, false, false);
	world_copy(&ref, &w);
	w.t.index0 = index0;
	h.rounding = h.out_rounding = TIER_ROUND_STOCHASTIC;
	h.seed = 0x1234567887654321ull;
	h.step = 7;
	adam_consts_init(&h, &c);
	ck_assert_int_eq(adamw_step_isa(NULL, ADAMW_SCALAR, &c, &w.t), 0);
	(void)s;
	for (size_t i = 0; i < n; i++) {
		float g = ((const float *)ref.t.grad)[i], p = ref.t.param[i];
		uint16_t mh, vh, oh;
		float m = bf16_to_f32(((uint16_t *)ref.t.exp_avg)[i]);
		float v = bf16_to_f32(((uint16_t *)ref.t.exp_avg_sq)[i]);
		uint32_t r = t_bits(h.seed, h.step, index0 + i), um, uv, up;

		adam_elem(&c, g, &p, &m, &v);
		memcpy(&um, &m, 4);
		memcpy(&uv, &v, 4);
		memcpy(&up, &p, 4);
		memcpy(&mh, (uint16_t *)w.t.exp_avg + i, 2);
		memcpy(&vh, (uint16_t *)w.t.exp_avg_sq + i, 2);
		memcpy(&oh, (uint16_t *)w.t.param_out + i, 2);
		if (w.t.param[i] != p)
			ck_abort_msg("param[%zu]", i);
		if (mh != (uint16_t)((um + (r & 0xffffu)) >> 16))
			ck_abort_msg("exp_avg[%zu] 0x%x", i, mh);
		if (vh != (uint16_t)((uv + (r >> 16)) >> 16))
			ck_abort_msg("exp_avg_sq[%zu] 0x%x", i, vh);
		if (oh != (uint16_t)((up + ((r * 0x9e3779b1u) >> 16)) >> 16))
			ck_abort_msg("copy[%zu] 0x%x", i, oh);
	}
	world_free(&w);
	world_free(&ref);
}
END_TEST

/*
 * Every version, with stochastic moments and copy, equals the scalar one
 * bit for bit (specials included), over 3 steps; and a split of the
 * arrays into pieces (each with its index0) equals the whole.  _i =
 * combination with bf16 moments or a bf16 copy.
 */
static const size_t sr_index0[] = { 0, 12345, ((uint64_t)1 << 32) - 13,
				     /* vector-aligned (v_sr_bits_al), across 2^16 * 3 and 2^32 */
				     ((uint64_t)3 << 16) - 32, ((uint64_t)1 << 32) - 48 };

START_TEST(sr_simd_and_split)
{
	int md, gd, od;

	combo(_i, &md, &gd, &od);
	if (md != TIER_BF16 && od != TIER_BF16)
		return;
	for (size_t k = 0; k < ARRAY_SIZE(sr_index0); k++) {
		for (size_t li = 0; li < ARRAY_SIZE(lengths); li++) {
			size_t n = lengths[li];
			struct world base, want;
			struct tier_adam_params h = _i % 2 ? hp_adam : hp_adamw;
			char what[192];

			h.rounding = h.out_rounding = TIER_ROUND_STOCHASTIC;
			h.seed = 0xC0FFEEull + k;
			world_init(&base, n, md, gd, od, &layouts[li % ARRAY_SIZE(layouts)],
				   0x5200u + (uint64_t)_i * 131 + li * 7 + k, true, true);
			base.t.index0 = sr_index0[k];
			world_copy(&want, &base);
			run_steps(&want, ADAMW_SCALAR, &h, STEPS);
			for (int v = 0; v < ADAMW_ISA__COUNT; v++) {
				struct world got;

				if (!adamw_isa_supported((enum adamw_isa)v))
					continue;
				snprintf(what, sizeof(what), "%s, stochastic, moments %s, grad %s, copy %s, n %zu, index0 %zu",
					 adamw_isa_name((enum adamw_isa)v), t_dtype_name(md), t_dtype_name(gd),
					 t_dtype_name(od), n, sr_index0[k]);
				world_copy(&got, &base);
				run_steps(&got, (enum adamw_isa)v, &h, STEPS);
				world_expect_same(&got, &want, what, true);
				world_free(&got);
				/* in pieces of 1, 29 and the rest (uneven, vector-misaligned) */
				world_copy(&got, &base);
				for (int st = 1; st <= STEPS; st++) {
					size_t cut[4] = { 0, n < 1 ? n : 1, n < 30 ? n : 30, n };

					for (int c = 0; c < 3; c++) {
						struct tier_adam_tensors t = got.t;
						struct tier_adam_params hh = h;
						struct adam_consts ac;
						size_t gs = tier_dtype_size((enum tier_dtype)gd);
						size_t ms = tier_dtype_size((enum tier_dtype)md);
						size_t os = od >= 0 ? tier_dtype_size((enum tier_dtype)od) : 0;

						t.n = cut[c + 1] - cut[c];
						t.param += cut[c];
						t.exp_avg = (char *)t.exp_avg + cut[c] * ms;
						t.exp_avg_sq = (char *)t.exp_avg_sq + cut[c] * ms;
						t.grad = (const char *)t.grad + cut[c] * gs;
						if (t.param_out)
							t.param_out = (char *)t.param_out + cut[c] * os;
						t.index0 += cut[c];
						hh.step = (uint64_t)st;
						adam_consts_init(&hh, &ac);
						ck_assert_int_eq(adamw_step_isa(NULL, (enum adamw_isa)v, &ac, &t), 0);
					}
				}
				strcat(what, ", in pieces");
				world_expect_same(&got, &want, what, true);
				world_free(&got);
			}
			world_free(&base);
			world_free(&want);
		}
	}
}
END_TEST

/*
 * Unbiased: 2^20 copies of a value between two bf16 neighbours, each
 * rounded with its own bits, average to it (within 5 standard errors of
 * the rounding's binomial noise); the fraction rounded up is its distance
 * from the value below, in units in the last place.
 */
START_TEST(sr_unbiased)
{
	const size_t n = (size_t)1 << 20;
	static const float xs[] = { 1.0f + 0.3f / 128, -3.0e-5f, 7.77e-12f, 0.999f * 0.000999f };

	for (size_t k = 0; k < ARRAY_SIZE(xs); k++) {
		uint32_t u;
		float lo, hi, x = xs[k];
		double sum = 0, frac, sd;
		size_t up = 0;

		memcpy(&u, &x, 4);
		lo = bf16_to_f32((uint16_t)(u >> 16));
		hi = bf16_to_f32((uint16_t)((u >> 16) + 1));
		frac = ((double)x - (double)lo) / ((double)hi - (double)lo);
		for (size_t i = 0; i < n; i++) {
			uint16_t b = f32_to_bf16_sr(x, t_bits(99, 3, i) >> 16);
			float f = bf16_to_f32(b);

			if (f != lo && f != hi) /* (not ck_assert: it writes a mark per call) */
				ck_abort_msg("%g rounded to %g, not %g or %g", (double)x, (double)f,
					     (double)lo, (double)hi);
			up += f == hi;
			sum += (double)f;
		}
		sd = sqrt(frac * (1 - frac) / (double)n);
		ck_assert_msg(fabs((double)up / (double)n - frac) < 5 * sd + 1e-9,
			      "%g: rounded up %.6f of the time, want %.6f", (double)x,
			      (double)up / (double)n, frac);
		ck_assert_msg(fabs(sum / (double)n - (double)x) <= 5 * sd * fabs((double)hi - (double)lo) + 1e-30,
			      "%g: mean %.9g", (double)x, sum / (double)n);
	}
	/* specials: NaN stays a quiet NaN, inf an inf, zero a zero */
	ck_assert_uint_eq(f32_to_bf16_sr(f_from_bits(0x7f800000u), 0xffffu), 0x7f80u);
	ck_assert_uint_eq(f32_to_bf16_sr(f_from_bits(0xff800000u), 0xffffu), 0xff80u);
	ck_assert_uint_eq(f32_to_bf16_sr(f_from_bits(0x7f800001u), 0xffffu), 0x7fc0u);
	ck_assert_uint_eq(f32_to_bf16_sr(0.0f, 0xffffu), 0);
	ck_assert_uint_eq(f32_to_bf16_sr(f_from_bits(0x3f800000u), 0xffffu), 0x3f80u);
	ck_assert_uint_eq(f32_to_bf16_sr(f_from_bits(0x3f800001u), 0xffffu), 0x3f81u);
}
END_TEST

/*
 * The decay test: 2^20 elements (2^16 in a sanitizer build:
 * T_SANITIZED), g ~ N(0, 1) once, then 200 steps
 * of g = 0 (AdamW defaults).  The mean of exp_avg_sq with bf16 moments
 * rounded stochastically is within 1% of fp32's; rounded to nearest it is
 * not (bf16 v * 0.999 rounds back to v: it stays near its first value).
 */
static double decay_mean_v(int md, int rounding)
{
	const size_t n = (size_t)1 << (T_SANITIZED ? 16 : 20);
	size_t ms = tier_dtype_size((enum tier_dtype)md);
	float *p = calloc(n, 4), *g = malloc(n * 4);
	void *m = calloc(n, ms), *v = calloc(n, ms);
	uint64_t s = 0xDECA1u;
	struct tier_adam_tensors t = { .n = n, .param = p, .exp_avg = m, .exp_avg_sq = v,
				       .moment_dtype = (enum tier_dtype)md, .grad = g,
				       .grad_dtype = TIER_FP32 };
	struct tier_adam_params h;
	double sum = 0;

	ck_assert(p && g && m && v);
	for (size_t i = 0; i < n; i += 2) {
		/* Box-Muller */
		double u1 = (t_rnd_next(&s) >> 11) * 0x1p-53 + 0x1p-54, u2 = (t_rnd_next(&s) >> 11) * 0x1p-53;
		double r = sqrt(-2 * log(u1));

		g[i] = (float)(r * cos(2 * M_PI * u2));
		if (i + 1 < n)
			g[i + 1] = (float)(r * sin(2 * M_PI * u2));
	}
	tier_adam_params_init(&h);
	h.rounding = rounding;
	h.seed = 42;
	for (uint64_t st = 1; st <= 201; st++) {
		h.step = st;
		ck_assert_int_eq(tier_adam_step(NULL, &h, &t), 0);
		if (st == 1)
			memset(g, 0, n * 4);
	}
	for (size_t i = 0; i < n; i++)
		sum += (double)(md == TIER_BF16 ? bf16_to_f32(((uint16_t *)v)[i]) : ((float *)v)[i]);
	free(p), free(g), free(m), free(v);
	return sum / (double)n;
}

START_TEST(sr_decay)
{
	double f32 = decay_mean_v(TIER_FP32, TIER_ROUND_NEAREST);
	double sr = decay_mean_v(TIER_BF16, TIER_ROUND_STOCHASTIC);
	double rn = decay_mean_v(TIER_BF16, TIER_ROUND_NEAREST);

	printf("decay: mean exp_avg_sq after 1 + 200 steps: fp32 %.6g, bf16 stochastic %.6g (%+.3f%%), "
	       "bf16 nearest %.6g (%+.3f%%)\n", f32, sr, 100 * (sr / f32 - 1), rn, 100 * (rn / f32 - 1));
	/* the expected value: E[g^2] (1 - beta2) beta2^200 = 0.001 * 0.999^200 */
	ck_assert_msg(fabs(f32 / (0.001 * pow(0.999, 200)) - 1) < 0.01, "fp32 mean %g", f32);
	ck_assert_msg(fabs(sr / f32 - 1) < 0.01, "bf16 stochastic: mean %g, fp32 %g", sr, f32);
	ck_assert_msg(fabs(rn / f32 - 1) > 0.01, "bf16 nearest: mean %g, fp32 %g", rn, f32);
}
END_TEST

/* ------------------------------------------------------- conversions */

static const struct {
	uint32_t f;
	uint16_t bf16;
} bf16_cases[] = {
	{ 0x00000000, 0x0000 }, /* +0 */
	{ 0x80000000, 0x8000 }, /* -0 */
	{ 0x3f800000, 0x3f80 }, /* 1 */
	{ 0x3f808000, 0x3f80 }, /* tie, even below: down */
	{ 0x3f818000, 0x3f82 }, /* tie, odd below: up */
	{ 0x3f807fff, 0x3f80 }, /* below the tie */
	{ 0x3f808001, 0x3f81 }, /* above the tie */
	{ 0xbf818000, 0xbf82 }, /* negative tie, odd: away from zero */
	{ 0x3fffffff, 0x4000 }, /* carry into the exponent */
	{ 0x7f7f7fff, 0x7f7f }, /* just below max bf16 + half ulp */
	{ 0x7f7f8000, 0x7f80 }, /* tie at the top, odd: rounds to inf */
	{ 0x7f7fffff, 0x7f80 }, /* FLT_MAX: inf */
	{ 0xff7fffff, 0xff80 }, /* -FLT_MAX: -inf */
	{ 0x7f800000, 0x7f80 }, /* inf */
	{ 0xff800000, 0xff80 }, /* -inf */
	{ 0x7fc00000, 0x7fc0 }, /* quiet NaN */
	{ 0x7fc0ffff, 0x7fc0 }, /* NaN: truncated, never rounded */
	{ 0x7fffffff, 0x7fff }, /* NaN, all ones: stays NaN */
	{ 0xffffffff, 0xffff },
	{ 0x7f800001, 0x7fc0 }, /* signalling NaN: made quiet */
	{ 0xff812345, 0xffc1 },
	{ 0x00008000, 0x0000 }, /* subnormal tie, even: 0 */
	{ 0x00018000, 0x0002 }, /* subnormal tie, odd: up */
	{ 0x00000001, 0x0000 },
	{ 0x007fffff, 0x0080 }, /* largest subnormal: to the smallest normal */
	{ 0x80008001, 0x8001 },
};

START_TEST(bf16_edges)
{
	for (size_t k = 0; k < ARRAY_SIZE(bf16_cases); k++) {
		uint16_t got = f32_to_bf16(f_from_bits(bf16_cases[k].f));

		ck_assert_msg(got == bf16_cases[k].bf16, "f32_to_bf16(0x%08x) = 0x%04x, want 0x%04x",
			      bf16_cases[k].f, got, bf16_cases[k].bf16);
	}
	for (uint32_t h = 0; h < 0x10000; h++) {
		uint32_t u = bits_of(bf16_to_f32((uint16_t)h));

		ck_assert_uint_eq(u, h << 16);
	}
}
END_TEST

/* Round to nearest even at bit 16, spelled out the long way; NaN quiet. */
static uint16_t bf16_ref(uint32_t u)
{
	uint32_t hi = u >> 16, lo = u & 0xffff;

	if ((u & 0x7f800000u) == 0x7f800000u && (u & 0x7fffff))
		return (uint16_t)(hi | 0x40);
	if (lo > 0x8000 || (lo == 0x8000 && (hi & 1)))
		hi++; /* a carry into the exponent is the right result, inf included */
	return (uint16_t)hi;
}

/*
 * fp16 of a float by arithmetic in double: the nearest multiple of the
 * fp16 spacing at that magnitude, ties to even (rint, the default rounding
 * mode), then encoded.
 */
static uint16_t f16_ref(float f)
{
	uint32_t u = bits_of(f);
	uint16_t sign = (uint16_t)((u >> 16) & 0x8000);
	double a = fabs((double)f), q;
	int e;

	if (isnan(f))
		return (uint16_t)(sign | 0x7e00 | ((u >> 13) & 0x1ff));
	if (a >= 65520.0)
		return (uint16_t)(sign | 0x7c00);
	if (a < 0x1p-14) { /* subnormal spacing 2^-24 */
		q = rint(a * 0x1p24);
		return (uint16_t)(sign | (uint16_t)q); /* 1024 = the smallest normal */
	}
	frexp(a, &e); /* a in [2^(e-1), 2^e) */
	q = rint(ldexp(a, 11 - e));      /* in [1024, 2048] */
	if (q == 2048) {
		q = 1024;
		e++;
	}
	return (uint16_t)(sign | (uint16_t)((e - 1 + 15) << 10) | (uint16_t)(q - 1024));
}

/* fp16 to float by arithmetic. */
static float f16_to_f32_ref(uint16_t h)
{
	int exp = (h >> 10) & 0x1f, mant = h & 0x3ff;
	double s = (h & 0x8000) ? -1 : 1;

	if (exp == 0x1f)
		return mant ? f_from_bits(((uint32_t)(h & 0x8000) << 16) | 0x7fc00000u |
					  ((uint32_t)mant << 13))
			    : (float)(s * (double)INFINITY);
	if (exp == 0)
		return (float)(s * ldexp(mant, -24));
	return (float)(s * ldexp(1024 + mant, exp - 25));
}

static const struct {
	uint32_t f;
	uint16_t f16;
} f16_cases[] = {
	{ 0x00000000, 0x0000 },
	{ 0x80000000, 0x8000 },
	{ 0x3f800000, 0x3c00 }, /* 1 */
	{ 0x3f801000, 0x3c00 }, /* tie, even: down */
	{ 0x3f803000, 0x3c02 }, /* tie, odd: up */
	{ 0x477fe000, 0x7bff }, /* 65504 = max */
	{ 0x477fefff, 0x7bff }, /* below 65520 */
	{ 0x477ff000, 0x7c00 }, /* 65520: tie, odd: inf */
	{ 0x47800000, 0x7c00 }, /* 65536 */
	{ 0x7f7fffff, 0x7c00 },
	{ 0xff7fffff, 0xfc00 },
	{ 0x7f800000, 0x7c00 },
	{ 0xff800000, 0xfc00 },
	{ 0x7fc00000, 0x7e00 },
	{ 0x7f800001, 0x7e00 }, /* signalling: quiet, payload's top bits */
	{ 0xff812345, 0xfe09 },
	{ 0x7fffffff, 0x7fff },
	{ 0x38800000, 0x0400 }, /* 2^-14: smallest normal */
	{ 0x387fc000, 0x03ff }, /* 1023 * 2^-24: the largest subnormal */
	{ 0x387fe000, 0x0400 }, /* 1023.5 * 2^-24: tie, odd: up to the smallest normal */
	{ 0x387f8000, 0x03fe }, /* 1022 * 2^-24 */
	{ 0x33800000, 0x0001 }, /* 2^-24: smallest subnormal */
	{ 0x33000000, 0x0000 }, /* 2^-25: tie, even: 0 */
	{ 0x33000001, 0x0001 }, /* just above: up */
	{ 0x33c00000, 0x0002 }, /* 1.5 * 2^-24: tie, odd: up */
	{ 0x32ffffff, 0x0000 },
	{ 0x00000001, 0x0000 }, /* fp32 subnormal */
	{ 0x80000001, 0x8000 },
};

START_TEST(f16_edges)
{
	for (size_t k = 0; k < ARRAY_SIZE(f16_cases); k++) {
		float f = f_from_bits(f16_cases[k].f);
		uint16_t got = f32_to_f16(f);

		ck_assert_msg(got == f16_cases[k].f16, "f32_to_f16(0x%08x) = 0x%04x, want 0x%04x",
			      f16_cases[k].f, got, f16_cases[k].f16);
		ck_assert_msg(f16_ref(f) == f16_cases[k].f16, "f16_ref(0x%08x) = 0x%04x, want 0x%04x",
			      f16_cases[k].f, f16_ref(f), f16_cases[k].f16);
	}
	/* every fp16 value: to fp32 exactly, and back unchanged (a signalling
	 * NaN comes back quiet) */
	for (uint32_t h = 0; h < 0x10000; h++) {
		float f = f16_to_f32((uint16_t)h), r = f16_to_f32_ref((uint16_t)h);
		bool snan = (h & 0x7c00) == 0x7c00 && (h & 0x3ff) && !(h & 0x200);
		uint16_t back = f32_to_f16(f);

		ck_assert_msg(bits_of(f) == bits_of(r), "f16_to_f32(0x%04x) = 0x%08x, want 0x%08x", h,
			      bits_of(f), bits_of(r));
		ck_assert_msg(back == (snan ? (h | 0x200) : h), "fp16 0x%04x comes back as 0x%04x", h,
			      back);
	}
}
END_TEST

/*
 * f32_to_bf16 and f32_to_f16 against the references above, over a sweep
 * of float bit patterns: every pattern whose low bits are near a rounding
 * boundary of either format, and a stride through all of them.
 * _i = part of the sweep.
 */
#define SWEEP_PARTS 8

START_TEST(conversion_sweep)
{
	uint64_t s = 0x5EEDu + (uint64_t)_i;
	uint32_t hi0 = (uint32_t)_i * (0x10000u / SWEEP_PARTS);

	for (uint32_t hi = hi0; hi < hi0 + 0x10000u / SWEEP_PARTS; hi++) {
		static const uint32_t lows[] = { 0x0000, 0x0001, 0x0fff, 0x1000, 0x1001, 0x2000,
						 0x7fff, 0x8000, 0x8001, 0xefff, 0xf000, 0xffff };

		for (size_t k = 0; k < ARRAY_SIZE(lows) + 4; k++) {
			uint32_t u = hi << 16 | (k < ARRAY_SIZE(lows) ? lows[k] : (uint32_t)t_rnd_next(&s) & 0xffff);
			float f = f_from_bits(u);

			if (f32_to_bf16(f) != bf16_ref(u))
				ck_abort_msg("f32_to_bf16(0x%08x) = 0x%04x, want 0x%04x", u,
					     f32_to_bf16(f), bf16_ref(u));
			if (f32_to_f16(f) != f16_ref(f))
				ck_abort_msg("f32_to_f16(0x%08x) = 0x%04x, want 0x%04x", u,
					     f32_to_f16(f), f16_ref(f));
		}
	}
}
END_TEST

/*
 * The SIMD conversions (bf16 rounding, F16C) equal the scalar ones: the
 * roofline with a zero gradient copies p + 0 to param_out, so a sweep of
 * float bit patterns as parameters goes through each version's fp32 ->
 * bf16/fp16 store (p + 0 is p, but -0 becomes +0 and a NaN quiet: the
 * same in every version).  _i: 0 bf16, 1 fp16.
 */
START_TEST(simd_conversions)
{
	size_t n = (size_t)1 << 20;
	float *p = malloc(n * 4), *p2 = malloc(n * 4), *z = calloc(n, 4), *m = calloc(n, 4);
	float *v = calloc(n, 4);
	uint16_t *want = malloc(n * 2), *got = malloc(n * 2);
	int od = _i ? TIER_FP16 : TIER_BF16;
	uint64_t s = 0xC0417u + (uint64_t)_i;

	ck_assert(p && p2 && z && m && v && want && got);
	for (int round = 0; round < 3; round++) {
		struct tier_adam_tensors t = { .n = n, .param = p, .exp_avg = m, .exp_avg_sq = v,
					       .moment_dtype = TIER_FP32, .grad = z,
					       .grad_dtype = TIER_FP32, .param_out = want,
					       .out_dtype = (enum tier_dtype)od };

		/* each round: every high half, with 16 low halves: rounding
		 * boundaries of both formats and random ones */
		for (size_t i = 0; i < n; i++) {
			static const uint16_t lows[16] = { 0x0000, 0x0001, 0x0fff, 0x1000, 0x1001,
							   0x2fff, 0x3000, 0x7fff, 0x8000, 0x8001,
							   0xefff, 0xf000, 0xffff };
			uint32_t lo = (i & 15) < 13 && round < 2 ? lows[i & 15] : (uint32_t)(t_rnd_next(&s) >> 48);

			p[i] = f_from_bits((uint32_t)(i >> 4) << 16 | lo);
		}
		memcpy(p2, p, n * 4);
		ck_assert_int_eq(adamw_roofline_isa(NULL, ADAMW_SCALAR, &t), 0);
		for (size_t i = 0; i < n; i++) {
			uint16_t h = od == TIER_BF16 ? f32_to_bf16(p2[i] + 0.0f) : f32_to_f16(p2[i] + 0.0f);

			if (h != want[i])
				ck_abort_msg("scalar roofline copy of 0x%08x: 0x%04x, want 0x%04x",
					     bits_of(p2[i]), want[i], h);
		}
		for (size_t vi = 0; vi < ARRAY_SIZE(simd_isas); vi++) {
			if (!adamw_isa_supported(simd_isas[vi]))
				continue;
			memcpy(p, p2, n * 4);
			t.param_out = got;
			ck_assert_int_eq(adamw_roofline_isa(NULL, simd_isas[vi], &t), 0);
			for (size_t i = 0; i < n; i++)
				if (got[i] != want[i])
					ck_abort_msg("%s: %s of 0x%08x: 0x%04x, scalar 0x%04x",
						     adamw_isa_name(simd_isas[vi]), t_dtype_name(od),
						     bits_of(p2[i]), got[i], want[i]);
			t.param_out = want;
		}
		memcpy(p, p2, n * 4);
	}
	free(p);
	free(p2);
	free(z);
	free(m);
	free(v);
	free(want);
	free(got);
}
END_TEST

/* ---------------------------------------------------------- roofline */

/* Small values, no specials: the roofline's sums are checked exactly. */
static void tame_world(struct world *w, uint64_t seed)
{
	uint64_t s = seed;

	for (int a = 0; a < A_OUT; a++) {
		size_t es = tier_dtype_size((enum tier_dtype)w->dt[a]);

		for (size_t i = 0; i < w->n; i++) {
			float x = (float)(t_rnd_unit(&s) * 2 - 1);
			unsigned char *p = w->buf[a] + w->off[a] + i * es;
			uint16_t h = w->dt[a] == TIER_BF16 ? f32_to_bf16(x) : f32_to_f16(x);

			if (es == 4)
				memcpy(p, &x, 4);
			else
				memcpy(p, &h, 2);
		}
	}
}

static float load_as(const struct world *w, int a, size_t i)
{
	const unsigned char *p = w->buf[a] + w->off[a] + i * tier_dtype_size((enum tier_dtype)w->dt[a]);
	uint16_t h;
	float f;

	if (w->dt[a] == TIER_FP32) {
		memcpy(&f, p, 4);
		return f;
	}
	memcpy(&h, p, 2);
	return w->dt[a] == TIER_BF16 ? bf16_to_f32(h) : f16_to_f32(h);
}

static void store_as(struct world *w, int a, size_t i, float f)
{
	unsigned char *p = w->buf[a] + w->off[a] + i * tier_dtype_size((enum tier_dtype)w->dt[a]);
	uint16_t h = w->dt[a] == TIER_BF16 ? f32_to_bf16(f) : f32_to_f16(f);

	if (w->dt[a] == TIER_FP32)
		memcpy(p, &f, 4);
	else
		memcpy(p, &h, 2);
}

/*
 * Every version's roofline: p += g, m += g, v += g (in fp32, stored in
 * each array's dtype), param_out = p; the gradient and every byte around
 * the arrays untouched.  And the update writes the same arrays: each of
 * param, exp_avg, exp_avg_sq and param_out changes, grad does not.
 * _i = combination.
 */
START_TEST(roofline_bytes)
{
	int md, gd, od;
	size_t n = 1000 + 37;
	struct world base, want;

	combo(_i, &md, &gd, &od);
	world_init(&base, n, md, gd, od, &layouts[2], 0x400Fu + (uint64_t)_i, false, false);
	tame_world(&base, 0x7A3Eu + (uint64_t)_i);
	world_copy(&want, &base);
	for (size_t i = 0; i < n; i++) {
		float g = load_as(&want, A_GRAD, i);
		float p = load_as(&want, A_PARAM, i) + g;

		store_as(&want, A_PARAM, i, p);
		store_as(&want, A_M, i, load_as(&want, A_M, i) + g);
		store_as(&want, A_V, i, load_as(&want, A_V, i) + g);
		if (od >= 0)
			store_as(&want, A_OUT, i, p);
	}
	for (int v = 0; v < ADAMW_ISA__COUNT; v++) {
		struct world got;
		char what[96];

		if (!adamw_isa_supported((enum adamw_isa)v))
			continue;
		world_copy(&got, &base);
		ck_assert_int_eq(adamw_roofline_isa(NULL, (enum adamw_isa)v, &got.t), 0);
		snprintf(what, sizeof(what), "%s roofline, moments %s, grad %s, copy %s",
			 adamw_isa_name((enum adamw_isa)v), t_dtype_name(md), t_dtype_name(gd), t_dtype_name(od));
		world_expect_equal(&got, &want, what);
		world_free(&got);

		/* the update: the same arrays change, nothing else (large steps,
		 * so that every element changes even in bf16) */
		world_copy(&got, &base);
		{
			struct tier_adam_params h = hp_adamw;
			struct adam_consts c;

			h.beta1 = h.beta2 = 0.5;
			h.lr = 0.1;
			h.grad_scale = 1;
			adam_consts_init(&h, &c);
			ck_assert_int_eq(adamw_step_isa(NULL, (enum adamw_isa)v, &c, &got.t), 0);
		}
		for (int a = 0; a < A__N; a++) {
			size_t es;
			bool changed;

			if (!base.buf[a])
				continue;
			es = tier_dtype_size((enum tier_dtype)base.dt[a]);
			ck_assert_msg(memcmp(got.buf[a], base.buf[a], base.off[a]) == 0 &&
				      memcmp(got.buf[a] + base.off[a] + n * es,
					     base.buf[a] + base.off[a] + n * es,
					     base.size[a] - base.off[a] - n * es) == 0,
				      "%s: the update wrote around %s", what, arr_name[a]);
			changed = memcmp(got.buf[a] + base.off[a], base.buf[a] + base.off[a], n * es) != 0;
			ck_assert_msg(changed == (a != A_GRAD), "%s: the update %s %s", what,
				      changed ? "changed" : "left alone", arr_name[a]);
		}
		world_free(&got);
	}
	/* the public entry point: the version in use */
	{
		struct world got;

		world_copy(&got, &base);
		ck_assert_int_eq(tier_adam_roofline(NULL, &got.t), 0);
		world_expect_equal(&got, &want, "tier_adam_roofline");
		world_free(&got);
	}
	world_free(&base);
	world_free(&want);
}
END_TEST

/* ---------------------------------------------------------- arguments */

enum bad_what { BAD_TENSORS, BAD_PARAMS };

struct bad_case {
	const char *name;
	enum bad_what what;
	int rc;
	const char *msg; /* in tier_last_error() */
};

static const struct bad_case bad_cases[] = {
	{ "no tensors", BAD_TENSORS, -EINVAL, "tier_adam_step: t is NULL" },
	{ "param NULL", BAD_TENSORS, -EINVAL, "param is NULL" },
	{ "exp_avg NULL", BAD_TENSORS, -EINVAL, "exp_avg is NULL" },
	{ "exp_avg_sq NULL", BAD_TENSORS, -EINVAL, "exp_avg_sq is NULL" },
	{ "grad NULL", BAD_TENSORS, -EINVAL, "grad is NULL" },
	{ "moments fp16", BAD_TENSORS, -EINVAL, "exp_avg/exp_avg_sq dtype 2" },
	{ "moments 7", BAD_TENSORS, -EINVAL, "exp_avg/exp_avg_sq dtype 7" },
	{ "grad 3", BAD_TENSORS, -EINVAL, "grad dtype 3" },
	{ "grad -1", BAD_TENSORS, -EINVAL, "grad dtype -1" },
	{ "out 9", BAD_TENSORS, -EINVAL, "param_out dtype 9" },
	{ "no params", BAD_PARAMS, -EINVAL, "tier_adam_step: p is NULL" },
	{ "lr nan", BAD_PARAMS, -EINVAL, "lr" },
	{ "lr inf", BAD_PARAMS, -EINVAL, "lr" },
	{ "lr < 0", BAD_PARAMS, -EINVAL, "lr" },
	{ "beta1 1", BAD_PARAMS, -EINVAL, "beta1" },
	{ "beta1 < 0", BAD_PARAMS, -EINVAL, "beta1" },
	{ "beta1 nan", BAD_PARAMS, -EINVAL, "beta1" },
	{ "beta2 1", BAD_PARAMS, -EINVAL, "beta2" },
	{ "beta2 inf", BAD_PARAMS, -EINVAL, "beta2" },
	{ "eps nan", BAD_PARAMS, -EINVAL, "eps" },
	{ "eps < 0", BAD_PARAMS, -EINVAL, "eps" },
	{ "weight_decay inf", BAD_PARAMS, -EINVAL, "weight_decay" },
	{ "weight_decay < 0", BAD_PARAMS, -EINVAL, "weight_decay" },
	{ "grad_scale nan", BAD_PARAMS, -EINVAL, "grad_scale" },
	{ "grad_scale -inf", BAD_PARAMS, -EINVAL, "grad_scale" },
	{ "step 0", BAD_PARAMS, -EINVAL, "step 0" },
	{ "size 0", BAD_PARAMS, -EINVAL, "not initialised" },
	{ "size of another header", BAD_PARAMS, -EINVAL, "another tierstore.h" },
};

/* _i = case: each bad value on otherwise good arguments, nothing written. */
START_TEST(bad_arguments)
{
	const struct bad_case *bc = &bad_cases[_i];
	float p[5] = { 1, 2, 3, 4, 5 }, m[5] = { 0 }, v[5] = { 0 }, g[5] = { 1, 1, 1, 1, 1 };
	const float p0[5] = { 1, 2, 3, 4, 5 };
	struct tier_adam_tensors t = { .n = 5, .param = p, .exp_avg = m, .exp_avg_sq = v,
				       .moment_dtype = TIER_FP32, .grad = g,
				       .grad_dtype = TIER_FP32 };
	struct tier_adam_params h = hp_adamw;
	const struct tier_adam_tensors *tp = &t;
	const struct tier_adam_params *hpp = &h;
	int rc;

	switch (_i) {
	case 0: tp = NULL; break;
	case 1: t.param = NULL; break;
	case 2: t.exp_avg = NULL; break;
	case 3: t.exp_avg_sq = NULL; break;
	case 4: t.grad = NULL; break;
	case 5: t.moment_dtype = TIER_FP16; break;
	case 6: t.moment_dtype = (enum tier_dtype)7; break;
	case 7: t.grad_dtype = (enum tier_dtype)3; break;
	case 8: t.grad_dtype = (enum tier_dtype)-1; break;
	case 9: t.out_dtype = (enum tier_dtype)9; break;
	case 10: hpp = NULL; break;
	case 11: h.lr = (double)NAN; break;
	case 12: h.lr = (double)INFINITY; break;
	case 13: h.lr = -1e-3; break;
	case 14: h.beta1 = 1.0; break;
	case 15: h.beta1 = -0.1; break;
	case 16: h.beta1 = (double)NAN; break;
	case 17: h.beta2 = 1.0; break;
	case 18: h.beta2 = (double)INFINITY; break;
	case 19: h.eps = (double)NAN; break;
	case 20: h.eps = -1e-8; break;
	case 21: h.weight_decay = (double)INFINITY; break;
	case 22: h.weight_decay = -0.5; break;
	case 23: h.grad_scale = (double)NAN; break;
	case 24: h.grad_scale = -(double)INFINITY; break;
	case 25: h.step = 0; break;
	case 26: h.size = 0; break;
	case 27: h.size += 16; break;
	default: ck_abort_msg("no case %d", _i);
	}
	rc = tier_adam_step(NULL, hpp, tp);
	ck_assert_msg(rc == bc->rc, "%s: tier_adam_step %d, want %d", bc->name, rc, bc->rc);
	ck_assert_msg(strstr(tier_last_error(), bc->msg), "%s: message '%s' lacks '%s'", bc->name,
		      tier_last_error(), bc->msg);
	ck_assert_msg(memcmp(p, p0, sizeof(p)) == 0, "%s: params written", bc->name);
	if (bc->what == BAD_TENSORS) {
		struct adam_consts c;

		adam_consts_init(&hp_adamw, &c);
		ck_assert_int_eq(adamw_check(tp), bc->rc);
		ck_assert_int_eq(tier_adam_roofline(NULL, tp), bc->rc);
		ck_assert_int_eq(adamw_step_isa(NULL, ADAMW_SCALAR, &c, tp), bc->rc);
		ck_assert_int_eq(adamw_roofline_isa(NULL, ADAMW_SCALAR, tp), bc->rc);
		ck_assert_msg(memcmp(p, p0, sizeof(p)) == 0, "%s: params written", bc->name);
	}
}
END_TEST

/* What is not an error. */
START_TEST(good_arguments)
{
	struct tier_adam_tensors t = { .n = 0 };
	struct adam_consts c;
	float p[3] = { 1, 2, 3 }, m[3] = { 0 }, v[3] = { 0 }, g[3] = { 1, -1, 0.5f };
	struct tier_adam_params h = hp_adamw;

	/* n = 0: nothing to do, NULL arrays allowed */
	ck_assert_int_eq(adamw_check(&t), 0);
	ck_assert_int_eq(tier_adam_step(NULL, &hp_adamw, &t), 0);
	ck_assert_int_eq(tier_adam_roofline(NULL, &t), 0);
	/* edges of the ranges torch accepts */
	t = (struct tier_adam_tensors){ .n = 3, .param = p, .exp_avg = m, .exp_avg_sq = v,
					.moment_dtype = TIER_FP32, .grad = g,
					.grad_dtype = TIER_FP32 };
	h.beta1 = 0;
	h.beta2 = 0;
	h.eps = 0;
	h.weight_decay = 0;
	h.lr = 0;
	h.step = UINT64_MAX;
	ck_assert_int_eq(tier_adam_step(NULL, &h, &t), 0);
	ck_assert(p[0] == 1 && p[1] == 2 && p[2] == 3); /* lr 0 */
	/* versions: invalid, or not run by this CPU */
	adam_consts_init(&hp_adamw, &c);
	ck_assert_int_eq(adamw_step_isa(NULL, (enum adamw_isa)7, &c, &t), -EINVAL);
	ck_assert_int_eq(adamw_roofline_isa(NULL, (enum adamw_isa)-1, &t), -EINVAL);
	ck_assert(adamw_kernel((enum adamw_isa)7) == NULL);
	ck_assert_str_eq(adamw_isa_name((enum adamw_isa)7), "?");
	for (int v2 = 0; v2 < ADAMW_ISA__COUNT; v2++)
		if (!adamw_isa_supported((enum adamw_isa)v2)) {
			ck_assert_int_eq(adamw_step_isa(NULL, (enum adamw_isa)v2, &c, &t), -ENOTSUP);
			ck_assert_int_eq(adamw_roofline_isa(NULL, (enum adamw_isa)v2, &t), -ENOTSUP);
		}
	ck_assert(adamw_isa_supported(ADAMW_SCALAR));
}
END_TEST

/* ---------------------------------------------------------- TIER_SIMD */

struct simd_case {
	const char *value;   /* NULL: unset */
	int want;            /* the version, -1: the best this CPU runs */
	const char *warn;    /* a warning that must appear, or NULL for none */
};

static const struct simd_case simd_cases[] = {
	{ NULL, -1, NULL },
	{ "", -1, NULL },
	{ "auto", -1, NULL },
	{ "scalar", ADAMW_SCALAR, NULL },
	{ "SCALAR", ADAMW_SCALAR, NULL },
	{ "avx2", ADAMW_AVX2, NULL },
	{ "avx512", ADAMW_AVX512, NULL },
	{ "clmul,scalar", ADAMW_SCALAR, NULL },   /* crc32c's entry skipped */
	{ " sse4.2 , avx2 ", ADAMW_AVX2, NULL },
	{ "avx2,scalar", ADAMW_AVX2, NULL },      /* the first known entry */
	{ "auto,scalar", -1, NULL },              /* auto before any known entry */
	{ "avx9000", -1, "TIER_SIMD='avx9000' is not one of" },
	{ "neon,scalar", ADAMW_SCALAR, "TIER_SIMD='neon' is not one of" },
};

static char g_log[8192];

static void log_sink(int level, uint32_t ss, const char *line, void *arg)
{
	(void)level;
	(void)ss;
	(void)arg;
	strncat(g_log, line, sizeof(g_log) - strlen(g_log) - 2);
	strcat(g_log, "\n");
}

/* _i = case; the choice is made again after ts_options_reload(). */
START_TEST(simd_env)
{
	const struct simd_case *c = &simd_cases[_i];
	enum adamw_isa best = ADAMW_SCALAR, got;
	int want = c->want;

	for (int v = ADAMW_ISA__COUNT - 1; v > 0; v--)
		if (adamw_isa_supported((enum adamw_isa)v)) {
			best = (enum adamw_isa)v;
			break;
		}
	if (c->value)
		ck_assert_int_eq(setenv("TIER_SIMD", c->value, 1), 0);
	else
		ck_assert_int_eq(unsetenv("TIER_SIMD"), 0);
	g_log[0] = '\0';
	ts_log_set_sink(log_sink, NULL);
	ts_options_reload();
	adamw_isa_reset();
	got = adamw_isa();
	ts_log_set_sink(NULL, NULL);

	if (want >= 0 && !adamw_isa_supported((enum adamw_isa)want)) {
		/* forced, but this CPU lacks it: a warning, then auto */
		ck_assert_msg(strstr(g_log, "cannot run the"), "TIER_SIMD=%s: no warning in '%s'",
			      c->value, g_log);
		want = -1;
	} else if (!c->warn) {
		ck_assert_msg(g_log[0] == '\0', "TIER_SIMD=%s: unexpected output '%s'",
			      c->value ? c->value : "(unset)", g_log);
	}
	if (c->warn)
		ck_assert_msg(strstr(g_log, c->warn) && strstr(g_log, "kernels"),
			      "TIER_SIMD=%s: no warning '%s' in '%s'", c->value, c->warn, g_log);
	ck_assert_msg(got == (want < 0 ? best : (enum adamw_isa)want), "TIER_SIMD=%s: %s, want %s",
		      c->value ? c->value : "(unset)", adamw_isa_name(got),
		      adamw_isa_name(want < 0 ? best : (enum adamw_isa)want));
	ck_assert_str_eq(tier_adam_isa(), adamw_isa_name(got));
	/* chosen once: a later change of the environment alone changes nothing */
	ck_assert_int_eq(setenv("TIER_SIMD", "scalar", 1), 0);
	ck_assert_int_eq(adamw_isa(), got);
	ts_options_reload();
	ck_assert_int_eq(adamw_isa(), got);
	unsetenv("TIER_SIMD");
	ts_options_reload();
	adamw_isa_reset();
}
END_TEST

/* ----------------------------------------------------------------- suite */

static Suite *adamw_suite(void)
{
	Suite *s = suite_create("adamw");
	TCase *tc;

	tc = tcase_create("simd_vs_scalar");
	tcase_set_timeout(tc, 300);
	tcase_add_loop_test(tc, simd_vs_scalar, 0, N_COMBOS * 2);
	tcase_add_loop_test(tc, pool_tiles, 0, N_COMBOS);
	suite_add_tcase(s, tc);

	tc = tcase_create("reference");
	tcase_add_loop_test(tc, golden_case, 0, (int)T_GOLDEN_CASES);
	tcase_add_loop_test(tc, double_reference, 0, 2);
	tcase_add_test(tc, bf16_moments);
	suite_add_tcase(s, tc);

	tc = tcase_create("rounding");
	tcase_set_timeout(tc, 300);
	tcase_add_test(tc, sr_definition);
	tcase_add_loop_test(tc, sr_simd_and_split, 0, N_COMBOS);
	tcase_add_test(tc, sr_unbiased);
	tcase_add_test(tc, sr_decay);
	suite_add_tcase(s, tc);

	tc = tcase_create("conversions");
	tcase_set_timeout(tc, 300);
	tcase_add_test(tc, bf16_edges);
	tcase_add_test(tc, f16_edges);
	tcase_add_loop_test(tc, conversion_sweep, 0, SWEEP_PARTS);
	tcase_add_loop_test(tc, simd_conversions, 0, 2);
	suite_add_tcase(s, tc);

	tc = tcase_create("roofline");
	tcase_add_loop_test(tc, roofline_bytes, 0, N_COMBOS);
	suite_add_tcase(s, tc);

	tc = tcase_create("arguments");
	tcase_add_loop_test(tc, bad_arguments, 0, (int)ARRAY_SIZE(bad_cases));
	tcase_add_test(tc, good_arguments);
	suite_add_tcase(s, tc);

	tc = tcase_create("simd_env");
	tcase_add_loop_test(tc, simd_env, 0, (int)ARRAY_SIZE(simd_cases));
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	for (int v = 1; v < ADAMW_ISA__COUNT; v++)
		if (!adamw_isa_supported((enum adamw_isa)v))
			printf("note: this CPU (or build) cannot run the %s adam kernel: its comparisons are skipped\n",
			       adamw_isa_name((enum adamw_isa)v));
	return t_run_suite(adamw_suite());
}
