/*
 * bench_common.c - what the tier-bench subcommands share (bench.h): the
 * clock, the command line (sizes, counts, dtypes, usage errors), the
 * manifest, medians, and the arrays and random data of the Adam runs.
 */
#include <errno.h>
#include <getopt.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#include "bench.h"

uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* Parses "1GiB", "4096", "1M" (binary units) for the command line. */
int parse_bytes(const char *s, uint64_t *out)
{
	char *end;
	unsigned long long v = strtoull(s, &end, 10);
	uint64_t mult = 1;

	if (end == s)
		return -EINVAL;
	if (*end) {
		char u = (char)(*end | 0x20);

		mult = u == 'k' ? 1ull << 10 : u == 'm' ? 1ull << 20 : u == 'g' ? 1ull << 30 :
		       u == 't' ? 1ull << 40 : u == 'b' ? 1 : 0;
		if (!mult)
			return -EINVAL;
		end++;
		if (*end == 'i' || *end == 'I')
			end++;
		if (*end == 'B' || *end == 'b')
			end++;
		if (*end)
			return -EINVAL;
	}
	if (v == 0 || v > UINT64_MAX / mult)
		return -EINVAL;
	*out = v * mult;
	return 0;
}

int load_manifest(const char *file, struct tier_manifest **m)
{
	int rc = tier_manifest_resolve(file, m);

	if (rc)
		fprintf(stderr, "%s\n", tier_last_error());
	return rc;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

double median(const double *v, size_t n)
{
	double *s = malloc(n * sizeof(*s)), m;

	if (!s)
		return v[0];
	memcpy(s, v, n * sizeof(*s));
	qsort(s, n, sizeof(*s), cmp_double);
	m = n % 2 ? s[n / 2] : 0.5 * (s[n / 2 - 1] + s[n / 2]);
	free(s);
	return m;
}

double min_of(const double *v, size_t n)
{
	double m = v[0];

	for (size_t i = 1; i < n; i++)
		m = v[i] < m ? v[i] : m;
	return m;
}

/* ------------------------------------------------------ the command line */

int bench_bad_usage(const struct bench_cmd *cmd, const char *fmt, ...)
{
	va_list ap;

	fprintf(stderr, "%s: ", cmd->who);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fprintf(stderr, "\n");
	if (cmd->after_error)
		cmd->after_error(stderr);
	return EXIT_USAGE;
}

const char *dtype_name(int d)
{
	return d == BENCH_NO_DTYPE ? "none" : tier_dtype_name((enum tier_dtype)d);
}

size_t dtype_size(int d)
{
	return d == BENCH_NO_DTYPE ? 0 : tier_dtype_size((enum tier_dtype)d);
}

/* One of @dtypes (BENCH_DT_*) named @s: 0, or -EINVAL. */
static int parse_dtype(const char *s, unsigned dtypes, int *out)
{
	enum tier_dtype d;

	if (strcmp(s, "none") == 0 && (dtypes & BENCH_DT_NONE)) {
		*out = BENCH_NO_DTYPE;
		return 0;
	}
	if (tier_dtype_parse(s, &d) || !(dtypes & (1u << d)))
		return -EINVAL;
	*out = (int)d;
	return 0;
}

/* @arg into the option @a: 0, or an exit code after a message. */
static int bench_arg_parse(const struct bench_cmd *cmd, const struct bench_arg *a, const char *arg,
			   bench_opt_fn fn, void *ctx)
{
	int bad;

	if (a->flag) {
		*a->flag = true;
		return 0;
	}
	if (a->num)
		bad = parse_bytes(arg, a->num) || *a->num < a->min || *a->num > a->max;
	else if (a->dtype)
		bad = parse_dtype(arg, a->dtypes, a->dtype) != 0;
	else
		return fn(ctx, a->opt, arg);
	if (bad)
		return bench_bad_usage(cmd, "bad --%s '%s'%s%s", a->name, arg, a->range ? " " : "",
				       a->range ? a->range : "");
	return 0;
}

int bench_options(const struct bench_cmd *cmd, int argc, char **argv,
		  const struct bench_arg *args, size_t nargs, bench_opt_fn fn, void *ctx)
{
	struct option *longopts = calloc(nargs + 2, sizeof(*longopts));
	int c, ret = 0;

	if (!longopts) {
		fprintf(stderr, "%s: out of memory\n", cmd->who);
		return 1;
	}
	for (size_t i = 0; i < nargs; i++)
		longopts[i] = (struct option){ args[i].name, args[i].has_arg, NULL, args[i].opt };
	longopts[nargs] = (struct option){ "help", no_argument, NULL, 'h' };
	while (!ret && (c = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
		const struct bench_arg *a = NULL;

		for (size_t i = 0; i < nargs && !a; i++)
			a = args[i].opt == c ? &args[i] : NULL;
		if (c == 'h') {
			cmd->usage(stdout);
			ret = BENCH_HELP;
		} else if (a) {
			ret = bench_arg_parse(cmd, a, optarg, fn, ctx);
		} else {
			/* getopt_long said what was wrong */
			(cmd->after_error ? cmd->after_error : cmd->usage)(stderr);
			ret = EXIT_USAGE;
		}
	}
	free(longopts);
	if (!ret && optind < argc)
		ret = bench_bad_usage(cmd, "unexpected argument '%s'", argv[optind]);
	return ret;
}

/* ----------------------------------------------------- the Adam arrays */

/* 2 MiB-aligned, rounded up to 2 MiB, huge pages asked for; NULL on failure. */
void *adam_alloc(size_t bytes)
{
	size_t huge = 2u << 20, len = (bytes + huge - 1) / huge * huge;
	void *p;

	if (posix_memalign(&p, huge, len ? len : huge) != 0)
		return NULL;
	madvise(p, len ? len : huge, MADV_HUGEPAGE);
	return p;
}

/* fp32 -> bf16, round to nearest even (the data are finite). */
static uint16_t adam_to_bf16(float f)
{
	uint32_t x;

	memcpy(&x, &f, 4);
	x += 0x7fffu + ((x >> 16) & 1u);
	return (uint16_t)(x >> 16);
}

/* fp32 -> fp16, round to nearest even, subnormals included. */
static uint16_t adam_to_fp16(float f)
{
	uint32_t x, sign;
	uint16_t o;

	memcpy(&x, &f, 4);
	sign = (x >> 16) & 0x8000u;
	x &= 0x7fffffffu;
	if (x >= 0x47800000u) {         /* too large: inf (nan stays nan) */
		o = x > 0x7f800000u ? 0x7e00u : 0x7c00u;
	} else if (x < 0x38800000u) {   /* fp16 subnormal or zero */
		float a;
		uint32_t u;

		memcpy(&a, &x, 4);
		a += 0.5f;              /* the sum's low bits are the rounded subnormal */
		memcpy(&u, &a, 4);
		o = (uint16_t)(u - 0x3f000000u);
	} else {
		x += ((uint32_t)(15 - 127) << 23) + 0xfffu + ((x >> 13) & 1u);
		o = (uint16_t)(x >> 13);
	}
	return (uint16_t)(o | sign);
}

/* xorshift64*: fast enough to fill a GiB in well under a second. */
static uint64_t adam_rand(uint64_t *s)
{
	*s ^= *s >> 12;
	*s ^= *s << 25;
	*s ^= *s >> 27;
	return *s * 0x2545f4914f6cdd1dull;
}

/* About N(0,1): Irwin-Hall of four 16-bit uniforms, rescaled to unit variance. */
static float adam_gauss(uint64_t *s)
{
	uint64_t r = adam_rand(s);
	unsigned sum = (unsigned)(r & 0xffff) + (unsigned)(r >> 16 & 0xffff) +
		       (unsigned)(r >> 32 & 0xffff) + (unsigned)(r >> 48);

	return ((float)sum * (1.0f / 65536.0f) - 2.0f) * 1.7320508f;
}

/* Writes every element of @p (so the pages are faulted in before timing). */
void adam_fill(void *p, size_t n, int dtype, enum adam_fill what, uint64_t seed)
{
	uint64_t s = seed * 0x9e3779b97f4a7c15ull + 0x632be59bd9b4e019ull;

	if (dtype == TIER_Q8) {
		/* codes of the upper half of each range (the block scales are
		 * adam_arrays()'): m sign and magnitude 80..120, v 150..248 */
		for (size_t i = 0; i < n; i++) {
			uint64_t r = adam_rand(&s);

			((unsigned char *)p)[i] = (unsigned char)(what == FILL_EXP_AVG
				? (r % 41 + 80) | (r >> 32 & 1) << 7 : r % 99 + 150);
		}
		return;
	}
	for (size_t i = 0; i < n; i++) {
		float g = adam_gauss(&s), v;

		switch (what) {
		case FILL_PARAM:
			v = g;
			break;
		case FILL_GRAD:
			v = g * 1e-3f;
			break;
		case FILL_EXP_AVG:
			v = g * 1e-4f;
			break;
		default:
			v = (g * g + 0.01f) * 1e-6f;
			break;
		}
		if (dtype == TIER_FP32)
			((float *)p)[i] = v;
		else if (dtype == TIER_BF16)
			((uint16_t *)p)[i] = adam_to_bf16(v);
		else
			((uint16_t *)p)[i] = adam_to_fp16(v);
	}
}

int adam_arrays(struct tier_adam_tensors *t, size_t n, enum tier_dtype moments,
		enum tier_dtype grads, int copy_out)
{
	size_t ms = tier_dtype_size(moments), gs = tier_dtype_size(grads), os = dtype_size(copy_out);
	size_t nb = (n + TIER_Q8_BLOCK - 1) / TIER_Q8_BLOCK;
	void *grad;

	*t = (struct tier_adam_tensors){
		.n = n,
		.moment_dtype = moments,
		.grad_dtype = grads,
		.out_dtype = copy_out == BENCH_NO_DTYPE ? TIER_FP32 : (enum tier_dtype)copy_out,
	};
	t->param = adam_alloc(n * 4);
	t->exp_avg = adam_alloc(n * ms);
	t->exp_avg_sq = adam_alloc(n * ms);
	t->grad = grad = adam_alloc(n * gs);
	if (os)
		t->param_out = adam_alloc(n * os);
	if (moments == TIER_Q8) {
		t->exp_avg_scale = adam_alloc(nb * 4);
		t->exp_avg_sq_scale = adam_alloc(nb * 4);
	}
	if (!t->param || !t->exp_avg || !t->exp_avg_sq || !grad || (os && !t->param_out) ||
	    (moments == TIER_Q8 && (!t->exp_avg_scale || !t->exp_avg_sq_scale))) {
		adam_arrays_free(t);
		return -ENOMEM;
	}
	adam_fill(t->param, n, TIER_FP32, FILL_PARAM, 1);
	adam_fill(grad, n, (int)grads, FILL_GRAD, 2);
	if (moments == TIER_Q8) {
		/* q8: the fp32 values encoded (codes and block scales) */
		float *x = adam_alloc(n * 4);

		if (!x) {
			adam_arrays_free(t);
			return -ENOMEM;
		}
		adam_fill(x, n, TIER_FP32, FILL_EXP_AVG, 3);
		tier_q8_encode(x, n, TIER_Q8_EXP_AVG, t->exp_avg, t->exp_avg_scale);
		adam_fill(x, n, TIER_FP32, FILL_EXP_AVG_SQ, 4);
		tier_q8_encode(x, n, TIER_Q8_EXP_AVG_SQ, t->exp_avg_sq, t->exp_avg_sq_scale);
		free(x);
	} else {
		adam_fill(t->exp_avg, n, (int)moments, FILL_EXP_AVG, 3);
		adam_fill(t->exp_avg_sq, n, (int)moments, FILL_EXP_AVG_SQ, 4);
	}
	if (os)
		memset(t->param_out, 0, n * os);
	return 0;
}

void adam_arrays_free(struct tier_adam_tensors *t)
{
	free(t->param);
	free(t->exp_avg);
	free(t->exp_avg_sq);
	free((void *)t->grad);
	free(t->param_out);
	free(t->exp_avg_scale);
	free(t->exp_avg_sq_scale);
	t->param = NULL;
	t->exp_avg = t->exp_avg_sq = t->param_out = NULL;
	t->exp_avg_scale = t->exp_avg_sq_scale = NULL;
	t->grad = NULL;
}

/* The device copy of @h's arrays (tier_gpu_alloc), or a message and 1. */
int adam_gpu_arrays(int dev, const struct tier_adam_tensors *h, struct tier_adam_tensors *d)
{
	size_t n = h->n, ms = dtype_size(h->moment_dtype), gs = dtype_size(h->grad_dtype);
	size_t os = h->param_out ? dtype_size(h->out_dtype) : 0;
	size_t nb = (n + TIER_Q8_BLOCK - 1) / TIER_Q8_BLOCK;
	const void *src[7] = { h->param, h->exp_avg, h->exp_avg_sq, h->grad, h->param_out,
			       h->exp_avg_scale, h->exp_avg_sq_scale };
	size_t len[7] = { n * 4, n * ms, n * ms, n * gs, n * os, nb * 4, nb * 4 };
	void *dst[7] = { 0 };

	*d = *h;
	for (int k = 0; k < 7; k++) {
		int rc;

		if (!src[k])
			continue;
		if ((rc = tier_gpu_alloc(dev, TIER_GPU_DEVICE, len[k], &dst[k])) ||
		    (rc = tier_gpu_copy(dst[k], src[k], len[k]))) {
			fprintf(stderr, "tier-bench: GPU %d: %s\n", dev, tier_last_error());
			for (int j = 0; j <= k; j++)
				tier_gpu_free(TIER_GPU_DEVICE, dst[j]);
			return 1;
		}
	}
	d->param = dst[0];
	d->exp_avg = dst[1];
	d->exp_avg_sq = dst[2];
	d->grad = dst[3];
	d->param_out = dst[4];
	d->exp_avg_scale = dst[5];
	d->exp_avg_sq_scale = dst[6];
	return 0;
}

void adam_gpu_free(struct tier_adam_tensors *d)
{
	tier_gpu_free(TIER_GPU_DEVICE, d->param);
	tier_gpu_free(TIER_GPU_DEVICE, d->exp_avg);
	tier_gpu_free(TIER_GPU_DEVICE, d->exp_avg_sq);
	tier_gpu_free(TIER_GPU_DEVICE, (void *)d->grad);
	tier_gpu_free(TIER_GPU_DEVICE, d->param_out);
	tier_gpu_free(TIER_GPU_DEVICE, d->exp_avg_scale);
	tier_gpu_free(TIER_GPU_DEVICE, d->exp_avg_sq_scale);
}
