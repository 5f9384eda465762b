/*
 * test_trace.c - the step timeline writer (formats/trace.c).
 *
 * Every written file is read back with a small strict JSON parser (below)
 * and checked for what the viewers rely on: the structure, one X event per
 * kept span with the right stage, shard, step, bytes, ts and dur, a
 * thread_name for every tid, and disjoint spans on every track.
 *
 * Covers:
 *  - span layouts: sequential, overlapping and nested spans on one shard,
 *    zero-length and clamped (end < begin) spans, overlapping steps,
 *    several shards, an empty trace; the tracks each shard gets and their
 *    names ("shard K", "shard K (2)");
 *  - names that need escaping (quotes, backslashes, control characters,
 *    UTF-8, bytes that are not UTF-8) and renaming a shard;
 *  - max_spans: later spans dropped and counted in otherData;
 *  - many threads recording and naming at once (the suite runs under TSan);
 *  - errors: a missing directory (-ENOENT), a directory (-EISDIR), no
 *    path (-EINVAL), a full disk at close (-ENOSPC, /dev/full); failed
 *    allocations in open, span and close (fault sites);
 *  - the NULL trace: every call a no-op, trace_close(NULL) = 0;
 *  - tests/formats/trace_check.py, when python3 is present: it accepts a pipeline
 *    trace written here and rejects hand-made bad ones.
 */
#include "config.h"

#include <check.h>
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/error.h"
#include "common/fault.h"
#include "formats/trace.h"
#include "t_helpers.h"

/*
 * ck_assert_msg for checks made per event: Check records the place of
 * every passing ck_assert (a write to its log), which over 100k events
 * costs seconds; this fails the same way and costs nothing when it holds.
 */
#define REQUIRE(cond, ...)                        \
	do {                                      \
		if (!(cond))                      \
			ck_abort_msg(__VA_ARGS__); \
	} while (0)

/* ====================================================== a strict JSON reader */

enum jtype { J_NULL, J_BOOL, J_NUM, J_STR, J_ARR, J_OBJ };

struct jval {
	enum jtype type;
	bool b;
	double num;
	char *str;            /* J_STR: decoded, NUL-terminated */
	size_t len;           /* J_STR: bytes (may hold NULs) */
	struct jval *items;   /* J_ARR, J_OBJ: values */
	char **keys;          /* J_OBJ */
	size_t n;
};

struct jparser {
	const char *s, *p, *end;
	int depth;
	char err[200];
};

static bool jfail(struct jparser *jp, const char *what)
{
	if (!jp->err[0])
		snprintf(jp->err, sizeof(jp->err), "offset %td: %s", jp->p - jp->s, what);
	return false;
}

static void jskip_ws(struct jparser *jp)
{
	while (jp->p < jp->end && (*jp->p == ' ' || *jp->p == '\t' || *jp->p == '\n' ||
				   *jp->p == '\r'))
		jp->p++;
}

static void jfree(struct jval *v)
{
	for (size_t i = 0; i < v->n; i++) {
		jfree(&v->items[i]);
		if (v->keys)
			free(v->keys[i]);
	}
	free(v->items);
	free(v->keys);
	free(v->str);
	memset(v, 0, sizeof(*v));
}

/* Length of a well-formed UTF-8 sequence at @p (bounded by @end), else 0. */
static size_t t_utf8_len(const unsigned char *p, const unsigned char *end)
{
	size_t n;
	uint32_t cp;

	if (p[0] < 0x80)
		return 1;
	if (p[0] >= 0xc2 && p[0] <= 0xdf)
		n = 2, cp = p[0] & 0x1fu;
	else if (p[0] >= 0xe0 && p[0] <= 0xef)
		n = 3, cp = p[0] & 0x0fu;
	else if (p[0] >= 0xf0 && p[0] <= 0xf4)
		n = 4, cp = p[0] & 0x07u;
	else
		return 0;
	if ((size_t)(end - p) < n)
		return 0;
	for (size_t i = 1; i < n; i++) {
		if ((p[i] & 0xc0) != 0x80)
			return 0;
		cp = (cp << 6) | (p[i] & 0x3fu);
	}
	if ((n == 3 && cp < 0x800) || (n == 4 && cp < 0x10000) || cp > 0x10ffff ||
	    (cp >= 0xd800 && cp <= 0xdfff))
		return 0;
	return n;
}

static size_t put_utf8(char *o, uint32_t cp)
{
	if (cp < 0x80) {
		o[0] = (char)cp;
		return 1;
	}
	if (cp < 0x800) {
		o[0] = (char)(0xc0 | (cp >> 6));
		o[1] = (char)(0x80 | (cp & 0x3f));
		return 2;
	}
	if (cp < 0x10000) {
		o[0] = (char)(0xe0 | (cp >> 12));
		o[1] = (char)(0x80 | ((cp >> 6) & 0x3f));
		o[2] = (char)(0x80 | (cp & 0x3f));
		return 3;
	}
	o[0] = (char)(0xf0 | (cp >> 18));
	o[1] = (char)(0x80 | ((cp >> 12) & 0x3f));
	o[2] = (char)(0x80 | ((cp >> 6) & 0x3f));
	o[3] = (char)(0x80 | (cp & 0x3f));
	return 4;
}

static bool jhex4(struct jparser *jp, uint32_t *out)
{
	uint32_t v = 0;

	if (jp->end - jp->p < 4)
		return jfail(jp, "short \\u escape");
	for (int i = 0; i < 4; i++) {
		char c = *jp->p++;

		v <<= 4;
		if (c >= '0' && c <= '9')
			v |= (uint32_t)(c - '0');
		else if (c >= 'a' && c <= 'f')
			v |= (uint32_t)(c - 'a' + 10);
		else if (c >= 'A' && c <= 'F')
			v |= (uint32_t)(c - 'A' + 10);
		else
			return jfail(jp, "bad hex digit in \\u escape");
	}
	*out = v;
	return true;
}

/* At the opening quote. */
static bool jstring(struct jparser *jp, char **out, size_t *len)
{
	/* Decoded text is never longer than its JSON form. */
	char *buf, *o;
	const char *q;

	jp->p++;
	for (q = jp->p; q < jp->end && *q != '"'; q++)
		if (*q == '\\')
			q++;
	buf = malloc((size_t)(q - jp->p) + 1);
	REQUIRE(buf, "out of memory");
	o = buf;
	for (;;) {
		unsigned char c;

		if (jp->p >= jp->end) {
			free(buf);
			return jfail(jp, "unterminated string");
		}
		c = (unsigned char)*jp->p;
		if (c == '"') {
			jp->p++;
			break;
		}
		if (c < 0x20) {
			free(buf);
			return jfail(jp, "raw control character in a string");
		}
		if (c == '\\') {
			uint32_t cp, lo;

			jp->p++;
			if (jp->p >= jp->end) {
				free(buf);
				return jfail(jp, "unterminated escape");
			}
			switch (*jp->p++) {
			case '"': *o++ = '"'; break;
			case '\\': *o++ = '\\'; break;
			case '/': *o++ = '/'; break;
			case 'b': *o++ = '\b'; break;
			case 'f': *o++ = '\f'; break;
			case 'n': *o++ = '\n'; break;
			case 'r': *o++ = '\r'; break;
			case 't': *o++ = '\t'; break;
			case 'u':
				if (!jhex4(jp, &cp))
					goto bad;
				if (cp >= 0xdc00 && cp <= 0xdfff) {
					jfail(jp, "lone low surrogate");
					goto bad;
				}
				if (cp >= 0xd800 && cp <= 0xdbff) {
					if (jp->end - jp->p < 2 || jp->p[0] != '\\' || jp->p[1] != 'u') {
						jfail(jp, "high surrogate without its low half");
						goto bad;
					}
					jp->p += 2;
					if (!jhex4(jp, &lo))
						goto bad;
					if (lo < 0xdc00 || lo > 0xdfff) {
						jfail(jp, "bad low surrogate");
						goto bad;
					}
					cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
				}
				o += put_utf8(o, cp);
				break;
			default:
				jfail(jp, "bad escape");
				goto bad;
			}
			continue;
		}
		{
			size_t n = t_utf8_len((const unsigned char *)jp->p,
					      (const unsigned char *)jp->end);

			if (n == 0) {
				jfail(jp, "a string holds bytes that are not UTF-8");
				goto bad;
			}
			memcpy(o, jp->p, n);
			o += n;
			jp->p += n;
		}
	}
	*o = '\0';
	*len = (size_t)(o - buf);
	*out = buf;
	return true;
bad:
	free(buf);
	return false;
}

static bool jnumber(struct jparser *jp, double *out)
{
	const char *start = jp->p;
	char tmp[64];

	if (jp->p < jp->end && *jp->p == '-')
		jp->p++;
	if (jp->p < jp->end && *jp->p == '0') {
		jp->p++;
	} else if (jp->p < jp->end && *jp->p >= '1' && *jp->p <= '9') {
		while (jp->p < jp->end && *jp->p >= '0' && *jp->p <= '9')
			jp->p++;
	} else {
		return jfail(jp, "bad number");
	}
	if (jp->p < jp->end && *jp->p == '.') {
		jp->p++;
		if (jp->p >= jp->end || *jp->p < '0' || *jp->p > '9')
			return jfail(jp, "no digits after the decimal point");
		while (jp->p < jp->end && *jp->p >= '0' && *jp->p <= '9')
			jp->p++;
	}
	if (jp->p < jp->end && (*jp->p == 'e' || *jp->p == 'E')) {
		jp->p++;
		if (jp->p < jp->end && (*jp->p == '+' || *jp->p == '-'))
			jp->p++;
		if (jp->p >= jp->end || *jp->p < '0' || *jp->p > '9')
			return jfail(jp, "no digits in the exponent");
		while (jp->p < jp->end && *jp->p >= '0' && *jp->p <= '9')
			jp->p++;
	}
	if ((size_t)(jp->p - start) >= sizeof(tmp))
		return jfail(jp, "number too long");
	memcpy(tmp, start, (size_t)(jp->p - start));
	tmp[jp->p - start] = '\0';
	*out = strtod(tmp, NULL);
	return true;
}

static bool jvalue(struct jparser *jp, struct jval *v);

static bool jpush(struct jval *v, size_t *cap)
{
	if (v->n == *cap) {
		*cap = *cap ? *cap * 2 : 8;
		v->items = realloc(v->items, *cap * sizeof(*v->items));
		REQUIRE(v->items, "out of memory");
		if (v->type == J_OBJ) {
			v->keys = realloc(v->keys, *cap * sizeof(*v->keys));
			REQUIRE(v->keys, "out of memory");
		}
	}
	memset(&v->items[v->n], 0, sizeof(v->items[v->n]));
	if (v->type == J_OBJ)
		v->keys[v->n] = NULL;
	v->n++;
	return true;
}

static bool jcontainer(struct jparser *jp, struct jval *v, char close)
{
	size_t cap = 0;

	if (++jp->depth > 64)
		return jfail(jp, "nested too deep");
	jp->p++;
	jskip_ws(jp);
	if (jp->p < jp->end && *jp->p == close) {
		jp->p++;
		jp->depth--;
		return true;
	}
	for (;;) {
		jskip_ws(jp);
		jpush(v, &cap);
		if (close == '}') {
			size_t klen;

			if (jp->p >= jp->end || *jp->p != '"')
				return jfail(jp, "expected a key");
			if (!jstring(jp, &v->keys[v->n - 1], &klen))
				return false;
			for (size_t i = 0; i + 1 < v->n; i++)
				if (strcmp(v->keys[i], v->keys[v->n - 1]) == 0)
					return jfail(jp, "duplicate key");
			jskip_ws(jp);
			if (jp->p >= jp->end || *jp->p != ':')
				return jfail(jp, "expected ':'");
			jp->p++;
		}
		if (!jvalue(jp, &v->items[v->n - 1]))
			return false;
		jskip_ws(jp);
		if (jp->p < jp->end && *jp->p == ',') {
			jp->p++;
			continue;
		}
		if (jp->p < jp->end && *jp->p == close) {
			jp->p++;
			jp->depth--;
			return true;
		}
		return jfail(jp, close == '}' ? "expected ',' or '}'" : "expected ',' or ']'");
	}
}

static bool jliteral(struct jparser *jp, const char *word)
{
	size_t n = strlen(word);

	if ((size_t)(jp->end - jp->p) < n || memcmp(jp->p, word, n) != 0)
		return jfail(jp, "unexpected character");
	jp->p += n;
	return true;
}

static bool jvalue(struct jparser *jp, struct jval *v)
{
	jskip_ws(jp);
	if (jp->p >= jp->end)
		return jfail(jp, "unexpected end");
	switch (*jp->p) {
	case '{':
		v->type = J_OBJ;
		return jcontainer(jp, v, '}');
	case '[':
		v->type = J_ARR;
		return jcontainer(jp, v, ']');
	case '"':
		v->type = J_STR;
		return jstring(jp, &v->str, &v->len);
	case 't':
		v->type = J_BOOL;
		v->b = true;
		return jliteral(jp, "true");
	case 'f':
		v->type = J_BOOL;
		return jliteral(jp, "false");
	case 'n':
		v->type = J_NULL;
		return jliteral(jp, "null");
	default:
		v->type = J_NUM;
		return jnumber(jp, &v->num);
	}
}

/* Parses all of @text (one value, then only white space). */
static bool jparse(const char *text, size_t len, struct jval *out, char *err, size_t errlen)
{
	struct jparser jp = { .s = text, .p = text, .end = text + len };
	bool ok;

	memset(out, 0, sizeof(*out));
	ok = jvalue(&jp, out);
	if (ok) {
		jskip_ws(&jp);
		if (jp.p != jp.end)
			ok = jfail(&jp, "text after the value");
	}
	if (!ok) {
		snprintf(err, errlen, "%s", jp.err);
		jfree(out);
	}
	return ok;
}

static const struct jval *jget(const struct jval *o, const char *key)
{
	if (!o || o->type != J_OBJ)
		return NULL;
	for (size_t i = 0; i < o->n; i++)
		if (strcmp(o->keys[i], key) == 0)
			return &o->items[i];
	return NULL;
}

static double jnum_of(const struct jval *o, const char *key, const char *ctx)
{
	const struct jval *v = jget(o, key);

	REQUIRE(v && v->type == J_NUM, "%s: no number \"%s\"", ctx, key);
	return v->num;
}

static const char *jstr_of(const struct jval *o, const char *key, const char *ctx)
{
	const struct jval *v = jget(o, key);

	REQUIRE(v && v->type == J_STR, "%s: no string \"%s\"", ctx, key);
	return v->str;
}

/* A non-negative integer-valued number. */
static uint64_t juint_of(const struct jval *o, const char *key, const char *ctx)
{
	double d = jnum_of(o, key, ctx);

	REQUIRE(d >= 0 && d == floor(d) && d < 1.8e19, "%s: %s = %g is not a count", ctx,
		      key, d);
	return (uint64_t)d;
}

/* ======================================================= reading a trace */

struct xev {
	const char *name;
	uint32_t tid;
	uint64_t ts, dur;    /* ns, from the file's microseconds */
	bool on_shard;
	bool comm;           /* a collective's span: shard holds its parameter */
	uint64_t shard, step, bytes;
};

#define MAX_TIDS 4096

struct tr {
	struct jval root;
	struct xev *x;
	size_t nx;
	const char *tname[MAX_TIDS];
	long sort_index[MAX_TIDS];
	size_t ntids;          /* 1 + the highest tid named */
	uint64_t dropped, spans;
	const char *process_name;
};

static uint64_t us_to_ns(double us)
{
	return (uint64_t)llround(us * 1000.0);
}

static int xev_cmp(const void *pa, const void *pb)
{
	const struct xev *a = pa, *b = pb;

	if (a->tid != b->tid)
		return a->tid < b->tid ? -1 : 1;
	if (a->ts != b->ts)
		return a->ts < b->ts ? -1 : 1;
	if (a->dur != b->dur)
		return a->dur < b->dur ? -1 : 1;
	return 0;
}

static char *slurp(const char *path, size_t *len)
{
	FILE *f = fopen(path, "rb");
	char *buf = NULL;
	size_t cap = 0, n = 0;

	REQUIRE(f != NULL, "%s: %s", path, strerror(errno));
	for (;;) {
		size_t got;

		if (cap - n < 65536) {
			cap = cap ? cap * 2 : 65536;
			buf = realloc(buf, cap + 1);
			REQUIRE(buf, "out of memory");
		}
		got = fread(buf + n, 1, cap - n, f);
		n += got;
		if (got == 0)
			break;
	}
	ck_assert(!ferror(f));
	fclose(f);
	buf[n] = '\0';
	*len = n;
	return buf;
}

/*
 * Reads and checks a written trace: strict JSON; the top-level keys; every
 * event's fields; a thread_name and thread_sort_index for every tid, tid 0
 * "steps"; every tid holding spans of one group only (the steps, or one
 * shard); disjoint spans on every tid.  @t->x is left sorted by (tid, ts).
 */
static void read_trace(const char *path, struct tr *t)
{
	char err[256], ctx[128];
	size_t len;
	char *text = slurp(path, &len);
	const struct jval *evs, *other;

	memset(t, 0, sizeof(*t));
	REQUIRE(jparse(text, len, &t->root, err, sizeof(err)), "%s: not JSON: %s", path,
		      err);
	free(text);
	REQUIRE(t->root.type == J_OBJ, "%s: not an object", path);
	evs = jget(&t->root, "traceEvents");
	REQUIRE(evs && evs->type == J_ARR, "%s: no traceEvents list", path);
	ck_assert_str_eq(jstr_of(&t->root, "displayTimeUnit", path), "ms");
	other = jget(&t->root, "otherData");
	REQUIRE(other && other->type == J_OBJ, "%s: no otherData", path);
	t->dropped = juint_of(other, "dropped_spans", "otherData");
	t->spans = juint_of(other, "spans", "otherData");
	ck_assert_str_eq(jstr_of(other, "version", "otherData"), TIER_VERSION_STRING);

	t->x = calloc(evs->n ? evs->n : 1, sizeof(*t->x));
	REQUIRE(t->x, "out of memory");
	for (int i = 0; i < MAX_TIDS; i++)
		t->sort_index[i] = -1;
	for (size_t i = 0; i < evs->n; i++) {
		const struct jval *e = &evs->items[i], *args;
		const char *ph, *name;
		uint64_t tid;

		snprintf(ctx, sizeof(ctx), "%s: event %zu", path, i);
		REQUIRE(e->type == J_OBJ, "%s: not an object", ctx);
		ph = jstr_of(e, "ph", ctx);
		name = jstr_of(e, "name", ctx);
		REQUIRE(juint_of(e, "pid", ctx) == 1, "%s: pid is not 1", ctx);
		tid = juint_of(e, "tid", ctx);
		REQUIRE(tid < MAX_TIDS, "%s: tid %llu", ctx, (unsigned long long)tid);
		args = jget(e, "args");
		REQUIRE(args && args->type == J_OBJ, "%s: no args", ctx);
		if (strcmp(ph, "M") == 0) {
			if (strcmp(name, "process_name") == 0) {
				t->process_name = jstr_of(args, "name", ctx);
			} else if (strcmp(name, "thread_name") == 0) {
				REQUIRE(!t->tname[tid], "%s: tid %llu named twice", ctx,
					      (unsigned long long)tid);
				t->tname[tid] = jstr_of(args, "name", ctx);
				if (tid + 1 > t->ntids)
					t->ntids = tid + 1;
			} else if (strcmp(name, "thread_sort_index") == 0) {
				t->sort_index[tid] = (long)juint_of(args, "sort_index", ctx);
			} else {
				REQUIRE(strcmp(name, "process_sort_index") == 0, "%s: metadata %s", ctx,
					name);
			}
			continue;
		}
		REQUIRE(strcmp(ph, "X") == 0, "%s: ph '%s'", ctx, ph);
		{
			struct xev *x = &t->x[t->nx++];
			double ts = jnum_of(e, "ts", ctx), dur = jnum_of(e, "dur", ctx);

			REQUIRE(ts >= 0 && dur >= 0, "%s: ts %g dur %g", ctx, ts, dur);
			REQUIRE(strcmp(jstr_of(e, "cat", ctx), name) == 0, "%s: cat is not the name", ctx);
			x->name = name;
			x->tid = (uint32_t)tid;
			x->ts = us_to_ns(ts);
			x->dur = us_to_ns(dur);
			x->step = juint_of(args, "step", ctx);
			x->comm = strcmp(name, "comm") == 0;
			x->on_shard = strcmp(name, "step") != 0 && !x->comm;
			if (x->comm) {
				x->shard = juint_of(args, "param", ctx);
				x->bytes = juint_of(args, "bytes", ctx);
				REQUIRE(args->n == 3, "%s: %zu args", ctx, args->n);
			} else if (x->on_shard) {
				x->shard = juint_of(args, "shard", ctx);
				x->bytes = juint_of(args, "bytes", ctx);
				REQUIRE(args->n == 3, "%s: %zu args", ctx, args->n);
			} else {
				REQUIRE(args->n == 1, "%s: %zu args", ctx, args->n);
			}
		}
	}
	ck_assert_str_eq(t->process_name ? t->process_name : "(none)", "tierstore");
	REQUIRE(t->ntids >= 1 && t->tname[0], "%s: no steps track", path);
	ck_assert_str_eq(t->tname[0], "steps");
	for (size_t tid = 0; tid < t->ntids; tid++) {
		REQUIRE(t->tname[tid], "%s: tid %zu has no name", path, tid);
		REQUIRE(t->sort_index[tid] == (long)tid, "%s: tid %zu sort index %ld", path,
			      tid, t->sort_index[tid]);
	}
	ck_assert_uint_eq(t->nx, t->spans);

	qsort(t->x, t->nx, sizeof(*t->x), xev_cmp);
	for (size_t i = 0; i < t->nx; i++) {
		const struct xev *a = &t->x[i];

		REQUIRE(a->tid < t->ntids, "%s: span on unnamed tid %u", path, a->tid);
		if (i == 0 || t->x[i - 1].tid != a->tid)
			continue;
		REQUIRE(t->x[i - 1].ts + t->x[i - 1].dur <= a->ts,
			      "%s: tid %u: %s [%llu+%llu] overlaps %s at %llu", path, a->tid,
			      t->x[i - 1].name, (unsigned long long)t->x[i - 1].ts,
			      (unsigned long long)t->x[i - 1].dur, a->name,
			      (unsigned long long)a->ts);
		REQUIRE(t->x[i - 1].on_shard == a->on_shard && t->x[i - 1].comm == a->comm &&
			      (!a->on_shard || t->x[i - 1].shard == a->shard),
			      "%s: tid %u mixes groups", path, a->tid);
	}
	/* Step spans on the first tids, then the collectives, then the shard
	 * tracks in shard order. */
	for (size_t i = 1; i < t->nx; i++) {
		const struct xev *p = &t->x[i - 1], *a = &t->x[i];

		REQUIRE(!(p->on_shard && !a->on_shard), "%s: a steps or collectives track after a shard's",
			      path);
		REQUIRE(!(p->comm && !a->comm && !a->on_shard), "%s: a steps track after the collectives'",
			      path);
		REQUIRE(!(p->on_shard && a->on_shard && p->shard > a->shard),
			      "%s: shard %llu's track after shard %llu's", path,
			      (unsigned long long)a->shard, (unsigned long long)p->shard);
	}
}

static void tr_free(struct tr *t)
{
	free(t->x);
	jfree(&t->root);
}

/* Tracks (distinct tids) holding spans of @shard (or, -1, of the steps;
 * -2, of the collectives). */
static size_t tracks_of(const struct tr *t, long long shard)
{
	size_t n = 0;
	long prev = -1;

	for (size_t i = 0; i < t->nx; i++) {
		const struct xev *x = &t->x[i];
		bool mine = shard == -1 ? !x->on_shard && !x->comm
			    : shard == -2 ? x->comm
					  : (x->on_shard && x->shard == (uint64_t)shard);

		if (mine && (long)x->tid != prev) {
			n++;
			prev = (long)x->tid;
		}
	}
	return n;
}

static const char *tid_name_of_shard(const struct tr *t, uint64_t shard, unsigned track)
{
	long prev = -1;
	unsigned k = 0;

	for (size_t i = 0; i < t->nx; i++) {
		const struct xev *x = &t->x[i];

		if (!x->on_shard || x->shard != shard || (long)x->tid == prev)
			continue;
		if (k++ == track)
			return t->tname[x->tid];
		prev = (long)x->tid;
	}
	return NULL;
}

/* ============================================================= fixtures */

static char *g_dir;

static void setup(void)
{
	ts_fault_reset_all();
	ts_err_clear();
	g_dir = t_mkdtemp();
}

static void teardown(void)
{
	ts_fault_reset_all();
	t_rmtree(g_dir);
	free(g_dir);
	g_dir = NULL;
}

static char *tpath(const char *name)
{
	char *p;

	ck_assert_int_ge(asprintf(&p, "%s/%s", g_dir, name), 0);
	return p;
}

static struct trace *topen(const char *path, uint64_t max)
{
	struct trace *t = NULL;

	ck_assert_msg(trace_open(path, max, &t) == 0, "trace_open %s: %s", path,
		      tier_last_error());
	ck_assert_ptr_nonnull(t);
	return t;
}

static void tclose(struct trace *t)
{
	ck_assert_msg(trace_close(t) == 0, "trace_close: %s", tier_last_error());
}

/* ============================================================== layouts */

#define BASE 1000000000000ull  /* the clock's arbitrary origin */

struct span_in {
	enum trace_stage stage;
	uint32_t shard;
	uint64_t step;
	uint64_t begin, end;   /* ns after BASE */
	uint64_t bytes;
};

struct want_tracks {
	long long shard;       /* -1: the steps, -2: the collectives */
	size_t tracks;
};

struct layout_case {
	const char *what;
	struct span_in spans[12];
	size_t nspans;
	struct want_tracks want[4];
	size_t nwant;
};

static const struct layout_case layouts[] = {
	{ "sequential stages of one shard",
	  { { TRACE_STEP, 0, 0, 0, 40000, 0 },
	    { TRACE_NVME_READ, 0, 0, 1, 10001, 1 },
	    { TRACE_H2D, 0, 0, 10001, 20002, 2 },
	    { TRACE_UPDATE_GPU, 0, 0, 20002, 30003, 3 },
	    { TRACE_D2H, 0, 0, 30003, 39999, 4 } },
	  5, { { -1, 1 }, { 0, 1 } }, 2 },
	{ "overlapping spans on one shard",
	  { { TRACE_NVME_WRITE, 1, 0, 0, 100000, 11 },
	    { TRACE_UPDATE_CPU, 1, 1, 50000, 150000, 12 },
	    { TRACE_STALL, 1, 1, 60000, 70000, 13 },
	    { TRACE_D2H, 1, 1, 120000, 200000, 14 } },
	  4, { { -1, 0 }, { 1, 3 } }, 2 },
	{ "spans starting together and nesting",
	  { { TRACE_UPDATE_CPU, 2, 0, 500, 100500, 21 },
	    { TRACE_STALL, 2, 0, 500, 50500, 22 },
	    { TRACE_NVME_READ, 2, 0, 50500, 100500, 23 } },
	  3, { { 2, 2 } }, 1 },
	{ "zero-length and clamped spans",
	  { { TRACE_STALL, 3, 0, 10, 10, 31 },
	    { TRACE_STALL, 3, 0, 10, 10, 32 },
	    { TRACE_H2D, 3, 0, 20, 5, 33 },
	    { TRACE_D2H, 3, 0, 20, 21, 34 } },
	  4, { { 3, 1 } }, 1 },
	{ "overlapping steps and several shards",
	  { { TRACE_STEP, 99, 0, 0, 100000, 0 },
	    { TRACE_STEP, 99, 1, 90000, 200000, 0 },
	    { TRACE_STEP, 99, 2, 200000, 300000, 0 },
	    { TRACE_UPDATE_CPU, 7, 0, 1000, 2000, 41 },
	    { TRACE_UPDATE_CPU, 0, 0, 1000, 2000, 42 },
	    { TRACE_NVME_WRITE, 7, 0, 1500, 95000, 43 },
	    { TRACE_UPDATE_CPU, 7, 1, 91000, 92000, 44 },
	    { TRACE_UPDATE_GPU, 4000000000u, 2, 210000, 220000, 45 } },
	  8, { { -1, 2 }, { 0, 1 }, { 7, 2 }, { 4000000000ll, 1 } }, 4 },
	{ "collectives beside steps and shards",
	  { { TRACE_STEP, 0, 0, 0, 100000, 0 },
	    { TRACE_COMM, 0, 0, 1000, 5000, 4096 },
	    { TRACE_COMM, 1, 0, 2000, 9000, 8192 },
	    { TRACE_COMM, 0, 0, 60000, 70000, 4096 },
	    { TRACE_UPDATE_CPU, 0, 0, 10000, 20000, 51 },
	    { TRACE_NVME_READ, 1, 0, 3000, 8000, 52 } },
	  6, { { -1, 1 }, { -2, 2 }, { 0, 1 }, { 1, 1 } }, 4 },
	{ "an empty trace", { { 0 } }, 0, { { -1, 0 } }, 1 },
};

START_TEST(layout)
{
	const struct layout_case *c = &layouts[_i];
	char *path = tpath("layout.json");
	struct trace *t = topen(path, 0);
	uint64_t origin = UINT64_MAX;
	struct tr r;

	for (size_t i = 0; i < c->nspans; i++) {
		const struct span_in *s = &c->spans[i];

		trace_span(t, s->stage, s->shard, s->step, BASE + s->begin, BASE + s->end, s->bytes);
		if (s->begin < origin)
			origin = s->begin;
	}
	tclose(t);
	read_trace(path, &r);
	ck_assert_msg(r.nx == c->nspans, "%s: %zu events for %zu spans", c->what, r.nx,
		      c->nspans);
	ck_assert_uint_eq(r.dropped, 0);
	/* Every span is in the file once, with its times and arguments. */
	for (size_t i = 0; i < c->nspans; i++) {
		const struct span_in *s = &c->spans[i];
		uint64_t end = s->end < s->begin ? s->begin : s->end;
		size_t found = 0;

		for (size_t k = 0; k < r.nx; k++) {
			const struct xev *x = &r.x[k];

			if (strcmp(x->name, trace_stage_name(s->stage)) != 0 || x->step != s->step ||
			    x->ts != s->begin - origin || x->dur != end - s->begin)
				continue;
			if (s->stage == TRACE_STEP ? x->on_shard || x->comm
						   : ((s->stage == TRACE_COMM ? !x->comm : !x->on_shard) ||
						      x->shard != s->shard || x->bytes != s->bytes))
				continue;
			found++;
		}
		ck_assert_msg(found >= 1, "%s: span %zu (%s) not in the file", c->what, i,
			      trace_stage_name(s->stage));
	}
	for (size_t w = 0; w < c->nwant; w++) {
		size_t got = tracks_of(&r, c->want[w].shard);

		ck_assert_msg(got == c->want[w].tracks, "%s: shard %lld on %zu tracks, want %zu",
			      c->what, c->want[w].shard, got, c->want[w].tracks);
		if (c->want[w].shard == -2) {
			/* the collectives' tracks: "collectives", "collectives (2)"... */
			long prev = -1;
			unsigned k = 0;

			for (size_t i = 0; i < r.nx; i++) {
				char want[32];

				if (!r.x[i].comm || (long)r.x[i].tid == prev)
					continue;
				prev = (long)r.x[i].tid;
				if (k == 0)
					snprintf(want, sizeof(want), "collectives");
				else
					snprintf(want, sizeof(want), "collectives (%u)", k + 1);
				ck_assert_str_eq(r.tname[r.x[i].tid], want);
				k++;
			}
		}
		if (c->want[w].shard < 0)
			continue;
		for (unsigned k = 0; k < got; k++) {
			char want[64];
			const char *name = tid_name_of_shard(&r, (uint64_t)c->want[w].shard, k);

			if (k == 0)
				snprintf(want, sizeof(want), "shard %lld", c->want[w].shard);
			else
				snprintf(want, sizeof(want), "shard %lld (%u)", c->want[w].shard, k + 1);
			ck_assert_str_eq(name, want);
		}
	}
	/* Extra step tracks are tids 1, 2...: named "steps (2)"... */
	for (size_t k = 1; k < tracks_of(&r, -1); k++) {
		char want[32];

		snprintf(want, sizeof(want), "steps (%zu)", k + 1);
		ck_assert_str_eq(r.tname[k], want);
	}
	tr_free(&r);
	free(path);
}
END_TEST

/* ================================================================ names */

struct name_case {
	const char *set;      /* what trace_name_shard gets */
	const char *shown;    /* the decoded thread_name */
};

static const struct name_case names[] = {
	{ "layer.3#2", "layer.3#2" },
	{ "", "" },
	{ "say \"hi\"", "say \"hi\"" },
	{ "back\\slash\\", "back\\slash\\" },
	{ "tab\tnl\ncr\rff\fbs\b", "tab\tnl\ncr\rff\fbs\b" },
	{ "ctl\x01\x1f\x7f end", "ctl\x01\x1f\x7f end" },
	{ "caf\xc3\xa9 \xe6\x97\xa5\xe6\x9c\xac \xf0\x9f\x98\x80", "caf\xc3\xa9 \xe6\x97\xa5\xe6\x9c\xac \xf0\x9f\x98\x80" },
	{ "bad \xff\xfe!", "bad \xef\xbf\xbd\xef\xbf\xbd!" },
	{ "overlong \xc0\xaf", "overlong \xef\xbf\xbd\xef\xbf\xbd" },
	{ "cut \xe6\x97", "cut \xef\xbf\xbd\xef\xbf\xbd" },
	{ "surrogate \xed\xa0\x80", "surrogate \xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd" },
	{ "</script>\\u0000", "</script>\\u0000" },
};

/* The name, and " (2)" after it on the shard's second track. */
START_TEST(shard_names)
{
	const struct name_case *c = &names[_i];
	char *path = tpath("names.json");
	struct trace *t = topen(path, 0);
	char second[256];
	struct tr r;

	trace_name_shard(t, 5, c->set);
	trace_span(t, TRACE_UPDATE_CPU, 5, 0, BASE, BASE + 100, 1);
	trace_span(t, TRACE_NVME_WRITE, 5, 0, BASE + 50, BASE + 150, 2);
	tclose(t);
	read_trace(path, &r);
	ck_assert_uint_eq(r.nx, 2);
	ck_assert_uint_eq(tracks_of(&r, 5), 2);
	ck_assert_str_eq(tid_name_of_shard(&r, 5, 0), c->shown);
	snprintf(second, sizeof(second), "%s (2)", c->shown);
	ck_assert_str_eq(tid_name_of_shard(&r, 5, 1), second);
	tr_free(&r);
	free(path);
}
END_TEST

/* The last name given wins; NULL brings back the default; names of shards
 * with no spans appear nowhere. */
START_TEST(rename_shard)
{
	char *path = tpath("rename.json");
	struct trace *t = topen(path, 0);
	struct tr r;

	trace_name_shard(t, 1, "first");
	trace_name_shard(t, 2, "two");
	trace_name_shard(t, 1, "second");
	trace_name_shard(t, 3, "three");
	trace_name_shard(t, 3, NULL);
	trace_name_shard(t, 9, "never used");
	for (uint32_t s = 1; s <= 3; s++)
		trace_span(t, TRACE_H2D, s, 0, BASE + s, BASE + s + 10, s);
	tclose(t);
	read_trace(path, &r);
	ck_assert_str_eq(tid_name_of_shard(&r, 1, 0), "second");
	ck_assert_str_eq(tid_name_of_shard(&r, 2, 0), "two");
	ck_assert_str_eq(tid_name_of_shard(&r, 3, 0), "shard 3");
	for (size_t tid = 0; tid < r.ntids; tid++)
		ck_assert_str_ne(r.tname[tid], "never used");
	ck_assert_uint_eq(r.ntids, 4);
	tr_free(&r);
	free(path);
}
END_TEST

static const char *const stage_names_want[TRACE__STAGES] = {
	"step", "nvme_read", "h2d", "update_cpu", "update_gpu", "d2h", "nvme_write", "stall", "staging",
	"grad_in", "kernel_gpu", "out_d2h", "comm",
};

START_TEST(stage_names)
{
	for (int s = 0; s < TRACE__STAGES; s++)
		ck_assert_str_eq(trace_stage_name((enum trace_stage)s), stage_names_want[s]);
	ck_assert_str_eq(trace_stage_name(TRACE__STAGES), "unknown");
	ck_assert_str_eq(trace_stage_name((enum trace_stage)-1), "unknown");
}
END_TEST

/* ============================================================ max_spans */

struct max_case {
	uint64_t max;         /* 0: the default (4 Mi) */
	size_t record;
	size_t kept;
};

static const struct max_case maxes[] = {
	{ 10, 25, 10 },
	{ 1, 3, 1 },
	{ 100, 100, 100 },
	{ 1500, 3000, 1500 },   /* the array's growth stops at the bound */
	{ 0, 5000, 5000 },
};

START_TEST(max_spans)
{
	const struct max_case *c = &maxes[_i];
	char *path = tpath("max.json");
	struct trace *t = topen(path, c->max);
	struct tr r;

	for (size_t i = 0; i < c->record; i++)
		trace_span(t, i % 10 ? TRACE_NVME_READ : TRACE_STEP, (uint32_t)(i % 3), i / 10,
			   BASE + i * 1000, BASE + i * 1000 + 1500, i);
	/* A bad stage is ignored, not counted. */
	trace_span(t, TRACE__STAGES, 0, 0, BASE, BASE + 1, 0);
	tclose(t);
	read_trace(path, &r);
	ck_assert_uint_eq(r.nx, c->kept);
	ck_assert_uint_eq(r.dropped, c->record - c->kept);
	/* The first spans are the ones kept. */
	for (size_t i = 0; i < r.nx; i++)
		REQUIRE(r.x[i].ts / 1000 < c->kept, "span %llu kept",
			(unsigned long long)(r.x[i].ts / 1000));
	tr_free(&r);
	free(path);
}
END_TEST

/* ============================================================ concurrency */

#define WRITERS 8
#define PER_WRITER 4000
#define CSHARDS 6

struct writer {
	struct trace *t;
	pthread_barrier_t *go;
	unsigned id;
	uint64_t per_shard[CSHARDS];
	uint64_t steps;
};

static void *writer_main(void *arg)
{
	struct writer *w = arg;
	uint64_t seed = 0x9e3779b97f4a7c15ull * (w->id + 1);

	pthread_barrier_wait(w->go);
	for (unsigned i = 0; i < PER_WRITER; i++) {
		uint64_t begin = BASE + t_rnd_next(&seed) % 5000000;
		uint64_t len = t_rnd_next(&seed) % 20000;

		if (i % 50 == 0 && w->id == 0) {
			trace_span(w->t, TRACE_STEP, 0, i / 50, begin, begin + len, 0);
			w->steps++;
		} else {
			uint32_t shard = (uint32_t)((w->id + i) % CSHARDS);
			/* the shards' stages (TRACE_COMM, the last, is not one) */
			enum trace_stage st = (enum trace_stage)(1 + i % (TRACE_COMM - 1));

			trace_span(w->t, st, shard, i / 50, begin, begin + len, len);
			w->per_shard[shard]++;
		}
		if (i % 500 == 0) {
			char name[32];

			snprintf(name, sizeof(name), "layer.%u", (w->id + i) % CSHARDS);
			trace_name_shard(w->t, (w->id + i) % CSHARDS, name);
		}
	}
	return NULL;
}

/* [0]: room for everything; [1]: half is dropped, whoever records it. */
static const uint64_t concurrent_max[] = { 0, WRITERS * PER_WRITER / 2 };

START_TEST(concurrent_writers)
{
	char *path = tpath("concurrent.json");
	uint64_t max = concurrent_max[_i];
	struct trace *t = topen(path, max);
	pthread_barrier_t go;
	pthread_t th[WRITERS];
	struct writer w[WRITERS];
	uint64_t per_shard[CSHARDS] = { 0 }, steps = 0, total = 0;
	struct tr r;

	ck_assert_int_eq(pthread_barrier_init(&go, NULL, WRITERS), 0);
	for (unsigned i = 0; i < WRITERS; i++) {
		w[i] = (struct writer){ .t = t, .go = &go, .id = i };
		ck_assert_int_eq(pthread_create(&th[i], NULL, writer_main, &w[i]), 0);
	}
	for (unsigned i = 0; i < WRITERS; i++) {
		ck_assert_int_eq(pthread_join(th[i], NULL), 0);
		for (int k = 0; k < CSHARDS; k++)
			per_shard[k] += w[i].per_shard[k];
		steps += w[i].steps;
	}
	pthread_barrier_destroy(&go);
	tclose(t);
	total = WRITERS * PER_WRITER;
	read_trace(path, &r);
	ck_assert_uint_eq(r.nx + r.dropped, total);
	if (max == 0) {
		uint64_t got[CSHARDS] = { 0 }, got_steps = 0;

		ck_assert_uint_eq(r.dropped, 0);
		for (size_t i = 0; i < r.nx; i++) {
			if (r.x[i].on_shard) {
				REQUIRE(r.x[i].shard < CSHARDS, "span on shard %llu",
					(unsigned long long)r.x[i].shard);
				got[r.x[i].shard]++;
			} else {
				got_steps++;
			}
		}
		ck_assert_uint_eq(got_steps, steps);
		for (int k = 0; k < CSHARDS; k++) {
			char want[32];

			ck_assert_uint_eq(got[k], per_shard[k]);
			snprintf(want, sizeof(want), "layer.%d", k);
			ck_assert_str_eq(tid_name_of_shard(&r, (uint64_t)k, 0), want);
		}
	} else {
		ck_assert_uint_eq(r.nx, max);
	}
	tr_free(&r);
	free(path);
}
END_TEST

/* =============================================================== errors */

struct bad_path_case {
	const char *fmt;      /* %s: the scratch directory; NULL: no path */
	int err;
};

static const struct bad_path_case bad_paths[] = {
	{ "%s/missing/dir/trace.json", -ENOENT },
	{ "%s", -EISDIR },
	{ "%s/file.json/trace.json", -ENOTDIR },
	{ "", -EINVAL },
	{ NULL, -EINVAL },
};

START_TEST(bad_path)
{
	const struct bad_path_case *c = &bad_paths[_i];
	static int sentinel;
	struct trace *t = (struct trace *)(void *)&sentinel;   /* must be cleared */
	char *path = NULL;

	if (c->fmt)
		ck_assert_int_ge(asprintf(&path, c->fmt, g_dir), 0);
	if (c->err == -ENOTDIR)
		free(t_write_file(g_dir, "file.json", "x"));
	ck_assert_int_eq(trace_open(path, 0, &t), c->err);
	ck_assert_ptr_null(t);
	if (path && *path)
		ck_assert_msg(strstr(tier_last_error(), path), "detail '%s' does not name %s",
			      tier_last_error(), path);
	if (c->err == -ENOENT) {
		struct stat st;

		ck_assert_int_ne(stat(path, &st), 0);
	}
	free(path);
}
END_TEST

START_TEST(no_result_pointer)
{
	ck_assert_int_eq(trace_open("/tmp/never.json", 0, NULL), -EINVAL);
	ck_assert_ptr_nonnull(strstr(tier_last_error(), "result"));
}
END_TEST

/*
 * The file exists (empty) as soon as trace_open returns.  A successful
 * trace_close keeps the caller's detail message (the optimizer closes the
 * trace on its way out with an error of its own).
 */
START_TEST(created_at_open)
{
	char *path = t_write_file(g_dir, "old.json", "old contents, longer than nothing");
	struct trace *t = topen(path, 0);
	struct stat st;

	ck_assert_int_eq(stat(path, &st), 0);
	ck_assert_int_eq(st.st_size, 0);
	trace_span(t, TRACE_STEP, 0, 0, BASE, BASE + 1, 0);
	ts_err(-EIO, "an earlier failure");
	tclose(t);
	ck_assert_str_eq(tier_last_error(), "an earlier failure");
	ck_assert_int_eq(stat(path, &st), 0);
	ck_assert_int_gt(st.st_size, 0);
	free(path);
}
END_TEST

/* A write failing at close: -ENOSPC, naming the file, and @t freed. */
START_TEST(full_disk)
{
	struct trace *t = NULL;

	if (access("/dev/full", W_OK) != 0) {
		fprintf(stderr, "full_disk: no /dev/full; skipped\n");
		return;
	}
	ck_assert_int_eq(trace_open("/dev/full", 0, &t), 0);
	for (int i = 0; i < 20000; i++)
		trace_span(t, TRACE_H2D, (uint32_t)(i % 4), 0, BASE + (uint64_t)i,
			   BASE + (uint64_t)i + 1, 1);
	ck_assert_int_eq(trace_close(t), -ENOSPC);
	ck_assert_msg(strstr(tier_last_error(), "/dev/full"), "detail: %s", tier_last_error());
}
END_TEST

START_TEST(null_trace)
{
	ts_err_clear();
	trace_span(NULL, TRACE_STEP, 0, 0, 1, 2, 0);
	trace_span(NULL, TRACE_H2D, 3, 1, 1, 2, 4096);
	trace_name_shard(NULL, 0, "x");
	trace_name_shard(NULL, 0, NULL);
	ck_assert_int_eq(trace_close(NULL), 0);
	ck_assert_str_eq(tier_last_error(), "");
}
END_TEST

/* ================================================================ faults */

/* Each allocation of trace_open failing in turn: -ENOMEM, nothing left. */
START_TEST(fault_open)
{
	char *path = tpath("fault.json");
	struct trace *t = NULL;
	struct t_nth f = T_NTH(TIER_FAULT_ALLOC, -ENOMEM, 9);
	int rc = -ENOMEM;

	NEED_FAULTS();
	while (t_nth_next(&f)) {
		t_nth_arm(&f);
		rc = trace_open(path, 0, &t);
		t_nth_fired(&f);
		if (rc != -ENOMEM)
			break;
		ck_assert_ptr_null(t);
		ck_assert_ptr_nonnull(strstr(tier_last_error(), path));
	}
	ck_assert_int_eq(rc, 0);
	ts_fault_reset_all();
	tclose(t);
	free(path);
}
END_TEST

/* The array failing to grow: the spans that found no room are counted. */
START_TEST(fault_span_growth)
{
	char *path = tpath("fault.json");
	struct trace *t = topen(path, 0);
	struct tr r;

	NEED_FAULTS();
	/* The first allocation (1024 spans) succeeds, every later one fails. */
	ck_assert_int_eq(ts_fault_arm(TIER_FAULT_ALLOC, 2, TIER_FAULT_PERSISTENT, -ENOMEM), 0);
	for (unsigned i = 0; i < 3000; i++)
		trace_span(t, TRACE_D2H, i % 2, 0, BASE + i * 10, BASE + i * 10 + 5, 1);
	trace_name_shard(t, 0, "lost");       /* its copy fails: the default stays */
	ts_fault_reset_all();
	tclose(t);
	read_trace(path, &r);
	ck_assert_uint_eq(r.nx, 1024);
	ck_assert_uint_eq(r.dropped, 3000 - 1024);
	ck_assert_str_eq(tid_name_of_shard(&r, 0, 0), "shard 0");
	tr_free(&r);
	free(path);
}
END_TEST

/* An allocation failing in trace_close: -ENOMEM naming the file, @t freed
 * (ASan sees any leak). */
START_TEST(fault_close)
{
	char *path = tpath("fault.json");
	struct t_nth f = T_NTH(TIER_FAULT_ALLOC, -ENOMEM, 19);
	int rc = -ENOMEM;

	NEED_FAULTS();
	while (t_nth_next(&f)) {
		struct trace *t = topen(path, 0);

		trace_name_shard(t, 0, "zero");
		for (unsigned i = 0; i < 100; i++)
			trace_span(t, TRACE_NVME_WRITE, 0, 0, BASE, BASE + 100 + i, 1);
		t_nth_arm(&f);
		rc = trace_close(t);
		t_nth_fired(&f);
		if (rc)
			ck_assert_msg(strstr(tier_last_error(), path), "detail: %s",
				      tier_last_error());
		if (rc != -ENOMEM)
			break;
	}
	ck_assert_int_eq(rc, 0);
	free(path);
}
END_TEST

/* ======================================================= trace_check.py */

/* Whether python3 is on $PATH (looked up here: starting it costs ~0.3 s). */
static bool have_python3(void)
{
	const char *path = getenv("PATH");

	while (path && *path) {
		size_t n = strcspn(path, ":");
		char *exe;
		bool ok;

		ck_assert_int_ge(asprintf(&exe, "%.*s/python3", (int)n, path), 0);
		ok = access(exe, X_OK) == 0;
		free(exe);
		if (ok)
			return true;
		path += n + (path[n] == ':');
	}
	return false;
}

/* The script's path, or NULL (no python3, or no TIER_GOLDEN to find it by). */
static char *checker(void)
{
	const char *golden = getenv("TIER_GOLDEN");
	char *script;

	if (!golden || !have_python3())
		return NULL;
	ck_assert_int_ge(asprintf(&script, "%s/../trace_check.py", golden), 0);
	if (access(script, R_OK) != 0) {
		free(script);
		return NULL;
	}
	return script;
}

/* Runs the script on @file with @args; its exit code, its output in @out. */
static int run_checker(const char *script, const char *file, const char *args, char *out,
		       size_t outlen)
{
	char *cmd;
	FILE *p;
	size_t n;
	int st;

	ck_assert_int_ge(asprintf(&cmd, "python3 -I -S '%s' '%s' %s 2>&1", script, file, args), 0);
	p = popen(cmd, "r");
	ck_assert_ptr_nonnull(p);
	n = fread(out, 1, outlen - 1, p);
	out[n] = '\0';
	st = pclose(p);
	free(cmd);
	ck_assert(WIFEXITED(st));
	return WEXITSTATUS(st);
}

/*
 * A pipeline as the optimizer would record it: per step, per shard, the
 * fill (NVMe read; H2D for the GPU's shards), the update, and write-back
 * running past the end of the step into the next one.
 */
static void record_pipeline(struct trace *t, unsigned steps, unsigned shards)
{
	for (unsigned s = 0; s < steps; s++) {
		uint64_t t0 = BASE + s * 10000000ull;
		uint64_t t1 = t0 + 9000000;

		trace_span(t, TRACE_STEP, 0, s, t0, t1, 0);
		for (unsigned k = 0; k < shards; k++) {
			uint64_t a = t0 + 1000 + k * 8000000ull / shards;
			bool gpu = k % 2;

			trace_span(t, TRACE_NVME_READ, k, s, a - 500, a + 300000, 1 << 20);
			if (gpu)
				trace_span(t, TRACE_H2D, k, s, a + 300000, a + 400000, 1 << 20);
			trace_span(t, TRACE_STALL, k, s, a + 350000, a + 400000, 0);
			if (gpu)
				trace_span(t, TRACE_STAGING, k, s, a + 400000, a + 450000, 1 << 18);
			trace_span(t, gpu ? TRACE_UPDATE_GPU : TRACE_UPDATE_CPU, k, s, a + 400000,
				   a + 700000, 1 << 20);
			if (gpu)
				trace_span(t, TRACE_D2H, k, s, a + 700000, a + 800000, 1 << 20);
			/* Long write-backs: the last ones outlive the step. */
			trace_span(t, TRACE_NVME_WRITE, k, s, a + 800000, a + 4000000, 1 << 20);
		}
	}
}

START_TEST(checker_accepts_pipeline)
{
	char *script = checker();
	char *path, out[4096];
	struct trace *t;
	struct tr r;
	int rc;

	if (!script) {
		fprintf(stderr, "checker_accepts_pipeline: no python3 or script; skipped\n");
		return;
	}
	path = tpath("pipeline.json");
	t = topen(path, 0);
	for (uint32_t k = 0; k < 8; k++) {
		char name[32];

		snprintf(name, sizeof(name), "layer.%u \"w\"", k);
		trace_name_shard(t, k, name);
	}
	record_pipeline(t, 4, 8);
	tclose(t);
	read_trace(path, &r);
	tr_free(&r);
	rc = run_checker(script, path,
			 "--shards 8 --steps 4 --stages "
			 "step,nvme_read,h2d,update_cpu,update_gpu,d2h,nvme_write,stall,staging",
			 out, sizeof(out));
	ck_assert_msg(rc == 0, "trace_check.py: %d: %s", rc, out);
	ck_assert_ptr_nonnull(strstr(out, ": ok:"));
	/* And what it must refuse of the same file. */
	ck_assert_int_eq(run_checker(script, path, "--shards 9", out, sizeof(out)), 1);
	ck_assert_msg(strstr(out, "shard 8"), "%s", out);
	ck_assert_int_eq(run_checker(script, path, "--steps 5", out, sizeof(out)), 1);
	ck_assert_int_eq(run_checker(script, path, "--stages h2d,frobnicate", out, sizeof(out)),
			 1);
	ck_assert_msg(strstr(out, "frobnicate"), "%s", out);
	free(path);
	free(script);
}
END_TEST

struct checker_case {
	const char *what;
	const char *json;
	const char *args;
	int rc;
	const char *says;     /* in the output */
};

#define EV(name, tid, ts, dur, args)                                                   \
	"{\"name\":\"" name "\",\"ph\":\"X\",\"pid\":1,\"tid\":" #tid ",\"ts\":" #ts \
	",\"dur\":" #dur ",\"args\":" args "}"
#define STEP(s, ts, dur) EV("step", 0, ts, dur, "{\"step\":" #s "}")
#define SH(name, tid, ts, dur, s) EV(name, tid, ts, dur, "{\"shard\":0,\"step\":" #s "}")
#define DOC1(a) "{\"traceEvents\":[" a "]}"
#define DOC2(a, b) "{\"traceEvents\":[" a "," b "]}"
#define DOC3(a, b, c) "{\"traceEvents\":[" a "," b "," c "]}"

static const struct checker_case checker_cases[] = {
	{ "not JSON", "{\"traceEvents\": [", "", 1, "not valid JSON" },
	{ "events not a list", "{\"traceEvents\": {}}", "", 1, "not a list" },
	{ "no dur", DOC1("{\"name\":\"h2d\",\"ph\":\"X\",\"pid\":1,\"tid\":1,\"ts\":0}"), "", 1,
	  "no \"dur\"" },
	{ "negative dur", DOC1(SH("h2d", 1, 5, -1, 0)), "", 1, "negative dur" },
	{ "crossing spans on a tid", DOC2(SH("h2d", 1, 0, 10, 0), SH("d2h", 1, 5, 10, 0)), "", 1,
	  "without nesting" },
	{ "nested spans on a tid", DOC3(SH("h2d", 1, 0, 10, 0), SH("d2h", 1, 2, 3, 0),
				       SH("stall", 1, 10, 1, 0)), "", 0, ": ok:" },
	{ "crossing spans on two tids", DOC2(SH("h2d", 1, 0, 10, 0), SH("d2h", 2, 5, 10, 0)), "",
	  0, ": ok:" },
	{ "a shard without spans", DOC1(SH("h2d", 1, 0, 10, 0)), "--shards 2", 1, "shard 1" },
	{ "too few steps", DOC1(STEP(0, 0, 10)), "--steps 2", 1, "1 step spans, expected 2" },
	{ "two spans for one step", DOC2(STEP(0, 0, 10), STEP(0, 20, 10)), "", 1, "second step" },
	{ "missing stage", DOC1(STEP(0, 0, 10)), "--stages step,h2d", 1, "no \"h2d\" span" },
	{ "update outside its step", DOC3(STEP(0, 0, 10), STEP(1, 10, 10),
					 SH("update_cpu", 1, 8, 4, 0)), "", 1, "not within step 0" },
	{ "update inside with tolerance", DOC2(STEP(0, 10, 10), SH("update_gpu", 1, 9.5, 11, 0)),
	  "", 0, ": ok:" },
	{ "update without a step span", DOC2(STEP(0, 0, 10), SH("update_gpu", 1, 1, 2, 3)), "", 1,
	  "no step span" },
	{ "update without a step span, spans dropped",
	  "{\"traceEvents\":[" SH("update_gpu", 1, 1, 2, 3) "],\"otherData\":{\"dropped_spans\":4}}",
	  "", 0, "4 dropped" },
};

START_TEST(checker_rejects)
{
	const struct checker_case *c = &checker_cases[_i];
	char *script = checker();
	char *path, out[4096];
	int rc;

	if (!script) {
		fprintf(stderr, "checker_rejects: no python3 or script; skipped\n");
		return;
	}
	path = t_write_file(g_dir, "hand.json", c->json);
	rc = run_checker(script, path, c->args, out, sizeof(out));
	ck_assert_msg(rc == c->rc, "%s: exit %d, want %d: %s", c->what, rc, c->rc, out);
	ck_assert_msg(strstr(out, c->says), "%s: output lacks '%s': %s", c->what, c->says, out);
	ck_assert_msg(strchr(out, '\n') == out + strlen(out) - 1, "%s: not one line: %s", c->what,
		      out);
	free(path);
	free(script);
}
END_TEST

/* ================================================================ suite */

static Suite *trace_suite(void)
{
	Suite *s = suite_create("trace");
	TCase *tc;

	tc = tcase_create("layout");
	tcase_add_unchecked_fixture(tc, t_case_setup, t_case_teardown);
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_loop_test(tc, layout, 0, (int)ARRAY_SIZE(layouts));
	tcase_add_loop_test(tc, shard_names, 0, (int)ARRAY_SIZE(names));
	tcase_add_test(tc, rename_shard);
	tcase_add_test(tc, stage_names);
	tcase_add_loop_test(tc, max_spans, 0, (int)ARRAY_SIZE(maxes));
	suite_add_tcase(s, tc);

	tc = tcase_create("concurrent");
	tcase_add_unchecked_fixture(tc, t_case_setup, t_case_teardown);
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_set_timeout(tc, 60);
	tcase_add_loop_test(tc, concurrent_writers, 0, (int)ARRAY_SIZE(concurrent_max));
	suite_add_tcase(s, tc);

	tc = tcase_create("errors");
	tcase_add_unchecked_fixture(tc, t_case_setup, t_case_teardown);
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_loop_test(tc, bad_path, 0, (int)ARRAY_SIZE(bad_paths));
	tcase_add_test(tc, no_result_pointer);
	tcase_add_test(tc, created_at_open);
	tcase_add_test(tc, full_disk);
	tcase_add_test(tc, null_trace);
	suite_add_tcase(s, tc);

	tc = t_tcase_faults("errors-faults");
	tcase_add_unchecked_fixture(tc, t_case_setup, t_case_teardown);
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_test(tc, fault_open);
	tcase_add_test(tc, fault_span_growth);
	tcase_add_test(tc, fault_close);
	suite_add_tcase(s, tc);

	tc = tcase_create("checker");
	tcase_add_unchecked_fixture(tc, t_case_setup, t_case_teardown);
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, checker_accepts_pipeline);
	tcase_add_loop_test(tc, checker_rejects, 0, (int)ARRAY_SIZE(checker_cases));
	suite_add_tcase(s, tc);

	return s;
}

int main(void)
{
	return t_run_suite(trace_suite());
}
