/*
 * bench_step_run.c - the run of `tier-bench step`: the measurements before
 * the steps (bench_step_measure.c), the store and the optimizer, the
 * synthetic model, the steps (the streaming form, pushes in reverse order
 * as backward produces them; a step that fails part way with a transient
 * error is run again, as the optimizer's contract allows), the checkpoints of --checkpoint-every (after
 * every K-th step, timed, with the NVMe bytes they wrote) and the one full
 * copy they are compared with (tier_optim_export after the steps), --verify
 * against tier_adam_step in memory, the measurement after the steps, and
 * the report (bench_step_report.c).
 * Also the probe: the same store and optimizer opened once before all
 * that, to ask the optimizer what it resolved (tier_optim_info).
 */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "bench_step.h"

void step_store_params(const struct step_opts *o, const struct step_setup *su,
		       struct tier_store_params *sp)
{
	tier_store_params_init(sp);
	sp->dram_capacity = su->dram;
	sp->hbm_backend = su->hbm_backend;
	sp->hbm_capacity = su->hbm_backend ? su->hbm_capacity : 0;
	sp->hbm_bandwidth = su->hbm_backend ? o->hbm_bandwidth : 0;
	sp->policy = TIER_POLICY_BELADY;
	sp->flags = TIER_STORE_SCRATCH;
}

void step_optim_params(const struct step_opts *o, struct tier_optim_params *op)
{
	tier_optim_params_init(op);
	op->moment_dtype = o->moments < 0 ? TIER_DTYPE_MANIFEST : o->moments;
	op->offload_fraction = isnan(o->offload) ? TIER_OFFLOAD_MANIFEST : o->offload;
	op->threads = (unsigned)o->threads;
	op->shard_size = o->shard_size;
}

int step_optim_probe(const struct step_opts *o, const struct tier_manifest *m,
		     const struct step_setup *su, struct tier_optim_info *info)
{
	struct tier_store_params sp;
	struct tier_optim_params op;
	struct tier_store *s = NULL;
	struct tier_optim *opt = NULL;
	int rc, ret = 1;

	step_store_params(o, su, &sp);
	step_optim_params(o, &op);
	rc = tier_store_open(m, &sp, &s);
	if (rc)
		return step_fail("open the store", rc);
	rc = tier_optim_create(s, &op, &opt);
	if (rc) {
		ret = step_fail("create the optimizer", rc);
		goto out;
	}
	rc = tier_optim_info(opt, info);
	if (rc) {
		ret = step_fail("the optimizer's configuration", rc);
		goto out;
	}
	ret = 0;
out:
	if (opt && tier_optim_destroy(opt) && ret == 0)
		ret = step_fail("destroy the optimizer", -EIO);
	if (tier_store_close(s) && ret == 0)
		ret = step_fail("close the store", -EIO);
	return ret;
}

/* ------------------------------------------------------------ the model */

/* The store, the optimizer and the model of the run. */
struct step_model {
	struct tier_store *s;
	struct tier_optim *opt;
	struct tier_optim_params op;
	float *init;                  /* kept for --verify only */
	float *grad;
	void *outs[STEP_NPARAMS];     /* each parameter's copy-out */
	/* --grads: what is pushed (grad and outs themselves in host memory,
	 * or with the emulated HBM tier), its kind, and how it was allocated */
	void *gbuf, *obufs[STEP_NPARAMS];
	enum tier_mem mem;
	bool gpu_alloc;               /* gbuf and obufs are tier_gpu_alloc's */
	enum tier_gpu_mem gpu_kind;
	struct step_store_summary st;
};

/* Adds the eight parameters, and their copy-out buffers.  0, or 1. */
static int step_add_params(const struct step_opts *o, const struct step_setup *su,
			   struct step_model *sm)
{
	size_t os = dtype_size(o->copy_out);
	char what[160];

	for (uint32_t i = 0; i < STEP_NPARAMS; i++) {
		uint32_t id;
		int rc;

		snprintf(what, sizeof(what), "layer%u.weight", i);
		rc = tier_optim_add_param(sm->opt, what, su->sizes[i], sm->init, &id);
		if (rc) {
			char w2[200];

			snprintf(w2, sizeof(w2), "add parameter '%s' (%zu elements)", what,
				 su->sizes[i]);
			return step_fail(w2, rc);
		}
		if (id != i) {
			fprintf(stderr, STEP_WHO ": parameter '%s' got id %u, expected %u\n", what, id, i);
			return 1;
		}
		if (os) {
			sm->outs[i] = adam_alloc(su->sizes[i] * os);
			if (!sm->outs[i]) {
				fprintf(stderr, STEP_WHO ": out of memory for the copy-out buffers\n");
				return 1;
			}
			memset(sm->outs[i], 0, su->sizes[i] * os);
		}
	}
	return 0;
}

/*
 * The buffers the steps push (--grads): the gradient and the copies in
 * pageable host memory as they are, or copied to pinned or device memory
 * of the manifest's GPU; with the emulated HBM tier, "device" is the same
 * host memory pushed as TIER_MEM_DEVICE.  0, or 1 after a message.
 */
static int step_buffers(const struct step_opts *o, const struct step_setup *su,
			struct step_model *sm)
{
	size_t os = dtype_size(o->copy_out);
	int rc;

	sm->mem = su->grads == STEP_GRADS_DEVICE ? TIER_MEM_DEVICE : TIER_MEM_HOST;
	sm->gbuf = sm->grad;
	memcpy(sm->obufs, sm->outs, sizeof(sm->obufs));
	if (su->grads == STEP_GRADS_HOST || !su->gpu)
		return 0;
	sm->gpu_alloc = true;
	sm->gpu_kind = su->grads == STEP_GRADS_DEVICE ? TIER_GPU_DEVICE : TIER_GPU_PINNED;
	memset(sm->obufs, 0, sizeof(sm->obufs));
	sm->gbuf = NULL;
	if ((rc = tier_gpu_alloc(su->gpu_index, sm->gpu_kind, su->max_size * 4, &sm->gbuf)) ||
	    (rc = tier_gpu_copy(sm->gbuf, sm->grad, su->max_size * 4)))
		return step_fail("--grads: the gradient's buffer", rc);
	for (int i = 0; os && i < STEP_NPARAMS; i++) {
		if ((rc = tier_gpu_alloc(su->gpu_index, sm->gpu_kind, su->sizes[i] * os, &sm->obufs[i])) ||
		    (rc = tier_gpu_copy(sm->obufs[i], sm->outs[i], su->sizes[i] * os)))
			return step_fail("--grads: a parameter copy's buffer", rc);
	}
	return 0;
}

/* The copies back in sm->outs (for --verify).  0, or 1 after a message. */
static int step_outs_back(const struct step_opts *o, const struct step_setup *su,
			  struct step_model *sm)
{
	size_t os = dtype_size(o->copy_out);
	int rc;

	for (int i = 0; sm->gpu_alloc && os && i < STEP_NPARAMS; i++)
		if ((rc = tier_gpu_copy(sm->outs[i], sm->obufs[i], su->sizes[i] * os)))
			return step_fail("--verify: the parameter copies from the device", rc);
	return 0;
}

/*
 * A partitioned run's gradient: the same on every rank, and values k/1024
 * with |k| <= 125, so the sum over the ranks is exact in any order (a few
 * more bits than the value's) and so is the average: the optimizer sees
 * exactly this gradient, and --verify compares bit for bit with
 * tier_adam_step on it.  A pattern of period 251 (prime: no element lines
 * up with a shard or a piece).
 */
static void grad_fill_exact(float *g, size_t n)
{
	for (size_t i = 0; i < n; i++)
		g[i] = (float)((int)((i * 37 + 11) % 251) - 125) / 1024.0f;
}

/* This rank's piece of each parameter and of the model (tier_optim_info,
 * tier_optim_param_info).  0, or 1. */
static int step_pieces(struct step_setup *su, struct step_model *sm)
{
	struct tier_optim_info oi;
	int rc = tier_optim_info(sm->opt, &oi);

	if (rc)
		return step_fail("the optimizer's configuration", rc);
	su->part_elems = oi.part_elems;
	su->part_state_bytes = 0;
	for (uint32_t i = 0; i < STEP_NPARAMS; i++) {
		struct tier_param_info pi;

		rc = tier_optim_param_info(sm->opt, i, &pi);
		if (rc)
			return step_fail("a parameter's piece", rc);
		su->part_off[i] = pi.part_off;
		su->part_numel[i] = pi.part_numel;
		su->part_state_bytes += step_state_bytes(su, pi.part_numel);
	}
	return 0;
}

/* The store, the optimizer and the model.  0, or 1 after a message. */
static int step_open(const struct step_opts *o, const struct tier_manifest *m,
		     struct step_setup *su, struct progress *pg, struct step_model *sm)
{
	struct tier_store_params sp;
	char a[32];
	int rc;

	if (su->w->active)
		progress_note(pg, "opening the store and writing the initial state (%s over %d"
			      " ranks)...", human(su->state_bytes, a, sizeof(a)), su->w->world);
	else
		progress_note(pg, "opening the store and writing the initial state (%s)...",
			      human(su->state_bytes, a, sizeof(a)));
	step_store_params(o, su, &sp);
	rc = tier_store_open(m, &sp, &sm->s);
	if (rc) {
		sm->s = NULL;
		return step_fail("open the store", rc);
	}
	sm->st.has_hbm = tier_store_has_level(sm->s, TIER_HBM);
	step_optim_params(o, &sm->op);
	sm->op.comm = su->w->comm;
	rc = tier_optim_create(sm->s, &sm->op, &sm->opt);
	if (rc) {
		sm->opt = NULL;
		return step_fail("create the optimizer", rc);
	}
	sm->init = adam_alloc(su->max_size * 4);
	sm->grad = adam_alloc(su->max_size * 4);
	if (!sm->init || !sm->grad) {
		fprintf(stderr, STEP_WHO ": out of memory for %zu-element buffers\n", su->max_size);
		return 1;
	}
	adam_fill(sm->init, su->max_size, TIER_FP32, FILL_PARAM, 11);
	if (su->w->active)
		grad_fill_exact(sm->grad, su->max_size);
	else
		adam_fill(sm->grad, su->max_size, TIER_FP32, FILL_GRAD, 12);
	if (step_add_params(o, su, sm) || step_pieces(su, sm) || step_buffers(o, su, sm))
		return 1;
	if (!o->verify) {
		free(sm->init);
		sm->init = NULL;
	}
	return 0;
}

/* Destroys the optimizer and closes the store.  0, or 1 after a message. */
static int step_close(struct step_model *sm)
{
	int rc = tier_optim_destroy(sm->opt);

	sm->opt = NULL;
	if (rc) {
		step_fail("destroy the optimizer", rc);
		tier_store_close(sm->s);
		sm->s = NULL;
		return 1;
	}
	rc = tier_store_close(sm->s);
	sm->s = NULL;
	return rc ? step_fail("close the store", rc) : 0;
}

/* Frees what is left of the model (after an error: the optimizer and the
 * store too). */
static void step_model_free(struct step_model *sm)
{
	if (sm->opt)
		tier_optim_destroy(sm->opt);
	if (sm->s)
		tier_store_close(sm->s);
	for (int i = 0; i < STEP_NPARAMS; i++) {
		free(sm->outs[i]);
		if (sm->gpu_alloc)
			tier_gpu_free(sm->gpu_kind, sm->obufs[i]);
	}
	if (sm->gpu_alloc)
		tier_gpu_free(sm->gpu_kind, sm->gbuf);
	free(sm->init);
	free(sm->grad);
}

/* ------------------------------------------------------------ the steps */

static void nvme_counters(struct tier_store *s, uint64_t *rd, uint64_t *wr)
{
	struct tier_nvme *n = tier_store_nvme(s);
	struct tier_nvme_stats st;

	*rd = *wr = 0;
	if (!n)
		return;
	tier_nvme_get_stats(n, &st);
	*rd = st.bytes_read;
	*wr = st.bytes_written;
}

/*
 * One call of step @k: begin, push in reverse order (as backward), end.
 * 0, or the negative errno with @what naming the call that failed (the
 * library's detail in tier_last_error()); *@at_end: it was end, so the
 * step failed part way (or in the update) rather than being refused.
 */
static int step_call(const struct step_opts *o, struct step_model *sm, uint64_t k,
		     struct step_record *rec, bool *at_end, char *what, size_t wlen)
{
	struct tier_tensor g = { .ptr = sm->gbuf, .dtype = TIER_FP32, .mem = sm->mem, .numel = 0 };
	bool copy_out = dtype_size(o->copy_out) > 0;
	uint64_t t0 = now_ns();
	int rc;

	*at_end = false;
	rc = tier_optim_begin(sm->opt, TIER_LR_KEEP);
	if (rc) {
		snprintf(what, wlen, "step %" PRIu64 ": begin", k + 1);
		return rc;
	}
	for (int i = STEP_NPARAMS - 1; i >= 0; i--) {
		struct tier_param_info pi = { 0 };

		(void)tier_optim_param_info(sm->opt, (uint32_t)i, &pi);
		struct tier_tensor out = {
			.ptr = sm->obufs[i],
			.dtype = o->copy_out < 0 ? TIER_BF16 : (enum tier_dtype)o->copy_out,
			.mem = sm->mem,
			.numel = pi.numel,
		};

		g.numel = out.numel;
		rc = tier_optim_push(sm->opt, (uint32_t)i, &g, copy_out ? &out : NULL);
		if (rc) {
			snprintf(what, wlen, "step %" PRIu64 ": push parameter %d", k + 1, i);
			return rc;
		}
	}
	rc = tier_optim_end(sm->opt, &rec->res);
	rec->wall_s = (double)(now_ns() - t0) * 1e-9;
	if (rc) {
		*at_end = true;
		snprintf(what, wlen, "step %" PRIu64 ": end", k + 1);
	}
	return rc;
}

/*
 * Step @k, run again while it fails part way with a transient error
 * (step_error_transient), up to STEP_MAX_TRIES calls, each retry announced
 * on stderr with the step, the error and the library's detail.  The
 * optimizer's contract (docs/optimizer.md, "A step that fails"): the same
 * call with the same gradients and output buffers completes the step, bit
 * for bit as if it had not failed.  Not retried: a permanent error, a
 * failure of begin or a push (a refusal: nothing ran, and an optimizer
 * whose update failed refuses every step at begin), and a partitioned
 * step (a failure there fails every rank for good).  0, or 1 after a
 * message.
 */
static int step_one(const struct step_opts *o, struct step_model *sm, uint64_t k,
		    struct step_record *rec)
{
	char what[160], name[32];
	uint32_t tries;
	bool at_end;
	int rc;

	for (tries = 1;; tries++) {
		rc = step_call(o, sm, k, rec, &at_end, what, sizeof(what));
		if (!rc)
			break;
		if (!at_end || !step_error_transient(rc) || sm->op.comm)
			return step_fail(what, rc);
		if (tries == STEP_MAX_TRIES) {
			fprintf(stderr, STEP_WHO ": step %" PRIu64 " failed %u times with a transient"
				" error; giving up\n", k + 1, tries);
			return step_fail(what, rc);
		}
		fprintf(stderr, STEP_WHO ": step %" PRIu64 " failed part way with a transient error"
			" (%s: %s); running it again with the same gradients (try %u of %u)\n",
			k + 1, step_errno_name(rc, name, sizeof(name)), tier_last_error(), tries + 1,
			STEP_MAX_TRIES);
	}
	rec->tries = tries;
	return 0;
}

/*
 * The checkpoint after step @k (--checkpoint-every): tier_optim_checkpoint
 * timed, the NVMe tier's bytes written during it (the dirty bytes it wrote
 * home, and its object table), its commit's table bytes.  0, or 1.
 */
static int step_checkpoint(struct step_model *sm, uint64_t k, struct step_record *r)
{
	struct tier_commit_info ci;
	uint64_t rd0, wr0, rd, wr, t0, gen = 0;
	char what[160];
	int rc;

	nvme_counters(sm->s, &rd0, &wr0);
	t0 = now_ns();
	rc = tier_optim_checkpoint(sm->opt, &gen);
	r->ckpt_s = (double)(now_ns() - t0) * 1e-9;
	if (rc) {
		snprintf(what, sizeof(what), "checkpoint after step %" PRIu64, k + 1);
		return step_fail(what, rc);
	}
	nvme_counters(sm->s, &rd, &wr);
	rc = tier_store_committed(sm->s, &ci);
	if (rc) {
		snprintf(what, sizeof(what), "checkpoint after step %" PRIu64 ": the store's last"
			 " commit", k + 1);
		return step_fail(what, rc);
	}
	if (ci.generation != gen) {
		fprintf(stderr, STEP_WHO ": checkpoint after step %" PRIu64 ": the store's last"
			" commit is generation %" PRIu64 ", the checkpoint's %" PRIu64 "\n", k + 1,
			ci.generation, gen);
		return 1;
	}
	r->ckpt = true;
	r->ckpt_written = wr - wr0;
	r->ckpt_table = ci.table_bytes;
	r->ckpt_gen = gen;
	return 0;
}

/* The steps (and checkpoints), each one's NVMe tier counters, the store's
 * after them. */
static int step_steps(const struct step_opts *o, struct step_model *sm,
		      struct step_record *rec, struct progress *pg)
{
	uint64_t rd0, wr0, rd, wr;

	nvme_counters(sm->s, &rd0, &wr0);
	progress_step(pg, 0, o->steps, 0, 0);
	for (uint64_t k = 0; k < o->steps; k++) {
		if (step_one(o, sm, k, &rec[k]))
			return 1;
		nvme_counters(sm->s, &rd, &wr);
		rec[k].tier_read = rd - rd0;
		rec[k].tier_written = wr - wr0;
		rd0 = rd;
		wr0 = wr;
		progress_step(pg, k + 1, o->steps, rec[k].res.step_s, rec[k].res.stall_s);
		if (!rec[k].res.applied)
			fprintf(stderr, STEP_WHO ": warning: step %" PRIu64 " was skipped (the optimizer"
				" found an inf or nan gradient)\n", k + 1);
		if (o->checkpoint_every && (k + 1) % o->checkpoint_every == 0) {
			if (step_checkpoint(sm, k, &rec[k]))
				return 1;
			if (!pg->tty)
				progress_note(pg, "checkpoint after step %" PRIu64 ": %.3f s, %" PRIu64
					      " bytes written", k + 1, rec[k].ckpt_s, rec[k].ckpt_written);
			/* the next step's counters start after the checkpoint */
			nvme_counters(sm->s, &rd0, &wr0);
		}
	}
	tier_store_get_stats(sm->s, &sm->st.ss);
	return 0;
}

/*
 * The one full copy of the state the checkpoints are compared with:
 * tier_optim_export to a safetensors file in the folder of the first NVMe
 * backing file (the same disk), timed, its size taken, then removed.  0,
 * or 1 after a message.
 */
static int step_export(const struct tier_manifest *m, struct step_model *sm,
		       struct progress *pg)
{
	struct tier_manifest_path mp;
	char path[4096], what[4200];
	const char *slash;
	struct stat stb;
	uint64_t t0;
	int rc, n;

	rc = tier_manifest_path(m, 0, &mp);
	if (rc)
		return step_fail("the manifest's first NVMe path (for the full copy)", rc);
	slash = strrchr(mp.file, '/');
	if (!slash)
		n = snprintf(path, sizeof(path), "tier-bench-step-%ld.safetensors", (long)getpid());
	else
		n = snprintf(path, sizeof(path), "%.*s/tier-bench-step-%ld.safetensors",
			     (int)(slash - mp.file), mp.file, (long)getpid());
	if (n < 0 || (size_t)n >= sizeof(path)) {
		fprintf(stderr, STEP_WHO ": the full copy's path next to %s is too long\n", mp.file);
		return 1;
	}
	progress_note(pg, "one full copy of the state for comparison (%s)...", path);
	snprintf(what, sizeof(what), "the full copy of the state (tier_optim_export to %s)", path);
	t0 = now_ns();
	rc = tier_optim_export(sm->opt, path);
	sm->st.export_s = (double)(now_ns() - t0) * 1e-9;
	if (rc) {
		unlink(path);
		return step_fail(what, rc);
	}
	if (stat(path, &stb)) {
		fprintf(stderr, STEP_WHO ": stat of the full copy %s: %s\n", path, strerror(errno));
		unlink(path);
		return 1;
	}
	sm->st.export_bytes = (uint64_t)stb.st_size;
	if (unlink(path)) {
		fprintf(stderr, STEP_WHO ": remove the full copy %s: %s\n", path, strerror(errno));
		return 1;
	}
	return 0;
}

/* ----------------------------------------------------------- --verify */

/* The first element of arrays @a and @b (of @es bytes each) that differs
 * (one must). */
static size_t first_diff(const void *a, const void *b, size_t es)
{
	size_t at = 0;

	while (memcmp((const char *)a + at * es, (const char *)b + at * es, es) == 0)
		at++;
	return at;
}

/* The arrays of the reference and of the read-back, n elements each. */
struct verify_bufs {
	float *master, *got_master;
	void *m, *v, *got_m, *got_v, *out;
	float *ms, *vs;         /* q8: the reference's block scales */
	float *dm, *dv;         /* q8: its moments decoded (fp32, as read back) */
};

/* FNV-1a over @n bytes of @p, from @h. */
static uint64_t fnv1a(uint64_t h, const void *p, size_t n)
{
	const unsigned char *b = p;

	for (size_t i = 0; i < n; i++)
		h = (h ^ b[i]) * 0x100000001b3ull;
	return h;
}

/* SplitMix64's finaliser and the seed of parameter @id's stochastic
 * rounding stream in an optimizer seeded @seed (docs/kernels.md, "The
 * random stream": sr_param_seed). */
static uint64_t mix64(uint64_t z)
{
	z += 0x9e3779b97f4a7c15ull;
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

static uint64_t param_seed(uint64_t seed, uint32_t id)
{
	return mix64(seed ^ mix64(0x7a11ull << 32 | id));
}

/*
 * Parameter @id's reference: tier_adam_step in memory from its initial
 * state over the steps applied, into @vb; then its state read back.  *what
 * gets the name of what differs first (and *at where), NULL when nothing
 * does.  0, or 1 after an error message.
 */
static int verify_param(const struct step_opts *o, const struct step_setup *su,
			const struct step_model *sm, struct tier_pool *pool, uint32_t id,
			const struct step_record *rec, struct verify_bufs *vb, const char **what,
			size_t *at, uint64_t *digest)
{
	size_t k = su->sizes[id], ms = dtype_size((int)su->moments), os = dtype_size(o->copy_out);
	size_t off = su->part_off[id], pn = su->part_numel[id];
	bool q8 = su->moments == TIER_Q8;
	size_t rs = q8 ? 4 : ms; /* tier_optim_read's moments: q8 as fp32 values */
	const void *em = vb->m, *ev = vb->v;
	struct tier_optim_info oi;
	struct tier_adam_tensors t = {
		.n = k, .param = vb->master, .exp_avg = vb->m, .exp_avg_sq = vb->v,
		.exp_avg_scale = vb->ms, .exp_avg_sq_scale = vb->vs,
		.moment_dtype = su->moments, .grad = sm->grad, .grad_dtype = TIER_FP32,
		.param_out = vb->out, .out_dtype = o->copy_out < 0 ? TIER_FP32 :
						   (enum tier_dtype)o->copy_out,
	};
	struct tier_adam_params hp;
	int rc;

	tier_adam_params_init(&hp);
	hp.lr = sm->op.lr;
	hp.beta1 = sm->op.beta1;
	hp.beta2 = sm->op.beta2;
	hp.eps = sm->op.eps;
	hp.weight_decay = sm->op.weight_decay;
	hp.decoupled = sm->op.decoupled;
	/* the optimizer's rounding, and its stream for this parameter */
	rc = tier_optim_info(sm->opt, &oi);
	if (rc)
		return step_fail("--verify: the optimizer's configuration", rc);
	hp.rounding = oi.rounding;
	hp.out_rounding = oi.out_rounding;
	hp.seed = param_seed(oi.seed, id);
	memcpy(vb->master, sm->init, k * 4);
	memset(vb->m, 0, k * ms);
	memset(vb->v, 0, k * ms);
	if (q8) {
		memset(vb->ms, 0, (k + TIER_Q8_BLOCK - 1) / TIER_Q8_BLOCK * 4);
		memset(vb->vs, 0, (k + TIER_Q8_BLOCK - 1) / TIER_Q8_BLOCK * 4);
	}
	for (uint64_t s = 0; s < o->steps; s++) {
		if (!rec[s].res.applied)
			continue;
		hp.step = rec[s].res.step;
		hp.grad_scale = rec[s].res.clip_coef / rec[s].res.loss_scale;
		rc = tier_adam_step(pool, &hp, &t);
		if (rc)
			return step_fail("--verify: the in-memory reference", rc);
	}
	/* The state read back is this rank's piece: [off, off + pn) of it
	 * (the whole parameter when not partitioned).  The copy-out is the
	 * whole parameter on every rank (the all-gather's). */
	rc = tier_optim_read(sm->opt, id, vb->got_master, vb->got_m, vb->got_v);
	if (rc)
		return step_fail("--verify: read the state back", rc);
	*digest = fnv1a(*digest, vb->got_master, pn * 4);
	*digest = fnv1a(*digest, vb->got_m, pn * rs);
	*digest = fnv1a(*digest, vb->got_v, pn * rs);
	if (os)
		*digest = fnv1a(*digest, sm->outs[id], k * os);
	if (q8) {
		/* the reference's codes decoded: what the read must give */
		if ((rc = tier_q8_decode(vb->m, vb->ms, k, TIER_Q8_EXP_AVG, vb->dm)) ||
		    (rc = tier_q8_decode(vb->v, vb->vs, k, TIER_Q8_EXP_AVG_SQ, vb->dv)))
			return step_fail("--verify: decode the reference's q8 moments", rc);
		em = vb->dm;
		ev = vb->dv;
	}
	*what = NULL;
	if (memcmp(vb->master + off, vb->got_master, pn * 4)) {
		*what = "master weights";
		*at = off + first_diff(vb->master + off, vb->got_master, 4);
	} else if (memcmp((const char *)em + off * rs, vb->got_m, pn * rs)) {
		*what = "exp_avg";
		*at = off + first_diff((const char *)em + off * rs, vb->got_m, rs);
	} else if (memcmp((const char *)ev + off * rs, vb->got_v, pn * rs)) {
		*what = "exp_avg_sq";
		*at = off + first_diff((const char *)ev + off * rs, vb->got_v, rs);
	} else if (os && memcmp(vb->out, sm->outs[id], k * os)) {
		*what = "the copy-out";
		*at = first_diff(vb->out, sm->outs[id], os);
	}
	return 0;
}

/*
 * Compares every parameter's state (this rank's piece of it) and copy-out
 * with tier_adam_step run in memory on the same data for the steps that
 * were applied, and takes the digest of what was read back (*@digest).
 * 0, 1 after a message (an error), 2 after a message (a difference).
 */
static int step_verify(const struct step_opts *o, const struct step_setup *su,
		       const struct step_model *sm, struct tier_pool *pool,
		       const struct step_record *rec, uint64_t *digest)
{
	size_t n = su->max_size, ms = dtype_size((int)su->moments), os = dtype_size(o->copy_out);
	bool q8 = su->moments == TIER_Q8;
	size_t rs = q8 ? 4 : ms, nb = (n + TIER_Q8_BLOCK - 1) / TIER_Q8_BLOCK;
	struct verify_bufs vb = {
		.master = malloc(n * 4), .got_master = malloc(n * 4),
		.m = calloc(n, ms), .v = calloc(n, ms), .got_m = malloc(n * rs),
		.got_v = malloc(n * rs), .out = os ? malloc(n * os) : NULL,
		.ms = q8 ? calloc(nb, 4) : NULL, .vs = q8 ? calloc(nb, 4) : NULL,
		.dm = q8 ? malloc(n * 4) : NULL, .dv = q8 ? malloc(n * 4) : NULL,
	};
	int ret = 1;

	*digest = 0xcbf29ce484222325ull; /* FNV-1a's offset basis */
	if (!vb.master || !vb.got_master || !vb.m || !vb.v || !vb.got_m || !vb.got_v ||
	    (os && !vb.out) || (q8 && (!vb.ms || !vb.vs || !vb.dm || !vb.dv))) {
		fprintf(stderr, STEP_WHO ": out of memory for --verify\n");
		goto done;
	}
	for (uint32_t id = 0; id < STEP_NPARAMS; id++) {
		const char *what = NULL;
		size_t at = 0;

		if (verify_param(o, su, sm, pool, id, rec, &vb, &what, &at, digest))
			goto done;
		if (what) {
			struct tier_param_info pi = { 0 };

			(void)tier_optim_param_info(sm->opt, id, &pi);
			fprintf(stderr, STEP_WHO ": --verify: parameter %u ('%s', %zu elements): %s"
				" differs from tier_adam_step in memory first at element %zu",
				id, pi.name, su->sizes[id], what, at);
			if (strcmp(what, "master weights") == 0)
				fprintf(stderr, " (%.9g, expected %.9g)",
					(double)vb.got_master[at - su->part_off[id]],
					(double)vb.master[at]);
			if (su->w->active)
				fprintf(stderr, " (rank %d of %d, its piece [%zu, %zu))",
					su->w->rank, su->w->world, su->part_off[id],
					su->part_off[id] + su->part_numel[id]);
			fprintf(stderr, "\n");
			ret = 2;
			goto done;
		}
	}
	ret = 0;
done:
	free(vb.master);
	free(vb.got_master);
	free(vb.m);
	free(vb.v);
	free(vb.got_m);
	free(vb.got_v);
	free(vb.out);
	free(vb.ms);
	free(vb.vs);
	free(vb.dm);
	free(vb.dv);
	return ret;
}

/* ------------------------------------------------------------- the run */

/*
 * A partitioned run (su->w->active) differs in four places: every rank
 * runs each phase at once, between barriers (the NVMe measurements too:
 * the ranks of a node share its disk, as they do in the steps); the
 * in-memory update is measured after the steps, over this rank's piece
 * (known once the parameters are added); a difference --verify finds is
 * reported with the figures rather than instead of them; and rank 0
 * gathers every rank's records and prints the report.
 */
int step_run(const struct step_opts *o, const struct tier_manifest *m, struct step_setup *su,
	     struct progress *pg)
{
	struct step_record *rec = calloc(o->steps, sizeof(*rec));
	const struct step_world *w = su->w;
	struct step_model sm = { 0 };
	struct step_nvme nv = { 0 };
	struct step_bound b;
	struct tier_pool *pool = NULL;
	double update_s = 0, rd_b, wr_b;
	struct step_link link;
	int rc, ret = 1, verified = o->verify ? 1 : -1;

	if (!rec) {
		fprintf(stderr, STEP_WHO ": out of memory\n");
		return 1;
	}
	/* 1. The NVMe tier's bandwidth, before the store holds its files. */
	step_world_barrier(w);
	if (su->have_nvme && step_nvme_before(o, m, su, pg, &nv))
		goto out;
	step_world_barrier(w);
	/* 2. The in-memory update over the same elements, same threads. */
	rc = tier_pool_create((unsigned)o->threads, &pool);
	if (rc) {
		pool = NULL;
		ret = step_fail("create the thread pool", rc);
		goto out;
	}
	su->threads = tier_pool_size(pool);
	if (!w->active) {
		progress_note(pg, "measuring the in-memory update (%" PRIu64 " elements, %u"
			      " threads)...", su->numel, su->threads);
		if (step_update_time(o, su, pool, su->numel, &update_s))
			goto out;
		if (!o->verify) {
			tier_pool_destroy(pool);
			pool = NULL;
		}
	}
	/* 3. The store, the optimizer and the model; 4. the steps. */
	if (step_open(o, m, su, pg, &sm))
		goto out;
	step_world_barrier(w);
	if (step_steps(o, &sm, rec, pg))
		goto out;
	/* With --checkpoint-every, the full copy they are compared with. */
	if (o->checkpoint_every && step_export(m, &sm, pg))
		goto out;
	if (o->verify) {
		progress_note(pg, "verifying against tier_adam_step in memory...");
		if (step_outs_back(o, su, &sm))
			goto out;
		rc = step_verify(o, su, &sm, pool, rec, &sm.st.state_digest);
		if (rc == 1 || (rc && !w->active))
			goto out;
		sm.st.have_digest = true;
		verified = rc ? 0 : 1;
	}
	progress_done(pg);
	if (step_close(&sm))
		goto out;
	step_world_barrier(w);
	if (w->active) {
		progress_note(pg, "measuring the in-memory update (this rank's piece, %" PRIu64
			      " elements, %u threads, every rank at once)...", su->part_elems,
			      su->threads);
		if (step_update_time(o, su, pool, su->part_elems, &update_s))
			goto out;
		step_world_barrier(w);
	}
	/* 5. The NVMe bandwidth again, and mixed; the bounds; the figures. */
	step_bytes(o, rec, &rd_b, &wr_b);
	if (su->have_nvme)
		step_nvme_after(o, m, su, pg, rd_b, wr_b, &nv);
	step_world_barrier(w);
	/* The HBM-resident regime: an HBM tier and no NVMe */
	if (sm.st.has_hbm && !su->have_nvme && !w->active) {
		progress_note(pg, "measuring the link and the GPU lane's update...");
		if (step_link_measure(o, su, rec, &link))
			goto out;
		step_bounds(su, &nv, update_s, rd_b, wr_b, &link, &b);
	} else {
		step_bounds(su, &nv, update_s, rd_b, wr_b, NULL, &b);
	}
	if (!w->active) {
		step_report(o, su, rec, &nv, &b, &sm.st);
		ret = 0;
	} else {
		if (step_report_world(o, su, rec, &nv, &b, &sm.st, verified))
			goto out;
		ret = step_world_max(w, verified == 0) ? STEP_EXIT_VERIFY : 0;
	}
out:
	progress_done(pg);
	step_model_free(&sm);
	tier_pool_destroy(pool);
	free(rec);
	return ret;
}
