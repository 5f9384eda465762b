/*
 * bench.h - what the tier-bench subcommands share (tools/bench_common.c):
 * the clock, command-line parsing of sizes and dtypes, the manifest, medians,
 * the random data of the Adam runs, and the NVMe bandwidth measurement of
 * `tier-bench io`, which `tier-bench step` runs again for its bound.
 * Tools see only include/tierstore.h; this header adds nothing to it.
 */
#ifndef TIER_BENCH_H
#define TIER_BENCH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "tierstore.h"

enum { EXIT_USAGE = 2 };

/* CLOCK_MONOTONIC in nanoseconds. */
uint64_t now_ns(void);

/* Parses "1GiB", "4096", "1M" (binary units) for the command line.  0 is
 * refused.  0 or -EINVAL. */
int parse_bytes(const char *s, uint64_t *out);

/* tier_manifest_resolve(); on failure prints tier_last_error() to stderr. */
int load_manifest(const char *file, struct tier_manifest **m);

/*
 * One value of the manifest's effective configuration (tier_manifest_emit):
 * key @key of top-level section @section ("dram", "capacity"), its comment
 * dropped, into @buf.  0, or -ENOENT when the section or key is absent,
 * -ENOMEM / -EIO.
 */
int manifest_value(const struct tier_manifest *m, const char *section, const char *key,
		   char *buf, size_t len);

/* The number of NVMe paths of the manifest (0: DRAM is the home). */
int manifest_nvme_paths(const struct tier_manifest *m, unsigned *out);

/* The median of @n values (n >= 1); @v is left as it was. */
double median(const double *v, size_t n);
double min_of(const double *v, size_t n);

/* dtypes on the command line: -1 stands for "none" (no copy-out). */
const char *dtype_name(int d);
size_t dtype_size(int d);
/* "fp32", "bf16", "fp16" (and "none" when @allow_none) -> 0, or -EINVAL. */
int parse_dtype(const char *s, bool allow_none, int *out);

/* Random data for the Adam runs. */
enum adam_fill { FILL_PARAM, FILL_GRAD, FILL_EXP_AVG, FILL_EXP_AVG_SQ };

/* Writes every element of @p (so the pages are faulted in before timing). */
void adam_fill(void *p, size_t n, int dtype, enum adam_fill what, uint64_t seed);

/* 2 MiB-aligned, rounded up to 2 MiB, huge pages asked for; NULL on failure. */
void *adam_alloc(size_t bytes);

/* ------------------------------------------------------ NVMe bandwidth */

/*
 * One object of @size bytes on a freshly opened NVMe tier of the manifest
 * (TIER_NVME_SCRATCH: backing files this run creates are removed), written
 * then read in requests of @bs bytes with @qd in flight, from registered
 * buffers holding data that does not compress, @passes times.  @verify then writes and
 * reads back every block with its offset stamped in.  Messages start with
 * @who ("tier-bench io").
 */
#define BENCH_IO_MAX_PASSES 8

struct bench_io_opts {
	uint64_t size, bs, qd;
	bool verify;
	const char *who;
	/* write-then-read passes over the object (0 is 1); the later ones
	 * overwrite blocks already written, as a store's write-backs do */
	unsigned passes;
	/* in (0, 1): after them, as many mixed passes, reading this share of
	 * the object's blocks (to a block, spread evenly) while writing the
	 * others, both streams moving through the object together and in
	 * flight together in that proportion (the traffic of an optimizer
	 * step: fills ahead of the update, write-backs just behind it) */
	double mix_read;
};

struct bench_io_result {
	double write_s, read_s;       /* the fastest pass of each */
	/* room for two measurements' passes (tier-bench step merges them) */
	double write_pass_s[2 * BENCH_IO_MAX_PASSES], read_pass_s[2 * BENCH_IO_MAX_PASSES];
	unsigned passes;
	/* with mix_read: the fastest mixed pass, each pass, and the bytes of
	 * the object each pass read (the rest, size - this, it wrote) */
	double mixed_s, mixed_pass_s[BENCH_IO_MAX_PASSES];
	uint64_t mixed_read_bytes;
	struct tier_nvme_stats stats; /* after the passes */
};

/* 0, or 1 after a message on stderr. */
int bench_io(const struct tier_manifest *m, const struct bench_io_opts *o,
	     struct bench_io_result *res);

/* ------------------------------------------------------------ commands */

/* tier-bench step (bench_step.c): argv[0] is "step". */
int cmd_step(int argc, char **argv);

#endif /* TIER_BENCH_H */
