/*
 * store_xfer.c - the transfers between adjacent levels: queueing a fill or
 * a write-back under the lock, issuing it with the lock dropped (to the
 * NVMe tier or the HBM backend), and applying its completion, on a
 * backend's thread or on the issuing one.  The only file that submits
 * I/O to the backends.
 */
#include "config.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "common/fault.h"
#include "common/log.h"
#include "tiers/hbm.h"
#include "tiers/store.h"
#include "tiers/store_impl.h"

/* --------------------------------------------------------------- transfers */

void store_xfer_queue(struct tier_store *s, struct tier_obj *o, enum tier_level upper, bool down,
		      uint64_t cause, struct xfer *x)
{
	*x = (struct xfer){ .s = s, .o = o, .upper = upper, .down = down, .cause = cause };
	x->zero = !down && upper + 1 == s->home && s->home == TIER_NVME && !o->home_valid;
	o->busy++;
	s->nxfers++;
	if (s->todo_tail)
		s->todo_tail->next = x;
	else
		s->todo = x;
	s->todo_tail = x;
	store_emit(s, down ? STORE_EV_FLUSH_START : STORE_EV_FILL_START, upper, o);
}

static void xfer_complete(struct xfer *x, int rc, const char *detail);

/* A transfer's completion from the NVMe tier or an HBM backend thread. */
static void xfer_cb(void *arg, int rc, const char *detail)
{
	struct xfer *x = arg;
	struct tier_store *s = x->s;

	pthread_mutex_lock(&s->lock);
	xfer_complete(x, rc, detail);
	store_pump(s);
	store_unlock_and_issue(s);
}

/*
 * Issues one transfer; the lock is not held.  Returns true when it
 * completed here (a fill of zeros, a failed submission): its result is in
 * x->sync_rc and the caller completes it, so that a chain of synchronous
 * completions is a loop, not a recursion.
 */
static bool xfer_issue(struct xfer *x)
{
	struct tier_store *s = x->s;
	struct tier_obj *o = x->o;
	char *dram = s->dram_base + o->lv[TIER_DRAM].off;
	int rc = ts_fault_check(TIER_FAULT_STORE_IO);

	x->sync_detail[0] = 0;
	if (rc) {
		snprintf(x->sync_detail, sizeof(x->sync_detail), "store_io fault site: %s",
			 tier_strerror(rc));
	} else if (x->upper == TIER_DRAM) {
		if (x->zero) {
			memset(dram, 0, o->size);
			x->sync_rc = 0;
			return true;
		}
		rc = tier_nvme_submit(s->nvme, o->nobj, x->down ? TIER_IO_WRITE : TIER_IO_READ, 0,
				      o->size, dram, xfer_cb, x);
	} else {
		rc = s->hops->copy(s->hdev, x->down ? HBM_D2H : HBM_H2D, o->lv[TIER_HBM].off, dram,
				   o->size, xfer_cb, x);
	}
	if (!rc)
		return false;
	if (!x->sync_detail[0])
		snprintf(x->sync_detail, sizeof(x->sync_detail), "%s", tier_last_error());
	x->sync_rc = rc;
	return true;
}

/*
 * Drops the lock after issuing (unlocked) every transfer queued so far,
 * completing those that finish on this thread and issuing what their
 * completion queues, until nothing is left.
 */
void store_unlock_and_issue(struct tier_store *s)
{
	while (s->todo) {
		struct xfer *x = s->todo, *done = NULL;

		s->todo = s->todo_tail = NULL;
		pthread_mutex_unlock(&s->lock);
		while (x) {
			struct xfer *next = x->next;

			x->next = NULL;
			if (xfer_issue(x)) {
				x->next = done;
				done = x;
			}
			x = next;
		}
		pthread_mutex_lock(&s->lock);
		if (done) {
			while (done) {
				struct xfer *next = done->next;

				xfer_complete(done, done->sync_rc, done->sync_detail);
				done = next;
			}
			store_pump(s);
		}
	}
	pthread_mutex_unlock(&s->lock);
}

void store_start_flush(struct tier_store *s, struct tier_obj *o, enum tier_level u, uint64_t cause,
		       struct xfer *x)
{
	o->lv[u].st = ST_FLUSHING;
	if (u + 1 != s->home)
		o->lv[u + 1].iopins++;
	s->changes++;
	store_xfer_queue(s, o, u, true, cause, x);
}

/* Requests that need level @arg filled: acquires/prefetches at or above it. */
static bool needs_fill(struct req *r, int arg)
{
	return r->kind != RQ_FLUSH && (int)r->level <= arg;
}

/* Requests that need level @arg written back: acquires/prefetches below
 * it, and flushes. */
static bool needs_flush(struct req *r, int arg)
{
	return r->kind == RQ_FLUSH || (int)r->level > arg;
}

/* Applies a transfer's result (lock held) and frees it. */
static void xfer_complete(struct xfer *x, int rc, const char *detail)
{
	struct tier_store *s = x->s;
	struct tier_obj *o = x->o;
	enum tier_level u = x->upper, l = u + 1;
	struct lvl *up = &o->lv[u];
	char why[TIER_ERR_MAX];

	if (l != s->home)
		o->lv[l].iopins--;
	if (!x->down) {
		if (!rc) {
			up->st = ST_CLEAN;
			up->last_use = ++s->tick;
			s->lv[u].bytes_in += o->size;
			store_emit(s, STORE_EV_FILL_DONE, u, o);
		} else {
			s->lv[u].errors++;
			snprintf(why, sizeof(why), "%s: fill of '%s' from %s failed: %s",
				 tier_level_name(u), o->name, tier_level_name(l), detail);
			TIER_WARN(TIER_SS_STORE, "%s", why);
			store_drop(s, o, u);
			store_rq_fail_obj(s, o, needs_fill, (int)u, 0, rc, why);
		}
	} else {
		if (!rc) {
			s->lv[u].writebacks++;
			s->lv[u].bytes_out += o->size;
			if (l == s->home) {
				o->home_valid = true;
			} else {
				o->lv[l].st = ST_DIRTY;
				o->lv[l].written = true;
			}
			store_emit(s, STORE_EV_FLUSH_DONE, u, o);
			if (up->evicting) {
				store_drop(s, o, u);
			} else {
				up->st = ST_CLEAN;
				up->written = false;
			}
		} else {
			s->lv[u].errors++;
			snprintf(why, sizeof(why), "%s: write-back of '%s' to %s failed (its bytes stay on %s): %s",
				 tier_level_name(u), o->name, tier_level_name(l), tier_level_name(u),
				 detail);
			TIER_WARN(TIER_SS_STORE, "%s", why);
			up->st = ST_DIRTY;
			if (up->evicting) {
				s->lv[u].evict_pending -= store_slot_bytes(s, u, o);
				up->evicting = false;
			}
			store_rq_fail_obj(s, o, needs_flush, (int)u, x->cause, rc, why);
		}
	}
	s->changes++;
	o->busy--;
	s->nxfers--;
	if (!o->busy || !s->nxfers)
		pthread_cond_broadcast(&s->idle);
	free(x);
}
