/*
 * names.c - the index of names (names.h): open addressing with linear
 * probing over a power-of-two table kept at most 3/4 full (items and
 * tombstones together), so a probe ends at an empty slot.
 */
#include "config.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "common/fault.h"
#include "common/names.h"

#define NAMES_MIN_CAP 16u
#define NAMES_MAX_LIVE (1u << 30)

void ts_names_init(struct ts_names *ix, ts_names_key key, const void *ctx)
{
	memset(ix, 0, sizeof(*ix));
	ix->key = key;
	ix->ctx = ctx;
}

void ts_names_free(struct ts_names *ix)
{
	free(ix->slot);
	ix->slot = NULL;
	ix->cap = ix->live = ix->used = 0;
}

uint32_t ts_names_hash(const char *name)
{
	uint32_t h = 2166136261u;

	for (; *name; name++)
		h = (h ^ (unsigned char)*name) * 16777619u;
	return h;
}

uintptr_t ts_names_find(const struct ts_names *ix, const char *name)
{
	uint32_t mask, i;

	if (!ix->cap)
		return 0;
	mask = ix->cap - 1;
	for (i = ts_names_hash(name) & mask; ix->slot[i]; i = (i + 1) & mask) {
		uintptr_t it = ix->slot[i];

		if (it != TS_NAMES_TOMB && !strcmp(ix->key(ix->ctx, it), name))
			return it;
	}
	return 0;
}

/* Puts @item in the first free slot of its probe sequence (the table has one). */
static void place(uintptr_t *slot, uint32_t cap, uintptr_t item, const char *name)
{
	uint32_t mask = cap - 1, i = ts_names_hash(name) & mask;

	while (slot[i] && slot[i] != TS_NAMES_TOMB)
		i = (i + 1) & mask;
	slot[i] = item;
}

int ts_names_reserve(struct ts_names *ix, uint32_t more)
{
	uint64_t need = (uint64_t)ix->used + more, live = (uint64_t)ix->live + more;
	uint32_t cap;
	uintptr_t *slot;

	if (need * 4 <= (uint64_t)ix->cap * 3)
		return 0;
	if (live > NAMES_MAX_LIVE)
		return ts_err(-EOVERFLOW, "more than %u names in one index", NAMES_MAX_LIVE);
	/* The live items alone at most half full: tombstones are dropped. */
	cap = NAMES_MIN_CAP;
	while ((uint64_t)cap < live * 2)
		cap *= 2;
	slot = ts_calloc(cap, sizeof(*slot));
	if (!slot)
		return ts_err(-ENOMEM, "out of memory for an index of %llu names",
			      (unsigned long long)live);
	for (uint32_t i = 0; i < ix->cap; i++)
		if (ix->slot[i] && ix->slot[i] != TS_NAMES_TOMB)
			place(slot, cap, ix->slot[i], ix->key(ix->ctx, ix->slot[i]));
	free(ix->slot);
	ix->slot = slot;
	ix->cap = cap;
	ix->used = ix->live;
	return 0;
}

int ts_names_insert(struct ts_names *ix, uintptr_t item)
{
	const char *name = ix->key(ix->ctx, item);
	uint32_t mask, i;
	int rc = ts_names_reserve(ix, 1);

	if (rc)
		return rc;
	mask = ix->cap - 1;
	for (i = ts_names_hash(name) & mask; ix->slot[i] && ix->slot[i] != TS_NAMES_TOMB;
	     i = (i + 1) & mask)
		;
	if (!ix->slot[i])
		ix->used++;
	ix->slot[i] = item;
	ix->live++;
	return 0;
}

void ts_names_shift(struct ts_names *ix, uintptr_t removed)
{
	for (uint32_t i = 0; i < ix->cap; i++)
		if (ix->slot[i] && ix->slot[i] != TS_NAMES_TOMB && ix->slot[i] > removed)
			ix->slot[i]--;
}

void ts_names_remove(struct ts_names *ix, uintptr_t item, const char *name)
{
	uint32_t mask, i;

	if (!ix->cap)
		return;
	mask = ix->cap - 1;
	for (i = ts_names_hash(name) & mask; ix->slot[i]; i = (i + 1) & mask) {
		if (ix->slot[i] == item) {
			ix->slot[i] = TS_NAMES_TOMB;
			ix->live--;
			return;
		}
	}
}
