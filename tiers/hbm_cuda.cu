/*
 * hbm_cuda.cu - the "cuda" HBM backend (CUDA builds only): the HBM tier
 * on a real device, keeping the contract of hbm.h.
 *
 * Arena.  One cudaMalloc of the capacity rounded up to 2 MiB on
 * params.gpu; dev_ptr() is device memory (HBM_CAP_DEVICE_MEMORY).
 *
 * Copies.  Two streams, created with cudaStreamNonBlocking so they never
 * serialise with the legacy default stream: one for H2D, one for D2H.  A
 * copy is a cudaMemcpyAsync on its direction's stream followed by a
 * cudaEventRecord of an event of its own; the request (event, callback)
 * then goes to the tail of the direction's FIFO.  A direction's submit
 * mutex is held across those three steps, so the FIFO's order is the
 * stream's order.  One completion thread per direction pops the FIFO in
 * order, waits for the request's event (cudaEventSynchronize; the events
 * are made with cudaEventBlockingSync so that the wait sleeps instead of
 * spinning a core) and runs the callback with 0, or -EIO and a detail
 * naming the CUDA call and cudaGetErrorString().  Hence copies in one
 * direction complete in submission order and callbacks never run on the
 * caller's thread.  A zero-length copy, and one failed by the HBM_COPY
 * fault site, issue nothing: their place in the FIFO orders them.
 *
 * Requests are recycled through a free list, each keeping its event
 * (created with cudaEventDisableTiming on first use), so a steady state
 * makes no allocations and creates no events.
 *
 * Locking.  Lock order: q->submit, then d->lock.  d->lock guards both
 * FIFOs, the free list and d->pending (accepted copies whose callback has
 * not returned); no CUDA call is made under it, and none at all under a
 * lock on a completion thread, so a callback may submit again in either
 * direction.
 *
 * Current device.  open(), copy() and close() make params.gpu current on
 * the calling thread for their CUDA calls and restore the caller's device
 * afterwards; the completion threads set it once.
 *
 * Shutdown.  close() waits until pending is 0 (copies submitted by
 * callbacks meanwhile included), stops and joins the completion threads,
 * then destroys the events and streams and frees the arena.
 *
 * No logging here: common/log.h is C11 (stdatomic.h) and this file is C++.
 */
#include "config.h"

#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/fault.h"
#include "tiers/cuda_check.h"
#include "tiers/hbm.h"

#define CUDA_ARENA_ALIGN (2ull << 20)
#define U64(x) ((unsigned long long)(x))

extern "C" {
extern const struct hbm_ops hbm_cuda_ops;
}

static const char *const dir_names[2] = { "H2D", "D2H" };

/* One queued copy; recycled with its event. */
struct cuda_req {
	struct cuda_req *next;
	cudaEvent_t ev;            /* created on first use, kept while recycled */
	bool recorded;             /* ev marks this copy's end on the stream */
	uint64_t off, len;
	hbm_cb cb;
	void *arg;
	int fault;                 /* the HBM_COPY site's errno, 0: a real copy */
};

/* A direction: its stream, FIFO and completion thread. */
struct cuda_queue {
	struct hbm_dev *d;
	int dir;
	cudaStream_t stream;
	pthread_t thread;
	bool started;
	bool stop;                 /* under d->lock: exit once the FIFO is empty */
	pthread_mutex_t submit;    /* memcpy + event record + push, as one step */
	pthread_cond_t work;       /* with d->lock: a request was queued, or stop */
	struct cuda_req *head, **tail;
	uint64_t bytes;            /* completed bytes; __atomic builtins */
};

struct hbm_dev {
	int gpu;
	char *base;
	uint64_t cap;
	pthread_mutex_t lock;
	pthread_cond_t idle;       /* with lock: pending dropped to 0 */
	uint64_t pending;
	struct cuda_req *free_reqs;
	struct cuda_queue q[2];
};

/* Makes @gpu current on this thread; *prev gets the device to restore (-1: none). */
static void device_enter(int gpu, int *prev)
{
	*prev = -1;
	if (cudaGetDevice(prev) != cudaSuccess) {
		(void)cudaGetLastError();
		*prev = -1;
	}
	if (*prev != gpu && cudaSetDevice(gpu) != cudaSuccess)
		(void)cudaGetLastError();   /* the next call reports it */
}

static void device_leave(int gpu, int prev)
{
	if (prev >= 0 && prev != gpu && cudaSetDevice(prev) != cudaSuccess)
		(void)cudaGetLastError();
}

static void *completion_main(void *arg)
{
	struct cuda_queue *q = (struct cuda_queue *)arg;
	struct hbm_dev *d = q->d;
	char detail[512];

	if (cudaSetDevice(d->gpu) != cudaSuccess)
		(void)cudaGetLastError();
	pthread_mutex_lock(&d->lock);
	for (;;) {
		struct cuda_req *r;
		cudaError_t e;
		int rc = 0;

		while (!q->head && !q->stop)
			pthread_cond_wait(&q->work, &d->lock);
		r = q->head;
		if (!r)
			break;                  /* stopped and drained */
		q->head = r->next;
		if (!q->head)
			q->tail = &q->head;
		pthread_mutex_unlock(&d->lock);

		if (r->fault) {
			rc = r->fault;
			snprintf(detail, sizeof(detail), "hbm cuda: GPU %d: %s copy of %llu bytes at "
				 "offset %llu: %s (injected at fault site hbm_copy)", d->gpu,
				 dir_names[q->dir], U64(r->len), U64(r->off), tier_strerror(rc));
		} else if (r->recorded && (e = cudaEventSynchronize(r->ev)) != cudaSuccess) {
			(void)cudaGetLastError();
			rc = -EIO;
			snprintf(detail, sizeof(detail), "hbm cuda: GPU %d: %s copy of %llu bytes at "
				 "offset %llu: cudaMemcpyAsync/cudaEventSynchronize: %s", d->gpu,
				 dir_names[q->dir], U64(r->len), U64(r->off), cudaGetErrorString(e));
		} else {
			__atomic_fetch_add(&q->bytes, r->len, __ATOMIC_RELAXED);
		}
		/* The request is ours until it goes back on the free list below. */
		r->cb(r->arg, rc, rc ? detail : "");

		pthread_mutex_lock(&d->lock);
		r->next = d->free_reqs;
		d->free_reqs = r;
		if (--d->pending == 0)
			pthread_cond_broadcast(&d->idle);
	}
	pthread_mutex_unlock(&d->lock);
	return NULL;
}

/*
 * Stops and joins the started threads, destroys events, streams and the
 * arena, and frees @d.  No copy is pending.  The caller has made d->gpu
 * current.
 */
static void cuda_free(struct hbm_dev *d)
{
	pthread_mutex_lock(&d->lock);
	for (int i = 0; i < 2; i++) {
		d->q[i].stop = true;
		pthread_cond_signal(&d->q[i].work);
	}
	pthread_mutex_unlock(&d->lock);
	for (int i = 0; i < 2; i++)
		if (d->q[i].started)
			pthread_join(d->q[i].thread, NULL);
	while (d->free_reqs) {
		struct cuda_req *r = d->free_reqs;

		d->free_reqs = r->next;
		if (r->ev)
			cudaEventDestroy(r->ev);
		free(r);
	}
	for (int i = 0; i < 2; i++) {
		if (d->q[i].stream)
			cudaStreamDestroy(d->q[i].stream);
		pthread_cond_destroy(&d->q[i].work);
		pthread_mutex_destroy(&d->q[i].submit);
	}
	if (d->base)
		cudaFree(d->base);
	(void)cudaGetLastError();
	pthread_cond_destroy(&d->idle);
	pthread_mutex_destroy(&d->lock);
	free(d);
}

static int cuda_open(const struct hbm_params *p, struct hbm_dev **out)
{
	struct hbm_dev *d;
	void *base = NULL;
	int prev = -1, rc;

	*out = NULL;
	if (!p)
		return ts_err(-EINVAL, "hbm cuda: no parameters");
	if (p->capacity == 0 || p->capacity > UINT64_MAX - CUDA_ARENA_ALIGN)
		return ts_err(-EINVAL, "hbm cuda: capacity %llu bytes is out of range",
				U64(p->capacity));
	if (p->gpu < 0)
		return ts_err(-ENODEV, "hbm cuda: no GPU (device %d)", p->gpu);
	rc = ts_fault_check(TIER_FAULT_HBM_ALLOC);
	if (rc)
		return ts_err(rc, "hbm cuda: GPU %d: allocating the %llu-byte arena: %s", p->gpu,
				U64(p->capacity), tier_strerror(rc));
	d = (struct hbm_dev *)ts_calloc(1, sizeof(*d));
	if (!d)
		return ts_err(-ENOMEM, "hbm cuda: out of memory");
	/* With default attributes these cannot fail on Linux. */
	pthread_mutex_init(&d->lock, NULL);
	pthread_cond_init(&d->idle, NULL);
	d->gpu = p->gpu;
	d->cap = (p->capacity + CUDA_ARENA_ALIGN - 1) / CUDA_ARENA_ALIGN * CUDA_ARENA_ALIGN;
	for (int i = 0; i < 2; i++) {
		struct cuda_queue *q = &d->q[i];

		q->d = d;
		q->dir = i;
		q->tail = &q->head;
		pthread_mutex_init(&q->submit, NULL);
		pthread_cond_init(&q->work, NULL);
	}
	device_enter(d->gpu, &prev);
	TIER_CUDA_CHECK_GOTO(cudaSetDevice(d->gpu), rc, fail);
	TIER_CUDA_CHECK_GOTO(cudaMalloc(&base, d->cap), rc, fail);
	d->base = (char *)base;
	for (int i = 0; i < 2; i++)
		TIER_CUDA_CHECK_GOTO(cudaStreamCreateWithFlags(&d->q[i].stream,
							       cudaStreamNonBlocking), rc, fail);
	for (int i = 0; i < 2; i++) {
		struct cuda_queue *q = &d->q[i];

		rc = ts_fault_check(TIER_FAULT_THREAD_CREATE);
		if (!rc)
			rc = -pthread_create(&q->thread, NULL, completion_main, q);
		if (rc) {
			ts_err(rc, "creating the %s completion thread: %s", dir_names[i],
				 tier_strerror(rc));
			goto fail;
		}
		q->started = true;
	}
	device_leave(d->gpu, prev);
	*out = d;
	return 0;
fail:
	ts_err_prefix("hbm cuda: GPU %d, %llu-byte arena", p->gpu, U64(d->cap));
	cuda_free(d);
	device_leave(p->gpu, prev);
	return rc;
}

static void cuda_close(struct hbm_dev *d)
{
	int prev, gpu;

	if (!d)
		return;
	pthread_mutex_lock(&d->lock);
	while (d->pending)
		pthread_cond_wait(&d->idle, &d->lock);
	pthread_mutex_unlock(&d->lock);
	gpu = d->gpu;
	device_enter(gpu, &prev);
	cuda_free(d);
	device_leave(gpu, prev);
}

static uint64_t cuda_capacity(const struct hbm_dev *d)
{
	return d->cap;
}

static void *cuda_dev_ptr(struct hbm_dev *d, uint64_t off)
{
	return off <= d->cap ? d->base + off : NULL;
}

static int cuda_copy(struct hbm_dev *d, enum hbm_dir dir, uint64_t off, void *host, uint64_t len,
		     hbm_cb cb, void *arg)
{
	struct cuda_queue *q;
	struct cuda_req *r;
	cudaError_t e;
	int prev = -1, rc = 0;

	rc = hbm_copy_check("cuda", dir, off, len, host, true, d->cap, cb);
	if (rc)
		return rc;
	q = &d->q[dir];
	pthread_mutex_lock(&d->lock);
	r = d->free_reqs;
	if (r)
		d->free_reqs = r->next;
	pthread_mutex_unlock(&d->lock);
	if (!r) {
		r = (struct cuda_req *)ts_calloc(1, sizeof(*r));
		if (!r)
			return ts_err(-ENOMEM, "hbm cuda: %s copy: out of memory", dir_names[dir]);
	}
	r->recorded = false;
	r->off = off;
	r->len = len;
	r->cb = cb;
	r->arg = arg;
	device_enter(d->gpu, &prev);
	pthread_mutex_lock(&q->submit);
	r->fault = ts_fault_check(TIER_FAULT_HBM_COPY);
	if (!r->fault && len) {
		if (!r->ev)
			TIER_CUDA_CHECK_GOTO(cudaEventCreateWithFlags(&r->ev, cudaEventDisableTiming |
								      cudaEventBlockingSync),
					     rc, fail);
		TIER_CUDA_CHECK_GOTO(cudaMemcpyAsync(dir == HBM_H2D ? (void *)(d->base + off) : host,
						     dir == HBM_H2D ? host : (void *)(d->base + off),
						     len, dir == HBM_H2D ? cudaMemcpyHostToDevice
									 : cudaMemcpyDeviceToHost,
						     q->stream),
				     rc, fail);
		e = cudaEventRecord(r->ev, q->stream);
		if (e != cudaSuccess) {
			/* The copy is issued: let it finish before the caller's buffer is theirs again. */
			(void)cudaGetLastError();
			rc = ts_err(ts_cuda_errno(e), "cudaEventRecord: %s", cudaGetErrorString(e));
			(void)cudaStreamSynchronize(q->stream);
			(void)cudaGetLastError();
			goto fail;
		}
		r->recorded = true;
	}
	pthread_mutex_lock(&d->lock);
	r->next = NULL;
	*q->tail = r;
	q->tail = &r->next;
	d->pending++;
	pthread_cond_signal(&q->work);
	pthread_mutex_unlock(&d->lock);
	pthread_mutex_unlock(&q->submit);
	device_leave(d->gpu, prev);
	return 0;
fail:
	pthread_mutex_unlock(&q->submit);
	device_leave(d->gpu, prev);
	ts_err_prefix("hbm cuda: GPU %d: %s copy of %llu bytes at offset %llu", d->gpu,
			dir_names[dir], U64(len), U64(off));
	pthread_mutex_lock(&d->lock);
	r->next = d->free_reqs;
	d->free_reqs = r;
	pthread_mutex_unlock(&d->lock);
	return rc;
}

static void cuda_counters(const struct hbm_dev *d, uint64_t *h2d_bytes, uint64_t *d2h_bytes)
{
	if (h2d_bytes)
		*h2d_bytes = __atomic_load_n(&d->q[HBM_H2D].bytes, __ATOMIC_RELAXED);
	if (d2h_bytes)
		*d2h_bytes = __atomic_load_n(&d->q[HBM_D2H].bytes, __ATOMIC_RELAXED);
}

/* Positional: C++17 has no designated initialisers.  Order of struct hbm_ops. */
extern "C" const struct hbm_ops hbm_cuda_ops = {
	"cuda",
	HBM_OPS_VERSION,
	HBM_CAP_DEVICE_MEMORY,
	cuda_open,
	cuda_close,
	cuda_capacity,
	cuda_dev_ptr,
	cuda_copy,
	cuda_counters,
};
