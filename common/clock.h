/*
 * clock.h - the monotonic clock every timing in tierstore uses.  Never the
 * wall clock: a step time must not jump when NTP adjusts the date.
 */
#ifndef TIER_COMMON_CLOCK_H
#define TIER_COMMON_CLOCK_H

#include <stdint.h>
#include <time.h>

/* Nanoseconds on CLOCK_MONOTONIC (an arbitrary origin; only differences mean anything). */
static inline uint64_t ts_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* Nanoseconds since the epoch on CLOCK_REALTIME: only for timestamps
 * shown to people (when a store opened, when counters were published),
 * never for durations. */
static inline uint64_t ts_wall_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* The CLOCK_REALTIME instant @ns nanoseconds from now: the absolute time
 * pthread_cond_timedwait() takes (a condition variable's default clock). */
static inline struct timespec ts_abstime_in(uint64_t ns)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	ns += (uint64_t)ts.tv_nsec;
	ts.tv_sec += (time_t)(ns / 1000000000ull);
	ts.tv_nsec = (long)(ns % 1000000000ull);
	return ts;
}

static inline double ts_ns_to_s(uint64_t ns)
{
	return (double)ns * 1e-9;
}

/* Sleeps @ns nanoseconds, resuming after signals until the time has passed. */
static inline void ts_sleep_ns(uint64_t ns)
{
	struct timespec ts = {
		.tv_sec = (time_t)(ns / 1000000000ull),
		.tv_nsec = (long)(ns % 1000000000ull),
	};

	while (clock_nanosleep(CLOCK_MONOTONIC, 0, &ts, &ts) != 0)
		;
}

#endif
