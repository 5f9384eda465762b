/*
 * tierstore/common.h - the base of the public API: the version, errors,
 * options, element types, the thread pool, tickets, latency histograms and
 * the convention of parameter structs.  Part of tierstore.h: include that.
 * It is implemented in common/, the bottom layer of the library, which of
 * the public headers may include this one alone.
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

#define TIER_VERSION_MAJOR 0
#define TIER_VERSION_MINOR 8
#define TIER_VERSION_PATCH 0
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
 * tier_adam_params) begins with a size field and has an init function,
 * tier_*_params_init(&p): it sets size to sizeof the struct as the caller
 * was compiled with, and every other field to its default; set what you
 * need after it.  A function that takes one refuses a struct whose size it
 * does not know (-EINVAL: not initialised, or built against another
 * version of this header), so the struct can grow.  NULL, where a function
 * allows it, takes the defaults.
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

/* ------------------------------------------------------------ thread pool */

/*
 * The persistent thread pool the CPU kernels split their work over: @n
 * threads in all, the caller included (0 = TIER_THREADS, or one per
 * online CPU, at most TIER_POOL_MAX_THREADS).  0, -EINVAL (@n above
 * TIER_POOL_MAX_THREADS, named in the detail), -ENOMEM or the error of
 * thread creation.
 */
#define TIER_POOL_MAX_THREADS 1024u /* as TIER_THREADS */
struct tier_pool;
TIER_API int tier_pool_create(unsigned n, struct tier_pool **out);
TIER_API void tier_pool_destroy(struct tier_pool *pool);
TIER_API unsigned tier_pool_size(const struct tier_pool *pool);

/* ---------------------------------------------------------------- tickets */

/* A request to wait for, in place of a callback. */
struct tier_ticket;

/*
 * Waits for the request, frees the ticket and returns its result; on
 * failure tier_last_error() has its detail.
 */
TIER_API int tier_ticket_wait(struct tier_ticket *tk);

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

#ifdef __cplusplus
}
#endif

#endif /* TIERSTORE_COMMON_H */
