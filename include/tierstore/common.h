/*
 * tierstore/common.h - the base of the public API: the version, errors,
 * options, element types and rounding, latency histograms and the
 * convention of parameter structs; and the types of the
 * layers above that the trainer's header, tierstore.h, uses without their
 * functions (the store's parameters, levels and policies, the loss
 * scaler's state), so that tierstore.h need not include the toolkit's
 * tierstore/tiers.h and tierstore/kernels.h.  Part of tierstore.h:
 * include that.  It is implemented in common/, the bottom layer of the
 * library, which of the public headers may include this one (and the
 * generated tierstore/version.h it includes) alone.
 */
#ifndef TIERSTORE_COMMON_H
#define TIERSTORE_COMMON_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__)
#define TIER_API __attribute__((visibility("default")))
#else
#define TIER_API
#endif

/* ---------------------------------------------------------------- version */

/* TIER_VERSION_MAJOR, _MINOR, _PATCH and TIER_VERSION_STRING: the
 * header's version, generated from meson.build's project(). */
#include "tierstore/version.h"

/* The header's version as one number: MAJOR * 10000 + MINOR * 100 + PATCH. */
#define TIER_VERSION_NUMBER \
	(TIER_VERSION_MAJOR * 10000 + TIER_VERSION_MINOR * 100 + TIER_VERSION_PATCH)

/* The library's version, "MAJOR.MINOR.PATCH". */
TIER_API const char *tier_version(void);

/*
 * The features this build of the library has, as a short text
 * ("cuda=yes nccl=no mpi=yes fault_sites=yes").
 */
TIER_API const char *tier_build_features(void);

/* The library's version as one number (TIER_VERSION_NUMBER of its build). */
TIER_API unsigned tier_version_number(void);

/*
 * Whether this library serves a program built against the header of
 * version @major.@minor (pass TIER_VERSION_MAJOR, TIER_VERSION_MINOR, or
 * use TIER_VERSION_CHECK()).  0 when it does; -EPROTO when it does not,
 * with both versions in the detail.  Before 1.0 every minor version may
 * change the ABI, so the minor must be the library's; from 1.0 on, a
 * library serves its own major version up to its own minor.
 */
TIER_API int tier_version_check(unsigned major, unsigned minor);
#define TIER_VERSION_CHECK() tier_version_check(TIER_VERSION_MAJOR, TIER_VERSION_MINOR)

/* ---------------------------------------------------------------- errors */

/*
 * A description of @err, a negative (or positive) errno value.  The string
 * is static or thread-local; it stays valid until the next call on this
 * thread.  Never NULL.
 */
TIER_API const char *tier_strerror(int err);

/*
 * The detail message of the last failure on this thread, or "" when the
 * last call that can fail succeeded.  Several lines when a call found
 * several problems (a manifest with many errors), the first being the
 * first problem.  Valid until the next library call on this thread.
 */
TIER_API const char *tier_last_error(void);

/* --------------------------------------------------------------- options */

/*
 * Prints the options table: every option with its environment variable,
 * type, current value, where the value came from (default or environment)
 * and a description.  Returns 0 or -EIO.
 */
TIER_API int tier_options_print(FILE *out);

/* --------------------------------------------------------- parameter structs */

/*
 * Every struct tier_*_params (tier_store_params, tier_optim_params,
 * tier_group_params, tier_comm_params, tier_adam_params) begins with a size
 * field and has an init function, tier_*_params_init(&p), exported by the
 * library (the defaults live there alone; a binding calls it too): it sets
 * size to sizeof the struct as the caller was compiled with, and every
 * other field to its default; set what you need after it.  A NULL @p is
 * refused (nothing done; the detail names it).  A function that takes one
 * refuses a struct whose size it does not know (-EINVAL: not initialised,
 * or built against another version of this header), so the struct can
 * grow.  NULL, where a function allows it, takes the defaults.
 */

/* ------------------------------------------------------------ element types */

/*
 * Element types of optimizer state, gradients and parameter copies.
 * TIER_Q8 is a moment type only (8-bit codes with a float scale per block
 * of TIER_Q8_BLOCK elements, tierstore/kernels.h): never a gradient, a
 * parameter copy or a master copy.
 */
enum tier_dtype { TIER_FP32 = 0, TIER_BF16 = 1, TIER_FP16 = 2, TIER_Q8 = 3 };

/* Bytes per element of @d: 4, 2, or 1 (q8: the codes, without the block
 * scales); 0 for a value that is no dtype. */
TIER_API size_t tier_dtype_size(enum tier_dtype d);
/* "fp32", "bf16", "fp16" or "q8"; NULL for a value that is no dtype. */
TIER_API const char *tier_dtype_name(enum tier_dtype d);
/* The dtype named @name (as tier_dtype_name gives it): 0, or -EINVAL. */
TIER_API int tier_dtype_parse(const char *name, enum tier_dtype *out);

/*
 * How an fp32 result becomes a narrower type (docs/kernels.md,
 * "Rounding"): to nearest even, or stochastically, up or down with the
 * probabilities that make the expected result the fp32 value, from a
 * counter-based random stream keyed by (seed, step, element index), so
 * that the result is reproducible and the same on every kernel (scalar,
 * SIMD, CUDA) whatever the split of the tensor.
 */
enum tier_rounding {
	TIER_ROUND_NEAREST = 0,
	TIER_ROUND_STOCHASTIC = 1,
};

/* ---------------------------------------------------- latency histograms */

#define TIER_LAT_BUCKETS 256

/*
 * Latency histograms count operations by duration in TIER_LAT_BUCKETS
 * log-linear buckets: 128 ns wide below 1 us, then 8 per power of two, so
 * a bucket is at most 1/8 of its lower bound wide (the last bucket holds
 * everything from about 34 minutes up).  The bucket of @ns, a bucket's
 * upper bound in ns (UINT64_MAX for the last), and the @q quantile (0 < q
 * <= 1) of a histogram as the upper bound of the bucket it falls in (the
 * last bucket's lower bound if there; 0 for an empty histogram).
 */
TIER_API unsigned tier_lat_bucket(uint64_t ns);
TIER_API uint64_t tier_lat_bucket_upper_ns(unsigned bucket);
TIER_API uint64_t tier_lat_quantile_ns(const uint64_t hist[TIER_LAT_BUCKETS], double q);

/* ------------------------------------------------- the store's parameters */

/*
 * The tiered store (tierstore/tiers.h has its functions, tierstore.h
 * tier_store_open and tier_store_close): opaque.  Its levels, top down:
 * HBM (absent without a GPU tier), DRAM, NVMe (absent when DRAM is the
 * home).  TIER_LEVELS of them; the live view's level[] is indexed by them.
 */
struct tier_store;
enum tier_level { TIER_HBM = 0, TIER_DRAM = 1, TIER_NVME = 2 };
#define TIER_LEVELS 3

/* Eviction policies. */
enum tier_policy {
	/* Farthest next use in the registered schedule first (Belady's MIN on
	 * the known future); objects outside the schedule go first, least
	 * recently used first. */
	TIER_POLICY_BELADY = 0,
	/* Least recently used, ignoring the schedule. */
	TIER_POLICY_LRU = 1,
};

/* Flags for tier_store_params.flags. */
enum {
	/* Remove on close the NVMe backing files this open created. */
	TIER_STORE_SCRATCH = 1u << 0,
};

/*
 * Overrides of the manifest for one store (tier_store_open); zero (or
 * NULL) fields keep the manifest's value.  tier_store_params_init sets
 * every field so.
 */
struct tier_store_params {
	uint32_t size;            /* sizeof, set by tier_store_params_init */
	uint64_t dram_capacity;   /* bytes; 0 = the manifest's */
	/* HBM backend: NULL = "cuda" when the manifest has a GPU, else no HBM
	 * tier; "host" = emulated device in host memory; "null" = capacity
	 * without data (tests); "none" = no HBM tier. */
	const char *hbm_backend;
	uint64_t hbm_capacity;    /* bytes; 0 = the manifest's (required for host/null) */
	double hbm_bandwidth;     /* emulated link, bytes/s per direction; 0 = unlimited */
	enum tier_policy policy;
	unsigned flags;           /* TIER_STORE_* */
	/* Files that hold a committed store reopen at their newest commit
	 * that loads; a generation here (among the kept ones) reopens at it
	 * instead and drops the newer ones, durably (a roll back). */
	uint64_t generation;
};

/* Every field zero: the manifest's values, TIER_POLICY_BELADY. */
TIER_API void tier_store_params_init(struct tier_store_params *p);

/* ------------------------------------------------- the loss scaler's state */

/*
 * A dynamic loss scaler with Megatron's semantics (DynamicGradScaler):
 * on overflow the growth count resets and the hysteresis count drops by
 * one; when it reaches 0 the scale is multiplied by backoff (not below
 * min_scale).  After growth_interval clean steps in a row the scale is
 * multiplied by growth and the hysteresis count is reset.  The optimizer
 * keeps one (tier_optim_get_scaler, tier_optim_set_scaler in
 * tierstore.h); tierstore/kernels.h has the functions that run one.
 */
struct tier_loss_scaler {
	double scale, min_scale, growth_factor, backoff_factor;
	uint32_t growth_interval, hysteresis;
	uint32_t growth_tracker;
	int32_t hysteresis_tracker;
};

#ifdef __cplusplus
}
#endif

#endif /* TIERSTORE_COMMON_H */
