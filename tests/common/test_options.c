/*
 * test_options.c - the run-time options table (common/options.c), driven
 * through the environment with setenv() + ts_options_reload().
 *
 * Covers:
 *  - a valid value for each option type (enum, subsystem list, string,
 *    integer, percentage with and without '%', size) changes the value,
 *    marks it as coming from the environment, and reaches the logger for
 *    TIER_LOG / TIER_LOG_SUBSYS;
 *  - an invalid value keeps the default and warns once, the warning naming
 *    the variable, the bad value and the reason; several bad values warn
 *    once each; TIER_LOG=error silences the warnings;
 *  - TIER_LOG=info logs each value taken from the environment, and
 *    TIER_LOG=debug prints the whole options table, both on reload and
 *    when the variable is set as the library loads (a fresh process, which
 *    must neither deadlock nor lose the table);
 *  - tier_options_print(): every variable, its type, value and source
 *    ("env" or "default"), and -EIO on a stream that cannot be written;
 *  - values are copied (a later setenv without reload changes nothing) and
 *    unsetting a variable restores the default on reload.
 * Check forks each test, so the environment does not leak between tests;
 * each test still unsets what it set.
 */
#include "config.h"

#include <check.h>
#include <ctype.h>
#include <errno.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/error.h"
#include "common/log.h"
#include "common/options.h"
#include "t_helpers.h"

#define SS(id) (1u << TIER_SSB_##id)

/* ------------------------------------------------------------- the sink */

#define CAP_LINES 32
#define CAP_LEN 4096

struct capture {
	int n;
	int level[CAP_LINES];
	char line[CAP_LINES][CAP_LEN];
};

static struct capture g_cap;

static void capture_sink(int level, uint32_t ss, const char *line, void *arg)
{
	struct capture *c = arg;

	(void)ss;
	if (c->n < CAP_LINES) {
		c->level[c->n] = level;
		snprintf(c->line[c->n], CAP_LEN, "%s", line);
	}
	c->n++;
}

/* Number of captured lines at @level containing every non-NULL needle. */
static int cap_count(int level, const char *a, const char *b, const char *c)
{
	int found = 0;

	for (int i = 0; i < g_cap.n && i < CAP_LINES; i++) {
		if (g_cap.level[i] != level)
			continue;
		if ((a && !strstr(g_cap.line[i], a)) || (b && !strstr(g_cap.line[i], b)) ||
		    (c && !strstr(g_cap.line[i], c)))
			continue;
		found++;
	}
	return found;
}

static void unset_all(void)
{
	for (int i = 0; i < TIER_OPT__COUNT; i++)
		unsetenv(ts_opt_env((enum ts_opt_id)i));
}

/* Every test starts from the defaults, whatever the caller's environment. */
static void setup(void)
{
	unset_all();
	ts_log_set_sink(capture_sink, &g_cap);
	ts_options_reload();
	g_cap.n = 0;
}

static void teardown(void)
{
	unset_all();
	ts_options_reload();
	ts_log_set_sink(NULL, NULL);
}

static void reload_with(const char *env, const char *val)
{
	ck_assert_int_eq(setenv(env, val, 1), 0);
	g_cap.n = 0;
	ts_options_reload();
}

/* Everything the accessors return for @id, to compare before and after. */
struct opt_value {
	long long i;
	double d;
	uint64_t size;
	char s[1024];
	int from_env;
};

static void opt_get(enum ts_opt_id id, struct opt_value *v)
{
	v->i = ts_opt_int(id);
	v->d = ts_opt_percent(id);
	v->size = ts_opt_size(id);
	snprintf(v->s, sizeof(v->s), "%s", ts_opt_str(id));
	v->from_env = ts_opt_from_env(id);
}

/* The whole table as tier_options_print() writes it (malloc'd). */
static char *print_table(void)
{
	char *buf = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&buf, &len);

	ck_assert_ptr_nonnull(f);
	ck_assert_int_eq(tier_options_print(f), 0);
	ck_assert_int_eq(fclose(f), 0);
	return buf;
}

/* The row of @table for variable @env, split into its first four columns. */
struct row {
	char env[64], type[16], value[1024], source[16];
};

static int find_row(const char *table, const char *env, struct row *r)
{
	const char *p = table;

	while (*p) {
		size_t n = strcspn(p, "\n");
		char line[2048];

		snprintf(line, sizeof(line), "%.*s", (int)n, p);
		if (sscanf(line, "%63s %15s %1023s %15s", r->env, r->type, r->value, r->source) == 4 &&
		    strcmp(r->env, env) == 0)
			return 1;
		p += n;
		if (*p == '\n')
			p++;
	}
	return 0;
}

/* ---------------------------------------------------------- valid values */

enum kind { K_INT, K_PERCENT, K_SIZE, K_STR };

struct env_ok {
	const char *env, *val;
	enum ts_opt_id id;
	enum kind kind;
	long long i;          /* K_INT: ts_opt_int() (enum index, mask, int) */
	double d;             /* K_PERCENT */
	unsigned long long size;  /* K_SIZE */
	const char *s;        /* K_STR */
};

static const struct env_ok env_ok_cases[] = {
	{ "TIER_LOG", "debug", TIER_OPT_LOG, K_INT, TIER_LL_DEBUG, 0, 0, NULL },
	{ "TIER_LOG", "ERROR", TIER_OPT_LOG, K_INT, TIER_LL_ERROR, 0, 0, NULL },
	{ "TIER_LOG", "info", TIER_OPT_LOG, K_INT, TIER_LL_INFO, 0, 0, NULL },
	{ "TIER_LOG", "trace", TIER_OPT_LOG, K_INT, TIER_LL_TRACE, 0, 0, NULL },
	{ "TIER_LOG_SUBSYS", "nvme,dram", TIER_OPT_LOG_SUBSYS, K_INT, SS(NVME) | SS(DRAM), 0, 0, NULL },
	{ "TIER_LOG_SUBSYS", "^nvme", TIER_OPT_LOG_SUBSYS, K_INT, TIER_SS_ALL & ~SS(NVME), 0, 0, NULL },
	{ "TIER_LOG_SUBSYS", "prefetch", TIER_OPT_LOG_SUBSYS, K_INT, SS(PREFETCH), 0, 0, NULL },
	{ "TIER_THREADS", "3", TIER_OPT_THREADS, K_INT, 3, 0, 0, NULL },
	{ "TIER_THREADS", "0", TIER_OPT_THREADS, K_INT, 0, 0, 0, NULL },
	{ "TIER_THREADS", "1024", TIER_OPT_THREADS, K_INT, 1024, 0, 0, NULL },
	{ "TIER_YAML_NODE_LIMIT", "16", TIER_OPT_YAML_NODE_LIMIT, K_INT, 16, 0, 0, NULL },
	{ "TIER_DRAM_SHARE", "10%", TIER_OPT_DRAM_SHARE, K_PERCENT, 0, 10.0, 0, NULL },
	{ "TIER_DRAM_SHARE", "10", TIER_OPT_DRAM_SHARE, K_PERCENT, 0, 10.0, 0, NULL },
	{ "TIER_DRAM_SHARE", "12.5", TIER_OPT_DRAM_SHARE, K_PERCENT, 0, 12.5, 0, NULL },
	{ "TIER_NVME_SHARE", "100%", TIER_OPT_NVME_SHARE, K_PERCENT, 0, 100.0, 0, NULL },
	{ "TIER_NVME_MAX", "1GiB", TIER_OPT_NVME_MAX, K_SIZE, 0, 0, 1ull << 30, NULL },
	{ "TIER_NVME_MAX", "500 GB", TIER_OPT_NVME_MAX, K_SIZE, 0, 0, 500000000000ull, NULL },
	{ "TIER_NVME_MAX", "4096", TIER_OPT_NVME_MAX, K_SIZE, 0, 0, 4096, NULL },
	{ "TIER_DATA", "/x", TIER_OPT_DATA, K_STR, 0, 0, 0, "/x" },
	{ "TIER_MANIFEST", "/etc/tierstore/node.yaml", TIER_OPT_MANIFEST, K_STR, 0, 0, 0,
	  "/etc/tierstore/node.yaml" },
	{ "TIER_SIMD", "avx2,clmul", TIER_OPT_SIMD, K_STR, 0, 0, 0, "avx2,clmul" },
	{ "TIER_GPU_SLOTS", "1", TIER_OPT_GPU_SLOTS, K_INT, 1, 0, 0, NULL },
	{ "TIER_GPU_SLOTS", "8", TIER_OPT_GPU_SLOTS, K_INT, 8, 0, 0, NULL },
	{ "TIER_GPU_GRAD_AHEAD", "on", TIER_OPT_GPU_GRAD_AHEAD, K_INT, 1, 0, 0, NULL },
	{ "TIER_GPU_GRAD_AHEAD", "off", TIER_OPT_GPU_GRAD_AHEAD, K_INT, 0, 0, 0, NULL },
};

START_TEST(env_valid)
{
	const struct env_ok *c = &env_ok_cases[_i];
	char info[256];
	uint32_t mask;
	int level;

	ck_assert_str_eq(ts_opt_env(c->id), c->env);
	ck_assert(!ts_opt_from_env(c->id));
	reload_with(c->env, c->val);

	ck_assert_msg(ts_opt_from_env(c->id), "%s=%s: not marked as from the environment",
		      c->env, c->val);
	switch (c->kind) {
	case K_INT:
		ck_assert_msg(ts_opt_int(c->id) == c->i, "%s=%s: got %lld, want %lld", c->env,
			      c->val, ts_opt_int(c->id), c->i);
		break;
	case K_PERCENT:
		ck_assert_double_eq_tol(ts_opt_percent(c->id), c->d, 1e-9);
		break;
	case K_SIZE:
		ck_assert_uint_eq(ts_opt_size(c->id), c->size);
		break;
	case K_STR:
		ck_assert_str_eq(ts_opt_str(c->id), c->s);
		break;
	}
	/* Only that option came from the environment. */
	for (int i = 0; i < TIER_OPT__COUNT; i++)
		if (i != (int)c->id)
			ck_assert_msg(!ts_opt_from_env((enum ts_opt_id)i), "%s: from env",
				      ts_opt_env((enum ts_opt_id)i));
	/* The log settings reach the logger. */
	level = atomic_load(&ts_log_level_g);
	mask = atomic_load(&ts_log_mask_g);
	if (c->id == TIER_OPT_LOG)
		ck_assert_int_eq(level, c->i);
	if (c->id == TIER_OPT_LOG_SUBSYS)
		ck_assert_uint_eq(mask, (uint32_t)c->i);
	/* A valid value never warns; at info level it is reported. */
	ck_assert_int_eq(cap_count(TIER_LL_WARN, NULL, NULL, NULL), 0);
	ck_assert_int_eq(cap_count(TIER_LL_ERROR, NULL, NULL, NULL), 0);
	snprintf(info, sizeof(info), "%s set by environment to '%s'", c->env, c->val);
	if (level >= TIER_LL_INFO)
		ck_assert_int_eq(cap_count(TIER_LL_INFO, info, NULL, NULL), 1);
	else
		ck_assert_int_eq(g_cap.n, 0);
	unsetenv(c->env);
}
END_TEST

/* -------------------------------------------------------- invalid values */

struct env_bad {
	const char *env, *val;
	enum ts_opt_id id;
	const char *reason;
};

static const struct env_bad env_bad_cases[] = {
	{ "TIER_LOG", "loud", TIER_OPT_LOG, "expected one of error|warn|info|debug|trace" },
	{ "TIER_LOG", "debug2", TIER_OPT_LOG, "expected one of" },
	{ "TIER_THREADS", "-1", TIER_OPT_THREADS, "expected an integer in [0, 1024]" },
	{ "TIER_THREADS", "abc", TIER_OPT_THREADS, "expected an integer in [0, 1024]" },
	{ "TIER_THREADS", "5000", TIER_OPT_THREADS, "expected an integer in [0, 1024]" },
	{ "TIER_THREADS", "1.5", TIER_OPT_THREADS, "expected an integer" },
	{ "TIER_THREADS", "4 ", TIER_OPT_THREADS, "expected an integer" },
	{ "TIER_YAML_NODE_LIMIT", "15", TIER_OPT_YAML_NODE_LIMIT, "[16, 10000000]" },
	{ "TIER_GPU_SLOTS", "0", TIER_OPT_GPU_SLOTS, "expected an integer in [1, 8]" },
	{ "TIER_GPU_SLOTS", "9", TIER_OPT_GPU_SLOTS, "expected an integer in [1, 8]" },
	{ "TIER_GPU_GRAD_AHEAD", "yes", TIER_OPT_GPU_GRAD_AHEAD, "expected one of off|on" },
	{ "TIER_DRAM_SHARE", "150%", TIER_OPT_DRAM_SHARE, "over 100%" },
	{ "TIER_DRAM_SHARE", "150", TIER_OPT_DRAM_SHARE, "over 100%" },
	{ "TIER_DRAM_SHARE", "0", TIER_OPT_DRAM_SHARE, "greater than zero" },
	{ "TIER_DRAM_SHARE", "abc", TIER_OPT_DRAM_SHARE, "not a size" },
	{ "TIER_NVME_SHARE", "-5%", TIER_OPT_NVME_SHARE, "negative" },
	{ "TIER_NVME_MAX", "12XB", TIER_OPT_NVME_MAX, "bad unit" },
	{ "TIER_NVME_MAX", "10%", TIER_OPT_NVME_MAX, "not allowed" },
	{ "TIER_NVME_MAX", "0", TIER_OPT_NVME_MAX, "greater than zero" },
	{ "TIER_NVME_MAX", "99999999PiB", TIER_OPT_NVME_MAX, "too large" },
	{ "TIER_LOG_SUBSYS", "bogus", TIER_OPT_LOG_SUBSYS, "unknown subsystem 'bogus'" },
	{ "TIER_LOG_SUBSYS", "nvme,bogus", TIER_OPT_LOG_SUBSYS, "unknown subsystem 'bogus'" },
};

START_TEST(env_invalid)
{
	const struct env_bad *c = &env_bad_cases[_i];
	struct opt_value before, after;
	char quoted[256];

	opt_get(c->id, &before);
	reload_with(c->env, c->val);
	opt_get(c->id, &after);

	ck_assert_msg(!after.from_env, "%s='%s' was taken", c->env, c->val);
	ck_assert_msg(after.i == before.i && after.d == before.d && after.size == before.size &&
		      strcmp(after.s, before.s) == 0,
		      "%s='%s' changed the value", c->env, c->val);
	/* One warning, naming the variable, the value and the reason. */
	snprintf(quoted, sizeof(quoted), "%s='%s'", c->env, c->val);
	ck_assert_msg(g_cap.n == 1, "%s='%s': %d lines logged", c->env, c->val, g_cap.n);
	ck_assert_int_eq(g_cap.level[0], TIER_LL_WARN);
	ck_assert_msg(cap_count(TIER_LL_WARN, quoted, c->reason, "keeping the default") == 1,
		      "warning '%s' lacks '%s' or '%s'", g_cap.line[0], quoted, c->reason);
	unsetenv(c->env);
}
END_TEST

/* Each bad value warns on its own line; a good one beside them is taken. */
START_TEST(env_several_invalid)
{
	ck_assert_int_eq(setenv("TIER_THREADS", "abc", 1), 0);
	ck_assert_int_eq(setenv("TIER_NVME_MAX", "12XB", 1), 0);
	reload_with("TIER_DATA", "/ok");
	ck_assert_int_eq(g_cap.n, 2);
	ck_assert_int_eq(cap_count(TIER_LL_WARN, "TIER_THREADS='abc'", NULL, NULL), 1);
	ck_assert_int_eq(cap_count(TIER_LL_WARN, "TIER_NVME_MAX='12XB'", NULL, NULL), 1);
	ck_assert_int_eq(ts_opt_int(TIER_OPT_THREADS), 0);
	ck_assert_uint_eq(ts_opt_size(TIER_OPT_NVME_MAX), 64ull << 30);
	ck_assert_str_eq(ts_opt_str(TIER_OPT_DATA), "/ok");
	ck_assert(ts_opt_from_env(TIER_OPT_DATA));
	unset_all();
}
END_TEST

/* A bad TIER_LOG falls back to warn, so bad values beside it still warn. */
START_TEST(env_bad_level_still_warns)
{
	ck_assert_int_eq(setenv("TIER_THREADS", "-1", 1), 0);
	reload_with("TIER_LOG", "loud");
	ck_assert_int_eq(ts_opt_int(TIER_OPT_LOG), TIER_LL_WARN);
	ck_assert_int_eq(cap_count(TIER_LL_WARN, "TIER_LOG='loud'", NULL, NULL), 1);
	ck_assert_int_eq(cap_count(TIER_LL_WARN, "TIER_THREADS='-1'", NULL, NULL), 1);
	unset_all();
}
END_TEST

/* The warnings go out at the level the same environment asks for. */
START_TEST(env_level_error_silences_warnings)
{
	ck_assert_int_eq(setenv("TIER_THREADS", "abc", 1), 0);
	reload_with("TIER_LOG", "error");
	ck_assert_int_eq(g_cap.n, 0);
	ck_assert_int_eq(ts_opt_int(TIER_OPT_THREADS), 0);
	ck_assert(!ts_opt_from_env(TIER_OPT_THREADS));
	unset_all();
}
END_TEST

START_TEST(env_info_reports_values)
{
	ck_assert_int_eq(setenv("TIER_THREADS", "3", 1), 0);
	ck_assert_int_eq(setenv("TIER_NVME_MAX", "abc", 1), 0);
	reload_with("TIER_LOG", "info");
	ck_assert_int_eq(cap_count(TIER_LL_INFO, "TIER_THREADS set by environment to '3'", NULL, NULL), 1);
	ck_assert_int_eq(cap_count(TIER_LL_INFO, "TIER_LOG set by environment to 'info'", NULL, NULL), 1);
	ck_assert_int_eq(cap_count(TIER_LL_WARN, "TIER_NVME_MAX='abc'", NULL, NULL), 1);
	/* Nothing at debug level: the table is printed only from debug on. */
	ck_assert_int_eq(cap_count(TIER_LL_DEBUG, NULL, NULL, NULL), 0);
	unset_all();
}
END_TEST

/* A very long invalid value: the warning still says what happens. */
START_TEST(env_long_invalid_value)
{
	char v[1100];

	memset(v, '9', sizeof(v) - 1);
	v[sizeof(v) - 1] = '\0';
	reload_with("TIER_THREADS", v);
	ck_assert_int_eq(ts_opt_int(TIER_OPT_THREADS), 0);
	ck_assert_int_eq(cap_count(TIER_LL_WARN, "invalid TIER_THREADS=", "...' (",
				   "keeping the default '0'"), 1);
	unsetenv("TIER_THREADS");
}
END_TEST

/* TIER_LOG=debug prints the whole table through the logger, a line a row. */
START_TEST(env_debug_prints_table)
{
	char head[64];
	int idx = -1;

	reload_with("TIER_LOG", "debug");
	snprintf(head, sizeof(head), "tierstore[%d] debug common: options:", (int)getpid());
	for (int i = 0; i < g_cap.n && i < CAP_LINES; i++)
		if (g_cap.level[i] == TIER_LL_DEBUG && strcmp(g_cap.line[i], head) == 0)
			idx = i;
	ck_assert_msg(idx >= 0, "no options table logged (%d lines)", g_cap.n);
	ck_assert_int_lt(idx + 1, g_cap.n);
	ck_assert_ptr_nonnull(strstr(g_cap.line[idx + 1], "SOURCE"));
	ck_assert_ptr_nonnull(strstr(g_cap.line[idx + 1], "DESCRIPTION"));
	for (int i = 0; i < TIER_OPT__COUNT; i++) {
		char env[64];
		bool found = false;

		snprintf(env, sizeof(env), "debug common:   %s ", ts_opt_env((enum ts_opt_id)i));
		for (int j = idx + 1; j < g_cap.n && j < CAP_LINES; j++)
			found |= strstr(g_cap.line[j], env) != NULL;
		ck_assert_msg(found, "the logged table lacks %s", ts_opt_env((enum ts_opt_id)i));
	}
	unsetenv("TIER_LOG");
}
END_TEST

/* Set in the environment of this program re-run by startup_debug_table. */
#define CHILD_ENV "TIER_TEST_OPTIONS_CHILD"

/*
 * TIER_LOG=debug from the start: the library reads the table while it
 * loads (under pthread_once) and prints it to stderr then.  Runs this
 * program again with that environment; a deadlock shows as a timeout.
 */
START_TEST(startup_debug_table)
{
	char out[16384];
	size_t len = 0;
	ssize_t r;
	int fds[2], status;
	pid_t pid;

	ck_assert_int_eq(pipe(fds), 0);
	pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		dup2(fds[1], STDERR_FILENO);
		close(fds[0]);
		close(fds[1]);
		setenv("TIER_LOG", "debug", 1);
		setenv(CHILD_ENV, "1", 1);
		execl("/proc/self/exe", "test_options", (char *)NULL);
		_exit(127);
	}
	close(fds[1]);
	while (len < sizeof(out) - 1 &&
	       (r = read(fds[0], out + len, sizeof(out) - 1 - len)) > 0)
		len += (size_t)r;
	out[len] = '\0';
	close(fds[0]);
	ck_assert_int_eq(waitpid(pid, &status, 0), pid);
	ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0,
		      "child status %#x; its stderr:\n%s", status, out);
	ck_assert_msg(strstr(out, " debug common: options:\n") != NULL, "no table in:\n%s", out);
	ck_assert_ptr_nonnull(strstr(out, "TIER_LOG set by environment to 'debug'"));
	for (int i = 0; i < TIER_OPT__COUNT; i++) {
		char env[64];

		snprintf(env, sizeof(env), " debug common:   %s ", ts_opt_env((enum ts_opt_id)i));
		ck_assert_msg(strstr(out, env) != NULL, "the table lacks %s:\n%s", env, out);
	}
}
END_TEST

/* Strings are copied: a later setenv does not reach tierstore until reload. */
START_TEST(env_value_copied)
{
	reload_with("TIER_DATA", "/x");
	ck_assert_int_eq(setenv("TIER_DATA", "/y", 1), 0);
	ck_assert_str_eq(ts_opt_str(TIER_OPT_DATA), "/x");
	ts_options_reload();
	ck_assert_str_eq(ts_opt_str(TIER_OPT_DATA), "/y");
	unsetenv("TIER_DATA");
}
END_TEST

START_TEST(env_unset_restores_default)
{
	reload_with("TIER_THREADS", "3");
	ck_assert_int_eq(ts_opt_int(TIER_OPT_THREADS), 3);
	unsetenv("TIER_THREADS");
	ts_options_reload();
	ck_assert_int_eq(ts_opt_int(TIER_OPT_THREADS), 0);
	ck_assert(!ts_opt_from_env(TIER_OPT_THREADS));
}
END_TEST

/* -------------------------------------------------------------- the table */

struct default_row {
	enum ts_opt_id id;
	const char *name, *env, *type, *value;
};

static const struct default_row default_rows[] = {
	{ TIER_OPT_LOG, "log", "TIER_LOG", "enum", "warn" },
	{ TIER_OPT_LOG_SUBSYS, "log_subsys", "TIER_LOG_SUBSYS", "subsys", "all" },
	{ TIER_OPT_MANIFEST, "manifest", "TIER_MANIFEST", "string", "\"\"" },
	{ TIER_OPT_DATA, "data", "TIER_DATA", "string", "./tier-data" },
	{ TIER_OPT_THREADS, "threads", "TIER_THREADS", "int", "0" },
	{ TIER_OPT_DRAM_SHARE, "dram_share", "TIER_DRAM_SHARE", "percent", "25%" },
	{ TIER_OPT_NVME_SHARE, "nvme_share", "TIER_NVME_SHARE", "percent", "50%" },
	{ TIER_OPT_NVME_MAX, "nvme_max", "TIER_NVME_MAX", "size", "68719476736" },
	{ TIER_OPT_YAML_NODE_LIMIT, "yaml_node_limit", "TIER_YAML_NODE_LIMIT", "int", "10000" },
	{ TIER_OPT_FAULT, "fault", "TIER_FAULT", "string", "\"\"" },
	{ TIER_OPT_SIMD, "simd", "TIER_SIMD", "string", "auto" },
	{ TIER_OPT_TRACE, "trace", "TIER_TRACE", "string", "\"\"" },
	{ TIER_OPT_GPU_SLOTS, "gpu_slots", "TIER_GPU_SLOTS", "int", "3" },
	{ TIER_OPT_GPU_GRAD_AHEAD, "gpu_grad_ahead", "TIER_GPU_GRAD_AHEAD", "enum", "off" },
	{ TIER_OPT_STATS, "stats", "TIER_STATS", "enum", "on" },
	{ TIER_OPT_STATS_DIR, "stats_dir", "TIER_STATS_DIR", "string", "\"\"" },
	{ TIER_OPT_STATS_INTERVAL, "stats_interval", "TIER_STATS_INTERVAL", "int", "250" },
};

/* The table lists every option with its default, type and source. */
START_TEST(print_defaults)
{
	const struct default_row *c = &default_rows[_i];
	char *table = print_table();
	struct row r;

	ck_assert_int_eq((int)ARRAY_SIZE(default_rows), TIER_OPT__COUNT);
	ck_assert_str_eq(ts_opt_name(c->id), c->name);
	ck_assert_str_eq(ts_opt_env(c->id), c->env);
	ck_assert_msg(find_row(table, c->env, &r), "no row for %s in:\n%s", c->env, table);
	ck_assert_str_eq(r.type, c->type);
	ck_assert_str_eq(r.value, c->value);
	ck_assert_str_eq(r.source, "default");
	free(table);
}
END_TEST

START_TEST(print_header_and_rows)
{
	char *table = print_table();
	int lines = 0;

	ck_assert_int_eq(strncmp(table, "ENV ", 4), 0);
	ck_assert_ptr_nonnull(strstr(table, "TYPE"));
	ck_assert_ptr_nonnull(strstr(table, "VALUE"));
	ck_assert_ptr_nonnull(strstr(table, "SOURCE"));
	ck_assert_ptr_nonnull(strstr(table, "DESCRIPTION"));
	for (const char *p = table; *p; p++)
		lines += *p == '\n';
	ck_assert_int_eq(lines, TIER_OPT__COUNT + 1);
	free(table);
}
END_TEST

/* Values from the environment show as "env", in their printed form. */
START_TEST(print_env_sources)
{
	static const struct { const char *env, *val, *shown; } set[] = {
		{ "TIER_THREADS", "3", "3" },
		{ "TIER_NVME_MAX", "1GiB", "1073741824" },
		{ "TIER_DRAM_SHARE", "10", "10%" },
		{ "TIER_LOG_SUBSYS", "dram,nvme", "nvme,dram" },
		{ "TIER_DATA", "/x", "/x" },
	};
	char *table;
	struct row r;

	for (size_t i = 0; i < ARRAY_SIZE(set); i++)
		ck_assert_int_eq(setenv(set[i].env, set[i].val, 1), 0);
	ts_options_reload();
	table = print_table();
	for (int i = 0; i < TIER_OPT__COUNT; i++) {
		const char *env = ts_opt_env((enum ts_opt_id)i);
		const char *shown = NULL;

		for (size_t j = 0; j < ARRAY_SIZE(set); j++)
			if (strcmp(set[j].env, env) == 0)
				shown = set[j].shown;
		ck_assert_msg(find_row(table, env, &r), "no row for %s", env);
		ck_assert_str_eq(r.source, shown ? "env" : "default");
		if (shown)
			ck_assert_str_eq(r.value, shown);
	}
	free(table);
	unset_all();
}
END_TEST

START_TEST(print_write_error)
{
	FILE *f = fopen("/dev/null", "r");

	ck_assert_ptr_nonnull(f);
	ts_err_clear();
	ck_assert_int_eq(tier_options_print(f), -EIO);
	ck_assert_ptr_nonnull(strstr(tier_last_error(), "options table"));
	fclose(f);
}
END_TEST

/* Every variable is TIER_ and the option's name in upper case. */
START_TEST(env_names_follow_option_names)
{
	for (int i = 0; i < TIER_OPT__COUNT; i++) {
		const char *name = ts_opt_name((enum ts_opt_id)i);
		char want[64];
		size_t k;

		k = (size_t)snprintf(want, sizeof(want), "TIER_");
		for (const char *p = name; *p && k + 1 < sizeof(want); p++)
			want[k++] = (char)toupper((unsigned char)*p);
		want[k] = '\0';
		ck_assert_str_eq(ts_opt_env((enum ts_opt_id)i), want);
	}
}
END_TEST

static Suite *options_suite(void)
{
	Suite *s = suite_create("options");
	TCase *tc;

	tc = tcase_create("env");
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_loop_test(tc, env_valid, 0, (int)ARRAY_SIZE(env_ok_cases));
	tcase_add_loop_test(tc, env_invalid, 0, (int)ARRAY_SIZE(env_bad_cases));
	tcase_add_test(tc, env_several_invalid);
	tcase_add_test(tc, env_bad_level_still_warns);
	tcase_add_test(tc, env_level_error_silences_warnings);
	tcase_add_test(tc, env_info_reports_values);
	tcase_add_test(tc, env_debug_prints_table);
	tcase_add_test(tc, env_long_invalid_value);
	tcase_add_test(tc, startup_debug_table);
	tcase_add_test(tc, env_value_copied);
	tcase_add_test(tc, env_unset_restores_default);
	suite_add_tcase(s, tc);

	tc = tcase_create("print");
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_loop_test(tc, print_defaults, 0, (int)ARRAY_SIZE(default_rows));
	tcase_add_test(tc, print_header_and_rows);
	tcase_add_test(tc, print_env_sources);
	tcase_add_test(tc, print_write_error);
	tcase_add_test(tc, env_names_follow_option_names);
	suite_add_tcase(s, tc);

	return s;
}

int main(void)
{
	/* Re-run by startup_debug_table: the table is already printed. */
	if (getenv(CHILD_ENV))
		return ts_opt_int(TIER_OPT_LOG) == TIER_LL_DEBUG ? 0 : 1;
	return t_run_suite(options_suite());
}
