/*
 * comm_nccl.c - the "nccl" communicator backend: CUDA device buffers over
 * NCCL (a CUDA build with -Dnccl), no transport of our own.
 *
 * The communicator is the program's (tier_comm_params.nccl_comm: used,
 * never destroyed) or one made here with ncclCommInitRankConfig from the
 * unique id the trainer passes (nccl_id, rank, nranks) or, without one,
 * from an id rank 0 makes (ncclGetUniqueId) and the MPI backend
 * broadcasts (comm_mpi_bcast_bytes).  It is created nonblocking
 * (config.blocking = 0): every NCCL call may return ncclInProgress, and
 * nccl_settle() polls ncclCommGetAsyncError until it is not, up to the
 * deadline, so that a peer that never joins gives an error, not a hang.
 *
 * Collectives run on the comm's own stream; a request is a CUDA event
 * recorded after them, and test() is cudaEventQuery plus
 * ncclCommGetAsyncError (a transport error ends the request).
 *  - allreduce: ncclAllReduce in place, ncclSum of ncclDouble / ncclFloat.
 *  - reduce_scatter with uneven counts: one ncclReduce per rank, rooted
 *    at that rank over its slice, inside ncclGroupStart/End (no padding
 *    copies; NCCL schedules them together).  ncclAvg for the average;
 *    bf16 and f16 reduce in their own type (NCCL's kernels), unlike the
 *    mpi backend, which sums them in f32.
 *  - allgatherv: one ncclBroadcast per rank from its slice, grouped, as
 *    bytes (ncclUint8), so any element type.
 *  - barrier: an allreduce of one float in a device scratch word (NCCL
 *    has no barrier).
 * A timeout aborts the communicator (ncclCommAbort), which ends the
 * kernels waiting on the dead peer; a handed communicator is aborted too
 * (it is unusable by then) and the program must not destroy it again.
 */
#include "config.h"

#include <cuda_runtime.h>
#include <errno.h>
#include <limits.h>
#include <nccl.h>
#include <stdlib.h>
#include <string.h>

#include "common/clock.h"
#include "common/error.h"
#include "common/fault.h"
#include "runtime/comm/comm.h"

struct comm_be {
	ncclComm_t comm;
	bool owned;                /* made here: destroyed at close */
	bool aborted;
	cudaStream_t stream;
	float *word;               /* the barrier's device word */
	int device, rank, size;
	uint64_t timeout_ns;       /* for open's and settle's waits; 0 = none */
};

static int nccl_err(ncclResult_t rc, const char *what)
{
	return ts_err(rc == ncclInvalidArgument || rc == ncclInvalidUsage ? -EINVAL : -EIO,
		      "%s: NCCL error %d: %s", what, (int)rc, ncclGetErrorString(rc));
}

static int cuda_err(cudaError_t rc, const char *what)
{
	return ts_err(rc == cudaErrorMemoryAllocation ? -ENOMEM : -EIO, "%s: CUDA error %d: %s",
		      what, (int)rc, cudaGetErrorString(rc));
}

/* Waits out ncclInProgress on @comm up to @timeout_ns (0 = forever). */
static int nccl_settle(ncclComm_t comm, ncclResult_t rc, uint64_t timeout_ns, const char *what)
{
	uint64_t end = timeout_ns ? ts_now_ns() + timeout_ns : 0;
	ncclResult_t st = rc;

	while (st == ncclInProgress) {
		if (end && ts_now_ns() > end) {
			ncclCommAbort(comm);
			return ts_err(-ETIMEDOUT, "%s: still in progress after %.3g s (a peer did not "
					     "join); the NCCL communicator was aborted", what,
				      ts_ns_to_s(timeout_ns));
		}
		ts_sleep_ns(100000);
		if (ncclCommGetAsyncError(comm, &st) != ncclSuccess)
			break;
	}
	return st == ncclSuccess ? 0 : nccl_err(st, what);
}

#if TIER_HAVE_MPI
/* Rank 0's part of the id exchange. */
static int make_id(void *buf)
{
	ncclResult_t nr = ncclGetUniqueId((ncclUniqueId *)buf);

	return nr == ncclSuccess ? 0 : nccl_err(nr, "ncclGetUniqueId");
}
#endif

static int nccl_open(const struct tier_comm_params *p, struct comm_be **out, int *rank, int *size)
{
	ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
	struct comm_be *b;
	ncclUniqueId id;
	cudaError_t ce;
	ncclResult_t nr;
	int rc;

	b = ts_calloc(1, sizeof(*b));
	if (!b)
		return ts_err(-ENOMEM, "out of memory");
	b->timeout_ns = p->timeout_s >= 1e9 ? 0 : p->timeout_s > 0 ? (uint64_t)(p->timeout_s * 1e9) :
			p->timeout_s == 0 ? 300000000000ull : 0;
	if (p->device >= 0) {
		ce = cudaSetDevice(p->device);
		if (ce != cudaSuccess) {
			rc = cuda_err(ce, "cudaSetDevice");
			goto fail;
		}
	}
	if (p->nccl_comm) {
		b->comm = (ncclComm_t)p->nccl_comm;
		if ((nr = ncclCommCount(b->comm, &b->size)) != ncclSuccess ||
		    (nr = ncclCommUserRank(b->comm, &b->rank)) != ncclSuccess ||
		    (nr = ncclCommCuDevice(b->comm, &b->device)) != ncclSuccess) {
			rc = nccl_err(nr, "the program's NCCL communicator");
			goto fail;
		}
		cudaSetDevice(b->device);
	} else {
		if (p->nccl_id) {
			if (p->nranks < 1 || p->rank < 0 || p->rank >= p->nranks) {
				rc = ts_err(-EINVAL, "nccl_id with rank %d of nranks %d", p->rank,
					    p->nranks);
				goto fail;
			}
			memcpy(&id, p->nccl_id, sizeof(id));
			b->rank = p->rank;
			b->size = p->nranks;
		} else {
#if TIER_HAVE_MPI
			rc = comm_mpi_bcast_bytes(p->mpi_comm, &id, sizeof(id), make_id, &b->rank,
						  &b->size);
			if (rc)
				goto fail;
#else
			rc = ts_err(-EINVAL, "nccl needs nccl_id (with rank and nranks) or nccl_comm "
					     "in a build without MPI to send the id over");
			goto fail;
#endif
		}
		cfg.blocking = 0;
		nr = ncclCommInitRankConfig(&b->comm, b->size, id, b->rank, &cfg);
		if (nr != ncclSuccess && nr != ncclInProgress) {
			rc = nccl_err(nr, "ncclCommInitRankConfig");
			goto fail;
		}
		b->owned = true;
		rc = nccl_settle(b->comm, nr, b->timeout_ns, "ncclCommInitRankConfig");
		if (rc) {
			b->aborted = true;
			goto fail;
		}
		ncclCommCuDevice(b->comm, &b->device);
	}
	ce = cudaStreamCreateWithFlags(&b->stream, cudaStreamNonBlocking);
	if (ce == cudaSuccess)
		ce = cudaMalloc((void **)&b->word, sizeof(float));
	if (ce != cudaSuccess) {
		rc = cuda_err(ce, "the comm's stream and barrier word");
		goto fail;
	}
	*rank = b->rank;
	*size = b->size;
	*out = b;
	return 0;
fail:
	if (b->word)
		cudaFree(b->word);
	if (b->stream)
		cudaStreamDestroy(b->stream);
	if (b->owned && b->comm && !b->aborted)
		ncclCommAbort(b->comm);
	free(b);
	return rc;
}

static void nccl_close(struct comm_be *b, bool broken)
{
	if (!broken && !b->aborted && b->owned) {
		ncclResult_t nr = ncclCommFinalize(b->comm);

		if (nccl_settle(b->comm, nr, b->timeout_ns, "ncclCommFinalize") == 0)
			ncclCommDestroy(b->comm);
		else
			b->aborted = true;   /* settle aborted it */
	}
	if (b->stream) {
		if (!broken)
			cudaStreamSynchronize(b->stream);
		cudaStreamDestroy(b->stream);
	}
	if (b->word)
		cudaFree(b->word);
	free(b);
}

static ncclDataType_t nccl_type(enum comm_dtype dt)
{
	switch (dt) {
	case COMM_F64:
		return ncclDouble;
	case COMM_F32:
		return ncclFloat;
	case COMM_BF16:
		return ncclBfloat16;
	default:
		return ncclHalf;
	}
}

/* After the NCCL calls of a collective: settles them, then records the
 * request's event on the stream. */
static int post_end(struct comm_be *b, ncclResult_t nr, struct comm_req *r, const char *what)
{
	cudaEvent_t ev;
	cudaError_t ce;
	int rc;

	if (nr != ncclSuccess && nr != ncclInProgress)
		return nccl_err(nr, what);
	rc = nccl_settle(b->comm, nr, b->timeout_ns, what);
	if (rc) {
		b->aborted = true;
		return rc;
	}
	ce = cudaEventCreateWithFlags(&ev, cudaEventDisableTiming);
	if (ce == cudaSuccess)
		ce = cudaEventRecord(ev, b->stream);
	if (ce != cudaSuccess)
		return cuda_err(ce, "recording the collective's event");
	r->priv = ev;
	return 0;
}

static int nccl_allreduce(struct comm_be *b, void *buf, size_t count, enum comm_dtype dt,
			  struct comm_req *r)
{
	return post_end(b, ncclAllReduce(buf, buf, count, nccl_type(dt), ncclSum, b->comm, b->stream),
			r, "ncclAllReduce");
}

static int nccl_reduce_scatter(struct comm_be *b, const void *send, void *recv, const size_t *counts,
			       enum comm_dtype dt, enum comm_red red, struct comm_req *r)
{
	size_t es = comm_dtype_size(dt), off = 0;
	ncclResult_t nr, end;

	nr = ncclGroupStart();
	for (int i = 0; i < b->size && (nr == ncclSuccess || nr == ncclInProgress); i++) {
		nr = ncclReduce((const char *)send + off * es, recv, counts[i], nccl_type(dt),
				red == COMM_AVG ? ncclAvg : ncclSum, i, b->comm, b->stream);
		off += counts[i];
	}
	end = ncclGroupEnd();
	return post_end(b, nr != ncclSuccess && nr != ncclInProgress ? nr : end, r,
			"grouped ncclReduce (reduce_scatter)");
}

static int nccl_allgatherv(struct comm_be *b, const void *send, void *recv, const size_t *counts,
			   enum comm_dtype dt, struct comm_req *r)
{
	size_t es = comm_dtype_size(dt), off = 0;
	ncclResult_t nr, end;

	nr = ncclGroupStart();
	for (int i = 0; i < b->size && (nr == ncclSuccess || nr == ncclInProgress); i++) {
		char *slice = (char *)recv + off * es;

		nr = ncclBroadcast(i == b->rank ? send : slice, slice, counts[i] * es, ncclUint8, i,
				   b->comm, b->stream);
		off += counts[i];
	}
	end = ncclGroupEnd();
	return post_end(b, nr != ncclSuccess && nr != ncclInProgress ? nr : end, r,
			"grouped ncclBroadcast (allgatherv)");
}

static int nccl_barrier(struct comm_be *b, struct comm_req *r)
{
	return post_end(b, ncclAllReduce(b->word, b->word, 1, ncclFloat, ncclSum, b->comm, b->stream),
			r, "ncclAllReduce (barrier)");
}

static int nccl_test(struct comm_be *b, struct comm_req *r, bool *done)
{
	cudaEvent_t ev = r->priv;
	ncclResult_t st = ncclSuccess;
	cudaError_t ce;

	ncclCommGetAsyncError(b->comm, &st);
	if (st != ncclSuccess && st != ncclInProgress) {
		*done = true;
		cudaEventDestroy(ev);
		r->priv = NULL;
		return nccl_err(st, "the communicator");
	}
	ce = cudaEventQuery(ev);
	if (ce == cudaErrorNotReady) {
		*done = false;
		return 0;
	}
	*done = true;
	cudaEventDestroy(ev);
	r->priv = NULL;
	return ce == cudaSuccess ? 0 : cuda_err(ce, "the collective's stream");
}

static void nccl_abort(struct comm_be *b, struct comm_req *r)
{
	if (!b->aborted)
		ncclCommAbort(b->comm);
	b->aborted = true;
	if (r->priv)
		cudaEventDestroy((cudaEvent_t)r->priv);
	r->priv = NULL;
}

const struct comm_ops comm_nccl_ops = {
	.name = "nccl",
	.version = COMM_OPS_VERSION,
	.caps = COMM_CAP_DEVICE_MEMORY,
	.open = nccl_open,
	.close = nccl_close,
	.allreduce = nccl_allreduce,
	.reduce_scatter = nccl_reduce_scatter,
	.allgatherv = nccl_allgatherv,
	.barrier = nccl_barrier,
	.test = nccl_test,
	.abort = nccl_abort,
};
