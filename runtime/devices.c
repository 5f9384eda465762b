/*
 * devices.c - the public face of device discovery (tiers/gpu.h).
 */
#include "config.h"

#include <limits.h>

#include "common/error.h"
#include "tiers/gpu.h"
#include "tierstore.h"

int tier_gpu_count(int *count, char *why, size_t whylen)
{
	TS_NONNULL(count);
	ts_err_clear();
	return gpu_count(count, why, whylen > INT_MAX ? INT_MAX : (int)whylen);
}

int tier_gpu_selftest(int index)
{
	ts_err_clear();
	return gpu_selftest(index);
}
