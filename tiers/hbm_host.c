/*
 * hbm_host.c - the "host" HBM backend: an emulated device in ordinary
 * memory that keeps the contract of hbm.h, so that every test and every
 * machine without a GPU runs the HBM tier's real code paths.
 *
 * Arena.  One anonymous private mapping (MAP_NORESERVE: pages are only
 * touched when copied into) of the capacity rounded up to 2 MiB, the same
 * rounding as the CUDA arena, so capacity() agrees across backends; THP
 * is asked for and not required.  dev_ptr() is base + off and the CPU may
 * dereference it (HBM_CAP_HOST_READABLE).
 *
 * Copy engines.  One thread per direction (H2D, D2H), each with a FIFO
 * queue, models a DMA engine: it pops the oldest request, memcpy()s it,
 * waits out the pacing (below) and runs the callback, with no lock held,
 * before taking the next.  So copies in one direction complete in
 * submission order and a callback always runs on an engine thread.
 *
 * Pacing (HBM_CAP_BANDWIDTH).  With params.bandwidth B > 0 bytes/s each
 * direction has a "next free" clock: a copy of n bytes starts at
 * max(now, next_free), occupies the link for n / B seconds and does not
 * complete (callback) before start + n / B.  A direction therefore never
 * moves more than B bytes/s over any interval that starts idle; idle time
 * is not banked as credit.
 *
 * Locking.  d->lock guards both queues, the free list of requests and
 * d->pending (accepted copies whose callback has not returned).  The
 * engines wait on their own condition variable, close() on d->idle.
 * Byte counters are atomics, updated before the callback runs.
 *
 * Shutdown.  close() waits until pending is 0 - which includes copies
 * submitted from callbacks while it waits - then stops and joins the
 * engines.  The caller submits nothing once it has called close().
 */
#include "config.h"

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "common/clock.h"
#include "common/error.h"
#include "common/fault.h"
#include "common/log.h"
#include "tiers/hbm.h"

#define HOST_ARENA_ALIGN (2ull << 20)
#define U64(x) ((unsigned long long)(x))

extern const struct hbm_ops hbm_host_ops;

static const char *const dir_names[2] = { "H2D", "D2H" };

/* One queued copy. */
struct host_req {
	struct host_req *next;
	uint64_t off, len;
	void *host;
	hbm_cb cb;
	void *arg;
	int fault;                 /* the HBM_COPY site's errno, 0: do the copy */
};

/* A direction's copy engine. */
struct host_engine {
	struct hbm_dev *d;
	enum hbm_dir dir;
	pthread_t thread;
	bool started;
	bool stop;                 /* under d->lock: exit once the queue is empty */
	pthread_cond_t work;       /* with d->lock: a request was queued, or stop */
	struct host_req *head, **tail;
	uint64_t next_free_ns;     /* pacing clock; the engine thread's own */
	_Atomic uint64_t bytes;    /* bytes moved by completed copies */
};

struct hbm_dev {
	char *base;
	uint64_t cap;              /* mapped bytes, a multiple of HOST_ARENA_ALIGN */
	double bandwidth;          /* bytes/s per direction, 0: unlimited */
	pthread_mutex_t lock;
	pthread_cond_t idle;       /* with lock: pending dropped to 0 */
	uint64_t pending;          /* accepted copies whose callback has not returned */
	struct host_req *free_reqs;
	struct host_engine eng[2];
};

/* How long @len bytes occupy a link of @bw bytes/s, in ns (capped at ~31 years). */
static uint64_t link_ns(uint64_t len, double bw)
{
	double ns = (double)len * 1e9 / bw;

	return ns >= 1e18 ? (uint64_t)1e18 : (uint64_t)ns;
}

/* Performs @r (no lock held); fills @detail on failure; returns the result. */
static int engine_do(struct host_engine *e, const struct host_req *r, char *detail, size_t dlen)
{
	struct hbm_dev *d = e->d;
	uint64_t now;

	if (r->fault) {
		snprintf(detail, dlen, "hbm host: %s copy of %llu bytes at offset %llu: %s "
			 "(injected at fault site hbm_copy)", dir_names[e->dir], U64(r->len),
			 U64(r->off), tier_strerror(r->fault));
		return r->fault;
	}
	if (d->bandwidth > 0 && r->len) {
		now = ts_now_ns();
		if (e->next_free_ns < now)
			e->next_free_ns = now;
		e->next_free_ns += link_ns(r->len, d->bandwidth);
	}
	if (r->len) {
		if (e->dir == HBM_H2D)
			memcpy(d->base + r->off, r->host, r->len);
		else
			memcpy(r->host, d->base + r->off, r->len);
	}
	if (d->bandwidth > 0 && r->len) {
		now = ts_now_ns();
		if (e->next_free_ns > now)
			ts_sleep_ns(e->next_free_ns - now);
	}
	atomic_fetch_add_explicit(&e->bytes, r->len, memory_order_relaxed);
	return 0;
}

static void *engine_main(void *arg)
{
	struct host_engine *e = arg;
	struct hbm_dev *d = e->d;
	char detail[512];

	pthread_mutex_lock(&d->lock);
	for (;;) {
		struct host_req *r, copy;
		int rc;

		while (!e->head && !e->stop)
			pthread_cond_wait(&e->work, &d->lock);
		r = e->head;
		if (!r)
			break;                  /* stopped and drained */
		e->head = r->next;
		if (!e->head)
			e->tail = &e->head;
		pthread_mutex_unlock(&d->lock);

		copy = *r;
		rc = engine_do(e, &copy, detail, sizeof(detail));
		copy.cb(copy.arg, rc, rc ? detail : "");

		pthread_mutex_lock(&d->lock);
		r->next = d->free_reqs;
		d->free_reqs = r;
		if (--d->pending == 0)
			pthread_cond_broadcast(&d->idle);
	}
	pthread_mutex_unlock(&d->lock);
	return NULL;
}

/* Stops and joins the started engines, then frees everything.  No copy is pending. */
static void host_free(struct hbm_dev *d)
{
	pthread_mutex_lock(&d->lock);
	for (int i = 0; i < 2; i++) {
		d->eng[i].stop = true;
		pthread_cond_signal(&d->eng[i].work);
	}
	pthread_mutex_unlock(&d->lock);
	for (int i = 0; i < 2; i++)
		if (d->eng[i].started)
			pthread_join(d->eng[i].thread, NULL);
	while (d->free_reqs) {
		struct host_req *r = d->free_reqs;

		d->free_reqs = r->next;
		free(r);
	}
	for (int i = 0; i < 2; i++)
		pthread_cond_destroy(&d->eng[i].work);
	pthread_cond_destroy(&d->idle);
	pthread_mutex_destroy(&d->lock);
	if (d->base)
		munmap(d->base, d->cap);
	free(d);
}

static int host_open(const struct hbm_params *p, struct hbm_dev **out)
{
	struct hbm_dev *d;
	void *base;
	int rc;

	*out = NULL;
	if (!p)
		return ts_err(-EINVAL, "hbm host: no parameters");
	if (p->capacity == 0 || p->capacity > UINT64_MAX - HOST_ARENA_ALIGN)
		return ts_err(-EINVAL, "hbm host: capacity %llu bytes is out of range",
				U64(p->capacity));
	if (!(p->bandwidth >= 0) || isinf(p->bandwidth))
		return ts_err(-EINVAL, "hbm host: bandwidth %g bytes/s is not a finite number >= 0",
				p->bandwidth);
	rc = ts_fault_check(TIER_FAULT_HBM_ALLOC);
	if (rc)
		return ts_err(rc, "hbm host: allocating the %llu-byte arena: %s", U64(p->capacity),
				tier_strerror(rc));
	d = ts_calloc(1, sizeof(*d));
	if (!d)
		return ts_err(-ENOMEM, "hbm host: out of memory");
	/* With default attributes these cannot fail on Linux. */
	pthread_mutex_init(&d->lock, NULL);
	pthread_cond_init(&d->idle, NULL);
	d->cap = (p->capacity + HOST_ARENA_ALIGN - 1) / HOST_ARENA_ALIGN * HOST_ARENA_ALIGN;
	d->bandwidth = p->bandwidth;
	for (int i = 0; i < 2; i++) {
		struct host_engine *e = &d->eng[i];

		e->d = d;
		e->dir = (enum hbm_dir)i;
		e->tail = &e->head;
		pthread_cond_init(&e->work, NULL);
	}
	base = mmap(NULL, d->cap, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
		    -1, 0);
	if (base == MAP_FAILED) {
		rc = ts_err(-ENOMEM, "hbm host: mapping the %llu-byte arena: %s", U64(d->cap),
			      tier_strerror(-errno));
		goto fail;
	}
	d->base = base;
	(void)madvise(base, d->cap, MADV_HUGEPAGE);   /* best effort */
	for (int i = 0; i < 2; i++) {
		struct host_engine *e = &d->eng[i];

		rc = ts_fault_check(TIER_FAULT_THREAD_CREATE);
		if (!rc)
			rc = -pthread_create(&e->thread, NULL, engine_main, e);
		if (rc) {
			ts_err(rc, "hbm host: creating the %s copy engine thread: %s",
				 dir_names[i], tier_strerror(rc));
			goto fail;
		}
		e->started = true;
	}
	TIER_DEBUG_LOG(TIER_SS_HBM, "hbm host: %llu-byte arena at %p, bandwidth %g bytes/s",
		       U64(d->cap), (void *)d->base, d->bandwidth);
	*out = d;
	return 0;
fail:
	host_free(d);
	return rc;
}

static void host_close(struct hbm_dev *d)
{
	if (!d)
		return;
	pthread_mutex_lock(&d->lock);
	while (d->pending)
		pthread_cond_wait(&d->idle, &d->lock);
	pthread_mutex_unlock(&d->lock);
	host_free(d);
}

static uint64_t host_capacity(const struct hbm_dev *d)
{
	return d->cap;
}

static void *host_dev_ptr(struct hbm_dev *d, uint64_t off)
{
	return off <= d->cap ? d->base + off : NULL;
}

static int host_copy(struct hbm_dev *d, enum hbm_dir dir, uint64_t off, void *host, uint64_t len,
		     hbm_cb cb, void *arg)
{
	struct host_engine *e;
	struct host_req *r;
	int rc;

	rc = hbm_copy_check("host", dir, off, len, host, true, d->cap, cb);
	if (rc)
		return rc;
	e = &d->eng[dir];
	pthread_mutex_lock(&d->lock);
	r = d->free_reqs;
	if (r)
		d->free_reqs = r->next;
	pthread_mutex_unlock(&d->lock);
	if (!r) {
		r = ts_malloc(sizeof(*r));
		if (!r)
			return ts_err(-ENOMEM, "hbm host: %s copy: out of memory", dir_names[dir]);
	}
	*r = (struct host_req){
		.off = off, .len = len, .host = host, .cb = cb, .arg = arg,
		.fault = ts_fault_check(TIER_FAULT_HBM_COPY),
	};
	pthread_mutex_lock(&d->lock);
	*e->tail = r;
	e->tail = &r->next;
	d->pending++;
	pthread_cond_signal(&e->work);
	pthread_mutex_unlock(&d->lock);
	return 0;
}

static void host_counters(const struct hbm_dev *d, uint64_t *h2d_bytes, uint64_t *d2h_bytes)
{
	if (h2d_bytes)
		*h2d_bytes = atomic_load_explicit(&d->eng[HBM_H2D].bytes, memory_order_relaxed);
	if (d2h_bytes)
		*d2h_bytes = atomic_load_explicit(&d->eng[HBM_D2H].bytes, memory_order_relaxed);
}

const struct hbm_ops hbm_host_ops = {
	.name = "host",
	.version = HBM_OPS_VERSION,
	.caps = HBM_CAP_HOST_READABLE | HBM_CAP_BANDWIDTH,
	.open = host_open,
	.close = host_close,
	.capacity = host_capacity,
	.dev_ptr = host_dev_ptr,
	.copy = host_copy,
	.counters = host_counters,
};
