/*
 * pool.h - a small persistent thread pool for data-parallel loops.
 *
 * Workers are created once and sleep between jobs.  ts_pool_for() runs
 * fn(arg, i) for every i in [0, n) on the workers and the calling thread,
 * which claim indices from a shared counter (so uneven tiles balance), and
 * returns when all have finished.  One job runs at a time; concurrent
 * callers queue on a mutex.  A call from inside a job of the same pool
 * (nesting) runs the loop on the calling thread alone, with its worker id,
 * instead of deadlocking; one that reaches a pool's running job again
 * through another pool's worker (A -> B -> A) fails with -EDEADLK.
 */
#ifndef TIER_COMMON_POOL_H
#define TIER_COMMON_POOL_H

#include <stddef.h>

#include "tierstore/pool.h" /* tier_pool_create, tier_pool_destroy, tier_pool_size */

typedef void (*ts_pool_fn)(void *arg, size_t index, unsigned worker);

/*
 * tier_pool_create(n): a pool of @n threads in all, the caller included
 * (so n - 1 workers are started); 0 = TIER_THREADS, or one per online
 * CPU, at most TIER_POOL_MAX_THREADS).  Returns 0, -EINVAL (@n above
 * TIER_POOL_MAX_THREADS), -ENOMEM, or the error of thread creation (nothing is
 * left running on failure).  tier_pool_destroy() stops and joins the
 * workers; no job may be running.
 */

/* tier_pool_size(): threads taking part in a job, the caller included. */

/*
 * Runs @fn for every index in [0, n); @worker is in [0, tier_pool_size()),
 * 0 being the caller, and no two threads run with one id at once.
 * Returns 0, or -EDEADLK (nothing run) for the A -> B -> A case above; @fn
 * reports its own errors through @arg.
 */
int ts_pool_for(struct tier_pool *pool, size_t n, ts_pool_fn fn, void *arg);

/*
 * The elements [0, n) in contiguous runs that the threads claim from one
 * counter: fn(arg, begin, end, worker) for each.  A claim takes 1/(2T) of
 * what is left (T = tier_pool_size(); OpenMP's guided schedule), at least
 * @unit, and a multiple of it, so every run starts at a multiple of @unit
 * and only the one that ends at n may be shorter.  Long runs first keep a
 * thread's streams going (a thread that jumps from piece to piece restarts
 * the prefetchers': docs/kernels.md, "Tiling and threads"); the short last
 * runs even the threads out.  A NULL pool, one thread, or n <= @unit: one
 * call, on the caller.  @unit 0 is 1.  Returns 0 or -EDEADLK, as
 * ts_pool_for().
 */
typedef void (*ts_pool_run_fn)(void *arg, size_t begin, size_t end, unsigned worker);
int ts_pool_runs(struct tier_pool *pool, size_t n, size_t unit, ts_pool_run_fn fn, void *arg);

#endif
