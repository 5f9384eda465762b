/*
 * optim.c - the optimizer (tier_optim_* in tierstore.h; docs/optimizer.md):
 * parameters cut into shards whose state lives on the store, and the step
 * that streams them through the tiers.  This file owns its lifetime
 * (creation, destroy), what the live view shows and tier_optim_info;
 * optim_param.c the parameters and groups (added, removed, read back);
 * optim_step.c the step and the lanes' updates; optim_impl.h what they
 * share.
 *
 * A shard's object holds, for n elements: n fp32 master weights, then n
 * exp_avg, then n exp_avg_sq in the moment dtype.  The shard size is
 * rounded down to a multiple of 64 elements, so every part starts 64-byte
 * aligned within the object.
 *
 * A step: begin() builds the step's items (prefetch/schedule.h: order and
 * lane split) and starts the lookahead window (prefetch/lookahead.h), so
 * state moves up while the trainer is still pushing gradients; push()
 * takes each gradient's sum of squares at once; end() forms the global
 * norm (clipping, loss scaling; a nonfinite gradient skips the step), then
 * the CPU lane runs in the calling thread, over the thread pool, while the
 * GPU lane runs on the optimizer's own thread (the CUDA kernel on a
 * stream, or with the emulated "host" HBM backend the CPU kernel on that
 * thread alone).  Each updated shard is released dirty and, unless it is
 * among the last the next step will find resident, queued for write-behind
 * (prefetch/writebehind.h).
 *
 * Threads: one thread drives the optimizer (the API calls); the GPU lane
 * thread touches only the step's items, the lane results and what it is
 * handed under o->lock.  The store's event hook (the trace) runs under the
 * store's lock and touches only the shards' timestamps.
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

/* The bytes of every shard's state. */
uint64_t optim_state_bytes(const struct tier_optim *o)
{
	return o->state_bytes;
}

uint64_t optim_shards_bytes(const struct tier_optim *o, uint32_t first, uint32_t n)
{
	uint64_t sum = 0;

	for (uint32_t i = first; i < first + n; i++)
		sum += o->shards[i]->bytes;
	return sum;
}

/*
 * What the live view shows of this optimizer (tier_live_optim): after a
 * step (@res), or with @res NULL when the parameters changed (create,
 * add_param), the only times the shape of the state does.
 */
void optim_feed_update(struct tier_optim *o, const struct tier_step_result *res)
{
	struct live_feed *f = o->feed;

	if (!f || atomic_load_explicit(&f->owner, memory_order_relaxed) != (uintptr_t)o)
		return;
	if (!res) {
		atomic_store_explicit(&f->optim.params, o->nparams, memory_order_relaxed);
		atomic_store_explicit(&f->optim.shards, o->nshards, memory_order_relaxed);
		atomic_store_explicit(&f->optim.state_bytes, optim_state_bytes(o), memory_order_relaxed);
	}
	atomic_store_explicit(&f->optim.step, o->applied, memory_order_relaxed);
	atomic_store_explicit(&f->prefetch.window_bytes, o->lookahead, memory_order_relaxed);
	live_set_double(&f->optim.offload_fraction, o->cpu_fraction);
	live_set_double(&f->optim.loss_scale, o->p.dynamic_loss_scale ? o->scaler.scale : o->p.loss_scale);
	if (res) {
		if (!res->applied)
			atomic_fetch_add_explicit(&f->optim.skipped, 1, memory_order_relaxed);
		atomic_store_explicit(&f->optim.last_step_ns, (uint64_t)(res->step_s * 1e9),
				      memory_order_relaxed);
		atomic_store_explicit(&f->optim.last_stall_ns, (uint64_t)(res->stall_s * 1e9),
				      memory_order_relaxed);
		live_set_double(&f->optim.grad_norm, res->grad_norm);
	}
	atomic_store_explicit(&f->optim.present, 1, memory_order_relaxed);
}

/* ------------------------------------------------------------ params */


int optim_check_group(const char *what, const struct tier_group_params *g)
{
	if (!(g->lr >= 0) || !isfinite(g->lr))
		return ts_err(-EINVAL, "%s: lr %g (must be a finite number >= 0)", what, g->lr);
	if (!(g->beta1 >= 0 && g->beta1 < 1) || !(g->beta2 >= 0 && g->beta2 < 1))
		return ts_err(-EINVAL, "%s: betas (%g, %g) (each in [0, 1))", what, g->beta1,
				g->beta2);
	if (!(g->eps > 0) || !isfinite(g->eps))
		return ts_err(-EINVAL, "%s: eps %g (must be > 0)", what, g->eps);
	if (!(g->weight_decay >= 0) || !isfinite(g->weight_decay))
		return ts_err(-EINVAL, "%s: weight_decay %g (must be >= 0)", what,
				g->weight_decay);
	return 0;
}

/* Group 0's hyperparameters in @p. */
static void group_of(const struct tier_optim_params *p, struct tier_group_params *g)
{
	tier_group_params_init(g);
	g->lr = p->lr;
	g->beta1 = p->beta1;
	g->beta2 = p->beta2;
	g->eps = p->eps;
	g->weight_decay = p->weight_decay;
	g->decoupled = p->decoupled;
}

static int check_params(const struct tier_optim_params *p)
{
	struct tier_group_params g;
	int rc;

	if (ts_params_size("optimizer: struct tier_optim_params", p->size, sizeof(*p)))
		return -EINVAL;
	group_of(p, &g);
	if ((rc = optim_check_group("optimizer", &g)))
		return rc;
	if (p->moment_dtype != TIER_DTYPE_MANIFEST && p->moment_dtype != TIER_FP32 &&
	    p->moment_dtype != TIER_BF16 && p->moment_dtype != TIER_Q8)
		return ts_err(-EINVAL, "optimizer: moment_dtype %d (TIER_FP32, TIER_BF16, TIER_Q8 or TIER_DTYPE_MANIFEST)",
				p->moment_dtype);
	if (p->rounding != TIER_ROUND_MANIFEST && p->rounding != TIER_ROUND_NEAREST &&
	    p->rounding != TIER_ROUND_STOCHASTIC)
		return ts_err(-EINVAL, "optimizer: rounding %d (TIER_ROUND_NEAREST, TIER_ROUND_STOCHASTIC or TIER_ROUND_MANIFEST)",
				p->rounding);
	if (p->out_rounding != TIER_ROUND_MANIFEST && p->out_rounding != TIER_ROUND_NEAREST &&
	    p->out_rounding != TIER_ROUND_STOCHASTIC)
		return ts_err(-EINVAL, "optimizer: out_rounding %d (TIER_ROUND_NEAREST, TIER_ROUND_STOCHASTIC or TIER_ROUND_MANIFEST)",
				p->out_rounding);
	if (p->offload_fraction != TIER_OFFLOAD_MANIFEST && p->offload_fraction != TIER_OFFLOAD_AUTO &&
	    !(p->offload_fraction >= 0 && p->offload_fraction <= 1))
		return ts_err(-EINVAL, "optimizer: offload_fraction %g (in [0, 1], TIER_OFFLOAD_AUTO or TIER_OFFLOAD_MANIFEST)",
				p->offload_fraction);
	if (!(p->max_grad_norm >= 0) || !isfinite(p->max_grad_norm))
		return ts_err(-EINVAL, "optimizer: max_grad_norm %g (0 for none, or > 0)",
				p->max_grad_norm);
	if (!(p->loss_scale > 0) || !isfinite(p->loss_scale))
		return ts_err(-EINVAL, "optimizer: loss_scale %g (must be > 0; 1 = none)",
				p->loss_scale);
	if (p->threads > TIER_POOL_MAX_THREADS)
		return ts_err(-EINVAL, "optimizer: threads %u (0 for TIER_THREADS or one per CPU, at most %u)",
				p->threads, (unsigned)TIER_POOL_MAX_THREADS);
	if (p->shard_size && (p->shard_size % 4096 || p->shard_size < (64u << 10) ||
			      p->shard_size > (4ull << 30)))
		return ts_err(-EINVAL, "optimizer: shard_size %" PRIu64 " (a multiple of 4 KiB, 64 KiB - 4 GiB; 0 for the manifest's)",
				p->shard_size);
	return 0;
}

/* ------------------------------------------------------------ the trace */

static void hook(void *arg, enum store_event ev, enum tier_level l, const struct tier_obj *obj)
{
	struct tier_optim *o = arg;
	struct shard *sh = store_obj_user(obj);
	uint64_t now;

	if (!sh || sh->o != o)
		return;
	now = ts_now_ns();
	switch (ev) {
	case STORE_EV_FILL_START:
		sh->fill_ns[l] = now;
		break;
	case STORE_EV_FILL_DONE:
		trace_span(o->trace, l == TIER_DRAM ? TRACE_NVME_READ : TRACE_H2D, sh->index,
			   atomic_load(&o->begun), sh->fill_ns[l], now, sh->bytes);
		break;
	case STORE_EV_FLUSH_START:
		sh->flush_ns[l] = now;
		break;
	case STORE_EV_FLUSH_DONE:
		trace_span(o->trace, l == TIER_DRAM ? TRACE_NVME_WRITE : TRACE_D2H, sh->index,
			   atomic_load(&o->begun), sh->flush_ns[l], now, sh->bytes);
		break;
	default:
		break;
	}
}

/* ------------------------------------------------------------ create */

/*
 * TIER_TRACE's path with each "${RANK}" replaced by this rank (the comm's,
 * else the launcher's environment's, else 0), so the ranks of a job write
 * a file each.
 */
static int trace_path(const struct tier_optim *o, const char *in, char *out, size_t len)
{
	static const char var[] = "${RANK}";
	struct tier_rank r;
	int rank = o->rank;
	size_t at = 0;

	if (!o->comm && tier_rank_from_env(&r) == 0)
		rank = r.rank;
	while (*in) {
		int n;

		if (strncmp(in, var, sizeof(var) - 1) == 0) {
			n = snprintf(out + at, len - at, "%d", rank);
			in += sizeof(var) - 1;
		} else {
			n = snprintf(out + at, len - at, "%c", *in++);
		}
		if (n < 0 || (size_t)n >= len - at)
			return ts_err(-ENAMETOOLONG, "TIER_TRACE: the path is longer than %zu bytes", len - 1);
		at += (size_t)n;
	}
	out[at] = '\0';
	return 0;
}

static int open_gpu_lane(struct tier_optim *o)
{
	size_t bytes = o->shard_elems * 4;
	int rc;

	o->dev_host = (o->hbm_caps & HBM_CAP_HOST_READABLE) != 0;
	o->gpu = rstore_manifest(o->s)->tiers.gpu;
	if (!o->dev_host) {
		if ((rc = ts_cuda_stream_open(o->gpu, &o->stream)))
			return rc;
		/* the CPU lane's staging of device buffers: pinned, so its
		 * copies are DMA at the link's rate */
		if ((rc = ts_cuda_host_alloc(bytes, &o->host_grad)) ||
		    (rc = ts_cuda_host_alloc(bytes, &o->host_out)))
			return rc;
	}
	if ((rc = gpu_lane_open(o, bytes)))
		return rc;
	rc = ts_fault_check(TIER_FAULT_THREAD_CREATE);
	if (!rc)
		rc = -pthread_create(&o->thread, NULL, optim_gpu_main, o);
	if (rc)
		return ts_err(rc, "optimizer: creating the GPU lane's thread: %s", tier_strerror(rc));
	o->thread_started = true;
	return 0;
}

static void optim_free(struct tier_optim *o)
{
	if (o->thread_started) {
		pthread_mutex_lock(&o->lock);
		o->quit = true;
		pthread_cond_broadcast(&o->cond);
		pthread_mutex_unlock(&o->lock);
		pthread_join(o->thread, NULL);
	}
	if (o->trace)
		store_set_hook(o->s, NULL, NULL);
	wb_destroy(o->wb);
	for (uint32_t i = 0; i < o->nshards; i++) {
		if (o->shards[i]->obj) {
			store_obj_set_user(o->shards[i]->obj, NULL);
			(void)tier_obj_destroy(o->s, o->shards[i]->obj);
		}
		free(o->shards[i]);
	}
	free(o->shards);
	for (uint32_t i = 0; i < o->nparams; i++) {
		zero_param_free(o, &o->params[i]);
		free(o->params[i].name);
	}
	free(o->params);
	ts_names_free(&o->pnames);
	free(o->groups);
	free(o->act);
	free(o->items);
	free(o->lanes);
	free(o->order);
	if (o->pool)
		tier_pool_destroy(o->pool);
	ts_cuda_free(o->xdev);
	gpu_lane_close(o);
	ts_cuda_stream_close(o->stream);
	ts_cuda_host_free(o->host_grad);
	ts_cuda_host_free(o->host_out);
	pthread_mutex_destroy(&o->lock);
	pthread_cond_destroy(&o->cond);
	rstore_drop(o->s); /* last: the store may close once it is done with */
	o->magic = TS_MAGIC_DEAD;
	free(o);
}

int tier_optim_create(struct tier_store *s, const struct tier_optim_params *p,
		      struct tier_optim **out)
{
	TS_NONNULL(s);
	TS_NONNULL(out);
	const void *rec;
	size_t len;

	*out = NULL;
	if (tier_store_home(s) == TIER_NVME && tier_store_record(s, &rec, &len) == 0 &&
	    optim_record_is(rec, len))
		return ts_err(-EEXIST, "tier_optim_create: the store holds a checkpointed optimizer (its last commit); resume it with tier_optim_resume, or roll back or remove the files for a new one");
	return optim_create(s, p, 0, out);
}

int optim_create(struct tier_store *s, const struct tier_optim_params *p, size_t shard_elems,
		 struct tier_optim **out)
{
	const struct tier_manifest *cfg;
	struct tier_optim_params defaults;
	struct tier_store_stats st;
	struct tier_optim *o;
	uint64_t shard_size, shard_bytes;
	double f;
	bool have_hbm;
	int rc;

	if (!out)
		return ts_err(-EINVAL, "tier_optim_create: no result pointer");
	*out = NULL;
	if (!s)
		return ts_err(-EINVAL, "tier_optim_create: no store");
	if (!p) {
		tier_optim_params_init(&defaults);
		p = &defaults;
	}
	if ((rc = check_params(p)))
		return rc;
	if (!(cfg = rstore_manifest(s)))
		return ts_err(-EINVAL, "tier_optim_create: the store was not opened by tier_store_open");
	if (!(o = ts_calloc(1, sizeof(*o))))
		return ts_err(-ENOMEM, "optimizer: out of memory");
	o->magic = OPTIM_MAGIC;
	ts_names_init(&o->pnames, optim_param_key, o);
	pthread_mutex_init(&o->lock, NULL);
	pthread_cond_init(&o->cond, NULL);
	o->s = s;
	rstore_hold(s); /* optim_free drops it */
	o->p = *p;
	o->world = 1;
	if ((rc = zero_setup(o, p->comm)))
		goto fail;
	{
		struct tier_group_params g0;

		group_of(p, &g0);
		if ((rc = optim_push_group(o, &g0)))
			goto fail;
	}
	o->md = p->moment_dtype == TIER_DTYPE_MANIFEST ? cfg->moment_dtype : (enum tier_dtype)p->moment_dtype;
	if (o->md != TIER_FP32 && o->md != TIER_BF16 && o->md != TIER_Q8) {
		rc = ts_err(-EINVAL, "optimizer: moment dtype %d from the manifest", (int)o->md);
		goto fail;
	}
	o->mb = o->md == TIER_Q8 ? 1 : tier_dtype_size(o->md);
	o->rounding = p->rounding == TIER_ROUND_MANIFEST ? cfg->rounding : p->rounding;
	o->out_rounding = p->out_rounding == TIER_ROUND_MANIFEST ? cfg->out_rounding : p->out_rounding;
	o->seed = p->seed == TIER_SEED_MANIFEST ? cfg->seed : p->seed;
	tier_store_get_stats(s, &st);
	have_hbm = st.level[TIER_HBM].present;
	o->home_nvme = tier_store_home(s) == TIER_NVME;
	o->dram_cap = st.level[TIER_DRAM].capacity;
	o->hbm_cap = have_hbm ? st.level[TIER_HBM].capacity : 0;
	/* A shard size nobody wrote follows the store's own DRAM tier, which
	 * tier_store_params may have made another size than the manifest's. */
	shard_size = p->shard_size ? p->shard_size
		     : cfg->shard_derived ? la_shard_default(o->dram_cap) : cfg->shard_size;
	o->shard_elems = shard_elems ? shard_elems
			 : state_elems_in(o->md, shard_size, optim_align(o->md));
	shard_bytes = state_bytes_n(o->md, o->shard_elems);
	if (shard_bytes > o->dram_cap / 4) {
		rc = ts_err(-EINVAL, "optimizer: shards of %" PRIu64 " bytes do not fit four times in the DRAM tier (%" PRIu64 " bytes); use a smaller shard_size",
			      shard_bytes, o->dram_cap);
		goto fail;
	}
	o->lookahead = la_window(cfg->lookahead, cfg->tiers.dram_capacity, o->dram_cap, shard_bytes);
	o->hbm_budget = o->hbm_cap / 2;
	o->shard_bytes = shard_bytes;

	/* The split. */
	f = p->offload_fraction;
	if (f == TIER_OFFLOAD_MANIFEST)
		f = cfg->offload_auto ? TIER_OFFLOAD_AUTO : cfg->offload_fraction;
	if (!have_hbm || o->hbm_cap < shard_bytes) {
		if (f != 1.0)
			TIER_INFO(TIER_SS_OPTIM, "optimizer: offload fraction %g, but every shard is updated on the CPU (%s)",
				  f, have_hbm ? "the HBM tier is smaller than a shard" : "no HBM tier");
		f = 1.0;
		have_hbm = false;
	}
	o->auto_split = f == TIER_OFFLOAD_AUTO;
	o->auto_left = o->auto_split ? AUTO_STEPS : 0;
	o->cpu_fraction = o->auto_split ? 0.5 : f;

	if (p->dynamic_loss_scale) {
		if ((rc = tier_loss_scaler_init(&o->scaler, p->loss_scale, p->min_loss_scale,
						p->growth_factor, p->backoff_factor,
						p->growth_interval, p->hysteresis)))
			goto fail;
	}
	if ((rc = tier_pool_create(p->threads, &o->pool)))
		goto fail;
	o->write_behind = cfg->write_behind;
	if ((rc = wb_create(s, o->write_behind, &o->wb)))
		goto fail;
	if (have_hbm) {
		o->hbm_caps = store_hbm_caps(s);
		if ((rc = open_gpu_lane(o)))
			goto fail;
	}
	if (*ts_opt_str(TIER_OPT_TRACE)) {
		char path[4096];

		if ((rc = trace_path(o, ts_opt_str(TIER_OPT_TRACE), path, sizeof(path))) ||
		    (rc = trace_open(path, 0, &o->trace)))
			goto fail;
		store_set_hook(s, hook, o);
	}
	TIER_INFO(TIER_SS_OPTIM, "optimizer: shards of %zu elements (%" PRIu64 " bytes), moments %s, lookahead %" PRIu64 " bytes, cpu share %s%g",
		  o->shard_elems, shard_bytes, o->md == TIER_BF16 ? "bf16" : "fp32", o->lookahead,
		  o->auto_split ? "auto, from " : "", o->cpu_fraction);
	o->feed = live_feed(s);
	if (o->feed) {
		atomic_store_explicit(&o->feed->owner, (uintptr_t)o, memory_order_relaxed);
		atomic_store_explicit(&o->feed->optim.skipped, 0, memory_order_relaxed);
		atomic_store_explicit(&o->feed->prefetch.stall_ns, 0, memory_order_relaxed);
		atomic_store_explicit(&o->feed->optim.last_step_ns, 0, memory_order_relaxed);
		atomic_store_explicit(&o->feed->optim.last_stall_ns, 0, memory_order_relaxed);
		live_set_double(&o->feed->optim.grad_norm, 0.0);
		optim_feed_update(o, NULL);
	}
	*out = o;
	return 0;
fail:
	optim_free(o);
	return rc;
}

uint32_t tier_optim_nparams(const struct tier_optim *o)
{
	OPTIM_ARG_OR(o, 0);
	return o ? o->nparams : 0;
}

int tier_optim_info(const struct tier_optim *o, struct tier_optim_info *out)
{
	OPTIM_ARG(o);
	TS_NONNULL(out);
	memset(out, 0, sizeof(*out));
	out->moment_dtype = o->md;
	out->bytes_per_elem = (uint32_t)(4 + 2 * o->mb);
	out->block_bytes = o->md == TIER_Q8 ? 8 : 0;
	out->shard_elems = o->shard_elems;
	out->shard_bytes = o->shard_bytes;
	out->window_bytes = o->lookahead;
	out->hbm_budget = o->hbm_caps ? o->hbm_budget : 0;
	out->write_behind = o->write_behind;
	out->threads = tier_pool_size(o->pool);
	out->offload_fraction = o->cpu_fraction;
	out->auto_split = o->auto_split;
	out->gpu_lane = o->hbm_caps != 0;
	out->nparams = o->nparams;
	out->nshards = o->nshards;
	out->state_bytes = optim_state_bytes(o);
	out->rank = o->rank;
	out->world = o->world;
	out->rounding = o->rounding;
	out->out_rounding = o->out_rounding;
	out->seed = o->seed;
	for (uint32_t i = 0; i < o->nparams; i++) {
		out->part_elems += o->params[i].pn;
		out->total_elems += o->params[i].numel;
	}
	return 0;
}

int tier_optim_destroy(struct tier_optim *o)
{
	char detail[TIER_ERR_MAX];
	int rc, rc2;

	if (!o)
		return 0;
	OPTIM_ARG(o); /* destroyed twice: refused while its memory is still there */
	if (o->in_step)
		optim_abandon(o);
	wb_drain(o->wb);
	rc = wb_take_error(o->wb, detail, sizeof(detail));
	if (rc)
		ts_err(rc, "optimizer: a write-back failed: %s", detail);
	if (o->trace)
		store_set_hook(o->s, NULL, NULL);
	if (o->feed && atomic_load_explicit(&o->feed->owner, memory_order_relaxed) == (uintptr_t)o) {
		atomic_store_explicit(&o->feed->optim.present, 0, memory_order_relaxed);
		atomic_store_explicit(&o->feed->owner, 0, memory_order_relaxed);
	}
	rc2 = trace_close(o->trace);
	o->trace = NULL;
	optim_free(o);
	return rc ? rc : rc2;
}
