/*
 * safetensors_read.c - the safetensors reader (safetensors.h): opening a
 * file (its framing: the 8-byte length, the header's bounds; the header
 * itself is safetensors_parse.c's), its tensors and metadata, and tensor
 * data read with pread at offsets.  Also what the writer shares: the
 * dtypes, a tensor's bytes, and the sweep of the temporary files a killed
 * writer left.
 *
 * The writer (safetensors_write.c) holds an exclusive flock on its
 * temporary file from before its name appears until it is renamed; a
 * PATH.tmp-<pid> that nobody holds was left by a writer that died (killed
 * mid-export), and the next st_writer_open() or st_reader_open() of PATH
 * removes it.
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
#include <dirent.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/error.h"
#include "common/fault.h"
#include "formats/safetensors.h"
#include "formats/safetensors_impl.h"

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
int st_tensor_bytes(enum st_dtype dt, unsigned ndim, const uint64_t *shape, uint64_t *out)
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

/* Full-length pread: 0, or -errno; *done the bytes read (short at the
 * end of the file). */
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

/* ------------------------------------------------------------- reader */

int st_cmp_name(const void *a, const void *b)
{
	const struct by_name *x = a, *y = b;

	return strcmp(x->name, y->name);
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
 * -ENAMETOOLONG.  No allocation: the sweep needs none. */
int st_dir_of(const char *path, char *buf, size_t n)
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
void st_sweep_dead_tmp(const char *path)
{
	const char *slash = strrchr(path, '/'), *base = slash ? slash + 1 : path;
	size_t blen = strlen(base);
	char dir[PATH_MAX];
	DIR *d;
	struct dirent *e;

	if (!blen || st_dir_of(path, dir, sizeof(dir)) != 0 || !(d = opendir(dir)))
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
	size_t got;
	int rc;

	TS_NONNULL(path);
	TS_NONNULL(out);
	*out = NULL;
	st_sweep_dead_tmp(path);
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
	if ((rc = st_header_parse(r, hdr)))
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
	hit = bsearch(&key, r->by_name, r->n, sizeof(*r->by_name), st_cmp_name);
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

