/*
 * q8.c - q8 moments to and from fp32 values (tier_q8_decode,
 * tier_q8_encode): what a program that keeps q8 moments (tier_adam_step
 * with TIER_Q8, the optimizer's read, write, export and import) converts
 * them with.  The format is kernels/adam_math.h's (docs/kernels.md, "q8
 * moments"); encoding rounds to nearest, each block scaled by its largest
 * |value|, exactly as the update stores a block with rounding nearest.
 */
#include "config.h"

#include <errno.h>
#include <stddef.h>
#include <stdint.h>

#include "common/error.h"
#include "kernels/adam_math.h"
#include "tierstore/kernels.h"

/* The arrays @a, @b, @c are named @names ("a,b,c"): a NULL one is named
 * ("FN: ARG is NULL", as every entry point says it). */
static int q8_args(const void *a, const void *b, const void *c, size_t n, int which,
		   const char *who, const char *const names[3])
{
	const void *arr[3] = { a, b, c };

	if (which != TIER_Q8_EXP_AVG && which != TIER_Q8_EXP_AVG_SQ)
		return ts_err(-EINVAL, "%s: which %d is not TIER_Q8_EXP_AVG or TIER_Q8_EXP_AVG_SQ",
			      who, which);
	for (int k = 0; k < 3 && n; k++)
		if (!arr[k])
			return ts_err(-EINVAL, "%s: %s is NULL (n = %zu)", who, names[k], n);
	return 0;
}

int tier_q8_decode(const void *codes, const float *scales, size_t n, int which, float *out)
{
	const uint8_t *c = codes;
	static const char *const names[3] = { "codes", "scales", "out" };
	int rc = q8_args(codes, scales, out, n, which, "tier_q8_decode", names);

	if (rc)
		return rc;
	for (size_t i = 0; i < n; i++) {
		float s = scales[i / TIER_Q8_BLOCK];

		out[i] = which == TIER_Q8_EXP_AVG ? q8_dec_m(c[i], s) : q8_dec_v(c[i], s);
	}
	return 0;
}

int tier_q8_encode(const float *in, size_t n, int which, void *codes, float *scales)
{
	uint8_t *c = codes;
	static const char *const names[3] = { "in", "codes", "scales" };
	int rc = q8_args(in, codes, scales, n, which, "tier_q8_encode", names);

	if (rc)
		return rc;
	for (size_t b0 = 0; b0 < n; b0 += TIER_Q8_BLOCK) {
		size_t b1 = n - b0 < TIER_Q8_BLOCK ? n : b0 + TIER_Q8_BLOCK;
		uint32_t maxbits = 0;
		float inv;

		for (size_t i = b0; i < b1; i++) {
			uint32_t u = q8_u(in[i]) & 0x7fffffffu;

			maxbits = u > maxbits ? u : maxbits;
		}
		scales[b0 / TIER_Q8_BLOCK] = q8_scale(maxbits, &inv);
		for (size_t i = b0; i < b1; i++)
			c[i] = (uint8_t)(inv == 0.0f ? 0
					 : which == TIER_Q8_EXP_AVG ? q8_enc_m(in[i], inv, Q8_RND_NEAREST)
								    : q8_enc_v(in[i], inv, Q8_RND_NEAREST));
	}
	return 0;
}
