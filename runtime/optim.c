/*
 * optim.c - the optimizer (tier_optim_* in tierstore.h; docs/optimizer.md):
 * parameters cut into shards whose state lives on the store, and the step
 * that streams them through the tiers.
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
#include "common/nodecfg.h"
#include "common/options.h"
#include "common/units.h"
#include "kernels/adamw_cuda.h"
#include "prefetch/lookahead.h"
#include "prefetch/schedule.h"
#include "prefetch/writebehind.h"
#include "runtime/live.h"
#include "runtime/trace.h"
#include "tiers/hbm.h"
#include "tiers/store.h"

#define SHARD_ALIGN 64 /* elements */
#define AUTO_STEPS 3   /* steps that measure the lanes' rates under "auto" */

struct shard {
	struct tier_optim *o;
	uint32_t param, index;   /* owning parameter; index among all shards */
	struct tier_obj *obj;
	size_t off, n;           /* elements [off, off + n) of the parameter */
	uint64_t bytes;
	uint64_t after;          /* this step: bytes of items after it */
	/* the store's event hook (store lock held) */
	uint64_t fill_ns[TIER_LEVELS], flush_ns[TIER_LEVELS];
};

struct param {
	char *name;
	size_t numel;
	uint32_t first, nshards;
	/* this step */
	bool pushed;
	struct tier_tensor grad, out;
	double sumsq;
	bool nonfinite;
};

struct lane {
	int rc;
	char err[TIER_ERR_MAX];
	uint64_t stall_ns, busy_ns, bytes;
	uint32_t shards;
};

struct tier_optim {
	struct tier_store *s;
	struct tier_optim_params p;
	enum tier_dtype md;
	size_t mb;               /* bytes per moment element */
	size_t shard_elems;
	uint64_t dram_cap, hbm_cap, lookahead, hbm_budget, keep, shard_bytes;
	bool home_nvme;

	struct param *params;
	uint32_t nparams, params_cap;
	struct shard **shards;
	uint32_t nshards, shards_cap;

	double cpu_fraction;
	bool auto_split;
	unsigned auto_left;
	struct tier_pool *pool;
	struct tier_loss_scaler scaler;
	double lr;
	uint64_t applied;        /* steps applied: the bias-correction count */
	uint64_t ran;            /* steps that ran to their end: the order's parity */
	_Atomic uint64_t begun;  /* for the trace */
	bool synced;             /* the store's schedule matches the next step */
	int failed;              /* a step failed part way: later steps refused */
	char failed_msg[TIER_ERR_MAX + 64];

	/* the step in progress */
	bool in_step;
	uint64_t t0;
	struct la_item *items;
	unsigned char *lanes;
	uint32_t *order;
	size_t nitems;
	struct lookahead la;
	struct tier_store_stats st0;
	struct tier_adam_params ap;

	/* the GPU lane */
	const struct hbm_ops *hops;
	bool dev_host;           /* the HBM tier's memory is host memory (emulated) */
	int gpu;
	void *stream;            /* CUDA: the update's stream */
	void *dev_grad, *dev_out;/* CUDA: staging for host buffers, one shard each */
	void *host_grad, *host_out; /* staging for device buffers on the CPU lane */
	pthread_t thread;
	bool thread_started, quit;
	pthread_mutex_t lock;
	pthread_cond_t cond;
	uint64_t go, done;       /* GPU lane generations */
	struct lane lane[LA_LANES];

	struct wb *wb;
	struct trace *trace;
	struct live_feed *feed;  /* the store's live view, or NULL */
};

/* The bytes of every shard's state. */
static uint64_t state_bytes(const struct tier_optim *o)
{
	uint64_t sum = 0;

	for (uint32_t i = 0; i < o->nshards; i++)
		sum += o->shards[i]->bytes;
	return sum;
}

/*
 * What the live view shows of this optimizer (tier_live_optim): after a
 * step (@res), or with @res NULL when the parameters changed (create,
 * add_param), the only times the shape of the state does.
 */
static void feed_update(struct tier_optim *o, const struct tier_step_result *res)
{
	struct live_feed *f = o->feed;

	if (!f || atomic_load_explicit(&f->owner, memory_order_relaxed) != (uintptr_t)o)
		return;
	if (!res) {
		atomic_store_explicit(&f->params, o->nparams, memory_order_relaxed);
		atomic_store_explicit(&f->shards, o->nshards, memory_order_relaxed);
		atomic_store_explicit(&f->state_bytes, state_bytes(o), memory_order_relaxed);
	}
	atomic_store_explicit(&f->step, o->applied, memory_order_relaxed);
	atomic_store_explicit(&f->pf_window, o->lookahead, memory_order_relaxed);
	live_set_double(&f->cpu_fraction, o->cpu_fraction);
	live_set_double(&f->loss_scale, o->p.dynamic_loss_scale ? o->scaler.scale : o->p.loss_scale);
	if (res) {
		if (!res->applied)
			atomic_fetch_add_explicit(&f->skipped, 1, memory_order_relaxed);
		atomic_store_explicit(&f->last_step_ns, (uint64_t)(res->step_s * 1e9),
				      memory_order_relaxed);
		atomic_store_explicit(&f->last_stall_ns, (uint64_t)(res->stall_s * 1e9),
				      memory_order_relaxed);
		live_set_double(&f->grad_norm, res->grad_norm);
	}
	atomic_store_explicit(&f->optim_present, 1, memory_order_relaxed);
}

static size_t dtype_size(enum tier_dtype d)
{
	return d == TIER_FP32 ? 4 : 2;
}

static bool dtype_ok(int d)
{
	return d == TIER_FP32 || d == TIER_BF16 || d == TIER_FP16;
}

/* ------------------------------------------------------------ params */

void tier_optim_params_init(struct tier_optim_params *p)
{
	memset(p, 0, sizeof(*p));
	p->lr = 1e-3;
	p->beta1 = 0.9;
	p->beta2 = 0.999;
	p->eps = 1e-8;
	p->weight_decay = 0.01;
	p->decoupled = true;
	p->moment_dtype = -1;
	p->offload_fraction = (double)NAN;
	p->max_grad_norm = 0;
	p->loss_scale = 1.0;
	p->dynamic_loss_scale = false;
	p->min_loss_scale = 1.0;
	p->growth_factor = 2.0;
	p->backoff_factor = 0.5;
	p->growth_interval = 1000;
	p->hysteresis = 2;
}

static int check_params(const struct tier_optim_params *p)
{
	if (!(p->lr > 0) || !isfinite(p->lr))
		return ts_err(-EINVAL, "optimizer: lr %g (must be a finite number > 0)", p->lr);
	if (!(p->beta1 >= 0 && p->beta1 < 1) || !(p->beta2 >= 0 && p->beta2 < 1))
		return ts_err(-EINVAL, "optimizer: betas (%g, %g) (each in [0, 1))", p->beta1,
				p->beta2);
	if (!(p->eps > 0) || !isfinite(p->eps))
		return ts_err(-EINVAL, "optimizer: eps %g (must be > 0)", p->eps);
	if (!(p->weight_decay >= 0) || !isfinite(p->weight_decay))
		return ts_err(-EINVAL, "optimizer: weight_decay %g (must be >= 0)",
				p->weight_decay);
	if (p->moment_dtype != -1 && p->moment_dtype != TIER_FP32 && p->moment_dtype != TIER_BF16)
		return ts_err(-EINVAL, "optimizer: moment_dtype %d (TIER_FP32, TIER_BF16 or -1 for the manifest's)",
				p->moment_dtype);
	if (!isnan(p->offload_fraction) && p->offload_fraction != TIER_OFFLOAD_AUTO &&
	    !(p->offload_fraction >= 0 && p->offload_fraction <= 1))
		return ts_err(-EINVAL, "optimizer: offload_fraction %g (in [0, 1], TIER_OFFLOAD_AUTO, or NAN for the manifest's)",
				p->offload_fraction);
	if (!(p->max_grad_norm >= 0) || !isfinite(p->max_grad_norm))
		return ts_err(-EINVAL, "optimizer: max_grad_norm %g (0 for none, or > 0)",
				p->max_grad_norm);
	if (!(p->loss_scale > 0) || !isfinite(p->loss_scale))
		return ts_err(-EINVAL, "optimizer: loss_scale %g (must be > 0; 1 = none)",
				p->loss_scale);
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
	now = tier_now_ns();
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

/* ------------------------------------------------------------ the update */

/* Runs the kernel over one taken item, on @lane. */
static int update_item(struct tier_optim *o, unsigned lane, struct la_item *it)
{
	struct shard *sh = it->user;
	struct param *pp = &o->params[sh->param];
	char *base = it->ptr;
	size_t gsz = dtype_size(pp->grad.dtype), osz = pp->out.ptr ? dtype_size(pp->out.dtype) : 0;
	struct tier_adam_tensors t = {
		.n = sh->n,
		.param = (float *)(void *)base,
		.exp_avg = base + 4 * sh->n,
		.exp_avg_sq = base + (4 + o->mb) * sh->n,
		.moment_dtype = o->md,
		.grad = (const char *)pp->grad.ptr + sh->off * gsz,
		.grad_dtype = pp->grad.dtype,
		.param_out = pp->out.ptr ? (char *)pp->out.ptr + sh->off * osz : NULL,
		.out_dtype = pp->out.ptr ? pp->out.dtype : TIER_FP32,
	};
	void *final_out = t.param_out;
	bool on_device = lane == 1 && !o->dev_host;
	int rc;

	if (!on_device) {
		/* host kernel: device buffers of a real device go through staging */
		bool stage_grad = pp->grad.mem == TIER_MEM_DEVICE && !o->dev_host;
		bool stage_out = t.param_out && pp->out.mem == TIER_MEM_DEVICE && !o->dev_host;

		if (stage_grad) {
			if ((rc = ts_cuda_copy(o->host_grad, t.grad, sh->n * gsz, o->stream)))
				return rc;
			t.grad = o->host_grad;
		}
		if (stage_out)
			t.param_out = o->host_out;
		rc = tier_adam_step(lane == 0 ? o->pool : NULL, &o->ap, &t);
		if (!rc && stage_out)
			rc = ts_cuda_copy(final_out, o->host_out, sh->n * osz, o->stream);
		return rc;
	} else {
		struct adamw_chunk c = {
			.param = t.param, .exp_avg = t.exp_avg, .exp_avg_sq = t.exp_avg_sq,
			.grad = t.grad, .param_out = t.param_out, .n = sh->n,
		};

		if (pp->grad.mem == TIER_MEM_HOST) {
			if ((rc = ts_cuda_copy(o->dev_grad, t.grad, sh->n * gsz, o->stream)))
				return rc;
			c.grad = o->dev_grad;
		}
		if (c.param_out && pp->out.mem == TIER_MEM_HOST)
			c.param_out = o->dev_out;
		rc = adamw_cuda_step(&o->ap, o->md, pp->grad.dtype, t.out_dtype, &c, 1, o->stream);
		if (!rc)
			rc = ts_cuda_stream_sync(o->stream);
		if (!rc && c.param_out && c.param_out != final_out)
			rc = ts_cuda_copy(final_out, o->dev_out, sh->n * osz, o->stream);
		return rc;
	}
}

/* One lane's part of the step: every item of @lane, in order. */
static void run_lane(struct tier_optim *o, unsigned lane)
{
	struct lane *ln = &o->lane[lane];
	uint64_t t0 = tier_now_ns();

	for (;;) {
		struct la_item *it;
		uint64_t stall = 0, u0, u1;
		int rc = la_take(&o->la, lane, &it, &stall);
		struct shard *sh;

		if (rc == 1)
			break;
		ln->stall_ns += stall;
		if (stall && o->feed)
			atomic_fetch_add_explicit(&o->feed->pf_stall_ns, stall, memory_order_relaxed);
		if (rc) {
			snprintf(ln->err, sizeof(ln->err), "%s", tier_last_error());
			ln->rc = rc;
			la_done(&o->la, it, false);
			la_abort(&o->la);
			break;
		}
		sh = it->user;
		u0 = tier_now_ns();
		if (stall)
			trace_span(o->trace, TRACE_STALL, sh->index, atomic_load(&o->begun),
				   u0 - stall, u0, 0);
		rc = update_item(o, lane, it);
		u1 = tier_now_ns();
		trace_span(o->trace, lane ? TRACE_UPDATE_GPU : TRACE_UPDATE_CPU, sh->index,
			   atomic_load(&o->begun), u0, u1, sh->bytes);
		if (rc) {
			snprintf(ln->err, sizeof(ln->err), "'%s': update: %s", tier_obj_name(sh->obj),
				 tier_last_error());
			ln->rc = rc;
			la_done(&o->la, it, false);
			la_abort(&o->la);
			break;
		}
		if ((rc = la_done(&o->la, it, true))) {
			snprintf(ln->err, sizeof(ln->err), "%s", tier_last_error());
			ln->rc = rc;
			la_abort(&o->la);
			break;
		}
		ln->bytes += sh->bytes;
		ln->shards++;
		if (sh->after > o->keep && o->home_nvme)
			(void)wb_push(o->wb, sh->obj); /* -ENOMEM: it goes down on eviction */
	}
	ln->busy_ns = tier_now_ns() - t0;
}

static void *gpu_main(void *arg)
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
		run_lane(o, 1);
		pthread_mutex_lock(&o->lock);
		o->done = seen;
		pthread_cond_broadcast(&o->cond);
	}
	pthread_mutex_unlock(&o->lock);
	return NULL;
}

/* ------------------------------------------------------------ create */

static int open_gpu_lane(struct tier_optim *o)
{
	const struct tier_config *cfg = store_config(o->s);
	size_t bytes = o->shard_elems * 4;
	int rc;

	o->dev_host = (o->hops->caps & HBM_CAP_HOST_READABLE) != 0;
	o->gpu = cfg->gpu;
	if (!o->dev_host) {
		if ((rc = ts_cuda_stream_open(o->gpu, &o->stream)))
			return rc;
		if ((rc = ts_cuda_alloc(bytes, &o->dev_grad)) ||
		    (rc = ts_cuda_alloc(bytes, &o->dev_out)))
			return rc;
		if (!(o->host_grad = ts_malloc(bytes)) || !(o->host_out = ts_malloc(bytes)))
			return ts_err(-ENOMEM, "optimizer: out of memory for staging buffers");
	}
	rc = tier_fault_check(TIER_FAULT_THREAD_CREATE);
	if (!rc)
		rc = -pthread_create(&o->thread, NULL, gpu_main, o);
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
	for (uint32_t i = 0; i < o->nparams; i++)
		free(o->params[i].name);
	free(o->params);
	free(o->items);
	free(o->lanes);
	free(o->order);
	if (o->pool)
		tier_pool_destroy(o->pool);
	ts_cuda_free(o->dev_grad);
	ts_cuda_free(o->dev_out);
	ts_cuda_stream_close(o->stream);
	free(o->host_grad);
	free(o->host_out);
	pthread_mutex_destroy(&o->lock);
	pthread_cond_destroy(&o->cond);
	free(o);
}

int tier_optim_create(struct tier_store *s, const struct tier_optim_params *p,
		      struct tier_optim **out)
{
	const struct tier_config *cfg;
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
	cfg = store_config(s);
	if (!(o = ts_calloc(1, sizeof(*o))))
		return ts_err(-ENOMEM, "optimizer: out of memory");
	pthread_mutex_init(&o->lock, NULL);
	pthread_cond_init(&o->cond, NULL);
	o->s = s;
	o->p = *p;
	o->lr = p->lr;
	o->md = p->moment_dtype == -1 ? cfg->moment_dtype : (enum tier_dtype)p->moment_dtype;
	if (o->md != TIER_FP32 && o->md != TIER_BF16) {
		rc = ts_err(-EINVAL, "optimizer: moment dtype %d from the manifest", (int)o->md);
		goto fail;
	}
	o->mb = dtype_size(o->md);
	shard_size = p->shard_size ? p->shard_size : cfg->shard_size;
	o->shard_elems = shard_size / (4 + 2 * o->mb) / SHARD_ALIGN * SHARD_ALIGN;
	shard_bytes = o->shard_elems * (4 + 2 * o->mb);

	tier_store_get_stats(s, &st);
	have_hbm = st.level[TIER_HBM].present;
	o->home_nvme = tier_store_home(s) == TIER_NVME;
	o->dram_cap = st.level[TIER_DRAM].capacity;
	o->hbm_cap = have_hbm ? st.level[TIER_HBM].capacity : 0;
	if (shard_bytes > o->dram_cap / 4) {
		rc = ts_err(-EINVAL, "optimizer: shards of %" PRIu64 " bytes do not fit four times in the DRAM tier (%" PRIu64 " bytes); use a smaller shard_size",
			      shard_bytes, o->dram_cap);
		goto fail;
	}
	/* The window: the manifest's lookahead, scaled with the DRAM tier when
	 * the store overrides its capacity, within [one shard, half of DRAM]. */
	o->lookahead = cfg->lookahead;
	if (cfg->dram_capacity && cfg->dram_capacity != o->dram_cap)
		o->lookahead = (uint64_t)((double)cfg->lookahead * (double)o->dram_cap /
					  (double)cfg->dram_capacity);
	if (o->lookahead > o->dram_cap / 2)
		o->lookahead = o->dram_cap / 2;
	if (o->lookahead < shard_bytes)
		o->lookahead = shard_bytes;
	o->hbm_budget = o->hbm_cap / 2;
	o->shard_bytes = shard_bytes;

	/* The split. */
	f = p->offload_fraction;
	if (isnan(f))
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
	if ((rc = wb_create(s, cfg->write_behind, &o->wb)))
		goto fail;
	if (have_hbm) {
		store_hbm(s, &o->hops);
		if ((rc = open_gpu_lane(o)))
			goto fail;
	}
	if (*ts_opt_str(TIER_OPT_TRACE)) {
		if ((rc = trace_open(ts_opt_str(TIER_OPT_TRACE), 0, &o->trace)))
			goto fail;
		store_set_hook(s, hook, o);
	}
	TIER_INFO(TIER_SS_OPTIM, "optimizer: shards of %zu elements (%" PRIu64 " bytes), moments %s, lookahead %" PRIu64 " bytes, cpu share %s%g",
		  o->shard_elems, shard_bytes, o->md == TIER_BF16 ? "bf16" : "fp32", o->lookahead,
		  o->auto_split ? "auto, from " : "", o->cpu_fraction);
	o->feed = live_feed(s);
	if (o->feed) {
		atomic_store_explicit(&o->feed->owner, (uintptr_t)o, memory_order_relaxed);
		atomic_store_explicit(&o->feed->skipped, 0, memory_order_relaxed);
		atomic_store_explicit(&o->feed->pf_stall_ns, 0, memory_order_relaxed);
		atomic_store_explicit(&o->feed->last_step_ns, 0, memory_order_relaxed);
		atomic_store_explicit(&o->feed->last_stall_ns, 0, memory_order_relaxed);
		live_set_double(&o->feed->grad_norm, 0.0);
		feed_update(o, NULL);
	}
	*out = o;
	return 0;
fail:
	optim_free(o);
	return rc;
}

/* ------------------------------------------------------------ parameters */

static int find_param(const struct tier_optim *o, const char *name)
{
	for (uint32_t i = 0; i < o->nparams; i++)
		if (!strcmp(o->params[i].name, name))
			return (int)i;
	return -1;
}

/* Writes the shard's initial state: master from @init (or zeros), moments zero. */
static int shard_init(struct tier_optim *o, struct shard *sh, const float *init)
{
	void *ptr;
	int rc = tier_obj_acquire(o->s, sh->obj, TIER_DRAM, TIER_ACQUIRE_WRITE | TIER_ACQUIRE_DISCARD, &ptr);

	if (rc)
		return rc;
	if (init)
		memcpy(ptr, init + sh->off, sh->n * 4);
	else
		memset(ptr, 0, sh->n * 4);
	memset((char *)ptr + sh->n * 4, 0, 2 * o->mb * sh->n);
	return tier_obj_release(o->s, sh->obj, TIER_DRAM, true);
}

int tier_optim_add_param(struct tier_optim *o, const char *name, size_t numel, const float *init,
			 uint32_t *id)
{
	uint32_t nsh, first = o ? o->nshards : 0;
	struct param *pp;
	int rc = 0;

	if (!o || !name || !*name)
		return ts_err(-EINVAL, "tier_optim_add_param: no optimizer or no name");
	if (o->in_step)
		return ts_err(-EBUSY, "parameter '%s': cannot add a parameter inside a step", name);
	if (!numel)
		return ts_err(-EINVAL, "parameter '%s': no elements", name);
	if (strlen(name) > TIER_NAME_MAX * 4)
		return ts_err(-EINVAL, "parameter '%.32s...': name longer than %d bytes", name,
				TIER_NAME_MAX * 4);
	if (find_param(o, name) >= 0)
		return ts_err(-EEXIST, "parameter '%s' already exists", name);
	nsh = (uint32_t)((numel + o->shard_elems - 1) / o->shard_elems);
	if (o->nparams == o->params_cap) {
		uint32_t cap = o->params_cap ? 2 * o->params_cap : 16;
		struct param *np = ts_realloc(o->params, cap * sizeof(*np));

		if (!np)
			return ts_err(-ENOMEM, "parameter '%s': out of memory", name);
		o->params = np;
		o->params_cap = cap;
	}
	if (o->nshards + nsh > o->shards_cap) {
		uint32_t cap = o->shards_cap ? o->shards_cap : 64;
		struct shard **ns;

		while (cap < o->nshards + nsh)
			cap *= 2;
		if (!(ns = ts_realloc(o->shards, cap * sizeof(*ns))))
			return ts_err(-ENOMEM, "parameter '%s': out of memory", name);
		o->shards = ns;
		o->shards_cap = cap;
	}
	pp = &o->params[o->nparams];
	memset(pp, 0, sizeof(*pp));
	if (!(pp->name = ts_strdup(name)))
		return ts_err(-ENOMEM, "parameter '%s': out of memory", name);
	pp->numel = numel;
	pp->first = first;
	for (uint32_t k = 0; k < nsh; k++) {
		struct shard *sh = ts_calloc(1, sizeof(*sh));
		char oname[TIER_NAME_MAX * 4 + 32];

		if (!sh) {
			rc = ts_err(-ENOMEM, "parameter '%s': out of memory", name);
			goto undo;
		}
		o->shards[o->nshards++] = sh;
		sh->o = o;
		sh->param = o->nparams;
		sh->index = first + k;
		sh->off = (size_t)k * o->shard_elems;
		sh->n = numel - sh->off < o->shard_elems ? numel - sh->off : o->shard_elems;
		sh->bytes = sh->n * (4 + 2 * o->mb);
		snprintf(oname, sizeof(oname), "%s#%u", name, k);
		if ((rc = tier_obj_create(o->s, oname, sh->bytes, &sh->obj))) {
			ts_err_prefix("parameter '%s': ", name);
			goto undo;
		}
		store_obj_set_user(sh->obj, sh);
		trace_name_shard(o->trace, sh->index, oname);
		if ((rc = shard_init(o, sh, init))) {
			ts_err_prefix("parameter '%s': writing its initial state: ", name);
			goto undo;
		}
	}
	pp->nshards = nsh;
	if (id)
		*id = o->nparams;
	o->nparams++;
	o->synced = false;
	feed_update(o, NULL);
	return 0;
undo:
	while (o->nshards > first) {
		struct shard *sh = o->shards[--o->nshards];

		if (sh->obj) {
			store_obj_set_user(sh->obj, NULL);
			(void)tier_obj_destroy(o->s, sh->obj);
		}
		free(sh);
	}
	free(pp->name);
	return rc;
}

uint32_t tier_optim_nparams(const struct tier_optim *o)
{
	return o ? o->nparams : 0;
}

const char *tier_optim_param_name(const struct tier_optim *o, uint32_t id)
{
	return o && id < o->nparams ? o->params[id].name : NULL;
}

size_t tier_optim_param_numel(const struct tier_optim *o, uint32_t id)
{
	return o && id < o->nparams ? o->params[id].numel : 0;
}

enum tier_dtype tier_optim_moment_dtype(const struct tier_optim *o)
{
	return o->md;
}

double tier_optim_cpu_fraction(const struct tier_optim *o)
{
	return o->cpu_fraction;
}

/* ------------------------------------------------------------ the step */

/* Registers the cycle of this step's order and the next one's. */
static int sync_schedule(struct tier_optim *o)
{
	size_t n = o->nshards;
	struct tier_obj **cyc = ts_malloc(2 * n * sizeof(*cyc));
	int rc;

	if (!cyc)
		return ts_err(-ENOMEM, "optimizer: out of memory for the schedule");
	for (int h = 0; h < 2; h++) {
		sched_order(n, o->ran + (uint64_t)h, o->order);
		for (size_t i = 0; i < n; i++)
			cyc[(size_t)h * n + i] = o->shards[o->order[i]]->obj;
	}
	rc = tier_store_set_schedule(o->s, cyc, 2 * n);
	free(cyc);
	if (!rc)
		o->synced = true;
	return rc;
}

int tier_optim_begin(struct tier_optim *o, double lr)
{
	size_t n;
	uint64_t after = 0;
	int rc;

	if (!o)
		return ts_err(-EINVAL, "tier_optim_begin: no optimizer");
	if (o->in_step)
		return ts_err(-EBUSY, "optimizer: a step is already begun (end it first)");
	if (o->failed)
		return ts_err(o->failed, "optimizer: a step failed part way, state is partly updated: %s",
				o->failed_msg);
	if (!o->nparams)
		return ts_err(-EINVAL, "optimizer: no parameters");
	if (lr < 0 || !isfinite(lr))
		return ts_err(-EINVAL, "optimizer: lr %g (> 0 sets it, 0 keeps %g)", lr, o->lr);
	n = o->nshards;
	if (n > o->nitems) {
		struct la_item *items = ts_realloc(o->items, n * sizeof(*items));
		unsigned char *lanes;
		uint32_t *order;

		if (!items)
			return ts_err(-ENOMEM, "optimizer: out of memory");
		o->items = items;
		if (!(lanes = ts_realloc(o->lanes, n)))
			return ts_err(-ENOMEM, "optimizer: out of memory");
		o->lanes = lanes;
		if (!(order = ts_realloc(o->order, n * sizeof(*order))))
			return ts_err(-ENOMEM, "optimizer: out of memory");
		o->order = order;
		o->nitems = n;
	}
	if (!o->synced && (rc = sync_schedule(o)))
		return rc;
	if (lr > 0)
		o->lr = lr;
	o->keep = sched_keep_bytes(o->dram_cap, o->lookahead, o->shard_bytes, state_bytes(o));
	sched_split(n, o->cpu_fraction, o->lanes);
	sched_order(n, o->ran, o->order);
	for (size_t i = n; i-- > 0;) {
		struct shard *sh = o->shards[o->order[i]];
		struct la_item *it = &o->items[i];

		memset(it, 0, sizeof(*it));
		it->obj = sh->obj;
		it->lane = o->lanes[sh->index];
		it->level = it->lane ? TIER_HBM : TIER_DRAM;
		it->bytes = sh->bytes;
		it->user = sh;
		sh->after = after;
		after += sh->bytes;
	}
	for (uint32_t i = 0; i < o->nparams; i++) {
		o->params[i].pushed = false;
		o->params[i].sumsq = 0;
		o->params[i].nonfinite = false;
	}
	memset(o->lane, 0, sizeof(o->lane));
	tier_store_get_stats(o->s, &o->st0);
	o->t0 = tier_now_ns();
	atomic_fetch_add(&o->begun, 1);
	o->in_step = true;
	{
		struct la_watch w = { NULL, NULL };

		if (o->feed) {
			w.bytes = &o->feed->pf_ahead_bytes;
			w.items = &o->feed->pf_shards_ahead;
			atomic_store_explicit(&o->feed->pf_active, 1, memory_order_relaxed);
		}
		return la_start(&o->la, o->s, o->items, n, o->lookahead, o->hbm_budget, &w);
	}
}

static int check_tensor(const struct tier_optim *o, const struct param *pp, const char *what,
			const struct tier_tensor *t)
{
	if (!t->ptr)
		return ts_err(-EINVAL, "parameter '%s': no %s buffer", pp->name, what);
	if (!dtype_ok((int)t->dtype))
		return ts_err(-EINVAL, "parameter '%s': %s dtype %d (TIER_FP32, TIER_BF16, TIER_FP16)",
				pp->name, what, (int)t->dtype);
	if (t->mem != TIER_MEM_HOST && t->mem != TIER_MEM_DEVICE)
		return ts_err(-EINVAL, "parameter '%s': %s memory kind %d", pp->name, what,
				(int)t->mem);
	if (t->mem == TIER_MEM_DEVICE && !o->hops)
		return ts_err(-EINVAL, "parameter '%s': %s in device memory, but the optimizer has no HBM tier",
				pp->name, what);
	return 0;
}

int tier_optim_push(struct tier_optim *o, uint32_t id, const struct tier_tensor *grad,
		    const struct tier_tensor *out)
{
	struct param *pp;
	struct tier_grad_stats gs = { 0 };
	int rc;

	if (!o || !grad)
		return ts_err(-EINVAL, "tier_optim_push: no optimizer or no gradient");
	if (!o->in_step)
		return ts_err(-EINVAL, "optimizer: push outside a step (call tier_optim_begin first)");
	if (id >= o->nparams)
		return ts_err(-EINVAL, "optimizer: no parameter with id %u (there are %u)", id,
				o->nparams);
	pp = &o->params[id];
	if (pp->pushed)
		return ts_err(-EALREADY, "parameter '%s': gradient already pushed this step",
				pp->name);
	if ((rc = check_tensor(o, pp, "gradient", grad)))
		return rc;
	if (out && out->ptr && (rc = check_tensor(o, pp, "output", out)))
		return rc;
	if (grad->mem == TIER_MEM_DEVICE && !o->dev_host) {
		struct adamw_chunk c = { .grad = grad->ptr, .n = pp->numel };
		int nonfinite = 0;

		rc = adamw_cuda_grad_check(&c, 1, grad->dtype, o->stream, &gs.sumsq, &nonfinite);
		gs.nonfinite = nonfinite != 0;
	} else {
		rc = tier_grad_check(o->pool, grad->ptr, grad->dtype, pp->numel, &gs);
	}
	if (rc)
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
static void abandon(struct tier_optim *o)
{
	la_finish(&o->la);
	o->in_step = false;
	o->synced = false; /* the window stopped part way through the schedule */
	if (o->feed)
		atomic_store_explicit(&o->feed->pf_active, 0, memory_order_relaxed);
}

static void fill_result(struct tier_optim *o, struct tier_step_result *res, bool applied,
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
	res->cpu_fraction = o->cpu_fraction;
	for (size_t i = 0; i < o->nshards; i++) {
		if (o->lanes[o->shards[i]->index])
			res->gpu_shards++;
		else
			res->cpu_shards++;
	}
	res->step_s = (double)(tier_now_ns() - o->t0) * 1e-9;
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
		atomic_store_explicit(&o->feed->pf_active, 0, memory_order_relaxed);
	feed_update(o, res);
}

/* Under "auto": the split that makes both lanes end together. */
static void auto_adjust(struct tier_optim *o)
{
	const struct lane *c = &o->lane[0], *g = &o->lane[1];
	double rc, rg, f;

	if (!o->auto_left || !c->bytes || !g->bytes || !c->busy_ns || !g->busy_ns)
		return;
	rc = (double)c->bytes / (double)c->busy_ns;
	rg = (double)g->bytes / (double)g->busy_ns;
	f = rc / (rc + rg);
	o->cpu_fraction = f;
	if (--o->auto_left == 0)
		TIER_INFO(TIER_SS_OPTIM, "optimizer: auto split picked a CPU share of %.3f (CPU lane %.2f GB/s, GPU lane %.2f GB/s of state)",
			  f, rc, rg);
}

int tier_optim_end(struct tier_optim *o, struct tier_step_result *res)
{
	struct tier_step_result dummy;
	double total = 0, scale, norm, clip = 1.0;
	bool nonfinite = false, skip, gpu_items = false;
	int rc = 0;

	if (!res)
		res = &dummy;
	if (!o)
		return ts_err(-EINVAL, "tier_optim_end: no optimizer");
	if (!o->in_step)
		return ts_err(-EINVAL, "optimizer: end without a step begun");
	for (uint32_t i = 0; i < o->nparams; i++) {
		if (!o->params[i].pushed) {
			abandon(o);
			return ts_err(-ENODATA, "parameter '%s' (id %u): no gradient pushed this step; the step is abandoned and no state changed",
					o->params[i].name, i);
		}
		total += o->params[i].sumsq;
		nonfinite |= o->params[i].nonfinite;
	}
	scale = o->p.dynamic_loss_scale ? o->scaler.scale : o->p.loss_scale;
	norm = sqrt(total) / scale;
	skip = nonfinite;
	if (o->p.dynamic_loss_scale)
		skip = tier_loss_scaler_update(&o->scaler, nonfinite);
	if (skip || nonfinite) {
		abandon(o);
		fill_result(o, res, false, norm, scale, 1.0);
		trace_span(o->trace, TRACE_STEP, 0, atomic_load(&o->begun), o->t0, tier_now_ns(), 0);
		TIER_INFO(TIER_SS_OPTIM, "optimizer: step skipped: a gradient holds an inf or nan (loss scale %g, next %g)",
			  scale, res->next_loss_scale);
		return 0;
	}
	if (o->p.max_grad_norm > 0)
		clip = tier_clip_coef(norm, o->p.max_grad_norm);
	o->ap = (struct tier_adam_params){
		.lr = o->lr, .beta1 = o->p.beta1, .beta2 = o->p.beta2, .eps = o->p.eps,
		.weight_decay = o->p.weight_decay, .decoupled = o->p.decoupled,
		.step = o->applied + 1, .grad_scale = clip / scale,
	};
	for (size_t i = 0; i < o->nshards; i++)
		gpu_items |= o->lanes[i] != 0;
	if (gpu_items) {
		pthread_mutex_lock(&o->lock);
		o->go++;
		pthread_cond_broadcast(&o->cond);
		pthread_mutex_unlock(&o->lock);
	}
	run_lane(o, 0);
	if (gpu_items) {
		pthread_mutex_lock(&o->lock);
		while (o->done != o->go)
			pthread_cond_wait(&o->cond, &o->lock);
		pthread_mutex_unlock(&o->lock);
	}
	la_finish(&o->la);
	o->in_step = false;
	o->applied++;
	o->ran++;
	fill_result(o, res, true, norm, scale, clip);
	trace_span(o->trace, TRACE_STEP, 0, atomic_load(&o->begun), o->t0, tier_now_ns(), 0);
	for (unsigned l = 0; l < LA_LANES && !rc; l++) {
		if (o->lane[l].rc) {
			rc = o->lane[l].rc;
			o->failed = rc;
			snprintf(o->failed_msg, sizeof(o->failed_msg), "step %" PRIu64 ", %s lane: %s",
				 o->applied, l ? "GPU" : "CPU", o->lane[l].err);
			ts_err(rc, "optimizer: %s (the shards before it are updated, the rest are not)",
				 o->failed_msg);
		}
	}
	if (!rc)
		auto_adjust(o);
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
	int rc;

	if (!o || !grads)
		return ts_err(-EINVAL, "tier_optim_step: no optimizer or no gradients");
	if ((rc = tier_optim_begin(o, lr)))
		return rc;
	for (uint32_t i = 0; i < o->nparams; i++) {
		if ((rc = tier_optim_push(o, i, &grads[i], outs ? &outs[i] : NULL))) {
			char msg[TIER_ERR_MAX];

			snprintf(msg, sizeof(msg), "%s", tier_last_error());
			abandon(o);
			return ts_err(rc, "%s", msg);
		}
	}
	return tier_optim_end(o, res);
}

/* ------------------------------------------------------------ read back */

int tier_optim_read(struct tier_optim *o, uint32_t id, float *master, void *exp_avg,
		    void *exp_avg_sq)
{
	const struct param *pp;

	if (!o || id >= (o ? o->nparams : 0))
		return ts_err(-EINVAL, "tier_optim_read: no optimizer or no parameter %u", id);
	if (o->in_step)
		return ts_err(-EBUSY, "optimizer: cannot read state inside a step");
	pp = &o->params[id];
	for (uint32_t k = 0; k < pp->nshards; k++) {
		const struct shard *sh = o->shards[pp->first + k];
		char *ptr;
		int rc = tier_obj_acquire(o->s, sh->obj, TIER_DRAM, TIER_ACQUIRE_READ, (void **)&ptr);

		if (rc)
			return rc;
		if (master)
			memcpy(master + sh->off, ptr, sh->n * 4);
		if (exp_avg)
			memcpy((char *)exp_avg + sh->off * o->mb, ptr + 4 * sh->n, sh->n * o->mb);
		if (exp_avg_sq)
			memcpy((char *)exp_avg_sq + sh->off * o->mb, ptr + (4 + o->mb) * sh->n,
			       sh->n * o->mb);
		if ((rc = tier_obj_release(o->s, sh->obj, TIER_DRAM, false)))
			return rc;
	}
	return 0;
}

int tier_optim_destroy(struct tier_optim *o)
{
	char detail[TIER_ERR_MAX];
	int rc, rc2;

	if (!o)
		return 0;
	if (o->in_step)
		abandon(o);
	wb_drain(o->wb);
	rc = wb_take_error(o->wb, detail, sizeof(detail));
	if (rc)
		ts_err(rc, "optimizer: a write-back failed: %s", detail);
	if (o->trace)
		store_set_hook(o->s, NULL, NULL);
	if (o->feed && atomic_load_explicit(&o->feed->owner, memory_order_relaxed) == (uintptr_t)o) {
		atomic_store_explicit(&o->feed->optim_present, 0, memory_order_relaxed);
		atomic_store_explicit(&o->feed->owner, 0, memory_order_relaxed);
	}
	rc2 = trace_close(o->trace);
	o->trace = NULL;
	optim_free(o);
	return rc ? rc : rc2;
}
