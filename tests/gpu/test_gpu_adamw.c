/*
 * test_gpu_adamw.c - the CUDA AdamW update and gradient check
 * (kernels/adamw_cuda.h) against the CPU kernels, on a machine with a GPU.
 *
 * Covers:
 *  - adamw_cuda_step(): every dtype combination (moments fp32/bf16 x
 *    gradients fp32/bf16/fp16 x parameter copy none/fp32/bf16/fp16), with
 *    AdamW and with Adam (L2) hyperparameters, over chunks of ragged sizes
 *    (0, 1, 15, 16, 17, 4099, 100000) in one call, one chunk without a copy
 *    among chunks with one, with every array vector-aligned, every array
 *    one element off, and the gradient alone one element off: parameters,
 *    moments and copies equal the scalar CPU kernel's (adamw_step_isa
 *    ADAMW_SCALAR) bit for bit.  The data include parameters that overflow
 *    fp16 and ones that are fp16 subnormals, zero and subnormal gradients;
 *  - more chunks than one launch takes (150 of random sizes), on a stream
 *    of our own and on the default stream;
 *  - adamw_cuda_grad_check(): fp32, bf16 and fp16 over ragged chunks
 *    (across the tile boundary too), aligned and misaligned, and 150
 *    chunks: the sum equals tier_grad_check()'s over the chunks in order
 *    bit for bit (and so within 1e-12 relative), the flag too; an inf, then
 *    a nan, in one chunk sets the flag on both; no chunk gives 0;
 *  - q8 moments (codes and block scales): the same combinations and
 *    chunks (every index0 a multiple of the block, the last chunk across
 *    2^32), codes and scales equal the scalar CPU kernel's bit for bit;
 *  - argument errors: -EINVAL with a detail, before any CUDA call (q8 as a
 *    gradient or output dtype, NULL scales, index0 off the block).
 * Without a CUDA build or a device the program exits 77 (SKIP).
 */
#include "config.h"

#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include "t_helpers.h"
#include "tiers/gpu.h"

#if TIER_HAVE_CUDA

#include <cuda_runtime_api.h>
#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "kernels/adam_math.h"
#include "kernels/adamw.h"
#include "kernels/adamw_cuda.h"
#include "tierstore/toolkit.h"

#define OUT_NONE (-1)
#define MANY 150

#define CU(call)                                                                    \
	do {                                                                        \
		cudaError_t cu_e_ = (call);                                         \
		ck_assert_msg(cu_e_ == cudaSuccess, "%s: %s", #call,                \
			      cudaGetErrorString(cu_e_));                           \
	} while (0)

static const size_t k_step_sizes[] = { 0, 1, 15, 16, 17, 4099, 100000 };
static const size_t k_gc_sizes[] = { 0, 1, 15, 16, 17, 4099, 100000, 16384, 16385, 40000 };
static const char *const k_dt_names[] = { "fp32", "bf16", "fp16" };

/* ------------------------------------------------------------- helpers */

/* The program's random stream (t_rnd_next). */
static uint64_t g_rng = 0x9e3779b97f4a7c15ull;

static float urand(float lo, float hi)
{
	return lo + (hi - lo) * ((float)(t_rnd_next(&g_rng) >> 40) * 0x1p-24f);
}

static void put(int dt, void *base, size_t i, float x)
{
	uint16_t h;

	if (dt == TIER_FP32) {
		memcpy((char *)base + i * 4, &x, 4);
		return;
	}
	h = dt == TIER_BF16 ? f32_to_bf16(x) : f32_to_f16(x);
	memcpy((char *)base + i * 2, &h, 2);
}

static void *xmalloc(size_t bytes)
{
	void *p = malloc(bytes ? bytes : 1);

	ck_assert_ptr_nonnull(p);
	return p;
}

static void *xdup(const void *src, size_t bytes)
{
	return memcpy(xmalloc(bytes), src, bytes);
}

/* Device memory: one allocation per test, handed out 256-byte aligned. */
struct arena {
	char *base;
	size_t size, used;
};

static void arena_init(struct arena *a, size_t size)
{
	void *p = NULL;

	CU(cudaMalloc(&p, size));
	a->base = p;
	a->size = size;
	a->used = 0;
}

static void arena_free(struct arena *a)
{
	CU(cudaFree(a->base));
}

/* @bytes of device memory, @skew bytes past a 256-byte boundary, holding
 * a copy of @src (if given). */
static void *dev_copy(struct arena *a, const void *src, size_t bytes, size_t skew)
{
	size_t off = (a->used + 255) & ~(size_t)255;
	char *d;

	ck_assert_msg(off + skew + bytes <= a->size, "test arena too small");
	a->used = off + skew + bytes;
	d = a->base + off + skew;
	if (src && bytes)
		CU(cudaMemcpy(d, src, bytes, cudaMemcpyHostToDevice));
	return d;
}

static void from_dev(void *dst, const void *src, size_t bytes)
{
	if (bytes)
		CU(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToHost));
}

/* Reports the first differing element of two arrays of @n elements of @esz bytes. */
static void same_bits(const void *gpu, const void *cpu, size_t n, size_t esz, const char *what,
		      size_t chunk, const char *array)
{
	if (memcmp(gpu, cpu, n * esz) == 0)
		return;
	for (size_t i = 0; i < n; i++) {
		uint32_t g = 0, c = 0;

		memcpy(&g, (const char *)gpu + i * esz, esz);
		memcpy(&c, (const char *)cpu + i * esz, esz);
		ck_assert_msg(g == c, "%s: chunk %zu (n %zu) %s[%zu]: GPU %#x, CPU %#x", what, chunk,
			      n, array, i, g, c);
	}
}

/* --------------------------------------------------------------- update */

struct hchunk {
	size_t n;
	float *p;
	void *m, *v, *g, *o;
	float *sm, *sv; /* q8: the block scales */
};

static size_t q8_blocks(size_t n)
{
	return (n + TIER_Q8_BLOCK - 1) / TIER_Q8_BLOCK;
}

static void fill_chunk(struct hchunk *h, size_t n, int md, int gd, int od)
{
	h->n = n;
	h->p = xmalloc(n * 4);
	h->m = xmalloc(n * tier_dtype_size((enum tier_dtype)md));
	h->v = xmalloc(n * tier_dtype_size((enum tier_dtype)md));
	h->g = xmalloc(n * tier_dtype_size((enum tier_dtype)gd));
	h->o = od == OUT_NONE ? NULL : xmalloc(n * tier_dtype_size((enum tier_dtype)od));
	for (size_t i = 0; i < n; i++) {
		float p = urand(-1.0f, 1.0f), g = urand(-2.0f, 2.0f);

		if (i % 97 == 5)
			p = i & 1 ? 7.0e4f : -65519.0f;       /* fp16 overflow, and the rounding edge */
		else if (i % 101 == 7)
			p = urand(-1.0e-6f, 1.0e-6f);         /* fp16 subnormal */
		else if (i % 89 == 3)
			p = 0.0f;
		if (i % 83 == 2)
			g = 0.0f;
		else if (i % 79 == 4)
			g = 1.0e-40f;                         /* fp32 subnormal */
		h->p[i] = p;
		if (md == TIER_Q8) {
			((unsigned char *)h->m)[i] = (unsigned char)(t_rnd_next(&g_rng) >> 56);
			((unsigned char *)h->v)[i] = (unsigned char)(t_rnd_next(&g_rng) >> 56);
		} else {
			put(md, h->m, i, urand(-0.1f, 0.1f));
			put(md, h->v, i, i % 71 == 1 ? 0.0f : urand(0.0f, 0.01f));
		}
		put(gd, h->g, i, g);
		if (h->o)
			put(od, h->o, i, 0.0f);
	}
	h->sm = h->sv = NULL;
	if (md == TIER_Q8) {
		h->sm = xmalloc(q8_blocks(n) * 4);
		h->sv = xmalloc(q8_blocks(n) * 4);
		for (size_t b = 0; b < q8_blocks(n); b++) {
			h->sm[b] = b % 13 == 3 ? 0.0f : urand(1e-6f, 0.1f);
			h->sv[b] = b % 17 == 5 ? 0.0f : urand(1e-10f, 0.01f);
		}
	}
}

static void free_chunk(struct hchunk *h)
{
	free(h->p);
	free(h->m);
	free(h->v);
	free(h->g);
	free(h->o);
	free(h->sm);
	free(h->sv);
}

/*
 * One call of adamw_cuda_step over chunks of @sizes against the scalar CPU
 * kernel.  @skew: 0 all arrays vector-aligned, 1 all one element off, 2 the
 * gradient alone one element off.  Chunk 2 has no copy when @od is one.
 */
static void run_step(struct arena *ar, const struct tier_adam_params *hp, int md, int gd, int od,
		     const size_t *sizes, size_t nch, int skew, cudaStream_t st, const char *what)
{
	struct hchunk *h = xmalloc(nch * sizeof(*h)), *ref = xmalloc(nch * sizeof(*ref));
	struct adamw_chunk *dc = xmalloc(nch * sizeof(*dc));
	size_t msz = tier_dtype_size((enum tier_dtype)md), gsz = tier_dtype_size((enum tier_dtype)gd);
	size_t osz = od == OUT_NONE ? 4 : tier_dtype_size((enum tier_dtype)od);
	struct adam_consts c;
	int rc;

	ar->used = 0;
	for (size_t k = 0; k < nch; k++) {
		size_t n = sizes[k];

		fill_chunk(&h[k], n, md, gd, od);
		if (od != OUT_NONE && k == 2) {
			free(h[k].o);
			h[k].o = NULL;
		}
		ref[k] = h[k];
		ref[k].p = xdup(h[k].p, n * 4);
		ref[k].m = xdup(h[k].m, n * msz);
		ref[k].v = xdup(h[k].v, n * msz);
		ref[k].g = xdup(h[k].g, n * gsz);
		ref[k].o = h[k].o ? xdup(h[k].o, n * osz) : NULL;
		ref[k].sm = h[k].sm ? xdup(h[k].sm, q8_blocks(n) * 4) : NULL;
		ref[k].sv = h[k].sv ? xdup(h[k].sv, q8_blocks(n) * 4) : NULL;
		dc[k].n = n;
		dc[k].param = dev_copy(ar, h[k].p, n * 4, skew == 1 ? 4 : 0);
		dc[k].exp_avg = dev_copy(ar, h[k].m, n * msz, skew == 1 ? msz : 0);
		dc[k].exp_avg_sq = dev_copy(ar, h[k].v, n * msz, skew == 1 ? msz : 0);
		dc[k].grad = dev_copy(ar, h[k].g, n * gsz, skew ? gsz : 0);
		dc[k].param_out = h[k].o ? dev_copy(ar, h[k].o, n * osz, skew == 1 ? osz : 0) : NULL;
		/* stochastic rounding's counter: chunk 1 crosses 2^32 (q8: the
		 * last chunk, and every index0 a multiple of the block) */
		dc[k].index0 = k == 1 ? ((uint64_t)1 << 32) - 1001 : (uint64_t)k * 1000003;
		dc[k].exp_avg_scale = dc[k].exp_avg_sq_scale = NULL;
		if (md == TIER_Q8) {
			dc[k].index0 = k + 1 == nch ? ((uint64_t)1 << 32) - 50 * TIER_Q8_BLOCK
						    : (uint64_t)k * 3907 * TIER_Q8_BLOCK;
			dc[k].exp_avg_scale = dev_copy(ar, h[k].sm, q8_blocks(n) * 4, 0);
			dc[k].exp_avg_sq_scale = dev_copy(ar, h[k].sv, q8_blocks(n) * 4, 0);
		}
	}
	/* cudaMemcpy from pageable memory may return before the DMA is done. */
	CU(cudaDeviceSynchronize());
	rc = adamw_cuda_step(hp, md, gd, od == OUT_NONE ? (enum tier_dtype)99 : (enum tier_dtype)od,
			     dc, nch, st);
	ck_assert_msg(rc == 0, "%s: adamw_cuda_step: %d %s", what, rc, tier_last_error());
	CU(cudaStreamSynchronize(st));

	adam_consts_init(hp, &c);
	for (size_t k = 0; k < nch; k++) {
		struct tier_adam_tensors t = {
			.n = ref[k].n, .param = ref[k].p, .exp_avg = ref[k].m, .exp_avg_sq = ref[k].v,
			.moment_dtype = (enum tier_dtype)md, .grad = ref[k].g,
			.grad_dtype = (enum tier_dtype)gd, .param_out = ref[k].o,
			.out_dtype = od == OUT_NONE ? TIER_FP32 : (enum tier_dtype)od,
			.index0 = dc[k].index0,
			.exp_avg_scale = ref[k].sm, .exp_avg_sq_scale = ref[k].sv,
		};
		size_t n = h[k].n;

		rc = adamw_step_isa(NULL, ADAMW_SCALAR, &c, &t);
		ck_assert_msg(rc == 0, "%s: adamw_step_isa: %s", what, tier_last_error());
		from_dev(h[k].p, dc[k].param, n * 4);
		from_dev(h[k].m, dc[k].exp_avg, n * msz);
		from_dev(h[k].v, dc[k].exp_avg_sq, n * msz);
		same_bits(h[k].p, ref[k].p, n, 4, what, k, "param");
		same_bits(h[k].m, ref[k].m, n, msz, what, k, "exp_avg");
		same_bits(h[k].v, ref[k].v, n, msz, what, k, "exp_avg_sq");
		if (md == TIER_Q8) {
			from_dev(h[k].sm, dc[k].exp_avg_scale, q8_blocks(n) * 4);
			from_dev(h[k].sv, dc[k].exp_avg_sq_scale, q8_blocks(n) * 4);
			same_bits(h[k].sm, ref[k].sm, q8_blocks(n), 4, what, k, "exp_avg_scale");
			same_bits(h[k].sv, ref[k].sv, q8_blocks(n), 4, what, k, "exp_avg_sq_scale");
		}
		if (h[k].o) {
			from_dev(h[k].o, dc[k].param_out, n * osz);
			same_bits(h[k].o, ref[k].o, n, osz, what, k, "param_out");
		}
		free_chunk(&h[k]);
		free_chunk(&ref[k]);
	}
	free(h);
	free(ref);
	free(dc);
}

static const struct tier_adam_params k_adamw = { .size = sizeof(struct tier_adam_params),
	.lr = 1e-3, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8, .weight_decay = 0.01,
	.decoupled = true, .step = 7, .grad_scale = 0.7 / 1024.0,
};
static const struct tier_adam_params k_adamw_sr = { .size = sizeof(struct tier_adam_params),
	.lr = 1e-3, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8, .weight_decay = 0.01,
	.decoupled = true, .step = 7, .grad_scale = 0.7 / 1024.0,
	.rounding = TIER_ROUND_STOCHASTIC, .out_rounding = TIER_ROUND_STOCHASTIC, .seed = 0xfeed,
};
static const struct tier_adam_params k_adam_l2 = { .size = sizeof(struct tier_adam_params),
	.lr = 3e-4, .beta1 = 0.8, .beta2 = 0.95, .eps = 1e-6, .weight_decay = 0.1,
	.decoupled = false, .step = 1, .grad_scale = 1.0,
};

/* _i: moment dtype (fp32, bf16, q8) * 12 + grad dtype * 4 + (out dtype + 1). */
START_TEST(test_step_combo)
{
	const int md = _i / 12 == 2 ? TIER_Q8 : _i / 12, gd = _i / 4 % 3, od = _i % 4 - 1;
	const struct tier_adam_params *hps[] = { &k_adamw, &k_adam_l2, &k_adamw_sr };
	static const char *const skews[] = { "aligned", "all +1", "grad +1" };
	cudaStream_t st;
	struct arena ar;

	CU(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
	arena_init(&ar, 8u << 20);
	for (size_t h = 0; h < ARRAY_SIZE(hps); h++) {
		for (int skew = 0; skew < 3; skew++) {
			char what[160];

			snprintf(what, sizeof(what), "%s%s, moments %s, grads %s, out %s, %s",
				 hps[h]->decoupled ? "AdamW" : "Adam",
				 hps[h]->rounding ? " (stochastic)" : "", md == TIER_Q8 ? "q8" : k_dt_names[md], k_dt_names[gd],
				 od == OUT_NONE ? "none" : k_dt_names[od], skews[skew]);
			run_step(&ar, hps[h], md, gd, od, k_step_sizes, ARRAY_SIZE(k_step_sizes), skew,
				 st, what);
		}
	}
	arena_free(&ar);
	CU(cudaStreamDestroy(st));
}
END_TEST

START_TEST(test_step_many_chunks)
{
	size_t sizes[MANY];
	cudaStream_t st;
	struct arena ar;

	for (size_t k = 0; k < MANY; k++)
		sizes[k] = k % 7 == 3 ? 0 : t_rnd_next(&g_rng) % 5000;
	CU(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
	arena_init(&ar, 32u << 20);
	run_step(&ar, &k_adamw, TIER_BF16, TIER_FP16, TIER_BF16, sizes, MANY, 0, st,
		 "150 chunks, own stream");
	run_step(&ar, &k_adam_l2, TIER_FP32, TIER_FP32, OUT_NONE, sizes, MANY, 1, NULL,
		 "150 chunks, default stream, misaligned");
	run_step(&ar, &k_adamw, TIER_FP32, TIER_BF16, TIER_FP16, sizes, MANY, 0, NULL,
		 "150 chunks, default stream");
	arena_free(&ar);
	CU(cudaStreamDestroy(st));
}
END_TEST

/* ---------------------------------------------------------- grad check */

static void *fill_grad(size_t n, int dt)
{
	void *g = xmalloc(n * tier_dtype_size((enum tier_dtype)dt));

	for (size_t i = 0; i < n; i++) {
		/* magnitudes over 15 binades, so that the order of additions shows */
		float x = urand(-3.0f, 3.0f) * (float)(1u << (t_rnd_next(&g_rng) % 15));

		if (i % 67 == 1)
			x = 0.0f;
		put(dt, g, i, x);
	}
	return g;
}

/* The GPU's sum and flag against tier_grad_check() over the chunks in order. */
static void gc_compare(void **host, const size_t *sizes, size_t nch, int dt,
		       const struct adamw_chunk *dc, cudaStream_t st, const char *what)
{
	struct tier_grad_stats acc = { 0.0, false };
	double s = -1.0;
	int nf = -1, rc;

	for (size_t k = 0; k < nch; k++)
		ck_assert_int_eq(tier_grad_check(NULL, host[k], (enum tier_dtype)dt, sizes[k], &acc), 0);
	rc = adamw_cuda_grad_check(dc, nch, (enum tier_dtype)dt, st, &s, &nf);
	ck_assert_msg(rc == 0, "%s: adamw_cuda_grad_check: %d %s", what, rc, tier_last_error());
	ck_assert_msg(nf == (int)acc.nonfinite, "%s: flag GPU %d, CPU %d", what, nf,
		      (int)acc.nonfinite);
	if (isnan(acc.sumsq)) {
		ck_assert_msg(isnan(s), "%s: sum GPU %a, CPU nan", what, s);
		return;
	}
	if (isfinite(acc.sumsq))
		ck_assert_msg(fabs(s - acc.sumsq) <= 1e-12 * fabs(acc.sumsq), "%s: sum GPU %.17g, CPU %.17g",
			      what, s, acc.sumsq);
	ck_assert_msg(memcmp(&s, &acc.sumsq, sizeof(s)) == 0, "%s: sum GPU %a, CPU %a", what, s,
		      acc.sumsq);
}

static void run_gc(struct arena *ar, int dt, const size_t *sizes, size_t nch, size_t skew,
		   cudaStream_t st, const char *what)
{
	void **host = xmalloc(nch * sizeof(*host));
	struct adamw_chunk *dc = calloc(nch, sizeof(*dc));
	size_t big = 0;
	char w[200];

	ck_assert_ptr_nonnull(dc);
	ar->used = 0;
	for (size_t k = 0; k < nch; k++) {
		host[k] = fill_grad(sizes[k], dt);
		dc[k].n = sizes[k];
		dc[k].grad = dev_copy(ar, host[k], sizes[k] * tier_dtype_size((enum tier_dtype)dt), skew * tier_dtype_size((enum tier_dtype)dt));
	}
	CU(cudaDeviceSynchronize());
	gc_compare(host, sizes, nch, dt, dc, st, what);

	/* An inf in the middle of the largest chunk, then a nan as well. */
	for (size_t k = 1; k < nch; k++)
		if (sizes[k] > sizes[big])
			big = k;
	if (nch && sizes[big] >= 2) {
		size_t esz = tier_dtype_size((enum tier_dtype)dt), mid = sizes[big] / 2;

		put(dt, host[big], mid, INFINITY);
		CU(cudaMemcpy((char *)dc[big].grad + mid * esz, (char *)host[big] + mid * esz, esz,
			      cudaMemcpyHostToDevice));
		CU(cudaDeviceSynchronize());
		snprintf(w, sizeof(w), "%s, an inf", what);
		gc_compare(host, sizes, nch, dt, dc, st, w);
		put(dt, host[big], 1, NAN);
		CU(cudaMemcpy((char *)dc[big].grad + esz, (char *)host[big] + esz, esz,
			      cudaMemcpyHostToDevice));
		CU(cudaDeviceSynchronize());
		snprintf(w, sizeof(w), "%s, an inf and a nan", what);
		gc_compare(host, sizes, nch, dt, dc, st, w);
	}
	for (size_t k = 0; k < nch; k++)
		free(host[k]);
	free(host);
	free(dc);
}

START_TEST(test_grad_check)
{
	const int dt = _i;
	size_t many[MANY];
	cudaStream_t st;
	struct arena ar;
	char what[120];
	double s = -1.0;
	int nf = -1;

	for (size_t k = 0; k < MANY; k++)
		many[k] = k % 9 == 4 ? 0 : t_rnd_next(&g_rng) % 40000;
	CU(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
	arena_init(&ar, 32u << 20);
	snprintf(what, sizeof(what), "%s, aligned", k_dt_names[dt]);
	run_gc(&ar, dt, k_gc_sizes, ARRAY_SIZE(k_gc_sizes), 0, st, what);
	snprintf(what, sizeof(what), "%s, one element off", k_dt_names[dt]);
	run_gc(&ar, dt, k_gc_sizes, ARRAY_SIZE(k_gc_sizes), 1, st, what);
	snprintf(what, sizeof(what), "%s, 150 chunks, default stream", k_dt_names[dt]);
	run_gc(&ar, dt, many, MANY, 0, NULL, what);

	ck_assert_int_eq(adamw_cuda_grad_check(NULL, 0, (enum tier_dtype)dt, st, &s, &nf), 0);
	ck_assert(s == 0.0 && nf == 0);
	arena_free(&ar);
	CU(cudaStreamDestroy(st));
}
END_TEST

/* -------------------------------------------------------------- errors */

START_TEST(test_errors)
{
	float dummy[4] = { 0 };
	struct adamw_chunk k = { dummy, dummy, dummy, dummy, NULL, 4, 0, NULL, NULL };
	struct tier_adam_params hp = k_adamw;
	double s;
	int nf;

	ck_assert_int_eq(adamw_cuda_step(NULL, TIER_FP32, TIER_FP32, TIER_FP32, &k, 1, NULL), -EINVAL);
	ck_assert_int_eq(adamw_cuda_step(&hp, TIER_FP16, TIER_FP32, TIER_FP32, &k, 1, NULL), -EINVAL);
	ck_assert_ptr_nonnull(strstr(tier_last_error(), "moment dtype"));
	ck_assert_int_eq(adamw_cuda_step(&hp, TIER_FP32, (enum tier_dtype)7, TIER_FP32, &k, 1, NULL),
			 -EINVAL);
	k.param_out = dummy;
	ck_assert_int_eq(adamw_cuda_step(&hp, TIER_FP32, TIER_FP32, (enum tier_dtype)9, &k, 1, NULL),
			 -EINVAL);
	ck_assert_ptr_nonnull(strstr(tier_last_error(), "output dtype"));
	k.grad = NULL;
	ck_assert_int_eq(adamw_cuda_step(&hp, TIER_FP32, TIER_FP32, TIER_FP32, &k, 1, NULL), -EINVAL);
	ck_assert_ptr_nonnull(strstr(tier_last_error(), "NULL grad"));
	k.grad = dummy;
	ck_assert_int_eq(adamw_cuda_step(&hp, TIER_FP32, TIER_FP32, TIER_FP32, NULL, 1, NULL), -EINVAL);
	hp.lr = (double)NAN;
	ck_assert_int_eq(adamw_cuda_step(&hp, TIER_FP32, TIER_FP32, TIER_FP32, &k, 1, NULL), -EINVAL);
	ck_assert_ptr_nonnull(strstr(tier_last_error(), "lr"));
	hp = k_adamw;
	hp.step = 0;
	ck_assert_int_eq(adamw_cuda_step(&hp, TIER_FP32, TIER_FP32, TIER_FP32, &k, 1, NULL), -EINVAL);
	hp = k_adamw;
	/* q8: moments only; the scales; index0 a multiple of the block */
	ck_assert_int_eq(adamw_cuda_step(&hp, TIER_FP32, TIER_Q8, TIER_FP32, &k, 1, NULL), -EINVAL);
	ck_assert_ptr_nonnull(strstr(tier_last_error(), "gradient dtype 3"));
	ck_assert_int_eq(adamw_cuda_step(&hp, TIER_FP32, TIER_FP32, TIER_Q8, &k, 1, NULL), -EINVAL);
	ck_assert_ptr_nonnull(strstr(tier_last_error(), "output dtype 3"));
	ck_assert_int_eq(adamw_cuda_step(&hp, TIER_Q8, TIER_FP32, TIER_FP32, &k, 1, NULL), -EINVAL);
	ck_assert_ptr_nonnull(strstr(tier_last_error(), "NULL exp_avg_scale"));
	k.exp_avg_scale = dummy;
	ck_assert_int_eq(adamw_cuda_step(&hp, TIER_Q8, TIER_FP32, TIER_FP32, &k, 1, NULL), -EINVAL);
	ck_assert_ptr_nonnull(strstr(tier_last_error(), "NULL exp_avg_sq_scale"));
	k.exp_avg_sq_scale = dummy;
	k.index0 = 100;
	ck_assert_int_eq(adamw_cuda_step(&hp, TIER_Q8, TIER_FP32, TIER_FP32, &k, 1, NULL), -EINVAL);
	ck_assert_ptr_nonnull(strstr(tier_last_error(), "index0 100"));
	k.index0 = 0;
	k.exp_avg_scale = k.exp_avg_sq_scale = NULL;
	/* Nothing to do: 0 (and no CUDA call). */
	k.n = 0;
	ck_assert_int_eq(adamw_cuda_step(&hp, TIER_FP32, TIER_FP32, TIER_FP32, &k, 1, NULL), 0);
	ck_assert_int_eq(adamw_cuda_step(&hp, TIER_FP32, TIER_FP32, TIER_FP32, NULL, 0, NULL), 0);
	k.n = 4;

	ck_assert_int_eq(adamw_cuda_grad_check(&k, 1, (enum tier_dtype)3, NULL, &s, &nf), -EINVAL);
	ck_assert_int_eq(adamw_cuda_grad_check(&k, 1, TIER_FP32, NULL, NULL, &nf), -EINVAL);
	ck_assert_int_eq(adamw_cuda_grad_check(&k, 1, TIER_FP32, NULL, &s, NULL), -EINVAL);
	ck_assert_int_eq(adamw_cuda_grad_check(NULL, 2, TIER_FP32, NULL, &s, &nf), -EINVAL);
	k.grad = NULL;
	ck_assert_int_eq(adamw_cuda_grad_check(&k, 1, TIER_FP32, NULL, &s, &nf), -EINVAL);
}
END_TEST

/*
 * The public face (tier_gpu_alloc, _copy, _sync, tier_adam_step_gpu,
 * tier_adam_roofline_gpu) on device 0.  _i: moment dtype (fp32, bf16,
 * q8) * 4 + grad dtype (fp32, bf16) * 2 + output (none, bf16).  Three
 * steps from zero moments, each against tier_adam_step on the host, bit
 * for bit; after the first, the roofline leaves the state as it was.
 */
START_TEST(test_public_gpu)
{
	const int md = _i / 4 == 2 ? TIER_Q8 : _i / 4, gd = _i / 2 % 2;
	const bool out = _i % 2;
	const size_t n = (1u << 20) + 37, nb = q8_blocks(n);
	const size_t msz = md == TIER_Q8 ? 1 : md == TIER_BF16 ? 2 : 4, gsz = gd ? 2 : 4;
	struct tier_adam_tensors h = { .n = n, .moment_dtype = (enum tier_dtype)md,
				       .grad_dtype = (enum tier_dtype)gd, .out_dtype = TIER_BF16 };
	struct tier_adam_tensors d = h;
	void *back[5];
	struct tier_adam_params hp = k_adamw_sr;
	size_t len[5] = { n * 4, n * msz, n * msz, nb * 4, nb * 4 };

	h.param = calloc(n, 4);
	h.exp_avg = calloc(n, msz);
	h.exp_avg_sq = calloc(n, msz);
	h.grad = malloc(n * gsz);
	h.param_out = out ? calloc(n, 2) : NULL;
	h.exp_avg_scale = md == TIER_Q8 ? calloc(nb, 4) : NULL;
	h.exp_avg_sq_scale = md == TIER_Q8 ? calloc(nb, 4) : NULL;
	ck_assert(h.param && h.exp_avg && h.exp_avg_sq && h.grad);
	for (size_t i = 0; i < n; i++) {
		float g = (float)((double)(t_rnd_next(&g_rng) >> 11) * 0x1p-53 - 0.5);

		h.param[i] = (float)((double)(t_rnd_next(&g_rng) >> 11) * 0x1p-53 - 0.5);
		if (gd)
			((uint16_t *)h.grad)[i] = f32_to_bf16(g);
		else
			((float *)h.grad)[i] = g;
	}
	ck_assert_int_eq(tier_gpu_alloc(0, TIER_GPU_DEVICE, n * 4, (void **)&d.param), 0);
	ck_assert_int_eq(tier_gpu_alloc(0, TIER_GPU_DEVICE, n * msz, &d.exp_avg), 0);
	ck_assert_int_eq(tier_gpu_alloc(0, TIER_GPU_DEVICE, n * msz, &d.exp_avg_sq), 0);
	ck_assert_int_eq(tier_gpu_alloc(0, TIER_GPU_DEVICE, n * gsz, (void **)&d.grad), 0);
	d.param_out = NULL;
	if (out)
		ck_assert_int_eq(tier_gpu_alloc(0, TIER_GPU_DEVICE, n * 2, &d.param_out), 0);
	if (md == TIER_Q8) {
		ck_assert_int_eq(tier_gpu_alloc(0, TIER_GPU_DEVICE, nb * 4, (void **)&d.exp_avg_scale), 0);
		ck_assert_int_eq(tier_gpu_alloc(0, TIER_GPU_DEVICE, nb * 4, (void **)&d.exp_avg_sq_scale), 0);
	}
	ck_assert_int_eq(tier_gpu_copy(d.param, h.param, n * 4), 0);
	ck_assert_int_eq(tier_gpu_copy(d.exp_avg, h.exp_avg, n * msz), 0);
	ck_assert_int_eq(tier_gpu_copy(d.exp_avg_sq, h.exp_avg_sq, n * msz), 0);
	ck_assert_int_eq(tier_gpu_copy((void *)d.grad, h.grad, n * gsz), 0);
	if (md == TIER_Q8) {
		ck_assert_int_eq(tier_gpu_copy(d.exp_avg_scale, h.exp_avg_scale, nb * 4), 0);
		ck_assert_int_eq(tier_gpu_copy(d.exp_avg_sq_scale, h.exp_avg_sq_scale, nb * 4), 0);
	}
	for (int k = 0; k < 5; k++) {
		back[k] = malloc(len[k]);
		ck_assert_ptr_nonnull(back[k]);
	}
	for (int step = 1; step <= 3; step++) {
		void *dev[5] = { d.param, d.exp_avg, d.exp_avg_sq, d.exp_avg_scale, d.exp_avg_sq_scale };
		const void *host[5] = { h.param, h.exp_avg, h.exp_avg_sq, h.exp_avg_scale,
					h.exp_avg_sq_scale };

		hp.step = (uint64_t)step;
		ck_assert_int_eq(tier_adam_step(NULL, &hp, &h), 0);
		ck_assert_msg(tier_adam_step_gpu(0, &hp, &d) == 0, "step_gpu: %s", tier_last_error());
		ck_assert_int_eq(tier_gpu_sync(0), 0);
		if (step == 1) {
			ck_assert_msg(tier_adam_roofline_gpu(0, &d) == 0, "roofline_gpu: %s",
				      tier_last_error());
			ck_assert_int_eq(tier_gpu_sync(0), 0);
		}
		for (int k = 0; k < 5; k++) {
			if (!dev[k])
				continue;
			ck_assert_int_eq(tier_gpu_copy(back[k], dev[k], len[k]), 0);
			ck_assert_msg(memcmp(back[k], host[k], len[k]) == 0,
				      "moments %d, grads %d, out %d: step %d: array %d differs from tier_adam_step's",
				      md, gd, out, step, k);
		}
		if (out && step > 1) {
			/* (after step 1 the roofline wrote it) */
			ck_assert_int_eq(tier_gpu_copy(back[0], d.param_out, n * 2), 0);
			ck_assert_msg(memcmp(back[0], h.param_out, n * 2) == 0,
				      "moments %d, grads %d: step %d: the copy differs", md, gd, step);
		}
	}
	for (int k = 0; k < 5; k++)
		free(back[k]);
	tier_gpu_free(TIER_GPU_DEVICE, d.param);
	tier_gpu_free(TIER_GPU_DEVICE, d.exp_avg);
	tier_gpu_free(TIER_GPU_DEVICE, d.exp_avg_sq);
	tier_gpu_free(TIER_GPU_DEVICE, (void *)d.grad);
	tier_gpu_free(TIER_GPU_DEVICE, d.param_out);
	tier_gpu_free(TIER_GPU_DEVICE, d.exp_avg_scale);
	tier_gpu_free(TIER_GPU_DEVICE, d.exp_avg_sq_scale);
	free(h.param);
	free(h.exp_avg);
	free(h.exp_avg_sq);
	free((void *)h.grad);
	free(h.param_out);
	free(h.exp_avg_scale);
	free(h.exp_avg_sq_scale);
}
END_TEST

static Suite *adamw_suite(void)
{
	Suite *s = suite_create("gpu-adamw");
	TCase *tc = tcase_create("cuda");

	tcase_set_timeout(tc, 120);
	tcase_add_loop_test(tc, test_step_combo, 0, 36);
	tcase_add_test(tc, test_step_many_chunks);
	tcase_add_loop_test(tc, test_grad_check, 0, 3);
	tcase_add_test(tc, test_errors);
	tcase_add_loop_test(tc, test_public_gpu, 0, 12);
	suite_add_tcase(s, tc);
	return s;
}

#endif /* TIER_HAVE_CUDA */

int main(void)
{
#if TIER_HAVE_CUDA
	if (!t_gpu_present(NULL))
		return T_EXIT_SKIP;
	return t_run_suite(adamw_suite());
#else
	fprintf(stderr, "no GPU: this build has no CUDA support (meson -Dcuda=enabled)\n");
	return T_EXIT_SKIP;
#endif
}
