/*
 * nvme_impl.h - what the pieces of the NVMe tier share; private to
 * tiers/nvme*.c.  tiers/nvme.c owns the backing files, their headers,
 * open and close, the objects (extents) and the stats; tiers/nvme_ring.c
 * the io_uring engine; tiers/nvme_req.c the request path;
 * tiers/nvme_commit.c writing commits and tiers/nvme_recover.c loading
 * one when the files are opened again.  The
 * structures below are the tier's state; the functions are those one
 * piece calls in another.
 */
#ifndef TIER_TIERS_NVME_IMPL_H
#define TIER_TIERS_NVME_IMPL_H

#include <liburing.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/uio.h>

#include "common/error.h"
#include "common/fault.h"
#include "common/names.h"
#include "tiers/tiers_cfg.h"
#include "tierstore/tiers.h"
#include "tiers/extent.h"

struct ts_nvme_header;

#define MAX_FIXED_BUFS 64

struct nvme_req;

/* One device operation: a stripe unit's part of a request. */
/* Resubmissions of one sub-I/O the kernel cancelled (nvme_ring.c). */
#define NVME_MAX_CANCELS 16

struct subio {
	struct subio *next;       /* in ring->pending */
	struct nvme_req *req;
	struct nvme_path *path;
	uint64_t unit;            /* stripe unit index in the object */
	uint64_t file_off;        /* device offset of this transfer */
	uint32_t dev_len;         /* bytes to transfer (block multiple) */
	uint32_t done;            /* bytes transferred so far */
	char *dev_buf;            /* what the device reads into / writes from */
	char *bounce;             /* owned bounce buffer, or NULL */
	/* For a bounce: the caller's part of the unit. */
	char *user_buf;
	uint32_t unit_off;        /* offset of the caller's part in the unit */
	uint32_t user_len;
	uint32_t unit_len;        /* object bytes in this unit (last may be short) */
	int op;                   /* TIER_IO_READ / TIER_IO_WRITE for this transfer */
	bool rmw;                 /* a write that first reads the unit */
	bool full_unit;           /* the transfer covers the whole unit */
	int buf_index;            /* fixed buffer index, or -1 */
	unsigned cancels;         /* -ECANCELED completions resubmitted (nvme_ring.c) */
	unsigned retries;         /* transient errors retried (TIER_NVME_IO_RETRIES) */
	bool backoff;             /* its next SQE is the wait before a retry */
	struct __kernel_timespec backoff_ts;
	uint64_t t_sub;           /* when its SQE was prepared (live stats) */
	uint32_t crc;             /* a full-unit write: the unit's crc32c, set when it starts */
	uint64_t wr_off;          /* a read-modify-write: where the patched unit goes (it
				   * moves when its object is copied on write) */
	/* Its unit's order (nvme_req.c, struct nvme_gate). */
	struct subio *gnext;      /* in its gate's list */
	bool started;             /* handed to the ring (else waiting in the gate) */
};

/*
 * The order of requests on a stripe unit (nvme_req.c).  Every sub-I/O
 * enters the gate of its (object, unit), one of NVME_GATES chosen by a
 * hash, when it is built, and leaves it when it is done.  A gate's list
 * holds its sub-I/Os in the order they entered; one starts when every
 * sub-I/O of its unit ahead of it is a read and it is a read too, or when
 * none is ahead.  So the writes of a unit run one at a time in the order
 * they were submitted, reads run together between them, and a sub-I/O
 * that shares its unit with nothing in flight starts at once.
 */
#define NVME_GATE_BITS 12
#define NVME_GATES (1u << NVME_GATE_BITS)

struct nvme_gate {
	pthread_mutex_t lock;
	struct subio *head, *tail;
};

struct nvme_req {
	struct tier_nvme *t;
	struct tier_nvme_obj *obj;
	int op;
	tier_io_cb cb;
	void *arg;
	_Atomic int pending;      /* sub-I/Os not finished */
	_Atomic int result;       /* first error, 0 if none */
	atomic_flag detail_set;
	char detail[384];
};

struct nvme_path {
	struct tier_nvme *t;
	int index;
	char *file;
	const char *base;         /* file's last component, in file */
	int dfd;                  /* its directory (nvme_file.c opens the file there) */
	int fd;
	bool direct;
	uint32_t block;           /* transfer alignment */
	uint32_t qd;
	bool created;             /* this open created the file */
	bool owned;               /* known to be ours: its header is ours to write */
	uint64_t capacity;        /* data area bytes, as the header says */
	uint64_t created_ns;      /* kept across header rewrites */
	uint64_t data_off;        /* file offset of the data area */
	uint64_t file_end;        /* file bytes allocated so far (nvme_file_grow) */
	bool sparse;              /* no fallocate here: the file grows by ftruncate */
	/* The header found in an existing file (nvme_file.c), for the open to
	 * decide whether the files hold a committed store (nvme_commit.c). */
	bool had_header;
	bool hdr_damaged;         /* ours, but its header fails its crc */
	uint8_t hdr_uuid[16];
	uint32_t hdr_index, hdr_npaths, hdr_unit, hdr_csum, hdr_flags;
	char hdr_name[65];
	struct ts_extents alloc;
	struct io_uring ring;
	bool ring_ok;
	pthread_t thread;
	bool thread_ok;
	pthread_mutex_t lock;     /* SQ side */
	struct subio *pending, *pending_tail;
	unsigned inflight;        /* SQEs submitted, completion not yet seen */
	bool fixed_files;
	/* Reads that need CPU work (checksum, copy out of a bounce buffer,
	 * patching a read-modify-write) go to a worker, so the ring thread
	 * goes back to reaping and resubmitting at once. */
	pthread_mutex_t work_lock;
	pthread_cond_t work_cond;
	struct subio *work, *work_tail;
	bool work_stop;
	pthread_t worker[2];
	unsigned nworkers;
	/* The live view's counters of this path (tier_live_path). */
	_Atomic uint64_t c_reads, c_writes, c_bytes_read, c_bytes_written, c_errors,
		c_csum_errors, c_lat_sum_ns;
	_Atomic uint64_t c_lat_hist[TIER_LAT_BUCKETS];
};

struct tier_nvme_obj {
	struct tier_nvme_obj *next, *prev;   /* t->objs, both ways: unlinking is O(1) */
	char *name;
	uint64_t size;
	uint64_t nunits;
	unsigned rot;
	uint64_t ext_off[TIERS_MAX_NVME_PATHS];  /* extent start per path (data-relative) */
	uint64_t ext_len[TIERS_MAX_NVME_PATHS];
	uint32_t *crc;            /* per unit */
	unsigned char *crc_ok;    /* per unit: 1 once written with a checksum */
	_Atomic int busy;         /* requests in flight */
	_Atomic bool written;     /* a write was submitted: its bytes are its own */
	/*
	 * Copy on write (nvme_commit.c).  A committed object's extents
	 * (ext_off) are frozen: the first write after the commit gives it new
	 * extents (new_off, same lengths) and sets cow; from then on a unit
	 * whose moved flag is set lives there, the others still in ext_off.
	 * The flags change under the unit's gate lock (nvme_req.c), where
	 * the order of a unit's requests is decided.  The next commit copies
	 * the units not moved, and new_off becomes ext_off.
	 */
	bool frozen;              /* ext_off is named by a kept commit */
	_Atomic bool cow;         /* new_off is allocated */
	uint64_t new_off[TIERS_MAX_NVME_PATHS];
	_Atomic unsigned char *moved; /* per unit, while cow */
};

/* An extent of one path, as a commit's table names it. */
struct nvme_ext {
	uint64_t path, off, len;
};

/* qsort/bsearch order of struct nvme_ext (or of a struct that begins with
 * one): by path, offset, length. */
int nvme_ext_cmp(const void *a, const void *b);

/* An extent that is out of use but named by a kept commit (nvme_commit.c). */
struct nvme_held {
	uint32_t path;
	uint64_t off, len;
	uint64_t last_gen;        /* freed once this falls out of the kept commits */
};

/* struct tier_nvme's magic while open (TS_HANDLE, common/error.h). */
#define NVME_MAGIC 0x4e564d45u /* "NVME" */
#define NVME_ARG(t) TS_HANDLE(t, NVME_MAGIC, "NVMe tier", "tier_nvme")
#define NVME_ARG_OR(t, ret) TS_HANDLE_OR(t, NVME_MAGIC, "NVMe tier", "tier_nvme", ret)

struct tier_nvme {
	uint32_t magic;               /* NVME_MAGIC; TS_MAGIC_DEAD once closed */
	const struct tiers_cfg *cfg;  /* during nvme_open only */
	char name[TIERS_NAME_MAX + 1];   /* the store's name, for headers */
	unsigned flags;
	unsigned npaths;
	uint32_t unit;            /* stripe unit */
	uint32_t block;           /* the largest block size of the paths */
	uint32_t align;           /* extent alignment: the unit, at most 1 MiB */
	bool csum;
	struct nvme_path *paths;
	pthread_mutex_t lock;     /* objects, allocators */
	struct tier_nvme_obj *objs;
	struct ts_names names;        /* objs by name (nvme_obj_key) */
	unsigned next_rot;
	_Atomic bool closing;
	struct nvme_gate gate[NVME_GATES];
	bool gates_ok;            /* their locks are initialised */
	_Atomic long inflight_reqs;  /* until the callback has returned (drain) */
	_Atomic long active_reqs;    /* until the I/O is done, before the callback */
	pthread_mutex_t drain_lock;
	pthread_cond_t drained;
	struct iovec fixed[MAX_FIXED_BUFS];
	unsigned nfixed;
	bool fixed_refused;
	uint8_t uuid[16];
	bool opened;              /* nvme_open completed */
	/* Commits (nvme_commit.c); under t->lock. */
	uint32_t keep;            /* commits kept */
	uint64_t gen;             /* the last commit (0: none) */
	uint64_t next_gen;
	uint64_t seq;             /* slot writes */
	struct ts_nvme_slot *slot;/* the ring as last written (4 KiB aligned) */
	struct nvme_held *held;
	size_t nheld, held_cap;
	void *meta;               /* the user record of the last commit */
	size_t meta_len;
	_Atomic bool committing;  /* submissions are refused (-EBUSY) */
	bool restored;            /* the open found committed state */
	bool space_warned;        /* the warning that keep + 1 copies do not fit */
	/* counters */
	_Atomic uint64_t bytes_read, bytes_written, requests, ios, errors, csum_errors,
		short_ios, retries, bounced;
};

/* tiers/nvme.c */

/* @v rounded up to a multiple of @a. */
uint64_t nvme_round_up(uint64_t v, uint64_t a);

/* The extent an object of @size bytes rotated by @rot owns on path @p:
 * its units there, the last one (if there) rounded up to the block. */
uint64_t nvme_ext_len(const struct tier_nvme *t, uint64_t size, unsigned rot, unsigned p);

/* Writes path @p's header: not clean while open, clean at close. */
int nvme_file_header_write(struct tier_nvme *t, struct nvme_path *p, bool clean);

/* Reads path @p's header into @h (4 KiB aligned): 0, -ENOMSG (short), -errno. */
int nvme_file_header_read(struct nvme_path *p, struct ts_nvme_header *h);

/* Whether the lock on @fd's file that another holds belongs to a process
 * that is gone (killed: the kernel lets go a little after it), waiting
 * for that as an open does; false while a live process holds it. */
bool nvme_file_lock_released(int fd);

/* tiers/nvme_file.c */

/*
 * Opens (creating it if need be) path @p's backing file by its own name
 * (p->file, with p->index, p->direct, p->data_off set), takes its lock and
 * writes a header that is not clean.  An existing file of ours is emptied
 * down to its header.  0, or -errno with the detail (-EBUSY: another
 * store holds it; -ELOOP, -EINVAL, -EISDIR: not a regular file; -EEXIST:
 * not ours).
 */
int nvme_file_open(struct tier_nvme *t, struct nvme_path *p);

/*
 * Makes path @p's file hold data bytes [0, @end): grows it (in large
 * steps, at most to the capacity) when @end is past what it holds.  0, or
 * -ENOSPC naming the path, object @obj and what was free, or -errno.
 * Called with t->lock held.
 */
int nvme_file_grow(struct nvme_path *p, uint64_t end, const char *obj);

/* tiers/nvme_commit.c */

/* An object's entry in a table, as nvme_table_walk() hands it over. */
struct nvme_tobj {
	const char *name;         /* name_len bytes, no NUL */
	size_t name_len;
	uint64_t size, nunits;
	unsigned rot, flags;
	const uint64_t *ext_off, *ext_len;  /* npaths each (data-relative) */
	const unsigned char *ok;  /* a bit per unit: its checksum is set */
	const char *crc;          /* 4 bytes per unit (unaligned), or NULL */
};

struct ts_nvme_table;
struct ts_nvme_table_held;
struct ts_nvme_slot;

/*
 * Walks the object table in @buf (@len bytes): checks its header and
 * bounds, calls @fn (may be NULL) per object, and gives its header, held
 * extents and record.  @who names it in messages.  0, -EBADMSG, -EPROTO,
 * or what @fn returned.
 */
int nvme_table_walk(const void *buf, size_t len, const char *who,
		    int (*fn)(void *arg, const struct nvme_tobj *o), void *arg,
		    const struct ts_nvme_table **hdr, const struct ts_nvme_table_held **held,
		    const void **meta);

/* Frees what the commit code holds (close). */
void nvme_commit_fini(struct tier_nvme *t);

/*
 * Unit @u of @o: where a read finds it and where a write puts it (they
 * differ only while the object is copied on write and the unit has not
 * moved), as data-relative offsets of its slot on its path.  A write
 * marks the unit moved.  Called under the unit's gate lock.
 */
uint64_t nvme_unit_read_off(const struct tier_nvme *t, struct tier_nvme_obj *o, uint64_t u);
uint64_t nvme_unit_write_off(const struct tier_nvme *t, struct tier_nvme_obj *o, uint64_t u);

/* Before a write to @o: a frozen object gets new extents (copy on write).
 * 0, or -ENOSPC / -errno with the detail naming the object. */
int nvme_cow_begin(struct tier_nvme *t, struct tier_nvme_obj *o);

/* Releases an object's extents: at once, or held for the kept commits that
 * name them.  t->lock held. */
void nvme_obj_release_extents(struct tier_nvme *t, struct tier_nvme_obj *o);

/* Where unit @u of @o lies on its path, a data-relative offset, were the
 * object's extents those at @base (ext_off or new_off). */
uint64_t nvme_unit_slot(const struct tier_nvme *t, const struct tier_nvme_obj *o, uint64_t u,
			const uint64_t *base);

/* Holds [off, off + len) of path @path for the kept commits, until the
 * generation @last_gen that names it last leaves them.  0 or -ENOMEM. */
int nvme_held_add(struct tier_nvme *t, uint32_t path, uint64_t off, uint64_t len, uint64_t last_gen);

/* Reads or writes [off, off + len) of path @p's file (file offsets),
 * whole, synchronously, through fault site @site; @what names it in the
 * detail.  0 or -errno (-ENODATA: the file ends first). */
int nvme_sync_io(struct nvme_path *p, bool wr, void *buf, size_t len, uint64_t off,
		 enum ts_fault_site site, const char *what);

/* @len zeroed bytes, 4 KiB aligned (for O_DIRECT), or NULL. */
void *nvme_aligned_zero(size_t len);

/* Writes slot @s (sealed here) as slot write number s->seq, durably. */
int nvme_slot_write(struct tier_nvme *t, struct ts_nvme_slot *s);

/* A commit's time @ns as local "YYYY-MM-DD HH:MM:SS". */
void nvme_gen_time(uint64_t ns, char *buf, size_t n);

/* tiers/nvme_recover.c */

/*
 * After every path is open: reads path 0's commit slots; with a commit,
 * checks every file belongs to it and loads the object table of @gen
 * (0: the newest readable), rolling back over damaged ones; without one,
 * empties the files for a fresh store.  0 or -errno with the detail.
 */
int nvme_commit_load(struct tier_nvme *t, uint64_t gen);

/* tiers/nvme_ring.c */

/* Sets up path @p's ring, its checksum workers and its completion thread. */
int nvme_ring_open(struct tier_nvme *t, struct nvme_path *p, const struct tiers_path_cfg *pc);

/* Stops what nvme_ring_open() started (any part of it) and tears the ring down. */
void nvme_ring_stop(struct nvme_path *p);

/* Appends the sub-I/Os head..tail to path @p's pending list and pumps. */
void nvme_hand_over(struct nvme_path *p, struct subio *head, struct subio *tail);

/* tiers/nvme_req.c */

/* Records the request's first failure, with its detail. */
__attribute__((format(printf, 3, 4)))
void nvme_req_fail(struct nvme_req *r, int err, const char *fmt, ...);

/* "read" or "write". */
const char *nvme_op_name(int op);

/* Ends a request whose last sub-I/O is done: accounts and runs its callback. */
void nvme_req_finish(struct nvme_req *r);

/* Sets up and tears down the tier's gates (struct nvme_gate). */
void nvme_gates_init(struct tier_nvme *t);
void nvme_gates_fini(struct tier_nvme *t);

/* Sub-I/O @s is done (successfully or not): takes it out of its unit's
 * gate and hands over the sub-I/Os that waited for it.  No lock held. */
void nvme_gate_leave(struct subio *s);

/*
 * The object list t->objs and its index by name (nvme.c): the key of the
 * index, and linking an object at the list's head and unlinking it, both
 * O(1).  Linking fails only as ts_names_insert does (-ENOMEM), never after
 * ts_names_reserve(names, 1); the list is unchanged then.  @names is
 * t->names, or that of a table being loaded.
 */
const char *nvme_obj_key(const void *ctx, uintptr_t item);
int nvme_obj_link(struct tier_nvme_obj **head, struct ts_names *names, struct tier_nvme_obj *o);
void nvme_obj_unlink(struct tier_nvme_obj **head, struct ts_names *names, struct tier_nvme_obj *o);

#endif
