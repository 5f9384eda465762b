/*
 * live.h - the store's stats publisher (the live view, issue 7).
 *
 * tier_store_open starts one per store (unless TIER_STATS=off or a build
 * with -Dstats=false): a stats segment (runtime/statseg.h) and a thread
 * that every TIER_STATS_INTERVAL ms takes the store's counters and
 * publishes them as a struct tier_live_stats.  The optimizer and its
 * lookahead write what only they know into the feed, with relaxed atomic
 * stores: the publisher reads them, nothing else waits on them.
 */
#ifndef TIER_RUNTIME_LIVE_H
#define TIER_RUNTIME_LIVE_H

#include <stdatomic.h>
#include <stdint.h>

#include "tierstore.h"

/* Doubles travel as their bits (live_set_double / live_get_double). */
struct live_feed {
	_Atomic uintptr_t owner;   /* the optimizer that writes the optim part */
	_Atomic uint64_t optim_present, step, skipped, params, shards, state_bytes,
		last_step_ns, last_stall_ns, cpu_fraction, loss_scale, grad_norm;
	_Atomic uint64_t pf_window, pf_ahead_bytes, pf_shards_ahead, pf_stall_ns, pf_active;
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
