/*
 * gpu.h - discovery of CUDA devices, for resolving the manifest's GPU and
 * for the HBM tier.  Implemented by gpu.cu in a CUDA build and by
 * gpu_none.c otherwise; both keep this contract, so callers never test
 * whether CUDA is there.
 */
#ifndef TIER_TIERS_GPU_H
#define TIER_TIERS_GPU_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

struct tier_gpu_info {
	int index;
	char name[256];
	uint64_t total_mem;    /* bytes */
	char pci_bus_id[32];   /* "0000:17:00.0" */
	int cc_major, cc_minor;
};

/*
 * Number of usable CUDA devices in *count.  A machine with no driver or no
 * device is not an error: *count is 0 and @why (if given) says why ("no
 * CUDA driver", "built without CUDA").  Returns 0, or -errno when the query
 * itself failed (fault site GPU_PROBE).
 */
int gpu_count(int *count, char *why, int whylen);

/* Properties of device @index.  -ENODEV if there is no such device. */
int gpu_info(int index, struct tier_gpu_info *out);

/*
 * Exercises device @index end to end: allocates device memory, runs a
 * kernel that fills it, copies it back on a stream and checks every word.
 * 0, -ENODEV, -ENOMEM or -EIO with the detail message naming the CUDA call.
 */
int gpu_selftest(int index);

#ifdef __cplusplus
}
#endif

#endif
