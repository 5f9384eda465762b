/*
 * dram.c - the DRAM tier's arena (see dram.h): one anonymous mapping, made
 * once and never grown, that the store carves slots out of.
 *
 * Open runs five steps in this order:
 *
 *  1. map: hugetlb pages (MAP_HUGETLB, the kernel's default huge page size)
 *     for huge_pages: on, or for auto when enough are free; otherwise an
 *     ordinary mapping - for auto over-mapped and trimmed to a 2 MiB
 *     boundary and advised MADV_HUGEPAGE so the kernel backs it with
 *     transparent huge pages.  Fault site DRAM_MAP.  The only step that
 *     fails the open.
 *  2. bind: mbind(MPOL_BIND) to the NUMA node, before any page exists, so
 *     every page is allocated there.
 *  3. prefault: one write per page (several threads for a large arena), so
 *     the hot path never takes a page fault.
 *  4. lock: mlock, so nothing is swapped out.  hugetlb pages are never
 *     swapped and are not locked (mlock would only count them against
 *     RLIMIT_MEMLOCK): `locked` is true for them.
 *  5. register: cudaHostRegister with the manifest's GPU (gpu.h), so
 *     copies to and from the arena are DMA.
 *
 * Steps 2, 4 and 5 pass fault site DRAM_PIN; a refusal (real or injected)
 * is a warning, logged once per process per step, and the arena carries on
 * without it.  struct dram_info records what was achieved.
 *
 * The arena holds no lock: after open it is read only (the info) or owned
 * by the caller (the memory).
 */
#include "config.h"

#include <errno.h>
#include <inttypes.h>
#include <numa.h>
#include <numaif.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
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

#define THP_ALIGN (2ull << 20)
/* Prefault: one thread per this many bytes, up to PREFAULT_MAX_THREADS. */
#define PREFAULT_CHUNK (1ull << 30)
#define PREFAULT_MAX_THREADS 8
/* Nodes mbind can name here (the mask on the stack). */
#define MAX_NODES 1024

struct dram_arena {
	struct dram_info info;
	bool mlocked;             /* munlock on close */
};

/* One warning per process for each step that may be refused. */
static atomic_bool g_warned_lock, g_warned_numa, g_warned_cuda;

static bool first_warning(atomic_bool *flag)
{
	return !atomic_exchange(flag, true);
}

static uint64_t round_up(uint64_t v, uint64_t to)
{
	return (v + to - 1) / to * to;
}

/* ------------------------------------------------------------- map */

/*
 * Free hugetlb pages of @page_size on @node, or UINT64_MAX when the kernel
 * does not say (then the bind is tried anyway).
 */
static uint64_t node_free_huge(int node, uint64_t page_size)
{
	char path[160];
	unsigned long long v;
	FILE *f;

	snprintf(path, sizeof(path),
		 "/sys/devices/system/node/node%d/hugepages/hugepages-%llukB/free_hugepages",
		 node, (unsigned long long)(page_size >> 10));
	f = fopen(path, "re");
	if (!f)
		return UINT64_MAX;
	if (fscanf(f, "%llu", &v) != 1)
		v = UINT64_MAX;
	fclose(f);
	return v;
}

/* An ordinary mapping of @size; for THP aligned to 2 MiB (over-map, trim). */
static void *map_plain(uint64_t size, bool thp_align)
{
	uint64_t len = thp_align ? size + THP_ALIGN - 4096 : size;
	char *p, *start;

	if (len < size) {
		errno = ENOMEM;
		return MAP_FAILED;
	}
	p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (p == MAP_FAILED || !thp_align)
		return p;
	start = (char *)round_up((uintptr_t)p, THP_ALIGN);
	if (start > p)
		munmap(p, (size_t)(start - p));
	if (p + len > start + size)
		munmap(start + size, (size_t)(p + len - (start + size)));
	return start;
}

/*
 * Step 1.  Fills a->info.base, size, page_size, hugetlb and thp.  0, or
 * -ENOMEM / the armed fault with the detail set.
 */
static int arena_map(struct dram_arena *a, const struct dram_params *p)
{
	struct dram_info *in = &a->info;
	struct ts_hugeinfo hi;
	uint64_t small = (uint64_t)sysconf(_SC_PAGESIZE);
	bool try_huge = false;
	char sz[32], hsz[32];
	void *base;
	int rc;

	sys_hugeinfo(&hi);
	if (p->huge != TIER_HUGE_OFF && hi.page_size) {
		uint64_t need = p->capacity / hi.page_size + (p->capacity % hi.page_size != 0);

		ts_size_fmt(hi.page_size, hsz, sizeof(hsz));
		if (hi.free_pages >= need) {
			try_huge = true;
		} else if (p->huge == TIER_HUGE_ON) {
			return ts_err(-ENOMEM, "dram: huge_pages: on needs %" PRIu64 " huge pages of %s, "
					"%" PRIu64 " free (reserve them with vm.nr_hugepages, or set "
					"huge_pages: auto)", need, hsz, hi.free_pages);
		} else {
			TIER_DEBUG_LOG(TIER_SS_DRAM, "%" PRIu64 " huge pages of %s needed, "
				       "%" PRIu64 " free: using transparent huge pages", need, hsz,
				       hi.free_pages);
		}
	} else if (p->huge == TIER_HUGE_ON) {
		return ts_err(-ENOMEM, "dram: huge_pages: on, but this kernel has no huge pages "
				"(0 free; set huge_pages: auto)");
	}

	rc = ts_fault_check(TIER_FAULT_DRAM_MAP);
	if (rc)
		return ts_err(rc, "dram: mapping %s: %s",
				ts_size_fmt(p->capacity, sz, sizeof(sz)), tier_strerror(rc));

	if (try_huge) {
		uint64_t size = round_up(p->capacity, hi.page_size);

		base = size < p->capacity ? MAP_FAILED
			: mmap(NULL, size, PROT_READ | PROT_WRITE,
			       MAP_PRIVATE | MAP_ANONYMOUS | MAP_HUGETLB, -1, 0);
		if (base != MAP_FAILED) {
			in->base = base;
			in->size = size;
			in->page_size = hi.page_size;
			in->hugetlb = true;
			return 0;
		}
		rc = -errno;
		if (p->huge == TIER_HUGE_ON)
			return ts_err(-ENOMEM, "dram: huge_pages: on: mapping %" PRIu64 " huge pages "
					"of %s: %s (reserve them with vm.nr_hugepages, or set "
					"huge_pages: auto)", size / hi.page_size, hsz,
					tier_strerror(rc));
		/* Taken between our look and the mmap: fall back to THP. */
		TIER_DEBUG_LOG(TIER_SS_DRAM, "hugetlb mapping of %s refused (%s): using "
			       "transparent huge pages", ts_size_fmt(size, sz, sizeof(sz)),
			       tier_strerror(rc));
	}

	in->size = round_up(p->capacity, small);
	if (in->size < p->capacity)
		return ts_err(-ENOMEM, "dram: capacity %" PRIu64 " bytes is too large to map",
				p->capacity);
	base = map_plain(in->size, p->huge == TIER_HUGE_AUTO);
	if (base == MAP_FAILED) {
		rc = -errno;
		return ts_err(-ENOMEM, "dram: mapping %s: %s",
				ts_size_fmt(in->size, sz, sizeof(sz)), tier_strerror(rc));
	}
	in->base = base;
	in->page_size = small;
	if (p->huge == TIER_HUGE_AUTO)
		in->thp = hi.thp && madvise(base, in->size, MADV_HUGEPAGE) == 0;
	return 0;
}

/* ------------------------------------------------------------- bind */

/* Step 2.  Sets a->info.numa_bound, or warns (once) why not. */
static void arena_bind(struct dram_arena *a, int node)
{
	struct dram_info *in = &a->info;
	unsigned long mask[MAX_NODES / (8 * sizeof(unsigned long))] = { 0 };
	char why[160];
	int rc = ts_fault_check(TIER_FAULT_DRAM_PIN);

	if (rc) {
		snprintf(why, sizeof(why), "%s", tier_strerror(rc));
	} else if (numa_available() < 0) {
		snprintf(why, sizeof(why), "NUMA is not available on this machine");
	} else if (node >= MAX_NODES || node > numa_max_node()) {
		snprintf(why, sizeof(why), "no such node (highest is %d)", numa_max_node());
	} else if (in->hugetlb && node_free_huge(node, in->page_size) < in->size / in->page_size) {
		/* Bound there, a fault with no huge page free on the node is SIGBUS. */
		snprintf(why, sizeof(why), "node %d has %" PRIu64 " free huge pages, %" PRIu64
			 " needed", node, node_free_huge(node, in->page_size),
			 in->size / in->page_size);
	} else {
		mask[node / (8 * sizeof(unsigned long))] |= 1ul << (node % (8 * sizeof(unsigned long)));
		if (mbind(in->base, in->size, MPOL_BIND, mask, MAX_NODES + 1, 0) == 0) {
			in->numa_bound = true;
			return;
		}
		snprintf(why, sizeof(why), "mbind: %s", tier_strerror(-errno));
	}
	if (first_warning(&g_warned_numa))
		TIER_WARN(TIER_SS_DRAM, "cannot bind the arena to NUMA node %d: %s; its pages go "
			  "wherever the kernel puts them", node, why);
}

/* ------------------------------------------------------------- prefault */

struct prefault_part {
	volatile char *start;
	uint64_t len, stride;
};

static void *prefault_main(void *arg)
{
	const struct prefault_part *pp = arg;

	for (uint64_t off = 0; off < pp->len; off += pp->stride)
		pp->start[off] = 0;
	return NULL;
}

/*
 * Step 3.  Writes one zero per page, in up to PREFAULT_MAX_THREADS threads
 * for a large arena.  A thread that cannot be created (fault site
 * THREAD_CREATE) has its part done by this one: never an error.
 */
static void arena_prefault(struct dram_arena *a)
{
	const struct dram_info *in = &a->info;
	struct prefault_part parts[PREFAULT_MAX_THREADS];
	pthread_t th[PREFAULT_MAX_THREADS];
	bool started[PREFAULT_MAX_THREADS] = { false };
	uint64_t stride = in->hugetlb ? in->page_size : 4096;
	uint64_t pages = in->size / stride, per;
	long cpus = sysconf(_SC_NPROCESSORS_ONLN);
	unsigned n = (unsigned)(in->size / PREFAULT_CHUNK) + 1;

	if (n > PREFAULT_MAX_THREADS)
		n = PREFAULT_MAX_THREADS;
	if (cpus > 0 && n > (unsigned)cpus)
		n = (unsigned)cpus;
	if (n > pages)
		n = (unsigned)pages;
	per = (pages + n - 1) / n;
	for (unsigned i = 0; i < n; i++) {
		uint64_t first = i * per < pages ? i * per : pages;
		uint64_t count = pages - first < per ? pages - first : per;

		parts[i] = (struct prefault_part){ (volatile char *)in->base + first * stride,
						   count * stride, stride };
		/* Part 0 is this thread's own. */
		if (i > 0 && ts_fault_check(TIER_FAULT_THREAD_CREATE) == 0)
			started[i] = pthread_create(&th[i], NULL, prefault_main, &parts[i]) == 0;
	}
	for (unsigned i = 0; i < n; i++)
		if (!started[i])
			prefault_main(&parts[i]);
	for (unsigned i = 0; i < n; i++)
		if (started[i])
			pthread_join(th[i], NULL);
}

/* ------------------------------------------------------------- lock */

/*
 * mlock(2) itself, not the libc symbol: the sanitizers intercept mlock and
 * munlock and make them no-ops that succeed (they exist to keep mlockall
 * from pinning shadow memory), which would report an arena as locked that
 * is not, and hide RLIMIT_MEMLOCK from the tests.
 */
static int sys_mlock(void *base, uint64_t len)
{
	return (int)syscall(SYS_mlock, base, (size_t)len);
}

/* Step 4.  Sets a->info.locked, or warns (once) why not. */
static void arena_lock(struct dram_arena *a)
{
	struct dram_info *in = &a->info;
	char sz[32], lim[32] = "unlimited";
	struct rlimit rl;
	int rc = ts_fault_check(TIER_FAULT_DRAM_PIN);

	if (rc == 0 && in->hugetlb) {
		in->locked = true;      /* hugetlb pages are never swapped */
		return;
	}
	if (rc == 0) {
		if (sys_mlock(in->base, in->size) == 0) {
			in->locked = a->mlocked = true;
			return;
		}
		rc = -errno;
	}
	if (!first_warning(&g_warned_lock))
		return;
	ts_size_fmt(in->size, sz, sizeof(sz));
	if (getrlimit(RLIMIT_MEMLOCK, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY)
		ts_size_fmt(rl.rlim_cur, lim, sizeof(lim));
	if (rc == -EPERM || rc == -ENOMEM)
		TIER_WARN(TIER_SS_DRAM, "cannot lock %s in memory (RLIMIT_MEMLOCK is %s; "
			  "mlock: %s): pages may be swapped; raise ulimit -l", sz, lim,
			  tier_strerror(rc));
	else
		TIER_WARN(TIER_SS_DRAM, "cannot lock %s in memory (mlock: %s): pages may be "
			  "swapped", sz, tier_strerror(rc));
}

/* ------------------------------------------------------------- register */

/* Step 5.  Sets a->info.cuda_registered, or warns (once) why not. */
static void arena_register(struct dram_arena *a, int gpu)
{
	struct dram_info *in = &a->info;
	int rc = ts_fault_check(TIER_FAULT_DRAM_PIN);

	if (rc == 0) {
		rc = gpu_host_register(in->base, in->size, gpu);
		if (rc == 0) {
			in->cuda_registered = true;
			return;
		}
	} else {
		ts_err(rc, "cudaHostRegister: %s", tier_strerror(rc));
	}
	if (first_warning(&g_warned_cuda))
		TIER_WARN(TIER_SS_DRAM, "cannot register the arena with GPU %d: %s; copies to "
			  "and from it are staged, not direct DMA", gpu, tier_last_error());
}

/* ------------------------------------------------------------- the API */

int dram_arena_open(const struct dram_params *p, struct dram_arena **out)
{
	struct dram_arena *a;
	struct dram_info *in;
	char sz[32], hp[32], pg[48], node[48];
	int rc;

	*out = NULL;
	if (p->capacity == 0)
		return ts_err(-EINVAL, "dram: capacity is zero");
	a = ts_calloc(1, sizeof(*a));
	if (!a)
		return ts_err(-ENOMEM, "dram: out of memory");
	in = &a->info;
	in->numa_node = p->numa_node;
	rc = arena_map(a, p);
	if (rc) {
		free(a);
		return rc;
	}
	if (p->numa_node >= 0)
		arena_bind(a, p->numa_node);
	arena_prefault(a);
	if (p->lock)
		arena_lock(a);
	if (p->gpu >= 0)
		arena_register(a, p->gpu);

	ts_size_fmt(in->size, sz, sizeof(sz));
	if (in->hugetlb)
		snprintf(pg, sizeof(pg), "hugetlb %s", ts_size_fmt(in->page_size, hp, sizeof(hp)));
	else
		snprintf(pg, sizeof(pg), "%s", in->thp ? "transparent huge" : "4 KiB");
	if (in->numa_bound)
		snprintf(node, sizeof(node), "bound to NUMA node %d", in->numa_node);
	else
		snprintf(node, sizeof(node), "not bound to a NUMA node");
	TIER_INFO(TIER_SS_DRAM, "arena of %s at %p: %s pages, %s, %s, %s", sz, in->base, pg,
		  node, in->locked ? "locked" : "not locked",
		  in->cuda_registered ? "registered with CUDA" : "not registered with CUDA");
	ts_err_clear();
	*out = a;
	return 0;
}

void dram_arena_close(struct dram_arena *a)
{
	if (!a)
		return;
	if (a->info.cuda_registered)
		gpu_host_unregister(a->info.base);
	if (a->mlocked)
		syscall(SYS_munlock, a->info.base, (size_t)a->info.size);
	munmap(a->info.base, a->info.size);
	free(a);
}

void dram_arena_info(const struct dram_arena *a, struct dram_info *out)
{
	*out = a->info;
}

void *dram_arena_base(const struct dram_arena *a)
{
	return a->info.base;
}
