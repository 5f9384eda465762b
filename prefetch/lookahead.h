/*
 * lookahead.h - the lookahead window of one optimizer step.
 *
 * A step is a list of items in the order the update consumes them: a
 * store object (one shard of state) and the level its lane updates it on
 * (DRAM for the CPU lane, HBM for the GPU lane).  The window acquires
 * items ahead of the update, in list order, with asynchronous acquires
 * that pin them (so nothing the window brought up is evicted before its
 * use), while the bytes acquired and not yet released stay within the
 * budget of each level: DRAM (every item, the hierarchy being inclusive)
 * and HBM (the GPU lane's items).  One item is always allowed when nothing
 * is in flight, so a budget below one item still makes progress.
 *
 * Issuing in list order also keeps the store's schedule cursor in step
 * with the update (each acquire advances it to the object's next use), so
 * the store evicts by the step's real order.
 *
 * Each lane takes its own items in order (la_take: waits for the item to
 * be issued and resident, and accounts the wait as stall) and gives each
 * back (la_done: releases the pin, clean or dirty, which frees budget and
 * issues more).  Two lanes may take and give concurrently; one thread per
 * lane.  la_finish waits for every item still issued and releases it
 * clean: after an abandoned step, or an error, nothing stays pinned.
 *
 * Internal to the library (prefetch/, runtime/).
 */
#ifndef TIER_PREFETCH_LOOKAHEAD_H
#define TIER_PREFETCH_LOOKAHEAD_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "tierstore/tiers.h"

#define LA_LANES 2 /* 0: CPU (DRAM), 1: GPU (HBM) */

struct la_item {
	struct tier_obj *obj;
	enum tier_level level;
	unsigned lane;
	uint64_t bytes;
	void *user;              /* the caller's record of the item */

	/* set by the window */
	void *ptr;               /* the object's bytes on @level once taken */
	struct tier_ticket *tk;
	int state;               /* LA_QUEUED, LA_ISSUED, LA_TAKEN, LA_DONE */
	int rc;                  /* the acquire's result */
	bool issued;             /* its acquire was queued (holds budget until done) */
};

enum { LA_QUEUED, LA_ISSUED, LA_TAKEN, LA_DONE };

/* Where the window reports what it holds, with relaxed atomic stores
 * (the live view's feed); NULL members report nothing. */
struct la_watch {
	_Atomic uint64_t *bytes;  /* DRAM bytes of items issued, not done */
	_Atomic uint64_t *items;  /* items issued, not done */
};

struct lookahead {
	struct tier_store *s;
	pthread_mutex_t lock;
	pthread_cond_t cond;
	struct la_item *items;
	size_t n;
	size_t next_issue;       /* the first item not issued */
	size_t cursor[LA_LANES]; /* per lane: where to look for its next item */
	uint64_t inflight[TIER_LEVELS], budget[TIER_LEVELS];
	int issue_rc;            /* an acquire that could not be queued */
	bool aborted;            /* la_abort: no more issues, no more takes */
	uint64_t outstanding;    /* items issued, not done */
	struct la_watch watch;
	char issue_err[256];
};

/*
 * The shard size for a DRAM tier of @dram bytes when nobody chose one: an
 * eighth of it rounded down to a power of two, between LA_SHARD_MIN and
 * LA_SHARD_DEFAULT (64 MiB), so four shards and the window always fit.
 */
#define LA_SHARD_MIN (64ull << 10)
#define LA_SHARD_DEFAULT (64ull << 20)
uint64_t la_shard_default(uint64_t dram);

/*
 * The window's size, the one place it is worked out.  la_default: the
 * manifest's prefetch.lookahead when it has none, from its DRAM tier's
 * @dram bytes (a quarter, at most 4 GiB).  la_window: what an optimizer
 * uses, from the manifest's @lookahead and @manifest_dram, on a store whose
 * DRAM tier has @dram bytes (a store may override the capacity): the
 * lookahead scaled with the DRAM tier, within [one shard of @shard_bytes,
 * half of DRAM].
 */
uint64_t la_default(uint64_t dram);
uint64_t la_window(uint64_t lookahead, uint64_t manifest_dram, uint64_t dram,
		   uint64_t shard_bytes);

/*
 * Starts a window over @items[0..n) (owned by the caller, alive until
 * la_finish) with @dram_budget and @hbm_budget bytes, and issues the first
 * acquires at once.  0 or -ENOMEM.
 */
int la_start(struct lookahead *la, struct tier_store *s, struct la_item *items, size_t n,
	     uint64_t dram_budget, uint64_t hbm_budget, const struct la_watch *w);

/*
 * The next item of @lane, resident and pinned on its level: *out, with
 * the time spent waiting added to *stall_ns.  0; 1 when the lane has no
 * item left (*out NULL); or the acquire's error (*out is the item, not
 * pinned: give it back with la_done all the same).
 */
int la_take(struct lookahead *la, unsigned lane, struct la_item **out, uint64_t *stall_ns);

/*
 * Whether la_take(@lane) would return without waiting: the lane's next
 * item is resident (its acquire complete, or failed), or the lane has no
 * item left, or the window stopped.  A lane that holds items taken and
 * not given back asks before it takes more, and gives its oldest back
 * first when the answer is no: the budget those items hold may be what
 * the next one waits for.
 */
bool la_ready(struct lookahead *la, unsigned lane);

/*
 * The item la_take(@lane) would return next, not taken (it may not be
 * issued or resident yet): for what a lane can do for it ahead, such as
 * bringing its gradient in.  NULL when the lane has no item left or the
 * window stopped.
 */
struct la_item *la_peek(struct lookahead *la, unsigned lane);

/* Gives a taken item back: releases its pin (@dirty: the bytes changed),
 * and issues more.  0 or the release's error. */
int la_done(struct lookahead *la, struct la_item *it, bool dirty);

/* Stops the window: nothing more is issued, and every lane's next la_take
 * returns 1 (no item), so a lane that failed does not leave the others
 * waiting for budget its untaken items hold.  Items already taken are
 * given back as usual. */
void la_abort(struct lookahead *la);

/* Waits for every issued item not given back, releases it clean, and frees
 * the window's resources.  Items never issued are left alone. */
void la_finish(struct lookahead *la);

#endif
