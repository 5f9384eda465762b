/*
 * nvme_commit.c - the NVMe tier's durable state (docs/nvme-format.md,
 * "Commits"): copy on write of committed extents, the object table, the
 * commit (tier_nvme_commit) and loading the last commit when the files are
 * opened again.
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
#include <sys/stat.h>
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

static uint64_t unit_slot(const struct tier_nvme *t, const struct tier_nvme_obj *o, uint64_t u,
			  const uint64_t *base)
{
	unsigned p = (unsigned)((u + o->rot) % t->npaths);

	return base[p] + (u / t->npaths) * t->unit;
}

uint64_t nvme_unit_read_off(const struct tier_nvme *t, struct tier_nvme_obj *o, uint64_t u)
{
	if (atomic_load_explicit(&o->cow, memory_order_acquire) &&
	    atomic_load_explicit(&o->moved[u], memory_order_relaxed))
		return unit_slot(t, o, u, o->new_off);
	return unit_slot(t, o, u, o->ext_off);
}

uint64_t nvme_unit_write_off(const struct tier_nvme *t, struct tier_nvme_obj *o, uint64_t u)
{
	if (!atomic_load_explicit(&o->cow, memory_order_acquire))
		return unit_slot(t, o, u, o->ext_off);
	atomic_store_explicit(&o->moved[u], 1, memory_order_relaxed);
	return unit_slot(t, o, u, o->new_off);
}

/* ------------------------------------------------------ held extents */

static int held_add(struct tier_nvme *t, uint32_t path, uint64_t off, uint64_t len,
		    uint64_t last_gen)
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
		else if (held_add(t, p, o->ext_off[p], o->ext_len[p], t->gen) != 0)
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
				else if (held_add(t, p, o->ext_off[p], o->ext_len[p], t->gen) != 0)
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
static int file_io(struct nvme_path *p, bool wr, void *buf, size_t len, uint64_t off,
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

static void *aligned_alloc_zero(size_t len)
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
		rc = file_io(path, false, buf, dev,
			     path->data_off + unit_slot(t, o, u, o->ext_off), TIER_FAULT_COMMIT_COPY,
			     "a commit reading a unit to copy");
		if (!rc)
			rc = file_io(path, true, buf, dev,
				     path->data_off + unit_slot(t, o, u, o->new_off),
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
static int slot_write(struct tier_nvme *t, struct ts_nvme_slot *s)
{
	struct nvme_path *p0 = &t->paths[0];
	int rc;

	nvme_slot_seal(s);
	rc = file_io(p0, true, s, sizeof(*s), TIER_NVME_SLOT_OFF(s->seq % 2), TIER_FAULT_COMMIT_SLOT,
		     "writing a commit slot");
	return rc ? rc : file_sync(p0, TIER_FAULT_COMMIT_SLOT_SYNC, "a commit slot");
}

/* ------------------------------------------------------------ commit */

static void fmt_gen_time(uint64_t ns, char *buf, size_t n)
{
	time_t s = (time_t)(ns / 1000000000u);
	struct tm tm;

	strftime(buf, n, "%Y-%m-%d %H:%M:%S", localtime_r(&s, &tm));
}

int tier_nvme_commit(struct tier_nvme *t, const void *meta, size_t meta_len, uint64_t *gen_out)
{
	NVME_ARG(t);
	struct nvme_path *p0 = &t->paths[0];
	struct ts_nvme_slot *s = NULL;
	struct ts_nvme_table_held *held = NULL;
	size_t nheld = 0;
	char *buf = NULL, *copy = NULL;
	void *meta_copy = NULL;
	uint64_t gen, now, toff = 0, tlen, tdev = 0, data = 0;
	bool table_placed = false;
	unsigned nobjs = 0;
	int rc = 0;

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
	gen = t->next_gen;
	now = ts_wall_ns();
	/* 1. Every object whole in the extents the table will name. */
	for (struct tier_nvme_obj *o = t->objs; o; o = o->next) {
		if (!atomic_load(&o->cow))
			continue;
		if (!copy) {
			copy = aligned_alloc_zero(nvme_round_up(t->unit, t->block));
			if (!copy) {
				rc = ts_err(-ENOMEM, "nvme: out of memory for a commit");
				goto out;
			}
		}
		rc = cow_fill(t, o, copy);
		if (rc)
			goto out;
	}
	/* 2. The table, in a fresh extent of path 0. */
	if (table_held(t, ring_oldest_with(t, gen), &held, &nheld) != 0) {
		rc = ts_err(-ENOMEM, "nvme: out of memory for a commit's table");
		goto out;
	}
	tlen = table_bytes(t, nheld, meta_len);
	tdev = nvme_round_up(tlen, p0->block);
	buf = aligned_alloc_zero(tdev);
	meta_copy = meta_len ? malloc(meta_len) : NULL;
	s = aligned_alloc_zero(sizeof(*s));
	if (!buf || !s || (meta_len && !meta_copy)) {
		rc = ts_err(-ENOMEM, "nvme: out of memory for a commit's table (%" PRIu64 " bytes)", tlen);
		goto out;
	}
	if (meta_len)
		memcpy(meta_copy, meta, meta_len);
	if (extents_alloc(&p0->alloc, tdev, &toff) != 0) {
		char a[32];

		rc = ts_err(-ENOSPC, "nvme0 (%s): no room for a commit's object table (%s)", p0->file,
			    ts_size_fmt(tdev, a, sizeof(a)));
		goto out;
	}
	table_placed = true;
	rc = nvme_file_grow(p0, toff + tdev, "the object table");
	if (rc)
		goto out;
	table_fill(t, buf, gen, now, held, nheld, meta, meta_len);
	rc = file_io(p0, true, buf, tdev, p0->data_off + toff, TIER_FAULT_COMMIT_TABLE,
		     "writing the object table");
	if (rc)
		goto out;
	/* 3. Data and table durable, on every file, before a slot names them. */
	for (unsigned i = 0; i < t->npaths; i++) {
		rc = file_sync(&t->paths[i], TIER_FAULT_COMMIT_SYNC, "the data and the object table");
		if (rc)
			goto out;
	}
	/* 4. The slot: this commit first, then the kept ones before it. */
	for (struct tier_nvme_obj *o = t->objs; o; o = o->next, nobjs++)
		data += o->size;
	memcpy(s, t->slot, sizeof(*s));
	memcpy(s->magic, TIER_NVME_SLOT_MAGIC, 8);
	s->version = TIER_NVME_FORMAT_VERSION;
	s->slot_size = sizeof(*s);
	memcpy(s->store_uuid, t->uuid, 16);
	s->seq = t->seq + 1;
	s->next_gen = gen + 1;
	s->keep = t->keep;
	memmove(&s->c[1], &s->c[0], sizeof(s->c[0]) * (TIER_NVME_MAX_KEEP - 1));
	s->c[0] = (struct ts_nvme_commit){ .gen = gen, .time_ns = now, .table_off = toff,
					   .table_len = tlen, .data_bytes = data,
					   .table_crc = ts_crc32c(0, buf, tlen), .nobjs = nobjs,
					   .meta_len = meta_len };
	s->ncommits = s->ncommits + 1 < t->keep ? s->ncommits + 1 : t->keep;
	memset(&s->c[s->ncommits], 0, sizeof(s->c[0]) * (TIER_NVME_MAX_KEEP - s->ncommits));
	rc = slot_write(t, s);
	/*
	 * Written, or maybe written (a failed write or sync may still have
	 * reached the disk): either way the table and the extents it names
	 * are frozen from here, so whichever slot a later open finds names
	 * extents nothing overwrites.  Only a durable slot frees anything.
	 */
	freeze_objects(t);
	if (held_add(t, 0, toff, tdev, gen) == 0)
		table_placed = false;
	t->next_gen = gen + 1;
	/*
	 * A failed slot keeps t->seq: the next commit writes the same slot
	 * again, with a seq above the last good one, and never the slot that
	 * holds the last good ring; so a torn retry still leaves that one.
	 */
	if (rc)
		goto out;
	t->seq = s->seq;
	held_release(t, s->c[s->ncommits - 1].gen);
	memcpy(t->slot, s, sizeof(*s));
	t->gen = gen;
	t->next_gen = gen + 1;
	free(t->meta);
	t->meta = meta_copy;
	t->meta_len = meta_len;
	meta_copy = NULL;
	if (gen_out)
		*gen_out = gen;
	{
		/* Copy on write needs room: the kept commits' extents and the
		 * writes after the last one, up to keep + 1 copies of the
		 * objects.  Said once, at the first commit that would not fit. */
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
	{
		char when[32];

		fmt_gen_time(now, when, sizeof(when));
		TIER_DEBUG_LOG(TIER_SS_NVME, "commit: generation %" PRIu64 " at %s, %u objects, table %" PRIu64
			   " bytes", gen, when, nobjs, tlen);
	}
out:
	if (table_placed)
		extents_free(&p0->alloc, toff, tdev);
	atomic_store(&t->committing, false);
	pthread_mutex_unlock(&t->lock);
	free(buf);
	free(copy);
	free(held);
	free(s);
	free(meta_copy);
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

/* -------------------------------------------------------------- load */

struct load {
	struct tier_nvme *t;
	const char *who;
	uint64_t file_size[TIERS_MAX_NVME_PATHS];
	struct tier_nvme_obj *objs;
	uint64_t count;
};

/* Takes [off, off + len) of path @p for what the table names. */
static int take(struct load *l, unsigned p, uint64_t off, uint64_t len, const char *what)
{
	struct nvme_path *path = &l->t->paths[p];
	int rc;

	if (off > path->alloc.total || len > path->alloc.total - off)
		return ts_err(-EBADMSG, "%s: %s lies outside nvme%u's %" PRIu64 " bytes of capacity",
			      l->who, what, p, path->alloc.total);
	if (path->data_off + off + len > l->file_size[p])
		return ts_err(-EBADMSG, "%s: %s ends at file offset %" PRIu64 " of nvme%u (%s), but the file has %" PRIu64
			      " bytes: it was truncated", l->who, what, path->data_off + off + len, p,
			      path->file, l->file_size[p]);
	rc = extents_take(&path->alloc, off, len);
	if (rc == -EEXIST)
		return ts_err(-EBADMSG, "%s: %s overlaps another extent of the table on nvme%u", l->who,
			      what, p);
	return rc ? ts_err(rc, "%s: %s: %s", l->who, what, tier_strerror(rc)) : 0;
}

static int load_obj(void *arg, const struct nvme_tobj *e)
{
	struct load *l = arg;
	struct tier_nvme *t = l->t;
	struct tier_nvme_obj *o;
	char what[300];
	int rc;

	snprintf(what, sizeof(what), "object '%.*s'", (int)e->name_len, e->name);
	for (unsigned p = 0; p < t->npaths; p++) {
		if (e->ext_len[p] != nvme_ext_len(t, e->size, e->rot, p) || e->ext_off[p] % t->align)
			return ts_err(-EBADMSG, "%s: %s has an extent on nvme%u that does not fit its size",
				      l->who, what, p);
	}
	o = ts_calloc(1, sizeof(*o));
	if (!o)
		return ts_err(-ENOMEM, "nvme: out of memory loading the object table");
	o->next = l->objs;
	l->objs = o;
	o->name = ts_strndup(e->name, e->name_len);
	o->crc = ts_calloc(e->nunits, sizeof(*o->crc));
	o->crc_ok = ts_calloc(e->nunits, 1);
	if (!o->name || !o->crc || !o->crc_ok)
		return ts_err(-ENOMEM, "nvme: out of memory loading the object table");
	o->size = e->size;
	o->nunits = e->nunits;
	o->rot = e->rot;
	o->frozen = true;
	atomic_store(&o->written, (e->flags & TIER_NVME_OBJ_WRITTEN) != 0);
	memcpy(o->ext_off, e->ext_off, 8u * t->npaths);
	memcpy(o->ext_len, e->ext_len, 8u * t->npaths);
	for (uint64_t u = 0; u < e->nunits; u++)
		o->crc_ok[u] = (e->ok[u / 8] >> (u % 8)) & 1;
	if (e->crc)
		memcpy(o->crc, e->crc, 4 * e->nunits);
	for (struct tier_nvme_obj *x = o->next; x; x = x->next)
		if (strcmp(x->name, o->name) == 0)
			return ts_err(-EBADMSG, "%s: %s appears twice", l->who, what);
	for (unsigned p = 0; p < t->npaths; p++) {
		if (!o->ext_len[p])
			continue;
		rc = take(l, p, o->ext_off[p], o->ext_len[p], what);
		if (rc)
			return rc;
	}
	l->count++;
	return 0;
}

static void free_objs(struct tier_nvme_obj *o)
{
	while (o) {
		struct tier_nvme_obj *n = o->next;

		free(o->name);
		free(o->crc);
		free(o->crc_ok);
		free(o);
		o = n;
	}
}

/* Every path's allocator back to all free. */
static int reset_allocs(struct tier_nvme *t)
{
	for (unsigned p = 0; p < t->npaths; p++) {
		uint64_t total = t->paths[p].alloc.total;
		int rc;

		extents_fini(&t->paths[p].alloc);
		rc = extents_init(&t->paths[p].alloc, total, t->align);
		if (rc)
			return ts_err(rc, "nvme: out of memory");
	}
	return 0;
}

/*
 * Reads commit @c's object table (@dev bytes, its length rounded up to
 * path 0's blocks) into @buf, aligned, and checks it against the slot's
 * crc32c.  -EBADMSG when it is damaged; another errno is an I/O error.
 */
static int table_read(struct tier_nvme *t, const struct ts_nvme_commit *c, const char *who,
		      char *buf, uint64_t dev)
{
	struct nvme_path *p0 = &t->paths[0];
	int rc = ts_fault_check(TIER_FAULT_COMMIT_LOAD);

	if (rc)
		return ts_err(rc, "nvme0 (%s): reading %s: %s", p0->file, who, tier_strerror(rc));
	rc = file_io(p0, false, buf, dev, p0->data_off + c->table_off, TIER_FAULT_NONE,
		     "reading an object table");
	if (rc)
		return rc;
	if (ts_crc32c(0, buf, c->table_len) != c->table_crc)
		return ts_err(-EBADMSG, "%s at nvme0 (%s) file offset %" PRIu64 " is damaged (crc32c mismatch)",
			      who, p0->file, p0->data_off + c->table_off);
	return 0;
}

/*
 * Loads the commit @c (its table) into @t: objects, the extents it holds
 * for kept commits of generation @oldest or newer, record.  On failure
 * @t's objects and allocators are left as they were found (all free) and
 * the detail says why.
 */
static int load_commit(struct tier_nvme *t, const struct ts_nvme_commit *c, uint64_t oldest,
		       struct load *l)
{
	struct nvme_path *p0 = &t->paths[0];
	const struct ts_nvme_table *h = NULL;
	const struct ts_nvme_table_held *held = NULL;
	const void *meta = NULL;
	char who[96];
	uint64_t dev = nvme_round_up(c->table_len, p0->block);
	char *buf = NULL;
	int rc;

	snprintf(who, sizeof(who), "generation %" PRIu64 "'s object table", c->gen);
	l->who = who;
	l->objs = NULL;
	l->count = 0;
	if (c->table_len < sizeof(struct ts_nvme_table) || c->table_len > (1ull << 40))
		return ts_err(-EBADMSG, "%s: a length of %" PRIu64 " bytes is not possible", who, c->table_len);
	buf = aligned_alloc_zero(dev);
	if (!buf)
		return ts_err(-ENOMEM, "nvme: out of memory for %s (%" PRIu64 " bytes)", who, dev);
	rc = take(l, 0, c->table_off, dev, who);
	if (!rc)
		rc = table_read(t, c, who, buf, dev);
	if (rc)
		goto fail;
	rc = nvme_table_walk(buf, c->table_len, who, load_obj, l, &h, &held, &meta);
	if (rc)
		goto fail;
	if (memcmp(h->store_uuid, t->uuid, 16) != 0 || h->gen != c->gen ||
	    h->npaths != t->npaths || h->stripe_unit != t->unit || h->checksum != (t->csum ? 1u : 0u)) {
		rc = ts_err(-EBADMSG, "%s does not match its slot or the files (generation %" PRIu64
			    ", %u paths, stripe unit %u)", who, h->gen, h->npaths, h->stripe_unit);
		goto fail;
	}
	t->nheld = 0;
	for (uint64_t i = 0; i < h->nheld; i++) {
		struct ts_nvme_table_held e;

		memcpy(&e, &held[i], sizeof(e));
		if (e.last_gen < oldest)
			continue; /* named only by commits the ring no longer keeps */
		if (e.path >= t->npaths) {
			rc = ts_err(-EBADMSG, "%s: a held extent on path %u", who, e.path);
			goto fail;
		}
		rc = take(l, e.path, e.off, e.len, "an extent held for an older commit");
		if (!rc)
			rc = held_add(t, e.path, e.off, e.len, e.last_gen);
		if (rc)
			goto fail;
	}
	rc = held_add(t, 0, c->table_off, dev, c->gen);
	if (rc)
		goto fail;
	free(t->meta);
	t->meta = NULL;
	t->meta_len = 0;
	if (h->meta_len) {
		t->meta = malloc(h->meta_len);
		if (!t->meta) {
			rc = ts_err(-ENOMEM, "nvme: out of memory for a commit's record");
			goto fail;
		}
		memcpy(t->meta, meta, h->meta_len);
		t->meta_len = h->meta_len;
	}
	t->objs = l->objs;
	t->next_rot = (unsigned)(h->next_rot % t->npaths);
	free(buf);
	return 0;
fail:
	free(buf);
	free_objs(l->objs);
	l->objs = NULL;
	t->nheld = 0;
	{
		char saved[TIER_ERR_MAX];
		int r2;

		snprintf(saved, sizeof(saved), "%s", tier_last_error());
		r2 = reset_allocs(t);
		ts_err(rc, "%s", saved);
		if (r2)
			return r2;
	}
	return rc;
}

/* Undoes a load_commit that succeeded: no objects, all free. */
static int unload(struct tier_nvme *t)
{
	free_objs(t->objs);
	t->objs = NULL;
	t->nheld = 0;
	free(t->meta);
	t->meta = NULL;
	t->meta_len = 0;
	return reset_allocs(t);
}

/*
 * Reads every stripe unit of the loaded commit @gen that has a checksum
 * and checks it: a rollback goes back to a commit only once its data is
 * shown whole (without checksums only its table can be).  -EBADMSG names
 * the first unit that is not.
 */
static int verify_units(struct tier_nvme *t, uint64_t gen)
{
	size_t blen = nvme_round_up(t->unit, t->block);
	char *buf;
	int rc = 0;

	if (!t->csum)
		return 0;
	buf = aligned_alloc_zero(blen);
	if (!buf)
		return ts_err(-ENOMEM, "nvme: out of memory verifying generation %" PRIu64, gen);
	for (struct tier_nvme_obj *o = t->objs; o && !rc; o = o->next) {
		for (uint64_t u = 0; u < o->nunits && !rc; u++) {
			unsigned p = (unsigned)((u + o->rot) % t->npaths);
			struct nvme_path *path = &t->paths[p];
			uint32_t len = (uint32_t)(u == o->nunits - 1 ? o->size - u * t->unit : t->unit);
			uint64_t off = path->data_off + unit_slot(t, o, u, o->ext_off);
			uint32_t got;

			if (!o->crc_ok[u])
				continue;
			rc = ts_fault_check(TIER_FAULT_COMMIT_LOAD);
			if (rc)
				rc = ts_err(rc, "nvme%u (%s): reading generation %" PRIu64 "'s data at file offset %" PRIu64 ": %s",
					    p, path->file, gen, off, tier_strerror(rc));
			else
				rc = file_io(path, false, buf, nvme_round_up(len, path->block), off,
					     TIER_FAULT_NONE, "verifying a kept commit's data");
			if (rc)
				break;
			got = ts_crc32c(0, buf, len);
			if (got != o->crc[u])
				rc = ts_err(-EBADMSG, "generation %" PRIu64 ": object '%s' stripe unit %" PRIu64 " at nvme%u (%s) file offset %" PRIu64 " is damaged (crc32c %08x, expected %08x)",
					    gen, o->name, u, p, path->file, off, got, o->crc[u]);
		}
	}
	free(buf);
	return rc;
}

int nvme_ext_cmp(const void *a, const void *b)
{
	const struct nvme_ext *x = a, *y = b;

	if (x->path != y->path)
		return x->path < y->path ? -1 : 1;
	if (x->off != y->off)
		return x->off < y->off ? -1 : 1;
	return x->len < y->len ? -1 : x->len > y->len;
}

struct hold {
	struct load *l;
	struct nvme_ext *set;     /* taken so far, sorted */
	size_t nset, cap;
	size_t first_new;         /* set[first_new..] are this commit's, unsorted */
};

static int hold_add(struct hold *h, uint64_t p, uint64_t off, uint64_t len)
{
	if (h->nset == h->cap) {
		size_t cap = h->cap ? h->cap * 2 : 256;
		struct nvme_ext *n = ts_realloc(h->set, cap * sizeof(*n));

		if (!n)
			return ts_err(-ENOMEM, "nvme: out of memory");
		h->set = n;
		h->cap = cap;
	}
	h->set[h->nset++] = (struct nvme_ext){ p, off, len };
	return 0;
}

/* Takes [off, off + len) of path @p for the commit being held, unless a
 * newer commit names the very same extent (an object not moved since). */
static int hold_one(struct hold *h, unsigned p, uint64_t off, uint64_t len, const char *what)
{
	struct nvme_ext k = { p, off, len };
	int rc;

	if (bsearch(&k, h->set, h->first_new, sizeof(k), nvme_ext_cmp))
		return 0;
	for (size_t i = h->first_new; i < h->nset; i++)
		if (nvme_ext_cmp(&k, &h->set[i]) == 0)
			return ts_err(-EBADMSG, "%s: %s names an extent of nvme%u twice", h->l->who, what, p);
	rc = take(h->l, p, off, len, what);
	if (rc)
		return rc == -ENOMEM ? rc : -EBADMSG;
	return hold_add(h, p, off, len);
}

static int hold_obj(void *arg, const struct nvme_tobj *e)
{
	struct hold *h = arg;
	char what[300];

	snprintf(what, sizeof(what), "object '%.*s'", (int)e->name_len, e->name);
	for (unsigned p = 0; p < h->l->t->npaths; p++) {
		int rc;

		if (!e->ext_len[p])
			continue;
		if (e->ext_off[p] % h->l->t->align)
			return ts_err(-EBADMSG, "%s: %s has an extent on nvme%u that does not fit its size",
				      h->l->who, what, p);
		rc = hold_one(h, p, e->ext_off[p], e->ext_len[p], what);
		if (rc)
			return rc;
	}
	return 0;
}

/*
 * Holds every extent of the kept commit @c, older than the loaded one:
 * its table and its objects' extents, each held until @c leaves the ring.
 * 0; -EBADMSG when @c cannot be held whole (its table damaged, or an
 * extent outside the files or overlapping one in use: then the commit was
 * overwritten), with what it took given back; another errno (an I/O
 * error) fails the open.
 */
static int hold_commit(struct tier_nvme *t, struct hold *h, const struct ts_nvme_commit *c)
{
	struct nvme_path *p0 = &t->paths[0];
	uint64_t dev = nvme_round_up(c->table_len, p0->block);
	size_t nheld0 = t->nheld;
	char who[96], *buf = NULL;
	int rc;

	snprintf(who, sizeof(who), "generation %" PRIu64 "'s object table", c->gen);
	h->l->who = who;
	h->first_new = h->nset;
	if (c->table_len < sizeof(struct ts_nvme_table) || c->table_len > (1ull << 40)) {
		rc = ts_err(-EBADMSG, "%s: a length of %" PRIu64 " bytes is not possible", who, c->table_len);
		goto out;
	}
	buf = aligned_alloc_zero(dev);
	if (!buf) {
		rc = ts_err(-ENOMEM, "nvme: out of memory for %s (%" PRIu64 " bytes)", who, dev);
		goto out;
	}
	rc = hold_one(h, 0, c->table_off, dev, who);
	if (!rc)
		rc = table_read(t, c, who, buf, dev);
	if (!rc)
		rc = nvme_table_walk(buf, c->table_len, who, hold_obj, h, NULL, NULL, NULL);
	for (size_t i = h->first_new; i < h->nset && !rc; i++)
		rc = held_add(t, (uint32_t)h->set[i].path, h->set[i].off, h->set[i].len, c->gen);
	if (!rc)
		qsort(h->set, h->nset, sizeof(*h->set), nvme_ext_cmp);
out:
	if (rc) {
		char saved[TIER_ERR_MAX];

		snprintf(saved, sizeof(saved), "%s", tier_last_error());
		for (size_t i = h->first_new; i < h->nset; i++)
			extents_free(&t->paths[h->set[i].path].alloc, h->set[i].off, h->set[i].len);
		t->nheld = nheld0;
		h->nset = h->first_new;
		ts_err(rc, "%s", saved);
	}
	h->first_new = h->nset;
	free(buf);
	return rc;
}

/*
 * After the commit @ring->c[at] loaded: holds the extents of every older
 * commit of the ring, so no write of this open reuses one.  An older
 * commit that cannot be held whole leaves the ring (*dropped counts it),
 * with a warning saying why; the ring is compacted in place.
 */
static int hold_older(struct tier_nvme *t, struct ts_nvme_slot *ring, unsigned at, struct load *l,
		      unsigned *dropped)
{
	struct hold h = { .l = l };
	unsigned k = at + 1;
	int rc = 0;

	*dropped = 0;
	/* What the loaded commit takes: its objects, its table, its held. */
	for (struct tier_nvme_obj *o = t->objs; o && !rc; o = o->next)
		for (unsigned p = 0; p < t->npaths && !rc; p++)
			if (o->ext_len[p])
				rc = hold_add(&h, p, o->ext_off[p], o->ext_len[p]);
	for (size_t i = 0; i < t->nheld && !rc; i++)
		rc = hold_add(&h, t->held[i].path, t->held[i].off, t->held[i].len);
	if (rc)
		goto out;
	qsort(h.set, h.nset, sizeof(*h.set), nvme_ext_cmp);
	h.first_new = h.nset;
	for (unsigned i = at + 1; i < ring->ncommits; i++) {
		rc = hold_commit(t, &h, &ring->c[i]);
		if (rc == -EBADMSG) {
			TIER_WARN(TIER_SS_NVME, "nvme0 (%s): generation %" PRIu64 " leaves the kept commits: %s",
				  t->paths[0].file, ring->c[i].gen, tier_last_error());
			(*dropped)++;
			rc = 0;
			continue;
		}
		if (rc)
			goto out;
		ring->c[k++] = ring->c[i];
	}
	memset(&ring->c[k], 0, sizeof(ring->c[0]) * (TIER_NVME_MAX_KEEP - k));
	ring->ncommits = k;
out:
	free(h.set);
	return rc;
}

/* The files belong to the store whose slot @s is: headers, geometry. */
static int check_members(struct tier_nvme *t, const struct ts_nvme_slot *s)
{
	for (unsigned i = 0; i < t->npaths; i++) {
		struct nvme_path *p = &t->paths[i];

		if (!p->had_header)
			return ts_err(-ENOENT, "nvme%u (%s): %s, but %s holds the committed state of store '%s' over %u paths; %s",
				      i, p->file, p->created ? "the file was missing" : "the file's header is damaged",
				      t->paths[0].file, t->paths[0].hdr_name, t->paths[0].hdr_npaths,
				      p->created ? "open it with all of its files"
						 : "part of that state may be in this file, so nothing is changed; keep the file (tier-stat --check-files says what is damaged)");
		if (memcmp(p->hdr_uuid, s->store_uuid, 16) != 0)
			return ts_err(-EINVAL, "nvme%u (%s): belongs to another store ('%s') than %s ('%s'), which holds committed state; the paths must be the files of one store",
				      i, p->file, p->hdr_name, t->paths[0].file, t->paths[0].hdr_name);
		if (p->hdr_index != i || p->hdr_npaths != t->npaths)
			return ts_err(-EINVAL, "nvme%u (%s): is path %u of %u of the committed store '%s', but the manifest has it as path %u of %u",
				      i, p->file, p->hdr_index, p->hdr_npaths, p->hdr_name, i, t->npaths);
		if (p->hdr_unit != t->unit || p->hdr_csum != (t->csum ? 1u : 0u))
			return ts_err(-EINVAL, "nvme%u (%s): the committed store '%s' was written with stripe_unit %u and checksum %s; the manifest says %u and %s (open it with the geometry that wrote it, or export and import the state)",
				      i, p->file, p->hdr_name, p->hdr_unit, p->hdr_csum ? "crc32c" : "none",
				      t->unit, t->csum ? "crc32c" : "none");
	}
	return 0;
}

/*
 * Path 0 holds no commit: before the files are emptied for a fresh store,
 * make sure none of them is part of a committed store the manifest lists
 * otherwise (paths in another order, or its path 0 gone): a file that was
 * a store's path 0 must hold no commit, and a file that was another path
 * must belong to the store path 0 belongs to.  Refusing costs a clear
 * message; emptying would lose a checkpoint.
 */
static int fresh_check(struct tier_nvme *t)
{
	struct nvme_path *p0 = &t->paths[0];

	for (unsigned i = 1; i < t->npaths; i++) {
		struct nvme_path *p = &t->paths[i];

		if (!p->had_header)
			continue;
		if (p->hdr_index == 0) {
			struct ts_nvme_slot *s = aligned_alloc_zero(sizeof(*s));
			bool committed = false;

			if (!s)
				return ts_err(-ENOMEM, "nvme: out of memory");
			for (int k = 0; k < 2 && !committed; k++)
				committed = pread(p->fd, s, sizeof(*s), TIER_NVME_SLOT_OFF(k)) ==
						    (ssize_t)sizeof(*s) &&
					    nvme_slot_check(s) == 0;
			free(s);
			if (committed)
				return ts_err(-EINVAL, "nvme%u (%s): is path 0 of store '%s', which holds committed state, but the manifest lists it as path %u; list the paths in the order that wrote them",
					      i, p->file, p->hdr_name, i);
		} else if (p0->hdr_damaged) {
			return ts_err(-EBADMSG, "nvme0 (%s): its header is damaged, and nvme%u (%s) is path %u of %u of store '%s': path 0's file may hold that store's committed state, so neither is changed; keep both files (tier-stat --check-files %s %s says what is damaged)",
				      p0->file, i, p->file, p->hdr_index, p->hdr_npaths, p->hdr_name,
				      p0->file, p->file);
		} else if (!p0->had_header || memcmp(p->hdr_uuid, p0->hdr_uuid, 16) != 0) {
			return ts_err(-EEXIST, "nvme%u (%s): is path %u of %u of store '%s', whose path 0 is not %s; it may hold part of that store's committed state, so it is not emptied (list the store's paths in their order, or remove the file)",
				      i, p->file, p->hdr_index, p->hdr_npaths, p->hdr_name, p0->file);
		}
	}
	return 0;
}

/* Empties the files for a fresh store: no commit to keep. */
static int load_fresh(struct tier_nvme *t)
{
	int rc = fresh_check(t);

	if (rc)
		return rc;
	for (unsigned i = 0; i < t->npaths; i++) {
		struct nvme_path *p = &t->paths[i];

		if (p->created)
			continue;
		p->created_ns = 0; /* a new store in an old file */
		if (ftruncate(p->fd, (off_t)p->data_off) != 0)
			return ts_err(-errno, "nvme%u (%s): truncating to its header: %s", i, p->file,
				      tier_strerror(errno));
		/* Slots of a store that never committed are zero already; make
		 * sure of it, so a damaged old slot is never taken later. */
		if (ftruncate(p->fd, TIER_NVME_SLOT_OFF(0)) != 0 ||
		    ftruncate(p->fd, (off_t)p->data_off) != 0)
			return ts_err(-errno, "nvme%u (%s): clearing its commit slots: %s", i, p->file,
				      tier_strerror(errno));
	}
	return 0;
}

int nvme_commit_load(struct tier_nvme *t, uint64_t want)
{
	struct nvme_path *p0 = &t->paths[0];
	struct ts_nvme_slot *a = NULL, *b = NULL, *s, *n;
	char why[TIER_ERR_MAX * 2] = "";
	struct load l = { .t = t };
	int ra, rb, rc = 0;
	unsigned i, dropped = 0;
	bool suspect;

	t->slot = aligned_alloc_zero(sizeof(*t->slot));
	if (!t->slot)
		return ts_err(-ENOMEM, "nvme: out of memory");
	t->next_gen = 1;
	if (p0->hdr_damaged) {
		/* Whose the file is cannot be shown; if its slots hold a
		 * commit, emptying it would lose that. */
		struct ts_nvme_slot *k = aligned_alloc_zero(sizeof(*k));

		if (!k)
			return ts_err(-ENOMEM, "nvme: out of memory");
		for (int j = 0; j < 2; j++)
			if (pread(p0->fd, k, sizeof(*k), TIER_NVME_SLOT_OFF(j)) == (ssize_t)sizeof(*k) &&
			    nvme_slot_check(k) == 0) {
				uint64_t g = k->ncommits ? k->c[0].gen : 0;

				free(k);
				return ts_err(-EBADMSG, "nvme0 (%s): its header is damaged, and its commit slot %d names generation %" PRIu64 " of a store: the file holds committed state, so nothing is changed; keep the file (tier-stat --check-files says what is damaged)",
					      p0->file, j, g);
			}
		free(k);
	}
	if (!p0->had_header) {
		if (want)
			return ts_err(-ENOENT, "nvme0 (%s): generation %" PRIu64 " was asked for, and the store has no commit",
				      p0->file, want);
		return load_fresh(t);
	}
	a = aligned_alloc_zero(sizeof(*a));
	b = aligned_alloc_zero(sizeof(*b));
	if (!a || !b) {
		rc = ts_err(-ENOMEM, "nvme: out of memory");
		goto out;
	}
	rc = ts_fault_check(TIER_FAULT_COMMIT_LOAD);
	if (rc) {
		rc = ts_err(rc, "nvme0 (%s): reading the commit slots: %s", p0->file, tier_strerror(rc));
		goto out;
	}
	/* A file shorter than its slots never committed (zeros). */
	ra = pread(p0->fd, a, sizeof(*a), TIER_NVME_SLOT_OFF(0)) < 0 ? -errno : nvme_slot_check(a);
	rb = pread(p0->fd, b, sizeof(*b), TIER_NVME_SLOT_OFF(1)) < 0 ? -errno : nvme_slot_check(b);
	if (ra == 0 && memcmp(a->store_uuid, p0->hdr_uuid, 16) != 0)
		ra = -EBADMSG;
	if (rb == 0 && memcmp(b->store_uuid, p0->hdr_uuid, 16) != 0)
		rb = -EBADMSG;
	if (ra && rb) {
		if (ra == -ENOENT && rb == -ENOENT) {
			if (want) {
				rc = ts_err(-ENOENT, "nvme0 (%s): generation %" PRIu64 " was asked for, and the store has no commit",
					    p0->file, want);
				goto out;
			}
			rc = load_fresh(t);
			goto out;
		}
		if (ra != -ENOENT && ra != -EBADMSG) {
			rc = ts_err(ra, "nvme0 (%s): reading commit slot 0: %s", p0->file, tier_strerror(ra));
			goto out;
		}
		if (rb != -ENOENT && rb != -EBADMSG) {
			rc = ts_err(rb, "nvme0 (%s): reading commit slot 1: %s", p0->file, tier_strerror(rb));
			goto out;
		}
		rc = ts_err(-EBADMSG, "nvme0 (%s): the commit slots at file offsets %u and %u are damaged: the store's committed state cannot be found (tier-stat --check-files says more)",
			    p0->file, TIER_NVME_SLOT_OFF(0), TIER_NVME_SLOT_OFF(1));
		goto out;
	}
	s = ra ? b : rb ? a : (a->seq > b->seq ? a : b);
	if ((s == a ? rb : ra) == -EBADMSG)
		TIER_WARN(TIER_SS_NVME, "nvme0 (%s): commit slot %d is damaged; the other (write %" PRIu64 ") is used",
			  p0->file, s == a ? 1 : 0, s->seq);
	if (t->flags & TIER_NVME_SCRATCH) {
		rc = ts_err(-EEXIST, "nvme0 (%s): holds the committed state of store '%s' (generation %" PRIu64 "); a scratch store would discard it: use another path, or remove the files",
			    p0->file, p0->hdr_name, s->ncommits ? s->c[0].gen : 0);
		goto out;
	}
	memcpy(t->uuid, s->store_uuid, 16);
	rc = check_members(t, s);
	if (rc)
		goto out;
	for (i = 0; i < t->npaths; i++) {
		struct stat st;

		if (fstat(t->paths[i].fd, &st) != 0) {
			rc = ts_err(-errno, "nvme%u (%s): stat: %s", i, t->paths[i].file, tier_strerror(errno));
			goto out;
		}
		l.file_size[i] = (uint64_t)st.st_size;
		t->paths[i].file_end = (uint64_t)st.st_size > t->paths[i].data_off ? (uint64_t)st.st_size
										 : t->paths[i].data_off;
	}
	/*
	 * Files last opened by an earlier build, which held only the newest
	 * commit's extents and so may have written over an older one's:
	 * with checksums a rollback shows whether it did; without, nothing
	 * can, so only the newest commit is offered, and it alone is kept.
	 */
	suspect = !(p0->hdr_flags & TIER_NVME_HDR_HOLDS_KEPT) && !t->csum && s->ncommits > 1;
	/*
	 * The newest commit that loads, or the one asked for.  One older than
	 * the newest (a rollback) must also show its data whole before the
	 * newer ones are dropped; when it cannot, nothing is changed.  Only a
	 * damaged commit is passed over: an I/O error fails the open.
	 */
	rc = -ENOENT;
	for (i = 0; i < s->ncommits; i++) {
		const struct ts_nvme_commit *c = &s->c[i];
		size_t wl = strlen(why);

		if (want && c->gen != want)
			continue;
		if (i > 0 && suspect) {
			rc = ts_err(-EBADMSG, "generation %" PRIu64 " cannot be shown whole: since it was committed, an earlier build of tierstore opened the files, which may have reused its extents, and with checksum: none its data cannot be verified",
				    c->gen);
		} else {
			rc = load_commit(t, c, s->c[s->ncommits - 1].gen, &l);
			if (rc == 0 && i > 0 && (rc = verify_units(t, c->gen)) != 0) {
				char saved[TIER_ERR_MAX];
				int r2;

				snprintf(saved, sizeof(saved), "%s", tier_last_error());
				r2 = unload(t);
				if (r2) {
					rc = r2;
					goto out;
				}
				ts_err(rc, "%s", saved);
			}
		}
		if (rc == 0)
			break;
		if (rc != -EBADMSG) {
			char saved[TIER_ERR_MAX];

			snprintf(saved, sizeof(saved), "%s", tier_last_error());
			rc = ts_err(rc, "nvme0 (%s): loading generation %" PRIu64 ": %s; nothing was changed",
				    p0->file, c->gen, saved);
			goto out;
		}
		snprintf(why + wl, sizeof(why) - wl, "%s%s", wl ? "; " : "", tier_last_error());
		if (want)
			break;
	}
	if (rc) {
		if (want && rc == -ENOENT) {
			char have[256] = "";

			for (unsigned k = 0; k < s->ncommits; k++)
				snprintf(have + strlen(have), sizeof(have) - strlen(have), "%s%" PRIu64,
					 k ? ", " : "", s->c[k].gen);
			rc = ts_err(-ENOENT, "nvme0 (%s): generation %" PRIu64 " is not among the kept commits (%s)",
				    p0->file, want, have);
		} else if (want) {
			rc = ts_err(-EBADMSG, "nvme0 (%s): cannot roll back to generation %" PRIu64 ": %s; nothing was changed, and the newer commits are kept",
				    p0->file, want, why);
		} else {
			rc = ts_err(-EBADMSG, "nvme0 (%s): no kept commit of store '%s' can be loaded: %s; nothing was changed",
				    p0->file, p0->hdr_name, why);
		}
		goto out;
	}
	/*
	 * The ring from here: the loaded commit, then the older ones that can
	 * be held whole (their extents taken, so nothing this open writes
	 * reuses one).  Newer commits go (a rollback), and so do older ones
	 * that cannot be held, or that no build can vouch for (suspect).
	 */
	n = t->slot;
	memcpy(n, s, sizeof(*s));
	memmove(&n->c[0], &n->c[i], sizeof(n->c[0]) * (n->ncommits - i));
	n->ncommits -= i;
	memset(&n->c[n->ncommits], 0, sizeof(n->c[0]) * (TIER_NVME_MAX_KEEP - n->ncommits));
	if (suspect) {
		TIER_WARN(TIER_SS_NVME, "nvme0 (%s): an earlier build of tierstore opened these files since generation %" PRIu64 " and may have reused the extents of the %u older kept commit(s); with checksum: none they cannot be verified, so only generation %" PRIu64 " is kept",
			  p0->file, n->c[1].gen, n->ncommits - 1, n->c[0].gen);
		memset(&n->c[1], 0, sizeof(n->c[0]) * (TIER_NVME_MAX_KEEP - 1));
		n->ncommits = 1;
	}
	rc = hold_older(t, n, 0, &l, &dropped);
	if (rc)
		goto out;
	t->seq = s->seq;
	t->next_gen = s->next_gen;
	t->gen = n->c[0].gen;
	t->restored = true;
	if (i > 0 || suspect || dropped) {
		/* Durably, before anything can overwrite an extent only the
		 * dropped commits name. */
		n->seq = t->seq + 1;
		rc = slot_write(t, n);
		if (rc) {
			char saved[TIER_ERR_MAX];

			snprintf(saved, sizeof(saved), "%s", tier_last_error());
			rc = ts_err(rc, "nvme0 (%s): %s generation %" PRIu64 ": %s", p0->file,
				    i > 0 ? "rolling back to" : "keeping the commits from", t->gen, saved);
			goto out;
		}
		t->seq = n->seq;
	}
	if (i > 0) {
		char when[32];

		fmt_gen_time(n->c[0].time_ns, when, sizeof(when));
		if (want)
			TIER_INFO(TIER_SS_NVME, "nvme: opened at generation %" PRIu64 " (%s), as asked, its data verified; the %u newer commit(s) are dropped",
				  t->gen, when, i);
		else
			TIER_WARN(TIER_SS_NVME, "nvme0 (%s): %s; rolled back to generation %" PRIu64 " (%s), its data verified",
				  p0->file, why, t->gen, when);
	}
	{
		char when[32];

		fmt_gen_time(t->slot->c[0].time_ns, when, sizeof(when));
		TIER_INFO(TIER_SS_NVME, "nvme: reopened store '%s' at generation %" PRIu64 " (committed %s): %" PRIu64 " objects",
			  p0->hdr_name, t->gen, when, l.count);
	}
out:
	free(a);
	free(b);
	return rc;
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
