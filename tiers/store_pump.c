/*
 * store_pump.c - the store's requests: the pending list, the steps that
 * serve an acquire, a prefetch or a flush, the pump that re-runs them
 * after every event, and the public calls that queue them (acquire,
 * release, prefetch, flush, read, write).  A request is the one way work
 * that has to wait (for a fill, for room, for a write-back) is expressed,
 * so everything that can block a caller goes through this file; the
 * transfers a step starts are in store_xfer.c, the room it makes in
 * store_evict.c.
 */
#include "config.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "common/fault.h"
#include "common/log.h"
#include "common/ticket.h"
#include "tiers/hbm.h"
#include "tiers/store.h"
#include "tiers/store_impl.h"

static char *level_ptr(struct tier_store *s, struct tier_obj *o, enum tier_level l)
{
	if (l == TIER_DRAM)
		return s->dram_base + o->lv[TIER_DRAM].off;
	return s->hops->dev_ptr(s->hdev, o->lv[TIER_HBM].off);
}

/* ---------------------------------------------------------------- requests */

static void want_adjust(struct tier_store *s, struct req *r, int d)
{
	if (r->kind != RQ_ACQUIRE)
		return;
	for (int l = r->level; l < TIER_LEVELS; l++)
		if (s->lv[l].present && (enum tier_level)l != s->home)
			r->o->lv[l].want += (uint32_t)d;
}

/* Records that @r waits for room on level @l (-1: no longer). */
void store_room_wait(struct tier_store *s, struct req *r, int l)
{
	if (r->room_level == l)
		return;
	if (r->room_level >= 0)
		s->lv[r->room_level].room_waiters--;
	r->room_level = l;
	if (l >= 0)
		s->lv[l].room_waiters++;
}

static void rq_enqueue(struct tier_store *s, struct req *r)
{
	r->id = ++s->next_id;
	r->prev = s->rq_tail;
	r->next = NULL;
	if (s->rq_tail)
		s->rq_tail->next = r;
	else
		s->rq_head = r;
	s->rq_tail = r;
	want_adjust(s, r, 1);
}

/* Takes @r off the list and completes it with @rc (detail @why when
 * failing).  Frees it. */
void store_rq_finish(struct tier_store *s, struct req *r, int rc, const char *why)
{
	if (r->prev)
		r->prev->next = r->next;
	else
		s->rq_head = r->next;
	if (r->next)
		r->next->prev = r->prev;
	else
		s->rq_tail = r->prev;
	want_adjust(s, r, -1);
	store_room_wait(s, r, -1);
	s->changes++;
	if (!s->rq_head)
		pthread_cond_broadcast(&s->idle);
	/* The transfer that failed counted the error on its level. */
	if (r->kind == RQ_PREFETCH && rc)
		TIER_DEBUG_LOG(TIER_SS_STORE, "prefetch of '%s' to %s: %s", r->o->name,
			       tier_level_name(r->level), why);
	if (r->tk)
		ticket_complete(r->tk, rc, rc ? why : "");
	free(r);
}

/* Fails the pending requests on @o that @pred selects. */
void store_rq_fail_obj(struct tier_store *s, struct tier_obj *o, bool (*pred)(struct req *, int),
		       int arg, uint64_t cause, int rc, const char *why)
{
	struct req *r = s->rq_head, *next;

	for (; r; r = next) {
		next = r->next;
		if ((r->o == o && pred(r, arg)) || (cause && r->id == cause))
			store_rq_finish(s, r, rc, why);
	}
}

/* ----------------------------------------------------------- the requests */

/*
 * Makes @o valid on @l without pinning it: 1 (it is), 0 (a transfer or
 * room is awaited), or make_room's errors.  Below first: inclusion.
 */
static int ensure(struct tier_store *s, struct req *r, struct tier_obj *o, enum tier_level l)
{
	struct lvl *x = &o->lv[l];
	struct xfer *xf;
	uint64_t off;
	int rc;

	if (l == s->home)
		return 1;
	switch (x->st) {
	case ST_CLEAN:
	case ST_DIRTY:
		return 1;
	case ST_FLUSHING:
		if (x->evicting) { /* needed again: keep it */
			s->lv[l].evict_pending -= store_slot_bytes(s, l, o);
			x->evicting = false;
			s->changes++;
		}
		return 1;
	case ST_FILLING:
		return 0;
	}
	rc = ensure(s, r, o, l + 1);
	if (rc <= 0)
		return rc;
	if (!(xf = ts_malloc(sizeof(*xf))))
		return ts_err(-ENOMEM, "%s: out of memory filling '%s'", tier_level_name(l), o->name);
	rc = store_make_room(s, r, o, l, &off);
	if (rc <= 0) {
		free(xf);
		return rc;
	}
	x->st = ST_FILLING;
	x->off = off;
	store_resident_add(s, l, o);
	if (l + 1 != s->home)
		o->lv[l + 1].iopins++;
	if (r->kind == RQ_PREFETCH)
		s->lv[l].prefetches++;
	store_xfer_queue(s, o, l, false, 0, xf);
	return 0;
}

/* Fails @r, taking the detail from tier_last_error(). */
static void rq_fail(struct tier_store *s, struct req *r, int rc)
{
	char why[TIER_ERR_MAX];

	snprintf(why, sizeof(why), "%s", tier_last_error());
	store_rq_finish(s, r, rc, why);
}

/* -EBUSY when another level's pins exclude this request. */
static int conflicts(struct tier_store *s, struct req *r)
{
	struct tier_obj *o = r->o;

	for (int l = 0; l < TIER_LEVELS; l++) {
		struct lvl *x = &o->lv[l];

		if (!s->lv[l].present || (enum tier_level)l == r->level)
			continue;
		if (x->wpins)
			return ts_err(-EBUSY, "'%s' is pinned for write on %s", o->name,
					tier_level_name((enum tier_level)l));
		if ((r->mode & TIER_ACQUIRE_WRITE) && x->rpins)
			return ts_err(-EBUSY, "'%s' is pinned on %s, so it cannot be written on %s",
					o->name, tier_level_name((enum tier_level)l),
					tier_level_name(r->level));
	}
	return 0;
}

/*
 * Coherence before a DRAM access: HBM's dirty bytes come down first.  1
 * when DRAM holds the current bytes, 0 when waiting.
 */
static int coherent_below(struct tier_store *s, struct req *r)
{
	struct tier_obj *o = r->o;
	struct lvl *h = &o->lv[TIER_HBM];
	struct xfer *xf;

	if (r->level != TIER_DRAM || !s->lv[TIER_HBM].present)
		return 1;
	if (h->st == ST_FLUSHING)
		return 0;
	if (h->st == ST_DIRTY) {
		if (o->lv[TIER_DRAM].st == ST_FLUSHING)
			return 0;
		if (!(xf = ts_malloc(sizeof(*xf))))
			return ts_err(-ENOMEM, "hbm: out of memory writing back '%s'", o->name);
		store_start_flush(s, o, TIER_HBM, 0, xf);
		return 0;
	}
	if ((r->mode & TIER_ACQUIRE_WRITE) && h->st == ST_FILLING)
		return 0; /* the copy above is about to be dropped */
	return 1;
}

static void step_acquire(struct tier_store *s, struct req *r)
{
	struct tier_obj *o = r->o;
	enum tier_level l = r->level;
	struct lvl *x = &o->lv[l];
	int rc;

	if ((rc = conflicts(s, r)) || (rc = coherent_below(s, r)) <= 0) {
		if (rc < 0)
			rq_fail(s, r, rc);
		return;
	}
	if (!r->counted) {
		bool hit = l == s->home || x->st == ST_CLEAN || x->st == ST_DIRTY ||
			   x->st == ST_FLUSHING;

		r->counted = true;
		if (hit)
			s->lv[l].hits++;
		else
			s->lv[l].misses++;
		store_emit(s, hit ? STORE_EV_HIT : STORE_EV_MISS, l, o);
	}
	if ((r->mode & TIER_ACQUIRE_DISCARD) && l != s->home && x->st == ST_ABSENT) {
		uint64_t off;

		/* The caller overwrites every byte: a slot, no fill. */
		if ((rc = ensure(s, r, o, l + 1)) > 0 && (rc = store_make_room(s, r, o, l, &off)) > 0) {
			x->st = ST_DIRTY;
			x->written = true;
			x->off = off;
			store_resident_add(s, l, o);
		}
	} else {
		rc = ensure(s, r, o, l);
	}
	if (rc <= 0) {
		if (rc < 0)
			rq_fail(s, r, rc);
		return;
	}
	if ((r->mode & TIER_ACQUIRE_WRITE) && x->st == ST_FLUSHING)
		return; /* no write while its bytes are being copied down */
	if (r->mode & TIER_ACQUIRE_WRITE) {
		/* Copies above go stale: drop them (clean and idle by now). */
		for (int u = 0; u < (int)l; u++) {
			struct lvl *y = &o->lv[u];

			if (!s->lv[u].present || y->st == ST_ABSENT)
				continue;
			if (y->st != ST_CLEAN || store_pinned(y))
				return;
			store_drop(s, o, (enum tier_level)u);
		}
		x->wpins++;
		x->written = true;
		if (r->mode & TIER_ACQUIRE_DISCARD)
			x->st = l == s->home ? x->st : ST_DIRTY;
	} else {
		x->rpins++;
	}
	x->last_use = ++s->tick;
	*r->ptr = level_ptr(s, o, l);
	store_rq_finish(s, r, 0, NULL);
}

static void step_prefetch(struct tier_store *s, struct req *r)
{
	int rc = conflicts(s, r);

	if (rc) { /* in use elsewhere: nothing to do */
		store_rq_finish(s, r, 0, NULL);
		return;
	}
	rc = ensure(s, r, r->o, r->level);
	if (rc == 0)
		return;
	if (rc == -EAGAIN)
		s->lv[r->level].prefetch_skipped++;
	if (rc < 0 && rc != -EAGAIN)
		rq_fail(s, r, rc);
	else
		store_rq_finish(s, r, 0, NULL);
}

static void step_flush(struct tier_store *s, struct req *r)
{
	struct tier_obj *o = r->o;

	for (int l = 0; l < TIER_LEVELS && !r->force; l++) {
		if (s->lv[l].present && o->lv[l].wpins) {
			rq_fail(s, r, ts_err(-EBUSY, "'%s' is pinned for write on %s", o->name,
					       tier_level_name((enum tier_level)l)));
			return;
		}
	}
	for (int u = 0; u < (int)s->home; u++) {
		struct lvl *x = &o->lv[u];
		struct xfer *xf;

		if (!s->lv[u].present)
			continue;
		if (x->st == ST_FLUSHING)
			return;
		if (x->st != ST_DIRTY)
			continue;
		if (u + 1 != (int)s->home && o->lv[u + 1].st == ST_FLUSHING)
			return;
		if (!(xf = ts_malloc(sizeof(*xf)))) {
			rq_fail(s, r, ts_err(-ENOMEM, "out of memory writing back '%s'", o->name));
			return;
		}
		store_start_flush(s, o, (enum tier_level)u, 0, xf);
		return;
	}
	store_rq_finish(s, r, 0, NULL);
}

/* Re-evaluates every pending request until a pass changes nothing. */
void store_pump(struct tier_store *s)
{
	for (int pass = 0; pass < 1000; pass++) {
		uint64_t before = s->changes;

		for (struct req *r = s->rq_head, *next; r; r = next) {
			next = r->next;
			switch (r->kind) {
			case RQ_ACQUIRE: step_acquire(s, r); break;
			case RQ_PREFETCH: step_prefetch(s, r); break;
			case RQ_FLUSH: step_flush(s, r); break;
			}
		}
		if (s->changes == before)
			return;
	}
	TIER_WARN(TIER_SS_STORE, "store: request pump did not settle after 1000 passes");
}

/* Queues a request, runs the pump and issues what it started.  The lock
 * is held on entry and dropped on return. */
static void submit_locked(struct tier_store *s, struct req *r)
{
	rq_enqueue(s, r);
	store_pump(s);
	store_unlock_and_issue(s);
}

static struct req *req_new(enum rq_kind kind, struct tier_obj *o, enum tier_level l, unsigned mode)
{
	struct req *r = ts_calloc(1, sizeof(*r));

	if (!r) {
		ts_err(-ENOMEM, "out of memory for a request on '%s'", o->name);
		return NULL;
	}
	r->kind = kind;
	r->o = o;
	r->level = l;
	r->mode = mode;
	r->room_level = -1;
	return r;
}

static int check_level(struct tier_store *s, struct tier_obj *o, enum tier_level l)
{
	if ((unsigned)l >= TIER_LEVELS)
		return ts_err(-EINVAL, "'%s': no tier level %d", o ? o->name : "?", (int)l);
	if (l == TIER_NVME)
		return ts_err(-EINVAL, "'%s': nvme is the home, not addressable: acquire on dram or hbm",
				o->name);
	if (!s->lv[l].present)
		return ts_err(-ENODEV, "'%s': this store has no %s tier", o->name,
				tier_level_name(l));
	return 0;
}

int tier_obj_acquire_async(struct tier_store *s, struct tier_obj *o, enum tier_level level,
		       unsigned mode, void **ptr, struct tier_ticket **tk)
{
	STORE_ARG(s);
	TS_NONNULL(o);
	TS_NONNULL(ptr);
	TS_NONNULL(tk);
	struct req *r;
	int rc;

	*tk = NULL;
	if ((rc = check_level(s, o, level)))
		return rc;
	if (!(mode & (TIER_ACQUIRE_READ | TIER_ACQUIRE_WRITE)) || (mode & ~(TIER_ACQUIRE_READ | TIER_ACQUIRE_WRITE | TIER_ACQUIRE_DISCARD)) ||
	    ((mode & TIER_ACQUIRE_DISCARD) && !(mode & TIER_ACQUIRE_WRITE)))
		return ts_err(-EINVAL, "'%s': acquire mode 0x%x (READ and/or WRITE, DISCARD only with WRITE)",
				o->name, mode);
	if (!(r = req_new(RQ_ACQUIRE, o, level, mode)))
		return -ENOMEM;
	if (!(r->tk = ticket_new())) {
		free(r);
		return ts_err(-ENOMEM, "out of memory for a ticket on '%s'", o->name);
	}
	r->ptr = ptr;
	*tk = r->tk;
	pthread_mutex_lock(&s->lock);
	if (o->destroying) {
		pthread_mutex_unlock(&s->lock);
		ticket_discard(r->tk);
		free(r);
		*tk = NULL;
		return ts_err(-ENOENT, "'%s' is being destroyed", o->name);
	}
	store_sched_advance(s, o);
	submit_locked(s, r);
	return 0;
}

int tier_obj_acquire(struct tier_store *s, struct tier_obj *o, enum tier_level level, unsigned mode,
		 void **ptr)
{
	STORE_ARG(s);
	TS_NONNULL(o);
	TS_NONNULL(ptr);
	struct tier_ticket *tk;
	int rc = tier_obj_acquire_async(s, o, level, mode, ptr, &tk);

	return rc ? rc : tier_ticket_wait(tk);
}

int tier_obj_release(struct tier_store *s, struct tier_obj *o, enum tier_level level, bool dirty)
{
	STORE_ARG(s);
	TS_NONNULL(o);
	struct lvl *x;
	int rc;

	if ((rc = check_level(s, o, level)))
		return rc;
	pthread_mutex_lock(&s->lock);
	x = &o->lv[level];
	if (dirty ? !x->wpins : !x->wpins && !x->rpins) {
		pthread_mutex_unlock(&s->lock);
		return ts_err(-EINVAL, "'%s': release on %s without a%s pin", o->name,
				tier_level_name(level), dirty ? " write" : "");
	}
	/* The pin dropped: a write pin if dirty, else a read pin if any. */
	if (dirty || !x->rpins)
		x->wpins--;
	else
		x->rpins--;
	if (dirty && level != s->home)
		x->st = ST_DIRTY;
	x->last_use = ++s->tick;
	s->changes++;
	store_pump(s);
	store_unlock_and_issue(s);
	return 0;
}

int tier_obj_prefetch(struct tier_store *s, struct tier_obj *o, enum tier_level level)
{
	STORE_ARG(s);
	TS_NONNULL(o);
	struct req *r;
	int rc;

	if ((rc = check_level(s, o, level)))
		return rc;
	if (store_slot_bytes(s, level, o) > s->lv[level].capacity)
		return ts_err(-E2BIG, "%s: '%s' is larger than the tier", tier_level_name(level),
				o->name);
	if (!(r = req_new(RQ_PREFETCH, o, level, TIER_ACQUIRE_READ)))
		return -ENOMEM;
	pthread_mutex_lock(&s->lock);
	if (o->destroying) {
		pthread_mutex_unlock(&s->lock);
		free(r);
		return ts_err(-ENOENT, "'%s' is being destroyed", o->name);
	}
	submit_locked(s, r);
	return 0;
}

/* Queues a flush of @o with a ticket (lock held). */
static int flush_queue(struct tier_store *s, struct tier_obj *o, bool force,
		       struct tier_ticket **tk)
{
	struct req *r = req_new(RQ_FLUSH, o, s->home, 0);

	if (!r)
		return -ENOMEM;
	r->force = force;
	if (!(r->tk = ticket_new())) {
		free(r);
		return ts_err(-ENOMEM, "out of memory for a ticket on '%s'", o->name);
	}
	*tk = r->tk;
	rq_enqueue(s, r);
	return 0;
}

int store_flush_async(struct tier_store *s, struct tier_obj *o, struct tier_ticket **tk)
{
	int rc;

	*tk = NULL;
	pthread_mutex_lock(&s->lock);
	rc = flush_queue(s, o, false, tk);
	if (rc) {
		pthread_mutex_unlock(&s->lock);
		return rc;
	}
	store_pump(s);
	store_unlock_and_issue(s);
	return 0;
}

int tier_obj_flush(struct tier_store *s, struct tier_obj *o)
{
	STORE_ARG(s);
	TS_NONNULL(o);
	struct tier_ticket *tk;
	int rc;

	pthread_mutex_lock(&s->lock);
	rc = flush_queue(s, o, false, &tk);
	if (rc) {
		pthread_mutex_unlock(&s->lock);
		return rc;
	}
	store_pump(s);
	store_unlock_and_issue(s);
	return tier_ticket_wait(tk);
}

/* Whether a flush has anything to do or report for @o. */
static bool obj_dirty(struct tier_store *s, const struct tier_obj *o)
{
	for (int l = 0; l < TIER_LEVELS; l++)
		if (s->lv[l].present && (o->lv[l].st == ST_DIRTY || o->lv[l].st == ST_FLUSHING ||
					 o->lv[l].wpins))
			return true;
	return false;
}

/* Flushes every object; @force writes even write-pinned bytes (close). */
int store_flush_all(struct tier_store *s, bool force)
{
	struct tier_ticket **tks;
	uint32_t n = 0;
	int first = 0;
	char why[TIER_ERR_MAX] = "";

	pthread_mutex_lock(&s->lock);
	tks = ts_calloc(s->nobjs ? s->nobjs : 1, sizeof(*tks));
	if (!tks) {
		pthread_mutex_unlock(&s->lock);
		return ts_err(-ENOMEM, "flush: out of memory");
	}
	for (uint32_t i = 0; i < s->nobjs; i++) {
		int rc;

		if (!obj_dirty(s, s->objs[i]))
			continue;
		if ((rc = flush_queue(s, s->objs[i], force, &tks[n])) != 0) {
			if (!first) {
				first = rc;
				snprintf(why, sizeof(why), "%s", tier_last_error());
			}
			break;
		}
		n++;
	}
	store_pump(s);
	store_unlock_and_issue(s);
	for (uint32_t i = 0; i < n; i++) {
		int rc = tier_ticket_wait(tks[i]);

		if (rc && !first) {
			first = rc;
			snprintf(why, sizeof(why), "%s", tier_last_error());
		}
	}
	free(tks);
	if (first)
		return ts_err(first, "%s", why);
	ts_err_clear();
	return 0;
}

int tier_store_flush(struct tier_store *s)
{
	STORE_ARG(s);
	return store_flush_all(s, false);
}

int tier_obj_write(struct tier_store *s, struct tier_obj *o, uint64_t off, uint64_t len,
		   const void *buf)
{
	STORE_ARG(s);
	TS_NONNULL(o);
	TS_NONNULL(buf);
	void *p;
	int rc;

	if (off > o->size || len > o->size - off)
		return ts_err(-EINVAL, "'%s': write of [%" PRIu64 ", +%" PRIu64 ") outside its %" PRIu64
				" bytes", o->name, off, len, o->size);
	if (!len)
		return 0;
	rc = tier_obj_acquire(s, o, TIER_DRAM,
			  TIER_ACQUIRE_WRITE | (off == 0 && len == o->size ? TIER_ACQUIRE_DISCARD : TIER_ACQUIRE_READ), &p);
	if (rc)
		return rc;
	memcpy((char *)p + off, buf, len);
	return tier_obj_release(s, o, TIER_DRAM, true);
}

int tier_obj_read(struct tier_store *s, struct tier_obj *o, uint64_t off, uint64_t len, void *buf)
{
	STORE_ARG(s);
	TS_NONNULL(o);
	TS_NONNULL(buf);
	void *p;
	int rc;

	if (off > o->size || len > o->size - off)
		return ts_err(-EINVAL, "'%s': read of [%" PRIu64 ", +%" PRIu64 ") outside its %" PRIu64
				" bytes", o->name, off, len, o->size);
	if (!len)
		return 0;
	if ((rc = tier_obj_acquire(s, o, TIER_DRAM, TIER_ACQUIRE_READ, &p)))
		return rc;
	memcpy(buf, (char *)p + off, len);
	return tier_obj_release(s, o, TIER_DRAM, false);
}
