/*
 * test_trainer.c - the optimizer's trainer API (API 0.4; include/tierstore.h,
 * docs/optimizer.md "Groups, skipped and frozen parameters"): parameter
 * groups with their own hyperparameters changed between steps, a step
 * count per parameter, parameters without a gradient left as they are,
 * parameters added late, frozen, thawed and removed, and the state
 * getters and setters a binding's state_dict uses.
 *
 * Each scenario is a script of steps and changes run against the library
 * (its state streaming through an NVMe file, DRAM a fraction of it) and
 * against a reference that runs tier_adam_step in memory with each
 * parameter's group and count: master weights, both moments, the output
 * buffers and every parameter's step count must be equal bit for bit
 * after every step, and so after a checkpoint and resume, an export and
 * import, or a state copied through tier_optim_read / tier_optim_write.
 * Moments fp32, bf16 or q8 (the reference keeps q8 codes and block
 * scales; tier_optim_read's fp32 values must be tier_q8_decode of them).
 * The misuse table checks each refusal and that it changed nothing.
 */
#include "config.h"

#include <check.h>
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "kernels/adam_math.h"
#include "t_helpers.h"

#define KiB (1ull << 10)
#define MAXP 8
#define MAXG 4
#define MAXOPS 24

static char *g_dir;
/* TIER_TRAINER_HBM=cuda (tests/gpu/run.sh): every scenario with the CUDA
 * lane on a real device, half the shards on it. */
static bool g_cuda;

static void setup(void)
{
	ts_err_clear();
	g_dir = t_mkdtemp();
}

static void teardown(void)
{
	t_rmtree(g_dir);
	free(g_dir);
	g_dir = NULL;
}

/* ------------------------------------------------------------ the world */

struct tparam {
	char name[32];
	size_t n;
	uint32_t group;
	uint64_t step;
	bool frozen;
	float *p;               /* the reference's master weights */
	void *m, *v;            /* its moments (the moment dtype) */
	float *ms, *vs;         /* q8: their blocks' scales; else NULL */
	float *g;               /* this step's gradient */
	void *out, *rout;       /* bf16 outputs: the optimizer's, the reference's */
};

struct tworld {
	char sub[64];
	const char *moment;
	uint64_t hbm;
	double offload;
	double clip;
	struct tier_manifest *man;
	struct tier_store *s;
	struct tier_optim *o;
	enum tier_dtype md;
	size_t ms;              /* bytes per element of the reference's moments */
	size_t rs;              /* and of tier_optim_read's (q8: fp32 values) */
	size_t np;
	struct tparam pa[MAXP];
	uint32_t ng;
	struct tier_group_params gp[MAXG];
	uint32_t nsteps;        /* steps the script ran */
	uint64_t applied;
};

static void world_open_store(struct tworld *w)
{
	struct tier_store_params sp;
	char text[2048];
	int n, rc;

	n = snprintf(text, sizeof(text),
		     "name: %s\ngpu:\n  device: %s\ndram:\n  capacity: 320KiB\n"
		     "optimizer:\n  shard_size: 64KiB\n  moment_dtype: %s\n"
		     "nvme:\n  stripe_unit: 64KiB\n  checksum: crc32c\n"
		     "  paths:\n    - path: %s/%s/\n      capacity: 64MiB\n      create: true\n",
		     w->sub, g_cuda ? "0" : "none", w->moment, g_dir, w->sub);
	ck_assert_int_lt(n, (int)sizeof(text));
	if (!w->man) {
		rc = tier_manifest_parse(text, (size_t)n, "trainer.yaml", 0, &w->man);
		ck_assert_msg(rc == 0, "manifest: %s\n%s", tier_last_error(), text);
	}
	tier_store_params_init(&sp);
	sp.hbm_backend = !w->hbm ? "none" : g_cuda ? "cuda" : "host";
	sp.hbm_capacity = w->hbm;
	rc = tier_store_open(w->man, &sp, &w->s);
	ck_assert_msg(rc == 0, "store open: %d: %s", rc, tier_last_error());
}

static void hp_of(const struct tworld *w, struct tier_optim_params *hp)
{
	tier_optim_params_init(hp);
	hp->offload_fraction = w->offload;
	hp->max_grad_norm = w->clip;
	hp->threads = 2;
	hp->lr = w->gp[0].lr;
	hp->beta1 = w->gp[0].beta1;
	hp->beta2 = w->gp[0].beta2;
	hp->eps = w->gp[0].eps;
	hp->weight_decay = w->gp[0].weight_decay;
	hp->decoupled = w->gp[0].decoupled;
}

static void world_init(struct tworld *w, const char *sub, const char *moment, uint64_t hbm,
		       double offload, double clip)
{
	struct tier_optim_params hp;
	int rc;

	memset(w, 0, sizeof(*w));
	if (g_cuda) {
		hbm = 512 * KiB;
		offload = 0.5;
	}
	snprintf(w->sub, sizeof(w->sub), "%s", sub);
	w->moment = moment;
	w->hbm = hbm;
	w->offload = offload;
	w->clip = clip;
	w->md = !strcmp(moment, "bf16") ? TIER_BF16 : !strcmp(moment, "q8") ? TIER_Q8 : TIER_FP32;
	w->ms = tier_dtype_size(w->md);
	w->rs = w->md == TIER_Q8 ? 4 : w->ms;
	world_open_store(w);
	tier_group_params_init(&w->gp[0]);
	w->ng = 1;
	hp_of(w, &hp);
	rc = tier_optim_create(w->s, &hp, &w->o);
	ck_assert_msg(rc == 0, "optim create: %d: %s", rc, tier_last_error());
	ck_assert_uint_eq(tier_optim_ngroups(w->o), 1);
}

static void world_close(struct tworld *w)
{
	ck_assert_int_eq(tier_optim_destroy(w->o), 0);
	ck_assert_int_eq(tier_store_close(w->s), 0);
	tier_manifest_free(w->man);
	for (size_t i = 0; i < w->np; i++) {
		struct tparam *q = &w->pa[i];

		free(q->p);
		free(q->m);
		free(q->v);
		free(q->ms);
		free(q->vs);
		free(q->g);
		free(q->out);
		free(q->rout);
	}
}

/* A value in [-a, a) from (seed, i). */
static float val(uint64_t seed, size_t i, double a)
{
	return (float)(((double)(t_rnd_mix(seed * 1000003u + i) >> 11) * 0x1p-53 * 2 - 1) * a);
}

static void world_add(struct tworld *w, const char *name, size_t n, uint32_t group)
{
	struct tparam *q = &w->pa[w->np];
	uint32_t id = UINT32_MAX;
	int rc;

	ck_assert_uint_lt(w->np, MAXP);
	memset(q, 0, sizeof(*q));
	snprintf(q->name, sizeof(q->name), "%s", name);
	q->n = n;
	q->group = group;
	q->p = malloc(n * 4);
	q->m = calloc(n, w->ms);
	q->v = calloc(n, w->ms);
	q->g = malloc(n * 4);
	q->out = calloc(n, 2);
	q->rout = calloc(n, 2);
	ck_assert(q->p && q->m && q->v && q->g && q->out && q->rout);
	if (w->md == TIER_Q8) {
		q->ms = calloc((n + TIER_Q8_BLOCK - 1) / TIER_Q8_BLOCK, 4);
		q->vs = calloc((n + TIER_Q8_BLOCK - 1) / TIER_Q8_BLOCK, 4);
		ck_assert(q->ms && q->vs);
	}
	for (size_t i = 0; i < n; i++)
		q->p[i] = val(n, i, 0.1);
	rc = tier_optim_add_param_to(w->o, group, name, n, q->p, &id);
	ck_assert_msg(rc == 0, "add %s: %d: %s", name, rc, tier_last_error());
	ck_assert_uint_eq(id, w->np);
	w->np++;
}

static int find(const struct tworld *w, const char *name)
{
	for (size_t i = 0; i < w->np; i++)
		if (!strcmp(w->pa[i].name, name))
			return (int)i;
	ck_abort_msg("no parameter %s in the script's world", name);
	return -1;
}

/* ------------------------------------------------------------ checks */

static void check_state(struct tworld *w, const char *when)
{
	ck_assert_uint_eq(tier_optim_nparams(w->o), w->np);
	ck_assert_uint_eq(tier_optim_ngroups(w->o), w->ng);
	for (uint32_t g = 0; g < w->ng; g++) {
		struct tier_group_params got;

		ck_assert_int_eq(tier_optim_get_group(w->o, g, &got), 0);
		ck_assert_msg(got.lr == w->gp[g].lr && got.weight_decay == w->gp[g].weight_decay &&
			      got.beta1 == w->gp[g].beta1 && got.beta2 == w->gp[g].beta2 &&
			      got.eps == w->gp[g].eps && got.decoupled == w->gp[g].decoupled,
			      "%s: group %u's hyperparameters differ", when, g);
	}
	for (size_t i = 0; i < w->np; i++) {
		struct tparam *q = &w->pa[i];
		struct tier_param_info pi;
		float *rp = malloc(q->n * 4);
		void *rm = malloc(q->n * w->rs), *rv = malloc(q->n * w->rs);
		void *em = q->m, *ev = q->v; /* what the read must give */
		int rc;

		ck_assert(rp && rm && rv);
		if (w->md == TIER_Q8) {
			em = malloc(q->n * 4);
			ev = malloc(q->n * 4);
			ck_assert(em && ev);
			ck_assert_int_eq(tier_q8_decode(q->m, q->ms, q->n, TIER_Q8_EXP_AVG, em), 0);
			ck_assert_int_eq(tier_q8_decode(q->v, q->vs, q->n, TIER_Q8_EXP_AVG_SQ, ev), 0);
		}
		ck_assert_int_eq(tier_optim_param_info(w->o, (uint32_t)i, &pi), 0);
		ck_assert_str_eq(pi.name, q->name);
		ck_assert_uint_eq(pi.numel, q->n);
		ck_assert_msg(pi.group == q->group, "%s: %s: group %u, expected %u", when, q->name,
			      pi.group, q->group);
		ck_assert_msg(pi.step == q->step, "%s: %s: step %" PRIu64 ", expected %" PRIu64,
			      when, q->name, pi.step, q->step);
		ck_assert(pi.frozen == q->frozen);
		rc = tier_optim_read(w->o, (uint32_t)i, rp, rm, rv);
		ck_assert_msg(rc == 0, "read %s: %s", q->name, tier_last_error());
		ck_assert_msg(!memcmp(rp, q->p, q->n * 4), "%s: %s: master weights differ", when,
			      q->name);
		ck_assert_msg(!memcmp(rm, em, q->n * w->rs), "%s: %s: exp_avg differs", when,
			      q->name);
		ck_assert_msg(!memcmp(rv, ev, q->n * w->rs), "%s: %s: exp_avg_sq differs", when,
			      q->name);
		ck_assert_msg(!memcmp(q->out, q->rout, q->n * 2), "%s: %s: output differs", when,
			      q->name);
		free(rp);
		free(rm);
		free(rv);
		if (em != q->m) {
			free(em);
			free(ev);
		}
	}
}

/* One step: the parameters in @mask (positions) get gradients. */
static void world_step(struct tworld *w, uint32_t mask, bool streaming)
{
	struct tier_tensor g[MAXP], out[MAXP];
	struct tier_step_result res;
	double total = 0;
	uint32_t pushed = 0;
	uint64_t k = ++w->nsteps;
	int rc;

	for (size_t i = 0; i < w->np; i++) {
		struct tparam *q = &w->pa[i];
		bool has = (mask >> i) & 1u && !q->frozen;

		for (size_t j = 0; j < q->n; j++)
			q->g[j] = val(k * 31 + i, j, 1.0);
		g[i] = (struct tier_tensor){ has ? q->g : NULL, TIER_FP32, TIER_MEM_HOST, q->n };
		out[i] = (struct tier_tensor){ q->out, TIER_BF16, TIER_MEM_HOST, q->n };
		if (has) {
			struct tier_grad_stats st = { 0 };

			ck_assert_int_eq(tier_grad_check(NULL, q->g, TIER_FP32, q->n, &st), 0);
			total += st.sumsq;
			pushed++;
		}
	}
	if (!streaming) {
		rc = tier_optim_step(w->o, TIER_LR_KEEP, g, out, &res);
	} else {
		/* backward order, as a trainer's hooks push */
		ck_assert_int_eq(tier_optim_begin(w->o, TIER_LR_KEEP), 0);
		for (size_t i = w->np; i-- > 0;)
			if (g[i].ptr)
				ck_assert_int_eq(tier_optim_push(w->o, (uint32_t)i, &g[i], &out[i]), 0);
		rc = tier_optim_end(w->o, &res);
	}
	ck_assert_msg(rc == 0, "step %" PRIu64 ": %d: %s", k, rc, tier_last_error());
	ck_assert_uint_eq(res.params_updated, pushed);
	ck_assert_uint_eq(res.params_skipped, w->np - pushed);
	ck_assert(res.applied == (pushed > 0));
	if (!pushed)
		return;
	w->applied++;
	ck_assert_uint_eq(res.step, w->applied);
	{
		double norm = sqrt(total), clip = w->clip > 0 ? tier_clip_coef(norm, w->clip) : 1.0;

		ck_assert_msg(res.grad_norm == norm, "step %" PRIu64 ": norm %.17g, expected %.17g",
			      k, res.grad_norm, norm);
		for (size_t i = 0; i < w->np; i++) {
			struct tparam *q = &w->pa[i];
			const struct tier_group_params *gp = &w->gp[q->group];
			struct tier_adam_params ap;
			struct tier_adam_tensors t = {
				.n = q->n, .param = q->p, .exp_avg = q->m, .exp_avg_sq = q->v,
				.exp_avg_scale = q->ms, .exp_avg_sq_scale = q->vs,
				.moment_dtype = w->md, .grad = q->g, .grad_dtype = TIER_FP32,
				.param_out = q->rout, .out_dtype = TIER_BF16,
			};

			if (!g[i].ptr)
				continue;
			tier_adam_params_init(&ap);
			ap.lr = gp->lr;
			ap.beta1 = gp->beta1;
			ap.beta2 = gp->beta2;
			ap.eps = gp->eps;
			ap.weight_decay = gp->weight_decay;
			ap.decoupled = gp->decoupled;
			ap.step = ++q->step;
			ap.grad_scale = clip;
			ap.rounding = TIER_ROUND_STOCHASTIC; /* the manifest's default */
			ap.seed = sr_param_seed(0, (uint32_t)i);
			ck_assert_int_eq(tier_adam_step(NULL, &ap, &t), 0);
		}
	}
}

/* ------------------------------------------------------------ scripts */

enum opk {
	OP_END,
	OP_STEP,        /* mask */
	OP_SSTEP,       /* mask, the streaming form */
	OP_GROUP,       /* new group: lr, wd, decoupled */
	OP_SET,         /* group arg: lr, wd */
	OP_ADD,         /* name, n, group arg */
	OP_FREEZE,      /* name */
	OP_THAW,        /* name */
	OP_REMOVE,      /* name */
	OP_RESUME,      /* checkpoint, close everything, reopen, resume */
	OP_IMPORT,      /* export, import into a fresh store */
	OP_COPY,        /* read every state, write it into a new optimizer */
};

struct op {
	enum opk k;
	uint32_t mask;
	const char *name;
	size_t n;
	uint32_t arg;
	double lr, wd;
	bool decoupled;
};

struct scenario {
	const char *name;
	const char *moment;
	uint64_t hbm;
	double offload;
	double clip;
	struct op ops[MAXOPS];
};

#define ALL 0xffu
#define STEP(m) { .k = OP_STEP, .mask = (m) }
#define SSTEP(m) { .k = OP_SSTEP, .mask = (m) }
#define GROUP(l, w, d) { .k = OP_GROUP, .lr = (l), .wd = (w), .decoupled = (d) }
#define SET(g, l, w) { .k = OP_SET, .arg = (g), .lr = (l), .wd = (w) }
#define ADD(nm, sz, g) { .k = OP_ADD, .name = (nm), .n = (sz), .arg = (g) }
#define FREEZE(nm) { .k = OP_FREEZE, .name = (nm) }
#define THAW(nm) { .k = OP_THAW, .name = (nm) }
#define REMOVE(nm) { .k = OP_REMOVE, .name = (nm) }
#define RESUME { .k = OP_RESUME }
#define IMPORT { .k = OP_IMPORT }
#define COPY { .k = OP_COPY }

/* Sizes: the state (12, 8 or about 6 bytes per element) is a few times the 320 KiB
 * DRAM tier, and a parameter spans several 64 KiB shards. */
#define BASE ADD("emb", 30000, 0), ADD("w1", 9000, 1), ADD("b1", 700, 2), ADD("w2", 12001, 1)
#define GROUPS GROUP(3e-3, 0.1, true), GROUP(2e-3, 0.0, true)

static const struct scenario scenarios[] = {
	{ "groups", "fp32", 0, 1.0, 0,
	  { GROUPS, BASE, STEP(ALL), SET(0, 1e-3, 0.05), SET(1, 5e-4, 0.2), STEP(ALL),
	    SET(2, 0.0, 0.0), STEP(ALL), SET(2, 4e-3, 0.0), SSTEP(ALL), STEP(ALL) } },
	{ "l2-group", "fp32", 0, 1.0, 0,
	  { GROUP(1e-3, 0.1, false), GROUP(2e-3, 0.01, true), BASE, STEP(ALL), STEP(ALL),
	    SET(1, 1e-2, 0.3), STEP(ALL) } },
	{ "skipped", "fp32", 0, 1.0, 0,
	  { GROUPS, BASE, STEP(ALL), STEP(0xd), STEP(0xd), STEP(0x0), STEP(0xe), SSTEP(0x2),
	    STEP(ALL) } },
	{ "late-add", "fp32", 0, 1.0, 0,
	  { GROUPS, BASE, STEP(ALL), STEP(ALL), STEP(ALL), ADD("late", 5000, 1), STEP(ALL),
	    STEP(0x1f), GROUP(1e-2, 0.5, true), ADD("later", 300, 3), STEP(ALL) } },
	{ "freeze", "fp32", 0, 1.0, 0,
	  { GROUPS, BASE, STEP(ALL), FREEZE("emb"), STEP(ALL), SSTEP(ALL), THAW("emb"),
	    STEP(ALL), FREEZE("b1"), FREEZE("w2"), STEP(ALL), THAW("w2"), STEP(ALL) } },
	{ "remove", "fp32", 0, 1.0, 0,
	  { GROUPS, BASE, STEP(ALL), STEP(ALL), REMOVE("w1"), STEP(ALL), STEP(0x3),
	    ADD("w1", 4000, 2), STEP(ALL), REMOVE("w2"), REMOVE("emb"), STEP(ALL) } },
	{ "clip", "fp32", 0, 1.0, 50.0,
	  { GROUPS, BASE, STEP(ALL), STEP(0x5), STEP(ALL) } },
	{ "bf16-split", "bf16", 512 * KiB, 0.5, 0,
	  { GROUPS, BASE, STEP(ALL), STEP(0xb), SET(1, 1e-2, 0.0), SSTEP(ALL), FREEZE("w1"),
	    STEP(ALL), THAW("w1"), STEP(0x6), STEP(ALL) } },
	{ "resume", "fp32", 0, 1.0, 0,
	  { GROUPS, BASE, STEP(ALL), STEP(0xd), FREEZE("b1"), SET(1, 7e-4, 0.3), RESUME,
	    STEP(ALL), THAW("b1"), ADD("late", 2000, 2), STEP(ALL), RESUME, STEP(0xf) } },
	{ "resume-bf16", "bf16", 0, 1.0, 0,
	  { GROUPS, BASE, STEP(ALL), STEP(0x3), RESUME, STEP(ALL) } },
	{ "import", "fp32", 0, 1.0, 0,
	  { GROUPS, BASE, STEP(ALL), STEP(0x9), FREEZE("w1"), IMPORT, STEP(ALL), THAW("w1"),
	    STEP(ALL) } },
	{ "copy", "bf16", 0, 1.0, 0,
	  { GROUPS, BASE, STEP(ALL), STEP(0x5), STEP(ALL), COPY, STEP(ALL), STEP(0xa) } },
	{ "q8-split", "q8", 512 * KiB, 0.5, 0,
	  { GROUPS, BASE, STEP(ALL), STEP(0xb), SET(1, 1e-2, 0.0), SSTEP(ALL), FREEZE("w1"),
	    STEP(ALL), THAW("w1"), STEP(0x6), STEP(ALL) } },
	{ "q8-resume-import", "q8", 0, 1.0, 0,
	  { GROUPS, BASE, STEP(ALL), STEP(0x3), RESUME, STEP(ALL), ADD("late", 700, 2),
	    STEP(ALL), IMPORT, STEP(0xd), REMOVE("w1"), STEP(ALL) } },
	{ "q8-copy", "q8", 0, 1.0, 0,
	  { GROUPS, BASE, STEP(ALL), STEP(0x5), STEP(ALL), COPY, STEP(ALL), STEP(0xa) } },
};

/* Checkpoints, destroys the optimizer, closes the store, and resumes. */
static void op_resume(struct tworld *w)
{
	struct tier_optim_params rt;
	uint64_t gen = 0;
	int rc;

	rc = tier_optim_checkpoint(w->o, &gen);
	ck_assert_msg(rc == 0 && gen > 0, "checkpoint: %d: %s", rc, tier_last_error());
	ck_assert_int_eq(tier_optim_destroy(w->o), 0);
	ck_assert_int_eq(tier_store_close(w->s), 0);
	world_open_store(w);
	tier_optim_params_init(&rt);
	rt.threads = 2;
	rc = tier_optim_resume(w->s, &rt, &w->o);
	ck_assert_msg(rc == 0, "resume: %d: %s", rc, tier_last_error());
	ck_assert_uint_eq(tier_optim_step_count(w->o), w->applied);
}

/* Exports, and imports into a store of another directory. */
static void op_import(struct tworld *w)
{
	char path[512];
	struct tier_manifest *m0 = w->man;
	struct tier_store *s0 = w->s;
	struct tier_optim_params rt;
	int rc;

	snprintf(path, sizeof(path), "%s/%s.safetensors", g_dir, w->sub);
	rc = tier_optim_export(w->o, path);
	ck_assert_msg(rc == 0, "export: %d: %s", rc, tier_last_error());
	ck_assert_int_eq(tier_optim_destroy(w->o), 0);
	strncat(w->sub, "-imp", sizeof(w->sub) - strlen(w->sub) - 1);
	w->man = NULL;
	world_open_store(w);
	tier_optim_params_init(&rt);
	rt.threads = 2;
	rt.offload_fraction = w->offload;
	rc = tier_optim_import(w->s, path, &rt, &w->o);
	ck_assert_msg(rc == 0, "import: %d: %s", rc, tier_last_error());
	ck_assert_int_eq(tier_store_close(s0), 0);
	tier_manifest_free(m0);
}

/* Copies the state into a new optimizer through the getters and
 * setters, on a fresh store. */
static void op_copy(struct tworld *w)
{
	struct tier_manifest *m0 = w->man;
	struct tier_store *s0 = w->s;
	struct tier_optim *o0 = w->o;
	struct tier_optim_params hp;
	struct tier_loss_scaler sc;
	int rc;

	strncat(w->sub, "-copy", sizeof(w->sub) - strlen(w->sub) - 1);
	w->man = NULL;
	world_open_store(w);
	hp_of(w, &hp);
	ck_assert_int_eq(tier_optim_create(w->s, &hp, &w->o), 0);
	for (uint32_t g = 1; g < w->ng; g++)
		ck_assert_int_eq(tier_optim_add_group(w->o, &w->gp[g], NULL), 0);
	for (size_t i = 0; i < w->np; i++) {
		struct tparam *q = &w->pa[i];
		struct tier_param_info pi;
		float *p = malloc(q->n * 4);
		void *m = malloc(q->n * w->rs), *v = malloc(q->n * w->rs);

		ck_assert(p && m && v);
		ck_assert_int_eq(tier_optim_param_info(o0, (uint32_t)i, &pi), 0);
		ck_assert_int_eq(tier_optim_read(o0, (uint32_t)i, p, m, v), 0);
		ck_assert_int_eq(tier_optim_add_param_to(w->o, pi.group, pi.name, pi.numel, NULL, NULL), 0);
		/* in two writes: the master alone, then the moments alone */
		ck_assert_int_eq(tier_optim_write(w->o, (uint32_t)i, p, NULL, NULL), 0);
		rc = tier_optim_write(w->o, (uint32_t)i, NULL, m, v);
		ck_assert_msg(rc == 0, "write %s: %s", q->name, tier_last_error());
		ck_assert_int_eq(tier_optim_set_param_step(w->o, (uint32_t)i, pi.step), 0);
		ck_assert_int_eq(tier_optim_freeze(w->o, (uint32_t)i, pi.frozen), 0);
		free(p);
		free(m);
		free(v);
	}
	ck_assert_int_eq(tier_optim_get_scaler(o0, &sc), 0);
	ck_assert_int_eq(tier_optim_set_scaler(w->o, &sc), 0);
	ck_assert_int_eq(tier_optim_destroy(o0), 0);
	ck_assert_int_eq(tier_store_close(s0), 0);
	tier_manifest_free(m0);
	w->applied = 0; /* the optimizer's own count starts again; each parameter's goes on */
}

static void run_op(struct tworld *w, const struct op *op)
{
	struct tier_group_params g;
	uint32_t gid;
	int i;

	switch (op->k) {
	case OP_STEP:
	case OP_SSTEP:
		world_step(w, op->mask, op->k == OP_SSTEP);
		break;
	case OP_GROUP:
		tier_group_params_init(&g);
		g.lr = op->lr;
		g.weight_decay = op->wd;
		g.decoupled = op->decoupled;
		g.beta2 = 0.99 + 0.001 * w->ng; /* each group its own */
		ck_assert_uint_lt(w->ng, MAXG);
		ck_assert_int_eq(tier_optim_add_group(w->o, &g, &gid), 0);
		ck_assert_uint_eq(gid, w->ng);
		w->gp[w->ng++] = g;
		break;
	case OP_SET:
		g = w->gp[op->arg];
		g.lr = op->lr;
		g.weight_decay = op->wd;
		ck_assert_int_eq(tier_optim_set_group(w->o, op->arg, &g), 0);
		w->gp[op->arg] = g;
		break;
	case OP_ADD:
		world_add(w, op->name, op->n, op->arg);
		break;
	case OP_FREEZE:
	case OP_THAW:
		i = find(w, op->name);
		ck_assert_int_eq(tier_optim_freeze(w->o, (uint32_t)i, op->k == OP_FREEZE), 0);
		w->pa[i].frozen = op->k == OP_FREEZE;
		break;
	case OP_REMOVE: {
		struct tparam *q;
		char shard0[48];

		i = find(w, op->name);
		q = &w->pa[i];
		ck_assert_int_eq(tier_optim_remove_param(w->o, (uint32_t)i), 0);
		snprintf(shard0, sizeof(shard0), "%s#0", q->name);
		ck_assert_ptr_null(tier_obj_find(w->s, shard0));
		free(q->p);
		free(q->m);
		free(q->v);
		free(q->ms);
		free(q->vs);
		free(q->g);
		free(q->out);
		free(q->rout);
		memmove(q, q + 1, (w->np - (size_t)i - 1) * sizeof(*q));
		w->np--;
		break;
	}
	case OP_RESUME:
		op_resume(w);
		break;
	case OP_IMPORT:
		op_import(w);
		break;
	case OP_COPY:
		op_copy(w);
		break;
	case OP_END:
		break;
	}
}

START_TEST(scenario)
{
	const struct scenario *sc = &scenarios[_i];
	struct tworld w;

	world_init(&w, sc->name, sc->moment, sc->hbm, sc->offload, sc->clip);
	for (size_t k = 0; k < MAXOPS && sc->ops[k].k != OP_END; k++) {
		char when[96];

		run_op(&w, &sc->ops[k]);
		snprintf(when, sizeof(when), "%s, after op %zu", sc->name, k);
		check_state(&w, when);
	}
	world_close(&w);
}
END_TEST

/* ------------------------------------------------------------ misuse */

enum mis {
	M_BEGIN_LR,          /* an lr to begin with two groups */
	M_SET_IN_STEP,
	M_ADD_GROUP_IN_STEP,
	M_FREEZE_IN_STEP,
	M_REMOVE_IN_STEP,
	M_WRITE_IN_STEP,
	M_STEP_IN_STEP,
	M_SET_BAD_GID,
	M_SET_BAD_LR,
	M_SET_BAD_BETA,
	M_SET_BAD_EPS,
	M_SET_BAD_WD,
	M_SET_BAD_SIZE,
	M_ADD_BAD_GID,
	M_PUSH_FROZEN,
	M_PUSH_SHORT,
	M_PUSH_LONG_OUT,
	M_INFO_BAD_ID,
	M_REMOVE_BAD_ID,
	M_FREEZE_BAD_ID,
	M_STEP_BAD_ID,
	M_SCALER_BAD,
};

static const struct misuse {
	const char *what;
	enum mis k;
	int rc;
	const char *needle;      /* in the detail */
} misuses[] = {
	{ "begin with an lr, two groups", M_BEGIN_LR, -EINVAL, "tier_optim_set_group" },
	{ "set a group inside a step", M_SET_IN_STEP, -EBUSY, "group 1" },
	{ "add a group inside a step", M_ADD_GROUP_IN_STEP, -EBUSY, "inside a step" },
	{ "freeze inside a step", M_FREEZE_IN_STEP, -EBUSY, "tier_optim_freeze" },
	{ "remove inside a step", M_REMOVE_IN_STEP, -EBUSY, "tier_optim_remove_param" },
	{ "write inside a step", M_WRITE_IN_STEP, -EBUSY, "tier_optim_write" },
	{ "set a step count inside a step", M_STEP_IN_STEP, -EBUSY, "tier_optim_set_param_step" },
	{ "set group 9", M_SET_BAD_GID, -EINVAL, "no group 9" },
	{ "lr -1", M_SET_BAD_LR, -EINVAL, "group 1: lr -1" },
	{ "beta1 1", M_SET_BAD_BETA, -EINVAL, "group 1: betas (1," },
	{ "eps 0", M_SET_BAD_EPS, -EINVAL, "group 1: eps 0" },
	{ "weight decay nan", M_SET_BAD_WD, -EINVAL, "group 1: weight_decay nan" },
	{ "a struct of another size", M_SET_BAD_SIZE, -EINVAL, "struct tier_group_params" },
	{ "add to group 5", M_ADD_BAD_GID, -EINVAL, "parameter 'x': no group 5" },
	{ "push to a frozen parameter", M_PUSH_FROZEN, -EINVAL, "parameter 'w1' is frozen" },
	{ "push a short gradient", M_PUSH_SHORT, -EINVAL, "parameter 'b1': gradient of 699 elements, the parameter has 700" },
	{ "push a long output", M_PUSH_LONG_OUT, -EINVAL, "parameter 'b1': output of 701 elements" },
	{ "param_info of id 4", M_INFO_BAD_ID, -EINVAL, "no parameter with id 4" },
	{ "remove id 4", M_REMOVE_BAD_ID, -EINVAL, "no parameter with id 4" },
	{ "freeze id 99", M_FREEZE_BAD_ID, -EINVAL, "no parameter with id 99" },
	{ "set the step of id 4", M_STEP_BAD_ID, -EINVAL, "no parameter with id 4" },
	{ "scaler of scale 0", M_SCALER_BAD, -EINVAL, "scale 0" },
};

START_TEST(misuse)
{
	const struct misuse *mu = &misuses[_i];
	struct tworld w;
	struct tier_group_params g;
	struct tier_param_info pi;
	struct tier_tensor t;
	struct tier_loss_scaler sc;
	int b1, rc = 0;
	bool in_step = false;

	world_init(&w, "misuse", "fp32", 0, 1.0, 0);
	run_op(&w, &(struct op)GROUP(3e-3, 0.1, true));
	run_op(&w, &(struct op)GROUP(2e-3, 0.0, true));
	run_op(&w, &(struct op)ADD("emb", 30000, 0));
	run_op(&w, &(struct op)ADD("w1", 9000, 1));
	run_op(&w, &(struct op)ADD("b1", 700, 2));
	run_op(&w, &(struct op)ADD("w2", 12001, 1));
	world_step(&w, ALL, false);
	b1 = find(&w, "b1");
	g = w.gp[1];
	switch (mu->k) {
	case M_SET_IN_STEP:
	case M_ADD_GROUP_IN_STEP:
	case M_FREEZE_IN_STEP:
	case M_REMOVE_IN_STEP:
	case M_WRITE_IN_STEP:
	case M_STEP_IN_STEP:
		ck_assert_int_eq(tier_optim_begin(w.o, TIER_LR_KEEP), 0);
		in_step = true;
		break;
	default:
		break;
	}
	ts_err_clear();
	switch (mu->k) {
	case M_BEGIN_LR:
		rc = tier_optim_begin(w.o, 1e-3);
		break;
	case M_SET_IN_STEP:
		rc = tier_optim_set_group(w.o, 1, &g);
		break;
	case M_ADD_GROUP_IN_STEP:
		rc = tier_optim_add_group(w.o, &g, NULL);
		break;
	case M_FREEZE_IN_STEP:
		rc = tier_optim_freeze(w.o, 0, true);
		break;
	case M_REMOVE_IN_STEP:
		rc = tier_optim_remove_param(w.o, 0);
		break;
	case M_WRITE_IN_STEP:
		rc = tier_optim_write(w.o, 0, w.pa[0].p, NULL, NULL);
		break;
	case M_STEP_IN_STEP:
		rc = tier_optim_set_param_step(w.o, 0, 7);
		break;
	case M_SET_BAD_GID:
		rc = tier_optim_set_group(w.o, 9, &g);
		break;
	case M_SET_BAD_LR:
		g.lr = -1;
		rc = tier_optim_set_group(w.o, 1, &g);
		break;
	case M_SET_BAD_BETA:
		g.beta1 = 1;
		rc = tier_optim_set_group(w.o, 1, &g);
		break;
	case M_SET_BAD_EPS:
		g.eps = 0;
		rc = tier_optim_set_group(w.o, 1, &g);
		break;
	case M_SET_BAD_WD:
		g.weight_decay = (double)NAN;
		rc = tier_optim_set_group(w.o, 1, &g);
		break;
	case M_SET_BAD_SIZE:
		g.size = 12;
		rc = tier_optim_set_group(w.o, 1, &g);
		break;
	case M_ADD_BAD_GID:
		rc = tier_optim_add_param_to(w.o, 5, "x", 100, NULL, NULL);
		break;
	case M_PUSH_FROZEN:
		ck_assert_int_eq(tier_optim_freeze(w.o, (uint32_t)find(&w, "w1"), true), 0);
		w.pa[find(&w, "w1")].frozen = true;
		ck_assert_int_eq(tier_optim_begin(w.o, TIER_LR_KEEP), 0);
		in_step = true;
		t = (struct tier_tensor){ w.pa[1].g, TIER_FP32, TIER_MEM_HOST, w.pa[1].n };
		rc = tier_optim_push(w.o, 1, &t, NULL);
		break;
	case M_PUSH_SHORT:
		ck_assert_int_eq(tier_optim_begin(w.o, TIER_LR_KEEP), 0);
		in_step = true;
		t = (struct tier_tensor){ w.pa[b1].g, TIER_FP32, TIER_MEM_HOST, w.pa[b1].n - 1 };
		rc = tier_optim_push(w.o, (uint32_t)b1, &t, NULL);
		break;
	case M_PUSH_LONG_OUT: {
		struct tier_tensor o;

		ck_assert_int_eq(tier_optim_begin(w.o, TIER_LR_KEEP), 0);
		in_step = true;
		t = (struct tier_tensor){ w.pa[b1].g, TIER_FP32, TIER_MEM_HOST, w.pa[b1].n };
		o = (struct tier_tensor){ w.pa[b1].out, TIER_BF16, TIER_MEM_HOST, w.pa[b1].n + 1 };
		rc = tier_optim_push(w.o, (uint32_t)b1, &t, &o);
		break;
	}
	case M_INFO_BAD_ID:
		rc = tier_optim_param_info(w.o, 4, &pi);
		break;
	case M_REMOVE_BAD_ID:
		rc = tier_optim_remove_param(w.o, 4);
		break;
	case M_FREEZE_BAD_ID:
		rc = tier_optim_freeze(w.o, 99, true);
		break;
	case M_STEP_BAD_ID:
		rc = tier_optim_set_param_step(w.o, 4, 3);
		break;
	case M_SCALER_BAD:
		ck_assert_int_eq(tier_optim_get_scaler(w.o, &sc), 0);
		ck_assert(sc.scale == 1.0);
		sc.scale = 0;
		rc = tier_optim_set_scaler(w.o, &sc);
		break;
	}
	ck_assert_msg(rc == mu->rc, "%s: %d (%s), expected %d: %s", mu->what, rc, tier_strerror(rc),
		      mu->rc, tier_last_error());
	ck_assert_msg(strstr(tier_last_error(), mu->needle) != NULL,
		      "%s: the detail '%s' lacks '%s'", mu->what, tier_last_error(), mu->needle);
	if (in_step) {
		struct tier_step_result r;

		/* nothing pushed: the step changes nothing */
		ck_assert_int_eq(tier_optim_end(w.o, &r), 0);
		ck_assert(!r.applied);
	}
	check_state(&w, mu->what);
	/* and the optimizer goes on */
	world_step(&w, ALL, false);
	check_state(&w, mu->what);
	world_close(&w);
}
END_TEST

static Suite *suite(void)
{
	Suite *s = suite_create("trainer");
	TCase *tc = tcase_create("scenario");

	tcase_add_unchecked_fixture(tc, t_case_setup, t_case_teardown);
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_set_timeout(tc, 120);
	tcase_add_loop_test(tc, scenario, 0, (int)ARRAY_SIZE(scenarios));
	suite_add_tcase(s, tc);
	tc = tcase_create("misuse");
	tcase_add_unchecked_fixture(tc, t_case_setup, t_case_teardown);
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_loop_test(tc, misuse, 0, (int)ARRAY_SIZE(misuses));
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	const char *hbm = getenv("TIER_TRAINER_HBM");

	g_cuda = hbm && !strcmp(hbm, "cuda");
	if (g_cuda && !t_gpu_present(NULL)) {
		fprintf(stderr, "test_trainer: TIER_TRAINER_HBM=cuda, but no CUDA device: skipped\n");
		return 77;
	}
	return t_run_suite(suite());
}
