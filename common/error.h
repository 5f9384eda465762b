/*
 * error.h - the error convention: 0 or a negative errno from every
 * int-returning function, and a thread-local detail message saying what
 * failed and where.  ts_err() records the detail and returns the code, so a
 * failure site reads `return ts_err(-EINVAL, "...")`.
 */
#ifndef TIER_COMMON_ERROR_H
#define TIER_COMMON_ERROR_H

#include <stdarg.h>
#include <stddef.h>

#include "tierstore/common.h"

#ifdef __cplusplus
extern "C" {
#endif

#define TIER_ERR_MAX 4096

/* Sets the detail message (replacing any previous one); returns @err. */
int ts_err(int err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
int ts_verr(int err, const char *fmt, va_list ap);

/*
 * Appends one more line to the detail message, for a call that reports
 * several problems.  The message is cut (with "...") at TIER_ERR_MAX bytes.
 */
void ts_err_append(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Clears the detail message: a call that succeeds leaves "". */
void ts_err_clear(void);

/*
 * Prefixes the current detail message with "prefix: ", for a caller adding
 * context to a failure reported deeper down (a trailing ": " in @fmt is
 * not doubled).
 */
void ts_err_prefix(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/*
 * A NULL argument of a public function (docs/api.md, "NULL arguments"):
 * sets the detail "FN: ARG is NULL" and returns -EINVAL.  TS_NONNULL
 * returns that from the calling function when @arg is NULL;
 * TS_NONNULL_OR(arg, ret) returns @ret instead (a function that returns a
 * pointer, a size or nothing: TS_NONNULL_OR(p, NULL), (p, 0), (p, )).
 */
int ts_err_null(const char *fn, const char *arg);
#define TS_NONNULL(arg)                                          \
	do {                                                     \
		if (!(arg))                                      \
			return ts_err_null(__func__, #arg);      \
	} while (0)
#define TS_NONNULL_OR(arg, ret)                                  \
	do {                                                     \
		if (!(arg)) {                                    \
			ts_err_null(__func__, #arg);             \
			return ret;                              \
		}                                                \
	} while (0)

/*
 * A handle argument (a store, NVMe tier, optimizer): TS_NONNULL, and in a
 * build with TIER_DEBUG_HANDLES (buildtype debug or debugoptimized) also
 * its magic field against @mg: -EINVAL "FN: ARG is not an open WHAT
 * (closed, or not a tier_WHAT)" for a handle that was closed (while its
 * memory is still mapped) or is something else.  The close functions
 * poison the magic.  A release build checks NULL alone.
 */
#if defined(TIER_DEBUG_HANDLES) && TIER_DEBUG_HANDLES
int ts_err_handle(const char *fn, const char *arg, const char *what, const char *type);
#define TS_HANDLE_OR(h, mg, what, type, ret)                              \
	do {                                                              \
		TS_NONNULL_OR(h, ret);                                    \
		if ((h)->magic != (mg)) {                                 \
			ts_err_handle(__func__, #h, what, type);          \
			return ret;                                       \
		}                                                         \
	} while (0)
#define TS_HANDLE(h, mg, what, type)                                      \
	do {                                                              \
		TS_NONNULL(h);                                            \
		if ((h)->magic != (mg))                                   \
			return ts_err_handle(__func__, #h, what, type);   \
	} while (0)
#else
#define TS_HANDLE_OR(h, mg, what, type, ret) TS_NONNULL_OR(h, ret)
#define TS_HANDLE(h, mg, what, type) TS_NONNULL(h)
#endif
/* A handle's magic once closed. */
#define TS_MAGIC_DEAD 0xdeadbeefu

/*
 * The size check of a parameter struct (tierstore/common.h): 0 when @size
 * (its size field) is @known, the sizeof this library was built with; else
 * -EINVAL naming the struct @what, as "struct tier_X_params", and both
 * sizes.
 */
int ts_params_size(const char *what, uint32_t size, size_t known);

#ifdef __cplusplus
}
#endif

#endif
