/*
 * bench_step.c - `tier-bench step`, the main job: optimizer steps of a
 * synthetic model through the store, against a bound measured in the same
 * run.  This file: the command line and the setup, which reads the
 * manifest's values (tier_manifest_info) and the optimizer's (shard,
 * state bytes per element, lookahead window: tier_optim_info) from the
 * library; the run, the bound and the report are in bench_step_run.c,
 * bench_step_measure.c and bench_step_report.c (bench_step.h).
 *
 * The model is eight parameters of uneven sizes (none a multiple of the
 * shard) summing to --params elements, by default twice the elements whose
 * state the DRAM tier holds, so every step really moves state through
 * NVMe.  The gradients are random fp32, one buffer of the largest
 * parameter's size filled once and handed (read-only) to every parameter;
 * each parameter has its own output buffer for the updated copy the GPU
 * would need.  Each step is the streaming form with the pushes in reverse
 * order, as backward produces them.
 *
 * The bound of a step is the larger of two times measured in this run
 * before the steps: the NVMe time of the bytes a step moves (read bytes /
 * read bandwidth + write bytes / write bandwidth, one disk serving both) at
 * the bandwidth of `tier-bench io` on the same manifest's NVMe tier with a
 * shard per request and the lookahead's shards in flight, and the in-memory
 * update: tier_adam_step over the same number of elements with the same
 * threads and dtypes.  efficiency = bound / step time.
 *
 * After the steps the NVMe measurement runs again (the disk drifts; the
 * bound uses the mean of both), and this time also mixed: the step's read
 * and write bytes in flight together, in the proportion a step moved them.
 * A disk that serves reads and writes at once faster than one after the
 * other (efficiency above 1 shows it) gets a tighter floor from that:
 * mixed bound = max(step bytes / mixed rate, update time), reported beside
 * the bound with its own efficiency.
 *
 * --checkpoint-every K makes the optimizer's state durable after every
 * K-th step (tier_optim_checkpoint: the dirty shards written home, then a
 * store commit: an object table and two fdatasyncs, no copy of the state,
 * the NVMe tier copying on write) and measures each checkpoint: its wall
 * time, the NVMe tier's bytes written during it (the dirty bytes it had to
 * write home) and its commit's table bytes.  After the steps, one full
 * copy of the state (tier_optim_export, a safetensors file next to the
 * first NVMe backing file, removed again) is timed for comparison.  The
 * report predicts a checkpoint's time as its dirty bytes at the write rate
 * measured in this run; what it took beyond that is the commit itself.
 * The steps' results are the same with checkpoints (--verify holds).
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench_step.h"

#define STEP_DRAM_CAP (1ull << 30)

/* ------------------------------------------------------------ progress */

void progress_note(struct progress *p, const char *fmt, ...)
{
	va_list ap;

	if (!p->tty && !p->lines)
		return;
	fprintf(stderr, p->tty ? "\r\033[K" STEP_WHO ": " : STEP_WHO ": ");
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fprintf(stderr, p->tty ? "" : "\n");
	p->drawn = p->tty;
	fflush(stderr);
}

void progress_step(struct progress *p, uint64_t done, uint64_t total, double step_s,
			  double stall_s)
{
	enum { WIDTH = 30 };
	char bar[WIDTH + 1];
	unsigned fill = (unsigned)(done * WIDTH / total);

	if (p->tty) {
		memset(bar, '#', fill);
		memset(bar + fill, '-', WIDTH - fill);
		bar[WIDTH] = 0;
		fprintf(stderr, "\r\033[K" STEP_WHO ": [%s] step %" PRIu64 "/%" PRIu64
			"  %.3f s, stall %.3f s", bar, done, total, step_s, stall_s);
		p->drawn = true;
		fflush(stderr);
	} else if (p->lines && done > 0) {
		fprintf(stderr, STEP_WHO ": step %" PRIu64 "/%" PRIu64 ": %.3f s, stall %.3f s\n",
			done, total, step_s, stall_s);
	}
}

void progress_done(struct progress *p)
{
	if (p->drawn) {
		fprintf(stderr, "\r\033[K");
		fflush(stderr);
		p->drawn = false;
	}
}


/* ------------------------------------------------------------- helpers */

const char *step_grads_name(int g)
{
	switch (g) {
	case STEP_GRADS_HOST:
		return "host";
	case STEP_GRADS_PINNED:
		return "pinned";
	case STEP_GRADS_DEVICE:
		return "device";
	default:
		return "auto";
	}
}

static void step_usage(FILE *f)
{
	fprintf(f, "usage: tier-bench step [--manifest FILE] [--params N] [--steps K] [--dram BYTES]\n"
		   "                       [--offload-fraction F|auto] [--moments fp32|bf16|q8] [--json]\n"
		   "                       [--copy-out none|bf16|fp16|fp32] [--threads T] [--shard-size BYTES]\n"
		   "                       [--hbm-capacity BYTES] [--hbm-bandwidth BYTES/s] [--io-size BYTES]\n"
		   "                       [--io-passes P] [--update-runs R] [--verify]\n"
		   "                       [--checkpoint-every K] [--progress|--no-progress]\n"
		   "                       [--comm auto|none|single|mpi] [--grads auto|host|pinned|device]\n"
		   "  --manifest          the node (default: $TIER_MANIFEST, else the embedded default)\n"
		   "  --params            elements of the model, all ranks' together (default: the\n"
		   "                      state, or each rank's piece of it, is 2x the DRAM tier;\n"
		   "                      K/M/G suffixes are binary)\n"
		   "  --steps             optimizer steps (default 5; with 3 or more the first, warm-up\n"
		   "                      step is left out of the medians)\n"
		   "  --dram              the DRAM tier (default: the manifest's, capped at 1GiB)\n"
		   "  --offload-fraction  share of the shards updated on the CPU, 0..1, or auto\n"
		   "                      (default: the manifest's optimizer.offload_fraction)\n"
		   "  --moments           storage of the moments (default: the manifest's)\n"
		   "  --copy-out          the updated parameter copy per parameter (default bf16)\n"
		   "  --threads           CPU update threads (default: TIER_THREADS, else one per CPU)\n"
		   "  --shard-size        state bytes per shard (default: the manifest's)\n"
		   "  --hbm-capacity      without a GPU, the emulated HBM tier (default: DRAM/4, at\n"
		   "                      least two shards)\n"
		   "  --hbm-bandwidth     without a GPU, its link in bytes/s per direction (default\n"
		   "                      25e9, PCIe 4 x16)\n"
		   "  --io-size           bytes of the NVMe bandwidth measurement (default 1GiB)\n"
		   "  --io-passes         its write-then-read passes, before the steps and again\n"
		   "                      after them; the mean of the fastest before and the\n"
		   "                      fastest after counts, per direction\n"
		   "                      (default 2: the second overwrites written blocks, as the\n"
		   "                      store does)\n"
		   "  --update-runs       timed passes of the in-memory update (default 3)\n"
		   "  --verify            after the steps, compare every parameter's state and copy\n"
		   "                      with tier_adam_step run in memory (bit for bit)\n"
		   "  --checkpoint-every  after every K-th step a durable checkpoint\n"
		   "                      (tier_optim_checkpoint), timed, with the dirty bytes it\n"
		   "                      wrote home; after the steps one full copy of the state\n"
		   "                      (tier_optim_export next to the NVMe files, then removed)\n"
		   "                      for comparison (default 0: none; needs an NVMe tier)\n"
		   "  --comm              partitioned over ranks: mpi (MPI_COMM_WORLD), single (one\n"
		   "                      rank), none (not partitioned), auto (default: mpi when an\n"
		   "                      MPI launcher started it, e.g. mpirun -np 4 tier-bench step,\n"
		   "                      else none).  Each rank loads the manifest for its rank\n"
		   "                      (${RANK} in paths); rank 0 prints every rank's figures\n"
		   "                      and the world's\n"
		   "  --grads             where the gradients and the parameter copies are, as a\n"
		   "                      training loop has them after backward: device (the\n"
		   "                      manifest's GPU; without one, the emulated HBM tier's host\n"
		   "                      memory pushed as device memory), pinned (page-locked host\n"
		   "                      memory), host (pageable); auto (default): device with a\n"
		   "                      GPU in the manifest, else host\n");
	fprintf(f, "Without a GPU in the manifest, the HBM tier is the emulated \"host\" backend when\n"
		   "asked for (an offload fraction below 1, or --hbm-capacity; its updates then run\n"
		   "on the CPU too), else there is none and \"auto\" updates everything on the CPU.\n"
		   "The bound of a step\n"
		   "is the larger of the NVMe time of its bytes at the bandwidth measured in this\n"
		   "run and the in-memory update time; efficiency = bound / median step time.\n"
		   "The mixed bound takes the NVMe time at the rate measured with the step's reads\n"
		   "and writes in flight together instead (after the steps, at the step's mix).\n");
}

static void step_hint(FILE *f)
{
	fprintf(f, "Run 'tier-bench step --help' for the options.\n");
}

/* A bad command line: says what, and where the options are. */
static const struct bench_cmd step_cmd = { STEP_WHO, step_usage, step_hint };

int step_fail(const char *what, int rc)
{
	const char *d = tier_last_error();

	fprintf(stderr, STEP_WHO ": %s: %s\n", what, d[0] ? d : tier_strerror(rc));
	return 1;
}

const char *step_errno_name(int rc, char *buf, size_t len)
{
	static const struct {
		int e;
		const char *name;
	} names[] = {
		{ EIO, "EIO" }, { ETIMEDOUT, "ETIMEDOUT" }, { EILSEQ, "EILSEQ" },
		{ EAGAIN, "EAGAIN" }, { EINTR, "EINTR" }, { EINVAL, "EINVAL" },
		{ EALREADY, "EALREADY" }, { EBUSY, "EBUSY" }, { ENOSPC, "ENOSPC" },
		{ ENOMEM, "ENOMEM" }, { EBADMSG, "EBADMSG" }, { EPIPE, "EPIPE" },
		{ ENODEV, "ENODEV" }, { ECANCELED, "ECANCELED" }, { EPROTO, "EPROTO" },
	};
	int e = rc < 0 ? -rc : rc;

	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
		if (names[i].e == e)
			return names[i].name;
	snprintf(buf, len, "errno %d", e);
	return buf;
}

/* "25e9", "2.5e10": a positive finite number. */
static int parse_positive(const char *s, double *out)
{
	char *end;
	double v = strtod(s, &end);

	if (end == s || *end || !isfinite(v) || v <= 0)
		return -EINVAL;
	*out = v;
	return 0;
}

const char *human(uint64_t b, char *buf, size_t len)
{
	if (b >= 1ull << 30)
		snprintf(buf, len, "%.2f GiB", (double)b / (double)(1ull << 30));
	else if (b >= 1ull << 20)
		snprintf(buf, len, "%.1f MiB", (double)b / (double)(1ull << 20));
	else
		snprintf(buf, len, "%.1f KiB", (double)b / 1024.0);
	return buf;
}

/* ------------------------------------------------------------- the setup */

/*
 * From the manifest's effective configuration and the options: the DRAM
 * tier, the split, and so the HBM tier.  0, or 1 after a message.
 */
static int step_setup_store(const struct step_opts *o, const struct tier_manifest *m,
			    struct step_setup *su)
{
	struct tier_manifest_info mi;
	int rc = tier_manifest_info(m, &mi);

	if (rc) {
		fprintf(stderr, STEP_WHO ": cannot read the manifest's configuration: %s\n",
			tier_strerror(rc));
		return 1;
	}
	snprintf(su->source, sizeof(su->source), "%s", mi.source);
	su->gpu = mi.gpu >= 0;
	su->have_nvme = mi.npaths > 0;
	su->manifest_dram = mi.dram_capacity;
	su->manifest_lookahead = mi.lookahead;
	su->shard_size = o->shard_size ? o->shard_size : mi.shard_size;
	su->stripe_unit = mi.npaths ? mi.stripe_unit : 1u << 20;
	if (o->dram) {
		su->dram = o->dram;
	} else {
		su->dram = su->manifest_dram < STEP_DRAM_CAP ? su->manifest_dram : STEP_DRAM_CAP;
		su->dram_capped = su->manifest_dram > STEP_DRAM_CAP;
	}

	/* The split, and so the HBM tier. */
	if (isnan(o->offload)) {
		su->offload = mi.offload_fraction;
		if (su->offload == TIER_OFFLOAD_AUTO)
			snprintf(su->offload_text, sizeof(su->offload_text), "auto (the manifest's)");
		else
			snprintf(su->offload_text, sizeof(su->offload_text), "%.17g (the manifest's)",
				 su->offload);
	} else {
		su->offload = o->offload;
		if (o->offload == TIER_OFFLOAD_AUTO)
			snprintf(su->offload_text, sizeof(su->offload_text), "auto");
		else
			snprintf(su->offload_text, sizeof(su->offload_text), "%g", o->offload);
	}
	/* Without a GPU, an emulated HBM tier only when asked for: a split
	 * below 1, or --hbm-capacity (its updates run on the CPU as well, so
	 * "auto" alone does not make one). */
	if (su->gpu)
		su->hbm_backend = NULL;
	else if ((su->offload != TIER_OFFLOAD_AUTO && su->offload < 1.0) || o->hbm_capacity)
		su->hbm_backend = "host";
	else
		su->hbm_backend = "none";
	su->gpu_index = mi.gpu;
	su->grads = o->grads;
	if (su->grads == STEP_GRADS_AUTO)
		su->grads = su->gpu && !su->w->active ? STEP_GRADS_DEVICE : STEP_GRADS_HOST;
	if (su->grads != STEP_GRADS_HOST && su->w->active)
		return bench_bad_usage(&step_cmd, "--grads %s is not measured in a partitioned run"
				       " yet (--grads host, or --comm none for one store)",
				       step_grads_name(su->grads));
	if (su->grads == STEP_GRADS_PINNED && !su->gpu)
		return bench_bad_usage(&step_cmd, "--grads pinned needs a GPU in the manifest (gpu.device)");
	if (su->grads == STEP_GRADS_DEVICE && !su->gpu && strcmp(su->hbm_backend, "host") != 0)
		return bench_bad_usage(&step_cmd, "--grads device needs a GPU in the manifest"
				       " (gpu.device), or the emulated HBM tier (an offload fraction"
				       " below 1, or --hbm-capacity)");
	su->hbm_capacity = o->hbm_capacity;
	if (!su->hbm_capacity) {
		su->hbm_capacity = su->dram / 4;
		if (su->hbm_capacity < 2 * su->shard_size)
			su->hbm_capacity = 2 * su->shard_size;
	}
	return 0;
}

/*
 * Eight parameters of uneven sizes summing to @numel, none a multiple of
 * the shard's elements @se (so every parameter ends in a partial shard).
 */
static void step_sizes(uint64_t numel, uint64_t se, size_t sizes[STEP_NPARAMS])
{
	static const unsigned w[STEP_NPARAMS] = { 5, 3, 8, 2, 6, 1, 7, 4 };
	unsigned wsum = 0;
	uint64_t left = numel;

	for (int i = 0; i < STEP_NPARAMS; i++)
		wsum += w[i];
	for (int i = 0; i < STEP_NPARAMS - 1; i++) {
		sizes[i] = (size_t)(numel / wsum * w[i] + numel % wsum * w[i] / wsum);
		left -= sizes[i];
	}
	sizes[STEP_NPARAMS - 1] = (size_t)left;
	/* Move single elements on from a multiple to the next parameter. */
	for (int pass = 0; se > 1 && pass < 4 * STEP_NPARAMS; pass++) {
		int i = pass % STEP_NPARAMS, j = (i + 1) % STEP_NPARAMS;

		if (sizes[i] % se == 0 && sizes[i] > 1) {
			sizes[i]--;
			sizes[j]++;
		}
	}
}

/*
 * Resolves the options against the manifest and the optimizer: the store
 * (step_setup_store), then what the optimizer made of it (its moments,
 * bytes per element, shard and window: step_optim_probe), from them the
 * model, and the shape of the NVMe measurement.  0, or an exit code.
 */
static int step_setup(const struct step_opts *o, const struct tier_manifest *m,
		      struct step_setup *su)
{
	struct tier_optim_info oi;
	int ret;

	if ((ret = step_setup_store(o, m, su)))
		return ret;
	if (o->checkpoint_every && !su->have_nvme)
		return bench_bad_usage(&step_cmd, "--checkpoint-every needs an NVMe tier, and the"
				       " manifest %s has none (a checkpoint commits the NVMe"
				       " tier)", su->source);
	if ((ret = step_optim_probe(o, m, su, &oi)))
		return ret;
	su->moments = oi.moment_dtype;
	su->bpe = oi.bytes_per_elem;
	su->block_bytes = oi.block_bytes;
	su->shard_elems = oi.shard_elems;
	su->lookahead = oi.window_bytes;
	/* Without --shard-size, the shard size the optimizer chose: a manifest
	 * that does not set one has it sized from this run's DRAM tier.  Its
	 * shards are that size rounded down to whole groups of elements (less
	 * than 64 KiB off): round back up. */
	if (!o->shard_size && oi.shard_bytes < su->shard_size)
		su->shard_size = (oi.shard_bytes + (64u << 10) - 1) / (64u << 10) * (64u << 10);

	/* The model: by default its state is twice the DRAM tier, on every
	 * rank (each rank's piece is about 1/world of it). */
	su->numel = o->params ? o->params
			      : 2 * su->dram * TIER_Q8_BLOCK /
					(su->bpe * TIER_Q8_BLOCK + su->block_bytes) *
					(uint64_t)su->w->world;
	if (su->numel < 64)
		return bench_bad_usage(&step_cmd, "--params %" PRIu64 " is too small (at least 64"
				       " elements)", su->numel);
	step_sizes(su->numel, su->shard_elems, su->sizes);
	su->state_bytes = 0;
	for (int i = 0; i < STEP_NPARAMS; i++)
		su->state_bytes += step_state_bytes(su, su->sizes[i]);
	su->max_size = 0;
	for (int i = 0; i < STEP_NPARAMS; i++)
		su->max_size = su->sizes[i] > su->max_size ? su->sizes[i] : su->max_size;

	/* The NVMe measurement: a shard per request, the window's shards in
	 * flight (at least 2, at most 32, and 1 GiB of buffers).  The shard
	 * here is the size asked for (the optimizer's shards, oi.shard_bytes,
	 * are that rounded down to whole groups of elements).  Requests are
	 * at least a stripe unit: the store moves whole objects, never part of
	 * a unit, where smaller requests into one object would be
	 * read-modify-writes of a shared unit. */
	su->io_bs = su->shard_size < (1ull << 30) ? su->shard_size : 1ull << 30;
	if (su->io_bs < su->stripe_unit)
		su->io_bs = su->stripe_unit;
	su->io_qd = su->lookahead / su->shard_size;
	if (su->io_qd < 2)
		su->io_qd = 2;
	if (su->io_qd > 32)
		su->io_qd = 32;
	if (su->io_qd * su->io_bs > (1ull << 30))
		su->io_qd = (1ull << 30) / su->io_bs ? (1ull << 30) / su->io_bs : 1;
	su->io_size = o->io_size;
	if (su->io_size < su->io_bs * su->io_qd)
		su->io_size = su->io_bs * su->io_qd;
	return 0;
}

/* ----------------------------------------------------------- the command */

enum {
	O_MANIFEST = 256, O_PARAMS, O_STEPS, O_DRAM, O_OFFLOAD, O_MOMENTS, O_JSON, O_COPY_OUT,
	O_THREADS, O_SHARD, O_HBM_CAP, O_HBM_BW, O_IO_SIZE, O_IO_PASSES, O_UPDATE_RUNS, O_VERIFY,
	O_PROGRESS, O_NO_PROGRESS, O_CKPT_EVERY, O_COMM, O_GRADS,
};

/* --manifest, --offload-fraction, --hbm-bandwidth, --comm, --progress and
 * --no-progress (the BENCH_OTHER options of cmd_step). */
static int step_option(void *ctx, int c, const char *arg)
{
	struct step_opts *o = ctx;
	char *end;

	switch (c) {
	case O_MANIFEST:
		o->manifest = arg;
		return 0;
	case O_OFFLOAD:
		if (strcmp(arg, "auto") == 0) {
			o->offload = TIER_OFFLOAD_AUTO;
			return 0;
		}
		o->offload = strtod(arg, &end);
		if (end == arg || *end || !(o->offload >= 0.0 && o->offload <= 1.0))
			return bench_bad_usage(&step_cmd, "bad --offload-fraction '%s' (0 to 1, or"
					       " auto)", arg);
		return 0;
	case O_COMM:
		if (strcmp(arg, "auto") == 0)
			o->comm = STEP_COMM_AUTO;
		else if (strcmp(arg, "none") == 0)
			o->comm = STEP_COMM_NONE;
		else if (strcmp(arg, "single") == 0)
			o->comm = STEP_COMM_SINGLE;
		else if (strcmp(arg, "mpi") == 0)
			o->comm = STEP_COMM_MPI;
		else
			return bench_bad_usage(&step_cmd, "bad --comm '%s' (auto, none, single or mpi)",
					       arg);
		return 0;
	case O_GRADS:
		if (strcmp(arg, "auto") == 0)
			o->grads = STEP_GRADS_AUTO;
		else if (strcmp(arg, "host") == 0)
			o->grads = STEP_GRADS_HOST;
		else if (strcmp(arg, "pinned") == 0)
			o->grads = STEP_GRADS_PINNED;
		else if (strcmp(arg, "device") == 0)
			o->grads = STEP_GRADS_DEVICE;
		else
			return bench_bad_usage(&step_cmd, "bad --grads '%s' (auto, host, pinned or"
					       " device)", arg);
		return 0;
	case O_HBM_BW:
		if (parse_positive(arg, &o->hbm_bandwidth))
			return bench_bad_usage(&step_cmd, "bad --hbm-bandwidth '%s' (bytes per second,"
					       " e.g. 25e9)", arg);
		return 0;
	default: /* O_PROGRESS, O_NO_PROGRESS */
		o->progress = c == O_PROGRESS;
		return 0;
	}
}

int cmd_step(int argc, char **argv)
{
	struct step_opts o = {
		.steps = 5, .offload = (double)NAN, .moments = -1, .copy_out = TIER_BF16,
		.hbm_bandwidth = 25e9, .io_size = 1ull << 30, .io_passes = 2, .update_runs = 3,
		.progress = -1,
	};
	const struct bench_arg args[] = {
		BENCH_OTHER(O_MANIFEST, "manifest", required_argument),
		BENCH_NUM(O_PARAMS, "params", &o.params, 64, 1ull << 40, "(64 to 2^40 elements)"),
		BENCH_NUM(O_STEPS, "steps", &o.steps, 1, 100000, "(1 to 100000)"),
		BENCH_NUM(O_DRAM, "dram", &o.dram, 1, UINT64_MAX, "(bytes, e.g. 256MiB)"),
		BENCH_OTHER(O_OFFLOAD, "offload-fraction", required_argument),
		BENCH_DTYPE(O_MOMENTS, "moments", &o.moments,
			    BENCH_DT_FP32 | BENCH_DT_BF16 | BENCH_DT_Q8, "(fp32, bf16 or q8)"),
		BENCH_FLAG(O_JSON, "json", &o.json),
		BENCH_DTYPE(O_COPY_OUT, "copy-out", &o.copy_out,
			    BENCH_DT_NONE | BENCH_DT_FP32 | BENCH_DT_BF16 | BENCH_DT_FP16,
			    "(none, bf16, fp16 or fp32)"),
		BENCH_NUM(O_THREADS, "threads", &o.threads, 1, 1024, "(1 to 1024)"),
		BENCH_NUM(O_SHARD, "shard-size", &o.shard_size, 1, UINT64_MAX, "(bytes, e.g. 16MiB)"),
		BENCH_NUM(O_HBM_CAP, "hbm-capacity", &o.hbm_capacity, 1, UINT64_MAX,
			  "(bytes, e.g. 256MiB)"),
		BENCH_OTHER(O_HBM_BW, "hbm-bandwidth", required_argument),
		BENCH_NUM(O_IO_SIZE, "io-size", &o.io_size, 1, UINT64_MAX, "(bytes, e.g. 1GiB)"),
		BENCH_NUM(O_IO_PASSES, "io-passes", &o.io_passes, 1, BENCH_IO_MAX_PASSES,
			  "(1 to " BENCH_STR(BENCH_IO_MAX_PASSES) ")"),
		BENCH_NUM(O_UPDATE_RUNS, "update-runs", &o.update_runs, 1, 1000, "(1 to 1000)"),
		BENCH_FLAG(O_VERIFY, "verify", &o.verify),
		BENCH_NUM(O_CKPT_EVERY, "checkpoint-every", &o.checkpoint_every, 1, 100000,
			  "(a positive number of steps, 1 to 100000)"),
		BENCH_OTHER(O_PROGRESS, "progress", no_argument),
		BENCH_OTHER(O_NO_PROGRESS, "no-progress", no_argument),
		BENCH_OTHER(O_COMM, "comm", required_argument),
		BENCH_OTHER(O_GRADS, "grads", required_argument),
	};
	struct step_world w;
	struct step_setup su = { .w = &w };
	struct tier_manifest *m = NULL;
	struct progress pg = { 0 };
	int ret = bench_options(&step_cmd, argc, argv, args, sizeof(args) / sizeof(args[0]),
				step_option, &o);

	if (ret)
		return ret == BENCH_HELP ? 0 : ret;
	ret = step_world_open(&o, &w);
	if (ret)
		return ret;
	if (w.active && o.checkpoint_every) {
		ret = bench_bad_usage(&step_cmd, "--checkpoint-every is not measured in a"
				      " partitioned run yet (--comm none for one store)");
		goto out;
	}
	ret = step_world_manifest(&o, &w, &m);
	if (ret)
		goto out;
	ret = step_setup(&o, m, &su);
	if (ret)
		goto out;
	/* Rank 0 alone speaks: the others' progress is quiet. */
	pg.tty = o.progress != 0 && isatty(STDERR_FILENO) && w.rank == 0;
	pg.lines = !pg.tty && w.rank == 0 && (o.progress == 1 || (o.progress < 0 && !o.json));
	if (!o.json && su.dram_capped) {
		char a[32];

		progress_note(&pg, "DRAM tier capped at 1 GiB (the manifest's is %s; --dram"
			      " sets it)", human(su.manifest_dram, a, sizeof(a)));
	}
	ret = step_run(&o, m, &su, &pg);
out:
	tier_manifest_free(m);
	if (ret && ret != STEP_EXIT_VERIFY)
		step_world_abort(&w, ret); /* the others would wait for this rank */
	if (step_world_close(&w) && !ret)
		ret = 1;
	return ret == STEP_EXIT_VERIFY ? 1 : ret;
}
