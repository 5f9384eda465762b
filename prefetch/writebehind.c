/*
 * writebehind.c - the write-behind thread (see writebehind.h).  The queue
 * is a growable ring of objects; in-flight write-backs are tickets of
 * store_flush_async(), polled in order (a ticket has no callback, so
 * while some are in flight the thread wakes every millisecond, which
 * costs nothing measurable against write-backs of megabytes).
 */
#include "config.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/clock.h"
#include "common/error.h"
#include "common/fault.h"
#include "common/log.h"
#include "common/ticket.h"
#include "prefetch/writebehind.h"
#include "tiers/store.h"

struct wb {
	struct tier_store *s;
	unsigned depth;
	pthread_t thread;
	pthread_mutex_t lock;
	pthread_cond_t cond;      /* work queued, or quit */
	pthread_cond_t idle;      /* queue empty and nothing in flight */
	struct tier_obj **q;
	size_t qhead, qlen, qcap;
	struct tier_ticket **fly;
	size_t nfly;
	bool quit;
	int err;
	char detail[TIER_ERR_MAX];
};

static void record(struct wb *w, int rc, const char *detail)
{
	if (!w->err) {
		w->err = rc;
		snprintf(w->detail, sizeof(w->detail), "%s", detail);
	}
	TIER_WARN(TIER_SS_PREFETCH, "write-behind: %s (the bytes stay dirty above)", detail);
}

/* Reaps completed write-backs at the front (lock held). */
static void reap(struct wb *w)
{
	while (w->nfly && ticket_done(w->fly[0])) {
		int rc = tier_ticket_wait(w->fly[0]);

		if (rc && rc != -EBUSY)
			record(w, rc, tier_last_error());
		memmove(w->fly, w->fly + 1, (w->nfly - 1) * sizeof(*w->fly));
		w->nfly--;
	}
}

static void *wb_main(void *arg)
{
	struct wb *w = arg;

	pthread_mutex_lock(&w->lock);
	for (;;) {
		reap(w);
		while (w->qlen && w->nfly < w->depth) {
			struct tier_obj *o = w->q[w->qhead];
			struct tier_ticket *tk;
			int rc;

			w->qhead = (w->qhead + 1) % w->qcap;
			w->qlen--;
			rc = store_flush_async(w->s, o, &tk);
			if (rc) {
				record(w, rc, tier_last_error());
				continue;
			}
			w->fly[w->nfly++] = tk;
		}
		if (!w->qlen && !w->nfly) {
			pthread_cond_broadcast(&w->idle);
			if (w->quit)
				break;
			pthread_cond_wait(&w->cond, &w->lock);
		} else if (w->nfly) {
			struct timespec ts = ts_abstime_in(1000000);

			pthread_cond_timedwait(&w->cond, &w->lock, &ts);
		}
	}
	pthread_mutex_unlock(&w->lock);
	return NULL;
}

int wb_create(struct tier_store *s, unsigned depth, struct wb **out)
{
	struct wb *w;
	int rc;

	*out = NULL;
	if (!depth)
		depth = 1;
	if (!(w = ts_calloc(1, sizeof(*w))))
		return ts_err(-ENOMEM, "write-behind: out of memory");
	w->s = s;
	w->depth = depth;
	w->fly = ts_calloc(depth, sizeof(*w->fly));
	if (!w->fly) {
		free(w);
		return ts_err(-ENOMEM, "write-behind: out of memory");
	}
	pthread_mutex_init(&w->lock, NULL);
	pthread_cond_init(&w->cond, NULL);
	pthread_cond_init(&w->idle, NULL);
	rc = ts_fault_check(TIER_FAULT_THREAD_CREATE);
	if (!rc)
		rc = -pthread_create(&w->thread, NULL, wb_main, w);
	if (rc) {
		pthread_mutex_destroy(&w->lock);
		pthread_cond_destroy(&w->cond);
		pthread_cond_destroy(&w->idle);
		free(w->fly);
		free(w);
		return ts_err(rc, "write-behind: creating its thread: %s", tier_strerror(rc));
	}
	*out = w;
	return 0;
}

int wb_push(struct wb *w, struct tier_obj *o)
{
	pthread_mutex_lock(&w->lock);
	if (w->qlen == w->qcap) {
		size_t ncap = w->qcap ? 2 * w->qcap : 64;
		struct tier_obj **nq = ts_malloc(ncap * sizeof(*nq));

		if (!nq) {
			pthread_mutex_unlock(&w->lock);
			return ts_err(-ENOMEM, "write-behind: out of memory queueing '%s'",
					tier_obj_name(o));
		}
		for (size_t i = 0; i < w->qlen; i++)
			nq[i] = w->q[(w->qhead + i) % w->qcap];
		free(w->q);
		w->q = nq;
		w->qcap = ncap;
		w->qhead = 0;
	}
	w->q[(w->qhead + w->qlen) % w->qcap] = o;
	w->qlen++;
	pthread_cond_signal(&w->cond);
	pthread_mutex_unlock(&w->lock);
	return 0;
}

void wb_drain(struct wb *w)
{
	pthread_mutex_lock(&w->lock);
	while (w->qlen || w->nfly) {
		pthread_cond_signal(&w->cond);
		pthread_cond_wait(&w->idle, &w->lock);
	}
	pthread_mutex_unlock(&w->lock);
}

int wb_take_error(struct wb *w, char *detail, size_t len)
{
	int rc;

	pthread_mutex_lock(&w->lock);
	rc = w->err;
	if (rc && detail)
		snprintf(detail, len, "%s", w->detail);
	w->err = 0;
	pthread_mutex_unlock(&w->lock);
	return rc;
}

void wb_destroy(struct wb *w)
{
	if (!w)
		return;
	pthread_mutex_lock(&w->lock);
	w->quit = true;
	pthread_cond_signal(&w->cond);
	pthread_mutex_unlock(&w->lock);
	pthread_join(w->thread, NULL);
	pthread_mutex_destroy(&w->lock);
	pthread_cond_destroy(&w->cond);
	pthread_cond_destroy(&w->idle);
	free(w->q);
	free(w->fly);
	free(w);
}
