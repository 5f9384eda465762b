/*
 * st_tool.c - the C side of the safetensors cross-check with Python's
 * safetensors package (safetensors_check.py); built for the tests only.
 *
 *   st_tool write PATH   writes the deterministic file st_gen() describes
 *                        (tensors filled in pieces, last tensor first)
 *   st_tool dump PATH    prints, per tensor sorted by name,
 *                        "NAME DTYPE [D0,D1,..] FNV1A64-HEX" (the FNV-1a
 *                        64 of its data bytes), then per metadata pair
 *                        sorted by key "meta KEYHEX VALUEHEX" (the UTF-8
 *                        bytes in hex, so any text survives)
 *
 * Exits 0, or 1 with the library's detail message on stderr.
 * The generator, mirrored by safetensors_check.py: element k of tensor j
 * (j its index in the table) is
 *   floats: ((k * 7 + j * 13) % 251 - 125) / 8   (exact in F16 and BF16)
 *   I64, I32: k * 1000003 - j * 7
 *   U8: (k * 31 + j) & 255;  BOOL: (k + j) % 2
 * little-endian, F16/BF16 rounded from the exact float value.
 */
#include "config.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "formats/safetensors.h"
#include "tierstore.h"

#define ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))

static const struct st_desc gen[] = {
	{ "adam.m", ST_F32, 2, { 3, 5 } },
	{ "w.bf16", ST_BF16, 3, { 4, 3, 2 } },
	{ "w.f16", ST_F16, 1, { 7 } },
	{ "step.i64", ST_I64, 1, { 5 } },
	{ "mask.u8", ST_U8, 1, { 13 } },
	{ "scalar", ST_F32, 0, { 0 } },
	{ "empty", ST_F32, 2, { 0, 4 } },
	{ "f64", ST_F64, 2, { 2, 2 } },
	{ "i32", ST_I32, 1, { 3 } },
	{ "flags", ST_BOOL, 1, { 5 } },
	{ "deep", ST_F32, 4, { 2, 1, 3, 2 } },
};

static const char *const meta[] = {
	"format", "tierstore",
	"note", "quote \" backslash \\ tab\t newline\n unicode \xc3\xa9 \xe2\x9c\x93 \xf0\x9f\x98\x80",
	"step", "42",
};

static uint16_t f32_to_f16(float f)
{
	uint32_t x;
	uint16_t sign;
	int e;

	memcpy(&x, &f, 4);
	sign = (uint16_t)(x >> 16 & 0x8000);
	if (f == 0.0f)
		return sign;
	/* the generator's values are normal halves, exact: no rounding */
	e = (int)(x >> 23 & 0xff) - 127 + 15;
	return (uint16_t)(sign | (uint16_t)(e << 10) | (uint16_t)(x >> 13 & 0x3ff));
}

/* Element @k of tensor @j, little-endian, into @out; its size. */
static size_t gen_elem(size_t j, uint64_t k, unsigned char *out)
{
	int64_t iv = (int64_t)k * 1000003 - (int64_t)j * 7;
	float f = (float)((int)((k * 7 + j * 13) % 251) - 125) / 8.0f;
	double d = (double)f;
	uint32_t u32;
	uint16_t u16;
	int32_t i32 = (int32_t)iv;

	switch (gen[j].dtype) {
	case ST_F32:
		memcpy(out, &f, 4);
		return 4;
	case ST_F64:
		memcpy(out, &d, 8);
		return 8;
	case ST_BF16:
		memcpy(&u32, &f, 4);
		u16 = (uint16_t)(u32 >> 16);
		memcpy(out, &u16, 2);
		return 2;
	case ST_F16:
		u16 = f32_to_f16(f);
		memcpy(out, &u16, 2);
		return 2;
	case ST_I64:
		memcpy(out, &iv, 8);
		return 8;
	case ST_I32:
		memcpy(out, &i32, 4);
		return 4;
	case ST_U8:
		out[0] = (unsigned char)((k * 31 + j) & 255);
		return 1;
	case ST_BOOL:
		out[0] = (unsigned char)((k + j) % 2);
		return 1;
	default:
		return 0;
	}
}

static int fail(const char *what)
{
	fprintf(stderr, "st_tool: %s: %s\n", what, tier_last_error());
	return 1;
}

static int cmd_write(const char *path)
{
	struct st_writer *w;
	unsigned char *buf;
	int rc;

	if (st_writer_open(path, gen, ARRAY_SIZE(gen), (const char *const *)meta,
			   ARRAY_SIZE(meta) / 2, &w))
		return fail("open");
	for (size_t j = ARRAY_SIZE(gen); j-- > 0;) {
		uint64_t nb = st_writer_nbytes(w, j), k = 0, n = 0;

		if (!(buf = malloc(nb + 8)))
			return fail("malloc");
		while (n < nb)
			n += gen_elem(j, k++, buf + n);
		/* pieces of 7 bytes, from the end back */
		for (uint64_t off = (nb + 6) / 7 * 7; off > 0;) {
			off -= 7;
			size_t len = nb - off < 7 ? (size_t)(nb - off) : 7;

			if ((rc = st_writer_pwrite(w, j, off, buf + off, len))) {
				free(buf);
				st_writer_abort(w);
				return fail("pwrite");
			}
		}
		free(buf);
	}
	if (st_writer_finish(w))
		return fail("finish");
	return 0;
}

static int cmp_idx_name(const void *a, const void *b, void *r)
{
	const struct st_tensor *x = st_reader_tensor(r, *(const size_t *)a);
	const struct st_tensor *y = st_reader_tensor(r, *(const size_t *)b);

	return strcmp(x->name, y->name);
}

static int cmp_idx_key(const void *a, const void *b, void *r)
{
	const char *x, *y;

	st_reader_meta_at(r, *(const size_t *)a, &x, NULL);
	st_reader_meta_at(r, *(const size_t *)b, &y, NULL);
	return strcmp(x, y);
}

static void hex(const char *s)
{
	for (; *s; s++)
		printf("%02x", (unsigned char)*s);
}

static int cmd_dump(const char *path)
{
	struct st_reader *r;
	unsigned char buf[4096];
	size_t n, nm, *idx;

	if (st_reader_open(path, &r))
		return fail("open");
	n = st_reader_count(r);
	nm = st_reader_meta_count(r);
	if (!(idx = malloc((n > nm ? n : nm) * sizeof(*idx) + 1)))
		return fail("malloc");
	for (size_t i = 0; i < n; i++)
		idx[i] = i;
	qsort_r(idx, n, sizeof(*idx), cmp_idx_name, r);
	for (size_t k = 0; k < n; k++) {
		const struct st_tensor *t = st_reader_tensor(r, idx[k]);
		uint64_t h = 0xcbf29ce484222325ull;

		for (uint64_t off = 0; off < t->nbytes;) {
			size_t len = t->nbytes - off < sizeof(buf) ? (size_t)(t->nbytes - off)
								   : sizeof(buf);

			if (st_reader_pread(r, idx[k], off, buf, len)) {
				free(idx);
				st_reader_close(r);
				return fail("pread");
			}
			for (size_t b = 0; b < len; b++)
				h = (h ^ buf[b]) * 0x100000001b3ull;
			off += len;
		}
		printf("%s %s [", t->name, st_dtype_name(t->dtype));
		for (unsigned d = 0; d < t->ndim; d++)
			printf("%s%" PRIu64, d ? "," : "", t->shape[d]);
		printf("] %016" PRIx64 "\n", h);
	}
	for (size_t i = 0; i < nm; i++)
		idx[i] = i;
	qsort_r(idx, nm, sizeof(*idx), cmp_idx_key, r);
	for (size_t k = 0; k < nm; k++) {
		const char *key, *value;

		st_reader_meta_at(r, idx[k], &key, &value);
		printf("meta ");
		hex(key);
		printf(" ");
		hex(value);
		printf("\n");
	}
	free(idx);
	st_reader_close(r);
	return 0;
}

int main(int argc, char **argv)
{
	if (argc == 3 && !strcmp(argv[1], "write"))
		return cmd_write(argv[2]);
	if (argc == 3 && !strcmp(argv[1], "dump"))
		return cmd_dump(argv[2]);
	fprintf(stderr, "usage: st_tool write PATH | st_tool dump PATH\n");
	return 2;
}
