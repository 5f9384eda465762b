/*
 * store.c (runtime) - opening a store from a manifest: the NVMe tier the
 * manifest describes, then the hierarchy over it (tiers/store.c).
 */
#include "config.h"

#include <errno.h>

#include "common/error.h"
#include "runtime/live.h"
#include "runtime/manifest.h"
#include "tiers/store.h"

int tier_store_open(const struct tier_manifest *m, const struct tier_store_params *p,
		    struct tier_store **out)
{
	const struct tier_config *cfg;
	struct tier_nvme *nvme = NULL;
	int rc;

	if (!out)
		return ts_err(-EINVAL, "tier_store_open: no result pointer");
	*out = NULL;
	if (!m)
		return ts_err(-EINVAL, "tier_store_open: no manifest");
	cfg = manifest_config(m);
	if (cfg->npaths) {
		unsigned flags = p && (p->flags & TIER_STORE_SCRATCH) ? TIER_NVME_SCRATCH : 0;

		if ((rc = tier_nvme_open(m, flags, &nvme)))
			return rc;
	}
	if ((rc = store_create(cfg, p, nvme, out)))
		return rc;
	live_start(*out, m);
	return 0;
}
