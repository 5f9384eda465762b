/*
 * writebehind.h - write-behind: updated shards go back down to their home
 * while the update goes on.  The update queues an object (never waits);
 * one thread keeps up to @depth write-backs in flight (the manifest's
 * prefetch.write_behind), in queue order.  A write-back that fails leaves
 * the bytes dirty on the tier above (the store never drops them); the
 * first such error is kept for wb_take_error.  -EBUSY from an object
 * pinned for write again before its write-back began is not an error: it
 * is dirty again and will be written back later.
 *
 * Internal to the library (prefetch/, runtime/).
 */
#ifndef TIER_PREFETCH_WRITEBEHIND_H
#define TIER_PREFETCH_WRITEBEHIND_H

#include "tierstore/tiers.h"

struct wb;

/* 0, -ENOMEM or the thread's creation error. */
int wb_create(struct tier_store *s, unsigned depth, struct wb **out);

/* Queues a write-back of @o.  0 or -ENOMEM (then nothing is queued: the
 * bytes stay dirty and go down on eviction or flush). */
int wb_push(struct wb *w, struct tier_obj *o);

/* Waits until every queued write-back has completed. */
void wb_drain(struct wb *w);

/* The first error since the last call (0 if none), its detail in @detail. */
int wb_take_error(struct wb *w, char *detail, size_t len);

/* Drains, stops the thread and frees. */
void wb_destroy(struct wb *w);

#endif
