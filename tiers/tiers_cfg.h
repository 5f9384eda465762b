/*
 * tiers_cfg.h - what tiers/ is built from: the DRAM, HBM and NVMe tiers of
 * one node, every value resolved (sizes in bytes, "auto" replaced by the
 * device and NUMA node chosen, paths by absolute backing-file names).
 * runtime/ fills it from a manifest (struct tier_manifest embeds one);
 * tiers/ reads only this and never sees YAML or the manifest.
 */
#ifndef TIER_TIERS_CFG_H
#define TIER_TIERS_CFG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define TIERS_MAX_NVME_PATHS 64
#define TIERS_NAME_MAX 64
#define TIER_KEEP_COMMITS_MAX 32  /* TIER_NVME_MAX_KEEP: what a commit slot holds */

enum tiers_huge_pages { TIER_HUGE_AUTO, TIER_HUGE_ON, TIER_HUGE_OFF };
enum tiers_checksum { TIER_CSUM_NONE, TIER_CSUM_CRC32C };

/* One NVMe path: a backing file. */
struct tiers_path_cfg {
	char *path;           /* as written, after ${VAR} expansion */
	char *file;           /* the backing file (absolute) */
	uint64_t capacity;    /* bytes, a multiple of block_size */
	uint32_t block_size;  /* bytes, power of two */
	uint32_t queue_depth;
	bool direct;          /* O_DIRECT */
	bool create;          /* create the directory if it is missing */
	int line, col;        /* the entry's place in the manifest (1-based) */
};

struct tiers_cfg {
	char source[1024];    /* where it came from, for messages: a manifest
			       * file name or "<default>" */
	char name[TIERS_NAME_MAX + 1]; /* the store's name */

	/* HBM tier */
	int gpu;              /* CUDA device index, -1 = no HBM tier */
	uint64_t hbm_capacity;

	/* DRAM tier */
	uint64_t dram_capacity;
	int numa_node;        /* -1 = no binding */
	enum tiers_huge_pages huge_pages;

	/* NVMe tier (npaths == 0: no NVMe tier; DRAM is every object's home) */
	uint64_t stripe_unit;
	bool sqpoll;
	enum tiers_checksum checksum;
	uint32_t keep_commits; /* commits kept (rollback); 0: the default, 2 */
	size_t npaths;
	struct tiers_path_cfg *paths;
};

#endif
