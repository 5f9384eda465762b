/*
 * hbm_null.c - the "null" HBM backend: capacity without memory, for tests
 * of residency and eviction that need no data (HBM_CAP_NO_DATA).
 *
 * There is no arena: capacity() is params.capacity exactly, dev_ptr()
 * is NULL, and a copy moves nothing (the host buffer is never touched,
 * and may be NULL).  The rest of hbm.h's contract holds as for a real
 * device: copy() validates its arguments and queues the request, and a
 * single completion thread pops requests in submission order and runs
 * their callbacks - never on the caller's thread.  One FIFO for both
 * directions keeps each direction's order.  The HBM_COPY fault site fails
 * a copy through its callback, as elsewhere.
 *
 * Locking and shutdown are those of hbm_host.c: d->lock guards the queue,
 * the free list of requests and d->pending (accepted copies whose callback
 * has not returned); close() waits for pending to reach 0, copies that
 * callbacks submit meanwhile included, then stops and joins the thread.
 */
#include "config.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "common/fault.h"
#include "common/log.h"
#include "tiers/hbm.h"

#define U64(x) ((unsigned long long)(x))

extern const struct hbm_ops hbm_null_ops;

static const char *const dir_names[2] = { "H2D", "D2H" };

struct null_req {
	struct null_req *next;
	enum hbm_dir dir;
	uint64_t off, len;
	hbm_cb cb;
	void *arg;
	int fault;                 /* the HBM_COPY site's errno, 0: succeed */
};

struct hbm_dev {
	uint64_t cap;
	pthread_t thread;
	bool started;
	bool stop;                 /* under lock: exit once the queue is empty */
	pthread_mutex_t lock;
	pthread_cond_t work;       /* with lock: a request was queued, or stop */
	pthread_cond_t idle;       /* with lock: pending dropped to 0 */
	uint64_t pending;
	struct null_req *head, **tail;
	struct null_req *free_reqs;
	_Atomic uint64_t bytes[2]; /* bytes of completed copies, per direction (none moved) */
};

static void *completion_main(void *arg)
{
	struct hbm_dev *d = arg;
	char detail[512];

	pthread_mutex_lock(&d->lock);
	for (;;) {
		struct null_req *r, copy;
		int rc = 0;

		while (!d->head && !d->stop)
			pthread_cond_wait(&d->work, &d->lock);
		r = d->head;
		if (!r)
			break;                  /* stopped and drained */
		d->head = r->next;
		if (!d->head)
			d->tail = &d->head;
		pthread_mutex_unlock(&d->lock);

		copy = *r;
		if (copy.fault) {
			rc = copy.fault;
			snprintf(detail, sizeof(detail), "hbm null: %s copy of %llu bytes at offset "
				 "%llu: %s (injected at fault site hbm_copy)", dir_names[copy.dir],
				 U64(copy.len), U64(copy.off), tier_strerror(rc));
		} else {
			atomic_fetch_add_explicit(&d->bytes[copy.dir], copy.len, memory_order_relaxed);
		}
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

/* Stops and joins the thread if started, then frees everything.  No copy is pending. */
static void null_free(struct hbm_dev *d)
{
	pthread_mutex_lock(&d->lock);
	d->stop = true;
	pthread_cond_signal(&d->work);
	pthread_mutex_unlock(&d->lock);
	if (d->started)
		pthread_join(d->thread, NULL);
	while (d->free_reqs) {
		struct null_req *r = d->free_reqs;

		d->free_reqs = r->next;
		free(r);
	}
	pthread_cond_destroy(&d->work);
	pthread_cond_destroy(&d->idle);
	pthread_mutex_destroy(&d->lock);
	free(d);
}

static int null_open(const struct hbm_params *p, struct hbm_dev **out)
{
	struct hbm_dev *d;
	int rc;

	*out = NULL;
	if (!p)
		return ts_err(-EINVAL, "hbm null: no parameters");
	if (p->capacity == 0)
		return ts_err(-EINVAL, "hbm null: capacity 0");
	rc = ts_fault_check(TIER_FAULT_HBM_ALLOC);
	if (rc)
		return ts_err(rc, "hbm null: allocating the %llu-byte arena: %s", U64(p->capacity),
				tier_strerror(rc));
	d = ts_calloc(1, sizeof(*d));
	if (!d)
		return ts_err(-ENOMEM, "hbm null: out of memory");
	/* With default attributes these cannot fail on Linux. */
	pthread_mutex_init(&d->lock, NULL);
	pthread_cond_init(&d->work, NULL);
	pthread_cond_init(&d->idle, NULL);
	d->cap = p->capacity;
	d->tail = &d->head;
	rc = ts_fault_check(TIER_FAULT_THREAD_CREATE);
	if (!rc)
		rc = -pthread_create(&d->thread, NULL, completion_main, d);
	if (rc) {
		ts_err(rc, "hbm null: creating the completion thread: %s", tier_strerror(rc));
		null_free(d);
		return rc;
	}
	d->started = true;
	TIER_DEBUG_LOG(TIER_SS_HBM, "hbm null: %llu bytes (no memory)", U64(d->cap));
	*out = d;
	return 0;
}

static void null_close(struct hbm_dev *d)
{
	if (!d)
		return;
	pthread_mutex_lock(&d->lock);
	while (d->pending)
		pthread_cond_wait(&d->idle, &d->lock);
	pthread_mutex_unlock(&d->lock);
	null_free(d);
}

static uint64_t null_capacity(const struct hbm_dev *d)
{
	return d->cap;
}

static void *null_dev_ptr(struct hbm_dev *d, uint64_t off)
{
	(void)d;
	(void)off;
	return NULL;
}

static int null_copy(struct hbm_dev *d, enum hbm_dir dir, uint64_t off, void *host, uint64_t len,
		     hbm_cb cb, void *arg)
{
	struct null_req *r;
	int rc;

	rc = hbm_copy_check("null", dir, off, len, host, false, d->cap, cb);
	if (rc)
		return rc;
	pthread_mutex_lock(&d->lock);
	r = d->free_reqs;
	if (r)
		d->free_reqs = r->next;
	pthread_mutex_unlock(&d->lock);
	if (!r) {
		r = ts_malloc(sizeof(*r));
		if (!r)
			return ts_err(-ENOMEM, "hbm null: %s copy: out of memory", dir_names[dir]);
	}
	*r = (struct null_req){
		.dir = dir, .off = off, .len = len, .cb = cb, .arg = arg,
		.fault = ts_fault_check(TIER_FAULT_HBM_COPY),
	};
	pthread_mutex_lock(&d->lock);
	*d->tail = r;
	d->tail = &r->next;
	d->pending++;
	pthread_cond_signal(&d->work);
	pthread_mutex_unlock(&d->lock);
	return 0;
}

static void null_counters(const struct hbm_dev *d, uint64_t *h2d_bytes, uint64_t *d2h_bytes)
{
	if (h2d_bytes)
		*h2d_bytes = atomic_load_explicit(&d->bytes[HBM_H2D], memory_order_relaxed);
	if (d2h_bytes)
		*d2h_bytes = atomic_load_explicit(&d->bytes[HBM_D2H], memory_order_relaxed);
}

const struct hbm_ops hbm_null_ops = {
	.name = "null",
	.version = HBM_OPS_VERSION,
	.caps = HBM_CAP_NO_DATA,
	.open = null_open,
	.close = null_close,
	.capacity = null_capacity,
	.dev_ptr = null_dev_ptr,
	.copy = null_copy,
	.counters = null_counters,
};
