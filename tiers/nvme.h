/*
 * nvme.h - the NVMe tier inside the library, for the layers above tiers/:
 * opening it from a tiers configuration (runtime/ turns a manifest into
 * one; the public tier_nvme_open does that), and the per-path counters the
 * live view publishes.  The rest of its API is public (tier_nvme_*).
 */
#ifndef TIER_TIERS_NVME_H
#define TIER_TIERS_NVME_H

#include "tiers/tiers_cfg.h"
#include "tierstore.h"

/*
 * Opens the NVMe tier @cfg describes (its paths; cfg->npaths > 0): the
 * contract of tier_nvme_open.  @cfg is read during the call only.
 */
int nvme_open(const struct tiers_cfg *cfg, unsigned flags, struct tier_nvme **out);

/*
 * The live counters of path @i (tier_live_path; zeros for a path that is
 * not there).  A build with -Dstats=false keeps only file and inflight.
 */
struct tier_live_path;
void nvme_path_live(struct tier_nvme *t, unsigned i, struct tier_live_path *out);

#endif
