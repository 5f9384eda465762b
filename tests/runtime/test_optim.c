/*
 * test_optim.c - the optimizer (runtime/optim/optim.c, prefetch/) against its
 * contract in include/tierstore.h ("optimizer"), through the public API
 * only, on a real store: NVMe backing files in a scratch directory, a DRAM
 * tier smaller than the optimizer state, and the emulated ("host") HBM
 * tier.
 *
 * The reference is an in-memory optimizer written here from the kernels'
 * public functions: the global norm is the sum, in parameter id order and
 * in double, of each parameter's sum of squares from tier_grad_check()
 * (a fresh struct tier_grad_stats per parameter, no pool), norm =
 * sqrt(total) / loss_scale, clip_coef = tier_clip_coef(norm, max) when
 * max_grad_norm > 0 else 1, grad_scale = clip_coef / loss_scale; a
 * nonfinite gradient anywhere skips the step (state, outputs and the step
 * count stay), and a dynamic scale follows a struct tier_loss_scaler fed
 * every step; each parameter is then updated by tier_adam_step() on the
 * whole parameter in memory.  The optimizer must equal it bit for bit
 * (memcmp of master weights, both moments and the output copies).
 *
 * Covers:
 *  - the matrix (optim_matrix): offload_fraction 1 (no HBM tier), 0 (all
 *    on the emulated HBM tier), 0.5, TIER_OFFLOAD_AUTO, 0.5 without an
 *    HBM tier (all on the CPU); bf16 moments; q8 moments (both lanes,
 *    stochastic; CPU only, nearest: the reference keeps codes and block
 *    scales, the read-back's fp32 values must be tier_q8_decode of them,
 *    and every shard object is state_bytes() of its elements, shards cut
 *    at multiples of 256); fp32/bf16/fp16 and mixed
 *    gradients and output copies (and none); decoupled and L2 weight
 *    decay; clipping that clips; a static loss scale of 1024 (gradients
 *    carry it); a dynamic loss scale (grows during the run); the streaming
 *    form in shuffled order; NVMe completions delayed (fault site
 *    nvme_delay, persistent); O_DIRECT with checksums.  Four parameters of
 *    ragged sizes (1, 4099, 70000, 300000 elements; the first starts at
 *    zeros), 64 KiB shards, ~4.5 MB of state over a 2 MiB DRAM tier
 *    (the delayed cases: three parameters, ~0.9 MB over 512 KiB), 3-8
 *    steps with a learning rate that changes (TIER_LR_KEEP, lr 0).  After
 *    every step: the result's fields (applied, step, grad_norm and
 *    clip_coef exactly, loss scales, shard counts = the store objects
 *    "NAME#K", CPU/GPU split, NVMe bytes read and written when the state
 *    exceeds twice the DRAM tier, HBM traffic when everything runs
 *    there), tier_store_validate(), the outputs bit for bit; the state
 *    read back bit for bit after the first and the last step (an error in
 *    any step stays in it);
 *  - the GPU lane's options (optim_lane_options): matrix cases with shards
 *    on the emulated HBM tier again with TIER_GPU_GRAD_AHEAD=on and
 *    TIER_GPU_SLOTS of 1, 2, 3, 5 and 8, bit for bit as above;
 *  - overflow (optim_overflow): steps with +inf, -inf or nan at chosen
 *    positions (a one-element parameter, the middle of a parameter, the
 *    last element) in fp32/bf16/fp16 gradients, fp32 and q8 moments,
 *    static and dynamic scale,
 *    tier_optim_step and the streaming form: applied false, the state read
 *    back and the output buffers byte-identical to before, the step count
 *    unchanged; the dynamic scale's next_loss_scale follows a reference
 *    tier_loss_scaler (hysteresis, backoff, growth) and later steps carry
 *    the new scale;
 *  - golden data (optim_golden): the torch.optim cases of tests/golden
 *    ($TIER_GOLDEN) through the optimizer.  Their parameters are small
 *    (1031 and 4099 elements, 12-48 KiB of state, under the 64 KiB minimum
 *    shard), so the parameter given to the optimizer is the golden one
 *    repeated C times (C chosen for ~600 KB of state: ~10 shards, cut at
 *    places that fall anywhere inside a copy) with the gradient repeated
 *    alike, next to one plain copy as a parameter of its own, over a
 *    256 KiB DRAM tier (the least that holds four 64 KiB shards); all
 *    steps, every lr from lr.f32; every copy must end within the golden
 *    tolerances of test_adamw.c (1e-7 of the largest |param|, 1e-6 for
 *    the moments) and equal the in-memory kernel bit for bit (and each
 *    other); with all on the CPU and split with the HBM tier;
 *  - the streaming form (optim_stream): pushes in reverse and shuffled
 *    order give the same bytes as tier_optim_step on a twin optimizer;
 *    errors: push without begin, bad id, bad dtype, NULL buffer (-EINVAL,
 *    the step still ends normally), begin twice (an error with a detail),
 *    a parameter pushed twice (-EALREADY, the first push stands), a
 *    parameter missing at end (-ENODATA naming it, nothing updated, a
 *    following step works and counts from the old step count), end
 *    without begin;
 *  - a tier failing in the middle of a step (tier_failure), with the CPU
 *    lane alone and with both lanes (fp32 and q8 moments): a transient -EIO on a shard fill
 *    (nvme_io_err, once or as often as the NVMe tier retries, in the first
 *    fill of an emptied store or mid-step) in every step: each completes
 *    and equals the reference bit for bit; a persistent -EIO (first fill,
 *    or mid-step with some shards updated) or a failed fill (store_io):
 *    end returns the error naming a shard and the shards updated (and
 *    returns: no lane waits forever for the other), the step count stays;
 *    a step with other gradients, another lr and add_param are refused
 *    without changing the state; the same step again completes it, and
 *    the state (master weights, both moments, outputs) equals the
 *    reference's after it and after the later steps, a dynamic loss scale
 *    included;
 *  - q8 read and write (q8_write_read): fp32 moments written read back as
 *    tier_q8_decode(tier_q8_encode(x)) bit for bit, a read written back
 *    reads back the same, one moment written leaves the other, and the
 *    later steps equal the reference's from tier_q8_encode's codes;
 *  - creation (optim_create): tier_optim_params_init's defaults, the
 *    manifest's moment dtype, offload fraction and shard size taken when
 *    asked; NULL params (the defaults); bad moment dtypes, offload
 *    fractions 1.5 and -0.5, negative lr (-EINVAL naming the parameter),
 *    NULL store or out (-EINVAL); add_param: ids in
 *    order, names and sizes back, duplicate name (-EEXIST), numel 0 and
 *    NULL name (-EINVAL), inside a step (-EBUSY), no room at home
 *    (-ENOSPC, nothing left behind); read with a bad id; destroy frees the
 *    state objects;
 *  - lr values (lr_values): lr 0 (and -0.0) leaves the parameters bit for
 *    bit while the moments and step advance, as the reference at lr 0;
 *    TIER_LR_KEEP keeps the previous rate (0 included); created at lr 0;
 *    negative and non-finite values refused by begin and step, named;
 *  - sizes (size_errors, count_errors; a 10 s timeout): numel SIZE_MAX,
 *    2^60 + 12345, 2^32 shards and others refused in under 1 s with
 *    -EOVERFLOW or -ENOSPC naming numel, nothing left, stepping on;
 *    threads 100000 / 1025 / UINT32_MAX refused by create and
 *    tier_pool_create naming the value; store objects of 2^63 bytes and
 *    more refused with -ENOSPC;
 *  - what an optimizer holds (held_refusals): with one alive (created,
 *    two of them, partitioned over one rank, imported, resumed),
 *    tier_store_close is -EBUSY saying how many and the store stays open
 *    and working; tier_obj_destroy of its shard objects (also of a
 *    parameter in a group added later) is -EBUSY naming the object, which
 *    stays, and the next step works; a second resume of the same
 *    checkpoint is refused (-EBUSY); remove_param and destroy still free
 *    the objects, and the close then works;
 *  - one step at a time (concurrent_begin): two threads calling
 *    tier_optim_begin at once, 100 times: exactly one gets 0, the other
 *    -EBUSY ("already begun"), and the step begun works; two calling
 *    tier_optim_step at once, 50 times: each 0 or -EBUSY, at least one 0 (run under
 *    TSan: the guard is a compare-exchange).
 */
#include "config.h"

#include <check.h>
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/fault.h"
#include "common/options.h"
#include "kernels/adam_math.h"
#include "t_helpers.h"
#include "tierstore/toolkit.h"

#define KiB (1ull << 10)
#define MiB (1ull << 20)
#define U64(x) ((unsigned long long)(x))

#define SHARD (64 * KiB)
#define MAXP 8

static char *g_dir;

/* What the optimizer resolved (its moment dtype, its split now), and
 * parameter @id as it is: the info structs, asserted to succeed. */
static struct tier_optim_info optim_info_of(const struct tier_optim *o)
{
	struct tier_optim_info oi;

	ck_assert_int_eq(tier_optim_info(o, &oi), 0);
	return oi;
}

static struct tier_param_info param_info_of(const struct tier_optim *o, uint32_t id)
{
	struct tier_param_info pi;

	ck_assert_int_eq(tier_optim_param_info(o, id, &pi), 0);
	return pi;
}

/* Tables of random gradient values, per dtype and scale (gen_grad). */
#define TBL_N 400009u
#define TBL_MAX 16

static struct {
	int dt;
	double scale;
	void *v;
} g_tbl[TBL_MAX];

static void setup(void)
{
	ts_fault_reset_all();
	g_dir = t_mkdtemp();
}

static void teardown(void)
{
	ts_fault_reset_all();
	t_rmtree(g_dir);
	free(g_dir);
	g_dir = NULL;
	for (int t = 0; t < TBL_MAX; t++) {
		free(g_tbl[t].v);
		g_tbl[t].v = NULL;
	}
}

/* ------------------------------------------------------------ helpers */

static float f_bits(uint32_t u)
{
	float f;

	memcpy(&f, &u, sizeof(f));
	return f;
}

static uint32_t bits_f(float f)
{
	uint32_t u;

	memcpy(&u, &f, sizeof(u));
	return u;
}

/* An element of a 32- or 16-bit array as a float (for messages). */
static float elem_f(const void *a, int dt, size_t i)
{
	uint16_t h;

	if (dt == TIER_FP32)
		return ((const float *)a)[i];
	h = ((const uint16_t *)a)[i];
	if (dt == TIER_BF16)
		return f_bits((uint32_t)h << 16);
	{
		int e = (h >> 10) & 31, m = h & 1023;
		float v = e == 0 ? ldexpf((float)m, -24)
			  : e == 31 ? (m ? NAN : INFINITY)
				    : ldexpf((float)(1024 + m), e - 25);

		return (h & 0x8000) ? -v : v;
	}
}

/* fp16 bits of @f, which must be zero or a normal fp16 value exactly;
 * *ok cleared when it is not.  (No ck_assert here: it runs per element,
 * and every Check assertion sends a message to the parent process.) */
static uint16_t f16_exact(float f, bool *ok)
{
	uint32_t u = bits_f(f);
	uint16_t sign = (uint16_t)((u >> 16) & 0x8000);
	int e;

	if ((u & 0x7fffffffu) == 0)
		return sign;
	e = (int)((u >> 23) & 255) - 127 + 15;
	if (e < 1 || e > 30 || (u & 0x1fffu) != 0)
		*ok = false;
	return (uint16_t)(sign | (uint16_t)(e << 10) | (uint16_t)((u >> 13) & 0x3ff));
}

/*
 * @n random values of @dt, times @scale (a power of two): exactly
 * representable in @dt, |x| in [2^-12, 2^2) or zero, so that scaling is
 * exact and stays finite (fp16 up to scale 2^13).
 */
static void gen_values(void *buf, int dt, size_t n, uint64_t seed, double scale)
{
	uint64_t s = seed * 0x9E3779B97F4A7C15ull + 0x1234567;
	unsigned mb = dt == TIER_FP32 ? 23 : dt == TIER_BF16 ? 7 : 10;
	float sc = (float)scale;
	bool ok = true;

	for (size_t i = 0; i < n; i++) {
		uint64_t r = t_rnd_next(&s);
		float x;

		if (r % 64 == 0) {
			x = 0.0f;
		} else {
			uint32_t sign = (uint32_t)(r >> 63) << 31;
			uint32_t e = (uint32_t)(127 - 12 + (int)((r >> 8) % 14));
			uint32_t mant = (uint32_t)(t_rnd_next(&s) >> 20) & ((1u << mb) - 1);

			x = f_bits(sign | e << 23 | mant << (23 - mb));
		}
		x *= sc;
		if (dt == TIER_FP32)
			((float *)buf)[i] = x;
		else if (dt == TIER_BF16)
			((uint16_t *)buf)[i] = (uint16_t)(bits_f(x) >> 16);
		else
			((uint16_t *)buf)[i] = f16_exact(x, &ok);
	}
	ck_assert_msg(ok, "gen_values: scale %g overflows fp16", scale);
}

/*
 * Gradients are windows of a table of random values per dtype and scale,
 * made once (per-element work is slow under the sanitizers; a memcpy is
 * one range access): @n elements from an offset picked by @seed.
 */
static void gen_grad(void *buf, int dt, size_t n, uint64_t seed, double scale)
{
	int t;
	uint64_t s = seed * 0x2545F4914F6CDD1Dull + 99;
	size_t off;

	ck_assert_uint_lt(n, TBL_N);
	for (t = 0; t < TBL_MAX && g_tbl[t].v; t++)
		if (g_tbl[t].dt == dt && g_tbl[t].scale == scale)
			break;
	ck_assert_int_lt(t, TBL_MAX);
	if (!g_tbl[t].v) {
		g_tbl[t].v = malloc((size_t)TBL_N * tier_dtype_size((enum tier_dtype)dt));
		ck_assert_ptr_nonnull(g_tbl[t].v);
		gen_values(g_tbl[t].v, dt, TBL_N, 31 + (uint64_t)t, scale);
		g_tbl[t].dt = dt;
		g_tbl[t].scale = scale;
	}
	off = t_rnd_below(&s, TBL_N - n + 1);
	memcpy(buf, (char *)g_tbl[t].v + off * tier_dtype_size((enum tier_dtype)dt), n * tier_dtype_size((enum tier_dtype)dt));
}

/* Puts +inf ('i'), -inf ('-') or nan ('n') at element @pos. */
static void put_bad(void *buf, int dt, size_t pos, char kind)
{
	if (dt == TIER_FP32) {
		((float *)buf)[pos] = kind == 'n' ? NAN : kind == '-' ? -INFINITY : INFINITY;
		return;
	}
	if (dt == TIER_BF16)
		((uint16_t *)buf)[pos] = kind == 'n' ? 0x7fc1 : kind == '-' ? 0xff80 : 0x7f80;
	else
		((uint16_t *)buf)[pos] = kind == 'n' ? 0x7e01 : kind == '-' ? 0xfc00 : 0x7c00;
}

/* The first index where @a and @b (n elements of @es bytes) differ, or -1. */
static long first_diff(const void *a, const void *b, size_t n, size_t es)
{
	if (memcmp(a, b, n * es) == 0)
		return -1;
	for (size_t i = 0; i < n; i++)
		if (memcmp((const char *)a + i * es, (const char *)b + i * es, es))
			return (long)i;
	return -1;
}

/*
 * q8 moments (TIER_Q8): the reference keeps each moment as n codes and
 * ceil(n / TIER_Q8_BLOCK) fp32 scales (tier_adam_tensors.exp_avg_scale,
 * .exp_avg_sq_scale); tier_optim_read gives them as fp32 values, which
 * must be tier_q8_decode of the reference's codes bit for bit.
 */
static size_t t_q8_nb(size_t n)
{
	return (n + TIER_Q8_BLOCK - 1) / TIER_Q8_BLOCK;
}

/* Bytes per element of the reference's moments (q8: the codes). */
static size_t mom_size(int md)
{
	return tier_dtype_size((enum tier_dtype)md);
}

/* Bytes per element of the moments tier_optim_read gives (q8: fp32). */
static size_t read_size(int md)
{
	return md == TIER_Q8 ? 4 : tier_dtype_size((enum tier_dtype)md);
}

/* The dtype of the moments tier_optim_read gives. */
static int read_dt(int md)
{
	return md == TIER_Q8 ? TIER_FP32 : md;
}

/* The state bytes of @n elements (docs/optimizer.md, "Shards"): master
 * fp32 and both moments; q8: 6 bytes per element and two fp32 scales per
 * block of TIER_Q8_BLOCK. */
static uint64_t state_bytes(int md, uint64_t n)
{
	if (md == TIER_Q8)
		return n * 6 + t_q8_nb(n) * 8;
	return n * (4 + 2 * (uint64_t)tier_dtype_size((enum tier_dtype)md));
}

/* ------------------------------------------------------------ a world */

/* The store under the optimizer. */
struct scfg {
	uint64_t dram;          /* bytes */
	uint64_t hbm;           /* bytes of the "host" HBM tier; 0: none */
	bool direct, csum;
	const char *moment;     /* the manifest's optimizer.moment_dtype */
	const char *offload;    /* the manifest's optimizer.offload_fraction */
	const char *shard;      /* the manifest's optimizer.shard_size */
	uint64_t nvme;          /* NVMe capacity; 0: 64 MiB */
};

/* One parameter: the optimizer's and the reference's. */
struct param {
	char name[48];
	size_t n;
	uint32_t id;
	float *p;               /* reference master weights */
	void *m, *v;            /* reference moments (the moment dtype) */
	float *ms, *vs;         /* q8: their blocks' scales; else NULL */
	void *g;                /* this step's gradient */
	int gdt;
	void *out, *rout;       /* the optimizer's output buffer, the reference's */
	int odt;                /* -1: no output */
	bool dmem;              /* pushed as device memory (the emulated HBM's) */
	/* read back */
	float *rp;
	void *rm, *rv;          /* tier_optim_read's (q8: fp32 values) */
	uint32_t shards;        /* store objects NAME#K */
};

struct world {
	char sub[32];
	struct scfg sc;
	struct tier_manifest *man;
	struct tier_store *s;
	struct tier_optim *o;
	struct tier_optim_params hp;
	enum tier_dtype md;
	int rounding, out_rounding; /* the optimizer's (optimizer.rounding, .out_rounding) */
	size_t np;
	struct param pa[MAXP];
	bool outs;              /* pass output buffers */
	/* the reference optimizer */
	double lr;
	uint64_t step;
	double scale;
	struct tier_loss_scaler scaler;
};

/* What the reference says a step does. */
struct ref_res {
	bool applied;
	uint64_t step;
	double norm, clip, loss_scale, next_loss_scale;
};

#define VALID(s)                                                                        \
	do {                                                                           \
		int vrc_ = tier_store_validate(s);                                     \
		ck_assert_msg(vrc_ == 0, "line %d: validate: %d: %s", __LINE__, vrc_,  \
			      tier_last_error());                                      \
	} while (0)

/* The store of @c's manifest, opened with tier_store_params.flags @flags. */
static void world_open_flags(struct world *w, const char *sub, const struct scfg *c,
			     unsigned flags)
{
	struct tier_store_params sp = { .size = sizeof(struct tier_store_params),
		.dram_capacity = c->dram,
		.hbm_backend = c->hbm ? "host" : "none",
		.hbm_capacity = c->hbm,
		.flags = flags,
	};
	char text[2048];
	int n, rc;

	memset(w, 0, sizeof(*w));
	snprintf(w->sub, sizeof(w->sub), "%s", sub);
	w->sc = *c;
	n = snprintf(text, sizeof(text),
		     "gpu:\n  device: none\n"
		     "dram:\n  capacity: %llu\n"
		     "optimizer:\n  shard_size: %s\n  moment_dtype: %s\n  offload_fraction: %s\n"
		     "nvme:\n  stripe_unit: 64KiB\n  checksum: %s\n  direct: %s\n"
		     "  paths:\n    - path: %s/%s/\n      capacity: %llu\n      create: true\n",
		     U64(c->dram), c->shard ? c->shard : "64KiB", c->moment ? c->moment : "fp32",
		     c->offload ? c->offload : "1", c->csum ? "crc32c" : "none",
		     c->direct ? "true" : "false", g_dir, sub, U64(c->nvme ? c->nvme : 64 * MiB));
	ck_assert_int_lt(n, (int)sizeof(text));
	rc = tier_manifest_parse(text, (size_t)n, "optim-test.yaml", 0, &w->man);
	ck_assert_msg(rc == 0, "manifest refused: %s\n%s", tier_last_error(), text);
	rc = tier_store_open(w->man, &sp, &w->s);
	ck_assert_msg(rc == 0, "store open: %d: %s", rc, tier_last_error());
	ck_assert(tier_store_has_level(w->s, TIER_HBM) == (c->hbm != 0));
	ck_assert(tier_store_home(w->s) == TIER_NVME);
	VALID(w->s);
}

/* A scratch store: its files go when it closes. */
static void world_open(struct world *w, const char *sub, const struct scfg *c)
{
	world_open_flags(w, sub, c, TIER_STORE_SCRATCH);
}

/* Parameters every world uses unless a test sets them: torch's AdamW
 * defaults (lr 1e-3, betas 0.9/0.999, eps 1e-8, weight decay 0.01, as
 * params_defaults checks), fp32 moments, every shard on the CPU. */
static void hp_base(struct tier_optim_params *p)
{
	tier_optim_params_init(p);
	p->moment_dtype = TIER_FP32;
	p->offload_fraction = 1.0;
	p->shard_size = SHARD;
	p->threads = 2;
}

static void world_create(struct world *w, const struct tier_optim_params *hp)
{
	int rc = tier_optim_create(w->s, hp, &w->o);

	ck_assert_msg(rc == 0, "optim create: %d: %s", rc, tier_last_error());
	ck_assert_ptr_nonnull(w->o);
	w->hp = *hp;
	w->md = optim_info_of(w->o).moment_dtype;
	{
		struct tier_optim_info oi;

		ck_assert_int_eq(tier_optim_info(w->o, &oi), 0);
		w->rounding = oi.rounding;
		w->out_rounding = oi.out_rounding;
		ck_assert_uint_eq(oi.seed, 0); /* the references' seeds assume it */
		if (hp->rounding >= 0)
			ck_assert_int_eq(oi.rounding, hp->rounding);
		else
			ck_assert_int_eq(oi.rounding, TIER_ROUND_STOCHASTIC); /* the default */
		if (hp->out_rounding >= 0)
			ck_assert_int_eq(oi.out_rounding, hp->out_rounding);
		else
			ck_assert_int_eq(oi.out_rounding, TIER_ROUND_NEAREST);
	}
	if (hp->moment_dtype >= 0)
		ck_assert_int_eq(w->md, hp->moment_dtype);
	w->lr = hp->lr;
	w->step = 0;
	w->scale = hp->loss_scale;
	if (hp->dynamic_loss_scale)
		ck_assert_int_eq(tier_loss_scaler_init(&w->scaler, hp->loss_scale,
						       hp->min_loss_scale, hp->growth_factor,
						       hp->backoff_factor, hp->growth_interval,
						       hp->hysteresis),
				 0);
	ck_assert_uint_eq(tier_optim_nparams(w->o), 0);
}

static void sentinel(void *p, size_t len, uint64_t seed)
{
	uint64_t s = seed | 1;

	for (size_t i = 0; i < len; i++)
		((unsigned char *)p)[i] = (unsigned char)(t_rnd_next(&s) >> 56);
}

/*
 * Adds parameter @name of @n elements with initial values @init (NULL:
 * zeros, init NULL to the optimizer), gradients of @gdt and an output
 * copy of @odt (-1: none); @seed fills the output buffers' first bytes.
 */
static struct param *world_add_init(struct world *w, const char *name, size_t n,
				    const float *init, int gdt, int odt, uint64_t seed)
{
	struct param *q = &w->pa[w->np];
	size_t ms = mom_size(w->md), rs = read_size(w->md);
	uint32_t id = UINT32_MAX;
	int rc;

	ck_assert_uint_lt(w->np, MAXP);
	snprintf(q->name, sizeof(q->name), "%s", name);
	q->n = n;
	q->gdt = gdt;
	q->odt = odt;
	q->p = calloc(n, 4);
	q->m = calloc(n, ms);
	q->v = calloc(n, ms);
	q->g = malloc(n * 4);
	q->rp = malloc(n * 4);
	q->rm = malloc(n * rs);
	q->rv = malloc(n * rs);
	ck_assert(q->p && q->m && q->v && q->g && q->rp && q->rm && q->rv);
	if (w->md == TIER_Q8) {
		/* zeros: the optimizer's initial state (codes 0, scales 0) */
		q->ms = calloc(t_q8_nb(n), 4);
		q->vs = calloc(t_q8_nb(n), 4);
		ck_assert(q->ms && q->vs);
	}
	if (odt >= 0) {
		q->out = malloc(n * tier_dtype_size((enum tier_dtype)odt));
		q->rout = malloc(n * tier_dtype_size((enum tier_dtype)odt));
		ck_assert(q->out && q->rout);
		sentinel(q->out, n * tier_dtype_size((enum tier_dtype)odt), seed ^ 0x5a5a);
		memcpy(q->rout, q->out, n * tier_dtype_size((enum tier_dtype)odt));
	}
	if (init)
		memcpy(q->p, init, n * 4);
	rc = tier_optim_add_param(w->o, name, n, init, &id);
	ck_assert_msg(rc == 0, "add_param %s: %d: %s", name, rc, tier_last_error());
	ck_assert_uint_eq(id, w->np);
	q->id = id;
	w->np++;
	ck_assert_uint_eq(tier_optim_nparams(w->o), w->np);
	ck_assert_str_eq(param_info_of(w->o, id).name, name);
	ck_assert_uint_eq(param_info_of(w->o, id).numel, n);
	return q;
}

/* world_add_init with random initial values in [-0.1, 0.1), or zeros. */
static struct param *world_add(struct world *w, const char *name, size_t n, bool zeros, int gdt,
			       int odt, uint64_t seed)
{
	float *init = NULL;
	struct param *q;

	if (!zeros) {
		uint64_t s = seed;

		init = malloc(n * 4);
		ck_assert_ptr_nonnull(init);
		for (size_t i = 0; i < n; i++)
			init[i] = (float)((double)(t_rnd_next(&s) >> 11) * 0x1p-53 - 0.5) * 0.2f;
	}
	q = world_add_init(w, name, n, init, gdt, odt, seed);
	free(init);
	return q;
}

/* Counts the store objects NAME#K of each parameter; their sizes are at
 * most @shard bytes and cover the parameter's state: shard K holds
 * elements [K x shard_elems, ...) (shard_elems a multiple of 64, of
 * TIER_Q8_BLOCK with q8 moments), state_bytes() of them. */
static uint32_t world_count_shards(struct world *w, uint64_t shard)
{
	uint32_t total = 0;
	struct tier_optim_info oi;
	uint64_t align = w->md == TIER_Q8 ? TIER_Q8_BLOCK : 64;

	ck_assert_int_eq(tier_optim_info(w->o, &oi), 0);
	ck_assert_msg(oi.shard_elems > 0 && oi.shard_elems % align == 0,
		      "shard_elems %llu is not a multiple of %llu", U64(oi.shard_elems), U64(align));
	ck_assert_uint_eq(oi.shard_bytes, state_bytes(w->md, oi.shard_elems));

	for (size_t i = 0; i < w->np; i++) {
		struct param *q = &w->pa[i];
		uint64_t bytes = 0;
		char nm[80];
		struct tier_obj *ob;
		uint32_t k;

		uint64_t largest = 0;

		for (k = 0;; k++) {
			snprintf(nm, sizeof(nm), "%s#%u", q->name, k);
			ob = tier_obj_find(w->s, nm);
			if (!ob)
				break;
			if (tier_obj_size(ob) > largest)
				largest = tier_obj_size(ob);
			bytes += tier_obj_size(ob);
			if ((uint64_t)k * oi.shard_elems < q->n) {
				uint64_t left = q->n - (uint64_t)k * oi.shard_elems;
				uint64_t want = state_bytes(w->md, left < oi.shard_elems ? left
										 : oi.shard_elems);

				ck_assert_msg(tier_obj_size(ob) == want,
					      "%s: %u bytes, want %llu (%llu elements of %s state)",
					      nm, (unsigned)tier_obj_size(ob), U64(want),
					      U64(left < oi.shard_elems ? left : oi.shard_elems),
					      t_dtype_name(w->md));
			}
		}
		ck_assert_msg(largest <= shard, "%s: a shard of %llu bytes > shard size %llu", q->name,
			      U64(largest), U64(shard));
		ck_assert_msg(k > 0, "no store object %s#0", q->name);
		ck_assert_msg(bytes >= state_bytes(w->md, q->n), "%s: %u shards of %llu bytes for %zu elements (%llu bytes of state)",
			      q->name, k, U64(bytes), q->n, U64(state_bytes(w->md, q->n)));
		ck_assert_uint_ge(k, (state_bytes(w->md, q->n) + shard - 1) / shard);
		ck_assert_uint_eq(k, (q->n + oi.shard_elems - 1) / oi.shard_elems);
		q->shards = k;
		total += k;
	}
	return total;
}

static uint64_t world_state_bytes(const struct world *w)
{
	uint64_t b = 0;

	for (size_t i = 0; i < w->np; i++)
		b += state_bytes(w->md, w->pa[i].n);
	return b;
}

/* Fills every gradient for step @k (the reference's current scale). */
static void world_grads(struct world *w, uint64_t seed, int k)
{
	for (size_t i = 0; i < w->np; i++) {
		struct param *q = &w->pa[i];

		gen_grad(q->g, q->gdt, q->n, seed + (uint64_t)k * 131 + i * 7, w->scale);
	}
}

/* The reference step. */
static void ref_step(struct world *w, double lr, struct ref_res *rr)
{
	double total = 0.0;
	bool nonfinite = false;

	if (lr != TIER_LR_KEEP)
		w->lr = lr;
	for (size_t i = 0; i < w->np; i++) {
		struct tier_grad_stats st = { 0 };

		ck_assert_int_eq(tier_grad_check(NULL, w->pa[i].g, (enum tier_dtype)w->pa[i].gdt,
						 w->pa[i].n, &st),
				 0);
		total += st.sumsq;
		nonfinite |= st.nonfinite;
	}
	memset(rr, 0, sizeof(*rr));
	rr->loss_scale = w->scale;
	if (w->hp.dynamic_loss_scale) {
		ck_assert(tier_loss_scaler_update(&w->scaler, nonfinite) == nonfinite);
		rr->next_loss_scale = w->scaler.scale;
	} else {
		rr->next_loss_scale = w->scale;
	}
	rr->applied = !nonfinite;
	if (!nonfinite) {
		struct tier_adam_params ap;

		rr->norm = sqrt(total) / w->scale;
		rr->clip = w->hp.max_grad_norm > 0 ? tier_clip_coef(rr->norm, w->hp.max_grad_norm)
						   : 1.0;
		w->step++;
		ap = (struct tier_adam_params){ .size = sizeof(struct tier_adam_params),
			.lr = w->lr,
			.beta1 = w->hp.beta1,
			.beta2 = w->hp.beta2,
			.eps = w->hp.eps,
			.weight_decay = w->hp.weight_decay,
			.decoupled = w->hp.decoupled,
			.step = w->step,
			.grad_scale = rr->clip / w->scale,
			.rounding = w->rounding,
			.out_rounding = w->out_rounding,
		};
		for (size_t i = 0; i < w->np; i++) {
			struct param *q = &w->pa[i];
			struct tier_adam_tensors t = {
				.n = q->n,
				.param = q->p,
				.exp_avg = q->m,
				.exp_avg_sq = q->v,
				.exp_avg_scale = q->ms,
				.exp_avg_sq_scale = q->vs,
				.moment_dtype = w->md,
				.grad = q->g,
				.grad_dtype = (enum tier_dtype)q->gdt,
				.param_out = q->odt >= 0 ? q->rout : NULL,
				.out_dtype = q->odt >= 0 ? (enum tier_dtype)q->odt : TIER_FP32,
			};

			ap.seed = sr_param_seed(0, (uint32_t)i);
			ck_assert_int_eq(tier_adam_step(NULL, &ap, &t), 0);
		}
	}
	rr->step = w->step;
	w->scale = rr->next_loss_scale;
}

static struct tier_tensor grad_t(const struct param *q)
{
	return (struct tier_tensor){ .ptr = q->g, .dtype = (enum tier_dtype)q->gdt,
				     .mem = q->dmem ? TIER_MEM_DEVICE : TIER_MEM_HOST, .numel = q->n };
}

static struct tier_tensor out_t(const struct param *q)
{
	return (struct tier_tensor){ .ptr = q->odt >= 0 ? q->out : NULL,
				     .dtype = q->odt >= 0 ? (enum tier_dtype)q->odt : TIER_FP32,
				     .mem = q->dmem ? TIER_MEM_DEVICE : TIER_MEM_HOST, .numel = q->n };
}

/* How a step is driven. */
enum drive { D_STEP, D_FORWARD, D_REVERSE, D_SHUFFLE };

/* The optimizer's step: tier_optim_step or begin / push in some order /
 * end; its result (begin and the pushes must work). */
static int try_step(struct world *w, double lr, enum drive d, uint64_t seed,
		    struct tier_step_result *res)
{
	struct tier_tensor g[MAXP], out[MAXP];
	uint32_t order[MAXP];
	int rc;

	for (size_t i = 0; i < w->np; i++) {
		g[i] = grad_t(&w->pa[i]);
		out[i] = out_t(&w->pa[i]);
		order[i] = (uint32_t)i;
	}
	memset(res, 0xee, sizeof(*res));
	if (d == D_STEP)
		return tier_optim_step(w->o, lr, g, w->outs ? out : NULL, res);
	if (d == D_REVERSE)
		for (size_t i = 0; i < w->np; i++)
			order[i] = (uint32_t)(w->np - 1 - i);
	if (d == D_SHUFFLE) {
		uint64_t s = seed | 1;

		for (size_t i = w->np; i > 1; i--) {
			size_t j = t_rnd_below(&s, i);
			uint32_t t = order[i - 1];

			order[i - 1] = order[j];
			order[j] = t;
		}
	}
	rc = tier_optim_begin(w->o, lr);
	ck_assert_msg(rc == 0, "begin: %d: %s", rc, tier_last_error());
	for (size_t i = 0; i < w->np; i++) {
		uint32_t id = order[i];

		rc = tier_optim_push(w->o, id, &g[id], w->outs ? &out[id] : NULL);
		ck_assert_msg(rc == 0, "push %u: %d: %s", id, rc, tier_last_error());
	}
	return tier_optim_end(w->o, res);
}

/* try_step, which must work. */
static int opt_step(struct world *w, double lr, enum drive d, uint64_t seed,
		    struct tier_step_result *res)
{
	int rc = try_step(w, lr, d, seed, res);

	ck_assert_msg(rc == 0, "step (drive %d): %d: %s", (int)d, rc, tier_last_error());
	return rc;
}

/* The result against the reference's; @nshards: the shard count. */
static void check_result(struct world *w, const struct tier_step_result *r,
			 const struct ref_res *rr, uint32_t nshards, int k)
{
	ck_assert_msg(r->applied == rr->applied, "step %d: applied %d, want %d", k, r->applied,
		      rr->applied);
	ck_assert_msg(r->step == rr->step, "step %d: result.step %llu, want %llu", k,
		      U64(r->step), U64(rr->step));
	ck_assert_msg(r->loss_scale == rr->loss_scale, "step %d: loss_scale %.17g, want %.17g", k,
		      r->loss_scale, rr->loss_scale);
	ck_assert_msg(r->next_loss_scale == rr->next_loss_scale,
		      "step %d: next_loss_scale %.17g, want %.17g", k, r->next_loss_scale,
		      rr->next_loss_scale);
	ck_assert_msg(r->step_s >= 0 && r->cpu_stall_s >= 0 && r->gpu_stall_s >= 0 &&
			      r->stall_s == fmax(r->cpu_stall_s, r->gpu_stall_s) &&
			      r->stall_s <= r->step_s,
		      "step %d: step_s %g, stall_s %g (cpu %g, gpu %g): want the larger lane's, at most step_s",
		      k, r->step_s, r->stall_s, r->cpu_stall_s, r->gpu_stall_s);
	VALID(w->s);
	if (!rr->applied)
		return;
	ck_assert_msg(r->grad_norm == rr->norm, "step %d: grad_norm %.17g, want %.17g", k,
		      r->grad_norm, rr->norm);
	ck_assert_msg(r->clip_coef == rr->clip, "step %d: clip_coef %.17g, want %.17g", k,
		      r->clip_coef, rr->clip);
	ck_assert_msg(r->cpu_shards + r->gpu_shards == nshards,
		      "step %d: cpu_shards %u + gpu_shards %u != %u shards", k, r->cpu_shards,
		      r->gpu_shards, nshards);
	ck_assert_msg(r->offload_fraction >= 0 && r->offload_fraction <= 1, "step %d: offload_fraction %g",
		      k, r->offload_fraction);
	if (!w->sc.hbm) {
		/* no HBM tier: everything on the CPU */
		ck_assert_msg(r->gpu_shards == 0 && r->offload_fraction == 1.0,
			      "step %d: no HBM tier, but gpu_shards %u, offload_fraction %g", k,
			      r->gpu_shards, r->offload_fraction);
		ck_assert_uint_eq(r->h2d_bytes, 0);
		ck_assert_uint_eq(r->d2h_bytes, 0);
	}
	if (world_state_bytes(w) > 2 * w->sc.dram)
		ck_assert_msg(r->nvme_read_bytes > 0 && r->nvme_write_bytes > 0,
			      "step %d: %llu bytes of state over %llu of DRAM, but NVMe read %llu, written %llu",
			      k, U64(world_state_bytes(w)), U64(w->sc.dram), U64(r->nvme_read_bytes),
			      U64(r->nvme_write_bytes));
}

/* Parameter @q's state read back against the reference. */
static void check_read(struct world *w, struct param *q, const char *when)
{
	size_t ms = read_size(w->md);
	int rdt = read_dt(w->md);
	void *em = q->m, *ev = q->v; /* what the read must give */
	long d;
	int rc;

	if (w->md == TIER_Q8) {
		/* the reference's codes decoded */
		em = malloc(q->n * 4);
		ev = malloc(q->n * 4);
		ck_assert(em && ev);
		ck_assert_int_eq(tier_q8_decode(q->m, q->ms, q->n, TIER_Q8_EXP_AVG, em), 0);
		ck_assert_int_eq(tier_q8_decode(q->v, q->vs, q->n, TIER_Q8_EXP_AVG_SQ, ev), 0);
	}
	/* all ones: NaN in every dtype, which no state holds */
	memset(q->rp, 0xff, q->n * 4);
	memset(q->rm, 0xff, q->n * ms);
	memset(q->rv, 0xff, q->n * ms);
	rc = tier_optim_read(w->o, q->id, q->rp, q->rm, q->rv);
	ck_assert_msg(rc == 0, "%s: read %s: %d: %s", when, q->name, rc, tier_last_error());
	d = first_diff(q->rp, q->p, q->n, 4);
	ck_assert_msg(d < 0, "%s: %s: master[%ld] = %.9g (%08x), reference %.9g (%08x)", when,
		      q->name, d, (double)q->rp[d < 0 ? 0 : d], bits_f(q->rp[d < 0 ? 0 : d]),
		      (double)q->p[d < 0 ? 0 : d], bits_f(q->p[d < 0 ? 0 : d]));
	d = first_diff(q->rm, em, q->n, ms);
	ck_assert_msg(d < 0, "%s: %s: exp_avg[%ld] (%s) = %.9g, reference %.9g", when, q->name, d,
		      t_dtype_name(w->md), (double)elem_f(q->rm, rdt, d < 0 ? 0 : (size_t)d),
		      (double)elem_f(em, rdt, d < 0 ? 0 : (size_t)d));
	d = first_diff(q->rv, ev, q->n, ms);
	ck_assert_msg(d < 0, "%s: %s: exp_avg_sq[%ld] (%s) = %.9g, reference %.9g", when, q->name,
		      d, t_dtype_name(w->md), (double)elem_f(q->rv, rdt, d < 0 ? 0 : (size_t)d),
		      (double)elem_f(ev, rdt, d < 0 ? 0 : (size_t)d));
	if (em != q->m) {
		free(em);
		free(ev);
	}
}

/* The output buffers, and (@read) the state read back, against the
 * reference. */
static void check_state2(struct world *w, const char *when, bool read)
{
	for (size_t i = 0; i < w->np; i++) {
		struct param *q = &w->pa[i];
		long d;

		if (read)
			check_read(w, q, when);
		if (q->odt >= 0) {
			d = first_diff(q->out, q->rout, q->n, tier_dtype_size((enum tier_dtype)q->odt));
			ck_assert_msg(d < 0, "%s: %s: out[%ld] (%s) = %.9g, reference %.9g", when,
				      q->name, d, t_dtype_name(q->odt),
				      (double)elem_f(q->out, q->odt, d < 0 ? 0 : (size_t)d),
				      (double)elem_f(q->rout, q->odt, d < 0 ? 0 : (size_t)d));
		}
	}
	VALID(w->s);
}

static void check_state(struct world *w, const char *when)
{
	check_state2(w, when, true);
}

static void world_close(struct world *w)
{
	int rc;

	if (w->o) {
		char nm[80];

		rc = tier_optim_destroy(w->o);
		ck_assert_msg(rc == 0, "optim destroy: %d: %s", rc, tier_last_error());
		w->o = NULL;
		/* its state objects are gone */
		for (size_t i = 0; i < w->np; i++) {
			snprintf(nm, sizeof(nm), "%s#0", w->pa[i].name);
			ck_assert_msg(tier_obj_find(w->s, nm) == NULL, "%s left after destroy", nm);
		}
	}
	VALID(w->s);
	rc = tier_store_close(w->s);
	ck_assert_msg(rc == 0, "store close: %d: %s", rc, tier_last_error());
	tier_manifest_free(w->man);
	for (size_t i = 0; i < w->np; i++) {
		struct param *q = &w->pa[i];

		free(q->p);
		free(q->m);
		free(q->v);
		free(q->g);
		free(q->out);
		free(q->rout);
		free(q->rp);
		free(q->rm);
		free(q->rv);
		free(q->ms);
		free(q->vs);
	}
	memset(w, 0, sizeof(*w));
}

/* Learning rates of the steps; TIER_LR_KEEP keeps the previous one. */
static const double step_lr[] = { 1e-3, 2e-3, TIER_LR_KEEP, 5e-4, 1.5e-3, TIER_LR_KEEP, 3e-3, 1e-3 };

/* Parameter sets. */
struct pdef {
	const char *name;
	size_t n;
	bool zeros;
};
static const struct pdef big_set[] = {
	{ "bias.one", 1, true },
	{ "layer0.w", 4099, false },
	{ "layer1.w", 70000, false },
	{ "emb.w", 300000, false },
};
static const struct pdef small_set[] = {
	{ "bias.one", 1, true },
	{ "layer0.w", 4099, false },
	{ "layer1.w", 70000, false },
};

/* ------------------------------------------------------------ matrix */

#define MIXED (-2)
#define NONE (-1)

struct mcase {
	const char *name;
	double offload;
	uint64_t hbm;           /* bytes of the host HBM tier; 0: none */
	int moment;
	double wd;
	bool l2;                /* decoupled = false */
	double max_norm;
	double loss_scale;
	bool dynamic;
	int gdt;                /* MIXED: fp32, bf16, fp16 by turns */
	int odt;                /* NONE: outs NULL; MIXED: by turns, with a NULL ptr */
	enum drive drive;
	bool delay, direct;
	int steps;
	unsigned threads;
	bool small;             /* small_set over 512 KiB of DRAM */
	int rnd, ornd;          /* rounding, out_rounding: 0 the manifest's, else
				 * enum tier_rounding + 1 */
	bool dmem;              /* every other parameter's buffers in device memory */
};

static const struct mcase mcases[] = {
	{ "cpu", 1.0, 0, TIER_FP32, 0.01, false, 0, 1, false, TIER_FP32, TIER_FP32, D_STEP,
	  false, false, 6, 2, false, 0, 0, false },
	{ "hbm", 0.0, 1 * MiB, TIER_FP32, 0.01, false, 0, 1, false, TIER_FP32, TIER_BF16, D_STEP,
	  false, false, 6, 2, false, 0, 0, false },
	{ "half", 0.5, 1 * MiB, TIER_FP32, 0.01, false, 0, 1, false, TIER_FP32, TIER_FP32, D_STEP,
	  false, false, 6, 2, false, 0, 0, false },
	{ "auto", TIER_OFFLOAD_AUTO, 1 * MiB, TIER_FP32, 0.01, false, 0, 1, false, TIER_FP32,
	  TIER_FP16, D_STEP, false, false, 8, 0, false, 0, 0, false },
	{ "half-no-hbm", 0.5, 0, TIER_FP32, 0.01, false, 0, 1, false, TIER_FP32, TIER_FP32,
	  D_STEP, false, false, 5, 2, false, 0, 0, false },
	{ "bf16-moments", 0.5, 1 * MiB, TIER_BF16, 0.01, false, 0, 1, false, TIER_BF16, TIER_BF16,
	  D_STEP, false, false, 6, 2, false, 0, 0, false },
	{ "bf16-moments-cpu", 1.0, 0, TIER_BF16, 0.01, false, 0, 1, false, MIXED, MIXED, D_STEP,
	  false, false, 6, 3, false, 0, 0, false },
	{ "bf16-nearest", 0.5, 1 * MiB, TIER_BF16, 0.01, false, 0, 1, false, TIER_FP32, TIER_BF16,
	  D_STEP, false, false, 4, 2, false, 1 + TIER_ROUND_NEAREST, 0, false },
	{ "bf16-stochastic-copy", 0.5, 1 * MiB, TIER_BF16, 0.01, false, 0, 1, false, MIXED,
	  TIER_BF16, D_STEP, false, false, 4, 2, false, 1 + TIER_ROUND_STOCHASTIC,
	  1 + TIER_ROUND_STOCHASTIC, false },
	/* q8 moments (stochastic, the default), both lanes */
	{ "q8-moments", 0.5, 1 * MiB, TIER_Q8, 0.01, false, 0, 1, false, MIXED, TIER_BF16,
	  D_STEP, false, false, 6, 2, false, 0, 0, false },
	{ "q8-nearest", 1.0, 0, TIER_Q8, 0.01, false, 0, 1, false, TIER_FP32, TIER_BF16,
	  D_STEP, false, false, 4, 2, false, 1 + TIER_ROUND_NEAREST, 0, false },
	{ "wd-decoupled", 1.0, 0, TIER_FP32, 0.1, false, 0, 1, false, TIER_FP16, TIER_FP16,
	  D_STEP, false, false, 6, 2, false, 0, 0, false },
	{ "wd-l2", 0.5, 1 * MiB, TIER_FP32, 0.05, true, 0, 1, false, TIER_FP32, TIER_FP32, D_STEP,
	  false, false, 6, 2, false, 0, 0, false },
	{ "clip", 0.5, 1 * MiB, TIER_FP32, 0.01, false, 0.5, 1, false, MIXED, TIER_FP32, D_STEP,
	  false, false, 6, 2, false, 0, 0, false },
	{ "static-scale", 1.0, 0, TIER_FP32, 0.01, false, 0, 1024, false, TIER_FP32, NONE, D_STEP,
	  false, false, 6, 2, false, 0, 0, false },
	{ "static-scale-clip-fp16", 0.5, 1 * MiB, TIER_FP32, 0.01, false, 1.0, 1024, false,
	  TIER_FP16, MIXED, D_STEP, false, false, 6, 2, false, 0, 0, false },
	{ "dynamic-scale", 0.5, 1 * MiB, TIER_FP32, 0.01, false, 0, 1024, true, TIER_FP32,
	  TIER_FP32, D_STEP, false, false, 7, 2, false, 0, 0, false },
	{ "stream-shuffled", 0.5, 1 * MiB, TIER_FP32, 0.01, false, 0.5, 1, false, MIXED, MIXED,
	  D_SHUFFLE, false, false, 6, 2, false, 0, 0, false },
	{ "direct-crc", 0.5, 1 * MiB, TIER_FP32, 0.01, false, 0, 1, false, TIER_FP32, TIER_FP32,
	  D_STEP, false, true, 5, 2, false, 0, 0, false },
	/* the GPU lane's slots: an HBM budget of one shard (a slot in flight
	 * must end before the next shard can come up), and buffers in
	 * (emulated) device memory on both lanes */
	{ "hbm-tight", 0.0, 128 * KiB, TIER_FP32, 0.01, false, 0, 1, false, MIXED, MIXED,
	  D_SHUFFLE, false, false, 4, 2, false, 0, 0, false },
	{ "device-buffers", 0.5, 1 * MiB, TIER_FP32, 0.01, false, 0, 1, false, MIXED, MIXED,
	  D_STEP, false, false, 4, 2, false, 0, 0, true },
	{ "device-buffers-gpu", 0.0, 1 * MiB, TIER_BF16, 0.01, false, 0, 1, false, MIXED, MIXED,
	  D_REVERSE, false, false, 4, 2, false, 0, 0, true },
};

/* The matrix's cases with slow NVMe completions (fault site NVME_DELAY):
 * the "matrix-faults" case. */
static const struct mcase mcases_delay[] = {
	{ "nvme-delay", 0.5, 1 * MiB, TIER_FP32, 0.01, false, 0, 1, false, TIER_FP32, TIER_FP32,
	  D_REVERSE, true, false, 3, 2, true, 0, 0, false },
	{ "nvme-delay-cpu", 1.0, 0, TIER_BF16, 0.01, false, 0, 1, false, TIER_FP32, TIER_BF16,
	  D_STEP, true, false, 3, 2, true, 0, 0, false },
};

static const int turn_dt[] = { TIER_FP32, TIER_BF16, TIER_FP16 };

/* Opens the world of a matrix-like case and adds its parameters. */
static void mworld_open(struct world *w, const struct mcase *c, const char *sub)
{
	struct scfg sc = { .dram = c->small ? 512 * KiB : 2 * MiB, .hbm = c->hbm,
			   .direct = c->direct, .csum = c->direct };
	struct tier_optim_params hp;
	const struct pdef *set = c->small ? small_set : big_set;
	size_t nset = c->small ? ARRAY_SIZE(small_set) : ARRAY_SIZE(big_set);

	world_open(w, sub, &sc);
	hp_base(&hp);
	hp.moment_dtype = c->moment;
	if (c->rnd)
		hp.rounding = c->rnd - 1;
	if (c->ornd)
		hp.out_rounding = c->ornd - 1;
	hp.offload_fraction = c->offload;
	hp.weight_decay = c->wd;
	hp.decoupled = !c->l2;
	hp.max_grad_norm = c->max_norm;
	hp.loss_scale = c->loss_scale;
	hp.dynamic_loss_scale = c->dynamic;
	if (c->dynamic) {
		hp.growth_interval = 2;
		hp.hysteresis = 2;
		hp.min_loss_scale = 1;
		hp.growth_factor = 2;
		hp.backoff_factor = 0.5;
	}
	hp.threads = c->threads;
	world_create(w, &hp);
	w->outs = c->odt != NONE;
	for (size_t i = 0; i < nset; i++) {
		int gdt = c->gdt == MIXED ? turn_dt[i % 3] : c->gdt;
		int odt = c->odt == NONE ? NONE
			  : c->odt == MIXED ? (i % 4 == 3 ? NONE : turn_dt[(i + 1) % 3])
					    : c->odt;

		struct param *q = world_add(w, set[i].name, set[i].n, set[i].zeros, gdt, odt, 1000 + i);

		q->dmem = c->dmem && i % 2;
	}
	VALID(w->s);
}

/* Runs matrix case @c with @seed. */
static void run_mcase(const struct mcase *c, uint64_t seed)
{
	struct world w;
	uint32_t nshards;

	mworld_open(&w, c, c->name);
	nshards = world_count_shards(&w, SHARD);
	ck_assert_uint_gt(nshards, w.np); /* parameters span several shards */
	ck_assert_msg(world_state_bytes(&w) > w.sc.dram, "%s: the state fits DRAM", c->name);
	check_state(&w, "before the first step");
	if (c->delay)
		ck_assert_int_eq(ts_fault_arm(TIER_FAULT_NVME_DELAY, 1, TIER_FAULT_PERSISTENT,
						-EIO),
				 0);
	for (int k = 0; k < c->steps; k++) {
		struct tier_step_result r;
		struct ref_res rr;
		double lr = step_lr[(size_t)k % ARRAY_SIZE(step_lr)];
		char when[64];

		world_grads(&w, seed, k);
		opt_step(&w, lr, c->drive, seed + (uint64_t)k, &r);
		ref_step(&w, lr, &rr);
		ck_assert_msg(rr.applied, "the reference skipped a clean step");
		check_result(&w, &r, &rr, nshards, k);
		if (c->max_norm > 0)
			ck_assert_msg(r.clip_coef < 1.0, "%s: step %d: no clipping (norm %g)", c->name,
				      k, r.grad_norm);
		if (c->offload == 1.0)
			ck_assert_msg(r.offload_fraction == 1.0 && r.gpu_shards == 0,
				      "step %d: offload 1: offload_fraction %g, gpu_shards %u", k,
				      r.offload_fraction, r.gpu_shards);
		if (c->offload == 0.0 && c->hbm) {
			ck_assert_msg(r.offload_fraction == 0.0 && r.cpu_shards == 0,
				      "step %d: offload 0: offload_fraction %g, cpu_shards %u", k,
				      r.offload_fraction, r.cpu_shards);
			/* the state is larger than the HBM tier: it moves both ways */
			ck_assert_msg(r.h2d_bytes > 0 && r.d2h_bytes > 0,
				      "step %d: offload 0: h2d %llu, d2h %llu bytes", k,
				      U64(r.h2d_bytes), U64(r.d2h_bytes));
		}
		if (c->offload == 0.5 && c->hbm)
			ck_assert_msg(r.cpu_shards > 0 && r.gpu_shards > 0,
				      "step %d: offload 0.5: cpu_shards %u, gpu_shards %u", k,
				      r.cpu_shards, r.gpu_shards);
		if (c->offload == TIER_OFFLOAD_AUTO && c->hbm) {
			/* auto: 0.5 (measures the lanes), then its candidates one
			 * step each (the rates' share, all on the CPU, all on the
			 * GPU), then the fastest of them for good */
			static double tried;

			if (k == 0)
				ck_assert_msg(r.offload_fraction == 0.5, "auto: step 1 at %g", r.offload_fraction);
			if (k == 1)
				tried = r.offload_fraction;
			if (k == 2)
				ck_assert_msg(r.offload_fraction == 1.0 && r.gpu_shards == 0,
					      "auto: step 3 at %g (%u GPU shards)", r.offload_fraction,
					      r.gpu_shards);
			if (k == 3)
				ck_assert_msg(r.offload_fraction == 0.0 && r.cpu_shards == 0,
					      "auto: step 4 at %g (%u CPU shards)", r.offload_fraction,
					      r.cpu_shards);
			if (k >= 4)
				ck_assert_msg(r.offload_fraction == optim_info_of(w.o).offload_fraction &&
						      (r.offload_fraction == tried || r.offload_fraction == 1.0 ||
						       r.offload_fraction == 0.0),
					      "auto: step %d at %g, after trying %g, 1 and 0", k + 1,
					      r.offload_fraction, tried);
		}
		VALID(w.s);
		/* the state is read back after the first and the last step (an
		 * error in any step stays in it), the outputs after every step */
		snprintf(when, sizeof(when), "%s, after step %d", c->name, k + 1);
		check_state2(&w, when, !c->delay && (k == 0 || k + 1 == c->steps));
	}
	if (c->delay) {
		ck_assert_uint_gt(ts_fault_fired(TIER_FAULT_NVME_DELAY), 0);
		ts_fault_disarm(TIER_FAULT_NVME_DELAY);
		check_state(&w, "after the delayed steps");
	}
	if (!c->hbm || c->offload == 1.0)
		ck_assert(optim_info_of(w.o).offload_fraction == 1.0);
	else if (c->offload == 0.0)
		ck_assert(optim_info_of(w.o).offload_fraction == 0.0);
	else
		ck_assert(optim_info_of(w.o).offload_fraction >= 0.0 &&
			  optim_info_of(w.o).offload_fraction <= 1.0);
	if (c->dynamic)
		ck_assert_msg(w.scale > c->loss_scale, "the dynamic scale never grew (%g)", w.scale);
	world_close(&w);
}

/* _i = case */
START_TEST(optim_matrix)
{
	run_mcase(&mcases[_i], 77 + (uint64_t)_i);
}
END_TEST

/* _i = case (of mcases_delay) */
START_TEST(optim_matrix_delay)
{
	NEED_FAULTS();
	run_mcase(&mcases_delay[_i], 177 + (uint64_t)_i);
}
END_TEST

/*
 * The GPU lane's run-time options (common/options.h): the matrix's cases
 * with shards on the emulated HBM tier again, with gradients queued ahead
 * of their state (TIER_GPU_GRAD_AHEAD; tests/tools/test_step.sh shows that they
 * are, in the trace) and other slot counts (TIER_GPU_SLOTS), bit for bit
 * against the same reference.
 */
static const struct {
	const char *mcase, *ahead, *slots;
} lane_cases[] = {
	{ "hbm", "on", "3" },
	{ "hbm-tight", "on", "3" },
	{ "hbm-tight", "on", "1" },
	{ "hbm-tight", "off", "8" },
	{ "stream-shuffled", "on", "2" },
	{ "device-buffers-gpu", "on", "5" },
	{ "q8-moments", "on", "3" },
};

/* _i = lane case */
START_TEST(optim_lane_options)
{
	size_t j = 0;

	while (j < ARRAY_SIZE(mcases) && strcmp(mcases[j].name, lane_cases[_i].mcase))
		j++;
	ck_assert_msg(j < ARRAY_SIZE(mcases), "no matrix case %s", lane_cases[_i].mcase);
	ck_assert_int_eq(setenv("TIER_GPU_GRAD_AHEAD", lane_cases[_i].ahead, 1), 0);
	ck_assert_int_eq(setenv("TIER_GPU_SLOTS", lane_cases[_i].slots, 1), 0);
	ts_options_reload();
	ck_assert_int_eq(ts_opt_int(TIER_OPT_GPU_SLOTS), atoi(lane_cases[_i].slots));
	ck_assert_int_eq(ts_opt_int(TIER_OPT_GPU_GRAD_AHEAD), !strcmp(lane_cases[_i].ahead, "on"));
	run_mcase(&mcases[j], 77 + (uint64_t)j);
	unsetenv("TIER_GPU_GRAD_AHEAD");
	unsetenv("TIER_GPU_SLOTS");
	ts_options_reload();
}
END_TEST

/* ------------------------------------------------------------ overflow */

struct ocase {
	const char *name;
	const char *pattern;    /* per step: 'c' clean, 'i' +inf, '-' -inf, 'n' nan */
	int gdt;
	bool dynamic;
	enum drive drive;
	uint32_t bad_param;
	size_t bad_pos;         /* SIZE_MAX: the last element */
	double offload;
	enum tier_dtype moment; /* TIER_FP32 unless given */
};

static const struct ocase ocases[] = {
	{ "static-inf", "cicc", TIER_FP32, false, D_STEP, 2, 65537, 0.5, TIER_FP32 },
	{ "static-nan", "cnc", TIER_FP32, false, D_STEP, 2, SIZE_MAX, 1.0, TIER_FP32 },
	{ "static-neginf-first", "icc", TIER_FP32, false, D_STEP, 0, 0, 0.5, TIER_FP32 },
	{ "static-nan-bf16", "ccnc", TIER_BF16, false, D_STEP, 1, 4000, 0.5, TIER_FP32 },
	{ "static-inf-fp16-stream", "cicic", TIER_FP16, false, D_SHUFFLE, 2, 12345, 0.5,
	  TIER_FP32 },
	{ "dynamic-inf", "cciicccc", TIER_FP32, true, D_STEP, 2, 65537, 0.5, TIER_FP32 },
	{ "dynamic-nan-fp16", "ccnccncnnc", TIER_FP16, true, D_STEP, 1, 0, 1.0, TIER_FP32 },
	{ "dynamic-mixed-stream", "c-ncccic", TIER_BF16, true, D_REVERSE, 2, SIZE_MAX, 0.5,
	  TIER_FP32 },
	{ "static-inf-q8", "cicc", TIER_FP32, false, D_STEP, 2, 65537, 0.5, TIER_Q8 },
	{ "dynamic-nan-q8-stream", "cncnccc", TIER_BF16, true, D_SHUFFLE, 1, SIZE_MAX, 1.0,
	  TIER_Q8 },
};

/* _i = case */
START_TEST(optim_overflow)
{
	const struct ocase *c = &ocases[_i];
	struct scfg sc = { .dram = 512 * KiB, .hbm = 1 * MiB };
	struct tier_optim_params hp;
	struct world w;
	uint32_t nshards;
	uint64_t seed = 4242 + (uint64_t)_i;
	size_t nsteps = strlen(c->pattern);
	int skipped = 0;

	world_open(&w, c->name, &sc);
	hp_base(&hp);
	hp.moment_dtype = c->moment;
	hp.offload_fraction = c->offload;
	hp.max_grad_norm = 1.0;
	if (c->dynamic) {
		hp.loss_scale = 256;
		hp.dynamic_loss_scale = true;
		hp.min_loss_scale = 1;
		hp.growth_factor = 2;
		hp.backoff_factor = 0.5;
		hp.growth_interval = 3;
		hp.hysteresis = 2;
	} else {
		hp.loss_scale = 1024;
	}
	world_create(&w, &hp);
	w.outs = true;
	for (size_t i = 0; i < ARRAY_SIZE(small_set); i++)
		world_add(&w, small_set[i].name, small_set[i].n, small_set[i].zeros, c->gdt,
			  turn_dt[i % 3], 50 + i);
	nshards = world_count_shards(&w, SHARD);
	for (size_t k = 0; k < nsteps; k++) {
		struct tier_step_result r;
		struct ref_res rr;
		double lr = step_lr[k % ARRAY_SIZE(step_lr)];
		struct param *bp = &w.pa[c->bad_param];
		char when[96];

		world_grads(&w, seed, (int)k);
		if (c->pattern[k] != 'c')
			put_bad(bp->g, bp->gdt, c->bad_pos == SIZE_MAX ? bp->n - 1 : c->bad_pos,
				c->pattern[k]);
		opt_step(&w, lr, c->drive, seed + k, &r);
		ref_step(&w, lr, &rr);
		ck_assert_msg(rr.applied == (c->pattern[k] == 'c'), "the reference disagrees");
		check_result(&w, &r, &rr, nshards, (int)k);
		if (!rr.applied) {
			skipped++;
			ck_assert_msg(!r.applied, "step %zu ('%c' in %s) applied", k, c->pattern[k],
				      bp->name);
		}
		/* a skipped step leaves the state and the outputs as they were:
		 * the reference did not move */
		snprintf(when, sizeof(when), "%s, after step %zu ('%c')", c->name, k + 1,
			 c->pattern[k]);
		check_state(&w, when);
	}
	ck_assert_int_gt(skipped, 0);
	world_close(&w);
}
END_TEST

/* ------------------------------------------------------------ golden */

/* _i = case * 2 + split (0: all on the CPU, no HBM; 1: half on the HBM tier) */
START_TEST(optim_golden)
{
	const char *gname = t_golden_cases[_i / 2];
	bool split = _i % 2;
	struct scfg sc = { .dram = 256 * KiB, .hbm = split ? 1 * MiB : 0 };
	struct tier_optim_params hp;
	struct t_golden g;
	struct world w;
	struct param *tiled, *plain;
	size_t copies, n;
	char sub[64];

	t_golden_load(&g, gname);
	/* ~600 KB of fp32 state in the tiled parameter (~10 shards), over
	 * twice the DRAM tier (256 KiB, the least that holds 4 shards) */
	copies = (size_t)(600 * 1000 / (g.numel * 12)) + 1;
	n = copies * g.numel;
	snprintf(sub, sizeof(sub), "%s-%d", gname, split);
	world_open(&w, sub, &sc);
	hp_base(&hp);
	hp.lr = (double)g.lr[0];
	hp.beta1 = g.beta1;
	hp.beta2 = g.beta2;
	hp.eps = g.eps;
	hp.weight_decay = g.wd;
	hp.decoupled = g.decoupled;
	hp.offload_fraction = split ? 0.5 : 1.0;
	world_create(&w, &hp);
	w.outs = true;
	{
		float *init = malloc(n * 4);

		ck_assert_ptr_nonnull(init);
		for (size_t c = 0; c < copies; c++)
			memcpy(init + c * g.numel, g.p0, g.numel * 4);
		tiled = world_add_init(&w, "golden.tiled", n, init, TIER_FP32, TIER_FP32, 9);
		free(init);
	}
	plain = world_add_init(&w, "golden.plain", g.numel, g.p0, TIER_FP32, NONE, 10);
	ck_assert_uint_ge(world_count_shards(&w, SHARD), 9);
	ck_assert_uint_ge(tiled->shards, 8);
	check_state(&w, "golden, before");
	for (size_t st = 0; st < g.steps; st++) {
		struct tier_step_result r;
		struct ref_res rr;
		double lr = (double)g.lr[st];
		char when[64];

		for (size_t c = 0; c < copies; c++)
			memcpy((float *)tiled->g + c * g.numel, g.grads + st * g.numel, g.numel * 4);
		memcpy(plain->g, g.grads + st * g.numel, g.numel * 4);
		opt_step(&w, lr, st % 3 == 2 ? D_SHUFFLE : D_STEP, st, &r);
		ref_step(&w, lr, &rr);
		check_result(&w, &r, &rr, tiled->shards + plain->shards, (int)st);
		if (st % 10 == 9 || st + 1 == g.steps) {
			snprintf(when, sizeof(when), "%s, after step %zu", gname, st + 1);
			check_state(&w, when);
		}
	}
	/* the state read back (equal to the reference, checked above) against torch */
	for (size_t c = 0; c <= copies; c++) {
		const float *xp = c < copies ? tiled->rp + c * g.numel : plain->rp;
		const float *xm = c < copies ? (const float *)tiled->rm + c * g.numel
					     : (const float *)plain->rm;
		const float *xv = c < copies ? (const float *)tiled->rv + c * g.numel
					     : (const float *)plain->rv;
		size_t wp = 0, wm = 0, wv = 0;
		double ep = t_rel_err(xp, g.pf, g.numel, &wp);
		double em = t_rel_err(xm, g.mf, g.numel, &wm);
		double ev = t_rel_err(xv, g.vf, g.numel, &wv);

		ck_assert_msg(ep <= T_GOLDEN_TOL_PARAM && em <= T_GOLDEN_TOL_MOMENT &&
				      ev <= T_GOLDEN_TOL_MOMENT,
			      "%s, copy %zu: errors (of the largest |value|) param %.3g (at %zu: %.9g, torch %.9g), exp_avg %.3g (at %zu), exp_avg_sq %.3g (at %zu)",
			      gname, c, ep, wp, (double)xp[wp], (double)g.pf[wp], em, wm, ev, wv);
		/* and every copy is the same bytes */
		if (c > 0 && c < copies)
			ck_assert_msg(memcmp(xp, tiled->rp, g.numel * 4) == 0,
				      "%s: copy %zu differs from copy 0", gname, c);
	}
	ck_assert_msg(memcmp(plain->rp, tiled->rp, g.numel * 4) == 0,
		      "%s: the plain parameter differs from the tiled one", gname);
	world_close(&w);
	t_golden_free(&g);
}
END_TEST

/* ------------------------------------------------------------ streaming */

/* Reverse and shuffled pushes equal tier_optim_step on a twin. */
START_TEST(stream_order)
{
	struct scfg sc = { .dram = 2 * MiB, .hbm = 1 * MiB };
	struct tier_optim_params hp;
	struct world a, b;
	uint32_t na, nb;
	static const enum drive drives[] = { D_REVERSE, D_SHUFFLE, D_SHUFFLE, D_FORWARD,
					     D_REVERSE, D_SHUFFLE };

	hp_base(&hp);
	hp.offload_fraction = 0.5;
	hp.max_grad_norm = 2.0;
	world_open(&a, "a", &sc);
	world_create(&a, &hp);
	world_open(&b, "b", &sc);
	world_create(&b, &hp);
	a.outs = b.outs = true;
	for (size_t i = 0; i < ARRAY_SIZE(big_set); i++) {
		world_add(&a, big_set[i].name, big_set[i].n, big_set[i].zeros, turn_dt[i % 3],
			  turn_dt[(i + 2) % 3], 300 + i);
		world_add(&b, big_set[i].name, big_set[i].n, big_set[i].zeros, turn_dt[i % 3],
			  turn_dt[(i + 2) % 3], 300 + i);
	}
	na = world_count_shards(&a, SHARD);
	nb = world_count_shards(&b, SHARD);
	ck_assert_uint_eq(na, nb);
	for (int k = 0; k < (int)ARRAY_SIZE(drives); k++) {
		struct tier_step_result ra, rb;
		struct ref_res rra, rrb;
		double lr = step_lr[k];
		char when[64];

		world_grads(&a, 5, k);
		world_grads(&b, 5, k);
		opt_step(&a, lr, D_STEP, 0, &ra);
		opt_step(&b, lr, drives[k], 1000 + (uint64_t)k, &rb);
		ref_step(&a, lr, &rra);
		ref_step(&b, lr, &rrb);
		check_result(&a, &ra, &rra, na, k);
		check_result(&b, &rb, &rrb, nb, k);
		ck_assert(ra.grad_norm == rb.grad_norm);
		snprintf(when, sizeof(when), "step form, after step %d", k + 1);
		check_state(&a, when);
		snprintf(when, sizeof(when), "streaming form, after step %d", k + 1);
		check_state(&b, when);
		for (size_t i = 0; i < a.np; i++) {
			ck_assert(memcmp(a.pa[i].rp, b.pa[i].rp, a.pa[i].n * 4) == 0);
			ck_assert(memcmp(a.pa[i].rm, b.pa[i].rm, a.pa[i].n * 4) == 0);
			ck_assert(memcmp(a.pa[i].rv, b.pa[i].rv, a.pa[i].n * 4) == 0);
			ck_assert(memcmp(a.pa[i].out, b.pa[i].out, a.pa[i].n * tier_dtype_size((enum tier_dtype)a.pa[i].odt)) == 0);
		}
	}
	world_close(&a);
	world_close(&b);
}
END_TEST

#define ASSERT_ERR(expr, want, what)                                                    \
	do {                                                                           \
		int rc_ = (expr);                                                      \
		ck_assert_msg(rc_ == (want), "%s: %d (%s), want %d; detail '%s'", what, rc_, \
			      tier_strerror(rc_), want, tier_last_error());            \
		ck_assert_msg(*tier_last_error() != '\0', "%s: no detail", what);      \
	} while (0)

/* Opens a small world with outputs, for the error tests. */
static void small_world(struct world *w, const char *sub, double offload)
{
	struct scfg sc = { .dram = 512 * KiB, .hbm = 1 * MiB };
	struct tier_optim_params hp;

	world_open(w, sub, &sc);
	hp_base(&hp);
	hp.offload_fraction = offload;
	world_create(w, &hp);
	w->outs = true;
	for (size_t i = 0; i < ARRAY_SIZE(small_set); i++)
		world_add(w, small_set[i].name, small_set[i].n, small_set[i].zeros, TIER_FP32,
			  turn_dt[i % 3], 70 + i);
}

/* Ends a begun step in which nothing was pushed: it changes nothing. */
static void optim_end_empty(struct world *w)
{
	struct tier_step_result r;
	int rc = tier_optim_end(w->o, &r);

	ck_assert_msg(rc == 0, "end with nothing pushed: %d: %s", rc, tier_last_error());
	ck_assert(!r.applied);
	ck_assert_uint_eq(r.params_updated, 0);
	ck_assert_uint_eq(r.params_skipped, w->np);
	ck_assert_uint_eq(r.step, w->step);
}

START_TEST(stream_errors)
{
	struct world w;
	struct tier_tensor g[MAXP], out[MAXP], bad;
	struct tier_step_result r;
	struct ref_res rr;
	uint32_t nshards;
	int rc;

	small_world(&w, "errs", 0.5);
	nshards = world_count_shards(&w, SHARD);
	for (size_t i = 0; i < w.np; i++) {
		g[i] = grad_t(&w.pa[i]);
		out[i] = out_t(&w.pa[i]);
	}

	/* no step begun */
	ASSERT_ERR(tier_optim_push(w.o, 0, &g[0], &out[0]), -EINVAL, "push without begin");
	rc = tier_optim_end(w.o, &r);
	ck_assert_msg(rc < 0, "end without begin: %d", rc);
	check_state(&w, "after pushes without a step");

	/* step 1: bad pushes, begin twice, add inside, a double push */
	world_grads(&w, 9, 0);
	ck_assert_int_eq(tier_optim_begin(w.o, 2e-3), 0);
	rc = tier_optim_begin(w.o, 2e-3);
	ck_assert_msg(rc < 0, "begin twice: %d", rc);
	ck_assert_msg(*tier_last_error() != '\0', "begin twice: no detail");
	ASSERT_ERR(tier_optim_push(w.o, (uint32_t)w.np, &g[0], NULL), -EINVAL, "push id = nparams");
	ASSERT_ERR(tier_optim_push(w.o, UINT32_MAX, &g[0], NULL), -EINVAL, "push id UINT32_MAX");
	bad = g[1];
	bad.ptr = NULL;
	ASSERT_ERR(tier_optim_push(w.o, 1, &bad, NULL), -EINVAL, "push NULL gradient buffer");
	bad = g[1];
	bad.dtype = (enum tier_dtype)7;
	ASSERT_ERR(tier_optim_push(w.o, 1, &bad, NULL), -EINVAL, "push bad gradient dtype");
	bad = out[1];
	bad.dtype = (enum tier_dtype)9;
	ASSERT_ERR(tier_optim_push(w.o, 1, &g[1], &bad), -EINVAL, "push bad output dtype");
	bad = g[1];
	bad.dtype = TIER_Q8; /* a moment dtype only */
	ASSERT_ERR(tier_optim_push(w.o, 1, &bad, NULL), -EINVAL, "push q8 gradient");
	ck_assert_msg(strstr(tier_last_error(), "q8"), "%s", tier_last_error());
	bad = out[1];
	bad.dtype = TIER_Q8;
	ASSERT_ERR(tier_optim_push(w.o, 1, &g[1], &bad), -EINVAL, "push q8 output");
	ck_assert_msg(strstr(tier_last_error(), "q8"), "%s", tier_last_error());
	ASSERT_ERR(tier_optim_push(w.o, 1, NULL, NULL), -EINVAL, "push NULL gradient");
	ASSERT_ERR(tier_optim_add_param(w.o, "late", 100, NULL, NULL), -EBUSY, "add inside a step");
	ck_assert_uint_eq(tier_optim_nparams(w.o), w.np);
	ck_assert_ptr_null(tier_obj_find(w.s, "late#0"));
	for (size_t i = w.np; i-- > 0;) {
		rc = tier_optim_push(w.o, (uint32_t)i, &g[i], &out[i]);
		ck_assert_msg(rc == 0, "push %zu: %d: %s", i, rc, tier_last_error());
	}
	{
		/* a second push of parameter 2 with another gradient: refused,
		 * the first stands */
		struct param *q = &w.pa[2];
		float *other = malloc(q->n * 4);

		ck_assert_ptr_nonnull(other);
		gen_grad(other, TIER_FP32, q->n, 999, 1.0);
		bad = g[2];
		bad.ptr = other;
		ASSERT_ERR(tier_optim_push(w.o, 2, &bad, &out[2]), -EALREADY, "push twice");
		rc = tier_optim_end(w.o, &r);
		ck_assert_msg(rc == 0, "end after the refused pushes: %d: %s", rc, tier_last_error());
		free(other);
	}
	ref_step(&w, 2e-3, &rr);
	check_result(&w, &r, &rr, nshards, 0);
	ck_assert_uint_eq(r.step, 1);
	check_state(&w, "after the step with refused pushes");

	/* step 2: a gradient of another size is refused, naming the
	 * parameter (a parameter not pushed is test_trainer's) */
	world_grads(&w, 9, 1);
	ck_assert_int_eq(tier_optim_begin(w.o, 1e-3), 0);
	bad = g[1];
	bad.numel = w.pa[1].n - 1;
	ASSERT_ERR(tier_optim_push(w.o, 1, &bad, NULL), -EINVAL, "push a short gradient");
	ck_assert_msg(strstr(tier_last_error(), w.pa[1].name) != NULL,
		      "the detail '%s' does not name %s", tier_last_error(), w.pa[1].name);
	bad = out[1];
	bad.numel = w.pa[1].n + 1;
	ASSERT_ERR(tier_optim_push(w.o, 1, &g[1], &bad), -EINVAL, "push a long output");
	optim_end_empty(&w);
	check_state(&w, "after the step without gradients");

	/* a full step works after it, counting from step 1 */
	opt_step(&w, 1e-3, D_SHUFFLE, 3, &r);
	ref_step(&w, 1e-3, &rr);
	check_result(&w, &r, &rr, nshards, 1);
	ck_assert_uint_eq(r.step, 2);
	check_state(&w, "after the step that followed the abandoned one");

	/* nothing pushed: nothing changes */
	ck_assert_int_eq(tier_optim_begin(w.o, 1e-3), 0);
	optim_end_empty(&w);
	check_state(&w, "after the empty step");

	/* and tier_optim_step */
	world_grads(&w, 9, 2);
	opt_step(&w, 0, D_STEP, 0, &r);
	ref_step(&w, 0, &rr);
	check_result(&w, &r, &rr, nshards, 2);
	ck_assert_uint_eq(r.step, 3);
	check_state(&w, "after the last step");
	world_close(&w);
}
END_TEST

/*
 * The tiers failing in the middle of a step (docs/optimizer.md, "A step
 * that fails"), over 4 steps of the big set on 2 MiB of DRAM, the fault
 * armed from step 1 on.  "empty": the store is flushed and everything
 * evicted first (a filler object the size of DRAM), so the step's first
 * NVMe operation is the fill of its first shard and the fault's nth is 1;
 * else the step's nth NVMe operation (mid-step: the shards the last step
 * left resident are updated first, and later fills fail).  The step's
 * NVMe operations are its fills and the last step's write-behind, in an
 * order the timing decides, so a failing case's nth must not exceed the
 * fills the step makes, or the fault may come after the last of them and
 * the step complete: 39 with fp32 state, 5 with q8 (measured: 5 reads
 * with 5 to 12 writes before, between and after them; with nth 10 the q8
 * step completed in about 1 run of 15 under ASan).
 *
 *  - transient (the NVMe tier retries it): one -EIO, or as many as it
 *    retries, in every step from step 1 on: every step completes and
 *    equals the in-memory reference bit for bit (master weights, both
 *    moments, outputs, the result);
 *  - failing (a persistent -EIO, or the store_io site): step 1 fails with
 *    the error, naming a shard and how many are updated (some, when
 *    mid-step), applied false and the step count unchanged.  Then, the
 *    fault lifted: a step with other gradients is refused (-EINVAL, the
 *    detail says the failed step must be completed), and so are another
 *    lr and a new parameter (-EBUSY), none changing the state; the same
 *    step again completes it; the state equals the reference's after that
 *    step, and after the later steps.
 */
struct fcase {
	const char *name;
	enum ts_fault_site site;
	uint64_t nth;           /* 0: "empty", the step's first fill (nth 1) */
	int64_t count;
	bool fails;             /* step 1 fails (else every step completes) */
	bool partial;           /* it fails with some shards updated */
	double offload;
	uint64_t hbm;
	bool dynamic;           /* a dynamic loss scale that grows every step */
	enum drive drive;
	enum tier_dtype moment; /* TIER_FP32 unless given */
};

#define FSTEPS 4

static const struct fcase fcases[] = {
	{ "eio-once-first-fill-cpu", TIER_FAULT_NVME_IO_ERR, 0, 1, false, false, 1.0, 0, false,
	  D_STEP, TIER_FP32 },
	{ "eio-retried-out-first-fill-split", TIER_FAULT_NVME_IO_ERR, 0, TIER_NVME_IO_RETRIES,
	  false, false, 0.5, 1 * MiB, false, D_SHUFFLE, TIER_FP32 },
	{ "eio-once-mid-step-split", TIER_FAULT_NVME_IO_ERR, 7, 1, false, false, 0.5, 1 * MiB,
	  true, D_STEP, TIER_FP32 },
	{ "eio-persistent-first-fill-cpu", TIER_FAULT_NVME_IO_ERR, 0, TIER_FAULT_PERSISTENT, true,
	  false, 1.0, 0, false, D_STEP, TIER_FP32 },
	{ "eio-persistent-mid-step-cpu-dynamic", TIER_FAULT_NVME_IO_ERR, 10, TIER_FAULT_PERSISTENT,
	  true, true, 1.0, 0, true, D_STEP, TIER_FP32 },
	{ "eio-persistent-mid-step-split", TIER_FAULT_NVME_IO_ERR, 10, TIER_FAULT_PERSISTENT, true,
	  true, 0.5, 1 * MiB, false, D_REVERSE, TIER_FP32 },
	{ "store-io-first-fill-cpu", TIER_FAULT_STORE_IO, 0, 1, true, false, 1.0, 0, false, D_STEP,
	  TIER_FP32 },
	{ "store-io-first-fill-split", TIER_FAULT_STORE_IO, 0, 1, true, false, 0.5, 1 * MiB, false,
	  D_SHUFFLE, TIER_FP32 },
	{ "eio-persistent-mid-step-split-q8", TIER_FAULT_NVME_IO_ERR, 3, TIER_FAULT_PERSISTENT,
	  true, true, 0.5, 1 * MiB, true, D_REVERSE, TIER_Q8 },
	{ "eio-once-mid-step-cpu-q8", TIER_FAULT_NVME_IO_ERR, 7, 1, false, false, 1.0, 0, false,
	  D_STEP, TIER_Q8 },
	/* the GPU lane: a copy to or from HBM failing mid-step, with shards
	 * in flight in the lane's slots */
	{ "hbm-copy-persistent-mid-step-gpu", TIER_FAULT_HBM_COPY, 10, TIER_FAULT_PERSISTENT, true,
	  true, 0.0, 1 * MiB, false, D_STEP, TIER_FP32 },
	{ "hbm-copy-persistent-mid-step-split-bf16", TIER_FAULT_HBM_COPY, 6, TIER_FAULT_PERSISTENT,
	  true, true, 0.5, 1 * MiB, false, D_SHUFFLE, TIER_BF16 },
};

static void fworld_open(struct world *w, const struct fcase *c)
{
	struct scfg sc = { .dram = 2 * MiB, .hbm = c->hbm };
	struct tier_optim_params hp;

	world_open(w, c->name, &sc);
	hp_base(&hp);
	hp.moment_dtype = c->moment;
	hp.offload_fraction = c->offload;
	if (c->dynamic) {
		hp.loss_scale = 1024;
		hp.dynamic_loss_scale = true;
		hp.growth_interval = 1;
	}
	world_create(w, &hp);
	w->outs = true;
	for (size_t i = 0; i < ARRAY_SIZE(big_set); i++)
		world_add(w, big_set[i].name, big_set[i].n, big_set[i].zeros, TIER_FP32,
			  turn_dt[i % 3], 70 + i);
}

/* Arms the case's fault for the next step ("empty": the store emptied first). */
static void arm_fault(struct world *w, const struct fcase *c)
{
	if (c->nth == 0) {
		struct tier_obj *f;
		void *ptr;

		ck_assert_int_eq(tier_store_flush(w->s), 0);
		ck_assert_int_eq(tier_obj_create(w->s, "filler", w->sc.dram, &f), 0);
		ck_assert_int_eq(tier_obj_acquire(w->s, f, TIER_DRAM,
						  TIER_ACQUIRE_WRITE | TIER_ACQUIRE_DISCARD, &ptr),
				 0);
		ck_assert_int_eq(tier_obj_release(w->s, f, TIER_DRAM, false), 0);
		ck_assert_int_eq(tier_obj_destroy(w->s, f), 0);
	}
	ck_assert_int_eq(ts_fault_arm(c->site, c->nth ? c->nth : 1, c->count, -EIO), 0);
}

/* FNV-1a over every parameter's state read back. */
static uint64_t state_hash(struct world *w)
{
	uint64_t h = 0xcbf29ce484222325ull;
	size_t ms = read_size(w->md);

	for (size_t i = 0; i < w->np; i++) {
		struct param *q = &w->pa[i];
		const unsigned char *parts[3] = { (void *)q->rp, q->rm, q->rv };
		size_t len[3] = { q->n * 4, q->n * ms, q->n * ms };

		ck_assert_int_eq(tier_optim_read(w->o, q->id, q->rp, q->rm, q->rv), 0);
		for (int k = 0; k < 3; k++)
			for (size_t j = 0; j < len[k]; j++)
				h = (h ^ parts[k][j]) * 0x100000001b3ull;
	}
	return h;
}

/* The failed step's detail: names a shard, says how to complete it, and
 * how many shards are updated (*done of *all). */
static void check_fail_detail(const struct fcase *c, unsigned *done, unsigned *all)
{
	const char *d = tier_last_error(), *p = strstr(d, " shards are updated");

	ck_assert_msg(strchr(d, '#') && strstr(d, "call the step again with the same gradients"),
		      "%s: the detail: %s", c->name, d);
	ck_assert_msg(p != NULL, "%s: the detail does not count the shards updated: %s", c->name, d);
	while (p > d && *p != '(')
		p--;
	ck_assert_msg(sscanf(p, "(%u of %u", done, all) == 2, "%s: the detail: %s", c->name, d);
}

/* After the failed step: what is refused until it is completed; nothing
 * of that changes the state. */
static void check_refusals(struct world *w, const struct fcase *c, double lr)
{
	struct param *q = &w->pa[2];
	float *keep = malloc(q->n * 4);
	uint64_t h = state_hash(w);
	struct tier_step_result r;
	int rc;

	ck_assert_ptr_nonnull(keep);
	memcpy(keep, q->g, q->n * 4);
	gen_grad(q->g, q->gdt, q->n, 4242, w->scale); /* the next batch's gradient */
	rc = try_step(w, lr, c->drive, 5, &r);
	ck_assert_msg(rc == -EINVAL && strstr(tier_last_error(), "must be completed") &&
			      strstr(tier_last_error(), q->name),
		      "%s: a step with other gradients: %d: %s", c->name, rc, tier_last_error());
	memcpy(q->g, keep, q->n * 4);
	free(keep);
	rc = tier_optim_begin(w->o, lr * 2);
	ck_assert_msg(rc == -EINVAL && strstr(tier_last_error(), "failed part way"),
		      "%s: the failed step with another lr: %d: %s", c->name, rc, tier_last_error());
	rc = tier_optim_add_param(w->o, "late", 100, NULL, NULL);
	ck_assert_msg(rc == -EBUSY, "%s: add_param with a step pending: %d: %s", c->name, rc,
		      tier_last_error());
	ck_assert_msg(state_hash(w) == h, "%s: a refused call changed the state", c->name);
	VALID(w->s);
}

/* Step @k fails, then is completed; *r gets the completing step's result. */
static void fail_and_complete(struct world *w, const struct fcase *c, double lr, int k,
			      struct tier_step_result *r)
{
	unsigned done = 0, all = 0;
	int rc;

	rc = try_step(w, lr, c->drive, (uint64_t)k, r);
	ck_assert_msg(rc == -EIO, "%s: a step with a failing fill returned %d: %s", c->name, rc,
		      tier_last_error());
	check_fail_detail(c, &done, &all);
	ck_assert_msg(!r->applied && r->step == w->step,
		      "%s: the failed step's result: applied %d, step %llu (want %llu)", c->name,
		      r->applied, U64(r->step), U64(w->step));
	ck_assert_uint_ge(ts_fault_fired(c->site), 1);
	ts_fault_disarm(c->site);
	VALID(w->s);
	ck_assert_msg(done < all && (!c->partial || done > 0),
		      "%s: %u of %u shards updated by the failed step", c->name, done, all);
	check_refusals(w, c, lr);
	/* the same step again: with its lr, or (the split cases) TIER_LR_KEEP */
	opt_step(w, c->offload < 1.0 ? TIER_LR_KEEP : lr, c->drive, (uint64_t)k, r);
}

/* _i = case */
START_TEST(tier_failure)
{
	const struct fcase *c = &fcases[_i];
	struct world w;
	uint32_t nshards;

	NEED_FAULTS();
	fworld_open(&w, c);
	nshards = world_count_shards(&w, SHARD);
	for (int k = 0; k < FSTEPS; k++) {
		struct tier_step_result r;
		struct ref_res rr;
		double lr = step_lr[k];
		bool armed = k >= 1 && (!c->fails || k == 1);
		char when[80];

		world_grads(&w, 21, k);
		if (armed)
			arm_fault(&w, c);
		if (armed && c->fails) {
			fail_and_complete(&w, c, lr, k, &r);
		} else {
			opt_step(&w, lr, c->drive, (uint64_t)k, &r);
			if (armed) {
				ck_assert_uint_ge(ts_fault_fired(c->site), 1);
				ts_fault_disarm(c->site);
			}
		}
		ref_step(&w, lr, &rr);
		check_result(&w, &r, &rr, nshards, k);
		snprintf(when, sizeof(when), "%s, after step %d", c->name, k + 1);
		check_state(&w, when);
	}
	world_close(&w);
}
END_TEST

/* ------------------------------------------------------------ lr values */

/* A case of lr_values: the world, the lr at creation, how steps are driven. */
struct lcase {
	const char *name;
	double offload;
	enum tier_dtype moment;
	double create_lr;
	enum drive drive;
};
static const struct lcase lcases[] = {
	{ "cpu-fp32", 1.0, TIER_FP32, 1e-3, D_STEP },
	{ "split-bf16", 0.5, TIER_BF16, 1e-3, D_SHUFFLE },
	{ "split-q8", 0.5, TIER_Q8, 1e-3, D_REVERSE },
	{ "gpu-fp32-created-at-0", 0.0, TIER_FP32, 0.0, D_FORWARD },
};

/* The steps: the lr passed and whether the parameters must stay (the
 * learning rate in effect is 0). */
static const struct {
	double lr;
	bool still;
} lsteps[] = {
	{ 1e-3, false }, { 0.0, true }, { TIER_LR_KEEP, true }, { 2e-3, false },
	{ TIER_LR_KEEP, false }, { -0.0, true }, { 5e-4, false },
};

/* Values begin and step refuse. */
static const double bad_lrs[] = { -2.0, -1e-3, -0.9999999, -INFINITY, INFINITY, NAN };

/* Snapshots every parameter's state read back into @p, @m (concatenated). */
static void lr_snapshot(struct world *w, float *p, unsigned char *m)
{
	size_t ms = read_size(w->md);

	for (size_t i = 0; i < w->np; i++) {
		struct param *q = &w->pa[i];

		ck_assert_int_eq(tier_optim_read(w->o, q->id, p, m, m + q->n * ms), 0);
		p += q->n;
		m += 2 * q->n * ms;
	}
}

/* Every bad lr refused by begin and by step, naming it, the state unchanged. */
static void lr_refusals(struct world *w)
{
	struct tier_tensor g[MAXP];
	uint64_t h = state_hash(w);

	for (size_t i = 0; i < w->np; i++)
		g[i] = grad_t(&w->pa[i]);
	for (size_t b = 0; b < ARRAY_SIZE(bad_lrs); b++) {
		char val[32];

		snprintf(val, sizeof(val), "lr %g ", bad_lrs[b]);
		ASSERT_ERR(tier_optim_begin(w->o, bad_lrs[b]), -EINVAL, val);
		ck_assert_msg(strstr(tier_last_error(), val), "begin: '%s' does not name %s",
			      tier_last_error(), val);
		ASSERT_ERR(tier_optim_step(w->o, bad_lrs[b], g, NULL, NULL), -EINVAL, val);
		ck_assert_msg(strstr(tier_last_error(), val), "step: '%s' does not name %s",
			      tier_last_error(), val);
	}
	ck_assert_msg(state_hash(w) == h, "a refused lr changed the state");
}

/* _i = case: lr 0 leaves the parameters bit for bit while the moments and
 * the step count advance (the reference: tier_adam_step at lr 0);
 * TIER_LR_KEEP keeps the previous rate; bad values are refused. */
START_TEST(lr_values)
{
	const struct lcase *c = &lcases[_i];
	struct scfg sc = { .dram = 512 * KiB, .hbm = 1 * MiB };
	struct tier_optim_params hp;
	struct world w;
	size_t total = 0, ms;
	float *p0, *p1;
	unsigned char *m0, *m1;

	world_open(&w, c->name, &sc);
	hp_base(&hp);
	hp.offload_fraction = c->offload;
	hp.moment_dtype = c->moment;
	hp.lr = c->create_lr;
	world_create(&w, &hp);
	w.outs = true;
	for (size_t i = 0; i < ARRAY_SIZE(small_set); i++) {
		world_add(&w, small_set[i].name, small_set[i].n, small_set[i].zeros, TIER_FP32,
			  turn_dt[i % 3], 90 + i);
		total += small_set[i].n;
	}
	ms = read_size(c->moment);
	p0 = malloc(total * 4);
	p1 = malloc(total * 4);
	m0 = malloc(total * 2 * ms);
	m1 = malloc(total * 2 * ms);
	ck_assert(p0 && p1 && m0 && m1);
	if (c->create_lr == 0.0) { /* created at 0: a first step that keeps it stays */
		struct tier_step_result r;
		struct ref_res rr;

		world_grads(&w, 7, 99);
		lr_snapshot(&w, p0, m0);
		opt_step(&w, TIER_LR_KEEP, c->drive, 99, &r);
		ref_step(&w, TIER_LR_KEEP, &rr);
		lr_snapshot(&w, p1, m1);
		ck_assert_msg(memcmp(p0, p1, total * 4) == 0, "%s: created at lr 0, a step moved the parameters",
			      c->name);
		check_state(&w, "created at lr 0, after a step");
	}
	for (size_t k = 0; k < ARRAY_SIZE(lsteps); k++) {
		struct tier_step_result r;
		struct ref_res rr;
		char when[96];

		world_grads(&w, 7, (int)k);
		lr_snapshot(&w, p0, m0);
		opt_step(&w, lsteps[k].lr, c->drive, k, &r);
		ref_step(&w, lsteps[k].lr, &rr);
		lr_snapshot(&w, p1, m1);
		snprintf(when, sizeof(when), "%s, step %zu (lr %g)", c->name, k + 1, lsteps[k].lr);
		ck_assert_msg(r.applied && r.step == w.step, "%s: applied %d, step %llu (want %llu)",
			      when, r.applied, U64(r.step), U64(w.step));
		ck_assert_msg((memcmp(p0, p1, total * 4) == 0) == lsteps[k].still,
			      "%s: the parameters %s", when, lsteps[k].still ? "moved" : "stayed");
		ck_assert_msg(memcmp(m0, m1, total * 2 * ms) != 0, "%s: the moments stayed", when);
		check_state(&w, when);
	}
	lr_refusals(&w);
	free(p0);
	free(p1);
	free(m0);
	free(m1);
	world_close(&w);
}
END_TEST

/* ------------------------------------------------------------ q8 read and write */

/*
 * q8 moments through tier_optim_write and tier_optim_read (fp32 values):
 * a write of fp32 moments reads back as tier_q8_decode(tier_q8_encode(x))
 * bit for bit, and stores exactly tier_q8_encode's codes and scales (the
 * later steps, which read them, equal the reference's given those); a
 * read written back changes nothing (the read-backs are the same bytes,
 * and the later steps still equal the reference's); a write of one moment
 * (the other NULL) leaves the other and the master weights.
 */
struct wcase {
	const char *name;
	double offload;
	uint64_t hbm;
};
static const struct wcase wcases[] = {
	{ "q8-write-cpu", 1.0, 0 },
	{ "q8-write-split", 0.5, 1 * MiB },
};

/*
 * fp32 moments to write: exp_avg signed, exp_avg_sq >= 0, each block of
 * TIER_Q8_BLOCK of its own magnitude (2^-1 down to 2^-40) with elements
 * spread over 24 binades below it (down to the codes' subnormals and
 * zero); block 1 all zeros, block 2 one nonzero element.
 */
static void gen_moments(float *m, float *v, size_t n, uint64_t seed)
{
	uint64_t s = seed | 1;

	for (size_t i = 0; i < n; i++) {
		size_t b = i / TIER_Q8_BLOCK;
		int top = -1 - (int)((b * 7 + seed) % 40);
		uint64_t r = t_rnd_next(&s);
		double mant = 1.0 + (double)(r >> 40) * 0x1p-24;
		float x = (float)ldexp(mant, top - (int)((r >> 8) % 24));

		if (b == 1 || (b == 2 && i % TIER_Q8_BLOCK != 17) || r % 50 == 0)
			x = 0.0f;
		m[i] = (r >> 63) ? -x : x;
		v[i] = (float)ldexp(mant, 2 * top - (int)((r >> 16) % 24));
		if (b == 1 || (b == 2 && i % TIER_Q8_BLOCK != 17))
			v[i] = 0.0f;
	}
}

/* Writes @m, @v (either NULL: stays) into parameter @q and the reference
 * (tier_q8_encode's codes and scales). */
static void q8_write(struct world *w, struct param *q, const float *m, const float *v)
{
	int rc = tier_optim_write(w->o, q->id, NULL, m, v);

	ck_assert_msg(rc == 0, "write %s: %d: %s", q->name, rc, tier_last_error());
	if (m)
		ck_assert_int_eq(tier_q8_encode(m, q->n, TIER_Q8_EXP_AVG, q->m, q->ms), 0);
	if (v)
		ck_assert_int_eq(tier_q8_encode(v, q->n, TIER_Q8_EXP_AVG_SQ, q->v, q->vs), 0);
}

static void q8_steps(struct world *w, int k0, int k1, const char *what)
{
	for (int k = k0; k < k1; k++) {
		struct tier_step_result r;
		struct ref_res rr;
		char when[96];

		world_grads(w, 5, k);
		opt_step(w, step_lr[k], D_STEP, (uint64_t)k, &r);
		ref_step(w, step_lr[k], &rr);
		check_result(w, &r, &rr, w->pa[0].shards + w->pa[1].shards + w->pa[2].shards, k);
		snprintf(when, sizeof(when), "%s, step %d", what, k + 1);
		check_state(w, when);
	}
}

/* _i = case */
START_TEST(q8_write_read)
{
	const struct wcase *c = &wcases[_i];
	struct scfg sc = { .dram = 512 * KiB, .hbm = c->hbm };
	struct tier_optim_params hp;
	struct world w;

	world_open(&w, c->name, &sc);
	hp_base(&hp);
	hp.moment_dtype = TIER_Q8;
	hp.offload_fraction = c->offload;
	world_create(&w, &hp);
	for (size_t i = 0; i < ARRAY_SIZE(small_set); i++)
		world_add(&w, small_set[i].name, small_set[i].n, small_set[i].zeros, TIER_FP32,
			  NONE, 70 + i);
	ck_assert_uint_gt(world_count_shards(&w, SHARD), w.np);
	q8_steps(&w, 0, 2, "before the writes");

	for (size_t i = 0; i < w.np; i++) {
		struct param *q = &w.pa[i];
		float *m = malloc(q->n * 4), *v = malloc(q->n * 4), *dm = malloc(q->n * 4);
		float *dv = malloc(q->n * 4);
		uint8_t *cm = malloc(q->n), *cv = malloc(q->n);
		float *sm = malloc(t_q8_nb(q->n) * 4), *sv = malloc(t_q8_nb(q->n) * 4);
		float *a = malloc(q->n * 12), *b = malloc(q->n * 12);
		float *p0 = malloc(q->n * 4);
		long d;

		ck_assert(m && v && dm && dv && cm && cv && sm && sv && a && b && p0);
		memcpy(p0, q->p, q->n * 4);
		gen_moments(m, v, q->n, 300 + i);
		/* decode(encode(x)), computed apart from the reference's arrays */
		ck_assert_int_eq(tier_q8_encode(m, q->n, TIER_Q8_EXP_AVG, cm, sm), 0);
		ck_assert_int_eq(tier_q8_encode(v, q->n, TIER_Q8_EXP_AVG_SQ, cv, sv), 0);
		ck_assert_int_eq(tier_q8_decode(cm, sm, q->n, TIER_Q8_EXP_AVG, dm), 0);
		ck_assert_int_eq(tier_q8_decode(cv, sv, q->n, TIER_Q8_EXP_AVG_SQ, dv), 0);
		if (q->n > 2 * TIER_Q8_BLOCK) /* the test's values are not all exact in q8 */
			ck_assert(memcmp(dm, m, q->n * 4) != 0 && memcmp(dv, v, q->n * 4) != 0);
		q8_write(&w, q, m, v);
		ck_assert_int_eq(tier_optim_read(w.o, q->id, a, a + q->n, a + 2 * q->n), 0);
		ck_assert_msg(memcmp(a, p0, q->n * 4) == 0, "%s: the write changed the master weights",
			      q->name);
		d = first_diff(a + q->n, dm, q->n, 4);
		ck_assert_msg(d < 0, "%s: exp_avg[%ld] read back %.9g, decode(encode(%.9g)) %.9g",
			      q->name, d, (double)a[q->n + (d < 0 ? 0 : (size_t)d)],
			      (double)m[d < 0 ? 0 : d], (double)dm[d < 0 ? 0 : d]);
		d = first_diff(a + 2 * q->n, dv, q->n, 4);
		ck_assert_msg(d < 0, "%s: exp_avg_sq[%ld] read back %.9g, decode(encode(%.9g)) %.9g",
			      q->name, d, (double)a[2 * q->n + (d < 0 ? 0 : (size_t)d)],
			      (double)v[d < 0 ? 0 : d], (double)dv[d < 0 ? 0 : d]);

		/* what was read, written back: nothing changes */
		ck_assert_int_eq(tier_optim_write(w.o, q->id, a, a + q->n, a + 2 * q->n), 0);
		memset(b, 0xff, q->n * 12);
		ck_assert_int_eq(tier_optim_read(w.o, q->id, b, b + q->n, b + 2 * q->n), 0);
		d = first_diff(b, a, 3 * q->n, 4);
		ck_assert_msg(d < 0, "%s: read, written back and read again: float %ld of 3 x %zu differs (%.9g, was %.9g)",
			      q->name, d, q->n, (double)b[d < 0 ? 0 : d], (double)a[d < 0 ? 0 : d]);

		/* one moment written: the other stays */
		gen_moments(m, v, q->n, 500 + i);
		q8_write(&w, q, i % 2 ? NULL : m, i % 2 ? v : NULL);
		ck_assert_int_eq(tier_optim_read(w.o, q->id, b, b + q->n, b + 2 * q->n), 0);
		ck_assert_msg(memcmp(b, a, q->n * 4) == 0, "%s: a moment's write changed the master",
			      q->name);
		ck_assert_msg(memcmp(b + (i % 2 ? 1 : 2) * q->n, a + (i % 2 ? 1 : 2) * q->n,
				     q->n * 4) == 0,
			      "%s: a write of %s changed %s", q->name, i % 2 ? "exp_avg_sq" : "exp_avg",
			      i % 2 ? "exp_avg" : "exp_avg_sq");
		free(m);
		free(v);
		free(dm);
		free(dv);
		free(cm);
		free(cv);
		free(sm);
		free(sv);
		free(a);
		free(b);
		free(p0);
	}
	check_state(&w, "after the writes");
	/* the steps read the codes and scales written: the reference's */
	q8_steps(&w, 2, 5, "after the writes");
	world_close(&w);
}
END_TEST

/* ------------------------------------------------------------ creation */

START_TEST(params_defaults)
{
	struct tier_optim_params p;

	memset(&p, 0x5a, sizeof(p));
	tier_optim_params_init(&p);
	ck_assert_uint_eq(p.size, sizeof(p));
	ck_assert(p.lr == 1e-3);
	ck_assert(p.beta1 == 0.9);
	ck_assert(p.beta2 == 0.999);
	ck_assert(p.eps == 1e-8);
	ck_assert(p.weight_decay == 0.01);
	ck_assert(p.decoupled);
	ck_assert_int_eq(p.moment_dtype, TIER_DTYPE_MANIFEST);
	ck_assert(p.offload_fraction == TIER_OFFLOAD_MANIFEST);
	ck_assert(p.max_grad_norm == 0);
	ck_assert(!p.dynamic_loss_scale);
	ck_assert(p.min_loss_scale == 1);
	ck_assert(p.growth_factor == 2);
	ck_assert(p.backoff_factor == 0.5);
	ck_assert_uint_eq(p.growth_interval, 1000);
	ck_assert_uint_eq(p.hysteresis, 2);
	ck_assert_uint_eq(p.shard_size, 0);
	ck_assert_uint_eq(p.threads, 0);
}
END_TEST

/* TIER_DTYPE_MANIFEST, TIER_OFFLOAD_MANIFEST and shard_size 0 take the manifest's. */
START_TEST(manifest_values)
{
	struct scfg sc = { .dram = 1 * MiB, .hbm = 1 * MiB, .moment = "bf16", .offload = "0.25",
			   .shard = "128KiB" };
	struct tier_optim_params hp;
	struct world w;
	uint32_t nshards;
	bool big = false;

	world_open(&w, "man", &sc);
	tier_optim_params_init(&hp);
	hp.threads = 2;
	hp.loss_scale = 1;
	world_create(&w, &hp);
	ck_assert_int_eq(optim_info_of(w.o).moment_dtype, TIER_BF16);
	ck_assert_msg(optim_info_of(w.o).offload_fraction == 0.25, "cpu fraction %g",
		      optim_info_of(w.o).offload_fraction);
	w.outs = true;
	world_add(&w, "w", 70000, false, TIER_FP32, TIER_FP32, 1);
	world_add(&w, "b", 33, false, TIER_FP32, NONE, 2);
	nshards = world_count_shards(&w, 128 * KiB);
	for (uint32_t k = 0; k < w.pa[0].shards; k++) {
		char nm[64];

		snprintf(nm, sizeof(nm), "w#%u", k);
		big |= tier_obj_size(tier_obj_find(w.s, nm)) > 64 * KiB;
	}
	ck_assert_msg(big, "no shard above 64 KiB: the manifest's 128 KiB was not used");
	for (int k = 0; k < 3; k++) {
		struct tier_step_result r;
		struct ref_res rr;

		world_grads(&w, 11, k);
		opt_step(&w, step_lr[k], D_STEP, 0, &r);
		ref_step(&w, step_lr[k], &rr);
		check_result(&w, &r, &rr, nshards, k);
		check_state(&w, "manifest values");
	}
	world_close(&w);
}
END_TEST

struct bad_create {
	const char *what;
	const char *word;       /* the detail names it */
	int moment;
	double offload, lr;
};

static const struct bad_create bad_creates[] = {
	{ "moment dtype fp16", "moment", TIER_FP16, 1.0, 1e-3 },
	{ "moment dtype 7", "moment", 7, 1.0, 1e-3 },
	{ "offload_fraction 1.5", "offload", TIER_FP32, 1.5, 1e-3 },
	{ "offload_fraction -0.5", "offload", TIER_FP32, -0.5, 1e-3 },
	{ "negative lr", "lr", TIER_FP32, 1.0, -1e-3 },
};

START_TEST(create_errors)
{
	struct scfg sc = { .dram = 512 * KiB, .hbm = 1 * MiB };
	struct tier_optim_params hp;
	struct tier_optim *o = NULL;
	struct world w;

	world_open(&w, "cerr", &sc);
	for (size_t i = 0; i < ARRAY_SIZE(bad_creates); i++) {
		const struct bad_create *b = &bad_creates[i];

		hp_base(&hp);
		hp.moment_dtype = b->moment;
		hp.offload_fraction = b->offload;
		hp.lr = b->lr;
		ASSERT_ERR(tier_optim_create(w.s, &hp, &o), -EINVAL, b->what);
		ck_assert_msg(strstr(tier_last_error(), b->word) != NULL,
			      "%s: the detail '%s' does not name '%s'", b->what, tier_last_error(),
			      b->word);
	}
	/* NULL params: tier_optim_params_init's */
	ck_assert_int_eq(tier_optim_create(w.s, NULL, &o), 0);
	ck_assert_int_eq(optim_info_of(o).moment_dtype, TIER_FP32); /* the manifest's */
	ck_assert_int_eq(tier_optim_destroy(o), 0);
	o = NULL;
	/* the size field: a struct not initialised, or of another header */
	hp_base(&hp);
	hp.size = 0;
	ASSERT_ERR(tier_optim_create(w.s, &hp, &o), -EINVAL, "params not initialised");
	ck_assert_msg(strstr(tier_last_error(), "tier_optim_params") &&
		      strstr(tier_last_error(), "not initialised"), "%s", tier_last_error());
	hp_base(&hp);
	hp.size += 8;
	ASSERT_ERR(tier_optim_create(w.s, &hp, &o), -EINVAL, "params of another size");
	ck_assert_msg(strstr(tier_last_error(), "another tierstore.h"), "%s", tier_last_error());
	hp_base(&hp);
	ASSERT_ERR(tier_optim_create(NULL, &hp, &o), -EINVAL, "create on a NULL store");
	ASSERT_ERR(tier_optim_create(w.s, &hp, NULL), -EINVAL, "create with NULL out");
	VALID(w.s);
	world_close(&w);
}
END_TEST

/*
 * tier_optim_info reports what the optimizer resolved: the shard (elements
 * a multiple of 64, bytes per element by the moment dtype), the lookahead
 * window (the manifest's, a quarter of its DRAM tier here, scaled with the
 * store's DRAM and kept within [one shard, half of DRAM]), the lanes and
 * the state.
 */
struct info_case {
	uint64_t dram, store_dram;  /* the manifest's, the store's override (0: none) */
	const char *moment;
	uint64_t window;            /* expected */
};

static const struct info_case info_cases[] = {
	{ 512 * KiB, 0, "fp32", 128 * KiB },          /* dram / 4 */
	{ 512 * KiB, 0, "bf16", 128 * KiB },
	{ 512 * KiB, 1 * MiB, "fp32", 256 * KiB },    /* scaled with the store's DRAM */
	{ 1 * MiB, 512 * KiB, "bf16", 128 * KiB },
};

START_TEST(optim_info)
{
	const struct info_case *c = &info_cases[_i];
	struct scfg sc = { .dram = c->dram, .hbm = 1 * MiB, .moment = c->moment, .offload = "auto" };
	struct tier_optim_params hp;
	struct tier_optim_info in;
	struct tier_store_params sp;
	struct tier_store_stats st;
	struct world w;
	size_t mb = strcmp(c->moment, "bf16") == 0 ? 2 : 4;

	world_open(&w, "info", &sc);
	if (c->store_dram) {
		/* reopen the same manifest with the DRAM tier overridden */
		ck_assert_int_eq(tier_store_close(w.s), 0);
		tier_store_params_init(&sp);
		sp.dram_capacity = c->store_dram;
		sp.hbm_backend = "host";
		sp.hbm_capacity = 1 * MiB;
		sp.flags = TIER_STORE_SCRATCH;
		ck_assert_int_eq(tier_store_open(w.man, &sp, &w.s), 0);
	}
	hp_base(&hp);
	hp.moment_dtype = TIER_DTYPE_MANIFEST;
	hp.offload_fraction = TIER_OFFLOAD_MANIFEST;
	world_create(&w, &hp);
	world_add(&w, "a", 5000, false, TIER_FP32, TIER_FP32, 1);
	ck_assert_int_eq(tier_optim_info(w.o, &in), 0);
	ck_assert_int_eq(in.moment_dtype, mb == 2 ? TIER_BF16 : TIER_FP32);
	ck_assert_uint_eq(in.bytes_per_elem, 4 + 2 * mb);
	ck_assert_uint_eq(in.shard_elems, SHARD / (4 + 2 * mb) / 64 * 64);
	ck_assert_uint_eq(in.shard_bytes, in.shard_elems * in.bytes_per_elem);
	ck_assert_uint_eq(in.window_bytes, c->window);
	ck_assert(in.auto_split);
	ck_assert(in.gpu_lane);
	tier_store_get_stats(w.s, &st);
	ck_assert_uint_eq(in.hbm_budget, st.level[TIER_HBM].capacity / 2); /* half the HBM tier */
	ck_assert_uint_eq(in.write_behind, 4);
	ck_assert_uint_eq(in.threads, 2);
	ck_assert(in.offload_fraction == 0.5); /* auto starts at half (no step yet) */
	ck_assert_uint_eq(in.nparams, 1);
	ck_assert_uint_eq(in.nshards, (5000 + in.shard_elems - 1) / in.shard_elems);
	ck_assert_uint_eq(in.state_bytes, 5000ull * in.bytes_per_elem);
	ASSERT_ERR(tier_optim_info(NULL, &in), -EINVAL, "info of NULL");
	ASSERT_ERR(tier_optim_info(w.o, NULL), -EINVAL, "info into NULL");
	world_close(&w);
}
END_TEST

START_TEST(add_errors)
{
	struct scfg sc = { .dram = 512 * KiB, .hbm = 0, .nvme = 16 * MiB };
	struct tier_optim_params hp;
	struct world w;
	uint32_t id = 77;
	float *m = malloc(4099 * 4);

	ck_assert_ptr_nonnull(m);
	world_open(&w, "aerr", &sc);
	hp_base(&hp);
	world_create(&w, &hp);
	w.outs = true;
	world_add(&w, "first", 4099, false, TIER_FP32, TIER_FP32, 1);
	ASSERT_ERR(tier_optim_add_param(w.o, "first", 10, NULL, &id), -EEXIST, "duplicate name");
	ASSERT_ERR(tier_optim_add_param(w.o, "empty", 0, NULL, &id), -EINVAL, "numel 0");
	ck_assert_ptr_null(tier_obj_find(w.s, "empty#0"));
	ASSERT_ERR(tier_optim_add_param(w.o, NULL, 10, NULL, &id), -EINVAL, "NULL name");
	/* 2M elements, 24 MB of state, on a 16 MiB home */
	ASSERT_ERR(tier_optim_add_param(w.o, "huge", 2u << 20, NULL, &id), -ENOSPC,
		   "larger than the home");
	ck_assert_ptr_null(tier_obj_find(w.s, "huge#0"));
	ck_assert_uint_eq(tier_optim_nparams(w.o), 1);
	ck_assert_int_eq(tier_optim_param_info(w.o, 1, &(struct tier_param_info){ 0 }), -EINVAL);
	ck_assert_int_eq(tier_optim_param_info(w.o, UINT32_MAX, &(struct tier_param_info){ 0 }),
			 -EINVAL);
	ASSERT_ERR(tier_optim_read(w.o, 1, m, NULL, NULL), -EINVAL, "read of a bad id");
	/* read with only the master weights */
	ck_assert_int_eq(tier_optim_read(w.o, 0, m, NULL, NULL), 0);
	ck_assert(memcmp(m, w.pa[0].p, 4099 * 4) == 0);
	VALID(w.s);
	/* a second parameter after the failures gets id 1 */
	world_add(&w, "second", 70000, true, TIER_BF16, TIER_FP16, 2);
	{
		struct tier_step_result r;
		struct ref_res rr;
		uint32_t ns = world_count_shards(&w, SHARD);

		world_grads(&w, 3, 0);
		opt_step(&w, 1e-3, D_STEP, 0, &r);
		ref_step(&w, 1e-3, &rr);
		check_result(&w, &r, &rr, ns, 0);
		check_state(&w, "after the failed adds");
	}
	free(m);
	world_close(&w);
}
END_TEST

/* ------------------------------------------------------------ sizes */

/* A parameter size add_param must refuse at once: numel = mul x the shard
 * elements + add (mul 0: numel = add). */
struct zcase {
	const char *name;
	uint64_t mul;
	size_t add;
	int want;
};
static const struct zcase zcases[] = {
	{ "SIZE_MAX", 0, SIZE_MAX, -EOVERFLOW },
	{ "bytes overflow", 0, SIZE_MAX / 12 + 1, -EOVERFLOW },
	{ "2^60 + 12345", 0, ((size_t)1 << 60) + 12345, -EOVERFLOW },
	{ "2^32 shards", 1ull << 32, 0, -EOVERFLOW },
	{ "2^32 - 1 shards (with the one held)", (1ull << 32) - 1, 0, -EOVERFLOW },
	{ "2^20 shards: over the home", 1ull << 20, 0, -ENOSPC },
	{ "one element over the home", 0, 16 * MiB / 12 + 1, -ENOSPC },
};

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* _i = case: refused quickly, naming numel, nothing left behind; the
 * optimizer steps on. */
START_TEST(size_errors)
{
	const struct zcase *c = &zcases[_i];
	struct scfg sc = { .dram = 512 * KiB, .hbm = 0, .nvme = 16 * MiB };
	struct tier_optim_params hp;
	struct tier_optim_info info;
	struct world w;
	char val[48];
	size_t numel;
	double t0;

	world_open(&w, "size", &sc);
	hp_base(&hp);
	world_create(&w, &hp);
	w.outs = true;
	world_add(&w, "first", 100, false, TIER_FP32, TIER_FP32, 1);
	ck_assert_int_eq(tier_optim_info(w.o, &info), 0);
	numel = c->mul ? (size_t)(c->mul * info.shard_elems) + c->add : c->add;
	snprintf(val, sizeof(val), "numel %zu", numel);
	t0 = now_s();
	ASSERT_ERR(tier_optim_add_param(w.o, "big", numel, NULL, NULL), c->want, c->name);
	ck_assert_msg(now_s() - t0 < 1.0, "%s: took %.2f s", c->name, now_s() - t0);
	ck_assert_msg(strstr(tier_last_error(), val), "%s: '%s' does not name %s", c->name,
		      tier_last_error(), val);
	ck_assert_ptr_null(tier_obj_find(w.s, "big#0"));
	ck_assert_uint_eq(tier_optim_nparams(w.o), 1);
	ck_assert_int_eq(tier_optim_info(w.o, &info), 0);
	ck_assert_uint_eq(info.nshards, 1);
	{
		struct tier_step_result r;
		struct ref_res rr;

		world_grads(&w, 3, 0);
		opt_step(&w, 1e-3, D_STEP, 0, &r);
		ref_step(&w, 1e-3, &rr);
		check_state(&w, c->name);
	}
	world_close(&w);
}
END_TEST

/* Thread counts over TIER_POOL_MAX_THREADS refused by create and by the
 * pool, naming the value; store objects too large for any tier. */
START_TEST(count_errors)
{
	static const unsigned bad_threads[] = { 100000, TIER_POOL_MAX_THREADS + 1, UINT32_MAX };
	static const uint64_t big_objs[] = { UINT64_MAX, UINT64_MAX - 4095, 1ull << 63 };
	struct scfg sc = { .dram = 512 * KiB, .hbm = 0, .nvme = 16 * MiB };
	struct tier_optim_params hp;
	struct world w;

	world_open(&w, "count", &sc);
	for (size_t i = 0; i < ARRAY_SIZE(bad_threads); i++) {
		struct tier_optim *o = (void *)1;
		struct tier_pool *pool = (void *)1;
		char val[48];
		double t0 = now_s();

		hp_base(&hp);
		hp.threads = bad_threads[i];
		snprintf(val, sizeof(val), "threads %u", bad_threads[i]);
		ASSERT_ERR(tier_optim_create(w.s, &hp, &o), -EINVAL, val);
		ck_assert_msg(strstr(tier_last_error(), val) && strstr(tier_last_error(), "1024"),
			      "'%s' does not name %s and the cap", tier_last_error(), val);
		ck_assert_ptr_null(o);
		snprintf(val, sizeof(val), "%u threads", bad_threads[i]);
		ASSERT_ERR(tier_pool_create(bad_threads[i], &pool), -EINVAL, val);
		ck_assert_msg(strstr(tier_last_error(), val), "'%s' does not name %s",
			      tier_last_error(), val);
		ck_assert_ptr_null(pool);
		ck_assert_msg(now_s() - t0 < 1.0, "%s: took %.2f s", val, now_s() - t0);
	}
	for (size_t i = 0; i < ARRAY_SIZE(big_objs); i++) {
		struct tier_obj *obj = (void *)1;

		ASSERT_ERR(tier_obj_create(w.s, "big", big_objs[i], &obj), -ENOSPC, "a huge object");
		ck_assert_ptr_null(obj);
		ck_assert_ptr_null(tier_obj_find(w.s, "big"));
	}
	VALID(w.s);
	world_close(&w);
}
END_TEST

/* ------------------------------------------------------------ what an optimizer holds */

/*
 * While an optimizer lives, its store and its shard objects are its own
 * (issue 41): tier_store_close refuses (-EBUSY, saying how many
 * optimizers, the store left open and working) and tier_obj_destroy
 * refuses each shard object (-EBUSY naming it, the object left; the next
 * step, which schedules it, works), whether the shard came with
 * tier_optim_add_param, with a group added later, from an import or from
 * a checkpoint (resume), partitioned or not.  The optimizer's own paths
 * still free them: tier_optim_remove_param, tier_optim_destroy; a resume
 * refused because another optimizer holds the checkpoint's objects leaves
 * them that optimizer's.  Then the close works.  _i = how the optimizer
 * came to be.
 */
enum held_how { HELD_CREATE, HELD_TWO, HELD_PARTITIONED, HELD_IMPORT, HELD_RESUME };

struct held_case {
	const char *what;
	enum held_how how;
};

static const struct held_case held_cases[] = {
	{ "tier_optim_create", HELD_CREATE },
	{ "two optimizers", HELD_TWO },
	{ "partitioned (one rank)", HELD_PARTITIONED },
	{ "tier_optim_import", HELD_IMPORT },
	{ "tier_optim_resume", HELD_RESUME },
};

/* A step of @o with every gradient 1/64 (fp32), no outputs: it applies. */
static void held_step(struct tier_optim *o, const char *what)
{
	uint32_t np = tier_optim_nparams(o);
	struct tier_tensor g[MAXP];
	struct tier_step_result res;
	int rc;

	ck_assert_uint_le(np, MAXP);
	for (uint32_t i = 0; i < np; i++) {
		size_t n = param_info_of(o, i).numel;
		float *b = malloc(n * 4);

		ck_assert_ptr_nonnull(b);
		for (size_t k = 0; k < n; k++)
			b[k] = 0x1p-6f;
		g[i] = (struct tier_tensor){ .ptr = b, .dtype = TIER_FP32, .mem = TIER_MEM_HOST,
					     .numel = n };
	}
	rc = tier_optim_step(o, TIER_LR_KEEP, g, NULL, &res);
	for (uint32_t i = 0; i < np; i++)
		free(g[i].ptr);
	ck_assert_msg(rc == 0, "%s: step: %d: %s", what, rc, tier_last_error());
	ck_assert_msg(res.applied, "%s: the step was not applied", what);
}

/* tier_obj_destroy of the optimizer's object @name: -EBUSY naming it,
 * the object still there. */
static void held_obj(struct world *w, const char *name)
{
	struct tier_obj *ob = tier_obj_find(w->s, name);
	char quoted[64];

	ck_assert_msg(ob != NULL, "no object '%s'", name);
	snprintf(quoted, sizeof(quoted), "'%s'", name);
	ASSERT_ERR(tier_obj_destroy(w->s, ob), -EBUSY, quoted);
	ck_assert_msg(strstr(tier_last_error(), quoted) &&
		      strstr(tier_last_error(), "tier_optim_destroy"),
		      "destroy of %s: the detail '%s' does not name it and tier_optim_destroy",
		      quoted, tier_last_error());
	ck_assert_ptr_eq(tier_obj_find(w->s, name), ob);
}

/* tier_store_close with @n optimizers alive: -EBUSY saying so. */
static void held_close(struct world *w, unsigned n)
{
	char count[32];

	snprintf(count, sizeof(count), "%u optimizer%s", n, n == 1 ? "" : "s");
	ASSERT_ERR(tier_store_close(w->s), -EBUSY, "close with an optimizer alive");
	ck_assert_msg(strstr(tier_last_error(), count) &&
		      strstr(tier_last_error(), "tier_optim_destroy"),
		      "close: the detail '%s' does not say '%s' and tier_optim_destroy",
		      tier_last_error(), count);
	VALID(w->s); /* still open */
}

START_TEST(held_refusals)
{
	const struct held_case *c = &held_cases[_i];
	struct scfg sc = { .dram = 512 * KiB, .hbm = 1 * MiB };
	struct tier_optim_params hp;
	struct tier_group_params gp;
	struct tier_optim *o2 = NULL;
	struct tier_comm *comm = NULL;
	struct tier_obj *plain;
	uint32_t gid = 0, id = 0;
	char path[512];
	struct world w;
	int rc;

	world_open_flags(&w, "held", &sc, c->how == HELD_RESUME ? 0 : TIER_STORE_SCRATCH);
	hp_base(&hp);
	if (c->how == HELD_PARTITIONED) {
		struct tier_comm_params cp;

		tier_comm_params_init(&cp);
		cp.backend = "single";
		ck_assert_msg(tier_comm_open(&cp, &comm) == 0, "comm: %s", tier_last_error());
		hp.comm = comm;
	}
	world_create(&w, &hp);
	world_add(&w, "wa", 70000, false, TIER_FP32, -1, 1);
	world_add(&w, "wb", 4099, false, TIER_FP32, -1, 2);
	if (c->how == HELD_IMPORT) {
		snprintf(path, sizeof(path), "%s/held.safetensors", g_dir);
		rc = tier_optim_export(w.o, path);
		ck_assert_msg(rc == 0, "export: %d: %s", rc, tier_last_error());
		ck_assert_int_eq(tier_optim_destroy(w.o), 0);
		w.o = NULL;
		rc = tier_optim_import(w.s, path, NULL, &w.o);
		ck_assert_msg(rc == 0, "import: %d: %s", rc, tier_last_error());
	} else if (c->how == HELD_RESUME) {
		struct tier_store_params sp = { .size = sizeof(sp), .dram_capacity = sc.dram,
						.hbm_backend = "host", .hbm_capacity = sc.hbm };

		held_step(w.o, c->what);
		rc = tier_optim_checkpoint(w.o, NULL);
		ck_assert_msg(rc == 0, "checkpoint: %d: %s", rc, tier_last_error());
		ck_assert_int_eq(tier_optim_destroy(w.o), 0);
		w.o = NULL;
		ck_assert_int_eq(tier_store_close(w.s), 0);
		rc = tier_store_open(w.man, &sp, &w.s);
		ck_assert_msg(rc == 0, "reopen: %d: %s", rc, tier_last_error());
		rc = tier_optim_resume(w.s, NULL, &w.o);
		ck_assert_msg(rc == 0, "resume: %d: %s", rc, tier_last_error());
		/* a second resume finds the objects held: refused, and they stay
		 * the first optimizer's */
		ASSERT_ERR(tier_optim_resume(w.s, NULL, &o2), -EBUSY, "a second resume");
		ck_assert_ptr_null(o2);
	} else if (c->how == HELD_TWO) {
		rc = tier_optim_create(w.s, &hp, &o2);
		ck_assert_msg(rc == 0, "second create: %d: %s", rc, tier_last_error());
		rc = tier_optim_add_param(o2, "other", 5000, NULL, NULL);
		ck_assert_msg(rc == 0, "second add: %d: %s", rc, tier_last_error());
	}
	/* a group added later, and a parameter in it */
	tier_group_params_init(&gp);
	gp.lr = 2e-3;
	rc = tier_optim_add_group(w.o, &gp, &gid);
	ck_assert_msg(rc == 0, "add group: %d: %s", rc, tier_last_error());
	rc = tier_optim_add_param_to(w.o, gid, "wg", 5000, NULL, &id);
	ck_assert_msg(rc == 0, "add to group: %d: %s", rc, tier_last_error());

	held_close(&w, c->how == HELD_TWO ? 2 : 1);
	held_obj(&w, "wa#0");
	held_obj(&w, "wa#1");
	held_obj(&w, "wb#0");
	held_obj(&w, "wg#0");
	if (o2)
		held_obj(&w, "other#0");
	VALID(w.s);
	held_step(w.o, c->what);
	if (o2)
		held_step(o2, "the second optimizer");
	VALID(w.s);

	/* the optimizer's own paths free what it holds */
	rc = tier_optim_remove_param(w.o, id);
	ck_assert_msg(rc == 0, "remove_param: %d: %s", rc, tier_last_error());
	ck_assert_ptr_null(tier_obj_find(w.s, "wg#0"));
	held_step(w.o, c->what);
	if (o2) {
		ck_assert_int_eq(tier_optim_destroy(o2), 0);
		ck_assert_ptr_null(tier_obj_find(w.s, "other#0"));
		held_close(&w, 1);
	}
	/* an object of the store's own stays the caller's to destroy */
	ck_assert_int_eq(tier_obj_create(w.s, "plain", 4096, &plain), 0);
	ck_assert_int_eq(tier_obj_destroy(w.s, plain), 0);
	world_close(&w); /* destroy frees its objects; then the close works */
	if (comm)
		ck_assert_int_eq(tier_comm_close(comm), 0);
}
END_TEST

/* ------------------------------------------------------------ one step at a time */

/* Two threads call begin (or tier_optim_step) at the same moment. */
struct racer {
	struct world *w;
	pthread_barrier_t *bar;
	bool whole;            /* tier_optim_step, else tier_optim_begin */
	struct tier_tensor *g, *out;
	int rc;
	char detail[256];
};

static void *racer_run(void *arg)
{
	struct racer *r = arg;
	struct tier_step_result res;

	pthread_barrier_wait(r->bar);
	if (r->whole)
		r->rc = tier_optim_step(r->w->o, 0, r->g, r->out, &res);
	else
		r->rc = tier_optim_begin(r->w->o, 0);
	snprintf(r->detail, sizeof(r->detail), "%s", tier_last_error());
	return NULL;
}

/* Runs two racers; returns how many got 0, checking the others got -EBUSY. */
static int race(struct world *w, bool whole, struct tier_tensor *g, struct tier_tensor *out)
{
	pthread_barrier_t bar;
	struct racer r[2];
	pthread_t th[2];
	int ok = 0;

	pthread_barrier_init(&bar, NULL, 2);
	for (int i = 0; i < 2; i++) {
		r[i] = (struct racer){ .w = w, .bar = &bar, .whole = whole, .g = g, .out = out };
		ck_assert_int_eq(pthread_create(&th[i], NULL, racer_run, &r[i]), 0);
	}
	for (int i = 0; i < 2; i++)
		pthread_join(th[i], NULL);
	pthread_barrier_destroy(&bar);
	for (int i = 0; i < 2; i++) {
		ck_assert_msg(r[i].rc == 0 || r[i].rc == -EBUSY, "%s: %d: %s",
			      whole ? "step" : "begin", r[i].rc, r[i].detail);
		if (r[i].rc == -EBUSY)
			ck_assert_msg(strstr(r[i].detail, "already begun"), "-EBUSY detail: %s",
				      r[i].detail);
		ok += r[i].rc == 0;
	}
	return ok;
}

/*
 * The "one step at a time" guard under a race: two threads calling
 * tier_optim_begin together, one gets 0 and the other -EBUSY, every time
 * (the step begun is then pushed and ended by this thread, and works);
 * two calling tier_optim_step together each get 0 or -EBUSY (both 0 when
 * one ended before the other began), and at least one 0.  Under TSan (the
 * concurrent suites) the guard must show no race.
 */
START_TEST(concurrent_begin)
{
	struct tier_tensor g[MAXP], out[MAXP];
	struct tier_step_result res;
	struct world w;
	int rc;

	small_world(&w, "race", 1.0);
	for (size_t i = 0; i < w.np; i++) {
		g[i] = grad_t(&w.pa[i]);
		out[i] = out_t(&w.pa[i]);
	}
	for (int k = 0; k < 100; k++) {
		ck_assert_int_eq(race(&w, false, g, out), 1);
		for (size_t i = 0; i < w.np; i++) {
			rc = tier_optim_push(w.o, (uint32_t)i, &g[i], &out[i]);
			ck_assert_msg(rc == 0, "push %zu: %d: %s", i, rc, tier_last_error());
		}
		rc = tier_optim_end(w.o, &res);
		ck_assert_msg(rc == 0, "end: %d: %s", rc, tier_last_error());
	}
	for (int k = 0; k < 50; k++)
		ck_assert_int_ge(race(&w, true, g, out), 1);
	world_close(&w);
}
END_TEST

/* ------------------------------------------------------------ suite */

/* Case @tc of @s with the per-case and per-test fixtures and @timeout s. */
static TCase *add_case(Suite *s, TCase *tc, int timeout)
{
	tcase_add_unchecked_fixture(tc, t_case_setup, t_case_teardown);
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_set_timeout(tc, timeout);
	suite_add_tcase(s, tc);
	return tc;
}

static TCase *new_case(Suite *s, const char *name, int timeout)
{
	return add_case(s, tcase_create(name), timeout);
}

/* A case of tests that arm fault sites (t_helpers.h). */
static TCase *new_fault_case(Suite *s, const char *name, int timeout)
{
	return add_case(s, t_tcase_faults(name), timeout);
}

static Suite *optim_suite(void)
{
	Suite *s = suite_create("optim");
	TCase *tc;

	tc = new_case(s, "matrix", 120);
	tcase_add_loop_test(tc, optim_matrix, 0, (int)ARRAY_SIZE(mcases));

	tc = new_fault_case(s, "matrix-faults", 120);
	tcase_add_loop_test(tc, optim_matrix_delay, 0, (int)ARRAY_SIZE(mcases_delay));

	tc = new_case(s, "lane-options", 120);
	tcase_add_loop_test(tc, optim_lane_options, 0, (int)ARRAY_SIZE(lane_cases));

	tc = new_case(s, "overflow", 120);
	tcase_add_loop_test(tc, optim_overflow, 0, (int)ARRAY_SIZE(ocases));

	tc = new_case(s, "golden", 120);
	tcase_add_loop_test(tc, optim_golden, 0, (int)T_GOLDEN_CASES * 2);

	tc = new_case(s, "stream", 120);
	tcase_add_test(tc, stream_order);
	tcase_add_test(tc, stream_errors);

	/* its own case and a short timeout: a hang here is a failure of this
	 * test, not of the whole suite's time limit */
	tc = new_fault_case(s, "failure", 20);
	tcase_add_loop_test(tc, tier_failure, 0, (int)ARRAY_SIZE(fcases));

	tc = new_case(s, "lr", 60);
	tcase_add_loop_test(tc, lr_values, 0, (int)ARRAY_SIZE(lcases));

	tc = new_case(s, "q8", 60);
	tcase_add_loop_test(tc, q8_write_read, 0, (int)ARRAY_SIZE(wcases));

	tc = new_case(s, "create", 60);
	tcase_add_test(tc, params_defaults);
	tcase_add_test(tc, manifest_values);
	tcase_add_test(tc, create_errors);
	tcase_add_loop_test(tc, optim_info, 0, (int)ARRAY_SIZE(info_cases));
	tcase_add_test(tc, add_errors);

	/* a short timeout: a size that loops is a failure here */
	tc = new_case(s, "sizes", 10);
	tcase_add_loop_test(tc, size_errors, 0, (int)ARRAY_SIZE(zcases));
	tcase_add_test(tc, count_errors);

	tc = new_case(s, "held", 60);
	tcase_add_loop_test(tc, held_refusals, 0, (int)ARRAY_SIZE(held_cases));

	tc = new_case(s, "concurrent", 60);
	tcase_add_test(tc, concurrent_begin);
	return s;
}

int main(void)
{
	return t_run_suite(optim_suite());
}
