/*
 * manifest.h - the manifest inside the library: the public opaque
 * struct tier_manifest is a resolved struct tier_config (common/nodecfg.h),
 * which the layers below runtime/ read.
 */
#ifndef TIER_RUNTIME_MANIFEST_H
#define TIER_RUNTIME_MANIFEST_H

#include "common/nodecfg.h"
#include "tierstore.h"

struct tier_manifest {
	struct tier_config cfg;
};

const struct tier_config *manifest_config(const struct tier_manifest *m);
void manifest_config_clear(struct tier_config *c);

#endif
