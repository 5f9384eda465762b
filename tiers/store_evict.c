/*
 * store_evict.c - residency and victim choice: each level's resident list,
 * the position in the caller's schedule (Belady's next use), and making
 * room on a level by evicting what the policy picks (LRU or Belady).
 * Kept apart from the requests so the policy reads in one place; it
 * starts write-backs through store_xfer.c and never waits itself.
 */
#include "config.h"

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>

#include "common/error.h"
#include "common/fault.h"
#include "tiers/buddy.h"
#include "tiers/store.h"
#include "tiers/store_impl.h"

#define DIST_NONE UINT64_MAX /* next use of an object outside the schedule */

/* ---------------------------------------------------------- resident lists */

void store_resident_add(struct tier_store *s, enum tier_level l, struct tier_obj *o)
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
void store_drop(struct tier_store *s, struct tier_obj *o, enum tier_level l)
{
	struct lvl *x = &o->lv[l];

	if (x->evicting) {
		s->lv[l].evict_pending -= store_slot_bytes(s, l, o);
		x->evicting = false;
	}
	buddy_free(&s->lv[l].alloc, x->off, o->size);
	resident_remove(s, l, o);
	x->st = ST_ABSENT;
	x->written = false;
	s->changes++;
	store_emit(s, STORE_EV_DROP, l, o);
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

void store_sched_advance(struct tier_store *s, const struct tier_obj *o)
{
	if (o->npos)
		s->cursor = (uint32_t)((s->cursor + next_use(s, o)) % s->nsched);
}

/* ---------------------------------------------------------------- eviction */

bool store_pinned(const struct lvl *x)
{
	return x->rpins || x->wpins || x->iopins;
}

/* Whether @v's slot on @l may be chosen as a victim now. */
static bool evictable(struct tier_store *s, struct tier_obj *v, enum tier_level l)
{
	struct lvl *x = &v->lv[l];

	if ((x->st != ST_CLEAN && x->st != ST_DIRTY) || store_pinned(x) || x->want || v->destroying)
		return false;
	if (l == TIER_HBM && x->st == ST_DIRTY && v->lv[TIER_DRAM].st == ST_FLUSHING)
		return false; /* its write-back would change bytes being written below */
	if (l == TIER_DRAM && s->lv[TIER_HBM].present) {
		struct lvl *h = &v->lv[TIER_HBM];

		/* Inclusion: a DRAM victim takes an idle HBM copy with it,
		 * written back first when dirty. */
		if (h->st != ST_ABSENT &&
		    ((h->st != ST_CLEAN && h->st != ST_DIRTY) || store_pinned(h) || h->want))
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
	store_emit(s, STORE_EV_EVICT, l, v);
	if (l == TIER_DRAM && s->lv[TIER_HBM].present && v->lv[TIER_HBM].st == ST_CLEAN) {
		s->lv[TIER_HBM].evictions++;
		store_emit(s, STORE_EV_EVICT, TIER_HBM, v);
		store_drop(s, v, TIER_HBM);
	}
	if (x->st == ST_CLEAN) {
		store_drop(s, v, l);
		return 0;
	}
	x->evicting = true;
	s->lv[l].evict_pending += store_slot_bytes(s, l, v);
	store_start_flush(s, v, l, cause, xf);
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
			pbytes += store_slot_bytes(s, l, v);
		}
	}
	return ts_err(-ENOMEM,
			"%s: no room for '%s' (%s): %" PRIu64 " of %" PRIu64
			" resident objects (%s of %s) are pinned or about to be, and the rest cannot make room",
			tier_level_name(l), o->name, store_fmt_size(o->size, a, sizeof(a)), npinned,
			lv->nres, store_fmt_size(pbytes, b, sizeof(b)), store_fmt_size(lv->capacity, c, sizeof(c)));
}

/* The buddy block a slot of @need bytes is carved from. */
static uint64_t block_for(const struct buddy *b, uint64_t need)
{
	uint64_t blk = b->min_block;

	while (blk < need && blk <= UINT64_MAX / 2)
		blk <<= 1;
	return blk < need ? UINT64_MAX : blk; /* past 2^63: no slot holds it */
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
		uint64_t off = v->lv[l].off, end = off + store_slot_bytes(s, l, v);
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
int store_make_room(struct tier_store *s, struct req *r, struct tier_obj *o, enum tier_level l,
		    uint64_t *off)
{
	struct level *lv = &s->lv[l];
	uint64_t need = store_slot_bytes(s, l, o), blk = block_for(&lv->alloc, o->size), top = lv->alloc.min_block;
	char a[32], b[32];

	while (top <= lv->alloc.size / 2)
		top <<= 1;
	if (need > lv->capacity || blk > top)
		return ts_err(-E2BIG, "%s: '%s' (%s) is larger than the largest slot of the tier (%s)",
				tier_level_name(l), o->name, store_fmt_size(o->size, a, sizeof(a)),
				store_fmt_size(top, b, sizeof(b)));
	if (r->kind == RQ_PREFETCH && lv->room_waiters)
		return -EAGAIN;
	for (;;) {
		struct tier_obj *v;
		int rc;

		if (buddy_alloc(&lv->alloc, o->size, off) == 0) {
			store_room_wait(s, r, -1);
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
			store_room_wait(s, r, -1);
			return rc;
		}
		rc = evict(s, v, l, r->id);
		if (rc < 0)
			return rc;
		if (rc > 0)
			break;
	}
	if (r->kind != RQ_PREFETCH)
		store_room_wait(s, r, (int)l);
	return 0;
}
