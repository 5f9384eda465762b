/*
 * optim_impl.h - private to runtime/optim/optim*.c: the optimizer's structures
 * and what its files share.  optim.c owns the lifetime (parameters,
 * creation, destroy) and what the live view shows; optim_param.c the
 * parameters (added, read back, removed) and the groups; optim_step.c the
 * step (begin, push, end) and the update of each shard on its lane;
 * optim_gpu.c, optim_zero.c, optim_ckpt.c and optim_export.c say theirs
 * below.
 */
#ifndef TIER_RUNTIME_OPTIM_IMPL_H
#define TIER_RUNTIME_OPTIM_IMPL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/error.h"
#include "common/names.h"
#include "kernels/adam_math.h"
#include "prefetch/lookahead.h"
#include "tierstore.h"

#define SHARD_ALIGN 64 /* elements */
/* "auto" (optim_step.c, auto_adjust): its steps, one at 0.5 that measures
 * the lanes' rates, then its AUTO_TRIES candidates, each timed */
#define AUTO_TRIES 3
#define AUTO_STEPS (1 + AUTO_TRIES)

struct shard {
	struct tier_optim *o;
	uint32_t param, index;   /* owning parameter; index among all shards */
	struct tier_obj *obj;
	size_t off, n;           /* elements [off, off + n) of the parameter */
	uint64_t bytes;
	uint64_t after;          /* this step: bytes of items after it */
	bool updated;            /* updated by this step, or by the pending one */
	unsigned char lane;      /* this step's lane */
	/* the store's event hook (store lock held) */
	uint64_t fill_ns[TIER_LEVELS], flush_ns[TIER_LEVELS];
};

struct param {
	char *name;
	size_t numel;
	uint32_t first, nshards;
	uint32_t group;
	uint64_t step;           /* updates applied: its bias-correction count */
	bool frozen;             /* not streamed, no gradient taken */
	/* this step */
	bool pushed;
	struct tier_tensor grad, out;
	double sumsq;
	bool nonfinite;
	bool pend_pushed;        /* the pending step's gradient: pushed, */
	double pend_sumsq;       /* and its sum of squares */
	/*
	 * Partitioned (o->comm; optim_zero.c): this rank keeps elements
	 * [poff, poff + pn) of the parameter, its shards cover that piece
	 * (their off counts from poff), and a step takes its gradient through
	 * a reduce-scatter into rbuf.  Not partitioned: poff 0, pn numel.
	 */
	size_t poff, pn;
	size_t *counts;          /* each rank's count of it (o->world of them) */
	void *rbuf;              /* its piece of the averaged gradient (pn x 4 bytes) */
	struct tier_tensor gin;  /* this step: the pushed gradient, whole, */
	struct tier_tensor fout; /* and output buffer, whole (ptr NULL: none) */
	bool ready;              /* pushed, its reduce-scatter not posted yet */
	struct comm_req *rs;     /* its reduce-scatter or all-gather in flight */
	uint64_t rs_t0;
	_Atomic uint32_t ag_left;/* its shards this step's lanes have yet to update */
};

struct lane {
	int rc;
	bool fatal;              /* failed in an update: a shard may be half updated */
	char err[TIER_ERR_MAX];
	uint64_t stall_ns, busy_ns, bytes;
	uint32_t shards;
};

/*
 * One shard in flight on the GPU lane (optim_gpu.c): its gradient in,
 * the update, its parameter copy out, all queued on the slot's stream
 * and ended by its event.  The lane keeps o->nslots of them
 * (TIER_GPU_SLOTS, 3 by default, at most GPU_SLOTS_MAX), so one shard's
 * gradient comes in while another's update runs and a third's copy goes
 * out.
 */
#define GPU_SLOTS_MAX 8
enum { TEV_START, TEV_GRAD, TEV_KERNEL, TEV_OUT, TEV_KSTART, TEV_N };
struct gpu_slot {
	void *stream, *ev;       /* CUDA: its stream and end event (emulated: NULL) */
	void *dgrad, *dout;      /* device buffers of one shard: a host gradient
				  * comes into dgrad, a host copy leaves from dout
				  * (emulated: host memory) */
	void *pgrad, *pout;      /* CUDA: pinned staging for pageable host buffers */
	struct la_item *it;      /* the item in flight (NULL: free) */
	struct la_item *pre;     /* free, with this item's gradient already
				  * queued into dgrad (TIER_GPU_GRAD_AHEAD) */
	bool failed;             /* its work could not all be queued */
	void *out_dst;           /* a pageable host copy: pout goes there when */
	size_t out_len;          /* the slot ends, out_len bytes */
	uint64_t t0, t1;         /* queued at t0; emulated: the update ended at t1 */
	/* Traced (o->trace), CUDA: timing events on the stream at the work's
	 * start, after the gradient in, after the kernel, after the copy out
	 * and before the kernel (the trace's grad_in, kernel_gpu, out_d2h
	 * spans), the host clock at the start, and the bytes in and out (0:
	 * none on the link) */
	void *tev[TEV_N];
	bool timed;
	uint64_t tq;
	size_t in_len, link_out_len;
};

/* struct tier_optim's magic while open (TS_HANDLE, common/error.h). */
#define OPTIM_MAGIC 0x4f50544du /* "OPTM" */
#define OPTIM_ARG(o) TS_HANDLE(o, OPTIM_MAGIC, "optimizer", "tier_optim")
#define OPTIM_ARG_OR(o, ret) TS_HANDLE_OR(o, OPTIM_MAGIC, "optimizer", "tier_optim", ret)

struct comm_req;

struct tier_optim {
	uint32_t magic;        /* OPTIM_MAGIC; TS_MAGIC_DEAD once destroyed */
	struct tier_store *s;
	struct tier_optim_params p;
	enum tier_dtype md;
	int rounding, out_rounding; /* enum tier_rounding */
	uint64_t seed;              /* stochastic rounding's run seed */
	size_t mb;               /* bytes per moment element */
	size_t shard_elems;
	uint64_t dram_cap, hbm_cap, lookahead, hbm_budget, keep, shard_bytes;
	uint32_t write_behind;   /* write-backs in flight (the manifest's) */
	bool home_nvme;

	struct param *params;
	struct ts_names pnames;      /* params by name: items are index + 1 (optim_param_key) */
	uint32_t nparams, params_cap;
	struct shard **shards;
	uint32_t nshards, shards_cap;
	uint64_t state_bytes;        /* the shards' bytes in all (optim_state_bytes) */
	struct tier_group_params *groups; /* group 0 from o->p */
	uint32_t ngroups, groups_cap;
	uint32_t *act;           /* the shards a step streams (not frozen), */
	uint32_t nact;           /* rebuilt with the schedule */

	double cpu_fraction;
	bool auto_split;
	unsigned auto_left;
	double auto_f[AUTO_TRIES], auto_t[AUTO_TRIES]; /* "auto": the CPU shares
				  * tried, and each one's step (its lanes' time) */
	struct tier_pool *pool;
	struct tier_loss_scaler scaler;
	uint64_t applied;        /* steps applied: the bias-correction count */
	uint64_t ran;            /* steps that ran to their end: the order's parity */
	uint64_t ckpt_gen;       /* the last checkpoint (0: none) */
	_Atomic uint64_t begun;  /* for the trace */
	bool synced;             /* the store's schedule matches the next step */
	int failed;              /* an update failed: later steps refused */
	char failed_msg[TIER_ERR_MAX + 64];
	/*
	 * A step that failed part way at a fill is pending (docs/optimizer.md,
	 * "A step that fails"): the shards it updated are marked, o->ap stays
	 * its update, and the next step must bring the same gradients (their
	 * sums of squares are compared) to update the others and complete it.
	 */
	bool pending;
	double pend_norm, pend_scale, pend_clip; /* the step's (kept while pending) */

	/* the step in progress */
	_Atomic bool in_step;  /* claimed by tier_optim_begin (compare-exchange) */
	uint64_t t0;
	struct la_item *items;
	unsigned char *lanes;
	uint32_t *order;
	size_t nitems;
	struct lookahead la;
	struct tier_store_stats st0;
	struct tier_adam_params ap;

	/* the GPU lane (optim_gpu.c) */
	unsigned hbm_caps;       /* the HBM backend's HBM_CAP_*; 0: no GPU lane */
	bool dev_host;           /* the HBM tier's memory is host memory (emulated) */
	int gpu;
	void *stream;            /* CUDA: the gradient check's and the exchanges' stream */
	struct gpu_slot slot[GPU_SLOTS_MAX]; /* the lane's shards in flight: */
	unsigned nslots;                 /* slot[0..nslots) open (TIER_GPU_SLOTS), */
	bool grad_ahead;                 /* TIER_GPU_GRAD_AHEAD */
	unsigned slot_head, slot_count;  /* the oldest, and how many */
	void *host_grad, *host_out; /* CUDA: pinned staging for device buffers on the CPU lane */
	pthread_t thread;
	bool thread_started, quit;
	pthread_mutex_t lock;
	pthread_cond_t cond;
	uint64_t go, done;       /* GPU lane generations */
	struct lane lane[LA_LANES];

	/* partitioning (optim_zero.c); comm NULL: not partitioned, rank 0 of 1 */
	struct tier_comm *comm;
	int rank, world;
	bool comm_dev;           /* the comm's buffers are device memory */
	void *xdev;              /* device comm: the exchanges' staging, */
	size_t xdev_len;         /* xdev_len bytes */
	bool layout_dirty;       /* parameters or groups changed: the next begin
				  * checks that every rank has the same */
	uint32_t rs_next;        /* the next position to reduce-scatter, in the
				  * step's posting order (zero_order_at) */
	bool post_desc;          /* that order: descending ids (backward's) or
				  * ascending; agreed, from rank 0's pushes */
	uint32_t last_push;      /* this step's pushes: the last id, and how */
	uint32_t push_up, push_down; /* often the next was above or below it */
	uint32_t ag_next;        /* the next position to all-gather, in the lanes'
				  * order (descending ids when o->ran is odd) */
	bool ag_on;              /* the lanes run: all-gathers go out as they can */
	int zrc;                 /* this step's first collective error */
	char zerr[TIER_ERR_MAX];
	struct {
		uint32_t n;
		uint64_t bytes, ns, wait_ns;
	} cst;                   /* this step's collectives */

	struct wb *wb;
	struct trace *trace;
	struct live_feed *feed;  /* the store's live view, or NULL */
};

/* optim.c */

/* tier_optim_create's work; @shard_elems, when not 0, is the shard size
 * in elements (a resumed optimizer keeps its checkpoint's). */
int optim_create(struct tier_store *s, const struct tier_optim_params *p, size_t shard_elems,
		 struct tier_optim **out);

/* 0, or -EINVAL naming @what's bad value. */
int optim_check_group(const char *what, const struct tier_group_params *g);

/* The bytes of every shard's state. */
uint64_t optim_state_bytes(const struct tier_optim *o);
/* The bytes of shards [@first, @first + @n): kept in o->state_bytes as
 * parameters come and go, so that adding n parameters costs O(n). */
uint64_t optim_shards_bytes(const struct tier_optim *o, uint32_t first, uint32_t n);

/*
 * What the live view shows of this optimizer: after a step (@res), or with
 * @res NULL when the parameters changed.
 */
void optim_feed_update(struct tier_optim *o, const struct tier_step_result *res);

/* optim_param.c */

/*
 * Fills a new shard's state (@ptr: its bytes in DRAM, sh->bytes long:
 * master, exp_avg, exp_avg_sq) in place of the initial values; 0 or an
 * error with the detail.
 */
typedef int (*optim_fill_fn)(void *arg, struct tier_optim *o, const struct shard *sh, void *ptr);

/* Room for one more parameter and @nsh more shards (counts checked
 * already): 0, or -ENOMEM naming @name. */
int optim_add_room(struct tier_optim *o, const char *name, uint32_t nsh);

/* tier_optim_add_param_to, with @fill (may be NULL) writing each shard. */
int optim_add_param(struct tier_optim *o, uint32_t gid, const char *name, size_t numel,
		    const float *init, optim_fill_fn fill, void *arg, uint32_t *id);

/* Appends group @g (checked): 0 or -ENOMEM. */
int optim_push_group(struct tier_optim *o, const struct tier_group_params *g);

/* optim_ckpt.c */

/* Whether a commit's record is an optimizer's. */
bool optim_record_is(const void *rec, size_t len);

/* optim_zero.c: the partitioned optimizer (docs/distributed.md) */

/* At creation: takes @comm (checked; NULL: not partitioned). */
int zero_setup(struct tier_optim *o, struct tier_comm *comm);
/* Parameter @pp's piece (numel set): poff, pn, counts and rbuf.  0 or
 * -ENOMEM / -EOVERFLOW naming it. */
int zero_param_split(struct tier_optim *o, struct param *pp);
/* Frees what zero_param_split allocated. */
void zero_param_free(struct tier_optim *o, struct param *pp);
/* tier_optim_begin's part, the step claimed: every rank has the same
 * parameters (checked when they changed).  0, or -EINVAL naming the rank
 * and parameter that differ, or the comm's error. */
int zero_begin(struct tier_optim *o);
/* tier_optim_push's part once the tensors are checked. */
int zero_push(struct tier_optim *o, uint32_t id, const struct tier_tensor *grad,
	      const struct tier_tensor *out);
/* Waits out the step's collectives still in flight (a step abandoned:
 * the other ranks posted the same ones) and forgets them. */
void zero_drain(struct tier_optim *o);
/* While the lanes run (API thread): posts the all-gathers of the
 * parameters whose shards are all updated, in the lanes' order, and tests
 * those in flight. */
void zero_gather_progress(struct tier_optim *o);
/* tier_optim_end of a partitioned optimizer. */
int zero_end(struct tier_optim *o, struct tier_step_result *res);
/* After this rank's part of a checkpoint (@rc): every rank's outcome.
 * 0 when every rank committed, else the first failure, named. */
int zero_agree(struct tier_optim *o, int rc, const char *what);
/* After a resume: every rank resumed the same step.  0 or -ESTALE. */
int zero_resume_check(struct tier_optim *o, uint64_t gen);

/* optim_step.c */

/* The step's decisions from its gradients (norm, skip, clip); true when
 * it is skipped (an inf or nan). */
bool optim_step_decide(struct tier_optim *o, double total, bool nonfinite);
/* Runs both lanes over this step's items and waits for them. */
void optim_run_lanes(struct tier_optim *o);
/* After the lanes: applies a complete step or leaves it pending/failed. */
int optim_step_outcome(struct tier_optim *o, struct tier_step_result *res);
/* Fills @res from the step's figures. */
void optim_fill_result(struct tier_optim *o, struct tier_step_result *res, bool applied,
		       double norm, double scale, double clip);
/* Sums of squares and the inf/nan flag of @n elements of a gradient
 * (host or the optimizer's device). */
int optim_grad_check(struct tier_optim *o, const void *ptr, enum tier_dtype dt,
		     enum tier_mem mem, size_t n, double *sumsq, bool *nonfinite);

/* The GPU lane's thread: runs lane 1 of each step it is handed. */
void *optim_gpu_main(void *arg);

/* The per-shard work both lanes share.  optim_item_args: the update's
 * arguments for taken item @it (its group's hyperparameters, its piece of
 * the gradient and of the output). */
void optim_item_args(struct tier_optim *o, const struct la_item *it, struct tier_adam_params *ap,
		     struct tier_adam_tensors *t);
/* Records @lane's first failure, @rc with tier_last_error() (prefixed
 * "'@obj': update: " when @obj is not NULL); @fatal: a shard may be half
 * updated. */
void optim_lane_fail(struct tier_optim *o, unsigned lane, int rc, bool fatal, const char *obj);
/* The next item of @lane (la_take) in *it, taken at *now: 0 to update
 * it; 2 when its parameter has no gradient this step (given back); 1
 * when the lane has no item left; or an error (recorded in the lane, the
 * window aborted, the item given back). */
int optim_take(struct tier_optim *o, unsigned lane, struct la_item **it, uint64_t *now);
/* After @it's update on @lane, from @u0 to @u1: its span, its marks, its
 * release (dirty) and write-back.  0, or the release's error (the lane
 * failed, the window aborted). */
int optim_item_updated(struct tier_optim *o, unsigned lane, struct la_item *it, uint64_t u0,
		       uint64_t u1);

/* optim_gpu.c */

/* Opens the GPU lane: its slots' streams, events and buffers of
 * @shard_bytes each; 0 or the error.  gpu_lane_close frees what it got. */
int gpu_lane_open(struct tier_optim *o, size_t shard_bytes);
void gpu_lane_close(struct tier_optim *o);
/* Lane 1 of the step: every item of the GPU lane, o->nslots in flight. */
void optim_gpu_lane(struct tier_optim *o);

/* Ends a step begun and not finished: its window released, nothing
 * updated (a failed end, or destroy inside a step). */
void optim_abandon(struct tier_optim *o);


/* ------------------------------------------------------- a shard's layout */

/*
 * The bytes of a shard of @n elements (docs/optimizer.md, "Shards"):
 * fp32 and bf16 moments: [master f32 x n][exp_avg x n][exp_avg_sq x n];
 * q8: [master f32 x n][exp_avg scales f32 x nb][exp_avg_sq scales x nb]
 * [exp_avg codes x n][exp_avg_sq codes x n], nb = ceil(n / TIER_Q8_BLOCK),
 * so that every array is aligned to its element.
 */
struct shard_view {
	float *param;
	void *m, *v;
	float *ms, *vs; /* q8: the blocks' scales; else NULL */
};

static inline uint64_t q8_nblocks(uint64_t n)
{
	return (n + TIER_Q8_BLOCK - 1) / TIER_Q8_BLOCK;
}

static inline uint64_t state_bytes_n(enum tier_dtype md, uint64_t n)
{
	if (md == TIER_Q8)
		return n * 6 + q8_nblocks(n) * 8;
	return n * (4 + 2 * (uint64_t)tier_dtype_size(md));
}

/* Elements of a shard of at most @bytes, a multiple of @align. */
static inline uint64_t state_elems_in(enum tier_dtype md, uint64_t bytes, uint64_t align)
{
	uint64_t n = md == TIER_Q8 ? bytes / (6 * TIER_Q8_BLOCK + 8) * TIER_Q8_BLOCK
				   : bytes / (4 + 2 * (uint64_t)tier_dtype_size(md));

	return n / align * align;
}

static inline void shard_view_of(enum tier_dtype md, void *base, size_t n, struct shard_view *v)
{
	char *b = base;
	size_t mb = md == TIER_Q8 ? 1 : tier_dtype_size(md);

	v->param = (float *)base;
	if (md == TIER_Q8) {
		size_t nb = (size_t)q8_nblocks(n);

		v->ms = (float *)(void *)(b + 4 * n);
		v->vs = v->ms + nb;
		v->m = b + 4 * n + 8 * nb;
		v->v = b + 4 * n + 8 * nb + n;
		return;
	}
	v->ms = v->vs = NULL;
	v->m = b + 4 * n;
	v->v = b + (4 + mb) * n;
}

/* q8 shards' moments to and from fp32 (optim_param.c). */
void optim_q8_decode(const void *shard, size_t n, float *m, float *v);
void optim_q8_encode(void *shard, size_t n, const float *m, const float *v);

/* The element alignment of shards and pieces: q8 keeps its blocks whole. */
static inline size_t optim_align(enum tier_dtype md)
{
	return md == TIER_Q8 ? TIER_Q8_BLOCK : SHARD_ALIGN;
}

/* The name of parameter item - 1 of the optimizer @ctx (o->pnames' key). */
const char *optim_param_key(const void *ctx, uintptr_t item);

#endif
