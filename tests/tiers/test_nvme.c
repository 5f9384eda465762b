/*
 * test_nvme.c - the NVMe tier (tiers/nvme.c) on real backing files in
 * scratch directories under $TIER_TEST_TMPDIR (a local disk: O_DIRECT
 * works there).
 *
 * Covers:
 *  - the backing files: the header written at open (not clean) and at
 *    close (clean), every field, nvme_header_check() on it and on damaged
 *    copies; mode 0600, size = data area + capacity, preallocated; a file
 *    that is not ours (or of another format version) is refused and left
 *    untouched; our own file is reused; a damaged header of ours is
 *    reinitialised;
 *  - objects: placement until -ENOSPC (with the detail), rollback of a
 *    failed placement, destroy and create again, names, sizes, the stats'
 *    capacity and free, fragmentation;
 *  - striping over 1, 2 and 3 paths and stripe units of 64 KiB, 256 KiB
 *    and 1 MiB: object sizes that are multiples of the unit, not, below
 *    one unit, one block, one byte; whole-object I/O, the layout in the
 *    files (unit k on path (k + rot) % P), and random partial reads and
 *    writes at odd offsets and lengths from unaligned buffers, checked
 *    against a reference copy;
 *  - concurrency: threads with their own objects and many requests in
 *    flight (callbacks and tickets) through queue_depth 4;
 *  - requests on one stripe unit at once: threads writing disjoint and
 *    overlapping parts of one unit (and reading it) through
 *    tier_nvme_write; tier-bench io's 256 KiB requests at queue depth 4 on
 *    1 MiB units; one thread's burst of writes and reads over a unit, each
 *    read seeing exactly the writes submitted before it;
 *  - close drains every request (each callback exactly once);
 *  - invalid requests, a manifest without NVMe paths;
 *  - checksums: a bit flipped on read is caught with crc32c and the unit
 *    read again (the right bytes come back), a unit bad on every read
 *    fails after the bounded retries (-EBADMSG, detail); not caught with
 *    checksum: none;
 *  - every fault site of the tier: I/O errors (read, write, partial
 *    write): a transient -EIO, -ETIMEDOUT or -EILSEQ retried (the right
 *    bytes, the warning naming file, object, offset and errno), one that
 *    outlasts the retries or persists failing the request (detail, the
 *    retries counted), -ENOSPC not retried, -EAGAIN/-EINTR retries, short transfers, delays, failed
 *    submissions (also of a short transfer's rest), failures while
 *    opening (and creating the directory), refused registration, and
 *    allocation failure at every step (each run in its own process) and
 *    in the middle of a write (every unit then reads back old or new);
 *  - fixed buffers, and -EBUSY while a request is in flight (and not
 *    after a synchronous call has returned);
 *  - O_DIRECT refused (ramfs in a private mount namespace), and a tmpfs
 *    path with direct: false.
 *
 * Tests marked "REGRESSION" guard bugs this suite found in tiers/nvme.c
 * (all fixed); the comment above each says what used to go wrong.
 */
#include "config.h"

#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <sched.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/error.h"
#include "common/fault.h"
#include "common/log.h"
#include "runtime/manifest/manifest.h"
#include "tiers/nvme_format.h"
#include "t_helpers.h"

#define KiB (1ull << 10)
#define MiB (1ull << 20)
#define U64(x) ((unsigned long long)(x))

static char *g_dir;

/* Something for an out-parameter to point at, so a test sees it reset to NULL. */
static char g_poison;
#define POISON(T) ((T *)(void *)&g_poison)

static void setup(void)
{
	char p[4096];

	ts_fault_reset_all();
	ts_err_clear();
	g_dir = t_mkdtemp();
	setenv("T", g_dir, 1);
	for (int i = 0; i < 3; i++) {
		snprintf(p, sizeof(p), "%s/p%d", g_dir, i);
		ck_assert_int_eq(mkdir(p, 0700), 0);
	}
}

static void teardown(void)
{
	ts_fault_reset_all();
	t_rmtree(g_dir);
	free(g_dir);
	g_dir = NULL;
}

/* ------------------------------------------------------------ helpers */

static void fill_rand(void *p, size_t n, uint64_t *s)
{
	unsigned char *b = p;

	while (n >= 8) {
		uint64_t v = t_rnd_next(s);

		memcpy(b, &v, 8);
		b += 8;
		n -= 8;
	}
	while (n--)
		*b++ = (unsigned char)t_rnd_next(s);
}

static uint64_t min_u64(uint64_t a, uint64_t b)
{
	return a < b ? a : b;
}

static uint64_t round_up(uint64_t v, uint64_t a)
{
	return (v + a - 1) / a * a;
}

/*
 * The allocation alignment (docs/nvme-format.md): the stripe unit, at
 * most 1 MiB, at least the block size (4096 in every test here).  The data
 * area starts there and every extent is a multiple of it.
 */
static uint64_t align_of(uint64_t unit)
{
	uint64_t a = unit < MiB ? unit : MiB;

	return a < 4096 ? 4096 : a;
}

/* Page-aligned memory with @extra bytes of room past @size. */
static unsigned char *abuf(size_t size)
{
	void *p = NULL;

	ck_assert_int_eq(posix_memalign(&p, 4096, round_up(size + 8192, 4096)), 0);
	memset(p, 0, round_up(size + 8192, 4096));
	return p;
}

static void assert_same(const unsigned char *got, const unsigned char *want, size_t n,
			const char *what)
{
	if (memcmp(got, want, n) == 0)
		return;
	for (size_t i = 0; i < n; i++)
		if (got[i] != want[i])
			ck_abort_msg("%s: first difference at byte %zu of %zu: got %02x, expected %02x",
				     what, i, n, got[i], want[i]);
}

/* What a manifest for a test says. */
struct mopt {
	unsigned npaths;        /* 1..3: ${T}/p0/, ${T}/p1/, ${T}/p2/ */
	uint64_t unit;          /* stripe unit; 0: 64 KiB */
	bool nocsum;            /* checksum: none */
	unsigned qd;            /* queue_depth; 0: the default */
	uint64_t capacity;      /* per path; 0: 64 MiB */
	int direct;             /* 0: the default, 1: true, -1: false */
	const char *name;       /* store name; NULL: the default */
	const char *path0;      /* in place of ${T}/p0/ */
};

static int manifest_try(const struct mopt *o, struct tier_manifest **m, char *text, size_t len)
{
	size_t n = 0;

	n += (size_t)snprintf(text + n, len - n, "%s%s%s", o->name ? "name: " : "",
			      o->name ? o->name : "", o->name ? "\n" : "");
	n += (size_t)snprintf(text + n, len - n,
			      "gpu:\n  device: none\ndram:\n  capacity: 512MiB\nnvme:\n"
			      "  stripe_unit: %llu\n  checksum: %s\n",
			      U64(o->unit ? o->unit : 64 * KiB), o->nocsum ? "none" : "crc32c");
	if (o->qd)
		n += (size_t)snprintf(text + n, len - n, "  queue_depth: %u\n", o->qd);
	if (o->direct)
		n += (size_t)snprintf(text + n, len - n, "  direct: %s\n",
				      o->direct > 0 ? "true" : "false");
	n += (size_t)snprintf(text + n, len - n, "  paths:\n");
	for (unsigned i = 0; i < (o->npaths ? o->npaths : 1); i++) {
		if (i == 0 && o->path0)
			n += (size_t)snprintf(text + n, len - n, "    - path: %s\n", o->path0);
		else
			n += (size_t)snprintf(text + n, len - n, "    - path: ${T}/p%u/\n", i);
		n += (size_t)snprintf(text + n, len - n, "      capacity: %llu\n",
				      U64(o->capacity ? o->capacity : 64 * MiB));
	}
	ck_assert_uint_lt(n, len);
	return tier_manifest_parse(text, n, "nvme-test.yaml", 0, m);
}

static struct tier_manifest *manifest_for(const struct mopt *o)
{
	struct tier_manifest *m = NULL;
	char text[4096];
	int rc = manifest_try(o, &m, text, sizeof(text));

	ck_assert_msg(rc == 0, "manifest refused: %s\n%s", tier_last_error(), text);
	return m;
}

static const char *file_of(const struct tier_manifest *m, unsigned i)
{
	return m->tiers.paths[i].file;
}

static struct tier_nvme *open_tier(const struct tier_manifest *m, unsigned flags)
{
	struct tier_nvme *t = NULL;
	int rc = tier_nvme_open(m, flags, &t);

	ck_assert_msg(rc == 0, "tier_nvme_open: %s: %s", tier_strerror(rc), tier_last_error());
	ck_assert_ptr_nonnull(t);
	return t;
}

static void close_tier(struct tier_nvme *t)
{
	int rc = tier_nvme_close(t);

	ck_assert_msg(rc == 0, "tier_nvme_close: %s: %s", tier_strerror(rc), tier_last_error());
}

static struct tier_nvme_obj *make_obj(struct tier_nvme *t, const char *name, uint64_t size)
{
	struct tier_nvme_obj *o = NULL;
	int rc = tier_nvme_obj_create(t, name, size, &o);

	ck_assert_msg(rc == 0, "create '%s' (%llu bytes): %s: %s", name, U64(size),
		      tier_strerror(rc), tier_last_error());
	ck_assert_ptr_nonnull(o);
	ck_assert_uint_eq(tier_nvme_obj_size(o), size);
	ck_assert_str_eq(tier_nvme_obj_name(o), name);
	return o;
}

static void xwrite(struct tier_nvme *t, struct tier_nvme_obj *o, uint64_t off, uint64_t len,
		   const void *buf)
{
	int rc = tier_nvme_write(t, o, off, len, buf);

	ck_assert_msg(rc == 0, "write of '%s' at %llu, %llu bytes, buffer %p: %s: %s",
		      tier_nvme_obj_name(o), U64(off), U64(len), buf, tier_strerror(rc),
		      tier_last_error());
}

static void xread(struct tier_nvme *t, struct tier_nvme_obj *o, uint64_t off, uint64_t len,
		  void *buf)
{
	int rc = tier_nvme_read(t, o, off, len, buf);

	ck_assert_msg(rc == 0, "read of '%s' at %llu, %llu bytes, buffer %p: %s: %s",
		      tier_nvme_obj_name(o), U64(off), U64(len), buf, tier_strerror(rc),
		      tier_last_error());
}

/* Reads [off, off + len) and compares it with ref + off. */
static void check_range(struct tier_nvme *t, struct tier_nvme_obj *o, const unsigned char *ref,
			uint64_t off, uint64_t len)
{
	unsigned char *b = abuf(len);
	char what[256];

	memset(b, 0x5a, len);
	xread(t, o, off, len, b);
	snprintf(what, sizeof(what), "'%s' at %llu, %llu bytes", tier_nvme_obj_name(o), U64(off),
		 U64(len));
	assert_same(b, ref + off, len, what);
	free(b);
}

static void read_header(const char *file, struct ts_nvme_header *h)
{
	int fd = open(file, O_RDONLY | O_CLOEXEC);
	ssize_t n;

	ck_assert_msg(fd >= 0, "%s: %s", file, strerror(errno));
	n = pread(fd, h, sizeof(*h), 0);
	ck_assert_msg(n == (ssize_t)sizeof(*h), "%s: read %zd bytes of the header", file, n);
	close(fd);
}

/* The index of the backing file the detail names, or -1. */
static int detail_file(const char *detail, const struct tier_manifest *m)
{
	for (unsigned i = 0; i < m->tiers.npaths; i++)
		if (strstr(detail, file_of(m, i)))
			return (int)i;
	return -1;
}

/* Number of regular files under ${T}/p0..p2. */
static int files_left(void)
{
	int n = 0;

	for (int i = 0; i < 3; i++) {
		char p[4096];
		DIR *d;
		struct dirent *de;

		snprintf(p, sizeof(p), "%s/p%d", g_dir, i);
		d = opendir(p);
		if (!d)
			continue;
		while ((de = readdir(d)))
			if (de->d_name[0] != '.')
				n++;
		closedir(d);
	}
	return n;
}

/* A callback that counts completions of a batch and keeps the first failure. */
struct waiter {
	pthread_mutex_t lock;
	pthread_cond_t cond;
	int outstanding;
	int calls;
	int first_err;
	char detail[512];
};

static void waiter_init(struct waiter *w)
{
	memset(w, 0, sizeof(*w));
	pthread_mutex_init(&w->lock, NULL);
	pthread_cond_init(&w->cond, NULL);
}

static void waiter_fini(struct waiter *w)
{
	pthread_mutex_destroy(&w->lock);
	pthread_cond_destroy(&w->cond);
}

static void waiter_cb(void *arg, int result, const char *detail)
{
	struct waiter *w = arg;

	pthread_mutex_lock(&w->lock);
	w->calls++;
	if (result && !w->first_err) {
		w->first_err = result;
		snprintf(w->detail, sizeof(w->detail), "%s", detail ? detail : "(null)");
	}
	w->outstanding--;
	pthread_cond_broadcast(&w->cond);
	pthread_mutex_unlock(&w->lock);
}

static void waiter_add(struct waiter *w)
{
	pthread_mutex_lock(&w->lock);
	w->outstanding++;
	pthread_mutex_unlock(&w->lock);
}

/* Submits with waiter_cb; on a refused submission undoes the count. */
static int waiter_submit(struct waiter *w, struct tier_nvme *t, struct tier_nvme_obj *o,
			 enum tier_io_op op, uint64_t off, uint64_t len, void *buf)
{
	int rc;

	waiter_add(w);
	rc = tier_nvme_submit(t, o, op, off, len, buf, waiter_cb, w);
	if (rc) {
		pthread_mutex_lock(&w->lock);
		w->outstanding--;
		pthread_mutex_unlock(&w->lock);
	}
	return rc;
}

static void waiter_wait(struct waiter *w)
{
	pthread_mutex_lock(&w->lock);
	while (w->outstanding > 0)
		pthread_cond_wait(&w->cond, &w->lock);
	pthread_mutex_unlock(&w->lock);
}

/* ------------------------------------------------------ file format */

static void check_header(const struct ts_nvme_header *h, const char *file, unsigned idx,
			 unsigned npaths, uint64_t unit, uint64_t capacity, bool csum, bool clean,
			 const char *name)
{
	ck_assert_msg(memcmp(h->magic, TIER_NVME_MAGIC, 8) == 0, "%s: magic %.8s", file, h->magic);
	ck_assert_uint_eq(h->version, 2);
	ck_assert_uint_eq(h->version, TIER_NVME_FORMAT_VERSION);
	ck_assert_uint_eq(h->header_size, TIER_NVME_HEADER_SIZE);
	ck_assert_uint_eq(h->path_index, idx);
	ck_assert_uint_eq(h->npaths, npaths);
	ck_assert_uint_eq(h->stripe_unit, unit);
	ck_assert_uint_eq(h->capacity, capacity);
	ck_assert_uint_eq(h->checksum, csum ? 1 : 0);
	ck_assert_msg((h->flags & TIER_NVME_HDR_CLEAN) == (clean ? TIER_NVME_HDR_CLEAN : 0),
		      "%s: flags %#x, expected %s", file, h->flags, clean ? "clean" : "not clean");
	ck_assert_uint_eq(h->block_size, 4096);
	ck_assert_uint_eq(h->data_offset, align_of(unit));
	ck_assert_msg(strncmp(h->store_name, name, sizeof(h->store_name)) == 0,
		      "%s: store name '%.64s', expected '%s'", file, h->store_name, name);
	ck_assert_uint_ne(h->created_ns, 0);
	if (clean)
		ck_assert_uint_ge(h->closed_ns, h->created_ns);
	ck_assert_msg(nvme_header_check(h, file) == 0, "%s: %s", file, tier_last_error());
}

struct hdr_case {
	unsigned npaths;
	uint64_t unit;
	bool nocsum;
	uint64_t capacity;
	const char *name;
};

static const struct hdr_case hdr_cases[] = {
	{ 1, 64 * KiB, false, 64 * MiB, "hdr-a" },
	{ 2, 1 * MiB, true, 96 * MiB, NULL },
	{ 3, 256 * KiB, false, 64 * MiB + 768 * KiB, "x" },
};

START_TEST(test_header_round_trip)
{
	const struct hdr_case *c = &hdr_cases[_i];
	struct mopt o = { .npaths = c->npaths, .unit = c->unit, .nocsum = c->nocsum,
			  .capacity = c->capacity, .name = c->name };
	const char *name = c->name ? c->name : "tierstore";
	struct tier_manifest *m = manifest_for(&o);
	struct ts_nvme_header h, first;

	memset(&first, 0, sizeof(first));
	struct tier_nvme *t;
	struct stat st;

	/* While open: every file has a header that is not clean. */
	t = open_tier(m, 0);
	for (unsigned i = 0; i < c->npaths; i++) {
		read_header(file_of(m, i), &h);
		check_header(&h, file_of(m, i), i, c->npaths, c->unit, c->capacity, !c->nocsum,
			     false, name);
		if (i == 0)
			first = h;
		ck_assert_msg(memcmp(h.store_uuid, first.store_uuid, 16) == 0,
			      "files of one store have different uuids");
	}
	close_tier(t);
	/* After a clean close: clean, same store. */
	for (unsigned i = 0; i < c->npaths; i++) {
		read_header(file_of(m, i), &h);
		check_header(&h, file_of(m, i), i, c->npaths, c->unit, c->capacity, !c->nocsum,
			     true, name);
		ck_assert_msg(memcmp(h.store_uuid, first.store_uuid, 16) == 0,
			      "the uuid changed at close");
		ck_assert_int_eq(stat(file_of(m, i), &st), 0);
		/* No object was placed: the file holds its header only. */
		ck_assert_uint_le((uint64_t)st.st_size, h.data_offset);
		/* For the reopen below: a mode the user set is left alone. */
		ck_assert_int_eq(chmod(file_of(m, i), 0640), 0);
	}
	/* Our own files are reused. */
	t = open_tier(m, 0);
	for (unsigned i = 0; i < c->npaths; i++) {
		ck_assert_int_eq(stat(file_of(m, i), &st), 0);
		ck_assert_uint_eq(st.st_mode & 07777, 0640);
		read_header(file_of(m, i), &h);
		check_header(&h, file_of(m, i), i, c->npaths, c->unit, c->capacity, !c->nocsum,
			     false, name);
	}
	{
		struct tier_nvme_obj *ob = make_obj(t, "after-reopen", 3 * c->unit + 5);
		unsigned char *a = abuf(3 * c->unit + 5);
		uint64_t s = 7;

		fill_rand(a, 3 * c->unit + 5, &s);
		xwrite(t, ob, 0, 3 * c->unit + 5, a);
		check_range(t, ob, a, 0, 3 * c->unit + 5);
		free(a);
	}
	close_tier(t);
	for (unsigned i = 0; i < c->npaths; i++) {
		read_header(file_of(m, i), &h);
		check_header(&h, file_of(m, i), i, c->npaths, c->unit, c->capacity, !c->nocsum,
			     true, name);
	}
	/* SCRATCH keeps files that existed before the open... */
	t = open_tier(m, TIER_NVME_SCRATCH);
	close_tier(t);
	for (unsigned i = 0; i < c->npaths; i++) {
		read_header(file_of(m, i), &h);
		ck_assert_int_eq(nvme_header_check(&h, file_of(m, i)), 0);
	}
	/* ... and removes those it created. */
	for (unsigned i = 0; i < c->npaths; i++)
		ck_assert_int_eq(unlink(file_of(m, i)), 0);
	t = open_tier(m, TIER_NVME_SCRATCH);
	for (unsigned i = 0; i < c->npaths; i++)
		ck_assert_int_eq(access(file_of(m, i), F_OK), 0);
	close_tier(t);
	ck_assert_int_eq(files_left(), 0);
	tier_manifest_free(m);
}
END_TEST

/*
 * REGRESSION (nvme.c fill_header, called from tier_nvme_close):
 * created_ns is documented as "CLOCK_REALTIME at creation"
 * (nvme_format.h) but every header write sets it to the time of that
 * write, so after a close created_ns == closed_ns, not the creation time.
 */
START_TEST(test_header_created_ns_kept)
{
	struct mopt o = { .npaths = 1 };
	struct tier_manifest *m = manifest_for(&o);
	struct ts_nvme_header h;
	struct tier_nvme *t = open_tier(m, 0);
	uint64_t created;

	read_header(file_of(m, 0), &h);
	created = h.created_ns;
	ck_assert_uint_ne(created, 0);
	close_tier(t);
	read_header(file_of(m, 0), &h);
	ck_assert_msg(h.created_ns == created,
		      "REGRESSION: created_ns %llu at open became %llu at close (closed_ns %llu): "
		      "the creation time is overwritten by every header write",
		      U64(created), U64(h.created_ns), U64(h.closed_ns));
	tier_manifest_free(m);
}
END_TEST

/*
 * The header's capacity is the most the data area may grow to, and the
 * file never grows past data_offset + capacity (docs/nvme-format.md).
 *
 * REGRESSION (nvme.c tier_nvme_close -> fill_header(..., p->alloc.total,
 * true)): at close the header gets the allocator's total - the capacity
 * rounded down to the allocation alignment - instead of the capacity
 * written at open, so for a capacity that is not a multiple of the stripe
 * unit (here 64 MiB + 32 KiB with 256 KiB units) the header changes at
 * close and no longer matches the file's data area.
 */
START_TEST(test_header_capacity_kept)
{
	struct mopt o = { .npaths = 1, .unit = 256 * KiB, .capacity = 64 * MiB + 32 * KiB };
	struct tier_manifest *m = manifest_for(&o);
	struct tier_nvme *t = open_tier(m, 0);
	struct ts_nvme_header h;
	struct stat st;
	uint64_t at_open;

	read_header(file_of(m, 0), &h);
	at_open = h.capacity;
	ck_assert_uint_eq(at_open, 64 * MiB + 32 * KiB);
	/* Fill it: the file grows to the whole data area, not past it. */
	{
		struct tier_nvme_stats ns;

		tier_nvme_get_stats(t, &ns);
		make_obj(t, "all", ns.free);
	}
	close_tier(t);
	read_header(file_of(m, 0), &h);
	ck_assert_int_eq(stat(file_of(m, 0), &st), 0);
	ck_assert_msg(h.capacity == at_open && (uint64_t)st.st_size <= h.data_offset + h.capacity &&
		      (uint64_t)st.st_size >= h.data_offset + h.capacity - 256 * KiB,
		      "REGRESSION: header capacity %llu at open, %llu after close; the data area is "
		      "%llu bytes (file size %llu - data_offset %llu)",
		      U64(at_open), U64(h.capacity), U64((uint64_t)st.st_size - h.data_offset),
		      U64(st.st_size), U64(h.data_offset));
	tier_manifest_free(m);
}
END_TEST

/*
 * TIER_NVME_SCRATCH keeps a file that existed before the open; the open
 * rewrote its header as "not clean", so the close should mark it clean
 * again.
 *
 * REGRESSION (nvme.c tier_nvme_close: the header is written only
 * without TIER_NVME_SCRATCH, but since 68caf9b/e943524 SCRATCH keeps
 * pre-existing files): a reused file closed cleanly under SCRATCH is left
 * with flags 0 (not clean) and closed_ns 0, as after a crash.
 */
START_TEST(test_scratch_kept_file_clean)
{
	struct mopt o = { .npaths = 1 };
	struct tier_manifest *m = manifest_for(&o);
	struct tier_nvme *t = open_tier(m, 0);
	struct ts_nvme_header h;

	close_tier(t);
	t = open_tier(m, TIER_NVME_SCRATCH);
	close_tier(t);
	ck_assert_int_eq(access(file_of(m, 0), F_OK), 0);
	read_header(file_of(m, 0), &h);
	ck_assert_int_eq(nvme_header_check(&h, file_of(m, 0)), 0);
	ck_assert_msg(h.flags & TIER_NVME_HDR_CLEAN,
		      "REGRESSION: a pre-existing file kept by a TIER_NVME_SCRATCH close is marked "
		      "not clean (flags %#x, closed_ns %llu)", h.flags, U64(h.closed_ns));
	tier_manifest_free(m);
}
END_TEST

struct corrupt_case {
	size_t off;
	int want;
};

static const struct corrupt_case corrupt_cases[] = {
	{ 0, -ENOMSG },
	{ 7, -ENOMSG },
	{ offsetof(struct ts_nvme_header, version), -EPROTO },
	{ offsetof(struct ts_nvme_header, header_size) + 1, -EPROTO },
	{ offsetof(struct ts_nvme_header, store_uuid) + 5, -EBADMSG },
	{ offsetof(struct ts_nvme_header, store_name), -EBADMSG },
	{ offsetof(struct ts_nvme_header, path_index), -EBADMSG },
	{ offsetof(struct ts_nvme_header, npaths), -EBADMSG },
	{ offsetof(struct ts_nvme_header, stripe_unit) + 2, -EBADMSG },
	{ offsetof(struct ts_nvme_header, capacity) + 3, -EBADMSG },
	{ offsetof(struct ts_nvme_header, checksum), -EBADMSG },
	{ offsetof(struct ts_nvme_header, flags), -EBADMSG },
	{ offsetof(struct ts_nvme_header, closed_ns) + 7, -EBADMSG },
	{ 2000, -EBADMSG },
	{ TIER_NVME_HEADER_SIZE - 5, -EBADMSG },
	{ offsetof(struct ts_nvme_header, header_crc), -EBADMSG },
	{ TIER_NVME_HEADER_SIZE - 1, -EBADMSG },
};

START_TEST(test_header_corrupt)
{
	const struct corrupt_case *c = &corrupt_cases[_i];
	struct mopt o = { .npaths = 1 };
	struct tier_manifest *m = manifest_for(&o);
	struct ts_nvme_header h;
	struct tier_nvme *t = open_tier(m, 0);
	unsigned char *raw = (unsigned char *)&h;
	int rc;

	close_tier(t);
	read_header(file_of(m, 0), &h);
	ck_assert_int_eq(nvme_header_check(&h, file_of(m, 0)), 0);
	raw[c->off] ^= 0x01;
	rc = nvme_header_check(&h, "damaged.dat");
	ck_assert_msg(rc == c->want, "byte %zu flipped: %d (%s), expected %d", c->off, rc,
		      tier_strerror(rc), c->want);
	ck_assert_ptr_nonnull(strstr(tier_last_error(), "damaged.dat"));
	if (c->want == -EBADMSG) {
		/* A damaged header of ours is reinitialised at the next open. */
		int fd = open(file_of(m, 0), O_WRONLY | O_CLOEXEC);

		ck_assert_int_ge(fd, 0);
		ck_assert_int_eq(pwrite(fd, &h, sizeof(h), 0), (ssize_t)sizeof(h));
		close(fd);
		t = open_tier(m, 0);
		close_tier(t);
		read_header(file_of(m, 0), &h);
		check_header(&h, file_of(m, 0), 0, 1, 64 * KiB, 64 * MiB, true, true, "tierstore");
	}
	tier_manifest_free(m);
}
END_TEST

/*
 * A file at a backing path that is not a tierstore file (or of another
 * format version) is refused and left exactly as it was.
 *
 * REGRESSION (nvme.c path_open + tier_nvme_open's failure path): path_open
 * returns -EEXIST / -EPROTO with the file still open (p->fd >= 0), and
 * tier_nvme_close, run on the failure path, then
 *  - without TIER_NVME_SCRATCH writes a tierstore header over the first
 *    4 KiB of the user's file (and fsyncs it);
 *  - with TIER_NVME_SCRATCH unlinks the user's file.
 * Also path_open fchmods the file to 0600 before checking whose it is.
 */
enum { FOREIGN_TEXT, FOREIGN_BINARY, FOREIGN_V1, FOREIGN_V3 };

struct foreign_case {
	const char *name;
	int kind;
	unsigned flags;
	unsigned npaths, at;
	int want;
};

static const struct foreign_case foreign_cases[] = {
	{ "short text file", FOREIGN_TEXT, 0, 1, 0, -EEXIST },
	{ "short text file, scratch", FOREIGN_TEXT, TIER_NVME_SCRATCH, 1, 0, -EEXIST },
	{ "8 KiB binary file", FOREIGN_BINARY, 0, 1, 0, -EEXIST },
	{ "8 KiB binary file at the second path, scratch", FOREIGN_BINARY, TIER_NVME_SCRATCH, 2, 1,
	  -EEXIST },
	{ "8 KiB binary file at the third path", FOREIGN_BINARY, 0, 3, 2, -EEXIST },
	{ "tierstore file of format version 1", FOREIGN_V1, 0, 1, 0, -EPROTO },
	{ "tierstore file of format version 1, scratch", FOREIGN_V1, TIER_NVME_SCRATCH, 2, 1,
	  -EPROTO },
	{ "tierstore file of format version 3", FOREIGN_V3, 0, 1, 0, -EPROTO },
	{ "tierstore file of format version 3, scratch", FOREIGN_V3, TIER_NVME_SCRATCH, 2, 1,
	  -EPROTO },
};

static size_t make_foreign(int kind, unsigned char *buf)
{
	uint64_t s = 99;

	switch (kind) {
	case FOREIGN_TEXT:
		strcpy((char *)buf, "my notes: do not delete\n");
		return strlen((char *)buf);
	case FOREIGN_BINARY:
		fill_rand(buf, 8192, &s);
		return 8192;
	default: {
		struct ts_nvme_header h;

		memset(&h, 0, sizeof(h));
		memcpy(h.magic, TIER_NVME_MAGIC, 8);
		h.version = kind == FOREIGN_V1 ? 1 : 3;
		h.header_size = TIER_NVME_HEADER_SIZE;
		h.npaths = 1;
		h.stripe_unit = 1 << 20;
		nvme_header_seal(&h);
		memcpy(buf, &h, sizeof(h));
		fill_rand(buf + sizeof(h), 4096, &s);
		return sizeof(h) + 4096;
	}
	}
}

START_TEST(test_foreign_file)
{
	const struct foreign_case *c = &foreign_cases[_i];
	struct mopt o = { .npaths = c->npaths };
	struct tier_manifest *m = manifest_for(&o);
	const char *file = file_of(m, c->at);
	unsigned char *want = calloc(1, 16384), *got = calloc(1, 16384);
	struct tier_nvme *t = POISON(struct tier_nvme);
	size_t len = make_foreign(c->kind, want);
	struct stat st;
	ssize_t n;
	int fd, rc;

	fd = open(file, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(write(fd, want, len), (ssize_t)len);
	ck_assert_int_eq(fchmod(fd, 0644), 0);
	close(fd);

	rc = tier_nvme_open(m, c->flags, &t);
	ck_assert_msg(rc == c->want, "%s: open gave %d (%s), expected %d: %s", c->name, rc,
		      tier_strerror(rc), c->want, tier_last_error());
	ck_assert_ptr_null(t);
	ck_assert_msg(strstr(tier_last_error(), file), "%s: the detail does not name %s: %s",
		      c->name, file, tier_last_error());
	if (c->kind == FOREIGN_V1 || c->kind == FOREIGN_V3)
		ck_assert_ptr_nonnull(strstr(tier_last_error(), c->kind == FOREIGN_V1 ? "version 1" : "version 3"));
	else
		ck_assert_ptr_nonnull(strstr(tier_last_error(), "not a tierstore backing file"));

	ck_assert_msg(stat(file, &st) == 0,
		      "REGRESSION: %s: the refused file %s was deleted (tier_nvme_close on the "
		      "failure path unlinks it under TIER_NVME_SCRATCH)", c->name, file);
	fd = open(file, O_RDONLY | O_CLOEXEC);
	ck_assert_int_ge(fd, 0);
	n = read(fd, got, 16384);
	close(fd);
	ck_assert_msg(n == (ssize_t)len && memcmp(got, want, len) == 0,
		      "REGRESSION: %s: the refused file %s was modified (%zd bytes now, %zu before; "
		      "starts with '%.8s'): tier_nvme_close on the failure path wrote a header over it",
		      c->name, file, n, len, (const char *)got);
	/* The failed open removed what it created, and only that. */
	ck_assert_int_eq(files_left(), 1);
	ck_assert_msg((st.st_mode & 07777) == 0644,
		      "REGRESSION: %s: the refused file's mode changed from 0644 to %04o "
		      "(path_open fchmods before checking the header)", c->name,
		      (unsigned)(st.st_mode & 07777));
	free(want);
	free(got);
	tier_manifest_free(m);
}
END_TEST

/*
 * REGRESSION (nvme.c path_open): when reading the header of an existing
 * file fails (here -EIO from the NVME_HEADER site), only -ENOMSG and
 * -EPROTO stop the open; any other error falls through to "reusing an
 * existing backing file", and the file - never shown to be ours - is
 * preallocated and its first 4 KiB overwritten with a new header.
 * Expected: the open fails with the read's error and the file is left as
 * it was.
 */
START_TEST(test_header_read_error_on_foreign_file)
{
	NEED_FAULTS();
	struct mopt o = { .npaths = 1 };
	struct tier_manifest *m = manifest_for(&o);
	unsigned char *want = calloc(1, 16384), *got = calloc(1, 16384);
	size_t len = make_foreign(FOREIGN_BINARY, want);
	struct tier_nvme *t = NULL;
	ssize_t n;
	int fd, rc;

	fd = open(file_of(m, 0), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(write(fd, want, len), (ssize_t)len);
	close(fd);
	ts_fault_arm(TIER_FAULT_NVME_HEADER, 1, 1, -EIO);   /* the read, not the write */
	rc = tier_nvme_open(m, TIER_NVME_SCRATCH, &t);
	ck_assert_uint_eq(ts_fault_fired(TIER_FAULT_NVME_HEADER), 1);
	if (rc == 0)
		tier_nvme_close(t);
	fd = open(file_of(m, 0), O_RDONLY | O_CLOEXEC);
	n = fd >= 0 ? read(fd, got, 16384) : -1;
	if (fd >= 0)
		close(fd);
	ck_assert_msg(rc == -EIO && n == (ssize_t)len && memcmp(got, want, len) == 0,
		      "REGRESSION: header read failed with EIO on a file that is not ours: open "
		      "returned %d (%s), expected -EIO; the file is now %zd bytes (was %zu), %s",
		      rc, tier_strerror(rc), n, len,
		      n < 0 ? "deleted" : memcmp(got, want, len) ? "overwritten" : "unchanged");
	free(want);
	free(got);
	tier_manifest_free(m);
}
END_TEST

struct file_case {
	unsigned npaths;
	uint64_t capacity;
	int direct;
};

static const struct file_case file_cases[] = {
	{ 1, 64 * MiB, 1 },
	{ 2, 100 * MiB, 0 },
	{ 3, 64 * MiB + 3 * 4096, -1 },
};

/* Bytes path @i's file takes on disk, and its size. */
static uint64_t disk_of(const struct tier_manifest *m, unsigned i, uint64_t *size)
{
	struct stat st;

	ck_assert_int_eq(stat(file_of(m, i), &st), 0);
	*size = (uint64_t)st.st_size;
	return (uint64_t)st.st_blocks * 512u;
}

/*
 * Mode 0600 under any umask; the files grow as objects are placed, in
 * steps of at most 64 MiB, never past the capacity.
 *
 * REGRESSION (issue 15, item 3): every open preallocated each file to its
 * whole capacity (half the free disk by default), whatever the objects.
 */
START_TEST(test_file_mode_size)
{
	const struct file_case *c = &file_cases[_i];
	struct mopt o = { .npaths = c->npaths, .capacity = c->capacity, .direct = c->direct };
	struct tier_manifest *m = manifest_for(&o);
	mode_t old = umask(0);
	struct tier_nvme *t = open_tier(m, TIER_NVME_SCRATCH);
	struct tier_nvme_stats stats;
	uint64_t size, disk, data_off = align_of(64 * KiB);

	umask(old);
	for (unsigned i = 0; i < c->npaths; i++) {
		struct ts_nvme_header h;
		struct stat st;

		ck_assert_int_eq(stat(file_of(m, i), &st), 0);
		ck_assert(S_ISREG(st.st_mode));
		ck_assert_msg((st.st_mode & 07777) == 0600, "%s: mode %04o", file_of(m, i),
			      (unsigned)(st.st_mode & 07777));
		read_header(file_of(m, i), &h);
		ck_assert_uint_eq(h.data_offset, data_off);
		disk = disk_of(m, i, &size);
		ck_assert_msg(size <= data_off && disk <= 64 * KiB,
			      "REGRESSION: %s: %llu bytes (%llu on disk) with no object placed: "
			      "preallocated, not grown on demand", file_of(m, i), U64(size), U64(disk));
	}
	/* One unit per path and a bit: each file holds its extent. */
	make_obj(t, "small", c->npaths * 64 * KiB + 5);
	for (unsigned i = 0; i < c->npaths; i++) {
		disk = disk_of(m, i, &size);
		ck_assert_msg(size >= data_off + 64 * KiB && size <= data_off + 64 * MiB &&
			      (c->direct == 0 || disk >= 64 * KiB),
			      "%s: %llu bytes, %llu on disk, after a 64 KiB extent", file_of(m, i),
			      U64(size), U64(disk));
	}
	/* The rest: the files reach the capacity, not beyond. */
	tier_nvme_get_stats(t, &stats);
	make_obj(t, "rest", stats.free - c->npaths * 64 * KiB);
	for (unsigned i = 0; i < c->npaths; i++) {
		disk = disk_of(m, i, &size);
		ck_assert_msg(size <= data_off + c->capacity && size + 128 * KiB >= data_off + c->capacity,
			      "%s: %llu bytes for a data area of %llu", file_of(m, i), U64(size),
			      U64(c->capacity));
	}
	tier_nvme_get_stats(t, &stats);
	/* Usable: each path's capacity in whole allocation units. */
	ck_assert_uint_eq(stats.capacity, c->npaths * (c->capacity / align_of(64 * KiB) * align_of(64 * KiB)));
	ck_assert_uint_le(stats.free, c->npaths * 256 * KiB);
	ck_assert_uint_eq(stats.npaths, c->npaths);
	ck_assert_uint_eq(stats.stripe_unit, 64 * KiB);
	ck_assert_uint_eq(stats.requests, 0);
	close_tier(t);
	ck_assert_int_eq(files_left(), 0);
	tier_manifest_free(m);
}
END_TEST

START_TEST(test_no_nvme_paths)
{
	const char *text = "gpu:\n  device: none\ndram:\n  capacity: 512MiB\n";
	struct tier_manifest *m = NULL;
	struct tier_nvme *t = POISON(struct tier_nvme);

	ck_assert_int_eq(tier_manifest_parse(text, strlen(text), "no-nvme.yaml", 0, &m), 0);
	ck_assert_int_eq(tier_nvme_open(m, TIER_NVME_SCRATCH, &t), -ENODEV);
	ck_assert_ptr_null(t);
	ck_assert_ptr_nonnull(strstr(tier_last_error(), "no NVMe paths"));
	ck_assert_int_eq(tier_nvme_close(NULL), 0);
	tier_manifest_free(m);
}
END_TEST

/*
 * REGRESSION or undocumented contract (nvme.c tier_nvme_open keeps
 * t->cfg = &m->tiers; tier_nvme_close reads t->cfg->name in
 * fill_header): freeing the manifest after tier_nvme_open - nothing in
 * tierstore.h says it must outlive the tier - makes the close without
 * TIER_NVME_SCRATCH read freed memory (ASan: heap-use-after-free) and
 * write whatever it finds as the store name.
 */
START_TEST(test_manifest_freed_after_open)
{
	struct mopt o = { .npaths = 2, .name = "lifetime" };
	struct tier_manifest *m = manifest_for(&o);
	char file0[4096];
	struct tier_nvme *t = open_tier(m, 0);
	struct tier_nvme_obj *ob;
	struct ts_nvme_header h;
	unsigned char *a = abuf(200 * KiB);
	uint64_t s = 3;

	snprintf(file0, sizeof(file0), "%s", file_of(m, 0));
	tier_manifest_free(m);
	ob = make_obj(t, "x", 200 * KiB);
	fill_rand(a, 200 * KiB, &s);
	xwrite(t, ob, 0, 200 * KiB, a);
	check_range(t, ob, a, 0, 200 * KiB);
	close_tier(t);
	read_header(file0, &h);
	ck_assert_msg(strncmp(h.store_name, "lifetime", 64) == 0,
		      "REGRESSION: store name '%.64s' written at close after the manifest was freed",
		      h.store_name);
	ck_assert_int_eq(nvme_header_check(&h, file0), 0);
	free(a);
}
END_TEST

/* ----------------------------------------------------------- objects */

/*
 * Bytes an object takes over all paths.  Each path's extent holds whole
 * units (the last one rounded to a block) and is a multiple of the
 * allocation alignment, which is the unit itself for units up to 1 MiB:
 * so n units take n * unit.
 */
static uint64_t obj_footprint(uint64_t size, uint64_t unit)
{
	ck_assert_uint_le(unit, MiB);
	return (size + unit - 1) / unit * unit;
}

struct fill_case {
	unsigned npaths;
	uint64_t unit, objsize;
};

static const struct fill_case fill_cases[] = {
	{ 1, 1 * MiB, 5 * MiB },
	{ 2, 64 * KiB, 3 * MiB + 12345 },
	{ 3, 1 * MiB, 7 * MiB },
	{ 3, 64 * KiB, 300000 },
	{ 2, 1 * MiB, 40 * MiB },
};

START_TEST(test_objects_until_enospc)
{
	const struct fill_case *c = &fill_cases[_i];
	struct mopt o = { .npaths = c->npaths, .unit = c->unit };
	struct tier_manifest *m = manifest_for(&o);
	struct tier_nvme *t = open_tier(m, TIER_NVME_SCRATCH);
	struct tier_nvme_obj *objs[4096], *x;
	struct tier_nvme_stats st, st2;
	uint64_t per = obj_footprint(c->objsize, c->unit), s = 5;
	size_t k = 0, k2 = 0;
	char name[64];
	int rc;

	tier_nvme_get_stats(t, &st);
	ck_assert_uint_eq(st.capacity, c->npaths * 64 * MiB);
	for (;;) {
		snprintf(name, sizeof(name), "obj-%zu", k);
		x = POISON(struct tier_nvme_obj);
		rc = tier_nvme_obj_create(t, name, c->objsize, &x);
		if (rc)
			break;
		ck_assert_uint_lt(k, ARRAY_SIZE(objs));
		objs[k++] = x;
		tier_nvme_get_stats(t, &st);
		ck_assert_uint_eq(st.capacity - st.free, k * per);
	}
	ck_assert_msg(rc == -ENOSPC, "create %s: %d (%s): %s", name, rc, tier_strerror(rc),
		      tier_last_error());
	ck_assert_ptr_null(x);
	ck_assert_uint_gt(k, 0);
	ck_assert_uint_le(k * per, st.capacity);
	{
		char q[80];

		snprintf(q, sizeof(q), "'%s'", name);
		ck_assert_msg(strstr(tier_last_error(), q) && strstr(tier_last_error(), "no room"),
			      "ENOSPC detail: %s", tier_last_error());
		ck_assert_int_ge(detail_file(tier_last_error(), m), 0);
	}
	/* The failed placement took nothing, on any path. */
	tier_nvme_get_stats(t, &st2);
	ck_assert_uint_eq(st2.free, st.free);
	/* Duplicate names, bad names and sizes. */
	ck_assert_int_eq(tier_nvme_obj_create(t, "obj-0", 4096, &x), -EEXIST);
	ck_assert_ptr_null(x);
	ck_assert_ptr_nonnull(strstr(tier_last_error(), "'obj-0'"));
	ck_assert_int_eq(tier_nvme_obj_create(t, "zero", 0, &x), -EINVAL);
	ck_assert_ptr_null(x);
	ck_assert_int_eq(tier_nvme_obj_create(t, "", 4096, &x), -EINVAL);
	ck_assert_int_eq(tier_nvme_obj_create(t, NULL, 4096, &x), -EINVAL);
	tier_nvme_get_stats(t, &st2);
	ck_assert_uint_eq(st2.free, st.free);
	/* Destroy in a random order: everything comes back. */
	for (size_t i = k; i > 1; i--) {
		size_t j = (size_t)(t_rnd_next(&s) % i);
		struct tier_nvme_obj *tmp = objs[i - 1];

		objs[i - 1] = objs[j];
		objs[j] = tmp;
	}
	for (size_t i = 0; i < k; i++)
		ck_assert_int_eq(tier_nvme_obj_destroy(t, objs[i]), 0);
	tier_nvme_get_stats(t, &st2);
	ck_assert_uint_eq(st2.free, st2.capacity);
	/* ... and the same number fits again. */
	for (;;) {
		snprintf(name, sizeof(name), "obj-%zu", k2);
		rc = tier_nvme_obj_create(t, name, c->objsize, &x);
		if (rc)
			break;
		objs[k2++] = x;
	}
	ck_assert_int_eq(rc, -ENOSPC);
	/* With several paths the rotation may start elsewhere: one more or less. */
	if (c->npaths == 1)
		ck_assert_uint_eq(k2, k);
	else
		ck_assert_msg(k2 + 1 >= k && k2 <= k + 1, "%zu objects fit the first time, %zu the second", k, k2);
	close_tier(t);   /* frees the objects still there */
	tier_manifest_free(m);
}
END_TEST

START_TEST(test_object_names)
{
	struct mopt o = { .npaths = 2 };
	struct tier_manifest *m = manifest_for(&o);
	struct tier_nvme *t = open_tier(m, TIER_NVME_SCRATCH);
	struct tier_nvme_obj *a, *b, *x;
	char longname[300];

	memset(longname, 'n', sizeof(longname));
	longname[255] = '\0';
	a = make_obj(t, longname, 4096);          /* 255 bytes: the longest */
	longname[255] = 'n';
	longname[256] = '\0';
	ck_assert_int_eq(tier_nvme_obj_create(t, longname, 4096, &x), -EINVAL);
	b = make_obj(t, "dup", 1);
	ck_assert_int_eq(tier_nvme_obj_create(t, "dup", 1, &x), -EEXIST);
	ck_assert_ptr_nonnull(strstr(tier_last_error(), "'dup'"));
	ck_assert_int_eq(tier_nvme_obj_destroy(t, b), 0);
	b = make_obj(t, "dup", 8192);              /* the name is free again */
	ck_assert_int_eq(tier_nvme_obj_destroy(t, b), 0);
	ck_assert_int_eq(tier_nvme_obj_destroy(t, a), 0);
	close_tier(t);
	tier_manifest_free(m);
}
END_TEST

/* Enough space in all, but not in one piece: -ENOSPC with the numbers. */
START_TEST(test_object_fragmentation)
{
	struct mopt o = { .npaths = 1, .unit = 1 * MiB };
	struct tier_manifest *m = manifest_for(&o);
	struct tier_nvme *t = open_tier(m, TIER_NVME_SCRATCH);
	struct tier_nvme_obj *a = make_obj(t, "a", 20 * MiB);
	struct tier_nvme_obj *b = make_obj(t, "b", 20 * MiB);
	struct tier_nvme_obj *c = make_obj(t, "c", 20 * MiB);
	struct tier_nvme_obj *x;
	struct tier_nvme_stats st;

	ck_assert_int_eq(tier_nvme_obj_destroy(t, a), 0);
	ck_assert_int_eq(tier_nvme_obj_destroy(t, c), 0);
	tier_nvme_get_stats(t, &st);
	ck_assert_uint_eq(st.free, 44 * MiB);
	ck_assert_int_eq(tier_nvme_obj_create(t, "big", 30 * MiB, &x), -ENOSPC);
	ck_assert_msg(strstr(tier_last_error(), "'big'") && strstr(tier_last_error(), "no room") &&
		      strstr(tier_last_error(), "largest free extent is 24.00 MiB") &&
		      strstr(tier_last_error(), "44.00 MiB free"),
		      "detail: %s", tier_last_error());
	x = make_obj(t, "fits", 24 * MiB);
	(void)make_obj(t, "fits-too", 20 * MiB);
	ck_assert_int_eq(tier_nvme_obj_create(t, "one-more", 4096, &x), -ENOSPC);
	ck_assert_int_eq(tier_nvme_obj_destroy(t, b), 0);
	close_tier(t);
	tier_manifest_free(m);
}
END_TEST

/*
 * Sizes the tier cannot hold are refused with -ENOSPC.
 *
 * REGRESSION (nvme.c tier_nvme_obj_create): nunits = (size + unit - 1) /
 * unit overflows for sizes within a unit of UINT64_MAX, giving 0 units:
 * no extent is allocated on any path, and the object is created (0)
 * with its full size; a request on it then writes to data-area offset 0
 * (other objects' data) and past the 0-entry crc array.
 */
static const uint64_t huge_sizes[] = {
	128 * MiB + 1,
	2 * 64 * MiB + 4096,
	200 * MiB,
	1ull << 40,
	UINT64_MAX,
	UINT64_MAX - 64 * KiB + 2,
};

START_TEST(test_object_too_big)
{
	uint64_t size = huge_sizes[_i];
	struct mopt o = { .npaths = 2 };
	struct tier_manifest *m = manifest_for(&o);
	struct tier_nvme *t = open_tier(m, TIER_NVME_SCRATCH);
	struct tier_nvme_obj *x = NULL;
	struct tier_nvme_stats st;
	int rc;

	rc = tier_nvme_obj_create(t, "huge", size, &x);
	if (rc == 0 && x)
		tier_nvme_obj_destroy(t, x);
	ck_assert_msg(rc == -ENOSPC,
		      "%sobject of %llu bytes on a 2 x 64 MiB tier: %d (%s), expected -ENOSPC",
		      rc == 0 ? "REGRESSION (unit count overflow): " : "", U64(size), rc,
		      tier_strerror(rc));
	ck_assert_ptr_null(x);
	tier_nvme_get_stats(t, &st);
	ck_assert_uint_eq(st.free, st.capacity);
	close_tier(t);
	tier_manifest_free(m);
}
END_TEST

/* ------------------------------------------------------------ striping */

/* Random reads and writes at odd offsets and lengths, from odd buffers. */
static void random_ops(struct tier_nvme *t, struct tier_nvme_obj *o, unsigned char *ref,
		       uint64_t unit, uint64_t *s, int nops)
{
	uint64_t size = tier_nvme_obj_size(o);
	unsigned char *mem = abuf(size + 4096);

	for (int i = 0; i < nops; i++) {
		uint64_t off, len;
		size_t mis = (size_t)(t_rnd_next(s) % 8);
		int kind = (int)(t_rnd_next(s) % 5);
		bool wr = t_rnd_next(s) & 1;
		unsigned char *buf;
		char what[200];
		int rc;

		switch (kind) {
		case 0: /* small, anywhere */
			off = t_rnd_next(s) % size;
			len = 1 + t_rnd_next(s) % min_u64(8192, size - off);
			break;
		case 1: /* block-aligned offset, length and buffer */
			off = (t_rnd_next(s) % size) / 4096 * 4096;
			len = min_u64(size - off, 4096 * (1 + t_rnd_next(s) % 8));
			if (len >= 4096)
				len = len / 4096 * 4096;
			mis = 0;
			break;
		case 2: /* across a unit boundary */
			if (size > unit) {
				uint64_t b = unit * (1 + t_rnd_next(s) % ((size - 1) / unit));

				off = b - 1 - t_rnd_next(s) % min_u64(b, 5000);
				len = min_u64(size - off, (b - off) + 1 + t_rnd_next(s) % (unit + 3000));
			} else {
				off = 0;
				len = size;
			}
			break;
		case 3: /* exactly one whole unit, aligned or not */
			off = unit * (t_rnd_next(s) % ((size + unit - 1) / unit));
			len = min_u64(unit, size - off);
			break;
		default: /* large */
			off = t_rnd_next(s) % size;
			len = 1 + t_rnd_next(s) % min_u64(size - off, 3 * unit);
			break;
		}
		buf = mem + mis;
		snprintf(what, sizeof(what), "op %d: %s of '%s' at %llu, %llu bytes, buffer +%zu", i,
			 wr ? "write" : "read", tier_nvme_obj_name(o), U64(off), U64(len), mis);
		if (wr) {
			fill_rand(buf, len, s);
			rc = tier_nvme_write(t, o, off, len, buf);
			ck_assert_msg(rc == 0, "%s: %s", what, tier_last_error());
			memcpy(ref + off, buf, len);
		} else {
			memset(buf, 0xa5, len);
			rc = tier_nvme_read(t, o, off, len, buf);
			ck_assert_msg(rc == 0, "%s: %s", what, tier_last_error());
			assert_same(buf, ref + off, len, what);
		}
	}
	free(mem);
}

/* Unit k of the first object lies at slot k / P of path (k + rot) % P. */
static void check_layout(const struct tier_manifest *m, const unsigned char *ref, uint64_t size,
			 uint64_t unit)
{
	unsigned np = (unsigned)m->tiers.npaths;
	uint64_t nunits = (size + unit - 1) / unit;
	unsigned char *buf = malloc(unit);
	uint64_t doff[3];
	int fd[3], rot = -1;

	for (unsigned p = 0; p < np; p++) {
		struct ts_nvme_header h;

		read_header(file_of(m, p), &h);
		doff[p] = h.data_offset;
		fd[p] = open(file_of(m, p), O_RDONLY | O_CLOEXEC);
		ck_assert_int_ge(fd[p], 0);
	}
	for (unsigned p = 0; p < np && rot < 0; p++) {
		uint64_t l = min_u64(unit, size);

		ck_assert_int_eq(pread(fd[p], buf, l, (off_t)doff[p]), (ssize_t)l);
		if (memcmp(buf, ref, l) == 0)
			rot = (int)p;
	}
	ck_assert_msg(rot >= 0, "unit 0 is at the start of no backing file's data area");
	for (uint64_t k = 0; k < nunits; k++) {
		unsigned p = (unsigned)((k + (uint64_t)rot) % np);
		uint64_t l = min_u64(unit, size - k * unit);
		uint64_t at = doff[p] + (k / np) * unit;
		char what[128];

		ck_assert_int_eq(pread(fd[p], buf, l, (off_t)at), (ssize_t)l);
		snprintf(what, sizeof(what), "unit %llu in %s at file offset %llu", U64(k),
			 file_of(m, p), U64(at));
		assert_same(buf, ref + k * unit, l, what);
	}
	for (unsigned p = 0; p < np; p++)
		close(fd[p]);
	free(buf);
}

struct stripe_case {
	unsigned npaths;
	uint64_t unit;
	bool nocsum;
};

static const struct stripe_case stripe_cases[] = {
	{ 1, 64 * KiB, false },
	{ 2, 64 * KiB, false },
	{ 3, 64 * KiB, false },
	{ 1, 1 * MiB, false },
	{ 2, 1 * MiB, false },
	{ 3, 1 * MiB, false },
	{ 2, 64 * KiB, true },
	{ 3, 256 * KiB, true },
};

START_TEST(test_striping)
{
	const struct stripe_case *c = &stripe_cases[_i];
	struct mopt o = { .npaths = c->npaths, .unit = c->unit, .nocsum = c->nocsum };
	struct tier_manifest *m = manifest_for(&o);
	struct tier_nvme *t = open_tier(m, TIER_NVME_SCRATCH);
	const uint64_t U = c->unit;
	const uint64_t sizes[] = {
		5 * U,              /* a multiple of the unit */
		3 * U + 12345,      /* not a multiple */
		U / 2 + 7,          /* below one unit */
		4096,               /* one block */
		1,                  /* one byte */
		2 * U + 4096,       /* a last unit of one block */
	};
	struct tier_nvme_stats st;
	uint64_t s = 0x1234 + _i, total = 0;

	for (size_t i = 0; i < ARRAY_SIZE(sizes); i++) {
		uint64_t size = sizes[i];
		char name[32];
		struct tier_nvme_obj *ob;
		unsigned char *ref = abuf(size), *b = abuf(size);

		snprintf(name, sizeof(name), "obj-%zu", i);
		ob = make_obj(t, name, size);
		fill_rand(ref, size, &s);
		/* Whole object from an aligned buffer, back into aligned and unaligned ones. */
		xwrite(t, ob, 0, size, ref);
		total += size;
		xread(t, ob, 0, size, b);
		assert_same(b, ref, size, "whole object, aligned buffer");
		memset(b, 0, size + 3);
		xread(t, ob, 0, size, b + 3);
		assert_same(b + 3, ref, size, "whole object, buffer at +3");
		if (i == 0)
			check_layout(m, ref, size, U);
		/* Whole object again from an unaligned buffer. */
		fill_rand(b + 1, size, &s);
		memcpy(ref, b + 1, size);
		xwrite(t, ob, 0, size, b + 1);
		check_range(t, ob, ref, 0, size);
		/* Edges: the first and the last byte. */
		b[0] = 0x42;
		xwrite(t, ob, size - 1, 1, b);
		ref[size - 1] = 0x42;
		xwrite(t, ob, 0, 1, b);
		ref[0] = 0x42;
		check_range(t, ob, ref, 0, size);
		random_ops(t, ob, ref, U, &s, size <= 4096 ? 10 : U >= MiB ? 16 : 30);
		check_range(t, ob, ref, 0, size);
		free(ref);
		free(b);
	}
	tier_nvme_get_stats(t, &st);
	ck_assert_uint_ge(st.bytes_written, 2 * total);
	ck_assert_uint_ge(st.bytes_read, 2 * total);
	ck_assert_uint_gt(st.requests, 0);
	ck_assert_uint_ge(st.ios, st.requests);
	ck_assert_uint_eq(st.errors, 0);
	ck_assert_uint_eq(st.csum_errors, 0);
	ck_assert_uint_gt(st.bounced, 0);
	ck_assert_uint_eq(st.npaths, c->npaths);
	ck_assert_uint_eq(st.stripe_unit, U);
	close_tier(t);
	tier_manifest_free(m);
}
END_TEST

/* ----------------------------------------------------------- concurrency */

struct chunk {
	uint64_t off, len;
	int wave;
};

/* Cuts [0, size) into chunks of 1..maxlen bytes. */
static size_t partition(uint64_t size, uint64_t maxlen, uint64_t *s, struct chunk *c, size_t cap)
{
	uint64_t off = 0;
	size_t n = 0;

	while (off < size) {
		uint64_t len = 1 + t_rnd_next(s) % maxlen;

		if (len > size - off || n == cap - 1)
			len = size - off;
		c[n++] = (struct chunk){ off, len, 0 };
		off += len;
	}
	return n;
}

/* Gives each chunk a wave so that no two chunks of a wave share a stripe unit. */
static int assign_waves(struct chunk *c, size_t n, uint64_t unit, uint64_t size)
{
	uint64_t nunits = (size + unit - 1) / unit;
	int *last = malloc(nunits * sizeof(*last)), maxw = 0;

	for (uint64_t u = 0; u < nunits; u++)
		last[u] = -1;
	for (size_t i = 0; i < n; i++) {
		uint64_t a = c[i].off / unit, b = (c[i].off + c[i].len - 1) / unit;
		int w = 0;

		for (uint64_t u = a; u <= b; u++)
			if (last[u] + 1 > w)
				w = last[u] + 1;
		for (uint64_t u = a; u <= b; u++)
			last[u] = w;
		c[i].wave = w;
		if (w > maxw)
			maxw = w;
	}
	free(last);
	return maxw;
}

#define MAX_CHUNKS 512

struct worker {
	struct tier_nvme *t;
	struct tier_nvme_obj *o;
	uint64_t size, unit;
	int id, rounds;
	uint64_t seed;
	unsigned char *ref, *rb;
	struct waiter w;
	struct tier_ticket *tk[MAX_CHUNKS];
	struct chunk ch[MAX_CHUNKS];
	char err[600];
};

static void worker_fail(struct worker *w, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void worker_fail(struct worker *w, const char *fmt, ...)
{
	va_list ap;

	if (w->err[0])
		return;
	va_start(ap, fmt);
	vsnprintf(w->err, sizeof(w->err), fmt, ap);
	va_end(ap);
}

/* Submits the chunks of one wave (or all when wave < 0), then waits for them. */
static void worker_batch(struct worker *w, enum tier_io_op op, int wave, size_t n, bool cb)
{
	size_t ntk = 0;
	int rc;

	for (size_t i = 0; i < n && !w->err[0]; i++) {
		struct chunk *c = &w->ch[i];
		unsigned char *buf = op == TIER_IO_WRITE ? w->ref + c->off : w->rb + c->off;

		if (wave >= 0 && c->wave != wave)
			continue;
		if (op == TIER_IO_WRITE)
			fill_rand(buf, c->len, &w->seed);
		if (cb)
			rc = waiter_submit(&w->w, w->t, w->o, op, c->off, c->len, buf);
		else
			rc = tier_nvme_submit_ticket(w->t, w->o, op, c->off, c->len, buf, &w->tk[ntk++]);
		if (rc)
			worker_fail(w, "thread %d: submit %s at %llu+%llu: %s: %s", w->id,
				    op == TIER_IO_WRITE ? "write" : "read", U64(c->off), U64(c->len),
				    tier_strerror(rc), tier_last_error());
		if (rc && !cb)
			ntk--;
	}
	if (cb) {
		waiter_wait(&w->w);
		if (w->w.first_err)
			worker_fail(w, "thread %d: %s failed: %s", w->id,
				    op == TIER_IO_WRITE ? "write" : "read", w->w.detail);
	} else {
		for (size_t i = 0; i < ntk; i++) {
			rc = tier_ticket_wait(w->tk[i]);
			if (rc)
				worker_fail(w, "thread %d: ticket: %s: %s", w->id, tier_strerror(rc),
					    tier_last_error());
		}
	}
}

static void *worker_main(void *arg)
{
	struct worker *w = arg;

	for (int r = 0; r < w->rounds && !w->err[0]; r++) {
		size_t n = partition(w->size, 2 * w->unit, &w->seed, w->ch, MAX_CHUNKS);
		int maxw = assign_waves(w->ch, n, w->unit, w->size);
		bool cb = ((r + w->id) & 1) == 0;

		for (int wave = 0; wave <= maxw && !w->err[0]; wave++)
			worker_batch(w, TIER_IO_WRITE, wave, n, cb);
		if (w->err[0])
			break;
		memset(w->rb, 0, w->size);
		n = partition(w->size, 3 * w->unit, &w->seed, w->ch, MAX_CHUNKS);
		worker_batch(w, TIER_IO_READ, -1, n, !cb);
		if (!w->err[0] && memcmp(w->rb, w->ref, w->size) != 0) {
			for (uint64_t i = 0; i < w->size; i++)
				if (w->rb[i] != w->ref[i]) {
					worker_fail(w, "thread %d round %d: byte %llu of '%s' reads %02x, wrote %02x",
						    w->id, r, U64(i), tier_nvme_obj_name(w->o), w->rb[i],
						    w->ref[i]);
					break;
				}
		}
	}
	return NULL;
}

START_TEST(test_concurrent)
{
	struct mopt o = { .npaths = 2, .qd = 4, .unit = 64 * KiB };
	struct tier_manifest *m = manifest_for(&o);
	struct tier_nvme *t = open_tier(m, TIER_NVME_SCRATCH);
	const uint64_t sizes[] = { 2 * MiB, 2 * MiB - 1000, 1 * MiB + 3 * 4096 + 17, 2 * MiB + 1 };
	struct worker *w = calloc(ARRAY_SIZE(sizes), sizeof(*w));
	pthread_t th[ARRAY_SIZE(sizes)];
	struct tier_nvme_stats st;

	for (size_t i = 0; i < ARRAY_SIZE(sizes); i++) {
		char name[32];

		snprintf(name, sizeof(name), "thread-%zu", i);
		w[i].t = t;
		w[i].o = make_obj(t, name, sizes[i]);
		w[i].size = sizes[i];
		w[i].unit = 64 * KiB;
		w[i].id = (int)i;
		w[i].rounds = 3;
		w[i].seed = 1000 + i;
		w[i].ref = abuf(sizes[i]);
		w[i].rb = abuf(sizes[i]);
		waiter_init(&w[i].w);
	}
	for (size_t i = 0; i < ARRAY_SIZE(sizes); i++)
		ck_assert_int_eq(pthread_create(&th[i], NULL, worker_main, &w[i]), 0);
	for (size_t i = 0; i < ARRAY_SIZE(sizes); i++)
		pthread_join(th[i], NULL);
	for (size_t i = 0; i < ARRAY_SIZE(sizes); i++)
		ck_assert_msg(w[i].err[0] == '\0', "%s", w[i].err);
	tier_nvme_get_stats(t, &st);
	ck_assert_uint_eq(st.errors, 0);
	ck_assert_uint_eq(st.csum_errors, 0);
	ck_assert_uint_gt(st.requests, 4 * 3 * 2 * 8);
	/* Everything is still there after the threads are gone. */
	for (size_t i = 0; i < ARRAY_SIZE(sizes); i++)
		check_range(t, w[i].o, w[i].ref, 0, w[i].size);
	close_tier(t);
	for (size_t i = 0; i < ARRAY_SIZE(sizes); i++) {
		free(w[i].ref);
		free(w[i].rb);
		waiter_fini(&w[i].w);
	}
	free(w);
	tier_manifest_free(m);
}
END_TEST

/* --------------------------------------- submitting threads that exit */

/*
 * REGRESSION (the store suite's stress case failed once with a write-back
 * "Operation canceled"): a request the kernel hands to its worker threads
 * is cancelled when the thread that submitted it exits, and a caller's
 * thread may submit and go at once.  Buffered files (direct: false) hand
 * most writes to those workers.  _i: 0 buffered, 1 O_DIRECT.  Each round,
 * 16 threads each submit one 1 MiB request (writes of a known pattern,
 * then reads of it) and exit; every request must succeed and the bytes
 * read must be the bytes written.
 */
struct exit_slot {
	atomic_int calls;
	atomic_int result;
};

struct exiting {
	struct tier_nvme *t;
	struct tier_nvme_obj *o;
	unsigned char *buf;
	enum tier_io_op op;
	uint64_t off;
	struct exit_slot *slot;
};

static void exiting_cb(void *arg, int result, const char *detail)
{
	struct exit_slot *sl = arg;

	if (result && atomic_load(&sl->result) == 0)
		fprintf(stderr, "submitter-exit request: %s\n", detail);
	atomic_store(&sl->result, result);
	atomic_fetch_add(&sl->calls, 1);
}

static void *exiting_main(void *v)
{
	struct exiting *e = v;
	int rc = tier_nvme_submit(e->t, e->o, e->op, e->off, 1 * MiB, e->buf, exiting_cb, e->slot);

	if (rc)
		exiting_cb(e->slot, rc, tier_last_error());
	return NULL; /* at once: the request may still be in the kernel */
}

START_TEST(test_submitters_exit)
{
	struct mopt o = { .npaths = 1, .unit = 1 * MiB, .qd = 32, .direct = _i ? 1 : -1,
			  .capacity = 128 * MiB };
	struct tier_manifest *m = manifest_for(&o);
	struct tier_nvme *t = open_tier(m, TIER_NVME_SCRATCH);
	struct tier_nvme_obj *obj = make_obj(t, "exiting", 32 * MiB);
	unsigned char *ref = abuf(32 * MiB), *rb = abuf(32 * MiB);
	uint64_t seed = 77;
	struct tier_nvme_stats st;

	fill_rand(ref, 32 * MiB, &seed);
	for (int round = 0; round < 40; round++) {
		enum tier_io_op op = round % 2 ? TIER_IO_READ : TIER_IO_WRITE;
		struct exiting e[16];
		struct exit_slot sl[16];
		pthread_t th[16];

		for (int i = 0; i < 16; i++) {
			uint64_t off = (uint64_t)((round / 2 * 16 + i) % 32) * MiB;

			atomic_init(&sl[i].calls, 0);
			atomic_init(&sl[i].result, 0);
			e[i] = (struct exiting){ .t = t, .o = obj, .op = op, .off = off,
						 .buf = (op == TIER_IO_WRITE ? ref : rb) + off,
						 .slot = &sl[i] };
			ck_assert_int_eq(pthread_create(&th[i], NULL, exiting_main, &e[i]), 0);
		}
		for (int i = 0; i < 16; i++)
			pthread_join(th[i], NULL);
		for (int i = 0; i < 16; i++) {
			while (atomic_load(&sl[i].calls) == 0)
				usleep(100);
			ck_assert_msg(atomic_load(&sl[i].result) == 0, "round %d thread %d: %s", round,
				      i, tier_strerror(atomic_load(&sl[i].result)));
			if (op == TIER_IO_READ)
				ck_assert_msg(memcmp(rb + e[i].off, ref + e[i].off, 1 * MiB) == 0,
					      "round %d: bytes at %llu differ", round, U64(e[i].off));
		}
	}
	tier_nvme_get_stats(t, &st);
	ck_assert_uint_eq(st.errors, 0);
	close_tier(t);
	free(ref);
	free(rb);
	tier_manifest_free(m);
}
END_TEST

/* ------------------------------------- requests on one stripe unit at once */

/*
 * REGRESSION (issue 15, item 2: `tier-bench io --size 8MiB --bs 256KiB
 * --qd 4` with checksums failed with a checksum mismatch in stripe unit
 * 0): a partial write is a read-modify-write of its whole stripe unit,
 * and two in flight on one unit both read the old unit, patch their own
 * part and write the unit back, so the later write undid the other's
 * part, and the unit's crc32c was that of either; a full-unit write went
 * out beside them in any order.  Requests on one unit now take effect one
 * after the other, in the order they were submitted (reads together).
 */

/* Applies write [off, off + len) of @data (in unit coordinates) to @unit. */
struct unit_write {
	uint64_t off, len;
	const unsigned char *data;
};

/* Whether applying @w[0..n) to @before in some order gives @got (n <= 4). */
static bool some_order_gives(const unsigned char *before, const struct unit_write *w,
			     unsigned n, const unsigned char *got, uint64_t unit,
			     unsigned char *scratch)
{
	unsigned perm[4] = { 0, 1, 2, 3 };
	unsigned c[4] = { 0 }, i = 1;

	ck_assert_uint_le(n, 4);
	for (;;) {
		memcpy(scratch, before, unit);
		for (unsigned k = 0; k < n; k++)
			memcpy(scratch + w[perm[k]].off, w[perm[k]].data + w[perm[k]].off,
			       w[perm[k]].len);
		if (memcmp(scratch, got, unit) == 0)
			return true;
		/* the next order (Heap's algorithm) */
		while (i < n && c[i] >= i) {
			c[i] = 0;
			i++;
		}
		if (i >= n)
			return false;
		{
			unsigned j = i % 2 ? c[i] : 0, x = perm[j];

			perm[j] = perm[i];
			perm[i] = x;
		}
		c[i]++;
		i = 1;
	}
}

#define RACERS 4

struct race_case {
	const char *name;
	int direct;             /* 1: O_DIRECT, -1: buffered */
	bool overlap;           /* the parts overlap; else they cut the unit up */
	bool reader;            /* and a thread reads the whole unit meanwhile */
	int rounds;
};

static const struct race_case race_cases[] = {
	{ "disjoint parts, O_DIRECT", 1, false, false, 30 },
	{ "disjoint parts, buffered", -1, false, false, 30 },
	{ "overlapping parts, O_DIRECT", 1, true, false, 25 },
	{ "overlapping parts, buffered", -1, true, false, 25 },
	{ "disjoint parts and a reader, O_DIRECT", 1, false, true, 20 },
	{ "overlapping parts and a reader, buffered", -1, true, true, 20 },
};

#define RU (256 * KiB)

struct race {
	const struct race_case *c;
	struct tier_nvme *t;
	struct tier_nvme_obj *o;
	uint64_t base;                  /* object offset of the unit */
	pthread_barrier_t start, done;
	atomic_uint writing;            /* writers not done with this round */
	struct unit_write w[RACERS];    /* this round's writes */
	unsigned char *data[RACERS];    /* their bytes, at their unit offsets */
	unsigned char *before;          /* the unit before this round */
	char err[RACERS + 1][600];      /* per writer, and the reader's */
	unsigned long reads;
};

struct racer {
	struct race *r;
	unsigned id;
};

static void *racer_main(void *v)
{
	struct racer *me = v;
	struct race *r = me->r;

	for (int round = 0; round < r->c->rounds; round++) {
		const struct unit_write *w = &r->w[me->id];
		int rc;

		pthread_barrier_wait(&r->start);
		rc = tier_nvme_write(r->t, r->o, r->base + w->off, w->len, w->data + w->off);
		if (rc && !r->err[me->id][0])
			snprintf(r->err[me->id], sizeof(r->err[0]),
				 "round %d: writer %u at %llu+%llu: %s: %s", round, me->id,
				 U64(w->off), U64(w->len), tier_strerror(rc), tier_last_error());
		atomic_fetch_sub(&r->writing, 1);
		pthread_barrier_wait(&r->done);
	}
	return NULL;
}

/* The reader's check of one read while the disjoint parts are written:
 * each part is whole, either as it was before the round or as written. */
static void race_check_read(struct race *r, const unsigned char *got, int round)
{
	char *e = r->err[RACERS];

	if (r->c->overlap || e[0])
		return;
	for (unsigned i = 0; i < RACERS; i++) {
		const struct unit_write *w = &r->w[i];

		if (memcmp(got + w->off, w->data + w->off, w->len) != 0 &&
		    memcmp(got + w->off, r->before + w->off, w->len) != 0)
			snprintf(e, sizeof(r->err[0]),
				 "round %d: a read during the writes has part %u (%llu+%llu) neither old nor new",
				 round, i, U64(w->off), U64(w->len));
	}
}

static void *race_reader_main(void *v)
{
	struct race *r = v;
	unsigned char *got = abuf(RU);

	for (int round = 0; round < r->c->rounds; round++) {
		pthread_barrier_wait(&r->start);
		do {
			int rc = tier_nvme_read(r->t, r->o, r->base, RU, got);

			r->reads++;
			if (rc && !r->err[RACERS][0])
				snprintf(r->err[RACERS], sizeof(r->err[0]),
					 "round %d: a read during the writes: %s: %s", round,
					 tier_strerror(rc), tier_last_error());
			else if (!rc)
				race_check_read(r, got, round);
		} while (atomic_load(&r->writing) > 0);
		pthread_barrier_wait(&r->done);
	}
	free(got);
	return NULL;
}

/* This round's parts: the unit cut in RACERS pieces at random points, or
 * RACERS random ranges, about one in four of them the whole unit. */
static void race_plan(struct race *r, uint64_t *s)
{
	uint64_t cut[RACERS + 1] = { 0 };

	for (unsigned i = 1; i < RACERS; i++)
		cut[i] = 1 + t_rnd_next(s) % (RU - 1);
	cut[RACERS] = RU;
	for (unsigned i = 1; i < RACERS; i++) /* sort */
		for (unsigned j = i; j > 1 && cut[j] < cut[j - 1]; j--) {
			uint64_t x = cut[j];

			cut[j] = cut[j - 1];
			cut[j - 1] = x;
		}
	for (unsigned i = 0; i < RACERS; i++) {
		struct unit_write *w = &r->w[i];

		if (!r->c->overlap) {
			w->off = cut[i];
			w->len = cut[i + 1] - cut[i];
		} else if (t_rnd_next(s) % 4 == 0) {
			w->off = 0;
			w->len = RU;
		} else {
			w->off = t_rnd_next(s) % RU;
			w->len = 1 + t_rnd_next(s) % (RU - w->off);
		}
		w->data = r->data[i];
		fill_rand(r->data[i] + w->off, w->len, s);
	}
}

/* One round's end: every write succeeded, and the unit is what the
 * writes give in some order. */
static void race_check_round(struct race *r, int round, unsigned char *got,
			     unsigned char *scratch)
{
	for (unsigned i = 0; i <= RACERS; i++)
		ck_assert_msg(r->err[i][0] == '\0', "%s: %s", r->c->name, r->err[i]);
	memset(got, 0x5a, RU);
	xread(r->t, r->o, r->base, RU, got);
	if (!r->c->overlap) {
		for (unsigned i = 0; i < RACERS; i++)
			assert_same(got + r->w[i].off, r->data[i] + r->w[i].off, r->w[i].len,
				    r->c->name);
	}
	ck_assert_msg(some_order_gives(r->before, r->w, RACERS, got, RU, scratch),
		      "%s: round %d: the unit is not what the %d writes give in any order",
		      r->c->name, round, RACERS);
	memcpy(r->before, got, RU);
}

START_TEST(test_unit_writers)
{
	const struct race_case *c = &race_cases[_i];
	struct mopt mo = { .npaths = 1, .unit = RU, .direct = c->direct, .qd = 16 };
	struct tier_manifest *m = manifest_for(&mo);
	struct race r = { .c = c, .t = open_tier(m, TIER_NVME_SCRATCH), .base = RU };
	unsigned char *got = abuf(RU), *scratch = abuf(RU);
	unsigned nthreads = RACERS + (c->reader ? 1 : 0);
	struct racer rc[RACERS];
	pthread_t th[RACERS + 1];
	struct tier_nvme_stats st;
	uint64_t seed = 4242 + (uint64_t)_i;

	r.o = make_obj(r.t, "one-unit", 3 * RU);
	r.before = abuf(RU);
	xwrite(r.t, r.o, r.base, RU, r.before); /* zeros, with their checksum */
	pthread_barrier_init(&r.start, NULL, nthreads + 1);
	pthread_barrier_init(&r.done, NULL, nthreads + 1);
	for (unsigned i = 0; i < RACERS; i++) {
		r.data[i] = abuf(RU);
		rc[i] = (struct racer){ &r, i };
		ck_assert_int_eq(pthread_create(&th[i], NULL, racer_main, &rc[i]), 0);
	}
	if (c->reader)
		ck_assert_int_eq(pthread_create(&th[RACERS], NULL, race_reader_main, &r), 0);
	for (int round = 0; round < c->rounds; round++) {
		race_plan(&r, &seed);
		atomic_store(&r.writing, RACERS);
		pthread_barrier_wait(&r.start);
		pthread_barrier_wait(&r.done);
		race_check_round(&r, round, got, scratch);
	}
	for (unsigned i = 0; i < nthreads; i++)
		pthread_join(th[i], NULL);
	if (c->reader)
		ck_assert_uint_ge(r.reads, (unsigned long)c->rounds);
	tier_nvme_get_stats(r.t, &st);
	ck_assert_uint_eq(st.csum_errors, 0);
	ck_assert_uint_eq(st.errors, 0);
	close_tier(r.t);
	for (unsigned i = 0; i < RACERS; i++)
		free(r.data[i]);
	pthread_barrier_destroy(&r.start);
	pthread_barrier_destroy(&r.done);
	free(r.before);
	free(got);
	free(scratch);
	tier_manifest_free(m);
}
END_TEST

/*
 * tier-bench io's case: an object of 8 MiB written, then read, in requests
 * of BS bytes with QD in flight, stripe unit 1 MiB and checksums on, so
 * that the requests in flight share stripe units.  Each pass writes new
 * bytes; every request must succeed and the bytes read be those written.
 */
struct qd_case {
	const char *name;
	int direct;
	uint64_t bs;
	unsigned qd;
};

static const struct qd_case qd_cases[] = {
	{ "bs 256 KiB, qd 4, O_DIRECT", 1, 256 * KiB, 4 },
	{ "bs 256 KiB, qd 4, buffered", -1, 256 * KiB, 4 },
	{ "bs 300 KiB + 7, qd 6, O_DIRECT", 1, 300 * KiB + 7, 6 },
};

/* One pass of @op over [0, size) in requests of c->bs, c->qd in flight. */
static void qd_pass(struct tier_nvme *t, struct tier_nvme_obj *o, const struct qd_case *c,
		    enum tier_io_op op, unsigned char *buf, uint64_t size, int pass)
{
	struct waiter w;

	waiter_init(&w);
	for (uint64_t off = 0; off < size; off += c->bs) {
		int rc;

		pthread_mutex_lock(&w.lock);
		while (w.outstanding >= (int)c->qd)
			pthread_cond_wait(&w.cond, &w.lock);
		pthread_mutex_unlock(&w.lock);
		rc = waiter_submit(&w, t, o, op, off, min_u64(c->bs, size - off), buf + off);
		ck_assert_msg(rc == 0, "%s: submit: %s", c->name, tier_last_error());
	}
	waiter_wait(&w);
	ck_assert_msg(w.first_err == 0, "%s: pass %d: %s failed: %s", c->name, pass,
		      op == TIER_IO_WRITE ? "a write" : "a read", w.detail);
	waiter_fini(&w);
}

START_TEST(test_bench_qd)
{
	const struct qd_case *c = &qd_cases[_i];
	const uint64_t size = 8 * MiB;
	struct mopt mo = { .npaths = 1, .unit = 1 * MiB, .direct = c->direct };
	struct tier_manifest *m = manifest_for(&mo);
	struct tier_nvme *t = open_tier(m, TIER_NVME_SCRATCH);
	struct tier_nvme_obj *o = make_obj(t, "tier-bench-io", size);
	unsigned char *wb = abuf(size), *rb = abuf(size);
	struct tier_nvme_stats st;
	uint64_t seed = 99;

	for (int pass = 0; pass < 2; pass++) {
		fill_rand(wb, size, &seed);
		qd_pass(t, o, c, TIER_IO_WRITE, wb, size, pass);
		memset(rb, 0, size);
		qd_pass(t, o, c, TIER_IO_READ, rb, size, pass);
		assert_same(rb, wb, size, c->name);
	}
	tier_nvme_get_stats(t, &st);
	ck_assert_uint_eq(st.csum_errors, 0);
	close_tier(t);
	free(wb);
	free(rb);
	tier_manifest_free(m);
}
END_TEST

/*
 * One thread submits a burst of writes and reads over three stripe units
 * without waiting between them: whole units from aligned memory (straight
 * to the device) and from odd addresses, parts of a unit, requests over
 * two units, reads of all sizes.  Each byte must end up as the last write
 * submitted over it left it, and each read must see every write submitted
 * before it and none after.
 */
struct order_case {
	const char *name;
	int direct;
	bool nocsum;
};

static const struct order_case order_cases[] = {
	{ "O_DIRECT, crc32c", 1, false },
	{ "buffered, crc32c", -1, false },
	{ "O_DIRECT, no checksums", 1, true },
};

#define OU (64 * KiB)
#define ORDER_OPS 24

struct order_op {
	enum tier_io_op op;
	uint64_t off, len;
	unsigned char *mem;     /* what buf lies in */
	unsigned char *buf;
	unsigned char *want;    /* a read: the object's bytes it must see */
};

/* A random request over the object of 3 units, mostly within the middle one. */
static void order_make(struct order_op *p, uint64_t *s, unsigned char *ref)
{
	unsigned k = (unsigned)(t_rnd_next(s) % 8);

	p->op = k < 5 ? TIER_IO_WRITE : TIER_IO_READ;
	if (k == 0 || k == 5) {         /* the whole middle unit, aligned */
		p->off = OU;
		p->len = OU;
	} else if (k == 1) {            /* over two units */
		p->off = OU / 2 + t_rnd_next(s) % OU;
		p->len = OU / 2 + 1 + t_rnd_next(s) % OU;
	} else {                        /* part of the middle unit */
		p->off = OU + t_rnd_next(s) % OU;
		p->len = 1 + t_rnd_next(s) % (2 * OU - p->off);
	}
	p->mem = abuf(p->len + 64);
	p->buf = p->mem + ((k == 0 || k == 5) ? 0 : 1 + t_rnd_next(s) % 63);  /* odd addresses */
	if (p->op == TIER_IO_WRITE) {
		fill_rand(p->buf, p->len, s);
		memcpy(ref + p->off, p->buf, p->len);
	} else {
		p->want = malloc(p->len);
		memcpy(p->want, ref + p->off, p->len);
	}
}

START_TEST(test_unit_order)
{
	const struct order_case *c = &order_cases[_i];
	struct mopt mo = { .npaths = 2, .unit = OU, .direct = c->direct, .nocsum = c->nocsum,
			   .qd = 8 };
	struct tier_manifest *m = manifest_for(&mo);
	struct tier_nvme *t = open_tier(m, TIER_NVME_SCRATCH);
	struct tier_nvme_obj *o = make_obj(t, "ordered", 3 * OU);
	unsigned char *ref = abuf(3 * OU);
	uint64_t seed = 31337 + (uint64_t)_i;

	xwrite(t, o, 0, 3 * OU, ref);
	for (int round = 0; round < 20; round++) {
		struct order_op ops[ORDER_OPS] = { 0 };
		struct waiter w;

		waiter_init(&w);
		for (int i = 0; i < ORDER_OPS; i++) {
			order_make(&ops[i], &seed, ref);
			ck_assert_int_eq(waiter_submit(&w, t, o, ops[i].op, ops[i].off, ops[i].len,
						       ops[i].buf), 0);
		}
		waiter_wait(&w);
		ck_assert_msg(w.first_err == 0, "%s: round %d: %s", c->name, round, w.detail);
		for (int i = 0; i < ORDER_OPS; i++) {
			char what[160];

			snprintf(what, sizeof(what), "%s: round %d, read %d (%llu+%llu)", c->name,
				 round, i, U64(ops[i].off), U64(ops[i].len));
			if (ops[i].op == TIER_IO_READ)
				assert_same(ops[i].buf, ops[i].want, ops[i].len, what);
			free(ops[i].want);
			free(ops[i].mem);
		}
		waiter_fini(&w);
		check_range(t, o, ref, 0, 3 * OU);
	}
	close_tier(t);
	free(ref);
	tier_manifest_free(m);
}
END_TEST

/* ------------------------------------------------------- close drains */

struct slot {
	atomic_int calls;
	atomic_int result;
};

static void slot_cb(void *arg, int result, const char *detail)
{
	struct slot *s = arg;

	(void)detail;
	atomic_store(&s->result, result);
	atomic_fetch_add(&s->calls, 1);
}

/* With @delay, a few completions come late (fault site NVME_DELAY). */
static void close_drains(bool delay)
{
	struct mopt o = { .npaths = 2, .qd = 2, .unit = 64 * KiB };
	struct tier_manifest *m = manifest_for(&o);
	struct tier_nvme *t = open_tier(m, TIER_NVME_SCRATCH);
	enum { NW = 48, NR = 24 };
	struct tier_nvme_obj *a = make_obj(t, "a", NW * 64 * KiB);
	struct tier_nvme_obj *b = make_obj(t, "b", 1 * MiB + 99);
	unsigned char *wb = abuf(NW * 64 * KiB), *rb = abuf(NR * 128 * KiB);
	struct slot *slots = calloc(NW + NR, sizeof(*slots));
	uint64_t s = 77;

	fill_rand(wb, NW * 64 * KiB, &s);
	if (delay)
		ts_fault_arm(TIER_FAULT_NVME_DELAY, 2, 3, -EIO);  /* a few slow completions */
	for (int i = 0; i < NW + NR; i++) {
		int rc;

		if (i < NW) {
			/* a write on its own unit: whole, or part of it from an odd address */
			uint64_t off = (uint64_t)i * 64 * KiB + (i % 2 ? 1000 : 0);
			uint64_t len = i % 2 ? 5000 : 64 * KiB;

			rc = tier_nvme_submit(t, a, TIER_IO_WRITE, off, len, wb + off, slot_cb, &slots[i]);
		} else {
			uint64_t off = (uint64_t)i * 7919 % (1 * MiB);

			rc = tier_nvme_submit(t, b, TIER_IO_READ, off, 99 * KiB,
					      rb + (uint64_t)(i - NW) * 128 * KiB, slot_cb, &slots[i]);
		}
		ck_assert_msg(rc == 0, "submit %d: %s", i, tier_last_error());
	}
	close_tier(t);
	for (int i = 0; i < NW + NR; i++) {
		ck_assert_msg(atomic_load(&slots[i].calls) == 1, "request %d: callback ran %d times", i,
			      atomic_load(&slots[i].calls));
		ck_assert_msg(atomic_load(&slots[i].result) == 0, "request %d: %s", i,
			      tier_strerror(atomic_load(&slots[i].result)));
	}
	free(slots);
	free(wb);
	free(rb);
	tier_manifest_free(m);
}

START_TEST(test_close_drains)
{
	close_drains(false);
}
END_TEST

START_TEST(test_close_drains_delayed)
{
	NEED_FAULTS();
	close_drains(true);
}
END_TEST

/* ------------------------------------------------------ invalid requests */

struct inval_case {
	const char *name;
	uint64_t off, len;      /* relative to the object's size when rel */
	int rel_off;            /* off = size - off */
	int op;
};

static atomic_int cb_calls;

static void counting_cb(void *arg, int result, const char *detail)
{
	(void)arg;
	(void)result;
	(void)detail;
	cb_calls++;
}

static const struct inval_case inval_cases[] = {
	{ "zero length", 0, 0, 0, TIER_IO_READ },
	{ "zero length at the end", 0, 0, 1, TIER_IO_WRITE },
	{ "starts at the end", 0, 1, 1, TIER_IO_READ },
	{ "one byte past the end", 0, 100001, 0, TIER_IO_WRITE },
	{ "last byte and one more", 1, 2, 1, TIER_IO_READ },
	{ "starts past the end", 0, 1, 2, TIER_IO_WRITE },     /* off = size + ... see below */
	{ "offset near UINT64_MAX", UINT64_MAX, 1, 0, TIER_IO_READ },
	{ "length near UINT64_MAX", 1, UINT64_MAX, 0, TIER_IO_WRITE },
	{ "off + len wraps", 100, UINT64_MAX - 50, 0, TIER_IO_READ },
	{ "bad operation", 0, 10, 0, 7 },
};

START_TEST(test_invalid_requests)
{
	const struct inval_case *c = &inval_cases[_i];
	struct mopt o = { .npaths = 2 };
	struct tier_manifest *m = manifest_for(&o);
	struct tier_nvme *t = open_tier(m, TIER_NVME_SCRATCH);
	const uint64_t size = 100000;
	struct tier_nvme_obj *ob = make_obj(t, "inval", size);
	unsigned char *buf = abuf(2 * size);
	struct tier_ticket *tk = POISON(struct tier_ticket);
	uint64_t off = c->off;
	int rc;

	if (c->rel_off == 1)
		off = size - c->off;
	else if (c->rel_off == 2)
		off = size + 4096;
	cb_calls = 0;
	rc = tier_nvme_submit(t, ob, (enum tier_io_op)c->op, off, c->len, buf, counting_cb, NULL);
	ck_assert_msg(rc == -EINVAL, "%s: submit gave %d", c->name, rc);
	if (c->op == TIER_IO_READ || c->op == TIER_IO_WRITE)
		ck_assert_msg(strstr(tier_last_error(), "'inval'") &&
			      strstr(tier_last_error(), "outside the object"),
			      "%s: detail: %s", c->name, tier_last_error());
	rc = tier_nvme_submit_ticket(t, ob, (enum tier_io_op)c->op, off, c->len, buf, &tk);
	ck_assert_int_eq(rc, -EINVAL);
	ck_assert_ptr_null(tk);
	if (c->op == TIER_IO_READ) {
		ck_assert_int_eq(tier_nvme_read(t, ob, off, c->len, buf), -EINVAL);
		ck_assert_int_eq(tier_nvme_write(t, ob, off, c->len, buf), -EINVAL);
	}
	close_tier(t);   /* nothing to drain: a refused request is not in flight */
	ck_assert_int_eq(cb_calls, 0);
	free(buf);
	tier_manifest_free(m);
}
END_TEST

/* ------------------------------------------------------------ checksums */

struct flip_case {
	const char *name;
	bool nocsum;
	int op;
	uint64_t off, len;      /* in the object of 4 units of 64 KiB */
	size_t mis;             /* buffer misalignment */
	bool every;             /* every read flips a bit (else the first only) */
	int want;
	uint64_t mismatches;    /* checksum errors counted */
};

#define FU (64 * KiB)
#define TRIES (TIER_NVME_IO_RETRIES + 1)

/*
 * With crc32c one bad read is read again (a bad transfer is possible) and
 * the request succeeds; a unit that reads back bad every time fails it
 * with -EBADMSG after TIER_NVME_IO_RETRIES retries.
 */
static const struct flip_case flip_cases[] = {
	{ "whole unit, aligned buffer: read again", false, TIER_IO_READ, FU, FU, 0, false, 0, 1 },
	{ "part of a unit, unaligned buffer: read again", false, TIER_IO_READ, FU + 1000, 3000, 3,
	  false, 0, 1 },
	{ "three units: read again", false, TIER_IO_READ, FU, 3 * FU, 0, false, 0, 1 },
	{ "partial write: its read-modify-write read, read again", false, TIER_IO_WRITE, FU + 100,
	  200, 1, false, 0, 1 },
	{ "whole unit, bad every time", false, TIER_IO_READ, FU, FU, 0, true, -EBADMSG, TRIES },
	{ "part of a unit, unaligned buffer, bad every time", false, TIER_IO_READ, FU + 1000, 3000,
	  3, true, -EBADMSG, TRIES },
	{ "three units, bad every time", false, TIER_IO_READ, FU, 3 * FU, 0, true, -EBADMSG,
	  3 * TRIES },
	{ "partial write: its read-modify-write read, bad every time", false, TIER_IO_WRITE,
	  FU + 100, 200, 1, true, -EBADMSG, TRIES },
	{ "no checksum: whole unit, aligned buffer", true, TIER_IO_READ, FU, FU, 0, false, 0, 0 },
	{ "no checksum: whole unit, unaligned buffer", true, TIER_IO_READ, FU, FU, 5, false, 0, 0 },
};

#undef TRIES

START_TEST(test_bitflip)
{
	NEED_FAULTS();
	const struct flip_case *c = &flip_cases[_i];
	struct mopt o = { .npaths = 2, .unit = FU, .nocsum = c->nocsum };
	struct tier_manifest *m = manifest_for(&o);
	struct tier_nvme *t = open_tier(m, TIER_NVME_SCRATCH);
	struct tier_nvme_obj *ob = make_obj(t, "flip-me", 4 * FU);
	unsigned char *ref = abuf(4 * FU), *b = abuf(4 * FU + 64);
	struct tier_nvme_stats st;
	uint64_t s = 11;
	int rc;

	fill_rand(ref, 4 * FU, &s);
	xwrite(t, ob, 0, 4 * FU, ref);
	/* the errno is not used */
	ts_fault_arm(TIER_FAULT_NVME_BITFLIP, 1, c->every ? TIER_FAULT_PERSISTENT : 1, -EIO);
	if (c->op == TIER_IO_READ) {
		memset(b, 0, 4 * FU + 64);
		rc = tier_nvme_read(t, ob, c->off, c->len, b + c->mis);
	} else {
		fill_rand(b + c->mis, c->len, &s);
		rc = tier_nvme_write(t, ob, c->off, c->len, b + c->mis);
		if (rc == 0) /* what it leaves; a refused write wrote nothing */
			memcpy(ref + c->off, b + c->mis, c->len);
	}
	ck_assert_uint_eq(ts_fault_fired(TIER_FAULT_NVME_BITFLIP), (c->every ? c->mismatches : 1));
	ts_fault_disarm(TIER_FAULT_NVME_BITFLIP);
	ck_assert_msg(rc == c->want, "%s: %d (%s), expected %d: %s", c->name, rc, tier_strerror(rc),
		      c->want, tier_last_error());
	tier_nvme_get_stats(t, &st);
	ck_assert_msg(st.csum_errors == c->mismatches, "%s: %llu checksum errors, expected %llu",
		      c->name, U64(st.csum_errors), U64(c->mismatches));
	if (c->want == -EBADMSG) {
		const char *d = tier_last_error();

		ck_assert_msg(strstr(d, "'flip-me'") && strstr(d, "checksum mismatch") &&
			      detail_file(d, m) >= 0, "%s: detail: %s", c->name, d);
		ck_assert_uint_eq(st.errors, 1);
		ck_assert_uint_eq(st.retries, c->mismatches / (TIER_NVME_IO_RETRIES + 1) *
						      TIER_NVME_IO_RETRIES);
	} else if (!c->nocsum) {
		/* read again: the caller got the right bytes */
		ck_assert_uint_eq(st.errors, 0);
		ck_assert_uint_eq(st.retries, 1);
		if (c->op == TIER_IO_READ)
			assert_same(b + c->mis, ref + c->off, c->len, c->name);
	} else {
		/* Without checksums the flip goes through: exactly one bit differs. */
		int bytes = 0;

		for (uint64_t i = 0; i < c->len; i++) {
			unsigned char x = (unsigned char)(b[c->mis + i] ^ ref[c->off + i]);

			if (x) {
				bytes++;
				ck_assert_msg((x & (x - 1)) == 0, "byte %llu differs in more than one bit",
					      U64(i));
			}
		}
		ck_assert_msg(bytes == 1, "%s: %d bytes differ, expected the one flipped bit", c->name,
			      bytes);
		ck_assert_uint_eq(st.csum_errors, 0);
		ck_assert_uint_eq(st.errors, 0);
	}
	/* The data on the device is intact: it reads back (a refused write wrote nothing). */
	check_range(t, ob, ref, 0, 4 * FU);
	tier_nvme_get_stats(t, &st);
	ck_assert_uint_eq(st.csum_errors, c->mismatches);
	close_tier(t);
	free(ref);
	free(b);
	tier_manifest_free(m);
}
END_TEST

/*
 * REGRESSION (nvme.c sub_complete, the NVME_BITFLIP site): the bit is
 * flipped at dev_buf[unit_len / 2], but without checksums an aligned part
 * of a unit is read straight into the caller's buffer with dev_len = the
 * part's length, so the flip lands outside the request - in the caller's
 * memory past the bytes asked for (a heap overflow when the buffer is
 * just the request's size).  Expected: the flip stays within the bytes
 * transferred.
 */
START_TEST(test_bitflip_stays_in_request)
{
	NEED_FAULTS();
	struct mopt o = { .npaths = 1, .unit = FU, .nocsum = true };
	struct tier_manifest *m = manifest_for(&o);
	struct tier_nvme *t = open_tier(m, TIER_NVME_SCRATCH);
	struct tier_nvme_obj *ob = make_obj(t, "flip", FU);
	unsigned char *ref = abuf(FU), *b = abuf(FU);
	uint64_t s = 12;

	fill_rand(ref, FU, &s);
	xwrite(t, ob, 0, FU, ref);
	memset(b, 0xAA, FU);
	ts_fault_arm(TIER_FAULT_NVME_BITFLIP, 1, 1, -EIO);
	xread(t, ob, 0, 4096, b);      /* one aligned block of the unit */
	ck_assert_uint_eq(ts_fault_fired(TIER_FAULT_NVME_BITFLIP), 1);
	for (uint64_t i = 4096; i < FU; i++)
		if (b[i] != 0xAA)
			ck_abort_msg("REGRESSION: a read of bytes [0, 4096) changed the caller's byte %llu "
				     "(0xAA -> %#x): the bit flip lands outside the request", U64(i), b[i]);
	close_tier(t);
	free(ref);
	free(b);
	tier_manifest_free(m);
}
END_TEST

/* --------------------------------------------------------------- faults */

struct ioerr_case {
	const char *name;
	unsigned npaths;
	int op;
	uint64_t first, nunits;  /* the request, in units of the 8-unit object */
	bool partial;            /* starts and ends inside units (read-modify-write) */
	uint64_t nth;
	int64_t count;
	int err, want;
	uint64_t retries;        /* when it fails: the retries counted */
};

#define RT TIER_NVME_IO_RETRIES
#define PERSIST TIER_FAULT_PERSISTENT

/*
 * A transient error (-EIO, -ETIMEDOUT, -EILSEQ) is retried up to RT =
 * TIER_NVME_IO_RETRIES times per device operation, and the request
 * succeeds with the right bytes; one that lasts longer (RT + 1 failures of
 * one operation, or persistent) fails it with the detail.  -ENOSPC is not
 * retried; -EAGAIN and -EINTR always are.
 */
static const struct ioerr_case ioerr_cases[] = {
	{ "read, first op, one EIO: retried", 1, TIER_IO_READ, 2, 1, false, 1, 1, -EIO, 0, 0 },
	{ "read, third op of four over two paths, one EIO: retried", 2, TIER_IO_READ, 2, 4, false,
	  3, 1, -EIO, 0, 0 },
	{ "read, one op, EIO as often as retried: the last retry works", 1, TIER_IO_READ, 2, 1, false, 1, RT,
	  -EIO, 0, 0 },
	{ "read, one op, EIO once more than retried: fails", 1, TIER_IO_READ, 2, 1, false, 1, RT + 1, -EIO,
	  -EIO, RT },
	{ "read, every op fails", 2, TIER_IO_READ, 0, 8, false, 1, PERSIST, -EIO, -EIO, 8 * RT },
	{ "read, one ETIMEDOUT: retried", 2, TIER_IO_READ, 2, 2, false, 1, 1, -ETIMEDOUT, 0, 0 },
	{ "read, one EILSEQ: retried", 1, TIER_IO_READ, 2, 1, false, 1, 1, -EILSEQ, 0, 0 },
	{ "partial read, one EIO: retried", 3, TIER_IO_READ, 1, 3, true, 2, 1, -EIO, 0, 0 },
	{ "partial read, persistent EIO", 3, TIER_IO_READ, 1, 3, true, 1, PERSIST, -EIO, -EIO, 3 * RT },
	{ "write, first op, one EIO: retried", 1, TIER_IO_WRITE, 2, 1, false, 1, 1, -EIO, 0, 0 },
	{ "write, second op of four over three paths, one EIO: retried", 3, TIER_IO_WRITE, 2, 4,
	  false, 2, 1, -EIO, 0, 0 },
	{ "write, one op, EIO once more than retried: fails", 1, TIER_IO_WRITE, 2, 1, false, 1, RT + 1, -EIO,
	  -EIO, RT },
	{ "write, every op fails", 2, TIER_IO_WRITE, 2, 2, false, 1, PERSIST, -EIO, -EIO, 2 * RT },
	{ "write, ENOSPC is not retried", 2, TIER_IO_WRITE, 2, 2, false, 1, 1, -ENOSPC, -ENOSPC, 0 },
	{ "partial write, one EIO on its read-modify-write read: retried", 1, TIER_IO_WRITE, 2, 1,
	  true, 1, 1, -EIO, 0, 0 },
	{ "partial write, one EIO on its write-back: retried", 1, TIER_IO_WRITE, 2, 1, true, 2, 1,
	  -EIO, 0, 0 },
	{ "partial write, persistent EIO on its write-back", 1, TIER_IO_WRITE, 2, 1, true, 2, PERSIST,
	  -EIO, -EIO, RT },
	{ "read, EAGAIN is retried", 2, TIER_IO_READ, 2, 2, false, 1, 1, -EAGAIN, 0, 0 },
	{ "write, EAGAIN three times", 2, TIER_IO_WRITE, 2, 4, false, 2, 3, -EAGAIN, 0, 0 },
	{ "partial read, EINTR is retried", 1, TIER_IO_READ, 2, 1, true, 1, 1, -EINTR, 0, 0 },
	{ "partial writes of two units, EAGAIN twice", 1, TIER_IO_WRITE, 3, 2, true, 2, 2, -EAGAIN, 0,
	  0 },
};

#undef RT
#undef PERSIST

/* The log's warnings, captured (the retry's warning comes from a ring thread). */
#define CAP_LINES 8
static struct {
	pthread_mutex_t lock;
	int n;
	char line[CAP_LINES][512];
} g_cap = { .lock = PTHREAD_MUTEX_INITIALIZER };

static void capture_sink(int level, uint32_t ss, const char *line, void *arg)
{
	(void)arg;
	if (level != TIER_LL_WARN || ss != TIER_SS_NVME)
		return;
	pthread_mutex_lock(&g_cap.lock);
	if (g_cap.n < CAP_LINES)
		snprintf(g_cap.line[g_cap.n], sizeof(g_cap.line[0]), "%s", line);
	g_cap.n++;
	pthread_mutex_unlock(&g_cap.lock);
}

/* The log's level and mask while capturing. */
struct log_saved {
	int level;
	uint32_t mask;
};

/* Starts capturing the NVMe tier's warnings (shown whatever TIER_LOG says). */
static struct log_saved capture_start(void)
{
	struct log_saved sv = { atomic_load(&ts_log_level_g), atomic_load(&ts_log_mask_g) };

	g_cap.n = 0;
	if (sv.level < TIER_LL_WARN)
		atomic_store(&ts_log_level_g, TIER_LL_WARN);
	atomic_store(&ts_log_mask_g, sv.mask | TIER_SS_NVME);
	ts_log_set_sink(capture_sink, NULL);
	return sv;
}

/* Stops capturing; the number of warnings captured. */
static int capture_stop(struct log_saved sv)
{
	int n;

	ts_log_set_sink(NULL, NULL);
	atomic_store(&ts_log_level_g, sv.level);
	atomic_store(&ts_log_mask_g, sv.mask);
	pthread_mutex_lock(&g_cap.lock);
	n = g_cap.n;
	pthread_mutex_unlock(&g_cap.lock);
	return n;
}

/* The object offset the detail reports (after "' at "), or UINT64_MAX. */
static uint64_t detail_offset(const char *d)
{
	const char *p = strstr(d, "' at ");

	return p ? strtoull(p + 5, NULL, 10) : UINT64_MAX;
}

/* The warning of a retried error: names the path's file, the object, the
 * offset (in the request) and the errno. */
static void check_retry_warning(const struct ioerr_case *c, const struct tier_manifest *m,
				uint64_t U)
{
	const char *w = g_cap.line[0];
	uint64_t at = detail_offset(w);

	ck_assert_msg(strstr(w, "'victim'") && strstr(w, "file offset") && strstr(w, "retrying") &&
		      strstr(w, tier_strerror(c->err)) && detail_file(w, m) >= 0,
		      "%s: the warning: %s", c->name, w);
	ck_assert_msg(at >= c->first * U && at < (c->first + c->nunits) * U,
		      "%s: the warning's offset %llu is not in the request: %s", c->name, U64(at), w);
}

/* After a failed request: what reads back (nothing lost; a unit a failed
 * write touched holds the old or the new contents, or reads as damaged). */
static void check_after_failure(const struct ioerr_case *c, struct tier_nvme *t,
				struct tier_nvme_obj *ob, const unsigned char *a,
				const unsigned char *img, unsigned char *b, uint64_t U)
{
	int rc;

	if (c->op == TIER_IO_READ) {
		check_range(t, ob, a, 0, 8 * U);
		return;
	}
	for (uint64_t u = 0; u < 8; u++) {
		if (u < c->first || u >= c->first + c->nunits) {
			check_range(t, ob, a, u * U, U);
			continue;
		}
		memset(b, 0, U);
		rc = tier_nvme_read(t, ob, u * U, U, b);
		ck_assert_msg(rc == 0 || rc == -EBADMSG, "unit %llu: %s", U64(u), tier_last_error());
		if (rc == 0)
			ck_assert_msg(memcmp(b, a + u * U, U) == 0 || memcmp(b, img + u * U, U) == 0,
				      "%s: unit %llu after the failed write is neither old nor new",
				      c->name, U64(u));
	}
}

START_TEST(test_io_errors)
{
	NEED_FAULTS();
	const struct ioerr_case *c = &ioerr_cases[_i];
	const uint64_t U = 64 * KiB, size = 8 * U;
	struct mopt o = { .npaths = c->npaths, .unit = U };
	struct tier_manifest *m = manifest_for(&o);
	struct tier_nvme *t = open_tier(m, TIER_NVME_SCRATCH);
	struct tier_nvme_obj *ob = make_obj(t, "victim", size);
	unsigned char *a = abuf(size), *img = abuf(size), *b = abuf(size + 16);
	uint64_t off = c->first * U + (c->partial ? 777 : 0);
	uint64_t len = c->nunits * U - (c->partial ? 777 + 555 : 0);
	bool transient = c->err == -EIO || c->err == -ETIMEDOUT || c->err == -EILSEQ;
	struct tier_nvme_stats st;
	struct log_saved sv;
	uint64_t s = 21;
	int rc, warned;

	fill_rand(a, size, &s);
	xwrite(t, ob, 0, size, a);
	memcpy(img, a, size);
	sv = capture_start();
	ts_fault_arm(TIER_FAULT_NVME_IO_ERR, c->nth, c->count, c->err);
	if (c->op == TIER_IO_WRITE) {
		unsigned char *src = c->partial ? b + 1 : b;

		fill_rand(src, len, &s);
		memcpy(img + off, src, len);
		rc = tier_nvme_write(t, ob, off, len, src);
	} else {
		rc = tier_nvme_read(t, ob, off, len, b + (c->partial ? 1 : 0));
	}
	warned = capture_stop(sv);
	ck_assert_uint_ge(ts_fault_fired(TIER_FAULT_NVME_IO_ERR), 1);
	ts_fault_disarm(TIER_FAULT_NVME_IO_ERR);
	ck_assert_msg(rc == c->want, "%s: %d (%s), expected %d: %s", c->name, rc, tier_strerror(rc),
		      c->want, tier_last_error());
	tier_nvme_get_stats(t, &st);
	/* one warning per device operation retried for a transient error */
	if (transient)
		ck_assert_msg(warned >= 1, "%s: a retried error logged no warning", c->name);
	else
		ck_assert_msg(warned == 0, "%s: %d warnings: %s", c->name, warned, g_cap.line[0]);
	if (warned)
		check_retry_warning(c, m, U);
	if (rc) {
		const char *d = tier_last_error();
		uint64_t at = detail_offset(d);
		char tries[32];

		ck_assert_msg(strstr(d, "'victim'") && strstr(d, "nvme") && strstr(d, "file offset") &&
			      strstr(d, tier_strerror(c->err)) && detail_file(d, m) >= 0,
			      "%s: detail: %s", c->name, d);
		snprintf(tries, sizeof(tries), "tried %d times", TIER_NVME_IO_RETRIES + 1);
		ck_assert_msg(!transient || strstr(d, tries),
			      "%s: the detail does not say it was %s: %s", c->name, tries, d);
		ck_assert_msg(at >= c->first * U && at < (c->first + c->nunits) * U,
			      "%s: the detail's offset %llu is not in the request: %s", c->name, U64(at), d);
		ck_assert_uint_eq(st.errors, 1);
		ck_assert_msg(st.retries == c->retries, "%s: %llu retries, expected %llu", c->name,
			      U64(st.retries), U64(c->retries));
		check_after_failure(c, t, ob, a, img, b, U);
	} else {
		ck_assert_uint_eq(st.errors, 0);
		ck_assert_uint_eq(st.retries, ts_fault_fired(TIER_FAULT_NVME_IO_ERR));
		if (c->op == TIER_IO_READ)
			assert_same(b + (c->partial ? 1 : 0), a + off, len, c->name);
		/* Nothing was lost: everything reads back (as written, for a write). */
		check_range(t, ob, img, 0, size);
	}
	close_tier(t);
	free(a);
	free(img);
	free(b);
	tier_manifest_free(m);
}
END_TEST

struct short_case {
	const char *name;
	int op;
	uint64_t off, len;
	size_t mis;
	int64_t count;
};

static const struct short_case short_cases[] = {
	{ "read of a whole unit", TIER_IO_READ, 64 * KiB, 64 * KiB, 0, 1 },
	{ "read of three units, three short", TIER_IO_READ, 64 * KiB, 3 * 64 * KiB, 0, 3 },
	{ "read of one unit, halved three times", TIER_IO_READ, 0, 64 * KiB, 0, 3 },
	{ "read through a bounce buffer", TIER_IO_READ, 1000, 70000, 3, 1 },
	{ "write of a whole unit", TIER_IO_WRITE, 64 * KiB, 64 * KiB, 0, 1 },
	{ "write of four units, three short", TIER_IO_WRITE, 0, 4 * 64 * KiB, 0, 3 },
	{ "partial write (read-modify-write)", TIER_IO_WRITE, 5000, 100, 1, 2 },
	{ "write of the short last unit", TIER_IO_WRITE, 4 * 64 * KiB, 20000, 0, 3 },
};

START_TEST(test_short_transfers)
{
	NEED_FAULTS();
	const struct short_case *c = &short_cases[_i];
	const uint64_t size = 4 * 64 * KiB + 20000;
	struct mopt o = { .npaths = 2, .unit = 64 * KiB };
	struct tier_manifest *m = manifest_for(&o);
	struct tier_nvme *t = open_tier(m, TIER_NVME_SCRATCH);
	struct tier_nvme_obj *ob = make_obj(t, "short", size);
	unsigned char *ref = abuf(size), *b = abuf(size + 16);
	struct tier_nvme_stats st;
	uint64_t s = 31;

	fill_rand(ref, size, &s);
	xwrite(t, ob, 0, size, ref);
	ts_fault_arm(TIER_FAULT_NVME_SHORT, 1, c->count, -EIO);
	if (c->op == TIER_IO_WRITE) {
		fill_rand(b + c->mis, c->len, &s);
		memcpy(ref + c->off, b + c->mis, c->len);
		xwrite(t, ob, c->off, c->len, b + c->mis);
	} else {
		xread(t, ob, c->off, c->len, b + c->mis);
		assert_same(b + c->mis, ref + c->off, c->len, c->name);
	}
	ck_assert_uint_eq(ts_fault_fired(TIER_FAULT_NVME_SHORT), (uint64_t)c->count);
	ts_fault_disarm(TIER_FAULT_NVME_SHORT);
	tier_nvme_get_stats(t, &st);
	ck_assert_uint_eq(st.short_ios, (uint64_t)c->count);
	ck_assert_uint_eq(st.errors, 0);
	check_range(t, ob, ref, 0, size);
	close_tier(t);
	free(ref);
	free(b);
	tier_manifest_free(m);
}
END_TEST

START_TEST(test_delay)
{
	NEED_FAULTS();
	struct mopt o = { .npaths = 2, .unit = 64 * KiB, .qd = 2 };
	struct tier_manifest *m = manifest_for(&o);
	struct tier_nvme *t = open_tier(m, TIER_NVME_SCRATCH);
	const uint64_t size = 10 * 64 * KiB + 3;
	struct tier_nvme_obj *ob = make_obj(t, "slow", size);
	unsigned char *ref = abuf(size);
	uint64_t s = 41;

	fill_rand(ref, size, &s);
	ts_fault_arm(TIER_FAULT_NVME_DELAY, 2, 6, -EIO);
	xwrite(t, ob, 0, size, ref);
	check_range(t, ob, ref, 0, size);
	check_range(t, ob, ref, 12345, 100000);
	ck_assert_uint_eq(ts_fault_fired(TIER_FAULT_NVME_DELAY), 6);
	close_tier(t);
	free(ref);
	tier_manifest_free(m);
}
END_TEST

struct submit_case {
	const char *name;
	unsigned npaths;
	uint64_t nunits;
	uint64_t nth;
	int64_t count;
	int err;
	bool via_cb;
	bool after_short;      /* fail the resubmission of a short transfer */
};

static const struct submit_case submit_cases[] = {
	{ "EIO on the first submission", 1, 1, 1, 1, -EIO, false, false },
	{ "ENOMEM on the second path's batch", 2, 4, 2, 1, -ENOMEM, false, false },
	{ "EBUSY three times", 2, 4, 1, 3, -EBUSY, false, false },
	{ "EIO, through a callback", 2, 3, 1, 1, -EIO, true, false },
	{ "EIO on every submission for a while", 3, 6, 1, 5, -EIO, true, false },
	{ "EIO on the resubmission of a short transfer", 1, 1, 2, 1, -EIO, false, true },
	{ "EIO on the resubmission of a short transfer, callback", 2, 1, 2, 1, -EIO, true, true },
};

START_TEST(test_submit_fails)
{
	NEED_FAULTS();
	const struct submit_case *c = &submit_cases[_i];
	const uint64_t U = 64 * KiB, size = 8 * U;
	struct mopt o = { .npaths = c->npaths, .unit = U, .qd = 4 };
	struct tier_manifest *m = manifest_for(&o);
	struct tier_nvme *t = open_tier(m, TIER_NVME_SCRATCH);
	struct tier_nvme_obj *ob = make_obj(t, "subm", size);
	unsigned char *ref = abuf(size), *b = abuf(size);
	int failed = 0, rc = 0, tries;
	struct waiter w;
	uint64_t s = 51;

	waiter_init(&w);
	fill_rand(ref, size, &s);
	if (c->after_short)
		ts_fault_arm(TIER_FAULT_NVME_SHORT, 1, 1, -EIO);
	ts_fault_arm(TIER_FAULT_NVME_SUBMIT, c->nth, c->count, c->err);
	/* Write until a request gets through; each failure is the injected errno. */
	for (tries = 0; tries < 20; tries++) {
		if (c->via_cb) {
			int calls0 = w.calls;

			rc = waiter_submit(&w, t, ob, TIER_IO_WRITE, 0, c->nunits * U, ref);
			ck_assert_msg(rc == 0, "%s: submit refused: %s", c->name, tier_last_error());
			waiter_wait(&w);
			ck_assert_int_eq(w.calls, calls0 + 1);
			rc = w.first_err;
			w.first_err = 0;
			if (rc)
				ck_assert_msg(strstr(w.detail, "'subm'") && strstr(w.detail, tier_strerror(c->err)),
					      "%s: detail: %s", c->name, w.detail);
		} else {
			rc = tier_nvme_write(t, ob, 0, c->nunits * U, ref);
			if (rc)
				ck_assert_msg(strstr(tier_last_error(), "'subm'") &&
					      strstr(tier_last_error(), tier_strerror(c->err)),
					      "%s: detail: %s", c->name, tier_last_error());
		}
		if (rc == 0)
			break;
		ck_assert_msg(rc == c->err, "%s: %d (%s), expected %d", c->name, rc, tier_strerror(rc),
			      c->err);
		failed++;
	}
	ck_assert_msg(rc == 0, "%s: no write got through after %d tries", c->name, tries);
	ck_assert_int_ge(failed, 1);
	ck_assert_uint_le((uint64_t)failed, (uint64_t)c->count);
	ck_assert_uint_eq(ts_fault_fired(TIER_FAULT_NVME_SUBMIT), (uint64_t)c->count);
	/* Later requests work, on every path. */
	xwrite(t, ob, 0, size, ref);
	xread(t, ob, 0, size, b);
	assert_same(b, ref, size, "after the failed submissions");
	{
		struct tier_nvme_stats st;

		tier_nvme_get_stats(t, &st);
		ck_assert_uint_eq(st.errors, (uint64_t)failed);
	}
	close_tier(t);
	waiter_fini(&w);
	free(ref);
	free(b);
	tier_manifest_free(m);
}
END_TEST

struct open_fault_case {
	enum ts_fault_site site;
	int err;
	unsigned nth, npaths;
	const char *needle;
};

static const struct open_fault_case open_fault_cases[] = {
	{ TIER_FAULT_NVME_OPEN, -EACCES, 1, 1, "open" },
	{ TIER_FAULT_NVME_OPEN, -EMFILE, 2, 2, "open" },
	{ TIER_FAULT_NVME_HEADER, -EIO, 1, 1, "header write" },
	{ TIER_FAULT_NVME_HEADER, -EROFS, 2, 2, "header write" },
	{ TIER_FAULT_NVME_RING, -ENOMEM, 1, 1, "io_uring_queue_init" },
	{ TIER_FAULT_NVME_RING, -EMFILE, 2, 3, "io_uring_queue_init" },
};

START_TEST(test_open_faults)
{
	NEED_FAULTS();
	const struct open_fault_case *c = &open_fault_cases[_i];
	struct mopt o = { .npaths = c->npaths };
	struct tier_manifest *m = manifest_for(&o);
	struct tier_nvme *t = POISON(struct tier_nvme);
	const char *d;
	char idx[16];
	int rc;

	ts_fault_arm(c->site, c->nth, 1, c->err);
	rc = tier_nvme_open(m, TIER_NVME_SCRATCH, &t);
	ck_assert_uint_eq(ts_fault_fired(c->site), 1);
	ck_assert_msg(rc == c->err, "%s at call %u: %d (%s), expected %d: %s",
		      ts_fault_site_name(c->site), c->nth, rc, tier_strerror(rc), c->err,
		      tier_last_error());
	ck_assert_ptr_null(t);
	d = tier_last_error();
	snprintf(idx, sizeof(idx), "nvme%u", c->nth - 1);
	ck_assert_msg(strstr(d, file_of(m, c->nth - 1)) && strstr(d, idx) && strstr(d, c->needle) &&
		      strstr(d, tier_strerror(c->err)),
		      "%s: the detail should name %s (%s): %s", ts_fault_site_name(c->site),
		      file_of(m, c->nth - 1), idx, d);
	/* A failed scratch open leaves no file behind. */
	ck_assert_int_eq(files_left(), 0);
	/* With the fault gone the same manifest opens. */
	t = open_tier(m, TIER_NVME_SCRATCH);
	close_tier(t);
	tier_manifest_free(m);
}
END_TEST

/*
 * Growing a backing file as an object is placed (fault site
 * NVME_FALLOCATE, call nth = path nth - 1 of a 3-path object): a failure
 * names the path and the object and leaves the tier as it was; a step
 * that does not fit is retried at the object's own size; a file system
 * without fallocate grows the file sparse.
 */
struct grow_case {
	const char *name;
	int err;
	unsigned nth;
	int64_t count;
	int want;             /* the creation's result */
	const char *needle;
};

static const struct grow_case grow_cases[] = {
	{ "disk full", -ENOSPC, 1, TIER_FAULT_PERSISTENT, -ENOSPC, "no room on disk for object 'obj'" },
	{ "disk full at the third path", -ENOSPC, 3, TIER_FAULT_PERSISTENT, -ENOSPC,
	  "no room on disk for object 'obj'" },
	{ "the 64 MiB step does not fit, the object does", -ENOSPC, 2, 1, 0, NULL },
	{ "I/O error", -EIO, 2, 1, -EIO, "growing the file" },
	{ "no fallocate: sparse", -EOPNOTSUPP, 1, 1, 0, NULL },
};

START_TEST(test_grow_faults)
{
	NEED_FAULTS();
	const struct grow_case *c = &grow_cases[_i];
	struct mopt o = { .npaths = 3 };
	struct tier_manifest *m = manifest_for(&o);
	struct tier_nvme *t = open_tier(m, TIER_NVME_SCRATCH);
	struct tier_nvme_stats before, after;
	struct tier_nvme_obj *ob = POISON(struct tier_nvme_obj);
	uint64_t size = 3 * 64 * KiB, sz;
	unsigned char *a = abuf(size);
	uint64_t seed = 5;
	int rc;

	tier_nvme_get_stats(t, &before);
	ts_fault_arm(TIER_FAULT_NVME_FALLOCATE, c->nth, c->count, c->err);
	rc = tier_nvme_obj_create(t, "obj", size, &ob);
	ts_fault_disarm(TIER_FAULT_NVME_FALLOCATE);
	ck_assert_msg(rc == c->want, "%s: %d (%s), expected %d: %s", c->name, rc, tier_strerror(rc),
		      c->want, tier_last_error());
	if (rc) {
		char idx[16];

		snprintf(idx, sizeof(idx), "nvme%u", c->nth - 1);
		ck_assert_ptr_null(ob);
		ck_assert_msg(strstr(tier_last_error(), idx) &&
			      strstr(tier_last_error(), file_of(m, c->nth - 1)) &&
			      strstr(tier_last_error(), c->needle),
			      "%s: the detail should name %s (%s) and say '%s': %s", c->name,
			      file_of(m, c->nth - 1), idx, c->needle, tier_last_error());
		tier_nvme_get_stats(t, &after);
		ck_assert_uint_eq(after.free, before.free);
		ob = make_obj(t, "obj", size);
	} else if (c->count == 1 && c->err == -ENOSPC) {
		/* The file took just the extent, not the 64 MiB step. */
		disk_of(m, c->nth - 1, &sz);
		ck_assert_uint_eq(sz, align_of(64 * KiB) + 64 * KiB);
	}
	fill_rand(a, size, &seed);
	xwrite(t, ob, 0, size, a);
	check_range(t, ob, a, 0, size);
	free(a);
	close_tier(t);
	ck_assert_int_eq(files_left(), 0);
	tier_manifest_free(m);
}
END_TEST

/* create: true with the directory's creation failing (fault site MKDIR). */
START_TEST(test_mkdir_fault)
{
	NEED_FAULTS();
	const char *text = "gpu:\n  device: none\ndram:\n  capacity: 512MiB\nnvme:\n  paths:\n"
			   "    - path: ${T}/new/deeper/\n      capacity: 16MiB\n      create: true\n";
	struct tier_manifest *m = NULL;
	struct tier_nvme *t = POISON(struct tier_nvme);
	char dir[4200];
	int rc;

	snprintf(dir, sizeof(dir), "%s/new/deeper", g_dir);
	ck_assert_msg(tier_manifest_parse(text, strlen(text), "mkdir.yaml", 0, &m) == 0, "%s",
		      tier_last_error());
	ts_fault_arm(TIER_FAULT_MKDIR, 1, 1, -EACCES);
	rc = tier_nvme_open(m, TIER_NVME_SCRATCH, &t);
	ck_assert_int_eq(rc, -EACCES);
	ck_assert_ptr_null(t);
	ck_assert_msg(strstr(tier_last_error(), dir) && strstr(tier_last_error(), "mkdir"), "%s",
		      tier_last_error());
	ck_assert_int_ne(access(dir, F_OK), 0);
	t = open_tier(m, TIER_NVME_SCRATCH);
	ck_assert_int_eq(access(file_of(m, 0), F_OK), 0);
	close_tier(t);
	ck_assert_int_ne(access(file_of(m, 0), F_OK), 0);
	tier_manifest_free(m);
}
END_TEST

/* Registration refused (files at open, or buffers later): I/O still works. */
START_TEST(test_register_refused)
{
	NEED_FAULTS();
	bool at_open = _i == 0;
	struct mopt o = { .npaths = 2, .unit = 64 * KiB };
	struct tier_manifest *m = manifest_for(&o);
	struct tier_nvme *t;
	struct tier_nvme_obj *ob;
	unsigned char *big = abuf(2 * MiB), *ref = abuf(1 * MiB);
	uint64_t s = 61;

	if (at_open)
		ts_fault_arm(TIER_FAULT_NVME_REGISTER, 1, TIER_FAULT_PERSISTENT, -ENOMEM);
	t = open_tier(m, TIER_NVME_SCRATCH);
	if (!at_open)
		ts_fault_arm(TIER_FAULT_NVME_REGISTER, 1, TIER_FAULT_PERSISTENT, -ENOMEM);
	ob = make_obj(t, "reg", 1 * MiB);
	ck_assert_int_eq(tier_nvme_register_buffer(t, big, 2 * MiB), 0);
	ck_assert_uint_ge(ts_fault_fired(TIER_FAULT_NVME_REGISTER), 1);
	/* Once refused, later registrations say 0 without trying. */
	ck_assert_int_eq(tier_nvme_register_buffer(t, ref, 1 * MiB), 0);
	fill_rand(big, 1 * MiB, &s);
	xwrite(t, ob, 0, 1 * MiB, big);
	xread(t, ob, 0, 1 * MiB, big + 1 * MiB);
	assert_same(big + 1 * MiB, big, 1 * MiB, "I/O after registration was refused");
	memcpy(ref, big, 1 * MiB);
	ts_fault_disarm(TIER_FAULT_NVME_REGISTER);
	random_ops(t, ob, ref, 64 * KiB, &s, 20);
	close_tier(t);
	free(big);
	free(ref);
	tier_manifest_free(m);
}
END_TEST

/*
 * Allocation failure at every step of open + create + write + read +
 * close, each run in its own process: a run fails cleanly (-ENOMEM, a
 * detail, nothing half-made) or succeeds; it never crashes, hangs or
 * (under ASan) leaks.
 *
 * REGRESSION (nvme.c tier_nvme_open): when the second allocation (the
 * t->paths array) fails, the failure path calls tier_nvme_close(t) with
 * t->npaths set and t->paths NULL, which dereferences NULL (SIGSEGV).
 */
static struct tier_manifest *g_alloc_m;

/* Exit codes of a run (ASan exits 1 on an error, LSan 23 on a leak). */
enum { ALLOC_RUN_FAILED_CLEANLY = 40, ALLOC_RUN_CLEAN = 41, ALLOC_RUN_BAD = 42 };

static int alloc_run(uint64_t n)
{
	const uint64_t size = 3 * 64 * KiB + 100;
	unsigned char *a = malloc(size + 1), *b = malloc(size + 1);
	struct tier_nvme *t = NULL;
	struct tier_nvme_obj *o = NULL;
	const char *step = "open";
	uint64_t s = n;
	bool bad = false;
	int rc;

	fill_rand(a, size + 1, &s);
	ts_fault_arm(TIER_FAULT_ALLOC, n, 1, -ENOMEM);
	rc = tier_nvme_open(g_alloc_m, TIER_NVME_SCRATCH, &t);
	if (rc) {
		bad = t != NULL;
		goto out;
	}
	step = "create";
	rc = tier_nvme_obj_create(t, "alloc", size, &o);
	if (rc) {
		bad = o != NULL;
		goto close;
	}
	step = "write";
	rc = tier_nvme_write(t, o, 0, size, a + 1);    /* unaligned: bounce buffers */
	if (rc)
		goto close;
	step = "read";
	rc = tier_nvme_read(t, o, 0, size, b + 1);
	if (rc == 0 && memcmp(a + 1, b + 1, size) != 0) {
		fprintf(stderr, "alloc %llu: data read back differs\n", U64(n));
		bad = true;
	}
close:
	if (tier_nvme_close(t) != 0) {
		fprintf(stderr, "alloc %llu: close failed: %s\n", U64(n), tier_last_error());
		bad = true;
	}
out:
	if (rc && (rc != -ENOMEM || tier_last_error()[0] == '\0')) {
		fprintf(stderr, "alloc %llu: %s failed with %d (%s), detail '%s'\n", U64(n), step, rc,
			tier_strerror(rc), tier_last_error());
		bad = true;
	}
	if (rc && ts_fault_fired(TIER_FAULT_ALLOC) == 0) {
		fprintf(stderr, "alloc %llu: %s failed with nothing injected: %s\n", U64(n), step,
			tier_last_error());
		bad = true;
	}
	free(a);
	free(b);
	if (bad)
		return ALLOC_RUN_BAD;
	return ts_fault_fired(TIER_FAULT_ALLOC) ? ALLOC_RUN_FAILED_CLEANLY : ALLOC_RUN_CLEAN;
}

START_TEST(test_alloc_fail_nth)
{
	NEED_FAULTS();
	struct mopt o = { .npaths = 2, .unit = 64 * KiB };
	struct t_nth f = T_NTH(TIER_FAULT_ALLOC, -ENOMEM, 399);
	char failures[2048] = "";
	size_t flen = 0;
	int nfail = 0;

	g_alloc_m = manifest_for(&o);
	while (t_nth_next(&f)) {
		int st = 0;
		pid_t pid;

		fflush(stdout);
		fflush(stderr);
		pid = fork();
		ck_assert_int_ge(pid, 0);
		if (pid == 0)
			exit(alloc_run(f.nth));
		ck_assert_int_eq(waitpid(pid, &st, 0), pid);
		/* The child armed the site (alloc_run): its exit says whether it fired. */
		t_nth_ran(&f, !(WIFEXITED(st) && WEXITSTATUS(st) == ALLOC_RUN_CLEAN));
		if (WIFEXITED(st) && WEXITSTATUS(st) == ALLOC_RUN_CLEAN)
			break;              /* nothing left to fail: a clean run */
		if (WIFEXITED(st) && WEXITSTATUS(st) == ALLOC_RUN_FAILED_CLEANLY)
			continue;
		nfail++;
		if (flen < sizeof(failures) - 100)
			flen += (size_t)snprintf(failures + flen, sizeof(failures) - flen,
						 "\n  allocation %llu: %s %d", U64(f.nth),
						 WIFSIGNALED(st) ? "killed by signal" : "exit status",
						 WIFSIGNALED(st) ? WTERMSIG(st) : WEXITSTATUS(st));
	}
	ck_assert_msg(nfail == 0,
		      "%d of %llu runs with one failed allocation went wrong (a crash at allocation 2 - "
		      "signal 11, or exit status 1 under ASan - is the REGRESSION in tier_nvme_open's "
		      "failure path; 23 is a leak under ASan; 42 a bad result, printed above):%s",
		      nfail, U64(f.nth), failures);
	ck_assert_uint_gt(f.nth, 10);
	tier_manifest_free(g_alloc_m);
}
END_TEST

/*
 * A write that runs out of memory part-way (fault site ALLOC at each
 * allocation in turn): refused outright (-ENOMEM from submit, no ticket)
 * it changes nothing; failing later (-ENOMEM through the ticket) the units
 * it handed over are written and the rest untouched.  Either way every
 * stripe unit reads back whole, old or new, and none reads as damaged
 * (its checksum matches what is on the device).  Two shapes: whole units
 * from an aligned buffer, and a partial write from an unaligned one
 * (bounce buffers, read-modify-write at both ends).
 */
START_TEST(test_write_out_of_memory)
{
	NEED_FAULTS();
	const uint64_t U = 64 * KiB, N = 10, size = N * U;
	const uint64_t off = _i ? 1000 : 0, len = _i ? size - 2000 : size;
	struct mopt o = { .npaths = 1, .unit = U };
	struct tier_manifest *m = manifest_for(&o);
	struct tier_nvme *t = open_tier(m, TIER_NVME_SCRATCH);
	struct tier_nvme_obj *ob = make_obj(t, "keep", size);
	unsigned char *a = abuf(size), *b = abuf(size + 1), *img = abuf(size), *r = abuf(size);
	unsigned char *src = _i ? b + 1 : b;
	int refused = 0, failed_later = 0;
	struct t_nth f = T_NTH(TIER_FAULT_ALLOC, -ENOMEM, 199);
	uint64_t s = 71;

	fill_rand(a, size, &s);
	xwrite(t, ob, 0, size, a);
	while (t_nth_next(&f)) {
		struct tier_ticket *tk = NULL;
		bool fired;
		int rc;

		fill_rand(src, len, &s);
		memcpy(img, a, size);
		memcpy(img + off, src, len);
		t_nth_arm(&f);
		rc = tier_nvme_submit_ticket(t, ob, TIER_IO_WRITE, off, len, src, &tk);
		fired = t_nth_fired(&f);
		if (rc == 0)
			rc = tier_ticket_wait(tk);
		else
			ck_assert_ptr_null(tk);
		if (rc == 0) {
			ck_assert_uint_eq(fired, 0);
			memcpy(a, img, size);
			break;
		}
		ck_assert_msg(rc == -ENOMEM, "allocation %llu: %d (%s): %s", U64(f.nth), rc,
			      tier_strerror(rc), tier_last_error());
		ck_assert_msg(strstr(tier_last_error(), "out of memory"), "%s", tier_last_error());
		if (tk)
			failed_later++;
		else
			refused++;
		for (uint64_t u = 0; u < N; u++) {
			memset(r, 0, U);
			rc = tier_nvme_read(t, ob, u * U, U, r);
			ck_assert_msg(rc == 0, "allocation %llu failed in a write; unit %llu then reads: %s: %s",
				      U64(f.nth), U64(u), tier_strerror(rc), tier_last_error());
			if (memcmp(r, img + u * U, U) == 0)
				memcpy(a + u * U, r, U);
			else
				ck_assert_msg(memcmp(r, a + u * U, U) == 0,
					      "allocation %llu: unit %llu is neither old nor new", U64(f.nth), U64(u));
		}
	}
	ck_assert_int_ge(refused, 2);
	ck_assert_int_ge(failed_later, 3);
	check_range(t, ob, a, 0, size);
	close_tier(t);
	free(a);
	free(b);
	free(img);
	free(r);
	tier_manifest_free(m);
}
END_TEST

/* ---------------------------------------------------------- fixed buffers */

START_TEST(test_fixed_buffers)
{
	const uint64_t U = 64 * KiB, size = 2 * MiB;
	struct mopt o = { .npaths = 2, .unit = U, .qd = 8 };
	struct tier_manifest *m = manifest_for(&o);
	struct tier_nvme *t = open_tier(m, TIER_NVME_SCRATCH);
	struct tier_nvme_obj *ob = make_obj(t, "fixed", size);
	unsigned char *big = abuf(4 * MiB + 2 * U), *small = abuf(1 * MiB), *ref = abuf(size);
	uint64_t s = 81;

	ck_assert_int_eq(tier_nvme_register_buffer(t, big, 0), -EINVAL);
	ck_assert_int_eq(tier_nvme_register_buffer(t, big, (1ull << 30) + 1), -EINVAL);
	ck_assert_int_eq(tier_nvme_register_buffer(t, big, 4 * MiB), 0);
	/* Whole units from inside the buffer, read back into another part of it. */
	fill_rand(big, size, &s);
	memcpy(ref, big, size);
	xwrite(t, ob, 0, size, big);
	memset(big + size, 0, size);
	xread(t, ob, 0, size, big + size);
	assert_same(big + size, ref, size, "fixed buffer round trip");
	/* Parts of units, and a buffer that runs past the registered region's end. */
	fill_rand(big + 4096, 3 * U, &s);
	memcpy(ref + U + 4096, big + 4096, 3 * U);
	xwrite(t, ob, U + 4096, 3 * U, big + 4096);
	xread(t, ob, 0, size, big + size);
	assert_same(big + size, ref, size, "partial writes from the fixed buffer");
	xread(t, ob, 0, 2 * U, big + 4 * MiB - U);   /* half inside, half outside */
	assert_same(big + 4 * MiB - U, ref, 2 * U, "a buffer crossing the region's end");
	/* A second buffer: both stay usable.  (Retried on -EBUSY: see
	 * test_register_after_sync_io for why a just-finished read can still
	 * count as in flight.) */
	{
		int rc;

		while ((rc = tier_nvme_register_buffer(t, small, 1 * MiB)) == -EBUSY)
			sched_yield();
		ck_assert_int_eq(rc, 0);
	}
	fill_rand(small, 8 * U, &s);
	memcpy(ref + 16 * U, small, 8 * U);
	xwrite(t, ob, 16 * U, 8 * U, small);
	xread(t, ob, 0, size, big);
	assert_same(big, ref, size, "after registering a second buffer");
	random_ops(t, ob, ref, U, &s, 20);
	check_range(t, ob, ref, 0, size);
	close_tier(t);
	free(big);
	free(small);
	free(ref);
	tier_manifest_free(m);
}
END_TEST

/*
 * After a synchronous read or write has returned, nothing is in flight:
 * tier_nvme_register_buffer() must not say -EBUSY.
 *
 * REGRESSION (nvme.c req_finish): the callback runs - for the synchronous
 * forms, ticket_cb, which wakes tier_ticket_wait() - before
 * t->inflight_reqs is decremented, so for a moment after
 * tier_nvme_read()/tier_nvme_write() return the request still counts as
 * in flight and registration fails with -EBUSY.  A race: one try in a
 * few dozen hits it here (every one under ASan), so the test makes 300
 * (60 per open: a tier takes at most 64 fixed buffers).
 */
START_TEST(test_register_after_sync_io)
{
	struct mopt o = { .npaths = 1, .unit = 64 * KiB };
	struct tier_manifest *m = manifest_for(&o);
	unsigned char *buf = abuf(60 * 4096);
	int busy = 0, tries = 0;

	for (int round = 0; round < 5; round++) {
		struct tier_nvme *t = open_tier(m, TIER_NVME_SCRATCH);
		struct tier_nvme_obj *ob = make_obj(t, "sync", 64 * KiB);

		for (int i = 0; i < 60; i++, tries++) {
			int rc;

			xread(t, ob, 0, 4096, buf + i * 4096);
			rc = tier_nvme_register_buffer(t, buf + i * 4096, 4096);
			ck_assert_msg(rc == 0 || rc == -EBUSY, "register: %d (%s): %s", rc,
				      tier_strerror(rc), tier_last_error());
			if (rc == -EBUSY)
				busy++;
		}
		close_tier(t);
	}
	ck_assert_msg(busy == 0,
		      "REGRESSION: %d of %d registrations right after tier_nvme_read() returned said "
		      "-EBUSY (a request in flight)", busy, tries);
	free(buf);
	tier_manifest_free(m);
}
END_TEST

/* A callback that holds its ring's completion thread until released. */
struct gate {
	pthread_mutex_t lock;
	pthread_cond_t cond;
	bool entered, release, done;
	int result;
};

static void gate_cb(void *arg, int result, const char *detail)
{
	struct gate *g = arg;

	(void)detail;
	pthread_mutex_lock(&g->lock);
	g->entered = true;
	g->result = result;
	pthread_cond_broadcast(&g->cond);
	while (!g->release)
		pthread_cond_wait(&g->cond, &g->lock);
	g->done = true;
	pthread_cond_broadcast(&g->cond);
	pthread_mutex_unlock(&g->lock);
}

START_TEST(test_busy)
{
	struct mopt o = { .npaths = 1, .unit = 64 * KiB };
	struct tier_manifest *m = manifest_for(&o);
	struct tier_nvme *t = open_tier(m, TIER_NVME_SCRATCH);
	struct tier_nvme_obj *o1 = make_obj(t, "one", 256 * KiB);
	struct tier_nvme_obj *o2 = make_obj(t, "two", 256 * KiB);
	unsigned char *buf = abuf(1 * MiB), *ref = abuf(256 * KiB);
	struct tier_ticket *tk = NULL;
	struct gate g;
	uint64_t s = 91;
	int rc;

	memset(&g, 0, sizeof(g));
	pthread_mutex_init(&g.lock, NULL);
	pthread_cond_init(&g.cond, NULL);
	fill_rand(ref, 256 * KiB, &s);
	xwrite(t, o2, 0, 256 * KiB, ref);
	/* Request 1 completes and its callback holds the ring's only thread... */
	ck_assert_int_eq(tier_nvme_submit(t, o1, TIER_IO_READ, 0, 64 * KiB, buf, gate_cb, &g), 0);
	pthread_mutex_lock(&g.lock);
	while (!g.entered)
		pthread_cond_wait(&g.cond, &g.lock);
	pthread_mutex_unlock(&g.lock);
	/* ... so request 2, on the same ring, stays in flight. */
	ck_assert_int_eq(tier_nvme_submit_ticket(t, o2, TIER_IO_READ, 0, 256 * KiB, buf + 512 * KiB, &tk), 0);
	ck_assert_int_eq(tier_nvme_register_buffer(t, buf, 1 * MiB), -EBUSY);
	ck_assert_ptr_nonnull(strstr(tier_last_error(), "in flight"));
	ck_assert_int_eq(tier_nvme_obj_destroy(t, o2), -EBUSY);
	ck_assert_ptr_nonnull(strstr(tier_last_error(), "'two'"));
	pthread_mutex_lock(&g.lock);
	g.release = true;
	pthread_cond_broadcast(&g.cond);
	while (!g.done)
		pthread_cond_wait(&g.cond, &g.lock);
	pthread_mutex_unlock(&g.lock);
	ck_assert_int_eq(g.result, 0);
	ck_assert_int_eq(tier_ticket_wait(tk), 0);
	assert_same(buf + 512 * KiB, ref, 256 * KiB, "request 2");
	/* Once request 1's accounting is done, registration works. */
	while ((rc = tier_nvme_register_buffer(t, buf, 1 * MiB)) == -EBUSY)
		sched_yield();
	ck_assert_int_eq(rc, 0);
	ck_assert_int_eq(tier_nvme_obj_destroy(t, o2), 0);
	ck_assert_int_eq(tier_nvme_obj_destroy(t, o1), 0);
	close_tier(t);
	pthread_mutex_destroy(&g.lock);
	pthread_cond_destroy(&g.cond);
	free(buf);
	free(ref);
	tier_manifest_free(m);
}
END_TEST

/* ----------------------------------------------------- file systems */

/*
 * O_DIRECT refused, in a private mount namespace (Check runs each test in
 * a forked child).  Skipped where mounting is not allowed.
 *  - ramfs refuses O_DIRECT: the manifest check refuses direct: true on
 *    it; and a manifest checked on a normal directory that is then covered
 *    by a ramfs makes tier_nvme_open fail with -EINVAL itself.
 *  - ramfs reports no free space, so the manifest's capacity check refuses
 *    any capacity there even with direct: false; the "works without
 *    O_DIRECT" half uses a tmpfs with direct: false instead (this kernel's
 *    tmpfs would accept O_DIRECT too).
 */
START_TEST(test_direct_refused)
{
	char ram[4096], tmpfs[4096], path0[4200];
	struct tier_manifest *m = NULL;
	struct tier_nvme *t = NULL;
	char text[4096];
	int rc;

	snprintf(ram, sizeof(ram), "%s/ram", g_dir);
	snprintf(tmpfs, sizeof(tmpfs), "%s/tmpfs", g_dir);
	ck_assert_int_eq(mkdir(ram, 0700), 0);
	ck_assert_int_eq(mkdir(tmpfs, 0700), 0);
	if (unshare(CLONE_NEWNS) != 0 && unshare(CLONE_NEWUSER | CLONE_NEWNS) != 0) {
		fprintf(stderr, "test_direct_refused: no mount namespace; skipped\n");
		return;
	}
	mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL);
	if (mount("none", ram, "ramfs", 0, NULL) != 0) {
		fprintf(stderr, "test_direct_refused: cannot mount ramfs; skipped\n");
		return;
	}

	/* 1. The manifest check refuses direct: true on ramfs. */
	{
		struct mopt o = { .npaths = 1, .capacity = 1 * MiB, .path0 = path0 };

		snprintf(path0, sizeof(path0), "%s/", ram);
		rc = manifest_try(&o, &m, text, sizeof(text));
		ck_assert_int_eq(rc, -EINVAL);
		ck_assert_msg(strstr(tier_last_error(), "refuses O_DIRECT while direct: true"), "%s",
			      tier_last_error());
	}
	/* 2. Checked on a normal directory, covered by a ramfs before the open. */
	{
		struct mopt o = { .npaths = 1, .capacity = 16 * MiB };
		char p0[4200];

		snprintf(p0, sizeof(p0), "%s/p0", g_dir);
		m = manifest_for(&o);
		ck_assert_msg(mount("none", p0, "ramfs", 0, NULL) == 0, "mount ramfs on %s: %s", p0,
			      strerror(errno));
		rc = tier_nvme_open(m, TIER_NVME_SCRATCH, &t);
		ck_assert_msg(rc == -EINVAL, "open on ramfs with O_DIRECT: %d (%s): %s", rc,
			      tier_strerror(rc), tier_last_error());
		ck_assert_ptr_null(t);
		ck_assert_msg(strstr(tier_last_error(), "refuses O_DIRECT") &&
			      strstr(tier_last_error(), file_of(m, 0)),
			      "%s", tier_last_error());
		ck_assert_int_eq(umount2(p0, MNT_DETACH), 0);
		tier_manifest_free(m);
	}
	/* 3. direct: false on a tmpfs works, and data round-trips. */
	if (mount("none", tmpfs, "tmpfs", 0, "size=64m") != 0) {
		fprintf(stderr, "test_direct_refused: cannot mount tmpfs; that half skipped\n");
	} else {
		struct mopt o = { .npaths = 1, .capacity = 16 * MiB, .direct = -1, .path0 = path0 };
		struct tier_nvme_obj *ob;
		unsigned char *ref = abuf(1 * MiB + 3);
		uint64_t s = 101;

		snprintf(path0, sizeof(path0), "%s/", tmpfs);
		m = manifest_for(&o);
		t = open_tier(m, TIER_NVME_SCRATCH);
		ob = make_obj(t, "on-tmpfs", 1 * MiB + 3);
		fill_rand(ref, 1 * MiB + 3, &s);
		xwrite(t, ob, 0, 1 * MiB + 3, ref);
		check_range(t, ob, ref, 0, 1 * MiB + 3);
		random_ops(t, ob, ref, 64 * KiB, &s, 20);
		check_range(t, ob, ref, 0, 1 * MiB + 3);
		close_tier(t);
		tier_manifest_free(m);
		free(ref);
		umount2(tmpfs, MNT_DETACH);
	}
	umount2(ram, MNT_DETACH);
}
END_TEST

/*
 * A scratch file's space comes back at close: the file is unlinked and no
 * reference to it outlives tier_nvme_close (the ring's registered file
 * went with the ring's asynchronous teardown, so for a while after close
 * the blocks stayed allocated and the next preallocation on a nearly full
 * file system failed with ENOSPC: `tier-bench step` measures the disk
 * again after closing its store).  On a 48 MiB tmpfs, a 32 MiB scratch
 * tier is opened, written, closed and opened again, 16 times: each open
 * preallocates 32 MiB, which fits only if the last one's were freed.
 */
START_TEST(test_scratch_space_freed_on_close)
{
	char tmpfs[4096], path0[4200];
	struct tier_manifest *m;
	unsigned char *buf = abuf(1 * MiB);
	uint64_t seed = 7;

	snprintf(tmpfs, sizeof(tmpfs), "%s/small", g_dir);
	ck_assert_int_eq(mkdir(tmpfs, 0700), 0);
	if (unshare(CLONE_NEWNS) != 0 && unshare(CLONE_NEWUSER | CLONE_NEWNS) != 0) {
		fprintf(stderr, "test_scratch_space_freed_on_close: no mount namespace; skipped\n");
		free(buf);
		return;
	}
	mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL);
	if (mount("none", tmpfs, "tmpfs", 0, "size=48m") != 0) {
		fprintf(stderr, "test_scratch_space_freed_on_close: cannot mount tmpfs; skipped\n");
		free(buf);
		return;
	}
	{
		struct mopt o = { .npaths = 1, .capacity = 32 * MiB, .direct = -1, .path0 = path0 };

		snprintf(path0, sizeof(path0), "%s/", tmpfs);
		m = manifest_for(&o);
	}
	fill_rand(buf, 1 * MiB, &seed);
	for (int k = 0; k < 16; k++) {
		struct tier_nvme *t = NULL;
		struct tier_nvme_obj *ob;
		int rc = tier_nvme_open(m, TIER_NVME_SCRATCH, &t);

		ck_assert_msg(rc == 0, "open %d on the 48 MiB tmpfs: %d (%s): %s", k, rc,
			      tier_strerror(rc), tier_last_error());
		ob = make_obj(t, "o", 1 * MiB);
		xwrite(t, ob, 0, 1 * MiB, buf);
		check_range(t, ob, buf, 0, 1 * MiB);
		close_tier(t);
	}
	tier_manifest_free(m);
	free(buf);
	umount2(tmpfs, MNT_DETACH);
}
END_TEST

static Suite *nvme_suite(void)
{
	Suite *s = suite_create("nvme");
	TCase *tc = tcase_create("format");

	tcase_add_unchecked_fixture(tc, t_case_setup, t_case_teardown);
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_loop_test(tc, test_header_round_trip, 0, (int)ARRAY_SIZE(hdr_cases));
	tcase_add_test(tc, test_header_created_ns_kept);
	tcase_add_test(tc, test_header_capacity_kept);
	tcase_add_test(tc, test_scratch_kept_file_clean);
	tcase_add_loop_test(tc, test_header_corrupt, 0, (int)ARRAY_SIZE(corrupt_cases));
	tcase_add_loop_test(tc, test_foreign_file, 0, (int)ARRAY_SIZE(foreign_cases));
	tcase_add_loop_test(tc, test_file_mode_size, 0, (int)ARRAY_SIZE(file_cases));
	tcase_add_test(tc, test_no_nvme_paths);
	tcase_add_test(tc, test_manifest_freed_after_open);
	tcase_add_test(tc, test_direct_refused);
	tcase_add_test(tc, test_scratch_space_freed_on_close);
	suite_add_tcase(s, tc);

	tc = tcase_create("objects");
	tcase_add_unchecked_fixture(tc, t_case_setup, t_case_teardown);
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_loop_test(tc, test_objects_until_enospc, 0, (int)ARRAY_SIZE(fill_cases));
	tcase_add_test(tc, test_object_names);
	tcase_add_test(tc, test_object_fragmentation);
	tcase_add_loop_test(tc, test_object_too_big, 0, (int)ARRAY_SIZE(huge_sizes));
	suite_add_tcase(s, tc);

	tc = tcase_create("io");
	tcase_add_unchecked_fixture(tc, t_case_setup, t_case_teardown);
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_loop_test(tc, test_striping, 0, (int)ARRAY_SIZE(stripe_cases));
	tcase_add_test(tc, test_concurrent);
	tcase_add_loop_test(tc, test_submitters_exit, 0, 2);
	tcase_add_loop_test(tc, test_unit_writers, 0, (int)ARRAY_SIZE(race_cases));
	tcase_add_loop_test(tc, test_bench_qd, 0, (int)ARRAY_SIZE(qd_cases));
	tcase_add_loop_test(tc, test_unit_order, 0, (int)ARRAY_SIZE(order_cases));
	tcase_add_test(tc, test_close_drains);
	tcase_add_loop_test(tc, test_invalid_requests, 0, (int)ARRAY_SIZE(inval_cases));
	tcase_add_test(tc, test_fixed_buffers);
	tcase_add_test(tc, test_busy);
	tcase_add_test(tc, test_register_after_sync_io);
	suite_add_tcase(s, tc);

	tc = t_tcase_faults("checksums");
	tcase_add_unchecked_fixture(tc, t_case_setup, t_case_teardown);
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_loop_test(tc, test_bitflip, 0, (int)ARRAY_SIZE(flip_cases));
	tcase_add_test(tc, test_bitflip_stays_in_request);
	suite_add_tcase(s, tc);

	tc = t_tcase_faults("faults");
	tcase_add_unchecked_fixture(tc, t_case_setup, t_case_teardown);
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_test(tc, test_header_read_error_on_foreign_file);
	tcase_add_test(tc, test_close_drains_delayed);
	tcase_add_loop_test(tc, test_io_errors, 0, (int)ARRAY_SIZE(ioerr_cases));
	tcase_add_loop_test(tc, test_short_transfers, 0, (int)ARRAY_SIZE(short_cases));
	tcase_add_test(tc, test_delay);
	tcase_add_loop_test(tc, test_submit_fails, 0, (int)ARRAY_SIZE(submit_cases));
	tcase_add_loop_test(tc, test_open_faults, 0, (int)ARRAY_SIZE(open_fault_cases));
	tcase_add_loop_test(tc, test_grow_faults, 0, (int)ARRAY_SIZE(grow_cases));
	tcase_add_test(tc, test_mkdir_fault);
	tcase_add_loop_test(tc, test_register_refused, 0, 2);
	tcase_add_test(tc, test_alloc_fail_nth);
	tcase_add_loop_test(tc, test_write_out_of_memory, 0, 2);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return t_run_suite(nvme_suite());
}
