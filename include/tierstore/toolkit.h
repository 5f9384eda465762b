/*
 * tierstore/toolkit.h - the toolkit of libtierstore: the trainer's API
 * (tierstore.h) and, under it, the calls that drive the tiers and the
 * kernels directly: the NVMe tier and the store's objects, pins, commits
 * and counters (tierstore/tiers.h), the AdamW kernels, q8 moments,
 * gradient checks and the loss scaler (tierstore/kernels.h), and here the
 * GPU buffers and the CUDA update, the GPU self-test and the NVMe tier
 * opened from a manifest.  tier-bench, tier-stat and the tests use it; a
 * trainer needs tierstore.h alone.  docs/toolkit.md documents it.  Its
 * functions are implemented in runtime/ (this header's), tiers/ and
 * kernels/; of the layers' sources runtime/ alone may include it.  Valid
 * C17 and C++, like tierstore.h.
 */
#ifndef TIERSTORE_TOOLKIT_H
#define TIERSTORE_TOOLKIT_H

#include "../tierstore.h"
#include "tierstore/kernels.h"
#include "tierstore/tiers.h"

#ifdef __cplusplus
extern "C" {
#endif

/* --------------------------------------------------------------- devices */

/*
 * Runs a kernel on CUDA device @index that fills 4 MiB of device memory,
 * copies it back on a stream and checks every word.  Returns 0, -ENODEV
 * (no such device, or no CUDA in this build), -ENOMEM or -EIO.
 */
TIER_API int tier_gpu_selftest(int index);

/*
 * GPU buffers and the CUDA update, for programs without a CUDA runtime of
 * their own (tier-bench's `adam --gpu` and `step --grads device`; a
 * trainer in C).  In a build without CUDA, or without device @gpu, each
 * returns -ENODEV with the reason in tier_last_error().
 *
 * tier_gpu_alloc: @len bytes (1 for 0) of device memory on device @gpu
 * (TIER_GPU_DEVICE), or of page-locked host memory the devices reach by
 * DMA (TIER_GPU_PINNED), into *ptr (NULL on failure).  0, -EINVAL (a bad
 * @kind or a NULL @ptr), -ENOMEM, -ENODEV or -EIO.
 * tier_gpu_free: frees what tier_gpu_alloc gave, with the same @kind
 * (NULL: nothing; errors are ignored).
 * tier_gpu_copy: copies @len bytes between host, pinned and device memory
 * in any direction, and waits for the copy.  It runs on the calling
 * thread's default stream (after the work queued on the device's default
 * stream), so two threads' copies run at once: the link's two directions
 * together, as a training step uses them.
 * tier_gpu_sync: waits for the work tier_adam_step_gpu and
 * tier_adam_roofline_gpu queued on device @gpu.
 */
enum tier_gpu_mem {
	TIER_GPU_DEVICE = 0, /* device memory (cudaMalloc) */
	TIER_GPU_PINNED = 1, /* page-locked host memory (cudaHostAlloc) */
};
TIER_API int tier_gpu_alloc(int gpu, enum tier_gpu_mem kind, size_t len, void **ptr);
TIER_API void tier_gpu_free(enum tier_gpu_mem kind, void *ptr);
TIER_API int tier_gpu_copy(void *dst, const void *src, size_t len);
TIER_API int tier_gpu_sync(int gpu);

/*
 * tier_adam_step on CUDA device @gpu: every array of @t in its memory
 * (tier_gpu_alloc's TIER_GPU_DEVICE, or any cudaMalloc'd memory of that
 * device), any dtypes tier_adam_step takes, the same bits as it gives
 * (docs/kernels.md).  Queued on the device's default stream; the call
 * returns at once and tier_gpu_sync waits for it.  0, -EINVAL (as
 * tier_adam_step), -ENODEV, or a CUDA error (-EIO).
 * tier_adam_roofline_gpu: its same-traffic kernel (what tier_adam_roofline
 * is to tier_adam_step): the same loads and stores of every array with
 * one integer operation per word, so update time / roofline time is the
 * update's distance from the device's memory bound.  It leaves every
 * array as it was.
 */
TIER_API int tier_adam_step_gpu(int gpu, const struct tier_adam_params *p,
				const struct tier_adam_tensors *t);
TIER_API int tier_adam_roofline_gpu(int gpu, const struct tier_adam_tensors *t);

/* ------------------------------------------------------ opening the NVMe tier */

/*
 * Opens the NVMe tier the manifest describes: creates or reuses each
 * backing file (mode 0600, grown as objects are placed, O_DIRECT unless
 * the path says direct: false), writes its header, sets up one ring per
 * path.  A file that exists but is not a tierstore backing file is never
 * overwritten (-EEXIST).  Returns 0, -ENODEV (the manifest has no NVMe
 * paths), -ENOSPC, -EEXIST, -EINVAL (O_DIRECT refused), -ENOMEM or the
 * error of the failing system call, with the path in the detail.
 */
TIER_API int tier_nvme_open(const struct tier_manifest *m, unsigned flags,
			    struct tier_nvme **out);

#ifdef __cplusplus
}
#endif

#endif /* TIERSTORE_TOOLKIT_H */
