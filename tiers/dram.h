/*
 * dram.h - the DRAM tier's arena: one mapping of the manifest's capacity,
 * made once, bound to the manifest's NUMA node, backed by huge pages when
 * asked or available (transparent huge pages otherwise), prefaulted and
 * locked, and registered with CUDA when there is a GPU so that copies to
 * and from it are true DMA.  The store carves slots out of it with a buddy
 * allocator; the arena itself never grows.
 *
 * Each step that the system may refuse without harm to correctness
 * (locking under a low RLIMIT_MEMLOCK, NUMA binding, CUDA registration)
 * is logged once as a warning and the arena carries on without it; the
 * flags in struct dram_info say what was achieved.  Only the mapping
 * itself, or huge pages asked for with huge_pages: on, can fail the open.
 */
#ifndef TIER_TIERS_DRAM_H
#define TIER_TIERS_DRAM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "tiers/tiers_cfg.h"

struct dram_arena;

struct dram_params {
	uint64_t capacity;            /* bytes (rounded up to the page size used) */
	int numa_node;                /* -1: no binding */
	enum tiers_huge_pages huge;    /* on: hugetlb pages or fail; auto: hugetlb
	                               * when enough are free, else THP; off: 4 KiB */
	int gpu;                      /* >= 0: cudaHostRegister with this device */
	bool lock;                    /* mlock the arena (default true) */
};

struct dram_info {
	void *base;
	uint64_t size;                /* mapped bytes (>= capacity) */
	uint64_t page_size;           /* 4096, or the hugetlb page size */
	bool hugetlb;                 /* backed by pre-allocated huge pages */
	bool thp;                     /* madvise(MADV_HUGEPAGE) accepted */
	bool locked;                  /* mlock succeeded */
	bool numa_bound;              /* mbind to numa_node succeeded */
	int numa_node;
	bool cuda_registered;         /* cudaHostRegister succeeded */
};

/* Maps, binds, prefaults, locks and registers the arena.  0, -ENOMEM
 * (mapping refused, or huge_pages: on without enough free huge pages; the
 * detail says how many are free and needed), -EINVAL (capacity 0).
 * Fault sites DRAM_MAP (the mapping) and DRAM_PIN (lock, bind, register:
 * each refusal degrades, never fails). */
int dram_arena_open(const struct dram_params *p, struct dram_arena **out);

/* Unregisters and unmaps.  The caller has stopped every copy into it. */
void dram_arena_close(struct dram_arena *a);

void dram_arena_info(const struct dram_arena *a, struct dram_info *out);
void *dram_arena_base(const struct dram_arena *a);

#endif
