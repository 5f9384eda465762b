/*
 * gpu_none.c - the GPU discovery contract of gpu.h in a build without
 * CUDA: no device, and the reason says so.
 */
#include "config.h"

#include <errno.h>
#include <stdio.h>

#include "common/error.h"
#include "common/fault.h"
#include "tiers/gpu.h"

int gpu_count(int *count, char *why, int whylen)
{
	int rc = tier_fault_check(TIER_FAULT_GPU_PROBE);

	*count = 0;
	if (rc)
		return tier_err(rc, "GPU probe: %s", tier_strerror(rc));
	if (why && whylen > 0)
		snprintf(why, (size_t)whylen, "this build has no CUDA support (meson -Dcuda=enabled)");
	return 0;
}

int gpu_info(int index, struct tier_gpu_info *out)
{
	(void)out;
	return tier_err(-ENODEV, "GPU %d: this build has no CUDA support", index);
}

int gpu_selftest(int index)
{
	return tier_err(-ENODEV, "GPU %d: this build has no CUDA support", index);
}
