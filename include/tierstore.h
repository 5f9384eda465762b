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

#include <stdbool.h>
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

/* ------------------------------------------------------------ the store */

/*
 * The tiered store: HBM (a CUDA device, or an emulated one) as a cache over
 * pinned DRAM, a cache over the NVMe tier, which is every object's home
 * (DRAM is the home when the manifest has no NVMe paths).  The hierarchy
 * is inclusive: an object resident in HBM also holds a DRAM slot.  An
 * object is a named, fixed-size byte range; on each tier above its home it
 * is absent, filling, clean, dirty or flushing, and pins keep it in place
 * while in use.  docs/store.md describes the state machine, the eviction
 * policy and the guarantees.  Every function is thread-safe.
 */
struct tier_store;
struct tier_obj;

/* Tier levels, top down. */
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
 * Overrides of the manifest for one store; zero (or NULL) fields keep the
 * manifest's value.  Zero-initialise and set what you need.
 */
struct tier_store_params {
	uint64_t dram_capacity;   /* bytes; 0 = the manifest's */
	/* HBM backend: NULL = "cuda" when the manifest has a GPU, else no HBM
	 * tier; "host" = emulated device in host memory; "null" = capacity
	 * without data (tests); "none" = no HBM tier. */
	const char *hbm_backend;
	uint64_t hbm_capacity;    /* bytes; 0 = the manifest's (required for host/null) */
	double hbm_bandwidth;     /* emulated link, bytes/s per direction; 0 = unlimited */
	enum tier_policy policy;
	unsigned flags;           /* TIER_STORE_* */
};

/*
 * Opens a store over the manifest's tiers (@p may be NULL).  Returns 0,
 * -EINVAL (bad parameters, named in the detail), -ENOMEM, -ENODEV (an HBM
 * backend that is not there) or the NVMe tier's errors.
 */
TIER_API int tier_store_open(const struct tier_manifest *m, const struct tier_store_params *p,
			     struct tier_store **out);

/*
 * Writes every dirty byte down to its home, then frees everything.  An
 * object still pinned is a caller bug: it is reported (-EBUSY) and its
 * data flushed as it stands.  Returns 0 or the first error met.
 */
TIER_API int tier_store_close(struct tier_store *s);

/* Whether the store has the level (HBM may be absent). */
TIER_API bool tier_store_has_level(const struct tier_store *s, enum tier_level level);

/* The lowest level: TIER_NVME, or TIER_DRAM without NVMe paths. */
TIER_API enum tier_level tier_store_home(const struct tier_store *s);

/*
 * Creates an object of @size bytes, reading as zeros until written.  Its
 * home space is reserved now.  0, -EEXIST (name taken), -ENOSPC (no room
 * at home; the detail says how much is free), -EINVAL, -ENOMEM.
 */
TIER_API int tier_obj_create(struct tier_store *s, const char *name, uint64_t size,
			     struct tier_obj **out);

/* The object named @name, or NULL. */
TIER_API struct tier_obj *tier_obj_find(struct tier_store *s, const char *name);

/* Waits for the object's transfers, then frees it on every tier.  -EBUSY
 * when it is pinned. */
TIER_API int tier_obj_destroy(struct tier_store *s, struct tier_obj *o);

TIER_API uint64_t tier_obj_size(const struct tier_obj *o);
TIER_API const char *tier_obj_name(const struct tier_obj *o);

/* Acquire modes. */
enum {
	TIER_ACQUIRE_READ = 1u << 0,
	TIER_ACQUIRE_WRITE = 1u << 1,      /* the caller may change the bytes */
	/* With TIER_ACQUIRE_WRITE: the caller overwrites every byte, so the current
	 * contents need not be brought up (no fill). */
	TIER_ACQUIRE_DISCARD = 1u << 2,
};

/*
 * Makes the object resident on @level and pins it there; *ptr is its
 * bytes on that level (host memory for DRAM, device memory for HBM; NULL
 * on the null backend), valid until tier_obj_release.  Brings it up from the
 * tier that holds its current bytes, making room by eviction.
 *
 * A write pin excludes pins on other levels: acquiring for write while the
 * object is pinned on another level, or on any level while it is pinned
 * for write on another, fails with -EBUSY (never waits: the other pin may
 * be the caller's own).  Several pins on one level share the bytes; the
 * callers order their accesses.
 *
 * Returns 0; -ENOMEM when every slot the level could free is pinned (the
 * detail says how many objects and bytes); -E2BIG when the object is
 * larger than the level; -ENODEV when the store has no such level; the
 * error of a fill or of an eviction's write-back (the object and every
 * acknowledged byte stay valid on the tier below).
 */
TIER_API int tier_obj_acquire(struct tier_store *s, struct tier_obj *o, enum tier_level level,
			  unsigned mode, void **ptr);

/*
 * The asynchronous form: queues the acquire and returns at once; *ptr is
 * set before the ticket completes, and tier_ticket_wait() gives what
 * tier_obj_acquire would have returned.  On a non-zero return there is no
 * ticket.
 */
TIER_API int tier_obj_acquire_async(struct tier_store *s, struct tier_obj *o, enum tier_level level,
				unsigned mode, void **ptr, struct tier_ticket **tk);

/*
 * Drops a pin taken on @level.  @dirty marks the bytes changed (only for a
 * write pin: -EINVAL otherwise); they go down to the home when evicted or
 * flushed, never dropped.  -EINVAL when there is no such pin.
 */
TIER_API int tier_obj_release(struct tier_store *s, struct tier_obj *o, enum tier_level level,
			  bool dirty);

/*
 * Starts bringing the object up to @level without pinning it, and returns
 * at once.  Skipped quietly when the level has no room that the policy
 * would give (every candidate is needed sooner).  0, or -ENODEV / -E2BIG.
 */
TIER_API int tier_obj_prefetch(struct tier_store *s, struct tier_obj *o, enum tier_level level);

/* Copies bytes [off, off + len) from or into a host buffer, through DRAM. */
TIER_API int tier_obj_write(struct tier_store *s, struct tier_obj *o, uint64_t off, uint64_t len,
			    const void *buf);
TIER_API int tier_obj_read(struct tier_store *s, struct tier_obj *o, uint64_t off, uint64_t len,
			   void *buf);

/*
 * Writes the object's dirty bytes down to its home and waits.  -EBUSY when
 * it is pinned for write.
 */
TIER_API int tier_obj_flush(struct tier_store *s, struct tier_obj *o);

/*
 * Writes every dirty byte down to the home and waits.  Objects pinned for
 * write are skipped and reported (-EBUSY) after the rest is flushed.
 * Returns 0 or the first error.
 */
TIER_API int tier_store_flush(struct tier_store *s);

/*
 * Registers the cyclic order in which objects are used (each step uses
 * @objs[0], @objs[1], ... then starts over; an object may appear more than
 * once).  Eviction uses it to keep the objects needed soonest.  Acquiring
 * a scheduled object advances the store's position in the schedule to that
 * object's next occurrence.  n = 0 clears it.  0, -EINVAL, -ENOMEM.
 */
TIER_API int tier_store_set_schedule(struct tier_store *s, struct tier_obj *const *objs,
				     size_t n);

/*
 * Checks the store's invariants: bytes per level add up to the slot
 * allocator's and stay within capacity; pinned objects are resident;
 * inclusion (resident on HBM implies a DRAM slot); dirty bytes only on
 * levels above the home and only after a write pin; allocators consistent.
 * 0, or -EUCLEAN with the first violation in the detail.
 */
TIER_API int tier_store_validate(struct tier_store *s);

/* Counters of one level since open. */
struct tier_level_stats {
	bool present;
	char backend[16];         /* "dram", "host", "cuda", "null", "nvme" */
	uint64_t capacity;        /* bytes */
	uint64_t used;            /* bytes in slots (resident or being filled) */
	uint64_t pinned;          /* bytes of pinned objects */
	uint64_t dirty;           /* bytes newer than the tier below */
	uint64_t objects;         /* objects resident (or filling) */
	uint64_t hits;            /* acquires that found the object resident */
	uint64_t misses;          /* acquires that had to fill it */
	uint64_t evictions;
	uint64_t writebacks;      /* flushes of dirty bytes to the tier below */
	uint64_t bytes_in;        /* filled from below */
	uint64_t bytes_out;       /* written back below */
	uint64_t prefetches;      /* fills started by tier_obj_prefetch */
	uint64_t prefetch_skipped;
	uint64_t errors;          /* failed fills and write-backs */
	uint64_t largest_free;    /* the largest slot one object could get */
	double fragmentation;     /* 1 - largest_free / free */
	/* DRAM arena only */
	bool huge_pages, thp, locked, numa_bound, cuda_registered;
	int numa_node;
};

struct tier_store_stats {
	struct tier_level_stats level[TIER_LEVELS];
	uint64_t objects;         /* created */
	enum tier_policy policy;
	uint64_t schedule_len;
};

TIER_API void tier_store_get_stats(struct tier_store *s, struct tier_store_stats *out);

/* The NVMe tier under the store (NULL without one), for its counters. */
TIER_API struct tier_nvme *tier_store_nvme(struct tier_store *s);

/* Names for messages: "hbm", "dram", "nvme". */
TIER_API const char *tier_level_name(enum tier_level level);

/* ------------------------------------------------------------ kernels */

/* Element types of optimizer state, gradients and parameter copies. */
enum tier_dtype { TIER_FP32 = 0, TIER_BF16 = 1, TIER_FP16 = 2 };

/*
 * The persistent thread pool the CPU kernels split their work over: @n
 * threads in all, the caller included (0 = TIER_THREADS, or one per
 * online CPU).  0, -ENOMEM or the error of thread creation.
 */
struct tier_pool;
TIER_API int tier_pool_create(unsigned n, struct tier_pool **out);
TIER_API void tier_pool_destroy(struct tier_pool *pool);
TIER_API unsigned tier_pool_size(const struct tier_pool *pool);

/*
 * One step's hyperparameters, with the semantics of torch.optim.AdamW
 * (decoupled = true) and torch.optim.Adam (decoupled = false: the weight
 * decay is an L2 term added to the gradient).  docs/kernels.md gives the
 * formula.
 */
struct tier_adam_params {
	double lr, beta1, beta2, eps, weight_decay;
	bool decoupled;
	uint64_t step;            /* 1 for the first step (bias correction) */
	double grad_scale;        /* multiplies every gradient: clip_coef / loss_scale */
};

/*
 * The arrays of one update, all of @n elements: fp32 master parameters,
 * moments in @moment_dtype (FP32 or BF16, rounded to nearest even), the
 * gradient in @grad_dtype (any), and an optional copy of the updated
 * parameters (@param_out, NULL for none) in @out_dtype.  Updated in place,
 * in one pass over memory.  Any alignment.
 */
struct tier_adam_tensors {
	size_t n;
	float *param;
	void *exp_avg, *exp_avg_sq;
	enum tier_dtype moment_dtype;
	const void *grad;
	enum tier_dtype grad_dtype;
	void *param_out;
	enum tier_dtype out_dtype;
};

/*
 * The CPU Adam/AdamW update over @t, split into cache-sized tiles over
 * @pool (NULL: the calling thread alone), with the best SIMD version this
 * CPU has (TIER_SIMD may force one).  0 or -EINVAL (a dtype not allowed
 * for that array, a NULL array with n > 0, non-finite hyperparameters).
 */
TIER_API int tier_adam_step(struct tier_pool *pool, const struct tier_adam_params *p,
			    const struct tier_adam_tensors *t);

/*
 * The roofline of tier_adam_step: reads and writes exactly the bytes the
 * update does for @t (same tiles, same SIMD width), with trivial
 * arithmetic, so step time / roofline time is the update's distance from
 * the memory bound.  It changes the arrays' contents.
 */
TIER_API int tier_adam_roofline(struct tier_pool *pool, const struct tier_adam_tensors *t);

/* The SIMD version tier_adam_step uses: "scalar", "avx2" or "avx512". */
TIER_API const char *tier_adam_isa(void);

/*
 * Gradient checks, one pass: adds the squares of @n elements of @grad
 * (accumulated in double) to @sumsq and sets @nonfinite when any element
 * is inf or nan.  Call once per tensor; the global norm is sqrt(sumsq).
 */
struct tier_grad_stats {
	double sumsq;
	bool nonfinite;
};
TIER_API int tier_grad_check(struct tier_pool *pool, const void *grad, enum tier_dtype dtype,
			     size_t n, struct tier_grad_stats *acc);

/* Clipping by total norm: max_norm / (norm + 1e-6) when that is below 1,
 * else 1 (torch.nn.utils.clip_grad_norm_). */
TIER_API double tier_clip_coef(double total_norm, double max_norm);

/*
 * A dynamic loss scaler with Megatron's semantics (DynamicGradScaler):
 * on overflow the growth count resets and the hysteresis count drops by
 * one; when it reaches 0 the scale is multiplied by backoff (not below
 * min_scale).  After growth_interval clean steps in a row the scale is
 * multiplied by growth and the hysteresis count is reset.
 */
struct tier_loss_scaler {
	double scale, min_scale, growth_factor, backoff_factor;
	uint32_t growth_interval, hysteresis;
	uint32_t growth_tracker;
	int32_t hysteresis_tracker;
};
/* 0, or -EINVAL naming the bad parameter. */
TIER_API int tier_loss_scaler_init(struct tier_loss_scaler *s, double initial_scale,
				   double min_scale, double growth_factor, double backoff_factor,
				   uint32_t growth_interval, uint32_t hysteresis);
/* Feeds one step's overflow flag; returns true when that step must be
 * skipped (it overflowed). */
TIER_API bool tier_loss_scaler_update(struct tier_loss_scaler *s, bool found_inf);

/* ------------------------------------------------------------ optimizer */

/*
 * The optimizer: Adam/AdamW over parameters whose state (fp32 master
 * weights and both moments) lives on a store, cut into shards of the
 * manifest's optimizer.shard_size, one store object per shard.  Each step
 * streams the shards up the tiers ahead of the update (a lookahead window
 * of prefetch.lookahead bytes), updates a share of them on the CPU (SIMD
 * kernels on DRAM, over a thread pool) and the rest on the HBM tier (the
 * CUDA kernel; with the emulated "host" HBM backend, the CPU kernel on the
 * HBM tier's own thread), and writes the updated state back down behind
 * the update.  The order of the shards alternates every step, and the
 * store evicts by it.  The results equal tier_adam_step() run in memory on
 * the same data, bit for bit, whatever the split.  docs/optimizer.md says
 * more.  One thread drives an optimizer at a time.
 */
struct tier_optim;

/* Where a caller's buffer lives. */
enum tier_mem {
	TIER_MEM_HOST = 0,     /* host memory */
	TIER_MEM_DEVICE = 1,   /* memory of the HBM tier's device (the emulated
				* "host" backend's device memory is host memory) */
};

/* A caller's array: gradients in, updated parameters out. */
struct tier_tensor {
	void *ptr;             /* NULL: none (for an output) */
	enum tier_dtype dtype;
	enum tier_mem mem;
};

/* offload_fraction: chosen by measuring (see tier_optim_params). */
#define TIER_OFFLOAD_AUTO (-1.0)

struct tier_optim_params {
	/* torch.optim.AdamW (decoupled = true) / Adam (false) semantics */
	double lr, beta1, beta2, eps, weight_decay;
	bool decoupled;
	/* moments: TIER_FP32 or TIER_BF16; -1 = the manifest's */
	int moment_dtype;
	/* share of the shards updated on the CPU, in [0, 1] (the rest on the
	 * HBM tier; 1 without one); TIER_OFFLOAD_AUTO measures both rates in
	 * the first steps and picks the split that minimises step time; NAN =
	 * the manifest's optimizer.offload_fraction */
	double offload_fraction;
	/* clipping by total norm (of the unscaled gradients); 0 = none */
	double max_grad_norm;
	/* loss scaling: gradients arrive multiplied by the scale.  dynamic:
	 * Megatron's DynamicGradScaler with these parameters (a step with an
	 * inf or nan gradient is skipped); static: the scale stays. */
	double loss_scale;     /* the (initial) scale; 1 = none */
	bool dynamic_loss_scale;
	double min_loss_scale, growth_factor, backoff_factor;
	uint32_t growth_interval, hysteresis;
	uint64_t shard_size;   /* bytes of state per shard; 0 = the manifest's */
	unsigned threads;      /* CPU update threads; 0 = TIER_THREADS / one per CPU */
};

/* torch's AdamW defaults (lr 1e-3, betas 0.9/0.999, eps 1e-8, weight decay
 * 0.01), no clipping, no loss scaling, Megatron's scaler defaults (initial
 * 2^32, min 1, growth 2, backoff 0.5, interval 1000, hysteresis 2) for when
 * dynamic_loss_scale is set, the manifest's dtype, split and shard size. */
TIER_API void tier_optim_params_init(struct tier_optim_params *p);

/* An optimizer on @s (which must outlive it); @p NULL takes the defaults
 * of tier_optim_params_init.  0, -EINVAL naming the bad
 * parameter, -ENOMEM, or a thread's creation error. */
TIER_API int tier_optim_create(struct tier_store *s, const struct tier_optim_params *p,
			       struct tier_optim **out);

/*
 * Adds a parameter of @numel elements named @name (its shards are the
 * store objects "NAME#K"), initial master values @init (fp32, host; NULL:
 * zeros), moments zero.  *id (may be NULL) gets its index: 0, 1, ... in
 * the order of adding.  0, -EEXIST, -EINVAL, -ENOSPC (no room at the
 * store's home), -EBUSY (inside a step), -ENOMEM.
 */
TIER_API int tier_optim_add_param(struct tier_optim *o, const char *name, size_t numel,
				  const float *init, uint32_t *id);

TIER_API uint32_t tier_optim_nparams(const struct tier_optim *o);
/* The parameter's name and element count; NULL / 0 for a bad id. */
TIER_API const char *tier_optim_param_name(const struct tier_optim *o, uint32_t id);
TIER_API size_t tier_optim_param_numel(const struct tier_optim *o, uint32_t id);

/* What one step did. */
struct tier_step_result {
	bool applied;          /* false: skipped (an inf or nan gradient) */
	uint64_t step;         /* steps applied so far (the bias-correction count) */
	double grad_norm;      /* total L2 norm of the unscaled gradients */
	double loss_scale;     /* the scale the step's gradients carried */
	double next_loss_scale;/* the scale for the next step */
	double clip_coef;      /* 1 when not clipped */
	double cpu_fraction;   /* share of the shards updated on the CPU */
	uint32_t cpu_shards, gpu_shards;
	double step_s;         /* begin to end, seconds */
	/* time the update waited for state to arrive: per lane, and the
	 * larger of the two (at most step_s) */
	double stall_s, cpu_stall_s, gpu_stall_s;
	uint64_t nvme_read_bytes, nvme_write_bytes; /* during the step */
	uint64_t h2d_bytes, d2h_bytes;
	/* the same over step_s: bytes per second achieved on each link */
	double nvme_read_Bps, nvme_write_Bps, h2d_Bps, d2h_Bps;
};

/*
 * One step with every gradient at hand: @grads[i] is parameter i's
 * gradient (numel elements of its dtype, host or device), @outs (NULL, or
 * one per parameter with ptr NULL for none) receive the updated parameters
 * in their dtype.  @lr > 0 sets the learning rate from this step on.  The
 * same as tier_optim_begin, a push per parameter, tier_optim_end.
 */
TIER_API int tier_optim_step(struct tier_optim *o, double lr, const struct tier_tensor *grads,
			     const struct tier_tensor *outs, struct tier_step_result *res);

/*
 * The streaming form.  begin starts the step: the state of the first
 * shards starts moving up at once.  push hands one parameter's gradient
 * (and its output buffer, or NULL) as backward produces it, in any order;
 * its norm is taken at once, and the buffers must stay valid until end.
 * end waits for the global norm (clipping, loss scaling), runs the
 * update of every shard as its state arrives, and returns when every
 * update is done and its write-back is under way.
 *
 * Errors leave the state untouched: push -EINVAL (bad id, dtype or
 * buffer; no step begun), -EALREADY (the parameter was pushed this step);
 * end -ENODATA when a parameter was not pushed (named in the detail): the
 * step is abandoned and nothing is updated.  An error of the tiers in the
 * middle of end (a failed read) returns it; the shards already updated
 * stay updated and are reported in the detail.
 */
TIER_API int tier_optim_begin(struct tier_optim *o, double lr);
TIER_API int tier_optim_push(struct tier_optim *o, uint32_t id, const struct tier_tensor *grad,
			     const struct tier_tensor *out);
TIER_API int tier_optim_end(struct tier_optim *o, struct tier_step_result *res);

/*
 * Reads parameter @id's state back into host buffers (any may be NULL):
 * master weights (fp32) and the moments in the optimizer's moment dtype.
 */
TIER_API int tier_optim_read(struct tier_optim *o, uint32_t id, float *master, void *exp_avg,
			     void *exp_avg_sq);

/* The moment dtype, and the current CPU share of the split. */
TIER_API enum tier_dtype tier_optim_moment_dtype(const struct tier_optim *o);
TIER_API double tier_optim_cpu_fraction(const struct tier_optim *o);

/* Waits for every write-back, writes the trace (TIER_TRACE) and frees the
 * optimizer and its state objects.  Returns 0 or the first error. */
TIER_API int tier_optim_destroy(struct tier_optim *o);

/* ------------------------------------------------------------ the live view */

/* The stats segments of open stores and their readers: tierstore/live.h. */
#include "tierstore/live.h"

#ifdef __cplusplus
}
#endif

#endif /* TIERSTORE_H */
