/*
 * publish.c - the stats publisher of a store, and the reader side of the
 * public live view (tierstore/live.h; docs/tier-stat.md).
 *
 * The publisher is one thread per store.  Every TIER_STATS_INTERVAL ms it
 * takes the store's counters (tier_store_get_stats: a short hold of the
 * store's lock, the same as any caller's), each NVMe path's counters
 * (relaxed atomic loads) and the optimizer's feed, derives the rates over
 * the last second from a ring of earlier samples, and publishes the whole
 * struct tier_live_stats through the segment's seqlock.  Nothing on a hot
 * path waits for it: the counters it reads are kept anyway (store, NVMe
 * totals) or are relaxed atomic adds (per path, the feed).  It also takes
 * the NVMe tier's last commit (tier_store_committed), so a commit shows at
 * the next publish.  What it copies
 * from the store's stats and from the feed follows from the counter lists
 * (the entries of src stats and feed).
 */
#include "config.h"

#include <errno.h>
#include <stddef.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/error.h"
#include "common/fault.h"
#include "common/log.h"
#include "common/options.h"
#include "runtime/publish.h"
#include "runtime/manifest/manifest.h"
#include "formats/statseg.h"
#include "runtime/open.h"
#include "tiers/store.h"

_Static_assert(TIER_LIVE_VERSION == STATSEG_VERSION,
	       "the payload layout is part of the segment's version");

/*
 * No padding anywhere in the payload: each structure is its fixed fields
 * and then its list's fields, back to back, so the offsets follow from the
 * lists (docs/tier-stat.md) and the payload is whole 8-byte words.  A
 * change of size is told to readers by tier_live_stats.size; one that
 * keeps the size bumps TIER_LIVE_VERSION.
 */
#define ENTRY_SIZE(name, type, ...) + ENTRY_SIZE_##type
#define ENTRY_SIZE_u64 8
#define ENTRY_SIZE_double 8
#define ENTRY_SIZE_hist (8 * TIER_LAT_BUCKETS)
_Static_assert(sizeof(struct tier_live_level) == 24 TIER_LIVE_LEVEL_COUNTERS(ENTRY_SIZE),
	       "padding in tier_live_level");
_Static_assert(sizeof(struct tier_live_path) == 256 TIER_LIVE_PATH_COUNTERS(ENTRY_SIZE),
	       "padding in tier_live_path");
_Static_assert(sizeof(struct tier_live_prefetch) == 0 TIER_LIVE_PREFETCH_COUNTERS(ENTRY_SIZE),
	       "padding in tier_live_prefetch");
_Static_assert(sizeof(struct tier_live_optim) == 8 TIER_LIVE_OPTIM_COUNTERS(ENTRY_SIZE),
	       "padding in tier_live_optim");
_Static_assert(offsetof(struct tier_live_stats, npaths) == 8 TIER_LIVE_STORE_COUNTERS(ENTRY_SIZE) &&
	       offsetof(struct tier_live_stats, level) == offsetof(struct tier_live_stats, npaths) + 8 &&
	       offsetof(struct tier_live_stats, path) ==
		       offsetof(struct tier_live_stats, level) +
			       TIER_LEVELS * sizeof(struct tier_live_level) +
			       sizeof(struct tier_live_prefetch) + sizeof(struct tier_live_optim) &&
	       offsetof(struct tier_live_stats, path) % 8 == 0,
	       "padding in tier_live_stats");

/*
 * The publisher's copy of one list entry into @dst: from the field of the
 * same name of @rec, the store's stats (src stats), the feed (src feed) or
 * a path's counters (src nvme, tier_nvme_get_path_stats); the rates (src
 * pub) are worked out after.
 */
#define COPY_stats(type, dst, rec, name) (dst)->name = (rec)->name;
#define COPY_feed(type, dst, rec, name) (dst)->name = feed_##type(&(rec)->name);
#define COPY_nvme(type, dst, rec, name) COPY_NVME_##type(dst, rec, name)
#define COPY_NVME_u64(dst, rec, name) (dst)->name = (rec)->name;
#define COPY_NVME_hist(dst, rec, name) memcpy((dst)->name, (rec)->name, sizeof((dst)->name));
#define COPY_pub(type, dst, rec, name)
#define COPY(name, type, unit, kind, src, ...) COPY_##src(type, dst, rec, name)

#define RATE_WINDOW_NS 1000000000ull /* "current" bandwidth: over the last second */
#define RING 64                      /* samples kept for it */

struct sample {
	uint64_t mono_ns;
	uint64_t in[TIER_LEVELS], out[TIER_LEVELS];
	uint64_t rd[TIER_LIVE_MAX_PATHS], wr[TIER_LIVE_MAX_PATHS];
};

struct live {
	struct tier_store *store;
	struct statseg *seg;
	uint32_t npaths;              /* the path records the segment holds */
	struct live_feed feed;
	uint64_t open_ns;             /* CLOCK_MONOTONIC */
	uint64_t interval_ns;

	pthread_mutex_t pub_lock;     /* one publish at a time; guards what follows */
	struct tier_live_stats snap;  /* the payload being built */
	struct sample ring[RING];
	unsigned nring, head;
	uint64_t publishes;

	pthread_mutex_t lock;         /* stop, cond */
	pthread_cond_t cond;
	bool stop;
	pthread_t thread;
	bool thread_ok;
};

void live_set_double(_Atomic uint64_t *w, double v)
{
	uint64_t b;

	memcpy(&b, &v, sizeof(b));
	atomic_store_explicit(w, b, memory_order_relaxed);
}

static double feed_double(_Atomic uint64_t *w)
{
	uint64_t b = atomic_load_explicit(w, memory_order_relaxed);
	double v;

	memcpy(&v, &b, sizeof(v));
	return v;
}

static uint64_t feed_u64(_Atomic uint64_t *w)
{
	return atomic_load_explicit(w, memory_order_relaxed);
}

static double rate(uint64_t now_v, uint64_t then_v, double dt)
{
	return now_v >= then_v && dt > 0 ? (double)(now_v - then_v) / dt : 0.0;
}

/* Path @i's counters into the segment's record of it. */
static void path_copy(struct tier_nvme *nvme, unsigned i, struct tier_live_path *dst)
{
	struct tier_nvme_path_stats ps;
	const struct tier_nvme_path_stats *rec = &ps;

	tier_nvme_get_path_stats(nvme, i, &ps);
	memcpy(dst->file, ps.file, sizeof(dst->file));
	TIER_LIVE_PATH_COUNTERS(COPY)
}

/* Builds l->snap from the store's counters now.  pub_lock held. */
static void gather(struct live *l)
{
	struct tier_live_stats *o = &l->snap;
	struct tier_store_stats st;
	struct tier_nvme *nvme = tier_store_nvme(l->store);
	struct sample *cur, *then = NULL;
	struct live_feed *f = &l->feed;

	memset(o, 0, sizeof(*o));
	tier_store_get_stats(l->store, &st);
	o->version = TIER_LIVE_VERSION;
	o->size = (uint32_t)sizeof(*o);
	o->time_ns = ts_wall_ns();
	o->mono_ns = ts_now_ns();
	o->uptime_ns = o->mono_ns - l->open_ns;
	o->publishes = l->publishes + 1;
	{
		struct tier_live_stats *dst = o;
		const struct tier_store_stats *rec = &st;

		TIER_LIVE_STORE_COUNTERS(COPY)
	}
	for (int i = 0; i < TIER_LEVELS; i++) {
		const struct tier_level_stats *rec = &st.level[i];
		struct tier_live_level *dst = &o->level[i];

		dst->present = rec->present;
		if (!rec->present)
			continue;
		memcpy(dst->backend, rec->backend, sizeof(dst->backend));
		dst->backend[sizeof(dst->backend) - 1] = '\0';
		TIER_LIVE_LEVEL_COUNTERS(COPY)
	}
	if (nvme) {
		struct tier_nvme_stats ns;
		struct tier_commit_info ci;

		/* the last commit: a short hold of the tier's lock, like its
		 * stats below (a commit in progress holds it to the end) */
		if (tier_store_committed(l->store, &ci) == 0) {
			o->commit_generation = ci.generation;
			o->commit_time_ns = ci.time_ns;
			o->commits_kept = ci.kept;
			o->commit_oldest = ci.oldest;
		}

		tier_nvme_get_stats(nvme, &ns);
		/* no more than the segment was sized for: what is published
		 * beyond its payload is not in the file, and npaths must not
		 * claim it */
		o->npaths = ns.npaths < l->npaths ? ns.npaths : l->npaths;
		o->stripe_unit = ns.stripe_unit;
		for (uint32_t p = 0; p < o->npaths; p++)
			path_copy(nvme, p, &o->path[p]);
	}
	{
		struct tier_live_prefetch *dst = &o->prefetch;
		struct live_feed_prefetch *rec = &f->prefetch;

		TIER_LIVE_PREFETCH_COUNTERS(COPY)
	}
	{
		struct tier_live_optim *dst = &o->optim;
		struct live_feed_optim *rec = &f->optim;

		dst->present = feed_u64(&rec->present);
		TIER_LIVE_OPTIM_COUNTERS(COPY)
	}

	/* Rates: against the newest sample at least a second old, else the
	 * oldest there is. */
	for (unsigned k = 0; k < l->nring; k++) {
		struct sample *c = &l->ring[(l->head + RING - 1 - k) % RING];

		then = c;
		if (o->mono_ns - c->mono_ns >= RATE_WINDOW_NS)
			break;
	}
	cur = &l->ring[l->head];
	cur->mono_ns = o->mono_ns;
	for (int i = 0; i < TIER_LEVELS; i++) {
		cur->in[i] = o->level[i].bytes_in;
		cur->out[i] = o->level[i].bytes_out;
	}
	for (uint32_t p = 0; p < TIER_LIVE_MAX_PATHS; p++) {
		cur->rd[p] = o->path[p].bytes_read;
		cur->wr[p] = o->path[p].bytes_written;
	}
	if (then) {
		double dt = (double)(cur->mono_ns - then->mono_ns) * 1e-9;

		for (int i = 0; i < TIER_LEVELS; i++) {
			o->level[i].in_Bps = rate(cur->in[i], then->in[i], dt);
			o->level[i].out_Bps = rate(cur->out[i], then->out[i], dt);
		}
		for (uint32_t p = 0; p < o->npaths; p++) {
			o->path[p].read_Bps = rate(cur->rd[p], then->rd[p], dt);
			o->path[p].write_Bps = rate(cur->wr[p], then->wr[p], dt);
		}
	}
	l->head = (l->head + 1) % RING;
	if (l->nring < RING)
		l->nring++;
}

static void publish(struct live *l)
{
	pthread_mutex_lock(&l->pub_lock);
	gather(l);
	statseg_publish(l->seg, &l->snap);
	l->publishes++;
	pthread_mutex_unlock(&l->pub_lock);
}

static void *live_main(void *arg)
{
	struct live *l = arg;

	pthread_mutex_lock(&l->lock);
	while (!l->stop) {
		struct timespec ts;
		uint64_t due;

		pthread_mutex_unlock(&l->lock);
		publish(l);
		pthread_mutex_lock(&l->lock);
		due = ts_now_ns() + l->interval_ns; /* the cond waits on CLOCK_MONOTONIC */
		ts.tv_sec = (time_t)(due / 1000000000ull);
		ts.tv_nsec = (long)(due % 1000000000ull);
		while (!l->stop && pthread_cond_timedwait(&l->cond, &l->lock, &ts) != ETIMEDOUT)
			;
	}
	pthread_mutex_unlock(&l->lock);
	return NULL;
}

void live_stop(struct live *l)
{
	if (!l)
		return;
	if (l->thread_ok) {
		pthread_mutex_lock(&l->lock);
		l->stop = true;
		pthread_cond_signal(&l->cond);
		pthread_mutex_unlock(&l->lock);
		pthread_join(l->thread, NULL);
	}
	statseg_close(l->seg);
	pthread_cond_destroy(&l->cond);
	pthread_mutex_destroy(&l->lock);
	pthread_mutex_destroy(&l->pub_lock);
	free(l);
}

static char *manifest_yaml(const struct tier_manifest *m)
{
	char *buf = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&buf, &len);

	if (!f)
		return NULL;
	if (tier_manifest_emit(m, f) != 0) {
		fclose(f);
		free(buf);
		return NULL;
	}
	if (fclose(f) != 0) {
		free(buf);
		return NULL;
	}
	return buf;
}

static atomic_flag g_warned = ATOMIC_FLAG_INIT;

struct live *live_start(struct tier_store *s, const struct tier_manifest *m)
{
#if TIER_STATS_BUILD
	const struct tiers_cfg *cfg = &m->tiers;
	struct statseg_rank rank;
	struct live *l;
	char *yaml;
	int rc;

	if (ts_opt_int(TIER_OPT_STATS) == 0)
		return NULL;
	l = ts_calloc(1, sizeof(*l));
	if (!l) {
		rc = ts_err(-ENOMEM, "stats segment for store '%s': out of memory", cfg->name);
		goto warn;
	}
	/* a manifest not made by the parser (world 0) has no rank to say */
	rank = (struct statseg_rank){ m->rank.rank, m->rank.local_rank, m->rank.world_size,
				      m->rank.local_world_size };
	yaml = manifest_yaml(m);
	/* the payload up to the last path the manifest has */
	l->npaths = cfg->npaths < TIER_LIVE_MAX_PATHS ? cfg->npaths : TIER_LIVE_MAX_PATHS;
	rc = statseg_create_rank(cfg->name, yaml ? yaml : "",
				 offsetof(struct tier_live_stats, path) +
					 l->npaths * sizeof(struct tier_live_path),
				 m->rank.world_size >= 1 ? &rank : NULL, &l->seg);
	free(yaml);
	if (rc) {
		free(l);
		goto warn;
	}
	l->store = s;
	l->open_ns = ts_now_ns();
	l->interval_ns = (uint64_t)ts_opt_int(TIER_OPT_STATS_INTERVAL) * 1000000ull;
	pthread_mutex_init(&l->pub_lock, NULL);
	pthread_mutex_init(&l->lock, NULL);
	{
		pthread_condattr_t ca;

		pthread_condattr_init(&ca);
		pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
		pthread_cond_init(&l->cond, &ca);
		pthread_condattr_destroy(&ca);
	}
	rc = pthread_create(&l->thread, NULL, live_main, l);
	if (rc) {
		rc = ts_err(-rc, "stats publisher for store '%s': pthread_create: %s", cfg->name,
			      tier_strerror(rc));
		live_stop(l);
		goto warn;
	}
	l->thread_ok = true;
	TIER_INFO(TIER_SS_STATS, "store '%s' publishes its counters in %s", cfg->name,
		  statseg_path(l->seg));
	return l;
warn:
	/* once per process: the next store would fail the same way */
	if (!atomic_flag_test_and_set(&g_warned))
		TIER_WARN(TIER_SS_STATS, "store '%s': %s; the store runs without a stats segment "
			  "(tier-stat will not see it; TIER_STATS=off silences this)", cfg->name,
			  tier_last_error());
	else
		TIER_INFO(TIER_SS_STATS, "store '%s': %s; the store runs without a stats segment",
			  cfg->name, tier_last_error());
	ts_err_clear();
	return NULL;
#else
	(void)s;
	(void)m;
	return NULL;
#endif
}

struct live_feed *live_feed(struct tier_store *s)
{
	struct live *l = s ? rstore_live(s) : NULL;

	return l ? &l->feed : NULL;
}

/* ------------------------------------------------------------ public API */

const char *tier_store_stats_path(const struct tier_store *s)
{
	TS_NONNULL_OR(s, NULL);
	struct live *l = s ? rstore_live(s) : NULL;

	return l ? statseg_path(l->seg) : NULL;
}

int tier_store_publish_stats(struct tier_store *s)
{
	TS_NONNULL(s);
	struct live *l = s ? rstore_live(s) : NULL;

	if (!l)
		return ts_err(-ENOENT, "the store publishes no stats segment (TIER_STATS=off, "
				"a build without stats, or its creation failed)");
	publish(l);
	return 0;
}

const char *tier_live_dir(void)
{
	return statseg_dir();
}

int tier_live_list(const char *dir, int (*cb)(const char *path, void *arg), void *arg)
{
	TS_NONNULL(cb);
	if (!cb)
		return ts_err(-EINVAL, "tier_live_list: no callback");
	return statseg_list(dir, cb, arg);
}

struct tier_live {
	struct statseg_view *v;
	size_t payload;
};

int tier_live_open(const char *path, struct tier_live **out)
{
	TS_NONNULL(path);
	TS_NONNULL(out);
	struct statseg_view *v = NULL;
	struct tier_live *l;
	size_t ps, fixed = offsetof(struct tier_live_stats, path);
	int rc;

	if (!out || !path)
		return ts_err(-EINVAL, "tier_live_open: %s", path ? "no result pointer" : "no path");
	*out = NULL;
	rc = statseg_open(path, &v);
	if (rc)
		return rc;
	ps = (size_t)statseg_view_header(v)->payload_size;
	if (ps < fixed || ps > sizeof(struct tier_live_stats) ||
	    (ps - fixed) % sizeof(struct tier_live_path)) {
		unsigned version = statseg_view_header(v)->version;

		statseg_view_close(v);
		return ts_err(-EPROTO, "%s: a payload of %zu bytes in layout version %u; this build "
				"reads version %u: %zu bytes and %zu per NVMe path, up to %u paths",
				path, ps, version, TIER_LIVE_VERSION, fixed,
				sizeof(struct tier_live_path), TIER_LIVE_MAX_PATHS);
	}
	l = ts_calloc(1, sizeof(*l));
	if (!l) {
		statseg_view_close(v);
		return ts_err(-ENOMEM, "%s: out of memory", path);
	}
	l->v = v;
	l->payload = ps;
	*out = l;
	return 0;
}

int tier_live_read(const struct tier_live *l, struct tier_live_stats *out)
{
	TS_NONNULL(l);
	TS_NONNULL(out);
	int rc;

	if (!l || !out)
		return ts_err(-EINVAL, "tier_live_read: %s", l ? "no result pointer" : "no segment");
	memset(out, 0, sizeof(*out));
	rc = statseg_read(l->v, out, l->payload);
	if (rc)
		return rc;
	if (out->publishes == 0 && out->version == 0 && out->size == 0)
		return 0; /* nothing published yet: all zero */
	if (out->version != TIER_LIVE_VERSION || out->size != sizeof(*out)) {
		uint32_t version = out->version, size = out->size;

		memset(out, 0, sizeof(*out));
		return ts_err(-EPROTO, "%s: a payload of layout version %u and size %u; this build "
				"reads version %u and size %zu", statseg_view_path(l->v), version,
				size, TIER_LIVE_VERSION, sizeof(*out));
	}
	if (out->npaths > (l->payload - offsetof(struct tier_live_stats, path)) /
			  sizeof(struct tier_live_path))
		return ts_err(-EBADMSG, "%s: %u NVMe paths claimed, room for fewer",
				statseg_view_path(l->v), out->npaths);
	return 0;
}

void tier_live_info(const struct tier_live *l, struct tier_live_info *out)
{
	TS_NONNULL_OR(l, );
	TS_NONNULL_OR(out, );
	const struct statseg_header *h = statseg_view_header(l->v);

	memset(out, 0, sizeof(*out));
	out->pid = (int64_t)h->pid;
	out->uid = h->uid;
	out->start_ns = h->start_ns;
	out->version = h->version;
	memcpy(out->name, h->name, sizeof(out->name));
	out->name[sizeof(out->name) - 1] = '\0';
	out->path = statseg_view_path(l->v);
	out->manifest = statseg_view_manifest(l->v);
	{
		struct statseg_rank r;

		if (statseg_view_rank(l->v, &r)) {
			out->rank = r.rank;
			out->local_rank = r.local_rank;
			out->world_size = r.world_size;
			out->local_world_size = r.local_world_size;
		} else {
			out->rank = out->local_rank = out->local_world_size = -1;
			out->world_size = 0;
		}
	}
}

bool tier_live_stale(const struct tier_live *l)
{
	TS_NONNULL_OR(l, false);
	return l && statseg_stale(l->v);
}

int tier_live_remove(struct tier_live *l)
{
	TS_NONNULL(l);
	const char *path;

	if (!l)
		return ts_err(-EINVAL, "tier_live_remove: no segment");
	path = statseg_view_path(l->v);
	if (!statseg_stale(l->v))
		return ts_err(-EBUSY, "%s: process %llu still runs; only a stale segment is removed",
				path, (unsigned long long)statseg_view_header(l->v)->pid);
	if (unlink(path) < 0) {
		int rc = -errno;

		return ts_err(rc, "%s: unlink: %s", path, tier_strerror(rc));
	}
	return 0;
}

void tier_live_close(struct tier_live *l)
{
	if (!l)
		return;
	statseg_view_close(l->v);
	free(l);
}
