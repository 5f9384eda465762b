/*
 * nvme_ring.c - the NVMe tier's io_uring engine: a ring per path, its
 * setup and teardown, submission, the completion thread, resubmission of
 * short transfers and retries, the checksum workers, fixed buffers, and
 * the per-path live counters (latency included).
 *
 * Engine.  One ring per path, with the path's file registered and,
 * optionally, caller buffers registered as fixed buffers.  A request is cut
 * into one sub-I/O per stripe unit it touches (tiers/nvme_req.c).  Sub-I/Os
 * wait in the ring's `pending` list; pump() moves them into SQEs while
 * fewer than queue_depth are in flight and submits the batch with one
 * io_uring_enter.  A thread per ring sleeps in io_uring_wait_cqe (no busy
 * loop), handles each completion - retry on -EAGAIN/-EINTR, resubmit the
 * rest of a short transfer, verify the checksum, finish a
 * read-modify-write - and pumps again.  A transient error (-EIO,
 * -ETIMEDOUT, -EILSEQ, a checksum mismatch) is retried up to
 * TIER_NVME_IO_RETRIES times after a backoff that is a timeout SQE on the
 * same ring, so no thread sleeps.  A sub-I/O that is done lets the ones
 * waiting on its stripe unit go (nvme_gate_leave, tiers/nvme_req.c).  A
 * request's callback runs when its last sub-I/O is done.
 */
#include "config.h"

#include <errno.h>
#include <inttypes.h>
#include <liburing.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>

#include "common/clock.h"
#include "common/error.h"
#include "common/fault.h"
#include "common/log.h"
#include "kernels/crc32c.h"
#include "tiers/nvme_format.h"
#include "tiers/nvme_impl.h"

#define STOP_TAG ((uint64_t)-1)

/* ------------------------------------------------------------ the rings */

static void sub_free(struct subio *s)
{
	free(s->bounce);
	free(s);
}

/* Prepares one SQE for @s; ring->lock held and a free SQE guaranteed. */
static void prep(struct nvme_path *p, struct subio *s)
{
	struct io_uring_sqe *sqe = io_uring_get_sqe(&p->ring);
	int fd = p->fixed_files ? 0 : p->fd;
	char *b = s->dev_buf + s->done;
	unsigned len = s->dev_len - s->done;
	uint64_t off = s->file_off + s->done;

	if (s->backoff) {
		/* The wait before a retry: its completion resubmits @s. */
		io_uring_prep_timeout(sqe, &s->backoff_ts, 0, 0);
		io_uring_sqe_set_data(sqe, s);
		return;
	}
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
	/* Buffered I/O (direct: false) is a copy through the page cache that
	 * the kernel would run inline, in io_uring_enter, when the pages are
	 * there: one submitting thread copying every stripe unit of the path
	 * in turn.  Its async workers run them side by side. */
	if (!p->direct)
		sqe->flags |= IOSQE_ASYNC;
	io_uring_sqe_set_data(sqe, s);
#if TIER_STATS_BUILD
	s->t_sub = ts_now_ns();
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
	rc = ts_fault_check(TIER_FAULT_NVME_SUBMIT);
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

			nvme_req_fail(s->req, err, "nvme%d (%s): %s of '%s' at %" PRIu64 ": io_uring_submit: %s",
				      p->index, p->file, nvme_op_name(s->req->op), s->req->obj->name,
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
void nvme_hand_over(struct nvme_path *p, struct subio *head, struct subio *tail)
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
	nvme_hand_over(p, s, s);
}

/*
 * Sends @s again after a backoff of 1, 4, 16 ms (a timeout on its ring),
 * as a retry of a transient error @err (@why: what went wrong, for the
 * log).  Counted in retries; one warning per sub-I/O, at its first retry.
 */
static void retry_later(struct nvme_path *p, struct subio *s, int err, const char *why)
{
	struct tier_nvme *t = p->t;
	uint64_t ns = 1000000ull << (2 * s->retries);

	if (s->retries == 0)
		TIER_WARN(TIER_SS_NVME, "nvme%d (%s): %s of '%s' at %" PRIu64 " (file offset %" PRIu64
			  "): %s (%s); retrying, at most %d times",
			  p->index, p->file, nvme_op_name(s->op), s->req->obj->name,
			  s->unit * t->unit + s->unit_off, s->file_off + s->done, why,
			  tier_strerror(err), TIER_NVME_IO_RETRIES);
	s->retries++;
	atomic_fetch_add(&t->retries, 1);
	s->backoff = true;
	s->backoff_ts.tv_sec = 0;
	s->backoff_ts.tv_nsec = (long long)ns;
	resubmit(p, s);
}

/* The last step of a sub-I/O: let what waits on its unit go, account,
 * maybe finish its request. */
static void sub_done(struct subio *s)
{
	struct nvme_req *r = s->req;

	nvme_gate_leave(s);
	sub_free(s);
	if (atomic_fetch_sub(&r->pending, 1) == 1)
		nvme_req_finish(r);
}

/*
 * Verifies the unit @s read.  True: it matches (or has no checksum).
 * False: a mismatch, counted, and @s is taken care of - read again (a bad
 * transfer is possible) while retries are left, else its request failed
 * and @s done.
 */
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
	if (s->retries < TIER_NVME_IO_RETRIES) {
		s->done = 0;
		retry_later(s->path, s, -EBADMSG, "checksum mismatch");
		return false;
	}
	nvme_req_fail(s->req, -EBADMSG,
		      "nvme%d (%s): checksum mismatch in '%s' at %" PRIu64 " (stripe unit %" PRIu64
		      ", file offset %" PRIu64 ", %u bytes): crc32c %08x, expected %08x (read %u times)",
		      s->path->index, s->path->file, o->name, s->unit * t->unit, s->unit,
		      s->file_off, s->unit_len, crc, o->crc[s->unit], s->retries + 1);
	sub_done(s);
	return false;
}

/* The CPU part of a completed read: verify, patch or copy out. */
static void read_work(struct tier_nvme *t, struct subio *s)
{
	struct tier_nvme_obj *o = s->req->obj;

	if (s->full_unit && !unit_verify(t, s, s->dev_buf))
		return; /* read again, or failed */
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
		s->file_off = s->wr_off; /* moved, if copied on write */
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
	if (ts_fault_check(TIER_FAULT_NVME_BITFLIP))
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
	uint64_t ns = ts_now_ns() - s->t_sub;

	atomic_fetch_add_explicit(&p->c_lat_hist[tier_lat_bucket(ns)], 1, memory_order_relaxed);
	atomic_fetch_add_explicit(&p->c_lat_sum_ns, ns, memory_order_relaxed);
	if (res < 0) {
		if (res != -EAGAIN && res != -EINTR &&
		    !(res == -ECANCELED && s->cancels < NVME_MAX_CANCELS))
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

/* Whether @res is an error of @s to retry: one that may not repeat (a
 * failed or timed-out command, a bad transfer), with retries left. */
static bool transient(const struct subio *s, int res)
{
	return (res == -EIO || res == -ETIMEDOUT || res == -EILSEQ) &&
	       s->retries < TIER_NVME_IO_RETRIES;
}

/* A device operation's result @res through the fault sites: an error, a
 * short transfer, a late completion. */
static int cqe_faults(const struct nvme_path *p, int res)
{
	int inj = ts_fault_check(TIER_FAULT_NVME_IO_ERR);

	if (inj)
		res = inj;
	if (res > 0 && ts_fault_check(TIER_FAULT_NVME_SHORT)) {
		/* Half the bytes, in whole blocks (O_DIRECT transfers are). */
		int half = (int)((unsigned)res / 2 / p->block * p->block);

		if (half > 0)
			res = half;
	}
	if (ts_fault_check(TIER_FAULT_NVME_DELAY))
		ts_sleep_ns(20 * 1000000ull);
	return res;
}

static void handle_cqe(struct tier_nvme *t, struct nvme_path *p, struct subio *s, int res)
{
	if (s->backoff) {
		/* The wait before a retry is over (-ETIME): send it. */
		s->backoff = false;
		resubmit(p, s);
		return;
	}
	atomic_fetch_add(&t->ios, 1);
	res = cqe_faults(p, res);
#if TIER_STATS_BUILD
	path_count(p, s, res);
#endif

	if (res == -EAGAIN || res == -EINTR) {
		atomic_fetch_add(&t->retries, 1);
		resubmit(p, s);
		return;
	}
	/*
	 * The engine never cancels a request, so -ECANCELED comes from the
	 * kernel: a request it handed to its worker threads is cancelled when
	 * the thread that submitted it exits (pump() runs on whichever caller
	 * thread submits, and a trainer's threads come and go).  Nothing of it
	 * was done; it goes again from here, the ring thread, which lives as
	 * long as the tier.  Bounded, in case the kernel cancels for a reason
	 * of its own.
	 */
	if (res == -ECANCELED && s->cancels < NVME_MAX_CANCELS) {
		s->cancels++;
		atomic_fetch_add(&t->retries, 1);
		resubmit(p, s);
		return;
	}
	if (transient(s, res)) {
		retry_later(p, s, res, "device error");
		return;
	}
	if (res < 0) {
		char tries[32] = "";

		if (s->retries)
			snprintf(tries, sizeof(tries), " (tried %u times)", s->retries + 1);
		nvme_req_fail(s->req, res,
			      "nvme%d (%s): %s of '%s' at %" PRIu64 " (file offset %" PRIu64 "%s): %s%s",
			      p->index, p->file, nvme_op_name(s->req->op), s->req->obj->name,
			      s->unit * t->unit + s->unit_off, s->file_off + s->done,
			      s->rmw ? ", reading its stripe unit first" : "", tier_strerror(res), tries);
		sub_done(s);
		return;
	}
	if (res == 0) {
		nvme_req_fail(s->req, -EIO,
			      "nvme%d (%s): %s of '%s' at %" PRIu64 " (file offset %" PRIu64
			      "): the device transferred nothing (end of file?)",
			      p->index, p->file, nvme_op_name(s->op), s->req->obj->name,
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
			ts_sleep_ns(1000000);
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
		nvme_hand_over(p, NULL, NULL);
	}
	return NULL;
}

/* ------------------------------------------------------ setup, teardown */

int nvme_ring_open(struct tier_nvme *t, struct nvme_path *p, const struct tiers_path_cfg *pc)
{
	struct io_uring_params params;
	int rc;

	memset(&params, 0, sizeof(params));
	if (t->cfg->sqpoll) {
		params.flags |= IORING_SETUP_SQPOLL;
		params.sq_thread_idle = 50;
	}
	rc = ts_fault_check(TIER_FAULT_NVME_RING);
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
	rc = ts_fault_check(TIER_FAULT_NVME_REGISTER);
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

void nvme_ring_stop(struct nvme_path *p)
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

int tier_nvme_register_buffer(struct tier_nvme *t, void *base, size_t len)
{
	NVME_ARG(t);
	TS_NONNULL(base);
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
		rc = ts_fault_check(TIER_FAULT_NVME_REGISTER);
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

/* ------------------------------------------------------------ path counters */

void tier_nvme_get_path_stats(struct tier_nvme *t, unsigned i, struct tier_nvme_path_stats *out)
{
	NVME_ARG_OR(t, );
	TS_NONNULL_OR(out, );
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
