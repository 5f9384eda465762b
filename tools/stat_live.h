/*
 * stat_live.h - tier-stat's live view of running stores (stat_live.c):
 * the list, the one-shot report, -w, --json, --prometheus, --remove-stale.
 * tier-stat.c parses the command line and calls stat_live_run().
 */
#ifndef TIER_TOOLS_STAT_LIVE_H
#define TIER_TOOLS_STAT_LIVE_H

#include <stdbool.h>

enum stat_format { STAT_TABLE, STAT_JSON, STAT_PROMETHEUS };

struct stat_live_args {
	const char *dir;          /* NULL: tier_live_dir() */
	const char *target;       /* "PID" or "PID.N"; NULL: every store */
	enum stat_format format;
	double watch_s;           /* > 0: refresh every watch_s seconds */
	long count;               /* reports under -w; 0: until interrupted */
	bool remove_stale;
};

/* Exit status: 0, 1 (operational), 2 (usage). */
int stat_live_run(const struct stat_live_args *a);

/*
 * The rest of --remove-stale (stat_stale.c): removes the temporary files of
 * segment creations that did not finish in @stats_dir, and the stale
 * backing files of scratch stores in the manifest's NVMe paths; lists the
 * stale files of named stores.  0, or -1 if something could not be done
 * (said on stderr).
 */
int stat_remove_stale_files(const char *stats_dir);

#endif
