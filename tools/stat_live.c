/*
 * stat_live.c - tier-stat's live view: reads the stats segments that open
 * stores publish (tierstore/live.h) and prints them as a list, a report
 * per store, JSON or the Prometheus text format, once or every -w seconds.
 * The counters themselves are laid out by stat_fields.c, from the counter
 * lists.  docs/tier-stat.md and tier-stat(1) describe the output.
 *
 * Everything here goes through the public reader API (tier_live_*): the
 * tool sees exactly what any other reader would.
 */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "stat_fields.h"
#include "stat_live.h"
#include "tierstore/toolkit.h"

enum { EXIT_FAIL = 1, EXIT_USAGE = 2 };

/* One segment file found in the directory. */
struct seg {
	char *path;
	long pid;
	unsigned n;                /* the N of tierstore-PID-N.stats */
	struct tier_live *l;       /* NULL when it could not be opened */
	int rc;                    /* tier_live_open's or tier_live_read's error */
	char err[512];
	bool stale;
	struct tier_live_info info;
	struct tier_live_stats *st; /* the latest snapshot (running ones) */
	struct tier_live_stats *prev; /* the one before, under -w */
	bool have_prev;
};

struct segs {
	struct seg *v;
	size_t n, cap;
};

static volatile sig_atomic_t g_stop;

/* Sleeps @s seconds, or less when a signal stops the tool. */
static void sleep_s(double s)
{
	struct timespec ts = { (time_t)s, (long)((s - (double)(time_t)s) * 1e9) };

	while (!g_stop && nanosleep(&ts, &ts) != 0 && errno == EINTR)
		;
}

static void on_signal(int sig)
{
	(void)sig;
	g_stop = 1;
}

/* --------------------------------------------------------------- finding */

static bool parse_name(const char *path, long *pid, unsigned *n)
{
	const char *b = strrchr(path, '/');
	char *end;
	long p;
	unsigned long k;

	b = b ? b + 1 : path;
	if (strncmp(b, "tierstore-", 10) != 0)
		return false;
	p = strtol(b + 10, &end, 10);
	if (end == b + 10 || *end != '-' || p <= 0)
		return false;
	k = strtoul(end + 1, &end, 10);
	if (strcmp(end, ".stats") != 0)
		return false;
	*pid = p;
	*n = (unsigned)k;
	return true;
}

static int add_path(const char *path, void *arg)
{
	struct segs *ss = arg;
	struct seg *s;
	long pid;
	unsigned n;

	if (!parse_name(path, &pid, &n))
		return 0;
	if (ss->n == ss->cap) {
		size_t cap = ss->cap ? ss->cap * 2 : 8;
		struct seg *v = realloc(ss->v, cap * sizeof(*v));

		if (!v)
			return -ENOMEM;
		ss->v = v;
		ss->cap = cap;
	}
	s = &ss->v[ss->n];
	memset(s, 0, sizeof(*s));
	s->path = strdup(path);
	if (!s->path)
		return -ENOMEM;
	s->pid = pid;
	s->n = n;
	ss->n++;
	return 0;
}

static void seg_fail(struct seg *s, int rc)
{
	s->rc = rc;
	snprintf(s->err, sizeof(s->err), "%s", tier_last_error());
}

/* Reads one snapshot of @s (after open); keeps the previous one. */
static int seg_read(struct seg *s)
{
	struct tier_live_stats *t;
	int rc;

	if (!s->l || s->stale)
		return s->rc;
	if (!s->st) {
		s->st = calloc(1, sizeof(*s->st));
		s->prev = calloc(1, sizeof(*s->prev));
		if (!s->st || !s->prev) {
			snprintf(s->err, sizeof(s->err), "out of memory");
			return s->rc = -ENOMEM;
		}
	} else {
		t = s->prev;
		s->prev = s->st;
		s->st = t;
		s->have_prev = true;
	}
	rc = tier_live_read(s->l, s->st);
	if (rc)
		seg_fail(s, rc);
	return rc;
}

static void seg_open(struct seg *s)
{
	int rc = tier_live_open(s->path, &s->l);

	if (rc) {
		seg_fail(s, rc);
		return;
	}
	tier_live_info(s->l, &s->info);
	s->stale = tier_live_stale(s->l);
	if (!s->stale)
		seg_read(s);
}

static void segs_free(struct segs *ss)
{
	for (size_t i = 0; i < ss->n; i++) {
		tier_live_close(ss->v[i].l);
		free(ss->v[i].path);
		free(ss->v[i].st);
		free(ss->v[i].prev);
	}
	free(ss->v);
	memset(ss, 0, sizeof(*ss));
}

/* Lists and opens the segments of @dir (those of @pid, or all if 0). */
static int segs_load(const char *dir, long pid, long n, struct segs *ss)
{
	int rc = tier_live_list(dir, add_path, ss);

	if (rc) {
		fprintf(stderr, "tier-stat: %s\n", rc == -ENOMEM ? "out of memory" : tier_last_error());
		return rc;
	}
	for (size_t i = 0; i < ss->n; i++) {
		struct seg *s = &ss->v[i];

		if ((pid && s->pid != pid) || (n >= 0 && (long)s->n != n)) {
			free(s->path);
			ss->v[i--] = ss->v[--ss->n];
			continue;
		}
		seg_open(s);
	}
	/* the directory order was by name; keep it by pid, then N */
	for (size_t i = 1; i < ss->n; i++)
		for (size_t j = i; j > 0 && (ss->v[j - 1].pid > ss->v[j].pid ||
					     (ss->v[j - 1].pid == ss->v[j].pid &&
					      ss->v[j - 1].n > ss->v[j].n)); j--) {
			struct seg t = ss->v[j];

			ss->v[j] = ss->v[j - 1];
			ss->v[j - 1] = t;
		}
	return 0;
}

/* Why @s has no counters to show, for a line of text. */
static const char *seg_state(const struct seg *s, char *buf, size_t len)
{
	if (s->rc == -EACCES)
		return "other user";
	if (s->rc == -EPROTO)
		return "other version";
	if (s->rc == -EBADMSG)
		return "not a segment";
	if (s->rc == -ENOENT)
		return "closed";
	if (s->rc) {
		snprintf(buf, len, "unreadable (%s)", tier_strerror(s->rc));
		return buf;
	}
	return s->stale ? "stale" : "running";
}

/* ------------------------------------------------------------------ view */

static uint64_t realtime_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static double rate(uint64_t now, uint64_t then, double dt)
{
	return now >= then && dt > 0 ? (double)(now - then) / dt : 0.0;
}

/*
 * What a report shows of @s: the counters, with the rates and latency
 * histograms either as published (rates over the publisher's last second,
 * histograms since open) or, under -w with a previous snapshot, over the
 * interval.
 */
struct view {
	struct tier_live_stats st;
	double interval_s;         /* 0: as published */
};

static void make_view(const struct seg *s, bool interval, struct view *v)
{
	const struct tier_live_stats *c = s->st, *p = s->prev;
	double dt;

	v->st = *c;
	v->interval_s = 0;
	if (interval && s->have_prev && c->mono_ns > p->mono_ns)
		v->interval_s = (double)(c->mono_ns - p->mono_ns) * 1e-9;
	dt = v->interval_s;
	if (dt <= 0)
		return;
	for (int l = 0; l < TIER_LEVELS; l++) {
		v->st.level[l].in_Bps = rate(c->level[l].bytes_in, p->level[l].bytes_in, dt);
		v->st.level[l].out_Bps = rate(c->level[l].bytes_out, p->level[l].bytes_out, dt);
	}
	for (uint32_t i = 0; i < c->npaths && i < TIER_LIVE_MAX_PATHS; i++) {
		const struct tier_live_path *cp = &c->path[i], *pp = &p->path[i];
		struct tier_live_path *vp = &v->st.path[i];

		vp->read_Bps = rate(cp->bytes_read, pp->bytes_read, dt);
		vp->write_Bps = rate(cp->bytes_written, pp->bytes_written, dt);
		for (unsigned b = 0; b < TIER_LAT_BUCKETS; b++)
			vp->lat_hist[b] = cp->lat_hist[b] >= pp->lat_hist[b]
						  ? cp->lat_hist[b] - pp->lat_hist[b] : 0;
	}
}

/* ------------------------------------------------------------------ list */

static int print_list(const struct segs *ss, const char *dir)
{
	unsigned stale = 0;
	char b1[32];

	if (ss->n == 0) {
		printf("no running stores in %s\n", dir);
		return 0;
	}
	printf("%-8s %-20s %-9s %-10s %-8s %-8s %-14s %s\n", "PID", "NAME", "RANK", "UPTIME", "STEP",
	       "COMMIT", "STATE", "SEGMENT");
	for (size_t i = 0; i < ss->n; i++) {
		const struct seg *s = &ss->v[i];
		char name[4 * sizeof(s->info.name)] = "?";
		char step[24] = "-", up[24] = "-", gen[24] = "-", rank[32] = "-";

		if (s->l)
			stat_text(s->info.name, sizeof(s->info.name), name, sizeof(name));
		if (s->l && !s->stale && !s->rc) {
			stat_fmt_uptime(s->st->uptime_ns, up, sizeof(up));
			if (s->st->optim.present)
				snprintf(step, sizeof(step), "%" PRIu64, s->st->optim.step);
			if (s->st->commit_generation)
				snprintf(gen, sizeof(gen), "%" PRIu64, s->st->commit_generation);
		}
		if (s->l && s->info.world_size > 0)
			snprintf(rank, sizeof(rank), "%d/%d", (int)s->info.rank, (int)s->info.world_size);
		stale += s->stale;
		printf("%-8ld %-20s %-9s %-10s %-8s %-8s %-14s %s\n", s->pid, *name ? name : "\"\"",
		       rank, up, step, gen, seg_state(s, b1, sizeof(b1)), s->path);
	}
	if (stale)
		printf("%u stale segment%s (process gone): tier-stat --remove-stale removes %s\n", stale,
		       stale == 1 ? "" : "s", stale == 1 ? "it" : "them");
	return 0;
}

/* ---------------------------------------------------------------- report */

/* The report's commit line: "generation 7, 3.2 s ago (2 kept, oldest 6)",
 * or "none". */
static void print_commit(const struct tier_live_stats *st)
{
	char b[32];
	double age;

	fputs("commit: ", stdout);
	if (!st->commit_generation) {
		fputs("none\n", stdout);
		return;
	}
	age = (double)((int64_t)(realtime_ns() - st->commit_time_ns)) * 1e-9;
	if (age < 0)
		age = 0;
	if (age < 60)
		snprintf(b, sizeof(b), "%.1f s", age);
	else
		stat_fmt_uptime((uint64_t)(age * 1e9), b, sizeof(b));
	printf("generation %" PRIu64 ", %s ago (%" PRIu64 " kept, oldest %" PRIu64 ")\n",
	       st->commit_generation, b, st->commits_kept, st->commit_oldest);
}

static void print_report(const struct seg *s, const struct view *v)
{
	const struct tier_live_stats *st = &v->st;
	double age = (double)(realtime_ns() - st->time_ns) * 1e-9;
	char name[4 * sizeof(s->info.name)];

	printf("store '%s'  pid %ld", stat_text(s->info.name, sizeof(s->info.name), name, sizeof(name)),
	       s->pid);
	if (s->info.world_size > 0)
		printf("  rank %d of %d (local %d of %d)", (int)s->info.rank, (int)s->info.world_size,
		       (int)s->info.local_rank, (int)s->info.local_world_size);
	stat_text_line(stdout, STAT_STORE, st);
	if (v->interval_s > 0)
		printf("  (rates over %.2f s)\n", v->interval_s);
	else
		printf("  (published %.1f s ago)\n", age < 0 ? 0.0 : age);
	printf("%-5s %-8s", "TIER", "BACKEND");
	stat_text_cols(stdout, STAT_LEVEL, NULL);
	putchar('\n');
	for (unsigned l = 0; l < TIER_LEVELS; l++) {
		const struct tier_live_level *t = stat_group_rec(STAT_LEVEL, st, l);
		char b[4 * sizeof(t->backend)];

		if (!t)
			continue;
		printf("%-5s %-8s", tier_level_name((enum tier_level)l),
		       stat_text(t->backend, sizeof(t->backend), b, sizeof(b)));
		stat_text_cols(stdout, STAT_LEVEL, t);
		putchar('\n');
	}
	if (st->npaths) {
		printf("%-5s %-28s", "PATH", "FILE");
		stat_text_cols(stdout, STAT_PATH, NULL);
		putchar('\n');
	}
	for (uint32_t i = 0; i < stat_group_count(STAT_PATH, st); i++) {
		const struct tier_live_path *p = &st->path[i];
		char file[4 * sizeof(p->file)], f[32];
		size_t fl = strlen(stat_text(p->file, sizeof(p->file), file, sizeof(file)));

		/* the end of a long path says most (cut where a character starts) */
		if (fl > 28) {
			size_t from = fl - 25;

			while ((file[from] & 0xc0) == 0x80)
				from++;
			snprintf(f, sizeof(f), "...%s", file + from);
		} else {
			memcpy(f, file, fl + 1);
		}
		printf("%-5u %-28s", i, f);
		stat_text_cols(stdout, STAT_PATH, p);
		putchar('\n');
	}
	fputs("prefetch: ", stdout);
	stat_text_line(stdout, STAT_PREFETCH, &st->prefetch);
	fputs("\noptimizer: ", stdout);
	if (st->optim.present)
		stat_text_line(stdout, STAT_OPTIM, &st->optim);
	else
		fputs("none", stdout);
	putchar('\n');
	print_commit(st);
}

/* ------------------------------------------------------------------ JSON */

/* The JSON object of the records of group @g: {"KEY":{...},...} for the
 * levels, [{...},...] for the paths. */
static void json_records(FILE *f, enum stat_group_id g, const struct tier_live_stats *st)
{
	bool first = true;

	fputs(g == STAT_LEVEL ? "{" : "[", f);
	for (unsigned j = 0; j < stat_group_count(g, st); j++) {
		const void *rec = stat_group_rec(g, st, j);

		if (!rec)
			continue;
		if (g == STAT_LEVEL) {
			fprintf(f, "%s\"%s\":{\"backend\":", first ? "" : ",",
				tier_level_name((enum tier_level)j));
			json_out_strn(f, st->level[j].backend, sizeof(st->level[j].backend));
		} else {
			fprintf(f, "%s{\"index\":%u,\"file\":", first ? "" : ",", j);
			json_out_strn(f, st->path[j].file, sizeof(st->path[j].file));
		}
		first = false;
		stat_json_fields(f, g, rec, false);
		fputs("}", f);
	}
	fputs(g == STAT_LEVEL ? "}" : "]", f);
}

static void json_store(FILE *f, const struct seg *s, const struct view *v)
{
	const struct tier_live_stats *st;

	fprintf(f, "{\"pid\":%ld,\"segment\":%u,\"name\":", s->pid, s->n);
	json_out_strn(f, s->l ? s->info.name : "", sizeof(s->info.name));
	fputs(",\"path\":", f);
	json_out_str(f, s->path);
	if (!v) {
		fprintf(f, ",\"stale\":%s", s->stale ? "true" : "false");
		if (s->rc) {
			fputs(",\"error\":", f);
			json_out_str(f, s->err);
		}
		fputs("}", f);
		return;
	}
	st = &v->st;
	fprintf(f, ",\"uid\":%" PRIu64 ",\"version\":%u,\"stale\":false,\"start_time_ns\":%" PRIu64,
		s->info.uid, s->info.version, s->info.start_ns);
	if (s->info.world_size > 0)
		fprintf(f, ",\"rank\":%d,\"local_rank\":%d,\"world_size\":%d,\"local_world_size\":%d",
			(int)s->info.rank, (int)s->info.local_rank, (int)s->info.world_size,
			(int)s->info.local_world_size);
	else
		fputs(",\"rank\":null,\"local_rank\":null,\"world_size\":null,\"local_world_size\":null", f);
	stat_json_fields(f, STAT_STORE, st, false);
	fprintf(f, ",\"stripe_unit\":%u", st->stripe_unit);
	if (v->interval_s > 0) {
		fputs(",\"interval_seconds\":", f);
		stat_json_num(f, v->interval_s);
	}
	fputs(",\"tiers\":", f);
	json_records(f, STAT_LEVEL, st);
	fputs(",\"paths\":", f);
	json_records(f, STAT_PATH, st);
	fputs(",\"prefetch\":{", f);
	stat_json_fields(f, STAT_PREFETCH, &st->prefetch, true);
	fputs("},\"optimizer\":", f);
	if (st->optim.present) {
		fputs("{", f);
		stat_json_fields(f, STAT_OPTIM, &st->optim, true);
		fputs("}", f);
	} else {
		fputs("null", f);
	}
	fputs(",\"manifest\":", f);
	json_out_str(f, s->info.manifest ? s->info.manifest : "");
	fputs("}", f);
}

/* ------------------------------------------------------------ Prometheus */

/* The labels of every sample of store @s: pid, store and, when the store
 * says (a library from 0.4 on), its rank and world size. */
static void prom_base(FILE *f, const char *metric, const struct seg *s)
{
	fprintf(f, "%s{pid=\"%ld\"", metric, s->pid);
	stat_prom_label(f, "store", s->info.name, sizeof(s->info.name));
	if (s->info.world_size > 0)
		fprintf(f, ",rank=\"%d\",world_size=\"%d\"", (int)s->info.rank,
			(int)s->info.world_size);
}

static void prom_val(FILE *f, double v)
{
	if (v != v)
		fputs(" NaN\n", f);
	else if (v > 1.7976931348623157e308)
		fputs(" +Inf\n", f);
	else if (v < -1.7976931348623157e308)
		fputs(" -Inf\n", f);
	else
		fprintf(f, " %.17g\n", v);
}

static void prom_head(FILE *f, const char *name, const char *type, const char *help)
{
	fprintf(f, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

static bool readable(const struct seg *s)
{
	return s->l && !s->stale && !s->rc;
}

/* The labels of record @j of group @g after pid and store, and the '}'. */
static void prom_labels(FILE *f, enum stat_group_id g, const struct tier_live_stats *st,
			unsigned j)
{
	if (g == STAT_LEVEL) {
		stat_prom_label(f, "tier", tier_level_name((enum tier_level)j), SIZE_MAX);
		stat_prom_label(f, "backend", st->level[j].backend, sizeof(st->level[j].backend));
	} else if (g == STAT_PATH) {
		fprintf(f, ",path=\"%u\"", j);
		stat_prom_label(f, "file", st->path[j].file, sizeof(st->path[j].file));
	}
	fputc('}', f);
}

/* The family of list entry @d of group @g: a sample per record of every
 * readable store. */
static void prom_family(FILE *f, const struct segs *ss, enum stat_group_id g,
			const struct stat_field *d)
{
	bool head = false;
	char name[128];

	stat_prom_name(g, d, name, sizeof(name));
	for (size_t i = 0; i < ss->n; i++) {
		const struct seg *s = &ss->v[i];

		if (!readable(s))
			continue;
		for (unsigned j = 0; j < stat_group_count(g, s->st); j++) {
			const void *rec = stat_group_rec(g, s->st, j);

			if (!rec)
				continue;
			if (!head)
				prom_head(f, name, d->kind == STAT_K_counter ? "counter" : "gauge",
					  d->help);
			head = true;
			prom_base(f, name, s);
			prom_labels(f, g, s->st, j);
			prom_val(f, stat_prom_value(d, rec));
		}
	}
}

static void print_prometheus(const struct segs *ss, FILE *f)
{
	bool any = false;

	prom_head(f, "tierstore_info", "gauge", "A running store; the value is 1.");
	for (size_t i = 0; i < ss->n; i++) {
		if (!readable(&ss->v[i]))
			continue;
		prom_base(f, "tierstore_info", &ss->v[i]);
		fprintf(f, ",version=\"%u\"", ss->v[i].info.version);
		if (ss->v[i].info.world_size > 0)
			fprintf(f, ",local_rank=\"%d\",local_world_size=\"%d\"",
				(int)ss->v[i].info.local_rank, (int)ss->v[i].info.local_world_size);
		fputc('}', f);
		prom_val(f, 1);
		any = true;
	}
	for (int g = 0; any && g < STAT_GROUPS; g++)
		for (size_t k = 0; k < stat_groups[g].n; k++)
			if (*stat_groups[g].f[k].prom)
				prom_family(f, ss, (enum stat_group_id)g, &stat_groups[g].f[k]);
	/* the latency summary, since the store opened */
	for (size_t i = 0, head = 0; any && i < ss->n; i++) {
		const struct seg *s = &ss->v[i];

		if (!readable(s))
			continue;
		for (uint32_t j = 0; j < s->st->npaths; j++) {
			const struct tier_live_path *p = &s->st->path[j];

			if (!head++)
				prom_head(f, "tierstore_nvme_path_latency_seconds", "summary",
					  "Device operation latency, submission to completion, since the store opened.");
			for (int q = 0; q < STAT_QUANTILES; q++) {
				prom_base(f, "tierstore_nvme_path_latency_seconds", s);
				fprintf(f, ",path=\"%u\"", j);
				stat_prom_label(f, "file", p->file, sizeof(p->file));
				fprintf(f, ",quantile=\"%g\"}", stat_quantiles[q].q);
				prom_val(f, p->lat_count ? (double)tier_lat_quantile_ns(p->lat_hist,
											 stat_quantiles[q].q) * 1e-9
						 : (double)NAN);
			}
			prom_base(f, "tierstore_nvme_path_latency_seconds_sum", s);
			prom_labels(f, STAT_PATH, s->st, j);
			prom_val(f, (double)p->lat_sum_ns * 1e-9);
			prom_base(f, "tierstore_nvme_path_latency_seconds_count", s);
			prom_labels(f, STAT_PATH, s->st, j);
			prom_val(f, (double)p->lat_count);
		}
	}
}

/* ---------------------------------------------------------------- driver */

static int parse_target(const char *t, long *pid, long *n)
{
	char *end;

	*n = -1;
	errno = 0;
	*pid = strtol(t, &end, 10);
	if (errno || end == t || *pid <= 0)
		return -1;
	if (*end == '.') {
		const char *s = end + 1;

		*n = strtol(s, &end, 10);
		if (end == s || *n < 0)
			return -1;
	}
	return *end ? -1 : 0;
}

static const char *pid_hint(long pid)
{
	return kill((pid_t)pid, 0) == 0 || errno == EPERM ? "" : " (no such process)";
}

/* The error of a store asked for by PID that has no counters to show. */
static int target_error(const struct seg *s)
{
	if (s->stale) {
		fprintf(stderr, "tier-stat: %s: process %ld is gone: a stale segment; "
			"tier-stat --remove-stale removes it\n", s->path, s->pid);
		return EXIT_FAIL;
	}
	switch (s->rc) {
	case -EACCES:
		fprintf(stderr, "tier-stat: %s; run tier-stat as the user of process %ld\n", s->err,
			s->pid);
		break;
	case -EPROTO:
		fprintf(stderr, "tier-stat: %s; this tier-stat reads layout version %u\n", s->err,
			TIER_LIVE_VERSION);
		break;
	default:
		fprintf(stderr, "tier-stat: %s\n", *s->err ? s->err : tier_strerror(s->rc));
	}
	return EXIT_FAIL;
}

static int remove_stale(const struct segs *ss)
{
	char name[4 * sizeof(ss->v->info.name)];
	int rc = 0;
	unsigned n = 0;

	for (size_t i = 0; i < ss->n; i++) {
		const struct seg *s = &ss->v[i];

		if (!s->stale)
			continue;
		if (tier_live_remove(s->l)) {
			fprintf(stderr, "tier-stat: %s\n", tier_last_error());
			rc = EXIT_FAIL;
			continue;
		}
		printf("removed %s (process %ld, store '%s')\n", s->path, s->pid,
		       stat_text(s->info.name, sizeof(s->info.name), name, sizeof(name)));
		n++;
	}
	if (!n && !rc)
		printf("no stale segments\n");
	return rc;
}

/* One report of everything selected; under -w, @interval says to show
 * rates over the interval. */
static void report(const struct segs *ss, const struct stat_live_args *a, bool single,
		   bool interval)
{
	struct view *v = malloc(sizeof(*v));
	bool first = true;

	if (!v) {
		fprintf(stderr, "tier-stat: out of memory\n");
		return;
	}
	if (a->format == STAT_PROMETHEUS) {
		print_prometheus(ss, stdout);
	} else if (a->format == STAT_JSON) {
		if (!single)
			fputs("{\"stores\":[", stdout);
		for (size_t i = 0; i < ss->n; i++) {
			const struct seg *s = &ss->v[i];

			if (!first)
				fputc(',', stdout);
			first = false;
			if (readable(s)) {
				make_view(s, interval, v);
				json_store(stdout, s, v);
			} else {
				json_store(stdout, s, NULL);
			}
		}
		fputs(single ? "\n" : "]}\n", stdout);
	} else {
		for (size_t i = 0; i < ss->n; i++) {
			const struct seg *s = &ss->v[i];

			if (!readable(s))
				continue;
			if (!first)
				fputc('\n', stdout);
			first = false;
			make_view(s, interval, v);
			print_report(s, v);
		}
	}
	free(v);
	fflush(stdout);
}

static bool seg_closed(const struct seg *s)
{
	struct stat st;

	return stat(s->path, &st) != 0 || tier_live_stale(s->l);
}

int stat_live_run(const struct stat_live_args *a)
{
	const char *dir = a->dir ? a->dir : tier_live_dir();
	struct segs ss = { 0 };
	long pid = 0, n = -1;
	int rc = 0;

	if (a->target && parse_target(a->target, &pid, &n)) {
		fprintf(stderr, "tier-stat: '%s' is not a process id (PID, or PID.N for its N-th store)\n",
			a->target);
		return EXIT_USAGE;
	}
	if (a->watch_s > 0) {
		signal(SIGINT, on_signal);
		signal(SIGTERM, on_signal);
	}
	if (segs_load(dir, pid, n, &ss))
		return EXIT_FAIL;
	if (a->remove_stale) {
		rc = remove_stale(&ss);
		segs_free(&ss);
		if (stat_remove_stale_files(dir))
			rc = EXIT_FAIL;
		return rc;
	}
	if (pid) {
		if (ss.n == 0) {
			fprintf(stderr, "tier-stat: process %ld%s has no open store (no tierstore-%ld-%s.stats in %s)\n",
				pid, pid_hint(pid), pid, n >= 0 ? a->target + strcspn(a->target, ".") + 1 : "*",
				dir);
			segs_free(&ss);
			return EXIT_FAIL;
		}
		for (size_t i = 0; i < ss.n; i++)
			if (!readable(&ss.v[i]))
				rc = target_error(&ss.v[i]);
		if (rc) {
			segs_free(&ss);
			return rc;
		}
	}
	if (!pid && a->format == STAT_TABLE) {
		/* the list, once or refreshed */
		for (long k = 0;; k++) {
			if (k)
				fputc('\n', stdout);
			print_list(&ss, dir);
			fflush(stdout);
			if (a->watch_s <= 0 || (a->count && k + 1 >= a->count) || g_stop)
				break;
			sleep_s(a->watch_s);
			if (g_stop)
				break;
			segs_free(&ss);
			if (segs_load(dir, 0, -1, &ss))
				return EXIT_FAIL;
		}
		segs_free(&ss);
		return 0;
	}
	report(&ss, a, pid && ss.n == 1, false);
	for (long k = 1; a->watch_s > 0 && (!a->count || k < a->count) && !g_stop; k++) {
		bool left = false;

		sleep_s(a->watch_s);
		if (g_stop)
			break;
		for (size_t i = 0; i < ss.n; i++) {
			struct seg *s = &ss.v[i];

			if (!readable(s))
				continue;
			if (seg_closed(s)) {
				char name[4 * sizeof(s->info.name)];

				fprintf(stderr, "tier-stat: store '%s' of process %ld has closed\n",
					stat_text(s->info.name, sizeof(s->info.name), name, sizeof(name)),
					s->pid);
				s->rc = -ENOENT;
				continue;
			}
			/* A segment cut short or damaged since it was opened: said,
			 * and the exit status says so; the others go on. */
			if (seg_read(s)) {
				fprintf(stderr, "tier-stat: %s\n", s->err);
				rc = EXIT_FAIL;
				continue;
			}
			left = true;
		}
		if (!left)
			break;
		if (a->format == STAT_TABLE) {
			char t[64];
			time_t now = time(NULL);
			struct tm tm;

			localtime_r(&now, &tm);
			strftime(t, sizeof(t), "%H:%M:%S", &tm);
			printf("\n--- %s ---\n", t);
		}
		report(&ss, a, pid && ss.n == 1, true);
	}
	segs_free(&ss);
	return rc;
}
