/*
 * adamw.h - the CPU Adam/AdamW update over arrays, one pass over memory:
 * reads the gradient (fp32, bf16 or fp16), the fp32 master parameters and
 * the two moments (fp32, bf16, or q8: 8-bit codes with a scale per block), writes the parameters and moments back
 * in place and, optionally, a copy of the parameters in bf16, fp16 or fp32
 * (the copy the GPU needs), all in the same pass.  The loss-scale division
 * and the clipping coefficient are folded into adam_consts.grad_scale.
 *
 * Versions: scalar (portable C), AVX2+FMA+F16C and AVX-512 (F, BW, VL),
 * chosen at first use from cpuid; TIER_SIMD (a comma-separated list; see
 * docs/kernels.md) may force one: "scalar", "avx2" or "avx512".  All
 * versions compute adam_elem() of adam_math.h in the same operation order
 * and agree bit for bit.  Pure compute: no knowledge of tiers.
 */
#ifndef TIER_KERNELS_ADAMW_H
#define TIER_KERNELS_ADAMW_H

#include <stddef.h>
#include <stdint.h>

#include "tierstore/kernels.h"
#include "kernels/adam_math.h"

struct tier_pool;

enum adamw_isa { ADAMW_SCALAR = 0, ADAMW_AVX2 = 1, ADAMW_AVX512 = 2, ADAMW_ISA__COUNT };

/* The body of one version: elements [begin, end) of @a.  A roofline body
 * moves the same bytes with trivial arithmetic. */
typedef void (*adamw_kernel_fn)(const struct adam_consts *c, const struct tier_adam_tensors *a,
				size_t begin, size_t end);

/* Checks the arguments: 0 or -EINVAL with the detail (dtype not allowed,
 * NULL pointer with n > 0). */
int adamw_check(const struct tier_adam_tensors *a);

/* The version in use (first call decides; TIER_SIMD may force one). */
enum adamw_isa adamw_isa(void);
const char *adamw_isa_name(enum adamw_isa isa);

/* Whether this CPU can run @isa; the version's body, or NULL when the
 * build lacks it. */
int adamw_isa_supported(enum adamw_isa isa);
adamw_kernel_fn adamw_kernel(enum adamw_isa isa);

/* One step over @a with a given version, in contiguous runs that @pool's
 * threads claim (NULL: the calling thread alone) (tests, benchmarks;
 * tier_adam_step uses the version in use).  0 or -EINVAL; -ENOTSUP when
 * this CPU or build cannot run it. */
int adamw_step_isa(struct tier_pool *pool, enum adamw_isa isa, const struct adam_consts *c,
		   const struct tier_adam_tensors *a);

/* The roofline kernel of @isa over @a (tier_adam_roofline). */
int adamw_roofline_isa(struct tier_pool *pool, enum adamw_isa isa, const struct tier_adam_tensors *a);
adamw_kernel_fn adamw_roofline_kernel(enum adamw_isa isa);

/* Tests only: forget the version chosen, so that the next call chooses
 * again from TIER_SIMD as the options table then holds it. */
void adamw_isa_reset(void);

/* Benchmarks and tests only: the smallest run a thread claims, in
 * elements (rounded up to a multiple of TIER_Q8_BLOCK, 256, so that runs
 * are whole q8 blocks; 0 = the default, 16K). */
void adamw_set_tile(size_t elems);

#endif
