/*
 * safetensors.h - reading and writing safetensors files
 * (https://github.com/huggingface/safetensors) without holding them in
 * memory: the header is built or parsed whole, tensor data moves with
 * pread/pwrite at offsets, so a file may be larger than RAM.
 *
 * The format: an 8-byte little-endian length N, N bytes of UTF-8 JSON (the
 * header), then the data buffer.  The header is an object; "__metadata__"
 * (optional, or null) maps to an object of string -> string, every other
 * key is a tensor name mapping to {"dtype": "F32", "shape": [2, 3],
 * "data_offsets": [begin, end]}, offsets relative to the data buffer.
 *
 * What the reader accepts is what the official loader (safetensors 0.8)
 * accepts, with these exceptions, all stricter: duplicate tensor names,
 * duplicate metadata keys and a NUL (\u0000) in any string are refused
 * (the official loader keeps the last duplicate; our names are C
 * strings), a tensor has at most ST_MAX_DIM dimensions, and the header is
 * at least 2 bytes.  Like the official loader it ignores unknown keys
 * inside a tensor entry, requires the tensors' [begin, end) ranges,
 * sorted, to tile the data buffer exactly (no hole, no overlap, nothing
 * after the last), and caps the header at 100,000,000 bytes.
 *
 * The writer pads the header with spaces to a multiple of 8, as the
 * official writer does, and lays the data out by descending element size
 * (ties in the order given), so every tensor starts at a multiple of its
 * element size in the file.  The header lists the tensors in the order
 * given; index i in the calls below is always the i-th descriptor.
 *
 * Internal to the library.  Every int-returning function returns 0 or a
 * negative errno, with the detail (tier_last_error()) naming the file and,
 * for a malformed header, the byte offset in the file ("PATH: header byte
 * 57: expected ',' or '}'") or the tensor.  A malformed file is -EBADMSG;
 * a bad argument -EINVAL; a file that ends early while reading data -EIO.
 * A writer or reader may be used from several threads at once for
 * pwrite/pread (they share nothing mutable but the descriptor); open,
 * finish, abort and close are not concurrent with anything else on it.
 */
#ifndef TIER_FORMATS_SAFETENSORS_H
#define TIER_FORMATS_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#define ST_MAX_DIM 8
#define ST_HEADER_MAX 100000000ull /* the official loader's limit, in bytes */

/* The element types of safetensors 0.8, by their names in the file. */
enum st_dtype {
	ST_BOOL,
	ST_F4,           /* 4 bits: a tensor's bits must make whole bytes */
	ST_F6_E2M3,      /* 6 bits */
	ST_F6_E3M2,      /* 6 bits */
	ST_U8,
	ST_I8,
	ST_F8_E5M2,
	ST_F8_E4M3,
	ST_F8_E8M0,
	ST_F8_E4M3FNUZ,
	ST_F8_E5M2FNUZ,
	ST_I16,
	ST_U16,
	ST_F16,
	ST_BF16,
	ST_I32,
	ST_U32,
	ST_F32,
	ST_C64,
	ST_F64,
	ST_I64,
	ST_U64,
	ST_DTYPE_COUNT
};

/* "F32" etc.; "?" for a value that is no dtype. */
const char *st_dtype_name(enum st_dtype dt);
/* Bits of one element (4, 6, 8, ... 64); 0 for a value that is no dtype. */
unsigned st_dtype_bits(enum st_dtype dt);
/* Bytes of one element; 0 for F4, F6_* (less than a byte) and no dtype. */
size_t st_dtype_size(enum st_dtype dt);
/* The dtype named @name (exactly, case included); -EINVAL if none is. */
int st_dtype_parse(const char *name, enum st_dtype *out);

/* A tensor to write: @ndim 0 is a scalar (one element). */
struct st_desc {
	const char *name;
	enum st_dtype dtype;
	unsigned ndim;
	uint64_t shape[ST_MAX_DIM];
};

struct st_writer;

/*
 * Creates PATH.tmp-<pid> (replacing a stale one), writes the header for
 * the @n descriptors (names: valid UTF-8, no NUL, not "__metadata__", no
 * two alike) and @nmeta metadata pairs (@meta_kv: key0, value0, key1, ...;
 * valid UTF-8, keys distinct), and sizes the file to its full length
 * (allocated where the file system can, so a full disk shows here).  The
 * data reads as zeros until written.  -EINVAL for a bad descriptor (naming
 * it), -EOVERFLOW for sizes past 2^63, else the system call's error.
 */
int st_writer_open(const char *path, const struct st_desc *d, size_t n,
		   const char *const *meta_kv, size_t nmeta, struct st_writer **out);
/* Writes @len bytes at byte @off of tensor @i (any order, any pieces);
 * -EINVAL naming the tensor when [off, off+len) is outside it. */
int st_writer_pwrite(struct st_writer *w, size_t i, uint64_t off, const void *buf, size_t len);
/* Bytes of tensor @i (0 for a bad index), and its offset in the file. */
uint64_t st_writer_nbytes(const struct st_writer *w, size_t i);
uint64_t st_writer_file_offset(const struct st_writer *w, size_t i);
/* fsync, rename over PATH, fsync the directory.  Frees @w whatever the
 * result.  A failure before the rename removes the temporary file and
 * leaves PATH as it was; a failed directory fsync is reported after it. */
int st_writer_finish(struct st_writer *w);
/* Removes the temporary file and frees @w (NULL: nothing). */
void st_writer_abort(struct st_writer *w);

/* One tensor of an open file, valid until st_reader_close(). */
struct st_tensor {
	const char *name;
	enum st_dtype dtype;
	unsigned ndim;
	uint64_t shape[ST_MAX_DIM];
	uint64_t nbytes;
	uint64_t begin, end;   /* data_offsets, relative to the data buffer */
	uint64_t file_offset;  /* of its first byte in the file: 8 + N + begin */
};

struct st_reader;

/* Opens and validates @path (above); tensors in header order. */
int st_reader_open(const char *path, struct st_reader **out);
size_t st_reader_count(const struct st_reader *r);
/* Tensor @i, NULL past the end. */
const struct st_tensor *st_reader_tensor(const struct st_reader *r, size_t i);
/* Index of the tensor @name; -ENOENT naming it (and the file). */
int st_reader_find(const struct st_reader *r, const char *name, size_t *i);
/* The metadata value of @key, NULL if absent. */
const char *st_reader_meta(const struct st_reader *r, const char *key);
/* Metadata pairs in header order: count, and pair @i (-EINVAL past the end). */
size_t st_reader_meta_count(const struct st_reader *r);
int st_reader_meta_at(const struct st_reader *r, size_t i, const char **key, const char **value);
/* Size of the header (N) and of the data buffer. */
uint64_t st_reader_header_len(const struct st_reader *r);
uint64_t st_reader_data_len(const struct st_reader *r);
/* Reads @len bytes at byte @off of tensor @i; -EINVAL outside it, -EIO
 * naming the path and file offset when the file has shrunk under us. */
int st_reader_pread(struct st_reader *r, size_t i, uint64_t off, void *buf, size_t len);
/* NULL: nothing. */
void st_reader_close(struct st_reader *r);

#endif
