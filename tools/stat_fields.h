/*
 * stat_fields.h - tier-stat's description of every published counter,
 * generated from the counter lists of tierstore/live.h, and its rendering:
 * JSON members, Prometheus values, the report's columns and lines, and the
 * number formats they share (stat_fields.c).  stat_live.c lays them out.
 */
#ifndef TIER_TOOLS_STAT_FIELDS_H
#define TIER_TOOLS_STAT_FIELDS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "json_out.h"
#include "tierstore.h"

/* The groups, in the order of the payload and of the Prometheus output. */
enum stat_group_id { STAT_STORE, STAT_LEVEL, STAT_PATH, STAT_PREFETCH, STAT_OPTIM, STAT_GROUPS };

enum stat_type { STAT_T_u64, STAT_T_double, STAT_T_hist };
enum stat_unit {
	STAT_U_bytes, STAT_U_count, STAT_U_ns, STAT_U_time, STAT_U_Bps, STAT_U_ratio,
	STAT_U_scalar, STAT_U_flag,
};
enum stat_kind { STAT_K_gauge, STAT_K_counter, STAT_K_summary };
enum stat_form {
	STAT_F_bytes, STAT_F_rate, STAT_F_num, STAT_F_plural, STAT_F_secs, STAT_F_uptime,
	STAT_F_f2, STAT_F_g, STAT_F_ns, STAT_F_onoff,
};

/* Where the report shows a field (the list's table column). */
enum stat_cell_how { STAT_NONE, STAT_COL, STAT_TXT };
struct stat_cell {
	enum stat_cell_how how;
	int pos;                   /* order within the group */
	int width;                 /* COL */
	const char *a, *b;         /* COL: the header; TXT: before and after */
	enum stat_form form;
};

/* One entry of a counter list. */
struct stat_field {
	const char *name, *json, *prom, *help;
	enum stat_type type;
	enum stat_unit unit;
	enum stat_kind kind;
	size_t off;                /* in the group's record */
	struct stat_cell cell;
};

struct stat_group {
	const char *prom;          /* the Prometheus family prefix */
	const struct stat_field *f;
	size_t n;
};

extern const struct stat_group stat_groups[STAT_GROUPS];

/* The quantiles a histogram shows (p50, p99). */
#define STAT_QUANTILES 2
struct stat_quantile {
	double q;
	const char *tag;           /* "50": KEY_p50_seconds, HEADER50 */
};
extern const struct stat_quantile stat_quantiles[STAT_QUANTILES];

/*
 * The records of group @g in @st: how many there may be, and record @j
 * (NULL when absent: a level the store lacks, no optimizer).
 */
unsigned stat_group_count(enum stat_group_id g, const struct tier_live_stats *st);
const void *stat_group_rec(enum stat_group_id g, const struct tier_live_stats *st, unsigned j);

/* The Prometheus family of @d in group @g ("tierstore_tier_hits_total"). */
const char *stat_prom_name(enum stat_group_id g, const struct stat_field *d, char *buf,
			   size_t len);
/* Its value in @rec, in the family's unit (seconds for ns and time). */
double stat_prom_value(const struct stat_field *d, const void *rec);

/* The JSON members of @rec, a record of @g, each led by a comma unless
 * @first and it is the first. */
void stat_json_fields(FILE *f, enum stat_group_id g, const void *rec, bool first);

/* The report: the columns of @rec, a record of @g (NULL: their headers),
 * each led by a space; the pieces of @rec's line. */
void stat_text_cols(FILE *f, enum stat_group_id g, const void *rec);
void stat_text_line(FILE *f, enum stat_group_id g, const void *rec);

/* Numbers as text: "1.5 GiB", "1h02m"; JSON strings and numbers (a
 * number that is not finite is null). */
const char *stat_fmt_bytes(double v, char *buf, size_t len);
const char *stat_fmt_uptime(uint64_t ns, char *buf, size_t len);
void stat_json_num(FILE *f, double v);

/*
 * Strings, from a stats segment above all: a store's name, a backend, a
 * file, its manifest.  The segment's writer is trusted for nothing, and a
 * fixed field (char backend[16]) need not hold its NUL: each string is
 * taken up to its NUL or @max bytes (its field's size), and what is not
 * well-formed UTF-8 comes out as U+FFFD, so that every output is UTF-8
 * whatever the segment holds.  JSON strings: json_out_strn() and
 * json_out_str() (json_out.h).
 *
 * stat_text: for the report and the list, into @buf (@len bytes, cut on a
 * character), control characters U+FFFD too (nothing reaches a terminal
 * as a command).  stat_prom_label: ",KEY=\"v\"" for the Prometheus text
 * format (\\, \" and \n escaped), other control characters U+FFFD.
 */
const char *stat_text(const char *s, size_t max, char *buf, size_t len);
void stat_prom_label(FILE *f, const char *k, const char *v, size_t max);

#endif
