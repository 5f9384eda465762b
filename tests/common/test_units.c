/*
 * test_units.c - the unit parsers shared by the manifest and the options
 * table (common/units.c).
 *
 * Covers:
 *  - ts_size_parse(): every accepted spelling (binary, decimal and bare
 *    units, fractions, spaces, case, percentages) with its exact byte value,
 *    and every refusal (negative, zero, bad unit, not a number, fractional
 *    bytes, a percentage where none is allowed, over 100%, overflow) with
 *    its errno and a reason that names both the problem and the input;
 *  - ts_int_parse(): strict whole-string base-10 parsing and range limits;
 *  - ts_size_fmt(): the human-readable form, and that it parses back;
 *  - ts_edit_distance(): Levenshtein distance, case-insensitive, capped;
 *  - the element types (common/dtype.c): tier_dtype_size, _name and _parse
 *    for every dtype, and their refusals;
 *  - the version (common/version.c): tier_version_number against the
 *    header's, and tier_version_check's answer for every kind of header
 *    version (same, older and newer minor, other major).
 */
#include "config.h"

#include <check.h>
#include <errno.h>
#include <limits.h>
#include <locale.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "common/units.h"
#include "t_helpers.h"

#define KiB (1ull << 10)
#define MiB (1ull << 20)
#define GiB (1ull << 30)
#define TiB (1ull << 40)
#define PiB (1ull << 50)

/* ------------------------------------------------------ ts_size_parse */

struct size_ok {
	const char *in;
	bool allow_percent;
	bool is_percent;
	uint64_t bytes;     /* when !is_percent */
	double percent;     /* when is_percent */
};

static const struct size_ok size_ok_cases[] = {
	{ "64GiB", false, false, 64 * GiB, 0 },
	{ "512MiB", false, false, 512 * MiB, 0 },
	{ "1.5GiB", false, false, 3 * GiB / 2, 0 },
	{ "4096", false, false, 4096, 0 },
	{ "10%", true, true, 0, 10.0 },
	{ "2 TB", false, false, 2000000000000ull, 0 },
	{ "1k", false, false, 1024, 0 },
	{ "1K", false, false, 1024, 0 },
	{ "1KiB", false, false, 1024, 0 },
	{ "1kiB", false, false, 1024, 0 },
	{ "1KB", false, false, 1000, 0 },
	{ "1kB", false, false, 1000, 0 },
	{ "2g", false, false, 2 * GiB, 0 },
	{ "2giB", false, false, 2 * GiB, 0 },
	{ "3M", false, false, 3 * MiB, 0 },
	{ "3MB", false, false, 3000000, 0 },
	{ "2G", false, false, 2 * GiB, 0 },
	{ "5GB", false, false, 5000000000ull, 0 },
	{ "1T", false, false, TiB, 0 },
	{ "1TiB", false, false, TiB, 0 },
	{ "1P", false, false, PiB, 0 },
	{ "1PiB", false, false, PiB, 0 },
	{ "1PB", false, false, 1000000000000000ull, 0 },
	{ "7B", false, false, 7, 0 },
	{ "7 B", false, false, 7, 0 },
	{ "1", false, false, 1, 0 },
	{ "  8 GiB  ", false, false, 8 * GiB, 0 },
	{ "\t16MiB\n", false, false, 16 * MiB, 0 },
	{ "+5", false, false, 5, 0 },
	{ "0.5KiB", false, false, 512, 0 },
	{ ".5KiB", false, false, 512, 0 },
	{ "1.5 TB", false, false, 1500000000000ull, 0 },
	{ "0.001KiB", false, false, 1, 0 },          /* 1.024 bytes, rounded down */
	{ "1.999KiB", false, false, 2046, 0 },       /* 2046.976 bytes, rounded down */
	{ "100GiB", true, false, 100 * GiB, 0 },     /* allow_percent still takes sizes */
	{ "2.5%", true, true, 0, 2.5 },
	{ "100%", true, true, 0, 100.0 },
	{ "0.5 %", true, true, 0, 0.5 },
	{ "16383PiB", false, false, 16383 * PiB, 0 },
	{ "18446744073709551615", false, false, UINT64_MAX, 0 },
	{ "18446744073GB", false, false, 18446744073000000000ull, 0 },
};

START_TEST(size_parse_ok)
{
	const struct size_ok *c = &size_ok_cases[_i];
	struct ts_size sz;
	char why[256] = "untouched";
	int rc;

	memset(&sz, 0xa5, sizeof(sz));
	rc = ts_size_parse(c->in, c->allow_percent, &sz, why, sizeof(why));
	ck_assert_msg(rc == 0, "'%s': rc %d (%s)", c->in, rc, why);
	ck_assert_msg(sz.is_percent == c->is_percent, "'%s': is_percent %d", c->in,
		      (int)sz.is_percent);
	if (c->is_percent) {
		ck_assert_double_eq_tol(sz.percent, c->percent, 1e-9);
		ck_assert_uint_eq(sz.bytes, 0);
	} else {
		ck_assert_msg(sz.bytes == c->bytes, "'%s': got %llu bytes, want %llu",
			      c->in, (unsigned long long)sz.bytes,
			      (unsigned long long)c->bytes);
		ck_assert_double_eq(sz.percent, 0.0);
	}
}
END_TEST

struct size_bad {
	const char *in;
	bool allow_percent;
	int err;
	const char *reason;   /* must appear in @why */
};

static const struct size_bad size_bad_cases[] = {
	{ "-1GiB", false, -EINVAL, "negative size" },
	{ " -5", false, -EINVAL, "negative size" },
	{ "-10%", true, -EINVAL, "negative size" },
	{ "0", false, -EINVAL, "greater than zero" },
	{ "0GiB", false, -EINVAL, "greater than zero" },
	{ "0.0MiB", false, -EINVAL, "greater than zero" },
	{ "0.0001KiB", false, -EINVAL, "greater than zero" },  /* 0.1 byte */
	{ "0%", true, -EINVAL, "greater than zero" },
	{ "101%", true, -EINVAL, "over 100%" },
	{ "100.5%", true, -EINVAL, "over 100%" },
	{ "5GB2", false, -EINVAL, "bad unit" },
	{ "12XB", false, -EINVAL, "bad unit" },
	{ "12 XB", true, -EINVAL, "bad unit" },
	{ "5 GiBs", false, -EINVAL, "bad unit" },
	/* only the prefix letter may be in either case: these look like bits */
	{ "64Gib", false, -EINVAL, "bad unit in '64Gib' (accepted units: B, K, KiB" },
	{ "1kib", false, -EINVAL, "bad unit" },
	{ "1kb", false, -EINVAL, "bad unit" },
	{ "1GIB", false, -EINVAL, "bad unit" },
	{ "1gb", false, -EINVAL, "bad unit" },
	{ "1b", false, -EINVAL, "bad unit" },
	{ "50 %", false, -EINVAL, "percentage" },
	{ "1e3", false, -EINVAL, "bad unit" },
	{ "1 2GiB", false, -EINVAL, "bad unit" },
	{ "64GiBGiBGiBGiBGiBGiB", false, -EINVAL, "bad unit" }, /* unit over 15 chars */
	{ "abc", false, -EINVAL, "is not a size" },
	{ "", false, -EINVAL, "is not a size" },
	{ "   ", false, -EINVAL, "is not a size" },
	{ "GiB", false, -EINVAL, "is not a size" },
	{ ".", false, -EINVAL, "is not a size" },
	{ "1.2.3GiB", false, -EINVAL, "is not a size" },
	{ "%", true, -EINVAL, "is not a size" },
	{ "1.5", false, -EINVAL, "whole number" },
	{ "1.5B", false, -EINVAL, "whole number" },
	{ "2.", false, -EINVAL, "whole number" },
	{ "10%", false, -EINVAL, "percentage ('10%') is not allowed" },
	{ "99999999PiB", false, -ERANGE, "too large" },
	{ "16384PiB", false, -ERANGE, "too large" },           /* exactly 2^64 */
	{ "18446744073709551616", false, -ERANGE, "too large" },
	{ "20000000TB", false, -ERANGE, "too large" },
	{ "16384.5PiB", false, -ERANGE, "too large" },
	{ "100000000000000000000000000000000000000000000000000000000000000000000", false,
	  -ERANGE, "too large" },
};

START_TEST(size_parse_bad)
{
	const struct size_bad *c = &size_bad_cases[_i];
	struct ts_size sz;
	char why[256] = "";
	int rc;

	rc = ts_size_parse(c->in, c->allow_percent, &sz, why, sizeof(why));
	ck_assert_msg(rc == c->err, "'%s': rc %d, want %d (%s)", c->in, rc, c->err, why);
	ck_assert_msg(strstr(why, c->reason) != NULL, "'%s': reason '%s' lacks '%s'",
		      c->in, why, c->reason);
	/* Every reason quotes the input, so the user sees what was refused. */
	ck_assert_msg(strstr(why, c->in) != NULL, "'%s': reason '%s' does not quote the input",
		      c->in, why);
}
END_TEST

/* The list of units in the message offers '%' only where it is allowed. */
START_TEST(size_parse_bad_unit_lists_units)
{
	struct ts_size sz;
	char why[256];

	ck_assert_int_eq(ts_size_parse("3 parsecs", false, &sz, why, sizeof(why)), -EINVAL);
	ck_assert_ptr_nonnull(strstr(why, "GiB"));
	ck_assert_ptr_nonnull(strstr(why, "TB"));
	ck_assert_ptr_null(strstr(why, "or %"));
	ck_assert_int_eq(ts_size_parse("3 parsecs", true, &sz, why, sizeof(why)), -EINVAL);
	ck_assert_ptr_nonnull(strstr(why, "or %"));
}
END_TEST

/* @why may be NULL or short: the code is still right and nothing overflows. */
START_TEST(size_parse_why_optional)
{
	struct ts_size sz;
	char why[8];

	ck_assert_int_eq(ts_size_parse("12XB", false, &sz, NULL, 0), -EINVAL);
	ck_assert_int_eq(ts_size_parse("12XB", false, &sz, NULL, 64), -EINVAL);
	ck_assert_int_eq(ts_size_parse("99999999PiB", false, &sz, NULL, 0), -ERANGE);
	memset(why, 'x', sizeof(why));
	ck_assert_int_eq(ts_size_parse("12XB", false, &sz, why, sizeof(why)), -EINVAL);
	ck_assert_uint_eq(strlen(why), sizeof(why) - 1);
	ck_assert_int_eq(ts_size_parse("1GiB", false, &sz, NULL, 0), 0);
	ck_assert_uint_eq(sz.bytes, GiB);
}
END_TEST

/* ------------------------------------------------------- ts_int_parse */

struct int_case {
	const char *in;
	long long min, max;
	int rc;
	long long want;   /* when rc == 0 */
};

static const struct int_case int_cases[] = {
	{ "0", 0, 10, 0, 0 },
	{ "10", 0, 10, 0, 10 },
	{ "3", 0, 1024, 0, 3 },
	{ "-5", -10, 10, 0, -5 },
	{ "007", 0, 10, 0, 7 },                 /* base 10, not octal */
	{ "9223372036854775807", LLONG_MIN, LLONG_MAX, 0, LLONG_MAX },
	{ "-9223372036854775808", LLONG_MIN, LLONG_MAX, 0, LLONG_MIN },
	{ "11", 0, 10, -ERANGE, 0 },
	{ "-1", 0, 10, -ERANGE, 0 },
	{ "5000", 0, 1024, -ERANGE, 0 },
	{ "9223372036854775808", LLONG_MIN, LLONG_MAX, -ERANGE, 0 },
	{ "-9223372036854775809", LLONG_MIN, LLONG_MAX, -ERANGE, 0 },
	{ "99999999999999999999999", 0, 10, -ERANGE, 0 },
	{ "", 0, 10, -EINVAL, 0 },
	{ " 5", 0, 10, -EINVAL, 0 },
	{ "5 ", 0, 10, -EINVAL, 0 },
	{ "abc", 0, 10, -EINVAL, 0 },
	{ "12abc", 0, 100, -EINVAL, 0 },
	{ "0x10", 0, 100, -EINVAL, 0 },
	{ "1.5", 0, 10, -EINVAL, 0 },
	{ "-", -10, 10, -EINVAL, 0 },
	{ "1e3", 0, 10000, -EINVAL, 0 },
};

/* A fraction reads the same whatever the C locale's decimal point is. */
START_TEST(size_parse_locale_independent)
{
	struct ts_size sz;
	char why[128];

	/* The locale may be missing on this machine; the check still holds in "C". */
	setlocale(LC_NUMERIC, "de_DE.UTF-8");
	ck_assert_int_eq(ts_size_parse("1.5GiB", false, &sz, why, sizeof(why)), 0);
	ck_assert_uint_eq(sz.bytes, 3ull << 29);
	ck_assert_int_eq(ts_size_parse("12.5%", true, &sz, why, sizeof(why)), 0);
	ck_assert(sz.percent == 12.5);
	setlocale(LC_NUMERIC, "C");
}
END_TEST

START_TEST(int_parse)
{
	const struct int_case *c = &int_cases[_i];
	long long v = 4242;
	int rc;

	rc = ts_int_parse(c->in, c->min, c->max, &v);
	ck_assert_msg(rc == c->rc, "'%s' in [%lld, %lld]: rc %d, want %d", c->in,
		      c->min, c->max, rc, c->rc);
	if (rc == 0)
		ck_assert_msg(v == c->want, "'%s': got %lld, want %lld", c->in, v, c->want);
	else
		ck_assert_msg(v == 4242, "'%s': failure changed *out to %lld", c->in, v);
}
END_TEST

/* ------------------------------------------------------- ts_size_fmt */

struct fmt_case {
	uint64_t bytes;
	const char *want;
};

static const struct fmt_case fmt_cases[] = {
	{ 0, "0 B" },
	{ 1, "1 B" },
	{ 512, "512 B" },
	{ 1023, "1023 B" },
	{ 1024, "1.00 KiB" },
	{ 1536, "1.50 KiB" },
	{ MiB - 1, "1.00 MiB" },            /* never "1024.00 KiB" */
	{ GiB - 1, "1.00 GiB" },
	{ 512 * MiB, "512.00 MiB" },
	{ 3 * GiB / 2, "1.50 GiB" },
	{ 64 * GiB, "64.00 GiB" },
	{ TiB, "1.00 TiB" },
	{ 5 * TiB / 4, "1.25 TiB" },
	{ PiB, "1.00 PiB" },
	{ 1ull << 60, "1.00 EiB" },
	{ UINT64_MAX, "16.00 EiB" },
};

START_TEST(size_fmt)
{
	const struct fmt_case *c = &fmt_cases[_i];
	char buf[32];

	memset(buf, 'x', sizeof(buf));
	ck_assert_ptr_eq(ts_size_fmt(c->bytes, buf, sizeof(buf)), buf);
	ck_assert_str_eq(buf, c->want);
}
END_TEST

/* What ts_size_fmt() prints for an exact size parses back to that size. */
static const uint64_t roundtrip_sizes[] = {
	1, 512, 1023, KiB, 3 * KiB / 2, 512 * MiB, 3 * GiB / 2, 64 * GiB, TiB, PiB,
};

START_TEST(size_fmt_roundtrip)
{
	uint64_t bytes = roundtrip_sizes[_i];
	struct ts_size sz;
	char buf[32], why[128];

	ts_size_fmt(bytes, buf, sizeof(buf));
	ck_assert_msg(ts_size_parse(buf, false, &sz, why, sizeof(why)) == 0,
		      "'%s': %s", buf, why);
	ck_assert_uint_eq(sz.bytes, bytes);
}
END_TEST

START_TEST(size_fmt_short_buffer)
{
	char buf[5];

	memset(buf, 'x', sizeof(buf));
	ts_size_fmt(64 * GiB, buf, sizeof(buf));
	ck_assert_str_eq(buf, "64.0");
	memset(buf, 'x', sizeof(buf));
	ts_size_fmt(123456, buf, 1);
	ck_assert_int_eq(buf[0], '\0');
	ck_assert_int_eq(buf[1], 'x');
}
END_TEST

/* -------------------------------------------------- ts_edit_distance */

struct dist_case {
	const char *a, *b;
	unsigned want;
};

#define S64 "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_"

static const struct dist_case dist_cases[] = {
	{ "", "", 0 },
	{ "abc", "", 3 },
	{ "kitten", "sitting", 3 },
	{ "flaw", "lawn", 2 },
	{ "nvme", "nvme", 0 },
	{ "nvme", "NVMe", 0 },            /* case-insensitive */
	{ "dram", "drm", 1 },
	{ "hbm", "hmb", 2 },              /* a swap is two edits */
	{ "prefetch", "prefetc", 1 },
	{ "capacity", "capcity", 1 },
	{ "bandwidth", "bandwith", 1 },
	{ "abc", "xyz", 3 },
	{ S64, S64, 0 },                  /* 64 characters: the longest compared */
	{ S64, "", 64 },
	{ S64 "!", "", UINT_MAX },        /* longer than 64: capped */
	{ S64 "!", S64 "!", UINT_MAX },
};

START_TEST(edit_distance)
{
	const struct dist_case *c = &dist_cases[_i];

	ck_assert_uint_eq(strlen(S64), 64);
	ck_assert_msg(ts_edit_distance(c->a, c->b) == c->want, "d('%s', '%s') = %u, want %u",
		      c->a, c->b, ts_edit_distance(c->a, c->b), c->want);
	/* Symmetric. */
	ck_assert_uint_eq(ts_edit_distance(c->b, c->a), c->want);
}
END_TEST

/* ------------------------------------------------------ element types */

struct dtype_case {
	int dtype;
	const char *name;   /* NULL: no dtype */
	size_t size;
};

static const struct dtype_case dtype_cases[] = {
	{ TIER_FP32, "fp32", 4 },
	{ TIER_BF16, "bf16", 2 },
	{ TIER_FP16, "fp16", 2 },
	{ TIER_Q8, "q8", 1 },
	{ -1, NULL, 0 },
	{ 4, NULL, 0 },
	{ 1000, NULL, 0 },
};

START_TEST(dtype_table)
{
	const struct dtype_case *c = &dtype_cases[_i];
	enum tier_dtype d = (enum tier_dtype)c->dtype;
	enum tier_dtype back = (enum tier_dtype)-7;

	ck_assert_uint_eq(tier_dtype_size(d), c->size);
	if (!c->name) {
		ck_assert_ptr_null(tier_dtype_name(d));
		return;
	}
	ck_assert_str_eq(tier_dtype_name(d), c->name);
	ck_assert_int_eq(tier_dtype_parse(c->name, &back), 0);
	ck_assert_int_eq(back, d);
}
END_TEST

START_TEST(dtype_parse_refusals)
{
	static const char *const bad[] = { "", "FP32", "fp64", "bf16 ", "float", "int8" };
	enum tier_dtype d = TIER_BF16;

	for (size_t i = 0; i < ARRAY_SIZE(bad); i++) {
		ck_assert_int_eq(tier_dtype_parse(bad[i], &d), -EINVAL);
		ck_assert_msg(strstr(tier_last_error(), bad[i]) && strstr(tier_last_error(), "fp32"),
			      "'%s': %s", bad[i], tier_last_error());
		ck_assert_int_eq(d, TIER_BF16); /* untouched */
	}
	ck_assert_int_eq(tier_dtype_parse(NULL, &d), -EINVAL);
}
END_TEST

/* ------------------------------------------------------------ version */

struct version_case {
	int dmajor, dminor;  /* the header's version, relative to the library's */
	int want;
};

static const struct version_case version_cases[] = {
	{ 0, 0, 0 },
	{ 0, -1, -EPROTO },  /* before 1.0 a minor may change the ABI */
	{ 0, 1, -EPROTO },   /* a newer header than the library */
	{ 1, 0, -EPROTO },
	{ -1, 0, -EPROTO },
};

START_TEST(version_check)
{
	const struct version_case *c = &version_cases[_i];
	unsigned major = (unsigned)(TIER_VERSION_MAJOR + c->dmajor);
	unsigned minor = (unsigned)(TIER_VERSION_MINOR + c->dminor);
	char want[32];

	ck_assert_int_eq(tier_version_check(major, minor), c->want);
	if (c->want) {
		snprintf(want, sizeof(want), "%u.%u", major, minor);
		ck_assert_msg(strstr(tier_last_error(), want) && strstr(tier_last_error(), tier_version()),
			      "%s", tier_last_error());
	}
}
END_TEST

START_TEST(version_number)
{
	char text[32];

	ck_assert_uint_eq(tier_version_number(), TIER_VERSION_NUMBER);
	ck_assert_int_eq(TIER_VERSION_CHECK(), 0);
	snprintf(text, sizeof(text), "%d.%d.%d", TIER_VERSION_MAJOR, TIER_VERSION_MINOR,
		 TIER_VERSION_PATCH);
	ck_assert_str_eq(tier_version(), text);
}
END_TEST

static Suite *units_suite(void)
{
	Suite *s = suite_create("units");
	TCase *tc;

	tc = tcase_create("size_parse");
	tcase_add_loop_test(tc, size_parse_ok, 0, (int)ARRAY_SIZE(size_ok_cases));
	tcase_add_loop_test(tc, size_parse_bad, 0, (int)ARRAY_SIZE(size_bad_cases));
	tcase_add_test(tc, size_parse_bad_unit_lists_units);
	tcase_add_test(tc, size_parse_why_optional);
	tcase_add_test(tc, size_parse_locale_independent);
	suite_add_tcase(s, tc);

	tc = tcase_create("int_parse");
	tcase_add_loop_test(tc, int_parse, 0, (int)ARRAY_SIZE(int_cases));
	suite_add_tcase(s, tc);

	tc = tcase_create("size_fmt");
	tcase_add_loop_test(tc, size_fmt, 0, (int)ARRAY_SIZE(fmt_cases));
	tcase_add_loop_test(tc, size_fmt_roundtrip, 0, (int)ARRAY_SIZE(roundtrip_sizes));
	tcase_add_test(tc, size_fmt_short_buffer);
	suite_add_tcase(s, tc);

	tc = tcase_create("edit_distance");
	tcase_add_loop_test(tc, edit_distance, 0, (int)ARRAY_SIZE(dist_cases));
	suite_add_tcase(s, tc);

	tc = tcase_create("dtype");
	tcase_add_loop_test(tc, dtype_table, 0, (int)ARRAY_SIZE(dtype_cases));
	tcase_add_test(tc, dtype_parse_refusals);
	suite_add_tcase(s, tc);

	tc = tcase_create("version");
	tcase_add_loop_test(tc, version_check, 0, (int)ARRAY_SIZE(version_cases));
	tcase_add_test(tc, version_number);
	suite_add_tcase(s, tc);

	return s;
}

int main(void)
{
	return t_run_suite(units_suite());
}
