/*
 * tierstore.h - the public header of libtierstore for a trainer: include
 * this one.
 *
 * tierstore keeps optimizer state in three tiers: GPU memory (HBM) caches
 * pinned host memory (DRAM), which caches NVMe files driven by io_uring.  A
 * node is described by a YAML tier manifest (docs/manifest.md).
 *
 * Conventions (docs/api.md):
 *  - Every int-returning function returns 0 on success or a negative errno
 *    (-EINVAL, -ENOMEM, -ENOENT, ...).  Nothing sets errno.
 *  - After a failure, tier_last_error() returns a thread-local detail message
 *    naming what failed and where ("laptop.yaml:7:3: unknown key ...").
 *  - A NULL pointer argument is refused with -EINVAL (NULL, 0 or false
 *    from a function returning a pointer, size or bool; nothing from a void
 *    one) and the detail "FN: ARG is NULL", unless the argument is
 *    documented as optional; close and free functions take NULL as a no-op.
 *  - Objects are returned through out-parameters, never as the only error
 *    signal.  Parameter structs have a size field and an exported init
 *    function (tierstore/common.h).  Names are tier_<object>_<verb>; no
 *    CUDA or liburing type appears here, and the header is valid C17 and
 *    C++.
 *
 * What a trainer needs: tierstore/common.h (version, errors, options,
 * element types, thread pool, tickets, latency histograms, and the
 * store's parameters and the loss scaler's state), here the manifest,
 * opening a store, the optimizer and the communicator, and
 * tierstore/live.h, included at the end, the live view.  The calls that
 * drive the tiers and kernels directly (the NVMe tier, store objects,
 * the AdamW kernels, GPU buffers: what tier-bench uses) are the toolkit,
 * tierstore/toolkit.h (docs/toolkit.md), which includes this header.
 */
#ifndef TIERSTORE_H
#define TIERSTORE_H

#include "tierstore/common.h"

#ifdef __cplusplus
extern "C" {
#endif

/* --------------------------------------------------------------- devices */

/*
 * Number of CUDA devices this process can use.  0 (and *count 0) on a
 * machine without a GPU or driver, or in a build without CUDA; @why, when
 * not NULL, then receives the reason.  Returns 0 or -errno.
 * (tier_gpu_selftest and GPU buffers: tierstore/toolkit.h.)
 */
TIER_API int tier_gpu_count(int *count, char *why, size_t whylen);

/* -------------------------------------------------------------- manifest */

/* offload_fraction: chosen by measuring (tier_optim_params,
 * tier_manifest_info). */
#define TIER_OFFLOAD_AUTO (-1.0)

/*
 * A tier manifest, parsed, validated against this machine and with every
 * default resolved (detected GPU, NUMA node, sizes in bytes).  Opaque.
 */
struct tier_manifest;

/* Flags for tier_manifest_parse(), tier_manifest_load_rank() and
 * tier_manifest_parse_rank(). */
enum {
	/*
	 * Check the document against the schema only: touch no file
	 * system, GPU or /proc.  Machine-dependent values (percentages,
	 * "auto") are resolved against fixed nominal machine facts.
	 */
	TIER_MANIFEST_NO_PROBE = 1u << 0,
};

/*
 * Reads and validates the manifest at @path.
 *
 * @return 0 and *@out set, or -ENOENT/-EACCES/-EIO when the file cannot be
 *   read, -EINVAL when it is not a valid manifest for this machine, -ENOMEM.
 *   Every problem found is in tier_last_error(), one per line, each as
 *   "FILE:LINE:COL: message".
 */
TIER_API int tier_manifest_load(const char *path, struct tier_manifest **out);

/*
 * Parses a manifest held in memory.  @name is used in messages in place of
 * a file name.  @text need not be NUL-terminated.
 */
TIER_API int tier_manifest_parse(const char *text, size_t len,
				 const char *name, unsigned flags,
				 struct tier_manifest **out);

/*
 * Where this process stands among the ranks of a distributed job: what
 * ${RANK}, ${LOCAL_RANK}, ${WORLD_SIZE} and ${LOCAL_WORLD_SIZE} expand to
 * in a manifest and what "/local_world" in a size divides by
 * (docs/manifest.md).  A single process is rank 0 of a world of 1.
 */
struct tier_rank {
	int rank;                  /* 0 .. world_size - 1 */
	int local_rank;            /* 0 .. local_world_size - 1: the rank on this node */
	int world_size;            /* ranks in the job, >= 1 */
	int local_world_size;      /* ranks on this node, 1 .. world_size */
};

/*
 * The rank the launcher's environment gives this process, each field from
 * the first variable set of (in this order) torchrun's, Open MPI's,
 * MPICH's and Slurm's; rank 0 of 1 when none is set.  Returns 0, or
 * -EINVAL when a variable is not a whole number or the values disagree
 * (rank >= world size, ...), naming the variable and its value.
 */
TIER_API int tier_rank_from_env(struct tier_rank *out);

/*
 * tier_manifest_load() with TIER_MANIFEST_* @flags, and
 * tier_manifest_parse(), for the rank @rank (NULL: tier_rank_from_env(),
 * as tier_manifest_load() and tier_manifest_parse() take).  -EINVAL when
 * @rank is inconsistent.
 */
TIER_API int tier_manifest_load_rank(const char *path, unsigned flags,
				     const struct tier_rank *rank,
				     struct tier_manifest **out);
TIER_API int tier_manifest_parse_rank(const char *text, size_t len,
				      const char *name, unsigned flags,
				      const struct tier_rank *rank,
				      struct tier_manifest **out);

/*
 * The manifest a tool uses: @path when given (not NULL or ""), else
 * $TIER_MANIFEST (the options table), else the embedded default.  Same
 * returns as tier_manifest_load().
 */
TIER_API int tier_manifest_resolve(const char *path, struct tier_manifest **out);

/*
 * The embedded default manifest for this machine: no GPU tier unless a GPU
 * is present, DRAM a modest share of MemAvailable, one NVMe file under
 * $TIER_DATA (or ./tier-data/) sized from the free space there.
 */
TIER_API int tier_manifest_default(struct tier_manifest **out);

/*
 * The embedded default with its NVMe file under @dir instead of
 * $TIER_DATA: the NVMe capacity is sized from the free space of @dir's
 * file system, direct I/O probed there.  For a program that gives each
 * store a directory of its own (the Python TierAdamW without a manifest).
 * Returns tier_manifest_default()'s returns, or -EINVAL when @dir is NULL
 * or empty.  Since 0.8.
 */
TIER_API int tier_manifest_default_in(const char *dir, struct tier_manifest **out);

/*
 * The YAML text of the embedded default for this machine, before
 * validation.  Caller frees with free().  Returns 0, -ENOMEM or -EIO.
 */
TIER_API int tier_manifest_default_text(char **out);

/*
 * Writes the effective configuration as YAML: every key present, every
 * default resolved, sizes in bytes.  The output is itself a valid manifest.
 * Returns 0 or -EIO.
 */
TIER_API int tier_manifest_emit(const struct tier_manifest *m, FILE *out);

/* The file name the manifest came from ("<default>" for the default). */
TIER_API const char *tier_manifest_source(const struct tier_manifest *m);

/*
 * The effective configuration: what the manifest resolved to on this
 * machine, every default filled in (docs/manifest.md).  The strings point
 * into @m and live as long as it.
 */
struct tier_manifest_info {
	const char *source;        /* the file, or "<default>" */
	const char *name;          /* the store's name */
	int gpu;                   /* the HBM tier's CUDA device; -1: no HBM tier */
	uint64_t hbm_capacity;     /* bytes */
	uint64_t dram_capacity;    /* bytes */
	int numa_node;             /* -1: not bound */
	uint32_t npaths;           /* NVMe paths; 0: DRAM is every object's home */
	uint64_t nvme_capacity;    /* bytes, over every path */
	uint64_t stripe_unit;      /* bytes */
	bool checksum;             /* crc32c per stripe unit */
	uint32_t keep_commits;     /* nvme.keep_commits: commits kept for roll back */
	uint64_t lookahead;        /* prefetch.lookahead, bytes */
	uint32_t write_behind;     /* prefetch.write_behind */
	double offload_fraction;   /* optimizer.offload_fraction; TIER_OFFLOAD_AUTO: auto */
	enum tier_dtype moment_dtype;
	int rounding;              /* optimizer.rounding: enum tier_rounding */
	int out_rounding;          /* optimizer.out_rounding */
	uint64_t seed;             /* optimizer.seed */
	uint64_t shard_size;       /* optimizer.shard_size, bytes */
	struct tier_rank rank;     /* the rank the manifest was resolved for */
};
TIER_API int tier_manifest_info(const struct tier_manifest *m, struct tier_manifest_info *out);

/* NVMe path @i (0 .. npaths - 1) of the effective configuration. */
struct tier_manifest_path {
	const char *path;          /* as written, ${VAR} expanded */
	const char *file;          /* the backing file (absolute) */
	uint64_t capacity;         /* bytes */
	uint32_t block_size;       /* transfer alignment, bytes */
	uint32_t queue_depth;
	bool direct;               /* O_DIRECT */
};
/* 0, or -EINVAL (NULL) or -ERANGE (no path @i). */
TIER_API int tier_manifest_path(const struct tier_manifest *m, unsigned i,
				struct tier_manifest_path *out);

TIER_API void tier_manifest_free(struct tier_manifest *m);


/* ------------------------------------------------ opening a store */

/*
 * Opens a store over the manifest's tiers (@p may be NULL).  Returns 0,
 * -EINVAL (bad parameters, named in the detail), -ENOMEM, -ENODEV (an HBM
 * backend that is not there) or the NVMe tier's errors.
 */
TIER_API int tier_store_open(const struct tier_manifest *m, const struct tier_store_params *p,
			     struct tier_store **out);

/*
 * Writes every dirty byte down to its home, then frees everything.  An
 * object still pinned is a caller bug: it is reported (-EBUSY) and its
 * data flushed as it stands.  Returns 0 or the first error met; -EBUSY
 * with nothing done (the store stays open) while an optimizer on it
 * (tier_optim_create, _resume, _import) is alive: tier_optim_destroy it
 * first.
 */
TIER_API int tier_store_close(struct tier_store *s);

/* ------------------------------------------------------------ optimizer */

/*
 * The optimizer: Adam/AdamW over parameters whose state (fp32 master
 * weights and both moments) lives on a store, cut into shards of the
 * manifest's optimizer.shard_size, one store object per shard.  Each step
 * streams the shards up the tiers ahead of the update (a lookahead window
 * of prefetch.lookahead bytes), updates a share of them on the CPU (SIMD
 * kernels on DRAM, over a thread pool) and the rest on the HBM tier (the
 * CUDA kernel; with the emulated "host" HBM backend, the CPU kernel on the
 * HBM tier's own thread), and writes the updated state back down behind
 * the update.  The order of the shards alternates every step, and the
 * store evicts by it.  The results equal tier_adam_step() run in memory on
 * the same data, bit for bit, whatever the split.  docs/optimizer.md says
 * more.  One thread drives an optimizer at a time; a tier_optim_begin or
 * tier_optim_step while a step is begun, from any thread, is -EBUSY (the
 * first to begin claims the step atomically).
 */
struct tier_optim;

/* Where a caller's buffer lives. */
enum tier_mem {
	TIER_MEM_HOST = 0,     /* host memory */
	TIER_MEM_DEVICE = 1,   /* memory of the HBM tier's device (the emulated
				* "host" backend's device memory is host memory) */
};

/* A caller's array: gradients in, updated parameters out.  Contiguous,
 * numel elements of dtype; numel must equal the parameter's (a tensor of
 * another size is refused with -EINVAL naming the parameter, never read
 * or written past its end). */
struct tier_tensor {
	void *ptr;             /* NULL: none (for an output) */
	enum tier_dtype dtype;
	enum tier_mem mem;
	size_t numel;          /* elements */
};

/* moment_dtype: the manifest's optimizer.moment_dtype. */
#define TIER_DTYPE_MANIFEST (-1)
/* rounding, out_rounding: the manifest's optimizer.rounding, .out_rounding;
 * seed: its optimizer.seed. */
#define TIER_ROUND_MANIFEST (-1)
#define TIER_SEED_MANIFEST UINT64_MAX

/* offload_fraction: the manifest's optimizer.offload_fraction. */
#define TIER_OFFLOAD_MANIFEST (-2.0)
/* The lr of tier_optim_step / tier_optim_begin that keeps each group's
 * learning rate (at the first step, the creation lr).  Any other lr is
 * the step's, for an optimizer of one group: a finite value >= 0, 0
 * included (the parameters stay, the moments and the step count advance,
 * as torch.optim.AdamW at lr 0).  An optimizer of several groups takes
 * TIER_LR_KEEP only: each group's lr is set with tier_optim_set_group. */
#define TIER_LR_KEEP (-1.0)

struct tier_optim_params {
	uint32_t size;         /* sizeof, set by tier_optim_params_init */
	/* torch.optim.AdamW (decoupled = true) / Adam (false) semantics;
	 * lr: finite, >= 0.  These are group 0's (the default group). */
	double lr, beta1, beta2, eps, weight_decay;
	bool decoupled;
	/* moments: TIER_FP32, TIER_BF16, TIER_Q8, or TIER_DTYPE_MANIFEST */
	int moment_dtype;
	/* how bf16 moments (rounding) and bf16 parameter copies
	 * (out_rounding) are rounded: enum tier_rounding or
	 * TIER_ROUND_MANIFEST; and the seed of stochastic rounding's random
	 * stream (each parameter's is this mixed with its id), or
	 * TIER_SEED_MANIFEST.  docs/kernels.md, "Rounding". */
	int rounding, out_rounding;
	uint64_t seed;
	/* share of the shards updated on the CPU, in [0, 1] (the rest on the
	 * HBM tier; 1 without one); TIER_OFFLOAD_AUTO measures both rates in
	 * the first steps and picks the split that minimises step time;
	 * TIER_OFFLOAD_MANIFEST: the manifest's optimizer.offload_fraction */
	double offload_fraction;
	/* clipping by total norm (of the unscaled gradients); 0 = none */
	double max_grad_norm;
	/* loss scaling: gradients arrive multiplied by the scale.  dynamic:
	 * Megatron's DynamicGradScaler with these parameters (a step with an
	 * inf or nan gradient is skipped); static: the scale stays. */
	double loss_scale;     /* the (initial) scale; 1 = none */
	bool dynamic_loss_scale;
	double min_loss_scale, growth_factor, backoff_factor;
	uint32_t growth_interval, hysteresis;
	uint64_t shard_size;   /* bytes of state per shard; 0 = the manifest's */
	unsigned threads;      /* CPU update threads; 0 = TIER_THREADS / one per CPU;
				* at most TIER_POOL_MAX_THREADS (1024) */
	/* Partitioning (docs/distributed.md, "The partitioned optimizer"):
	 * with a communicator of N > 1 ranks, each parameter's elements are
	 * split among the ranks and this optimizer keeps only this rank's
	 * piece of each; a step reduce-scatters (averages) the gradients,
	 * takes one global norm and overflow decision, updates the piece and
	 * all-gathers the outputs into every rank's full buffer.  Every rank
	 * makes the same calls in the same order.  NULL: not partitioned; a
	 * comm of one rank keeps the whole of each parameter and moves no
	 * gradient or output through the comm.  The comm must outlive the
	 * optimizer. */
	struct tier_comm *comm;
};

/* torch's AdamW defaults (lr 1e-3, betas 0.9/0.999, eps 1e-8, weight decay
 * 0.01), no clipping, no loss scaling, Megatron's scaler parameters (min
 * 1, growth 2, backoff 0.5, interval 1000, hysteresis 2) for when
 * dynamic_loss_scale is set, the manifest's dtype, rounding, seed, split
 * and shard size, TIER_THREADS threads, not partitioned. */
TIER_API void tier_optim_params_init(struct tier_optim_params *p);

/* An optimizer on @s (which must outlive it); @p NULL takes the defaults
 * of tier_optim_params_init.  0, -EINVAL naming the bad
 * parameter, -ENOMEM, a thread's creation error, or -EEXIST when the
 * store's files hold a checkpointed optimizer (tier_optim_resume). */
TIER_API int tier_optim_create(struct tier_store *s, const struct tier_optim_params *p,
			       struct tier_optim **out);

/*
 * Parameter groups (torch's param_groups): each parameter belongs to one
 * group, whose hyperparameters its update takes.  Group 0 is created with
 * the optimizer from tier_optim_params; tier_optim_add_group adds group 1,
 * 2, ...  Gradient clipping, loss scaling and the overflow skip are the
 * optimizer's: one global norm over every group.
 */
struct tier_group_params {
	uint32_t size;         /* sizeof, set by tier_group_params_init */
	/* lr finite >= 0; betas in [0, 1); eps > 0; weight_decay >= 0 */
	double lr, beta1, beta2, eps, weight_decay;
	bool decoupled;        /* true: AdamW's decoupled decay; false: L2 (Adam) */
};

/* torch.optim.AdamW's defaults (lr 1e-3, betas 0.9/0.999, eps 1e-8,
 * weight decay 0.01, decoupled). */
TIER_API void tier_group_params_init(struct tier_group_params *g);

/* Adds a group; *gid (may be NULL) gets its index.  0, -EINVAL naming the
 * bad value, -EBUSY (inside a step or with a failed step pending),
 * -ENOMEM. */
TIER_API int tier_optim_add_group(struct tier_optim *o, const struct tier_group_params *g,
				  uint32_t *gid);
/* Changes group @gid's hyperparameters from the next step on (a learning
 * rate schedule, betas, eps, weight decay).  0, -EINVAL (a bad gid or
 * value, named), -EBUSY (inside a step or with a failed step pending). */
TIER_API int tier_optim_set_group(struct tier_optim *o, uint32_t gid,
				  const struct tier_group_params *g);
/* Group @gid's hyperparameters into @out: 0 or -EINVAL (bad gid). */
TIER_API int tier_optim_get_group(const struct tier_optim *o, uint32_t gid,
				  struct tier_group_params *out);
TIER_API uint32_t tier_optim_ngroups(const struct tier_optim *o);

/*
 * Adds a parameter of @numel elements named @name to group 0 (its shards
 * are the store objects "NAME#K"), initial master values @init (fp32,
 * host; NULL: zeros), moments zero, step count 0 (its first update is
 * step 1 of its bias correction, whenever it comes).  *id (may be NULL)
 * gets its index: 0, 1, ... in the order of adding.  0, -EEXIST, -EINVAL,
 * -EOVERFLOW (numel whose state bytes overflow 64 bits or whose shards
 * exceed a uint32_t count with the others; the detail names it), -ENOSPC
 * (a state larger than the home tier, or no room at the store's home),
 * -EBUSY (inside a step), -ENOMEM.
 */
TIER_API int tier_optim_add_param(struct tier_optim *o, const char *name, size_t numel,
				  const float *init, uint32_t *id);
/* The same into group @gid (-EINVAL for a group that does not exist). */
TIER_API int tier_optim_add_param_to(struct tier_optim *o, uint32_t gid, const char *name,
				     size_t numel, const float *init, uint32_t *id);

/*
 * Freezes parameter @id (@frozen true) or thaws it: a frozen parameter
 * keeps its state and step count, is not streamed by a step, and a push
 * of its gradient is refused (-EINVAL).  0, -EINVAL (bad id), -EBUSY
 * (inside a step or with a failed step pending).
 */
TIER_API int tier_optim_freeze(struct tier_optim *o, uint32_t id, bool frozen);

/*
 * Removes parameter @id and destroys its state.  The parameters added
 * after it move down one id (id + 1 becomes id, ...), as in an array.
 * 0, -EINVAL (bad id), -EBUSY (inside a step or with a failed step
 * pending), or the store's error destroying a shard (the parameter is
 * then removed, its remaining shards' objects left in the store).
 */
TIER_API int tier_optim_remove_param(struct tier_optim *o, uint32_t id);

TIER_API uint32_t tier_optim_nparams(const struct tier_optim *o);

/* What a parameter is now: for a binding's state_dict and checkpoints. */
struct tier_param_info {
	const char *name;      /* valid until the parameter is removed */
	size_t numel;
	uint32_t group;
	uint32_t nshards;
	uint64_t step;         /* updates applied to it: its bias-correction count */
	bool frozen;
	/* the piece of it this rank keeps: elements [part_off, part_off +
	 * part_numel) (0 and numel when the optimizer is not partitioned;
	 * part_numel may be 0) */
	size_t part_off, part_numel;
};
/* 0, or -EINVAL (bad id). */
TIER_API int tier_optim_param_info(const struct tier_optim *o, uint32_t id,
				   struct tier_param_info *out);
/* Sets parameter @id's step count (a binding's load_state_dict).  0,
 * -EINVAL, -EBUSY. */
TIER_API int tier_optim_set_param_step(struct tier_optim *o, uint32_t id, uint64_t step);

/* What one step did. */
struct tier_step_result {
	bool applied;          /* false: skipped (an inf or nan gradient) */
	uint64_t step;         /* steps this optimizer applied so far (since its
				* creation, or the count it resumed or imported);
				* each parameter's own bias-correction count is
				* tier_param_info.step */
	double grad_norm;      /* total L2 norm of the unscaled gradients */
	double loss_scale;     /* the scale the step's gradients carried */
	double next_loss_scale;/* the scale for the next step */
	double clip_coef;      /* 1 when not clipped */
	double offload_fraction; /* the split this step ran at: the share of the
				  * shards updated on the CPU (as
				  * tier_optim_params.offload_fraction) */
	uint32_t cpu_shards, gpu_shards;
	double step_s;         /* begin to end, seconds */
	/* time the update waited for state to arrive: per lane, and the
	 * larger of the two (at most step_s) */
	double stall_s, cpu_stall_s, gpu_stall_s;
	uint64_t nvme_read_bytes, nvme_write_bytes; /* during the step */
	uint64_t h2d_bytes, d2h_bytes;
	/* the same over step_s: bytes per second achieved on each link */
	double nvme_read_Bps, nvme_write_Bps, h2d_Bps, d2h_Bps;
	/* parameters updated by the step, and those it left as they were
	 * (no gradient pushed, or frozen) */
	uint32_t params_updated, params_skipped;
	/* partitioned (tier_optim_params.comm): this rank of @world (0 of 1
	 * otherwise); the step's collectives: bytes this rank sent into them,
	 * their time in flight (post to completion, summed), and the time the
	 * step was blocked waiting for them (the part not overlapped) */
	int rank, world;
	uint32_t collectives;
	uint64_t comm_bytes;
	double comm_s, comm_wait_s;
};

/*
 * One step with every gradient at hand: @grads[i] is parameter i's
 * gradient (numel elements of its dtype, host or device; ptr NULL: no
 * gradient this step, as torch's None, and the parameter is left as it
 * is; a frozen parameter takes ptr NULL only), @outs (NULL, or one per
 * parameter with ptr NULL for none) receive the updated parameters in
 * their dtype.  @lr (finite, >= 0; 0 too) is group 0's learning rate
 * from this step on, for an optimizer of one group; TIER_LR_KEEP keeps
 * each group's; any other value is refused with -EINVAL naming it.  The
 * same as tier_optim_begin, a push per parameter, tier_optim_end, with
 * their errors.  A step that fails part way (an I/O error that outlasted
 * the NVMe tier's retries) is completed by calling it again with the same
 * arguments: see tier_optim_end.
 */
TIER_API int tier_optim_step(struct tier_optim *o, double lr, const struct tier_tensor *grads,
			     const struct tier_tensor *outs, struct tier_step_result *res);

/*
 * The streaming form.  begin starts the step: the state of the first
 * shards starts moving up at once.  push hands one parameter's gradient
 * (and its output buffer, or NULL) as backward produces it, in any order;
 * its norm is taken at once, and the buffers must stay valid until end.
 * end waits for the global norm (clipping, loss scaling), runs the
 * update of every shard as its state arrives, and returns when every
 * update is done and its write-back is under way.
 *
 * A parameter not pushed in a step is left as it is: its master weights,
 * moments and step count stay, and its output buffer is not written (its
 * state is still streamed; freeze a parameter that will get no gradient
 * for a while).  A step with no gradient pushed at all changes nothing
 * (res->applied false, params_updated 0).  The global norm sums the
 * pushed gradients.
 *
 * Errors leave the state untouched: push -EINVAL (bad id, dtype, numel
 * or buffer, or a frozen parameter; no step begun), -EALREADY (the
 * parameter was pushed this step).
 *
 * A step that fails part way: an error of the tiers in the middle of end
 * (a fill that failed after the NVMe tier's retries) is returned, naming
 * the shard and how many shards are updated.  Step N is then pending: the
 * shards updated so far keep step N's values, the others step N-1's, the
 * step count stays N-1 (res->applied false).  To recover, run the same
 * step again with the same gradients (and output buffers) once the cause
 * is fixed: it updates only the shards step N did not, with step N's lr,
 * scale and count, and leaves the state bit for bit as a clean run would.
 * Until then a step whose gradients differ (by a parameter's sum of
 * squares, or which parameters have one) is refused at end with -EINVAL,
 * begin with another lr with -EINVAL (the same lr or TIER_LR_KEEP is
 * taken), and changes to the parameters and groups with -EBUSY, none
 * changing the state.
 * An error in the update itself (the kernel) refuses every later step
 * (restore a checkpoint).  docs/optimizer.md, "A step that fails".
 */
TIER_API int tier_optim_begin(struct tier_optim *o, double lr);
TIER_API int tier_optim_push(struct tier_optim *o, uint32_t id, const struct tier_tensor *grad,
			     const struct tier_tensor *out);
TIER_API int tier_optim_end(struct tier_optim *o, struct tier_step_result *res);

/*
 * Reads parameter @id's state back into host buffers (any may be NULL):
 * master weights (fp32) and the moments in the optimizer's moment dtype
 * (q8 moments as fp32 values, as tier_q8_decode gives them).
 * A partitioned optimizer reads (and tier_optim_write writes) this rank's
 * piece: tier_param_info.part_numel elements.
 */
TIER_API int tier_optim_read(struct tier_optim *o, uint32_t id, float *master, void *exp_avg,
			     void *exp_avg_sq);

/*
 * Writes parameter @id's state from host buffers (any may be NULL, its
 * part then stays): master weights (fp32) and the moments in the
 * optimizer's moment dtype (q8: fp32 values, encoded to nearest per block
 * as tier_q8_encode), numel elements each (a binding's
 * load_state_dict).  Between steps.  0, -EINVAL, -EBUSY, or the store's
 * error.
 */
TIER_API int tier_optim_write(struct tier_optim *o, uint32_t id, const float *master,
			      const void *exp_avg, const void *exp_avg_sq);

/* The dynamic loss scaler's state (with a static scale: scale set, the
 * trackers 0); set restores it (a binding's load_state_dict; its scale
 * must be > 0 and finite).  0, -EINVAL, -EBUSY. */
TIER_API int tier_optim_get_scaler(const struct tier_optim *o, struct tier_loss_scaler *out);
TIER_API int tier_optim_set_scaler(struct tier_optim *o, const struct tier_loss_scaler *in);

/* What an optimizer resolved its parameters and the manifest to: the one
 * place a program (tier-bench among them) reads them from. */
struct tier_optim_info {
	enum tier_dtype moment_dtype;
	uint32_t bytes_per_elem;   /* state per element: 4 + 2 x the moment size (1 for q8) */
	uint32_t block_bytes;      /* q8: and per TIER_Q8_BLOCK elements (the scales); else 0 */
	uint64_t shard_elems;      /* elements per shard (a multiple of 64) */
	uint64_t shard_bytes;      /* state bytes per (full) shard */
	uint64_t window_bytes;     /* the lookahead window in DRAM */
	uint64_t hbm_budget;       /* the GPU lane's window in HBM (0: no GPU lane) */
	uint32_t write_behind;     /* write-backs in flight behind the update */
	unsigned threads;          /* the CPU lane's threads */
	double offload_fraction;   /* the split now: the share of the shards updated
				    * on the CPU (tier_optim_params.offload_fraction
				    * resolved; it moves while "auto" measures) */
	bool auto_split;           /* the split is measured ("auto") */
	bool gpu_lane;             /* shards can be updated on the HBM tier */
	uint32_t nparams, nshards;
	uint64_t state_bytes;      /* the state of every shard */
	int rank, world;           /* partitioned: this rank of world (else 0 of 1) */
	uint64_t part_elems;       /* elements whose state this rank keeps */
	uint64_t total_elems;      /* elements of every parameter */
	int rounding, out_rounding; /* enum tier_rounding, as in effect */
	uint64_t seed;             /* stochastic rounding's seed, as in effect */
};

/* Fills @out.  0, or -EINVAL (NULL). */
TIER_API int tier_optim_info(const struct tier_optim *o, struct tier_optim_info *out);

/* ------------------------------------------------------------ checkpoints */

/*
 * Makes the optimizer's state durable (docs/optimizer.md, "Checkpoints"):
 * writes down every dirty shard, then commits the store with the
 * optimizer's record (hyperparameters, learning rate, the parameters'
 * names and sizes, the shard layout, the step count, the loss scaler's
 * state, the split), atomically: after a crash at any instant the store's
 * files reopen at this checkpoint or an earlier one, never a mix.  Costs
 * the dirty bytes at disk speed and an object table, not a copy of the
 * state (the NVMe tier copies on write).  Call it between steps; the last
 * step's write-back may still be draining.  *@gen (may be NULL) gets the
 * commit's generation.  0, -EBUSY (inside a step, or a failed step
 * pending), -ENODEV (no NVMe tier), or the commit's error (the previous
 * checkpoint then stays the one the files reopen to).
 */
TIER_API int tier_optim_checkpoint(struct tier_optim *o, uint64_t *gen);

/*
 * The optimizer checkpointed in the commit @s was opened at (its newest,
 * or tier_store_params.generation), resumed: its parameters (same ids,
 * same names), hyperparameters, step count, learning rate and loss
 * scaler, so the next step gives the bits the uninterrupted run's next
 * step gave.  @p may be NULL; else only its threads and, unless
 * TIER_OFFLOAD_MANIFEST, its offload_fraction are taken (the rest is the
 * checkpoint's).  0, -ENOENT (no checkpoint in the store), -EBADMSG (a
 * damaged record, or objects that disagree with it), -EPROTO (a record of
 * another version), or tier_optim_create's errors.
 */
TIER_API int tier_optim_resume(struct tier_store *s, const struct tier_optim_params *p,
			       struct tier_optim **out);

/*
 * Writes the optimizer's full state to the safetensors file @path
 * (docs/optimizer.md, "Export and import"): for each parameter NAME the
 * tensors "master.NAME" (F32), "exp_avg.NAME" and "exp_avg_sq.NAME" (the
 * moment dtype), each of shape [numel], and as metadata the step count,
 * the learning rate, the hyperparameters, the loss scaler's state and the
 * parameters' order.  Shard by shard: a state larger than DRAM exports
 * through the store without being held in memory.  The file appears whole
 * or not at all (a temporary file renamed over @path).  Call it between
 * steps.  0, -EBUSY (inside a step or with a failed step pending), or the
 * error of the store or the file, named in the detail.
 */
TIER_API int tier_optim_export(struct tier_optim *o, const char *path);

/*
 * A new optimizer on @s holding the state tier_optim_export wrote to
 * @path, written into the store shard by shard (so a state larger than
 * DRAM imports too): the same parameters in the same order, step count,
 * learning rate, hyperparameters and loss scaler, so its next step is the
 * exporting optimizer's next step, bit for bit, whatever the manifest,
 * shard size or number of paths of @s.  @p may be NULL; else its threads,
 * offload_fraction and shard_size are taken (the rest is the file's).  0,
 * -EBADMSG (not an export, or a malformed one: the detail names the
 * file, and the tensor, metadata key or byte offset), -EPROTO (an export
 * of another format version), or tier_optim_create's and
 * tier_optim_add_param's errors.
 */
TIER_API int tier_optim_import(struct tier_store *s, const char *path,
			       const struct tier_optim_params *p, struct tier_optim **out);

/* Steps applied so far (0 for NULL): with every parameter pushed at
 * every step, each one's bias-correction count too. */
TIER_API uint64_t tier_optim_step_count(const struct tier_optim *o);

/* Waits for every write-back, writes the trace (TIER_TRACE) and frees the
 * optimizer and its state objects (which tier_obj_destroy refuses while
 * it lives).  Returns 0 or the first error. */
TIER_API int tier_optim_destroy(struct tier_optim *o);

/* ---------------------------------------------------------- communicator */

/*
 * A communicator between the ranks of a training job, for the partitioned
 * optimizer (docs/distributed.md).  No transport of our own: "single" (one
 * rank), "mpi" (host buffers, the system's MPI; a build with -Dmpi),
 * "nccl" (device buffers; a CUDA build with -Dnccl) and "user" (host
 * buffers; the program's own collectives, struct tier_comm_callbacks).
 * No MPI or NCCL type
 * appears here: the program's communicator and NCCL id are passed by
 * pointer.
 */
struct tier_comm;

/* Element types of the collectives. */
enum tier_comm_dtype {
	TIER_COMM_F64 = 0,
	TIER_COMM_F32 = 1,
	TIER_COMM_BF16 = 2,
	TIER_COMM_F16 = 3,
};

/*
 * The collectives of backend "user", run by the program: each is complete
 * when it returns 0, or fails with a negative errno (the comm then
 * breaks).  Host buffers; counts in elements of @dtype (enum
 * tier_comm_dtype); every rank calls them in the same order.
 *   reduce_scatter: @send holds sum(counts) elements, rank i's slice at
 *     counts[0] + ... + counts[i - 1]; @recv gets counts[rank] elements,
 *     that slice summed over the ranks (divided by the number of ranks
 *     when @average); F32, BF16 or F16.
 *   allgatherv: @recv (sum(counts) elements) gets every rank's @send
 *     (counts[rank] elements) at its offset; @send may lie in @recv at
 *     that offset.  Any dtype.
 *   allreduce: the sum of @count elements of @buf, in place; F64 or F32.
 *   barrier.
 */
struct tier_comm_callbacks {
	void *user;            /* the callbacks' first argument */
	int (*reduce_scatter)(void *user, const void *send, void *recv, const size_t *counts,
			      int dtype, int average);
	int (*allgatherv)(void *user, const void *send, void *recv, const size_t *counts,
			  int dtype);
	int (*allreduce)(void *user, void *buf, size_t count, int dtype);
	int (*barrier)(void *user);
};

struct tier_comm_params {
	uint32_t size;         /* sizeof, set by tier_comm_params_init */
	/* "single", "mpi", "nccl" or "user"; NULL = "user" when callbacks is
	 * set, "nccl" when nccl_comm or nccl_id is set, else "mpi" when mpi_comm is set or the process was started
	 * by an MPI launcher (and the build has MPI), else "single". */
	const char *backend;
	void *mpi_comm;        /* mpi: an MPI_Comm * of the program (duplicated); NULL = MPI_COMM_WORLD */
	void *nccl_comm;       /* nccl: the program's ncclComm_t (used, not destroyed) */
	const void *nccl_id;   /* nccl: an ncclUniqueId every rank got from rank 0; NULL = sent over MPI */
	int rank, nranks;      /* nccl with nccl_id, and user: this rank and the number of ranks */
	int device;            /* nccl: the CUDA device; -1 = the current one */
	/* Seconds a collective may take before it fails with -ETIMEDOUT and
	 * the comm breaks (a dead peer gives an error, not a hang); 0 = 300,
	 * < 0 or >= 1e9 (infinity) = wait forever. */
	double timeout_s;
	/* backend "user": collectives the program runs itself (a binding over
	 * torch.distributed); rank and nranks say this rank and the world.
	 * The struct is copied at open; what its user points to must outlive
	 * the comm. */
	const struct tier_comm_callbacks *callbacks;
};

/* Every field zero (backend chosen as above, timeout 300 s), device -1. */
TIER_API void tier_comm_params_init(struct tier_comm_params *p);

/*
 * Opens a communicator (@p may be NULL: the defaults).  With mpi,
 * initialises MPI (MPI_Init_thread, MPI_THREAD_SERIALIZED) unless the
 * program has, and duplicates its communicator (a collective call: every
 * rank opens).  0, -EINVAL (bad params, naming the field), -ENOTSUP (a
 * backend this build lacks, named), -ENOENT (no such backend), or the
 * backend's error (MPI's or NCCL's message in the detail).
 */
TIER_API int tier_comm_open(const struct tier_comm_params *p, struct tier_comm **out);

/* Frees the communicator (0 for NULL).  MPI, when the library initialised
 * it, is finalised at exit.  Returns 0, or -EPIPE for a comm a timeout had
 * broken (freed all the same). */
TIER_API int tier_comm_close(struct tier_comm *c);

/* This process's rank, and the number of ranks (-1 for NULL). */
TIER_API int tier_comm_rank(const struct tier_comm *c);
TIER_API int tier_comm_size(const struct tier_comm *c);

/* The backend's name: "single", "mpi", "nccl" or "user" (NULL for NULL). */
TIER_API const char *tier_comm_backend(const struct tier_comm *c);


#ifdef __cplusplus
}
#endif

/* The live view: the stats segments of open stores and their readers. */
#include "tierstore/live.h"

#endif /* TIERSTORE_H */
