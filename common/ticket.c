/*
 * ticket.c - one-shot completions (see ticket.h).
 */
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>

#include "common/error.h"
#include "common/fault.h"
#include "common/ticket.h"

struct tier_ticket {
	pthread_mutex_t lock;
	pthread_cond_t cond;
	bool done;
	int result;
	char detail[TIER_ERR_MAX];
};

struct tier_ticket *ticket_new(void)
{
	struct tier_ticket *tk = ts_calloc(1, sizeof(*tk));

	if (!tk)
		return NULL;
	pthread_mutex_init(&tk->lock, NULL);
	pthread_cond_init(&tk->cond, NULL);
	return tk;
}

void ticket_complete(struct tier_ticket *tk, int result, const char *detail)
{
	pthread_mutex_lock(&tk->lock);
	tk->result = result;
	snprintf(tk->detail, sizeof(tk->detail), "%s", detail ? detail : "");
	tk->done = true;
	pthread_cond_signal(&tk->cond);
	pthread_mutex_unlock(&tk->lock);
}

void ticket_io_cb(void *arg, int result, const char *detail)
{
	ticket_complete(arg, result, detail);
}

void ticket_discard(struct tier_ticket *tk)
{
	pthread_mutex_destroy(&tk->lock);
	pthread_cond_destroy(&tk->cond);
	free(tk);
}

bool ticket_done(struct tier_ticket *tk)
{
	bool done;

	pthread_mutex_lock(&tk->lock);
	done = tk->done;
	pthread_mutex_unlock(&tk->lock);
	return done;
}

int tier_ticket_wait(struct tier_ticket *tk)
{
	TS_NONNULL(tk);
	int rc;

	pthread_mutex_lock(&tk->lock);
	while (!tk->done)
		pthread_cond_wait(&tk->cond, &tk->lock);
	pthread_mutex_unlock(&tk->lock);
	rc = tk->result;
	if (rc)
		ts_err(rc, "%s", tk->detail);
	else
		ts_err_clear();
	ticket_discard(tk);
	return rc;
}
