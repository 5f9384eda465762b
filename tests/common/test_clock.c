/*
 * test_clock.c - the monotonic clock helper: it never goes backwards, it
 * advances, and ts_sleep_ns() sleeps at least as long as asked (only the
 * lower bound is asserted: a loaded machine may sleep longer).
 */
#include "config.h"

#include <check.h>
#include <stdint.h>
#include <time.h>

#include "common/clock.h"
#include "t_helpers.h"

START_TEST(monotonic_never_backwards)
{
	uint64_t prev = ts_now_ns();

	for (int i = 0; i < 100000; i++) {
		uint64_t now = ts_now_ns();

		ck_assert_uint_ge(now, prev);
		prev = now;
	}
}
END_TEST

static const uint64_t sleep_ns[] = { 0, 1000, 1000000, 20000000 };

START_TEST(sleep_at_least)
{
	uint64_t t0 = ts_now_ns();

	ts_sleep_ns(sleep_ns[_i]);
	ck_assert_uint_ge(ts_now_ns() - t0, sleep_ns[_i]);
}
END_TEST

START_TEST(matches_clock_monotonic)
{
	struct timespec ts;
	uint64_t a, b, c;

	a = ts_now_ns();
	clock_gettime(CLOCK_MONOTONIC, &ts);
	b = (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
	c = ts_now_ns();
	ck_assert_uint_le(a, b);
	ck_assert_uint_le(b, c);
	ck_assert(ts_ns_to_s(1500000000ull) == 1.5);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("clock");
	TCase *tc = tcase_create("clock");

	tcase_add_test(tc, monotonic_never_backwards);
	tcase_add_loop_test(tc, sleep_at_least, 0, (int)ARRAY_SIZE(sleep_ns));
	tcase_add_test(tc, matches_clock_monotonic);
	suite_add_tcase(s, tc);
	return t_run_suite(s);
}
