/*
 * fuzz_safetensors.c - libFuzzer target for the safetensors reader
 * (formats/safetensors_read.c) and its header parser
 * (formats/safetensors_parse.c), reached as the library reaches them:
 * through a file and st_reader_open().
 *
 * Each input is tried twice: as a whole file (the 8-byte length, the
 * header, the data: the seed corpus's form), and as a header alone (the
 * length written for it, no data), so that mutations of the JSON text
 * reach the parser whatever they do to a length.  Either way the reader
 * must give a clean refusal (-EBADMSG, no reader, a message naming the
 * file) or a reader whose every tensor is consistent (sizes from dtype and
 * shape, offsets tiling the data, names found by st_reader_find(), data
 * readable).  An accepted file is then written again with the writer
 * (formats/safetensors_write.c), and that file must read back with the
 * same tensors, data and metadata, in the same order.
 *
 * Files live in $FUZZ_SCRATCH (run.sh makes it, on a tmpfs where there is
 * one: the writer fsyncs), else in a folder of /dev/shm or the current
 * one made here and removed at exit.  Sanitizers report leaks and UB.
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/json.h"
#include "formats/safetensors.h"
#include "tierstore.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static char in_path[4096], out_path[4096];
static char made_dir[4096]; /* removed at exit when made here */

static void remove_scratch(void)
{
	char tmp[4200];

	unlink(in_path);
	unlink(out_path);
	snprintf(tmp, sizeof(tmp), "%s.tmp-%ld", out_path, (long)getpid());
	unlink(tmp);
	if (made_dir[0])
		rmdir(made_dir);
}

static void scratch_init(void)
{
	const char *dir = getenv("FUZZ_SCRATCH");

	if (in_path[0])
		return;
	if (!dir || !*dir) {
		snprintf(made_dir, sizeof(made_dir), "/dev/shm/fuzz-st-XXXXXX");
		if (!mkdtemp(made_dir)) {
			snprintf(made_dir, sizeof(made_dir), "fuzz-st-XXXXXX");
			if (!mkdtemp(made_dir)) {
				perror("fuzz_safetensors: mkdtemp");
				abort();
			}
		}
		dir = made_dir;
	}
	snprintf(in_path, sizeof(in_path), "%s/in.safetensors", dir);
	snprintf(out_path, sizeof(out_path), "%s/out.safetensors", dir);
	atexit(remove_scratch);
}

static void write_file(const char *path, const void *prefix, size_t plen, const uint8_t *data,
		       size_t size)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);

	if (fd < 0 || (plen && write(fd, prefix, plen) != (ssize_t)plen) ||
	    (size && write(fd, data, size) != (ssize_t)size) || close(fd) != 0) {
		perror("fuzz_safetensors: writing the input");
		abort();
	}
}

__attribute__((noreturn, format(printf, 1, 2)))
static void fail(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	fputs("fuzz_safetensors: ", stderr);
	vfprintf(stderr, fmt, ap);
	fputc('\n', stderr);
	va_end(ap);
	abort();
}

/* Every tensor of @r consistent with the others and the file; *@bufs gets
 * each tensor's data (malloc'd, freed by the caller). */
static void check_reader(struct st_reader *r, uint8_t ***bufs)
{
	size_t n = st_reader_count(r), nmeta = st_reader_meta_count(r);
	uint64_t hlen = st_reader_header_len(r), dlen = st_reader_data_len(r), sum = 0;
	uint8_t **b = calloc(n ? n : 1, sizeof(*b));

	if (!b)
		abort();
	for (size_t i = 0; i < n; i++) {
		const struct st_tensor *t = st_reader_tensor(r, i);
		uint64_t el = 1, bits;
		size_t at = SIZE_MAX;

		if (!t || !t->name || !json_utf8_valid(t->name) || !strcmp(t->name, "__metadata__"))
			fail("tensor %zu: no name, or a name not UTF-8, or reserved", i);
		if ((unsigned)t->dtype >= ST_DTYPE_COUNT || t->ndim > ST_MAX_DIM)
			fail("tensor '%s': dtype %d, %u dimensions", t->name, (int)t->dtype, t->ndim);
		for (unsigned k = 0; k < t->ndim; k++)
			if (__builtin_mul_overflow(el, t->shape[k], &el))
				fail("tensor '%s': its shape overflows", t->name);
		if (__builtin_mul_overflow(el, (uint64_t)st_dtype_bits(t->dtype), &bits) ||
		    bits % 8 || bits / 8 != t->nbytes || t->begin > t->end ||
		    t->end - t->begin != t->nbytes || t->end > dlen ||
		    t->file_offset != 8 + hlen + t->begin)
			fail("tensor '%s': sizes and offsets disagree", t->name);
		if (st_reader_find(r, t->name, &at) || at != i)
			fail("tensor '%s': found at %zu, not %zu", t->name, at, i);
		sum += t->nbytes;
		if (!(b[i] = malloc(t->nbytes ? t->nbytes : 1)))
			abort();
		if (st_reader_pread(r, i, 0, b[i], t->nbytes))
			fail("tensor '%s': read: %s", t->name, tier_last_error());
	}
	if (sum != dlen)
		fail("the tensors hold %llu bytes, the data %llu", (unsigned long long)sum,
		     (unsigned long long)dlen);
	if (st_reader_tensor(r, n) || st_reader_meta_at(r, nmeta, NULL, NULL) != -EINVAL)
		fail("past the end: something");
	for (size_t i = 0; i < nmeta; i++) {
		const char *k = NULL, *v = NULL;

		if (st_reader_meta_at(r, i, &k, &v) || !k || !v || !json_utf8_valid(k) ||
		    !json_utf8_valid(v) || st_reader_meta(r, k) != v)
			fail("metadata pair %zu: bad", i);
	}
	*bufs = b;
}

/* @r written again by the writer, read back: the same tensors, data and
 * metadata in the same order. */
static void round_trip(struct st_reader *r, uint8_t **data)
{
	size_t n = st_reader_count(r), nmeta = st_reader_meta_count(r);
	struct st_desc *d = calloc(n ? n : 1, sizeof(*d));
	const char **kv = calloc(2 * nmeta + 1, sizeof(*kv));
	struct st_writer *w = NULL;
	struct st_reader *r2 = NULL;

	if (!d || !kv)
		abort();
	for (size_t i = 0; i < n; i++) {
		const struct st_tensor *t = st_reader_tensor(r, i);

		d[i].name = t->name;
		d[i].dtype = t->dtype;
		d[i].ndim = t->ndim;
		memcpy(d[i].shape, t->shape, sizeof(d[i].shape));
	}
	for (size_t i = 0; i < nmeta; i++)
		st_reader_meta_at(r, i, &kv[2 * i], &kv[2 * i + 1]);
	if (st_writer_open(out_path, d, n, kv, nmeta, &w))
		fail("the writer refuses what the reader accepted: %s", tier_last_error());
	for (size_t i = 0; i < n; i++)
		if (st_writer_pwrite(w, i, 0, data[i], st_writer_nbytes(w, i)))
			fail("writer: pwrite: %s", tier_last_error());
	if (st_writer_finish(w))
		fail("writer: finish: %s", tier_last_error());
	if (st_reader_open(out_path, &r2))
		fail("the writer's file does not read back: %s", tier_last_error());
	if (st_reader_count(r2) != n || st_reader_meta_count(r2) != nmeta)
		fail("read back: %zu tensors and %zu metadata pairs, not %zu and %zu",
		     st_reader_count(r2), st_reader_meta_count(r2), n, nmeta);
	for (size_t i = 0; i < n; i++) {
		const struct st_tensor *a = st_reader_tensor(r, i), *b = st_reader_tensor(r2, i);
		uint8_t *got = malloc(b->nbytes ? b->nbytes : 1);

		if (!got)
			abort();
		if (strcmp(a->name, b->name) || a->dtype != b->dtype || a->ndim != b->ndim ||
		    memcmp(a->shape, b->shape, sizeof(a->shape[0]) * a->ndim) ||
		    a->nbytes != b->nbytes)
			fail("read back: tensor %zu ('%s') differs", i, a->name);
		if (st_reader_pread(r2, i, 0, got, b->nbytes) || memcmp(got, data[i], b->nbytes))
			fail("read back: tensor '%s': its data differs", a->name);
		free(got);
	}
	for (size_t i = 0; i < nmeta; i++) {
		const char *k = NULL, *v = NULL;

		st_reader_meta_at(r2, i, &k, &v);
		if (strcmp(k, kv[2 * i]) || strcmp(v, kv[2 * i + 1]))
			fail("read back: metadata pair %zu differs", i);
	}
	st_reader_close(r2);
	free(kv);
	free(d);
}

/* The file at in_path: a clean refusal, or a consistent reader that
 * survives the round trip. */
static void try_file(void)
{
	struct st_reader *r = (struct st_reader *)&r; /* must become NULL on a refusal */
	uint8_t **bufs = NULL;
	int rc = st_reader_open(in_path, &r);

	if (rc) {
		const char *msg = tier_last_error();

		if (rc != -EBADMSG || r || strncmp(msg, in_path, strlen(in_path)) != 0)
			fail("refused with %d (%s), reader %p: '%s'", rc, strerror(-rc), (void *)r,
			     msg);
		return;
	}
	check_reader(r, &bufs);
	round_trip(r, bufs);
	for (size_t i = 0; i < st_reader_count(r); i++)
		free(bufs[i]);
	free(bufs);
	st_reader_close(r);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	unsigned char len8[8];

	scratch_init();
	/* the input as a whole file */
	write_file(in_path, NULL, 0, data, size);
	try_file();
	/* the input as the header alone */
	for (int k = 0; k < 8; k++)
		len8[k] = (unsigned char)((uint64_t)size >> (8 * k));
	write_file(in_path, len8, sizeof(len8), data, size);
	try_file();
	return 0;
}
