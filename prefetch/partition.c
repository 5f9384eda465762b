/*
 * partition.c - the split of the optimizer state among ranks
 * (partition.h says how and why).
 */
#include "config.h"

#include <errno.h>
#include <stdbool.h>

#include "prefetch/partition.h"

/* floor(t * r / n) without overflow (t < 2^63, r <= n). */
static uint64_t share(uint64_t t, uint32_t r, uint32_t n)
{
	/* (t mod n) r < n^2 <= 2^64 */
	return t / n * r + t % n * r / n;
}

int part_plan(const uint64_t *numel, uint32_t nparams, uint32_t world, uint32_t align,
	      uint64_t *bound)
{
	uint64_t t = 0, start = 0;
	uint32_t p = 0;

	if (!numel || !bound || !nparams || !world || !align)
		return -EINVAL;
	for (uint32_t i = 0; i < nparams; i++) {
		if (!numel[i])
			return -EINVAL;
		if (numel[i] > ((UINT64_C(1) << 63) - 1) - t)
			return -EOVERFLOW;
		t += numel[i];
	}
	bound[0] = 0;
	bound[world] = t;
	for (uint32_t r = 1; r < world; r++) {
		uint64_t b = share(t, r, world), o;

		/* the parameter holding flat element b (ideal bounds rise with r) */
		while (p < nparams && start + numel[p] <= b) {
			start += numel[p];
			p++;
		}
		if (p == nparams) {
			bound[r] = t;
			continue;
		}
		o = b - start;
		bound[r] = start + o - o % align;
	}
	return 0;
}

size_t part_segments(const uint64_t *numel, uint32_t nparams, const uint64_t *bound,
		     uint32_t rank, struct part_seg *out)
{
	uint64_t lo = bound[rank], hi = bound[rank + 1], start = 0;
	size_t k = 0;

	for (uint32_t i = 0; i < nparams && start < hi; i++) {
		uint64_t end = start + numel[i];
		uint64_t a = lo > start ? lo : start, b = hi < end ? hi : end;

		if (a < b) {
			if (out)
				out[k] = (struct part_seg){ .param = i, .off = a - start, .n = b - a };
			k++;
		}
		start = end;
	}
	return k;
}

void part_counts(const uint64_t *numel, uint32_t nparams, const uint64_t *bound, uint32_t world,
		 uint32_t param, uint64_t *counts, uint64_t *displs)
{
	uint64_t start = 0, end;

	for (uint32_t i = 0; i < param && i < nparams; i++)
		start += numel[i];
	end = start + numel[param];
	for (uint32_t r = 0; r < world; r++) {
		uint64_t a = bound[r] > start ? bound[r] : start;
		uint64_t b = bound[r + 1] < end ? bound[r + 1] : end;

		if (a > end)
			a = end;
		if (b < a)
			b = a;
		counts[r] = b - a;
		displs[r] = a - start;
	}
}
