/*
 * test_store.c - the tiered store (tiers/store.c, runtime/open.c) against
 * the contract in include/tierstore.h ("the store"), tiers/store.h and the
 * comment at the top of tiers/store.c, on real NVMe backing files in
 * scratch directories, the DRAM arena and the "host" (and "null") HBM
 * backends.
 *
 * Covers:
 *  - residency on each level: a new object reads as zeros, write/read
 *    round trips, pointers of DRAM and (host) HBM pins, dirty bytes in the
 *    stats, flush to NVMe (device bytes written, dirty 0), eviction of
 *    dirty objects (written back, contents survive), coherence (HBM dirty
 *    bytes come down before a DRAM access), inclusion (an HBM copy holds a
 *    DRAM slot, leaves with it), stale HBM copies dropped on a DRAM write,
 *    TIER_ACQUIRE_DISCARD (no fill), buddy slot rounding; on NVMe homes (direct
 *    I/O and buffered) and on a DRAM home (no NVMe paths);
 *  - pin rules: releases without the pin, write pins excluding other
 *    levels, destroy and flush of pinned objects, bad levels and modes,
 *    -ENODEV, -E2BIG, -ENOMEM at once (never a hang) with a detail;
 *  - failures in the middle of fills and write-backs through the fault
 *    sites nvme_io_err, store_io, hbm_copy and nvme_bitflip (checksums):
 *    the error reaches tier_obj_acquire / tier_obj_flush / tier_store_flush with the
 *    object named, the level's error counter moves, nothing acknowledged
 *    is lost, and disarmed the same calls succeed with the right bytes;
 *    an eviction cancelled by a new acquire while its write-back is in
 *    flight (nvme_delay);
 *  - prefetch (a later acquire is a hit; no livelock with acquires waiting
 *    for room), async acquires (many in flight, several on one failing
 *    fill), destroy (slots freed on every level, name reusable, also with
 *    fills, write-backs and acquires in flight; refused, naming it and
 *    changing nothing, for an object its owner holds), close (flushes dirty
 *    data, -EBUSY with a pin but no hang or leak, fills in flight);
 *  - a randomized multi-threaded stress (4 threads, 32 objects of 128 KiB
 *    to 1 MiB, DRAM for ~8, HBM for ~4) under Belady (with a schedule that
 *    changes under it) and LRU, and on a DRAM home: constant eviction on
 *    DRAM and HBM, contents checked at every pin and byte for byte at the
 *    end, a watchdog that fails the test when no thread makes progress;
 *  - capacity: an event hook (tiers/store.h) keeps a lower bound of each
 *    level's used bytes from fill starts and drops and asserts it never
 *    exceeds the capacity; the stats are checked after every step.
 *
 * Every test calls tier_store_validate() between steps and at the end.
 * Tests marked "REGRESSION" reproduce bugs this suite found in the store
 * as first written (all fixed); the comment above each says what went
 * wrong.
 */
#include "config.h"

#include <check.h>
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "common/error.h"
#include "common/fault.h"
#include "tiers/store.h"
#include "t_helpers.h"

#define KiB (1ull << 10)
#define MiB (1ull << 20)
#define U64(x) ((unsigned long long)(x))

/* One object: the host backend's arena is a multiple of 2 MiB, so HBM
 * holds 4 of these and DRAM (by default) 8. */
#define OBJ (512 * KiB)
#define DRAM_OBJS 8
#define HBM_BYTES (2 * MiB)
#define HBM_OBJS ((int)(HBM_BYTES / OBJ))

static char *g_dir;

static void setup(void)
{
	ts_fault_reset_all();
	ts_err_clear();
	g_dir = t_mkdtemp();
}

static void teardown(void)
{
	ts_fault_reset_all();
	t_rmtree(g_dir);
	free(g_dir);
	g_dir = NULL;
}

/* ------------------------------------------------------------ patterns */

/* Word @i of version @ver of object @id; version 0 is all zeros (a new
 * object). */
static inline uint64_t pat_word(uint32_t id, uint32_t ver, uint64_t i)
{
	if (!ver)
		return 0;
	return ((uint64_t)id << 48) ^ ((uint64_t)ver << 24) ^ (i * 0x9E3779B97F4A7C15ull) ^ 1;
}

static void pat_fill(void *p, uint64_t n, uint32_t id, uint32_t ver)
{
	uint64_t *w = p;

	for (uint64_t i = 0; i < n / 8; i++)
		w[i] = pat_word(id, ver, i);
}

/* Whether @p holds version @ver of object @id; else the first difference
 * in @why. */
static bool pat_check(const void *p, uint64_t n, uint32_t id, uint32_t ver, char *why,
		      size_t whylen)
{
	const uint64_t *w = p;

	for (uint64_t i = 0; i < n / 8; i++) {
		if (w[i] != pat_word(id, ver, i)) {
			/* Which version is it, if any? */
			long found = -1;

			for (uint32_t v = 0; v < 100000 && found < 0; v++)
				if (w[i] == pat_word(id, v, i))
					found = v;
			snprintf(why, whylen,
				 "object %u: word %llu of %llu is %016llx, expected version %u (%016llx); "
				 "it looks like version %ld",
				 id, U64(i), U64(n / 8), U64(w[i]), ver, U64(pat_word(id, ver, i)), found);
			return false;
		}
	}
	return true;
}

#define ASSERT_PAT(p, n, id, ver)                                                       \
	do {                                                                           \
		char why_[512];                                                        \
		ck_assert_msg(pat_check((p), (n), (id), (ver), why_, sizeof(why_)), "%s", \
			      why_);                                                   \
	} while (0)

/* ------------------------------------------------------------ the hook */

#define HK_MAX 128

/*
 * What the event hook sees: counts per event and level, and a lower bound
 * of each level's used bytes (slots whose fill started and that were not
 * dropped since; TIER_ACQUIRE_DISCARD slots are not announced, so it is a lower
 * bound), which must stay within the capacity.  The hook runs with the
 * store's lock held and calls nothing in the store but tier_obj_size.
 */
struct hook_state {
	pthread_mutex_t lock;
	const struct tier_obj *obj[HK_MAX];
	uint64_t size[HK_MAX];
	bool present[HK_MAX][2];
	int nobj;
	uint64_t used[2], cap[2], peak[2];
	uint64_t ev[STORE_EV_DROP + 1][TIER_LEVELS];
	int violations;
	char msg[512];
	/* Optional: per-object counts of one event on one level. */
	const struct tier_obj *watch;
	uint64_t watch_ev[STORE_EV_DROP + 1][TIER_LEVELS];
};

static void hook_violation(struct hook_state *h, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

static void hook_violation(struct hook_state *h, const char *fmt, ...)
{
	va_list ap;

	if (h->violations++)
		return;
	va_start(ap, fmt);
	vsnprintf(h->msg, sizeof(h->msg), fmt, ap);
	va_end(ap);
}

static int hook_slot(struct hook_state *h, const struct tier_obj *o)
{
	for (int i = 0; i < h->nobj; i++)
		if (h->obj[i] == o)
			return i;
	if (h->nobj == HK_MAX)
		return -1;
	h->obj[h->nobj] = o;
	h->size[h->nobj] = tier_obj_size(o);
	h->present[h->nobj][0] = h->present[h->nobj][1] = false;
	return h->nobj++;
}

static void hook_fn(void *arg, enum store_event ev, enum tier_level l, const struct tier_obj *o)
{
	struct hook_state *h = arg;
	int i;

	pthread_mutex_lock(&h->lock);
	if ((unsigned)ev <= STORE_EV_DROP && (unsigned)l < TIER_LEVELS) {
		h->ev[ev][l]++;
		if (o == h->watch)
			h->watch_ev[ev][l]++;
	} else {
		hook_violation(h, "event %d on level %d", (int)ev, (int)l);
	}
	if (l == TIER_NVME && (ev == STORE_EV_FILL_START || ev == STORE_EV_DROP ||
			       ev == STORE_EV_FLUSH_START || ev == STORE_EV_EVICT))
		hook_violation(h, "event %d on the nvme level ('%s')", (int)ev, tier_obj_name(o));
	if ((l == TIER_HBM || l == TIER_DRAM) && (i = hook_slot(h, o)) >= 0) {
		if (ev == STORE_EV_FILL_START) {
			h->size[i] = tier_obj_size(o);
			if (h->present[i][l])
				hook_violation(h, "fill of '%s' into %s started while a fill or slot is there",
					       tier_obj_name(o), tier_level_name(l));
			h->present[i][l] = true;
			h->used[l] += h->size[i];
			if (h->used[l] > h->peak[l])
				h->peak[l] = h->used[l];
			if (h->cap[l] && h->used[l] > h->cap[l])
				hook_violation(h, "%s: %llu bytes in slots (at least) of %llu after filling '%s'",
					       tier_level_name(l), U64(h->used[l]), U64(h->cap[l]),
					       tier_obj_name(o));
		} else if (ev == STORE_EV_DROP && h->present[i][l]) {
			h->present[i][l] = false;
			h->used[l] -= h->size[i];
		}
	}
	pthread_mutex_unlock(&h->lock);
}

static uint64_t hook_count(struct hook_state *h, enum store_event ev, enum tier_level l)
{
	uint64_t n;

	pthread_mutex_lock(&h->lock);
	n = h->ev[ev][l];
	pthread_mutex_unlock(&h->lock);
	return n;
}

static uint64_t hook_watch_count(struct hook_state *h, enum store_event ev, enum tier_level l)
{
	uint64_t n;

	pthread_mutex_lock(&h->lock);
	n = h->watch_ev[ev][l];
	pthread_mutex_unlock(&h->lock);
	return n;
}

static void hook_watch(struct hook_state *h, const struct tier_obj *o)
{
	pthread_mutex_lock(&h->lock);
	h->watch = o;
	memset(h->watch_ev, 0, sizeof(h->watch_ev));
	pthread_mutex_unlock(&h->lock);
}

static void hook_assert_ok(struct hook_state *h)
{
	pthread_mutex_lock(&h->lock);
	ck_assert_msg(h->violations == 0, "event hook: %d violations, the first: %s", h->violations,
		      h->msg);
	pthread_mutex_unlock(&h->lock);
}

/* ------------------------------------------------------------ stores */

struct cfg {
	const char *name;
	bool nvme;              /* an NVMe home; else DRAM is the home */
	const char *hbm;        /* "none", "host", "null" */
	bool direct;            /* direct: true */
	bool csum;              /* checksum: crc32c (else none) */
	enum tier_policy policy;
	uint64_t dram;          /* 0: DRAM_OBJS objects */
	uint64_t hbm_bytes;     /* 0: HBM_BYTES */
	double hbm_bw;          /* host backend pacing, bytes/s; 0: unlimited */
};

struct env {
	struct cfg c;
	struct tier_manifest *m;
	struct tier_store *s;
	struct hook_state hk;
	struct tier_obj *fill[DRAM_OBJS * 2];
	int nfill;
};

static struct tier_manifest *make_manifest(const struct cfg *c)
{
	struct tier_manifest *m = NULL;
	char text[2048];
	int n = snprintf(text, sizeof(text),
			 "gpu:\n  device: none\ndram:\n  capacity: 64MiB\n"
			 "optimizer:\n  shard_size: 4MiB\n");

	if (c->nvme)
		n += snprintf(text + n, sizeof(text) - (size_t)n,
			      "nvme:\n  stripe_unit: 64KiB\n  checksum: %s\n  direct: %s\n"
			      "  paths:\n    - path: %s/nvme/\n      capacity: 256MiB\n"
			      "      create: true\n",
			      c->csum ? "crc32c" : "none", c->direct ? "true" : "false", g_dir);
	ck_assert_int_lt(n, (int)sizeof(text));
	ck_assert_msg(tier_manifest_parse(text, (size_t)n, "store-test.yaml", 0, &m) == 0,
		      "manifest refused: %s\n%s", tier_last_error(), text);
	return m;
}

static void check_stats(struct tier_store *s)
{
	struct tier_store_stats st;

	tier_store_get_stats(s, &st);
	for (int l = TIER_HBM; l <= TIER_DRAM; l++) {
		if (!st.level[l].present)
			continue;
		ck_assert_msg(st.level[l].used <= st.level[l].capacity, "%s: used %llu > capacity %llu",
			      tier_level_name(l), U64(st.level[l].used), U64(st.level[l].capacity));
		ck_assert_msg(st.level[l].pinned <= st.level[l].used, "%s: pinned %llu > used %llu",
			      tier_level_name(l), U64(st.level[l].pinned), U64(st.level[l].used));
	}
}

#define VALID(s)                                                                        \
	do {                                                                           \
		int vrc_ = tier_store_validate(s);                                     \
		ck_assert_msg(vrc_ == 0, "line %d: validate: %d: %s", __LINE__, vrc_,  \
			      tier_last_error());                                      \
		check_stats(s);                                                        \
	} while (0)

static struct tier_store_stats stats(struct tier_store *s)
{
	struct tier_store_stats st;

	tier_store_get_stats(s, &st);
	return st;
}

static struct tier_nvme_stats nstats(struct tier_store *s)
{
	struct tier_nvme_stats ns = { 0 };

	if (tier_store_nvme(s))
		tier_nvme_get_stats(tier_store_nvme(s), &ns);
	return ns;
}

static void env_open(struct env *e, const struct cfg *c)
{
	struct tier_store_params p = { .size = sizeof(struct tier_store_params),
		.dram_capacity = c->dram ? c->dram : DRAM_OBJS * OBJ,
		.hbm_backend = c->hbm ? c->hbm : "none",
		.hbm_capacity = strcmp(c->hbm ? c->hbm : "none", "none")
					? (c->hbm_bytes ? c->hbm_bytes : HBM_BYTES) : 0,
		.hbm_bandwidth = c->hbm_bw,
		.policy = c->policy,
		.flags = TIER_STORE_SCRATCH,
	};
	struct tier_store_stats st;
	int rc;

	memset(e, 0, sizeof(*e));
	e->c = *c;
	pthread_mutex_init(&e->hk.lock, NULL);
	e->m = make_manifest(c);
	rc = tier_store_open(e->m, &p, &e->s);
	ck_assert_msg(rc == 0, "%s: open: %d: %s", c->name ? c->name : "store", rc, tier_last_error());
	st = stats(e->s);
	e->hk.cap[TIER_HBM] = st.level[TIER_HBM].capacity;
	e->hk.cap[TIER_DRAM] = st.level[TIER_DRAM].capacity;
	store_set_hook(e->s, hook_fn, &e->hk);
	ck_assert(tier_store_home(e->s) == (c->nvme ? TIER_NVME : TIER_DRAM));
	ck_assert(tier_store_has_level(e->s, TIER_HBM) == (strcmp(p.hbm_backend, "none") != 0));
	ck_assert(tier_store_has_level(e->s, TIER_DRAM));
	ck_assert(tier_store_has_level(e->s, TIER_NVME) == c->nvme);
	ck_assert((tier_store_nvme(e->s) != NULL) == c->nvme);
	VALID(e->s);
}

static void env_close(struct env *e)
{
	int rc;

	VALID(e->s);
	hook_assert_ok(&e->hk);
	rc = tier_store_close(e->s);
	ck_assert_msg(rc == 0, "close: %d: %s", rc, tier_last_error());
	e->s = NULL;
	hook_assert_ok(&e->hk);
	tier_manifest_free(e->m);
	e->m = NULL;
}

static struct tier_obj *mkobj(struct env *e, const char *name, uint64_t size)
{
	struct tier_obj *o = NULL;
	int rc = tier_obj_create(e->s, name, size, &o);

	ck_assert_msg(rc == 0, "create '%s': %d: %s", name, rc, tier_last_error());
	ck_assert_ptr_nonnull(o);
	ck_assert_uint_eq(tier_obj_size(o), size);
	ck_assert_str_eq(tier_obj_name(o), name);
	ck_assert_ptr_eq(tier_obj_find(e->s, name), o);
	return o;
}

static void *xbuf(uint64_t n)
{
	void *p = NULL;

	ck_assert_int_eq(posix_memalign(&p, 4096, n ? n : 1), 0);
	return p;
}

/* Writes version @ver of object @id through tier_obj_write. */
static void write_ver(struct tier_store *s, struct tier_obj *o, uint32_t id, uint32_t ver)
{
	uint64_t n = tier_obj_size(o);
	void *b = xbuf(n);
	int rc;

	pat_fill(b, n, id, ver);
	rc = tier_obj_write(s, o, 0, n, b);
	ck_assert_msg(rc == 0, "write '%s': %d: %s", tier_obj_name(o), rc, tier_last_error());
	free(b);
}

/* Reads the object through tier_obj_read and checks it holds @ver. */
static void expect_ver(struct tier_store *s, struct tier_obj *o, uint32_t id, uint32_t ver)
{
	uint64_t n = tier_obj_size(o);
	void *b = xbuf(n);
	int rc;

	memset(b, 0xA5, n);
	rc = tier_obj_read(s, o, 0, n, b);
	ck_assert_msg(rc == 0, "read '%s': %d: %s", tier_obj_name(o), rc, tier_last_error());
	ASSERT_PAT(b, n, id, ver);
	free(b);
}

/* Acquires, checks 0, returns the pointer. */
static void *xacquire(struct tier_store *s, struct tier_obj *o, enum tier_level l, unsigned mode)
{
	void *p = (void *)&p;
	int rc = tier_obj_acquire(s, o, l, mode, &p);

	ck_assert_msg(rc == 0, "acquire '%s' on %s (mode %#x): %d: %s", tier_obj_name(o),
		      tier_level_name(l), mode, rc, tier_last_error());
	ck_assert_msg(p != (void *)&p, "acquire left *ptr unset");
	return p;
}

static void xrelease(struct tier_store *s, struct tier_obj *o, enum tier_level l, bool dirty)
{
	int rc = tier_obj_release(s, o, l, dirty);

	ck_assert_msg(rc == 0, "release '%s' on %s: %d: %s", tier_obj_name(o), tier_level_name(l),
		      rc, tier_last_error());
}

/*
 * Pushes every other object out of DRAM (and with it out of HBM): reads
 * DRAM_OBJS filler objects of OBJ bytes, so that with equal objects and
 * LRU (or Belady without a schedule) the fillers are all that DRAM holds.
 * Fillers were never written: their fills are zeros, no NVMe I/O.
 */
static void push_out(struct env *e)
{
	int nslots = (int)(stats(e->s).level[TIER_DRAM].capacity / OBJ);
	struct tier_store_stats st;

	ck_assert_int_le(nslots, (int)ARRAY_SIZE(e->fill));
	while (e->nfill < nslots) {
		char name[32];

		snprintf(name, sizeof(name), "filler.%d", e->nfill);
		e->fill[e->nfill] = mkobj(e, name, OBJ);
		e->nfill++;
	}
	for (int i = 0; i < nslots; i++) {
		void *p = xacquire(e->s, e->fill[i], TIER_DRAM, TIER_ACQUIRE_READ);

		xrelease(e->s, e->fill[i], TIER_DRAM, false);
		(void)p;
	}
	st = stats(e->s);
	ck_assert_msg(st.level[TIER_DRAM].objects == (uint64_t)nslots,
		      "push_out: dram holds %llu objects, expected just the %d fillers",
		      U64(st.level[TIER_DRAM].objects), nslots);
	if (st.level[TIER_HBM].present)
		ck_assert_uint_eq(st.level[TIER_HBM].objects, 0);
	VALID(e->s);
}

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* ------------------------------------------------------------ residency */

static const struct cfg residency_cfgs[] = {
	{ .name = "nvme home, no hbm, buffered", .nvme = true, .hbm = "none", .csum = true },
	{ .name = "nvme home, no hbm, O_DIRECT", .nvme = true, .hbm = "none", .direct = true,
	  .csum = true },
	{ .name = "nvme home, hbm host", .nvme = true, .hbm = "host", .csum = true },
	{ .name = "nvme home, hbm host, O_DIRECT, no checksums", .nvme = true, .hbm = "host",
	  .direct = true },
	{ .name = "dram home, no hbm", .nvme = false, .hbm = "none" },
	{ .name = "dram home, hbm host", .nvme = false, .hbm = "host" },
};

/*
 * One object through every transition its levels have: new (zeros),
 * written, read through a pointer, written through a pointer (dirty),
 * flushed (NVMe bytes written, dirty 0); on HBM written through the
 * device pointer, seen on DRAM (coherence) and flushed; pushed out and
 * read back from the home.
 */
START_TEST(test_roundtrip)
{
	const struct cfg *c = &residency_cfgs[_i];
	struct env e;
	struct tier_store_stats st, st0;
	struct tier_nvme_stats n0, n1;
	struct tier_obj *o;
	bool hbm = strcmp(c->hbm, "none") != 0;
	uint32_t id = 7;
	void *p;
	int rc;

	env_open(&e, c);
	o = mkobj(&e, "roundtrip", OBJ);
	ck_assert_int_eq(tier_obj_create(e.s, "roundtrip", OBJ, &(struct tier_obj *){ NULL }),
			 -EEXIST);
	ck_assert_ptr_null(tier_obj_find(e.s, "no-such-object"));
	st = stats(e.s);
	ck_assert_uint_eq(st.objects, 1);

	/* New: zeros. */
	expect_ver(e.s, o, id, 0);
	VALID(e.s);
	ck_assert_uint_eq(nstats(e.s).bytes_read, 0); /* a new object costs no I/O */

	/* Written and read back. */
	write_ver(e.s, o, id, 1);
	st = stats(e.s);
	ck_assert_uint_eq(st.level[TIER_DRAM].dirty, c->nvme ? OBJ : 0);
	expect_ver(e.s, o, id, 1);
	VALID(e.s);

	/* A DRAM read pin: the bytes at the pointer. */
	p = xacquire(e.s, o, TIER_DRAM, TIER_ACQUIRE_READ);
	ASSERT_PAT(p, OBJ, id, 1);
	st = stats(e.s);
	ck_assert_uint_eq(st.level[TIER_DRAM].pinned, OBJ);
	VALID(e.s);
	xrelease(e.s, o, TIER_DRAM, false);
	ck_assert_uint_eq(stats(e.s).level[TIER_DRAM].pinned, 0);

	/* A DRAM write pin, released dirty. */
	n0 = nstats(e.s);
	ck_assert_int_eq(tier_obj_flush(e.s, o), 0);
	n1 = nstats(e.s);
	if (c->nvme)
		ck_assert_uint_ge(n1.bytes_written - n0.bytes_written, OBJ);
	ck_assert_uint_eq(stats(e.s).level[TIER_DRAM].dirty, 0);
	p = xacquire(e.s, o, TIER_DRAM, TIER_ACQUIRE_READ | TIER_ACQUIRE_WRITE);
	ASSERT_PAT(p, OBJ, id, 1);
	pat_fill(p, OBJ, id, 2);
	VALID(e.s);
	xrelease(e.s, o, TIER_DRAM, true);
	st = stats(e.s);
	ck_assert_uint_eq(st.level[TIER_DRAM].dirty, c->nvme ? OBJ : 0);
	ck_assert_uint_eq(st.level[TIER_DRAM].pinned, 0);
	VALID(e.s);

	/* Flush: the bytes go to NVMe, nothing dirty is left. */
	st0 = stats(e.s);
	n0 = nstats(e.s);
	rc = tier_obj_flush(e.s, o);
	ck_assert_msg(rc == 0, "flush: %d: %s", rc, tier_last_error());
	st = stats(e.s);
	n1 = nstats(e.s);
	ck_assert_uint_eq(st.level[TIER_DRAM].dirty, 0);
	if (c->nvme) {
		ck_assert_uint_ge(n1.bytes_written - n0.bytes_written, OBJ);
		ck_assert_uint_eq(st.level[TIER_DRAM].writebacks, st0.level[TIER_DRAM].writebacks + 1);
		ck_assert_uint_eq(st.level[TIER_DRAM].bytes_out, st0.level[TIER_DRAM].bytes_out + OBJ);
	}
	ck_assert_int_eq(tier_obj_flush(e.s, o), 0); /* nothing to do */
	ck_assert_int_eq(tier_store_flush(e.s), 0);
	ck_assert_uint_eq(nstats(e.s).bytes_written, n1.bytes_written);
	expect_ver(e.s, o, id, 2);
	VALID(e.s);

	if (hbm) {
		/* HBM write through the (host-readable) device pointer. */
		p = xacquire(e.s, o, TIER_HBM, TIER_ACQUIRE_READ | TIER_ACQUIRE_WRITE);
		ck_assert_ptr_nonnull(p);
		ASSERT_PAT(p, OBJ, id, 2);
		st = stats(e.s);
		ck_assert_uint_eq(st.level[TIER_HBM].objects, 1);
		ck_assert_uint_eq(st.level[TIER_DRAM].objects, 1); /* inclusion */
		ck_assert_uint_eq(st.level[TIER_HBM].pinned, OBJ);
		pat_fill(p, OBJ, id, 3);
		VALID(e.s);
		xrelease(e.s, o, TIER_HBM, true);
		st = stats(e.s);
		ck_assert_uint_eq(st.level[TIER_HBM].dirty, OBJ);
		ck_assert_uint_eq(st.level[TIER_DRAM].dirty, 0);
		VALID(e.s);
		/* A DRAM acquire sees the HBM bytes: they come down first. */
		p = xacquire(e.s, o, TIER_DRAM, TIER_ACQUIRE_READ);
		ASSERT_PAT(p, OBJ, id, 3);
		st = stats(e.s);
		ck_assert_uint_eq(st.level[TIER_HBM].dirty, 0);
		ck_assert_uint_eq(st.level[TIER_DRAM].dirty, c->nvme ? OBJ : 0);
		ck_assert_uint_ge(st.level[TIER_HBM].writebacks, 1);
		VALID(e.s);
		xrelease(e.s, o, TIER_DRAM, false);
		/* The clean HBM copy still serves reads. */
		p = xacquire(e.s, o, TIER_HBM, TIER_ACQUIRE_READ);
		ASSERT_PAT(p, OBJ, id, 3);
		xrelease(e.s, o, TIER_HBM, false);
		/* Dirty on HBM and read-pinned there: a DRAM read still gets
		 * the HBM bytes (written back under the read pin). */
		p = xacquire(e.s, o, TIER_HBM, TIER_ACQUIRE_READ | TIER_ACQUIRE_WRITE);
		pat_fill(p, OBJ, id, 4);
		xrelease(e.s, o, TIER_HBM, true);
		p = xacquire(e.s, o, TIER_HBM, TIER_ACQUIRE_READ);
		{
			void *q = xacquire(e.s, o, TIER_DRAM, TIER_ACQUIRE_READ);

			ASSERT_PAT(q, OBJ, id, 4);
			ck_assert_uint_eq(stats(e.s).level[TIER_HBM].dirty, 0);
			VALID(e.s);
			xrelease(e.s, o, TIER_DRAM, false);
		}
		ASSERT_PAT(p, OBJ, id, 4);
		xrelease(e.s, o, TIER_HBM, false);
		n0 = nstats(e.s);
		ck_assert_int_eq(tier_store_flush(e.s), 0);
		if (c->nvme)
			ck_assert_uint_ge(nstats(e.s).bytes_written - n0.bytes_written, OBJ);
		st = stats(e.s);
		ck_assert_uint_eq(st.level[TIER_HBM].dirty, 0);
		ck_assert_uint_eq(st.level[TIER_DRAM].dirty, 0);
		VALID(e.s);
	}

	if (c->nvme) {
		/* Out of DRAM (and HBM), back from NVMe. */
		uint32_t last = hbm ? 4 : 2;

		push_out(&e);
		n0 = nstats(e.s);
		expect_ver(e.s, o, id, last);
		ck_assert_uint_ge(nstats(e.s).bytes_read - n0.bytes_read, OBJ);
		/* A partial write fills first and keeps the rest. */
		{
			unsigned char *b = xbuf(OBJ), *w = xbuf(4096);

			push_out(&e);
			pat_fill(w, 4096, 99, 99);
			ck_assert_int_eq(tier_obj_write(e.s, o, 8192, 4096, w), 0);
			ck_assert_int_eq(tier_obj_read(e.s, o, 0, OBJ, b), 0);
			ck_assert_int_eq(memcmp(b + 8192, w, 4096), 0);
			{
				unsigned char *ref = xbuf(OBJ);

				pat_fill(ref, OBJ, id, last);
				ck_assert_int_eq(memcmp(b, ref, 8192), 0);
				ck_assert_int_eq(memcmp(b + 12288, ref + 12288, OBJ - 12288), 0);
				free(ref);
			}
			free(b);
			free(w);
		}
	} else {
		/* The home holds everything: creating past it is -ENOSPC. */
		struct tier_obj *x;
		int k;

		for (k = 0; k < DRAM_OBJS; k++) {
			char name[32];

			snprintf(name, sizeof(name), "more.%d", k);
			rc = tier_obj_create(e.s, name, OBJ, &x);
			if (rc)
				break;
		}
		ck_assert_msg(rc == -ENOSPC, "creating past a dram home: %d: %s", rc, tier_last_error());
		ck_assert_msg(strstr(tier_last_error(), "free"), "detail: %s", tier_last_error());
		ck_assert_int_eq(k, DRAM_OBJS - 1);
		expect_ver(e.s, o, id, hbm ? 4 : 2);
	}
	ck_assert_int_eq(tier_obj_write(e.s, o, OBJ, 1, "x"), -EINVAL);
	ck_assert_int_eq(tier_obj_read(e.s, o, 1, OBJ, (char[8]){ 0 }), -EINVAL);
	ck_assert_int_eq(tier_obj_create(e.s, "", OBJ, &(struct tier_obj *){ NULL }), -EINVAL);
	ck_assert_int_eq(tier_obj_create(e.s, "zero", 0, &(struct tier_obj *){ NULL }), -EINVAL);
	env_close(&e);
}
END_TEST

struct evict_case {
	const char *name;
	struct cfg c;
	bool schedule;          /* register the objects' order (Belady) */
};

static const struct evict_case evict_cases[] = {
	{ "lru, no hbm", { .nvme = true, .hbm = "none", .csum = true, .policy = TIER_POLICY_LRU },
	  false },
	{ "belady, unscheduled, no hbm", { .nvme = true, .hbm = "none", .csum = true }, false },
	{ "belady, scheduled, no hbm", { .nvme = true, .hbm = "none", .csum = true }, true },
	{ "lru, hbm host, O_DIRECT", { .nvme = true, .hbm = "host", .direct = true, .csum = true,
				       .policy = TIER_POLICY_LRU }, false },
	{ "belady, scheduled, hbm host", { .nvme = true, .hbm = "host" }, true },
};

/*
 * Twice as many objects as DRAM holds, each written (dirty): the evicted
 * ones are written back (NVMe bytes grow) and read back intact, twice.
 */
START_TEST(test_eviction_writeback)
{
	const struct evict_case *k = &evict_cases[_i];
	enum { N = 2 * DRAM_OBJS };
	struct tier_obj *o[N];
	struct tier_store_stats st;
	struct tier_nvme_stats n0, n1;
	struct env e;

	env_open(&e, &k->c);
	for (int i = 0; i < N; i++) {
		char name[32];

		snprintf(name, sizeof(name), "w.%d", i);
		o[i] = mkobj(&e, name, OBJ);
	}
	if (k->schedule)
		ck_assert_int_eq(tier_store_set_schedule(e.s, o, N), 0);
	ck_assert_uint_eq(stats(e.s).schedule_len, k->schedule ? N : 0);
	n0 = nstats(e.s);
	for (int i = 0; i < N; i++) {
		write_ver(e.s, o[i], (uint32_t)i, 1);
		VALID(e.s);
	}
	n1 = nstats(e.s);
	st = stats(e.s);
	ck_assert_msg(n1.bytes_written - n0.bytes_written >= (N - DRAM_OBJS) * OBJ,
		      "%s: %llu bytes written back, expected at least %llu", k->name,
		      U64(n1.bytes_written - n0.bytes_written), U64((N - DRAM_OBJS) * OBJ));
	ck_assert_uint_ge(st.level[TIER_DRAM].evictions, N - DRAM_OBJS);
	ck_assert_uint_ge(st.level[TIER_DRAM].writebacks, N - DRAM_OBJS);
	ck_assert_uint_le(st.level[TIER_DRAM].objects, DRAM_OBJS);
	ck_assert_uint_eq(st.level[TIER_DRAM].dirty, st.level[TIER_DRAM].objects * OBJ);
	/* Write-backs that made room are counted on the level and are whole objects. */
	ck_assert_uint_eq(st.level[TIER_DRAM].bytes_out, st.level[TIER_DRAM].writebacks * OBJ);
	for (int round = 0; round < 2; round++) {
		for (int i = 0; i < N; i++) {
			expect_ver(e.s, o[i], (uint32_t)i, 1);
			VALID(e.s);
		}
	}
	ck_assert_uint_gt(nstats(e.s).bytes_read, 0);
	ck_assert_int_eq(tier_store_flush(e.s), 0);
	st = stats(e.s);
	ck_assert_uint_eq(st.level[TIER_DRAM].dirty, 0);
	for (int i = 0; i < N; i++)
		expect_ver(e.s, o[i], (uint32_t)i, 1);
	ck_assert_uint_le(e.hk.peak[TIER_DRAM], st.level[TIER_DRAM].capacity);
	env_close(&e);
}
END_TEST

static const struct cfg hbm_cfgs[] = {
	{ .name = "nvme home", .nvme = true, .hbm = "host", .csum = true, .policy = TIER_POLICY_LRU },
	{ .name = "dram home", .nvme = false, .hbm = "host", .policy = TIER_POLICY_LRU },
};

/*
 * HBM under pressure: twice as many objects as HBM holds written on HBM;
 * the dirty HBM victims are written back into DRAM and every object reads
 * back right on HBM and on DRAM.
 */
START_TEST(test_hbm_eviction)
{
	const struct cfg *c = &hbm_cfgs[_i];
	enum { N = 2 * HBM_OBJS };
	struct tier_obj *o[N];
	struct tier_store_stats st;
	struct env e;

	env_open(&e, c);
	ck_assert_uint_eq(stats(e.s).level[TIER_HBM].capacity, HBM_BYTES);
	for (int i = 0; i < N; i++) {
		char name[32];
		void *p;

		snprintf(name, sizeof(name), "h.%d", i);
		o[i] = mkobj(&e, name, OBJ);
		p = xacquire(e.s, o[i], TIER_HBM, TIER_ACQUIRE_WRITE | TIER_ACQUIRE_DISCARD);
		pat_fill(p, OBJ, (uint32_t)i, 1);
		xrelease(e.s, o[i], TIER_HBM, true);
		VALID(e.s);
	}
	st = stats(e.s);
	ck_assert_uint_ge(st.level[TIER_HBM].evictions, N - HBM_OBJS);
	ck_assert_uint_ge(st.level[TIER_HBM].writebacks, N - HBM_OBJS);
	ck_assert_uint_le(st.level[TIER_HBM].objects, HBM_OBJS);
	ck_assert_uint_ge(st.level[TIER_DRAM].objects, st.level[TIER_HBM].objects);
	for (int i = 0; i < N; i++) {
		void *p = xacquire(e.s, o[i], TIER_HBM, TIER_ACQUIRE_READ);

		ASSERT_PAT(p, OBJ, (uint32_t)i, 1);
		xrelease(e.s, o[i], TIER_HBM, false);
		VALID(e.s);
	}
	for (int i = 0; i < N; i++) {
		expect_ver(e.s, o[i], (uint32_t)i, 1);
		VALID(e.s);
	}
	ck_assert_int_eq(tier_store_flush(e.s), 0);
	st = stats(e.s);
	ck_assert_uint_eq(st.level[TIER_HBM].dirty, 0);
	ck_assert_uint_eq(st.level[TIER_DRAM].dirty, 0);
	env_close(&e);
}
END_TEST

/*
 * Inclusion: an object on HBM holds a DRAM slot, which DRAM pressure
 * cannot take while the HBM copy is pinned; unpinned and clean, the HBM
 * copy leaves with its DRAM slot.  Also on the null backend (no bytes).
 */
START_TEST(test_hbm_inclusion)
{
	static const struct cfg cs[] = {
		{ .name = "host", .nvme = true, .hbm = "host", .policy = TIER_POLICY_LRU },
		{ .name = "null", .nvme = true, .hbm = "null", .policy = TIER_POLICY_LRU,
		  .hbm_bytes = 3 * OBJ },
	};
	const struct cfg *c = &cs[_i];
	struct tier_store_stats st;
	struct tier_obj *o;
	struct env e;
	void *p;

	env_open(&e, c);
	o = mkobj(&e, "incl", OBJ);
	if (!strcmp(c->hbm, "null"))
		ck_assert_uint_eq(stats(e.s).level[TIER_HBM].capacity, 3 * OBJ);
	write_ver(e.s, o, 1, 1);
	p = xacquire(e.s, o, TIER_HBM, TIER_ACQUIRE_READ);
	if (!strcmp(c->hbm, "null"))
		ck_assert_ptr_null(p);
	else
		ASSERT_PAT(p, OBJ, 1, 1);
	st = stats(e.s);
	ck_assert_uint_eq(st.level[TIER_HBM].objects, 1);
	ck_assert_uint_eq(st.level[TIER_DRAM].objects, 1);
	ck_assert_uint_eq(st.level[TIER_DRAM].used, OBJ);
	ck_assert_str_eq(st.level[TIER_HBM].backend, c->hbm);
	ck_assert_str_eq(st.level[TIER_DRAM].backend, "dram");
	/* DRAM pressure while pinned on HBM: the DRAM slot stays. */
	for (int round = 0; round < 2; round++) {
		for (int i = 0; i < DRAM_OBJS; i++) {
			char name[32];

			if (i >= e.nfill) {
				snprintf(name, sizeof(name), "filler.%d", i);
				e.fill[i] = mkobj(&e, name, OBJ);
				e.nfill++;
			}
			p = xacquire(e.s, e.fill[i], TIER_DRAM, TIER_ACQUIRE_READ);
			xrelease(e.s, e.fill[i], TIER_DRAM, false);
			VALID(e.s);
		}
	}
	st = stats(e.s);
	ck_assert_uint_eq(st.level[TIER_HBM].objects, 1);
	ck_assert_uint_eq(st.level[TIER_DRAM].objects, DRAM_OBJS);
	xrelease(e.s, o, TIER_HBM, false);
	/* Unpinned and clean: DRAM pressure takes both copies. */
	push_out(&e);
	st = stats(e.s);
	ck_assert_uint_eq(st.level[TIER_HBM].objects, 0);
	ck_assert_uint_eq(st.level[TIER_HBM].used, 0);
	expect_ver(e.s, o, 1, 1);
	env_close(&e);
}
END_TEST

/* A DRAM write drops the clean HBM copy above it: HBM then reads the new
 * bytes, never the stale ones. */
START_TEST(test_hbm_stale_copy_dropped)
{
	static const struct cfg c = { .nvme = true, .hbm = "host", .policy = TIER_POLICY_LRU };
	struct tier_obj *o;
	struct env e;
	void *p;

	env_open(&e, &c);
	o = mkobj(&e, "stale", OBJ);
	write_ver(e.s, o, 3, 1);
	p = xacquire(e.s, o, TIER_HBM, TIER_ACQUIRE_READ);
	ASSERT_PAT(p, OBJ, 3, 1);
	xrelease(e.s, o, TIER_HBM, false);
	ck_assert_uint_eq(stats(e.s).level[TIER_HBM].objects, 1);
	write_ver(e.s, o, 3, 2);              /* full: TIER_ACQUIRE_DISCARD on DRAM */
	ck_assert_uint_eq(stats(e.s).level[TIER_HBM].objects, 0);
	VALID(e.s);
	p = xacquire(e.s, o, TIER_HBM, TIER_ACQUIRE_READ);
	ASSERT_PAT(p, OBJ, 3, 2);
	xrelease(e.s, o, TIER_HBM, false);
	/* And through a DRAM write pin (not discard). */
	p = xacquire(e.s, o, TIER_DRAM, TIER_ACQUIRE_READ | TIER_ACQUIRE_WRITE);
	ck_assert_uint_eq(stats(e.s).level[TIER_HBM].objects, 0);
	VALID(e.s);
	pat_fill(p, OBJ, 3, 3);
	xrelease(e.s, o, TIER_DRAM, true);
	p = xacquire(e.s, o, TIER_HBM, TIER_ACQUIRE_READ);
	ASSERT_PAT(p, OBJ, 3, 3);
	xrelease(e.s, o, TIER_HBM, false);
	env_close(&e);
}
END_TEST

/* TIER_ACQUIRE_DISCARD: the slot is not filled (no NVMe read, no host-to-device
 * copy); without it, it is. */
START_TEST(test_discard_no_fill)
{
	static const struct cfg c = { .nvme = true, .hbm = "host", .csum = true,
				      .policy = TIER_POLICY_LRU };
	struct tier_store_stats st0, st1;
	struct tier_nvme_stats n0;
	struct tier_obj *o;
	struct env e;
	void *p;

	env_open(&e, &c);
	o = mkobj(&e, "discard", OBJ);
	write_ver(e.s, o, 4, 1);
	ck_assert_int_eq(tier_obj_flush(e.s, o), 0);
	push_out(&e);

	/* DRAM, absent: no NVMe read. */
	n0 = nstats(e.s);
	p = xacquire(e.s, o, TIER_DRAM, TIER_ACQUIRE_WRITE | TIER_ACQUIRE_DISCARD);
	ck_assert_uint_eq(nstats(e.s).bytes_read, n0.bytes_read);
	ck_assert_uint_eq(stats(e.s).level[TIER_DRAM].dirty, OBJ);
	VALID(e.s);
	pat_fill(p, OBJ, 4, 2);
	xrelease(e.s, o, TIER_DRAM, true);
	expect_ver(e.s, o, 4, 2);
	ck_assert_uint_eq(nstats(e.s).bytes_read, n0.bytes_read);

	/* The control: flushed, pushed out, a read-write acquire fills. */
	ck_assert_int_eq(tier_obj_flush(e.s, o), 0);
	push_out(&e);
	n0 = nstats(e.s);
	p = xacquire(e.s, o, TIER_DRAM, TIER_ACQUIRE_READ | TIER_ACQUIRE_WRITE);
	ck_assert_uint_ge(nstats(e.s).bytes_read - n0.bytes_read, OBJ);
	ASSERT_PAT(p, OBJ, 4, 2);
	xrelease(e.s, o, TIER_DRAM, false);

	/* HBM, DRAM resident: no host-to-device copy. */
	st0 = stats(e.s);
	p = xacquire(e.s, o, TIER_HBM, TIER_ACQUIRE_WRITE | TIER_ACQUIRE_DISCARD);
	st1 = stats(e.s);
	ck_assert_uint_eq(st1.level[TIER_HBM].bytes_in, st0.level[TIER_HBM].bytes_in);
	ck_assert_uint_eq(st1.level[TIER_HBM].dirty, OBJ);
	pat_fill(p, OBJ, 4, 3);
	VALID(e.s);
	xrelease(e.s, o, TIER_HBM, true);
	expect_ver(e.s, o, 4, 3);
	env_close(&e);
}
END_TEST

/* Slots are whole 4 KiB blocks, exact size (the buddy allocator trims the
 * tail of a 4-block block for a 3-block object). */
START_TEST(test_slot_rounding)
{
	static const struct cfg c = { .nvme = true, .hbm = "host", .policy = TIER_POLICY_LRU };
	static const struct { uint64_t size, slot; } sz[] = {
		{ 4096, 4096 }, { 12288, 12288 }, { 4097, 8192 }, { 65536, 65536 }, { 100, 4096 },
	};
	struct env e;

	env_open(&e, &c);
	for (size_t i = 0; i < ARRAY_SIZE(sz); i++) {
		char name[32];
		struct tier_obj *o;
		struct tier_store_stats st;
		void *p;

		snprintf(name, sizeof(name), "odd.%zu", i);
		o = mkobj(&e, name, sz[i].size);
		p = xacquire(e.s, o, TIER_HBM, TIER_ACQUIRE_READ | TIER_ACQUIRE_WRITE);
		memset(p, (int)i + 1, sz[i].size);
		xrelease(e.s, o, TIER_HBM, true);
		st = stats(e.s);
		ck_assert_uint_eq(st.level[TIER_DRAM].used, sz[i].slot);
		ck_assert_uint_eq(st.level[TIER_HBM].used, sz[i].slot);
		VALID(e.s);
		{
			unsigned char *b = xbuf(sz[i].size);

			ck_assert_int_eq(tier_obj_read(e.s, o, 0, sz[i].size, b), 0);
			for (uint64_t j = 0; j < sz[i].size; j++)
				ck_assert_uint_eq(b[j], i + 1);
			free(b);
		}
		ck_assert_int_eq(tier_obj_destroy(e.s, o), 0);
		st = stats(e.s);
		ck_assert_uint_eq(st.level[TIER_DRAM].used, 0);
		ck_assert_uint_eq(st.level[TIER_HBM].used, 0);
		VALID(e.s);
	}
	env_close(&e);
}
END_TEST

/* ------------------------------------------------------------ pins */

enum pin_op { OP_ACQUIRE, OP_RELEASE, OP_DESTROY, OP_FLUSH, OP_PREFETCH };

struct pin_case {
	const char *name;
	int pin_level;          /* -1: no pin first */
	unsigned pin_mode;
	enum pin_op op;
	int level;
	unsigned mode;
	bool dirty;
	int want;
};

#define R TIER_ACQUIRE_READ
#define W TIER_ACQUIRE_WRITE
#define D TIER_ACQUIRE_DISCARD

static const struct pin_case pin_cases[] = {
	{ "release without a pin on dram", -1, 0, OP_RELEASE, TIER_DRAM, 0, false, -EINVAL },
	{ "release dirty without a pin", -1, 0, OP_RELEASE, TIER_DRAM, 0, true, -EINVAL },
	{ "release without a pin on hbm", -1, 0, OP_RELEASE, TIER_HBM, 0, false, -EINVAL },
	{ "release dirty on a read pin", TIER_DRAM, R, OP_RELEASE, TIER_DRAM, 0, true, -EINVAL },
	{ "release dirty on an hbm read pin", TIER_HBM, R, OP_RELEASE, TIER_HBM, 0, true, -EINVAL },
	{ "release on the other level", TIER_DRAM, R, OP_RELEASE, TIER_HBM, 0, false, -EINVAL },
	{ "write on dram while read-pinned on hbm", TIER_HBM, R, OP_ACQUIRE, TIER_DRAM, R | W, false,
	  -EBUSY },
	{ "discard write on dram while read-pinned on hbm", TIER_HBM, R, OP_ACQUIRE, TIER_DRAM,
	  W | D, false, -EBUSY },
	{ "read on dram while write-pinned on hbm", TIER_HBM, R | W, OP_ACQUIRE, TIER_DRAM, R, false,
	  -EBUSY },
	{ "read on hbm while write-pinned on dram", TIER_DRAM, R | W, OP_ACQUIRE, TIER_HBM, R, false,
	  -EBUSY },
	{ "write on hbm while read-pinned on dram", TIER_DRAM, R, OP_ACQUIRE, TIER_HBM, R | W, false,
	  -EBUSY },
	{ "write on hbm while write-pinned on dram", TIER_DRAM, W | D, OP_ACQUIRE, TIER_HBM, R | W,
	  false, -EBUSY },
	{ "read on hbm while read-pinned on dram", TIER_DRAM, R, OP_ACQUIRE, TIER_HBM, R, false, 0 },
	{ "read on dram while read-pinned on hbm", TIER_HBM, R, OP_ACQUIRE, TIER_DRAM, R, false, 0 },
	{ "second read pin on dram", TIER_DRAM, R, OP_ACQUIRE, TIER_DRAM, R, false, 0 },
	{ "second write pin on one level", TIER_DRAM, R | W, OP_ACQUIRE, TIER_DRAM, R | W, false, 0 },
	{ "second write pin on hbm", TIER_HBM, R | W, OP_ACQUIRE, TIER_HBM, R | W, false, 0 },
	{ "destroy while read-pinned on dram", TIER_DRAM, R, OP_DESTROY, 0, 0, false, -EBUSY },
	{ "destroy while write-pinned on hbm", TIER_HBM, R | W, OP_DESTROY, 0, 0, false, -EBUSY },
	{ "flush while write-pinned on dram", TIER_DRAM, R | W, OP_FLUSH, 0, 0, false, -EBUSY },
	{ "flush while write-pinned on hbm", TIER_HBM, R | W, OP_FLUSH, 0, 0, false, -EBUSY },
	{ "flush while read-pinned on dram", TIER_DRAM, R, OP_FLUSH, 0, 0, false, 0 },
	{ "flush while read-pinned on hbm", TIER_HBM, R, OP_FLUSH, 0, 0, false, 0 },
	{ "acquire on nvme", -1, 0, OP_ACQUIRE, TIER_NVME, R, false, -EINVAL },
	{ "acquire on level 7", -1, 0, OP_ACQUIRE, 7, R, false, -EINVAL },
	{ "acquire with no mode", -1, 0, OP_ACQUIRE, TIER_DRAM, 0, false, -EINVAL },
	{ "discard without write", -1, 0, OP_ACQUIRE, TIER_DRAM, R | D, false, -EINVAL },
	{ "an unknown mode bit", -1, 0, OP_ACQUIRE, TIER_DRAM, R | 0x100, false, -EINVAL },
	{ "release on nvme", -1, 0, OP_RELEASE, TIER_NVME, 0, false, -EINVAL },
	{ "prefetch to hbm while write-pinned on dram (skipped)", TIER_DRAM, R | W, OP_PREFETCH,
	  TIER_HBM, 0, false, 0 },
	{ "prefetch to dram while write-pinned on hbm (skipped)", TIER_HBM, R | W, OP_PREFETCH,
	  TIER_DRAM, 0, false, 0 },
	{ "prefetch to hbm while read-pinned on dram", TIER_DRAM, R, OP_PREFETCH, TIER_HBM, 0, false,
	  0 },
	{ "prefetch to nvme", -1, 0, OP_PREFETCH, TIER_NVME, 0, false, -EINVAL },
};

START_TEST(test_pin_rules)
{
	static const struct cfg c = { .nvme = true, .hbm = "host", .csum = true,
				      .policy = TIER_POLICY_LRU };
	const struct pin_case *k = &pin_cases[_i];
	struct tier_obj *o;
	struct env e;
	void *p0 = NULL, *p1 = NULL;
	int rc = 0;

	env_open(&e, &c);
	o = mkobj(&e, "pinned", OBJ);
	write_ver(e.s, o, 5, 1);                 /* dirty on DRAM */
	if (k->pin_level >= 0) {
		p0 = xacquire(e.s, o, (enum tier_level)k->pin_level, k->pin_mode);
		if (!(k->pin_mode & D))
			ASSERT_PAT(p0, OBJ, 5, 1);
		VALID(e.s);
	}
	ts_err_clear();
	switch (k->op) {
	case OP_ACQUIRE: {
		double t0 = now_s();

		p1 = NULL;
		rc = tier_obj_acquire(e.s, o, (enum tier_level)k->level, k->mode, &p1);
		ck_assert_msg(now_s() - t0 < 5, "%s: took %.1f s", k->name, now_s() - t0);
		break;
	}
	case OP_RELEASE:
		rc = tier_obj_release(e.s, o, (enum tier_level)k->level, k->dirty);
		break;
	case OP_DESTROY:
		rc = tier_obj_destroy(e.s, o);
		break;
	case OP_FLUSH:
		rc = tier_obj_flush(e.s, o);
		break;
	case OP_PREFETCH:
		rc = tier_obj_prefetch(e.s, o, (enum tier_level)k->level);
		store_quiesce(e.s);
		break;
	}
	ck_assert_msg(rc == k->want, "%s: %d (%s), expected %d: %s", k->name, rc, tier_strerror(rc),
		      k->want, tier_last_error());
	if (rc == -EBUSY || (rc == -EINVAL && k->op == OP_RELEASE && k->level != TIER_NVME))
		ck_assert_msg(strstr(tier_last_error(), "'pinned'"), "%s: detail: %s", k->name,
			      tier_last_error());
	if (rc)
		ck_assert_msg(*tier_last_error(), "%s: no detail", k->name);
	VALID(e.s);
	if (k->op == OP_ACQUIRE && rc == 0) {
		ASSERT_PAT(p1, OBJ, 5, 1);
		if (k->pin_level == k->level)
			ck_assert_ptr_eq(p1, p0);   /* one level's pins share the bytes */
		xrelease(e.s, o, (enum tier_level)k->level, false);
	}
	if (k->op == OP_FLUSH && rc == 0)
		ck_assert_uint_eq(stats(e.s).level[TIER_DRAM].dirty, 0);
	if (k->pin_level >= 0)
		xrelease(e.s, o, (enum tier_level)k->pin_level, false);
	/* A refused call changed nothing. */
	VALID(e.s);
	expect_ver(e.s, o, 5, 1);
	ck_assert_int_eq(tier_obj_destroy(e.s, o), 0);
	ck_assert_ptr_null(tier_obj_find(e.s, "pinned"));
	env_close(&e);
}
END_TEST

#undef R
#undef W
#undef D

/* No HBM tier: -ENODEV for every HBM call; unknown backends and a host
 * backend without a capacity are refused at open. */
START_TEST(test_no_hbm)
{
	static const struct cfg c = { .nvme = true, .hbm = "none" };
	struct tier_store_params p = { .size = sizeof(struct tier_store_params), .dram_capacity = DRAM_OBJS * OBJ, .flags = TIER_STORE_SCRATCH };
	struct tier_store *s2 = NULL;
	struct tier_obj *o;
	struct env e;
	void *ptr = NULL;
	struct tier_ticket *tk = (struct tier_ticket *)&ptr;

	env_open(&e, &c);
	o = mkobj(&e, "nohbm", OBJ);
	ck_assert(!tier_store_has_level(e.s, TIER_HBM));
	ck_assert(!stats(e.s).level[TIER_HBM].present);
	ck_assert_int_eq(tier_obj_acquire(e.s, o, TIER_HBM, TIER_ACQUIRE_READ, &ptr), -ENODEV);
	ck_assert_msg(strstr(tier_last_error(), "hbm"), "%s", tier_last_error());
	ck_assert_int_eq(tier_obj_acquire_async(e.s, o, TIER_HBM, TIER_ACQUIRE_READ, &ptr, &tk), -ENODEV);
	ck_assert_ptr_null(tk);
	ck_assert_int_eq(tier_obj_prefetch(e.s, o, TIER_HBM), -ENODEV);
	{
		int rc = tier_obj_release(e.s, o, TIER_HBM, false);

		ck_assert_msg(rc == -ENODEV || rc == -EINVAL, "release on hbm: %d", rc);
	}
	VALID(e.s);
	env_close(&e);

	e.m = make_manifest(&c);
	p.hbm_backend = "no-such-backend";
	p.hbm_capacity = HBM_BYTES;
	ck_assert_int_eq(tier_store_open(e.m, &p, &s2), -ENODEV);
	ck_assert_ptr_null(s2);
	ck_assert_msg(strstr(tier_last_error(), "no-such-backend"), "%s", tier_last_error());
	p.hbm_backend = "host";
	p.hbm_capacity = 0;
	ck_assert_int_eq(tier_store_open(e.m, &p, &s2), -EINVAL);
	ck_assert_ptr_null(s2);
	p.hbm_capacity = HBM_BYTES;
	p.policy = (enum tier_policy)7;
	ck_assert_int_eq(tier_store_open(e.m, &p, &s2), -EINVAL);
	p.policy = TIER_POLICY_LRU;
	p.flags = 0x80;
	ck_assert_int_eq(tier_store_open(e.m, &p, &s2), -EINVAL);
	p.flags = 0;
	/* the size field: not initialised, or of another header */
	p.size = 0;
	ck_assert_int_eq(tier_store_open(e.m, &p, &s2), -EINVAL);
	ck_assert_ptr_null(s2);
	ck_assert_msg(strstr(tier_last_error(), "tier_store_params") &&
		      strstr(tier_last_error(), "not initialised"), "%s", tier_last_error());
	p.size = (uint32_t)sizeof(p) - 8;
	ck_assert_int_eq(tier_store_open(e.m, &p, &s2), -EINVAL);
	ck_assert_msg(strstr(tier_last_error(), "another tierstore.h"), "%s", tier_last_error());
	p.size = (uint32_t)sizeof(p);
	ck_assert_int_eq(tier_store_open(NULL, &p, &s2), -EINVAL);
	ck_assert_int_eq(tier_store_close(NULL), 0);
	tier_manifest_free(e.m);
}
END_TEST

/* Objects larger than a level: -E2BIG at once, for acquires, reads,
 * writes and prefetches. */
START_TEST(test_e2big)
{
	static const struct cfg c = { .nvme = true, .hbm = "host", .policy = TIER_POLICY_LRU };
	struct tier_obj *big, *mid, *small;
	struct env e;
	void *p = NULL;
	unsigned char b[16];
	int rc;

	env_open(&e, &c);
	big = mkobj(&e, "big", 2 * DRAM_OBJS * OBJ);          /* > DRAM */
	mid = mkobj(&e, "mid", 2 * HBM_BYTES);                /* > HBM, fits DRAM */
	small = mkobj(&e, "small", OBJ);
	write_ver(e.s, small, 9, 1);
	rc = tier_obj_acquire(e.s, big, TIER_DRAM, TIER_ACQUIRE_READ, &p);
	ck_assert_int_eq(rc, -E2BIG);
	ck_assert_msg(strstr(tier_last_error(), "'big'") && strstr(tier_last_error(), "dram"), "%s",
		      tier_last_error());
	ck_assert_int_eq(tier_obj_acquire(e.s, big, TIER_DRAM, TIER_ACQUIRE_WRITE | TIER_ACQUIRE_DISCARD, &p), -E2BIG);
	ck_assert_int_eq(tier_obj_acquire(e.s, big, TIER_HBM, TIER_ACQUIRE_READ, &p), -E2BIG);
	ck_assert_int_eq(tier_obj_read(e.s, big, 0, sizeof(b), b), -E2BIG);
	ck_assert_int_eq(tier_obj_write(e.s, big, 0, sizeof(b), b), -E2BIG);
	ck_assert_int_eq(tier_obj_prefetch(e.s, big, TIER_DRAM), -E2BIG);
	ck_assert_int_eq(tier_obj_prefetch(e.s, mid, TIER_HBM), -E2BIG);
	VALID(e.s);
	rc = tier_obj_acquire(e.s, mid, TIER_HBM, TIER_ACQUIRE_READ, &p);
	ck_assert_int_eq(rc, -E2BIG);
	ck_assert_msg(strstr(tier_last_error(), "'mid'") && strstr(tier_last_error(), "hbm"), "%s",
		      tier_last_error());
	VALID(e.s);
	ck_assert_uint_eq(stats(e.s).level[TIER_HBM].used, 0);
	/* Nothing was lost making (no) room. */
	expect_ver(e.s, small, 9, 1);
	/* mid fits DRAM. */
	p = xacquire(e.s, mid, TIER_DRAM, TIER_ACQUIRE_READ);
	ASSERT_PAT(p, 2 * HBM_BYTES, 0, 0);
	xrelease(e.s, mid, TIER_DRAM, false);
	expect_ver(e.s, small, 9, 1);
	env_close(&e);
}
END_TEST

/* Every slot of a level pinned: another acquire fails at once with
 * -ENOMEM naming the level and the counts, and succeeds after a release. */
START_TEST(test_enomem_all_pinned)
{
	static const struct cfg c = { .nvme = true, .hbm = "host", .policy = TIER_POLICY_LRU };
	enum tier_level l = _i ? TIER_HBM : TIER_DRAM;
	int n = l == TIER_DRAM ? DRAM_OBJS : HBM_OBJS;
	struct tier_obj *o[DRAM_OBJS + 1];
	struct tier_store_stats st;
	struct tier_ticket *tk;
	char want[64];
	struct env e;
	void *p;
	double t0;
	int rc;

	env_open(&e, &c);
	for (int i = 0; i <= n; i++) {
		char name[32];

		snprintf(name, sizeof(name), "p.%d", i);
		o[i] = mkobj(&e, name, OBJ);
		write_ver(e.s, o[i], (uint32_t)i, 1);
	}
	for (int i = 0; i < n; i++)
		xacquire(e.s, o[i], l, TIER_ACQUIRE_READ);
	st = stats(e.s);
	ck_assert_uint_eq(st.level[l].pinned, (uint64_t)n * OBJ);
	VALID(e.s);
	t0 = now_s();
	rc = tier_obj_acquire(e.s, o[n], l, TIER_ACQUIRE_READ, &p);
	ck_assert_msg(rc == -ENOMEM, "acquire with every %s slot pinned: %d: %s", tier_level_name(l),
		      rc, tier_last_error());
	ck_assert_msg(now_s() - t0 < 5, "-ENOMEM took %.1f s", now_s() - t0);
	snprintf(want, sizeof(want), "%d of %d", n, n);
	ck_assert_msg(strstr(tier_last_error(), tier_level_name(l)) &&
		      strstr(tier_last_error(), "'p.") && strstr(tier_last_error(), want),
		      "detail: %s", tier_last_error());
	/* The same through a ticket, and for a write. */
	ck_assert_int_eq(tier_obj_acquire_async(e.s, o[n], l, TIER_ACQUIRE_READ | TIER_ACQUIRE_WRITE, &p, &tk), 0);
	ck_assert_int_eq(tier_ticket_wait(tk), -ENOMEM);
	/* A prefetch is skipped quietly. */
	ck_assert_int_eq(tier_obj_prefetch(e.s, o[n], l), 0);
	store_quiesce(e.s);
	st = stats(e.s);
	ck_assert_uint_ge(st.level[l].prefetch_skipped, 1);
	ck_assert_uint_eq(st.level[l].pinned, (uint64_t)n * OBJ);
	VALID(e.s);
	xrelease(e.s, o[0], l, false);
	p = xacquire(e.s, o[n], l, TIER_ACQUIRE_READ);
	ASSERT_PAT(p, OBJ, (uint32_t)n, 1);
	xrelease(e.s, o[n], l, false);
	for (int i = 1; i < n; i++)
		xrelease(e.s, o[i], l, false);
	for (int i = 0; i <= n; i++)
		expect_ver(e.s, o[i], (uint32_t)i, 1);
	env_close(&e);
}
END_TEST

/*
 * REGRESSION (store.c evictable/make_room): a DRAM slot whose HBM copy is dirty
 * is never a victim, and make_room does not write the HBM copy back to
 * free it, so -ENOMEM comes with nothing pinned there.  Here DRAM holds 8:
 * 4 objects pinned on DRAM, 4 unpinned objects dirty on HBM.  A ninth
 * object needs a DRAM slot; the store could write an HBM copy down and
 * evict it (the header: -ENOMEM only "when every slot the level could
 * free is pinned"), but fails with "4 of 8 resident objects ... are
 * pinned".
 */
START_TEST(test_enomem_not_for_dirty_hbm)
{
	static const struct cfg c = { .nvme = true, .hbm = "host", .policy = TIER_POLICY_LRU };
	struct tier_obj *h[HBM_OBJS], *d[DRAM_OBJS - HBM_OBJS], *x;
	struct env e;
	void *p = NULL;
	int rc;

	env_open(&e, &c);
	for (int i = 0; i < HBM_OBJS; i++) {
		char name[32];

		snprintf(name, sizeof(name), "hbm-dirty.%d", i);
		h[i] = mkobj(&e, name, OBJ);
		p = xacquire(e.s, h[i], TIER_HBM, TIER_ACQUIRE_WRITE | TIER_ACQUIRE_DISCARD);
		pat_fill(p, OBJ, (uint32_t)i, 1);
		xrelease(e.s, h[i], TIER_HBM, true);
	}
	for (int i = 0; i < DRAM_OBJS - HBM_OBJS; i++) {
		char name[32];

		snprintf(name, sizeof(name), "dram-pinned.%d", i);
		d[i] = mkobj(&e, name, OBJ);
		xacquire(e.s, d[i], TIER_DRAM, TIER_ACQUIRE_READ);
	}
	x = mkobj(&e, "ninth", OBJ);
	VALID(e.s);
	rc = tier_obj_acquire(e.s, x, TIER_DRAM, TIER_ACQUIRE_READ, &p);
	ck_assert_msg(rc == 0,
		      "acquire with 4 of 8 dram slots unpinned (their hbm copies dirty): %d: %s", rc,
		      tier_last_error());
	ASSERT_PAT(p, OBJ, 0, 0);
	xrelease(e.s, x, TIER_DRAM, false);
	for (int i = 0; i < DRAM_OBJS - HBM_OBJS; i++)
		xrelease(e.s, d[i], TIER_DRAM, false);
	for (int i = 0; i < HBM_OBJS; i++)
		expect_ver(e.s, h[i], (uint32_t)i, 1);
	env_close(&e);
}
END_TEST

/*
 * REGRESSION (store.c tier_store_flush/obj_dirty): "Objects pinned for write are
 * skipped and reported (-EBUSY)".  tier_store_flush only queues objects whose
 * state is dirty, so an object pinned for write whose bytes are not yet
 * released dirty (the writer is mid-update) is neither flushed nor
 * reported: tier_store_flush returns 0 while tier_obj_flush on the same object
 * returns -EBUSY.
 */
START_TEST(test_flush_all_reports_write_pin)
{
	static const struct cfg c = { .nvme = true, .hbm = "host", .policy = TIER_POLICY_LRU };
	struct tier_obj *o, *q;
	struct env e;
	int rc;

	env_open(&e, &c);
	o = mkobj(&e, "writing", OBJ);
	q = mkobj(&e, "other", OBJ);
	write_ver(e.s, q, 2, 1);
	ck_assert_int_eq(tier_obj_flush(e.s, q), 0);
	for (int l = TIER_HBM; l <= TIER_DRAM; l++) {
		void *p;

		write_ver(e.s, q, 2, 2 + (uint32_t)l);
		p = xacquire(e.s, o, (enum tier_level)l, TIER_ACQUIRE_READ | TIER_ACQUIRE_WRITE); /* clean, write-pinned */
		ck_assert_int_eq(tier_obj_flush(e.s, o), -EBUSY);
		rc = tier_store_flush(e.s);
		ck_assert_msg(rc == -EBUSY, "tier_store_flush with '%s' pinned for write on %s: %d: %s",
			      tier_obj_name(o), tier_level_name((enum tier_level)l), rc,
			      tier_last_error());
		ck_assert_msg(strstr(tier_last_error(), "'writing'"), "%s", tier_last_error());
		/* The rest was flushed. */
		ck_assert_uint_eq(stats(e.s).level[TIER_DRAM].dirty, 0);
		pat_fill(p, OBJ, 1, 1);
		xrelease(e.s, o, (enum tier_level)l, true);
		ck_assert_int_eq(tier_store_flush(e.s), 0);
		VALID(e.s);
	}
	env_close(&e);
}
END_TEST

/* ------------------------------------------------------------ faults */

struct fill_fault {
	const char *name;
	enum ts_fault_site site;
	enum tier_level level;  /* the level whose fill fails */
	enum tier_level acquire; /* the level acquired */
	bool csum;
	int want;
	const char *detail;     /* in tier_last_error() */
};

static const struct fill_fault fill_faults[] = {
	{ "nvme_io_err on a dram fill", TIER_FAULT_NVME_IO_ERR, TIER_DRAM, TIER_DRAM, true, -EIO,
	  "nvme" },
	{ "store_io on a dram fill", TIER_FAULT_STORE_IO, TIER_DRAM, TIER_DRAM, true, -EIO,
	  "store_io" },
	{ "nvme_bitflip on a dram fill (crc32c)", TIER_FAULT_NVME_BITFLIP, TIER_DRAM, TIER_DRAM, true,
	  -EBADMSG, "checksum" },
	{ "store_io on an hbm fill", TIER_FAULT_STORE_IO, TIER_HBM, TIER_HBM, false, -EIO,
	  "store_io" },
	{ "hbm_copy on an hbm fill", TIER_FAULT_HBM_COPY, TIER_HBM, TIER_HBM, false, -EIO, "hbm_copy" },
	{ "nvme_io_err under an hbm acquire (its dram fill)", TIER_FAULT_NVME_IO_ERR, TIER_DRAM,
	  TIER_HBM, false, -EIO, "nvme" },
};

/*
 * A fill fails: the acquire gets the error with the object named, the
 * level counts one error, the slot is freed, and the object is still
 * valid below: disarmed, the same acquire brings the right bytes.
 */
START_TEST(test_fill_error)
{
	NEED_FAULTS();
	const struct fill_fault *k = &fill_faults[_i];
	struct cfg c = { .nvme = true, .hbm = "host", .csum = k->csum, .policy = TIER_POLICY_LRU };
	enum tier_level acq = k->acquire;
	struct tier_store_stats st0, st1;
	struct tier_obj *o;
	struct env e;
	void *p = NULL;
	int rc;

	env_open(&e, &c);
	o = mkobj(&e, "fragile", OBJ);
	write_ver(e.s, o, 6, 1);
	ck_assert_int_eq(tier_obj_flush(e.s, o), 0);
	if (k->level == TIER_DRAM)
		push_out(&e);                 /* the fill reads NVMe */
	else
		expect_ver(e.s, o, 6, 1);     /* resident on DRAM, absent on HBM */
	st0 = stats(e.s);
	hook_watch(&e.hk, o);
	ck_assert_int_eq(ts_fault_arm(k->site, 1, TIER_FAULT_PERSISTENT, -EIO), 0);
	ts_err_clear();
	rc = tier_obj_acquire(e.s, o, acq, TIER_ACQUIRE_READ, &p);
	ts_fault_disarm(k->site);
	ck_assert_uint_ge(ts_fault_fired(k->site), 1);
	ck_assert_msg(rc == k->want, "%s: %d (%s), expected %d: %s", k->name, rc, tier_strerror(rc),
		      k->want, tier_last_error());
	ck_assert_msg(strstr(tier_last_error(), "'fragile'") && strstr(tier_last_error(), "fill") &&
		      strstr(tier_last_error(), k->detail),
		      "%s: detail: %s", k->name, tier_last_error());
	st1 = stats(e.s);
	ck_assert_msg(st1.level[k->level].errors == st0.level[k->level].errors + 1,
		      "%s: %s errors %llu -> %llu", k->name, tier_level_name(k->level),
		      U64(st0.level[k->level].errors), U64(st1.level[k->level].errors));
	/* The slot was taken for the fill and freed when it failed. */
	ck_assert_uint_eq(hook_watch_count(&e.hk, STORE_EV_FILL_START, k->level), 1);
	ck_assert_uint_eq(hook_watch_count(&e.hk, STORE_EV_FILL_DONE, k->level), 0);
	ck_assert_uint_eq(hook_watch_count(&e.hk, STORE_EV_DROP, k->level), 1);
	ck_assert_uint_eq(st1.level[k->level].used, st1.level[k->level].objects * OBJ);
	ck_assert_uint_le(st1.level[k->level].used, st0.level[k->level].used);
	ck_assert_uint_eq(st1.level[acq].pinned, 0);
	ck_assert_uint_eq(st1.level[TIER_HBM].objects, k->level == TIER_HBM ? 0 : st0.level[TIER_HBM].objects);
	VALID(e.s);
	/* Disarmed: the same acquire works and brings the right bytes. */
	p = xacquire(e.s, o, acq, TIER_ACQUIRE_READ);
	ASSERT_PAT(p, OBJ, 6, 1);
	xrelease(e.s, o, acq, false);
	VALID(e.s);
	/* An async acquire gets the error through its ticket. */
	push_out(&e);
	if (k->level == TIER_HBM)
		expect_ver(e.s, o, 6, 1);
	{
		struct tier_ticket *tk = NULL;

		struct tier_ticket *tk2 = NULL;
		void *p2 = NULL;
		int rc2;

		/* Two acquires wait on one failing fill: both get the error. */
		ck_assert_int_eq(ts_fault_arm(k->site, 1, TIER_FAULT_PERSISTENT, -EIO), 0);
		rc = tier_obj_acquire_async(e.s, o, acq, TIER_ACQUIRE_READ, &p, &tk);
		ck_assert_int_eq(rc, 0);
		rc = tier_obj_acquire_async(e.s, o, acq, TIER_ACQUIRE_READ, &p2, &tk2);
		ck_assert_int_eq(rc, 0);
		rc2 = tier_ticket_wait(tk2);
		rc = tier_ticket_wait(tk);
		ts_fault_disarm(k->site);
		ck_assert_msg(rc == k->want, "%s (async): %d: %s", k->name, rc, tier_last_error());
		ck_assert_msg(strstr(tier_last_error(), "'fragile'"), "%s", tier_last_error());
		ck_assert_msg(rc2 == k->want, "%s (second async): %d", k->name, rc2);
		ck_assert_uint_eq(stats(e.s).level[acq].pinned, 0);
	}
	VALID(e.s);
	expect_ver(e.s, o, 6, 1);
	env_close(&e);
}
END_TEST

struct flush_fault {
	const char *name;
	enum ts_fault_site site;
	bool all;               /* tier_store_flush, else tier_obj_flush */
};

static const struct flush_fault flush_faults[] = {
	{ "nvme_io_err, tier_obj_flush", TIER_FAULT_NVME_IO_ERR, false },
	{ "nvme_io_err, tier_store_flush", TIER_FAULT_NVME_IO_ERR, true },
	{ "store_io, tier_obj_flush", TIER_FAULT_STORE_IO, false },
	{ "store_io, tier_store_flush", TIER_FAULT_STORE_IO, true },
};

/*
 * A DRAM write-back fails: the flush returns the error naming the object,
 * DRAM counts one error, the bytes stay dirty and readable, and the flush
 * succeeds once disarmed; then the home holds them.
 */
START_TEST(test_flush_error)
{
	NEED_FAULTS();
	const struct flush_fault *k = &flush_faults[_i];
	static const struct cfg c = { .nvme = true, .hbm = "host", .csum = true,
				      .policy = TIER_POLICY_LRU };
	struct tier_store_stats st0, st1;
	struct tier_nvme_stats n0;
	struct tier_obj *o;
	struct env e;
	int rc;

	env_open(&e, &c);
	o = mkobj(&e, "precious", OBJ);
	write_ver(e.s, o, 8, 1);
	ck_assert_int_eq(tier_obj_flush(e.s, o), 0);
	write_ver(e.s, o, 8, 2);                         /* dirty: version 2 */
	st0 = stats(e.s);
	ck_assert_int_eq(ts_fault_arm(k->site, 1, TIER_FAULT_PERSISTENT, -EIO), 0);
	rc = k->all ? tier_store_flush(e.s) : tier_obj_flush(e.s, o);
	ts_fault_disarm(k->site);
	ck_assert_msg(rc == -EIO, "%s: %d: %s", k->name, rc, tier_last_error());
	ck_assert_msg(strstr(tier_last_error(), "'precious'") &&
		      strstr(tier_last_error(), "write-back"), "%s: detail: %s", k->name,
		      tier_last_error());
	st1 = stats(e.s);
	ck_assert_uint_eq(st1.level[TIER_DRAM].errors, st0.level[TIER_DRAM].errors + 1);
	ck_assert_uint_eq(st1.level[TIER_DRAM].dirty, OBJ);
	VALID(e.s);
	expect_ver(e.s, o, 8, 2);                         /* not lost */
	n0 = nstats(e.s);
	rc = k->all ? tier_store_flush(e.s) : tier_obj_flush(e.s, o);
	ck_assert_msg(rc == 0, "%s: disarmed: %d: %s", k->name, rc, tier_last_error());
	ck_assert_uint_ge(nstats(e.s).bytes_written - n0.bytes_written, OBJ);
	ck_assert_uint_eq(stats(e.s).level[TIER_DRAM].dirty, 0);
	push_out(&e);
	expect_ver(e.s, o, 8, 2);                         /* from NVMe */
	env_close(&e);
}
END_TEST

/*
 * An HBM write-back (HBM -> DRAM) fails under a DRAM acquire (coherence),
 * a flush and an HBM eviction: each caller gets the error naming the
 * object, HBM counts the errors, the HBM bytes stay dirty, and disarmed
 * they come down intact.
 */
START_TEST(test_hbm_writeback_error)
{
	NEED_FAULTS();
	static const enum ts_fault_site sites[] = { TIER_FAULT_HBM_COPY, TIER_FAULT_STORE_IO };
	static const struct cfg c = { .nvme = true, .hbm = "host", .policy = TIER_POLICY_LRU };
	enum ts_fault_site site = sites[_i];
	struct tier_store_stats st0, st1;
	struct tier_obj *o, *more[HBM_OBJS];
	struct env e;
	void *p = NULL;
	int rc;

	env_open(&e, &c);
	o = mkobj(&e, "gpu-state", OBJ);
	p = xacquire(e.s, o, TIER_HBM, TIER_ACQUIRE_WRITE | TIER_ACQUIRE_DISCARD);
	pat_fill(p, OBJ, 10, 1);
	xrelease(e.s, o, TIER_HBM, true);
	VALID(e.s);

	/* 1. A DRAM acquire needs the HBM bytes first. */
	st0 = stats(e.s);
	ck_assert_int_eq(ts_fault_arm(site, 1, TIER_FAULT_PERSISTENT, -EIO), 0);
	rc = tier_obj_acquire(e.s, o, TIER_DRAM, TIER_ACQUIRE_READ, &p);
	ts_fault_disarm(site);
	ck_assert_msg(rc == -EIO, "dram acquire over dirty hbm: %d: %s", rc, tier_last_error());
	ck_assert_msg(strstr(tier_last_error(), "'gpu-state'"), "%s", tier_last_error());
	st1 = stats(e.s);
	ck_assert_uint_eq(st1.level[TIER_HBM].errors, st0.level[TIER_HBM].errors + 1);
	ck_assert_uint_eq(st1.level[TIER_HBM].dirty, OBJ);
	ck_assert_uint_eq(st1.level[TIER_DRAM].pinned, 0);
	VALID(e.s);

	/* 2. A flush. */
	ck_assert_int_eq(ts_fault_arm(site, 1, TIER_FAULT_PERSISTENT, -EIO), 0);
	rc = tier_obj_flush(e.s, o);
	ts_fault_disarm(site);
	ck_assert_msg(rc == -EIO, "flush: %d: %s", rc, tier_last_error());
	ck_assert_msg(strstr(tier_last_error(), "'gpu-state'"), "%s", tier_last_error());
	ck_assert_uint_eq(stats(e.s).level[TIER_HBM].dirty, OBJ);
	VALID(e.s);

	/* 3. An HBM eviction: the acquire that needed the room fails. */
	for (int i = 0; i < HBM_OBJS; i++) {
		char name[32];

		snprintf(name, sizeof(name), "more.%d", i);
		more[i] = mkobj(&e, name, OBJ);
	}
	for (int i = 0; i < HBM_OBJS - 1; i++) {
		p = xacquire(e.s, more[i], TIER_HBM, TIER_ACQUIRE_READ);
		xrelease(e.s, more[i], TIER_HBM, false);
	}
	/* HBM is full; "gpu-state" is the least recently used; the new
	 * object is on DRAM already, so the only transfer is the victim's. */
	expect_ver(e.s, more[HBM_OBJS - 1], 0, 0);
	ck_assert_uint_eq(stats(e.s).level[TIER_HBM].objects, HBM_OBJS);
	st0 = stats(e.s);
	ck_assert_int_eq(ts_fault_arm(site, 1, TIER_FAULT_PERSISTENT, -EIO), 0);
	rc = tier_obj_acquire(e.s, more[HBM_OBJS - 1], TIER_HBM, TIER_ACQUIRE_READ, &p);
	ts_fault_disarm(site);
	ck_assert_msg(rc == -EIO, "hbm acquire needing an eviction: %d: %s", rc, tier_last_error());
	ck_assert_msg(strstr(tier_last_error(), "'gpu-state'") &&
		      strstr(tier_last_error(), "write-back"), "%s", tier_last_error());
	st1 = stats(e.s);
	ck_assert_uint_eq(st1.level[TIER_HBM].errors, st0.level[TIER_HBM].errors + 1);
	ck_assert_uint_eq(st1.level[TIER_HBM].dirty, OBJ);
	VALID(e.s);

	/* Disarmed: the bytes come down intact. */
	expect_ver(e.s, o, 10, 1);
	ck_assert_uint_eq(stats(e.s).level[TIER_HBM].dirty, 0);
	ck_assert_int_eq(tier_store_flush(e.s), 0);
	push_out(&e);
	expect_ver(e.s, o, 10, 1);
	env_close(&e);
}
END_TEST

/*
 * A DRAM eviction's write-back fails: the acquire that needed the room
 * fails with the error (naming the victim), DRAM counts it, and every
 * dirty object still reads back; disarmed, the acquire succeeds.
 */
START_TEST(test_eviction_writeback_error)
{
	NEED_FAULTS();
	static const enum ts_fault_site sites[] = { TIER_FAULT_NVME_IO_ERR, TIER_FAULT_STORE_IO };
	static const struct cfg c = { .nvme = true, .hbm = "none", .csum = true,
				      .policy = TIER_POLICY_LRU };
	enum ts_fault_site site = sites[_i];
	struct tier_obj *o[DRAM_OBJS + 1];
	struct tier_store_stats st0, st1;
	struct env e;
	void *p = NULL;
	int rc;

	env_open(&e, &c);
	for (int i = 0; i <= DRAM_OBJS; i++) {
		char name[32];

		snprintf(name, sizeof(name), "d.%d", i);
		o[i] = mkobj(&e, name, OBJ);
	}
	for (int i = 0; i < DRAM_OBJS; i++)
		write_ver(e.s, o[i], (uint32_t)i, 1);   /* DRAM full of dirty objects */
	st0 = stats(e.s);
	ck_assert_uint_eq(st0.level[TIER_DRAM].dirty, DRAM_OBJS * OBJ);
	ck_assert_int_eq(ts_fault_arm(site, 1, TIER_FAULT_PERSISTENT, -EIO), 0);
	rc = tier_obj_acquire(e.s, o[DRAM_OBJS], TIER_DRAM, TIER_ACQUIRE_READ, &p);
	ts_fault_disarm(site);
	ck_assert_msg(rc == -EIO, "acquire needing an eviction: %d: %s", rc, tier_last_error());
	ck_assert_msg(strstr(tier_last_error(), "'d.0'") && strstr(tier_last_error(), "write-back"),
		      "detail: %s", tier_last_error());
	st1 = stats(e.s);
	ck_assert_uint_eq(st1.level[TIER_DRAM].errors, st0.level[TIER_DRAM].errors + 1);
	ck_assert_uint_eq(st1.level[TIER_DRAM].dirty, DRAM_OBJS * OBJ);
	ck_assert_uint_eq(st1.level[TIER_DRAM].pinned, 0);
	VALID(e.s);
	/* Nothing lost; disarmed, the acquire goes through. */
	for (int i = 0; i < DRAM_OBJS; i++)
		expect_ver(e.s, o[i], (uint32_t)i, 1);
	p = xacquire(e.s, o[DRAM_OBJS], TIER_DRAM, TIER_ACQUIRE_READ);
	ASSERT_PAT(p, OBJ, DRAM_OBJS, 0);
	xrelease(e.s, o[DRAM_OBJS], TIER_DRAM, false);
	VALID(e.s);
	for (int i = 0; i < DRAM_OBJS; i++)
		expect_ver(e.s, o[i], (uint32_t)i, 1);
	ck_assert_int_eq(tier_store_flush(e.s), 0);
	env_close(&e);
}
END_TEST

/*
 * "If an object under eviction is acquired again before its write-back
 * completes, the eviction is cancelled and the object stays": DRAM full of
 * dirty objects, the write-backs slowed (nvme_delay); an acquire needing
 * room starts evicting the least recently used, which is then acquired
 * for read (at once: its bytes are valid) and for write (after the
 * write-back).  The first acquire still gets its room elsewhere.
 */
START_TEST(test_eviction_cancelled)
{
	NEED_FAULTS();
	static const struct cfg c = { .nvme = true, .hbm = "none", .policy = TIER_POLICY_LRU };
	unsigned mode = _i ? TIER_ACQUIRE_READ | TIER_ACQUIRE_WRITE : TIER_ACQUIRE_READ;
	struct tier_obj *o[DRAM_OBJS + 1];
	struct tier_ticket *tk;
	struct tier_store_stats st;
	struct env e;
	void *p = NULL, *q;
	int rc;

	env_open(&e, &c);
	for (int i = 0; i <= DRAM_OBJS; i++) {
		char name[32];

		snprintf(name, sizeof(name), "e.%d", i);
		o[i] = mkobj(&e, name, OBJ);
	}
	for (int i = 0; i < DRAM_OBJS; i++)
		write_ver(e.s, o[i], (uint32_t)i, 1);
	hook_watch(&e.hk, o[0]);
	ck_assert_int_eq(ts_fault_arm(TIER_FAULT_NVME_DELAY, 1, TIER_FAULT_PERSISTENT, -EIO), 0);
	ck_assert_int_eq(tier_obj_acquire_async(e.s, o[DRAM_OBJS], TIER_DRAM, TIER_ACQUIRE_READ, &p, &tk), 0);
	ck_assert_uint_eq(hook_watch_count(&e.hk, STORE_EV_EVICT, TIER_DRAM), 1);
	ck_assert_uint_eq(hook_watch_count(&e.hk, STORE_EV_FLUSH_START, TIER_DRAM), 1);
	/* e.0 is being written back to be evicted: acquire it again. */
	q = xacquire(e.s, o[0], TIER_DRAM, mode);
	ASSERT_PAT(q, OBJ, 0, 1);
	VALID(e.s);
	if (mode & TIER_ACQUIRE_WRITE) {
		/* Granted only after the write-back: nothing writes flushing bytes. */
		ck_assert_uint_eq(hook_watch_count(&e.hk, STORE_EV_FLUSH_DONE, TIER_DRAM), 1);
		pat_fill(q, OBJ, 0, 2);
	}
	rc = tier_ticket_wait(tk);
	ts_fault_disarm(TIER_FAULT_NVME_DELAY);
	ck_assert_msg(rc == 0, "the acquire that needed room: %d: %s", rc, tier_last_error());
	ASSERT_PAT(p, OBJ, DRAM_OBJS, 0);
	store_quiesce(e.s);
	ck_assert_uint_eq(hook_watch_count(&e.hk, STORE_EV_DROP, TIER_DRAM), 0); /* e.0 stayed */
	st = stats(e.s);
	ck_assert_uint_eq(st.level[TIER_DRAM].pinned, 2 * OBJ);
	VALID(e.s);
	xrelease(e.s, o[0], TIER_DRAM, (mode & TIER_ACQUIRE_WRITE) != 0);
	xrelease(e.s, o[DRAM_OBJS], TIER_DRAM, false);
	for (int i = 0; i < DRAM_OBJS; i++)
		expect_ver(e.s, o[i], (uint32_t)i, i == 0 && (mode & TIER_ACQUIRE_WRITE) ? 2 : 1);
	ck_assert_int_eq(tier_store_flush(e.s), 0);
	push_out(&e);
	expect_ver(e.s, o[0], 0, (mode & TIER_ACQUIRE_WRITE) ? 2 : 1);
	env_close(&e);
}
END_TEST

/*
 * REGRESSION (store.c rq_finish + xfer_done): a failed fill started by a
 * prefetch is counted twice in the level's errors: once by xfer_done (a
 * failed fill) and once more when rq_finish fails the waiting prefetch
 * request.  "errors: failed fills and write-backs" - one fill failed.
 */
START_TEST(test_prefetch_fill_error_counted_once)
{
	NEED_FAULTS();
	static const struct cfg c = { .nvme = true, .hbm = "none", .csum = true,
				      .policy = TIER_POLICY_LRU };
	struct tier_store_stats st0, st1;
	struct tier_obj *o;
	struct env e;

	env_open(&e, &c);
	o = mkobj(&e, "prefetched", OBJ);
	write_ver(e.s, o, 11, 1);
	ck_assert_int_eq(tier_obj_flush(e.s, o), 0);
	push_out(&e);
	st0 = stats(e.s);
	ck_assert_int_eq(ts_fault_arm(TIER_FAULT_NVME_IO_ERR, 1, TIER_FAULT_PERSISTENT, -EIO), 0);
	ck_assert_int_eq(tier_obj_prefetch(e.s, o, TIER_DRAM), 0);
	store_quiesce(e.s);
	ts_fault_disarm(TIER_FAULT_NVME_IO_ERR);
	ck_assert_uint_ge(ts_fault_fired(TIER_FAULT_NVME_IO_ERR), 1);
	st1 = stats(e.s);
	ck_assert_uint_eq(st1.level[TIER_DRAM].prefetches, st0.level[TIER_DRAM].prefetches + 1);
	ck_assert_msg(st1.level[TIER_DRAM].errors == st0.level[TIER_DRAM].errors + 1,
		      "one failed fill counted as %llu errors",
		      U64(st1.level[TIER_DRAM].errors - st0.level[TIER_DRAM].errors));
	VALID(e.s);
	expect_ver(e.s, o, 11, 1);
	env_close(&e);
}
END_TEST

/* ------------------------------------------------------------ prefetch */

struct prefetch_case {
	const char *name;
	enum tier_level level;
	enum tier_policy policy;
};

static const struct prefetch_case prefetch_cases[] = {
	{ "dram, lru", TIER_DRAM, TIER_POLICY_LRU },
	{ "dram, belady (scheduled next)", TIER_DRAM, TIER_POLICY_BELADY },
	{ "hbm, lru", TIER_HBM, TIER_POLICY_LRU },
	{ "hbm, belady (scheduled next)", TIER_HBM, TIER_POLICY_BELADY },
};

/* A prefetch brings the object up without pinning it; the acquire after
 * it has landed is a hit and reads nothing from NVMe. */
START_TEST(test_prefetch_hit)
{
	const struct prefetch_case *k = &prefetch_cases[_i];
	struct cfg c = { .nvme = true, .hbm = "host", .csum = true, .policy = k->policy };
	struct tier_store_stats st0, st1, st2;
	struct tier_nvme_stats n1;
	struct tier_obj *o;
	struct env e;
	void *p;

	env_open(&e, &c);
	o = mkobj(&e, "soon", OBJ);
	write_ver(e.s, o, 12, 1);
	ck_assert_int_eq(tier_store_flush(e.s), 0);
	push_out(&e);
	if (k->policy == TIER_POLICY_BELADY) {
		/* o is used right after the fillers: needed before any of them. */
		struct tier_obj *sched[DRAM_OBJS + 1];

		for (int i = 0; i < DRAM_OBJS; i++)
			sched[i] = e.fill[i];
		sched[DRAM_OBJS] = o;
		ck_assert_int_eq(tier_store_set_schedule(e.s, sched, DRAM_OBJS + 1), 0);
		push_out(&e); /* the cursor now sits on the last filler */
	}
	st0 = stats(e.s);
	ck_assert_int_eq(tier_obj_prefetch(e.s, o, k->level), 0);
	store_quiesce(e.s);
	st1 = stats(e.s);
	n1 = nstats(e.s);
	ck_assert_uint_eq(st1.level[k->level].prefetches, st0.level[k->level].prefetches + 1);
	ck_assert_uint_eq(st1.level[k->level].prefetch_skipped, st0.level[k->level].prefetch_skipped);
	ck_assert_uint_eq(st1.level[k->level].pinned, 0);
	ck_assert_uint_ge(st1.level[k->level].bytes_in - st0.level[k->level].bytes_in, OBJ);
	VALID(e.s);
	p = xacquire(e.s, o, k->level, TIER_ACQUIRE_READ);
	st2 = stats(e.s);
	ck_assert_msg(st2.level[k->level].hits == st1.level[k->level].hits + 1 &&
		      st2.level[k->level].misses == st1.level[k->level].misses,
		      "%s: after a prefetch: hits %llu -> %llu, misses %llu -> %llu", k->name,
		      U64(st1.level[k->level].hits), U64(st2.level[k->level].hits),
		      U64(st1.level[k->level].misses), U64(st2.level[k->level].misses));
	ck_assert_uint_eq(nstats(e.s).bytes_read, n1.bytes_read);
	ASSERT_PAT(p, OBJ, 12, 1);
	xrelease(e.s, o, k->level, false);
	/* Prefetching what is resident does nothing. */
	ck_assert_int_eq(tier_obj_prefetch(e.s, o, k->level), 0);
	store_quiesce(e.s);
	ck_assert_uint_eq(stats(e.s).level[k->level].prefetches, st1.level[k->level].prefetches);
	VALID(e.s);
	env_close(&e);
}
END_TEST

struct waiter {
	struct tier_ticket *tk;
	atomic_int done;
	int rc;
};

static void *waiter_main(void *arg)
{
	struct waiter *w = arg;

	w->rc = tier_ticket_wait(w->tk);
	atomic_store(&w->done, 1);
	return NULL;
}

/*
 * REGRESSION (store.c make_room + step_prefetch; the stress test's hangs and
 * stack overflows): a prefetch holds no "want" on its slot, so an acquire
 * waiting for room (make_room returning 0 on a slot "still filling")
 * evicts the prefetched object as soon as its fill lands - before the
 * prefetch request behind it in the list sees it - even though evicting
 * it cannot give the acquire its slot; the prefetch then fills it again,
 * and the acquire waits on that fill.  Two prefetches behind one such
 * acquire alternate for ever: the acquire never completes and the NVMe
 * tier reads the same two objects in a loop (with never-written objects
 * the fills are synchronous memsets and the loop recurses
 * xfer_done -> unlock_and_issue -> xfer_issue -> xfer_done until the
 * stack overflows).  Here DRAM holds 2 MiB with 1 MiB pinned, so the
 * 2 MiB acquire must end with -ENOMEM; W's fill is made slow (nvme_delay)
 * so that the acquire waits on it while X and Z are prefetched.
 */
START_TEST(test_prefetch_livelock)
{
	NEED_FAULTS();
	static const struct cfg c = { .nvme = true, .hbm = "none", .policy = TIER_POLICY_LRU,
				      .dram = 2 * MiB };
	struct tier_obj *w, *x, *z, *pin, *y, *f;
	struct waiter wt = { 0 };
	pthread_t th;
	struct env e;
	void *p = NULL;
	double t0;
	uint64_t fills = 0;

	env_open(&e, &c);
	w = mkobj(&e, "w", 256 * KiB);
	x = mkobj(&e, "x", 256 * KiB);
	z = mkobj(&e, "z", 256 * KiB);
	write_ver(e.s, w, 1, 1);
	write_ver(e.s, x, 2, 1);
	write_ver(e.s, z, 3, 1);
	ck_assert_int_eq(tier_store_flush(e.s), 0);
	pin = mkobj(&e, "pin", 1 * MiB);
	f = mkobj(&e, "f", 1 * MiB);
	y = mkobj(&e, "y", 2 * MiB);
	xacquire(e.s, pin, TIER_DRAM, TIER_ACQUIRE_READ);
	p = xacquire(e.s, f, TIER_DRAM, TIER_ACQUIRE_READ);     /* pushes w, x, z out */
	xrelease(e.s, f, TIER_DRAM, false);
	ck_assert_int_eq(tier_obj_destroy(e.s, f), 0);  /* DRAM: pin, 1 MiB free */
	ck_assert_uint_eq(stats(e.s).level[TIER_DRAM].used, 1 * MiB);
	VALID(e.s);

	hook_watch(&e.hk, x);
	ck_assert_int_eq(ts_fault_arm(TIER_FAULT_NVME_DELAY, 1, 1, -EIO), 0);
	ck_assert_int_eq(tier_obj_prefetch(e.s, w, TIER_DRAM), 0);          /* slow fill */
	ck_assert_int_eq(tier_obj_acquire_async(e.s, y, TIER_DRAM, TIER_ACQUIRE_READ, &p, &wt.tk), 0);
	ck_assert_int_eq(tier_obj_prefetch(e.s, x, TIER_DRAM), 0);
	ck_assert_int_eq(tier_obj_prefetch(e.s, z, TIER_DRAM), 0);
	ck_assert_int_eq(pthread_create(&th, NULL, waiter_main, &wt), 0);
	t0 = now_s();
	while (!atomic_load(&wt.done) && now_s() - t0 < 10) {
		fills = hook_watch_count(&e.hk, STORE_EV_FILL_START, TIER_DRAM);
		ck_assert_msg(fills < 100,
			      "'x' was filled %llu times in %.3f s while a 2 MiB acquire (1 MiB pinned) "
			      "waited for room: the acquire evicts each prefetched object as it lands "
			      "and the prefetch fills it again", U64(fills), now_s() - t0);
		usleep(1000);
	}
	ck_assert_msg(atomic_load(&wt.done), "the acquire did not complete in 10 s (x filled %llu times)",
		      U64(hook_watch_count(&e.hk, STORE_EV_FILL_START, TIER_DRAM)));
	pthread_join(th, NULL);
	ck_assert_msg(wt.rc == -ENOMEM, "2 MiB acquire with 1 MiB of 2 pinned: %d: %s", wt.rc,
		      tier_last_error());
	store_quiesce(e.s);
	ck_assert_uint_le(hook_watch_count(&e.hk, STORE_EV_FILL_START, TIER_DRAM), 2);
	VALID(e.s);
	xrelease(e.s, pin, TIER_DRAM, false);
	expect_ver(e.s, w, 1, 1);
	expect_ver(e.s, x, 2, 1);
	expect_ver(e.s, z, 3, 1);
	env_close(&e);
}
END_TEST

/* ------------------------------------------------------------ async */

/* Many acquires in flight at once from one thread: each pointer is valid
 * after its ticket; more than the level holds gives -ENOMEM for the rest,
 * never a hang. */
START_TEST(test_async_many)
{
	static const struct cfg c = { .nvme = true, .hbm = "host", .csum = true,
				      .policy = TIER_POLICY_LRU };
	enum { N = 2 * DRAM_OBJS };
	struct tier_obj *o[N];
	struct tier_ticket *tk[N];
	void *p[N];
	int rc[N], ok = 0, nomem = 0;
	struct env e;

	env_open(&e, &c);
	for (int i = 0; i < N; i++) {
		char name[32];

		snprintf(name, sizeof(name), "a.%d", i);
		o[i] = mkobj(&e, name, OBJ);
		write_ver(e.s, o[i], (uint32_t)i, 1);
	}
	ck_assert_int_eq(tier_store_flush(e.s), 0);
	push_out(&e);
	/* DRAM_OBJS reads in flight, filled from NVMe. */
	for (int i = 0; i < DRAM_OBJS; i++) {
		p[i] = NULL;
		ck_assert_int_eq(tier_obj_acquire_async(e.s, o[i], TIER_DRAM, TIER_ACQUIRE_READ, &p[i], &tk[i]), 0);
		ck_assert_ptr_nonnull(tk[i]);
	}
	for (int i = DRAM_OBJS - 1; i >= 0; i--) {
		int r = tier_ticket_wait(tk[i]);

		ck_assert_msg(r == 0, "ticket %d: %d: %s", i, r, tier_last_error());
		ck_assert_ptr_nonnull(p[i]);
		ASSERT_PAT(p[i], OBJ, (uint32_t)i, 1);
	}
	VALID(e.s);
	for (int i = 0; i < DRAM_OBJS; i++)
		xrelease(e.s, o[i], TIER_DRAM, false);
	/* All N at once, on DRAM: DRAM_OBJS succeed at most, the rest -ENOMEM. */
	push_out(&e);
	for (int i = 0; i < N; i++) {
		p[i] = NULL;
		ck_assert_int_eq(tier_obj_acquire_async(e.s, o[i], TIER_DRAM, TIER_ACQUIRE_READ, &p[i], &tk[i]), 0);
	}
	for (int i = 0; i < N; i++) {
		rc[i] = tier_ticket_wait(tk[i]);
		if (rc[i] == 0) {
			ASSERT_PAT(p[i], OBJ, (uint32_t)i, 1);
			ok++;
		} else {
			ck_assert_msg(rc[i] == -ENOMEM, "ticket %d: %d: %s", i, rc[i], tier_last_error());
			nomem++;
		}
	}
	ck_assert_int_le(ok, DRAM_OBJS);
	ck_assert_int_ge(ok, 1);
	VALID(e.s);
	for (int i = 0; i < N; i++)
		if (rc[i] == 0)
			xrelease(e.s, o[i], TIER_DRAM, false);
	/* The same object many times, on HBM, for read. */
	for (int i = 0; i < 8; i++)
		ck_assert_int_eq(tier_obj_acquire_async(e.s, o[0], TIER_HBM, TIER_ACQUIRE_READ, &p[i], &tk[i]), 0);
	for (int i = 0; i < 8; i++) {
		ck_assert_int_eq(tier_ticket_wait(tk[i]), 0);
		ck_assert_ptr_eq(p[i], p[0]);
	}
	ASSERT_PAT(p[0], OBJ, 0, 1);
	ck_assert_uint_eq(stats(e.s).level[TIER_HBM].pinned, OBJ);
	for (int i = 0; i < 8; i++)
		xrelease(e.s, o[0], TIER_HBM, false);
	ck_assert_int_eq(tier_obj_release(e.s, o[0], TIER_HBM, false), -EINVAL);
	VALID(e.s);
	for (int i = 0; i < N; i++)
		expect_ver(e.s, o[i], (uint32_t)i, 1);
	env_close(&e);
}
END_TEST

/* ------------------------------------------------------------ lifetime */

/* Destroy frees the object's slots on every level; the name is free again
 * and the new object reads as zeros. */
START_TEST(test_destroy)
{
	const struct cfg *c = &hbm_cfgs[_i];
	struct tier_store_stats st;
	struct tier_obj *o, *o2;
	struct env e;
	void *p;

	env_open(&e, c);
	o = mkobj(&e, "doomed", OBJ);
	write_ver(e.s, o, 13, 1);
	ck_assert_int_eq(tier_store_flush(e.s), 0);
	p = xacquire(e.s, o, TIER_HBM, TIER_ACQUIRE_READ | TIER_ACQUIRE_WRITE);
	pat_fill(p, OBJ, 13, 2);
	xrelease(e.s, o, TIER_HBM, true);        /* dirty on HBM */
	st = stats(e.s);
	ck_assert_uint_eq(st.level[TIER_HBM].used, OBJ);
	ck_assert_uint_eq(st.level[TIER_DRAM].used, OBJ);
	ck_assert_int_eq(tier_store_set_schedule(e.s, &o, 1), 0);
	ck_assert_int_eq(tier_obj_destroy(e.s, o), 0);
	st = stats(e.s);
	ck_assert_uint_eq(st.objects, 0);
	ck_assert_uint_eq(st.schedule_len, 0);
	for (int l = TIER_HBM; l <= TIER_DRAM; l++) {
		ck_assert_msg(st.level[l].used == 0 && st.level[l].objects == 0 &&
			      st.level[l].dirty == 0, "%s after destroy: used %llu, objects %llu",
			      tier_level_name(l), U64(st.level[l].used), U64(st.level[l].objects));
	}
	ck_assert_ptr_null(tier_obj_find(e.s, "doomed"));
	VALID(e.s);
	o2 = mkobj(&e, "doomed", OBJ);
	expect_ver(e.s, o2, 13, 0);
	p = xacquire(e.s, o2, TIER_HBM, TIER_ACQUIRE_READ);
	ASSERT_PAT(p, OBJ, 13, 0);
	xrelease(e.s, o2, TIER_HBM, false);
	ck_assert_int_eq(tier_obj_destroy(e.s, o2), 0);
	/* Destroy of an object evicted to NVMe, and one never touched. */
	if (c->nvme) {
		o = mkobj(&e, "cold", OBJ);
		write_ver(e.s, o, 14, 1);
		push_out(&e);
		ck_assert_int_eq(tier_obj_destroy(e.s, o), 0);
		o = mkobj(&e, "cold", OBJ);
		expect_ver(e.s, o, 14, 0);
		ck_assert_int_eq(tier_obj_destroy(e.s, o), 0);
	}
	o = mkobj(&e, "untouched", OBJ);
	ck_assert_int_eq(tier_obj_destroy(e.s, o), 0);
	VALID(e.s);
	env_close(&e);
}
END_TEST

/*
 * An object its owner holds (store_obj_set_user: an optimizer's shard,
 * issue 41) is refused by tier_obj_destroy: -EBUSY naming it, and nothing
 * changes (its slots, dirty bytes, place in the schedule, contents); once
 * the owner lets it go (user NULL) destroy frees it.  On an NVMe home and
 * a DRAM home.
 */
START_TEST(test_destroy_owned)
{
	const struct cfg *c = &hbm_cfgs[_i];
	struct tier_store_stats st0, st;
	struct tier_obj *o;
	struct env e;
	int owner, rc;
	void *p;

	env_open(&e, c);
	o = mkobj(&e, "owned", OBJ);
	write_ver(e.s, o, 21, 1);
	p = xacquire(e.s, o, TIER_HBM, TIER_ACQUIRE_READ | TIER_ACQUIRE_WRITE);
	pat_fill(p, OBJ, 21, 2);
	xrelease(e.s, o, TIER_HBM, true);        /* dirty on HBM */
	ck_assert_int_eq(tier_store_set_schedule(e.s, &o, 1), 0);
	store_obj_set_user(o, &owner);
	st0 = stats(e.s);
	rc = tier_obj_destroy(e.s, o);
	ck_assert_msg(rc == -EBUSY, "destroy of an owned object: %d (%s), want -EBUSY", rc,
		      tier_last_error());
	ck_assert_msg(strstr(tier_last_error(), "'owned'") &&
		      strstr(tier_last_error(), "tier_optim_destroy"),
		      "the detail '%s' does not name 'owned' and tier_optim_destroy",
		      tier_last_error());
	st = stats(e.s);
	ck_assert_uint_eq(st.objects, st0.objects);
	ck_assert_uint_eq(st.schedule_len, st0.schedule_len);
	for (int l = TIER_HBM; l <= TIER_DRAM; l++) {
		ck_assert_uint_eq(st.level[l].used, st0.level[l].used);
		ck_assert_uint_eq(st.level[l].dirty, st0.level[l].dirty);
	}
	ck_assert_ptr_eq(tier_obj_find(e.s, "owned"), o);
	ck_assert_ptr_eq(store_obj_user(o), &owner);
	VALID(e.s);
	ck_assert_int_eq(tier_store_set_schedule(e.s, &o, 1), 0); /* still the store's */
	expect_ver(e.s, o, 21, 2);
	store_obj_set_user(o, NULL);
	ck_assert_int_eq(tier_obj_destroy(e.s, o), 0);
	ck_assert_ptr_null(tier_obj_find(e.s, "owned"));
	ck_assert_uint_eq(stats(e.s).objects, 0);
	VALID(e.s);
	env_close(&e);
}
END_TEST

/*
 * Destroy while the object's transfers are in flight: an NVMe fill
 * (slowed by nvme_delay), an HBM fill (a paced host link), a write-back
 * started by another thread's flush.  Destroy waits for them, frees every
 * slot, and the name can be used again.
 */
struct flusher {
	struct tier_store *s;
	struct tier_obj *o;
	int rc;
};

static void *flusher_main(void *arg)
{
	struct flusher *f = arg;

	f->rc = tier_obj_flush(f->s, f->o);
	return NULL;
}

START_TEST(test_destroy_in_flight)
{
	NEED_FAULTS();
	static const struct cfg c = { .nvme = true, .hbm = "host", .policy = TIER_POLICY_LRU,
				      .hbm_bw = 25e6 /* 512 KiB in ~20 ms */ };
	struct tier_store_stats st;
	struct tier_obj *o;
	struct flusher fl;
	pthread_t th;
	struct env e;

	env_open(&e, &c);
	/* 1. An NVMe fill in flight. */
	o = mkobj(&e, "moving", OBJ);
	write_ver(e.s, o, 1, 1);
	ck_assert_int_eq(tier_obj_flush(e.s, o), 0);
	push_out(&e);
	ck_assert_int_eq(ts_fault_arm(TIER_FAULT_NVME_DELAY, 1, TIER_FAULT_PERSISTENT, -EIO), 0);
	ck_assert_int_eq(tier_obj_prefetch(e.s, o, TIER_DRAM), 0);
	ck_assert_int_eq(tier_obj_destroy(e.s, o), 0);
	ts_fault_disarm(TIER_FAULT_NVME_DELAY);
	st = stats(e.s);
	ck_assert_uint_eq(st.level[TIER_DRAM].used, st.level[TIER_DRAM].objects * OBJ);
	ck_assert_uint_le(st.level[TIER_DRAM].objects, DRAM_OBJS - 1); /* a filler made room */
	ck_assert_ptr_null(tier_obj_find(e.s, "moving"));
	VALID(e.s);
	store_quiesce(e.s);

	/* 2. An HBM fill in flight (paced). */
	o = mkobj(&e, "moving", OBJ);
	expect_ver(e.s, o, 1, 0);
	ck_assert_int_eq(tier_obj_prefetch(e.s, o, TIER_HBM), 0);
	ck_assert_int_eq(tier_obj_destroy(e.s, o), 0);
	st = stats(e.s);
	ck_assert_uint_eq(st.level[TIER_HBM].used, 0);
	ck_assert_uint_eq(st.level[TIER_HBM].objects, 0);
	VALID(e.s);

	/* 3. An HBM write-back in flight (paced), started by a DRAM read. */
	o = mkobj(&e, "moving", OBJ);
	{
		void *p = xacquire(e.s, o, TIER_HBM, TIER_ACQUIRE_WRITE | TIER_ACQUIRE_DISCARD);

		pat_fill(p, OBJ, 1, 2);
		xrelease(e.s, o, TIER_HBM, true);
	}
	fl = (struct flusher){ .s = e.s, .o = o };
	ck_assert_int_eq(pthread_create(&th, NULL, flusher_main, &fl), 0);
	usleep(5000);
	ck_assert_int_eq(tier_obj_destroy(e.s, o), 0);
	pthread_join(th, NULL);
	ck_assert_msg(fl.rc == 0 || fl.rc == -ECANCELED, "flush racing a destroy: %d", fl.rc);
	st = stats(e.s);
	ck_assert_uint_eq(st.level[TIER_HBM].used, 0);
	ck_assert_uint_eq(st.level[TIER_DRAM].used, st.level[TIER_DRAM].objects * OBJ);
	VALID(e.s);

	/* 4. A DRAM write-back in flight (slowed), started by another thread. */
	o = mkobj(&e, "moving", OBJ);
	write_ver(e.s, o, 1, 3);
	ck_assert_int_eq(ts_fault_arm(TIER_FAULT_NVME_DELAY, 1, TIER_FAULT_PERSISTENT, -EIO), 0);
	fl = (struct flusher){ .s = e.s, .o = o };
	ck_assert_int_eq(pthread_create(&th, NULL, flusher_main, &fl), 0);
	usleep(5000);
	ck_assert_int_eq(tier_obj_destroy(e.s, o), 0);
	pthread_join(th, NULL);
	ts_fault_disarm(TIER_FAULT_NVME_DELAY);
	ck_assert_msg(fl.rc == 0 || fl.rc == -ECANCELED, "flush racing a destroy: %d", fl.rc);
	VALID(e.s);
	o = mkobj(&e, "moving", OBJ);
	expect_ver(e.s, o, 1, 0);

	/* 5. An acquire waiting on a (slow) fill is cancelled by the destroy. */
	write_ver(e.s, o, 1, 4);
	ck_assert_int_eq(tier_obj_flush(e.s, o), 0);
	push_out(&e);
	{
		struct tier_ticket *tk = NULL;
		void *p = NULL;
		int rc;

		ck_assert_int_eq(ts_fault_arm(TIER_FAULT_NVME_DELAY, 1, TIER_FAULT_PERSISTENT, -EIO),
				 0);
		ck_assert_int_eq(tier_obj_acquire_async(e.s, o, TIER_DRAM, TIER_ACQUIRE_READ, &p, &tk), 0);
		ck_assert_int_eq(tier_obj_destroy(e.s, o), 0);
		rc = tier_ticket_wait(tk);
		ts_fault_disarm(TIER_FAULT_NVME_DELAY);
		ck_assert_msg(rc == -ECANCELED, "acquire of an object destroyed under it: %d: %s", rc,
			      tier_last_error());
	}
	st = stats(e.s);
	ck_assert_uint_eq(st.level[TIER_DRAM].pinned, 0);
	ck_assert_uint_eq(st.level[TIER_DRAM].used, st.level[TIER_DRAM].objects * OBJ);
	VALID(e.s);
	env_close(&e);
}
END_TEST

/* Close with fills in flight (prefetches, slowed): no hang, 0, nothing
 * leaked. */
START_TEST(test_close_in_flight)
{
	NEED_FAULTS();
	static const struct cfg c = { .nvme = true, .hbm = "host", .policy = TIER_POLICY_LRU,
				      .hbm_bw = 25e6 };
	struct tier_obj *o[6];
	struct env e;
	double t0;
	int rc;

	env_open(&e, &c);
	for (int i = 0; i < 6; i++) {
		char name[32];

		snprintf(name, sizeof(name), "c.%d", i);
		o[i] = mkobj(&e, name, OBJ);
		write_ver(e.s, o[i], (uint32_t)i, 1);
	}
	ck_assert_int_eq(tier_store_flush(e.s), 0);
	push_out(&e);
	expect_ver(e.s, o[5], 5, 1);
	ck_assert_int_eq(ts_fault_arm(TIER_FAULT_NVME_DELAY, 1, TIER_FAULT_PERSISTENT, -EIO), 0);
	for (int i = 0; i < 5; i++)
		ck_assert_int_eq(tier_obj_prefetch(e.s, o[i], i < 3 ? TIER_DRAM : TIER_HBM), 0);
	ck_assert_int_eq(tier_obj_prefetch(e.s, o[5], TIER_HBM), 0);
	t0 = now_s();
	rc = tier_store_close(e.s);
	ts_fault_disarm(TIER_FAULT_NVME_DELAY);
	ck_assert_msg(rc == 0, "close with prefetches in flight: %d: %s", rc, tier_last_error());
	ck_assert_msg(now_s() - t0 < 20, "close took %.1f s", now_s() - t0);
	hook_assert_ok(&e.hk);
	tier_manifest_free(e.m);
}
END_TEST

/* Close writes every dirty byte down (DRAM and HBM), and returns 0. */
START_TEST(test_close_flushes)
{
	static const struct cfg c = { .nvme = true, .hbm = "host", .policy = TIER_POLICY_LRU };
	struct tier_obj *a, *b;
	struct env e;
	void *p;
	int rc;

	env_open(&e, &c);
	a = mkobj(&e, "dirty-dram", OBJ);
	b = mkobj(&e, "dirty-hbm", OBJ);
	write_ver(e.s, a, 1, 1);
	p = xacquire(e.s, b, TIER_HBM, TIER_ACQUIRE_WRITE | TIER_ACQUIRE_DISCARD);
	pat_fill(p, OBJ, 2, 1);
	xrelease(e.s, b, TIER_HBM, true);
	VALID(e.s);
	rc = tier_store_close(e.s);
	ck_assert_msg(rc == 0, "close: %d: %s", rc, tier_last_error());
	/* The hook saw both written down: b from HBM to DRAM, both to NVMe. */
	ck_assert_uint_ge(hook_count(&e.hk, STORE_EV_FLUSH_DONE, TIER_HBM), 1);
	ck_assert_uint_ge(hook_count(&e.hk, STORE_EV_FLUSH_DONE, TIER_DRAM), 2);
	hook_assert_ok(&e.hk);
	tier_manifest_free(e.m);
}
END_TEST

/* Close with a pin: -EBUSY, no hang, nothing leaked (ASan); the other
 * objects' dirty bytes are still written down. */
START_TEST(test_close_pinned)
{
	static const struct { enum tier_level l; unsigned mode; } pins[] = {
		{ TIER_DRAM, TIER_ACQUIRE_READ }, { TIER_HBM, TIER_ACQUIRE_READ },
	};
	static const struct cfg c = { .nvme = true, .hbm = "host", .policy = TIER_POLICY_LRU };
	struct tier_obj *a, *b;
	struct tier_ticket *tk;
	struct env e;
	void *p, *q;
	double t0;
	int rc;

	env_open(&e, &c);
	a = mkobj(&e, "held", OBJ);
	b = mkobj(&e, "dirty", OBJ);
	write_ver(e.s, a, 1, 1);
	write_ver(e.s, b, 2, 1);
	p = xacquire(e.s, a, pins[_i].l, pins[_i].mode);
	(void)p;
	/* An async acquire on the same level. */
	ck_assert_int_eq(tier_obj_acquire_async(e.s, b, pins[_i].l, TIER_ACQUIRE_READ, &q, &tk), 0);
	ck_assert_int_eq(tier_ticket_wait(tk), 0);
	xrelease(e.s, b, pins[_i].l, false);
	hook_watch(&e.hk, b);
	t0 = now_s();
	rc = tier_store_close(e.s);
	ck_assert_msg(now_s() - t0 < 10, "close took %.1f s", now_s() - t0);
	ck_assert_msg(rc == -EBUSY, "close with 'held' pinned on %s: %d: %s",
		      tier_level_name(pins[_i].l), rc, tier_last_error());
	ck_assert_msg(strstr(tier_last_error(), "'held'"), "%s", tier_last_error());
	ck_assert_uint_ge(hook_watch_count(&e.hk, STORE_EV_FLUSH_DONE, TIER_DRAM), 1);
	hook_assert_ok(&e.hk);
	tier_manifest_free(e.m);
}
END_TEST

/*
 * REGRESSION (store.c tier_store_close via tier_store_flush/step_flush): "An object
 * still pinned is a caller bug: it is reported (-EBUSY) and its data
 * flushed as it stands."  For a write pin, tier_store_flush skips the object
 * (-EBUSY) and close frees the store: the bytes a previous write pin
 * released dirty - acknowledged writes - are never written down.  Here
 * version 1 was written and released dirty, then the object was pinned
 * for write again; close writes nothing of it.
 */
START_TEST(test_close_write_pinned_flushes)
{
	static const struct { enum tier_level l; } pins[] = { { TIER_DRAM }, { TIER_HBM } };
	static const struct cfg c = { .nvme = true, .hbm = "host", .policy = TIER_POLICY_LRU };
	enum tier_level l = pins[_i].l;
	struct tier_obj *a;
	struct env e;
	void *p;
	int rc;

	env_open(&e, &c);
	a = mkobj(&e, "acked", OBJ);
	p = xacquire(e.s, a, l, TIER_ACQUIRE_WRITE | TIER_ACQUIRE_DISCARD);
	pat_fill(p, OBJ, 1, 1);
	xrelease(e.s, a, l, true);                 /* acknowledged: dirty on l */
	p = xacquire(e.s, a, l, TIER_ACQUIRE_READ | TIER_ACQUIRE_WRITE);
	ASSERT_PAT(p, OBJ, 1, 1);
	hook_watch(&e.hk, a);
	rc = tier_store_close(e.s);
	ck_assert_msg(rc == -EBUSY, "close with a write pin: %d: %s", rc, tier_last_error());
	ck_assert_msg(hook_watch_count(&e.hk, STORE_EV_FLUSH_DONE, TIER_DRAM) >= 1,
		      "close with 'acked' pinned for write on %s wrote nothing of it down "
		      "(%llu write-backs from dram started, %llu from hbm)",
		      tier_level_name(l),
		      U64(hook_watch_count(&e.hk, STORE_EV_FLUSH_START, TIER_DRAM)),
		      U64(hook_watch_count(&e.hk, STORE_EV_FLUSH_START, TIER_HBM)));
	tier_manifest_free(e.m);
}
END_TEST

/* ------------------------------------------------------------ stress */

#define ST_OBJS 32
#define ST_THREADS 4
#define ST_MAX_SIZE (1 * MiB)

struct st_obj {
	pthread_mutex_t mu;     /* held from acquire to release: one writer at a time */
	struct tier_obj *o;
	uint64_t size;
	uint32_t version;
};

struct stress {
	struct tier_store *s;
	struct st_obj obj[ST_OBJS];
	int ops;
	atomic_int failed;
	pthread_mutex_t fail_lock;
	char fail_msg[1024];
	atomic_uint_fast64_t ok, nomem, busy, reads, writes, hbm_ops, flushes, prefetches;
	atomic_uint cursor;
	atomic_uint_fast64_t progress;  /* operations done, all threads */
	bool resched;                   /* thread 0 re-registers the schedule now and then */
};

static void st_fail(struct stress *x, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void st_fail(struct stress *x, const char *fmt, ...)
{
	va_list ap;

	pthread_mutex_lock(&x->fail_lock);
	if (!atomic_fetch_add(&x->failed, 1)) {
		va_start(ap, fmt);
		vsnprintf(x->fail_msg, sizeof(x->fail_msg), fmt, ap);
		va_end(ap);
	}
	pthread_mutex_unlock(&x->fail_lock);
}

struct st_thread {
	struct stress *x;
	int id;
	uint64_t seed;
	void *buf;
};

/* Checks the store-wide bounds; false (and the failure recorded) when broken. */
static bool st_check_stats(struct stress *x)
{
	struct tier_store_stats st;

	tier_store_get_stats(x->s, &st);
	for (int l = TIER_HBM; l <= TIER_DRAM; l++) {
		if (st.level[l].present && st.level[l].used > st.level[l].capacity) {
			st_fail(x, "%s: used %llu > capacity %llu", tier_level_name(l),
				U64(st.level[l].used), U64(st.level[l].capacity));
			return false;
		}
	}
	return true;
}

static void *st_main(void *arg)
{
	struct st_thread *t = arg;
	struct stress *x = t->x;
	struct tier_store *s = x->s;
	char why[512];

	for (int op = 0; op < x->ops && !atomic_load(&x->failed); op++) {
		uint64_t r = t_rnd_next(&t->seed);
		unsigned kind = (unsigned)(r % 100);
		int i = (r >> 8) % 10 < 7 ? (int)(atomic_fetch_add(&x->cursor, 1) % ST_OBJS)
					  : (int)((r >> 16) % ST_OBJS);
		struct st_obj *b = &x->obj[i];
		enum tier_level l = (r >> 32) & 1 ? TIER_HBM : TIER_DRAM;
		void *p = NULL;
		int rc;

		if (kind < 60) {
			/* Acquire on DRAM or HBM, for read or write. */
			bool write = kind >= 30;
			bool discard = write && ((r >> 40) & 3) == 0;
			unsigned mode = write ? (TIER_ACQUIRE_WRITE | (discard ? TIER_ACQUIRE_DISCARD : TIER_ACQUIRE_READ))
					      : TIER_ACQUIRE_READ;

			pthread_mutex_lock(&b->mu);
			rc = tier_obj_acquire(s, b->o, l, mode, &p);
			if (rc == 0) {
				atomic_fetch_add(&x->ok, 1);
				if (l == TIER_HBM)
					atomic_fetch_add(&x->hbm_ops, 1);
				if (!discard && !pat_check(p, b->size, (uint32_t)i, b->version, why,
							   sizeof(why)))
					st_fail(x, "thread %d op %d: %s acquire on %s: %s", t->id, op,
						write ? "write" : "read", tier_level_name(l), why);
				if (write) {
					pat_fill(p, b->size, (uint32_t)i, b->version + 1);
					rc = tier_obj_release(s, b->o, l, true);
					if (rc == 0)
						b->version++;
					atomic_fetch_add(&x->writes, 1);
				} else {
					rc = tier_obj_release(s, b->o, l, false);
					atomic_fetch_add(&x->reads, 1);
				}
				if (rc)
					st_fail(x, "thread %d: release '%s' on %s: %d: %s", t->id,
						tier_obj_name(b->o), tier_level_name(l), rc,
						tier_last_error());
			} else if (rc == -ENOMEM) {
				atomic_fetch_add(&x->nomem, 1);
			} else if (rc == -EBUSY) {
				atomic_fetch_add(&x->busy, 1);
			} else {
				st_fail(x, "thread %d op %d: acquire '%s' on %s mode %#x: %d: %s", t->id,
					op, tier_obj_name(b->o), tier_level_name(l), mode, rc,
					tier_last_error());
			}
			pthread_mutex_unlock(&b->mu);
		} else if (kind < 70) {
			/* Whole-object write or read through DRAM. */
			pthread_mutex_lock(&b->mu);
			if (kind < 65) {
				pat_fill(t->buf, b->size, (uint32_t)i, b->version + 1);
				rc = tier_obj_write(s, b->o, 0, b->size, t->buf);
				if (rc == 0)
					b->version++;
			} else {
				rc = tier_obj_read(s, b->o, 0, b->size, t->buf);
				if (rc == 0 && !pat_check(t->buf, b->size, (uint32_t)i, b->version, why,
							  sizeof(why)))
					st_fail(x, "thread %d op %d: tier_obj_read: %s", t->id, op, why);
			}
			if (rc == -ENOMEM)
				atomic_fetch_add(&x->nomem, 1);
			else if (rc == -EBUSY)
				atomic_fetch_add(&x->busy, 1);
			else if (rc)
				st_fail(x, "thread %d: obj %s '%s': %d: %s", t->id,
					kind < 65 ? "write" : "read", tier_obj_name(b->o), rc,
					tier_last_error());
			pthread_mutex_unlock(&b->mu);
		} else if (kind < 85) {
			rc = tier_obj_prefetch(s, b->o, l);
			atomic_fetch_add(&x->prefetches, 1);
			if (rc)
				st_fail(x, "thread %d: prefetch '%s' to %s: %d: %s", t->id,
					tier_obj_name(b->o), tier_level_name(l), rc, tier_last_error());
		} else if (kind < 98) {
			rc = tier_obj_flush(s, b->o);
			atomic_fetch_add(&x->flushes, 1);
			if (rc && rc != -EBUSY)
				st_fail(x, "thread %d: flush '%s': %d: %s", t->id, tier_obj_name(b->o),
					rc, tier_last_error());
		} else {
			rc = tier_store_flush(s);
			atomic_fetch_add(&x->flushes, 1);
			if (rc && rc != -EBUSY)
				st_fail(x, "thread %d: tier_store_flush: %d: %s", t->id, rc, tier_last_error());
		}
		atomic_fetch_add(&x->progress, 1);
		if (x->resched && t->id == 0 && op % 256 == 255) {
			/* A new schedule: the objects from a random start, with a repeat. */
			struct tier_obj *sc[ST_OBJS + 1];
			int start = (int)(t_rnd_next(&t->seed) % ST_OBJS);

			for (int j = 0; j < ST_OBJS; j++)
				sc[j] = x->obj[(start + j) % ST_OBJS].o;
			sc[ST_OBJS] = x->obj[start].o;
			rc = tier_store_set_schedule(s, sc, ST_OBJS + 1);
			if (rc)
				st_fail(x, "set_schedule: %d: %s", rc, tier_last_error());
		}
		if (op % 16 == 0 && !st_check_stats(x))
			break;
		if (op % 128 == 0) {
			rc = tier_store_validate(s);
			if (rc)
				st_fail(x, "thread %d op %d: validate: %s", t->id, op, tier_last_error());
		}
	}
	return NULL;
}

/* Operations per thread; TIER_STRESS_OPS overrides. */
static int stress_ops(void)
{
	const char *v = getenv("TIER_STRESS_OPS");

	return v && atoi(v) > 0 ? atoi(v) : 1500;
}

static const struct {
	const char *name;
	bool nvme;
	enum tier_policy policy;
} stress_cases[] = {
	{ "belady, nvme home", true, TIER_POLICY_BELADY },
	{ "lru, nvme home", true, TIER_POLICY_LRU },
	{ "lru, dram home", false, TIER_POLICY_LRU },
};

START_TEST(test_stress)
{
	enum tier_policy pol = stress_cases[_i].policy;
	bool nvme = stress_cases[_i].nvme;
	struct cfg c = { .nvme = nvme, .hbm = "host", .csum = true, .policy = pol,
			 .dram = nvme ? 0 : 64 * MiB };
	uint64_t last_progress = 0;
	double last_t;
	struct st_thread th[ST_THREADS];
	pthread_t tid[ST_THREADS];
	struct tier_store_stats st;
	struct stress *x = calloc(1, sizeof(*x));
	struct tier_obj *sched[ST_OBJS + 8];
	struct env e;
	uint64_t seed = 0x5eed0000ull + (uint64_t)_i, total = 0;
	void *buf = xbuf(ST_MAX_SIZE);
	double t0 = now_s();
	int rc;

	env_open(&e, &c);
	x->s = e.s;
	x->ops = stress_ops();
	pthread_mutex_init(&x->fail_lock, NULL);
	for (int i = 0; i < ST_OBJS; i++) {
		char name[32];

		snprintf(name, sizeof(name), "s.%d", i);
		pthread_mutex_init(&x->obj[i].mu, NULL);
		x->obj[i].size = (128 * KiB) << (t_rnd_next(&seed) % 4);   /* 128 KiB .. 1 MiB */
		x->obj[i].o = mkobj(&e, name, x->obj[i].size);
		total += x->obj[i].size;
	}
	/* DRAM holds about 8 of them (unless it is the home), HBM about 4. */
	if (nvme)
		ck_assert_uint_gt(total, 3 * stats(e.s).level[TIER_DRAM].capacity);
	ck_assert_uint_gt(total, 4 * stats(e.s).level[TIER_HBM].capacity);
	if (pol == TIER_POLICY_BELADY) {
		x->resched = true;
		for (int i = 0; i < ST_OBJS; i++)
			sched[i] = x->obj[i].o;
		for (int i = 0; i < 8; i++)             /* repeats */
			sched[ST_OBJS + i] = x->obj[(i * 5) % ST_OBJS].o;
		ck_assert_int_eq(tier_store_set_schedule(e.s, sched, ST_OBJS + 8), 0);
	}
	for (int t = 0; t < ST_THREADS; t++) {
		th[t] = (struct st_thread){ .x = x, .id = t, .seed = 0x1234567ull * (uint64_t)(t + 1) + (uint64_t)_i,
					    .buf = xbuf(ST_MAX_SIZE) };
		ck_assert_int_eq(pthread_create(&tid[t], NULL, st_main, &th[t]), 0);
	}
	/* Watchdog: every thread is stuck in the store when nothing moves for 15 s. */
	last_t = now_s();
	for (;;) {
		uint64_t done = atomic_load(&x->progress);

		if (done >= (uint64_t)x->ops * ST_THREADS || atomic_load(&x->failed))
			break;
		if (done != last_progress) {
			last_progress = done;
			last_t = now_s();
		} else if (now_s() - last_t > 15) {
			struct tier_store_stats ws = stats(e.s);

			ck_abort_msg("stress (%s): no progress for 15 s after %llu of %llu operations "
				     "(dram: %llu misses, %llu evictions, %llu prefetches; hbm: %llu misses, "
				     "%llu evictions): the store is stuck", stress_cases[_i].name,
				     U64(done), U64((uint64_t)x->ops * ST_THREADS),
				     U64(ws.level[TIER_DRAM].misses), U64(ws.level[TIER_DRAM].evictions),
				     U64(ws.level[TIER_DRAM].prefetches), U64(ws.level[TIER_HBM].misses),
				     U64(ws.level[TIER_HBM].evictions));
		}
		usleep(20000);
	}
	for (int t = 0; t < ST_THREADS; t++) {
		pthread_join(tid[t], NULL);
		free(th[t].buf);
	}
	ck_assert_msg(!atomic_load(&x->failed), "stress: %d failures, the first: %s",
		      atomic_load(&x->failed), x->fail_msg);
	rc = tier_store_flush(e.s);
	ck_assert_msg(rc == 0, "final flush: %d: %s", rc, tier_last_error());
	st = stats(e.s);
	ck_assert_uint_eq(st.level[TIER_DRAM].dirty, 0);
	ck_assert_uint_eq(st.level[TIER_HBM].dirty, 0);
	ck_assert_uint_eq(st.level[TIER_DRAM].pinned, 0);
	ck_assert_uint_eq(st.level[TIER_HBM].pinned, 0);
	VALID(e.s);
	for (int i = 0; i < ST_OBJS; i++) {
		char why[512];

		rc = tier_obj_read(e.s, x->obj[i].o, 0, x->obj[i].size, buf);
		ck_assert_msg(rc == 0, "final read of '%s': %d: %s", tier_obj_name(x->obj[i].o), rc,
			      tier_last_error());
		ck_assert_msg(pat_check(buf, x->obj[i].size, (uint32_t)i, x->obj[i].version, why,
					sizeof(why)), "final contents: %s", why);
	}
	VALID(e.s);
	fprintf(stderr,
		"stress (%s): %d ops x %d threads in %.1f s: %llu acquires ok (%llu on hbm), "
		"%llu reads, %llu writes, %llu -ENOMEM, %llu -EBUSY, %llu prefetches, %llu flushes; "
		"dram: %llu evictions, %llu write-backs, %llu hits, %llu misses; "
		"hbm: %llu evictions, %llu write-backs; peak (hook) dram %llu hbm %llu\n",
		stress_cases[_i].name, x->ops, ST_THREADS, now_s() - t0,
		U64(x->ok), U64(x->hbm_ops), U64(x->reads), U64(x->writes), U64(x->nomem),
		U64(x->busy), U64(x->prefetches), U64(x->flushes),
		U64(st.level[TIER_DRAM].evictions), U64(st.level[TIER_DRAM].writebacks),
		U64(st.level[TIER_DRAM].hits), U64(st.level[TIER_DRAM].misses),
		U64(st.level[TIER_HBM].evictions), U64(st.level[TIER_HBM].writebacks),
		U64(e.hk.peak[TIER_DRAM]), U64(e.hk.peak[TIER_HBM]));
	/* It did exercise what it is for. */
	if (nvme) {
		ck_assert_uint_gt(st.level[TIER_DRAM].evictions, 50);
		ck_assert_uint_gt(st.level[TIER_DRAM].writebacks, 20);
	} else {
		ck_assert_uint_eq(st.level[TIER_DRAM].evictions, 0);
	}
	ck_assert_uint_gt(st.level[TIER_HBM].evictions, 20);
	ck_assert_uint_gt(st.level[TIER_HBM].writebacks, 20);
	ck_assert_uint_gt(x->writes, 100);
	ck_assert_uint_gt(x->ok, (uint64_t)x->ops); /* most acquires succeed */
	ck_assert_uint_le(e.hk.peak[TIER_DRAM], st.level[TIER_DRAM].capacity);
	ck_assert_uint_le(e.hk.peak[TIER_HBM], st.level[TIER_HBM].capacity);
	env_close(&e);
	for (int i = 0; i < ST_OBJS; i++)
		pthread_mutex_destroy(&x->obj[i].mu);
	free(buf);
	free(x);
}
END_TEST

/* ------------------------------------------------------------ suite */

static Suite *store_suite(void)
{
	Suite *s = suite_create("store");
	TCase *tc;

	tc = tcase_create("residency");
	tcase_add_unchecked_fixture(tc, t_case_setup, t_case_teardown);
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_set_timeout(tc, 60);
	tcase_add_loop_test(tc, test_roundtrip, 0, ARRAY_SIZE(residency_cfgs));
	tcase_add_loop_test(tc, test_eviction_writeback, 0, ARRAY_SIZE(evict_cases));
	tcase_add_loop_test(tc, test_hbm_eviction, 0, ARRAY_SIZE(hbm_cfgs));
	tcase_add_loop_test(tc, test_hbm_inclusion, 0, 2);
	tcase_add_test(tc, test_hbm_stale_copy_dropped);
	tcase_add_test(tc, test_discard_no_fill);
	tcase_add_test(tc, test_slot_rounding);
	suite_add_tcase(s, tc);

	tc = tcase_create("pins");
	tcase_add_unchecked_fixture(tc, t_case_setup, t_case_teardown);
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_set_timeout(tc, 60);
	tcase_add_loop_test(tc, test_pin_rules, 0, ARRAY_SIZE(pin_cases));
	tcase_add_test(tc, test_no_hbm);
	tcase_add_test(tc, test_e2big);
	tcase_add_loop_test(tc, test_enomem_all_pinned, 0, 2);
	tcase_add_test(tc, test_enomem_not_for_dirty_hbm);
	tcase_add_test(tc, test_flush_all_reports_write_pin);
	suite_add_tcase(s, tc);

	tc = t_tcase_faults("faults");
	tcase_add_unchecked_fixture(tc, t_case_setup, t_case_teardown);
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_set_timeout(tc, 60);
	tcase_add_loop_test(tc, test_fill_error, 0, ARRAY_SIZE(fill_faults));
	tcase_add_loop_test(tc, test_flush_error, 0, ARRAY_SIZE(flush_faults));
	tcase_add_loop_test(tc, test_hbm_writeback_error, 0, 2);
	tcase_add_loop_test(tc, test_eviction_writeback_error, 0, 2);
	tcase_add_test(tc, test_prefetch_fill_error_counted_once);
	tcase_add_loop_test(tc, test_eviction_cancelled, 0, 2);
	tcase_add_test(tc, test_prefetch_livelock);
	tcase_add_test(tc, test_destroy_in_flight);
	tcase_add_test(tc, test_close_in_flight);
	suite_add_tcase(s, tc);

	tc = tcase_create("prefetch-async");
	tcase_add_unchecked_fixture(tc, t_case_setup, t_case_teardown);
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_set_timeout(tc, 60);
	tcase_add_loop_test(tc, test_prefetch_hit, 0, ARRAY_SIZE(prefetch_cases));
	tcase_add_test(tc, test_async_many);
	suite_add_tcase(s, tc);

	tc = tcase_create("lifetime");
	tcase_add_unchecked_fixture(tc, t_case_setup, t_case_teardown);
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_set_timeout(tc, 60);
	tcase_add_loop_test(tc, test_destroy, 0, ARRAY_SIZE(hbm_cfgs));
	tcase_add_loop_test(tc, test_destroy_owned, 0, ARRAY_SIZE(hbm_cfgs));
	tcase_add_test(tc, test_close_flushes);
	tcase_add_loop_test(tc, test_close_pinned, 0, 2);
	tcase_add_loop_test(tc, test_close_write_pinned_flushes, 0, 2);
	suite_add_tcase(s, tc);

	tc = tcase_create("stress");
	tcase_add_unchecked_fixture(tc, t_case_setup, t_case_teardown);
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_set_timeout(tc, 110);
	tcase_add_loop_test(tc, test_stress, 0, ARRAY_SIZE(stress_cases));
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return t_run_suite(store_suite());
}
