/*
 * store_impl.h - what the pieces of the tiered store share; private to
 * tiers/store*.c, never included from anywhere else (the library's view of
 * the store is tiers/store.h, the public one include/tierstore.h).
 *
 * The store is one module split over five files, all under the store's
 * one lock (see the comment at the top of tiers/store.c for the states,
 * pins and locking rules):
 *   store.c        the object table, the public object functions, lifetime
 *   store_pump.c   the request queue and the pump that serves it
 *   store_evict.c  resident lists, the schedule, victim choice
 *   store_xfer.c   transfers: fills, write-backs, their completions
 *   store_stats.c  the stats and the invariant checker
 * Those of the functions below that touch the store are called with its
 * lock held, except store_flush_all, which takes it, and
 * store_unlock_and_issue, which drops it.
 */
#ifndef TIER_TIERS_STORE_IMPL_H
#define TIER_TIERS_STORE_IMPL_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/error.h"
#include "tiers/buddy.h"
#include "tiers/dram.h"
#include "tiers/store.h"

enum { ST_ABSENT, ST_FILLING, ST_CLEAN, ST_DIRTY, ST_FLUSHING };

struct lvl {
	uint8_t st;
	bool evicting;       /* the flush under way frees the slot when done */
	bool written;        /* a write pin was taken since the level was last clean */
	uint32_t rpins, wpins;
	uint32_t iopins;     /* transfers of the adjacent levels reading or writing this slot */
	uint32_t want;       /* pending acquires that need the object here */
	uint64_t off;        /* slot offset in the level's arena */
	uint64_t last_use;   /* store tick of the last grant or fill */
	struct tier_obj *prev, *next; /* the level's resident list */
};

struct tier_obj {
	struct tier_store *s;
	char *name;
	uint64_t size;
	uint32_t idx;                /* in s->objs */
	struct tier_obj *hnext;      /* name hash chain */
	struct tier_nvme_obj *nobj;  /* the home extent (NVMe) */
	bool home_valid;             /* the home has been written (else it reads as zeros) */
	bool destroying;
	uint32_t busy;               /* transfers in flight */
	struct lvl lv[TIER_LEVELS];
	uint32_t *pos;               /* positions in the schedule, ascending */
	uint32_t npos, pos_cap;
	void *user;                  /* store_obj_set_user; set: its owner's, not destroyable */
};

struct level {
	bool present;
	uint64_t capacity;
	struct buddy alloc;
	uint64_t evict_pending;      /* slot bytes that evicting flushes will free */
	uint32_t room_waiters;       /* acquires waiting for room: prefetches yield to them */
	struct tier_obj *head, *tail;
	uint64_t nres;
	uint64_t hits, misses, evictions, writebacks, bytes_in, bytes_out;
	uint64_t prefetches, prefetch_skipped, errors;
};

enum rq_kind { RQ_ACQUIRE, RQ_PREFETCH, RQ_FLUSH };

struct req {
	enum rq_kind kind;
	struct tier_obj *o;
	enum tier_level level;
	unsigned mode;
	void **ptr;
	struct tier_ticket *tk;      /* NULL for prefetches */
	uint64_t id;
	bool counted;                /* hit or miss recorded */
	bool force;                  /* flush even under a write pin (close) */
	int room_level;              /* the level it waits for room on, or -1 */
	struct req *prev, *next;
};

struct xfer {
	struct tier_store *s;
	struct tier_obj *o;
	enum tier_level upper;       /* the copy is between upper and upper + 1 */
	bool down;                   /* flush (upper -> lower) or fill */
	bool zero;                   /* fill from a home never written: zeros */
	uint64_t cause;              /* the request whose room this eviction makes */
	int sync_rc;                 /* a completion on the issuing thread */
	char sync_detail[256];
	struct xfer *next;
};

/* struct tier_store's magic while open (TS_HANDLE, common/error.h). */
#define STORE_MAGIC 0x53544f52u /* "STOR" */
#define STORE_ARG(s) TS_HANDLE(s, STORE_MAGIC, "store", "tier_store")
#define STORE_ARG_OR(s, ret) TS_HANDLE_OR(s, STORE_MAGIC, "store", "tier_store", ret)

struct tier_store {
	pthread_mutex_t lock;
	uint32_t magic;              /* STORE_MAGIC; TS_MAGIC_DEAD once closed */
	pthread_cond_t idle;         /* an object's or the store's transfers drained */
	struct level lv[TIER_LEVELS];
	enum tier_level home;
	char name[TIERS_NAME_MAX + 1];

	struct dram_arena *dram;
	char *dram_base;
	struct dram_info dinfo;
	const struct hbm_ops *hops;
	struct hbm_dev *hdev;
	struct tier_nvme *nvme;
	enum tier_policy policy;

	struct tier_obj **objs;
	uint32_t nobjs, objs_cap;
	struct tier_obj **hash;
	uint32_t nbuckets;

	struct req *rq_head, *rq_tail;
	uint64_t next_id;
	struct xfer *todo, *todo_tail;
	uint64_t nxfers;             /* transfers queued or in flight */

	struct tier_obj **sched;
	uint32_t nsched, cursor;

	uint64_t tick, changes;
	store_hook hook;
	void *hook_arg;

	void *owner;                 /* the opener's record (store_set_owner) */
};

/* store.c */
void store_emit(struct tier_store *s, enum store_event ev, enum tier_level l,
		const struct tier_obj *o);
uint64_t store_slot_bytes(struct tier_store *s, enum tier_level l, const struct tier_obj *o);
const char *store_fmt_size(uint64_t b, char *buf, size_t len);
struct tier_obj *store_find_locked(struct tier_store *s, const char *name);

/* store_evict.c */
void store_resident_add(struct tier_store *s, enum tier_level l, struct tier_obj *o);
void store_drop(struct tier_store *s, struct tier_obj *o, enum tier_level l);
void store_sched_advance(struct tier_store *s, const struct tier_obj *o);
bool store_pinned(const struct lvl *x);
int store_make_room(struct tier_store *s, struct req *r, struct tier_obj *o, enum tier_level l,
		    uint64_t *off);

/* store_pump.c */
void store_room_wait(struct tier_store *s, struct req *r, int l);
void store_rq_finish(struct tier_store *s, struct req *r, int rc, const char *why);
void store_rq_fail_obj(struct tier_store *s, struct tier_obj *o, bool (*pred)(struct req *, int),
		       int arg, uint64_t cause, int rc, const char *why);
void store_pump(struct tier_store *s);
int store_flush_all(struct tier_store *s, bool force);

/* store_xfer.c */
void store_xfer_queue(struct tier_store *s, struct tier_obj *o, enum tier_level upper, bool down,
		      uint64_t cause, struct xfer *x);
void store_unlock_and_issue(struct tier_store *s);
void store_start_flush(struct tier_store *s, struct tier_obj *o, enum tier_level u, uint64_t cause,
		       struct xfer *x);

#endif
