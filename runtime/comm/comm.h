/*
 * comm.h - the communicator: collectives between the ranks of a training
 * job, behind a table of operations as the HBM tier's backends are
 * (tiers/hbm.h).  The public handle is struct tier_comm (tierstore.h:
 * open, close, rank, size, backend); the collectives are internal, for the
 * partitioned optimizer and the tests.  We build no transport of our own:
 *
 *   single  runtime/comm/comm_single.c: one rank; every collective is a copy
 *           (or nothing, in place), complete when posted.
 *   mpi     runtime/comm/comm_mpi.c: host buffers over the system's MPI
 *           (nonblocking MPI_I* collectives on a duplicate of the
 *           program's communicator, MPI_ERRORS_RETURN on it).
 *   nccl    runtime/comm/comm_nccl.c: device buffers over NCCL (a CUDA build
 *           with -Dnccl): grouped ncclReduce / ncclBroadcast for the uneven
 *           collectives, on the comm's own stream, nonblocking comm.
 *   user    runtime/comm/comm_user.c: host buffers; each collective runs
 *           through the program's callbacks (tier_comm_callbacks: a
 *           binding over torch.distributed), complete when posted.
 *
 * Every collective is posted (comm_i*) and then waited on (comm_wait) or
 * tested (comm_test), so a caller overlaps it with other work; the
 * blocking forms post and wait.  Every wait has the comm's deadline
 * (tier_comm_params.timeout_s): past it the backend is aborted
 * (ops->abort), the comm is marked broken (every later call -EPIPE) and
 * the wait returns -ETIMEDOUT naming the collective, its sequence number,
 * this rank and the timeout.
 *
 * The contract every backend keeps:
 * - a post either returns 0 with the request in flight (then test() is
 *   called until it says done, or abort() ends it) or a negative errno
 *   with nothing in flight;
 * - test() progresses the request and sets *done; on done it has freed
 *   what it put in req->priv; an error it returns is final (done);
 * - counts are elements; the send and receive buffers of a collective
 *   must not overlap except as documented (allreduce: in place);
 * - the same collectives in the same order on every rank, with the same
 *   counts arrays (nothing checks this across ranks: MPI reports a
 *   truncation where it can, NCCL cannot).
 */
#ifndef TIER_RUNTIME_COMM_H
#define TIER_RUNTIME_COMM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "tierstore.h"

#ifdef __cplusplus
extern "C" {
#endif

#define COMM_OPS_VERSION 1

/* Capability flags. */
enum {
	COMM_CAP_HOST_MEMORY = 1u << 0,   /* buffers are host memory */
	COMM_CAP_DEVICE_MEMORY = 1u << 1, /* buffers are CUDA device memory */
	/* A collective's error (from the post or from test()) breaks the
	 * comm as a timeout does: every later call is -EPIPE.  For a backend
	 * that cannot tell how far a failed exchange got on the other ranks
	 * (user: the program's callbacks). */
	COMM_CAP_ERRORS_BREAK = 1u << 2,
};

/* Element types of the collectives. */
enum comm_dtype { COMM_F64 = 0, COMM_F32, COMM_BF16, COMM_F16, COMM_NDTYPES };

/* Reductions: the sum, or the sum divided by the number of ranks. */
enum comm_red { COMM_SUM = 0, COMM_AVG };

/* Bytes of one element of @dt (0 for no dtype). */
size_t comm_dtype_size(enum comm_dtype dt);
const char *comm_dtype_name(enum comm_dtype dt);

struct comm_be;

/* One collective in flight.  The generic layer owns it; priv is the
 * backend's (its MPI request, CUDA event, scratch buffer). */
struct comm_req {
	struct tier_comm *c;
	const char *what;      /* "allreduce", "reduce_scatter", ... */
	uint64_t seq;          /* the comm's collective number, from 1 */
	uint64_t deadline_ns;  /* ts_now_ns() past which it times out; 0 = none */
	void *priv;
};

struct comm_ops {
	const char *name;
	unsigned version;      /* COMM_OPS_VERSION */
	unsigned caps;
	/* Opens on @p; sets *rank and *size. */
	int (*open)(const struct tier_comm_params *p, struct comm_be **out, int *rank, int *size);
	/* Frees the backend.  @broken: a collective timed out and abort()
	 * ran; nothing that needs the peers may be called. */
	void (*close)(struct comm_be *b, bool broken);
	/* Sum of @count F64 or F32 elements of @buf over the ranks, in place. */
	int (*allreduce)(struct comm_be *b, void *buf, size_t count, enum comm_dtype dt,
			 struct comm_req *r);
	/* @send holds sum(counts) elements, rank i's slice at offset
	 * counts[0] + ... + counts[i-1]; @recv gets counts[rank] elements:
	 * that slice reduced (@red) over the ranks. */
	int (*reduce_scatter)(struct comm_be *b, const void *send, void *recv, const size_t *counts,
			      enum comm_dtype dt, enum comm_red red, struct comm_req *r);
	/* @recv (sum(counts) elements) gets every rank's @send (counts[rank]
	 * elements) at its offset; @send may be @recv + this rank's offset. */
	int (*allgatherv)(struct comm_be *b, const void *send, void *recv, const size_t *counts,
			  enum comm_dtype dt, struct comm_req *r);
	int (*barrier)(struct comm_be *b, struct comm_req *r);
	/* Progresses @r; *done when complete.  0, or the collective's error
	 * (named in the detail). */
	int (*test)(struct comm_be *b, struct comm_req *r, bool *done);
	/* After a timeout: ends what is in flight as far as the library can
	 * (ncclCommAbort; with MPI nothing can cancel a collective) and frees
	 * @r's backend state that is safe to free. */
	void (*abort)(struct comm_be *b, struct comm_req *r);
	/* Optional.  After a timeout and abort(): which peers are still
	 * there.  Every rank whose collective timed out calls it; each says
	 * so to every other and listens for @grace_s: answered[i] is set for
	 * each rank heard from (this rank's own included).  0, or an error
	 * (nothing known). */
	int (*probe)(struct comm_be *b, double grace_s, unsigned char *answered);
};

/* Validates and adds @ops: -EINVAL (the missing field named), -EEXIST,
 * -ENOSPC. */
int comm_backend_register(const struct comm_ops *ops);
/* The backend named @name (built-ins registered on first use), or NULL. */
const struct comm_ops *comm_backend_find(const char *name);
/* Names of the registered backends, comma-separated. */
const char *comm_backend_names(void);

/* Built-in tables. */
extern const struct comm_ops comm_single_ops;
extern const struct comm_ops comm_user_ops;
#if TIER_HAVE_MPI
extern const struct comm_ops comm_mpi_ops;
/* The MPI backend's broadcast of @len bytes from rank 0 of MPI_COMM_WORLD
 * (or of *@mpi_comm), for the NCCL backend's unique id: rank 0 calls
 * @fill(buf) (0 or -errno) first, and its failure fails every rank.
 * Initialises MPI if the program has not.  Sets *rank and *size. */
int comm_mpi_bcast_bytes(void *mpi_comm, void *buf, size_t len, int (*fill)(void *buf),
			 int *rank, int *size);
#endif
#if TIER_HAVE_NCCL && TIER_HAVE_CUDA
extern const struct comm_ops comm_nccl_ops;
#endif

/*
 * The collectives.  Each checks its arguments (-EINVAL naming the bad
 * one: a NULL buffer for a non-empty count, no counts, a dtype the
 * collective does not take), refuses a broken comm (-EPIPE) and posts.
 * The i-forms set *req (free it with comm_wait, or with comm_test once
 * done); the plain forms wait.  Host or device buffers as the backend's
 * caps say.
 */
int comm_iallreduce(struct tier_comm *c, void *buf, size_t count, enum comm_dtype dt,
		    struct comm_req **req);
int comm_ireduce_scatter(struct tier_comm *c, const void *send, void *recv, const size_t *counts,
			 enum comm_dtype dt, enum comm_red red, struct comm_req **req);
int comm_iallgatherv(struct tier_comm *c, const void *send, void *recv, const size_t *counts,
		     enum comm_dtype dt, struct comm_req **req);
int comm_ibarrier(struct tier_comm *c, struct comm_req **req);

int comm_allreduce(struct tier_comm *c, void *buf, size_t count, enum comm_dtype dt);
int comm_reduce_scatter(struct tier_comm *c, const void *send, void *recv, const size_t *counts,
			enum comm_dtype dt, enum comm_red red);
int comm_allgatherv(struct tier_comm *c, const void *send, void *recv, const size_t *counts,
		    enum comm_dtype dt);
int comm_barrier(struct tier_comm *c);

/* Waits for @r until the comm's deadline, then frees it.  0, the
 * collective's error, or -ETIMEDOUT (the comm is then broken). */
int comm_wait(struct comm_req *r);
/* Progresses @r without blocking: *done, and when done @r is freed and
 * the result returned.  A request past its deadline times out as in
 * comm_wait. */
int comm_test(struct comm_req *r, bool *done);

/* The backend's COMM_CAP_* (where its buffers live). */
unsigned comm_caps(const struct tier_comm *c);
/* Whether @c is an open comm (not NULL, not closed). */
bool comm_valid(const struct tier_comm *c);

/* The offset of rank @rank's slice (sum of counts[0..rank-1]). */
size_t comm_offset(const size_t *counts, int rank);

#ifdef __cplusplus
}
#endif

#endif
