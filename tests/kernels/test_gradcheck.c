/*
 * test_gradcheck.c - gradient checks, clipping and loss scaling
 * (kernels/gradcheck.c, kernels/loss_scale.c).
 *
 * Covers:
 *  - tier_grad_check() / gradcheck_run(): an inf, a -inf or a nan (quiet,
 *    signalling, negative) at every position of every n in 1..40, and at
 *    the first, the last and the tile and lane boundaries of inputs of
 *    several tiles, for fp32, bf16 and fp16, with the scalar and the AVX2
 *    version, without a pool and with a pool of 2 threads: the flag is set
 *    and the sum is +inf (infinities) or nan; clean inputs leave it clear;
 *  - the sum of squares against a long-double reference, within 1e-12
 *    relative, for lengths across the lane and tile boundaries, misaligned;
 *  - the scalar and the AVX2 version bit for bit (every n in 0..100, larger
 *    n, several misalignments, with and without a pool);
 *  - the same bits with no pool and with pools of 1, 2 and 3 threads, and
 *    over several batches of tiles (> GRADCHECK_BATCH tiles);
 *  - accumulation over two calls (sums add, the flag sticks);
 *  - exact values: every fp16 and every bf16 bit pattern (subnormals, the
 *    largest values, signed zeros), fp32 extremes; f16_to_f32()
 *    against an independent conversion for all 65536 patterns;
 *  - argument errors (-EINVAL with a detail, acc untouched); counts whose
 *    bytes overflow size_t or pass PTRDIFF_MAX refused with -EOVERFLOW
 *    naming n, nothing read or written, by tier_grad_check, gradcheck_run,
 *    tier_adam_step, tier_adam_roofline, tier_q8_decode and tier_q8_encode;
 *  - TIER_SIMD (kernels/simd.h): a "scalar" entry before any "avx2" or
 *    "auto" forces the scalar version, others leave the automatic choice
 *    (in a child process, as the choice is made once per process);
 *  - tier_clip_coef(): exact values, including norm 0, norm = max_norm,
 *    an infinite norm (0) and a nan norm (nan);
 *  - the loss scaler: the state after every step of two scripted runs
 *    against a table (growth, hysteresis absorbing an overflow, backoff,
 *    clamping at min_scale, a growth resetting the hysteresis count), and
 *    init's errors, each naming the bad parameter.
 * On a CPU without AVX2 and F16C the AVX2 parts are skipped with a note.
 */
#include "config.h"

#include <check.h>
#include <errno.h>
#include <float.h>
#include <math.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "kernels/adam_math.h"
#include "kernels/gradcheck.h"
#include "t_helpers.h"
#include "tierstore/toolkit.h"

#define TILE GRADCHECK_TILE
/* NAN and INFINITY are float constants. */
#define DNAN ((double)NAN)
#define DINF ((double)INFINITY)

/*
 * ck_assert_msg() for hot loops: Check records every passing assertion
 * (a write to the parent in fork mode), which costs more than the check
 * itself; this one talks to Check only on failure.
 */
#define EXPECT(cond, ...)                          \
	do {                                       \
		if (!(cond))                       \
			ck_abort_msg(__VA_ARGS__); \
	} while (0)

/* Set in the child that simd_env_child re-executes. */
#define CHILD_ENV "T_GRADCHECK_CHILD"

/* ------------------------------------------------------------- helpers */

static const enum tier_dtype dtypes[] = { TIER_FP32, TIER_BF16, TIER_FP16 };

static float f32_of_bits(uint32_t u)
{
	float f;

	memcpy(&f, &u, sizeof(f));
	return f;
}

/* An fp16 value, from its fields (independent of the library's conversion). */
static long double ref_f16(uint16_t h)
{
	int exp = (h >> 10) & 0x1f, man = h & 0x3ff;
	long double v;

	if (exp == 0x1f)
		v = man ? (long double)NAN : (long double)INFINITY;
	else if (exp == 0)
		v = ldexpl((long double)man, -24);
	else
		v = ldexpl((long double)(1024 + man), exp - 25);
	return (h & 0x8000) ? -v : v;
}

/* Element @i of @buf, exactly. */
static long double ref_value(enum tier_dtype dt, const void *buf, size_t i)
{
	uint16_t h;
	float f;

	switch (dt) {
	case TIER_FP32:
		memcpy(&f, (const char *)buf + 4 * i, 4);
		return (long double)f;
	case TIER_BF16:
		memcpy(&h, (const char *)buf + 2 * i, 2);
		return (long double)f32_of_bits((uint32_t)h << 16);
	default:
		memcpy(&h, (const char *)buf + 2 * i, 2);
		return ref_f16(h);
	}
}

static long double ref_sumsq(enum tier_dtype dt, const void *buf, size_t n)
{
	long double s = 0.0L;

	for (size_t i = 0; i < n; i++) {
		long double v = ref_value(dt, buf, i);

		s += v * v;
	}
	return s;
}

/* A random finite value for @dt: sign, 24-bit significand, exponent in +-20. */
static void rnd_elem(uint64_t *s, enum tier_dtype dt, void *buf, size_t i)
{
	uint64_t r = t_rnd_next(s);
	float f = ldexpf((float)(r & 0xffffff) * 0x1p-24f + 0.5f, (int)((r >> 24) % 41) - 20);
	uint32_t u;
	uint16_t h;

	if (r >> 63)
		f = -f;
	memcpy(&u, &f, 4);
	switch (dt) {
	case TIER_FP32:
		memcpy((char *)buf + 4 * i, &f, 4);
		break;
	case TIER_BF16:
		h = (uint16_t)(u >> 16);
		memcpy((char *)buf + 2 * i, &h, 2);
		break;
	default:
		/* any pattern but inf/nan: subnormals and the whole range */
		h = (uint16_t)(r >> 32);
		if (((h >> 10) & 0x1f) == 0x1f)
			h &= (uint16_t)~0x4000u;
		memcpy((char *)buf + 2 * i, &h, 2);
		break;
	}
}

/*
 * @n random finite elements, @off elements into a 64-byte aligned buffer
 * (so the data is misaligned by @off elements).  Returns the base to free;
 * *data points at the elements.
 */
static void *rnd_buf(uint64_t seed, enum tier_dtype dt, size_t n, size_t off, void **data)
{
	size_t size = ((n + off) * tier_dtype_size((enum tier_dtype)dt) + 64) & ~(size_t)63;
	char *base = aligned_alloc(64, size);
	uint64_t s = seed | 1;

	ck_assert_ptr_nonnull(base);
	*data = base + off * tier_dtype_size((enum tier_dtype)dt);
	for (size_t i = 0; i < n; i++)
		rnd_elem(&s, dt, *data, i);
	return base;
}

/* Non-finite patterns per dtype: +inf, -inf, quiet nan, signalling nan, -nan. */
enum bad_kind { BAD_INF, BAD_NEG_INF, BAD_QNAN, BAD_SNAN, BAD_NEG_NAN, BAD__COUNT };

static const uint32_t bad_f32[BAD__COUNT] = { 0x7f800000u, 0xff800000u, 0x7fc00000u,
					      0x7f800001u, 0xffc00000u };
static const uint16_t bad_bf16[BAD__COUNT] = { 0x7f80, 0xff80, 0x7fc0, 0x7f81, 0xffc0 };
static const uint16_t bad_f16[BAD__COUNT] = { 0x7c00, 0xfc00, 0x7e00, 0x7c01, 0xfe00 };
static const char *const bad_name[BAD__COUNT] = { "+inf", "-inf", "qnan", "snan", "-nan" };

/* Stores @kind at element @i; returns the element's old bits. */
static uint32_t put_bad(enum tier_dtype dt, void *buf, size_t i, enum bad_kind kind)
{
	uint32_t old = 0;

	if (dt == TIER_FP32) {
		memcpy(&old, (char *)buf + 4 * i, 4);
		memcpy((char *)buf + 4 * i, &bad_f32[kind], 4);
	} else {
		uint16_t h;

		memcpy(&h, (char *)buf + 2 * i, 2);
		old = h;
		memcpy((char *)buf + 2 * i, dt == TIER_BF16 ? &bad_bf16[kind] : &bad_f16[kind], 2);
	}
	return old;
}

static void put_bits(enum tier_dtype dt, void *buf, size_t i, uint32_t bits)
{
	if (dt == TIER_FP32) {
		memcpy((char *)buf + 4 * i, &bits, 4);
	} else {
		uint16_t h = (uint16_t)bits;

		memcpy((char *)buf + 2 * i, &h, 2);
	}
}

static bool same_bits(double a, double b)
{
	return memcmp(&a, &b, sizeof(a)) == 0;
}

/* One way of running the check: a version, with or without a 2-thread pool. */
struct variant {
	enum gradcheck_isa isa;
	bool pool;
};

static const struct variant variants[] = {
	{ GRADCHECK_SCALAR, false },
	{ GRADCHECK_SCALAR, true },
	{ GRADCHECK_AVX2, false },
	{ GRADCHECK_AVX2, true },
};

/* _i = dtype * ARRAY_SIZE(variants) + variant */
#define DT_VARIANT_LOOPS ((int)(ARRAY_SIZE(dtypes) * ARRAY_SIZE(variants)))

static struct tier_pool *pool_new(unsigned threads)
{
	struct tier_pool *p = NULL;

	ck_assert_int_eq(tier_pool_create(threads, &p), 0);
	ck_assert_uint_eq(tier_pool_size(p), threads);
	return p;
}

/* The check of @data alone, from a fresh accumulator; asserts success. */
static struct tier_grad_stats run1(struct tier_pool *pool, enum gradcheck_isa isa,
				   const void *data, enum tier_dtype dt, size_t n)
{
	struct tier_grad_stats st = { 0.0, false };
	int rc = gradcheck_run(pool, isa, data, dt, n, &st);

	EXPECT(rc == 0, "gradcheck_run(%s, %s, n %zu) = %d: %s", gradcheck_isa_name(isa),
	       t_dtype_name(dt), n, rc, tier_last_error());
	return st;
}

/* ------------------------------------------------------ non-finite values */

/* The flag and the sum after @kind was put somewhere. */
static void expect_bad(struct tier_grad_stats st, enum bad_kind kind, const char *what,
		       size_t n, size_t pos)
{
	EXPECT(st.nonfinite, "%s: n %zu, %s at %zu: not flagged", what, n, bad_name[kind],
	       pos);
	if (kind == BAD_INF || kind == BAD_NEG_INF)
		EXPECT(isinf(st.sumsq) && st.sumsq > 0, "%s: n %zu, %s at %zu: sumsq %g",
		       what, n, bad_name[kind], pos, st.sumsq);
	else
		EXPECT(isnan(st.sumsq), "%s: n %zu, %s at %zu: sumsq %g", what, n,
		       bad_name[kind], pos, st.sumsq);
}

#define SMALL_MAX 40

START_TEST(nonfinite_every_position_small)
{
	enum tier_dtype dt = dtypes[(size_t)_i / ARRAY_SIZE(variants)];
	const struct variant *v = &variants[(size_t)_i % ARRAY_SIZE(variants)];
	struct tier_pool *pool;
	char what[64];

	if (!gradcheck_isa_supported(v->isa))
		return;
	pool = v->pool ? pool_new(2) : NULL;
	snprintf(what, sizeof(what), "%s %s%s", gradcheck_isa_name(v->isa), t_dtype_name(dt),
		 v->pool ? " pool" : "");
	for (size_t n = 1; n <= SMALL_MAX; n++) {
		void *data, *base = rnd_buf(0x1234 + n, dt, n, n % 3, &data);
		struct tier_grad_stats st = run1(pool, v->isa, data, dt, n);

		EXPECT(!st.nonfinite && isfinite(st.sumsq), "%s: n %zu clean: flagged", what,
		       n);
		for (size_t pos = 0; pos < n; pos++)
			for (int k = 0; k < BAD__COUNT; k++) {
				uint32_t old = put_bad(dt, data, pos, (enum bad_kind)k);

				expect_bad(run1(pool, v->isa, data, dt, n), (enum bad_kind)k, what,
					   n, pos);
				put_bits(dt, data, pos, old);
			}
		/* An inf and a nan together: nan. */
		if (n >= 2) {
			put_bad(dt, data, 0, BAD_INF);
			put_bad(dt, data, n - 1, BAD_QNAN);
			st = run1(pool, v->isa, data, dt, n);
			EXPECT(st.nonfinite && isnan(st.sumsq), "%s: n %zu, inf and nan: %g", what, n,
			       st.sumsq);
		}
		free(base);
	}
	if (pool)
		tier_pool_destroy(pool);
}
END_TEST

START_TEST(nonfinite_selected_positions_large)
{
	enum tier_dtype dt = dtypes[(size_t)_i / ARRAY_SIZE(variants)];
	const struct variant *v = &variants[(size_t)_i % ARRAY_SIZE(variants)];
	const size_t n = 3 * TILE + 37;
	const size_t pos[] = { 0,        1,        15,           16,           17,
			       TILE - 1, TILE,     TILE + 1,     2 * TILE - 1, 2 * TILE,
			       3 * TILE - 1, 3 * TILE, 3 * TILE + 15, 3 * TILE + 16,
			       n - 2,    n - 1 };
	struct tier_pool *pool;
	void *data, *base;
	char what[64];

	if (!gradcheck_isa_supported(v->isa))
		return;
	pool = v->pool ? pool_new(2) : NULL;
	snprintf(what, sizeof(what), "%s %s%s", gradcheck_isa_name(v->isa), t_dtype_name(dt),
		 v->pool ? " pool" : "");
	base = rnd_buf(0xBEEF, dt, n, 1, &data);
	ck_assert(!run1(pool, v->isa, data, dt, n).nonfinite);
	for (size_t p = 0; p < ARRAY_SIZE(pos); p++)
		for (int k = 0; k < BAD__COUNT; k++) {
			uint32_t old = put_bad(dt, data, pos[p], (enum bad_kind)k);

			expect_bad(run1(pool, v->isa, data, dt, n), (enum bad_kind)k, what, n, pos[p]);
			put_bits(dt, data, pos[p], old);
		}
	ck_assert(!run1(pool, v->isa, data, dt, n).nonfinite);
	free(base);
	if (pool)
		tier_pool_destroy(pool);
}
END_TEST

/* ------------------------------------------------------------- accuracy */

static const size_t ref_lens[] = {
	1, 2, 15, 16, 17, 31, 33, 1000, TILE - 1, TILE, TILE + 1, 5 * TILE + 123,
	((size_t)1 << 20) + 7,
};

START_TEST(norm_vs_long_double)
{
	enum tier_dtype dt = dtypes[(size_t)_i / ARRAY_SIZE(variants)];
	const struct variant *v = &variants[(size_t)_i % ARRAY_SIZE(variants)];
	struct tier_pool *pool;
	struct tier_grad_stats st;

	if (!gradcheck_isa_supported(v->isa))
		return;
	pool = v->pool ? pool_new(2) : NULL;
	for (size_t l = 0; l < ARRAY_SIZE(ref_lens); l++) {
		size_t n = ref_lens[l];
		void *data, *base = rnd_buf(0x5EED + l, dt, n, 1 + l % 3, &data);
		long double want = ref_sumsq(dt, data, n);
		long double err;

		st = run1(pool, v->isa, data, dt, n);
		err = fabsl((long double)st.sumsq - want) / want;
		ck_assert_msg(!st.nonfinite && err <= 1e-12L,
			      "%s %s n %zu: sumsq %.17g, reference %.20Lg, relative error %Lg",
			      gradcheck_isa_name(v->isa), t_dtype_name(dt), n, st.sumsq, want, err);
		free(base);
	}
	/* n = 0, with or without a buffer: nothing added. */
	st = run1(pool, v->isa, NULL, dt, 0);
	ck_assert(st.sumsq == 0.0 && !st.nonfinite);
	if (pool)
		tier_pool_destroy(pool);
}
END_TEST

/* ------------------------------------------------ scalar vs AVX2, pools */

START_TEST(avx2_bit_identical_to_scalar)
{
	enum tier_dtype dt = dtypes[_i];
	const size_t big[] = { TILE - 1, TILE, TILE + 17, 3 * TILE + 5, 9 * TILE + 1001 };
	struct tier_pool *pool;

	if (!gradcheck_isa_supported(GRADCHECK_AVX2))
		return;
	pool = pool_new(2);
	for (size_t off = 0; off < 4; off++) {
		void *data, *base = rnd_buf(0xA5A5 + off, dt, 100, off, &data);

		for (size_t n = 0; n <= 100; n++) {
			double s = run1(NULL, GRADCHECK_SCALAR, data, dt, n).sumsq;
			double a = run1(NULL, GRADCHECK_AVX2, data, dt, n).sumsq;

			EXPECT(same_bits(s, a), "%s n %zu +%zu: scalar %a, avx2 %a",
			       t_dtype_name(dt), n, off, s, a);
		}
		free(base);
	}
	for (size_t l = 0; l < ARRAY_SIZE(big); l++) {
		void *data, *base = rnd_buf(0x77 + l, dt, big[l], l % 4, &data);
		double s = run1(NULL, GRADCHECK_SCALAR, data, dt, big[l]).sumsq;
		double a = run1(NULL, GRADCHECK_AVX2, data, dt, big[l]).sumsq;
		double sp = run1(pool, GRADCHECK_SCALAR, data, dt, big[l]).sumsq;
		double ap = run1(pool, GRADCHECK_AVX2, data, dt, big[l]).sumsq;

		ck_assert_msg(same_bits(s, a) && same_bits(s, sp) && same_bits(s, ap),
			      "%s n %zu: scalar %a, avx2 %a, scalar pool %a, avx2 pool %a",
			      t_dtype_name(dt), big[l], s, a, sp, ap);
		free(base);
	}
	tier_pool_destroy(pool);
}
END_TEST

/* _i = dtype * GRADCHECK_ISA__COUNT + isa */
START_TEST(same_bits_any_pool_size)
{
	enum tier_dtype dt = dtypes[(size_t)_i / GRADCHECK_ISA__COUNT];
	enum gradcheck_isa isa = (enum gradcheck_isa)(_i % GRADCHECK_ISA__COUNT);
	const size_t n = 37 * TILE + 11;
	struct tier_pool *pools[3];
	void *data, *base;
	double want;

	if (!gradcheck_isa_supported(isa))
		return;
	base = rnd_buf(0xD1CE, dt, n, 0, &data);
	want = run1(NULL, isa, data, dt, n).sumsq;
	for (unsigned t = 1; t <= 3; t++)
		pools[t - 1] = pool_new(t);
	for (int rep = 0; rep < 5; rep++)
		for (unsigned t = 1; t <= 3; t++) {
			double got = run1(pools[t - 1], isa, data, dt, n).sumsq;

			ck_assert_msg(same_bits(got, want), "%s %s, %u threads, run %d: %a, alone %a",
				      gradcheck_isa_name(isa), t_dtype_name(dt), t, rep, got, want);
		}
	for (unsigned t = 1; t <= 3; t++)
		tier_pool_destroy(pools[t - 1]);
	free(base);
}
END_TEST

/* More tiles than one batch: the running total across batches, a nonfinite
 * element in the second batch, the same bits everywhere. */
START_TEST(several_batches)
{
	const size_t n = (size_t)GRADCHECK_BATCH * TILE + 2 * TILE + 5;
	const size_t bad_at = (size_t)GRADCHECK_BATCH * TILE + 3;
	struct tier_pool *pool = pool_new(2);
	void *data, *base = rnd_buf(0xB47C, TIER_FP32, n, 0, &data);
	long double want = ref_sumsq(TIER_FP32, data, n), err;
	double s = run1(NULL, GRADCHECK_SCALAR, data, TIER_FP32, n).sumsq;
	double sp = run1(pool, GRADCHECK_SCALAR, data, TIER_FP32, n).sumsq;
	uint32_t old;

	err = fabsl((long double)s - want) / want;
	ck_assert_msg(err <= 1e-12L, "relative error %Lg", err);
	ck_assert(same_bits(s, sp));
	if (gradcheck_isa_supported(GRADCHECK_AVX2)) {
		ck_assert(same_bits(s, run1(NULL, GRADCHECK_AVX2, data, TIER_FP32, n).sumsq));
		ck_assert(same_bits(s, run1(pool, GRADCHECK_AVX2, data, TIER_FP32, n).sumsq));
	}
	old = put_bad(TIER_FP32, data, bad_at, BAD_INF);
	expect_bad(run1(pool, gradcheck_isa(), data, TIER_FP32, n), BAD_INF, "batches", n, bad_at);
	put_bits(TIER_FP32, data, bad_at, old);
	ck_assert(!run1(pool, gradcheck_isa(), data, TIER_FP32, n).nonfinite);
	tier_pool_destroy(pool);
	free(base);
}
END_TEST

/* The public entry point is the chosen version. */
START_TEST(public_entry_uses_chosen_version)
{
	enum tier_dtype dt = dtypes[_i];
	const size_t n = 2 * TILE + 9;
	struct tier_pool *pool = pool_new(2);
	void *data, *base = rnd_buf(0xF00D, dt, n, 1, &data);
	struct tier_grad_stats a = { 0.0, false };

	ck_assert_int_eq(tier_grad_check(pool, data, dt, n, &a), 0);
	ck_assert_str_eq(tier_last_error(), "");
	ck_assert(same_bits(a.sumsq, run1(NULL, gradcheck_isa(), data, dt, n).sumsq));
	ck_assert(same_bits(a.sumsq, run1(NULL, GRADCHECK_SCALAR, data, dt, n).sumsq));
	tier_pool_destroy(pool);
	free(base);
}
END_TEST

/* ---------------------------------------------------------- accumulation */

START_TEST(accumulates_over_calls)
{
	enum tier_dtype dt = dtypes[_i];
	const size_t na = TILE + 77, nb = 3 * TILE + 1;
	struct tier_pool *pool = pool_new(2);
	void *a, *b, *base_a = rnd_buf(0xAAA, dt, na, 0, &a), *base_b = rnd_buf(0xBBB, dt, nb, 3, &b);
	double sa = run1(NULL, GRADCHECK_SCALAR, a, dt, na).sumsq;
	double sb = run1(NULL, GRADCHECK_SCALAR, b, dt, nb).sumsq;
	struct tier_grad_stats acc = { 0.0, false };
	uint32_t old;

	ck_assert_int_eq(tier_grad_check(pool, a, dt, na, &acc), 0);
	ck_assert_int_eq(tier_grad_check(NULL, b, dt, nb, &acc), 0);
	ck_assert_msg(same_bits(acc.sumsq, sa + sb), "%s: %a, want %a", t_dtype_name(dt), acc.sumsq,
		      sa + sb);
	ck_assert(!acc.nonfinite);
	/* An empty tensor adds nothing. */
	ck_assert_int_eq(tier_grad_check(pool, NULL, dt, 0, &acc), 0);
	ck_assert(same_bits(acc.sumsq, sa + sb) && !acc.nonfinite);
	/* A start value is kept and added to. */
	acc.sumsq = 1.5;
	ck_assert_int_eq(tier_grad_check(pool, a, dt, na, &acc), 0);
	ck_assert(same_bits(acc.sumsq, 1.5 + sa));

	/* The flag is ORed in: a later clean tensor does not clear it. */
	acc = (struct tier_grad_stats){ 0.0, false };
	old = put_bad(dt, a, na / 2, BAD_NEG_INF);
	ck_assert_int_eq(tier_grad_check(pool, a, dt, na, &acc), 0);
	put_bits(dt, a, na / 2, old);
	ck_assert(acc.nonfinite && isinf(acc.sumsq));
	ck_assert_int_eq(tier_grad_check(pool, b, dt, nb, &acc), 0);
	ck_assert(acc.nonfinite && isinf(acc.sumsq));
	/* ... and a clean one after a flagged one sets nothing by itself. */
	acc.nonfinite = true;
	acc.sumsq = 0.0;
	ck_assert_int_eq(tier_grad_check(pool, b, dt, nb, &acc), 0);
	ck_assert(acc.nonfinite && same_bits(acc.sumsq, sb));

	tier_pool_destroy(pool);
	free(base_a);
	free(base_b);
}
END_TEST

/* ---------------------------------------------------------- exact values */

/* Every fp16 pattern, converted by the portable conversion the scalar version
 * uses (kernels/adam_math.h). */
START_TEST(f16_conversion_all_patterns)
{
	for (uint32_t h = 0; h <= 0xffff; h++) {
		float got = f16_to_f32((uint16_t)h);
		long double want = ref_f16((uint16_t)h);

		if (isnan(want)) {
			EXPECT(isnan(got), "0x%04X: %a, want nan", h, (double)got);
			continue;
		}
		EXPECT((long double)got == want && !signbit(got) == !signbit(want),
		       "0x%04X: %a, want %La", h, (double)got, want);
	}
}
END_TEST

/*
 * Every 16-bit pattern of @dt (the loop index), as 16 copies (so the AVX2
 * version converts them in vectors, F16C for fp16): the sum is exactly
 * 16 * x^2 (x^2 has at most 22 significant bits), or flagged for inf/nan.
 */
START_TEST(half_types_all_patterns_exact)
{
	enum tier_dtype dt = _i == 0 ? TIER_BF16 : TIER_FP16;
	uint16_t buf[16];

	for (int isa = 0; isa < GRADCHECK_ISA__COUNT; isa++) {
		if (!gradcheck_isa_supported((enum gradcheck_isa)isa))
			continue;
		for (uint32_t h = 0; h <= 0xffff; h++) {
			long double x;
			struct tier_grad_stats st;

			for (int k = 0; k < 16; k++)
				buf[k] = (uint16_t)h;
			x = ref_value(dt, buf, 0);
			st = run1(NULL, (enum gradcheck_isa)isa, buf, dt, 16);
			if (!isfinite(x)) {
				EXPECT(st.nonfinite, "%s 0x%04X not flagged", t_dtype_name(dt), h);
				continue;
			}
			EXPECT(!st.nonfinite && (long double)st.sumsq == 16.0L * x * x,
			       "%s %s 0x%04X: %a, want %La",
			       gradcheck_isa_name((enum gradcheck_isa)isa), t_dtype_name(dt), h, st.sumsq,
			       16.0L * x * x);
			/* One element alone (the scalar tail). */
			st = run1(NULL, (enum gradcheck_isa)isa, buf, dt, 1);
			EXPECT((long double)st.sumsq == x * x, "%s 0x%04X alone: %a", t_dtype_name(dt), h,
			       st.sumsq);
		}
	}
}
END_TEST

/* Named fp16 and fp32 values and their exact squares. */
struct exact_case {
	enum tier_dtype dt;
	uint32_t bits;
	double square;
};

static const struct exact_case exact_cases[] = {
	{ TIER_FP16, 0x0001, 0x1p-48 },                   /* smallest subnormal 2^-24 */
	{ TIER_FP16, 0x8001, 0x1p-48 },
	{ TIER_FP16, 0x0200, 0x1p-30 },                   /* 2^-15 */
	{ TIER_FP16, 0x03ff, 0x1.ff002p-29 },            /* largest subnormal 1023 * 2^-24 */
	{ TIER_FP16, 0x0400, 0x1p-28 },                   /* smallest normal 2^-14 */
	{ TIER_FP16, 0x3c00, 1.0 },
	{ TIER_FP16, 0x7bff, 65504.0 * 65504.0 },         /* largest */
	{ TIER_FP16, 0x8000, 0.0 },                       /* -0 */
	{ TIER_BF16, 0x0001, 0x1p-266 },                  /* smallest subnormal 2^-133 */
	{ TIER_BF16, 0x7f7f, 0x1.fc02p+255 },             /* largest 0x1.fep127 */
	{ TIER_BF16, 0x3f80, 1.0 },
	{ TIER_BF16, 0xc040, 9.0 },                       /* -3 */
	{ TIER_FP32, 0x00000001, 0x1p-298 },              /* FLT_TRUE_MIN */
	{ TIER_FP32, 0x7f7fffff, (double)FLT_MAX * (double)FLT_MAX },
	{ TIER_FP32, 0x80000000, 0.0 },
	{ TIER_FP32, 0x3fc00000, 2.25 },
};

START_TEST(named_values_exact)
{
	const struct exact_case *c = &exact_cases[_i];
	unsigned char buf[4 * 16];

	for (int k = 0; k < 16; k++)
		put_bits(c->dt, buf, (size_t)k, c->bits);
	for (int isa = 0; isa < GRADCHECK_ISA__COUNT; isa++) {
		if (!gradcheck_isa_supported((enum gradcheck_isa)isa))
			continue;
		for (size_t n = 1; n <= 16; n += 15) {
			struct tier_grad_stats st = run1(NULL, (enum gradcheck_isa)isa, buf, c->dt, n);

			EXPECT(!st.nonfinite && st.sumsq == (double)n * c->square,
			       "%s 0x%X x %zu (%s): %a, want %a", t_dtype_name(c->dt), c->bits, n,
			       gradcheck_isa_name((enum gradcheck_isa)isa), st.sumsq,
			       (double)n * c->square);
		}
	}
}
END_TEST

/* ---------------------------------------------------------------- errors */

START_TEST(argument_errors)
{
	float g[4] = { 1, 2, 3, 4 };
	struct tier_grad_stats acc = { 7.0, false };

	ck_assert_int_eq(tier_grad_check(NULL, NULL, TIER_FP32, 4, &acc), -EINVAL);
	ck_assert_ptr_nonnull(strstr(tier_last_error(), "grad is NULL"));
	ck_assert_int_eq(tier_grad_check(NULL, g, (enum tier_dtype)3, 4, &acc), -EINVAL);
	ck_assert_ptr_nonnull(strstr(tier_last_error(), "dtype 3"));
	ck_assert_int_eq(tier_grad_check(NULL, g, (enum tier_dtype)-1, 4, &acc), -EINVAL);
	ck_assert_ptr_nonnull(strstr(tier_last_error(), "dtype -1"));
	ck_assert_int_eq(tier_grad_check(NULL, g, TIER_FP32, 4, NULL), -EINVAL);
	ck_assert_ptr_nonnull(strstr(tier_last_error(), "acc is NULL"));
	ck_assert_int_eq(gradcheck_run(NULL, GRADCHECK_ISA__COUNT, g, TIER_FP32, 4, &acc), -ENOTSUP);
	/* Nothing changed by the failures. */
	ck_assert(acc.sumsq == 7.0 && !acc.nonfinite);
	/* And a success clears the detail. */
	ck_assert_int_eq(tier_grad_check(NULL, g, TIER_FP32, 4, &acc), 0);
	ck_assert_str_eq(tier_last_error(), "");
	ck_assert(acc.sumsq == 37.0);
}
END_TEST

/*
 * Counts no buffer can hold (issue 41): n elements whose bytes overflow
 * size_t or pass PTRDIFF_MAX, for each public kernel that takes a count
 * (and gradcheck_run, which tier_grad_check calls), are refused with
 * -EOVERFLOW naming the function and n, before a byte is read or written
 * (the arrays and acc unchanged, also with a pool); the same call with a
 * count the arrays hold then works.
 */
enum count_fn { CF_GRAD, CF_GRAD_SCALAR, CF_ADAM, CF_ROOFLINE, CF_Q8_DECODE, CF_Q8_ENCODE };

struct count_case {
	const char *fn_name;   /* the detail names it */
	enum count_fn fn;
	int dt;                /* the gradient's dtype; adam: the moments' */
	size_t n;
	bool pool;
};

#define PD_MAX ((size_t)PTRDIFF_MAX)

static const struct count_case count_cases[] = {
	{ "tier_grad_check", CF_GRAD, TIER_FP32, SIZE_MAX, false },
	{ "tier_grad_check", CF_GRAD, TIER_FP32, SIZE_MAX / 4 + 1, false }, /* x 4 wraps to 0 */
	{ "tier_grad_check", CF_GRAD, TIER_FP32, PD_MAX / 4 + 1, true },
	{ "tier_grad_check", CF_GRAD, TIER_BF16, PD_MAX / 2 + 1, false },
	{ "tier_grad_check", CF_GRAD, TIER_FP16, SIZE_MAX / 2 + 1, true },
	{ "tier_grad_check", CF_GRAD_SCALAR, TIER_FP32, PD_MAX / 4 + 1, false },
	{ "adam", CF_ADAM, TIER_FP32, SIZE_MAX / 4 + 1, false },
	{ "adam", CF_ADAM, TIER_BF16, PD_MAX / 4 + 1, true },
	{ "adam", CF_ADAM, TIER_Q8, SIZE_MAX, false },
	{ "adam", CF_ROOFLINE, TIER_FP32, PD_MAX / 4 + 1, false },
	{ "tier_q8_decode", CF_Q8_DECODE, TIER_Q8, SIZE_MAX / 4 + 1, false },
	{ "tier_q8_decode", CF_Q8_DECODE, TIER_Q8, PD_MAX / 4 + 1, false },
	{ "tier_q8_encode", CF_Q8_ENCODE, TIER_Q8, SIZE_MAX / 4 + 1, false },
	{ "tier_q8_encode", CF_Q8_ENCODE, TIER_Q8, PD_MAX / 4 + 1, false },
};

#define CNT_ARRAYS 5
#define CNT_LEN 4096 /* bytes of each array */

static int count_call(const struct count_case *c, struct tier_pool *pool,
		      unsigned char *a[CNT_ARRAYS], size_t n, struct tier_grad_stats *acc)
{
	struct tier_adam_params p;
	struct tier_adam_tensors t = {
		.n = n, .param = (float *)(void *)a[0], .exp_avg = a[1], .exp_avg_sq = a[2],
		.moment_dtype = (enum tier_dtype)c->dt, .grad = a[3], .grad_dtype = TIER_FP32,
		.out_dtype = TIER_FP32, .exp_avg_scale = (float *)(void *)a[4],
		.exp_avg_sq_scale = (float *)(void *)(a[4] + CNT_LEN / 2),
	};

	switch (c->fn) {
	case CF_GRAD:
		return tier_grad_check(pool, a[0], (enum tier_dtype)c->dt, n, acc);
	case CF_GRAD_SCALAR:
		return gradcheck_run(pool, GRADCHECK_SCALAR, a[0], (enum tier_dtype)c->dt, n, acc);
	case CF_ADAM:
		tier_adam_params_init(&p);
		return tier_adam_step(pool, &p, &t);
	case CF_ROOFLINE:
		return tier_adam_roofline(pool, &t);
	case CF_Q8_DECODE:
		return tier_q8_decode(a[0], (const float *)(void *)a[1], n, TIER_Q8_EXP_AVG,
				      (float *)(void *)a[2]);
	case CF_Q8_ENCODE:
		return tier_q8_encode((const float *)(void *)a[0], n, TIER_Q8_EXP_AVG_SQ, a[1],
				      (float *)(void *)a[2]);
	}
	return -ENOSYS;
}

START_TEST(count_overflow)
{
	const struct count_case *c = &count_cases[_i];
	struct tier_grad_stats acc = { 7.0, false };
	struct tier_pool *pool = NULL;
	unsigned char *a[CNT_ARRAYS], *copy;
	char want[64];
	int rc;

	copy = malloc(CNT_ARRAYS * CNT_LEN);
	ck_assert_ptr_nonnull(copy);
	for (int i = 0; i < CNT_ARRAYS; i++) {
		a[i] = calloc(1, CNT_LEN);
		ck_assert_ptr_nonnull(a[i]);
		for (size_t k = 0; k < CNT_LEN / 4; k++) /* small finite floats */
			((float *)(void *)a[i])[k] = (float)((k + (size_t)i) % 17) * 0x1p-4f;
		memcpy(copy + (size_t)i * CNT_LEN, a[i], CNT_LEN);
	}
	if (c->pool)
		ck_assert_int_eq(tier_pool_create(2, &pool), 0);
	rc = count_call(c, pool, a, c->n, &acc);
	snprintf(want, sizeof(want), "n = %zu", c->n);
	ck_assert_msg(rc == -EOVERFLOW, "%s, n %zu: %d, want -EOVERFLOW; detail '%s'", c->fn_name,
		      c->n, rc, tier_last_error());
	ck_assert_msg(strstr(tier_last_error(), c->fn_name) && strstr(tier_last_error(), want),
		      "the detail '%s' does not name %s and '%s'", tier_last_error(), c->fn_name,
		      want);
	ck_assert(acc.sumsq == 7.0 && !acc.nonfinite);
	for (int i = 0; i < CNT_ARRAYS; i++)
		ck_assert_msg(memcmp(a[i], copy + (size_t)i * CNT_LEN, CNT_LEN) == 0,
			      "%s: array %d changed by a refused call", c->fn_name, i);
	/* a count the arrays hold */
	rc = count_call(c, pool, a, 256, &acc);
	ck_assert_msg(rc == 0, "%s, n 256: %d: %s", c->fn_name, rc, tier_last_error());
	if (pool)
		tier_pool_destroy(pool);
	for (int i = 0; i < CNT_ARRAYS; i++)
		free(a[i]);
	free(copy);
}
END_TEST

/* The GPU update's entry points refuse the same counts, before any GPU is
 * used (so on a machine without one too). */
START_TEST(gpu_count_overflow)
{
	struct tier_adam_params p;
	float x[4] = { 0 };
	struct tier_adam_tensors t = { .n = (size_t)PTRDIFF_MAX / sizeof(float) + 1,
				       .param = x, .exp_avg = x, .exp_avg_sq = x,
				       .moment_dtype = TIER_FP32, .grad = x,
				       .grad_dtype = TIER_FP32 };
	int rc;

	tier_adam_params_init(&p);
	rc = tier_adam_step_gpu(0, &p, &t);
	ck_assert_msg(rc == -EOVERFLOW && strstr(tier_last_error(), "tier_adam_step_gpu: n = "),
		      "tier_adam_step_gpu: %d '%s'", rc, tier_last_error());
	t.n = SIZE_MAX;
	rc = tier_adam_roofline_gpu(0, &t);
	ck_assert_msg(rc == -EOVERFLOW && strstr(tier_last_error(), "tier_adam_roofline_gpu: n = "),
		      "tier_adam_roofline_gpu: %d '%s'", rc, tier_last_error());
	ck_assert(x[0] == 0.0f);
}
END_TEST

/* -------------------------------------------------------------- TIER_SIMD */

struct simd_case {
	const char *value; /* NULL: unset */
	bool scalar;       /* scalar forced, else the best the CPU has */
};

static const struct simd_case simd_cases[] = {
	{ NULL, false },    { "auto", false },  { "scalar", true }, { "SCALAR", true },
	{ "avx2", false },  { "avx512", false }, { "clmul", false },
	/* the first entry this family knows decides; "auto" first: automatic */
	{ "clmul,scalar", true }, { "avx2,scalar", false }, { "auto,scalar", false },
	{ " sse4.2 , Scalar ", true },
};

START_TEST(simd_env_child)
{
	const struct simd_case *c = &simd_cases[_i];
	const char *want = c->scalar || !gradcheck_isa_supported(GRADCHECK_AVX2) ? "isa=scalar\n"
										   : "isa=avx2\n";

	t_child_says(CHILD_ENV, c->value, want);
}
END_TEST

/* The child: report the version chosen and check that it computes (no
 * ck_assert here: the child runs outside Check). */
static int child_main(void)
{
	const size_t n = TILE + 21;
	uint16_t *data = malloc(n * sizeof(*data));
	struct tier_grad_stats st = { 0.0, false }, ref = { 0.0, false };
	uint64_t s = 0xC41D;
	int rc = 0;

	printf("isa=%s\n", gradcheck_isa_name(gradcheck_isa()));
	fflush(stdout);
	if (!data)
		return 2;
	for (size_t i = 0; i < n; i++)
		rnd_elem(&s, TIER_FP16, data, i);
	if (tier_grad_check(NULL, data, TIER_FP16, n, &st) != 0 ||
	    gradcheck_run(NULL, GRADCHECK_SCALAR, data, TIER_FP16, n, &ref) != 0 ||
	    !same_bits(st.sumsq, ref.sumsq) || st.nonfinite)
		rc = 1;
	free(data);
	return rc;
}

/* -------------------------------------------------------------- clipping */

struct clip_case {
	double norm, max_norm, want; /* want: nan for nan */
};

static const struct clip_case clip_cases[] = {
	{ 0.0, 1.0, 1.0 },                      /* no gradient: no clipping */
	{ 0.5, 1.0, 1.0 },                      /* below max_norm */
	{ 1.0 - 2e-6, 1.0, 1.0 },               /* just below: coef > 1, clamped */
	{ 1.0, 1.0, 1.0 / (1.0 + 1e-6) },       /* equal: just under 1 (torch's eps) */
	{ 2.0, 1.0, 1.0 / (2.0 + 1e-6) },       /* above */
	{ 1e6, 5.0, 5.0 / (1e6 + 1e-6) },
	{ 3.0, 0.0, 0.0 },                      /* max_norm 0: everything zeroed */
	{ DINF, 1.0, 0.0 },                     /* max_norm / inf */
	{ DNAN, 1.0, DNAN },                    /* torch.clamp lets nan through */
	{ 1.0, DNAN, DNAN },
};

START_TEST(clip_coefficient)
{
	const struct clip_case *c = &clip_cases[_i];
	double got = tier_clip_coef(c->norm, c->max_norm);

	if (isnan(c->want))
		ck_assert_msg(isnan(got), "clip(%g, %g) = %a, want nan", c->norm, c->max_norm, got);
	else
		ck_assert_msg(same_bits(got, c->want), "clip(%g, %g) = %a, want %a", c->norm,
			      c->max_norm, got, c->want);
	ck_assert(isnan(got) || got <= 1.0);
}
END_TEST

/* ----------------------------------------------------------- loss scaler */

struct scaler_params {
	double initial, min, growth, backoff;
	uint32_t interval, hysteresis;
};

/* One step: the flag fed, then the state and the return value expected. */
struct scaler_step {
	bool inf;
	double scale;
	uint32_t growth_tracker;
	int32_t hysteresis_tracker;
	bool skipped;
};

#define C false
#define I true

/* 2^16, min 1, growth 2, backoff 0.5, interval 3, hysteresis 2. */
static const struct scaler_step run_a[] = {
	{ C, 65536, 1, 2, false },
	{ C, 65536, 2, 2, false },
	{ C, 131072, 0, 2, false },   /* 3 clean steps: growth */
	{ C, 131072, 1, 2, false },
	{ I, 131072, 0, 1, true },    /* hysteresis absorbs the first overflow */
	{ C, 131072, 1, 1, false },   /* clean steps do not restore it */
	{ C, 131072, 2, 1, false },
	{ I, 65536, 0, 0, true },     /* second overflow since the growth: backoff */
	{ C, 65536, 1, 0, false },
	{ C, 65536, 2, 0, false },
	{ C, 131072, 0, 2, false },   /* growth restores the hysteresis count */
	{ I, 131072, 0, 1, true },
	{ I, 65536, 0, 0, true },
	{ I, 32768, 0, -1, true },    /* spent: every overflow backs off */
	{ I, 16384, 0, -2, true },
	{ I, 8192, 0, -3, true },
	{ I, 4096, 0, -4, true },
	{ I, 2048, 0, -5, true },
	{ I, 1024, 0, -6, true },
	{ I, 512, 0, -7, true },
	{ I, 256, 0, -8, true },
	{ I, 128, 0, -9, true },
	{ I, 64, 0, -10, true },
	{ I, 32, 0, -11, true },
	{ I, 16, 0, -12, true },
	{ I, 8, 0, -13, true },
	{ I, 4, 0, -14, true },
	{ I, 2, 0, -15, true },
	{ I, 1, 0, -16, true },
	{ I, 1, 0, -17, true },       /* clamped at min_scale */
	{ C, 1, 1, -17, false },
	{ C, 1, 2, -17, false },
	{ I, 1, 0, -18, true },       /* an overflow resets the growth count */
	{ C, 1, 1, -18, false },
	{ C, 1, 2, -18, false },
	{ C, 2, 0, 2, false },
	{ I, 2, 0, 1, true },
	{ I, 1, 0, 0, true },
	{ I, 1, 0, -1, true },
};

/* 8, min 3, growth 4, backoff 0.25, interval 1, hysteresis 1. */
static const struct scaler_step run_b[] = {
	{ I, 3, 0, 0, true },         /* 8 * 0.25 = 2 < 3: clamped to min_scale */
	{ C, 12, 0, 1, false },       /* interval 1: every clean step grows */
	{ C, 48, 0, 1, false },
	{ I, 12, 0, 0, true },
	{ I, 3, 0, -1, true },        /* 12 * 0.25 = 3 = min_scale */
	{ I, 3, 0, -2, true },
	{ C, 12, 0, 1, false },
};

#undef C
#undef I

struct scaler_run {
	const char *name;
	struct scaler_params p;
	const struct scaler_step *steps;
	size_t nsteps;
};

static const struct scaler_run scaler_runs[] = {
	{ "2^16/1/2/0.5/3/2", { 65536, 1, 2, 0.5, 3, 2 }, run_a, ARRAY_SIZE(run_a) },
	{ "8/3/4/0.25/1/1", { 8, 3, 4, 0.25, 1, 1 }, run_b, ARRAY_SIZE(run_b) },
};

START_TEST(scaler_sequence)
{
	const struct scaler_run *r = &scaler_runs[_i];
	struct tier_loss_scaler s;

	ck_assert_int_eq(tier_loss_scaler_init(&s, r->p.initial, r->p.min, r->p.growth,
					       r->p.backoff, r->p.interval, r->p.hysteresis),
			 0);
	ck_assert(s.scale == r->p.initial && s.min_scale == r->p.min &&
		  s.growth_factor == r->p.growth && s.backoff_factor == r->p.backoff);
	ck_assert_uint_eq(s.growth_interval, r->p.interval);
	ck_assert_uint_eq(s.hysteresis, r->p.hysteresis);
	ck_assert_uint_eq(s.growth_tracker, 0);
	ck_assert_int_eq(s.hysteresis_tracker, (int32_t)r->p.hysteresis);
	for (size_t i = 0; i < r->nsteps; i++) {
		const struct scaler_step *w = &r->steps[i];
		bool skipped = tier_loss_scaler_update(&s, w->inf);

		ck_assert_msg(skipped == w->skipped && s.scale == w->scale &&
				      s.growth_tracker == w->growth_tracker &&
				      s.hysteresis_tracker == w->hysteresis_tracker,
			      "%s step %zu (%s): skipped %d scale %g growth %u hysteresis %d; "
			      "want %d %g %u %d",
			      r->name, i + 1, w->inf ? "inf" : "clean", skipped, s.scale,
			      s.growth_tracker, s.hysteresis_tracker, w->skipped, w->scale,
			      w->growth_tracker, w->hysteresis_tracker);
	}
}
END_TEST

struct init_err_case {
	struct scaler_params p;
	const char *names; /* in the detail message */
};

static const struct init_err_case init_err_cases[] = {
	{ { 0, 1, 2, 0.5, 3, 2 }, "initial_scale" },
	{ { -1, 1, 2, 0.5, 3, 2 }, "initial_scale" },
	{ { DNAN, 1, 2, 0.5, 3, 2 }, "initial_scale" },
	{ { DINF, 1, 2, 0.5, 3, 2 }, "initial_scale" },
	{ { 4, 0, 2, 0.5, 3, 2 }, "min_scale" },
	{ { 4, -1, 2, 0.5, 3, 2 }, "min_scale" },
	{ { 4, DNAN, 2, 0.5, 3, 2 }, "min_scale" },
	{ { 4, 8, 2, 0.5, 3, 2 }, "min_scale 8 is above initial_scale 4" },
	{ { 4, 1, 1, 0.5, 3, 2 }, "growth_factor" },
	{ { 4, 1, 0.5, 0.5, 3, 2 }, "growth_factor" },
	{ { 4, 1, DNAN, 0.5, 3, 2 }, "growth_factor" },
	{ { 4, 1, DINF, 0.5, 3, 2 }, "growth_factor" },
	{ { 4, 1, 2, 0, 3, 2 }, "backoff_factor" },
	{ { 4, 1, 2, 1, 3, 2 }, "backoff_factor" },
	{ { 4, 1, 2, -0.5, 3, 2 }, "backoff_factor" },
	{ { 4, 1, 2, DNAN, 3, 2 }, "backoff_factor" },
	{ { 4, 1, 2, 0.5, 0, 2 }, "growth_interval" },
	{ { 4, 1, 2, 0.5, 3, 0 }, "hysteresis" },
	{ { 4, 1, 2, 0.5, 3, (uint32_t)INT32_MAX + 1 }, "hysteresis" },
};

START_TEST(scaler_init_errors)
{
	const struct init_err_case *c = &init_err_cases[_i];
	struct tier_loss_scaler s;
	int rc = tier_loss_scaler_init(&s, c->p.initial, c->p.min, c->p.growth, c->p.backoff,
				       c->p.interval, c->p.hysteresis);

	ck_assert_int_eq(rc, -EINVAL);
	ck_assert_msg(strstr(tier_last_error(), c->names), "detail '%s' does not name '%s'",
		      tier_last_error(), c->names);
}
END_TEST

START_TEST(scaler_init_edges)
{
	struct tier_loss_scaler s;

	ck_assert_int_eq(tier_loss_scaler_init(NULL, 1, 1, 2, 0.5, 1, 1), -EINVAL);
	/* min_scale == initial_scale, the largest hysteresis, the largest interval. */
	ck_assert_int_eq(tier_loss_scaler_init(&s, 4, 4, 2, 0.5, UINT32_MAX, INT32_MAX), 0);
	ck_assert_str_eq(tier_last_error(), "");
	ck_assert_int_eq(s.hysteresis_tracker, INT32_MAX);
	ck_assert(tier_loss_scaler_update(&s, true));
	ck_assert(s.scale == 4 && s.hysteresis_tracker == INT32_MAX - 1);
	/* The hysteresis count stops at INT32_MIN rather than wrapping. */
	s.hysteresis_tracker = INT32_MIN + 1;
	ck_assert(tier_loss_scaler_update(&s, true));
	ck_assert(tier_loss_scaler_update(&s, true));
	ck_assert_int_eq(s.hysteresis_tracker, INT32_MIN);
	ck_assert(s.scale == 4);
}
END_TEST

/* ----------------------------------------------------------------- suite */

static Suite *gradcheck_suite(void)
{
	Suite *s = suite_create("gradcheck");
	TCase *tc;

	tc = tcase_create("nonfinite");
	tcase_set_timeout(tc, 120);
	tcase_add_loop_test(tc, nonfinite_every_position_small, 0, DT_VARIANT_LOOPS);
	tcase_add_loop_test(tc, nonfinite_selected_positions_large, 0, DT_VARIANT_LOOPS);
	suite_add_tcase(s, tc);

	tc = tcase_create("norm");
	tcase_set_timeout(tc, 120);
	tcase_add_loop_test(tc, norm_vs_long_double, 0, DT_VARIANT_LOOPS);
	tcase_add_loop_test(tc, avx2_bit_identical_to_scalar, 0, (int)ARRAY_SIZE(dtypes));
	tcase_add_loop_test(tc, same_bits_any_pool_size, 0,
			    (int)ARRAY_SIZE(dtypes) * GRADCHECK_ISA__COUNT);
	tcase_add_test(tc, several_batches);
	tcase_add_loop_test(tc, public_entry_uses_chosen_version, 0, (int)ARRAY_SIZE(dtypes));
	tcase_add_loop_test(tc, accumulates_over_calls, 0, (int)ARRAY_SIZE(dtypes));
	suite_add_tcase(s, tc);

	tc = tcase_create("exact");
	tcase_set_timeout(tc, 120);
	tcase_add_test(tc, f16_conversion_all_patterns);
	tcase_add_loop_test(tc, half_types_all_patterns_exact, 0, 2);
	tcase_add_loop_test(tc, named_values_exact, 0, (int)ARRAY_SIZE(exact_cases));
	suite_add_tcase(s, tc);

	tc = tcase_create("errors_env");
	tcase_add_test(tc, argument_errors);
	tcase_add_loop_test(tc, count_overflow, 0, (int)ARRAY_SIZE(count_cases));
	tcase_add_test(tc, gpu_count_overflow);
	tcase_add_loop_test(tc, simd_env_child, 0, (int)ARRAY_SIZE(simd_cases));
	suite_add_tcase(s, tc);

	tc = tcase_create("clip");
	tcase_add_loop_test(tc, clip_coefficient, 0, (int)ARRAY_SIZE(clip_cases));
	suite_add_tcase(s, tc);

	tc = tcase_create("loss_scaler");
	tcase_add_loop_test(tc, scaler_sequence, 0, (int)ARRAY_SIZE(scaler_runs));
	tcase_add_loop_test(tc, scaler_init_errors, 0, (int)ARRAY_SIZE(init_err_cases));
	tcase_add_test(tc, scaler_init_edges);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	if (getenv(CHILD_ENV))
		return child_main();
	if (!gradcheck_isa_supported(GRADCHECK_AVX2))
		printf("note: this CPU lacks AVX2 or F16C: the AVX2 version is not tested\n");
	return t_run_suite(gradcheck_suite());
}
