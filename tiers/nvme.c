/*
 * nvme.c - the NVMe tier: backing files and their headers, open and close,
 * the objects (their extents on each path), the stats.  The io_uring
 * engine is tiers/nvme_ring.c, the request path (striping a request into
 * device operations) tiers/nvme_req.c; tiers/nvme_impl.h holds what the
 * three share.
 *
 * Layout.  Each manifest path has one backing file: a 4 KiB header
 * (nvme_format.h) then `capacity` data bytes from data_off.  An object of
 * n stripe units (unit size U) puts unit k on path (k + rot) % P, in slot
 * k / P of one extent it owns on that path; rot spreads small objects over
 * the paths.  So a large request keeps every path's queue busy at once.
 *
 * Locking.  ring->lock guards the SQ side (pending, inflight, SQEs); the
 * CQ side belongs to the ring's thread alone.  t->lock guards the object
 * list and the allocators.  Callbacks run with no lock held.
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <time.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/error.h"
#include "common/fault.h"
#include "common/log.h"
#include "common/units.h"
#include "kernels/crc32c.h"
#include "tiers/extent.h"
#include "tiers/nvme.h"
#include "tiers/nvme_format.h"
#include "tiers/nvme_impl.h"

/* --------------------------------------------------------------- helpers */

uint64_t nvme_round_up(uint64_t v, uint64_t a)
{
	return (v + a - 1) / a * a;
}

static int path_lbs(int fd)
{
	struct stat st;
	char p[128];
	FILE *f;
	int v = 0;

	if (fstat(fd, &st) != 0)
		return 0;
	snprintf(p, sizeof(p), "/sys/dev/block/%u:%u/queue/logical_block_size",
		 major(st.st_dev), minor(st.st_dev));
	f = fopen(p, "re");
	if (!f) {
		snprintf(p, sizeof(p), "/sys/dev/block/%u:%u/../queue/logical_block_size",
			 major(st.st_dev), minor(st.st_dev));
		f = fopen(p, "re");
	}
	if (f) {
		if (fscanf(f, "%d", &v) != 1)
			v = 0;
		fclose(f);
	}
	return v;
}

/* ------------------------------------------------------------ headers */

void nvme_header_seal(struct ts_nvme_header *h)
{
	h->header_crc = ts_crc32c(0, h, offsetof(struct ts_nvme_header, header_crc));
}

int nvme_header_check(const struct ts_nvme_header *h, const char *file)
{
	if (memcmp(h->magic, TIER_NVME_MAGIC, 8) != 0)
		return ts_err(-ENOMSG, "%s: not a tierstore backing file (no header)", file);
	if (h->version != TIER_NVME_FORMAT_VERSION || h->header_size != TIER_NVME_HEADER_SIZE)
		return ts_err(-EPROTO, "%s: tierstore backing file of format version %u (this library writes version %u)",
				file, h->version, TIER_NVME_FORMAT_VERSION);
	if (ts_crc32c(0, h, offsetof(struct ts_nvme_header, header_crc)) != h->header_crc)
		return ts_err(-EBADMSG, "%s: the header is damaged (crc32c mismatch)", file);
	return 0;
}

static int header_io(struct nvme_path *p, struct ts_nvme_header *h, bool write)
{
	ssize_t n;
	int rc = ts_fault_check(TIER_FAULT_NVME_HEADER);

	if (rc)
		return ts_err(rc, "nvme%d (%s): header %s: %s", p->index, p->file,
				write ? "write" : "read", tier_strerror(rc));
	do {
		n = write ? pwrite(p->fd, h, sizeof(*h), 0) : pread(p->fd, h, sizeof(*h), 0);
	} while (n < 0 && errno == EINTR);
	if (n < 0)
		return ts_err(-errno, "nvme%d (%s): header %s: %s", p->index, p->file,
				write ? "write" : "read", tier_strerror(errno));
	if ((size_t)n != sizeof(*h))
		return ts_err(write ? -EIO : -ENOMSG, "nvme%d (%s): header %s: short transfer (%zd bytes)",
				p->index, p->file, write ? "write" : "read", n);
	return 0;
}


static void fill_header(struct tier_nvme *t, struct nvme_path *p, struct ts_nvme_header *h,
			uint64_t capacity, bool clean)
{
	memset(h, 0, sizeof(*h));
	memcpy(h->magic, TIER_NVME_MAGIC, 8);
	h->version = TIER_NVME_FORMAT_VERSION;
	h->header_size = TIER_NVME_HEADER_SIZE;
	memcpy(h->store_uuid, t->uuid, 16);
	memcpy(h->store_name, t->name, strnlen(t->name, sizeof(h->store_name)));
	h->path_index = (uint32_t)p->index;
	h->npaths = t->npaths;
	h->stripe_unit = t->unit;
	h->block_size = p->block;
	h->data_offset = p->data_off;
	h->capacity = capacity;
	h->checksum = t->csum ? 1 : 0;
	h->flags = (clean ? TIER_NVME_HDR_CLEAN : 0) | TIER_NVME_HDR_HOLDS_KEPT;
	if ((t->flags & TIER_NVME_SCRATCH) && p->created)
		h->flags |= TIER_NVME_HDR_SCRATCH;
	h->owner_pid = (uint32_t)getpid();
	if (!p->created_ns)
		p->created_ns = ts_wall_ns();
	h->created_ns = p->created_ns;
	h->closed_ns = clean ? ts_wall_ns() : 0;
	nvme_header_seal(h);
}

int nvme_file_header_write(struct tier_nvme *t, struct nvme_path *p, bool clean)
{
	struct ts_nvme_header *h = NULL;
	int rc;

	if (posix_memalign((void **)&h, 4096, sizeof(*h)) != 0)
		return ts_err(-ENOMEM, "nvme: out of memory");
	fill_header(t, p, h, p->capacity, clean);
	rc = header_io(p, h, true);
	free(h);
	return rc;
}

int nvme_file_header_read(struct nvme_path *p, struct ts_nvme_header *h)
{
	return header_io(p, h, false);
}

/* --------------------------------------------------------- open, close */

static int mkdir_p(const char *dir)
{
	char buf[PATH_MAX];
	int rc = ts_fault_check(TIER_FAULT_MKDIR);

	if (rc)
		return ts_err(rc, "%s: mkdir: %s", dir, tier_strerror(rc));
	snprintf(buf, sizeof(buf), "%s", dir);
	for (char *q = buf + 1; *q; q++) {
		if (*q != '/')
			continue;
		*q = '\0';
		if (mkdir(buf, 0700) != 0 && errno != EEXIST)
			return ts_err(-errno, "%s: mkdir: %s", buf, tier_strerror(errno));
		*q = '/';
	}
	if (mkdir(buf, 0700) != 0 && errno != EEXIST)
		return ts_err(-errno, "%s: mkdir: %s", buf, tier_strerror(errno));
	return 0;
}

/* Opens one backing file (tiers/nvme_file.c), after its directory if it
 * may create that, and checks the device's block size. */
static int path_open(struct tier_nvme *t, struct nvme_path *p, const struct tiers_path_cfg *pc)
{
	int rc, lbs;

	p->index = (int)(pc - t->cfg->paths);
	p->direct = pc->direct;
	p->block = pc->block_size;
	p->qd = pc->queue_depth;
	p->capacity = pc->capacity;
	p->fd = -1;
	p->dfd = -1;
	p->file = ts_strdup(pc->file);
	if (!p->file)
		return ts_err(-ENOMEM, "nvme: out of memory");
	if (pc->create) {
		char dir[PATH_MAX];
		char *slash;

		snprintf(dir, sizeof(dir), "%s", pc->file);
		slash = strrchr(dir, '/');
		if (slash && slash != dir) {
			*slash = '\0';
			rc = mkdir_p(dir);
			if (rc)
				return rc;
		}
	}
	rc = ts_fault_check(TIER_FAULT_NVME_OPEN);
	if (rc)
		return ts_err(rc, "nvme%d (%s): open: %s", p->index, p->file, tier_strerror(rc));
	if (p->block < 4096)
		p->block = 4096; /* extents and headers are at least 4 KiB aligned */
	/* The data area and every extent start on an `align` boundary, so a
	 * stripe unit never straddles the device's larger internal chunks. */
	p->data_off = nvme_round_up(TIER_NVME_META_END, t->align);
	rc = nvme_file_open(t, p);
	if (rc)
		return rc;
	p->file_end = p->data_off;
	lbs = path_lbs(p->fd);
	if (p->direct && lbs > (int)pc->block_size)
		return ts_err(-EINVAL, "nvme%d (%s): block_size %u is below the device's logical block size %d",
				p->index, p->file, pc->block_size, lbs);
	return extents_init(&p->alloc, pc->capacity, t->align);
}

/* Removes the file this open created, if its name still is that file
 * (the lock is still held, so no other store has it). */
static void unlink_own(struct nvme_path *p)
{
	struct stat a, b;

	if (fstat(p->fd, &a) == 0 && fstatat(p->dfd, p->base, &b, AT_SYMLINK_NOFOLLOW) == 0 &&
	    a.st_dev == b.st_dev && a.st_ino == b.st_ino)
		unlinkat(p->dfd, p->base, 0);
}

static void drain(struct tier_nvme *t)
{
	pthread_mutex_lock(&t->drain_lock);
	while (atomic_load(&t->inflight_reqs) > 0)
		pthread_cond_wait(&t->drained, &t->drain_lock);
	pthread_mutex_unlock(&t->drain_lock);
}

int tier_nvme_close(struct tier_nvme *t)
{
	int rc = 0;

	if (!t)
		return 0;
	NVME_ARG(t); /* closed twice: refused while its memory is still there */
	atomic_store(&t->closing, true);
	drain(t);
	for (unsigned i = 0; i < t->npaths; i++) {
		struct nvme_path *p = &t->paths[i];

		nvme_ring_stop(p);
		if (p->fd >= 0) {
			bool remove = (t->flags & TIER_NVME_SCRATCH) && p->created;

			/* A clean header only on files that are ours, after an
			 * open that completed (t->opened), unless about to go. */
			if (p->owned && t->opened && !remove) {
				/* A scratch store gives back the space of a file it
				 * only borrowed. */
				if ((t->flags & TIER_NVME_SCRATCH) &&
				    ftruncate(p->fd, (off_t)p->data_off) != 0 && rc == 0)
					rc = ts_err(-errno, "nvme%d (%s): truncating: %s", p->index,
						    p->file, tier_strerror(errno));
				if (nvme_file_header_write(t, p, true) && rc == 0)
					rc = -EIO;
				if (fsync(p->fd) != 0 && rc == 0)
					rc = ts_err(-errno, "nvme%d (%s): fsync: %s", p->index,
						      p->file, tier_strerror(errno));
			}
			if (remove)
				unlink_own(p);
			close(p->fd); /* and so the lock goes */
		}
		if (p->dfd >= 0)
			close(p->dfd);
		extents_fini(&p->alloc);
		free(p->file);
	}
	ts_names_free(&t->names);
	while (t->objs) {
		struct tier_nvme_obj *o = t->objs;

		t->objs = o->next;
		free(o->name);
		free(o->crc);
		free(o->crc_ok);
		free((void *)o->moved);
		free(o);
	}
	nvme_commit_fini(t);
	nvme_gates_fini(t);
	pthread_mutex_destroy(&t->lock);
	pthread_mutex_destroy(&t->drain_lock);
	pthread_cond_destroy(&t->drained);
	free(t->paths);
	t->magic = TS_MAGIC_DEAD;
	free(t);
	return rc;
}

int nvme_open(const struct tiers_cfg *c, unsigned flags, uint64_t generation,
	      struct tier_nvme **out)
{
	struct tier_nvme *t;
	int rc = 0;

	*out = NULL;
	ts_err_clear();
	if (c->npaths == 0)
		return ts_err(-ENODEV, "%s: the manifest has no NVMe paths", c->source);
	t = ts_calloc(1, sizeof(*t));
	if (!t)
		return ts_err(-ENOMEM, "nvme: out of memory");
	t->magic = NVME_MAGIC;
	t->cfg = c;
	ts_names_init(&t->names, nvme_obj_key, NULL);
	snprintf(t->name, sizeof(t->name), "%s", c->name);
	t->flags = flags;
	t->keep = c->keep_commits ? c->keep_commits : 2;
	if (t->keep > TIER_NVME_MAX_KEEP)
		t->keep = TIER_NVME_MAX_KEEP;
	t->unit = (uint32_t)c->stripe_unit;
	t->csum = c->checksum == TIER_CSUM_CRC32C;
	t->block = 4096;
	for (size_t i = 0; i < c->npaths; i++)
		if (c->paths[i].block_size > t->block)
			t->block = c->paths[i].block_size;
	t->align = t->unit < (1u << 20) ? t->unit : (1u << 20);
	if (t->align < t->block)
		t->align = t->block;
	if (getrandom(t->uuid, sizeof(t->uuid), 0) != (ssize_t)sizeof(t->uuid)) {
		uint64_t x = ts_now_ns() ^ (uint64_t)getpid() << 32;

		memcpy(t->uuid, &x, 8);
	}
	pthread_mutex_init(&t->lock, NULL);
	pthread_mutex_init(&t->drain_lock, NULL);
	pthread_cond_init(&t->drained, NULL);
	nvme_gates_init(t);
	t->paths = ts_calloc(c->npaths, sizeof(*t->paths));
	if (!t->paths) {
		rc = ts_err(-ENOMEM, "nvme: out of memory");
		goto fail;
	}
	t->npaths = (unsigned)c->npaths;
	for (unsigned i = 0; i < t->npaths; i++) {
		t->paths[i].t = t;
		t->paths[i].fd = -1;
		t->paths[i].dfd = -1;
	}
	for (unsigned i = 0; i < t->npaths; i++) {
		rc = path_open(t, &t->paths[i], &c->paths[i]);
		if (rc)
			goto fail;
		/*
		 * The store keeps the identity its path 0 has: files this open
		 * creates, and the headers it rewrites, carry that uuid, so an
		 * open killed half way through writing them leaves the files
		 * one store's (nvme_commit_load checks they are).
		 */
		if (i == 0 && t->paths[0].had_header)
			memcpy(t->uuid, t->paths[0].hdr_uuid, sizeof(t->uuid));
	}
	/* Every file open and locked: the committed state they hold, if
	 * any, then their headers (not clean while open). */
	rc = nvme_commit_load(t, generation);
	if (rc)
		goto fail;
	for (unsigned i = 0; i < t->npaths; i++) {
		rc = nvme_file_header_write(t, &t->paths[i], false);
		if (rc)
			goto fail;
		rc = nvme_ring_open(t, &t->paths[i], &c->paths[i]);
		if (rc)
			goto fail;
	}
	TIER_INFO(TIER_SS_NVME, "NVMe tier: %u path(s), stripe unit %u, checksums %s",
		  t->npaths, t->unit, t->csum ? "crc32c" : "off");
	/* The configuration may be freed from now on: nothing below reads it. */
	t->cfg = NULL;
	t->opened = true;
	*out = t;
	return 0;
fail:
	{
		char saved[TIER_ERR_MAX];

		snprintf(saved, sizeof(saved), "%s", tier_last_error());
		/* Leave nothing behind: files this open created go too. */
		t->flags |= TIER_NVME_SCRATCH;
		tier_nvme_close(t);
		ts_err(rc, "%s", saved);
	}
	return rc;
}

/* ------------------------------------------------------------ objects */

/* Units of an n-unit object rotated by rot that land on path p. */
static uint64_t units_on_path(uint64_t n, unsigned npaths, unsigned rot, unsigned p)
{
	uint64_t r = (p + npaths - rot % npaths) % npaths; /* first unit index on p */

	return r < n ? (n - r + npaths - 1) / npaths : 0;
}

uint64_t nvme_ext_len(const struct tier_nvme *t, uint64_t size, unsigned rot, unsigned p)
{
	uint64_t n = size / t->unit + (size % t->unit != 0);
	uint64_t units = units_on_path(n, t->npaths, rot, p);

	if (units && (n - 1 + rot) % t->npaths == p)
		/* This path holds the last unit, which may be short. */
		return (units - 1) * t->unit + nvme_round_up(size - (n - 1) * t->unit, t->block);
	return units * t->unit;
}

int tier_nvme_obj_create(struct tier_nvme *t, const char *name, uint64_t size,
			 struct tier_nvme_obj **out)
{
	NVME_ARG(t);
	TS_NONNULL(name);
	TS_NONNULL(out);
	struct tier_nvme_obj *o;
	unsigned allocated = 0;
	int rc = 0;

	*out = NULL;
	ts_err_clear();
	if (!name || !*name || strlen(name) > 255 || size == 0)
		return ts_err(-EINVAL, "nvme: an object needs a name (1-255 bytes) and a size above zero");
	{
		uint64_t total = 0;

		for (unsigned p = 0; p < t->npaths; p++)
			total += t->paths[p].alloc.total;
		if (size > total)
			return ts_err(-ENOSPC, "nvme: no room for object '%s' (%" PRIu64
					" bytes): the tier holds %" PRIu64 " bytes in all", name, size, total);
	}
	o = ts_calloc(1, sizeof(*o));
	if (!o)
		return ts_err(-ENOMEM, "nvme: out of memory");
	o->name = ts_strdup(name);
	o->size = size;
	o->nunits = size / t->unit + (size % t->unit != 0);
	o->crc = ts_calloc(o->nunits, sizeof(*o->crc));
	o->crc_ok = ts_calloc(o->nunits, 1);
	if (!o->name || !o->crc || !o->crc_ok) {
		rc = ts_err(-ENOMEM, "nvme: out of memory for object '%s'", name);
		goto fail;
	}
	pthread_mutex_lock(&t->lock);
	if (ts_names_find(&t->names, name)) {
		pthread_mutex_unlock(&t->lock);
		rc = ts_err(-EEXIST, "nvme: an object named '%s' exists", name);
		goto fail;
	}
	rc = ts_names_reserve(&t->names, 1); /* so that linking it below cannot fail */
	if (rc) {
		pthread_mutex_unlock(&t->lock);
		goto fail;
	}
	o->rot = t->next_rot++ % t->npaths;
	for (unsigned p = 0; p < t->npaths; p++, allocated++) {
		uint64_t bytes = nvme_ext_len(t, o->size, o->rot, p);

		o->ext_len[p] = bytes;
		if (!bytes)
			continue;
		rc = extents_alloc(&t->paths[p].alloc, bytes, &o->ext_off[p]);
		if (rc == 0) {
			rc = nvme_file_grow(&t->paths[p], o->ext_off[p] + bytes, name);
			if (rc) {
				extents_free(&t->paths[p].alloc, o->ext_off[p], bytes);
				break;
			}
		} else {
			char a[32], b[32], d[32];

			rc = ts_err(rc == -ENOSPC ? -ENOSPC : rc,
				      "nvme%u (%s): no room for object '%s' (%s): it needs %s on this path, the largest free extent is %s (%s free in all)",
				      p, t->paths[p].file, name, ts_size_fmt(size, a, sizeof(a)),
				      ts_size_fmt(bytes, b, sizeof(b)),
				      ts_size_fmt(extents_largest(&t->paths[p].alloc), d, sizeof(d)),
				      ts_size_fmt(t->paths[p].alloc.avail, (char[32]){ 0 }, 32));
			break;
		}
	}
	if (!rc)
		rc = nvme_obj_link(&t->objs, &t->names, o); /* 0 after the reserve above */
	if (rc) {
		for (unsigned p = 0; p < allocated; p++)
			if (o->ext_len[p])
				extents_free(&t->paths[p].alloc, o->ext_off[p], o->ext_len[p]);
		pthread_mutex_unlock(&t->lock);
		goto fail;
	}
	pthread_mutex_unlock(&t->lock);
	*out = o;
	return 0;
fail:
	free(o->name);
	free(o->crc);
	free(o->crc_ok);
	free(o);
	return rc;
}

const char *nvme_obj_key(const void *ctx, uintptr_t item)
{
	(void)ctx;
	return ((const struct tier_nvme_obj *)item)->name;
}

int nvme_obj_link(struct tier_nvme_obj **head, struct ts_names *names, struct tier_nvme_obj *o)
{
	int rc = ts_names_insert(names, (uintptr_t)o);

	if (rc)
		return rc;
	o->prev = NULL;
	o->next = *head;
	if (*head)
		(*head)->prev = o;
	*head = o;
	return 0;
}

void nvme_obj_unlink(struct tier_nvme_obj **head, struct ts_names *names, struct tier_nvme_obj *o)
{
	if (o->prev)
		o->prev->next = o->next;
	else if (*head == o)
		*head = o->next;
	else
		return; /* not on the list */
	if (o->next)
		o->next->prev = o->prev;
	o->prev = o->next = NULL;
	ts_names_remove(names, (uintptr_t)o, o->name);
}

int tier_nvme_obj_destroy(struct tier_nvme *t, struct tier_nvme_obj *o)
{
	NVME_ARG(t);
	TS_NONNULL(o);

	if (atomic_load(&o->busy))
		return ts_err(-EBUSY, "nvme: object '%s' has requests in flight", o->name);
	pthread_mutex_lock(&t->lock);
	nvme_obj_unlink(&t->objs, &t->names, o);
	nvme_obj_release_extents(t, o);
	pthread_mutex_unlock(&t->lock);
	free(o->name);
	free(o->crc);
	free(o->crc_ok);
	free((void *)o->moved);
	free(o);
	return 0;
}

uint64_t tier_nvme_obj_size(const struct tier_nvme_obj *o)
{
	TS_NONNULL_OR(o, 0);
	return o->size;
}

const char *tier_nvme_obj_name(const struct tier_nvme_obj *o)
{
	TS_NONNULL_OR(o, NULL);
	return o->name;
}

/* ---------------------------------------------------------------- stats */

void tier_nvme_get_stats(const struct tier_nvme *t, struct tier_nvme_stats *out)
{
	NVME_ARG_OR(t, );
	TS_NONNULL_OR(out, );
	struct tier_nvme *m = (struct tier_nvme *)t;

	memset(out, 0, sizeof(*out));
	pthread_mutex_lock(&m->lock);
	for (unsigned i = 0; i < t->npaths; i++) {
		out->capacity += t->paths[i].alloc.total;
		out->free += t->paths[i].alloc.avail;
	}
	pthread_mutex_unlock(&m->lock);
	out->bytes_read = atomic_load(&m->bytes_read);
	out->bytes_written = atomic_load(&m->bytes_written);
	out->requests = atomic_load(&m->requests);
	out->ios = atomic_load(&m->ios);
	out->errors = atomic_load(&m->errors);
	out->csum_errors = atomic_load(&m->csum_errors);
	out->short_ios = atomic_load(&m->short_ios);
	out->retries = atomic_load(&m->retries);
	out->bounced = atomic_load(&m->bounced);
	out->npaths = t->npaths;
	out->stripe_unit = t->unit;
}

void nvme_for_each_obj(struct tier_nvme *t, void (*fn)(void *arg, struct tier_nvme_obj *o),
		       void *arg)
{
	pthread_mutex_lock(&t->lock);
	for (struct tier_nvme_obj *o = t->objs; o; o = o->next)
		fn(arg, o);
	pthread_mutex_unlock(&t->lock);
}

bool nvme_obj_written(const struct tier_nvme_obj *o)
{
	return atomic_load_explicit(&((struct tier_nvme_obj *)o)->written, memory_order_relaxed);
}
