/*
 * options.h - the one table of run-time options.
 *
 * Every knob tierstore reads from the environment is a row here: name,
 * type, default, environment variable, description.  The table is read once
 * (at library load, or at first use) and cached; a value taken from the
 * environment is logged at info level, an invalid one is warned about and
 * the default kept.  TIER_LOG=debug (or trace) prints the whole table.
 */
#ifndef TIER_COMMON_OPTIONS_H
#define TIER_COMMON_OPTIONS_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

enum ts_opt_type {
	TIER_OPT_T_ENUM,    /* one of a '|'-separated list; value = index */
	TIER_OPT_T_SUBSYS,  /* a subsystem list ("nvme,prefetch", "all") */
	TIER_OPT_T_STRING,
	TIER_OPT_T_INT,     /* integer in [min, max] */
	TIER_OPT_T_PERCENT, /* "25%" or "25" in (0, 100] */
	TIER_OPT_T_SIZE,    /* bytes with a unit: "64GiB" */
};

/* X(id, name, type, env, default, choices/NULL, min, max, description) */
#define TIER_OPTION_LIST(X)                                                    \
	X(LOG, "log", TIER_OPT_T_ENUM, "TIER_LOG", "warn",                     \
	  "error|warn|info|debug|trace", 0, 0,                                 \
	  "log level; debug also prints this table")                          \
	X(LOG_SUBSYS, "log_subsys", TIER_OPT_T_SUBSYS, "TIER_LOG_SUBSYS", "all", \
	  NULL, 0, 0,                                                          \
	  "subsystems to log: all, or a list of common,manifest,kernels,nvme,dram,hbm,store,prefetch,optim,stats,tools; ^list excludes") \
	X(MANIFEST, "manifest", TIER_OPT_T_STRING, "TIER_MANIFEST", "", NULL, 0, 0, \
	  "manifest file used when a tool is given none (empty: the embedded default)") \
	X(DATA, "data", TIER_OPT_T_STRING, "TIER_DATA", "./tier-data", NULL, 0, 0, \
	  "directory of the embedded default's NVMe backing file")             \
	X(THREADS, "threads", TIER_OPT_T_INT, "TIER_THREADS", "0", NULL, 0, 1024, \
	  "worker threads in the pool (0: one per online CPU)")                \
	X(DRAM_SHARE, "dram_share", TIER_OPT_T_PERCENT, "TIER_DRAM_SHARE", "25%", \
	  NULL, 0, 0,                                                          \
	  "share of MemAvailable the embedded default gives the DRAM tier")    \
	X(NVME_SHARE, "nvme_share", TIER_OPT_T_PERCENT, "TIER_NVME_SHARE", "50%", \
	  NULL, 0, 0,                                                          \
	  "share of the free space the embedded default gives its NVMe file")  \
	X(NVME_MAX, "nvme_max", TIER_OPT_T_SIZE, "TIER_NVME_MAX", "64GiB", NULL, 0, 0, \
	  "upper bound of the embedded default's NVMe file")                   \
	X(YAML_NODE_LIMIT, "yaml_node_limit", TIER_OPT_T_INT, "TIER_YAML_NODE_LIMIT", \
	  "10000", NULL, 16, 10000000,                                         \
	  "most YAML nodes a manifest may expand to (aliases counted each time they are used)") \
	X(FAULT, "fault", TIER_OPT_T_STRING, "TIER_FAULT", "", NULL, 0, 0,     \
	  "fault sites to arm at start, site:nth[:count[:errno]],... (test builds)") \
	X(SIMD, "simd", TIER_OPT_T_STRING, "TIER_SIMD", "auto", NULL, 0, 0,    \
	  "SIMD kernel versions to use, a list of scalar,avx2,avx512 (Adam), sse4.2,clmul (crc32c); auto: the best the CPU has") \
	X(TRACE, "trace", TIER_OPT_T_STRING, "TIER_TRACE", "", NULL, 0, 0,     \
	  "write a timeline of optimizer steps (Chrome trace JSON) to this file") \
	X(GPU_SLOTS, "gpu_slots", TIER_OPT_T_INT, "TIER_GPU_SLOTS", "3", NULL, 1, 8, \
	  "shards the optimizer's GPU lane keeps in flight, each with a stream and a shard of device and pinned buffers") \
	X(GPU_GRAD_AHEAD, "gpu_grad_ahead", TIER_OPT_T_ENUM, "TIER_GPU_GRAD_AHEAD", "off", \
	  "off|on", 0, 0,                                                      \
	  "on: the GPU lane copies the next shard's host gradient in on a free slot while its state is still coming up") \
	X(STATS, "stats", TIER_OPT_T_ENUM, "TIER_STATS", "on", "off|on", 0, 0, \
	  "publish each store's counters in a stats segment for tier-stat")  \
	X(STATS_DIR, "stats_dir", TIER_OPT_T_STRING, "TIER_STATS_DIR", "", NULL, 0, 0, \
	  "directory of the stats segments (empty: /dev/shm)")                \
	X(STATS_INTERVAL, "stats_interval", TIER_OPT_T_INT, "TIER_STATS_INTERVAL", \
	  "250", NULL, 10, 60000,                                              \
	  "milliseconds between two publishes of a store's counters")

enum ts_opt_id {
#define X(id, name, type, env, def, choices, min, max, desc) TIER_OPT_##id,
	TIER_OPTION_LIST(X)
#undef X
	TIER_OPT__COUNT
};

/* Reads the environment into the table once; every accessor calls it. */
void ts_options_init(void);

/*
 * Resets every option to its default and reads the environment again.
 * For tests only: not safe while other threads read options.
 */
void ts_options_reload(void);

long long ts_opt_int(enum ts_opt_id id);      /* INT, ENUM index, SUBSYS mask */
double ts_opt_percent(enum ts_opt_id id);     /* PERCENT */
uint64_t ts_opt_size(enum ts_opt_id id);      /* SIZE */
const char *ts_opt_str(enum ts_opt_id id);    /* STRING; never NULL */
bool ts_opt_from_env(enum ts_opt_id id);
const char *ts_opt_name(enum ts_opt_id id);
const char *ts_opt_env(enum ts_opt_id id);

#endif
