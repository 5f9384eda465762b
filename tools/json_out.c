/*
 * json_out.c - the tools' writer of JSON strings (json_out.h), used by
 * tier-stat's --json (stat_live.c) and tier-bench step's --json
 * (bench_step_report.c), and the UTF-8 decoder under it, which tier-stat's
 * report and Prometheus labels use too (stat_fields.c).
 */
#include <inttypes.h>
#include <string.h>

#include "json_out.h"

size_t json_out_utf8(const unsigned char *p, size_t n, uint32_t *cp)
{
	static const uint32_t min[5] = { 0, 0, 0x80, 0x800, 0x10000 };
	size_t len;
	uint32_t c;

	if (p[0] < 0x80) {
		*cp = p[0];
		return 1;
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
		return 0;
	}
	if (len > n)
		return 0;
	for (size_t i = 1; i < len; i++) {
		if ((p[i] & 0xc0) != 0x80)
			return 0;
		c = c << 6 | (p[i] & 0x3fu);
	}
	if (c < min[len] || c > 0x10ffff || (c >= 0xd800 && c <= 0xdfff))
		return 0;
	*cp = c;
	return len;
}

bool json_out_control(uint32_t cp)
{
	return cp < 0x20 || (cp >= 0x7f && cp < 0xa0);
}

void json_out_strn(FILE *f, const char *s, size_t max)
{
	const unsigned char *p = (const unsigned char *)s;
	size_t n = strnlen(s, max), k;
	uint32_t cp;

	fputc('"', f);
	for (size_t i = 0; i < n; i += k) {
		k = json_out_utf8(p + i, n - i, &cp);
		if (k == 0) {
			fputs("\\ufffd", f);
			k = 1;
		} else if (cp == '"') {
			fputs("\\\"", f);
		} else if (cp == '\\') {
			fputs("\\\\", f);
		} else if (cp == '\n') {
			fputs("\\n", f);
		} else if (cp == '\r') {
			fputs("\\r", f);
		} else if (cp == '\t') {
			fputs("\\t", f);
		} else if (json_out_control(cp)) {
			fprintf(f, "\\u%04" PRIx32, cp);
		} else {
			fwrite(p + i, 1, k, f);
		}
	}
	fputc('"', f);
}

void json_out_str(FILE *f, const char *s)
{
	json_out_strn(f, s, SIZE_MAX);
}
