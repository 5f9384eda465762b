/*
 * gradcheck.c - tier_grad_check(): the sum of squares of a gradient and
 * whether it holds an inf or a nan, in one pass; tier_clip_coef().
 *
 * Summation order.  gradcheck.h defines it (tiles of GRADCHECK_TILE
 * elements, 16 interleaved double lanes per tile joined by a fixed tree,
 * tiles added in tile order), and both versions follow it, so the scalar
 * and the AVX2 version, and any pool size, give the same bits.  The per-tile
 * sums of up to GRADCHECK_BATCH tiles are written to an array by whichever
 * thread ran the tile and added in tile order afterwards; larger inputs run
 * as several such batches, the running total carried from one to the next,
 * so there is no allocation and no -ENOMEM.
 *
 * Non-finite detection.  Every element is squared exactly in double, and
 * a finite element squares to less than 2^256 (FLT_MAX^2; bf16 has the same
 * range, fp16 far less): even 2^62 of them (more elements than an address
 * space holds) sum to less than 2^318, far below DBL_MAX.  So the double sum
 * of a finite gradient is finite, and the sum of one holding an inf
 * (inf^2 = +inf; squares are never negative, so no inf - inf) or a nan is
 * +inf or nan.  The flag is therefore !isfinite(sum), tested once per call,
 * which costs the inner loops nothing.  When it is set, the sum added to
 * acc->sumsq is +inf (infinities only) or nan (a nan present).
 *
 * Conversions: bf16 and fp16 go through bf16_to_f32() and f16_to_f32() of
 * kernels/adam_math.h in the scalar version (and the AVX2 tails), through
 * a shift and F16C in the AVX2 version; both are exact, so the two agree.
 *
 * TIER_SIMD is read through ts_simd_choice() (kernels/simd.h, the
 * options table), as kernels/crc32c.c reads it.
 */
#include "config.h"

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/error.h"
#include "common/log.h"
#include "common/pool.h"
#include "kernels/adam_math.h"
#include "kernels/gradcheck.h"
#include "kernels/simd.h"

#if defined(__x86_64__)
#include <cpuid.h>
#include <immintrin.h>
#endif

_Static_assert(GRADCHECK_TILE % GRADCHECK_LANES == 0, "a tile is whole lane rounds");
_Static_assert(GRADCHECK_LANES == 16, "lanes_join() and the AVX2 bodies assume 16 lanes");

/* The sum of one tile: elements [begin, end) of the gradient. */
typedef double (*tile_fn)(const void *grad, size_t begin, size_t end);

/* ----------------------------------------------------------------- helpers */

static inline double sq(float x)
{
	return (double)x * (double)x;
}

/* The fixed join of the 16 lanes (gradcheck.h). */
static inline double lanes_join(const double l[GRADCHECK_LANES])
{
	double v[4];

	for (int k = 0; k < 4; k++)
		v[k] = (l[k] + l[4 + k]) + (l[8 + k] + l[12 + k]);
	return (v[0] + v[1]) + (v[2] + v[3]);
}

/* ------------------------------------------------------------------ scalar */

/*
 * One body per dtype: lane k takes elements k, k + 16, ... of the tile, in
 * order; the tail (a tile shorter than a whole round) continues the rounds.
 */
#define SCALAR_BODY(name, type, conv)                                                   \
	static double name(const void *grad, size_t begin, size_t end)                 \
	{                                                                              \
		const type *p = (const type *)grad + begin;                            \
		size_t len = end - begin, j = 0;                                       \
		double l[GRADCHECK_LANES] = { 0 };                                     \
                                                                                       \
		for (; j + GRADCHECK_LANES <= len; j += GRADCHECK_LANES)               \
			for (int k = 0; k < GRADCHECK_LANES; k++)                      \
				l[k] += sq(conv(p[j + (size_t)k]));                    \
		for (; j < len; j++)                                                   \
			l[j % GRADCHECK_LANES] += sq(conv(p[j]));                      \
		return lanes_join(l);                                                  \
	}

#define CONV_F32(x) (x)
#define CONV_BF16(x) bf16_to_f32(x)
#define CONV_F16(x) f16_to_f32(x)

SCALAR_BODY(tile_f32_scalar, float, CONV_F32)
SCALAR_BODY(tile_bf16_scalar, uint16_t, CONV_BF16)
SCALAR_BODY(tile_f16_scalar, uint16_t, CONV_F16)

/* -------------------------------------------------------------------- AVX2 */

#if defined(__x86_64__)

#define AVX2 __attribute__((target("avx2,f16c")))

/* acc += x*x for the 4 fp32 values of @x, widened to double. */
AVX2 static inline __m256d acc4(__m256d acc, __m128 x)
{
	__m256d d = _mm256_cvtps_pd(x);

	return _mm256_add_pd(acc, _mm256_mul_pd(d, d));
}

/*
 * One round of 16 elements, given as two vectors of 8 fp32 values: elements
 * 0-3 go to a0 (lanes 0-3), 4-7 to a1, 8-11 to a2, 12-15 to a3.
 */
#define ROUND16(lo8, hi8)                                             \
	do {                                                          \
		a0 = acc4(a0, _mm256_castps256_ps128(lo8));           \
		a1 = acc4(a1, _mm256_extractf128_ps((lo8), 1));       \
		a2 = acc4(a2, _mm256_castps256_ps128(hi8));           \
		a3 = acc4(a3, _mm256_extractf128_ps((hi8), 1));       \
	} while (0)

/* The lanes out to memory, the tail in scalar code, the fixed join. */
#define FINISH(conv)                                                  \
	do {                                                          \
		double l[GRADCHECK_LANES];                            \
                                                                      \
		_mm256_storeu_pd(l, a0);                              \
		_mm256_storeu_pd(l + 4, a1);                          \
		_mm256_storeu_pd(l + 8, a2);                          \
		_mm256_storeu_pd(l + 12, a3);                         \
		for (; j < len; j++)                                  \
			l[j % GRADCHECK_LANES] += sq(conv(p[j]));     \
		return lanes_join(l);                                 \
	} while (0)

AVX2 static inline __m256 bf16x8(const uint16_t *p)
{
	__m256i w = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(const void *)p));

	return _mm256_castsi256_ps(_mm256_slli_epi32(w, 16));
}

AVX2 static inline __m256 f16x8(const uint16_t *p)
{
	return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(const void *)p));
}

AVX2 static double tile_f32_avx2(const void *grad, size_t begin, size_t end)
{
	const float *p = (const float *)grad + begin;
	size_t len = end - begin, j = 0;
	__m256d a0 = _mm256_setzero_pd(), a1 = a0, a2 = a0, a3 = a0;

	for (; j + GRADCHECK_LANES <= len; j += GRADCHECK_LANES) {
		a0 = acc4(a0, _mm_loadu_ps(p + j));
		a1 = acc4(a1, _mm_loadu_ps(p + j + 4));
		a2 = acc4(a2, _mm_loadu_ps(p + j + 8));
		a3 = acc4(a3, _mm_loadu_ps(p + j + 12));
	}
	FINISH(CONV_F32);
}

AVX2 static double tile_bf16_avx2(const void *grad, size_t begin, size_t end)
{
	const uint16_t *p = (const uint16_t *)grad + begin;
	size_t len = end - begin, j = 0;
	__m256d a0 = _mm256_setzero_pd(), a1 = a0, a2 = a0, a3 = a0;

	for (; j + GRADCHECK_LANES <= len; j += GRADCHECK_LANES) {
		__m256 lo = bf16x8(p + j), hi = bf16x8(p + j + 8);

		ROUND16(lo, hi);
	}
	FINISH(CONV_BF16);
}

AVX2 static double tile_f16_avx2(const void *grad, size_t begin, size_t end)
{
	const uint16_t *p = (const uint16_t *)grad + begin;
	size_t len = end - begin, j = 0;
	__m256d a0 = _mm256_setzero_pd(), a1 = a0, a2 = a0, a3 = a0;

	for (; j + GRADCHECK_LANES <= len; j += GRADCHECK_LANES) {
		__m256 lo = f16x8(p + j), hi = f16x8(p + j + 8);

		ROUND16(lo, hi);
	}
	FINISH(CONV_F16);
}

/* F16C from cpuid leaf 1 (ECX bit 29): clang 14's __builtin_cpu_supports()
 * does not know "f16c".  AVX2 support as reported includes the OS's YMM state. */
static bool avx2_supported(void)
{
	unsigned a, b, c, d;

	if (!__builtin_cpu_supports("avx2") || !__get_cpuid(1, &a, &b, &c, &d))
		return false;
	return (c & (1u << 29)) != 0;
}

#define TILE_F32_AVX2 tile_f32_avx2
#define TILE_BF16_AVX2 tile_bf16_avx2
#define TILE_F16_AVX2 tile_f16_avx2

#else

static bool avx2_supported(void)
{
	return false;
}

#define TILE_F32_AVX2 NULL
#define TILE_BF16_AVX2 NULL
#define TILE_F16_AVX2 NULL

#endif

/* [isa][dtype] */
static const tile_fn g_tiles[GRADCHECK_ISA__COUNT][3] = {
	[GRADCHECK_SCALAR] = { tile_f32_scalar, tile_bf16_scalar, tile_f16_scalar },
	[GRADCHECK_AVX2] = { TILE_F32_AVX2, TILE_BF16_AVX2, TILE_F16_AVX2 },
};

/* ---------------------------------------------------------------- dispatch */

const char *gradcheck_isa_name(enum gradcheck_isa isa)
{
	switch (isa) {
	case GRADCHECK_SCALAR:
		return "scalar";
	case GRADCHECK_AVX2:
		return "avx2";
	default:
		return "?";
	}
}

bool gradcheck_isa_supported(enum gradcheck_isa isa)
{
	switch (isa) {
	case GRADCHECK_SCALAR:
		return true;
	case GRADCHECK_AVX2:
		return avx2_supported();
	default:
		return false;
	}
}

static pthread_once_t g_isa_once = PTHREAD_ONCE_INIT;
/* -1 until chosen; stored (release) once, read (acquire) on every call. */
static _Atomic int g_isa = -1;

/*
 * TIER_SIMD (kernels/simd.h): the first entry this family knows decides:
 * "scalar" forces the scalar version; "avx2" or "avx512" asks for AVX2 (the
 * best this file has), with a warning and the scalar version on a CPU
 * without it; none, or "auto" first, leaves the choice to cpuid.
 */
static void isa_select(void)
{
	const char *env;
	int k = ts_simd_choice("scalar|avx2|avx512", &env);
	enum gradcheck_isa isa = avx2_supported() ? GRADCHECK_AVX2 : GRADCHECK_SCALAR;

	if (k == 0) {
		isa = GRADCHECK_SCALAR;
		TIER_INFO(TIER_SS_KERNELS, "TIER_SIMD=%s: grad check uses scalar", env);
	} else if (k > 0 && !avx2_supported()) {
		TIER_WARN(TIER_SS_KERNELS,
			  "TIER_SIMD=%s: this CPU lacks AVX2 or F16C; grad check uses scalar", env);
	}
	TIER_DEBUG_LOG(TIER_SS_KERNELS, "grad check: %s", gradcheck_isa_name(isa));
	atomic_store_explicit(&g_isa, (int)isa, memory_order_release);
}

enum gradcheck_isa gradcheck_isa(void)
{
	int isa = atomic_load_explicit(&g_isa, memory_order_acquire);

	if (isa < 0) {
		pthread_once(&g_isa_once, isa_select);
		isa = atomic_load_explicit(&g_isa, memory_order_acquire);
	}
	return (enum gradcheck_isa)isa;
}

/* -------------------------------------------------------------------- run */

struct batch {
	tile_fn fn;
	const void *grad;
	size_t n, first_tile;
	double sums[GRADCHECK_BATCH];
};

static void batch_tile(void *arg, size_t i, unsigned worker)
{
	struct batch *b = arg;
	size_t begin = (b->first_tile + i) * GRADCHECK_TILE;
	size_t end = b->n - begin < GRADCHECK_TILE ? b->n : begin + GRADCHECK_TILE;

	(void)worker;
	b->sums[i] = b->fn(b->grad, begin, end);
}

int gradcheck_run(struct tier_pool *pool, enum gradcheck_isa isa, const void *grad,
		  enum tier_dtype dtype, size_t n, struct tier_grad_stats *acc)
{
	struct batch b;
	size_t ntiles;
	double total = 0.0;

	ts_err_clear();
	if (!acc)
		return ts_err(-EINVAL, "tier_grad_check: acc is NULL");
	if ((unsigned)dtype > (unsigned)TIER_FP16)
		return ts_err(-EINVAL, "tier_grad_check: dtype %d is not TIER_FP32, TIER_BF16 or TIER_FP16",
				(int)dtype);
	if (!grad && n > 0)
		return ts_err(-EINVAL, "tier_grad_check: grad is NULL with n = %zu", n);
	/* A count no buffer holds: its tiles would read past any gradient. */
	if (n > (size_t)PTRDIFF_MAX / tier_dtype_size(dtype))
		return ts_err(-EOVERFLOW, "tier_grad_check: n = %zu: %zu-byte elements make more than PTRDIFF_MAX bytes, larger than any buffer",
			      n, tier_dtype_size(dtype));
	if ((unsigned)isa >= GRADCHECK_ISA__COUNT || !gradcheck_isa_supported(isa))
		return ts_err(-ENOTSUP, "tier_grad_check: version %s not supported on this CPU",
				gradcheck_isa_name(isa));

	b.fn = g_tiles[isa][dtype];
	b.grad = grad;
	b.n = n;
	ntiles = n / GRADCHECK_TILE + (n % GRADCHECK_TILE != 0);
	for (b.first_tile = 0; b.first_tile < ntiles; b.first_tile += GRADCHECK_BATCH) {
		size_t cnt = ntiles - b.first_tile < GRADCHECK_BATCH ? ntiles - b.first_tile
								      : GRADCHECK_BATCH;

		if (pool && cnt > 1) {
			int rc = ts_pool_for(pool, cnt, batch_tile, &b);

			if (rc < 0)
				return rc;
		} else {
			for (size_t i = 0; i < cnt; i++)
				batch_tile(&b, i, 0);
		}
		for (size_t i = 0; i < cnt; i++)
			total += b.sums[i];
	}
	acc->sumsq += total;
	acc->nonfinite |= !isfinite(total);
	return 0;
}

int tier_grad_check(struct tier_pool *pool, const void *grad, enum tier_dtype dtype, size_t n,
		    struct tier_grad_stats *acc)
{
	if (n && !grad)
		return ts_err_null(__func__, "grad");
	TS_NONNULL(acc);
	return gradcheck_run(pool, gradcheck_isa(), grad, dtype, n, acc);
}

/* --------------------------------------------------------------- clipping */

/*
 * torch.nn.utils.clip_grad_norm_ (1.13): clip_coef = max_norm /
 * (total_norm + 1e-6), clamped to at most 1.  In double here (torch works
 * in the norm tensor's dtype).  torch.clamp lets a nan through, so a nan
 * norm (or max_norm) gives nan; an infinite norm gives max_norm / inf = 0.
 */
double tier_clip_coef(double total_norm, double max_norm)
{
	double coef = max_norm / (total_norm + 1e-6);

	if (isnan(coef))
		return coef;
	return coef < 1.0 ? coef : 1.0;
}
