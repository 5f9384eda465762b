/*
 * partition.h - how the optimizer state of a model is split among the
 * ranks of a job (ZeRO-style partitioning; docs/distributed.md,
 * "Partitioning").
 *
 * The parameters are laid end to end, in the order they were added, as
 * one flat range of T elements.  Rank r of N owns the flat range
 * [bound[r], bound[r + 1]): bound[r] is floor(T r / N) moved down to a
 * multiple of @align elements from the start of the parameter it falls
 * in.  So every rank owns T / N elements to within @align (its state, its
 * reduce-scatter and all-gather bytes are balanced to within @align
 * elements, whatever the parameters' sizes: one embedding larger than the
 * rest is split like any other), every piece of a parameter a rank owns
 * starts at an @align-element boundary of that parameter (the kernels'
 * alignment), and a rank's pieces are contiguous in the flat order, so a
 * parameter is split among consecutive ranks.  With T < N x @align some
 * ranks own nothing.
 *
 * The partitioned optimizer (runtime/optim/optim_zero.c) splits each parameter
 * on its own: part_plan over that one parameter (docs/distributed.md, "How
 * the elements are split", says why not over the flat model).  The
 * several-parameter form, part_segments and part_counts serve the tests
 * and a flat split.
 *
 * Internal to the library (prefetch/, runtime/).
 */
#ifndef TIER_PREFETCH_PARTITION_H
#define TIER_PREFETCH_PARTITION_H

#include <stddef.h>
#include <stdint.h>

/* A piece of parameter @param: elements [off, off + n). */
struct part_seg {
	uint32_t param;
	uint64_t off, n;
};

/*
 * bound[0 .. world] for @nparams parameters of numel[i] elements (each
 * > 0), @world >= 1 ranks and @align >= 1.  0, or -EINVAL (a zero count,
 * world or align) or -EOVERFLOW (T past 2^63 - 1).
 */
int part_plan(const uint64_t *numel, uint32_t nparams, uint32_t world, uint32_t align,
	      uint64_t *bound);

/*
 * Rank @rank's pieces, in flat order, into @out (NULL: only counted);
 * returns their number (at most nparams).
 */
size_t part_segments(const uint64_t *numel, uint32_t nparams, const uint64_t *bound,
		     uint32_t rank, struct part_seg *out);

/*
 * Parameter @param's split: counts[r] elements of it are rank r's,
 * starting at displs[r] within it (the reduce-scatter's and the
 * all-gather's counts and displacements), for r in 0 .. world - 1.
 */
void part_counts(const uint64_t *numel, uint32_t nparams, const uint64_t *bound, uint32_t world,
		 uint32_t param, uint64_t *counts, uint64_t *displs);

#endif
