/*
 * json.c - UTF-8 and JSON strings (json.h): the library's one decoder of
 * a UTF-8 sequence (what its parsers accept and its writers pass through),
 * its encoder of a code point (a \u escape read back), and its escaper of
 * a string into a JSON string's body (the safetensors header, the step
 * timeline).
 */
#include "config.h"

#include <stdio.h>
#include <string.h>

#include "common/json.h"

size_t json_utf8_next(const unsigned char *p, size_t n, uint32_t *cp)
{
	static const uint32_t min[5] = { 0, 0, 0x80, 0x800, 0x10000 };
	size_t len;
	uint32_t c;

	if (n == 0)
		return 0;
	if (p[0] < 0x80) {
		c = p[0];
		len = 1;
		goto done;
	}
	if (p[0] >= 0xc2 && p[0] <= 0xdf) {
		len = 2;
		c = p[0] & 0x1fu;
	} else if (p[0] >= 0xe0 && p[0] <= 0xef) {
		len = 3;
		c = p[0] & 0x0fu;
	} else if (p[0] >= 0xf0 && p[0] <= 0xf4) {
		len = 4;
		c = p[0] & 0x07u;
	} else {
		return 0; /* a continuation byte, 0xc0, 0xc1 or 0xf5 and above */
	}
	/* Byte by byte: a NUL (no continuation byte) ends the sequence before
	 * anything after it is read. */
	for (size_t i = 1; i < len; i++) {
		if (i >= n || (p[i] & 0xc0) != 0x80)
			return 0;
		c = c << 6 | (p[i] & 0x3fu);
	}
	if (c < min[len] || c > 0x10ffff || (c >= 0xd800 && c <= 0xdfff))
		return 0;
done:
	if (cp)
		*cp = c;
	return len;
}

bool json_utf8_valid(const char *s)
{
	const unsigned char *p = (const unsigned char *)s;
	size_t n;

	for (; *p; p += n)
		if (!(n = json_utf8_next(p, SIZE_MAX, NULL)))
			return false;
	return true;
}

size_t json_utf8_put(char *o, uint32_t cp)
{
	if (cp < 0x80) {
		o[0] = (char)cp;
		return 1;
	}
	if (cp < 0x800) {
		o[0] = (char)(0xc0 | cp >> 6);
		o[1] = (char)(0x80 | (cp & 0x3f));
		return 2;
	}
	if (cp < 0x10000) {
		o[0] = (char)(0xe0 | cp >> 12);
		o[1] = (char)(0x80 | (cp >> 6 & 0x3f));
		o[2] = (char)(0x80 | (cp & 0x3f));
		return 3;
	}
	o[0] = (char)(0xf0 | cp >> 18);
	o[1] = (char)(0x80 | (cp >> 12 & 0x3f));
	o[2] = (char)(0x80 | (cp >> 6 & 0x3f));
	o[3] = (char)(0x80 | (cp & 0x3f));
	return 4;
}

/* The escape of a byte that has one by name, or NULL. */
static const char *named_escape(unsigned char c)
{
	switch (c) {
	case '"': return "\\\"";
	case '\\': return "\\\\";
	case '\b': return "\\b";
	case '\f': return "\\f";
	case '\n': return "\\n";
	case '\r': return "\\r";
	case '\t': return "\\t";
	default: return NULL;
	}
}

size_t json_escape_one(const unsigned char *s, size_t n, unsigned flags, char *out,
		       size_t *outlen)
{
	const char *name = named_escape(s[0]);
	size_t k;

	if (name) {
		*outlen = 2;
		memcpy(out, name, 2);
		return 1;
	}
	if (s[0] < 0x20 || (s[0] == 0x7f && (flags & JSON_ESC_DEL))) {
		char esc[8];

		snprintf(esc, sizeof(esc), "\\u%04x", s[0]);
		memcpy(out, esc, 6);
		*outlen = 6;
		return 1;
	}
	if (!(k = json_utf8_next(s, n, NULL))) {
		memcpy(out, "\\ufffd", 6);
		*outlen = 6;
		return 1;
	}
	memcpy(out, s, k);
	*outlen = k;
	return k;
}

void json_escape(const char *s, unsigned flags, json_put_fn put, void *ctx)
{
	const unsigned char *p = (const unsigned char *)s, *run = p;

	/* Plain text goes out in runs, each escape on its own. */
	while (*p) {
		char one[JSON_ESC_MAX];
		size_t ol, k = json_escape_one(p, SIZE_MAX, flags, one, &ol);

		if (ol == k && !memcmp(one, p, k)) {
			p += k;
			continue;
		}
		if (p > run)
			put(ctx, (const char *)run, (size_t)(p - run));
		put(ctx, one, ol);
		p += k;
		run = p;
	}
	if (p > run)
		put(ctx, (const char *)run, (size_t)(p - run));
}
