/*
 * tierstore.h - the one public header of libtierstore.
 *
 * tierstore keeps optimizer state in three tiers: GPU memory (HBM) caches
 * pinned host memory (DRAM), which caches NVMe files driven by io_uring.  A
 * node is described by a YAML tier manifest (docs/manifest.md).
 *
 * Conventions (docs/api.md):
 *  - Every int-returning function returns 0 on success or a negative errno
 *    (-EINVAL, -ENOMEM, -ENOENT, ...).  Nothing sets errno.
 *  - After a failure, tier_last_error() returns a thread-local detail message
 *    naming what failed and where ("laptop.yaml:7:3: unknown key ...").
 *  - Objects are returned through out-parameters, never as the only error
 *    signal.  Names are tier_<object>_<verb>; no CUDA or liburing type appears
 *    here, and the header is valid C17 and C++.
 */
#ifndef TIERSTORE_H
#define TIERSTORE_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__)
#define TIER_API __attribute__((visibility("default")))
#else
#define TIER_API
#endif

#define TIER_VERSION_MAJOR 0
#define TIER_VERSION_MINOR 1
#define TIER_VERSION_PATCH 0

/* The library's version, "MAJOR.MINOR.PATCH". */
TIER_API const char *tier_version(void);

/*
 * The features this build of the library has, as a short text
 * ("cuda=yes nccl=no fault_sites=yes").
 */
TIER_API const char *tier_build_features(void);

/* --------------------------------------------------------------- devices */

/*
 * Number of CUDA devices this process can use.  0 (and *count 0) on a
 * machine without a GPU or driver, or in a build without CUDA; @why, when
 * not NULL, then receives the reason.  Returns 0 or -errno.
 */
TIER_API int tier_gpu_count(int *count, char *why, size_t whylen);

/*
 * Runs a kernel on CUDA device @index that fills 4 MiB of device memory,
 * copies it back on a stream and checks every word.  Returns 0, -ENODEV
 * (no such device, or no CUDA in this build), -ENOMEM or -EIO.
 */
TIER_API int tier_gpu_selftest(int index);

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

/* -------------------------------------------------------------- manifest */

/*
 * A tier manifest, parsed, validated against this machine and with every
 * default resolved (detected GPU, NUMA node, sizes in bytes).  Opaque.
 */
struct tier_manifest;

/* Flags for tier_manifest_load_flags() and tier_manifest_parse(). */
enum {
	/*
	 * Check the document against the schema only: touch no file
	 * system, GPU or /proc.  Machine-dependent values (percentages,
	 * "auto") are resolved against fixed nominal machine facts.
	 */
	TIER_MANIFEST_NO_PROBE = 1u << 0,
};

/*
 * Reads and validates the manifest at @path.
 *
 * @return 0 and *@out set, or -ENOENT/-EACCES/-EIO when the file cannot be
 *   read, -EINVAL when it is not a valid manifest for this machine, -ENOMEM.
 *   Every problem found is in tier_last_error(), one per line, each as
 *   "FILE:LINE:COL: message".
 */
TIER_API int tier_manifest_load(const char *path, struct tier_manifest **out);

/* tier_manifest_load() with TIER_MANIFEST_* @flags. */
TIER_API int tier_manifest_load_flags(const char *path, unsigned flags,
				      struct tier_manifest **out);

/*
 * Parses a manifest held in memory.  @name is used in messages in place of
 * a file name.  @text need not be NUL-terminated.
 */
TIER_API int tier_manifest_parse(const char *text, size_t len,
				 const char *name, unsigned flags,
				 struct tier_manifest **out);

/*
 * The embedded default manifest for this machine: no GPU tier unless a GPU
 * is present, DRAM a modest share of MemAvailable, one NVMe file under
 * $TIER_DATA (or ./tier-data/) sized from the free space there.
 */
TIER_API int tier_manifest_default(struct tier_manifest **out);

/*
 * The YAML text of the embedded default for this machine, before
 * validation.  Caller frees with free().  Returns 0, -ENOMEM or -EIO.
 */
TIER_API int tier_manifest_default_text(char **out);

/*
 * Writes the effective configuration as YAML: every key present, every
 * default resolved, sizes in bytes.  The output is itself a valid manifest.
 * Returns 0 or -EIO.
 */
TIER_API int tier_manifest_emit(const struct tier_manifest *m, FILE *out);

/* The file name the manifest came from ("<default>" for the default). */
TIER_API const char *tier_manifest_source(const struct tier_manifest *m);

TIER_API void tier_manifest_free(struct tier_manifest *m);

#ifdef __cplusplus
}
#endif

#endif /* TIERSTORE_H */
