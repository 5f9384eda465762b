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
 * then goes to the tail of the direction's lane of the shared queue
 * (tiers/hbm_queue.h).  A direction's submit mutex is held across those
 * three steps, so the FIFO's order is the stream's order.  The lane's
 * completion thread pops the FIFO in order, waits for the request's event
 * (cuda_run: cudaEventSynchronize; the events are made with
 * cudaEventBlockingSync so that the wait sleeps instead of spinning a
 * core) and runs the callback with 0, or -EIO and a detail naming the
 * CUDA call and cudaGetErrorString().  Hence copies in one direction
 * complete in submission order and callbacks never run on the caller's
 * thread.  A zero-length copy, and one failed by the HBM_COPY fault site,
 * issue nothing: their place in the FIFO orders them.
 *
 * Requests are recycled through the queue's free list, each keeping its
 * event (created with cudaEventDisableTiming on first use, destroyed when
 * the queue frees the request), so a steady state makes no allocations
 * and creates no events.
 *
 * Locking.  Lock order: a direction's submit mutex, then the queue's lock.
 * The queue's lock guards both FIFOs, the free list and the count of
 * accepted copies whose callback has not returned; no CUDA call is made
 * under it, and none at all under a lock on a completion thread, so a
 * callback may submit again in either direction.
 *
 * Current device.  open(), copy() and close() make params.gpu current on
 * the calling thread for their CUDA calls and restore the caller's device
 * afterwards; the completion threads set it once.
 *
 * Shutdown.  close() waits until no copy is pending (copies submitted by
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

#include "common/cuda.h"
#include "common/cuda_check.h"
#include "common/fault.h"
#include "tiers/hbm.h"
#include "tiers/hbm_queue.h"

#define CUDA_ARENA_ALIGN (2ull << 20)
#define U64(x) ((unsigned long long)(x))

extern "C" {
extern const struct hbm_ops hbm_cuda_ops;
}

static const char *const dir_names[2] = { "H2D", "D2H" };

/* One queued copy: the queue's request, then the event that ends it. */
struct cuda_req {
	struct hbm_req q;          /* first: the queue hands out &q */
	cudaEvent_t ev;            /* created on first use, kept while recycled */
	bool recorded;             /* ev marks this copy's end on the stream */
};

struct hbm_dev {
	int gpu;
	char *base;
	uint64_t cap;
	void *stream[2];           /* a cudaStream_t per direction */
	pthread_mutex_t submit[2]; /* per direction: memcpy + event record + push, as one step */
	struct hbm_queue q;        /* a lane per direction */
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

/* Each completion thread makes the device current once. */
static void cuda_thread_init(void *ctx)
{
	struct hbm_dev *d = (struct hbm_dev *)ctx;

	if (cudaSetDevice(d->gpu) != cudaSuccess)
		(void)cudaGetLastError();
}

/* On the completion thread: waits for the copy's event. */
static int cuda_run(void *ctx, struct hbm_req *hr, char *detail, size_t dlen)
{
	struct hbm_dev *d = (struct hbm_dev *)ctx;
	struct cuda_req *r = (struct cuda_req *)hr;
	cudaError_t e;

	if (!r->recorded)
		return 0;               /* nothing issued: a zero-length copy */
	e = cudaEventSynchronize(r->ev);
	if (e == cudaSuccess)
		return 0;
	(void)cudaGetLastError();
	snprintf(detail, dlen, "hbm cuda: GPU %d: %s copy of %llu bytes at offset %llu: "
		 "cudaMemcpyAsync/cudaEventSynchronize: %s", d->gpu, dir_names[hr->dir],
		 U64(hr->len), U64(hr->off), cudaGetErrorString(e));
	return -EIO;
}

static void cuda_req_fini(void *ctx, struct hbm_req *hr)
{
	struct cuda_req *r = (struct cuda_req *)hr;

	(void)ctx;
	if (r->ev)
		cudaEventDestroy(r->ev);
}

static const struct hbm_queue_ops cuda_queue_ops = { cuda_run, cuda_thread_init, cuda_req_fini };

/*
 * Stops and joins the started threads, destroys events, streams and the
 * arena, and frees @d.  No copy is pending.  The caller has made d->gpu
 * current.
 */
static void cuda_free(struct hbm_dev *d)
{
	hbm_queue_fini(&d->q);
	for (int i = 0; i < 2; i++) {
		ts_cuda_stream_close(d->stream[i]);
		pthread_mutex_destroy(&d->submit[i]);
	}
	ts_cuda_free(d->base);
	(void)cudaGetLastError();
	free(d);
}

static int cuda_open(const struct hbm_params *p, struct hbm_dev **out)
{
	struct hbm_dev *d;
	void *base = NULL;
	char label[48];
	unsigned lane;
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
	snprintf(label, sizeof(label), "hbm cuda: GPU %d", p->gpu);
	hbm_queue_init(&d->q, &cuda_queue_ops, d, label, 2, sizeof(struct cuda_req));
	/* With default attributes these cannot fail on Linux. */
	for (int i = 0; i < 2; i++)
		pthread_mutex_init(&d->submit[i], NULL);
	d->gpu = p->gpu;
	d->cap = (p->capacity + CUDA_ARENA_ALIGN - 1) / CUDA_ARENA_ALIGN * CUDA_ARENA_ALIGN;
	device_enter(d->gpu, &prev);
	if ((rc = ts_cuda_use_device(d->gpu)) || (rc = ts_cuda_alloc(d->cap, &base)))
		goto fail;
	d->base = (char *)base;
	for (int i = 0; i < 2; i++)
		if ((rc = ts_cuda_stream_open(d->gpu, &d->stream[i])))
			goto fail;
	rc = hbm_queue_start(&d->q, &lane);
	if (rc) {
		ts_err(rc, "creating the %s completion thread: %s", dir_names[lane], tier_strerror(rc));
		goto fail;
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
	hbm_queue_drain(&d->q);
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
	cudaStream_t st;
	struct hbm_req *hr;
	struct cuda_req *r;
	cudaError_t e;
	int prev = -1, rc = 0;

	rc = hbm_copy_check("cuda", dir, off, len, host, true, d->cap, cb);
	if (rc)
		return rc;
	hr = hbm_queue_req_get(&d->q, dir, off, host, len, cb, arg);
	if (!hr)
		return ts_err(-ENOMEM, "hbm cuda: %s copy: out of memory", dir_names[dir]);
	r = (struct cuda_req *)hr;
	r->recorded = false;
	st = (cudaStream_t)d->stream[dir];
	device_enter(d->gpu, &prev);
	pthread_mutex_lock(&d->submit[dir]);
	hr->fault = ts_fault_check(TIER_FAULT_HBM_COPY);
	if (!hr->fault && len) {
		if (!r->ev)
			TIER_CUDA_CHECK_GOTO(cudaEventCreateWithFlags(&r->ev, cudaEventDisableTiming |
								      cudaEventBlockingSync),
					     rc, fail);
		TIER_CUDA_CHECK_GOTO(cudaMemcpyAsync(dir == HBM_H2D ? (void *)(d->base + off) : host,
						     dir == HBM_H2D ? host : (void *)(d->base + off),
						     len, dir == HBM_H2D ? cudaMemcpyHostToDevice
									 : cudaMemcpyDeviceToHost,
						     st),
				     rc, fail);
		e = cudaEventRecord(r->ev, st);
		if (e != cudaSuccess) {
			/* The copy is issued: let it finish before the caller's buffer is theirs again. */
			(void)cudaGetLastError();
			rc = ts_err(ts_cuda_errno(e), "cudaEventRecord: %s", cudaGetErrorString(e));
			(void)cudaStreamSynchronize(st);
			(void)cudaGetLastError();
			goto fail;
		}
		r->recorded = true;
	}
	hbm_queue_push(&d->q, hr);
	pthread_mutex_unlock(&d->submit[dir]);
	device_leave(d->gpu, prev);
	return 0;
fail:
	pthread_mutex_unlock(&d->submit[dir]);
	device_leave(d->gpu, prev);
	ts_err_prefix("hbm cuda: GPU %d: %s copy of %llu bytes at offset %llu", d->gpu,
			dir_names[dir], U64(len), U64(off));
	hbm_queue_req_put(&d->q, hr);
	return rc;
}

static void cuda_counters(const struct hbm_dev *d, uint64_t *h2d_bytes, uint64_t *d2h_bytes)
{
	hbm_queue_counters(&d->q, h2d_bytes, d2h_bytes);
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
