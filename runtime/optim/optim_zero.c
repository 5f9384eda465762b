/*
 * optim_zero.c - the partitioned optimizer (ZeRO-style; docs/distributed.md,
 * "The partitioned optimizer").
 *
 * With a communicator (tier_optim_params.comm), each parameter's elements
 * are split among the ranks (prefetch/partition.c: rank r keeps
 * [bound[r], bound[r + 1]) of it, bound from the element count alone, so a
 * parameter added or removed moves no other's piece) and this optimizer's
 * shards hold only this rank's piece.  A step:
 *
 *   begin   when the parameters changed since the last step, every rank's
 *           list is compared (an exchange of a fingerprint, then of the
 *           list where they differ, so the error names the rank and the
 *           parameter);
 *   push    the gradient's reduce-scatter (average) into the piece is
 *           posted, in parameter id order whatever the push order (every
 *           rank posts the same sequence), and earlier ones are tested so
 *           they progress while backward runs and the tiers fill;
 *   end     what is left is posted and waited for; each rank's sum of
 *           squares, inf/nan flag and what it pushed are exchanged (an
 *           all-gather, summed in rank order, so every rank takes the same
 *           bits and the same clip and skip decision); the lanes update the
 *           piece as on one rank; every rank's outcome is exchanged (a
 *           failure anywhere fails the step everywhere, naming the rank);
 *           the outputs are all-gathered in place into every rank's full
 *           buffer.
 *
 * Collectives must be called in the same order on every rank, so every
 * rank must make the same calls: the same parameters, groups and pushes.
 * What can be checked is (the parameters at begin, the pushes and groups at
 * end); a rank that stops calling is caught by the comm's timeout.
 */
#include "config.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/clock.h"
#include "common/cuda.h"
#include "common/error.h"
#include "common/fault.h"
#include "common/log.h"
#include "prefetch/partition.h"
#include "prefetch/writebehind.h"
#include "runtime/comm/comm.h"
#include "runtime/optim/optim_impl.h"
#include "formats/trace.h"
#include "tiers/store.h"

static enum comm_dtype comm_dt(enum tier_dtype d)
{
	return d == TIER_BF16 ? COMM_BF16 : d == TIER_FP16 ? COMM_F16 : COMM_F32;
}

static uint64_t fnv(uint64_t h, const void *p, size_t n)
{
	const unsigned char *b = p;

	for (size_t i = 0; i < n; i++) {
		h ^= b[i];
		h *= 0x100000001b3ull;
	}
	return h;
}

#define FNV0 0xcbf29ce484222325ull

static double u2d(uint64_t v)
{
	double d;

	memcpy(&d, &v, 8);
	return d;
}

static uint64_t d2u(double d)
{
	uint64_t v;

	memcpy(&v, &d, 8);
	return v;
}

/* ------------------------------------------------------------ setup */

int zero_setup(struct tier_optim *o, struct tier_comm *comm)
{
	unsigned caps;

	o->rank = 0;
	o->world = 1;
	if (!comm)
		return 0;
	if (!comm_valid(comm))
		return ts_err(-EINVAL, "optimizer: tier_optim_params.comm is not an open communicator (closed, or not one)");
	caps = comm_caps(comm);
	o->comm = comm;
	o->rank = tier_comm_rank(comm);
	o->world = tier_comm_size(comm);
	o->comm_dev = (caps & COMM_CAP_DEVICE_MEMORY) && !(caps & COMM_CAP_HOST_MEMORY);
	o->layout_dirty = true;
	/* backward produces the last parameters' gradients first */
	o->post_desc = true;
	return 0;
}

int zero_param_split(struct tier_optim *o, struct param *pp)
{
	uint64_t n64 = pp->numel, *bound;
	int rc;

	pp->counts = NULL;
	pp->rbuf = NULL;
	if (!o->comm) {
		pp->poff = 0;
		pp->pn = pp->numel;
		return 0;
	}
	if (!(bound = ts_malloc(((size_t)o->world + 1) * sizeof(*bound))) ||
	    !(pp->counts = ts_malloc((size_t)o->world * sizeof(*pp->counts)))) {
		free(bound);
		return ts_err(-ENOMEM, "parameter '%s': out of memory", pp->name);
	}
	if ((rc = part_plan(&n64, 1, (uint32_t)o->world, optim_align(o->md), bound))) {
		free(bound);
		zero_param_free(o, pp);
		return ts_err(rc, "parameter '%s': %zu elements cannot be split among %d ranks",
			      pp->name, pp->numel, o->world);
	}
	for (int r = 0; r < o->world; r++)
		pp->counts[r] = (size_t)(bound[r + 1] - bound[r]);
	pp->poff = (size_t)bound[o->rank];
	pp->pn = pp->counts[o->rank];
	free(bound);
	if (pp->pn && o->world > 1) { /* one rank: the pushed gradient is the piece */
		rc = o->comm_dev ? ts_cuda_alloc(pp->pn * 4, &pp->rbuf)
				 : ((pp->rbuf = ts_malloc(pp->pn * 4)) ? 0 : -ENOMEM);
		if (rc) {
			zero_param_free(o, pp);
			return ts_err(rc, "parameter '%s': no memory for its piece of the gradient (%zu bytes)",
				      pp->name, pp->pn * 4);
		}
	}
	return 0;
}

void zero_param_free(struct tier_optim *o, struct param *pp)
{
	free(pp->counts);
	pp->counts = NULL;
	if (pp->rbuf) {
		if (o->comm_dev)
			ts_cuda_free(pp->rbuf);
		else
			free(pp->rbuf);
	}
	pp->rbuf = NULL;
}

/* ------------------------------------------------------------ exchanges */

/* Remembers this step's first collective error. */
static int zfail(struct tier_optim *o, int rc, const char *what)
{
	if (!o->zrc) {
		o->zrc = rc;
		snprintf(o->zerr, sizeof(o->zerr), "%s: %s", what, tier_last_error());
	}
	return rc;
}

/*
 * The all-gather of host doubles (@all holds this rank's at its offset):
 * through the comm, or with a device comm (NCCL) through o->xdev.
 */
static int gather_host(struct tier_optim *o, double *all, const size_t *counts, size_t total)
{
	size_t off = comm_offset(counts, o->rank), bytes = total * sizeof(*all);
	int rc;

	if (!o->comm_dev)
		return comm_allgatherv(o->comm, all + off, all, counts, COMM_F64);
	if (o->xdev_len < bytes) {
		ts_cuda_free(o->xdev);
		o->xdev = NULL;
		o->xdev_len = 0;
		if ((rc = ts_cuda_alloc(bytes, &o->xdev)))
			return ts_err(rc, "optimizer: no device memory for the ranks' exchange (%zu bytes)", bytes);
		o->xdev_len = bytes;
	}
	if ((rc = ts_cuda_copy((double *)o->xdev + off, all + off, counts[o->rank] * sizeof(*all),
			       o->stream)) ||
	    (rc = comm_allgatherv(o->comm, (double *)o->xdev + off, o->xdev, counts, COMM_F64)) ||
	    (rc = ts_cuda_copy(all, o->xdev, bytes, o->stream)))
		return rc;
	return 0;
}

/* Every rank's @n doubles of @mine into @all (world x n), in rank order. */
static int xchg(struct tier_optim *o, const double *mine, double *all, size_t n, const char *what)
{
	size_t *counts = ts_malloc((size_t)o->world * sizeof(*counts));
	uint64_t t0 = ts_now_ns(), t1;
	int rc;

	if (!counts)
		return ts_err(-ENOMEM, "optimizer: out of memory for %s", what);
	for (int r = 0; r < o->world; r++)
		counts[r] = n;
	memcpy(all + (size_t)o->rank * n, mine, n * sizeof(*mine));
	rc = gather_host(o, all, counts, n * (size_t)o->world);
	free(counts);
	t1 = ts_now_ns();
	o->cst.n++;
	o->cst.bytes += n * 8;
	o->cst.ns += t1 - t0;
	o->cst.wait_ns += t1 - t0;
	if (rc)
		ts_err_prefix("optimizer: %s (rank %d of %d): ", what, o->rank, o->world);
	return rc;
}

/* A parameter's place in the list every rank must share. */
static void layout_words(const struct param *pp, double w[2])
{
	w[0] = u2d(pp->numel);
	w[1] = u2d((uint64_t)pp->group | (uint64_t)pp->frozen << 32);
}

/* After fingerprints differ: names the first difference from rank 0's
 * list (every rank runs this, so the exchange matches). */
static int layout_mismatch(struct tier_optim *o, const double *fp)
{
	size_t *counts = ts_malloc((size_t)o->world * sizeof(*counts)), total = 0, off0 = 0, offr = 0;
	double *mine = NULL, *all = NULL;
	int bad = -1, rc;
	uint32_t n0 = (uint32_t)d2u(fp[0]), nr, i;
	char msg[TIER_ERR_MAX];

	for (int r = 1; r < o->world && bad < 0; r++)
		if (d2u(fp[3 * r + 2]) != d2u(fp[2]) || d2u(fp[3 * r]) != d2u(fp[0]) ||
		    d2u(fp[3 * r + 1]) != d2u(fp[1]))
			bad = r;
	if (!counts)
		return ts_err(-ENOMEM, "optimizer: out of memory");
	for (int r = 0; r < o->world; r++) {
		counts[r] = (size_t)d2u(fp[3 * r]) * 2;
		if (r < bad)
			offr += counts[r];
		total += counts[r];
	}
	mine = ts_malloc((o->nparams ? o->nparams : 1) * 2 * sizeof(*mine));
	all = ts_malloc((total ? total : 1) * sizeof(*all));
	if (!mine || !all) {
		free(counts);
		free(mine);
		free(all);
		return ts_err(-ENOMEM, "optimizer: out of memory");
	}
	for (i = 0; i < o->nparams; i++)
		layout_words(&o->params[i], mine + 2 * i);
	memcpy(all + comm_offset(counts, o->rank), mine, o->nparams * 2 * sizeof(*mine));
	rc = gather_host(o, all, counts, total);
	free(counts);
	free(mine);
	if (rc) {
		free(all);
		ts_err_prefix("optimizer: comparing the ranks' parameters: ");
		return rc;
	}
	nr = (uint32_t)d2u(fp[3 * bad]);
	for (i = 0; i < n0 && i < nr; i++) {
		uint64_t a0 = d2u(all[off0 + 2 * i]), b0 = d2u(all[off0 + 2 * i + 1]);
		uint64_t ar = d2u(all[offr + 2 * i]), br = d2u(all[offr + 2 * i + 1]);

		if (a0 == ar && b0 == br)
			continue;
		snprintf(msg, sizeof(msg), "parameter %u%s%s%s: rank %d has %" PRIu64 " elements in group %u%s, rank 0 has %" PRIu64 " elements in group %u%s",
			 i, i < o->nparams ? " ('" : "", i < o->nparams ? o->params[i].name : "",
			 i < o->nparams ? "' here)" : "", bad, ar, (unsigned)(br & 0xffffffffu),
			 br >> 32 ? ", frozen" : "", a0, (unsigned)(b0 & 0xffffffffu),
			 b0 >> 32 ? ", frozen" : "");
		free(all);
		return ts_err(-EINVAL, "optimizer: the ranks' parameters differ: %s; every rank must add the same parameters, in the same order, to the same groups, and freeze the same",
			      msg);
	}
	free(all);
	if (n0 != nr)
		return ts_err(-EINVAL, "optimizer: the ranks' parameters differ: rank %d has %u parameters, rank 0 has %u; every rank must add the same parameters, in the same order",
			      bad, nr, n0);
	return ts_err(-EINVAL, "optimizer: the ranks' groups differ: rank %d has %" PRIu64 " groups, rank 0 has %" PRIu64 "; every rank must add the same groups",
		      bad, d2u(fp[3 * bad + 1]), d2u(fp[1]));
}

int zero_begin(struct tier_optim *o)
{
	double mine[3], *all;
	uint64_t h = FNV0;
	int rc;

	if (!o->layout_dirty)
		return 0;
	for (uint32_t i = 0; i < o->nparams; i++) {
		double w[2];

		layout_words(&o->params[i], w);
		h = fnv(h, w, sizeof(w));
	}
	mine[0] = u2d(o->nparams);
	mine[1] = u2d(o->ngroups);
	mine[2] = u2d(h);
	if (!(all = ts_malloc((size_t)o->world * 3 * sizeof(*all))))
		return ts_err(-ENOMEM, "optimizer: out of memory");
	rc = xchg(o, mine, all, 3, "comparing the ranks' parameters");
	if (!rc) {
		for (int r = 1; r < o->world; r++)
			if (memcmp(all + 3 * r, all, 3 * sizeof(*all)) != 0) {
				rc = layout_mismatch(o, all);
				break;
			}
	}
	free(all);
	if (!rc)
		o->layout_dirty = false;
	return rc;
}

/* ------------------------------------------------------------ the step */

static void test_inflight(struct tier_optim *o, bool gather);
static void ag_done(struct tier_optim *o, uint32_t id, uint64_t t1);
static int rs_done(struct tier_optim *o, uint32_t id, uint64_t t1);

/* The parameter at position @k of the step's posting order. */
static uint32_t order_at(const struct tier_optim *o, uint32_t k)
{
	return o->post_desc ? o->nparams - 1 - k : k;
}

/* Posts parameter @id's reduce-scatter. */
static int post_rs(struct tier_optim *o, uint32_t id)
{
	struct param *pp = &o->params[id];
	size_t gsz = tier_dtype_size(pp->gin.dtype);
	uint64_t t0 = ts_now_ns();
	char what[TIERS_NAME_MAX * 4 + 64];
	int rc;

	pp->ready = false;
	if (o->world == 1) {
		/* one rank: the average is the gradient itself, read in place */
		pp->rs_t0 = t0;
		return rs_done(o, id, t0);
	}
	rc = comm_ireduce_scatter(o->comm, pp->gin.ptr, pp->rbuf, pp->counts, comm_dt(pp->gin.dtype),
				  COMM_AVG, &pp->rs);
	if (rc) {
		pp->rs = NULL;
		snprintf(what, sizeof(what), "the reduce-scatter of parameter '%s'", pp->name);
		return zfail(o, rc, what);
	}
	pp->rs_t0 = t0;
	o->cst.n++;
	o->cst.bytes += pp->numel * gsz;
	return 0;
}

/* Parameter @id's reduce-scatter completed at @t1: its piece is the step's
 * gradient, and its norm is taken. */
static int rs_done(struct tier_optim *o, uint32_t id, uint64_t t1)
{
	struct param *pp = &o->params[id];
	size_t gsz = tier_dtype_size(pp->gin.dtype);
	const void *piece = o->world == 1 ? pp->gin.ptr : pp->rbuf;
	char what[TIERS_NAME_MAX * 4 + 64];
	int rc;

	pp->rs = NULL;
	if (o->world > 1) {
		o->cst.ns += t1 - pp->rs_t0;
		trace_span(o->trace, TRACE_COMM, id, atomic_load(&o->begun), pp->rs_t0, t1,
			   pp->numel * gsz);
	}
	pp->grad = (struct tier_tensor){ (void *)piece, pp->gin.dtype, pp->gin.mem, pp->pn };
	if (pp->fout.ptr)
		pp->out = (struct tier_tensor){
			(char *)pp->fout.ptr + pp->poff * tier_dtype_size(pp->fout.dtype),
			pp->fout.dtype, pp->fout.mem, pp->pn };
	else
		memset(&pp->out, 0, sizeof(pp->out));
	rc = optim_grad_check(o, piece, pp->gin.dtype, pp->gin.mem, pp->pn, &pp->sumsq,
			      &pp->nonfinite);
	if (rc) {
		snprintf(what, sizeof(what), "parameter '%s': the norm of its piece", pp->name);
		return zfail(o, rc, what);
	}
	return 0;
}

int zero_push(struct tier_optim *o, uint32_t id, const struct tier_tensor *grad,
	      const struct tier_tensor *out)
{
	struct param *pp = &o->params[id];
	enum tier_mem want = o->comm_dev ? TIER_MEM_DEVICE : TIER_MEM_HOST;
	const char *where = o->comm_dev ? "device" : "host";

	if (grad->mem != want)
		return ts_err(-EINVAL, "parameter '%s': gradient in %s memory; the %s comm takes %s buffers",
			      pp->name, grad->mem == TIER_MEM_DEVICE ? "device" : "host",
			      tier_comm_backend(o->comm), where);
	if (out && out->ptr && out->mem != want)
		return ts_err(-EINVAL, "parameter '%s': output in %s memory; the %s comm takes %s buffers",
			      pp->name, out->mem == TIER_MEM_DEVICE ? "device" : "host",
			      tier_comm_backend(o->comm), where);
	if (o->zrc)
		return ts_err(o->zrc, "optimizer: this step's collectives failed: %s", o->zerr);
	pp->gin = *grad;
	if (out && out->ptr)
		pp->fout = *out;
	else
		memset(&pp->fout, 0, sizeof(pp->fout));
	pp->pushed = true;
	pp->ready = true;
	if (o->last_push != UINT32_MAX) {
		o->push_up += id > o->last_push;
		o->push_down += id < o->last_push;
	}
	o->last_push = id;
	/* In the agreed order: every rank posts the same sequence whatever
	 * the order of its pushes; a push ahead of its turn waits. */
	while (o->rs_next < o->nparams) {
		uint32_t i = order_at(o, o->rs_next);
		struct param *q = &o->params[i];

		if (!q->frozen) {
			if (!q->ready)
				break;
			if (post_rs(o, i))
				return ts_err(o->zrc, "optimizer: %s", o->zerr);
		}
		o->rs_next++;
	}
	test_inflight(o, false);
	if (o->zrc)
		return ts_err(o->zrc, "optimizer: %s", o->zerr);
	return 0;
}

void zero_drain(struct tier_optim *o)
{
	for (uint32_t i = 0; i < o->nparams; i++) {
		struct param *pp = &o->params[i];

		if (pp->rs)
			(void)comm_wait(pp->rs); /* completes, fails or times out: freed */
		pp->rs = NULL;
		pp->ready = false;
	}
}

/* The step abandoned after a collective failed: no state changed. */
static int step_comm_failed(struct tier_optim *o)
{
	int rc = o->zrc;

	optim_abandon(o); /* waits out what is still in flight */
	return ts_err(rc, "optimizer: step %" PRIu64 " on rank %d of %d: %s; no state changed (a comm that timed out is broken: end the job and resume from the last checkpoint)",
		      o->applied + 1, o->rank, o->world, o->zerr);
}

/* Waits for parameter @id's collective in flight (pp->rs). */
static void wait_one(struct tier_optim *o, uint32_t id, bool rs, const char *what)
{
	struct param *pp = &o->params[id];
	uint64_t t0 = ts_now_ns(), t1;
	int rc = comm_wait(pp->rs);

	t1 = ts_now_ns();
	o->cst.wait_ns += t1 - t0;
	pp->rs = NULL;
	if (rc) {
		char w[TIERS_NAME_MAX * 4 + 64];

		snprintf(w, sizeof(w), "the %s of parameter '%s'", what, pp->name);
		zfail(o, rc, w);
		return;
	}
	if (rs)
		rs_done(o, id, t1);
	else
		ag_done(o, id, t1);
}

/* The parameter at position @k of the lanes' order this step. */
static uint32_t ag_order_at(const struct tier_optim *o, uint32_t k)
{
	return o->ran % 2 ? o->nparams - 1 - k : k;
}

/* Posts parameter @id's all-gather of its outputs. */
static int post_ag(struct tier_optim *o, uint32_t id)
{
	struct param *pp = &o->params[id];
	size_t osz = tier_dtype_size(pp->fout.dtype);
	char w[TIERS_NAME_MAX * 4 + 64];
	int rc;

	pp->rs_t0 = ts_now_ns();
	rc = comm_iallgatherv(o->comm, (char *)pp->fout.ptr + pp->poff * osz, pp->fout.ptr,
			      pp->counts, comm_dt(pp->fout.dtype), &pp->rs);
	if (rc) {
		pp->rs = NULL;
		snprintf(w, sizeof(w), "the all-gather of parameter '%s'", pp->name);
		return zfail(o, rc, w);
	}
	o->cst.n++;
	o->cst.bytes += pp->pn * osz;
	return 0;
}

/* Posts the all-gathers in the lanes' order up to the first parameter not
 * done yet (@all: every one left, done or not: after the lanes). */
static void post_gathers(struct tier_optim *o, bool all)
{
	while (o->ag_next < o->nparams && !o->zrc) {
		uint32_t i = ag_order_at(o, o->ag_next);
		struct param *pp = &o->params[i];

		if (pp->pushed && pp->fout.ptr && o->world > 1) {
			if (!all && atomic_load_explicit(&pp->ag_left, memory_order_acquire))
				break;
			if (post_ag(o, i))
				break;
		}
		o->ag_next++;
	}
}

/* Parameter @id's all-gather completed at @t1. */
static void ag_done(struct tier_optim *o, uint32_t id, uint64_t t1)
{
	struct param *pp = &o->params[id];

	pp->rs = NULL;
	o->cst.ns += t1 - pp->rs_t0;
	trace_span(o->trace, TRACE_COMM, id, atomic_load(&o->begun), pp->rs_t0, t1,
		   pp->pn * tier_dtype_size(pp->fout.dtype));
}

/*
 * Tests the collectives of one kind in flight, oldest first, finishing
 * those done, up to the first that is not (never blocks: MPI progresses
 * its requests inside these calls): the reduce-scatters in their posting
 * order, or (@gather) the all-gathers in the lanes' order.
 */
static void test_inflight(struct tier_optim *o, bool gather)
{
	uint32_t upto = gather ? o->ag_next : o->rs_next;

	for (uint32_t k = 0; k < upto && !o->zrc; k++) {
		uint32_t i = gather ? ag_order_at(o, k) : order_at(o, k);
		struct param *pp = &o->params[i];
		bool done = false;
		int rc;

		if (!pp->rs)
			continue;
		rc = comm_test(pp->rs, &done);
		if (!done)
			break;
		if (rc) {
			char what[TIERS_NAME_MAX * 4 + 64];

			pp->rs = NULL;
			snprintf(what, sizeof(what), "the %s of parameter '%s'",
				 gather ? "all-gather" : "reduce-scatter", pp->name);
			zfail(o, rc, what);
			break;
		}
		if (gather)
			ag_done(o, i, ts_now_ns());
		else
			rs_done(o, i, ts_now_ns());
	}
}

void zero_gather_progress(struct tier_optim *o)
{
	post_gathers(o, false);
	test_inflight(o, true);
}

/* Each rank's outcome of the lanes: 0 and a message. */
struct outcome {
	int32_t rc;
	int32_t fatal;
	char msg[248];
};

/* Every rank's outcome: *@bad is the first rank that failed (-1: none)
 * and *@first its outcome.  0, or the exchange's error. */
static int exchange_outcome(struct tier_optim *o, int local_rc, const char *local_msg,
			    struct outcome *first, int *bad)
{
	struct outcome me;
	double *all;
	int rc;
	size_t n = sizeof(me) / sizeof(double);

	memset(&me, 0, sizeof(me));
	me.rc = local_rc;
	snprintf(me.msg, sizeof(me.msg), "%s", local_msg ? local_msg : "");
	if (!(all = ts_malloc((size_t)o->world * sizeof(me))))
		return ts_err(-ENOMEM, "optimizer: out of memory");
	{
		double mine[sizeof(me) / sizeof(double)];

		memcpy(mine, &me, sizeof(me));
		rc = xchg(o, mine, all, n, "exchanging the ranks' outcomes");
	}
	*bad = -1;
	if (rc) {
		free(all);
		return rc;
	}
	for (int r = 0; r < o->world; r++) {
		struct outcome x;

		memcpy(&x, (char *)all + (size_t)r * sizeof(x), sizeof(x));
		if (x.rc && *bad < 0) {
			*bad = r;
			x.msg[sizeof(x.msg) - 1] = '\0';
			*first = x;
		}
	}
	free(all);
	return 0;
}

static uint64_t groups_hash(const struct tier_optim *o)
{
	uint64_t h = fnv(FNV0, &o->ngroups, sizeof(o->ngroups));

	for (uint32_t g = 0; g < o->ngroups; g++) {
		const struct tier_group_params *q = &o->groups[g];
		double v[6] = { q->lr, q->beta1, q->beta2, q->eps, q->weight_decay, q->decoupled };

		h = fnv(h, v, sizeof(v));
	}
	return h;
}

/* The step's figures every rank must agree on, and its norm. */
enum { X_SUMSQ, X_NONFINITE, X_NPUSHED, X_PUSHED, X_GROUPS, X_APPLIED, X_SCALE, X_ORDER,
       X_N };
/* X_ORDER is not compared: each rank's push order, of which rank 0's sets
 * the next step's posting order. */
#define X_AGREED X_ORDER

static int agree(struct tier_optim *o, const double *all)
{
	static const char *const what[X_N] = {
		[X_NPUSHED] = "pushed %" PRIu64 " gradients this step, rank 0 %" PRIu64 ": every rank pushes the same parameters each step",
		[X_PUSHED] = "pushed other parameters, dtypes or output buffers than rank 0 this step (%" PRIu64 " against %" PRIu64 " fingerprint): every rank pushes the same parameters, in the same dtypes, each with an output buffer or none",
		[X_GROUPS] = "has other group hyperparameters than rank 0 (fingerprint %" PRIu64 " against %" PRIu64 "): a learning-rate schedule applied on some ranks only?",
		[X_APPLIED] = "is at step %" PRIu64 ", rank 0 at step %" PRIu64,
		[X_SCALE] = "has loss scale bits %" PRIx64 ", rank 0 %" PRIx64,
	};

	for (int r = 1; r < o->world; r++)
		for (int k = X_NPUSHED; k < X_AGREED; k++) {
			uint64_t a = d2u(all[X_N * r + k]), b = d2u(all[k]);
			char msg[TIER_ERR_MAX];

			if (a == b)
				continue;
			snprintf(msg, sizeof(msg), what[k], a, b);
			return ts_err(-EINVAL, "optimizer: step %" PRIu64 ": rank %d %s; the step is abandoned and no state changed",
				      o->applied + 1, r, msg);
		}
	return 0;
}

/* The reduce-scatters left, posted in id order (the parameters not
 * pushed skipped), and every one waited for; o->zrc says whether one
 * failed. */
static void finish_reduces(struct tier_optim *o)
{
	for (; o->rs_next < o->nparams && !o->zrc; o->rs_next++)
		if (o->params[order_at(o, o->rs_next)].ready)
			(void)post_rs(o, order_at(o, o->rs_next));
	for (uint32_t k = 0; k < o->nparams && !o->zrc; k++)
		if (o->params[order_at(o, k)].rs)
			wait_one(o, order_at(o, k), true, "reduce-scatter");
}

/*
 * The exchange of the step's figures: this rank's (its pieces' sum of
 * squares, what it pushed, its groups, step and loss scale) against every
 * rank's, which must agree; then *@total and *@nonfinite are the global
 * norm's, and *@npushed what this rank pushed.  On an error the step is
 * abandoned.
 */
static int exchange_norm(struct tier_optim *o, uint64_t *npushed, double *total, bool *nonfinite)
{
	double mine[X_N], *all;
	uint64_t h = FNV0;
	bool nf = false;
	int rc;

	*npushed = 0;
	mine[X_SUMSQ] = 0;
	for (uint32_t i = 0; i < o->nparams; i++) {
		const struct param *pp = &o->params[i];
		uint64_t w[3];

		if (!pp->pushed)
			continue;
		(*npushed)++;
		mine[X_SUMSQ] += pp->sumsq;
		nf |= pp->nonfinite;
		w[0] = i;
		w[1] = (uint64_t)pp->gin.dtype;
		w[2] = pp->fout.ptr ? 1 + (uint64_t)pp->fout.dtype : 0;
		h = fnv(h, w, sizeof(w));
	}
	mine[X_NONFINITE] = nf ? 1.0 : 0.0;
	mine[X_NPUSHED] = u2d(*npushed);
	mine[X_PUSHED] = u2d(h);
	mine[X_GROUPS] = u2d(groups_hash(o));
	mine[X_APPLIED] = u2d(o->applied);
	mine[X_SCALE] = o->p.dynamic_loss_scale ? o->scaler.scale : o->p.loss_scale;
	mine[X_ORDER] = o->push_up > o->push_down ? 1.0 : o->push_down > o->push_up ? -1.0 : 0.0;
	if (!(all = ts_malloc((size_t)o->world * X_N * sizeof(*all)))) {
		optim_abandon(o);
		return ts_err(-ENOMEM, "optimizer: out of memory");
	}
	rc = xchg(o, mine, all, X_N, "exchanging the step's norm");
	if (!rc)
		rc = agree(o, all);
	if (rc) {
		char msg[TIER_ERR_MAX];

		/* abandon first: it clears the last error */
		snprintf(msg, sizeof(msg), "%s", tier_last_error());
		free(all);
		optim_abandon(o);
		return ts_err(rc, "%s", msg);
	}
	/* The next step posts in the order rank 0 pushed this one (kept when
	 * it pushed one parameter, or as many up as down). */
	if (all[X_ORDER] != 0)
		o->post_desc = all[X_ORDER] < 0;
	/* The global norm: the ranks' pieces partition every gradient, so
	 * their sums add up to it; summed in rank order, the same bits on
	 * every rank. */
	*total = 0;
	*nonfinite = false;
	for (int r = 0; r < o->world; r++) {
		*total += all[X_N * r + X_SUMSQ];
		*nonfinite |= all[X_N * r + X_NONFINITE] != 0;
	}
	free(all);
	return 0;
}

/*
 * The lanes run.  The outputs' all-gathers go out while they do, each
 * once its parameter's shards here are updated, in the lanes' order (the
 * same on every rank); the rest after them, whatever happened.  The first
 * error here, a lane's else a collective's, with its message in *@lmsg.
 */
static int run_lanes_gathering(struct tier_optim *o, const char **lmsg)
{
	int lrc = 0;

	*lmsg = NULL;
	for (uint32_t i = 0; i < o->nparams; i++) {
		struct param *pp = &o->params[i];

		atomic_store_explicit(&pp->ag_left, pp->pushed && !pp->frozen ? pp->nshards : 0,
				      memory_order_relaxed);
	}
	o->ag_next = 0;
	o->ag_on = true;
	optim_run_lanes(o);
	o->ag_on = false;
	post_gathers(o, true);
	for (unsigned l = 0; l < LA_LANES; l++)
		if (o->lane[l].rc && !lrc) {
			lrc = o->lane[l].rc;
			*lmsg = o->lane[l].err;
		}
	if (o->zrc && !lrc) {
		lrc = o->zrc;
		*lmsg = o->zerr;
	}
	return lrc;
}

/*
 * A rank failed its lanes (@bad, its outcome @bad_out; @lrc this rank's
 * error), or the exchange of the outcomes failed (@rc): some ranks may
 * have updated their pieces and others not, so the states no longer
 * agree and the optimizer refuses later steps.
 */
static int step_failed(struct tier_optim *o, struct tier_step_result *res, int rc, int lrc, int bad,
		       const struct outcome *bad_out)
{
	uint32_t done = 0;

	zero_drain(o); /* the all-gathers every rank posted */
	for (size_t i = 0; i < o->nact; i++)
		done += o->shards[o->act[i]]->updated;
	o->synced = false;
	if (rc) {
		/* the exchange failed: which ranks updated is unknown */
		o->failed = rc;
		snprintf(o->failed_msg, sizeof(o->failed_msg), "step %" PRIu64 " on rank %d of %d: %s",
			 o->applied + 1, o->rank, o->world, tier_last_error());
	} else {
		o->failed = lrc ? lrc : -EIO;
		snprintf(o->failed_msg, sizeof(o->failed_msg), "step %" PRIu64 ", rank %d of %d: %s",
			 o->applied + 1, bad, o->world, bad_out->msg);
	}
	optim_fill_result(o, res, false, o->pend_norm, o->pend_scale, o->pend_clip);
	trace_span(o->trace, TRACE_STEP, 0, atomic_load(&o->begun), o->t0, ts_now_ns(), 0);
	return ts_err(o->failed, "optimizer: %s (here %u of %zu shards are updated; the ranks' states no longer agree, so later steps are refused: restore a checkpoint)",
		      o->failed_msg, done, (size_t)o->nact);
}

/* Every rank updated its pieces: the step applied, the outputs' gathers
 * waited for, and the step's figures in @res. */
static int step_finish(struct tier_optim *o, struct tier_step_result *res)
{
	uint64_t t_end;
	int rc;

	if ((rc = optim_step_outcome(o, res)))
		return rc; /* not reached: every lane succeeded */
	for (uint32_t k = 0; k < o->nparams && !o->zrc; k++)
		if (o->params[ag_order_at(o, k)].rs)
			wait_one(o, ag_order_at(o, k), false, "all-gather");
	if (o->zrc) {
		o->failed = o->zrc;
		snprintf(o->failed_msg, sizeof(o->failed_msg), "step %" PRIu64 " on rank %d of %d: the state is updated but the outputs were not gathered: %.3900s",
			 o->applied, o->rank, o->world, o->zerr);
		return ts_err(o->failed, "optimizer: %s; later steps are refused", o->failed_msg);
	}
	t_end = ts_now_ns();
	res->step_s = (double)(t_end - o->t0) * 1e-9;
	res->collectives = o->cst.n;
	res->comm_bytes = o->cst.bytes;
	res->comm_s = (double)o->cst.ns * 1e-9;
	res->comm_wait_s = (double)o->cst.wait_ns * 1e-9;
	{
		char detail[TIER_ERR_MAX];
		int wrc = wb_take_error(o->wb, detail, sizeof(detail));

		if (wrc)
			TIER_WARN(TIER_SS_OPTIM, "optimizer: a write-back failed, its bytes stay dirty in memory: %s",
				  detail);
	}
	return 0;
}

int zero_end(struct tier_optim *o, struct tier_step_result *res)
{
	double total;
	uint64_t npushed;
	bool nonfinite;
	struct outcome bad_out;
	const char *lmsg;
	int bad, rc, lrc;

	finish_reduces(o);
	if (o->zrc)
		return step_comm_failed(o);
	rc = exchange_norm(o, &npushed, &total, &nonfinite);
	if (rc)
		return rc;
	if (!npushed) {
		optim_abandon(o);
		optim_fill_result(o, res, false, 0.0,
				  o->p.dynamic_loss_scale ? o->scaler.scale : o->p.loss_scale, 1.0);
		return 0;
	}
	if (optim_step_decide(o, total, nonfinite)) {
		optim_abandon(o);
		optim_fill_result(o, res, false, o->pend_norm, o->pend_scale, 1.0);
		trace_span(o->trace, TRACE_STEP, 0, atomic_load(&o->begun), o->t0, ts_now_ns(), 0);
		TIER_INFO(TIER_SS_OPTIM, "optimizer: step skipped on rank %d of %d: a gradient holds an inf or nan (loss scale %g, next %g)",
			  o->rank, o->world, o->pend_scale, res->next_loss_scale);
		return 0;
	}
	lrc = run_lanes_gathering(o, &lmsg);
	rc = exchange_outcome(o, lrc, lmsg, &bad_out, &bad);
	if (rc || bad != -1)
		return step_failed(o, res, rc, lrc, bad, &bad_out);
	return step_finish(o, res);
}

/* ------------------------------------------------------------ checkpoints */

int zero_agree(struct tier_optim *o, int rc, const char *what)
{
	struct outcome first;
	char msg[TIER_ERR_MAX];
	int bad;

	int xrc;

	snprintf(msg, sizeof(msg), "%s", rc ? tier_last_error() : "");
	if ((xrc = exchange_outcome(o, rc, msg, &first, &bad)))
		return xrc;
	if (bad == -1)
		return 0;
	if (rc)
		return ts_err(rc, "%s", msg);
	return ts_err(-EIO, "%s: failed on rank %d of %d: %s", what, bad, o->world, first.msg);
}

int zero_resume_check(struct tier_optim *o, uint64_t gen)
{
	double mine[3] = { u2d(o->applied), u2d(gen), u2d(o->nparams) }, *all;
	int rc;

	if (!(all = ts_malloc((size_t)o->world * 3 * sizeof(*all))))
		return ts_err(-ENOMEM, "tier_optim_resume: out of memory");
	rc = xchg(o, mine, all, 3, "tier_optim_resume: comparing the ranks' checkpoints");
	for (int r = 1; !rc && r < o->world; r++) {
		if (d2u(all[3 * r]) == d2u(all[0]) && d2u(all[3 * r + 2]) == d2u(all[2]))
			continue;
		rc = ts_err(-ESTALE, "tier_optim_resume: rank %d resumed step %" PRIu64 " (generation %" PRIu64 ", %" PRIu64 " parameters), rank 0 step %" PRIu64 " (generation %" PRIu64 ", %" PRIu64 " parameters): the ranks' newest checkpoints differ (a checkpoint that failed on some rank); reopen every rank's store at a generation of the same step (tier_store_params.generation)",
			    r, d2u(all[3 * r]), d2u(all[3 * r + 1]), d2u(all[3 * r + 2]),
			    d2u(all[0]), d2u(all[1]), d2u(all[2]));
	}
	free(all);
	return rc;
}
