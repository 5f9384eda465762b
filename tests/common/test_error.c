/*
 * test_error.c - the error convention (common/error.c): tier_strerror() and
 * the thread-local detail message.
 *
 * Covers:
 *  - tier_strerror() for negative and positive errno values, 0, and codes
 *    libc does not know ("Unknown error N");
 *  - ts_err()/ts_verr() recording the detail and returning the code,
 *    ts_err_append() building a multi-line message, ts_err_prefix()
 *    adding context, ts_err_clear();
 *  - truncation at TIER_ERR_MAX: a message that does not fit is cut and
 *    ends with "...", one that just fits is kept whole;
 *  - that the detail message (and tier_strerror's buffer) is per thread:
 *    threads setting different messages at the same time each read back
 *    their own.
 */
#include "config.h"

#include <check.h>
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "t_helpers.h"

/* A run of @len copies of @c, NUL-terminated (static: one at a time). */
static const char *run_of(char c, size_t len)
{
	static char buf[3 * TIER_ERR_MAX];

	ck_assert_uint_lt(len, sizeof(buf));
	memset(buf, c, len);
	buf[len] = '\0';
	return buf;
}

static int ends_with(const char *s, const char *suffix)
{
	size_t ls = strlen(s), lx = strlen(suffix);

	return ls >= lx && strcmp(s + ls - lx, suffix) == 0;
}

/* -------------------------------------------------------- tier_strerror */

struct strerror_case {
	int err;
	const char *want;
};

static const struct strerror_case strerror_cases[] = {
	{ 0, "Success" },
	{ -EIO, "Input/output error" },
	{ EIO, "Input/output error" },
	{ -ENOMEM, "Cannot allocate memory" },
	{ ENOMEM, "Cannot allocate memory" },
	{ -EINVAL, "Invalid argument" },
	{ -ENOENT, "No such file or directory" },
	{ -ENOSPC, "No space left on device" },
	{ -EAGAIN, "Resource temporarily unavailable" },
	{ -9999, "Unknown error 9999" },
	{ 9999, "Unknown error 9999" },
	{ -4096, "Unknown error 4096" },
	{ -INT_MAX, "Unknown error 2147483647" },
	{ INT_MAX, "Unknown error 2147483647" },
	{ INT_MIN, "Unknown error -2147483648" },   /* not negated: no overflow */
};

START_TEST(strerror_table)
{
	const struct strerror_case *c = &strerror_cases[_i];
	const char *s = tier_strerror(c->err);

	ck_assert_ptr_nonnull(s);
	ck_assert_msg(strcmp(s, c->want) == 0, "tier_strerror(%d) = '%s', want '%s'",
		      c->err, s, c->want);
}
END_TEST

/* The unknown-code text lives in a buffer reused by the next call. */
START_TEST(strerror_unknown_reused)
{
	ck_assert_str_eq(tier_strerror(-9999), "Unknown error 9999");
	ck_assert_str_eq(tier_strerror(-9998), "Unknown error 9998");
	ck_assert_str_eq(tier_strerror(-EIO), "Input/output error");
	ck_assert_str_eq(tier_strerror(-9997), "Unknown error 9997");
}
END_TEST

/* ------------------------------------------------------- detail message */

START_TEST(err_sets_and_returns)
{
	ts_err_clear();
	ck_assert_str_eq(tier_last_error(), "");
	ck_assert_int_eq(ts_err(-EINVAL, "bad %s %d", "thing", 3), -EINVAL);
	ck_assert_str_eq(tier_last_error(), "bad thing 3");
	/* A second failure replaces the first. */
	ck_assert_int_eq(ts_err(-ENOENT, "%s: not found", "x.yaml"), -ENOENT);
	ck_assert_str_eq(tier_last_error(), "x.yaml: not found");
	ck_assert_int_eq(ts_err(-EIO, "%s", ""), -EIO);
	ck_assert_str_eq(tier_last_error(), "");
}
END_TEST

static int call_verr(int err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static int call_verr(int err, const char *fmt, ...)
{
	va_list ap;
	int rc;

	va_start(ap, fmt);
	rc = ts_verr(err, fmt, ap);
	va_end(ap);
	return rc;
}

START_TEST(verr_sets_and_returns)
{
	ck_assert_int_eq(call_verr(-ENOSPC, "%s is full (%u%%)", "nvme0", 100u), -ENOSPC);
	ck_assert_str_eq(tier_last_error(), "nvme0 is full (100%)");
}
END_TEST

START_TEST(err_clear)
{
	ts_err(-EIO, "something failed");
	ck_assert_str_ne(tier_last_error(), "");
	ts_err_clear();
	ck_assert_str_eq(tier_last_error(), "");
	ts_err_clear();
	ck_assert_str_eq(tier_last_error(), "");
}
END_TEST

START_TEST(err_append_lines)
{
	ts_err(-EINVAL, "m.yaml:1:1: first");
	ts_err_append("m.yaml:%d:%d: second", 2, 5);
	ts_err_append("%s", "m.yaml:9:3: third");
	ck_assert_str_eq(tier_last_error(),
			 "m.yaml:1:1: first\nm.yaml:2:5: second\nm.yaml:9:3: third");
}
END_TEST

/* Appending to an empty message adds no leading newline. */
START_TEST(err_append_to_empty)
{
	char want[256] = "";

	ts_err_clear();
	for (int i = 0; i < 10; i++) {
		char line[32];

		ts_err_append("line %d", i);
		snprintf(line, sizeof(line), "%sline %d", i ? "\n" : "", i);
		strcat(want, line);
	}
	ck_assert_str_eq(tier_last_error(), want);
}
END_TEST

START_TEST(err_prefix)
{
	ts_err(-ENOENT, "open failed");
	ts_err_prefix("%s:%d", "a.yaml", 3);
	ck_assert_str_eq(tier_last_error(), "a.yaml:3: open failed");
	ts_err_prefix("loading");
	ck_assert_str_eq(tier_last_error(), "loading: a.yaml:3: open failed");
	/* a prefix written with its own ": " is not doubled */
	ts_err_prefix("%s: ", "tier_optim_resume");
	ck_assert_str_eq(tier_last_error(), "tier_optim_resume: loading: a.yaml:3: open failed");
}
END_TEST

/* A prefix goes before the first line only. */
START_TEST(err_prefix_multiline)
{
	ts_err(-EINVAL, "one");
	ts_err_append("two");
	ts_err_prefix("ctx");
	ck_assert_str_eq(tier_last_error(), "ctx: one\ntwo");
}
END_TEST

/* ------------------------------------------------------------ truncation */

struct trunc_case {
	size_t len;     /* length of the message recorded */
	int cut;        /* whether it must come back cut with "..." */
};

static const struct trunc_case trunc_cases[] = {
	{ 0, 0 },
	{ 100, 0 },
	{ TIER_ERR_MAX - 2, 0 },
	{ TIER_ERR_MAX - 1, 0 },        /* just fits */
	{ TIER_ERR_MAX, 1 },            /* one byte too long */
	{ TIER_ERR_MAX + 1, 1 },
	{ 2 * TIER_ERR_MAX + 17, 1 },
};

START_TEST(err_truncation)
{
	const struct trunc_case *c = &trunc_cases[_i];
	const char *msg = run_of('a', c->len);
	const char *got;

	ck_assert_int_eq(ts_err(-EIO, "%s", msg), -EIO);
	got = tier_last_error();
	if (!c->cut) {
		ck_assert_str_eq(got, msg);
		return;
	}
	ck_assert_uint_eq(strlen(got), TIER_ERR_MAX - 1);
	ck_assert_msg(ends_with(got, "..."), "a cut message must end with '...'");
	ck_assert_int_eq(strspn(got, "a"), TIER_ERR_MAX - 4);
}
END_TEST

START_TEST(err_append_truncation)
{
	const char *got;

	ts_err(-EINVAL, "%s", run_of('a', 4000));
	ts_err_append("%s", run_of('b', 200));
	got = tier_last_error();
	ck_assert_uint_eq(strlen(got), TIER_ERR_MAX - 1);
	ck_assert(ends_with(got, "..."));
	ck_assert_int_eq(got[3999], 'a');
	ck_assert_int_eq(got[4000], '\n');
	ck_assert_int_eq(got[4001], 'b');
}
END_TEST

/* Once the message is cut, further lines are dropped and the "..." stays. */
START_TEST(err_append_when_full)
{
	char before[TIER_ERR_MAX];

	ts_err(-EINVAL, "%s", run_of('a', 2 * TIER_ERR_MAX));
	memcpy(before, tier_last_error(), sizeof(before));
	ts_err_append("one more line");
	ck_assert_str_eq(tier_last_error(), before);
	ck_assert(ends_with(tier_last_error(), "..."));
}
END_TEST

/*
 * A message a few bytes short of full, not yet cut: a line that does not
 * fit is dropped, and the message says so with "...".
 */
START_TEST(err_append_nearly_full)
{
	for (size_t len = TIER_ERR_MAX - 5; len < TIER_ERR_MAX; len++) {
		char msg[TIER_ERR_MAX];

		memset(msg, 'a', len);
		msg[len] = '\0';
		if (len >= TIER_ERR_MAX - 1)
			msg[TIER_ERR_MAX - 2] = '\0';
		ts_err(-EINVAL, "%s", msg);
		ts_err_append("one more line");
		ck_assert_msg(ends_with(tier_last_error(), "..."), "length %zu: no '...'", len);
		ck_assert_uint_lt(strlen(tier_last_error()), TIER_ERR_MAX);
	}
}
END_TEST

/* Many lines: the message is cut at TIER_ERR_MAX and keeps its first lines. */
START_TEST(err_append_many_lines)
{
	const char *got;

	/* Each line is "problem NNNN: xxxxxxxxxx" = 24 bytes plus a newline. */
	ts_err(-EINVAL, "problem 0000: xxxxxxxxxx");
	for (int i = 1; i < 1000; i++)
		ts_err_append("problem %04d: xxxxxxxxxx", i);
	got = tier_last_error();
	ck_assert_uint_eq(strlen(got), TIER_ERR_MAX - 1);
	ck_assert(ends_with(got, "..."));
	ck_assert_int_eq(strncmp(got, "problem 0000: xxxxxxxxxx\nproblem 0001: ", 39), 0);
}
END_TEST

START_TEST(err_prefix_truncation)
{
	const char *got;

	ts_err(-EIO, "%s", run_of('a', TIER_ERR_MAX - 6));
	ts_err_prefix("context");
	got = tier_last_error();
	ck_assert_uint_eq(strlen(got), TIER_ERR_MAX - 1);
	ck_assert_int_eq(strncmp(got, "context: aaa", 12), 0);
	ck_assert(ends_with(got, "..."));
}
END_TEST

/* ----------------------------------------------------------- per thread */

#define NTHREADS 4
#define ROUNDS 200

static pthread_barrier_t g_barrier;

struct thread_result {
	unsigned id;
	int initial_empty;   /* the message started out "" on the new thread */
	int mismatches;
	char last_bad[128];
};

static void *thread_main(void *v)
{
	struct thread_result *r = v;
	char want[64], want_unknown[64];

	r->initial_empty = tier_last_error()[0] == '\0';
	for (int round = 0; round < ROUNDS; round++) {
		const char *unknown;

		snprintf(want, sizeof(want), "thread %u round %d", r->id, round);
		snprintf(want_unknown, sizeof(want_unknown), "Unknown error %u", 9000 + r->id);
		/* All threads write at once, then all read back. */
		pthread_barrier_wait(&g_barrier);
		ts_err(-(int)(100 + r->id), "thread %u round %d", r->id, round);
		unknown = tier_strerror(-(int)(9000 + r->id));
		pthread_barrier_wait(&g_barrier);
		if (strcmp(tier_last_error(), want) != 0 || strcmp(unknown, want_unknown) != 0) {
			r->mismatches++;
			snprintf(r->last_bad, sizeof(r->last_bad), "%s / %s",
				 tier_last_error(), unknown);
		}
	}
	return NULL;
}

START_TEST(err_thread_local)
{
	pthread_t th[NTHREADS];
	struct thread_result res[NTHREADS];

	ts_err(-EIO, "main thread's message");
	ck_assert_int_eq(pthread_barrier_init(&g_barrier, NULL, NTHREADS), 0);
	for (unsigned i = 0; i < NTHREADS; i++) {
		memset(&res[i], 0, sizeof(res[i]));
		res[i].id = i;
		ck_assert_int_eq(pthread_create(&th[i], NULL, thread_main, &res[i]), 0);
	}
	for (unsigned i = 0; i < NTHREADS; i++)
		ck_assert_int_eq(pthread_join(th[i], NULL), 0);
	pthread_barrier_destroy(&g_barrier);
	for (unsigned i = 0; i < NTHREADS; i++) {
		ck_assert_msg(res[i].initial_empty, "thread %u did not start with an empty message", i);
		ck_assert_msg(res[i].mismatches == 0, "thread %u read back another message %d times: %s",
			      i, res[i].mismatches, res[i].last_bad);
	}
	ck_assert_str_eq(tier_last_error(), "main thread's message");
}
END_TEST

static Suite *error_suite(void)
{
	Suite *s = suite_create("error");
	TCase *tc;

	tc = tcase_create("strerror");
	tcase_add_loop_test(tc, strerror_table, 0, (int)ARRAY_SIZE(strerror_cases));
	tcase_add_test(tc, strerror_unknown_reused);
	suite_add_tcase(s, tc);

	tc = tcase_create("detail");
	tcase_add_test(tc, err_sets_and_returns);
	tcase_add_test(tc, verr_sets_and_returns);
	tcase_add_test(tc, err_clear);
	tcase_add_test(tc, err_append_lines);
	tcase_add_test(tc, err_append_to_empty);
	tcase_add_test(tc, err_prefix);
	tcase_add_test(tc, err_prefix_multiline);
	suite_add_tcase(s, tc);

	tc = tcase_create("truncation");
	tcase_add_loop_test(tc, err_truncation, 0, (int)ARRAY_SIZE(trunc_cases));
	tcase_add_test(tc, err_append_truncation);
	tcase_add_test(tc, err_append_when_full);
	tcase_add_test(tc, err_append_nearly_full);
	tcase_add_test(tc, err_append_many_lines);
	tcase_add_test(tc, err_prefix_truncation);
	suite_add_tcase(s, tc);

	tc = tcase_create("threads");
	tcase_add_test(tc, err_thread_local);
	suite_add_tcase(s, tc);

	return s;
}

int main(void)
{
	return t_run_suite(error_suite());
}
