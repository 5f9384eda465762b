/*
 * copy.h - a copy whose stores go around the cache (non-temporal stores),
 * for copies whose destination is not read again soon by this CPU: the
 * GPU lane's copies of updated parameters from its pinned staging into the
 * trainer's pageable buffers (runtime/optim/optim_gpu.c).
 *
 * An ordinary store to a line not in the cache first reads the line
 * (read-for-ownership), so a cached copy of n bytes moves 3n bytes of
 * memory traffic; a non-temporal store writes whole lines without reading
 * them, 2n.  Where the copy shares host memory with the link's DMA that is
 * a third less of the traffic the two contend for (docs/performance.md,
 * "Pageable gradients: streaming stores").
 *
 * The result is memcpy's, whatever the version: bytes [0, n) of @dst equal
 * those of @src.  Versions: scalar (memcpy itself), AVX2 (32-byte stores),
 * AVX-512 (64-byte stores), chosen at the first call from cpuid; TIER_SIMD
 * (kernels/simd.h) may force one: its first entry among
 * scalar|avx2|avx512.  The head of @dst up to a 64-byte boundary and the
 * tail under 64 bytes go through memcpy; a copy of COPY_STREAM_MIN bytes or
 * less is memcpy's alone.  Every version ends with a store fence, so a
 * thread that learns of the copy's end from this one (a pool's join, a
 * release store) sees every byte.
 */
#ifndef TIER_KERNELS_COPY_H
#define TIER_KERNELS_COPY_H

#include <stdbool.h>
#include <stddef.h>

/* At or below this a copy is memcpy's (the head and tail would dominate). */
#define COPY_STREAM_MIN ((size_t)4096)

enum copy_isa { COPY_SCALAR = 0, COPY_AVX2 = 1, COPY_AVX512 = 2, COPY_ISA__COUNT };

/* "scalar", "avx2" or "avx512". */
const char *copy_isa_name(enum copy_isa isa);

/* Whether this CPU (and build) can run @isa. */
bool copy_isa_supported(enum copy_isa isa);

/* The version ts_copy_stream() uses, chosen at the first call. */
enum copy_isa copy_isa(void);

/* memcpy(@dst, @src, @n) with non-temporal stores; the areas must not overlap. */
void ts_copy_stream(void *dst, const void *src, size_t n);

/* The same with a given version (tests, benchmarks): 0, or -ENOTSUP where
 * this CPU cannot run @isa (nothing copied). */
int ts_copy_stream_isa(enum copy_isa isa, void *dst, const void *src, size_t n);

#endif
