/*
 * test_pool.c - the persistent thread pool (common/pool.c).
 *
 * Covers:
 *  - tier_pool_create() with 1, 2, 4 and 8 threads, and with 0 (TIER_THREADS,
 *    else one per online CPU);
 *  - ts_pool_for() visits every index in [0, n) exactly once for n = 0,
 *    1, 2, 7, 1000 and 100000 on every pool size; worker ids are within
 *    [0, size), worker 0 is the calling thread, and a thread keeps one id;
 *  - a ts_pool_for() from inside a job runs inline and completes (no
 *    deadlock), from the caller and from the workers alike;
 *  - several threads calling ts_pool_for() on one pool at once each get
 *    their own loop done, exactly;
 *  - many back-to-back tiny jobs (wake-up and generation handling);
 *  - uneven work (index-dependent spinning and sleeping) still completes;
 *  - create/destroy in a loop, 50 times (ASan reports any leak);
 *  - ts_pool_runs() covers [0, n) exactly once in runs that start at
 *    multiples of the unit and are at least a unit long but the one that
 *    ends at n, for every pool size, lengths and units, and a NULL pool.
 * Nothing here asserts timing.
 */
#include "config.h"

#include <check.h>
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "common/options.h"
#include "common/pool.h"
#include "t_helpers.h"

/* -------------------------------------------------------- the visitor */

/*
 * Shared by the loop bodies: a counter per index and flags for anything
 * seen out of contract.  The flags are atomics because every worker
 * writes them.
 */
struct visit {
	_Atomic unsigned *count;
	size_t n;
	unsigned size;             /* tier_pool_size() of the pool */
	pthread_t caller;
	_Atomic int bad_index;     /* an index >= n was passed */
	_Atomic int bad_worker;    /* a worker id >= size was passed */
	_Atomic int bad_caller;    /* worker 0 off the caller, or the caller not 0 */
	_Atomic int bad_identity;  /* one thread seen under two ids */
};

/* The id this thread last ran under, to check a thread keeps one id. */
static _Thread_local int t_worker = -1;

static void visit_init(struct visit *v, size_t n, unsigned size)
{
	memset(v, 0, sizeof(*v));
	v->count = calloc(n ? n : 1, sizeof(*v->count));
	ck_assert_ptr_nonnull(v->count);
	v->n = n;
	v->size = size;
	v->caller = pthread_self();
	t_worker = -1;
}

static void note_worker(struct visit *v, unsigned worker)
{
	int on_caller = pthread_equal(pthread_self(), v->caller);

	if (worker >= v->size)
		atomic_store(&v->bad_worker, 1);
	if ((worker == 0) != (on_caller != 0))
		atomic_store(&v->bad_caller, 1);
	if (t_worker == -1)
		t_worker = (int)worker;
	else if (t_worker != (int)worker)
		atomic_store(&v->bad_identity, 1);
}

static void visit_fn(void *arg, size_t i, unsigned worker)
{
	struct visit *v = arg;

	if (i >= v->n) {
		atomic_store(&v->bad_index, 1);
		return;
	}
	atomic_fetch_add_explicit(&v->count[i], 1, memory_order_relaxed);
	note_worker(v, worker);
}

/* Every index exactly once, every flag clear; frees the counters. */
static void visit_check(struct visit *v)
{
	for (size_t i = 0; i < v->n; i++)
		ck_assert_msg(atomic_load(&v->count[i]) == 1, "index %zu of %zu visited %u times",
			      i, v->n, atomic_load(&v->count[i]));
	ck_assert_msg(!atomic_load(&v->bad_index), "an index >= n was passed");
	ck_assert_msg(!atomic_load(&v->bad_worker), "a worker id >= %u was passed", v->size);
	ck_assert_msg(!atomic_load(&v->bad_caller), "worker 0 is not the calling thread");
	ck_assert_msg(!atomic_load(&v->bad_identity), "a thread ran under two worker ids");
	free(v->count);
	v->count = NULL;
}

static struct tier_pool *pool_new(unsigned nthreads)
{
	struct tier_pool *pool = NULL;

	ck_assert_int_eq(tier_pool_create(nthreads, &pool), 0);
	ck_assert_ptr_nonnull(pool);
	return pool;
}

/* ------------------------------------------------------------- the matrix */

static const unsigned pool_sizes[] = { 1, 2, 4, 8 };
static const size_t loop_lengths[] = { 0, 1, 2, 7, 1000, 100000 };

/* Every pool size x every loop length. */
START_TEST(for_visits_each_index_once)
{
	unsigned size = pool_sizes[_i / (int)ARRAY_SIZE(loop_lengths)];
	size_t n = loop_lengths[_i % (int)ARRAY_SIZE(loop_lengths)];
	struct tier_pool *pool = pool_new(size);
	struct visit v;

	ck_assert_uint_eq(tier_pool_size(pool), size);
	visit_init(&v, n, size);
	ck_assert_int_eq(ts_pool_for(pool, n, visit_fn, &v), 0);
	visit_check(&v);
	/* The same pool takes a second job. */
	visit_init(&v, n, size);
	ck_assert_int_eq(ts_pool_for(pool, n, visit_fn, &v), 0);
	visit_check(&v);
	tier_pool_destroy(pool);
}
END_TEST

/* Many tiny jobs back to back: no job is lost or run twice. */
START_TEST(many_small_jobs)
{
	struct tier_pool *pool = pool_new(8);
	struct visit v;

	for (int job = 0; job < 2000; job++) {
		size_t n = 2 + (size_t)(job % 9);

		visit_init(&v, n, 8);
		ck_assert_int_eq(ts_pool_for(pool, n, visit_fn, &v), 0);
		visit_check(&v);
	}
	tier_pool_destroy(pool);
}
END_TEST

/* ---------------------------------------------------------------- nesting */

#define OUTER 16
#define INNER 100

struct nested {
	struct tier_pool *pool;
	_Atomic unsigned count[OUTER * INNER];
	_Atomic int bad_rc;
	unsigned size;
};

struct inner_arg {
	struct nested *nest;
	size_t outer;
};

static void inner_fn(void *arg, size_t j, unsigned worker)
{
	struct inner_arg *ia = arg;

	if (j >= INNER || worker >= ia->nest->size)
		atomic_store(&ia->nest->bad_rc, 1);
	else
		atomic_fetch_add(&ia->nest->count[ia->outer * INNER + j], 1);
}

static void outer_fn(void *arg, size_t i, unsigned worker)
{
	struct nested *nest = arg;
	struct inner_arg ia = { nest, i };

	(void)worker;
	if (ts_pool_for(nest->pool, INNER, inner_fn, &ia) != 0)
		atomic_store(&nest->bad_rc, 1);
}

/* A loop from inside a job runs inline on that thread, then the job goes on. */
START_TEST(nested_for_completes)
{
	unsigned size = pool_sizes[_i];
	struct nested *nest = calloc(1, sizeof(*nest));

	ck_assert_ptr_nonnull(nest);
	nest->pool = pool_new(size);
	nest->size = size;
	ck_assert_int_eq(ts_pool_for(nest->pool, OUTER, outer_fn, nest), 0);
	for (size_t k = 0; k < OUTER * INNER; k++)
		ck_assert_msg(atomic_load(&nest->count[k]) == 1, "inner index %zu visited %u times",
			      k, atomic_load(&nest->count[k]));
	ck_assert(!atomic_load(&nest->bad_rc));
	/* The pool is still usable afterwards. */
	{
		struct visit v;

		visit_init(&v, 1000, size);
		ck_assert_int_eq(ts_pool_for(nest->pool, 1000, visit_fn, &v), 0);
		visit_check(&v);
	}
	tier_pool_destroy(nest->pool);
	free(nest);
}
END_TEST

/*
 * A -> B -> A: a job on pool A runs a loop on pool B whose body runs a loop
 * on A again.  On the thread already inside A's job the innermost loop runs
 * inline with that thread's id in A (never a second "worker 0"); on one of
 * B's own workers it would wait for itself, and fails with -EDEADLK.
 * Either way nothing hangs and no id is used twice at once.
 */
struct abab {
	struct tier_pool *a, *b;
	unsigned size_a;
	_Atomic unsigned inner_done;
	_Atomic unsigned refused;
	_Atomic unsigned middles;
	_Atomic int bad;
	_Atomic int busy[8];   /* A's worker ids in use at this moment */
};

static _Thread_local int t_a_id = -1;

static void aba_inner(void *arg, size_t i, unsigned worker)
{
	struct abab *x = arg;

	(void)i;
	if ((int)worker != t_a_id)
		atomic_store(&x->bad, 1);
	atomic_fetch_add(&x->inner_done, 1);
}

static void aba_middle(void *arg, size_t i, unsigned worker)
{
	struct abab *x = arg;

	int rc;

	(void)i;
	(void)worker;
	atomic_fetch_add(&x->middles, 1);
	rc = ts_pool_for(x->a, 3, aba_inner, x);
	if (rc == -EDEADLK)
		atomic_fetch_add(&x->refused, 1);
	else if (rc != 0 || t_a_id < 0)
		atomic_store(&x->bad, 1);
}

static void aba_outer(void *arg, size_t i, unsigned worker)
{
	struct abab *x = arg;

	(void)i;
	if (worker >= x->size_a || atomic_fetch_add(&x->busy[worker], 1) != 0)
		atomic_store(&x->bad, 1);
	t_a_id = (int)worker;
	ts_pool_for(x->b, 2, aba_middle, x);
	t_a_id = -1;
	atomic_fetch_sub(&x->busy[worker], 1);
}

START_TEST(nested_through_another_pool)
{
	struct abab x = { 0 };

	x.size_a = pool_sizes[_i];
	x.a = pool_new(x.size_a);
	x.b = pool_new(2);
	ck_assert_int_eq(ts_pool_for(x.a, 40, aba_outer, &x), 0);
	ck_assert_uint_eq(atomic_load(&x.middles), 40 * 2);
	ck_assert_uint_eq(atomic_load(&x.inner_done),
			  (40 * 2 - atomic_load(&x.refused)) * 3);
	ck_assert(!atomic_load(&x.bad));
	tier_pool_destroy(x.b);
	tier_pool_destroy(x.a);
}
END_TEST

/* ------------------------------------------------------ concurrent callers */

#define SUBMITTERS 4
#define SUBMIT_ROUNDS 25
#define SUBMIT_N 1000

struct submitter {
	struct tier_pool *pool;
	unsigned id;
	int failures;          /* rounds that came back wrong */
};

/* Per submitter: one counter per index, tagged so a mix-up is visible. */
struct tagged {
	_Atomic unsigned count[SUBMIT_N];
	unsigned id;
	_Atomic int bad;
	unsigned size;
};

static void tagged_fn(void *arg, size_t i, unsigned worker)
{
	struct tagged *t = arg;

	if (i >= SUBMIT_N || worker >= t->size)
		atomic_store(&t->bad, 1);
	else
		atomic_fetch_add(&t->count[i], 1);
}

static void *submitter_main(void *arg)
{
	struct submitter *s = arg;
	struct tagged *t = malloc(sizeof(*t));

	if (!t) {
		s->failures = -1;
		return NULL;
	}
	for (int round = 0; round < SUBMIT_ROUNDS; round++) {
		int wrong = 0;

		memset(t, 0, sizeof(*t));
		t->id = s->id;
		t->size = tier_pool_size(s->pool);
		if (ts_pool_for(s->pool, SUBMIT_N, tagged_fn, t) != 0)
			wrong = 1;
		for (size_t i = 0; i < SUBMIT_N; i++)
			if (atomic_load(&t->count[i]) != 1)
				wrong = 1;
		if (atomic_load(&t->bad))
			wrong = 1;
		s->failures += wrong;
	}
	free(t);
	return NULL;
}

START_TEST(concurrent_callers)
{
	struct tier_pool *pool = pool_new(4);
	pthread_t th[SUBMITTERS];
	struct submitter s[SUBMITTERS];

	for (unsigned i = 0; i < SUBMITTERS; i++) {
		s[i] = (struct submitter){ .pool = pool, .id = i };
		ck_assert_int_eq(pthread_create(&th[i], NULL, submitter_main, &s[i]), 0);
	}
	for (unsigned i = 0; i < SUBMITTERS; i++) {
		ck_assert_int_eq(pthread_join(th[i], NULL), 0);
		ck_assert_msg(s[i].failures == 0, "submitter %u: %d bad rounds", i, s[i].failures);
	}
	tier_pool_destroy(pool);
}
END_TEST

/* ----------------------------------------------------------- uneven work */

static void uneven_fn(void *arg, size_t i, unsigned worker)
{
	struct visit *v = arg;

	/* Index-dependent cost: a spin growing with i % 64, and a short sleep
	 * on every 100th index, so some indices take far longer than others. */
	for (volatile size_t k = 0; k < (i % 64) * (i % 64) * 4; k++)
		;
	if (i % 100 == 0) {
		struct timespec ts = { 0, 200000 };

		nanosleep(&ts, NULL);
	}
	visit_fn(v, i, worker);
}

START_TEST(uneven_work_completes)
{
	unsigned size = pool_sizes[_i];
	struct tier_pool *pool = pool_new(size);
	struct visit v;

	visit_init(&v, 3000, size);
	ck_assert_int_eq(ts_pool_for(pool, 3000, uneven_fn, &v), 0);
	visit_check(&v);
	tier_pool_destroy(pool);
}
END_TEST

/* ------------------------------------------------------ create / destroy */

START_TEST(create_destroy_loop)
{
	for (int round = 0; round < 50; round++) {
		unsigned size = 1 + (unsigned)(round % 8);
		struct tier_pool *pool = pool_new(size);
		struct visit v;

		ck_assert_uint_eq(tier_pool_size(pool), size);
		if (round % 2) {
			visit_init(&v, 100, size);
			ck_assert_int_eq(ts_pool_for(pool, 100, visit_fn, &v), 0);
			visit_check(&v);
		}
		/* Even rounds destroy a pool that never ran a job. */
		tier_pool_destroy(pool);
	}
	tier_pool_destroy(NULL);
}
END_TEST

/* ------------------------------------------------------ default thread count */

START_TEST(default_threads_online_cpus)
{
	long cpus = sysconf(_SC_NPROCESSORS_ONLN);
	struct tier_pool *pool;
	struct visit v;

	ck_assert_int_gt(cpus, 0);
	ck_assert_int_eq(setenv("TIER_THREADS", "0", 1), 0);
	ts_options_reload();
	pool = pool_new(0);
	ck_assert_uint_eq(tier_pool_size(pool), (unsigned)cpus);
	visit_init(&v, 10000, (unsigned)cpus);
	ck_assert_int_eq(ts_pool_for(pool, 10000, visit_fn, &v), 0);
	visit_check(&v);
	tier_pool_destroy(pool);

	unsetenv("TIER_THREADS");
	ts_options_reload();
	pool = pool_new(0);
	ck_assert_uint_eq(tier_pool_size(pool), (unsigned)cpus);
	tier_pool_destroy(pool);
}
END_TEST

START_TEST(default_threads_from_env)
{
	struct tier_pool *pool;

	ck_assert_int_eq(setenv("TIER_THREADS", "3", 1), 0);
	ts_options_reload();
	pool = pool_new(0);
	ck_assert_uint_eq(tier_pool_size(pool), 3);
	tier_pool_destroy(pool);
	/* An explicit count wins over TIER_THREADS. */
	pool = pool_new(2);
	ck_assert_uint_eq(tier_pool_size(pool), 2);
	tier_pool_destroy(pool);
	unsetenv("TIER_THREADS");
	ts_options_reload();
}
END_TEST

/* ------------------------------------------------------------ the runs */

struct runs_visit {
	struct visit v;
	size_t unit;
	_Atomic int bad_run;       /* a run off the unit's grid, or short */
	_Atomic unsigned calls;
};

static void runs_fn(void *arg, size_t begin, size_t end, unsigned worker)
{
	struct runs_visit *r = arg;

	atomic_fetch_add(&r->calls, 1);
	if (begin >= end || end > r->v.n || begin % r->unit != 0 ||
	    (end - begin < r->unit && end != r->v.n)) {
		atomic_store(&r->bad_run, 1);
		return;
	}
	for (size_t i = begin; i < end; i++)
		visit_fn(&r->v, i, worker);
}

static const struct {
	size_t n, unit;
} runs_cases[] = {
	{ 0, 256 }, { 1, 256 }, { 256, 256 }, { 257, 256 }, { 1000, 1 },
	{ 100000, 256 }, { 100000, 0 }, { 65536 * 5 + 37, 16384 },
};

/* Every pool size (and NULL) x every case. */
START_TEST(runs_cover_each_element_once)
{
	size_t np = ARRAY_SIZE(pool_sizes) + 1, k = (size_t)_i / np, ps = (size_t)_i % np;
	struct tier_pool *pool = ps < ARRAY_SIZE(pool_sizes) ? pool_new(pool_sizes[ps]) : NULL;
	unsigned size = pool ? tier_pool_size(pool) : 1;
	struct runs_visit r = { .unit = runs_cases[k].unit ? runs_cases[k].unit : 1 };

	visit_init(&r.v, runs_cases[k].n, size);
	ck_assert_int_eq(ts_pool_runs(pool, runs_cases[k].n, runs_cases[k].unit, runs_fn, &r), 0);
	ck_assert_msg(!atomic_load(&r.bad_run), "a run off the grid of %zu or short", r.unit);
	if (size == 1 || runs_cases[k].n <= r.unit)
		ck_assert_uint_eq(atomic_load(&r.calls), runs_cases[k].n ? 1 : 0);
	visit_check(&r.v);
	if (pool)
		tier_pool_destroy(pool);
}
END_TEST

static Suite *pool_suite(void)
{
	Suite *s = suite_create("pool");
	TCase *tc;

	tc = tcase_create("for");
	tcase_set_timeout(tc, 30);
	tcase_add_loop_test(tc, for_visits_each_index_once, 0,
			    (int)(ARRAY_SIZE(pool_sizes) * ARRAY_SIZE(loop_lengths)));
	tcase_add_test(tc, many_small_jobs);
	tcase_add_loop_test(tc, nested_for_completes, 0, (int)ARRAY_SIZE(pool_sizes));
	tcase_add_test(tc, concurrent_callers);
	tcase_add_loop_test(tc, nested_through_another_pool, 0, (int)ARRAY_SIZE(pool_sizes));
	tcase_add_loop_test(tc, uneven_work_completes, 0, (int)ARRAY_SIZE(pool_sizes));
	tcase_add_loop_test(tc, runs_cover_each_element_once, 0,
			    (int)((ARRAY_SIZE(pool_sizes) + 1) * ARRAY_SIZE(runs_cases)));
	suite_add_tcase(s, tc);

	tc = tcase_create("lifecycle");
	tcase_set_timeout(tc, 30);
	tcase_add_test(tc, create_destroy_loop);
	tcase_add_test(tc, default_threads_online_cpus);
	tcase_add_test(tc, default_threads_from_env);
	suite_add_tcase(s, tc);

	return s;
}

int main(void)
{
	return t_run_suite(pool_suite());
}
