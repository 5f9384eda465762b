/*
 * test_json.c - UTF-8 and JSON strings (common/json.c).
 *
 * Covers:
 *  - json_utf8_next(), table-driven: every length of well-formed sequence
 *    at the edges of its range, with its code point; and every kind of
 *    malformed one (a stray continuation byte, overlong forms of each
 *    length, surrogates, past U+10FFFF, sequences cut short by the bytes
 *    given or by a NUL, a bad continuation byte, nothing given), each
 *    case's bytes in a buffer of exactly their length so that a read past
 *    them is caught under ASan;
 *  - json_utf8_next() against Unicode's table of well-formed byte
 *    sequences (Table 3-7), for every sequence of up to three bytes and
 *    every three-byte start of a four-byte one;
 *  - json_utf8_put(): the encoding at the edges of each length, and every
 *    code point (surrogates aside) encoded and decoded back;
 *  - json_utf8_valid() on whole strings;
 *  - json_escape() and json_escape_one(), table-driven: quotes,
 *    backslashes, the named escapes, the other control characters, DEL
 *    with and without JSON_ESC_DEL, non-ASCII text passed through, bytes
 *    that are not UTF-8 as \ufffd; the one-unit form gives the same text.
 */
#include "config.h"

#include <check.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/json.h"
#include "t_helpers.h"

/* ------------------------------------------------------ json_utf8_next */

struct utf8_case {
	const char *what;
	const char *bytes;
	size_t len;      /* bytes of @bytes given (a NUL counts) */
	bool nul_ended;  /* pass SIZE_MAX, as for a NUL-terminated string */
	size_t want;     /* the sequence's length, 0 for none */
	uint32_t cp;
};

#define OK(what, s, n, cp) { what, s, sizeof(s) - 1, false, n, cp }
#define BAD(what, s) { what, s, sizeof(s) - 1, false, 0, 0 }
#define CUT(what, s, given) { what, s, given, false, 0, 0 }
#define NUL_ENDED(what, s) { what, s, sizeof(s), true, 0, 0 }

static const struct utf8_case utf8_cases[] = {
	OK("ASCII", "A", 1, 0x41),
	{ "NUL", "", 1, false, 1, 0 },
	OK("DEL", "\x7f", 1, 0x7f),
	OK("2 bytes, lowest", "\xc2\x80", 2, 0x80),
	OK("2 bytes, highest", "\xdf\xbf", 2, 0x7ff),
	OK("3 bytes, lowest", "\xe0\xa0\x80", 3, 0x800),
	OK("3 bytes, below the surrogates", "\xed\x9f\xbf", 3, 0xd7ff),
	OK("3 bytes, above the surrogates", "\xee\x80\x80", 3, 0xe000),
	OK("3 bytes, U+FFFD", "\xef\xbf\xbd", 3, 0xfffd),
	OK("3 bytes, highest", "\xef\xbf\xbf", 3, 0xffff),
	OK("4 bytes, lowest", "\xf0\x90\x80\x80", 4, 0x10000),
	OK("4 bytes, an emoji", "\xf0\x9f\x98\x80", 4, 0x1f600),
	OK("4 bytes, highest", "\xf4\x8f\xbf\xbf", 4, 0x10ffff),
	OK("only the first sequence", "\xc3\xa9\xc3\xa9", 2, 0xe9),
	BAD("stray continuation 0x80", "\x80"),
	BAD("stray continuation 0xbf", "\xbf"),
	BAD("overlong 2 bytes (0xc0)", "\xc0\x80"),
	BAD("overlong 2 bytes (0xc1)", "\xc1\xbf"),
	BAD("overlong 3 bytes, U+0000", "\xe0\x80\x80"),
	BAD("overlong 3 bytes, U+07FF", "\xe0\x9f\xbf"),
	BAD("overlong 4 bytes, U+0000", "\xf0\x80\x80\x80"),
	BAD("overlong 4 bytes, U+FFFF", "\xf0\x8f\xbf\xbf"),
	BAD("surrogate U+D800", "\xed\xa0\x80"),
	BAD("surrogate U+DBFF", "\xed\xaf\xbf"),
	BAD("surrogate U+DC00", "\xed\xb0\x80"),
	BAD("surrogate U+DFFF", "\xed\xbf\xbf"),
	BAD("U+110000", "\xf4\x90\x80\x80"),
	BAD("0xf5 lead", "\xf5\x80\x80\x80"),
	BAD("0xf7 lead", "\xf7\xbf\xbf\xbf"),
	BAD("5-byte form", "\xf8\x88\x80\x80\x80"),
	BAD("6-byte form", "\xfc\x84\x80\x80\x80\x80"),
	BAD("0xfe", "\xfe"),
	BAD("0xff", "\xff"),
	BAD("bad second byte", "\xc3\x28"),
	BAD("bad third byte", "\xe2\x82\x28"),
	BAD("bad fourth byte", "\xf0\x9f\x98\x28"),
	BAD("second byte a lead", "\xe2\xc3\xa9"),
	CUT("2 bytes, 1 given", "\xc2\x80", 1),
	CUT("3 bytes, 2 given", "\xe2\x82\xac", 2),
	CUT("3 bytes, 1 given", "\xe2\x82\xac", 1),
	CUT("4 bytes, 3 given", "\xf0\x9f\x98\x80", 3),
	CUT("nothing given", "A", 0),
	NUL_ENDED("cut by a NUL after 1 of 2", "\xc2"),
	NUL_ENDED("cut by a NUL after 2 of 3", "\xe2\x82"),
	NUL_ENDED("cut by a NUL after 3 of 4", "\xf0\x9f\x98"),
	NUL_ENDED("cut by a NUL after 1 of 4", "\xf4"),
};

START_TEST(utf8_next_cases)
{
	const struct utf8_case *c = &utf8_cases[_i];
	/* exactly the bytes given: a read past them is an ASan error */
	unsigned char *buf = malloc(c->len ? c->len : 1);
	uint32_t cp = 0xdeadbeef;
	size_t got;

	ck_assert_ptr_nonnull(buf);
	memcpy(buf, c->bytes, c->len);
	got = json_utf8_next(buf, c->nul_ended ? SIZE_MAX : c->len, &cp);
	ck_assert_msg(got == c->want, "%s: length %zu, want %zu", c->what, got, c->want);
	if (c->want)
		ck_assert_msg(cp == c->cp, "%s: U+%04X, want U+%04X", c->what, (unsigned)cp,
			      (unsigned)c->cp);
	else
		ck_assert_msg(cp == 0xdeadbeef, "%s: *cp written on a refusal", c->what);
	/* the code point is optional */
	ck_assert_uint_eq(json_utf8_next(buf, c->nul_ended ? SIZE_MAX : c->len, NULL), c->want);
	free(buf);
}
END_TEST

/*
 * Unicode 15, Table 3-7: the well-formed byte sequences, as ranges of
 * each byte.  The reference the decoder is checked against.
 */
static const struct {
	int n;
	unsigned char lo[4], hi[4];
} wellformed[] = {
	{ 1, { 0x00 }, { 0x7f } },
	{ 2, { 0xc2, 0x80 }, { 0xdf, 0xbf } },
	{ 3, { 0xe0, 0xa0, 0x80 }, { 0xe0, 0xbf, 0xbf } },
	{ 3, { 0xe1, 0x80, 0x80 }, { 0xec, 0xbf, 0xbf } },
	{ 3, { 0xed, 0x80, 0x80 }, { 0xed, 0x9f, 0xbf } },
	{ 3, { 0xee, 0x80, 0x80 }, { 0xef, 0xbf, 0xbf } },
	{ 4, { 0xf0, 0x90, 0x80, 0x80 }, { 0xf0, 0xbf, 0xbf, 0xbf } },
	{ 4, { 0xf1, 0x80, 0x80, 0x80 }, { 0xf3, 0xbf, 0xbf, 0xbf } },
	{ 4, { 0xf4, 0x80, 0x80, 0x80 }, { 0xf4, 0x8f, 0xbf, 0xbf } },
};

/* The length of the well-formed sequence that starts @s (4 bytes), by the
 * table; 0 for none. */
static size_t reference_len(const unsigned char *s)
{
	for (size_t r = 0; r < ARRAY_SIZE(wellformed); r++) {
		int k;

		for (k = 0; k < wellformed[r].n; k++)
			if (s[k] < wellformed[r].lo[k] || s[k] > wellformed[r].hi[k])
				break;
		if (k == wellformed[r].n)
			return (size_t)k;
	}
	return 0;
}

START_TEST(utf8_next_table)
{
	/* bytes a sequence of this lead does not reach are one value alone;
	 * the fourth: a continuation's edges, and the bytes beside them */
	static const unsigned char last[] = { 0x00, 0x7f, 0x80, 0xbf, 0xc0 };
	unsigned char s[4];

	for (unsigned a = 0; a < 256; a++) {
		unsigned nc = a >= 0xe0 ? 256 : 1;
		size_t nd = a >= 0xf0 ? ARRAY_SIZE(last) : 1;

		for (unsigned b = 0; b < 256; b++) {
			for (unsigned c = 0; c < nc; c++) {
				for (size_t d = 0; d < nd; d++) {
					size_t want, got;

					s[0] = (unsigned char)a;
					s[1] = (unsigned char)b;
					s[2] = (unsigned char)(nc == 1 ? 0x80 : c);
					s[3] = nd == 1 ? 0x80 : last[d];
					want = reference_len(s);
					got = json_utf8_next(s, 4, NULL);
					if (got != want)
						ck_abort_msg("%02x %02x %02x %02x: length %zu, want %zu",
							     s[0], s[1], s[2], s[3], got, want);
				}
			}
		}
	}
}
END_TEST

/* ------------------------------------------------------ json_utf8_put */

struct put_case {
	uint32_t cp;
	const char *want;
};

static const struct put_case put_cases[] = {
	{ 0x0, "" }, /* one NUL byte: checked by length */
	{ 0x41, "A" },
	{ 0x7f, "\x7f" },
	{ 0x80, "\xc2\x80" },
	{ 0xe9, "\xc3\xa9" },
	{ 0x7ff, "\xdf\xbf" },
	{ 0x800, "\xe0\xa0\x80" },
	{ 0x20ac, "\xe2\x82\xac" },
	{ 0xd7ff, "\xed\x9f\xbf" },
	{ 0xe000, "\xee\x80\x80" },
	{ 0xffff, "\xef\xbf\xbf" },
	{ 0x10000, "\xf0\x90\x80\x80" },
	{ 0x1f600, "\xf0\x9f\x98\x80" },
	{ 0x10ffff, "\xf4\x8f\xbf\xbf" },
};

START_TEST(utf8_put_cases)
{
	const struct put_case *c = &put_cases[_i];
	char out[4];
	size_t want = c->cp ? strlen(c->want) : 1;
	size_t n = json_utf8_put(out, c->cp);

	ck_assert_uint_eq(n, want);
	ck_assert_msg(!memcmp(out, c->cp ? c->want : "", n), "U+%04X: wrong bytes",
		      (unsigned)c->cp);
}
END_TEST

START_TEST(utf8_put_every_code_point)
{
	for (uint32_t cp = 0; cp <= 0x10ffff; cp++) {
		unsigned char out[4];
		uint32_t back = 0;
		size_t n, len;

		if (cp >= 0xd800 && cp <= 0xdfff)
			continue;
		n = json_utf8_put((char *)out, cp);
		len = json_utf8_next(out, n, &back);
		if (len != n || back != cp)
			ck_abort_msg("U+%04X: %zu bytes, decoded as %zu bytes U+%04X", (unsigned)cp, n,
				     len, (unsigned)back);
	}
}
END_TEST

/* ----------------------------------------------------- json_utf8_valid */

struct valid_case {
	const char *s;
	bool valid;
};

static const struct valid_case valid_cases[] = {
	{ "", true },
	{ "plain ASCII, \t and \x7f", true },
	{ "caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80", true },
	{ "\xf4\x8f\xbf\xbf", true },
	{ "bad \xff byte", false },
	{ "cut at the end \xe2\x82", false },
	{ "\xe2\x82 cut in the middle", false },
	{ "surrogate \xed\xa0\x80", false },
	{ "overlong slash \xc0\xaf", false },
	{ "past U+10FFFF \xf4\x90\x80\x80", false },
	{ "stray \x80 continuation", false },
};

START_TEST(utf8_valid_cases)
{
	const struct valid_case *c = &valid_cases[_i];

	ck_assert_msg(json_utf8_valid(c->s) == c->valid, "case %d: want %s", _i,
		      c->valid ? "valid" : "invalid");
}
END_TEST

/* ------------------------------------------------------------ escaping */

struct esc_case {
	const char *in;
	unsigned flags;
	const char *want;
};

static const struct esc_case esc_cases[] = {
	{ "", 0, "" },
	{ "plain text", 0, "plain text" },
	{ "/", 0, "/" },
	{ "\"", 0, "\\\"" },
	{ "\\", 0, "\\\\" },
	{ "a\"b\\c\"", 0, "a\\\"b\\\\c\\\"" },
	{ "\b\f\n\r\t", 0, "\\b\\f\\n\\r\\t" },
	{ "line\nnext", JSON_ESC_DEL, "line\\nnext" },
	{ "\x01", 0, "\\u0001" },
	{ "\x1b[31m", 0, "\\u001b[31m" },
	{ "\x0b\x1f", 0, "\\u000b\\u001f" },
	{ "\x7f", 0, "\x7f" },
	{ "\x7f", JSON_ESC_DEL, "\\u007f" },
	{ "a\x7f" "b", JSON_ESC_DEL, "a\\u007fb" },
	{ "caf\xc3\xa9", 0, "caf\xc3\xa9" },
	{ "\xe2\x82\xac 5", 0, "\xe2\x82\xac 5" },
	{ "\xf0\x9f\x98\x80!", JSON_ESC_DEL, "\xf0\x9f\x98\x80!" },
	{ "\xc2\x80", 0, "\xc2\x80" },          /* U+0080 needs no escape in JSON */
	{ "\xe2\x80\xa8", 0, "\xe2\x80\xa8" },  /* nor U+2028 */
	{ "\xff", 0, "\\ufffd" },
	{ "a\xe2\x82", 0, "a\\ufffd\\ufffd" },  /* cut by the NUL: each byte */
	{ "\xed\xa0\x80", 0, "\\ufffd\\ufffd\\ufffd" },
	{ "\xc0\xaf", JSON_ESC_DEL, "\\ufffd\\ufffd" },
	{ "x\xf4\x90\x80\x80y", 0, "x\\ufffd\\ufffd\\ufffd\\ufffdy" },
	{ "\"\xc3\xa9\x01\xff\\", 0, "\\\"\xc3\xa9\\u0001\\ufffd\\\\" },
};

struct buf {
	char s[256];
	size_t len;
	unsigned calls;
};

static void put_buf(void *ctx, const char *text, size_t len)
{
	struct buf *b = ctx;

	ck_assert_uint_gt(len, 0);
	ck_assert_uint_lt(b->len + len, sizeof(b->s));
	memcpy(b->s + b->len, text, len);
	b->len += len;
	b->s[b->len] = '\0';
	b->calls++;
}

START_TEST(escape_cases)
{
	const struct esc_case *c = &esc_cases[_i];
	struct buf b = { .len = 0 };
	char one[JSON_ESC_MAX + 1], joined[256] = "";
	size_t o = 0;

	json_escape(c->in, c->flags, put_buf, &b);
	ck_assert_msg(!strcmp(b.s, c->want), "case %d: got '%s', want '%s'", _i, b.s, c->want);
	/* plain text goes out whole */
	if (!strcmp(c->in, c->want) && *c->in)
		ck_assert_uint_eq(b.calls, 1);
	/* json_escape_one, unit by unit, says the same */
	for (const unsigned char *p = (const unsigned char *)c->in; *p;) {
		size_t ol = 0, k = json_escape_one(p, strlen((const char *)p), c->flags, one, &ol);

		ck_assert_uint_ge(k, 1);
		ck_assert_uint_le(ol, JSON_ESC_MAX);
		memcpy(joined + o, one, ol);
		o += ol;
		p += k;
	}
	joined[o] = '\0';
	ck_assert_msg(!strcmp(joined, c->want), "case %d (one by one): got '%s'", _i, joined);
}
END_TEST

/* Every single byte: escaped or passed, never more than JSON_ESC_MAX. */
START_TEST(escape_every_byte)
{
	for (unsigned c = 1; c < 256; c++) {
		unsigned char s[2] = { (unsigned char)c, 0 };
		char out[JSON_ESC_MAX];
		size_t ol = 0, k;

		for (unsigned flags = 0; flags <= JSON_ESC_DEL; flags++) {
			k = json_escape_one(s, 1, flags, out, &ol);
			ck_assert_uint_eq(k, 1);
			if (c >= 0x80)
				ck_assert_msg(ol == 6 && !memcmp(out, "\\ufffd", 6), "0x%02x alone", c);
			else if (c < 0x20 || c == '"' || c == '\\' || (c == 0x7f && flags))
				ck_assert_msg(out[0] == '\\' && (ol == 2 || ol == 6), "0x%02x", c);
			else
				ck_assert_msg(ol == 1 && out[0] == (char)c, "0x%02x", c);
		}
	}
}
END_TEST

static Suite *json_suite(void)
{
	Suite *s = suite_create("json");
	TCase *tc;

	tc = tcase_create("utf8");
	tcase_add_loop_test(tc, utf8_next_cases, 0, (int)ARRAY_SIZE(utf8_cases));
	tcase_add_test(tc, utf8_next_table);
	tcase_add_loop_test(tc, utf8_put_cases, 0, (int)ARRAY_SIZE(put_cases));
	tcase_add_test(tc, utf8_put_every_code_point);
	tcase_add_loop_test(tc, utf8_valid_cases, 0, (int)ARRAY_SIZE(valid_cases));
	suite_add_tcase(s, tc);

	tc = tcase_create("escape");
	tcase_add_loop_test(tc, escape_cases, 0, (int)ARRAY_SIZE(esc_cases));
	tcase_add_test(tc, escape_every_byte);
	suite_add_tcase(s, tc);

	return s;
}

int main(void)
{
	return t_run_suite(json_suite());
}
