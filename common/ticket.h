/*
 * ticket.h - a one-shot completion a caller waits on (tier_ticket_wait in
 * the public API).  The completing side calls ticket_complete exactly
 * once; the waiter frees it.  Used by the NVMe tier's submit_ticket and by
 * the store's asynchronous acquire.
 */
#ifndef TIER_COMMON_TICKET_H
#define TIER_COMMON_TICKET_H

#include <stdbool.h>

#include "tierstore/pool.h" /* struct tier_ticket, tier_ticket_wait */

/* A new ticket, or NULL (fault site ALLOC). */
struct tier_ticket *ticket_new(void);

/* Records @result (0 or -errno) and @detail and wakes the waiter. */
void ticket_complete(struct tier_ticket *tk, int result, const char *detail);

/* ticket_complete with the tier_io_cb signature (arg is the ticket). */
void ticket_io_cb(void *arg, int result, const char *detail);

/* Whether the ticket has completed (tier_ticket_wait would not block). */
bool ticket_done(struct tier_ticket *tk);

/* Frees a ticket nobody will complete or wait for (submission failed). */
void ticket_discard(struct tier_ticket *tk);

#endif
