/*
 * manifest.c - the YAML tier manifest: parsing (libyaml's document loader),
 * schema checks, resolution of every default against this machine, and
 * emission of the effective configuration as YAML.
 *
 * Three passes over one loaded document:
 *  1. graph check: the document's node graph (aliases share nodes) is
 *     walked once with memoised expanded sizes; a cycle, nesting past
 *     MAX_DEPTH or an expansion past TIER_YAML_NODE_LIMIT nodes is refused
 *     before anything follows an alias.
 *  2. schema: table-driven walk of the known keys into `struct raw`, which
 *     keeps each value with its position; unknown keys (with a suggestion),
 *     wrong types, bad units and duplicate keys are reported here.
 *  3. resolution: against machine facts (memory, GPUs, file systems,
 *     O_DIRECT), into `struct tier_config`.
 * Every problem is reported as "FILE:LINE:COL: key: message" (1-based, the
 * place of the offending value, or of the key for unknown keys); all of
 * them are collected (up to MAX_DIAGS) so one run shows every mistake.
 */
#include "config.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>
#include <yaml.h>

#include "common/error.h"
#include "common/fault.h"
#include "common/log.h"
#include "common/options.h"
#include "common/sysinfo.h"
#include "common/units.h"
#include "runtime/manifest.h"
#include "tiers/gpu.h"

#define MAX_DIAGS 20
#define MAX_DEPTH 32
#define MAX_MANIFEST_BYTES (1u << 20)

/* A value as written, with its position, before resolution. */
struct pos {
	int line, col; /* 1-based; 0 = not set */
};

struct raw_size {
	struct pos at;
	struct tier_size v;
};

struct raw_path {
	struct pos at;        /* the list item */
	struct pos path_at;
	char *path;           /* expanded */
	struct raw_size capacity;
	struct pos bs_at, qd_at, direct_at, create_at;
	uint64_t block_size;
	long long queue_depth;
	bool direct, create;
};

struct raw {
	struct pos version_at, name_at;
	long long version;
	char name[TIER_NAME_MAX + 1];

	struct pos gpu_at, device_at;
	int device;           /* -2 auto, -1 none, >= 0 index */
	struct raw_size hbm;

	struct pos dram_at;
	struct raw_size dram;
	struct pos numa_at;
	int numa;             /* -2 auto, -1 none, >= 0 node */
	struct pos huge_at;
	enum tier_huge_pages huge;

	struct pos nvme_at, stripe_at, bs_at, qd_at, direct_at, sqpoll_at, csum_at, paths_at;
	uint64_t stripe_unit, block_size;
	long long queue_depth;
	bool direct, sqpoll;
	enum tier_checksum checksum;
	size_t npaths;
	struct raw_path paths[TIER_MAX_NVME_PATHS];

	struct raw_size lookahead;
	struct pos wb_at;
	long long write_behind;

	struct pos offload_at, master_at, moment_at;
	double offload;       /* < 0: auto */
	enum tier_dtype master, moment;
	struct raw_size shard;
};

struct walker {
	const char *file;
	yaml_document_t *doc;
	unsigned flags;
	int ndiags;
	struct raw *raw;
	char keypath[256];    /* "nvme.paths[1]" while inside it */
	char *diags;          /* the report, one problem a line (TIER_ERR_MAX) */
	size_t diags_len;
	size_t path_index;    /* the raw_path being filled */
};

/* ---------------------------------------------------------------- diags */

static struct pos pos_of(const yaml_node_t *n)
{
	return (struct pos){ (int)n->start_mark.line + 1, (int)n->start_mark.column + 1 };
}

__attribute__((format(printf, 3, 4)))
static void diag(struct walker *w, struct pos at, const char *fmt, ...)
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
		va_start(ap, fmt);
		vsnprintf(msg, sizeof(msg), fmt, ap);
		va_end(ap);
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

/* "dram.capacity" for messages: the current key path plus @key. */
static const char *kp(struct walker *w, const char *key, char *buf, size_t len)
{
	if (w->keypath[0])
		snprintf(buf, len, "%s.%s", w->keypath, key);
	else
		snprintf(buf, len, "%s", key);
	return buf;
}

static const char *node_kind(const yaml_node_t *n)
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

/* ----------------------------------------------------- pass 1: the graph */

enum { G_NEW = 0, G_OPEN, G_DONE };

struct graph {
	struct walker *w;
	unsigned char *state;
	uint64_t *size;
	uint64_t limit;
	bool failed;
};

/* Expanded node count below node @id (saturating at limit + 1). */
static uint64_t graph_size(struct graph *g, int id, int depth)
{
	yaml_node_t *n = yaml_document_get_node(g->w->doc, id);
	uint64_t total = 1;

	if (!n || g->failed)
		return 0;
	if (g->state[id] == G_DONE)
		return g->size[id];
	if (g->state[id] == G_OPEN) {
		diag(g->w, pos_of(n), "YAML alias refers to a node that contains it (a cycle); refused");
		g->failed = true;
		return 0;
	}
	if (depth > MAX_DEPTH) {
		diag(g->w, pos_of(n), "YAML nesting deeper than %d levels; refused", MAX_DEPTH);
		g->failed = true;
		return 0;
	}
	g->state[id] = G_OPEN;
	if (n->type == YAML_SEQUENCE_NODE) {
		for (yaml_node_item_t *it = n->data.sequence.items.start;
		     it < n->data.sequence.items.top && !g->failed; it++)
			total += graph_size(g, *it, depth + 1);
	} else if (n->type == YAML_MAPPING_NODE) {
		for (yaml_node_pair_t *p = n->data.mapping.pairs.start;
		     p < n->data.mapping.pairs.top && !g->failed; p++) {
			total += graph_size(g, p->key, depth + 1);
			total += graph_size(g, p->value, depth + 1);
		}
	}
	if (total > g->limit && !g->failed) {
		diag(g->w, pos_of(n),
		     "YAML aliases expand this node to more than %llu nodes (TIER_YAML_NODE_LIMIT); refused",
		     (unsigned long long)g->limit);
		g->failed = true;
	}
	g->state[id] = G_DONE;
	g->size[id] = total;
	return total;
}

static int graph_check(struct walker *w)
{
	int n = (int)(w->doc->nodes.top - w->doc->nodes.start);
	struct graph g = { .w = w, .limit = (uint64_t)ts_opt_int(TIER_OPT_YAML_NODE_LIMIT) };

	g.state = ts_calloc((size_t)n + 1, 1);
	g.size = ts_calloc((size_t)n + 1, sizeof(uint64_t));
	if (!g.state || !g.size) {
		free(g.state);
		free(g.size);
		return ts_err(-ENOMEM, "%s: out of memory checking %d YAML nodes", w->file, n);
	}
	graph_size(&g, 1, 0);
	free(g.state);
	free(g.size);
	return g.failed ? -EINVAL : 0;
}

/* ---------------------------------------------------- pass 2: the schema */

static const char *scalar(const yaml_node_t *n)
{
	return (const char *)n->data.scalar.value;
}

static bool plain(const yaml_node_t *n)
{
	return n->data.scalar.style == YAML_PLAIN_SCALAR_STYLE;
}

/* The value must be a scalar; reports and returns NULL otherwise. */
static const char *want_scalar(struct walker *w, const char *key, yaml_node_t *v,
			       const char *what)
{
	char k[300];

	if (v->type != YAML_SCALAR_NODE) {
		diag(w, pos_of(v), "%s: expected %s, got %s", kp(w, key, k, sizeof(k)),
		     what, node_kind(v));
		return NULL;
	}
	if (plain(v) && (strcmp(scalar(v), "") == 0 || strcmp(scalar(v), "~") == 0 ||
			 strcasecmp(scalar(v), "null") == 0)) {
		diag(w, pos_of(v), "%s: expected %s, got nothing (null)",
		     kp(w, key, k, sizeof(k)), what);
		return NULL;
	}
	return scalar(v);
}

static int get_bool(struct walker *w, const char *key, yaml_node_t *v, bool *out, struct pos *at)
{
	static const char *const yes[] = { "true", "yes", "on" };
	static const char *const no[] = { "false", "no", "off" };
	const char *s = want_scalar(w, key, v, "a boolean (true or false)");
	char k[300];

	if (!s)
		return -EINVAL;
	for (int i = 0; i < 3 && plain(v); i++) {
		if (strcasecmp(s, yes[i]) == 0) {
			*out = true;
			*at = pos_of(v);
			return 0;
		}
		if (strcasecmp(s, no[i]) == 0) {
			*out = false;
			*at = pos_of(v);
			return 0;
		}
	}
	diag(w, pos_of(v), "%s: expected a boolean (true or false), got %s'%s'",
	     kp(w, key, k, sizeof(k)), plain(v) ? "" : "the string ", s);
	return -EINVAL;
}

static int get_int(struct walker *w, const char *key, yaml_node_t *v, long long min,
		   long long max, long long *out, struct pos *at)
{
	const char *s = want_scalar(w, key, v, "an integer");
	char k[300];
	int rc;

	if (!s)
		return -EINVAL;
	rc = plain(v) ? ts_int_parse(s, min, max, out) : -EINVAL;
	if (rc == -ERANGE) {
		diag(w, pos_of(v), "%s: %s is out of range [%lld, %lld]",
		     kp(w, key, k, sizeof(k)), s, min, max);
		return rc;
	}
	if (rc) {
		diag(w, pos_of(v), "%s: expected an integer, got %s'%s'",
		     kp(w, key, k, sizeof(k)), plain(v) ? "" : "the string ", s);
		return rc;
	}
	*at = pos_of(v);
	return 0;
}

static int get_size(struct walker *w, const char *key, yaml_node_t *v, bool allow_percent,
		    struct raw_size *out)
{
	const char *s = want_scalar(w, key, v, "a size such as 64GiB");
	char why[256], k[300];

	if (!s)
		return -EINVAL;
	if (ts_size_parse(s, allow_percent, &out->v, why, sizeof(why))) {
		diag(w, pos_of(v), "%s: %s", kp(w, key, k, sizeof(k)), why);
		return -EINVAL;
	}
	out->at = pos_of(v);
	return 0;
}

/* One of '|'-separated @choices; the index in *out. */
static int get_enum(struct walker *w, const char *key, yaml_node_t *v, const char *choices,
		    int *out, struct pos *at)
{
	const char *s = want_scalar(w, key, v, "a word");
	const char *p = choices;
	char k[300];

	if (!s)
		return -EINVAL;
	for (int i = 0; *p; i++) {
		size_t n = strcspn(p, "|");

		if (strlen(s) == n && strncasecmp(p, s, n) == 0) {
			*out = i;
			*at = pos_of(v);
			return 0;
		}
		p += n;
		if (*p == '|')
			p++;
	}
	diag(w, pos_of(v), "%s: '%s' is not one of %s", kp(w, key, k, sizeof(k)), s, choices);
	return -EINVAL;
}

/*
 * Expands ${VAR} and ${VAR:-default} in @s ($$ is a literal $).  Returns a
 * malloc'd string, or NULL after reporting.
 */
static char *expand_env(struct walker *w, const char *key, yaml_node_t *v, const char *s)
{
	size_t cap = strlen(s) + 1, len = 0;
	char *out = ts_malloc(cap);
	char k[300];

	if (!out) {
		diag(w, pos_of(v), "%s: out of memory", kp(w, key, k, sizeof(k)));
		return NULL;
	}
	for (const char *p = s; *p;) {
		const char *add = p;
		size_t addlen = 1;
		char name[256];

		if (p[0] == '$' && p[1] == '$') {
			p += 2;
		} else if (p[0] == '$' && p[1] == '{') {
			const char *end = strchr(p + 2, '}');
			const char *dflt = NULL;
			size_t nlen;

			if (!end) {
				diag(w, pos_of(v), "%s: unterminated '${' in '%s'",
				     kp(w, key, k, sizeof(k)), s);
				free(out);
				return NULL;
			}
			nlen = (size_t)(end - (p + 2));
			const char *colon = memchr(p + 2, ':', nlen);
			if (colon && colon[1] == '-') {
				dflt = colon + 2;
				nlen = (size_t)(colon - (p + 2));
			}
			if (nlen == 0 || nlen >= sizeof(name)) {
				diag(w, pos_of(v), "%s: bad variable name in '%s'",
				     kp(w, key, k, sizeof(k)), s);
				free(out);
				return NULL;
			}
			memcpy(name, p + 2, nlen);
			name[nlen] = '\0';
			add = getenv(name);
			if (add && *add) {
				addlen = strlen(add);
			} else if (dflt) {
				add = dflt;
				addlen = (size_t)(end - dflt);
			} else {
				diag(w, pos_of(v),
				     "%s: environment variable '%s' is not set or empty (write ${%s:-default} for a fallback)",
				     kp(w, key, k, sizeof(k)), name, name);
				free(out);
				return NULL;
			}
			p = end + 1;
		} else {
			p++;
		}
		if (len + addlen + 1 > cap) {
			char *n2;

			cap = (len + addlen + 1) * 2;
			n2 = ts_realloc(out, cap);
			if (!n2) {
				free(out);
				diag(w, pos_of(v), "%s: out of memory", kp(w, key, k, sizeof(k)));
				return NULL;
			}
			out = n2;
		}
		memcpy(out + len, add, addlen);
		len += addlen;
	}
	out[len] = '\0';
	return out;
}

/* Whether mapping @map has the key @name (whatever its value). */
static bool has_key(struct walker *w, yaml_node_t *map, const char *name)
{
	if (map->type != YAML_MAPPING_NODE)
		return false;
	for (yaml_node_pair_t *p = map->data.mapping.pairs.start;
	     p < map->data.mapping.pairs.top; p++) {
		yaml_node_t *k = yaml_document_get_node(w->doc, p->key);

		if (k->type == YAML_SCALAR_NODE && strcmp(scalar(k), name) == 0)
			return true;
	}
	return false;
}

/* A plain empty or null scalar: "gpu:" with nothing after it. */
static bool is_null(const yaml_node_t *v)
{
	return v->type == YAML_SCALAR_NODE && plain(v) &&
	       (scalar(v)[0] == '\0' || strcmp(scalar(v), "~") == 0 ||
		strcasecmp(scalar(v), "null") == 0);
}

typedef void (*key_fn)(struct walker *w, const char *key, yaml_node_t *v);

struct key_spec {
	const char *name;
	key_fn fn;
};

static void walk_mapping(struct walker *w, const char *section, yaml_node_t *node,
			 const struct key_spec *specs, size_t nspecs);

/* Runs @fn with keypath extended by @key. */
static void with_section(struct walker *w, const char *key, yaml_node_t *v,
			 const struct key_spec *specs, size_t nspecs)
{
	char saved[sizeof(w->keypath)];

	memcpy(saved, w->keypath, sizeof(saved));
	if (w->keypath[0])
		snprintf(w->keypath + strlen(w->keypath),
			 sizeof(w->keypath) - strlen(w->keypath), ".%s", key);
	else
		snprintf(w->keypath, sizeof(w->keypath), "%s", key);
	walk_mapping(w, w->keypath, v, specs, nspecs);
	memcpy(w->keypath, saved, sizeof(saved));
}

#define NSPECS(a) (sizeof(a) / sizeof((a)[0]))

/* top level */
static void k_version(struct walker *w, const char *key, yaml_node_t *v)
{
	long long n;
	struct pos at;
	char k[300];

	if (get_int(w, key, v, 0, INT_MAX, &n, &at))
		return;
	if (n != 1) {
		diag(w, at, "%s: unsupported manifest version %lld (this library reads version 1)",
		     kp(w, key, k, sizeof(k)), n);
		return;
	}
	w->raw->version = n;
	w->raw->version_at = at;
}

static void k_name(struct walker *w, const char *key, yaml_node_t *v)
{
	const char *s = want_scalar(w, key, v, "a name");
	char k[300];
	char *e;
	size_t len;

	if (!s || !(e = expand_env(w, key, v, s)))
		return;
	len = strlen(e);
	if (len == 0 || len > TIER_NAME_MAX || strspn(e, "abcdefghijklmnopqrstuvwxyz"
				"ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-") != len || e[0] == '.') {
		diag(w, pos_of(v), "%s: '%s' is not a valid store name (1 to %d of A-Z a-z 0-9 . _ -, not starting with '.')",
		     kp(w, key, k, sizeof(k)), e, TIER_NAME_MAX);
		free(e);
		return;
	}
	strcpy(w->raw->name, e);
	w->raw->name_at = pos_of(v);
	free(e);
}

/*
 * "auto" (-2), "none" (-1) or an index in [0, 1023], for gpu.device and
 * dram.numa_node.  @what names the index in the message.
 */
static void get_auto_index(struct walker *w, const char *key, yaml_node_t *v,
			   const char *what, int *out, struct pos *at)
{
	char expect[96], k[300];
	const char *s;
	long long n;

	snprintf(expect, sizeof(expect), "auto, none or a %s (0-1023)", what);
	s = want_scalar(w, key, v, expect);
	if (!s)
		return;
	if (strcasecmp(s, "auto") == 0) {
		*out = -2;
	} else if (strcasecmp(s, "none") == 0) {
		*out = -1;
	} else if (ts_int_parse(s, 0, 1023, &n) == 0) {
		*out = (int)n;
	} else {
		diag(w, pos_of(v), "%s: expected %s, got '%s'", kp(w, key, k, sizeof(k)), expect, s);
		return;
	}
	*at = pos_of(v);
}

/* gpu: */
static void k_gpu_device(struct walker *w, const char *key, yaml_node_t *v)
{
	get_auto_index(w, key, v, "device index", &w->raw->device, &w->raw->device_at);
}

static void k_gpu_capacity(struct walker *w, const char *key, yaml_node_t *v)
{
	get_size(w, key, v, true, &w->raw->hbm);
}

static const struct key_spec gpu_keys[] = {
	{ "device", k_gpu_device },
	{ "capacity", k_gpu_capacity },
};

static void k_gpu(struct walker *w, const char *key, yaml_node_t *v)
{
	w->raw->gpu_at = pos_of(v);
	with_section(w, key, v, gpu_keys, NSPECS(gpu_keys));
}

/* dram: */
static void k_dram_capacity(struct walker *w, const char *key, yaml_node_t *v)
{
	get_size(w, key, v, true, &w->raw->dram);
}

static void k_dram_numa(struct walker *w, const char *key, yaml_node_t *v)
{
	get_auto_index(w, key, v, "NUMA node number", &w->raw->numa, &w->raw->numa_at);
}

static void k_dram_huge(struct walker *w, const char *key, yaml_node_t *v)
{
	bool b;
	int i;

	/* YAML 1.1 readers take on/off as booleans: accept both spellings. */
	if (v->type == YAML_SCALAR_NODE && plain(v) &&
	    (strcasecmp(scalar(v), "true") == 0 || strcasecmp(scalar(v), "false") == 0)) {
		get_bool(w, key, v, &b, &w->raw->huge_at);
		w->raw->huge = b ? TIER_HUGE_ON : TIER_HUGE_OFF;
		return;
	}
	if (get_enum(w, key, v, "auto|on|off", &i, &w->raw->huge_at) == 0)
		w->raw->huge = (enum tier_huge_pages)i;
}

static const struct key_spec dram_keys[] = {
	{ "capacity", k_dram_capacity },
	{ "numa_node", k_dram_numa },
	{ "huge_pages", k_dram_huge },
};

static void k_dram(struct walker *w, const char *key, yaml_node_t *v)
{
	w->raw->dram_at = pos_of(v);
	with_section(w, key, v, dram_keys, NSPECS(dram_keys));
}

/* nvme: shared by the section (defaults) and each path (overrides) */
static void get_block_size(struct walker *w, const char *key, yaml_node_t *v,
			   uint64_t *out, struct pos *at)
{
	struct raw_size s = { 0 };
	char k[300];

	if (get_size(w, key, v, false, &s))
		return;
	if (s.v.bytes < 512 || s.v.bytes > (1u << 20) || (s.v.bytes & (s.v.bytes - 1))) {
		diag(w, s.at, "%s: %llu is not a power of two between 512 B and 1 MiB",
		     kp(w, key, k, sizeof(k)), (unsigned long long)s.v.bytes);
		return;
	}
	*out = s.v.bytes;
	*at = s.at;
}

static void k_nvme_stripe(struct walker *w, const char *key, yaml_node_t *v)
{
	struct raw_size s = { 0 };
	char k[300];

	if (get_size(w, key, v, false, &s))
		return;
	if (s.v.bytes < 4096 || s.v.bytes > (1ull << 30)) {
		diag(w, s.at, "%s: %llu is outside [4 KiB, 1 GiB]", kp(w, key, k, sizeof(k)),
		     (unsigned long long)s.v.bytes);
		return;
	}
	w->raw->stripe_unit = s.v.bytes;
	w->raw->stripe_at = s.at;
}

static void k_nvme_bs(struct walker *w, const char *key, yaml_node_t *v)
{
	get_block_size(w, key, v, &w->raw->block_size, &w->raw->bs_at);
}

static void k_nvme_qd(struct walker *w, const char *key, yaml_node_t *v)
{
	get_int(w, key, v, 1, 4096, &w->raw->queue_depth, &w->raw->qd_at);
}

static void k_nvme_direct(struct walker *w, const char *key, yaml_node_t *v)
{
	get_bool(w, key, v, &w->raw->direct, &w->raw->direct_at);
}

static void k_nvme_sqpoll(struct walker *w, const char *key, yaml_node_t *v)
{
	get_bool(w, key, v, &w->raw->sqpoll, &w->raw->sqpoll_at);
}

static void k_nvme_csum(struct walker *w, const char *key, yaml_node_t *v)
{
	int i;

	if (get_enum(w, key, v, "none|crc32c", &i, &w->raw->csum_at) == 0)
		w->raw->checksum = (enum tier_checksum)i;
}

static void k_path_path(struct walker *w, const char *key, yaml_node_t *v)
{
	struct raw_path *p = &w->raw->paths[w->path_index];
	const char *s = want_scalar(w, key, v, "a path");
	char k[300];

	if (!s)
		return;
	free(p->path);
	p->path = expand_env(w, key, v, s);
	if (!p->path)
		return;
	if (p->path[0] == '\0' || strlen(p->path) >= PATH_MAX - 64) {
		diag(w, pos_of(v), "%s: %s", kp(w, key, k, sizeof(k)),
		     p->path[0] ? "path too long" : "empty path");
		free(p->path);
		p->path = NULL;
		return;
	}
	p->path_at = pos_of(v);
}

static void k_path_capacity(struct walker *w, const char *key, yaml_node_t *v)
{
	get_size(w, key, v, true, &w->raw->paths[w->path_index].capacity);
}

static void k_path_bs(struct walker *w, const char *key, yaml_node_t *v)
{
	struct raw_path *p = &w->raw->paths[w->path_index];

	get_block_size(w, key, v, &p->block_size, &p->bs_at);
}

static void k_path_qd(struct walker *w, const char *key, yaml_node_t *v)
{
	struct raw_path *p = &w->raw->paths[w->path_index];

	get_int(w, key, v, 1, 4096, &p->queue_depth, &p->qd_at);
}

static void k_path_direct(struct walker *w, const char *key, yaml_node_t *v)
{
	struct raw_path *p = &w->raw->paths[w->path_index];

	get_bool(w, key, v, &p->direct, &p->direct_at);
}

static void k_path_create(struct walker *w, const char *key, yaml_node_t *v)
{
	struct raw_path *p = &w->raw->paths[w->path_index];

	get_bool(w, key, v, &p->create, &p->create_at);
}

static const struct key_spec path_keys[] = {
	{ "path", k_path_path },
	{ "capacity", k_path_capacity },
	{ "block_size", k_path_bs },
	{ "queue_depth", k_path_qd },
	{ "direct", k_path_direct },
	{ "create", k_path_create },
};

static void k_nvme_paths(struct walker *w, const char *key, yaml_node_t *v)
{
	char k[300], saved[sizeof(w->keypath)];
	size_t i = 0;

	if (v->type != YAML_SEQUENCE_NODE) {
		diag(w, pos_of(v), "%s: expected a list of paths, got %s",
		     kp(w, key, k, sizeof(k)), node_kind(v));
		return;
	}
	w->raw->paths_at = pos_of(v);
	memcpy(saved, w->keypath, sizeof(saved));
	for (yaml_node_item_t *it = v->data.sequence.items.start;
	     it < v->data.sequence.items.top; it++, i++) {
		yaml_node_t *item = yaml_document_get_node(w->doc, *it);
		struct raw_path *p;

		if (i >= TIER_MAX_NVME_PATHS) {
			diag(w, pos_of(item), "nvme.paths: more than %d paths", TIER_MAX_NVME_PATHS);
			break;
		}
		p = &w->raw->paths[i];
		p->at = pos_of(item);
		w->path_index = i;
		w->raw->npaths = i + 1;
		snprintf(w->keypath, sizeof(w->keypath), "nvme.paths[%zu]", i);
		if (item->type != YAML_MAPPING_NODE) {
			diag(w, pos_of(item), "%s: expected a mapping with 'path' and 'capacity', got %s",
			     w->keypath, node_kind(item));
			continue;
		}
		walk_mapping(w, w->keypath, item, path_keys, NSPECS(path_keys));
		if (!has_key(w, item, "path"))
			diag(w, p->at, "%s: missing key 'path'", w->keypath);
		if (!has_key(w, item, "capacity"))
			diag(w, p->at, "%s: missing key 'capacity' (a size such as 500GiB, or a share of the free space such as 80%%)",
			     w->keypath);
	}
	memcpy(w->keypath, saved, sizeof(saved));
	if (i == 0)
		diag(w, pos_of(v), "%s: the list of paths is empty", kp(w, key, k, sizeof(k)));
}

static const struct key_spec nvme_keys[] = {
	{ "stripe_unit", k_nvme_stripe },
	{ "block_size", k_nvme_bs },
	{ "queue_depth", k_nvme_qd },
	{ "direct", k_nvme_direct },
	{ "sqpoll", k_nvme_sqpoll },
	{ "checksum", k_nvme_csum },
	{ "paths", k_nvme_paths },
};

static void k_nvme(struct walker *w, const char *key, yaml_node_t *v)
{
	w->raw->nvme_at = pos_of(v);
	with_section(w, key, v, nvme_keys, NSPECS(nvme_keys));
	if ((v->type == YAML_MAPPING_NODE && !has_key(w, v, "paths")) || is_null(v))
		diag(w, pos_of(v), "nvme: missing key 'paths' (leave out the whole nvme section for a store without an NVMe tier)");
}

/* prefetch: */
static void k_pf_lookahead(struct walker *w, const char *key, yaml_node_t *v)
{
	get_size(w, key, v, true, &w->raw->lookahead);
}

static void k_pf_wb(struct walker *w, const char *key, yaml_node_t *v)
{
	get_int(w, key, v, 1, 1024, &w->raw->write_behind, &w->raw->wb_at);
}

static const struct key_spec prefetch_keys[] = {
	{ "lookahead", k_pf_lookahead },
	{ "write_behind", k_pf_wb },
};

static void k_prefetch(struct walker *w, const char *key, yaml_node_t *v)
{
	with_section(w, key, v, prefetch_keys, NSPECS(prefetch_keys));
}

/* optimizer: */
static void k_opt_offload(struct walker *w, const char *key, yaml_node_t *v)
{
	const char *s = want_scalar(w, key, v, "auto or a fraction in [0, 1]");
	char k[300], *end;
	double d;

	if (!s)
		return;
	if (strcasecmp(s, "auto") == 0) {
		w->raw->offload = -1.0;
		w->raw->offload_at = pos_of(v);
		return;
	}
	errno = 0;
	d = strtod(s, &end);
	if (end == s || *end || errno || !(d >= 0.0 && d <= 1.0)) {
		diag(w, pos_of(v), "%s: expected auto or a fraction in [0, 1], got '%s'",
		     kp(w, key, k, sizeof(k)), s);
		return;
	}
	w->raw->offload = d;
	w->raw->offload_at = pos_of(v);
}

static void k_opt_master(struct walker *w, const char *key, yaml_node_t *v)
{
	int i;
	char k[300];

	if (get_enum(w, key, v, "fp32|bf16|fp16", &i, &w->raw->master_at))
		return;
	if (i != TIER_FP32) {
		diag(w, w->raw->master_at, "%s: the master copy of the parameters is always fp32",
		     kp(w, key, k, sizeof(k)));
		return;
	}
	w->raw->master = TIER_FP32;
}

static void k_opt_moment(struct walker *w, const char *key, yaml_node_t *v)
{
	int i;

	if (get_enum(w, key, v, "fp32|bf16", &i, &w->raw->moment_at) == 0)
		w->raw->moment = (enum tier_dtype)i;
}

static void k_opt_shard(struct walker *w, const char *key, yaml_node_t *v)
{
	struct raw_size *s = &w->raw->shard;
	char k[300];

	if (get_size(w, key, v, false, s))
		return;
	if (s->v.bytes < (64u << 10) || s->v.bytes > (4ull << 30) || (s->v.bytes % 4096)) {
		diag(w, s->at, "%s: %llu must be a multiple of 4 KiB in [64 KiB, 4 GiB]",
		     kp(w, key, k, sizeof(k)), (unsigned long long)s->v.bytes);
		s->at.line = 0;
	}
}

static const struct key_spec optimizer_keys[] = {
	{ "offload_fraction", k_opt_offload },
	{ "master_dtype", k_opt_master },
	{ "moment_dtype", k_opt_moment },
	{ "shard_size", k_opt_shard },
};

static void k_optimizer(struct walker *w, const char *key, yaml_node_t *v)
{
	with_section(w, key, v, optimizer_keys, NSPECS(optimizer_keys));
}

static const struct key_spec top_keys[] = {
	{ "version", k_version },
	{ "name", k_name },
	{ "gpu", k_gpu },
	{ "dram", k_dram },
	{ "nvme", k_nvme },
	{ "prefetch", k_prefetch },
	{ "optimizer", k_optimizer },
};

static void walk_mapping(struct walker *w, const char *section, yaml_node_t *node,
			 const struct key_spec *specs, size_t nspecs)
{
	if (section[0] && is_null(node))
		return; /* "gpu:" alone: every key of the section takes its default */
	if (node->type != YAML_MAPPING_NODE) {
		diag(w, pos_of(node), "%s: expected a mapping of keys, got %s",
		     section[0] ? section : "manifest", node_kind(node));
		return;
	}
	for (yaml_node_pair_t *p = node->data.mapping.pairs.start;
	     p < node->data.mapping.pairs.top; p++) {
		yaml_node_t *k = yaml_document_get_node(w->doc, p->key);
		yaml_node_t *v = yaml_document_get_node(w->doc, p->value);
		const struct key_spec *spec = NULL;
		const char *name;
		char where[300];

		if (k->type != YAML_SCALAR_NODE) {
			diag(w, pos_of(k), "%s: a key must be a plain word, got %s",
			     section[0] ? section : "manifest", node_kind(k));
			continue;
		}
		name = scalar(k);
		/* Duplicate keys: YAML forbids them, libyaml does not check. */
		for (yaml_node_pair_t *q = node->data.mapping.pairs.start; q < p; q++) {
			yaml_node_t *qk = yaml_document_get_node(w->doc, q->key);

			if (qk->type == YAML_SCALAR_NODE && strcmp(scalar(qk), name) == 0) {
				diag(w, pos_of(k), "%s: duplicate key (first at line %d)",
				     kp(w, name, where, sizeof(where)), pos_of(qk).line);
				name = NULL;
				break;
			}
		}
		if (!name)
			continue;
		for (size_t i = 0; i < nspecs; i++)
			if (strcmp(specs[i].name, name) == 0)
				spec = &specs[i];
		if (!spec) {
			const char *best = NULL;
			unsigned bestd = UINT_MAX;

			for (size_t i = 0; i < nspecs; i++) {
				unsigned d = ts_edit_distance(name, specs[i].name);

				if (d < bestd) {
					bestd = d;
					best = specs[i].name;
				}
			}
			if (best && bestd <= (strlen(name) > 6 ? 3u : 2u))
				diag(w, pos_of(k), "unknown key '%s' in %s (did you mean '%s'?)",
				     name, section[0] ? section : "the manifest", best);
			else
				diag(w, pos_of(k), "unknown key '%s' in %s", name,
				     section[0] ? section : "the manifest");
			continue;
		}
		spec->fn(w, name, v);
	}
}

/* ------------------------------------------------ pass 3: resolution */

struct facts {
	struct tier_meminfo mem;
	int ngpu;
	char gpu_why[200];
};

static int gather_facts(struct walker *w, struct facts *f)
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

static uint64_t resolve_size(const struct raw_size *s, uint64_t whole)
{
	if (s->v.is_percent)
		return (uint64_t)((double)whole * s->v.percent / 100.0);
	return s->v.bytes;
}

static void resolve_gpu(struct walker *w, const struct facts *f, struct tier_config *c)
{
	struct raw *r = w->raw;
	struct tier_gpu_info gi;
	char a[32], b[32];

	c->gpu = -1;
	c->gpu_auto = r->device == -2;
	if (r->device == -1) {
		snprintf(c->gpu_note, sizeof(c->gpu_note), "none requested");
		if (r->hbm.at.line)
			diag(w, r->hbm.at, "gpu.capacity: given with device: none");
		return;
	}
	if (w->flags & TIER_MANIFEST_NO_PROBE) {
		if (r->device >= 0) {
			/* Not probed: take the index and a nominal 80 GiB device. */
			c->gpu = r->device;
			c->gpu_mem = 80ull << 30;
			snprintf(c->gpu_name, sizeof(c->gpu_name), "not probed");
			c->hbm_capacity = r->hbm.at.line ? resolve_size(&r->hbm, c->gpu_mem)
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
			diag(w, r->device_at, "gpu.device: GPU %d requested but there is none (%s)",
			     r->device, f->gpu_why);
		else
			diag(w, r->device_at, "gpu.device: GPU %d requested but only %d present (0-%d)",
			     r->device, f->ngpu, f->ngpu - 1);
		return;
	}
	if (gpu_info(r->device, &gi)) {
		diag(w, r->device_at.line ? r->device_at : r->gpu_at, "gpu.device: %s",
		     tier_last_error());
		return;
	}
	c->gpu = r->device;
	snprintf(c->gpu_name, sizeof(c->gpu_name), "%s", gi.name);
	snprintf(c->gpu_pci, sizeof(c->gpu_pci), "%s", gi.pci_bus_id);
	c->gpu_mem = gi.total_mem;
	c->hbm_capacity = r->hbm.at.line ? resolve_size(&r->hbm, gi.total_mem)
					 : gi.total_mem / 10 * 9;
	c->hbm_capacity &= ~((uint64_t)(2u << 20) - 1);
	if (c->hbm_capacity > gi.total_mem)
		diag(w, r->hbm.at, "gpu.capacity: %s is more than GPU %d has (%s)",
		     ts_size_fmt(c->hbm_capacity, a, sizeof(a)), c->gpu,
		     ts_size_fmt(gi.total_mem, b, sizeof(b)));
	else if (c->hbm_capacity == 0)
		diag(w, r->hbm.at, "gpu.capacity: rounds down to zero (the HBM tier is allocated in 2 MiB units)");
}

static void resolve_dram(struct walker *w, const struct facts *f, struct tier_config *c)
{
	struct raw *r = w->raw;
	char a[32], b[32];

	if (r->dram.at.line)
		c->dram_capacity = resolve_size(&r->dram, f->mem.total);
	else
		c->dram_capacity = (uint64_t)((double)f->mem.available *
					      ts_opt_percent(TIER_OPT_DRAM_SHARE) / 100.0);
	c->dram_capacity &= ~(uint64_t)4095;
	if (c->dram_capacity == 0)
		diag(w, r->dram.at, "dram.capacity: rounds down to zero (the DRAM tier is allocated in 4 KiB pages)");
	else if (c->dram_capacity > f->mem.available)
		diag(w, r->dram.at.line ? r->dram.at : r->dram_at,
		     "dram.capacity: %s is more than this machine has available (MemAvailable %s of %s)",
		     ts_size_fmt(c->dram_capacity, a, sizeof(a)),
		     ts_size_fmt(f->mem.available, b, sizeof(b)),
		     ts_size_fmt(f->mem.total, (char[32]){ 0 }, 32));

	c->numa_auto = r->numa == -2;
	c->numa_node = -1;
	if (r->numa >= 0) {
		if (!(w->flags & TIER_MANIFEST_NO_PROBE) && !sys_numa_node_valid(r->numa))
			diag(w, r->numa_at, "dram.numa_node: node %d does not exist or has no memory (nodes 0-%d)",
			     r->numa, sys_numa_max_node());
		else
			c->numa_node = r->numa;
	} else if (r->numa == -2 && c->gpu >= 0 && c->gpu_pci[0]) {
		c->numa_node = sys_pci_numa_node(c->gpu_pci);
	}
	c->huge_pages = r->huge;
	if (r->huge == TIER_HUGE_ON && !(w->flags & TIER_MANIFEST_NO_PROBE)) {
		struct tier_hugeinfo hi;

		sys_hugeinfo(&hi);
		if (!hi.thp && hi.free_pages * hi.page_size < c->dram_capacity)
			diag(w, r->huge_at,
			     "dram.huge_pages: on, but there are only %llu free huge pages of %s and transparent huge pages are off",
			     (unsigned long long)hi.free_pages,
			     ts_size_fmt(hi.page_size, a, sizeof(a)));
	}
}

/* The nearest existing ancestor directory of @dir (for probing a directory still to be created). */
static void existing_ancestor(const char *dir, char *out, size_t len)
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

static void resolve_nvme(struct walker *w, struct tier_config *c)
{
	struct raw *r = w->raw;
	struct fs_use fs[TIER_MAX_NVME_PATHS];
	size_t nfs = 0;
	char a[32], b[32], d[32];

	c->stripe_unit = r->stripe_unit ? r->stripe_unit : (1u << 20);
	c->sqpoll = r->sqpoll;
	c->checksum = r->checksum;
	c->npaths = r->npaths;
	if (!r->npaths)
		return;
	c->paths = ts_calloc(r->npaths, sizeof(*c->paths));
	if (!c->paths) {
		diag(w, r->paths_at, "nvme.paths: out of memory");
		c->npaths = 0;
		return;
	}
	for (size_t i = 0; i < r->npaths; i++) {
		struct raw_path *rp = &r->paths[i];
		struct tier_nvme_path_cfg *p = &c->paths[i];
		char key[64], abs[PATH_MAX], dir[PATH_MAX], probe_dir[PATH_MAX];
		struct tier_fsinfo fi = { 0 };
		struct stat st;
		uint64_t existing = 0;
		bool is_dir_path, dir_exists;
		struct fs_use *u = NULL;

		snprintf(key, sizeof(key), "nvme.paths[%zu]", i);
		p->line = rp->at.line;
		p->col = rp->at.col;
		p->block_size = (uint32_t)(rp->bs_at.line ? rp->block_size
					   : r->bs_at.line ? r->block_size : 4096);
		p->queue_depth = (uint32_t)(rp->qd_at.line ? rp->queue_depth
					    : r->qd_at.line ? r->queue_depth : 64);
		p->direct = rp->direct_at.line ? rp->direct : r->direct_at.line ? r->direct : true;
		p->create = rp->create;
		if (!rp->path)
			continue; /* reported in pass 2 */
		p->path = ts_strdup(rp->path);
		if (!p->path) {
			diag(w, rp->path_at, "%s.path: out of memory", key);
			continue;
		}
		if (c->stripe_unit % p->block_size)
			diag(w, r->stripe_at.line ? r->stripe_at : rp->at,
			     "nvme.stripe_unit: %llu is not a multiple of %s.block_size %u",
			     (unsigned long long)c->stripe_unit, key, p->block_size);

		/* What the path names: a directory (existing, or ending in
		 * '/'), else a file whose parent directory must exist. */
		absolute_path(rp->path, abs, sizeof(abs));
		is_dir_path = rp->path[strlen(rp->path) - 1] == '/';
		if (w->flags & TIER_MANIFEST_NO_PROBE) {
			/* Schema only: the trailing '/' alone says "directory". */
		} else if (stat(abs, &st) == 0) {
			if (S_ISDIR(st.st_mode)) {
				is_dir_path = true;
			} else if (!S_ISREG(st.st_mode)) {
				diag(w, rp->path_at, "%s.path: '%s' is not a regular file or a directory",
				     key, rp->path);
				continue;
			} else if (is_dir_path) {
				diag(w, rp->path_at, "%s.path: '%s' ends in '/' but is a file, not a directory",
				     key, rp->path);
				continue;
			} else {
				existing = (uint64_t)st.st_blocks * 512u;
			}
		} else if (is_dir_path || errno != ENOENT) {
			if (errno != ENOENT) {
				diag(w, rp->path_at, "%s.path: '%s': %s", key, rp->path,
				     tier_strerror(errno));
				continue;
			}
		}
		if (is_dir_path) {
			snprintf(dir, sizeof(dir), "%s", abs);
			p->file = ts_asprintf("%s%stierstore-%s.dat", abs,
						strcmp(abs, "/") ? "/" : "", c->name);
		} else {
			char *slash;

			snprintf(dir, sizeof(dir), "%s", abs);
			slash = strrchr(dir, '/');
			if (slash == dir)
				dir[1] = '\0';
			else if (slash)
				*slash = '\0';
			p->file = ts_strdup(abs);
		}
		if (!p->file) {
			diag(w, rp->path_at, "%s.path: out of memory", key);
			continue;
		}
		if (w->flags & TIER_MANIFEST_NO_PROBE) {
			dir_exists = true;
		} else {
			if (is_dir_path && stat(p->file, &st) == 0 && S_ISREG(st.st_mode))
				existing = (uint64_t)st.st_blocks * 512u;
			dir_exists = stat(dir, &st) == 0 && S_ISDIR(st.st_mode);
		}
		if (dir_exists && !(w->flags & TIER_MANIFEST_NO_PROBE)) {
			/* Name the file by its directory's real path, so that two
			 * spellings of one place (symlinks, "..") compare equal. */
			char real[PATH_MAX];
			const char *base = strrchr(p->file, '/') + 1;
			char *canon;

			if (realpath(dir, real)) {
				canon = ts_asprintf("%s%s%s", real, strcmp(real, "/") ? "/" : "", base);
				if (!canon) {
					diag(w, rp->path_at, "%s.path: out of memory", key);
					continue;
				}
				free(p->file);
				p->file = canon;
			}
		}
		if (!dir_exists && !p->create) {
			diag(w, rp->path_at, "%s.path: directory '%s' does not exist (create it, or add create: true)",
			     key, dir);
			continue;
		}

		/* Duplicates: two entries naming one backing file. */
		for (size_t j = 0; j < i; j++) {
			if (c->paths[j].file && strcmp(c->paths[j].file, p->file) == 0) {
				diag(w, rp->path_at, "%s.path: duplicate path: '%s' is the same file as nvme.paths[%zu] (line %d)",
				     key, p->file, j, c->paths[j].line);
				break;
			}
		}
		if (!rp->capacity.at.line)
			continue; /* missing or invalid: reported in pass 2 */
		if (w->flags & TIER_MANIFEST_NO_PROBE) {
			p->capacity = resolve_size(&rp->capacity, 1ull << 40);
			p->capacity -= p->capacity % p->block_size;
			if (p->capacity == 0)
				diag(w, rp->capacity.at, "%s.capacity: rounds down to zero (a multiple of the block size %u)",
				     key, p->block_size);
			continue;
		}

		existing_ancestor(dir, probe_dir, sizeof(probe_dir));
		if (sys_fsinfo(probe_dir, &fi)) {
			diag(w, rp->path_at, "%s.path: %s", key, tier_last_error());
			continue;
		}
		if (p->direct && fi.lbs > p->block_size)
			diag(w, rp->bs_at.line ? rp->bs_at : r->bs_at.line ? r->bs_at : rp->at,
			     "%s.block_size: %u is smaller than the logical block size %u of the device under '%s' (O_DIRECT needs at least that)",
			     key, p->block_size, fi.lbs, dir);
		if (p->direct && !(p->create && !dir_exists)) {
			int prc = sys_direct_probe(dir);

			if (prc == -EINVAL)
				diag(w, rp->path_at,
				     "%s.path: the file system of '%s' refuses O_DIRECT while direct: true (set direct: false for this path, or put it on a local disk)",
				     key, dir);
			else if (prc)
				diag(w, rp->path_at, "%s.path: %s", key, tier_last_error());
		} else if (p->direct) {
			int prc = sys_direct_probe(probe_dir);

			if (prc == -EINVAL)
				diag(w, rp->path_at,
				     "%s.path: the file system of '%s' refuses O_DIRECT while direct: true (set direct: false for this path, or put it on a local disk)",
				     key, probe_dir);
			else if (prc)
				diag(w, rp->path_at, "%s.path: cannot create '%s' here: %s", key, dir,
				     tier_last_error());
		}

		for (size_t j = 0; j < nfs; j++)
			if (fs[j].dev == fi.dev)
				u = &fs[j];
		if (!u) {
			u = &fs[nfs++];
			u->dev = fi.dev;
			u->avail = fi.avail;
			u->used = 0;
			u->first = i;
		}
		u->avail += existing;
		p->capacity = resolve_size(&rp->capacity, fi.avail + existing);
		p->capacity -= p->capacity % p->block_size;
		if (p->capacity == 0) {
			diag(w, rp->capacity.at, "%s.capacity: rounds down to zero (a multiple of the block size %u)",
			     key, p->block_size);
			continue;
		}
		if (u->used + p->capacity > u->avail) {
			if (u->used)
				diag(w, rp->capacity.at,
				     "%s.capacity: %s is more than the free space of the file system of '%s' (%s available, %s already given to paths on it)",
				     key, ts_size_fmt(p->capacity, a, sizeof(a)), dir,
				     ts_size_fmt(u->avail, b, sizeof(b)),
				     ts_size_fmt(u->used, d, sizeof(d)));
			else
				diag(w, rp->capacity.at,
				     "%s.capacity: %s is more than the free space of the file system of '%s' (%s available)",
				     key, ts_size_fmt(p->capacity, a, sizeof(a)), dir,
				     ts_size_fmt(u->avail, b, sizeof(b)));
		}
		u->used += p->capacity;
	}
}

static void resolve_rest(struct walker *w, struct tier_config *c)
{
	struct raw *r = w->raw;
	char a[32], b[32];

	c->write_behind = r->wb_at.line ? (uint32_t)r->write_behind : 4;
	c->offload_auto = !r->offload_at.line || r->offload < 0;
	c->offload_fraction = c->offload_auto ? 0.0 : r->offload;
	c->master_dtype = TIER_FP32;
	c->moment_dtype = r->moment;
	c->shard_size = r->shard.at.line ? r->shard.v.bytes : (64u << 20);
	if (r->lookahead.at.line) {
		c->lookahead = resolve_size(&r->lookahead, c->dram_capacity);
	} else {
		c->lookahead = c->dram_capacity / 4;
		if (c->lookahead > (4ull << 30))
			c->lookahead = 4ull << 30;
	}
	if (c->lookahead < c->shard_size)
		diag(w, r->lookahead.at.line ? r->lookahead.at : r->dram.at,
		     "prefetch.lookahead: %s is less than one shard (optimizer.shard_size %s); the prefetcher could not keep a shard in flight",
		     ts_size_fmt(c->lookahead, a, sizeof(a)),
		     ts_size_fmt(c->shard_size, b, sizeof(b)));
	else if (c->dram_capacity && c->lookahead > c->dram_capacity / 2)
		diag(w, r->lookahead.at, "prefetch.lookahead: %s is more than half the DRAM tier (%s); the update needs the rest",
		     ts_size_fmt(c->lookahead, a, sizeof(a)),
		     ts_size_fmt(c->dram_capacity, b, sizeof(b)));
	if (c->dram_capacity && c->shard_size > c->dram_capacity / 4)
		diag(w, r->shard.at.line ? r->shard.at : r->dram.at,
		     "optimizer.shard_size: %s is more than a quarter of the DRAM tier (%s); prefetch needs room for several shards",
		     ts_size_fmt(c->shard_size, a, sizeof(a)),
		     ts_size_fmt(c->dram_capacity, b, sizeof(b)));
}

/* ------------------------------------------------------------ the API */

void manifest_config_clear(struct tier_config *c)
{
	for (size_t i = 0; c->paths && i < c->npaths; i++) {
		free(c->paths[i].path);
		free(c->paths[i].file);
	}
	free(c->paths);
	c->paths = NULL;
	c->npaths = 0;
}

static void raw_clear(struct raw *r)
{
	for (size_t i = 0; i < TIER_MAX_NVME_PATHS; i++)
		free(r->paths[i].path);
}

static int yaml_error(struct walker *w, yaml_parser_t *p)
{
	const char *what = p->problem ? p->problem : "malformed YAML";
	yaml_mark_t m = p->problem_mark;
	struct pos at;

	if (p->error == YAML_MEMORY_ERROR)
		return ts_err(-ENOMEM, "%s: out of memory while parsing", w->file);
	at.line = (int)m.line + 1;
	at.col = (int)m.column + 1;
	if (p->context)
		diag(w, at, "YAML syntax error: %s %s (line %zu)", what, p->context,
		     p->context_mark.line + 1);
	else
		diag(w, at, "YAML syntax error: %s", what);
	return -EINVAL;
}

int tier_manifest_parse(const char *text, size_t len, const char *name, unsigned flags,
			struct tier_manifest **out)
{
	struct tier_manifest *m = NULL;
	struct raw *raw = NULL;
	yaml_parser_t parser;
	yaml_document_t doc, extra;
	bool parser_ok = false, doc_ok = false;
	struct walker w = { .file = name ? name : "<manifest>", .flags = flags };
	struct facts facts;
	yaml_node_t *root;
	int rc = 0;

	*out = NULL;
	ts_err_clear();
	if (len > MAX_MANIFEST_BYTES)
		return ts_err(-EFBIG, "%s: manifest is larger than %u bytes", w.file,
				MAX_MANIFEST_BYTES);
	m = ts_calloc(1, sizeof(*m));
	raw = ts_calloc(1, sizeof(*raw));
	w.diags = ts_calloc(1, TIER_ERR_MAX);
	if (!m || !raw || !w.diags) {
		rc = ts_err(-ENOMEM, "%s: out of memory", w.file);
		goto out;
	}
	rc = tier_fault_check(TIER_FAULT_YAML_PARSE);
	if (rc || !yaml_parser_initialize(&parser)) {
		rc = ts_err(rc ? rc : -ENOMEM, "%s: cannot set up the YAML parser", w.file);
		goto out;
	}
	parser_ok = true;
	yaml_parser_set_input_string(&parser, (const unsigned char *)text, len);
	if (!yaml_parser_load(&parser, &doc)) {
		rc = yaml_error(&w, &parser);
		goto out;
	}
	doc_ok = true;
	root = yaml_document_get_root_node(&doc);
	if (!root) {
		rc = ts_err(-EINVAL, "%s:1:1: the manifest is empty (an empty mapping '{}' takes every default)",
			      w.file);
		goto out;
	}
	/* Exactly one document. */
	if (!yaml_parser_load(&parser, &extra)) {
		rc = yaml_error(&w, &parser);
		goto out;
	}
	if (yaml_document_get_root_node(&extra)) {
		yaml_node_t *x = yaml_document_get_root_node(&extra);

		rc = ts_err(-EINVAL, "%s:%zu:%zu: a manifest holds one YAML document; a second one starts here",
			      w.file, x->start_mark.line + 1, x->start_mark.column + 1);
		yaml_document_delete(&extra);
		goto out;
	}
	yaml_document_delete(&extra);

	w.doc = &doc;
	w.raw = raw;
	rc = graph_check(&w);
	if (rc)
		goto out;

	/* Defaults for what the document leaves out. */
	raw->version = 1;
	snprintf(raw->name, sizeof(raw->name), "tierstore");
	raw->device = -2;
	raw->numa = -2;
	raw->huge = TIER_HUGE_AUTO;
	raw->direct = true;
	raw->checksum = TIER_CSUM_CRC32C;
	raw->offload = -1.0;
	raw->moment = TIER_FP32;
	walk_mapping(&w, "", root, top_keys, NSPECS(top_keys));

	rc = gather_facts(&w, &facts);
	if (rc) {
		ts_err_prefix("%s", w.file);
		goto out;
	}
	struct tier_config *c = &m->cfg;

	snprintf(c->source, sizeof(c->source), "%s", w.file);
	snprintf(c->name, sizeof(c->name), "%s", raw->name);
	c->version = (int)raw->version;
	resolve_gpu(&w, &facts, c);
	resolve_dram(&w, &facts, c);
	resolve_nvme(&w, c);
	resolve_rest(&w, c);
	if (w.ndiags) {
		rc = -EINVAL;
		goto out;
	}
	TIER_INFO(TIER_SS_MANIFEST, "%s: %zu NVMe path(s), DRAM %llu bytes, GPU %d",
		  w.file, c->npaths, (unsigned long long)c->dram_capacity, c->gpu);
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
		manifest_config_clear(&m->cfg);
		free(m);
	}
	return rc;
}

int tier_manifest_load_flags(const char *path, unsigned flags, struct tier_manifest **out)
{
	char *buf = NULL;
	size_t len = 0, cap = 0;
	int fd, rc;

	*out = NULL;
	ts_err_clear();
	rc = tier_fault_check(TIER_FAULT_MANIFEST_OPEN);
	if (rc)
		return ts_err(rc, "%s: %s", path, tier_strerror(rc));
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return ts_err(-errno, "%s: %s", path, tier_strerror(errno));
	for (;;) {
		ssize_t n;

		if (len == cap) {
			char *nb;

			if (cap > MAX_MANIFEST_BYTES) {
				rc = ts_err(-EFBIG, "%s: manifest is larger than %u bytes", path,
					      MAX_MANIFEST_BYTES);
				goto out;
			}
			cap = cap ? cap * 2 : 8192;
			nb = ts_realloc(buf, cap);
			if (!nb) {
				rc = ts_err(-ENOMEM, "%s: out of memory", path);
				goto out;
			}
			buf = nb;
		}
		rc = tier_fault_check(TIER_FAULT_MANIFEST_READ);
		if (rc) {
			ts_err(rc, "%s: read: %s", path, tier_strerror(rc));
			goto out;
		}
		n = read(fd, buf + len, cap - len);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			rc = ts_err(-errno, "%s: read: %s", path, tier_strerror(errno));
			goto out;
		}
		if (n == 0)
			break;
		len += (size_t)n;
	}
	rc = tier_manifest_parse(buf, len, path, flags, out);
out:
	free(buf);
	close(fd);
	return rc;
}

int tier_manifest_load(const char *path, struct tier_manifest **out)
{
	return tier_manifest_load_flags(path, 0, out);
}

void tier_manifest_free(struct tier_manifest *m)
{
	if (!m)
		return;
	manifest_config_clear(&m->cfg);
	free(m);
}

const char *tier_manifest_source(const struct tier_manifest *m)
{
	return m->cfg.source;
}

const struct tier_config *manifest_config(const struct tier_manifest *m)
{
	return &m->cfg;
}

/* --------------------------------------------------------- the default */

int tier_manifest_default_text(char **out)
{
	const char *data = ts_opt_str(TIER_OPT_DATA);
	struct tier_meminfo mem;
	struct tier_fsinfo fi;
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
	existing_ancestor(dir, probe, sizeof(probe));
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

int tier_manifest_resolve(const char *path, struct tier_manifest **out)
{
	if (!path || !*path)
		path = ts_opt_str(TIER_OPT_MANIFEST);
	return *path ? tier_manifest_load(path, out) : tier_manifest_default(out);
}

int tier_manifest_default(struct tier_manifest **out)
{
	char *text;
	int rc;

	*out = NULL;
	rc = tier_manifest_default_text(&text);
	if (rc)
		return rc;
	rc = tier_manifest_parse(text, strlen(text), "<default>", 0, out);
	free(text);
	return rc;
}

/* ------------------------------------------------------------- emit */

/* A double-quoted YAML string whose ${...} expansion gives back @s. */
static void emit_str(FILE *f, const char *s)
{
	fputc('"', f);
	for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
		if (*p == '$')
			fputs("$$", f);
		else if (*p == '"' || *p == '\\')
			fprintf(f, "\\%c", *p);
		else if (*p < 0x20 || *p == 0x7f)
			fprintf(f, "\\x%02x", *p);
		else
			fputc(*p, f);
	}
	fputc('"', f);
}

static const char *dtype_name(enum tier_dtype d)
{
	return d == TIER_BF16 ? "bf16" : d == TIER_FP16 ? "fp16" : "fp32";
}

int tier_manifest_emit(const struct tier_manifest *m, FILE *f)
{
	const struct tier_config *c = &m->cfg;
	static const char *const huge[] = { "auto", "on", "off" };
	char a[32];

	fprintf(f, "# effective configuration of %s (tierstore %s)\n", c->source,
		tier_version());
	fprintf(f, "version: %d\n", c->version);
	fprintf(f, "name: ");
	emit_str(f, c->name);
	fputc('\n', f);

	fprintf(f, "gpu:\n");
	if (c->gpu >= 0) {
		fprintf(f, "  device: %d   # %s%s, %s, PCI %s\n", c->gpu,
			c->gpu_auto ? "auto: " : "", c->gpu_name,
			ts_size_fmt(c->gpu_mem, a, sizeof(a)), c->gpu_pci[0] ? c->gpu_pci : "?");
		fprintf(f, "  capacity: %llu   # %s\n", (unsigned long long)c->hbm_capacity,
			ts_size_fmt(c->hbm_capacity, a, sizeof(a)));
	} else {
		fprintf(f, "  device: none   # %s\n", c->gpu_note[0] ? c->gpu_note : "no HBM tier");
	}

	fprintf(f, "dram:\n");
	fprintf(f, "  capacity: %llu   # %s\n", (unsigned long long)c->dram_capacity,
		ts_size_fmt(c->dram_capacity, a, sizeof(a)));
	if (c->numa_node >= 0)
		fprintf(f, "  numa_node: %d%s\n", c->numa_node, c->numa_auto ? "   # auto: the GPU's node" : "");
	else
		fprintf(f, "  numa_node: none   # %s\n",
			c->numa_auto ? "auto: no GPU node known; memory is not bound" : "not bound");
	fprintf(f, "  huge_pages: %s\n", huge[c->huge_pages]);

	if (c->npaths) {
		fprintf(f, "nvme:\n");
		fprintf(f, "  stripe_unit: %llu\n", (unsigned long long)c->stripe_unit);
		fprintf(f, "  sqpoll: %s\n", c->sqpoll ? "true" : "false");
		fprintf(f, "  checksum: %s\n", c->checksum == TIER_CSUM_CRC32C ? "crc32c" : "none");
		fprintf(f, "  paths:\n");
		for (size_t i = 0; i < c->npaths; i++) {
			const struct tier_nvme_path_cfg *p = &c->paths[i];

			fprintf(f, "    - path: ");
			emit_str(f, p->path);
			fprintf(f, "\n      # backing file: ");
			emit_str(f, p->file);
			fprintf(f, "\n      capacity: %llu   # %s\n", (unsigned long long)p->capacity,
				ts_size_fmt(p->capacity, a, sizeof(a)));
			fprintf(f, "      block_size: %u\n", p->block_size);
			fprintf(f, "      queue_depth: %u\n", p->queue_depth);
			fprintf(f, "      direct: %s\n", p->direct ? "true" : "false");
			fprintf(f, "      create: %s\n", p->create ? "true" : "false");
		}
	} else {
		fprintf(f, "# nvme: none (no NVMe tier; DRAM is the home of every object)\n");
	}

	fprintf(f, "prefetch:\n");
	fprintf(f, "  lookahead: %llu   # %s\n", (unsigned long long)c->lookahead,
		ts_size_fmt(c->lookahead, a, sizeof(a)));
	fprintf(f, "  write_behind: %u\n", c->write_behind);

	fprintf(f, "optimizer:\n");
	if (c->offload_auto)
		fprintf(f, "  offload_fraction: auto\n");
	else
		fprintf(f, "  offload_fraction: %.17g\n", c->offload_fraction);
	fprintf(f, "  master_dtype: %s\n", dtype_name(c->master_dtype));
	fprintf(f, "  moment_dtype: %s\n", dtype_name(c->moment_dtype));
	fprintf(f, "  shard_size: %llu   # %s\n", (unsigned long long)c->shard_size,
		ts_size_fmt(c->shard_size, a, sizeof(a)));
	if (ferror(f))
		return ts_err(-EIO, "writing the configuration failed");
	return 0;
}
