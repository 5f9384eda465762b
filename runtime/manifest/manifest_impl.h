/*
 * manifest_impl.h - what the pieces of the manifest share; private to
 * runtime/manifest/manifest*.c, not for any other file.
 *
 * A manifest is read in three passes over one libyaml document (see
 * manifest.c): the diagnostics and the API live in manifest.c, the
 * document's limits, its loading and pass 1 (the graph check) in
 * manifest_graph.c, pass 2 (the schema walk into struct raw) in
 * manifest_schema.c, pass 3 (resolution against struct facts into
 * struct tier_manifest) in manifest_resolve.c; manifest_emit.c writes a
 * resolved configuration back out as YAML.
 */
#ifndef TIER_RUNTIME_MANIFEST_IMPL_H
#define TIER_RUNTIME_MANIFEST_IMPL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <yaml.h>

#include "common/sysinfo.h"
#include "common/units.h"
#include "runtime/manifest/manifest.h"

/* A value as written, with its position, before resolution. */
struct pos {
	int line, col; /* 1-based; 0 = not set */
};

struct raw_size {
	struct pos at;
	struct ts_size v;
	unsigned div;         /* "SIZE/local_world": the local world size; else 0 */
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
	char name[TIERS_NAME_MAX + 1];

	struct pos gpu_at, device_at;
	int device;           /* -2 auto, -1 none, >= 0 index */
	struct raw_size hbm;

	struct pos dram_at;
	struct raw_size dram;
	struct pos numa_at;
	int numa;             /* -2 auto, -1 none, >= 0 node */
	struct pos huge_at;
	enum tiers_huge_pages huge;

	struct pos nvme_at, stripe_at, bs_at, qd_at, direct_at, sqpoll_at, csum_at, paths_at;
	uint64_t stripe_unit, block_size;
	long long queue_depth;
	bool direct, sqpoll;
	enum tiers_checksum checksum;
	struct pos keep_at;
	long long keep_commits;
	size_t npaths;
	struct raw_path paths[TIERS_MAX_NVME_PATHS];

	struct raw_size lookahead;
	struct pos wb_at;
	long long write_behind;

	struct pos offload_at, master_at, moment_at, round_at, out_round_at, seed_at;
	double offload;       /* < 0: auto */
	enum tier_dtype master, moment;
	int rounding, out_rounding; /* enum tier_rounding */
	long long seed;
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
	struct tier_rank rank; /* what ${RANK} ... and /local_world resolve to */
};

/* What resolution knows of this machine (nominal under TIER_MANIFEST_NO_PROBE). */
struct facts {
	struct ts_meminfo mem;
	int ngpu;
	char gpu_why[200];
};

/* diagnostics (manifest.c): "FILE:LINE:COL: message" lines in w->diags */
struct pos mf_pos_of(const yaml_node_t *n);
__attribute__((format(printf, 3, 4)))
void mf_diag(struct walker *w, struct pos at, const char *fmt, ...);
/* Whether the report has ended ("too many errors; stopping"). */
bool mf_report_full(const struct walker *w);

/*
 * The UTF-8 sequence at @p (NUL-terminated): its code point in *cp and its
 * length in bytes; 0 when the bytes there are not well-formed UTF-8
 * (overlong, a surrogate, past U+10FFFF, cut short).
 */
size_t mf_utf8_next(const unsigned char *p, uint32_t *cp);
/* At most this many characters of a quoted value are shown in a message. */
#define MF_EXCERPT 40
/*
 * @msg into @dst with control characters and bytes that are not UTF-8 escaped, and
 * every quoted value ('...') cut to MF_EXCERPT characters and "…".
 */
void mf_sanitize(const char *msg, char *dst, size_t len);
const char *mf_keypath(struct walker *w, const char *key, char *buf, size_t len);
const char *mf_node_kind(const yaml_node_t *n);

/* the document and pass 1 (manifest_graph.c) */
/*
 * The one document of @text (@len bytes) into *@doc, with @parser set up
 * (the caller deletes the document when this returns 0): nesting, nodes
 * and anchors checked on the events first, then loaded; an empty stream
 * or a second document is refused.  0, -EINVAL (the problems reported),
 * -ENOMEM.
 */
int mf_load_document(struct walker *w, yaml_parser_t *parser, const char *text, size_t len,
		     yaml_document_t *doc);
/* Pass 1 on w->doc: a cycle, nesting past 32 levels or an expansion past
 * TIER_YAML_NODE_LIMIT nodes reported, before anything follows an alias.
 * 0, -EINVAL, -ENOMEM. */
int mf_graph_check(struct walker *w);
/* Every scalar, key or value, of w->doc that holds a NUL byte reported.
 * 0, -EINVAL, -ENOMEM. */
int mf_nul_check(struct walker *w);

/* the rank (manifest_rank.c) */
/* 0..3 for RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE; -1 for another name */
int mf_rank_var(const char *name);
int mf_rank_value(const struct tier_rank *r, int var);
/* 0, or -EINVAL with the detail naming the field that disagrees */
int mf_rank_check(const struct tier_rank *r);

/* pass 2 (manifest_schema.c): the document's keys into w->raw */
void mf_walk_schema(struct walker *w, yaml_node_t *root);

/* pass 3 (manifest_resolve.c): w->raw against the machine into @c */
int mf_gather_facts(struct walker *w, struct facts *f);
void mf_resolve_gpu(struct walker *w, const struct facts *f, struct tier_manifest *c);
void mf_resolve_dram(struct walker *w, const struct facts *f, struct tier_manifest *c);
void mf_resolve_nvme(struct walker *w, struct tier_manifest *c);
void mf_resolve_rest(struct walker *w, struct tier_manifest *c);
/* also for the embedded default (manifest.c) */
void mf_existing_ancestor(const char *dir, char *out, size_t len);

#endif
