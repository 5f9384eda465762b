/*
 * manifest.h - the manifest inside the library.  The public opaque struct
 * tier_manifest is the resolved configuration of one node: the tiers'
 * part (struct tiers_cfg, all that tiers/ is built from) and what runtime/
 * itself uses (the GPU's facts for messages, the lookahead and
 * write-behind, the optimizer's defaults).
 */
#ifndef TIER_RUNTIME_MANIFEST_H
#define TIER_RUNTIME_MANIFEST_H

#include "tiers/tiers_cfg.h"
#include "tierstore.h"

struct tier_manifest {
	int version;
	struct tiers_cfg tiers;

	/* the GPU, as found */
	bool gpu_auto;        /* chosen by "auto" */
	char gpu_name[256];
	char gpu_pci[32];
	uint64_t gpu_mem;     /* the device's memory, bytes */
	char gpu_note[256];   /* why there is no GPU tier, when there is none */
	bool numa_auto;       /* the NUMA node chosen by "auto" */

	/* prefetch */
	uint64_t lookahead;   /* bytes in flight ahead of the update */
	uint32_t write_behind;

	/* optimizer defaults */
	double offload_fraction;
	bool offload_auto;
	enum tier_dtype master_dtype;
	enum tier_dtype moment_dtype;
	int rounding, out_rounding; /* enum tier_rounding */
	uint64_t seed;
	uint64_t shard_size;
	bool shard_derived;     /* not written: sized from the DRAM tier, again by an
				 * optimizer on a store whose DRAM tier is another size */

	/* the rank it was resolved for, and which sizes were divided by
	 * the local world size ("SIZE/local_world") */
	struct tier_rank rank;
	bool hbm_div, dram_div, lookahead_div;
	uint64_t path_div;      /* bit i: nvme.paths[i].capacity */
};

/* Frees the paths @m holds (npaths becomes 0). */
void manifest_clear(struct tier_manifest *m);

#endif
