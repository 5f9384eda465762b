/*
 * hbm_null.c - the "null" HBM backend: capacity without memory, for tests
 * of residency and eviction that need no data (HBM_CAP_NO_DATA).
 *
 * There is no arena: capacity() is params.capacity exactly, dev_ptr()
 * is NULL, and a copy moves nothing (the host buffer is never touched,
 * and may be NULL).  The rest of hbm.h's contract holds as for a real
 * device: copy() validates its arguments and queues the request on the
 * shared queue (tiers/hbm_queue.h) with a single lane, whose completion
 * thread pops requests in submission order and runs their callbacks -
 * never on the caller's thread.  One FIFO for both directions keeps each
 * direction's order.  The HBM_COPY fault site fails a copy through its
 * callback, as elsewhere.
 *
 * Locking and shutdown are the queue's, as in hbm_host.c: close() waits
 * until no accepted copy is pending, copies that callbacks submit
 * meanwhile included, then stops and joins the thread.
 */
#include "config.h"

#include <errno.h>
#include <stdlib.h>

#include "common/error.h"
#include "common/fault.h"
#include "common/log.h"
#include "tiers/hbm.h"
#include "tiers/hbm_queue.h"

#define U64(x) ((unsigned long long)(x))

extern const struct hbm_ops hbm_null_ops;

struct hbm_dev {
	uint64_t cap;
	struct hbm_queue q;        /* one lane for both directions; no run(): nothing moves */
};

static const struct hbm_queue_ops null_queue_ops = { .run = NULL };

/* Stops and joins the thread if started, then frees everything.  No copy is pending. */
static void null_free(struct hbm_dev *d)
{
	hbm_queue_fini(&d->q);
	free(d);
}

static int null_open(const struct hbm_params *p, struct hbm_dev **out)
{
	struct hbm_dev *d;
	unsigned lane;
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
	hbm_queue_init(&d->q, &null_queue_ops, d, "hbm null", 1, sizeof(struct hbm_req));
	d->cap = p->capacity;
	rc = hbm_queue_start(&d->q, &lane);
	if (rc) {
		ts_err(rc, "hbm null: creating the completion thread: %s", tier_strerror(rc));
		null_free(d);
		return rc;
	}
	TIER_DEBUG_LOG(TIER_SS_HBM, "hbm null: %llu bytes (no memory)", U64(d->cap));
	*out = d;
	return 0;
}

static void null_close(struct hbm_dev *d)
{
	if (!d)
		return;
	hbm_queue_drain(&d->q);
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
	int rc = hbm_copy_check("null", dir, off, len, host, false, d->cap, cb);

	return rc ? rc : hbm_queue_submit(&d->q, dir, off, NULL, len, cb, arg);
}

static void null_counters(const struct hbm_dev *d, uint64_t *h2d_bytes, uint64_t *d2h_bytes)
{
	hbm_queue_counters(&d->q, h2d_bytes, d2h_bytes);
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
