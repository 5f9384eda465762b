/*
 * test_crc32c.c - the CRC-32C kernel (kernels/crc32c.c).
 *
 * Covers:
 *  - known answers (RFC 3720 B.4, the "123456789" check value, the empty
 *    input, an iSCSI PDU, a sentence) for crc32c_scalar(), crc32c_sse42(),
 *    crc32c_clmul() and the dispatcher ts_crc32c();
 *  - crc32c_sse42() and crc32c_clmul() against crc32c_scalar(), bit-exact,
 *    on random data: every length 0..1100 (across crc32c_clmul()'s 256-byte
 *    threshold and its 64-byte fold steps) and large lengths across the
 *    three-stream block sizes and up to 4 MiB, each at every misalignment
 *    0..15 from an aligned base, from random starting values;
 *  - extending a checksum piece by piece (random splits) equals one call,
 *    for every variant;
 *  - ts_crc32c_combine() of any variant's checksums equals the checksum of
 *    the concatenation, and is consistent for lengths far beyond what can be
 *    checksummed here;
 *  - TIER_SIMD: "scalar", "sse4.2" and "clmul" force that variant, "auto" or
 *    unset picks "sse4.2" or "clmul" (by timing) where the CPU has SSE4.2
 *    and PCLMULQDQ, another value warns; the choice is made at the first
 *    call, not at load, and the chosen variant computes right.
 * On a CPU without SSE4.2 and PCLMULQDQ the crc32c_sse42() and
 * crc32c_clmul() parts are skipped with a note (the scalar and dispatcher
 * parts still run).
 */
#include "config.h"

#include <check.h>
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/options.h"
#include "kernels/crc32c.h"
#include "t_helpers.h"

#define MiB ((size_t)1 << 20)

/* Set in the child that test_simd_env re-executes. */
#define CHILD_ENV "T_CRC32C_CHILD"

/* ------------------------------------------------------------- helpers */

/* @len random bytes, plus 16 bytes of slack for misaligned views, 64-byte aligned. */
static unsigned char *rnd_buf(uint64_t *s, size_t len)
{
	size_t size = (len + 16 + 63) & ~(size_t)63;
	unsigned char *b = aligned_alloc(64, size);

	ck_assert_ptr_nonnull(b);
	for (size_t i = 0; i < size; i++)
		b[i] = (unsigned char)(t_rnd_next(s) >> 56);
	return b;
}

typedef uint32_t (*crc_fn)(uint32_t crc, const void *buf, size_t len);

struct impl {
	const char *name;
	crc_fn fn;
	bool needs_sse;
};

static const struct impl impls[] = {
	{ "crc32c_scalar", crc32c_scalar, false },
	{ "crc32c_sse42", crc32c_sse42, true },
	{ "crc32c_clmul", crc32c_clmul, true },
	{ "ts_crc32c", ts_crc32c, false },
};

/* The variants checked against crc32c_scalar(), all needing SSE4.2 and PCLMULQDQ. */
static const struct impl simd_impls[] = {
	{ "sse4.2", crc32c_sse42, true },
	{ "clmul", crc32c_clmul, true },
};

static bool impl_usable(const struct impl *im)
{
	return !im->needs_sse || crc32c_sse42_supported();
}

/* ------------------------------------------------------- known answers */

static const unsigned char zeros32[32];
static const unsigned char ones32[32] = {
	0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
	0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
	0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
};
static const unsigned char inc32[32] = {
	0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15,
	16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 31,
};
static const unsigned char dec32[32] = {
	31, 30, 29, 28, 27, 26, 25, 24, 23, 22, 21, 20, 19, 18, 17, 16,
	15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0,
};
/* RFC 3720 B.4: an iSCSI Read (10) command PDU. */
static const unsigned char iscsi_read48[48] = {
	0x01, 0xc0, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
	0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
	0x14, 0x00, 0x00, 0x00, 0x00, 0x00, 0x04, 0x00,
	0x00, 0x00, 0x00, 0x14, 0x00, 0x00, 0x00, 0x18,
	0x28, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
	0x02, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
};

struct known {
	const char *name;
	const void *data;
	size_t len;
	uint32_t want;
};

#define FOX "The quick brown fox jumps over the lazy dog"

static const struct known known[] = {
	{ "empty (NULL)", NULL, 0, 0x00000000 },
	{ "empty", "", 0, 0x00000000 },
	{ "\"a\"", "a", 1, 0xC1D04330 },
	{ "\"123456789\"", "123456789", 9, 0xE3069283 },
	{ "32 x 0x00", zeros32, 32, 0x8A9136AA },
	{ "32 x 0xff", ones32, 32, 0x62A8AB43 },
	{ "0..31", inc32, 32, 0x46DD794E },
	{ "31..0", dec32, 32, 0x113FDB5C },
	{ "iSCSI read PDU", iscsi_read48, 48, 0xD9963A56 },
	{ "fox", FOX, sizeof(FOX) - 1, 0x22620404 },
};

/* _i = case * ARRAY_SIZE(impls) + implementation */
START_TEST(known_answer)
{
	const struct known *k = &known[(size_t)_i / ARRAY_SIZE(impls)];
	const struct impl *im = &impls[(size_t)_i % ARRAY_SIZE(impls)];
	uint32_t got;

	if (!impl_usable(im))
		return;
	got = im->fn(0, k->data, k->len);
	ck_assert_msg(got == k->want, "%s(%s) = 0x%08X, want 0x%08X", im->name, k->name,
		      got, k->want);
	/* The same bytes at every misalignment. */
	for (size_t a = 1; a < 16 && k->len > 0; a++) {
		unsigned char buf[64 + 16];

		memcpy(buf + a, k->data, k->len);
		got = im->fn(0, buf + a, k->len);
		ck_assert_msg(got == k->want, "%s(%s at +%zu) = 0x%08X, want 0x%08X",
			      im->name, k->name, a, got, k->want);
	}
}
END_TEST

/* ------------------------------------------ SSE4.2 and clmul vs scalar */

#define SMALL_MAX 1100

/* _i = misalignment; every length 0..SMALL_MAX. */
START_TEST(simd_vs_scalar_small)
{
	uint64_t s = 0x9E3779B97F4A7C15ull + (uint64_t)_i;
	unsigned char *base = rnd_buf(&s, SMALL_MAX);
	const unsigned char *p = base + _i;

	if (!crc32c_sse42_supported()) {
		free(base);
		return;
	}
	for (size_t len = 0; len <= SMALL_MAX; len++) {
		uint32_t seed = len % 3 == 0 ? 0 : (uint32_t)t_rnd_next(&s);
		uint32_t want = crc32c_scalar(seed, p, len);

		for (size_t v = 0; v < ARRAY_SIZE(simd_impls); v++) {
			uint32_t got = simd_impls[v].fn(seed, p, len);

			ck_assert_msg(got == want,
				      "len %zu at +%d from 0x%08X: %s 0x%08X, scalar 0x%08X",
				      len, _i, seed, simd_impls[v].name, got, want);
		}
		ck_assert_uint_eq(ts_crc32c(seed, p, len), want);
	}
	free(base);
}
END_TEST

/*
 * Around and beyond the three-stream block sizes (768 and 12288 bytes) and
 * the fold's 64-byte steps, up to the largest units tierstore checksums.
 */
static const size_t large_lens[] = {
	4095,
	4096,
	3 * 4096 - 1,
	3 * 4096,
	3 * 4096 + 3 * 256 + 8 + 5,
	65536,
	65536 + 7,
	65536 + 63,
	MiB,
	3 * MiB + 5,
	4 * MiB,
	4 * MiB - 1,
};

/* _i = length; every misalignment 0..15. */
START_TEST(simd_vs_scalar_large)
{
	size_t len = large_lens[_i];
	uint64_t s = 0xD1B54A32D192ED03ull + (uint64_t)_i;
	unsigned char *base = rnd_buf(&s, len);

	if (!crc32c_sse42_supported()) {
		free(base);
		return;
	}
	for (size_t a = 0; a < 16; a++) {
		uint32_t seed = a == 0 ? 0 : (uint32_t)t_rnd_next(&s);
		uint32_t want = crc32c_scalar(seed, base + a, len);

		for (size_t v = 0; v < ARRAY_SIZE(simd_impls); v++) {
			uint32_t got = simd_impls[v].fn(seed, base + a, len);

			ck_assert_msg(got == want,
				      "len %zu at +%zu from 0x%08X: %s 0x%08X, scalar 0x%08X",
				      len, a, seed, simd_impls[v].name, got, want);
		}
		ck_assert_uint_eq(ts_crc32c(seed, base + a, len), want);
	}
	free(base);
}
END_TEST

/* ------------------------------------------------- extending, combining */

/* A random length, mostly small, sometimes past several long blocks. */
static size_t rnd_len(uint64_t *s)
{
	switch (t_rnd_below(s, 4)) {
	case 0:
		return t_rnd_below(s, 64);
	case 1:
		return t_rnd_below(s, 4096);
	case 2:
		return t_rnd_below(s, 40000);
	default:
		return t_rnd_below(s, 300000);
	}
}

#define TRIALS 200

/* _i = implementation */
START_TEST(incremental_equals_oneshot)
{
	const struct impl *im = &impls[_i];
	uint64_t s = 0x243F6A8885A308D3ull;

	if (!impl_usable(im))
		return;
	for (int t = 0; t < TRIALS; t++) {
		size_t len = rnd_len(&s), at = 0;
		unsigned char *b = rnd_buf(&s, len);
		const unsigned char *p = b + t_rnd_below(&s, 16);
		uint32_t want = crc32c_scalar(0, p, len), crc = 0;
		int pieces = 1 + (int)t_rnd_below(&s, 8);

		for (int k = 1; k < pieces; k++) {
			size_t n = t_rnd_below(&s, len - at + 1);

			crc = im->fn(crc, p + at, n);
			at += n;
		}
		crc = im->fn(crc, p + at, len - at);
		ck_assert_msg(crc == want, "%s: %zu bytes in %d pieces: 0x%08X, one call 0x%08X",
			      im->name, len, pieces, crc, want);
		free(b);
	}
}
END_TEST

/* _i = implementation of the pieces; the whole is checked against crc32c_scalar(). */
START_TEST(combine_equals_oneshot)
{
	const struct impl *im = &impls[_i];
	uint64_t s = 0x13198A2E03707344ull;

	if (!impl_usable(im))
		return;
	for (int t = 0; t < TRIALS; t++) {
		size_t len = rnd_len(&s);
		unsigned char *b = rnd_buf(&s, len);
		/* Splits at both ends too. */
		size_t n1 = t % 10 == 0 ? 0 : t % 10 == 1 ? len : t_rnd_below(&s, len + 1);
		uint32_t c1 = im->fn(0, b, n1);
		uint32_t c2 = im->fn(0, b + n1, len - n1);
		uint32_t want = crc32c_scalar(0, b, len);
		uint32_t got = ts_crc32c_combine(c1, c2, len - n1);

		ck_assert_msg(got == want, "%s: %zu + %zu bytes: combine 0x%08X, one call 0x%08X",
			      im->name, n1, len - n1, got, want);
		ck_assert_uint_eq(im->fn(0, b, len), want);
		free(b);
	}
}
END_TEST

/*
 * Many pieces, as per-unit checksums computed apart are meant to be joined.
 * _i = implementation; units of 4 KiB + 8 and 64 KiB + 8 (the latter long
 * enough for crc32c_clmul() to fold).
 */
START_TEST(combine_many_units)
{
	const struct impl *im = &impls[_i];
	uint64_t s = 0xA4093822299F31D0ull;
	size_t len = 3 * MiB + 17;
	static const size_t units[] = { 4096 + 8, 65536 + 8 };
	unsigned char *b = rnd_buf(&s, len);
	uint32_t want = crc32c_scalar(0, b, len);

	if (!impl_usable(im)) {
		free(b);
		return;
	}
	for (size_t u = 0; u < ARRAY_SIZE(units); u++) {
		uint32_t crc = 0;

		for (size_t at = 0; at < len; at += units[u]) {
			size_t n = len - at < units[u] ? len - at : units[u];

			crc = ts_crc32c_combine(crc, im->fn(0, b + at, n), n);
		}
		ck_assert_msg(crc == want, "%s: units of %zu: 0x%08X, one call 0x%08X",
			      im->name, units[u], crc, want);
	}
	free(b);
}
END_TEST

/*
 * Lengths no test can checksum: combining is associative,
 * ((a, b), c) == (a, (b, c)), which holds only if x^m * x^n == x^(m+n) for
 * the powers the implementation uses, up to the 64-bit limit of size_t.
 */
static const size_t huge_lens[][2] = {
	{ 1, 1 },
	{ (size_t)1 << 32, 5 },
	{ ((size_t)1 << 32) - 1, ((size_t)1 << 32) + 1 },
	{ ((size_t)1 << 40) + 3, (size_t)1 << 35 },
	{ (size_t)1 << 61, ((size_t)1 << 61) + 12345 },
	{ SIZE_MAX / 2, SIZE_MAX / 2 },
};

START_TEST(combine_associative)
{
	size_t lb = huge_lens[_i][0], lc = huge_lens[_i][1];
	uint64_t s = 0x082EFA98EC4E6C89ull + (uint64_t)_i;

	for (int t = 0; t < 20; t++) {
		uint32_t a = (uint32_t)t_rnd_next(&s), b = (uint32_t)t_rnd_next(&s);
		uint32_t c = (uint32_t)t_rnd_next(&s);
		uint32_t left = ts_crc32c_combine(ts_crc32c_combine(a, b, lb), c, lc);
		uint32_t right = ts_crc32c_combine(a, ts_crc32c_combine(b, c, lc), lb + lc);

		ck_assert_msg(left == right, "lengths %zu, %zu: 0x%08X != 0x%08X", lb, lc,
			      left, right);
	}
	/* Nothing appended: unchanged. */
	ck_assert_uint_eq(ts_crc32c_combine(0x12345678, 0, 0), 0x12345678);
}
END_TEST

/* -------------------------------------------------------------- TIER_SIMD */

/* In this (Check-forked) process nothing has called the dispatcher yet. */
START_TEST(simd_env_read_at_first_call)
{
	const char *fork_mode = getenv("CK_FORK");

	if (fork_mode && strcmp(fork_mode, "no") == 0) {
		printf("note: CK_FORK=no: the dispatcher may already be set up; "
		       "simd_env_read_at_first_call skipped\n");
		return;
	}
	ck_assert_int_eq(setenv("TIER_SIMD", "scalar", 1), 0);
	ts_options_reload(); /* TIER_SIMD is in the options table, read at load */
	ck_assert_str_eq(ts_crc32c_impl(), "scalar");
	ck_assert_uint_eq(ts_crc32c(0, "123456789", 9), 0xE3069283);
	/* Chosen once: a later change of the environment has no effect. */
	ck_assert_int_eq(unsetenv("TIER_SIMD"), 0);
	ck_assert_str_eq(ts_crc32c_impl(), "scalar");
}
END_TEST

/* What a case expects of the child's choice. */
enum simd_want {
	WANT_AUTO,   /* "sse4.2" or "clmul" (timed) with SSE4.2+PCLMULQDQ, else "scalar" */
	WANT_SCALAR, /* "scalar" */
	WANT_SSE42,  /* "sse4.2" with SSE4.2+PCLMULQDQ, else a warning and "scalar" */
	WANT_CLMUL,  /* "clmul" likewise */
};

struct simd_case {
	const char *value; /* NULL: unset */
	enum simd_want want;
	const char *warn;  /* in the child's stderr, or NULL for no output */
};

static const struct simd_case simd_cases[] = {
	{ NULL, WANT_AUTO, NULL },
	{ "", WANT_AUTO, NULL },
	{ "auto", WANT_AUTO, NULL },
	{ "AUTO", WANT_AUTO, NULL },
	{ "scalar", WANT_SCALAR, NULL },
	{ "SCALAR", WANT_SCALAR, NULL },
	{ "sse4.2", WANT_SSE42, NULL },
	{ "SSE4.2", WANT_SSE42, NULL },
	{ "clmul", WANT_CLMUL, NULL },
	{ "CLMUL", WANT_CLMUL, NULL },
	{ "avx9000", WANT_AUTO, "TIER_SIMD='avx9000' is not one of auto|scalar|sse4.2|clmul" },
	{ "sse42", WANT_AUTO, "TIER_SIMD='sse42' is not one of auto|scalar|sse4.2|clmul" },
};

/* Whether the child's "impl=..." line is one @c allows on this CPU. */
static bool simd_impl_ok(const struct simd_case *c, const char *out)
{
	bool simd = crc32c_sse42_supported();

	switch (c->want) {
	case WANT_AUTO:
		return simd ? strcmp(out, "impl=sse4.2\n") == 0 || strcmp(out, "impl=clmul\n") == 0
			    : strcmp(out, "impl=scalar\n") == 0;
	case WANT_SCALAR:
		return strcmp(out, "impl=scalar\n") == 0;
	case WANT_SSE42:
		return strcmp(out, simd ? "impl=sse4.2\n" : "impl=scalar\n") == 0;
	case WANT_CLMUL:
		return strcmp(out, simd ? "impl=clmul\n" : "impl=scalar\n") == 0;
	}
	return false;
}

/* Runs this program again as a child (see main) with TIER_SIMD as @c says. */
START_TEST(simd_env_child)
{
	const struct simd_case *c = &simd_cases[_i];
	const char *warn = c->warn;
	char out[4096];
	const char *line;
	int status;

	status = t_spawn_self(CHILD_ENV, c->value, true, out, sizeof(out));

	ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0,
		      "TIER_SIMD=%s: child status 0x%x, output:\n%s",
		      c->value ? c->value : "(unset)", status, out);
	/* Forcing a SIMD variant on a CPU without it warns and falls back. */
	if (!warn && !crc32c_sse42_supported() &&
	    (c->want == WANT_SSE42 || c->want == WANT_CLMUL))
		warn = "this CPU lacks SSE4.2 or PCLMULQDQ; using auto";
	/* The child's own line: the last, after any warning. */
	line = strstr(out, "impl=");
	ck_assert_msg(line && simd_impl_ok(c, line), "TIER_SIMD=%s: unexpected variant, output:\n%s",
		      c->value ? c->value : "(unset)", out);
	if (warn)
		ck_assert_msg(strstr(out, warn) && strstr(out, "warn kernels: "),
			      "TIER_SIMD=%s: no warning '%s' in:\n%s", c->value, warn, out);
	else
		ck_assert_msg(line == out, "TIER_SIMD=%s: unexpected output:\n%s",
			      c->value ? c->value : "(unset)", out);
}
END_TEST

/*
 * The child: report the variant chosen and check that it computes, on the
 * check value and on 64 KiB + 13 misaligned bytes (long enough to fold).
 */
static int child_main(void)
{
	const char *impl = ts_crc32c_impl();
	size_t len = 65536 + 13;
	unsigned char *b = malloc(len + 3);
	uint64_t s = 0x452821E638D01377ull;
	int rc = 0;

	printf("impl=%s\n", impl);
	fflush(stdout);
	if (!b)
		return 2;
	for (size_t i = 0; i < len + 3; i++)
		b[i] = (unsigned char)(t_rnd_next(&s) >> 56);
	if (ts_crc32c(0, "123456789", 9) != 0xE3069283 ||
	    ts_crc32c(0x01234567, b + 3, len) != crc32c_scalar(0x01234567, b + 3, len))
		rc = 1;
	free(b);
	return rc;
}

/* ----------------------------------------------------------------- suite */

static Suite *crc32c_suite(void)
{
	Suite *s = suite_create("crc32c");
	TCase *tc;

	tc = tcase_create("known_answers");
	tcase_add_loop_test(tc, known_answer, 0, (int)(ARRAY_SIZE(known) * ARRAY_SIZE(impls)));
	suite_add_tcase(s, tc);

	tc = tcase_create("simd_vs_scalar");
	tcase_add_loop_test(tc, simd_vs_scalar_small, 0, 16);
	tcase_add_loop_test(tc, simd_vs_scalar_large, 0, (int)ARRAY_SIZE(large_lens));
	suite_add_tcase(s, tc);

	tc = tcase_create("extend_combine");
	tcase_add_loop_test(tc, incremental_equals_oneshot, 0, (int)ARRAY_SIZE(impls));
	tcase_add_loop_test(tc, combine_equals_oneshot, 0, (int)ARRAY_SIZE(impls));
	tcase_add_loop_test(tc, combine_many_units, 0, (int)ARRAY_SIZE(impls));
	tcase_add_loop_test(tc, combine_associative, 0, (int)ARRAY_SIZE(huge_lens));
	suite_add_tcase(s, tc);

	tc = tcase_create("simd_env");
	tcase_add_test(tc, simd_env_read_at_first_call);
	tcase_add_loop_test(tc, simd_env_child, 0, (int)ARRAY_SIZE(simd_cases));
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	if (getenv(CHILD_ENV))
		return child_main();
	if (!crc32c_sse42_supported())
		printf("note: this CPU lacks SSE4.2 or PCLMULQDQ: crc32c_sse42 and crc32c_clmul "
		       "are not tested\n");
	return t_run_suite(crc32c_suite());
}
