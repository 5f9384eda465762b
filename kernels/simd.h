/*
 * simd.h - TIER_SIMD, shared by every kernel family that has SIMD versions
 * (crc32c, Adam/AdamW, ...).
 *
 * TIER_SIMD (options table, common/options.h) is a comma-separated list of
 * kernel choices, case ignored, spaces around entries allowed, e.g.
 * "avx2,clmul".  Each family looks for the first entry it knows and ignores
 * the others; "scalar" is known by every family, and an "auto" before any
 * entry a family knows leaves that family on its automatic choice.  An
 * entry no family knows (not in TIER_SIMD_CHOICES) draws a warning, once
 * per value of TIER_SIMD, and is ignored.
 */
#ifndef TIER_KERNELS_SIMD_H
#define TIER_KERNELS_SIMD_H

/* Every choice some family knows, for the warning. */
#define TIER_SIMD_CHOICES "auto|scalar|sse4.2|clmul|avx2|avx512"

/*
 * The choice TIER_SIMD makes for a family that knows @known ('|'-separated,
 * e.g. "scalar|avx2|avx512"): the index in @known of the first entry of
 * TIER_SIMD that names one of them, or -1 when none does (or "auto" comes
 * first).  *@value (may be NULL) receives TIER_SIMD's whole value, for
 * messages.  Reads the options table as it stands (ts_options_reload()
 * re-reads the environment).
 */
int ts_simd_choice(const char *known, const char **value);

#endif
