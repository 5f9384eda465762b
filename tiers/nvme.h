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
 * contract of tier_nvme_open.  @cfg is read during the call only.
 */
int nvme_open(const struct tiers_cfg *cfg, unsigned flags, struct tier_nvme **out);

#endif
