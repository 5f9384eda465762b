/*
 * stat_fields.c - tier-stat's table of the published counters, one array
 * per group generated from the lists of tierstore/live.h (X-macros), and
 * what tier-stat prints of them: JSON members, Prometheus values, the
 * report's columns and line pieces, and the number formats.  A counter
 * added to a list shows up here without an edit.
 */
#include <inttypes.h>
#include <limits.h>
#include <string.h>

#include "stat_fields.h"

/* ---------------------------------------------------------------- tables */

#define STAT_CELL_NONE { STAT_NONE, 0, 0, NULL, NULL, STAT_F_num }
#define STAT_CELL_COL(pos, width, head, form) { STAT_COL, pos, width, head, NULL, STAT_F_##form }
#define STAT_CELL_TXT(pos, before, after, form) \
	{ STAT_TXT, pos, 0, before, after, STAT_F_##form }
#define STAT_FIELD(rec, name, type, unit, kind, src, json, prom, table, help) \
	{ #name, json, prom, help, STAT_T_##type, STAT_U_##unit, STAT_K_##kind, \
	  offsetof(rec, name), STAT_CELL_##table },

#define STORE_FIELD(name, t, u, k, s, j, p, table, h) \
	STAT_FIELD(struct tier_live_stats, name, t, u, k, s, j, p, table, h)
#define LEVEL_FIELD(name, t, u, k, s, j, p, table, h) \
	STAT_FIELD(struct tier_live_level, name, t, u, k, s, j, p, table, h)
#define PATH_FIELD(name, t, u, k, s, j, p, table, h) \
	STAT_FIELD(struct tier_live_path, name, t, u, k, s, j, p, table, h)
#define PREFETCH_FIELD(name, t, u, k, s, j, p, table, h) \
	STAT_FIELD(struct tier_live_prefetch, name, t, u, k, s, j, p, table, h)
#define OPTIM_FIELD(name, t, u, k, s, j, p, table, h) \
	STAT_FIELD(struct tier_live_optim, name, t, u, k, s, j, p, table, h)

static const struct stat_field store_fields[] = { TIER_LIVE_STORE_COUNTERS(STORE_FIELD) };
static const struct stat_field level_fields[] = { TIER_LIVE_LEVEL_COUNTERS(LEVEL_FIELD) };
static const struct stat_field path_fields[] = { TIER_LIVE_PATH_COUNTERS(PATH_FIELD) };
static const struct stat_field prefetch_fields[] = { TIER_LIVE_PREFETCH_COUNTERS(PREFETCH_FIELD) };
static const struct stat_field optim_fields[] = { TIER_LIVE_OPTIM_COUNTERS(OPTIM_FIELD) };

#define GROUP(prefix, a) { prefix, a, sizeof(a) / sizeof((a)[0]) }
const struct stat_group stat_groups[STAT_GROUPS] = {
	[STAT_STORE] = GROUP("tierstore_", store_fields),
	[STAT_LEVEL] = GROUP("tierstore_tier_", level_fields),
	[STAT_PATH] = GROUP("tierstore_nvme_path_", path_fields),
	[STAT_PREFETCH] = GROUP("tierstore_prefetch_", prefetch_fields),
	[STAT_OPTIM] = GROUP("tierstore_optimizer_", optim_fields),
};

const struct stat_quantile stat_quantiles[STAT_QUANTILES] = { { 0.5, "50" }, { 0.99, "99" } };

unsigned stat_group_count(enum stat_group_id g, const struct tier_live_stats *st)
{
	if (g == STAT_LEVEL)
		return TIER_LEVELS;
	if (g == STAT_PATH)
		return st->npaths < TIER_LIVE_MAX_PATHS ? st->npaths : TIER_LIVE_MAX_PATHS;
	return 1;
}

const void *stat_group_rec(enum stat_group_id g, const struct tier_live_stats *st, unsigned j)
{
	if (j >= stat_group_count(g, st))
		return NULL;
	switch (g) {
	case STAT_LEVEL: return st->level[j].present ? &st->level[j] : NULL;
	case STAT_PATH: return &st->path[j];
	case STAT_PREFETCH: return &st->prefetch;
	case STAT_OPTIM: return st->optim.present ? &st->optim : NULL;
	default: return st;
	}
}

/* ---------------------------------------------------------------- values */

static uint64_t u64_at(const struct stat_field *d, const void *rec)
{
	uint64_t v;

	memcpy(&v, (const char *)rec + d->off, sizeof(v));
	return v;
}

static double double_at(const struct stat_field *d, const void *rec)
{
	double v;

	if (d->type != STAT_T_double)
		return (double)u64_at(d, rec);
	memcpy(&v, (const char *)rec + d->off, sizeof(v));
	return v;
}

static uint64_t quantile_ns(const struct stat_field *d, const void *rec, double q)
{
	return tier_lat_quantile_ns((const uint64_t *)(const void *)((const char *)rec + d->off), q);
}

const char *stat_prom_name(enum stat_group_id g, const struct stat_field *d, char *buf,
			   size_t len)
{
	snprintf(buf, len, "%s%s%s", stat_groups[g].prom, d->prom,
		 d->kind == STAT_K_counter ? "_total" : "");
	return buf;
}

double stat_prom_value(const struct stat_field *d, const void *rec)
{
	return d->unit == STAT_U_ns || d->unit == STAT_U_time ? double_at(d, rec) * 1e-9
							       : double_at(d, rec);
}

/* ------------------------------------------------------------------ JSON */

/* Strings for the report and Prometheus (JSON strings: json_out.c). */

#define REPLACEMENT "\xef\xbf\xbd" /* U+FFFD */

const char *stat_text(const char *s, size_t max, char *buf, size_t len)
{
	const unsigned char *p = (const unsigned char *)s;
	size_t n = strnlen(s, max), o = 0, k;
	uint32_t cp;

	if (!len)
		return buf;
	for (size_t i = 0; i < n; i += k) {
		const void *add = p + i;
		size_t addlen;

		k = json_out_utf8(p + i, n - i, &cp);
		addlen = k;
		if (k == 0 || json_out_control(cp)) {
			k = k ? k : 1;
			add = REPLACEMENT;
			addlen = 3;
		}
		if (o + addlen >= len)
			break;
		memcpy(buf + o, add, addlen);
		o += addlen;
	}
	buf[o] = '\0';
	return buf;
}

void stat_prom_label(FILE *f, const char *k, const char *v, size_t max)
{
	const unsigned char *p = (const unsigned char *)v;
	size_t n = strnlen(v, max), len;
	uint32_t cp;

	fprintf(f, ",%s=\"", k);
	for (size_t i = 0; i < n; i += len) {
		len = json_out_utf8(p + i, n - i, &cp);
		if (len && cp == '\n')
			fputs("\\n", f);
		else if (len && (cp == '\\' || cp == '"'))
			fprintf(f, "\\%c", (char)cp);
		else if (len && !json_out_control(cp))
			fwrite(p + i, 1, len, f);
		else
			fputs(REPLACEMENT, f);
		len = len ? len : 1;
	}
	fputc('"', f);
}

void stat_json_num(FILE *f, double v)
{
	if (v != v || v > 1.7976931348623157e308 || v < -1.7976931348623157e308)
		fputs("null", f);
	else
		fprintf(f, "%.17g", v);
}

void stat_json_fields(FILE *f, enum stat_group_id g, const void *rec, bool first)
{
	const struct stat_group *gr = &stat_groups[g];

	for (size_t k = 0; k < gr->n; k++) {
		const struct stat_field *d = &gr->f[k];

		if (!*d->json)
			continue;
		if (d->type == STAT_T_hist) {
			for (size_t q = 0; q < STAT_QUANTILES; q++) {
				fprintf(f, "%s\"%s_p%s_seconds\":", first ? "" : ",", d->json,
					stat_quantiles[q].tag);
				stat_json_num(f, (double)quantile_ns(d, rec, stat_quantiles[q].q) * 1e-9);
				first = false;
			}
			continue;
		}
		fprintf(f, "%s\"%s\":", first ? "" : ",", d->json);
		first = false;
		if (d->type == STAT_T_double || d->unit == STAT_U_ns)
			stat_json_num(f, stat_prom_value(d, rec));
		else if (d->unit == STAT_U_flag)
			fputs(u64_at(d, rec) ? "true" : "false", f);
		else
			fprintf(f, "%" PRIu64, u64_at(d, rec));
	}
}

/* ------------------------------------------------------------------ text */

const char *stat_fmt_bytes(double v, char *buf, size_t len)
{
	static const char *const u[] = { "B", "KiB", "MiB", "GiB", "TiB", "PiB" };
	int i = 0;

	while (v >= 1024.0 && i < 5) {
		v /= 1024.0;
		i++;
	}
	if (i == 0)
		snprintf(buf, len, "%.0f B", v);
	else
		snprintf(buf, len, "%.1f %s", v, u[i]);
	return buf;
}

static const char *fmt_ns(uint64_t ns, char *buf, size_t len)
{
	if (ns == 0)
		snprintf(buf, len, "-");
	else if (ns < 10000)
		snprintf(buf, len, "%.1f us", (double)ns / 1e3);
	else if (ns < 1000000)
		snprintf(buf, len, "%.0f us", (double)ns / 1e3);
	else if (ns < 10000000000ull)
		snprintf(buf, len, "%.2f ms", (double)ns / 1e6);
	else
		snprintf(buf, len, "%.1f s", (double)ns / 1e9);
	return buf;
}

const char *stat_fmt_uptime(uint64_t ns, char *buf, size_t len)
{
	uint64_t s = ns / 1000000000ull;

	if (s >= 86400)
		snprintf(buf, len, "%" PRIu64 "d%02" PRIu64 "h", s / 86400, s / 3600 % 24);
	else if (s >= 3600)
		snprintf(buf, len, "%" PRIu64 "h%02" PRIu64 "m", s / 3600, s / 60 % 60);
	else if (s >= 60)
		snprintf(buf, len, "%" PRIu64 "m%02" PRIu64 "s", s / 60, s % 60);
	else
		snprintf(buf, len, "%.1fs", (double)ns / 1e9);
	return buf;
}

/* The value of @d in @rec as its cell's form writes it. */
static const char *form_text(const struct stat_field *d, const void *rec, char *buf, size_t len)
{
	uint64_t u = d->type == STAT_T_double ? 0 : u64_at(d, rec);
	double v = double_at(d, rec);

	switch (d->cell.form) {
	case STAT_F_bytes: return stat_fmt_bytes(v, buf, len);
	case STAT_F_rate:
		stat_fmt_bytes(v, buf, len);
		strncat(buf, "/s", len - strlen(buf) - 1);
		return buf;
	case STAT_F_secs: snprintf(buf, len, "%.3f s", v * 1e-9); return buf;
	case STAT_F_uptime: return stat_fmt_uptime(u, buf, len);
	case STAT_F_f2: snprintf(buf, len, "%.2f", v); return buf;
	case STAT_F_g: snprintf(buf, len, "%g", v); return buf;
	case STAT_F_ns: return fmt_ns(u, buf, len);
	case STAT_F_onoff: return u ? d->cell.a : d->cell.b;
	default: snprintf(buf, len, "%" PRIu64, u); return buf;
	}
}

/* The field of @g with cell @how and the least position above @after, or
 * NULL: the cells in their order. */
static const struct stat_field *next_cell(const struct stat_group *g, enum stat_cell_how how,
					  int after)
{
	const struct stat_field *best = NULL;

	for (size_t k = 0; k < g->n; k++) {
		const struct stat_field *d = &g->f[k];

		if (d->cell.how == how && d->cell.pos > after &&
		    (!best || d->cell.pos < best->cell.pos))
			best = d;
	}
	return best;
}

void stat_text_cols(FILE *f, enum stat_group_id g, const void *rec)
{
	const struct stat_group *gr = &stat_groups[g];
	char b[64];

	for (const struct stat_field *d = next_cell(gr, STAT_COL, INT_MIN); d;
	     d = next_cell(gr, STAT_COL, d->cell.pos)) {
		if (d->type != STAT_T_hist) {
			fprintf(f, " %*s", d->cell.width,
				rec ? form_text(d, rec, b, sizeof(b)) : d->cell.a);
			continue;
		}
		for (size_t q = 0; q < STAT_QUANTILES; q++) {
			if (rec)
				fmt_ns(quantile_ns(d, rec, stat_quantiles[q].q), b, sizeof(b));
			else
				snprintf(b, sizeof(b), "%s%s", d->cell.a, stat_quantiles[q].tag);
			fprintf(f, " %*s", d->cell.width, b);
		}
	}
}

void stat_text_line(FILE *f, enum stat_group_id g, const void *rec)
{
	const struct stat_group *gr = &stat_groups[g];
	char b[64];

	for (const struct stat_field *d = next_cell(gr, STAT_TXT, INT_MIN); d;
	     d = next_cell(gr, STAT_TXT, d->cell.pos)) {
		if (d->cell.form == STAT_F_onoff) {
			fputs(form_text(d, rec, b, sizeof(b)), f);
			continue;
		}
		fprintf(f, "%s%s%s", d->cell.a, form_text(d, rec, b, sizeof(b)), d->cell.b);
		if (d->cell.form == STAT_F_plural && u64_at(d, rec) != 1)
			fputc('s', f);
	}
}
