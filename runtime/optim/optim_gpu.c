/*
 * optim_gpu.c - the optimizer's GPU lane: the update of the shards the
 * split gives the HBM tier, run on the optimizer's own thread with
 * TIER_GPU_SLOTS shards in flight (docs/optimizer.md, "The GPU lane").
 *
 * A shard's work, queued on its slot's stream and closed by the slot's
 * event:
 *
 *   gradient in   a device gradient is read where it is; a host one is
 *                 copied into the slot's device buffer, by DMA straight
 *                 from it when it is pinned, else through the slot's
 *                 pinned staging (a CPU copy on the optimizer's threads,
 *                 then the DMA);
 *   update        the CUDA kernel over the shard's state, which the
 *                 window brought up to HBM (the store's own copy stream);
 *   copy out      a device output is written where it is; a host one is
 *                 copied back from the slot's device buffer, by DMA
 *                 straight into it when it is pinned, else into the
 *                 pinned staging and from there by the optimizer's
 *                 threads when the slot ends.
 *
 * Nothing waits on the way in: the lane takes the next item while the
 * slots run, so one shard's gradient comes in while another's update runs
 * and a third's output and state go out (the state leaves through the
 * store's device-to-host stream once the slot ends and gives the item
 * back dirty).  A slot ends (its event waited for) when the lane needs it
 * again, when the next item is not resident yet (the budget its item holds
 * may be what the window waits for), and at the end of the step; slots
 * end in the order they were queued.
 *
 * Traced (TIER_TRACE), each slot also records timing events on its
 * stream at the start of its work and after the gradient in, the kernel
 * and the copy out, and its end lays them on the trace as grad_in,
 * kernel_gpu and out_d2h spans (docs/trace.md): when the link's copies
 * run, not only when the lane queued and ended them.
 *
 * With the emulated "host" HBM backend the HBM tier is host memory, and
 * the lane keeps the same slots and the same order: the gradient and the
 * output are copied (memcpy) through the slot's buffers as they would be
 * over the link, the update is the CPU kernel on this thread, and a slot
 * ends as a CUDA one would.  So the tests without a GPU run this file's
 * bookkeeping: items given back out of the order they were taken, and
 * outputs copied out at the end of a slot.
 */
#include "config.h"

#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/clock.h"
#include "common/cuda.h"
#include "common/error.h"
#include "common/fault.h"
#include "common/options.h"
#include "common/pool.h"
#include "kernels/adamw_cuda.h"
#include "kernels/copy.h"
#include "prefetch/lookahead.h"
#include "runtime/optim/optim_impl.h"
#include "formats/trace.h"

int gpu_lane_open(struct tier_optim *o, size_t shard_bytes)
{
	int rc;

	o->slot_head = o->slot_count = 0;
	o->grad_ahead = ts_opt_int(TIER_OPT_GPU_GRAD_AHEAD) == 1;
	o->nslots = (unsigned)ts_opt_int(TIER_OPT_GPU_SLOTS);
	if (o->nslots < 1 || o->nslots > GPU_SLOTS_MAX)
		o->nslots = 3; /* the table keeps its range: not reached */
	for (unsigned i = 0; i < o->nslots; i++) {
		struct gpu_slot *sl = &o->slot[i];

		if (o->dev_host) {
			if (!(sl->dgrad = ts_malloc(shard_bytes)) || !(sl->dout = ts_malloc(shard_bytes)))
				return ts_err(-ENOMEM, "optimizer: out of memory for the GPU lane's buffers");
			continue;
		}
		if ((rc = ts_cuda_stream_open(o->gpu, &sl->stream)) ||
		    (rc = ts_cuda_event_open(&sl->ev)))
			return rc;
		for (unsigned k = 0; k < TEV_N; k++)
			if ((rc = ts_cuda_timer_open(&sl->tev[k])))
				return rc;
		if ((rc = ts_cuda_alloc(shard_bytes, &sl->dgrad)) ||
		    (rc = ts_cuda_alloc(shard_bytes, &sl->dout)) ||
		    (rc = ts_cuda_host_alloc(shard_bytes, &sl->pgrad)) ||
		    (rc = ts_cuda_host_alloc(shard_bytes, &sl->pout)))
			return rc;
	}
	return 0;
}

void gpu_lane_close(struct tier_optim *o)
{
	for (unsigned i = 0; i < GPU_SLOTS_MAX; i++) {
		struct gpu_slot *sl = &o->slot[i];

		if (o->dev_host) {
			free(sl->dgrad);
			free(sl->dout);
		} else {
			ts_cuda_stream_close(sl->stream);
			ts_cuda_event_close(sl->ev);
			for (unsigned k = 0; k < TEV_N; k++)
				ts_cuda_event_close(sl->tev[k]);
			ts_cuda_free(sl->dgrad);
			ts_cuda_free(sl->dout);
			ts_cuda_host_free(sl->pgrad);
			ts_cuda_host_free(sl->pout);
		}
		memset(sl, 0, sizeof(*sl));
	}
}

/*
 * The staging copies of pageable gradients and outputs, on the optimizer's
 * threads: one thread copies about 5-10 GB/s from pageable memory, below
 * the link, so a lane that copied on its own thread alone was bound by
 * its memcpy (performance.md, "The GPU lane on the H100").  Four pieces a
 * thread, each STAGE_MIN to STAGE_MAX bytes (a shard's 22 MB gradient: 256
 * KiB pieces); a copy of STAGE_MIN or less stays on this thread.  The pool
 * runs one job at a time: in a split, this waits for the CPU lane's
 * current shard, as that lane's next shard waits for this.
 *
 * An output goes to the trainer's buffer with non-temporal stores
 * (kernels/copy.h): nothing here reads it again, and the stores then
 * take no read of each line first from the host memory the link's DMA
 * is using.  A gradient is staged with ordinary stores: the DMA reads the
 * staging next, and on the H100 machine streaming it too measured no
 * faster than streaming the outputs alone (performance.md, "Pageable
 * gradients: streaming stores").
 */
#define STAGE_MIN (16u << 10)
#define STAGE_MAX (256u << 10)

struct stage_copy {
	char *dst;
	const char *src;
	size_t len, piece;
	void (*copy)(void *dst, const void *src, size_t n);
};

static void copy_cached(void *dst, const void *src, size_t n)
{
	memcpy(dst, src, n);
}

static void stage_piece(void *arg, size_t i, unsigned worker)
{
	const struct stage_copy *c = arg;
	size_t off = i * c->piece, n = c->len - off < c->piece ? c->len - off : c->piece;

	(void)worker;
	c->copy(c->dst + off, c->src + off, n);
}

/* @out: an output to the trainer's buffer (streamed), else a gradient;
 * shard @sh's, for its "staging" span in the trace. */
static void stage(struct tier_optim *o, const struct shard *sh, void *dst, const void *src,
		  size_t len, bool out)
{
	unsigned nt = o->pool ? tier_pool_size(o->pool) : 1;
	struct stage_copy c = { dst, src, len, len / (4 * (size_t)nt),
				out ? ts_copy_stream : copy_cached };
	uint64_t t0 = o->trace ? ts_now_ns() : 0;

	if (c.piece < STAGE_MIN)
		c.piece = STAGE_MIN;
	if (c.piece > STAGE_MAX)
		c.piece = STAGE_MAX;
	if (len <= STAGE_MIN || nt < 2 ||
	    ts_pool_for(o->pool, (len + c.piece - 1) / c.piece, stage_piece, &c))
		c.copy(dst, src, len);
	if (o->trace)
		trace_span(o->trace, TRACE_STAGING, sh->index, atomic_load(&o->begun), t0, ts_now_ns(),
			   len);
}

/* A span of the lane's link and kernel stages (grad_in, kernel_gpu,
 * out_d2h) for shard @sh, when tracing. */
static void lane_span(struct tier_optim *o, const struct shard *sh, enum trace_stage stage,
		      uint64_t begin, uint64_t end, uint64_t bytes)
{
	if (o->trace)
		trace_span(o->trace, stage, sh->index, atomic_load(&o->begun), begin, end, bytes);
}

/*
 * Traced: the times of slot @sl's work from its timing events (the
 * device's clock, from the start event's completion), laid on the host
 * clock from the moment it was queued (the slot's stream is idle then, so
 * the start event completes at once): the gradient in, the kernel, the
 * copy out.  The slot's work has ended.  A failed reading of the events
 * leaves the spans out: they are the trace's, not the update's.
 */
static void slot_spans(struct tier_optim *o, const struct gpu_slot *sl)
{
	const struct shard *sh = sl->it->user;
	float ms[TEV_N] = { 0 };
	uint64_t at[TEV_N];

	for (unsigned k = 1; k < TEV_N; k++)
		if (ts_cuda_event_elapsed(sl->tev[TEV_START], sl->tev[k], &ms[k]))
			return;
	at[TEV_START] = sl->tq;
	for (unsigned k = 1; k < TEV_N; k++)
		at[k] = sl->tq + (uint64_t)((double)(ms[k] > 0 ? ms[k] : 0) * 1e6);
	if (sl->in_len)
		lane_span(o, sh, TRACE_GRAD_IN, at[TEV_START], at[TEV_GRAD], sl->in_len);
	lane_span(o, sh, TRACE_KERNEL, at[TEV_KSTART], at[TEV_KERNEL], 0);
	if (sl->link_out_len)
		lane_span(o, sh, TRACE_OUT, at[TEV_KERNEL], at[TEV_OUT], sl->link_out_len);
}

/* Traced: the start of slot @sl's work on its stream, after any staging
 * copy of its gradient (grad_in is the link's part). */
static int slot_timer_start(struct tier_optim *o, struct gpu_slot *sl)
{
	int rc;

	if (!o->trace)
		return 0;
	if ((rc = ts_cuda_event_record(sl->tev[TEV_START], sl->stream)))
		return rc;
	sl->tq = ts_now_ns();
	sl->timed = true;
	return 0;
}

/* Whether host buffer @p may go over the link by DMA as it is. */
static int host_pinned(const void *p, bool *pinned)
{
	int k = ts_cuda_mem_kind(p);

	if (k < 0)
		return k;
	*pinned = k != TS_CUDA_MEM_PAGEABLE;
	return 0;
}

/*
 * Queues the host gradient of @it's shard into slot @sl's device buffer
 * (emulated: copies it), through the slot's pinned staging when it is
 * pageable; traced, between the slot's start and after-gradient events.
 * The slot's earlier work has ended.
 */
static int slot_grad_in(struct tier_optim *o, struct gpu_slot *sl, const struct la_item *it)
{
	const struct shard *sh = it->user;
	const struct param *pp = &o->params[sh->param];
	size_t gsz = tier_dtype_size(pp->grad.dtype), glen = sh->n * gsz;
	const void *src = (const char *)pp->grad.ptr + sh->off * gsz;
	bool pinned;
	int rc;

	sl->in_len = glen;
	if (o->dev_host) {
		/* the emulated link: the same copy, by the CPU */
		uint64_t k0 = ts_now_ns();

		stage(o, sh, sl->dgrad, src, glen, false);
		lane_span(o, sh, TRACE_GRAD_IN, k0, ts_now_ns(), glen);
		return 0;
	}
	if ((rc = host_pinned(src, &pinned)))
		return rc;
	if (!pinned) {
		/* the slot's last DMA from it has ended */
		stage(o, sh, sl->pgrad, src, glen, false);
		src = sl->pgrad;
	}
	if ((rc = slot_timer_start(o, sl)) ||
	    (rc = ts_cuda_copy_async(sl->dgrad, src, glen, sl->stream)))
		return rc;
	if (sl->timed && (rc = ts_cuda_event_record(sl->tev[TEV_GRAD], sl->stream)))
		return rc;
	return 0;
}

/*
 * TIER_GPU_GRAD_AHEAD: while the lane's next item is not resident, its
 * host gradient goes in on the next free slot, the one the item will be
 * queued on (ending slots does not change which: the head and the count
 * move together), so the link carries it while the state comes up.  The
 * slot's event closes the copy: a gradient queued ahead and not used (the
 * step stopped) is waited for at the end of the lane.  A copy that cannot
 * be queued is left to the item's own queueing, which then fails the same
 * way and fails the step.
 */
static void grad_ahead(struct tier_optim *o)
{
	struct gpu_slot *sl;
	struct la_item *it;
	const struct param *pp;

	if (!o->grad_ahead || o->slot_count == o->nslots)
		return;
	sl = &o->slot[(o->slot_head + o->slot_count) % o->nslots];
	if (!(it = la_peek(&o->la, 1)) || sl->pre == it)
		return;
	if (sl->pre && !o->dev_host)
		(void)ts_cuda_event_sync(sl->ev); /* one for another item: ended first */
	sl->pre = NULL;
	sl->timed = false;
	pp = &o->params[((const struct shard *)it->user)->param];
	if (!pp->pushed || pp->grad.mem != TIER_MEM_HOST)
		return; /* no gradient this step, or one read where it is */
	if (slot_grad_in(o, sl, it) || (!o->dev_host && ts_cuda_event_record(sl->ev, sl->stream))) {
		ts_err_clear();
		sl->timed = false;
		return;
	}
	sl->pre = it;
}

/* Queues @it's work on slot @sl (the item already in sl->it). */
static int slot_queue(struct tier_optim *o, struct gpu_slot *sl)
{
	struct la_item *it = sl->it;
	struct shard *sh = it->user;
	struct param *pp = &o->params[sh->param];
	size_t olen = pp->out.ptr ? sh->n * tier_dtype_size(pp->out.dtype) : 0;
	bool host_grad = pp->grad.mem == TIER_MEM_HOST, host_out = olen && pp->out.mem == TIER_MEM_HOST;
	bool ahead = sl->pre == it; /* its gradient is in dgrad already */
	struct tier_adam_params ap;
	struct tier_adam_tensors t;
	bool pinned;
	int rc;

	optim_item_args(o, it, &ap, &t);
	sl->pre = NULL;
	sl->out_dst = NULL;
	sl->link_out_len = host_out ? olen : 0;
	if (!ahead) {
		sl->in_len = 0;
		sl->timed = false;
		if (host_grad && (rc = slot_grad_in(o, sl, it)))
			return rc;
	}
	if (o->dev_host) {
		uint64_t k0;

		if (host_grad)
			t.grad = sl->dgrad;
		if (host_out) {
			sl->out_dst = t.param_out;
			sl->out_len = olen;
			t.param_out = sl->dout;
		}
		k0 = ts_now_ns();
		rc = tier_adam_step(NULL, &ap, &t);
		sl->t1 = ts_now_ns();
		lane_span(o, sh, TRACE_KERNEL, k0, sl->t1, 0);
		return rc;
	}

	struct adamw_chunk c = adamw_chunk_of(&t);

	if (host_grad)
		c.grad = sl->dgrad;
	else if ((rc = slot_timer_start(o, sl)) ||
		 (sl->timed && (rc = ts_cuda_event_record(sl->tev[TEV_GRAD], sl->stream))))
		return rc;
	if (sl->timed && (rc = ts_cuda_event_record(sl->tev[TEV_KSTART], sl->stream)))
		return rc;
	if (host_out)
		c.param_out = sl->dout;
	if ((rc = adamw_cuda_step(&ap, o->md, t.grad_dtype, t.out_dtype, &c, 1, sl->stream)))
		return rc;
	if (sl->timed && (rc = ts_cuda_event_record(sl->tev[TEV_KERNEL], sl->stream)))
		return rc;
	if (host_out) {
		if ((rc = host_pinned(t.param_out, &pinned)))
			return rc;
		if ((rc = ts_cuda_copy_async(pinned ? t.param_out : sl->pout, sl->dout, olen, sl->stream)))
			return rc;
		if (!pinned) {
			sl->out_dst = t.param_out;
			sl->out_len = olen;
		}
	}
	if (sl->timed && (rc = ts_cuda_event_record(sl->tev[TEV_OUT], sl->stream)))
		return rc;
	return ts_cuda_event_record(sl->ev, sl->stream);
}

/*
 * Ends the oldest slot: waits for its work, copies a staged output to
 * its place, and gives its item back (updated) or, when the work failed,
 * records the lane's failure and stops the window.  0 or the error.
 */
static int slot_end(struct tier_optim *o)
{
	struct gpu_slot *sl = &o->slot[o->slot_head];
	struct la_item *it = sl->it;
	uint64_t t1;
	int rc = 0;

	if (sl->failed)
		rc = o->lane[1].rc; /* queued in part: its failure is recorded */
	else if (!o->dev_host)
		rc = ts_cuda_event_sync(sl->ev);
	if (!rc && sl->timed)
		slot_spans(o, sl);
	if (!rc && sl->out_dst) {
		uint64_t c0 = ts_now_ns();

		stage(o, it->user, sl->out_dst, o->dev_host ? sl->dout : sl->pout, sl->out_len,
		      true);
		if (o->dev_host) /* the emulated link's copy out */
			lane_span(o, it->user, TRACE_OUT, c0, ts_now_ns(), sl->out_len);
	}
	t1 = o->dev_host ? sl->t1 : ts_now_ns();
	sl->it = NULL;
	sl->out_dst = NULL;
	sl->failed = false;
	sl->timed = false;
	o->slot_head = (o->slot_head + 1) % o->nslots;
	o->slot_count--;
	if (rc) {
		/* the update may have run in part: the step fails for good */
		optim_lane_fail(o, 1, rc, true, tier_obj_name(((struct shard *)it->user)->obj));
		la_done(&o->la, it, false);
		la_abort(&o->la);
		return rc;
	}
	return optim_item_updated(o, 1, it, sl->t0, t1);
}

void optim_gpu_lane(struct tier_optim *o)
{
	struct lane *ln = &o->lane[1];
	uint64_t t0 = ts_now_ns();

	for (;;) {
		struct la_item *it;
		struct gpu_slot *sl;
		uint64_t now;
		int rc;

		/* the next item not up yet: its gradient may go in meanwhile,
		 * and what is in flight ends first */
		while (!la_ready(&o->la, 1)) {
			grad_ahead(o);
			if (!o->slot_count)
				break;
			if (slot_end(o))
				goto drain;
		}
		rc = optim_take(o, 1, &it, &now);
		if (rc == 2)
			continue; /* no gradient: given back */
		if (rc)
			break;    /* none left, or the take failed */
		if (o->slot_count == o->nslots && slot_end(o)) {
			la_done(&o->la, it, false);
			break;
		}
		sl = &o->slot[(o->slot_head + o->slot_count) % o->nslots];
		sl->it = it;
		sl->t0 = now;
		sl->failed = false;
		o->slot_count++;
		if ((rc = slot_queue(o, sl))) {
			/* queued in part at most: what did run may have changed it */
			optim_lane_fail(o, 1, rc, true, tier_obj_name(((struct shard *)it->user)->obj));
			la_abort(&o->la);
			sl->failed = true; /* it ends below, given back clean */
			break;
		}
	}
drain:
	/* the slots still in flight end in order; after a failure, each one
	 * whose work ran is given back as updated, the others clean */
	while (o->slot_count)
		(void)slot_end(o);
	/* a gradient queued ahead for an item that never came (the step
	 * stopped): its copy ends before the slot's buffers are used again,
	 * and the next step's items (the same array) are not taken for it */
	for (unsigned i = 0; i < o->nslots; i++) {
		struct gpu_slot *sl = &o->slot[i];

		if (sl->pre && !o->dev_host)
			(void)ts_cuda_event_sync(sl->ev);
		sl->pre = NULL;
	}
	ln->busy_ns = ts_now_ns() - t0;
}
