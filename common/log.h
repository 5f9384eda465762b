/*
 * log.h - logging by level and subsystem.
 *
 * TIER_LOG=error|warn|info|debug|trace sets the level (default warn) and
 * TIER_LOG_SUBSYS=nvme,prefetch (default all) the subsystems shown.  The
 * level and mask are tested before any formatting, so a disabled message
 * costs one load and a branch.  Warnings and errors carry file:line.
 */
#ifndef TIER_COMMON_LOG_H
#define TIER_COMMON_LOG_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

enum ts_log_level {
	TIER_LL_ERROR = 0,
	TIER_LL_WARN = 1,
	TIER_LL_INFO = 2,
	TIER_LL_DEBUG = 3,
	TIER_LL_TRACE = 4,
};

/* Subsystems: one bit each; the names are those TIER_LOG_SUBSYS takes. */
#define TIER_SUBSYS_LIST(X)                                                    \
	X(COMMON, "common")                                                    \
	X(MANIFEST, "manifest")                                                \
	X(KERNELS, "kernels")                                                  \
	X(NVME, "nvme")                                                        \
	X(DRAM, "dram")                                                        \
	X(HBM, "hbm")                                                          \
	X(STORE, "store")                                                      \
	X(PREFETCH, "prefetch")                                                \
	X(OPTIM, "optim")                                                      \
	X(STATS, "stats")                                                      \
	X(TOOLS, "tools")

enum ts_subsys_bit {
#define X(id, name) TIER_SSB_##id,
	TIER_SUBSYS_LIST(X)
#undef X
	TIER_SSB__COUNT
};

#define X(id, name) static const uint32_t TIER_SS_##id = 1u << TIER_SSB_##id;
TIER_SUBSYS_LIST(X)
#undef X
#define TIER_SS_ALL ((1u << TIER_SSB__COUNT) - 1)

extern _Atomic int ts_log_level_g;
extern _Atomic uint32_t ts_log_mask_g;

static inline bool ts_log_enabled(int level, uint32_t ss)
{
	return level <= atomic_load_explicit(&ts_log_level_g, memory_order_relaxed) &&
	       (ss & atomic_load_explicit(&ts_log_mask_g, memory_order_relaxed));
}

void ts_log_emit(int level, uint32_t ss, const char *file, int line,
		   const char *fmt, ...) __attribute__((format(printf, 5, 6)));

#define TIER_LOG(level, ss, ...)                                               \
	do {                                                                    \
		if (ts_log_enabled((level), (ss)))                            \
			ts_log_emit((level), (ss), __FILE__, __LINE__,         \
				      __VA_ARGS__);                             \
	} while (0)

#define TIER_ERROR(ss, ...) TIER_LOG(TIER_LL_ERROR, ss, __VA_ARGS__)
#define TIER_WARN(ss, ...) TIER_LOG(TIER_LL_WARN, ss, __VA_ARGS__)
#define TIER_INFO(ss, ...) TIER_LOG(TIER_LL_INFO, ss, __VA_ARGS__)
#define TIER_DEBUG_LOG(ss, ...) TIER_LOG(TIER_LL_DEBUG, ss, __VA_ARGS__)
#define TIER_TRACE(ss, ...) TIER_LOG(TIER_LL_TRACE, ss, __VA_ARGS__)

/* Level and subsystem names, for parsing and printing. */
const char *ts_log_level_name(int level);
int ts_log_level_parse(const char *s); /* level, or -EINVAL */
/* Parses "nvme,prefetch" or "all" (also "^nvme" = all but nvme) into a mask; -EINVAL names the bad word. */
int ts_log_mask_parse(const char *s, uint32_t *mask, char *bad, int badlen);
const char *ts_subsys_name(uint32_t ss);

/*
 * Where messages go: stderr unless a test installs a sink.  The sink gets
 * the whole formatted line without the trailing newline.
 */
typedef void (*ts_log_sink_fn)(int level, uint32_t ss, const char *line, void *arg);
void ts_log_set_sink(ts_log_sink_fn fn, void *arg);

#endif
