/*
 * test_hbm.c - the HBM tier's backends: the registry (tiers/hbm.c) and the
 * contract of hbm.h, run on every built-in backend: "host" and "null"
 * always, "cuda" when this is a CUDA build and gpu_count() finds a device
 * (else that row prints why and passes as skipped).
 *
 * Covers:
 *  - registry: the built-ins are there (cuda only in a CUDA build); a table
 *    missing each mandatory field in turn is -EINVAL naming the field, as
 *    are a bad name and a wrong version; a duplicate name is -EEXIST; an
 *    unknown name finds NULL; the table holds 8 (then -ENOSPC);
 *  - per backend: H2D then D2H round trips of random data at random
 *    offsets and lengths (the edges and zero length included): the bytes
 *    come back (host, cuda) or nothing is moved (null); the counters add up;
 *  - FIFO order per direction over 1000 copies, and per submitting thread
 *    with four threads submitting at once;
 *  - no callback ever runs on the submitting thread, or twice, or without
 *    a detail string;
 *  - a callback submitting the next copy (a chain of 100), and close()
 *    waiting for a chain still running, and for 100 queued copies;
 *  - copies outside the arena, a bad direction or no callback: -EINVAL at
 *    submission and no callback; bad open parameters: -EINVAL;
 *  - host: 40 MB at 200 MB/s takes at least 0.18 s in each direction
 *    (lower bounds only: this machine is noisy);
 *  - fault sites (the "faults" case, tests/meson.build's hbm-faults): HBM_COPY on the 3rd copy fails
 *    that copy alone, through its callback, leaving its destination
 *    untouched; HBM_ALLOC and THREAD_CREATE fail open() cleanly (ASan
 *    reports any leak).
 *
 * tests/gpu/test_gpu_hbm.c includes this file (TEST_HBM_NO_MAIN) to run
 * the contract rows on "cuda" alone, where a missing GPU is a failure.
 */
#include "config.h"

#include <check.h>
#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/clock.h"
#include "common/error.h"
#include "common/fault.h"
#include "t_helpers.h"
#include "tiers/gpu.h"
#include "tiers/hbm.h"

#define KiB (1ull << 10)
#define MiB (1ull << 20)
#define U64(x) ((unsigned long long)(x))
#define WAIT_S 60

/* ------------------------------------------------------------ backends */

enum { B_HOST, B_NULL, B_CUDA, B__COUNT };
static const char *const g_backends[B__COUNT] = { "host", "null", "cuda" };

/* Set by tests/gpu/test_gpu_hbm.c: there, a cuda row that cannot run fails. */
static bool g_require_cuda;

/* The backend of row @i, or NULL when this machine cannot run it. */
static const struct hbm_ops *backend(int i)
{
	const char *name = g_backends[i];
	const struct hbm_ops *ops = hbm_backend_find(name);
	char why[200] = "";
	int n = 0;

	if (i != B_CUDA) {
		ck_assert_msg(ops, "built-in backend '%s' missing (have: %s)", name,
			      hbm_backend_names());
		return ops;
	}
	if (!ops) {
		ck_assert_msg(!TIER_HAVE_CUDA, "a CUDA build without the cuda backend (have: %s)",
			      hbm_backend_names());
		ck_assert_msg(!g_require_cuda, "this build has no cuda backend");
		fprintf(stderr, "cuda row skipped: not a CUDA build\n");
		return NULL;
	}
	ck_assert_int_eq(gpu_count(&n, why, sizeof(why)), 0);
	if (n == 0) {
		ck_assert_msg(!g_require_cuda, "no GPU: %s", why);
		fprintf(stderr, "cuda row skipped: no GPU (%s)\n", why);
		return NULL;
	}
	return ops;
}

/* Declares @ops for row @i; a row this machine cannot run returns (skipped). */
#define BACKEND_OR_SKIP(ops, i)                  \
	const struct hbm_ops *ops = backend(i);  \
	if (!ops)                                \
		return

static struct hbm_dev *dev_open(const struct hbm_ops *ops, uint64_t cap, double bw)
{
	struct hbm_params p = { .capacity = cap, .gpu = 0, .bandwidth = bw };
	struct hbm_dev *d = NULL;
	int rc = ops->open(&p, &d);

	ck_assert_msg(rc == 0, "%s: open: %s", ops->name, tier_last_error());
	ck_assert_ptr_nonnull(d);
	if (ops->caps & HBM_CAP_NO_DATA)
		ck_assert_uint_eq(ops->capacity(d), cap);
	else
		ck_assert_uint_ge(ops->capacity(d), cap);
	return d;
}

static bool moves_data(const struct hbm_ops *ops)
{
	return !(ops->caps & HBM_CAP_NO_DATA);
}

static void setup(void)
{
	ts_fault_reset_all();
	ts_err_clear();
}

static void teardown(void)
{
	ts_fault_reset_all();
}

/* ----------------------------------------------------------- recording */

#define MAX_OPS 4096

/*
 * What the callbacks saw, under @lock: how many ran, the completion order
 * per direction (the ops' submission numbers), and any breach of the
 * contract.
 */
struct rec {
	pthread_mutex_t lock;
	pthread_cond_t cond;
	pthread_t caller;          /* the submitting thread */
	unsigned done;
	unsigned on_caller;        /* callbacks run on the submitting thread */
	unsigned twice;            /* ops whose callback ran again */
	unsigned no_detail;        /* callbacks given a NULL detail */
	unsigned order[2][MAX_OPS];
	unsigned norder[2];
	unsigned nsub[2];          /* submissions per direction (the submitter's) */
};

struct op {
	struct rec *rec;
	enum hbm_dir dir;
	unsigned seq;              /* submission number in its direction */
	int calls;
	int result;
	char detail[512];
	void *chain;               /* for chain_cb */
};

static struct rec *rec_new(void)
{
	struct rec *r = calloc(1, sizeof(*r));

	ck_assert_ptr_nonnull(r);
	pthread_mutex_init(&r->lock, NULL);
	pthread_cond_init(&r->cond, NULL);
	r->caller = pthread_self();
	return r;
}

static void rec_free(struct rec *r)
{
	pthread_cond_destroy(&r->cond);
	pthread_mutex_destroy(&r->lock);
	free(r);
}

static void op_cb(void *arg, int result, const char *detail)
{
	struct op *o = arg;
	struct rec *r = o->rec;

	pthread_mutex_lock(&r->lock);
	if (pthread_equal(pthread_self(), r->caller))
		r->on_caller++;
	if (o->calls++)
		r->twice++;
	if (!detail)
		r->no_detail++;
	o->result = result;
	snprintf(o->detail, sizeof(o->detail), "%s", detail ? detail : "");
	if (r->norder[o->dir] < MAX_OPS)
		r->order[o->dir][r->norder[o->dir]++] = o->seq;
	r->done++;
	pthread_cond_broadcast(&r->cond);
	pthread_mutex_unlock(&r->lock);
}

/* Submits @o; asserts that copy() accepted it. */
static void submit(const struct hbm_ops *ops, struct hbm_dev *d, struct rec *r, struct op *o,
		   enum hbm_dir dir, uint64_t off, void *host, uint64_t len)
{
	int rc;

	memset(o, 0, sizeof(*o));
	o->rec = r;
	o->dir = dir;
	o->seq = r->nsub[dir]++;
	rc = ops->copy(d, dir, off, host, len, op_cb, o);
	ck_assert_msg(rc == 0, "%s: %s copy of %llu at %llu refused: %s", ops->name,
		      dir == HBM_H2D ? "H2D" : "D2H", U64(len), U64(off), tier_last_error());
}

/* Waits until @n callbacks have run in all (fails after WAIT_S seconds). */
static void rec_wait(struct rec *r, unsigned n)
{
	struct timespec ts;
	int rc = 0;

	clock_gettime(CLOCK_REALTIME, &ts);
	ts.tv_sec += WAIT_S;
	pthread_mutex_lock(&r->lock);
	while (r->done < n && rc == 0)
		rc = pthread_cond_timedwait(&r->cond, &r->lock, &ts);
	pthread_mutex_unlock(&r->lock);
	ck_assert_msg(rc == 0, "%u of %u callbacks ran in %d s", r->done, n, WAIT_S);
}

static unsigned rec_done(struct rec *r)
{
	unsigned n;

	pthread_mutex_lock(&r->lock);
	n = r->done;
	pthread_mutex_unlock(&r->lock);
	return n;
}

/* The contract's invariants, and each direction completed in submission order. */
static void rec_check(struct rec *r)
{
	pthread_mutex_lock(&r->lock);
	ck_assert_msg(r->on_caller == 0, "%u callbacks ran on the submitting thread", r->on_caller);
	ck_assert_msg(r->twice == 0, "%u callbacks ran twice", r->twice);
	ck_assert_msg(r->no_detail == 0, "%u callbacks got a NULL detail", r->no_detail);
	for (int dir = 0; dir < 2; dir++) {
		unsigned k = 0;

		while (k < r->norder[dir] && r->order[dir][k] == k)
			k++;
		ck_assert_msg(k == r->norder[dir], "%s: completion %u was submission %u",
			      dir ? "D2H" : "H2D", k, r->order[dir][k]);
	}
	pthread_mutex_unlock(&r->lock);
}

static void fill_rand(uint8_t *p, uint64_t n, uint64_t *s)
{
	for (uint64_t i = 0; i < n; i++)
		p[i] = (uint8_t)(t_rnd_next(s) >> 24);
}

/* One assertion for the whole buffer: Check records every ck_assert, even passing ones. */
static void assert_all(const uint8_t *p, uint64_t n, uint8_t v, const char *what)
{
	uint64_t i = 0;

	while (i < n && p[i] == v)
		i++;
	ck_assert_msg(i == n, "%s: byte %llu is %#x, expected %#x", what, U64(i), p[i], v);
}

/* ------------------------------------------------------------ registry */

static int t_open(const struct hbm_params *p, struct hbm_dev **out)
{
	(void)p;
	*out = NULL;
	return -ENOSYS;
}

static void t_close(struct hbm_dev *d)
{
	(void)d;
}

static uint64_t t_capacity(const struct hbm_dev *d)
{
	(void)d;
	return 0;
}

static void *t_dev_ptr(struct hbm_dev *d, uint64_t off)
{
	(void)d;
	(void)off;
	return NULL;
}

static int t_copy(struct hbm_dev *d, enum hbm_dir dir, uint64_t off, void *host, uint64_t len,
		  hbm_cb cb, void *arg)
{
	(void)d, (void)dir, (void)off, (void)host, (void)len, (void)cb, (void)arg;
	return -ENOSYS;
}

static const struct hbm_ops t_template = {
	.name = "test",
	.version = HBM_OPS_VERSION,
	.caps = 0,
	.open = t_open,
	.close = t_close,
	.capacity = t_capacity,
	.dev_ptr = t_dev_ptr,
	.copy = t_copy,
	.counters = NULL,       /* optional */
};

START_TEST(test_registry_builtins)
{
	const char *names = hbm_backend_names();
	const struct hbm_ops *h = hbm_backend_find("host"), *n = hbm_backend_find("null");

	ck_assert_ptr_nonnull(h);
	ck_assert_ptr_nonnull(n);
	ck_assert_str_eq(h->name, "host");
	ck_assert_str_eq(n->name, "null");
	ck_assert_uint_eq(h->caps, HBM_CAP_HOST_READABLE | HBM_CAP_BANDWIDTH);
	ck_assert_uint_eq(n->caps, HBM_CAP_NO_DATA);
	ck_assert_ptr_null(hbm_backend_find("nope"));
	ck_assert_ptr_null(hbm_backend_find(""));
	ck_assert_ptr_null(hbm_backend_find("hos"));
	ck_assert_ptr_null(hbm_backend_find(NULL));
	ck_assert_ptr_nonnull(strstr(names, "host"));
	ck_assert_ptr_nonnull(strstr(names, "null"));
	if (TIER_HAVE_CUDA) {
		const struct hbm_ops *c = hbm_backend_find("cuda");

		ck_assert_ptr_nonnull(c);
		ck_assert_uint_eq(c->caps, HBM_CAP_DEVICE_MEMORY);
		ck_assert_str_eq(names, "host,null,cuda");
	} else {
		ck_assert_ptr_null(hbm_backend_find("cuda"));
		ck_assert_str_eq(names, "host,null");
	}
	/* Every built-in table is complete. */
	for (int i = 0; i < B__COUNT; i++) {
		const struct hbm_ops *o = hbm_backend_find(g_backends[i]);

		if (!o)
			continue;
		ck_assert_uint_eq(o->version, HBM_OPS_VERSION);
		ck_assert(o->open && o->close && o->capacity && o->dev_ptr && o->copy && o->counters);
	}
}
END_TEST

/* A table with one thing wrong, and what the detail must name. */
struct bad_table {
	const char *what;
	const char *needle;
};

static const struct bad_table bad_tables[] = {
	{ "open", "open" },
	{ "close", "close" },
	{ "capacity", "capacity" },
	{ "dev_ptr", "dev_ptr" },
	{ "copy", "copy" },
	{ "name NULL", "name" },
	{ "name empty", "name" },
	{ "name too long", "name" },
	{ "version 0", "version 0" },
	{ "version 2", "version 2" },
};

START_TEST(test_registry_invalid)
{
	const struct bad_table *c = &bad_tables[_i];
	static struct hbm_ops t;   /* the registry keeps pointers: static */
	int rc;

	t = t_template;
	if (strcmp(c->what, "open") == 0)
		t.open = NULL;
	else if (strcmp(c->what, "close") == 0)
		t.close = NULL;
	else if (strcmp(c->what, "capacity") == 0)
		t.capacity = NULL;
	else if (strcmp(c->what, "dev_ptr") == 0)
		t.dev_ptr = NULL;
	else if (strcmp(c->what, "copy") == 0)
		t.copy = NULL;
	else if (strcmp(c->what, "name NULL") == 0)
		t.name = NULL;
	else if (strcmp(c->what, "name empty") == 0)
		t.name = "";
	else if (strcmp(c->what, "name too long") == 0)
		t.name = "a-backend-name-that-is-far-too-long-for-the-table";
	else if (strcmp(c->what, "version 0") == 0)
		t.version = 0;
	else
		t.version = 2;
	ts_err_clear();
	rc = hbm_backend_register(&t);
	ck_assert_msg(rc == -EINVAL, "%s: %d (%s)", c->what, rc, tier_strerror(rc));
	ck_assert_msg(strstr(tier_last_error(), c->needle), "%s: the detail should name '%s': %s",
		      c->what, c->needle, tier_last_error());
	if (t.name && t.name[0])
		ck_assert_ptr_null(hbm_backend_find(t.name));
	ck_assert_ptr_null(strstr(hbm_backend_names(), "test"));
}
END_TEST

START_TEST(test_registry_missing_all)
{
	static struct hbm_ops t;

	t = t_template;
	t.open = NULL;
	t.copy = NULL;
	t.dev_ptr = NULL;
	ck_assert_int_eq(hbm_backend_register(&t), -EINVAL);
	ck_assert_msg(strstr(tier_last_error(), "open") && strstr(tier_last_error(), "dev_ptr") &&
		      strstr(tier_last_error(), "copy") && !strstr(tier_last_error(), "close"),
		      "every missing field named, and only those: %s", tier_last_error());
	ck_assert_int_eq(hbm_backend_register(NULL), -EINVAL);
}
END_TEST

START_TEST(test_registry_duplicate)
{
	static struct hbm_ops a, b, h;
	int rc;

	a = t_template;
	a.name = "test-a";
	b = t_template;
	b.name = "test-a";
	h = t_template;
	h.name = "host";
	rc = hbm_backend_register(&a);
	ck_assert_msg(rc == 0, "%s", tier_last_error());
	ck_assert_ptr_eq(hbm_backend_find("test-a"), &a);
	ck_assert_ptr_nonnull(strstr(hbm_backend_names(), "test-a"));
	ck_assert_int_eq(hbm_backend_register(&a), -EEXIST);
	ck_assert_ptr_nonnull(strstr(tier_last_error(), "test-a"));
	ck_assert_int_eq(hbm_backend_register(&b), -EEXIST);
	ck_assert_ptr_eq(hbm_backend_find("test-a"), &a);
	/* A built-in cannot be shadowed, even by the first registration. */
	ck_assert_int_eq(hbm_backend_register(&h), -EEXIST);
	ck_assert_str_eq(hbm_backend_find("host")->name, "host");
	ck_assert_ptr_ne(hbm_backend_find("host"), &h);
}
END_TEST

START_TEST(test_registry_full)
{
	static struct hbm_ops t[10];
	static char names[10][16];
	int added = 0, rc = 0, before = 1;

	/* Those there already: the built-ins, and (CK_FORK=no) earlier tests' tables. */
	for (const char *c = hbm_backend_names(); *c; c++)
		before += *c == ',';
	ck_assert_int_ge(before, TIER_HAVE_CUDA ? 3 : 2);
	for (int i = 0; i < 10; i++) {
		snprintf(names[i], sizeof(names[i]), "fill-%d", i);
		t[i] = t_template;
		t[i].name = names[i];
		rc = hbm_backend_register(&t[i]);
		if (rc)
			break;
		added++;
	}
	ck_assert_msg(rc == -ENOSPC, "%d (%s): %s", rc, tier_strerror(rc), tier_last_error());
	ck_assert_int_eq(before + added, 8);
	ck_assert_ptr_nonnull(strstr(tier_last_error(), "full"));
	for (int i = 0; i < added; i++)
		ck_assert_ptr_eq(hbm_backend_find(names[i]), &t[i]);
	ck_assert_ptr_null(hbm_backend_find(names[added]));
	ck_assert_ptr_nonnull(strstr(hbm_backend_names(), names[added - 1]));
	ck_assert_ptr_nonnull(hbm_backend_find("host"));
}
END_TEST

/* Concurrent first use: every thread sees the built-ins (pthread_once). */
static void *find_host(void *arg)
{
	(void)arg;
	return (void *)hbm_backend_find("host");
}

START_TEST(test_registry_first_use_races)
{
	pthread_t th[8];
	void *res;

	for (int i = 0; i < 8; i++)
		ck_assert_int_eq(pthread_create(&th[i], NULL, find_host, NULL), 0);
	for (int i = 0; i < 8; i++) {
		ck_assert_int_eq(pthread_join(th[i], &res), 0);
		ck_assert_ptr_nonnull(res);
	}
}
END_TEST

/* ---------------------------------------------------- the copy contract */

START_TEST(test_round_trip)
{
	BACKEND_OR_SKIP(ops, _i);
	const uint64_t cap = 16 * MiB, maxlen = 1 * MiB;
	struct hbm_dev *d = dev_open(ops, cap, 0);
	uint64_t size = ops->capacity(d), seed = 0x9e3779b97f4a7c15ull + (uint64_t)_i, total = 0;
	uint64_t h2d = 0, d2h = 0;
	uint8_t *src = malloc(maxlen), *dst = malloc(maxlen);
	struct rec *r = rec_new();
	struct op o[2];
	unsigned n = 0;

	ck_assert(src && dst);
	if (ops->caps & HBM_CAP_NO_DATA)
		ck_assert_ptr_null(ops->dev_ptr(d, 0));
	else
		ck_assert_ptr_nonnull(ops->dev_ptr(d, 0));
	for (int k = 0; k < 40; k++) {
		uint64_t len = 1 + t_rnd_next(&seed) % maxlen, off;

		if (k == 0)
			len = 0;
		off = t_rnd_next(&seed) % (size - len + 1);
		if (k == 1)
			off = size - len;        /* ends at the arena's last byte */
		if (k == 2)
			off = 0;
		fill_rand(src, len, &seed);
		memset(dst, 0xa5, maxlen);
		submit(ops, d, r, &o[0], HBM_H2D, off, src, len);
		rec_wait(r, ++n);
		ck_assert_msg(o[0].result == 0, "H2D %d: %s", k, o[0].detail);
		ck_assert_str_eq(o[0].detail, "");
		if (ops->caps & HBM_CAP_HOST_READABLE)
			ck_assert_msg(memcmp(ops->dev_ptr(d, off), src, len) == 0,
				      "copy %d: the arena differs after H2D", k);
		submit(ops, d, r, &o[1], HBM_D2H, off, dst, len);
		rec_wait(r, ++n);
		ck_assert_msg(o[1].result == 0, "D2H %d: %s", k, o[1].detail);
		if (moves_data(ops))
			ck_assert_msg(memcmp(dst, src, len) == 0,
				      "copy %d: %llu bytes at %llu came back different", k, U64(len),
				      U64(off));
		else
			assert_all(dst, maxlen, 0xa5, "null D2H destination");
		assert_all(dst + len, maxlen - len, 0xa5, "beyond the D2H destination");
		total += len;
	}
	ops->counters(d, &h2d, &d2h);
	ck_assert_uint_eq(h2d, total);
	ck_assert_uint_eq(d2h, total);
	ops->close(d);
	rec_check(r);
	rec_free(r);
	free(src);
	free(dst);
}
END_TEST

/*
 * 1000 copies in random directions, H2D into the arena's first half and
 * D2H out of its second half (so the two engines never touch one byte).
 */
START_TEST(test_fifo)
{
	BACKEND_OR_SKIP(ops, _i);
	enum { N = 1000 };
	const uint64_t cap = 16 * MiB, maxlen = 64 * KiB;
	struct hbm_dev *d = dev_open(ops, cap, 0);
	uint8_t *src = malloc(maxlen), *sink = malloc(maxlen);
	struct op *o = calloc(N, sizeof(*o));
	struct rec *r = rec_new();
	uint64_t seed = 77 + (uint64_t)_i;

	ck_assert(src && sink && o);
	fill_rand(src, maxlen, &seed);
	for (int k = 0; k < N; k++) {
		enum hbm_dir dir = (t_rnd_next(&seed) & 1) ? HBM_D2H : HBM_H2D;
		uint64_t len = 1 + t_rnd_next(&seed) % maxlen;
		uint64_t off = t_rnd_next(&seed) % (cap / 2 - len) + (dir == HBM_D2H ? cap / 2 : 0);

		submit(ops, d, r, &o[k], dir, off, dir == HBM_H2D ? src : sink, len);
	}
	rec_wait(r, N);
	rec_check(r);
	ck_assert_uint_eq(r->norder[0] + r->norder[1], N);
	ck_assert_uint_gt(r->norder[0], 0);
	ck_assert_uint_gt(r->norder[1], 0);
	for (int k = 0; k < N; k++)
		ck_assert_msg(o[k].result == 0 && o[k].calls == 1, "copy %d: %d calls, %s", k,
			      o[k].calls, o[k].detail);
	ops->close(d);
	rec_free(r);
	free(o);
	free(src);
	free(sink);
}
END_TEST

/* Four threads submitting at once: each one's copies complete in its order. */
struct submitter {
	const struct hbm_ops *ops;
	struct hbm_dev *d;
	uint64_t base, span;       /* this thread's part of the arena */
	struct rec *r;
	struct op *o;
	uint8_t *buf[2];
	int n;
};

static void *submitter_main(void *arg)
{
	struct submitter *s = arg;
	uint64_t seed = 1 + s->base;

	s->r->caller = pthread_self();
	for (int k = 0; k < s->n; k++) {
		enum hbm_dir dir = (t_rnd_next(&seed) & 1) ? HBM_D2H : HBM_H2D;
		uint64_t len = 1 + t_rnd_next(&seed) % (4 * KiB);
		uint64_t off = s->base + (dir == HBM_D2H ? s->span / 2 : 0) + t_rnd_next(&seed) % (s->span / 2 - len);
		struct op *o = &s->o[k];

		memset(o, 0, sizeof(*o));
		o->rec = s->r;
		o->dir = dir;
		o->seq = s->r->nsub[dir]++;
		if (s->ops->copy(s->d, dir, off, s->buf[dir], len, op_cb, o) != 0)
			return (void *)tier_last_error();
	}
	return NULL;
}

START_TEST(test_threads)
{
	BACKEND_OR_SKIP(ops, _i);
	enum { T = 4, N = 250 };
	const uint64_t cap = 16 * MiB;
	struct hbm_dev *d = dev_open(ops, cap, 0);
	struct submitter s[T];
	pthread_t th[T];
	void *res;

	for (int t = 0; t < T; t++) {
		s[t] = (struct submitter){ .ops = ops, .d = d, .base = t * (cap / T), .span = cap / T,
					   .r = rec_new(), .o = calloc(N, sizeof(struct op)), .n = N };
		s[t].buf[0] = calloc(1, 4 * KiB);
		s[t].buf[1] = calloc(1, 4 * KiB);
		ck_assert(s[t].o && s[t].buf[0] && s[t].buf[1]);
	}
	for (int t = 0; t < T; t++)
		ck_assert_int_eq(pthread_create(&th[t], NULL, submitter_main, &s[t]), 0);
	for (int t = 0; t < T; t++) {
		ck_assert_int_eq(pthread_join(th[t], &res), 0);
		ck_assert_msg(res == NULL, "thread %d: copy refused: %s", t, (const char *)res);
	}
	for (int t = 0; t < T; t++) {
		rec_wait(s[t].r, N);
		rec_check(s[t].r);
		for (int k = 0; k < N; k++)
			ck_assert_int_eq(s[t].o[k].result, 0);
	}
	ops->close(d);
	for (int t = 0; t < T; t++) {
		rec_free(s[t].r);
		free(s[t].o);
		free(s[t].buf[0]);
		free(s[t].buf[1]);
	}
}
END_TEST

/*
 * A chain: each callback submits the next copy (H2D and D2H alternating,
 * over one region and one buffer, so each copy is ordered after the last
 * by the chain itself) until @n copies have run.
 */
struct chain {
	const struct hbm_ops *ops;
	struct hbm_dev *d;
	struct rec *r;
	struct op *o;
	uint8_t *buf;
	uint64_t off, len;
	int n;
	int next;                 /* only the callback in flight touches it */
	int refused;              /* a resubmission copy() refused (under r->lock) */
	char why[512];
};

static void chain_cb(void *arg, int result, const char *detail)
{
	struct op *o = arg;
	struct chain *c = o->chain;

	if (c->next < c->n) {
		struct op *nx = &c->o[c->next];
		enum hbm_dir dir = o->dir == HBM_H2D ? HBM_D2H : HBM_H2D;
		int rc;

		nx->rec = c->r;
		nx->dir = dir;
		nx->seq = (unsigned)c->next / 2;
		nx->chain = c;
		c->next++;
		rc = c->ops->copy(c->d, dir, c->off, c->buf, c->len, chain_cb, nx);
		if (rc) {
			pthread_mutex_lock(&c->r->lock);
			c->refused++;
			snprintf(c->why, sizeof(c->why), "%s", tier_last_error());
			pthread_mutex_unlock(&c->r->lock);
		}
	}
	op_cb(arg, result, detail);
}

static void chain_start(struct chain *c)
{
	struct op *o = &c->o[0];
	int rc;

	o->rec = c->r;
	o->dir = HBM_H2D;
	o->seq = 0;
	o->chain = c;
	c->next = 1;
	rc = c->ops->copy(c->d, HBM_H2D, c->off, c->buf, c->len, chain_cb, o);
	ck_assert_msg(rc == 0, "%s", tier_last_error());
}

START_TEST(test_resubmit_from_cb)
{
	BACKEND_OR_SKIP(ops, _i);
	enum { N = 100 };
	struct op *o = calloc(N, sizeof(*o));
	uint8_t *buf = malloc(64 * KiB), *ref = malloc(64 * KiB);
	uint64_t seed = 5;
	struct chain c;

	ck_assert(o && buf && ref);
	fill_rand(ref, 64 * KiB, &seed);
	memcpy(buf, ref, 64 * KiB);
	/* Waiting for the chain, then closing. */
	c = (struct chain){ .ops = ops, .d = dev_open(ops, 4 * MiB, 0), .r = rec_new(), .o = o,
			    .buf = buf, .off = 1 * MiB + 3, .len = 64 * KiB, .n = N };
	chain_start(&c);
	rec_wait(c.r, N);
	rec_check(c.r);
	ck_assert_msg(c.refused == 0, "a copy from a callback was refused: %s", c.why);
	for (int k = 0; k < N; k++)
		ck_assert_msg(o[k].calls == 1 && o[k].result == 0, "copy %d: %d calls, %s", k,
			      o[k].calls, o[k].detail);
	ck_assert_msg(memcmp(buf, ref, 64 * KiB) == 0, "the buffer changed over H2D/D2H pairs");
	ops->close(c.d);
	rec_free(c.r);

	/* Closing at once: close() waits for copies submitted by callbacks too. */
	memset(o, 0, N * sizeof(*o));
	c = (struct chain){ .ops = ops, .d = dev_open(ops, 4 * MiB, 0), .r = rec_new(), .o = o,
			    .buf = buf, .off = 0, .len = 64 * KiB, .n = N };
	chain_start(&c);
	ops->close(c.d);
	ck_assert_uint_eq(rec_done(c.r), N);
	rec_check(c.r);
	ck_assert_msg(c.refused == 0, "a copy from a callback was refused: %s", c.why);
	rec_free(c.r);
	free(o);
	free(buf);
	free(ref);
}
END_TEST

START_TEST(test_close_waits)
{
	BACKEND_OR_SKIP(ops, _i);
	enum { N = 100 };
	const uint64_t cap = 16 * MiB, len = 64 * KiB;
	/* Host: paced at 200 MB/s, the queue takes ~16 ms per direction to drain. */
	struct hbm_dev *d = dev_open(ops, cap, 200e6);
	uint8_t *src = calloc(1, len), *sink = calloc(N / 2, len);
	struct op o[N];
	struct rec *r = rec_new();

	ck_assert(src && sink);
	for (int k = 0; k < N; k++) {
		if (k % 2 == 0)
			submit(ops, d, r, &o[k], HBM_H2D, (uint64_t)k / 2 * len, src, len);
		else
			submit(ops, d, r, &o[k], HBM_D2H, cap / 2 + (uint64_t)k / 2 * len,
			       sink + (uint64_t)k / 2 * len, len);
	}
	ops->close(d);
	/* Joined: no lock needed, but rec_done() takes it anyway. */
	ck_assert_uint_eq(rec_done(r), N);
	rec_check(r);
	for (int k = 0; k < N; k++)
		ck_assert_msg(o[k].calls == 1 && o[k].result == 0, "copy %d: %d calls, %s", k,
			      o[k].calls, o[k].detail);
	rec_free(r);
	free(src);
	free(sink);
}
END_TEST

START_TEST(test_bad_copies)
{
	BACKEND_OR_SKIP(ops, _i);
	struct hbm_dev *d = dev_open(ops, 4 * MiB, 0);
	uint64_t size = ops->capacity(d);
	uint8_t buf[64];
	struct rec *r = rec_new();
	struct op o;
	const struct {
		uint64_t off, len;
	} out[] = {
		{ size, 1 },
		{ size + 1, 0 },
		{ size - 10, 11 },
		{ 0, size + 1 },
		{ UINT64_MAX, 2 },
		{ 2, UINT64_MAX },
		{ UINT64_MAX, UINT64_MAX },
	};

	memset(&o, 0, sizeof(o));
	o.rec = r;
	for (size_t k = 0; k < ARRAY_SIZE(out); k++) {
		for (int dir = 0; dir < 2; dir++) {
			int rc = ops->copy(d, (enum hbm_dir)dir, out[k].off, buf, out[k].len, op_cb, &o);

			ck_assert_msg(rc == -EINVAL, "%s: %llu bytes at %llu: %d", ops->name,
				      U64(out[k].len), U64(out[k].off), rc);
			ck_assert_msg(strstr(tier_last_error(), "outside"), "%s", tier_last_error());
		}
	}
	ck_assert_int_eq(ops->copy(d, (enum hbm_dir)2, 0, buf, 1, op_cb, &o), -EINVAL);
	ck_assert_ptr_nonnull(strstr(tier_last_error(), "direction"));
	ck_assert_int_eq(ops->copy(d, HBM_H2D, 0, buf, 1, NULL, NULL), -EINVAL);
	ck_assert_ptr_nonnull(strstr(tier_last_error(), "callback"));
	/* The whole arena, exactly, is fine. */
	if (moves_data(ops)) {
		uint8_t *big = calloc(1, size);

		ck_assert_ptr_nonnull(big);
		submit(ops, d, r, &o, HBM_H2D, 0, big, size);
		rec_wait(r, 1);
		ck_assert_int_eq(o.result, 0);
		ops->close(d);
		free(big);
	} else {
		submit(ops, d, r, &o, HBM_D2H, 0, NULL, size);
		rec_wait(r, 1);
		ck_assert_int_eq(o.result, 0);
		ops->close(d);
	}
	ck_assert_uint_eq(rec_done(r), 1);      /* the refused copies never called back */
	rec_check(r);
	rec_free(r);
}
END_TEST

START_TEST(test_bad_open)
{
	BACKEND_OR_SKIP(ops, _i);
	struct hbm_params p = { .capacity = 0, .gpu = 0, .bandwidth = 0 };
	struct hbm_dev *d = (struct hbm_dev *)&p;

	ck_assert_int_eq(ops->open(&p, &d), -EINVAL);
	ck_assert_ptr_null(d);
	ck_assert_ptr_nonnull(strstr(tier_last_error(), "capacity"));
	if (ops->caps & HBM_CAP_BANDWIDTH) {
		p.capacity = MiB;
		p.bandwidth = -1;
		ck_assert_int_eq(ops->open(&p, &d), -EINVAL);
		ck_assert_ptr_nonnull(strstr(tier_last_error(), "bandwidth"));
		ck_assert_ptr_null(d);
	}
}
END_TEST

/* ------------------------------------------------------------ host only */

/* 40 MB each way at 200 MB/s: each direction takes >= 0.18 s, at once. */
START_TEST(test_bandwidth)
{
	const struct hbm_ops *ops = backend(B_HOST);
	enum { N = 10 };
	const uint64_t len = 4000000, cap = 128 * MiB;
	const double bw = 200e6;
	struct hbm_dev *d = dev_open(ops, cap, bw);
	uint8_t *src = calloc(1, len), *sink = malloc(len);
	struct rec *r = rec_new();
	struct op o[2 * N];
	uint64_t t0, first_done = 0, t_all;
	double secs;

	ck_assert(src && sink);
	t0 = ts_now_ns();
	for (int k = 0; k < N; k++) {
		submit(ops, d, r, &o[2 * k], HBM_H2D, (uint64_t)k * len, src, len);
		submit(ops, d, r, &o[2 * k + 1], HBM_D2H, 64 * MiB + (uint64_t)k * len, sink, len);
	}
	rec_wait(r, 1);
	first_done = ts_now_ns() - t0;
	rec_wait(r, 2 * N);
	t_all = ts_now_ns() - t0;
	secs = ts_ns_to_s(t_all);
	rec_check(r);
	printf("host at %.0f MB/s: 2 x %llu bytes in %.3f s (first copy after %.3f s)\n", bw / 1e6,
	       U64(N * len), secs, ts_ns_to_s(first_done));
	/* Each copy of 4 MB occupies the link 20 ms. */
	ck_assert_msg(ts_ns_to_s(first_done) >= 0.018, "first 4 MB copy done after %.4f s",
		      ts_ns_to_s(first_done));
	ck_assert_msg(secs >= 0.18, "40 MB each way at 200 MB/s took only %.3f s", secs);
	/* Upper bound 10x, and shows the directions do not share one budget. */
	ck_assert_msg(secs < 4.0, "40 MB each way at 200 MB/s took %.3f s", secs);
	ops->close(d);
	rec_free(r);
	free(src);
	free(sink);
}
END_TEST

/* --------------------------------------------------------------- faults */

/* HBM_COPY on the 3rd of 5 copies, in direction _i % 2, on backend _i / 2. */
START_TEST(test_copy_fault)
{
	NEED_FAULTS();
	BACKEND_OR_SKIP(ops, _i / 2);
	enum { N = 5 };
	const enum hbm_dir dir = (_i % 2) ? HBM_D2H : HBM_H2D;
	const int err = dir == HBM_H2D ? -EIO : -ENOMEM;
	const uint64_t len = 256 * KiB;
	struct hbm_dev *d = dev_open(ops, 4 * MiB, 0);
	uint8_t *a = malloc(len), *b = malloc(len), *in[N];
	struct rec *r = rec_new();
	struct op o[3 * N];
	unsigned n = 0;
	uint64_t seed = 3, h2d = 0, d2h = 0;

	ck_assert(a && b);
	fill_rand(a, len, &seed);
	fill_rand(b, len, &seed);
	for (int k = 0; k < N; k++) {
		in[k] = malloc(len);
		ck_assert_ptr_nonnull(in[k]);
		memset(in[k], 0x5a, len);
	}
	/* Every region holds a; then (H2D case) b is written with the fault armed. */
	for (int k = 0; k < N; k++)
		submit(ops, d, r, &o[n++], HBM_H2D, (uint64_t)k * len, a, len);
	rec_wait(r, n);
	/* Counting restarts at arming: the 3rd copy from here fails, o[N + 2] either way. */
	ts_fault_arm(TIER_FAULT_HBM_COPY, 3, 1, err);
	if (dir == HBM_H2D)
		for (int k = 0; k < N; k++)
			submit(ops, d, r, &o[n++], HBM_H2D, (uint64_t)k * len, b, len);
	rec_wait(r, n);
	for (int k = 0; k < N; k++)
		submit(ops, d, r, &o[n++], HBM_D2H, (uint64_t)k * len, in[k], len);
	rec_wait(r, n);
	ck_assert_uint_eq(ts_fault_fired(TIER_FAULT_HBM_COPY), 1);
	rec_check(r);
	for (unsigned k = 0; k < n; k++) {
		if (k == N + 2) {
			ck_assert_msg(o[k].result == err, "copy %u: %d, expected %d", k, o[k].result, err);
			ck_assert_msg(strstr(o[k].detail, "hbm_copy") &&
				      strstr(o[k].detail, tier_strerror(err)),
				      "copy %u: detail: %s", k, o[k].detail);
		} else {
			ck_assert_msg(o[k].result == 0, "copy %u: %s", k, o[k].detail);
		}
	}
	for (int k = 0; k < N; k++) {
		const uint8_t *want = dir == HBM_D2H ? a : b;

		if (k == 2) {
			if (dir == HBM_D2H)
				assert_all(in[k], len, 0x5a, "the failed D2H copy's destination");
			else if (moves_data(ops))
				ck_assert_msg(memcmp(in[k], a, len) == 0,
					      "the failed H2D copy's destination changed");
			continue;
		}
		if (moves_data(ops))
			ck_assert_msg(memcmp(in[k], want, len) == 0, "region %d differs", k);
		else
			assert_all(in[k], len, 0x5a, "a null D2H destination");
	}
	ops->counters(d, &h2d, &d2h);
	ck_assert_uint_eq(h2d, (dir == HBM_H2D ? 2 * N - 1 : N) * len);
	ck_assert_uint_eq(d2h, (dir == HBM_D2H ? N - 1 : N) * len);
	ops->close(d);
	rec_free(r);
	for (int k = 0; k < N; k++)
		free(in[k]);
	free(a);
	free(b);
}
END_TEST

/* HBM_ALLOC (_i % 2 == 0) or THREAD_CREATE (the 1st or 2nd thread) in open(). */
struct open_fault {
	enum ts_fault_site site;
	unsigned nth;
	int err;
	const char *needle;
};

static const struct open_fault open_faults[] = {
	{ TIER_FAULT_HBM_ALLOC, 1, -ENOMEM, "arena" },
	{ TIER_FAULT_THREAD_CREATE, 1, -EAGAIN, "thread" },
	{ TIER_FAULT_THREAD_CREATE, 2, -EAGAIN, "thread" },
};

START_TEST(test_open_fault)
{
	NEED_FAULTS();
	BACKEND_OR_SKIP(ops, _i / (int)ARRAY_SIZE(open_faults));
	const struct open_fault *c = &open_faults[_i % (int)ARRAY_SIZE(open_faults)];
	struct hbm_params p = { .capacity = 8 * MiB, .gpu = 0, .bandwidth = 0 };
	struct hbm_dev *d = (struct hbm_dev *)&p;
	int rc;

	ts_fault_arm(c->site, c->nth, 1, c->err);
	rc = ops->open(&p, &d);
	if (ts_fault_fired(c->site) == 0) {
		/* The null backend has a single thread: there is no 2nd to fail. */
		ck_assert_msg(rc == 0, "%s", tier_last_error());
		ck_assert_msg(c->site == TIER_FAULT_THREAD_CREATE && c->nth > 1,
			      "%s: site %s never reached", ops->name, ts_fault_site_name(c->site));
		ops->close(d);
		return;
	}
	ck_assert_uint_eq(ts_fault_fired(c->site), 1);
	ck_assert_msg(rc == c->err, "%s: %s at %u: %d (%s)", ops->name,
		      ts_fault_site_name(c->site), c->nth, rc, tier_last_error());
	ck_assert_ptr_null(d);
	ck_assert_msg(strstr(tier_last_error(), c->needle) &&
		      strstr(tier_last_error(), tier_strerror(c->err)),
		      "%s: the detail should say '%s': %s", ops->name, c->needle, tier_last_error());
	/* The fault was transient: the same open now works. */
	d = dev_open(ops, p.capacity, 0);
	ops->close(d);
}
END_TEST

/* --------------------------------------------------------------- suite */

/* @gpu_only: the contract rows of the cuda backend alone (tests/gpu/). */
static Suite *hbm_suite(bool gpu_only)
{
	Suite *s = suite_create(gpu_only ? "gpu_hbm" : "hbm");
	int lo = gpu_only ? B_CUDA : 0, hi = B__COUNT;
	int nof = (int)ARRAY_SIZE(open_faults);
	TCase *tc;

	if (!gpu_only) {
		tc = tcase_create("registry");
		tcase_add_test(tc, test_registry_builtins);
		tcase_add_loop_test(tc, test_registry_invalid, 0, (int)ARRAY_SIZE(bad_tables));
		tcase_add_test(tc, test_registry_missing_all);
		tcase_add_test(tc, test_registry_duplicate);
		tcase_add_test(tc, test_registry_full);
		tcase_add_test(tc, test_registry_first_use_races);
		suite_add_tcase(s, tc);
	}

	tc = tcase_create("contract");
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_set_timeout(tc, 120);
	tcase_add_loop_test(tc, test_round_trip, lo, hi);
	tcase_add_loop_test(tc, test_fifo, lo, hi);
	tcase_add_loop_test(tc, test_threads, lo, hi);
	tcase_add_loop_test(tc, test_resubmit_from_cb, lo, hi);
	tcase_add_loop_test(tc, test_close_waits, lo, hi);
	tcase_add_loop_test(tc, test_bad_copies, lo, hi);
	tcase_add_loop_test(tc, test_bad_open, lo, hi);
	suite_add_tcase(s, tc);

	if (!gpu_only) {
		tc = tcase_create("host");
		tcase_set_timeout(tc, 120);
		tcase_add_test(tc, test_bandwidth);
		suite_add_tcase(s, tc);
	}

	tc = t_tcase_faults("faults");
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_loop_test(tc, test_copy_fault, lo * 2, hi * 2);
	tcase_add_loop_test(tc, test_open_fault, lo * nof, hi * nof);
	suite_add_tcase(s, tc);
	return s;
}

#ifndef TEST_HBM_NO_MAIN
int main(void)
{
	return t_run_suite(hbm_suite(false));
}
#endif
