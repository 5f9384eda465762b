/*
 * optim_step.c - the optimizer's step (tier_optim_begin, _push, _end and
 * _step; docs/optimizer.md), the CPU lane (the calling thread over the
 * thread pool) and the per-shard work both lanes share; the GPU lane, on
 * the optimizer's own thread, is runtime/optim/optim_gpu.c.  runtime/optim/optim.c
 * owns the optimizer's lifetime; optim_impl.h the structures they share.
 */
#include "config.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/clock.h"
#include "common/cuda.h"
#include "common/error.h"
#include "common/fault.h"
#include "common/log.h"
#include "common/options.h"
#include "common/units.h"
#include "kernels/adamw_cuda.h"
#include "prefetch/lookahead.h"
#include "prefetch/schedule.h"
#include "prefetch/writebehind.h"
#include "runtime/publish.h"
#include "runtime/optim/optim_impl.h"
#include "runtime/open.h"
#include "formats/trace.h"
#include "tiers/hbm.h"
#include "tiers/store.h"

/* A gradient's or a parameter copy's dtype (TIER_Q8 is a moment dtype only). */
static bool dtype_ok(int d)
{
	return d == TIER_FP32 || d == TIER_BF16 || d == TIER_FP16;
}

/* ------------------------------------------------------------ the update */

void optim_item_args(struct tier_optim *o, const struct la_item *it, struct tier_adam_params *ap,
		     struct tier_adam_tensors *t)
{
	struct shard *sh = it->user;
	struct param *pp = &o->params[sh->param];
	size_t gsz = tier_dtype_size(pp->grad.dtype), osz = pp->out.ptr ? tier_dtype_size(pp->out.dtype) : 0;
	const struct tier_group_params *g = &o->groups[pp->group];
	struct shard_view sv;

	shard_view_of(o->md, it->ptr, sh->n, &sv);
	*t = (struct tier_adam_tensors){
		.n = sh->n,
		.param = sv.param,
		.exp_avg = sv.m,
		.exp_avg_sq = sv.v,
		.exp_avg_scale = sv.ms,
		.exp_avg_sq_scale = sv.vs,
		.moment_dtype = o->md,
		.grad = (const char *)pp->grad.ptr + sh->off * gsz,
		.grad_dtype = pp->grad.dtype,
		.param_out = pp->out.ptr ? (char *)pp->out.ptr + sh->off * osz : NULL,
		.out_dtype = pp->out.ptr ? pp->out.dtype : TIER_FP32,
		.index0 = pp->poff + sh->off,
	};
	/* the parameter's group and its own bias-correction count */
	*ap = o->ap;
	ap->lr = g->lr;
	ap->beta1 = g->beta1;
	ap->beta2 = g->beta2;
	ap->eps = g->eps;
	ap->weight_decay = g->weight_decay;
	ap->decoupled = g->decoupled;
	ap->step = pp->step + 1;
	ap->rounding = o->rounding;
	ap->out_rounding = o->out_rounding;
	ap->seed = sr_param_seed(o->seed, sh->param);
}

/* Runs the CPU kernel over one taken item on the CPU lane: a real
 * device's buffers go through host staging. */
static int update_item(struct tier_optim *o, struct la_item *it)
{
	struct shard *sh = it->user;
	struct param *pp = &o->params[sh->param];
	size_t gsz = tier_dtype_size(pp->grad.dtype), osz = pp->out.ptr ? tier_dtype_size(pp->out.dtype) : 0;
	struct tier_adam_params ap;
	struct tier_adam_tensors t;
	bool stage_grad = pp->grad.mem == TIER_MEM_DEVICE && !o->dev_host;
	bool stage_out = pp->out.ptr && pp->out.mem == TIER_MEM_DEVICE && !o->dev_host;
	void *final_out;
	int rc;

	optim_item_args(o, it, &ap, &t);
	final_out = t.param_out;
	if (stage_grad) {
		if ((rc = ts_cuda_copy(o->host_grad, t.grad, sh->n * gsz, o->stream)))
			return rc;
		t.grad = o->host_grad;
	}
	if (stage_out)
		t.param_out = o->host_out;
	rc = tier_adam_step(o->pool, &ap, &t);
	if (!rc && stage_out)
		rc = ts_cuda_copy(final_out, o->host_out, sh->n * osz, o->stream);
	return rc;
}

void optim_lane_fail(struct tier_optim *o, unsigned lane, int rc, bool fatal, const char *obj)
{
	struct lane *ln = &o->lane[lane];

	if (ln->rc)
		return; /* the first error is the one to report */
	if (obj)
		snprintf(ln->err, sizeof(ln->err), "'%s': update: %s", obj, tier_last_error());
	else
		snprintf(ln->err, sizeof(ln->err), "%s", tier_last_error());
	ln->rc = rc;
	ln->fatal = fatal;
}

/* After la_take gave @it (waiting @stall ns, now @now): the stall is
 * counted; 0 when it is to be updated, 1 when its parameter has no
 * gradient this step (given back), or the error of giving it back. */
static int item_taken(struct tier_optim *o, unsigned lane, struct la_item *it, uint64_t stall,
		      uint64_t now)
{
	struct shard *sh = it->user;
	int rc;

	o->lane[lane].stall_ns += stall;
	if (stall && o->feed)
		atomic_fetch_add_explicit(&o->feed->prefetch.stall_ns, stall, memory_order_relaxed);
	if (stall)
		trace_span(o->trace, TRACE_STALL, sh->index, atomic_load(&o->begun), now - stall, now, 0);
	if (o->params[sh->param].pushed)
		return 0;
	/* no gradient this step: streamed, left as it is */
	sh->updated = true;
	if ((rc = la_done(&o->la, it, false))) {
		optim_lane_fail(o, lane, rc, false, NULL);
		la_abort(&o->la);
		return rc;
	}
	return 1;
}

int optim_take(struct tier_optim *o, unsigned lane, struct la_item **it, uint64_t *now)
{
	uint64_t stall = 0;
	int rc = la_take(&o->la, lane, it, &stall);

	if (rc == 1)
		return 1;
	if (rc) {
		/* its state did not come up: nothing of it changed */
		o->lane[lane].stall_ns += stall;
		optim_lane_fail(o, lane, rc, false, NULL);
		la_done(&o->la, *it, false);
		la_abort(&o->la);
		return rc;
	}
	*now = ts_now_ns();
	rc = item_taken(o, lane, *it, stall, *now);
	return rc == 1 ? 2 : rc;
}

int optim_item_updated(struct tier_optim *o, unsigned lane, struct la_item *it, uint64_t u0,
		       uint64_t u1)
{
	struct lane *ln = &o->lane[lane];
	struct shard *sh = it->user;
	int rc;

	trace_span(o->trace, lane ? TRACE_UPDATE_GPU : TRACE_UPDATE_CPU, sh->index,
		   atomic_load(&o->begun), u0, u1, sh->bytes);
	sh->updated = true;
	if (o->comm) /* its outputs are written: counts toward the all-gather */
		atomic_fetch_sub_explicit(&o->params[sh->param].ag_left, 1, memory_order_release);
	if ((rc = la_done(&o->la, it, true))) {
		optim_lane_fail(o, lane, rc, true, NULL);
		la_abort(&o->la);
		return rc;
	}
	ln->bytes += sh->bytes;
	ln->shards++;
	if (lane == 0 && o->ag_on)
		zero_gather_progress(o);
	if (sh->after > o->keep && o->home_nvme)
		(void)wb_push(o->wb, sh->obj); /* -ENOMEM: it goes down on eviction */
	return 0;
}

/* The CPU lane's part of the step: every item of lane 0, in order. */
static void run_cpu_lane(struct tier_optim *o)
{
	struct lane *ln = &o->lane[0];
	uint64_t t0 = ts_now_ns();

	for (;;) {
		struct la_item *it;
		uint64_t u0, u1;
		int rc = optim_take(o, 0, &it, &u0);

		if (rc == 1 || rc < 0)
			break;
		if (rc == 2)
			continue;
		rc = update_item(o, it);
		u1 = ts_now_ns();
		if (rc) {
			trace_span(o->trace, TRACE_UPDATE_CPU, ((struct shard *)it->user)->index,
				   atomic_load(&o->begun), u0, u1, 0);
			optim_lane_fail(o, 0, rc, true, tier_obj_name(((struct shard *)it->user)->obj));
			la_done(&o->la, it, false);
			la_abort(&o->la);
			break;
		}
		if (optim_item_updated(o, 0, it, u0, u1))
			break;
	}
	ln->busy_ns = ts_now_ns() - t0;
}

void *optim_gpu_main(void *arg)
{
	struct tier_optim *o = arg;
	uint64_t seen = 0;

	if (!o->dev_host)
		(void)ts_cuda_use_device(o->gpu);
	pthread_mutex_lock(&o->lock);
	for (;;) {
		while (o->go == seen && !o->quit)
			pthread_cond_wait(&o->cond, &o->lock);
		if (o->quit)
			break;
		seen = o->go;
		pthread_mutex_unlock(&o->lock);
		optim_gpu_lane(o);
		pthread_mutex_lock(&o->lock);
		o->done = seen;
		pthread_cond_broadcast(&o->cond);
	}
	pthread_mutex_unlock(&o->lock);
	return NULL;
}

/* ------------------------------------------------------------ the step */

/* The shards a step streams: those of the parameters not frozen. */
static int build_active(struct tier_optim *o)
{
	uint32_t *act = ts_realloc(o->act, (o->nshards ? o->nshards : 1) * sizeof(*act));

	if (!act)
		return ts_err(-ENOMEM, "optimizer: out of memory for the schedule");
	o->act = act;
	o->nact = 0;
	for (uint32_t i = 0; i < o->nshards; i++)
		if (!o->params[o->shards[i]->param].frozen)
			act[o->nact++] = i;
	return 0;
}

/* Registers the cycle of this step's order and the next one's. */
static int sync_schedule(struct tier_optim *o)
{
	size_t n;
	struct tier_obj **cyc;
	int rc;

	if ((rc = build_active(o)))
		return rc;
	n = o->nact;
	if (!(cyc = ts_malloc((2 * n + 1) * sizeof(*cyc))))
		return ts_err(-ENOMEM, "optimizer: out of memory for the schedule");
	for (int h = 0; h < 2; h++) {
		sched_order(n, o->ran + (uint64_t)h, o->order);
		for (size_t i = 0; i < n; i++)
			cyc[(size_t)h * n + i] = o->shards[o->act[o->order[i]]]->obj;
	}
	rc = tier_store_set_schedule(o->s, cyc, 2 * n);
	free(cyc);
	if (!rc)
		o->synced = true;
	return rc;
}

/* Room for @n items, lanes and order entries. */
static int grow_items(struct tier_optim *o, size_t n)
{
	struct la_item *items;
	unsigned char *lanes;
	uint32_t *order;

	if (n <= o->nitems)
		return 0;
	if (!(items = ts_realloc(o->items, n * sizeof(*items))))
		return ts_err(-ENOMEM, "optimizer: out of memory");
	o->items = items;
	if (!(lanes = ts_realloc(o->lanes, n)))
		return ts_err(-ENOMEM, "optimizer: out of memory");
	o->lanes = lanes;
	if (!(order = ts_realloc(o->order, n * sizeof(*order))))
		return ts_err(-ENOMEM, "optimizer: out of memory");
	o->order = order;
	o->nitems = n;
	return 0;
}

/*
 * This step's items, in its order and split: every shard, or when it
 * completes a pending step, the shards that step did not update.  Returns
 * their count.
 */
static size_t build_items(struct tier_optim *o)
{
	size_t n = o->nact, m = 0;
	uint64_t after = 0;

	sched_split(n, o->cpu_fraction, o->lanes);
	sched_order(n, o->ran, o->order);
	for (size_t i = 0; i < n; i++) {
		struct shard *sh = o->shards[o->act[o->order[i]]];
		struct la_item *it = &o->items[m];

		sh->lane = o->lanes[o->order[i]];
		if (!o->pending)
			sh->updated = false;
		else if (sh->updated)
			continue; /* the pending step updated it */
		memset(it, 0, sizeof(*it));
		it->obj = sh->obj;
		it->lane = sh->lane;
		it->level = it->lane ? TIER_HBM : TIER_DRAM;
		it->bytes = sh->bytes;
		it->user = sh;
		m++;
	}
	for (size_t i = m; i-- > 0;) {
		struct shard *sh = o->items[i].user;

		sh->after = after;
		after += sh->bytes;
	}
	return m;
}

/* begin's checks and preparation, with the step claimed (in_step set):
 * an error here gives the claim back. */
static int begin_check(struct tier_optim *o, double lr)
{
	int rc;

	if (o->failed)
		return ts_err(o->failed, "optimizer: an update failed part way, state is partly updated: %s",
				o->failed_msg);
	if (!o->nparams)
		return ts_err(-EINVAL, "optimizer: no parameters");
	if (lr != TIER_LR_KEEP && !(lr >= 0 && isfinite(lr)))
		return ts_err(-EINVAL, "tier_optim_begin: lr %g (a finite value >= 0, 0 included, or TIER_LR_KEEP to keep %g)",
				lr, o->groups[0].lr);
	if (lr != TIER_LR_KEEP && o->ngroups > 1)
		return ts_err(-EINVAL, "tier_optim_begin: lr %g for an optimizer of %u groups: set each group's lr with tier_optim_set_group and pass TIER_LR_KEEP",
				lr, o->ngroups);
	if (o->pending && lr != TIER_LR_KEEP && lr != o->groups[0].lr)
		return ts_err(-EINVAL, "optimizer: step %" PRIu64 " failed part way; this step completes it and takes its lr, %g, not %g (pass it or TIER_LR_KEEP)",
				o->applied + 1, o->groups[0].lr, lr);
	if ((rc = grow_items(o, o->nshards)))
		return rc;
	if (!o->synced && (rc = sync_schedule(o)))
		return rc;
	return 0;
}

int tier_optim_begin(struct tier_optim *o, double lr)
{
	OPTIM_ARG(o);
	struct la_watch w = { NULL, NULL };
	bool idle = false;
	size_t m;
	int rc;

	/* One step at a time: the first of threads racing here claims it. */
	if (!atomic_compare_exchange_strong(&o->in_step, &idle, true))
		return ts_err(-EBUSY, "optimizer: a step is already begun (end it first)");
	if ((rc = begin_check(o, lr)) || (o->comm && (rc = zero_begin(o)))) {
		atomic_store(&o->in_step, false);
		return rc;
	}
	if (lr != TIER_LR_KEEP)
		o->groups[0].lr = lr;
	o->keep = sched_keep_bytes(o->dram_cap, o->lookahead, o->shard_bytes, optim_state_bytes(o));
	m = build_items(o);
	for (uint32_t i = 0; i < o->nparams; i++) {
		o->params[i].pushed = false;
		o->params[i].sumsq = 0;
		o->params[i].nonfinite = false;
		o->params[i].ready = false;
	}
	o->rs_next = 0;
	o->last_push = UINT32_MAX;
	o->push_up = o->push_down = 0;
	o->zrc = 0;
	memset(&o->cst, 0, sizeof(o->cst));
	memset(o->lane, 0, sizeof(o->lane));
	tier_store_get_stats(o->s, &o->st0);
	o->t0 = ts_now_ns();
	atomic_fetch_add(&o->begun, 1);
	if (o->feed) {
		w.bytes = &o->feed->prefetch.ahead_bytes;
		w.items = &o->feed->prefetch.shards_ahead;
		atomic_store_explicit(&o->feed->prefetch.active, 1, memory_order_relaxed);
	}
	return la_start(&o->la, o->s, o->items, m, o->lookahead, o->hbm_budget, &w);
}

int optim_grad_check(struct tier_optim *o, const void *ptr, enum tier_dtype dt,
		     enum tier_mem mem, size_t n, double *sumsq, bool *nonfinite)
{
	struct tier_grad_stats gs = { 0 };
	int rc;

	*sumsq = 0;
	*nonfinite = false;
	if (!n)
		return 0;
	if (mem == TIER_MEM_DEVICE && !o->dev_host) {
		struct adamw_chunk c = { .grad = ptr, .n = n };
		int nf = 0;

		rc = adamw_cuda_grad_check(&c, 1, dt, o->stream, &gs.sumsq, &nf);
		gs.nonfinite = nf != 0;
	} else {
		rc = tier_grad_check(o->pool, ptr, dt, n, &gs);
	}
	if (rc)
		return rc;
	*sumsq = gs.sumsq;
	*nonfinite = gs.nonfinite;
	return 0;
}

static int check_tensor(const struct tier_optim *o, const struct param *pp, const char *what,
			const struct tier_tensor *t)
{
	if (!t->ptr)
		return ts_err(-EINVAL, "parameter '%s': no %s buffer", pp->name, what);
	if (!dtype_ok((int)t->dtype))
		return ts_err(-EINVAL, "parameter '%s': %s dtype %d%s (TIER_FP32, TIER_BF16, TIER_FP16)",
				pp->name, what, (int)t->dtype,
				t->dtype == TIER_Q8 ? " (q8, a moment dtype only)" : "");
	if (t->mem != TIER_MEM_HOST && t->mem != TIER_MEM_DEVICE)
		return ts_err(-EINVAL, "parameter '%s': %s memory kind %d", pp->name, what,
				(int)t->mem);
	if (t->mem == TIER_MEM_DEVICE && !o->hbm_caps)
		return ts_err(-EINVAL, "parameter '%s': %s in device memory, but the optimizer has no HBM tier",
				pp->name, what);
	if (t->numel != pp->numel)
		return ts_err(-EINVAL, "parameter '%s': %s of %zu elements, the parameter has %zu",
				pp->name, what, t->numel, pp->numel);
	return 0;
}

int tier_optim_push(struct tier_optim *o, uint32_t id, const struct tier_tensor *grad,
		    const struct tier_tensor *out)
{
	OPTIM_ARG(o);
	TS_NONNULL(grad);
	struct param *pp;
	struct tier_grad_stats gs = { 0 };
	int rc;

	if (!o->in_step)
		return ts_err(-EINVAL, "optimizer: push outside a step (call tier_optim_begin first)");
	if (id >= o->nparams)
		return ts_err(-EINVAL, "optimizer: no parameter with id %u (there are %u)", id,
				o->nparams);
	pp = &o->params[id];
	if (pp->pushed)
		return ts_err(-EALREADY, "parameter '%s': gradient already pushed this step",
				pp->name);
	if (pp->frozen)
		return ts_err(-EINVAL, "parameter '%s' is frozen: it takes no gradient (thaw it with tier_optim_freeze)",
				pp->name);
	if ((rc = check_tensor(o, pp, "gradient", grad)))
		return rc;
	if (out && out->ptr && (rc = check_tensor(o, pp, "output", out)))
		return rc;
	if (o->comm)
		return zero_push(o, id, grad, out);
	if ((rc = optim_grad_check(o, grad->ptr, grad->dtype, grad->mem, pp->numel, &gs.sumsq,
				   &gs.nonfinite)))
		return rc;
	pp->grad = *grad;
	if (out && out->ptr)
		pp->out = *out;
	else
		memset(&pp->out, 0, sizeof(pp->out));
	pp->sumsq = gs.sumsq;
	pp->nonfinite = gs.nonfinite;
	pp->pushed = true;
	return 0;
}

/* Ends a step without updating anything. */
void optim_abandon(struct tier_optim *o)
{
	if (o->comm)
		zero_drain(o);
	la_finish(&o->la);
	o->in_step = false;
	o->synced = false; /* the window stopped part way through the schedule */
	if (o->feed)
		atomic_store_explicit(&o->feed->prefetch.active, 0, memory_order_relaxed);
}

void optim_fill_result(struct tier_optim *o, struct tier_step_result *res, bool applied,
			double norm, double scale, double clip)
{
	struct tier_store_stats st;
	const struct tier_level_stats *d0 = &o->st0.level[TIER_DRAM], *h0 = &o->st0.level[TIER_HBM];

	tier_store_get_stats(o->s, &st);
	memset(res, 0, sizeof(*res));
	res->applied = applied;
	res->step = o->applied;
	res->grad_norm = norm;
	res->loss_scale = scale;
	res->next_loss_scale = o->p.dynamic_loss_scale ? o->scaler.scale : o->p.loss_scale;
	res->clip_coef = clip;
	res->offload_fraction = o->cpu_fraction;
	for (size_t i = 0; i < o->nact; i++) {
		if (o->shards[o->act[i]]->lane)
			res->gpu_shards++;
		else
			res->cpu_shards++;
	}
	for (uint32_t i = 0; i < o->nparams; i++) {
		if (applied && o->params[i].pushed)
			res->params_updated++;
		else
			res->params_skipped++;
	}
	res->step_s = (double)(ts_now_ns() - o->t0) * 1e-9;
	res->rank = o->rank;
	res->world = o->world;
	res->collectives = o->cst.n;
	res->comm_bytes = o->cst.bytes;
	res->comm_s = (double)o->cst.ns * 1e-9;
	res->comm_wait_s = (double)o->cst.wait_ns * 1e-9;
	res->cpu_stall_s = (double)o->lane[0].stall_ns * 1e-9;
	res->gpu_stall_s = (double)o->lane[1].stall_ns * 1e-9;
	res->stall_s = res->cpu_stall_s > res->gpu_stall_s ? res->cpu_stall_s : res->gpu_stall_s;
	if (o->home_nvme) {
		res->nvme_read_bytes = st.level[TIER_DRAM].bytes_in - d0->bytes_in;
		res->nvme_write_bytes = st.level[TIER_DRAM].bytes_out - d0->bytes_out;
	}
	if (st.level[TIER_HBM].present) {
		res->h2d_bytes = st.level[TIER_HBM].bytes_in - h0->bytes_in;
		res->d2h_bytes = st.level[TIER_HBM].bytes_out - h0->bytes_out;
	}
	if (res->step_s > 0) {
		res->nvme_read_Bps = (double)res->nvme_read_bytes / res->step_s;
		res->nvme_write_Bps = (double)res->nvme_write_bytes / res->step_s;
		res->h2d_Bps = (double)res->h2d_bytes / res->step_s;
		res->d2h_Bps = (double)res->d2h_bytes / res->step_s;
	}
	if (o->feed)
		atomic_store_explicit(&o->feed->prefetch.active, 0, memory_order_relaxed);
	optim_feed_update(o, res);
}

/*
 * Under "auto", after each of its first AUTO_STEPS complete steps.  The
 * first runs at 0.5 and measures each lane's rate over its own work (state
 * bytes over its time less its stalls, so a lane the feed starved is not
 * taken for a slow one); its candidates are the share that makes both
 * lanes end together at those rates, all on the CPU and all on the GPU;
 * the next AUTO_TRIES steps run one each, timed from the start of the
 * lanes to the end of the later one, and the fastest is kept.  So the
 * choice is never slower than the better of the two extremes as measured,
 * whatever the lanes share (the cores of an emulated GPU, the memory bus,
 * the feed).
 */
static void auto_adjust(struct tier_optim *o)
{
	const struct lane *c = &o->lane[0], *g = &o->lane[1];
	unsigned k, best = 0;

	if (!o->auto_left)
		return;
	k = AUTO_STEPS - o->auto_left;
	if (k == 0) {
		double rc, rg;

		if (!c->bytes || !g->bytes || c->busy_ns <= c->stall_ns || g->busy_ns <= g->stall_ns)
			return; /* a lane without work: measure again */
		rc = (double)c->bytes / (double)(c->busy_ns - c->stall_ns);
		rg = (double)g->bytes / (double)(g->busy_ns - g->stall_ns);
		o->auto_f[0] = rc / (rc + rg);
		o->auto_f[1] = 1.0;
		o->auto_f[2] = 0.0;
		TIER_INFO(TIER_SS_OPTIM, "optimizer: auto split: CPU lane %.2f GB/s, GPU lane %.2f GB/s of state (stalls left out); trying CPU shares %.3f, 1 and 0",
			  rc, rg, o->auto_f[0]);
		o->cpu_fraction = o->auto_f[0];
		o->auto_left--;
		return;
	}
	o->auto_t[k - 1] = (double)(c->busy_ns > g->busy_ns ? c->busy_ns : g->busy_ns) * 1e-9;
	o->auto_left--;
	if (k < AUTO_TRIES) {
		o->cpu_fraction = o->auto_f[k];
		return;
	}
	for (unsigned i = 1; i < AUTO_TRIES; i++)
		if (o->auto_t[i] < o->auto_t[best])
			best = i;
	o->cpu_fraction = o->auto_f[best];
	TIER_INFO(TIER_SS_OPTIM, "optimizer: auto split picked a CPU share of %.3f (steps of %.4f s at %.3f, %.4f s at 1, %.4f s at 0)",
		  o->cpu_fraction, o->auto_t[0], o->auto_f[0], o->auto_t[1], o->auto_t[2]);
}

/*
 * Before a step that completes the pending one runs: its gradients must be
 * the pending step's (each parameter's sum of squares, which is computed
 * the same way to the bit for the same gradient, equal to the one
 * recorded).  0, or the step abandoned and -EINVAL naming the first that
 * differs.
 */
static int pending_check(struct tier_optim *o)
{
	uint32_t left = 0;

	for (size_t i = 0; i < o->nact; i++)
		left += !o->shards[o->act[i]]->updated;
	for (uint32_t i = 0; i < o->nparams; i++) {
		const struct param *pp = &o->params[i];

		if (pp->pushed == pp->pend_pushed &&
		    (!pp->pushed || (pp->sumsq == pp->pend_sumsq && !pp->nonfinite)))
			continue;
		optim_abandon(o); /* before the detail: it clears the last error */
		if (pp->pushed != pp->pend_pushed)
			return ts_err(-EINVAL, "optimizer: step %" PRIu64 " failed part way (%u of %zu shards not updated) and must be completed before another step: call it again with the same gradients; parameter '%s' %s a gradient in step %" PRIu64 " and %s now; the step is abandoned and no state changed",
					o->applied + 1, left, (size_t)o->nact, pp->name,
					pp->pend_pushed ? "had" : "had no", o->applied + 1,
					pp->pushed ? "has one" : "has none");
		return ts_err(-EINVAL, "optimizer: step %" PRIu64 " failed part way (%u of %zu shards not updated) and must be completed before another step: call it again with the same gradients; parameter '%s' has another gradient (sum of squares %.17g, step %" PRIu64 "'s %.17g); the step is abandoned and no state changed",
				o->applied + 1, left, (size_t)o->nact, pp->name, pp->sumsq,
				o->applied + 1, pp->pend_sumsq);
	}
	return 0;
}

/* Runs both lanes over this step's items and waits for them. */
void optim_run_lanes(struct tier_optim *o)
{
	bool gpu_items = false;

	for (size_t i = 0; i < o->nact; i++)
		gpu_items |= o->lanes[i] != 0;
	if (gpu_items) {
		pthread_mutex_lock(&o->lock);
		o->go++;
		pthread_cond_broadcast(&o->cond);
		pthread_mutex_unlock(&o->lock);
	}
	run_cpu_lane(o);
	if (gpu_items) {
		pthread_mutex_lock(&o->lock);
		while (o->done != o->go) {
			if (!o->ag_on) {
				pthread_cond_wait(&o->cond, &o->lock);
				continue;
			}
			/* partitioned: the GPU lane's shards' all-gathers go out
			 * from here as they complete */
			struct timespec ts = ts_abstime_in(1000000);

			(void)pthread_cond_timedwait(&o->cond, &o->lock, &ts);
			pthread_mutex_unlock(&o->lock);
			zero_gather_progress(o);
			pthread_mutex_lock(&o->lock);
		}
		pthread_mutex_unlock(&o->lock);
	}
	la_finish(&o->la);
	o->in_step = false;
}

/*
 * After the lanes: the step is complete (0), or it failed part way.  A
 * fill that failed leaves it pending (its shards updated so far marked, the
 * step count and the order where they were); a failed update, which may
 * have left a shard half updated, refuses later steps.
 */
int optim_step_outcome(struct tier_optim *o, struct tier_step_result *res)
{
	bool retry = o->pending;
	uint32_t done = 0;
	unsigned l;

	for (l = 0; l < LA_LANES && !o->lane[l].rc; l++)
		;
	if (l == LA_LANES) {
		for (uint32_t i = 0; i < o->nparams; i++)
			o->params[i].step += o->params[i].pushed;
		o->applied++;
		o->ran++;
		o->pending = false;
		if (retry)
			o->synced = false; /* the store's schedule cursor saw part of a step */
		optim_fill_result(o, res, true, o->pend_norm, o->pend_scale, o->pend_clip);
		trace_span(o->trace, TRACE_STEP, 0, atomic_load(&o->begun), o->t0, ts_now_ns(), 0);
		if (!retry)
			auto_adjust(o);
		return 0;
	}
	optim_fill_result(o, res, false, o->pend_norm, o->pend_scale, o->pend_clip);
	trace_span(o->trace, TRACE_STEP, 0, atomic_load(&o->begun), o->t0, ts_now_ns(), 0);
	o->synced = false;
	for (size_t i = 0; i < o->nact; i++)
		done += o->shards[o->act[i]]->updated;
	if (o->lane[0].fatal || o->lane[1].fatal) {
		l = o->lane[0].fatal ? 0 : 1;
		o->failed = o->lane[l].rc;
		snprintf(o->failed_msg, sizeof(o->failed_msg), "step %" PRIu64 ", %s lane: %s",
			 o->applied + 1, l ? "GPU" : "CPU", o->lane[l].err);
		return ts_err(o->failed, "optimizer: %s (%u of %zu shards are updated, the rest are not; later steps are refused: restore a checkpoint)",
				o->failed_msg, done, (size_t)o->nact);
	}
	o->pending = true;
	return ts_err(o->lane[l].rc, "optimizer: step %" PRIu64 ", %s lane: %s (%u of %zu shards are updated, the rest are not: call the step again with the same gradients to complete it)",
			o->applied + 1, l ? "GPU" : "CPU", o->lane[l].err, done, (size_t)o->nact);
}

/* The step's decisions from its gradients (norm, skip, clip, the update);
 * true when it is skipped (an inf or nan). */
bool optim_step_decide(struct tier_optim *o, double total, bool nonfinite)
{
	double scale = o->p.dynamic_loss_scale ? o->scaler.scale : o->p.loss_scale;
	double norm = sqrt(total) / scale, clip = 1.0;
	bool skip = nonfinite;

	if (o->p.dynamic_loss_scale)
		skip = tier_loss_scaler_update(&o->scaler, nonfinite);
	o->pend_norm = norm;
	o->pend_scale = scale;
	if (skip || nonfinite)
		return true;
	if (o->p.max_grad_norm > 0)
		clip = tier_clip_coef(norm, o->p.max_grad_norm);
	o->pend_clip = clip;
	/* the step's scale; each parameter's group and count join it in
	 * update_item */
	o->ap = (struct tier_adam_params){ .size = sizeof(struct tier_adam_params),
		.grad_scale = clip / scale,
	};
	for (uint32_t i = 0; i < o->nparams; i++) {
		o->params[i].pend_pushed = o->params[i].pushed;
		o->params[i].pend_sumsq = o->params[i].sumsq;
	}
	return false;
}

int tier_optim_end(struct tier_optim *o, struct tier_step_result *res)
{
	OPTIM_ARG(o);
	struct tier_step_result dummy;
	double total = 0;
	bool nonfinite = false;
	uint32_t pushed = 0;
	int rc;

	if (!res)
		res = &dummy;
	if (!o)
		return ts_err(-EINVAL, "tier_optim_end: no optimizer");
	if (!o->in_step)
		return ts_err(-EINVAL, "optimizer: end without a step begun");
	if (o->comm)
		return zero_end(o, res);
	for (uint32_t i = 0; i < o->nparams; i++) {
		if (!o->params[i].pushed)
			continue;
		pushed++;
		total += o->params[i].sumsq;
		nonfinite |= o->params[i].nonfinite;
	}
	if (o->pending && (rc = pending_check(o)))
		return rc;
	if (!pushed) {
		/* torch's step with every grad None: nothing changes */
		optim_abandon(o);
		optim_fill_result(o, res, false, 0.0, o->p.dynamic_loss_scale ? o->scaler.scale : o->p.loss_scale, 1.0);
		return 0;
	}
	if (!o->pending && optim_step_decide(o, total, nonfinite)) {
		optim_abandon(o);
		optim_fill_result(o, res, false, o->pend_norm, o->pend_scale, 1.0);
		trace_span(o->trace, TRACE_STEP, 0, atomic_load(&o->begun), o->t0, ts_now_ns(), 0);
		TIER_INFO(TIER_SS_OPTIM, "optimizer: step skipped: a gradient holds an inf or nan (loss scale %g, next %g)",
			  o->pend_scale, res->next_loss_scale);
		return 0;
	}
	optim_run_lanes(o);
	rc = optim_step_outcome(o, res);
	{
		char detail[TIER_ERR_MAX];
		int wrc = wb_take_error(o->wb, detail, sizeof(detail));

		if (wrc && !rc)
			TIER_WARN(TIER_SS_OPTIM, "optimizer: a write-back failed, its bytes stay dirty in memory: %s",
				  detail);
	}
	return rc;
}

int tier_optim_step(struct tier_optim *o, double lr, const struct tier_tensor *grads,
		    const struct tier_tensor *outs, struct tier_step_result *res)
{
	OPTIM_ARG(o);
	TS_NONNULL(grads);
	int rc;

	if ((rc = tier_optim_begin(o, lr)))
		return rc;
	for (uint32_t i = 0; i < o->nparams; i++) {
		if (!grads[i].ptr)
			continue; /* no gradient this step */
		if ((rc = tier_optim_push(o, i, &grads[i], outs ? &outs[i] : NULL))) {
			char msg[TIER_ERR_MAX];

			snprintf(msg, sizeof(msg), "%s", tier_last_error());
			optim_abandon(o);
			return ts_err(rc, "%s", msg);
		}
	}
	return tier_optim_end(o, res);
}
