/*
 * bench_cache.c - `tier-bench cache`: a cyclic schedule of N objects
 * through a DRAM tier of the given size over NVMe, each visit reading and
 * dirtying its object, under LRU and Belady, reporting NVMe bytes per
 * cycle, the DRAM hit rate and the time (first cycle, steady state), then
 * verifying every byte.
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"

/*
 * Object i at version v holds a splitmix64 stream: word w is
 * mix(key(i, v) + (w + 1) * golden), in host byte order, the last partial
 * word truncated.  Cheap enough to fill and check at memory speed, and no
 * two (object, version) pairs share a stream in practice.
 */
#define CACHE_GOLDEN 0x9e3779b97f4a7c15ull
#define CACHE_NO_DIFF UINT64_MAX

static uint64_t splitmix64(uint64_t x)
{
	x += CACHE_GOLDEN;
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
	x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
	return x ^ (x >> 31);
}

static uint64_t pattern_key(uint64_t object, uint64_t version)
{
	return splitmix64(splitmix64(object) ^ version);
}

static uint64_t pattern_word(uint64_t key, uint64_t w)
{
	return splitmix64(key + w * CACHE_GOLDEN);
}

/* Writes the whole object's pattern into @p (@size bytes). */
static void pattern_fill(unsigned char *p, uint64_t size, uint64_t key)
{
	uint64_t nw = size / 8, v;

	for (uint64_t w = 0; w < nw; w++) {
		v = pattern_word(key, w);
		memcpy(p + 8 * w, &v, 8);
	}
	v = pattern_word(key, nw);
	memcpy(p + 8 * nw, &v, size % 8);
}

/*
 * Compares @p, which holds bytes [off, off + len) of an object, with the
 * pattern.  Returns the object offset of the first byte that differs, or
 * CACHE_NO_DIFF.
 */
static uint64_t pattern_diff(const unsigned char *p, uint64_t off, uint64_t len, uint64_t key)
{
	for (uint64_t end = off + len; off < end;) {
		uint64_t v = pattern_word(key, off / 8), got;
		unsigned skip = (unsigned)(off % 8);
		unsigned n = end - off < 8 - skip ? (unsigned)(end - off) : 8 - skip;

		if (n == 8) {
			memcpy(&got, p, 8);
			if (got == v) {
				p += 8;
				off += 8;
				continue;
			}
		}
		for (unsigned k = 0; k < n; k++)
			if (p[k] != ((const unsigned char *)&v)[skip + k])
				return off + k;
		p += n;
		off += n;
	}
	return CACHE_NO_DIFF;
}

/*
 * The cheap check of a whole object in memory: the first, a middle and the
 * last word of each 4 KiB page.  Returns as pattern_diff().
 */
static uint64_t pattern_spot_check(const unsigned char *p, uint64_t size, uint64_t key)
{
	for (uint64_t page = 0; page < size; page += 4096) {
		uint64_t end = size - page < 4096 ? size : page + 4096;
		uint64_t spots[3] = {
			page,
			page + ((end - page) / 2 & ~(uint64_t)7),
			end - page >= 8 ? end - 8 : page,
		};

		for (int k = 0; k < 3; k++) {
			uint64_t len = end - spots[k] < 8 ? end - spots[k] : 8;
			uint64_t d = pattern_diff(p + spots[k], spots[k], len, key);

			if (d != CACHE_NO_DIFF)
				return d;
		}
	}
	return CACHE_NO_DIFF;
}

struct cache_opts {
	uint64_t objects, object_size, dram, cycles;
	uint64_t prefetch; /* objects ahead to tier_obj_prefetch during the cycles */
	size_t first, npol; /* the policies run: first .. first + npol - 1 of LRU, Belady */
	const char *manifest;
	bool json;
};

/* Cumulative counters at one moment. */
struct cache_sample {
	uint64_t nvme_read, nvme_written, hits, misses, ns;
};

/* Figures of a span of cycles, per cycle. */
struct cache_figures {
	double nvme_read, nvme_written, hit_rate, secs;
};

struct cache_result {
	enum tier_policy policy;
	uint32_t npaths;
	struct cache_figures first, steady; /* cycle 1; cycles 2..K averaged */
};

static const char *policy_name(enum tier_policy p)
{
	return p == TIER_POLICY_LRU ? "lru" : "belady";
}

static void cache_fail(const char *what)
{
	fprintf(stderr, "tier-bench cache: %s: %s\n", what, tier_last_error());
}

static void cache_take_sample(struct tier_store *s, struct cache_sample *out)
{
	struct tier_nvme_stats ns;
	struct tier_store_stats ss;

	tier_nvme_get_stats(tier_store_nvme(s), &ns);
	tier_store_get_stats(s, &ss);
	*out = (struct cache_sample){
		.nvme_read = ns.bytes_read,
		.nvme_written = ns.bytes_written,
		.hits = ss.level[TIER_DRAM].hits,
		.misses = ss.level[TIER_DRAM].misses,
		.ns = now_ns(),
	};
}

static struct cache_figures cache_figures(const struct cache_sample *a,
					  const struct cache_sample *b, uint64_t cycles)
{
	uint64_t hits = b->hits - a->hits, acquires = hits + (b->misses - a->misses);

	return (struct cache_figures){
		.nvme_read = (double)(b->nvme_read - a->nvme_read) / (double)cycles,
		.nvme_written = (double)(b->nvme_written - a->nvme_written) / (double)cycles,
		.hit_rate = acquires ? (double)hits / (double)acquires : 0.0,
		.secs = (double)(b->ns - a->ns) * 1e-9 / (double)cycles,
	};
}

/*
 * Brings object i up to DRAM for writing, checks that it holds @version
 * (unless @discard: the initial population), writes version + 1 (version 0
 * when discarding) and releases it dirty.  Returns 0, or 1 after a message.
 */
static int cache_visit(struct tier_store *s, struct tier_obj *o, uint64_t i, uint64_t version,
		       bool discard)
{
	unsigned mode = discard ? TIER_ACQUIRE_WRITE | TIER_ACQUIRE_DISCARD : TIER_ACQUIRE_READ | TIER_ACQUIRE_WRITE;
	uint64_t size = tier_obj_size(o), next = discard ? 0 : version + 1, d;
	char what[160];
	void *p;

	if (tier_obj_acquire(s, o, TIER_DRAM, mode, &p)) {
		snprintf(what, sizeof(what), "acquire '%s'", tier_obj_name(o));
		cache_fail(what);
		return 1;
	}
	if (!discard) {
		d = pattern_spot_check(p, size, pattern_key(i, version));
		if (d != CACHE_NO_DIFF) {
			fprintf(stderr, "tier-bench cache: object '%s' differs from version %" PRIu64
				" at byte %" PRIu64 " (acquired in DRAM)\n", tier_obj_name(o), version, d);
			tier_obj_release(s, o, TIER_DRAM, false);
			return 1;
		}
	}
	pattern_fill(p, size, pattern_key(i, next));
	if (tier_obj_release(s, o, TIER_DRAM, true)) {
		snprintf(what, sizeof(what), "release '%s'", tier_obj_name(o));
		cache_fail(what);
		return 1;
	}
	return 0;
}

/*
 * Reads every object back through tier_obj_read, in chunks of @buf's
 * @buflen bytes (a multiple of 8), and checks every byte against @version.
 */
static int cache_verify_all(struct tier_store *s, struct tier_obj **objs, uint64_t n,
			    uint64_t version, unsigned char *buf, uint64_t buflen)
{
	char what[160];

	for (uint64_t i = 0; i < n; i++) {
		uint64_t size = tier_obj_size(objs[i]), key = pattern_key(i, version);

		for (uint64_t off = 0; off < size; off += buflen) {
			uint64_t len = size - off < buflen ? size - off : buflen, d;

			if (tier_obj_read(s, objs[i], off, len, buf)) {
				snprintf(what, sizeof(what), "read back '%s'", tier_obj_name(objs[i]));
				cache_fail(what);
				return 1;
			}
			d = pattern_diff(buf, off, len, key);
			if (d != CACHE_NO_DIFF) {
				fprintf(stderr, "tier-bench cache: object '%s' differs from version %" PRIu64
					" at byte %" PRIu64 " (read back after the flush)\n",
					tier_obj_name(objs[i]), version, d);
				return 1;
			}
		}
	}
	return 0;
}

/* One run of the schedule under @policy on a fresh store.  0, or 1 after a message. */
static int cache_run(const struct tier_manifest *m, const struct cache_opts *o,
		     enum tier_policy policy, struct cache_result *res)
{
	struct tier_store_params params;
	uint64_t buflen = o->object_size < (8u << 20) ? o->object_size : 8u << 20;
	struct tier_obj **objs = calloc(o->objects, sizeof(*objs));
	unsigned char *buf = malloc(buflen);
	struct cache_sample start, after_first = { 0 }, end;
	struct tier_nvme_stats ns;
	struct tier_store *s = NULL;
	char what[160];
	int ret = 1;

	tier_store_params_init(&params);
	params.dram_capacity = o->dram;
	params.hbm_backend = "none";
	params.policy = policy;
	params.flags = TIER_STORE_SCRATCH;
	if (!objs || !buf) {
		fprintf(stderr, "tier-bench cache: out of memory\n");
		goto out;
	}
	if (tier_store_open(m, &params, &s)) {
		cache_fail("open the store");
		goto out;
	}
	if (!tier_store_nvme(s)) {
		fprintf(stderr, "tier-bench cache: the manifest '%s' has no NVMe paths\n",
			tier_manifest_source(m));
		goto out;
	}
	for (uint64_t i = 0; i < o->objects; i++) {
		snprintf(what, sizeof(what), "cache.%" PRIu64, i);
		if (tier_obj_create(s, what, o->object_size, &objs[i])) {
			snprintf(what, sizeof(what), "create 'cache.%" PRIu64 "'", i);
			cache_fail(what);
			goto out;
		}
	}
	if (tier_store_set_schedule(s, objs, o->objects)) {
		cache_fail("set the schedule");
		goto out;
	}
	for (uint64_t i = 0; i < o->objects; i++)
		if (cache_visit(s, objs[i], i, 0, true))
			goto out;
	if (tier_store_flush(s)) {
		cache_fail("flush after populating");
		goto out;
	}
	cache_take_sample(s, &start);
	for (uint64_t c = 0; c < o->cycles; c++) {
		for (uint64_t i = 0; i < o->objects; i++) {
			/* Keep the next objects moving up while this one is used. */
			for (uint64_t d = 1; d <= o->prefetch && d < o->objects; d++) {
				if (tier_obj_prefetch(s, objs[(i + d) % o->objects], TIER_DRAM)) {
					cache_fail("prefetch");
					goto out;
				}
			}
			if (cache_visit(s, objs[i], i, c, false))
				goto out;
		}
		if (c == 0)
			cache_take_sample(s, &after_first);
	}
	cache_take_sample(s, &end);
	if (tier_store_flush(s)) {
		cache_fail("flush after the cycles");
		goto out;
	}
	if (cache_verify_all(s, objs, o->objects, o->cycles, buf, buflen))
		goto out;
	if (tier_store_validate(s)) {
		cache_fail("validate the store");
		goto out;
	}
	tier_nvme_get_stats(tier_store_nvme(s), &ns);
	res->policy = policy;
	res->npaths = ns.npaths;
	res->first = cache_figures(&start, &after_first, 1);
	res->steady = cache_figures(&after_first, &end, o->cycles - 1);
	ret = 0;
out:
	if (s && tier_store_close(s) && ret == 0) {
		cache_fail("close the store");
		ret = 1;
	}
	free(buf);
	free(objs);
	return ret;
}

static void cache_print_json(const struct cache_opts *o, const struct cache_result *r)
{
	printf("{\"policy\": \"%s\", \"objects\": %" PRIu64 ", \"object_size\": %" PRIu64
	       ", \"dram_bytes\": %" PRIu64 ", \"dram_objects\": %" PRIu64 ", \"cycles\": %" PRIu64
	       ", \"prefetch\": %" PRIu64 ", \"paths\": %u, \"nvme_read_bytes_per_cycle\": %.1f, \"nvme_write_bytes_per_cycle\": %.1f"
	       ", \"hit_rate\": %.6f, \"cycle_s\": %.6f, \"cycle1_nvme_read_bytes\": %.0f"
	       ", \"cycle1_nvme_write_bytes\": %.0f, \"cycle1_hit_rate\": %.6f, \"cycle1_s\": %.6f"
	       ", \"verified\": true}",
	       policy_name(r->policy), o->objects, o->object_size, o->dram, o->dram / o->object_size,
	       o->cycles, o->prefetch, r->npaths, r->steady.nvme_read, r->steady.nvme_written, r->steady.hit_rate,
	       r->steady.secs, r->first.nvme_read, r->first.nvme_written, r->first.hit_rate,
	       r->first.secs);
}

static void cache_print_row(const struct cache_opts *o, const char *policy, const char *span,
			    const struct cache_figures *f)
{
	double mib = 1.0 / (1u << 20), per_obj = 1.0 / (double)o->object_size;

	printf("  %-7s %-8s %10.1f MiB %7.1f obj %10.1f MiB %7.1f obj %8.1f%% %10.4f s\n", policy,
	       span, f->nvme_read * mib, f->nvme_read * per_obj, f->nvme_written * mib,
	       f->nvme_written * per_obj, f->hit_rate * 100.0, f->secs);
}

static void cache_usage(FILE *f)
{
	fprintf(f, "usage: tier-bench cache [--manifest FILE] [--objects N] [--object-size BYTES]\n"
		   "                        [--dram BYTES] [--cycles K] [--policy belady|lru|both]\n"
		   "                        [--prefetch D] [--json]\n"
		   "  --objects      objects in the cyclic schedule (default 64)\n"
		   "  --object-size  bytes per object (default 4MiB)\n"
		   "  --dram         DRAM cache capacity (default 32 objects' worth)\n"
		   "  --cycles       passes over the schedule, at least 2 (default 8)\n"
		   "  --policy       eviction policy; both runs LRU then Belady (default both)\n"
		   "  --prefetch     prefetch the next D objects of the schedule before each\n"
		   "                 visit, so fills and write-backs overlap (default 0)\n");
}

/* A bad command line: says what, prints the usage. */
static const struct bench_cmd cache_cmd = { "tier-bench cache", cache_usage, cache_usage };

/* --manifest, --policy and --prefetch. */
static int cache_option(void *ctx, int c, const char *arg)
{
	struct cache_opts *o = ctx;

	switch (c) {
	case 'm':
		o->manifest = arg;
		return 0;
	case 'p':
		if (strcmp(arg, "lru") == 0 || strcmp(arg, "belady") == 0) {
			o->first = strcmp(arg, "belady") == 0;
			o->npol = 1;
		} else if (strcmp(arg, "both") == 0) {
			o->first = 0;
			o->npol = 2;
		} else {
			return bench_bad_usage(&cache_cmd, "bad --policy '%s' (belady, lru or both)", arg);
		}
		return 0;
	default: /* 'f' */
		o->prefetch = 0;
		if (strcmp(arg, "0") && (parse_bytes(arg, &o->prefetch) || o->prefetch > 1024))
			return bench_bad_usage(&cache_cmd, "bad --prefetch '%s' (0 to 1024)", arg);
		return 0;
	}
}

/* The report of the runs @res (of o->first .. o->first + o->npol - 1), as
 * text or one JSON object. */
static void cache_report(const struct cache_opts *o, const struct cache_result *res)
{
	/* Belady's steady state misses about N - C + 1 objects a cycle, LRU all N. */
	uint64_t c_objs = o->dram / o->object_size;
	double bound = ((double)o->objects - (double)c_objs + 2.0) / (double)o->objects;
	bool have_ratio = o->npol == 2 && res[0].steady.nvme_read > 0;
	double ratio = have_ratio ? res[1].steady.nvme_read / res[0].steady.nvme_read : 0.0;
	char steady[32];

	if (o->json && o->npol == 2) {
		printf("{\"lru\": ");
		cache_print_json(o, &res[0]);
		printf(", \"belady\": ");
		cache_print_json(o, &res[1]);
		if (have_ratio)
			printf(", \"read_ratio\": %.6f, \"bound\": %.6f, \"within_bound\": %s}\n",
			       ratio, bound, ratio <= bound ? "true" : "false");
		else
			printf(", \"read_ratio\": null, \"bound\": %.6f, \"within_bound\": null}\n",
			       bound);
		return;
	}
	if (o->json) {
		cache_print_json(o, &res[o->first]);
		printf("\n");
		return;
	}
	snprintf(steady, sizeof(steady), "2-%" PRIu64, o->cycles);
	printf("tier-bench cache: %" PRIu64 " objects of %" PRIu64 " bytes, DRAM %" PRIu64
	       " bytes (%" PRIu64 " objects), %" PRIu64 " cycles, %u NVMe path(s)\n",
	       o->objects, o->object_size, o->dram, c_objs, o->cycles, res[o->first].npaths);
	printf("  %-7s %-8s %26s %26s %9s %12s\n", "policy", "cycles", "NVMe read/cycle",
	       "NVMe write/cycle", "DRAM hits", "time/cycle");
	for (size_t k = o->first; k < o->first + o->npol; k++) {
		cache_print_row(o, policy_name(res[k].policy), "1", &res[k].first);
		cache_print_row(o, policy_name(res[k].policy), steady, &res[k].steady);
	}
	if (have_ratio)
		printf("  belady/lru NVMe reads per cycle (cycles %s): %.4f; bound (N-C+2)/N = %.4f: %s\n",
		       steady, ratio, bound, ratio <= bound ? "within" : "ABOVE THE BOUND");
	else if (o->npol == 2)
		printf("  LRU read nothing from NVMe in cycles %s (all objects fit): no ratio\n",
		       steady);
	printf("  every byte of every object verified\n");
}

int cmd_cache(int argc, char **argv)
{
	static const enum tier_policy policies[2] = { TIER_POLICY_LRU, TIER_POLICY_BELADY };
	struct cache_opts o = { .objects = 64, .object_size = 4ull << 20, .cycles = 8, .npol = 2 };
	const struct bench_arg args[] = {
		BENCH_OTHER('m', "manifest", required_argument),
		BENCH_NUM('n', "objects", &o.objects, 1, 1u << 20, "(1 to 1048576)"),
		BENCH_NUM('s', "object-size", &o.object_size, 1, UINT64_MAX, NULL),
		BENCH_NUM('d', "dram", &o.dram, 1, UINT64_MAX, NULL),
		BENCH_NUM('k', "cycles", &o.cycles, 2, 1u << 20, "(2 to 1048576)"),
		BENCH_OTHER('p', "policy", required_argument),
		BENCH_OTHER('f', "prefetch", required_argument),
		BENCH_FLAG('j', "json", &o.json),
	};
	struct cache_result res[2] = { 0 };
	struct tier_manifest *m = NULL;
	int ret = bench_options(&cache_cmd, argc, argv, args, sizeof(args) / sizeof(args[0]),
				cache_option, &o);

	if (ret)
		return ret == BENCH_HELP ? 0 : ret;
	if (!o.dram)
		o.dram = o.object_size > UINT64_MAX / 32 ? UINT64_MAX : 32 * o.object_size;
	if (o.dram < o.object_size)
		return bench_bad_usage(&cache_cmd, "--dram %" PRIu64 " holds no object of %" PRIu64
				       " bytes", o.dram, o.object_size);
	if (load_manifest(o.manifest, &m))
		return EXIT_USAGE;
	ret = 1;
	for (size_t k = o.first; k < o.first + o.npol; k++)
		if (cache_run(m, &o, policies[k], &res[k]))
			goto out;
	cache_report(&o, res);
	ret = 0;
out:
	tier_manifest_free(m);
	return ret;
}
