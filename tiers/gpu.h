/*
 * gpu.h - discovery of CUDA devices, for resolving the manifest's GPU and
 * for the HBM tier, and registration of host memory (the DRAM arena) for
 * DMA.  Implemented by gpu.cu in a CUDA build and by gpu_none.c otherwise;
 * both keep this contract, so callers never test whether CUDA is there.
 */
#ifndef TIER_TIERS_GPU_H
#define TIER_TIERS_GPU_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

struct ts_gpu_info {
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
int gpu_info(int index, struct ts_gpu_info *out);

/*
 * Exercises device @index end to end: allocates device memory, runs a
 * kernel that fills it, copies it back on a stream and checks every word.
 * 0, -ENODEV, -ENOMEM or -EIO with the detail message naming the CUDA call.
 */
int gpu_selftest(int index);

/*
 * Registers host memory [@base, @base + @len) with CUDA after making device
 * @gpu current: cudaHostRegister(cudaHostRegisterPortable), so copies
 * between it and any device are DMA.  0; -ENODEV without CUDA or without
 * device @gpu; else a -errno (mostly -EIO) with the detail naming the CUDA
 * call and its error string.  Callers pass their own fault site (the DRAM
 * arena: DRAM_PIN); this function has none.
 */
int gpu_host_register(void *base, uint64_t len, int gpu);

/*
 * Undoes gpu_host_register(@base).  Errors are not reported: the caller is
 * about to unmap the memory.
 */
void gpu_host_unregister(void *base);

#ifdef __cplusplus
}
#endif

#endif
