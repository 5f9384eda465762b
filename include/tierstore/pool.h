/*
 * tierstore/pool.h - the toolkit's part of the common layer: the thread
 * pool the CPU kernels split their work over, and tickets, the one-shot
 * completions of the tiers' asynchronous requests.  A trainer never needs
 * them (the optimizer runs its own threads); tierstore/kernels.h and
 * tierstore/tiers.h include this, and tierstore/toolkit.h includes those
 * (docs/toolkit.md).  Implemented in common/ (pool.c, ticket.c).
 */
#ifndef TIERSTORE_POOL_H
#define TIERSTORE_POOL_H

#include "tierstore/common.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------ thread pool */

/*
 * The persistent thread pool the CPU kernels split their work over: @n
 * threads in all, the caller included (0 = TIER_THREADS, or one per
 * online CPU, at most TIER_POOL_MAX_THREADS).  0, -EINVAL (@n above
 * TIER_POOL_MAX_THREADS, named in the detail), -ENOMEM or the error of
 * thread creation.
 */
#define TIER_POOL_MAX_THREADS 1024u /* as TIER_THREADS */
struct tier_pool;
TIER_API int tier_pool_create(unsigned n, struct tier_pool **out);
TIER_API void tier_pool_destroy(struct tier_pool *pool);
TIER_API unsigned tier_pool_size(const struct tier_pool *pool);

/* ---------------------------------------------------------------- tickets */

/* A request to wait for, in place of a callback. */
struct tier_ticket;

/*
 * Waits for the request, frees the ticket and returns its result; on
 * failure tier_last_error() has its detail.
 */
TIER_API int tier_ticket_wait(struct tier_ticket *tk);

#ifdef __cplusplus
}
#endif

#endif /* TIERSTORE_POOL_H */
