/*
 * gradcheck.h - the gradient check behind tier_grad_check(): the sum of
 * squares of a gradient (in double) and whether it holds an inf or a nan,
 * in one pass, split into tiles over a thread pool.
 *
 * The order of the double additions is fixed, so the result depends only on
 * the data and @n, never on the pool size, the thread timing or the SIMD
 * version:
 *   - the gradient is cut into tiles of GRADCHECK_TILE elements (the last
 *     one shorter); each tile is summed on its own, from 0.0;
 *   - within a tile, element j (counted from the tile's start) is squared
 *     in double and added to lane j % GRADCHECK_LANES, each lane in element
 *     order; the 16 lanes l[0..15] are then joined as
 *       v[k] = (l[k] + l[4+k]) + (l[8+k] + l[12+k])   for k = 0..3,
 *       tile = (v[0] + v[1]) + (v[2] + v[3]);
 *   - the tiles' sums are added in tile order, from 0.0, and that total is
 *     added to acc->sumsq.
 * Every square is exact (a 24-bit significand squared fits the 53 bits of a
 * double, and no float squared overflows a double), so contracting a
 * multiply and an add into an FMA cannot change a result either.
 *
 * Versions: scalar (portable C) and AVX2 (+F16C for fp16), chosen at the
 * first call from cpuid; TIER_SIMD (kernels/simd.h) may force one:
 * "scalar", or "avx2" ("avx512" means "avx2" here).
 */
#ifndef TIER_KERNELS_GRADCHECK_H
#define TIER_KERNELS_GRADCHECK_H

#include <stdbool.h>
#include <stddef.h>

#include "tierstore/kernels.h"

struct tier_pool;

/* Elements per tile (a multiple of GRADCHECK_LANES): 64 KiB of fp32. */
#define GRADCHECK_TILE ((size_t)16384)
/* Interleaved double accumulators per tile. */
#define GRADCHECK_LANES 16
/* Tiles per job handed to the pool (the per-tile sums live on the stack). */
#define GRADCHECK_BATCH 1024

enum gradcheck_isa { GRADCHECK_SCALAR = 0, GRADCHECK_AVX2 = 1, GRADCHECK_ISA__COUNT };

/* "scalar" or "avx2". */
const char *gradcheck_isa_name(enum gradcheck_isa isa);

/* Whether this CPU (and build) can run @isa. */
bool gradcheck_isa_supported(enum gradcheck_isa isa);

/*
 * The version tier_grad_check() uses, chosen at the first call (under
 * pthread_once): the best one the CPU supports, unless TIER_SIMD's first
 * entry among scalar|avx2|avx512 is "scalar".
 */
enum gradcheck_isa gradcheck_isa(void);

/*
 * tier_grad_check() with a given version (tests, benchmarks): 0, -EINVAL
 * (NULL @acc, NULL @grad with n > 0, bad dtype), -ENOTSUP (@isa not
 * supported here) or the pool's error (-EDEADLK); @acc is changed only on
 * success.
 */
int gradcheck_run(struct tier_pool *pool, enum gradcheck_isa isa, const void *grad,
		  enum tier_dtype dtype, size_t n, struct tier_grad_stats *acc);

#endif
