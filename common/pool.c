/*
 * pool.c - the persistent thread pool.
 *
 * State under pool->lock: `gen` counts jobs; a worker sleeps on `wake`
 * until gen moves past the last job it saw, then claims indices from the
 * atomic `next` until they run out, and counts itself out in `active`.  The
 * submitting thread claims indices too, then sleeps on `done` until
 * `active` is zero.  A job's fields are written before gen is bumped under
 * the lock and read after a worker observes the bump under the same lock,
 * so the mutex orders them; `next` alone is touched outside the lock.
 */
#include "config.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/error.h"
#include "common/fault.h"
#include "common/log.h"
#include "common/options.h"
#include "common/pool.h"

/* A job this thread is inside (see t_jobs below). */
#define MAX_NEST 8
#define NO_ID UINT_MAX
struct job_ref {
	const struct tier_pool *pool;
	unsigned id;
};

struct tier_pool {
	pthread_mutex_t submit;  /* one job at a time */
	pthread_mutex_t lock;    /* guards everything below but `next` */
	pthread_cond_t wake;     /* workers wait here for a new job or stop */
	pthread_cond_t done;     /* the submitter waits here for active == 0 */
	unsigned long gen;       /* job generation */
	bool stop;
	unsigned active;         /* workers still inside the current job */
	size_t n;                /* the current job: */
	ts_pool_fn fn;
	void *arg;
	struct job_ref ancestry[MAX_NEST]; /* the submitter's jobs */
	unsigned nancestry;
	_Atomic size_t next;     /* next unclaimed index */
	unsigned nthreads;       /* participants, caller included */
	unsigned started;        /* workers actually started */
	pthread_t *threads;
};

struct worker_arg {
	struct tier_pool *pool;
	unsigned id;
};

/*
 * The jobs this thread is inside, outermost first, with its worker id in
 * each.  A worker starts from the list of the thread that submitted the
 * job (with NO_ID: those jobs belong to other threads).  A loop on a pool
 * in the list runs inline with this thread's id there; a loop on a pool
 * whose job this thread only descends from (A -> B -> A, reaching A again
 * on one of B's workers) would wait for itself and fails with -EDEADLK.
 */
static _Thread_local struct job_ref t_jobs[MAX_NEST];
static _Thread_local unsigned t_njobs;

static bool nested_id(const struct tier_pool *p, unsigned *id)
{
	for (unsigned i = t_njobs < MAX_NEST ? t_njobs : MAX_NEST; i-- > 0;) {
		if (t_jobs[i].pool == p) {
			*id = t_jobs[i].id;
			return true;
		}
	}
	return false;
}

static void job_enter(const struct tier_pool *p, unsigned id)
{
	if (t_njobs < MAX_NEST) {
		t_jobs[t_njobs].pool = p;
		t_jobs[t_njobs].id = id;
	}
	t_njobs++;
}

static void job_leave(void)
{
	t_njobs--;
}

static void run_share(struct tier_pool *p, size_t n, ts_pool_fn fn, void *arg, unsigned id)
{
	size_t i;

	job_enter(p, id);
	while ((i = atomic_fetch_add_explicit(&p->next, 1, memory_order_relaxed)) < n)
		fn(arg, i, id);
	job_leave();
}

static void run_inline(struct tier_pool *p, size_t n, ts_pool_fn fn, void *arg, unsigned id)
{
	job_enter(p, id);
	for (size_t i = 0; i < n; i++)
		fn(arg, i, id);
	job_leave();
}

static void *worker_main(void *v)
{
	struct worker_arg wa = *(struct worker_arg *)v;
	struct tier_pool *p = wa.pool;
	unsigned long seen = 0;

	free(v);
	pthread_mutex_lock(&p->lock);
	for (;;) {
		while (!p->stop && p->gen == seen)
			pthread_cond_wait(&p->wake, &p->lock);
		if (p->stop)
			break;
		seen = p->gen;
		size_t n = p->n;
		ts_pool_fn fn = p->fn;
		void *arg = p->arg;

		for (unsigned i = 0; i < p->nancestry; i++)
			t_jobs[i] = (struct job_ref){ p->ancestry[i].pool, NO_ID };
		t_njobs = p->nancestry;
		pthread_mutex_unlock(&p->lock);
		run_share(p, n, fn, arg, wa.id);
		t_njobs = 0;
		pthread_mutex_lock(&p->lock);
		if (--p->active == 0)
			pthread_cond_signal(&p->done);
	}
	pthread_mutex_unlock(&p->lock);
	return NULL;
}

static unsigned default_threads(void)
{
	long long t = ts_opt_int(TIER_OPT_THREADS);
	long cpus;

	if (t > 0)
		return t < TIER_POOL_MAX_THREADS ? (unsigned)t : TIER_POOL_MAX_THREADS;
	cpus = sysconf(_SC_NPROCESSORS_ONLN);
	if (cpus > (long)TIER_POOL_MAX_THREADS)
		return TIER_POOL_MAX_THREADS;
	return cpus > 0 ? (unsigned)cpus : 1;
}

int tier_pool_create(unsigned nthreads, struct tier_pool **out)
{
	TS_NONNULL(out);
	struct tier_pool *p;
	int rc = 0;

	*out = NULL;
	if (nthreads > TIER_POOL_MAX_THREADS)
		return ts_err(-EINVAL, "tier_pool_create: %u threads (at most %u)", nthreads,
				TIER_POOL_MAX_THREADS);
	if (nthreads == 0)
		nthreads = default_threads();
	p = ts_calloc(1, sizeof(*p));
	if (!p)
		return ts_err(-ENOMEM, "thread pool: out of memory");
	p->nthreads = nthreads;
	p->threads = ts_calloc(nthreads, sizeof(pthread_t));
	if (!p->threads) {
		free(p);
		return ts_err(-ENOMEM, "thread pool: out of memory for %u threads", nthreads);
	}
	pthread_mutex_init(&p->submit, NULL);
	pthread_mutex_init(&p->lock, NULL);
	pthread_cond_init(&p->wake, NULL);
	pthread_cond_init(&p->done, NULL);
	for (unsigned i = 1; i < nthreads; i++) {
		struct worker_arg *wa = ts_malloc(sizeof(*wa));

		if (!wa) {
			rc = ts_err(-ENOMEM, "thread pool: out of memory");
			goto fail;
		}
		wa->pool = p;
		wa->id = i;
		rc = ts_fault_check(TIER_FAULT_THREAD_CREATE);
		if (rc) {
			free(wa);
			ts_err(rc, "thread pool: creating worker %u of %u: %s", i,
				 nthreads - 1, tier_strerror(rc));
			goto fail;
		}
		rc = -pthread_create(&p->threads[p->started], NULL, worker_main, wa);
		if (rc) {
			free(wa);
			ts_err(rc, "thread pool: creating worker %u of %u: %s", i,
				 nthreads - 1, tier_strerror(rc));
			goto fail;
		}
		p->started++;
	}
	TIER_DEBUG_LOG(TIER_SS_COMMON, "thread pool: %u threads", nthreads);
	*out = p;
	return 0;
fail:
	tier_pool_destroy(p);
	return rc;
}

void tier_pool_destroy(struct tier_pool *p)
{
	if (!p)
		return;
	pthread_mutex_lock(&p->lock);
	p->stop = true;
	pthread_cond_broadcast(&p->wake);
	pthread_mutex_unlock(&p->lock);
	for (unsigned i = 0; i < p->started; i++)
		pthread_join(p->threads[i], NULL);
	pthread_cond_destroy(&p->done);
	pthread_cond_destroy(&p->wake);
	pthread_mutex_destroy(&p->lock);
	pthread_mutex_destroy(&p->submit);
	free(p->threads);
	free(p);
}

unsigned tier_pool_size(const struct tier_pool *p)
{
	if (!p) {
		ts_err_null(__func__, "pool");
		return 0;
	}
	return p->started + 1;
}

int ts_pool_for(struct tier_pool *p, size_t n, ts_pool_fn fn, void *arg)
{
	unsigned id;

	if (n == 0)
		return 0;
	if (nested_id(p, &id)) {
		if (id == NO_ID)
			return ts_err(-EDEADLK,
					"thread pool: a loop on a pool from inside its own running job, reached through another pool's worker, would wait for itself");
		run_inline(p, n, fn, arg, id);
		return 0;
	}
	if (t_njobs >= MAX_NEST) {
		run_inline(p, n, fn, arg, 0);
		return 0;
	}
	/* Even a loop run on the caller alone holds `submit`: worker 0 is
	 * one thread at a time. */
	pthread_mutex_lock(&p->submit);
	if (p->started == 0 || n == 1) {
		run_inline(p, n, fn, arg, 0);
		pthread_mutex_unlock(&p->submit);
		return 0;
	}
	pthread_mutex_lock(&p->lock);
	p->n = n;
	p->fn = fn;
	p->arg = arg;
	p->nancestry = t_njobs < MAX_NEST ? t_njobs : MAX_NEST;
	memcpy(p->ancestry, t_jobs, p->nancestry * sizeof(t_jobs[0]));
	atomic_store_explicit(&p->next, 0, memory_order_relaxed);
	p->active = p->started;
	p->gen++;
	pthread_cond_broadcast(&p->wake);
	pthread_mutex_unlock(&p->lock);

	run_share(p, n, fn, arg, 0);

	pthread_mutex_lock(&p->lock);
	while (p->active)
		pthread_cond_wait(&p->done, &p->lock);
	pthread_mutex_unlock(&p->lock);
	pthread_mutex_unlock(&p->submit);
	return 0;
}

/* ------------------------------------------------------------ the runs */

struct pool_runs {
	ts_pool_run_fn fn;
	void *arg;
	size_t n, unit, share;
	_Atomic size_t next; /* the first element not claimed */
};

/* The length of the run from @b (a multiple of the unit, or n). */
static size_t run_len(const struct pool_runs *r, size_t b)
{
	size_t rest = r->n - b, len = rest / r->share;

	len = len <= r->unit ? r->unit : (len + r->unit - 1) / r->unit * r->unit;
	return len < rest ? len : rest;
}

/* One thread's part of ts_pool_runs: runs claimed until none is left. */
static void run_claims(void *arg, size_t index, unsigned worker)
{
	struct pool_runs *r = arg;
	size_t b = atomic_load_explicit(&r->next, memory_order_relaxed);

	(void)index;
	while (b < r->n) {
		size_t len = run_len(r, b);

		if (atomic_compare_exchange_weak_explicit(&r->next, &b, b + len,
							  memory_order_relaxed,
							  memory_order_relaxed)) {
			r->fn(r->arg, b, b + len, worker);
			b = atomic_load_explicit(&r->next, memory_order_relaxed);
		}
	}
}

int ts_pool_runs(struct tier_pool *p, size_t n, size_t unit, ts_pool_run_fn fn, void *arg)
{
	unsigned threads = p ? tier_pool_size(p) : 1;
	struct pool_runs r = { fn, arg, n, unit ? unit : 1, 2 * (size_t)threads, 0 };

	if (n == 0)
		return 0;
	if (threads <= 1 || n <= r.unit) {
		fn(arg, 0, n, 0);
		return 0;
	}
	return ts_pool_for(p, threads, run_claims, &r);
}
