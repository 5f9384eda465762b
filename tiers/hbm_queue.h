/*
 * hbm_queue.h - the copy queue the HBM backends share (tiers/hbm.h's
 * contract, less the copy itself): a FIFO of copy requests per lane, a
 * completion thread per lane that pops them in order, performs or waits
 * for each through the backend's run() and runs its callback, a free list
 * of requests, the count of accepted copies whose callback has not
 * returned (close drains it), the HBM_COPY fault's failure, and the byte
 * counters per direction.
 *
 * A backend embeds a struct hbm_queue in its device and uses one lane per
 * direction (host, cuda: lane = dir) or one lane for both (null: one FIFO
 * keeps each direction's order).  Its copy() checks its arguments, then
 * either calls hbm_queue_submit(), or (cuda, which issues the copy itself)
 * takes a request (hbm_queue_req_get), sets req->fault from the HBM_COPY
 * site where it checks that site, issues what it must and pushes the
 * request (hbm_queue_push).  The lane's thread then completes it:
 *   - req->fault != 0: the callback gets that errno and the detail
 *     "<label>: <dir> copy of N bytes at offset O: <strerror> (injected at
 *     fault site hbm_copy)"; run() is not called;
 *   - else run() (NULL: nothing to do) gives 0, or a negative errno and
 *     the detail; on 0 the request's bytes are added to its direction's
 *     counter before the callback runs.
 * Callbacks run on the lane's thread with no lock held, so one may submit
 * again in either direction.
 *
 * Requests may be larger than struct hbm_req (req_size): a backend's own
 * fields follow it (the struct hbm_req first) and stay with the request
 * while it is recycled; req_fini() releases them when it is freed.
 *
 * Locking.  q->lock guards every lane's FIFO, the free list and
 * q->pending; run() and the callbacks are called without it.  A backend
 * that holds a lock of its own across issuing and hbm_queue_push() takes
 * that lock first (lock order: backend lock, then q->lock).
 *
 * C and C++ (hbm_cuda.cu): plain fields, no stdatomic.h; the counters are
 * updated with the __atomic builtins.
 */
#ifndef TIER_TIERS_HBM_QUEUE_H
#define TIER_TIERS_HBM_QUEUE_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "tiers/hbm.h"

#ifdef __cplusplus
extern "C" {
#endif

#define HBM_QUEUE_LANES 2

/* One queued copy. */
struct hbm_req {
	struct hbm_req *next;
	enum hbm_dir dir;
	uint64_t off, len;
	void *host;
	hbm_cb cb;
	void *arg;
	int fault;                 /* the HBM_COPY site's errno, 0: a real copy */
};

/* What a backend adds to the queue; every hook is called with its ctx. */
struct hbm_queue_ops {
	/*
	 * Performs @r, or waits for it, on the lane's thread with no lock
	 * held: 0, or a negative errno with @detail (@dlen bytes) filled.
	 * NULL: every copy succeeds at once.
	 */
	int (*run)(void *ctx, struct hbm_req *r, char *detail, size_t dlen);
	/* Optional: called once on each lane's thread before its first request. */
	void (*thread_init)(void *ctx);
	/* Optional: releases a backend's fields of @r before it is freed. */
	void (*req_fini)(void *ctx, struct hbm_req *r);
};

struct hbm_queue;

/* A lane: its FIFO and its completion thread. */
struct hbm_lane {
	struct hbm_queue *q;
	pthread_t thread;
	bool started;
	bool stop;                 /* under q->lock: exit once the FIFO is empty */
	pthread_cond_t work;       /* with q->lock: a request was queued, or stop */
	struct hbm_req *head, **tail;
};

struct hbm_queue {
	const struct hbm_queue_ops *ops;
	void *ctx;
	char label[48];            /* starts a fault's detail: "hbm host" */
	size_t req_size;
	unsigned nlanes;
	pthread_mutex_t lock;
	pthread_cond_t idle;       /* with lock: pending dropped to 0 */
	uint64_t pending;          /* accepted copies whose callback has not returned */
	struct hbm_req *free_reqs;
	struct hbm_lane lane[HBM_QUEUE_LANES];
	uint64_t bytes[2];         /* per direction, completed copies; __atomic builtins */
};

/*
 * Initialises @q (no thread yet): @nlanes lanes (1: both directions in one
 * FIFO; 2: lane = direction), requests of @req_size bytes
 * (>= sizeof(struct hbm_req)), @label for the details.  Cannot fail.
 */
void hbm_queue_init(struct hbm_queue *q, const struct hbm_queue_ops *ops, void *ctx,
		    const char *label, unsigned nlanes, size_t req_size);

/*
 * Starts the lanes' threads, in lane order, each behind the THREAD_CREATE
 * fault site.  0, or the negative errno of the first that failed (*lane is
 * its index) with no detail set: the backend words it.  The threads
 * already started stay for hbm_queue_fini().
 */
int hbm_queue_start(struct hbm_queue *q, unsigned *lane);

/*
 * A request (recycled, or a new zeroed one) with the copy's fields set,
 * fault 0 and the backend's own fields as last left; NULL when out of
 * memory (no detail set).
 */
struct hbm_req *hbm_queue_req_get(struct hbm_queue *q, enum hbm_dir dir, uint64_t off,
				  void *host, uint64_t len, hbm_cb cb, void *arg);

/* Gives back a request that was never pushed. */
void hbm_queue_req_put(struct hbm_queue *q, struct hbm_req *r);

/* Appends @r to its lane's FIFO: the copy is accepted, its callback will run. */
void hbm_queue_push(struct hbm_queue *q, struct hbm_req *r);

/*
 * A copy() whose request needs nothing else: a request, the HBM_COPY
 * site's errno in its fault, pushed.  0, or -ENOMEM ("<label>: <dir> copy:
 * out of memory") with nothing queued.
 */
int hbm_queue_submit(struct hbm_queue *q, enum hbm_dir dir, uint64_t off, void *host,
		     uint64_t len, hbm_cb cb, void *arg);

/* Waits until no accepted copy is pending (copies callbacks submit meanwhile included). */
void hbm_queue_drain(struct hbm_queue *q);

/*
 * Stops and joins the started threads (each empties its FIFO first), frees
 * the requests (req_fini first) and destroys the locks.  No copy may be
 * submitted any more.
 */
void hbm_queue_fini(struct hbm_queue *q);

/* The bytes of the copies completed so far, per direction (either may be NULL). */
void hbm_queue_counters(const struct hbm_queue *q, uint64_t *h2d_bytes, uint64_t *d2h_bytes);

#ifdef __cplusplus
}
#endif

#endif
