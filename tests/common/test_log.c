/*
 * test_log.c - logging by level and subsystem (common/log.c).
 *
 * Covers:
 *  - ts_log_level_parse() and ts_log_level_name();
 *  - ts_log_mask_parse(): lists, "all", "^list" exclusions, and the bad
 *    word reported in @bad; ts_subsys_name();
 *  - ts_log_enabled() against the level and the subsystem mask;
 *  - the line format through ts_log_set_sink(): "tierstore[PID] LEVEL
 *    SUBSYS: message", with "(file.c:LINE)" on errors and warnings only;
 *  - that a disabled level or subsystem produces nothing and does not even
 *    evaluate the arguments;
 *  - the default stderr output (one whole line per message, also when
 *    several threads log at once).
 */
#include "config.h"

#include <check.h>
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/log.h"
#include "t_helpers.h"

/* A subsystem bit as a constant expression (TIER_SS_X are objects). */
#define SS(id) (1u << TIER_SSB_##id)

/* ------------------------------------------------------------- the sink */

#define CAP_LINES 64
#define CAP_LEN 2200

struct capture {
	pthread_mutex_t lock;
	int n;
	int level[CAP_LINES];
	uint32_t ss[CAP_LINES];
	char line[CAP_LINES][CAP_LEN];
};

static struct capture g_cap = { .lock = PTHREAD_MUTEX_INITIALIZER };

static void capture_sink(int level, uint32_t ss, const char *line, void *arg)
{
	struct capture *c = arg;

	pthread_mutex_lock(&c->lock);
	if (c->n < CAP_LINES) {
		c->level[c->n] = level;
		c->ss[c->n] = ss;
		snprintf(c->line[c->n], CAP_LEN, "%s", line);
	}
	c->n++;
	pthread_mutex_unlock(&c->lock);
}

static int g_saved_level;
static uint32_t g_saved_mask;

static void setup(void)
{
	g_saved_level = atomic_load(&ts_log_level_g);
	g_saved_mask = atomic_load(&ts_log_mask_g);
	atomic_store(&ts_log_level_g, TIER_LL_WARN);
	atomic_store(&ts_log_mask_g, TIER_SS_ALL);
	g_cap.n = 0;
	ts_log_set_sink(capture_sink, &g_cap);
}

static void teardown(void)
{
	ts_log_set_sink(NULL, NULL);
	atomic_store(&ts_log_level_g, g_saved_level);
	atomic_store(&ts_log_mask_g, g_saved_mask);
}

static void set_log(int level, uint32_t mask)
{
	atomic_store(&ts_log_level_g, level);
	atomic_store(&ts_log_mask_g, mask);
}

/* ------------------------------------------------------ levels and masks */

struct level_case {
	const char *in;
	int want;
};

static const struct level_case level_cases[] = {
	{ "error", TIER_LL_ERROR },
	{ "warn", TIER_LL_WARN },
	{ "WARN", TIER_LL_WARN },
	{ "warning", TIER_LL_WARN },
	{ "info", TIER_LL_INFO },
	{ "debug", TIER_LL_DEBUG },
	{ "Debug", TIER_LL_DEBUG },
	{ "trace", TIER_LL_TRACE },
	{ "loud", -EINVAL },
	{ "", -EINVAL },
	{ "warn ", -EINVAL },
	{ "inf", -EINVAL },
	{ "3", -EINVAL },
};

START_TEST(level_parse)
{
	const struct level_case *c = &level_cases[_i];

	ck_assert_msg(ts_log_level_parse(c->in) == c->want, "'%s': got %d, want %d",
		      c->in, ts_log_level_parse(c->in), c->want);
}
END_TEST

START_TEST(level_name)
{
	static const char *const names[] = { "error", "warn", "info", "debug", "trace" };

	for (int i = 0; i < (int)ARRAY_SIZE(names); i++) {
		ck_assert_str_eq(ts_log_level_name(i), names[i]);
		ck_assert_int_eq(ts_log_level_parse(ts_log_level_name(i)), i);
	}
	ck_assert_str_eq(ts_log_level_name(-1), "?");
	ck_assert_str_eq(ts_log_level_name(TIER_LL_TRACE + 1), "?");
}
END_TEST

struct mask_case {
	const char *in;
	int rc;
	uint32_t want;      /* when rc == 0 */
	const char *bad;    /* when rc != 0 */
};

static const struct mask_case mask_cases[] = {
	{ "nvme,prefetch", 0, SS(NVME) | SS(PREFETCH), NULL },
	{ "all", 0, TIER_SS_ALL, NULL },
	{ "ALL", 0, TIER_SS_ALL, NULL },
	{ "^nvme", 0, TIER_SS_ALL & ~SS(NVME), NULL },
	{ "^nvme,dram", 0, TIER_SS_ALL & ~(SS(NVME) | SS(DRAM)), NULL },
	{ "common", 0, SS(COMMON), NULL },
	{ "tools", 0, SS(TOOLS), NULL },
	{ "NVMe,Dram", 0, SS(NVME) | SS(DRAM), NULL },
	{ "nvme,,dram,", 0, SS(NVME) | SS(DRAM), NULL },
	{ "nvme,all", 0, TIER_SS_ALL, NULL },
	{ "bogus", -EINVAL, 0, "bogus" },
	{ "nvme,bogus", -EINVAL, 0, "bogus" },
	{ "nvme,bogus,dram", -EINVAL, 0, "bogus" },
	{ "^bogus", -EINVAL, 0, "bogus" },
	{ "nvm", -EINVAL, 0, "nvm" },
	{ "nvmex", -EINVAL, 0, "nvmex" },
	{ "nvme prefetch", -EINVAL, 0, "nvme prefetch" },
	{ "", -EINVAL, 0, "" },
};

START_TEST(mask_parse)
{
	const struct mask_case *c = &mask_cases[_i];
	uint32_t mask = 0xdeadbeef;
	char bad[64] = "untouched";
	int rc;

	rc = ts_log_mask_parse(c->in, &mask, bad, sizeof(bad));
	ck_assert_msg(rc == c->rc, "'%s': rc %d, want %d", c->in, rc, c->rc);
	if (rc == 0) {
		ck_assert_msg(mask == c->want, "'%s': mask %#x, want %#x", c->in,
			      mask, c->want);
	} else {
		ck_assert_str_eq(bad, c->bad);
		ck_assert_msg(mask == 0xdeadbeef, "'%s': failure changed the mask", c->in);
	}
}
END_TEST

/* @bad is optional and cut to @badlen. */
START_TEST(mask_parse_bad_buffer)
{
	uint32_t mask;
	char bad[4];

	ck_assert_int_eq(ts_log_mask_parse("nvme,prefetchx", &mask, NULL, 0), -EINVAL);
	memset(bad, 'x', sizeof(bad));
	ck_assert_int_eq(ts_log_mask_parse("nvme,prefetchx", &mask, bad, sizeof(bad)), -EINVAL);
	ck_assert_str_eq(bad, "pre");
}
END_TEST

START_TEST(subsys_names)
{
	static const char *const names[] = {
		"common", "manifest", "kernels", "nvme", "dram", "hbm", "store",
		"prefetch", "optim", "stats", "tools",
	};

	ck_assert_int_eq(TIER_SSB__COUNT, (int)ARRAY_SIZE(names));
	for (int i = 0; i < TIER_SSB__COUNT; i++) {
		uint32_t mask = 0;

		ck_assert_str_eq(ts_subsys_name(1u << i), names[i]);
		ck_assert_int_eq(ts_log_mask_parse(names[i], &mask, NULL, 0), 0);
		ck_assert_uint_eq(mask, 1u << i);
	}
	ck_assert_str_eq(ts_subsys_name(0), "?");
	ck_assert_str_eq(ts_subsys_name(TIER_SS_NVME | TIER_SS_DRAM), "?");
	ck_assert_str_eq(ts_subsys_name(1u << TIER_SSB__COUNT), "?");
}
END_TEST

struct enabled_case {
	int set_level;
	uint32_t set_mask;
	int level;
	uint32_t ss;
	int want;
};

static const struct enabled_case enabled_cases[] = {
	{ TIER_LL_WARN, TIER_SS_ALL, TIER_LL_ERROR, SS(NVME), 1 },
	{ TIER_LL_WARN, TIER_SS_ALL, TIER_LL_WARN, SS(NVME), 1 },
	{ TIER_LL_WARN, TIER_SS_ALL, TIER_LL_INFO, SS(NVME), 0 },
	{ TIER_LL_WARN, TIER_SS_ALL, TIER_LL_TRACE, SS(NVME), 0 },
	{ TIER_LL_ERROR, TIER_SS_ALL, TIER_LL_WARN, SS(COMMON), 0 },
	{ TIER_LL_ERROR, TIER_SS_ALL, TIER_LL_ERROR, SS(COMMON), 1 },
	{ TIER_LL_TRACE, TIER_SS_ALL, TIER_LL_TRACE, SS(DRAM), 1 },
	{ TIER_LL_DEBUG, TIER_SS_ALL, TIER_LL_TRACE, SS(DRAM), 0 },
	{ TIER_LL_DEBUG, SS(NVME) | SS(PREFETCH), TIER_LL_INFO, SS(NVME), 1 },
	{ TIER_LL_DEBUG, SS(NVME) | SS(PREFETCH), TIER_LL_INFO, SS(PREFETCH), 1 },
	{ TIER_LL_DEBUG, SS(NVME) | SS(PREFETCH), TIER_LL_INFO, SS(DRAM), 0 },
	/* The mask applies to errors too. */
	{ TIER_LL_DEBUG, SS(NVME), TIER_LL_ERROR, SS(DRAM), 0 },
	{ TIER_LL_INFO, TIER_SS_ALL & ~SS(NVME), TIER_LL_INFO, SS(NVME), 0 },
	{ TIER_LL_INFO, TIER_SS_ALL & ~SS(NVME), TIER_LL_INFO, SS(STORE), 1 },
	{ TIER_LL_TRACE, TIER_SS_ALL, TIER_LL_ERROR, 0, 0 },
	{ TIER_LL_TRACE, 0, TIER_LL_ERROR, SS(COMMON), 0 },
};

START_TEST(log_enabled)
{
	const struct enabled_case *c = &enabled_cases[_i];

	set_log(c->set_level, c->set_mask);
	ck_assert_msg(ts_log_enabled(c->level, c->ss) == (c->want != 0),
		      "level %d mask %#x: enabled(%d, %#x) should be %d", c->set_level,
		      c->set_mask, c->level, c->ss, c->want);
}
END_TEST

/* ---------------------------------------------------------- line format */

struct format_case {
	int level;
	uint32_t ss;
	const char *prefix;   /* after "tierstore[PID] " */
	int fileline;         /* carries " (test_log.c:LINE)" */
};

static const struct format_case format_cases[] = {
	{ TIER_LL_ERROR, SS(COMMON), "error common: ", 1 },
	{ TIER_LL_WARN, SS(NVME), "warn nvme: ", 1 },
	{ TIER_LL_INFO, SS(DRAM), "info dram: ", 0 },
	{ TIER_LL_DEBUG, SS(PREFETCH), "debug prefetch: ", 0 },
	{ TIER_LL_TRACE, SS(TOOLS), "trace tools: ", 0 },
};

START_TEST(line_format)
{
	const struct format_case *c = &format_cases[_i];
	char want[256];
	int line;

	set_log(TIER_LL_TRACE, TIER_SS_ALL);
	line = __LINE__ + 1;
	TIER_LOG(c->level, c->ss, "queue %d is %s", 3, "stuck");
	if (c->fileline)
		snprintf(want, sizeof(want), "tierstore[%d] %squeue 3 is stuck (test_log.c:%d)",
			 (int)getpid(), c->prefix, line);
	else
		snprintf(want, sizeof(want), "tierstore[%d] %squeue 3 is stuck",
			 (int)getpid(), c->prefix);
	ck_assert_int_eq(g_cap.n, 1);
	ck_assert_str_eq(g_cap.line[0], want);
	ck_assert_int_eq(g_cap.level[0], c->level);
	ck_assert_uint_eq(g_cap.ss[0], c->ss);
}
END_TEST

/* The level macros, with the default level (warn). */
START_TEST(warn_macro_format)
{
	char want[256];
	int line;

	line = __LINE__ + 1;
	TIER_WARN(TIER_SS_NVME, "device %s: %d%% full", "nvme0n1", 97);
	snprintf(want, sizeof(want), "tierstore[%d] warn nvme: device nvme0n1: 97%% full (test_log.c:%d)",
		 (int)getpid(), line);
	ck_assert_int_eq(g_cap.n, 1);
	ck_assert_str_eq(g_cap.line[0], want);
	ck_assert_int_eq(g_cap.level[0], TIER_LL_WARN);
}
END_TEST

static int g_evaluated;

static int side_effect(void)
{
	return ++g_evaluated;
}

START_TEST(disabled_produces_nothing)
{
	g_evaluated = 0;
	/* Below the level. */
	set_log(TIER_LL_WARN, TIER_SS_ALL);
	TIER_INFO(TIER_SS_NVME, "info %d", side_effect());
	TIER_DEBUG_LOG(TIER_SS_NVME, "debug %d", side_effect());
	TIER_TRACE(TIER_SS_NVME, "trace %d", side_effect());
	/* Outside the mask, even errors. */
	set_log(TIER_LL_TRACE, TIER_SS_NVME);
	TIER_WARN(TIER_SS_DRAM, "warn %d", side_effect());
	TIER_ERROR(TIER_SS_DRAM, "error %d", side_effect());
	TIER_INFO(TIER_SS_PREFETCH, "info %d", side_effect());
	ck_assert_int_eq(g_cap.n, 0);
	ck_assert_int_eq(g_evaluated, 0);
	/* Enabled: one line, arguments evaluated once. */
	TIER_INFO(TIER_SS_NVME, "info %d", side_effect());
	ck_assert_int_eq(g_cap.n, 1);
	ck_assert_int_eq(g_evaluated, 1);
	ck_assert_ptr_nonnull(strstr(g_cap.line[0], " info nvme: info 1"));
}
END_TEST

/* A message longer than the line buffer is cut, never overflows. */
START_TEST(long_message_cut)
{
	static char big[5000];
	char prefix[64];

	memset(big, 'z', sizeof(big) - 1);
	TIER_WARN(TIER_SS_STORE, "%s", big);
	ck_assert_int_eq(g_cap.n, 1);
	snprintf(prefix, sizeof(prefix), "tierstore[%d] warn store: zzz", (int)getpid());
	ck_assert_int_eq(strncmp(g_cap.line[0], prefix, strlen(prefix)), 0);
	ck_assert_uint_gt(strlen(g_cap.line[0]), 1000);
	ck_assert_uint_lt(strlen(g_cap.line[0]), 2048);
}
END_TEST

/* ------------------------------------------------------------- stderr */

/* Points stderr at a fresh temporary file; returns the saved descriptor. */
static int stderr_to(FILE *f)
{
	int saved;

	fflush(stderr);
	saved = dup(STDERR_FILENO);
	ck_assert_int_ge(saved, 0);
	ck_assert_int_ge(dup2(fileno(f), STDERR_FILENO), 0);
	return saved;
}

static void stderr_restore(int saved)
{
	fflush(stderr);
	ck_assert_int_ge(dup2(saved, STDERR_FILENO), 0);
	close(saved);
}

START_TEST(stderr_output)
{
	FILE *f = tmpfile();
	char got[512], want[256];
	int saved, line;

	ck_assert_ptr_nonnull(f);
	ts_log_set_sink(NULL, NULL);
	saved = stderr_to(f);
	line = __LINE__ + 1;
	TIER_ERROR(TIER_SS_HBM, "no device %d", 7);
	TIER_INFO(TIER_SS_HBM, "not shown");
	stderr_restore(saved);

	rewind(f);
	snprintf(want, sizeof(want), "tierstore[%d] error hbm: no device 7 (test_log.c:%d)\n",
		 (int)getpid(), line);
	ck_assert_ptr_nonnull(fgets(got, sizeof(got), f));
	ck_assert_str_eq(got, want);
	ck_assert_ptr_null(fgets(got, sizeof(got), f));
	fclose(f);
	ck_assert_int_eq(g_cap.n, 0);
}
END_TEST

#define LOG_THREADS 4
#define PAD "padding-padding-padding-padding-padding-padding-padding"
#define LOG_LINES 250

static void *log_thread(void *v)
{
	unsigned id = (unsigned)(uintptr_t)v;

	for (int i = 0; i < LOG_LINES; i++)
		TIER_WARN(TIER_SS_STORE, "thread %u line %d %s", id, i, PAD);
	return NULL;
}

/* Lines from several threads come out whole, one per message. */
START_TEST(stderr_lines_whole)
{
	FILE *f = tmpfile();
	pthread_t th[LOG_THREADS];
	int next[LOG_THREADS] = { 0 };
	char got[512], prefix[64];
	int saved, lines = 0;

	ck_assert_ptr_nonnull(f);
	ts_log_set_sink(NULL, NULL);
	saved = stderr_to(f);
	for (unsigned i = 0; i < LOG_THREADS; i++)
		ck_assert_int_eq(pthread_create(&th[i], NULL, log_thread, (void *)(uintptr_t)i), 0);
	for (unsigned i = 0; i < LOG_THREADS; i++)
		pthread_join(th[i], NULL);
	stderr_restore(saved);

	rewind(f);
	snprintf(prefix, sizeof(prefix), "tierstore[%d] warn store: thread ", (int)getpid());
	while (fgets(got, sizeof(got), f)) {
		unsigned id;
		int n, consumed = 0;

		ck_assert_msg(strncmp(got, prefix, strlen(prefix)) == 0, "mangled line: %s", got);
		ck_assert_int_eq(sscanf(got + strlen(prefix), "%u line %d %n", &id, &n, &consumed), 2);
		ck_assert_uint_lt(id, LOG_THREADS);
		/* Each thread's lines arrive in order, none lost. */
		ck_assert_int_eq(n, next[id]);
		next[id]++;
		ck_assert_msg(strncmp(got + strlen(prefix) + consumed, PAD " (test_log.c:",
				      strlen(PAD " (test_log.c:")) == 0, "mangled line: %s", got);
		ck_assert_msg(got[strlen(got) - 1] == '\n', "line without newline: %s", got);
		lines++;
	}
	fclose(f);
	ck_assert_int_eq(lines, LOG_THREADS * LOG_LINES);
}
END_TEST

static Suite *log_suite(void)
{
	Suite *s = suite_create("log");
	TCase *tc;

	tc = tcase_create("parse");
	tcase_add_loop_test(tc, level_parse, 0, (int)ARRAY_SIZE(level_cases));
	tcase_add_test(tc, level_name);
	tcase_add_loop_test(tc, mask_parse, 0, (int)ARRAY_SIZE(mask_cases));
	tcase_add_test(tc, mask_parse_bad_buffer);
	tcase_add_test(tc, subsys_names);
	suite_add_tcase(s, tc);

	tc = tcase_create("output");
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_loop_test(tc, log_enabled, 0, (int)ARRAY_SIZE(enabled_cases));
	tcase_add_loop_test(tc, line_format, 0, (int)ARRAY_SIZE(format_cases));
	tcase_add_test(tc, warn_macro_format);
	tcase_add_test(tc, disabled_produces_nothing);
	tcase_add_test(tc, long_message_cut);
	tcase_add_test(tc, stderr_output);
	tcase_add_test(tc, stderr_lines_whole);
	suite_add_tcase(s, tc);

	return s;
}

int main(void)
{
	return t_run_suite(log_suite());
}
