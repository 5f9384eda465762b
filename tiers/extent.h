/*
 * extent.h - a first-fit extent allocator over one linear space (a backing
 * file's data area).  Free space is a sorted array of disjoint,
 * non-adjacent extents; allocation takes the first that fits, freeing
 * merges with neighbours.  Every offset and length is a multiple of
 * `align`.  Not thread-safe: the caller locks.
 */
#ifndef TIER_TIERS_EXTENT_H
#define TIER_TIERS_EXTENT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct ts_extent {
	uint64_t off, len;
};

struct ts_extents {
	struct ts_extent *free;  /* sorted by off; disjoint, never adjacent */
	size_t n, cap;
	uint64_t total;            /* size of the space */
	uint64_t avail;            /* sum of free lengths */
	uint64_t align;
};

/* A space of @total bytes (rounded down to @align), all free. */
int extents_init(struct ts_extents *e, uint64_t total, uint64_t align);
void extents_fini(struct ts_extents *e);

/* First fit for @len (rounded up to align): 0 and *off, -ENOSPC, -ENOMEM, -EINVAL. */
int extents_alloc(struct ts_extents *e, uint64_t len, uint64_t *off);

/* Returns [off, off + len) (len rounded up to align); -EINVAL if any of it is free already or outside. */
int extents_free(struct ts_extents *e, uint64_t off, uint64_t len);

/* Takes exactly [off, off + len) (len rounded up to align), which must be
 * free (reopening a committed store): 0, -EEXIST (some of it is in use),
 * -EINVAL (unaligned or outside), -ENOMEM. */
int extents_take(struct ts_extents *e, uint64_t off, uint64_t len);

/* The largest free extent. */
uint64_t extents_largest(const struct ts_extents *e);

/* The invariant: sorted, disjoint, non-adjacent, aligned, inside, sums to avail. */
bool extents_valid(const struct ts_extents *e);

#endif
