/*
 * comm_mpi.c - the "mpi" communicator backend: host buffers over the
 * system's MPI (Debian's Open MPI in the tests), no transport of our own.
 *
 * MPI: initialised here (MPI_Init_thread, MPI_THREAD_SERIALIZED: the
 * generic layer's mutex keeps one thread in MPI per comm) only when the
 * program has not, and then finalised at exit, unless a collective timed
 * out (a finalize would wait on the peer that never came).  MPI cannot be
 * initialised twice in a process, so it is not finalised at the last
 * close.  The comm is a duplicate (MPI_Comm_dup, collective) of the
 * program's communicator (tier_comm_params.mpi_comm) or of MPI_COMM_WORLD,
 * so our traffic never matches the program's, and it has MPI_ERRORS_RETURN
 * so errors come back as codes (turned into -errno and MPI's message)
 * rather than aborting the job where the MPI library can report them.
 *
 * Collectives are the nonblocking MPI-3 ones, polled by the generic layer
 * with MPI_Test (comm.c says why):
 *  - allreduce: MPI_Iallreduce, MPI_IN_PLACE, MPI_SUM of MPI_DOUBLE or
 *    MPI_FLOAT.
 *  - reduce_scatter with uneven counts: MPI_Ireduce_scatter with the counts
 *    as recvcounts.  f32 reduces in place into recv; bf16 and f16 (which
 *    MPI has no type for) are widened to f32 into a scratch buffer, summed
 *    in f32 and rounded once to the element type when the request
 *    completes.  The average is the sum divided by the number of ranks,
 *    in f32, after the sum.  The order MPI sums the ranks in is not
 *    defined by the standard (Open MPI's tuned component picks an
 *    algorithm by size: ring, recursive halving, ...), so a sum of values
 *    that do not add exactly can differ in the last bits from a sum in
 *    rank order.
 *  - allgatherv with uneven counts: MPI_Iallgatherv (MPI_IN_PLACE when
 *    send is this rank's slice of recv), elements moved as bytes.
 *  - barrier: MPI_Ibarrier.
 * MPI's counts are ints: a count or an offset past INT_MAX elements is
 * -EOVERFLOW (the MPI-4 large-count forms are not used).
 *
 * A collective that times out cannot be cancelled (MPI_Cancel does not
 * apply to collectives): its request and scratch buffers are abandoned on
 * a list reachable from here (MPI may still write them), and the comm is
 * not freed at close.
 */
#include "config.h"

#include <errno.h>
#include <limits.h>
#include <mpi.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "common/clock.h"
#include "common/error.h"
#include "common/fault.h"
#include "kernels/adam_math.h"
#include "runtime/comm/comm.h"

struct comm_be {
	MPI_Comm comm;
	int rank, size;
};

struct mpi_req {
	MPI_Request req;
	int *counts, *displs;     /* MPI's arrays, kept until completion */
	float *wide;              /* bf16/f16: the widened send, then the sum */
	void *recv;               /* where the result goes */
	size_t n;                 /* elements of the result */
	enum comm_dtype dt;
	enum comm_red red;
	int size;
	struct mpi_req *next;     /* on the abandoned list */
};

static pthread_mutex_t mpi_lock = PTHREAD_MUTEX_INITIALIZER;
static bool we_initialised, atexit_set, timed_out;
static struct mpi_req *abandoned;     /* timed-out requests, never freed */

/* An MPI error code as -errno, with MPI's own message after @what. */
static int mpi_err(int code, const char *what)
{
	char msg[MPI_MAX_ERROR_STRING + 1];
	int len = 0, cls = 0, err = -EIO;

	if (MPI_Error_string(code, msg, &len) != MPI_SUCCESS)
		len = 0;
	msg[len] = '\0';
	MPI_Error_class(code, &cls);
	switch (cls) {
	case MPI_ERR_TRUNCATE:
		err = -EMSGSIZE;
		break;
	case MPI_ERR_COUNT:
	case MPI_ERR_BUFFER:
	case MPI_ERR_ARG:
		err = -EINVAL;
		break;
	case MPI_ERR_NO_MEM:
		err = -ENOMEM;
		break;
	default:
		break;
	}
	return ts_err(err, "%s: MPI error %d (class %d): %s", what, code, cls,
		      len ? msg : "no message");
}

static void mpi_atexit(void)
{
	int fin = 0;

	pthread_mutex_lock(&mpi_lock);
	MPI_Finalized(&fin);
	if (we_initialised && !fin && !timed_out)
		MPI_Finalize();
	pthread_mutex_unlock(&mpi_lock);
}

/* MPI initialised (by the program, or here). */
static int mpi_ready(void)
{
	int init = 0, fin = 0, provided = 0, rc;

	pthread_mutex_lock(&mpi_lock);
	MPI_Finalized(&fin);
	if (fin) {
		pthread_mutex_unlock(&mpi_lock);
		return ts_err(-ESHUTDOWN, "MPI is finalised already: no new communicator");
	}
	MPI_Initialized(&init);
	if (!init) {
		rc = MPI_Init_thread(NULL, NULL, MPI_THREAD_SERIALIZED, &provided);
		if (rc != MPI_SUCCESS) {
			pthread_mutex_unlock(&mpi_lock);
			return mpi_err(rc, "MPI_Init_thread");
		}
		we_initialised = true;
		if (!atexit_set && atexit(mpi_atexit) == 0)
			atexit_set = true;
	}
	pthread_mutex_unlock(&mpi_lock);
	return 0;
}

int comm_mpi_bcast_bytes(void *mpi_comm, void *buf, size_t len, int (*fill)(void *buf),
			 int *rank, int *size)
{
	unsigned char *msg;
	MPI_Comm comm;
	int rc, err;

	if (len >= INT_MAX)
		return ts_err(-EOVERFLOW, "MPI broadcast of %zu bytes", len);
	rc = mpi_ready();
	if (rc)
		return rc;
	msg = ts_calloc(1, len + 1);
	if (!msg)
		return ts_err(-ENOMEM, "out of memory");
	rc = MPI_Comm_dup(mpi_comm ? *(MPI_Comm *)mpi_comm : MPI_COMM_WORLD, &comm);
	if (rc != MPI_SUCCESS) {
		free(msg);
		return mpi_err(rc, "MPI_Comm_dup");
	}
	MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN);
	MPI_Comm_rank(comm, rank);
	MPI_Comm_size(comm, size);
	/* Rank 0 fills; its failure travels in the last byte, so the others
	 * fail too rather than wait for an id that will not come. */
	err = 0;
	if (*rank == 0) {
		err = fill(msg);
		msg[len] = err != 0;
	}
	rc = MPI_Bcast(msg, (int)len + 1, MPI_BYTE, 0, comm);
	MPI_Comm_free(&comm);
	if (rc != MPI_SUCCESS) {
		free(msg);
		return mpi_err(rc, "MPI_Bcast");
	}
	if (msg[len] && !err)
		err = ts_err(-EIO, "rank 0 could not make what it broadcasts");
	if (!err)
		memcpy(buf, msg, len);
	free(msg);
	return err;
}

static int mpi_open(const struct tier_comm_params *p, struct comm_be **out, int *rank, int *size)
{
	struct comm_be *b;
	MPI_Comm base;
	int rc;

	if (p->nccl_comm || p->nccl_id)
		return ts_err(-EINVAL, "backend \"mpi\" takes no nccl_comm or nccl_id");
	rc = mpi_ready();
	if (rc)
		return rc;
	base = p->mpi_comm ? *(MPI_Comm *)p->mpi_comm : MPI_COMM_WORLD;
	if (base == MPI_COMM_NULL)
		return ts_err(-EINVAL, "mpi_comm is MPI_COMM_NULL");
	b = ts_calloc(1, sizeof(*b));
	if (!b)
		return ts_err(-ENOMEM, "out of memory");
	rc = MPI_Comm_dup(base, &b->comm);
	if (rc != MPI_SUCCESS) {
		free(b);
		return mpi_err(rc, "MPI_Comm_dup");
	}
	MPI_Comm_set_errhandler(b->comm, MPI_ERRORS_RETURN);
	MPI_Comm_rank(b->comm, &b->rank);
	MPI_Comm_size(b->comm, &b->size);
	*rank = b->rank;
	*size = b->size;
	*out = b;
	return 0;
}

static void mpi_close(struct comm_be *b, bool broken)
{
	/* A broken comm has an abandoned collective: freeing it would wait on
	 * it or release what MPI may still use. */
	if (!broken)
		MPI_Comm_free(&b->comm);
	free(b);
}

static struct mpi_req *req_new(struct comm_be *b, struct comm_req *r, bool arrays)
{
	struct mpi_req *q = ts_calloc(1, sizeof(*q));

	if (!q)
		return NULL;
	q->req = MPI_REQUEST_NULL;
	q->size = b->size;
	if (arrays) {
		q->counts = ts_calloc(2 * (size_t)b->size, sizeof(int));
		if (!q->counts) {
			free(q);
			return NULL;
		}
		q->displs = q->counts + b->size;
	}
	r->priv = q;
	return q;
}

static void req_free(struct comm_req *r)
{
	struct mpi_req *q = r->priv;

	if (q) {
		free(q->counts);
		free(q->wide);
		free(q);
	}
	r->priv = NULL;
}

/* MPI's int counts and displacements from @counts. */
static int int_counts(struct comm_be *b, const size_t *counts, struct mpi_req *q, size_t *total)
{
	size_t off = 0;

	for (int i = 0; i < b->size; i++) {
		if (counts[i] > INT_MAX || off > INT_MAX)
			return ts_err(-EOVERFLOW,
				      "rank %d's count %zu (offset %zu) exceeds MPI's int counts", i,
				      counts[i], off);
		q->counts[i] = (int)counts[i];
		q->displs[i] = (int)off;
		off += counts[i];
	}
	*total = off;
	return 0;
}

static int mpi_allreduce(struct comm_be *b, void *buf, size_t count, enum comm_dtype dt,
			 struct comm_req *r)
{
	struct mpi_req *q;
	int rc;

	if (count > INT_MAX)
		return ts_err(-EOVERFLOW, "%zu elements exceed MPI's int counts", count);
	q = req_new(b, r, false);
	if (!q)
		return ts_err(-ENOMEM, "out of memory");
	rc = MPI_Iallreduce(MPI_IN_PLACE, buf, (int)count, dt == COMM_F64 ? MPI_DOUBLE : MPI_FLOAT,
			    MPI_SUM, b->comm, &q->req);
	if (rc != MPI_SUCCESS) {
		req_free(r);
		return mpi_err(rc, "MPI_Iallreduce");
	}
	return 0;
}

static int mpi_reduce_scatter(struct comm_be *b, const void *send, void *recv, const size_t *counts,
			      enum comm_dtype dt, enum comm_red red, struct comm_req *r)
{
	struct mpi_req *q;
	size_t total = 0;
	int rc;

	q = req_new(b, r, true);
	if (!q)
		return ts_err(-ENOMEM, "out of memory");
	rc = int_counts(b, counts, q, &total);
	if (rc) {
		req_free(r);
		return rc;
	}
	q->recv = recv;
	q->n = counts[b->rank];
	q->dt = dt;
	q->red = red;
	if (dt == COMM_F32) {
		rc = MPI_Ireduce_scatter(total ? send : MPI_BOTTOM, recv, q->counts, MPI_FLOAT,
					 MPI_SUM, b->comm, &q->req);
	} else {
		const uint16_t *s = send;

		/* The sum lands in the first counts[rank] floats of the
		 * widened send (MPI_IN_PLACE). */
		q->wide = ts_malloc((total ? total : 1) * sizeof(float));
		if (!q->wide) {
			req_free(r);
			return ts_err(-ENOMEM, "out of memory for %zu widened elements", total);
		}
		for (size_t i = 0; i < total; i++)
			q->wide[i] = dt == COMM_BF16 ? bf16_to_f32(s[i]) : f16_to_f32(s[i]);
		rc = MPI_Ireduce_scatter(MPI_IN_PLACE, q->wide, q->counts, MPI_FLOAT, MPI_SUM,
					 b->comm, &q->req);
	}
	if (rc != MPI_SUCCESS) {
		req_free(r);
		return mpi_err(rc, "MPI_Ireduce_scatter");
	}
	return 0;
}

static int mpi_allgatherv(struct comm_be *b, const void *send, void *recv, const size_t *counts,
			  enum comm_dtype dt, struct comm_req *r)
{
	size_t es = comm_dtype_size(dt), total = 0;
	struct mpi_req *q;
	MPI_Datatype t;
	int rc;

	q = req_new(b, r, true);
	if (!q)
		return ts_err(-ENOMEM, "out of memory");
	rc = int_counts(b, counts, q, &total);
	if (rc) {
		req_free(r);
		return rc;
	}
	t = es == 8 ? MPI_DOUBLE : es == 4 ? MPI_FLOAT : MPI_UINT16_T;
	if ((const char *)send == (const char *)recv + (size_t)q->displs[b->rank] * es)
		rc = MPI_Iallgatherv(MPI_IN_PLACE, 0, t, recv, q->counts, q->displs, t, b->comm,
				     &q->req);
	else
		rc = MPI_Iallgatherv(send, q->counts[b->rank], t, recv, q->counts, q->displs, t,
				     b->comm, &q->req);
	if (rc != MPI_SUCCESS) {
		req_free(r);
		return mpi_err(rc, "MPI_Iallgatherv");
	}
	return 0;
}

static int mpi_barrier(struct comm_be *b, struct comm_req *r)
{
	struct mpi_req *q = req_new(b, r, false);
	int rc;

	if (!q)
		return ts_err(-ENOMEM, "out of memory");
	rc = MPI_Ibarrier(b->comm, &q->req);
	if (rc != MPI_SUCCESS) {
		req_free(r);
		return mpi_err(rc, "MPI_Ibarrier");
	}
	return 0;
}

/* What a reduce_scatter does once MPI is done: the average, the rounding
 * of bf16/f16. */
static void reduce_finish(struct mpi_req *q)
{
	float div = (float)q->size;

	if (q->dt == COMM_F32) {
		float *x = q->recv;

		if (q->red == COMM_AVG)
			for (size_t i = 0; i < q->n; i++)
				x[i] /= div;
		return;
	}
	for (size_t i = 0; i < q->n; i++) {
		float v = q->red == COMM_AVG ? q->wide[i] / div : q->wide[i];

		((uint16_t *)q->recv)[i] = q->dt == COMM_BF16 ? f32_to_bf16(v) : f32_to_f16(v);
	}
}

static int mpi_test(struct comm_be *b, struct comm_req *r, bool *done)
{
	struct mpi_req *q = r->priv;
	int flag = 0, rc;

	(void)b;
	rc = MPI_Test(&q->req, &flag, MPI_STATUS_IGNORE);
	if (rc != MPI_SUCCESS) {
		*done = true;
		req_free(r);
		return mpi_err(rc, "MPI_Test");
	}
	*done = flag != 0;
	if (flag) {
		if (q->recv)
			reduce_finish(q);
		req_free(r);
	}
	return 0;
}

static void mpi_abort(struct comm_be *b, struct comm_req *r)
{
	struct mpi_req *q = r->priv;

	(void)b;
	pthread_mutex_lock(&mpi_lock);
	timed_out = true;
	if (q) {
		q->next = abandoned;
		abandoned = q;
	}
	pthread_mutex_unlock(&mpi_lock);
	r->priv = NULL;
}

/*
 * Which peers answer after a timeout: a message to every other rank and a
 * receive from each, on the comm's own context with a tag no collective
 * uses (point-to-point never matches a collective), then @grace_s of
 * MPI_Test.  A dead rank never sends; one alive but not in the collective
 * is not in this code either, so neither answers.  A survivor that timed
 * out later still reaches the others' posted receives (its message is
 * buffered or matched when it sends), so the survivors hear each other when
 * their timeouts fall within @grace_s.  The requests of peers that did not
 * answer are abandoned, like the timed-out collective's.
 */
#define PROBE_TAG 0x7153

static struct probe_left {
	MPI_Request *rq;
	int *in;
	struct probe_left *next;
} *probe_abandoned;

static int mpi_probe(struct comm_be *b, double grace_s, unsigned char *answered)
{
	int n = b->size, left = 0;
	MPI_Request *rq = calloc((size_t)n * 2, sizeof(*rq));
	int *in = calloc((size_t)n, sizeof(*in)), me = b->rank;
	uint64_t end;

	if (!rq || !in) {
		free(rq);
		free(in);
		return -ENOMEM;
	}
	memset(answered, 0, (size_t)n);
	answered[me] = 1;
	for (int i = 0; i < n; i++) {
		rq[i] = rq[n + i] = MPI_REQUEST_NULL;
		if (i == me)
			continue;
		if (MPI_Irecv(&in[i], 1, MPI_INT, i, PROBE_TAG, b->comm, &rq[i]) != MPI_SUCCESS ||
		    MPI_Isend(&me, 1, MPI_INT, i, PROBE_TAG, b->comm, &rq[n + i]) != MPI_SUCCESS)
			rq[i] = MPI_REQUEST_NULL;
		else
			left++;
	}
	end = ts_now_ns() + (uint64_t)(grace_s * 1e9);
	while (left > 0 && ts_now_ns() < end) {
		for (int i = 0; i < n; i++) {
			int flag = 0;

			if (rq[i] == MPI_REQUEST_NULL || answered[i])
				continue;
			if (MPI_Test(&rq[i], &flag, MPI_STATUS_IGNORE) == MPI_SUCCESS && flag) {
				answered[i] = 1;
				left--;
			}
		}
		ts_sleep_ns(1000000);
	}
	/* What did not complete is abandoned, reachable (MPI may still
	 * write @in): the list below, never freed. */
	if (left > 0) {
		struct probe_left *pl = malloc(sizeof(*pl));

		if (pl) {
			pthread_mutex_lock(&mpi_lock);
			*pl = (struct probe_left){ rq, in, probe_abandoned };
			probe_abandoned = pl;
			pthread_mutex_unlock(&mpi_lock);
		}
		return 0;
	}
	for (int i = 0; i < n; i++)
		if (rq[n + i] != MPI_REQUEST_NULL)
			(void)MPI_Test(&rq[n + i], &(int){ 0 }, MPI_STATUS_IGNORE);
	free(rq);
	free(in);
	return 0;
}

const struct comm_ops comm_mpi_ops = {
	.name = "mpi",
	.version = COMM_OPS_VERSION,
	.caps = COMM_CAP_HOST_MEMORY,
	.open = mpi_open,
	.close = mpi_close,
	.allreduce = mpi_allreduce,
	.reduce_scatter = mpi_reduce_scatter,
	.allgatherv = mpi_allgatherv,
	.barrier = mpi_barrier,
	.test = mpi_test,
	.abort = mpi_abort,
	.probe = mpi_probe,
};
