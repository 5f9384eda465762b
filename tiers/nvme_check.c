/*
 * nvme_check.c - tier_nvme_check_files: verifies the backing files of a
 * closed store offline (tier-stat --check-files): every header, both
 * commit slots, the object table of every kept commit, and every stripe
 * unit the newest loadable commit names, against its crc32c.  It only
 * reads (a shared lock tells a file in use by a running store), and says
 * what it found, one line per finding.
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "common/error.h"
#include "common/fault.h"
#include "common/sysinfo.h"
#include "kernels/crc32c.h"
#include "tiers/nvme_format.h"
#include "tiers/nvme_impl.h"

struct chk {
	void (*say)(void *arg, bool problem, const char *line);
	void *arg;
	struct tier_nvme_check_report *r;
	const char *const *files;
	size_t n;
	int fd[TIERS_MAX_NVME_PATHS];        /* by path index */
	const char *name[TIERS_MAX_NVME_PATHS];
	struct ts_nvme_header h[TIERS_MAX_NVME_PATHS];
	uint64_t size[TIERS_MAX_NVME_PATHS];
	unsigned npaths;
	char *unit_buf;
};

__attribute__((format(printf, 3, 4)))
static void say(struct chk *c, bool problem, const char *fmt, ...)
{
	char line[1024];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(line, sizeof(line), fmt, ap);
	va_end(ap);
	if (problem)
		c->r->problems++;
	if (c->say)
		c->say(c->arg, problem, line);
}

static int read_at(int fd, void *buf, size_t len, uint64_t off)
{
	ssize_t n = sys_pread_full(fd, buf, len, off);

	if (n < 0)
		return (int)n;
	return (size_t)n < len ? -ENODATA : 0;
}

/* Opens and identifies every file: a header each, one store, every path. */
static int open_files(struct chk *c)
{
	for (unsigned i = 0; i < TIERS_MAX_NVME_PATHS; i++)
		c->fd[i] = -1;
	for (size_t i = 0; i < c->n; i++) {
		struct ts_nvme_header h;
		struct stat st;
		int fd = open(c->files[i], O_RDONLY | O_CLOEXEC | O_NOFOLLOW), rc;

		if (fd < 0)
			return ts_err(-errno, "%s: %s", c->files[i], tier_strerror(errno));
		if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
			close(fd);
			return ts_err(-EINVAL, "%s: not a regular file", c->files[i]);
		}
		/* A running store holds its files' exclusive flock.  A file
		 * system without flock (some network ones; the store then
		 * runs unguarded) cannot tell: go on, and say so. */
		if (flock(fd, LOCK_SH | LOCK_NB) != 0) {
			int e = errno;

			/* A store just killed holds its lock a little longer. */
			if (e == EWOULDBLOCK && nvme_file_lock_released(fd) &&
			    flock(fd, LOCK_SH | LOCK_NB) == 0)
				e = 0;
			if (e == EWOULDBLOCK) {
				close(fd);
				return ts_err(-EBUSY, "%s: in use by a running store; check the files of a closed store",
					      c->files[i]);
			}
			if (e)
				say(c, false, "%s: no file locks here (%s): cannot tell whether a running store uses it",
				    c->files[i], tier_strerror(-e));
		}
		rc = read_at(fd, &h, sizeof(h), 0);
		if (rc == 0)
			rc = nvme_header_check(&h, c->files[i]);
		else
			rc = ts_err(rc == -ENODATA ? -ENOMSG : rc, "%s: reading the header: %s", c->files[i],
				    rc == -ENODATA ? "the file is shorter than a header" : tier_strerror(rc));
		if (rc) {
			close(fd);
			return rc;
		}
		if (h.path_index >= TIERS_MAX_NVME_PATHS || h.npaths != c->n ||
		    c->fd[h.path_index] >= 0) {
			close(fd);
			return ts_err(-EINVAL, "%s: path %u of %u of store '%.64s'; %zu files were named%s",
				      c->files[i], h.path_index, h.npaths, h.store_name, c->n,
				      h.path_index < TIERS_MAX_NVME_PATHS && c->fd[h.path_index] >= 0
				      ? ", and another is that path too" : " (name every file of the store)");
		}
		c->fd[h.path_index] = fd;
		c->name[h.path_index] = c->files[i];
		c->h[h.path_index] = h;
		c->size[h.path_index] = (uint64_t)st.st_size;
	}
	c->npaths = (unsigned)c->n;
	for (unsigned i = 1; i < c->npaths; i++)
		if (memcmp(c->h[i].store_uuid, c->h[0].store_uuid, 16) != 0 ||
		    c->h[i].stripe_unit != c->h[0].stripe_unit || c->h[i].checksum != c->h[0].checksum)
			return ts_err(-EINVAL, "%s and %s are not files of one store", c->name[0], c->name[i]);
	snprintf(c->r->store_name, sizeof(c->r->store_name), "%.64s", c->h[0].store_name);
	c->r->npaths = c->npaths;
	for (unsigned i = 0; i < c->npaths; i++)
		say(c, false, "nvme%u: %s: header of store '%.64s', path %u of %u, %s, %" PRIu64 " bytes",
		    i, c->name[i], c->h[i].store_name, i, c->npaths,
		    c->h[i].flags & TIER_NVME_HDR_CLEAN ? "closed cleanly" : "not closed cleanly",
		    c->size[i]);
	return 0;
}

/* An extent a commit names (its table's or an object's), ordered by
 * nvme_ext_cmp through its first member. */
struct cext {
	struct nvme_ext e;
	bool bad;                 /* a unit in it failed its check */
};

struct units {
	struct chk *c;
	const struct ts_nvme_table *t;
	uint64_t gen;
	bool newest;              /* the newest sound commit: counted in the report */
	uint64_t bad;             /* this commit's findings: bad units, extents */
	/* The extents of the newer sound commits, sorted; this one's after. */
	struct cext *x;
	size_t nx, cap, nnewer;
};

static int cext_add(struct units *u, uint64_t p, uint64_t off, uint64_t len)
{
	if (u->nx == u->cap) {
		size_t cap = u->cap ? u->cap * 2 : 256;
		struct cext *n = realloc(u->x, cap * sizeof(*n));

		if (!n)
			return ts_err(-ENOMEM, "tier_nvme_check_files: out of memory");
		u->x = n;
		u->cap = cap;
	}
	u->x[u->nx++] = (struct cext){ { p, off, len }, false };
	return 0;
}

/*
 * An extent of this commit either is one a newer commit names too (an
 * object not written since) or overlaps none of theirs; one that overlaps
 * was written over after this commit was made.
 */
static long check_overlap(struct units *u, unsigned p, uint64_t off, uint64_t len, const char *what,
			  int wl, const char *wn)
{
	struct cext k = { { p, off, len }, false };
	size_t lo = 0, hi = u->nnewer;
	long same = -1;

	while (lo < hi) { /* the first newer extent at or after (p, off) */
		size_t mid = lo + (hi - lo) / 2;

		if (nvme_ext_cmp(&u->x[mid], &(struct nvme_ext){ p, off, 0 }) < 0)
			lo = mid + 1;
		else
			hi = mid;
	}
	for (size_t i = lo; i > 0 && u->x[i - 1].e.path == p; i--) {
		const struct cext *e = &u->x[i - 1];

		if (e->e.off + e->e.len <= off)
			break;
		if (nvme_ext_cmp(e, &k) != 0)
			goto overlap;
	}
	for (size_t i = lo; i < u->nnewer && u->x[i].e.path == p && u->x[i].e.off < off + len; i++) {
		if (nvme_ext_cmp(&u->x[i], &k) != 0)
			goto overlap;
		same = (long)i;
	}
	return same;
overlap:
	u->bad++;
	say(u->c, true, "generation %" PRIu64 ": %s%.*s's extent at nvme%u data offset %" PRIu64 " (%" PRIu64
	    " bytes) overlaps an extent of a newer commit: it was written over",
	    u->gen, what, wl, wn, p, off, len);
	return -1;
}

/* One object of a sound table: its extents in the files, each unit's crc. */
static int check_obj(void *arg, const struct nvme_tobj *e)
{
	struct units *u = arg;
	struct chk *c = u->c;
	uint32_t unit = u->t->stripe_unit, P = c->npaths;
	long at[TIERS_MAX_NVME_PATHS];  /* the extent's entry in u->x */
	bool shared[TIERS_MAX_NVME_PATHS] = { false };
	int rc;

	for (unsigned p = 0; p < P; p++) {
		long same;

		at[p] = -1;
		if (!e->ext_len[p])
			continue;
		if (c->h[p].data_offset + e->ext_off[p] + e->ext_len[p] > c->size[p]) {
			u->bad++;
			say(c, true, "generation %" PRIu64 ": object '%.*s': its extent on nvme%u ends at file offset %" PRIu64
			    ", past the end of %s (%" PRIu64 " bytes): the file was truncated",
			    u->gen, (int)e->name_len, e->name, p,
			    c->h[p].data_offset + e->ext_off[p] + e->ext_len[p], c->name[p], c->size[p]);
		}
		same = check_overlap(u, p, e->ext_off[p], e->ext_len[p], "object '", (int)e->name_len,
				     e->name);
		if (same >= 0) {
			/* A newer commit names it too: its units were read
			 * there, and what they showed holds here. */
			shared[p] = true;
			u->bad += u->x[same].bad;
			continue;
		}
		rc = cext_add(u, p, e->ext_off[p], e->ext_len[p]);
		if (rc)
			return rc;
		at[p] = (long)u->nx - 1;
	}
	if (u->newest) {
		c->r->objects++;
		c->r->data_bytes += e->size;
	}
	for (uint64_t k = 0; k < e->nunits; k++) {
		unsigned p = (unsigned)((k + e->rot) % P);
		uint64_t off = c->h[p].data_offset + e->ext_off[p] + (k / P) * unit;
		uint32_t len = (uint32_t)(k == e->nunits - 1 ? e->size - k * unit : unit), want, got;

		if (shared[p])
			continue;
		if (!e->crc || !((e->ok[k / 8] >> (k % 8)) & 1)) {
			c->r->units_unchecked++;
			continue;
		}
		memcpy(&want, e->crc + 4 * k, 4);
		rc = read_at(c->fd[p], c->unit_buf, len, off);
		if (rc) {
			say(c, true, "generation %" PRIu64 ": object '%.*s' stripe unit %" PRIu64 " (nvme%u file offset %" PRIu64 "): %s",
			    u->gen, (int)e->name_len, e->name, k, p, off,
			    rc == -ENODATA ? "past the end of the file" : tier_strerror(rc));
			c->r->units_bad++;
			u->bad++;
			if (at[p] >= 0)
				u->x[at[p]].bad = true;
			continue;
		}
		got = ts_crc32c(0, c->unit_buf, len);
		c->r->units_checked++;
		if (got != want) {
			c->r->units_bad++;
			u->bad++;
			if (at[p] >= 0)
				u->x[at[p]].bad = true;
			say(c, true, "generation %" PRIu64 ": object '%.*s' stripe unit %" PRIu64 " (nvme%u file offset %" PRIu64
			    ", %u bytes): crc32c %08x, expected %08x",
			    u->gen, (int)e->name_len, e->name, k, p, off, len, got, want);
		}
	}
	return 0;
}

static void fmt_time(uint64_t ns, char *buf, size_t n)
{
	time_t s = (time_t)(ns / 1000000000u);
	struct tm tm;

	strftime(buf, n, "%Y-%m-%d %H:%M:%S", localtime_r(&s, &tm));
}

/*
 * The kept commits, newest first: each table read and checked, every
 * stripe unit it names verified against its crc32c, and its extents
 * checked against the newer commits'.  Says which a rollback can reach.
 */
static int check_commits(struct chk *c)
{
	struct ts_nvme_slot sl[2], *s = NULL;
	struct units u = { .c = c };
	char reach[sizeof(c->r->reachable)] = "";
	/* Files an earlier build opened since: it held the newest commit's
	 * extents only, and without checksums nothing shows an older one
	 * whole (docs/nvme-format.md, "Reopening"). */
	bool suspect = !(c->h[0].flags & TIER_NVME_HDR_HOLDS_KEPT) && c->h[0].checksum == 0;
	int rs[2], rc = 0;

	for (int i = 0; i < 2; i++) {
		rs[i] = read_at(c->fd[0], &sl[i], sizeof(sl[i]), TIER_NVME_SLOT_OFF(i));
		if (rs[i] == -ENODATA) {
			memset(&sl[i], 0, sizeof(sl[i]));
			rs[i] = 0;
		}
		if (rs[i] == 0)
			rs[i] = nvme_slot_check(&sl[i]);
		if (rs[i] == 0 && memcmp(sl[i].store_uuid, c->h[0].store_uuid, 16) != 0)
			rs[i] = -EBADMSG;
		if (rs[i] == 0)
			say(c, false, "commit slot %d: write %" PRIu64 ", %u commit(s) kept (of %u), newest generation %" PRIu64,
			    i, sl[i].seq, sl[i].ncommits, sl[i].keep, sl[i].ncommits ? sl[i].c[0].gen : 0);
		else if (rs[i] == -ENOENT)
			say(c, false, "commit slot %d: never written", i);
		else
			say(c, true, "commit slot %d (nvme0 file offset %u): damaged (%s)", i,
			    TIER_NVME_SLOT_OFF(i), tier_strerror(rs[i]));
		if (rs[i] == 0 && (!s || sl[i].seq > s->seq))
			s = &sl[i];
	}
	if (!s) {
		say(c, rs[0] == -ENOENT && rs[1] == -ENOENT ? false : true,
		    "no commit: the files hold no durable state");
		return 0;
	}
	c->r->commits_kept = s->ncommits;
	for (unsigned i = 0; i < s->ncommits && !rc; i++) {
		const struct ts_nvme_commit *cm = &s->c[i];
		uint64_t dev = (cm->table_len + 4095) / 4096 * 4096;
		char *buf = NULL, when[32], who[64];
		const struct ts_nvme_table *t = NULL;
		uint64_t nobjs;
		bool reachable;

		snprintf(who, sizeof(who), "generation %" PRIu64 "'s table", cm->gen);
		fmt_time(cm->time_ns, when, sizeof(when));
		if (cm->table_len < sizeof(struct ts_nvme_table) || cm->table_len > (1ull << 34) ||
		    !(buf = malloc(dev))) {
			say(c, true, "%s: a length of %" PRIu64 " bytes cannot be read", who, cm->table_len);
			continue;
		}
		rc = read_at(c->fd[0], buf, cm->table_len, c->h[0].data_offset + cm->table_off);
		if (rc) {
			say(c, true, "%s at nvme0 file offset %" PRIu64 ": %s", who,
			    c->h[0].data_offset + cm->table_off,
			    rc == -ENODATA ? "past the end of the file (truncated)" : tier_strerror(rc));
			free(buf);
			rc = 0;
			continue;
		}
		if (ts_crc32c(0, buf, cm->table_len) != cm->table_crc) {
			say(c, true, "%s at nvme0 file offset %" PRIu64 " is damaged (crc32c mismatch)", who,
			    c->h[0].data_offset + cm->table_off);
			free(buf);
			continue;
		}
		rc = nvme_table_walk(buf, cm->table_len, who, NULL, NULL, &t, NULL, NULL);
		if (rc) {
			say(c, true, "%s", tier_last_error());
			free(buf);
			rc = 0;
			continue;
		}
		u.t = t;
		nobjs = t->nobjs;
		u.gen = cm->gen;
		u.newest = c->r->commits_ok == 0;
		u.bad = 0;
		u.nnewer = u.nx;
		check_overlap(&u, 0, cm->table_off, dev, "the object table", 0, "");
		rc = cext_add(&u, 0, cm->table_off, dev);
		if (!rc)
			rc = nvme_table_walk(buf, cm->table_len, who, check_obj, &u, NULL, NULL, NULL);
		free(buf);
		if (rc == -ENOMEM)
			break;
		if (rc) {
			say(c, true, "%s", tier_last_error());
			u.nx = u.nnewer;
			rc = 0;
			continue;
		}
		qsort(u.x, u.nx, sizeof(*u.x), nvme_ext_cmp);
		c->r->commits_ok++;
		reachable = !u.bad && !(suspect && i > 0);
		if (reachable) {
			c->r->commits_reachable++;
			snprintf(reach + strlen(reach), sizeof(reach) - strlen(reach), "%s%" PRIu64,
				 c->r->commits_reachable > 1 ? ", " : "", cm->gen);
		}
		say(c, false, "generation %" PRIu64 " (%s): %" PRIu64 " objects, %" PRIu64 " bytes, table of %" PRIu64 " bytes: table sound, %s; %s",
		    cm->gen, when, nobjs, cm->data_bytes, cm->table_len,
		    c->h[0].checksum ? "its stripe units verified" : "its extents checked (no checksums)",
		    reachable ? (i == 0 ? "the store opens at it" : "a rollback can reach it")
			      : u.bad ? "damaged: no open reaches it"
				      : "not reachable: an earlier build of tierstore opened the files since, and without checksums its data cannot be shown whole");
		if (u.newest) {
			c->r->generation = cm->gen;
			c->r->time_ns = cm->time_ns;
		}
	}
	if (!rc)
		snprintf(c->r->reachable, sizeof(c->r->reachable), "%s", reach);
	free(u.x);
	return rc;
}

int tier_nvme_check_files(const char *const *files, size_t n,
			  void (*sayfn)(void *arg, bool problem, const char *line), void *arg,
			  struct tier_nvme_check_report *out)
{
	TS_NONNULL(files);
	TS_NONNULL(out);
	struct chk c = { .say = sayfn, .arg = arg, .r = out, .files = files, .n = n };
	uint32_t unit;
	int rc;

	memset(out, 0, sizeof(*out));
	ts_err_clear();
	if (n == 0 || n > TIERS_MAX_NVME_PATHS)
		return ts_err(-EINVAL, "tier_nvme_check_files: %zu files (1 to %d)", n, TIERS_MAX_NVME_PATHS);
	for (size_t i = 0; i < n; i++)
		if (!files[i])
			return ts_err_null(__func__, "files[i]");
	rc = open_files(&c);
	if (rc)
		goto out;
	unit = c.h[0].stripe_unit;
	c.unit_buf = malloc(unit ? unit : 1);
	if (!c.unit_buf || !unit) {
		rc = ts_err(-ENOMEM, "tier_nvme_check_files: out of memory");
		goto out;
	}
	rc = check_commits(&c);
	if (rc)
		goto out;
	if (c.h[0].checksum == 0 && out->objects)
		say(&c, false, "no checksums (the manifest said checksum: none): the data could not be verified");
	say(&c, false, "%" PRIu64 " stripe units verified, %" PRIu64 " bad, %" PRIu64 " without a checksum; %u problem(s)",
	    out->units_checked, out->units_bad, out->units_unchecked, out->problems);
	rc = out->problems ? -EBADMSG : 0;
	if (rc)
		ts_err(rc, "%u problem(s) found in the files of store '%s'", out->problems, out->store_name);
out:
	for (unsigned i = 0; i < TIERS_MAX_NVME_PATHS; i++)
		if (c.fd[i] >= 0)
			close(c.fd[i]);
	free(c.unit_buf);
	return rc;
}
