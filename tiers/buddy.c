/*
 * buddy.c - the exact-size buddy slot allocator (see buddy.h).
 *
 * The space is nblocks minimum blocks.  Every block is either allocated
 * (its bit in `alloc` set) or inside exactly one free block: an aligned
 * power-of-two run of blocks whose first block has head[] = order + 1 and
 * which sits on the free list of its order.  The lists are doubly linked
 * through a side array indexed by block number (never through the managed
 * memory: the arena may be device memory), so taking a block, and removing
 * a buddy while merging, is O(1) and an allocation is O(orders).  A second
 * bitmap, `start`, marks the first block of every allocation: with it
 * buddy_free() refuses a range that is not exactly one live allocation.
 *
 * Memory: about 9.25 bytes per minimum block (8 of list links, 1 of head
 * order, 2 bits), all taken in buddy_init(); alloc and free take none.
 * Block numbers are 32-bit: a space of more than 2^32 - 1 minimum blocks
 * is refused (-EINVAL: use a larger minimum block).
 */
#include "config.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "common/fault.h"
#include "tiers/buddy.h"

#define NIL UINT32_MAX

struct buddy_link {
	uint32_t next, prev;
};

struct buddy_impl {
	uint64_t nblocks;
	uint64_t *alloc;            /* bit per block: allocated */
	uint64_t *start;            /* bit per block: first block of an allocation */
	uint8_t *head;              /* order + 1 at the first block of a free block, else 0 */
	struct buddy_link *link;    /* free-list links, valid at free block heads */
	uint32_t first[BUDDY_MAX_ORDERS];  /* free list heads, NIL when empty */
	uint64_t nfree[BUDDY_MAX_ORDERS];  /* free blocks per order */
};

/* ------------------------------------------------------------ helpers */

static unsigned log2_floor(uint64_t x)
{
	return 63u - (unsigned)__builtin_clzll(x);
}

/* The smallest k with 2^k >= n (n >= 1). */
static unsigned log2_ceil(uint64_t n)
{
	return n <= 1 ? 0 : log2_floor(n - 1) + 1;
}

static bool bit_test(const uint64_t *m, uint64_t i)
{
	return (m[i >> 6] >> (i & 63)) & 1;
}

/* Sets (or clears) the bits [lo, hi). */
static void bits_put(uint64_t *m, uint64_t lo, uint64_t hi, bool v)
{
	while (lo < hi) {
		unsigned s = lo & 63;
		uint64_t nb = hi - lo < 64 - s ? hi - lo : 64 - s;
		uint64_t mask = (nb == 64 ? ~0ull : (1ull << nb) - 1) << s;

		if (v)
			m[lo >> 6] |= mask;
		else
			m[lo >> 6] &= ~mask;
		lo += nb;
	}
}

/* How many of the bits [lo, hi) are set. */
static uint64_t bits_count(const uint64_t *m, uint64_t lo, uint64_t hi)
{
	uint64_t n = 0;

	while (lo < hi) {
		unsigned s = lo & 63;
		uint64_t nb = hi - lo < 64 - s ? hi - lo : 64 - s;
		uint64_t mask = (nb == 64 ? ~0ull : (1ull << nb) - 1) << s;

		n += (uint64_t)__builtin_popcountll(m[lo >> 6] & mask);
		lo += nb;
	}
	return n;
}

/* --------------------------------------------------------- free lists */

static void push(struct buddy_impl *bi, uint64_t i, unsigned k)
{
	uint32_t f = bi->first[k];

	bi->head[i] = (uint8_t)(k + 1);
	bi->link[i] = (struct buddy_link){ f, NIL };
	if (f != NIL)
		bi->link[f].prev = (uint32_t)i;
	bi->first[k] = (uint32_t)i;
	bi->nfree[k]++;
}

static void unlink_block(struct buddy_impl *bi, uint64_t i, unsigned k)
{
	struct buddy_link l = bi->link[i];

	if (l.prev != NIL)
		bi->link[l.prev].next = l.next;
	else
		bi->first[k] = l.next;
	if (l.next != NIL)
		bi->link[l.next].prev = l.prev;
	bi->head[i] = 0;
	bi->nfree[k]--;
}

/*
 * Frees block @i of order @k (aligned, inside, no part of it free),
 * merging it with its free buddy while there is one: a block whose buddy
 * would reach past the end has none.
 */
static void release(const struct buddy *b, struct buddy_impl *bi, uint64_t i, unsigned k)
{
	while (k + 1 < b->norders) {
		uint64_t j = i ^ (1ull << k);

		if (j + (1ull << k) > bi->nblocks || bi->head[j] != k + 1)
			break;
		unlink_block(bi, j, k);
		if (j < i)
			i = j;
		k++;
	}
	push(bi, i, k);
}

/* Frees [lo, hi) as its maximal aligned power-of-two blocks. */
static void release_range(const struct buddy *b, struct buddy_impl *bi, uint64_t lo, uint64_t hi)
{
	while (lo < hi) {
		unsigned k = log2_floor(hi - lo);

		if (lo && (unsigned)__builtin_ctzll(lo) < k)
			k = (unsigned)__builtin_ctzll(lo);
		release(b, bi, lo, k);
		lo += 1ull << k;
	}
}

/* ---------------------------------------------------------------- API */

static void impl_free(struct buddy_impl *bi)
{
	if (!bi)
		return;
	free(bi->alloc);
	free(bi->start);
	free(bi->head);
	free(bi->link);
	free(bi);
}

int buddy_init(struct buddy *b, uint64_t size, uint64_t min_block)
{
	struct buddy_impl *bi;
	uint64_t nblocks, words;

	memset(b, 0, sizeof(*b));
	if (min_block < 64 || (min_block & (min_block - 1)))
		return ts_err(-EINVAL, "buddy allocator: minimum block %llu is not a power of two >= 64",
				(unsigned long long)min_block);
	nblocks = size / min_block;
	if (nblocks == 0)
		return ts_err(-EINVAL, "buddy allocator: space of %llu bytes holds no block of %llu",
				(unsigned long long)size, (unsigned long long)min_block);
	if (nblocks > NIL)
		return ts_err(-EINVAL, "buddy allocator: %llu blocks of %llu bytes are too many; use a larger minimum block",
				(unsigned long long)nblocks, (unsigned long long)min_block);
	words = (nblocks + 63) / 64;
	bi = ts_calloc(1, sizeof(*bi));
	if (!bi)
		goto nomem;
	bi->nblocks = nblocks;
	bi->alloc = ts_calloc(words, sizeof(*bi->alloc));
	bi->start = bi->alloc ? ts_calloc(words, sizeof(*bi->start)) : NULL;
	bi->head = bi->start ? ts_calloc(nblocks, sizeof(*bi->head)) : NULL;
	bi->link = bi->head ? ts_calloc(nblocks, sizeof(*bi->link)) : NULL;
	if (!bi->link)
		goto nomem;
	for (unsigned k = 0; k < BUDDY_MAX_ORDERS; k++)
		bi->first[k] = NIL;

	b->size = nblocks * min_block;
	b->min_block = min_block;
	b->min_shift = log2_floor(min_block);
	b->norders = log2_floor(nblocks) + 1;
	b->impl = bi;
	release_range(b, bi, 0, nblocks);
	return 0;

nomem:
	impl_free(bi);
	return ts_err(-ENOMEM, "buddy allocator: out of memory for %llu blocks",
			(unsigned long long)nblocks);
}

void buddy_fini(struct buddy *b)
{
	impl_free(b->impl);
	memset(b, 0, sizeof(*b));
}

uint64_t buddy_slot_size(const struct buddy *b, uint64_t len)
{
	uint64_t mask = b->min_block - 1;

	/* saturates: a length that would round past 2^64 never fits */
	if (len > UINT64_MAX - mask)
		return UINT64_MAX;
	return (len + mask) & ~mask;
}

int buddy_alloc(struct buddy *b, uint64_t len, uint64_t *off)
{
	struct buddy_impl *bi = b->impl;
	uint64_t n, i;
	unsigned k, j;

	if (len == 0 || !bi)
		return -EINVAL;
	if (len > b->size)
		return -ENOSPC;
	n = (len >> b->min_shift) + !!(len & (b->min_block - 1));
	k = log2_ceil(n);
	for (j = k; j < b->norders && bi->first[j] == NIL; j++)
		;
	if (j >= b->norders)
		return -ENOSPC;
	i = bi->first[j];
	unlink_block(bi, i, j);
	while (j > k) {
		j--;
		push(bi, i + (1ull << j), j);
	}
	bits_put(bi->alloc, i, i + n, true);
	bits_put(bi->start, i, i + 1, true);
	/* the tail: its buddies are in the part just taken, so it cannot merge out */
	release_range(b, bi, i + n, i + (1ull << k));
	b->used += n << b->min_shift;
	b->nalloc++;
	*off = i << b->min_shift;
	return 0;
}

int buddy_free(struct buddy *b, uint64_t off, uint64_t len)
{
	struct buddy_impl *bi = b->impl;
	uint64_t n, i;

	if (!bi || len == 0 || len > b->size || off >= b->size || (off & (b->min_block - 1)))
		return -EINVAL;
	n = (len >> b->min_shift) + !!(len & (b->min_block - 1));
	i = off >> b->min_shift;
	if (n > bi->nblocks - i)
		return -EINVAL;
	/* exactly one allocation: it starts at i, covers [i, i+n) and ends there */
	if (!bit_test(bi->start, i) || bits_count(bi->alloc, i, i + n) != n ||
	    bits_count(bi->start, i + 1, i + n) != 0 ||
	    (i + n < bi->nblocks && bit_test(bi->alloc, i + n) && !bit_test(bi->start, i + n)))
		return -EINVAL;
	bits_put(bi->alloc, i, i + n, false);
	bits_put(bi->start, i, i + 1, false);
	release_range(b, bi, i, i + n);
	b->used -= n << b->min_shift;
	b->nalloc--;
	return 0;
}

void buddy_stats(const struct buddy *b, struct buddy_stats *out)
{
	const struct buddy_impl *bi = b->impl;

	memset(out, 0, sizeof(*out));
	out->size = b->size;
	out->used = b->used;
	out->free = b->size - b->used;
	out->nalloc = b->nalloc;
	if (!bi)
		return;
	for (unsigned k = 0; k < b->norders; k++) {
		out->free_blocks += bi->nfree[k];
		if (bi->nfree[k])
			out->largest_free = b->min_block << k;
	}
	out->fragmentation = out->free ? 1.0 - (double)out->largest_free / (double)out->free : 0.0;
}

/*
 * O(blocks): for tests and debugging.  Checks the lists (linked both ways,
 * each entry a free head of the list's order, counts as recorded), then
 * walks the space: each block is either allocated or in exactly one free
 * block that is aligned, inside, holds nothing allocated and has no free
 * buddy of its order; every allocation has its start bit and the counts
 * add up.
 */
bool buddy_valid(const struct buddy *b)
{
	const struct buddy_impl *bi = b->impl;
	uint64_t nb, listed = 0, heads = 0, freeb = 0, allocb = 0, starts = 0;

	if (!bi || b->min_block < 64 || (b->min_block & (b->min_block - 1)) ||
	    b->min_shift != log2_floor(b->min_block))
		return false;
	nb = bi->nblocks;
	if (nb == 0 || nb > NIL || b->size != nb << b->min_shift || b->norders != log2_floor(nb) + 1)
		return false;
	for (unsigned k = 0; k < BUDDY_MAX_ORDERS; k++) {
		uint64_t cnt = 0;
		uint32_t prev = NIL;

		if (k >= b->norders) {
			if (bi->first[k] != NIL || bi->nfree[k])
				return false;
			continue;
		}
		for (uint32_t i = bi->first[k]; i != NIL; prev = i, i = bi->link[i].next) {
			if (i >= nb || ++cnt > nb || bi->link[i].prev != prev || bi->head[i] != k + 1)
				return false;
		}
		if (cnt != bi->nfree[k])
			return false;
		listed += cnt;
	}
	for (uint64_t i = 0; i < nb;) {
		unsigned k;
		uint64_t len, j;

		if (bit_test(bi->start, i) && !bit_test(bi->alloc, i))
			return false;
		if (bi->head[i] == 0) {
			if (!bit_test(bi->alloc, i))
				return false;   /* neither allocated nor in a free block */
			if ((i == 0 || !bit_test(bi->alloc, i - 1)) && !bit_test(bi->start, i))
				return false;   /* an allocation without its start */
			allocb++;
			starts += bit_test(bi->start, i);
			i++;
			continue;
		}
		k = bi->head[i] - 1u;
		len = 1ull << k;
		if (k >= b->norders || (i & (len - 1)) || len > nb - i)
			return false;
		if (bits_count(bi->alloc, i, i + len) || bits_count(bi->start, i, i + len))
			return false;
		for (j = i + 1; j < i + len; j++)
			if (bi->head[j])
				return false;
		j = i ^ len;
		if (j + len <= nb && bi->head[j] == k + 1)
			return false;   /* two free buddies: not merged */
		heads++;
		freeb += len;
		i += len;
	}
	return heads == listed && starts == b->nalloc && allocb << b->min_shift == b->used &&
	       (freeb + allocb) == nb;
}
