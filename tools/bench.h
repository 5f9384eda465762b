/*
 * bench.h - what the tier-bench subcommands share (tools/bench_common.c):
 * the clock, command-line parsing of sizes, counts and dtypes, usage
 * errors, the manifest, medians, the arrays of the Adam runs; and the NVMe
 * bandwidth measurement of `tier-bench io` (tools/bench_io.c), which
 * `tier-bench step` runs again for its bound.  Each subcommand has its own
 * file: bench_io.c, bench_cache.c, bench_adam.c, bench_step*.c.
 * Tools see only the public headers (tierstore/toolkit.h); this header
 * adds nothing to them.
 */
#ifndef TIER_BENCH_H
#define TIER_BENCH_H

#include <getopt.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "tierstore/toolkit.h"

enum { EXIT_USAGE = 2 };

#define BENCH_STR_(x) #x
#define BENCH_STR(x) BENCH_STR_(x)

/* CLOCK_MONOTONIC in nanoseconds. */
uint64_t now_ns(void);

/* Parses "1GiB", "4096", "1M" (binary units) for the command line.  0 is
 * refused.  0 or -EINVAL. */
int parse_bytes(const char *s, uint64_t *out);

/* tier_manifest_resolve(); on failure prints tier_last_error() to stderr. */
int load_manifest(const char *file, struct tier_manifest **m);

/* The median of @n values (n >= 1); @v is left as it was. */
double median(const double *v, size_t n);
double min_of(const double *v, size_t n);

/* ------------------------------------------------------ the command line */

/* A subcommand, for its messages and its help. */
struct bench_cmd {
	const char *who;               /* "tier-bench io" */
	void (*usage)(FILE *f);        /* the options: --help, an unknown option */
	/* after a usage error's message, and in place of usage after an
	 * unknown option (NULL: nothing, and usage) */
	void (*after_error)(FILE *f);
};

/* "WHO: MESSAGE" on stderr, then cmd->after_error(stderr); returns
 * EXIT_USAGE. */
__attribute__((format(printf, 2, 3))) int bench_bad_usage(const struct bench_cmd *cmd,
							  const char *fmt, ...);

/* dtypes on the command line (tier_dtype_*), BENCH_NO_DTYPE standing for
 * "none" (no copy-out): its name is "none" and its size 0. */
#define BENCH_NO_DTYPE (-1)
const char *dtype_name(int d);
size_t dtype_size(int d);

/* Which dtypes an option takes. */
enum {
	BENCH_DT_FP32 = 1u << TIER_FP32,
	BENCH_DT_BF16 = 1u << TIER_BF16,
	BENCH_DT_FP16 = 1u << TIER_FP16,
	BENCH_DT_Q8 = 1u << TIER_Q8,   /* moments only */
	BENCH_DT_NONE = 1u << 8,       /* "none": BENCH_NO_DTYPE */
};

/*
 * An option of a subcommand.  A whole number (parse_bytes: K/M/G suffixes
 * are binary) within [min, max], a dtype of those in @dtypes (a bad value:
 * "bad --NAME 'VALUE' RANGE"), or a flag are parsed by bench_options; any
 * other (BENCH_OTHER) by the subcommand's bench_opt_fn.
 */
struct bench_arg {
	const char *name;   /* "params" for --params */
	int opt;            /* getopt_long's value for it; not 'h' (--help) */
	int has_arg;        /* no_argument, required_argument */
	const char *range;  /* said after a bad value: "(1 to 1024)"; NULL: nothing */
	uint64_t *num;
	uint64_t min, max;
	int *dtype;
	unsigned dtypes;    /* BENCH_DT_* */
	bool *flag;         /* set by the option */
};
#define BENCH_NUM(opt, name, out, min, max, range) \
	{ (name), (opt), required_argument, (range), (out), (min), (max), NULL, 0, NULL }
#define BENCH_DTYPE(opt, name, out, dtypes, range) \
	{ (name), (opt), required_argument, (range), NULL, 0, 0, (out), (dtypes), NULL }
#define BENCH_FLAG(opt, name, out) \
	{ (name), (opt), no_argument, NULL, NULL, 0, 0, NULL, 0, (out) }
#define BENCH_OTHER(opt, name, has_arg) \
	{ (name), (opt), (has_arg), NULL, NULL, 0, 0, NULL, 0, NULL }

/* A subcommand's BENCH_OTHER options: 0, or an exit code after a message. */
typedef int (*bench_opt_fn)(void *ctx, int opt, const char *arg);

/* --help printed: the command exits 0. */
#define BENCH_HELP (-1)

/*
 * getopt_long over @argv (argv[0] the subcommand) with the @nargs options
 * of @args and --help: BENCH_OTHER ones handed to @fn with @ctx.  Refuses
 * arguments left over.  0 when the command is to run, BENCH_HELP after
 * --help, or an exit code after a message (EXIT_USAGE, or 1 out of memory).
 */
int bench_options(const struct bench_cmd *cmd, int argc, char **argv,
		  const struct bench_arg *args, size_t nargs, bench_opt_fn fn, void *ctx);

/* ----------------------------------------------------- the Adam arrays */

/*
 * The arrays of an update of @n elements (tier_adam_step's tensors): fp32
 * parameters, moments in @moments, the gradient in @grads, and the copy-out
 * in @copy_out (BENCH_NO_DTYPE: none), each 2 MiB-aligned with huge pages
 * asked for, filled with random data of realistic magnitude (every page
 * faulted in before timing; the copy-out zeroed).  0, or -ENOMEM with
 * nothing left allocated.
 */
int adam_arrays(struct tier_adam_tensors *t, size_t n, enum tier_dtype moments,
		enum tier_dtype grads, int copy_out);
void adam_arrays_free(struct tier_adam_tensors *t);
/* Device copies of @h's arrays on GPU @dev (tier_gpu_alloc, tier_gpu_copy)
 * into @d; 0, or 1 after a message (nothing left allocated). */
int adam_gpu_arrays(int dev, const struct tier_adam_tensors *h, struct tier_adam_tensors *d);
void adam_gpu_free(struct tier_adam_tensors *d);

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

/* The subcommands; argv[0] is the subcommand's name.  The exit code. */
int cmd_io(int argc, char **argv);      /* bench_io.c */
int cmd_cache(int argc, char **argv);   /* bench_cache.c */
int cmd_adam(int argc, char **argv);    /* bench_adam.c */
int cmd_step(int argc, char **argv);    /* bench_step.c */

#endif /* TIER_BENCH_H */
