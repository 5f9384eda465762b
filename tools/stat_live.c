/*
 * stat_live.c - tier-stat's live view: reads the stats segments that open
 * stores publish (tierstore.h, "the live view") and prints them as a list,
 * a report per store, JSON or the Prometheus text format, once or every
 * -w seconds.  docs/tier-stat.md and tier-stat(1) describe the output.
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

#include "stat_live.h"
#include "tierstore.h"

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

/* ------------------------------------------------------------ formatting */

static const char *fmt_bytes(double v, char *buf, size_t len)
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

static const char *fmt_rate(double v, char *buf, size_t len)
{
	size_t n = strlen(fmt_bytes(v, buf, len));

	if (n + 3 <= len)
		memcpy(buf + n, "/s", 3);
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

static const char *fmt_uptime(uint64_t ns, char *buf, size_t len)
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
 * What a report shows of @s: the counters, with rates and latency
 * percentiles either as published (over the publisher's last second, and
 * since open) or, under -w with a previous snapshot, over the interval.
 */
struct view {
	const struct tier_live_stats *st;
	double interval_s;         /* 0: as published */
	double in_Bps[TIER_LEVELS], out_Bps[TIER_LEVELS];
	double rd_Bps[TIER_LIVE_MAX_PATHS], wr_Bps[TIER_LIVE_MAX_PATHS];
	uint64_t p50[TIER_LIVE_MAX_PATHS], p99[TIER_LIVE_MAX_PATHS];
};

static void make_view(const struct seg *s, bool interval, struct view *v)
{
	const struct tier_live_stats *c = s->st, *p = s->prev;
	uint64_t hist[TIER_LAT_BUCKETS];

	memset(v, 0, sizeof(*v));
	v->st = c;
	if (interval && s->have_prev && c->mono_ns > p->mono_ns)
		v->interval_s = (double)(c->mono_ns - p->mono_ns) * 1e-9;
	for (int l = 0; l < TIER_LEVELS; l++) {
		v->in_Bps[l] = v->interval_s > 0 ? rate(c->level[l].bytes_in, p->level[l].bytes_in,
							 v->interval_s)
						  : c->level[l].in_Bps;
		v->out_Bps[l] = v->interval_s > 0 ? rate(c->level[l].bytes_out,
							  p->level[l].bytes_out, v->interval_s)
						   : c->level[l].out_Bps;
	}
	for (uint32_t i = 0; i < c->npaths && i < TIER_LIVE_MAX_PATHS; i++) {
		const struct tier_live_path *cp = &c->path[i], *pp = &p->path[i];

		if (v->interval_s > 0) {
			v->rd_Bps[i] = rate(cp->bytes_read, pp->bytes_read, v->interval_s);
			v->wr_Bps[i] = rate(cp->bytes_written, pp->bytes_written, v->interval_s);
			for (unsigned b = 0; b < TIER_LAT_BUCKETS; b++)
				hist[b] = cp->lat_hist[b] >= pp->lat_hist[b]
						  ? cp->lat_hist[b] - pp->lat_hist[b] : 0;
			v->p50[i] = tier_lat_quantile_ns(hist, 0.5);
			v->p99[i] = tier_lat_quantile_ns(hist, 0.99);
		} else {
			v->rd_Bps[i] = cp->read_Bps;
			v->wr_Bps[i] = cp->write_Bps;
			v->p50[i] = tier_lat_quantile_ns(cp->lat_hist, 0.5);
			v->p99[i] = tier_lat_quantile_ns(cp->lat_hist, 0.99);
		}
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
	printf("%-8s %-20s %-10s %-8s %-14s %s\n", "PID", "NAME", "UPTIME", "STEP", "STATE",
	       "SEGMENT");
	for (size_t i = 0; i < ss->n; i++) {
		const struct seg *s = &ss->v[i];
		const char *name = s->l ? s->info.name : "?";
		char step[24] = "-", up[24] = "-";

		if (s->l && !s->stale && !s->rc) {
			fmt_uptime(s->st->uptime_ns, up, sizeof(up));
			if (s->st->optim.present)
				snprintf(step, sizeof(step), "%" PRIu64, s->st->optim.step);
		}
		stale += s->stale;
		printf("%-8ld %-20s %-10s %-8s %-14s %s\n", s->pid, *name ? name : "\"\"", up, step,
		       seg_state(s, b1, sizeof(b1)), s->path);
	}
	if (stale)
		printf("%u stale segment%s (process gone): tier-stat --remove-stale removes %s\n", stale,
		       stale == 1 ? "" : "s", stale == 1 ? "it" : "them");
	return 0;
}

/* ---------------------------------------------------------------- report */

static void print_report(const struct seg *s, const struct view *v)
{
	const struct tier_live_stats *st = v->st;
	char b[8][32];
	double age = (double)(realtime_ns() - st->time_ns) * 1e-9;

	printf("store '%s'  pid %ld  up %s  objects %" PRIu64, s->info.name, s->pid,
	       fmt_uptime(st->uptime_ns, b[0], sizeof(b[0])), st->objects);
	if (v->interval_s > 0)
		printf("  (rates over %.2f s)\n", v->interval_s);
	else
		printf("  (published %.1f s ago)\n", age < 0 ? 0.0 : age);
	printf("%-5s %-8s %10s %10s %10s %10s %8s %10s %10s %10s %13s %13s\n", "TIER", "BACKEND",
	       "CAPACITY", "USED", "PINNED", "DIRTY", "OBJECTS", "HITS", "MISSES", "EVICTIONS",
	       "IN/s", "OUT/s");
	for (int l = 0; l < TIER_LEVELS; l++) {
		const struct tier_live_level *t = &st->level[l];

		if (!t->present)
			continue;
		printf("%-5s %-8s %10s %10s %10s %10s %8" PRIu64 " %10" PRIu64 " %10" PRIu64
		       " %10" PRIu64 " %13s %13s\n",
		       tier_level_name((enum tier_level)l), t->backend,
		       fmt_bytes((double)t->capacity, b[0], sizeof(b[0])),
		       fmt_bytes((double)t->used, b[1], sizeof(b[1])),
		       fmt_bytes((double)t->pinned, b[2], sizeof(b[2])),
		       fmt_bytes((double)t->dirty, b[3], sizeof(b[3])), t->objects, t->hits, t->misses,
		       t->evictions, fmt_rate(v->in_Bps[l], b[4], sizeof(b[4])),
		       fmt_rate(v->out_Bps[l], b[5], sizeof(b[5])));
	}
	if (st->npaths) {
		printf("%-5s %-28s %8s %10s %10s %13s %13s %9s %9s %6s %5s\n", "PATH", "FILE",
		       "INFLIGHT", "READ", "WRITTEN", "READ/s", "WRITE/s", "P50", "P99", "ERRORS",
		       "CSUM");
		for (uint32_t i = 0; i < st->npaths; i++) {
			const struct tier_live_path *p = &st->path[i];
			char f[32];
			size_t fl = strlen(p->file);

			/* the end of a long path says most */
			if (fl > 28) {
				memcpy(f, "...", 3);
				memcpy(f + 3, p->file + fl - 25, 26); /* 25 and the NUL */
			} else {
				memcpy(f, p->file, fl + 1);
			}
			printf("%-5u %-28s %8" PRIu64 " %10s %10s %13s %13s %9s %9s %6" PRIu64 " %5" PRIu64
			       "\n", i, f, p->inflight, fmt_bytes((double)p->bytes_read, b[0], 32),
			       fmt_bytes((double)p->bytes_written, b[1], 32),
			       fmt_rate(v->rd_Bps[i], b[2], 32), fmt_rate(v->wr_Bps[i], b[3], 32),
			       fmt_ns(v->p50[i], b[4], 32), fmt_ns(v->p99[i], b[5], 32), p->errors,
			       p->csum_errors);
		}
	}
	printf("prefetch: window %s, ahead %s in %" PRIu64 " shard%s, stall %.3f s in total (%s)\n",
	       fmt_bytes((double)st->prefetch.window_bytes, b[0], 32),
	       fmt_bytes((double)st->prefetch.ahead_bytes, b[1], 32), st->prefetch.shards_ahead,
	       st->prefetch.shards_ahead == 1 ? "" : "s", (double)st->prefetch.stall_ns * 1e-9,
	       st->prefetch.active ? "streaming" : "idle");
	if (st->optim.present)
		printf("optimizer: step %" PRIu64 " (%" PRIu64 " skipped), %" PRIu64 " params in %" PRIu64
		       " shards, %s of state, last step %.3f s (stall %.3f s), CPU share %.2f, loss scale %g, grad norm %g\n",
		       st->optim.step, st->optim.skipped, st->optim.params, st->optim.shards,
		       fmt_bytes((double)st->optim.state_bytes, b[0], 32),
		       (double)st->optim.last_step_ns * 1e-9, (double)st->optim.last_stall_ns * 1e-9,
		       st->optim.cpu_fraction, st->optim.loss_scale, st->optim.grad_norm);
	else
		printf("optimizer: none\n");
}

/* ------------------------------------------------------------------ JSON */

static void json_str(FILE *f, const char *s)
{
	fputc('"', f);
	for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
		switch (*p) {
		case '"': fputs("\\\"", f); break;
		case '\\': fputs("\\\\", f); break;
		case '\n': fputs("\\n", f); break;
		case '\r': fputs("\\r", f); break;
		case '\t': fputs("\\t", f); break;
		default:
			if (*p < 0x20)
				fprintf(f, "\\u%04x", *p);
			else
				fputc(*p, f);
		}
	}
	fputc('"', f);
}

/* A double as JSON: finite numbers in full precision, else null. */
static void json_num(FILE *f, double v)
{
	if (v != v || v > 1.7976931348623157e308 || v < -1.7976931348623157e308)
		fputs("null", f);
	else
		fprintf(f, "%.17g", v);
}

static void json_store(FILE *f, const struct seg *s, const struct view *v)
{
	const struct tier_live_stats *st;
	bool first = true;

	fprintf(f, "{\"pid\":%ld,\"segment\":%u,\"name\":", s->pid, s->n);
	json_str(f, s->l ? s->info.name : "");
	fputs(",\"path\":", f);
	json_str(f, s->path);
	if (!v) {
		fprintf(f, ",\"stale\":%s", s->stale ? "true" : "false");
		if (s->rc) {
			fputs(",\"error\":", f);
			json_str(f, s->err);
		}
		fputs("}", f);
		return;
	}
	st = v->st;
	fprintf(f, ",\"uid\":%" PRIu64 ",\"version\":%u,\"stale\":false,\"start_time_ns\":%" PRIu64
		",\"time_ns\":%" PRIu64 ",\"uptime_s\":", s->info.uid, s->info.version,
		s->info.start_ns, st->time_ns);
	json_num(f, (double)st->uptime_ns * 1e-9);
	fprintf(f, ",\"publishes\":%" PRIu64 ",\"objects\":%" PRIu64 ",\"stripe_unit\":%u",
		st->publishes, st->objects, st->stripe_unit);
	if (v->interval_s > 0) {
		fputs(",\"interval_seconds\":", f);
		json_num(f, v->interval_s);
	}
	fputs(",\"tiers\":{", f);
	for (int l = 0; l < TIER_LEVELS; l++) {
		const struct tier_live_level *t = &st->level[l];

		if (!t->present)
			continue;
		fprintf(f, "%s\"%s\":{\"backend\":", first ? "" : ",", tier_level_name((enum tier_level)l));
		first = false;
		json_str(f, t->backend);
		fprintf(f, ",\"capacity_bytes\":%" PRIu64 ",\"used_bytes\":%" PRIu64
			",\"pinned_bytes\":%" PRIu64 ",\"dirty_bytes\":%" PRIu64 ",\"objects\":%" PRIu64
			",\"hits\":%" PRIu64 ",\"misses\":%" PRIu64 ",\"evictions\":%" PRIu64
			",\"writebacks\":%" PRIu64 ",\"prefetches\":%" PRIu64 ",\"errors\":%" PRIu64
			",\"bytes_in\":%" PRIu64 ",\"bytes_out\":%" PRIu64 ",\"in_bytes_per_second\":",
			t->capacity, t->used, t->pinned, t->dirty, t->objects, t->hits, t->misses,
			t->evictions, t->writebacks, t->prefetches, t->errors, t->bytes_in, t->bytes_out);
		json_num(f, v->in_Bps[l]);
		fputs(",\"out_bytes_per_second\":", f);
		json_num(f, v->out_Bps[l]);
		fputs("}", f);
	}
	fputs("},\"paths\":[", f);
	for (uint32_t i = 0; i < st->npaths; i++) {
		const struct tier_live_path *p = &st->path[i];

		fprintf(f, "%s{\"index\":%u,\"file\":", i ? "," : "", i);
		json_str(f, p->file);
		fprintf(f, ",\"inflight\":%" PRIu64 ",\"reads\":%" PRIu64 ",\"writes\":%" PRIu64
			",\"bytes_read\":%" PRIu64 ",\"bytes_written\":%" PRIu64 ",\"errors\":%" PRIu64
			",\"checksum_errors\":%" PRIu64 ",\"latency_count\":%" PRIu64
			",\"latency_sum_seconds\":", p->inflight, p->reads, p->writes, p->bytes_read,
			p->bytes_written, p->errors, p->csum_errors, p->lat_count);
		json_num(f, (double)p->lat_sum_ns * 1e-9);
		fputs(",\"latency_p50_seconds\":", f);
		json_num(f, (double)v->p50[i] * 1e-9);
		fputs(",\"latency_p99_seconds\":", f);
		json_num(f, (double)v->p99[i] * 1e-9);
		fputs(",\"read_bytes_per_second\":", f);
		json_num(f, v->rd_Bps[i]);
		fputs(",\"write_bytes_per_second\":", f);
		json_num(f, v->wr_Bps[i]);
		fputs("}", f);
	}
	fprintf(f, "],\"prefetch\":{\"streaming\":%s,\"window_bytes\":%" PRIu64
		",\"ahead_bytes\":%" PRIu64 ",\"shards_ahead\":%" PRIu64 ",\"stall_seconds\":",
		st->prefetch.active ? "true" : "false", st->prefetch.window_bytes,
		st->prefetch.ahead_bytes, st->prefetch.shards_ahead);
	json_num(f, (double)st->prefetch.stall_ns * 1e-9);
	fputs("},\"optimizer\":", f);
	if (st->optim.present) {
		fprintf(f, "{\"step\":%" PRIu64 ",\"skipped_steps\":%" PRIu64 ",\"params\":%" PRIu64
			",\"shards\":%" PRIu64 ",\"state_bytes\":%" PRIu64 ",\"last_step_seconds\":",
			st->optim.step, st->optim.skipped, st->optim.params, st->optim.shards,
			st->optim.state_bytes);
		json_num(f, (double)st->optim.last_step_ns * 1e-9);
		fputs(",\"last_stall_seconds\":", f);
		json_num(f, (double)st->optim.last_stall_ns * 1e-9);
		fputs(",\"cpu_fraction\":", f);
		json_num(f, st->optim.cpu_fraction);
		fputs(",\"loss_scale\":", f);
		json_num(f, st->optim.loss_scale);
		fputs(",\"grad_norm\":", f);
		json_num(f, st->optim.grad_norm);
		fputs("}", f);
	} else {
		fputs("null", f);
	}
	fputs(",\"manifest\":", f);
	json_str(f, s->info.manifest ? s->info.manifest : "");
	fputs("}", f);
}

/* ------------------------------------------------------------ Prometheus */

static void prom_label(FILE *f, const char *k, const char *v)
{
	fprintf(f, ",%s=\"", k);
	for (const char *p = v; *p; p++) {
		if (*p == '\\' || *p == '"')
			fputc('\\', f);
		if (*p == '\n')
			fputs("\\n", f);
		else
			fputc(*p, f);
	}
	fputc('"', f);
}

static void prom_base(FILE *f, const char *metric, const struct seg *s)
{
	fprintf(f, "%s{pid=\"%ld\"", metric, s->pid);
	prom_label(f, "store", s->info.name);
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

enum fam_kind { F_STORE, F_TIER, F_PATH, F_PREFETCH, F_OPTIM };

struct family {
	const char *name, *type, *help;
	enum fam_kind kind;
	int field;
};

/* The value of family field @k for one store (and level or path). */
static double fam_value(int k, const struct tier_live_stats *st, int idx)
{
	const struct tier_live_level *t = idx >= 0 && idx < TIER_LEVELS ? &st->level[idx] : NULL;
	const struct tier_live_path *p = idx >= 0 ? &st->path[idx] : NULL;

	switch (k) {
	case 0: return (double)st->uptime_ns * 1e-9;
	case 1: return (double)st->objects;
	case 10: return (double)t->capacity;
	case 11: return (double)t->used;
	case 12: return (double)t->pinned;
	case 13: return (double)t->dirty;
	case 14: return (double)t->objects;
	case 15: return (double)t->hits;
	case 16: return (double)t->misses;
	case 17: return (double)t->evictions;
	case 18: return (double)t->writebacks;
	case 19: return (double)t->prefetches;
	case 20: return (double)t->errors;
	case 21: return (double)t->bytes_in;
	case 22: return (double)t->bytes_out;
	case 23: return t->in_Bps;
	case 24: return t->out_Bps;
	case 30: return (double)p->inflight;
	case 31: return (double)p->reads;
	case 32: return (double)p->writes;
	case 33: return (double)p->bytes_read;
	case 34: return (double)p->bytes_written;
	case 35: return (double)p->errors;
	case 36: return (double)p->csum_errors;
	case 40: return (double)st->prefetch.window_bytes;
	case 41: return (double)st->prefetch.ahead_bytes;
	case 42: return (double)st->prefetch.shards_ahead;
	case 43: return (double)st->prefetch.active;
	case 44: return (double)st->prefetch.stall_ns * 1e-9;
	case 50: return (double)st->optim.step;
	case 51: return (double)st->optim.skipped;
	case 52: return (double)st->optim.last_step_ns * 1e-9;
	case 53: return (double)st->optim.last_stall_ns * 1e-9;
	case 54: return st->optim.cpu_fraction;
	case 55: return st->optim.loss_scale;
	case 56: return st->optim.grad_norm;
	case 57: return (double)st->optim.state_bytes;
	}
	return 0;
}

static const struct family g_fams[] = {
	{ "tierstore_uptime_seconds", "gauge", "Time since the store opened.", F_STORE, 0 },
	{ "tierstore_objects", "gauge", "Objects in the store.", F_STORE, 1 },
	{ "tierstore_tier_capacity_bytes", "gauge", "Capacity of the tier.", F_TIER, 10 },
	{ "tierstore_tier_used_bytes", "gauge", "Bytes in slots (NVMe: allocated).", F_TIER, 11 },
	{ "tierstore_tier_pinned_bytes", "gauge", "Bytes of pinned objects.", F_TIER, 12 },
	{ "tierstore_tier_dirty_bytes", "gauge", "Bytes newer than the tier below.", F_TIER, 13 },
	{ "tierstore_tier_objects", "gauge", "Objects resident on the tier.", F_TIER, 14 },
	{ "tierstore_tier_hits_total", "counter", "Acquires that found the object resident.", F_TIER, 15 },
	{ "tierstore_tier_misses_total", "counter", "Acquires that had to fill the object.", F_TIER, 16 },
	{ "tierstore_tier_evictions_total", "counter", "Objects evicted from the tier.", F_TIER, 17 },
	{ "tierstore_tier_writebacks_total", "counter", "Write-backs of dirty bytes to the tier below.", F_TIER, 18 },
	{ "tierstore_tier_prefetches_total", "counter", "Fills started by a prefetch.", F_TIER, 19 },
	{ "tierstore_tier_errors_total", "counter", "Failed fills and write-backs.", F_TIER, 20 },
	{ "tierstore_tier_in_bytes_total", "counter", "Bytes filled into the tier from below (NVMe: written to the devices).", F_TIER, 21 },
	{ "tierstore_tier_out_bytes_total", "counter", "Bytes written back below (NVMe: read from the devices).", F_TIER, 22 },
	{ "tierstore_tier_in_bytes_per_second", "gauge", "Fill rate over the last second.", F_TIER, 23 },
	{ "tierstore_tier_out_bytes_per_second", "gauge", "Write-back rate over the last second.", F_TIER, 24 },
	{ "tierstore_nvme_path_inflight", "gauge", "Device operations submitted and not completed.", F_PATH, 30 },
	{ "tierstore_nvme_path_reads_total", "counter", "Read operations completed.", F_PATH, 31 },
	{ "tierstore_nvme_path_writes_total", "counter", "Write operations completed.", F_PATH, 32 },
	{ "tierstore_nvme_path_read_bytes_total", "counter", "Bytes read from the device.", F_PATH, 33 },
	{ "tierstore_nvme_path_written_bytes_total", "counter", "Bytes written to the device.", F_PATH, 34 },
	{ "tierstore_nvme_path_errors_total", "counter", "Device operations that failed.", F_PATH, 35 },
	{ "tierstore_nvme_path_checksum_errors_total", "counter", "Stripe units read back with a bad crc32c.", F_PATH, 36 },
	{ "tierstore_prefetch_window_bytes", "gauge", "The lookahead budget in DRAM.", F_PREFETCH, 40 },
	{ "tierstore_prefetch_ahead_bytes", "gauge", "State bytes acquired ahead of the update.", F_PREFETCH, 41 },
	{ "tierstore_prefetch_shards_ahead", "gauge", "Shards acquired and not yet updated.", F_PREFETCH, 42 },
	{ "tierstore_prefetch_streaming", "gauge", "1 while an optimizer step streams.", F_PREFETCH, 43 },
	{ "tierstore_prefetch_stall_seconds_total", "counter", "Time the update waited for state.", F_PREFETCH, 44 },
	{ "tierstore_optimizer_steps_total", "counter", "Optimizer steps applied.", F_OPTIM, 50 },
	{ "tierstore_optimizer_skipped_steps_total", "counter", "Steps skipped for an inf or nan gradient.", F_OPTIM, 51 },
	{ "tierstore_optimizer_last_step_seconds", "gauge", "Duration of the last step.", F_OPTIM, 52 },
	{ "tierstore_optimizer_last_stall_seconds", "gauge", "Stall of the last step.", F_OPTIM, 53 },
	{ "tierstore_optimizer_cpu_fraction", "gauge", "Share of the shards updated on the CPU.", F_OPTIM, 54 },
	{ "tierstore_optimizer_loss_scale", "gauge", "Loss scale of the next step.", F_OPTIM, 55 },
	{ "tierstore_optimizer_grad_norm", "gauge", "Unscaled gradient norm of the last step.", F_OPTIM, 56 },
	{ "tierstore_optimizer_state_bytes", "gauge", "Bytes of optimizer state.", F_OPTIM, 57 },
};

static bool readable(const struct seg *s)
{
	return s->l && !s->stale && !s->rc;
}

static void print_prometheus(const struct segs *ss, FILE *f)
{
	bool any = false;

	prom_head(f, "tierstore_info", "gauge", "A running store; the value is 1.");
	for (size_t i = 0; i < ss->n; i++) {
		if (!readable(&ss->v[i]))
			continue;
		prom_base(f, "tierstore_info", &ss->v[i]);
		fprintf(f, ",version=\"%u\"}", ss->v[i].info.version);
		prom_val(f, 1);
		any = true;
	}
	for (size_t k = 0; any && k < sizeof(g_fams) / sizeof(g_fams[0]); k++) {
		const struct family *fm = &g_fams[k];
		bool head = false;

		for (size_t i = 0; i < ss->n; i++) {
			const struct seg *s = &ss->v[i];
			const struct tier_live_stats *st = s->st;
			int n = 1;

			if (!readable(s))
				continue;
			if (fm->kind == F_OPTIM && !st->optim.present)
				continue;
			if (fm->kind == F_TIER)
				n = TIER_LEVELS;
			if (fm->kind == F_PATH)
				n = (int)st->npaths;
			for (int j = 0; j < n; j++) {
				if (fm->kind == F_TIER && !st->level[j].present)
					continue;
				if (!head) {
					prom_head(f, fm->name, fm->type, fm->help);
					head = true;
				}
				prom_base(f, fm->name, s);
				if (fm->kind == F_TIER) {
					prom_label(f, "tier", tier_level_name((enum tier_level)j));
					prom_label(f, "backend", st->level[j].backend);
				} else if (fm->kind == F_PATH) {
					fprintf(f, ",path=\"%d\"", j);
					prom_label(f, "file", st->path[j].file);
				}
				fputc('}', f);
				prom_val(f, fam_value(fm->field, st, fm->kind == F_TIER || fm->kind == F_PATH ? j : -1));
			}
		}
	}
	/* the latency summary, since the store opened */
	for (size_t i = 0, head = 0; any && i < ss->n; i++) {
		const struct seg *s = &ss->v[i];

		if (!readable(s))
			continue;
		for (uint32_t j = 0; j < s->st->npaths; j++) {
			const struct tier_live_path *p = &s->st->path[j];
			static const double qs[] = { 0.5, 0.99 };

			if (!head++)
				prom_head(f, "tierstore_nvme_path_latency_seconds", "summary",
					  "Device operation latency, submission to completion, since the store opened.");
			for (int q = 0; q < 2; q++) {
				prom_base(f, "tierstore_nvme_path_latency_seconds", s);
				fprintf(f, ",path=\"%u\"", j);
				prom_label(f, "file", p->file);
				fprintf(f, ",quantile=\"%g\"}", qs[q]);
				prom_val(f, p->lat_count ? (double)tier_lat_quantile_ns(p->lat_hist, qs[q]) * 1e-9
						 : (double)NAN);
			}
			prom_base(f, "tierstore_nvme_path_latency_seconds_sum", s);
			fprintf(f, ",path=\"%u\"", j);
			prom_label(f, "file", p->file);
			fputc('}', f);
			prom_val(f, (double)p->lat_sum_ns * 1e-9);
			prom_base(f, "tierstore_nvme_path_latency_seconds_count", s);
			fprintf(f, ",path=\"%u\"", j);
			prom_label(f, "file", p->file);
			fputc('}', f);
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
		printf("removed %s (process %ld, store '%s')\n", s->path, s->pid, s->info.name);
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
				fprintf(stderr, "tier-stat: store '%s' of process %ld has closed\n",
					s->info.name, s->pid);
				s->rc = -ENOENT;
				continue;
			}
			seg_read(s);
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
