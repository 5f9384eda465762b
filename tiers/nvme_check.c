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
	size_t done = 0;

	while (done < len) {
		ssize_t n = pread(fd, (char *)buf + done, len - done, (off_t)(off + done));

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return -errno;
		if (n == 0)
			return -ENODATA;
		done += (size_t)n;
	}
	return 0;
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

			if (e == EWOULDBLOCK) {
				close(fd);
				return ts_err(-EBUSY, "%s: in use by a running store; check the files of a closed store",
					      c->files[i]);
			}
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

struct units {
	struct chk *c;
	const struct ts_nvme_table *t;
	bool verify;
};

/* One object of the newest table: its extents in the files, each unit's crc. */
static int check_obj(void *arg, const struct nvme_tobj *e)
{
	struct units *u = arg;
	struct chk *c = u->c;
	uint32_t unit = u->t->stripe_unit, P = c->npaths;

	for (unsigned p = 0; p < P; p++)
		if (e->ext_len[p] &&
		    c->h[p].data_offset + e->ext_off[p] + e->ext_len[p] > c->size[p])
			say(c, true, "object '%.*s': its extent on nvme%u ends at file offset %" PRIu64
			    ", past the end of %s (%" PRIu64 " bytes): the file was truncated",
			    (int)e->name_len, e->name, p, c->h[p].data_offset + e->ext_off[p] + e->ext_len[p],
			    c->name[p], c->size[p]);
	c->r->objects++;
	c->r->data_bytes += e->size;
	for (uint64_t k = 0; k < e->nunits && u->verify; k++) {
		unsigned p = (unsigned)((k + e->rot) % P);
		uint64_t off = c->h[p].data_offset + e->ext_off[p] + (k / P) * unit;
		uint32_t len = (uint32_t)(k == e->nunits - 1 ? e->size - k * unit : unit), want, got;
		int rc;

		if (!e->crc || !((e->ok[k / 8] >> (k % 8)) & 1)) {
			c->r->units_unchecked++;
			continue;
		}
		memcpy(&want, e->crc + 4 * k, 4);
		rc = read_at(c->fd[p], c->unit_buf, len, off);
		if (rc) {
			say(c, true, "object '%.*s' stripe unit %" PRIu64 " (nvme%u file offset %" PRIu64 "): %s",
			    (int)e->name_len, e->name, k, p, off,
			    rc == -ENODATA ? "past the end of the file" : tier_strerror(rc));
			c->r->units_bad++;
			continue;
		}
		got = ts_crc32c(0, c->unit_buf, len);
		c->r->units_checked++;
		if (got != want) {
			c->r->units_bad++;
			say(c, true, "object '%.*s' stripe unit %" PRIu64 " (nvme%u file offset %" PRIu64
			    ", %u bytes): crc32c %08x, expected %08x",
			    (int)e->name_len, e->name, k, p, off, len, got, want);
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

/* The kept commits: each table read and checked; the newest that loads
 * has its units verified. */
static int check_commits(struct chk *c)
{
	struct ts_nvme_slot sl[2], *s = NULL;
	int rs[2];
	bool newest_done = false;

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
	for (unsigned i = 0; i < s->ncommits; i++) {
		const struct ts_nvme_commit *cm = &s->c[i];
		uint64_t dev = (cm->table_len + 4095) / 4096 * 4096;
		char *buf = NULL, when[32], who[64];
		const struct ts_nvme_table *t = NULL;
		struct units u = { c, NULL, false };
		int rc;

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
			continue;
		}
		if (ts_crc32c(0, buf, cm->table_len) != cm->table_crc) {
			say(c, true, "%s at nvme0 file offset %" PRIu64 " is damaged (crc32c mismatch)", who,
			    c->h[0].data_offset + cm->table_off);
			free(buf);
			continue;
		}
		u.verify = !newest_done;
		rc = nvme_table_walk(buf, cm->table_len, who, NULL, NULL, &t, NULL, NULL);
		if (rc == 0 && u.verify) {
			u.t = t;
			rc = nvme_table_walk(buf, cm->table_len, who, check_obj, &u, NULL, NULL, NULL);
		}
		if (rc) {
			say(c, true, "%s", tier_last_error());
			free(buf);
			continue;
		}
		c->r->commits_ok++;
		say(c, false, "generation %" PRIu64 " (%s): %" PRIu64 " objects, %" PRIu64 " bytes, table of %" PRIu64 " bytes: %s",
		    cm->gen, when, t->nobjs, cm->data_bytes, cm->table_len,
		    u.verify ? "table sound, its stripe units verified" : "table sound");
		if (u.verify) {
			newest_done = true;
			c->r->generation = cm->gen;
			c->r->time_ns = cm->time_ns;
		}
		free(buf);
	}
	return 0;
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
