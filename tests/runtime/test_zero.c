/*
 * test_zero.c - the partitioned optimizer (issue 19's acceptance test;
 * docs/distributed.md "Partitioning", include/tierstore.h
 * tier_optim_params.comm): every rank keeps the state of its piece of each
 * parameter in its own store, the gradients are reduce-scattered
 * (averaged), one global norm and overflow decision is taken, and the
 * updated parameters are all-gathered into every rank's full buffer.
 *
 *   test_zero single [-v]  one rank on the "single" comm ("NULL or one
 *                          rank: not partitioned", include/tierstore.h: so
 *                          export and import work there)
 *   test_zero mpi [-v]     under mpirun -np N: N ranks on the "mpi" comm
 *                          (77 in a build without MPI)
 *   test_zero absent       under mpirun -np 3 (tests/runtime/zero_dead.py): rank 2
 *   test_zero kill         pushes its gradients of step 3 and then never
 *                          calls tier_optim_end (absent) or SIGKILLs itself
 *                          (kill); ranks 0 and 1 must get an error from
 *                          tier_optim_end within the comm's timeout and
 *                          print "zero-dead: rank R: PASS: ..."
 *
 * The scenarios (the table scens[], 20 steps each): fp32; clipping; bf16
 * moments, gradients and outputs; q8 moments (pieces aligned to 256
 * elements, so that b1 and tiny are one rank's alone) with bf16 gradients
 * and outputs, the streaming form, a checkpoint and resume after step 10; an inf (step 5) and a nan (step 13) on
 * one rank under dynamic loss scaling; two groups with a schedule, a
 * parameter without a gradient for four steps, one frozen for five and
 * one without an output buffer for two; a checkpoint, destroy and resume
 * after step 10; fp16 gradients and outputs, each rank pushing in an
 * order of its own; a model of parameters smaller than 64 N, so that
 * some ranks own nothing at all.  The misuse cases: a
 * rank with a longer parameter, with one more parameter, with no output
 * buffer for a parameter, with another group lr; export and import;
 * ranks whose newest checkpoints differ; a step that fails at one rank's
 * tiers (a fault site).
 *
 * -v (or TIER_ZERO_VERBOSE set) prints every step's collective figures
 * (res.collectives, comm_bytes, comm_s, comm_wait_s) per rank; a line per
 * scenario and rank with their totals is always printed.
 *
 * The reference.  Every rank computes the gradients of every rank (seeded
 * by scenario, step, parameter and rank), pushes its own, and feeds the
 * exact average of all of them to a non-partitioned optimizer (comm NULL)
 * on a DRAM-only store of its own, in the same process.  The gradients
 * are small integers times 2^-12 (times the loss scale, a power of two),
 * so every partial sum of them is exact in f32 (|sum| < 2^24 units): the
 * sum does not depend on the order MPI adds the ranks in (which the MPI
 * standard leaves open), and the reference's sum in rank order, divided by
 * N in f32 (and rounded once to bf16 for bf16 gradients), is bit for bit
 * what the comm's average gives (runtime/comm/comm_mpi.c reduce_finish).  So
 * the partitioned optimizer must equal the reference bit for bit: every
 * rank's gathered output buffers after every step, and each rank's piece
 * of the master weights and both moments (tier_optim_read) against the
 * reference's state at [part_off, part_off + part_numel).  The one
 * exception is clipping: the partitioned norm is a sum of the ranks'
 * pieces' sums of squares taken in rank order, the reference's a sum in
 * its own order, so the clip coefficient may differ in its last bits; the
 * clip scenario compares within 1e-6, norm-wise (the largest difference
 * over the largest magnitude of the array: an element near zero after
 * cancellation in the moments carries the absolute error of the others).
 *
 * Under MPI, Check runs without fork (an MPI process must not fork) and
 * every rank runs every test in the same order.  A mismatch does not stop
 * a rank: it is printed on stderr (scenario, rank, step, parameter,
 * element, expected and got) and counted, and at the end of each test the
 * ranks sum their counts over the test's own comm, so every rank fails the
 * same tests and they stay in step for the next one.  A rank whose call
 * fails stops the scenario; the others then fail too, at the latest when
 * the optimizer's comm times out (30 s).
 */
#include "config.h"

#include <check.h>
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/error.h"
#include "common/fault.h"
#include "kernels/adam_math.h"
#include "prefetch/partition.h"
#include "runtime/comm/comm.h"
#include "t_helpers.h"
#include "tierstore/toolkit.h"

#define MAXR 64
#define MAXP 8
#define NSTEPS 20
/* The optimizer's comm: long enough for a loaded CI machine, short enough
 * that a rank that stopped early fails the others in reasonable time. */
#define OPT_TIMEOUT_S 30.0
/* The dead-rank cases' comm timeout. */
#define DEAD_TIMEOUT_S 4.0
/* What tier_optim_end may take past it: the comm's probe that names the
 * rank that did not answer (2 s at most) and 3 s of slack. */
#define DEAD_SLACK_S (2.0 + 3.0)

static const char *backend = "single";
static struct tier_comm *TC;   /* the test's own comm: agreement, gathers */
static int R, N;
static bool verbose;
static char *g_dir;            /* this rank's scratch directory */

static void setup(void)
{
	ts_err_clear();
	g_dir = t_mkdtemp();
}

static void teardown(void)
{
	t_rmtree(g_dir);
	free(g_dir);
	g_dir = NULL;
}

/* ------------------------------------------------------------ the values */

/* Parameter @param's initial master weight @j: in [-0.1, 0.1). */
static float init_val(unsigned param, size_t j)
{
	return (float)(((double)(t_rnd_mix((param + 1) * 1000003ull + j) >> 11) * 0x1p-53 * 2 - 1) * 0.1);
}

/* Rank @rank's gradient at (step, param, j): an integer in [-k, k]. */
static int grad_int(unsigned salt, unsigned step, unsigned param, int rank, size_t j, int k)
{
	uint64_t h = t_rnd_mix(t_rnd_mix(((uint64_t)salt << 48) ^ ((uint64_t)step << 32) ^
					 ((uint64_t)param << 24) ^ (uint64_t)rank) + j);

	return (int)(h % (uint64_t)(2 * k + 1)) - k;
}

static float load(enum tier_dtype dt, const void *buf, size_t j)
{
	if (dt == TIER_BF16)
		return bf16_to_f32(((const uint16_t *)buf)[j]);
	if (dt == TIER_FP16)
		return f16_to_f32(((const uint16_t *)buf)[j]);
	return ((const float *)buf)[j];
}

/* @v rounded once to @dt (as the comm rounds its f32 average). */
static void store(enum tier_dtype dt, void *buf, size_t j, float v)
{
	if (dt == TIER_BF16)
		((uint16_t *)buf)[j] = f32_to_bf16(v);
	else if (dt == TIER_FP16)
		((uint16_t *)buf)[j] = f32_to_f16(v);
	else
		((float *)buf)[j] = v;
}

/* ------------------------------------------------------------ scenarios */

/* The model: sizes that are not multiples of 64, one (b1) smaller than
 * 64 N for N >= 2, one (tiny) smaller than 64, so that some ranks own
 * nothing of them.  group: its group when the scenario has two. */
static const struct pdef {
	const char *name;
	size_t n;
	uint32_t group;
} model[] = {
	{ "emb", 200003, 0 }, { "w1", 9001, 1 }, { "b1", 100, 1 },
	{ "w2", 12345, 0 },   { "tiny", 50, 0 },
};
#define P_W2 3u
#define P_B1 2u

/* A rank that differs: w1 one element longer, one more parameter, no
 * output buffer for w2, another lr for group 0 (a schedule applied on one
 * rank only). */
enum misuse { MIS_NONE, MIS_SIZE, MIS_COUNT, MIS_OUTPUT, MIS_GROUP };
static const char *const mis_name[] = { "none", "size", "count", "output", "group" };

/* A model of parameters all smaller than 64 N (N >= 2): some ranks own
 * nothing of any of them (with part_plan's split, rank 0 owns nothing on
 * 2 ranks or more). */
static const struct pdef small_model[] = {
	{ "x", 100, 0 }, { "y", 60, 0 }, { "z", 1, 0 },
};

/* The order a rank pushes its gradients in (the streaming form). */
enum order {
	O_BACKWARD,   /* descending ids, as backward produces them */
	O_SHUFFLE,    /* a permutation of its own per rank and step */
};

static const struct scen {
	const char *name;
	enum tier_dtype md, gd, od;  /* moments, gradients, outputs */
	double clip;                 /* max_grad_norm; 0: none */
	bool dynamic;                /* dynamic loss scaling from 2^12 */
	bool groups;                 /* two groups, a schedule, a parameter not
				      * pushed at steps 4-7, b1 frozen at 10-14,
				      * no output buffer for w1 at 16-17 */
	unsigned inf_step;           /* rank N-1 puts an inf at emb[0] */
	unsigned nan_step;           /* rank 0 puts a nan at w2's last element */
	unsigned resume_after;       /* checkpoint, destroy, resume after it */
	bool streaming;              /* begin, push, end (else tier_optim_step) */
	bool exact;                  /* bit for bit (else within 1e-6) */
	enum order push;
	bool small;                  /* small_model (its state fits in DRAM) */
} scens[] = {
	{ "fp32", TIER_FP32, TIER_FP32, TIER_FP32, 0, false, false, 0, 0, 0, true, true,
	  O_BACKWARD, false },
	{ "clip", TIER_FP32, TIER_FP32, TIER_FP32, 1.0, false, false, 0, 0, 0, false, false,
	  O_BACKWARD, false },
	{ "bf16", TIER_BF16, TIER_BF16, TIER_BF16, 0, false, false, 0, 0, 0, false, true,
	  O_BACKWARD, false },
	{ "q8", TIER_Q8, TIER_BF16, TIER_BF16, 0, false, false, 0, 0, 10, true, true,
	  O_BACKWARD, false },
	{ "overflow", TIER_FP32, TIER_FP32, TIER_BF16, 0, true, false, 5, 13, 0, true, true,
	  O_BACKWARD, false },
	{ "groups", TIER_FP32, TIER_FP32, TIER_BF16, 0, false, true, 0, 0, 0, true, true,
	  O_BACKWARD, false },
	{ "resume", TIER_FP32, TIER_FP32, TIER_FP32, 0, true, true, 0, 0, 10, true, true,
	  O_BACKWARD, false },
	{ "fp16-shuffled", TIER_FP32, TIER_FP16, TIER_FP16, 0, false, false, 0, 0, 0, true, true,
	  O_SHUFFLE, false },
	/* the last: run last (zero_suite) */
	{ "small", TIER_BF16, TIER_FP32, TIER_FP32, 0, true, false, 0, 0, 0, true, true,
	  O_SHUFFLE, true },
};

/* ------------------------------------------------------------ the world */

struct zparam {
	char name[32];
	size_t n;                   /* numel (on this rank: misuse changes it) */
	size_t off, pn;             /* this rank's piece [off, off + pn) */
	uint32_t group;
	bool frozen;
	float *init;
	void *g, *avg;              /* this rank's gradient; the average */
	void *out, *rout;           /* gathered outputs; the reference's */
};

struct zworld {
	const struct scen *sc;
	unsigned salt;
	struct tier_comm *oc;       /* the optimizer's comm */
	struct tier_manifest *man, *rman;
	struct tier_store *s, *rs;
	struct tier_optim *o, *ro;  /* partitioned; reference */
	size_t np;
	struct zparam pa[MAXP];
	size_t ms, gs, os;
	double scale;               /* the loss scale of this step's gradients */
	unsigned step;
	uint32_t noout;             /* parameters pushed without an output buffer */
	bool clipped;
	long bad;                   /* mismatches on this rank */
	/* totals over the scenario, for the summary line */
	uint32_t collectives;
	uint64_t comm_bytes, nvme_read;
	double comm_s, wait_s, step_s;
};

static void failf(struct zworld *w, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void failf(struct zworld *w, const char *fmt, ...)
{
	va_list ap;

	if (w->bad++ >= 30)
		return;
	fprintf(stderr, "test_zero: %s: rank %d of %d: step %u: ", w->sc->name, R, N, w->step);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
}

/*
 * Every rank's count of mismatches, summed over the test's comm: every
 * rank fails the same tests, with the counts of each.
 */
static void agree(long mine, const char *what)
{
	double x[MAXR] = { 0 };
	char ranks[512] = "";
	double total = 0;
	int rc;

	x[R] = (double)mine;
	rc = comm_allreduce(TC, x, (size_t)N, COMM_F64);
	ck_assert_msg(rc == 0, "%s: rank %d: the test's allreduce: %s", what, R, tier_last_error());
	for (int i = 0; i < N; i++) {
		size_t l = strlen(ranks);

		total += x[i];
		snprintf(ranks + l, sizeof(ranks) - l, "%s%.0f", i ? ", " : "", x[i]);
	}
	ck_assert_msg(total == 0, "%s: mismatches or failures per rank: %s (each rank's are on "
		      "its stderr, 'test_zero: ...: rank R of N: ...')", what, ranks);
}

static void open_store(struct zworld *w, const char *name)
{
	struct tier_store_params sp;
	struct tier_rank rk = { R, R, N, N };
	char text[2048];
	int n, rc;

	/* DRAM a fraction of each rank's piece of the state: it streams
	 * through the rank's own NVMe file (under its own directory). */
	n = snprintf(text, sizeof(text),
		     "name: zero-%s-r${RANK}\ngpu:\n  device: none\ndram:\n  capacity: 256KiB\n"
		     "optimizer:\n  shard_size: 64KiB\n"
		     "nvme:\n  stripe_unit: 64KiB\n  checksum: crc32c\n"
		     "  paths:\n    - path: %s/%s-r${RANK}/\n      capacity: 32MiB\n"
		     "      create: true\n",
		     name, g_dir, name);
	ck_assert_int_lt(n, (int)sizeof(text));
	if (!w->man) {
		rc = tier_manifest_parse_rank(text, (size_t)n, "zero.yaml", 0, &rk, &w->man);
		ck_assert_msg(rc == 0, "manifest: %s\n%s", tier_last_error(), text);
	}
	tier_store_params_init(&sp);
	sp.hbm_backend = "none";
	rc = tier_store_open(w->man, &sp, &w->s);
	ck_assert_msg(rc == 0, "rank %d: store open: %d: %s", R, rc, tier_last_error());
}

/* The reference's store: DRAM only, the whole state. */
static void open_ref_store(const char *name, struct tier_manifest **man, struct tier_store **s)
{
	struct tier_store_params sp;
	char text[512];
	int n, rc;

	n = snprintf(text, sizeof(text),
		     "name: zero-ref-%s-%d\ngpu:\n  device: none\ndram:\n  capacity: 16MiB\n",
		     name, R);
	rc = tier_manifest_parse(text, (size_t)n, "zero-ref.yaml", 0, man);
	ck_assert_msg(rc == 0, "manifest: %s\n%s", tier_last_error(), text);
	tier_store_params_init(&sp);
	sp.hbm_backend = "none";
	rc = tier_store_open(*man, &sp, s);
	ck_assert_msg(rc == 0, "reference store open: %d: %s", rc, tier_last_error());
}

static void hp_of(const struct zworld *w, struct tier_optim_params *hp, struct tier_comm *c)
{
	tier_optim_params_init(hp);
	hp->lr = 2e-3;
	hp->weight_decay = 0.01;
	hp->moment_dtype = (int)w->sc->md;
	hp->offload_fraction = 1.0;
	hp->threads = 2;
	hp->max_grad_norm = w->sc->clip;
	if (w->sc->dynamic) {
		hp->loss_scale = 4096;
		hp->dynamic_loss_scale = true;
		hp->growth_interval = 3;  /* grows during the 20 steps */
		hp->hysteresis = 1;       /* backs off at each overflow */
	}
	hp->comm = c;
}

static void group1(struct tier_group_params *g)
{
	tier_group_params_init(g);
	g->lr = 3e-3;
	g->weight_decay = 0.1;
	g->beta2 = 0.99;
}

static void comm_open_opt(struct zworld *w, double timeout)
{
	struct tier_comm_params cp;
	int rc;

	tier_comm_params_init(&cp);
	cp.backend = backend;
	cp.timeout_s = timeout;
	rc = tier_comm_open(&cp, &w->oc);
	ck_assert_msg(rc == 0, "rank %d: comm open: %s", R, tier_last_error());
}

/*
 * The pieces every rank holds, gathered: consecutive ranks' pieces tile
 * each parameter, each starts on a 64-element boundary (256 with q8
 * moments: TIER_Q8_BLOCK), and they are the split of the contract,
 * part_plan(&numel, 1, N, that alignment, bound) per parameter.
 */
static void check_pieces(struct zworld *w)
{
	size_t counts[MAXR], k = 2 * w->np;
	double *mine = calloc(k, sizeof(double)), *all = calloc(k * (size_t)N, sizeof(double));
	struct tier_optim_info info;
	uint64_t part = 0, total = 0, align = w->sc->md == TIER_Q8 ? TIER_Q8_BLOCK : 64;
	unsigned empty = 0;     /* pieces of no element */
	int rc;

	ck_assert(mine && all);
	for (size_t i = 0; i < w->np; i++) {
		mine[2 * i] = (double)w->pa[i].off;
		mine[2 * i + 1] = (double)w->pa[i].pn;
		part += w->pa[i].pn;
		total += w->pa[i].n;
	}
	for (int r = 0; r < N; r++)
		counts[r] = k;
	rc = comm_allgatherv(TC, mine, all, counts, COMM_F64);
	ck_assert_msg(rc == 0, "the test's allgatherv: %s", tier_last_error());
	for (size_t i = 0; i < w->np; i++) {
		const struct zparam *q = &w->pa[i];
		uint64_t numel = q->n, bound[MAXR + 1], at = 0;

		ck_assert_int_eq(part_plan(&numel, 1, (uint32_t)N, align, bound), 0);
		for (int r = 0; r < N; r++) {
			uint64_t off = (uint64_t)all[(size_t)r * k + 2 * i];
			uint64_t n = (uint64_t)all[(size_t)r * k + 2 * i + 1];

			if (off != at || (n && off % align))
				failf(w, "%s: rank %d's piece [%" PRIu64 ", %" PRIu64 ") does not "
				      "follow rank %d's (which ends at %" PRIu64 ") or is not "
				      "%" PRIu64 "-aligned", q->name, r, off, off + n, r - 1, at, align);
			if (off != bound[r] || n != bound[r + 1] - bound[r])
				failf(w, "%s: rank %d's piece is [%" PRIu64 ", %" PRIu64 "), "
				      "part_plan's [%" PRIu64 ", %" PRIu64 ")", q->name, r, off,
				      off + n, bound[r], bound[r + 1]);
			at = off + n;
			empty += n == 0;
		}
		if (at != q->n)
			failf(w, "%s: the pieces end at %" PRIu64 ", the parameter has %zu elements",
			      q->name, at, q->n);
	}
	/* q8 on several ranks: b1 and tiny (under 256 elements) are one rank's */
	if (align == TIER_Q8_BLOCK && N > 1 && empty < 2 * (unsigned)(N - 1))
		failf(w, "q8 on %d ranks: %u empty pieces, expected at least %d (b1, tiny)", N,
		      empty, 2 * (N - 1));
	ck_assert_int_eq(tier_optim_info(w->o, &info), 0);
	if (info.rank != (N > 1 ? R : 0) || info.world != (N > 1 ? N : 1) ||
	    info.part_elems != part || info.total_elems != total)
		failf(w, "tier_optim_info: rank %d of %d, part_elems %" PRIu64 ", total_elems %"
		      PRIu64 "; expected rank %d of %d, %" PRIu64 ", %" PRIu64, info.rank,
		      info.world, info.part_elems, info.total_elems, R, N, part, total);
	free(mine);
	free(all);
}

/* Reads back the piece each parameter's info gives. */
static void read_pieces(struct zworld *w)
{
	for (size_t i = 0; i < w->np; i++) {
		struct tier_param_info pi;

		ck_assert_int_eq(tier_optim_param_info(w->o, (uint32_t)i, &pi), 0);
		w->pa[i].off = pi.part_off;
		w->pa[i].pn = pi.part_numel;
		if (pi.numel != w->pa[i].n || pi.part_off + pi.part_numel > pi.numel)
			failf(w, "%s: numel %zu, piece [%zu, %zu); expected numel %zu", w->pa[i].name,
			      pi.numel, pi.part_off, pi.part_off + pi.part_numel, w->pa[i].n);
	}
}

static void world_add(struct zworld *w, const char *name, size_t n, uint32_t group)
{
	struct zparam *q = &w->pa[w->np];
	uint32_t id = UINT32_MAX;
	int rc;

	ck_assert_uint_lt(w->np, MAXP);
	memset(q, 0, sizeof(*q));
	snprintf(q->name, sizeof(q->name), "%s", name);
	q->n = n;
	q->group = group;
	q->init = malloc(n * 4);
	q->g = malloc(n * w->gs);
	q->avg = malloc(n * w->gs);
	q->out = malloc(n * w->os);
	q->rout = malloc(n * w->os);
	ck_assert(q->init && q->g && q->avg && q->out && q->rout);
	/* Outputs not written by a step keep this: the same in both. */
	memset(q->out, 0xa5, n * w->os);
	memset(q->rout, 0xa5, n * w->os);
	for (size_t j = 0; j < n; j++)
		q->init[j] = init_val((unsigned)w->np, j);
	/* Every rank hands the full initial values; it keeps its piece. */
	rc = tier_optim_add_param_to(w->o, group, name, n, q->init, &id);
	ck_assert_msg(rc == 0, "rank %d: add %s: %d: %s", R, name, rc, tier_last_error());
	ck_assert_uint_eq(id, w->np);
	rc = tier_optim_add_param_to(w->ro, group, name, n, q->init, &id);
	ck_assert_msg(rc == 0, "reference add %s: %d: %s", name, rc, tier_last_error());
	w->np++;
}

static void world_init(struct zworld *w, const struct scen *sc, unsigned salt, enum misuse mis)
{
	const struct pdef *md = sc->small ? small_model : model;
	size_t nm = sc->small ? ARRAY_SIZE(small_model) : ARRAY_SIZE(model);
	struct tier_optim_params hp;
	int rc;

	memset(w, 0, sizeof(*w));
	w->sc = sc;
	w->salt = salt;
	/* tier_optim_read's moments: q8 as fp32 values */
	w->ms = sc->md == TIER_Q8 ? 4 : tier_dtype_size(sc->md);
	w->gs = tier_dtype_size(sc->gd);
	w->os = tier_dtype_size(sc->od);
	comm_open_opt(w, OPT_TIMEOUT_S);
	open_store(w, sc->name);
	open_ref_store(sc->name, &w->rman, &w->rs);
	hp_of(w, &hp, w->oc);
	rc = tier_optim_create(w->s, &hp, &w->o);
	ck_assert_msg(rc == 0, "rank %d: create: %d: %s", R, rc, tier_last_error());
	hp_of(w, &hp, NULL);
	rc = tier_optim_create(w->rs, &hp, &w->ro);
	ck_assert_msg(rc == 0, "reference create: %d: %s", rc, tier_last_error());
	w->scale = sc->dynamic ? 4096 : 1;
	if (sc->groups) {
		struct tier_group_params g;

		group1(&g);
		ck_assert_int_eq(tier_optim_add_group(w->o, &g, NULL), 0);
		ck_assert_int_eq(tier_optim_add_group(w->ro, &g, NULL), 0);
	}
	for (size_t i = 0; i < nm; i++) {
		size_t n = md[i].n;

		if (mis == MIS_SIZE && N > 1 && R == N - 1 && i == 1)
			n++;   /* w1 one element longer on the last rank */
		world_add(w, md[i].name, n, sc->groups ? md[i].group : 0);
	}
	if (mis == MIS_COUNT && N > 1 && R == N - 1)
		world_add(w, "extra", 777, 0);
	read_pieces(w);
	if (mis == MIS_NONE)
		check_pieces(w);
}

static void world_free(struct zworld *w)
{
	for (size_t i = 0; i < w->np; i++) {
		struct zparam *q = &w->pa[i];

		free(q->init);
		free(q->g);
		free(q->avg);
		free(q->out);
		free(q->rout);
	}
	tier_manifest_free(w->man);
	tier_manifest_free(w->rman);
}

static void world_close(struct zworld *w)
{
	int rc;

	if (w->o) {
		rc = tier_optim_destroy(w->o);
		if (rc)
			failf(w, "destroy: %d: %s", rc, tier_last_error());
	}
	ck_assert_int_eq(tier_optim_destroy(w->ro), 0);
	ck_assert_int_eq(tier_store_close(w->rs), 0);
	rc = tier_store_close(w->s);
	if (rc)
		failf(w, "store close: %d: %s", rc, tier_last_error());
	rc = tier_comm_close(w->oc);
	if (rc)
		failf(w, "comm close: %d: %s", rc, tier_last_error());
	world_free(w);
}

/* ------------------------------------------------------------ checks */

/* @got against @want, @n elements of @dt; @want is the reference's array
 * from element @base (its piece). */
static void compare(struct zworld *w, const char *what, const char *pname, enum tier_dtype dt,
		    const void *got, const void *want, size_t n, size_t base)
{
	size_t es = tier_dtype_size(dt);
	int shown = 0;

	if (w->sc->exact) {
		size_t diff = 0, first = 0;

		for (size_t j = 0; j < n; j++) {
			if (!memcmp((const char *)got + j * es, (const char *)want + j * es, es))
				continue;
			if (!diff++)
				first = j;
			if (shown++ < 3)
				failf(w, "%s %s[%zu]: got %.9g, expected %.9g (bit for bit)", what,
				      pname, base + j, (double)load(dt, got, j),
				      (double)load(dt, want, j));
		}
		if (diff > 3)
			failf(w, "%s %s: %zu of %zu elements differ, the first at [%zu]", what,
			      pname, diff, n, base + first);
	} else {
		double maxd = 0, maxw = 0;
		size_t worst = 0;

		for (size_t j = 0; j < n; j++) {
			double a = (double)load(dt, got, j), b = (double)load(dt, want, j);

			if (!(fabs(a - b) <= maxd)) {
				maxd = fabs(a - b);
				worst = j;
			}
			if (fabs(b) > maxw)
				maxw = fabs(b);
		}
		if (!(maxd <= 1e-6 * maxw))
			failf(w, "%s %s: differs by %.3g of its largest magnitude %.3g (over 1e-6); "
			      "the worst at [%zu]: got %.9g, expected %.9g", what, pname,
			      maxw > 0 ? maxd / maxw : maxd, maxw, base + worst,
			      (double)load(dt, got, worst), (double)load(dt, want, worst));
	}
}

/* Each parameter's piece of the state against the reference's. */
static void check_state(struct zworld *w)
{
	struct tier_loss_scaler a, b;
	enum tier_dtype rdt = w->sc->md == TIER_Q8 ? TIER_FP32 : w->sc->md;

	if (tier_optim_step_count(w->o) != tier_optim_step_count(w->ro))
		failf(w, "step count %" PRIu64 ", the reference's %" PRIu64,
		      tier_optim_step_count(w->o), tier_optim_step_count(w->ro));
	ck_assert_int_eq(tier_optim_get_scaler(w->o, &a), 0);
	ck_assert_int_eq(tier_optim_get_scaler(w->ro, &b), 0);
	if (a.scale != b.scale || a.growth_tracker != b.growth_tracker ||
	    a.hysteresis_tracker != b.hysteresis_tracker)
		failf(w, "loss scaler: scale %g, trackers %u/%d; the reference's %g, %u/%d",
		      a.scale, a.growth_tracker, a.hysteresis_tracker, b.scale, b.growth_tracker,
		      b.hysteresis_tracker);
	for (size_t i = 0; i < w->np; i++) {
		struct zparam *q = &w->pa[i];
		struct tier_param_info pi, ri;
		/* The piece's buffers as large as the parameter: a read of
		 * more than the piece is a mismatch, not a crash. */
		float *p = malloc(q->n * 4), *rp = malloc(q->n * 4);
		void *m = malloc(q->n * w->ms), *v = malloc(q->n * w->ms);
		void *rm = malloc(q->n * w->ms), *rv = malloc(q->n * w->ms);
		int rc;

		ck_assert(p && rp && m && v && rm && rv);
		ck_assert_int_eq(tier_optim_param_info(w->o, (uint32_t)i, &pi), 0);
		ck_assert_int_eq(tier_optim_param_info(w->ro, (uint32_t)i, &ri), 0);
		if (pi.step != ri.step || pi.frozen != ri.frozen || pi.group != ri.group)
			failf(w, "%s: step %" PRIu64 ", frozen %d, group %u; the reference's %"
			      PRIu64 ", %d, %u", q->name, pi.step, pi.frozen, pi.group, ri.step,
			      ri.frozen, ri.group);
		if (pi.part_off != q->off || pi.part_numel != q->pn)
			failf(w, "%s: the piece moved: [%zu, %zu), was [%zu, %zu)", q->name,
			      pi.part_off, pi.part_off + pi.part_numel, q->off, q->off + q->pn);
		rc = tier_optim_read(w->o, (uint32_t)i, p, m, v);
		if (rc) {
			failf(w, "read %s: %d: %s", q->name, rc, tier_last_error());
		} else {
			ck_assert_int_eq(tier_optim_read(w->ro, (uint32_t)i, rp, rm, rv), 0);
			compare(w, "master", q->name, TIER_FP32, p, rp + q->off, q->pn, q->off);
			compare(w, "exp_avg", q->name, rdt, m, (char *)rm + q->off * w->ms, q->pn,
				q->off);
			compare(w, "exp_avg_sq", q->name, rdt, v, (char *)rv + q->off * w->ms,
				q->pn, q->off);
		}
		free(p);
		free(rp);
		free(m);
		free(v);
		free(rm);
		free(rv);
	}
}

/* ------------------------------------------------------------ a step */

/* This step's gradients: this rank's into g, the exact average into avg. */
static void make_grads(struct zworld *w, uint32_t mask)
{
	const struct scen *sc = w->sc;
	/* integers exact in the gradient's type: 8 bits of bf16's
	 * significand, 11 of fp16's */
	int k = sc->gd == TIER_BF16 ? 255 : 2000;
	float unit = (float)(0x1p-12 * w->scale);

	for (size_t i = 0; i < w->np; i++) {
		struct zparam *q = &w->pa[i];

		if (!((mask >> i) & 1u) || q->frozen)
			continue;
		for (size_t j = 0; j < q->n; j++) {
			float sum = 0;

			for (int r = 0; r < N; r++) {
				float v = (float)grad_int(w->salt, w->step, (unsigned)i, r, j, k) * unit;

				if (w->step == sc->inf_step && r == N - 1 && i == 0 && j == 0)
					v = INFINITY;
				if (w->step == sc->nan_step && r == 0 && i == P_W2 && j == q->n - 1)
					v = NAN;
				if (r == R)
					store(sc->gd, q->g, j, v);
				sum += v;   /* exact: see the head of the file */
			}
			store(sc->gd, q->avg, j, sum / (float)N);
		}
	}
}

static void step_result_checks(struct zworld *w, const struct tier_step_result *res,
			       const struct tier_step_result *rr)
{
	if (res->applied != rr->applied || res->step != rr->step ||
	    res->params_updated != rr->params_updated || res->params_skipped != rr->params_skipped)
		failf(w, "applied %d, step %" PRIu64 ", params %u updated %u skipped; the reference: "
		      "%d, %" PRIu64 ", %u, %u", res->applied, res->step, res->params_updated,
		      res->params_skipped, rr->applied, rr->step, rr->params_updated,
		      rr->params_skipped);
	if (res->loss_scale != rr->loss_scale || res->next_loss_scale != rr->next_loss_scale)
		failf(w, "loss scale %g then %g; the reference's %g then %g", res->loss_scale,
		      res->next_loss_scale, rr->loss_scale, rr->next_loss_scale);
	if (rr->applied) {
		/* The norm: summed in another order (1e-6 relative). */
		if (!(fabs(res->grad_norm - rr->grad_norm) <= 1e-6 * rr->grad_norm))
			failf(w, "grad_norm %.17g, the reference's %.17g", res->grad_norm,
			      rr->grad_norm);
		if (!(fabs(res->clip_coef - rr->clip_coef) <= 1e-6 * rr->clip_coef))
			failf(w, "clip_coef %.17g, the reference's %.17g", res->clip_coef,
			      rr->clip_coef);
		if (w->sc->exact && res->clip_coef != 1.0)
			failf(w, "clip_coef %.17g in a scenario without clipping", res->clip_coef);
	}
	if (res->rank != (N > 1 ? R : 0) || res->world != (N > 1 ? N : 1))
		failf(w, "res: rank %d of %d", res->rank, res->world);
	if (N > 1 && (res->collectives == 0 || res->comm_bytes == 0))
		failf(w, "res: %u collectives, %" PRIu64 " bytes on %d ranks", res->collectives,
		      res->comm_bytes, N);
	if (!(res->comm_s >= 0) || !(res->comm_wait_s >= 0) ||
	    !(res->comm_wait_s <= res->step_s + 1e-3))
		failf(w, "res: comm_s %g, comm_wait_s %g, step_s %g", res->comm_s, res->comm_wait_s,
		      res->step_s);
	if ((w->step == w->sc->inf_step || w->step == w->sc->nan_step) &&
	    (res->applied || res->next_loss_scale != res->loss_scale * 0.5))
		failf(w, "the step with an inf or nan on one rank: applied %d, loss scale %g then %g "
		      "(expected skipped, and backed off by half)", res->applied, res->loss_scale,
		      res->next_loss_scale);
	if (rr->clip_coef < 1.0)
		w->clipped = true;
	w->collectives += res->collectives;
	w->comm_bytes += res->comm_bytes;
	w->comm_s += res->comm_s;
	w->wait_s += res->comm_wait_s;
	w->step_s += res->step_s;
	w->nvme_read += res->nvme_read_bytes;
	if (verbose)
		fprintf(stderr, "test_zero: %s: rank %d of %d: step %u: applied %d, norm %.9g, "
			"scale %g, %u collectives, comm_bytes %" PRIu64 ", comm_s %.6f, "
			"comm_wait_s %.6f, step_s %.6f, nvme_read_bytes %" PRIu64 "\n",
			w->sc->name, R, N, w->step, res->applied, res->grad_norm, res->loss_scale,
			res->collectives, res->comm_bytes, res->comm_s, res->comm_wait_s,
			res->step_s, res->nvme_read_bytes);
}

/*
 * Whether @ok on every rank (over the test's comm, so that the ranks
 * leave a scenario together and their next collectives match).  A rank
 * that succeeded where another failed says so: a step fails everywhere
 * or nowhere.
 */
static bool all_ranks_ok(struct zworld *w, bool ok, const char *what)
{
	double f[MAXR] = { 0 };
	char bad[256] = "";
	int rc;

	f[R] = ok ? 0 : 1;
	rc = comm_allreduce(TC, f, (size_t)N, COMM_F64);
	ck_assert_msg(rc == 0, "rank %d: the test's allreduce: %s", R, tier_last_error());
	for (int r = 0; r < N; r++)
		if (f[r] != 0) {
			size_t l = strlen(bad);

			snprintf(bad + l, sizeof(bad) - l, " %d", r);
		}
	if (!bad[0])
		return true;
	if (ok)
		failf(w, "%s failed on rank(s)%s, and succeeded here", what, bad);
	return false;
}

/*
 * What must be the same bits on every rank after a step: the global norm,
 * the clip coefficient, the loss scales and the skip decision (one norm
 * summed in rank order everywhere), and every output buffer (one piece
 * computed once, gathered), in every scenario, the clipped one included.
 */
static void check_across_ranks(struct zworld *w, const struct tier_step_result *res)
{
	enum { K = 7 };
	static const char *const what[K] = { "grad_norm", "clip_coef", "loss_scale",
					      "next_loss_scale", "applied", "outputs (hash)",
					      "outputs (hash)" };
	double mine[K], all[K * MAXR];
	size_t counts[MAXR];
	uint64_t h = 0xcbf29ce484222325ull;
	int rc;

	if (N < 2)
		return;
	for (size_t i = 0; i < w->np; i++) {
		const unsigned char *b = w->pa[i].out;

		for (size_t j = 0; j < w->pa[i].n * w->os; j++)
			h = (h ^ b[j]) * 0x100000001b3ull;
	}
	mine[0] = res->grad_norm;
	mine[1] = res->clip_coef;
	mine[2] = res->loss_scale;
	mine[3] = res->next_loss_scale;
	mine[4] = res->applied;
	mine[5] = (double)(h >> 32);         /* exact in a double */
	mine[6] = (double)(h & 0xffffffffu);
	for (int r = 0; r < N; r++)
		counts[r] = K;
	rc = comm_allgatherv(TC, mine, all, counts, COMM_F64);
	ck_assert_msg(rc == 0, "the test's allgatherv: %s", tier_last_error());
	for (int r = 1; r < N; r++)
		for (int k = 0; k < K; k++)
			if (memcmp(&all[r * K + k], &all[k], sizeof(double)))
				failf(w, "%s: rank %d has %.17g, rank 0 %.17g (not the same bits)",
				      what[k], r, all[r * K + k], all[k]);
}

/* One step: the parameters in @mask (bit i: parameter i) get gradients.
 * false when the partitioned step failed (the scenario stops). */
static bool zstep(struct zworld *w, uint32_t mask)
{
	struct tier_tensor g[MAXP], avg[MAXP], out[MAXP], rout[MAXP];
	struct tier_step_result res, rr;
	const struct scen *sc = w->sc;
	int rc;

	w->step++;
	make_grads(w, mask);
	for (size_t i = 0; i < w->np; i++) {
		struct zparam *q = &w->pa[i];
		bool has = ((mask >> i) & 1u) && !q->frozen;

		g[i] = (struct tier_tensor){ has ? q->g : NULL, sc->gd, TIER_MEM_HOST, q->n };
		avg[i] = (struct tier_tensor){ has ? q->avg : NULL, sc->gd, TIER_MEM_HOST, q->n };
		bool o = !((w->noout >> i) & 1u);

		out[i] = (struct tier_tensor){ o ? q->out : NULL, sc->od, TIER_MEM_HOST, q->n };
		rout[i] = (struct tier_tensor){ o ? q->rout : NULL, sc->od, TIER_MEM_HOST, q->n };
	}
	memset(&res, 0, sizeof(res));
	if (!sc->streaming) {
		rc = tier_optim_step(w->o, TIER_LR_KEEP, g, out, &res);
	} else {
		/* backward order, as a trainer's hooks push */
		rc = tier_optim_begin(w->o, TIER_LR_KEEP);
		if (rc) {
			failf(w, "begin: %d: %s", rc, tier_last_error());
			return false;
		}
		size_t ord[MAXP];

		for (size_t i = 0; i < w->np; i++)
			ord[i] = w->np - 1 - i;
		if (sc->push == O_SHUFFLE) {
			/* each rank its own order: the collectives must not follow it */
			for (size_t i = w->np - 1; i > 0; i--) {
				size_t j = t_rnd_mix(((uint64_t)w->step << 32) ^ ((uint64_t)R << 8) ^ i) % (i + 1);
				size_t t = ord[i];

				ord[i] = ord[j];
				ord[j] = t;
			}
		}
		for (size_t x = 0; x < w->np; x++) {
			size_t i = ord[x];

			if (!g[i].ptr)
				continue;
			rc = tier_optim_push(w->o, (uint32_t)i, &g[i], &out[i]);
			if (rc) {
				failf(w, "push %s: %d: %s", w->pa[i].name, rc, tier_last_error());
				break;
			}
		}
		if (!rc)
			rc = tier_optim_end(w->o, &res);
	}
	if (rc)
		failf(w, "the partitioned step: %d: %s", rc, tier_last_error());
	if (!all_ranks_ok(w, rc == 0, "the partitioned step") || rc)
		return false;
	rc = tier_optim_step(w->ro, TIER_LR_KEEP, avg, rout, &rr);
	ck_assert_msg(rc == 0, "the reference's step %u: %d: %s", w->step, rc, tier_last_error());
	step_result_checks(w, &res, &rr);
	check_across_ranks(w, &res);
	/* Every rank's full output buffers: the all-gather. */
	for (size_t i = 0; i < w->np; i++)
		compare(w, "output", w->pa[i].name, sc->od, w->pa[i].out, w->pa[i].rout, w->pa[i].n,
			0);
	w->scale = rr.next_loss_scale;
	return true;
}

/* Checkpoints after the step, destroys the optimizer and closes its
 * store, reopens the store and resumes with the comm. */
static bool zresume(struct zworld *w)
{
	struct tier_optim_params rt;
	uint64_t gen = 0;
	int rc;

	rc = tier_optim_checkpoint(w->o, &gen);
	if (rc || !gen)
		failf(w, "checkpoint: %d (generation %" PRIu64 "): %s", rc, gen, tier_last_error());
	if (!all_ranks_ok(w, rc == 0 && gen, "the checkpoint"))
		return false;
	rc = tier_optim_destroy(w->o);
	w->o = NULL;
	if (rc)
		failf(w, "destroy: %d: %s", rc, tier_last_error());
	ck_assert_int_eq(tier_store_close(w->s), 0);
	open_store(w, w->sc->name);
	tier_optim_params_init(&rt);
	rt.threads = 2;
	rt.offload_fraction = 1.0;
	rt.comm = w->oc;
	rc = tier_optim_resume(w->s, &rt, &w->o);
	if (rc) {
		w->o = NULL;
		failf(w, "resume: %d: %s", rc, tier_last_error());
	}
	if (!all_ranks_ok(w, rc == 0, "the resume"))
		return false;
	check_state(w);
	return true;
}

/* The script of the groups scenarios, before step @k: group 0 and 1's
 * schedule at step 8, b1 frozen at 10 and thawed at 15, w1 pushed
 * without an output buffer at 16 and 17 (on every rank). */
static void script(struct zworld *w, unsigned k)
{
	if (k == 8) {
		struct tier_group_params g;

		tier_group_params_init(&g);
		g.lr = 1e-3;
		g.weight_decay = 0.05;
		ck_assert_int_eq(tier_optim_set_group(w->o, 0, &g), 0);
		ck_assert_int_eq(tier_optim_set_group(w->ro, 0, &g), 0);
		group1(&g);
		g.lr = 5e-4;
		g.weight_decay = 0.2;
		ck_assert_int_eq(tier_optim_set_group(w->o, 1, &g), 0);
		ck_assert_int_eq(tier_optim_set_group(w->ro, 1, &g), 0);
	}
	w->noout = k == 16 || k == 17 ? 1u << 1 : 0;   /* w1: no output buffer */
	if (k == 10 || k == 15) {
		bool fr = k == 10;

		ck_assert_int_eq(tier_optim_freeze(w->o, P_B1, fr), 0);
		ck_assert_int_eq(tier_optim_freeze(w->ro, P_B1, fr), 0);
		w->pa[P_B1].frozen = fr;
	}
}

static void summary(const struct zworld *w)
{
	fprintf(stderr, "test_zero: %s: rank %d of %d: %u steps, %u collectives, comm_bytes %"
		PRIu64 ", comm_s %.4f, comm_wait_s %.4f, step_s %.4f, nvme_read_bytes %" PRIu64
		", %ld mismatch(es)\n", w->sc->name, R, N, w->step, w->collectives, w->comm_bytes,
		w->comm_s, w->wait_s, w->step_s, w->nvme_read, w->bad);
}

START_TEST(scenario)
{
	const struct scen *sc = &scens[_i];
	struct zworld w;

	world_init(&w, sc, (unsigned)_i + 1, MIS_NONE);
	for (unsigned k = 1; k <= NSTEPS; k++) {
		uint32_t mask = (1u << w.np) - 1;

		if (sc->groups) {
			script(&w, k);
			if (k >= 4 && k <= 7)
				mask &= ~(1u << P_W2);   /* w2: no gradient (on every rank) */
		}
		if (!zstep(&w, mask))
			break;
		if (k % 5 == 0)
			check_state(&w);
		if (k == sc->resume_after && !zresume(&w))
			break;
	}
	if (w.o && w.step == NSTEPS)
		check_state(&w);
	if (sc->clip > 0 && !w.clipped)
		failf(&w, "max_grad_norm %g never clipped: the test needs a smaller one", sc->clip);
	if (!w.nvme_read && !sc->small)
		failf(&w, "no state read from NVMe: the test needs a smaller DRAM tier");
	summary(&w);
	world_close(&w);
	agree(w.bad, sc->name);
}
END_TEST

/* ------------------------------------------------------------ misuse */

/* A rank whose parameters differ (w1 longer, or one more parameter):
 * the first step fails on every rank with -EINVAL naming the rank.  A
 * rank whose step differs where the collectives do not (no output buffer
 * for w2, or another lr for group 0): the step fails on every rank with
 * -EINVAL naming the rank, changing nothing, and once the rank is set
 * right the next step equals the reference's. */
static void misuse_step(enum misuse mis)
{
	static const struct scen sc = { "misuse", TIER_FP32, TIER_FP32, TIER_FP32, 0, false,
					 false, 0, 0, 0, true, true, O_BACKWARD, false };
	struct tier_step_result res;
	struct tier_optim_params hp;
	struct tier_group_params gp;
	struct zworld w;
	int rc_b, rc_e = 0;
	char what[32], detail[TIER_ERR_MAX];
	bool odd = N > 1 && R == N - 1;

	snprintf(what, sizeof(what), "misuse-%s", mis_name[mis]);
	if (N < 2) {
		fprintf(stderr, "test_zero: %s: needs 2 ranks or more; skipped\n", what);
		return;
	}
	world_init(&w, &sc, 99, mis);
	hp_of(&w, &hp, NULL);
	tier_group_params_init(&gp);
	gp.lr = hp.lr;
	gp.weight_decay = hp.weight_decay;
	if (mis == MIS_GROUP && odd) {
		gp.lr *= 2;
		ck_assert_int_eq(tier_optim_set_group(w.o, 0, &gp), 0);
		gp.lr = hp.lr;
	}
	w.step = 1;
	make_grads(&w, (1u << w.np) - 1);
	ts_err_clear();
	rc_b = tier_optim_begin(w.o, TIER_LR_KEEP);
	if (!rc_b) {
		for (size_t i = w.np; i-- > 0;) {
			struct tier_tensor g = { w.pa[i].g, TIER_FP32, TIER_MEM_HOST, w.pa[i].n };
			struct tier_tensor o = { w.pa[i].out, TIER_FP32, TIER_MEM_HOST, w.pa[i].n };
			int rc;

			if (mis == MIS_OUTPUT && odd && i == P_W2)
				o.ptr = NULL;
			rc = tier_optim_push(w.o, (uint32_t)i, &g, &o);
			if (rc)
				failf(&w, "push %s: %d: %s", w.pa[i].name, rc, tier_last_error());
		}
		memset(&res, 0, sizeof(res));
		rc_e = tier_optim_end(w.o, &res);
		if (!rc_e)
			failf(&w, "%s: the step succeeded (applied %d)", what, res.applied);
	}
	snprintf(detail, sizeof(detail), "%s", tier_last_error());
	fprintf(stderr, "test_zero: %s: rank %d of %d: begin %d, end %d: %s\n", what, R, N, rc_b,
		rc_e, detail);
	if (!(rc_b == -EINVAL || (rc_b == 0 && rc_e == -EINVAL)))
		failf(&w, "%s: begin %d, end %d; expected -EINVAL from one of them", what, rc_b,
		      rc_e);
	else if (!strstr(detail, "rank"))
		failf(&w, "%s: the detail '%s' names no rank", what, detail);
	else if (mis == MIS_SIZE && !strstr(detail, "w1"))
		failf(&w, "%s: the detail '%s' does not name the parameter w1", what, detail);
	if (tier_optim_step_count(w.o) != 0)
		failf(&w, "%s: step count %" PRIu64 " after the refused step", what,
		      tier_optim_step_count(w.o));
	if (mis == MIS_OUTPUT || mis == MIS_GROUP) {
		/* Nothing changed; set right, the optimizer goes on. */
		if (mis == MIS_GROUP && odd)
			ck_assert_int_eq(tier_optim_set_group(w.o, 0, &gp), 0);
		check_state(&w);
		w.step = 0;
		if (zstep(&w, (1u << w.np) - 1))
			check_state(&w);
		world_close(&w);
		agree(w.bad, what);
		return;
	}
	/* The comm may be broken by now: its close may say so. */
	rc_b = tier_optim_destroy(w.o);
	w.o = NULL;
	ck_assert_int_eq(tier_optim_destroy(w.ro), 0);
	ck_assert_int_eq(tier_store_close(w.rs), 0);
	ck_assert_int_eq(tier_store_close(w.s), 0);
	rc_e = tier_comm_close(w.oc);
	fprintf(stderr, "test_zero: %s: rank %d: destroy %d, comm close %d\n", what, R, rc_b, rc_e);
	world_free(&w);
	agree(w.bad, what);
}

START_TEST(misuse_size)
{
	misuse_step(MIS_SIZE);
}
END_TEST

START_TEST(misuse_count)
{
	misuse_step(MIS_COUNT);
}
END_TEST

START_TEST(misuse_output)
{
	misuse_step(MIS_OUTPUT);
}
END_TEST

START_TEST(misuse_group)
{
	misuse_step(MIS_GROUP);
}
END_TEST

/* Ranks whose newest checkpoints are of different steps (rank N-1's
 * store reopened at the one before): tier_optim_resume fails on every
 * rank, naming a rank; with every rank rolled back to the same step it
 * resumes, at that step's state. */
START_TEST(misuse_resume)
{
	static const struct scen sc = { "resume-mix", TIER_FP32, TIER_FP32, TIER_FP32, 0, false,
					 false, 0, 0, 0, true, true, O_BACKWARD, false };
	struct tier_optim_params rt;
	struct tier_store_params sp;
	float *snap[MAXP];
	void *snm[MAXP], *snv[MAXP];
	uint64_t g1 = 0, g2 = 0;
	struct zworld w;
	int rc;

	if (N < 2) {
		fprintf(stderr, "test_zero: misuse-resume: needs 2 ranks or more; skipped\n");
		return;
	}
	world_init(&w, &sc, 55, MIS_NONE);
	ck_assert(zstep(&w, (1u << w.np) - 1));
	/* The reference's state after step 1. */
	for (size_t i = 0; i < w.np; i++) {
		snap[i] = malloc(w.pa[i].n * 4);
		snm[i] = malloc(w.pa[i].n * w.ms);
		snv[i] = malloc(w.pa[i].n * w.ms);
		ck_assert(snap[i] && snm[i] && snv[i]);
		ck_assert_int_eq(tier_optim_read(w.ro, (uint32_t)i, snap[i], snm[i], snv[i]), 0);
	}
	rc = tier_optim_checkpoint(w.o, &g1);
	ck_assert_msg(rc == 0, "checkpoint: %s", tier_last_error());
	ck_assert(zstep(&w, (1u << w.np) - 1));
	rc = tier_optim_checkpoint(w.o, &g2);
	ck_assert_msg(rc == 0 && g2 > g1, "checkpoint: %s", tier_last_error());
	ck_assert_int_eq(tier_optim_destroy(w.o), 0);
	w.o = NULL;
	ck_assert_int_eq(tier_store_close(w.s), 0);
	/* Rank N-1 at step 1 (a roll back), the others at step 2. */
	tier_store_params_init(&sp);
	sp.hbm_backend = "none";
	sp.generation = R == N - 1 ? g1 : 0;
	rc = tier_store_open(w.man, &sp, &w.s);
	ck_assert_msg(rc == 0, "store open: %s", tier_last_error());
	tier_optim_params_init(&rt);
	rt.threads = 2;
	rt.comm = w.oc;
	ts_err_clear();
	rc = tier_optim_resume(w.s, &rt, &w.o);
	fprintf(stderr, "test_zero: misuse-resume: rank %d of %d: %d: %s\n", R, N, rc,
		tier_last_error());
	if (rc >= 0 || !strstr(tier_last_error(), "rank"))
		failf(&w, "resume from checkpoints of different steps: %d (%s); expected an error "
		      "naming a rank", rc, tier_last_error());
	if (!rc) {
		ck_assert_int_eq(tier_optim_destroy(w.o), 0);
		w.o = NULL;
	}
	ck_assert_int_eq(tier_store_close(w.s), 0);
	/* Every rank at step 1: it resumes. */
	sp.generation = g1;
	rc = tier_store_open(w.man, &sp, &w.s);
	ck_assert_msg(rc == 0, "store open at %" PRIu64 ": %s", g1, tier_last_error());
	rc = tier_optim_resume(w.s, &rt, &w.o);
	if (rc) {
		w.o = NULL;
		failf(&w, "resume with every rank at step 1: %d: %s", rc, tier_last_error());
	} else {
		if (tier_optim_step_count(w.o) != 1)
			failf(&w, "resumed at step %" PRIu64 ", expected 1",
			      tier_optim_step_count(w.o));
		for (size_t i = 0; i < w.np; i++) {
			struct zparam *q = &w.pa[i];
			float *p = malloc(q->n * 4);
			void *m = malloc(q->n * w.ms), *v = malloc(q->n * w.ms);

			ck_assert(p && m && v);
			ck_assert_int_eq(tier_optim_read(w.o, (uint32_t)i, p, m, v), 0);
			compare(&w, "master (step 1)", q->name, TIER_FP32, p, snap[i] + q->off, q->pn,
				q->off);
			compare(&w, "exp_avg (step 1)", q->name, TIER_FP32, m,
				(char *)snm[i] + q->off * w.ms, q->pn, q->off);
			compare(&w, "exp_avg_sq (step 1)", q->name, TIER_FP32, v,
				(char *)snv[i] + q->off * w.ms, q->pn, q->off);
			free(p);
			free(m);
			free(v);
		}
	}
	for (size_t i = 0; i < w.np; i++) {
		free(snap[i]);
		free(snm[i]);
		free(snv[i]);
	}
	world_close(&w);
	agree(w.bad, "misuse-resume");
}
END_TEST

/*
 * A step that fails on one rank (its first fill between the tiers fails,
 * on rank N-1 only) fails on every rank, the others naming that rank; the
 * ranks' states no longer agree, so later steps are refused everywhere;
 * resumed from the checkpoint before it, the run goes on bit for bit as
 * the reference's (which never took the failed step).
 */
START_TEST(failed_step)
{
	static const struct scen sc = { "failed-step", TIER_FP32, TIER_FP32, TIER_BF16, 0, true,
					 false, 0, 0, 0, false, true, O_BACKWARD, false };
	struct tier_tensor g[MAXP], out[MAXP];
	struct tier_step_result res;
	struct tier_optim_params rt;
	char want[32];
	uint64_t gen = 0;
	struct zworld w;
	int rc;

	NEED_FAULTS();
	world_init(&w, &sc, 33, MIS_NONE);
	ck_assert(zstep(&w, (1u << w.np) - 1));
	ck_assert(zstep(&w, (1u << w.np) - 1));
	rc = tier_optim_checkpoint(w.o, &gen);
	ck_assert_msg(rc == 0, "checkpoint: %s", tier_last_error());
	/* Step 3, failing on rank N-1. */
	w.step = 3;
	make_grads(&w, (1u << w.np) - 1);
	for (size_t i = 0; i < w.np; i++) {
		g[i] = (struct tier_tensor){ w.pa[i].g, TIER_FP32, TIER_MEM_HOST, w.pa[i].n };
		out[i] = (struct tier_tensor){ w.pa[i].out, TIER_BF16, TIER_MEM_HOST, w.pa[i].n };
	}
	if (R == N - 1)
		ck_assert_int_eq(ts_fault_arm(TIER_FAULT_STORE_IO, 1, TIER_FAULT_PERSISTENT, -EIO), 0);
	memset(&res, 0, sizeof(res));
	ts_err_clear();
	rc = tier_optim_step(w.o, TIER_LR_KEEP, g, out, &res);
	if (R == N - 1) {
		if (!ts_fault_fired(TIER_FAULT_STORE_IO))
			failf(&w, "the armed fault did not fire: the test needs another site");
		ts_fault_disarm(TIER_FAULT_STORE_IO);
	}
	fprintf(stderr, "test_zero: failed-step: rank %d of %d: %d: %s\n", R, N, rc,
		tier_last_error());
	snprintf(want, sizeof(want), "rank %d", N - 1);
	if (rc >= 0 || res.applied)
		failf(&w, "a step that failed on rank %d: %d, applied %d; expected an error", N - 1, rc,
		      res.applied);
	else if (!strstr(tier_last_error(), want))
		failf(&w, "the detail '%s' does not name %s", tier_last_error(), want);
	if (tier_optim_step_count(w.o) != 2)
		failf(&w, "step count %" PRIu64 " after the failed step, expected 2",
		      tier_optim_step_count(w.o));
	/* Refused from now on, on every rank. */
	rc = tier_optim_step(w.o, TIER_LR_KEEP, g, out, &res);
	if (rc >= 0)
		failf(&w, "a step after the failed one: %d; expected refused", rc);
	/* Restore the checkpoint of step 2 on every rank, and go on. */
	rc = tier_optim_destroy(w.o);   /* may report the failed write-backs */
	w.o = NULL;
	fprintf(stderr, "test_zero: failed-step: rank %d: destroy %d, store close %d\n", R, rc,
		tier_store_close(w.s));
	open_store(&w, sc.name);
	tier_optim_params_init(&rt);
	rt.threads = 2;
	rt.offload_fraction = 1.0;
	rt.comm = w.oc;
	rc = tier_optim_resume(w.s, &rt, &w.o);
	if (rc) {
		w.o = NULL;
		failf(&w, "resume after the failed step: %d: %s", rc, tier_last_error());
	} else {
		check_state(&w);
		w.step = 2;   /* step 3 again: the reference never took it */
		for (int k = 0; k < 3 && zstep(&w, (1u << w.np) - 1); k++)
			;
		check_state(&w);
	}
	world_close(&w);
	agree(w.bad, "failed-step");
}
END_TEST

/* Export and import of a partitioned optimizer: -ENOTSUP, state kept. */
START_TEST(misuse_export)
{
	static const struct scen sc = { "export", TIER_FP32, TIER_FP32, TIER_FP32, 0, false,
					 false, 0, 0, 0, true, true, O_BACKWARD, false };
	struct tier_optim_params hp;
	struct tier_manifest *im;
	struct tier_store *is;
	struct tier_optim *io = NULL;
	struct zworld w;
	char path[512], rpath[512];
	int rc;

	world_init(&w, &sc, 77, MIS_NONE);
	zstep(&w, (1u << w.np) - 1);
	snprintf(path, sizeof(path), "%s/zero.safetensors", g_dir);
	snprintf(rpath, sizeof(rpath), "%s/ref.safetensors", g_dir);
	ts_err_clear();
	rc = tier_optim_export(w.o, path);
	if (N > 1 && rc != -ENOTSUP)
		failf(&w, "export of a partitioned optimizer: %d (%s), expected -ENOTSUP", rc,
		      tier_last_error());
	if (N > 1 && access(path, F_OK) == 0)
		failf(&w, "the refused export left %s", path);
	if (N == 1 && rc != 0)
		failf(&w, "export on one rank (not partitioned): %d: %s", rc, tier_last_error());
	fprintf(stderr, "test_zero: export: rank %d of %d: %d: %s\n", R, N, rc,
		rc ? tier_last_error() : "");
	/* An import into a partitioned optimizer, of the reference's export. */
	rc = tier_optim_export(w.ro, rpath);
	ck_assert_msg(rc == 0, "reference export: %s", tier_last_error());
	open_ref_store("import", &im, &is);
	hp_of(&w, &hp, w.oc);
	rc = tier_optim_import(is, rpath, &hp, &io);
	if (N > 1 && (rc != -ENOTSUP || io))
		failf(&w, "import with a comm of %d ranks: %d (%s), expected -ENOTSUP", N, rc,
		      tier_last_error());
	if (N == 1 && rc != 0)
		failf(&w, "import with a comm of one rank: %d: %s", rc, tier_last_error());
	if (io)
		ck_assert_int_eq(tier_optim_destroy(io), 0);
	ck_assert_int_eq(tier_store_close(is), 0);
	tier_manifest_free(im);
	/* Nothing changed, and the optimizer goes on. */
	check_state(&w);
	zstep(&w, (1u << w.np) - 1);
	check_state(&w);
	world_close(&w);
	agree(w.bad, "misuse-export");
}
END_TEST

/* ------------------------------------------------------------ dead ranks */

/* Rank 2 (of 3) pushes its gradients of step 3 and then dies (kill) or
 * never calls end (absent): ranks 0 and 1 report what end returned.  Run
 * as a Check test without fork (the helpers assert), which leaves with
 * _exit. */
static bool g_kill;

START_TEST(dead_rank)
{
	static const struct scen sc = { "dead", TIER_FP32, TIER_FP32, TIER_FP32, 0, false, false,
					 0, 0, 0, true, true, O_BACKWARD, false };
	struct tier_optim_params hp;
	struct tier_step_result res;
	struct zworld w;
	double took = 0;
	uint64_t t_step3 = 0;
	const char *d;
	bool ok;
	int rc = 0;

	memset(&w, 0, sizeof(w));
	w.sc = &sc;
	w.gs = w.os = 4;
	w.ms = 4;
	g_dir = t_mkdtemp();
	comm_open_opt(&w, DEAD_TIMEOUT_S);
	open_store(&w, "dead");
	open_ref_store("dead", &w.rman, &w.rs);
	hp_of(&w, &hp, w.oc);
	rc = tier_optim_create(w.s, &hp, &w.o);
	if (!rc) {
		hp_of(&w, &hp, NULL);
		rc = tier_optim_create(w.rs, &hp, &w.ro);
	}
	ck_assert_msg(rc == 0, "zero-dead: rank %d: create: %s", R, tier_last_error());
	world_add(&w, "a", 20001, 0);
	world_add(&w, "b", 301, 0);
	world_add(&w, "c", 70, 0);
	for (unsigned k = 1; k <= 3; k++) {
		uint64_t t0;

		/* In step: a slow store open or step elsewhere is not a
		 * dead peer (the test's comm has the long timeout). */
		ck_assert_msg(comm_barrier(TC) == 0, "zero-dead: rank %d: barrier: %s", R,
			      tier_last_error());
		w.step = k;
		make_grads(&w, 7);
		t0 = ts_now_ns();
		t_step3 = t0;   /* the last: step 3's */
		rc = tier_optim_begin(w.o, TIER_LR_KEEP);
		for (size_t i = 0; !rc && i < w.np; i++) {
			struct tier_tensor g = { w.pa[i].g, TIER_FP32, TIER_MEM_HOST, w.pa[i].n };
			struct tier_tensor o = { w.pa[i].out, TIER_FP32, TIER_MEM_HOST, w.pa[i].n };

			rc = tier_optim_push(w.o, (uint32_t)i, &g, &o);
		}
		ck_assert_msg(rc == 0, "zero-dead: rank %d: step %u: begin or push: %s", R, k,
			      tier_last_error());
		if (k == 3 && R == 2) {
			if (g_kill)
				raise(SIGKILL);
			/* past the others' exit (below) */
			ts_sleep_ns((uint64_t)((DEAD_TIMEOUT_S + DEAD_SLACK_S + 6) * 1e9));
			t_rmtree(g_dir);
			_exit(0);
		}
		rc = tier_optim_end(w.o, &res);
		took = ts_ns_to_s(ts_now_ns() - t0);
		ck_assert_msg(k == 3 || rc == 0, "zero-dead: rank %d: step %u: %s", R, k,
			      tier_last_error());
	}
	d = tier_last_error();
	/* The timeout, up to 2 s of the comm's probe that names the rank
	 * that did not answer, and 3 s of slack. */
	ok = rc == -ETIMEDOUT && took >= DEAD_TIMEOUT_S - 0.05 &&
	     took <= DEAD_TIMEOUT_S + DEAD_SLACK_S && strstr(d, "rank 2") && tier_optim_step_count(w.o) == 2 &&
	     (strstr(d, "reduce_scatter") || strstr(d, "allreduce") || strstr(d, "allgatherv") ||
	      strstr(d, "barrier"));
	printf("zero-dead: rank %d: %s: tier_optim_end %d (%s) after %.2f s (timeout %.0f s), "
	       "step count %" PRIu64 " (2 expected): %s\n", R, ok ? "PASS" : "FAIL", rc,
	       rc == -ETIMEDOUT ? "ETIMEDOUT" : rc ? "error" : "success", took, DEAD_TIMEOUT_S,
	       tier_optim_step_count(w.o), d);
	fflush(stdout);
	/* The optimizer goes away without waiting on the dead peer. */
	rc = tier_optim_destroy(w.o);
	printf("zero-dead: rank %d: destroy %d, comm close %d\n", R, rc, tier_comm_close(w.oc));
	fflush(stdout);
	t_rmtree(g_dir);
	/* Leaves without MPI_Finalize (it would wait on rank 2), once the
	 * other survivor had the time to report, even late (a process that
	 * exits without it makes mpirun end the job). */
	{
		uint64_t end = t_step3 + (uint64_t)((DEAD_TIMEOUT_S + DEAD_SLACK_S + 3) * 1e9), now;

		while ((now = ts_now_ns()) < end)
			ts_sleep_ns(end - now);
	}
	_exit(ok ? 0 : 1);
}
END_TEST

/* ------------------------------------------------------------ suite */

static Suite *zero_suite(void)
{
	Suite *s = suite_create("zero");
	TCase *tc = tcase_create("scenario");

	tcase_add_unchecked_fixture(tc, t_case_setup, t_case_teardown);
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_set_timeout(tc, 300);
	tcase_add_loop_test(tc, scenario, 0, (int)ARRAY_SIZE(scens) - 1);
	suite_add_tcase(s, tc);
	tc = tcase_create("misuse");
	tcase_add_unchecked_fixture(tc, t_case_setup, t_case_teardown);
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_set_timeout(tc, 120);
	tcase_add_test(tc, misuse_size);
	tcase_add_test(tc, misuse_count);
	tcase_add_test(tc, misuse_output);
	tcase_add_test(tc, misuse_group);
	tcase_add_test(tc, misuse_resume);
	tcase_add_test(tc, misuse_export);
	suite_add_tcase(s, tc);
	tc = t_tcase_faults("misuse-faults");
	tcase_add_unchecked_fixture(tc, t_case_setup, t_case_teardown);
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_set_timeout(tc, 120);
	tcase_add_test(tc, failed_step);
	suite_add_tcase(s, tc);
	/* The small model last: ranks that own nothing take paths no other
	 * case takes, and a rank that aborts there (a sanitizer's report)
	 * ends the MPI job, so nothing after it would run. */
	tc = tcase_create("small");
	tcase_add_unchecked_fixture(tc, t_case_setup, t_case_teardown);
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_set_timeout(tc, 300);
	tcase_add_loop_test(tc, scenario, (int)ARRAY_SIZE(scens) - 1, (int)ARRAY_SIZE(scens));
	suite_add_tcase(s, tc);
	return s;
}

static Suite *dead_suite(void)
{
	Suite *s = suite_create("zero-dead");
	TCase *tc = tcase_create("dead");

	tcase_add_test(tc, dead_rank);
	suite_add_tcase(s, tc);
	return s;
}

int main(int argc, char **argv)
{
	const char *mode = argc > 1 ? argv[1] : "single";
	struct tier_comm_params p;
	Suite *suite;
	SRunner *sr;
	int failed, rc;

	verbose = (argc > 2 && !strcmp(argv[2], "-v")) || getenv("TIER_ZERO_VERBOSE");
	if (strcmp(mode, "single") != 0) {
#if !TIER_HAVE_MPI
		fprintf(stderr, "test_zero %s: this build has no MPI; skipped\n", mode);
		return T_EXIT_SKIP;
#else
		backend = "mpi";
		if (strcmp(mode, "mpi") != 0 && strcmp(mode, "absent") != 0 &&
		    strcmp(mode, "kill") != 0) {
			fprintf(stderr, "test_zero: unknown mode %s\n", mode);
			return 2;
		}
#endif
	}
	if (t_faults_skipped())
		return T_EXIT_SKIP;
	tier_comm_params_init(&p);
	p.backend = backend;
	p.timeout_s = 120;
	rc = tier_comm_open(&p, &TC);   /* with mpi: initialises MPI */
	if (rc) {
		fprintf(stderr, "test_zero: open %s: %s\n", backend, tier_last_error());
		return 1;
	}
	R = tier_comm_rank(TC);
	N = tier_comm_size(TC);
	if (N > MAXR) {
		fprintf(stderr, "test_zero: %d ranks (at most %d)\n", N, MAXR);
		return 1;
	}
	if (!strcmp(mode, "absent") || !strcmp(mode, "kill")) {
		if (N != 3) {
			fprintf(stderr, "test_zero %s: runs on 3 ranks, not %d\n", mode, N);
			return 1;
		}
		g_kill = !strcmp(mode, "kill");
		suite = dead_suite();
	} else {
		suite = zero_suite();
	}
	sr = srunner_create(suite);
	if (strcmp(backend, "single") != 0)
		srunner_set_fork_status(sr, CK_NOFORK);
	failed = t_srunner_run(sr, suite);
	srunner_free(sr);
	if (failed)
		fprintf(stderr, "test_zero: rank %d of %d (%s): %d failed\n", R, N, backend, failed);
	rc = tier_comm_close(TC);
	if (rc)
		fprintf(stderr, "test_zero: close: %s\n", tier_last_error());
	return failed || rc ? EXIT_FAILURE : EXIT_SUCCESS;
}
