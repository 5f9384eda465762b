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

/* @which, and @n, whose fp32 array (the widest) must fit a buffer. */
static int q8_args(int which, size_t n, const char *who)
{
	if (which != TIER_Q8_EXP_AVG && which != TIER_Q8_EXP_AVG_SQ)
		return ts_err(-EINVAL, "%s: which %d is not TIER_Q8_EXP_AVG or TIER_Q8_EXP_AVG_SQ",
			      who, which);
	if (n > (size_t)PTRDIFF_MAX / sizeof(float))
		return ts_err(-EOVERFLOW, "%s: n = %zu: the fp32 array of n elements is more than PTRDIFF_MAX bytes, larger than any buffer",
			      who, n);
	return 0;
}

int tier_q8_decode(const void *codes, const float *scales, size_t n, int which, float *out)
{
	TS_NONNULL(codes);
	TS_NONNULL(scales);
	TS_NONNULL(out);
	const uint8_t *c = codes;
	int rc = q8_args(which, n, "tier_q8_decode");

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
	TS_NONNULL(in);
	TS_NONNULL(codes);
	TS_NONNULL(scales);
	uint8_t *c = codes;
	int rc = q8_args(which, n, "tier_q8_encode");

	if (rc)
		return rc;
	for (size_t b0 = 0; b0 < n; b0 += TIER_Q8_BLOCK) {
		size_t b1 = n - b0 < TIER_Q8_BLOCK ? n : b0 + TIER_Q8_BLOCK;
		uint32_t maxbits = 0;
		float inv;

		for (size_t i = b0; i < b1; i++) {
			uint32_t u = f32_bits(in[i]) & 0x7fffffffu;

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
