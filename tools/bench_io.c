/*
 * bench_io.c - the NVMe bandwidth measurement (bench_io, bench.h) and
 * `tier-bench io`, which runs it once and prints it.  `tier-bench step`
 * measures the bandwidth its bound uses with the same code, in the same
 * run.
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "bench.h"

/* ------------------------------------------------------ the measurement */

/*
 * One pass keeps QD requests in flight.  Completions only queue their slot;
 * the main thread reissues it.  So the write checksums (computed when a
 * request is submitted) run on the main thread, as they would on a
 * trainer's thread, not on the ring's completion thread.
 */
struct io_run {
	struct tier_nvme *t;
	struct tier_nvme_obj *o;
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
	const char *who;      /* message prefix */
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

/* Mixed passes: whether block @k of @nb is one of the @rb read (spread
 * evenly over the object), else a written one. */
static bool mixed_reads(uint64_t k, uint64_t nb, uint64_t rb)
{
	return (k + 1) * rb / nb > k * rb / nb;
}

/* The next block from @k on that is (@want_read) or is not read. */
static uint64_t mixed_next(uint64_t k, uint64_t nb, uint64_t rb, bool want_read)
{
	while (k < nb && mixed_reads(k, nb, rb) != want_read)
		k++;
	return k;
}

/*
 * One pass over the object's blocks of r->bs bytes (the last may be
 * shorter), in order; returns seconds, or a negative value on error.
 * @rd_blocks < 0: every request is @op.  Otherwise a mixed pass: @rd_blocks
 * of the blocks, spread evenly over the object, are read and the others
 * written, the two streams moving through the object together, so that
 * reads and writes go to nearby blocks as an optimizer step's fills and
 * write-backs do (they stream through the state ahead of and behind the
 * update), and issued so that at every moment the blocks of each kind are
 * in proportion (a read goes out while reads issued / rd_blocks is at most
 * writes issued / written blocks).  Both kinds share the QD slots.  No
 * block is both read and written.
 */
static double io_pass(struct io_run *r, enum tier_io_op op, int64_t rd_blocks)
{
	struct slot *slots = calloc(r->qd, sizeof(*slots));
	bool mixed = rd_blocks >= 0;
	uint64_t nb = (r->size + r->bs - 1) / r->bs, rb = mixed ? (uint64_t)rd_blocks : 0;
	uint64_t kr = 0, kw = 0, nr = 0, nw = 0; /* next read/written block, how many issued */
	uint64_t t0, t1;

	r->free_slots = calloc(r->qd, sizeof(*r->free_slots));
	if (!slots || !r->free_slots) {
		free(slots);
		free(r->free_slots);
		return -1.0;
	}
	if (mixed) {
		kr = mixed_next(0, nb, rb, true);
		kw = mixed_next(0, nb, rb, false);
	} else if (op == TIER_IO_READ) {
		kw = nb; /* one stream, through kr */
	} else {
		kr = nb;
	}
	r->error = 0;
	r->inflight = 0;
	r->nfree = r->qd;
	for (unsigned i = 0; i < r->qd; i++) {
		slots[i] = (struct slot){ r, i };
		r->free_slots[i] = r->qd - 1 - i;
	}
	t0 = now_ns();
	pthread_mutex_lock(&r->lock);
	while (!r->error && (kr < nb || kw < nb || r->inflight)) {
		bool rd_left = kr < nb, wr_left = kw < nb, read;
		uint64_t k, off, len;
		unsigned i;
		int rc;

		if (mixed)
			read = rd_left && (!wr_left || nr * (nb - rb) <= nw * rb);
		else
			read = rd_left;
		if ((!rd_left && !wr_left) || r->nfree == 0) {
			pthread_cond_wait(&r->ready, &r->lock);
			continue;
		}
		k = read ? kr : kw;
		if (read) {
			nr++;
			kr = mixed ? mixed_next(kr + 1, nb, rb, true) : kr + 1;
		} else {
			nw++;
			kw = mixed ? mixed_next(kw + 1, nb, rb, false) : kw + 1;
		}
		i = r->free_slots[--r->nfree];
		r->inflight++;
		pthread_mutex_unlock(&r->lock);
		off = k * r->bs;
		len = r->size - off < r->bs ? r->size - off : r->bs;
		rc = tier_nvme_submit(r->t, r->o, read ? TIER_IO_READ : TIER_IO_WRITE, off, len,
				      r->pool + (uint64_t)i * r->bs, io_cb, &slots[i]);
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
		fprintf(stderr, "%s: %s failed: %s\n", r->who,
			mixed ? "mixed read/write" : op == TIER_IO_WRITE ? "write" : "read",
			r->detail[0] ? r->detail : tier_strerror(r->error));
		return -1.0;
	}
	return (double)(t1 - t0) * 1e-9;
}

int bench_io(const struct tier_manifest *m, const struct bench_io_opts *o,
	     struct bench_io_result *res)
{
	uint64_t size = o->size, bs = o->bs, qd = o->qd;
	struct io_run r = { .who = o->who };
	int rc, ret = 1;

	r.size = size;
	r.bs = bs;
	r.qd = (unsigned)qd;
	pthread_mutex_init(&r.lock, NULL);
	pthread_cond_init(&r.ready, NULL);
	rc = tier_nvme_open(m, TIER_NVME_SCRATCH, &r.t);
	if (rc) {
		fprintf(stderr, "%s: %s\n", o->who, tier_last_error());
		goto out;
	}
	rc = tier_nvme_obj_create(r.t, "tier-bench-io", size, &r.o);
	if (rc) {
		fprintf(stderr, "%s: %s\n", o->who, tier_last_error());
		goto out;
	}
	if (posix_memalign((void **)&r.pool, 2u << 20, r.bs * r.qd) != 0) {
		fprintf(stderr, "%s: out of memory for %" PRIu64 " buffers of %" PRIu64 " bytes\n",
			o->who, qd, bs);
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
		fprintf(stderr, "%s: %s\n", o->who, tier_last_error());
		goto out;
	}
	res->passes = o->passes ? o->passes : 1;
	if (res->passes > BENCH_IO_MAX_PASSES)
		res->passes = BENCH_IO_MAX_PASSES;
	for (unsigned p = 0; p < res->passes; p++) {
		double w = io_pass(&r, TIER_IO_WRITE, -1), rd;

		if (w < 0)
			goto out;
		rd = io_pass(&r, TIER_IO_READ, -1);
		if (rd < 0)
			goto out;
		res->write_pass_s[p] = w;
		res->read_pass_s[p] = rd;
		res->write_s = p == 0 || w < res->write_s ? w : res->write_s;
		res->read_s = p == 0 || rd < res->read_s ? rd : res->read_s;
	}
	if (o->mix_read > 0 && o->mix_read < 1) {
		/* The object's blocks are all written by now: the reads find data. */
		uint64_t nb = (size + bs - 1) / bs, rb = (uint64_t)(o->mix_read * (double)nb + 0.5);

		rb = rb < 1 ? 1 : rb > nb - 1 ? nb - 1 : rb;
		res->mixed_read_bytes = 0;
		for (uint64_t k = 0; k < nb; k++)
			if (mixed_reads(k, nb, rb))
				res->mixed_read_bytes += size - k * bs < bs ? size - k * bs : bs;
		for (unsigned p = 0; p < res->passes; p++) {
			double t = io_pass(&r, TIER_IO_READ, (int64_t)rb);

			if (t < 0)
				goto out;
			res->mixed_pass_s[p] = t;
			res->mixed_s = p == 0 || t < res->mixed_s ? t : res->mixed_s;
		}
	}
	if (o->verify) {
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
				fprintf(stderr, "%s: verification failed at %" PRIu64 ": %s\n",
					o->who, off, tier_last_error()[0] ? tier_last_error() : "data differs");
				goto out;
			}
		}
	}
	tier_nvme_get_stats(r.t, &res->stats);
	ret = 0;
out:
	if (r.t && tier_nvme_close(r.t) && ret == 0) {
		fprintf(stderr, "%s: close: %s\n", o->who, tier_last_error());
		ret = 1;
	}
	free(r.pool);
	pthread_mutex_destroy(&r.lock);
	pthread_cond_destroy(&r.ready);
	return ret;
}

/* ---------------------------------------------------------- the command */

static void io_usage(FILE *f)
{
	fprintf(f, "usage: tier-bench io [--manifest FILE] [--size BYTES] [--bs BYTES] [--qd N] [--mix F]\n"
		   "                     [--passes P] [--verify] [--json]\n"
		   "  --size  bytes written then read (default 1GiB)\n"
		   "  --bs    bytes per request (default 1MiB)\n"
		   "  --qd    requests in flight (default 32)\n"
		   "  --mix   then a mixed pass: this share (0 < F < 1) of the requests read while the\n"
		   "          others write, spread evenly, reads and writes in flight together\n"
		   "  --passes  write-then-read passes, 1 to 8 (default 1); the later ones overwrite\n"
		   "          what the first wrote, as a store's write-backs do, and the rates are\n"
		   "          the fastest pass's (on tmpfs a first write also allocates the pages)\n"
		   "  --verify  check every byte read back (costs CPU; off for timing)\n");
}

/* Bad values say so and no more; an unknown option prints the usage. */
static const struct bench_cmd io_cmd = { "tier-bench io", io_usage, NULL };

/* What the command line asks for. */
struct io_args {
	struct bench_io_opts o;
	const char *manifest;
	uint64_t passes;
	bool json;
};

/* --manifest and --mix. */
static int io_option(void *ctx, int c, const char *arg)
{
	struct io_args *a = ctx;
	char *end;

	if (c == 'm') {
		a->manifest = arg;
		return 0;
	}
	errno = 0;
	a->o.mix_read = strtod(arg, &end);
	if (errno || end == arg || *end || !(a->o.mix_read > 0 && a->o.mix_read < 1))
		return bench_bad_usage(&io_cmd, "bad --mix '%s' (a share of reads,"
				       " above 0 and below 1)", arg);
	return 0;
}

static void io_print(const struct bench_io_opts *o, const struct bench_io_result *r, bool json)
{
	const struct tier_nvme_stats *st = &r->stats;
	double size = (double)o->size, wt = r->write_s, rt = r->read_s;

	if (json) {
		printf("{\"size\": %" PRIu64 ", \"bs\": %" PRIu64 ", \"qd\": %" PRIu64
		       ", \"passes\": %u, \"paths\": %u, \"stripe_unit\": %u, \"write_s\": %.6f, \"read_s\": %.6f"
		       ", \"write_GBps\": %.4f, \"read_GBps\": %.4f, \"short_ios\": %" PRIu64
		       ", \"retries\": %" PRIu64 ", \"bounced\": %" PRIu64 ", \"device_bytes_written\": %" PRIu64
		       ", \"device_bytes_read\": %" PRIu64 ", \"verified\": %s",
		       o->size, o->bs, o->qd, r->passes, st->npaths, st->stripe_unit, wt, rt, size / wt * 1e-9,
		       size / rt * 1e-9, st->short_ios, st->retries, st->bounced,
		       st->bytes_written, st->bytes_read, o->verify ? "true" : "false");
		if (o->mix_read > 0)
			printf(", \"mix_read_share\": %.4f, \"mixed_s\": %.6f, \"mixed_GBps\": %.4f",
			       (double)r->mixed_read_bytes / size, r->mixed_s, size / r->mixed_s * 1e-9);
		printf("}\n");
		return;
	}
	printf("tier-bench io: %" PRIu64 " bytes, bs %" PRIu64 ", qd %" PRIu64
	       ", %u path(s), stripe unit %u, %u pass(es), the fastest of each\n", o->size, o->bs,
	       o->qd, st->npaths, st->stripe_unit, r->passes);
	printf("  write  %8.3f GB/s  (%.3f s)\n", size / wt * 1e-9, wt);
	printf("  read   %8.3f GB/s  (%.3f s)%s\n", size / rt * 1e-9, rt,
	       o->verify ? "  verified" : "");
	if (o->mix_read > 0)
		printf("  mixed  %8.3f GB/s  (%.3f s)  %.1f%% of the bytes read, the rest"
		       " written, together\n", size / r->mixed_s * 1e-9, r->mixed_s,
		       100.0 * (double)r->mixed_read_bytes / size);
}

int cmd_io(int argc, char **argv)
{
	struct io_args a = { .o = { .size = 1ull << 30, .bs = 1ull << 20, .qd = 32,
				    .who = "tier-bench io" }, .passes = 1 };
	const struct bench_arg args[] = {
		BENCH_OTHER('m', "manifest", required_argument),
		BENCH_NUM('s', "size", &a.o.size, 1, UINT64_MAX, NULL),
		BENCH_NUM('b', "bs", &a.o.bs, 1, 1ull << 30, "(1 B to 1 GiB)"),
		BENCH_NUM('q', "qd", &a.o.qd, 1, 4096, "(1 to 4096)"),
		BENCH_OTHER('x', "mix", required_argument),
		BENCH_NUM('p', "passes", &a.passes, 1, BENCH_IO_MAX_PASSES, "(1 to 8)"),
		BENCH_FLAG('v', "verify", &a.o.verify),
		BENCH_FLAG('j', "json", &a.json),
	};
	struct tier_manifest *m = NULL;
	struct bench_io_result r = { 0 };
	int ret = bench_options(&io_cmd, argc, argv, args, sizeof(args) / sizeof(args[0]),
				io_option, &a);

	if (ret)
		return ret == BENCH_HELP ? 0 : ret;
	if (a.o.mix_read > 0 && a.o.size < 2 * a.o.bs)
		return bench_bad_usage(&io_cmd, "--mix needs --size of at least two requests"
				       " (2 x --bs)");
	if (load_manifest(a.manifest, &m))
		return EXIT_USAGE;
	a.o.passes = (unsigned)a.passes;
	ret = bench_io(m, &a.o, &r);
	if (!ret)
		io_print(&a.o, &r, a.json);
	tier_manifest_free(m);
	return ret;
}
