/*
 * open.h - what runtime/ keeps of each store it opens: the
 * manifest's configuration (its NVMe paths left out), which the optimizer
 * reads its defaults from, the stats publisher, and how many optimizers
 * live on the store.  tier_store_open attaches it to the store
 * (store_set_owner) and tier_store_close frees it.
 */
#ifndef TIER_RUNTIME_OPEN_H
#define TIER_RUNTIME_OPEN_H

#include "runtime/manifest/manifest.h"
#include "tierstore.h"

struct live;

/* The manifest @s was opened from (paths left out), or NULL for a store
 * that tier_store_open did not open. */
const struct tier_manifest *rstore_manifest(const struct tier_store *s);

/* The store's stats publisher, or NULL. */
struct live *rstore_live(const struct tier_store *s);

/*
 * An optimizer on @s from its creation (rstore_hold) to its free
 * (rstore_drop): it keeps a pointer to the store and objects in it, so
 * tier_store_close refuses (-EBUSY) while any is held.  Nothing for a
 * store that tier_store_open did not open.
 */
void rstore_hold(struct tier_store *s);
void rstore_drop(struct tier_store *s);

#endif
