/*
 * test_live.c - the live view: the latency histogram, a store's
 * stats segment (mode, owner, removal, TIER_STATS=off, a segment that
 * cannot be created, a stats directory on a full file system),
 * tier-stat's output against the store's own
 * counters, stale segments, refusals, and consistent snapshots under a
 * publishing store, and payloads of another layout.
 *
 * The tool's output is checked by tests/runtime/live_check.py (python3), which
 * this suite runs with tier-stat ($TIER_STAT) while the store is open:
 * the suite writes what the store's own counters say (tier_store_get_stats,
 * tier_nvme_get_stats, the step results) as JSON, the script compares
 * tier-stat --json with it key by key, parses --prometheus and compares
 * its samples too.
 */
#include "config.h"

#include <check.h>
#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/error.h"
#include "common/fault.h"
#include "common/log.h"
#include "common/options.h"
#include "formats/statseg.h"
#include "t_helpers.h"
#include "tiers/store.h"

#define KiB (1ull << 10)
#define MiB (1ull << 20)
#define U64(x) ((unsigned long long)(x))

static char *g_dir;   /* scratch: the stats directory and the NVMe path */

static void setup(void)
{
	ts_fault_reset_all();
	ts_err_clear();
	g_dir = t_mkdtemp();
	ck_assert_int_eq(setenv("TIER_STATS_DIR", g_dir, 1), 0);
	unsetenv("TIER_STATS");
	unsetenv("TIER_STATS_INTERVAL");
	ts_options_reload();
}

static void teardown(void)
{
	ts_fault_reset_all();
	unsetenv("TIER_STATS_DIR");
	unsetenv("TIER_STATS");
	unsetenv("TIER_STATS_INTERVAL");
	ts_options_reload();
	t_rmtree(g_dir);
	free(g_dir);
	g_dir = NULL;
}

/* ============================================================ histogram */

static const struct {
	uint64_t ns;
	unsigned bucket;
	uint64_t upper;
} lat_cases[] = {
	{ 0, 0, 128 },
	{ 127, 0, 128 },
	{ 128, 1, 256 },
	{ 1023, 7, 1024 },
	{ 1024, 8, 1152 },          /* 8 per power of two from 1 us */
	{ 1151, 8, 1152 },
	{ 1152, 9, 1280 },
	{ 2047, 15, 2048 },
	{ 2048, 16, 2304 },
	{ 100000, 60, 106496 },     /* 100 us */
	{ 1000000, 87, 1048576 },   /* 1 ms */
	{ 1000000000, 166, 1006632960 },
	{ UINT64_MAX, TIER_LAT_BUCKETS - 1, UINT64_MAX },
};

START_TEST(lat_bucket_table)
{
	uint64_t ns = lat_cases[_i].ns;
	unsigned b = tier_lat_bucket(ns);

	ck_assert_uint_eq(b, lat_cases[_i].bucket);
	ck_assert_uint_eq(tier_lat_bucket_upper_ns(b), lat_cases[_i].upper);
}
END_TEST

/* Every value lies in [upper(b - 1), upper(b)), and a bucket is at most an
 * eighth of its lower bound wide (from 1 us on). */
START_TEST(lat_bucket_bounds)
{
	uint64_t s = 0x9E3779B97F4A7C15ull;

	for (int i = 0; i < 200000; i++) {
		uint64_t x = t_rnd_next(&s), ns = x >> (x % 60);
		unsigned b = tier_lat_bucket(ns);

		ck_assert_uint_lt(b, TIER_LAT_BUCKETS);
		ck_assert_msg(ns < tier_lat_bucket_upper_ns(b), "%llu in bucket %u", U64(ns), b);
		if (b > 0) {
			uint64_t lo = tier_lat_bucket_upper_ns(b - 1);

			ck_assert_msg(ns >= lo, "%llu below bucket %u", U64(ns), b);
			if (b >= 8 && b < TIER_LAT_BUCKETS - 1)
				ck_assert_uint_le(tier_lat_bucket_upper_ns(b) - lo, lo / 8);
		}
	}
	for (unsigned b = 1; b < TIER_LAT_BUCKETS; b++)
		ck_assert_uint_gt(tier_lat_bucket_upper_ns(b), tier_lat_bucket_upper_ns(b - 1));
}
END_TEST

START_TEST(lat_quantiles)
{
	static uint64_t h[TIER_LAT_BUCKETS];

	memset(h, 0, sizeof(h));
	ck_assert_uint_eq(tier_lat_quantile_ns(h, 0.5), 0);      /* empty */
	ck_assert_uint_eq(tier_lat_quantile_ns(NULL, 0.5), 0);
	/* 90 operations of 10 us, 10 of 5 ms */
	h[tier_lat_bucket(10000)] = 90;
	h[tier_lat_bucket(5000000)] = 10;
	ck_assert_uint_eq(tier_lat_quantile_ns(h, 0.5), tier_lat_bucket_upper_ns(tier_lat_bucket(10000)));
	ck_assert_uint_eq(tier_lat_quantile_ns(h, 0.9), tier_lat_bucket_upper_ns(tier_lat_bucket(10000)));
	ck_assert_uint_eq(tier_lat_quantile_ns(h, 0.91),
			  tier_lat_bucket_upper_ns(tier_lat_bucket(5000000)));
	ck_assert_uint_eq(tier_lat_quantile_ns(h, 0.99),
			  tier_lat_bucket_upper_ns(tier_lat_bucket(5000000)));
	ck_assert_uint_eq(tier_lat_quantile_ns(h, 1.0),
			  tier_lat_bucket_upper_ns(tier_lat_bucket(5000000)));
	ck_assert_uint_eq(tier_lat_quantile_ns(h, 0.0), 0);
	/* the top bucket reports its lower bound */
	memset(h, 0, sizeof(h));
	h[TIER_LAT_BUCKETS - 1] = 1;
	ck_assert_uint_eq(tier_lat_quantile_ns(h, 0.5),
			  tier_lat_bucket_upper_ns(TIER_LAT_BUCKETS - 2));
}
END_TEST

/* ============================================================ a store */

struct world {
	struct tier_manifest *man;
	struct tier_store *s;
	char name[32];
};

/* The store's parameters: @hbm > 0: an emulated HBM tier of that many
 * bytes. */
static struct tier_store_params world_params(uint64_t hbm)
{
	struct tier_store_params sp = { .size = sizeof(struct tier_store_params),
					.hbm_backend = hbm ? "host" : "none", .hbm_capacity = hbm,
					.flags = TIER_STORE_SCRATCH };

	return sp;
}

/* The manifest of a store with DRAM @dram over @npaths NVMe paths (one:
 * g_dir/nvme/, 64 MiB; several: g_dir/nvme-I/, 16 MiB each). */
static struct tier_manifest *world_manifest(const char *name, uint64_t dram, bool csum,
					    unsigned npaths)
{
	struct tier_manifest *m;
	char text[8192];
	int n, rc;

	n = snprintf(text, sizeof(text),
		     "name: %s\n"
		     "gpu:\n  device: none\n"
		     "dram:\n  capacity: %llu\n"
		     "optimizer:\n  shard_size: 64KiB\n  offload_fraction: 1\n"
		     "nvme:\n  stripe_unit: 64KiB\n  checksum: %s\n  direct: false\n  paths:\n",
		     name, U64(dram), csum ? "crc32c" : "none");
	for (unsigned i = 0; i < npaths && n < (int)sizeof(text); i++) {
		if (npaths == 1)
			n += snprintf(text + n, sizeof(text) - (size_t)n,
				      "    - path: %s/nvme/\n      capacity: 64MiB\n"
				      "      create: true\n", g_dir);
		else
			n += snprintf(text + n, sizeof(text) - (size_t)n,
				      "    - path: %s/nvme-%u/\n      capacity: 16MiB\n"
				      "      create: true\n", g_dir, i);
	}
	ck_assert_int_lt(n, (int)sizeof(text));
	rc = tier_manifest_parse(text, (size_t)n, "live-test.yaml", 0, &m);
	ck_assert_msg(rc == 0, "manifest refused: %s\n%s", tier_last_error(), text);
	return m;
}

/* A store with DRAM @dram over one NVMe path; @hbm > 0: an emulated HBM
 * tier of that many bytes above it. */
static void world_open_hbm(struct world *w, const char *name, uint64_t dram, uint64_t hbm,
			   bool csum)
{
	struct tier_store_params sp = world_params(hbm);
	int rc;

	memset(w, 0, sizeof(*w));
	snprintf(w->name, sizeof(w->name), "%s", name);
	w->man = world_manifest(name, dram, csum, 1);
	rc = tier_store_open(w->man, &sp, &w->s);
	ck_assert_msg(rc == 0, "store open: %d: %s", rc, tier_last_error());
}

static void world_open(struct world *w, const char *name, uint64_t dram, bool csum)
{
	world_open_hbm(w, name, dram, 0, csum);
}

static void world_close(struct world *w)
{
	ck_assert_int_eq(tier_store_close(w->s), 0);
	tier_manifest_free(w->man);
	w->s = NULL;
}

/* Writes, reads back and evicts: every counter moves. */
static void do_work(struct tier_store *s, unsigned nobj, uint64_t size)
{
	char name[32];
	void *buf = malloc(size), *back = malloc(size);

	ck_assert_ptr_nonnull(buf);
	ck_assert_ptr_nonnull(back);
	for (unsigned i = 0; i < nobj; i++) {
		struct tier_obj *o;

		snprintf(name, sizeof(name), "obj%u", i);
		ck_assert_int_eq(tier_obj_create(s, name, size, &o), 0);
		memset(buf, (int)(i + 1), size);
		ck_assert_int_eq(tier_obj_write(s, o, 0, size, buf), 0);
	}
	for (unsigned i = 0; i < nobj; i++) {
		struct tier_obj *o;

		snprintf(name, sizeof(name), "obj%u", i);
		o = tier_obj_find(s, name);
		ck_assert_ptr_nonnull(o);
		ck_assert_int_eq(tier_obj_read(s, o, 0, size, back), 0);
		memset(buf, (int)(i + 1), size);
		ck_assert(memcmp(buf, back, size) == 0);
	}
	ck_assert_int_eq(tier_store_flush(s), 0);
	free(buf);
	free(back);
}

/* Runs tests/runtime/live_check.py MODE ARGS...; its exit status. */
static int run_check(const char *fmt, ...)
	__attribute__((format(printf, 1, 2)));
static int run_check(const char *fmt, ...)
{
	const char *ts = getenv("TIER_STAT"), *py = getenv("TIER_LIVE_CHECK");
	char args[4096], cmd[8192];
	va_list ap;
	int rc;

	ck_assert_msg(ts && py, "TIER_STAT and TIER_LIVE_CHECK must name tier-stat and live_check.py "
		      "(meson test sets them)");
	va_start(ap, fmt);
	vsnprintf(args, sizeof(args), fmt, ap);
	va_end(ap);
	snprintf(cmd, sizeof(cmd), "python3 '%s' --tier-stat '%s' --dir '%s' %s", py, ts, g_dir, args);
	fflush(stdout);
	fflush(stderr);
	rc = system(cmd);
	ck_assert_msg(rc != -1 && WIFEXITED(rc), "could not run: %s", cmd);
	return WEXITSTATUS(rc);
}

static void json_level(FILE *f, const char *key, const struct tier_level_stats *l, bool last)
{
	fprintf(f, "\"%s\":{\"backend\":\"%s\",\"capacity_bytes\":%llu,\"used_bytes\":%llu,"
		"\"pinned_bytes\":%llu,\"dirty_bytes\":%llu,\"objects\":%llu,\"hits\":%llu,"
		"\"misses\":%llu,\"evictions\":%llu,\"writebacks\":%llu,\"prefetches\":%llu,"
		"\"prefetch_skipped\":%llu,\"errors\":%llu,\"bytes_in\":%llu,\"bytes_out\":%llu,"
		"\"in_bytes_per_second\":0,\"out_bytes_per_second\":0}%s",
		key, l->backend, U64(l->capacity), U64(l->used), U64(l->pinned), U64(l->dirty),
		U64(l->objects), U64(l->hits), U64(l->misses), U64(l->evictions),
		U64(l->writebacks), U64(l->prefetches), U64(l->prefetch_skipped), U64(l->errors),
		U64(l->bytes_in), U64(l->bytes_out), last ? "" : ",");
}

/* Pins objects in DRAM until it is full, and prefetches one more there:
 * skipped (prefetch_skipped). */
static void prefetch_into_pinned(struct tier_store *s)
{
	struct tier_obj *o[12];
	unsigned n = 0;
	void *p;

	for (unsigned i = 0; i < 12; i++) {
		char name[16];

		snprintf(name, sizeof(name), "obj%u", i);
		o[i] = tier_obj_find(s, name);
		ck_assert_ptr_nonnull(o[i]);
	}
	while (n < 11 && tier_obj_acquire(s, o[n], TIER_DRAM, TIER_ACQUIRE_READ, &p) == 0)
		n++;
	ck_assert_uint_gt(n, 0);
	ck_assert_uint_lt(n, 11);
	ck_assert_int_eq(tier_obj_prefetch(s, o[n], TIER_DRAM), 0);
	store_quiesce(s);
	while (n--)
		ck_assert_int_eq(tier_obj_release(s, o[n], TIER_DRAM, false), 0);
}

/*
 * The acceptance test: a store does known work (objects written, read
 * back through a DRAM tier smaller than them, flushed, a prefetch
 * skipped; an optimizer runs steps, one of them skipped), then stays
 * quiet.  tier-stat --json must give exactly the store's own counters,
 * and --prometheus the same in parseable form.
 */
START_TEST(tier_stat_matches_store)
{
	struct world w;
	struct tier_optim *o;
	struct tier_optim_params hp;
	struct tier_step_result res[3];
	struct tier_store_stats st;
	struct tier_nvme_stats ns;
	struct tier_live_stats *live = calloc(1, sizeof(*live));
	struct tier_live *l;
	float *init, *grad;
	const size_t numel = 40000;
	char path[4200];
	uint32_t id;
	FILE *f;

	ck_assert_ptr_nonnull(live);
	world_open_hbm(&w, "live-acceptance", 1 * MiB, 2 * MiB, true);
	do_work(w.s, 12, 256 * KiB); /* 3 MiB through 1 MiB of DRAM */
	prefetch_into_pinned(w.s);
	for (int k = 0; k < 2; k++) {
		/* up to the HBM tier: misses, then hits; one comes back dirty */
		for (unsigned i = 8; i < 12; i++) {
			char name[16];
			struct tier_obj *ob;
			void *p;

			snprintf(name, sizeof(name), "obj%u", i);
			ob = tier_obj_find(w.s, name);
			ck_assert_ptr_nonnull(ob);
			ck_assert_int_eq(tier_obj_acquire(w.s, ob, TIER_HBM, TIER_ACQUIRE_READ | (i == 8 ? TIER_ACQUIRE_WRITE : 0),
						      &p), 0);
			ck_assert_int_eq(tier_obj_release(w.s, ob, TIER_HBM, i == 8), 0);
		}
	}
	ck_assert_int_eq(tier_store_flush(w.s), 0);

	tier_optim_params_init(&hp);
	hp.shard_size = 64 * KiB;
	hp.offload_fraction = 1.0;
	hp.threads = 2;
	hp.loss_scale = 1024;
	ck_assert_int_eq(tier_optim_create(w.s, &hp, &o), 0);
	init = calloc(numel, sizeof(float));
	grad = calloc(numel, sizeof(float));
	for (size_t i = 0; i < numel; i++) {
		init[i] = (float)i * 1e-4f;
		grad[i] = 1024.0f * (float)((i % 7) - 3) * 1e-3f;
	}
	ck_assert_int_eq(tier_optim_add_param(o, "w", numel, init, &id), 0);
	for (int k = 0; k < 3; k++) {
		struct tier_tensor g = { grad, TIER_FP32, TIER_MEM_HOST, numel };

		if (k == 1)
			grad[5] = 1.0f / 0.0f; /* an overflow: skipped */
		ck_assert_int_eq(tier_optim_step(o, TIER_LR_KEEP, &g, NULL, &res[k]), 0);
		grad[5] = 1.0f;
	}
	ck_assert(res[0].applied && !res[1].applied && res[2].applied);

	/* Quiet now.  A published rate is against the newest sample at least
	 * a second old, so the rates are zero once a sample at least a second
	 * old was taken after the last byte moved.  A sleep long enough for
	 * the publisher thread's own samples (every 250 ms) to be such is
	 * timing: on a loaded machine that thread may take none in the quiet
	 * (1.1 s failed on a 16-core machine).  So the test takes them:
	 * counters read, a publish (a sample), a second or more, a publish,
	 * counters read again; when no counter moved across both publishes
	 * and nothing is in flight, every sample between them and from then
	 * on is in the quiet (the state fits the DRAM tier with a shard to
	 * spare: nothing is written behind), and the rates are surely zero.
	 * Else (bytes still moving) again. */
	for (;;) {
		struct tier_store_stats s0, s1;
		struct tier_nvme_stats n0, n1;
		bool quiet = true;

		tier_store_get_stats(w.s, &s0);
		tier_nvme_get_stats(tier_store_nvme(w.s), &n0);
		ck_assert_int_eq(tier_store_publish_stats(w.s), 0);
		ts_sleep_ns(1000000000ull);
		ck_assert_int_eq(tier_store_publish_stats(w.s), 0);
		tier_store_get_stats(w.s, &s1);
		tier_nvme_get_stats(tier_store_nvme(w.s), &n1);
		for (int i = 0; i < TIER_LEVELS; i++)
			quiet &= s0.level[i].bytes_in == s1.level[i].bytes_in &&
				 s0.level[i].bytes_out == s1.level[i].bytes_out;
		quiet &= n0.bytes_read == n1.bytes_read && n0.bytes_written == n1.bytes_written;
		for (uint32_t p = 0; p < n1.npaths; p++) {
			struct tier_nvme_path_stats ps;

			tier_nvme_get_path_stats(tier_store_nvme(w.s), p, &ps);
			quiet &= ps.inflight == 0;
		}
		if (quiet)
			break;
	}
	tier_store_get_stats(w.s, &st);
	tier_nvme_get_stats(tier_store_nvme(w.s), &ns);
	ck_assert_uint_eq(ns.npaths, 1);

	/* What a reader of the segment sees, through the public API. */
	ck_assert_int_eq(tier_live_open(tier_store_stats_path(w.s), &l), 0);
	ck_assert_int_eq(tier_live_read(l, live), 0);
	ck_assert_uint_eq(live->version, TIER_LIVE_VERSION);
	ck_assert_uint_eq(live->size, sizeof(*live));
	ck_assert_uint_eq(live->level[TIER_DRAM].hits, st.level[TIER_DRAM].hits);
	ck_assert_uint_eq(live->level[TIER_DRAM].misses, st.level[TIER_DRAM].misses);
	ck_assert_uint_gt(st.level[TIER_DRAM].prefetch_skipped, 0);
	ck_assert_uint_eq(live->level[TIER_DRAM].prefetch_skipped,
			  st.level[TIER_DRAM].prefetch_skipped);
	ck_assert_uint_gt(live->level[TIER_DRAM].evictions, 0);
	ck_assert_uint_eq(live->path[0].bytes_read, ns.bytes_read);
	ck_assert_uint_eq(live->path[0].bytes_written, ns.bytes_written);
	ck_assert_uint_gt(live->path[0].lat_count, 0);
	ck_assert_uint_gt(live->path[0].reads, 0);
	ck_assert_uint_gt(live->path[0].writes, 0);
	ck_assert_uint_eq(live->path[0].inflight, 0);
	ck_assert_uint_eq(live->optim.step, 2);
	ck_assert_uint_eq(live->optim.skipped, 1);
	tier_live_close(l);

	snprintf(path, sizeof(path), "%s/expect.json", g_dir);
	f = fopen(path, "w");
	ck_assert_ptr_nonnull(f);
	fprintf(f, "{\"pid\":%ld,\"name\":\"%s\",\"path\":\"%s\",\"uid\":%llu,\"version\":%u,"
		"\"stale\":false,\"objects\":%llu,\"commit_generation\":0,\"commit_time_ns\":0,"
		"\"commits_kept\":0,\"commit_oldest_generation\":0,\"stripe_unit\":%u,\"tiers\":{",
		(long)getpid(), w.name, tier_store_stats_path(w.s), U64(geteuid()), TIER_LIVE_VERSION,
		U64(st.objects), ns.stripe_unit);
	ck_assert(st.level[TIER_HBM].present);
	ck_assert_uint_gt(st.level[TIER_HBM].hits, 0);
	ck_assert_uint_gt(st.level[TIER_HBM].bytes_in, 0);
	ck_assert_uint_gt(st.level[TIER_HBM].bytes_out, 0);
	json_level(f, "hbm", &st.level[TIER_HBM], false);
	json_level(f, "dram", &st.level[TIER_DRAM], false);
	json_level(f, "nvme", &st.level[TIER_NVME], true);
	fprintf(f, "},\"paths\":[{\"index\":0,\"inflight\":0,\"bytes_read\":%llu,"
		"\"bytes_written\":%llu,\"errors\":0,\"checksum_errors\":%llu,"
		"\"read_bytes_per_second\":0,\"write_bytes_per_second\":0}],",
		U64(ns.bytes_read), U64(ns.bytes_written), U64(ns.csum_errors));
	fprintf(f, "\"prefetch\":{\"streaming\":false,\"ahead_bytes\":0,\"shards_ahead\":0},");
	fprintf(f, "\"optimizer\":{\"step\":%llu,\"skipped_steps\":1,\"params\":1,\"shards\":%u,"
		"\"state_bytes\":%llu,\"last_step_seconds\":%.17g,\"last_stall_seconds\":%.17g,"
		"\"offload_fraction\":%.17g,\"loss_scale\":%.17g,\"grad_norm\":%.17g}}\n",
		U64(res[2].step), res[2].cpu_shards + res[2].gpu_shards, U64(numel * 12),
		(double)(uint64_t)(res[2].step_s * 1e9) * 1e-9,
		(double)(uint64_t)(res[2].stall_s * 1e9) * 1e-9, res[2].offload_fraction,
		res[2].next_loss_scale, res[2].grad_norm);
	ck_assert_int_eq(fclose(f), 0);

	ck_assert_int_eq(run_check("report --pid %ld --expect '%s'", (long)getpid(), path), 0);

	ck_assert_int_eq(tier_optim_destroy(o), 0);
	free(init);
	free(grad);
	free(live);
	world_close(&w);
}
END_TEST

/* The segment: where, mode 0600, owner, the manifest, removed on close. */
START_TEST(segment_file)
{
	struct world w;
	struct tier_live *l;
	struct tier_live_info info;
	struct stat sb;
	char path[4200];

	world_open(&w, "seg-file", 1 * MiB, false);
	ck_assert_ptr_nonnull(tier_store_stats_path(w.s));
	snprintf(path, sizeof(path), "%s", tier_store_stats_path(w.s));
	ck_assert_msg(strncmp(path, g_dir, strlen(g_dir)) == 0, "%s not in %s", path, g_dir);
	ck_assert_int_eq(lstat(path, &sb), 0);
	ck_assert(S_ISREG(sb.st_mode));
	ck_assert_uint_eq(sb.st_mode & 07777, 0600);
	ck_assert_uint_eq(sb.st_uid, geteuid());
	ck_assert_int_eq(tier_live_open(path, &l), 0);
	tier_live_info(l, &info);
	ck_assert_int_eq(info.pid, getpid());
	ck_assert_str_eq(info.name, "seg-file");
	ck_assert_uint_eq(info.version, TIER_LIVE_VERSION);
	ck_assert_ptr_nonnull(strstr(info.manifest, "name: \"seg-file\""));
	ck_assert_ptr_nonnull(strstr(info.manifest, "nvme:"));
	ck_assert(!tier_live_stale(l));
	ck_assert_int_eq(tier_live_remove(l), -EBUSY); /* a running store's: never */
	ck_assert_int_eq(access(path, F_OK), 0);
	tier_live_close(l);
	world_close(&w);
	ck_assert_int_eq(access(path, F_OK), -1);
}
END_TEST

/*
 * Each store's rank and world size (issue 19): a store of rank 5 of 8
 * (local 1 of 4) says so in tier_live_info, the report, the list, --json
 * and the Prometheus labels; a segment of a writer that does not say
 * (statseg_create without a rank, as a library before 0.4) reads as
 * unknown everywhere; a rank block that is not a rank is corrupt.
 */
START_TEST(segment_rank)
{
	static const char *const vars[] = { "RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE" };
	static const char *const vals[] = { "5", "1", "8", "4" };
	size_t fixed = offsetof(struct tier_live_stats, path);
	struct tier_live_stats *st = calloc(1, sizeof(*st));
	struct tier_live_info info;
	struct tier_live *l;
	struct statseg *seg;
	struct world w;

	ck_assert_ptr_nonnull(st);
	for (int i = 0; i < 4; i++)
		ck_assert_int_eq(setenv(vars[i], vals[i], 1), 0);
	world_open(&w, "ranked", 1 * MiB, false);
	ck_assert_int_eq(tier_store_publish_stats(w.s), 0);
	ck_assert_int_eq(tier_live_open(tier_store_stats_path(w.s), &l), 0);
	tier_live_info(l, &info);
	ck_assert_int_eq(info.rank, 5);
	ck_assert_int_eq(info.local_rank, 1);
	ck_assert_int_eq(info.world_size, 8);
	ck_assert_int_eq(info.local_world_size, 4);
	ck_assert_ptr_nonnull(strstr(info.manifest, "# resolved for rank 5 of 8 (local rank 1 of 4"));
	tier_live_close(l);
	ck_assert_int_eq(run_check("rank --pid %ld --rank 5 --local-rank 1 --world-size 8 "
				   "--local-world-size 4", (long)getpid()), 0);
	world_close(&w);
	for (int i = 0; i < 4; i++)
		unsetenv(vars[i]);

	/* an older writer: no rank */
	ck_assert_int_eq(statseg_create("unranked", "", fixed + sizeof(struct tier_live_path), &seg), 0);
	ck_assert_int_eq(tier_live_open(statseg_path(seg), &l), 0);
	tier_live_info(l, &info);
	ck_assert_int_eq(info.world_size, 0);
	ck_assert_int_eq(info.rank, -1);
	ck_assert_int_eq(info.local_rank, -1);
	ck_assert_int_eq(info.local_world_size, -1);
	tier_live_close(l);
	statseg_close(seg);

	/* a rank past its world is refused as corrupt */
	ck_assert_int_eq(statseg_create_rank("badrank", "", fixed + sizeof(struct tier_live_path),
					     &(const struct statseg_rank){ 8, 0, 8, 1 }, &seg),
			 0);
	ck_assert_int_eq(tier_live_open(statseg_path(seg), &l), -EBADMSG);
	ck_assert_msg(strstr(tier_last_error(), "rank 8 of 8 (local 0 of 1) is not a rank"), "%s",
		      tier_last_error());
	statseg_close(seg);
	free(st);
}
END_TEST

/* TIER_STATS=off: no segment; the publish call says why. */
START_TEST(stats_off)
{
	struct world w;

	ck_assert_int_eq(setenv("TIER_STATS", "off", 1), 0);
	ts_options_reload();
	world_open(&w, "off", 1 * MiB, false);
	ck_assert_ptr_null(tier_store_stats_path(w.s));
	ck_assert_int_eq(tier_store_publish_stats(w.s), -ENOENT);
	do_work(w.s, 2, 64 * KiB);
	world_close(&w);
}
END_TEST

/* A segment that cannot be created (the fault sites, a missing
 * directory): the store opens and works without one. */
START_TEST(segment_create_fails)
{
	struct world w;

	NEED_FAULTS();
	ck_assert_int_eq(ts_fault_arm(TIER_FAULT_STATS_OPEN, 1, 1, -EMFILE), 0);
	world_open(&w, "nofile", 1 * MiB, false);
	ck_assert_ptr_null(tier_store_stats_path(w.s));
	do_work(w.s, 2, 64 * KiB);
	world_close(&w);

	ck_assert_int_eq(ts_fault_arm(TIER_FAULT_STATS_ALLOC, 1, 1, -ENOSPC), 0);
	world_open(&w, "noroom", 1 * MiB, false);
	ck_assert_ptr_null(tier_store_stats_path(w.s));
	ck_assert_uint_eq(ts_fault_fired(TIER_FAULT_STATS_ALLOC), 1);
	do_work(w.s, 2, 64 * KiB);
	world_close(&w);
}
END_TEST

/* A stats directory that does not exist: the same, without fault sites. */
START_TEST(segment_no_dir)
{
	struct world w;
	char missing[4200];

	snprintf(missing, sizeof(missing), "%s/no/such/dir", g_dir);
	ck_assert_int_eq(setenv("TIER_STATS_DIR", missing, 1), 0);
	ts_options_reload();
	world_open(&w, "nodir", 1 * MiB, false);
	ck_assert_ptr_null(tier_store_stats_path(w.s));
	do_work(w.s, 2, 64 * KiB);
	world_close(&w);
}
END_TEST

/* ============================================== a full stats directory */

#define PAGE 4096u

struct logcap {
	pthread_mutex_t lock;
	int warn;            /* warnings of the stats subsystem that match */
	int other;           /* any other warning or error */
	const char *needle;  /* what a matching warning names */
	char last[1024];
};

static struct logcap g_log = { .lock = PTHREAD_MUTEX_INITIALIZER };

static void log_sink(int level, uint32_t ss, const char *line, void *arg)
{
	struct logcap *c = arg;

	if (level > TIER_LL_WARN)
		return;
	pthread_mutex_lock(&c->lock);
	if (level == TIER_LL_WARN && ss == TIER_SS_STATS && strstr(line, c->needle) &&
	    strstr(line, "No space left on device") && strstr(line, "runs without"))
		c->warn++;
	else
		c->other++;
	snprintf(c->last, sizeof(c->last), "%s", line);
	pthread_mutex_unlock(&c->lock);
}

/* The pages of the segment a store of @m makes: one opened in g_dir. */
static size_t segment_pages(struct tier_manifest *m)
{
	struct tier_store_params sp = world_params(0);
	struct tier_store *s;
	struct stat st;

	ck_assert_int_eq(tier_store_open(m, &sp, &s), 0);
	ck_assert_ptr_nonnull(tier_store_stats_path(s));
	ck_assert_int_eq(stat(tier_store_stats_path(s), &st), 0);
	ck_assert_int_eq(tier_store_close(s), 0);
	return ((size_t)st.st_size + PAGE - 1) / PAGE;
}

/* A store whose segment was made: the publisher has published, in place. */
static void check_published(struct tier_store *s, const char *mnt, unsigned npaths)
{
	struct tier_live_stats *live = calloc(1, sizeof(*live));
	const char *path = tier_store_stats_path(s);
	struct tier_live *l;
	struct stat st;

	ck_assert_ptr_nonnull(live);
	ck_assert_ptr_nonnull(path);
	ck_assert_msg(strncmp(path, mnt, strlen(mnt)) == 0, "%s not in %s", path, mnt);
	ck_assert_int_eq(stat(path, &st), 0);
	ck_assert_int_ge((long long)st.st_blocks * 512, (long long)st.st_size);
	/* The publisher thread's own first publish, however late a loaded
	 * machine runs it (a thread that never publishes hangs here, and the
	 * suite's timeout names the test) ... */
	ck_assert_int_eq(tier_live_open(path, &l), 0);
	for (;;) {
		int rc = tier_live_read(l, live);

		ck_assert_msg(rc == 0 || rc == -EAGAIN, "%s: %d: %s", path, rc, tier_last_error());
		if (rc == 0 && live->publishes >= 1)
			break;
		usleep(1000);
	}
	/* ... and then one asked for: the count is the thread's and ours. */
	ck_assert_int_eq(tier_store_publish_stats(s), 0);
	ck_assert_int_eq(tier_live_read(l, live), 0);
	ck_assert_uint_eq(live->npaths, npaths);
	ck_assert_uint_gt(live->publishes, 1);
	tier_live_close(l);
	free(live);
}

static const struct {
	unsigned npaths;
	int short_pages; /* pages short of the segment's; -1: none free */
} full_cases[] = {
	{ 1, -1 }, { 1, 1 }, { 1, 0 },
	{ 8, -1 }, { 8, 5 }, { 8, 4 }, { 8, 3 }, { 8, 2 }, { 8, 1 }, { 8, 0 },
};

/*
 * The stats directory is a file system with no room, or some room but
 * less than the segment needs, for a store of one path and of eight (a
 * segment of several pages, which the store's publisher thread writes
 * after the store has opened): the store opens and works, without a
 * segment, and says so in one warning that names the directory and the
 * reason, however many stores fail; nothing is left there.  With just
 * enough room, the segment is made and published.  The process never gets
 * SIGBUS.
 */
START_TEST(stats_dir_full)
{
	unsigned npaths = full_cases[_i].npaths;
	int short_pages = full_cases[_i].short_pages;
	struct tier_store_params sp = world_params(0);
	struct tier_manifest *m = world_manifest("full", 1 * MiB, false, npaths);
	struct tier_store *s;
	char mnt[4200];
	size_t pages, leave;
	int rc;

	ck_assert_int_eq(setenv("TIER_STATS_INTERVAL", "10", 1), 0);
	ts_options_reload();
	pages = segment_pages(m);
	leave = short_pages < 0 ? 0 : (pages - (size_t)short_pages) * PAGE;
	snprintf(mnt, sizeof(mnt), "%s/full", g_dir);
	ck_assert_int_eq(mkdir(mnt, 0700), 0);
	rc = t_tmpfs_full(mnt, 256 << 10, leave);
	if (rc) {
		fprintf(stderr, "stats_dir_full: cannot mount a tmpfs on %s (%s); skipped\n", mnt,
			strerror(-rc));
		tier_manifest_free(m);
		return;
	}
	ck_assert_int_eq(setenv("TIER_STATS_DIR", mnt, 1), 0);
	ts_options_reload();
	atomic_store(&ts_log_level_g, TIER_LL_WARN);
	atomic_store(&ts_log_mask_g, TIER_SS_ALL);
	g_log.needle = mnt;
	ts_log_set_sink(log_sink, &g_log);

	for (int round = 0; round < 2; round++) {
		rc = tier_store_open(m, &sp, &s);
		ck_assert_msg(rc == 0, "store open: %d: %s", rc, tier_last_error());
		usleep(50 * 1000); /* the publisher, if any, publishes a few times */
		if (short_pages == 0)
			check_published(s, mnt, npaths);
		else
			ck_assert_ptr_null(tier_store_stats_path(s));
		do_work(s, 4, 256 * KiB);
		if (short_pages != 0)
			ck_assert_int_eq(tier_store_publish_stats(s), -ENOENT);
		usleep(50 * 1000); /* the publisher, if any, runs on */
		ck_assert_int_eq(tier_store_close(s), 0);
		ck_assert_int_eq(t_files_besides_filler(mnt), 0);
		ck_assert_uint_eq(t_fs_free(mnt), leave);
	}
	ts_log_set_sink(NULL, NULL);
	ck_assert_msg(g_log.warn == (short_pages != 0) && g_log.other == 0,
		      "%u paths, %zu of %zu pages free: %d matching warnings, %d other lines; "
		      "last: %s", npaths, leave / PAGE, pages, g_log.warn, g_log.other, g_log.last);
	if (g_log.warn)
		fprintf(stderr, "%u paths, %zu of %zu pages free: %s\n", npaths, leave / PAGE,
			pages, g_log.last);
	t_umount(mnt);
	tier_manifest_free(m);
}
END_TEST

/* A process that dies with its store open leaves a stale segment:
 * tier-stat lists it as stale, refuses to report it, and removes it only
 * with --remove-stale. */
START_TEST(stale_segment)
{
	int fds[2];
	pid_t pid;
	char path[4200] = "";
	ssize_t n;
	int status;
	struct tier_live *l;

	ck_assert_int_eq(pipe(fds), 0);
	pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		struct world w;
		const char *p;

		close(fds[0]);
		world_open(&w, "crashed", 1 * MiB, false);
		p = tier_store_stats_path(w.s);
		if (!p || write(fds[1], p, strlen(p)) < 0)
			_exit(3);
		_exit(0); /* without closing: as a crash would */
	}
	close(fds[1]);
	n = read(fds[0], path, sizeof(path) - 1);
	close(fds[0]);
	ck_assert_int_gt(n, 0);
	path[n] = '\0';
	ck_assert_int_eq(waitpid(pid, &status, 0), pid);
	ck_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	ck_assert_int_eq(access(path, F_OK), 0);

	ck_assert_int_eq(tier_live_open(path, &l), 0);
	ck_assert(tier_live_stale(l));
	tier_live_close(l);
	ck_assert_int_eq(run_check("stale --pid %ld --path '%s'", (long)pid, path), 0);
	ck_assert_int_eq(access(path, F_OK), -1);
}
END_TEST

/*
 * The last commit in the segment: none before the first commit, then a
 * store that commits twice shows generation 2, made a moment ago, 2 kept
 * (keep_commits' default), the oldest 1; tier-stat shows it in the report,
 * the list, --json and --prometheus (live_check.py commit).
 */
START_TEST(commit_published)
{
	struct tier_live_stats *live = calloc(1, sizeof(*live));
	struct tier_store_params sp = world_params(0);
	struct tier_commit_info ci;
	struct tier_live *l;
	struct world w;
	uint64_t gen = 0, before, after;

	ck_assert_ptr_nonnull(live);
	memset(&w, 0, sizeof(w));
	snprintf(w.name, sizeof(w.name), "committed");
	w.man = world_manifest(w.name, 4 * MiB, true, 1);
	sp.flags = 0; /* its files kept: commits need a store that is not scratch */
	ck_assert_msg(tier_store_open(w.man, &sp, &w.s) == 0, "open: %s", tier_last_error());
	ck_assert_int_eq(tier_store_publish_stats(w.s), 0);
	ck_assert_int_eq(tier_live_open(tier_store_stats_path(w.s), &l), 0);
	ck_assert_int_eq(tier_live_read(l, live), 0);
	ck_assert_uint_eq(live->commit_generation, 0);
	ck_assert_uint_eq(live->commit_time_ns, 0);
	ck_assert_uint_eq(live->commits_kept, 0);
	ck_assert_uint_eq(live->commit_oldest, 0);
	ck_assert_int_eq(run_check("commit --pid %ld --generation 0", (long)getpid()), 0);

	do_work(w.s, 3, 100 * KiB);
	before = ts_wall_ns();
	ck_assert_msg(tier_store_commit(w.s, NULL, 0, &gen) == 0, "commit: %s", tier_last_error());
	ck_assert_uint_eq(gen, 1);
	ck_assert_int_eq(tier_obj_write(w.s, tier_obj_find(w.s, "obj0"), 0, 5, "fresh"), 0);
	ck_assert_msg(tier_store_commit(w.s, NULL, 0, &gen) == 0, "commit: %s", tier_last_error());
	ck_assert_uint_eq(gen, 2);
	after = ts_wall_ns();
	ck_assert_int_eq(tier_store_committed(w.s, &ci), 0);

	/* a publish now, then the publisher's own: both show it */
	ck_assert_int_eq(tier_store_publish_stats(w.s), 0);
	ck_assert_int_eq(tier_live_read(l, live), 0);
	ck_assert_uint_eq(live->commit_generation, 2);
	ck_assert_uint_eq(live->commit_time_ns, ci.time_ns);
	ck_assert_msg(live->commit_time_ns >= before && live->commit_time_ns <= after,
		      "commit time %llu not within [%llu, %llu]", U64(live->commit_time_ns), U64(before),
		      U64(after));
	ck_assert_uint_le(ts_wall_ns() - live->commit_time_ns, 5000000000ull);
	ck_assert_uint_eq(live->commits_kept, 2);
	ck_assert_uint_eq(live->commit_oldest, 1);
	ck_assert_int_eq(run_check("commit --pid %ld --generation 2 --kept 2 --oldest 1 --time-ns %llu",
				   (long)getpid(), U64(ci.time_ns)), 0);
	tier_live_close(l);
	world_close(&w);
	free(live);
}
END_TEST

/* Segments tier-stat must refuse with a clear message: another layout
 * version, another user's, a PID with no store, a bad PID. */
START_TEST(refusals)
{
	struct world w;

	world_open(&w, "refuse", 1 * MiB, false);
	ck_assert_int_eq(run_check("refuse --pid %ld --path '%s'", (long)getpid(),
				   tier_store_stats_path(w.s)), 0);
	world_close(&w);
}
END_TEST

/*
 * Payloads of another layout are refused with -EPROTO and a detail that
 * names theirs and this build's: a payload size no number of paths gives
 * (at open), another version or size in the payload itself (at read).
 * Before the first publish a segment reads as zeros.
 */
START_TEST(payload_refusals)
{
	struct tier_live_stats *st = calloc(1, sizeof(*st)), *back = calloc(1, sizeof(*back));
	size_t fixed = offsetof(struct tier_live_stats, path);
	struct statseg *seg;
	struct tier_live *l;
	char want[2][96];

	ck_assert_ptr_nonnull(st);
	ck_assert_ptr_nonnull(back);
	ck_assert_int_eq(statseg_create("odd", "", fixed + 8, &seg), 0);
	ck_assert_int_eq(tier_live_open(statseg_path(seg), &l), -EPROTO);
	snprintf(want[0], sizeof(want[0]), "a payload of %zu bytes", fixed + 8);
	snprintf(want[1], sizeof(want[1]), "%zu bytes and %zu per NVMe path", fixed,
		 sizeof(struct tier_live_path));
	for (int i = 0; i < 2; i++)
		ck_assert_msg(strstr(tier_last_error(), want[i]), "'%s' not in '%s'", want[i],
			      tier_last_error());
	statseg_close(seg);

	ck_assert_int_eq(statseg_create("other", "", fixed + sizeof(struct tier_live_path), &seg), 0);
	ck_assert_int_eq(tier_live_open(statseg_path(seg), &l), 0);
	ck_assert_int_eq(tier_live_read(l, back), 0);
	ck_assert_uint_eq(back->publishes, 0);
	st->version = TIER_LIVE_VERSION;
	st->size = sizeof(*st);
	st->publishes = 1;
	st->npaths = 1;
	statseg_publish(seg, st);
	ck_assert_int_eq(tier_live_read(l, back), 0);
	ck_assert_uint_eq(back->publishes, 1);
	ck_assert_uint_eq(back->npaths, 1);

	for (int k = 0; k < 2; k++) {
		if (k == 0) {
			st->version = TIER_LIVE_VERSION + 1;
			snprintf(want[0], sizeof(want[0]), "layout version %u and size %zu",
				 TIER_LIVE_VERSION + 1, sizeof(*st));
		} else {
			st->version = TIER_LIVE_VERSION;
			st->size = (uint32_t)sizeof(*st) + 8;
			snprintf(want[0], sizeof(want[0]), "layout version %u and size %zu",
				 TIER_LIVE_VERSION, sizeof(*st) + 8);
		}
		snprintf(want[1], sizeof(want[1]), "reads version %u and size %zu",
			 TIER_LIVE_VERSION, sizeof(*st));
		statseg_publish(seg, st);
		ck_assert_int_eq(tier_live_read(l, back), -EPROTO);
		for (int i = 0; i < 2; i++)
			ck_assert_msg(strstr(tier_last_error(), want[i]), "'%s' not in '%s'",
				      want[i], tier_last_error());
		ck_assert_uint_eq(back->publishes, 0); /* nothing of it kept */
	}
	tier_live_close(l);
	statseg_close(seg);
	free(st);
	free(back);
}
END_TEST

/* Reads obj1..obj7 (the DRAM tier holds 4): obj0 goes back to NVMe only. */
static void push_out_obj0(struct tier_store *s, char *buf)
{
	for (unsigned i = 1; i < 8; i++) {
		char name[32];

		snprintf(name, sizeof(name), "obj%u", i);
		ck_assert_int_eq(tier_obj_read(s, tier_obj_find(s, name), 0, 256 * KiB, buf), 0);
	}
}

/*
 * Device errors and checksum failures land in the path's counters: a bad
 * checksum read again and a device error retried (the read works) count
 * once each; an error that persists counts every try of every stripe unit
 * (obj0's 4) and fails the read.
 */
START_TEST(path_error_counters)
{
	struct world w;
	struct tier_live *l;
	struct tier_live_stats *a = calloc(1, sizeof(*a));
	struct tier_obj *o;
	char *buf = malloc(256 * KiB);
	int rc;

	NEED_FAULTS();
	ck_assert_ptr_nonnull(a);
	ck_assert_ptr_nonnull(buf);
	world_open(&w, "errors", 1 * MiB, true);
	do_work(w.s, 8, 256 * KiB); /* obj0 is no longer in DRAM */
	o = tier_obj_find(w.s, "obj0");
	ck_assert_ptr_nonnull(o);

	ck_assert_int_eq(ts_fault_arm(TIER_FAULT_NVME_BITFLIP, 1, 1, -EIO), 0); /* the errno is not used */
	rc = tier_obj_read(w.s, o, 0, 256 * KiB, buf);
	ck_assert_msg(rc == 0, "a flipped bit, read again: %d: %s", rc, tier_last_error());
	ck_assert_uint_eq((unsigned char)buf[0], 1);
	ts_fault_reset_all();
	ck_assert_int_eq(tier_store_publish_stats(w.s), 0);
	ck_assert_int_eq(tier_live_open(tier_store_stats_path(w.s), &l), 0);
	ck_assert_int_eq(tier_live_read(l, a), 0);
	ck_assert_uint_eq(a->path[0].csum_errors, 1);
	ck_assert_uint_eq(a->path[0].errors, 0);

	push_out_obj0(w.s, buf);
	ck_assert_int_eq(ts_fault_arm(TIER_FAULT_NVME_IO_ERR, 1, 1, -EIO), 0);
	rc = tier_obj_read(w.s, o, 0, 256 * KiB, buf);
	ck_assert_msg(rc == 0, "a device read retried: %d: %s", rc, tier_last_error());
	ts_fault_reset_all();
	ck_assert_int_eq(tier_store_publish_stats(w.s), 0);
	ck_assert_int_eq(tier_live_read(l, a), 0);
	ck_assert_uint_eq(a->path[0].errors, 1);
	ck_assert_uint_eq(a->path[0].csum_errors, 1);

	push_out_obj0(w.s, buf);
	ck_assert_int_eq(ts_fault_arm(TIER_FAULT_NVME_IO_ERR, 1, TIER_FAULT_PERSISTENT, -EIO), 0);
	rc = tier_obj_read(w.s, o, 0, 256 * KiB, buf);
	ck_assert_msg(rc == -EIO, "a device read that keeps failing: %d", rc);
	ts_fault_reset_all();
	ck_assert_int_eq(tier_store_publish_stats(w.s), 0);
	ck_assert_int_eq(tier_live_read(l, a), 0);
	ck_assert_uint_eq(a->path[0].errors, 1 + 4 * (TIER_NVME_IO_RETRIES + 1));
	ck_assert_uint_eq(a->path[0].csum_errors, 1);
	ck_assert_uint_ge(a->level[TIER_DRAM].errors, 1);

	/* and a good read afterwards */
	ck_assert_int_eq(tier_obj_read(w.s, o, 0, 256 * KiB, buf), 0);
	ck_assert_uint_eq((unsigned char)buf[0], 1);
	tier_live_close(l);
	world_close(&w);
	free(buf);
	free(a);
}
END_TEST

/* ============================================================ snapshots */

struct churn {
	struct tier_store *s;
	_Atomic bool stop;
	_Atomic uint64_t publishes;
};

static void *churn_io(void *arg)
{
	struct churn *c = arg;
	char *buf = malloc(64 * KiB);
	struct tier_obj *objs[24];

	ck_assert_ptr_nonnull(buf);
	for (int i = 0; i < 24; i++) {
		char name[16];

		snprintf(name, sizeof(name), "c%d", i);
		ck_assert_int_eq(tier_obj_create(c->s, name, 64 * KiB, &objs[i]), 0);
	}
	for (unsigned k = 0; !atomic_load(&c->stop); k++) {
		memset(buf, (int)k, 64 * KiB);
		ck_assert_int_eq(tier_obj_write(c->s, objs[k % 24], 0, 64 * KiB, buf), 0);
		ck_assert_int_eq(tier_obj_read(c->s, objs[(k * 7) % 24], 0, 64 * KiB, buf), 0);
	}
	free(buf);
	return NULL;
}

static void *churn_publish(void *arg)
{
	struct churn *c = arg;

	while (!atomic_load(&c->stop)) {
		ck_assert_int_eq(tier_store_publish_stats(c->s), 0);
		atomic_fetch_add(&c->publishes, 1);
	}
	return NULL;
}

/*
 * A reader never sees a torn snapshot: while I/O runs and two publishers
 * (the store's own thread every 10 ms, and this test's loop) rewrite the
 * segment, every snapshot read is internally consistent: the latency
 * count equals its histogram's total (the first words and the last of the
 * payload), the open time is the same in all, and the publish count never
 * goes back.
 */
START_TEST(no_torn_snapshot)
{
	struct world w;
	struct churn c = { 0 };
	pthread_t io, pub;
	struct tier_live *l;
	struct tier_live_stats *a = calloc(1, sizeof(*a));
	uint64_t open_ns = 0, last_pub = 0, reads = 0, again = 0, moved = 0, last_count = 0;

	ck_assert_ptr_nonnull(a);
	ck_assert_int_eq(setenv("TIER_STATS_INTERVAL", "10", 1), 0);
	ts_options_reload();
	world_open(&w, "churn", 512 * KiB, false);
	c.s = w.s;
	ck_assert_int_eq(tier_live_open(tier_store_stats_path(w.s), &l), 0);
	ck_assert_int_eq(pthread_create(&io, NULL, churn_io, &c), 0);
	ck_assert_int_eq(pthread_create(&pub, NULL, churn_publish, &c), 0);
	while (reads < 3000 || moved < 20) {
		uint64_t sum = 0;
		int rc = tier_live_read(l, a);

		if (rc == -EAGAIN) {
			again++;
			ck_assert_uint_lt(again, 3000);
			continue;
		}
		ck_assert_int_eq(rc, 0);
		reads++;
		if (!a->publishes)
			continue;
		for (unsigned b = 0; b < TIER_LAT_BUCKETS; b++)
			sum += a->path[0].lat_hist[b];
		ck_assert_msg(sum == a->path[0].lat_count,
			      "torn: latency count %llu, histogram total %llu (publish %llu)",
			      U64(a->path[0].lat_count), U64(sum), U64(a->publishes));
		if (!open_ns)
			open_ns = a->mono_ns - a->uptime_ns;
		ck_assert_msg(a->mono_ns - a->uptime_ns == open_ns, "torn: open time moved");
		ck_assert_uint_ge(a->publishes, last_pub);
		last_pub = a->publishes;
		if (a->path[0].lat_count != last_count)
			moved++;
		last_count = a->path[0].lat_count;
		ck_assert_uint_lt(reads, 10000000);
	}
	atomic_store(&c.stop, true);
	pthread_join(io, NULL);
	pthread_join(pub, NULL);
	ck_assert_uint_gt(atomic_load(&c.publishes), 0);
	tier_live_close(l);
	world_close(&w);
	free(a);
}
END_TEST

static Suite *live_suite(void)
{
	Suite *s = suite_create("live");
	TCase *tc = tcase_create("histogram");

	tcase_add_loop_test(tc, lat_bucket_table, 0, (int)ARRAY_SIZE(lat_cases));
	tcase_add_test(tc, lat_bucket_bounds);
	tcase_add_test(tc, lat_quantiles);
	suite_add_tcase(s, tc);

	tc = tcase_create("store");
	tcase_set_timeout(tc, 120);
	tcase_add_unchecked_fixture(tc, t_case_setup, t_case_teardown);
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_test(tc, segment_file);
	tcase_add_test(tc, segment_rank);
	tcase_add_test(tc, stats_off);
	tcase_add_test(tc, segment_no_dir);
	tcase_add_loop_test(tc, stats_dir_full, 0, (int)ARRAY_SIZE(full_cases));
	tcase_add_test(tc, tier_stat_matches_store);
	tcase_add_test(tc, commit_published);
	tcase_add_test(tc, stale_segment);
	tcase_add_test(tc, refusals);
	tcase_add_test(tc, payload_refusals);
	tcase_add_test(tc, no_torn_snapshot);
	suite_add_tcase(s, tc);

	tc = t_tcase_faults("faults");
	tcase_set_timeout(tc, 120);
	tcase_add_unchecked_fixture(tc, t_case_setup, t_case_teardown);
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_test(tc, segment_create_fails);
	tcase_add_test(tc, path_error_counters);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
#if !TIER_STATS_BUILD
	fprintf(stderr, "a build without stats (-Dstats=false): nothing to test\n");
	return T_EXIT_SKIP;
#endif
	return t_run_suite(live_suite());
}
