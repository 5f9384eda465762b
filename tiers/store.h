/*
 * store.h - the store inside the library, for the layers above tiers/.
 * tiers/store*.c own the object table, residency and eviction; runtime/
 * turns a manifest into a struct tiers_cfg, opens the NVMe tier from it and
 * hands both here (tiers/ never reads a manifest), and owns the public
 * tier_store_open and tier_store_close.
 */
#ifndef TIER_TIERS_STORE_H
#define TIER_TIERS_STORE_H

#include "tiers/tiers_cfg.h"
#include "tierstore/tiers.h"

/*
 * Builds a store over @cfg's DRAM and HBM tiers and the NVMe tier @nvme
 * (NULL: DRAM is the home).  The store owns @nvme from then on, also on
 * failure.  @cfg is read during the call only.
 */
int store_create(const struct tiers_cfg *cfg, const struct tier_store_params *p,
		 struct tier_nvme *nvme, struct tier_store **out);

/* What the event hook sees.  Called with the store's lock held: the hook
 * must not call into the store. */
enum store_event {
	STORE_EV_HIT,        /* an acquire found the object resident */
	STORE_EV_MISS,       /* an acquire had to fill it */
	STORE_EV_FILL_START, /* a copy up into @level began */
	STORE_EV_FILL_DONE,
	STORE_EV_FLUSH_START,/* a write-back from @level to the tier below began */
	STORE_EV_FLUSH_DONE,
	STORE_EV_EVICT,      /* @level's slot of the object was chosen as a victim */
	STORE_EV_DROP,       /* a clean copy freed (eviction completed, or invalidated) */
};

typedef void (*store_hook)(void *arg, enum store_event ev, enum tier_level level,
			   const struct tier_obj *o);

/* Waits until no request is pending and no transfer is in flight
 * (prefetches have landed or been skipped). */
void store_quiesce(struct tier_store *s);

/* Installs (or, with NULL, removes) the event hook. */
void store_set_hook(struct tier_store *s, store_hook fn, void *arg);

/*
 * tier_obj_flush without the wait: queues the write-back of @o's dirty
 * bytes down to the home; tier_ticket_wait(*tk) gives what tier_obj_flush
 * would have returned.  On a non-zero return there is no ticket.
 */
int store_flush_async(struct tier_store *s, struct tier_obj *o, struct tier_ticket **tk);

/*
 * Writes every dirty byte down to its home, then frees everything: the
 * contract of tier_store_close, which runtime/ calls it from after
 * stopping what it attached.
 */
int store_close(struct tier_store *s);

/* The HBM backend's capability flags (HBM_CAP_*, tiers/hbm.h); 0 when the
 * store has no HBM tier. */
unsigned store_hbm_caps(const struct tier_store *s);

/*
 * A pointer the opener attaches to the store (runtime/ keeps its own
 * record of each store it opened there); NULL until set.  The store never
 * reads it.
 */
void store_set_owner(struct tier_store *s, void *owner);
void *store_owner(const struct tier_store *s);

/* 0 when @s is an open store; else -EINVAL naming @fn (NULL, or, in a
 * build with TIER_DEBUG_HANDLES, a store closed or not a store). */
int store_handle_check(const struct tier_store *s);

/*
 * A pointer the owner of @o attaches to it (for the event hook's users to
 * find their own record of an object); NULL until set.  While it is set
 * the object is its owner's (an optimizer's shard): tier_obj_destroy
 * refuses it (-EBUSY), and the owner sets NULL before it destroys the
 * object itself or leaves it to the store.  Takes the store's lock.
 */
void store_obj_set_user(struct tier_obj *o, void *user);
void *store_obj_user(const struct tier_obj *o);

#endif
