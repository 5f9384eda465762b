/*
 * test_diskfull.c - a store on a full disk: a 256 MiB ext4 file system,
 * loop-mounted (root only; the suite says so and skips where it cannot
 * mount), filled from outside.
 *
 * Covers (issue 15, item 3):
 *  - creation: the backing file grows as objects are created; the object
 *    that no longer fits gets -ENOSPC naming the path and what was free,
 *    while every byte acknowledged before is intact and the store goes on
 *    working for objects that fit (after one is destroyed);
 *  - write-back: on a file system where files grow sparse (no fallocate:
 *    the fault site NVME_FALLOCATE answers -EOPNOTSUPP), a disk filled from
 *    outside fails the write-back (-ENOSPC, reported), the bytes stay dirty,
 *    and once space is freed the flush completes and every byte reads back
 *    from the disk.  On ext4 with fallocate, the same run's write-backs go
 *    through: the space was reserved when the object was created.
 */
#include "config.h"

#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/error.h"
#include "common/fault.h"
#include "runtime/manifest/manifest.h"
#include "t_helpers.h"

#define MiB (1ull << 20)
#define U64(x) ((unsigned long long)(x))

static char *g_dir, g_mnt[4200], g_img[4200], g_filler[4300];
static bool g_mounted;

/* A 256 MiB ext4 image, loop-mounted at g_mnt; false where it cannot be. */
static bool mount_fs(void)
{
	char cmd[14000];
	int fd;

	snprintf(g_mnt, sizeof(g_mnt), "%s/mnt", g_dir);
	snprintf(g_img, sizeof(g_img), "%s/fs.img", g_dir);
	snprintf(g_filler, sizeof(g_filler), "%s/filler", g_mnt);
	ck_assert_int_eq(mkdir(g_mnt, 0700), 0);
	fd = open(g_img, O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC, 0600);
	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(ftruncate(fd, 256 * MiB), 0);
	close(fd);
	if (geteuid() != 0) {
		printf("diskfull: not root: no loop mount; skipped\n");
		return false;
	}
	snprintf(cmd, sizeof(cmd),
		 "mkfs.ext4 -q -F -m 0 -E nodiscard '%s' >/dev/null 2>&1 && "
		 "mount -o loop '%s' '%s' 2>/dev/null", g_img, g_img, g_mnt);
	if (system(cmd) != 0) {
		printf("diskfull: cannot make or loop-mount an ext4 image here; skipped\n");
		return false;
	}
	g_mounted = true;
	return true;
}

static void setup(void)
{
	ts_fault_reset_all();
	g_dir = t_mkdtemp();
	g_mounted = false;
}

static void teardown(void)
{
	ts_fault_reset_all();
	if (g_mounted)
		t_umount(g_mnt);
	t_rmtree(g_dir);
	free(g_dir);
}

/* Fills the file system from outside, leaving about @leave bytes free. */
static void fill_outside(uint64_t leave)
{
	static char chunk[1 << 20];
	int fd = open(g_filler, O_CREAT | O_WRONLY | O_APPEND | O_CLOEXEC, 0600);
	uint64_t freeb = t_fs_free(g_mnt);

	ck_assert_int_ge(fd, 0);
	memset(chunk, 0xee, sizeof(chunk));
	while (freeb > leave + sizeof(chunk)) {
		ssize_t n = write(fd, chunk, sizeof(chunk));

		if (n < 0 && errno == ENOSPC)
			break;
		ck_assert_int_gt(n, 0);
		freeb = t_fs_free(g_mnt);
	}
	ck_assert_int_eq(fsync(fd), 0);
	close(fd);
}

static void free_outside(void)
{
	ck_assert_int_eq(unlink(g_filler), 0);
	sync();
}

/* The manifest, resolved while the file system is empty: 200 MiB of it. */
static struct tier_manifest *make_manifest(void)
{
	struct tier_manifest *m = NULL;
	char text[5000];
	int n;

	n = snprintf(text, sizeof(text),
		     "name: full\ngpu:\n  device: none\ndram:\n  capacity: 64MiB\n"
		     "optimizer:\n  shard_size: 4MiB\nnvme:\n  stripe_unit: 1MiB\n"
		     "  paths:\n    - path: %s/\n      capacity: 200MiB\n", g_mnt);
	ck_assert_msg(tier_manifest_parse(text, (size_t)n, "full.yaml", 0, &m) == 0, "%s",
		      tier_last_error());
	return m;
}

static struct tier_store *open_store(struct tier_manifest *m)
{
	struct tier_store_params p;
	struct tier_store *s = NULL;
	int rc;

	tier_store_params_init(&p);
	rc = tier_store_open(m, &p, &s);
	ck_assert_msg(rc == 0, "REGRESSION: opening a store with a 200 MiB capacity on a disk with %llu bytes free: %s",
		      t_fs_free(g_mnt), tier_last_error());
	return s;
}

static void pattern(unsigned char *b, size_t n, unsigned seed)
{
	for (size_t i = 0; i < n; i++)
		b[i] = (unsigned char)((i >> 12) * 7 + i * 13 + seed);
}

/* Reads @o back and compares it with @seed's pattern. */
static void check_obj(struct tier_store *s, struct tier_obj *o, unsigned seed)
{
	size_t n = tier_obj_size(o);
	unsigned char *want = malloc(n), *got = malloc(n);
	int rc;

	pattern(want, n, seed);
	memset(got, 0, n);
	rc = tier_obj_read(s, o, 0, n, got);
	ck_assert_msg(rc == 0, "read of '%s': %s", tier_obj_name(o), tier_last_error());
	if (memcmp(got, want, n) != 0) {
		size_t i = 0;

		while (got[i] == want[i])
			i++;
		ck_abort_msg("'%s': byte %zu is %u, written %u", tier_obj_name(o), i, got[i], want[i]);
	}
	free(want);
	free(got);
}

static struct tier_obj *make_written(struct tier_store *s, const char *name, size_t n,
				     unsigned seed)
{
	unsigned char *b = malloc(n);
	struct tier_obj *o = NULL;
	int rc = tier_obj_create(s, name, n, &o);

	ck_assert_msg(rc == 0, "create '%s': %s", name, tier_last_error());
	pattern(b, n, seed);
	ck_assert_int_eq(tier_obj_write(s, o, 0, n, b), 0);
	free(b);
	return o;
}

/* Drops every object from DRAM by filling it with a scratch object. */
static void push_out(struct tier_store *s, struct tier_obj *big)
{
	void *p;

	ck_assert_int_eq(tier_obj_acquire(s, big, TIER_DRAM, TIER_ACQUIRE_WRITE | TIER_ACQUIRE_DISCARD,
					  &p), 0);
	memset(p, 0, tier_obj_size(big));
	ck_assert_int_eq(tier_obj_release(s, big, TIER_DRAM, false), 0);
}

/*
 * REGRESSION (issue 15, item 3): the open preallocated the whole capacity
 * and failed on a disk with less free; now objects are created until the
 * disk is full, the next gets -ENOSPC naming the path, and nothing
 * acknowledged is lost.
 */
START_TEST(test_create_until_full)
{
	struct tier_manifest *m;
	struct tier_store *s;
	struct tier_obj *o[8] = { NULL }, *x = NULL;
	unsigned made = 0;
	int rc = 0;

	if (!mount_fs())
		return;
	m = make_manifest();
	fill_outside(150 * MiB);
	s = open_store(m);
	/* For pushing the others out of DRAM, to read them from the disk. */
	ck_assert_int_eq(tier_obj_create(s, "x", 48 * MiB, &x), 0);
	for (made = 0; made < 8; made++) {
		char name[16];
		unsigned char *b = malloc(24 * MiB);

		snprintf(name, sizeof(name), "o%u", made);
		rc = tier_obj_create(s, name, 24 * MiB, &o[made]);
		if (rc) {
			free(b);
			break;
		}
		pattern(b, 24 * MiB, made);
		ck_assert_int_eq(tier_obj_write(s, o[made], 0, 24 * MiB, b), 0);
		ck_assert_msg(tier_store_flush(s) == 0, "flush after '%s': %s", name, tier_last_error());
		free(b);
	}
	printf("diskfull: %u objects of 24 MiB created, then: %s\n", made, tier_last_error());
	ck_assert_msg(rc == -ENOSPC && made >= 2 && made <= 6, "%u objects, then %d: %s", made, rc,
		      tier_last_error());
	ck_assert_msg(strstr(tier_last_error(), g_mnt) && strstr(tier_last_error(), "free"),
		      "the detail should name the path under %s and what was free: %s", g_mnt,
		      tier_last_error());
	ck_assert_ptr_null(tier_obj_find(s, "o9"));
	/* Everything acknowledged, from the disk. */
	push_out(s, x);
	for (unsigned i = 0; i < made; i++)
		check_obj(s, o[i], i);
	/* Room made: the store goes on. */
	ck_assert_int_eq(tier_obj_destroy(s, o[0]), 0);
	o[0] = make_written(s, "again", 20 * MiB, 7);
	ck_assert_int_eq(tier_store_flush(s), 0);
	push_out(s, x);
	check_obj(s, o[0], 7);
	ck_assert_int_eq(tier_store_close(s), 0);
	tier_manifest_free(m);
}
END_TEST

struct wb_case {
	const char *name;
	bool sparse;    /* files grow sparse (the file system has no fallocate) */
};

static const struct wb_case wb_cases[] = {
	{ "fallocate: the space is reserved at creation", false },
};

/* Sparse files come from the fault site NVME_FALLOCATE: a fault case. */
static const struct wb_case wb_sparse_cases[] = {
	{ "sparse: the write-back fails, then completes", true },
};

/*
 * A disk filled from outside between a write and its write-back (not a
 * regression: the contract, on both kinds of file system).  Sparse:
 * the flush fails with -ENOSPC naming the object, the bytes stay dirty in
 * DRAM; once space is freed the flush completes and every byte comes back
 * from the disk.  With fallocate the flush goes through at once.
 */
static void writeback_full(const struct wb_case *c)
{
	struct tier_manifest *m;
	struct tier_store *s;
	struct tier_obj *a, *b, *x;
	int rc;

	if (!mount_fs())
		return;
	if (c->sparse)
		ts_fault_arm(TIER_FAULT_NVME_FALLOCATE, 1, TIER_FAULT_PERSISTENT, -EOPNOTSUPP);
	m = make_manifest();
	s = open_store(m);
	a = make_written(s, "a", 24 * MiB, 1);
	b = make_written(s, "b", 16 * MiB + 12345, 2);
	x = NULL;
	ck_assert_int_eq(tier_obj_create(s, "x", 48 * MiB, &x), 0);
	fill_outside(0);
	rc = tier_store_flush(s);
	printf("diskfull: %s: flush on a full disk: %d %s\n", c->name, rc, rc ? tier_last_error() : "");
	if (!c->sparse) {
		ck_assert_msg(rc == 0, "%s: %s", c->name, tier_last_error());
	} else {
		ck_assert_msg(rc == -ENOSPC && strstr(tier_last_error(), "write-back") &&
			      strstr(tier_last_error(), g_mnt),
			      "%s: the flush gave %d: %s", c->name, rc, tier_last_error());
		/* Still dirty, still there. */
		check_obj(s, a, 1);
		check_obj(s, b, 2);
		free_outside();
		rc = tier_store_flush(s);
		ck_assert_msg(rc == 0, "%s: flush after freeing space: %s", c->name, tier_last_error());
	}
	push_out(s, x);
	check_obj(s, a, 1);
	check_obj(s, b, 2);
	ck_assert_int_eq(tier_store_close(s), 0);
	tier_manifest_free(m);
}

START_TEST(test_writeback_full)
{
	writeback_full(&wb_cases[_i]);
}
END_TEST

START_TEST(test_writeback_full_sparse)
{
	NEED_FAULTS();
	writeback_full(&wb_sparse_cases[_i]);
}
END_TEST

static Suite *diskfull_suite(void)
{
	Suite *s = suite_create("diskfull");
	TCase *tc = tcase_create("full");

	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_set_timeout(tc, 120);
	tcase_add_test(tc, test_create_until_full);
	tcase_add_loop_test(tc, test_writeback_full, 0, (int)ARRAY_SIZE(wb_cases));
	suite_add_tcase(s, tc);

	tc = t_tcase_faults("full-faults");
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_set_timeout(tc, 120);
	tcase_add_loop_test(tc, test_writeback_full_sparse, 0,
			    (int)ARRAY_SIZE(wb_sparse_cases));
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return t_run_suite(diskfull_suite());
}
