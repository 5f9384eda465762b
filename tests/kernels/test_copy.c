/*
 * test_copy.c - the streaming copy (kernels/copy.c).
 *
 * Covers:
 *  - every version this CPU runs (scalar, AVX2, AVX-512) against memcpy,
 *    byte for byte, over lengths around COPY_STREAM_MIN, the 64-byte line
 *    and the 4-line loop, every misalignment of the destination within a
 *    line and several of the source: the copy equals the source and the
 *    guard bytes on each side of the destination are untouched;
 *  - a version this CPU lacks answers -ENOTSUP and copies nothing;
 *  - TIER_SIMD (kernels/simd.h): its first entry among scalar|avx2|avx512
 *    forces that version, or the best below it that the CPU has; none, or
 *    "auto" first, takes the best (in a child process, as the choice is made
 *    once per process), and the child's copies are right.
 */
#include "config.h"

#include <check.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/copy.h"
#include "t_helpers.h"

#define GUARD 256
#define CHILD_ENV "T_COPY_CHILD"

static const size_t lengths[] = {
	0, 1, 63, 64, 65, COPY_STREAM_MIN - 1, COPY_STREAM_MIN, COPY_STREAM_MIN + 1,
	COPY_STREAM_MIN + 63, COPY_STREAM_MIN + 64 * 3 + 5, COPY_STREAM_MIN + 64 * 4,
	COPY_STREAM_MIN + 64 * 5 + 63, 65536 + 37, 262144, 1000003,
};
static const size_t src_offsets[] = { 0, 1, 8, 32, 61 };

/* Copies with @isa for every length, destination misalignment 0..63 (on a
 * sample of the longest lengths) and source offset; 0 or a message. */
static const char *check_isa(enum copy_isa isa, char *msg, size_t cap)
{
	const size_t max = 1000003 + 2 * GUARD + 128;
	uint8_t *src = malloc(max), *dst = aligned_alloc(64, max + 64 - max % 64);
	uint64_t s = 0x5EED + (uint64_t)isa;
	const char *err = NULL;

	if (!src || !dst) {
		free(src);
		free(dst);
		return "out of memory";
	}
	for (size_t i = 0; i < max; i++)
		src[i] = (uint8_t)(t_rnd_next(&s) >> 56);
	for (size_t li = 0; li < ARRAY_SIZE(lengths) && !err; li++) {
		size_t n = lengths[li];

		for (size_t da = 0; da < 64 && !err; da += n > 100000 ? 7 : 1) {
			for (size_t so = 0; so < ARRAY_SIZE(src_offsets) && !err; so++) {
				uint8_t *d = dst + GUARD + da, *from = src + src_offsets[so];
				int rc;

				memset(dst, 0xA5, GUARD + da + n + GUARD);
				rc = ts_copy_stream_isa(isa, d, from, n);
				if (rc != 0) {
					snprintf(msg, cap, "%s: n %zu: rc %d", copy_isa_name(isa), n, rc);
					err = msg;
				} else if (memcmp(d, from, n) != 0) {
					size_t at = 0;

					while (d[at] == from[at])
						at++;
					snprintf(msg, cap, "%s: n %zu, dst +%zu, src +%zu: byte %zu differs",
						 copy_isa_name(isa), n, da, src_offsets[so], at);
					err = msg;
				} else {
					for (size_t g = 0; g < GUARD + da && !err; g++)
						if (dst[g] != 0xA5 || d[n + g % GUARD] != 0xA5) {
							snprintf(msg, cap, "%s: n %zu, dst +%zu: a guard byte changed",
								 copy_isa_name(isa), n, da);
							err = msg;
						}
				}
			}
		}
	}
	free(src);
	free(dst);
	return err;
}

START_TEST(versions_equal_memcpy)
{
	enum copy_isa isa = (enum copy_isa)_i;
	char msg[256];
	const char *err;

	if (!copy_isa_supported(isa)) {
		char a = 1, b = 2;

		ck_assert_int_eq(ts_copy_stream_isa(isa, &a, &b, 1), -ENOTSUP);
		ck_assert_int_eq(a, 1);
		printf("note: this CPU lacks %s: not tested\n", copy_isa_name(isa));
		return;
	}
	err = check_isa(isa, msg, sizeof(msg));
	ck_assert_msg(!err, "%s", err);
}
END_TEST

START_TEST(unknown_version_refused)
{
	char a = 1, b = 2;

	ck_assert(!copy_isa_supported(COPY_ISA__COUNT));
	ck_assert_int_eq(ts_copy_stream_isa(COPY_ISA__COUNT, &a, &b, 1), -ENOTSUP);
	ck_assert_int_eq(a, 1);
}
END_TEST

/* -------------------------------------------------------------- TIER_SIMD */

struct simd_case {
	const char *value; /* NULL: unset */
	int want;          /* the version asked for (-1: the best) */
};

static const struct simd_case simd_cases[] = {
	{ NULL, -1 },         { "auto", -1 },         { "scalar", COPY_SCALAR },
	{ "SCALAR", COPY_SCALAR }, { "avx2", COPY_AVX2 }, { "avx512", COPY_AVX512 },
	{ "clmul", -1 },      { "clmul,scalar", COPY_SCALAR }, { "avx2,scalar", COPY_AVX2 },
	{ "auto,scalar", -1 }, { " sse4.2 , Avx2 ", COPY_AVX2 },
};

START_TEST(simd_env_child)
{
	const struct simd_case *c = &simd_cases[_i];
	int want = c->want < 0 ? COPY_AVX512 : c->want;
	char line[64];

	while (want > COPY_SCALAR && !copy_isa_supported((enum copy_isa)want))
		want--;
	snprintf(line, sizeof(line), "isa=%s\n", copy_isa_name((enum copy_isa)want));
	t_child_says(CHILD_ENV, c->value, line);
}
END_TEST

/* The child: report the version chosen and check that it copies (no
 * ck_assert here: the child runs outside Check). */
static int child_main(void)
{
	const size_t n = 3 * COPY_STREAM_MIN + 77;
	char *a = malloc(n), *b = malloc(n + 1);
	int rc = 0;

	printf("isa=%s\n", copy_isa_name(copy_isa()));
	fflush(stdout);
	if (!a || !b)
		return 2;
	for (size_t i = 0; i < n; i++)
		a[i] = (char)(i * 7 + 3);
	ts_copy_stream(b + 1, a, n);
	if (memcmp(a, b + 1, n) != 0)
		rc = 1;
	free(a);
	free(b);
	return rc;
}

static Suite *copy_suite(void)
{
	Suite *s = suite_create("copy");
	TCase *tc = tcase_create("versions");

	tcase_add_loop_test(tc, versions_equal_memcpy, 0, COPY_ISA__COUNT);
	tcase_add_test(tc, unknown_version_refused);
	suite_add_tcase(s, tc);
	tc = tcase_create("simd_env");
	tcase_add_loop_test(tc, simd_env_child, 0, (int)ARRAY_SIZE(simd_cases));
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	if (getenv(CHILD_ENV))
		return child_main();
	return t_run_suite(copy_suite());
}
