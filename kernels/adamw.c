/*
 * adamw.c - the CPU Adam/AdamW update: argument checks, the scalar version
 * and its roofline, the choice of version (cpuid, TIER_SIMD), the runs
 * the thread pool's threads claim, and the public tier_adam_step(),
 * tier_adam_roofline() and tier_adam_isa().
 *
 * Every version (this file's scalar one, kernels/adamw_avx2.c,
 * kernels/adamw_avx512.c) computes adam_elem() of kernels/adam_math.h per
 * element and they agree bit for bit; the kernels are compiled with
 * -ffp-contract=off -fno-math-errno (kernels/meson.build).  docs/kernels.md
 * describes the semantics, the dtype rules and the measurements behind the
 * runs.
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
#include "kernels/adamw.h"
#include "kernels/adamw_impl.h"
#include "kernels/simd.h"

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

/*
 * The smallest run of elements a thread claims (adamw_run, ts_pool_runs).
 * Tiles of 16K elements claimed alternately by the threads were measured
 * on 2 Zen 1 cores to be as fast as 4K to 64K ones (docs/kernels.md), but
 * on an AVX-512 Xeon q8's step took 15% longer, and its roofline 11%,
 * than with contiguous runs (docs/performance.md, "The threads' tiles"):
 * a thread jumping from tile to tile restarts the prefetchers' streams,
 * which q8's 16-byte code loads do not cover.  16K elements (448 KiB
 * of fp32 state) stays the floor, so that the last runs still balance the
 * threads; a multiple of every vector width and of the q8 block.
 */
#define ADAMW_TILE_DEFAULT ((size_t)16 * 1024)
_Static_assert(ADAMW_TILE_DEFAULT % TIER_Q8_BLOCK == 0, "a tile is whole q8 blocks");

static _Atomic size_t g_tile = ADAMW_TILE_DEFAULT;

void adamw_set_tile(size_t elems)
{
	/* a multiple of TIER_Q8_BLOCK: tiles are whole q8 blocks (and whole vectors) */
	atomic_store_explicit(&g_tile,
			      elems ? (elems + TIER_Q8_BLOCK - 1) & ~(size_t)(TIER_Q8_BLOCK - 1)
				    : ADAMW_TILE_DEFAULT,
			      memory_order_relaxed);
}

/* ------------------------------------------------------------- checks */

/* A gradient's or a parameter copy's dtype (q8 is a moment dtype only). */
static bool dtype_valid(enum tier_dtype dt)
{
	return dt == TIER_FP32 || dt == TIER_BF16 || dt == TIER_FP16;
}

int adamw_check(const struct tier_adam_tensors *a)
{
	if (!a)
		return ts_err(-EINVAL, "adam: no tensors (NULL)");
	if (a->moment_dtype != TIER_FP32 && a->moment_dtype != TIER_BF16 &&
	    a->moment_dtype != TIER_Q8)
		return ts_err(-EINVAL, "adam: exp_avg/exp_avg_sq dtype %d is not FP32, BF16 or Q8",
				(int)a->moment_dtype);
	if (!dtype_valid(a->grad_dtype))
		return ts_err(-EINVAL, "adam: grad dtype %d%s is not FP32, BF16 or FP16",
				(int)a->grad_dtype,
				a->grad_dtype == TIER_Q8 ? " (q8, a moment dtype only)" : "");
	if (!dtype_valid(a->out_dtype))
		return ts_err(-EINVAL, "adam: param_out dtype %d%s is not FP32, BF16 or FP16",
				(int)a->out_dtype,
				a->out_dtype == TIER_Q8 ? " (q8, a moment dtype only)" : "");
	if (a->moment_dtype == TIER_Q8 && a->index0 % TIER_Q8_BLOCK != 0)
		return ts_err(-EINVAL, "adam: index0 %llu of q8 moments is not a multiple of the block (%d)",
				(unsigned long long)a->index0, TIER_Q8_BLOCK);
	if (a->n == 0)
		return 0;
	/* A count no buffer holds (the fp32 param array is the widest): the
	 * runs would go past any array. */
	if (a->n > (size_t)PTRDIFF_MAX / sizeof(float))
		return ts_err(-EOVERFLOW, "adam: n = %zu: the fp32 param array of n elements is more than PTRDIFF_MAX bytes, larger than any buffer",
				a->n);
	if (a->moment_dtype == TIER_Q8 && !a->exp_avg_scale)
		return ts_err(-EINVAL, "adam: exp_avg_scale is NULL with q8 moments, n = %zu", a->n);
	if (a->moment_dtype == TIER_Q8 && !a->exp_avg_sq_scale)
		return ts_err(-EINVAL, "adam: exp_avg_sq_scale is NULL with q8 moments, n = %zu", a->n);
	if (!a->param)
		return ts_err(-EINVAL, "adam: param is NULL with n = %zu", a->n);
	if (!a->exp_avg)
		return ts_err(-EINVAL, "adam: exp_avg is NULL with n = %zu", a->n);
	if (!a->exp_avg_sq)
		return ts_err(-EINVAL, "adam: exp_avg_sq is NULL with n = %zu", a->n);
	if (!a->grad)
		return ts_err(-EINVAL, "adam: grad is NULL with n = %zu", a->n);
	return 0;
}

/* ------------------------------------------------------------- scalar */

static void adamw_scalar_kernel(const struct adam_consts *c, const struct tier_adam_tensors *a,
				size_t begin, size_t end)
{
	switch (adamw_key(a)) {
#define ADAMW_CASE(M, G, O)                                                    \
	case ADAMW_KEY(M, G, O):                                               \
		adamw_scalar_range(c, a, begin, end, M, G, O);                 \
		break;
		ADAMW_DTYPE_CASES(ADAMW_CASE)
#undef ADAMW_CASE
#define ADAMW_CASE(M, G, O)                                                    \
	case ADAMW_KEY(M, G, O):                                               \
		adamw_q8_scalar_range(c, a, begin, end, G, O);                 \
		break;
		ADAMW_Q8_CASES(ADAMW_CASE)
#undef ADAMW_CASE
	default:
		break;
	}
}

static void adamw_scalar_roofline(const struct adam_consts *c, const struct tier_adam_tensors *a,
				  size_t begin, size_t end)
{
	(void)c;
	switch (adamw_key(a)) {
#define ADAMW_CASE(M, G, O)                                                    \
	case ADAMW_KEY(M, G, O):                                               \
		adamw_scalar_roof_range(a, begin, end, M, G, O);               \
		break;
		ADAMW_DTYPE_CASES(ADAMW_CASE)
#undef ADAMW_CASE
#define ADAMW_CASE(M, G, O)                                                    \
	case ADAMW_KEY(M, G, O):                                               \
		adamw_q8_roof_elems(a, begin, end, G, O);                      \
		adamw_q8_roof_scales(a, begin, end);                           \
		break;
		ADAMW_Q8_CASES(ADAMW_CASE)
#undef ADAMW_CASE
	default:
		break;
	}
}

/* ------------------------------------------------------------- versions */

static const char *const g_isa_names[ADAMW_ISA__COUNT] = { "scalar", "avx2", "avx512" };

const char *adamw_isa_name(enum adamw_isa isa)
{
	return (unsigned)isa < ADAMW_ISA__COUNT ? g_isa_names[isa] : "?";
}

adamw_kernel_fn adamw_kernel(enum adamw_isa isa)
{
	switch (isa) {
	case ADAMW_SCALAR:
		return adamw_scalar_kernel;
#if TIER_ADAMW_AVX2
	case ADAMW_AVX2:
		return adamw_avx2_kernel;
#endif
#if TIER_ADAMW_AVX512
	case ADAMW_AVX512:
		return adamw_avx512_kernel;
#endif
	default:
		return NULL;
	}
}

adamw_kernel_fn adamw_roofline_kernel(enum adamw_isa isa)
{
	switch (isa) {
	case ADAMW_SCALAR:
		return adamw_scalar_roofline;
#if TIER_ADAMW_AVX2
	case ADAMW_AVX2:
		return adamw_avx2_roofline;
#endif
#if TIER_ADAMW_AVX512
	case ADAMW_AVX512:
		return adamw_avx512_roofline;
#endif
	default:
		return NULL;
	}
}

#if defined(__x86_64__) || defined(__i386__)
/* XCR0: which register states the OS saves on a context switch. */
static uint64_t xgetbv0(void)
{
	uint32_t lo, hi;

	__asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
	return (uint64_t)hi << 32 | lo;
}
#endif

static bool g_cpu_avx2, g_cpu_avx512;
static pthread_once_t g_cpu_once = PTHREAD_ONCE_INIT;

static void cpu_probe(void)
{
#if defined(__x86_64__) || defined(__i386__)
	unsigned a, b, c, d;
	bool avx, fma, f16c, avx2, avx512;
	uint64_t xcr0;

	if (!__get_cpuid(1, &a, &b, &c, &d))
		return;
	/* AVX, FMA, F16C, and XGETBV usable (OSXSAVE) */
	if (!(c & (1u << 27)) || !(c & (1u << 28)))
		return;
	avx = true;
	fma = (c & (1u << 12)) != 0;
	f16c = (c & (1u << 29)) != 0;
	xcr0 = xgetbv0();
	if (__get_cpuid_max(0, NULL) < 7)
		return;
	__cpuid_count(7, 0, a, b, c, d);
	/* AVX2: EBX bit 5; AVX-512 F, BW, VL: EBX bits 16, 30, 31 */
	avx2 = avx && fma && f16c && (b & (1u << 5)) && (xcr0 & 0x6) == 0x6; /* XMM, YMM state */
	avx512 = avx2 && (b & (1u << 16)) && (b & (1u << 30)) && (b & (1u << 31)) &&
		 (xcr0 & 0xe6) == 0xe6; /* and opmask, ZMM_Hi256, Hi16_ZMM state */
	g_cpu_avx2 = avx2;
	g_cpu_avx512 = avx512;
#endif
}

int adamw_isa_supported(enum adamw_isa isa)
{
	if (!adamw_kernel(isa))
		return 0;
	pthread_once(&g_cpu_once, cpu_probe);
	switch (isa) {
	case ADAMW_SCALAR:
		return 1;
	case ADAMW_AVX2:
		return g_cpu_avx2;
	case ADAMW_AVX512:
		return g_cpu_avx512;
	default:
		return 0;
	}
}

static enum adamw_isa isa_best(void)
{
	for (int i = ADAMW_ISA__COUNT - 1; i > 0; i--)
		if (adamw_isa_supported((enum adamw_isa)i))
			return (enum adamw_isa)i;
	return ADAMW_SCALAR;
}

static enum adamw_isa isa_select(void)
{
	const char *env;
	int k = ts_simd_choice("scalar|avx2|avx512", &env);
	enum adamw_isa isa = isa_best();

	if (k >= 0) {
		if (adamw_isa_supported((enum adamw_isa)k)) {
			isa = (enum adamw_isa)k;
			TIER_INFO(TIER_SS_KERNELS, "TIER_SIMD=%s: adam uses %s", env,
				  adamw_isa_name(isa));
		} else {
			TIER_WARN(TIER_SS_KERNELS,
				  "TIER_SIMD=%s: this CPU (or build) cannot run the %s adam kernel; using auto (%s)",
				  env, adamw_isa_name((enum adamw_isa)k), adamw_isa_name(isa));
		}
	}
	TIER_DEBUG_LOG(TIER_SS_KERNELS, "adam: %s", adamw_isa_name(isa));
	return isa;
}

static pthread_mutex_t g_isa_lock = PTHREAD_MUTEX_INITIALIZER;
/* -1 until chosen; stored (release) once, read (acquire) on every call. */
static _Atomic int g_isa = -1;

enum adamw_isa adamw_isa(void)
{
	int isa = atomic_load_explicit(&g_isa, memory_order_acquire);

	if (isa < 0) {
		pthread_mutex_lock(&g_isa_lock);
		isa = atomic_load_explicit(&g_isa, memory_order_relaxed);
		if (isa < 0) {
			isa = (int)isa_select();
			atomic_store_explicit(&g_isa, isa, memory_order_release);
		}
		pthread_mutex_unlock(&g_isa_lock);
	}
	return (enum adamw_isa)isa;
}

void adamw_isa_reset(void)
{
	pthread_mutex_lock(&g_isa_lock);
	atomic_store_explicit(&g_isa, -1, memory_order_release);
	pthread_mutex_unlock(&g_isa_lock);
}

/* ------------------------------------------------------------- tiling */

struct adamw_job {
	adamw_kernel_fn fn;
	const struct adam_consts *c;
	const struct tier_adam_tensors *a;
};

static void adamw_part(void *arg, size_t begin, size_t end, unsigned worker)
{
	const struct adamw_job *j = arg;

	(void)worker;
	j->fn(j->c, j->a, begin, end);
}

/* @fn over @a on @pool's threads (NULL: this one), in contiguous runs of
 * whole tiles that the threads claim (ts_pool_runs); which thread updates
 * an element does not change its bits. */
static int adamw_run(struct tier_pool *pool, adamw_kernel_fn fn, const struct adam_consts *c,
		     const struct tier_adam_tensors *a)
{
	struct adamw_job j = { fn, c, a };

	return ts_pool_runs(pool, a->n, atomic_load_explicit(&g_tile, memory_order_relaxed),
			    adamw_part, &j);
}

static int isa_usable(enum adamw_isa isa)
{
	if ((unsigned)isa >= ADAMW_ISA__COUNT)
		return ts_err(-EINVAL, "adam: no version %d", (int)isa);
	if (!adamw_isa_supported(isa))
		return ts_err(-ENOTSUP, "adam: this CPU (or build) cannot run the %s version",
				adamw_isa_name(isa));
	return 0;
}

int adamw_step_isa(struct tier_pool *pool, enum adamw_isa isa, const struct adam_consts *c,
		   const struct tier_adam_tensors *a)
{
	int rc = isa_usable(isa);

	if (rc)
		return rc;
	rc = adamw_check(a);
	if (rc)
		return rc;
	return adamw_run(pool, adamw_kernel(isa), c, a);
}

int adamw_roofline_isa(struct tier_pool *pool, enum adamw_isa isa, const struct tier_adam_tensors *a)
{
	int rc = isa_usable(isa);

	if (rc)
		return rc;
	rc = adamw_check(a);
	if (rc)
		return rc;
	return adamw_run(pool, adamw_roofline_kernel(isa), NULL, a);
}

/* ------------------------------------------------------------- public */

int adam_params_check(const struct tier_adam_params *p, const char *who)
{
	if (!p)
		return ts_err(-EINVAL, "%s: no hyperparameters (NULL)", who);
	if (ts_params_size("struct tier_adam_params", p->size, sizeof(*p))) {
		ts_err_prefix("%s", who);
		return -EINVAL;
	}
	if (!isfinite(p->lr) || p->lr < 0)
		return ts_err(-EINVAL, "%s: lr %g is not a finite value >= 0", who, p->lr);
	if (!(p->beta1 >= 0 && p->beta1 < 1))
		return ts_err(-EINVAL, "%s: beta1 %g is not in [0, 1)", who, p->beta1);
	if (!(p->beta2 >= 0 && p->beta2 < 1))
		return ts_err(-EINVAL, "%s: beta2 %g is not in [0, 1)", who, p->beta2);
	if (!isfinite(p->eps) || p->eps < 0)
		return ts_err(-EINVAL, "%s: eps %g is not a finite value >= 0", who, p->eps);
	if (!isfinite(p->weight_decay) || p->weight_decay < 0)
		return ts_err(-EINVAL, "%s: weight_decay %g is not a finite value >= 0", who,
				p->weight_decay);
	if (!isfinite(p->grad_scale))
		return ts_err(-EINVAL, "%s: grad_scale %g is not finite", who, p->grad_scale);
	if (p->step == 0)
		return ts_err(-EINVAL, "%s: step 0 (the first step is 1)", who);
	if (p->rounding != TIER_ROUND_NEAREST && p->rounding != TIER_ROUND_STOCHASTIC)
		return ts_err(-EINVAL, "%s: rounding %d is not TIER_ROUND_NEAREST or TIER_ROUND_STOCHASTIC",
				who, p->rounding);
	if (p->out_rounding != TIER_ROUND_NEAREST && p->out_rounding != TIER_ROUND_STOCHASTIC)
		return ts_err(-EINVAL, "%s: out_rounding %d is not TIER_ROUND_NEAREST or TIER_ROUND_STOCHASTIC",
				who, p->out_rounding);
	return 0;
}

int tier_adam_step(struct tier_pool *pool, const struct tier_adam_params *p,
		   const struct tier_adam_tensors *t)
{
	TS_NONNULL(p);
	TS_NONNULL(t);
	struct adam_consts c;
	int rc = adam_params_check(p, "adam");

	if (rc)
		return rc;
	rc = adamw_check(t);
	if (rc)
		return rc;
	adam_consts_init(p, &c);
	return adamw_run(pool, adamw_kernel(adamw_isa()), &c, t);
}

int tier_adam_roofline(struct tier_pool *pool, const struct tier_adam_tensors *t)
{
	TS_NONNULL(t);
	int rc = adamw_check(t);

	if (rc)
		return rc;
	return adamw_run(pool, adamw_roofline_kernel(adamw_isa()), NULL, t);
}

const char *tier_adam_isa(void)
{
	return adamw_isa_name(adamw_isa());
}
