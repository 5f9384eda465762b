/*
 * tierstore/tiers.h - the tiers of the public API: the NVMe tier and the
 * tiered store (objects, residency, pins, eviction, counters).  Part of
 * the toolkit (what tier-bench and a program that drives the tiers itself
 * use; a trainer's optimizer drives them for it): include
 * tierstore/toolkit.h.  Opening either from a manifest is there
 * (tier_nvme_open) and in tierstore.h (tier_store_open, tier_store_close);
 * the store's parameters, levels and policies are in tierstore/common.h,
 * for tierstore.h.  Implemented in tiers/, which of the public headers may
 * include this one and those of the layers below (tierstore/common.h,
 * tierstore/kernels.h).
 */
#ifndef TIERSTORE_TIERS_H
#define TIERSTORE_TIERS_H

#include "tierstore/common.h"
#include "tierstore/pool.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------ NVMe tier */

/*
 * The NVMe tier: one backing file per manifest path, each with its own
 * io_uring, and objects striped over them in stripe units.  It is the home
 * of every object; docs/nvme.md describes it and docs/nvme-format.md the
 * files.  A backing file grows as objects are placed, up to the path's
 * capacity, and is held by one store at a time (a second open of it fails
 * with -EBUSY naming the holder's process).  Thread-safe: any thread may
 * submit.
 */
struct tier_nvme;
struct tier_nvme_obj;

/* Flags for tier_nvme_open() (tierstore/toolkit.h). */
enum {
	/* Remove on close the backing files this open created (benchmarks,
	 * tests); files that existed before are kept. */
	TIER_NVME_SCRATCH = 1u << 0,
};

/* What is at a backing file's path (tier_nvme_file_probe). */
enum tier_nvme_file_state {
	TIER_NVME_FILE_ABSENT = 0,  /* nothing: an open creates the file */
	TIER_NVME_FILE_CLEAN,       /* ours, closed cleanly: an open reuses it */
	TIER_NVME_FILE_IN_USE,      /* ours, held by a running store (holder_pid) */
	TIER_NVME_FILE_STALE,       /* ours, left by a store that did not close
				     * cleanly: an open reclaims it */
};

struct tier_nvme_file_info {
	enum tier_nvme_file_state state;
	long holder_pid;          /* IN_USE: the process holding it (-1: not visible
				   * from here) */
	long owner_pid;           /* the process that last wrote its header (0: unknown) */
	bool scratch;             /* made by a scratch store, which removes it at close */
	char store_name[65];      /* the store that wrote it */
	uint64_t disk_bytes;      /* bytes it takes on disk */
	uint64_t created_ns, closed_ns;  /* CLOCK_REALTIME; closed_ns 0 if never */
};

/*
 * Looks at the backing file @file without changing or locking it: what
 * an open would do with it.  0 with *@out filled, or what an open would
 * refuse it with, and the detail naming @file: -ELOOP (a symbolic link),
 * -EISDIR or -EINVAL (a directory, device, FIFO, socket), -EEXIST (a file
 * that is not a tierstore backing file, or empty), -EPROTO (another format
 * version), or -errno.
 */
TIER_API int tier_nvme_file_probe(const char *file, struct tier_nvme_file_info *out);

/*
 * Removes @file if it is a stale backing file (STALE above) that a
 * scratch store made, holding its lock while it does.  0, -EBUSY (a store
 * holds it), -EINVAL (it was closed cleanly), -EPERM (a named store's: it
 * may hold that store's last commit, so it is never removed here), or a
 * refusal as tier_nvme_file_probe's; the detail names @file.
 */
TIER_API int tier_nvme_file_remove_stale(const char *file);

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
 * paths, in one extent per path, growing the backing files as needed.
 * Returns 0, -EEXIST (name taken), -ENOSPC (no extent large enough on some
 * path, or the disk under it is full; the detail names the path and says
 * how much is free), -EINVAL, -ENOMEM, or the error of growing a file.
 * A failed placement leaves the tier as it was.
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
 * through a bounce buffer (a part of a unit written that way is a
 * read-modify-write of the whole unit).  With checksums on, a write
 * computes each stripe unit's crc32c and a read verifies it (-EBADMSG on
 * a mismatch).
 *
 * Order.  Requests may overlap, in flight together, from any threads.  A
 * request is one part per stripe unit it touches, and on each unit of an
 * object the parts take effect one after another in the order they were
 * submitted: a write's part starts when every part submitted before it on
 * the unit is done, a read's when every write's part before it is done
 * (reads of a unit run together).  Request A is submitted before B when
 * A's tier_nvme_submit returned before B's was called (one thread, or
 * threads ordered by other means).  Then B takes effect after A on every
 * unit both touch: where both write, B's bytes replace A's; a read B sees
 * A's write; a write B changes nothing a read A returns.  So each byte
 * holds the bytes of the last write submitted over it, and a read returns,
 * of each unit, exactly the bytes the writes submitted before it left
 * there (none of a later write's, never a mix), verified against those
 * writes' checksum: a write in flight causes no -EBADMSG.  Calls that run
 * at the same time are ordered unit by unit:
 * each unit ends as if they ran one after another, in an order that may
 * differ from one unit to the next.  A write that fails leaves each unit
 * it touched holding its old or its new bytes, or reading as -EBADMSG.
 * Callbacks run in any order.  Parts on a unit that nothing else has in
 * flight start at once.
 *
 * Returns 0 when queued: @cb will be called exactly once (with -ENOMEM
 * too, if memory for a later part ran out).  Or returns -EINVAL (range
 * outside the object), -ESHUTDOWN (closing), -ENOMEM (no memory for the
 * request itself), -EBUSY (a commit is running: tier_nvme_commit) or, for
 * a write to an object a commit holds, -ENOSPC (no room for the new
 * extents copy on write gives it): then @cb is not called.
 */
TIER_API int tier_nvme_submit(struct tier_nvme *t, struct tier_nvme_obj *o,
			      enum tier_io_op op, uint64_t off, uint64_t len, void *buf,
			      tier_io_cb cb, void *arg);

TIER_API int tier_nvme_submit_ticket(struct tier_nvme *t, struct tier_nvme_obj *o,
				     enum tier_io_op op, uint64_t off, uint64_t len, void *buf,
				     struct tier_ticket **out);

/* Synchronous forms: submit and wait. */
TIER_API int tier_nvme_read(struct tier_nvme *t, struct tier_nvme_obj *o, uint64_t off,
			    uint64_t len, void *buf);
TIER_API int tier_nvme_write(struct tier_nvme *t, struct tier_nvme_obj *o, uint64_t off,
			     uint64_t len, const void *buf);

/*
 * A device operation that fails with an error that may not repeat (-EIO,
 * -ETIMEDOUT, -EILSEQ, or data read back with a bad checksum, which is
 * read again) is retried up to this many times, 1, 4 and 16 ms apart,
 * before its request fails.  Other errors (-ENOSPC among them) fail the
 * request at once.
 */
#define TIER_NVME_IO_RETRIES 3

/* ------------------------------------------------------------- commits */

/*
 * A commit makes the objects' bytes as they stand, and a caller's record,
 * the state the backing files reopen to (docs/nvme-format.md, "Commits").
 * The last `keep_commits` commits (manifest) are kept; an open takes the
 * newest that loads, or the one tier_store_params.generation names.
 */
struct tier_commit_info {
	uint64_t generation;      /* the last commit; 0: none */
	uint64_t time_ns;         /* CLOCK_REALTIME when it was made durable */
	uint64_t objects;         /* objects it holds */
	uint64_t data_bytes;      /* their bytes */
	uint64_t table_bytes;     /* its object table */
	uint64_t oldest;          /* the oldest kept commit (a generation to roll back to) */
	uint32_t kept;            /* commits kept now */
	uint32_t keep;            /* the most kept */
};

/*
 * Commits the NVMe tier: every object's bytes as written so far, and
 * @record (@len bytes, may be NULL with 0; at most 1 GiB), become the
 * state the files reopen to, atomically; *@gen (may be NULL) gets its
 * generation.  The data and an object table are made durable
 * (fdatasync) before a commit slot names them, so a crash at any instant
 * reopens at this commit or the one before, never a mix.  No request may
 * be in flight, and none may be submitted while it runs (-EBUSY).  A
 * commit writes only the table (and, for an object written in part since
 * the last commit, its units not written): after a commit an object's
 * next writes go to new extents (copy on write), and the old ones are
 * freed once no kept commit names them.  0, -EBUSY, -ENOSPC (no room for
 * the table or a copy), -EIO or the error of a write or sync, named in
 * the detail: the previous commit then stays the one the files reopen to.
 */
TIER_API int tier_nvme_commit(struct tier_nvme *t, const void *record, size_t len, uint64_t *gen);

/* The last commit (generation 0 when there is none). */
TIER_API int tier_nvme_committed(const struct tier_nvme *t, struct tier_commit_info *out);

/* The record of the last commit (or of the one opened): 0, or -ENOENT
 * (no commit).  Valid until the next commit or the close. */
TIER_API int tier_nvme_record(const struct tier_nvme *t, const void **record, size_t *len);

/* What tier_nvme_check_files() found. */
struct tier_nvme_check_report {
	char store_name[65];
	uint32_t npaths;
	uint64_t generation;      /* the newest commit whose table loads (0: none) */
	uint64_t time_ns;         /* its time */
	uint32_t commits_kept;    /* commits the newest slot keeps */
	uint32_t commits_ok;      /* of them, those whose table is sound */
	uint64_t objects, data_bytes;      /* in the newest sound commit */
	uint64_t units_checked;   /* its stripe units read and checked against their crc32c */
	uint64_t units_bad;       /* of them, mismatched or unreadable */
	uint64_t units_unchecked; /* without a checksum (never written, or checksum: none) */
	uint32_t problems;        /* findings that are faults */
	uint32_t commits_reachable; /* kept commits whose table is sound and whose
				       data verifies (each unit's crc32c; without
				       checksums, their extents lie in the files
				       and overlap no newer commit's, and the files
				       were last opened by a build that keeps them):
				       an open can reach each, the newest as it is
				       and the others by rolling back */
	char reachable[768];      /* their generations, newest first ("12, 11") */
};

/*
 * Verifies the backing files of a closed store offline, reading only:
 * @files (all of one store's, any order) have valid headers of one store;
 * path 0's commit slots; every kept commit's object table (its crc32c and
 * its structure); and every stripe unit of the newest sound commit
 * against its crc32c, and that no extent lies past a file's end.  @say
 * (may be NULL) gets one line per finding, @problem true for faults.
 * Returns 0 (nothing wrong), -EBADMSG (problems found: out->problems),
 * -EBUSY (a running store holds a file), or the error of reading a file
 * (-ENOENT, -EPROTO for another format version, ...), named in the detail.
 */
TIER_API int tier_nvme_check_files(const char *const *files, size_t n,
				   void (*say)(void *arg, bool problem, const char *line), void *arg,
				   struct tier_nvme_check_report *out);

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
	uint64_t retries;         /* resubmissions: -EAGAIN, -EINTR, requests the
				   * kernel cancelled when their submitting thread
				   * exited, and transient errors retried (-EIO,
				   * -ETIMEDOUT, -EILSEQ, a checksum mismatch on read;
				   * TIER_NVME_IO_RETRIES) */
	uint64_t bounced;         /* device operations through a bounce buffer */
	uint32_t npaths;
	uint32_t stripe_unit;
};

TIER_API void tier_nvme_get_stats(const struct tier_nvme *t, struct tier_nvme_stats *out);

/* Counters of one path (backing file) since open. */
struct tier_nvme_path_stats {
	char file[256];            /* the device or file, cut to 255 bytes */
	uint64_t inflight;         /* device operations submitted, not completed */
	uint64_t reads, writes;    /* device operations completed */
	uint64_t bytes_read, bytes_written;
	uint64_t errors;           /* device operations that failed (retried ones too) */
	uint64_t csum_errors;      /* stripe units read back with a bad crc32c */
	uint64_t lat_count;        /* operations timed (the histogram's total), and their total time */
	uint64_t lat_sum_ns;
	uint64_t lat_hist[TIER_LAT_BUCKETS]; /* submission to completion */
};

/* The counters of path @i, 0 .. tier_nvme_stats.npaths - 1 (zeros for a
 * path that is not there).  A build with -Dstats=false keeps only file
 * and inflight. */
TIER_API void tier_nvme_get_path_stats(struct tier_nvme *t, unsigned i,
				       struct tier_nvme_path_stats *out);

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
/* struct tier_store, its levels (enum tier_level, TIER_LEVELS), policies
 * (enum tier_policy) and parameters (struct tier_store_params,
 * tier_store_params_init, TIER_STORE_SCRATCH) are in tierstore/common.h. */
struct tier_obj;

/* Whether the store has the level (HBM may be absent). */
TIER_API bool tier_store_has_level(const struct tier_store *s, enum tier_level level);

/* The lowest level: TIER_NVME, or TIER_DRAM without NVMe paths (TIER_HBM,
 * never a home, for NULL). */
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
 * when it is pinned, or is an optimizer's state (tier_optim_destroy frees
 * it); -EINVAL for a NULL @s or @o (not a no-op). */
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
 * Commits the store (docs/store.md, "Commits"): writes every dirty byte
 * home, then commits the NVMe tier with @record (tier_nvme_commit), so
 * the files reopen to exactly the objects and bytes the store holds now,
 * and tier_store_record() gives @record back.  A store opened on files
 * that hold a commit starts with that commit's objects, at home.  Costs
 * the dirty bytes, an object table and two fdatasyncs, not a copy.  0,
 * -ENODEV (no NVMe tier), -EBUSY (an object is pinned for write, or kept
 * being written during the commit: named), or a flush's or the tier's
 * commit error: the previous commit then stays the one the files reopen to.
 */
TIER_API int tier_store_commit(struct tier_store *s, const void *record, size_t len, uint64_t *gen);

/* The last commit of the store's NVMe tier (-ENODEV without one). */
TIER_API int tier_store_committed(const struct tier_store *s, struct tier_commit_info *out);

/* The record of the last commit, or of the one the store was opened at:
 * 0, -ENOENT (no commit), -ENODEV (no NVMe tier). */
TIER_API int tier_store_record(const struct tier_store *s, const void **record, size_t *len);

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

#ifdef __cplusplus
}
#endif

#endif /* TIERSTORE_TIERS_H */
