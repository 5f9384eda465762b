/*
 * tierstore/live.h - the live view of libtierstore: the layout of the
 * stats segment's payload, the counter lists it is generated from, the
 * functions that read segments.  Included by tierstore.h (at its end); a
 * program may include either.  Valid C17 and C++, like tierstore.h.  The
 * latency histogram it uses is in tierstore/common.h.
 *
 * Every open store publishes its counters, a few times a second, in a
 * stats segment: the file $TIER_STATS_DIR/tierstore-PID-N.stats (default
 * directory /dev/shm), mode 0600, removed when the store closes.  tier-stat
 * reads them; so can any program of the same user, through the functions
 * below, without ever blocking the store.  docs/tier-stat.md describes the
 * file and every field.  TIER_STATS=off turns publishing off; a build with
 * -Dstats=false has none.
 *
 * The structures below are the segment's payload, byte for byte: fixed
 * widths, no pointers, no padding, host byte order.  The payload starts
 * with its layout version (TIER_LIVE_VERSION) and its size (sizeof(struct
 * tier_live_stats) as the writer was built); a reader refuses a segment
 * whose version or size is not its own.
 */
#ifndef TIERSTORE_LIVE_H
#define TIERSTORE_LIVE_H

#include "../tierstore.h"

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define TIER_LIVE_VERSION 2u
#define TIER_LIVE_MAX_PATHS 64

/* ------------------------------------------------------- the counter lists */

/*
 * One X-macro list per group of counters.  Each entry
 *
 *   X(name, type, unit, kind, src, json, prom, table, help)
 *
 * is one field of the group's structure, in this order, and says how it is
 * produced and shown:
 *
 *   name   the field's name (in the structure, and in the store's own
 *          stats struct or the optimizer's feed it is copied from)
 *   type   u64, double, or hist (uint64_t[TIER_LAT_BUCKETS], a latency
 *          histogram)
 *   unit   bytes, count, ns (a duration: shown in seconds), time (a clock
 *          reading in ns: as is in JSON, in seconds in Prometheus), Bps
 *          (bytes per second), ratio,
 *          scalar, flag (0 or 1: a JSON boolean)
 *   kind   counter (only grows) or gauge: the Prometheus type; summary for
 *          a histogram
 *   src    where the publisher takes it: stats (the store's stats struct,
 *          field of the same name), feed (the optimizer's feed, field of
 *          the same name), nvme (the path's field of the same name in struct
 *          tier_nvme_path_stats), pub (the
 *          publisher computes it: clocks, rates, the last commit from
 *          tier_store_committed)
 *   json   its key in tier-stat --json ("": none; a histogram gives
 *          KEY_p50_seconds and KEY_p99_seconds)
 *   prom   its Prometheus family after the group's prefix (tierstore_,
 *          tierstore_tier_, tierstore_nvme_path_, tierstore_prefetch_,
 *          tierstore_optimizer_); "_total" is appended for a counter; "":
 *          none
 *   table  where tier-stat's report shows it, in increasing POS within the
 *          group: COL(POS, WIDTH, "HEADER", FORM) a column of the tier or
 *          path table; TXT(POS, "BEFORE", "AFTER", FORM) a piece of the
 *          group's line; NONE.  FORM is how the value is written: bytes,
 *          rate, num, plural (AFTER takes an "s" unless the value is 1),
 *          secs ("1.234 s"), uptime, f2 ("%.2f"), g ("%g"), ns (a latency;
 *          a histogram gives its p50 and p99 columns, HEADER50 and
 *          HEADER99), onoff (BEFORE when set, AFTER when not)
 *   help   one line: the Prometheus HELP text and the field's description
 *
 * Adding a counter is one line here, the code that produces its value (for
 * stats, feed and nvme) and its test: the structures, the publisher's copy,
 * the feed and tier-stat's JSON, Prometheus and report follow from the
 * list.  The payload's size changes with it, so readers built before
 * refuse the new segments (and the other way round).  docs/tier-stat.md,
 * "Adding a counter".
 */

/* The store as a whole (struct tier_live_stats). */
#define TIER_LIVE_STORE_COUNTERS(X) \
	X(time_ns, u64, time, gauge, pub, "time_ns", "", NONE, \
	  "When published, CLOCK_REALTIME.") \
	X(mono_ns, u64, time, gauge, pub, "", "", NONE, \
	  "The same moment on CLOCK_MONOTONIC (for rates).") \
	X(uptime_ns, u64, ns, gauge, pub, "uptime_s", "uptime_seconds", \
	  TXT(1, "  up ", "", uptime), "Time since the store opened.") \
	X(publishes, u64, count, counter, pub, "publishes", "", NONE, \
	  "This snapshot's number, from 1.") \
	X(objects, u64, count, gauge, stats, "objects", "objects", \
	  TXT(2, "  objects ", "", num), "Objects in the store.") \
	X(commit_generation, u64, count, gauge, pub, "commit_generation", "commit_generation", \
	  NONE, "The last commit's generation (0: none, or no NVMe tier).") \
	X(commit_time_ns, u64, time, gauge, pub, "commit_time_ns", \
	  "last_commit_timestamp_seconds", NONE, \
	  "When the last commit was made durable, CLOCK_REALTIME (0: none).") \
	X(commits_kept, u64, count, gauge, pub, "commits_kept", "commits_kept", NONE, \
	  "Commits kept in the backing files (generations to roll back to).") \
	X(commit_oldest, u64, count, gauge, pub, "commit_oldest_generation", \
	  "commit_oldest_generation", NONE, "The oldest kept commit's generation (0: none).")

/* One level (struct tier_live_level); for NVMe, bytes_in is what was
 * written to the devices and bytes_out what was read from them. */
#define TIER_LIVE_LEVEL_COUNTERS(X) \
	X(capacity, u64, bytes, gauge, stats, "capacity_bytes", "capacity_bytes", \
	  COL(1, 10, "CAPACITY", bytes), "Capacity of the tier.") \
	X(used, u64, bytes, gauge, stats, "used_bytes", "used_bytes", \
	  COL(2, 10, "USED", bytes), "Bytes in slots (NVMe: allocated).") \
	X(pinned, u64, bytes, gauge, stats, "pinned_bytes", "pinned_bytes", \
	  COL(3, 10, "PINNED", bytes), "Bytes of pinned objects.") \
	X(dirty, u64, bytes, gauge, stats, "dirty_bytes", "dirty_bytes", \
	  COL(4, 10, "DIRTY", bytes), "Bytes newer than the tier below.") \
	X(objects, u64, count, gauge, stats, "objects", "objects", \
	  COL(5, 8, "OBJECTS", num), "Objects resident on the tier.") \
	X(hits, u64, count, counter, stats, "hits", "hits", \
	  COL(6, 10, "HITS", num), "Acquires that found the object resident.") \
	X(misses, u64, count, counter, stats, "misses", "misses", \
	  COL(7, 10, "MISSES", num), "Acquires that had to fill the object.") \
	X(evictions, u64, count, counter, stats, "evictions", "evictions", \
	  COL(8, 10, "EVICTIONS", num), "Objects evicted from the tier.") \
	X(writebacks, u64, count, counter, stats, "writebacks", "writebacks", NONE, \
	  "Write-backs of dirty bytes to the tier below.") \
	X(prefetches, u64, count, counter, stats, "prefetches", "prefetches", NONE, \
	  "Fills started by a prefetch.") \
	X(prefetch_skipped, u64, count, counter, stats, "prefetch_skipped", "prefetch_skipped", \
	  NONE, "Prefetches skipped: no slot the policy would give.") \
	X(errors, u64, count, counter, stats, "errors", "errors", NONE, \
	  "Failed fills and write-backs.") \
	X(bytes_in, u64, bytes, counter, stats, "bytes_in", "in_bytes", NONE, \
	  "Bytes filled into the tier from below (NVMe: written to the devices).") \
	X(bytes_out, u64, bytes, counter, stats, "bytes_out", "out_bytes", NONE, \
	  "Bytes written back below (NVMe: read from the devices).") \
	X(in_Bps, double, Bps, gauge, pub, "in_bytes_per_second", "in_bytes_per_second", \
	  COL(9, 13, "IN/s", rate), "Fill rate over the last second.") \
	X(out_Bps, double, Bps, gauge, pub, "out_bytes_per_second", "out_bytes_per_second", \
	  COL(10, 13, "OUT/s", rate), "Write-back rate over the last second.")

/* One NVMe path, a backing file (struct tier_live_path). */
#define TIER_LIVE_PATH_COUNTERS(X) \
	X(inflight, u64, count, gauge, nvme, "inflight", "inflight", \
	  COL(1, 8, "INFLIGHT", num), "Device operations submitted and not completed.") \
	X(reads, u64, count, counter, nvme, "reads", "reads", NONE, \
	  "Read operations completed.") \
	X(writes, u64, count, counter, nvme, "writes", "writes", NONE, \
	  "Write operations completed.") \
	X(bytes_read, u64, bytes, counter, nvme, "bytes_read", "read_bytes", \
	  COL(2, 10, "READ", bytes), "Bytes read from the device.") \
	X(bytes_written, u64, bytes, counter, nvme, "bytes_written", "written_bytes", \
	  COL(3, 10, "WRITTEN", bytes), "Bytes written to the device.") \
	X(errors, u64, count, counter, nvme, "errors", "errors", \
	  COL(7, 6, "ERRORS", num), "Device operations that failed.") \
	X(csum_errors, u64, count, counter, nvme, "checksum_errors", "checksum_errors", \
	  COL(8, 5, "CSUM", num), "Stripe units read back with a bad crc32c.") \
	X(lat_count, u64, count, counter, nvme, "latency_count", "", NONE, \
	  "Operations timed: the histogram's total.") \
	X(lat_sum_ns, u64, ns, counter, nvme, "latency_sum_seconds", "", NONE, \
	  "Their total time.") \
	X(lat_hist, hist, ns, summary, nvme, "latency", "", COL(6, 9, "P", ns), \
	  "Operations by duration, submission to completion.") \
	X(read_Bps, double, Bps, gauge, pub, "read_bytes_per_second", "", \
	  COL(4, 13, "READ/s", rate), "Bytes read over the last second.") \
	X(write_Bps, double, Bps, gauge, pub, "write_bytes_per_second", "", \
	  COL(5, 13, "WRITE/s", rate), "Bytes written over the last second.")

/* The optimizer's lookahead, the latest step's while one runs (struct
 * tier_live_prefetch). */
#define TIER_LIVE_PREFETCH_COUNTERS(X) \
	X(active, u64, flag, gauge, feed, "streaming", "streaming", \
	  TXT(5, " (streaming)", " (idle)", onoff), "1 while an optimizer step streams.") \
	X(window_bytes, u64, bytes, gauge, feed, "window_bytes", "window_bytes", \
	  TXT(1, "window ", "", bytes), "The lookahead budget in DRAM.") \
	X(ahead_bytes, u64, bytes, gauge, feed, "ahead_bytes", "ahead_bytes", \
	  TXT(2, ", ahead ", "", bytes), "State bytes acquired ahead of the update.") \
	X(shards_ahead, u64, count, gauge, feed, "shards_ahead", "shards_ahead", \
	  TXT(3, " in ", " shard", plural), "Shards acquired and not yet updated.") \
	X(stall_ns, u64, ns, counter, feed, "stall_seconds", "stall_seconds", \
	  TXT(4, ", stall ", " in total", secs), "Time the update waited for state.")

/* The optimizer on the store, the last one created (struct
 * tier_live_optim). */
#define TIER_LIVE_OPTIM_COUNTERS(X) \
	X(step, u64, count, counter, feed, "step", "steps", \
	  TXT(1, "step ", "", num), "Optimizer steps applied.") \
	X(skipped, u64, count, counter, feed, "skipped_steps", "skipped_steps", \
	  TXT(2, " (", " skipped)", num), "Steps skipped for an inf or nan gradient.") \
	X(params, u64, count, gauge, feed, "params", "", \
	  TXT(3, ", ", " params", num), "Parameters registered.") \
	X(shards, u64, count, gauge, feed, "shards", "", \
	  TXT(4, " in ", " shards", num), "Their shards.") \
	X(state_bytes, u64, bytes, gauge, feed, "state_bytes", "state_bytes", \
	  TXT(5, ", ", " of state", bytes), "Bytes of optimizer state.") \
	X(last_step_ns, u64, ns, gauge, feed, "last_step_seconds", "last_step_seconds", \
	  TXT(6, ", last step ", "", secs), "Duration of the last step.") \
	X(last_stall_ns, u64, ns, gauge, feed, "last_stall_seconds", "last_stall_seconds", \
	  TXT(7, " (stall ", ")", secs), "Stall of the last step.") \
	X(offload_fraction, double, ratio, gauge, feed, "offload_fraction", "offload_fraction", \
	  TXT(8, ", CPU share ", "", f2), "Share of the shards updated on the CPU.") \
	X(loss_scale, double, scalar, gauge, feed, "loss_scale", "loss_scale", \
	  TXT(9, ", loss scale ", "", g), "Loss scale of the next step.") \
	X(grad_norm, double, scalar, gauge, feed, "grad_norm", "grad_norm", \
	  TXT(10, ", grad norm ", "", g), "Unscaled gradient norm of the last step.")

/* An entry as a structure's field. */
#define TIER_LIVE_FIELD(name, type, ...) TIER_LIVE_FIELD_##type(name)
#define TIER_LIVE_FIELD_u64(name) uint64_t name;
#define TIER_LIVE_FIELD_double(name) double name;
#define TIER_LIVE_FIELD_hist(name) uint64_t name[TIER_LAT_BUCKETS];

/* ------------------------------------------------------------ the payload */

struct tier_live_level {
	uint32_t present;          /* 0: the store has no such level */
	uint32_t reserved;
	char backend[16];          /* "cuda", "host", "null", "dram", "nvme" */
	TIER_LIVE_LEVEL_COUNTERS(TIER_LIVE_FIELD)
};

struct tier_live_path {
	char file[256];            /* the device or file, cut to 255 bytes */
	TIER_LIVE_PATH_COUNTERS(TIER_LIVE_FIELD)
};

struct tier_live_prefetch {
	TIER_LIVE_PREFETCH_COUNTERS(TIER_LIVE_FIELD)
};

struct tier_live_optim {
	uint64_t present;          /* 0: no optimizer on this store */
	TIER_LIVE_OPTIM_COUNTERS(TIER_LIVE_FIELD)
};

struct tier_live_stats {
	uint32_t version;          /* TIER_LIVE_VERSION of the writer */
	uint32_t size;             /* sizeof(struct tier_live_stats) in the writer */
	TIER_LIVE_STORE_COUNTERS(TIER_LIVE_FIELD)
	uint32_t npaths;           /* path[] entries in use */
	uint32_t stripe_unit;
	struct tier_live_level level[TIER_LEVELS]; /* by enum tier_level */
	struct tier_live_prefetch prefetch;
	struct tier_live_optim optim;
	struct tier_live_path path[TIER_LIVE_MAX_PATHS];
};

/*
 * The store's segment: its path (NULL when the store publishes none), and
 * a publish now (the publisher otherwise runs every TIER_STATS_INTERVAL
 * ms).  tier_store_publish_stats returns -ENOENT without a segment.
 */
TIER_API const char *tier_store_stats_path(const struct tier_store *s);
TIER_API int tier_store_publish_stats(struct tier_store *s);

/* ---- reading segments */

struct tier_live;

/* The directory segments are in: $TIER_STATS_DIR, else /dev/shm. */
TIER_API const char *tier_live_dir(void);

/*
 * Calls @cb(path, arg) for each segment file in @dir (NULL: tier_live_dir())
 * in name order, without opening it; stops at @cb's first nonzero return
 * and returns it.  0, or -errno when the directory cannot be read.
 */
TIER_API int tier_live_list(const char *dir, int (*cb)(const char *path, void *arg),
			    void *arg);

/*
 * Opens the segment at @path read-only, after checking it: a regular file
 * owned by the caller with mode 0600 (-EACCES otherwise: another user's
 * store), a segment at all (-EBADMSG), of layout TIER_LIVE_VERSION with a
 * payload of this layout's size (-EPROTO: another version or size; the
 * detail names the segment's and this build's).  -ENOENT: gone.
 */
TIER_API int tier_live_open(const char *path, struct tier_live **out);

/*
 * A consistent snapshot of the counters (the fields past the last path in
 * use are zero; all are zero before the first publish).  -EAGAIN when none
 * could be had (a writer that died in the middle of publishing); -EPROTO
 * when the payload says another version or size than this build's.  Never
 * blocks the store.
 */
TIER_API int tier_live_read(const struct tier_live *l, struct tier_live_stats *out);

/* What the segment's header says. */
struct tier_live_info {
	int64_t pid;
	uint64_t uid;
	uint64_t start_ns;         /* CLOCK_REALTIME, when the store opened */
	uint32_t version;
	char name[64];             /* the store's name */
	const char *path;          /* the file (valid while open) */
	const char *manifest;      /* the effective manifest, YAML (valid while open) */
	/* the store's rank in its job (its manifest's, struct tier_rank);
	 * world_size 0 (and the rest -1): the writer did not say (a library
	 * before 0.4) */
	int32_t rank, local_rank, world_size, local_world_size;
};
TIER_API void tier_live_info(const struct tier_live *l, struct tier_live_info *out);

/*
 * Whether the segment's process is gone (exited, its pid reused, or the
 * machine rebooted since): a stale segment, which a crashed process
 * leaves behind.
 */
TIER_API bool tier_live_stale(const struct tier_live *l);

/* Removes a stale segment's file: 0, -EBUSY when its process lives, or
 * -errno of unlink. */
TIER_API int tier_live_remove(struct tier_live *l);

TIER_API void tier_live_close(struct tier_live *l);

#ifdef __cplusplus
}
#endif

#endif /* TIERSTORE_LIVE_H */
