/*
 * tier-bench - benchmarks of tierstore's parts, run as programs (never as
 * timed tests).  Each prints a human table, or one JSON object with --json.
 *
 *   tier-bench io [--manifest FILE] [--size BYTES] [--bs BYTES] [--qd N]
 *                 [--verify] [--json]
 *       Writes then reads SIZE bytes of one object through the NVMe tier in
 *       requests of BS bytes with QD in flight, and reports each direction's
 *       bandwidth in GB/s (1e9 bytes per second).  Checksums are as the
 *       manifest says (on by default).  Backing files the run creates are
 *       removed at the end.
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#include "tierstore.h"

enum { EXIT_USAGE = 2 };

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* Parses "1GiB", "4096", "1M" (binary units) for the command line. */
static int parse_bytes(const char *s, uint64_t *out)
{
	char *end;
	unsigned long long v = strtoull(s, &end, 10);
	uint64_t mult = 1;

	if (end == s)
		return -EINVAL;
	if (*end) {
		char u = (char)(*end | 0x20);

		mult = u == 'k' ? 1ull << 10 : u == 'm' ? 1ull << 20 : u == 'g' ? 1ull << 30 :
		       u == 't' ? 1ull << 40 : u == 'b' ? 1 : 0;
		if (!mult)
			return -EINVAL;
		end++;
		if (*end == 'i' || *end == 'I')
			end++;
		if (*end == 'B' || *end == 'b')
			end++;
		if (*end)
			return -EINVAL;
	}
	if (v == 0 || v > UINT64_MAX / mult)
		return -EINVAL;
	*out = v * mult;
	return 0;
}

static int load_manifest(const char *file, struct tier_manifest **m)
{
	int rc = tier_manifest_resolve(file, m);

	if (rc)
		fprintf(stderr, "%s\n", tier_last_error());
	return rc;
}

/* ------------------------------------------------------------------ io */

/*
 * One pass keeps QD requests in flight.  Completions only queue their slot;
 * the main thread reissues it.  So the write checksums (computed when a
 * request is submitted) run on the main thread, as they would on a
 * trainer's thread, not on the ring's completion thread.
 */
struct io_run {
	struct tier_nvme *t;
	struct tier_nvme_obj *o;
	enum tier_io_op op;
	char *pool;           /* qd buffers of bs bytes */
	uint64_t size, bs;
	unsigned qd;
	int error;
	char detail[512];
	pthread_mutex_t lock;
	pthread_cond_t ready;
	unsigned *free_slots; /* slots whose request completed */
	unsigned nfree;
	unsigned inflight;
};

struct slot {
	struct io_run *run;
	unsigned index;
};

static void io_cb(void *arg, int result, const char *detail)
{
	struct slot *s = arg;
	struct io_run *r = s->run;

	pthread_mutex_lock(&r->lock);
	if (result && !r->error) {
		r->error = result;
		snprintf(r->detail, sizeof(r->detail), "%s", detail);
	}
	r->free_slots[r->nfree++] = s->index;
	r->inflight--;
	pthread_cond_signal(&r->ready);
	pthread_mutex_unlock(&r->lock);
}

/* One pass over the object; returns seconds, or a negative value on error. */
static double io_pass(struct io_run *r, enum tier_io_op op)
{
	struct slot *slots = calloc(r->qd, sizeof(*slots));
	uint64_t t0, t1, off = 0;

	r->free_slots = calloc(r->qd, sizeof(*r->free_slots));
	if (!slots || !r->free_slots) {
		free(slots);
		free(r->free_slots);
		return -1.0;
	}
	r->op = op;
	r->error = 0;
	r->inflight = 0;
	r->nfree = r->qd;
	for (unsigned i = 0; i < r->qd; i++) {
		slots[i] = (struct slot){ r, i };
		r->free_slots[i] = r->qd - 1 - i;
	}
	t0 = now_ns();
	pthread_mutex_lock(&r->lock);
	while (!r->error && (off < r->size || r->inflight)) {
		unsigned i;
		uint64_t len;
		int rc;

		if (off >= r->size || r->nfree == 0) {
			pthread_cond_wait(&r->ready, &r->lock);
			continue;
		}
		i = r->free_slots[--r->nfree];
		r->inflight++;
		pthread_mutex_unlock(&r->lock);
		len = r->size - off < r->bs ? r->size - off : r->bs;
		rc = tier_nvme_submit(r->t, r->o, op, off, len, r->pool + (uint64_t)i * r->bs,
				      io_cb, &slots[i]);
		off += len;
		pthread_mutex_lock(&r->lock);
		if (rc) {
			r->inflight--;
			if (!r->error) {
				r->error = rc;
				snprintf(r->detail, sizeof(r->detail), "%s", tier_last_error());
			}
		}
	}
	/* After an error, let what is in flight finish before the buffers go. */
	while (r->inflight)
		pthread_cond_wait(&r->ready, &r->lock);
	pthread_mutex_unlock(&r->lock);
	t1 = now_ns();
	free(slots);
	free(r->free_slots);
	r->free_slots = NULL;
	if (r->error) {
		fprintf(stderr, "tier-bench io: %s failed: %s\n", op == TIER_IO_WRITE ? "write" : "read",
			r->detail[0] ? r->detail : tier_strerror(r->error));
		return -1.0;
	}
	return (double)(t1 - t0) * 1e-9;
}

static void io_usage(FILE *f)
{
	fprintf(f, "usage: tier-bench io [--manifest FILE] [--size BYTES] [--bs BYTES] [--qd N] [--verify] [--json]\n"
		   "  --size  bytes written then read (default 1GiB)\n"
		   "  --bs    bytes per request (default 1MiB)\n"
		   "  --qd    requests in flight (default 32)\n"
		   "  --verify  check every byte read back (costs CPU; off for timing)\n");
}

static int cmd_io(int argc, char **argv)
{
	static const struct option longopts[] = {
		{ "manifest", required_argument, NULL, 'm' },
		{ "size", required_argument, NULL, 's' },
		{ "bs", required_argument, NULL, 'b' },
		{ "qd", required_argument, NULL, 'q' },
		{ "verify", no_argument, NULL, 'v' },
		{ "json", no_argument, NULL, 'j' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	const char *manifest = NULL;
	uint64_t size = 1ull << 30, bs = 1ull << 20, qd = 32;
	bool json = false, verify = false;
	struct tier_manifest *m = NULL;
	struct io_run r = { 0 };
	struct tier_nvme_stats st;
	double wt, rtime;
	int c, rc, ret = 1;

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
	if (load_manifest(manifest, &m))
		return EXIT_USAGE;
	r.size = size;
	r.bs = bs;
	r.qd = (unsigned)qd;
	pthread_mutex_init(&r.lock, NULL);
	pthread_cond_init(&r.ready, NULL);
	rc = tier_nvme_open(m, TIER_NVME_SCRATCH, &r.t);
	if (rc) {
		fprintf(stderr, "tier-bench io: %s\n", tier_last_error());
		goto out;
	}
	rc = tier_nvme_obj_create(r.t, "tier-bench-io", size, &r.o);
	if (rc) {
		fprintf(stderr, "tier-bench io: %s\n", tier_last_error());
		goto out;
	}
	if (posix_memalign((void **)&r.pool, 2u << 20, r.bs * r.qd) != 0) {
		fprintf(stderr, "tier-bench io: out of memory for %" PRIu64 " buffers of %" PRIu64 " bytes\n",
			qd, bs);
		goto out;
	}
	madvise(r.pool, r.bs * r.qd, MADV_HUGEPAGE);
	/* Data that does not compress or dedupe: a xorshift stream. */
	{
		uint64_t x = 0x9e3779b97f4a7c15ull;

		for (uint64_t i = 0; i + 8 <= r.bs * r.qd; i += 8) {
			x ^= x << 13;
			x ^= x >> 7;
			x ^= x << 17;
			memcpy(r.pool + i, &x, 8);
		}
	}
	if (r.bs * r.qd <= (1ull << 30) && tier_nvme_register_buffer(r.t, r.pool, r.bs * r.qd)) {
		fprintf(stderr, "tier-bench io: %s\n", tier_last_error());
		goto out;
	}
	wt = io_pass(&r, TIER_IO_WRITE);
	if (wt < 0)
		goto out;
	rtime = io_pass(&r, TIER_IO_READ);
	if (rtime < 0)
		goto out;
	if (verify) {
		/* Write each block with its offset stamped in, read it back, compare. */
		char *a = r.pool, *b = r.pool + r.bs;

		for (uint64_t off = 0; off < size; off += bs) {
			uint64_t len = size - off < bs ? size - off : bs;

			for (uint64_t i = 0; i + 8 <= len; i += 8) {
				uint64_t v = (off + i) * 0x9e3779b97f4a7c15ull;

				memcpy(a + i, &v, 8);
			}
			if (tier_nvme_write(r.t, r.o, off, len, a) ||
			    tier_nvme_read(r.t, r.o, off, len, b) || memcmp(a, b, len) != 0) {
				fprintf(stderr, "tier-bench io: verification failed at %" PRIu64 ": %s\n",
					off, tier_last_error()[0] ? tier_last_error() : "data differs");
				goto out;
			}
		}
	}
	tier_nvme_get_stats(r.t, &st);
	if (json) {
		printf("{\"size\": %" PRIu64 ", \"bs\": %" PRIu64 ", \"qd\": %" PRIu64
		       ", \"paths\": %u, \"stripe_unit\": %u, \"write_s\": %.6f, \"read_s\": %.6f"
		       ", \"write_GBps\": %.4f, \"read_GBps\": %.4f, \"short_ios\": %" PRIu64
		       ", \"retries\": %" PRIu64 ", \"bounced\": %" PRIu64 ", \"device_bytes_written\": %" PRIu64
		       ", \"device_bytes_read\": %" PRIu64 ", \"verified\": %s}\n",
		       size, bs, qd, st.npaths, st.stripe_unit, wt, rtime, (double)size / wt * 1e-9,
		       (double)size / rtime * 1e-9, st.short_ios, st.retries, st.bounced,
		       st.bytes_written, st.bytes_read, verify ? "true" : "false");
	} else {
		printf("tier-bench io: %" PRIu64 " bytes, bs %" PRIu64 ", qd %" PRIu64
		       ", %u path(s), stripe unit %u\n", size, bs, qd, st.npaths, st.stripe_unit);
		printf("  write  %8.3f GB/s  (%.3f s)\n", (double)size / wt * 1e-9, wt);
		printf("  read   %8.3f GB/s  (%.3f s)%s\n", (double)size / rtime * 1e-9, rtime,
		       verify ? "  verified" : "");
	}
	ret = 0;
out:
	if (r.t && tier_nvme_close(r.t) && ret == 0) {
		fprintf(stderr, "tier-bench io: close: %s\n", tier_last_error());
		ret = 1;
	}
	free(r.pool);
	tier_manifest_free(m);
	pthread_mutex_destroy(&r.lock);
	pthread_cond_destroy(&r.ready);
	return ret;
}

static void usage(FILE *f)
{
	fprintf(f, "usage: tier-bench io [OPTIONS]   NVMe tier write and read bandwidth\n"
		   "       tier-bench --version | --help\n"
		   "Run 'tier-bench io --help' for its options.\n");
}

int main(int argc, char **argv)
{
	if (argc < 2) {
		usage(stderr);
		return EXIT_USAGE;
	}
	if (strcmp(argv[1], "io") == 0)
		return cmd_io(argc - 1, argv + 1);
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
