/*
 * test_fault.c - the numbered fault sites (common/fault.c) and the real
 * call sites that pass through them.
 *
 * Covers:
 *  - ts_fault_arm(): the Nth call fails once (transient), @count times,
 *    or from then on (persistent), with the chosen errno; the calls/fired
 *    counters; disarm; reset_all; re-arming resets the counters; invalid
 *    arguments (-EINVAL, with nothing armed);
 *  - ts_fault_site_lookup() by name and number, ts_fault_site_name();
 *  - ts_fault_arm_spec(): single and comma-separated specs, default
 *    count/errno, numeric errno, and bad specs (-EINVAL with a detail
 *    message naming the bad part); TIER_FAULT through ts_options_reload();
 *  - the real sites: ALLOC (ts_malloc and friends return NULL), THREAD_
 *    CREATE and ALLOC in tier_pool_create() (fails cleanly at every step,
 *    leaks nothing: run under ASan), MEMINFO (sys_meminfo), STATVFS
 *    (sys_fsinfo), DIRECT_PROBE (sys_direct_probe);
 *  - concurrency: threads hammering one armed site see exactly @count
 *    failures in total.
 * Every case but "lookup" needs the sites: they are t_tcase_faults()
 * cases (fault-faults in tests/meson.build, SKIP in a build without them).
 */
#include "config.h"

#include <check.h>
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/error.h"
#include "common/fault.h"
#include "common/log.h"
#include "common/options.h"
#include "common/pool.h"
#include "common/sysinfo.h"
#include "t_helpers.h"

/* A site nothing in this test process calls on its own. */
#define QUIET_SITE TIER_FAULT_MKDIR

/* The fixture of the fault cases: each of their tests needs the sites. */
static void setup(void)
{
	NEED_FAULTS();
	ts_fault_reset_all();
	ts_err_clear();
}

static void teardown(void)
{
	ts_fault_reset_all();
}

/*
 * Calls @site @n times; returns how many failed (each must fail with @err)
 * and in @first_fail the 1-based number of the first failing call.
 */
static unsigned check_n(enum ts_fault_site site, unsigned n, int err, unsigned *first_fail)
{
	unsigned fails = 0;

	*first_fail = 0;
	for (unsigned call = 1; call <= n; call++) {
		int rc = ts_fault_check(site);

		if (rc == 0)
			continue;
		ck_assert_int_eq(rc, err);
		if (!fails)
			*first_fail = call;
		fails++;
	}
	return fails;
}

/* --------------------------------------------------------------- arming */

struct arm_case {
	uint64_t nth;
	int64_t count;
	int err;
};

static const struct arm_case arm_cases[] = {
	{ 1, 1, -EIO },
	{ 2, 1, -ENOMEM },
	{ 5, 1, -ENOSPC },
	{ 10, 1, -EAGAIN },
	{ 1, 3, -EIO },
	{ 4, 3, -ENOMEM },
	{ 7, 10, -EBUSY },
	{ 3, TIER_FAULT_PERSISTENT, -EIO },
	{ 1, TIER_FAULT_PERSISTENT, -ETIMEDOUT },
	{ 25, TIER_FAULT_PERSISTENT, -ENODEV },
};

/* Calls nth .. nth+count-1 fail with err; every other call passes. */
START_TEST(arm_modes)
{
	const struct arm_case *c = &arm_cases[_i];
	const unsigned calls = 40;

	ck_assert_int_eq(ts_fault_arm(QUIET_SITE, c->nth, c->count, c->err), 0);
	ck_assert_uint_eq(ts_fault_calls(QUIET_SITE), 0);
	ck_assert_uint_eq(ts_fault_fired(QUIET_SITE), 0);
	for (unsigned call = 1; call <= calls; call++) {
		int rc = ts_fault_check(QUIET_SITE);
		int fail = call >= c->nth &&
			   (c->count < 0 || call < c->nth + (uint64_t)c->count);

		ck_assert_msg(rc == (fail ? c->err : 0), "call %u: rc %d, want %d", call, rc,
			      fail ? c->err : 0);
	}
	ck_assert_uint_eq(ts_fault_calls(QUIET_SITE), calls);
	ck_assert_uint_eq(ts_fault_fired(QUIET_SITE),
			  c->count < 0 ? calls - c->nth + 1 : (uint64_t)c->count);
}
END_TEST

/* Sites are independent: arming one leaves the others passing. */
START_TEST(arm_one_site_only)
{
	unsigned first;

	ck_assert_int_eq(ts_fault_arm(TIER_FAULT_GPU_PROBE, 1, TIER_FAULT_PERSISTENT, -EIO), 0);
	for (int s = 1; s < TIER_FAULT__COUNT; s++) {
		if (s == TIER_FAULT_GPU_PROBE)
			continue;
		ck_assert_uint_eq(check_n((enum ts_fault_site)s, 5, 0, &first), 0);
	}
	ck_assert_uint_eq(check_n(TIER_FAULT_GPU_PROBE, 5, -EIO, &first), 5);
}
END_TEST

START_TEST(unarmed_counts_calls)
{
	unsigned first;

	ck_assert_uint_eq(check_n(QUIET_SITE, 7, 0, &first), 0);
	ck_assert_uint_eq(ts_fault_calls(QUIET_SITE), 7);
	ck_assert_uint_eq(ts_fault_fired(QUIET_SITE), 0);
}
END_TEST

START_TEST(disarm)
{
	unsigned first;

	ck_assert_int_eq(ts_fault_arm(QUIET_SITE, 1, TIER_FAULT_PERSISTENT, -EIO), 0);
	ck_assert_int_eq(ts_fault_check(QUIET_SITE), -EIO);
	ts_fault_disarm(QUIET_SITE);
	ck_assert_uint_eq(check_n(QUIET_SITE, 10, 0, &first), 0);
	ck_assert_uint_eq(ts_fault_fired(QUIET_SITE), 1);
	/* Out-of-range sites are ignored. */
	ts_fault_disarm(TIER_FAULT_NONE);
	ts_fault_disarm(TIER_FAULT__COUNT);
}
END_TEST

START_TEST(reset_all)
{
	unsigned first;

	ck_assert_int_eq(ts_fault_arm(TIER_FAULT_GPU_PROBE, 1, TIER_FAULT_PERSISTENT, -EIO), 0);
	ck_assert_int_eq(ts_fault_arm(QUIET_SITE, 2, 1, -ENOMEM), 0);
	ck_assert_int_eq(ts_fault_check(TIER_FAULT_GPU_PROBE), -EIO);
	ck_assert_int_eq(ts_fault_check(QUIET_SITE), 0);
	ts_fault_reset_all();
	for (int s = 1; s < TIER_FAULT__COUNT; s++) {
		ck_assert_uint_eq(ts_fault_calls((enum ts_fault_site)s), 0);
		ck_assert_uint_eq(ts_fault_fired((enum ts_fault_site)s), 0);
	}
	ck_assert_uint_eq(check_n(TIER_FAULT_GPU_PROBE, 5, 0, &first), 0);
	ck_assert_uint_eq(check_n(QUIET_SITE, 5, 0, &first), 0);
}
END_TEST

/* Arming again starts the count afresh. */
START_TEST(rearm_resets_counters)
{
	unsigned first;

	ck_assert_int_eq(ts_fault_arm(QUIET_SITE, 3, 1, -EIO), 0);
	ck_assert_uint_eq(check_n(QUIET_SITE, 5, -EIO, &first), 1);
	ck_assert_int_eq(ts_fault_arm(QUIET_SITE, 2, 1, -ENOSPC), 0);
	ck_assert_uint_eq(ts_fault_calls(QUIET_SITE), 0);
	ck_assert_uint_eq(ts_fault_fired(QUIET_SITE), 0);
	ck_assert_uint_eq(check_n(QUIET_SITE, 5, -ENOSPC, &first), 1);
	ck_assert_uint_eq(first, 2);
}
END_TEST

struct bad_arm {
	int site;
	uint64_t nth;
	int64_t count;
	int err;
};

static const struct bad_arm bad_arm_cases[] = {
	{ TIER_FAULT_NONE, 1, 1, -EIO },
	{ TIER_FAULT__COUNT, 1, 1, -EIO },
	{ 99, 1, 1, -EIO },
	{ -1, 1, 1, -EIO },
	{ QUIET_SITE, 0, 1, -EIO },                  /* nth 0 */
	{ QUIET_SITE, 1, 0, -EIO },                  /* count 0 */
	{ QUIET_SITE, 1, -2, -EIO },                 /* count below persistent */
	{ QUIET_SITE, 1, 1, 0 },                     /* err 0 */
	{ QUIET_SITE, 1, 1, EIO },                   /* positive err */
};

START_TEST(arm_invalid)
{
	const struct bad_arm *c = &bad_arm_cases[_i];
	unsigned first;

	ck_assert_int_eq(ts_fault_arm((enum ts_fault_site)c->site, c->nth, c->count, c->err),
			 -EINVAL);
	ck_assert_str_ne(tier_last_error(), "");
	/* Nothing was armed. */
	for (int s = 1; s < TIER_FAULT__COUNT; s++)
		ck_assert_uint_eq(check_n((enum ts_fault_site)s, 3, 0, &first), 0);
}
END_TEST

/* Out-of-range sites pass and count nothing. */
START_TEST(check_out_of_range)
{
	ck_assert_int_eq(ts_fault_check(TIER_FAULT_NONE), 0);
	ck_assert_int_eq(ts_fault_check(TIER_FAULT__COUNT), 0);
	ck_assert_uint_eq(ts_fault_calls(TIER_FAULT_NONE), 0);
	ck_assert_uint_eq(ts_fault_fired(TIER_FAULT__COUNT), 0);
}
END_TEST

/* --------------------------------------------------------------- lookup */

struct lookup_case {
	const char *in;
	enum ts_fault_site want;
};

static const struct lookup_case lookup_cases[] = {
	{ "alloc", TIER_FAULT_ALLOC },
	{ "ALLOC", TIER_FAULT_ALLOC },
	{ "1", TIER_FAULT_ALLOC },
	{ "thread_create", TIER_FAULT_THREAD_CREATE },
	{ "2", TIER_FAULT_THREAD_CREATE },
	{ "manifest_open", TIER_FAULT_MANIFEST_OPEN },
	{ "manifest_read", TIER_FAULT_MANIFEST_READ },
	{ "yaml_parse", TIER_FAULT_YAML_PARSE },
	{ "meminfo", TIER_FAULT_MEMINFO },
	{ "statvfs", TIER_FAULT_STATVFS },
	{ "7", TIER_FAULT_STATVFS },
	{ "direct_probe", TIER_FAULT_DIRECT_PROBE },
	{ "gpu_probe", TIER_FAULT_GPU_PROBE },
	{ "mkdir", TIER_FAULT_MKDIR },
	{ "10", TIER_FAULT_MKDIR },
	{ "0", TIER_FAULT_NONE },
	{ "nvme_bitflip", TIER_FAULT_NVME_BITFLIP },
	{ "9999", TIER_FAULT_NONE },
	{ "-1", TIER_FAULT_NONE },
	{ "none", TIER_FAULT_NONE },
	{ "bogus", TIER_FAULT_NONE },
	{ "", TIER_FAULT_NONE },
	{ " 1", TIER_FAULT_NONE },
	{ "alloc ", TIER_FAULT_NONE },
};

START_TEST(site_lookup)
{
	const struct lookup_case *c = &lookup_cases[_i];

	ck_assert_msg(ts_fault_site_lookup(c->in) == c->want, "lookup('%s') = %d, want %d",
		      c->in, (int)ts_fault_site_lookup(c->in), (int)c->want);
}
END_TEST

/* Every site's name and number lead back to it. */
START_TEST(site_names_roundtrip)
{
	for (int s = 1; s < TIER_FAULT__COUNT; s++) {
		char num[16];

		snprintf(num, sizeof(num), "%d", s);
		ck_assert_int_eq(ts_fault_site_lookup(ts_fault_site_name((enum ts_fault_site)s)), s);
		ck_assert_int_eq(ts_fault_site_lookup(num), s);
	}
	ck_assert_str_eq(ts_fault_site_name(TIER_FAULT_NONE), "none");
	ck_assert_str_eq(ts_fault_site_name(TIER_FAULT_ALLOC), "alloc");
	ck_assert_str_eq(ts_fault_site_name(TIER_FAULT__COUNT), "?");
	ck_assert_str_eq(ts_fault_site_name((enum ts_fault_site)-1), "?");
}
END_TEST

/* ----------------------------------------------------------------- specs */

/* One armed site expected after a spec: calls 1..40 fail at nth..nth+count-1. */
struct spec_expect {
	enum ts_fault_site site;
	unsigned nth;
	int count;          /* -1: persistent */
	int err;
};

struct spec_case {
	const char *spec;
	struct spec_expect want[3];
	int nwant;
};

static const struct spec_case spec_cases[] = {
	{ "alloc:3:1:ENOMEM", { { TIER_FAULT_ALLOC, 3, 1, -ENOMEM } }, 1 },
	{ "statvfs:1:-1:EIO", { { TIER_FAULT_STATVFS, 1, -1, -EIO } }, 1 },
	{ "alloc:3:1:ENOMEM,statvfs:1:-1:EIO",
	  { { TIER_FAULT_ALLOC, 3, 1, -ENOMEM }, { TIER_FAULT_STATVFS, 1, -1, -EIO } }, 2 },
	{ "mkdir:2", { { TIER_FAULT_MKDIR, 2, 1, -EIO } }, 1 },          /* default count, errno */
	{ "mkdir:2:4", { { TIER_FAULT_MKDIR, 2, 4, -EIO } }, 1 },
	{ "meminfo:1:2:28", { { TIER_FAULT_MEMINFO, 1, 2, -28 } }, 1 },   /* numeric errno */
	{ "MEMINFO:5:1:enospc", { { TIER_FAULT_MEMINFO, 5, 1, -ENOSPC } }, 1 },
	{ "7:4:1:EACCES", { { TIER_FAULT_STATVFS, 4, 1, -EACCES } }, 1 },
	{ "gpu_probe:1:-1:ENODEV,mkdir:3:2:EPERM,direct_probe:2:1:EINVAL",
	  { { TIER_FAULT_GPU_PROBE, 1, -1, -ENODEV }, { TIER_FAULT_MKDIR, 3, 2, -EPERM },
	    { TIER_FAULT_DIRECT_PROBE, 2, 1, -EINVAL } }, 3 },
};

START_TEST(arm_spec_valid)
{
	const struct spec_case *c = &spec_cases[_i];

	ck_assert_msg(ts_fault_arm_spec(c->spec) == 0, "'%s': %s", c->spec, tier_last_error());
	for (int w = 0; w < c->nwant; w++) {
		const struct spec_expect *e = &c->want[w];

		for (unsigned call = 1; call <= 40; call++) {
			int fail = call >= e->nth &&
				   (e->count < 0 || call < e->nth + (unsigned)e->count);

			ck_assert_msg(ts_fault_check(e->site) == (fail ? e->err : 0),
				      "'%s': site %s call %u", c->spec,
				      ts_fault_site_name(e->site), call);
		}
	}
}
END_TEST

struct bad_spec {
	const char *spec;
	const char *part;   /* must appear in the detail message */
};

static const struct bad_spec bad_spec_cases[] = {
	{ "bogus:1", "no fault site 'bogus'" },
	{ "none:1", "no fault site 'none'" },
	{ "999:1", "no fault site '999'" },
	{ "alloc", "expected site:nth" },
	{ "alloc:0", "bad call number '0'" },
	{ "alloc:x", "bad call number 'x'" },
	{ "alloc:-3", "bad call number '-3'" },
	{ "alloc:1:-2", "bad count '-2'" },
	{ "alloc:1:many", "bad count 'many'" },
	{ "alloc:1:1:EFOO", "bad errno 'EFOO'" },
	{ "alloc:1:1:0", "bad errno '0'" },
	{ "alloc:1:1:-5", "bad errno '-5'" },
	{ "alloc:1:1:99999", "bad errno '99999'" },
	{ "alloc:1:0", "bad count '0'" },
	{ "alloc::3", "bad call number ''" },          /* empty fields are not skipped */
	{ "alloc:1:1:EIO:junk", "expected site:nth" },  /* no field past the errno */
	{ "alloc:1,", "expected site:nth" },            /* an empty item */
	{ "mkdir:1,bogus:2", "no fault site 'bogus'" },
	{ "mkdir:1,alloc:1:1:EFOO", "bad errno 'EFOO'" },
};

START_TEST(arm_spec_invalid)
{
	const struct bad_spec *c = &bad_spec_cases[_i];

	ts_err_clear();
	ck_assert_int_eq(ts_fault_arm_spec(c->spec), -EINVAL);
	ck_assert_msg(strstr(tier_last_error(), c->part) != NULL,
		      "'%s': message '%s' lacks '%s'", c->spec, tier_last_error(), c->part);
}
END_TEST

/* A spec with a bad item arms none of its items, not even the good ones before it. */
START_TEST(arm_spec_all_or_nothing)
{
	ts_fault_reset_all();
	ck_assert_int_eq(ts_fault_arm_spec("mkdir:1,bogus:1"), -EINVAL);
	ck_assert_int_eq(ts_fault_check(TIER_FAULT_MKDIR), 0);
	ck_assert_int_eq(ts_fault_arm_spec("mkdir:1,alloc:1:1:EIO:x"), -EINVAL);
	ck_assert_int_eq(ts_fault_check(TIER_FAULT_MKDIR), 0);
	ck_assert_uint_eq(ts_fault_fired(TIER_FAULT_MKDIR), 0);
}
END_TEST

START_TEST(arm_spec_too_long)
{
	char spec[600];

	memset(spec, 'a', sizeof(spec) - 1);
	spec[sizeof(spec) - 1] = '\0';
	ck_assert_int_eq(ts_fault_arm_spec(spec), -EINVAL);
	ck_assert_ptr_nonnull(strstr(tier_last_error(), "too long"));
}
END_TEST

/* --------------------------------------------------- TIER_FAULT variable */

#define CAP_LINES 16

static int g_ncap;
static char g_cap[CAP_LINES][2048];

static void capture_sink(int level, uint32_t ss, const char *line, void *arg)
{
	(void)level;
	(void)ss;
	(void)arg;
	if (g_ncap < CAP_LINES)
		snprintf(g_cap[g_ncap], sizeof(g_cap[0]), "%s", line);
	g_ncap++;
}

START_TEST(env_arms_sites)
{
	void *p;

	ck_assert_int_eq(setenv("TIER_FAULT", "alloc:2:1:ENOMEM,statvfs:1:-1:EACCES", 1), 0);
	ts_options_reload();
	unsetenv("TIER_FAULT");
	ck_assert_str_eq(ts_opt_str(TIER_OPT_FAULT), "alloc:2:1:ENOMEM,statvfs:1:-1:EACCES");

	p = ts_malloc(16);
	ck_assert_ptr_nonnull(p);
	free(p);
	ck_assert_ptr_null(ts_malloc(16));
	p = ts_malloc(16);
	ck_assert_ptr_nonnull(p);
	free(p);
	ck_assert_int_eq(ts_fault_check(TIER_FAULT_STATVFS), -EACCES);
	ck_assert_int_eq(ts_fault_check(TIER_FAULT_STATVFS), -EACCES);
	ck_assert_uint_eq(ts_fault_fired(TIER_FAULT_ALLOC), 1);
}
END_TEST

START_TEST(env_bad_spec_warns)
{
	int warned = 0;

	g_ncap = 0;
	ts_log_set_sink(capture_sink, NULL);
	ck_assert_int_eq(setenv("TIER_FAULT", "bogus:1", 1), 0);
	unsetenv("TIER_LOG");
	unsetenv("TIER_LOG_SUBSYS");
	ts_options_reload();
	unsetenv("TIER_FAULT");
	ts_log_set_sink(NULL, NULL);
	ck_assert_int_ge(g_ncap, 1);
	ck_assert_int_le(g_ncap, CAP_LINES);
	for (int i = 0; i < g_ncap; i++)
		if (strstr(g_cap[i], " warn common: ") &&
		    strstr(g_cap[i], "no fault site 'bogus'"))
			warned++;
	ck_assert_int_eq(warned, 1);
	/* The warning is logged, not left as this thread's detail message. */
	ck_assert_str_eq(tier_last_error(), "");
}
END_TEST

/* ----------------------------------------------------- the real ALLOC site */

enum alloc_fn { A_MALLOC, A_CALLOC, A_REALLOC, A_STRDUP, A_STRNDUP, A_ASPRINTF, A__COUNT };

static const char *const alloc_names[] = {
	"ts_malloc", "ts_calloc", "ts_realloc", "ts_strdup", "ts_strndup",
	"ts_asprintf",
};

static void *call_alloc(enum alloc_fn fn, void *old)
{
	switch (fn) {
	case A_MALLOC: return ts_malloc(32);
	case A_CALLOC: return ts_calloc(4, 8);
	case A_REALLOC: return ts_realloc(old, 64);
	case A_STRDUP: return ts_strdup("tierstore");
	case A_STRNDUP: return ts_strndup("tierstore", 4);
	case A_ASPRINTF: return ts_asprintf("%s-%d", "tier", 7);
	case A__COUNT: break;
	}
	return NULL;
}

/* Each wrapper returns NULL on the armed call and works on the next. */
START_TEST(alloc_site)
{
	enum alloc_fn fn = (enum alloc_fn)_i;
	void *old = malloc(8), *p;

	ck_assert_int_eq((int)ARRAY_SIZE(alloc_names), A__COUNT);
	ck_assert_ptr_nonnull(old);
	memcpy(old, "keepme!", 8);
	ck_assert_int_eq(ts_fault_arm(TIER_FAULT_ALLOC, 1, 1, -ENOMEM), 0);
	p = call_alloc(fn, old);
	ck_assert_msg(p == NULL, "%s ignored the armed ALLOC site", alloc_names[fn]);
	ck_assert_uint_eq(ts_fault_fired(TIER_FAULT_ALLOC), 1);
	/* A failed realloc leaves the block alone. */
	ck_assert_str_eq(old, "keepme!");

	p = call_alloc(fn, old);
	ck_assert_msg(p != NULL, "%s failed after the transient fault", alloc_names[fn]);
	if (fn == A_REALLOC)
		old = NULL;
	if (fn == A_STRDUP)
		ck_assert_str_eq(p, "tierstore");
	if (fn == A_STRNDUP)
		ck_assert_str_eq(p, "tier");
	if (fn == A_ASPRINTF)
		ck_assert_str_eq(p, "tier-7");
	ck_assert_uint_eq(ts_fault_calls(TIER_FAULT_ALLOC), 2);
	free(p);
	free(old);
}
END_TEST

/* ------------------------------------------------------- tier_pool_create */

/*
 * Fails the Nth allocation of tier_pool_create(), N = 1, 2, ... until a
 * run injects nothing: each failure must be -ENOMEM with no pool and no
 * leak (ASan), and the run that injects nothing must give a working pool.
 */
START_TEST(pool_create_alloc_faults)
{
	static char sentinel;
	struct t_nth f = T_NTH(TIER_FAULT_ALLOC, -ENOMEM, 63);

	while (t_nth_next(&f)) {
		struct tier_pool *pool = (struct tier_pool *)(void *)&sentinel;
		int rc;

		t_nth_arm(&f);
		rc = tier_pool_create(4, &pool);
		if (!t_nth_fired(&f)) {
			ck_assert_int_eq(rc, 0);
			ck_assert_ptr_nonnull(pool);
			ck_assert_uint_eq(tier_pool_size(pool), 4);
			tier_pool_destroy(pool);
			break;
		}
		ck_assert_msg(rc == -ENOMEM, "allocation %u: rc %d", (unsigned)f.nth, rc);
		ck_assert_ptr_null(pool);
		ck_assert_ptr_nonnull(strstr(tier_last_error(), "thread pool"));
	}
	/* A pool of 4: the pool, its thread array and 3 worker arguments. */
	ck_assert_uint_eq(f.nth, 6);
}
END_TEST

struct thread_fault {
	unsigned nthreads;
	unsigned nth;
	int err;
};

static const struct thread_fault thread_faults[] = {
	{ 2, 1, -EAGAIN },
	{ 4, 1, -EAGAIN },
	{ 4, 2, -EPERM },
	{ 4, 3, -ENOMEM },
	{ 8, 7, -EAGAIN },
};

/* The Nth worker fails to start: the others are stopped, the errno kept. */
START_TEST(pool_create_thread_fault)
{
	const struct thread_fault *c = &thread_faults[_i];
	struct tier_pool *pool = NULL;
	char where[64];

	ck_assert_int_eq(ts_fault_arm(TIER_FAULT_THREAD_CREATE, c->nth, 1, c->err), 0);
	ck_assert_int_eq(tier_pool_create(c->nthreads, &pool), c->err);
	ck_assert_ptr_null(pool);
	snprintf(where, sizeof(where), "creating worker %u of %u", c->nth, c->nthreads - 1);
	ck_assert_msg(strstr(tier_last_error(), where) != NULL, "'%s' lacks '%s'",
		      tier_last_error(), where);
	ck_assert_ptr_nonnull(strstr(tier_last_error(), tier_strerror(c->err)));
	ck_assert_uint_eq(ts_fault_calls(TIER_FAULT_THREAD_CREATE), c->nth);
	/* Transient: the next pool starts. */
	ck_assert_int_eq(tier_pool_create(c->nthreads, &pool), 0);
	ck_assert_uint_eq(tier_pool_size(pool), c->nthreads);
	tier_pool_destroy(pool);
}
END_TEST

/* A pool of one thread starts no worker, so it never reaches the site. */
START_TEST(pool_create_single_thread_no_site)
{
	struct tier_pool *pool = NULL;

	ck_assert_int_eq(ts_fault_arm(TIER_FAULT_THREAD_CREATE, 1, TIER_FAULT_PERSISTENT, -EAGAIN), 0);
	ck_assert_int_eq(tier_pool_create(1, &pool), 0);
	ck_assert_uint_eq(tier_pool_size(pool), 1);
	ck_assert_uint_eq(ts_fault_calls(TIER_FAULT_THREAD_CREATE), 0);
	tier_pool_destroy(pool);
}
END_TEST

/* ------------------------------------------------------------- sysinfo */

START_TEST(meminfo_site)
{
	struct ts_meminfo mi;

	ck_assert_int_eq(ts_fault_arm(TIER_FAULT_MEMINFO, 1, 1, -EIO), 0);
	ck_assert_int_eq(sys_meminfo(&mi), -EIO);
	ck_assert_ptr_nonnull(strstr(tier_last_error(), "/proc/meminfo"));
	ck_assert_ptr_nonnull(strstr(tier_last_error(), tier_strerror(-EIO)));
	ck_assert_uint_eq(ts_fault_fired(TIER_FAULT_MEMINFO), 1);
	/* Transient: the next read works. */
	memset(&mi, 0, sizeof(mi));
	ck_assert_int_eq(sys_meminfo(&mi), 0);
	ck_assert_uint_gt(mi.total, 0);
	ck_assert_uint_le(mi.available, mi.total);
}
END_TEST

START_TEST(statvfs_site)
{
	struct ts_fsinfo fi;

	ck_assert_int_eq(ts_fault_arm(TIER_FAULT_STATVFS, 1, TIER_FAULT_PERSISTENT, -EACCES), 0);
	ck_assert_int_eq(sys_fsinfo("/", &fi), -EACCES);
	ck_assert_ptr_nonnull(strstr(tier_last_error(), "/: statvfs"));
	ck_assert_int_eq(sys_fsinfo(".", &fi), -EACCES);
	ck_assert_ptr_nonnull(strstr(tier_last_error(), ".: statvfs"));
	ck_assert_uint_eq(ts_fault_fired(TIER_FAULT_STATVFS), 2);
	ts_fault_disarm(TIER_FAULT_STATVFS);
	memset(&fi, 0, sizeof(fi));
	ck_assert_int_eq(sys_fsinfo(".", &fi), 0);
	ck_assert_uint_gt(fi.size, 0);
	ck_assert_uint_le(fi.avail, fi.size);
}
END_TEST

START_TEST(direct_probe_site)
{
	char *dir = t_mkdtemp();
	int rc;

	ck_assert_int_eq(ts_fault_arm(TIER_FAULT_DIRECT_PROBE, 1, 1, -ENOSPC), 0);
	ck_assert_int_eq(sys_direct_probe(dir), -ENOSPC);
	ck_assert_ptr_nonnull(strstr(tier_last_error(), dir));
	ck_assert_ptr_nonnull(strstr(tier_last_error(), "O_DIRECT probe"));
	/* Without the fault the probe runs: 0, or -EINVAL on a file system
	 * without O_DIRECT; either way it leaves no file behind. */
	rc = sys_direct_probe(dir);
	ck_assert_msg(rc == 0 || rc == -EINVAL, "probe: %d (%s)", rc, tier_last_error());
	ck_assert_uint_eq(ts_fault_calls(TIER_FAULT_DIRECT_PROBE), 2);
	ck_assert_int_eq(rmdir(dir), 0);
	free(dir);
}
END_TEST

/* --------------------------------------------------------- concurrency */

/* Several threads probing one directory at once each get their own probe file. */
struct probe_arg {
	const char *dir;
	_Atomic int bad;
};

static void *probe_main(void *v)
{
	struct probe_arg *pa = v;

	for (int i = 0; i < 50; i++) {
		int rc = sys_direct_probe(pa->dir);

		if (rc != 0 && rc != -EINVAL)
			atomic_store(&pa->bad, rc);
	}
	return NULL;
}

START_TEST(concurrent_direct_probes)
{
	struct probe_arg pa = { .dir = t_mkdtemp() };
	pthread_t t[4];

	for (int i = 0; i < 4; i++)
		ck_assert_int_eq(pthread_create(&t[i], NULL, probe_main, &pa), 0);
	for (int i = 0; i < 4; i++)
		pthread_join(t[i], NULL);
	ck_assert_msg(atomic_load(&pa.bad) == 0, "a probe failed: %s",
		      tier_strerror(atomic_load(&pa.bad)));
	ck_assert_int_eq(rmdir(pa.dir), 0); /* no probe file left behind */
	free((char *)pa.dir);
}
END_TEST

#define HAMMER_THREADS 4
#define HAMMER_CALLS 10000

struct hammer {
	enum ts_fault_site site;
	unsigned fails;
	int wrong_err;
};

static pthread_barrier_t g_start;

static void *hammer_main(void *v)
{
	struct hammer *h = v;

	pthread_barrier_wait(&g_start);
	for (int i = 0; i < HAMMER_CALLS; i++) {
		int rc = ts_fault_check(h->site);

		if (rc)
			h->fails++;
		if (rc && rc != -EBUSY)
			h->wrong_err = rc;
	}
	return NULL;
}

static unsigned hammer(enum ts_fault_site site)
{
	pthread_t th[HAMMER_THREADS];
	struct hammer h[HAMMER_THREADS];
	unsigned total = 0;

	ck_assert_int_eq(pthread_barrier_init(&g_start, NULL, HAMMER_THREADS), 0);
	for (int i = 0; i < HAMMER_THREADS; i++) {
		h[i] = (struct hammer){ .site = site };
		ck_assert_int_eq(pthread_create(&th[i], NULL, hammer_main, &h[i]), 0);
	}
	for (int i = 0; i < HAMMER_THREADS; i++) {
		ck_assert_int_eq(pthread_join(th[i], NULL), 0);
		ck_assert_int_eq(h[i].wrong_err, 0);
		total += h[i].fails;
	}
	pthread_barrier_destroy(&g_start);
	return total;
}

START_TEST(concurrent_exact_count)
{
	ck_assert_int_eq(ts_fault_arm(QUIET_SITE, 100, 50, -EBUSY), 0);
	ck_assert_uint_eq(hammer(QUIET_SITE), 50);
	ck_assert_uint_eq(ts_fault_calls(QUIET_SITE), HAMMER_THREADS * HAMMER_CALLS);
	ck_assert_uint_eq(ts_fault_fired(QUIET_SITE), 50);
}
END_TEST

START_TEST(concurrent_persistent)
{
	ck_assert_int_eq(ts_fault_arm(QUIET_SITE, 1000, TIER_FAULT_PERSISTENT, -EBUSY), 0);
	ck_assert_uint_eq(hammer(QUIET_SITE), HAMMER_THREADS * HAMMER_CALLS - 999);
	ck_assert_uint_eq(ts_fault_fired(QUIET_SITE), HAMMER_THREADS * HAMMER_CALLS - 999);
}
END_TEST

static Suite *fault_suite(void)
{
	Suite *s = suite_create("fault");
	TCase *tc;

	tc = t_tcase_faults("arm");
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_loop_test(tc, arm_modes, 0, (int)ARRAY_SIZE(arm_cases));
	tcase_add_test(tc, arm_one_site_only);
	tcase_add_test(tc, unarmed_counts_calls);
	tcase_add_test(tc, disarm);
	tcase_add_test(tc, reset_all);
	tcase_add_test(tc, rearm_resets_counters);
	tcase_add_loop_test(tc, arm_invalid, 0, (int)ARRAY_SIZE(bad_arm_cases));
	tcase_add_test(tc, check_out_of_range);
	suite_add_tcase(s, tc);

	tc = tcase_create("lookup");
	tcase_add_loop_test(tc, site_lookup, 0, (int)ARRAY_SIZE(lookup_cases));
	tcase_add_test(tc, site_names_roundtrip);
	suite_add_tcase(s, tc);

	tc = t_tcase_faults("spec");
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_loop_test(tc, arm_spec_valid, 0, (int)ARRAY_SIZE(spec_cases));
	tcase_add_loop_test(tc, arm_spec_invalid, 0, (int)ARRAY_SIZE(bad_spec_cases));
	tcase_add_test(tc, arm_spec_too_long);
	tcase_add_test(tc, arm_spec_all_or_nothing);
	tcase_add_test(tc, env_arms_sites);
	tcase_add_test(tc, env_bad_spec_warns);
	suite_add_tcase(s, tc);

	tc = t_tcase_faults("sites");
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_loop_test(tc, alloc_site, 0, A__COUNT);
	tcase_add_test(tc, pool_create_alloc_faults);
	tcase_add_loop_test(tc, pool_create_thread_fault, 0, (int)ARRAY_SIZE(thread_faults));
	tcase_add_test(tc, pool_create_single_thread_no_site);
	tcase_add_test(tc, meminfo_site);
	tcase_add_test(tc, statvfs_site);
	tcase_add_test(tc, direct_probe_site);
	suite_add_tcase(s, tc);

	tc = t_tcase_faults("concurrent");
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_set_timeout(tc, 30);
	tcase_add_test(tc, concurrent_exact_count);
	tcase_add_test(tc, concurrent_persistent);
	tcase_add_test(tc, concurrent_direct_probes);
	suite_add_tcase(s, tc);

	return s;
}

int main(void)
{
	return t_run_suite(fault_suite());
}
