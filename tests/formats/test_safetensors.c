/*
 * test_safetensors.c - the safetensors reader and writer
 * (formats/safetensors_parse.c, _read.c, _write.c).
 *
 * Covers:
 *  - round trips, table-driven: many dtypes, 0-d, multi-d and empty
 *    tensors, metadata with quotes, backslashes, control characters and
 *    non-ASCII text, no tensors, 1000 tensors; the header padded to a
 *    multiple of 8 and every tensor aligned to its element size;
 *  - a writer filling its tensors in pieces in a shuffled order;
 *  - the writer's publication: nothing at PATH before finish, the old
 *    file replaced whole after it, abort leaving no file at all;
 *  - the writer's argument checks (bounds of pwrite naming the tensor,
 *    duplicate or reserved names, bad UTF-8, bad dtype, too many dims,
 *    sizes that overflow, half bytes of F4);
 *  - the reader's bounds (pread outside a tensor, a file cut short after
 *    open: -EIO naming the path and the byte), find and -ENOENT;
 *  - a table of malformed files (framing, JSON syntax, escapes, UTF-8,
 *    metadata, tensor entries, sizes and offsets), each with its error
 *    code and the header byte or tensor its message must name, and a table
 *    of odd but valid files the official loader also accepts;
 *  - every header byte of a valid file replaced by a few values, and the
 *    file cut at every length: open fails cleanly or succeeds, never
 *    crashes (run under ASan/UBSan in CI);
 *  - each allocation of the writer's and the reader's open failing in
 *    turn (fault site ALLOC): -ENOMEM, nothing leaked, no file left.
 */
#include "config.h"

#include <check.h>
#include <dirent.h>
#include <stdbool.h>
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <signal.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/fault.h"
#include "formats/safetensors.h"
#include "t_helpers.h"

static char *dir;

static void setup(void)
{
	ts_fault_reset_all();
	dir = t_mkdtemp();
}

static void teardown(void)
{
	ts_fault_reset_all();
	t_rmtree(dir);
	free(dir);
}

static char *path_in(const char *name)
{
	char *p;

	ck_assert_int_ge(asprintf(&p, "%s/%s", dir, name), 0);
	return p;
}

static int entries(void)
{
	DIR *d = opendir(dir);
	struct dirent *e;
	int n = 0;

	ck_assert_ptr_nonnull(d);
	while ((e = readdir(d)))
		if (strcmp(e->d_name, ".") && strcmp(e->d_name, ".."))
			n++;
	closedir(d);
	return n;
}

/* Byte @k of tensor @i's data. */
static unsigned char pat(size_t i, uint64_t k)
{
	return (unsigned char)((i * 131 + k * 7 + (k >> 8)) & 0xff);
}

static void fill(struct st_writer *w, size_t i, uint64_t nbytes)
{
	unsigned char buf[512];

	for (uint64_t off = 0; off < nbytes;) {
		size_t len = nbytes - off < sizeof(buf) ? (size_t)(nbytes - off) : sizeof(buf);

		for (size_t k = 0; k < len; k++)
			buf[k] = pat(i, off + k);
		ck_assert_msg(st_writer_pwrite(w, i, off, buf, len) == 0, "%s", tier_last_error());
		off += len;
	}
}

/* The file at @path holds exactly @d and @kv, with pat() data. */
static void verify(const char *path, const struct st_desc *d, size_t n, const char *const *kv,
		   size_t nmeta)
{
	struct st_reader *r;
	unsigned char buf[512];
	size_t idx;

	ck_assert_msg(st_reader_open(path, &r) == 0, "%s", tier_last_error());
	ck_assert_uint_eq(st_reader_count(r), n);
	ck_assert_uint_eq(st_reader_header_len(r) % 8, 0);
	for (size_t i = 0; i < n; i++) {
		const struct st_tensor *t = st_reader_tensor(r, i);
		size_t es = st_dtype_size(d[i].dtype);

		ck_assert_str_eq(t->name, d[i].name);
		ck_assert_int_eq(t->dtype, d[i].dtype);
		ck_assert_uint_eq(t->ndim, d[i].ndim);
		for (unsigned k = 0; k < t->ndim; k++)
			ck_assert_uint_eq(t->shape[k], d[i].shape[k]);
		if (es)
			ck_assert_msg(t->file_offset % es == 0, "%s at %llu, not aligned to %zu",
				      t->name, (unsigned long long)t->file_offset, es);
		ck_assert_int_eq(st_reader_find(r, d[i].name, &idx), 0);
		ck_assert_uint_eq(idx, i);
		for (uint64_t off = 0; off < t->nbytes;) {
			size_t len = t->nbytes - off < sizeof(buf) ? (size_t)(t->nbytes - off)
								   : sizeof(buf);

			ck_assert_msg(st_reader_pread(r, i, off, buf, len) == 0, "%s",
				      tier_last_error());
			for (size_t k = 0; k < len; k++)
				ck_assert_msg(buf[k] == pat(i, off + k), "%s byte %llu", t->name,
					      (unsigned long long)(off + k));
			off += len;
		}
	}
	ck_assert_uint_eq(st_reader_meta_count(r), nmeta);
	for (size_t m = 0; m < nmeta; m++) {
		const char *v = st_reader_meta(r, kv[2 * m]);

		ck_assert_msg(v && !strcmp(v, kv[2 * m + 1]), "meta '%s'", kv[2 * m]);
	}
	ck_assert_ptr_null(st_reader_meta(r, "no such key"));
	ck_assert_int_eq(st_reader_find(r, "no such tensor", &idx), -ENOENT);
	ck_assert_ptr_nonnull(strstr(tier_last_error(), "no such tensor"));
	st_reader_close(r);
}

/* ------------------------------------------------------ round trips */

static const char *const meta_text[] = {
	"plain", "value",
	"quote\"d", "back\\slash \"both\"",
	"ctl", "tab\t nl\n cr\r bell\x07 del\x7f",
	"unicode \xc3\xa9", "\xe2\x9c\x93 \xf0\x9f\x98\x80 \xe4\xb8\xad",
	"", "empty key",
	"empty value", "",
	"slash/", "</script>",
};

static const struct st_desc d_mixed[] = {
	{ "u8", ST_U8, 1, { 3 } },           /* odd sizes first: the writer aligns */
	{ "f32", ST_F32, 2, { 3, 5 } },
	{ "bf16", ST_BF16, 3, { 2, 3, 1 } },
	{ "f16", ST_F16, 1, { 5 } },
	{ "f64", ST_F64, 1, { 3 } },
	{ "i64", ST_I64, 2, { 1, 1 } },
	{ "i32", ST_I32, 1, { 7 } },
	{ "i16", ST_I16, 1, { 1 } },
	{ "i8", ST_I8, 1, { 9 } },
	{ "bool", ST_BOOL, 1, { 2 } },
	{ "u16", ST_U16, 1, { 3 } },
	{ "u32", ST_U32, 1, { 3 } },
	{ "u64", ST_U64, 1, { 3 } },
	{ "c64", ST_C64, 1, { 2 } },
	{ "f8", ST_F8_E4M3, 1, { 5 } },
	{ "f4", ST_F4, 1, { 6 } },
	{ "scalar", ST_F32, 0, { 0 } },
	{ "empty", ST_F64, 2, { 4, 0 } },
	{ "eight", ST_U8, 8, { 1, 2, 1, 2, 1, 2, 1, 2 } },
	{ "n\xc3\xa4me \"q\" \\", ST_F32, 1, { 2 } },
};

static const struct st_desc d_empties[] = {
	{ "e1", ST_F32, 1, { 0 } },
	{ "e2", ST_U8, 3, { 5, 0, 5 } },
	{ "s", ST_I64, 0, { 0 } },
};

static const struct st_desc d_big[] = {
	{ "big", ST_F32, 2, { 300, 257 } },
	{ "odd", ST_U8, 1, { 1001 } },
};

struct rt_case {
	const char *label;
	const struct st_desc *d;
	size_t n;
	const char *const *meta;
	size_t nmeta;
};

static const struct rt_case rt_cases[] = {
	{ "mixed", d_mixed, ARRAY_SIZE(d_mixed), meta_text, ARRAY_SIZE(meta_text) / 2 },
	{ "mixed-nometa", d_mixed, ARRAY_SIZE(d_mixed), NULL, 0 },
	{ "empties", d_empties, ARRAY_SIZE(d_empties), meta_text, 2 },
	{ "big", d_big, ARRAY_SIZE(d_big), NULL, 0 },
	{ "meta-only", NULL, 0, meta_text, ARRAY_SIZE(meta_text) / 2 },
	{ "nothing", NULL, 0, NULL, 0 },
};

START_TEST(test_round_trip)
{
	const struct rt_case *c = &rt_cases[_i];
	char *path = path_in("rt.safetensors");
	struct st_writer *w;

	ck_assert_msg(st_writer_open(path, c->d, c->n, c->meta, c->nmeta, &w) == 0, "%s: %s",
		      c->label, tier_last_error());
	ck_assert_int_eq(access(path, F_OK), -1); /* not there before finish */
	for (size_t i = 0; i < c->n; i++)
		fill(w, i, st_writer_nbytes(w, i));
	ck_assert_msg(st_writer_finish(w) == 0, "%s", tier_last_error());
	ck_assert_int_eq(entries(), 1); /* no temporary left */
	verify(path, c->d, c->n, c->meta, c->nmeta);
	free(path);
}
END_TEST

/* The exact bytes for one small file, as the official writer makes them. */
START_TEST(test_exact_bytes)
{
	static const struct st_desc d[] = { { "attn.0", ST_F32, 3, { 1, 2, 3 } } };
	static const char want_hdr[] =
		"{\"attn.0\":{\"dtype\":\"F32\",\"shape\":[1,2,3],\"data_offsets\":[0,24]}}";
	static const char *const kv[] = { "framework", "pt" };
	static const char want_meta[] = "{\"__metadata__\":{\"framework\":\"pt\"}}     ";
	char *path = path_in("exact.safetensors");
	struct st_writer *w;
	unsigned char *all;
	size_t len;

	ck_assert_int_eq(st_writer_open(path, d, 1, NULL, 0, &w), 0);
	ck_assert_int_eq(st_writer_finish(w), 0);
	all = t_read_all(dir, "exact.safetensors", &len);
	/* 64: the header above padded with 0 spaces (it is 64 bytes long) */
	ck_assert_uint_eq(len, 8 + 64 + 24);
	ck_assert_int_eq(all[0], 64);
	ck_assert_int_eq(memcmp(all + 8, want_hdr, sizeof(want_hdr) - 1), 0);
	free(all);

	ck_assert_int_eq(st_writer_open(path, NULL, 0, kv, 1, &w), 0);
	ck_assert_int_eq(st_writer_finish(w), 0);
	all = t_read_all(dir, "exact.safetensors", &len);
	ck_assert_uint_eq(len, 8 + 40);
	ck_assert_int_eq(all[0], 40);
	ck_assert_int_eq(memcmp(all + 8, want_meta, 40), 0);
	free(all);
	free(path);
}
END_TEST

START_TEST(test_thousand)
{
	enum { N = 1000 };
	struct st_desc *d = calloc(N, sizeof(*d));
	char (*names)[32] = calloc(N, 32);
	char *path = path_in("many.safetensors");
	struct st_writer *w;

	for (size_t i = 0; i < N; i++) {
		snprintf(names[i], 32, "layer.%zu.exp_avg", i);
		d[i].name = names[i];
		d[i].dtype = (enum st_dtype[]){ ST_F32, ST_BF16, ST_U8, ST_F64 }[i % 4];
		d[i].ndim = (unsigned)(i % 3);
		d[i].shape[0] = i % 7;
		d[i].shape[1] = 3;
	}
	ck_assert_msg(st_writer_open(path, d, N, meta_text, 2, &w) == 0, "%s", tier_last_error());
	for (size_t i = N; i-- > 0;)
		fill(w, i, st_writer_nbytes(w, i));
	ck_assert_int_eq(st_writer_finish(w), 0);
	verify(path, d, N, meta_text, 2);
	free(path);
	free(names);
	free(d);
}
END_TEST

/* Pieces of every tensor written in a shuffled order, some of 1 byte. */
START_TEST(test_pieces_shuffled)
{
	struct piece {
		size_t i;
		uint64_t off;
		size_t len;
	} *pc = NULL;
	size_t np = 0, cap = 0;
	uint64_t s = 0x9e3779b97f4a7c15ull;
	char *path = path_in("pieces.safetensors");
	struct st_writer *w;

	ck_assert_int_eq(st_writer_open(path, d_mixed, ARRAY_SIZE(d_mixed), NULL, 0, &w), 0);
	for (size_t i = 0; i < ARRAY_SIZE(d_mixed); i++) {
		uint64_t nb = st_writer_nbytes(w, i);

		for (uint64_t off = 0; off < nb;) {
			size_t len = 1 + (size_t)(off * 5 % 13);

			if (len > nb - off)
				len = (size_t)(nb - off);
			if (np == cap)
				pc = realloc(pc, (cap = cap ? 2 * cap : 64) * sizeof(*pc));
			pc[np++] = (struct piece){ i, off, len };
			off += len;
		}
	}
	for (size_t k = np; k > 1; k--) {
		size_t j = t_rnd_below(&s, k);
		struct piece t = pc[k - 1];
		pc[k - 1] = pc[j];
		pc[j] = t;
	}
	for (size_t k = 0; k < np; k++) {
		unsigned char buf[16];

		for (size_t b = 0; b < pc[k].len; b++)
			buf[b] = pat(pc[k].i, pc[k].off + b);
		ck_assert_int_eq(st_writer_pwrite(w, pc[k].i, pc[k].off, buf, pc[k].len), 0);
	}
	ck_assert_int_eq(st_writer_finish(w), 0);
	verify(path, d_mixed, ARRAY_SIZE(d_mixed), NULL, 0);
	free(pc);
	free(path);
}
END_TEST

START_TEST(test_abort_and_replace)
{
	static const struct st_desc d1[] = { { "old", ST_U8, 1, { 4 } } };
	static const struct st_desc d2[] = { { "new", ST_F32, 1, { 2 } } };
	char *path = path_in("x.safetensors");
	struct st_writer *w;

	/* abort: nothing left at all */
	ck_assert_int_eq(st_writer_open(path, d1, 1, NULL, 0, &w), 0);
	fill(w, 0, 4);
	ck_assert_int_eq(entries(), 1);
	st_writer_abort(w);
	ck_assert_int_eq(entries(), 0);
	st_writer_abort(NULL);

	/* an old file stays whole until finish replaces it */
	ck_assert_int_eq(st_writer_open(path, d1, 1, NULL, 0, &w), 0);
	fill(w, 0, 4);
	ck_assert_int_eq(st_writer_finish(w), 0);
	ck_assert_int_eq(st_writer_open(path, d2, 1, NULL, 0, &w), 0);
	fill(w, 0, 8);
	verify(path, d1, 1, NULL, 0);
	ck_assert_int_eq(st_writer_finish(w), 0);
	verify(path, d2, 1, NULL, 0);
	ck_assert_int_eq(entries(), 1);

	/* abort of a replacement: the old file stays */
	ck_assert_int_eq(st_writer_open(path, d1, 1, NULL, 0, &w), 0);
	st_writer_abort(w);
	verify(path, d2, 1, NULL, 0);
	ck_assert_int_eq(entries(), 1);

	/* a folder that does not exist */
	free(path);
	path = path_in("nodir/x.safetensors");
	ck_assert_int_eq(st_writer_open(path, d1, 1, NULL, 0, &w), -ENOENT);
	ck_assert_ptr_nonnull(strstr(tier_last_error(), "nodir"));
	free(path);
}
END_TEST

static bool exists(const char *p)
{
	struct stat st;

	return stat(p, &st) == 0;
}

/*
 * A writer killed mid-export leaves PATH.tmp-PID; the next writer or
 * reader of PATH removes it, and nothing else: a temporary file a live
 * writer holds, or names that only look alike, stay.
 */
START_TEST(test_killed_writer_swept)
{
	static const struct st_desc d[] = { { "t", ST_U8, 1, { 1u << 20 } } };
	char *path = path_in("k.safetensors"), *held = path_in("k.safetensors.tmp-1"),
	     *other = path_in("k.safetensors.tmp-x1"), *alike = path_in("kk.safetensors.tmp-7");
	char dead[4200];
	struct st_writer *w;
	struct st_reader *r;
	int pfd[2], hfd, st, fd;
	char c;
	pid_t pid;

	for (int k = 0; k < 2; k++) {
		ck_assert_int_eq(pipe(pfd), 0);
		pid = fork();
		ck_assert_int_ge(pid, 0);
		if (pid == 0) {
			if (st_writer_open(path, d, 1, NULL, 0, &w) != 0 || write(pfd[1], "o", 1) != 1)
				_exit(3);
			pause();
			_exit(0);
		}
		close(pfd[1]);
		ck_assert_int_eq(read(pfd[0], &c, 1), 1);
		close(pfd[0]);
		kill(pid, SIGKILL);
		ck_assert_int_eq(waitpid(pid, &st, 0), pid);
		ck_assert(WIFSIGNALED(st));
		snprintf(dead, sizeof(dead), "%s.tmp-%ld", path, (long)pid);
		ck_assert_msg(exists(dead), "the killed writer left no %s", dead);
		/* A live writer's file (locked by another open of it), and
		 * names that are not this path's temporaries. */
		hfd = open(held, O_WRONLY | O_CREAT, 0600);
		ck_assert_int_ge(hfd, 0);
		ck_assert_int_eq(flock(hfd, LOCK_EX), 0);
		fd = open(other, O_WRONLY | O_CREAT, 0600);
		close(fd);
		fd = open(alike, O_WRONLY | O_CREAT, 0600);
		close(fd);
		if (k == 0) { /* the next export */
			ck_assert_int_eq(st_writer_open(path, d, 1, NULL, 0, &w), 0);
			fill(w, 0, 1u << 20);
			ck_assert_int_eq(st_writer_finish(w), 0);
		} else { /* the next open (of a file there, or not) */
			int rc = st_reader_open(path, &r);

			if (rc == 0)
				st_reader_close(r);
		}
		ck_assert_msg(!exists(dead), "%s survived the next %s", dead, k ? "open" : "export");
		ck_assert(exists(held));
		ck_assert(exists(other));
		ck_assert(exists(alike));
		close(hfd);
	}
	free(path);
	free(held);
	free(other);
	free(alike);
}
END_TEST

/* ------------------------------------------------ writer arguments */

struct warg_case {
	const char *label;
	struct st_desc d[2];
	size_t n;
	const char *meta[4];
	size_t nmeta;
	int rc;
	const char *want;
};

static const struct warg_case warg_cases[] = {
	{ "dup name", { { "a", ST_U8, 1, { 1 } }, { "a", ST_F32, 0, { 0 } } }, 2, { 0 }, 0,
	  -EINVAL, "tensor name 'a' given twice" },
	{ "reserved", { { "__metadata__", ST_U8, 1, { 1 } } }, 1, { 0 }, 0, -EINVAL,
	  "'__metadata__' is reserved" },
	{ "bad utf8 name", { { "a\xff", ST_U8, 1, { 1 } } }, 1, { 0 }, 0, -EINVAL,
	  "tensor 0: name is not valid UTF-8" },
	{ "null name", { { NULL, ST_U8, 1, { 1 } } }, 1, { 0 }, 0, -EINVAL, "name is NULL" },
	{ "bad dtype", { { "a", ST_DTYPE_COUNT, 1, { 1 } } }, 1, { 0 }, 0, -EINVAL,
	  "tensor 'a': dtype 22 is no safetensors dtype" },
	{ "9 dims", { { "a", ST_U8, 9, { 1 } } }, 1, { 0 }, 0, -EINVAL,
	  "tensor 'a': 9 dimensions, at most 8" },
	{ "overflow", { { "a", ST_F32, 2, { 1ull << 40, 1ull << 40 } } }, 1, { 0 }, 0, -EOVERFLOW,
	  "tensor 'a': its size overflows" },
	/* bytes are counted through bits, as the official loader counts them */
	{ "bits overflow", { { "b", ST_U8, 1, { 1ull << 62 } } }, 1, { 0 }, 0, -EOVERFLOW,
	  "tensor 'b': its size overflows" },
	{ "half byte", { { "a", ST_F4, 1, { 3 } } }, 1, { 0 }, 0, -EINVAL,
	  "no whole number of bytes" },
	{ "dup meta", { { 0 } }, 0, { "k", "1", "k", "2" }, 2, -EINVAL,
	  "metadata key 'k' given twice" },
	{ "null meta", { { 0 } }, 0, { "k", NULL }, 1, -EINVAL, "metadata value 0 is NULL" },
	{ "bad utf8 meta", { { 0 } }, 0, { "k", "\xc0\xaf" }, 1, -EINVAL,
	  "metadata value 0 is not valid UTF-8" },
};

START_TEST(test_writer_args)
{
	const struct warg_case *c = &warg_cases[_i];
	char *path = path_in("w.safetensors");
	struct st_writer *w = (struct st_writer *)1;
	int rc = st_writer_open(path, c->d, c->n, c->meta, c->nmeta, &w);

	ck_assert_msg(rc == c->rc, "%s: %d, expected %d (%s)", c->label, rc, c->rc,
		      tier_last_error());
	ck_assert_msg(strstr(tier_last_error(), c->want), "%s: '%s' lacks '%s'", c->label,
		      tier_last_error(), c->want);
	ck_assert_ptr_null(w);
	ck_assert_int_eq(entries(), 0);
	free(path);
}
END_TEST

START_TEST(test_bounds)
{
	static const struct st_desc d[] = { { "t0", ST_F32, 1, { 4 } }, { "t1", ST_U8, 1, { 3 } } };
	char *path = path_in("b.safetensors");
	unsigned char buf[32] = { 0 };
	struct st_writer *w;
	struct st_reader *r;
	size_t i;

	ck_assert_int_eq(st_writer_open(path, d, 2, NULL, 0, &w), 0);
	ck_assert_int_eq(st_writer_pwrite(w, 0, 0, buf, 16), 0);
	ck_assert_int_eq(st_writer_pwrite(w, 0, 16, buf, 0), 0);
	ck_assert_int_eq(st_writer_pwrite(w, 0, 1, buf, 16), -EINVAL);
	ck_assert_ptr_nonnull(strstr(tier_last_error(), "tensor 't0': bytes [1, +16)"));
	ck_assert_int_eq(st_writer_pwrite(w, 1, 4, buf, 0), -EINVAL);
	ck_assert_ptr_nonnull(strstr(tier_last_error(), "tensor 't1'"));
	ck_assert_int_eq(st_writer_pwrite(w, 1, UINT64_MAX, buf, 2), -EINVAL);
	ck_assert_int_eq(st_writer_pwrite(w, 2, 0, buf, 1), -EINVAL);
	ck_assert_ptr_nonnull(strstr(tier_last_error(), "tensor index 2"));
	ck_assert_int_eq(st_writer_finish(w), 0);

	ck_assert_int_eq(st_reader_open(path, &r), 0);
	ck_assert_int_eq(st_reader_find(r, "t1", &i), 0);
	ck_assert_uint_eq(i, 1);
	ck_assert_int_eq(st_reader_pread(r, 1, 0, buf, 3), 0);
	ck_assert_int_eq(st_reader_pread(r, 1, 1, buf, 3), -EINVAL);
	ck_assert_ptr_nonnull(strstr(tier_last_error(), "tensor 't1'"));
	ck_assert_int_eq(st_reader_pread(r, 0, UINT64_MAX, buf, 1), -EINVAL);
	ck_assert_int_eq(st_reader_pread(r, 5, 0, buf, 1), -EINVAL);
	ck_assert_ptr_null(st_reader_tensor(r, 2));
	ck_assert_int_eq(st_reader_meta_at(r, 0, NULL, NULL), -EINVAL);
	/* the file cut short after open: -EIO naming path and byte */
	ck_assert_int_eq(truncate(path, (off_t)(st_reader_tensor(r, 0)->file_offset + 6)), 0);
	ck_assert_int_eq(st_reader_pread(r, 0, 0, buf, 16), -EIO);
	ck_assert_msg(strstr(tier_last_error(), path) &&
		      strstr(tier_last_error(), "short file"), "%s", tier_last_error());
	st_reader_close(r);
	st_reader_close(NULL);
	ck_assert_int_eq(st_reader_open(path, &r), -EBADMSG);
	free(path);
	path = path_in("absent.safetensors");
	ck_assert_int_eq(st_reader_open(path, &r), -ENOENT);
	ck_assert_ptr_null(r);
	free(path);
}
END_TEST

START_TEST(test_dtypes)
{
	enum st_dtype dt;

	for (unsigned i = 0; i < ST_DTYPE_COUNT; i++) {
		ck_assert_int_eq(st_dtype_parse(st_dtype_name((enum st_dtype)i), &dt), 0);
		ck_assert_int_eq(dt, (int)i);
	}
	ck_assert_uint_eq(st_dtype_size(ST_BF16), 2);
	ck_assert_uint_eq(st_dtype_size(ST_C64), 8);
	ck_assert_uint_eq(st_dtype_size(ST_F4), 0);
	ck_assert_uint_eq(st_dtype_bits(ST_F6_E2M3), 6);
	ck_assert_str_eq(st_dtype_name(ST_DTYPE_COUNT), "?");
	ck_assert_int_eq(st_dtype_parse("f32", &dt), -EINVAL);
}
END_TEST

/* ------------------------------------------------- malformed files */

/* A tensor entry. */
#define ENT(dt, shape, offs) \
	"{\"dtype\":\"" dt "\",\"shape\":[" shape "],\"data_offsets\":[" offs "]}"
#define U8_2 ENT("U8", "2", "0,2") /* 2 data bytes */

struct bad_case {
	const char *label;
	const char *hdr;    /* the header text */
	size_t hlen;        /* its bytes (0: strlen), for a NUL inside */
	uint64_t lenfield;  /* the length written (0: the header's) */
	size_t data;        /* zero bytes after the header */
	size_t raw;         /* nonzero: the file is the first @raw bytes alone */
	int rc;
	const char *at;     /* the header byte named: where this text starts */
	size_t at_off;      /* ... plus this; NULL @at with @at_off 1: the end */
	const char *want;   /* in the message */
};

#define DEEP16 "[[[[[[[[[[[[[[[["
#define DEEP80 DEEP16 DEEP16 DEEP16 DEEP16 DEEP16

static const struct bad_case bad_cases[] = {
	/* framing */
	{ "empty file", "", 0, 0, 0, 0, -EBADMSG, NULL, 0, "byte 0: the file ends inside" },
	{ "5 bytes", "{}", 0, 2, 0, 5, -EBADMSG, NULL, 0, "byte 5: the file ends inside" },
	{ "header past end", "{}", 0, 1000, 0, 0, -EBADMSG, NULL, 0,
	  "header length 1000 runs past the end of the file (10 bytes)" },
	{ "header over 100MB", "{}", 0, 100000001, 0, 0, -EBADMSG, NULL, 0,
	  "header length 100000001 is over the limit" },
	{ "header 2^64-1", "{}", 0, UINT64_MAX, 0, 0, -EBADMSG, NULL, 0, "is over the limit" },
	{ "header 1 byte", "{", 0, 0, 0, 0, -EBADMSG, NULL, 0, "header length 1 is too small" },
	/* JSON syntax */
	{ "array", "[]", 0, 0, 0, 0, -EBADMSG, "[", 0, "expected '{', found '['" },
	{ "string", "\"x\"", 0, 0, 0, 0, -EBADMSG, "\"", 0, "expected '{'" },
	{ "no closing brace", "{\"a\":" U8_2, 0, 0, 2, 0, -EBADMSG, NULL, 1,
	  "expected ',' or '}', found the end of the header" },
	{ "no comma", "{\"a\":" U8_2 " \"b\":" U8_2 "}", 0, 0, 4, 0, -EBADMSG, "\"b\"", 0,
	  "expected ',' or '}', found '\"'" },
	{ "trailing comma", "{\"a\":" U8_2 ",}", 0, 0, 2, 0, -EBADMSG, ",}", 1,
	  "expected a string, found '}'" },
	{ "garbage after", "{\"a\":" U8_2 "} x", 0, 0, 2, 0, -EBADMSG, " x", 1,
	  "'x' after the header's closing '}'" },
	{ "NUL after", "{\"a\":" U8_2 "}\0", sizeof("{\"a\":" U8_2 "}"), 0, 2, 0, -EBADMSG,
	  NULL, 0, "byte 0x00 after" },
	{ "no colon", "{\"a\"" U8_2 "}", 0, 0, 2, 0, -EBADMSG, "{\"d", 0, "expected ':'" },
	{ "bad literal", "{\"__metadata__\":nul}", 0, 0, 0, 0, -EBADMSG, "nul", 0,
	  "expected a JSON value" },
	/* strings */
	{ "unterminated", "{\"abc", 0, 0, 0, 0, -EBADMSG, "\"abc", 0, "unterminated string" },
	{ "bad escape", "{\"a\\q\":" U8_2 "}", 0, 0, 2, 0, -EBADMSG, "\\q", 0, "bad escape '\\q'" },
	{ "bad \\u", "{\"a\\u12G4\":" U8_2 "}", 0, 0, 2, 0, -EBADMSG, "\\u", 0, "bad \\u escape" },
	{ "short \\u", "{\"a\\u12\"}", 0, 0, 0, 0, -EBADMSG, "\\u", 0, "bad \\u escape" },
	{ "lone high surrogate", "{\"a\\ud800b\":" U8_2 "}", 0, 0, 2, 0, -EBADMSG, "\\ud800", 0,
	  "high surrogate \\ud800 without a low one" },
	{ "lone low surrogate", "{\"a\\udc00\":" U8_2 "}", 0, 0, 2, 0, -EBADMSG, "\\udc00", 0,
	  "lone low surrogate" },
	{ "control char", "{\"a\tb\":" U8_2 "}", 0, 0, 2, 0, -EBADMSG, "\t", 0,
	  "control character 0x09" },
	{ "invalid UTF-8", "{\"a\xff\":" U8_2 "}", 0, 0, 2, 0, -EBADMSG, "\xff", 0,
	  "invalid UTF-8 (byte 0xff)" },
	{ "overlong UTF-8", "{\"a\xc0\xaf\":" U8_2 "}", 0, 0, 2, 0, -EBADMSG, "\xc0", 0,
	  "invalid UTF-8" },
	{ "UTF-8 surrogate", "{\"a\xed\xa0\x80\":" U8_2 "}", 0, 0, 2, 0, -EBADMSG, "\xed", 0,
	  "invalid UTF-8" },
	{ "NUL in name", "{\"a\\u0000b\":" U8_2 "}", 0, 0, 2, 0, -EBADMSG, "\\u0000", 0,
	  "NUL (\\u0000) in a string" },
	/* metadata */
	{ "meta int", "{\"__metadata__\":{\"k\":1}}", 0, 0, 0, 0, -EBADMSG, "1}", 0,
	  "__metadata__ 'k': values are strings, found '1'" },
	{ "meta deep", "{\"__metadata__\":{\"k\":" DEEP80 "}}", 0, 0, 0, 0, -EBADMSG, "[", 0,
	  "values are strings, found '['" },
	{ "meta array", "{\"__metadata__\":[]}", 0, 0, 0, 0, -EBADMSG, "[]", 0,
	  "expected an object or null" },
	{ "meta dup key", "{\"__metadata__\":{\"k\":\"1\",\"k\":\"2\"}}", 0, 0, 0, 0, -EBADMSG,
	  "\"k\":\"2\"", 0, "duplicate metadata key 'k' (also at header byte 25)" },
	{ "meta twice", "{\"__metadata__\":{},\"__metadata__\":{}}", 0, 0, 0, 0, -EBADMSG,
	  ",\"", 1, "duplicate key '__metadata__'" },
	{ "meta NUL", "{\"__metadata__\":{\"k\":\"a\\u0000\"}}", 0, 0, 0, 0, -EBADMSG, "\\u0000",
	  0, "NUL" },
	/* tensor entries */
	{ "unknown dtype", "{\"a\":" ENT("F17", "2", "0,2") "}", 0, 0, 2, 0, -EBADMSG, "\"F17", 0,
	  "tensor 'a': unknown dtype 'F17'" },
	{ "lowercase dtype", "{\"a\":" ENT("u8", "2", "0,2") "}", 0, 0, 2, 0, -EBADMSG, "\"u8", 0,
	  "unknown dtype 'u8'" },
	{ "missing shape", "{\"a\":{\"dtype\":\"U8\",\"data_offsets\":[0,2]}}", 0, 0, 2, 0,
	  -EBADMSG, "{\"dtype", 0, "tensor 'a': missing field 'shape'" },
	{ "empty entry", "{\"a\":{}}", 0, 0, 0, 0, -EBADMSG, "{}", 0, "missing field 'dtype'" },
	{ "duplicate field", "{\"a\":{\"dtype\":\"U8\",\"dtype\":\"U8\",\"shape\":[2],"
	  "\"data_offsets\":[0,2]}}", 0, 0, 2, 0, -EBADMSG, "\"dtype\":\"U8\",\"s", 0,
	  "tensor 'a': duplicate field 'dtype'" },
	{ "negative dim", "{\"a\":" ENT("U8", "-2", "0,2") "}", 0, 0, 2, 0, -EBADMSG, "-2", 0,
	  "shape: expected a non-negative integer, found '-'" },
	{ "float dim", "{\"a\":" ENT("U8", "2.0", "0,2") "}", 0, 0, 2, 0, -EBADMSG, "2.0", 0,
	  "fraction or exponent" },
	{ "exp dim", "{\"a\":" ENT("U8", "2e0", "0,2") "}", 0, 0, 2, 0, -EBADMSG, "2e0", 0,
	  "fraction or exponent" },
	{ "huge dim", "{\"a\":" ENT("U8", "18446744073709551616", "0,2") "}", 0, 0, 2, 0,
	  -EBADMSG, "1844", 0, "shape: integer over 2^64-1" },
	{ "leading zero", "{\"a\":" ENT("U8", "02", "0,2") "}", 0, 0, 2, 0, -EBADMSG, "02", 0,
	  "leading zero" },
	{ "9 dims", "{\"a\":" ENT("U8", "1,1,1,1,1,1,1,1,2", "0,2") "}", 0, 0, 2, 0, -EBADMSG,
	  "2]", 0, "tensor 'a': more than 8 dimensions" },
	{ "3 offsets", "{\"a\":" ENT("U8", "2", "0,2,2") "}", 0, 0, 2, 0, -EBADMSG, ",2]", 0,
	  "data_offsets: expected ']' after 2 integers" },
	{ "1 offset", "{\"a\":" ENT("U8", "2", "2") "}", 0, 0, 2, 0, -EBADMSG, "]}", 0,
	  "expected ','" },
	{ "entry not object", "{\"a\":[1]}", 0, 0, 0, 0, -EBADMSG, "[1", 0,
	  "tensor 'a': expected an object, found '['" },
	{ "deep unknown field", "{\"a\":{\"x\":" DEEP80 "}}", 0, 0, 0, 0, -EBADMSG,
	  "[", 62, "JSON nested deeper than 64 levels" }, /* the 63rd '[' is level 65 */
	/* sizes and offsets */
	{ "shape overflow", "{\"a\":" ENT("F32", "4294967296,4294967296", "0,2") "}", 0, 0, 2, 0,
	  -EBADMSG, "\"a\"", 0, "tensor 'a': shape overflows 64 bits of F32" },
	{ "size mismatch", "{\"a\":" ENT("U8", "3", "0,2") "}", 0, 0, 2, 0, -EBADMSG, "\"a\"", 0,
	  "tensor 'a': its shape of U8 is 3 bytes, its data_offsets [0, 2] hold 2" },
	{ "end before begin", "{\"a\":" ENT("U8", "2", "2,0") "}", 0, 0, 2, 0, -EBADMSG, "\"a\"",
	  0, "tensor 'a': data_offsets [2, 0] end before they begin" },
	{ "past the end", "{\"a\":" ENT("U8", "4", "0,4") "}", 0, 0, 2, 0, -EBADMSG, "\"a\"", 0,
	  "tensor 'a': data_offsets [0, 4] run past the end of the data (2 bytes)" },
	{ "overlap", "{\"a\":" ENT("U8", "2", "0,2") ",\"b\":" ENT("U8", "2", "1,3") "}", 0, 0, 3,
	  0, -EBADMSG, "\"b\"", 0, "tensor 'b': data_offsets [1, 3] overlap tensor 'a'" },
	{ "hole", "{\"a\":" ENT("U8", "1", "0,1") ",\"b\":" ENT("U8", "1", "2,3") "}", 0, 0, 3, 0,
	  -EBADMSG, "\"b\"", 0, "data bytes [1, 2) belong to no tensor" },
	{ "hole at start", "{\"a\":" ENT("U8", "1", "1,2") "}", 0, 0, 2, 0, -EBADMSG, "\"a\"", 0,
	  "data bytes [0, 1) belong to no tensor" },
	{ "trailing data", "{\"a\":" U8_2 "}", 0, 0, 4, 0, -EBADMSG, NULL, 0,
	  "the tensors cover 2 bytes of data but the file holds 4 (2 bytes after the last tensor)" },
	{ "data, no tensors", "{}", 0, 0, 1, 0, -EBADMSG, NULL, 0, "byte 10: the tensors cover 0" },
	{ "duplicate name", "{\"a\":" ENT("U8", "1", "0,1") ",\"a\":" ENT("U8", "1", "1,2") "}",
	  0, 0, 2, 0, -EBADMSG, "\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[1", 0,
	  "duplicate tensor name 'a' (also at header byte 9)" },
	{ "F4 half byte", "{\"a\":" ENT("F4", "3", "0,2") "}", 0, 0, 2, 0, -EBADMSG, "\"a\"", 0,
	  "tensor 'a': its F4 elements are no whole number of bytes" },
};

static void write_file(const char *path, const void *a, size_t alen, const void *b, size_t blen,
		       size_t zeros)
{
	FILE *f = fopen(path, "wb");

	ck_assert_ptr_nonnull(f);
	ck_assert_uint_eq(fwrite(a, 1, alen, f), alen);
	if (blen)
		ck_assert_uint_eq(fwrite(b, 1, blen, f), blen);
	for (size_t k = 0; k < zeros; k++)
		fputc(0, f);
	ck_assert_int_eq(fclose(f), 0);
}

/* The file of case @c: length field, header, zero data. */
static void write_case(const char *path, const struct bad_case *c)
{
	size_t hlen = c->hlen ? c->hlen : strlen(c->hdr);
	uint64_t lf = c->lenfield ? c->lenfield : hlen;
	unsigned char len8[8], all[64];

	for (int k = 0; k < 8; k++)
		len8[k] = (unsigned char)(lf >> (8 * k));
	if (c->raw) {
		memcpy(all, len8, 8);
		memcpy(all + 8, c->hdr, hlen);
		write_file(path, all, c->raw, NULL, 0, 0);
	} else if (!c->hlen && !*c->hdr && !c->lenfield) {
		write_file(path, "", 0, NULL, 0, 0); /* the empty file */
	} else {
		write_file(path, len8, 8, c->hdr, hlen, c->data);
	}
}

START_TEST(test_malformed)
{
	const struct bad_case *c = &bad_cases[_i];
	char *path = path_in("bad.safetensors");
	const char *msg;
	struct st_reader *r = (struct st_reader *)1;
	int rc;

	write_case(path, c);
	rc = st_reader_open(path, &r);
	msg = tier_last_error();
	ck_assert_msg(rc == c->rc, "%s: %d, expected %d (%s)", c->label, rc, c->rc, msg);
	ck_assert_ptr_null(r);
	ck_assert_msg(strstr(msg, path), "%s: '%s' does not name the file", c->label, msg);
	ck_assert_msg(strstr(msg, c->want), "%s: '%s' lacks '%s'", c->label, msg, c->want);
	if (c->at || c->at_off) {
		size_t hlen = c->hlen ? c->hlen : strlen(c->hdr);
		size_t pos = c->at ? (size_t)(strstr(c->hdr, c->at) - c->hdr) + c->at_off : hlen;
		char want[64];

		ck_assert_msg(!c->at || strstr(c->hdr, c->at), "%s: bad test", c->label);
		snprintf(want, sizeof(want), "header byte %zu: ", pos + 8);
		ck_assert_msg(strstr(msg, want), "%s: '%s' lacks '%s'", c->label, msg, want);
	}
	free(path);
}
END_TEST

/* Odd files the official loader (0.8) accepts: so do we. */
struct ok_case {
	const char *label;
	const char *hdr;
	size_t data;
	size_t n;       /* tensors */
	const char *meta_k, *meta_v;
};

static const struct ok_case ok_cases[] = {
	{ "empty object", "{}", 0, 0, NULL, NULL },
	{ "spaces around", " \t\r\n{ } \n  ", 0, 0, NULL, NULL },
	{ "metadata null", "{\"__metadata__\":null}", 0, 0, NULL, NULL },
	{ "unknown fields skipped", "{\"a\":{\"x\":[1,{\"y\":null}],\"dtype\":\"U8\",\"z\":-1.5e3,"
	  "\"shape\":[2],\"data_offsets\":[0,2],\"w\":\"\\u00e9\",\"v\":true}}", 2, 1, NULL, NULL },
	{ "zero-size anywhere", "{\"a\":" ENT("U8", "0", "0,0") ",\"b\":" U8_2 ",\"c\":"
	  ENT("F32", "0,3", "2,2") "}", 2, 3, NULL, NULL },
	{ "escapes decoded", "{\"__metadata__\":{\"k\\u00e9\\ud83d\\ude00\":\"\\\"\\\\\\/\\b\\f\\n"
	  "\\r\\t\"},\"a\\\"b\":" U8_2 "}", 2, 1, "k\xc3\xa9\xf0\x9f\x98\x80",
	  "\"\\/\b\f\n\r\t" },
	{ "F4 pair", "{\"a\":" ENT("F4", "2", "0,1") "}", 1, 1, NULL, NULL },
	{ "out of order", "{\"b\":" ENT("U8", "1", "1,2") ",\"a\":" ENT("U8", "1", "0,1") "}", 2,
	  2, NULL, NULL },
};

START_TEST(test_accepted)
{
	const struct ok_case *c = &ok_cases[_i];
	char *path = path_in("ok.safetensors");
	struct bad_case bc = { .hdr = c->hdr, .data = c->data, .lenfield = strlen(c->hdr) };
	struct st_reader *r;

	write_case(path, &bc);
	ck_assert_msg(st_reader_open(path, &r) == 0, "%s: %s", c->label, tier_last_error());
	ck_assert_uint_eq(st_reader_count(r), c->n);
	if (c->meta_k)
		ck_assert_str_eq(st_reader_meta(r, c->meta_k), c->meta_v);
	st_reader_close(r);
	free(path);
}
END_TEST

/* Every header byte of a valid file replaced, and every cut: no crash. */
START_TEST(test_mutations)
{
	static const struct st_desc d[] = {
		{ "a\xc3\xa9", ST_F32, 2, { 2, 3 } },
		{ "b", ST_BF16, 0, { 0 } },
		{ "c", ST_U8, 1, { 0 } },
	};
	static const char *const kv[] = { "k", "v\"\\\n" };
	static const unsigned char subst[] = { 0, '"', '\\', '{', '}', '[', ']', ',', ':', '0',
					       '9', '-', 'u', 0x80, 0xff, ' ' };
	char *path = path_in("m.safetensors"), *mpath = path_in("mut.safetensors");
	unsigned char *all, *cp;
	struct st_writer *w;
	struct st_reader *r;
	size_t len, ok = 0, bad = 0;

	ck_assert_int_eq(st_writer_open(path, d, 3, kv, 1, &w), 0);
	ck_assert_int_eq(st_writer_finish(w), 0);
	all = t_read_all(dir, "m.safetensors", &len);
	cp = malloc(len);
	for (size_t pos = 0; pos < len; pos++) {
		for (size_t s = 0; s < ARRAY_SIZE(subst); s++) {
			int rc;

			memcpy(cp, all, len);
			if (cp[pos] == subst[s])
				continue;
			cp[pos] = subst[s];
			write_file(mpath, cp, len, NULL, 0, 0);
			rc = st_reader_open(mpath, &r);
			if (rc == 0) {
				st_reader_close(r);
				ok++;
			} else {
				ck_assert_msg(rc == -EBADMSG, "byte %zu = 0x%02x: %d %s", pos,
					      subst[s], rc, tier_last_error());
				ck_assert(strstr(tier_last_error(), "byte "));
				bad++;
			}
		}
	}
	for (size_t cut = 0; cut < len; cut++) {
		write_file(mpath, all, cut, NULL, 0, 0);
		ck_assert_int_eq(st_reader_open(mpath, &r), -EBADMSG);
	}
	ck_assert_uint_gt(bad, len);
	ck_assert_uint_gt(ok, 0); /* spaces in the padding, digits, ... */
	free(cp);
	free(all);
	free(path);
	free(mpath);
}
END_TEST

/* Each allocation of an open failing in turn: -ENOMEM, nothing leaked
 * (ASan), no file left by the writer. */
START_TEST(test_alloc_faults)
{
	static const char *const kv[] = { "a", "1", "b", "2" };
	char *path = path_in("f.safetensors");
	struct st_writer *w;
	struct st_reader *r;
	struct t_nth fw = T_NTH(TIER_FAULT_ALLOC, -ENOMEM, 999), fr = fw;

	NEED_FAULTS();
	while (t_nth_next(&fw)) {
		int rc;
		bool done;

		t_nth_arm(&fw);
		rc = st_writer_open(path, d_mixed, ARRAY_SIZE(d_mixed), kv, 2, &w);
		done = !t_nth_fired(&fw);
		if (rc) {
			ck_assert_msg(rc == -ENOMEM, "nth %llu: %d %s", (unsigned long long)fw.nth, rc,
				      tier_last_error());
			ck_assert_int_eq(entries(), 0);
		} else {
			ck_assert(done);
			ck_assert_int_eq(st_writer_finish(w), 0);
		}
		if (done)
			break;
	}
	while (t_nth_next(&fr)) {
		int rc;
		bool done;

		t_nth_arm(&fr);
		rc = st_reader_open(path, &r);
		done = !t_nth_fired(&fr);
		if (rc) {
			ck_assert_msg(rc == -ENOMEM, "nth %llu: %d %s", (unsigned long long)fr.nth, rc,
				      tier_last_error());
		} else {
			ck_assert(done);
			st_reader_close(r);
		}
		if (done)
			break;
	}
	free(path);
}
END_TEST

static Suite *safetensors_suite(void)
{
	Suite *s = suite_create("safetensors");
	TCase *tc = tcase_create("write");

	tcase_add_unchecked_fixture(tc, t_case_setup, t_case_teardown);
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_loop_test(tc, test_round_trip, 0, (int)ARRAY_SIZE(rt_cases));
	tcase_add_test(tc, test_exact_bytes);
	tcase_add_test(tc, test_thousand);
	tcase_add_test(tc, test_pieces_shuffled);
	tcase_add_test(tc, test_abort_and_replace);
	tcase_add_test(tc, test_killed_writer_swept);
	tcase_add_loop_test(tc, test_writer_args, 0, (int)ARRAY_SIZE(warg_cases));
	tcase_add_test(tc, test_bounds);
	tcase_add_test(tc, test_dtypes);
	suite_add_tcase(s, tc);

	tc = tcase_create("read");
	tcase_add_unchecked_fixture(tc, t_case_setup, t_case_teardown);
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_loop_test(tc, test_malformed, 0, (int)ARRAY_SIZE(bad_cases));
	tcase_add_loop_test(tc, test_accepted, 0, (int)ARRAY_SIZE(ok_cases));
	tcase_add_test(tc, test_mutations);
	suite_add_tcase(s, tc);

	tc = t_tcase_faults("read-faults");
	tcase_add_unchecked_fixture(tc, t_case_setup, t_case_teardown);
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_test(tc, test_alloc_faults);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return t_run_suite(safetensors_suite());
}
