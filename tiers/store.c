/*
 * store.c - the tiered store: the object table, per-tier residency, pins,
 * eviction and write-back over the DRAM arena, an HBM backend and the NVMe
 * tier.  docs/store.md is the prose version of this file's contracts.
 *
 * Levels, top down: HBM (optional), DRAM, NVMe (the home; without NVMe
 * paths DRAM is the home and holds every object for good).  The hierarchy
 * is inclusive: an object with an HBM slot has a valid DRAM slot, so every
 * transfer is between adjacent levels: a fill copies level L+1 into L, a
 * flush (write-back) copies L into L+1.
 *
 * Per object and level above the home the state is
 *
 *   ABSENT --alloc--> FILLING --ok--> CLEAN --release dirty--> DIRTY
 *      ^                 |  error       ^                        |
 *      +-----------------+              +----ok---- FLUSHING <---+ flush
 *      +--------- (evicting) ok --------------------/   | error -> DIRTY
 *
 * and pins (read, write) and io pins (a transfer of the level above or
 * below uses this slot) keep a slot in place.  A write pin excludes pins
 * on other levels and copies above (they would go stale), and a flush
 * never starts while a write pin is held, so a transfer never copies bytes
 * a caller is changing.  The current bytes of an object are on the
 * highest level where it is dirty, else on any level that holds it; an
 * acquire on DRAM while HBM is dirty first writes HBM back.
 *
 * Concurrency: one mutex guards everything here.  Work that waits (an
 * acquire needing a fill or room, a flush) is a request on the pending
 * list; pump() re-evaluates the list after every event (a transfer done,
 * a release) until nothing changes.  Transfers are never issued with the
 * lock held (the NVMe tier and the HBM backends may call back on the
 * submitting thread when a submission fails): they are queued on s->todo
 * and issued by whoever drops the lock next (unlock_and_issue).  Requests
 * that cannot be satisfied because every slot is pinned fail at once with
 * -ENOMEM, so nothing here waits on a caller's pin.
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
#include "common/units.h"
#include "tiers/buddy.h"
#include "tiers/dram.h"
#include "tiers/hbm.h"
#include "tiers/store.h"

enum { ST_ABSENT, ST_FILLING, ST_CLEAN, ST_DIRTY, ST_FLUSHING };

static const char *const st_names[] = { "absent", "filling", "clean", "dirty", "flushing" };

#define DIST_NONE UINT64_MAX /* next use of an object outside the schedule */
#define OBJ_NAME_MAX 255
#define MAX_BLOCKS_LOG2 20   /* a level's slot allocator tracks at most 2^20 blocks */

struct lvl {
	uint8_t st;
	bool evicting;       /* the flush under way frees the slot when done */
	bool written;        /* a write pin was taken since the level was last clean */
	uint32_t rpins, wpins;
	uint32_t iopins;     /* transfers of the adjacent levels reading or writing this slot */
	uint32_t want;       /* pending acquires that need the object here */
	uint64_t off;        /* slot offset in the level's arena */
	uint64_t last_use;   /* store tick of the last grant or fill */
	struct tier_obj *prev, *next; /* the level's resident list */
};

struct tier_obj {
	struct tier_store *s;
	char *name;
	uint64_t size;
	uint32_t idx;                /* in s->objs */
	struct tier_obj *hnext;      /* name hash chain */
	struct tier_nvme_obj *nobj;  /* the home extent (NVMe) */
	bool home_valid;             /* the home has been written (else it reads as zeros) */
	bool destroying;
	uint32_t busy;               /* transfers in flight */
	struct lvl lv[TIER_LEVELS];
	uint32_t *pos;               /* positions in the schedule, ascending */
	uint32_t npos, pos_cap;
	void *user;                  /* store_obj_set_user */
};

struct level {
	bool present;
	uint64_t capacity;
	struct buddy alloc;
	uint64_t evict_pending;      /* slot bytes that evicting flushes will free */
	uint32_t room_waiters;       /* acquires waiting for room: prefetches yield to them */
	struct tier_obj *head, *tail;
	uint64_t nres;
	uint64_t hits, misses, evictions, writebacks, bytes_in, bytes_out;
	uint64_t prefetches, prefetch_skipped, errors;
};

enum rq_kind { RQ_ACQUIRE, RQ_PREFETCH, RQ_FLUSH };

struct req {
	enum rq_kind kind;
	struct tier_obj *o;
	enum tier_level level;
	unsigned mode;
	void **ptr;
	struct tier_ticket *tk;      /* NULL for prefetches */
	uint64_t id;
	bool counted;                /* hit or miss recorded */
	bool force;                  /* flush even under a write pin (close) */
	int room_level;              /* the level it waits for room on, or -1 */
	struct req *prev, *next;
};

struct xfer {
	struct tier_store *s;
	struct tier_obj *o;
	enum tier_level upper;       /* the copy is between upper and upper + 1 */
	bool down;                   /* flush (upper -> lower) or fill */
	bool zero;                   /* fill from a home never written: zeros */
	uint64_t cause;              /* the request whose room this eviction makes */
	int sync_rc;                 /* a completion on the issuing thread */
	char sync_detail[256];
	struct xfer *next;
};

struct tier_store {
	pthread_mutex_t lock;
	pthread_cond_t idle;         /* an object's or the store's transfers drained */
	struct level lv[TIER_LEVELS];
	enum tier_level home;
	char name[TIER_NAME_MAX + 1];

	struct dram_arena *dram;
	char *dram_base;
	struct dram_info dinfo;
	const struct hbm_ops *hops;
	struct hbm_dev *hdev;
	struct tier_nvme *nvme;
	enum tier_policy policy;

	struct tier_obj **objs;
	uint32_t nobjs, objs_cap;
	struct tier_obj **hash;
	uint32_t nbuckets;

	struct req *rq_head, *rq_tail;
	uint64_t next_id;
	struct xfer *todo, *todo_tail;
	uint64_t nxfers;             /* transfers queued or in flight */

	struct tier_obj **sched;
	uint32_t nsched, cursor;

	uint64_t tick, changes;
	store_hook hook;
	void *hook_arg;

	struct tier_config cfg;      /* the manifest's, without the paths */

	void *live;                  /* the stats publisher (runtime/live.c) */
	void (*live_stop)(void *live);
};

const char *tier_level_name(enum tier_level level)
{
	switch (level) {
	case TIER_HBM: return "hbm";
	case TIER_DRAM: return "dram";
	case TIER_NVME: return "nvme";
	}
	return "?";
}

static void emit(struct tier_store *s, enum store_event ev, enum tier_level l,
		 const struct tier_obj *o)
{
	if (s->hook)
		s->hook(s->hook_arg, ev, l, o);
}

void store_set_hook(struct tier_store *s, store_hook fn, void *arg)
{
	pthread_mutex_lock(&s->lock);
	s->hook = fn;
	s->hook_arg = arg;
	pthread_mutex_unlock(&s->lock);
}

static char *level_ptr(struct tier_store *s, struct tier_obj *o, enum tier_level l)
{
	if (l == TIER_DRAM)
		return s->dram_base + o->lv[TIER_DRAM].off;
	return s->hops->dev_ptr(s->hdev, o->lv[TIER_HBM].off);
}

static uint64_t slot_bytes(struct tier_store *s, enum tier_level l, const struct tier_obj *o)
{
	return buddy_slot_size(&s->lv[l].alloc, o->size);
}

static const char *fmt_size(uint64_t b, char *buf, size_t len)
{
	return ts_size_fmt(b, buf, len);
}

/* ---------------------------------------------------------- resident lists */

static void resident_add(struct tier_store *s, enum tier_level l, struct tier_obj *o)
{
	struct level *lv = &s->lv[l];
	struct lvl *x = &o->lv[l];

	x->prev = lv->tail;
	x->next = NULL;
	if (lv->tail)
		lv->tail->lv[l].next = o;
	else
		lv->head = o;
	lv->tail = o;
	lv->nres++;
}

static void resident_remove(struct tier_store *s, enum tier_level l, struct tier_obj *o)
{
	struct level *lv = &s->lv[l];
	struct lvl *x = &o->lv[l];

	if (x->prev)
		x->prev->lv[l].next = x->next;
	else
		lv->head = x->next;
	if (x->next)
		x->next->lv[l].prev = x->prev;
	else
		lv->tail = x->prev;
	x->prev = x->next = NULL;
	lv->nres--;
}

/* Frees level @l's slot of @o (a clean copy, or one whose flush just
 * completed).  The caller has checked that nothing uses it. */
static void drop(struct tier_store *s, struct tier_obj *o, enum tier_level l)
{
	struct lvl *x = &o->lv[l];

	if (x->evicting) {
		s->lv[l].evict_pending -= slot_bytes(s, l, o);
		x->evicting = false;
	}
	buddy_free(&s->lv[l].alloc, x->off, o->size);
	resident_remove(s, l, o);
	x->st = ST_ABSENT;
	x->written = false;
	s->changes++;
	emit(s, STORE_EV_DROP, l, o);
}

/* ---------------------------------------------------------------- schedule */

/* Distance from the cursor to the object's next use, in [1, nsched]. */
static uint64_t next_use(const struct tier_store *s, const struct tier_obj *o)
{
	uint32_t c = s->cursor, lo = 0, hi = o->npos;

	if (!o->npos)
		return DIST_NONE;
	while (lo < hi) { /* first position > c */
		uint32_t mid = lo + (hi - lo) / 2;

		if (o->pos[mid] > c)
			hi = mid;
		else
			lo = mid + 1;
	}
	if (lo < o->npos)
		return o->pos[lo] - c;
	return (uint64_t)o->pos[0] + s->nsched - c;
}

static void sched_advance(struct tier_store *s, const struct tier_obj *o)
{
	if (o->npos)
		s->cursor = (uint32_t)((s->cursor + next_use(s, o)) % s->nsched);
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
static void room_wait(struct tier_store *s, struct req *r, int l)
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
static void rq_finish(struct tier_store *s, struct req *r, int rc, const char *why)
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
	room_wait(s, r, -1);
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
static void rq_fail_obj(struct tier_store *s, struct tier_obj *o, bool (*pred)(struct req *, int),
			int arg, uint64_t cause, int rc, const char *why)
{
	struct req *r = s->rq_head, *next;

	for (; r; r = next) {
		next = r->next;
		if ((r->o == o && pred(r, arg)) || (cause && r->id == cause))
			rq_finish(s, r, rc, why);
	}
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

static bool any_req(struct req *r, int arg)
{
	(void)r;
	(void)arg;
	return true;
}

/* --------------------------------------------------------------- transfers */

static void xfer_queue(struct tier_store *s, struct tier_obj *o, enum tier_level upper, bool down,
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
	emit(s, down ? STORE_EV_FLUSH_START : STORE_EV_FILL_START, upper, o);
}

static void xfer_complete(struct xfer *x, int rc, const char *detail);
static void pump(struct tier_store *s);
static void unlock_and_issue(struct tier_store *s);

/* A transfer's completion from the NVMe tier or an HBM backend thread. */
static void xfer_cb(void *arg, int rc, const char *detail)
{
	struct xfer *x = arg;
	struct tier_store *s = x->s;

	pthread_mutex_lock(&s->lock);
	xfer_complete(x, rc, detail);
	pump(s);
	unlock_and_issue(s);
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
	int rc = tier_fault_check(TIER_FAULT_STORE_IO);

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
static void unlock_and_issue(struct tier_store *s)
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
			pump(s);
		}
	}
	pthread_mutex_unlock(&s->lock);
}

static void start_flush(struct tier_store *s, struct tier_obj *o, enum tier_level u, uint64_t cause,
			struct xfer *x)
{
	o->lv[u].st = ST_FLUSHING;
	if (u + 1 != s->home)
		o->lv[u + 1].iopins++;
	s->changes++;
	xfer_queue(s, o, u, true, cause, x);
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
			emit(s, STORE_EV_FILL_DONE, u, o);
		} else {
			s->lv[u].errors++;
			snprintf(why, sizeof(why), "%s: fill of '%s' from %s failed: %s",
				 tier_level_name(u), o->name, tier_level_name(l), detail);
			TIER_WARN(TIER_SS_STORE, "%s", why);
			drop(s, o, u);
			rq_fail_obj(s, o, needs_fill, (int)u, 0, rc, why);
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
			emit(s, STORE_EV_FLUSH_DONE, u, o);
			if (up->evicting) {
				drop(s, o, u);
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
				s->lv[u].evict_pending -= slot_bytes(s, u, o);
				up->evicting = false;
			}
			rq_fail_obj(s, o, needs_flush, (int)u, x->cause, rc, why);
		}
	}
	s->changes++;
	o->busy--;
	s->nxfers--;
	if (!o->busy || !s->nxfers)
		pthread_cond_broadcast(&s->idle);
	free(x);
}

/* ---------------------------------------------------------------- eviction */

static bool pinned(const struct lvl *x)
{
	return x->rpins || x->wpins || x->iopins;
}

/* Whether @v's slot on @l may be chosen as a victim now. */
static bool evictable(struct tier_store *s, struct tier_obj *v, enum tier_level l)
{
	struct lvl *x = &v->lv[l];

	if ((x->st != ST_CLEAN && x->st != ST_DIRTY) || pinned(x) || x->want || v->destroying)
		return false;
	if (l == TIER_HBM && x->st == ST_DIRTY && v->lv[TIER_DRAM].st == ST_FLUSHING)
		return false; /* its write-back would change bytes being written below */
	if (l == TIER_DRAM && s->lv[TIER_HBM].present) {
		struct lvl *h = &v->lv[TIER_HBM];

		/* Inclusion: a DRAM victim takes an idle HBM copy with it,
		 * written back first when dirty. */
		if (h->st != ST_ABSENT &&
		    ((h->st != ST_CLEAN && h->st != ST_DIRTY) || pinned(h) || h->want))
			return false;
		if (h->st == ST_DIRTY && x->st == ST_FLUSHING)
			return false;
	}
	return true;
}

/* Whether the slot of @v on @l stands in the way for good (pinned, or
 * about to be by a queued acquire), not just until a transfer completes. */
static bool held(struct tier_store *s, struct tier_obj *v, enum tier_level l)
{
	struct lvl *x = &v->lv[l];

	if (x->rpins || x->wpins || x->want)
		return true;
	if (l == TIER_DRAM && s->lv[TIER_HBM].present) {
		struct lvl *h = &v->lv[TIER_HBM];

		return h->rpins || h->wpins || h->want;
	}
	return false;
}

/* The policy's victim on @l for request @r (on object @o), or NULL. */
static struct tier_obj *pick_victim(struct tier_store *s, enum tier_level l, struct req *r,
				    struct tier_obj *o)
{
	struct tier_obj *best = NULL, *v;
	uint64_t best_d = 0, floor = 0;
	bool belady = s->policy == TIER_POLICY_BELADY;

	/* A prefetch never evicts what is needed before the object it brings. */
	if (r->kind == RQ_PREFETCH && belady)
		floor = next_use(s, o);
	for (v = s->lv[l].head; v; v = v->lv[l].next) {
		uint64_t d;

		if (v == o || !evictable(s, v, l))
			continue;
		if (!belady) {
			if (!best || v->lv[l].last_use < best->lv[l].last_use)
				best = v;
			continue;
		}
		d = next_use(s, v);
		if (r->kind == RQ_PREFETCH && (floor == DIST_NONE || d <= floor))
			continue;
		if (!best || d > best_d || (d == best_d && v->lv[l].last_use < best->lv[l].last_use)) {
			best = v;
			best_d = d;
		}
	}
	return best;
}

/* Starts evicting @v from @l: a clean copy goes at once, a dirty one is
 * written back first.  -ENOMEM when no memory for the transfer. */
static int evict(struct tier_store *s, struct tier_obj *v, enum tier_level l, uint64_t cause)
{
	struct lvl *x = &v->lv[l];
	struct xfer *xf = NULL;

	if (l == TIER_DRAM && s->lv[TIER_HBM].present && v->lv[TIER_HBM].st == ST_DIRTY) {
		/* The newer bytes above come down first; the DRAM slot is
		 * chosen again once they have (returns 1: wait). */
		int rc = evict(s, v, TIER_HBM, cause);

		return rc ? rc : 1;
	}
	if (x->st == ST_DIRTY && !(xf = ts_malloc(sizeof(*xf))))
		return ts_err(-ENOMEM, "%s: out of memory evicting '%s'", tier_level_name(l), v->name);
	s->lv[l].evictions++;
	emit(s, STORE_EV_EVICT, l, v);
	if (l == TIER_DRAM && s->lv[TIER_HBM].present && v->lv[TIER_HBM].st == ST_CLEAN) {
		s->lv[TIER_HBM].evictions++;
		emit(s, STORE_EV_EVICT, TIER_HBM, v);
		drop(s, v, TIER_HBM);
	}
	if (x->st == ST_CLEAN) {
		drop(s, v, l);
		return 0;
	}
	x->evicting = true;
	s->lv[l].evict_pending += slot_bytes(s, l, v);
	start_flush(s, v, l, cause, xf);
	return 0;
}

static int no_room(struct tier_store *s, enum tier_level l, struct tier_obj *o)
{
	struct level *lv = &s->lv[l];
	uint64_t npinned = 0, pbytes = 0;
	char a[32], b[32], c[32];

	for (struct tier_obj *v = lv->head; v; v = v->lv[l].next) {
		if (held(s, v, l)) {
			npinned++;
			pbytes += slot_bytes(s, l, v);
		}
	}
	return ts_err(-ENOMEM,
			"%s: no room for '%s' (%s): %" PRIu64 " of %" PRIu64
			" resident objects (%s of %s) are pinned or about to be, and the rest cannot make room",
			tier_level_name(l), o->name, fmt_size(o->size, a, sizeof(a)), npinned,
			lv->nres, fmt_size(pbytes, b, sizeof(b)), fmt_size(lv->capacity, c, sizeof(c)));
}

/* The buddy block a slot of @need bytes is carved from. */
static uint64_t block_for(const struct buddy *b, uint64_t need)
{
	uint64_t blk = b->min_block;

	while (blk < need)
		blk <<= 1;
	return blk;
}

/*
 * With no victim to evict on @l: 0 when a block of the size @o needs is
 * only held by transfers or write-backs under way (wait for them), or
 * -ENOMEM when pins (and queued acquires) cover every such block.
 */
static int room_possible(struct tier_store *s, enum tier_level l, struct tier_obj *o)
{
	struct level *lv = &s->lv[l];
	uint64_t blk = block_for(&lv->alloc, o->size), nb = lv->alloc.size / blk;
	uint8_t *mark;
	int rc = -ENOMEM;

	if (nb > (1u << 20) || !(mark = ts_calloc(nb, 1)))
		return 0; /* cannot tell: wait for the next event */
	for (struct tier_obj *v = lv->head; v; v = v->lv[l].next) {
		uint64_t off = v->lv[l].off, end = off + slot_bytes(s, l, v);
		uint8_t m = held(s, v, l) ? 2 : 1;

		if (v == o)
			continue;
		for (uint64_t k = off / blk; k < nb && k * blk < end; k++)
			if (mark[k] < m)
				mark[k] = m;
	}
	for (uint64_t k = 0; k < nb; k++)
		if (mark[k] < 2)
			rc = 0;
	free(mark);
	return rc ? no_room(s, l, o) : 0;
}

/*
 * A slot for @o on @l: 1 and *off, 0 (room is being made: wait), -EAGAIN
 * (a prefetch the policy declines, or one that would take room an acquire
 * waits for), or a negative errno with the detail.
 */
static int make_room(struct tier_store *s, struct req *r, struct tier_obj *o, enum tier_level l,
		     uint64_t *off)
{
	struct level *lv = &s->lv[l];
	uint64_t need = slot_bytes(s, l, o), blk = block_for(&lv->alloc, o->size), top = lv->alloc.min_block;
	char a[32], b[32];

	while (top <= lv->alloc.size / 2)
		top <<= 1;
	if (need > lv->capacity || blk > top)
		return ts_err(-E2BIG, "%s: '%s' (%s) is larger than the largest slot of the tier (%s)",
				tier_level_name(l), o->name, fmt_size(o->size, a, sizeof(a)),
				fmt_size(top, b, sizeof(b)));
	if (r->kind == RQ_PREFETCH && lv->room_waiters)
		return -EAGAIN;
	for (;;) {
		struct tier_obj *v;
		int rc;

		if (buddy_alloc(&lv->alloc, o->size, off) == 0) {
			room_wait(s, r, -1);
			s->changes++;
			return 1;
		}
		if (lv->evict_pending >= need)
			break;
		v = pick_victim(s, l, r, o);
		if (!v) {
			if (lv->evict_pending)
				break;
			if (r->kind == RQ_PREFETCH)
				return -EAGAIN;
			if ((rc = room_possible(s, l, o)) == 0)
				break;
			room_wait(s, r, -1);
			return rc;
		}
		rc = evict(s, v, l, r->id);
		if (rc < 0)
			return rc;
		if (rc > 0)
			break;
	}
	if (r->kind != RQ_PREFETCH)
		room_wait(s, r, (int)l);
	return 0;
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
			s->lv[l].evict_pending -= slot_bytes(s, l, o);
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
	rc = make_room(s, r, o, l, &off);
	if (rc <= 0) {
		free(xf);
		return rc;
	}
	x->st = ST_FILLING;
	x->off = off;
	resident_add(s, l, o);
	if (l + 1 != s->home)
		o->lv[l + 1].iopins++;
	if (r->kind == RQ_PREFETCH)
		s->lv[l].prefetches++;
	xfer_queue(s, o, l, false, 0, xf);
	return 0;
}

/* Fails @r, taking the detail from tier_last_error(). */
static void rq_fail(struct tier_store *s, struct req *r, int rc)
{
	char why[TIER_ERR_MAX];

	snprintf(why, sizeof(why), "%s", tier_last_error());
	rq_finish(s, r, rc, why);
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
		start_flush(s, o, TIER_HBM, 0, xf);
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
		emit(s, hit ? STORE_EV_HIT : STORE_EV_MISS, l, o);
	}
	if ((r->mode & TIER_ACQUIRE_DISCARD) && l != s->home && x->st == ST_ABSENT) {
		uint64_t off;

		/* The caller overwrites every byte: a slot, no fill. */
		if ((rc = ensure(s, r, o, l + 1)) > 0 && (rc = make_room(s, r, o, l, &off)) > 0) {
			x->st = ST_DIRTY;
			x->written = true;
			x->off = off;
			resident_add(s, l, o);
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
			if (y->st != ST_CLEAN || pinned(y))
				return;
			drop(s, o, (enum tier_level)u);
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
	rq_finish(s, r, 0, NULL);
}

static void step_prefetch(struct tier_store *s, struct req *r)
{
	int rc = conflicts(s, r);

	if (rc) { /* in use elsewhere: nothing to do */
		rq_finish(s, r, 0, NULL);
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
		rq_finish(s, r, 0, NULL);
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
		start_flush(s, o, (enum tier_level)u, 0, xf);
		return;
	}
	rq_finish(s, r, 0, NULL);
}

/* Re-evaluates every pending request until a pass changes nothing. */
static void pump(struct tier_store *s)
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
	pump(s);
	unlock_and_issue(s);
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
	sched_advance(s, o);
	submit_locked(s, r);
	return 0;
}

int tier_obj_acquire(struct tier_store *s, struct tier_obj *o, enum tier_level level, unsigned mode,
		 void **ptr)
{
	struct tier_ticket *tk;
	int rc = tier_obj_acquire_async(s, o, level, mode, ptr, &tk);

	return rc ? rc : tier_ticket_wait(tk);
}

int tier_obj_release(struct tier_store *s, struct tier_obj *o, enum tier_level level, bool dirty)
{
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
	pump(s);
	unlock_and_issue(s);
	return 0;
}

int tier_obj_prefetch(struct tier_store *s, struct tier_obj *o, enum tier_level level)
{
	struct req *r;
	int rc;

	if ((rc = check_level(s, o, level)))
		return rc;
	if (slot_bytes(s, level, o) > s->lv[level].capacity)
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
	pump(s);
	unlock_and_issue(s);
	return 0;
}

int tier_obj_flush(struct tier_store *s, struct tier_obj *o)
{
	struct tier_ticket *tk;
	int rc;

	pthread_mutex_lock(&s->lock);
	rc = flush_queue(s, o, false, &tk);
	if (rc) {
		pthread_mutex_unlock(&s->lock);
		return rc;
	}
	pump(s);
	unlock_and_issue(s);
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
static int flush_all(struct tier_store *s, bool force)
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
	pump(s);
	unlock_and_issue(s);
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
	return flush_all(s, false);
}

int tier_obj_write(struct tier_store *s, struct tier_obj *o, uint64_t off, uint64_t len,
		   const void *buf)
{
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

/* ----------------------------------------------------------------- objects */

static uint32_t name_hash(const char *name)
{
	uint32_t h = 2166136261u;

	for (; *name; name++)
		h = (h ^ (unsigned char)*name) * 16777619u;
	return h;
}

static struct tier_obj *find_locked(struct tier_store *s, const char *name)
{
	struct tier_obj *o = s->hash[name_hash(name) & (s->nbuckets - 1)];

	while (o && strcmp(o->name, name))
		o = o->hnext;
	return o;
}

static int hash_grow(struct tier_store *s)
{
	uint32_t n = s->nbuckets * 2;
	struct tier_obj **h = ts_calloc(n, sizeof(*h));

	if (!h)
		return -ENOMEM;
	for (uint32_t i = 0; i < s->nbuckets; i++) {
		struct tier_obj *o = s->hash[i], *next;

		for (; o; o = next) {
			uint32_t b = name_hash(o->name) & (n - 1);

			next = o->hnext;
			o->hnext = h[b];
			h[b] = o;
		}
	}
	free(s->hash);
	s->hash = h;
	s->nbuckets = n;
	return 0;
}

int tier_obj_create(struct tier_store *s, const char *name, uint64_t size, struct tier_obj **out)
{
	struct tier_obj *o = NULL;
	uint32_t b;
	int rc;

	*out = NULL;
	if (!name || !*name || strlen(name) > OBJ_NAME_MAX)
		return ts_err(-EINVAL, "object name must be 1 to %d bytes", OBJ_NAME_MAX);
	if (!size)
		return ts_err(-EINVAL, "'%s': size 0", name);
	pthread_mutex_lock(&s->lock);
	if (find_locked(s, name)) {
		rc = ts_err(-EEXIST, "object '%s' exists", name);
		goto out;
	}
	if (s->nobjs == s->objs_cap) {
		uint32_t cap = s->objs_cap ? s->objs_cap * 2 : 64;
		struct tier_obj **a = ts_realloc(s->objs, cap * sizeof(*a));

		if (!a) {
			rc = ts_err(-ENOMEM, "out of memory creating '%s'", name);
			goto out;
		}
		s->objs = a;
		s->objs_cap = cap;
	}
	if (s->nobjs >= s->nbuckets && hash_grow(s)) {
		rc = ts_err(-ENOMEM, "out of memory creating '%s'", name);
		goto out;
	}
	o = ts_calloc(1, sizeof(*o));
	if (!o || !(o->name = ts_strdup(name))) {
		rc = ts_err(-ENOMEM, "out of memory creating '%s'", name);
		goto out;
	}
	o->s = s;
	o->size = size;
	if (s->home == TIER_NVME) {
		rc = tier_nvme_obj_create(s->nvme, name, size, &o->nobj);
		if (rc)
			goto out;
	} else {
		char a[32], c[32];
		struct buddy_stats st;

		if (slot_bytes(s, TIER_DRAM, o) > s->lv[TIER_DRAM].capacity ||
		    buddy_alloc(&s->lv[TIER_DRAM].alloc, size, &o->lv[TIER_DRAM].off)) {
			buddy_stats(&s->lv[TIER_DRAM].alloc, &st);
			rc = ts_err(-ENOSPC,
				      "dram (the home: no nvme tier): no room for '%s' (%s); %s free, the largest slot %s",
				      name, fmt_size(size, a, sizeof(a)), fmt_size(st.free, c, sizeof(c)),
				      fmt_size(st.largest_free, a, sizeof(a)));
			goto out;
		}
		memset(s->dram_base + o->lv[TIER_DRAM].off, 0, size);
		resident_add(s, TIER_DRAM, o);
		o->lv[TIER_DRAM].st = ST_CLEAN;
	}
	o->idx = s->nobjs;
	s->objs[s->nobjs++] = o;
	b = name_hash(name) & (s->nbuckets - 1);
	o->hnext = s->hash[b];
	s->hash[b] = o;
	*out = o;
	o = NULL;
	rc = 0;
out:
	pthread_mutex_unlock(&s->lock);
	if (o) {
		free(o->name);
		free(o);
	}
	return rc;
}

struct tier_obj *tier_obj_find(struct tier_store *s, const char *name)
{
	struct tier_obj *o;

	pthread_mutex_lock(&s->lock);
	o = find_locked(s, name);
	pthread_mutex_unlock(&s->lock);
	return o;
}

uint64_t tier_obj_size(const struct tier_obj *o)
{
	return o->size;
}

const char *tier_obj_name(const struct tier_obj *o)
{
	return o->name;
}

/* Removes @o's positions from the schedule and renumbers (lock held). */
static void sched_remove(struct tier_store *s, struct tier_obj *o)
{
	uint32_t j = 0;

	if (!o->npos)
		return;
	for (uint32_t i = 0; i < s->nsched; i++)
		if (s->sched[i] != o)
			s->sched[j++] = s->sched[i];
	s->nsched = j;
	for (uint32_t i = 0; i < s->nobjs; i++)
		s->objs[i]->npos = 0;
	for (uint32_t i = 0; i < s->nsched; i++) {
		struct tier_obj *x = s->sched[i];

		x->pos[x->npos++] = i; /* never more than before: no growth */
	}
	s->cursor = s->nsched ? s->nsched - 1 : 0;
	free(o->pos);
	o->pos = NULL;
	o->npos = o->pos_cap = 0;
}

int tier_obj_destroy(struct tier_store *s, struct tier_obj *o)
{
	struct tier_nvme_obj *nobj;
	uint32_t b;

	pthread_mutex_lock(&s->lock);
	for (int l = 0; l < TIER_LEVELS; l++) {
		if (o->lv[l].rpins || o->lv[l].wpins) {
			pthread_mutex_unlock(&s->lock);
			return ts_err(-EBUSY, "'%s' is pinned on %s", o->name,
					tier_level_name((enum tier_level)l));
		}
	}
	o->destroying = true;
	rq_fail_obj(s, o, any_req, 0, 0, -ECANCELED, "the object was destroyed");
	while (o->busy)
		pthread_cond_wait(&s->idle, &s->lock);
	for (int l = 0; l < TIER_LEVELS; l++)
		if (s->lv[l].present && (l != TIER_NVME) && o->lv[l].st != ST_ABSENT)
			drop(s, o, (enum tier_level)l);
	sched_remove(s, o);
	s->objs[o->idx] = s->objs[--s->nobjs];
	s->objs[o->idx]->idx = o->idx;
	b = name_hash(o->name) & (s->nbuckets - 1);
	for (struct tier_obj **pp = &s->hash[b]; *pp; pp = &(*pp)->hnext) {
		if (*pp == o) {
			*pp = o->hnext;
			break;
		}
	}
	nobj = o->nobj;
	s->changes++;
	pump(s);
	unlock_and_issue(s);
	if (nobj)
		tier_nvme_obj_destroy(s->nvme, nobj);
	free(o->name);
	free(o);
	return 0;
}

int tier_store_set_schedule(struct tier_store *s, struct tier_obj *const *objs, size_t n)
{
	struct tier_obj **sched = NULL;
	int rc = 0;

	if (n > UINT32_MAX - 1)
		return ts_err(-EINVAL, "schedule of %zu entries is too long", n);
	if (n && !(sched = ts_malloc(n * sizeof(*sched))))
		return ts_err(-ENOMEM, "out of memory for a schedule of %zu", n);
	pthread_mutex_lock(&s->lock);
	for (size_t i = 0; i < n; i++) {
		if (!objs[i] || objs[i]->s != s || objs[i]->destroying) {
			rc = ts_err(-EINVAL, "schedule entry %zu is not an object of this store", i);
			goto out;
		}
	}
	/* Room for every object's positions first, so nothing fails halfway. */
	for (size_t i = 0; i < n; i++)
		objs[i]->npos = 0;
	for (size_t i = 0; i < n; i++)
		objs[i]->npos++;
	for (size_t i = 0; i < n; i++) {
		struct tier_obj *o = objs[i];

		if (o->npos > o->pos_cap) {
			uint32_t *p = ts_realloc(o->pos, o->npos * sizeof(*p));

			if (!p) {
				rc = ts_err(-ENOMEM, "out of memory for the schedule");
				break;
			}
			o->pos = p;
			o->pos_cap = o->npos;
		}
	}
	for (uint32_t i = 0; i < s->nobjs; i++)
		s->objs[i]->npos = 0;
	if (rc) {
		/* the old schedule's positions are rebuilt below from s->sched */
		free(sched);
		sched = s->sched;
		n = s->nsched;
	} else {
		memcpy(sched, objs, n * sizeof(*sched));
		free(s->sched);
	}
	s->sched = sched;
	s->nsched = (uint32_t)n;
	for (uint32_t i = 0; i < s->nsched; i++) {
		struct tier_obj *o = s->sched[i];

		o->pos[o->npos++] = i;
	}
	s->cursor = s->nsched ? s->nsched - 1 : 0;
	sched = NULL;
out:
	pthread_mutex_unlock(&s->lock);
	free(sched);
	return rc;
}

/* ---------------------------------------------------------- stats, checks */

void tier_store_get_stats(struct tier_store *s, struct tier_store_stats *out)
{
	memset(out, 0, sizeof(*out));
	pthread_mutex_lock(&s->lock);
	out->objects = s->nobjs;
	out->policy = s->policy;
	out->schedule_len = s->nsched;
	for (int l = 0; l < TIER_LEVELS; l++) {
		struct level *lv = &s->lv[l];
		struct tier_level_stats *st = &out->level[l];
		struct buddy_stats bs;

		st->present = lv->present;
		if (!lv->present)
			continue;
		if (l == TIER_NVME) {
			struct tier_nvme_stats ns;

			tier_nvme_get_stats(s->nvme, &ns);
			snprintf(st->backend, sizeof(st->backend), "nvme");
			st->capacity = ns.capacity;
			st->used = ns.capacity - ns.free;
			st->objects = s->nobjs;
			st->bytes_in = ns.bytes_written;
			st->bytes_out = ns.bytes_read;
			st->errors = ns.errors;
			continue;
		}
		snprintf(st->backend, sizeof(st->backend), "%s",
			 l == TIER_DRAM ? "dram" : s->hops->name);
		buddy_stats(&lv->alloc, &bs);
		st->capacity = lv->capacity;
		st->used = bs.used;
		st->largest_free = bs.largest_free;
		st->fragmentation = bs.fragmentation;
		st->objects = lv->nres;
		st->hits = lv->hits;
		st->misses = lv->misses;
		st->evictions = lv->evictions;
		st->writebacks = lv->writebacks;
		st->bytes_in = lv->bytes_in;
		st->bytes_out = lv->bytes_out;
		st->prefetches = lv->prefetches;
		st->prefetch_skipped = lv->prefetch_skipped;
		st->errors = lv->errors;
		for (struct tier_obj *o = lv->head; o; o = o->lv[l].next) {
			if (o->lv[l].rpins || o->lv[l].wpins)
				st->pinned += slot_bytes(s, (enum tier_level)l, o);
			if (o->lv[l].st == ST_DIRTY || o->lv[l].st == ST_FLUSHING)
				st->dirty += o->size;
		}
		if (l == TIER_DRAM) {
			st->huge_pages = s->dinfo.hugetlb;
			st->thp = s->dinfo.thp;
			st->locked = s->dinfo.locked;
			st->numa_bound = s->dinfo.numa_bound;
			st->numa_node = s->dinfo.numa_node;
			st->cuda_registered = s->dinfo.cuda_registered;
		}
	}
	pthread_mutex_unlock(&s->lock);
}

#define BAD(...) do { rc = ts_err(-EUCLEAN, "store invariant: " __VA_ARGS__); goto out; } while (0)

int tier_store_validate(struct tier_store *s)
{
	int rc = 0;

	pthread_mutex_lock(&s->lock);
	for (int l = 0; l < (int)s->home + (s->home == TIER_DRAM); l++) {
		struct level *lv = &s->lv[l];
		const char *ln = tier_level_name((enum tier_level)l);
		uint64_t used = 0, n = 0, evicting = 0;

		if (!lv->present)
			continue;
		if (!buddy_valid(&lv->alloc))
			BAD("%s: slot allocator inconsistent", ln);
		for (struct tier_obj *o = lv->head; o; o = o->lv[l].next) {
			if (o->lv[l].st == ST_ABSENT)
				BAD("%s: '%s' on the resident list but absent", ln, o->name);
			used += slot_bytes(s, (enum tier_level)l, o);
			if (o->lv[l].evicting)
				evicting += slot_bytes(s, (enum tier_level)l, o);
			n++;
		}
		if (n != lv->nres)
			BAD("%s: %" PRIu64 " objects listed, %" PRIu64 " counted", ln, n, lv->nres);
		if (used != lv->alloc.used)
			BAD("%s: objects hold %" PRIu64 " bytes, the allocator %" PRIu64, ln, used,
			    lv->alloc.used);
		if (used > lv->capacity)
			BAD("%s: %" PRIu64 " bytes used of %" PRIu64, ln, used, lv->capacity);
		if (evicting != lv->evict_pending)
			BAD("%s: evicting objects hold %" PRIu64 " bytes, %" PRIu64 " accounted", ln,
			    evicting, lv->evict_pending);
	}
	for (uint32_t i = 0; i < s->nobjs; i++) {
		struct tier_obj *o = s->objs[i];

		if (o->idx != i || find_locked(s, o->name) != o)
			BAD("object table: '%s' misplaced", o->name);
		for (int l = 0; l < TIER_LEVELS; l++) {
			struct lvl *x = &o->lv[l];
			const char *ln = tier_level_name((enum tier_level)l);
			bool res = x->st != ST_ABSENT;

			if (!s->lv[l].present || l == TIER_NVME) {
				if (res || x->rpins || x->wpins)
					BAD("'%s': state on %s, which holds no slots", o->name, ln);
				continue;
			}
			if ((x->rpins || x->wpins) && !(x->st == ST_CLEAN || x->st == ST_DIRTY ||
						       x->st == ST_FLUSHING))
				BAD("'%s': pinned on %s while %s", o->name, ln, st_names[x->st]);
			if (x->wpins && x->st == ST_FLUSHING)
				BAD("'%s': written on %s while it is flushed", o->name, ln);
			if ((x->st == ST_DIRTY || x->st == ST_FLUSHING) && !x->written)
				BAD("'%s': %s on %s without a writer", o->name, st_names[x->st], ln);
			if ((enum tier_level)l == s->home && (x->st != ST_CLEAN || x->evicting))
				BAD("'%s': home copy on %s is %s", o->name, ln, st_names[x->st]);
			if (x->evicting && x->st != ST_FLUSHING)
				BAD("'%s': evicting on %s while %s", o->name, ln, st_names[x->st]);
			if (x->wpins) {
				for (int k = 0; k < TIER_LEVELS; k++) {
					if (k == l)
						continue;
					if (o->lv[k].rpins || o->lv[k].wpins)
						BAD("'%s': pinned on %s while pinned for write on %s",
						    o->name, tier_level_name((enum tier_level)k), ln);
					if (k < l && o->lv[k].st != ST_ABSENT)
						BAD("'%s': a copy on %s above a write pin on %s", o->name,
						    tier_level_name((enum tier_level)k), ln);
				}
			}
		}
		if (s->lv[TIER_HBM].present && o->lv[TIER_HBM].st != ST_ABSENT) {
			uint8_t d = o->lv[TIER_DRAM].st;

			if (d != ST_CLEAN && d != ST_DIRTY && d != ST_FLUSHING)
				BAD("'%s': on hbm but %s on dram (inclusion)", o->name, st_names[d]);
			if ((o->lv[TIER_HBM].st == ST_DIRTY || o->lv[TIER_HBM].st == ST_FLUSHING) &&
			    (o->lv[TIER_DRAM].rpins || o->lv[TIER_DRAM].wpins))
				BAD("'%s': pinned on dram under newer bytes on hbm", o->name);
		}
	}
out:
	pthread_mutex_unlock(&s->lock);
	return rc;
}

/* ---------------------------------------------------------------- lifetime */

bool tier_store_has_level(const struct tier_store *s, enum tier_level level)
{
	return (unsigned)level < TIER_LEVELS && s->lv[level].present;
}

enum tier_level tier_store_home(const struct tier_store *s)
{
	return s->home;
}

struct tier_nvme *tier_store_nvme(struct tier_store *s)
{
	return s->nvme;
}

/* The slot allocator's block: at least 4 KiB (O_DIRECT), at most 2^20
 * blocks per level. */
static uint64_t min_block(uint64_t capacity)
{
	uint64_t b = 4096;

	while ((capacity >> MAX_BLOCKS_LOG2) > b)
		b <<= 1;
	return b;
}

static void store_free(struct tier_store *s)
{
	for (uint32_t i = 0; i < s->nobjs; i++) {
		free(s->objs[i]->pos);
		free(s->objs[i]->name);
		free(s->objs[i]);
	}
	free(s->objs);
	free(s->hash);
	free(s->sched);
	for (int l = 0; l < TIER_LEVELS; l++)
		if (s->lv[l].alloc.impl)
			buddy_fini(&s->lv[l].alloc);
	if (s->hdev)
		s->hops->close(s->hdev);
	if (s->nvme)
		tier_nvme_close(s->nvme);
	if (s->dram)
		dram_arena_close(s->dram);
	pthread_mutex_destroy(&s->lock);
	pthread_cond_destroy(&s->idle);
	free(s);
}

static int open_hbm(struct tier_store *s, const struct tier_config *cfg,
		    const struct tier_store_params *p)
{
	const char *name = p->hbm_backend;
	struct hbm_params hp = { 0 };
	uint64_t cap;
	int rc;

	if (!name)
		name = cfg->gpu >= 0 ? "cuda" : "none";
	if (!strcmp(name, "none"))
		return 0;
	s->hops = hbm_backend_find(name);
	if (!s->hops) {
		if (!p->hbm_backend) /* a GPU in the manifest, a build without CUDA */
			return 0;
		return ts_err(-ENODEV, "hbm: no backend '%s' (this build has: %s, none)", name,
				hbm_backend_names());
	}
	hp.capacity = p->hbm_capacity ? p->hbm_capacity : cfg->hbm_capacity;
	hp.gpu = cfg->gpu;
	hp.bandwidth = p->hbm_bandwidth;
	if (!hp.capacity)
		return ts_err(-EINVAL, "hbm: backend '%s' needs a capacity (hbm_capacity)", name);
	if (p->hbm_bandwidth < 0)
		return ts_err(-EINVAL, "hbm: bandwidth %g is negative", p->hbm_bandwidth);
	if ((rc = s->hops->open(&hp, &s->hdev))) {
		s->hdev = NULL;
		ts_err_prefix("hbm (%s): ", name);
		return rc;
	}
	cap = s->hops->capacity(s->hdev);
	if ((rc = buddy_init(&s->lv[TIER_HBM].alloc, cap, min_block(cap))))
		return ts_err(rc, "hbm: out of memory for the slot allocator");
	s->lv[TIER_HBM].present = true;
	s->lv[TIER_HBM].capacity = s->lv[TIER_HBM].alloc.size;
	return 0;
}

int store_create(const struct tier_config *cfg, const struct tier_store_params *p,
		 struct tier_nvme *nvme, struct tier_store **out)
{
	static const struct tier_store_params none;
	struct tier_store *s;
	struct dram_params dp = { 0 };
	uint64_t cap;
	int rc;

	*out = NULL;
	if (!p)
		p = &none;
	if ((unsigned)p->policy > TIER_POLICY_LRU || (p->flags & ~TIER_STORE_SCRATCH)) {
		if (nvme)
			tier_nvme_close(nvme);
		return ts_err(-EINVAL, "store: bad policy %d or flags 0x%x", (int)p->policy, p->flags);
	}
	s = ts_calloc(1, sizeof(*s));
	if (!s) {
		if (nvme)
			tier_nvme_close(nvme);
		return ts_err(-ENOMEM, "store: out of memory");
	}
	pthread_mutex_init(&s->lock, NULL);
	pthread_cond_init(&s->idle, NULL);
	s->nvme = nvme;
	s->policy = p->policy;
	s->home = nvme ? TIER_NVME : TIER_DRAM;
	snprintf(s->name, sizeof(s->name), "%s", cfg->name);
	s->cfg = *cfg;
	s->cfg.paths = NULL;
	s->cfg.npaths = 0;
	s->nbuckets = 64;
	if (!(s->hash = ts_calloc(s->nbuckets, sizeof(*s->hash)))) {
		rc = ts_err(-ENOMEM, "store: out of memory");
		goto fail;
	}
	if ((rc = open_hbm(s, cfg, p)))
		goto fail;

	dp.capacity = p->dram_capacity ? p->dram_capacity : cfg->dram_capacity;
	dp.numa_node = cfg->numa_node;
	dp.huge = cfg->huge_pages;
	dp.gpu = s->hops && (s->hops->caps & HBM_CAP_DEVICE_MEMORY) ? cfg->gpu : -1;
	dp.lock = true;
	if ((rc = dram_arena_open(&dp, &s->dram))) {
		s->dram = NULL;
		goto fail;
	}
	dram_arena_info(s->dram, &s->dinfo);
	s->dram_base = s->dinfo.base;
	cap = dp.capacity;
	if ((rc = buddy_init(&s->lv[TIER_DRAM].alloc, cap, min_block(cap)))) {
		rc = ts_err(rc, "dram: out of memory for the slot allocator");
		goto fail;
	}
	s->lv[TIER_DRAM].present = true;
	s->lv[TIER_DRAM].capacity = s->lv[TIER_DRAM].alloc.size;
	if (nvme) {
		s->lv[TIER_NVME].present = true;
		/* Fixed buffers: the arena in chunks of at most 1 GiB. */
		for (uint64_t off = 0; off < s->lv[TIER_DRAM].capacity; off += 1ull << 30) {
			uint64_t len = s->lv[TIER_DRAM].capacity - off;

			if (len > 1ull << 30)
				len = 1ull << 30;
			if (tier_nvme_register_buffer(nvme, s->dram_base + off, len)) {
				TIER_INFO(TIER_SS_STORE, "store: dram arena past %" PRIu64
					  " bytes not registered with the rings: %s", off,
					  tier_last_error());
				break;
			}
		}
	}
	{
		char a[32], b[32];

		TIER_INFO(TIER_SS_STORE, "store '%s': hbm %s%s%s, dram %s, home %s, policy %s", s->name,
			  s->lv[TIER_HBM].present ? s->hops->name : "none",
			  s->lv[TIER_HBM].present ? " " : "",
			  s->lv[TIER_HBM].present ? fmt_size(s->lv[TIER_HBM].capacity, a, sizeof(a)) : "",
			  fmt_size(s->lv[TIER_DRAM].capacity, b, sizeof(b)), tier_level_name(s->home),
			  s->policy == TIER_POLICY_BELADY ? "belady" : "lru");
	}
	*out = s;
	return 0;
fail:
	store_free(s);
	return rc;
}

const struct tier_config *store_config(const struct tier_store *s)
{
	return &s->cfg;
}

void store_set_live(struct tier_store *s, void *live, void (*stop)(void *live))
{
	s->live = live;
	s->live_stop = stop;
}

void *store_live(const struct tier_store *s)
{
	return s->live;
}

struct hbm_dev *store_hbm(const struct tier_store *s, const struct hbm_ops **ops)
{
	*ops = s->lv[TIER_HBM].present ? s->hops : NULL;
	return s->lv[TIER_HBM].present ? s->hdev : NULL;
}

void store_obj_set_user(struct tier_obj *o, void *user)
{
	o->user = user;
}

void *store_obj_user(const struct tier_obj *o)
{
	return o->user;
}

void store_quiesce(struct tier_store *s)
{
	pthread_mutex_lock(&s->lock);
	while (s->rq_head || s->nxfers)
		pthread_cond_wait(&s->idle, &s->lock);
	pthread_mutex_unlock(&s->lock);
}

int tier_store_close(struct tier_store *s)
{
	int rc, rc2 = 0;

	if (!s)
		return 0;
	if (s->live_stop) {
		/* The publisher goes first: it reads the store. */
		s->live_stop(s->live);
		s->live = NULL;
		s->live_stop = NULL;
	}
	rc = flush_all(s, true);
	pthread_mutex_lock(&s->lock);
	for (uint32_t i = 0; i < s->nobjs && !rc2; i++) {
		for (int l = 0; l < TIER_LEVELS; l++) {
			struct tier_obj *o = s->objs[i];

			if (o->lv[l].rpins || o->lv[l].wpins) {
				rc2 = ts_err(-EBUSY, "store closed with '%s' pinned on %s", o->name,
					       tier_level_name((enum tier_level)l));
				TIER_WARN(TIER_SS_STORE, "%s", tier_last_error());
				break;
			}
		}
	}
	while (s->rq_head) /* prefetches still waiting for room */
		rq_finish(s, s->rq_head, -ECANCELED, "the store was closed");
	while (s->nxfers)
		pthread_cond_wait(&s->idle, &s->lock);
	pthread_mutex_unlock(&s->lock);
	store_free(s);
	if (rc)
		return rc;
	return rc2;
}
