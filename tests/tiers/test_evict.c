/*
 * test_evict.c - the store's eviction order against brute-force
 * simulators.
 *
 * One thread runs a sequence of acquires through a store whose DRAM holds
 * C equal objects over NVMe; the event hook records every DRAM victim in
 * order.  A simulator of the same cache replays the sequence:
 *  - Belady: the victim is the resident object whose next use, found by
 *    scanning the registered cyclic schedule forward from the current
 *    position, is farthest; objects outside the schedule go first, least
 *    recently used first;
 *  - LRU: the least recently used.
 * The two victim lists must be equal, on random schedules (with repeated
 * entries), with accesses outside the schedule mixed in, with reads and
 * writes (dirty victims are written back before their slot is reused).
 * Separately, on accesses that follow the schedule exactly, the store's
 * miss count must equal that of the textbook MIN over the real future
 * sequence, the optimum; and on a cyclic schedule of N objects with room
 * for C, Belady misses between N-C and N-C+1 times per cycle (MIN's long-run
 * rate is (N-C)/(N-1) of accesses) where LRU misses all N.
 */
#include "config.h"

#include <check.h>
#include <errno.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "tiers/store.h"
#include "t_helpers.h"

#define OBJ_SIZE (16 * 1024)
#define MAX_OBJS 64
#define MAX_EV 20000

struct evlog {
	int victims[MAX_EV];
	int n;
	int over;           /* used bytes above capacity seen by the hook */
};

static char *g_dir;

static struct tier_manifest *manifest(void)
{
	struct tier_manifest *m = NULL;
	char text[1024];
	int n = snprintf(text, sizeof(text),
			 "gpu:\n  device: none\ndram:\n  capacity: 64MiB\noptimizer:\n  shard_size: 4MiB\nnvme:\n  checksum: crc32c\n"
			 "  paths:\n    - path: %s/nvme/\n      capacity: 64MiB\n      create: true\n",
			 g_dir);

	ck_assert_msg(tier_manifest_parse(text, (size_t)n, "evict.yaml", 0, &m) == 0, "%s",
		      tier_last_error());
	return m;
}

struct run {
	struct tier_store *s;
	struct tier_obj *objs[MAX_OBJS];
	int nobj;
	struct evlog log;
};

/* Object index from its name "o<N>". */
static int obj_index(const struct tier_obj *o)
{
	return atoi(tier_obj_name(o) + 1);
}

static void hook(void *arg, enum store_event ev, enum tier_level l, const struct tier_obj *o)
{
	struct evlog *g = arg;

	if (ev == STORE_EV_EVICT && l == TIER_DRAM && g->n < MAX_EV)
		g->victims[g->n++] = obj_index(o);
}

static void run_open(struct run *r, int nobj, int cap_objs, enum tier_policy pol)
{
	struct tier_manifest *m = manifest();
	struct tier_store_params p = { .size = sizeof(struct tier_store_params), .dram_capacity = (uint64_t)cap_objs * OBJ_SIZE,
				       .hbm_backend = "none",
				       .policy = pol,
				       .flags = TIER_STORE_SCRATCH };
	int rc;

	memset(r, 0, sizeof(*r));
	rc = tier_store_open(m, &p, &r->s);
	ck_assert_msg(rc == 0, "open: %s", tier_last_error());
	tier_manifest_free(m);
	r->nobj = nobj;
	for (int i = 0; i < nobj; i++) {
		char name[16];

		snprintf(name, sizeof(name), "o%d", i);
		ck_assert_int_eq(tier_obj_create(r->s, name, OBJ_SIZE, &r->objs[i]), 0);
	}
	store_set_hook(r->s, hook, &r->log);
}

static void run_close(struct run *r)
{
	ck_assert_msg(tier_store_validate(r->s) == 0, "%s", tier_last_error());
	ck_assert_int_eq(tier_store_close(r->s), 0);
}

static void set_schedule(struct run *r, const int *sched, int n)
{
	struct tier_obj *v[4 * MAX_OBJS];

	for (int i = 0; i < n; i++)
		v[i] = r->objs[sched[i]];
	ck_assert_int_eq(tier_store_set_schedule(r->s, v, (size_t)n), 0);
}

/* One access: acquire on DRAM (for write when @write: the bytes change,
 * so the victim is dirty), check the object's stamp, release. */
static void access(struct run *r, int i, bool write, uint32_t *stamp)
{
	void *p;
	uint32_t v;
	int rc = tier_obj_acquire(r->s, r->objs[i], TIER_DRAM, write ? TIER_ACQUIRE_READ | TIER_ACQUIRE_WRITE : TIER_ACQUIRE_READ,
			      &p);

	ck_assert_msg(rc == 0, "acquire o%d: %s", i, tier_last_error());
	memcpy(&v, p, sizeof(v));
	ck_assert_msg(v == stamp[i], "o%d reads stamp %u, wrote %u", i, v, stamp[i]);
	if (write) {
		stamp[i]++;
		memcpy(p, &stamp[i], sizeof(stamp[i]));
	}
	ck_assert_int_eq(tier_obj_release(r->s, r->objs[i], TIER_DRAM, write), 0);
}

/* ------------------------------------------------------------ simulators */

struct sim {
	int cap;
	bool belady;
	const int *sched;    /* the registered schedule (Belady) */
	int nsched;
	int cursor;          /* position of the last scheduled access */
	bool res[MAX_OBJS];
	int nres;
	long last[MAX_OBJS]; /* time of last use */
	long now;
	int victims[MAX_EV];
	int nv;
	long misses;
};

static void sim_init(struct sim *m, int cap, bool belady, const int *sched, int nsched)
{
	memset(m, 0, sizeof(*m));
	m->cap = cap;
	m->belady = belady;
	m->sched = sched;
	m->nsched = nsched;
	m->cursor = nsched - 1;
}

/* Distance from the cursor to @o's next occurrence, scanning the schedule
 * one entry at a time; -1 when it has none. */
static long sim_next_use(const struct sim *m, int o)
{
	for (int d = 1; d <= m->nsched; d++)
		if (m->sched[(m->cursor + d) % m->nsched] == o)
			return d;
	return -1;
}

static void sim_access(struct sim *m, int o)
{
	long d = m->nsched ? sim_next_use(m, o) : -1;

	if (d > 0) /* advance to this access's occurrence */
		m->cursor = (int)((m->cursor + d) % m->nsched);
	m->now++;
	if (!m->res[o]) {
		m->misses++;
		if (m->nres == m->cap) {
			int best = -1;
			long best_d = 0;

			for (int v = 0; v < MAX_OBJS; v++) {
				long dv;

				if (!m->res[v] || v == o)
					continue;
				if (!m->belady) {
					if (best < 0 || m->last[v] < m->last[best])
						best = v;
					continue;
				}
				dv = m->nsched ? sim_next_use(m, v) : -1;
				if (dv < 0)
					dv = LONG_MAX;
				if (best < 0 || dv > best_d ||
				    (dv == best_d && m->last[v] < m->last[best])) {
					best = v;
					best_d = dv;
				}
			}
			m->res[best] = false;
			m->nres--;
			if (m->nv < MAX_EV)
				m->victims[m->nv++] = best;
		}
		m->res[o] = true;
		m->nres++;
	}
	m->last[o] = m->now;
}

/* Textbook MIN over the actual future: misses of the optimal policy. */
static long min_misses(const int *seq, long n, int cap)
{
	bool res[MAX_OBJS] = { false };
	int nres = 0;
	long misses = 0;

	for (long t = 0; t < n; t++) {
		int o = seq[t], best = -1;
		long best_d = -1;

		if (res[o])
			continue;
		misses++;
		if (nres == cap) {
			for (int v = 0; v < MAX_OBJS; v++) {
				long d = n; /* never used again */

				if (!res[v])
					continue;
				for (long u = t + 1; u < n; u++) {
					if (seq[u] == v) {
						d = u;
						break;
					}
				}
				if (d > best_d) {
					best_d = d;
					best = v;
				}
			}
			res[best] = false;
			nres--;
		}
		res[o] = true;
		nres++;
	}
	return misses;
}

/* ----------------------------------------------------------------- tests */

/* SplitMix64 from each case's seed (t_rnd_mix): 32 bits at a time. */
static uint64_t rng_state;

static uint32_t rnd(void)
{
	uint64_t z = t_rnd_mix(rng_state);

	rng_state += 0x9e3779b97f4a7c15ull;
	return (uint32_t)z;
}

struct evict_case {
	const char *name;
	int nobj, cap, nsched, cycles;
	int outside_pct;     /* accesses to objects outside the schedule, % */
	int write_pct;
	enum tier_policy policy;
	uint64_t seed;
};

static const struct evict_case cases[] = {
	{ "belady small", 8, 3, 8, 6, 0, 0, TIER_POLICY_BELADY, 1 },
	{ "belady repeats", 12, 5, 20, 5, 0, 30, TIER_POLICY_BELADY, 2 },
	{ "belady outside", 16, 6, 12, 6, 20, 30, TIER_POLICY_BELADY, 3 },
	{ "belady big", 48, 17, 64, 4, 10, 50, TIER_POLICY_BELADY, 4 },
	{ "belady cap 1", 6, 1, 9, 5, 0, 50, TIER_POLICY_BELADY, 5 },
	{ "belady all writes", 20, 7, 30, 4, 15, 100, TIER_POLICY_BELADY, 6 },
	{ "lru", 16, 6, 16, 5, 20, 30, TIER_POLICY_LRU, 7 },
	{ "lru big", 40, 13, 40, 4, 0, 50, TIER_POLICY_LRU, 8 },
};

START_TEST(test_order_matches_simulator)
{
	const struct evict_case *c = &cases[_i];
	int sched[4 * MAX_OBJS], nsched_objs = c->nobj - (c->outside_pct ? c->nobj / 4 : 0);
	uint32_t stamp[MAX_OBJS] = { 0 };
	struct run r;
	struct sim m;

	rng_state = c->seed;
	/* A random schedule over the first nsched_objs objects, each at
	 * least once, some repeated; the rest are outside it. */
	for (int i = 0; i < c->nsched; i++)
		sched[i] = i < nsched_objs ? i : (int)(rnd() % (unsigned)nsched_objs);
	for (int i = c->nsched - 1; i > 0; i--) {
		int j = (int)(rnd() % (unsigned)(i + 1)), t = sched[i];

		sched[i] = sched[j];
		sched[j] = t;
	}
	run_open(&r, c->nobj, c->cap, c->policy);
	set_schedule(&r, sched, c->nsched);
	sim_init(&m, c->cap, c->policy == TIER_POLICY_BELADY, sched, c->nsched);
	for (int k = 0; k < c->cycles; k++) {
		for (int i = 0; i < c->nsched; i++) {
			int o = sched[i];

			if (c->outside_pct && (int)(rnd() % 100) < c->outside_pct) {
				int x = nsched_objs + (int)(rnd() % (unsigned)(c->nobj - nsched_objs));

				access(&r, x, (int)(rnd() % 100) < c->write_pct, stamp);
				sim_access(&m, x);
			}
			access(&r, o, (int)(rnd() % 100) < c->write_pct, stamp);
			sim_access(&m, o);
		}
	}
	ck_assert_int_eq(r.log.n, m.nv);
	for (int i = 0; i < m.nv; i++)
		ck_assert_msg(r.log.victims[i] == m.victims[i],
			      "%s: victim %d is o%d, the simulator chose o%d", c->name, i,
			      r.log.victims[i], m.victims[i]);
	{
		struct tier_store_stats st;

		tier_store_get_stats(r.s, &st);
		ck_assert_uint_eq(st.level[TIER_DRAM].misses, (uint64_t)m.misses);
		ck_assert_uint_le(st.level[TIER_DRAM].used, st.level[TIER_DRAM].capacity);
	}
	/* Every stamp survived its evictions. */
	for (int i = 0; i < c->nobj; i++)
		access(&r, i, false, stamp);
	run_close(&r);
}
END_TEST

/* On accesses that follow the schedule, the store's misses equal the
 * optimum's (MIN over the real future), for random schedules. */
START_TEST(test_belady_is_optimal)
{
	int sched[4 * MAX_OBJS];
	int seq[4 * MAX_OBJS * 8];
	uint32_t stamp[MAX_OBJS] = { 0 };
	int nobj = 10 + _i * 3, cap = 3 + _i, nsched = nobj + 2 * _i, cycles = 6;
	long n = 0, opt;
	struct tier_store_stats st;
	struct run r;

	rng_state = 100 + (uint64_t)_i;
	for (int i = 0; i < nsched; i++)
		sched[i] = i < nobj ? i : (int)(rnd() % (unsigned)nobj);
	for (int i = nsched - 1; i > 0; i--) {
		int j = (int)(rnd() % (unsigned)(i + 1)), t = sched[i];

		sched[i] = sched[j];
		sched[j] = t;
	}
	run_open(&r, nobj, cap, TIER_POLICY_BELADY);
	set_schedule(&r, sched, nsched);
	for (int k = 0; k < cycles; k++)
		for (int i = 0; i < nsched; i++) {
			seq[n++] = sched[i];
			access(&r, sched[i], false, stamp);
		}
	opt = min_misses(seq, n, cap);
	tier_store_get_stats(r.s, &st);
	ck_assert_msg((long)st.level[TIER_DRAM].misses == opt,
		      "store missed %llu times, the optimum %ld", (unsigned long long)st.level[TIER_DRAM].misses,
		      opt);
	run_close(&r);
}
END_TEST

/* Cyclic schedule of N equal objects, room for C: after the first cycle
 * Belady misses N - C to N - C + 1 per cycle, LRU misses N. */
START_TEST(test_cyclic_keeps_c_resident)
{
	const int N = 16, C = 8, cycles = 5;
	uint32_t stamp[MAX_OBJS] = { 0 };
	int sched[MAX_OBJS];

	for (int i = 0; i < N; i++)
		sched[i] = i;
	for (int pol = 0; pol < 2; pol++) {
		struct tier_store_stats st;
		uint64_t first;
		struct run r;

		memset(stamp, 0, sizeof(stamp));
		run_open(&r, N, C, pol ? TIER_POLICY_LRU : TIER_POLICY_BELADY);
		set_schedule(&r, sched, N);
		for (int i = 0; i < N; i++)
			access(&r, i, true, stamp);
		tier_store_get_stats(r.s, &st);
		first = st.level[TIER_DRAM].misses;
		ck_assert_uint_eq(first, (uint64_t)N);
		for (int k = 1; k < cycles; k++)
			for (int i = 0; i < N; i++)
				access(&r, i, true, stamp);
		tier_store_get_stats(r.s, &st);
		if (pol) {
			ck_assert_uint_eq(st.level[TIER_DRAM].misses - first,
					  (uint64_t)(cycles - 1) * (uint64_t)N);
		} else { /* MIN misses (N - C)/(N - 1) of accesses in the long run */
			ck_assert_uint_le(st.level[TIER_DRAM].misses - first,
					  (uint64_t)(cycles - 1) * (uint64_t)(N - C + 1));
			ck_assert_uint_ge(st.level[TIER_DRAM].misses - first,
					  (uint64_t)(cycles - 1) * (uint64_t)(N - C));
		}
		ck_assert_uint_eq(st.level[TIER_DRAM].objects, (uint64_t)C);
		run_close(&r);
	}
}
END_TEST

/* Prefetching under Belady never evicts an object needed before the one
 * it brings: with a full cache of objects needed sooner, the prefetch is
 * skipped. */
START_TEST(test_prefetch_respects_schedule)
{
	uint32_t stamp[MAX_OBJS] = { 0 };
	int sched[6] = { 0, 1, 2, 3, 4, 5 };
	struct tier_store_stats st;
	struct run r;

	run_open(&r, 6, 3, TIER_POLICY_BELADY);
	set_schedule(&r, sched, 6);
	access(&r, 0, false, stamp); /* cursor at 0; resident 0 */
	access(&r, 1, false, stamp);
	access(&r, 2, false, stamp); /* resident 0 1 2, cursor 2 */
	/* 5 is needed after 3 and 4 but before 0, 1, 2 (next cycle): 2 is the
	 * farthest (used last), so the prefetch evicts it. */
	ck_assert_int_eq(tier_obj_prefetch(r.s, r.objs[5], TIER_DRAM), 0);
	store_quiesce(r.s);
	tier_store_get_stats(r.s, &st);
	ck_assert_uint_eq(st.level[TIER_DRAM].prefetch_skipped, 0);
	ck_assert_int_eq(r.log.n, 1);
	ck_assert_int_eq(r.log.victims[0], 2);
	/* An object outside the schedule is never worth an eviction. */
	{
		int sched2[3] = { 0, 1, 5 };

		set_schedule(&r, sched2, 3);
	}
	ck_assert_int_eq(tier_obj_prefetch(r.s, r.objs[3], TIER_DRAM), 0);
	store_quiesce(r.s);
	tier_store_get_stats(r.s, &st);
	ck_assert_uint_eq(st.level[TIER_DRAM].prefetch_skipped, 1);
	ck_assert_int_eq(r.log.n, 1);
	run_close(&r);
}
END_TEST

static Suite *suite(void)
{
	Suite *s = suite_create("evict");
	TCase *tc = tcase_create("evict");

	tcase_set_timeout(tc, 120);
	tcase_add_loop_test(tc, test_order_matches_simulator, 0, (int)ARRAY_SIZE(cases));
	tcase_add_loop_test(tc, test_belady_is_optimal, 0, 6);
	tcase_add_test(tc, test_cyclic_keeps_c_resident);
	tcase_add_test(tc, test_prefetch_respects_schedule);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	int rc;

	g_dir = t_mkdtemp();
	rc = t_run_suite(suite());
	t_rmtree(g_dir);
	free(g_dir);
	return rc;
}
