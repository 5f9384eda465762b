/*
 * test_statseg.c - the stats segment (formats/statseg.c).
 *
 * Every test runs with TIER_STATS_DIR set to a fresh scratch directory.
 *
 * Covers:
 *  - create: the file's name, mode 0600 under any umask, owner, no
 *    temporary file left behind; the header's fields; names cut to 63
 *    bytes; manifest texts (none, empty, several lines, 100 KB) read back;
 *    bad sizes and a missing directory refused;
 *  - publish and read: zeros before the first publish, round trips, a
 *    prefix with a ragged tail, a read longer than the payload refused, a
 *    writer stuck mid-publish (odd sequence) giving -EAGAIN; a file cut
 *    short under an open view refused by the next read (never SIGBUS),
 *    the view's header and manifest still whole;
 *  - close removes the file; a forked child's close of an inherited
 *    segment does not;
 *  - open refuses, with the named error and the path in the detail: bad
 *    magic, another version, a corrupt header, a truncated file, mode
 *    0644, another owner (as root), a symbolic link, a directory, a
 *    missing file;
 *  - staleness: a child that exits without closing leaves a stale segment
 *    that stays until removed; a live one is not stale; a recycled pid
 *    (our pid, another start time) is stale;
 *  - list: exactly the live segments, in name order, ignoring other
 *    files; the callback's stop value; a missing directory;
 *  - fault sites: stats_open in create and open, every allocation of
 *    create and open failing cleanly (no file left); stats_alloc's errors
 *    failing creation cleanly, EINTR retried, a file system without
 *    posix_fallocate given zeros (and refusing them when full);
 *  - a full stats directory (a small tmpfs, filled; where this process
 *    may mount one): creation fails with -ENOSPC, cleanly, never SIGBUS,
 *    whether no page or all but one is free; a segment that just fits is
 *    allocated whole and works;
 *  - one writer publishing nonstop while two readers check that every
 *    snapshot is whole and never goes back (the suite runs under TSan).
 */
#include "config.h"

#include <check.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "common/error.h"
#include "common/fault.h"
#include "common/options.h"
#include "formats/statseg.h"
#include "t_helpers.h"

static char *g_dir;

static void setup(void)
{
	ts_fault_reset_all();
	ts_err_clear();
	g_dir = t_mkdtemp();
	ck_assert_int_eq(setenv("TIER_STATS_DIR", g_dir, 1), 0);
	ts_options_reload();
}

static void teardown(void)
{
	ts_fault_reset_all();
	unsetenv("TIER_STATS_DIR");
	ts_options_reload();
	t_rmtree(g_dir);
	free(g_dir);
	g_dir = NULL;
}

static uint64_t now_ns(int clock)
{
	struct timespec ts;

	clock_gettime(clock, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* Entries in g_dir, for "nothing left behind". */
static int count_files(void)
{
	DIR *d = opendir(g_dir);
	struct dirent *e;
	int n = 0;

	ck_assert_ptr_nonnull(d);
	while ((e = readdir(d)))
		n += strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0;
	closedir(d);
	return n;
}

static void assert_detail(const char *a, const char *b)
{
	const char *e = tier_last_error();

	ck_assert_msg(strstr(e, a), "detail '%s' lacks '%s'", e, a);
	if (b)
		ck_assert_msg(strstr(e, b), "detail '%s' lacks '%s'", e, b);
}

/* ==================================================================== create */

START_TEST(create_file)
{
	static const mode_t umasks[] = { 0, 022, 077, 0777 };
	struct statseg *s;
	char want[4200];
	struct stat st;
	mode_t old = umask(umasks[_i]);

	ck_assert_int_eq(statseg_create("m", "x: 1\n", 64, &s), 0);
	umask(old);
	ck_assert_str_eq(statseg_dir(), g_dir);
	snprintf(want, sizeof(want), "%s/tierstore-%ld-", g_dir, (long)getpid());
	ck_assert_msg(strncmp(statseg_path(s), want, strlen(want)) == 0, "path %s",
		      statseg_path(s));
	ck_assert_str_eq(statseg_path(s) + strlen(statseg_path(s)) - 6, ".stats");
	ck_assert_uint_eq(statseg_payload_size(s), 64);
	ck_assert_int_eq(lstat(statseg_path(s), &st), 0);
	ck_assert(S_ISREG(st.st_mode));
	ck_assert_uint_eq(st.st_mode & 07777, 0600);
	ck_assert_uint_eq(st.st_uid, geteuid());
	ck_assert_int_eq(st.st_nlink, 1); /* the temporary name is gone */
	ck_assert_int_eq(count_files(), 1);
	statseg_close(s);
}
END_TEST

START_TEST(create_two_names)
{
	struct statseg *a, *b;

	ck_assert_int_eq(statseg_create("a", NULL, 8, &a), 0);
	ck_assert_int_eq(statseg_create("a", NULL, 8, &b), 0);
	ck_assert_str_ne(statseg_path(a), statseg_path(b));
	ck_assert_int_eq(count_files(), 2);
	statseg_close(a);
	statseg_close(b);
	ck_assert_int_eq(count_files(), 0);
}
END_TEST

START_TEST(header_fields)
{
	struct statseg_view *v;
	const struct statseg_header *h;
	struct statseg *s;
	struct stat st;
	uint64_t before = now_ns(CLOCK_REALTIME), after;

	ck_assert_int_eq(statseg_create("trainer", "tiers: []\n", 256, &s), 0);
	after = now_ns(CLOCK_REALTIME);
	ck_assert_int_eq(statseg_open(statseg_path(s), &v), 0);
	ck_assert_str_eq(tier_last_error(), "");
	h = statseg_view_header(v);
	ck_assert_int_eq(stat(statseg_path(s), &st), 0);
	ck_assert(memcmp(h->magic, "TIERSTAT", 8) == 0);
	ck_assert_uint_eq(h->version, STATSEG_VERSION);
	ck_assert_uint_eq(h->header_size, sizeof(*h));
	ck_assert_uint_eq(h->total_size, (uint64_t)st.st_size);
	ck_assert_uint_eq(h->pid, (uint64_t)getpid());
	ck_assert_uint_eq(h->uid, (uint64_t)geteuid());
	ck_assert_uint_ge(h->start_ns, before);
	ck_assert_uint_le(h->start_ns, after);
	if (access("/proc/self/stat", R_OK) == 0)
		ck_assert_uint_ne(h->proc_start, 0);
	if (access("/proc/sys/kernel/random/boot_id", R_OK) == 0)
		ck_assert_uint_eq(strlen(h->boot_id), 36);
	ck_assert_str_eq(h->name, "trainer");
	ck_assert_uint_eq(h->manifest_len, 10);
	ck_assert_uint_eq(h->payload_size, 256);
	ck_assert_uint_eq(h->seq_offset % 8, 0);
	ck_assert_uint_eq(h->payload_offset % 8, 0);
	ck_assert_uint_ge(h->seq_offset, sizeof(*h));
	ck_assert_uint_ge(h->payload_offset, h->seq_offset + 8);
	ck_assert_uint_eq(h->manifest_offset, h->payload_offset + 256);
	ck_assert_uint_eq(h->total_size, h->manifest_offset + 11);
	ck_assert_str_eq(statseg_view_path(v), statseg_path(s));
	ck_assert(!statseg_stale(v));
	statseg_view_close(v);
	statseg_close(s);
}
END_TEST

static const struct {
	const char *name, *want;
} names[] = {
	{ NULL, "" },
	{ "", "" },
	{ "layer norm #3", "layer norm #3" },
	{ "0123456789012345678901234567890123456789012345678901234567890123456789",
	  "012345678901234567890123456789012345678901234567890123456789012" },
};

START_TEST(name_cut)
{
	struct statseg_view *v;
	struct statseg *s;

	ck_assert_int_eq(statseg_create(names[_i].name, NULL, 8, &s), 0);
	ck_assert_int_eq(statseg_open(statseg_path(s), &v), 0);
	ck_assert_str_eq(statseg_view_header(v)->name, names[_i].want);
	statseg_view_close(v);
	statseg_close(s);
}
END_TEST

START_TEST(manifest_round_trip)
{
	static char big[100001];
	const char *texts[] = { NULL, "", "tiers:\n  - kind: dram\n    capacity: 1GiB\n",
				"\xc3\xa9t\xc3\xa9 \"quoted\" \\ \t", big };
	const char *text = texts[_i];
	struct statseg_view *v;
	struct statseg *s;

	memset(big, 'y', sizeof(big) - 1);
	ck_assert_int_eq(statseg_create("m", text, 16, &s), 0);
	ck_assert_int_eq(statseg_open(statseg_path(s), &v), 0);
	ck_assert_str_eq(statseg_view_manifest(v), text ? text : "");
	ck_assert_uint_eq(statseg_view_header(v)->manifest_len, text ? strlen(text) : 0);
	statseg_view_close(v);
	statseg_close(s);
}
END_TEST

static const size_t bad_sizes[] = { 0, 1, 7, 12, 65, 64ull << 20, SIZE_MAX - 7 };

START_TEST(create_bad_size)
{
	struct statseg *s = (struct statseg *)1;

	ck_assert_int_eq(statseg_create("bad", NULL, bad_sizes[_i], &s), -EINVAL);
	ck_assert_ptr_null(s);
	assert_detail("bad", "multiple of 8");
	ck_assert_int_eq(count_files(), 0);
}
END_TEST

START_TEST(create_errors)
{
	struct statseg *s;
	char missing[4200];

	ck_assert_int_eq(statseg_create("x", NULL, 8, NULL), -EINVAL);
	snprintf(missing, sizeof(missing), "%s/no/such", g_dir);
	ck_assert_int_eq(setenv("TIER_STATS_DIR", missing, 1), 0);
	ts_options_reload();
	ck_assert_str_eq(statseg_dir(), missing);
	ck_assert_int_eq(statseg_create("x", NULL, 8, &s), -ENOENT);
	ck_assert_ptr_null(s);
	assert_detail(missing, NULL);
	ck_assert_int_eq(setenv("TIER_STATS_DIR", "", 1), 0);
	ts_options_reload();
	ck_assert_str_eq(statseg_dir(), "/dev/shm");
	unsetenv("TIER_STATS_DIR");
	ts_options_reload();
	ck_assert_str_eq(statseg_dir(), "/dev/shm");
}
END_TEST

/* ============================================================ publish, read */

START_TEST(publish_read)
{
	uint8_t in[520], out[520], zero[520] = { 0 };
	struct statseg_view *v;
	struct statseg *s;

	ck_assert_int_eq(statseg_create("rw", NULL, sizeof(in), &s), 0);
	ck_assert_int_eq(statseg_open(statseg_path(s), &v), 0);
	memset(out, 0xaa, sizeof(out));
	ck_assert_int_eq(statseg_read(v, out, sizeof(out)), 0);
	ck_assert(memcmp(out, zero, sizeof(out)) == 0);
	for (int round = 0; round < 3; round++) {
		for (size_t i = 0; i < sizeof(in); i++)
			in[i] = (uint8_t)(i * 7 + (size_t)round);
		statseg_publish(s, in);
		ck_assert_int_eq(statseg_read(v, out, sizeof(out)), 0);
		ck_assert(memcmp(in, out, sizeof(in)) == 0);
	}
	/* a prefix with a ragged tail; the rest of the buffer untouched */
	memset(out, 0x55, sizeof(out));
	ck_assert_int_eq(statseg_read(v, out, 13), 0);
	ck_assert(memcmp(in, out, 13) == 0);
	ck_assert_uint_eq(out[13], 0x55);
	ck_assert_int_eq(statseg_read(v, out, 0), 0);
	ck_assert_int_eq(statseg_read(v, out, sizeof(out) + 1), -EINVAL);
	assert_detail(statseg_path(s), "521");
	/* unaligned source */
	statseg_publish(s, zero + 0);
	{
		static uint8_t raw[530];

		for (size_t i = 0; i < sizeof(raw); i++)
			raw[i] = (uint8_t)(255 - i);
		statseg_publish(s, raw + 3);
		ck_assert_int_eq(statseg_read(v, out, sizeof(out)), 0);
		ck_assert(memcmp(raw + 3, out, sizeof(out)) == 0);
	}
	statseg_view_close(v);
	statseg_close(s);
}
END_TEST

/*
 * REGRESSION (issue 41, item 5): a segment cut short by someone else
 * (ftruncate) under an open view was SIGBUS at the next read, which
 * copied the payload through a mapping past the file's new end.  Now the
 * read says how far the file shrank, and what the view gives (header,
 * rank, manifest, staleness) comes from its own copy.  Sizes: nothing
 * left, inside the header, one page, all but the last byte.
 */
static const off_t shrink_sizes[] = { 0, 100, 4096, -1 };

START_TEST(read_after_shrink)
{
	static uint8_t in[3 * 4096 + 8], out[sizeof(in)];
	const struct statseg_rank rank = { 1, 1, 4, 2 };
	struct statseg_view *v;
	struct statseg_rank r;
	struct statseg *s;
	off_t to = shrink_sizes[_i];
	char want[128];
	uint64_t total;

	for (size_t i = 0; i < sizeof(in); i++)
		in[i] = (uint8_t)(i * 13);
	ck_assert_int_eq(statseg_create_rank("cut", "manifest: yes\n", sizeof(in), &rank, &s), 0);
	statseg_publish(s, in);
	ck_assert_int_eq(statseg_open(statseg_path(s), &v), 0);
	ck_assert_int_eq(statseg_read(v, out, sizeof(out)), 0);
	ck_assert(memcmp(in, out, sizeof(in)) == 0);
	total = statseg_view_header(v)->total_size;
	if (to < 0)
		to = (off_t)total - 1;
	ck_assert_int_eq(truncate(statseg_path(s), to), 0);

	ck_assert_int_eq(statseg_read(v, out, sizeof(out)), -EBADMSG);
	snprintf(want, sizeof(want), "shrank to %lld bytes (want %llu): the store was closed or damaged",
		 (long long)to, (unsigned long long)total);
	assert_detail(statseg_path(s), want);
	ck_assert_int_eq(statseg_read(v, out, 8), -EBADMSG);
	ck_assert_uint_eq(statseg_view_header(v)->total_size, total);
	ck_assert_str_eq(statseg_view_header(v)->name, "cut");
	ck_assert_str_eq(statseg_view_manifest(v), "manifest: yes\n");
	ck_assert(statseg_view_rank(v, &r) && r.world_size == 4 && r.local_rank == 1);
	ck_assert(!statseg_stale(v));
	statseg_view_close(v);
	statseg_close(s); /* never publishes again: its own mapping is cut too */
}
END_TEST

/* A writer that died mid-publish leaves the sequence odd. */
START_TEST(stuck_writer)
{
	struct statseg_view *v;
	struct statseg *s;
	uint64_t buf[2] = { 1, 2 }, out[2];
	_Atomic uint64_t *seq;
	void *map;
	int fd;

	ck_assert_int_eq(statseg_create("stuck", NULL, sizeof(buf), &s), 0);
	statseg_publish(s, buf);
	ck_assert_int_eq(statseg_open(statseg_path(s), &v), 0);
	fd = open(statseg_path(s), O_RDWR);
	ck_assert_int_ge(fd, 0);
	map = mmap(NULL, statseg_view_header(v)->total_size, PROT_READ | PROT_WRITE,
		   MAP_SHARED, fd, 0);
	ck_assert_ptr_ne(map, MAP_FAILED);
	close(fd);
	seq = (_Atomic uint64_t *)(void *)((char *)map + statseg_view_header(v)->seq_offset);
	ck_assert_uint_eq(atomic_load(seq), 2);
	atomic_store(seq, 3);
	ck_assert_int_eq(statseg_read(v, out, sizeof(out)), -EAGAIN);
	assert_detail(statseg_path(s), "consistent");
	atomic_store(seq, 4);
	ck_assert_int_eq(statseg_read(v, out, sizeof(out)), 0);
	ck_assert_uint_eq(out[0], 1);
	ck_assert_uint_eq(out[1], 2);
	munmap(map, statseg_view_header(v)->total_size);
	statseg_view_close(v);
	statseg_close(s);
}
END_TEST

/* ===================================================================== close */

START_TEST(close_removes)
{
	struct statseg *s;
	char *path;

	ck_assert_int_eq(statseg_create("c", "m", 8, &s), 0);
	path = strdup(statseg_path(s));
	ck_assert_int_eq(access(path, F_OK), 0);
	statseg_close(s);
	ck_assert_int_eq(access(path, F_OK), -1);
	ck_assert_int_eq(errno, ENOENT);
	ck_assert_int_eq(count_files(), 0);
	statseg_close(NULL);
	statseg_view_close(NULL);
	free(path);
}
END_TEST

START_TEST(child_close_keeps)
{
	struct statseg *s;
	pid_t pid;
	int status;

	ck_assert_int_eq(statseg_create("parent", NULL, 8, &s), 0);
	pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		statseg_close(s);
		_exit(0);
	}
	ck_assert_int_eq(waitpid(pid, &status, 0), pid);
	ck_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	ck_assert_int_eq(access(statseg_path(s), F_OK), 0);
	statseg_close(s);
	ck_assert_int_eq(count_files(), 0);
}
END_TEST

/* ====================================================================== open */

/* A good segment's bytes, copied to @name in g_dir after @edit. */
typedef void (*edit_fn)(struct statseg_header *h, size_t *size);

static char *make_copy(const char *name, edit_fn edit, mode_t mode)
{
	struct statseg *s;
	char *text, *path;
	size_t size;
	int fd;

	ck_assert_int_eq(statseg_create("src", "manifest: yes\n", 64, &s), 0);
	text = t_read_all(g_dir, strrchr(statseg_path(s), '/') + 1, &size);
	statseg_close(s);
	if (edit)
		edit((struct statseg_header *)(void *)text, &size);
	path = malloc(strlen(g_dir) + strlen(name) + 2);
	ck_assert_ptr_nonnull(path);
	sprintf(path, "%s/%s", g_dir, name);
	fd = open(path, O_CREAT | O_EXCL | O_WRONLY, 0600);
	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(write(fd, text, size), (ssize_t)size);
	ck_assert_int_eq(fchmod(fd, mode), 0);
	close(fd);
	free(text);
	return path;
}

static void edit_magic(struct statseg_header *h, size_t *size)
{
	(void)size;
	h->magic[0] = 'X';
}

static void edit_version(struct statseg_header *h, size_t *size)
{
	(void)size;
	h->version = 99; /* not STATSEG_VERSION, whatever that is */
}

static void edit_header_size(struct statseg_header *h, size_t *size)
{
	(void)size;
	h->header_size = 100;
}

static void edit_offsets(struct statseg_header *h, size_t *size)
{
	(void)size;
	h->manifest_offset = h->total_size;
}

static void edit_payload(struct statseg_header *h, size_t *size)
{
	(void)size;
	h->payload_size = 1ull << 40;
}

static void edit_manifest_nul(struct statseg_header *h, size_t *size)
{
	(void)size;
	((char *)h)[h->manifest_offset + h->manifest_len] = 'z';
}

static void edit_name(struct statseg_header *h, size_t *size)
{
	(void)size;
	memset(h->name, 'n', sizeof(h->name));
}

static void edit_truncate(struct statseg_header *h, size_t *size)
{
	(void)h;
	*size -= 1;
}

static void edit_tiny(struct statseg_header *h, size_t *size)
{
	(void)h;
	*size = 100;
}

static const struct {
	const char *what;
	edit_fn edit;
	mode_t mode;
	int err;
	const char *detail;
} open_cases[] = {
	{ "bad magic", edit_magic, 0600, -EBADMSG, "magic" },
	{ "version 99", edit_version, 0600, -EPROTO, "version 99" },
	{ "header size", edit_header_size, 0600, -EBADMSG, "header" },
	{ "manifest offset", edit_offsets, 0600, -EBADMSG, "corrupt" },
	{ "payload size", edit_payload, 0600, -EBADMSG, "corrupt" },
	{ "manifest unterminated", edit_manifest_nul, 0600, -EBADMSG, "corrupt" },
	{ "name unterminated", edit_name, 0600, -EBADMSG, "corrupt" },
	{ "truncated", edit_truncate, 0600, -EBADMSG, "truncated" },
	{ "tiny", edit_tiny, 0600, -EBADMSG, "not a stats segment" },
	{ "mode 0644", NULL, 0644, -EACCES, "mode 0644" },
	{ "mode 0400", NULL, 0400, -EACCES, "mode 0400" },
	{ "mode 0700", NULL, 0700, -EACCES, "mode 0700" },
};

START_TEST(open_refuses)
{
	struct statseg_view *v = (struct statseg_view *)1;
	char *path = make_copy("tierstore-1-0.stats", open_cases[_i].edit, open_cases[_i].mode);

	ck_assert_msg(statseg_open(path, &v) == open_cases[_i].err, "%s: got %s",
		      open_cases[_i].what, tier_last_error());
	ck_assert_ptr_null(v);
	assert_detail(path, open_cases[_i].detail);
	free(path);
}
END_TEST

START_TEST(open_copy_ok)
{
	struct statseg_view *v;
	char *path = make_copy("tierstore-1-0.stats", NULL, 0600);

	ck_assert_int_eq(statseg_open(path, &v), 0);
	ck_assert_str_eq(statseg_view_manifest(v), "manifest: yes\n");
	statseg_view_close(v);
	free(path);
}
END_TEST

START_TEST(open_other_owner)
{
	struct statseg_view *v;
	char *path;

	if (geteuid() != 0) {
		fprintf(stderr, "%s: not root, cannot chown; skipped\n", __func__);
		return;
	}
	path = make_copy("tierstore-1-0.stats", NULL, 0600);
	ck_assert_int_eq(chown(path, 65534, 65534), 0);
	ck_assert_int_eq(chmod(path, 0600), 0); /* chown may clear bits */
	ck_assert_int_eq(statseg_open(path, &v), -EACCES);
	assert_detail(path, "owned by uid 65534");
	free(path);
}
END_TEST

START_TEST(open_not_a_file)
{
	struct statseg_view *v;
	struct statseg *s;
	char link_path[4200], dir_path[4200], missing[4200];

	ck_assert_int_eq(statseg_create("t", NULL, 8, &s), 0);
	snprintf(link_path, sizeof(link_path), "%s/tierstore-link.stats", g_dir);
	ck_assert_int_eq(symlink(statseg_path(s), link_path), 0);
	ck_assert_int_eq(statseg_open(link_path, &v), -EACCES);
	assert_detail(link_path, "symbolic link");
	snprintf(dir_path, sizeof(dir_path), "%s/tierstore-dir.stats", g_dir);
	ck_assert_int_eq(mkdir(dir_path, 0700), 0);
	ck_assert_int_eq(statseg_open(dir_path, &v), -EACCES);
	assert_detail(dir_path, "not a regular file");
	snprintf(missing, sizeof(missing), "%s/tierstore-9-9.stats", g_dir);
	ck_assert_int_eq(statseg_open(missing, &v), -ENOENT);
	assert_detail(missing, NULL);
	ck_assert_int_eq(statseg_open(NULL, &v), -EINVAL);
	ck_assert_int_eq(statseg_open("", &v), -EINVAL);
	ck_assert_int_eq(statseg_open(statseg_path(s), NULL), -EINVAL);
	statseg_close(s);
}
END_TEST

/* ==================================================================== stale */

START_TEST(stale_dead_child)
{
	struct statseg_view *v;
	char path[4200] = { 0 };
	int fds[2], status;
	pid_t pid;

	ck_assert_int_eq(pipe(fds), 0);
	pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		struct statseg *s;

		close(fds[0]);
		if (statseg_create("child", "c", 8, &s) != 0)
			_exit(1);
		if (write(fds[1], statseg_path(s), strlen(statseg_path(s))) < 0)
			_exit(2);
		_exit(0); /* no statseg_close(): as if killed */
	}
	close(fds[1]);
	ck_assert_int_gt(read(fds[0], path, sizeof(path) - 1), 0);
	close(fds[0]);
	ck_assert_int_eq(waitpid(pid, &status, 0), pid);
	ck_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0);

	ck_assert_int_eq(statseg_open(path, &v), 0);
	ck_assert_uint_eq(statseg_view_header(v)->pid, (uint64_t)pid);
	ck_assert(statseg_stale(v));
	statseg_view_close(v);
	/* stays until removed, and still opens */
	ck_assert_int_eq(access(path, F_OK), 0);
	ck_assert_int_eq(statseg_open(path, &v), 0);
	ck_assert(statseg_stale(v));
	statseg_view_close(v);
	ck_assert_int_eq(unlink(path), 0);
}
END_TEST

static void edit_proc_start(struct statseg_header *h, size_t *size)
{
	(void)size;
	h->proc_start += 1; /* our pid, another process's start time */
}

static void edit_boot_id(struct statseg_header *h, size_t *size)
{
	(void)size;
	snprintf(h->boot_id, sizeof(h->boot_id), "00000000-0000-0000-0000-000000000000");
}

START_TEST(stale_recycled_pid)
{
	struct statseg_view *v;
	char *path;

	if (access("/proc/self/stat", R_OK) != 0) {
		fprintf(stderr, "%s: no /proc; skipped\n", __func__);
		return;
	}
	path = make_copy("tierstore-1-0.stats", edit_proc_start, 0600);
	ck_assert_int_eq(statseg_open(path, &v), 0);
	ck_assert_uint_eq(statseg_view_header(v)->pid, (uint64_t)getpid());
	ck_assert(statseg_stale(v));
	statseg_view_close(v);
	free(path);
	path = make_copy("tierstore-1-1.stats", edit_boot_id, 0600);
	ck_assert_int_eq(statseg_open(path, &v), 0);
	if (access("/proc/sys/kernel/random/boot_id", R_OK) == 0)
		ck_assert(statseg_stale(v));
	statseg_view_close(v);
	free(path);
}
END_TEST

/* ===================================================================== list */

struct listed {
	char paths[8][4200];
	int n, stop_at;
};

static int collect(const char *path, void *arg)
{
	struct listed *l = arg;

	if (l->n < 8)
		snprintf(l->paths[l->n], sizeof(l->paths[0]), "%s", path);
	l->n++;
	return l->n == l->stop_at ? 42 : 0;
}

START_TEST(list_segments)
{
	static const char *decoys[] = { ".tierstore-1-1.tmp", "tierstore-.stats",
					"other.stats", "tierstore-1-1.stats.old", "tierstore-1-1" };
	struct statseg *s[3];
	struct listed *l = calloc(1, sizeof(*l));

	for (size_t i = 0; i < ARRAY_SIZE(decoys); i++)
		free(t_write_file(g_dir, decoys[i], "x"));
	for (int i = 0; i < 3; i++)
		ck_assert_int_eq(statseg_create("l", NULL, 8, &s[i]), 0);
	ck_assert_int_eq(statseg_list(NULL, collect, l), 0);
	ck_assert_int_eq(l->n, 3);
	for (int i = 0; i < 3; i++) {
		int found = 0;

		for (int j = 0; j < 3; j++)
			found += strcmp(l->paths[j], statseg_path(s[i])) == 0;
		ck_assert_int_eq(found, 1);
	}
	ck_assert_int_lt(strcmp(l->paths[0], l->paths[1]), 0);
	ck_assert_int_lt(strcmp(l->paths[1], l->paths[2]), 0);

	statseg_close(s[1]);
	memset(l, 0, sizeof(*l));
	ck_assert_int_eq(statseg_list(g_dir, collect, l), 0);
	ck_assert_int_eq(l->n, 2);

	memset(l, 0, sizeof(*l));
	l->stop_at = 1;
	ck_assert_int_eq(statseg_list(g_dir, collect, l), 42);
	ck_assert_int_eq(l->n, 1);

	statseg_close(s[0]);
	statseg_close(s[2]);
	memset(l, 0, sizeof(*l));
	ck_assert_int_eq(statseg_list(g_dir, collect, l), 0);
	ck_assert_int_eq(l->n, 0);
	free(l);
}
END_TEST

START_TEST(list_errors)
{
	char missing[4200];
	struct listed l = { .n = 0 };

	snprintf(missing, sizeof(missing), "%s/none", g_dir);
	ck_assert_int_eq(statseg_list(missing, collect, &l), -ENOENT);
	assert_detail(missing, NULL);
	ck_assert_int_eq(statseg_list(g_dir, NULL, NULL), -EINVAL);
}
END_TEST

/* =============================================================== fault sites */

START_TEST(fault_stats_open)
{
	struct statseg_view *v;
	struct statseg *s;

	NEED_FAULTS();
	ck_assert_int_eq(ts_fault_arm(TIER_FAULT_STATS_OPEN, 1, 1, -EMFILE), 0);
	ck_assert_int_eq(statseg_create("f", NULL, 8, &s), -EMFILE);
	ck_assert_ptr_null(s);
	assert_detail(g_dir, NULL);
	ck_assert_int_eq(count_files(), 0);
	ck_assert_int_eq(statseg_create("f", NULL, 8, &s), 0);
	ck_assert_int_eq(ts_fault_arm(TIER_FAULT_STATS_OPEN, 1, 1, -EIO), 0);
	ck_assert_int_eq(statseg_open(statseg_path(s), &v), -EIO);
	ck_assert_ptr_null(v);
	assert_detail(statseg_path(s), NULL);
	ck_assert_int_eq(statseg_open(statseg_path(s), &v), 0);
	statseg_view_close(v);
	statseg_close(s);
}
END_TEST

START_TEST(fault_alloc)
{
	struct t_nth fc = T_NTH(TIER_FAULT_ALLOC, -ENOMEM, 99), fo = fc;
	struct statseg *s = NULL;

	NEED_FAULTS();
	while (t_nth_next(&fc)) {
		t_nth_arm(&fc);
		int rc = statseg_create("a", "m", 8, &s);

		t_nth_fired(&fc);
		if (rc == 0)
			break;
		ck_assert_int_eq(rc, -ENOMEM);
		ck_assert_ptr_null(s);
		ck_assert_int_eq(count_files(), 0);
	}
	while (t_nth_next(&fo)) {
		struct statseg_view *v;

		t_nth_arm(&fo);
		int rc = statseg_open(statseg_path(s), &v);

		t_nth_fired(&fo);
		if (rc == 0) {
			statseg_view_close(v);
			break;
		}
		ck_assert_int_eq(rc, -ENOMEM);
		ck_assert_ptr_null(v);
	}
	ts_fault_reset_all();
	statseg_close(s);
	ck_assert_int_eq(count_files(), 0);
}
END_TEST

/* =================================================== a full stats directory */

#define PAGE 4096u
#define FS_SIZE (256u << 10)

/* A tmpfs on g_dir/full with @leave bytes free, made the stats directory;
 * false (the test skips) when this process cannot mount one. */
static bool full_dir(size_t leave, char *mnt, size_t len)
{
	int rc;

	snprintf(mnt, len, "%s/full", g_dir);
	ck_assert_int_eq(mkdir(mnt, 0700), 0);
	rc = t_tmpfs_full(mnt, FS_SIZE, leave);
	if (rc) {
		fprintf(stderr, "cannot mount a tmpfs on %s (%s): this case skipped\n", mnt,
			strerror(-rc));
		return false;
	}
	ck_assert_int_eq(setenv("TIER_STATS_DIR", mnt, 1), 0);
	ts_options_reload();
	return true;
}

/*
 * The segment's bytes, for a payload of @payload bytes and a manifest of
 * @manifest: the header, sequence and payload (PAYLOAD_OFFSET, 320),
 * then the manifest and its NUL; in pages, as tmpfs charges them.
 */
static size_t seg_pages(size_t payload, size_t manifest)
{
	return (320 + payload + manifest + 1 + PAGE - 1) / PAGE;
}

static const struct {
	const char *what;
	size_t payload, manifest; /* bytes */
	int short_pages;          /* pages short of the segment's; -1: none free */
} full_cases[] = {
	{ "full, a one-page segment", 64, 10, -1 },
	{ "full, a 17-page segment", 64 << 10, 10, -1 },
	{ "header page free, payload and manifest pages not", 64 << 10, 10, 16 },
	{ "one page short, the manifest's", 64 << 10, 10, 1 },
	{ "one page short, manifest of 3 pages", 1024, 3 * PAGE, 1 },
	{ "exactly enough", 64 << 10, 10, 0 },
	{ "exactly enough, one page", 64, 10, 0 },
};

/*
 * A segment in a full directory: a clean -ENOSPC naming the file and the
 * reason, no file left (not even the temporary one), never SIGBUS; one
 * that fits is allocated whole (no hole a later publish would fault on)
 * and publishes and reads back.
 */
START_TEST(create_full_dir)
{
	size_t pages = seg_pages(full_cases[_i].payload, full_cases[_i].manifest);
	int short_pages = full_cases[_i].short_pages;
	size_t leave = short_pages < 0 ? 0 : (pages - (size_t)short_pages) * PAGE;
	size_t plen = full_cases[_i].payload;
	char mnt[4200], *manifest = malloc(full_cases[_i].manifest + 1);
	uint8_t *in = malloc(plen), *out = malloc(plen);
	struct statseg_view *v;
	struct statseg *s = (struct statseg *)1;
	struct stat st;
	int rc;

	ck_assert(manifest && in && out);
	memset(manifest, 'm', full_cases[_i].manifest);
	manifest[full_cases[_i].manifest] = '\0';
	if (!full_dir(leave, mnt, sizeof(mnt)))
		goto out;
	rc = statseg_create("full", manifest, plen, &s);
	if (short_pages != 0) {
		ck_assert_msg(rc == -ENOSPC, "%s: got %d: %s", full_cases[_i].what, rc,
			      tier_last_error());
		ck_assert_ptr_null(s);
		assert_detail(mnt, "No space left on device");
		ck_assert_int_eq(t_files_besides_filler(mnt), 0);
		ck_assert_uint_eq(t_fs_free(mnt), leave);
		goto unmount;
	}
	ck_assert_msg(rc == 0, "%s: got %d: %s", full_cases[_i].what, rc, tier_last_error());
	ck_assert_int_eq(stat(statseg_path(s), &st), 0);
	ck_assert_msg((size_t)st.st_blocks * 512 >= (size_t)st.st_size,
		      "%s: %lld bytes, %lld allocated", full_cases[_i].what,
		      (long long)st.st_size, (long long)st.st_blocks * 512);
	ck_assert_uint_eq(t_fs_free(mnt), 0);
	for (size_t i = 0; i < plen; i++)
		in[i] = (uint8_t)(i * 13 + 1);
	statseg_publish(s, in);
	ck_assert_int_eq(statseg_open(statseg_path(s), &v), 0);
	ck_assert_int_eq(statseg_read(v, out, plen), 0);
	ck_assert(memcmp(in, out, plen) == 0);
	ck_assert_str_eq(statseg_view_manifest(v), manifest);
	statseg_view_close(v);
	statseg_close(s);
	ck_assert_int_eq(t_files_besides_filler(mnt), 0);
unmount:
	t_umount(mnt);
out:
	free(manifest);
	free(in);
	free(out);
}
END_TEST

static const struct {
	const char *what;
	int err;            /* armed on stats_alloc */
	int64_t count;      /* how many calls fail */
	int short_pages;    /* in a full tmpfs: pages short; -1: none free; -2: not full */
	int want;
} alloc_cases[] = {
	{ "ENOSPC", -ENOSPC, 1, -2, -ENOSPC },
	{ "EIO", -EIO, 1, -2, -EIO },
	{ "EDQUOT", -EDQUOT, 1, -2, -EDQUOT },
	{ "interrupted once: retried", -EINTR, 1, -2, 0 },
	{ "interrupted 5 times: retried", -EINTR, 5, -2, 0 },
	{ "not supported: zeros written", -EOPNOTSUPP, 1, -2, 0 },
	{ "EINVAL (not supported): zeros written", -EINVAL, 1, -2, 0 },
	{ "not supported, full file system", -EOPNOTSUPP, 1, -1, -ENOSPC },
	{ "not supported, one page short", -EOPNOTSUPP, 1, 1, -ENOSPC },
	{ "not supported, exactly enough", -EOPNOTSUPP, 1, 0, 0 },
};

/*
 * The stats_alloc site: its errors fail creation cleanly, EINTR is
 * retried, and a file system without posix_fallocate gets zeros written,
 * which a full one refuses just as cleanly.
 */
START_TEST(fault_stats_alloc)
{
	const size_t plen = 64 << 10, pages = seg_pages(plen, 1);
	int short_pages = alloc_cases[_i].short_pages;
	uint64_t *in = malloc(plen), *out = malloc(plen);
	char mnt[4200];
	const char *dir = g_dir;
	struct statseg_view *v;
	struct statseg *s = (struct statseg *)1;
	struct stat st;
	int rc;

	NEED_FAULTS();
	ck_assert(in && out);
	if (short_pages >= -1) {
		if (!full_dir(short_pages < 0 ? 0 : (pages - (size_t)short_pages) * PAGE, mnt,
			      sizeof(mnt)))
			goto out;
		dir = mnt;
	}
	ck_assert_int_eq(ts_fault_arm(TIER_FAULT_STATS_ALLOC, 1, alloc_cases[_i].count,
				      alloc_cases[_i].err), 0);
	rc = statseg_create("a", "m", plen, &s);
	ck_assert_msg(rc == alloc_cases[_i].want, "%s: got %d: %s", alloc_cases[_i].what, rc,
		      tier_last_error());
	ck_assert_uint_eq(ts_fault_fired(TIER_FAULT_STATS_ALLOC), (uint64_t)alloc_cases[_i].count);
	if (rc) {
		ck_assert_ptr_null(s);
		assert_detail(dir, tier_strerror(rc));
		assert_detail("allocating", NULL);
		ck_assert_int_eq(t_files_besides_filler(dir), 0);
		goto unmount;
	}
	ck_assert_int_eq(stat(statseg_path(s), &st), 0);
	ck_assert_int_eq(st.st_size, 320 + plen + 2);
	ck_assert_int_ge((long long)st.st_blocks * 512, (long long)st.st_size);
	for (size_t i = 0; i < plen / 8; i++)
		in[i] = i * 0x9e3779b97f4a7c15ull;
	statseg_publish(s, in);
	ck_assert_int_eq(statseg_open(statseg_path(s), &v), 0);
	ck_assert_int_eq(statseg_read(v, out, plen), 0);
	ck_assert(memcmp(in, out, plen) == 0);
	ck_assert_str_eq(statseg_view_manifest(v), "m");
	statseg_view_close(v);
	statseg_close(s);
	ck_assert_int_eq(t_files_besides_filler(dir), 0);
unmount:
	if (dir != g_dir)
		t_umount(mnt);
out:
	free(in);
	free(out);
}
END_TEST

/* ========================================================= concurrent reads */

#define CONC_WORDS 512

struct conc {
	struct statseg *s;
	const char *path;
	atomic_bool stop;
	atomic_uint_fast64_t published;
};

struct reader {
	struct conc *c;
	uint64_t ok, again, torn, backwards, other_err;
	uint64_t first_bad[2];
};

static void *writer_main(void *arg)
{
	struct conc *c = arg;
	uint64_t *buf = malloc(CONC_WORDS * 8);
	uint64_t n = 0;

	while (!atomic_load_explicit(&c->stop, memory_order_relaxed)) {
		n++;
		for (size_t i = 0; i < CONC_WORDS; i++)
			buf[i] = n;
		statseg_publish(c->s, buf);
		atomic_store_explicit(&c->published, n, memory_order_relaxed);
		if (n % 4 == 0)
			sched_yield();
	}
	free(buf);
	return NULL;
}

static void *reader_main(void *arg)
{
	struct reader *r = arg;
	struct statseg_view *v;
	uint64_t *buf = malloc(CONC_WORDS * 8);
	uint64_t last = 0;

	if (statseg_open(r->c->path, &v) != 0) {
		r->other_err++;
		free(buf);
		return NULL;
	}
	while (!atomic_load_explicit(&r->c->stop, memory_order_relaxed)) {
		int rc = statseg_read(v, buf, CONC_WORDS * 8);

		if (rc == -EAGAIN) {
			r->again++;
			continue;
		}
		if (rc) {
			r->other_err++;
			break;
		}
		for (size_t i = 1; i < CONC_WORDS; i++) {
			if (buf[i] != buf[0]) {
				if (!r->torn) {
					r->first_bad[0] = buf[0];
					r->first_bad[1] = buf[i];
				}
				r->torn++;
				break;
			}
		}
		if (buf[0] < last)
			r->backwards++;
		last = buf[0];
		r->ok++;
	}
	statseg_view_close(v);
	free(buf);
	return NULL;
}

START_TEST(concurrent_readers)
{
	struct conc c = { 0 };
	struct reader r[2] = { { 0 } };
	pthread_t w, t[2];
	struct timespec one = { .tv_sec = 1 };

	ck_assert_int_eq(statseg_create("conc", NULL, CONC_WORDS * 8, &c.s), 0);
	c.path = statseg_path(c.s);
	for (int i = 0; i < 2; i++) {
		r[i].c = &c;
		ck_assert_int_eq(pthread_create(&t[i], NULL, reader_main, &r[i]), 0);
	}
	ck_assert_int_eq(pthread_create(&w, NULL, writer_main, &c), 0);
	nanosleep(&one, NULL);
	atomic_store(&c.stop, true);
	ck_assert_int_eq(pthread_join(w, NULL), 0);
	for (int i = 0; i < 2; i++) {
		ck_assert_int_eq(pthread_join(t[i], NULL), 0);
		fprintf(stderr, "reader %d: %llu snapshots, %llu -EAGAIN, writer %llu publishes\n",
			i, (unsigned long long)r[i].ok, (unsigned long long)r[i].again,
			(unsigned long long)atomic_load(&c.published));
		ck_assert_msg(r[i].torn == 0, "reader %d: %llu torn snapshots (%llu vs %llu)", i,
			      (unsigned long long)r[i].torn,
			      (unsigned long long)r[i].first_bad[0],
			      (unsigned long long)r[i].first_bad[1]);
		ck_assert_uint_eq(r[i].backwards, 0);
		ck_assert_uint_eq(r[i].other_err, 0);
		ck_assert_uint_gt(r[i].ok, 0);
	}
	ck_assert_uint_gt(atomic_load(&c.published), 0);
	statseg_close(c.s);
}
END_TEST

/* ===================================================================== suite */

static Suite *statseg_suite(void)
{
	Suite *s = suite_create("statseg");
	TCase *tc;

	tc = tcase_create("create");
	tcase_add_unchecked_fixture(tc, t_case_setup, t_case_teardown);
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_loop_test(tc, create_file, 0, 4);
	tcase_add_test(tc, create_two_names);
	tcase_add_test(tc, header_fields);
	tcase_add_loop_test(tc, name_cut, 0, (int)ARRAY_SIZE(names));
	tcase_add_loop_test(tc, manifest_round_trip, 0, 5);
	tcase_add_loop_test(tc, create_bad_size, 0, (int)ARRAY_SIZE(bad_sizes));
	tcase_add_test(tc, create_errors);
	suite_add_tcase(s, tc);

	tc = tcase_create("data");
	tcase_add_unchecked_fixture(tc, t_case_setup, t_case_teardown);
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_test(tc, publish_read);
	tcase_add_test(tc, stuck_writer);
	tcase_add_loop_test(tc, read_after_shrink, 0, (int)ARRAY_SIZE(shrink_sizes));
	tcase_add_test(tc, close_removes);
	tcase_add_test(tc, child_close_keeps);
	suite_add_tcase(s, tc);

	tc = tcase_create("open");
	tcase_add_unchecked_fixture(tc, t_case_setup, t_case_teardown);
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_loop_test(tc, open_refuses, 0, (int)ARRAY_SIZE(open_cases));
	tcase_add_test(tc, open_copy_ok);
	tcase_add_test(tc, open_other_owner);
	tcase_add_test(tc, open_not_a_file);
	tcase_add_test(tc, stale_dead_child);
	tcase_add_test(tc, stale_recycled_pid);
	tcase_add_test(tc, list_segments);
	tcase_add_test(tc, list_errors);
	suite_add_tcase(s, tc);

	tc = tcase_create("full");
	tcase_add_unchecked_fixture(tc, t_case_setup, t_case_teardown);
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_loop_test(tc, create_full_dir, 0, (int)ARRAY_SIZE(full_cases));
	suite_add_tcase(s, tc);

	tc = t_tcase_faults("faults");
	tcase_add_unchecked_fixture(tc, t_case_setup, t_case_teardown);
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_test(tc, fault_stats_open);
	tcase_add_test(tc, fault_alloc);
	tcase_add_loop_test(tc, fault_stats_alloc, 0, (int)ARRAY_SIZE(alloc_cases));
	suite_add_tcase(s, tc);

	tc = tcase_create("concurrent");
	tcase_add_unchecked_fixture(tc, t_case_setup, t_case_teardown);
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, concurrent_readers);
	suite_add_tcase(s, tc);

	return s;
}

int main(void)
{
	return t_run_suite(statseg_suite());
}
