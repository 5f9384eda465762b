/*
 * manifest_schema.c - pass 2 of reading a manifest: the table-driven walk
 * of the known keys (one struct key_spec table a section) into struct raw,
 * keeping each value with its position.  It owns the typed value readers
 * (booleans, integers, sizes, words, ${VAR} expansion) and reports unknown
 * keys (with a suggestion), wrong types, bad units and duplicate keys.
 */
#include "config.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <yaml.h>

#include "common/fault.h"
#include "common/json.h"
#include "common/units.h"
#include "runtime/manifest/manifest_impl.h"

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
		mf_diag(w, mf_pos_of(v), "%s: expected %s, got %s",
			mf_keypath(w, key, k, sizeof(k)), what, mf_node_kind(v));
		return NULL;
	}
	if (plain(v) && (strcmp(scalar(v), "") == 0 || strcmp(scalar(v), "~") == 0 ||
			 strcasecmp(scalar(v), "null") == 0)) {
		mf_diag(w, mf_pos_of(v), "%s: expected %s, got nothing (null)",
			mf_keypath(w, key, k, sizeof(k)), what);
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
			*at = mf_pos_of(v);
			return 0;
		}
		if (strcasecmp(s, no[i]) == 0) {
			*out = false;
			*at = mf_pos_of(v);
			return 0;
		}
	}
	mf_diag(w, mf_pos_of(v), "%s: expected a boolean (true or false), got %s'%s'",
		mf_keypath(w, key, k, sizeof(k)), plain(v) ? "" : "the string ", s);
	return -EINVAL;
}

static int parse_size(struct walker *w, const char *key, yaml_node_t *v, const char *s,
		      bool allow_percent, struct raw_size *out);

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
		mf_diag(w, mf_pos_of(v), "%s: %s is out of range [%lld, %lld]",
			mf_keypath(w, key, k, sizeof(k)), s, min, max);
		return rc;
	}
	if (rc) {
		mf_diag(w, mf_pos_of(v), "%s: expected an integer, got %s'%s'",
			mf_keypath(w, key, k, sizeof(k)), plain(v) ? "" : "the string ", s);
		return rc;
	}
	*at = mf_pos_of(v);
	return 0;
}

/*
 * A size, or with @allow_percent a percentage too (the keys that are a
 * share of a node's budget), which may then be divided among the node's
 * ranks: "64GiB/local_world", "25%/local_world" (out->div is the local
 * world size; the key divides the resolved bytes, then rounds).
 */
static int get_size(struct walker *w, const char *key, yaml_node_t *v, bool allow_percent,
		    struct raw_size *out)
{
	const char *s = want_scalar(w, key, v, "a size such as 64GiB");
	const char *slash;
	char k[300], *head = NULL;
	int rc;

	if (!s)
		return -EINVAL;
	out->div = 0;
	slash = strrchr(s, '/');
	if (slash) {
		const char *d = slash + 1;
		size_t dlen;

		d += strspn(d, " ");
		dlen = strcspn(d, " ");
		if (d[dlen + strspn(d + dlen, " ")] != '\0' ||
		    !((dlen == 11 && strncmp(d, "local_world", 11) == 0) ||
		      (dlen == 5 && strncmp(d, "world", 5) == 0))) {
			mf_diag(w, mf_pos_of(v), "%s: '%s' is not a size: after '/' only local_world may follow (a share of this node's budget for each of its ranks)",
				mf_keypath(w, key, k, sizeof(k)), s);
			return -EINVAL;
		}
		if (dlen == 5) {
			mf_diag(w, mf_pos_of(v), "%s: '%s': a manifest's sizes are this node's (its memory, GPU and drives), shared by the ranks on it; divide by local_world, not world",
				mf_keypath(w, key, k, sizeof(k)), s);
			return -EINVAL;
		}
		if (!allow_percent) {
			mf_diag(w, mf_pos_of(v), "%s: '%s': only gpu.capacity, dram.capacity, nvme.paths[].capacity and prefetch.lookahead may be divided by local_world (this key is not a share of the node's budget)",
				mf_keypath(w, key, k, sizeof(k)), s);
			return -EINVAL;
		}
		head = ts_strndup(s, (size_t)(slash - s));
		if (!head) {
			mf_diag(w, mf_pos_of(v), "%s: out of memory", mf_keypath(w, key, k, sizeof(k)));
			return -ENOMEM;
		}
		s = head;
	}
	rc = parse_size(w, key, v, s, allow_percent, out);
	free(head);
	if (rc == 0 && slash)
		out->div = (unsigned)w->rank.local_world_size;
	return rc;
}

static int parse_size(struct walker *w, const char *key, yaml_node_t *v, const char *s,
		      bool allow_percent, struct raw_size *out)
{
	char k[300];

	if (ts_size_parse(s, allow_percent, &out->v, NULL, 0)) {
		/* Room for the whole value: the message is cut to an excerpt. */
		size_t len = strlen(s) + 256;
		char *why = ts_malloc(len);

		if (why)
			ts_size_parse(s, allow_percent, &out->v, why, len);
		mf_diag(w, mf_pos_of(v), "%s: %s", mf_keypath(w, key, k, sizeof(k)),
			why ? why : "out of memory");
		free(why);
		return -EINVAL;
	}
	out->at = mf_pos_of(v);
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
			*at = mf_pos_of(v);
			return 0;
		}
		p += n;
		if (*p == '|')
			p++;
	}
	mf_diag(w, mf_pos_of(v), "%s: '%s' is not one of %s", mf_keypath(w, key, k, sizeof(k)),
		s, choices);
	return -EINVAL;
}

/*
 * Expands ${VAR} and ${VAR:-default} in @s ($$ is a literal $).  RANK,
 * LOCAL_RANK, WORLD_SIZE and LOCAL_WORLD_SIZE are w->rank's (never unset,
 * whichever launcher set them).  A variable's value must be UTF-8.  Returns a malloc'd string, or NULL
 * after reporting.
 */
static char *expand_env(struct walker *w, const char *key, yaml_node_t *v, const char *s)
{
	size_t cap = strlen(s) + 1, len = 0;
	char *out = ts_malloc(cap);
	char k[300];

	if (!out) {
		mf_diag(w, mf_pos_of(v), "%s: out of memory", mf_keypath(w, key, k, sizeof(k)));
		return NULL;
	}
	for (const char *p = s; *p;) {
		const char *add = p;
		size_t addlen = 1;
		char name[256], num[16];
		int var;

		if (p[0] == '$' && p[1] == '$') {
			p += 2;
		} else if (p[0] == '$' && p[1] == '{') {
			const char *end = strchr(p + 2, '}');
			const char *dflt = NULL;
			size_t nlen;

			if (!end) {
				mf_diag(w, mf_pos_of(v), "%s: unterminated '${' in '%s'",
					mf_keypath(w, key, k, sizeof(k)), s);
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
				mf_diag(w, mf_pos_of(v), "%s: bad variable name in '%s'",
					mf_keypath(w, key, k, sizeof(k)), s);
				free(out);
				return NULL;
			}
			memcpy(name, p + 2, nlen);
			name[nlen] = '\0';
			var = mf_rank_var(name);
			if (var >= 0) {
				/* The rank, whichever launcher (or the API) gave it. */
				snprintf(num, sizeof(num), "%d", mf_rank_value(&w->rank, var));
				add = num;
			} else {
				add = getenv(name);
			}
			/* libyaml checks the document; the environment nobody checks */
			if (add && *add && !json_utf8_valid(add)) {
				mf_diag(w, mf_pos_of(v),
					"%s: environment variable '%s' is not UTF-8 text (a manifest's values are)",
					mf_keypath(w, key, k, sizeof(k)), name);
				free(out);
				return NULL;
			}
			if (add && *add) {
				addlen = strlen(add);
			} else if (dflt) {
				add = dflt;
				addlen = (size_t)(end - dflt);
			} else {
				mf_diag(w, mf_pos_of(v),
					"%s: environment variable '%s' is not set or empty (write ${%s:-default} for a fallback)",
					mf_keypath(w, key, k, sizeof(k)), name, name);
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
				mf_diag(w, mf_pos_of(v), "%s: out of memory",
					mf_keypath(w, key, k, sizeof(k)));
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
		mf_diag(w, at,
			"%s: unsupported manifest version %lld (this library reads version 1)",
			mf_keypath(w, key, k, sizeof(k)), n);
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
	if (len == 0 || len > TIERS_NAME_MAX || strspn(e, "abcdefghijklmnopqrstuvwxyz"
				"ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-") != len || e[0] == '.') {
		mf_diag(w, mf_pos_of(v), "%s: '%s' is not a valid store name (1 to %d of A-Z a-z 0-9 . _ -, not starting with '.')",
			mf_keypath(w, key, k, sizeof(k)), e, TIERS_NAME_MAX);
		free(e);
		return;
	}
	strcpy(w->raw->name, e);
	w->raw->name_at = mf_pos_of(v);
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
		mf_diag(w, mf_pos_of(v), "%s: expected %s, got '%s'", mf_keypath(w, key, k, sizeof(k)), expect, s);
		return;
	}
	*at = mf_pos_of(v);
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
	w->raw->gpu_at = mf_pos_of(v);
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
		w->raw->huge = (enum tiers_huge_pages)i;
}

static const struct key_spec dram_keys[] = {
	{ "capacity", k_dram_capacity },
	{ "numa_node", k_dram_numa },
	{ "huge_pages", k_dram_huge },
};

static void k_dram(struct walker *w, const char *key, yaml_node_t *v)
{
	w->raw->dram_at = mf_pos_of(v);
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
		mf_diag(w, s.at, "%s: %llu is not a power of two between 512 B and 1 MiB",
			mf_keypath(w, key, k, sizeof(k)), (unsigned long long)s.v.bytes);
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
		mf_diag(w, s.at, "%s: %llu is outside [4 KiB, 1 GiB]",
			mf_keypath(w, key, k, sizeof(k)), (unsigned long long)s.v.bytes);
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
		w->raw->checksum = (enum tiers_checksum)i;
}

static void k_nvme_keep(struct walker *w, const char *key, yaml_node_t *v)
{
	get_int(w, key, v, 1, TIER_KEEP_COMMITS_MAX, &w->raw->keep_commits, &w->raw->keep_at);
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
		mf_diag(w, mf_pos_of(v), "%s: %s", mf_keypath(w, key, k, sizeof(k)),
			p->path[0] ? "path too long" : "empty path");
		free(p->path);
		p->path = NULL;
		return;
	}
	p->path_at = mf_pos_of(v);
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
		mf_diag(w, mf_pos_of(v), "%s: expected a list of paths, got %s",
			mf_keypath(w, key, k, sizeof(k)), mf_node_kind(v));
		return;
	}
	w->raw->paths_at = mf_pos_of(v);
	memcpy(saved, w->keypath, sizeof(saved));
	for (yaml_node_item_t *it = v->data.sequence.items.start;
	     it < v->data.sequence.items.top; it++, i++) {
		yaml_node_t *item = yaml_document_get_node(w->doc, *it);
		struct raw_path *p;

		if (i >= TIERS_MAX_NVME_PATHS) {
			mf_diag(w, mf_pos_of(item), "nvme.paths: more than %d paths", TIERS_MAX_NVME_PATHS);
			break;
		}
		p = &w->raw->paths[i];
		p->at = mf_pos_of(item);
		w->path_index = i;
		w->raw->npaths = i + 1;
		snprintf(w->keypath, sizeof(w->keypath), "nvme.paths[%zu]", i);
		if (item->type != YAML_MAPPING_NODE) {
			mf_diag(w, mf_pos_of(item), "%s: expected a mapping with 'path' and 'capacity', got %s",
				w->keypath, mf_node_kind(item));
			continue;
		}
		walk_mapping(w, w->keypath, item, path_keys, NSPECS(path_keys));
		if (!has_key(w, item, "path"))
			mf_diag(w, p->at, "%s: missing key 'path'", w->keypath);
		if (!has_key(w, item, "capacity"))
			mf_diag(w, p->at, "%s: missing key 'capacity' (a size such as 500GiB, or a share of the free space such as 80%%)",
				w->keypath);
	}
	memcpy(w->keypath, saved, sizeof(saved));
	if (i == 0)
		mf_diag(w, mf_pos_of(v), "%s: the list of paths is empty",
			mf_keypath(w, key, k, sizeof(k)));
}

static const struct key_spec nvme_keys[] = {
	{ "stripe_unit", k_nvme_stripe },
	{ "block_size", k_nvme_bs },
	{ "queue_depth", k_nvme_qd },
	{ "direct", k_nvme_direct },
	{ "sqpoll", k_nvme_sqpoll },
	{ "checksum", k_nvme_csum },
	{ "keep_commits", k_nvme_keep },
	{ "paths", k_nvme_paths },
};

static void k_nvme(struct walker *w, const char *key, yaml_node_t *v)
{
	w->raw->nvme_at = mf_pos_of(v);
	with_section(w, key, v, nvme_keys, NSPECS(nvme_keys));
	if ((v->type == YAML_MAPPING_NODE && !has_key(w, v, "paths")) || is_null(v))
		mf_diag(w, mf_pos_of(v), "nvme: missing key 'paths' (leave out the whole nvme section for a store without an NVMe tier)");
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
		w->raw->offload_at = mf_pos_of(v);
		return;
	}
	errno = 0;
	d = strtod(s, &end);
	if (end == s || *end || errno || !(d >= 0.0 && d <= 1.0)) {
		mf_diag(w, mf_pos_of(v), "%s: expected auto or a fraction in [0, 1], got '%s'",
			mf_keypath(w, key, k, sizeof(k)), s);
		return;
	}
	w->raw->offload = d;
	w->raw->offload_at = mf_pos_of(v);
}

static void k_opt_master(struct walker *w, const char *key, yaml_node_t *v)
{
	int i;
	char k[300];

	if (get_enum(w, key, v, "fp32|bf16|fp16", &i, &w->raw->master_at))
		return;
	if (i != TIER_FP32) {
		mf_diag(w, w->raw->master_at,
			"%s: the master copy of the parameters is always fp32",
			mf_keypath(w, key, k, sizeof(k)));
		return;
	}
	w->raw->master = TIER_FP32;
}

static void k_opt_moment(struct walker *w, const char *key, yaml_node_t *v)
{
	int i;

	if (get_enum(w, key, v, "fp32|bf16|q8", &i, &w->raw->moment_at) == 0)
		w->raw->moment = i == 2 ? TIER_Q8 : (enum tier_dtype)i;
}

static void k_opt_rounding(struct walker *w, const char *key, yaml_node_t *v)
{
	get_enum(w, key, v, "nearest|stochastic", &w->raw->rounding, &w->raw->round_at);
}

static void k_opt_out_rounding(struct walker *w, const char *key, yaml_node_t *v)
{
	get_enum(w, key, v, "nearest|stochastic", &w->raw->out_rounding, &w->raw->out_round_at);
}

static void k_opt_seed(struct walker *w, const char *key, yaml_node_t *v)
{
	get_int(w, key, v, 0, LLONG_MAX, &w->raw->seed, &w->raw->seed_at);
}

static void k_opt_shard(struct walker *w, const char *key, yaml_node_t *v)
{
	struct raw_size *s = &w->raw->shard;
	char k[300];

	if (get_size(w, key, v, false, s))
		return;
	if (s->v.bytes < (64u << 10) || s->v.bytes > (4ull << 30) || (s->v.bytes % 4096)) {
		mf_diag(w, s->at, "%s: %llu must be a multiple of 4 KiB in [64 KiB, 4 GiB]",
			mf_keypath(w, key, k, sizeof(k)), (unsigned long long)s->v.bytes);
		s->at.line = 0;
	}
}

static const struct key_spec optimizer_keys[] = {
	{ "offload_fraction", k_opt_offload },
	{ "master_dtype", k_opt_master },
	{ "moment_dtype", k_opt_moment },
	{ "rounding", k_opt_rounding },
	{ "out_rounding", k_opt_out_rounding },
	{ "seed", k_opt_seed },
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
		mf_diag(w, mf_pos_of(node), "%s: expected a mapping of keys, got %s",
			section[0] ? section : "manifest", mf_node_kind(node));
		return;
	}
	/* Stops once the report is full: the duplicate check is quadratic. */
	for (yaml_node_pair_t *p = node->data.mapping.pairs.start;
	     p < node->data.mapping.pairs.top && !mf_report_full(w); p++) {
		yaml_node_t *k = yaml_document_get_node(w->doc, p->key);
		yaml_node_t *v = yaml_document_get_node(w->doc, p->value);
		const struct key_spec *spec = NULL;
		const char *name;
		char where[300];

		if (k->type != YAML_SCALAR_NODE) {
			mf_diag(w, mf_pos_of(k), "%s: a key must be a plain word, got %s",
				section[0] ? section : "manifest", mf_node_kind(k));
			continue;
		}
		name = scalar(k);
		/* Duplicate keys: YAML forbids them, libyaml does not check. */
		for (yaml_node_pair_t *q = node->data.mapping.pairs.start; q < p; q++) {
			yaml_node_t *qk = yaml_document_get_node(w->doc, q->key);

			if (qk->type == YAML_SCALAR_NODE && strcmp(scalar(qk), name) == 0) {
				mf_diag(w, mf_pos_of(k), "%s: duplicate key (first at line %d)",
					mf_keypath(w, name, where, sizeof(where)),
					mf_pos_of(qk).line);
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
				mf_diag(w, mf_pos_of(k),
					"unknown key '%s' in %s (did you mean '%s'?)",
					name, section[0] ? section : "the manifest", best);
			else
				mf_diag(w, mf_pos_of(k), "unknown key '%s' in %s", name,
					section[0] ? section : "the manifest");
			continue;
		}
		spec->fn(w, name, v);
	}
}

/* Pass 2: the whole document from its @root mapping. */
void mf_walk_schema(struct walker *w, yaml_node_t *root)
{
	walk_mapping(w, "", root, top_keys, NSPECS(top_keys));
}
