/*
 * schedule.c - the step order and the lane split (see schedule.h).
 */
#include "config.h"

#include <math.h>
#include <stdint.h>

#include "prefetch/schedule.h"

void sched_order(size_t n, uint64_t k, uint32_t *order)
{
	for (size_t i = 0; i < n; i++)
		order[i] = (uint32_t)(k % 2 ? n - 1 - i : i);
}

size_t sched_split(size_t n, double cpu_fraction, unsigned char *lane)
{
	size_t g;

	if (!(cpu_fraction >= 0.0))
		cpu_fraction = 0.0;
	if (cpu_fraction > 1.0)
		cpu_fraction = 1.0;
	g = (size_t)llround((double)n * (1.0 - cpu_fraction));
	for (size_t i = 0; i < n; i++)
		lane[i] = (unsigned char)((i + 1) * g / n > i * g / n);
	return g;
}

uint64_t sched_keep_bytes(uint64_t dram, uint64_t lookahead, uint64_t shard, uint64_t state)
{
	uint64_t reserved = lookahead + 2 * shard;

	if (state + shard <= dram)
		return UINT64_MAX;
	return dram > reserved ? dram - reserved : 0;
}
