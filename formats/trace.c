/*
 * trace.c - the step timeline (TIER_TRACE) in the Chrome trace event
 * format.
 *
 * Recording is cheap on purpose: trace_span() appends a fixed-size record
 * to one growable array under the trace's mutex (no I/O, amortised
 * allocation), because it is called from the store's event hook with other
 * locks held.  Everything else happens once, in trace_close():
 *
 *  1. the spans are sorted by group (the steps first, then each shard in
 *     order) and, within a group, by begin;
 *  2. each group's spans are laid out over tracks by interval partitioning:
 *     a span goes to the first of the group's tracks whose last span has
 *     ended by its begin, else to a new track.  Every track then holds
 *     disjoint spans, and a group gets as many tracks as its deepest
 *     overlap;
 *  3. each (group, track) gets the next tid, in group order, so tid 0 is
 *     the steps track and the viewer lists the shards in order (the
 *     thread_sort_index metadata says the same to viewers that sort by
 *     name otherwise);
 *  4. the JSON is written with buffered stdio: metadata ("M") events, then
 *     one complete ("X") event per span, ts and dur in microseconds since
 *     the earliest begin, printed from integer nanoseconds (exact to the
 *     third decimal).
 *
 * The file is opened (created, truncated) by trace_open(), so a bad path
 * is reported when tracing is asked for, not after the run.
 */
#include "config.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "common/fault.h"
#include "common/json.h"
#include "formats/trace.h"

#define TRACE_DEFAULT_MAX_SPANS (4ull << 20)
#define TRACE_FIRST_CAP 1024u

/* A shard number no real shard has: the group key of the step spans. */
#define GROUP_STEPS UINT64_MAX
#define GROUP_COMM (UINT64_MAX - 1)

struct span {
	uint64_t begin, end; /* ns, end >= begin */
	uint64_t step;
	uint64_t bytes;
	uint32_t shard;      /* 0 for TRACE_STEP */
	uint32_t tid;        /* assigned by trace_close() */
	uint8_t stage;       /* enum trace_stage */
};

/* A trace_name_shard() call; the last call for a shard wins. */
struct shard_name {
	uint32_t shard;
	uint32_t seq;        /* call order, to find the last one */
	char *name;          /* NULL: back to the default */
};

/* One tid's lane: its group and its place among the group's tracks. */
struct lane {
	uint64_t group;      /* a shard, or GROUP_STEPS */
	uint32_t index;      /* 0 for the group's first track */
};

struct trace {
	pthread_mutex_t lock;
	FILE *f;
	char *path;
	uint64_t max_spans;

	/* under lock: */
	struct span *spans;
	size_t nspans, cap;
	uint64_t dropped;
	struct shard_name *names;
	size_t nnames, names_cap;
};

static const char *const stage_names[TRACE__STAGES] = {
	[TRACE_STEP] = "step",
	[TRACE_NVME_READ] = "nvme_read",
	[TRACE_H2D] = "h2d",
	[TRACE_UPDATE_CPU] = "update_cpu",
	[TRACE_UPDATE_GPU] = "update_gpu",
	[TRACE_D2H] = "d2h",
	[TRACE_NVME_WRITE] = "nvme_write",
	[TRACE_STALL] = "stall",
	[TRACE_STAGING] = "staging",
	[TRACE_GRAD_IN] = "grad_in",
	[TRACE_KERNEL] = "kernel_gpu",
	[TRACE_OUT] = "out_d2h",
	[TRACE_COMM] = "comm",
};

const char *trace_stage_name(enum trace_stage stage)
{
	if ((unsigned)stage >= TRACE__STAGES)
		return "unknown";
	return stage_names[stage];
}

int trace_open(const char *path, uint64_t max_spans, struct trace **out)
{
	struct trace *t;
	int rc;

	if (!out)
		return ts_err(-EINVAL, "trace_open: no result pointer");
	*out = NULL;
	if (!path || !*path)
		return ts_err(-EINVAL, "trace_open: no file name");
	ts_err_clear();

	t = ts_calloc(1, sizeof(*t));
	if (!t)
		return ts_err(-ENOMEM, "trace %s: out of memory", path);
	t->max_spans = max_spans ? max_spans : TRACE_DEFAULT_MAX_SPANS;
	t->path = ts_strdup(path);
	if (!t->path) {
		rc = ts_err(-ENOMEM, "trace %s: out of memory", path);
		goto fail;
	}
	rc = pthread_mutex_init(&t->lock, NULL);
	if (rc) {
		rc = ts_err(-rc, "trace %s: pthread_mutex_init: %s", path, tier_strerror(rc));
		goto fail;
	}
	t->f = fopen(path, "we");
	if (!t->f) {
		int err = errno;

		rc = ts_err(-err, "trace %s: %s", path, tier_strerror(err));
		pthread_mutex_destroy(&t->lock);
		goto fail;
	}
	*out = t;
	return 0;

fail:
	free(t->path);
	free(t);
	return rc;
}

void trace_name_shard(struct trace *t, uint32_t shard, const char *name)
{
	char *copy = NULL;

	if (!t)
		return;
	/* Copied outside the lock; a failed copy leaves the default name. */
	if (name) {
		copy = ts_strdup(name);
		if (!copy)
			return;
	}
	pthread_mutex_lock(&t->lock);
	if (t->nnames == t->names_cap) {
		size_t cap = t->names_cap ? t->names_cap * 2 : 16;
		struct shard_name *n = ts_realloc(t->names, cap * sizeof(*n));

		if (!n) {
			pthread_mutex_unlock(&t->lock);
			free(copy);
			return;
		}
		t->names = n;
		t->names_cap = cap;
	}
	t->names[t->nnames] = (struct shard_name){
		.shard = shard, .seq = (uint32_t)t->nnames, .name = copy
	};
	t->nnames++;
	pthread_mutex_unlock(&t->lock);
}

void trace_span(struct trace *t, enum trace_stage stage, uint32_t shard, uint64_t step,
		uint64_t begin_ns, uint64_t end_ns, uint64_t bytes)
{
	struct span *s;

	if (!t || (unsigned)stage >= TRACE__STAGES)
		return;
	pthread_mutex_lock(&t->lock);
	if (t->nspans >= t->max_spans) {
		t->dropped++;
		goto out;
	}
	if (t->nspans == t->cap) {
		size_t cap = t->cap ? t->cap * 2 : TRACE_FIRST_CAP;
		struct span *n;

		if (cap > t->max_spans)
			cap = (size_t)t->max_spans;
		n = ts_realloc(t->spans, cap * sizeof(*n));
		if (!n) {
			/* Out of memory: this span is lost, and counted as such. */
			t->dropped++;
			goto out;
		}
		t->spans = n;
		t->cap = cap;
	}
	s = &t->spans[t->nspans++];
	*s = (struct span){
		.begin = begin_ns,
		.end = end_ns < begin_ns ? begin_ns : end_ns,
		.step = step,
		.bytes = bytes,
		.shard = stage == TRACE_STEP ? 0 : shard,
		.stage = (uint8_t)stage,
	};
out:
	pthread_mutex_unlock(&t->lock);
}

/* ------------------------------------------------------------- layout */

static uint64_t span_group(const struct span *s)
{
	return s->stage == TRACE_STEP ? GROUP_STEPS : s->stage == TRACE_COMM ? GROUP_COMM : s->shard;
}

/* Group order puts the steps first, then the collectives, then the shards
 * by number. */
static int group_cmp(uint64_t a, uint64_t b)
{
	if (a == b)
		return 0;
	if (a == GROUP_STEPS)
		return -1;
	if (b == GROUP_STEPS)
		return 1;
	if (a == GROUP_COMM)
		return -1;
	if (b == GROUP_COMM)
		return 1;
	return a < b ? -1 : 1;
}

#define CMP3(a, b) (((a) > (b)) - ((a) < (b)))

static int span_cmp(const void *pa, const void *pb)
{
	const struct span *a = pa, *b = pb;
	int c = group_cmp(span_group(a), span_group(b));

	if (c)
		return c;
	if (a->begin != b->begin)
		return CMP3(a->begin, b->begin);
	/* The shorter of two spans starting together first, so a zero-length
	 * span and one starting at the same time share a track. */
	if (a->end != b->end)
		return CMP3(a->end, b->end);
	if (a->stage != b->stage)
		return CMP3(a->stage, b->stage);
	return CMP3(a->step, b->step);
}

static int name_cmp(const void *pa, const void *pb)
{
	const struct shard_name *a = pa, *b = pb;

	if (a->shard != b->shard)
		return CMP3(a->shard, b->shard);
	return CMP3(a->seq, b->seq);
}

/*
 * Assigns every span its tid (spans sorted by span_cmp) and fills
 * @lanes_out[tid] with each tid's group and track.  Returns the number of
 * tids, or -ENOMEM.
 */
static long assign_tracks(struct trace *t, struct lane **lanes_out)
{
	uint64_t *last_end;  /* per track of the current group: its last span's end */
	struct lane *lanes;
	size_t nlanes = 0, lanes_cap = 16, tracks_cap = 16, i = 0;

	*lanes_out = NULL;
	lanes = ts_malloc(lanes_cap * sizeof(*lanes));
	last_end = ts_malloc(tracks_cap * sizeof(*last_end));
	if (!lanes || !last_end)
		goto nomem;
	/* The steps track always exists (tid 0), even with no step spans. */
	lanes[nlanes++] = (struct lane){ .group = GROUP_STEPS, .index = 0 };

	while (i < t->nspans) {
		uint64_t group = span_group(&t->spans[i]);
		/* The steps group sorts first, so its tracks are tids 0, 1, ... */
		size_t first_tid = group == GROUP_STEPS ? 0 : nlanes;
		size_t ntracks = 0;

		if (group == GROUP_STEPS) {
			last_end[0] = 0;
			ntracks = 1;
		}
		for (; i < t->nspans && span_group(&t->spans[i]) == group; i++) {
			struct span *s = &t->spans[i];
			size_t k;

			for (k = 0; k < ntracks; k++)
				if (last_end[k] <= s->begin)
					break;
			if (k == ntracks) {
				if (ntracks == tracks_cap) {
					size_t cap = tracks_cap * 2;
					uint64_t *n = ts_realloc(last_end, cap * sizeof(*n));

					if (!n)
						goto nomem;
					last_end = n;
					tracks_cap = cap;
				}
				if (nlanes == lanes_cap) {
					size_t cap = lanes_cap * 2;
					struct lane *n = ts_realloc(lanes, cap * sizeof(*n));

					if (!n)
						goto nomem;
					lanes = n;
					lanes_cap = cap;
				}
				lanes[nlanes++] = (struct lane){ .group = group, .index = (uint32_t)k };
				ntracks++;
			}
			last_end[k] = s->end;
			s->tid = (uint32_t)(first_tid + k);
		}
	}
	free(last_end);
	*lanes_out = lanes;
	return (long)nlanes;

nomem:
	free(last_end);
	free(lanes);
	return -ENOMEM;
}

/* ------------------------------------------------------------- writing */

/* json_escape()'s output into the trace file. */
static void put_file(void *f, const char *text, size_t len)
{
	fwrite(text, 1, len, f);
}

/*
 * Writes @s as the inside of a JSON string (common/json.c): quotes and
 * backslashes escaped, control characters (DEL too) as \n, \t... or
 * \u00XX, and bytes that are not UTF-8 as U+FFFD, so any name gives a file
 * every JSON parser reads.
 */
static void json_str_body(FILE *f, const char *s)
{
	json_escape(s, JSON_ESC_DEL, put_file, f);
}

/* Nanoseconds as microseconds with three decimals, exactly. */
static void json_us(FILE *f, uint64_t ns)
{
	fprintf(f, "%" PRIu64 ".%03u", ns / 1000, (unsigned)(ns % 1000));
}

/* The name a lane shows: the shard's name (or "shard K"), with " (2)"
 * after it on the shard's second track, and so on. */
static void lane_name(FILE *f, const struct lane *l, const char *shard_name)
{
	fputc('"', f);
	if (l->group == GROUP_STEPS)
		fputs("steps", f);
	else if (l->group == GROUP_COMM)
		fputs("collectives", f);
	else if (shard_name)
		json_str_body(f, shard_name);
	else
		fprintf(f, "shard %" PRIu64, l->group);
	if (l->index)
		fprintf(f, " (%" PRIu32 ")", l->index + 1);
	fputc('"', f);
}

static void write_metadata(struct trace *t, const struct lane *lanes, size_t nlanes)
{
	size_t ni = 0;

	fputs("{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":1,\"tid\":0,"
	      "\"args\":{\"name\":\"tierstore\"}}", t->f);
	fputs(",\n{\"name\":\"process_sort_index\",\"ph\":\"M\",\"pid\":1,\"tid\":0,"
	      "\"args\":{\"sort_index\":1}}", t->f);
	for (size_t tid = 0; tid < nlanes; tid++) {
		const struct lane *l = &lanes[tid];
		const char *name = NULL;

		/* Names are sorted by (shard, call order) and lanes by group:
		 * one walk finds each shard's last name. */
		if (l->group != GROUP_STEPS && l->group != GROUP_COMM) {
			while (ni < t->nnames && t->names[ni].shard < l->group)
				ni++;
			for (size_t k = ni; k < t->nnames && t->names[k].shard == l->group; k++)
				name = t->names[k].name;
		}
		fprintf(t->f, ",\n{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":1,\"tid\":%zu,"
			"\"args\":{\"name\":", tid);
		lane_name(t->f, l, name);
		fputs("}}", t->f);
		fprintf(t->f, ",\n{\"name\":\"thread_sort_index\",\"ph\":\"M\",\"pid\":1,"
			"\"tid\":%zu,\"args\":{\"sort_index\":%zu}}", tid, tid);
	}
}

static void write_spans(struct trace *t, uint64_t origin)
{
	for (size_t i = 0; i < t->nspans; i++) {
		const struct span *s = &t->spans[i];
		const char *name = stage_names[s->stage];

		/* Stage names are plain identifiers: no escaping needed. */
		fprintf(t->f, ",\n{\"name\":\"%s\",\"cat\":\"%s\",\"ph\":\"X\",\"pid\":1,"
			"\"tid\":%" PRIu32 ",\"ts\":", name, name, s->tid);
		json_us(t->f, s->begin - origin);
		fputs(",\"dur\":", t->f);
		json_us(t->f, s->end - s->begin);
		if (s->stage == TRACE_STEP)
			fprintf(t->f, ",\"args\":{\"step\":%" PRIu64 "}}", s->step);
		else if (s->stage == TRACE_COMM)
			fprintf(t->f, ",\"args\":{\"param\":%" PRIu32 ",\"step\":%" PRIu64
				",\"bytes\":%" PRIu64 "}}", s->shard, s->step, s->bytes);
		else
			fprintf(t->f, ",\"args\":{\"shard\":%" PRIu32 ",\"step\":%" PRIu64
				",\"bytes\":%" PRIu64 "}}", s->shard, s->step, s->bytes);
	}
}

static void trace_free(struct trace *t)
{
	for (size_t i = 0; i < t->nnames; i++)
		free(t->names[i].name);
	free(t->names);
	free(t->spans);
	free(t->path);
	pthread_mutex_destroy(&t->lock);
	free(t);
}

int trace_close(struct trace *t)
{
	struct lane *lanes = NULL;
	uint64_t origin = UINT64_MAX;
	long nlanes;
	int rc = 0;

	if (!t)
		return 0;
	/*
	 * The detail message is left alone unless this fails: the caller may
	 * be returning an earlier error of its own after closing the trace.
	 * Every recorder is done by contract; the lock orders their last
	 * writes before what follows.
	 */
	pthread_mutex_lock(&t->lock);
	pthread_mutex_unlock(&t->lock);

	for (size_t i = 0; i < t->nspans; i++)
		if (t->spans[i].begin < origin)
			origin = t->spans[i].begin;
	if (t->nspans)
		qsort(t->spans, t->nspans, sizeof(*t->spans), span_cmp);
	if (t->nnames)
		qsort(t->names, t->nnames, sizeof(*t->names), name_cmp);
	nlanes = assign_tracks(t, &lanes);
	if (nlanes < 0) {
		rc = ts_err((int)nlanes, "trace %s: out of memory laying out %zu spans",
			      t->path, t->nspans);
		fclose(t->f);
		goto out;
	}

	errno = 0;
	fputs("{\"traceEvents\":[\n", t->f);
	write_metadata(t, lanes, (size_t)nlanes);
	write_spans(t, origin);
	fprintf(t->f, "\n],\n\"displayTimeUnit\":\"ms\",\n"
		"\"otherData\":{\"version\":\"%s\",\"spans\":%zu,\"dropped_spans\":%" PRIu64 "}}\n",
		TIER_VERSION_STRING, t->nspans, t->dropped);
	if (fflush(t->f) != 0 || ferror(t->f)) {
		int err = errno ? errno : EIO;

		rc = ts_err(-err, "trace %s: writing: %s", t->path, tier_strerror(err));
	}
	if (fclose(t->f) != 0 && rc == 0) {
		int err = errno;

		rc = ts_err(-err, "trace %s: closing: %s", t->path, tier_strerror(err));
	}
out:
	free(lanes);
	trace_free(t);
	return rc;
}
