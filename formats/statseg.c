/*
 * statseg.c - the stats segment (statseg.h): creation, the seqlock, and
 * the checks a reader makes before trusting a file it did not write.
 *
 * Creation: the file is made under a private name (.tierstore-PID-N.tmp,
 * O_EXCL, mode 0600 whatever the umask), allocated for real (never left
 * sparse: a page of the mapping that the file system cannot back would be
 * SIGBUS at its first store, in creation or in any later publish), mapped
 * and filled in, and only then linked to its public name
 * tierstore-PID-N.stats (link() fails rather than replace an existing
 * file).  A reader listing the directory therefore never meets a
 * half-written header.  A public name still held
 * by a stale segment of an earlier process with our pid is skipped (N
 * grows), never removed: stale segments go only when someone asks.
 *
 * The seqlock: one writer, readers in other processes.  The payload is
 * moved in aligned 8-byte atomic words, stored with release and loaded
 * with acquire ordering, so the whole protocol is expressed in C11
 * atomics (no data race, nothing for ThreadSanitizer to flag, and no
 * fences, which it does not model).  Why it is enough: the writer's odd
 * store of the sequence precedes, in its program order, every release
 * store of a payload word; a reader whose acquire load of a word sees a
 * new value therefore also sees, in its later load of the sequence, a
 * value at least that odd one, so it discards the copy.  A reader that
 * sees no new word sees the old snapshot whole.  The acquire load of the
 * sequence first orders the payload loads after it.  On x86-64 all of
 * these are plain moves.
 *
 * A reader trusts nothing in the file beyond what statseg_open() checked:
 * the owner and mode (only our uid can have written it), the size against
 * the header, and every offset and length against the size.  It keeps a
 * copy of what is written once (header, manifest) and reads the data area
 * with pread (struct statseg_view): a file cut short by someone else is an
 * error of the next read, never a SIGBUS.  The seqlock holds over pread
 * as over a mapping: the three reads (sequence, payload, sequence) are
 * made in that order, with acquire fences between them (READ_FENCE), so
 * the payload's loads, made by the kernel in this thread, come after the
 * first look at the sequence and before the second; the writer's side is
 * as above.
 */
#include "config.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/error.h"
#include "common/fault.h"
#include "common/options.h"
#include "common/sysinfo.h"
#include "common/units.h"
#include "formats/statseg.h"

#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "the stats segment layout is little-endian"
#endif

_Static_assert(sizeof(struct statseg_header) == 200, "statseg header layout");
_Static_assert(offsetof(struct statseg_header, name) == 96, "statseg header layout");
_Static_assert(offsetof(struct statseg_header, seq_offset) == 168, "statseg header layout");
_Static_assert(sizeof(_Atomic uint64_t) == 8, "8-byte atomic words");

#define SEQ_OFFSET 256u       /* a cache line of its own, after the header */
#define PAYLOAD_OFFSET 320u
#define CREATE_TRIES 64
#define READ_TRIES 4096
#define READ_SPINS 16         /* tries before yielding the CPU between them */

struct statseg {
	char *path;
	void *map;
	size_t size;
	size_t payload_size;
	pid_t pid;                 /* the creator: only it removes the file */
	_Atomic uint64_t *seq;
	_Atomic uint64_t *payload;
};

/*
 * A reader maps nothing: a file cut short (ftruncate) under a mapping
 * faults the next load past its new end with SIGBUS, and any process of
 * the uid can cut it.  The header, rank and manifest, written once before
 * the file got its name, are copied at open; the data area is read with
 * pread, which a short file answers with fewer bytes, never a signal.
 */
struct statseg_view {
	char *path;
	int fd;
	size_t size;               /* the file's size at open (total_size) */
	char *copy;                /* the file as it was at open, @size bytes */
	const struct statseg_header *hdr; /* in copy */
	uint64_t seq_offset, payload_offset;
	const char *manifest;      /* in copy */
};

static atomic_uint g_counter;

const char *statseg_dir(void)
{
	const char *d = ts_opt_str(TIER_OPT_STATS_DIR);

	return *d ? d : "/dev/shm";
}

/* Field 22 (starttime) of /proc/PID/stat; 0 when it cannot be read. */
static uint64_t proc_start_time(pid_t pid)
{
	char path[64], buf[1024];
	const char *p;
	unsigned long long v;
	size_t n;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%ld/stat", (long)pid);
	f = fopen(path, "re");
	if (!f)
		return 0;
	n = fread(buf, 1, sizeof(buf) - 1, f);
	fclose(f);
	buf[n] = '\0';
	/* comm (field 2) is in parentheses and may hold spaces and ')' */
	p = strrchr(buf, ')');
	if (!p)
		return 0;
	p++;
	for (int field = 3; field < 22; field++) {
		p = strchr(p + 1, ' ');
		if (!p)
			return 0;
	}
	if (sscanf(p, " %llu", &v) != 1)
		return 0;
	return v;
}

static void read_boot_id(char out[STATSEG_BOOT_ID_MAX])
{
	FILE *f = fopen("/proc/sys/kernel/random/boot_id", "re");

	memset(out, 0, STATSEG_BOOT_ID_MAX);
	if (!f)
		return;
	if (!fgets(out, STATSEG_BOOT_ID_MAX, f))
		out[0] = '\0';
	fclose(f);
	out[strcspn(out, "\n")] = '\0';
}

/* ------------------------------------------------------------ the writer */

/* The rank block right after the header, before the sequence word. */
#define RANK_OFFSET sizeof(struct statseg_header)
_Static_assert(RANK_OFFSET % 8 == 0 && RANK_OFFSET + sizeof(struct statseg_rank) <= SEQ_OFFSET,
	       "the rank block fits between the header and the sequence word");

static void fill_header(struct statseg_header *h, const char *name, const char *manifest,
			size_t mlen, size_t payload_size, size_t total,
			const struct statseg_rank *rank)
{
	if (rank) {
		memcpy((char *)h + RANK_OFFSET, rank, sizeof(*rank));
		h->flags |= STATSEG_F_RANK;
	}
	memcpy(h->magic, STATSEG_MAGIC, sizeof(h->magic));
	h->version = STATSEG_VERSION;
	h->header_size = (uint32_t)sizeof(*h);
	h->total_size = total;
	h->pid = (uint64_t)getpid();
	h->uid = (uint64_t)geteuid();
	h->start_ns = ts_wall_ns();
	h->proc_start = proc_start_time(getpid());
	read_boot_id(h->boot_id);
	snprintf(h->name, sizeof(h->name), "%s", name);
	h->manifest_len = (uint32_t)mlen;
	h->seq_offset = SEQ_OFFSET;
	h->payload_offset = PAYLOAD_OFFSET;
	h->payload_size = payload_size;
	h->manifest_offset = PAYLOAD_OFFSET + payload_size;
	memcpy((char *)h + h->manifest_offset, manifest, mlen + 1);
}

/*
 * Creates the segment's private file in @dir (O_EXCL, mode 0600 whatever
 * the umask): returns its descriptor, or -errno (no file left); *tmp is
 * its name, and s->path the public name that goes with it (a name still
 * held by an earlier process with our pid is skipped).
 */
static int open_tmp(struct statseg *s, const char *dir, char **tmp)
{
	int fd, rc;

	for (int i = 0;; i++) {
		unsigned n = atomic_fetch_add_explicit(&g_counter, 1, memory_order_relaxed);

		free(*tmp);
		free(s->path);
		s->path = NULL;
		*tmp = ts_asprintf("%s/.tierstore-%ld-%u.tmp", dir, (long)s->pid, n);
		s->path = ts_asprintf("%s/tierstore-%ld-%u.stats", dir, (long)s->pid, n);
		if (!*tmp || !s->path)
			return ts_err(-ENOMEM, "stats segment in %s: out of memory", dir);
		if (access(s->path, F_OK) == 0 && i < CREATE_TRIES)
			continue; /* left by an earlier process with our pid */
		rc = ts_fault_check(TIER_FAULT_STATS_OPEN);
		if (rc)
			return ts_err(rc, "stats segment %s: create: %s", *tmp, tier_strerror(rc));
		fd = open(*tmp, O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC | O_NOFOLLOW, 0600);
		if (fd >= 0)
			break;
		rc = -errno;
		if (rc != -EEXIST || i >= CREATE_TRIES)
			return ts_err(rc, "stats segment %s: create: %s", *tmp, tier_strerror(rc));
	}
	/* the umask may have cleared bits of 0600, and nothing may add any */
	if (fchmod(fd, 0600) == 0)
		return fd;
	rc = -errno;
	close(fd);
	unlink(*tmp);
	return ts_err(rc, "stats segment %s: chmod 0600: %s", *tmp, tier_strerror(rc));
}

/* Writes @total bytes of zeros to @fd from offset 0. */
static int write_zeros(int fd, size_t total)
{
	static const char zeros[4096];
	size_t done = 0;

	while (done < total) {
		size_t len = total - done < sizeof(zeros) ? total - done : sizeof(zeros);
		ssize_t n = pwrite(fd, zeros, len, (off_t)done);

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return -errno;
		if (n == 0)
			return -EIO;
		done += (size_t)n;
	}
	return 0;
}

/*
 * Gives the new file @fd (named @tmp) its @total bytes for real, before it
 * is mapped: a store through the mapping into a hole that the file system
 * has no room for is SIGBUS, so a file system too full for the segment
 * must fail here, with -ENOSPC.  posix_fallocate, retried when a signal
 * interrupts it; where the file system does not support it, zeros
 * written.  On failure the file is emptied again (no partial allocation
 * kept) and the detail names @tmp and says what was free.
 */
static int seg_alloc(int fd, const char *tmp, size_t total)
{
	struct statvfs vfs;
	char room[96] = "", a[32], b[32];
	int rc;

	do {
		rc = ts_fault_check(TIER_FAULT_STATS_ALLOC);
		if (rc == 0)
			rc = -posix_fallocate(fd, 0, (off_t)total);
	} while (rc == -EINTR);
	if (rc == -EOPNOTSUPP || rc == -ENOSYS || rc == -EINVAL)
		rc = write_zeros(fd, total);
	if (rc == 0)
		return 0;
	if (ftruncate(fd, 0) == 0 && rc == -ENOSPC && fstatvfs(fd, &vfs) == 0)
		snprintf(room, sizeof(room), " (%s free of %s)",
			 ts_size_fmt((uint64_t)vfs.f_bavail * vfs.f_frsize, a, sizeof(a)),
			 ts_size_fmt((uint64_t)vfs.f_blocks * vfs.f_frsize, b, sizeof(b)));
	return ts_err(rc, "stats segment %s: allocating %zu bytes: %s%s", tmp, total,
		      tier_strerror(rc), room);
}

int statseg_create(const char *name, const char *manifest_text, size_t payload_size,
		   struct statseg **out)
{
	return statseg_create_rank(name, manifest_text, payload_size, NULL, out);
}

int statseg_create_rank(const char *name, const char *manifest_text, size_t payload_size,
			const struct statseg_rank *rank, struct statseg **out)
{
	const char *dir = statseg_dir();
	struct statseg *s = NULL;
	char *tmp = NULL;
	size_t mlen, total;
	int fd = -1, rc;

	if (!out)
		return ts_err(-EINVAL, "statseg_create: no result pointer");
	*out = NULL;
	if (!name)
		name = "";
	if (!manifest_text)
		manifest_text = "";
	mlen = strlen(manifest_text);
	if (payload_size == 0 || payload_size % 8 || payload_size > STATSEG_MAX_SIZE ||
	    mlen > STATSEG_MAX_SIZE || PAYLOAD_OFFSET + payload_size + mlen + 1 > STATSEG_MAX_SIZE)
		return ts_err(-EINVAL,
				"stats segment '%s': payload of %zu bytes and manifest of %zu: "
				"the payload must be a nonzero multiple of 8, the file at most %llu",
				name, payload_size, mlen, STATSEG_MAX_SIZE);
	total = PAYLOAD_OFFSET + payload_size + mlen + 1;
	ts_err_clear();

	s = ts_calloc(1, sizeof(*s));
	if (!s)
		return ts_err(-ENOMEM, "stats segment in %s: out of memory", dir);
	s->pid = getpid();
	s->size = total;
	s->payload_size = payload_size;
	s->map = MAP_FAILED;
	fd = open_tmp(s, dir, &tmp);
	if (fd < 0) {
		rc = fd;
		goto fail;
	}
	rc = seg_alloc(fd, tmp, total);
	if (rc)
		goto fail_unlink;
	s->map = mmap(NULL, total, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (s->map == MAP_FAILED) {
		rc = -errno;
		ts_err(rc, "stats segment %s: mmap of %zu bytes: %s", tmp, total, tier_strerror(rc));
		goto fail_unlink;
	}
	close(fd);
	fd = -1;
	fill_header(s->map, name, manifest_text, mlen, payload_size, total, rank);
	s->seq = (_Atomic uint64_t *)(void *)((char *)s->map + SEQ_OFFSET);
	s->payload = (_Atomic uint64_t *)(void *)((char *)s->map + PAYLOAD_OFFSET);
	atomic_init(s->seq, 0);
	if (link(tmp, s->path) < 0) {
		rc = -errno;
		ts_err(rc, "stats segment %s: link to %s: %s", tmp, s->path, tier_strerror(rc));
		goto fail_unlink;
	}
	unlink(tmp);
	free(tmp);
	*out = s;
	return 0;

fail_unlink:
	unlink(tmp);
fail:
	if (fd >= 0)
		close(fd);
	if (s->map != MAP_FAILED)
		munmap(s->map, total);
	free(tmp);
	free(s->path);
	free(s);
	return rc;
}

void statseg_publish(struct statseg *s, const void *payload)
{
	const unsigned char *src = payload;
	uint64_t seq = atomic_load_explicit(s->seq, memory_order_relaxed);
	size_t words = s->payload_size / 8;

	/*
	 * Odd first: every payload store below is a release store, so a
	 * reader that sees any of them also sees this (or a later) value.
	 */
	atomic_store_explicit(s->seq, seq + 1, memory_order_relaxed);
	for (size_t i = 0; i < words; i++) {
		uint64_t w;

		memcpy(&w, src + i * 8, 8);
		atomic_store_explicit(&s->payload[i], w, memory_order_release);
	}
	/* even again, after (release) every payload store */
	atomic_store_explicit(s->seq, seq + 2, memory_order_release);
}

const char *statseg_path(const struct statseg *s)
{
	return s->path;
}

size_t statseg_payload_size(const struct statseg *s)
{
	return s->payload_size;
}

void statseg_close(struct statseg *s)
{
	if (!s)
		return;
	munmap(s->map, s->size);
	if (s->pid == getpid())
		unlink(s->path);
	free(s->path);
	free(s);
}

/* ------------------------------------------------------------ the reader */

/* The header's offsets and lengths against the file's @size. */
static int check_layout(const struct statseg_header *h, size_t size, const char *path)
{
	const char *map = (const char *)h;

	if (h->header_size != sizeof(*h))
		return ts_err(-EBADMSG, "stats segment %s: header of %" PRIu32
				" bytes, layout 1 has %zu", path, h->header_size, sizeof(*h));
	if (h->total_size != size)
		return ts_err(-EBADMSG, "stats segment %s: header says %" PRIu64
				" bytes, the file has %zu (truncated?)", path, h->total_size, size);
	if (h->seq_offset % 8 || h->seq_offset < sizeof(*h) || h->seq_offset > size - 8 ||
	    h->payload_offset % 8 || h->payload_size % 8 || h->payload_size == 0 ||
	    h->payload_offset < h->seq_offset + 8 || h->payload_offset > size ||
	    h->payload_size > size - h->payload_offset ||
	    h->manifest_offset < h->payload_offset + h->payload_size ||
	    h->manifest_offset > size || h->manifest_len >= size - h->manifest_offset ||
	    map[h->manifest_offset + h->manifest_len] != '\0')
		return ts_err(-EBADMSG, "stats segment %s: offsets out of bounds (corrupt)", path);
	if (h->flags & STATSEG_F_RANK) {
		struct statseg_rank r;

		if (h->seq_offset < RANK_OFFSET + sizeof(r))
			return ts_err(-EBADMSG, "stats segment %s: offsets out of bounds (corrupt)", path);
		memcpy(&r, map + RANK_OFFSET, sizeof(r));
		if (r.world_size < 1 || r.local_world_size < 1 || r.local_world_size > r.world_size ||
		    r.rank < 0 || r.rank >= r.world_size || r.local_rank < 0 ||
		    r.local_rank >= r.local_world_size)
			return ts_err(-EBADMSG, "stats segment %s: rank %" PRId32 " of %" PRId32
					" (local %" PRId32 " of %" PRId32 ") is not a rank (corrupt)",
					path, r.rank, r.world_size, r.local_rank, r.local_world_size);
	}
	if (!memchr(h->name, '\0', sizeof(h->name)) ||
	    !memchr(h->boot_id, '\0', sizeof(h->boot_id)))
		return ts_err(-EBADMSG, "stats segment %s: unterminated name (corrupt)", path);
	return 0;
}

/*
 * An acquire fence between two of a reader's preads: the loads the kernel
 * made for the first come before those of the second.  ThreadSanitizer
 * sees neither the kernel's loads nor fences (GCC warns of the latter), so
 * its builds get none.
 */
#if defined(__SANITIZE_THREAD__)
#define READ_FENCE() ((void)0)
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define READ_FENCE() ((void)0)
#endif
#endif
#ifndef READ_FENCE
#define READ_FENCE() atomic_thread_fence(memory_order_acquire)
#endif

int statseg_open(const char *path, struct statseg_view **out)
{
	struct statseg_view *v = NULL;
	const struct statseg_header *h;
	struct stat st;
	char *copy = NULL;
	size_t size = 0;
	ssize_t got;
	int fd = -1, rc;

	if (!out)
		return ts_err(-EINVAL, "statseg_open: no result pointer");
	*out = NULL;
	if (!path || !*path)
		return ts_err(-EINVAL, "statseg_open: no path");
	ts_err_clear();

	rc = ts_fault_check(TIER_FAULT_STATS_OPEN);
	if (rc)
		return ts_err(rc, "stats segment %s: open: %s", path, tier_strerror(rc));
	fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
	if (fd < 0) {
		rc = -errno;
		if (rc == -ELOOP)
			return ts_err(-EACCES, "stats segment %s: a symbolic link", path);
		return ts_err(rc, "stats segment %s: open: %s", path, tier_strerror(rc));
	}
	if (fstat(fd, &st) < 0) {
		rc = -errno;
		ts_err(rc, "stats segment %s: fstat: %s", path, tier_strerror(rc));
		goto fail;
	}
	if (!S_ISREG(st.st_mode)) {
		rc = ts_err(-EACCES, "stats segment %s: not a regular file", path);
		goto fail;
	}
	if (st.st_uid != geteuid()) {
		rc = ts_err(-EACCES, "stats segment %s: owned by uid %ld, not by us (uid %ld)",
			      path, (long)st.st_uid, (long)geteuid());
		goto fail;
	}
	if ((st.st_mode & 07777) != 0600) {
		rc = ts_err(-EACCES, "stats segment %s: mode %04o, a segment has 0600", path,
			      (unsigned)(st.st_mode & 07777));
		goto fail;
	}
	if (st.st_size < (off_t)(PAYLOAD_OFFSET + 8 + 1) ||
	    (unsigned long long)st.st_size > STATSEG_MAX_SIZE) {
		rc = ts_err(-EBADMSG, "stats segment %s: %lld bytes, not a stats segment",
			      path, (long long)st.st_size);
		goto fail;
	}
	size = (size_t)st.st_size;
	/* 8-byte aligned (malloc), as the header's fields want */
	copy = ts_malloc(size);
	if (!copy) {
		rc = ts_err(-ENOMEM, "stats segment %s: out of memory", path);
		goto fail;
	}
	got = sys_pread_full(fd, copy, size, 0);
	if (got < 0) {
		rc = ts_err((int)got, "stats segment %s: read: %s", path, tier_strerror((int)got));
		goto fail;
	}
	/* cut short since the fstat: the header's size check says so */
	size = (size_t)got;
	h = (const struct statseg_header *)(const void *)copy;
	if (size < sizeof(*h) || memcmp(h->magic, STATSEG_MAGIC, sizeof(h->magic)) != 0) {
		rc = ts_err(-EBADMSG, "stats segment %s: bad magic, not a stats segment", path);
		goto fail;
	}
	if (h->version != STATSEG_VERSION) {
		rc = ts_err(-EPROTO, "stats segment %s: layout version %" PRIu32
			      ", this build reads version %u", path, h->version, STATSEG_VERSION);
		goto fail;
	}
	rc = check_layout(h, size, path);
	if (rc)
		goto fail;

	v = ts_calloc(1, sizeof(*v));
	if (v)
		v->path = ts_strdup(path);
	if (!v || !v->path) {
		rc = ts_err(-ENOMEM, "stats segment %s: out of memory", path);
		goto fail;
	}
	v->fd = fd;
	v->size = size;
	v->copy = copy;
	v->hdr = h;
	v->seq_offset = h->seq_offset;
	v->payload_offset = h->payload_offset;
	v->manifest = copy + h->manifest_offset;
	*out = v;
	return 0;

fail:
	if (v)
		free(v->path);
	free(v);
	free(copy);
	if (fd >= 0)
		close(fd);
	return rc;
}

/*
 * The refusal of a read from a file now @now bytes long (-1: cannot
 * tell), shorter than at open: its writer is not behind it any more.
 */
static int shrank(const struct statseg_view *v, long long now)
{
	struct stat st;

	if (now < 0 && fstat(v->fd, &st) == 0)
		now = (long long)st.st_size;
	return ts_err(-EBADMSG, "stats segment '%s' shrank to %lld bytes (want %zu): "
			"the store was closed or damaged", v->path, now, v->size);
}

/* The sequence word, by pread; 0 or the refusal. */
static int read_seq(const struct statseg_view *v, uint64_t *seq)
{
	ssize_t n = sys_pread_full(v->fd, seq, sizeof(*seq), v->seq_offset);

	if (n == (ssize_t)sizeof(*seq))
		return 0;
	if (n >= 0)
		return shrank(v, -1);
	return ts_err((int)n, "stats segment %s: read: %s", v->path, tier_strerror((int)n));
}

int statseg_read(const struct statseg_view *v, void *payload, size_t len)
{
	struct stat st;
	ssize_t n;
	int rc;

	if (len > v->hdr->payload_size)
		return ts_err(-EINVAL, "stats segment %s: read of %zu bytes, the payload has %"
				PRIu64, v->path, len, v->hdr->payload_size);
	/* Cut short since the open (by someone else: the writer never is). */
	if (fstat(v->fd, &st) != 0)
		return ts_err(-errno, "stats segment %s: fstat: %s", v->path, tier_strerror(errno));
	if ((unsigned long long)st.st_size < v->size)
		return shrank(v, (long long)st.st_size);
	for (int tries = 0; tries < READ_TRIES; tries++) {
		uint64_t before, after;

		if (tries >= READ_SPINS)
			sched_yield();
		rc = read_seq(v, &before);
		if (rc)
			return rc;
		if (before & 1)
			continue;
		/* the payload's loads after this look at the sequence */
		READ_FENCE();
		n = sys_pread_full(v->fd, payload, len, v->payload_offset);
		if (n < 0)
			return ts_err((int)n, "stats segment %s: read: %s", v->path,
					tier_strerror((int)n));
		if ((size_t)n < len)
			return shrank(v, -1);
		/* and before the second look */
		READ_FENCE();
		rc = read_seq(v, &after);
		if (rc)
			return rc;
		if (after == before)
			return 0;
	}
	return ts_err(-EAGAIN, "stats segment %s: no consistent snapshot after %d tries "
			"(the writer is publishing nonstop, or died while publishing)",
			v->path, READ_TRIES);
}

bool statseg_view_rank(const struct statseg_view *v, struct statseg_rank *out)
{
	const struct statseg_header *h = statseg_view_header(v);

	if (!(h->flags & STATSEG_F_RANK))
		return false;
	memcpy(out, (const char *)h + RANK_OFFSET, sizeof(*out));
	return true;
}

const struct statseg_header *statseg_view_header(const struct statseg_view *v)
{
	return v->hdr;
}

const char *statseg_view_manifest(const struct statseg_view *v)
{
	return v->manifest;
}

const char *statseg_view_path(const struct statseg_view *v)
{
	return v->path;
}

bool statseg_stale(const struct statseg_view *v)
{
	const struct statseg_header *h = v->hdr;
	char boot[STATSEG_BOOT_ID_MAX];
	pid_t pid = (pid_t)h->pid;
	uint64_t start;

	if (h->pid == 0 || (uint64_t)pid != h->pid)
		return true;
	read_boot_id(boot);
	if (boot[0] && h->boot_id[0] && strcmp(boot, h->boot_id) != 0)
		return true;
	if (kill(pid, 0) < 0 && errno == ESRCH)
		return true;
	start = proc_start_time(pid);
	/* pid gone between the two looks, or now another process's */
	if (h->proc_start && start != h->proc_start)
		return true;
	return false;
}

void statseg_view_close(struct statseg_view *v)
{
	if (!v)
		return;
	close(v->fd);
	free(v->copy);
	free(v->path);
	free(v);
}

/* ------------------------------------------------------------- the files */

static int cmp_names(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

static bool is_segment_name(const char *n)
{
	size_t len = strlen(n);

	return strncmp(n, "tierstore-", 10) == 0 && len > 16 &&
	       strcmp(n + len - 6, ".stats") == 0;
}

int statseg_list(const char *dir, int (*cb)(const char *path, void *arg), void *arg)
{
	char **names = NULL, **grown;
	size_t n = 0, cap = 0;
	struct dirent *e;
	int rc = 0;
	DIR *d;

	if (!cb)
		return ts_err(-EINVAL, "statseg_list: no callback");
	if (!dir)
		dir = statseg_dir();
	d = opendir(dir);
	if (!d) {
		rc = -errno;
		return ts_err(rc, "stats directory %s: %s", dir, tier_strerror(rc));
	}
	for (;;) {
		errno = 0;
		e = readdir(d);
		if (!e) {
			if (errno) {
				rc = -errno;
				ts_err(rc, "stats directory %s: %s", dir, tier_strerror(rc));
			}
			break;
		}
		if (!is_segment_name(e->d_name))
			continue;
		if (n == cap) {
			cap = cap ? cap * 2 : 16;
			grown = ts_realloc(names, cap * sizeof(*names));
			if (!grown) {
				rc = ts_err(-ENOMEM, "stats directory %s: out of memory", dir);
				break;
			}
			names = grown;
		}
		names[n] = ts_asprintf("%s/%s", dir, e->d_name);
		if (!names[n]) {
			rc = ts_err(-ENOMEM, "stats directory %s: out of memory", dir);
			break;
		}
		n++;
	}
	closedir(d);
	if (rc == 0 && n > 1)
		qsort(names, n, sizeof(*names), cmp_names);
	for (size_t i = 0; i < n && rc == 0; i++)
		rc = cb(names[i], arg);
	for (size_t i = 0; i < n; i++)
		free(names[i]);
	free(names);
	return rc;
}
