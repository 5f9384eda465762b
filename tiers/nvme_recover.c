/*
 * nvme_recover.c - reopening the NVMe tier's durable state
 * (docs/nvme-format.md, "Commits"): when the files are opened again,
 * reading path 0's two commit slots, checking every file belongs to the
 * store they name, and loading the object table of the newest commit that
 * loads (or the one asked for), rolling back over damaged ones with their
 * data verified; then holding the extents of the older kept commits, so
 * nothing this open writes reuses one.  Files that hold no commit are
 * emptied for a fresh store, unless one of them may be part of a
 * committed store listed otherwise.
 *
 * Writing commits (copy on write, the object table, tier_nvme_commit) is
 * tiers/nvme_commit.c's; the two share tiers/nvme_impl.h.  The open runs
 * before any request, so nothing here races with I/O.
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
#include <unistd.h>

#include "common/error.h"
#include "common/fault.h"
#include "common/log.h"
#include "kernels/crc32c.h"
#include "tiers/extent.h"
#include "tiers/nvme_format.h"
#include "tiers/nvme_impl.h"

/* -------------------------------------------------------------- load */

struct load {
	struct tier_nvme *t;
	const char *who;
	uint64_t file_size[TIERS_MAX_NVME_PATHS];
	struct tier_nvme_obj *objs;
	struct ts_names names;  /* objs by name: a name twice is refused */
	uint64_t count;
};

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
	o->name = ts_strndup(e->name, e->name_len);
	o->crc = ts_calloc(e->nunits, sizeof(*o->crc));
	o->crc_ok = ts_calloc(e->nunits, 1);
	if (!o->name || !o->crc || !o->crc_ok) {
		free_objs(o);
		return ts_err(-ENOMEM, "nvme: out of memory loading the object table");
	}
	if (ts_names_find(&l->names, o->name)) {
		free_objs(o);
		return ts_err(-EBADMSG, "%s: %s appears twice", l->who, what);
	}
	rc = nvme_obj_link(&l->objs, &l->names, o);
	if (rc) {
		free_objs(o);
		return ts_err(rc, "nvme: out of memory loading the object table");
	}
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
	rc = nvme_sync_io(p0, false, buf, dev, p0->data_off + c->table_off, TIER_FAULT_NONE,
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
	ts_names_init(&l->names, nvme_obj_key, NULL);
	l->count = 0;
	if (c->table_len < sizeof(struct ts_nvme_table) || c->table_len > (1ull << 40))
		return ts_err(-EBADMSG, "%s: a length of %" PRIu64 " bytes is not possible", who, c->table_len);
	buf = nvme_aligned_zero(dev);
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
			rc = nvme_held_add(t, e.path, e.off, e.len, e.last_gen);
		if (rc)
			goto fail;
	}
	rc = nvme_held_add(t, 0, c->table_off, dev, c->gen);
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
	ts_names_free(&t->names);
	t->names = l->names; /* the table moves to t */
	ts_names_init(&l->names, nvme_obj_key, NULL);
	t->next_rot = (unsigned)(h->next_rot % t->npaths);
	free(buf);
	return 0;
fail:
	free(buf);
	free_objs(l->objs);
	l->objs = NULL;
	ts_names_free(&l->names);
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
	ts_names_free(&t->names);
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
	buf = nvme_aligned_zero(blen);
	if (!buf)
		return ts_err(-ENOMEM, "nvme: out of memory verifying generation %" PRIu64, gen);
	for (struct tier_nvme_obj *o = t->objs; o && !rc; o = o->next) {
		for (uint64_t u = 0; u < o->nunits && !rc; u++) {
			unsigned p = (unsigned)((u + o->rot) % t->npaths);
			struct nvme_path *path = &t->paths[p];
			uint32_t len = (uint32_t)(u == o->nunits - 1 ? o->size - u * t->unit : t->unit);
			uint64_t off = path->data_off + nvme_unit_slot(t, o, u, o->ext_off);
			uint32_t got;

			if (!o->crc_ok[u])
				continue;
			rc = ts_fault_check(TIER_FAULT_COMMIT_LOAD);
			if (rc)
				rc = ts_err(rc, "nvme%u (%s): reading generation %" PRIu64 "'s data at file offset %" PRIu64 ": %s",
					    p, path->file, gen, off, tier_strerror(rc));
			else
				rc = nvme_sync_io(path, false, buf, nvme_round_up(len, path->block), off,
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
	buf = nvme_aligned_zero(dev);
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
		rc = nvme_held_add(t, (uint32_t)h->set[i].path, h->set[i].off, h->set[i].len, c->gen);
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
			struct ts_nvme_slot *s = nvme_aligned_zero(sizeof(*s));
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

/* ------------------------------------------------------- the reopen */

/* One reopen of files that hold a store, between its steps. */
struct reopen {
	struct tier_nvme *t;
	struct nvme_path *p0;
	uint64_t want;            /* the generation asked for; 0: the newest that loads */
	struct ts_nvme_slot *a, *b;  /* path 0's two slots as read */
	struct ts_nvme_slot *s;   /* the one used (a or b); NULL: no commit */
	struct load l;
	unsigned at;              /* the loaded commit's place in s's ring */
	bool suspect;             /* only the newest commit can be vouched for */
	char why[TIER_ERR_MAX * 2];  /* why the commits passed over were */
};

/* Path 0's header is damaged: whose the file is cannot be shown; if its
 * slots hold a commit, emptying it would lose that.  0 when they hold none. */
static int damaged_header_check(struct nvme_path *p0)
{
	struct ts_nvme_slot *k = nvme_aligned_zero(sizeof(*k));

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
	return 0;
}

/*
 * Reads path 0's two commit slots and picks the one to use (r->s): the
 * valid one, or of two the later write.  With neither ever written r->s
 * stays NULL: the files are emptied for a fresh store, or the generation
 * asked for is refused.
 */
static int slots_read(struct reopen *r)
{
	struct nvme_path *p0 = r->p0;
	int ra, rb, rc;

	r->a = nvme_aligned_zero(sizeof(*r->a));
	r->b = nvme_aligned_zero(sizeof(*r->b));
	if (!r->a || !r->b)
		return ts_err(-ENOMEM, "nvme: out of memory");
	rc = ts_fault_check(TIER_FAULT_COMMIT_LOAD);
	if (rc)
		return ts_err(rc, "nvme0 (%s): reading the commit slots: %s", p0->file, tier_strerror(rc));
	/* A file shorter than its slots never committed (zeros). */
	ra = pread(p0->fd, r->a, sizeof(*r->a), TIER_NVME_SLOT_OFF(0)) < 0 ? -errno
									   : nvme_slot_check(r->a);
	rb = pread(p0->fd, r->b, sizeof(*r->b), TIER_NVME_SLOT_OFF(1)) < 0 ? -errno
									   : nvme_slot_check(r->b);
	if (ra == 0 && memcmp(r->a->store_uuid, p0->hdr_uuid, 16) != 0)
		ra = -EBADMSG;
	if (rb == 0 && memcmp(r->b->store_uuid, p0->hdr_uuid, 16) != 0)
		rb = -EBADMSG;
	if (ra && rb) {
		if (ra == -ENOENT && rb == -ENOENT) {
			if (r->want)
				return ts_err(-ENOENT, "nvme0 (%s): generation %" PRIu64 " was asked for, and the store has no commit",
					      p0->file, r->want);
			return load_fresh(r->t);
		}
		if (ra != -ENOENT && ra != -EBADMSG)
			return ts_err(ra, "nvme0 (%s): reading commit slot 0: %s", p0->file, tier_strerror(ra));
		if (rb != -ENOENT && rb != -EBADMSG)
			return ts_err(rb, "nvme0 (%s): reading commit slot 1: %s", p0->file, tier_strerror(rb));
		return ts_err(-EBADMSG, "nvme0 (%s): the commit slots at file offsets %u and %u are damaged: the store's committed state cannot be found (tier-stat --check-files says more)",
			      p0->file, TIER_NVME_SLOT_OFF(0), TIER_NVME_SLOT_OFF(1));
	}
	r->s = ra ? r->b : rb ? r->a : (r->a->seq > r->b->seq ? r->a : r->b);
	if ((r->s == r->a ? rb : ra) == -EBADMSG)
		TIER_WARN(TIER_SS_NVME, "nvme0 (%s): commit slot %d is damaged; the other (write %" PRIu64 ") is used",
			  p0->file, r->s == r->a ? 1 : 0, r->s->seq);
	return 0;
}

/* The files belong to the store of the slot r->s (a scratch store refuses
 * them); their sizes, which the tables' extents are checked against. */
static int files_check(struct reopen *r)
{
	struct tier_nvme *t = r->t;
	const struct ts_nvme_slot *s = r->s;
	int rc;

	if (t->flags & TIER_NVME_SCRATCH)
		return ts_err(-EEXIST, "nvme0 (%s): holds the committed state of store '%s' (generation %" PRIu64 "); a scratch store would discard it: use another path, or remove the files",
			      r->p0->file, r->p0->hdr_name, s->ncommits ? s->c[0].gen : 0);
	memcpy(t->uuid, s->store_uuid, 16);
	rc = check_members(t, s);
	if (rc)
		return rc;
	for (unsigned i = 0; i < t->npaths; i++) {
		struct stat st;

		if (fstat(t->paths[i].fd, &st) != 0)
			return ts_err(-errno, "nvme%u (%s): stat: %s", i, t->paths[i].file, tier_strerror(errno));
		r->l.file_size[i] = (uint64_t)st.st_size;
		t->paths[i].file_end = (uint64_t)st.st_size > t->paths[i].data_off ? (uint64_t)st.st_size
										 : t->paths[i].data_off;
	}
	return 0;
}

/*
 * Loads commit @i of the ring r->s.  One older than the newest (a
 * rollback) must also show its data whole, or it is unloaded again.
 * -EBADMSG when it is damaged; another errno is an I/O error, or, with
 * *fatal set, a failure to undo the load.
 */
static int try_commit(struct reopen *r, unsigned i, bool *fatal)
{
	struct tier_nvme *t = r->t;
	const struct ts_nvme_slot *s = r->s;
	const struct ts_nvme_commit *c = &s->c[i];
	int rc;

	if (i > 0 && r->suspect)
		return ts_err(-EBADMSG, "generation %" PRIu64 " cannot be shown whole: since it was committed, an earlier build of tierstore opened the files, which may have reused its extents, and with checksum: none its data cannot be verified",
			      c->gen);
	rc = load_commit(t, c, s->c[s->ncommits - 1].gen, &r->l);
	if (rc == 0 && i > 0 && (rc = verify_units(t, c->gen)) != 0) {
		char saved[TIER_ERR_MAX];
		int r2;

		snprintf(saved, sizeof(saved), "%s", tier_last_error());
		r2 = unload(t);
		if (r2) {
			*fatal = true;
			return r2;
		}
		ts_err(rc, "%s", saved);
	}
	return rc;
}

/* No commit of the ring r->s could be loaded (@rc): what to say. */
static int pick_failed(const struct reopen *r, int rc)
{
	const struct ts_nvme_slot *s = r->s;
	struct nvme_path *p0 = r->p0;

	if (r->want && rc == -ENOENT) {
		char have[256] = "";

		for (unsigned k = 0; k < s->ncommits; k++)
			snprintf(have + strlen(have), sizeof(have) - strlen(have), "%s%" PRIu64,
				 k ? ", " : "", s->c[k].gen);
		return ts_err(-ENOENT, "nvme0 (%s): generation %" PRIu64 " is not among the kept commits (%s)",
			      p0->file, r->want, have);
	}
	if (r->want)
		return ts_err(-EBADMSG, "nvme0 (%s): cannot roll back to generation %" PRIu64 ": %s; nothing was changed, and the newer commits are kept",
			      p0->file, r->want, r->why);
	return ts_err(-EBADMSG, "nvme0 (%s): no kept commit of store '%s' can be loaded: %s; nothing was changed",
		      p0->file, p0->hdr_name, r->why);
}

/*
 * Loads the newest commit of the ring r->s that loads, or the one asked
 * for, and says where it is in the ring (r->at).  A rollback must also
 * show its data whole before the newer commits are dropped; when it
 * cannot, nothing is changed.  Only a damaged commit is passed over (r->why
 * says why): an I/O error fails the open.
 */
static int pick_commit(struct reopen *r)
{
	const struct ts_nvme_slot *s = r->s;
	int rc = -ENOENT;
	unsigned i;

	for (i = 0; i < s->ncommits; i++) {
		const struct ts_nvme_commit *c = &s->c[i];
		size_t wl = strlen(r->why);
		bool fatal = false;

		if (r->want && c->gen != r->want)
			continue;
		rc = try_commit(r, i, &fatal);
		if (fatal)
			return rc;
		if (rc == 0)
			break;
		if (rc != -EBADMSG) {
			char saved[TIER_ERR_MAX];

			snprintf(saved, sizeof(saved), "%s", tier_last_error());
			return ts_err(rc, "nvme0 (%s): loading generation %" PRIu64 ": %s; nothing was changed",
				      r->p0->file, c->gen, saved);
		}
		snprintf(r->why + wl, sizeof(r->why) - wl, "%s%s", wl ? "; " : "", tier_last_error());
		if (r->want)
			break;
	}
	r->at = i;
	return rc ? pick_failed(r, rc) : 0;
}

/*
 * The ring from here (t->slot): the loaded commit, then the older ones
 * that can be held whole (their extents taken, so nothing this open
 * writes reuses one).  Newer commits go (a rollback), and so do older
 * ones that cannot be held, or that no build can vouch for (suspect).
 */
static int ring_keep(struct reopen *r, unsigned *dropped)
{
	struct tier_nvme *t = r->t;
	struct ts_nvme_slot *n = t->slot;
	unsigned i = r->at;

	memcpy(n, r->s, sizeof(*n));
	memmove(&n->c[0], &n->c[i], sizeof(n->c[0]) * (n->ncommits - i));
	n->ncommits -= i;
	memset(&n->c[n->ncommits], 0, sizeof(n->c[0]) * (TIER_NVME_MAX_KEEP - n->ncommits));
	if (r->suspect) {
		TIER_WARN(TIER_SS_NVME, "nvme0 (%s): an earlier build of tierstore opened these files since generation %" PRIu64 " and may have reused the extents of the %u older kept commit(s); with checksum: none they cannot be verified, so only generation %" PRIu64 " is kept",
			  r->p0->file, n->c[1].gen, n->ncommits - 1, n->c[0].gen);
		memset(&n->c[1], 0, sizeof(n->c[0]) * (TIER_NVME_MAX_KEEP - 1));
		n->ncommits = 1;
	}
	return hold_older(t, n, 0, &r->l, dropped);
}

/* The tier takes the ring t->slot.  One that changed (a rollback, commits
 * dropped) is written durably, before anything can overwrite an extent
 * only the dropped commits name. */
static int ring_publish(struct reopen *r, unsigned dropped)
{
	struct tier_nvme *t = r->t;
	struct ts_nvme_slot *n = t->slot;
	int rc;

	t->seq = r->s->seq;
	t->next_gen = r->s->next_gen;
	t->gen = n->c[0].gen;
	t->restored = true;
	if (!(r->at > 0 || r->suspect || dropped))
		return 0;
	n->seq = t->seq + 1;
	rc = nvme_slot_write(t, n);
	if (rc) {
		char saved[TIER_ERR_MAX];

		snprintf(saved, sizeof(saved), "%s", tier_last_error());
		return ts_err(rc, "nvme0 (%s): %s generation %" PRIu64 ": %s", r->p0->file,
			      r->at > 0 ? "rolling back to" : "keeping the commits from", t->gen, saved);
	}
	t->seq = n->seq;
	return 0;
}

static void reopen_log(const struct reopen *r)
{
	struct tier_nvme *t = r->t;
	char when[32];

	if (r->at > 0) {
		nvme_gen_time(t->slot->c[0].time_ns, when, sizeof(when));
		if (r->want)
			TIER_INFO(TIER_SS_NVME, "nvme: opened at generation %" PRIu64 " (%s), as asked, its data verified; the %u newer commit(s) are dropped",
				  t->gen, when, r->at);
		else
			TIER_WARN(TIER_SS_NVME, "nvme0 (%s): %s; rolled back to generation %" PRIu64 " (%s), its data verified",
				  r->p0->file, r->why, t->gen, when);
	}
	nvme_gen_time(t->slot->c[0].time_ns, when, sizeof(when));
	TIER_INFO(TIER_SS_NVME, "nvme: reopened store '%s' at generation %" PRIu64 " (committed %s): %" PRIu64 " objects",
		  r->p0->hdr_name, t->gen, when, r->l.count);
}

int nvme_commit_load(struct tier_nvme *t, uint64_t want)
{
	struct reopen r = { .t = t, .p0 = &t->paths[0], .want = want, .l = { .t = t } };
	unsigned dropped = 0;
	int rc;

	t->slot = nvme_aligned_zero(sizeof(*t->slot));
	if (!t->slot)
		return ts_err(-ENOMEM, "nvme: out of memory");
	t->next_gen = 1;
	if (r.p0->hdr_damaged) {
		rc = damaged_header_check(r.p0);
		if (rc)
			return rc;
	}
	if (!r.p0->had_header) {
		if (want)
			return ts_err(-ENOENT, "nvme0 (%s): generation %" PRIu64 " was asked for, and the store has no commit",
				      r.p0->file, want);
		return load_fresh(t);
	}
	rc = slots_read(&r);
	if (!rc && r.s)
		rc = files_check(&r);
	if (rc || !r.s)
		goto out;
	/*
	 * Files last opened by an earlier build, which held only the newest
	 * commit's extents and so may have written over an older one's:
	 * with checksums a rollback shows whether it did; without, nothing
	 * can, so only the newest commit is offered, and it alone is kept.
	 */
	r.suspect = !(r.p0->hdr_flags & TIER_NVME_HDR_HOLDS_KEPT) && !t->csum && r.s->ncommits > 1;
	rc = pick_commit(&r);
	if (!rc)
		rc = ring_keep(&r, &dropped);
	if (!rc)
		rc = ring_publish(&r, dropped);
	if (!rc)
		reopen_log(&r);
out:
	free(r.a);
	free(r.b);
	return rc;
}
