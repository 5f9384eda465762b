/*
 * crc32c.h - CRC-32C (Castagnoli; reflected polynomial 0x82F63B78, the
 * checksum of iSCSI, ext4, Btrfs and NVMe), the checksum tierstore keeps
 * for every unit it writes to a backing file.
 *
 * Convention (zlib's crc32(), Linux's crc32c "extend"): the pre- and
 * post-inversion happen inside, so a checksum starts from 0 and extends:
 *
 *	crc = ts_crc32c(0, a, n);
 *	crc = ts_crc32c(crc, b, m);     == ts_crc32c(0, a||b, n + m)
 *
 * and ts_crc32c(0, "123456789", 9) == 0xE3069283.  Every variant below
 * follows this convention and returns the same value for the same input;
 * they differ only in speed.  All are pure functions of their arguments
 * (no state but read-only tables), safe to call from any thread, and accept
 * any alignment; @buf may be NULL when @len is 0.
 */
#ifndef TIER_KERNELS_CRC32C_H
#define TIER_KERNELS_CRC32C_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/*
 * The checksum of @buf[0, @len) extending @crc (0 for a fresh checksum),
 * computed by the fastest variant this CPU runs.
 *
 * The variant is chosen once, on the first call of ts_crc32c() or
 * ts_crc32c_impl() (not at library load), under pthread_once, from
 * TIER_SIMD as the options table holds it then (common/options.h; a
 * comma-separated list of kernel choices, case ignored, see
 * kernels/simd.h): its first entry among these decides:
 *   none, or "auto" first  the fastest variant the CPU supports (below);
 *   "scalar"              crc32c_scalar() whatever the CPU;
 *   "sse4.2", "clmul"     crc32c_sse42() or crc32c_clmul(); on a CPU without
 *                         SSE4.2 and PCLMULQDQ, a warning, then "auto".
 * Entries for other kernels ("avx2") are ignored here; an entry no kernel
 * knows draws a warning naming it.
 *
 * "auto" on a CPU without SSE4.2 and PCLMULQDQ is "scalar".  On one with
 * them it is "sse4.2" or "clmul", chosen by timing them: four alternating
 * runs of each over a 64 KiB buffer (about 0.1 ms in all, once per process),
 * "clmul" if its best run is at least 1/16 faster than the best of
 * "sse4.2".  Where crc32 starts one instruction per cycle (Intel cores) the
 * two are close; where it starts one per 2-3 cycles (AMD Zen 1/2) "clmul" is
 * about 1.6x faster.  Timing rather than a vendor table also gets
 * virtualised and future CPUs right; near a tie the choice may differ from
 * one process to the next, which costs only the small difference.  Every
 * variant returns the same checksum, so the choice never changes a result.
 */
uint32_t ts_crc32c(uint32_t crc, const void *buf, size_t len);

/* The variant ts_crc32c() uses: "clmul", "sse4.2" or "scalar".  Chooses it if no call has yet. */
const char *ts_crc32c_impl(void);

/*
 * The checksum of A||B from crc1 = ts_crc32c(0, A, |A|),
 * crc2 = ts_crc32c(0, B, |B|) and @len2 = |B| (zlib's crc32_combine()),
 * in O(log len2) time without the data: per-unit checksums computed in
 * parallel combine into the checksum of the whole.  @len2 may be any size_t.
 */
uint32_t ts_crc32c_combine(uint32_t crc1, uint32_t crc2, size_t len2);

/*
 * The variants ts_crc32c() dispatches to, exposed for tests and
 * benchmarks.  crc32c_scalar() is portable C (slicing-by-8 tables) and runs
 * anywhere.  crc32c_sse42() uses the SSE4.2 crc32 instruction on three
 * interleaved streams, joined with PCLMULQDQ.  crc32c_clmul() folds four
 * 16-byte lanes with PCLMULQDQ and reduces the last 128 bits, and the head
 * and tail bytes, with crc32; inputs under 256 bytes go to crc32c_sse42().
 * crc32c_sse42() and crc32c_clmul() may be called only when
 * crc32c_sse42_supported() is true (on other CPUs they fault with SIGILL).
 * Off x86-64 both are crc32c_scalar() and crc32c_sse42_supported() is false.
 */
uint32_t crc32c_scalar(uint32_t crc, const void *buf, size_t len);
uint32_t crc32c_sse42(uint32_t crc, const void *buf, size_t len);
uint32_t crc32c_clmul(uint32_t crc, const void *buf, size_t len);
bool crc32c_sse42_supported(void);

#ifdef __cplusplus
}
#endif

#endif
