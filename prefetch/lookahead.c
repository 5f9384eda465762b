/*
 * lookahead.c - the lookahead window (see lookahead.h): asynchronous,
 * pinning acquires issued in the step's order within per-level byte
 * budgets, taken and given back by the lanes.
 *
 * Lock order: la->lock, then the store's lock (inside tier_obj_acquire_async
 * and tier_obj_release).  Tickets are waited on without la->lock.
 */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "common/clock.h"
#include "common/error.h"
#include "common/log.h"
#include "common/ticket.h"
#include "prefetch/lookahead.h"

static bool fits(const struct lookahead *la, const struct la_item *it)
{
	bool empty = !la->inflight[TIER_DRAM] && !la->inflight[TIER_HBM];

	if (empty)
		return true;
	if (la->inflight[TIER_DRAM] + it->bytes > la->budget[TIER_DRAM])
		return false;
	if (it->level == TIER_HBM && la->inflight[TIER_HBM] &&
	    la->inflight[TIER_HBM] + it->bytes > la->budget[TIER_HBM])
		return false;
	return true;
}

/* Tells the watcher (the live view) what the window holds.  la->lock held. */
static void watch(struct lookahead *la)
{
	if (la->watch.bytes)
		atomic_store_explicit(la->watch.bytes, la->inflight[TIER_DRAM], memory_order_relaxed);
	if (la->watch.items)
		atomic_store_explicit(la->watch.items, la->outstanding, memory_order_relaxed);
}

/* Issues items in order while they fit (la->lock held). */
static void pump(struct lookahead *la)
{
	while (!la->issue_rc && !la->aborted && la->next_issue < la->n) {
		struct la_item *it = &la->items[la->next_issue];
		int rc;

		if (!fits(la, it))
			break;
		rc = tier_obj_acquire_async(la->s, it->obj, it->level, TIER_ACQUIRE_READ | TIER_ACQUIRE_WRITE, &it->ptr,
					&it->tk);
		if (rc) {
			/* Nothing queued: this item and every later one fail. */
			la->issue_rc = rc;
			snprintf(la->issue_err, sizeof(la->issue_err), "%s", tier_last_error());
			break;
		}
		it->state = LA_ISSUED;
		it->issued = true;
		la->inflight[TIER_DRAM] += it->bytes;
		if (it->level == TIER_HBM)
			la->inflight[TIER_HBM] += it->bytes;
		la->outstanding++;
		la->next_issue++;
	}
	watch(la);
	pthread_cond_broadcast(&la->cond);
}

uint64_t la_shard_default(uint64_t dram)
{
	uint64_t s = LA_SHARD_DEFAULT;

	while (s > LA_SHARD_MIN && s > dram / 8)
		s /= 2;
	return s;
}

uint64_t la_default(uint64_t dram)
{
	uint64_t w = dram / 4;

	return w > (4ull << 30) ? 4ull << 30 : w;
}

uint64_t la_window(uint64_t lookahead, uint64_t manifest_dram, uint64_t dram,
		   uint64_t shard_bytes)
{
	uint64_t w = lookahead;

	if (manifest_dram && manifest_dram != dram)
		w = (uint64_t)((double)lookahead * (double)dram / (double)manifest_dram);
	if (w > dram / 2)
		w = dram / 2;
	if (w < shard_bytes)
		w = shard_bytes;
	return w;
}

int la_start(struct lookahead *la, struct tier_store *s, struct la_item *items, size_t n,
	     uint64_t dram_budget, uint64_t hbm_budget, const struct la_watch *w)
{
	memset(la, 0, sizeof(*la));
	if (w)
		la->watch = *w;
	la->s = s;
	la->items = items;
	la->n = n;
	la->budget[TIER_DRAM] = dram_budget;
	la->budget[TIER_HBM] = hbm_budget;
	for (size_t i = 0; i < n; i++) {
		items[i].state = LA_QUEUED;
		items[i].tk = NULL;
		items[i].ptr = NULL;
		items[i].rc = 0;
		items[i].issued = false;
	}
	pthread_mutex_init(&la->lock, NULL);
	pthread_cond_init(&la->cond, NULL);
	pthread_mutex_lock(&la->lock);
	pump(la);
	pthread_mutex_unlock(&la->lock);
	return 0;
}

/* @lane's next item, its cursor moved onto it, or NULL when the lane has
 * none left.  Called with the lock held. */
static struct la_item *next_of(struct lookahead *la, unsigned lane)
{
	while (la->cursor[lane] < la->n && la->items[la->cursor[lane]].lane != lane)
		la->cursor[lane]++;
	return la->cursor[lane] < la->n ? &la->items[la->cursor[lane]] : NULL;
}

int la_take(struct lookahead *la, unsigned lane, struct la_item **out, uint64_t *stall_ns)
{
	struct la_item *it = NULL;
	uint64_t t0 = ts_now_ns();
	int rc;

	*out = NULL;
	pthread_mutex_lock(&la->lock);
	if (!next_of(la, lane)) {
		pthread_mutex_unlock(&la->lock);
		return 1;
	}
	if (la->aborted) {
		pthread_mutex_unlock(&la->lock);
		return 1;
	}
	it = &la->items[la->cursor[lane]++];
	while (it->state == LA_QUEUED && !la->issue_rc && !la->aborted)
		pthread_cond_wait(&la->cond, &la->lock);
	if (la->aborted && it->state == LA_QUEUED) {
		it->state = LA_DONE; /* never issued: nothing to give back */
		pthread_mutex_unlock(&la->lock);
		return 1;
	}
	if (it->state == LA_QUEUED) {
		/* The window stopped at an acquire that could not be queued. */
		rc = la->issue_rc;
		it->rc = rc;
		it->state = LA_TAKEN;
		ts_err(rc, "%s", la->issue_err);
		pthread_mutex_unlock(&la->lock);
		*out = it;
		return rc;
	}
	pthread_mutex_unlock(&la->lock);

	rc = tier_ticket_wait(it->tk); /* only this lane waits for its items */
	it->tk = NULL;
	it->rc = rc;
	pthread_mutex_lock(&la->lock);
	it->state = LA_TAKEN;
	pthread_mutex_unlock(&la->lock);
	*stall_ns += ts_now_ns() - t0;
	*out = it;
	return rc;
}

bool la_ready(struct lookahead *la, unsigned lane)
{
	struct la_item *it;
	bool ready;

	pthread_mutex_lock(&la->lock);
	it = next_of(la, lane);
	if (!it || la->aborted)
		ready = true;
	else if (it->state == LA_QUEUED)
		ready = la->issue_rc != 0;
	else
		ready = !it->tk || ticket_done(it->tk);
	pthread_mutex_unlock(&la->lock);
	return ready;
}

struct la_item *la_peek(struct lookahead *la, unsigned lane)
{
	struct la_item *it;

	pthread_mutex_lock(&la->lock);
	it = la->aborted ? NULL : next_of(la, lane);
	pthread_mutex_unlock(&la->lock);
	return it;
}

static void unaccount(struct lookahead *la, struct la_item *it)
{
	la->inflight[TIER_DRAM] -= it->bytes;
	if (it->level == TIER_HBM)
		la->inflight[TIER_HBM] -= it->bytes;
	la->outstanding--;
	watch(la);
}

int la_done(struct lookahead *la, struct la_item *it, bool dirty)
{
	int rc = 0;

	if (it->rc == 0 && it->state == LA_TAKEN)
		rc = tier_obj_release(la->s, it->obj, it->level, dirty);
	pthread_mutex_lock(&la->lock);
	if (it->issued && it->state != LA_DONE)
		unaccount(la, it); /* an item never issued holds no budget */
	it->state = LA_DONE;
	pump(la);
	pthread_mutex_unlock(&la->lock);
	return rc;
}

void la_abort(struct lookahead *la)
{
	pthread_mutex_lock(&la->lock);
	la->aborted = true;
	pthread_cond_broadcast(&la->cond);
	pthread_mutex_unlock(&la->lock);
}

void la_finish(struct lookahead *la)
{
	for (size_t i = 0; i < la->next_issue; i++) {
		struct la_item *it = &la->items[i];

		if (it->state == LA_ISSUED) {
			it->rc = tier_ticket_wait(it->tk);
			it->tk = NULL;
			if (!it->rc)
				(void)tier_obj_release(la->s, it->obj, it->level, false);
			it->state = LA_DONE;
		} else if (it->state == LA_TAKEN) {
			/* a lane gave up on it without giving it back */
			if (!it->rc)
				(void)tier_obj_release(la->s, it->obj, it->level, false);
			it->state = LA_DONE;
		}
	}
	ts_err_clear();
	la->inflight[TIER_DRAM] = la->inflight[TIER_HBM] = 0;
	la->outstanding = 0;
	watch(la);
	pthread_mutex_destroy(&la->lock);
	pthread_cond_destroy(&la->cond);
}
