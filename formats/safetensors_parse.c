/*
 * safetensors.c - the safetensors reader and writer (safetensors.h): a
 * strict JSON parser for the header, its validation against the file, the
 * header's emission, and data moved with pread/pwrite at offsets.
 *
 * The parser is written for hostile input: it reads only the N header
 * bytes it was given (every access checks pos < n), recursion is bounded
 * (ST_DEPTH_MAX, reached only inside unknown keys of a tensor entry, which
 * are skipped as the official loader skips them), every integer is checked
 * for overflow, and strings are decoded with their \u escapes (surrogate
 * pairs joined, lone ones refused) and raw bytes checked as UTF-8.  Each
 * problem is reported at its byte offset in the file.
 *
 * The writer never holds tensor data: st_writer_open() writes the header
 * into PATH.tmp-<pid> and sizes the file, callers pwrite into it, and
 * st_writer_finish() publishes it with fsync + rename + directory fsync.
 * The writer holds an exclusive flock on its temporary file from before
 * its name appears until it is renamed; a PATH.tmp-<pid> that nobody
 * holds was left by a writer that died (killed mid-export), and the next
 * st_writer_open() or st_reader_open() of PATH removes it.
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/error.h"
#include "common/fault.h"
#include "formats/safetensors.h"

#define ST_DEPTH_MAX 64 /* JSON nesting the parser follows */
#define META_KEY "__metadata__"

/* ------------------------------------------------------------- dtypes */

static const struct {
	const char *name;
	unsigned bits;
} dtypes[ST_DTYPE_COUNT] = {
	[ST_BOOL] = { "BOOL", 8 },
	[ST_F4] = { "F4", 4 },
	[ST_F6_E2M3] = { "F6_E2M3", 6 },
	[ST_F6_E3M2] = { "F6_E3M2", 6 },
	[ST_U8] = { "U8", 8 },
	[ST_I8] = { "I8", 8 },
	[ST_F8_E5M2] = { "F8_E5M2", 8 },
	[ST_F8_E4M3] = { "F8_E4M3", 8 },
	[ST_F8_E8M0] = { "F8_E8M0", 8 },
	[ST_F8_E4M3FNUZ] = { "F8_E4M3FNUZ", 8 },
	[ST_F8_E5M2FNUZ] = { "F8_E5M2FNUZ", 8 },
	[ST_I16] = { "I16", 16 },
	[ST_U16] = { "U16", 16 },
	[ST_F16] = { "F16", 16 },
	[ST_BF16] = { "BF16", 16 },
	[ST_I32] = { "I32", 32 },
	[ST_U32] = { "U32", 32 },
	[ST_F32] = { "F32", 32 },
	[ST_C64] = { "C64", 64 },
	[ST_F64] = { "F64", 64 },
	[ST_I64] = { "I64", 64 },
	[ST_U64] = { "U64", 64 },
};

const char *st_dtype_name(enum st_dtype dt)
{
	return (unsigned)dt < ST_DTYPE_COUNT ? dtypes[dt].name : "?";
}

unsigned st_dtype_bits(enum st_dtype dt)
{
	return (unsigned)dt < ST_DTYPE_COUNT ? dtypes[dt].bits : 0;
}

size_t st_dtype_size(enum st_dtype dt)
{
	unsigned bits = st_dtype_bits(dt);

	return bits % 8 ? 0 : bits / 8;
}

int st_dtype_parse(const char *name, enum st_dtype *out)
{
	TS_NONNULL(name);
	TS_NONNULL(out);
	for (unsigned i = 0; i < ST_DTYPE_COUNT; i++) {
		if (!strcmp(name, dtypes[i].name)) {
			*out = (enum st_dtype)i;
			return 0;
		}
	}
	return ts_err(-EINVAL, "unknown safetensors dtype '%s'", name);
}

/* Bytes of @ndim dims of @dt, as the official loader computes them:
 * elements, then bits, each multiplication checked.  -EOVERFLOW, or
 * -EINVAL when the bits are no whole number of bytes. */
static int tensor_bytes(enum st_dtype dt, unsigned ndim, const uint64_t *shape, uint64_t *out)
{
	uint64_t el = 1, bits;

	for (unsigned k = 0; k < ndim; k++)
		if (__builtin_mul_overflow(el, shape[k], &el))
			return -EOVERFLOW;
	if (__builtin_mul_overflow(el, (uint64_t)st_dtype_bits(dt), &bits))
		return -EOVERFLOW;
	if (bits % 8)
		return -EINVAL;
	*out = bits / 8;
	return 0;
}

/* Length of the valid UTF-8 sequence at @s (@n bytes left), 0 if invalid:
 * no overlong forms, no surrogates, nothing past U+10FFFF. */
static size_t utf8_len(const unsigned char *s, size_t n)
{
	unsigned char c = s[0], lo = 0x80, hi = 0xbf;
	size_t len;

	if (c < 0x80)
		return 1;
	if (c >= 0xc2 && c <= 0xdf)
		len = 2;
	else if (c >= 0xe0 && c <= 0xef)
		len = 3;
	else if (c >= 0xf0 && c <= 0xf4)
		len = 4;
	else
		return 0;
	if (c == 0xe0)
		lo = 0xa0;
	else if (c == 0xed)
		hi = 0x9f;
	else if (c == 0xf0)
		lo = 0x90;
	else if (c == 0xf4)
		hi = 0x8f;
	if (n < len || s[1] < lo || s[1] > hi)
		return 0;
	for (size_t k = 2; k < len; k++)
		if ((s[k] & 0xc0) != 0x80)
			return 0;
	return len;
}

static bool utf8_valid(const char *str)
{
	const unsigned char *s = (const unsigned char *)str;
	size_t n = strlen(str), k;

	for (size_t i = 0; i < n; i += k)
		if (!(k = utf8_len(s + i, n - i)))
			return false;
	return true;
}

/* Full-length pread/pwrite: 0, or -errno; *done the bytes moved (a read
 * stops short at the end of the file). */
static int pread_full(int fd, void *buf, size_t len, uint64_t off, size_t *done)
{
	size_t got = 0;

	while (got < len) {
		ssize_t r = pread(fd, (char *)buf + got, len - got, (off_t)(off + got));

		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0) {
			*done = got;
			return -errno;
		}
		if (r == 0)
			break;
		got += (size_t)r;
	}
	*done = got;
	return 0;
}

static int pwrite_full(int fd, const void *buf, size_t len, uint64_t off)
{
	size_t put = 0;

	while (put < len) {
		ssize_t r = pwrite(fd, (const char *)buf + put, len - put, (off_t)(off + put));

		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0)
			return -errno;
		if (r == 0)
			return -EIO;
		put += (size_t)r;
	}
	return 0;
}

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

/* ------------------------------------------------------------- reader */

/* The entries sorted by name, with the index of each in the header. */
struct by_name {
	const char *name;
	size_t i;
};

struct st_meta {
	char *key, *value;
};

struct st_reader {
	int fd;
	char *path;
	uint64_t hlen, dlen, fsize;
	size_t n, cap;
	struct st_tensor *t;
	size_t *t_at;            /* header offset of each tensor's key */
	size_t captat;
	size_t nmeta, capmeta;
	struct st_meta *meta;
	size_t *m_at;            /* header offset of each metadata key */
	size_t capmat;
	struct by_name *by_name; /* tensor names, sorted, for find */
};

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

static size_t put_utf8(char *o, unsigned cp)
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
			if (!(k = utf8_len(p->s + p->pos, p->n - p->pos))) {
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
			k = put_utf8(tmp, cp);
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

static int cmp_name_only(const void *a, const void *b)
{
	const struct by_name *x = a, *y = b;

	return strcmp(x->name, y->name);
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

		rc = tensor_bytes(t->dtype, t->ndim, t->shape, &t->nbytes);
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

void st_reader_close(struct st_reader *r)
{
	if (!r)
		return;
	if (r->fd >= 0)
		close(r->fd);
	for (size_t i = 0; i < r->n; i++)
		free((char *)r->t[i].name);
	for (size_t i = 0; i < r->nmeta; i++) {
		free(r->meta[i].key);
		free(r->meta[i].value);
	}
	free(r->t);
	free(r->t_at);
	free(r->meta);
	free(r->m_at);
	free(r->by_name);
	free(r->path);
	free(r);
}

/* The folder holding @path into @buf ("." for a bare name): 0, or
 * -ENAMETOOLONG.  No allocation: the sweep below needs none. */
static int dir_of(const char *path, char *buf, size_t n)
{
	const char *slash = strrchr(path, '/');
	size_t len = !slash ? 1 : slash == path ? 1 : (size_t)(slash - path);

	if (len >= n)
		return -ENAMETOOLONG;
	memcpy(buf, slash ? path : ".", len);
	buf[len] = '\0';
	return 0;
}

/*
 * Removes the temporary files a killed writer of @path left: entries of
 * its folder named "<name>.tmp-<digits>" that are regular files and that
 * no writer holds (a live one holds its file's flock).  Best effort: what
 * cannot be looked at is left alone.
 */
static void sweep_dead_tmp(const char *path)
{
	const char *slash = strrchr(path, '/'), *base = slash ? slash + 1 : path;
	size_t blen = strlen(base);
	char dir[PATH_MAX];
	DIR *d;
	struct dirent *e;

	if (!blen || dir_of(path, dir, sizeof(dir)) != 0 || !(d = opendir(dir)))
		return;
	while ((e = readdir(d))) {
		const char *q = e->d_name + blen;
		int fd;
		struct stat st;

		if (strncmp(e->d_name, base, blen) != 0 || strncmp(q, ".tmp-", 5) != 0 || !q[5] ||
		    strspn(q + 5, "0123456789") != strlen(q + 5))
			continue;
		fd = openat(dirfd(d), e->d_name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
		if (fd < 0)
			continue;
		if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && flock(fd, LOCK_EX | LOCK_NB) == 0)
			unlinkat(dirfd(d), e->d_name, 0);
		close(fd);
	}
	closedir(d);
}

int st_reader_open(const char *path, struct st_reader **out)
{
	struct st_reader *r;
	unsigned char len8[8];
	unsigned char *hdr = NULL;
	struct stat st;
	struct jp p;
	size_t got;
	int rc;

	TS_NONNULL(path);
	TS_NONNULL(out);
	*out = NULL;
	sweep_dead_tmp(path);
	if (!(r = ts_calloc(1, sizeof(*r))) || !(r->path = ts_strdup(path))) {
		free(r);
		return ts_err(-ENOMEM, "%s: out of memory", path);
	}
	r->fd = open(path, O_RDONLY | O_CLOEXEC);
	if (r->fd < 0) {
		rc = ts_err(-errno, "%s: cannot open: %s", path, strerror(errno));
		goto fail;
	}
	if (fstat(r->fd, &st)) {
		rc = ts_err(-errno, "%s: fstat: %s", path, strerror(errno));
		goto fail;
	}
	if (!S_ISREG(st.st_mode)) {
		rc = ts_err(-EINVAL, "%s: not a regular file", path);
		goto fail;
	}
	r->fsize = (uint64_t)st.st_size;
	if ((rc = pread_full(r->fd, len8, 8, 0, &got))) {
		rc = ts_err(rc, "%s: read: %s", path, strerror(-rc));
		goto fail;
	}
	if (got < 8) {
		rc = ts_err(-EBADMSG, "%s: byte %zu: the file ends inside the 8-byte header length",
			    path, got);
		goto fail;
	}
	for (int k = 7; k >= 0; k--)
		r->hlen = r->hlen << 8 | len8[k];
	if (r->hlen > ST_HEADER_MAX) {
		rc = ts_err(-EBADMSG, "%s: byte 0: header length %" PRIu64 " is over the limit of %llu",
			    path, r->hlen, ST_HEADER_MAX);
		goto fail;
	}
	if (r->hlen < 2) {
		rc = ts_err(-EBADMSG, "%s: byte 0: header length %" PRIu64
			    " is too small for a JSON object", path, r->hlen);
		goto fail;
	}
	if (8 + r->hlen > r->fsize) {
		rc = ts_err(-EBADMSG, "%s: byte 0: header length %" PRIu64
			    " runs past the end of the file (%" PRIu64 " bytes)", path, r->hlen,
			    r->fsize);
		goto fail;
	}
	r->dlen = r->fsize - 8 - r->hlen;
	if (!(hdr = ts_malloc(r->hlen))) {
		rc = ts_err(-ENOMEM, "%s: out of memory for a header of %" PRIu64 " bytes", path,
			    r->hlen);
		goto fail;
	}
	if ((rc = pread_full(r->fd, hdr, r->hlen, 8, &got))) {
		rc = ts_err(rc, "%s: read: %s", path, strerror(-rc));
		goto fail;
	}
	if (got < r->hlen) {
		rc = ts_err(-EIO, "%s: byte %zu: the file ended while reading the header", path,
			    got + 8);
		goto fail;
	}
	p = (struct jp){ .path = path, .s = hdr, .n = r->hlen };
	if ((rc = jp_header(&p, r)) || (rc = validate(&p, r)))
		goto fail;
	free(hdr);
	free(r->t_at);
	free(r->m_at);
	r->t_at = r->m_at = NULL;
	*out = r;
	return 0;
fail:
	free(hdr);
	st_reader_close(r);
	return rc;
}

size_t st_reader_count(const struct st_reader *r)
{
	TS_NONNULL_OR(r, 0);
	return r->n;
}

const struct st_tensor *st_reader_tensor(const struct st_reader *r, size_t i)
{
	TS_NONNULL_OR(r, NULL);
	return i < r->n ? &r->t[i] : NULL;
}

int st_reader_find(const struct st_reader *r, const char *name, size_t *i)
{
	struct by_name key = { name, 0 }, *hit;

	TS_NONNULL(r);
	TS_NONNULL(name);
	TS_NONNULL(i);
	hit = bsearch(&key, r->by_name, r->n, sizeof(*r->by_name), cmp_name_only);
	if (!hit)
		return ts_err(-ENOENT, "%s: no tensor '%s'", r->path, name);
	*i = hit->i;
	return 0;
}

const char *st_reader_meta(const struct st_reader *r, const char *key)
{
	TS_NONNULL_OR(r, NULL);
	TS_NONNULL_OR(key, NULL);
	for (size_t i = 0; i < r->nmeta; i++)
		if (!strcmp(r->meta[i].key, key))
			return r->meta[i].value;
	return NULL;
}

size_t st_reader_meta_count(const struct st_reader *r)
{
	TS_NONNULL_OR(r, 0);
	return r->nmeta;
}

int st_reader_meta_at(const struct st_reader *r, size_t i, const char **key, const char **value)
{
	TS_NONNULL(r);
	if (i >= r->nmeta)
		return ts_err(-EINVAL, "%s: metadata pair %zu of %zu", r->path, i, r->nmeta);
	if (key)
		*key = r->meta[i].key;
	if (value)
		*value = r->meta[i].value;
	return 0;
}

uint64_t st_reader_header_len(const struct st_reader *r)
{
	TS_NONNULL_OR(r, 0);
	return r->hlen;
}

uint64_t st_reader_data_len(const struct st_reader *r)
{
	TS_NONNULL_OR(r, 0);
	return r->dlen;
}

int st_reader_pread(struct st_reader *r, size_t i, uint64_t off, void *buf, size_t len)
{
	const struct st_tensor *t;
	size_t got;
	int rc;

	TS_NONNULL(r);
	TS_NONNULL(buf);
	if (i >= r->n)
		return ts_err(-EINVAL, "%s: tensor index %zu, the file has %zu", r->path, i, r->n);
	t = &r->t[i];
	if (off > t->nbytes || len > t->nbytes - off)
		return ts_err(-EINVAL, "%s: tensor '%s': bytes [%" PRIu64 ", +%zu) are outside its %"
			      PRIu64, r->path, t->name, off, len, t->nbytes);
	if ((rc = pread_full(r->fd, buf, len, t->file_offset + off, &got)))
		return ts_err(rc, "%s: tensor '%s': read at file byte %" PRIu64 ": %s", r->path,
			      t->name, t->file_offset + off + got, strerror(-rc));
	if (got < len)
		return ts_err(-EIO, "%s: tensor '%s': the file ends at byte %" PRIu64
			      ", reading %zu bytes at file byte %" PRIu64 " (short file)", r->path,
			      t->name, t->file_offset + off + got, len, t->file_offset + off);
	return 0;
}

/* ------------------------------------------------------------- writer */

struct st_wt {
	const char *name;  /* the caller's, used during open alone */
	enum st_dtype dtype;
	uint64_t nbytes, begin;
	char *label;       /* a copy of the name, for messages */
};

struct st_writer {
	int fd;
	char *path, *tmp;
	size_t n;
	struct st_wt *t;
	uint64_t data_start, total;
};

/* The header text under construction; @err once an allocation failed. */
struct sb {
	char *p;
	size_t len, cap;
	bool err;
};

static void sb_putn(struct sb *b, const char *s, size_t n)
{
	if (b->err)
		return;
	if (b->len + n + 1 > b->cap) {
		size_t cap = b->cap ? b->cap : 256;
		char *np;

		while (cap < b->len + n + 1)
			cap *= 2;
		if (!(np = ts_realloc(b->p, cap))) {
			b->err = true;
			return;
		}
		b->p = np;
		b->cap = cap;
	}
	memcpy(b->p + b->len, s, n);
	b->len += n;
	b->p[b->len] = '\0';
}

static void sb_puts(struct sb *b, const char *s)
{
	sb_putn(b, s, strlen(s));
}

static void sb_u64(struct sb *b, uint64_t v)
{
	char num[24];

	sb_putn(b, num, (size_t)snprintf(num, sizeof(num), "%" PRIu64, v));
}

/* @s as a JSON string, escaped as serde_json escapes. */
static void sb_str(struct sb *b, const char *s)
{
	sb_putn(b, "\"", 1);
	for (; *s; s++) {
		unsigned char c = (unsigned char)*s;
		char esc[8];

		switch (c) {
		case '"': sb_putn(b, "\\\"", 2); break;
		case '\\': sb_putn(b, "\\\\", 2); break;
		case '\b': sb_putn(b, "\\b", 2); break;
		case '\f': sb_putn(b, "\\f", 2); break;
		case '\n': sb_putn(b, "\\n", 2); break;
		case '\r': sb_putn(b, "\\r", 2); break;
		case '\t': sb_putn(b, "\\t", 2); break;
		default:
			if (c < 0x20) {
				snprintf(esc, sizeof(esc), "\\u%04x", c);
				sb_putn(b, esc, 6);
			} else {
				sb_putn(b, (const char *)s, 1);
			}
		}
	}
	sb_putn(b, "\"", 1);
}

struct lay {
	unsigned bits;
	size_t i;
};

/* Data layout: descending element bits, ties in the order given. */
static int cmp_layout(const void *a, const void *b)
{
	const struct lay *x = a, *y = b;

	if (x->bits != y->bits)
		return x->bits > y->bits ? -1 : 1;
	return x->i < y->i ? -1 : x->i > y->i;
}

/* The descriptors and metadata, checked; fills w->t (sizes, offsets). */
static int writer_check(struct st_writer *w, const struct st_desc *d, size_t n,
			const char *const *kv, size_t nmeta)
{
	struct by_name *v;
	struct lay *lay;
	uint64_t off = 0;
	size_t nv = n > nmeta ? n : nmeta;
	int rc = 0;

	for (size_t i = 0; i < n; i++) {
		const struct st_desc *x = &d[i];

		if (!x->name)
			return ts_err(-EINVAL, "%s: tensor %zu: name is NULL", w->path, i);
		if (!utf8_valid(x->name))
			return ts_err(-EINVAL, "%s: tensor %zu: name is not valid UTF-8", w->path, i);
		if (!strcmp(x->name, META_KEY))
			return ts_err(-EINVAL, "%s: tensor %zu: '" META_KEY "' is reserved", w->path, i);
		if ((unsigned)x->dtype >= ST_DTYPE_COUNT)
			return ts_err(-EINVAL, "%s: tensor '%s': dtype %d is no safetensors dtype",
				      w->path, x->name, (int)x->dtype);
		if (x->ndim > ST_MAX_DIM)
			return ts_err(-EINVAL, "%s: tensor '%s': %u dimensions, at most %d", w->path,
				      x->name, x->ndim, ST_MAX_DIM);
		rc = tensor_bytes(x->dtype, x->ndim, x->shape, &w->t[i].nbytes);
		if (rc == -EOVERFLOW || w->t[i].nbytes > INT64_MAX)
			return ts_err(-EOVERFLOW, "%s: tensor '%s': its size overflows", w->path,
				      x->name);
		if (rc)
			return ts_err(-EINVAL, "%s: tensor '%s': its %s elements are no whole number "
				      "of bytes", w->path, x->name, st_dtype_name(x->dtype));
		w->t[i].name = x->name;
		w->t[i].dtype = x->dtype;
		if (!(w->t[i].label = ts_strdup(x->name)))
			return ts_err(-ENOMEM, "%s: out of memory", w->path);
	}
	for (size_t i = 0; i < 2 * nmeta; i++) {
		if (!kv[i])
			return ts_err(-EINVAL, "%s: metadata %s %zu is NULL", w->path,
				      i % 2 ? "value" : "key", i / 2);
		if (!utf8_valid(kv[i]))
			return ts_err(-EINVAL, "%s: metadata %s %zu is not valid UTF-8", w->path,
				      i % 2 ? "value" : "key", i / 2);
	}
	if (!(v = ts_malloc((nv ? nv : 1) * sizeof(*v))))
		return ts_err(-ENOMEM, "%s: out of memory", w->path);
	for (size_t i = 0; i < n; i++)
		v[i] = (struct by_name){ d[i].name, i };
	qsort(v, n, sizeof(*v), cmp_name_only);
	for (size_t k = 1; k < n && !rc; k++)
		if (!strcmp(v[k - 1].name, v[k].name))
			rc = ts_err(-EINVAL, "%s: tensor name '%s' given twice", w->path, v[k].name);
	for (size_t i = 0; i < nmeta && !rc; i++)
		v[i] = (struct by_name){ kv[2 * i], i };
	if (!rc)
		qsort(v, nmeta, sizeof(*v), cmp_name_only);
	for (size_t k = 1; k < nmeta && !rc; k++)
		if (!strcmp(v[k - 1].name, v[k].name))
			rc = ts_err(-EINVAL, "%s: metadata key '%s' given twice", w->path, v[k].name);
	free(v);
	if (rc)
		return rc;
	if (!(lay = ts_malloc((n ? n : 1) * sizeof(*lay))))
		return ts_err(-ENOMEM, "%s: out of memory", w->path);
	for (size_t i = 0; i < n; i++)
		lay[i] = (struct lay){ st_dtype_bits(d[i].dtype), i };
	qsort(lay, n, sizeof(*lay), cmp_layout);
	for (size_t k = 0; k < n && !rc; k++) {
		struct st_wt *t = &w->t[lay[k].i];

		t->begin = off;
		if (__builtin_add_overflow(off, t->nbytes, &off) || off > INT64_MAX)
			rc = ts_err(-EOVERFLOW, "%s: the data would be over 2^63 bytes", w->path);
	}
	free(lay);
	return rc;
}

static char *writer_header(struct st_writer *w, const struct st_desc *d,
			   const char *const *kv, size_t nmeta, size_t *len)
{
	struct sb b = { 0 };

	sb_puts(&b, "{");
	if (nmeta) {
		sb_puts(&b, "\"" META_KEY "\":{");
		for (size_t i = 0; i < nmeta; i++) {
			if (i)
				sb_puts(&b, ",");
			sb_str(&b, kv[2 * i]);
			sb_puts(&b, ":");
			sb_str(&b, kv[2 * i + 1]);
		}
		sb_puts(&b, "}");
	}
	for (size_t i = 0; i < w->n; i++) {
		if (i || nmeta)
			sb_puts(&b, ",");
		sb_str(&b, d[i].name);
		sb_puts(&b, ":{\"dtype\":\"");
		sb_puts(&b, st_dtype_name(d[i].dtype));
		sb_puts(&b, "\",\"shape\":[");
		for (unsigned k = 0; k < d[i].ndim; k++) {
			if (k)
				sb_puts(&b, ",");
			sb_u64(&b, d[i].shape[k]);
		}
		sb_puts(&b, "],\"data_offsets\":[");
		sb_u64(&b, w->t[i].begin);
		sb_puts(&b, ",");
		sb_u64(&b, w->t[i].begin + w->t[i].nbytes);
		sb_puts(&b, "]}");
	}
	sb_puts(&b, "}");
	/* pad with spaces to a multiple of 8, as the official writer does */
	while (!b.err && b.len % 8)
		sb_puts(&b, " ");
	if (b.err) {
		free(b.p);
		return NULL;
	}
	*len = b.len;
	return b.p;
}

/* Creates the writer's temporary file, locked before its name appears
 * (O_TMPFILE, then linked), or locked at once where there is no O_TMPFILE. */
static int tmp_create(struct st_writer *w)
{
	char dir[PATH_MAX], proc[64];
	int fd = dir_of(w->path, dir, sizeof(dir));

	if (fd)
		return fd;
	fd = open(dir, O_TMPFILE | O_WRONLY | O_CLOEXEC, 0666);
	if (fd >= 0) {
		snprintf(proc, sizeof(proc), "/proc/self/fd/%d", fd);
		if (flock(fd, LOCK_EX) != 0 || (unlink(w->tmp) != 0 && errno != ENOENT) ||
		    linkat(AT_FDCWD, proc, AT_FDCWD, w->tmp, AT_SYMLINK_FOLLOW) != 0) {
			int rc = -errno;

			close(fd);
			return rc;
		}
		w->fd = fd;
		return 0;
	}
	fd = open(w->tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
	if (fd < 0)
		return -errno;
	flock(fd, LOCK_EX); /* where flock works; elsewhere nothing sweeps */
	w->fd = fd;
	return 0;
}

static void writer_free(struct st_writer *w)
{
	if (w->fd >= 0)
		close(w->fd);
	for (size_t i = 0; w->t && i < w->n; i++)
		free(w->t[i].label);
	free(w->t);
	free(w->path);
	free(w->tmp);
	free(w);
}

void st_writer_abort(struct st_writer *w)
{
	if (!w)
		return;
	if (w->fd >= 0)
		unlink(w->tmp);
	writer_free(w);
}

int st_writer_open(const char *path, const struct st_desc *d, size_t n,
		   const char *const *meta_kv, size_t nmeta, struct st_writer **out)
{
	struct st_writer *w;
	unsigned char len8[8];
	char *hdr = NULL;
	size_t hlen = 0, tlen;
	int rc;

	TS_NONNULL(path);
	TS_NONNULL(out);
	*out = NULL;
	sweep_dead_tmp(path);
	if (n && !d)
		return ts_err(-EINVAL, "%s: %zu tensors but no descriptors", path, n);
	if (nmeta && !meta_kv)
		return ts_err(-EINVAL, "%s: %zu metadata pairs but meta_kv is NULL", path, nmeta);
	if (n > SIZE_MAX / sizeof(struct st_wt) || nmeta > SIZE_MAX / 4)
		return ts_err(-EINVAL, "%s: too many tensors (%zu)", path, n);
	tlen = strlen(path) + 32;
	if (!(w = ts_calloc(1, sizeof(*w))))
		return ts_err(-ENOMEM, "%s: out of memory", path);
	w->fd = -1;
	w->n = n;
	if (!(w->path = ts_strdup(path)) || !(w->tmp = ts_malloc(tlen)) ||
	    !(w->t = ts_calloc(n ? n : 1, sizeof(*w->t)))) {
		writer_free(w);
		return ts_err(-ENOMEM, "%s: out of memory", path);
	}
	snprintf(w->tmp, tlen, "%s.tmp-%ld", path, (long)getpid());
	if ((rc = writer_check(w, d, n, meta_kv, nmeta)))
		goto fail;
	if (!(hdr = writer_header(w, d, meta_kv, nmeta, &hlen))) {
		rc = ts_err(-ENOMEM, "%s: out of memory for the header", path);
		goto fail;
	}
	if (hlen > ST_HEADER_MAX) {
		rc = ts_err(-EINVAL, "%s: the header would be %zu bytes, over the limit of %llu",
			    path, hlen, ST_HEADER_MAX);
		goto fail;
	}
	w->data_start = 8 + hlen;
	w->total = w->data_start;
	for (size_t i = 0; i < n; i++)
		w->total += w->t[i].nbytes; /* writer_check bounded the sum by 2^63 */
	if (w->total > INT64_MAX) {
		rc = ts_err(-EOVERFLOW, "%s: the file would be over 2^63 bytes", path);
		goto fail;
	}
	rc = tmp_create(w);
	if (rc) {
		rc = ts_err(rc, "%s: cannot create: %s", w->tmp, strerror(-rc));
		goto fail;
	}
	for (int k = 0; k < 8; k++)
		len8[k] = (unsigned char)((uint64_t)hlen >> (8 * k));
	if ((rc = pwrite_full(w->fd, len8, 8, 0)) || (rc = pwrite_full(w->fd, hdr, hlen, 8))) {
		rc = ts_err(rc, "%s: write: %s", w->tmp, strerror(-rc));
		goto fail_unlink;
	}
	/* Allocate the data where the file system can: a full disk shows now. */
	if (w->total > w->data_start &&
	    fallocate(w->fd, 0, (off_t)w->data_start, (off_t)(w->total - w->data_start))) {
		if (errno != EOPNOTSUPP && errno != ENOSYS) {
			rc = ts_err(-errno, "%s: allocating %" PRIu64 " bytes: %s", w->tmp, w->total,
				    strerror(errno));
			goto fail_unlink;
		}
		if (ftruncate(w->fd, (off_t)w->total)) {
			rc = ts_err(-errno, "%s: sizing to %" PRIu64 " bytes: %s", w->tmp, w->total,
				    strerror(errno));
			goto fail_unlink;
		}
	}
	free(hdr);
	*out = w;
	return 0;
fail_unlink:
	unlink(w->tmp);
fail:
	free(hdr);
	writer_free(w);
	return rc;
}

uint64_t st_writer_nbytes(const struct st_writer *w, size_t i)
{
	TS_NONNULL_OR(w, 0);
	return i < w->n ? w->t[i].nbytes : 0;
}

uint64_t st_writer_file_offset(const struct st_writer *w, size_t i)
{
	TS_NONNULL_OR(w, 0);
	return i < w->n ? w->data_start + w->t[i].begin : 0;
}

int st_writer_pwrite(struct st_writer *w, size_t i, uint64_t off, const void *buf, size_t len)
{
	const struct st_wt *t;
	int rc;

	TS_NONNULL(w);
	TS_NONNULL(buf);
	if (i >= w->n)
		return ts_err(-EINVAL, "%s: tensor index %zu, the file has %zu", w->path, i, w->n);
	t = &w->t[i];
	if (off > t->nbytes || len > t->nbytes - off)
		return ts_err(-EINVAL, "%s: tensor '%s': bytes [%" PRIu64 ", +%zu) are outside its %"
			      PRIu64, w->path, t->label, off, len, t->nbytes);
	if ((rc = pwrite_full(w->fd, buf, len, w->data_start + t->begin + off)))
		return ts_err(rc, "%s: tensor '%s': write at file byte %" PRIu64 ": %s", w->tmp,
			      t->label, w->data_start + t->begin + off, strerror(-rc));
	return 0;
}

/* fsync of the folder holding @path, so that a rename in it lasts. */
static int fsync_dir(const char *path)
{
	char dir[PATH_MAX];
	int fd, rc = dir_of(path, dir, sizeof(dir));

	if (rc)
		return ts_err(rc, "%s: its folder's name is too long", path);
	fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0 || fsync(fd))
		rc = ts_err(-errno, "%s: fsync of its folder %s: %s", path, dir, strerror(errno));
	if (fd >= 0)
		close(fd);
	return rc;
}

int st_writer_finish(struct st_writer *w)
{
	int rc;

	TS_NONNULL(w);
	if (fsync(w->fd)) {
		rc = ts_err(-errno, "%s: fsync: %s", w->tmp, strerror(errno));
		st_writer_abort(w);
		return rc;
	}
	/* Renamed while still locked: a sweep never takes a live file. */
	if (rename(w->tmp, w->path)) {
		rc = ts_err(-errno, "%s: rename to %s: %s", w->tmp, w->path, strerror(errno));
		unlink(w->tmp);
		writer_free(w);
		return rc;
	}
	rc = close(w->fd);
	w->fd = -1;
	if (rc) {
		rc = ts_err(-errno, "%s: close: %s", w->path, strerror(errno));
		writer_free(w);
		return rc;
	}
	rc = fsync_dir(w->path);
	writer_free(w);
	return rc;
}
