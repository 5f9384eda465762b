/*
 * safetensors_parse.c - the safetensors header (safetensors.h): a strict
 * JSON parser for it, and its validation against the file (names unique,
 * sizes against shapes, the data_offsets tiling the data buffer).
 *
 * The parser is written for hostile input: it reads only the N header
 * bytes it was given (every access checks pos < n), recursion is bounded
 * (ST_DEPTH_MAX, reached only inside unknown keys of a tensor entry, which
 * are skipped as the official loader skips them), every integer is checked
 * for overflow, and strings are decoded with their \u escapes (surrogate
 * pairs joined, lone ones refused) and raw bytes checked as UTF-8
 * (common/json.c).  Each problem is reported at its byte offset in the
 * file.  The reader (safetensors_read.c) calls st_header_parse().
 */
#include "config.h"

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "common/fault.h"
#include "common/json.h"
#include "formats/safetensors.h"
#include "formats/safetensors_impl.h"

#define ST_DEPTH_MAX 64 /* JSON nesting the parser follows */

/* Grows *@arr (of @size-byte items, *@cap of them) to hold @need. */
static int grow(void **arr, size_t *cap, size_t need, size_t size)
{
	size_t ncap = *cap ? *cap : 16;
	void *p;

	if (need <= *cap)
		return 0;
	while (ncap < need)
		ncap *= 2;
	if (!(p = ts_realloc(*arr, ncap * size)))
		return -ENOMEM;
	*arr = p;
	*cap = ncap;
	return 0;
}

/* The header being parsed: @s[0..n), which starts at byte 8 of the file. */
struct jp {
	const char *path;
	const unsigned char *s;
	size_t n, pos;
	char found[24];
};

__attribute__((format(printf, 3, 4)))
static int jp_err(struct jp *p, size_t at, const char *fmt, ...)
{
	char msg[512];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	return ts_err(-EBADMSG, "%s: header byte %" PRIu64 ": %s", p->path, (uint64_t)at + 8, msg);
}

/* What is at the cursor, for messages. */
static const char *jp_found(struct jp *p)
{
	unsigned char c;

	if (p->pos >= p->n)
		return "the end of the header";
	c = p->s[p->pos];
	if (c >= 0x20 && c < 0x7f)
		snprintf(p->found, sizeof(p->found), "'%c'", c);
	else
		snprintf(p->found, sizeof(p->found), "byte 0x%02x", c);
	return p->found;
}

static void jp_ws(struct jp *p)
{
	while (p->pos < p->n) {
		unsigned char c = p->s[p->pos];

		if (c != ' ' && c != '\t' && c != '\n' && c != '\r')
			break;
		p->pos++;
	}
}

static int jp_peek(struct jp *p)
{
	jp_ws(p);
	return p->pos < p->n ? p->s[p->pos] : -1;
}

static int jp_expect(struct jp *p, char c)
{
	if (jp_peek(p) != (unsigned char)c)
		return jp_err(p, p->pos, "expected '%c', found %s", c, jp_found(p));
	p->pos++;
	return 0;
}

/* After a member or element: 1 for ',', 0 for @close, else an error. */
static int jp_next(struct jp *p, char close)
{
	int c = jp_peek(p);

	if (c == ',' || c == (unsigned char)close) {
		p->pos++;
		return c == ',';
	}
	return jp_err(p, p->pos, "expected ',' or '%c', found %s", close, jp_found(p));
}

static int hex4(const unsigned char *s, unsigned *out)
{
	unsigned v = 0;

	for (int k = 0; k < 4; k++) {
		unsigned char c = s[k];

		v <<= 4;
		if (c >= '0' && c <= '9')
			v |= c - '0';
		else if (c >= 'a' && c <= 'f')
			v |= c - 'a' + 10;
		else if (c >= 'A' && c <= 'F')
			v |= c - 'A' + 10;
		else
			return -1;
	}
	*out = v;
	return 0;
}

/*
 * A JSON string at the cursor, decoded into a NUL-terminated malloc'd
 * copy (*@out; NULL to check and drop it); *@at its offset.  A NUL from
 * \u0000 is refused: every string we keep is a C string.
 */
static int jp_string(struct jp *p, char **out, size_t *at)
{
	size_t i, len = 0, start;
	char *o = NULL;

	if (jp_peek(p) != '"')
		return jp_err(p, p->pos, "expected a string, found %s", jp_found(p));
	start = p->pos;
	if (at)
		*at = start;
	/* Find the closing quote first, to size the copy. */
	for (i = start + 1; i < p->n && p->s[i] != '"'; i++)
		if (p->s[i] == '\\')
			i++;
	if (i >= p->n)
		return jp_err(p, start, "unterminated string");
	if (out && !(o = ts_malloc(i - start)))
		return ts_err(-ENOMEM, "%s: out of memory for the header", p->path);
	p->pos = start + 1;
	for (;;) {
		unsigned char c = p->s[p->pos];
		char tmp[4];
		size_t k;

		if (c == '"')
			break;
		if (c < 0x20) {
			free(o);
			return jp_err(p, p->pos, "control character 0x%02x in a string", c);
		}
		if (c != '\\') {
			if (!(k = json_utf8_next(p->s + p->pos, p->n - p->pos, NULL))) {
				free(o);
				return jp_err(p, p->pos, "invalid UTF-8 (byte 0x%02x)", c);
			}
			if (o)
				memcpy(o + len, p->s + p->pos, k);
			len += k;
			p->pos += k;
			continue;
		}
		/* an escape: the closing-quote scan made sure a byte follows */
		c = p->s[p->pos + 1];
		k = 1;
		switch (c) {
		case '"': case '\\': case '/': tmp[0] = (char)c; break;
		case 'b': tmp[0] = '\b'; break;
		case 'f': tmp[0] = '\f'; break;
		case 'n': tmp[0] = '\n'; break;
		case 'r': tmp[0] = '\r'; break;
		case 't': tmp[0] = '\t'; break;
		case 'u': {
			unsigned cp, lo;
			size_t esc = p->pos;

			if (p->n - p->pos < 6 || hex4(p->s + p->pos + 2, &cp)) {
				free(o);
				return jp_err(p, esc, "bad \\u escape (4 hex digits expected)");
			}
			p->pos += 4;
			if (cp >= 0xdc00 && cp <= 0xdfff) {
				free(o);
				return jp_err(p, esc, "lone low surrogate \\u%04x", cp);
			}
			if (cp >= 0xd800 && cp <= 0xdbff) {
				if (p->n - p->pos < 8 || p->s[p->pos + 2] != '\\' ||
				    p->s[p->pos + 3] != 'u' || hex4(p->s + p->pos + 4, &lo) ||
				    lo < 0xdc00 || lo > 0xdfff) {
					free(o);
					return jp_err(p, esc, "high surrogate \\u%04x without a low one", cp);
				}
				cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
				p->pos += 6;
			}
			if (cp == 0) {
				free(o);
				return jp_err(p, esc, "NUL (\\u0000) in a string");
			}
			k = json_utf8_put(tmp, cp);
			break;
		}
		default:
			free(o);
			return jp_err(p, p->pos, "bad escape '\\%c'", c >= 0x20 && c < 0x7f ? c : '?');
		}
		if (o)
			memcpy(o + len, tmp, k);
		len += k;
		p->pos += 2;
	}
	p->pos++; /* the closing quote */
	if (o) {
		o[len] = '\0';
		*out = o;
	}
	return 0;
}

/* A non-negative integer that fits 64 bits. */
static int jp_u64(struct jp *p, const char *what, uint64_t *out)
{
	int c = jp_peek(p);
	size_t start = p->pos;
	uint64_t v = 0;

	if (c < '0' || c > '9')
		return jp_err(p, start, "%s: expected a non-negative integer, found %s", what,
			      jp_found(p));
	if (c == '0' && p->pos + 1 < p->n && p->s[p->pos + 1] >= '0' && p->s[p->pos + 1] <= '9')
		return jp_err(p, start, "%s: leading zero in a number", what);
	while (p->pos < p->n && p->s[p->pos] >= '0' && p->s[p->pos] <= '9') {
		if (__builtin_mul_overflow(v, 10u, &v) ||
		    __builtin_add_overflow(v, (uint64_t)(p->s[p->pos] - '0'), &v))
			return jp_err(p, start, "%s: integer over 2^64-1", what);
		p->pos++;
	}
	if (p->pos < p->n && (p->s[p->pos] == '.' || p->s[p->pos] == 'e' || p->s[p->pos] == 'E'))
		return jp_err(p, start, "%s: expected an integer, found a fraction or exponent", what);
	*out = v;
	return 0;
}

static int jp_literal(struct jp *p, const char *lit)
{
	size_t len = strlen(lit);

	if (p->n - p->pos < len || memcmp(p->s + p->pos, lit, len))
		return jp_err(p, p->pos, "expected a JSON value, found %s", jp_found(p));
	p->pos += len;
	return 0;
}

/* Checks and skips any JSON value, @depth levels in. */
static int jp_skip(struct jp *p, int depth)
{
	int c = jp_peek(p), rc, more;

	if (depth > ST_DEPTH_MAX)
		return jp_err(p, p->pos, "JSON nested deeper than %d levels", ST_DEPTH_MAX);
	switch (c) {
	case '"':
		return jp_string(p, NULL, NULL);
	case '{':
		p->pos++;
		if (jp_peek(p) == '}') {
			p->pos++;
			return 0;
		}
		do {
			if ((rc = jp_string(p, NULL, NULL)) || (rc = jp_expect(p, ':')) ||
			    (rc = jp_skip(p, depth + 1)))
				return rc;
		} while ((more = jp_next(p, '}')) == 1);
		return more;
	case '[':
		p->pos++;
		if (jp_peek(p) == ']') {
			p->pos++;
			return 0;
		}
		do {
			if ((rc = jp_skip(p, depth + 1)))
				return rc;
		} while ((more = jp_next(p, ']')) == 1);
		return more;
	case 't':
		return jp_literal(p, "true");
	case 'f':
		return jp_literal(p, "false");
	case 'n':
		return jp_literal(p, "null");
	default:
		break;
	}
	if (c == '-' || (c >= '0' && c <= '9')) {
		/* -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)? */
		size_t start = p->pos, d;

		if (p->s[p->pos] == '-')
			p->pos++;
		d = p->pos;
		if (p->pos < p->n && p->s[p->pos] == '0')
			p->pos++;
		else
			while (p->pos < p->n && p->s[p->pos] >= '0' && p->s[p->pos] <= '9')
				p->pos++;
		if (p->pos == d)
			return jp_err(p, start, "bad number");
		if (p->pos < p->n && p->s[p->pos] == '.') {
			d = ++p->pos;
			while (p->pos < p->n && p->s[p->pos] >= '0' && p->s[p->pos] <= '9')
				p->pos++;
			if (p->pos == d)
				return jp_err(p, start, "bad number");
		}
		if (p->pos < p->n && (p->s[p->pos] == 'e' || p->s[p->pos] == 'E')) {
			p->pos++;
			if (p->pos < p->n && (p->s[p->pos] == '+' || p->s[p->pos] == '-'))
				p->pos++;
			d = p->pos;
			while (p->pos < p->n && p->s[p->pos] >= '0' && p->s[p->pos] <= '9')
				p->pos++;
			if (p->pos == d)
				return jp_err(p, start, "bad number");
		}
		return 0;
	}
	return jp_err(p, p->pos, "expected a JSON value, found %s", jp_found(p));
}

/* "shape": [d0, d1, ...] */
static int jp_shape(struct jp *p, struct st_tensor *t)
{
	int rc, more;

	if ((rc = jp_expect(p, '[')))
		return rc;
	t->ndim = 0;
	if (jp_peek(p) == ']') {
		p->pos++;
		return 0;
	}
	do {
		if (t->ndim == ST_MAX_DIM)
			return jp_err(p, p->pos, "tensor '%s': more than %d dimensions", t->name,
				      ST_MAX_DIM);
		if ((rc = jp_u64(p, "shape", &t->shape[t->ndim])))
			return rc;
		t->ndim++;
	} while ((more = jp_next(p, ']')) == 1);
	return more;
}

/* "data_offsets": [begin, end] */
static int jp_offsets(struct jp *p, struct st_tensor *t)
{
	int rc;

	if ((rc = jp_expect(p, '[')) || (rc = jp_u64(p, "data_offsets", &t->begin)) ||
	    (rc = jp_expect(p, ',')) || (rc = jp_u64(p, "data_offsets", &t->end)))
		return rc;
	if (jp_peek(p) != ']')
		return jp_err(p, p->pos, "data_offsets: expected ']' after 2 integers, found %s",
			      jp_found(p));
	p->pos++;
	return 0;
}

/* A tensor entry {"dtype": .., "shape": .., "data_offsets": ..}; unknown
 * keys are skipped (the official loader ignores them). */
static int jp_tensor(struct jp *p, struct st_tensor *t)
{
	bool seen[3] = { false, false, false };
	static const char *const fields[3] = { "dtype", "shape", "data_offsets" };
	size_t open;
	int rc, more;

	if (jp_peek(p) != '{')
		return jp_err(p, p->pos, "tensor '%s': expected an object, found %s", t->name,
			      jp_found(p));
	open = p->pos++;
	if (jp_peek(p) == '}') {
		p->pos++;
		goto check;
	}
	do {
		char *key;
		size_t at, vat;
		int f;

		if ((rc = jp_string(p, &key, &at)))
			return rc;
		for (f = 0; f < 3 && strcmp(key, fields[f]); f++)
			;
		free(key);
		if ((rc = jp_expect(p, ':')))
			return rc;
		if (f < 3 && seen[f])
			return jp_err(p, at, "tensor '%s': duplicate field '%s'", t->name, fields[f]);
		if (f < 3)
			seen[f] = true;
		if (f == 0) {
			char *dt;

			if ((rc = jp_string(p, &dt, &vat)))
				return rc;
			if (st_dtype_parse(dt, &t->dtype)) {
				rc = jp_err(p, vat, "tensor '%s': unknown dtype '%s'", t->name, dt);
				free(dt);
				return rc;
			}
			free(dt);
		} else if (f == 1) {
			rc = jp_shape(p, t);
		} else if (f == 2) {
			rc = jp_offsets(p, t);
		} else {
			rc = jp_skip(p, 3);
		}
		if (rc)
			return rc;
	} while ((more = jp_next(p, '}')) == 1);
	if (more)
		return more;
check:
	for (int f = 0; f < 3; f++)
		if (!seen[f])
			return jp_err(p, open, "tensor '%s': missing field '%s'", t->name, fields[f]);
	return 0;
}

/* "__metadata__": null or {"key": "value", ...} */
static int jp_meta(struct jp *p, struct st_reader *r)
{
	int rc, more;

	if (jp_peek(p) == 'n')
		return jp_literal(p, "null");
	if (jp_peek(p) != '{')
		return jp_err(p, p->pos, "__metadata__: expected an object or null, found %s",
			      jp_found(p));
	p->pos++;
	if (jp_peek(p) == '}') {
		p->pos++;
		return 0;
	}
	do {
		struct st_meta *m;
		size_t at;

		if (grow((void **)&r->meta, &r->capmeta, r->nmeta + 1, sizeof(*r->meta)) ||
		    grow((void **)&r->m_at, &r->capmat, r->nmeta + 1, sizeof(*r->m_at)))
			return ts_err(-ENOMEM, "%s: out of memory for the metadata", r->path);
		m = &r->meta[r->nmeta];
		m->value = NULL;
		if ((rc = jp_string(p, &m->key, &at)))
			return rc;
		r->m_at[r->nmeta++] = at;
		if ((rc = jp_expect(p, ':')))
			return rc;
		if (jp_peek(p) != '"')
			return jp_err(p, p->pos, "__metadata__ '%s': values are strings, found %s",
				      m->key, jp_found(p));
		if ((rc = jp_string(p, &m->value, NULL)))
			return rc;
	} while ((more = jp_next(p, '}')) == 1);
	return more;
}

static int jp_header(struct jp *p, struct st_reader *r)
{
	bool seen_meta = false;
	int rc, more;

	if ((rc = jp_expect(p, '{')))
		return rc;
	if (jp_peek(p) == '}') {
		p->pos++;
		goto end;
	}
	do {
		char *key;
		size_t at;

		if ((rc = jp_string(p, &key, &at)))
			return rc;
		if ((rc = jp_expect(p, ':'))) {
			free(key);
			return rc;
		}
		if (!strcmp(key, META_KEY)) {
			free(key);
			if (seen_meta)
				return jp_err(p, at, "duplicate key '" META_KEY "'");
			seen_meta = true;
			rc = jp_meta(p, r);
		} else {
			struct st_tensor *t;

			if (grow((void **)&r->t, &r->cap, r->n + 1, sizeof(*r->t)) ||
			    grow((void **)&r->t_at, &r->captat, r->n + 1, sizeof(*r->t_at))) {
				free(key);
				return ts_err(-ENOMEM, "%s: out of memory for the header", r->path);
			}
			t = &r->t[r->n];
			memset(t, 0, sizeof(*t));
			t->name = key;
			r->t_at[r->n++] = at;
			rc = jp_tensor(p, t);
		}
		if (rc)
			return rc;
	} while ((more = jp_next(p, '}')) == 1);
	if (more)
		return more;
end:
	if (jp_peek(p) != -1)
		return jp_err(p, p->pos, "%s after the header's closing '}'", jp_found(p));
	return 0;
}

struct by_off {
	uint64_t begin, end;
	size_t i;
};

static int cmp_off(const void *a, const void *b)
{
	const struct by_off *x = a, *y = b;

	if (x->begin != y->begin)
		return x->begin < y->begin ? -1 : 1;
	if (x->end != y->end)
		return x->end < y->end ? -1 : 1;
	return 0;
}

static int cmp_name(const void *a, const void *b)
{
	const struct by_name *x = a, *y = b;
	int c = strcmp(x->name, y->name);

	return c ? c : (x->i < y->i ? -1 : x->i > y->i);
}

/* Duplicate names among @n, reported at the later one's key (@at). */
static int check_dups(struct jp *p, struct by_name *v, size_t n, const size_t *at,
		      const char *what)
{
	qsort(v, n, sizeof(*v), cmp_name);
	for (size_t k = 1; k < n; k++)
		if (!strcmp(v[k - 1].name, v[k].name))
			return jp_err(p, at[v[k].i], "duplicate %s '%s' (also at header byte %zu)",
				      what, v[k].name, at[v[k - 1].i] + 8);
	return 0;
}

/* Sizes and offsets against each other and the data buffer. */
static int validate(struct jp *p, struct st_reader *r)
{
	struct by_off *v;
	struct by_name *names;
	uint64_t expect = 0;
	int rc = 0;

	/* Names: unique among tensors, and among metadata keys. */
	if (!(names = ts_malloc((r->n > r->nmeta ? r->n : r->nmeta) * sizeof(*names) + 1)))
		return ts_err(-ENOMEM, "%s: out of memory", r->path);
	for (size_t i = 0; i < r->nmeta; i++)
		names[i] = (struct by_name){ r->meta[i].key, i };
	rc = check_dups(p, names, r->nmeta, r->m_at, "metadata key");
	free(names);
	if (rc)
		return rc;
	if (!(r->by_name = ts_malloc((r->n ? r->n : 1) * sizeof(*r->by_name))))
		return ts_err(-ENOMEM, "%s: out of memory", r->path);
	for (size_t i = 0; i < r->n; i++)
		r->by_name[i] = (struct by_name){ r->t[i].name, i };
	if ((rc = check_dups(p, r->by_name, r->n, r->t_at, "tensor name")))
		return rc;

	for (size_t i = 0; i < r->n; i++) {
		struct st_tensor *t = &r->t[i];

		rc = st_tensor_bytes(t->dtype, t->ndim, t->shape, &t->nbytes);
		if (rc == -EOVERFLOW)
			return jp_err(p, r->t_at[i], "tensor '%s': shape overflows 64 bits of %s",
				      t->name, st_dtype_name(t->dtype));
		if (rc)
			return jp_err(p, r->t_at[i],
				      "tensor '%s': its %s elements are no whole number of bytes",
				      t->name, st_dtype_name(t->dtype));
		if (t->end < t->begin)
			return jp_err(p, r->t_at[i], "tensor '%s': data_offsets [%" PRIu64 ", %" PRIu64
				      "] end before they begin", t->name, t->begin, t->end);
		if (t->end - t->begin != t->nbytes)
			return jp_err(p, r->t_at[i], "tensor '%s': its shape of %s is %" PRIu64
				      " bytes, its data_offsets [%" PRIu64 ", %" PRIu64 "] hold %" PRIu64,
				      t->name, st_dtype_name(t->dtype), t->nbytes, t->begin, t->end,
				      t->end - t->begin);
		if (t->end > r->dlen)
			return jp_err(p, r->t_at[i], "tensor '%s': data_offsets [%" PRIu64 ", %" PRIu64
				      "] run past the end of the data (%" PRIu64 " bytes)", t->name,
				      t->begin, t->end, r->dlen);
		t->file_offset = 8 + r->hlen + t->begin;
	}
	if (!(v = ts_malloc((r->n ? r->n : 1) * sizeof(*v))))
		return ts_err(-ENOMEM, "%s: out of memory", r->path);
	for (size_t i = 0; i < r->n; i++)
		v[i] = (struct by_off){ r->t[i].begin, r->t[i].end, i };
	qsort(v, r->n, sizeof(*v), cmp_off);
	/* Sorted, the ranges must tile [0, dlen): the official rule. */
	for (size_t k = 0; k < r->n && !rc; k++) {
		const struct st_tensor *t = &r->t[v[k].i];

		if (t->begin < expect)
			rc = jp_err(p, r->t_at[v[k].i], "tensor '%s': data_offsets [%" PRIu64 ", %"
				    PRIu64 "] overlap tensor '%s' (which ends at %" PRIu64 ")",
				    t->name, t->begin, t->end, r->t[v[k - 1].i].name, expect);
		else if (t->begin > expect)
			rc = jp_err(p, r->t_at[v[k].i], "tensor '%s': data_offsets [%" PRIu64 ", %"
				    PRIu64 "] leave a hole: data bytes [%" PRIu64 ", %" PRIu64
				    ") belong to no tensor", t->name, t->begin, t->end, expect,
				    t->begin);
		expect = t->end;
	}
	free(v);
	if (rc)
		return rc;
	if (expect != r->dlen)
		return ts_err(-EBADMSG, "%s: byte %" PRIu64 ": the tensors cover %" PRIu64
			      " bytes of data but the file holds %" PRIu64 " (%" PRIu64
			      " bytes after the last tensor)", r->path, 8 + r->hlen + expect, expect,
			      r->dlen, r->dlen - expect);

	return 0;
}

int st_header_parse(struct st_reader *r, const unsigned char *hdr)
{
	struct jp p = { .path = r->path, .s = hdr, .n = r->hlen };
	int rc;

	if ((rc = jp_header(&p, r)) || (rc = validate(&p, r)))
		return rc;
	return 0;
}
