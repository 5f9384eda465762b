/*
 * bench_common.c - what the tier-bench subcommands share: see bench.h.
 * The NVMe bandwidth measurement is `tier-bench io`'s, moved here so that
 * `tier-bench step` measures the bandwidth its bound uses with the same
 * code, in the same run.
 */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#include "bench.h"

uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* Parses "1GiB", "4096", "1M" (binary units) for the command line. */
int parse_bytes(const char *s, uint64_t *out)
{
	char *end;
	unsigned long long v = strtoull(s, &end, 10);
	uint64_t mult = 1;

	if (end == s)
		return -EINVAL;
	if (*end) {
		char u = (char)(*end | 0x20);

		mult = u == 'k' ? 1ull << 10 : u == 'm' ? 1ull << 20 : u == 'g' ? 1ull << 30 :
		       u == 't' ? 1ull << 40 : u == 'b' ? 1 : 0;
		if (!mult)
			return -EINVAL;
		end++;
		if (*end == 'i' || *end == 'I')
			end++;
		if (*end == 'B' || *end == 'b')
			end++;
		if (*end)
			return -EINVAL;
	}
	if (v == 0 || v > UINT64_MAX / mult)
		return -EINVAL;
	*out = v * mult;
	return 0;
}

int load_manifest(const char *file, struct tier_manifest **m)
{
	int rc = tier_manifest_resolve(file, m);

	if (rc)
		fprintf(stderr, "%s\n", tier_last_error());
	return rc;
}

/* ------------------------------------------------------------ manifest */

/*
 * The header gives no accessors for the manifest's fields, and the tools
 * see only the header: so they read the effective configuration that
 * tier_manifest_emit() writes (every key present, every default resolved,
 * sizes in bytes, one "key: value   # comment" per line).
 */
static int manifest_text(const struct tier_manifest *m, char **text)
{
	size_t len = 0;
	FILE *f = open_memstream(text, &len);
	int rc;

	if (!f)
		return -ENOMEM;
	rc = tier_manifest_emit(m, f);
	if (fclose(f) && !rc)
		rc = -EIO;
	if (rc) {
		free(*text);
		*text = NULL;
	}
	return rc;
}

int manifest_value(const struct tier_manifest *m, const char *section, const char *key,
		   char *buf, size_t len)
{
	size_t slen = strlen(section), klen = strlen(key);
	bool in = false;
	char *text, *line, *save = NULL;
	int rc = manifest_text(m, &text);

	if (rc)
		return rc;
	rc = -ENOENT;
	for (line = strtok_r(text, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
		if (line[0] != ' ' && line[0] != '#') {
			in = strncmp(line, section, slen) == 0 && line[slen] == ':';
			continue;
		}
		if (in && strncmp(line, "  ", 2) == 0 && strncmp(line + 2, key, klen) == 0 &&
		    line[2 + klen] == ':') {
			char *v = line + 3 + klen, *end;

			v += strspn(v, " ");
			end = strstr(v, "   #");
			if (!end)
				end = v + strlen(v);
			while (end > v && end[-1] == ' ')
				end--;
			snprintf(buf, len, "%.*s", (int)(end - v), v);
			rc = 0;
			break;
		}
	}
	free(text);
	return rc;
}

int manifest_nvme_paths(const struct tier_manifest *m, unsigned *out)
{
	char *text, *line, *save = NULL;
	int rc = manifest_text(m, &text);

	if (rc)
		return rc;
	*out = 0;
	for (line = strtok_r(text, "\n", &save); line; line = strtok_r(NULL, "\n", &save))
		*out += strncmp(line, "    - path:", 11) == 0;
	free(text);
	return 0;
}

/* ------------------------------------------------------------------ io */

/*
 * One pass keeps QD requests in flight.  Completions only queue their slot;
 * the main thread reissues it.  So the write checksums (computed when a
 * request is submitted) run on the main thread, as they would on a
 * trainer's thread, not on the ring's completion thread.
 */
struct io_run {
	struct tier_nvme *t;
	struct tier_nvme_obj *o;
	char *pool;           /* qd buffers of bs bytes */
	uint64_t size, bs;
	unsigned qd;
	int error;
	char detail[512];
	pthread_mutex_t lock;
	pthread_cond_t ready;
	unsigned *free_slots; /* slots whose request completed */
	unsigned nfree;
	unsigned inflight;
	const char *who;      /* message prefix */
};

struct slot {
	struct io_run *run;
	unsigned index;
};

static void io_cb(void *arg, int result, const char *detail)
{
	struct slot *s = arg;
	struct io_run *r = s->run;

	pthread_mutex_lock(&r->lock);
	if (result && !r->error) {
		r->error = result;
		snprintf(r->detail, sizeof(r->detail), "%s", detail);
	}
	r->free_slots[r->nfree++] = s->index;
	r->inflight--;
	pthread_cond_signal(&r->ready);
	pthread_mutex_unlock(&r->lock);
}

/* Mixed passes: whether block @k of @nb is one of the @rb read (spread
 * evenly over the object), else a written one. */
static bool mixed_reads(uint64_t k, uint64_t nb, uint64_t rb)
{
	return (k + 1) * rb / nb > k * rb / nb;
}

/* The next block from @k on that is (@want_read) or is not read. */
static uint64_t mixed_next(uint64_t k, uint64_t nb, uint64_t rb, bool want_read)
{
	while (k < nb && mixed_reads(k, nb, rb) != want_read)
		k++;
	return k;
}

/*
 * One pass over the object's blocks of r->bs bytes (the last may be
 * shorter), in order; returns seconds, or a negative value on error.
 * @rd_blocks < 0: every request is @op.  Otherwise a mixed pass: @rd_blocks
 * of the blocks, spread evenly over the object, are read and the others
 * written, the two streams moving through the object together, so that
 * reads and writes go to nearby blocks as an optimizer step's fills and
 * write-backs do (they stream through the state ahead of and behind the
 * update), and issued so that at every moment the blocks of each kind are
 * in proportion (a read goes out while reads issued / rd_blocks is at most
 * writes issued / written blocks).  Both kinds share the QD slots.  No
 * block is both read and written.
 */
static double io_pass(struct io_run *r, enum tier_io_op op, int64_t rd_blocks)
{
	struct slot *slots = calloc(r->qd, sizeof(*slots));
	bool mixed = rd_blocks >= 0;
	uint64_t nb = (r->size + r->bs - 1) / r->bs, rb = mixed ? (uint64_t)rd_blocks : 0;
	uint64_t kr = 0, kw = 0, nr = 0, nw = 0; /* next read/written block, how many issued */
	uint64_t t0, t1;

	r->free_slots = calloc(r->qd, sizeof(*r->free_slots));
	if (!slots || !r->free_slots) {
		free(slots);
		free(r->free_slots);
		return -1.0;
	}
	if (mixed) {
		kr = mixed_next(0, nb, rb, true);
		kw = mixed_next(0, nb, rb, false);
	} else if (op == TIER_IO_READ) {
		kw = nb; /* one stream, through kr */
	} else {
		kr = nb;
	}
	r->error = 0;
	r->inflight = 0;
	r->nfree = r->qd;
	for (unsigned i = 0; i < r->qd; i++) {
		slots[i] = (struct slot){ r, i };
		r->free_slots[i] = r->qd - 1 - i;
	}
	t0 = now_ns();
	pthread_mutex_lock(&r->lock);
	while (!r->error && (kr < nb || kw < nb || r->inflight)) {
		bool rd_left = kr < nb, wr_left = kw < nb, read;
		uint64_t k, off, len;
		unsigned i;
		int rc;

		if (mixed)
			read = rd_left && (!wr_left || nr * (nb - rb) <= nw * rb);
		else
			read = rd_left;
		if ((!rd_left && !wr_left) || r->nfree == 0) {
			pthread_cond_wait(&r->ready, &r->lock);
			continue;
		}
		k = read ? kr : kw;
		if (read) {
			nr++;
			kr = mixed ? mixed_next(kr + 1, nb, rb, true) : kr + 1;
		} else {
			nw++;
			kw = mixed ? mixed_next(kw + 1, nb, rb, false) : kw + 1;
		}
		i = r->free_slots[--r->nfree];
		r->inflight++;
		pthread_mutex_unlock(&r->lock);
		off = k * r->bs;
		len = r->size - off < r->bs ? r->size - off : r->bs;
		rc = tier_nvme_submit(r->t, r->o, read ? TIER_IO_READ : TIER_IO_WRITE, off, len,
				      r->pool + (uint64_t)i * r->bs, io_cb, &slots[i]);
		pthread_mutex_lock(&r->lock);
		if (rc) {
			r->inflight--;
			if (!r->error) {
				r->error = rc;
				snprintf(r->detail, sizeof(r->detail), "%s", tier_last_error());
			}
		}
	}
	/* After an error, let what is in flight finish before the buffers go. */
	while (r->inflight)
		pthread_cond_wait(&r->ready, &r->lock);
	pthread_mutex_unlock(&r->lock);
	t1 = now_ns();
	free(slots);
	free(r->free_slots);
	r->free_slots = NULL;
	if (r->error) {
		fprintf(stderr, "%s: %s failed: %s\n", r->who,
			mixed ? "mixed read/write" : op == TIER_IO_WRITE ? "write" : "read",
			r->detail[0] ? r->detail : tier_strerror(r->error));
		return -1.0;
	}
	return (double)(t1 - t0) * 1e-9;
}

int bench_io(const struct tier_manifest *m, const struct bench_io_opts *o,
	     struct bench_io_result *res)
{
	uint64_t size = o->size, bs = o->bs, qd = o->qd;
	struct io_run r = { .who = o->who };
	int rc, ret = 1;

	r.size = size;
	r.bs = bs;
	r.qd = (unsigned)qd;
	pthread_mutex_init(&r.lock, NULL);
	pthread_cond_init(&r.ready, NULL);
	rc = tier_nvme_open(m, TIER_NVME_SCRATCH, &r.t);
	if (rc) {
		fprintf(stderr, "%s: %s\n", o->who, tier_last_error());
		goto out;
	}
	rc = tier_nvme_obj_create(r.t, "tier-bench-io", size, &r.o);
	if (rc) {
		fprintf(stderr, "%s: %s\n", o->who, tier_last_error());
		goto out;
	}
	if (posix_memalign((void **)&r.pool, 2u << 20, r.bs * r.qd) != 0) {
		fprintf(stderr, "%s: out of memory for %" PRIu64 " buffers of %" PRIu64 " bytes\n",
			o->who, qd, bs);
		goto out;
	}
	madvise(r.pool, r.bs * r.qd, MADV_HUGEPAGE);
	/* Data that does not compress or dedupe: a xorshift stream. */
	{
		uint64_t x = 0x9e3779b97f4a7c15ull;

		for (uint64_t i = 0; i + 8 <= r.bs * r.qd; i += 8) {
			x ^= x << 13;
			x ^= x >> 7;
			x ^= x << 17;
			memcpy(r.pool + i, &x, 8);
		}
	}
	if (r.bs * r.qd <= (1ull << 30) && tier_nvme_register_buffer(r.t, r.pool, r.bs * r.qd)) {
		fprintf(stderr, "%s: %s\n", o->who, tier_last_error());
		goto out;
	}
	res->passes = o->passes ? o->passes : 1;
	if (res->passes > BENCH_IO_MAX_PASSES)
		res->passes = BENCH_IO_MAX_PASSES;
	for (unsigned p = 0; p < res->passes; p++) {
		double w = io_pass(&r, TIER_IO_WRITE, -1), rd;

		if (w < 0)
			goto out;
		rd = io_pass(&r, TIER_IO_READ, -1);
		if (rd < 0)
			goto out;
		res->write_pass_s[p] = w;
		res->read_pass_s[p] = rd;
		res->write_s = p == 0 || w < res->write_s ? w : res->write_s;
		res->read_s = p == 0 || rd < res->read_s ? rd : res->read_s;
	}
	if (o->mix_read > 0 && o->mix_read < 1) {
		/* The object's blocks are all written by now: the reads find data. */
		uint64_t nb = (size + bs - 1) / bs, rb = (uint64_t)(o->mix_read * (double)nb + 0.5);

		rb = rb < 1 ? 1 : rb > nb - 1 ? nb - 1 : rb;
		res->mixed_read_bytes = 0;
		for (uint64_t k = 0; k < nb; k++)
			if (mixed_reads(k, nb, rb))
				res->mixed_read_bytes += size - k * bs < bs ? size - k * bs : bs;
		for (unsigned p = 0; p < res->passes; p++) {
			double t = io_pass(&r, TIER_IO_READ, (int64_t)rb);

			if (t < 0)
				goto out;
			res->mixed_pass_s[p] = t;
			res->mixed_s = p == 0 || t < res->mixed_s ? t : res->mixed_s;
		}
	}
	if (o->verify) {
		/* Write each block with its offset stamped in, read it back, compare. */
		char *a = r.pool, *b = r.pool + r.bs;

		for (uint64_t off = 0; off < size; off += bs) {
			uint64_t len = size - off < bs ? size - off : bs;

			for (uint64_t i = 0; i + 8 <= len; i += 8) {
				uint64_t v = (off + i) * 0x9e3779b97f4a7c15ull;

				memcpy(a + i, &v, 8);
			}
			if (tier_nvme_write(r.t, r.o, off, len, a) ||
			    tier_nvme_read(r.t, r.o, off, len, b) || memcmp(a, b, len) != 0) {
				fprintf(stderr, "%s: verification failed at %" PRIu64 ": %s\n",
					o->who, off, tier_last_error()[0] ? tier_last_error() : "data differs");
				goto out;
			}
		}
	}
	tier_nvme_get_stats(r.t, &res->stats);
	ret = 0;
out:
	if (r.t && tier_nvme_close(r.t) && ret == 0) {
		fprintf(stderr, "%s: close: %s\n", o->who, tier_last_error());
		ret = 1;
	}
	free(r.pool);
	pthread_mutex_destroy(&r.lock);
	pthread_cond_destroy(&r.ready);
	return ret;
}

/* 2 MiB-aligned, rounded up to 2 MiB, huge pages asked for; NULL on failure. */
void *adam_alloc(size_t bytes)
{
	size_t huge = 2u << 20, len = (bytes + huge - 1) / huge * huge;
	void *p;

	if (posix_memalign(&p, huge, len ? len : huge) != 0)
		return NULL;
	madvise(p, len ? len : huge, MADV_HUGEPAGE);
	return p;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

double median(const double *v, size_t n)
{
	double *s = malloc(n * sizeof(*s)), m;

	if (!s)
		return v[0];
	memcpy(s, v, n * sizeof(*s));
	qsort(s, n, sizeof(*s), cmp_double);
	m = n % 2 ? s[n / 2] : 0.5 * (s[n / 2 - 1] + s[n / 2]);
	free(s);
	return m;
}

double min_of(const double *v, size_t n)
{
	double m = v[0];

	for (size_t i = 1; i < n; i++)
		m = v[i] < m ? v[i] : m;
	return m;
}
const char *dtype_name(int d)
{
	return d < 0 ? "none" : d == TIER_FP32 ? "fp32" : d == TIER_BF16 ? "bf16" : "fp16";
}

size_t dtype_size(int d)
{
	return d < 0 ? 0 : d == TIER_FP32 ? 4 : 2;
}

/* "fp32", "bf16", "fp16" (and "none" when @allow_none) -> 0, or -EINVAL. */
int parse_dtype(const char *s, bool allow_none, int *out)
{
	if (strcmp(s, "fp32") == 0)
		*out = TIER_FP32;
	else if (strcmp(s, "bf16") == 0)
		*out = TIER_BF16;
	else if (strcmp(s, "fp16") == 0)
		*out = TIER_FP16;
	else if (allow_none && strcmp(s, "none") == 0)
		*out = -1;
	else
		return -EINVAL;
	return 0;
}

/* fp32 -> bf16, round to nearest even (the data are finite). */
static uint16_t adam_to_bf16(float f)
{
	uint32_t x;

	memcpy(&x, &f, 4);
	x += 0x7fffu + ((x >> 16) & 1u);
	return (uint16_t)(x >> 16);
}

/* fp32 -> fp16, round to nearest even, subnormals included. */
static uint16_t adam_to_fp16(float f)
{
	uint32_t x, sign;
	uint16_t o;

	memcpy(&x, &f, 4);
	sign = (x >> 16) & 0x8000u;
	x &= 0x7fffffffu;
	if (x >= 0x47800000u) {         /* too large: inf (nan stays nan) */
		o = x > 0x7f800000u ? 0x7e00u : 0x7c00u;
	} else if (x < 0x38800000u) {   /* fp16 subnormal or zero */
		float a;
		uint32_t u;

		memcpy(&a, &x, 4);
		a += 0.5f;              /* the sum's low bits are the rounded subnormal */
		memcpy(&u, &a, 4);
		o = (uint16_t)(u - 0x3f000000u);
	} else {
		x += ((uint32_t)(15 - 127) << 23) + 0xfffu + ((x >> 13) & 1u);
		o = (uint16_t)(x >> 13);
	}
	return (uint16_t)(o | sign);
}

/* xorshift64*: fast enough to fill a GiB in well under a second. */
static uint64_t adam_rand(uint64_t *s)
{
	*s ^= *s >> 12;
	*s ^= *s << 25;
	*s ^= *s >> 27;
	return *s * 0x2545f4914f6cdd1dull;
}

/* About N(0,1): Irwin-Hall of four 16-bit uniforms, rescaled to unit variance. */
static float adam_gauss(uint64_t *s)
{
	uint64_t r = adam_rand(s);
	unsigned sum = (unsigned)(r & 0xffff) + (unsigned)(r >> 16 & 0xffff) +
		       (unsigned)(r >> 32 & 0xffff) + (unsigned)(r >> 48);

	return ((float)sum * (1.0f / 65536.0f) - 2.0f) * 1.7320508f;
}

/* Writes every element of @p (so the pages are faulted in before timing). */
void adam_fill(void *p, size_t n, int dtype, enum adam_fill what, uint64_t seed)
{
	uint64_t s = seed * 0x9e3779b97f4a7c15ull + 0x632be59bd9b4e019ull;

	for (size_t i = 0; i < n; i++) {
		float g = adam_gauss(&s), v;

		switch (what) {
		case FILL_PARAM:
			v = g;
			break;
		case FILL_GRAD:
			v = g * 1e-3f;
			break;
		case FILL_EXP_AVG:
			v = g * 1e-4f;
			break;
		default:
			v = (g * g + 0.01f) * 1e-6f;
			break;
		}
		if (dtype == TIER_FP32)
			((float *)p)[i] = v;
		else if (dtype == TIER_BF16)
			((uint16_t *)p)[i] = adam_to_bf16(v);
		else
			((uint16_t *)p)[i] = adam_to_fp16(v);
	}
}

