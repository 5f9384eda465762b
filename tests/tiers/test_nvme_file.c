/*
 * test_nvme_file.c - the NVMe tier's backing files (tiers/nvme_file.c):
 * what may stand at a backing path, one store per file, and what a store
 * killed at a random moment leaves.
 *
 * Covers:
 *  - refused at open and by the manifest's resolution (what tier-stat
 *    --check prints), nothing outside changed: a symlink at the path (to
 *    an empty file, a directory, a device with direct: false), a FIFO, a
 *    character device, a directory, an empty file, another program's
 *    file;
 *  - one owner per file: a second open in this process or another gets
 *    -EBUSY naming the holder's process; tier_nvme_file_probe says IN_USE
 *    with that process;
 *  - SIGKILL of a store at random moments (many rounds, scratch or not):
 *    the file left is absent, clean or stale, never held; the next open
 *    reclaims a stale one with exactly one warning and frees its space;
 *    tier_nvme_file_remove_stale removes a stale scratch file, and refuses
 *    one in use or closed cleanly.
 *
 * Tests marked "REGRESSION" fail on the code before issue 15 (items 4
 * and 6).
 */
#include "config.h"

#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "common/error.h"
#include "common/log.h"
#include "runtime/manifest/manifest.h"
#include "t_helpers.h"

#define KiB (1ull << 10)
#define MiB (1ull << 20)
#define U64(x) ((unsigned long long)(x))

static char *g_dir;

static void setup(void)
{
	char p[4200];

	ts_err_clear();
	g_dir = t_mkdtemp();
	setenv("T", g_dir, 1);
	snprintf(p, sizeof(p), "%s/d", g_dir);
	ck_assert_int_eq(mkdir(p, 0700), 0);
}

static void teardown(void)
{
	t_rmtree(g_dir);
	free(g_dir);
	g_dir = NULL;
}

/* ------------------------------------------------------------ helpers */

/* The log sink: warnings of the NVMe tier. */
struct capture {
	pthread_mutex_t lock;
	int n;
	char first[2048];
};

static struct capture g_cap = { .lock = PTHREAD_MUTEX_INITIALIZER };

static void capture_sink(int level, uint32_t ss, const char *line, void *arg)
{
	struct capture *c = arg;

	(void)ss;
	if (level != TIER_LL_WARN)
		return;
	pthread_mutex_lock(&c->lock);
	if (c->n++ == 0)
		snprintf(c->first, sizeof(c->first), "%s", line);
	pthread_mutex_unlock(&c->lock);
}

static void capture_start(void)
{
	g_cap.n = 0;
	g_cap.first[0] = '\0';
	ts_log_set_sink(capture_sink, &g_cap);
}

static void capture_stop(void)
{
	ts_log_set_sink(NULL, NULL);
}

/*
 * A one-path manifest whose path is @path (${T} is the scratch
 * directory); 0 or the resolution's error.
 */
static int manifest_try(const char *path, bool direct, struct tier_manifest **m)
{
	char text[1024];
	int n = snprintf(text, sizeof(text),
			 "name: owner\ngpu:\n  device: none\ndram:\n  capacity: 512MiB\nnvme:\n"
			 "  stripe_unit: 64KiB\n  direct: %s\n  paths:\n    - path: %s\n"
			 "      capacity: 64MiB\n", direct ? "true" : "false", path);

	*m = NULL;
	return tier_manifest_parse(text, (size_t)n, "owner.yaml", 0, m);
}

static struct tier_manifest *manifest_for(const char *path, bool direct)
{
	struct tier_manifest *m;
	int rc = manifest_try(path, direct, &m);

	ck_assert_msg(rc == 0, "manifest with path %s: %s", path, tier_last_error());
	return m;
}

static const char *file_of(const struct tier_manifest *m)
{
	return m->tiers.paths[0].file;
}

static struct tier_nvme *open_tier(const struct tier_manifest *m, unsigned flags)
{
	struct tier_nvme *t = NULL;
	int rc = tier_nvme_open(m, flags, &t);

	ck_assert_msg(rc == 0, "tier_nvme_open: %s: %s", tier_strerror(rc), tier_last_error());
	return t;
}

/* Writes @n bytes of @seed's pattern into a new object, reads them back. */
static void use_tier(struct tier_nvme *t, const char *name, size_t n, unsigned seed)
{
	struct tier_nvme_obj *o = NULL;
	unsigned char *a = malloc(n), *b = malloc(n);
	int rc;

	for (size_t i = 0; i < n; i++)
		a[i] = (unsigned char)(i * 31 + seed);
	rc = tier_nvme_obj_create(t, name, n, &o);
	ck_assert_msg(rc == 0, "create %s: %s", name, tier_last_error());
	ck_assert_int_eq(tier_nvme_write(t, o, 0, n, a), 0);
	ck_assert_int_eq(tier_nvme_read(t, o, 0, n, b), 0);
	ck_assert_msg(memcmp(a, b, n) == 0, "%s: read back differs", name);
	free(a);
	free(b);
}

static struct tier_nvme_file_info probe(const char *file)
{
	struct tier_nvme_file_info fi;
	int rc = tier_nvme_file_probe(file, &fi);

	ck_assert_msg(rc == 0, "probe %s: %s", file, tier_last_error());
	return fi;
}

/* ------------------------------------------------------- what stands there */

enum obstacle {
	LINK_EMPTY,   /* a symlink to an empty file elsewhere */
	LINK_DIR,     /* a symlink to a directory */
	LINK_DEVICE,  /* a symlink to a character device (a private /dev/null: c 1 3, root only) */
	FIFO,
	CHARDEV,      /* mknod c 1 3 (root only) */
	DIRECTORY,
	EMPTY,        /* an empty regular file */
	FOREIGN,      /* a text file of another program */
};

struct refuse_case {
	const char *name;
	enum obstacle kind;
	bool dir_form;   /* the manifest names the directory ("${T}/d/") */
	int want_open;   /* tier_nvme_open's result */
	const char *needle;
};

static const struct refuse_case refuse_cases[] = {
	{ "symlink to an empty file", LINK_EMPTY, false, -ELOOP, "symbolic link" },
	{ "symlink to an empty file, directory form", LINK_EMPTY, true, -ELOOP, "symbolic link" },
	{ "symlink to a directory", LINK_DIR, false, -ELOOP, "symbolic link" },
	{ "symlink to a device (direct: false)", LINK_DEVICE, true, -ELOOP, "symbolic link" },
	{ "FIFO", FIFO, false, -EINVAL, "a FIFO" },
	{ "FIFO, directory form", FIFO, true, -EINVAL, "a FIFO" },
	{ "character device", CHARDEV, true, -EINVAL, "a character device" },
	{ "directory at the file's name", DIRECTORY, true, -EISDIR, "a directory" },
	{ "empty file", EMPTY, false, -EEXIST, "is empty" },
	{ "another program's file", FOREIGN, true, -EEXIST, "not a tierstore backing file" },
};

/* Makes the obstacle at @file; false if this machine cannot (mknod). */
static bool make_obstacle(enum obstacle k, const char *file, const char *victim)
{
	int fd;

	switch (k) {
	case LINK_EMPTY:
		fd = open(victim, O_CREAT | O_EXCL | O_WRONLY, 0644);
		ck_assert_int_ge(fd, 0);
		ck_assert_int_eq(fchmod(fd, 0644), 0);
		close(fd);
		return symlink(victim, file) == 0;
	case LINK_DIR:
		ck_assert_int_eq(mkdir(victim, 0755), 0);
		return symlink(victim, file) == 0;
	case LINK_DEVICE:
		/* Not the machine's /dev/null: a regression would chmod it. */
		return mknod(victim, S_IFCHR | 0666, makedev(1, 3)) == 0 && chmod(victim, 0666) == 0 &&
		       symlink(victim, file) == 0;
	case FIFO:
		return mkfifo(file, 0644) == 0;
	case CHARDEV:
		return mknod(file, S_IFCHR | 0666, makedev(1, 3)) == 0;
	case DIRECTORY:
		return mkdir(file, 0755) == 0;
	case EMPTY:
	case FOREIGN:
		fd = open(file, O_CREAT | O_EXCL | O_WRONLY, 0644);
		ck_assert_int_ge(fd, 0);
		ck_assert_int_eq(fchmod(fd, 0644), 0);
		if (k == FOREIGN)
			ck_assert_int_eq(write(fd, "root:x:0:0::/root:/bin/sh\n", 26), 26);
		close(fd);
		return true;
	}
	return false;
}

/* What must not change: the obstacle (not followed) and what it points to. */
struct snap {
	struct stat at, target;
	bool has_target;
};

static struct snap take_snap(const char *file)
{
	struct snap s = { .has_target = false };

	ck_assert_int_eq(lstat(file, &s.at), 0);
	s.has_target = stat(file, &s.target) == 0;
	return s;
}

static void same_snap(const struct snap *a, const struct snap *b, const char *what)
{
	ck_assert_msg(a->at.st_mode == b->at.st_mode && a->at.st_size == b->at.st_size &&
		      a->at.st_ino == b->at.st_ino,
		      "REGRESSION: %s: the path's entry changed (mode %o -> %o, size %lld -> %lld)",
		      what, a->at.st_mode, b->at.st_mode, (long long)a->at.st_size,
		      (long long)b->at.st_size);
	if (a->has_target)
		ck_assert_msg(b->has_target && a->target.st_mode == b->target.st_mode &&
			      a->target.st_size == b->target.st_size,
			      "REGRESSION: %s: what it points to changed (mode %o -> %o, size %lld -> %lld)",
			      what, a->target.st_mode, b->target.st_mode,
			      (long long)a->target.st_size, (long long)b->target.st_size);
}

/*
 * REGRESSION (issue 15, item 6): the open followed a symlink (an empty
 * file it pointed to got tierstore's header; a device it pointed to was
 * chmodded to 0600 before the open failed: /dev/null, on the machine this
 * was found on), and the manifest's resolution (--check)
 * passed symlinks and other programs' files.  Each obstacle is refused by
 * both, naming the file, and nothing changes.
 */
START_TEST(test_refused)
{
	const struct refuse_case *c = &refuse_cases[_i];
	char path[4300], file[4300], victim[4300];
	struct tier_manifest *m;
	struct tier_nvme *t = NULL;
	struct snap before, after;
	int rc;

	snprintf(path, sizeof(path), c->dir_form ? "${T}/d/" : "${T}/d/backing.dat");
	snprintf(victim, sizeof(victim), "%s/victim", g_dir);
	/* Resolved while the path is free; the obstacle comes before the open. */
	m = manifest_for(path, false);
	snprintf(file, sizeof(file), "%s", file_of(m));
	if (!make_obstacle(c->kind, file, victim)) {
		ck_assert_msg(c->kind == CHARDEV || c->kind == LINK_DEVICE,
			      "%s: making the obstacle: %s", c->name,
			      strerror(errno));
		tier_manifest_free(m);
		return; /* no mknod here (not root, or a container) */
	}
	before = take_snap(file);
	rc = tier_nvme_open(m, 0, &t);
	if (rc == 0)
		tier_nvme_close(t);
	ck_assert_msg(rc == c->want_open && strstr(tier_last_error(), file) &&
		      strstr(tier_last_error(), c->needle),
		      "REGRESSION: %s: open gave %d (%s), expected %d naming %s and '%s': %s",
		      c->name, rc, tier_strerror(rc), c->want_open, file, c->needle,
		      tier_last_error());
	after = take_snap(file);
	same_snap(&before, &after, c->name);
	tier_manifest_free(m);

	/* The resolution (tier-stat --check) says the same, at the path's line. */
	rc = manifest_try(path, false, &m);
	ck_assert_msg(rc == -EINVAL && strstr(tier_last_error(), "owner.yaml:10:13") &&
		      strstr(tier_last_error(), c->needle),
		      "REGRESSION: %s: resolving gave %d: %s", c->name, rc,
		      rc ? tier_last_error() : "(accepted)");
	tier_manifest_free(m);
	after = take_snap(file);
	same_snap(&before, &after, c->name);
}
END_TEST

/* ------------------------------------------------------------ one owner */

/* A child that opens the store, fills an object and waits to be killed. */
static pid_t holder_start(const struct tier_manifest *m, unsigned flags)
{
	int fds[2];
	pid_t pid;
	char c;

	ck_assert_int_eq(pipe(fds), 0);
	pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		struct tier_nvme *t = NULL;
		struct tier_nvme_obj *o = NULL;
		char *buf = calloc(1, 8 * MiB);

		close(fds[0]);
		if (!buf || tier_nvme_open(m, flags, &t) || tier_nvme_obj_create(t, "big", 8 * MiB, &o) ||
		    tier_nvme_write(t, o, 0, 8 * MiB, buf))
			_exit(3);
		if (write(fds[1], "k", 1) != 1)
			_exit(4);
		for (;;)
			pause();
	}
	close(fds[1]);
	ck_assert_msg(read(fds[0], &c, 1) == 1, "the holder did not open the store");
	close(fds[0]);
	return pid;
}

static void kill_wait(pid_t pid)
{
	int st;

	kill(pid, SIGKILL);
	ck_assert_int_eq(waitpid(pid, &st, 0), pid);
}

/*
 * REGRESSION (issue 15, item 4): two stores opened one backing file and
 * wrote into each other's extents.  The second gets -EBUSY naming the
 * first's process, in this process and from another; after kill -9 of the
 * holder the next open reclaims the file with one warning and frees what
 * it held on disk.
 */
START_TEST(test_one_owner)
{
	struct tier_manifest *m = manifest_for("${T}/d/", true);
	struct tier_nvme *t = NULL, *t2 = NULL;
	struct tier_nvme_file_info fi;
	char want[64];
	pid_t pid;
	int rc;

	t = open_tier(m, 0);
	rc = tier_nvme_open(m, 0, &t2);
	snprintf(want, sizeof(want), "in use by process %ld", (long)getpid());
	ck_assert_msg(rc == -EBUSY && t2 == NULL && strstr(tier_last_error(), want) &&
		      strstr(tier_last_error(), file_of(m)),
		      "REGRESSION: a second open in this process gave %d (%s): %s", rc,
		      tier_strerror(rc), tier_last_error());
	fi = probe(file_of(m));
	ck_assert_int_eq(fi.state, TIER_NVME_FILE_IN_USE);
	ck_assert_int_eq(fi.holder_pid, getpid());
	ck_assert_int_eq(tier_nvme_close(t), 0);
	ck_assert_int_eq(probe(file_of(m)).state, TIER_NVME_FILE_CLEAN);

	pid = holder_start(m, 0);
	rc = tier_nvme_open(m, 0, &t2);
	snprintf(want, sizeof(want), "in use by process %ld", (long)pid);
	ck_assert_msg(rc == -EBUSY && strstr(tier_last_error(), want),
		      "REGRESSION: an open while process %ld holds the file gave %d (%s): %s",
		      (long)pid, rc, tier_strerror(rc), tier_last_error());
	ck_assert_int_eq(probe(file_of(m)).holder_pid, pid);
	kill_wait(pid);
	fi = probe(file_of(m));
	ck_assert_int_eq(fi.state, TIER_NVME_FILE_STALE);
	ck_assert_int_eq(fi.owner_pid, pid);
	ck_assert_uint_ge(fi.disk_bytes, 8 * MiB);
	capture_start();
	t = open_tier(m, 0);
	capture_stop();
	snprintf(want, sizeof(want), "did not close cleanly (process %ld", (long)pid);
	ck_assert_msg(g_cap.n == 1 && strstr(g_cap.first, want) && strstr(g_cap.first, file_of(m)),
		      "REGRESSION: reclaiming the file of killed process %ld: %d warnings, first: %s",
		      (long)pid, g_cap.n, g_cap.first);
	fi = probe(file_of(m));
	ck_assert_msg(fi.disk_bytes <= 1 * MiB, "the reclaimed file still takes %llu bytes",
		      U64(fi.disk_bytes));
	use_tier(t, "after", 3 * MiB + 7, 9);
	ck_assert_int_eq(tier_nvme_close(t), 0);
	tier_manifest_free(m);
}
END_TEST

/* The file a child opens, uses and closes, killed @delay_us in. */
static pid_t worker_start(const struct tier_manifest *m, unsigned flags)
{
	pid_t pid = fork();

	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		char *buf = calloc(1, 4 * MiB);

		for (unsigned round = 0; buf; round++) {
			struct tier_nvme *t = NULL;
			struct tier_nvme_obj *o = NULL;
			char name[32];

			if (tier_nvme_open(m, flags, &t))
				_exit(3);
			snprintf(name, sizeof(name), "o%u", round);
			if (tier_nvme_obj_create(t, name, 4 * MiB - round % 7, &o) ||
			    tier_nvme_write(t, o, 0, 4 * MiB - round % 7, buf))
				_exit(4);
			if (tier_nvme_close(t))
				_exit(5);
		}
		_exit(6);
	}
	return pid;
}

/*
 * SIGKILL of a store at random moments of open, use and close, 30 rounds,
 * scratch and not: what is left is never held; a stale file is reclaimed
 * by the next open with one warning, or (scratch) removed by
 * tier_nvme_file_remove_stale; a clean one reused silently.
 */
START_TEST(test_killed_at_random)
{
	struct tier_manifest *m = manifest_for("${T}/d/", true);
	unsigned seen[4] = { 0 }, removed = 0;
	unsigned seed = (unsigned)time(NULL) ^ (unsigned)getpid();
	uint64_t rng = t_rnd_seed(seed);

	printf("killed_at_random: seed %u\n", seed);
	for (unsigned round = 0; round < 30; round++) {
		unsigned flags = round % 2 ? TIER_NVME_SCRATCH : 0;
		pid_t pid = worker_start(m, flags);
		struct tier_nvme_file_info fi;
		struct tier_nvme *t;
		int st;

		usleep((useconds_t)t_rnd_below(&rng, 40000));
		kill(pid, SIGKILL);
		ck_assert_int_eq(waitpid(pid, &st, 0), pid);
		ck_assert_msg(WIFSIGNALED(st), "round %u: the worker exited with %d", round,
			      WEXITSTATUS(st));
		fi = probe(file_of(m));
		ck_assert_msg(fi.state != TIER_NVME_FILE_IN_USE,
			      "round %u: the file is held after its holder died", round);
		seen[fi.state]++;
		if (fi.state == TIER_NVME_FILE_STALE && fi.scratch) {
			ck_assert_msg(tier_nvme_file_remove_stale(file_of(m)) == 0, "round %u: %s",
				      round, tier_last_error());
			ck_assert_int_eq(probe(file_of(m)).state, TIER_NVME_FILE_ABSENT);
			removed++;
			continue;
		}
		capture_start();
		t = open_tier(m, 0);
		capture_stop();
		ck_assert_msg(g_cap.n == (fi.state == TIER_NVME_FILE_STALE),
			      "round %u (%s): %d warnings at the next open, first: %s", round,
			      fi.state == TIER_NVME_FILE_STALE ? "stale" : "not stale", g_cap.n,
			      g_cap.first);
		use_tier(t, "check", 1 * MiB + 3, round);
		ck_assert_int_eq(tier_nvme_close(t), 0);
		/* The next worker makes the file anew (scratch or not). */
		ck_assert_int_eq(unlink(file_of(m)), 0);
	}
	printf("killed_at_random: absent %u, clean %u, stale %u (of which scratch, removed: %u)\n",
	       seen[TIER_NVME_FILE_ABSENT], seen[TIER_NVME_FILE_CLEAN], seen[TIER_NVME_FILE_STALE],
	       removed);
	tier_manifest_free(m);
}
END_TEST

/* tier_nvme_file_remove_stale refuses a file in use or closed cleanly. */
START_TEST(test_remove_stale_refuses)
{
	struct tier_manifest *m = manifest_for("${T}/d/", false);
	struct tier_nvme *t;
	struct stat st;
	pid_t pid;
	int rc;

	ck_assert_int_eq(probe(file_of(m)).state, TIER_NVME_FILE_ABSENT);
	ck_assert_int_eq(tier_nvme_file_remove_stale(file_of(m)), -ENOENT);
	t = open_tier(m, 0);
	ck_assert_int_eq(tier_nvme_file_remove_stale(file_of(m)), -EBUSY);
	ck_assert_ptr_nonnull(strstr(tier_last_error(), "in use by process"));
	ck_assert_int_eq(tier_nvme_close(t), 0);
	ck_assert_int_eq(tier_nvme_file_remove_stale(file_of(m)), -EINVAL);
	ck_assert_ptr_nonnull(strstr(tier_last_error(), "closed cleanly"));
	ck_assert_int_eq(stat(file_of(m), &st), 0);
	/* A stale file of a named store may hold its last commit: refused. */
	pid = holder_start(m, 0);
	ck_assert_int_eq(tier_nvme_file_remove_stale(file_of(m)), -EBUSY);
	kill_wait(pid);
	rc = tier_nvme_file_remove_stale(file_of(m));
	ck_assert_msg(rc == -EPERM, "removing the stale file of killed store %ld: %d: %s", (long)pid,
		      rc, tier_last_error());
	ck_assert_ptr_nonnull(strstr(tier_last_error(), "may hold that store's last commit"));
	ck_assert_int_eq(stat(file_of(m), &st), 0);
	ck_assert_int_eq(unlink(file_of(m)), 0);
	/* A scratch store's stale file is removed when asked. */
	pid = holder_start(m, TIER_NVME_SCRATCH);
	kill_wait(pid);
	rc = tier_nvme_file_remove_stale(file_of(m));
	ck_assert_msg(rc == 0, "removing the stale scratch file of killed process %ld: %s", (long)pid,
		      tier_last_error());
	ck_assert_int_ne(stat(file_of(m), &st), 0);
	tier_manifest_free(m);
}
END_TEST

static Suite *nvme_file_suite(void)
{
	Suite *s = suite_create("nvme_file");
	TCase *tc = tcase_create("refused");

	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_loop_test(tc, test_refused, 0, (int)ARRAY_SIZE(refuse_cases));
	suite_add_tcase(s, tc);
	tc = tcase_create("owner");
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_set_timeout(tc, 120);
	tcase_add_test(tc, test_one_owner);
	tcase_add_test(tc, test_killed_at_random);
	tcase_add_test(tc, test_remove_stale_refuses);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return t_run_suite(nvme_file_suite());
}
