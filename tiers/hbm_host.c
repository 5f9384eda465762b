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
 * Copy engines.  The lanes of the shared queue (tiers/hbm_queue.h), one
 * per direction (H2D, D2H), each a thread with a FIFO, model DMA engines:
 * a lane pops the oldest request, memcpy()s it (engine_run), waits out the
 * pacing (below) and runs the callback, with no lock held, before taking
 * the next.  So copies in one direction complete in submission order and
 * a callback always runs on an engine thread.
 *
 * Pacing (HBM_CAP_BANDWIDTH).  With params.bandwidth B > 0 bytes/s each
 * direction has a "next free" clock: a copy of n bytes starts at
 * max(now, next_free), occupies the link for n / B seconds and does not
 * complete (callback) before start + n / B.  A direction therefore never
 * moves more than B bytes/s over any interval that starts idle; idle time
 * is not banked as credit.
 *
 * Locking and shutdown are the queue's: its lock guards both FIFOs, the
 * free list of requests and the count of accepted copies whose callback
 * has not returned; byte counters are atomics, updated before the
 * callback runs.  close() waits until that count is 0 - which includes
 * copies submitted from callbacks while it waits - then stops and joins
 * the engines.  The caller submits nothing once it has called close().
 */
#include "config.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "common/clock.h"
#include "common/error.h"
#include "common/fault.h"
#include "common/log.h"
#include "tiers/hbm.h"
#include "tiers/hbm_queue.h"

#define HOST_ARENA_ALIGN (2ull << 20)
#define U64(x) ((unsigned long long)(x))

extern const struct hbm_ops hbm_host_ops;

static const char *const dir_names[2] = { "H2D", "D2H" };

struct hbm_dev {
	char *base;
	uint64_t cap;              /* mapped bytes, a multiple of HOST_ARENA_ALIGN */
	double bandwidth;          /* bytes/s per direction, 0: unlimited */
	uint64_t next_free_ns[2];  /* pacing clock per direction; its engine thread's own */
	struct hbm_queue q;        /* a lane (engine) per direction */
};

/* How long @len bytes occupy a link of @bw bytes/s, in ns (capped at ~31 years). */
static uint64_t link_ns(uint64_t len, double bw)
{
	double ns = (double)len * 1e9 / bw;

	return ns >= 1e18 ? (uint64_t)1e18 : (uint64_t)ns;
}

/* Performs @r on its direction's engine thread, paced (no lock held). */
static int engine_run(void *ctx, struct hbm_req *r, char *detail, size_t dlen)
{
	struct hbm_dev *d = ctx;
	uint64_t *next_free_ns = &d->next_free_ns[r->dir];
	uint64_t now;

	(void)detail;
	(void)dlen;
	if (d->bandwidth > 0 && r->len) {
		now = ts_now_ns();
		if (*next_free_ns < now)
			*next_free_ns = now;
		*next_free_ns += link_ns(r->len, d->bandwidth);
	}
	if (r->len) {
		if (r->dir == HBM_H2D)
			memcpy(d->base + r->off, r->host, r->len);
		else
			memcpy(r->host, d->base + r->off, r->len);
	}
	if (d->bandwidth > 0 && r->len) {
		now = ts_now_ns();
		if (*next_free_ns > now)
			ts_sleep_ns(*next_free_ns - now);
	}
	return 0;
}

static const struct hbm_queue_ops host_queue_ops = { .run = engine_run };

/* Stops and joins the started engines, then frees everything.  No copy is pending. */
static void host_free(struct hbm_dev *d)
{
	hbm_queue_fini(&d->q);
	if (d->base)
		munmap(d->base, d->cap);
	free(d);
}

static int host_open(const struct hbm_params *p, struct hbm_dev **out)
{
	struct hbm_dev *d;
	void *base;
	unsigned lane;
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
	hbm_queue_init(&d->q, &host_queue_ops, d, "hbm host", 2, sizeof(struct hbm_req));
	d->cap = (p->capacity + HOST_ARENA_ALIGN - 1) / HOST_ARENA_ALIGN * HOST_ARENA_ALIGN;
	d->bandwidth = p->bandwidth;
	base = mmap(NULL, d->cap, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
		    -1, 0);
	if (base == MAP_FAILED) {
		rc = ts_err(-ENOMEM, "hbm host: mapping the %llu-byte arena: %s", U64(d->cap),
			      tier_strerror(-errno));
		goto fail;
	}
	d->base = base;
	(void)madvise(base, d->cap, MADV_HUGEPAGE);   /* best effort */
	rc = hbm_queue_start(&d->q, &lane);
	if (rc) {
		ts_err(rc, "hbm host: creating the %s copy engine thread: %s", dir_names[lane],
			 tier_strerror(rc));
		goto fail;
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
	hbm_queue_drain(&d->q);
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
	int rc = hbm_copy_check("host", dir, off, len, host, true, d->cap, cb);

	return rc ? rc : hbm_queue_submit(&d->q, dir, off, host, len, cb, arg);
}

static void host_counters(const struct hbm_dev *d, uint64_t *h2d_bytes, uint64_t *d2h_bytes)
{
	hbm_queue_counters(&d->q, h2d_bytes, d2h_bytes);
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
