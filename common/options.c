/*
 * options.c - the options table, its parsing from the environment and its
 * printing.
 *
 * The table is filled once under pthread_once, so readers on any thread
 * see either the defaults (before init) or the final values, never a half-
 * parsed row.  String values are copied: later setenv() calls by the host
 * program do not change what tierstore uses.
 */
#include "config.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "common/error.h"
#include "common/fault.h"
#include "common/log.h"
#include "common/options.h"
#include "common/units.h"

struct ts_option {
	const char *name;
	enum ts_opt_type type;
	const char *env;
	const char *def;
	const char *choices;
	long long min, max;
	const char *desc;
	/* value, filled by options_load(): */
	long long ival;
	double dval;
	uint64_t size;
	char sval[1024];
	bool from_env;
};

static struct ts_option g_opts[TIER_OPT__COUNT] = {
#define X(id, name, type, env, def, choices, min, max, desc)                   \
	[TIER_OPT_##id] = { name, type, env, def, choices, min, max, desc, 0, 0, 0, "", false },
	TIER_OPTION_LIST(X)
#undef X
};

static pthread_once_t g_once = PTHREAD_ONCE_INIT;

static int choice_index(const char *choices, const char *v)
{
	const char *p = choices;

	for (int i = 0; *p; i++) {
		size_t n = strcspn(p, "|");

		if (strlen(v) == n && strncasecmp(p, v, n) == 0)
			return i;
		p += n;
		if (*p == '|')
			p++;
	}
	return -1;
}

/* Parses @v into @o; returns 0 or -EINVAL with @why filled. */
static int opt_parse(struct ts_option *o, const char *v, char *why, size_t whylen)
{
	struct ts_size sz;
	long long n;
	uint32_t mask;
	int rc;

	switch (o->type) {
	case TIER_OPT_T_ENUM:
		rc = choice_index(o->choices, v);
		if (rc < 0) {
			snprintf(why, whylen, "expected one of %s", o->choices);
			return -EINVAL;
		}
		o->ival = rc;
		return 0;
	case TIER_OPT_T_SUBSYS: {
		char bad[64];

		if (ts_log_mask_parse(v, &mask, bad, sizeof(bad))) {
			snprintf(why, whylen, "unknown subsystem '%s'", bad);
			return -EINVAL;
		}
		o->ival = mask;
		return 0;
	}
	case TIER_OPT_T_STRING:
		if (strlen(v) >= sizeof(o->sval)) {
			snprintf(why, whylen, "longer than %zu bytes", sizeof(o->sval) - 1);
			return -EINVAL;
		}
		strcpy(o->sval, v);
		return 0;
	case TIER_OPT_T_INT:
		rc = ts_int_parse(v, o->min, o->max, &n);
		if (rc) {
			snprintf(why, whylen, "expected an integer in [%lld, %lld]", o->min, o->max);
			return -EINVAL;
		}
		o->ival = n;
		return 0;
	case TIER_OPT_T_PERCENT: {
		char buf[64];
		size_t len = strlen(v);

		if (len == 0 || len + 2 > sizeof(buf)) {
			snprintf(why, whylen, "expected a percentage such as 25%%");
			return -EINVAL;
		}
		snprintf(buf, sizeof(buf), "%s%s", v, v[len - 1] == '%' ? "" : "%");
		if (ts_size_parse(buf, true, &sz, why, whylen))
			return -EINVAL;
		o->dval = sz.percent;
		return 0;
	}
	case TIER_OPT_T_SIZE:
		if (ts_size_parse(v, false, &sz, why, whylen))
			return -EINVAL;
		o->size = sz.bytes;
		return 0;
	}
	snprintf(why, whylen, "bad option type");
	return -EINVAL;
}

static int options_print_table(FILE *out);

static void apply_log_settings(void)
{
	atomic_store(&ts_log_level_g, (int)g_opts[TIER_OPT_LOG].ival);
	atomic_store(&ts_log_mask_g, (uint32_t)g_opts[TIER_OPT_LOG_SUBSYS].ival);
}

static void options_load(void)
{
	char why[256];
	/* Warnings about bad values are collected and logged once the log
	 * level itself is known. */
	char warnings[TIER_OPT__COUNT][1024];
	char infos[TIER_OPT__COUNT][512];

	for (int i = 0; i < TIER_OPT__COUNT; i++) {
		struct ts_option *o = &g_opts[i];
		const char *v;

		warnings[i][0] = infos[i][0] = '\0';
		o->from_env = false;
		if (opt_parse(o, o->def, why, sizeof(why)) != 0)
			abort(); /* a bad default is a bug in the table */
		v = getenv(o->env);
		if (!v)
			continue;
		if (opt_parse(o, v, why, sizeof(why)) != 0) {
			snprintf(warnings[i], sizeof(warnings[i]),
				 "invalid %s='%.200s%s' (%s); keeping the default '%s'",
				 o->env, v, strlen(v) > 200 ? "..." : "", why, o->def);
			opt_parse(o, o->def, why, sizeof(why));
			continue;
		}
		o->from_env = true;
		snprintf(infos[i], sizeof(infos[i]), "%s set by environment to '%.200s%s'", o->env,
			 v, strlen(v) > 200 ? "..." : "");
	}
	apply_log_settings();
	for (int i = 0; i < TIER_OPT__COUNT; i++) {
		if (warnings[i][0])
			TIER_WARN(TIER_SS_COMMON, "%s", warnings[i]);
		if (infos[i][0])
			TIER_INFO(TIER_SS_COMMON, "%s", infos[i]);
	}
	if (g_opts[TIER_OPT_FAULT].sval[0]) {
		int rc = ts_fault_arm_spec(g_opts[TIER_OPT_FAULT].sval);

		if (rc)
			TIER_WARN(TIER_SS_COMMON, "%s", tier_last_error());
		ts_err_clear();
	}
	if (ts_log_enabled(TIER_LL_DEBUG, TIER_SS_COMMON)) {
		char *buf = NULL;
		size_t len = 0;
		FILE *f = open_memstream(&buf, &len);

		if (f) {
			options_print_table(f);
			fclose(f);
			/* A line each: the table outgrows one log line. */
			TIER_DEBUG_LOG(TIER_SS_COMMON, "options:");
			for (char *save = NULL, *l = strtok_r(buf, "\n", &save); l;
			     l = strtok_r(NULL, "\n", &save))
				TIER_DEBUG_LOG(TIER_SS_COMMON, "  %s", l);
			free(buf);
		}
	}
}

void ts_options_init(void)
{
	pthread_once(&g_once, options_load);
}

void ts_options_reload(void)
{
	ts_options_init();
	options_load();
}

__attribute__((constructor)) static void options_ctor(void)
{
	ts_options_init();
}

long long ts_opt_int(enum ts_opt_id id)
{
	ts_options_init();
	return g_opts[id].ival;
}

double ts_opt_percent(enum ts_opt_id id)
{
	ts_options_init();
	return g_opts[id].dval;
}

uint64_t ts_opt_size(enum ts_opt_id id)
{
	ts_options_init();
	return g_opts[id].size;
}

const char *ts_opt_str(enum ts_opt_id id)
{
	ts_options_init();
	return g_opts[id].sval;
}

bool ts_opt_from_env(enum ts_opt_id id)
{
	ts_options_init();
	return g_opts[id].from_env;
}

const char *ts_opt_name(enum ts_opt_id id)
{
	return g_opts[id].name;
}

const char *ts_opt_env(enum ts_opt_id id)
{
	return g_opts[id].env;
}

static void opt_value_str(const struct ts_option *o, char *buf, size_t len)
{
	switch (o->type) {
	case TIER_OPT_T_ENUM: {
		const char *p = o->choices;

		for (long long i = 0; i < o->ival && *p; i++) {
			p += strcspn(p, "|");
			if (*p == '|')
				p++;
		}
		snprintf(buf, len, "%.*s", (int)strcspn(p, "|"), p);
		return;
	}
	case TIER_OPT_T_SUBSYS: {
		size_t off = 0;

		if ((uint32_t)o->ival == TIER_SS_ALL) {
			snprintf(buf, len, "all");
			return;
		}
		buf[0] = '\0';
		for (int i = 0; i < TIER_SSB__COUNT && off < len; i++)
			if (o->ival & (1ll << i))
				off += (size_t)snprintf(buf + off, len - off, "%s%s",
							off ? "," : "",
							ts_subsys_name(1u << i));
		return;
	}
	case TIER_OPT_T_STRING:
		snprintf(buf, len, "%s", o->sval);
		return;
	case TIER_OPT_T_INT:
		snprintf(buf, len, "%lld", o->ival);
		return;
	case TIER_OPT_T_PERCENT:
		snprintf(buf, len, "%g%%", o->dval);
		return;
	case TIER_OPT_T_SIZE:
		snprintf(buf, len, "%llu", (unsigned long long)o->size);
		return;
	}
	buf[0] = '\0';
}

int tier_options_print(FILE *out)
{
	TS_NONNULL(out);
	ts_options_init();
	return options_print_table(out);
}

/* The table as it stands: called from inside options_load() too. */
static int options_print_table(FILE *out)
{
	static const char *const type_names[] = {
		[TIER_OPT_T_ENUM] = "enum", [TIER_OPT_T_SUBSYS] = "subsys",
		[TIER_OPT_T_STRING] = "string", [TIER_OPT_T_INT] = "int",
		[TIER_OPT_T_PERCENT] = "percent", [TIER_OPT_T_SIZE] = "size",
	};
	char val[1100];

	fprintf(out, "%-22s %-8s %-14s %-8s %s\n", "ENV", "TYPE", "VALUE", "SOURCE", "DESCRIPTION");
	for (int i = 0; i < TIER_OPT__COUNT; i++) {
		const struct ts_option *o = &g_opts[i];

		opt_value_str(o, val, sizeof(val));
		fprintf(out, "%-22s %-8s %-14s %-8s %s\n", o->env, type_names[o->type],
			val[0] ? val : "\"\"", o->from_env ? "env" : "default", o->desc);
	}
	if (ferror(out))
		return ts_err(-EIO, "writing the options table failed");
	return 0;
}
