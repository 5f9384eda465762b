/*
 * manifest.c - the YAML tier manifest: parsing (libyaml's document loader),
 * schema checks, resolution of every default against this machine, and
 * emission of the effective configuration as YAML.
 *
 * Three passes over one loaded document:
 *  1. graph check: the document's node graph (aliases share nodes) is
 *     walked once with memoised expanded sizes; a cycle, nesting past
 *     MAX_DEPTH or an expansion past TIER_YAML_NODE_LIMIT nodes is refused
 *     before anything follows an alias.  Then every scalar, key or value,
 *     is checked for a NUL byte (a "\0" escape), which is refused.
 *  2. schema: table-driven walk of the known keys into `struct raw`, which
 *     keeps each value with its position; unknown keys (with a suggestion),
 *     wrong types, bad units and duplicate keys are reported here.
 *  3. resolution: against machine facts (memory, GPUs, file systems,
 *     O_DIRECT), into `struct tier_manifest`.
 * Every problem is reported as "FILE:LINE:COL: key: message" (1-based, the
 * place of the offending value, or of the key for unknown keys); all of
 * them are collected (up to MAX_DIAGS) so one run shows every mistake.
 *
 * This file holds the API (parse, load, resolve, free), the diagnostics
 * and the embedded default; the limits on the document, its loading and
 * pass 1 are manifest_graph.c, pass 2 manifest_schema.c, pass 3
 * manifest_resolve.c and emission manifest_emit.c, sharing
 * manifest_impl.h.
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <yaml.h>

#include "common/error.h"
#include "common/fault.h"
#include "common/json.h"
#include "common/log.h"
#include "common/options.h"
#include "common/sysinfo.h"
#include "common/units.h"
#include "runtime/manifest/manifest.h"
#include "runtime/manifest/manifest_impl.h"

#define MAX_DIAGS 20
#define MAX_MANIFEST_BYTES (1u << 20)

/* ---------------------------------------------------------------- diags */

struct pos mf_pos_of(const yaml_node_t *n)
{
	return (struct pos){ (int)n->start_mark.line + 1, (int)n->start_mark.column + 1 };
}

/*
 * One code point of @s (a well-formed UTF-8 sequence, or one byte) into
 * @out (at least 5 bytes): printable text as is, control characters and
 * bytes that are not UTF-8 as \n, \t or \xNN.  Returns the bytes of @s used.
 */
static size_t escape_one(const unsigned char *s, char *out, size_t *outlen)
{
	uint32_t cp;
	size_t n = mf_utf8_next(s, &cp);

	if (n == 0 || cp < 0x20 || cp == 0x7f || (cp >= 0x80 && cp < 0xa0)) {
		if (n == 0)
			n = 1;
		if (n == 1 && *s == '\n')
			*outlen = (size_t)snprintf(out, 5, "\\n");
		else if (n == 1 && *s == '\t')
			*outlen = (size_t)snprintf(out, 5, "\\t");
		else if (n == 1)
			*outlen = (size_t)snprintf(out, 5, "\\x%02x", *s);
		else /* C1 controls, two bytes in UTF-8 */
			*outlen = (size_t)snprintf(out, 5, "\\x%02x", (unsigned)cp);
		return n;
	}
	memcpy(out, s, n);
	*outlen = n;
	return n;
}

/*
 * The message @msg into @dst (@len bytes), rewritten so that it holds no
 * control character and no byte that is not UTF-8 (escaped), and so that
 * no quoted value ('...') shows more than MF_EXCERPT code points of
 * itself: the rest is cut and marked with "…".
 */
void mf_sanitize(const char *msg, char *dst, size_t len)
{
	char out[1200], one[8];
	size_t o = 0, i = 0, n, ol;
	bool quoted = false;
	unsigned shown = 0;

	while (msg[i] && o + 16 < sizeof(out)) {
		/* An apostrophe inside a word ("manifest's") opens nothing. */
		if (msg[i] == '\'' && (quoted || i == 0 || strchr(" ([=\"", msg[i - 1]))) {
			quoted = !quoted;
			shown = 0;
			out[o++] = msg[i++];
			continue;
		}
		n = escape_one((const unsigned char *)msg + i, one, &ol);
		i += n;
		if (quoted && shown == MF_EXCERPT) {
			memcpy(out + o, "\xe2\x80\xa6", 3); /* … */
			o += 3;
			shown++;
		}
		if (quoted && shown > MF_EXCERPT)
			continue;
		memcpy(out + o, one, ol);
		o += ol;
		shown++;
	}
	out[o] = '\0';
	snprintf(dst, len, "%s", out);
}

__attribute__((format(printf, 3, 4)))
void mf_diag(struct walker *w, struct pos at, const char *fmt, ...)
{
	char msg[1024];
	va_list ap;
	int n;

	w->ndiags++;
	if (w->ndiags > MAX_DIAGS + 1)
		return;
	if (w->ndiags == MAX_DIAGS + 1) {
		snprintf(msg, sizeof(msg), "too many errors; stopping");
		at.line = 0;
	} else {
		char *full = NULL;

		/* Whole first (a value may be long), then escaped and cut. */
		va_start(ap, fmt);
		n = vasprintf(&full, fmt, ap);
		va_end(ap);
		if (n < 0) {
			va_start(ap, fmt);
			vsnprintf(msg, sizeof(msg), fmt, ap);
			va_end(ap);
			full = NULL;
		}
		mf_sanitize(full ? full : msg, msg, sizeof(msg));
		free(full);
	}
	/*
	 * The report is kept here, not in the thread's detail message, which
	 * the probes called during resolution overwrite with their own.
	 */
	if (w->diags_len + 2 >= TIER_ERR_MAX)
		return;
	if (at.line > 0)
		n = snprintf(w->diags + w->diags_len, TIER_ERR_MAX - w->diags_len, "%s%s:%d:%d: %s",
			     w->diags_len ? "\n" : "", w->file, at.line, at.col, msg);
	else
		n = snprintf(w->diags + w->diags_len, TIER_ERR_MAX - w->diags_len, "%s%s: %s",
			     w->diags_len ? "\n" : "", w->file, msg);
	if (n > 0)
		w->diags_len += (size_t)n;
	if (w->diags_len >= TIER_ERR_MAX)
		w->diags_len = TIER_ERR_MAX - 1;
}

bool mf_report_full(const struct walker *w)
{
	return w->ndiags > MAX_DIAGS;
}

/* common/json.c's decoder, on a NUL-terminated string. */
size_t mf_utf8_next(const unsigned char *p, uint32_t *cp)
{
	return json_utf8_next(p, SIZE_MAX, cp);
}

/* "dram.capacity" for messages: the current key path plus @key. */
const char *mf_keypath(struct walker *w, const char *key, char *buf, size_t len)
{
	if (w->keypath[0])
		snprintf(buf, len, "%s.%s", w->keypath, key);
	else
		snprintf(buf, len, "%s", key);
	return buf;
}

const char *mf_node_kind(const yaml_node_t *n)
{
	switch (n->type) {
	case YAML_SCALAR_NODE:
		return "a scalar";
	case YAML_SEQUENCE_NODE:
		return "a list";
	case YAML_MAPPING_NODE:
		return "a mapping";
	default:
		return "nothing";
	}
}

/* ------------------------------------------------------------ the API */

void manifest_clear(struct tier_manifest *c)
{
	for (size_t i = 0; c->tiers.paths && i < c->tiers.npaths; i++) {
		free(c->tiers.paths[i].path);
		free(c->tiers.paths[i].file);
	}
	free(c->tiers.paths);
	c->tiers.paths = NULL;
	c->tiers.npaths = 0;
}

static void raw_clear(struct raw *r)
{
	for (size_t i = 0; i < TIERS_MAX_NVME_PATHS; i++)
		free(r->paths[i].path);
}

/* Defaults for what the document leaves out. */
static void raw_defaults(struct raw *raw)
{
	raw->version = 1;
	snprintf(raw->name, sizeof(raw->name), "tierstore");
	raw->device = -2;
	raw->numa = -2;
	raw->huge = TIER_HUGE_AUTO;
	raw->direct = true;
	raw->checksum = TIER_CSUM_CRC32C;
	raw->keep_commits = 2;
	raw->offload = -1.0;
	raw->moment = TIER_FP32;
	raw->rounding = TIER_ROUND_STOCHASTIC;
	raw->out_rounding = TIER_ROUND_NEAREST;
}

/* Pass 3: w->raw against this machine into @c; 0 or -errno. */
static int resolve_all(struct walker *w, struct tier_manifest *c)
{
	struct facts facts;
	int rc = mf_gather_facts(w, &facts);

	if (rc) {
		ts_err_prefix("%s", w->file);
		return rc;
	}
	snprintf(c->tiers.source, sizeof(c->tiers.source), "%s", w->file);
	snprintf(c->tiers.name, sizeof(c->tiers.name), "%s", w->raw->name);
	c->version = (int)w->raw->version;
	mf_resolve_gpu(w, &facts, c);
	mf_resolve_dram(w, &facts, c);
	mf_resolve_nvme(w, c);
	mf_resolve_rest(w, c);
	if (w->ndiags)
		return -EINVAL;
	TIER_INFO(TIER_SS_MANIFEST, "%s: %zu NVMe path(s), DRAM %llu bytes, GPU %d",
		  w->file, c->tiers.npaths, (unsigned long long)c->tiers.dram_capacity, c->tiers.gpu);
	return 0;
}

/*
 * The rank into w->rank: @rank, else the environment's.  A disagreement
 * is a problem of the manifest's load, reported without a place (it is
 * not in the file).
 */
static int take_rank(struct walker *w, const struct tier_rank *rank)
{
	int rc = rank ? mf_rank_check(rank) : tier_rank_from_env(&w->rank);

	if (rc == 0) {
		if (rank)
			w->rank = *rank;
		return 0;
	}
	mf_diag(w, (struct pos){ 0, 0 }, "%s", tier_last_error());
	return rc;
}

int tier_manifest_parse(const char *text, size_t len, const char *name, unsigned flags,
			struct tier_manifest **out)
{
	TS_NONNULL(text);
	TS_NONNULL(out);
	return tier_manifest_parse_rank(text, len, name, flags, NULL, out);
}

int tier_manifest_parse_rank(const char *text, size_t len, const char *name, unsigned flags,
			     const struct tier_rank *rank, struct tier_manifest **out)
{
	TS_NONNULL(text);
	TS_NONNULL(out);
	struct tier_manifest *m = NULL;
	struct raw *raw = NULL;
	yaml_parser_t parser;
	yaml_document_t doc;
	bool parser_ok = false, doc_ok = false;
	struct walker w = { .file = name ? name : "<manifest>", .flags = flags };
	yaml_node_t *root;
	int rc = 0;

	*out = NULL;
	ts_err_clear();
	if (len > MAX_MANIFEST_BYTES)
		return ts_err(-EFBIG, "%s: the manifest is %zu bytes, more than the limit of %u bytes (1 MiB)",
			      w.file, len, MAX_MANIFEST_BYTES);
	m = ts_calloc(1, sizeof(*m));
	raw = ts_calloc(1, sizeof(*raw));
	w.diags = ts_calloc(1, TIER_ERR_MAX);
	if (!m || !raw || !w.diags) {
		rc = ts_err(-ENOMEM, "%s: out of memory", w.file);
		goto out;
	}
	rc = ts_fault_check(TIER_FAULT_YAML_PARSE);
	if (rc || !yaml_parser_initialize(&parser)) {
		rc = ts_err(rc ? rc : -ENOMEM, "%s: cannot set up the YAML parser", w.file);
		goto out;
	}
	parser_ok = true;
	rc = mf_load_document(&w, &parser, text, len, &doc);
	if (rc)
		goto out;
	doc_ok = true;
	root = yaml_document_get_root_node(&doc);

	w.doc = &doc;
	w.raw = raw;
	rc = mf_graph_check(&w);
	if (rc)
		goto out;
	rc = mf_nul_check(&w);
	if (rc)
		goto out;
	rc = take_rank(&w, rank);
	if (rc)
		goto out;
	m->rank = w.rank;

	raw_defaults(raw);
	mf_walk_schema(&w, root);

	rc = resolve_all(&w, m);
	if (rc)
		goto out;
	*out = m;
	m = NULL;
	rc = 0;
out:
	if (rc == -EINVAL && w.diags && w.diags_len)
		ts_err(rc, "%s", w.diags);
	free(w.diags);
	if (doc_ok)
		yaml_document_delete(&doc);
	if (parser_ok)
		yaml_parser_delete(&parser);
	if (raw) {
		raw_clear(raw);
		free(raw);
	}
	if (m) {
		manifest_clear(m);
		free(m);
	}
	return rc;
}

static const char *file_kind(mode_t mode)
{
	switch (mode & S_IFMT) {
	case S_IFDIR:
		return "a directory";
	case S_IFIFO:
		return "a FIFO (named pipe)";
	case S_IFCHR:
		return "a character device";
	case S_IFBLK:
		return "a block device";
	case S_IFSOCK:
		return "a socket";
	default:
		return "not a regular file";
	}
}

/*
 * Opens @path for reading without blocking (a FIFO would wait for a
 * writer) and refuses anything but a regular file, or one larger than
 * MAX_MANIFEST_BYTES; the descriptor, or -errno with the error set.
 */
static int open_manifest(const char *path)
{
	struct stat st;
	int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);

	if (fd < 0)
		return ts_err(-errno, "%s: %s", path, tier_strerror(errno));
	if (fstat(fd, &st) != 0) {
		int rc = ts_err(-errno, "%s: %s", path, tier_strerror(errno));

		close(fd);
		return rc;
	}
	if (!S_ISREG(st.st_mode)) {
		close(fd);
		return ts_err(S_ISDIR(st.st_mode) ? -EISDIR : -EINVAL,
			      "%s: is %s; a manifest must be a regular file", path,
			      file_kind(st.st_mode));
	}
	if (st.st_size > (off_t)MAX_MANIFEST_BYTES) {
		close(fd);
		return ts_err(-EFBIG, "%s: the manifest is %lld bytes, more than the limit of %u bytes (1 MiB)",
			      path, (long long)st.st_size, MAX_MANIFEST_BYTES);
	}
	return fd;
}

/* Up to MAX_MANIFEST_BYTES + 1 bytes of @fd into *@buf (*@len of them). */
static int read_manifest(int fd, const char *path, char **buf, size_t *len)
{
	size_t cap = MAX_MANIFEST_BYTES + 1;
	int rc;

	*len = 0;
	*buf = ts_malloc(cap);
	if (!*buf)
		return ts_err(-ENOMEM, "%s: out of memory", path);
	while (*len < cap) {
		ssize_t n;

		rc = ts_fault_check(TIER_FAULT_MANIFEST_READ);
		if (rc)
			return ts_err(rc, "%s: read: %s", path, tier_strerror(rc));
		n = read(fd, *buf + *len, cap - *len);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return ts_err(-errno, "%s: read: %s", path, tier_strerror(errno));
		if (n == 0)
			break;
		*len += (size_t)n;
	}
	return 0;
}

int tier_manifest_load_rank(const char *path, unsigned flags, const struct tier_rank *rank,
			    struct tier_manifest **out)
{
	TS_NONNULL(path);
	TS_NONNULL(out);
	char *buf = NULL;
	size_t len = 0;
	int fd, rc;

	*out = NULL;
	ts_err_clear();
	rc = ts_fault_check(TIER_FAULT_MANIFEST_OPEN);
	if (rc)
		return ts_err(rc, "%s: %s", path, tier_strerror(rc));
	fd = open_manifest(path);
	if (fd < 0)
		return fd;
	rc = read_manifest(fd, path, &buf, &len);
	if (rc == 0)
		rc = tier_manifest_parse_rank(buf, len, path, flags, rank, out);
	free(buf);
	close(fd);
	return rc;
}

int tier_manifest_load(const char *path, struct tier_manifest **out)
{
	TS_NONNULL(path);
	TS_NONNULL(out);
	return tier_manifest_load_rank(path, 0, NULL, out);
}

void tier_manifest_free(struct tier_manifest *m)
{
	if (!m)
		return;
	manifest_clear(m);
	free(m);
}

const char *tier_manifest_source(const struct tier_manifest *m)
{
	TS_NONNULL_OR(m, NULL);
	return m->tiers.source;
}

int tier_manifest_info(const struct tier_manifest *m, struct tier_manifest_info *out)
{
	TS_NONNULL(m);
	TS_NONNULL(out);
	const struct tiers_cfg *t;

	t = &m->tiers;
	memset(out, 0, sizeof(*out));
	out->source = t->source;
	out->name = t->name;
	out->gpu = t->gpu;
	out->hbm_capacity = t->gpu >= 0 ? t->hbm_capacity : 0;
	out->dram_capacity = t->dram_capacity;
	out->numa_node = t->numa_node;
	out->npaths = (uint32_t)t->npaths;
	/* Resolution refused a sum past 2^64; saturated all the same. */
	for (size_t i = 0; i < t->npaths; i++)
		if (__builtin_add_overflow(out->nvme_capacity, t->paths[i].capacity,
					   &out->nvme_capacity))
			out->nvme_capacity = UINT64_MAX;
	out->stripe_unit = t->stripe_unit;
	out->checksum = t->checksum == TIER_CSUM_CRC32C;
	out->keep_commits = t->keep_commits;
	out->lookahead = m->lookahead;
	out->write_behind = m->write_behind;
	out->offload_fraction = m->offload_auto ? TIER_OFFLOAD_AUTO : m->offload_fraction;
	out->moment_dtype = m->moment_dtype;
	out->rounding = m->rounding;
	out->out_rounding = m->out_rounding;
	out->seed = m->seed;
	out->shard_size = m->shard_size;
	out->rank = m->rank;
	return 0;
}

int tier_manifest_path(const struct tier_manifest *m, unsigned i, struct tier_manifest_path *out)
{
	TS_NONNULL(m);
	TS_NONNULL(out);
	const struct tiers_path_cfg *p;

	if (i >= m->tiers.npaths)
		return ts_err(-ERANGE, "%s: no NVMe path %u (the manifest has %zu)", m->tiers.source, i,
			      m->tiers.npaths);
	p = &m->tiers.paths[i];
	memset(out, 0, sizeof(*out));
	out->path = p->path;
	out->file = p->file;
	out->capacity = p->capacity;
	out->block_size = p->block_size;
	out->queue_depth = p->queue_depth;
	out->direct = p->direct;
	return 0;
}

/* --------------------------------------------------------- the default */

/* The embedded default with its NVMe file under @data ("" for ./tier-data). */
static int default_text(const char *data, char **out)
{
	struct ts_meminfo mem;
	struct ts_fsinfo fi;
	char dir[PATH_MAX], probe[PATH_MAX], quoted[2 * PATH_MAX + 8];
	uint64_t dram, nvme, cap;
	bool direct;
	char a[32];
	int rc;
	size_t q = 0;

	*out = NULL;
	rc = sys_meminfo(&mem);
	if (rc)
		return rc;
	dram = (uint64_t)((double)mem.available * ts_opt_percent(TIER_OPT_DRAM_SHARE) / 100.0);
	dram &= ~(uint64_t)((2u << 20) - 1);

	snprintf(dir, sizeof(dir), "%s%s", data[0] ? data : "./tier-data",
		 data[0] && data[strlen(data) - 1] == '/' ? "" : "/");
	mf_existing_ancestor(dir, probe, sizeof(probe));
	rc = sys_fsinfo(probe, &fi);
	if (rc)
		return rc;
	nvme = (uint64_t)((double)fi.avail * ts_opt_percent(TIER_OPT_NVME_SHARE) / 100.0);
	cap = ts_opt_size(TIER_OPT_NVME_MAX);
	if (nvme > cap)
		nvme = cap;
	nvme &= ~(uint64_t)((1u << 20) - 1);
	if (nvme < (64u << 20))
		return ts_err(-ENOSPC, "embedded default: only %s free under '%s'; set TIER_DATA to a directory with room, or write a manifest",
				ts_size_fmt(fi.avail, a, sizeof(a)), probe);
	/* A data directory on tmpfs (say) gets buffered I/O, not an error. */
	direct = sys_direct_probe(probe) != -EINVAL;
	ts_err_clear();

	quoted[q++] = '"';
	for (const char *p = dir; *p && q < sizeof(quoted) - 6; p++) {
		if (*p == '"' || *p == '\\')
			quoted[q++] = '\\';
		quoted[q++] = *p;
	}
	quoted[q++] = '"';
	quoted[q] = '\0';

	*out = ts_asprintf(
		"# tierstore embedded default manifest (see docs/manifest.md)\n"
		"version: 1\n"
		"name: tierstore\n"
		"gpu:\n"
		"  device: auto\n"
		"dram:\n"
		"  capacity: %llu   # %g%% of MemAvailable (TIER_DRAM_SHARE)\n"
		"  numa_node: auto\n"
		"  huge_pages: auto\n"
		"nvme:\n"
		"  paths:\n"
		"    - path: %s   # $TIER_DATA or ./tier-data/\n"
		"      capacity: %llu   # %g%% of the free space, at most %llu bytes\n"
		"      direct: %s\n"
		"      create: true\n",
		(unsigned long long)dram, ts_opt_percent(TIER_OPT_DRAM_SHARE), quoted,
		(unsigned long long)nvme, ts_opt_percent(TIER_OPT_NVME_SHARE),
		(unsigned long long)cap, direct ? "true" : "false");
	if (!*out)
		return ts_err(-ENOMEM, "embedded default: out of memory");
	return 0;
}

int tier_manifest_default_text(char **out)
{
	TS_NONNULL(out);
	return default_text(ts_opt_str(TIER_OPT_DATA), out);
}

int tier_manifest_resolve(const char *path, struct tier_manifest **out)
{
	TS_NONNULL(out);
	if (!path || !*path)
		path = ts_opt_str(TIER_OPT_MANIFEST);
	return *path ? tier_manifest_load(path, out) : tier_manifest_default(out);
}

static int default_parse(const char *data, struct tier_manifest **out)
{
	char *text;
	int rc;

	*out = NULL;
	rc = default_text(data, &text);
	if (rc)
		return rc;
	rc = tier_manifest_parse(text, strlen(text), "<default>", 0, out);
	free(text);
	return rc;
}

int tier_manifest_default(struct tier_manifest **out)
{
	TS_NONNULL(out);
	return default_parse(ts_opt_str(TIER_OPT_DATA), out);
}

int tier_manifest_default_in(const char *dir, struct tier_manifest **out)
{
	TS_NONNULL(out);
	*out = NULL;
	if (!dir || !*dir)
		return ts_err(-EINVAL, "tier_manifest_default_in: dir is %s; name the directory of the NVMe file",
			      dir ? "empty" : "NULL");
	if (strlen(dir) >= PATH_MAX - 1)
		return ts_err(-ENAMETOOLONG, "tier_manifest_default_in: dir '%.64s...' is longer than %d bytes",
			      dir, PATH_MAX - 2);
	return default_parse(dir, out);
}
