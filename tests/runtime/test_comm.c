/*
 * test_comm.c - the communicator (runtime/comm/comm.h, docs/distributed.md):
 * its collectives on the "single" backend, and on "mpi" when started by
 * mpirun, table-driven over element types, reductions and uneven splits.
 *
 *   test_comm single   the single backend, the open/close errors (always)
 *   test_comm mpi      under mpirun -np N: every collective on N ranks
 *                      (77 in a build without MPI)
 *   test_comm absent   under mpirun -np 3: rank 2 never calls the
 *                      collective; ranks 0 and 1 must get -ETIMEDOUT after
 *                      the 2 s timeout and print "comm-dead: rank R: ..."
 *   test_comm kill     under mpirun -np 3: rank 2 SIGKILLs itself before
 *                      the collective (tests/runtime/comm_dead.py judges both)
 *   test_comm user N   backend "user" over an in-process world of N
 *                      threads, one comm each, whose callbacks exchange
 *                      through shared memory and a barrier: every
 *                      collective test above on each thread at once (each
 *                      test in its own forked process, so an assertion
 *                      failing on any thread fails it), and the user
 *                      backend's own rows: open's refusals, a callback
 *                      that fails (the error named, the comm broken)
 *
 * Values: the exact cases use small integers, whose sums are exact in
 * any order, so the result is compared bit for bit with a reference
 * every rank computes for its own slice in rank order (the order MPI
 * reduces in is not defined; the average is that exact sum divided by N,
 * rounded once, so it is bitwise too).  The "rand" cases use values in
 * [-1, 1) whose sum depends on the order: compared within N ulps of the
 * sum of magnitudes.  Under MPI, Check runs without fork (an MPI process
 * must not fork), every rank runs every test in the same order, and a
 * rank that fails an assertion leaves the others waiting at most the
 * comm's timeout (60 s), not forever.
 */
#include "config.h"

#include <check.h>
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#if TIER_HAVE_MPI
#include <mpi.h>
#endif

#include "common/clock.h"
#include "kernels/adam_math.h"
#include "runtime/comm/comm.h"
#include "t_helpers.h"
#include "tierstore.h"

#define MAXR 64

static const char *backend = "single";
/* This rank's comm and rank: per thread, for the user backend's world of
 * threads (one process per rank otherwise). */
static _Thread_local struct tier_comm *C;
static _Thread_local int R;
static int N;

static void user_params(struct tier_comm_params *p);

/* ---------------------------------------------------------- the values */

/* Rank @r's element @j: a small integer (exact) or a value in [-1, 1). */
static float val(bool exact, int r, size_t j)
{
	uint32_t h = (uint32_t)t_rnd_mix(((uint64_t)r << 32) ^ (uint64_t)j);

	if (exact)
		return (float)((int)(h % 17u) - 8);
	return (float)((double)h / 2147483648.0 - 1.0);
}

static float narrow(enum comm_dtype dt, float v)
{
	return dt == COMM_BF16 ? bf16_to_f32(f32_to_bf16(v)) :
	       dt == COMM_F16  ? f16_to_f32(f32_to_f16(v)) : v;
}

static void store(enum comm_dtype dt, void *buf, size_t j, float v)
{
	if (dt == COMM_F32)
		((float *)buf)[j] = v;
	else
		((uint16_t *)buf)[j] = dt == COMM_BF16 ? f32_to_bf16(v) : f32_to_f16(v);
}

static float load(enum comm_dtype dt, const void *buf, size_t j)
{
	if (dt == COMM_F32)
		return ((const float *)buf)[j];
	return dt == COMM_BF16 ? bf16_to_f32(((const uint16_t *)buf)[j]) :
				 f16_to_f32(((const uint16_t *)buf)[j]);
}

/* The split of a case: counts[i] for N ranks. */
enum split { EVEN, UNEVEN, ZERO, LARGE };

static void make_counts(enum split sp, size_t *counts)
{
	for (int i = 0; i < N; i++) {
		switch (sp) {
		case EVEN:
			counts[i] = 64;
			break;
		case UNEVEN:
			counts[i] = 3 + 5 * (size_t)i;
			break;
		case ZERO:
			counts[i] = i == N - 1 ? 0 : 7 + (size_t)i;
			break;
		case LARGE:
			counts[i] = 100003 + 997 * (size_t)i;
			break;
		}
	}
}

static const char *split_name[] = { "even", "uneven", "zero", "large" };

/* ------------------------------------------------------ reduce_scatter */

static const struct rs_case {
	enum comm_dtype dt;
	enum comm_red red;
	enum split sp;
	bool exact;
} rs_cases[] = {
	{ COMM_F32, COMM_SUM, EVEN, true },    { COMM_F32, COMM_SUM, UNEVEN, true },
	{ COMM_F32, COMM_AVG, UNEVEN, true },  { COMM_F32, COMM_SUM, ZERO, true },
	{ COMM_F32, COMM_AVG, LARGE, true },   { COMM_F32, COMM_SUM, LARGE, false },
	{ COMM_BF16, COMM_SUM, UNEVEN, true }, { COMM_BF16, COMM_AVG, UNEVEN, true },
	{ COMM_BF16, COMM_AVG, LARGE, false }, { COMM_F16, COMM_SUM, UNEVEN, true },
	{ COMM_F16, COMM_AVG, ZERO, true },    { COMM_F16, COMM_SUM, LARGE, false },
};

START_TEST(reduce_scatter)
{
	const struct rs_case *k = &rs_cases[_i];
	size_t counts[MAXR] = { 0 }, total = 0, off, n, es = comm_dtype_size(k->dt), bad = 0;
	void *send, *recv;
	int rc;

	make_counts(k->sp, counts);
	for (int i = 0; i < N; i++)
		total += counts[i];
	off = comm_offset(counts, R);
	n = counts[R];
	send = malloc(total * es + 1);
	recv = n ? malloc(n * es) : NULL;   /* a rank with no slice may pass none */
	ck_assert(send && (recv || !n));
	for (size_t j = 0; j < total; j++)
		store(k->dt, send, j, val(k->exact, R, j));
	rc = comm_reduce_scatter(C, send, recv, counts, k->dt, k->red);
	ck_assert_msg(rc == 0, "%s: %s", backend, tier_last_error());
	for (size_t j = 0; j < n && bad < 5; j++) {
		/* Rank order, in double from the values each rank sent. */
		double sum = 0, mag = 0;
		float want, got = load(k->dt, recv, j);

		for (int i = 0; i < N; i++) {
			float v = narrow(k->dt, val(k->exact, i, off + j));

			sum += (double)v;
			mag += fabs((double)v);
		}
		want = (float)sum;
		if (k->red == COMM_AVG)
			want /= (float)N;
		want = narrow(k->dt, want);
		if (k->exact) {
			if (memcmp(&got, &want, sizeof(got)) != 0) {
				fprintf(stderr, "rank %d: %s %s %s: [%zu] = %.9g, want %.9g\n", R,
					comm_dtype_name(k->dt), k->red ? "avg" : "sum",
					split_name[k->sp], j, (double)got, (double)want);
				bad++;
			}
		} else {
			/* N roundings of the running sum in f32, then one to the type. */
			double ulp = k->dt == COMM_F32 ? 0x1p-23 : k->dt == COMM_BF16 ? 0x1p-7 : 0x1p-10;
			double tol = (N * 0x1p-23 * mag + ulp * fabs(sum)) /
				     (k->red == COMM_AVG ? N : 1) + 1e-30;

			if (fabs((double)got - (double)want) > tol) {
				fprintf(stderr, "rank %d: %s rand: [%zu] = %.9g, want %.9g (tol %g)\n",
					R, comm_dtype_name(k->dt), j, (double)got, (double)want, tol);
				bad++;
			}
		}
	}
	ck_assert_msg(bad == 0, "rank %d: reduce_scatter %s %s %s: %zu element(s) differ", R,
		      comm_dtype_name(k->dt), k->red ? "avg" : "sum", split_name[k->sp], bad);
	free(send);
	free(recv);
}
END_TEST

/* ----------------------------------------------------------- allreduce */

START_TEST(allreduce)
{
	enum { COUNT = 1000 };
	double *d = malloc(COUNT * sizeof(double));
	float *f = malloc(COUNT * sizeof(float)), *fr = malloc(COUNT * sizeof(float));
	int rc;

	ck_assert(d && f && fr);
	/* Doubles: integers past 2^24 and quarters, exact in any order. */
	for (size_t j = 0; j < COUNT; j++)
		d[j] = (R + 1) * 1e9 + (double)j * 0.25 + R;
	rc = comm_allreduce(C, d, COUNT, COMM_F64);
	ck_assert_msg(rc == 0, "%s", tier_last_error());
	for (size_t j = 0; j < COUNT; j++) {
		double want = 0;

		for (int i = 0; i < N; i++)
			want += (i + 1) * 1e9 + (double)j * 0.25 + i;
		ck_assert_msg(d[j] == want, "f64 [%zu] = %.17g, want %.17g", j, d[j], want);
	}
	/* Floats: exact small integers, bitwise; random ones within N ulps. */
	for (size_t j = 0; j < COUNT; j++) {
		f[j] = val(true, R, j);
		fr[j] = val(false, R, j);
	}
	ck_assert_int_eq(comm_allreduce(C, f, COUNT, COMM_F32), 0);
	ck_assert_int_eq(comm_allreduce(C, fr, COUNT, COMM_F32), 0);
	for (size_t j = 0; j < COUNT; j++) {
		double want = 0, wr = 0, mag = 0;

		for (int i = 0; i < N; i++) {
			want += (double)val(true, i, j);
			wr += (double)val(false, i, j);
			mag += fabs((double)val(false, i, j));
		}
		ck_assert_msg(f[j] == (float)want, "f32 [%zu] = %g, want %g", j, (double)f[j], want);
		ck_assert_msg(fabs((double)fr[j] - wr) <= N * 0x1p-23 * mag + 1e-30,
			      "f32 rand [%zu] = %.9g, want %.9g", j, (double)fr[j], wr);
	}
	/* Zero elements: a valid no-op. */
	ck_assert_int_eq(comm_allreduce(C, NULL, 0, COMM_F64), 0);
	free(d);
	free(f);
	free(fr);
}
END_TEST

/* ---------------------------------------------------------- allgatherv */

static const struct ag_case {
	enum comm_dtype dt;
	enum split sp;
	bool in_place;
} ag_cases[] = {
	{ COMM_F32, UNEVEN, false }, { COMM_F32, ZERO, true },  { COMM_BF16, UNEVEN, false },
	{ COMM_F16, LARGE, true },   { COMM_F64, UNEVEN, false }, { COMM_F32, LARGE, false },
	{ COMM_F16, ZERO, false },
};

/* The bytes rank @r puts at element @j of its slice. */
static void ag_fill(enum comm_dtype dt, void *slice, int r, size_t n)
{
	for (size_t j = 0; j < n; j++) {
		uint32_t v = (uint32_t)r * 100000u + (uint32_t)j;

		switch (comm_dtype_size(dt)) {
		case 8:
			((double *)slice)[j] = v;
			break;
		case 4:
			((float *)slice)[j] = (float)v;
			break;
		default:
			((uint16_t *)slice)[j] = (uint16_t)t_rnd_mix(v);
			break;
		}
	}
}

START_TEST(allgatherv)
{
	const struct ag_case *k = &ag_cases[_i];
	size_t counts[MAXR] = { 0 }, total = 0, es = comm_dtype_size(k->dt);
	char *recv, *send, *want;
	int rc;

	make_counts(k->sp, counts);
	for (int i = 0; i < N; i++)
		total += counts[i];
	recv = malloc(total * es + 1);
	want = malloc(total * es + 1);
	ck_assert(recv && want);
	memset(recv, 0xa5, total * es);
	for (int i = 0; i < N; i++)
		ag_fill(k->dt, want + comm_offset(counts, i) * es, i, counts[i]);
	if (k->in_place) {
		send = recv + comm_offset(counts, R) * es;
	} else {
		send = counts[R] ? malloc(counts[R] * es) : NULL;   /* none for no slice */
		ck_assert(send || !counts[R]);
	}
	ag_fill(k->dt, send, R, counts[R]);
	rc = comm_allgatherv(C, send, recv, counts, k->dt);
	ck_assert_msg(rc == 0, "%s", tier_last_error());
	ck_assert_msg(memcmp(recv, want, total * es) == 0, "rank %d: allgatherv %s %s%s differs",
		      R, comm_dtype_name(k->dt), split_name[k->sp], k->in_place ? " in place" : "");
	if (!k->in_place)
		free(send);
	free(recv);
	free(want);
}
END_TEST

/* ------------------------------------------------------------- barrier */

/*
 * Rank r arrives r * 100 ms late: nobody leaves before the last arrives.
 * Checked on the clock the ranks share (CLOCK_MONOTONIC is the machine's,
 * and the test's ranks run on one): the last rank's time of arrival, sent
 * round after the barrier, is before every rank's time of leaving.  Not a
 * duration each rank measures from when it left the barrier before: the
 * ranks leave that one at different moments, and on a loaded machine a
 * rank that left it late measured less than the last rank slept.
 */
START_TEST(barrier)
{
	double arrived, left;

	ck_assert_int_eq(comm_barrier(C), 0);
	ts_sleep_ns((uint64_t)R * 100000000ull);
	arrived = R == N - 1 ? (double)ts_now_ns() : 0.0;
	ck_assert_msg(comm_barrier(C) == 0, "%s", tier_last_error());
	left = (double)ts_now_ns();
	/* the sum of one time and zeros: exact */
	ck_assert_msg(comm_allreduce(C, &arrived, 1, COMM_F64) == 0, "%s", tier_last_error());
	ck_assert_msg(left >= arrived, "rank %d left the barrier %.3f ms before rank %d arrived", R,
		      (arrived - left) * 1e-6, N - 1);
}
END_TEST

/* ---------------------------------------------------------- nonblocking */

/* A reduce_scatter and an allreduce posted together, work done and tested
 * meanwhile, then waited on in the other order. */
START_TEST(overlap)
{
	size_t counts[MAXR] = { 0 }, total = 0, n, off, polls = 0;
	struct comm_req *rs, *ar;
	float *send, *recv;
	double acc = 0, d[4] = { R, 1, 2, 3 };
	bool done = false;

	make_counts(LARGE, counts);
	for (int i = 0; i < N; i++)
		total += counts[i];
	n = counts[R];
	off = comm_offset(counts, R);
	send = malloc(total * sizeof(float));
	recv = malloc(n * sizeof(float));
	ck_assert(send && recv);
	for (size_t j = 0; j < total; j++)
		send[j] = val(true, R, j);
	ck_assert_msg(comm_ireduce_scatter(C, send, recv, counts, COMM_F32, COMM_SUM, &rs) == 0,
		      "%s", tier_last_error());
	ck_assert_msg(comm_iallreduce(C, d, 4, COMM_F64, &ar) == 0, "%s", tier_last_error());
	/* Other work (the optimizer's tier I/O), testing now and then. */
	for (int round = 0; !done; round++) {
		for (size_t j = 0; j < 100000; j++)
			acc += (double)j * 1e-9;
		ck_assert_msg(comm_test(ar, &done) == 0, "%s", tier_last_error());
		polls++;
		ck_assert_msg(round < 100000, "the allreduce never completed");
	}
	ck_assert_msg(comm_wait(rs) == 0, "%s", tier_last_error());
	ck_assert(acc > 0 && polls > 0);
	ck_assert(d[0] == (double)N * (N - 1) / 2 && d[1] == N && d[3] == 3.0 * N);
	for (size_t j = 0; j < n; j++) {
		float want = 0;

		for (int i = 0; i < N; i++)
			want += val(true, i, off + j);
		ck_assert_msg(recv[j] == want, "[%zu] = %g, want %g", j, (double)recv[j],
			      (double)want);
	}
	free(send);
	free(recv);
}
END_TEST

/* --------------------------------------------------------------- errors */

#define EXPECT(expr, err, text)                                                          \
	do {                                                                             \
		int rc_ = (expr);                                                        \
		ck_assert_msg(rc_ == (err), "%s: %d (%s), want %d", #expr, rc_,          \
			      tier_last_error(), (err));                                 \
		ck_assert_msg(strstr(tier_last_error(), text), "%s: detail '%s' lacks '%s'", \
			      #expr, tier_last_error(), text);                           \
	} while (0)

START_TEST(errors)
{
	size_t counts[MAXR];
	float buf[8] = { 0 }, out[8];
	struct comm_req *r;

	make_counts(EVEN, counts);
	EXPECT(comm_reduce_scatter(C, buf, out, NULL, COMM_F32, COMM_SUM), -EINVAL,
	       "counts is NULL");
	EXPECT(comm_reduce_scatter(C, NULL, out, counts, COMM_F32, COMM_SUM), -EINVAL,
	       "send is NULL");
	EXPECT(comm_reduce_scatter(C, buf, NULL, counts, COMM_F32, COMM_SUM), -EINVAL,
	       "recv is NULL");
	EXPECT(comm_reduce_scatter(C, buf, out, counts, COMM_F64, COMM_SUM), -EINVAL,
	       "element type f64");
	EXPECT(comm_reduce_scatter(C, buf, out, counts, COMM_F32, (enum comm_red)7), -EINVAL,
	       "no reduction");
	EXPECT(comm_allreduce(C, buf, 8, COMM_BF16), -EINVAL, "f64 or f32 only");
	EXPECT(comm_allreduce(C, NULL, 8, COMM_F32), -EINVAL, "buf is NULL");
	EXPECT(comm_allgatherv(C, buf, out, counts, (enum comm_dtype)9), -EINVAL,
	       "no element type");
	counts[0] = SIZE_MAX;
	counts[N > 1 ? 1 : 0] = SIZE_MAX;
	if (N > 1)
		EXPECT(comm_allgatherv(C, buf, out, counts, COMM_F32), -EOVERFLOW,
		       "counts overflow");
	if (!strcmp(backend, "mpi")) {
		/* MPI's counts are ints. */
		make_counts(EVEN, counts);
		counts[0] = (size_t)1 << 31;
		EXPECT(comm_allgatherv(C, buf, out, counts, COMM_F32), -EOVERFLOW,
		       "exceeds MPI's int counts");
		EXPECT(comm_allreduce(C, buf, (size_t)1 << 31, COMM_F32), -EOVERFLOW,
		       "exceed MPI's int counts");
	}
	/* A comm with a collective in flight does not close. */
	{
		struct tier_comm_params p;
		struct tier_comm *c2;

		tier_comm_params_init(&p);
		p.backend = backend;
		p.timeout_s = 60;
		if (!strcmp(backend, "user"))
			user_params(&p);
		ck_assert_msg(tier_comm_open(&p, &c2) == 0, "%s", tier_last_error());
		ck_assert_int_eq(comm_ibarrier(c2, &r), 0);
		EXPECT(tier_comm_close(c2), -EBUSY, "in flight");
		ck_assert_int_eq(comm_wait(r), 0);
		ck_assert_int_eq(tier_comm_close(c2), 0);
#if TIER_DEBUG_HANDLES
		/* Closed (its memory poisoned as a closed one's would be). */
		{
			static uint64_t junk[64];
			struct tier_comm *dead = (struct tier_comm *)(void *)junk;

			EXPECT(comm_barrier(dead), -EINVAL, "is not an open communicator");
			EXPECT(tier_comm_rank(dead), -1, "is not an open communicator");
			EXPECT(tier_comm_close(dead), -EINVAL, "is not an open communicator");
		}
#endif
	}
}
END_TEST

/* Open's own checks: these touch no peer. */
START_TEST(open_errors)
{
	struct tier_comm_params p;
	struct tier_comm *c = (struct tier_comm *)1;

	tier_comm_params_init(&p);
	p.size = 8;
	EXPECT(tier_comm_open(&p, &c), -EINVAL, "struct tier_comm_params");
	ck_assert_ptr_null(c);
	tier_comm_params_init(&p);
	p.backend = "carrier-pigeon";
	EXPECT(tier_comm_open(&p, &c), -ENOENT, "no backend \"carrier-pigeon\"");
	p.backend = "single";
	p.nranks = 4;
	EXPECT(tier_comm_open(&p, &c), -EINVAL, "one rank");
	p.nranks = 0;
	p.timeout_s = NAN;
	EXPECT(tier_comm_open(&p, &c), -EINVAL, "timeout_s is NaN");
	p.timeout_s = INFINITY;   /* forever */
	ck_assert_msg(tier_comm_open(&p, &c) == 0, "%s", tier_last_error());
	ck_assert_int_eq(tier_comm_close(c), 0);
#if !TIER_HAVE_MPI
	p.timeout_s = 0;
	p.backend = "mpi";
	EXPECT(tier_comm_open(&p, &c), -ENOTSUP, "this build has no MPI");
#endif
#if !(TIER_HAVE_NCCL && TIER_HAVE_CUDA)
	tier_comm_params_init(&p);
	p.backend = "nccl";
	EXPECT(tier_comm_open(&p, &c), -ENOTSUP, "this build has no NCCL");
#else
	{
		static const unsigned char id[128];
		int ngpu = 0;
		char why[256];

		tier_comm_params_init(&p);
		p.backend = "nccl";
		p.nccl_id = id;
		p.rank = 1;
		p.nranks = 1;
		EXPECT(tier_comm_open(&p, &c), -EINVAL, "nccl_id with rank 1 of nranks 1");
		/* Without a GPU, a clean error from CUDA or NCCL, not a crash. */
		if (tier_gpu_count(&ngpu, why, sizeof(why)) != 0 || ngpu == 0) {
			int rc;

			p.rank = 0;
			p.timeout_s = 10;
			rc = tier_comm_open(&p, &c);
			ck_assert_msg(rc < 0 && c == NULL, "nccl without a GPU: %d", rc);
			ck_assert_msg(strstr(tier_last_error(), "tier_comm_open: nccl: "),
				      "detail '%s'", tier_last_error());
			fprintf(stderr, "open_errors: nccl without a GPU: %s\n", tier_last_error());
		}
	}
#endif
	/* The defaults: one rank outside a launcher. */
	if (!getenv("OMPI_COMM_WORLD_SIZE")) {
		ck_assert_msg(tier_comm_open(NULL, &c) == 0, "%s", tier_last_error());
		ck_assert_str_eq(tier_comm_backend(c), "single");
		ck_assert_int_eq(tier_comm_rank(c), 0);
		ck_assert_int_eq(tier_comm_size(c), 1);
		ck_assert_int_eq(tier_comm_close(c), 0);
	}
	ck_assert_int_eq(tier_comm_close(NULL), 0);
	ck_assert_int_eq(tier_comm_size(NULL), -1);
	ck_assert(strstr(tier_build_features(), TIER_HAVE_MPI ? "mpi=yes" : "mpi=no"));
}
END_TEST

/* A backend whose collectives never complete (a peer that never
 * arrives), registered by the test: the generic layer's timeout. */
struct comm_be {
	int aborts, closes_broken;
};

static struct comm_be stuck_state;

static int stuck_open(const struct tier_comm_params *p, struct comm_be **out, int *rank,
		      int *size)
{
	(void)p;
	memset(&stuck_state, 0, sizeof(stuck_state));
	*out = &stuck_state;
	*rank = 0;
	*size = 1;
	return 0;
}

static void stuck_close(struct comm_be *b, bool broken)
{
	b->closes_broken += broken;
}

static int stuck_post(struct comm_be *b, struct comm_req *r)
{
	(void)b, (void)r;
	return 0;
}

static int stuck_allreduce(struct comm_be *b, void *buf, size_t n, enum comm_dtype dt,
			   struct comm_req *r)
{
	(void)buf, (void)n, (void)dt;
	return stuck_post(b, r);
}

static int stuck_rs(struct comm_be *b, const void *s, void *d, const size_t *counts,
		    enum comm_dtype dt, enum comm_red red, struct comm_req *r)
{
	(void)s, (void)d, (void)counts, (void)dt, (void)red;
	return stuck_post(b, r);
}

static int stuck_ag(struct comm_be *b, const void *s, void *d, const size_t *counts,
		    enum comm_dtype dt, struct comm_req *r)
{
	(void)s, (void)d, (void)counts, (void)dt;
	return stuck_post(b, r);
}

static int stuck_test(struct comm_be *b, struct comm_req *r, bool *done)
{
	(void)b, (void)r;
	*done = false;
	return 0;
}

static void stuck_abort(struct comm_be *b, struct comm_req *r)
{
	(void)r;
	b->aborts++;
}

static const struct comm_ops stuck_ops = {
	.name = "stuck-test", .version = COMM_OPS_VERSION, .caps = COMM_CAP_HOST_MEMORY,
	.open = stuck_open, .close = stuck_close, .allreduce = stuck_allreduce,
	.reduce_scatter = stuck_rs, .allgatherv = stuck_ag, .barrier = stuck_post,
	.test = stuck_test, .abort = stuck_abort,
};

START_TEST(backend_table)
{
	struct comm_ops bad = stuck_ops;

	ck_assert_ptr_nonnull(comm_backend_find("single"));
	ck_assert_ptr_null(comm_backend_find("stuck-test-none"));
	ck_assert(strstr(comm_backend_names(), "single"));
	bad.name = "bad-test";
	bad.test = NULL;
	EXPECT(comm_backend_register(&bad), -EINVAL, "no test operation");
	bad.test = stuck_test;
	bad.version = 99;
	EXPECT(comm_backend_register(&bad), -EINVAL, "ops version 99");
	bad = comm_single_ops;
	EXPECT(comm_backend_register(&bad), -EEXIST, "already registered");
}
END_TEST

/* A collective that never completes: -ETIMEDOUT at the deadline, naming
 * it; the backend aborted once; the comm broken (-EPIPE) after. */
START_TEST(timeout)
{
	struct tier_comm_params p;
	struct tier_comm *c;
	struct comm_req *r;
	double x = 1, took;
	uint64_t t0;
	bool done = true;
	int rc;

	if (!comm_backend_find("stuck-test"))
		ck_assert_int_eq(comm_backend_register(&stuck_ops), 0);
	tier_comm_params_init(&p);
	p.backend = "stuck-test";
	p.timeout_s = 0.3;
	ck_assert_msg(tier_comm_open(&p, &c) == 0, "%s", tier_last_error());
	EXPECT(comm_barrier(c), -ETIMEDOUT, "comm barrier #1 on rank 0 of 1 (stuck-test)");
	ck_assert_int_eq(stuck_state.aborts, 1);
	EXPECT(comm_barrier(c), -EPIPE, "barrier #1 timed out after 0.3 s");
	ck_assert_int_eq(tier_comm_close(c), -EPIPE);
	ck_assert_int_eq(stuck_state.closes_broken, 1);

	ck_assert_int_eq(tier_comm_open(&p, &c), 0);
	t0 = ts_now_ns();
	ck_assert_int_eq(comm_iallreduce(c, &x, 1, COMM_F64, &r), 0);
	/* Not done before the deadline: asserted when the test came back from
	 * comm_test before it (a loaded machine may hold this thread past
	 * it, and comm_test then times it out, as comm_wait does below). */
	rc = comm_test(r, &done);
	if (ts_ns_to_s(ts_now_ns() - t0) < p.timeout_s) {
		ck_assert_int_eq(rc, 0);
		ck_assert(!done);
	} else if (rc == -ETIMEDOUT) {
		/* timed out by comm_test, which freed it: the comm is broken */
		ck_assert(done);
		ck_assert_int_eq(tier_comm_close(c), -EPIPE);
		return;
	} else {
		ck_assert_int_eq(rc, 0);
		ck_assert(!done);
	}
	EXPECT(tier_comm_close(c), -EBUSY, "in flight");
	EXPECT(comm_wait(r), -ETIMEDOUT, "comm allreduce #1 on rank 0 of 1 (stuck-test): not "
	       "complete after 0.3 s");
	took = ts_ns_to_s(ts_now_ns() - t0);
	ck_assert_msg(took >= 0.3 && took < 2, "timed out after %.3f s", took);
	ck_assert_int_eq(tier_comm_close(c), -EPIPE);
}
END_TEST

#if TIER_HAVE_MPI
/* The program's own communicator: even and odd ranks apart. */
START_TEST(program_comm)
{
	struct tier_comm_params p;
	struct tier_comm *c;
	MPI_Comm half;
	double x = 1 + R;
	int hr, hn;

	ck_assert_int_eq(MPI_Comm_split(MPI_COMM_WORLD, R % 2, R, &half), MPI_SUCCESS);
	MPI_Comm_rank(half, &hr);
	MPI_Comm_size(half, &hn);
	tier_comm_params_init(&p);
	p.mpi_comm = &half;       /* backend NULL: mpi, because mpi_comm is set */
	p.timeout_s = 60;
	ck_assert_msg(tier_comm_open(&p, &c) == 0, "%s", tier_last_error());
	ck_assert_str_eq(tier_comm_backend(c), "mpi");
	ck_assert_int_eq(tier_comm_rank(c), hr);
	ck_assert_int_eq(tier_comm_size(c), hn);
	ck_assert_int_eq(comm_allreduce(c, &x, 1, COMM_F64), 0);
	/* The ranks of this parity: R % 2, R % 2 + 2, ... each gave rank + 1. */
	{
		double want = 0;

		for (int i = R % 2; i < N; i += 2)
			want += 1 + i;
		ck_assert_msg(x == want, "rank %d: %g, want %g", R, x, want);
	}
	ck_assert_int_eq(tier_comm_close(c), 0);
	MPI_Comm_free(&half);
}
END_TEST

/* The NCCL backend's id exchange: rank 0 fills, everyone gets it; rank 0's
 * failure fails every rank. */
static int fill_ok(void *buf)
{
	for (int i = 0; i < 128; i++)
		((unsigned char *)buf)[i] = (unsigned char)(i * 7 + 1);
	return 0;
}

static int fill_bad(void *buf)
{
	(void)buf;
	return -EIO;
}

START_TEST(bcast_bytes)
{
	unsigned char got[128] = { 0 };
	int r = -1, n = -1;

	ck_assert_msg(comm_mpi_bcast_bytes(NULL, got, sizeof(got), fill_ok, &r, &n) == 0, "%s",
		      tier_last_error());
	ck_assert_int_eq(r, R);
	ck_assert_int_eq(n, N);
	for (int i = 0; i < 128; i++)
		ck_assert_uint_eq(got[i], (unsigned char)(i * 7 + 1));
	ck_assert_int_eq(comm_mpi_bcast_bytes(NULL, got, sizeof(got), fill_bad, &r, &n),
			 -EIO);
	if (R != 0)
		ck_assert(strstr(tier_last_error(), "rank 0 could not make"));
}
END_TEST
#endif

/* ------------------------------------------------------ backend "user" */

/*
 * The world of `test_comm user N`: N threads in this process, each with
 * its own comm (backend "user", rank r of N), whose callbacks make a real
 * exchange: each rank publishes its buffer, all meet at a barrier, each
 * reads the others' buffers (reductions in rank order, in f32 for bf16
 * and f16, rounded once), and all meet again before anyone reuses a
 * buffer.  The barrier has a deadline, so a rank that never comes gives
 * -ETIMEDOUT through the comm rather than a hang.
 */
#define WORLD_TIMEOUT_S 30

struct world {
	pthread_mutex_t lock;
	pthread_cond_t cond;
	unsigned arrived;
	uint64_t gen;
	const void *buf[MAXR];     /* what each rank published */
};

struct world_rank {
	struct world *w;
	int rank;
};

static struct world W;
static struct world_rank world_ranks[MAXR];
static _Thread_local struct world_rank *this_rank;

static int world_meet(struct world *w)
{
	struct timespec dl;
	uint64_t gen;
	int rc = 0;

	clock_gettime(CLOCK_REALTIME, &dl);
	dl.tv_sec += WORLD_TIMEOUT_S;
	pthread_mutex_lock(&w->lock);
	gen = w->gen;
	if (++w->arrived == (unsigned)N) {
		w->arrived = 0;
		w->gen++;
		pthread_cond_broadcast(&w->cond);
	} else {
		while (w->gen == gen && rc == 0)
			rc = pthread_cond_timedwait(&w->cond, &w->lock, &dl);
		if (w->gen != gen)
			rc = 0;
	}
	pthread_mutex_unlock(&w->lock);
	return -rc;
}

/* Publishes @buf and meets the others: then every w->buf[i] is set. */
static int world_publish(struct world_rank *x, const void *buf)
{
	x->w->buf[x->rank] = buf;
	return world_meet(x->w);
}

static int cb_reduce_scatter(void *user, const void *send, void *recv, const size_t *counts,
			     int dtype, int average)
{
	struct world_rank *x = user;
	enum comm_dtype dt = (enum comm_dtype)dtype;
	size_t off = comm_offset(counts, x->rank), n = counts[x->rank];
	int rc;

	if (dt != COMM_F32 && dt != COMM_BF16 && dt != COMM_F16)
		return -EINVAL;
	rc = world_publish(x, send);
	if (rc)
		return rc;
	for (size_t j = 0; j < n; j++) {
		float sum = 0;

		for (int i = 0; i < N; i++)
			sum += load(dt, x->w->buf[i], off + j);
		if (average)
			sum /= (float)N;
		store(dt, recv, j, sum);
	}
	return world_meet(x->w);
}

static int cb_allgatherv(void *user, const void *send, void *recv, const size_t *counts,
			 int dtype)
{
	struct world_rank *x = user;
	size_t es = comm_dtype_size((enum comm_dtype)dtype);
	int rc;

	if (!es)
		return -EINVAL;
	rc = world_publish(x, send);
	if (rc)
		return rc;
	for (int i = 0; i < N; i++) {
		char *to = (char *)recv + comm_offset(counts, i) * es;

		if (counts[i] && to != (const char *)x->w->buf[i])
			memcpy(to, x->w->buf[i], counts[i] * es);
	}
	return world_meet(x->w);
}

static int cb_allreduce(void *user, void *buf, size_t count, int dtype)
{
	struct world_rank *x = user;
	bool f64 = dtype == COMM_F64;
	size_t es = f64 ? 8 : 4;
	void *sum;
	int rc;

	if (dtype != COMM_F64 && dtype != COMM_F32)
		return -EINVAL;
	sum = malloc(count * es + 1);
	if (!sum)
		return -ENOMEM;
	rc = world_publish(x, buf);
	for (size_t j = 0; j < count && !rc; j++) {
		double d = 0;
		float f = 0;

		for (int i = 0; i < N; i++) {
			if (f64)
				d += ((const double *)x->w->buf[i])[j];
			else
				f += ((const float *)x->w->buf[i])[j];
		}
		if (f64)
			((double *)sum)[j] = d;
		else
			((float *)sum)[j] = f;
	}
	/* In place: nobody writes before everyone has read. */
	if (!rc)
		rc = world_meet(x->w);
	if (!rc && count)
		memcpy(buf, sum, count * es);
	free(sum);
	return rc;
}

static int cb_barrier(void *user)
{
	struct world_rank *x = user;

	return world_meet(x->w);
}

static const struct tier_comm_callbacks world_cb = {
	.reduce_scatter = cb_reduce_scatter,
	.allgatherv = cb_allgatherv,
	.allreduce = cb_allreduce,
	.barrier = cb_barrier,
};

/* One world_cb per rank: the same functions, this rank's user pointer. */
static struct tier_comm_callbacks world_cbs[MAXR];

/* This thread's rank of the world in @p (backend NULL: "user" because
 * callbacks is set). */
static void user_params(struct tier_comm_params *p)
{
	p->backend = NULL;
	p->callbacks = &world_cbs[this_rank->rank];
	p->rank = this_rank->rank;
	p->nranks = N;
}

/* The collective tests above, each run by N threads at once. */
struct world_case {
	const TTest *test;
	int i;
};

static struct world_case world_cases[64];
static int nworld_cases;

static void add_world(const TTest *t, int n)
{
	for (int i = 0; i < n; i++) {
		if (nworld_cases == (int)ARRAY_SIZE(world_cases)) {
			fprintf(stderr, "test_comm: more than %zu world cases\n",
				ARRAY_SIZE(world_cases));
			abort();
		}
		world_cases[nworld_cases++] = (struct world_case){ t, i };
	}
}

struct world_arg {
	int rank, k;
};

static void *world_thread(void *arg)
{
	const struct world_arg *a = arg;
	const struct world_case *k = &world_cases[a->k];
	struct tier_comm_params p;
	int rc;

	this_rank = &world_ranks[a->rank];
	R = a->rank;
	tier_comm_params_init(&p);
	p.timeout_s = 60;
	user_params(&p);
	rc = tier_comm_open(&p, &C);
	ck_assert_msg(rc == 0, "rank %d: open: %s", R, tier_last_error());
	ck_assert_str_eq(tier_comm_backend(C), "user");
	ck_assert_int_eq(tier_comm_rank(C), R);
	ck_assert_int_eq(tier_comm_size(C), N);
	k->test->fn(k->i);
	rc = tier_comm_close(C);
	ck_assert_msg(rc == 0, "rank %d: %s: close: %s", R, k->test->name, tier_last_error());
	return NULL;
}

/* Each test runs in its own forked process (CK_FORK): an assertion that
 * fails on any thread ends that process and fails the test. */
START_TEST(world)
{
	struct world_arg args[MAXR];
	pthread_t th[MAXR];

	memset(&W, 0, sizeof(W));
	pthread_mutex_init(&W.lock, NULL);
	pthread_cond_init(&W.cond, NULL);
	for (int r = 0; r < N; r++) {
		world_ranks[r] = (struct world_rank){ &W, r };
		world_cbs[r] = world_cb;
		world_cbs[r].user = &world_ranks[r];
		args[r] = (struct world_arg){ r, _i };
	}
	for (int r = 0; r < N; r++)
		ck_assert_int_eq(pthread_create(&th[r], NULL, world_thread, &args[r]), 0);
	for (int r = 0; r < N; r++)
		ck_assert_int_eq(pthread_join(th[r], NULL), 0);
}
END_TEST

/* Callbacks for a rank alone (rank 1 of 2, no peer): the one named
 * fake_fail returns fake_rc, the others 0 without an exchange. */
static const char *fake_fail;
static int fake_rc, fake_calls;

static int fake(const char *what)
{
	fake_calls++;
	return fake_fail && !strcmp(what, fake_fail) ? fake_rc : 0;
}

static int fake_rs(void *u, const void *s, void *r, const size_t *c, int dt, int avg)
{
	(void)u, (void)s, (void)r, (void)c, (void)dt, (void)avg;
	return fake("reduce_scatter");
}

static int fake_ag(void *u, const void *s, void *r, const size_t *c, int dt)
{
	(void)u, (void)s, (void)r, (void)c, (void)dt;
	return fake("allgatherv");
}

static int fake_ar(void *u, void *b, size_t n, int dt)
{
	(void)u, (void)b, (void)n, (void)dt;
	return fake("allreduce");
}

static int fake_barrier(void *u)
{
	(void)u;
	return fake("barrier");
}

static const struct tier_comm_callbacks fake_cb = {
	.reduce_scatter = fake_rs, .allgatherv = fake_ag, .allreduce = fake_ar,
	.barrier = fake_barrier,
};

/* Open's refusals and acceptances: a change to valid params (backend
 * NULL, fake_cb, rank 1 of 2). */
enum uo_change {
	UO_NONE, UO_EXPLICIT, UO_NO_CALLBACKS, UO_NO_RS, UO_NO_AG, UO_NO_AR, UO_NO_BARRIER,
	UO_RANK_NEG, UO_RANK_BIG, UO_NRANKS_0, UO_NRANKS_NEG, UO_MPI_COMM, UO_ONE_RANK,
};

static const struct uo_case {
	enum uo_change change;
	int want;
	const char *text;        /* in the detail (want != 0) */
} uo_cases[] = {
	{ UO_NONE, 0, NULL },
	{ UO_EXPLICIT, 0, NULL },
	{ UO_ONE_RANK, 0, NULL },
	{ UO_NO_CALLBACKS, -EINVAL, "backend \"user\" needs callbacks" },
	{ UO_NO_RS, -EINVAL, "callbacks->reduce_scatter is NULL" },
	{ UO_NO_AG, -EINVAL, "callbacks->allgatherv is NULL" },
	{ UO_NO_AR, -EINVAL, "callbacks->allreduce is NULL" },
	{ UO_NO_BARRIER, -EINVAL, "callbacks->barrier is NULL" },
	{ UO_RANK_NEG, -EINVAL, "rank -1 is not in [0, nranks 2)" },
	{ UO_RANK_BIG, -EINVAL, "rank 2 is not in [0, nranks 2)" },
	{ UO_NRANKS_0, -EINVAL, "nranks 0 (the number of ranks, >= 1)" },
	{ UO_NRANKS_NEG, -EINVAL, "nranks -3" },
	{ UO_MPI_COMM, -EINVAL, "backend \"user\" takes no mpi_comm" },
};

START_TEST(user_open)
{
	const struct uo_case *k = &uo_cases[_i];
	struct tier_comm_callbacks cb = fake_cb;
	struct tier_comm_params p;
	struct tier_comm *c = (struct tier_comm *)1;
	int dummy = 0, rc;

	tier_comm_params_init(&p);
	p.callbacks = &cb;
	p.rank = 1;
	p.nranks = 2;
	switch (k->change) {
	case UO_NONE: break;
	case UO_EXPLICIT: p.backend = "user"; break;
	case UO_ONE_RANK: p.rank = 0; p.nranks = 1; break;
	case UO_NO_CALLBACKS: p.backend = "user"; p.callbacks = NULL; break;
	case UO_NO_RS: cb.reduce_scatter = NULL; break;
	case UO_NO_AG: cb.allgatherv = NULL; break;
	case UO_NO_AR: cb.allreduce = NULL; break;
	case UO_NO_BARRIER: cb.barrier = NULL; break;
	case UO_RANK_NEG: p.rank = -1; break;
	case UO_RANK_BIG: p.rank = 2; break;
	case UO_NRANKS_0: p.rank = 0; p.nranks = 0; break;
	case UO_NRANKS_NEG: p.rank = 0; p.nranks = -3; break;
	case UO_MPI_COMM: p.mpi_comm = &dummy; p.backend = "user"; break;
	}
	rc = tier_comm_open(&p, &c);
	if (k->want) {
		ck_assert_msg(rc == k->want, "row %d: %d (%s), want %d", _i, rc, tier_last_error(),
			      k->want);
		ck_assert_msg(strstr(tier_last_error(), "tier_comm_open: user: ") &&
				      strstr(tier_last_error(), k->text),
			      "row %d: detail '%s' lacks '%s'", _i, tier_last_error(), k->text);
		ck_assert_ptr_null(c);
		return;
	}
	ck_assert_msg(rc == 0, "row %d: %s", _i, tier_last_error());
	ck_assert_str_eq(tier_comm_backend(c), "user");
	ck_assert_int_eq(tier_comm_rank(c), p.rank);
	ck_assert_int_eq(tier_comm_size(c), p.nranks);
	/* The callbacks were copied at open: the caller's struct may change. */
	cb.barrier = NULL;
	fake_fail = NULL;
	fake_calls = 0;
	ck_assert_msg(comm_barrier(c) == 0, "%s", tier_last_error());
	ck_assert_int_eq(fake_calls, 1);
	ck_assert_int_eq(tier_comm_close(c), 0);
}
END_TEST

/* A callback that fails: its error is the collective's, named with the
 * collective, its number, the rank and the errno; the comm is broken
 * (later collectives -EPIPE without calling back; close -EPIPE). */
static const struct fail_case {
	const char *what;
	int rc;                /* what the callback returns */
	int want;              /* what the collective returns */
} fail_cases[] = {
	{ "reduce_scatter", -ECONNRESET, -ECONNRESET },
	{ "allgatherv", -EIO, -EIO },
	{ "allreduce", -ENOMEM, -ENOMEM },
	{ "barrier", -ETIMEDOUT, -ETIMEDOUT },
	{ "allreduce", 3, -EPROTO },            /* positive: breaks the contract */
	{ "reduce_scatter", -EPIPE, -EPIPE },
};

static int run_named(struct tier_comm *c, const char *what, bool nonblocking)
{
	size_t counts[2] = { 3, 5 };
	float send[8] = { 0 }, recv[8] = { 0 };
	double d[2] = { 1, 2 };
	struct comm_req *r = NULL;
	int rc;

	if (!strcmp(what, "reduce_scatter"))
		rc = comm_ireduce_scatter(c, send, recv, counts, COMM_BF16, COMM_AVG, &r);
	else if (!strcmp(what, "allgatherv"))
		rc = comm_iallgatherv(c, recv + 3, recv, counts, COMM_F32, &r);
	else if (!strcmp(what, "allreduce"))
		rc = comm_iallreduce(c, d, 2, COMM_F64, &r);
	else
		rc = comm_ibarrier(c, &r);
	if (rc) {
		ck_assert_ptr_null(r);
		return rc;
	}
	if (nonblocking) {
		bool done = false;

		rc = comm_test(r, &done);
		ck_assert_msg(done, "a user collective is complete when posted");
		return rc;
	}
	return comm_wait(r);
}

START_TEST(user_fail)
{
	const struct fail_case *k = &fail_cases[_i];
	struct tier_comm_params p;
	struct tier_comm *c;
	char want[256];
	int rc;

	tier_comm_params_init(&p);
	p.callbacks = &fake_cb;
	p.rank = 1;
	p.nranks = 2;
	ck_assert_msg(tier_comm_open(&p, &c) == 0, "%s", tier_last_error());
	fake_fail = k->what;
	fake_rc = k->rc;
	fake_calls = 0;
	/* #1 succeeds (another collective; the same one, nonblocking). */
	ck_assert_msg(run_named(c, strcmp(k->what, "barrier") ? "barrier" : "allreduce", true) == 0,
		      "%s", tier_last_error());
	rc = run_named(c, k->what, false);
	ck_assert_msg(rc == k->want, "%s: %d (%s), want %d", k->what, rc, tier_last_error(),
		      k->want);
	ck_assert_int_eq(fake_calls, 2);
	snprintf(want, sizeof(want), "comm %s #2 on rank 1 of 2 (user): the program's %s callback "
		 "on rank 1 ", k->what, k->what);
	ck_assert_msg(strstr(tier_last_error(), want), "detail '%s' lacks '%s'", tier_last_error(),
		      want);
	if (k->rc < 0)
		snprintf(want, sizeof(want), "failed: %d (%s)", k->rc, tier_strerror(k->rc));
	else
		snprintf(want, sizeof(want), "returned %d (it must return 0 or a negative errno)",
			 k->rc);
	ck_assert_msg(strstr(tier_last_error(), want), "detail '%s' lacks '%s'", tier_last_error(),
		      want);
	/* Broken: no callback runs again, whichever collective. */
	fake_fail = NULL;
	snprintf(want, sizeof(want), "the comm is broken (%s #2 failed on rank 1 of 2", k->what);
	EXPECT(run_named(c, "barrier", false), -EPIPE, want);
	EXPECT(run_named(c, "reduce_scatter", true), -EPIPE, want);
	ck_assert_int_eq(fake_calls, 2);
	EXPECT(tier_comm_close(c), -EPIPE, "tier_comm_close: the user comm was broken");
}
END_TEST

/* ------------------------------------------------------- dead peers */

#if TIER_HAVE_MPI
/* Rank 2 never calls (absent) or dies (kill); ranks 0 and 1 report. */
static int dead_peer(bool kill_it)
{
	struct tier_comm_params p;
	struct tier_comm *c;
	double x = 1, took;
	uint64_t t0;
	int rc;

	tier_comm_params_init(&p);
	p.backend = "mpi";
	p.timeout_s = kill_it ? 10 : 2;
	rc = tier_comm_open(&p, &c);
	if (rc) {
		fprintf(stderr, "comm-dead: open: %s\n", tier_last_error());
		return 1;
	}
	if (comm_barrier(c) != 0) {
		fprintf(stderr, "comm-dead: barrier: %s\n", tier_last_error());
		return 1;
	}
	if (tier_comm_rank(c) == 2) {
		if (kill_it)
			raise(SIGKILL);
		ts_sleep_ns((uint64_t)((p.timeout_s + 4) * 1e9));
		_exit(0);
	}
	t0 = ts_now_ns();
	rc = comm_allreduce(c, &x, 1, COMM_F64);
	took = ts_ns_to_s(ts_now_ns() - t0);
	printf("comm-dead: rank %d: %s after %.2f s: %s\n", tier_comm_rank(c),
	       rc == -ETIMEDOUT ? "ETIMEDOUT" : rc ? "error" : "success", took, tier_last_error());
	fflush(stdout);
	/* The timeout, then up to 2 s of the probe that names who is missing. */
	if (rc != -ETIMEDOUT || took < p.timeout_s || took > p.timeout_s + 2 + 3 ||
	    !strstr(tier_last_error(), "rank 2 did not answer"))
		return 1;
	/* Broken from now on. */
	rc = comm_barrier(c);
	printf("comm-dead: rank %d: after: %d: %s\n", tier_comm_rank(c), rc, tier_last_error());
	rc = rc == -EPIPE && tier_comm_close(c) == -EPIPE ? 0 : 1;
	fflush(stdout);
	/* Leaves without MPI_Finalize: it would wait on rank 2. */
	_exit(rc);
}
#endif

/* -------------------------------------------------------------- suite */

static Suite *comm_suite(void)
{
	Suite *s = suite_create("comm");
	TCase *tc = tcase_create("collectives");

	tcase_set_timeout(tc, 120);
	if (!strcmp(backend, "user")) {
		/* The world of threads runs the collective tests; open_errors and
		 * the single backend's rows are one rank's and run in `single`. */
		nworld_cases = 0;
		add_world(reduce_scatter, (int)ARRAY_SIZE(rs_cases));
		add_world(allreduce, 1);
		add_world(allgatherv, (int)ARRAY_SIZE(ag_cases));
		add_world(barrier, 1);
		add_world(overlap, 1);
		add_world(errors, 1);
		tcase_add_loop_test(tc, world, 0, nworld_cases);
		tcase_add_loop_test(tc, user_open, 0, (int)ARRAY_SIZE(uo_cases));
		tcase_add_loop_test(tc, user_fail, 0, (int)ARRAY_SIZE(fail_cases));
		suite_add_tcase(s, tc);
		return s;
	}
	tcase_add_loop_test(tc, reduce_scatter, 0, (int)ARRAY_SIZE(rs_cases));
	tcase_add_test(tc, allreduce);
	tcase_add_loop_test(tc, allgatherv, 0, (int)ARRAY_SIZE(ag_cases));
	tcase_add_test(tc, barrier);
	tcase_add_test(tc, overlap);
	tcase_add_test(tc, errors);
	tcase_add_test(tc, open_errors);
	if (!strcmp(backend, "single")) {
		tcase_add_test(tc, backend_table);
		tcase_add_test(tc, timeout);
	}
#if TIER_HAVE_MPI
	if (!strcmp(backend, "mpi")) {
		tcase_add_test(tc, program_comm);
		tcase_add_test(tc, bcast_bytes);
	}
#endif
	suite_add_tcase(s, tc);
	return s;
}

int main(int argc, char **argv)
{
	const char *mode = argc > 1 ? argv[1] : "single";
	struct tier_comm_params p;
	SRunner *sr;
	int failed, rc;

	if (!strcmp(mode, "user")) {
		/* No process-wide comm: each test makes its own world. */
		N = argc > 2 ? atoi(argv[2]) : 2;
		if (N < 1 || N > MAXR) {
			fprintf(stderr, "test_comm user: %s ranks (1 to %d)\n",
				argc > 2 ? argv[2] : "?", MAXR);
			return 2;
		}
		backend = "user";
		sr = srunner_create(comm_suite());
		/* Fork, whatever CK_FORK says: a failed assertion on a world
		 * thread must end its test's process, not longjmp across
		 * threads. */
		srunner_set_fork_status(sr, CK_FORK);
		srunner_run_all(sr, CK_NORMAL);
		failed = srunner_ntests_failed(sr);
		srunner_free(sr);
		return failed ? EXIT_FAILURE : EXIT_SUCCESS;
	}
	if (strcmp(mode, "single") != 0) {
#if !TIER_HAVE_MPI
		fprintf(stderr, "test_comm %s: this build has no MPI; skipped\n", mode);
		return 77;
#else
		if (!strcmp(mode, "absent") || !strcmp(mode, "kill"))
			return dead_peer(!strcmp(mode, "kill"));
		if (strcmp(mode, "mpi") != 0) {
			fprintf(stderr, "test_comm: unknown mode %s\n", mode);
			return 2;
		}
		backend = "mpi";
#endif
	}
	tier_comm_params_init(&p);
	p.backend = backend;
	p.timeout_s = 60;
	rc = tier_comm_open(&p, &C);   /* with mpi: initialises MPI */
	if (rc) {
		fprintf(stderr, "test_comm: open %s: %s\n", backend, tier_last_error());
		return 1;
	}
	R = tier_comm_rank(C);
	N = tier_comm_size(C);
	if (N > MAXR) {
		fprintf(stderr, "test_comm: %d ranks (at most %d)\n", N, MAXR);
		return 1;
	}
	sr = srunner_create(comm_suite());
	if (strcmp(backend, "single") != 0)
		srunner_set_fork_status(sr, CK_NOFORK);
	srunner_run_all(sr, R == 0 ? CK_NORMAL : CK_SILENT);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	if (failed)
		fprintf(stderr, "test_comm: rank %d of %d (%s): %d failed\n", R, N, backend, failed);
	rc = tier_comm_close(C);
	if (rc)
		fprintf(stderr, "test_comm: close: %s\n", tier_last_error());
	return failed || rc ? EXIT_FAILURE : EXIT_SUCCESS;
}
