/*
 * names.h - an index of names: finds an item by its name in O(1), for the
 * tables that name thousands of things (the NVMe tier's objects, the
 * optimizer's parameters), so that adding, finding and closing n of them
 * costs O(n), not O(n^2).
 *
 * The index holds opaque items (a pointer, or an array index plus one),
 * never 0 or TS_NAMES_TOMB; it does not keep names: @key gives an item's
 * name, so the item's owner keeps the one copy.  Open addressing over a
 * power-of-two table, linear probing, FNV-1a; removals leave tombstones
 * that the next growth drops.  Not thread safe: the owner's lock covers it.
 *
 * Growth is the only allocation, and ts_names_reserve() does it ahead of
 * time, so that an insert that follows a reserve cannot fail: a caller
 * reserves before the steps it cannot undo, then inserts after them.
 */
#ifndef TIER_COMMON_NAMES_H
#define TIER_COMMON_NAMES_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define TS_NAMES_TOMB UINTPTR_MAX

/* The name of @item (one the index holds), given the owner's @ctx. */
typedef const char *(*ts_names_key)(const void *ctx, uintptr_t item);

struct ts_names {
	uintptr_t *slot;     /* cap slots: 0 empty, TS_NAMES_TOMB removed, else an item */
	uint32_t cap;        /* 0 or a power of two */
	uint32_t live;       /* items held */
	uint32_t used;       /* items and tombstones */
	ts_names_key key;
	const void *ctx;
};

/* An empty index (no allocation) whose items are named by @key(@ctx, item). */
void ts_names_init(struct ts_names *ix, ts_names_key key, const void *ctx);

/* Frees the table; the index is empty again (its key kept). */
void ts_names_free(struct ts_names *ix);

/* The FNV-1a hash of @name. */
uint32_t ts_names_hash(const char *name);

/* The item named @name, or 0. */
uintptr_t ts_names_find(const struct ts_names *ix, const char *name);

/*
 * Room for @more inserts without allocating: 0, or -ENOMEM (detail set;
 * the index unchanged), or -EOVERFLOW past 2^30 items.
 */
int ts_names_reserve(struct ts_names *ix, uint32_t more);

/*
 * Adds @item, whose name no item of the index has (the caller checked with
 * ts_names_find): 0, or what ts_names_reserve(ix, 1) returns.
 */
int ts_names_insert(struct ts_names *ix, uintptr_t item);

/* Removes @item (named @name); nothing if the index does not hold it. */
void ts_names_remove(struct ts_names *ix, uintptr_t item, const char *name);

/*
 * For items that are array indices plus one: after the element of item
 * @removed left the array (ts_names_remove'd first) and the ones behind
 * it moved down, every item above @removed becomes one less.  The names
 * are unchanged, so every item keeps its slot: O(table), no allocation.
 */
void ts_names_shift(struct ts_names *ix, uintptr_t removed);

#ifdef __cplusplus
}
#endif

#endif /* TIER_COMMON_NAMES_H */
