/*
 * safetensors_impl.h - what the files of the safetensors module share
 * (safetensors.h is its interface): the reader's state, which the header's
 * parser fills, and the helpers the reader and the writer both use.
 *
 *   safetensors_parse.c  the header: a strict JSON parser, and its checks
 *                        against the file (names, sizes, offsets)
 *   safetensors_read.c   the reader (open, tensors, metadata, pread), the
 *                        dtypes, and the helpers below
 *   safetensors_write.c  the writer (the header's text, the temporary
 *                        file, pwrite, publication)
 *
 * Private to formats/safetensors*.c.
 */
#ifndef TIER_FORMATS_SAFETENSORS_IMPL_H
#define TIER_FORMATS_SAFETENSORS_IMPL_H

#include <stddef.h>
#include <stdint.h>

#include "formats/safetensors.h"

#define META_KEY "__metadata__"

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

/* Orders struct by_name entries by name alone (qsort, bsearch). */
int st_cmp_name(const void *a, const void *b);

/*
 * Parses and checks the header @hdr (r->hlen bytes, read from byte 8 of
 * r->path) into @r: its tensors (r->t, r->n, each with its sizes and file
 * offset), its metadata (r->meta, r->nmeta) and r->by_name, sized against
 * r->dlen.  0, or a negative errno with the detail naming the header byte;
 * what it filled in @r is freed by st_reader_close() either way.
 * (safetensors_parse.c)
 */
int st_header_parse(struct st_reader *r, const unsigned char *hdr);

/* Bytes of @ndim dims of @dt, as the official loader computes them:
 * elements, then bits, each multiplication checked.  -EOVERFLOW, or
 * -EINVAL when the bits are no whole number of bytes. */
int st_tensor_bytes(enum st_dtype dt, unsigned ndim, const uint64_t *shape, uint64_t *out);

/* The folder holding @path into @buf ("." for a bare name): 0, or
 * -ENAMETOOLONG.  No allocation. */
int st_dir_of(const char *path, char *buf, size_t n);

/*
 * Removes the temporary files a killed writer of @path left: entries of
 * its folder named "<name>.tmp-<digits>" that are regular files and that
 * no writer holds (a live one holds its file's flock).  Best effort.
 */
void st_sweep_dead_tmp(const char *path);

#endif
