/*
 * comm_user.c - the "user" communicator backend: each collective runs
 * through the program's own callbacks (struct tier_comm_callbacks in
 * tierstore.h), for a binding whose job already has a transport the
 * library cannot reach by itself (the Python binding's callbacks run
 * torch.distributed collectives on a process group).  Host memory.
 *
 * A callback is complete when it returns, so every request is complete
 * when posted: the post runs the callback and test() says done at once.
 * A callback's negative return is the collective's error, returned by the
 * post and named in the detail (the generic layer prefixes the collective,
 * its sequence number and this rank); a positive return is a callback
 * that broke the contract (-EPROTO).  Either way the ranks no longer agree
 * on what the others received, so the backend has COMM_CAP_ERRORS_BREAK:
 * the generic layer marks the comm broken and every later collective is
 * -EPIPE.  The callbacks run under the comm's mutex, on whichever thread
 * posts: they may block (a barrier) but must not call back into the comm.
 *
 * The library's dtype enum and the public one have the same values
 * (checked below at compile time), so the dtype goes through as it is.
 */
#include "config.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "common/fault.h"
#include "runtime/comm/comm.h"

_Static_assert((int)COMM_F64 == TIER_COMM_F64 && (int)COMM_F32 == TIER_COMM_F32 &&
		       (int)COMM_BF16 == TIER_COMM_BF16 && (int)COMM_F16 == TIER_COMM_F16,
	       "enum comm_dtype and enum tier_comm_dtype differ");

struct comm_be {
	struct tier_comm_callbacks cb;   /* a copy of the pointers, taken at open */
	int rank, size;
};

static int user_open(const struct tier_comm_params *p, struct comm_be **out, int *rank,
		     int *size)
{
	const struct tier_comm_callbacks *cb = p->callbacks;
	struct comm_be *b;

	if (!cb)
		return ts_err(-EINVAL, "backend \"user\" needs callbacks (tier_comm_params.callbacks "
				       "is NULL)");
#define NEED(f)                                                                         \
	if (!cb->f)                                                                     \
		return ts_err(-EINVAL, "backend \"user\": callbacks->" #f " is NULL (every " \
				       "collective must be set)")
	NEED(reduce_scatter);
	NEED(allgatherv);
	NEED(allreduce);
	NEED(barrier);
#undef NEED
	if (p->mpi_comm || p->nccl_comm || p->nccl_id)
		return ts_err(-EINVAL, "backend \"user\" takes no mpi_comm, nccl_comm or nccl_id");
	if (p->nranks < 1)
		return ts_err(-EINVAL, "backend \"user\": nranks %d (the number of ranks, >= 1)",
			      p->nranks);
	if (p->rank < 0 || p->rank >= p->nranks)
		return ts_err(-EINVAL, "backend \"user\": rank %d is not in [0, nranks %d)", p->rank,
			      p->nranks);
	b = ts_calloc(1, sizeof(*b));
	if (!b)
		return ts_err(-ENOMEM, "out of memory");
	b->cb = *cb;
	b->rank = p->rank;
	b->size = p->nranks;
	*rank = b->rank;
	*size = b->size;
	*out = b;
	return 0;
}

static void user_close(struct comm_be *b, bool broken)
{
	(void)broken;
	free(b);
}

/* A callback's return as the collective's result. */
static int result(const struct comm_be *b, const char *what, int rc)
{
	if (rc == 0)
		return 0;
	if (rc > 0)
		return ts_err(-EPROTO, "the program's %s callback on rank %d returned %d (it must "
				       "return 0 or a negative errno)", what, b->rank, rc);
	return ts_err(rc, "the program's %s callback on rank %d failed: %d (%s)", what, b->rank,
		      rc, tier_strerror(rc));
}

static int user_allreduce(struct comm_be *b, void *buf, size_t count, enum comm_dtype dt,
			  struct comm_req *r)
{
	(void)r;
	return result(b, "allreduce", b->cb.allreduce(b->cb.user, buf, count, (int)dt));
}

static int user_reduce_scatter(struct comm_be *b, const void *send, void *recv,
			       const size_t *counts, enum comm_dtype dt, enum comm_red red,
			       struct comm_req *r)
{
	(void)r;
	return result(b, "reduce_scatter",
		      b->cb.reduce_scatter(b->cb.user, send, recv, counts, (int)dt,
					   red == COMM_AVG));
}

static int user_allgatherv(struct comm_be *b, const void *send, void *recv, const size_t *counts,
			   enum comm_dtype dt, struct comm_req *r)
{
	(void)r;
	return result(b, "allgatherv", b->cb.allgatherv(b->cb.user, send, recv, counts, (int)dt));
}

static int user_barrier(struct comm_be *b, struct comm_req *r)
{
	(void)r;
	return result(b, "barrier", b->cb.barrier(b->cb.user));
}

static int user_test(struct comm_be *b, struct comm_req *r, bool *done)
{
	(void)b, (void)r;
	*done = true;
	return 0;
}

static void user_abort(struct comm_be *b, struct comm_req *r)
{
	/* Nothing is ever in flight: every request completes when posted. */
	(void)b, (void)r;
}

const struct comm_ops comm_user_ops = {
	.name = "user",
	.version = COMM_OPS_VERSION,
	.caps = COMM_CAP_HOST_MEMORY | COMM_CAP_ERRORS_BREAK,
	.open = user_open,
	.close = user_close,
	.allreduce = user_allreduce,
	.reduce_scatter = user_reduce_scatter,
	.allgatherv = user_allgatherv,
	.barrier = user_barrier,
	.test = user_test,
	.abort = user_abort,
};
