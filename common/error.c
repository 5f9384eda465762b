/*
 * error.c - tier_strerror() and the thread-local detail message.
 *
 * The detail buffer is per thread, so concurrent failures on different
 * threads never mix their messages.  It is a fixed array: recording an error
 * must itself never fail (no allocation on the error path).
 */
#include "config.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>

#include "common/error.h"

static _Thread_local char t_err[TIER_ERR_MAX];
static _Thread_local char t_strerror[64];

const char *tier_strerror(int err)
{
	const char *s;

	if (err == INT_MIN) {
		snprintf(t_strerror, sizeof(t_strerror), "Unknown error %d", err);
		return t_strerror;
	}
	if (err < 0)
		err = -err;
	if (err == 0)
		return "Success";
	s = strerrordesc_np(err);
	if (s)
		return s;
	snprintf(t_strerror, sizeof(t_strerror), "Unknown error %d", err);
	return t_strerror;
}

const char *tier_last_error(void)
{
	return t_err;
}

int ts_verr(int err, const char *fmt, va_list ap)
{
	int n = vsnprintf(t_err, sizeof(t_err), fmt, ap);

	if (n >= (int)sizeof(t_err))
		memcpy(t_err + sizeof(t_err) - 4, "...", 4);
	return err;
}

int ts_err(int err, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	ts_verr(err, fmt, ap);
	va_end(ap);
	return err;
}

int ts_err_null(const char *fn, const char *arg)
{
	return ts_err(-EINVAL, "%s: %s is NULL", fn, arg);
}

#if TIER_DEBUG_HANDLES
int ts_err_handle(const char *fn, const char *arg, const char *what, const char *type)
{
	return ts_err(-EINVAL, "%s: %s is not an open %s (closed, or not a %s)", fn, arg, what,
		      type);
}
#endif

void ts_err_append(const char *fmt, ...)
{
	size_t len = strlen(t_err);
	va_list ap;
	int n;

	if (len + 1 >= sizeof(t_err))
		return; /* already full, and marked "..." when it was cut */
	if (len + 4 >= sizeof(t_err)) {
		/* No room for another line: say that something was cut. */
		memcpy(t_err + sizeof(t_err) - 4, "...", 4);
		return;
	}
	if (len)
		t_err[len++] = '\n';
	va_start(ap, fmt);
	n = vsnprintf(t_err + len, sizeof(t_err) - len, fmt, ap);
	va_end(ap);
	if (n >= (int)(sizeof(t_err) - len))
		memcpy(t_err + sizeof(t_err) - 4, "...", 4);
}

void ts_err_clear(void)
{
	t_err[0] = '\0';
}

void ts_err_prefix(const char *fmt, ...)
{
	char old[TIER_ERR_MAX];
	char pre[512];
	va_list ap;
	int n;

	va_start(ap, fmt);
	n = vsnprintf(pre, sizeof(pre), fmt, ap);
	va_end(ap);
	if (n < 0)
		return;
	/* "what: " and "what" read the same: the ": " is added below */
	n = (int)strlen(pre);
	while (n > 0 && (pre[n - 1] == ' ' || pre[n - 1] == ':'))
		pre[--n] = '\0';
	memcpy(old, t_err, sizeof(old));
	n = snprintf(t_err, sizeof(t_err), "%s: %s", pre, old);
	if (n >= (int)sizeof(t_err))
		memcpy(t_err + sizeof(t_err) - 4, "...", 4);
}

int ts_params_size(const char *what, uint32_t size, size_t known)
{
	if (size == known)
		return 0;
	if (size == 0)
		return ts_err(-EINVAL, "%s: size 0: not initialised (call its _init function first)",
			      what);
	return ts_err(-EINVAL, "%s: size %u, but this library's is %zu bytes: built against another tierstore.h?",
		      what, size, known);
}
