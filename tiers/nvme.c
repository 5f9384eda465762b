/*
 * nvme.c - the NVMe tier: backing files, the extent allocator, striping,
 * the io_uring engine and per-stripe-unit checksums.
 *
 * Layout.  Each manifest path has one backing file: a 4 KiB header
 * (nvme_format.h) then `capacity` data bytes from data_off.  An object of
 * n stripe units (unit size U) puts unit k on path (k + rot) % P, in slot
 * k / P of one extent it owns on that path; rot spreads small objects over
 * the paths.  So a large request keeps every path's queue busy at once.
 *
 * Engine.  One ring per path, with the path's file registered and,
 * optionally, caller buffers registered as fixed buffers.  A request is cut
 * into one sub-I/O per stripe unit it touches.  Sub-I/Os wait in the ring's
 * `pending` list; pump() moves them into SQEs while fewer than queue_depth
 * are in flight and submits the batch with one io_uring_enter.  A thread
 * per ring sleeps in io_uring_wait_cqe (no busy loop), handles each
 * completion - retry on -EAGAIN/-EINTR, resubmit the rest of a short
 * transfer, verify the checksum, finish a read-modify-write - and pumps
 * again.  A request's callback runs when its last sub-I/O is done.
 *
 * Locking.  ring->lock guards the SQ side (pending, inflight, SQEs); the
 * CQ side belongs to the ring's thread alone.  t->lock guards the object
 * list and the allocators.  Callbacks run with no lock held.
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <liburing.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/error.h"
#include "common/fault.h"
#include "common/ticket.h"
#include "common/log.h"
#include "common/nodecfg.h"
#include "common/units.h"
#include "kernels/crc32c.h"
#include "runtime/manifest.h"
#include "tiers/extent.h"
#include "tiers/nvme_format.h"

#define MAX_FIXED_BUFS 64
#define STOP_TAG ((uint64_t)-1)

struct nvme_req;

/* One device operation: a stripe unit's part of a request. */
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
	uint64_t t_sub;           /* when its SQE was prepared (live stats) */
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
	int fd;
	bool direct;
	uint32_t block;           /* transfer alignment */
	uint32_t qd;
	bool created;             /* this open created the file */
	bool owned;               /* known to be ours: its header is ours to write */
	uint64_t capacity;        /* data area bytes, as the header says */
	uint64_t created_ns;      /* kept across header rewrites */
	uint64_t data_off;        /* file offset of the data area */
	struct tier_extents alloc;
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
	struct tier_nvme_obj *next;
	char *name;
	uint64_t size;
	uint64_t nunits;
	unsigned rot;
	uint64_t ext_off[TIER_MAX_NVME_PATHS];  /* extent start per path (data-relative) */
	uint64_t ext_len[TIER_MAX_NVME_PATHS];
	uint32_t *crc;            /* per unit */
	unsigned char *crc_ok;    /* per unit: 1 once written with a checksum */
	_Atomic int busy;         /* requests in flight */
};

struct tier_nvme {
	const struct tier_config *cfg;  /* during tier_nvme_open only */
	char name[TIER_NAME_MAX + 1];   /* the store's name, for headers */
	unsigned flags;
	unsigned npaths;
	uint32_t unit;            /* stripe unit */
	uint32_t block;           /* the largest block size of the paths */
	uint32_t align;           /* extent alignment: the unit, at most 1 MiB */
	bool csum;
	struct nvme_path *paths;
	pthread_mutex_t lock;     /* objects, allocators */
	struct tier_nvme_obj *objs;
	unsigned next_rot;
	_Atomic bool closing;
	_Atomic long inflight_reqs;  /* until the callback has returned (drain) */
	_Atomic long active_reqs;    /* until the I/O is done, before the callback */
	pthread_mutex_t drain_lock;
	pthread_cond_t drained;
	struct iovec fixed[MAX_FIXED_BUFS];
	unsigned nfixed;
	bool fixed_refused;
	uint8_t uuid[16];
	bool opened;              /* tier_nvme_open completed */
	/* counters */
	_Atomic uint64_t bytes_read, bytes_written, requests, ios, errors, csum_errors,
		short_ios, retries, bounced;
};

/* --------------------------------------------------------------- helpers */

static uint64_t round_up(uint64_t v, uint64_t a)
{
	return (v + a - 1) / a * a;
}

static int path_lbs(int fd)
{
	struct stat st;
	char p[128];
	FILE *f;
	int v = 0;

	if (fstat(fd, &st) != 0)
		return 0;
	snprintf(p, sizeof(p), "/sys/dev/block/%u:%u/queue/logical_block_size",
		 major(st.st_dev), minor(st.st_dev));
	f = fopen(p, "re");
	if (!f) {
		snprintf(p, sizeof(p), "/sys/dev/block/%u:%u/../queue/logical_block_size",
			 major(st.st_dev), minor(st.st_dev));
		f = fopen(p, "re");
	}
	if (f) {
		if (fscanf(f, "%d", &v) != 1)
			v = 0;
		fclose(f);
	}
	return v;
}

/* Records the request's first failure, with its detail. */
__attribute__((format(printf, 3, 4)))
static void req_fail(struct nvme_req *r, int err, const char *fmt, ...)
{
	int expect = 0;

	if (!atomic_compare_exchange_strong(&r->result, &expect, err))
		return;
	if (!atomic_flag_test_and_set(&r->detail_set)) {
		va_list ap;

		va_start(ap, fmt);
		vsnprintf(r->detail, sizeof(r->detail), fmt, ap);
		va_end(ap);
	}
}

static const char *op_name(int op)
{
	return op == TIER_IO_WRITE ? "write" : "read";
}

static void req_finish(struct nvme_req *r)
{
	struct tier_nvme *t = r->t;
	int rc = atomic_load(&r->result);

	atomic_fetch_add(&t->requests, 1);
	if (rc)
		atomic_fetch_add(&t->errors, 1);
	/*
	 * The object and the buffers are free before the callback runs: a
	 * waiter woken by it may destroy the object or register buffers.
	 */
	atomic_fetch_sub(&r->obj->busy, 1);
	atomic_fetch_sub(&t->active_reqs, 1);
	r->cb(r->arg, rc, rc ? r->detail : "");
	free(r);
	if (atomic_fetch_sub(&t->inflight_reqs, 1) == 1) {
		pthread_mutex_lock(&t->drain_lock);
		pthread_cond_broadcast(&t->drained);
		pthread_mutex_unlock(&t->drain_lock);
	}
}

static void sub_free(struct subio *s)
{
	free(s->bounce);
	free(s);
}

/* ------------------------------------------------------------ the rings */

static int fixed_index(const struct tier_nvme *t, const void *buf, size_t len)
{
	for (unsigned i = 0; i < t->nfixed; i++) {
		const char *b = t->fixed[i].iov_base;

		if ((const char *)buf >= b &&
		    (const char *)buf + len <= b + t->fixed[i].iov_len)
			return (int)i;
	}
	return -1;
}

/* Prepares one SQE for @s; ring->lock held and a free SQE guaranteed. */
static void prep(struct nvme_path *p, struct subio *s)
{
	struct io_uring_sqe *sqe = io_uring_get_sqe(&p->ring);
	int fd = p->fixed_files ? 0 : p->fd;
	char *b = s->dev_buf + s->done;
	unsigned len = s->dev_len - s->done;
	uint64_t off = s->file_off + s->done;

	if (s->buf_index >= 0) {
		if (s->op == TIER_IO_WRITE)
			io_uring_prep_write_fixed(sqe, fd, b, len, off, s->buf_index);
		else
			io_uring_prep_read_fixed(sqe, fd, b, len, off, s->buf_index);
	} else if (s->op == TIER_IO_WRITE) {
		io_uring_prep_write(sqe, fd, b, len, off);
	} else {
		io_uring_prep_read(sqe, fd, b, len, off);
	}
	if (p->fixed_files)
		sqe->flags |= IOSQE_FIXED_FILE;
	io_uring_sqe_set_data(sqe, s);
#if TIER_STATS_BUILD
	s->t_sub = tier_now_ns();
#endif
}

/*
 * Moves pending sub-I/Os into SQEs while fewer than qd are in flight and
 * submits them with one io_uring_enter.  ring->lock held.  Sub-I/Os the
 * kernel did not take are turned into no-ops and returned in *failed (the
 * caller fails them with no lock held).
 */
static void pump(struct nvme_path *p, struct subio **failed)
{
	unsigned prepared = 0;
	int rc;

	while (p->pending && p->inflight < p->qd) {
		struct subio *s = p->pending;

		if (io_uring_sq_space_left(&p->ring) == 0) {
			/* SQPOLL: the kernel thread has not consumed the SQ yet. */
			if (prepared)
				break;
			io_uring_sqring_wait(&p->ring);
			continue;
		}
		p->pending = s->next;
		if (!p->pending)
			p->pending_tail = NULL;
		s->next = NULL;
		prep(p, s);
		p->inflight++;
		prepared++;
	}
	if (!prepared)
		return;
	rc = tier_fault_check(TIER_FAULT_NVME_SUBMIT);
	if (rc == 0) {
		do {
			rc = io_uring_submit(&p->ring);
		} while (rc == -EINTR || rc == -EAGAIN || rc == -EBUSY);
	}
	if (rc >= 0 && (unsigned)rc >= prepared)
		return;
	/*
	 * The kernel took none of the SQEs (a submission error, or the fault
	 * site).  They are still in the SQ and would go out with the next
	 * submission: turn them into no-ops carrying no sub-I/O, and fail
	 * their sub-I/Os here.
	 */
	{
		int err = rc < 0 ? rc : -EIO;
		unsigned taken = rc < 0 ? 0 : (unsigned)rc;
		struct io_uring_sq *sq = &p->ring.sq;

		for (unsigned i = taken; i < prepared; i++) {
			struct io_uring_sqe *sqe =
				&sq->sqes[(sq->sqe_tail - prepared + i) & sq->ring_mask];
			struct subio *s = (struct subio *)(uintptr_t)sqe->user_data;

			req_fail(s->req, err, "nvme%d (%s): %s of '%s' at %" PRIu64 ": io_uring_submit: %s",
				 p->index, p->file, op_name(s->req->op), s->req->obj->name,
				 s->unit * p->t->unit + s->unit_off, tier_strerror(err));
			io_uring_prep_nop(sqe);
			io_uring_sqe_set_data64(sqe, 0);
			s->next = *failed;
			*failed = s;
		}
		/* The no-ops complete normally and give their slots back. */
		io_uring_submit(&p->ring);
	}
}

static void sub_done(struct subio *s);

/*
 * Appends the list head..tail (may be empty) to the path's pending
 * sub-I/Os and pumps: one io_uring_enter for the batch.  From any thread;
 * sub-I/Os the kernel refused are failed with no lock held.
 */
static void hand_over(struct nvme_path *p, struct subio *head, struct subio *tail)
{
	struct subio *failed = NULL;

	pthread_mutex_lock(&p->lock);
	if (head) {
		tail->next = NULL;
		if (p->pending_tail)
			p->pending_tail->next = head;
		else
			p->pending = head;
		p->pending_tail = tail;
	}
	pump(p, &failed);
	pthread_mutex_unlock(&p->lock);
	while (failed) {
		struct subio *f = failed;

		failed = f->next;
		sub_done(f);
	}
}

/* Queues @s (again: a retry, the rest of a short transfer, the write half
 * of a read-modify-write) and pumps. */
static void resubmit(struct nvme_path *p, struct subio *s)
{
	hand_over(p, s, s);
}

/* The last step of a sub-I/O: account, maybe finish its request. */
static void sub_done(struct subio *s)
{
	struct nvme_req *r = s->req;

	sub_free(s);
	if (atomic_fetch_sub(&r->pending, 1) == 1)
		req_finish(r);
}

static bool unit_verify(struct tier_nvme *t, struct subio *s, const char *data)
{
	struct tier_nvme_obj *o = s->req->obj;
	uint32_t crc;

	if (!t->csum || !o->crc_ok[s->unit])
		return true;
	crc = ts_crc32c(0, data, s->unit_len);
	if (crc == o->crc[s->unit])
		return true;
	atomic_fetch_add(&t->csum_errors, 1);
#if TIER_STATS_BUILD
	atomic_fetch_add_explicit(&s->path->c_csum_errors, 1, memory_order_relaxed);
#endif
	req_fail(s->req, -EBADMSG,
		 "nvme%d (%s): checksum mismatch in '%s' at %" PRIu64 " (stripe unit %" PRIu64
		 ", file offset %" PRIu64 ", %u bytes): crc32c %08x, expected %08x",
		 s->path->index, s->path->file, o->name, s->unit * t->unit, s->unit,
		 s->file_off, s->unit_len, crc, o->crc[s->unit]);
	return false;
}

/* The CPU part of a completed read: verify, patch or copy out. */
static void read_work(struct tier_nvme *t, struct subio *s)
{
	struct tier_nvme_obj *o = s->req->obj;

	if (s->full_unit && !unit_verify(t, s, s->dev_buf)) {
		sub_done(s);
		return;
	}
	if (s->rmw) {
		/* Phase 2 of a partial write: patch the unit, write it back. */
		memcpy(s->bounce + s->unit_off, s->user_buf, s->user_len);
		if (t->csum) {
			o->crc[s->unit] = ts_crc32c(0, s->bounce, s->unit_len);
			o->crc_ok[s->unit] = 1;
		}
		s->rmw = false;
		s->op = TIER_IO_WRITE;
		s->done = 0;
		resubmit(s->path, s);
		return;
	}
	if (s->bounce)
		memcpy(s->user_buf, s->bounce + s->unit_off, s->user_len);
	sub_done(s);
}

static void *worker_main(void *v)
{
	struct nvme_path *p = v;

	pthread_mutex_lock(&p->work_lock);
	for (;;) {
		struct subio *s = p->work;

		if (!s) {
			if (p->work_stop)
				break;
			pthread_cond_wait(&p->work_cond, &p->work_lock);
			continue;
		}
		p->work = s->next;
		if (!p->work)
			p->work_tail = NULL;
		pthread_mutex_unlock(&p->work_lock);
		s->next = NULL;
		read_work(p->t, s);
		pthread_mutex_lock(&p->work_lock);
	}
	pthread_mutex_unlock(&p->work_lock);
	return NULL;
}

/* A transfer completed whole: the per-operation epilogue. */
static void sub_complete(struct tier_nvme *t, struct subio *s)
{
	struct nvme_path *p = s->path;

	if (s->op == TIER_IO_WRITE) {
		atomic_fetch_add(&t->bytes_written, s->dev_len);
		sub_done(s);
		return;
	}
	atomic_fetch_add(&t->bytes_read, s->dev_len);
	if (tier_fault_check(TIER_FAULT_NVME_BITFLIP))
		s->dev_buf[(s->dev_len < s->unit_len ? s->dev_len : s->unit_len) / 2] ^= 0x10;
	if (!s->bounce && !(t->csum && s->full_unit && s->req->obj->crc_ok[s->unit])) {
		sub_done(s); /* nothing to check or copy */
		return;
	}
	pthread_mutex_lock(&p->work_lock);
	s->next = NULL;
	if (p->work_tail)
		p->work_tail->next = s;
	else
		p->work = s;
	p->work_tail = s;
	pthread_cond_signal(&p->work_cond);
	pthread_mutex_unlock(&p->work_lock);
}

#if TIER_STATS_BUILD
/* One device operation's entry in the path's live counters. */
static void path_count(struct nvme_path *p, const struct subio *s, int res)
{
	uint64_t ns = tier_now_ns() - s->t_sub;

	atomic_fetch_add_explicit(&p->c_lat_hist[tier_lat_bucket(ns)], 1, memory_order_relaxed);
	atomic_fetch_add_explicit(&p->c_lat_sum_ns, ns, memory_order_relaxed);
	if (res < 0) {
		if (res != -EAGAIN && res != -EINTR)
			atomic_fetch_add_explicit(&p->c_errors, 1, memory_order_relaxed);
	} else if (s->op == TIER_IO_WRITE) {
		atomic_fetch_add_explicit(&p->c_writes, 1, memory_order_relaxed);
		atomic_fetch_add_explicit(&p->c_bytes_written, (uint64_t)res, memory_order_relaxed);
	} else {
		atomic_fetch_add_explicit(&p->c_reads, 1, memory_order_relaxed);
		atomic_fetch_add_explicit(&p->c_bytes_read, (uint64_t)res, memory_order_relaxed);
	}
}
#endif

static void handle_cqe(struct tier_nvme *t, struct nvme_path *p, struct subio *s, int res)
{
	int inj;

	atomic_fetch_add(&t->ios, 1);
	inj = tier_fault_check(TIER_FAULT_NVME_IO_ERR);
	if (inj)
		res = inj;
	if (res > 0 && tier_fault_check(TIER_FAULT_NVME_SHORT)) {
		/* Half the bytes, in whole blocks (O_DIRECT transfers are). */
		int half = (int)((unsigned)res / 2 / p->block * p->block);

		if (half > 0)
			res = half;
	}
	if (tier_fault_check(TIER_FAULT_NVME_DELAY))
		tier_sleep_ns(20 * 1000000ull);
#if TIER_STATS_BUILD
	path_count(p, s, res);
#endif

	if (res == -EAGAIN || res == -EINTR) {
		atomic_fetch_add(&t->retries, 1);
		resubmit(p, s);
		return;
	}
	if (res < 0) {
		req_fail(s->req, res,
			 "nvme%d (%s): %s of '%s' at %" PRIu64 " (file offset %" PRIu64 "%s): %s",
			 p->index, p->file, op_name(s->req->op), s->req->obj->name,
			 s->unit * t->unit + s->unit_off, s->file_off + s->done,
			 s->rmw ? ", reading its stripe unit first" : "", tier_strerror(res));
		sub_done(s);
		return;
	}
	if (res == 0) {
		req_fail(s->req, -EIO,
			 "nvme%d (%s): %s of '%s' at %" PRIu64 " (file offset %" PRIu64
			 "): the device transferred nothing (end of file?)",
			 p->index, p->file, op_name(s->op), s->req->obj->name,
			 s->unit * t->unit + s->unit_off, s->file_off + s->done);
		sub_done(s);
		return;
	}
	s->done += (uint32_t)res;
	if (s->done < s->dev_len) {
		atomic_fetch_add(&t->short_ios, 1);
		resubmit(p, s);
		return;
	}
	sub_complete(t, s);
}

static void *ring_main(void *v)
{
	struct nvme_path *p = v;
	struct tier_nvme *t = p->t;
	bool stop = false;

	while (!stop) {
		struct io_uring_cqe *cqe;
		int rc;

		/* Sleeps in the kernel until a completion arrives. */
		rc = io_uring_wait_cqe(&p->ring, &cqe);
		if (rc == -EINTR || rc == -EAGAIN)
			continue;
		if (rc < 0) {
			TIER_ERROR(TIER_SS_NVME, "nvme%d: io_uring_wait_cqe: %s", p->index,
				   tier_strerror(rc));
			tier_sleep_ns(1000000);
			continue;
		}
		do {
			uint64_t tag = cqe->user_data;
			int res = cqe->res;

			io_uring_cqe_seen(&p->ring, cqe);
			pthread_mutex_lock(&p->lock);
			p->inflight--;
			pthread_mutex_unlock(&p->lock);
			if (tag == STOP_TAG)
				stop = true;
			else if (tag)
				handle_cqe(t, p, (struct subio *)(uintptr_t)tag, res);
		} while (io_uring_peek_cqe(&p->ring, &cqe) == 0);
		/* Slots were freed: move waiting sub-I/Os in. */
		hand_over(p, NULL, NULL);
	}
	return NULL;
}

/* ------------------------------------------------------------ headers */

void nvme_header_seal(struct tier_nvme_header *h)
{
	h->header_crc = ts_crc32c(0, h, offsetof(struct tier_nvme_header, header_crc));
}

int nvme_header_check(const struct tier_nvme_header *h, const char *file)
{
	if (memcmp(h->magic, TIER_NVME_MAGIC, 8) != 0)
		return ts_err(-ENOMSG, "%s: not a tierstore backing file (no header)", file);
	if (h->version != TIER_NVME_FORMAT_VERSION || h->header_size != TIER_NVME_HEADER_SIZE)
		return ts_err(-EPROTO, "%s: tierstore backing file of format version %u (this library writes version %u)",
				file, h->version, TIER_NVME_FORMAT_VERSION);
	if (ts_crc32c(0, h, offsetof(struct tier_nvme_header, header_crc)) != h->header_crc)
		return ts_err(-EBADMSG, "%s: the header is damaged (crc32c mismatch)", file);
	return 0;
}

static int header_io(struct nvme_path *p, struct tier_nvme_header *h, bool write)
{
	ssize_t n;
	int rc = tier_fault_check(TIER_FAULT_NVME_HEADER);

	if (rc)
		return ts_err(rc, "nvme%d (%s): header %s: %s", p->index, p->file,
				write ? "write" : "read", tier_strerror(rc));
	do {
		n = write ? pwrite(p->fd, h, sizeof(*h), 0) : pread(p->fd, h, sizeof(*h), 0);
	} while (n < 0 && errno == EINTR);
	if (n < 0)
		return ts_err(-errno, "nvme%d (%s): header %s: %s", p->index, p->file,
				write ? "write" : "read", tier_strerror(errno));
	if ((size_t)n != sizeof(*h))
		return ts_err(write ? -EIO : -ENOMSG, "nvme%d (%s): header %s: short transfer (%zd bytes)",
				p->index, p->file, write ? "write" : "read", n);
	return 0;
}

static uint64_t realtime_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void fill_header(struct tier_nvme *t, struct nvme_path *p, struct tier_nvme_header *h,
			uint64_t capacity, bool clean)
{
	memset(h, 0, sizeof(*h));
	memcpy(h->magic, TIER_NVME_MAGIC, 8);
	h->version = TIER_NVME_FORMAT_VERSION;
	h->header_size = TIER_NVME_HEADER_SIZE;
	memcpy(h->store_uuid, t->uuid, 16);
	memcpy(h->store_name, t->name, strnlen(t->name, sizeof(h->store_name)));
	h->path_index = (uint32_t)p->index;
	h->npaths = t->npaths;
	h->stripe_unit = t->unit;
	h->block_size = p->block;
	h->data_offset = p->data_off;
	h->capacity = capacity;
	h->checksum = t->csum ? 1 : 0;
	h->flags = clean ? TIER_NVME_HDR_CLEAN : 0;
	if (!p->created_ns)
		p->created_ns = realtime_ns();
	h->created_ns = p->created_ns;
	h->closed_ns = clean ? realtime_ns() : 0;
	nvme_header_seal(h);
}

/* --------------------------------------------------------- open, close */

static int mkdir_p(const char *dir)
{
	char buf[PATH_MAX];
	int rc = tier_fault_check(TIER_FAULT_MKDIR);

	if (rc)
		return ts_err(rc, "%s: mkdir: %s", dir, tier_strerror(rc));
	snprintf(buf, sizeof(buf), "%s", dir);
	for (char *q = buf + 1; *q; q++) {
		if (*q != '/')
			continue;
		*q = '\0';
		if (mkdir(buf, 0700) != 0 && errno != EEXIST)
			return ts_err(-errno, "%s: mkdir: %s", buf, tier_strerror(errno));
		*q = '/';
	}
	if (mkdir(buf, 0700) != 0 && errno != EEXIST)
		return ts_err(-errno, "%s: mkdir: %s", buf, tier_strerror(errno));
	return 0;
}

/* Opens (creating if need be) and preallocates one backing file. */
static int path_open(struct tier_nvme *t, struct nvme_path *p, const struct tier_nvme_path_cfg *pc)
{
	struct tier_nvme_header *h = NULL;
	uint64_t size;
	struct stat st;
	bool existed;
	int rc, lbs;

	p->index = (int)(pc - t->cfg->paths);
	p->direct = pc->direct;
	p->block = pc->block_size;
	p->qd = pc->queue_depth;
	p->fd = -1;
	p->file = ts_strdup(pc->file);
	if (!p->file)
		return ts_err(-ENOMEM, "nvme: out of memory");
	if (pc->create) {
		char dir[PATH_MAX];
		char *slash;

		snprintf(dir, sizeof(dir), "%s", pc->file);
		slash = strrchr(dir, '/');
		if (slash && slash != dir) {
			*slash = '\0';
			rc = mkdir_p(dir);
			if (rc)
				return rc;
		}
	}
	rc = tier_fault_check(TIER_FAULT_NVME_OPEN);
	if (rc)
		return ts_err(rc, "nvme%d (%s): open: %s", p->index, p->file, tier_strerror(rc));
	existed = stat(p->file, &st) == 0;
	p->created = !existed;
	p->fd = open(p->file, O_RDWR | O_CREAT | O_CLOEXEC | (p->direct ? O_DIRECT : 0), 0600);
	if (p->fd < 0) {
		rc = -errno;
		if (rc == -EINVAL && p->direct)
			return ts_err(rc, "nvme%d (%s): the file system refuses O_DIRECT (set direct: false for this path)",
					p->index, p->file);
		return ts_err(rc, "nvme%d (%s): open: %s", p->index, p->file, tier_strerror(rc));
	}
	lbs = path_lbs(p->fd);
	if (p->direct && lbs > (int)p->block)
		return ts_err(-EINVAL, "nvme%d (%s): block_size %u is below the device's logical block size %d",
				p->index, p->file, p->block, lbs);
	if (p->block < 4096)
		p->block = 4096; /* extents and headers are at least 4 KiB aligned */
	/* The data area and every extent start on an `align` boundary, so a
	 * stripe unit never straddles the device's larger internal chunks. */
	p->data_off = round_up(TIER_NVME_HEADER_SIZE, t->align);

	if (posix_memalign((void **)&h, 4096, sizeof(*h)) != 0)
		return ts_err(-ENOMEM, "nvme: out of memory");
	if (existed && st.st_size > 0) {
		/* Never overwrite a file that is not ours. */
		rc = header_io(p, h, false);
		if (rc && rc != -ENOMSG)
			goto out; /* cannot tell whose it is: leave it alone */
		if (rc == 0)
			rc = nvme_header_check(h, p->file);
		if (rc == -ENOMSG) {
			rc = ts_err(-EEXIST, "nvme%d (%s): the file exists and is not a tierstore backing file; not overwriting it",
				      p->index, p->file);
			goto out;
		}
		if (rc == -EPROTO)
			goto out;
		/* Ours (or ours but damaged): its contents are a cache of a
		 * previous run and are reinitialised. */
		TIER_INFO(TIER_SS_NVME, "nvme%d (%s): reusing an existing backing file", p->index,
			  p->file);
	}
	/* Ours from here on (new, or a backing file being reused). */
	p->owned = true;
	if (fchmod(p->fd, 0600) != 0)
		TIER_WARN(TIER_SS_NVME, "nvme%d (%s): chmod 0600: %s", p->index, p->file,
			  tier_strerror(errno));
	size = p->data_off + pc->capacity;
	rc = tier_fault_check(TIER_FAULT_NVME_FALLOCATE);
	if (rc == 0 && fallocate(p->fd, 0, 0, (off_t)size) != 0)
		rc = -errno;
	if (rc == -EOPNOTSUPP) {
		TIER_WARN(TIER_SS_NVME, "nvme%d (%s): fallocate not supported; extending the file instead",
			  p->index, p->file);
		rc = ftruncate(p->fd, (off_t)size) ? -errno : 0;
	}
	if (rc) {
		ts_err(rc, "nvme%d (%s): preallocating %" PRIu64 " bytes: %s", p->index, p->file,
			 size, tier_strerror(rc));
		goto out;
	}
	p->capacity = pc->capacity;
	fill_header(t, p, h, pc->capacity, false);
	rc = header_io(p, h, true);
	if (rc)
		goto out;
	rc = extents_init(&p->alloc, pc->capacity, t->align);
out:
	free(h);
	return rc;
}

static int ring_open(struct tier_nvme *t, struct nvme_path *p, const struct tier_nvme_path_cfg *pc)
{
	struct io_uring_params params;
	int rc;

	memset(&params, 0, sizeof(params));
	if (t->cfg->sqpoll) {
		params.flags |= IORING_SETUP_SQPOLL;
		params.sq_thread_idle = 50;
	}
	rc = tier_fault_check(TIER_FAULT_NVME_RING);
	if (rc == 0)
		rc = io_uring_queue_init_params(pc->queue_depth, &p->ring, &params);
	if (rc == -EPERM && t->cfg->sqpoll) {
		TIER_WARN(TIER_SS_NVME, "nvme%d: SQPOLL refused (%s); using an ordinary ring",
			  p->index, tier_strerror(rc));
		memset(&params, 0, sizeof(params));
		rc = io_uring_queue_init_params(pc->queue_depth, &p->ring, &params);
	}
	if (rc)
		return ts_err(rc, "nvme%d (%s): io_uring_queue_init (depth %u): %s", p->index,
				p->file, pc->queue_depth, tier_strerror(rc));
	p->ring_ok = true;
	rc = tier_fault_check(TIER_FAULT_NVME_REGISTER);
	if (rc == 0)
		rc = io_uring_register_files(&p->ring, &p->fd, 1);
	if (rc) {
		TIER_WARN(TIER_SS_NVME, "nvme%d: registering the file failed (%s); using its descriptor",
			  p->index, tier_strerror(rc));
	} else {
		p->fixed_files = true;
	}
	pthread_mutex_init(&p->lock, NULL);
	pthread_mutex_init(&p->work_lock, NULL);
	pthread_cond_init(&p->work_cond, NULL);
	/* Two workers: a burst of completions is verified on both cores. */
	for (unsigned w = 0; w < 2; w++) {
		rc = -pthread_create(&p->worker[w], NULL, worker_main, p);
		if (rc)
			return ts_err(rc, "nvme%d: starting its checksum worker: %s", p->index,
					tier_strerror(rc));
		p->nworkers++;
	}
	rc = -pthread_create(&p->thread, NULL, ring_main, p);
	if (rc)
		return ts_err(rc, "nvme%d: starting its completion thread: %s", p->index,
				tier_strerror(rc));
	p->thread_ok = true;
	return 0;
}

static void ring_stop(struct nvme_path *p)
{
	if (p->thread_ok) {
		struct io_uring_sqe *sqe;

		pthread_mutex_lock(&p->lock);
		while (!(sqe = io_uring_get_sqe(&p->ring)))
			io_uring_submit(&p->ring);
		io_uring_prep_nop(sqe);
		io_uring_sqe_set_data64(sqe, STOP_TAG);
		p->inflight++;
		io_uring_submit(&p->ring);
		pthread_mutex_unlock(&p->lock);
		pthread_join(p->thread, NULL);
		p->thread_ok = false;
		pthread_mutex_destroy(&p->lock);
	}
	if (p->nworkers) {
		pthread_mutex_lock(&p->work_lock);
		p->work_stop = true;
		pthread_cond_broadcast(&p->work_cond);
		pthread_mutex_unlock(&p->work_lock);
		for (unsigned w = 0; w < p->nworkers; w++)
			pthread_join(p->worker[w], NULL);
		p->nworkers = 0;
		pthread_mutex_destroy(&p->work_lock);
		pthread_cond_destroy(&p->work_cond);
	}
	if (p->ring_ok) {
		/* The kernel tears a ring down asynchronously, and a file still
		 * registered with it stays open until then: unlinked, a scratch
		 * file's blocks would stay allocated for a while after close,
		 * so that the next preallocation on the same disk could fail
		 * with ENOSPC.  Unregistering waits for the ring's references. */
		if (p->fixed_files)
			(void)io_uring_unregister_files(&p->ring);
		io_uring_queue_exit(&p->ring);
		p->ring_ok = false;
		p->fixed_files = false;
	}
}

static void drain(struct tier_nvme *t)
{
	pthread_mutex_lock(&t->drain_lock);
	while (atomic_load(&t->inflight_reqs) > 0)
		pthread_cond_wait(&t->drained, &t->drain_lock);
	pthread_mutex_unlock(&t->drain_lock);
}

int tier_nvme_close(struct tier_nvme *t)
{
	int rc = 0;

	if (!t)
		return 0;
	atomic_store(&t->closing, true);
	drain(t);
	for (unsigned i = 0; i < t->npaths; i++) {
		struct nvme_path *p = &t->paths[i];

		ring_stop(p);
		if (p->fd >= 0) {
			/* A clean header only on files that are ours, after an
			 * open that completed (t->opened), unless about to go. */
			if (p->owned && t->opened && !((t->flags & TIER_NVME_SCRATCH) && p->created)) {
				struct tier_nvme_header *h = NULL;

				if (posix_memalign((void **)&h, 4096, sizeof(*h)) == 0) {
					fill_header(t, p, h, p->capacity, true);
					if (header_io(p, h, true) && rc == 0)
						rc = -EIO;
					free(h);
				}
				if (fsync(p->fd) != 0 && rc == 0)
					rc = ts_err(-errno, "nvme%d (%s): fsync: %s", p->index,
						      p->file, tier_strerror(errno));
			}
			close(p->fd);
			if ((t->flags & TIER_NVME_SCRATCH) && p->created)
				unlink(p->file);
		}
		extents_fini(&p->alloc);
		free(p->file);
	}
	while (t->objs) {
		struct tier_nvme_obj *o = t->objs;

		t->objs = o->next;
		free(o->name);
		free(o->crc);
		free(o->crc_ok);
		free(o);
	}
	pthread_mutex_destroy(&t->lock);
	pthread_mutex_destroy(&t->drain_lock);
	pthread_cond_destroy(&t->drained);
	free(t->paths);
	free(t);
	return rc;
}

int tier_nvme_open(const struct tier_manifest *m, unsigned flags, struct tier_nvme **out)
{
	const struct tier_config *c = manifest_config(m);
	struct tier_nvme *t;
	int rc = 0;

	*out = NULL;
	ts_err_clear();
	if (c->npaths == 0)
		return ts_err(-ENODEV, "%s: the manifest has no NVMe paths", c->source);
	t = ts_calloc(1, sizeof(*t));
	if (!t)
		return ts_err(-ENOMEM, "nvme: out of memory");
	t->cfg = c;
	snprintf(t->name, sizeof(t->name), "%s", c->name);
	t->flags = flags;
	t->unit = (uint32_t)c->stripe_unit;
	t->csum = c->checksum == TIER_CSUM_CRC32C;
	t->block = 4096;
	for (size_t i = 0; i < c->npaths; i++)
		if (c->paths[i].block_size > t->block)
			t->block = c->paths[i].block_size;
	t->align = t->unit < (1u << 20) ? t->unit : (1u << 20);
	if (t->align < t->block)
		t->align = t->block;
	if (getrandom(t->uuid, sizeof(t->uuid), 0) != (ssize_t)sizeof(t->uuid)) {
		uint64_t x = tier_now_ns() ^ (uint64_t)getpid() << 32;

		memcpy(t->uuid, &x, 8);
	}
	pthread_mutex_init(&t->lock, NULL);
	pthread_mutex_init(&t->drain_lock, NULL);
	pthread_cond_init(&t->drained, NULL);
	t->paths = ts_calloc(c->npaths, sizeof(*t->paths));
	if (!t->paths) {
		rc = ts_err(-ENOMEM, "nvme: out of memory");
		goto fail;
	}
	t->npaths = (unsigned)c->npaths;
	for (unsigned i = 0; i < t->npaths; i++) {
		t->paths[i].t = t;
		t->paths[i].fd = -1;
	}
	for (unsigned i = 0; i < t->npaths; i++) {
		rc = path_open(t, &t->paths[i], &c->paths[i]);
		if (rc)
			goto fail;
		rc = ring_open(t, &t->paths[i], &c->paths[i]);
		if (rc)
			goto fail;
	}
	TIER_INFO(TIER_SS_NVME, "NVMe tier: %u path(s), stripe unit %u, checksums %s",
		  t->npaths, t->unit, t->csum ? "crc32c" : "off");
	/* The manifest may be freed from now on: nothing below reads it. */
	t->cfg = NULL;
	t->opened = true;
	*out = t;
	return 0;
fail:
	{
		char saved[TIER_ERR_MAX];

		snprintf(saved, sizeof(saved), "%s", tier_last_error());
		/* Leave nothing behind: files this open created go too. */
		t->flags |= TIER_NVME_SCRATCH;
		tier_nvme_close(t);
		ts_err(rc, "%s", saved);
	}
	return rc;
}

int tier_nvme_register_buffer(struct tier_nvme *t, void *base, size_t len)
{
	int rc = 0;

	ts_err_clear();
	if (len == 0 || len > (1ull << 30))
		return ts_err(-EINVAL, "nvme: a fixed buffer is 1 byte to 1 GiB (got %zu)", len);
	if (atomic_load(&t->active_reqs) > 0)
		return ts_err(-EBUSY, "nvme: buffers are registered only while no request is in flight");
	if (t->fixed_refused)
		return 0;
	if (t->nfixed == MAX_FIXED_BUFS)
		return ts_err(-ENOSPC, "nvme: at most %d fixed buffers", MAX_FIXED_BUFS);
	t->fixed[t->nfixed++] = (struct iovec){ base, len };
	for (unsigned i = 0; i < t->npaths && rc == 0; i++) {
		struct nvme_path *p = &t->paths[i];

		if (t->nfixed > 1)
			io_uring_unregister_buffers(&p->ring);
		rc = tier_fault_check(TIER_FAULT_NVME_REGISTER);
		if (rc == 0)
			rc = io_uring_register_buffers(&p->ring, t->fixed, t->nfixed);
	}
	if (rc) {
		TIER_WARN(TIER_SS_NVME, "nvme: registering fixed buffers refused (%s; RLIMIT_MEMLOCK?); using ordinary buffers",
			  tier_strerror(rc));
		for (unsigned i = 0; i < t->npaths; i++)
			io_uring_unregister_buffers(&t->paths[i].ring);
		t->nfixed = 0;
		t->fixed_refused = true;
	}
	return 0;
}

/* ------------------------------------------------------------ objects */

/* Units of an n-unit object rotated by rot that land on path p. */
static uint64_t units_on_path(uint64_t n, unsigned npaths, unsigned rot, unsigned p)
{
	uint64_t r = (p + npaths - rot % npaths) % npaths; /* first unit index on p */

	return r < n ? (n - r + npaths - 1) / npaths : 0;
}

int tier_nvme_obj_create(struct tier_nvme *t, const char *name, uint64_t size,
			 struct tier_nvme_obj **out)
{
	struct tier_nvme_obj *o;
	unsigned allocated = 0;
	int rc = 0;

	*out = NULL;
	ts_err_clear();
	if (!name || !*name || strlen(name) > 255 || size == 0)
		return ts_err(-EINVAL, "nvme: an object needs a name (1-255 bytes) and a size above zero");
	{
		uint64_t total = 0;

		for (unsigned p = 0; p < t->npaths; p++)
			total += t->paths[p].alloc.total;
		if (size > total)
			return ts_err(-ENOSPC, "nvme: no room for object '%s' (%" PRIu64
					" bytes): the tier holds %" PRIu64 " bytes in all", name, size, total);
	}
	o = ts_calloc(1, sizeof(*o));
	if (!o)
		return ts_err(-ENOMEM, "nvme: out of memory");
	o->name = ts_strdup(name);
	o->size = size;
	o->nunits = size / t->unit + (size % t->unit != 0);
	o->crc = ts_calloc(o->nunits, sizeof(*o->crc));
	o->crc_ok = ts_calloc(o->nunits, 1);
	if (!o->name || !o->crc || !o->crc_ok) {
		rc = ts_err(-ENOMEM, "nvme: out of memory for object '%s'", name);
		goto fail;
	}
	pthread_mutex_lock(&t->lock);
	for (struct tier_nvme_obj *x = t->objs; x; x = x->next) {
		if (strcmp(x->name, name) == 0) {
			pthread_mutex_unlock(&t->lock);
			rc = ts_err(-EEXIST, "nvme: an object named '%s' exists", name);
			goto fail;
		}
	}
	o->rot = t->next_rot++ % t->npaths;
	for (unsigned p = 0; p < t->npaths; p++, allocated++) {
		uint64_t units = units_on_path(o->nunits, t->npaths, o->rot, p);
		uint64_t bytes = units * t->unit;

		if (units && (o->nunits - 1 + o->rot) % t->npaths == p) {
			/* This path holds the last unit, which may be short. */
			uint64_t last = o->size - (o->nunits - 1) * t->unit;

			bytes = (units - 1) * t->unit + round_up(last, t->block);
		}
		o->ext_len[p] = bytes;
		if (!bytes)
			continue;
		rc = extents_alloc(&t->paths[p].alloc, bytes, &o->ext_off[p]);
		if (rc) {
			char a[32], b[32], d[32];

			rc = ts_err(rc == -ENOSPC ? -ENOSPC : rc,
				      "nvme%u (%s): no room for object '%s' (%s): it needs %s on this path, the largest free extent is %s (%s free in all)",
				      p, t->paths[p].file, name, ts_size_fmt(size, a, sizeof(a)),
				      ts_size_fmt(bytes, b, sizeof(b)),
				      ts_size_fmt(extents_largest(&t->paths[p].alloc), d, sizeof(d)),
				      ts_size_fmt(t->paths[p].alloc.avail, (char[32]){ 0 }, 32));
			break;
		}
	}
	if (rc) {
		for (unsigned p = 0; p < allocated; p++)
			if (o->ext_len[p])
				extents_free(&t->paths[p].alloc, o->ext_off[p], o->ext_len[p]);
		pthread_mutex_unlock(&t->lock);
		goto fail;
	}
	o->next = t->objs;
	t->objs = o;
	pthread_mutex_unlock(&t->lock);
	*out = o;
	return 0;
fail:
	free(o->name);
	free(o->crc);
	free(o->crc_ok);
	free(o);
	return rc;
}

int tier_nvme_obj_destroy(struct tier_nvme *t, struct tier_nvme_obj *o)
{
	struct tier_nvme_obj **pp;

	if (atomic_load(&o->busy))
		return ts_err(-EBUSY, "nvme: object '%s' has requests in flight", o->name);
	pthread_mutex_lock(&t->lock);
	for (pp = &t->objs; *pp && *pp != o; pp = &(*pp)->next)
		;
	if (*pp)
		*pp = o->next;
	for (unsigned p = 0; p < t->npaths; p++)
		if (o->ext_len[p])
			extents_free(&t->paths[p].alloc, o->ext_off[p], o->ext_len[p]);
	pthread_mutex_unlock(&t->lock);
	free(o->name);
	free(o->crc);
	free(o->crc_ok);
	free(o);
	return 0;
}

uint64_t tier_nvme_obj_size(const struct tier_nvme_obj *o)
{
	return o->size;
}

const char *tier_nvme_obj_name(const struct tier_nvme_obj *o)
{
	return o->name;
}

/* ------------------------------------------------------------ requests */

/*
 * Builds the sub-I/O for the part [uoff, uoff + ulen) of unit @u that the
 * caller's @buf covers.  Whole units on aligned memory go to the device
 * directly; the rest use a bounce buffer of the whole unit.
 */
static int make_sub(struct tier_nvme *t, struct nvme_req *r, uint64_t u, uint32_t uoff,
		    uint32_t ulen, char *buf, struct subio **out)
{
	struct tier_nvme_obj *o = r->obj;
	unsigned p = (unsigned)((u + o->rot) % t->npaths);
	struct nvme_path *path = &t->paths[p];
	uint64_t slot = u / t->npaths;
	uint32_t unit_len = (uint32_t)(u == o->nunits - 1 ? o->size - u * t->unit : t->unit);
	uint32_t dev_len = (uint32_t)round_up(unit_len, path->block);
	bool whole = uoff == 0 && ulen == unit_len;
	bool aligned = ((uintptr_t)buf % path->block) == 0;
	struct subio *s = ts_calloc(1, sizeof(*s));

	if (!s)
		return -ENOMEM;
	s->req = r;
	s->path = path;
	s->unit = u;
	s->unit_len = unit_len;
	s->unit_off = uoff;
	s->user_len = ulen;
	s->user_buf = buf;
	s->op = r->op;
	s->buf_index = -1;
	s->file_off = path->data_off + o->ext_off[p] + slot * t->unit;
	if (whole && aligned && dev_len == unit_len) {
		s->dev_buf = buf;
		s->dev_len = dev_len;
		s->full_unit = true;
		s->buf_index = fixed_index(t, buf, dev_len);
	} else if (!t->csum && aligned && uoff % path->block == 0 && ulen % path->block == 0) {
		/* Without checksums an aligned part of a unit goes direct. */
		s->dev_buf = buf;
		s->dev_len = ulen;
		s->file_off += uoff;
		s->buf_index = fixed_index(t, buf, ulen);
	} else {
		if (posix_memalign((void **)&s->bounce, path->block, dev_len) != 0 ||
		    tier_fault_check(TIER_FAULT_ALLOC)) {
			free(s->bounce);
			free(s);
			return -ENOMEM;
		}
		atomic_fetch_add(&t->bounced, 1);
		s->dev_buf = s->bounce;
		s->dev_len = dev_len;
		s->full_unit = true;
		if (r->op == TIER_IO_WRITE) {
			if (whole) {
				memcpy(s->bounce, buf, ulen);
				memset(s->bounce + ulen, 0, dev_len - ulen);
			} else {
				s->rmw = true;          /* read the unit first */
				s->op = TIER_IO_READ;
			}
		}
	}
	/* A write of the whole unit has its checksum now, before it leaves. */
	if (s->op == TIER_IO_WRITE && t->csum && s->full_unit) {
		o->crc[u] = ts_crc32c(0, s->dev_buf, unit_len);
		o->crc_ok[u] = 1;
	}
	*out = s;
	return 0;
}

/* Sub-I/Os per path handed over at once: large requests start on the
 * devices while the checksums of their later units are still computed. */
#define BATCH 4

int tier_nvme_submit(struct tier_nvme *t, struct tier_nvme_obj *o, enum tier_io_op op,
		     uint64_t off, uint64_t len, void *buf, tier_io_cb cb, void *arg)
{
	struct subio *head[TIER_MAX_NVME_PATHS] = { 0 }, *tail[TIER_MAX_NVME_PATHS] = { 0 };
	unsigned count[TIER_MAX_NVME_PATHS] = { 0 };
	struct nvme_req *r;
	uint64_t first, last;
	int rc;

	if (op != TIER_IO_READ && op != TIER_IO_WRITE)
		return ts_err(-EINVAL, "nvme: bad operation %d", (int)op);
	if (len == 0 || off > o->size || len > o->size - off)
		return ts_err(-EINVAL, "nvme: %s of '%s' at %" PRIu64 " for %" PRIu64
				" bytes is outside the object (%" PRIu64 " bytes)",
				op_name(op), o->name, off, len, o->size);
	if (atomic_load(&t->closing))
		return ts_err(-ESHUTDOWN, "nvme: the tier is closing");
	r = ts_calloc(1, sizeof(*r));
	if (!r)
		return ts_err(-ENOMEM, "nvme: out of memory");
	r->t = t;
	r->obj = o;
	r->op = op;
	r->cb = cb;
	r->arg = arg;
	atomic_flag_clear(&r->detail_set);

	first = off / t->unit;
	last = (off + len - 1) / t->unit;
	/* Every unit counts from the start, so no early completion can finish
	 * the request while later units are still being handed over. */
	atomic_store(&r->pending, (int)(last - first + 1));
	atomic_fetch_add(&o->busy, 1);
	atomic_fetch_add(&t->inflight_reqs, 1);
	atomic_fetch_add(&t->active_reqs, 1);
	for (uint64_t u = first; u <= last; u++) {
		uint64_t ustart = u * t->unit;
		uint64_t a = off > ustart ? off : ustart;
		uint64_t b = off + len < ustart + t->unit ? off + len : ustart + t->unit;
		struct subio *s;
		unsigned p;

		rc = make_sub(t, r, u, (uint32_t)(a - ustart), (uint32_t)(b - a),
			      (char *)buf + (a - off), &s);
		if (rc) {
			/*
			 * Units already handed over complete on their own; the
			 * request fails, and the units never built are counted
			 * off here (the last one out runs the callback).
			 */
			int left = (int)(last - u + 1);

			req_fail(r, rc, "nvme: %s of '%s' at %" PRIu64 ": out of memory",
				 op_name(op), o->name, a);
			for (unsigned i = 0; i < t->npaths; i++)
				if (head[i])
					hand_over(&t->paths[i], head[i], tail[i]);
			if (atomic_fetch_sub(&r->pending, left) == left)
				req_finish(r);
			return 0;
		}
		p = (unsigned)(s->path - t->paths);
		if (tail[p])
			tail[p]->next = s;
		else
			head[p] = s;
		tail[p] = s;
		if (++count[p] == BATCH) {
			hand_over(&t->paths[p], head[p], tail[p]);
			head[p] = tail[p] = NULL;
			count[p] = 0;
		}
	}
	for (unsigned i = 0; i < t->npaths; i++)
		if (head[i])
			hand_over(&t->paths[i], head[i], tail[i]);
	return 0;
}

int tier_nvme_submit_ticket(struct tier_nvme *t, struct tier_nvme_obj *o, enum tier_io_op op,
			    uint64_t off, uint64_t len, void *buf, struct tier_ticket **out)
{
	struct tier_ticket *tk = ticket_new();
	int rc;

	*out = NULL;
	if (!tk)
		return ts_err(-ENOMEM, "nvme: out of memory");
	rc = tier_nvme_submit(t, o, op, off, len, buf, ticket_io_cb, tk);
	if (rc) {
		ticket_discard(tk);
		return rc;
	}
	*out = tk;
	return 0;
}

int tier_nvme_read(struct tier_nvme *t, struct tier_nvme_obj *o, uint64_t off, uint64_t len,
		   void *buf)
{
	struct tier_ticket *tk;
	int rc = tier_nvme_submit_ticket(t, o, TIER_IO_READ, off, len, buf, &tk);

	return rc ? rc : tier_ticket_wait(tk);
}

int tier_nvme_write(struct tier_nvme *t, struct tier_nvme_obj *o, uint64_t off, uint64_t len,
		    const void *buf)
{
	struct tier_ticket *tk;
	int rc = tier_nvme_submit_ticket(t, o, TIER_IO_WRITE, off, len, (void *)buf, &tk);

	return rc ? rc : tier_ticket_wait(tk);
}

void tier_nvme_get_stats(const struct tier_nvme *t, struct tier_nvme_stats *out)
{
	struct tier_nvme *m = (struct tier_nvme *)t;

	memset(out, 0, sizeof(*out));
	pthread_mutex_lock(&m->lock);
	for (unsigned i = 0; i < t->npaths; i++) {
		out->capacity += t->paths[i].alloc.total;
		out->free += t->paths[i].alloc.avail;
	}
	pthread_mutex_unlock(&m->lock);
	out->bytes_read = atomic_load(&m->bytes_read);
	out->bytes_written = atomic_load(&m->bytes_written);
	out->requests = atomic_load(&m->requests);
	out->ios = atomic_load(&m->ios);
	out->errors = atomic_load(&m->errors);
	out->csum_errors = atomic_load(&m->csum_errors);
	out->short_ios = atomic_load(&m->short_ios);
	out->retries = atomic_load(&m->retries);
	out->bounced = atomic_load(&m->bounced);
	out->npaths = t->npaths;
	out->stripe_unit = t->unit;
}

void nvme_path_live(struct tier_nvme *t, unsigned i, struct tier_live_path *out)
{
	struct nvme_path *p;

	memset(out, 0, sizeof(*out));
	if (i >= t->npaths)
		return;
	p = &t->paths[i];
	snprintf(out->file, sizeof(out->file), "%s", p->file);
	pthread_mutex_lock(&p->lock);
	out->inflight = p->inflight;
	pthread_mutex_unlock(&p->lock);
	out->reads = atomic_load_explicit(&p->c_reads, memory_order_relaxed);
	out->writes = atomic_load_explicit(&p->c_writes, memory_order_relaxed);
	out->bytes_read = atomic_load_explicit(&p->c_bytes_read, memory_order_relaxed);
	out->bytes_written = atomic_load_explicit(&p->c_bytes_written, memory_order_relaxed);
	out->errors = atomic_load_explicit(&p->c_errors, memory_order_relaxed);
	out->csum_errors = atomic_load_explicit(&p->c_csum_errors, memory_order_relaxed);
	out->lat_sum_ns = atomic_load_explicit(&p->c_lat_sum_ns, memory_order_relaxed);
	/* The count is the histogram's own total, so the two always agree. */
	for (unsigned b = 0; b < TIER_LAT_BUCKETS; b++) {
		out->lat_hist[b] = atomic_load_explicit(&p->c_lat_hist[b], memory_order_relaxed);
		out->lat_count += out->lat_hist[b];
	}
}
