/*
 * fault.c - the fault-site table and the allocation wrappers.
 *
 * Each site has an arming record of atomics: the countdown (calls before
 * the first failure), how many failures remain, and the errno.  A call
 * increments the site's call counter and decides from the counter alone, so
 * concurrent callers see one consistent sequence (exactly @count failures,
 * starting at the Nth call) without a lock.
 */
#include "config.h"

#include <errno.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "common/error.h"
#include "common/fault.h"
#include "common/log.h"
#include "common/units.h"

struct fault_site {
	_Atomic uint64_t calls;  /* calls since armed or reset */
	_Atomic uint64_t fired;  /* failures injected since armed or reset */
	_Atomic uint64_t nth;    /* first failing call (1-based); 0 = disarmed */
	_Atomic int64_t count;   /* failures to inject; <0 = persistent */
	_Atomic int err;         /* negative errno to return */
};

static struct fault_site g_sites[TIER_FAULT__COUNT];

static const char *const site_names[TIER_FAULT__COUNT] = {
	[TIER_FAULT_NONE] = "none",
#define X(id, num, name, desc) [TIER_FAULT_##id] = name,
	TIER_FAULT_SITE_LIST(X)
#undef X
};

bool ts_fault_available(void)
{
	return TIER_FAULT_SITES;
}

#if TIER_FAULT_SITES
int ts_fault_check(enum ts_fault_site site)
{
	struct fault_site *f;
	uint64_t call, nth;
	int64_t count;

	if (site <= TIER_FAULT_NONE || site >= TIER_FAULT__COUNT)
		return 0;
	f = &g_sites[site];
	call = atomic_fetch_add_explicit(&f->calls, 1, memory_order_relaxed) + 1;
	nth = atomic_load_explicit(&f->nth, memory_order_acquire);
	if (nth == 0 || call < nth)
		return 0;
	count = atomic_load_explicit(&f->count, memory_order_relaxed);
	if (count >= 0 && call - nth >= (uint64_t)count)
		return 0;
	atomic_fetch_add_explicit(&f->fired, 1, memory_order_relaxed);
	return atomic_load_explicit(&f->err, memory_order_relaxed);
}
#endif

int ts_fault_arm(enum ts_fault_site site, uint64_t nth, int64_t count, int err)
{
	struct fault_site *f;

	if (!TIER_FAULT_SITES)
		return ts_err(-ENOTSUP, "fault sites are not compiled into this build (meson -Dfault_sites=enabled)");
	if (site <= TIER_FAULT_NONE || site >= TIER_FAULT__COUNT)
		return ts_err(-EINVAL, "no fault site %d", (int)site);
	if (nth == 0 || count == 0 || count < TIER_FAULT_PERSISTENT || err >= 0)
		return ts_err(-EINVAL, "fault site '%s': nth must be >= 1, count >= 1 or persistent, err a negative errno",
				site_names[site]);
	f = &g_sites[site];
	atomic_store_explicit(&f->nth, 0, memory_order_relaxed);
	atomic_store_explicit(&f->calls, 0, memory_order_relaxed);
	atomic_store_explicit(&f->fired, 0, memory_order_relaxed);
	atomic_store_explicit(&f->count, count, memory_order_relaxed);
	atomic_store_explicit(&f->err, err, memory_order_relaxed);
	/* Release: a caller that sees nth also sees count and err. */
	atomic_store_explicit(&f->nth, nth, memory_order_release);
	TIER_DEBUG_LOG(TIER_SS_COMMON, "fault site %s armed: call %llu, count %lld, %s",
		       site_names[site], (unsigned long long)nth, (long long)count,
		       tier_strerror(err));
	return 0;
}

void ts_fault_disarm(enum ts_fault_site site)
{
	if (site <= TIER_FAULT_NONE || site >= TIER_FAULT__COUNT)
		return;
	atomic_store_explicit(&g_sites[site].nth, 0, memory_order_release);
}

void ts_fault_reset_all(void)
{
	for (int i = 1; i < TIER_FAULT__COUNT; i++) {
		atomic_store(&g_sites[i].nth, 0);
		atomic_store(&g_sites[i].calls, 0);
		atomic_store(&g_sites[i].fired, 0);
	}
}

uint64_t ts_fault_calls(enum ts_fault_site site)
{
	if (site <= TIER_FAULT_NONE || site >= TIER_FAULT__COUNT)
		return 0;
	return atomic_load(&g_sites[site].calls);
}

uint64_t ts_fault_fired(enum ts_fault_site site)
{
	if (site <= TIER_FAULT_NONE || site >= TIER_FAULT__COUNT)
		return 0;
	return atomic_load(&g_sites[site].fired);
}

const char *ts_fault_site_name(enum ts_fault_site site)
{
	if (site < TIER_FAULT_NONE || site >= TIER_FAULT__COUNT)
		return "?";
	return site_names[site];
}

enum ts_fault_site ts_fault_site_lookup(const char *name)
{
	long long n;

	if (ts_int_parse(name, 1, TIER_FAULT__COUNT - 1, &n) == 0)
		return (enum ts_fault_site)n;
	for (int i = 1; i < TIER_FAULT__COUNT; i++)
		if (strcasecmp(name, site_names[i]) == 0)
			return (enum ts_fault_site)i;
	return TIER_FAULT_NONE;
}

static int errno_lookup(const char *s)
{
	static const struct { const char *name; int err; } names[] = {
		{ "EIO", EIO }, { "ENOMEM", ENOMEM }, { "ENOSPC", ENOSPC },
		{ "EAGAIN", EAGAIN }, { "EINTR", EINTR }, { "EINVAL", EINVAL },
		{ "EACCES", EACCES }, { "ENOENT", ENOENT }, { "EBADMSG", EBADMSG },
		{ "ENODEV", ENODEV }, { "EBUSY", EBUSY }, { "ETIMEDOUT", ETIMEDOUT },
		{ "EPERM", EPERM }, { "ENOTSUP", ENOTSUP },
	};
	long long n;

	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
		if (strcasecmp(s, names[i].name) == 0)
			return -names[i].err;
	if (ts_int_parse(s, 1, 4095, &n) == 0)
		return (int)-n;
	return 0;
}

/* The next field of @p up to @sep or the end, empty fields included. */
static const char *field(const char *p, char sep, char *out, size_t len)
{
	size_t n = strcspn(p, (char[]){ sep, '\0' });

	snprintf(out, len, "%.*s", (int)(n < len ? n : len - 1), p);
	return p[n] ? p + n + 1 : NULL;
}

int ts_fault_arm_spec(const char *spec)
{
	struct {
		enum ts_fault_site site;
		long long nth, count;
		int err;
	} items[TIER_FAULT__COUNT * 2];
	size_t nitems = 0;
	const char *p = spec;

	/* Every item is checked before any is armed: a bad spec arms nothing. */
	while (p) {
		char item[128], f[5][64];
		const char *q;
		int nf = 0;

		if (strcspn(p, ",") >= sizeof(item))
			return ts_err(-EINVAL, "TIER_FAULT: an item is too long in '%.64s...'", spec);
		p = field(p, ',', item, sizeof(item));
		for (q = item; q && nf < 5; nf++) {
			if (strcspn(q, ":") >= sizeof(f[nf]))
				return ts_err(-EINVAL, "TIER_FAULT: '%s': a field is too long", item);
			q = field(q, ':', f[nf], sizeof(f[nf]));
		}
		if (nitems == sizeof(items) / sizeof(items[0]))
			return ts_err(-EINVAL, "TIER_FAULT: too many items in '%s'", spec);
		if (nf < 2 || nf > 4 || q)
			return ts_err(-EINVAL, "TIER_FAULT: '%s': expected site:nth[:count[:errno]]", item);
		items[nitems].site = ts_fault_site_lookup(f[0]);
		if (items[nitems].site == TIER_FAULT_NONE)
			return ts_err(-EINVAL, "TIER_FAULT: '%s': no fault site '%s'", item, f[0]);
		if (ts_int_parse(f[1], 1, INT64_MAX, &items[nitems].nth))
			return ts_err(-EINVAL, "TIER_FAULT: '%s': bad call number '%s'", item, f[1]);
		items[nitems].count = 1;
		if (nf > 2 && (ts_int_parse(f[2], -1, INT64_MAX, &items[nitems].count) ||
			       items[nitems].count == 0))
			return ts_err(-EINVAL, "TIER_FAULT: '%s': bad count '%s' (1 or more, or -1 for persistent)",
					item, f[2]);
		items[nitems].err = -EIO;
		if (nf > 3 && (items[nitems].err = errno_lookup(f[3])) == 0)
			return ts_err(-EINVAL, "TIER_FAULT: '%s': bad errno '%s'", item, f[3]);
		nitems++;
	}
	for (size_t i = 0; i < nitems; i++) {
		int rc = ts_fault_arm(items[i].site, (uint64_t)items[i].nth, items[i].count,
					items[i].err);

		if (rc)
			return rc;
	}
	return 0;
}

void *ts_malloc(size_t size)
{
	if (ts_fault_check(TIER_FAULT_ALLOC))
		return NULL;
	return malloc(size);
}

void *ts_calloc(size_t n, size_t size)
{
	if (ts_fault_check(TIER_FAULT_ALLOC))
		return NULL;
	return calloc(n, size);
}

void *ts_realloc(void *p, size_t size)
{
	if (ts_fault_check(TIER_FAULT_ALLOC))
		return NULL;
	return realloc(p, size);
}

char *ts_strdup(const char *s)
{
	if (ts_fault_check(TIER_FAULT_ALLOC))
		return NULL;
	return strdup(s);
}

char *ts_strndup(const char *s, size_t n)
{
	if (ts_fault_check(TIER_FAULT_ALLOC))
		return NULL;
	return strndup(s, n);
}

char *ts_asprintf(const char *fmt, ...)
{
	va_list ap;
	char *s;
	int n;

	if (ts_fault_check(TIER_FAULT_ALLOC))
		return NULL;
	va_start(ap, fmt);
	n = vasprintf(&s, fmt, ap);
	va_end(ap);
	return n < 0 ? NULL : s;
}
