/*
 * store_stats.c - what the store reports about itself: the per-level
 * counters and occupancy (tier_store_get_stats), and the invariant
 * checker (tier_store_validate) the tests call.  Both only read the
 * store, under its lock.
 */
#include "config.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "common/error.h"
#include "tiers/buddy.h"
#include "tiers/hbm.h"
#include "tiers/store.h"
#include "tiers/store_impl.h"

static const char *const st_names[] = { "absent", "filling", "clean", "dirty", "flushing" };

/* ---------------------------------------------------------- stats, checks */

void tier_store_get_stats(struct tier_store *s, struct tier_store_stats *out)
{
	STORE_ARG_OR(s, );
	TS_NONNULL_OR(out, );
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
				st->pinned += store_slot_bytes(s, (enum tier_level)l, o);
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
	STORE_ARG(s);
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
			used += store_slot_bytes(s, (enum tier_level)l, o);
			if (o->lv[l].evicting)
				evicting += store_slot_bytes(s, (enum tier_level)l, o);
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

		if (o->idx != i || store_find_locked(s, o->name) != o)
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
