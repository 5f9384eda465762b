/*
 * safetensors_write.c - the safetensors writer (safetensors.h): the
 * descriptors checked and laid out, the header's text, the temporary
 * file, tensor data written with pwrite at offsets, and publication.
 *
 * The writer never holds tensor data: st_writer_open() writes the header
 * into PATH.tmp-<pid> and sizes the file, callers pwrite into it, and
 * st_writer_finish() publishes it with fsync + rename + directory fsync.
 * The writer holds an exclusive flock on its temporary file from before
 * its name appears until it is renamed; a PATH.tmp-<pid> that nobody
 * holds was left by a writer that died (killed mid-export), and the next
 * st_writer_open() or st_reader_open() of PATH removes it
 * (st_sweep_dead_tmp(), safetensors_read.c).
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/error.h"
#include "common/fault.h"
#include "common/json.h"
#include "formats/safetensors.h"
#include "formats/safetensors_impl.h"

/* Full-length pwrite: 0, or -errno (-EIO for a write of nothing). */
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

/* json_escape()'s output into the header. */
static void sb_put(void *b, const char *s, size_t n)
{
	sb_putn(b, s, n);
}

/* @s as a JSON string, escaped as serde_json escapes (common/json.c; the
 * names are UTF-8, checked). */
static void sb_str(struct sb *b, const char *s)
{
	sb_putn(b, "\"", 1);
	json_escape(s, 0, sb_put, b);
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
		if (!json_utf8_valid(x->name))
			return ts_err(-EINVAL, "%s: tensor %zu: name is not valid UTF-8", w->path, i);
		if (!strcmp(x->name, META_KEY))
			return ts_err(-EINVAL, "%s: tensor %zu: '" META_KEY "' is reserved", w->path, i);
		if ((unsigned)x->dtype >= ST_DTYPE_COUNT)
			return ts_err(-EINVAL, "%s: tensor '%s': dtype %d is no safetensors dtype",
				      w->path, x->name, (int)x->dtype);
		if (x->ndim > ST_MAX_DIM)
			return ts_err(-EINVAL, "%s: tensor '%s': %u dimensions, at most %d", w->path,
				      x->name, x->ndim, ST_MAX_DIM);
		rc = st_tensor_bytes(x->dtype, x->ndim, x->shape, &w->t[i].nbytes);
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
		if (!json_utf8_valid(kv[i]))
			return ts_err(-EINVAL, "%s: metadata %s %zu is not valid UTF-8", w->path,
				      i % 2 ? "value" : "key", i / 2);
	}
	if (!(v = ts_malloc((nv ? nv : 1) * sizeof(*v))))
		return ts_err(-ENOMEM, "%s: out of memory", w->path);
	for (size_t i = 0; i < n; i++)
		v[i] = (struct by_name){ d[i].name, i };
	qsort(v, n, sizeof(*v), st_cmp_name);
	for (size_t k = 1; k < n && !rc; k++)
		if (!strcmp(v[k - 1].name, v[k].name))
			rc = ts_err(-EINVAL, "%s: tensor name '%s' given twice", w->path, v[k].name);
	for (size_t i = 0; i < nmeta && !rc; i++)
		v[i] = (struct by_name){ kv[2 * i], i };
	if (!rc)
		qsort(v, nmeta, sizeof(*v), st_cmp_name);
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
	int fd = st_dir_of(w->path, dir, sizeof(dir));

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
	st_sweep_dead_tmp(path);
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
	int fd, rc = st_dir_of(path, dir, sizeof(dir));

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
