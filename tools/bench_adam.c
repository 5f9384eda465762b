/*
 * bench_adam.c - `tier-bench adam`: the CPU Adam/AdamW update
 * (tier_adam_step) on random data, timed against a roofline kernel that
 * moves exactly the same bytes (tier_adam_roofline), runs alternating;
 * with --gpu the CUDA update (tier_adam_step_gpu) against its own
 * same-traffic kernel (tier_adam_roofline_gpu) in device memory.
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"

struct adam_opts {
	uint64_t numel, threads, runs;
	int moments, grads; /* enum tier_dtype */
	int copy_out;       /* BENCH_NO_DTYPE: none, else an enum tier_dtype */
	int rounding;       /* enum tier_rounding: bf16 moments and copy */
	bool json, gpu;
	uint64_t device;    /* --gpu: the CUDA device */
};

/*
 * The roofline adds the gradient to both moments, which leaves about half
 * of exp_avg_sq negative, and the step's square root of a negative number
 * is not the work of a real step (and may take another time).  So after
 * each roofline pass, untimed, exp_avg_sq gets its absolute value back.
 */
static void adam_fix_sq(void *v, size_t n, int dtype)
{
	if (dtype == TIER_Q8) /* the roofline flips a bit of the codes: still codes */
		return;
	if (dtype == TIER_FP32) {
		uint32_t *u = v;

		for (size_t i = 0; i < n; i++)
			u[i] &= 0x7fffffffu;
	} else {
		uint16_t *u = v;

		for (size_t i = 0; i < n; i++)
			u[i] &= 0x7fffu;
	}
}

/* Parameters that are not finite (the data must stay realistic). */
static size_t adam_nonfinite(const float *p, size_t n)
{
	size_t bad = 0;

	for (size_t i = 0; i < n; i++) {
		uint32_t u;

		memcpy(&u, &p[i], 4);
		bad += (u & 0x7f800000u) == 0x7f800000u;
	}
	return bad;
}

static void adam_usage(FILE *f)
{
	fprintf(f, "usage: tier-bench adam [--numel N] [--threads T] [--moments fp32|bf16|q8]\n"
		   "                       [--grads fp32|bf16|fp16] [--copy-out none|bf16|fp16|fp32]\n"
		   "                       [--rounding nearest|stochastic] [--runs R] [--json]\n"
		   "                       [--gpu [--device N]]\n"
		   "  --numel     elements updated (default 64Mi = 67108864; K/M/G suffixes are binary)\n"
		   "  --threads   threads of the kernel pool, the caller included (default 2)\n"
		   "  --moments   storage of exp_avg and exp_avg_sq (default fp32; q8: a byte\n"
		   "              per element and a float scale per 256)\n"
		   "  --grads     storage of the gradient (default fp32)\n"
		   "  --copy-out  the copy of the updated parameters written too (default none)\n"
		   "  --rounding  how bf16 moments and a bf16 copy are rounded (default stochastic,\n"
		   "              the optimizer's default)\n"
		   "  --runs      timed runs of the step and of the roofline, alternating (default 7)\n"
		   "  --gpu       the CUDA update on device --device (default 0), in device memory,\n"
		   "              against its same-traffic kernel (tier_adam_roofline_gpu); --threads\n"
		   "              is not used\n"
		   "Times tier_adam_step (AdamW: lr 1e-3, betas 0.9/0.999, eps 1e-8, wd 0.01) against\n"
		   "tier_adam_roofline, which moves the same bytes with trivial arithmetic, and\n"
		   "reports medians; roofline_frac = roofline time / step time.\n");
}

/* A bad command line: says what, prints the usage. */
static const struct bench_cmd adam_cmd = { "tier-bench adam", adam_usage, adam_usage };

static void adam_print_times(const char *key, const double *v, size_t n)
{
	printf("\"%s\": [", key);
	for (size_t i = 0; i < n; i++)
		printf("%s%.6f", i ? ", " : "", v[i]);
	printf("]");
}

/*
 * Warm-up (one step, one roofline pass: threads started, code and TLBs
 * hot), then o->runs runs of each, alternating, into @step_s and @roof_s.
 * 0, or 1 after a message.
 */
static int adam_time(const struct adam_opts *o, struct tier_pool *pool,
		     const struct tier_adam_tensors *t, double *step_s, double *roof_s)
{
	struct tier_adam_params hp;
	uint64_t t0;
	int rc;

	tier_adam_params_init(&hp);
	hp.rounding = hp.out_rounding = o->rounding;
	hp.seed = 1;
	if (tier_adam_step(pool, &hp, t)) {
		fprintf(stderr, "tier-bench adam: step: %s\n", tier_last_error());
		return 1;
	}
	if (tier_adam_roofline(pool, t)) {
		fprintf(stderr, "tier-bench adam: roofline: %s\n", tier_last_error());
		return 1;
	}
	adam_fix_sq(t->exp_avg_sq, t->n, o->moments);
	for (size_t r = 0; r < o->runs; r++) {
		hp.step++;
		t0 = now_ns();
		rc = tier_adam_step(pool, &hp, t);
		step_s[r] = (double)(now_ns() - t0) * 1e-9;
		if (rc) {
			fprintf(stderr, "tier-bench adam: step: %s\n", tier_last_error());
			return 1;
		}
		t0 = now_ns();
		rc = tier_adam_roofline(pool, t);
		roof_s[r] = (double)(now_ns() - t0) * 1e-9;
		if (rc) {
			fprintf(stderr, "tier-bench adam: roofline: %s\n", tier_last_error());
			return 1;
		}
		adam_fix_sq(t->exp_avg_sq, t->n, o->moments);
	}
	return 0;
}

/* One launch of the step (@roof false) or the roofline, waited for. */
static int adam_gpu_one(int dev, const struct tier_adam_params *hp, const struct tier_adam_tensors *d,
			bool roof, double *secs)
{
	uint64_t t0 = now_ns();
	int rc = roof ? tier_adam_roofline_gpu(dev, d) : tier_adam_step_gpu(dev, hp, d);

	if (!rc)
		rc = tier_gpu_sync(dev);
	*secs = (double)(now_ns() - t0) * 1e-9;
	if (rc)
		fprintf(stderr, "tier-bench adam: --gpu: %s: %s\n", roof ? "roofline" : "step",
			tier_last_error());
	return rc;
}

/* adam_time on the device: warm-up, then o->runs of each, alternating.
 * The roofline leaves the arrays as they were: nothing to fix. */
static int adam_time_gpu(const struct adam_opts *o, const struct tier_adam_tensors *d,
			 double *step_s, double *roof_s)
{
	struct tier_adam_params hp;
	int dev = (int)o->device;
	double w;

	tier_adam_params_init(&hp);
	hp.rounding = hp.out_rounding = o->rounding;
	hp.seed = 1;
	if (adam_gpu_one(dev, &hp, d, false, &w) || adam_gpu_one(dev, &hp, d, true, &w))
		return 1;
	for (size_t r = 0; r < o->runs; r++) {
		hp.step++;
		if (adam_gpu_one(dev, &hp, d, false, &step_s[r]) ||
		    adam_gpu_one(dev, &hp, d, true, &roof_s[r]))
			return 1;
	}
	return 0;
}

static const char *rounding_name(int r)
{
	return r == TIER_ROUND_STOCHASTIC ? "stochastic" : "nearest";
}

static int adam_opt(void *ctx, int opt, const char *arg)
{
	struct adam_opts *o = ctx;

	if (opt != 'R')
		return EXIT_USAGE;
	if (!strcmp(arg, "nearest"))
		o->rounding = TIER_ROUND_NEAREST;
	else if (!strcmp(arg, "stochastic"))
		o->rounding = TIER_ROUND_STOCHASTIC;
	else {
		fprintf(stderr, "tier-bench adam: bad --rounding '%s' (nearest or stochastic)\n", arg);
		return EXIT_USAGE;
	}
	return 0;
}

/* The medians and rates of the runs, as text or one JSON object. */
static void adam_report(const struct adam_opts *o, const double *step_s, const double *roof_s,
			size_t nonfinite)
{
	size_t n = (size_t)o->numel, runs = (size_t)o->runs, ms = dtype_size(o->moments);
	size_t rd = 4 + 2 * ms + dtype_size(o->grads), wr = 4 + 2 * ms + dtype_size(o->copy_out);
	size_t bpe = rd + wr;
	char isa[32];
	double step_med = median(step_s, runs), roof_med = median(roof_s, runs);
	double gelem = (double)n / step_med * 1e-9;
	double step_gbps = (double)bpe * (double)n / step_med * 1e-9;
	double roof_gbps = (double)bpe * (double)n / roof_med * 1e-9;
	double frac = roof_med / step_med;

	if (o->gpu)
		snprintf(isa, sizeof(isa), "cuda:%" PRIu64, o->device);
	else
		snprintf(isa, sizeof(isa), "%s", tier_adam_isa());
	if (o->json) {
		printf("{\"isa\": \"%s\", \"gpu\": %s, \"threads\": %" PRIu64 ", \"numel\": %zu, \"moments\": \"%s\""
		       ", \"grads\": \"%s\", \"copy_out\": \"%s\", \"rounding\": \"%s\""
		       ", \"bytes_read_per_elem\": %zu"
		       ", \"bytes_written_per_elem\": %zu, \"bytes_per_elem\": %zu, \"nruns\": %zu"
		       ", \"step_s\": %.6f, \"step_min_s\": %.6f, \"gelem_per_s\": %.4f"
		       ", \"step_GBps\": %.3f, \"roofline_s\": %.6f, \"roofline_min_s\": %.6f"
		       ", \"roofline_GBps\": %.3f, \"roofline_frac\": %.4f, \"nonfinite_params\": %zu"
		       ", \"runs\": {",
		       isa, o->gpu ? "true" : "false", o->gpu ? 0 : o->threads, n, dtype_name(o->moments), dtype_name(o->grads),
		       dtype_name(o->copy_out), rounding_name(o->rounding), rd, wr, bpe, runs, step_med,
		       min_of(step_s, runs),
		       gelem, step_gbps, roof_med, min_of(roof_s, runs), roof_gbps, frac, nonfinite);
		adam_print_times("step_s", step_s, runs);
		printf(", ");
		adam_print_times("roofline_s", roof_s, runs);
		printf("}}\n");
		return;
	}
	if (o->gpu)
		printf("tier-bench adam: %zu elements on %s, moments %s, grads %s, copy-out %s,"
		       " rounding %s\n", n, isa, dtype_name(o->moments), dtype_name(o->grads),
		       dtype_name(o->copy_out), rounding_name(o->rounding));
	else
		printf("tier-bench adam: %zu elements, %" PRIu64 " thread(s), isa %s, moments %s,"
		       " grads %s, copy-out %s, rounding %s\n", n, o->threads, isa,
		       dtype_name(o->moments), dtype_name(o->grads), dtype_name(o->copy_out),
		       rounding_name(o->rounding));
	printf("  bytes per element: %zu read + %zu written = %zu\n", rd, wr, bpe);
	printf("  step      median %9.6f s  %7.3f Gelem/s  %7.3f GB/s\n", step_med, gelem,
	       step_gbps);
	printf("  roofline  median %9.6f s  %7.3f Gelem/s  %7.3f GB/s\n", roof_med,
	       (double)n / roof_med * 1e-9, roof_gbps);
	printf("  roofline_frac (roofline time / step time) %.4f\n", frac);
	printf("  %4s %12s %12s\n", "run", "step_s", "roofline_s");
	for (size_t r = 0; r < runs; r++)
		printf("  %4zu %12.6f %12.6f\n", r + 1, step_s[r], roof_s[r]);
}

static int adam_run(const struct adam_opts *o)
{
	size_t n = (size_t)o->numel, runs = (size_t)o->runs;
	struct tier_adam_tensors t = { 0 };
	struct tier_pool *pool = NULL;
	double *step_s = calloc(runs, sizeof(double)), *roof_s = calloc(runs, sizeof(double));
	size_t nonfinite;
	int rc, ret = 1;

	if (!step_s || !roof_s ||
	    adam_arrays(&t, n, (enum tier_dtype)o->moments, (enum tier_dtype)o->grads,
				     o->copy_out)) {
		fprintf(stderr, "tier-bench adam: out of memory for %zu elements (%zu bytes each)\n",
			n, 4 + 2 * dtype_size(o->moments) + dtype_size(o->grads) +
			dtype_size(o->copy_out));
		goto out;
	}
	if (o->gpu) {
		struct tier_adam_tensors d;

		if (adam_gpu_arrays((int)o->device, &t, &d))
			goto out;
		rc = adam_time_gpu(o, &d, step_s, roof_s);
		if (!rc && (rc = tier_gpu_copy(t.param, d.param, n * 4)))
			fprintf(stderr, "tier-bench adam: --gpu: %s\n", tier_last_error());
		adam_gpu_free(&d);
		if (rc)
			goto out;
	} else {
		rc = tier_pool_create((unsigned)o->threads, &pool);
		if (rc) {
			fprintf(stderr, "tier-bench adam: pool of %" PRIu64 " threads: %s\n",
				o->threads, tier_last_error()[0] ? tier_last_error() : tier_strerror(rc));
			pool = NULL;
			goto out;
		}
		if (adam_time(o, pool, &t, step_s, roof_s))
			goto out;
	}
	nonfinite = adam_nonfinite(t.param, n);
	if (nonfinite)
		fprintf(stderr, "tier-bench adam: warning: %zu of %zu parameters are not finite after"
			" the runs\n", nonfinite, n);
	adam_report(o, step_s, roof_s, nonfinite);
	ret = 0;
out:
	tier_pool_destroy(pool);
	adam_arrays_free(&t);
	free(step_s);
	free(roof_s);
	return ret;
}

int cmd_adam(int argc, char **argv)
{
	struct adam_opts o = {
		.numel = 64ull << 20, .threads = 2, .runs = 7,
		.moments = TIER_FP32, .grads = TIER_FP32, .copy_out = BENCH_NO_DTYPE,
		.rounding = TIER_ROUND_STOCHASTIC,
	};
	const struct bench_arg args[] = {
		BENCH_NUM('n', "numel", &o.numel, 1, 1ull << 40, "(1 to 2^40)"),
		BENCH_NUM('t', "threads", &o.threads, 1, 1024, "(1 to 1024)"),
		BENCH_DTYPE('m', "moments", &o.moments, BENCH_DT_FP32 | BENCH_DT_BF16 | BENCH_DT_Q8,
			    "(fp32, bf16 or q8)"),
		BENCH_DTYPE('g', "grads", &o.grads, BENCH_DT_FP32 | BENCH_DT_BF16 | BENCH_DT_FP16,
			    "(fp32, bf16 or fp16)"),
		BENCH_DTYPE('o', "copy-out", &o.copy_out,
			    BENCH_DT_NONE | BENCH_DT_FP32 | BENCH_DT_BF16 | BENCH_DT_FP16,
			    "(none, bf16, fp16 or fp32)"),
		BENCH_NUM('r', "runs", &o.runs, 1, 10000, "(1 to 10000)"),
		BENCH_FLAG('j', "json", &o.json),
		BENCH_OTHER('R', "rounding", required_argument),
		BENCH_FLAG('G', "gpu", &o.gpu),
		BENCH_NUM('d', "device", &o.device, 0, 1023, "(a CUDA device, 0 to 1023)"),
	};
	int ret = bench_options(&adam_cmd, argc, argv, args, sizeof(args) / sizeof(args[0]), adam_opt,
				&o);

	if (ret)
		return ret == BENCH_HELP ? 0 : ret;
	if (o.device && !o.gpu) {
		fprintf(stderr, "tier-bench adam: --device is for --gpu\n");
		adam_usage(stderr);
		return EXIT_USAGE;
	}
	return adam_run(&o);
}
