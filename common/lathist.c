/*
 * lathist.c - the log-linear latency histogram of the live view
 * (tierstore.h, "the live view"): 128 ns buckets below 1 us, then 8
 * buckets per power of two.  The NVMe tier counts every device operation
 * into one; readers take quantiles of it, or of the difference of two
 * snapshots for an interval.
 */
#include "config.h"

#include <math.h>

#include "common/error.h"
#include "tierstore/common.h"

#define LAT_SHIFT 7   /* the first buckets are 128 ns wide */
#define LAT_SUB 8     /* buckets per power of two */

unsigned tier_lat_bucket(uint64_t ns)
{
	uint64_t u = ns >> LAT_SHIFT;
	unsigned e, idx;

	if (u < LAT_SUB)
		return (unsigned)u;
	e = 63u - (unsigned)__builtin_clzll(u);           /* >= 3 */
	idx = (e - 2) * LAT_SUB + (unsigned)((u >> (e - 3)) & (LAT_SUB - 1));
	return idx < TIER_LAT_BUCKETS ? idx : TIER_LAT_BUCKETS - 1;
}

static uint64_t bucket_lower_ns(unsigned b)
{
	unsigned e, sub;

	if (b < LAT_SUB)
		return (uint64_t)b << LAT_SHIFT;
	e = b / LAT_SUB + 2;
	sub = b % LAT_SUB;
	return ((uint64_t)(LAT_SUB + sub) << (e - 3)) << LAT_SHIFT;
}

uint64_t tier_lat_bucket_upper_ns(unsigned b)
{
	if (b >= TIER_LAT_BUCKETS - 1)
		return UINT64_MAX;
	return bucket_lower_ns(b + 1);
}

uint64_t tier_lat_quantile_ns(const uint64_t hist[TIER_LAT_BUCKETS], double q)
{
	TS_NONNULL_OR(hist, 0);
	uint64_t total = 0, target, cum = 0;

	if (!hist || !(q > 0.0))
		return 0;
	if (q > 1.0)
		q = 1.0;
	for (unsigned b = 0; b < TIER_LAT_BUCKETS; b++)
		total += hist[b];
	if (total == 0)
		return 0;
	target = (uint64_t)ceil(q * (double)total);
	if (target < 1)
		target = 1;
	for (unsigned b = 0; b < TIER_LAT_BUCKETS; b++) {
		cum += hist[b];
		if (cum >= target)
			return b == TIER_LAT_BUCKETS - 1 ? bucket_lower_ns(b)
							 : tier_lat_bucket_upper_ns(b);
	}
	return bucket_lower_ns(TIER_LAT_BUCKETS - 1);
}
