/*
 * bench_step.h - what the files of `tier-bench step` share: its options,
 * what the run settled on, the record of each step, the progress line,
 * and the phases.  bench_step.c: the command line and the setup (the
 * manifest's values and the optimizer's, read from the library);
 * bench_step_measure.c: the bound's measurements (NVMe bandwidth, the
 * in-memory update) and the bounds; bench_step_run.c: the store, the
 * optimizer, the model, the steps, the checkpoints (--checkpoint-every)
 * and the full copy they are compared with, and --verify;
 * bench_step_report.c: the figures, as text or JSON.
 */
#ifndef TIER_BENCH_STEP_H
#define TIER_BENCH_STEP_H

#include <errno.h>

#include "bench.h"

#define STEP_WHO "tier-bench step"
#define STEP_NPARAMS 8
/* step_run's return when --verify found a difference on some rank (every
 * rank returns it, after the report): the command exits 1 */
#define STEP_EXIT_VERIFY 101

/* --grads's name of @g */
const char *step_grads_name(int g);

/* --comm: which run (bench_step_world.c) */
enum step_comm {
	STEP_COMM_AUTO,         /* partitioned when an MPI launcher started us */
	STEP_COMM_NONE,         /* not partitioned (one store, the whole model) */
	STEP_COMM_SINGLE,       /* partitioned on the single backend: one rank */
	STEP_COMM_MPI,          /* partitioned over MPI_COMM_WORLD */
};

/* --grads: where the gradients and the parameter copies live */
enum step_grads {
	STEP_GRADS_AUTO,        /* device with a GPU in the manifest, else host */
	STEP_GRADS_HOST,        /* pageable host memory */
	STEP_GRADS_PINNED,      /* page-locked host memory (tier_gpu_alloc) */
	STEP_GRADS_DEVICE,      /* the manifest's GPU (emulated: host memory
				 * pushed as TIER_MEM_DEVICE) */
};

struct step_opts {
	const char *manifest;
	uint64_t params;        /* elements; 0: state = 2 x DRAM */
	uint64_t steps;
	uint64_t dram;          /* 0: min(manifest's, 1 GiB) */
	double offload;         /* NAN: the manifest's; TIER_OFFLOAD_AUTO */
	int moments;            /* -1: the manifest's */
	int copy_out;           /* BENCH_NO_DTYPE: none */
	uint64_t threads;       /* 0: TIER_THREADS / one per CPU */
	uint64_t shard_size;    /* 0: the manifest's */
	uint64_t hbm_capacity;  /* 0: max(DRAM / 4, 2 shards) */
	double hbm_bandwidth;
	uint64_t io_size, io_passes;
	uint64_t update_runs;
	uint64_t checkpoint_every; /* tier_optim_checkpoint after every K-th step; 0: none */
	bool json, verify;
	int progress;           /* -1 auto, 0 off */
	int comm;               /* enum step_comm */
	int grads;              /* enum step_grads */
};

/*
 * The ranks of a partitioned run (bench_step_world.c).  Not active: the
 * run of one process over the whole model, as before --comm existed.
 */
struct step_world {
	bool active;            /* partitioned: a comm for the optimizer */
	bool mpi;               /* the tool initialised MPI (and finalises it) */
	const char *backend;    /* "mpi", "single" */
	int rank, world;        /* the comm's (0 of 1 when not active) */
	struct tier_rank tr;    /* tier_rank_from_env: the manifest's variables */
	struct tier_comm *comm;
};

/*
 * What the run settled on, from the options, the manifest's effective
 * configuration (tier_manifest_info) and what the optimizer resolved
 * (tier_optim_info).
 */
struct step_setup {
	char source[256];
	bool gpu, dram_capped, have_nvme;
	uint64_t manifest_dram, dram, manifest_lookahead;
	uint64_t shard_size;    /* the shard size asked for (the manifest's or --shard-size) */
	uint64_t stripe_unit;   /* the NVMe tier's (1 MiB without one) */
	uint64_t hbm_capacity;
	/* the optimizer's: its moments, state bytes per element, elements per
	 * shard and lookahead window (scaled with the store's DRAM) */
	enum tier_dtype moments;
	size_t bpe;
	uint32_t block_bytes;   /* q8: and per TIER_Q8_BLOCK elements (0 else) */
	uint64_t shard_elems, lookahead;
	uint64_t numel, state_bytes;    /* the whole model's (every rank's) */
	size_t sizes[STEP_NPARAMS], max_size;
	/* this rank's piece (tier_optim_info after the parameters are added;
	 * the whole model when not partitioned), and each parameter's */
	uint64_t part_elems, part_state_bytes;
	size_t part_off[STEP_NPARAMS], part_numel[STEP_NPARAMS];
	struct step_world *w;
	const char *hbm_backend; /* NULL: cuda */
	int gpu_index;          /* the manifest's GPU (-1: none) */
	int grads;              /* enum step_grads, resolved (never AUTO) */
	char offload_text[96];
	double offload;
	unsigned threads;       /* the pool's size */
	uint64_t io_bs, io_qd, io_size;
};

struct step_record {
	struct tier_step_result res;
	double wall_s;                        /* begin to end, measured here */
	uint64_t tier_read, tier_written;     /* NVMe tier counters over the step */
	/* --checkpoint-every: the checkpoint after this step, if one */
	bool ckpt;
	double ckpt_s;                        /* tier_optim_checkpoint's wall time */
	uint64_t ckpt_written;                /* NVMe tier bytes written during it */
	uint64_t ckpt_table;                  /* its commit's object table (bytes) */
	uint64_t ckpt_gen;                    /* its commit's generation */
	/* how many times the step was called: 1, or more when it failed part
	 * way with a transient error and was run again (step_error_transient) */
	uint32_t tries;
};

/* One rank's figures, gathered by rank 0 (fixed size: MPI_Gather of
 * bytes; its per-step records are gathered beside it). */
struct step_rank_figs {
	int32_t rank;
	int32_t verified;             /* 1 equal, 0 differs, -1 not verified */
	uint64_t part_elems, part_state_bytes;
	double step_s, rd_b, wr_b;    /* medians over the steps counted */
	double bound_s, nvme_s, update_s, read_Bps, write_Bps;
	double mixed_bound_s;         /* 0: none */
	double stall;                 /* stall_s / step_s */
	double collectives, comm_bytes, comm_s, comm_wait_s; /* medians */
	double sum_step_s, sum_comm_s, sum_wait_s;  /* over the steps counted */
};

/* ----------------------------------------------- bench_step.c: helpers */

/*
 * On a terminal a bar redrawn in place on stderr; otherwise one line per
 * phase and per step, unless --json (whose stdout a script reads).
 */
struct progress {
	bool tty, lines;
	bool drawn;             /* a line on the terminal to clear */
};

__attribute__((format(printf, 2, 3))) void progress_note(struct progress *p, const char *fmt,
							 ...);
void progress_step(struct progress *p, uint64_t done, uint64_t total, double step_s,
		   double stall_s);
void progress_done(struct progress *p);

/* The optimizer's state bytes of @n elements of one parameter (or of a
 * rank's piece of it): bytes_per_elem each, and with q8 moments
 * block_bytes per TIER_Q8_BLOCK (the last block partial: shards and pieces
 * start on a block). */
static inline uint64_t step_state_bytes(const struct step_setup *su, uint64_t n)
{
	return n * su->bpe + (n + TIER_Q8_BLOCK - 1) / TIER_Q8_BLOCK * su->block_bytes;
}

/* A runtime failure: what was being done, and the library's detail.  1. */
int step_fail(const char *what, int rc);

/*
 * A step is called at most this many times: once, and again while it
 * fails part way (tier_optim_end) with a transient error, the retry the
 * optimizer's contract allows (docs/optimizer.md, "A step that fails").
 */
#define STEP_MAX_TRIES 3

/*
 * Whether a step that failed part way with @rc (a negative errno) may
 * succeed when called again unchanged: an I/O error that outlasted the NVMe
 * tier's own retries (-EIO, -ETIMEDOUT, -EILSEQ) or an interrupted call
 * (-EAGAIN, -EINTR).  Everything else is permanent for the run: bad input
 * (-EINVAL, -EALREADY, -EBUSY), no room (-ENOSPC, -ENOMEM), damaged data
 * (-EBADMSG), and whatever the docs' table in docs/optimizer.md says to
 * stop or restore a checkpoint for.
 */
static inline bool step_error_transient(int rc)
{
	switch (-rc) {
	case EIO:
	case ETIMEDOUT:
	case EILSEQ:
	case EAGAIN:
	case EINTR:
		return true;
	default:
		return false;
	}
}

/* The symbolic name of errno @rc (negative or not): "EIO", or "errno 123". */
const char *step_errno_name(int rc, char *buf, size_t len);

/* "1.50 GiB", "3.0 MiB", "12.0 KiB" into @buf. */
const char *human(uint64_t b, char *buf, size_t len);

/* ------------------------------------- bench_step_run.c: store and steps */

/* The store's and the optimizer's parameters, the same for the probe
 * (step_optim_probe) and the run. */
void step_store_params(const struct step_opts *o, const struct step_setup *su,
		       struct tier_store_params *sp);
void step_optim_params(const struct step_opts *o, struct tier_optim_params *op);

/*
 * Opens the store and the optimizer the run will open (su's DRAM and HBM
 * tier), asks tier_optim_info what the optimizer resolved, and closes them
 * again (the NVMe measurement before the steps needs the tier's files to
 * itself).  0, or 1 after a message.
 */
int step_optim_probe(const struct step_opts *o, const struct tier_manifest *m,
		     const struct step_setup *su, struct tier_optim_info *info);

/* The measurements, the steps, the report.  0, or 1 after a message. */
int step_run(const struct step_opts *o, const struct tier_manifest *m, struct step_setup *su,
	     struct progress *pg);

/* ---------------------------------- bench_step_measure.c: the bound */

/* The NVMe measurements: before the steps (io, into which the passes of
 * the one after are merged) and after (io2, with the mixed passes; mixed_s
 * 0: none); per direction, the mean of the fastest pass of each. */
struct step_nvme {
	struct bench_io_result io, io2;
	double read_Bps, write_Bps;   /* 0: no NVMe tier */
};

/* The bound of a step and the mixed bound (docs/optimizer.md). */
struct step_bound {
	double update_s;              /* the in-memory update */
	double nvme_s, bound_s;
	double mixed_Bps;             /* 0: no mixed measurement */
	double mixed_read_share, mixed_nvme_s, mixed_bound_s;
	/* The HBM-resident regime (an HBM tier and no NVMe: the state lives
	 * in DRAM and HBM, as ZeRO-Offload's): the link's bound instead */
	bool hbm_regime;
	struct step_link {
		double h2d_Bps, d2h_Bps;  /* pinned copies measured (CUDA), or the
					   * emulated link's --hbm-bandwidth */
		double h2d_both_Bps, d2h_both_Bps; /* the same with both directions
					   * copying at once (emulated: as alone) */
		double h2d_b, d2h_b;      /* a step's bytes each way: the state,
					   * and host gradients in, host copies out */
		double link_s;            /* both directions' bytes: at once at the
					   * rates at once, the rest of the longer
					   * alone (step_link_time) */
		double gpu_share;         /* the GPU lane's share of the elements */
		double gpu_update_s;      /* the GPU lane's update of all the
					   * elements (CUDA kernel; emulated: the
					   * CPU kernel on one thread) */
	} link;
};

int step_nvme_before(const struct step_opts *o, const struct tier_manifest *m,
		     const struct step_setup *su, struct progress *pg, struct step_nvme *nv);
/* The step's median bytes read and written (@rd_b, @wr_b) set the mix. */
void step_nvme_after(const struct step_opts *o, const struct tier_manifest *m,
		     const struct step_setup *su, struct progress *pg, double rd_b, double wr_b,
		     struct step_nvme *nv);
int step_update_time(const struct step_opts *o, const struct step_setup *su,
		     struct tier_pool *pool, uint64_t numel, double *out);
void step_bounds(const struct step_setup *su, const struct step_nvme *nv, double update_s,
		 double rd_b, double wr_b, const struct step_link *link, struct step_bound *b);
/* The HBM-resident regime's link: the rates, a step's bytes (medians of
 * @rec) and the GPU lane's update time, into @lk.  0, or 1 after a
 * message. */
int step_link_measure(const struct step_opts *o, const struct step_setup *su,
		      const struct step_record *rec, struct step_link *lk);
/* The link's time for @h2d_b and @d2h_b bytes: both directions at once at
 * @lk's rates at once until the shorter is done, the rest of the other
 * alone at its rate alone (0 without the rates). */
double step_link_time(double h2d_b, double d2h_b, const struct step_link *lk);

/* ------------------------------------ bench_step_report.c: the output */

/* The first step counted in the medians: 1 (warm-up left out) with 3
 * steps or more, else 0. */
uint64_t step_first_counted(const struct step_opts *o);
/* Median NVMe bytes a step read and wrote (tier_step_result's). */
void step_bytes(const struct step_opts *o, const struct step_record *rec, double *rd_b,
		double *wr_b);
/* Median HBM bytes a step moved each way, and its CPU share. */
void step_hbm_medians(const struct step_opts *o, const struct step_record *rec, double *h2d_b,
		      double *d2h_b, double *offload_fraction);

/* The store's side of the report. */
struct step_store_summary {
	bool has_hbm;
	struct tier_store_stats ss;   /* after the steps */
	/* --checkpoint-every: the one full copy of the state after the steps
	 * (tier_optim_export next to the NVMe backing files), for comparison */
	double export_s;
	uint64_t export_bytes;        /* the safetensors file's size */
	/* --verify: a 64-bit FNV-1a digest of the state read back (every
	 * parameter's master weights and moments, then copy-out, in id order):
	 * two runs with the same options that end in the same bytes have the
	 * same digest, whatever happened on the way (a step run again) */
	bool have_digest;
	uint64_t state_digest;
};

void step_report(const struct step_opts *o, const struct step_setup *su,
		 const struct step_record *rec, const struct step_nvme *nv,
		 const struct step_bound *b, const struct step_store_summary *st);

/* A partitioned run: this rank's figures (@verified as step_rank_figs);
 * then rank 0 gathers every rank's, and prints the report with the table
 * of ranks and the world's figures (the others print nothing).  0, or 1
 * after a message. */
int step_report_world(const struct step_opts *o, const struct step_setup *su,
		      const struct step_record *rec, const struct step_nvme *nv,
		      const struct step_bound *b, const struct step_store_summary *st,
		      int verified);

/* ------------------------------ bench_step_world.c: ranks, MPI, manifest */

/* Which run (o->comm, the launcher's variables), MPI initialised, the comm
 * opened.  0, or an exit code after a message. */
int step_world_open(const struct step_opts *o, struct step_world *w);
/* The comm closed, MPI finalised.  0, or 1 after a message. */
int step_world_close(struct step_world *w);
bool step_world_have_mpi(void);
/* MPI_Barrier (nothing on one rank). */
void step_world_barrier(const struct step_world *w);
/* @bytes of each rank's @mine into rank 0's @all (world x bytes).  0 or 1. */
int step_world_gather(const struct step_world *w, const void *mine, size_t bytes, void *all);
/* The largest @v of every rank. */
int step_world_max(const struct step_world *w, int v);
/* MPI_Abort with @code when more than one rank runs (one that fails would
 * leave the others waiting); returns otherwise. */
void step_world_abort(const struct step_world *w, int code);
/* The manifest of this rank: --manifest, else $TIER_MANIFEST, with the
 * rank's variables (tier_manifest_load_rank), else the embedded default
 * with a directory of its own per rank.  0, or an exit code. */
int step_world_manifest(const struct step_opts *o, const struct step_world *w,
			struct tier_manifest **m);

#endif /* TIER_BENCH_STEP_H */
