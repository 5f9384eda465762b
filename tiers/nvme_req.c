/*
 * nvme_req.c - the NVMe tier's request path: a caller's request cut into
 * one sub-I/O per stripe unit it touches (on path (unit + rot) % P, in
 * slot unit / P of the object's extent there), direct or through a bounce
 * buffer, the checksum of a whole unit written, the sub-I/Os handed to the
 * rings (tiers/nvme_ring.c) in batches; the order of sub-I/Os on a stripe
 * unit (the gates: a write after everything submitted before it on its
 * unit, a read after the writes, so that partial writes of one unit never
 * interleave their read-modify-writes); a request's failure, its end and
 * its callback; and the synchronous wrappers.
 */
#include "config.h"

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "common/fault.h"
#include "common/ticket.h"
#include "kernels/crc32c.h"
#include "tiers/nvme_impl.h"

/* ------------------------------------------------------------ requests */

/* Records the request's first failure, with its detail. */
__attribute__((format(printf, 3, 4)))
void nvme_req_fail(struct nvme_req *r, int err, const char *fmt, ...)
{
	int expect = 0;

	if (!atomic_compare_exchange_strong(&r->result, &expect, err))
		return;
	if (!atomic_flag_test_and_set(&r->detail_set)) {
		va_list ap;

		va_start(ap, fmt);
		vsnprintf(r->detail, sizeof(r->detail), fmt, ap);
		va_end(ap);
	}
}

const char *nvme_op_name(int op)
{
	return op == TIER_IO_WRITE ? "write" : "read";
}

void nvme_req_finish(struct nvme_req *r)
{
	struct tier_nvme *t = r->t;
	int rc = atomic_load(&r->result);

	atomic_fetch_add(&t->requests, 1);
	if (rc)
		atomic_fetch_add(&t->errors, 1);
	/*
	 * The object and the buffers are free before the callback runs: a
	 * waiter woken by it may destroy the object or register buffers.
	 */
	atomic_fetch_sub(&r->obj->busy, 1);
	atomic_fetch_sub(&t->active_reqs, 1);
	r->cb(r->arg, rc, rc ? r->detail : "");
	free(r);
	if (atomic_fetch_sub(&t->inflight_reqs, 1) == 1) {
		pthread_mutex_lock(&t->drain_lock);
		pthread_cond_broadcast(&t->drained);
		pthread_mutex_unlock(&t->drain_lock);
	}
}

static int fixed_index(const struct tier_nvme *t, const void *buf, size_t len)
{
	for (unsigned i = 0; i < t->nfixed; i++) {
		const char *b = t->fixed[i].iov_base;

		if ((const char *)buf >= b &&
		    (const char *)buf + len <= b + t->fixed[i].iov_len)
			return (int)i;
	}
	return -1;
}

/*
 * Builds the sub-I/O for the part [uoff, uoff + ulen) of unit @u that the
 * caller's @buf covers.  Whole units on aligned memory go to the device
 * directly; the rest use a bounce buffer of the whole unit.
 */
static int make_sub(struct tier_nvme *t, struct nvme_req *r, uint64_t u, uint32_t uoff,
		    uint32_t ulen, char *buf, struct subio **out)
{
	struct tier_nvme_obj *o = r->obj;
	unsigned p = (unsigned)((u + o->rot) % t->npaths);
	struct nvme_path *path = &t->paths[p];
	/* Copied on write: a part of a unit is written whole (the unit may
	 * have to move), so it reads the unit first. */
	bool cow = r->op == TIER_IO_WRITE && atomic_load_explicit(&o->cow, memory_order_acquire);
	uint32_t unit_len = (uint32_t)(u == o->nunits - 1 ? o->size - u * t->unit : t->unit);
	uint32_t dev_len = (uint32_t)nvme_round_up(unit_len, path->block);
	bool whole = uoff == 0 && ulen == unit_len;
	bool aligned = ((uintptr_t)buf % path->block) == 0;
	struct subio *s = ts_calloc(1, sizeof(*s));

	if (!s)
		return -ENOMEM;
	s->req = r;
	s->path = path;
	s->unit = u;
	s->unit_len = unit_len;
	s->unit_off = uoff;
	s->user_len = ulen;
	s->user_buf = buf;
	s->op = r->op;
	s->buf_index = -1;
	/* Where the unit lives is decided in its gate (gate_locate); until
	 * then file_off is the offset of the transfer within the unit. */
	s->file_off = 0;
	if (whole && aligned && dev_len == unit_len) {
		s->dev_buf = buf;
		s->dev_len = dev_len;
		s->full_unit = true;
		s->buf_index = fixed_index(t, buf, dev_len);
	} else if (!t->csum && !cow && aligned && uoff % path->block == 0 &&
		   ulen % path->block == 0) {
		/* Without checksums an aligned part of a unit goes direct. */
		s->dev_buf = buf;
		s->dev_len = ulen;
		s->file_off = uoff;
		s->buf_index = fixed_index(t, buf, ulen);
	} else {
		if (posix_memalign((void **)&s->bounce, path->block, dev_len) != 0 ||
		    ts_fault_check(TIER_FAULT_ALLOC)) {
			free(s->bounce);
			free(s);
			return -ENOMEM;
		}
		atomic_fetch_add(&t->bounced, 1);
		s->dev_buf = s->bounce;
		s->dev_len = dev_len;
		s->full_unit = true;
		if (r->op == TIER_IO_WRITE) {
			if (whole) {
				memcpy(s->bounce, buf, ulen);
				memset(s->bounce + ulen, 0, dev_len - ulen);
			} else {
				s->rmw = true;          /* read the unit first */
				s->op = TIER_IO_READ;
			}
		}
	}
	/* A write of the whole unit has its checksum now, on the caller's
	 * thread; it becomes the unit's when the write starts (gate_start). */
	if (s->op == TIER_IO_WRITE && t->csum && s->full_unit)
		s->crc = ts_crc32c(0, s->dev_buf, unit_len);
	*out = s;
	return 0;
}

/* ------------------------------------------------ the order on a unit */

void nvme_gates_init(struct tier_nvme *t)
{
	for (unsigned i = 0; i < NVME_GATES; i++)
		pthread_mutex_init(&t->gate[i].lock, NULL);
	t->gates_ok = true;
}

void nvme_gates_fini(struct tier_nvme *t)
{
	if (!t->gates_ok)
		return;
	for (unsigned i = 0; i < NVME_GATES; i++)
		pthread_mutex_destroy(&t->gate[i].lock);
	t->gates_ok = false;
}

static struct nvme_gate *gate_of(struct tier_nvme *t, const struct subio *s)
{
	uint64_t h = (uint64_t)((uintptr_t)s->req->obj >> 4) * 0x9e3779b97f4a7c15ull ^
		     s->unit * 0xc2b2ae3d27d4eb4full;

	return &t->gate[(h * 0x9e3779b97f4a7c15ull) >> (64 - NVME_GATE_BITS)];
}

static bool same_unit(const struct subio *a, const struct subio *b)
{
	return a->unit == b->unit && a->req->obj == b->req->obj;
}

static bool writes(const struct subio *s)
{
	return s->req->op == TIER_IO_WRITE;
}

/* @s may go to its ring: a full-unit write's checksum becomes the unit's
 * now, when nothing else is in flight on the unit.  Gate locked. */
static void gate_start(struct tier_nvme *t, struct subio *s)
{
	struct tier_nvme_obj *o = s->req->obj;

	s->started = true;
	if (s->op == TIER_IO_WRITE && t->csum && s->full_unit) {
		o->crc[s->unit] = s->crc;
		o->crc_ok[s->unit] = 1;
	}
}

/*
 * Where @s transfers: its unit's place, decided here, in the unit's order
 * (copy on write moves a unit at its first write after a commit, and a
 * read sees where the writes before it put the unit).  A write reading
 * the unit first reads it where it is and writes it where it goes
 * (wr_off).  Gate locked.
 */
static void gate_locate(struct tier_nvme *t, struct subio *s)
{
	struct tier_nvme_obj *o = s->req->obj;
	uint64_t base = s->path->data_off, in_unit = s->file_off;

	if (writes(s)) {
		uint64_t from = nvme_unit_read_off(t, o, s->unit);
		uint64_t to = nvme_unit_write_off(t, o, s->unit);

		s->wr_off = base + to + in_unit;
		s->file_off = base + (s->rmw ? from : to) + in_unit;
	} else {
		s->file_off = base + nvme_unit_read_off(t, o, s->unit) + in_unit;
		s->wr_off = s->file_off;
	}
}

/* Puts @s last in its unit's order; true when it may start at once (it
 * then has), false when it waits for sub-I/Os ahead of it. */
static bool gate_enter(struct tier_nvme *t, struct subio *s)
{
	struct nvme_gate *g = gate_of(t, s);
	bool go = true;

	pthread_mutex_lock(&g->lock);
	gate_locate(t, s);
	for (struct subio *e = g->head; e && go; e = e->gnext)
		if (same_unit(e, s) && (writes(e) || writes(s)))
			go = false;
	s->gnext = NULL;
	if (g->tail)
		g->tail->gnext = s;
	else
		g->head = s;
	g->tail = s;
	if (go)
		gate_start(t, s);
	pthread_mutex_unlock(&g->lock);
	return go;
}

void nvme_gate_leave(struct subio *s)
{
	struct tier_nvme *t = s->req->t;
	struct nvme_gate *g = gate_of(t, s);
	struct subio *prev = NULL, *go = NULL, **go_tail = &go;
	bool ahead = false;

	pthread_mutex_lock(&g->lock);
	for (struct subio *e = g->head; e != s; e = e->gnext)
		prev = e;
	if (prev)
		prev->gnext = s->gnext;
	else
		g->head = s->gnext;
	if (g->tail == s)
		g->tail = prev;
	/* Start the unit's first waiting write, or its reads up to a write. */
	for (struct subio *e = g->head; e; e = e->gnext) {
		if (!same_unit(e, s))
			continue;
		if (!e->started && (!ahead || !writes(e))) {
			gate_start(t, e);
			e->next = NULL;
			*go_tail = e;
			go_tail = &e->next;
		}
		if (writes(e))
			break;
		ahead = true;
	}
	pthread_mutex_unlock(&g->lock);
	while (go) {
		struct subio *n = go->next;

		nvme_hand_over(go->path, go, go);
		go = n;
	}
}

/* Sub-I/Os per path handed over at once: large requests start on the
 * devices while the checksums of their later units are still computed. */
#define BATCH 4

/* The sub-I/Os of a request not yet handed over, per path. */
struct batch {
	struct subio *head[TIERS_MAX_NVME_PATHS], *tail[TIERS_MAX_NVME_PATHS];
	unsigned count[TIERS_MAX_NVME_PATHS];
};

/* Hands over what @b holds for every path. */
static void batch_flush(struct tier_nvme *t, struct batch *b)
{
	for (unsigned i = 0; i < t->npaths; i++) {
		if (b->head[i])
			nvme_hand_over(&t->paths[i], b->head[i], b->tail[i]);
		b->head[i] = b->tail[i] = NULL;
		b->count[i] = 0;
	}
}

/* Adds @s to its path's batch, and hands the batch over when full. */
static void batch_add(struct tier_nvme *t, struct batch *b, struct subio *s)
{
	unsigned p = (unsigned)(s->path - t->paths);

	if (b->tail[p])
		b->tail[p]->next = s;
	else
		b->head[p] = s;
	b->tail[p] = s;
	if (++b->count[p] == BATCH) {
		nvme_hand_over(&t->paths[p], b->head[p], b->tail[p]);
		b->head[p] = b->tail[p] = NULL;
		b->count[p] = 0;
	}
}

int tier_nvme_submit(struct tier_nvme *t, struct tier_nvme_obj *o, enum tier_io_op op,
		     uint64_t off, uint64_t len, void *buf, tier_io_cb cb, void *arg)
{
	NVME_ARG(t);
	TS_NONNULL(o);
	TS_NONNULL(buf);
	TS_NONNULL(cb);
	struct batch batch = { 0 };
	struct nvme_req *r;
	uint64_t first, last;
	int rc;

	if (op != TIER_IO_READ && op != TIER_IO_WRITE)
		return ts_err(-EINVAL, "nvme: bad operation %d", (int)op);
	if (len == 0 || off > o->size || len > o->size - off)
		return ts_err(-EINVAL, "nvme: %s of '%s' at %" PRIu64 " for %" PRIu64
				" bytes is outside the object (%" PRIu64 " bytes)",
				nvme_op_name(op), o->name, off, len, o->size);
	if (atomic_load(&t->closing))
		return ts_err(-ESHUTDOWN, "nvme: the tier is closing");
	r = ts_calloc(1, sizeof(*r));
	if (!r)
		return ts_err(-ENOMEM, "nvme: out of memory");
	r->t = t;
	r->obj = o;
	r->op = op;
	r->cb = cb;
	r->arg = arg;
	atomic_flag_clear(&r->detail_set);

	first = off / t->unit;
	last = (off + len - 1) / t->unit;
	/* Every unit counts from the start, so no early completion can finish
	 * the request while later units are still being handed over. */
	atomic_store(&r->pending, (int)(last - first + 1));
	atomic_fetch_add(&o->busy, 1);
	atomic_fetch_add(&t->inflight_reqs, 1);
	atomic_fetch_add(&t->active_reqs, 1);
	/* A commit raises committing, then checks active_reqs: one of the
	 * two sees the other, so no commit runs while this request is
	 * built (and where its units go is decided). */
	rc = atomic_load(&t->committing)
		     ? ts_err(-EBUSY, "nvme: %s of '%s' while the tier commits", nvme_op_name(op), o->name)
		     : 0;
	/* A committed object's first write after the commit gets its new
	 * extents now (copy on write). */
	if (!rc && op == TIER_IO_WRITE)
		rc = nvme_cow_begin(t, o);
	if (rc) {
		atomic_fetch_sub(&o->busy, 1);
		atomic_fetch_sub(&t->active_reqs, 1);
		if (atomic_fetch_sub(&t->inflight_reqs, 1) == 1) {
			pthread_mutex_lock(&t->drain_lock);
			pthread_cond_broadcast(&t->drained);
			pthread_mutex_unlock(&t->drain_lock);
		}
		free(r);
		return rc;
	}
	if (op == TIER_IO_WRITE)
		atomic_store_explicit(&o->written, true, memory_order_relaxed);
	for (uint64_t u = first; u <= last; u++) {
		uint64_t ustart = u * t->unit;
		uint64_t a = off > ustart ? off : ustart;
		uint64_t b = off + len < ustart + t->unit ? off + len : ustart + t->unit;
		struct subio *s;

		rc = make_sub(t, r, u, (uint32_t)(a - ustart), (uint32_t)(b - a),
			      (char *)buf + (a - off), &s);
		if (rc) {
			/*
			 * Units already handed over complete on their own; the
			 * request fails, and the units never built are counted
			 * off here (the last one out runs the callback).
			 */
			int left = (int)(last - u + 1);

			nvme_req_fail(r, rc, "nvme: %s of '%s' at %" PRIu64 ": out of memory",
				      nvme_op_name(op), o->name, a);
			batch_flush(t, &batch);
			if (atomic_fetch_sub(&r->pending, left) == left)
				nvme_req_finish(r);
			return 0;
		}
		/* One that waits is handed over when those ahead of it are done. */
		if (gate_enter(t, s))
			batch_add(t, &batch, s);
	}
	batch_flush(t, &batch);
	return 0;
}

int tier_nvme_submit_ticket(struct tier_nvme *t, struct tier_nvme_obj *o, enum tier_io_op op,
			    uint64_t off, uint64_t len, void *buf, struct tier_ticket **out)
{
	NVME_ARG(t);
	TS_NONNULL(o);
	TS_NONNULL(buf);
	TS_NONNULL(out);
	struct tier_ticket *tk = ticket_new();
	int rc;

	*out = NULL;
	if (!tk)
		return ts_err(-ENOMEM, "nvme: out of memory");
	rc = tier_nvme_submit(t, o, op, off, len, buf, ticket_io_cb, tk);
	if (rc) {
		ticket_discard(tk);
		return rc;
	}
	*out = tk;
	return 0;
}

int tier_nvme_read(struct tier_nvme *t, struct tier_nvme_obj *o, uint64_t off, uint64_t len,
		   void *buf)
{
	NVME_ARG(t);
	TS_NONNULL(o);
	TS_NONNULL(buf);
	struct tier_ticket *tk;
	int rc = tier_nvme_submit_ticket(t, o, TIER_IO_READ, off, len, buf, &tk);

	return rc ? rc : tier_ticket_wait(tk);
}

int tier_nvme_write(struct tier_nvme *t, struct tier_nvme_obj *o, uint64_t off, uint64_t len,
		    const void *buf)
{
	NVME_ARG(t);
	TS_NONNULL(o);
	TS_NONNULL(buf);
	struct tier_ticket *tk;
	int rc = tier_nvme_submit_ticket(t, o, TIER_IO_WRITE, off, len, (void *)buf, &tk);

	return rc ? rc : tier_ticket_wait(tk);
}
