/*
 * hbm.c - the registry of HBM backends (see hbm.h): a fixed table of
 * HBM_MAX_BACKENDS operation tables, found by name.
 *
 * The built-in backends (host, null, and cuda in a CUDA build) are
 * registered once, by pthread_once, on the first call of any function
 * here, so they always take the first slots and a caller can neither
 * shadow nor pre-empt them (registering "host" is -EEXIST).
 *
 * Ordering.  Registration is serialised by g_lock.  A new entry and the
 * names string that includes it are written before g_count is
 * incremented with release order; readers (find, names) load g_count
 * with acquire and only ever look at entries below it, so they take no
 * lock.  Entries are never removed and each names snapshot is written
 * once, so what a reader sees stays valid for the life of the process.
 *
 * The registry keeps the caller's pointer: a table passed to
 * hbm_backend_register must outlive every use (a static const).
 */
#include "config.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#include "common/error.h"
#include "common/log.h"
#include "tiers/hbm.h"

#define HBM_MAX_BACKENDS 8
#define HBM_NAME_MAX 31   /* bytes in a backend's name, without the NUL */

/* The built-in tables, defined by hbm_host.c, hbm_null.c and hbm_cuda.cu. */
extern const struct hbm_ops hbm_host_ops;
extern const struct hbm_ops hbm_null_ops;
#if TIER_HAVE_CUDA
extern const struct hbm_ops hbm_cuda_ops;
#endif

static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static const struct hbm_ops *g_table[HBM_MAX_BACKENDS];
static _Atomic unsigned g_count;
/*
 * g_names[n]: the names of the first n backends, comma-separated.  Written
 * once, before g_count becomes n, so a reader never sees one being built.
 */
static char g_names[HBM_MAX_BACKENDS + 1][HBM_MAX_BACKENDS * (HBM_NAME_MAX + 2) + 1];

/* Checks @ops; 0 or -EINVAL with every missing field named. */
static int validate(const struct hbm_ops *ops)
{
	char missing[128] = "";
	size_t len;

	if (!ops)
		return ts_err(-EINVAL, "hbm backend: no operation table");
	if (!ops->name || !ops->name[0])
		return ts_err(-EINVAL, "hbm backend: the table has no name");
	len = strnlen(ops->name, HBM_NAME_MAX + 1);
	if (len > HBM_NAME_MAX)
		return ts_err(-EINVAL, "hbm backend '%.*s...': name longer than %d bytes",
				HBM_NAME_MAX, ops->name, HBM_NAME_MAX);
	if (strchr(ops->name, ','))
		return ts_err(-EINVAL, "hbm backend '%s': name contains a comma", ops->name);
	if (ops->version != HBM_OPS_VERSION)
		return ts_err(-EINVAL, "hbm backend '%s': version %u, expected %u (HBM_OPS_VERSION)",
				ops->name, ops->version, (unsigned)HBM_OPS_VERSION);
#define NEED(field)                                                            \
	do {                                                                    \
		if (!ops->field) {                                              \
			if (missing[0])                                         \
				strcat(missing, ", ");                          \
			strcat(missing, #field);                                \
		}                                                               \
	} while (0)
	NEED(open);
	NEED(close);
	NEED(capacity);
	NEED(dev_ptr);
	NEED(copy);
#undef NEED
	if (missing[0])
		return ts_err(-EINVAL, "hbm backend '%s': missing mandatory operation(s): %s",
				ops->name, missing);
	return 0;
}

/* Adds @ops after validation; the caller has run the once. */
static int do_register(const struct hbm_ops *ops)
{
	unsigned n;
	int rc = validate(ops);

	if (rc)
		return rc;
	pthread_mutex_lock(&g_lock);
	n = atomic_load_explicit(&g_count, memory_order_relaxed);
	for (unsigned i = 0; i < n; i++) {
		if (strcmp(g_table[i]->name, ops->name) == 0) {
			pthread_mutex_unlock(&g_lock);
			return ts_err(-EEXIST, "hbm backend '%s' is already registered",
					ops->name);
		}
	}
	if (n == HBM_MAX_BACKENDS) {
		pthread_mutex_unlock(&g_lock);
		return ts_err(-ENOSPC, "hbm backend '%s': the table is full (%d backends: %s)",
				ops->name, HBM_MAX_BACKENDS, g_names[n]);
	}
	g_table[n] = ops;
	for (unsigned i = 0, pos = 0; i <= n; i++)
		pos += (unsigned)snprintf(g_names[n + 1] + pos, sizeof(g_names[n + 1]) - pos, "%s%s",
					  i ? "," : "", g_table[i]->name);
	atomic_store_explicit(&g_count, n + 1, memory_order_release);
	pthread_mutex_unlock(&g_lock);
	TIER_DEBUG_LOG(TIER_SS_HBM, "hbm backend '%s' registered (caps %#x)", ops->name, ops->caps);
	return 0;
}

static void register_builtins(void)
{
	static const struct hbm_ops *const builtins[] = {
		&hbm_host_ops,
		&hbm_null_ops,
#if TIER_HAVE_CUDA
		&hbm_cuda_ops,
#endif
	};

	for (size_t i = 0; i < sizeof(builtins) / sizeof(builtins[0]); i++) {
		/* A built-in table that fails validation is a bug in this tree. */
		if (do_register(builtins[i]))
			TIER_ERROR(TIER_SS_HBM, "built-in hbm backend refused: %s", tier_last_error());
	}
}

int hbm_backend_register(const struct hbm_ops *ops)
{
	pthread_once(&g_once, register_builtins);
	return do_register(ops);
}

const struct hbm_ops *hbm_backend_find(const char *name)
{
	unsigned n;

	pthread_once(&g_once, register_builtins);
	if (!name)
		return NULL;
	n = atomic_load_explicit(&g_count, memory_order_acquire);
	for (unsigned i = 0; i < n; i++)
		if (strcmp(g_table[i]->name, name) == 0)
			return g_table[i];
	return NULL;
}

const char *hbm_backend_names(void)
{
	pthread_once(&g_once, register_builtins);
	return g_names[atomic_load_explicit(&g_count, memory_order_acquire)];
}

int hbm_copy_check(const char *name, enum hbm_dir dir, uint64_t off, uint64_t len,
		   const void *host, bool need_host, uint64_t cap, hbm_cb cb)
{
	static const char *const dir_names[2] = { "H2D", "D2H" };
	unsigned long long l = len, o = off, c = cap;

	if (dir != HBM_H2D && dir != HBM_D2H)
		return ts_err(-EINVAL, "hbm %s: bad copy direction %d", name, (int)dir);
	if (!cb)
		return ts_err(-EINVAL, "hbm %s: %s copy without a callback", name, dir_names[dir]);
	if (need_host && !host && len)
		return ts_err(-EINVAL, "hbm %s: %s copy of %llu bytes with no host buffer", name,
				dir_names[dir], l);
	if (off > cap || len > cap - off)
		return ts_err(-EINVAL, "hbm %s: %s copy of %llu bytes at offset %llu is outside "
				"the %llu-byte arena", name, dir_names[dir], l, o, c);
	return 0;
}
