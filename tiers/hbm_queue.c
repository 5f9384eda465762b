/*
 * hbm_queue.c - the copy queue the HBM backends share (hbm_queue.h): the
 * lanes' FIFOs and completion threads, the free list of requests, the
 * pending count close() drains, fault completions and byte counters.
 */
#include "config.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "common/fault.h"
#include "tiers/hbm_queue.h"

#define U64(x) ((unsigned long long)(x))

static const char *const dir_names[2] = { "H2D", "D2H" };

static struct hbm_lane *lane_of(struct hbm_queue *q, const struct hbm_req *r)
{
	return &q->lane[q->nlanes == 1 ? 0 : (unsigned)r->dir];
}

/* Completes @r (no lock held): its result, its bytes counted, its callback. */
static void req_complete(struct hbm_queue *q, struct hbm_req *r, char *detail, size_t dlen)
{
	int rc = 0;

	if (r->fault) {
		rc = r->fault;
		snprintf(detail, dlen, "%s: %s copy of %llu bytes at offset %llu: %s (injected at "
			 "fault site hbm_copy)", q->label, dir_names[r->dir], U64(r->len),
			 U64(r->off), tier_strerror(rc));
	} else if (q->ops->run) {
		rc = q->ops->run(q->ctx, r, detail, dlen);
	}
	if (!rc)
		__atomic_fetch_add(&q->bytes[r->dir], r->len, __ATOMIC_RELAXED);
	/* The request is ours until it goes back on the free list. */
	r->cb(r->arg, rc, rc ? detail : "");
}

static void *lane_main(void *arg)
{
	struct hbm_lane *l = arg;
	struct hbm_queue *q = l->q;
	char detail[512];

	if (q->ops->thread_init)
		q->ops->thread_init(q->ctx);
	pthread_mutex_lock(&q->lock);
	for (;;) {
		struct hbm_req *r;

		while (!l->head && !l->stop)
			pthread_cond_wait(&l->work, &q->lock);
		r = l->head;
		if (!r)
			break;                  /* stopped and drained */
		l->head = r->next;
		if (!l->head)
			l->tail = &l->head;
		pthread_mutex_unlock(&q->lock);

		req_complete(q, r, detail, sizeof(detail));

		pthread_mutex_lock(&q->lock);
		r->next = q->free_reqs;
		q->free_reqs = r;
		if (--q->pending == 0)
			pthread_cond_broadcast(&q->idle);
	}
	pthread_mutex_unlock(&q->lock);
	return NULL;
}

void hbm_queue_init(struct hbm_queue *q, const struct hbm_queue_ops *ops, void *ctx,
		    const char *label, unsigned nlanes, size_t req_size)
{
	memset(q, 0, sizeof(*q));
	q->ops = ops;
	q->ctx = ctx;
	snprintf(q->label, sizeof(q->label), "%s", label);
	q->nlanes = nlanes;
	q->req_size = req_size;
	/* With default attributes these cannot fail on Linux. */
	pthread_mutex_init(&q->lock, NULL);
	pthread_cond_init(&q->idle, NULL);
	for (unsigned i = 0; i < nlanes; i++) {
		struct hbm_lane *l = &q->lane[i];

		l->q = q;
		l->tail = &l->head;
		pthread_cond_init(&l->work, NULL);
	}
}

int hbm_queue_start(struct hbm_queue *q, unsigned *lane)
{
	for (unsigned i = 0; i < q->nlanes; i++) {
		struct hbm_lane *l = &q->lane[i];
		int rc = ts_fault_check(TIER_FAULT_THREAD_CREATE);

		if (!rc)
			rc = -pthread_create(&l->thread, NULL, lane_main, l);
		if (rc) {
			*lane = i;
			return rc;
		}
		l->started = true;
	}
	return 0;
}

struct hbm_req *hbm_queue_req_get(struct hbm_queue *q, enum hbm_dir dir, uint64_t off,
				  void *host, uint64_t len, hbm_cb cb, void *arg)
{
	struct hbm_req *r;

	pthread_mutex_lock(&q->lock);
	r = q->free_reqs;
	if (r)
		q->free_reqs = r->next;
	pthread_mutex_unlock(&q->lock);
	if (!r) {
		r = ts_calloc(1, q->req_size);
		if (!r)
			return NULL;
	}
	/* Only the queue's part: a backend's fields after it stay as they were. */
	*r = (struct hbm_req){
		.dir = dir, .off = off, .len = len, .host = host, .cb = cb, .arg = arg,
	};
	return r;
}

void hbm_queue_req_put(struct hbm_queue *q, struct hbm_req *r)
{
	pthread_mutex_lock(&q->lock);
	r->next = q->free_reqs;
	q->free_reqs = r;
	pthread_mutex_unlock(&q->lock);
}

void hbm_queue_push(struct hbm_queue *q, struct hbm_req *r)
{
	struct hbm_lane *l = lane_of(q, r);

	pthread_mutex_lock(&q->lock);
	r->next = NULL;
	*l->tail = r;
	l->tail = &r->next;
	q->pending++;
	pthread_cond_signal(&l->work);
	pthread_mutex_unlock(&q->lock);
}

int hbm_queue_submit(struct hbm_queue *q, enum hbm_dir dir, uint64_t off, void *host,
		     uint64_t len, hbm_cb cb, void *arg)
{
	struct hbm_req *r = hbm_queue_req_get(q, dir, off, host, len, cb, arg);

	if (!r)
		return ts_err(-ENOMEM, "%s: %s copy: out of memory", q->label, dir_names[dir]);
	r->fault = ts_fault_check(TIER_FAULT_HBM_COPY);
	hbm_queue_push(q, r);
	return 0;
}

void hbm_queue_drain(struct hbm_queue *q)
{
	pthread_mutex_lock(&q->lock);
	while (q->pending)
		pthread_cond_wait(&q->idle, &q->lock);
	pthread_mutex_unlock(&q->lock);
}

void hbm_queue_fini(struct hbm_queue *q)
{
	pthread_mutex_lock(&q->lock);
	for (unsigned i = 0; i < q->nlanes; i++) {
		q->lane[i].stop = true;
		pthread_cond_signal(&q->lane[i].work);
	}
	pthread_mutex_unlock(&q->lock);
	for (unsigned i = 0; i < q->nlanes; i++)
		if (q->lane[i].started)
			pthread_join(q->lane[i].thread, NULL);
	while (q->free_reqs) {
		struct hbm_req *r = q->free_reqs;

		q->free_reqs = r->next;
		if (q->ops->req_fini)
			q->ops->req_fini(q->ctx, r);
		free(r);
	}
	for (unsigned i = 0; i < q->nlanes; i++)
		pthread_cond_destroy(&q->lane[i].work);
	pthread_cond_destroy(&q->idle);
	pthread_mutex_destroy(&q->lock);
}

void hbm_queue_counters(const struct hbm_queue *q, uint64_t *h2d_bytes, uint64_t *d2h_bytes)
{
	if (h2d_bytes)
		*h2d_bytes = __atomic_load_n(&q->bytes[HBM_H2D], __ATOMIC_RELAXED);
	if (d2h_bytes)
		*d2h_bytes = __atomic_load_n(&q->bytes[HBM_D2H], __ATOMIC_RELAXED);
}
