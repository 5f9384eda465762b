/*
 * open.c - the entry points that take a manifest for the tiers:
 * tier_nvme_open and tier_store_open turn it into the tiers' configuration
 * (struct tiers_cfg) and open the NVMe tier and the hierarchy over it
 * (tiers/); tier_store_close stops what runtime/ attached, then closes the
 * store.  It refuses while an optimizer lives on the store: each keeps a
 * pointer to it (and its shard objects in it), counted here
 * (rstore_hold, rstore_drop).
 */
#include "config.h"

#include <errno.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>

#include "common/error.h"
#include "common/fault.h"
#include "runtime/publish.h"
#include "runtime/manifest/manifest.h"
#include "runtime/open.h"
#include "tiers/nvme.h"
#include "tiers/store.h"
#include "tierstore/toolkit.h" /* tier_nvme_open */

struct rstore {
	struct tier_manifest m;   /* the store's manifest, paths left out */
	struct live *live;
	_Atomic uint32_t held;    /* optimizers alive on the store */
};

int tier_nvme_open(const struct tier_manifest *m, unsigned flags, struct tier_nvme **out)
{
	TS_NONNULL(m);
	TS_NONNULL(out);
	if (!out)
		return ts_err(-EINVAL, "tier_nvme_open: no result pointer");
	*out = NULL;
	if (!m)
		return ts_err(-EINVAL, "tier_nvme_open: no manifest");
	return nvme_open(&m->tiers, flags, 0, out);
}

int tier_store_open(const struct tier_manifest *m, const struct tier_store_params *p,
		    struct tier_store **out)
{
	TS_NONNULL(m);
	TS_NONNULL(out);
	struct tier_nvme *nvme = NULL;
	struct rstore *r;
	int rc;

	if (!out)
		return ts_err(-EINVAL, "tier_store_open: no result pointer");
	*out = NULL;
	if (!m)
		return ts_err(-EINVAL, "tier_store_open: no manifest");
	if (p && ts_params_size("tier_store_open: struct tier_store_params", p->size, sizeof(*p)))
		return -EINVAL;
	if (!(r = ts_calloc(1, sizeof(*r))))
		return ts_err(-ENOMEM, "tier_store_open: out of memory");
	r->m = *m;
	r->m.tiers.paths = NULL;
	r->m.tiers.npaths = 0;
	if (m->tiers.npaths) {
		unsigned flags = p && (p->flags & TIER_STORE_SCRATCH) ? TIER_NVME_SCRATCH : 0;

		if ((rc = nvme_open(&m->tiers, flags, p ? p->generation : 0, &nvme)))
			goto fail;
	}
	if ((rc = store_create(&m->tiers, p, nvme, out)))
		goto fail;
	store_set_owner(*out, r);
	r->live = live_start(*out, m);
	return 0;
fail:
	free(r);
	return rc;
}

int tier_store_close(struct tier_store *s)
{
	struct rstore *r;
	uint32_t held;
	int rc;

	if (!s)
		return 0;
	/* A store closed twice: refused while its memory is still there. */
	if ((rc = store_handle_check(s)))
		return ts_err(rc, "tier_store_close: s is not an open store (closed, or not a tier_store)");
	r = store_owner(s);
	/* An optimizer alive would use the store freed (its destroy frees its
	 * shard objects in it): nothing is closed. */
	if (r && (held = atomic_load(&r->held)))
		return ts_err(-EBUSY, "tier_store_close: the store has %u optimizer%s alive; tier_optim_destroy %s first",
			      held, held == 1 ? "" : "s", held == 1 ? "it" : "them");
	if (r)
		live_stop(r->live); /* first: the publisher reads the store */
	rc = store_close(s);
	free(r);
	return rc;
}

const struct tier_manifest *rstore_manifest(const struct tier_store *s)
{
	const struct rstore *r = store_owner(s);

	return r ? &r->m : NULL;
}

struct live *rstore_live(const struct tier_store *s)
{
	const struct rstore *r = store_owner(s);

	return r ? r->live : NULL;
}

void rstore_hold(struct tier_store *s)
{
	struct rstore *r = store_owner(s);

	if (r)
		atomic_fetch_add(&r->held, 1);
}

void rstore_drop(struct tier_store *s)
{
	struct rstore *r = store_owner(s);

	if (r)
		atomic_fetch_sub(&r->held, 1);
}
