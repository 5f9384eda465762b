/*
 * schedule.h - the order of an optimizer step and its split between the
 * lanes.
 *
 * Shards are numbered 0..n-1 in the order of their parameters.  Step k
 * (counted over the steps that ran to their end) visits them forward when
 * k is even and backward when it is odd, so the shards the last step
 * touched last, which are the ones still resident, come first.  The store
 * is given the cycle of two steps (this step's order, then the next one's)
 * and evicts by it.
 *
 * The split gives round(n * (1 - cpu_fraction)) shards to the GPU lane,
 * spread evenly over the order (shard i is the GPU lane's when
 * floor((i + 1) g / n) > floor(i g / n)), so both lanes work all through
 * the step.
 *
 * Internal to the library (prefetch/, runtime/).
 */
#ifndef TIER_PREFETCH_SCHEDULE_H
#define TIER_PREFETCH_SCHEDULE_H

#include <stddef.h>
#include <stdint.h>

/* order[0..n) = the shards in the order of a step of parity @k % 2. */
void sched_order(size_t n, uint64_t k, uint32_t *order);

/* lane[i] = 0 (CPU) or 1 (GPU) for shard i; returns the GPU lane's count. */
size_t sched_split(size_t n, double cpu_fraction, unsigned char *lane);

/*
 * Write-behind: a shard updated with more than this many bytes still to
 * come in its step is written back at once, so that eviction finds it
 * clean; the last ones stay dirty, since the next step finds them resident
 * and rewrites them first.  When the whole state @state fits in the DRAM
 * tier with a shard to spare, nothing is ever evicted and nothing is
 * written behind (UINT64_MAX).  Otherwise the part kept is the DRAM tier
 * less the window and two shards: the next step's window evicts to make
 * room for its reads, and its victims (the shards updated earliest) must
 * be clean already.
 */
uint64_t sched_keep_bytes(uint64_t dram, uint64_t lookahead, uint64_t shard, uint64_t state);

#endif
