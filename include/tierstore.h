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
 * The manifest a tool uses: @path when given (not NULL or ""), else
 * $TIER_MANIFEST (the options table), else the embedded default.  Same
 * returns as tier_manifest_load().
 */
TIER_API int tier_manifest_resolve(const char *path, struct tier_manifest **out);

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


/* ------------------------------------------------------------ NVMe tier */

/*
 * The NVMe tier: one preallocated backing file per manifest path, each
 * with its own io_uring, and objects striped over them in stripe units.
 * It is the home of every object; docs/nvme.md describes it and
 * docs/nvme-format.md the files.  Thread-safe: any thread may submit.
 */
struct tier_nvme;
struct tier_nvme_obj;

/* Flags for tier_nvme_open(). */
enum {
	/* Remove on close the backing files this open created (benchmarks,
	 * tests); files that existed before are kept. */
	TIER_NVME_SCRATCH = 1u << 0,
};

/*
 * Opens the NVMe tier the manifest describes: creates or reuses each
 * backing file (mode 0600, preallocated to its capacity, O_DIRECT unless
 * the path says direct: false), writes its header, sets up one ring per
 * path.  A file that exists but is not a tierstore backing file is never
 * overwritten (-EEXIST).  Returns 0, -ENODEV (the manifest has no NVMe
 * paths), -ENOSPC, -EEXIST, -EINVAL (O_DIRECT refused), -ENOMEM or the
 * error of the failing system call, with the path in the detail.
 */
TIER_API int tier_nvme_open(const struct tier_manifest *m, unsigned flags,
			    struct tier_nvme **out);

/*
 * Waits for every submitted request to complete (their callbacks run),
 * then closes the rings and files.  Returns 0 or the first error met
 * while closing.  Objects still allocated are freed.
 */
TIER_API int tier_nvme_close(struct tier_nvme *t);

/*
 * Registers [base, base + len) with every ring as a fixed buffer, so
 * requests whose buffer lies inside it need no page pinning per I/O.  No
 * request may be in flight (-EBUSY).  len at most 1 GiB.  When the kernel
 * refuses (RLIMIT_MEMLOCK), says so once and returns 0: requests then use
 * ordinary buffers.
 */
TIER_API int tier_nvme_register_buffer(struct tier_nvme *t, void *base, size_t len);

/*
 * Places an object of @size bytes: its stripe units round-robin over the
 * paths, in one extent per path.  Returns 0, -EEXIST (name taken),
 * -ENOSPC (no extent large enough on some path; the detail says which and
 * how much is free), -EINVAL, -ENOMEM.
 */
TIER_API int tier_nvme_obj_create(struct tier_nvme *t, const char *name, uint64_t size,
				  struct tier_nvme_obj **out);

/* Frees the object's extents.  No request on it may be in flight (-EBUSY). */
TIER_API int tier_nvme_obj_destroy(struct tier_nvme *t, struct tier_nvme_obj *o);

TIER_API uint64_t tier_nvme_obj_size(const struct tier_nvme_obj *o);
TIER_API const char *tier_nvme_obj_name(const struct tier_nvme_obj *o);

enum tier_io_op { TIER_IO_READ = 0, TIER_IO_WRITE = 1 };

/*
 * Called once per request with 0 or a negative errno, and, on failure, a
 * detail naming the object, path and offset ("nvme0 (/mnt/a/x.dat): read
 * of 'layer.3' at 1048576 (file offset 5242880): Input/output error").
 * Runs on a completion thread: it must not block for long.  It may submit
 * more requests.
 */
typedef void (*tier_io_cb)(void *arg, int result, const char *detail);

/*
 * Submits a read into, or a write from, @buf of bytes [off, off + len) of
 * object @o.  Any offset, length and buffer alignment work: whole stripe
 * units on block-aligned buffers go straight to the device, the rest
 * through a bounce buffer.  With checksums on, a write computes each
 * stripe unit's crc32c and a read verifies it (-EBADMSG on a mismatch).
 * Requests on one object must not overlap a stripe unit that a write in
 * flight covers.  Returns 0 when queued: @cb will be called exactly once
 * (with -ENOMEM too, if memory for a later part ran out).  Or returns
 * -EINVAL (range outside the object), -ESHUTDOWN (closing) or -ENOMEM (no
 * memory for the request itself): then @cb is not called.
 */
TIER_API int tier_nvme_submit(struct tier_nvme *t, struct tier_nvme_obj *o,
			      enum tier_io_op op, uint64_t off, uint64_t len, void *buf,
			      tier_io_cb cb, void *arg);

/* A request to wait for, in place of a callback. */
struct tier_ticket;

TIER_API int tier_nvme_submit_ticket(struct tier_nvme *t, struct tier_nvme_obj *o,
				     enum tier_io_op op, uint64_t off, uint64_t len, void *buf,
				     struct tier_ticket **out);

/*
 * Waits for the request, frees the ticket and returns its result; on
 * failure tier_last_error() has its detail.
 */
TIER_API int tier_ticket_wait(struct tier_ticket *tk);

/* Synchronous forms: submit and wait. */
TIER_API int tier_nvme_read(struct tier_nvme *t, struct tier_nvme_obj *o, uint64_t off,
			    uint64_t len, void *buf);
TIER_API int tier_nvme_write(struct tier_nvme *t, struct tier_nvme_obj *o, uint64_t off,
			     uint64_t len, const void *buf);

/* Counters of the NVMe tier since open. */
struct tier_nvme_stats {
	uint64_t capacity;        /* data bytes over all paths */
	uint64_t free;            /* of which not allocated */
	uint64_t bytes_read;      /* bytes transferred from the devices */
	uint64_t bytes_written;
	uint64_t requests;        /* caller requests completed */
	uint64_t ios;             /* device operations completed */
	uint64_t errors;          /* requests failed */
	uint64_t csum_errors;     /* stripe units that failed verification */
	uint64_t short_ios;       /* short transfers resubmitted */
	uint64_t retries;         /* -EAGAIN / -EINTR resubmissions */
	uint64_t bounced;         /* device operations through a bounce buffer */
	uint32_t npaths;
	uint32_t stripe_unit;
};

TIER_API void tier_nvme_get_stats(const struct tier_nvme *t, struct tier_nvme_stats *out);

#ifdef __cplusplus
}
#endif

#endif /* TIERSTORE_H */
