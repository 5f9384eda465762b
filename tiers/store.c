/*
 * store.c - the tiered store: the object table, per-tier residency, pins,
 * eviction and write-back over the DRAM arena, an HBM backend and the NVMe
 * tier.  docs/store.md is the prose version of this file's contracts.
 *
 * Levels, top down: HBM (optional), DRAM, NVMe (the home; without NVMe
 * paths DRAM is the home and holds every object for good).  The hierarchy
 * is inclusive: an object with an HBM slot has a valid DRAM slot, so every
 * transfer is between adjacent levels: a fill copies level L+1 into L, a
 * flush (write-back) copies L into L+1.
 *
 * Per object and level above the home the state is
 *
 *   ABSENT --alloc--> FILLING --ok--> CLEAN --release dirty--> DIRTY
 *      ^                 |  error       ^                        |
 *      +-----------------+              +----ok---- FLUSHING <---+ flush
 *      +--------- (evicting) ok --------------------/   | error -> DIRTY
 *
 * and pins (read, write) and io pins (a transfer of the level above or
 * below uses this slot) keep a slot in place.  A write pin excludes pins
 * on other levels and copies above (they would go stale), and a flush
 * never starts while a write pin is held, so a transfer never copies bytes
 * a caller is changing.  The current bytes of an object are on the
 * highest level where it is dirty, else on any level that holds it; an
 * acquire on DRAM while HBM is dirty first writes HBM back.
 *
 * Concurrency: one mutex guards everything here.  Work that waits (an
 * acquire needing a fill or room, a flush) is a request on the pending
 * list; store_pump() re-evaluates the list after every event (a transfer
 * done, a release) until nothing changes.  Transfers are never issued with
 * the lock held (the NVMe tier and the HBM backends may call back on the
 * submitting thread when a submission fails): they are queued on s->todo
 * and issued by whoever drops the lock next (store_unlock_and_issue).
 * Requests that cannot be satisfied because every slot is pinned fail at
 * once with -ENOMEM, so nothing here waits on a caller's pin.
 *
 * The store is split over several files that share tiers/store_impl.h.
 * This one holds the object table, the public object functions and the
 * store's lifetime; the requests and their pump are in store_pump.c, the
 * resident lists, the schedule and victim choice in store_evict.c, the
 * transfers in store_xfer.c, the stats and the validator in store_stats.c.
 */
#include "config.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "common/fault.h"
#include "common/log.h"
#include "common/names.h"
#include "common/units.h"
#include "tiers/buddy.h"
#include "tiers/dram.h"
#include "tiers/hbm.h"
#include "tiers/nvme.h"
#include "tiers/store.h"
#include "tiers/store_impl.h"

#define OBJ_NAME_MAX 255
#define MAX_BLOCKS_LOG2 20   /* a level's slot allocator tracks at most 2^20 blocks */

const char *tier_level_name(enum tier_level level)
{
	switch (level) {
	case TIER_HBM: return "hbm";
	case TIER_DRAM: return "dram";
	case TIER_NVME: return "nvme";
	}
	return "?";
}

void store_emit(struct tier_store *s, enum store_event ev, enum tier_level l,
		const struct tier_obj *o)
{
	if (s->hook)
		s->hook(s->hook_arg, ev, l, o);
}

void store_set_hook(struct tier_store *s, store_hook fn, void *arg)
{
	pthread_mutex_lock(&s->lock);
	s->hook = fn;
	s->hook_arg = arg;
	pthread_mutex_unlock(&s->lock);
}

uint64_t store_slot_bytes(struct tier_store *s, enum tier_level l, const struct tier_obj *o)
{
	return buddy_slot_size(&s->lv[l].alloc, o->size);
}

const char *store_fmt_size(uint64_t b, char *buf, size_t len)
{
	return ts_size_fmt(b, buf, len);
}

/* ----------------------------------------------------------------- objects */

struct tier_obj *store_find_locked(struct tier_store *s, const char *name)
{
	struct tier_obj *o = s->hash[ts_names_hash(name) & (s->nbuckets - 1)];

	while (o && strcmp(o->name, name))
		o = o->hnext;
	return o;
}

static int hash_grow(struct tier_store *s)
{
	uint32_t n = s->nbuckets * 2;
	struct tier_obj **h;

	if (s->nbuckets > UINT32_MAX / 2)
		return 0; /* 2^31 buckets: the chains grow longer instead */
	h = ts_calloc(n, sizeof(*h));
	if (!h)
		return -ENOMEM;
	for (uint32_t i = 0; i < s->nbuckets; i++) {
		struct tier_obj *o = s->hash[i], *next;

		for (; o; o = next) {
			uint32_t b = ts_names_hash(o->name) & (n - 1);

			next = o->hnext;
			o->hnext = h[b];
			h[b] = o;
		}
	}
	free(s->hash);
	s->hash = h;
	s->nbuckets = n;
	return 0;
}

/*
 * Makes room in the object table and hash for one more object, and the
 * object named @name of @size (not yet placed).  Store locked.
 */
static int obj_new(struct tier_store *s, const char *name, uint64_t size, struct tier_obj **out)
{
	struct tier_obj *o;

	*out = NULL;
	if (s->nobjs == UINT32_MAX)
		return ts_err(-EOVERFLOW, "tier_obj_create: '%s': the store holds %u objects, the most a uint32_t counts",
			      name, s->nobjs);
	if (s->nobjs == s->objs_cap) {
		uint32_t cap = s->objs_cap > UINT32_MAX / 2 ? UINT32_MAX
			       : s->objs_cap ? s->objs_cap * 2 : 64;
		struct tier_obj **a = ts_realloc(s->objs, cap * sizeof(*a));

		if (!a)
			return ts_err(-ENOMEM, "out of memory creating '%s'", name);
		s->objs = a;
		s->objs_cap = cap;
	}
	if (s->nobjs >= s->nbuckets && hash_grow(s))
		return ts_err(-ENOMEM, "out of memory creating '%s'", name);
	o = ts_calloc(1, sizeof(*o));
	if (!o || !(o->name = ts_strdup(name))) {
		free(o);
		return ts_err(-ENOMEM, "out of memory creating '%s'", name);
	}
	o->s = s;
	o->size = size;
	*out = o;
	return 0;
}

/* Enters the placed object @o in the table and the hash.  Store locked. */
static void obj_insert(struct tier_store *s, struct tier_obj *o)
{
	uint32_t b = ts_names_hash(o->name) & (s->nbuckets - 1);

	o->idx = s->nobjs;
	s->objs[s->nobjs++] = o;
	o->hnext = s->hash[b];
	s->hash[b] = o;
}

int tier_obj_create(struct tier_store *s, const char *name, uint64_t size, struct tier_obj **out)
{
	STORE_ARG(s);
	TS_NONNULL(name);
	TS_NONNULL(out);
	struct tier_obj *o = NULL;
	int rc;

	*out = NULL;
	if (!name || !*name || strlen(name) > OBJ_NAME_MAX)
		return ts_err(-EINVAL, "object name must be 1 to %d bytes", OBJ_NAME_MAX);
	if (!size)
		return ts_err(-EINVAL, "'%s': size 0", name);
	pthread_mutex_lock(&s->lock);
	if (store_find_locked(s, name)) {
		rc = ts_err(-EEXIST, "object '%s' exists", name);
		goto out;
	}
	rc = obj_new(s, name, size, &o);
	if (rc)
		goto out;
	if (s->home == TIER_NVME) {
		rc = tier_nvme_obj_create(s->nvme, name, size, &o->nobj);
		if (rc)
			goto out;
	} else {
		char a[32], c[32];
		struct buddy_stats st;

		if (store_slot_bytes(s, TIER_DRAM, o) > s->lv[TIER_DRAM].capacity ||
		    buddy_alloc(&s->lv[TIER_DRAM].alloc, size, &o->lv[TIER_DRAM].off)) {
			buddy_stats(&s->lv[TIER_DRAM].alloc, &st);
			rc = ts_err(-ENOSPC,
				      "dram (the home: no nvme tier): no room for '%s' (%s); %s free, the largest slot %s",
				      name, store_fmt_size(size, a, sizeof(a)), store_fmt_size(st.free, c, sizeof(c)),
				      store_fmt_size(st.largest_free, a, sizeof(a)));
			goto out;
		}
		memset(s->dram_base + o->lv[TIER_DRAM].off, 0, size);
		store_resident_add(s, TIER_DRAM, o);
		o->lv[TIER_DRAM].st = ST_CLEAN;
	}
	obj_insert(s, o);
	*out = o;
	o = NULL;
	rc = 0;
out:
	pthread_mutex_unlock(&s->lock);
	if (o) {
		free(o->name);
		free(o);
	}
	return rc;
}

/* ----------------------------------------------------------- commits */

struct nobj_list {
	struct tier_nvme_obj **v;
	size_t n, cap;
	bool nomem;
};

static void nobj_collect(void *arg, struct tier_nvme_obj *no)
{
	struct nobj_list *l = arg;

	if (l->n == l->cap) {
		size_t cap = l->cap ? l->cap * 2 : 64;
		struct tier_nvme_obj **v = ts_realloc(l->v, cap * sizeof(*v));

		if (!v) {
			l->nomem = true;
			return;
		}
		l->v = v;
		l->cap = cap;
	}
	l->v[l->n++] = no;
}

/* The objects of a reopened NVMe tier (its last commit) become the
 * store's, at home only. */
static int adopt_committed(struct tier_store *s)
{
	struct nobj_list l = { 0 };
	int rc = 0;

	nvme_for_each_obj(s->nvme, nobj_collect, &l);
	if (l.nomem) {
		free(l.v);
		return ts_err(-ENOMEM, "store: out of memory adopting the committed objects");
	}
	pthread_mutex_lock(&s->lock);
	for (size_t i = 0; i < l.n && !rc; i++) {
		struct tier_obj *o;

		rc = obj_new(s, tier_nvme_obj_name(l.v[i]), tier_nvme_obj_size(l.v[i]), &o);
		if (rc)
			break;
		o->nobj = l.v[i];
		o->home_valid = nvme_obj_written(l.v[i]);
		obj_insert(s, o);
	}
	pthread_mutex_unlock(&s->lock);
	free(l.v);
	return rc;
}

int tier_store_commit(struct tier_store *s, const void *record, size_t len, uint64_t *gen)
{
	STORE_ARG(s);
	int rc = 0;

	if (len && !record)
		return ts_err_null(__func__, "record");
	if (gen)
		*gen = 0;
	if (s->home != TIER_NVME)
		return ts_err(-ENODEV, "store '%s': no NVMe tier, so nothing is durable: a commit needs the manifest's nvme paths",
			      s->name);
	for (int tries = 0;; tries++) {
		struct tier_obj *busy = NULL;
		const char *why = NULL;

		rc = store_flush_all(s, false);
		if (rc)
			return rc;
		pthread_mutex_lock(&s->lock);
		while (s->nxfers)
			pthread_cond_wait(&s->idle, &s->lock);
		for (uint32_t i = 0; i < s->nobjs && !busy; i++) {
			struct tier_obj *o = s->objs[i];

			for (int l = 0; l < TIER_LEVELS && !busy; l++) {
				if (l == (int)s->home)
					continue;
				if (o->lv[l].wpins)
					busy = o, why = "is pinned for write";
				else if (o->lv[l].st == ST_DIRTY || o->lv[l].st == ST_FLUSHING)
					busy = o, why = "was written again during the commit";
			}
		}
		if (!busy) {
			/* Nothing in flight, nothing dirty, and nothing can start
			 * while the lock is held: the home is the state. */
			rc = tier_nvme_commit(s->nvme, record, len, gen);
			pthread_mutex_unlock(&s->lock);
			return rc;
		}
		pthread_mutex_unlock(&s->lock);
		if (busy->lv[TIER_HBM].wpins || busy->lv[TIER_DRAM].wpins || tries == 3)
			return ts_err(-EBUSY, "store '%s': commit: object '%s' %s; a commit needs every object's bytes at home",
				      s->name, busy->name, why);
	}
}

int tier_store_committed(const struct tier_store *s, struct tier_commit_info *out)
{
	STORE_ARG(s);
	TS_NONNULL(out);
	memset(out, 0, sizeof(*out));
	if (s->home != TIER_NVME)
		return ts_err(-ENODEV, "store '%s': no NVMe tier: no commits", s->name);
	return tier_nvme_committed(s->nvme, out);
}

int tier_store_record(const struct tier_store *s, const void **record, size_t *len)
{
	STORE_ARG(s);
	TS_NONNULL(record);
	TS_NONNULL(len);
	*record = NULL;
	*len = 0;
	if (s->home != TIER_NVME)
		return ts_err(-ENODEV, "store '%s': no NVMe tier: no commits", s->name);
	return tier_nvme_record(s->nvme, record, len);
}

struct tier_obj *tier_obj_find(struct tier_store *s, const char *name)
{
	STORE_ARG_OR(s, NULL);
	TS_NONNULL_OR(name, NULL);
	struct tier_obj *o;

	pthread_mutex_lock(&s->lock);
	o = store_find_locked(s, name);
	pthread_mutex_unlock(&s->lock);
	return o;
}

uint64_t tier_obj_size(const struct tier_obj *o)
{
	TS_NONNULL_OR(o, 0);
	return o->size;
}

const char *tier_obj_name(const struct tier_obj *o)
{
	TS_NONNULL_OR(o, NULL);
	return o->name;
}

/* Removes @o's positions from the schedule and renumbers (lock held). */
static void sched_remove(struct tier_store *s, struct tier_obj *o)
{
	uint32_t j = 0;

	if (!o->npos) {
		/* not in the schedule now, but it may have been: its room goes */
		free(o->pos);
		o->pos = NULL;
		o->pos_cap = 0;
		return;
	}
	for (uint32_t i = 0; i < s->nsched; i++)
		if (s->sched[i] != o)
			s->sched[j++] = s->sched[i];
	s->nsched = j;
	for (uint32_t i = 0; i < s->nobjs; i++)
		s->objs[i]->npos = 0;
	for (uint32_t i = 0; i < s->nsched; i++) {
		struct tier_obj *x = s->sched[i];

		x->pos[x->npos++] = i; /* never more than before: no growth */
	}
	s->cursor = s->nsched ? s->nsched - 1 : 0;
	free(o->pos);
	o->pos = NULL;
	o->npos = o->pos_cap = 0;
}

static bool any_req(struct req *r, int arg)
{
	(void)r;
	(void)arg;
	return true;
}

int tier_obj_destroy(struct tier_store *s, struct tier_obj *o)
{
	STORE_ARG(s);
	TS_NONNULL(o);
	struct tier_nvme_obj *nobj;
	uint32_t b;

	pthread_mutex_lock(&s->lock);
	/* Its owner's record points at it, and the owner's next step (or its
	 * own destroy) would use it freed. */
	if (o->user) {
		pthread_mutex_unlock(&s->lock);
		return ts_err(-EBUSY, "'%s' belongs to an optimizer; tier_optim_destroy frees it",
			      o->name);
	}
	for (int l = 0; l < TIER_LEVELS; l++) {
		if (o->lv[l].rpins || o->lv[l].wpins) {
			pthread_mutex_unlock(&s->lock);
			return ts_err(-EBUSY, "'%s' is pinned on %s", o->name,
					tier_level_name((enum tier_level)l));
		}
	}
	o->destroying = true;
	store_rq_fail_obj(s, o, any_req, 0, 0, -ECANCELED, "the object was destroyed");
	while (o->busy)
		pthread_cond_wait(&s->idle, &s->lock);
	for (int l = 0; l < TIER_LEVELS; l++)
		if (s->lv[l].present && (l != TIER_NVME) && o->lv[l].st != ST_ABSENT)
			store_drop(s, o, (enum tier_level)l);
	sched_remove(s, o);
	s->objs[o->idx] = s->objs[--s->nobjs];
	s->objs[o->idx]->idx = o->idx;
	b = ts_names_hash(o->name) & (s->nbuckets - 1);
	for (struct tier_obj **pp = &s->hash[b]; *pp; pp = &(*pp)->hnext) {
		if (*pp == o) {
			*pp = o->hnext;
			break;
		}
	}
	nobj = o->nobj;
	s->changes++;
	store_pump(s);
	store_unlock_and_issue(s);
	if (nobj)
		tier_nvme_obj_destroy(s->nvme, nobj);
	free(o->name);
	free(o);
	return 0;
}

int tier_store_set_schedule(struct tier_store *s, struct tier_obj *const *objs, size_t n)
{
	STORE_ARG(s);
	if (n && !objs)
		return ts_err_null(__func__, "objs");
	struct tier_obj **sched = NULL;
	int rc = 0;

	if (n > UINT32_MAX - 1)
		return ts_err(-EINVAL, "schedule of %zu entries is too long", n);
	if (n && !(sched = ts_malloc(n * sizeof(*sched))))
		return ts_err(-ENOMEM, "out of memory for a schedule of %zu", n);
	pthread_mutex_lock(&s->lock);
	for (size_t i = 0; i < n; i++) {
		if (!objs[i] || objs[i]->s != s || objs[i]->destroying) {
			rc = ts_err(-EINVAL, "schedule entry %zu is not an object of this store", i);
			goto out;
		}
	}
	/* Room for every object's positions first, so nothing fails halfway. */
	for (size_t i = 0; i < n; i++)
		objs[i]->npos = 0;
	for (size_t i = 0; i < n; i++)
		objs[i]->npos++;
	for (size_t i = 0; i < n; i++) {
		struct tier_obj *o = objs[i];

		if (o->npos > o->pos_cap) {
			uint32_t *p = ts_realloc(o->pos, o->npos * sizeof(*p));

			if (!p) {
				rc = ts_err(-ENOMEM, "out of memory for the schedule");
				break;
			}
			o->pos = p;
			o->pos_cap = o->npos;
		}
	}
	for (uint32_t i = 0; i < s->nobjs; i++)
		s->objs[i]->npos = 0;
	if (rc) {
		/* the old schedule's positions are rebuilt below from s->sched */
		free(sched);
		sched = s->sched;
		n = s->nsched;
	} else {
		if (n) /* an empty schedule may come with objs NULL */
			memcpy(sched, objs, n * sizeof(*sched));
		free(s->sched);
	}
	s->sched = sched;
	s->nsched = (uint32_t)n;
	for (uint32_t i = 0; i < s->nsched; i++) {
		struct tier_obj *o = s->sched[i];

		o->pos[o->npos++] = i;
	}
	s->cursor = s->nsched ? s->nsched - 1 : 0;
	sched = NULL;
out:
	pthread_mutex_unlock(&s->lock);
	free(sched);
	return rc;
}

/* ---------------------------------------------------------------- lifetime */

bool tier_store_has_level(const struct tier_store *s, enum tier_level level)
{
	STORE_ARG_OR(s, false);
	return (unsigned)level < TIER_LEVELS && s->lv[level].present;
}

enum tier_level tier_store_home(const struct tier_store *s)
{
	STORE_ARG_OR(s, TIER_HBM);
	return s->home;
}

struct tier_nvme *tier_store_nvme(struct tier_store *s)
{
	STORE_ARG_OR(s, NULL);
	return s->nvme;
}

/* The slot allocator's block: at least 4 KiB (O_DIRECT), at most 2^20
 * blocks per level. */
static uint64_t min_block(uint64_t capacity)
{
	uint64_t b = 4096;

	while ((capacity >> MAX_BLOCKS_LOG2) > b)
		b <<= 1;
	return b;
}

static void store_free(struct tier_store *s)
{
	for (uint32_t i = 0; i < s->nobjs; i++) {
		free(s->objs[i]->pos);
		free(s->objs[i]->name);
		free(s->objs[i]);
	}
	free(s->objs);
	free(s->hash);
	free(s->sched);
	for (int l = 0; l < TIER_LEVELS; l++)
		if (s->lv[l].alloc.impl)
			buddy_fini(&s->lv[l].alloc);
	if (s->hdev)
		s->hops->close(s->hdev);
	if (s->nvme)
		tier_nvme_close(s->nvme);
	if (s->dram)
		dram_arena_close(s->dram);
	pthread_mutex_destroy(&s->lock);
	pthread_cond_destroy(&s->idle);
	s->magic = TS_MAGIC_DEAD;
	free(s);
}

static int open_hbm(struct tier_store *s, const struct tiers_cfg *cfg,
		    const struct tier_store_params *p)
{
	const char *name = p->hbm_backend;
	struct hbm_params hp = { 0 };
	uint64_t cap;
	int rc;

	if (!name)
		name = cfg->gpu >= 0 ? "cuda" : "none";
	if (!strcmp(name, "none"))
		return 0;
	s->hops = hbm_backend_find(name);
	if (!s->hops) {
		if (!p->hbm_backend) /* a GPU in the manifest, a build without CUDA */
			return 0;
		return ts_err(-ENODEV, "hbm: no backend '%s' (this build has: %s, none)", name,
				hbm_backend_names());
	}
	hp.capacity = p->hbm_capacity ? p->hbm_capacity : cfg->hbm_capacity;
	hp.gpu = cfg->gpu;
	hp.bandwidth = p->hbm_bandwidth;
	if (!hp.capacity)
		return ts_err(-EINVAL, "hbm: backend '%s' needs a capacity (hbm_capacity)", name);
	if (p->hbm_bandwidth < 0)
		return ts_err(-EINVAL, "hbm: bandwidth %g is negative", p->hbm_bandwidth);
	if ((rc = s->hops->open(&hp, &s->hdev))) {
		s->hdev = NULL;
		ts_err_prefix("hbm (%s): ", name);
		return rc;
	}
	cap = s->hops->capacity(s->hdev);
	if ((rc = buddy_init(&s->lv[TIER_HBM].alloc, cap, min_block(cap))))
		return ts_err(rc, "hbm: out of memory for the slot allocator");
	s->lv[TIER_HBM].present = true;
	s->lv[TIER_HBM].capacity = s->lv[TIER_HBM].alloc.size;
	return 0;
}

int store_create(const struct tiers_cfg *cfg, const struct tier_store_params *p,
		 struct tier_nvme *nvme, struct tier_store **out)
{
	static const struct tier_store_params none;
	struct tier_store *s;
	struct dram_params dp = { 0 };
	uint64_t cap;
	int rc;

	*out = NULL;
	if (!p)
		p = &none;
	if ((unsigned)p->policy > TIER_POLICY_LRU || (p->flags & ~TIER_STORE_SCRATCH)) {
		if (nvme)
			tier_nvme_close(nvme);
		return ts_err(-EINVAL, "store: bad policy %d or flags 0x%x", (int)p->policy, p->flags);
	}
	s = ts_calloc(1, sizeof(*s));
	if (!s) {
		if (nvme)
			tier_nvme_close(nvme);
		return ts_err(-ENOMEM, "store: out of memory");
	}
	s->magic = STORE_MAGIC;
	pthread_mutex_init(&s->lock, NULL);
	pthread_cond_init(&s->idle, NULL);
	s->nvme = nvme;
	s->policy = p->policy;
	s->home = nvme ? TIER_NVME : TIER_DRAM;
	snprintf(s->name, sizeof(s->name), "%s", cfg->name);
	s->nbuckets = 64;
	if (!(s->hash = ts_calloc(s->nbuckets, sizeof(*s->hash)))) {
		rc = ts_err(-ENOMEM, "store: out of memory");
		goto fail;
	}
	if ((rc = open_hbm(s, cfg, p)))
		goto fail;

	dp.capacity = p->dram_capacity ? p->dram_capacity : cfg->dram_capacity;
	dp.numa_node = cfg->numa_node;
	dp.huge = cfg->huge_pages;
	dp.gpu = s->hops && (s->hops->caps & HBM_CAP_DEVICE_MEMORY) ? cfg->gpu : -1;
	dp.lock = true;
	if ((rc = dram_arena_open(&dp, &s->dram))) {
		s->dram = NULL;
		goto fail;
	}
	dram_arena_info(s->dram, &s->dinfo);
	s->dram_base = s->dinfo.base;
	cap = dp.capacity;
	if ((rc = buddy_init(&s->lv[TIER_DRAM].alloc, cap, min_block(cap)))) {
		rc = ts_err(rc, "dram: out of memory for the slot allocator");
		goto fail;
	}
	s->lv[TIER_DRAM].present = true;
	s->lv[TIER_DRAM].capacity = s->lv[TIER_DRAM].alloc.size;
	if (nvme) {
		s->lv[TIER_NVME].present = true;
		/* Fixed buffers: the arena in chunks of at most 1 GiB. */
		for (uint64_t off = 0; off < s->lv[TIER_DRAM].capacity; off += 1ull << 30) {
			uint64_t len = s->lv[TIER_DRAM].capacity - off;

			if (len > 1ull << 30)
				len = 1ull << 30;
			if (tier_nvme_register_buffer(nvme, s->dram_base + off, len)) {
				TIER_INFO(TIER_SS_STORE, "store: dram arena past %" PRIu64
					  " bytes not registered with the rings: %s", off,
					  tier_last_error());
				break;
			}
		}
	}
	if (nvme && (rc = adopt_committed(s)))
		goto fail;
	{
		char a[32], b[32];

		TIER_INFO(TIER_SS_STORE, "store '%s': hbm %s%s%s, dram %s, home %s, policy %s", s->name,
			  s->lv[TIER_HBM].present ? s->hops->name : "none",
			  s->lv[TIER_HBM].present ? " " : "",
			  s->lv[TIER_HBM].present ? store_fmt_size(s->lv[TIER_HBM].capacity, a, sizeof(a)) : "",
			  store_fmt_size(s->lv[TIER_DRAM].capacity, b, sizeof(b)), tier_level_name(s->home),
			  s->policy == TIER_POLICY_BELADY ? "belady" : "lru");
	}
	*out = s;
	return 0;
fail:
	store_free(s);
	return rc;
}

void store_set_owner(struct tier_store *s, void *owner)
{
	s->owner = owner;
}

void *store_owner(const struct tier_store *s)
{
	return s->owner;
}

unsigned store_hbm_caps(const struct tier_store *s)
{
	return s->lv[TIER_HBM].present ? s->hops->caps : 0;
}

void store_obj_set_user(struct tier_obj *o, void *user)
{
	/* under the lock: tier_obj_destroy and the event hook read it there */
	pthread_mutex_lock(&o->s->lock);
	o->user = user;
	pthread_mutex_unlock(&o->s->lock);
}

void *store_obj_user(const struct tier_obj *o)
{
	return o->user;
}

void store_quiesce(struct tier_store *s)
{
	pthread_mutex_lock(&s->lock);
	while (s->rq_head || s->nxfers)
		pthread_cond_wait(&s->idle, &s->lock);
	pthread_mutex_unlock(&s->lock);
}

int store_handle_check(const struct tier_store *s)
{
	STORE_ARG(s);
	return 0;
}

int store_close(struct tier_store *s)
{
	int rc, rc2 = 0;

	if (!s)
		return 0;
	rc = store_flush_all(s, true);
	pthread_mutex_lock(&s->lock);
	for (uint32_t i = 0; i < s->nobjs && !rc2; i++) {
		for (int l = 0; l < TIER_LEVELS; l++) {
			struct tier_obj *o = s->objs[i];

			if (o->lv[l].rpins || o->lv[l].wpins) {
				rc2 = ts_err(-EBUSY, "store closed with '%s' pinned on %s", o->name,
					       tier_level_name((enum tier_level)l));
				TIER_WARN(TIER_SS_STORE, "%s", tier_last_error());
				break;
			}
		}
	}
	while (s->rq_head) /* prefetches still waiting for room */
		store_rq_finish(s, s->rq_head, -ECANCELED, "the store was closed");
	while (s->nxfers)
		pthread_cond_wait(&s->idle, &s->lock);
	pthread_mutex_unlock(&s->lock);
	store_free(s);
	if (rc)
		return rc;
	return rc2;
}
