/*
 * check.h - one check macro per foreign error domain.  Each converts the
 * foreign code to a negative errno, records the detail message (call, file,
 * line) and jumps to the caller's cleanup label, so cleanup has one exit
 * path.  The *_IGNORE forms are for cleanup code: they log, keep the first
 * error in @rc and go on, so one failing release never skips the next.
 */
#ifndef TIER_COMMON_CHECK_H
#define TIER_COMMON_CHECK_H

#include <errno.h>

#include "common/error.h"
#include "common/log.h"

/* A system call returning -1 and setting errno; EINTR is retried. */
#define TIER_SYS_CHECK_GOTO(call, rc, label)                                   \
	do {                                                                    \
		long tier_sys_r_;                                               \
		do {                                                            \
			tier_sys_r_ = (long)(call);                             \
		} while (tier_sys_r_ == -1 && errno == EINTR);                  \
		if (tier_sys_r_ == -1) {                                        \
			(rc) = ts_err(-errno, "%s: %s (%s:%d)", #call,        \
					tier_strerror(errno), __FILE__,         \
					__LINE__);                              \
			goto label;                                             \
		}                                                               \
	} while (0)

/* A pthread call returning 0 or a positive error number (errno untouched). */
#define TIER_PTHREAD_CHECK_GOTO(call, rc, label)                               \
	do {                                                                    \
		int tier_pt_r_ = (call);                                        \
		if (tier_pt_r_ != 0) {                                          \
			(rc) = ts_err(-tier_pt_r_, "%s: %s (%s:%d)", #call,   \
					tier_strerror(tier_pt_r_), __FILE__,    \
					__LINE__);                              \
			goto label;                                             \
		}                                                               \
	} while (0)

/* A tierstore call returning 0 or -errno; the detail message is kept. */
#define TIER_CHECK_GOTO(call, rc, label)                                       \
	do {                                                                    \
		int tier_c_r_ = (call);                                         \
		if (tier_c_r_ < 0) {                                            \
			(rc) = tier_c_r_;                                       \
			goto label;                                             \
		}                                                               \
	} while (0)

/* In cleanup: log a failure, keep the first error in @rc, carry on. */
#define TIER_CHECK_IGNORE(call, rc)                                            \
	do {                                                                    \
		int tier_ci_r_ = (call);                                        \
		if (tier_ci_r_ < 0) {                                           \
			TIER_WARN(TIER_SS_COMMON, "%s failed: %s", #call,       \
				  tier_strerror(tier_ci_r_));                   \
			if ((rc) == 0)                                          \
				(rc) = tier_ci_r_;                              \
		}                                                               \
	} while (0)

#endif
