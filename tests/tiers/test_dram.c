/*
 * test_dram.c - the DRAM tier's arena (tiers/dram.c).
 *
 * Covers:
 *  - open and close with huge_pages off, auto and on: the size (capacity
 *    rounded up to the page size used), the base's alignment (4 KiB; 2 MiB
 *    for auto), the page kind (hugetlb when enough huge pages are free,
 *    else THP for auto), every page resident after open (prefault), the
 *    whole arena writable and reading back, one INFO line saying what was
 *    achieved, and nothing mapped after close; huge_pages: on without
 *    enough free huge pages is -ENOMEM with a detail saying how many;
 *    capacity 0 is -EINVAL; capacities too large to map are -ENOMEM;
 *  - locking under RLIMIT_MEMLOCK (lowered to 8 MiB, CAP_IPC_LOCK dropped,
 *    so the test does not depend on who runs it): a small arena is locked
 *    (VmLck grows, and shrinks again at close), a large one is not and
 *    warns exactly once per process however often it is opened;
 *  - NUMA binding: node 0 is bound (every page on node 0, policy
 *    MPOL_BIND), no node is not, a node that does not exist warns once and
 *    the open succeeds;
 *  - CUDA registration: without a GPU (or with a device that does not
 *    exist) the open succeeds unregistered with one warning; with a GPU
 *    device 0 is registered;
 *  - fault sites: DRAM_MAP fails the open with the armed errno and leaves
 *    nothing behind (ASan's leak check covers the heap); DRAM_PIN degrades
 *    locking, binding and registration one by one and never fails the
 *    open; ALLOC fails it with -ENOMEM.
 *
 * "Once per process" is checked within one test: Check runs each test in
 * its own process.  With CK_FORK=no those counts are not checked.
 */
#include "config.h"

#include <check.h>
#include <errno.h>
#include <inttypes.h>
#include <linux/capability.h>
#include <numa.h>
#include <numaif.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "common/error.h"
#include "common/fault.h"
#include "common/log.h"
#include "common/sysinfo.h"
#include "common/units.h"
#include "tiers/dram.h"
#include "tiers/gpu.h"
#include "t_helpers.h"

#define KiB (1ull << 10)
#define MiB (1ull << 20)
#define GiB (1ull << 30)
#define U64(x) ((unsigned long long)(x))

/* ------------------------------------------------------------- the log sink */

#define CAP_LINES 32
#define CAP_LEN 2200

struct capture {
	pthread_mutex_t lock;
	int n;
	int level[CAP_LINES];
	uint32_t ss[CAP_LINES];
	char line[CAP_LINES][CAP_LEN];
};

static struct capture g_cap = { .lock = PTHREAD_MUTEX_INITIALIZER };
static int g_saved_level;
static uint32_t g_saved_mask;

static void capture_sink(int level, uint32_t ss, const char *line, void *arg)
{
	struct capture *c = arg;

	pthread_mutex_lock(&c->lock);
	if (c->n < CAP_LINES) {
		c->level[c->n] = level;
		c->ss[c->n] = ss;
		snprintf(c->line[c->n], CAP_LEN, "%s", line);
	}
	c->n++;
	pthread_mutex_unlock(&c->lock);
}

/* Captured lines of @level from the DRAM subsystem; the first in @first. */
static int count_lines(int level, const char **first)
{
	int n = 0;

	if (first)
		*first = "";
	for (int i = 0; i < g_cap.n && i < CAP_LINES; i++) {
		if (g_cap.level[i] != level || g_cap.ss[i] != TIER_SS_DRAM)
			continue;
		if (n++ == 0 && first)
			*first = g_cap.line[i];
	}
	return n;
}

static void dump_lines(void)
{
	for (int i = 0; i < g_cap.n && i < CAP_LINES; i++)
		fprintf(stderr, "  log: %s\n", g_cap.line[i]);
}

/* Whether each test runs in its own process (so warn-once state is fresh). */
static bool forked(void)
{
	const char *f = getenv("CK_FORK");

	return !f || strcmp(f, "no") != 0;
}

/* ------------------------------------------------------------- memlock */

static struct rlimit g_saved_memlock;
static bool g_memlock_changed, g_cap_dropped;

static int caps(bool set, struct __user_cap_data_struct d[2])
{
	struct __user_cap_header_struct h = { _LINUX_CAPABILITY_VERSION_3, 0 };

	return (int)syscall(set ? SYS_capset : SYS_capget, &h, d);
}

/*
 * Makes RLIMIT_MEMLOCK apply to this process at @bytes (or the hard limit,
 * if lower): lowers the soft limit and drops CAP_IPC_LOCK from the
 * effective set (it stays permitted; teardown restores both).  Returns the
 * limit in force.
 */
static uint64_t limit_memlock(uint64_t bytes)
{
	struct __user_cap_data_struct d[2];
	struct rlimit rl;

	ck_assert_int_eq(getrlimit(RLIMIT_MEMLOCK, &rl), 0);
	g_saved_memlock = rl;
	if (rl.rlim_max != RLIM_INFINITY && rl.rlim_max < bytes)
		bytes = rl.rlim_max;
	rl.rlim_cur = bytes;
	ck_assert_int_eq(setrlimit(RLIMIT_MEMLOCK, &rl), 0);
	g_memlock_changed = true;
	if (caps(false, d) == 0 && (d[0].effective & (1u << CAP_IPC_LOCK))) {
		d[0].effective &= ~(1u << CAP_IPC_LOCK);
		ck_assert_msg(caps(true, d) == 0, "capset: %s", strerror(errno));
		g_cap_dropped = true;
	}
	return bytes;
}

static void restore_memlock(void)
{
	struct __user_cap_data_struct d[2];

	if (g_cap_dropped && caps(false, d) == 0) {
		d[0].effective |= 1u << CAP_IPC_LOCK;
		caps(true, d);
	}
	if (g_memlock_changed)
		setrlimit(RLIMIT_MEMLOCK, &g_saved_memlock);
	g_cap_dropped = g_memlock_changed = false;
}

/* VmLck of this process, bytes. */
static uint64_t vm_locked(void)
{
	char line[256];
	unsigned long long kb = 0;
	FILE *f = fopen("/proc/self/status", "re");

	ck_assert_ptr_nonnull(f);
	while (fgets(line, sizeof(line), f))
		if (sscanf(line, "VmLck: %llu kB", &kb) == 1)
			break;
	fclose(f);
	return kb * KiB;
}

/* ------------------------------------------------------------- fixtures */

static void setup(void)
{
	ts_fault_reset_all();
	g_saved_level = atomic_load(&ts_log_level_g);
	g_saved_mask = atomic_load(&ts_log_mask_g);
	atomic_store(&ts_log_level_g, TIER_LL_INFO);
	atomic_store(&ts_log_mask_g, TIER_SS_ALL);
	g_cap.n = 0;
	ts_log_set_sink(capture_sink, &g_cap);
}

static void teardown(void)
{
	ts_log_set_sink(NULL, NULL);
	atomic_store(&ts_log_level_g, g_saved_level);
	atomic_store(&ts_log_mask_g, g_saved_mask);
	restore_memlock();
	ts_fault_reset_all();
}

static struct dram_params params(uint64_t capacity, enum tiers_huge_pages huge)
{
	return (struct dram_params){ .capacity = capacity, .numa_node = -1, .huge = huge,
				     .gpu = -1, .lock = false };
}

static struct dram_arena *open_ok(const struct dram_params *p, struct dram_info *info)
{
	struct dram_arena *a = NULL;
	int rc = dram_arena_open(p, &a);

	if (rc)
		dump_lines();
	ck_assert_msg(rc == 0, "dram_arena_open(%llu): %s: %s", U64(p->capacity), tier_strerror(rc),
		      tier_last_error());
	ck_assert_ptr_nonnull(a);
	ck_assert_str_eq(tier_last_error(), "");
	dram_arena_info(a, info);
	ck_assert_ptr_eq(dram_arena_base(a), info->base);
	return a;
}

/* Whether @size bytes from @base are mapped (mincore refuses unmapped pages). */
static bool all_resident(const void *base, uint64_t size, bool *mapped)
{
	size_t pages = (size_t)(size / 4096);
	unsigned char *vec = calloc(pages, 1);
	bool all = true;

	ck_assert_ptr_nonnull(vec);
	*mapped = mincore((void *)base, (size_t)size, vec) == 0;
	if (!*mapped)
		ck_assert_int_eq(errno, ENOMEM);
	for (size_t i = 0; *mapped && i < pages; i++)
		all = all && (vec[i] & 1);
	free(vec);
	return *mapped && all;
}

/* Fills the whole arena with a pattern and reads it back. */
static void check_memory(const struct dram_info *in, uint64_t seed)
{
	uint64_t *w = in->base, n = in->size / sizeof(uint64_t);

	for (uint64_t i = 0; i < n; i++)
		w[i] = (i * 0x9E3779B97F4A7C15ull) ^ seed;
	for (uint64_t i = 0; i < n; i++)
		if (w[i] != ((i * 0x9E3779B97F4A7C15ull) ^ seed))
			ck_abort_msg("word %llu of %llu reads %#llx, wrote %#llx", U64(i), U64(n),
				     U64(w[i]), U64((i * 0x9E3779B97F4A7C15ull) ^ seed));
}

/* Whether a hugetlb mapping of @capacity would be used (enough free pages). */
static bool hugetlb_fits(uint64_t capacity)
{
	struct ts_hugeinfo hi;

	sys_hugeinfo(&hi);
	return hi.page_size &&
	       hi.free_pages >= capacity / hi.page_size + (capacity % hi.page_size != 0);
}

/* ------------------------------------------------------------- open */

struct open_case {
	const char *name;
	uint64_t capacity;
	enum tiers_huge_pages huge;
	int rc;                 /* expected; for huge: on, only when hugetlb does not fit */
};

static const struct open_case open_cases[] = {
	{ "off 1 MiB", 1 * MiB, TIER_HUGE_OFF, 0 },
	{ "off 1 MiB + 1", 1 * MiB + 1, TIER_HUGE_OFF, 0 },
	{ "off 1 byte", 1, TIER_HUGE_OFF, 0 },
	{ "off 4097", 4097, TIER_HUGE_OFF, 0 },
	{ "off 64 MiB", 64 * MiB, TIER_HUGE_OFF, 0 },
	{ "auto 1 byte", 1, TIER_HUGE_AUTO, 0 },
	{ "auto 3 MiB + 5", 3 * MiB + 5, TIER_HUGE_AUTO, 0 },
	{ "auto 64 MiB", 64 * MiB, TIER_HUGE_AUTO, 0 },
	{ "auto 1 GiB + 4 KiB (prefault threads)", 1 * GiB + 4 * KiB, TIER_HUGE_AUTO, 0 },
	{ "on 1 byte", 1, TIER_HUGE_ON, -ENOMEM },
	{ "on 128 MiB", 128 * MiB, TIER_HUGE_ON, -ENOMEM },
	{ "off 0", 0, TIER_HUGE_OFF, -EINVAL },
	{ "auto 0", 0, TIER_HUGE_AUTO, -EINVAL },
	{ "on 0", 0, TIER_HUGE_ON, -EINVAL },
	{ "off 2^60", 1ull << 60, TIER_HUGE_OFF, -ENOMEM },
	{ "auto 2^60", 1ull << 60, TIER_HUGE_AUTO, -ENOMEM },
	{ "off UINT64_MAX", UINT64_MAX, TIER_HUGE_OFF, -ENOMEM },
	{ "auto UINT64_MAX", UINT64_MAX, TIER_HUGE_AUTO, -ENOMEM },
};

START_TEST(test_open)
{
	const struct open_case *c = &open_cases[_i];
	struct dram_params p = params(c->capacity, c->huge);
	struct ts_hugeinfo hi;
	bool huge = c->huge != TIER_HUGE_OFF && c->capacity && hugetlb_fits(c->capacity);
	int want = huge && c->rc == -ENOMEM && c->huge == TIER_HUGE_ON ? 0 : c->rc;
	uint64_t page = huge ? 0 : 4096, align;
	struct dram_arena *a = (struct dram_arena *)&p;  /* must be reset to NULL on failure */
	struct dram_info in;
	const char *line = "";
	char sz[32];
	bool mapped;
	int rc;

	sys_hugeinfo(&hi);
	if (huge)
		page = hi.page_size;
	align = c->huge == TIER_HUGE_AUTO ? 2 * MiB : page;
	if (page > align)
		align = page;

	rc = dram_arena_open(&p, &a);
	ck_assert_msg(rc == want, "%s: %d (%s: %s), expected %d", c->name, rc, tier_strerror(rc),
		      tier_last_error(), want);
	if (rc) {
		ck_assert_ptr_null(a);
		ck_assert_msg(tier_last_error()[0] != '\0', "%s: no detail", c->name);
		if (c->huge == TIER_HUGE_ON && c->capacity)
			ck_assert_msg(strstr(tier_last_error(), "huge pages") &&
				      strstr(tier_last_error(), "free"),
				      "%s: detail '%s' does not say how many huge pages are free",
				      c->name, tier_last_error());
		ck_assert_int_eq(count_lines(TIER_LL_INFO, NULL), 0);
		return;
	}

	dram_arena_info(a, &in);
	ck_assert_ptr_eq(dram_arena_base(a), in.base);
	ck_assert_str_eq(tier_last_error(), "");
	ck_assert_uint_eq(in.page_size, page);
	ck_assert_uint_eq(in.size, (c->capacity + page - 1) / page * page);
	ck_assert_msg((uintptr_t)in.base % align == 0, "%s: base %p not aligned to %llu", c->name,
		      in.base, U64(align));
	ck_assert(in.hugetlb == huge);
	if (c->huge == TIER_HUGE_AUTO && !huge)
		ck_assert_msg(in.thp == hi.thp, "%s: thp %d, THP %savailable", c->name, in.thp,
			      hi.thp ? "" : "not ");
	else
		ck_assert(!in.thp);
	ck_assert(!in.locked && !in.numa_bound && !in.cuda_registered);
	ck_assert_int_eq(in.numa_node, -1);
	ck_assert_msg(all_resident(in.base, in.size, &mapped), "%s: not every page is resident "
		      "after open (not prefaulted)", c->name);
	check_memory(&in, _i);

	/* One INFO line: the size and the page kind. */
	ck_assert_int_eq(count_lines(TIER_LL_INFO, &line), 1);
	ck_assert_msg(strstr(line, ts_size_fmt(in.size, sz, sizeof(sz))) &&
		      strstr(line, huge ? "hugetlb" : in.thp ? "transparent huge" : "4 KiB") &&
		      strstr(line, "not locked") && strstr(line, "not bound"),
		      "%s: INFO line '%s'", c->name, line);
	ck_assert_int_eq(count_lines(TIER_LL_WARN, NULL), 0);

	dram_arena_close(a);
	all_resident(in.base, in.size, &mapped);
	ck_assert_msg(!mapped, "%s: still mapped after close", c->name);
}
END_TEST

START_TEST(test_close_null)
{
	dram_arena_close(NULL);
}
END_TEST

/* ------------------------------------------------------------- lock */

struct lock_case {
	const char *name;
	uint64_t capacity;
	bool lock;
	int opens;              /* arenas open at once */
	bool locked;
	int warnings;
};

static const struct lock_case lock_cases[] = {
	{ "1 MiB", 1 * MiB, true, 1, true, 0 },
	{ "1 MiB twice", 1 * MiB, true, 2, true, 0 },
	{ "64 MiB", 64 * MiB, true, 1, false, 1 },
	{ "64 MiB twice: one warning", 64 * MiB, true, 2, false, 1 },
	{ "64 MiB three times: one warning", 64 * MiB, true, 3, false, 1 },
	{ "64 MiB, lock: false", 64 * MiB, false, 2, false, 0 },
	{ "1 MiB, lock: false", 1 * MiB, false, 1, false, 0 },
};

START_TEST(test_lock)
{
	const struct lock_case *c = &lock_cases[_i];
	struct dram_params p = params(c->capacity, TIER_HUGE_OFF);
	struct dram_arena *a[3];
	struct dram_info in;
	uint64_t limit = limit_memlock(8 * MiB), before = vm_locked();
	const char *line = "";
	char want[64], sz[32];

	if (c->locked && limit < before + (uint64_t)c->opens * c->capacity + 4096) {
		fprintf(stderr, "%s: RLIMIT_MEMLOCK hard limit %llu too low; skipped\n", c->name,
			U64(limit));
		return;
	}
	p.lock = c->lock;
	for (int i = 0; i < c->opens; i++) {
		a[i] = open_ok(&p, &in);
		ck_assert_msg(in.locked == c->locked, "%s: open %d locked %d", c->name, i, in.locked);
		check_memory(&in, (uint64_t)i);
		if (c->locked)
			ck_assert_uint_ge(vm_locked(), before + (uint64_t)(i + 1) * in.size);
	}
	if (!c->locked)
		ck_assert_uint_eq(vm_locked(), before);
	if (forked()) {
		int n = count_lines(TIER_LL_WARN, &line);

		if (n != c->warnings)
			dump_lines();
		ck_assert_int_eq(n, c->warnings);
	}
	if (c->warnings && forked()) {
		snprintf(want, sizeof(want), "RLIMIT_MEMLOCK is %s",
			 ts_size_fmt(limit, sz, sizeof(sz)));
		ck_assert_msg(strstr(line, ts_size_fmt(in.size, sz, sizeof(sz))) &&
			      strstr(line, want) && strstr(line, "ulimit -l"),
			      "%s: warning '%s' does not give the size, '%s' and the remedy", c->name,
			      line, want);
	}
	for (int i = 0; i < c->opens; i++)
		dram_arena_close(a[i]);
	ck_assert_uint_eq(vm_locked(), before);
}
END_TEST

/* ------------------------------------------------------------- NUMA */

#define NODE_MISSING (-100)     /* a node past numa_max_node() */

struct numa_case {
	const char *name;
	int node;
	int opens;
	bool bound;             /* expected where numa_available() >= 0 */
	int warnings;
};

static const struct numa_case numa_cases[] = {
	{ "no node", -1, 1, false, 0 },
	{ "node 0", 0, 1, true, 0 },
	{ "node 0 twice", 0, 2, true, 0 },
	{ "missing node", NODE_MISSING, 1, false, 1 },
	{ "missing node twice: one warning", NODE_MISSING, 2, false, 1 },
};

START_TEST(test_numa)
{
	const struct numa_case *c = &numa_cases[_i];
	struct dram_params p = params(8 * MiB, TIER_HUGE_AUTO);
	bool have = numa_available() >= 0;
	struct dram_arena *a[2];
	struct dram_info in;
	const char *line = "";

	if (!have && c->node >= 0) {
		fprintf(stderr, "%s: no NUMA on this machine; skipped\n", c->name);
		return;
	}
	p.numa_node = c->node == NODE_MISSING ? (have ? numa_max_node() + 1 : 1) : c->node;
	for (int i = 0; i < c->opens; i++) {
		a[i] = open_ok(&p, &in);
		ck_assert_msg(in.numa_bound == c->bound, "%s: numa_bound %d", c->name, in.numa_bound);
		ck_assert_int_eq(in.numa_node, p.numa_node);
		if (in.numa_bound) {
			/* The policy is on the range, and every page is on the node. */
			for (uint64_t off = 0; off < in.size; off += 64 * KiB) {
				int mode = -1, node = -1;

				ck_assert_int_eq(get_mempolicy(&mode, NULL, 0, (char *)in.base + off,
							       MPOL_F_ADDR), 0);
				ck_assert_int_eq(mode, MPOL_BIND);
				ck_assert_int_eq(get_mempolicy(&node, NULL, 0, (char *)in.base + off,
							       MPOL_F_NODE | MPOL_F_ADDR), 0);
				ck_assert_msg(node == p.numa_node, "%s: page at +%llu on node %d",
					      c->name, U64(off), node);
			}
		}
		check_memory(&in, (uint64_t)i);
	}
	if (forked())
		ck_assert_int_eq(count_lines(TIER_LL_WARN, &line), c->warnings);
	if (c->warnings && forked())
		ck_assert_msg(strstr(line, "NUMA node"), "%s: warning '%s'", c->name, line);
	ck_assert_int_eq(count_lines(TIER_LL_INFO, &line), c->opens);
	if (c->bound)
		ck_assert_msg(strstr(line, "bound to NUMA node 0"), "%s: INFO line '%s'", c->name,
			      line);
	for (int i = 0; i < c->opens; i++)
		dram_arena_close(a[i]);
}
END_TEST

/* ------------------------------------------------------------- CUDA */

#define GPU_MISSING 999

struct gpu_case {
	const char *name;
	int gpu;
	int opens;
};

static const struct gpu_case gpu_cases[] = {
	{ "no GPU asked", -1, 1 },
	{ "GPU 0", 0, 1 },
	{ "GPU 0 twice", 0, 2 },
	{ "missing GPU twice", GPU_MISSING, 2 },
};

START_TEST(test_gpu)
{
	const struct gpu_case *c = &gpu_cases[_i];
	struct dram_params p = params(2 * MiB, TIER_HUGE_AUTO);
	struct dram_arena *a[2];
	struct dram_info in;
	const char *line = "";
	int ngpu = 0;
	bool registers;

	ck_assert_int_eq(gpu_count(&ngpu, NULL, 0), 0);
	registers = c->gpu >= 0 && c->gpu < ngpu;
	p.gpu = c->gpu;
	for (int i = 0; i < c->opens; i++) {
		a[i] = open_ok(&p, &in);
		ck_assert_msg(in.cuda_registered == registers, "%s: cuda_registered %d (%d GPUs)",
			      c->name, in.cuda_registered, ngpu);
		check_memory(&in, (uint64_t)i);
	}
	if (forked())
		ck_assert_int_eq(count_lines(TIER_LL_WARN, &line), c->gpu >= 0 && !registers);
	if (c->gpu >= 0 && !registers && forked()) {
		char want[32];

		snprintf(want, sizeof(want), "GPU %d", c->gpu);
		ck_assert_msg(strstr(line, want), "%s: warning '%s'", c->name, line);
	}
	for (int i = 0; i < c->opens; i++)
		dram_arena_close(a[i]);
}
END_TEST

/* ------------------------------------------------------------- faults */

struct map_fault_case {
	enum tiers_huge_pages huge;
	int err;
};

static const struct map_fault_case map_fault_cases[] = {
	{ TIER_HUGE_OFF, -ENOMEM },
	{ TIER_HUGE_AUTO, -EIO },
	{ TIER_HUGE_OFF, -EPERM },
	{ TIER_HUGE_AUTO, -ENOMEM },
};

START_TEST(test_map_fault)
{
	NEED_FAULTS();
	const struct map_fault_case *c = &map_fault_cases[_i];
	struct dram_params p = params(4 * MiB, c->huge);
	struct dram_arena *a = (struct dram_arena *)&p;
	struct dram_info in;
	int rc;

	p.lock = true;
	p.numa_node = 0;
	ck_assert_int_eq(ts_fault_arm(TIER_FAULT_DRAM_MAP, 1, 1, c->err), 0);
	rc = dram_arena_open(&p, &a);
	ck_assert_msg(rc == c->err, "open: %d (%s), expected %d", rc, tier_last_error(), c->err);
	ck_assert_ptr_null(a);
	ck_assert_msg(tier_last_error()[0] != '\0', "no detail");
	ck_assert_uint_eq(ts_fault_fired(TIER_FAULT_DRAM_MAP), 1);
	/* Nothing after the mapping ran. */
	ck_assert_uint_eq(ts_fault_calls(TIER_FAULT_DRAM_PIN), 0);
	ck_assert_int_eq(count_lines(TIER_LL_INFO, NULL) + count_lines(TIER_LL_WARN, NULL), 0);

	/* Transient: the next open maps. */
	a = open_ok(&p, &in);
	check_memory(&in, 1);
	dram_arena_close(a);
}
END_TEST

struct pin_fault_case {
	const char *name;
	uint64_t nth;
	int64_t count;
	int gpu;
	/* with numa_available() >= 0 and no GPU */
	bool bound, locked;
	uint64_t calls;         /* DRAM_PIN passes: bind, lock, register */
	int warnings;
};

static const struct pin_fault_case pin_fault_cases[] = {
	{ "persistent: lock, bind", 1, TIER_FAULT_PERSISTENT, -1, false, false, 2, 2 },
	{ "persistent: lock, bind, register", 1, TIER_FAULT_PERSISTENT, 0, false, false, 3, 3 },
	{ "the bind", 1, 1, -1, false, true, 2, 1 },
	{ "the lock", 2, 1, -1, true, false, 2, 1 },
	{ "the registration", 3, 1, 0, true, true, 3, 1 },
};

START_TEST(test_pin_fault)
{
	NEED_FAULTS();
	const struct pin_fault_case *c = &pin_fault_cases[_i];
	struct dram_params p = params(1 * MiB, TIER_HUGE_AUTO);
	bool have_numa = numa_available() >= 0;
	struct dram_arena *a;
	struct dram_info in;
	int ngpu = 0, warnings = c->warnings;

	ck_assert_int_eq(gpu_count(&ngpu, NULL, 0), 0);
	if (ngpu > 0) {
		fprintf(stderr, "%s: a GPU is present (this table assumes none); skipped\n", c->name);
		return;
	}
	if (!have_numa && c->bound)
		warnings++;             /* so is the bind */
	limit_memlock(8 * MiB);
	p.lock = true;
	p.numa_node = 0;
	p.gpu = c->gpu;
	ck_assert_int_eq(ts_fault_arm(TIER_FAULT_DRAM_PIN, c->nth, c->count, -EPERM), 0);
	a = open_ok(&p, &in);
	ck_assert_msg(in.numa_bound == (c->bound && have_numa), "%s: numa_bound %d", c->name,
		      in.numa_bound);
	ck_assert_msg(in.locked == c->locked, "%s: locked %d", c->name, in.locked);
	ck_assert(!in.cuda_registered);
	ck_assert_uint_eq(ts_fault_calls(TIER_FAULT_DRAM_PIN), c->calls);
	ck_assert_uint_eq(ts_fault_fired(TIER_FAULT_DRAM_PIN),
			  c->count == TIER_FAULT_PERSISTENT ? c->calls : 1);
	check_memory(&in, 2);
	if (forked()) {
		int n = count_lines(TIER_LL_WARN, NULL);

		if (n != warnings)
			dump_lines();
		ck_assert_int_eq(n, warnings);
	}
	dram_arena_close(a);
}
END_TEST

START_TEST(test_alloc_fault)
{
	NEED_FAULTS();
	struct dram_params p = params(1 * MiB, TIER_HUGE_OFF);
	struct dram_arena *a = (struct dram_arena *)&p;
	int rc;

	ck_assert_int_eq(ts_fault_arm(TIER_FAULT_ALLOC, 1, 1, -ENOMEM), 0);
	rc = dram_arena_open(&p, &a);
	ck_assert_int_eq(rc, -ENOMEM);
	ck_assert_ptr_null(a);
	ck_assert_msg(tier_last_error()[0] != '\0', "no detail");
	ck_assert_uint_eq(ts_fault_calls(TIER_FAULT_DRAM_MAP), 0);
}
END_TEST

/*
 * The prefault threads cannot be created (a 1 GiB + 4 KiB arena uses two
 * where there are two CPUs): this thread touches their part, and every
 * page is still resident.
 */
START_TEST(test_prefault_threads_refused)
{
	NEED_FAULTS();
	struct dram_params p = params(1 * GiB + 4 * KiB, TIER_HUGE_OFF);
	struct dram_arena *a;
	struct dram_info in;
	bool mapped;

	ck_assert_int_eq(ts_fault_arm(TIER_FAULT_THREAD_CREATE, 1, TIER_FAULT_PERSISTENT,
					-EAGAIN), 0);
	a = open_ok(&p, &in);
	if (sysconf(_SC_NPROCESSORS_ONLN) > 1)
		ck_assert_uint_ge(ts_fault_fired(TIER_FAULT_THREAD_CREATE), 1);
	ck_assert_msg(all_resident(in.base, in.size, &mapped), "not every page is resident");
	dram_arena_close(a);
}
END_TEST

/* ------------------------------------------------------------- the suite */

static Suite *dram_suite(void)
{
	Suite *s = suite_create("dram");
	TCase *tc;

	tc = tcase_create("open");
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_loop_test(tc, test_open, 0, (int)ARRAY_SIZE(open_cases));
	tcase_add_test(tc, test_close_null);
	suite_add_tcase(s, tc);

	tc = tcase_create("degrade");
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_loop_test(tc, test_lock, 0, (int)ARRAY_SIZE(lock_cases));
	tcase_add_loop_test(tc, test_numa, 0, (int)ARRAY_SIZE(numa_cases));
	tcase_add_loop_test(tc, test_gpu, 0, (int)ARRAY_SIZE(gpu_cases));
	suite_add_tcase(s, tc);

	tc = t_tcase_faults("faults");
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_loop_test(tc, test_map_fault, 0, (int)ARRAY_SIZE(map_fault_cases));
	tcase_add_loop_test(tc, test_pin_fault, 0, (int)ARRAY_SIZE(pin_fault_cases));
	tcase_add_test(tc, test_alloc_fault);
	tcase_add_test(tc, test_prefault_threads_refused);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return t_run_suite(dram_suite());
}
