/*
 * manifest_resolve.c - pass 3 of reading a manifest: struct raw resolved
 * against the machine (memory, GPUs, file systems, O_DIRECT) into struct
 * tier_manifest, every default filled in and every capacity checked against
 * what is there.  Under TIER_MANIFEST_NO_PROBE a nominal machine stands in.
 */
#include "config.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/error.h"
#include "common/fault.h"
#include "common/options.h"
#include "common/sysinfo.h"
#include "common/units.h"
#include "prefetch/lookahead.h"
#include "runtime/manifest/manifest_impl.h"
#include "tiers/gpu.h"
#include "tiers/nvme_format.h"

int mf_gather_facts(struct walker *w, struct facts *f)
{
	int rc;

	if (w->flags & TIER_MANIFEST_NO_PROBE) {
		/* Nominal machine for schema-only checks (fuzzing, offline review). */
		f->mem.total = 64ull << 30;
		f->mem.available = 48ull << 30;
		f->ngpu = 0;
		snprintf(f->gpu_why, sizeof(f->gpu_why), "not probed");
		return 0;
	}
	rc = sys_meminfo(&f->mem);
	if (rc)
		return rc;
	return gpu_count(&f->ngpu, f->gpu_why, sizeof(f->gpu_why));
}

/*
 * A size or a percentage of @whole, and "/local_world" divided by the
 * local world size (rounded down here; the key then rounds to its unit).
 * A percentage is at most 100, so the product is at most @whole; but
 * (double)@whole may round up to 2^64, which no uint64_t holds.
 */
static uint64_t resolve_size(const struct raw_size *s, uint64_t whole)
{
	uint64_t v = s->v.bytes;

	if (s->v.is_percent) {
		double d = (double)whole * s->v.percent / 100.0;

		v = d >= 18446744073709551616.0 ? UINT64_MAX : (uint64_t)d;
	}
	return s->div > 1 ? v / s->div : v;
}

/* @a + @b, or UINT64_MAX when the sum passes it. */
static uint64_t add_sat(uint64_t a, uint64_t b)
{
	uint64_t sum;

	return __builtin_add_overflow(a, b, &sum) ? UINT64_MAX : sum;
}

/* The capacity of @rp as written, in bytes (a percentage: as resolved). */
static uint64_t written_bytes(const struct raw_path *rp, const struct tiers_path_cfg *p)
{
	return rp->capacity.v.is_percent ? p->capacity : rp->capacity.v.bytes;
}

void mf_resolve_gpu(struct walker *w, const struct facts *f, struct tier_manifest *c)
{
	struct raw *r = w->raw;
	struct ts_gpu_info gi;
	char a[32], b[32];

	c->tiers.gpu = -1;
	c->gpu_auto = r->device == -2;
	if (r->device == -1) {
		snprintf(c->gpu_note, sizeof(c->gpu_note), "none requested");
		if (r->hbm.at.line)
			mf_diag(w, r->hbm.at, "gpu.capacity: given with device: none");
		return;
	}
	if (w->flags & TIER_MANIFEST_NO_PROBE) {
		if (r->device >= 0) {
			/* Not probed: take the index and a nominal 80 GiB device. */
			c->tiers.gpu = r->device;
			c->gpu_mem = 80ull << 30;
			snprintf(c->gpu_name, sizeof(c->gpu_name), "not probed");
			c->tiers.hbm_capacity = r->hbm.at.line ? resolve_size(&r->hbm, c->gpu_mem)
							 : c->gpu_mem / 10 * 9;
		} else {
			snprintf(c->gpu_note, sizeof(c->gpu_note), "not probed");
		}
		return;
	}
	if (r->device == -2) {
		if (f->ngpu == 0) {
			snprintf(c->gpu_note, sizeof(c->gpu_note), "auto: no GPU (%s)", f->gpu_why);
			return;
		}
		r->device = 0;
	} else if (r->device >= f->ngpu) {
		if (f->ngpu == 0)
			mf_diag(w, r->device_at,
				"gpu.device: GPU %d requested but there is none (%s)",
				r->device, f->gpu_why);
		else
			mf_diag(w, r->device_at, "gpu.device: GPU %d requested but only %d present (0-%d)",
				r->device, f->ngpu, f->ngpu - 1);
		return;
	}
	if (gpu_info(r->device, &gi)) {
		mf_diag(w, r->device_at.line ? r->device_at : r->gpu_at, "gpu.device: %s",
			tier_last_error());
		return;
	}
	c->tiers.gpu = r->device;
	snprintf(c->gpu_name, sizeof(c->gpu_name), "%s", gi.name);
	snprintf(c->gpu_pci, sizeof(c->gpu_pci), "%s", gi.pci_bus_id);
	c->gpu_mem = gi.total_mem;
	c->tiers.hbm_capacity = r->hbm.at.line ? resolve_size(&r->hbm, gi.total_mem)
					 : gi.total_mem / 10 * 9;
	c->tiers.hbm_capacity &= ~((uint64_t)(2u << 20) - 1);
	if (c->tiers.hbm_capacity > gi.total_mem)
		mf_diag(w, r->hbm.at, "gpu.capacity: %s is more than GPU %d has (%s)",
			ts_size_fmt(c->tiers.hbm_capacity, a, sizeof(a)), c->tiers.gpu,
			ts_size_fmt(gi.total_mem, b, sizeof(b)));
	else if (c->tiers.hbm_capacity == 0)
		mf_diag(w, r->hbm.at, "gpu.capacity: rounds down to zero (the HBM tier is allocated in 2 MiB units)");
}

void mf_resolve_dram(struct walker *w, const struct facts *f, struct tier_manifest *c)
{
	struct raw *r = w->raw;
	char a[32], b[32];

	if (r->dram.at.line)
		c->tiers.dram_capacity = resolve_size(&r->dram, f->mem.total);
	else
		c->tiers.dram_capacity = (uint64_t)((double)f->mem.available *
					      ts_opt_percent(TIER_OPT_DRAM_SHARE) / 100.0);
	c->tiers.dram_capacity &= ~(uint64_t)4095;
	if (c->tiers.dram_capacity == 0)
		mf_diag(w, r->dram.at, "dram.capacity: rounds down to zero (the DRAM tier is allocated in 4 KiB pages)");
	else if (c->tiers.dram_capacity > f->mem.available)
		mf_diag(w, r->dram.at.line ? r->dram.at : r->dram_at,
			"dram.capacity: %s is more than this machine has available (MemAvailable %s of %s)",
			ts_size_fmt(c->tiers.dram_capacity, a, sizeof(a)),
			ts_size_fmt(f->mem.available, b, sizeof(b)),
			ts_size_fmt(f->mem.total, (char[32]){ 0 }, 32));

	c->numa_auto = r->numa == -2;
	c->tiers.numa_node = -1;
	if (r->numa >= 0) {
		if (!(w->flags & TIER_MANIFEST_NO_PROBE) && !sys_numa_node_valid(r->numa))
			mf_diag(w, r->numa_at, "dram.numa_node: node %d does not exist or has no memory (nodes 0-%d)",
				r->numa, sys_numa_max_node());
		else
			c->tiers.numa_node = r->numa;
	} else if (r->numa == -2 && c->tiers.gpu >= 0 && c->gpu_pci[0]) {
		c->tiers.numa_node = sys_pci_numa_node(c->gpu_pci);
	}
	c->tiers.huge_pages = r->huge;
	if (r->huge == TIER_HUGE_ON && !(w->flags & TIER_MANIFEST_NO_PROBE)) {
		struct ts_hugeinfo hi;

		sys_hugeinfo(&hi);
		if (!hi.thp && hi.free_pages * hi.page_size < c->tiers.dram_capacity)
			mf_diag(w, r->huge_at,
				"dram.huge_pages: on, but there are only %llu free huge pages of %s and transparent huge pages are off",
				(unsigned long long)hi.free_pages,
				ts_size_fmt(hi.page_size, a, sizeof(a)));
	}
}

/* The nearest existing ancestor directory of @dir (for probing a directory still to be created). */
void mf_existing_ancestor(const char *dir, char *out, size_t len)
{
	struct stat st;

	snprintf(out, len, "%s", dir);
	while (stat(out, &st) != 0 || !S_ISDIR(st.st_mode)) {
		char *slash = strrchr(out, '/');

		if (!slash || slash == out) {
			snprintf(out, len, "%s", slash == out ? "/" : ".");
			return;
		}
		*slash = '\0';
	}
}

/* Absolute, lexically normalised form of @p (no symlink resolution). */
static void absolute_path(const char *p, char *out, size_t len)
{
	char cwd[PATH_MAX];
	char tmp[2 * PATH_MAX];
	char *parts[PATH_MAX / 2];
	int n = 0;
	size_t off = 0;

	if (p[0] == '/')
		snprintf(tmp, sizeof(tmp), "%s", p);
	else
		snprintf(tmp, sizeof(tmp), "%s/%s", getcwd(cwd, sizeof(cwd)) ? cwd : ".", p);
	for (char *save = NULL, *t = strtok_r(tmp, "/", &save); t; t = strtok_r(NULL, "/", &save)) {
		if (strcmp(t, ".") == 0)
			continue;
		if (strcmp(t, "..") == 0) {
			if (n)
				n--;
			continue;
		}
		parts[n++] = t;
	}
	out[0] = '\0';
	for (int i = 0; i < n && off < len; i++)
		off += (size_t)snprintf(out + off, len - off, "/%s", parts[i]);
	if (n == 0)
		snprintf(out, len, "/");
}

struct fs_use {
	dev_t dev;
	uint64_t avail;     /* free space plus what our files already hold */
	uint64_t used;      /* capacity given to paths so far */
	size_t first;       /* the first path on it */
};

/* Where one entry of nvme.paths stands while it is resolved. */
struct path_place {
	char key[64];             /* "nvme.paths[1]", for messages */
	char dir[PATH_MAX];       /* the directory of the backing file */
	char probe_dir[PATH_MAX]; /* its nearest existing ancestor */
	struct ts_fsinfo fi;    /* the file system under probe_dir */
	uint64_t existing;        /* bytes the backing file already holds */
	bool dir_exists;
};

/* Each setting from the path, else from the nvme section, else the default. */
static void nvme_path_settings(const struct raw *r, const struct raw_path *rp,
			       struct tiers_path_cfg *p)
{
	p->line = rp->at.line;
	p->col = rp->at.col;
	p->block_size = (uint32_t)(rp->bs_at.line ? rp->block_size
				   : r->bs_at.line ? r->block_size : 4096);
	p->queue_depth = (uint32_t)(rp->qd_at.line ? rp->queue_depth
				    : r->qd_at.line ? r->queue_depth : 64);
	p->direct = rp->direct_at.line ? rp->direct : r->direct_at.line ? r->direct : true;
	p->create = rp->create;
}

/*
 * Names p->file by its directory's real path, so that two spellings of one
 * place (symlinks, "..") compare equal.  0, or -ENOMEM after reporting.
 */
static int nvme_path_canonical(struct walker *w, const struct raw_path *rp,
			       struct tiers_path_cfg *p, const struct path_place *pl)
{
	char real[PATH_MAX];
	const char *base = strrchr(p->file, '/') + 1;
	char *canon;

	if (realpath(pl->dir, real)) {
		canon = ts_asprintf("%s%s%s", real, strcmp(real, "/") ? "/" : "", base);
		if (!canon) {
			mf_diag(w, rp->path_at, "%s.path: out of memory", pl->key);
			return -ENOMEM;
		}
		free(p->file);
		p->file = canon;
	}
	return 0;
}

/*
 * The backing file at p->file, as an open would see it: refused if it is
 * not a regular file of ours (a symlink, device, FIFO, another program's
 * file), else what it already holds on disk.  0, or -1 after reporting.
 */
static int nvme_path_file(struct walker *w, const struct raw_path *rp,
			  const struct tiers_path_cfg *p, struct path_place *pl)
{
	struct tier_nvme_file_info fi;
	char why[TIER_ERR_MAX];

	if (tier_nvme_file_probe(p->file, &fi) != 0) {
		snprintf(why, sizeof(why), "%s", tier_last_error());
		mf_diag(w, rp->path_at, "%s.path: %s", pl->key, why);
		return -1;
	}
	pl->existing = fi.disk_bytes;
	return 0;
}

/*
 * Reports that the path as written, at @abs, is a symbolic link: where it
 * points, and whether to name a directory (written "dir/", or the link
 * leads to one) or a file instead.
 */
static void path_is_link(struct walker *w, const struct raw_path *rp,
			 const struct path_place *pl, const char *abs, bool dir_form)
{
	char to[PATH_MAX];
	struct stat st;
	ssize_t n = readlink(abs, to, sizeof(to) - 1);

	if (n < 0)
		n = (ssize_t)snprintf(to, sizeof(to), "?");
	to[n] = '\0';
	mf_diag(w, rp->path_at, "%s.path: path '%s' is a symbolic link (to '%s'); name the real %s",
		pl->key, rp->path, to,
		dir_form || (stat(abs, &st) == 0 && S_ISDIR(st.st_mode)) ? "directory" : "file");
}

/*
 * What the path names: a directory (existing, or ending in '/'), else a
 * file whose parent directory must exist.  Sets p->file, pl->dir,
 * pl->existing and pl->dir_exists; 0, or -errno after reporting.
 */
static int nvme_path_locate(struct walker *w, const struct tier_manifest *c,
			    const struct raw_path *rp, struct tiers_path_cfg *p,
			    struct path_place *pl)
{
	char abs[PATH_MAX];
	struct stat st;
	bool is_dir_path;

	absolute_path(rp->path, abs, sizeof(abs));
	is_dir_path = rp->path[strlen(rp->path) - 1] == '/';
	if (w->flags & TIER_MANIFEST_NO_PROBE) {
		/* Schema only: the trailing '/' alone says "directory". */
	} else if (lstat(abs, &st) == 0) {
		/* What the path names, the backing file or its directory
		 * ("dir/"), is used by its own name, never through a link:
		 * the store creates and writes there (tiers/nvme_file.c opens
		 * the directory with O_NOFOLLOW). */
		if (S_ISLNK(st.st_mode)) {
			path_is_link(w, rp, pl, abs, is_dir_path);
			return -ELOOP;
		} else if (S_ISDIR(st.st_mode)) {
			is_dir_path = true;
		} else if (!S_ISREG(st.st_mode)) {
			struct tier_nvme_file_info fi;
			char why[TIER_ERR_MAX];

			/* Its kind, in the words an open would use. */
			tier_nvme_file_probe(abs, &fi);
			snprintf(why, sizeof(why), "%s", tier_last_error());
			mf_diag(w, rp->path_at, "%s.path: %s", pl->key, why);
			return -EINVAL;
		} else if (is_dir_path) {
			mf_diag(w, rp->path_at, "%s.path: '%s' ends in '/' but is a file, not a directory",
				pl->key, rp->path);
			return -EINVAL;
		}
	} else if (is_dir_path || errno != ENOENT) {
		if (errno != ENOENT) {
			mf_diag(w, rp->path_at, "%s.path: '%s': %s", pl->key, rp->path,
				tier_strerror(errno));
			return -EINVAL;
		}
	}
	if (is_dir_path) {
		snprintf(pl->dir, sizeof(pl->dir), "%s", abs);
		p->file = ts_asprintf("%s%stierstore-%s.dat", abs,
					strcmp(abs, "/") ? "/" : "", c->tiers.name);
	} else {
		char *slash;

		snprintf(pl->dir, sizeof(pl->dir), "%s", abs);
		slash = strrchr(pl->dir, '/');
		if (slash == pl->dir)
			pl->dir[1] = '\0';
		else if (slash)
			*slash = '\0';
		p->file = ts_strdup(abs);
	}
	if (!p->file) {
		mf_diag(w, rp->path_at, "%s.path: out of memory", pl->key);
		return -ENOMEM;
	}
	if (w->flags & TIER_MANIFEST_NO_PROBE)
		pl->dir_exists = true;
	else
		pl->dir_exists = stat(pl->dir, &st) == 0 && S_ISDIR(st.st_mode);
	if (pl->dir_exists && !(w->flags & TIER_MANIFEST_NO_PROBE)) {
		if (nvme_path_canonical(w, rp, p, pl))
			return -ENOMEM;
		if (nvme_path_file(w, rp, p, pl))
			return -EINVAL;
	}
	if (!pl->dir_exists && !p->create) {
		mf_diag(w, rp->path_at, "%s.path: directory '%s' does not exist (create it, or add create: true)",
			pl->key, pl->dir);
		return -ENOENT;
	}
	return 0;
}

/*
 * The file system the path lands on (pl->probe_dir, pl->fi): its logical
 * block size against block_size, and whether it takes O_DIRECT where
 * direct: true.  0, or -errno when it cannot be examined (reported).
 */
static int nvme_path_probe(struct walker *w, const struct raw *r, const struct raw_path *rp,
			   const struct tiers_path_cfg *p, struct path_place *pl)
{
	int rc;

	mf_existing_ancestor(pl->dir, pl->probe_dir, sizeof(pl->probe_dir));
	rc = sys_fsinfo(pl->probe_dir, &pl->fi);
	if (rc) {
		mf_diag(w, rp->path_at, "%s.path: %s", pl->key, tier_last_error());
		return rc;
	}
	if (p->direct && pl->fi.lbs > p->block_size)
		mf_diag(w, rp->bs_at.line ? rp->bs_at : r->bs_at.line ? r->bs_at : rp->at,
			"%s.block_size: %u is smaller than the logical block size %u of the device under '%s' (O_DIRECT needs at least that)",
			pl->key, p->block_size, pl->fi.lbs, pl->dir);
	if (p->direct && !(p->create && !pl->dir_exists)) {
		int prc = sys_direct_probe(pl->dir);

		if (prc == -EINVAL)
			mf_diag(w, rp->path_at,
				"%s.path: the file system of '%s' refuses O_DIRECT while direct: true (set direct: false for this path, or put it on a local disk)",
				pl->key, pl->dir);
		else if (prc)
			mf_diag(w, rp->path_at, "%s.path: %s", pl->key, tier_last_error());
	} else if (p->direct) {
		int prc = sys_direct_probe(pl->probe_dir);

		if (prc == -EINVAL)
			mf_diag(w, rp->path_at,
				"%s.path: the file system of '%s' refuses O_DIRECT while direct: true (set direct: false for this path, or put it on a local disk)",
				pl->key, pl->probe_dir);
		else if (prc)
			mf_diag(w, rp->path_at, "%s.path: cannot create '%s' here: %s", pl->key,
				pl->dir, tier_last_error());
	}
	return 0;
}

/*
 * p->capacity from the share of pl->fi's free space (plus what the backing
 * file already holds), checked against what earlier paths on the same file
 * system took: @fs, *@nfs of them, path @i entering its own.
 */
static void nvme_path_capacity(struct walker *w, const struct raw_path *rp,
			       struct tiers_path_cfg *p, const struct path_place *pl,
			       uint64_t data_off, size_t i, struct fs_use *fs, size_t *nfs)
{
	struct fs_use *u = NULL;
	uint64_t whole, need;
	char a[32], b[32], d[32], e[32];

	for (size_t j = 0; j < *nfs; j++)
		if (fs[j].dev == pl->fi.dev)
			u = &fs[j];
	if (!u) {
		u = &fs[(*nfs)++];
		u->dev = pl->fi.dev;
		u->avail = pl->fi.avail;
		u->used = 0;
		u->first = i;
	}
	u->avail = add_sat(u->avail, pl->existing);
	/* The file holds its header, data_off bytes, before the capacity. */
	whole = add_sat(pl->fi.avail, pl->existing);
	whole = whole > data_off ? whole - data_off : 0;
	p->capacity = resolve_size(&rp->capacity, whole);
	p->capacity -= p->capacity % p->block_size;
	if (p->capacity == 0) {
		mf_diag(w, rp->capacity.at, "%s.capacity: rounds down to zero (a multiple of the block size %u)",
			pl->key, p->block_size);
		return;
	}
	/* Every size is below 2^64, not their sum: a capacity of 2^64 - 1
	 * bytes plus the header wrapped round to less than a MiB. */
	if (__builtin_add_overflow(u->used, data_off, &need) ||
	    __builtin_add_overflow(need, p->capacity, &need)) {
		mf_diag(w, rp->capacity.at,
			"%s.capacity: %llu B (%s) is larger than the free space of the file system of '%s' (%s available): with the file's %s header%s%s%s it passes 2^64 bytes",
			pl->key, (unsigned long long)written_bytes(rp, p),
			ts_size_fmt(written_bytes(rp, p), a, sizeof(a)), pl->dir,
			ts_size_fmt(u->avail, b, sizeof(b)), ts_size_fmt(data_off, e, sizeof(e)),
			u->used ? " and the " : "", u->used ? ts_size_fmt(u->used, d, sizeof(d)) : "",
			u->used ? " already given to paths on it," : "");
		p->capacity = 0;
		return;
	}
	if (need > u->avail) {
		if (u->used)
			mf_diag(w, rp->capacity.at,
				"%s.capacity: %s and the file's %s header are more than the free space of the file system of '%s' (%s available, %s already given to paths on it)",
				pl->key, ts_size_fmt(p->capacity, a, sizeof(a)),
				ts_size_fmt(data_off, e, sizeof(e)), pl->dir,
				ts_size_fmt(u->avail, b, sizeof(b)),
				ts_size_fmt(u->used, d, sizeof(d)));
		else
			mf_diag(w, rp->capacity.at,
				"%s.capacity: %s and the file's %s header are more than the free space of the file system of '%s' (%s available)",
				pl->key, ts_size_fmt(p->capacity, a, sizeof(a)),
				ts_size_fmt(data_off, e, sizeof(e)), pl->dir,
				ts_size_fmt(u->avail, b, sizeof(b)));
	}
	u->used = need;
}

/*
 * Where each backing file's data area starts, as tiers/nvme.c places it
 * (docs/nvme-format.md): after the TIER_NVME_HEADER_SIZE header, at the
 * allocation alignment, the stripe unit capped at 1 MiB and at least the
 * largest block size of the paths.
 */
static uint64_t nvme_data_offset(const struct raw *r, uint64_t stripe_unit)
{
	uint64_t block = 4096, align;

	for (size_t i = 0; i < r->npaths; i++) {
		const struct raw_path *rp = &r->paths[i];
		uint64_t bs = rp->bs_at.line ? rp->block_size : r->bs_at.line ? r->block_size : 4096;

		if (bs > block)
			block = bs;
	}
	align = stripe_unit < (1u << 20) ? stripe_unit : (1u << 20);
	if (align < block)
		align = block;
	return (TIER_NVME_HEADER_SIZE + align - 1) / align * align;
}

/*
 * Adds path @p, its capacity and its header, to *@total, the NVMe tier's
 * bytes over every path: what the tier and tier_manifest_info() add up.
 * Each file system's free space bounds its own paths, but schema-only
 * (TIER_MANIFEST_NO_PROBE) nothing does, and the sum must not pass 2^64.
 */
static void nvme_tier_total(struct walker *w, const struct raw_path *rp,
			    const struct tiers_path_cfg *p, const struct path_place *pl,
			    uint64_t data_off, uint64_t *total)
{
	uint64_t sum;
	char a[32], b[32], e[32];

	if (!__builtin_add_overflow(*total, data_off, &sum) &&
	    !__builtin_add_overflow(sum, p->capacity, &sum)) {
		*total = sum;
		return;
	}
	mf_diag(w, rp->capacity.at,
		"%s.capacity: %llu B (%s) is larger than an NVMe tier can be: with the file's %s header and the %s of the paths before it, the tier passes 2^64 bytes",
		pl->key, (unsigned long long)written_bytes(rp, p),
		ts_size_fmt(written_bytes(rp, p), a, sizeof(a)), ts_size_fmt(data_off, e, sizeof(e)),
		ts_size_fmt(*total, b, sizeof(b)));
}

void mf_resolve_nvme(struct walker *w, struct tier_manifest *c)
{
	struct raw *r = w->raw;
	struct fs_use fs[TIERS_MAX_NVME_PATHS];
	uint64_t data_off, total = 0;
	size_t nfs = 0;
	int before;

	c->tiers.stripe_unit = r->stripe_unit ? r->stripe_unit : (1u << 20);
	c->tiers.sqpoll = r->sqpoll;
	c->tiers.checksum = r->checksum;
	c->tiers.keep_commits = (uint32_t)r->keep_commits;
	c->tiers.npaths = r->npaths;
	if (!r->npaths)
		return;
	c->tiers.paths = ts_calloc(r->npaths, sizeof(*c->tiers.paths));
	if (!c->tiers.paths) {
		mf_diag(w, r->paths_at, "nvme.paths: out of memory");
		c->tiers.npaths = 0;
		return;
	}
	data_off = nvme_data_offset(r, c->tiers.stripe_unit);
	for (size_t i = 0; i < r->npaths; i++) {
		struct raw_path *rp = &r->paths[i];
		struct tiers_path_cfg *p = &c->tiers.paths[i];
		struct path_place pl = { .existing = 0 };

		snprintf(pl.key, sizeof(pl.key), "nvme.paths[%zu]", i);
		nvme_path_settings(r, rp, p);
		if (!rp->path)
			continue; /* reported in pass 2 */
		p->path = ts_strdup(rp->path);
		if (!p->path) {
			mf_diag(w, rp->path_at, "%s.path: out of memory", pl.key);
			continue;
		}
		if (c->tiers.stripe_unit % p->block_size)
			mf_diag(w, r->stripe_at.line ? r->stripe_at : rp->at,
				"nvme.stripe_unit: %llu is not a multiple of %s.block_size %u",
				(unsigned long long)c->tiers.stripe_unit, pl.key, p->block_size);
		if (nvme_path_locate(w, c, rp, p, &pl))
			continue;

		/* Duplicates: two entries naming one backing file. */
		for (size_t j = 0; j < i; j++) {
			if (c->tiers.paths[j].file && strcmp(c->tiers.paths[j].file, p->file) == 0) {
				mf_diag(w, rp->path_at, "%s.path: duplicate path: '%s' is the same file as nvme.paths[%zu] (line %d)",
					pl.key, p->file, j, c->tiers.paths[j].line);
				break;
			}
		}
		if (!rp->capacity.at.line)
			continue; /* missing or invalid: reported in pass 2 */
		before = w->ndiags;
		if (w->flags & TIER_MANIFEST_NO_PROBE) {
			p->capacity = resolve_size(&rp->capacity, 1ull << 40);
			p->capacity -= p->capacity % p->block_size;
			if (p->capacity == 0)
				mf_diag(w, rp->capacity.at, "%s.capacity: rounds down to zero (a multiple of the block size %u)",
					pl.key, p->block_size);
		} else {
			if (nvme_path_probe(w, r, rp, p, &pl))
				continue;
			nvme_path_capacity(w, rp, p, &pl, data_off, i, fs, &nfs);
		}
		if (w->ndiags == before)
			nvme_tier_total(w, rp, p, &pl, data_off, &total);
	}
}

void mf_resolve_rest(struct walker *w, struct tier_manifest *c)
{
	struct raw *r = w->raw;
	char a[32], b[32];

	/* For the effective configuration's comments: what was divided. */
	c->hbm_div = r->hbm.at.line && r->hbm.div;
	c->dram_div = r->dram.at.line && r->dram.div;
	c->lookahead_div = r->lookahead.at.line && r->lookahead.div;
	for (size_t i = 0; i < r->npaths; i++)
		if (r->paths[i].capacity.at.line && r->paths[i].capacity.div)
			c->path_div |= 1ull << i;
	c->write_behind = r->wb_at.line ? (uint32_t)r->write_behind : 4;
	c->offload_auto = !r->offload_at.line || r->offload < 0;
	c->offload_fraction = c->offload_auto ? 0.0 : r->offload;
	c->master_dtype = TIER_FP32;
	c->moment_dtype = r->moment;
	c->rounding = r->rounding;
	c->out_rounding = r->out_rounding;
	c->seed = (uint64_t)r->seed;
	/* What the user did not write is sized from what they did, so that
	 * an error only ever names a value they wrote. */
	c->shard_derived = !r->shard.at.line;
	c->shard_size = r->shard.at.line ? r->shard.v.bytes : la_shard_default(c->tiers.dram_capacity);
	if (r->lookahead.at.line) {
		c->lookahead = resolve_size(&r->lookahead, c->tiers.dram_capacity);
		while (c->shard_derived && c->shard_size > LA_SHARD_MIN && c->shard_size > c->lookahead)
			c->shard_size /= 2;
	} else {
		c->lookahead = la_default(c->tiers.dram_capacity);
		if (c->lookahead < c->shard_size && c->shard_size <= c->tiers.dram_capacity / 2)
			c->lookahead = c->shard_size;
	}
	if (c->shard_derived && c->tiers.dram_capacity && c->shard_size > c->tiers.dram_capacity / 4) {
		mf_diag(w, r->dram.at.line ? r->dram.at : r->dram_at,
			"dram.capacity: %s is too small for the optimizer: it needs four shards of at least %s",
			ts_size_fmt(c->tiers.dram_capacity, a, sizeof(a)),
			ts_size_fmt(LA_SHARD_MIN, b, sizeof(b)));
		return;
	}
	/* A derived window is at least a shard unless the shard itself is
	 * wrong, which the check below names. */
	if (r->lookahead.at.line && c->lookahead < c->shard_size)
		mf_diag(w, r->lookahead.at,
			"prefetch.lookahead: %s is less than one shard (optimizer.shard_size %s); the prefetcher could not keep a shard in flight",
			ts_size_fmt(c->lookahead, a, sizeof(a)),
			ts_size_fmt(c->shard_size, b, sizeof(b)));
	else if (c->tiers.dram_capacity && c->lookahead > c->tiers.dram_capacity / 2)
		mf_diag(w, r->lookahead.at, "prefetch.lookahead: %s is more than half the DRAM tier (%s); the update needs the rest",
			ts_size_fmt(c->lookahead, a, sizeof(a)),
			ts_size_fmt(c->tiers.dram_capacity, b, sizeof(b)));
	if (c->tiers.dram_capacity && c->shard_size > c->tiers.dram_capacity / 4)
		mf_diag(w, r->shard.at,
			"optimizer.shard_size: %s is more than a quarter of the DRAM tier (%s); prefetch needs room for several shards",
			ts_size_fmt(c->shard_size, a, sizeof(a)),
			ts_size_fmt(c->tiers.dram_capacity, b, sizeof(b)));
}
