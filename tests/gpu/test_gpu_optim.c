/*
 * test_gpu_optim.c - the optimizer's CUDA lane (runtime/optim/optim.c with the
 * "cuda" HBM backend) on a machine with a GPU, against the in-memory
 * reference of tests/runtime/test_optim.c: the global norm is the sum, in
 * parameter id order and in double, of tier_grad_check() per parameter
 * (a fresh struct tier_grad_stats each, no pool), norm = sqrt(total) /
 * loss_scale, clip_coef = tier_clip_coef(norm, max) when max_grad_norm > 0
 * else 1, grad_scale = clip_coef / loss_scale; a nonfinite gradient skips
 * the step; else tier_adam_step() runs on each whole parameter in memory
 * with step = the count of applied steps.  The CUDA kernel (no FMA, IEEE
 * div/sqrt) equals the CPU kernel bit for bit on finite data, and the
 * device gradient check equals tier_grad_check() bit for bit, so the
 * optimizer must equal the reference bit for bit (memcmp) whatever the
 * split.
 *
 * The store: a manifest with GPU 0 and one NVMe path in a scratch
 * directory, hbm_backend "cuda" with a 1 MiB HBM tier (the arena rounds it
 * up to 2 MiB), a 2 MiB DRAM tier, 64 KiB shards; four parameters of 1,
 * 4099, 70000 and 300000 elements (~4.5 MB of state with fp32 moments,
 * ~3 MB with bf16).
 *
 * Covers:
 *  - gpu_optim_steps: offload_fraction 0 (every shard on the GPU lane),
 *    0.5 and TIER_OFFLOAD_AUTO; fp32 and bf16 moments; fp32 and bf16
 *    gradients in host memory (pageable, or pinned: cudaHostAlloc), in
 *    device memory (cudaMalloc'd, filled by cudaMemcpy from the
 *    reference's host copy) and mixed per parameter;
 *    bf16 outputs in host memory, device memory and mixed; clipping that
 *    clips; a static loss scale of 1024; tier_optim_step and the streaming
 *    form (pushes in reverse order); 5 steps of random gradients with a
 *    learning rate that changes (and TIER_LR_KEEP = keep).  After every step: the
 *    result (applied, step, grad_norm and clip_coef exactly, loss scale,
 *    the shard split: all on the GPU lane with H2D and D2H traffic for 0,
 *    half and half for 0.5), tier_store_validate(), the outputs (device
 *    ones copied back) and the state read back (tier_optim_read), all bit
 *    for bit; NVMe reads and writes over the run when the state exceeds
 *    the DRAM and HBM tiers together;
 *  - gpu_optim_overflow: after two clean steps, an inf (fp32) or a nan
 *    (bf16) in one device gradient: applied false, the step count, the
 *    state read back and every output buffer (host and device) unchanged;
 *    the next clean step applies with the old count + 1;
 *  - gpu_optim_fill_failure (issue 15, item 7; needs fault sites): after
 *    two clean steps, DRAM emptied and an EIO armed on the next NVMe
 *    operation (a shard fill): once, the tier retries it and the step
 *    equals the reference; persistent, the step fails, and with the fault
 *    lifted the same step again (same gradients and outputs) completes it,
 *    equal to the reference then and after one more step.
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

#include "common/fault.h"
#include "kernels/adam_math.h"
#include "tierstore/toolkit.h"

#define KiB (1ull << 10)
#define MiB (1ull << 20)
#define U64(x) ((unsigned long long)(x))
#define NP 4
#define DRAM (2 * MiB)

#define CU(call)                                                                    \
	do {                                                                        \
		cudaError_t cu_e_ = (call);                                         \
		ck_assert_msg(cu_e_ == cudaSuccess, "%s: %s", #call,                \
			      cudaGetErrorString(cu_e_));                           \
	} while (0)

#define VALID(s)                                                                       \
	do {                                                                          \
		int vrc_ = tier_store_validate(s);                                    \
		ck_assert_msg(vrc_ == 0, "line %d: validate: %d: %s", __LINE__, vrc_, \
			      tier_last_error());                                     \
	} while (0)

static const size_t k_sizes[NP] = { 1, 4099, 70000, 300000 };
static const double k_lrs[] = { 1e-3, 2e-3, TIER_LR_KEEP, 5e-4, 1.5e-3 };

/* Where a case's buffers live; MIX: parameter i's gradient on the device
 * when i is odd, its output when i is even; PIN: host memory, page-locked
 * (cudaHostAlloc: the GPU lane moves it by DMA, with no staging). */
enum where { HOST, DEV, MIX, PIN };

struct gcase {
	const char *name;
	double offload;
	int md, gdt;
	enum where gmem, omem;
	double max_norm, loss_scale;
	bool stream;            /* begin / push in reverse / end */
};

static const struct gcase k_cases[] = {
	{ "all GPU, fp32 moments, host grads and outs", 0.0, TIER_FP32, TIER_FP32, HOST, HOST,
	  0.0, 1.0, false },
	{ "all GPU, bf16 moments, device bf16 grads and outs, clipped", 0.0, TIER_BF16, TIER_BF16,
	  DEV, DEV, 1.0, 1.0, true },
	{ "half, fp32 moments, device grads, host outs, loss scale", 0.5, TIER_FP32, TIER_FP32, DEV,
	  HOST, 0.0, 1024.0, false },
	{ "half, bf16 moments, host bf16 grads, device outs", 0.5, TIER_BF16, TIER_BF16, HOST, DEV,
	  0.0, 1.0, true },
	{ "auto, fp32 moments, mixed bf16 grads and outs, clipped", TIER_OFFLOAD_AUTO, TIER_FP32,
	  TIER_BF16, MIX, MIX, 2.0, 1.0, false },
	{ "auto, bf16 moments, device grads, mixed outs", TIER_OFFLOAD_AUTO, TIER_BF16, TIER_FP32,
	  DEV, MIX, 0.0, 1.0, true },
	{ "all GPU, fp32 moments, pinned grads and outs", 0.0, TIER_FP32, TIER_FP32, PIN, PIN,
	  0.0, 1.0, true },
	{ "half, bf16 moments, pinned bf16 grads, host outs, clipped", 0.5, TIER_BF16, TIER_BF16,
	  PIN, HOST, 1.0, 1.0, false },
};

/* Overflow cases: the case run, the bad value put in parameter 2's
 * (device) gradient. */
static const struct {
	int base;
	float bad;
} k_ocases[] = { { 2, INFINITY }, { 1, NAN } };

/* gpu_optim_fill_failure: the k_cases row, and how many times the EIO
 * comes (1: retried by the tier; persistent: the step fails). */
static const struct {
	int base;
	int64_t count;
} k_fcases[] = {
	{ 0, 1 }, { 0, TIER_FAULT_PERSISTENT }, { 1, TIER_FAULT_PERSISTENT },
	{ 2, TIER_FAULT_PERSISTENT }, { 4, TIER_FAULT_PERSISTENT },
};

/* ------------------------------------------------------------ helpers */

/* uniform in [-1, 1) */
static float urand(uint64_t *s)
{
	return (float)((double)(t_rnd_next(s) >> 11) * 0x1p-52 - 1.0);
}

static void put(int dt, void *buf, size_t i, float x)
{
	if (dt == TIER_FP32) {
		((float *)buf)[i] = x;
	} else {
		uint32_t u;

		memcpy(&u, &x, 4);
		((uint16_t *)buf)[i] = (uint16_t)(u >> 16); /* bf16 by truncation: any bf16 */
	}
}

static void *xmalloc(size_t bytes)
{
	void *p = malloc(bytes ? bytes : 1);

	ck_assert_ptr_nonnull(p);
	return p;
}

static void *pmalloc(size_t bytes)
{
	void *p = NULL;

	CU(cudaHostAlloc(&p, bytes ? bytes : 1, cudaHostAllocPortable));
	return p;
}

static void *dmalloc(size_t bytes)
{
	void *p = NULL;

	CU(cudaMalloc(&p, bytes));
	return p;
}

static bool on_dev(enum where w, size_t i, bool out)
{
	return w == DEV || (w == MIX && ((i + out) & 1));
}

/* Fails naming the first differing element of @a and @b. */
static void same(const void *a, const void *b, size_t n, size_t es, const char *when,
		 const char *param, const char *what)
{
	if (memcmp(a, b, n * es) == 0)
		return;
	for (size_t i = 0; i < n; i++) {
		uint32_t x = 0, y = 0;

		memcpy(&x, (const char *)a + i * es, es);
		memcpy(&y, (const char *)b + i * es, es);
		ck_assert_msg(x == y, "%s: %s: %s[%zu] = %#x, reference %#x", when, param, what, i,
			      x, y);
	}
}

/* ------------------------------------------------------------ a world */

struct gparam {
	char name[32];
	size_t n;
	uint32_t id;
	float *p;               /* the reference: master weights, moments */
	void *m, *v;
	void *g;                /* this step's gradient (host; the reference's) */
	void *dg;               /* its device copy, or NULL */
	uint16_t *out, *rout;   /* bf16 outputs: the optimizer's host buffer, the reference's */
	void *dout;             /* the optimizer's device buffer, or NULL */
	float *rp;              /* read back */
	void *rm, *rv;
	uint32_t shards;
};

struct gworld {
	const struct gcase *c;
	char *dir;
	struct tier_manifest *man;
	struct tier_store *s;
	struct tier_optim *o;
	size_t ms;
	struct gparam pa[NP];
	uint32_t nshards;
	uint64_t state_bytes;
	uint64_t rng;
	uint64_t nvme_read, nvme_written; /* over the applied steps */
	double lr;              /* the reference's */
	uint64_t step;
};

/* A world whose files stay at close (the checkpoint test reopens them). */
static bool g_keep_files;

static void world_open(struct gworld *w, const struct gcase *c, uint64_t seed)
{
	struct tier_store_params sp = { .size = sizeof(struct tier_store_params),
		.dram_capacity = DRAM,
		.hbm_backend = "cuda",
		.hbm_capacity = 1 * MiB,
		.flags = g_keep_files ? 0 : TIER_STORE_SCRATCH,
	};
	struct tier_optim_params hp;
	char text[1024];
	int n, rc;

	memset(w, 0, sizeof(*w));
	w->c = c;
	w->rng = seed * 0x9E3779B97F4A7C15ull + 1;
	w->dir = t_mkdtemp();
	CU(cudaSetDevice(0));
	n = snprintf(text, sizeof(text),
		     "gpu:\n  device: 0\n"
		     "dram:\n  capacity: %llu\n"
		     "optimizer:\n  shard_size: 64KiB\n"
		     "nvme:\n  stripe_unit: 64KiB\n"
		     "  paths:\n    - path: %s/nvme/\n      capacity: 64MiB\n      create: true\n",
		     U64(DRAM), w->dir);
	ck_assert_int_lt(n, (int)sizeof(text));
	rc = tier_manifest_parse(text, (size_t)n, "gpu-optim.yaml", 0, &w->man);
	ck_assert_msg(rc == 0, "manifest refused: %s\n%s", tier_last_error(), text);
	rc = tier_store_open(w->man, &sp, &w->s);
	ck_assert_msg(rc == 0, "store open: %d: %s", rc, tier_last_error());
	ck_assert_msg(tier_store_has_level(w->s, TIER_HBM), "no HBM tier on the cuda backend");
	ck_assert(tier_store_home(w->s) == TIER_NVME);

	tier_optim_params_init(&hp);
	hp.lr = k_lrs[0];
	hp.weight_decay = 0.01;
	hp.decoupled = true;
	hp.moment_dtype = c->md;
	hp.offload_fraction = c->offload;
	hp.max_grad_norm = c->max_norm;
	hp.loss_scale = c->loss_scale;
	hp.shard_size = 64 * KiB;
	hp.threads = 2;
	rc = tier_optim_create(w->s, &hp, &w->o);
	ck_assert_msg(rc == 0, "optim create: %d: %s", rc, tier_last_error());
	struct tier_optim_info oi;

	ck_assert_int_eq(tier_optim_info(w->o, &oi), 0);
	ck_assert_int_eq(oi.moment_dtype, c->md);
	w->ms = tier_dtype_size((enum tier_dtype)c->md);
	w->lr = hp.lr;

	for (size_t i = 0; i < NP; i++) {
		struct gparam *q = &w->pa[i];
		size_t k;

		snprintf(q->name, sizeof(q->name), "layer%zu.weight", i);
		q->n = k_sizes[i];
		q->p = xmalloc(q->n * 4);
		q->m = calloc(q->n, w->ms);
		q->v = calloc(q->n, w->ms);
		q->g = c->gmem == PIN ? pmalloc(q->n * tier_dtype_size((enum tier_dtype)c->gdt))
				      : xmalloc(q->n * tier_dtype_size((enum tier_dtype)c->gdt));
		q->out = c->omem == PIN ? pmalloc(q->n * 2) : xmalloc(q->n * 2);
		q->rout = xmalloc(q->n * 2);
		q->rp = xmalloc(q->n * 4);
		q->rm = xmalloc(q->n * w->ms);
		q->rv = xmalloc(q->n * w->ms);
		ck_assert(q->m && q->v);
		for (k = 0; k < q->n; k++) {
			q->p[k] = i == 0 ? 0.0f : urand(&w->rng) * 0.1f; /* parameter 0 from zeros */
			q->rout[k] = (uint16_t)t_rnd_next(&w->rng);       /* a sentinel */
		}
		memcpy(q->out, q->rout, q->n * 2);
		if (on_dev(c->gmem, i, false))
			q->dg = dmalloc(q->n * tier_dtype_size((enum tier_dtype)c->gdt));
		if (on_dev(c->omem, i, true)) {
			q->dout = dmalloc(q->n * 2);
			CU(cudaMemcpy(q->dout, q->rout, q->n * 2, cudaMemcpyHostToDevice));
		}
		rc = tier_optim_add_param(w->o, q->name, q->n, i == 0 ? NULL : q->p, &q->id);
		ck_assert_msg(rc == 0, "add_param %s: %d: %s", q->name, rc, tier_last_error());
		ck_assert_uint_eq(q->id, i);
		for (q->shards = 0;; q->shards++) {
			char nm[48];

			snprintf(nm, sizeof(nm), "%s#%u", q->name, q->shards);
			if (!tier_obj_find(w->s, nm))
				break;
		}
		ck_assert_uint_ge(q->shards, 1);
		w->nshards += q->shards;
		w->state_bytes += q->n * (4 + 2 * w->ms);
	}
	ck_assert_uint_gt(w->state_bytes, DRAM);
	VALID(w->s);
}

static void world_close(struct gworld *w)
{
	int rc;

	/* more state than the DRAM and HBM tiers hold: it went through NVMe */
	if (w->state_bytes > DRAM + 2 * MiB)
		ck_assert_msg(w->nvme_read > 0 && w->nvme_written > 0,
			      "%s: %llu bytes of state, but NVMe read %llu, written %llu", w->c->name,
			      U64(w->state_bytes), U64(w->nvme_read), U64(w->nvme_written));
	rc = tier_optim_destroy(w->o);

	ck_assert_msg(rc == 0, "optim destroy: %d: %s", rc, tier_last_error());
	VALID(w->s);
	rc = tier_store_close(w->s);
	ck_assert_msg(rc == 0, "store close: %d: %s", rc, tier_last_error());
	tier_manifest_free(w->man);
	for (size_t i = 0; i < NP; i++) {
		struct gparam *q = &w->pa[i];

		if (q->dg)
			CU(cudaFree(q->dg));
		if (q->dout)
			CU(cudaFree(q->dout));
		free(q->p);
		free(q->m);
		free(q->v);
		if (w->c->gmem == PIN)
			CU(cudaFreeHost(q->g));
		else
			free(q->g);
		if (w->c->omem == PIN)
			CU(cudaFreeHost(q->out));
		else
			free(q->out);
		free(q->rout);
		free(q->rp);
		free(q->rm);
		free(q->rv);
	}
	t_rmtree(w->dir);
	free(w->dir);
}

/* Random gradients for every parameter (carrying the loss scale, with
 * zeros and magnitudes over 8 binades), copied to the device ones. */
static void world_grads(struct gworld *w)
{
	for (size_t i = 0; i < NP; i++) {
		struct gparam *q = &w->pa[i];

		for (size_t k = 0; k < q->n; k++) {
			uint64_t r = t_rnd_next(&w->rng);
			float x = r % 61 == 0 ? 0.0f
					      : urand(&w->rng) * ldexpf(1.0f, (int)((r >> 60) & 7) - 4);

			put(w->c->gdt, q->g, k, x * (float)w->c->loss_scale);
		}
		if (q->dg)
			CU(cudaMemcpy(q->dg, q->g, q->n * tier_dtype_size((enum tier_dtype)w->c->gdt), cudaMemcpyHostToDevice));
	}
	/* the optimizer reads them on a stream of its own */
	CU(cudaDeviceSynchronize());
}

struct ref_res {
	bool applied;
	uint64_t step;
	double norm, clip;
};

static void ref_step(struct gworld *w, double lr, struct ref_res *rr)
{
	const struct gcase *c = w->c;
	double total = 0.0;
	bool nonfinite = false;

	if (lr != TIER_LR_KEEP)
		w->lr = lr;
	for (size_t i = 0; i < NP; i++) {
		struct tier_grad_stats st = { 0 };

		ck_assert_int_eq(tier_grad_check(NULL, w->pa[i].g, (enum tier_dtype)c->gdt,
						 w->pa[i].n, &st),
				 0);
		total += st.sumsq;
		nonfinite |= st.nonfinite;
	}
	memset(rr, 0, sizeof(*rr));
	rr->applied = !nonfinite;
	if (!nonfinite) {
		struct tier_optim_params d;
		struct tier_adam_params ap;

		tier_optim_params_init(&d);
		rr->norm = sqrt(total) / c->loss_scale;
		rr->clip = c->max_norm > 0 ? tier_clip_coef(rr->norm, c->max_norm) : 1.0;
		w->step++;
		ap = (struct tier_adam_params){ .size = sizeof(struct tier_adam_params),
			.lr = w->lr, .beta1 = d.beta1, .beta2 = d.beta2, .eps = d.eps,
			.weight_decay = 0.01, .decoupled = true, .step = w->step,
			.grad_scale = rr->clip / c->loss_scale,
			.rounding = TIER_ROUND_STOCHASTIC, /* the manifest's default */
		};
		for (size_t i = 0; i < NP; i++) {
			struct gparam *q = &w->pa[i];
			struct tier_adam_tensors t = {
				.n = q->n, .param = q->p, .exp_avg = q->m, .exp_avg_sq = q->v,
				.moment_dtype = (enum tier_dtype)c->md, .grad = q->g,
				.grad_dtype = (enum tier_dtype)c->gdt, .param_out = q->rout,
				.out_dtype = TIER_BF16,
			};

			ap.seed = sr_param_seed(0, (uint32_t)i);
			ck_assert_int_eq(tier_adam_step(NULL, &ap, &t), 0);
		}
	}
	rr->step = w->step;
}

/* One step of the optimizer (tier_optim_step, or begin / push / end);
 * its error, with the detail in tier_last_error(). */
static int opt_try(struct gworld *w, double lr, struct tier_step_result *res)
{
	struct tier_tensor g[NP], out[NP];
	int rc;

	for (size_t i = 0; i < NP; i++) {
		struct gparam *q = &w->pa[i];

		g[i] = (struct tier_tensor){ .ptr = q->dg ? q->dg : q->g,
					     .dtype = (enum tier_dtype)w->c->gdt,
					     .mem = q->dg ? TIER_MEM_DEVICE : TIER_MEM_HOST,
					     .numel = q->n };
		out[i] = (struct tier_tensor){ .ptr = q->dout ? q->dout : (void *)q->out,
					       .dtype = TIER_BF16,
					       .mem = q->dout ? TIER_MEM_DEVICE : TIER_MEM_HOST,
					       .numel = q->n };
	}
	memset(res, 0xee, sizeof(*res));
	if (!w->c->stream)
		return tier_optim_step(w->o, lr, g, out, res);
	rc = tier_optim_begin(w->o, lr);
	for (size_t i = NP; rc == 0 && i-- > 0;)
		rc = tier_optim_push(w->o, (uint32_t)i, &g[i], &out[i]);
	return rc ? rc : tier_optim_end(w->o, res);
}

static void opt_step(struct gworld *w, double lr, struct tier_step_result *res)
{
	int rc = opt_try(w, lr, res);

	ck_assert_msg(rc == 0, "step: %d: %s", rc, tier_last_error());
}

static void check_result(struct gworld *w, const struct tier_step_result *r,
			 const struct ref_res *rr, int k)
{
	const struct gcase *c = w->c;

	ck_assert_msg(r->applied == rr->applied, "step %d: applied %d, want %d", k, r->applied,
		      rr->applied);
	ck_assert_msg(r->step == rr->step, "step %d: result.step %llu, want %llu", k,
		      U64(r->step), U64(rr->step));
	ck_assert_msg(r->loss_scale == c->loss_scale, "step %d: loss_scale %.17g", k,
		      r->loss_scale);
	VALID(w->s);
	if (!rr->applied)
		return;
	ck_assert_msg(r->grad_norm == rr->norm, "step %d: grad_norm %.17g, want %.17g", k,
		      r->grad_norm, rr->norm);
	ck_assert_msg(r->clip_coef == rr->clip, "step %d: clip_coef %.17g, want %.17g", k,
		      r->clip_coef, rr->clip);
	if (c->max_norm > 0)
		ck_assert_msg(r->clip_coef < 1.0, "step %d: clipping case, but clip_coef %g", k,
			      r->clip_coef);
	ck_assert_msg(r->cpu_shards + r->gpu_shards == w->nshards,
		      "step %d: cpu_shards %u + gpu_shards %u != %u shards", k, r->cpu_shards,
		      r->gpu_shards, w->nshards);
	ck_assert_msg(r->offload_fraction >= 0 && r->offload_fraction <= 1, "step %d: offload_fraction %g", k,
		      r->offload_fraction);
	if (c->offload == 0.0)
		ck_assert_msg(r->cpu_shards == 0 && r->offload_fraction == 0.0 && r->h2d_bytes > 0 &&
				      r->d2h_bytes > 0,
			      "step %d: all on the GPU lane, but cpu_shards %u, offload_fraction %g, h2d %llu, d2h %llu",
			      k, r->cpu_shards, r->offload_fraction, U64(r->h2d_bytes), U64(r->d2h_bytes));
	if (c->offload == 0.5)
		ck_assert_msg(r->cpu_shards > 0 && r->gpu_shards > 0 &&
				      (r->gpu_shards > r->cpu_shards ? r->gpu_shards - r->cpu_shards
								     : r->cpu_shards - r->gpu_shards) <= 1,
			      "step %d: half, but cpu_shards %u, gpu_shards %u", k, r->cpu_shards,
			      r->gpu_shards);
	w->nvme_read += r->nvme_read_bytes;
	w->nvme_written += r->nvme_write_bytes;
}

/* The outputs (device ones copied back) and the state read back against
 * the reference. */
static void check_state(struct gworld *w, const char *when)
{
	for (size_t i = 0; i < NP; i++) {
		struct gparam *q = &w->pa[i];
		int rc;

		if (q->dout) {
			CU(cudaDeviceSynchronize());
			memset(q->out, 0xff, q->n * 2);
			CU(cudaMemcpy(q->out, q->dout, q->n * 2, cudaMemcpyDeviceToHost));
		}
		same(q->out, q->rout, q->n, 2, when, q->name, q->dout ? "device out" : "host out");
		/* all ones: NaN in every dtype, which no state holds */
		memset(q->rp, 0xff, q->n * 4);
		memset(q->rm, 0xff, q->n * w->ms);
		memset(q->rv, 0xff, q->n * w->ms);
		rc = tier_optim_read(w->o, q->id, q->rp, q->rm, q->rv);
		ck_assert_msg(rc == 0, "%s: read %s: %d: %s", when, q->name, rc, tier_last_error());
		same(q->rp, q->p, q->n, 4, when, q->name, "master");
		same(q->rm, q->m, q->n, w->ms, when, q->name, "exp_avg");
		same(q->rv, q->v, q->n, w->ms, when, q->name, "exp_avg_sq");
	}
	VALID(w->s);
}

/* One step of the optimizer and of the reference, checked. */
static void step_and_check(struct gworld *w, int k, double lr)
{
	struct tier_step_result res;
	struct ref_res rr;
	char when[160];

	opt_step(w, lr, &res);
	ref_step(w, lr, &rr);
	check_result(w, &res, &rr, k);
	snprintf(when, sizeof(when), "%s, step %d", w->c->name, k);
	check_state(w, when);
	printf("%s, step %d: applied %d, norm %.6g, clip %.6g, cpu %u / gpu %u shards (offload_fraction %.3f), %.1f ms\n",
	       w->c->name, k, res.applied, res.grad_norm, res.clip_coef, res.cpu_shards,
	       res.gpu_shards, res.offload_fraction, res.step_s * 1e3);
}

/* ------------------------------------------------------------ tests */

START_TEST(gpu_optim_steps)
{
	struct gworld w;

	world_open(&w, &k_cases[_i], 101 + (uint64_t)_i);
	for (int k = 0; k < (int)ARRAY_SIZE(k_lrs); k++) {
		world_grads(&w);
		step_and_check(&w, k, k_lrs[k]);
	}
	world_close(&w);
}
END_TEST

START_TEST(gpu_optim_overflow)
{
	const struct gcase *c = &k_cases[k_ocases[_i].base];
	struct gparam *q;
	struct gworld w;
	size_t mid;

	ck_assert(on_dev(c->gmem, 2, false));
	world_open(&w, c, 777 + (uint64_t)_i);
	for (int k = 0; k < 2; k++) {
		world_grads(&w);
		step_and_check(&w, k, k_lrs[k]);
	}
	/* the bad value in parameter 2's device gradient (and the reference's) */
	world_grads(&w);
	q = &w.pa[2];
	mid = q->n / 2;
	put(c->gdt, q->g, mid, k_ocases[_i].bad);
	CU(cudaMemcpy((char *)q->dg + mid * tier_dtype_size((enum tier_dtype)c->gdt),
		      (char *)q->g + mid * tier_dtype_size((enum tier_dtype)c->gdt), tier_dtype_size((enum tier_dtype)c->gdt),
		      cudaMemcpyHostToDevice));
	CU(cudaDeviceSynchronize());
	step_and_check(&w, 2, 3e-3); /* applied false; state and outputs as they were */
	ck_assert_uint_eq(w.step, 2);
	world_grads(&w);
	step_and_check(&w, 3, 0.0); /* applied, step 3, with lr 3e-3 from the skipped step */
	world_close(&w);
}
END_TEST

/*
 * A checkpoint on the CUDA lane, a step lost, the store closed and
 * reopened, the optimizer resumed: the steps after it equal the reference
 * bit for bit (state and outputs), as the uninterrupted run's would.
 */
START_TEST(gpu_optim_checkpoint)
{
	const struct gcase *c = &k_cases[_i == 0 ? 0 : 1];
	struct tier_store_params sp = { .size = sizeof(struct tier_store_params),
		.dram_capacity = DRAM, .hbm_backend = "cuda", .hbm_capacity = 1 * MiB };
	struct {
		float *p;
		void *m, *v;
	} snap[NP];
	uint64_t gen = 0, snap_step;
	double snap_lr;
	struct gworld w;
	int rc;

	g_keep_files = true;
	world_open(&w, c, 4242 + (uint64_t)_i);
	g_keep_files = false;
	for (int k = 0; k < 2; k++) {
		world_grads(&w);
		step_and_check(&w, k, k_lrs[k]);
	}
	rc = tier_optim_checkpoint(w.o, &gen);
	ck_assert_msg(rc == 0, "checkpoint: %s", tier_last_error());
	ck_assert_uint_eq(gen, 1);
	for (size_t i = 0; i < NP; i++) {
		snap[i].p = xmalloc(w.pa[i].n * 4);
		snap[i].m = xmalloc(w.pa[i].n * w.ms);
		snap[i].v = xmalloc(w.pa[i].n * w.ms);
		memcpy(snap[i].p, w.pa[i].p, w.pa[i].n * 4);
		memcpy(snap[i].m, w.pa[i].m, w.pa[i].n * w.ms);
		memcpy(snap[i].v, w.pa[i].v, w.pa[i].n * w.ms);
	}
	snap_step = w.step;
	snap_lr = w.lr;
	/* A step after the checkpoint, then gone without one. */
	world_grads(&w);
	step_and_check(&w, 2, k_lrs[2]);
	ck_assert_int_eq(tier_optim_destroy(w.o), 0);
	ck_assert_int_eq(tier_store_close(w.s), 0);
	for (size_t i = 0; i < NP; i++) {
		memcpy(w.pa[i].p, snap[i].p, w.pa[i].n * 4);
		memcpy(w.pa[i].m, snap[i].m, w.pa[i].n * w.ms);
		memcpy(w.pa[i].v, snap[i].v, w.pa[i].n * w.ms);
		free(snap[i].p);
		free(snap[i].m);
		free(snap[i].v);
	}
	w.step = snap_step;
	w.lr = snap_lr;
	rc = tier_store_open(w.man, &sp, &w.s);
	ck_assert_msg(rc == 0, "reopen: %s", tier_last_error());
	rc = tier_optim_resume(w.s, NULL, &w.o);
	ck_assert_msg(rc == 0, "resume: %s", tier_last_error());
	ck_assert_uint_eq(tier_optim_step_count(w.o), 2);
	for (int k = 2; k < (int)ARRAY_SIZE(k_lrs); k++) {
		world_grads(&w);
		step_and_check(&w, k, k_lrs[k]);
	}
	world_close(&w);
}
END_TEST

START_TEST(gpu_optim_fill_failure)
{
	const struct gcase *c = &k_cases[k_fcases[_i].base];
	int64_t count = k_fcases[_i].count;
	struct tier_step_result res;
	struct ref_res rr;
	struct tier_obj *f;
	struct gworld w;
	char when[200];
	void *ptr;
	int rc;

	NEED_FAULTS();
	world_open(&w, c, 900 + (uint64_t)_i);
	for (int k = 0; k < 2; k++) {
		world_grads(&w);
		step_and_check(&w, k, k_lrs[k]);
	}
	world_grads(&w);
	/* DRAM emptied, so the step's first NVMe operation is a fill. */
	ck_assert_int_eq(tier_store_flush(w.s), 0);
	ck_assert_int_eq(tier_obj_create(w.s, "filler", DRAM, &f), 0);
	ck_assert_int_eq(tier_obj_acquire(w.s, f, TIER_DRAM, TIER_ACQUIRE_WRITE | TIER_ACQUIRE_DISCARD,
					  &ptr), 0);
	ck_assert_int_eq(tier_obj_release(w.s, f, TIER_DRAM, false), 0);
	ck_assert_int_eq(tier_obj_destroy(w.s, f), 0);
	ck_assert_int_eq(ts_fault_arm(TIER_FAULT_NVME_IO_ERR, 1, count, -EIO), 0);
	if (count == TIER_FAULT_PERSISTENT) {
		rc = opt_try(&w, k_lrs[2], &res);
		ck_assert_msg(rc == -EIO, "%s: the step with a persistent EIO gave %d: %s", c->name, rc,
			      tier_last_error());
		printf("%s: step 2 failed as it should: %s\n", c->name, tier_last_error());
	}
	/* Transient: retried inside; persistent: the same step again, lifted. */
	if (count == TIER_FAULT_PERSISTENT)
		ts_fault_disarm(TIER_FAULT_NVME_IO_ERR);
	opt_step(&w, k_lrs[2], &res);
	ck_assert_uint_ge(ts_fault_fired(TIER_FAULT_NVME_IO_ERR), 1);
	ts_fault_disarm(TIER_FAULT_NVME_IO_ERR);
	ref_step(&w, k_lrs[2], &rr);
	check_result(&w, &res, &rr, 2);
	snprintf(when, sizeof(when), "%s, step 2 %s", c->name,
		 count == 1 ? "with one EIO retried" : "completed after a persistent EIO");
	check_state(&w, when);
	printf("%s: %s: equal to the reference\n", c->name, when);
	world_grads(&w);
	step_and_check(&w, 3, k_lrs[3]);
	world_close(&w);
}
END_TEST

static Suite *gpu_optim_suite(void)
{
	Suite *s = suite_create("gpu-optim");
	TCase *tc = tcase_create("cuda");

	tcase_add_unchecked_fixture(tc, t_case_setup, t_case_teardown);
	tcase_set_timeout(tc, 120);
	tcase_add_loop_test(tc, gpu_optim_steps, 0, (int)ARRAY_SIZE(k_cases));
	tcase_add_loop_test(tc, gpu_optim_overflow, 0, (int)ARRAY_SIZE(k_ocases));
	tcase_add_loop_test(tc, gpu_optim_checkpoint, 0, 2);
	suite_add_tcase(s, tc);

	tc = t_tcase_faults("cuda-faults");
	tcase_add_unchecked_fixture(tc, t_case_setup, t_case_teardown);
	tcase_set_timeout(tc, 120);
	tcase_add_loop_test(tc, gpu_optim_fill_failure, 0, (int)ARRAY_SIZE(k_fcases));
	suite_add_tcase(s, tc);
	return s;
}

#endif /* TIER_HAVE_CUDA */

int main(void)
{
#if TIER_HAVE_CUDA
	if (!t_gpu_present(NULL))
		return T_EXIT_SKIP;
	return t_run_suite(gpu_optim_suite());
#else
	fprintf(stderr, "no GPU: this build has no CUDA support (meson -Dcuda=enabled)\n");
	return T_EXIT_SKIP;
#endif
}
