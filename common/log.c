/*
 * log.c - formatting and output of log lines.
 *
 * A line is formatted whole into a stack buffer and written with one
 * fputs under stderr's lock, so lines from several threads never
 * interleave.  The level and mask live in atomics set by the options table
 * (options.c reads TIER_LOG and TIER_LOG_SUBSYS).
 */
#include "config.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "common/log.h"

_Atomic int ts_log_level_g = TIER_LL_WARN;
_Atomic uint32_t ts_log_mask_g = TIER_SS_ALL;

static ts_log_sink_fn g_sink;
static void *g_sink_arg;

static const char *const level_names[] = { "error", "warn", "info", "debug", "trace" };

static const char *const subsys_names[] = {
#define X(id, name) name,
	TIER_SUBSYS_LIST(X)
#undef X
};

const char *ts_log_level_name(int level)
{
	if (level < 0 || level > TIER_LL_TRACE)
		return "?";
	return level_names[level];
}

int ts_log_level_parse(const char *s)
{
	for (int i = 0; i <= TIER_LL_TRACE; i++)
		if (strcasecmp(s, level_names[i]) == 0)
			return i;
	if (strcasecmp(s, "warning") == 0)
		return TIER_LL_WARN;
	return -EINVAL;
}

const char *ts_subsys_name(uint32_t ss)
{
	for (int i = 0; i < TIER_SSB__COUNT; i++)
		if (ss == (1u << i))
			return subsys_names[i];
	return "?";
}

int ts_log_mask_parse(const char *s, uint32_t *mask, char *bad, int badlen)
{
	uint32_t m = 0;
	bool negate = (s[0] == '^');
	const char *p = negate ? s + 1 : s;

	if (bad && badlen)
		bad[0] = '\0';
	while (*p) {
		size_t n = strcspn(p, ",");
		bool found = false;

		if (n == 3 && strncasecmp(p, "all", 3) == 0) {
			m |= TIER_SS_ALL;
			found = true;
		}
		for (int i = 0; !found && i < TIER_SSB__COUNT; i++) {
			if (strlen(subsys_names[i]) == n &&
			    strncasecmp(p, subsys_names[i], n) == 0) {
				m |= 1u << i;
				found = true;
			}
		}
		if (!found && n) {
			if (bad && badlen)
				snprintf(bad, (size_t)badlen, "%.*s", (int)n, p);
			return -EINVAL;
		}
		p += n;
		if (*p == ',')
			p++;
	}
	if (m == 0 && !negate) {
		if (bad && badlen)
			snprintf(bad, (size_t)badlen, "%s", s);
		return -EINVAL;
	}
	*mask = negate ? (TIER_SS_ALL & ~m) : m;
	return 0;
}

void ts_log_set_sink(ts_log_sink_fn fn, void *arg)
{
	g_sink = fn;
	g_sink_arg = arg;
}

void ts_log_emit(int level, uint32_t ss, const char *file, int line,
		   const char *fmt, ...)
{
	char buf[2048];
	int n;
	va_list ap;

	n = snprintf(buf, sizeof(buf), "tierstore[%d] %s %s: ", (int)getpid(),
		     ts_log_level_name(level), ts_subsys_name(ss));
	if (n < 0 || n >= (int)sizeof(buf))
		return;
	va_start(ap, fmt);
	n += vsnprintf(buf + n, sizeof(buf) - (size_t)n, fmt, ap);
	va_end(ap);
	if (n < (int)sizeof(buf) && level <= TIER_LL_WARN) {
		const char *base = strrchr(file, '/');

		snprintf(buf + n, sizeof(buf) - (size_t)n, " (%s:%d)",
			 base ? base + 1 : file, line);
	}
	if (g_sink) {
		g_sink(level, ss, buf, g_sink_arg);
		return;
	}
	flockfile(stderr);
	fputs(buf, stderr);
	fputc('\n', stderr);
	funlockfile(stderr);
}
