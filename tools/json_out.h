/*
 * json_out.h - the tools' one writer of JSON strings, and the UTF-8
 * decoder it and tier-stat's text output share (json_out.c).  The tools
 * see the public headers alone, so this is theirs, not the library's
 * common/json.c.
 *
 * The strings come from a stats segment above all (a store's name, a
 * backend, a file, its manifest) or from the command line and the
 * environment: trusted for nothing.  A fixed field (char backend[16])
 * need not hold its NUL, so each string is taken up to its NUL or @max
 * bytes (its field's size), and what is not well-formed UTF-8 comes out
 * as U+FFFD: every output is UTF-8, and valid JSON, whatever the input.
 */
#ifndef TIER_TOOLS_JSON_OUT_H
#define TIER_TOOLS_JSON_OUT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/*
 * The well-formed UTF-8 sequence at @p, of the @n bytes left: its length,
 * with its code point in *@cp; 0 when the bytes there are not one
 * (overlong, a surrogate, past U+10FFFF, cut short, a stray byte).
 */
size_t json_out_utf8(const unsigned char *p, size_t n, uint32_t *cp);

/* Whether @cp is a control character: C0, DEL or C1. */
bool json_out_control(uint32_t cp);

/*
 * @s (up to its NUL or @max bytes) as a JSON string, quotes included:
 * '"' and '\\' escaped, \n \r \t by name, every other control character
 * (C0, DEL, C1) as \uXXXX, what is not UTF-8 as \ufffd.
 */
void json_out_strn(FILE *f, const char *s, size_t max);
/* The same for a NUL-terminated @s, no bound. */
void json_out_str(FILE *f, const char *s);

#endif
