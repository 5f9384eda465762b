/*
 * gpu_none.c - the GPU contract of gpu.h in a build without CUDA: no
 * device, nothing to register host memory with, and the reason says so.
 */
#include "config.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>

#include "common/error.h"
#include "common/fault.h"
#include "tiers/gpu.h"

int gpu_count(int *count, char *why, int whylen)
{
	int rc = ts_fault_check(TIER_FAULT_GPU_PROBE);

	*count = 0;
	if (rc)
		return ts_err(rc, "GPU probe: %s", tier_strerror(rc));
	if (why && whylen > 0)
		snprintf(why, (size_t)whylen, "this build has no CUDA support (meson -Dcuda=enabled)");
	return 0;
}

int gpu_info(int index, struct ts_gpu_info *out)
{
	(void)out;
	return ts_err(-ENODEV, "GPU %d: this build has no CUDA support", index);
}

int gpu_selftest(int index)
{
	return ts_err(-ENODEV, "GPU %d: this build has no CUDA support", index);
}

int gpu_host_register(void *base, uint64_t len, int gpu)
{
	(void)base;
	(void)len;
	return ts_err(-ENODEV, "GPU %d: cannot register host memory: built without CUDA", gpu);
}

void gpu_host_unregister(void *base)
{
	(void)base;
}
