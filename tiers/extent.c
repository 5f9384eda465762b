/*
 * extent.c - the first-fit extent allocator (see extent.h).
 *
 * The free list is an array kept sorted by offset: allocation scans it
 * (objects are few and large: shards of tens of MiB), freeing finds the
 * insertion point by binary search and merges with both neighbours, so
 * freeing everything always returns the list to one extent.
 */
#include "config.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "common/fault.h"
#include "tiers/extent.h"

int extents_init(struct ts_extents *e, uint64_t total, uint64_t align)
{
	memset(e, 0, sizeof(*e));
	if (align == 0 || (align & (align - 1)))
		return ts_err(-EINVAL, "extent allocator: alignment %llu is not a power of two",
				(unsigned long long)align);
	e->align = align;
	e->total = total / align * align;
	e->cap = 16;
	e->free = ts_calloc(e->cap, sizeof(*e->free));
	if (!e->free)
		return ts_err(-ENOMEM, "extent allocator: out of memory");
	if (e->total) {
		e->free[0] = (struct ts_extent){ 0, e->total };
		e->n = 1;
	}
	e->avail = e->total;
	return 0;
}

void extents_fini(struct ts_extents *e)
{
	free(e->free);
	memset(e, 0, sizeof(*e));
}

int extents_alloc(struct ts_extents *e, uint64_t len, uint64_t *off)
{
	if (len == 0 || len > e->total)
		return len ? -ENOSPC : -EINVAL;
	len = (len + e->align - 1) / e->align * e->align;
	for (size_t i = 0; i < e->n; i++) {
		struct ts_extent *x = &e->free[i];

		if (x->len < len)
			continue;
		*off = x->off;
		x->off += len;
		x->len -= len;
		if (x->len == 0) {
			memmove(x, x + 1, (e->n - i - 1) * sizeof(*x));
			e->n--;
		}
		e->avail -= len;
		return 0;
	}
	return -ENOSPC;
}

int extents_free(struct ts_extents *e, uint64_t off, uint64_t len)
{
	size_t lo = 0, hi = e->n, i;
	bool merge_prev, merge_next;

	len = (len + e->align - 1) / e->align * e->align;
	if (len == 0 || off % e->align || off > e->total || len > e->total - off)
		return -EINVAL;
	/* i = first free extent starting after off */
	while (lo < hi) {
		size_t mid = (lo + hi) / 2;

		if (e->free[mid].off <= off)
			lo = mid + 1;
		else
			hi = mid;
	}
	i = lo;
	if (i > 0 && e->free[i - 1].off + e->free[i - 1].len > off)
		return -EINVAL; /* overlaps the free extent before */
	if (i < e->n && off + len > e->free[i].off)
		return -EINVAL; /* overlaps the free extent after */
	merge_prev = i > 0 && e->free[i - 1].off + e->free[i - 1].len == off;
	merge_next = i < e->n && off + len == e->free[i].off;
	if (merge_prev && merge_next) {
		e->free[i - 1].len += len + e->free[i].len;
		memmove(&e->free[i], &e->free[i + 1], (e->n - i - 1) * sizeof(e->free[0]));
		e->n--;
	} else if (merge_prev) {
		e->free[i - 1].len += len;
	} else if (merge_next) {
		e->free[i].off = off;
		e->free[i].len += len;
	} else {
		if (e->n == e->cap) {
			struct ts_extent *nf = ts_realloc(e->free, e->cap * 2 * sizeof(*nf));

			if (!nf)
				return -ENOMEM;
			e->free = nf;
			e->cap *= 2;
		}
		memmove(&e->free[i + 1], &e->free[i], (e->n - i) * sizeof(e->free[0]));
		e->free[i] = (struct ts_extent){ off, len };
		e->n++;
	}
	e->avail += len;
	return 0;
}

uint64_t extents_largest(const struct ts_extents *e)
{
	uint64_t best = 0;

	for (size_t i = 0; i < e->n; i++)
		if (e->free[i].len > best)
			best = e->free[i].len;
	return best;
}

bool extents_valid(const struct ts_extents *e)
{
	uint64_t sum = 0;

	for (size_t i = 0; i < e->n; i++) {
		const struct ts_extent *x = &e->free[i];

		if (x->len == 0 || x->off % e->align || x->len % e->align ||
		    x->off > e->total || x->len > e->total - x->off)
			return false;
		if (i > 0 && e->free[i - 1].off + e->free[i - 1].len >= x->off)
			return false; /* overlapping or adjacent (unmerged) */
		sum += x->len;
	}
	return sum == e->avail && e->avail <= e->total;
}

int extents_take(struct ts_extents *e, uint64_t off, uint64_t len)
{
	len = (len + e->align - 1) / e->align * e->align;
	if (len == 0 || off % e->align || off > e->total || len > e->total - off)
		return -EINVAL;
	for (size_t i = 0; i < e->n; i++) {
		struct ts_extent *x = &e->free[i];
		uint64_t xe = x->off + x->len;

		if (x->off > off)
			break;
		if (xe < off + len)
			continue;
		/* [off, off + len) lies inside x: split it in up to two. */
		if (x->off == off && xe == off + len) {
			memmove(x, x + 1, (e->n - i - 1) * sizeof(*x));
			e->n--;
		} else if (x->off == off) {
			x->off += len;
			x->len -= len;
		} else if (xe == off + len) {
			x->len -= len;
		} else {
			if (e->n == e->cap) {
				struct ts_extent *nf = ts_realloc(e->free, e->cap * 2 * sizeof(*nf));

				if (!nf)
					return -ENOMEM;
				e->free = nf;
				e->cap *= 2;
				x = &e->free[i];
			}
			memmove(&e->free[i + 2], &e->free[i + 1], (e->n - i - 1) * sizeof(*x));
			e->free[i + 1] = (struct ts_extent){ off + len, xe - off - len };
			x->len = off - x->off;
			e->n++;
		}
		e->avail -= len;
		return 0;
	}
	return -EEXIST;
}
