/*
 * test_buddy.c - the exact-size buddy slot allocator (tiers/buddy.c).
 *
 * Covers:
 *  - init: spaces that are not a power of two (tiled by their largest
 *    aligned blocks), rounded down to the minimum block, one block, no
 *    block, a bad minimum block, too many blocks; calls on a finished
 *    allocator;
 *  - slot sizes (rounding, saturation) and offsets aligned to min_block;
 *  - tail trimming: a slot takes its rounded length only, the rest of its
 *    block is back on the free lists as the aligned blocks that tile it,
 *    and largest_free / free_blocks / fragmentation say so;
 *  - packing equal shards: floor(space / 2^order) of them fit, and the
 *    trimmed tails are then usable by smaller requests down to a full
 *    space;
 *  - bad frees (double, shorter, longer, two slots as one, inside, a free
 *    tail, misaligned, zero, outside, overflowing): -EINVAL and nothing
 *    changes;
 *  - a randomized model check: thousands of allocs and frees against a
 *    byte-per-block model, several seeds and spaces; after every operation
 *    buddy_valid(), the stats, no overlap, and that an allocation fails
 *    exactly when the model has no wholly free aligned block of the order
 *    needed; freeing everything gives back the initial state;
 *  - fault site ALLOC: buddy_init fails cleanly at every allocation it
 *    makes; alloc and free make none;
 *  - buddy_valid() catching inconsistent counters.
 */
#include "config.h"

#include <check.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/fault.h"
#include "tiers/buddy.h"
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

static unsigned ceil_log2(uint64_t n)
{
	unsigned k = 0;

	while ((1ull << k) < n)
		k++;
	return k;
}

#define ASSERT_VALID(b) \
	ck_assert_msg(buddy_valid(b), "buddy_valid() false at %s:%d (used %llu, nalloc %llu)", \
		      __FILE__, __LINE__, (unsigned long long)(b)->used, (unsigned long long)(b)->nalloc)

static void assert_stats_eq(const struct buddy_stats *a, const struct buddy_stats *w)
{
	ck_assert_uint_eq(a->size, w->size);
	ck_assert_uint_eq(a->used, w->used);
	ck_assert_uint_eq(a->free, w->free);
	ck_assert_uint_eq(a->largest_free, w->largest_free);
	ck_assert_uint_eq(a->nalloc, w->nalloc);
	ck_assert_uint_eq(a->free_blocks, w->free_blocks);
	ck_assert_msg(a->fragmentation == w->fragmentation, "fragmentation %g, expected %g",
		      a->fragmentation, w->fragmentation);
}

/* The fully merged state of an empty space of @nb blocks: one free block per set bit. */
static void assert_empty(const struct buddy *b)
{
	struct buddy_stats st;
	uint64_t nb = b->size / b->min_block;

	ASSERT_VALID(b);
	buddy_stats(b, &st);
	ck_assert_uint_eq(st.used, 0);
	ck_assert_uint_eq(st.nalloc, 0);
	ck_assert_uint_eq(st.free, b->size);
	ck_assert_uint_eq(st.free_blocks, (uint64_t)__builtin_popcountll(nb));
	ck_assert_uint_eq(st.largest_free, b->min_block << (63 - __builtin_clzll(nb)));
	ck_assert(st.fragmentation == 1.0 - (double)st.largest_free / (double)st.free);
}

/* ------------------------------------------------------------- init */

struct init_case {
	uint64_t size, min_block;
	int rc;
	uint64_t want_size;
	unsigned want_norders;
};

static const struct init_case init_cases[] = {
	{ 1 * MiB, 4096, 0, 1 * MiB, 9 },
	{ 96 * 4096, 4096, 0, 96 * 4096, 7 },           /* 64 + 32 */
	{ 100 * 4096 + 4095, 4096, 0, 100 * 4096, 7 },  /* rounded down: 64 + 32 + 4 */
	{ 7 * 64, 64, 0, 7 * 64, 3 },                   /* 4 + 2 + 1 */
	{ 4096, 4096, 0, 4096, 1 },                     /* one block */
	{ 1 * MiB, 64, 0, 1 * MiB, 15 },
	{ 1000 * 65536, 65536, 0, 1000 * 65536, 10 },
	{ UINT64_MAX, 1ull << 63, 0, 1ull << 63, 1 },   /* the largest block there is */
	{ 4095, 4096, -EINVAL, 0, 0 },                  /* smaller than one block */
	{ 0, 4096, -EINVAL, 0, 0 },
	{ 1 * MiB, 0, -EINVAL, 0, 0 },
	{ 1 * MiB, 32, -EINVAL, 0, 0 },                 /* a power of two, below 64 */
	{ 1 * MiB, 3000, -EINVAL, 0, 0 },
	{ 1 * MiB, 4097, -EINVAL, 0, 0 },
	{ UINT64_MAX, 4096, -EINVAL, 0, 0 },            /* 2^52 blocks: too many */
};

START_TEST(test_init)
{
	const struct init_case *c = &init_cases[_i];
	struct buddy b;
	struct buddy_stats st;
	uint64_t off = 0;
	int rc = buddy_init(&b, c->size, c->min_block);

	ck_assert_msg(rc == c->rc, "init(%llu, %llu): %d, expected %d", (unsigned long long)c->size,
		      (unsigned long long)c->min_block, rc, c->rc);
	if (rc == 0) {
		uint64_t top;

		ck_assert_uint_eq(b.size, c->want_size);
		ck_assert_uint_eq(b.min_block, c->min_block);
		ck_assert_uint_eq(1ull << b.min_shift, c->min_block);
		ck_assert_uint_eq(b.norders, c->want_norders);
		assert_empty(&b);
		top = b.min_block << (b.norders - 1);
		ck_assert_int_eq(buddy_alloc(&b, 0, &off), -EINVAL);
		if (b.size < UINT64_MAX)
			ck_assert_int_eq(buddy_alloc(&b, b.size + 1, &off), -ENOSPC);
		ck_assert_int_eq(buddy_alloc(&b, UINT64_MAX, &off), -ENOSPC);
		/* More than the largest block: refused even though it is <= size. */
		if (top < b.size)
			ck_assert_int_eq(buddy_alloc(&b, top + 1, &off), -ENOSPC);
		assert_empty(&b);
		/* The largest block, whole. */
		ck_assert_int_eq(buddy_alloc(&b, top, &off), 0);
		ck_assert_uint_eq(off, 0);
		ck_assert_uint_eq(b.used, top);
		ASSERT_VALID(&b);
		ck_assert_int_eq(buddy_free(&b, off, top), 0);
		assert_empty(&b);
	} else {
		ck_assert_ptr_null(b.impl);
		ck_assert_uint_eq(b.size, 0);
	}
	buddy_fini(&b);
	/* A finished allocator refuses everything and is not valid. */
	ck_assert_int_eq(buddy_alloc(&b, 4096, &off), -EINVAL);
	ck_assert_int_eq(buddy_free(&b, 0, 4096), -EINVAL);
	ck_assert(!buddy_valid(&b));
	buddy_stats(&b, &st);
	ck_assert_uint_eq(st.size, 0);
	ck_assert_uint_eq(st.free, 0);
	ck_assert_uint_eq(st.largest_free, 0);
	ck_assert(st.fragmentation == 0.0);
	buddy_fini(&b);   /* twice is fine */
}
END_TEST

/* ------------------------------------------------ slot size, alignment */

struct slot_case {
	uint64_t min_block, len, want;
};

static const struct slot_case slot_cases[] = {
	{ 4096, 1, 4096 },
	{ 4096, 4095, 4096 },
	{ 4096, 4096, 4096 },
	{ 4096, 4097, 8192 },
	{ 4096, 3 * 4096 - 1, 3 * 4096 },
	{ 64, 65, 128 },
	{ 64 * KiB, 1, 64 * KiB },
	{ 4096, 0, 0 },
	{ 4096, UINT64_MAX - 4095, UINT64_MAX - 4095 },   /* the largest multiple */
	{ 4096, UINT64_MAX - 4094, UINT64_MAX },          /* would wrap: saturates */
	{ 4096, UINT64_MAX, UINT64_MAX },
};

START_TEST(test_slot_size)
{
	const struct slot_case *c = &slot_cases[_i];
	struct buddy b;
	uint64_t off;

	ck_assert_int_eq(buddy_init(&b, 64 * c->min_block, c->min_block), 0);
	ck_assert_uint_eq(buddy_slot_size(&b, c->len), c->want);
	/* An allocation uses exactly the slot size. */
	if (c->len && c->want <= b.size) {
		ck_assert_int_eq(buddy_alloc(&b, c->len, &off), 0);
		ck_assert_uint_eq(b.used, c->want);
		ck_assert_uint_eq(off % c->min_block, 0);
		ASSERT_VALID(&b);
		/* The unrounded length frees the rounded slot. */
		ck_assert_int_eq(buddy_free(&b, off, c->len), 0);
		assert_empty(&b);
	}
	buddy_fini(&b);
}
END_TEST

struct align_case {
	uint64_t nblocks, min_block;
	uint64_t seed;
};

static const struct align_case align_cases[] = {
	{ 100, 4096, 1 },
	{ 1000, 64, 2 },
	{ 333, 64 * KiB, 3 },
	{ 37, 1 * MiB, 4 },
};

/* Random lengths (mostly not multiples of min_block) until full: every offset aligned. */
START_TEST(test_alignment)
{
	const struct align_case *c = &align_cases[_i];
	struct buddy b;
	uint64_t s = c->seed * 0x9E3779B97F4A7C15ull + 1, off;
	uint64_t *offs = calloc(c->nblocks, sizeof(*offs));
	size_t n = 0;

	ck_assert_ptr_nonnull(offs);
	ck_assert_int_eq(buddy_init(&b, c->nblocks * c->min_block, c->min_block), 0);
	for (int miss = 0; miss < 32;) {
		uint64_t len = 1 + t_rnd_next(&s) % (8 * c->min_block);

		if (buddy_alloc(&b, len, &off) != 0) {
			miss++;
			continue;
		}
		ck_assert_msg(off % c->min_block == 0, "offset %llu not aligned to %llu",
			      (unsigned long long)off, (unsigned long long)c->min_block);
		ck_assert_uint_le(off + buddy_slot_size(&b, len), b.size);
		offs[n++] = off;
	}
	/* Then single blocks fill every hole. */
	while (buddy_alloc(&b, 1, &off) == 0) {
		ck_assert_uint_eq(off % c->min_block, 0);
		offs[n++] = off;
	}
	ASSERT_VALID(&b);
	ck_assert_uint_eq(b.used, b.size);
	ck_assert_uint_eq(b.nalloc, n);
	buddy_fini(&b);
	free(offs);
}
END_TEST

/* ----------------------------------------------------- tail trimming */

struct trim_case {
	uint64_t nblocks, len;         /* the space and one request, in blocks */
	uint64_t largest, free_blocks; /* after it: largest free block (blocks), count */
};

static const struct trim_case trim_cases[] = {
	{ 8, 5, 2, 2 },        /* tail 3 = 2 + 1 */
	{ 8, 3, 4, 2 },        /* [0,4) split, tail 1, the other half 4 */
	{ 8, 7, 1, 1 },
	{ 8, 8, 0, 0 },
	{ 8, 1, 4, 3 },        /* plain buddy: 1 + 2 + 4 */
	{ 16, 9, 4, 3 },       /* tail 7 = 4 + 2 + 1 */
	{ 96, 33, 32, 6 },     /* tail 31 = 16+8+4+2+1, and the 32 after 64 */
	{ 12, 5, 4, 3 },       /* tail 2 + 1, and the 4 after 8 */
	{ 100, 60, 32, 3 },    /* tail 4, and 32 + 4 */
};

START_TEST(test_tail_trim)
{
	const struct trim_case *c = &trim_cases[_i];
	const uint64_t mb = 4096;
	struct buddy b;
	struct buddy_stats st, st0;
	uint64_t off, x;
	double frag;

	ck_assert_int_eq(buddy_init(&b, c->nblocks * mb, mb), 0);
	buddy_stats(&b, &st0);
	ck_assert_int_eq(buddy_alloc(&b, c->len * mb - 100, &off), 0);
	ASSERT_VALID(&b);
	buddy_stats(&b, &st);
	ck_assert_uint_eq(off % (mb << ceil_log2(c->len)), 0);  /* aligned to its block */
	ck_assert_uint_eq(st.used, c->len * mb);                /* the slot, not the block */
	ck_assert_uint_eq(st.free, (c->nblocks - c->len) * mb);
	ck_assert_uint_eq(st.nalloc, 1);
	ck_assert_uint_eq(st.largest_free, c->largest * mb);
	ck_assert_uint_eq(st.free_blocks, c->free_blocks);
	frag = st.free ? 1.0 - (double)c->largest / (double)(c->nblocks - c->len) : 0.0;
	ck_assert_msg(st.fragmentation == frag, "fragmentation %g, expected %g", st.fragmentation, frag);
	/* The trimmed tail is usable: single blocks fill the space exactly. */
	for (uint64_t i = c->len; i < c->nblocks; i++) {
		ck_assert_int_eq(buddy_alloc(&b, mb, &x), 0);
		ck_assert(x < off || x >= off + c->len * mb);
	}
	ck_assert_int_eq(buddy_alloc(&b, 1, &x), -ENOSPC);
	buddy_stats(&b, &st);
	ck_assert_uint_eq(st.used, st.size);
	ck_assert(st.fragmentation == 0.0);
	ASSERT_VALID(&b);
	for (uint64_t i = 0; i < c->nblocks; i++)
		if (i * mb < off || i * mb >= off + c->len * mb)
			ck_assert_int_eq(buddy_free(&b, i * mb, mb), 0);
	ck_assert_int_eq(buddy_free(&b, off, c->len * mb), 0);
	assert_empty(&b);
	buddy_stats(&b, &st);
	assert_stats_eq(&st, &st0);
	buddy_fini(&b);
}
END_TEST

/* ----------------------------------------------------------- packing */

struct pack_case {
	uint64_t nblocks, shard;   /* in blocks */
	uint64_t want;             /* shards that fit: floor(nblocks / 2^ceil_log2(shard)) */
};

/*
 * A shard of n blocks takes a block of 2^ceil(log2 n) and gives back the
 * rest, which only a smaller request can use: 3-block shards fill a
 * 96-block space 24 times (72 blocks), and 24 single blocks fill the rest.
 */
static const struct pack_case pack_cases[] = {
	{ 96, 3, 24 },
	{ 96, 4, 24 },
	{ 96, 2, 48 },
	{ 96, 1, 96 },
	{ 96, 64, 1 },
	{ 96, 65, 0 },        /* needs 128 */
	{ 100, 3, 25 },
	{ 100, 5, 12 },
	{ 8, 5, 1 },
	{ 1000, 7, 125 },
	{ 1000, 9, 62 },
	{ 64, 33, 1 },
	{ 1023, 16, 63 },
};

START_TEST(test_pack)
{
	const struct pack_case *c = &pack_cases[_i];
	const uint64_t mb = 64 * KiB;
	struct buddy b;
	struct buddy_stats st;
	uint64_t *offs = calloc(c->nblocks, sizeof(*offs)), x;
	uint64_t n = 0, ones = 0;
	unsigned k = ceil_log2(c->shard);

	ck_assert_ptr_nonnull(offs);
	ck_assert_int_eq(buddy_init(&b, c->nblocks * mb, mb), 0);
	while (buddy_alloc(&b, c->shard * mb, &x) == 0) {
		ck_assert_uint_eq(x % (mb << k), 0);
		offs[n++] = x;
		ASSERT_VALID(&b);
	}
	ck_assert_uint_eq(n, c->want);
	buddy_stats(&b, &st);
	ck_assert_uint_eq(st.used, n * c->shard * mb);
	ck_assert_uint_eq(st.nalloc, n);
	ck_assert_uint_lt(st.largest_free, mb << k);
	/* The tails (and whatever is left) take single blocks up to a full space. */
	while (buddy_alloc(&b, mb, &offs[n + ones]) == 0)
		ones++;
	ck_assert_uint_eq(n * c->shard + ones, c->nblocks);
	buddy_stats(&b, &st);
	ck_assert_uint_eq(st.used, st.size);
	ck_assert_uint_eq(st.free_blocks, 0);
	ASSERT_VALID(&b);
	for (uint64_t i = 0; i < n; i++)
		ck_assert_int_eq(buddy_free(&b, offs[i], c->shard * mb), 0);
	for (uint64_t i = 0; i < ones; i++)
		ck_assert_int_eq(buddy_free(&b, offs[n + i], mb), 0);
	assert_empty(&b);
	buddy_fini(&b);
	free(offs);
}
END_TEST

/* -------------------------------------------------------- bad frees */

enum { REL_SLOT, REL_RAW, REL_END };

struct bad_free {
	const char *name;
	int prefree;        /* slot freed (correctly) first, -1 none */
	int rel;            /* REL_SLOT: slot's offset + blocks + bytes; REL_RAW: bytes; REL_END: size + bytes */
	int slot;
	int64_t dblocks, dbytes;
	uint64_t lblocks, lbytes;
};

/*
 * Slots in a 32-block space: s0 = 3 blocks (its 4th block trimmed, free),
 * s1 = 4, s2 = 8, s3 = 5 (3 trimmed).  Where they land is the allocator's
 * choice; the cases are relative to them.
 */
static const uint64_t bad_slot_len[4] = { 3, 4, 8, 5 };

static const struct bad_free bad_frees[] = {
	{ "double free", 1, REL_SLOT, 1, 0, 0, 4, 0 },
	{ "double free, unrounded length", 3, REL_SLOT, 3, 0, 0, 4, 1 },
	{ "shorter length", -1, REL_SLOT, 3, 0, 0, 4, 0 },
	{ "longer length (into its free tail)", -1, REL_SLOT, 3, 0, 0, 6, 0 },
	{ "slot and its trimmed block", -1, REL_SLOT, 0, 0, 0, 4, 0 },
	{ "the trimmed block alone", -1, REL_SLOT, 0, 3, 0, 1, 0 },
	{ "the tail of a slot", -1, REL_SLOT, 3, 1, 0, 4, 0 },
	{ "inside a slot", -1, REL_SLOT, 2, 2, 0, 2, 0 },
	{ "the last block of a slot", -1, REL_SLOT, 2, 7, 0, 1, 0 },
	{ "misaligned offset", -1, REL_SLOT, 1, 0, 1, 4, 0 },
	{ "misaligned, one block early", -1, REL_SLOT, 1, 0, -4095, 4, 0 },
	{ "zero length", -1, REL_SLOT, 1, 0, 0, 0, 0 },
	{ "at the end", -1, REL_END, 0, 0, 0, 1, 0 },
	{ "past the end", -1, REL_END, 0, 0, 40960, 1, 0 },
	{ "ending past the end", -1, REL_END, 0, 0, -4096, 2, 0 },
	{ "offset near UINT64_MAX", -1, REL_RAW, 0, 0, -4096, 1, 0 },
	{ "length near UINT64_MAX", -1, REL_SLOT, 0, 0, 0, 0, UINT64_MAX },
	{ "length that wraps when rounded", -1, REL_SLOT, 1, 0, 0, 0, UINT64_MAX - 100 },
	{ "the whole space", -1, REL_RAW, 0, 0, 0, 32, 0 },
};

START_TEST(test_bad_free)
{
	const struct bad_free *c = &bad_frees[_i];
	const uint64_t mb = 4096;
	struct buddy b;
	struct buddy_stats before, after;
	uint64_t s[4], off, len;

	ck_assert_int_eq(buddy_init(&b, 32 * mb, mb), 0);
	for (int i = 0; i < 4; i++)
		ck_assert_int_eq(buddy_alloc(&b, bad_slot_len[i] * mb, &s[i]), 0);
	if (c->prefree >= 0)
		ck_assert_int_eq(buddy_free(&b, s[c->prefree], bad_slot_len[c->prefree] * mb), 0);
	ASSERT_VALID(&b);
	buddy_stats(&b, &before);

	switch (c->rel) {
	case REL_SLOT:
		off = s[c->slot] + (uint64_t)c->dblocks * mb + (uint64_t)c->dbytes;
		break;
	case REL_END:
		off = b.size + (uint64_t)c->dbytes;
		break;
	default:
		off = (uint64_t)c->dbytes;
		break;
	}
	len = c->lblocks * mb + c->lbytes;
	ck_assert_msg(buddy_free(&b, off, len) == -EINVAL, "%s: free(%llu, %llu) not refused", c->name,
		      (unsigned long long)off, (unsigned long long)len);
	ASSERT_VALID(&b);
	buddy_stats(&b, &after);
	assert_stats_eq(&after, &before);   /* nothing changed */
	/* And the real slots still free as they should. */
	for (int i = 0; i < 4; i++)
		if (i != c->prefree)
			ck_assert_int_eq(buddy_free(&b, s[i], bad_slot_len[i] * mb), 0);
	assert_empty(&b);
	buddy_fini(&b);
}
END_TEST

/* Adjacent slots are separate: neither can be freed as the other's extension. */
START_TEST(test_adjacent_slots)
{
	const uint64_t mb = 4096;
	struct buddy b;
	uint64_t a, c;

	ck_assert_int_eq(buddy_init(&b, 16 * mb, mb), 0);
	ck_assert_int_eq(buddy_alloc(&b, 8 * mb, &a), 0);
	ck_assert_int_eq(buddy_alloc(&b, 8 * mb, &c), 0);
	if (c < a) {
		uint64_t t = a;

		a = c;
		c = t;
	}
	ck_assert_uint_eq(c, a + 8 * mb);
	ck_assert_int_eq(buddy_free(&b, a, 16 * mb), -EINVAL);   /* two as one */
	ck_assert_int_eq(buddy_free(&b, a, 9 * mb), -EINVAL);    /* into the next */
	ck_assert_int_eq(buddy_free(&b, a, 7 * mb), -EINVAL);
	ck_assert_int_eq(buddy_free(&b, c - mb, 2 * mb), -EINVAL);
	ASSERT_VALID(&b);
	ck_assert_uint_eq(b.nalloc, 2);
	ck_assert_int_eq(buddy_free(&b, c, 8 * mb), 0);
	ck_assert_int_eq(buddy_free(&b, a, 8 * mb), 0);
	assert_empty(&b);
	buddy_fini(&b);
}
END_TEST

/* ------------------------------------------------------ model check */

struct model_case {
	uint64_t nblocks, min_block, seed;
	int ops;
};

static const struct model_case model_cases[] = {
	{ 64, 4096, 1, 3000 },
	{ 96, 64, 2, 3000 },
	{ 100, 4096, 3, 3000 },
	{ 1000, 512, 4, 4000 },
	{ 1023, 64 * KiB, 5, 4000 },
	{ 1, 4096, 6, 300 },
	{ 3, 64, 7, 600 },
	{ 4097, 4096, 8, 5000 },
	{ 2048, 4096, 9, 4000 },
	{ 777, 1 * MiB, 10, 3000 },
	{ 96, 64, 11, 3000 },
	{ 1000, 512, 12, 4000 },
};

struct model {
	uint64_t nb;
	uint8_t *own;        /* 1 = allocated, per block */
	uint64_t *pre;       /* pre[i] = free blocks in [0, i) */
	unsigned maxk;       /* largest order with a block inside */
};

struct mslot {
	uint64_t off, len, n;   /* offset (bytes), requested length (bytes), blocks */
};

/*
 * From the model alone: the largest order with a wholly free aligned block
 * (-1 if none), and how many free blocks the fully merged decomposition
 * has (the wholly free aligned blocks whose parent is not wholly free or
 * reaches past the end).  O(blocks).
 */
static int model_scan(struct model *m, uint64_t *nfree_blocks)
{
	int best = -1;
	uint64_t cnt = 0;

	m->pre[0] = 0;
	for (uint64_t i = 0; i < m->nb; i++)
		m->pre[i + 1] = m->pre[i] + !m->own[i];
	for (unsigned k = 0; k <= m->maxk; k++) {
		uint64_t sz = 1ull << k;

		for (uint64_t p = 0; p + sz <= m->nb; p += sz) {
			uint64_t q = p & ~(2 * sz - 1);

			if (m->pre[p + sz] - m->pre[p] != sz)
				continue;
			best = (int)k;
			if (q + 2 * sz > m->nb || m->pre[q + 2 * sz] - m->pre[q] != 2 * sz)
				cnt++;
		}
	}
	*nfree_blocks = cnt;
	return best;
}

static void check_against_model(const struct buddy *b, struct model *m, uint64_t used, uint64_t nh,
				int *maxk)
{
	struct buddy_stats st;
	uint64_t nfb;

	ASSERT_VALID(b);
	buddy_stats(b, &st);
	*maxk = model_scan(m, &nfb);
	ck_assert_uint_eq(st.used, used);
	ck_assert_uint_eq(st.free, b->size - used);
	ck_assert_uint_eq(m->pre[m->nb] * b->min_block, st.free);
	ck_assert_uint_eq(st.nalloc, nh);
	ck_assert_uint_eq(st.largest_free, *maxk < 0 ? 0 : b->min_block << *maxk);
	ck_assert_uint_eq(st.free_blocks, nfb);
	ck_assert(st.fragmentation ==
		  (st.free ? 1.0 - (double)st.largest_free / (double)st.free : 0.0));
}

START_TEST(test_model)
{
	const struct model_case *c = &model_cases[_i];
	const uint64_t mb = c->min_block;
	struct buddy b;
	struct buddy_stats st0, st;
	struct model m = { .nb = c->nblocks };
	struct mslot *h = calloc(c->nblocks, sizeof(*h));
	uint64_t s = c->seed * 0x9E3779B97F4A7C15ull + 1, used = 0, nh = 0;
	uint64_t nok = 0, nspc = 0, nfree = 0;
	int maxk;

	m.own = calloc(c->nblocks, 1);
	m.pre = calloc(c->nblocks + 1, sizeof(*m.pre));
	ck_assert(h && m.own && m.pre);
	ck_assert_int_eq(buddy_init(&b, c->nblocks * mb, mb), 0);
	m.maxk = b.norders - 1;
	buddy_stats(&b, &st0);
	check_against_model(&b, &m, 0, 0, &maxk);

	for (int op = 0; op < c->ops; op++) {
		/* alternate alloc-heavy and free-heavy phases to see full and sparse states */
		unsigned p_alloc = (op / 300) % 2 ? 30 : 75;

		if (nh == 0 || t_rnd_next(&s) % 100 < p_alloc) {
			unsigned r = (unsigned)(t_rnd_next(&s) % (b.norders + 1));
			uint64_t len, n, off = UINT64_MAX;
			unsigned k;
			int rc;

			if (t_rnd_next(&s) % 64 == 0)
				len = b.size + 1 + t_rnd_next(&s) % mb;
			else
				len = 1 + t_rnd_next(&s) % ((mb << r) - (r ? 0 : mb / 2));
			n = (len + mb - 1) / mb;
			k = ceil_log2(n);
			buddy_stats(&b, &st);
			rc = buddy_alloc(&b, len, &off);
			if (rc == -ENOSPC) {
				/* fails only when no aligned block of the order is wholly free */
				ck_assert_msg(maxk < (int)k,
					      "op %d: -ENOSPC for %llu blocks (order %u) but an order-%d block is free",
					      op, (unsigned long long)n, k, maxk);
				ASSERT_VALID(&b);
				{
					struct buddy_stats st2;

					buddy_stats(&b, &st2);
					assert_stats_eq(&st2, &st);
				}
				nspc++;
				continue;
			}
			ck_assert_msg(rc == 0, "op %d: alloc %llu: %d", op, (unsigned long long)len, rc);
			ck_assert_int_le((int)k, maxk);
			ck_assert_uint_eq(off % mb, 0);
			ck_assert_uint_le(off / mb + n, m.nb);
			for (uint64_t i = off / mb; i < off / mb + n; i++) {
				ck_assert_msg(!m.own[i], "op %d: [%llu, +%llu blocks) overlaps a live slot at block %llu",
					      op, (unsigned long long)off, (unsigned long long)n,
					      (unsigned long long)i);
				m.own[i] = 1;
			}
			h[nh++] = (struct mslot){ off, len, n };
			used += n * mb;
			nok++;
		} else {
			size_t j = (size_t)(t_rnd_next(&s) % nh);
			struct mslot x = h[j];
			uint64_t flen = t_rnd_next(&s) & 1 ? x.len : x.n * mb;

			/* now and then a wrong free first: refused, nothing changes */
			if (t_rnd_next(&s) % 6 == 0) {
				uint64_t bad_off = x.off, bad_len = (x.n + 1) * mb;

				switch (t_rnd_next(&s) % 3) {
				case 0:
					if (x.n > 1)
						bad_len = (x.n - 1) * mb;
					break;
				case 1:
					bad_off = x.off + (x.n > 1 ? mb : mb / 2);
					bad_len = x.n * mb;
					break;
				default:
					break;
				}
				buddy_stats(&b, &st);
				ck_assert_int_eq(buddy_free(&b, bad_off, bad_len), -EINVAL);
				ASSERT_VALID(&b);
				{
					struct buddy_stats st2;

					buddy_stats(&b, &st2);
					assert_stats_eq(&st2, &st);
				}
			}
			ck_assert_int_eq(buddy_free(&b, x.off, flen), 0);
			for (uint64_t i = x.off / mb; i < x.off / mb + x.n; i++)
				m.own[i] = 0;
			h[j] = h[--nh];
			used -= x.n * mb;
			nfree++;
			if (t_rnd_next(&s) % 8 == 0)
				ck_assert_int_eq(buddy_free(&b, x.off, flen), -EINVAL);  /* double */
		}
		check_against_model(&b, &m, used, nh, &maxk);
	}
	/* Every path was taken. */
	ck_assert_uint_gt(nok, 0);
	ck_assert_uint_gt(nfree, 0);
	ck_assert_uint_gt(nspc, 0);
	/* Free the rest in a random order: back to the fully merged start. */
	while (nh) {
		size_t j = (size_t)(t_rnd_next(&s) % nh);

		ck_assert_int_eq(buddy_free(&b, h[j].off, h[j].len), 0);
		h[j] = h[--nh];
		ASSERT_VALID(&b);
	}
	assert_empty(&b);
	buddy_stats(&b, &st);
	assert_stats_eq(&st, &st0);
	buddy_fini(&b);
	free(h);
	free(m.own);
	free(m.pre);
}
END_TEST

/* --------------------------------------------------- fault site ALLOC */

START_TEST(test_init_alloc_fails)
{
	struct buddy b;
	struct t_nth f = T_NTH(TIER_FAULT_ALLOC, -ENOMEM, 99);
	uint64_t off;
	int rc;

	NEED_FAULTS();
	while (t_nth_next(&f)) {
		t_nth_arm(&f);
		rc = buddy_init(&b, 1000 * 4096 + 123, 4096);
		if (!t_nth_fired(&f)) {
			ck_assert_int_eq(rc, 0);
			break;
		}
		ck_assert_int_eq(rc, -ENOMEM);
		ck_assert_uint_eq(ts_fault_fired(TIER_FAULT_ALLOC), 1);
		ck_assert_ptr_null(b.impl);
		ck_assert_uint_eq(b.size, 0);
		ck_assert(!buddy_valid(&b));
		buddy_fini(&b);
	}
	ck_assert_uint_gt(f.nth, 1);   /* it allocates at all */
	assert_empty(&b);
	/* Alloc and free take no memory: they work while every allocation fails. */
	ts_fault_arm(TIER_FAULT_ALLOC, 1, TIER_FAULT_PERSISTENT, -ENOMEM);
	ck_assert_int_eq(buddy_alloc(&b, 3 * 4096, &off), 0);
	ck_assert_int_eq(buddy_alloc(&b, 100 * 4096, &off), 0);
	ASSERT_VALID(&b);
	ck_assert_int_eq(buddy_free(&b, off, 100 * 4096), 0);
	ck_assert_uint_eq(ts_fault_fired(TIER_FAULT_ALLOC), 0);
	ts_fault_disarm(TIER_FAULT_ALLOC);
	buddy_fini(&b);
}
END_TEST

/* ------------------------------------------------------ buddy_valid */

enum { BREAK_USED, BREAK_NALLOC, BREAK_SIZE, BREAK_NORDERS, BREAK_SHIFT, BREAK_MIN_BLOCK };

static const char *const break_names[] = {
	"used off by a block", "nalloc off by one", "size off by a block",
	"norders off by one", "min_shift off by one", "min_block not a power of two",
};

START_TEST(test_valid_detects)
{
	const uint64_t mb = 4096;
	struct buddy b, saved;
	uint64_t off;

	ck_assert_int_eq(buddy_init(&b, 100 * mb, mb), 0);
	ck_assert_int_eq(buddy_alloc(&b, 5 * mb, &off), 0);
	ASSERT_VALID(&b);
	saved = b;
	switch (_i) {
	case BREAK_USED:
		b.used += mb;
		break;
	case BREAK_NALLOC:
		b.nalloc++;
		break;
	case BREAK_SIZE:
		b.size -= mb;
		break;
	case BREAK_NORDERS:
		b.norders++;
		break;
	case BREAK_SHIFT:
		b.min_shift--;
		break;
	default:
		b.min_block += 64;
		break;
	}
	ck_assert_msg(!buddy_valid(&b), "%s: buddy_valid() accepted it", break_names[_i]);
	b = saved;
	ASSERT_VALID(&b);
	ck_assert_int_eq(buddy_free(&b, off, 5 * mb), 0);
	assert_empty(&b);
	buddy_fini(&b);
}
END_TEST

static Suite *buddy_suite(void)
{
	Suite *s = suite_create("buddy");
	TCase *tc = tcase_create("alloc");

	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_loop_test(tc, test_init, 0, (int)ARRAY_SIZE(init_cases));
	tcase_add_loop_test(tc, test_slot_size, 0, (int)ARRAY_SIZE(slot_cases));
	tcase_add_loop_test(tc, test_alignment, 0, (int)ARRAY_SIZE(align_cases));
	tcase_add_loop_test(tc, test_tail_trim, 0, (int)ARRAY_SIZE(trim_cases));
	tcase_add_loop_test(tc, test_pack, 0, (int)ARRAY_SIZE(pack_cases));
	suite_add_tcase(s, tc);

	tc = t_tcase_faults("alloc-faults");
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_test(tc, test_init_alloc_fails);
	suite_add_tcase(s, tc);

	tc = tcase_create("free");
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_loop_test(tc, test_bad_free, 0, (int)ARRAY_SIZE(bad_frees));
	tcase_add_test(tc, test_adjacent_slots);
	tcase_add_loop_test(tc, test_valid_detects, 0, (int)ARRAY_SIZE(break_names));
	suite_add_tcase(s, tc);

	tc = tcase_create("model");
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_loop_test(tc, test_model, 0, (int)ARRAY_SIZE(model_cases));
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return t_run_suite(buddy_suite());
}
