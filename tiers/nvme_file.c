/*
 * nvme_file.c - the NVMe tier's backing files: finding or creating one,
 * owning it (an flock held while the store is open: one store per file),
 * reclaiming what a store that did not close cleanly left, growing it as
 * objects are placed, and telling from outside what a file at a path is
 * (tier_nvme_file_probe, for tier-stat --check and --remove-stale).
 *
 * A backing file is opened by its own name only.  Its directory is opened
 * first; fstatat(AT_SYMLINK_NOFOLLOW) must say "regular file" before the
 * file is opened with openat(O_NOFOLLOW | O_NONBLOCK), and fstat on the
 * descriptor must name the same inode.  So a symlink, a device, a FIFO or
 * a directory at the path is refused without being opened, and nothing
 * there changes mode or content.  A new file is made unnamed (O_TMPFILE),
 * locked, given its header and only then linked in under its name: no one
 * sees it half made.  Where the file system has no O_TMPFILE it is created
 * with O_EXCL and locked at once.
 *
 * The data area grows on demand (nvme_file_grow) in NVME_GROW_CHUNK steps
 * up to the manifest's capacity, so the disk holds about what the objects
 * need, not the capacity.
 */
#include "config.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/sysmacros.h>
#include <time.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/error.h"
#include "common/fault.h"
#include "common/log.h"
#include "common/units.h"
#include "tiers/nvme_format.h"
#include "tiers/nvme_impl.h"

/* Growth step of a backing file's data area. */
#define NVME_GROW_CHUNK (64ull << 20)

/* Attempts at opening a path whose file another process creates or
 * removes at the same moment. */
#define NVME_OPEN_TRIES 4

/* Checks, 10 ms apart, for the lock of a store that was killed. */
#define NVME_LOCK_WAITS 500

/* ------------------------------------------------------------ helpers */

/* @file's directory into @dir, and where its last component starts. */
static int split_path(const char *file, char *dir, size_t dn, const char **base)
{
	const char *slash = strrchr(file, '/');

	if (!slash) {
		snprintf(dir, dn, ".");
		*base = file;
	} else if (slash == file) {
		snprintf(dir, dn, "/");
		*base = slash + 1;
	} else {
		if ((size_t)(slash - file) >= dn)
			return -ENAMETOOLONG;
		memcpy(dir, file, (size_t)(slash - file));
		dir[slash - file] = '\0';
		*base = slash + 1;
	}
	return **base ? 0 : -EISDIR;
}

static const char *kind_of(mode_t m)
{
	if (S_ISLNK(m))
		return "a symbolic link";
	if (S_ISDIR(m))
		return "a directory";
	if (S_ISCHR(m))
		return "a character device";
	if (S_ISBLK(m))
		return "a block device";
	if (S_ISFIFO(m))
		return "a FIFO";
	if (S_ISSOCK(m))
		return "a socket";
	return "not a regular file";
}

/* 0 for a regular file; else the refusal, with @who ("nvme0 (/x/y.dat)"). */
static int check_kind(const struct stat *st, const char *who)
{
	if (S_ISREG(st->st_mode))
		return 0;
	if (S_ISLNK(st->st_mode))
		return ts_err(-ELOOP, "%s: is a symbolic link; a backing file is opened by its own name only (name the file or directory it points to)",
			      who);
	return ts_err(S_ISDIR(st->st_mode) ? -EISDIR : -EINVAL,
		      "%s: is %s, not a regular file; a backing file is a regular file of its own",
		      who, kind_of(st->st_mode));
}

static bool same_file(const struct stat *a, const struct stat *b)
{
	return a->st_dev == b->st_dev && a->st_ino == b->st_ino;
}

/*
 * The process holding an flock on the file @st describes, from
 * /proc/locks; 0 if none is listed (or /proc/locks cannot be read), -1 if
 * the lock is held but its holder is not visible from here.
 */
static long lock_holder(const struct stat *st)
{
	FILE *f = fopen("/proc/locks", "re");
	char line[256];
	long found = 0;

	if (!f)
		return 0;
	while (!found && fgets(line, sizeof(line), f)) {
		char kind[16];
		unsigned maj, min;
		unsigned long ino;
		long pid;

		/* "1: FLOCK  ADVISORY  WRITE 4711 08:02:131 0 EOF"; waiters
		 * ("1: -> FLOCK ...") do not hold the lock. */
		if (sscanf(line, "%*d: %15s %*s %*s %ld %x:%x:%lu", kind, &pid, &maj, &min,
			   &ino) != 5 || strcmp(kind, "FLOCK") != 0)
			continue;
		if (maj == major(st->st_dev) && min == minor(st->st_dev) && ino == st->st_ino)
			found = pid > 0 ? pid : -1;
	}
	fclose(f);
	return found;
}

/*
 * Whether process @pid is gone.  A killed store's lock outlives it a
 * little: its io_uring is torn down by the kernel after the process, and
 * holds the file until then.
 */
static bool holder_gone(long pid)
{
	char path[64], buf[256], *paren;
	FILE *f;
	size_t n;

	if (pid <= 0)
		return false;
	if (kill((pid_t)pid, 0) != 0 && errno == ESRCH)
		return true;
	/* Exiting (a zombie until reaped, its io_uring torn down after). */
	snprintf(path, sizeof(path), "/proc/%ld/stat", pid);
	f = fopen(path, "re");
	if (!f)
		return false;
	n = fread(buf, 1, sizeof(buf) - 1, f);
	fclose(f);
	buf[n] = '\0';
	paren = strrchr(buf, ')');
	return paren && paren[1] == ' ' && (paren[2] == 'Z' || paren[2] == 'X');
}

/*
 * The holder of @st's lock, waiting up to NVME_LOCK_WAITS x 10 ms while
 * it is a process that is gone or one /proc/locks cannot name (a reaped
 * process shows as pid 0 there, as does one of another pid namespace): 0
 * once the lock is free, else the pid (-1: not visible from here).
 */
static long lock_holder_settled(const struct stat *st)
{
	long pid = lock_holder(st);

	for (int i = 0; i < NVME_LOCK_WAITS && (pid < 0 || holder_gone(pid)); i++) {
		usleep(10000);
		pid = lock_holder(st);
	}
	return holder_gone(pid) ? 0 : pid;
}

bool nvme_file_lock_released(int fd)
{
	struct stat st;

	return fstat(fd, &st) == 0 && lock_holder_settled(&st) == 0;
}

/* -EBUSY naming the holder, with @who ("nvme0 (/x/y.dat)"). */
static int busy_error(const struct stat *st, const char *who)
{
	long pid = lock_holder(st);

	if (pid > 0)
		return ts_err(-EBUSY, "%s: in use by process %ld (another store has this backing file open; two stores cannot share one)",
			      who, pid);
	return ts_err(-EBUSY, "%s: in use by another process (another store has this backing file open; two stores cannot share one)",
		      who);
}

/* Takes @fd's exclusive flock without waiting: 0, or -EBUSY naming the holder. */
static int take_lock(int fd, const char *who)
{
	struct stat st;
	int rc;

	for (int waited = 0;; waited++) {
		do {
			rc = flock(fd, LOCK_EX | LOCK_NB);
		} while (rc != 0 && errno == EINTR);
		if (rc == 0)
			return 0;
		if (errno != EWOULDBLOCK)
			break;
		if (fstat(fd, &st) != 0)
			return ts_err(-EBUSY, "%s: in use by another process", who);
		/* Held by a process that is gone: the kernel lets go soon. */
		if (waited >= 1 || lock_holder_settled(&st) != 0)
			return busy_error(&st, who);
	}
	/* A file system without flock (some network ones): go on, unguarded. */
	TIER_WARN(TIER_SS_NVME, "%s: cannot lock the file (%s); nothing keeps a second store off it",
		  who, tier_strerror(errno));
	return 0;
}

static void path_who(const struct nvme_path *p, char *buf, size_t n)
{
	snprintf(buf, n, "nvme%d (%s)", p->index, p->file);
}

/* Clears O_NONBLOCK (io_uring would answer -EAGAIN on such a file). */
static int clear_nonblock(int fd)
{
	int fl = fcntl(fd, F_GETFL);

	if (fl < 0 || fcntl(fd, F_SETFL, fl & ~O_NONBLOCK) != 0)
		return -errno;
	return 0;
}

static int open_error(const struct nvme_path *p, int rc)
{
	if (rc == -EINVAL && p->direct)
		return ts_err(rc, "nvme%d (%s): the file system refuses O_DIRECT (set direct: false for this path)",
			      p->index, p->file);
	if (rc == -ELOOP)
		return ts_err(rc, "nvme%d (%s): is a symbolic link; a backing file is opened by its own name only (name the file or directory it points to)",
			      p->index, p->file);
	return ts_err(rc, "nvme%d (%s): open: %s", p->index, p->file, tier_strerror(rc));
}

/* ----------------------------------------------------------- creating */

/* Writes the header of a file this open makes, then links it in. */
static int link_new(struct tier_nvme *t, struct nvme_path *p, int fd)
{
	char proc[64];
	int rc;

	p->fd = fd;
	p->created = true;
	p->owned = true;
	rc = nvme_file_header_write(t, p, false);
	if (rc)
		return rc;
	snprintf(proc, sizeof(proc), "/proc/self/fd/%d", fd);
	if (linkat(AT_FDCWD, proc, p->dfd, p->base, AT_SYMLINK_FOLLOW) == 0)
		return 0;
	rc = -errno;
	if (rc == -ENOENT && linkat(fd, "", p->dfd, p->base, AT_EMPTY_PATH) == 0)
		return 0;
	if (rc != -EEXIST)
		ts_err(rc, "nvme%d (%s): create: %s", p->index, p->file, tier_strerror(rc));
	return rc;
}

/* A new file under its name with O_EXCL, locked at once (no O_TMPFILE). */
static int create_named(struct tier_nvme *t, struct nvme_path *p, int oflags)
{
	char who[PATH_MAX + 32];
	int fd, rc;

	fd = openat(p->dfd, p->base, oflags | O_CREAT | O_EXCL | O_NOFOLLOW, 0600);
	if (fd < 0)
		return errno == EEXIST ? -EEXIST : open_error(p, -errno);
	p->fd = fd;
	p->created = true;
	p->owned = true;
	path_who(p, who, sizeof(who));
	rc = take_lock(fd, who);
	return rc ? rc : nvme_file_header_write(t, p, false);
}

/*
 * Makes the file: 0, -EEXIST if another process made one at the path
 * meanwhile (the caller opens that), or the error.
 */
static int create_file(struct tier_nvme *t, struct nvme_path *p, int oflags)
{
	char who[PATH_MAX + 32];
	int fd, rc;

	fd = openat(p->dfd, ".", (oflags & ~O_NONBLOCK) | O_TMPFILE, 0600);
	if (fd < 0) {
		rc = -errno;
		if (rc == -EOPNOTSUPP || rc == -EISDIR || rc == -EINVAL || rc == -ENOENT)
			return create_named(t, p, oflags & ~O_NONBLOCK);
		return open_error(p, rc);
	}
	path_who(p, who, sizeof(who));
	rc = take_lock(fd, who);
	if (rc == 0)
		rc = link_new(t, p, fd);
	if (rc) {
		close(fd);
		p->fd = -1;
		p->created = false;
		p->owned = false;
	}
	return rc;
}

/* ------------------------------------------------------------ reusing */

/*
 * The header of an existing file: 0 if it is ours (valid, or damaged and
 * ours to reinitialise), else the refusal.  Says at warning level when the
 * file was left by a store that did not close cleanly.
 */
static int adopt_header(struct nvme_path *p, const struct stat *st, const char *who)
{
	struct ts_nvme_header *h = NULL;
	int rc;

	if (st->st_size == 0)
		return ts_err(-EEXIST, "%s: the file exists, is empty and is not a tierstore backing file; not taking it over",
			      who);
	if (posix_memalign((void **)&h, 4096, sizeof(*h)) != 0)
		return ts_err(-ENOMEM, "nvme: out of memory");
	rc = nvme_file_header_read(p, h);
	if (rc && rc != -ENOMSG)
		goto out; /* cannot tell whose it is: leave it alone */
	if (rc == 0)
		rc = nvme_header_check(h, p->file);
	if (rc == 0) {
		/* For the open to tell whether the files hold a committed
		 * store (nvme_commit_load). */
		p->had_header = true;
		memcpy(p->hdr_uuid, h->store_uuid, 16);
		p->hdr_index = h->path_index;
		p->hdr_npaths = h->npaths;
		p->hdr_unit = h->stripe_unit;
		p->hdr_csum = h->checksum;
		p->hdr_flags = h->flags;
		memcpy(p->hdr_name, h->store_name, 64);
		p->hdr_name[64] = '\0';
		p->created_ns = h->created_ns;
	}
	if (rc == -ENOMSG) {
		rc = ts_err(-EEXIST, "%s: the file exists and is not a tierstore backing file; not overwriting it",
			    who);
	} else if (rc == -EPROTO) {
		rc = ts_err(-EPROTO, "%s: a backing file of format version %u; this library reads and writes version %u only. Files of version 1 hold no committed state (they were a cache of the run that wrote them): remove it",
			    who, h->version, TIER_NVME_FORMAT_VERSION);
	} else if (rc == -EBADMSG) {
		/* Reinitialised if the store holds no commit; a committed
		 * store refuses it (nvme_commit_load). */
		TIER_WARN(TIER_SS_NVME, "%s: the header is damaged", who);
		p->hdr_damaged = true;
		rc = 0;
	} else if (rc == 0 && !(h->flags & TIER_NVME_HDR_CLEAN)) {
		char when[32];
		time_t s = (time_t)(h->created_ns / 1000000000u);
		struct tm tm;

		strftime(when, sizeof(when), "%Y-%m-%d %H:%M:%S", localtime_r(&s, &tm));
		TIER_WARN(TIER_SS_NVME, "%s: left by a store that did not close cleanly (process %u, created %s)",
			  who, h->owner_pid, when);
		/* A crashed scratch store's file: this open takes it as its own
		 * (a scratch open removes it at close). */
		p->created = (h->flags & TIER_NVME_HDR_SCRATCH) != 0;
	} else if (rc == 0) {
		TIER_INFO(TIER_SS_NVME, "%s: reusing an existing backing file", who);
	}
out:
	free(h);
	return rc;
}

/*
 * Opens the existing file @st describes.  0; -ESTALE if the path was
 * replaced meanwhile (the caller looks again); or the refusal.
 */
static int open_existing(struct tier_nvme *t, struct nvme_path *p, const struct stat *st,
			 int oflags)
{
	char who[PATH_MAX + 32];
	struct stat fst, now;
	int rc;

	path_who(p, who, sizeof(who));
	p->fd = openat(p->dfd, p->base, oflags | O_NOFOLLOW);
	if (p->fd < 0)
		return errno == ENOENT ? -ESTALE : open_error(p, -errno);
	if (fstat(p->fd, &fst) != 0)
		return ts_err(-errno, "%s: stat: %s", who, tier_strerror(errno));
	if (!same_file(st, &fst))
		return -ESTALE;
	rc = clear_nonblock(p->fd);
	if (rc)
		return ts_err(rc, "%s: fcntl: %s", who, tier_strerror(rc));
	rc = take_lock(p->fd, who);
	if (rc)
		return rc;
	/* Locked: is the name still this file (not removed and made again)? */
	if (fstatat(p->dfd, p->base, &now, AT_SYMLINK_NOFOLLOW) != 0 || !same_file(&now, &fst))
		return -ESTALE;
	rc = adopt_header(p, &fst, who);
	if (rc)
		return rc;
	/* Ours from here on.  Whether its data are a committed store's,
	 * kept, or an earlier run's cache, emptied, nvme_commit_load()
	 * decides once every path is open; it writes the header after. */
	(void)t;
	p->owned = true;
	return 0;
}

/* ---------------------------------------------------------- the entry */

int nvme_file_open(struct tier_nvme *t, struct nvme_path *p)
{
	int oflags = O_RDWR | O_CLOEXEC | O_NONBLOCK | (p->direct ? O_DIRECT : 0);
	char dir[PATH_MAX], who[PATH_MAX + 32];
	int rc = split_path(p->file, dir, sizeof(dir), &p->base);

	if (rc)
		return ts_err(rc, "nvme%d (%s): not a file name", p->index, p->file);
	path_who(p, who, sizeof(who));
	/* The directory by its own name too: the manifest's check refused a
	 * link there, and one put there since is refused the same way. */
	p->dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
	if (p->dfd < 0) {
		const struct tiers_path_cfg *pc = t->cfg && (size_t)p->index < t->cfg->npaths
							  ? &t->cfg->paths[p->index] : NULL;
		struct stat lst;
		char to[PATH_MAX];
		ssize_t n;

		rc = -errno;
		if ((rc == -ELOOP || rc == -ENOTDIR) && lstat(dir, &lst) == 0 && S_ISLNK(lst.st_mode)) {
			n = readlink(dir, to, sizeof(to) - 1);
			to[n > 0 ? n : 0] = '\0';
			return ts_err(-ELOOP, "nvme%d: path '%s' (%s:%d:%d) is a symbolic link (to '%s'); name the real directory",
				      p->index, dir, pc ? t->cfg->source : "?", pc ? pc->line : 0,
				      pc ? pc->col : 0, to);
		}
		return ts_err(rc, "nvme%d (%s): opening its directory %s: %s", p->index,
			      p->file, dir, tier_strerror(rc));
	}
	for (int i = 0; i < NVME_OPEN_TRIES; i++) {
		struct stat st;

		if (p->fd >= 0)
			close(p->fd);
		p->fd = -1;
		if (fstatat(p->dfd, p->base, &st, AT_SYMLINK_NOFOLLOW) != 0) {
			if (errno != ENOENT)
				return ts_err(-errno, "%s: stat: %s", who, tier_strerror(errno));
			rc = create_file(t, p, oflags);
			if (rc != -EEXIST)
				return rc;
			continue;
		}
		rc = check_kind(&st, who);
		if (rc)
			return rc;
		rc = open_existing(t, p, &st, oflags);
		if (rc != -ESTALE)
			return rc;
	}
	return ts_err(-EBUSY, "%s: the file keeps being created and removed by another process", who);
}

/* ------------------------------------------------------------ growing */

/* Free bytes of the file system under @fd, for messages; 0 if unknown. */
static uint64_t fs_free(int fd)
{
	struct statvfs v;

	return fstatvfs(fd, &v) == 0 ? (uint64_t)v.f_bavail * v.f_frsize : 0;
}

/* Allocates file bytes [p->file_end, to): 0 or -errno. */
static int grow_to(struct nvme_path *p, uint64_t to)
{
	int rc = p->sparse ? 0 : ts_fault_check(TIER_FAULT_NVME_FALLOCATE);

	if (rc == 0 && !p->sparse &&
	    fallocate(p->fd, 0, (off_t)p->file_end, (off_t)(to - p->file_end)) != 0)
		rc = -errno;
	if (rc == -EOPNOTSUPP && !p->sparse) {
		TIER_WARN(TIER_SS_NVME, "nvme%d (%s): the file system cannot preallocate (fallocate); the file grows sparse, and a full disk shows at write-back",
			  p->index, p->file);
		p->sparse = true;
		rc = 0;
	}
	if (rc == 0 && p->sparse && ftruncate(p->fd, (off_t)to) != 0)
		rc = -errno;
	return rc;
}

int nvme_file_grow(struct nvme_path *p, uint64_t end, const char *obj)
{
	uint64_t need = p->data_off + end, cap = p->data_off + p->capacity, to;
	char a[32], b[32], c[32];
	int rc;

	if (need <= p->file_end)
		return 0;
	to = p->data_off + nvme_round_up(end, NVME_GROW_CHUNK);
	if (to > cap)
		to = cap;
	if (to < need)
		to = need;
	rc = grow_to(p, to);
	if (rc == -ENOSPC && to > need) {
		to = need; /* the step does not fit: try what this object needs */
		rc = grow_to(p, to);
	}
	if (rc == -ENOSPC)
		return ts_err(rc, "nvme%d (%s): no room on disk for object '%s': the file must grow by %s, and its file system has %s free",
			      p->index, p->file, obj, ts_size_fmt(need - p->file_end, a, sizeof(a)),
			      ts_size_fmt(fs_free(p->fd), b, sizeof(b)));
	if (rc)
		return ts_err(rc, "nvme%d (%s): growing the file to %s for object '%s': %s",
			      p->index, p->file, ts_size_fmt(to, c, sizeof(c)), obj,
			      tier_strerror(rc));
	p->file_end = to;
	return 0;
}

/* ------------------------------------------------- from the outside */

/* Opens @file for a look (read only, by its own name): fd, or -errno with
 * the detail; *absent when nothing is there. */
static int probe_open(const char *file, struct stat *st, bool *absent)
{
	char dir[PATH_MAX];
	const char *base;
	int dfd, fd, rc = split_path(file, dir, sizeof(dir), &base);
	struct stat fst;

	*absent = false;
	if (rc)
		return ts_err(rc, "%s: not a file name", file);
	dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (dfd < 0) {
		*absent = errno == ENOENT;
		return *absent ? -ENOENT : ts_err(-errno, "%s: %s", dir, tier_strerror(errno));
	}
	if (fstatat(dfd, base, st, AT_SYMLINK_NOFOLLOW) != 0) {
		rc = -errno;
		close(dfd);
		*absent = rc == -ENOENT;
		return *absent ? rc : ts_err(rc, "%s: stat: %s", file, tier_strerror(rc));
	}
	rc = check_kind(st, file);
	fd = rc ? -1 : openat(dfd, base, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
	if (!rc && fd < 0)
		rc = ts_err(-errno, "%s: open: %s", file, tier_strerror(errno));
	close(dfd);
	if (rc)
		return rc;
	if (fstat(fd, &fst) != 0 || !same_file(st, &fst)) {
		close(fd);
		return ts_err(-EAGAIN, "%s: changed while being looked at", file);
	}
	return fd;
}

/* Reads and checks the header of the file open on @fd. */
static int probe_header(int fd, const struct stat *st, const char *file,
			struct ts_nvme_header *h)
{
	ssize_t n;

	if (st->st_size == 0)
		return ts_err(-EEXIST, "%s: the file exists, is empty and is not a tierstore backing file; a store would not take it over",
			      file);
	do {
		n = pread(fd, h, sizeof(*h), 0);
	} while (n < 0 && errno == EINTR);
	if (n < 0)
		return ts_err(-errno, "%s: reading the header: %s", file, tier_strerror(errno));
	if (n != (ssize_t)sizeof(*h) || memcmp(h->magic, TIER_NVME_MAGIC, 8) != 0)
		return ts_err(-EEXIST, "%s: the file exists and is not a tierstore backing file; a store would not overwrite it",
			      file);
	return nvme_header_check(h, file);
}

int tier_nvme_file_probe(const char *file, struct tier_nvme_file_info *out)
{
	TS_NONNULL(file);
	TS_NONNULL(out);
	struct ts_nvme_header h;
	struct stat st;
	bool absent;
	int fd, rc;

	memset(out, 0, sizeof(*out));
	ts_err_clear();
	if (!file || !*file)
		return ts_err(-EINVAL, "tier_nvme_file_probe: no file named");
	fd = probe_open(file, &st, &absent);
	if (absent) {
		out->state = TIER_NVME_FILE_ABSENT;
		return 0;
	}
	if (fd < 0)
		return fd;
	rc = probe_header(fd, &st, file, &h);
	if (rc == 0 || rc == -EBADMSG) {
		out->disk_bytes = (uint64_t)st.st_blocks * 512u;
		out->holder_pid = lock_holder_settled(&st);
		if (rc == 0) {
			out->owner_pid = h.owner_pid;
			out->scratch = (h.flags & TIER_NVME_HDR_SCRATCH) != 0;
			memcpy(out->store_name, h.store_name, sizeof(h.store_name));
			out->created_ns = h.created_ns;
			out->closed_ns = h.closed_ns;
		}
		out->state = out->holder_pid ? TIER_NVME_FILE_IN_USE
			     : rc == 0 && (h.flags & TIER_NVME_HDR_CLEAN) ? TIER_NVME_FILE_CLEAN
			     : TIER_NVME_FILE_STALE;
		rc = 0;
	}
	close(fd);
	return rc;
}

int tier_nvme_file_remove_stale(const char *file)
{
	TS_NONNULL(file);
	struct ts_nvme_header h;
	struct stat st, now;
	bool absent;
	int fd, rc;

	ts_err_clear();
	if (!file || !*file)
		return ts_err(-EINVAL, "tier_nvme_file_remove_stale: no file named");
	fd = probe_open(file, &st, &absent);
	if (fd < 0)
		return absent ? ts_err(-ENOENT, "%s: no such file", file) : fd;
	rc = take_lock(fd, file);
	if (rc == 0) {
		rc = probe_header(fd, &st, file, &h);
		if (rc == 0 && (h.flags & TIER_NVME_HDR_CLEAN))
			rc = ts_err(-EINVAL, "%s: closed cleanly by its store; not stale", file);
		else if (rc == 0 && !(h.flags & TIER_NVME_HDR_SCRATCH))
			/* A named store's file may hold its last commit (a
			 * checkpoint the crash left): never removed from here. */
			rc = ts_err(-EPERM, "%s: left by store '%.64s', which was not a scratch store: it may hold that store's last commit; reopen the store to recover it, or remove the file by hand",
				    file, h.store_name);
		else if (rc == -EBADMSG)
			rc = 0; /* ours, damaged: nothing in it can be used */
	}
	/* Under the lock: remove the name only if it still is this file. */
	if (rc == 0 && (lstat(file, &now) != 0 || !same_file(&st, &now)))
		rc = ts_err(-EAGAIN, "%s: replaced while being removed; left alone", file);
	if (rc == 0 && unlink(file) != 0)
		rc = ts_err(-errno, "%s: unlink: %s", file, tier_strerror(errno));
	close(fd);
	return rc;
}
