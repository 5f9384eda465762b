/*
 * comm_single.c - the "single" communicator backend: one rank, host
 * memory.  A reduction over one rank is its own input, so allreduce does
 * nothing, reduce_scatter copies the slice (the average of one value is
 * the value: x / 1 == x exactly), allgatherv copies (memmove: @send may
 * lie inside @recv), barrier does nothing.  Every request is complete
 * when posted.
 */
#include "config.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "common/fault.h"
#include "runtime/comm/comm.h"

struct comm_be {
	int unused;
};

static int single_open(const struct tier_comm_params *p, struct comm_be **out, int *rank,
		       int *size)
{
	if (p->mpi_comm || p->nccl_comm || p->nccl_id)
		return ts_err(-EINVAL, "backend \"single\" takes no mpi_comm, nccl_comm or nccl_id");
	if (p->nranks > 1)
		return ts_err(-EINVAL, "backend \"single\" is one rank (nranks %d)", p->nranks);
	*out = ts_calloc(1, sizeof(**out));
	if (!*out)
		return ts_err(-ENOMEM, "out of memory");
	*rank = 0;
	*size = 1;
	return 0;
}

static void single_close(struct comm_be *b, bool broken)
{
	(void)broken;
	free(b);
}

static int single_allreduce(struct comm_be *b, void *buf, size_t count, enum comm_dtype dt,
			    struct comm_req *r)
{
	(void)b, (void)buf, (void)count, (void)dt, (void)r;
	return 0;
}

static int single_reduce_scatter(struct comm_be *b, const void *send, void *recv,
				 const size_t *counts, enum comm_dtype dt, enum comm_red red,
				 struct comm_req *r)
{
	(void)b, (void)red, (void)r;
	if (counts[0])
		memmove(recv, send, counts[0] * comm_dtype_size(dt));
	return 0;
}

static int single_allgatherv(struct comm_be *b, const void *send, void *recv, const size_t *counts,
			     enum comm_dtype dt, struct comm_req *r)
{
	(void)b, (void)r;
	if (counts[0])
		memmove(recv, send, counts[0] * comm_dtype_size(dt));
	return 0;
}

static int single_barrier(struct comm_be *b, struct comm_req *r)
{
	(void)b, (void)r;
	return 0;
}

static int single_test(struct comm_be *b, struct comm_req *r, bool *done)
{
	(void)b, (void)r;
	*done = true;
	return 0;
}

static void single_abort(struct comm_be *b, struct comm_req *r)
{
	(void)b, (void)r;
}

const struct comm_ops comm_single_ops = {
	.name = "single",
	.version = COMM_OPS_VERSION,
	.caps = COMM_CAP_HOST_MEMORY,
	.open = single_open,
	.close = single_close,
	.allreduce = single_allreduce,
	.reduce_scatter = single_reduce_scatter,
	.allgatherv = single_allgatherv,
	.barrier = single_barrier,
	.test = single_test,
	.abort = single_abort,
};
