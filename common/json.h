/*
 * json.h - UTF-8 and JSON strings (json.c): the library's one check of
 * UTF-8 text (well-formed per RFC 3629: no overlong forms, no surrogates,
 * nothing past U+10FFFF, no sequence cut short), one encoder of a code
 * point, and one escaper of a string into the body of a JSON string.
 *
 * Used by formats/ (the safetensors header's parser and writer, the step
 * timeline's names) and runtime/manifest/ (its environment values, the
 * text of its messages and of the YAML it writes).  The tools have their
 * own writer (tools/json_out.c): they see the public headers alone.
 *
 * Internal to the library; no allocation, no error state.
 */
#ifndef TIER_COMMON_JSON_H
#define TIER_COMMON_JSON_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/*
 * The well-formed UTF-8 sequence at @p, of the @n bytes there: its length
 * (1 to 4) with its code point in *@cp (when @cp is not NULL), or 0 when
 * the bytes there are not one (a stray continuation byte, an overlong
 * form, a surrogate, past U+10FFFF, cut short by @n or by a byte that is
 * no continuation) or @n is 0.  A NUL byte is the one-byte sequence U+0000.
 * A NUL-terminated string may pass SIZE_MAX: no byte after a NUL is read,
 * since a NUL is no continuation byte.
 */
size_t json_utf8_next(const unsigned char *p, size_t n, uint32_t *cp);

/* Whether the NUL-terminated @s is well-formed UTF-8 throughout. */
bool json_utf8_valid(const char *s);

/*
 * The UTF-8 encoding of @cp (at most U+10FFFF, no surrogate: the caller
 * has checked) into @out, which has room for 4 bytes; returns its length.
 */
size_t json_utf8_put(char *out, uint32_t cp);

/*
 * Escaping into the body of a JSON string (the text between its quotes):
 * '"' and '\\' after a backslash, \b \f \n \r \t by name, every other byte
 * below 0x20 as \u00XX (lowercase hex), well-formed UTF-8 as it is, and
 * each byte that does not start a well-formed sequence as \ufffd (U+FFFD),
 * so that any input gives text every JSON parser reads.  serde_json's
 * escapes, which the safetensors header follows, are these with flags 0.
 */
enum {
	JSON_ESC_DEL = 1u << 0, /* also U+007F as \u007f (the step timeline) */
};
/* The most bytes json_escape_one() writes: "\u00XX" or 4 of UTF-8. */
#define JSON_ESC_MAX 6

/*
 * One unit of @s (@n bytes there, at least 1; SIZE_MAX for a
 * NUL-terminated string) escaped into @out (JSON_ESC_MAX bytes, not
 * NUL-terminated), its length in *@outlen; returns the bytes of @s used.
 */
size_t json_escape_one(const unsigned char *s, size_t n, unsigned flags, char *out,
		       size_t *outlen);

/* Where json_escape() sends its text, in pieces. */
typedef void (*json_put_fn)(void *ctx, const char *text, size_t len);

/* The NUL-terminated @s escaped (above), without the quotes, to @put. */
void json_escape(const char *s, unsigned flags, json_put_fn put, void *ctx);

#endif
