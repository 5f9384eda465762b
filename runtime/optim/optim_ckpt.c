/*
 * optim_ckpt.c - the optimizer's durable state (docs/optimizer.md,
 * "Checkpoints"): tier_optim_checkpoint writes the optimizer's record
 * (hyperparameters, the parameters' names and sizes, the shard layout,
 * the step count, the learning rate, the loss scaler, the split) as the
 * record of a store commit, so the record and the shards' bytes become
 * durable together; tier_optim_resume builds the optimizer again from the
 * record of the commit a store was opened at, over the shard objects that
 * commit holds, so the next step is the one an uninterrupted run takes.
 *
 * The record is little-endian and versioned ("TIEROPTM", version 4; 1 to
 * 3 are read too: 1 has one group and every parameter at the optimizer's
 * step, 2 no rank, 3 no rounding: those rounded to nearest); a partitioned
 * optimizer's record (version 3 on) holds its
 * rank, the world's size and each parameter's piece, and every rank
 * commits its own store; it is
 * read back field by field, every length checked, so a damaged record is
 * refused (the commit's table crc already guards it on disk).
 */
#include "config.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "common/fault.h"
#include "common/log.h"
#include "prefetch/writebehind.h"
#include "runtime/optim/optim_impl.h"
#include "runtime/open.h"
#include "formats/trace.h"
#include "tiers/store.h"

#define REC_MAGIC "TIEROPTM"
#define REC_VERSION 4u /* 2: groups, and each parameter's group, step count and freeze;
			* 3: the rank of a partitioned optimizer and each piece;
			* 4: the rounding and the stochastic rounding's seed */

/* ------------------------------------------------------------ encoding */

struct wbuf {
	char *p;
	size_t n, cap;
	bool nomem;
};

static void put(struct wbuf *w, const void *v, size_t n)
{
	if (w->nomem)
		return;
	if (w->n + n > w->cap) {
		size_t cap = w->cap ? w->cap : 1024;
		char *q;

		while (cap < w->n + n)
			cap *= 2;
		q = realloc(w->p, cap);
		if (!q) {
			w->nomem = true;
			return;
		}
		w->p = q;
		w->cap = cap;
	}
	memcpy(w->p + w->n, v, n);
	w->n += n;
}

static void put_u32(struct wbuf *w, uint32_t v) { put(w, &v, 4); }
static void put_u64(struct wbuf *w, uint64_t v) { put(w, &v, 8); }
static void put_f64(struct wbuf *w, double v) { put(w, &v, 8); }

struct rbuf {
	const char *p;
	size_t n, at;
	bool bad;
};

static void get(struct rbuf *r, void *v, size_t n)
{
	if (r->bad || r->n - r->at < n) {
		r->bad = true;
		memset(v, 0, n);
		return;
	}
	memcpy(v, r->p + r->at, n);
	r->at += n;
}

static uint32_t get_u32(struct rbuf *r) { uint32_t v; get(r, &v, 4); return v; }
static uint64_t get_u64(struct rbuf *r) { uint64_t v; get(r, &v, 8); return v; }
static double get_f64(struct rbuf *r) { double v; get(r, &v, 8); return v; }

bool optim_record_is(const void *rec, size_t len)
{
	return rec && len >= 12 && memcmp(rec, REC_MAGIC, 8) == 0;
}

static int record_encode(const struct tier_optim *o, struct wbuf *w)
{
	const struct tier_optim_params *p = &o->p;

	const struct tier_group_params *g0 = &o->groups[0];

	put(w, REC_MAGIC, 8);
	put_u32(w, REC_VERSION);
	/* hyperparameters (group 0's) */
	put_f64(w, g0->lr);
	put_f64(w, g0->beta1);
	put_f64(w, g0->beta2);
	put_f64(w, g0->eps);
	put_f64(w, g0->weight_decay);
	put_u32(w, g0->decoupled);
	put_u32(w, (uint32_t)o->md);
	put_f64(w, p->max_grad_norm);
	put_f64(w, p->loss_scale);
	put_u32(w, p->dynamic_loss_scale);
	put_f64(w, p->min_loss_scale);
	put_f64(w, p->growth_factor);
	put_f64(w, p->backoff_factor);
	put_u32(w, p->growth_interval);
	put_u32(w, p->hysteresis);
	/* the loss scaler's state */
	put_f64(w, o->scaler.scale);
	put_u32(w, o->scaler.growth_tracker);
	put_u32(w, (uint32_t)o->scaler.hysteresis_tracker);
	/* the step count and the order's parity */
	put_u64(w, o->applied);
	put_u64(w, o->ran);
	/* the split */
	put_f64(w, o->cpu_fraction);
	put_u32(w, o->auto_split);
	put_u32(w, o->auto_left);
	/* the layout: the shard size, then each parameter */
	put_u64(w, o->shard_elems);
	put_u32(w, o->nparams);
	for (uint32_t i = 0; i < o->nparams; i++) {
		uint32_t nl = (uint32_t)strlen(o->params[i].name);

		put_u32(w, nl);
		put(w, o->params[i].name, nl);
		put_u64(w, o->params[i].numel);
		put_u32(w, o->params[i].nshards);
	}
	/* version 2: the groups, then each parameter's group, step, freeze */
	put_u32(w, o->ngroups);
	for (uint32_t g = 0; g < o->ngroups; g++) {
		put_f64(w, o->groups[g].lr);
		put_f64(w, o->groups[g].beta1);
		put_f64(w, o->groups[g].beta2);
		put_f64(w, o->groups[g].eps);
		put_f64(w, o->groups[g].weight_decay);
		put_u32(w, o->groups[g].decoupled);
	}
	for (uint32_t i = 0; i < o->nparams; i++) {
		put_u32(w, o->params[i].group);
		put_u64(w, o->params[i].step);
		put_u32(w, o->params[i].frozen);
	}
	/* version 3: partitioned, then the rank, the world and each piece */
	put_u32(w, o->comm != NULL);
	if (o->comm) {
		put_u32(w, (uint32_t)o->rank);
		put_u32(w, (uint32_t)o->world);
		for (uint32_t i = 0; i < o->nparams; i++) {
			put_u64(w, o->params[i].poff);
			put_u64(w, o->params[i].pn);
		}
	}
	/* version 4: the rounding and the random stream's seed */
	put_u32(w, (uint32_t)o->rounding);
	put_u32(w, (uint32_t)o->out_rounding);
	put_u64(w, o->seed);
	put_u32(w, 0); /* the end */
	return w->nomem ? ts_err(-ENOMEM, "optimizer: out of memory for its checkpoint record") : 0;
}

/* The record decoded (names point into the record). */
struct record {
	double lr, beta1, beta2, eps, wd, max_grad_norm, loss_scale, min_scale, growth, backoff;
	bool decoupled, dynamic;
	uint32_t md, growth_interval, hysteresis;
	struct tier_loss_scaler scaler;
	uint64_t applied, ran;
	double cpu_fraction;
	bool auto_split;
	uint32_t auto_left;
	uint64_t shard_elems;
	uint32_t nparams;
	struct rparam {
		const char *name;
		uint32_t name_len, nshards;
		uint64_t numel;
		uint32_t group;
		uint64_t step;
		bool frozen;
		uint64_t poff, pn;       /* version 3, partitioned: the piece */
	} *params;
	bool partitioned;
	uint32_t rank, world;
	uint32_t rounding, out_rounding; /* version 4; before: nearest */
	uint64_t seed;
	uint32_t ngroups;
	struct tier_group_params *groups;
};

static void record_free(struct record *d)
{
	free(d->params);
	free(d->groups);
	d->params = NULL;
	d->groups = NULL;
}

/* Version 2's groups and parameters' counts; version 1's from its one set
 * of hyperparameters and step count. */
static int record_decode_groups(struct rbuf *r, uint32_t v, struct record *d)
{
	d->ngroups = v == 1 ? 1 : get_u32(r);
	if (r->bad || d->ngroups == 0 || d->ngroups > (r->n - r->at) / 44 + 1)
		return -EBADMSG;
	if (!(d->groups = calloc(d->ngroups, sizeof(*d->groups))))
		return -ENOMEM;
	for (uint32_t g = 0; g < d->ngroups; g++) {
		struct tier_group_params *q = &d->groups[g];

		tier_group_params_init(q);
		if (v == 1) {
			q->lr = d->lr;
			q->beta1 = d->beta1;
			q->beta2 = d->beta2;
			q->eps = d->eps;
			q->weight_decay = d->wd;
			q->decoupled = d->decoupled;
			continue;
		}
		q->lr = get_f64(r);
		q->beta1 = get_f64(r);
		q->beta2 = get_f64(r);
		q->eps = get_f64(r);
		q->weight_decay = get_f64(r);
		q->decoupled = get_u32(r) != 0;
	}
	for (uint32_t i = 0; i < d->nparams; i++) {
		struct rparam *q = &d->params[i];

		if (v == 1) {
			q->step = d->applied;
			continue;
		}
		q->group = get_u32(r);
		q->step = get_u64(r);
		q->frozen = get_u32(r) != 0;
		if (q->group >= d->ngroups)
			return -EBADMSG;
	}
	return r->bad ? -EBADMSG : 0;
}

static int record_decode(const void *rec, size_t len, struct record *d)
{
	struct rbuf r = { rec, len, 0, false };
	char magic[8];
	uint32_t v;

	memset(d, 0, sizeof(*d));
	get(&r, magic, 8);
	v = get_u32(&r);
	if (r.bad || memcmp(magic, REC_MAGIC, 8) != 0)
		return ts_err(-EBADMSG, "optimizer: the store's last commit holds no optimizer record");
	if (v < 1 || v > REC_VERSION)
		return ts_err(-EPROTO, "optimizer: a checkpoint record of version %u (this library reads versions 1 to %u)",
			      v, REC_VERSION);
	d->lr = get_f64(&r);
	d->beta1 = get_f64(&r);
	d->beta2 = get_f64(&r);
	d->eps = get_f64(&r);
	d->wd = get_f64(&r);
	d->decoupled = get_u32(&r) != 0;
	d->md = get_u32(&r);
	d->max_grad_norm = get_f64(&r);
	d->loss_scale = get_f64(&r);
	d->dynamic = get_u32(&r) != 0;
	d->min_scale = get_f64(&r);
	d->growth = get_f64(&r);
	d->backoff = get_f64(&r);
	d->growth_interval = get_u32(&r);
	d->hysteresis = get_u32(&r);
	d->scaler.scale = get_f64(&r);
	d->scaler.growth_tracker = get_u32(&r);
	d->scaler.hysteresis_tracker = (int32_t)get_u32(&r);
	d->applied = get_u64(&r);
	d->ran = get_u64(&r);
	d->cpu_fraction = get_f64(&r);
	d->auto_split = get_u32(&r) != 0;
	d->auto_left = get_u32(&r);
	d->shard_elems = get_u64(&r);
	d->nparams = get_u32(&r);
	if (r.bad)
		return ts_err(-EBADMSG, "optimizer: the checkpoint record is cut short (%zu bytes)", len);
	if (d->shard_elems == 0 || d->shard_elems % SHARD_ALIGN || d->nparams > len / 16)
		return ts_err(-EBADMSG, "optimizer: the checkpoint record is not possible (shards of %" PRIu64 " elements, %u parameters)",
			      d->shard_elems, d->nparams);
	d->params = calloc(d->nparams ? d->nparams : 1, sizeof(*d->params));
	if (!d->params)
		return ts_err(-ENOMEM, "optimizer: out of memory reading its checkpoint");
	for (uint32_t i = 0; i < d->nparams; i++) {
		struct rparam *q = &d->params[i];

		q->name_len = get_u32(&r);
		if (r.bad || q->name_len == 0 || q->name_len > r.n - r.at) {
			r.bad = true;
			break;
		}
		q->name = r.p + r.at;
		r.at += q->name_len;
		q->numel = get_u64(&r);
		q->nshards = get_u32(&r);
	}
	if (!r.bad) {
		int rc = record_decode_groups(&r, v, d);

		if (rc == -ENOMEM) {
			record_free(d);
			return ts_err(-ENOMEM, "optimizer: out of memory reading its checkpoint");
		}
		r.bad |= rc != 0;
	}
	if (!r.bad && v >= 3) {
		d->partitioned = get_u32(&r) != 0;
		if (d->partitioned) {
			d->rank = get_u32(&r);
			d->world = get_u32(&r);
			r.bad |= d->world == 0 || d->rank >= d->world;
			for (uint32_t i = 0; i < d->nparams && !r.bad; i++) {
				d->params[i].poff = get_u64(&r);
				d->params[i].pn = get_u64(&r);
				r.bad |= d->params[i].poff > d->params[i].numel ||
					 d->params[i].pn > d->params[i].numel - d->params[i].poff;
			}
		}
	}
	if (!r.bad && v >= 4) {
		d->rounding = get_u32(&r);
		d->out_rounding = get_u32(&r);
		d->seed = get_u64(&r);
		r.bad |= d->rounding > TIER_ROUND_STOCHASTIC || d->out_rounding > TIER_ROUND_STOCHASTIC ||
			 d->seed == TIER_SEED_MANIFEST;
	}
	if (get_u32(&r) != 0 || r.bad || r.at != r.n) {
		record_free(d);
		return ts_err(-EBADMSG, "optimizer: the checkpoint record is damaged (at byte %zu of %zu)",
			      r.at, len);
	}
	return 0;
}

/* ---------------------------------------------------------- checkpoint */

int tier_optim_checkpoint(struct tier_optim *o, uint64_t *gen)
{
	OPTIM_ARG(o);
	char detail[TIER_ERR_MAX];
	struct wbuf w = { 0 };
	uint64_t g = 0;
	int rc;

	if (gen)
		*gen = 0;
	if (atomic_load(&o->in_step))
		rc = ts_err(-EBUSY, "tier_optim_checkpoint: a step is begun; checkpoint between steps");
	else if (o->pending)
		rc = ts_err(-EBUSY, "tier_optim_checkpoint: step %" PRIu64 " failed part way and is pending; complete it (run it again) before a checkpoint",
			    o->applied + 1);
	else if (o->failed)
		rc = ts_err(o->failed, "tier_optim_checkpoint: an update failed part way, so the state is partly updated; it is not checkpointed (%s)",
			    o->failed_msg);
	else if (!o->home_nvme)
		rc = ts_err(-ENODEV, "tier_optim_checkpoint: the store has no NVMe tier: nothing is durable");
	else
		rc = 0;
	if (rc) {
		/* A partitioned optimizer's checkpoint is collective: the
		 * others learn of this rank's refusal. */
		if (o->comm && !atomic_load(&o->in_step))
			rc = zero_agree(o, rc, "tier_optim_checkpoint");
		return rc;
	}
	/* The write-behind of the last step goes on while the record is
	 * encoded; the store's commit flushes whatever is still dirty. */
	if ((rc = record_encode(o, &w)))
		goto out;
	wb_drain(o->wb);
	rc = wb_take_error(o->wb, detail, sizeof(detail));
	if (rc) {
		rc = ts_err(rc, "tier_optim_checkpoint: a write-back failed: %s", detail);
		goto out;
	}
	rc = tier_store_commit(o->s, w.p, w.n, &g);
	if (rc) {
		ts_err_prefix("tier_optim_checkpoint: ");
		goto out;
	}
	o->ckpt_gen = g;
	o->synced = false; /* the commit flushed: the store's residency is as after a step */
	if (gen)
		*gen = g;
	TIER_INFO(TIER_SS_OPTIM, "optimizer: checkpoint at step %" PRIu64 ": generation %" PRIu64 " (%zu bytes of record)",
		  o->applied, g, w.n);
out:
	free(w.p);
	if (o->comm)
		rc = zero_agree(o, rc, "tier_optim_checkpoint");
	return rc;
}

uint64_t tier_optim_step_count(const struct tier_optim *o)
{
	OPTIM_ARG_OR(o, 0);
	return o->applied;
}

/* -------------------------------------------------------------- resume */

/* Takes the shard objects of parameter @d (added as parameter o->nparams). */
static int adopt_param(struct tier_optim *o, const struct rparam *d)
{
	uint32_t first = o->nshards, nsh;
	struct param *pp;
	char *name = ts_strndup(d->name, d->name_len);
	uint64_t pn;
	int rc = 0;

	if (!name)
		return ts_err(-ENOMEM, "optimizer: out of memory");
	if (ts_names_find(&o->pnames, name)) {
		rc = ts_err(-EBADMSG, "optimizer: the checkpoint names parameter '%s' twice", name);
		free(name);
		return rc;
	}
	{
		struct param piece = { .name = name, .numel = d->numel };

		if (d->numel == 0 || (o->comm && (rc = zero_param_split(o, &piece)))) {
			rc = d->numel ? rc : ts_err(-EBADMSG, "optimizer: the checkpoint's parameter '%s' has no elements", name);
			free(name);
			return rc;
		}
		pn = o->comm ? piece.pn : d->numel;
		if (o->comm && (piece.poff != d->poff || piece.pn != d->pn)) {
			rc = ts_err(-EBADMSG, "optimizer: the checkpoint's parameter '%s' holds elements [%" PRIu64 ", %" PRIu64 "), but rank %d of %d keeps [%zu, %zu) of its %" PRIu64 ": the checkpoint was split another way",
				    name, d->poff, d->poff + d->pn, o->rank, o->world, piece.poff,
				    piece.poff + piece.pn, d->numel);
			zero_param_free(o, &piece);
			free(name);
			return rc;
		}
		zero_param_free(o, &piece);
	}
	nsh = (uint32_t)(pn / o->shard_elems + (pn % o->shard_elems != 0));
	if (nsh != d->nshards) {
		rc = ts_err(-EBADMSG, "optimizer: the checkpoint's parameter '%s' has %" PRIu64 " elements here in %u shards, which shards of %zu elements do not make",
			    name, pn, d->nshards, o->shard_elems);
		free(name);
		return rc;
	}
	if (nsh > UINT32_MAX - o->nshards || o->nparams == UINT32_MAX) {
		rc = ts_err(-EBADMSG, "optimizer: the checkpoint's parameter '%s' takes the shard count past a uint32_t",
			    name);
		free(name);
		return rc;
	}
	if ((rc = optim_add_room(o, name, nsh))) {
		free(name);
		return rc;
	}
	pp = &o->params[o->nparams];
	memset(pp, 0, sizeof(*pp));
	pp->name = name;
	pp->numel = d->numel;
	if ((rc = zero_param_split(o, pp))) {
		free(name);
		return rc;
	}
	pp->first = first;
	pp->group = d->group;
	pp->step = d->step;
	pp->frozen = d->frozen;
	for (uint32_t k = 0; k < nsh; k++) {
		struct shard *sh = ts_calloc(1, sizeof(*sh));
		char oname[TIERS_NAME_MAX * 4 + 32];

		if (!sh) {
			rc = ts_err(-ENOMEM, "optimizer: out of memory");
			goto undo;
		}
		o->shards[o->nshards++] = sh;
		sh->o = o;
		sh->param = o->nparams;
		sh->index = first + k;
		sh->off = (size_t)k * o->shard_elems;
		sh->n = pn - sh->off < o->shard_elems ? pn - sh->off : o->shard_elems;
		sh->bytes = state_bytes_n(o->md, sh->n);
		snprintf(oname, sizeof(oname), "%s#%u", name, k);
		sh->obj = tier_obj_find(o->s, oname);
		if (!sh->obj || tier_obj_size(sh->obj) != sh->bytes) {
			rc = ts_err(-EBADMSG, "optimizer: the store's commit %s object '%s' of parameter '%s'%s",
				    sh->obj ? "has a wrong-sized" : "lacks", oname, name,
				    sh->obj ? " (the checkpoint record and the objects disagree)" : "");
			sh->obj = NULL;
			goto undo;
		}
		if (store_obj_user(sh->obj)) {
			rc = ts_err(-EBUSY, "optimizer: object '%s' of parameter '%s' belongs to another optimizer on this store",
				    oname, name);
			sh->obj = NULL;
			goto undo;
		}
		store_obj_set_user(sh->obj, sh);
		trace_name_shard(o->trace, sh->index, oname);
	}
	pp->nshards = nsh;
	if ((rc = ts_names_insert(&o->pnames, (uintptr_t)o->nparams + 1)))
		goto undo; /* not after optim_add_room's reserve */
	o->nparams++;
	o->state_bytes += optim_shards_bytes(o, first, nsh);
	return 0;
undo:
	while (o->nshards > first) {
		struct shard *sh = o->shards[--o->nshards];

		if (sh->obj)
			store_obj_set_user(sh->obj, NULL);
		free(sh);
	}
	zero_param_free(o, pp);
	free(name);
	return rc;
}

int tier_optim_resume(struct tier_store *s, const struct tier_optim_params *rt,
		      struct tier_optim **out)
{
	TS_NONNULL(s);
	TS_NONNULL(out);
	struct tier_optim_params p;
	struct tier_commit_info ci;
	struct tier_optim *o = NULL;
	struct record d;
	const void *rec;
	size_t len;
	int rc;

	*out = NULL;
	if (rt && ts_params_size("tier_optim_resume: struct tier_optim_params", rt->size, sizeof(*rt)))
		return -EINVAL;
	if (tier_store_home(s) != TIER_NVME)
		return ts_err(-ENODEV, "tier_optim_resume: the store has no NVMe tier, so no checkpoint");
	rc = tier_store_record(s, &rec, &len);
	if (rc == -ENOENT || (rc == 0 && !optim_record_is(rec, len)))
		return ts_err(-ENOENT, "tier_optim_resume: the store's files hold no optimizer checkpoint%s",
			      rc == -ENOENT ? " (no commit)" : " (their last commit is not an optimizer's)");
	if (rc)
		return rc;
	if ((rc = record_decode(rec, len, &d)))
		return rc;
	if (d.partitioned != (rt && rt->comm)) {
		rc = d.partitioned
		     ? ts_err(-EINVAL, "tier_optim_resume: the checkpoint is rank %u of a partitioned optimizer of %u ranks: pass the job's communicator (tier_optim_params.comm)",
			      d.rank, d.world)
		     : ts_err(-EINVAL, "tier_optim_resume: the checkpoint is of an optimizer that was not partitioned, and a communicator was passed");
		record_free(&d);
		return rc;
	}
	if (d.partitioned && ((int)d.rank != tier_comm_rank(rt->comm) ||
			      (int)d.world != tier_comm_size(rt->comm))) {
		rc = ts_err(-EINVAL, "tier_optim_resume: the checkpoint is rank %u of %u; this process is rank %d of %d (resume each rank from its own store, with the same number of ranks)",
			    d.rank, d.world, tier_comm_rank(rt->comm), tier_comm_size(rt->comm));
		record_free(&d);
		return rc;
	}
	tier_optim_params_init(&p);
	p.lr = d.lr;
	p.beta1 = d.beta1;
	p.beta2 = d.beta2;
	p.eps = d.eps;
	p.weight_decay = d.wd;
	p.decoupled = d.decoupled;
	p.moment_dtype = (int)d.md;
	p.rounding = (int)d.rounding;
	p.out_rounding = (int)d.out_rounding;
	p.seed = d.seed;
	p.max_grad_norm = d.max_grad_norm;
	p.loss_scale = d.loss_scale;
	p.dynamic_loss_scale = d.dynamic;
	p.min_loss_scale = d.min_scale;
	p.growth_factor = d.growth;
	p.backoff_factor = d.backoff;
	p.growth_interval = d.growth_interval;
	p.hysteresis = d.hysteresis;
	p.offload_fraction = d.auto_split ? TIER_OFFLOAD_AUTO : d.cpu_fraction;
	if (rt) {
		p.threads = rt->threads;
		p.comm = rt->comm;
		if (rt->offload_fraction != TIER_OFFLOAD_MANIFEST)
			p.offload_fraction = rt->offload_fraction;
	}
	rc = optim_create(s, &p, d.shard_elems, &o);
	if (rc) {
		ts_err_prefix("tier_optim_resume: ");
		goto out;
	}
	o->groups[0] = d.groups[0];
	for (uint32_t g = 1; g < d.ngroups; g++) {
		char what[64];

		snprintf(what, sizeof(what), "tier_optim_resume: the checkpoint's group %u", g);
		if ((rc = optim_check_group(what, &d.groups[g])))
			goto out;
		if ((rc = optim_push_group(o, &d.groups[g])))
			goto out;
	}
	for (uint32_t i = 0; i < d.nparams; i++) {
		rc = adopt_param(o, &d.params[i]);
		if (rc)
			goto out;
	}
	o->applied = d.applied;
	o->ran = d.ran;
	if (d.dynamic) {
		/* The state; the parameters came from the record through create. */
		o->scaler.scale = d.scaler.scale;
		o->scaler.growth_tracker = d.scaler.growth_tracker;
		o->scaler.hysteresis_tracker = d.scaler.hysteresis_tracker;
	}
	if (!rt || rt->offload_fraction == TIER_OFFLOAD_MANIFEST) {
		if (d.auto_split && o->auto_split && !d.auto_left)
			o->cpu_fraction = d.cpu_fraction; /* the split auto chose */
		/* mid-choice: the candidates' times are not recorded, so the
		 * choice starts over (create set 0.5 and AUTO_STEPS) */
	}
	tier_store_committed(s, &ci);
	o->ckpt_gen = ci.generation;
	if (o->comm && (rc = zero_resume_check(o, ci.generation)))
		goto out;
	optim_feed_update(o, NULL);
	TIER_INFO(TIER_SS_OPTIM, "optimizer: resumed at step %" PRIu64 " from generation %" PRIu64 ": %u parameters, %u shards",
		  o->applied, ci.generation, o->nparams, o->nshards);
	*out = o;
	o = NULL;
out:
	record_free(&d);
	if (o) {
		/* The shard objects are the commit's: leave them to the store. */
		for (uint32_t i = 0; i < o->nshards; i++) {
			store_obj_set_user(o->shards[i]->obj, NULL);
			o->shards[i]->obj = NULL;
		}
		tier_optim_destroy(o);
	}
	return rc;
}
