/*
 * test_extent.c - the first-fit extent allocator (tiers/extent.c).
 *
 * Covers:
 *  - init: the space rounded down to the alignment, a bad alignment, an
 *    empty space;
 *  - alloc to full and back: random sizes until nothing fits, freed in a
 *    random order, and the list is one extent of `total` again (several
 *    sizes, alignments and seeds, table-driven);
 *  - first fit, alignment rounding of lengths, -ENOSPC when no extent is
 *    large enough though the total free would do (fragmentation), -EINVAL
 *    for a zero length;
 *  - freeing something already free (whole, in part, around a free
 *    extent), outside the space, misaligned or empty: -EINVAL and nothing
 *    changes;
 *  - merging with the previous, the next, both or no neighbour;
 *  - the free list growing past its initial capacity, and an allocation
 *    failure while it grows (fault site ALLOC);
 *  - extents_largest(), and extents_valid() itself (it must catch a
 *    broken list), checked after every operation.
 */
#include "config.h"

#include <check.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/fault.h"
#include "tiers/extent.h"
#include "t_helpers.h"

#define KiB (1ull << 10)
#define MiB (1ull << 20)

static void setup(void)
{
	ts_fault_reset_all();
}

static void teardown(void)
{
	ts_fault_reset_all();
}

#define ASSERT_VALID(e) \
	ck_assert_msg(extents_valid(e), "extents_valid() false at %s:%d (n %zu, avail %llu)", \
		      __FILE__, __LINE__, (e)->n, (unsigned long long)(e)->avail)

/* The free list is exactly the @n extents given as off, len pairs. */
static void assert_free_list(const struct ts_extents *e, size_t n, const uint64_t *pairs)
{
	uint64_t sum = 0;

	ck_assert_msg(e->n == n, "%zu free extents, expected %zu", e->n, n);
	for (size_t i = 0; i < n; i++) {
		ck_assert_msg(e->free[i].off == pairs[2 * i] && e->free[i].len == pairs[2 * i + 1],
			      "free[%zu] = {%llu, %llu}, expected {%llu, %llu}", i,
			      (unsigned long long)e->free[i].off, (unsigned long long)e->free[i].len,
			      (unsigned long long)pairs[2 * i], (unsigned long long)pairs[2 * i + 1]);
		sum += pairs[2 * i + 1];
	}
	ck_assert_uint_eq(e->avail, sum);
}

static void assert_whole(const struct ts_extents *e)
{
	uint64_t one[2] = { 0, e->total };

	ASSERT_VALID(e);
	assert_free_list(e, e->total ? 1 : 0, one);
	ck_assert_uint_eq(extents_largest(e), e->total);
}

/* ------------------------------------------------------------- init */

struct init_case {
	uint64_t total, align;
	int rc;
	uint64_t want_total;
};

static const struct init_case init_cases[] = {
	{ 64 * MiB, 4096, 0, 64 * MiB },
	{ 64 * MiB + 4095, 4096, 0, 64 * MiB },        /* rounded down */
	{ 10000, 512, 0, 9728 },
	{ 4095, 4096, 0, 0 },                          /* nothing left: an empty space */
	{ 0, 4096, 0, 0 },
	{ 1 * MiB, 1, 0, 1 * MiB },
	{ UINT64_MAX, 4096, 0, UINT64_MAX / 4096 * 4096 },
	{ 1 * MiB, 0, -EINVAL, 0 },
	{ 1 * MiB, 3000, -EINVAL, 0 },
	{ 1 * MiB, 4097, -EINVAL, 0 },
};

START_TEST(test_init)
{
	const struct init_case *c = &init_cases[_i];
	struct ts_extents e;
	uint64_t off = 0;
	int rc = extents_init(&e, c->total, c->align);

	ck_assert_msg(rc == c->rc, "init(%llu, %llu): %d, expected %d", (unsigned long long)c->total,
		      (unsigned long long)c->align, rc, c->rc);
	if (rc == 0) {
		ck_assert_uint_eq(e.total, c->want_total);
		ck_assert_uint_eq(e.avail, c->want_total);
		ck_assert_uint_eq(e.align, c->align);
		assert_whole(&e);
		if (c->want_total == 0)
			ck_assert_int_eq(extents_alloc(&e, c->align, &off), -ENOSPC);
		ck_assert_int_eq(extents_alloc(&e, 0, &off), -EINVAL);
		ASSERT_VALID(&e);
	}
	extents_fini(&e);
}
END_TEST

/* ----------------------------------------------- fill and drain */

struct fill_case {
	uint64_t total, align, max_len;
	uint64_t seed;
};

static const struct fill_case fill_cases[] = {
	{ 64 * MiB, 4096, 3 * MiB, 1 },
	{ 64 * MiB, 4096, 64 * KiB, 2 },       /* many small: the list grows past 16 */
	{ 256 * MiB, 1 * MiB, 20 * MiB, 3 },
	{ 1 * MiB + 512 * 7, 512, 40000, 4 },  /* odd total */
	{ 4096 * 100, 4096, 4096 * 3, 5 },
	{ 1 * MiB, 1, 5000, 6 },               /* byte granularity */
};

struct held {
	uint64_t off, len;
};

START_TEST(test_fill_and_drain)
{
	const struct fill_case *c = &fill_cases[_i];
	struct ts_extents e;
	uint64_t s = c->seed * 0x9E3779B97F4A7C15ull + 1;
	struct held *h = NULL;
	size_t nh = 0, caph = 0;
	uint64_t used = 0;
	int misses = 0;

	ck_assert_int_eq(extents_init(&e, c->total, c->align), 0);
	/* Random sizes until several in a row miss, then the rest exactly. */
	while (e.avail > 0) {
		uint64_t len, off = UINT64_MAX, rounded;
		int rc;

		if (misses < 8)
			len = 1 + t_rnd_next(&s) % c->max_len;
		else
			len = extents_largest(&e);
		rounded = (len + c->align - 1) / c->align * c->align;
		rc = extents_alloc(&e, len, &off);
		ASSERT_VALID(&e);
		if (rc == -ENOSPC) {
			ck_assert_msg(extents_largest(&e) < rounded,
				      "-ENOSPC for %llu though the largest free extent is %llu",
				      (unsigned long long)len, (unsigned long long)extents_largest(&e));
			misses++;
			continue;
		}
		ck_assert_int_eq(rc, 0);
		ck_assert_uint_eq(off % c->align, 0);
		ck_assert_uint_le(off + rounded, e.total);
		/* No overlap with anything held. */
		for (size_t i = 0; i < nh; i++)
			if (!(off + rounded <= h[i].off || h[i].off + h[i].len <= off))
				ck_abort_msg("[%llu, +%llu) overlaps [%llu, +%llu)", (unsigned long long)off,
					     (unsigned long long)rounded, (unsigned long long)h[i].off,
					     (unsigned long long)h[i].len);
		if (nh == caph) {
			caph = caph ? caph * 2 : 64;
			h = realloc(h, caph * sizeof(*h));
			ck_assert_ptr_nonnull(h);
		}
		h[nh++] = (struct held){ off, rounded };
		used += rounded;
		ck_assert_uint_eq(e.avail, e.total - used);
	}
	ck_assert_uint_eq(e.n, 0);
	ck_assert_uint_eq(extents_largest(&e), 0);
	{
		uint64_t off;

		ck_assert_int_eq(extents_alloc(&e, 1, &off), -ENOSPC);
	}
	/* Free in a random order (Fisher-Yates). */
	for (size_t i = nh; i > 1; i--) {
		size_t j = (size_t)(t_rnd_next(&s) % i);
		struct held tmp = h[i - 1];

		h[i - 1] = h[j];
		h[j] = tmp;
	}
	for (size_t i = 0; i < nh; i++) {
		/* Half the time give the length unrounded: it rounds up the same way. */
		uint64_t len = h[i].len;

		if (c->align > 1 && (t_rnd_next(&s) & 1))
			len -= c->align - 1;
		ck_assert_int_eq(extents_free(&e, h[i].off, len), 0);
		ASSERT_VALID(&e);
		used -= h[i].len;
		ck_assert_uint_eq(e.avail, e.total - used);
		/* A second free of the same range is refused. */
		if (t_rnd_next(&s) % 4 == 0) {
			ck_assert_int_eq(extents_free(&e, h[i].off, h[i].len), -EINVAL);
			ASSERT_VALID(&e);
		}
	}
	assert_whole(&e);
	free(h);
	extents_fini(&e);
}
END_TEST

/* ------------------------------------------------------- first fit */

START_TEST(test_first_fit)
{
	struct ts_extents e;
	uint64_t off[6], x;

	ck_assert_int_eq(extents_init(&e, 100 * 4096, 4096), 0);
	/* A=4 blocks, B=2, C=4, D=8, E=4, rest 78 */
	ck_assert_int_eq(extents_alloc(&e, 4 * 4096, &off[0]), 0);
	ck_assert_int_eq(extents_alloc(&e, 2 * 4096, &off[1]), 0);
	ck_assert_int_eq(extents_alloc(&e, 4 * 4096, &off[2]), 0);
	ck_assert_int_eq(extents_alloc(&e, 8 * 4096, &off[3]), 0);
	ck_assert_int_eq(extents_alloc(&e, 4 * 4096, &off[4]), 0);
	ck_assert_uint_eq(off[0], 0);
	ck_assert_uint_eq(off[1], 4 * 4096);
	ck_assert_uint_eq(off[2], 6 * 4096);
	ck_assert_uint_eq(off[3], 10 * 4096);
	ck_assert_uint_eq(off[4], 18 * 4096);
	/* Holes: B (2 blocks at 4) and D (8 blocks at 10), then the tail at 22. */
	ck_assert_int_eq(extents_free(&e, off[1], 2 * 4096), 0);
	ck_assert_int_eq(extents_free(&e, off[3], 8 * 4096), 0);
	ASSERT_VALID(&e);
	ck_assert_uint_eq(e.n, 3);
	ck_assert_uint_eq(extents_largest(&e), 78 * 4096);
	/* 3 blocks: B is too small, D is the first that fits. */
	ck_assert_int_eq(extents_alloc(&e, 3 * 4096, &x), 0);
	ck_assert_uint_eq(x, 10 * 4096);
	/* 1 block: B, the first. */
	ck_assert_int_eq(extents_alloc(&e, 4096, &x), 0);
	ck_assert_uint_eq(x, 4 * 4096);
	/* 5 blocks: exactly what is left of D (13..18). */
	ck_assert_int_eq(extents_alloc(&e, 5 * 4096, &x), 0);
	ck_assert_uint_eq(x, 13 * 4096);
	/* 2 blocks: B's remaining block is too small, D is gone: the tail. */
	ck_assert_int_eq(extents_alloc(&e, 2 * 4096, &x), 0);
	ck_assert_uint_eq(x, 22 * 4096);
	ASSERT_VALID(&e);
	{
		const uint64_t want[] = { 5 * 4096, 4096, 24 * 4096, 76 * 4096 };

		assert_free_list(&e, 2, want);
	}
	extents_fini(&e);
}
END_TEST

/* ------------------------------------------------------ alignment */

struct align_case {
	uint64_t align, len, want_used;
};

static const struct align_case align_cases[] = {
	{ 4096, 1, 4096 },
	{ 4096, 4095, 4096 },
	{ 4096, 4096, 4096 },
	{ 4096, 4097, 8192 },
	{ 512, 513, 1024 },
	{ 1 * MiB, 1, 1 * MiB },
	{ 1, 7, 7 },
};

START_TEST(test_alignment)
{
	const struct align_case *c = &align_cases[_i];
	struct ts_extents e;
	uint64_t a, b;

	ck_assert_int_eq(extents_init(&e, 16 * c->align + 16 * c->len, c->align), 0);
	ck_assert_int_eq(extents_alloc(&e, c->len, &a), 0);
	ck_assert_int_eq(extents_alloc(&e, c->len, &b), 0);
	ASSERT_VALID(&e);
	ck_assert_uint_eq(a, 0);
	ck_assert_uint_eq(b, c->want_used);         /* the next starts after the rounded length */
	ck_assert_uint_eq(e.avail, e.total - 2 * c->want_used);
	/* Freeing with the unrounded length frees the rounded one. */
	ck_assert_int_eq(extents_free(&e, a, c->len), 0);
	ck_assert_uint_eq(e.avail, e.total - c->want_used);
	ck_assert_int_eq(extents_free(&e, b, c->want_used), 0);
	assert_whole(&e);
	/* A misaligned offset is refused. */
	if (c->align > 1) {
		ck_assert_int_eq(extents_alloc(&e, c->len, &a), 0);
		ck_assert_int_eq(extents_free(&e, a + 1, c->len), -EINVAL);
		ck_assert_int_eq(extents_free(&e, a, c->len), 0);
		assert_whole(&e);
	}
	extents_fini(&e);
}
END_TEST

/* -------------------------------------------------- fragmentation */

START_TEST(test_fragmentation_enospc)
{
	struct ts_extents e;
	uint64_t q = 16 * MiB, off[4], x;
	size_t n_before;

	ck_assert_int_eq(extents_init(&e, 4 * q, 4096), 0);
	for (int i = 0; i < 4; i++) {
		ck_assert_int_eq(extents_alloc(&e, q, &off[i]), 0);
		ck_assert_uint_eq(off[i], (uint64_t)i * q);
	}
	ck_assert_int_eq(extents_alloc(&e, 4096, &x), -ENOSPC);
	ck_assert_int_eq(extents_free(&e, off[0], q), 0);
	ck_assert_int_eq(extents_free(&e, off[2], q), 0);
	ASSERT_VALID(&e);
	ck_assert_uint_eq(e.avail, 2 * q);
	ck_assert_uint_eq(extents_largest(&e), q);
	n_before = e.n;
	/* Half the space is free, but in two pieces of a quarter. */
	ck_assert_int_eq(extents_alloc(&e, q + 1, &x), -ENOSPC);
	ck_assert_int_eq(extents_alloc(&e, 2 * q, &x), -ENOSPC);
	ck_assert_int_eq(extents_alloc(&e, UINT64_MAX, &x), -ENOSPC);
	ck_assert_int_eq(extents_alloc(&e, 4 * q + 1, &x), -ENOSPC);
	ASSERT_VALID(&e);
	ck_assert_uint_eq(e.n, n_before);
	ck_assert_uint_eq(e.avail, 2 * q);
	/* A quarter still fits, twice. */
	ck_assert_int_eq(extents_alloc(&e, q, &x), 0);
	ck_assert_uint_eq(x, 0);
	ck_assert_int_eq(extents_alloc(&e, q, &x), 0);
	ck_assert_uint_eq(x, 2 * q);
	ck_assert_uint_eq(e.n, 0);
	for (int i = 3; i >= 0; i--)
		ck_assert_int_eq(extents_free(&e, off[i], q), 0);
	assert_whole(&e);
	extents_fini(&e);
}
END_TEST

/* ------------------------------------------------------ bad frees */

struct bad_free {
	const char *name;
	uint64_t off, len;      /* in blocks, or raw bytes when raw */
	int raw;
};

/*
 * Layout for these: 32 blocks; [0,4) allocated, [4,8) free, [8,16)
 * allocated, [16,20) free, [20,32) allocated.
 */
static const struct bad_free bad_frees[] = {
	{ "exactly a free extent", 4, 4, 0 },
	{ "inside a free extent", 5, 1, 0 },
	{ "the tail of a free extent and past it", 6, 4, 0 },
	{ "before and into a free extent", 2, 3, 0 },
	{ "around a free extent", 2, 8, 0 },
	{ "around two free extents", 0, 32, 0 },
	{ "ending inside the next free extent", 10, 7, 0 },
	{ "start of the second free extent", 16, 1, 0 },
	{ "past the end", 30, 4, 0 },
	{ "at the end", 32, 1, 0 },
	{ "far outside", 1000, 1, 0 },
	{ "offset near UINT64_MAX", UINT64_MAX - 4095, 4096, 1 },
	{ "length near UINT64_MAX", 0, UINT64_MAX, 1 },
	{ "length that wraps when rounded", 4096, UINT64_MAX - 100, 1 },
	{ "misaligned offset", 4096 * 9 + 1, 4096, 1 },
	{ "zero length", 4096 * 9, 0, 1 },
};

START_TEST(test_bad_free)
{
	const struct bad_free *c = &bad_frees[_i];
	struct ts_extents e;
	uint64_t b = 4096, x[5], off, len;
	const uint64_t want[] = { 4 * 4096, 4 * 4096, 16 * 4096, 4 * 4096 };

	ck_assert_int_eq(extents_init(&e, 32 * b, b), 0);
	ck_assert_int_eq(extents_alloc(&e, 4 * b, &x[0]), 0);
	ck_assert_int_eq(extents_alloc(&e, 4 * b, &x[1]), 0);
	ck_assert_int_eq(extents_alloc(&e, 8 * b, &x[2]), 0);
	ck_assert_int_eq(extents_alloc(&e, 4 * b, &x[3]), 0);
	ck_assert_int_eq(extents_alloc(&e, 12 * b, &x[4]), 0);
	ck_assert_int_eq(extents_free(&e, x[1], 4 * b), 0);
	ck_assert_int_eq(extents_free(&e, x[3], 4 * b), 0);
	assert_free_list(&e, 2, want);

	off = c->raw ? c->off : c->off * b;
	len = c->raw ? c->len : c->len * b;
	ck_assert_msg(extents_free(&e, off, len) == -EINVAL, "%s: not refused", c->name);
	ASSERT_VALID(&e);
	assert_free_list(&e, 2, want);   /* nothing changed */
	extents_fini(&e);
}
END_TEST

/* --------------------------------------------------------- merging */

struct merge_case {
	const char *name;
	int free_first[4];     /* blocks (of 4 allocated 4-block pieces + tail) freed first; -1 ends */
	int then;              /* the piece freed last */
	size_t n_after;
	uint64_t after[8];     /* free list after, in blocks */
};

/* 5 pieces of 4 blocks each in a 20-block space: pieces 0..4 at 0,4,8,12,16. */
static const struct merge_case merge_cases[] = {
	{ "no neighbour", { -1 }, 2, 1, { 8, 4 } },
	{ "previous only", { 1, -1 }, 2, 1, { 4, 8 } },
	{ "next only", { 3, -1 }, 2, 1, { 8, 8 } },
	{ "both", { 1, 3, -1 }, 2, 1, { 4, 12 } },
	{ "both, reaching the start and the end", { 0, 1, 3, 4 }, 2, 1, { 0, 20 } },
	{ "previous, a gap after", { 0, 4, -1 }, 1, 2, { 0, 8, 16, 4 } },
	{ "next, a gap before", { 0, 4, -1 }, 3, 2, { 0, 4, 12, 8 } },
	{ "first piece, next neighbour", { 1, -1 }, 0, 1, { 0, 8 } },
	{ "last piece, previous neighbour", { 3, -1 }, 4, 1, { 12, 8 } },
	{ "first piece alone", { 2, -1 }, 0, 2, { 0, 4, 8, 4 } },
	{ "last piece alone", { 2, -1 }, 4, 2, { 8, 4, 16, 4 } },
};

START_TEST(test_merge)
{
	const struct merge_case *c = &merge_cases[_i];
	struct ts_extents e;
	uint64_t b = 4096, off[5], want[8];

	ck_assert_int_eq(extents_init(&e, 20 * b, b), 0);
	for (int i = 0; i < 5; i++) {
		ck_assert_int_eq(extents_alloc(&e, 4 * b, &off[i]), 0);
		ck_assert_uint_eq(off[i], (uint64_t)i * 4 * b);
	}
	ck_assert_uint_eq(e.n, 0);
	for (int i = 0; i < 4 && c->free_first[i] >= 0; i++) {
		ck_assert_int_eq(extents_free(&e, off[c->free_first[i]], 4 * b), 0);
		ASSERT_VALID(&e);
	}
	ck_assert_int_eq(extents_free(&e, off[c->then], 4 * b), 0);
	ASSERT_VALID(&e);
	for (size_t i = 0; i < 2 * c->n_after; i++)
		want[i] = c->after[i] * b;
	assert_free_list(&e, c->n_after, want);
	{
		uint64_t big = 0;

		for (size_t i = 0; i < c->n_after; i++)
			if (want[2 * i + 1] > big)
				big = want[2 * i + 1];
		ck_assert_uint_eq(extents_largest(&e), big);
	}
	extents_fini(&e);
}
END_TEST

/* --------------------------------------- many holes, growing the list */

START_TEST(test_many_holes)
{
	struct ts_extents e;
	uint64_t b = 4096, off[200];

	ck_assert_int_eq(extents_init(&e, 200 * b, b), 0);
	for (int i = 0; i < 200; i++)
		ck_assert_int_eq(extents_alloc(&e, b, &off[i]), 0);
	/* Every other block: 100 separate extents, past the initial 16 slots. */
	for (int i = 0; i < 200; i += 2) {
		ck_assert_int_eq(extents_free(&e, off[i], b), 0);
		ASSERT_VALID(&e);
	}
	ck_assert_uint_eq(e.n, 100);
	ck_assert_uint_eq(extents_largest(&e), b);
	for (int i = 0; i < 100; i++)
		ck_assert_uint_eq(e.free[i].off, (uint64_t)i * 2 * b);
	/* Two blocks do not fit anywhere though 100 are free. */
	{
		uint64_t x;

		ck_assert_int_eq(extents_alloc(&e, 2 * b, &x), -ENOSPC);
	}
	/* Filling each hole merges with both neighbours, from the back. */
	for (int i = 199; i >= 1; i -= 2) {
		ck_assert_int_eq(extents_free(&e, off[i], b), 0);
		ASSERT_VALID(&e);
	}
	assert_whole(&e);
	extents_fini(&e);
}
END_TEST

/*
 * The list cannot grow (ALLOC fails in the realloc): the free is refused
 * with -ENOMEM and the list is as it was.
 */
START_TEST(test_grow_fails)
{
	struct ts_extents e;
	uint64_t b = 4096, off[40];
	int rc;

	NEED_FAULTS();
	ck_assert_int_eq(extents_init(&e, 40 * b, b), 0);
	for (int i = 0; i < 40; i++)
		ck_assert_int_eq(extents_alloc(&e, b, &off[i]), 0);
	for (int i = 0; i < 32; i += 2)
		ck_assert_int_eq(extents_free(&e, off[i], b), 0);
	ck_assert_uint_eq(e.n, 16);
	ck_assert_uint_eq(e.n, e.cap);
	ts_fault_arm(TIER_FAULT_ALLOC, 1, 1, -ENOMEM);
	rc = extents_free(&e, off[34], b);  /* a 17th separate extent */
	ck_assert_uint_eq(ts_fault_fired(TIER_FAULT_ALLOC), 1);
	ck_assert_int_eq(rc, -ENOMEM);
	ASSERT_VALID(&e);
	ck_assert_uint_eq(e.n, 16);
	ck_assert_uint_eq(e.avail, 16 * b);
	/* Merging needs no memory: it works while allocation fails. */
	ts_fault_arm(TIER_FAULT_ALLOC, 1, TIER_FAULT_PERSISTENT, -ENOMEM);
	ck_assert_int_eq(extents_free(&e, off[1], b), 0);
	ck_assert_uint_eq(e.n, 15);
	ts_fault_disarm(TIER_FAULT_ALLOC);
	ck_assert_int_eq(extents_free(&e, off[34], b), 0);
	ASSERT_VALID(&e);
	ck_assert_uint_eq(e.n, 16);
	extents_fini(&e);
}
END_TEST

/* --------------------------------------------------- extents_valid */

struct broken_case {
	const char *name;
	size_t n;
	uint64_t ext[6];       /* off, len pairs (bytes) */
	uint64_t avail;
};

/* A 64 KiB space at 4 KiB alignment. */
static const struct broken_case broken_cases[] = {
	{ "adjacent (unmerged)", 2, { 0, 4096, 4096, 4096 }, 8192 },
	{ "overlapping", 2, { 0, 8192, 4096, 8192 }, 16384 },
	{ "out of order", 2, { 16384, 4096, 0, 4096 }, 8192 },
	{ "misaligned offset", 1, { 100, 4096 }, 4096 },
	{ "misaligned length", 1, { 0, 4000 }, 4000 },
	{ "zero length", 2, { 0, 4096, 8192, 0 }, 4096 },
	{ "past the end", 1, { 61440, 8192 }, 8192 },
	{ "avail does not add up", 2, { 0, 4096, 8192, 4096 }, 4096 },
	{ "avail over total", 0, { 0 }, 65536 + 4096 },
};

START_TEST(test_valid_detects)
{
	const struct broken_case *c = &broken_cases[_i];
	struct ts_extents e;

	ck_assert_int_eq(extents_init(&e, 65536, 4096), 0);
	ck_assert(extents_valid(&e));
	e.n = c->n;
	for (size_t i = 0; i < c->n; i++)
		e.free[i] = (struct ts_extent){ c->ext[2 * i], c->ext[2 * i + 1] };
	e.avail = c->avail;
	ck_assert_msg(!extents_valid(&e), "%s: extents_valid() accepted it", c->name);
	extents_fini(&e);
}
END_TEST

static Suite *extent_suite(void)
{
	Suite *s = suite_create("extent");
	TCase *tc = tcase_create("alloc");

	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_loop_test(tc, test_init, 0, (int)ARRAY_SIZE(init_cases));
	tcase_add_loop_test(tc, test_fill_and_drain, 0, (int)ARRAY_SIZE(fill_cases));
	tcase_add_test(tc, test_first_fit);
	tcase_add_loop_test(tc, test_alignment, 0, (int)ARRAY_SIZE(align_cases));
	tcase_add_test(tc, test_fragmentation_enospc);
	suite_add_tcase(s, tc);

	tc = tcase_create("free");
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_loop_test(tc, test_bad_free, 0, (int)ARRAY_SIZE(bad_frees));
	tcase_add_loop_test(tc, test_merge, 0, (int)ARRAY_SIZE(merge_cases));
	tcase_add_test(tc, test_many_holes);
	tcase_add_loop_test(tc, test_valid_detects, 0, (int)ARRAY_SIZE(broken_cases));
	suite_add_tcase(s, tc);

	tc = t_tcase_faults("free-faults");
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_test(tc, test_grow_fails);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return t_run_suite(extent_suite());
}
