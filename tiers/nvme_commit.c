/*
 * nvme_commit.c - the NVMe tier's durable state (docs/nvme-format.md,
 * "Commits"): copy on write of committed extents, the extents held for
 * kept commits, the object table and the commit slots, and the commit
 * (tier_nvme_commit).  Loading the last commit when the files are opened
 * again is tiers/nvme_recover.c's.
 *
 * A commit writes a table naming every object (name, size, extents, a
 * crc32c per stripe unit) and a caller's record into a fresh extent of
 * path 0, makes the data and the table durable (fdatasync on every file),
 * then writes one of path 0's two commit slots (the ring of kept commits)
 * and makes it durable.  A crash at any instant leaves the older slot or
 * the newer one valid, and each names a table whose extents nothing has
 * written since: every extent a kept commit names is frozen, so a write
 * after a commit goes to a new extent (copy on write, per stripe unit),
 * and the old one is freed only when the commit that names it last has
 * fallen out of the ring, after the slot that drops it is durable.
 *
 * Locking: t->lock for the objects, the allocators and the commit state.
 * A commit runs with no request in flight and refuses submissions while
 * it runs (t->committing), so its synchronous I/O on the files races with
 * nothing.  Unit locations under copy on write change under the unit's
 * gate lock (nvme_req.c).
 */
#include "config.h"

#include <errno.h>
#include <inttypes.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/error.h"
#include "common/fault.h"
#include "common/log.h"
#include "common/units.h"
#include "kernels/crc32c.h"
#include "tiers/extent.h"
#include "tiers/nvme_format.h"
#include "tiers/nvme_impl.h"

/* ------------------------------------------------- where a unit lives */

uint64_t nvme_unit_slot(const struct tier_nvme *t, const struct tier_nvme_obj *o, uint64_t u,
			const uint64_t *base)
{
	unsigned p = (unsigned)((u + o->rot) % t->npaths);

	return base[p] + (u / t->npaths) * t->unit;
}

uint64_t nvme_unit_read_off(const struct tier_nvme *t, struct tier_nvme_obj *o, uint64_t u)
{
	if (atomic_load_explicit(&o->cow, memory_order_acquire) &&
	    atomic_load_explicit(&o->moved[u], memory_order_relaxed))
		return nvme_unit_slot(t, o, u, o->new_off);
	return nvme_unit_slot(t, o, u, o->ext_off);
}

uint64_t nvme_unit_write_off(const struct tier_nvme *t, struct tier_nvme_obj *o, uint64_t u)
{
	if (!atomic_load_explicit(&o->cow, memory_order_acquire))
		return nvme_unit_slot(t, o, u, o->ext_off);
	atomic_store_explicit(&o->moved[u], 1, memory_order_relaxed);
	return nvme_unit_slot(t, o, u, o->new_off);
}

/* ------------------------------------------------------ held extents */

int nvme_held_add(struct tier_nvme *t, uint32_t path, uint64_t off, uint64_t len, uint64_t last_gen)
{
	if (t->nheld == t->held_cap) {
		size_t cap = t->held_cap ? t->held_cap * 2 : 64;
		struct nvme_held *h = ts_realloc(t->held, cap * sizeof(*h));

		if (!h)
			return -ENOMEM;
		t->held = h;
		t->held_cap = cap;
	}
	t->held[t->nheld++] = (struct nvme_held){ path, off, len, last_gen };
	return 0;
}

/* Frees the held extents no kept commit names any more: those last named
 * by a generation below @oldest.  t->lock held. */
static void held_release(struct tier_nvme *t, uint64_t oldest)
{
	size_t k = 0;

	for (size_t i = 0; i < t->nheld; i++) {
		struct nvme_held *h = &t->held[i];

		if (h->last_gen < oldest)
			extents_free(&t->paths[h->path].alloc, h->off, h->len);
		else
			t->held[k++] = *h;
	}
	t->nheld = k;
}

void nvme_obj_release_extents(struct tier_nvme *t, struct tier_nvme_obj *o)
{
	for (unsigned p = 0; p < t->npaths; p++) {
		if (!o->ext_len[p])
			continue;
		if (atomic_load(&o->cow))
			extents_free(&t->paths[p].alloc, o->new_off[p], o->ext_len[p]);
		if (!o->frozen)
			extents_free(&t->paths[p].alloc, o->ext_off[p], o->ext_len[p]);
		else if (nvme_held_add(t, p, o->ext_off[p], o->ext_len[p], t->gen) != 0)
			/* Named by a kept commit and no memory to hold it: it
			 * stays allocated until the next open rebuilds the
			 * allocators from the table. */
			TIER_WARN(TIER_SS_NVME, "nvme%u: out of memory: an extent of '%s' stays allocated until the store is reopened",
				  p, o->name);
	}
}

/*
 * After a commit's slot was written (durable, or maybe): each object
 * copied on write leaves its old extents, held for the kept commits that
 * name them (last named by generation t->gen), and every object is frozen
 * where the new table names it.
 */
static void freeze_objects(struct tier_nvme *t)
{
	for (struct tier_nvme_obj *o = t->objs; o; o = o->next) {
		if (atomic_load(&o->cow)) {
			for (unsigned p = 0; p < t->npaths; p++) {
				if (!o->ext_len[p])
					continue;
				if (!o->frozen)
					extents_free(&t->paths[p].alloc, o->ext_off[p], o->ext_len[p]);
				else if (nvme_held_add(t, p, o->ext_off[p], o->ext_len[p], t->gen) != 0)
					TIER_WARN(TIER_SS_NVME, "nvme%u: out of memory: an old extent of '%s' stays allocated until the store is reopened",
						  p, o->name);
			}
			memcpy(o->ext_off, o->new_off, sizeof(o->ext_off));
			atomic_store(&o->cow, false);
			free((void *)o->moved);
			o->moved = NULL;
		}
		o->frozen = true;
	}
}

/* ------------------------------------------------------ copy on write */

int nvme_cow_begin(struct tier_nvme *t, struct tier_nvme_obj *o)
{
	uint64_t off[TIERS_MAX_NVME_PATHS] = { 0 };
	_Atomic unsigned char *moved;
	unsigned done = 0;
	int rc = 0;

	/*
	 * No tier lock on the common path: frozen changes only in a commit,
	 * which runs with no request in flight, and the caller has counted
	 * its request in (tier_nvme_submit), so none can run now.
	 */
	if (!o->frozen || atomic_load_explicit(&o->cow, memory_order_acquire))
		return 0;
	pthread_mutex_lock(&t->lock);
	if (!o->frozen || atomic_load(&o->cow))
		goto out;
	moved = ts_calloc(o->nunits, sizeof(*moved));
	if (!moved) {
		rc = ts_err(-ENOMEM, "nvme: out of memory copying '%s' on write", o->name);
		goto out;
	}
	for (; done < t->npaths; done++) {
		unsigned p = done;

		if (!o->ext_len[p])
			continue;
		rc = extents_alloc(&t->paths[p].alloc, o->ext_len[p], &off[p]);
		if (rc) {
			char a[32], b[32];

			rc = ts_err(-ENOSPC, "nvme%u (%s): no room to write '%s' after a commit: it needs a new %s on this path (its committed extent is kept for the commit), %s free",
				    p, t->paths[p].file, o->name, ts_size_fmt(o->ext_len[p], a, sizeof(a)),
				    ts_size_fmt(t->paths[p].alloc.avail, b, sizeof(b)));
			break;
		}
		rc = nvme_file_grow(&t->paths[p], off[p] + o->ext_len[p], o->name);
		if (rc) {
			extents_free(&t->paths[p].alloc, off[p], o->ext_len[p]);
			break;
		}
	}
	if (rc) {
		for (unsigned p = 0; p < done; p++)
			if (o->ext_len[p])
				extents_free(&t->paths[p].alloc, off[p], o->ext_len[p]);
		free((void *)moved);
		goto out;
	}
	memcpy(o->new_off, off, sizeof(o->new_off));
	o->moved = moved;
	atomic_store_explicit(&o->cow, true, memory_order_release);
out:
	pthread_mutex_unlock(&t->lock);
	return rc;
}

/* --------------------------------------------------- synchronous I/O */

/* Reads or writes [off, off + len) of path @p's file (file offsets),
 * whole, through @site. */
int nvme_sync_io(struct nvme_path *p, bool wr, void *buf, size_t len, uint64_t off,
		 enum ts_fault_site site, const char *what)
{
	int rc = ts_fault_check(site);
	size_t done = 0;

	if (rc)
		return ts_err(rc, "nvme%d (%s): %s at file offset %" PRIu64 ": %s", p->index,
			      p->file, what, off, tier_strerror(rc));
	while (done < len) {
		ssize_t n = wr ? pwrite(p->fd, (char *)buf + done, len - done, (off_t)(off + done))
			       : pread(p->fd, (char *)buf + done, len - done, (off_t)(off + done));

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return ts_err(-errno, "nvme%d (%s): %s at file offset %" PRIu64 ": %s",
				      p->index, p->file, what, off + done, tier_strerror(errno));
		if (n == 0)
			return ts_err(-ENODATA, "nvme%d (%s): %s at file offset %" PRIu64
				      ": the file ends there (%zu of %zu bytes)",
				      p->index, p->file, what, off + done, done, len);
		done += (size_t)n;
	}
	return 0;
}

static int file_sync(struct nvme_path *p, enum ts_fault_site site, const char *what)
{
	int rc = ts_fault_check(site);

	if (!rc && fdatasync(p->fd) != 0)
		rc = -errno;
	if (rc)
		return ts_err(rc, "nvme%d (%s): fdatasync of %s: %s", p->index, p->file, what,
			      tier_strerror(rc));
	return 0;
}

void *nvme_aligned_zero(size_t len)
{
	void *b = NULL;

	if (posix_memalign(&b, 4096, len ? len : 4096) != 0 || ts_fault_check(TIER_FAULT_ALLOC)) {
		free(b);
		return NULL;
	}
	memset(b, 0, len);
	return b;
}

/*
 * Copies the units of a copied-on-write object that were not written
 * since the commit from the old extents to the new ones, so the new
 * extents hold the whole object.  No request in flight.
 */
static int cow_fill(struct tier_nvme *t, struct tier_nvme_obj *o, char *buf)
{
	for (uint64_t u = 0; u < o->nunits; u++) {
		unsigned p = (unsigned)((u + o->rot) % t->npaths);
		struct nvme_path *path = &t->paths[p];
		uint32_t len = (uint32_t)(u == o->nunits - 1 ? o->size - u * t->unit : t->unit);
		uint32_t dev = (uint32_t)nvme_round_up(len, path->block);
		int rc;

		if (atomic_load(&o->moved[u]))
			continue;
		rc = nvme_sync_io(path, false, buf, dev,
			     path->data_off + nvme_unit_slot(t, o, u, o->ext_off), TIER_FAULT_COMMIT_COPY,
			     "a commit reading a unit to copy");
		if (!rc)
			rc = nvme_sync_io(path, true, buf, dev,
				     path->data_off + nvme_unit_slot(t, o, u, o->new_off),
				     TIER_FAULT_COMMIT_COPY, "a commit copying a unit");
		if (rc) {
			char saved[TIER_ERR_MAX];

			snprintf(saved, sizeof(saved), "%s", tier_last_error());
			return ts_err(rc, "%s (object '%s', stripe unit %" PRIu64 ")", saved, o->name, u);
		}
	}
	return 0;
}

/* --------------------------------------------------------- the table */

static size_t obj_entry_bytes(const struct tier_nvme *t, const struct tier_nvme_obj *o)
{
	size_t b = sizeof(struct ts_nvme_table_obj) + 16u * t->npaths + strlen(o->name) +
		   (o->nunits + 7) / 8 + (t->csum ? 4 * o->nunits : 0);

	return (b + 7) & ~(size_t)7;
}

static size_t table_bytes(const struct tier_nvme *t, size_t nheld, size_t meta_len)
{
	size_t b = sizeof(struct ts_nvme_table);

	for (const struct tier_nvme_obj *o = t->objs; o; o = o->next)
		b += obj_entry_bytes(t, o);
	b += nheld * sizeof(struct ts_nvme_table_held);
	return b + meta_len;
}

/* The oldest generation the ring keeps once commit @gen is added to it. */
static uint64_t ring_oldest_with(const struct tier_nvme *t, uint64_t gen)
{
	uint32_t older = t->slot->ncommits;

	if (older > t->keep - 1)
		older = t->keep - 1;
	return older ? t->slot->c[older - 1].gen : gen;
}

/*
 * The extents the table of a new commit lists as held: every extent that
 * a commit its ring keeps (generation @oldest or newer) names and its own
 * objects do not.  Those are the extents held already that a kept commit
 * still names, and the committed extents of the objects copied on write
 * since the last commit (generation t->gen), which the commit leaves.  A
 * later open takes exactly these, so no write after it can reuse an
 * extent an older kept commit needs.  t->lock held.
 */
static int table_held(const struct tier_nvme *t, uint64_t oldest, struct ts_nvme_table_held **out,
		      size_t *n)
{
	size_t cap = t->nheld, k = 0;
	struct ts_nvme_table_held *h;

	for (const struct tier_nvme_obj *o = t->objs; o; o = o->next)
		if (o->frozen && atomic_load(&o->cow))
			cap += t->npaths;
	*out = NULL;
	*n = 0;
	if (!cap)
		return 0;
	h = ts_calloc(cap, sizeof(*h));
	if (!h)
		return -ENOMEM;
	for (size_t i = 0; i < t->nheld; i++)
		if (t->held[i].last_gen >= oldest)
			h[k++] = (struct ts_nvme_table_held){ t->held[i].path, 0, t->held[i].off,
							      t->held[i].len, t->held[i].last_gen };
	if (t->gen >= oldest)
		for (const struct tier_nvme_obj *o = t->objs; o; o = o->next) {
			if (!o->frozen || !atomic_load(&o->cow))
				continue;
			for (unsigned p = 0; p < t->npaths; p++)
				if (o->ext_len[p])
					h[k++] = (struct ts_nvme_table_held){ p, 0, o->ext_off[p],
									      o->ext_len[p], t->gen };
		}
	*out = h;
	*n = k;
	return 0;
}

/*
 * Serializes the table of generation @gen into @buf (zeroed, large enough):
 * the objects with their extents as the commit leaves them (new_off for
 * those copied on write), the @nheld extents held for older commits
 * (table_held), @meta.
 */
static void table_fill(struct tier_nvme *t, char *buf, uint64_t gen, uint64_t now,
		       const struct ts_nvme_table_held *held, size_t nheld, const void *meta,
		       size_t meta_len)
{
	struct ts_nvme_table *h = (void *)buf;
	char *q = buf + sizeof(*h);
	uint64_t n = 0;

	memcpy(h->magic, TIER_NVME_TABLE_MAGIC, 8);
	h->version = TIER_NVME_FORMAT_VERSION;
	h->header_size = sizeof(*h);
	memcpy(h->store_uuid, t->uuid, 16);
	h->gen = gen;
	h->time_ns = now;
	h->npaths = t->npaths;
	h->stripe_unit = t->unit;
	h->checksum = t->csum ? 1 : 0;
	h->nheld = nheld;
	h->meta_len = meta_len;
	h->next_rot = t->next_rot;
	for (const struct tier_nvme_obj *o = t->objs; o; o = o->next, n++) {
		struct ts_nvme_table_obj e = { 0 };
		const uint64_t *off = atomic_load(&o->cow) ? o->new_off : o->ext_off;
		size_t nl = strlen(o->name);
		char *start = q;

		e.size = o->size;
		e.rot = o->rot;
		e.name_len = (uint16_t)nl;
		e.flags = atomic_load(&o->written) ? TIER_NVME_OBJ_WRITTEN : 0;
		memcpy(q, &e, sizeof(e));
		q += sizeof(e);
		memcpy(q, off, 8u * t->npaths);
		q += 8u * t->npaths;
		memcpy(q, o->ext_len, 8u * t->npaths);
		q += 8u * t->npaths;
		memcpy(q, o->name, nl);
		q += nl;
		for (uint64_t u = 0; u < o->nunits; u++)
			if (o->crc_ok[u])
				q[u / 8] |= (char)(1u << (u % 8));
		q += (o->nunits + 7) / 8;
		if (t->csum) {
			memcpy(q, o->crc, 4 * o->nunits);
			q += 4 * o->nunits;
		}
		q = start + obj_entry_bytes(t, o);
	}
	h->nobjs = n;
	if (nheld) {
		memcpy(q, held, nheld * sizeof(*held));
		q += nheld * sizeof(*held);
	}
	if (meta_len)
		memcpy(q, meta, meta_len);
}

int nvme_table_walk(const void *buf, size_t len, const char *who,
		    int (*fn)(void *arg, const struct nvme_tobj *o), void *arg,
		    const struct ts_nvme_table **hdr, const struct ts_nvme_table_held **held,
		    const void **meta)
{
	const struct ts_nvme_table *h = buf;
	const char *q = (const char *)buf + sizeof(*h), *end = (const char *)buf + len;

	if (len < sizeof(*h) || memcmp(h->magic, TIER_NVME_TABLE_MAGIC, 8) != 0 ||
	    h->header_size != sizeof(*h))
		return ts_err(-EBADMSG, "%s: not an object table", who);
	if (h->version != TIER_NVME_FORMAT_VERSION)
		return ts_err(-EPROTO, "%s: an object table of format version %u", who, h->version);
	if (h->npaths == 0 || h->npaths > TIERS_MAX_NVME_PATHS || h->stripe_unit == 0)
		return ts_err(-EBADMSG, "%s: the table's geometry (%u paths, stripe unit %u) is not possible",
			      who, h->npaths, h->stripe_unit);
	for (uint64_t i = 0; i < h->nobjs; i++) {
		struct nvme_tobj o = { 0 };
		struct ts_nvme_table_obj e;
		size_t need;
		int rc;

		if ((size_t)(end - q) < sizeof(e))
			return ts_err(-EBADMSG, "%s: the table ends inside object %" PRIu64, who, i);
		memcpy(&e, q, sizeof(e));
		o.size = e.size;
		o.rot = e.rot;
		o.flags = e.flags;
		o.nunits = e.size / h->stripe_unit + (e.size % h->stripe_unit != 0);
		if (e.size == 0 || e.name_len == 0 || e.rot >= h->npaths || o.nunits > (1ull << 40))
			return ts_err(-EBADMSG, "%s: object %" PRIu64 " of the table is not possible (size %" PRIu64
				      ", name of %u bytes)", who, i, e.size, e.name_len);
		need = sizeof(e) + 16u * h->npaths + e.name_len + (o.nunits + 7) / 8 +
		       (h->checksum ? 4 * o.nunits : 0);
		need = (need + 7) & ~(size_t)7;
		if ((size_t)(end - q) < need)
			return ts_err(-EBADMSG, "%s: the table ends inside object %" PRIu64, who, i);
		o.ext_off = (const uint64_t *)(const void *)(q + sizeof(e));
		o.ext_len = o.ext_off + h->npaths;
		o.name = q + sizeof(e) + 16u * h->npaths;
		o.name_len = e.name_len;
		o.ok = (const unsigned char *)o.name + e.name_len;
		o.crc = h->checksum ? (const char *)o.ok + (o.nunits + 7) / 8 : NULL;
		if (memchr(o.name, '\0', o.name_len))
			return ts_err(-EBADMSG, "%s: object %" PRIu64 " of the table has a NUL in its name", who, i);
		rc = fn ? fn(arg, &o) : 0;
		if (rc)
			return rc;
		q += need;
	}
	if ((uint64_t)(end - q) / sizeof(struct ts_nvme_table_held) < h->nheld ||
	    (uint64_t)(end - q) - h->nheld * sizeof(struct ts_nvme_table_held) != h->meta_len)
		return ts_err(-EBADMSG, "%s: the table's length does not match what it holds", who);
	if (hdr)
		*hdr = h;
	if (held)
		*held = (const struct ts_nvme_table_held *)(const void *)q;
	if (meta)
		*meta = q + h->nheld * sizeof(struct ts_nvme_table_held);
	return 0;
}

/* ------------------------------------------------------------ slots */

void nvme_slot_seal(struct ts_nvme_slot *s)
{
	s->slot_crc = ts_crc32c(0, s, offsetof(struct ts_nvme_slot, slot_crc));
}

/* 0 for a valid slot, -ENOENT for one never written (all zero), -EBADMSG. */
int nvme_slot_check(const struct ts_nvme_slot *s)
{
	static const char zero[sizeof(*s)];

	if (memcmp(s, zero, sizeof(*s)) == 0)
		return -ENOENT;
	if (memcmp(s->magic, TIER_NVME_SLOT_MAGIC, 8) != 0 || s->slot_size != sizeof(*s) ||
	    s->version != TIER_NVME_FORMAT_VERSION || s->ncommits > TIER_NVME_MAX_KEEP ||
	    ts_crc32c(0, s, offsetof(struct ts_nvme_slot, slot_crc)) != s->slot_crc)
		return -EBADMSG;
	return 0;
}

/* Writes @s (sealed here) as slot write number s->seq, durably. */
int nvme_slot_write(struct tier_nvme *t, struct ts_nvme_slot *s)
{
	struct nvme_path *p0 = &t->paths[0];
	int rc;

	nvme_slot_seal(s);
	rc = nvme_sync_io(p0, true, s, sizeof(*s), TIER_NVME_SLOT_OFF(s->seq % 2), TIER_FAULT_COMMIT_SLOT,
		     "writing a commit slot");
	return rc ? rc : file_sync(p0, TIER_FAULT_COMMIT_SLOT_SYNC, "a commit slot");
}

/* ------------------------------------------------------------ commit */

void nvme_gen_time(uint64_t ns, char *buf, size_t n)
{
	time_t s = (time_t)(ns / 1000000000u);
	struct tm tm;

	strftime(buf, n, "%Y-%m-%d %H:%M:%S", localtime_r(&s, &tm));
}

/* One commit, between its steps; t->lock held. */
struct commit {
	struct tier_nvme *t;
	const void *meta;         /* the caller's record */
	size_t meta_len;
	uint64_t gen, now;        /* its generation, its time */
	struct ts_nvme_table_held *held;  /* the extents its table lists as held */
	size_t nheld;
	char *buf;                /* the table, tdev bytes */
	void *meta_copy;          /* the record, kept once the commit is durable */
	uint64_t toff, tlen, tdev;  /* the table's extent of path 0, its length, rounded up */
	bool table_placed;        /* toff is allocated, and freed again if the commit fails */
	struct ts_nvme_slot *s;   /* the slot it writes */
	uint64_t data;            /* object bytes */
	unsigned nobjs;
};

/* 1. Every object whole in the extents the table will name: each one
 * copied on write gets the units not written since the last commit. */
static int commit_cow_fill(struct tier_nvme *t)
{
	char *copy = NULL;
	int rc = 0;

	for (struct tier_nvme_obj *o = t->objs; o; o = o->next) {
		if (!atomic_load(&o->cow))
			continue;
		if (!copy) {
			copy = nvme_aligned_zero(nvme_round_up(t->unit, t->block));
			if (!copy)
				return ts_err(-ENOMEM, "nvme: out of memory for a commit");
		}
		rc = cow_fill(t, o, copy);
		if (rc)
			break;
	}
	free(copy);
	return rc;
}

/* 2. The table (and the record with it), in a fresh extent of path 0. */
static int commit_table(struct commit *c)
{
	struct tier_nvme *t = c->t;
	struct nvme_path *p0 = &t->paths[0];
	int rc;

	if (table_held(t, ring_oldest_with(t, c->gen), &c->held, &c->nheld) != 0)
		return ts_err(-ENOMEM, "nvme: out of memory for a commit's table");
	c->tlen = table_bytes(t, c->nheld, c->meta_len);
	c->tdev = nvme_round_up(c->tlen, p0->block);
	c->buf = nvme_aligned_zero(c->tdev);
	c->meta_copy = c->meta_len ? malloc(c->meta_len) : NULL;
	c->s = nvme_aligned_zero(sizeof(*c->s));
	if (!c->buf || !c->s || (c->meta_len && !c->meta_copy))
		return ts_err(-ENOMEM, "nvme: out of memory for a commit's table (%" PRIu64 " bytes)",
			      c->tlen);
	if (c->meta_len)
		memcpy(c->meta_copy, c->meta, c->meta_len);
	if (extents_alloc(&p0->alloc, c->tdev, &c->toff) != 0) {
		char a[32];

		return ts_err(-ENOSPC, "nvme0 (%s): no room for a commit's object table (%s)", p0->file,
			      ts_size_fmt(c->tdev, a, sizeof(a)));
	}
	c->table_placed = true;
	rc = nvme_file_grow(p0, c->toff + c->tdev, "the object table");
	if (rc)
		return rc;
	table_fill(t, c->buf, c->gen, c->now, c->held, c->nheld, c->meta, c->meta_len);
	return nvme_sync_io(p0, true, c->buf, c->tdev, p0->data_off + c->toff, TIER_FAULT_COMMIT_TABLE,
			    "writing the object table");
}

/* 3. Data and table durable, on every file, before a slot names them. */
static int commit_sync(struct tier_nvme *t)
{
	for (unsigned i = 0; i < t->npaths; i++) {
		int rc = file_sync(&t->paths[i], TIER_FAULT_COMMIT_SYNC, "the data and the object table");

		if (rc)
			return rc;
	}
	return 0;
}

/*
 * 4. The slot: this commit first, then the kept ones before it; written
 * and made durable.  Written or maybe written (a failed write or sync may
 * still have reached the disk), the table and the extents it names are
 * frozen from here, so whichever slot a later open finds names extents
 * nothing overwrites.  Only a durable slot frees anything (commit_done).
 */
static int commit_slot(struct commit *c)
{
	struct tier_nvme *t = c->t;
	struct ts_nvme_slot *s = c->s;
	int rc;

	for (struct tier_nvme_obj *o = t->objs; o; o = o->next, c->nobjs++)
		c->data += o->size;
	memcpy(s, t->slot, sizeof(*s));
	memcpy(s->magic, TIER_NVME_SLOT_MAGIC, 8);
	s->version = TIER_NVME_FORMAT_VERSION;
	s->slot_size = sizeof(*s);
	memcpy(s->store_uuid, t->uuid, 16);
	s->seq = t->seq + 1;
	s->next_gen = c->gen + 1;
	s->keep = t->keep;
	memmove(&s->c[1], &s->c[0], sizeof(s->c[0]) * (TIER_NVME_MAX_KEEP - 1));
	s->c[0] = (struct ts_nvme_commit){ .gen = c->gen, .time_ns = c->now, .table_off = c->toff,
					   .table_len = c->tlen, .data_bytes = c->data,
					   .table_crc = ts_crc32c(0, c->buf, c->tlen), .nobjs = c->nobjs,
					   .meta_len = c->meta_len };
	s->ncommits = s->ncommits + 1 < t->keep ? s->ncommits + 1 : t->keep;
	memset(&s->c[s->ncommits], 0, sizeof(s->c[0]) * (TIER_NVME_MAX_KEEP - s->ncommits));
	rc = nvme_slot_write(t, s);
	freeze_objects(t);
	if (nvme_held_add(t, 0, c->toff, c->tdev, c->gen) == 0)
		c->table_placed = false;
	t->next_gen = c->gen + 1;
	return rc;
}

/* Copy on write needs room: the kept commits' extents and the writes
 * after the last one, up to keep + 1 copies of the objects.  Said once,
 * at the first commit that would not fit. */
static void commit_space_warn(struct tier_nvme *t, uint64_t data)
{
	uint64_t total = 0, need = data * (uint64_t)(t->keep + 1);

	for (unsigned i = 0; i < t->npaths; i++)
		total += t->paths[i].alloc.total;
	if (need > total && !t->space_warned) {
		char a[32], b[32], c[32];

		t->space_warned = true;
		TIER_WARN(TIER_SS_NVME, "nvme: keeping %u commit(s) of %s of objects, with the writes after the last, takes up to %s (%u copies), and the paths hold %s: a write after a commit may fail with ENOSPC; give the paths more capacity or lower nvme.keep_commits",
			  t->keep, ts_size_fmt(data, a, sizeof(a)), ts_size_fmt(need, b, sizeof(b)),
			  t->keep + 1, ts_size_fmt(total, c, sizeof(c)));
	}
}

/* 5. The slot is durable: the tier takes the new ring, frees what only
 * the commits that left it named, and keeps the record. */
static void commit_done(struct commit *c)
{
	struct tier_nvme *t = c->t;
	char when[32];

	t->seq = c->s->seq;
	held_release(t, c->s->c[c->s->ncommits - 1].gen);
	memcpy(t->slot, c->s, sizeof(*c->s));
	t->gen = c->gen;
	t->next_gen = c->gen + 1;
	free(t->meta);
	t->meta = c->meta_copy;
	t->meta_len = c->meta_len;
	c->meta_copy = NULL;
	commit_space_warn(t, c->data);
	nvme_gen_time(c->now, when, sizeof(when));
	TIER_DEBUG_LOG(TIER_SS_NVME, "commit: generation %" PRIu64 " at %s, %u objects, table %" PRIu64
		   " bytes", c->gen, when, c->nobjs, c->tlen);
}

int tier_nvme_commit(struct tier_nvme *t, const void *meta, size_t meta_len, uint64_t *gen_out)
{
	NVME_ARG(t);
	struct commit c = { .t = t, .meta = meta, .meta_len = meta_len };
	int rc;

	if (gen_out)
		*gen_out = 0;
	if (meta_len && !meta)
		return ts_err_null(__func__, "record");
	if (meta_len > (1u << 30))
		return ts_err(-EINVAL, "nvme: a commit's record of %zu bytes (at most 1 GiB)", meta_len);
	pthread_mutex_lock(&t->lock);
	atomic_store(&t->committing, true);
	if (atomic_load(&t->active_reqs) > 0) {
		rc = ts_err(-EBUSY, "nvme: a commit needs every request done (%ld in flight)",
			    atomic_load(&t->active_reqs));
		goto out;
	}
	c.gen = t->next_gen;
	c.now = ts_wall_ns();
	rc = commit_cow_fill(t);
	if (!rc)
		rc = commit_table(&c);
	if (!rc)
		rc = commit_sync(t);
	if (!rc)
		rc = commit_slot(&c);
	/*
	 * A failed slot keeps t->seq: the next commit writes the same slot
	 * again, with a seq above the last good one, and never the slot that
	 * holds the last good ring; so a torn retry still leaves that one.
	 */
	if (rc)
		goto out;
	commit_done(&c);
	if (gen_out)
		*gen_out = c.gen;
out:
	if (c.table_placed)
		extents_free(&t->paths[0].alloc, c.toff, c.tdev);
	atomic_store(&t->committing, false);
	pthread_mutex_unlock(&t->lock);
	free(c.buf);
	free(c.held);
	free(c.s);
	free(c.meta_copy);
	return rc;
}

int tier_nvme_committed(const struct tier_nvme *t, struct tier_commit_info *out)
{
	NVME_ARG(t);
	TS_NONNULL(out);
	struct tier_nvme *m = (struct tier_nvme *)t;

	memset(out, 0, sizeof(*out));
	pthread_mutex_lock(&m->lock);
	out->keep = t->keep;
	out->kept = t->slot ? t->slot->ncommits : 0;
	if (t->gen && t->slot && t->slot->ncommits) {
		const struct ts_nvme_commit *c = &t->slot->c[0];

		out->generation = c->gen;
		out->time_ns = c->time_ns;
		out->table_bytes = c->table_len;
		out->objects = c->nobjs;
		out->data_bytes = c->data_bytes;
		out->oldest = t->slot->c[t->slot->ncommits - 1].gen;
	}
	pthread_mutex_unlock(&m->lock);
	return 0;
}

int tier_nvme_record(const struct tier_nvme *t, const void **record, size_t *len)
{
	NVME_ARG(t);
	TS_NONNULL(record);
	TS_NONNULL(len);
	*record = t->meta;
	*len = t->meta_len;
	return t->gen ? 0 : -ENOENT;
}


void nvme_commit_fini(struct tier_nvme *t)
{
	free(t->slot);
	t->slot = NULL;
	free(t->held);
	t->held = NULL;
	t->nheld = t->held_cap = 0;
	free(t->meta);
	t->meta = NULL;
}
