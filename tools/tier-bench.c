/*
 * tier-bench - benchmarks of tierstore's parts, run as programs (never as
 * timed tests).  Each prints a human table, or one JSON object with --json.
 *
 *   tier-bench io [--manifest FILE] [--size BYTES] [--bs BYTES] [--qd N]
 *                 [--mix F] [--verify] [--json]
 *       Writes then reads SIZE bytes of one object through the NVMe tier in
 *       requests of BS bytes with QD in flight, and reports each direction's
 *       bandwidth in GB/s (1e9 bytes per second).  With --mix, a third pass
 *       reads the share F of the object's requests (spread evenly) while
 *       writing the others, both moving through the object together and in
 *       flight together in that proportion (an optimizer step's traffic).
 *       Checksums are as the manifest says (on by default).  Backing files the run creates are
 *       removed at the end.
 *
 *   tier-bench cache [--manifest FILE] [--objects N] [--object-size BYTES]
 *                    [--dram BYTES] [--cycles K] [--policy belady|lru|both]
 *                    [--json]
 *       Runs a cyclic schedule over N objects through a DRAM cache of the
 *       given size over the NVMe tier, K times, writing every object on each
 *       visit, and reports per policy the NVMe bytes read and written per
 *       cycle, the DRAM hit rate and the time per cycle (first cycle, and the
 *       steady state of cycles 2..K).  Every byte is verified at the end.
 *       With both policies, also the ratio of Belady's NVMe reads to LRU's
 *       against the bound (N-C+2)/N, C the objects DRAM holds.
 *
 *   tier-bench adam [--numel N] [--threads T] [--moments fp32|bf16]
 *                   [--grads fp32|bf16|fp16] [--copy-out none|bf16|fp16|fp32]
 *                   [--runs R] [--json]
 *       Times R runs of tier_adam_step over N elements (AdamW) on a pool of T
 *       threads, alternating with R runs of tier_adam_roofline (the same
 *       bytes with trivial arithmetic) on the same arrays, and reports the
 *       bytes per element, the median step time, Gelem/s, GB/s, the
 *       roofline's GB/s and roofline_frac = roofline time / step time.
 *       Between runs, untimed, exp_avg_sq is made non-negative again (the
 *       roofline adds the gradient to it).
 *
 *   tier-bench step [OPTIONS]
 *       The main job: optimizer steps of a synthetic model through the
 *       store, against the bound measured in the same run (bench_step.c).
 *
 * What the subcommands share is in bench_common.c (bench.h).
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"

static void io_usage(FILE *f)
{
	fprintf(f, "usage: tier-bench io [--manifest FILE] [--size BYTES] [--bs BYTES] [--qd N] [--mix F]\n"
		   "                     [--verify] [--json]\n"
		   "  --size  bytes written then read (default 1GiB)\n"
		   "  --bs    bytes per request (default 1MiB)\n"
		   "  --qd    requests in flight (default 32)\n"
		   "  --mix   then a mixed pass: this share (0 < F < 1) of the requests read while the\n"
		   "          others write, spread evenly, reads and writes in flight together\n"
		   "  --verify  check every byte read back (costs CPU; off for timing)\n");
}

static int cmd_io(int argc, char **argv)
{
	static const struct option longopts[] = {
		{ "manifest", required_argument, NULL, 'm' },
		{ "size", required_argument, NULL, 's' },
		{ "bs", required_argument, NULL, 'b' },
		{ "qd", required_argument, NULL, 'q' },
		{ "mix", required_argument, NULL, 'x' },
		{ "verify", no_argument, NULL, 'v' },
		{ "json", no_argument, NULL, 'j' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	const char *manifest = NULL;
	uint64_t size = 1ull << 30, bs = 1ull << 20, qd = 32;
	bool json = false, verify = false;
	double mix = 0;
	struct tier_manifest *m = NULL;
	struct bench_io_result r = { 0 };
	struct tier_nvme_stats st;
	double wt, rtime;
	int c, ret;

	while ((c = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
		switch (c) {
		case 'm':
			manifest = optarg;
			break;
		case 's':
			if (parse_bytes(optarg, &size)) {
				fprintf(stderr, "tier-bench io: bad --size '%s'\n", optarg);
				return EXIT_USAGE;
			}
			break;
		case 'b':
			if (parse_bytes(optarg, &bs) || bs > (1ull << 30)) {
				fprintf(stderr, "tier-bench io: bad --bs '%s' (1 B to 1 GiB)\n", optarg);
				return EXIT_USAGE;
			}
			break;
		case 'q':
			if (parse_bytes(optarg, &qd) || qd > 4096) {
				fprintf(stderr, "tier-bench io: bad --qd '%s' (1 to 4096)\n", optarg);
				return EXIT_USAGE;
			}
			break;
		case 'x': {
			char *end;

			errno = 0;
			mix = strtod(optarg, &end);
			if (errno || end == optarg || *end || !(mix > 0 && mix < 1)) {
				fprintf(stderr, "tier-bench io: bad --mix '%s' (a share of reads,"
					" above 0 and below 1)\n", optarg);
				return EXIT_USAGE;
			}
			break;
		}
		case 'v':
			verify = true;
			break;
		case 'j':
			json = true;
			break;
		case 'h':
			io_usage(stdout);
			return 0;
		default:
			io_usage(stderr);
			return EXIT_USAGE;
		}
	}
	if (optind < argc) {
		fprintf(stderr, "tier-bench io: unexpected argument '%s'\n", argv[optind]);
		return EXIT_USAGE;
	}
	if (mix > 0 && size < 2 * bs) {
		fprintf(stderr, "tier-bench io: --mix needs --size of at least two requests"
			" (2 x --bs)\n");
		return EXIT_USAGE;
	}
	if (load_manifest(manifest, &m))
		return EXIT_USAGE;
	ret = bench_io(m, &(struct bench_io_opts){ .size = size, .bs = bs, .qd = qd,
						    .verify = verify, .mix_read = mix,
						    .who = "tier-bench io" }, &r);
	if (ret)
		goto out;
	wt = r.write_s;
	rtime = r.read_s;
	st = r.stats;
	if (json) {
		printf("{\"size\": %" PRIu64 ", \"bs\": %" PRIu64 ", \"qd\": %" PRIu64
		       ", \"paths\": %u, \"stripe_unit\": %u, \"write_s\": %.6f, \"read_s\": %.6f"
		       ", \"write_GBps\": %.4f, \"read_GBps\": %.4f, \"short_ios\": %" PRIu64
		       ", \"retries\": %" PRIu64 ", \"bounced\": %" PRIu64 ", \"device_bytes_written\": %" PRIu64
		       ", \"device_bytes_read\": %" PRIu64 ", \"verified\": %s",
		       size, bs, qd, st.npaths, st.stripe_unit, wt, rtime, (double)size / wt * 1e-9,
		       (double)size / rtime * 1e-9, st.short_ios, st.retries, st.bounced,
		       st.bytes_written, st.bytes_read, verify ? "true" : "false");
		if (mix > 0)
			printf(", \"mix_read_share\": %.4f, \"mixed_s\": %.6f, \"mixed_GBps\": %.4f",
			       (double)r.mixed_read_bytes / (double)size, r.mixed_s,
			       (double)size / r.mixed_s * 1e-9);
		printf("}\n");
	} else {
		printf("tier-bench io: %" PRIu64 " bytes, bs %" PRIu64 ", qd %" PRIu64
		       ", %u path(s), stripe unit %u\n", size, bs, qd, st.npaths, st.stripe_unit);
		printf("  write  %8.3f GB/s  (%.3f s)\n", (double)size / wt * 1e-9, wt);
		printf("  read   %8.3f GB/s  (%.3f s)%s\n", (double)size / rtime * 1e-9, rtime,
		       verify ? "  verified" : "");
		if (mix > 0)
			printf("  mixed  %8.3f GB/s  (%.3f s)  %.1f%% of the bytes read, the rest"
			       " written, together\n", (double)size / r.mixed_s * 1e-9, r.mixed_s,
			       100.0 * (double)r.mixed_read_bytes / (double)size);
	}
out:
	tier_manifest_free(m);
	return ret;
}

/* --------------------------------------------------------------- cache */

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
	struct tier_store_params params = { .size = sizeof(struct tier_store_params),
		.dram_capacity = o->dram,
		.hbm_backend = "none",
		.policy = policy,
		.flags = TIER_STORE_SCRATCH,
	};
	uint64_t buflen = o->object_size < (8u << 20) ? o->object_size : 8u << 20;
	struct tier_obj **objs = calloc(o->objects, sizeof(*objs));
	unsigned char *buf = malloc(buflen);
	struct cache_sample start, after_first = { 0 }, end;
	struct tier_nvme_stats ns;
	struct tier_store *s = NULL;
	char what[160];
	int ret = 1;

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

/* A bad command line: says what, prints the usage, returns EXIT_USAGE. */
__attribute__((format(printf, 1, 2))) static int cache_bad_usage(const char *fmt, ...)
{
	va_list ap;

	fprintf(stderr, "tier-bench cache: ");
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fprintf(stderr, "\n");
	cache_usage(stderr);
	return EXIT_USAGE;
}

static int cmd_cache(int argc, char **argv)
{
	static const struct option longopts[] = {
		{ "manifest", required_argument, NULL, 'm' },
		{ "objects", required_argument, NULL, 'n' },
		{ "object-size", required_argument, NULL, 's' },
		{ "dram", required_argument, NULL, 'd' },
		{ "cycles", required_argument, NULL, 'k' },
		{ "policy", required_argument, NULL, 'p' },
		{ "prefetch", required_argument, NULL, 'f' },
		{ "json", no_argument, NULL, 'j' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	struct cache_opts o = { .objects = 64, .object_size = 4ull << 20, .cycles = 8 };
	enum tier_policy policies[2] = { TIER_POLICY_LRU, TIER_POLICY_BELADY };
	struct cache_result res[2];
	const char *manifest = NULL;
	struct tier_manifest *m = NULL;
	size_t npol = 2, first = 0;
	bool json = false, have_ratio;
	double bound, ratio = 0.0;
	uint64_t c_objs;
	int c, ret = 1;

	while ((c = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
		switch (c) {
		case 'm':
			manifest = optarg;
			break;
		case 'n':
			if (parse_bytes(optarg, &o.objects) || o.objects > (1u << 20))
				return cache_bad_usage("bad --objects '%s' (1 to 1048576)", optarg);
			break;
		case 's':
			if (parse_bytes(optarg, &o.object_size))
				return cache_bad_usage("bad --object-size '%s'", optarg);
			break;
		case 'd':
			if (parse_bytes(optarg, &o.dram))
				return cache_bad_usage("bad --dram '%s'", optarg);
			break;
		case 'k':
			if (parse_bytes(optarg, &o.cycles) || o.cycles < 2 || o.cycles > (1u << 20))
				return cache_bad_usage("bad --cycles '%s' (2 to 1048576)", optarg);
			break;
		case 'p':
			if (strcmp(optarg, "lru") == 0) {
				first = 0;
				npol = 1;
			} else if (strcmp(optarg, "belady") == 0) {
				first = 1;
				npol = 1;
			} else if (strcmp(optarg, "both") == 0) {
				first = 0;
				npol = 2;
			} else {
				return cache_bad_usage("bad --policy '%s' (belady, lru or both)", optarg);
			}
			break;
		case 'f':
			o.prefetch = 0;
			if (strcmp(optarg, "0") && (parse_bytes(optarg, &o.prefetch) || o.prefetch > 1024))
				return cache_bad_usage("bad --prefetch '%s' (0 to 1024)", optarg);
			break;
		case 'j':
			json = true;
			break;
		case 'h':
			cache_usage(stdout);
			return 0;
		default:
			cache_usage(stderr);
			return EXIT_USAGE;
		}
	}
	if (optind < argc)
		return cache_bad_usage("unexpected argument '%s'", argv[optind]);
	if (!o.dram)
		o.dram = o.object_size > UINT64_MAX / 32 ? UINT64_MAX : 32 * o.object_size;
	if (o.dram < o.object_size)
		return cache_bad_usage("--dram %" PRIu64 " holds no object of %" PRIu64 " bytes",
				       o.dram, o.object_size);
	if (load_manifest(manifest, &m))
		return EXIT_USAGE;
	for (size_t k = first; k < first + npol; k++)
		if (cache_run(m, &o, policies[k], &res[k]))
			goto out;
	/* Belady's steady state misses about N - C + 1 objects a cycle, LRU all N. */
	c_objs = o.dram / o.object_size;
	bound = ((double)o.objects - (double)c_objs + 2.0) / (double)o.objects;
	have_ratio = npol == 2 && res[0].steady.nvme_read > 0;
	if (have_ratio)
		ratio = res[1].steady.nvme_read / res[0].steady.nvme_read;

	if (json) {
		if (npol == 2) {
			printf("{\"lru\": ");
			cache_print_json(&o, &res[0]);
			printf(", \"belady\": ");
			cache_print_json(&o, &res[1]);
			if (have_ratio)
				printf(", \"read_ratio\": %.6f, \"bound\": %.6f, \"within_bound\": %s}\n",
				       ratio, bound, ratio <= bound ? "true" : "false");
			else
				printf(", \"read_ratio\": null, \"bound\": %.6f, \"within_bound\": null}\n",
				       bound);
		} else {
			cache_print_json(&o, &res[first]);
			printf("\n");
		}
	} else {
		char steady[32];

		snprintf(steady, sizeof(steady), "2-%" PRIu64, o.cycles);
		printf("tier-bench cache: %" PRIu64 " objects of %" PRIu64 " bytes, DRAM %" PRIu64
		       " bytes (%" PRIu64 " objects), %" PRIu64 " cycles, %u NVMe path(s)\n",
		       o.objects, o.object_size, o.dram, c_objs, o.cycles, res[first].npaths);
		printf("  %-7s %-8s %26s %26s %9s %12s\n", "policy", "cycles", "NVMe read/cycle",
		       "NVMe write/cycle", "DRAM hits", "time/cycle");
		for (size_t k = first; k < first + npol; k++) {
			cache_print_row(&o, policy_name(res[k].policy), "1", &res[k].first);
			cache_print_row(&o, policy_name(res[k].policy), steady, &res[k].steady);
		}
		if (have_ratio)
			printf("  belady/lru NVMe reads per cycle (cycles %s): %.4f; bound (N-C+2)/N = %.4f: %s\n",
			       steady, ratio, bound, ratio <= bound ? "within" : "ABOVE THE BOUND");
		else if (npol == 2)
			printf("  LRU read nothing from NVMe in cycles %s (all objects fit): no ratio\n",
			       steady);
		printf("  every byte of every object verified\n");
	}
	ret = 0;
out:
	tier_manifest_free(m);
	return ret;
}

/* ---------------------------------------------------------------- adam */

struct adam_opts {
	uint64_t numel, threads, runs;
	enum tier_dtype moments, grads;
	int copy_out; /* -1: none, else an enum tier_dtype */
	bool json;
};

/*
 * The roofline adds the gradient to both moments, which leaves about half
 * of exp_avg_sq negative, and the step's square root of a negative number
 * is not the work of a real step (and may take another time).  So after
 * each roofline pass, untimed, exp_avg_sq gets its absolute value back.
 */
static void adam_fix_sq(void *v, size_t n, int dtype)
{
	if (dtype == TIER_FP32) {
		uint32_t *u = v;

		for (size_t i = 0; i < n; i++)
			u[i] &= 0x7fffffffu;
	} else {
		uint16_t *u = v;

		for (size_t i = 0; i < n; i++)
			u[i] &= 0x7fffu;
	}
}

/* Parameters that are not finite (the data must stay realistic). */
static size_t adam_nonfinite(const float *p, size_t n)
{
	size_t bad = 0;

	for (size_t i = 0; i < n; i++) {
		uint32_t u;

		memcpy(&u, &p[i], 4);
		bad += (u & 0x7f800000u) == 0x7f800000u;
	}
	return bad;
}

static void adam_usage(FILE *f)
{
	fprintf(f, "usage: tier-bench adam [--numel N] [--threads T] [--moments fp32|bf16]\n"
		   "                       [--grads fp32|bf16|fp16] [--copy-out none|bf16|fp16|fp32]\n"
		   "                       [--runs R] [--json]\n"
		   "  --numel     elements updated (default 64Mi = 67108864; K/M/G suffixes are binary)\n"
		   "  --threads   threads of the kernel pool, the caller included (default 2)\n"
		   "  --moments   storage of exp_avg and exp_avg_sq (default fp32)\n"
		   "  --grads     storage of the gradient (default fp32)\n"
		   "  --copy-out  the copy of the updated parameters written too (default none)\n"
		   "  --runs      timed runs of the step and of the roofline, alternating (default 7)\n"
		   "Times tier_adam_step (AdamW: lr 1e-3, betas 0.9/0.999, eps 1e-8, wd 0.01) against\n"
		   "tier_adam_roofline, which moves the same bytes with trivial arithmetic, and\n"
		   "reports medians; roofline_frac = roofline time / step time.\n");
}

__attribute__((format(printf, 1, 2))) static int adam_bad_usage(const char *fmt, ...)
{
	va_list ap;

	fprintf(stderr, "tier-bench adam: ");
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fprintf(stderr, "\n");
	adam_usage(stderr);
	return EXIT_USAGE;
}

static void adam_print_times(const char *key, const double *v, size_t n)
{
	printf("\"%s\": [", key);
	for (size_t i = 0; i < n; i++)
		printf("%s%.6f", i ? ", " : "", v[i]);
	printf("]");
}

static int adam_run(const struct adam_opts *o)
{
	size_t n = (size_t)o->numel, ms = dtype_size((int)o->moments);
	size_t gs = dtype_size((int)o->grads), os = dtype_size(o->copy_out);
	size_t rd = 4 + 2 * ms + gs, wr = 4 + 2 * ms + os, bpe = rd + wr;
	size_t runs = (size_t)o->runs;
	struct tier_adam_tensors t = {
		.n = n,
		.moment_dtype = o->moments,
		.grad_dtype = o->grads,
		.out_dtype = o->copy_out < 0 ? TIER_FP32 : (enum tier_dtype)o->copy_out,
	};
	struct tier_adam_params hp = { .size = sizeof(struct tier_adam_params),
		.lr = 1e-3, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8, .weight_decay = 0.01,
		.decoupled = true, .step = 1, .grad_scale = 1.0,
	};
	struct tier_pool *pool = NULL;
	double *step_s = calloc(runs, sizeof(double)), *roof_s = calloc(runs, sizeof(double));
	double step_med, roof_med, gelem, step_gbps, roof_gbps, frac;
	void *grad = NULL;
	size_t nonfinite;
	const char *isa;
	uint64_t t0;
	int rc, ret = 1;

	t.param = adam_alloc(n * 4);
	t.exp_avg = adam_alloc(n * ms);
	t.exp_avg_sq = adam_alloc(n * ms);
	grad = adam_alloc(n * gs);
	t.grad = grad;
	if (os)
		t.param_out = adam_alloc(n * os);
	if (!step_s || !roof_s || !t.param || !t.exp_avg || !t.exp_avg_sq || !grad ||
	    (os && !t.param_out)) {
		fprintf(stderr, "tier-bench adam: out of memory for %zu elements (%zu bytes each)\n",
			n, 4 + 2 * ms + gs + os);
		goto out;
	}
	adam_fill(t.param, n, TIER_FP32, FILL_PARAM, 1);
	adam_fill(grad, n, (int)o->grads, FILL_GRAD, 2);
	adam_fill(t.exp_avg, n, (int)o->moments, FILL_EXP_AVG, 3);
	adam_fill(t.exp_avg_sq, n, (int)o->moments, FILL_EXP_AVG_SQ, 4);
	if (os)
		memset(t.param_out, 0, n * os);

	rc = tier_pool_create((unsigned)o->threads, &pool);
	if (rc) {
		fprintf(stderr, "tier-bench adam: pool of %" PRIu64 " threads: %s\n", o->threads,
			tier_last_error()[0] ? tier_last_error() : tier_strerror(rc));
		pool = NULL;
		goto out;
	}
	/* Warm-up: one step, one roofline pass (threads started, code and TLBs hot). */
	if (tier_adam_step(pool, &hp, &t)) {
		fprintf(stderr, "tier-bench adam: step: %s\n", tier_last_error());
		goto out;
	}
	if (tier_adam_roofline(pool, &t)) {
		fprintf(stderr, "tier-bench adam: roofline: %s\n", tier_last_error());
		goto out;
	}
	adam_fix_sq(t.exp_avg_sq, n, (int)o->moments);
	for (size_t r = 0; r < runs; r++) {
		hp.step++;
		t0 = now_ns();
		rc = tier_adam_step(pool, &hp, &t);
		step_s[r] = (double)(now_ns() - t0) * 1e-9;
		if (rc) {
			fprintf(stderr, "tier-bench adam: step: %s\n", tier_last_error());
			goto out;
		}
		t0 = now_ns();
		rc = tier_adam_roofline(pool, &t);
		roof_s[r] = (double)(now_ns() - t0) * 1e-9;
		if (rc) {
			fprintf(stderr, "tier-bench adam: roofline: %s\n", tier_last_error());
			goto out;
		}
		adam_fix_sq(t.exp_avg_sq, n, (int)o->moments);
	}
	nonfinite = adam_nonfinite(t.param, n);
	if (nonfinite)
		fprintf(stderr, "tier-bench adam: warning: %zu of %zu parameters are not finite after"
			" the runs\n", nonfinite, n);
	isa = tier_adam_isa();
	step_med = median(step_s, runs);
	roof_med = median(roof_s, runs);
	gelem = (double)n / step_med * 1e-9;
	step_gbps = (double)bpe * (double)n / step_med * 1e-9;
	roof_gbps = (double)bpe * (double)n / roof_med * 1e-9;
	frac = roof_med / step_med;

	if (o->json) {
		printf("{\"isa\": \"%s\", \"threads\": %" PRIu64 ", \"numel\": %zu, \"moments\": \"%s\""
		       ", \"grads\": \"%s\", \"copy_out\": \"%s\", \"bytes_read_per_elem\": %zu"
		       ", \"bytes_written_per_elem\": %zu, \"bytes_per_elem\": %zu, \"nruns\": %zu"
		       ", \"step_s\": %.6f, \"step_min_s\": %.6f, \"gelem_per_s\": %.4f"
		       ", \"step_GBps\": %.3f, \"roofline_s\": %.6f, \"roofline_min_s\": %.6f"
		       ", \"roofline_GBps\": %.3f, \"roofline_frac\": %.4f, \"nonfinite_params\": %zu"
		       ", \"runs\": {",
		       isa, o->threads, n, dtype_name((int)o->moments), dtype_name((int)o->grads),
		       dtype_name(o->copy_out), rd, wr, bpe, runs, step_med, min_of(step_s, runs),
		       gelem, step_gbps, roof_med, min_of(roof_s, runs), roof_gbps, frac, nonfinite);
		adam_print_times("step_s", step_s, runs);
		printf(", ");
		adam_print_times("roofline_s", roof_s, runs);
		printf("}}\n");
	} else {
		printf("tier-bench adam: %zu elements, %" PRIu64 " thread(s), isa %s, moments %s,"
		       " grads %s, copy-out %s\n", n, o->threads, isa, dtype_name((int)o->moments),
		       dtype_name((int)o->grads), dtype_name(o->copy_out));
		printf("  bytes per element: %zu read + %zu written = %zu\n", rd, wr, bpe);
		printf("  step      median %9.6f s  %7.3f Gelem/s  %7.3f GB/s\n", step_med, gelem,
		       step_gbps);
		printf("  roofline  median %9.6f s  %7.3f Gelem/s  %7.3f GB/s\n", roof_med,
		       (double)n / roof_med * 1e-9, roof_gbps);
		printf("  roofline_frac (roofline time / step time) %.4f\n", frac);
		printf("  %4s %12s %12s\n", "run", "step_s", "roofline_s");
		for (size_t r = 0; r < runs; r++)
			printf("  %4zu %12.6f %12.6f\n", r + 1, step_s[r], roof_s[r]);
	}
	ret = 0;
out:
	tier_pool_destroy(pool);
	free(t.param);
	free(t.exp_avg);
	free(t.exp_avg_sq);
	free(grad);
	free(t.param_out);
	free(step_s);
	free(roof_s);
	return ret;
}

static int cmd_adam(int argc, char **argv)
{
	static const struct option longopts[] = {
		{ "numel", required_argument, NULL, 'n' },
		{ "threads", required_argument, NULL, 't' },
		{ "moments", required_argument, NULL, 'm' },
		{ "grads", required_argument, NULL, 'g' },
		{ "copy-out", required_argument, NULL, 'o' },
		{ "runs", required_argument, NULL, 'r' },
		{ "json", no_argument, NULL, 'j' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	struct adam_opts o = {
		.numel = 64ull << 20, .threads = 2, .runs = 7,
		.moments = TIER_FP32, .grads = TIER_FP32, .copy_out = -1,
	};
	int c, d;

	while ((c = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
		switch (c) {
		case 'n':
			if (parse_bytes(optarg, &o.numel) || o.numel > (1ull << 40))
				return adam_bad_usage("bad --numel '%s' (1 to 2^40)", optarg);
			break;
		case 't':
			if (parse_bytes(optarg, &o.threads) || o.threads > 1024)
				return adam_bad_usage("bad --threads '%s' (1 to 1024)", optarg);
			break;
		case 'm':
			if (parse_dtype(optarg, false, &d) || d == TIER_FP16)
				return adam_bad_usage("bad --moments '%s' (fp32 or bf16)", optarg);
			o.moments = (enum tier_dtype)d;
			break;
		case 'g':
			if (parse_dtype(optarg, false, &d))
				return adam_bad_usage("bad --grads '%s' (fp32, bf16 or fp16)", optarg);
			o.grads = (enum tier_dtype)d;
			break;
		case 'o':
			if (parse_dtype(optarg, true, &d))
				return adam_bad_usage("bad --copy-out '%s' (none, bf16, fp16 or fp32)",
						      optarg);
			o.copy_out = d;
			break;
		case 'r':
			if (parse_bytes(optarg, &o.runs) || o.runs > 10000)
				return adam_bad_usage("bad --runs '%s' (1 to 10000)", optarg);
			break;
		case 'j':
			o.json = true;
			break;
		case 'h':
			adam_usage(stdout);
			return 0;
		default:
			adam_usage(stderr);
			return EXIT_USAGE;
		}
	}
	if (optind < argc)
		return adam_bad_usage("unexpected argument '%s'", argv[optind]);
	return adam_run(&o);
}

static void usage(FILE *f)
{
	fprintf(f, "usage: tier-bench io [OPTIONS]      NVMe tier write and read bandwidth\n"
		   "       tier-bench cache [OPTIONS]   DRAM cache over NVMe on a cyclic schedule\n"
		   "       tier-bench adam [OPTIONS]    CPU AdamW step against its memory roofline\n"
		   "       tier-bench step [OPTIONS]    optimizer steps through the tiers against the bound\n"
		   "       tier-bench --version | --help\n"
		   "Run 'tier-bench COMMAND --help' for its options.\n");
}

int main(int argc, char **argv)
{
	if (argc < 2) {
		usage(stderr);
		return EXIT_USAGE;
	}
	if (strcmp(argv[1], "io") == 0)
		return cmd_io(argc - 1, argv + 1);
	if (strcmp(argv[1], "cache") == 0)
		return cmd_cache(argc - 1, argv + 1);
	if (strcmp(argv[1], "adam") == 0)
		return cmd_adam(argc - 1, argv + 1);
	if (strcmp(argv[1], "step") == 0)
		return cmd_step(argc - 1, argv + 1);
	if (strcmp(argv[1], "--version") == 0) {
		printf("tier-bench (tierstore) %s [%s]\n", tier_version(), tier_build_features());
		return 0;
	}
	if (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0) {
		usage(stdout);
		return 0;
	}
	fprintf(stderr, "tier-bench: unknown command '%s'\n", argv[1]);
	usage(stderr);
	return EXIT_USAGE;
}
