/*
 * bench_step.c - `tier-bench step`, the main job: optimizer steps of a
 * synthetic model through the store, against a bound measured in the same
 * run.
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

#include "bench.h"

#define STEP_WHO "tier-bench step"
#define STEP_NPARAMS 8
#define STEP_DRAM_CAP (1ull << 30)
/* The in-memory update runs over the elements in chunks of at most this
 * many, reusing one set of arrays: the same elements go through the
 * kernel, in memory far larger than any cache. */
#define STEP_UPDATE_CHUNK (64ull << 20)

struct step_opts {
	const char *manifest;
	uint64_t params;        /* elements; 0: state = 2 x DRAM */
	uint64_t steps;
	uint64_t dram;          /* 0: min(manifest's, 1 GiB) */
	double offload;         /* NAN: the manifest's; TIER_OFFLOAD_AUTO */
	int moments;            /* -1: the manifest's */
	int copy_out;           /* -1: none */
	uint64_t threads;       /* 0: TIER_THREADS / one per CPU */
	uint64_t shard_size;    /* 0: the manifest's */
	uint64_t hbm_capacity;  /* 0: max(DRAM / 4, 2 shards) */
	double hbm_bandwidth;
	uint64_t io_size, io_passes;
	uint64_t update_runs;
	bool json, verify;
	int progress;           /* -1 auto, 0 off */
};

/* What the run settled on, from the options and the manifest. */
struct step_setup {
	char source[256];
	bool gpu, dram_capped, have_nvme;
	uint64_t manifest_dram, dram, lookahead, shard_size, hbm_capacity;
	uint64_t manifest_lookahead;
	enum tier_dtype moments;
	size_t bpe;             /* state bytes per element */
	uint64_t numel, state_bytes;
	size_t sizes[STEP_NPARAMS], max_size;
	const char *hbm_backend; /* NULL: cuda */
	char offload_text[96];
	double offload;
	unsigned threads;       /* the pool's size */
	uint64_t io_bs, io_qd, io_size;
};

/* ------------------------------------------------------------ progress */

/*
 * On a terminal a bar redrawn in place on stderr; otherwise one line per
 * phase and per step, unless --json (whose stdout a script reads).
 */
struct progress {
	bool tty, lines;
	bool drawn;             /* a line on the terminal to clear */
};

__attribute__((format(printf, 2, 3))) static void progress_note(struct progress *p,
								const char *fmt, ...)
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

static void progress_step(struct progress *p, uint64_t done, uint64_t total, double step_s,
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

static void progress_done(struct progress *p)
{
	if (p->drawn) {
		fprintf(stderr, "\r\033[K");
		fflush(stderr);
		p->drawn = false;
	}
}

/* ------------------------------------------------------------- helpers */

static void step_usage(FILE *f)
{
	fprintf(f, "usage: tier-bench step [--manifest FILE] [--params N] [--steps K] [--dram BYTES]\n"
		   "                       [--offload-fraction F|auto] [--moments fp32|bf16] [--json]\n"
		   "                       [--copy-out none|bf16|fp16|fp32] [--threads T] [--shard-size BYTES]\n"
		   "                       [--hbm-capacity BYTES] [--hbm-bandwidth BYTES/s] [--io-size BYTES]\n"
		   "                       [--io-passes P] [--update-runs R] [--verify]\n"
		   "                       [--progress|--no-progress]\n"
		   "  --manifest          the node (default: $TIER_MANIFEST, else the embedded default)\n"
		   "  --params            elements of the model (default: the state is 2x the DRAM tier;\n"
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
		   "Without a GPU in the manifest, the HBM tier is the emulated \"host\" backend when\n"
		   "asked for (an offload fraction below 1, or --hbm-capacity; its updates then run\n"
		   "on the CPU too), else there is none and \"auto\" updates everything on the CPU.\n"
		   "The bound of a step\n"
		   "is the larger of the NVMe time of its bytes at the bandwidth measured in this\n"
		   "run and the in-memory update time; efficiency = bound / median step time.\n"
		   "The mixed bound takes the NVMe time at the rate measured with the step's reads\n"
		   "and writes in flight together instead (after the steps, at the step's mix).\n");
}

__attribute__((format(printf, 1, 2))) static int step_bad_usage(const char *fmt, ...)
{
	va_list ap;

	fprintf(stderr, STEP_WHO ": ");
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fprintf(stderr, "\nRun 'tier-bench step --help' for the options.\n");
	return EXIT_USAGE;
}

/* A runtime failure: what was being done, and the library's detail. */
static int step_fail(const char *what, int rc)
{
	const char *d = tier_last_error();

	fprintf(stderr, STEP_WHO ": %s: %s\n", what, d[0] ? d : tier_strerror(rc));
	return 1;
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

static int manifest_u64(const struct tier_manifest *m, const char *section, const char *key,
			uint64_t *out)
{
	char buf[64], *end;
	int rc = manifest_value(m, section, key, buf, sizeof(buf));

	if (rc)
		return rc;
	*out = strtoull(buf, &end, 10);
	return end == buf || *end ? -EINVAL : 0;
}

static const char *human(uint64_t b, char *buf, size_t len)
{
	if (b >= 1ull << 30)
		snprintf(buf, len, "%.2f GiB", (double)b / (double)(1ull << 30));
	else if (b >= 1ull << 20)
		snprintf(buf, len, "%.1f MiB", (double)b / (double)(1ull << 20));
	else
		snprintf(buf, len, "%.1f KiB", (double)b / 1024.0);
	return buf;
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

/* ---------------------------------------------------- measured bounds */

/*
 * The in-memory update: tier_adam_step over @numel elements in chunks of
 * arrays reused, warm-up pass untimed, then @runs timed passes; the median
 * pass time in *out.
 */
static int step_update_time(const struct step_opts *o, const struct step_setup *su,
			    struct tier_pool *pool, double *out)
{
	size_t chunk = su->numel < STEP_UPDATE_CHUNK ? (size_t)su->numel : STEP_UPDATE_CHUNK;
	size_t ms = dtype_size((int)su->moments), os = dtype_size(o->copy_out);
	struct tier_adam_tensors t = {
		.moment_dtype = su->moments,
		.grad_dtype = TIER_FP32,
		.out_dtype = o->copy_out < 0 ? TIER_FP32 : (enum tier_dtype)o->copy_out,
	};
	struct tier_adam_params hp = { .size = sizeof(struct tier_adam_params),
		.lr = 1e-3, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8, .weight_decay = 0.01,
		.decoupled = true, .step = 1, .grad_scale = 1.0,
	};
	double *times = calloc(o->update_runs, sizeof(double));
	void *grad;
	int rc, ret = 1;

	t.param = adam_alloc(chunk * 4);
	t.exp_avg = adam_alloc(chunk * ms);
	t.exp_avg_sq = adam_alloc(chunk * ms);
	grad = adam_alloc(chunk * 4);
	t.grad = grad;
	if (os)
		t.param_out = adam_alloc(chunk * os);
	if (!times || !t.param || !t.exp_avg || !t.exp_avg_sq || !grad || (os && !t.param_out)) {
		fprintf(stderr, STEP_WHO ": out of memory for the in-memory update of %zu elements\n",
			chunk);
		goto out;
	}
	adam_fill(t.param, chunk, TIER_FP32, FILL_PARAM, 1);
	adam_fill(grad, chunk, TIER_FP32, FILL_GRAD, 2);
	adam_fill(t.exp_avg, chunk, (int)su->moments, FILL_EXP_AVG, 3);
	adam_fill(t.exp_avg_sq, chunk, (int)su->moments, FILL_EXP_AVG_SQ, 4);
	if (os)
		memset(t.param_out, 0, chunk * os);
	t.n = chunk;
	rc = tier_adam_step(pool, &hp, &t);
	if (rc) {
		ret = step_fail("in-memory update", rc);
		goto out;
	}
	for (uint64_t r = 0; r < o->update_runs; r++) {
		uint64_t t0 = now_ns();

		hp.step++;
		for (uint64_t off = 0; off < su->numel; off += chunk) {
			t.n = su->numel - off < chunk ? (size_t)(su->numel - off) : chunk;
			rc = tier_adam_step(pool, &hp, &t);
			if (rc) {
				ret = step_fail("in-memory update", rc);
				goto out;
			}
		}
		times[r] = (double)(now_ns() - t0) * 1e-9;
	}
	*out = median(times, o->update_runs);
	ret = 0;
out:
	free(t.param);
	free(t.exp_avg);
	free(t.exp_avg_sq);
	free(grad);
	free(t.param_out);
	free(times);
	return ret;
}

/* ---------------------------------------------------------- the steps */

struct step_record {
	struct tier_step_result res;
	double wall_s;                        /* begin to end, measured here */
	uint64_t tier_read, tier_written;     /* NVMe tier counters over the step */
};

static void nvme_counters(struct tier_store *s, uint64_t *rd, uint64_t *wr)
{
	struct tier_nvme *n = tier_store_nvme(s);
	struct tier_nvme_stats st;

	*rd = *wr = 0;
	if (!n)
		return;
	tier_nvme_get_stats(n, &st);
	*rd = st.bytes_read;
	*wr = st.bytes_written;
}

/*
 * Compares every parameter's state and copy-out with tier_adam_step run in
 * memory on the same data for the steps that were applied.  0, 1 after a
 * message (a difference or an error).
 */
static int step_verify(const struct step_opts *o, const struct step_setup *su,
		       struct tier_optim *opt, const struct tier_optim_params *op,
		       struct tier_pool *pool, const float *init, const float *grad,
		       void *const *outs, const struct step_record *rec)
{
	size_t n = su->max_size, ms = dtype_size((int)su->moments), os = dtype_size(o->copy_out);
	float *master = malloc(n * 4), *got_master = malloc(n * 4);
	void *m = calloc(n, ms), *v = calloc(n, ms), *got_m = malloc(n * ms), *got_v = malloc(n * ms);
	void *out = os ? malloc(n * os) : NULL;
	int ret = 1, rc;

	if (!master || !got_master || !m || !v || !got_m || !got_v || (os && !out)) {
		fprintf(stderr, STEP_WHO ": out of memory for --verify\n");
		goto done;
	}
	for (uint32_t id = 0; id < STEP_NPARAMS; id++) {
		size_t k = su->sizes[id];
		struct tier_adam_tensors t = {
			.n = k, .param = master, .exp_avg = m, .exp_avg_sq = v,
			.moment_dtype = su->moments, .grad = grad, .grad_dtype = TIER_FP32,
			.param_out = out, .out_dtype = o->copy_out < 0 ? TIER_FP32 :
						      (enum tier_dtype)o->copy_out,
		};
		struct tier_adam_params hp = { .size = sizeof(struct tier_adam_params),
			.lr = op->lr, .beta1 = op->beta1, .beta2 = op->beta2, .eps = op->eps,
			.weight_decay = op->weight_decay, .decoupled = op->decoupled,
			.grad_scale = 1.0,
		};
		const char *what = NULL;
		size_t at = 0;

		memcpy(master, init, k * 4);
		memset(m, 0, k * ms);
		memset(v, 0, k * ms);
		for (uint64_t s = 0; s < o->steps; s++) {
			if (!rec[s].res.applied)
				continue;
			hp.step = rec[s].res.step;
			hp.grad_scale = rec[s].res.clip_coef / rec[s].res.loss_scale;
			rc = tier_adam_step(pool, &hp, &t);
			if (rc) {
				ret = step_fail("--verify: the in-memory reference", rc);
				goto done;
			}
		}
		rc = tier_optim_read(opt, id, got_master, got_m, got_v);
		if (rc) {
			ret = step_fail("--verify: read the state back", rc);
			goto done;
		}
		if (memcmp(master, got_master, k * 4)) {
			what = "master weights";
			while (memcmp(&master[at], &got_master[at], 4) == 0)
				at++;
		} else if (memcmp(m, got_m, k * ms)) {
			what = "exp_avg";
			while (memcmp((char *)m + at * ms, (char *)got_m + at * ms, ms) == 0)
				at++;
		} else if (memcmp(v, got_v, k * ms)) {
			what = "exp_avg_sq";
			while (memcmp((char *)v + at * ms, (char *)got_v + at * ms, ms) == 0)
				at++;
		} else if (os && memcmp(out, outs[id], k * os)) {
			what = "the copy-out";
			while (memcmp((char *)out + at * os, (char *)outs[id] + at * os, os) == 0)
				at++;
		}
		if (what) {
			fprintf(stderr, STEP_WHO ": --verify: parameter %u ('%s', %zu elements): %s"
				" differs from tier_adam_step in memory first at element %zu",
				id, tier_optim_param_name(opt, id), k, what, at);
			if (strcmp(what, "master weights") == 0)
				fprintf(stderr, " (%.9g, expected %.9g)", (double)got_master[at],
					(double)master[at]);
			fprintf(stderr, "\n");
			goto done;
		}
	}
	ret = 0;
done:
	free(master);
	free(got_master);
	free(m);
	free(v);
	free(got_m);
	free(got_v);
	free(out);
	return ret;
}

/* A JSON string: quotes, backslashes and control characters escaped. */
static void print_json_str(const char *s)
{
	putchar('"');
	for (; *s; s++) {
		unsigned char ch = (unsigned char)*s;

		if (ch == '"' || ch == '\\')
			printf("\\%c", ch);
		else if (ch < 0x20)
			printf("\\u%04x", ch);
		else
			putchar(ch);
	}
	putchar('"');
}

static void print_array(const char *key, const struct step_record *rec, uint64_t n,
			double (*get)(const struct step_record *))
{
	printf("\"%s\": [", key);
	for (uint64_t i = 0; i < n; i++)
		printf("%s%.9g", i ? ", " : "", get(&rec[i]));
	printf("]");
}

static double get_step(const struct step_record *r) { return r->res.step_s; }
static double get_wall(const struct step_record *r) { return r->wall_s; }
static double get_stall(const struct step_record *r) { return r->res.stall_s; }
static double get_cstall(const struct step_record *r) { return r->res.cpu_stall_s; }
static double get_gstall(const struct step_record *r) { return r->res.gpu_stall_s; }
static double get_rd(const struct step_record *r) { return (double)r->res.nvme_read_bytes; }
static double get_wr(const struct step_record *r) { return (double)r->res.nvme_write_bytes; }
static double get_trd(const struct step_record *r) { return (double)r->tier_read; }
static double get_twr(const struct step_record *r) { return (double)r->tier_written; }
static double get_h2d(const struct step_record *r) { return (double)r->res.h2d_bytes; }
static double get_d2h(const struct step_record *r) { return (double)r->res.d2h_bytes; }
static double get_rbps(const struct step_record *r) { return r->res.nvme_read_Bps; }
static double get_wbps(const struct step_record *r) { return r->res.nvme_write_Bps; }
static double get_cpu(const struct step_record *r) { return r->res.cpu_fraction; }
static double get_norm(const struct step_record *r) { return r->res.grad_norm; }

/* The median of a field over the steps counted. */
static double med_of(const struct step_record *rec, uint64_t first, uint64_t n,
		     double (*get)(const struct step_record *))
{
	double *v = malloc((n - first) * sizeof(*v)), r;

	if (!v)
		return get(&rec[n - 1]);
	for (uint64_t i = first; i < n; i++)
		v[i - first] = get(&rec[i]);
	r = median(v, n - first);
	free(v);
	return r;
}

static int step_run(const struct step_opts *o, const struct tier_manifest *m,
		    struct step_setup *su, struct progress *pg)
{
	struct tier_store_params sp = { .size = sizeof(struct tier_store_params),
		.dram_capacity = su->dram,
		.hbm_backend = su->hbm_backend,
		.hbm_capacity = su->hbm_backend ? su->hbm_capacity : 0,
		.hbm_bandwidth = su->hbm_backend ? o->hbm_bandwidth : 0,
		.policy = TIER_POLICY_BELADY,
		.flags = TIER_STORE_SCRATCH,
	};
	struct tier_optim_params op;
	struct tier_store *s = NULL;
	struct tier_optim *opt = NULL;
	struct tier_pool *pool = NULL;
	struct step_record *rec = calloc(o->steps, sizeof(*rec));
	/* the NVMe measurement before the steps, and after them (with the
	 * mixed passes; mixed_s 0: none) */
	struct bench_io_result io = { 0 }, io2 = { 0 };
	struct tier_store_stats ss;
	float *init = NULL, *grad = NULL;
	void *outs[STEP_NPARAMS] = { 0 };
	double update_s = 0, read_Bps = 0, write_Bps = 0, rd_b, wr_b;
	uint64_t first, counted, rd0, wr0;
	size_t os = dtype_size(o->copy_out);
	char what[160], a[32], b[32];
	bool has_hbm;
	int rc, ret = 1;

	if (!rec) {
		fprintf(stderr, STEP_WHO ": out of memory\n");
		return 1;
	}

	/* 1. The NVMe tier's bandwidth, on a fresh open of the same tier,
	 * before the store holds its files. */
	if (su->have_nvme) {
		progress_note(pg, "measuring NVMe bandwidth (%s, %s requests, %" PRIu64
			      " in flight, %" PRIu64 " passes)...", human(su->io_size, a, sizeof(a)),
			      human(su->io_bs, b, sizeof(b)), su->io_qd, o->io_passes);
		if (bench_io(m, &(struct bench_io_opts){ .size = su->io_size, .bs = su->io_bs,
							.qd = su->io_qd, .who = STEP_WHO,
							.passes = (unsigned)o->io_passes }, &io))
			goto out;
	}

	/* 2. The in-memory update over the same elements, same threads. */
	rc = tier_pool_create((unsigned)o->threads, &pool);
	if (rc) {
		pool = NULL;
		ret = step_fail("create the thread pool", rc);
		goto out;
	}
	su->threads = tier_pool_size(pool);
	progress_note(pg, "measuring the in-memory update (%" PRIu64 " elements, %u threads)...",
		      su->numel, su->threads);
	if (step_update_time(o, su, pool, &update_s))
		goto out;
	if (!o->verify) {
		tier_pool_destroy(pool);
		pool = NULL;
	}

	/* 3. The store, the optimizer and the model. */
	progress_note(pg, "opening the store and writing the initial state (%s)...",
		      human(su->state_bytes, a, sizeof(a)));
	rc = tier_store_open(m, &sp, &s);
	if (rc) {
		ret = step_fail("open the store", rc);
		goto out;
	}
	has_hbm = tier_store_has_level(s, TIER_HBM);
	tier_optim_params_init(&op);
	op.moment_dtype = (int)su->moments;
	op.offload_fraction = isnan(o->offload) ? TIER_OFFLOAD_MANIFEST : o->offload;
	op.threads = (unsigned)o->threads;
	op.shard_size = o->shard_size;
	rc = tier_optim_create(s, &op, &opt);
	if (rc) {
		ret = step_fail("create the optimizer", rc);
		goto out;
	}
	init = adam_alloc(su->max_size * 4);
	grad = adam_alloc(su->max_size * 4);
	if (!init || !grad) {
		fprintf(stderr, STEP_WHO ": out of memory for %zu-element buffers\n", su->max_size);
		goto out;
	}
	adam_fill(init, su->max_size, TIER_FP32, FILL_PARAM, 11);
	adam_fill(grad, su->max_size, TIER_FP32, FILL_GRAD, 12);
	for (uint32_t i = 0; i < STEP_NPARAMS; i++) {
		uint32_t id;

		snprintf(what, sizeof(what), "layer%u.weight", i);
		rc = tier_optim_add_param(opt, what, su->sizes[i], init, &id);
		if (rc) {
			char w2[200];

			snprintf(w2, sizeof(w2), "add parameter '%s' (%zu elements)", what,
				 su->sizes[i]);
			ret = step_fail(w2, rc);
			goto out;
		}
		if (id != i) {
			fprintf(stderr, STEP_WHO ": parameter '%s' got id %u, expected %u\n", what, id, i);
			goto out;
		}
		if (os) {
			outs[i] = adam_alloc(su->sizes[i] * os);
			if (!outs[i]) {
				fprintf(stderr, STEP_WHO ": out of memory for the copy-out buffers\n");
				goto out;
			}
			memset(outs[i], 0, su->sizes[i] * os);
		}
	}
	if (!o->verify) {
		free(init);
		init = NULL;
	}

	/* 4. The steps: begin, push in reverse order (as backward), end. */
	nvme_counters(s, &rd0, &wr0);
	progress_step(pg, 0, o->steps, 0, 0);
	for (uint64_t k = 0; k < o->steps; k++) {
		struct tier_tensor g = { .ptr = grad, .dtype = TIER_FP32, .mem = TIER_MEM_HOST };
		uint64_t t0 = now_ns(), rd, wr;

		rc = tier_optim_begin(opt, 0);
		if (rc) {
			snprintf(what, sizeof(what), "step %" PRIu64 ": begin", k + 1);
			ret = step_fail(what, rc);
			goto out;
		}
		for (int i = STEP_NPARAMS - 1; i >= 0; i--) {
			struct tier_tensor out = {
				.ptr = outs[i],
				.dtype = o->copy_out < 0 ? TIER_BF16 : (enum tier_dtype)o->copy_out,
				.mem = TIER_MEM_HOST,
			};

			rc = tier_optim_push(opt, (uint32_t)i, &g, os ? &out : NULL);
			if (rc) {
				snprintf(what, sizeof(what), "step %" PRIu64 ": push parameter %d",
					 k + 1, i);
				ret = step_fail(what, rc);
				goto out;
			}
		}
		rc = tier_optim_end(opt, &rec[k].res);
		rec[k].wall_s = (double)(now_ns() - t0) * 1e-9;
		if (rc) {
			snprintf(what, sizeof(what), "step %" PRIu64 ": end", k + 1);
			ret = step_fail(what, rc);
			goto out;
		}
		nvme_counters(s, &rd, &wr);
		rec[k].tier_read = rd - rd0;
		rec[k].tier_written = wr - wr0;
		rd0 = rd;
		wr0 = wr;
		progress_step(pg, k + 1, o->steps, rec[k].res.step_s, rec[k].res.stall_s);
		if (!rec[k].res.applied)
			fprintf(stderr, STEP_WHO ": warning: step %" PRIu64 " was skipped (the optimizer"
				" found an inf or nan gradient)\n", k + 1);
	}
	tier_store_get_stats(s, &ss);
	if (o->verify) {
		progress_note(pg, "verifying against tier_adam_step in memory...");
		if (step_verify(o, su, opt, &op, pool, init, grad, outs, rec))
			goto out;
	}
	progress_done(pg);
	rc = tier_optim_destroy(opt);
	opt = NULL;
	if (rc) {
		ret = step_fail("destroy the optimizer", rc);
		goto out;
	}
	rc = tier_store_close(s);
	s = NULL;
	if (rc) {
		ret = step_fail("close the store", rc);
		goto out;
	}

	/* The NVMe bandwidth again, now that the store's files are gone: this
	 * disk's bandwidth drifts, so the bound takes the mean of the times of
	 * the fastest pass before and the fastest pass after the steps. */
	first = o->steps >= 3 ? 1 : 0;
	counted = o->steps - first;
	rd_b = med_of(rec, first, o->steps, get_rd);
	wr_b = med_of(rec, first, o->steps, get_wr);
	if (su->have_nvme) {
		/* This time also the step's traffic as the disk sees it: its
		 * read and write bytes in flight together, at the step's mix. */
		double mix_read = rd_b + wr_b > 0 ? rd_b / (rd_b + wr_b) : 0;

		progress_note(pg, "measuring NVMe bandwidth again, and mixed at %.0f%% reads...",
			      100 * mix_read);
		if (bench_io(m, &(struct bench_io_opts){ .size = su->io_size, .bs = su->io_bs,
							.qd = su->io_qd, .who = STEP_WHO,
							.passes = (unsigned)o->io_passes,
							.mix_read = mix_read }, &io2)) {
			/* (the disk may have filled up meanwhile: the steps ran) */
			fprintf(stderr, STEP_WHO ": warning: the second NVMe measurement failed (above);"
				" the bound uses the one before the steps\n");
			io2 = io;
			io2.passes = 0;
		}
		for (unsigned i = 0; i < io2.passes && io.passes < 2 * BENCH_IO_MAX_PASSES; i++) {
			io.read_pass_s[io.passes] = io2.read_pass_s[i];
			io.write_pass_s[io.passes++] = io2.write_pass_s[i];
		}
		read_Bps = (double)su->io_size / ((io.read_s + io2.read_s) / 2);
		write_Bps = (double)su->io_size / ((io.write_s + io2.write_s) / 2);
	}

	/* 5. The figures. */
	{
		double step_s = med_of(rec, first, o->steps, get_step);
		double nvme_s = (read_Bps > 0 ? rd_b / read_Bps : 0) +
				(write_Bps > 0 ? wr_b / write_Bps : 0);
		double bound_s = nvme_s > update_s ? nvme_s : update_s;
		/* The same bytes at the rate the disk gave them mixed: where it
		 * serves reads and writes at once faster than one after the
		 * other, this is the tighter floor (then efficiency > 1). */
		double mixed_Bps = io2.mixed_s > 0 ? (double)su->io_size / io2.mixed_s : 0;
		double mixed_read_share = (double)io2.mixed_read_bytes / (double)su->io_size;
		double mixed_nvme_s = mixed_Bps > 0 ? (rd_b + wr_b) / mixed_Bps : 0;
		double mixed_bound_s = mixed_nvme_s > update_s ? mixed_nvme_s : update_s;
		double stall = 0, cstall = 0, gstall = 0, steps_sum = 0;
		double cpu = med_of(rec, first, o->steps, get_cpu);
		double h2d = med_of(rec, first, o->steps, get_h2d);
		double d2h = med_of(rec, first, o->steps, get_d2h);
		const struct tier_step_result *last = &rec[o->steps - 1].res;
		const char *hbm = !has_hbm ? "none" : su->hbm_backend ? su->hbm_backend : "cuda";

		for (uint64_t k = first; k < o->steps; k++) {
			stall += rec[k].res.stall_s;
			cstall += rec[k].res.cpu_stall_s;
			gstall += rec[k].res.gpu_stall_s;
			steps_sum += rec[k].res.step_s;
		}
		stall = steps_sum > 0 ? stall / steps_sum : 0;
		cstall = steps_sum > 0 ? cstall / steps_sum : 0;
		gstall = steps_sum > 0 ? gstall / steps_sum : 0;
		if (o->json) {
			printf("{\"step_s\": %.6f, \"bound_s\": %.6f, \"efficiency\": %.4f"
			       ", \"stall_frac\": %.4f, \"cpu_stall_frac\": %.4f, \"gpu_stall_frac\": %.4f"
			       ", \"nvme_read_bytes_per_step\": %.0f"
			       ", \"nvme_write_bytes_per_step\": %.0f, \"bound_by\": \"%s\""
			       ", \"nvme_s\": %.6f, \"update_s\": %.6f, \"read_GBps\": %.4f"
			       ", \"write_GBps\": %.4f, \"io_bs\": %" PRIu64 ", \"io_qd\": %" PRIu64
			       ", \"io_size\": %" PRIu64 ", \"io_passes\": %u",
			       step_s, bound_s, bound_s / step_s, stall, cstall, gstall, rd_b, wr_b,
			       nvme_s >= update_s ? "nvme" : "update", nvme_s, update_s,
			       read_Bps * 1e-9, write_Bps * 1e-9, su->io_bs, su->io_qd, su->io_size,
			       io.passes);
			printf(", \"io_read_GBps_passes\": [");
			for (unsigned i = 0; i < io.passes; i++)
				printf("%s%.4f", i ? ", " : "", (double)su->io_size / io.read_pass_s[i] * 1e-9);
			printf("], \"io_write_GBps_passes\": [");
			for (unsigned i = 0; i < io.passes; i++)
				printf("%s%.4f", i ? ", " : "", (double)su->io_size / io.write_pass_s[i] * 1e-9);
			printf("]");
			if (mixed_Bps > 0) {
				printf(", \"mixed_bound_s\": %.6f, \"mixed_efficiency\": %.4f"
				       ", \"mixed_nvme_s\": %.6f, \"mixed_GBps\": %.4f"
				       ", \"mixed_read_share\": %.4f, \"io_mixed_GBps_passes\": [",
				       mixed_bound_s, mixed_bound_s / step_s, mixed_nvme_s,
				       mixed_Bps * 1e-9, mixed_read_share);
				for (unsigned i = 0; i < io2.passes; i++)
					printf("%s%.4f", i ? ", " : "",
					       (double)su->io_size / io2.mixed_pass_s[i] * 1e-9);
				printf("]");
			} else {
				printf(", \"mixed_bound_s\": null, \"mixed_efficiency\": null"
				       ", \"mixed_nvme_s\": null, \"mixed_GBps\": null"
				       ", \"mixed_read_share\": null, \"io_mixed_GBps_passes\": []");
			}
			printf(", \"params\": %d, \"numel\": %" PRIu64 ", \"state_bytes\": %" PRIu64
			       ", \"moments\": \"%s\", \"copy_out\": \"%s\", \"dram_bytes\": %" PRIu64
			       ", \"dram_capped\": %s, \"manifest_dram_bytes\": %" PRIu64
			       ", \"shard_size\": %" PRIu64 ", \"lookahead\": %" PRIu64
			       ", \"manifest_lookahead\": %" PRIu64
			       ", \"hbm_backend\": \"%s\", \"hbm_capacity\": %" PRIu64
			       ", \"hbm_bandwidth\": %.4g, \"offload_fraction\": \"%s\""
			       ", \"threads\": %u, \"isa\": \"%s\", \"manifest\": ",
			       STEP_NPARAMS, su->numel, su->state_bytes, dtype_name((int)su->moments),
			       dtype_name(o->copy_out), su->dram, su->dram_capped ? "true" : "false",
			       su->manifest_dram, su->shard_size, su->lookahead,
			       su->manifest_lookahead, hbm,
			       has_hbm && su->hbm_backend ? su->hbm_capacity : 0,
			       has_hbm && su->hbm_backend ? o->hbm_bandwidth : 0.0, su->offload_text,
			       su->threads, tier_adam_isa());
			print_json_str(su->source);
			printf(", \"cpu_fraction\": %.4f, \"cpu_shards\": %u, \"gpu_shards\": %u"
			       ", \"h2d_bytes_per_step\": %.0f, \"d2h_bytes_per_step\": %.0f"
			       ", \"dram_hits\": %" PRIu64 ", \"dram_misses\": %" PRIu64
			       ", \"nsteps\": %" PRIu64 ", \"steps_counted\": %" PRIu64
			       ", \"verified\": %s, \"steps\": {",
			       cpu, last->cpu_shards, last->gpu_shards, h2d, d2h,
			       ss.level[TIER_DRAM].hits, ss.level[TIER_DRAM].misses, o->steps, counted,
			       o->verify ? "true" : "false");
			print_array("step_s", rec, o->steps, get_step);
			printf(", ");
			print_array("wall_s", rec, o->steps, get_wall);
			printf(", ");
			print_array("stall_s", rec, o->steps, get_stall);
			printf(", ");
			print_array("cpu_stall_s", rec, o->steps, get_cstall);
			printf(", ");
			print_array("gpu_stall_s", rec, o->steps, get_gstall);
			printf(", ");
			print_array("nvme_read_bytes", rec, o->steps, get_rd);
			printf(", ");
			print_array("nvme_write_bytes", rec, o->steps, get_wr);
			printf(", ");
			print_array("nvme_tier_read_bytes", rec, o->steps, get_trd);
			printf(", ");
			print_array("nvme_tier_write_bytes", rec, o->steps, get_twr);
			printf(", ");
			print_array("h2d_bytes", rec, o->steps, get_h2d);
			printf(", ");
			print_array("d2h_bytes", rec, o->steps, get_d2h);
			printf(", ");
			print_array("nvme_read_Bps", rec, o->steps, get_rbps);
			printf(", ");
			print_array("nvme_write_Bps", rec, o->steps, get_wbps);
			printf(", ");
			print_array("cpu_fraction", rec, o->steps, get_cpu);
			printf(", ");
			print_array("grad_norm", rec, o->steps, get_norm);
			printf("}}\n");
		} else {
			char c1[32], c2[32];

			if (su->dram_capped)
				snprintf(c1, sizeof(c1), ", capped at 1 GiB");
			else
				c1[0] = 0;
			printf("tier-bench step: %d parameters, %" PRIu64 " elements, state %" PRIu64
			       " bytes (%s), DRAM %" PRIu64 " bytes (%s%s), %" PRIu64 " steps\n",
			       STEP_NPARAMS, su->numel, su->state_bytes,
			       human(su->state_bytes, a, sizeof(a)), su->dram,
			       human(su->dram, b, sizeof(b)), c1, o->steps);
			if (su->dram_capped)
				printf("  manifest %s; its DRAM tier (%s) capped at 1 GiB; --dram sets it\n",
				       su->source, human(su->manifest_dram, a, sizeof(a)));
			else
				printf("  manifest %s\n", su->source);
			printf("  moments %s (%zu state bytes per element), copy-out %s\n",
			       dtype_name((int)su->moments), su->bpe, dtype_name(o->copy_out));
			printf("  shard %" PRIu64 " bytes, lookahead %" PRIu64 " bytes (the manifest's %"
			       PRIu64 ", scaled with DRAM), %u threads (isa %s), offload fraction %s\n",
			       su->shard_size, su->lookahead, su->manifest_lookahead, su->threads,
			       tier_adam_isa(), su->offload_text);
			if (!has_hbm)
				printf("  HBM backend: none (every shard is updated on the CPU)\n");
			else if (su->hbm_backend)
				printf("  HBM backend: %s (emulated device in host memory, %s, %.1f GB/s per"
				       " direction; its share of the update runs on the CPU)\n",
				       su->hbm_backend, human(su->hbm_capacity, a, sizeof(a)),
				       o->hbm_bandwidth * 1e-9);
			else
				printf("  HBM backend: cuda (the manifest's GPU)\n");
			if (su->have_nvme)
				printf("  NVMe measured in this run (%s requests, %" PRIu64 " in flight, %s,"
				       " fastest of %u passes before and after the steps, averaged):"
				       " read %.3f GB/s, write %.3f GB/s\n",
				       human(su->io_bs, a, sizeof(a)), su->io_qd,
				       human(su->io_size, b, sizeof(b)), (unsigned)o->io_passes, read_Bps * 1e-9,
				       write_Bps * 1e-9);
			else
				printf("  no NVMe tier in the manifest: DRAM is the home\n");
			printf("  in-memory update (tier_adam_step, %" PRIu64 " elements, %u threads): "
			       "%.4f s (median of %" PRIu64 ")\n", su->numel, su->threads, update_s,
			       o->update_runs);
			if (first)
				snprintf(c1, sizeof(c1), "steps 2..%" PRIu64, o->steps);
			else
				snprintf(c1, sizeof(c1), "all %" PRIu64 " steps", o->steps);
			printf("  %-20s %10.4f s   median of %s\n", "step time", step_s, c1);
			printf("  %-20s %10.4f s   %s bound; NVMe %.4f s, update %.4f s\n", "bound",
			       bound_s, nvme_s >= update_s ? "NVMe" : "update", nvme_s, update_s);
			printf("  %-20s %10.4f\n", "efficiency", bound_s / step_s);
			if (mixed_Bps > 0)
				printf("  %-20s %10.4f s   efficiency %.4f; NVMe %.4f s at %.3f GB/s,"
				       " reads and writes in flight together (%.0f%% reads)\n",
				       "mixed bound", mixed_bound_s, mixed_bound_s / step_s,
				       mixed_nvme_s, mixed_Bps * 1e-9, 100 * mixed_read_share);
			printf("  %-20s %10.4f     stall_s / step_s (CPU lane %.4f, HBM lane %.4f)\n",
			       "stall share", stall, cstall, gstall);
			printf("  %-20s read %.0f B (%s), write %.0f B (%s)\n", "NVMe per step", rd_b,
			       human((uint64_t)rd_b, c1, sizeof(c1)), wr_b,
			       human((uint64_t)wr_b, c2, sizeof(c2)));
			printf("  %-20s read %.3f GB/s, write %.3f GB/s (medians of the steps'"
			       " bytes over step time)\n", "NVMe achieved",
			       med_of(rec, first, o->steps, get_rbps) * 1e-9,
			       med_of(rec, first, o->steps, get_wbps) * 1e-9);
			printf("  %-20s cpu_fraction %.3f (last step: %u shards on the CPU, %u on the"
			       " HBM tier)\n", "CPU/GPU split", cpu, last->cpu_shards, last->gpu_shards);
			printf("  %-20s h2d %.0f B, d2h %.0f B\n", "HBM per step", h2d, d2h);
			printf("  %4s %9s %9s %9s %14s %14s %6s %14s %14s\n", "step", "step_s", "wall_s",
			       "stall_s", "nvme_read", "nvme_write", "cpu", "h2d", "d2h");
			for (uint64_t k = 0; k < o->steps; k++) {
				const struct tier_step_result *r = &rec[k].res;

				printf("  %4" PRIu64 " %9.4f %9.4f %9.4f %14" PRIu64 " %14" PRIu64
				       " %6.3f %14" PRIu64 " %14" PRIu64 "%s\n", k + 1, r->step_s,
				       rec[k].wall_s, r->stall_s, r->nvme_read_bytes, r->nvme_write_bytes,
				       r->cpu_fraction, r->h2d_bytes, r->d2h_bytes,
				       r->applied ? "" : "  skipped");
			}
			if (o->verify)
				printf("  every parameter's state and copy-out equal tier_adam_step in"
				       " memory, bit for bit\n");
		}
	}
	ret = 0;
out:
	progress_done(pg);
	if (opt && tier_optim_destroy(opt) && ret == 0)
		ret = step_fail("destroy the optimizer", -EIO);
	if (s && tier_store_close(s) && ret == 0)
		ret = step_fail("close the store", -EIO);
	tier_pool_destroy(pool);
	for (int i = 0; i < STEP_NPARAMS; i++)
		free(outs[i]);
	free(init);
	free(grad);
	free(rec);
	return ret;
}

/* ------------------------------------------------------- the command */

/* Resolves the options against the manifest.  0, or an exit code. */
static int step_setup(const struct step_opts *o, const struct tier_manifest *m,
		      struct step_setup *su)
{
	char buf[64];
	unsigned npaths;
	uint64_t se;
	int rc;

	snprintf(su->source, sizeof(su->source), "%s", tier_manifest_source(m));
	if ((rc = manifest_value(m, "gpu", "device", buf, sizeof(buf))) ||
	    (rc = manifest_u64(m, "dram", "capacity", &su->manifest_dram)) ||
	    (rc = manifest_u64(m, "prefetch", "lookahead", &su->manifest_lookahead)) ||
	    (rc = manifest_u64(m, "optimizer", "shard_size", &su->shard_size)) ||
	    (rc = manifest_nvme_paths(m, &npaths))) {
		fprintf(stderr, STEP_WHO ": cannot read the manifest's configuration: %s\n",
			tier_strerror(rc));
		return 1;
	}
	su->gpu = strcmp(buf, "none") != 0;
	su->have_nvme = npaths > 0;
	if (o->shard_size)
		su->shard_size = o->shard_size;

	if (o->moments >= 0) {
		su->moments = (enum tier_dtype)o->moments;
	} else {
		if (manifest_value(m, "optimizer", "moment_dtype", buf, sizeof(buf)) ||
		    parse_dtype(buf, false, &rc) || rc == TIER_FP16) {
			fprintf(stderr, STEP_WHO ": the manifest's moment dtype '%s' is not fp32 or bf16\n",
				buf);
			return 1;
		}
		su->moments = (enum tier_dtype)rc;
	}
	su->bpe = 4 + 2 * dtype_size((int)su->moments);

	if (o->dram) {
		su->dram = o->dram;
	} else {
		su->dram = su->manifest_dram < STEP_DRAM_CAP ? su->manifest_dram : STEP_DRAM_CAP;
		su->dram_capped = su->manifest_dram > STEP_DRAM_CAP;
	}
	su->numel = o->params ? o->params : 2 * su->dram / su->bpe;
	if (su->numel < 64)
		return step_bad_usage("--params %" PRIu64 " is too small (at least 64 elements)",
				      su->numel);
	su->state_bytes = su->numel * su->bpe;
	se = su->shard_size / su->bpe;
	step_sizes(su->numel, se, su->sizes);
	su->max_size = 0;
	for (int i = 0; i < STEP_NPARAMS; i++)
		su->max_size = su->sizes[i] > su->max_size ? su->sizes[i] : su->max_size;

	/* The split, and so the HBM tier. */
	if (isnan(o->offload)) {
		if (manifest_value(m, "optimizer", "offload_fraction", buf, sizeof(buf)))
			snprintf(buf, sizeof(buf), "auto");
		su->offload = strcmp(buf, "auto") == 0 ? TIER_OFFLOAD_AUTO : strtod(buf, NULL);
		snprintf(su->offload_text, sizeof(su->offload_text), "%s (the manifest's)", buf);
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
	su->hbm_capacity = o->hbm_capacity;
	if (!su->hbm_capacity) {
		su->hbm_capacity = su->dram / 4;
		if (su->hbm_capacity < 2 * su->shard_size)
			su->hbm_capacity = 2 * su->shard_size;
	}

	/*
	 * The optimizer's window (docs/optimizer.md): the manifest's lookahead,
	 * scaled with the DRAM tier when the store overrides its capacity,
	 * within [one shard, half of DRAM].  Reported, and it sets the depth
	 * of the NVMe measurement.
	 */
	su->lookahead = su->manifest_lookahead;
	if (su->manifest_dram && su->manifest_dram != su->dram)
		su->lookahead = (uint64_t)((double)su->manifest_lookahead * (double)su->dram /
					   (double)su->manifest_dram);
	if (su->lookahead > su->dram / 2)
		su->lookahead = su->dram / 2;
	if (su->lookahead < su->shard_size)
		su->lookahead = su->shard_size;

	/* The NVMe measurement: a shard per request, the window's shards in
	 * flight (at least 2, at most 32, and 1 GiB of buffers).  Requests are
	 * at least a stripe unit: the store moves whole objects, never part of
	 * a unit, where smaller requests into one object would be
	 * read-modify-writes of a shared unit. */
	su->io_bs = su->shard_size < (1ull << 30) ? su->shard_size : 1ull << 30;
	{
		uint64_t unit = 1u << 20;

		if (!manifest_value(m, "nvme", "stripe_unit", buf, sizeof(buf)))
			(void)parse_bytes(buf, &unit);
		if (su->io_bs < unit)
			su->io_bs = unit;
	}
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

int cmd_step(int argc, char **argv)
{
	enum { O_MANIFEST = 256, O_PARAMS, O_STEPS, O_DRAM, O_OFFLOAD, O_MOMENTS, O_JSON,
	       O_COPY_OUT, O_THREADS, O_SHARD, O_HBM_CAP, O_HBM_BW, O_IO_SIZE, O_IO_PASSES, O_UPDATE_RUNS,
	       O_VERIFY, O_PROGRESS, O_NO_PROGRESS };
	static const struct option longopts[] = {
		{ "manifest", required_argument, NULL, O_MANIFEST },
		{ "params", required_argument, NULL, O_PARAMS },
		{ "steps", required_argument, NULL, O_STEPS },
		{ "dram", required_argument, NULL, O_DRAM },
		{ "offload-fraction", required_argument, NULL, O_OFFLOAD },
		{ "moments", required_argument, NULL, O_MOMENTS },
		{ "json", no_argument, NULL, O_JSON },
		{ "copy-out", required_argument, NULL, O_COPY_OUT },
		{ "threads", required_argument, NULL, O_THREADS },
		{ "shard-size", required_argument, NULL, O_SHARD },
		{ "hbm-capacity", required_argument, NULL, O_HBM_CAP },
		{ "hbm-bandwidth", required_argument, NULL, O_HBM_BW },
		{ "io-size", required_argument, NULL, O_IO_SIZE },
		{ "io-passes", required_argument, NULL, O_IO_PASSES },
		{ "update-runs", required_argument, NULL, O_UPDATE_RUNS },
		{ "verify", no_argument, NULL, O_VERIFY },
		{ "progress", no_argument, NULL, O_PROGRESS },
		{ "no-progress", no_argument, NULL, O_NO_PROGRESS },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	struct step_opts o = {
		.steps = 5, .offload = (double)NAN, .moments = -1, .copy_out = TIER_BF16,
		.hbm_bandwidth = 25e9, .io_size = 1ull << 30, .io_passes = 2, .update_runs = 3,
		.progress = -1,
	};
	struct step_setup su = { 0 };
	struct tier_manifest *m = NULL;
	struct progress pg = { 0 };
	int c, d, ret;

	while ((c = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
		switch (c) {
		case O_MANIFEST:
			o.manifest = optarg;
			break;
		case O_PARAMS:
			if (parse_bytes(optarg, &o.params) || o.params < 64 || o.params > (1ull << 40))
				return step_bad_usage("bad --params '%s' (64 to 2^40 elements)", optarg);
			break;
		case O_STEPS:
			if (parse_bytes(optarg, &o.steps) || o.steps > 100000)
				return step_bad_usage("bad --steps '%s' (1 to 100000)", optarg);
			break;
		case O_DRAM:
			if (parse_bytes(optarg, &o.dram))
				return step_bad_usage("bad --dram '%s' (bytes, e.g. 256MiB)", optarg);
			break;
		case O_OFFLOAD: {
			char *end;

			if (strcmp(optarg, "auto") == 0) {
				o.offload = TIER_OFFLOAD_AUTO;
				break;
			}
			o.offload = strtod(optarg, &end);
			if (end == optarg || *end || !(o.offload >= 0.0 && o.offload <= 1.0))
				return step_bad_usage("bad --offload-fraction '%s' (0 to 1, or auto)",
						      optarg);
			break;
		}
		case O_MOMENTS:
			if (parse_dtype(optarg, false, &d) || d == TIER_FP16)
				return step_bad_usage("bad --moments '%s' (fp32 or bf16)", optarg);
			o.moments = d;
			break;
		case O_JSON:
			o.json = true;
			break;
		case O_COPY_OUT:
			if (parse_dtype(optarg, true, &d))
				return step_bad_usage("bad --copy-out '%s' (none, bf16, fp16 or fp32)",
						      optarg);
			o.copy_out = d;
			break;
		case O_THREADS:
			if (parse_bytes(optarg, &o.threads) || o.threads > 1024)
				return step_bad_usage("bad --threads '%s' (1 to 1024)", optarg);
			break;
		case O_SHARD:
			if (parse_bytes(optarg, &o.shard_size))
				return step_bad_usage("bad --shard-size '%s' (bytes, e.g. 16MiB)", optarg);
			break;
		case O_HBM_CAP:
			if (parse_bytes(optarg, &o.hbm_capacity))
				return step_bad_usage("bad --hbm-capacity '%s' (bytes, e.g. 256MiB)",
						      optarg);
			break;
		case O_HBM_BW:
			if (parse_positive(optarg, &o.hbm_bandwidth))
				return step_bad_usage("bad --hbm-bandwidth '%s' (bytes per second, e.g."
						      " 25e9)", optarg);
			break;
		case O_IO_SIZE:
			if (parse_bytes(optarg, &o.io_size))
				return step_bad_usage("bad --io-size '%s' (bytes, e.g. 1GiB)", optarg);
			break;
		case O_IO_PASSES:
			if (parse_bytes(optarg, &o.io_passes) || o.io_passes > BENCH_IO_MAX_PASSES)
				return step_bad_usage("bad --io-passes '%s' (1 to %d)", optarg,
						      BENCH_IO_MAX_PASSES);
			break;
		case O_UPDATE_RUNS:
			if (parse_bytes(optarg, &o.update_runs) || o.update_runs > 1000)
				return step_bad_usage("bad --update-runs '%s' (1 to 1000)", optarg);
			break;
		case O_VERIFY:
			o.verify = true;
			break;
		case O_PROGRESS:
			o.progress = 1;
			break;
		case O_NO_PROGRESS:
			o.progress = 0;
			break;
		case 'h':
			step_usage(stdout);
			return 0;
		default:
			fprintf(stderr, "Run 'tier-bench step --help' for the options.\n");
			return EXIT_USAGE;
		}
	}
	if (optind < argc)
		return step_bad_usage("unexpected argument '%s'", argv[optind]);
	if (load_manifest(o.manifest, &m))
		return EXIT_USAGE;
	ret = step_setup(&o, m, &su);
	if (ret)
		goto out;
	pg.tty = o.progress != 0 && isatty(STDERR_FILENO);
	pg.lines = !pg.tty && (o.progress == 1 || (o.progress < 0 && !o.json));
	if (!o.json) {
		char a[32];

		if (su.dram_capped)
			progress_note(&pg, "DRAM tier capped at 1 GiB (the manifest's is %s; --dram"
				      " sets it)", human(su.manifest_dram, a, sizeof(a)));
	}
	ret = step_run(&o, m, &su, &pg);
out:
	tier_manifest_free(m);
	return ret;
}
