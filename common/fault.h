/*
 * fault.h - numbered fault sites.
 *
 * Every allocation, thread creation, file access, probe and (later)
 * submission, registration and CUDA call passes a site listed here.  In a
 * build with fault sites (meson -Dfault_sites, on whenever tests are built)
 * a test arms a site to fail its Nth call, once (transient) or from then on
 * (persistent), with a chosen errno.  A build without them compiles every
 * site to a constant 0.
 *
 * Site numbers are stable: never renumber or reuse one (tests and the
 * TIER_FAULT environment knob refer to them by name and number).
 */
#ifndef TIER_COMMON_FAULT_H
#define TIER_COMMON_FAULT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "config.h"

#ifdef __cplusplus
extern "C" {
#endif

#define TIER_FAULT_SITE_LIST(X)                                                \
	X(ALLOC, 1, "alloc", "heap allocation (ts_malloc/calloc/strdup)")    \
	X(THREAD_CREATE, 2, "thread_create", "creating a worker thread")       \
	X(MANIFEST_OPEN, 3, "manifest_open", "opening a manifest file")        \
	X(MANIFEST_READ, 4, "manifest_read", "reading a manifest file")        \
	X(YAML_PARSE, 5, "yaml_parse", "libyaml parser setup")                 \
	X(MEMINFO, 6, "meminfo", "reading /proc/meminfo")                      \
	X(STATVFS, 7, "statvfs", "querying a file system's free space")        \
	X(DIRECT_PROBE, 8, "direct_probe", "probing O_DIRECT on a file system") \
	X(GPU_PROBE, 9, "gpu_probe", "querying the CUDA devices")              \
	X(MKDIR, 10, "mkdir", "creating a data directory")                     \
	X(NVME_OPEN, 11, "nvme_open", "opening or creating an NVMe backing file") \
	X(NVME_FALLOCATE, 12, "nvme_fallocate", "growing a backing file (fallocate)") \
	X(NVME_HEADER, 13, "nvme_header", "writing or reading a backing file's header") \
	X(NVME_RING, 14, "nvme_ring", "setting up an io_uring")                \
	X(NVME_REGISTER, 15, "nvme_register", "registering files or buffers with a ring") \
	X(NVME_SUBMIT, 16, "nvme_submit", "io_uring_submit")                   \
	X(NVME_IO_ERR, 17, "nvme_io_err", "a device operation completing with the armed errno (EIO, ENOSPC...)") \
	X(NVME_SHORT, 18, "nvme_short", "a device operation transferring half its bytes") \
	X(NVME_DELAY, 19, "nvme_delay", "a completion handled 20 ms late")     \
	X(NVME_BITFLIP, 20, "nvme_bitflip", "one bit flipped in data read from a device") \
	X(DRAM_MAP, 21, "dram_map", "mapping the DRAM arena (mmap, huge pages)") \
	X(DRAM_PIN, 22, "dram_pin", "locking or registering the DRAM arena (mlock, NUMA bind, cudaHostRegister)") \
	X(HBM_ALLOC, 23, "hbm_alloc", "allocating the HBM arena or its streams and threads") \
	X(HBM_COPY, 24, "hbm_copy", "a host/device copy completing with the armed errno") \
	X(STORE_IO, 25, "store_io", "a fill or flush between tiers failing before it is issued") \
	X(STATS_OPEN, 26, "stats_open", "creating or opening a stats segment") \
	X(STATS_ALLOC, 27, "stats_alloc", "allocating a stats segment's bytes") \
	X(COMMIT_COPY, 28, "commit_copy", "a commit copying a unit not yet moved (pread/pwrite)") \
	X(COMMIT_TABLE, 29, "commit_table", "a commit writing its object table") \
	X(COMMIT_SYNC, 30, "commit_sync", "a commit's fdatasync of the data and table") \
	X(COMMIT_SLOT, 31, "commit_slot", "a commit writing its slot") \
	X(COMMIT_SLOT_SYNC, 32, "commit_slot_sync", "a commit's fdatasync of its slot") \
	X(COMMIT_LOAD, 33, "commit_load", "reading a commit slot or object table at open")

enum ts_fault_site {
	TIER_FAULT_NONE = 0,
#define X(id, num, name, desc) TIER_FAULT_##id = num,
	TIER_FAULT_SITE_LIST(X)
#undef X
	TIER_FAULT__COUNT
};

/* Count for ts_fault_arm(): every call from the Nth on fails. */
#define TIER_FAULT_PERSISTENT (-1)

#if TIER_FAULT_SITES
/* 0, or the negative errno the armed site must fail with. */
int ts_fault_check(enum ts_fault_site site);
#else
static inline int ts_fault_check(enum ts_fault_site site)
{
	(void)site;
	return 0;
}
#endif

/* Whether fault sites are compiled into this build. */
bool ts_fault_available(void);

/*
 * Arms @site: calls 1..nth-1 succeed, then @count calls fail with @err
 * (negative errno); count 1 = transient, TIER_FAULT_PERSISTENT = every call
 * from the Nth on.  Resets the site's counters.  -ENOTSUP without fault
 * sites, -EINVAL for a bad site, nth or err.
 */
int ts_fault_arm(enum ts_fault_site site, uint64_t nth, int64_t count, int err);
void ts_fault_disarm(enum ts_fault_site site);
void ts_fault_reset_all(void);
/* Calls that passed the site since it was armed or reset, and how many failed. */
uint64_t ts_fault_calls(enum ts_fault_site site);
uint64_t ts_fault_fired(enum ts_fault_site site);

const char *ts_fault_site_name(enum ts_fault_site site);
/* The site named @name ("alloc") or numbered ("1"); TIER_FAULT_NONE if none. */
enum ts_fault_site ts_fault_site_lookup(const char *name);

/*
 * Arms sites from a TIER_FAULT-style spec: "site:nth[:count[:errno]]",
 * several separated by commas, e.g. "alloc:3:1:ENOMEM,statvfs:1:-1:EIO".
 * -EINVAL (with the detail message naming the bad part) on a bad spec.
 */
int ts_fault_arm_spec(const char *spec);

/* Allocation through the ALLOC site.  Same contracts as the libc calls. */
void *ts_malloc(size_t size);
void *ts_calloc(size_t n, size_t size);
void *ts_realloc(void *p, size_t size);
char *ts_strdup(const char *s);
char *ts_strndup(const char *s, size_t n);
__attribute__((format(printf, 1, 2))) char *ts_asprintf(const char *fmt, ...);

#ifdef __cplusplus
}
#endif

#endif
