/*
 * comm.c - the communicator's generic layer (runtime/comm/comm.h): the backend
 * table, the public open/close/rank/size/backend, and the collectives'
 * argument checks, sequence numbers and deadlines over the backends.
 *
 * A wait polls the backend's test() with a growing sleep (1 us up to
 * 1 ms) until the request is done or its deadline passes.  Polling, not a
 * blocking MPI_Wait / cudaStreamSynchronize, is what lets a dead peer give
 * an error: neither MPI nor NCCL returns from a blocking wait on a peer
 * that never arrives.  On a timeout the backend aborts (ncclCommAbort;
 * MPI can cancel no collective, so its request is abandoned), the comm is
 * marked broken and every later call on it fails with -EPIPE: the ranks no
 * longer agree on which collective comes next.  A backend with
 * COMM_CAP_ERRORS_BREAK (user) breaks the comm on any collective's error
 * too.
 *
 * The comm has a mutex: any thread may post and wait, one at a time
 * (MPI is initialised MPI_THREAD_SERIALIZED).
 */
#include "config.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/clock.h"
#include "common/error.h"
#include "common/fault.h"
#include "common/log.h"
#include "runtime/comm/comm.h"

#define COMM_MAGIC 0x434f4d4du /* "COMM" */
#define COMM_ARG(c) TS_HANDLE(c, COMM_MAGIC, "communicator", "tier_comm")
#define COMM_ARG_OR(c, ret) TS_HANDLE_OR(c, COMM_MAGIC, "communicator", "tier_comm", ret)
#define COMM_DEFAULT_TIMEOUT_S 300.0
#define MAX_BACKENDS 8

struct tier_comm {
	uint32_t magic;             /* COMM_MAGIC; TS_MAGIC_DEAD once closed */
	const struct comm_ops *ops;
	struct comm_be *be;
	int rank, size;
	uint64_t timeout_ns;        /* 0 = none */
	pthread_mutex_t lock;       /* one thread in the backend at a time */
	uint64_t seq;               /* collectives posted */
	unsigned inflight;          /* requests not yet freed */
	bool broken;                /* a collective timed out */
	char broken_why[256];
};

/* ----------------------------------------------------------- backends */

static const struct comm_ops *backends[MAX_BACKENDS];
static unsigned nbackends;
static pthread_mutex_t reg_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_once_t builtin_once = PTHREAD_ONCE_INIT;

static int register_locked(const struct comm_ops *ops)
{
	if (!ops || !ops->name || !*ops->name)
		return ts_err(-EINVAL, "comm backend: no name");
	if (ops->version != COMM_OPS_VERSION)
		return ts_err(-EINVAL, "comm backend %s: ops version %u (want %u)", ops->name,
			      ops->version, COMM_OPS_VERSION);
#define NEED(f)                                                                        \
	if (!ops->f)                                                                   \
		return ts_err(-EINVAL, "comm backend %s: no %s operation", ops->name, #f)
	NEED(open);
	NEED(close);
	NEED(allreduce);
	NEED(reduce_scatter);
	NEED(allgatherv);
	NEED(barrier);
	NEED(test);
	NEED(abort);
#undef NEED
	if (!(ops->caps & (COMM_CAP_HOST_MEMORY | COMM_CAP_DEVICE_MEMORY)))
		return ts_err(-EINVAL, "comm backend %s: neither host nor device memory", ops->name);
	for (unsigned i = 0; i < nbackends; i++)
		if (!strcmp(backends[i]->name, ops->name))
			return ts_err(-EEXIST, "comm backend %s: already registered", ops->name);
	if (nbackends == MAX_BACKENDS)
		return ts_err(-ENOSPC, "comm backend %s: table full (%d)", ops->name, MAX_BACKENDS);
	backends[nbackends++] = ops;
	return 0;
}

static void register_builtins(void)
{
	pthread_mutex_lock(&reg_lock);
	register_locked(&comm_single_ops);
	register_locked(&comm_user_ops);
#if TIER_HAVE_MPI
	register_locked(&comm_mpi_ops);
#endif
#if TIER_HAVE_NCCL && TIER_HAVE_CUDA
	register_locked(&comm_nccl_ops);
#endif
	pthread_mutex_unlock(&reg_lock);
}

int comm_backend_register(const struct comm_ops *ops)
{
	int rc;

	pthread_once(&builtin_once, register_builtins);
	pthread_mutex_lock(&reg_lock);
	rc = register_locked(ops);
	pthread_mutex_unlock(&reg_lock);
	return rc;
}

const struct comm_ops *comm_backend_find(const char *name)
{
	const struct comm_ops *found = NULL;

	pthread_once(&builtin_once, register_builtins);
	pthread_mutex_lock(&reg_lock);
	for (unsigned i = 0; i < nbackends && name; i++)
		if (!strcmp(backends[i]->name, name))
			found = backends[i];
	pthread_mutex_unlock(&reg_lock);
	return found;
}

const char *comm_backend_names(void)
{
	static char names[256];
	size_t off = 0;

	pthread_once(&builtin_once, register_builtins);
	pthread_mutex_lock(&reg_lock);
	names[0] = '\0';
	for (unsigned i = 0; i < nbackends; i++) {
		int n = snprintf(names + off, sizeof(names) - off, "%s%s", i ? ", " : "",
				 backends[i]->name);
		if (n < 0 || (size_t)n >= sizeof(names) - off)
			break;
		off += (size_t)n;
	}
	pthread_mutex_unlock(&reg_lock);
	return names;
}

/* ------------------------------------------------------------- dtypes */

static const struct {
	size_t size;
	const char *name;
} dtypes[COMM_NDTYPES] = {
	[COMM_F64] = { 8, "f64" },
	[COMM_F32] = { 4, "f32" },
	[COMM_BF16] = { 2, "bf16" },
	[COMM_F16] = { 2, "f16" },
};

size_t comm_dtype_size(enum comm_dtype dt)
{
	return (unsigned)dt < COMM_NDTYPES ? dtypes[dt].size : 0;
}

const char *comm_dtype_name(enum comm_dtype dt)
{
	return (unsigned)dt < COMM_NDTYPES ? dtypes[dt].name : NULL;
}

unsigned comm_caps(const struct tier_comm *c)
{
	return c->ops->caps;
}

bool comm_valid(const struct tier_comm *c)
{
	return c && c->magic == COMM_MAGIC;
}

size_t comm_offset(const size_t *counts, int rank)
{
	size_t off = 0;

	for (int i = 0; i < rank; i++)
		off += counts[i];
	return off;
}

/* --------------------------------------------------------- public API */

/* The backend NULL chooses (tierstore.h, tier_comm_params.backend). */
static const char *auto_backend(const struct tier_comm_params *p)
{
	if (p->callbacks)
		return "user";
	if (p->nccl_comm || p->nccl_id)
		return "nccl";
	if (p->mpi_comm)
		return "mpi";
#if TIER_HAVE_MPI
	/* Open MPI's, MPICH's / Hydra's and PMIx launchers set these. */
	if (getenv("OMPI_COMM_WORLD_SIZE") || getenv("PMI_SIZE") || getenv("PMIX_RANK"))
		return "mpi";
#endif
	return "single";
}

int tier_comm_open(const struct tier_comm_params *p, struct tier_comm **out)
{
	struct tier_comm_params defaults;
	const struct comm_ops *ops;
	struct tier_comm *c;
	const char *name;
	int rc;

	TS_NONNULL(out);
	*out = NULL;
	if (!p) {
		tier_comm_params_init(&defaults);
		p = &defaults;
	}
	rc = ts_params_size("struct tier_comm_params", p->size, sizeof(*p));
	if (rc)
		return rc;
	name = p->backend ? p->backend : auto_backend(p);
	ops = comm_backend_find(name);
	if (!ops) {
		if (!strcmp(name, "mpi"))
			return ts_err(-ENOTSUP, "tier_comm_open: backend \"mpi\": this build has no MPI "
					     "(configure with -Dmpi=enabled and an MPI installed)");
		if (!strcmp(name, "nccl"))
			return ts_err(-ENOTSUP, "tier_comm_open: backend \"nccl\": this build has no "
					     "NCCL (needs -Dcuda=enabled -Dnccl=enabled)");
		return ts_err(-ENOENT, "tier_comm_open: no backend \"%s\" (this build has: %s)", name,
			      comm_backend_names());
	}
	if (p->timeout_s != p->timeout_s)
		return ts_err(-EINVAL, "tier_comm_open: timeout_s is NaN");
	c = ts_calloc(1, sizeof(*c));
	if (!c)
		return ts_err(-ENOMEM, "tier_comm_open: out of memory");
	c->ops = ops;
	/* Past a billion seconds (31 years, infinity included) is forever. */
	if (p->timeout_s > 0 && p->timeout_s < 1e9)
		c->timeout_ns = (uint64_t)(p->timeout_s * 1e9);
	else if (p->timeout_s == 0)
		c->timeout_ns = (uint64_t)(COMM_DEFAULT_TIMEOUT_S * 1e9);
	rc = ops->open(p, &c->be, &c->rank, &c->size);
	if (rc) {
		ts_err_prefix("tier_comm_open: %s", ops->name);
		free(c);
		return rc;
	}
	pthread_mutex_init(&c->lock, NULL);
	c->magic = COMM_MAGIC;
	TIER_DEBUG_LOG(TIER_SS_OPTIM, "comm %s: rank %d of %d", ops->name, c->rank, c->size);
	ts_err_clear();
	*out = c;
	return 0;
}

int tier_comm_close(struct tier_comm *c)
{
	bool broken;

	if (!c)
		return 0;
	COMM_ARG(c);
	pthread_mutex_lock(&c->lock);
	broken = c->broken;
	if (c->inflight && !broken) {
		unsigned n = c->inflight;

		pthread_mutex_unlock(&c->lock);
		return ts_err(-EBUSY, "tier_comm_close: %u collective(s) in flight on rank %d; wait "
				      "for them first", n, c->rank);
	}
	pthread_mutex_unlock(&c->lock);
	c->ops->close(c->be, broken);
	c->magic = TS_MAGIC_DEAD;
	pthread_mutex_destroy(&c->lock);
	if (broken)
		ts_err(-EPIPE, "tier_comm_close: the %s comm was broken (%s); closed", c->ops->name,
		       c->broken_why);
	free(c);
	return broken ? -EPIPE : 0;
}

int tier_comm_rank(const struct tier_comm *c)
{
	COMM_ARG_OR(c, -1);
	return c->rank;
}

int tier_comm_size(const struct tier_comm *c)
{
	COMM_ARG_OR(c, -1);
	return c->size;
}

const char *tier_comm_backend(const struct tier_comm *c)
{
	COMM_ARG_OR(c, NULL);
	return c->ops->name;
}

/* -------------------------------------------------------- collectives */

/* The checks every collective makes, then a new request (under c->lock,
 * which the caller drops after posting). */
static int begin(struct tier_comm *c, const char *what, enum comm_dtype dt, struct comm_req **req,
		 struct comm_req **out)
{
	struct comm_req *r = NULL;

	TS_NONNULL(out);
	*out = NULL;
	if (!req)
		return ts_err(-EINVAL, "comm %s: no request pointer", what);
	if (!comm_dtype_size(dt))
		return ts_err(-EINVAL, "comm %s: %d is no element type", what, (int)dt);
	pthread_mutex_lock(&c->lock);
	if (c->broken) {
		pthread_mutex_unlock(&c->lock);
		return ts_err(-EPIPE, "comm %s on rank %d: the comm is broken (%s); close it", what,
			      c->rank, c->broken_why);
	}
	r = ts_calloc(1, sizeof(*r));
	if (!r) {
		pthread_mutex_unlock(&c->lock);
		return ts_err(-ENOMEM, "comm %s: out of memory", what);
	}
	r->c = c;
	r->what = what;
	r->seq = ++c->seq;
	r->deadline_ns = c->timeout_ns ? ts_now_ns() + c->timeout_ns : 0;
	*out = r;
	return 0;
}

/* A backend whose errors break the comm (COMM_CAP_ERRORS_BREAK): @r
 * failed with @rc. */
static void break_on_error(struct tier_comm *c, const struct comm_req *r, int rc)
{
	if (!(c->ops->caps & COMM_CAP_ERRORS_BREAK) || c->broken)
		return;
	c->broken = true;
	snprintf(c->broken_why, sizeof(c->broken_why), "%s #%llu failed on rank %d of %d: %s",
		 r->what, (unsigned long long)r->seq, c->rank, c->size, tier_strerror(rc));
}

/* After the backend's post: keeps @r in flight or frees it on error. */
static int posted(struct tier_comm *c, struct comm_req *r, int rc, struct comm_req **req)
{
	if (rc) {
		ts_err_prefix("comm %s #%llu on rank %d of %d (%s)", r->what,
			      (unsigned long long)r->seq, c->rank, c->size, c->ops->name);
		break_on_error(c, r, rc);
		if (rc == -ETIMEDOUT && !c->broken) {
			/* The backend's own deadline while posting (nccl: a call
			 * still in progress); it aborted. */
			c->broken = true;
			snprintf(c->broken_why, sizeof(c->broken_why),
				 "%s #%llu timed out while posting on rank %d of %d", r->what,
				 (unsigned long long)r->seq, c->rank, c->size);
		}
		free(r);
	} else {
		c->inflight++;
		*req = r;
	}
	pthread_mutex_unlock(&c->lock);
	return rc;
}

static int check_counts(struct tier_comm *c, const char *what, const void *send, const void *recv,
			const size_t *counts, size_t *total)
{
	size_t sum = 0;

	if (!counts)
		return ts_err(-EINVAL, "comm %s: counts is NULL (one count per rank, %d ranks)", what,
			      c->size);
	for (int i = 0; i < c->size; i++) {
		if (sum + counts[i] < sum)
			return ts_err(-EOVERFLOW, "comm %s: the counts overflow at rank %d", what, i);
		sum += counts[i];
	}
	/* reduce_scatter: send holds every slice, recv this rank's;
	 * allgatherv: the other way round. */
	{
		bool rs = !strcmp(what, "reduce_scatter");
		size_t nsend = rs ? sum : counts[c->rank], nrecv = rs ? counts[c->rank] : sum;

		if (nsend && !send)
			return ts_err(-EINVAL, "comm %s: send is NULL for %zu elements", what, nsend);
		if (nrecv && !recv)
			return ts_err(-EINVAL, "comm %s: recv is NULL for %zu elements", what, nrecv);
	}
	*total = sum;
	return 0;
}

int comm_iallreduce(struct tier_comm *c, void *buf, size_t count, enum comm_dtype dt,
		    struct comm_req **req)
{
	struct comm_req *r = NULL;
	int rc;

	COMM_ARG(c);
	if (dt != COMM_F64 && dt != COMM_F32)
		return ts_err(-EINVAL, "comm allreduce: element type %s (f64 or f32 only)",
			      comm_dtype_name(dt) ? comm_dtype_name(dt) : "?");
	if (count && !buf)
		return ts_err(-EINVAL, "comm allreduce: buf is NULL for %zu elements", count);
	rc = begin(c, "allreduce", dt, req, &r);
	if (rc)
		return rc;
	return posted(c, r, c->ops->allreduce(c->be, buf, count, dt, r), req);
}

int comm_ireduce_scatter(struct tier_comm *c, const void *send, void *recv, const size_t *counts,
			 enum comm_dtype dt, enum comm_red red, struct comm_req **req)
{
	struct comm_req *r = NULL;
	size_t total = 0;
	int rc;

	COMM_ARG(c);
	if (dt == COMM_F64)
		return ts_err(-EINVAL, "comm reduce_scatter: element type f64 (f32, bf16 or f16)");
	if (red != COMM_SUM && red != COMM_AVG)
		return ts_err(-EINVAL, "comm reduce_scatter: %d is no reduction", (int)red);
	rc = check_counts(c, "reduce_scatter", send, recv, counts, &total);
	if (rc)
		return rc;
	rc = begin(c, "reduce_scatter", dt, req, &r);
	if (rc)
		return rc;
	return posted(c, r, c->ops->reduce_scatter(c->be, send, recv, counts, dt, red, r), req);
}

int comm_iallgatherv(struct tier_comm *c, const void *send, void *recv, const size_t *counts,
		     enum comm_dtype dt, struct comm_req **req)
{
	struct comm_req *r = NULL;
	size_t total = 0;
	int rc;

	COMM_ARG(c);
	rc = check_counts(c, "allgatherv", send, recv, counts, &total);
	if (rc)
		return rc;
	rc = begin(c, "allgatherv", dt, req, &r);
	if (rc)
		return rc;
	return posted(c, r, c->ops->allgatherv(c->be, send, recv, counts, dt, r), req);
}

int comm_ibarrier(struct tier_comm *c, struct comm_req **req)
{
	struct comm_req *r = NULL;
	int rc;

	COMM_ARG(c);
	rc = begin(c, "barrier", COMM_F32, req, &r);
	if (rc)
		return rc;
	return posted(c, r, c->ops->barrier(c->be, r), req);
}

static void finish(struct comm_req *r)
{
	r->c->inflight--;
	free(r);
}

/*
 * After a timeout: the ranks that did not answer the backend's probe, as
 * "rank 2 did not answer (dead, or not in this collective)", or the
 * generic cause when the backend cannot tell.  The grace is the timeout
 * itself, at most 2 s.
 */
static void probe_peers(struct tier_comm *c, double timeout_s, char *who, size_t len)
{
	unsigned char *ans;
	size_t at = 0;
	int missing = 0;

	snprintf(who, len, "a peer died or did not call it");
	if (!c->ops->probe || c->size < 2 || !(ans = calloc((size_t)c->size, 1)))
		return;
	if (c->ops->probe(c->be, timeout_s < 2 ? timeout_s : 2, ans) == 0) {
		for (int i = 0; i < c->size; i++)
			missing += !ans[i];
		if (missing) {
			at = (size_t)snprintf(who, len, "rank%s", missing > 1 ? "s" : "");
			for (int i = 0, k = 0; i < c->size && at < len; i++)
				if (!ans[i])
					at += (size_t)snprintf(who + at, len - at, "%s %d",
							       k++ ? "," : "", i);
			if (at < len)
				snprintf(who + at, len - at, " did not answer (dead, or not in this collective)");
		} else {
			snprintf(who, len, "every rank answered after its timeout: the ranks called different collectives or counts");
		}
	}
	free(ans);
}

/* One test of @r under the lock; on its deadline, breaks the comm; on a
 * comm already broken, ends it (-EPIPE). */
static int test_once(struct comm_req *r, bool *done)
{
	struct tier_comm *c = r->c;
	int rc;

	*done = false;
	pthread_mutex_lock(&c->lock);
	if (c->broken) {
		/* Another collective timed out: this one cannot complete
		 * either; end it now rather than at its own deadline. */
		c->ops->abort(c->be, r);
		rc = ts_err(-EPIPE, "comm %s #%llu on rank %d of %d (%s): the comm broke while it was in flight (%s)",
			    r->what, (unsigned long long)r->seq, c->rank, c->size, c->ops->name,
			    c->broken_why);
		*done = true;
		finish(r);
		pthread_mutex_unlock(&c->lock);
		return rc;
	}
	rc = c->ops->test(c->be, r, done);
	if (rc) {
		*done = true;
		ts_err_prefix("comm %s #%llu on rank %d of %d (%s)", r->what,
			      (unsigned long long)r->seq, c->rank, c->size, c->ops->name);
		break_on_error(c, r, rc);
	} else if (!*done && r->deadline_ns && ts_now_ns() > r->deadline_ns) {
		double t = ts_ns_to_s(c->timeout_ns);

		char who[160];

		c->ops->abort(c->be, r);
		c->broken = true;
		probe_peers(c, t, who, sizeof(who));
		snprintf(c->broken_why, sizeof(c->broken_why),
			 "%s #%llu timed out after %.3g s on rank %d of %d", r->what,
			 (unsigned long long)r->seq, t, c->rank, c->size);
		rc = ts_err(-ETIMEDOUT,
			    "comm %s #%llu on rank %d of %d (%s): not complete after %.3g s (the "
			    "timeout): %s; the comm is now broken",
			    r->what, (unsigned long long)r->seq, c->rank, c->size, c->ops->name, t,
			    who);
		*done = true;
	}
	if (*done)
		finish(r);
	pthread_mutex_unlock(&c->lock);
	return rc;
}

int comm_test(struct comm_req *r, bool *done)
{
	TS_NONNULL(done);
	*done = false;
	TS_NONNULL(r);
	return test_once(r, done);
}

/*
 * Polls every 20 us.  Not slower: MPI's nonblocking collectives (Open
 * MPI's libnbc) move one round per call into the library, so a wait that
 * slept 1 ms between tests ran a 256 MiB reduce-scatter at 55 MB/s where
 * MPI_Wait took it at transport speed.  Not a busy loop either: on a node
 * with more ranks than cores, a rank spinning on MPI_Test (even with
 * sched_yield) starved another rank's tier I/O until its own timeout
 * fired (test_zero under load: a shard fill stalled 30.0 s, ending 2 ms
 * after the spinning rank gave up).  docs/distributed.md, "Timeouts".
 */
int comm_wait(struct comm_req *r)
{
	bool done;
	int rc;

	TS_NONNULL(r);
	for (;;) {
		rc = test_once(r, &done);
		if (done)
			return rc;
		ts_sleep_ns(20000);
	}
}

int comm_allreduce(struct tier_comm *c, void *buf, size_t count, enum comm_dtype dt)
{
	struct comm_req *r = NULL;
	int rc = comm_iallreduce(c, buf, count, dt, &r);

	return rc ? rc : comm_wait(r);
}

int comm_reduce_scatter(struct tier_comm *c, const void *send, void *recv, const size_t *counts,
			enum comm_dtype dt, enum comm_red red)
{
	struct comm_req *r = NULL;
	int rc = comm_ireduce_scatter(c, send, recv, counts, dt, red, &r);

	return rc ? rc : comm_wait(r);
}

int comm_allgatherv(struct tier_comm *c, const void *send, void *recv, const size_t *counts,
		    enum comm_dtype dt)
{
	struct comm_req *r = NULL;
	int rc = comm_iallgatherv(c, send, recv, counts, dt, &r);

	return rc ? rc : comm_wait(r);
}

int comm_barrier(struct tier_comm *c)
{
	struct comm_req *r = NULL;
	int rc = comm_ibarrier(c, &r);

	return rc ? rc : comm_wait(r);
}
