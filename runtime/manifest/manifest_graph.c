/*
 * manifest_graph.c - the manifest's document before the schema reads it
 * (manifest.c has the three passes): its limits checked on libyaml's
 * events (nesting, nodes as written, anchors), the one document loaded,
 * and pass 1 over the loaded graph: cycles, nesting and alias expansion
 * (TIER_YAML_NODE_LIMIT) refused before anything follows an alias, then a
 * NUL byte in any scalar.  Every problem goes to the report (mf_diag).
 */
#include "config.h"

#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <yaml.h>

#include "common/error.h"
#include "common/fault.h"
#include "common/options.h"
#include "runtime/manifest/manifest_impl.h"

#define MAX_DEPTH 32          /* the deepest level of a node (the top one is 0) */
/*
 * libyaml's loader finds an alias's anchor, and checks a new anchor for a
 * duplicate, by a linear search of the anchors so far: bounded here so
 * that a 1 MiB document of anchors and aliases loads in milliseconds.
 */
#define MAX_ANCHORS 256

/* ---------------------------------------------------- the document */

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
		mf_diag(w, at, "YAML syntax error: %s %s (line %zu)", what, p->context,
			p->context_mark.line + 1);
	else
		mf_diag(w, at, "YAML syntax error: %s", what);
	return -EINVAL;
}

/* The anchor a node event defines, or NULL. */
static const yaml_char_t *event_anchor(const yaml_event_t *ev)
{
	switch (ev->type) {
	case YAML_SCALAR_EVENT:
		return ev->data.scalar.anchor;
	case YAML_SEQUENCE_START_EVENT:
		return ev->data.sequence_start.anchor;
	case YAML_MAPPING_START_EVENT:
		return ev->data.mapping_start.anchor;
	default:
		return NULL;
	}
}

/*
 * Nesting and size are checked on libyaml's events, before any document
 * is built: the loader's cost grows faster than the input with the
 * nesting, so a deep document would take minutes to refuse after loading.
 * A node at level MAX_DEPTH + 1 (the top-level node is level 0), or past
 * TIER_YAML_NODE_LIMIT nodes as written (aliases counted once; pass 1
 * counts them expanded), or defining anchor MAX_ANCHORS + 1, is refused
 * where it starts; a syntax error found
 * on the way is reported as the loader would.
 */
static int depth_check(struct walker *w, const char *text, size_t len)
{
	uint64_t nodes = 0, limit = (uint64_t)ts_opt_int(TIER_OPT_YAML_NODE_LIMIT);
	yaml_parser_t parser;
	yaml_event_t ev;
	int open = 0, anchors = 0, rc = 0;
	bool done = false;

	if (!yaml_parser_initialize(&parser))
		return ts_err(-ENOMEM, "%s: cannot set up the YAML parser", w->file);
	yaml_parser_set_input_string(&parser, (const unsigned char *)text, len);
	while (!done && !rc) {
		if (!yaml_parser_parse(&parser, &ev)) {
			rc = yaml_error(w, &parser);
			break;
		}
		switch (ev.type) {
		case YAML_SEQUENCE_START_EVENT:
		case YAML_MAPPING_START_EVENT:
		case YAML_SCALAR_EVENT:
		case YAML_ALIAS_EVENT:
			if (open > MAX_DEPTH) {
				mf_diag(w, (struct pos){ (int)ev.start_mark.line + 1,
							 (int)ev.start_mark.column + 1 },
					"YAML nesting deeper than %d levels (the limit); refused",
					MAX_DEPTH);
				rc = -EINVAL;
			} else if (++nodes > limit) {
				mf_diag(w, (struct pos){ (int)ev.start_mark.line + 1,
							 (int)ev.start_mark.column + 1 },
					"YAML document has more than %llu nodes (TIER_YAML_NODE_LIMIT); refused",
					(unsigned long long)limit);
				rc = -EINVAL;
			}
			if (!rc && event_anchor(&ev) && ++anchors > MAX_ANCHORS) {
				mf_diag(w, (struct pos){ (int)ev.start_mark.line + 1,
							 (int)ev.start_mark.column + 1 },
					"more than %d YAML anchors (the limit); refused", MAX_ANCHORS);
				rc = -EINVAL;
			}
			open += ev.type == YAML_SEQUENCE_START_EVENT ||
				ev.type == YAML_MAPPING_START_EVENT;
			break;
		case YAML_SEQUENCE_END_EVENT:
		case YAML_MAPPING_END_EVENT:
			open--;
			break;
		case YAML_STREAM_END_EVENT:
			done = true;
			break;
		default:
			break;
		}
		yaml_event_delete(&ev);
	}
	yaml_parser_delete(&parser);
	return rc;
}

/*
 * The one document of @text into *@doc (the caller deletes it when this
 * returns 0): limits checked on the events first, then loaded; an empty
 * stream or a second document is refused.
 */
int mf_load_document(struct walker *w, yaml_parser_t *parser, const char *text, size_t len,
		     yaml_document_t *doc)
{
	yaml_document_t extra;
	yaml_node_t *x;
	int rc = depth_check(w, text, len);

	if (rc)
		return rc;
	yaml_parser_set_input_string(parser, (const unsigned char *)text, len);
	if (!yaml_parser_load(parser, doc))
		return yaml_error(w, parser);
	if (!yaml_document_get_root_node(doc)) {
		rc = ts_err(-EINVAL, "%s:1:1: the manifest is empty (an empty mapping '{}' takes every default)",
			    w->file);
	} else if (!yaml_parser_load(parser, &extra)) {
		rc = yaml_error(w, parser);
	} else {
		/* Exactly one document. */
		x = yaml_document_get_root_node(&extra);
		if (x)
			rc = ts_err(-EINVAL, "%s:%zu:%zu: a manifest holds one YAML document; a second one starts here",
				    w->file, x->start_mark.line + 1, x->start_mark.column + 1);
		yaml_document_delete(&extra);
	}
	if (rc)
		yaml_document_delete(doc);
	return rc;
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
		mf_diag(g->w, mf_pos_of(n), "YAML alias refers to a node that contains it (a cycle); refused");
		g->failed = true;
		return 0;
	}
	if (depth > MAX_DEPTH) {
		mf_diag(g->w, mf_pos_of(n), "YAML nesting deeper than %d levels; refused",
			MAX_DEPTH);
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
		mf_diag(g->w, mf_pos_of(n),
			"YAML aliases expand this node to more than %llu nodes (TIER_YAML_NODE_LIMIT); refused",
			(unsigned long long)g->limit);
		g->failed = true;
	}
	g->state[id] = G_DONE;
	g->size[id] = total;
	return total;
}

int mf_graph_check(struct walker *w)
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

/* ------------------------------------------------ pass 1b: NUL bytes */

/*
 * libyaml gives a scalar's length, and "\0" in a double-quoted scalar is
 * a NUL byte inside it; everything after reads values as C strings, which
 * would end there ("a\0b" read as "a").  So a scalar holding a NUL is
 * refused, wherever it stands, before pass 2 reads anything.
 */
struct nul_walk {
	struct walker *w;
	unsigned char *seen;     /* each node once: aliases share nodes */
	char path[320];          /* "nvme.paths[0].path" at the node */
};

/* The @len bytes of @v into @out, each NUL written as \x00. */
static void show_nuls(const char *v, size_t len, char *out, size_t outlen)
{
	size_t o = 0;

	for (size_t i = 0; i < len && o + 5 < outlen; i++) {
		if (v[i] == '\0') {
			memcpy(out + o, "\\x00", 4);
			o += 4;
		} else {
			out[o++] = v[i];
		}
	}
	out[o] = '\0';
}

/* Reports scalar @n if it holds a NUL byte: a key of the mapping at
 * nw->path, or the value there. */
static void nul_scalar(struct nul_walk *nw, const yaml_node_t *n, bool key)
{
	const char *v = (const char *)n->data.scalar.value;
	size_t len = n->data.scalar.length;
	const char *z = len ? memchr(v, '\0', len) : NULL;
	const char *where = nw->path[0] ? nw->path : "manifest";
	char shown[4 * 256 + 8];

	if (!z)
		return;
	show_nuls(v, len < 256 ? len : 256, shown, sizeof(shown));
	if (key)
		mf_diag(nw->w, mf_pos_of(n),
			"%s: the key '%s' contains a NUL byte at offset %zu; a manifest's keys and values are text",
			where, shown, (size_t)(z - v));
	else
		mf_diag(nw->w, mf_pos_of(n),
			"%s: contains a NUL byte at offset %zu ('%s'); a manifest's keys and values are text",
			where, (size_t)(z - v), shown);
}

/* Node @id and what is below it (pass 1 bounded the depth). */
static void nul_node(struct nul_walk *nw, int id)
{
	yaml_node_t *n = yaml_document_get_node(nw->w->doc, id);
	size_t at = strlen(nw->path), i = 0;

	if (!n || nw->seen[id] || mf_report_full(nw->w))
		return;
	nw->seen[id] = 1;
	if (n->type == YAML_SCALAR_NODE) {
		nul_scalar(nw, n, false);
	} else if (n->type == YAML_SEQUENCE_NODE) {
		for (yaml_node_item_t *it = n->data.sequence.items.start;
		     it < n->data.sequence.items.top; it++, i++) {
			snprintf(nw->path + at, sizeof(nw->path) - at, "[%zu]", i);
			nul_node(nw, *it);
		}
	} else if (n->type == YAML_MAPPING_NODE) {
		for (yaml_node_pair_t *p = n->data.mapping.pairs.start;
		     p < n->data.mapping.pairs.top; p++) {
			yaml_node_t *k = yaml_document_get_node(nw->w->doc, p->key);

			nw->path[at] = '\0';
			if (k && k->type == YAML_SCALAR_NODE) {
				if (!nw->seen[p->key])
					nul_scalar(nw, k, true);
				nw->seen[p->key] = 1;
				snprintf(nw->path + at, sizeof(nw->path) - at, "%s%s", at ? "." : "",
					 (const char *)k->data.scalar.value);
			} else {
				nul_node(nw, p->key);
			}
			nul_node(nw, p->value);
		}
	}
	nw->path[at] = '\0';
}

int mf_nul_check(struct walker *w)
{
	int n = (int)(w->doc->nodes.top - w->doc->nodes.start);
	struct nul_walk nw = { .w = w };
	int before = w->ndiags;

	nw.seen = ts_calloc((size_t)n + 1, 1);
	if (!nw.seen)
		return ts_err(-ENOMEM, "%s: out of memory checking %d YAML nodes", w->file, n);
	nul_node(&nw, 1);
	free(nw.seen);
	return w->ndiags > before ? -EINVAL : 0;
}
