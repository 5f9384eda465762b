/*
 * nvme.h - the NVMe tier inside the library, for the layers above tiers/:
 * opening it from a tiers configuration (runtime/ turns a manifest into
 * one; the public tier_nvme_open does that).  The rest of its API is
 * public (tier_nvme_*, tierstore/tiers.h).
 */
#ifndef TIER_TIERS_NVME_H
#define TIER_TIERS_NVME_H

#include "tiers/tiers_cfg.h"
#include "tierstore/tiers.h"

/*
 * Opens the NVMe tier @cfg describes (its paths; cfg->npaths > 0): the
 * contract of tier_nvme_open.  Files that hold a committed store reopen
 * at their newest commit that loads, or at @generation when not 0.  @cfg
 * is read during the call only.
 */
int nvme_open(const struct tiers_cfg *cfg, unsigned flags, uint64_t generation,
	      struct tier_nvme **out);

/* The objects of the tier, for the store reopening a committed one: @fn
 * per object (under the tier's lock; it must not call the tier). */
void nvme_for_each_obj(struct tier_nvme *t, void (*fn)(void *arg, struct tier_nvme_obj *o),
		       void *arg);

/* Whether the object was ever written (its bytes are its own; else it
 * reads as what its extents held: zeros in a new file). */
bool nvme_obj_written(const struct tier_nvme_obj *o);

#endif
