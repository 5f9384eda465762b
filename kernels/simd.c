/*
 * simd.c - parsing TIER_SIMD for the kernel families (kernels/simd.h).
 */
#include "config.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "common/log.h"
#include "common/options.h"
#include "kernels/simd.h"

/* The index of the word [@w, @w + @n) in the '|'-separated @list, or -1. */
static int word_index(const char *list, const char *w, size_t n)
{
	const char *p = list;

	for (int i = 0; *p; i++) {
		size_t len = strcspn(p, "|");

		if (len == n && strncasecmp(p, w, n) == 0)
			return i;
		p += len;
		if (*p == '|')
			p++;
	}
	return -1;
}

static pthread_mutex_t g_warn_lock = PTHREAD_MUTEX_INITIALIZER;
/* The value of TIER_SIMD last warned about: each value is warned about once. */
static char g_warned[1024];

/* Warns about the entries of @value that no family knows, unless done for this value. */
static void warn_unknown(const char *value)
{
	const char *p = value;

	pthread_mutex_lock(&g_warn_lock);
	if (strcmp(g_warned, value) == 0) {
		pthread_mutex_unlock(&g_warn_lock);
		return;
	}
	snprintf(g_warned, sizeof(g_warned), "%s", value);
	while (*p) {
		size_t n;

		p += strspn(p, ", \t");
		n = strcspn(p, ", \t");
		if (n > 0 && word_index(TIER_SIMD_CHOICES, p, n) < 0)
			TIER_WARN(TIER_SS_KERNELS, "TIER_SIMD='%.*s' is not one of " TIER_SIMD_CHOICES
				  "; ignored", (int)n, p);
		p += n;
	}
	pthread_mutex_unlock(&g_warn_lock);
}

int ts_simd_choice(const char *known, const char **value)
{
	const char *v = ts_opt_str(TIER_OPT_SIMD), *p = v;
	int found = -1;

	if (value)
		*value = v;
	while (*p) {
		size_t n;
		int k;

		p += strspn(p, ", \t");
		n = strcspn(p, ", \t");
		if (n == 0)
			break;
		if (word_index("auto", p, n) == 0)
			break;
		k = word_index(known, p, n);
		if (k >= 0) {
			found = k;
			break;
		}
		p += n;
	}
	warn_unknown(v);
	return found;
}
