/*
 * publish.h - the store's stats publisher (the live view).
 *
 * tier_store_open starts one per store (unless TIER_STATS=off or a build
 * with -Dstats=false): a stats segment (formats/statseg.h) and a thread
 * that every TIER_STATS_INTERVAL ms takes the store's counters and
 * publishes them as a struct tier_live_stats.  The optimizer and its
 * lookahead write what only they know into the feed, with relaxed atomic
 * stores: the publisher reads them, nothing else waits on them.
 */
#ifndef TIER_RUNTIME_PUBLISH_H
#define TIER_RUNTIME_PUBLISH_H

#include <stdatomic.h>
#include <stdint.h>

#include "tierstore.h"

/*
 * An entry of a counter list (tierstore/live.h) that the optimizer feeds
 * (src feed) as a field of the feed; the others add nothing.  Doubles
 * travel as their bits (live_set_double).
 */
#define LIVE_FEED_FIELD(name, type, unit, kind, src, ...) LIVE_FEED_##src(name)
#define LIVE_FEED_feed(name) _Atomic uint64_t name;
#define LIVE_FEED_stats(name)
#define LIVE_FEED_nvme(name)
#define LIVE_FEED_pub(name)

struct live_feed_optim {
	_Atomic uint64_t present;
	TIER_LIVE_OPTIM_COUNTERS(LIVE_FEED_FIELD)
};

struct live_feed_prefetch {
	TIER_LIVE_PREFETCH_COUNTERS(LIVE_FEED_FIELD)
};

struct live_feed {
	_Atomic uintptr_t owner;   /* the optimizer that writes the optim part */
	struct live_feed_optim optim;
	struct live_feed_prefetch prefetch;
};

struct live;

/*
 * Starts publishing for @s, opened from @m; the publisher, or NULL when
 * the store publishes nothing.  Never fails the store: a segment that
 * cannot be created is a warning (once per process) and the store runs
 * without one.
 */
struct live *live_start(struct tier_store *s, const struct tier_manifest *m);

/* Stops the publisher and removes its segment (NULL: nothing).  It reads
 * the store: tier_store_close stops it first. */
void live_stop(struct live *l);

/* The store's feed, or NULL when it publishes nothing. */
struct live_feed *live_feed(struct tier_store *s);

void live_set_double(_Atomic uint64_t *w, double v);

#endif
