/*
 * bench_step_measure.c - the bound of `tier-bench step`, measured in the
 * same run: the NVMe tier's bandwidth (bench_io, as `tier-bench io` runs
 * it, a shard per request, the lookahead's shards in flight) before the
 * steps and again after them, then also mixed at the step's share of
 * reads; and the in-memory update (tier_adam_step over the same elements,
 * threads and dtypes).  From them the bound and the mixed bound.
 */
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#include "bench_step.h"

/* The in-memory update runs over the elements in chunks of at most this
 * many, reusing one set of arrays: the same elements go through the
 * kernel, in memory far larger than any cache. */
#define STEP_UPDATE_CHUNK (64ull << 20)

/*
 * The in-memory update: tier_adam_step over @numel elements in chunks
 * of arrays reused, warm-up pass untimed, then o->update_runs timed
 * passes; the median pass time in *out.
 */
int step_update_time(const struct step_opts *o, const struct step_setup *su,
		     struct tier_pool *pool, uint64_t numel, double *out)
{
	size_t chunk = numel < STEP_UPDATE_CHUNK ? (size_t)numel : STEP_UPDATE_CHUNK;
	struct tier_adam_tensors t = { 0 };
	struct tier_adam_params hp;
	double *times = calloc(o->update_runs, sizeof(double));
	int rc, ret = 1;

	tier_adam_params_init(&hp);
	if (numel == 0) {
		/* a rank that keeps no piece */
		free(times);
		*out = 0;
		return 0;
	}
	if (!times || adam_arrays(&t, chunk, su->moments, TIER_FP32, o->copy_out)) {
		fprintf(stderr, STEP_WHO ": out of memory for the in-memory update of %zu elements\n",
			chunk);
		goto out;
	}
	rc = tier_adam_step(pool, &hp, &t);
	if (rc) {
		ret = step_fail("in-memory update", rc);
		goto out;
	}
	for (uint64_t r = 0; r < o->update_runs; r++) {
		uint64_t t0 = now_ns();

		hp.step++;
		for (uint64_t off = 0; off < numel; off += chunk) {
			t.n = numel - off < chunk ? (size_t)(numel - off) : chunk;
			rc = tier_adam_step(pool, &hp, &t);
			if (rc) {
				ret = step_fail("in-memory update", rc);
				goto out;
			}
		}
		times[r] = (double)(now_ns() - t0) * 1e-9;
	}
	*out = median(times, o->update_runs);
	ret = 0;
out:
	adam_arrays_free(&t);
	free(times);
	return ret;
}

/* The measurement's shape: su's requests, depth and size, o's passes. */
static struct bench_io_opts step_io_opts(const struct step_opts *o, const struct step_setup *su,
					 double mix_read)
{
	return (struct bench_io_opts){ .size = su->io_size, .bs = su->io_bs, .qd = su->io_qd,
				       .who = STEP_WHO, .passes = (unsigned)o->io_passes,
				       .mix_read = mix_read };
}

/* The NVMe tier's bandwidth, on a fresh open of the same tier, before the
 * store holds its files. */
int step_nvme_before(const struct step_opts *o, const struct tier_manifest *m,
		     const struct step_setup *su, struct progress *pg, struct step_nvme *nv)
{
	struct bench_io_opts io = step_io_opts(o, su, 0);
	char a[32], b[32];

	progress_note(pg, "measuring NVMe bandwidth (%s, %s requests, %" PRIu64
		      " in flight, %" PRIu64 " passes)...", human(su->io_size, a, sizeof(a)),
		      human(su->io_bs, b, sizeof(b)), su->io_qd, o->io_passes);
	return bench_io(m, &io, &nv->io);
}

/*
 * The NVMe bandwidth again, now that the store's files are gone: this
 * disk's bandwidth drifts, so the bound takes the mean of the times of the
 * fastest pass before and the fastest pass after the steps.  This time
 * also the step's traffic as the disk sees it: its read and write bytes in
 * flight together, at the step's mix.
 */
void step_nvme_after(const struct step_opts *o, const struct tier_manifest *m,
		     const struct step_setup *su, struct progress *pg, double rd_b, double wr_b,
		     struct step_nvme *nv)
{
	double mix_read = rd_b + wr_b > 0 ? rd_b / (rd_b + wr_b) : 0;
	struct bench_io_opts io = step_io_opts(o, su, mix_read);
	struct bench_io_result *r = &nv->io, *r2 = &nv->io2;

	progress_note(pg, "measuring NVMe bandwidth again, and mixed at %.0f%% reads...",
		      100 * mix_read);
	if (bench_io(m, &io, r2)) {
		/* (the disk may have filled up meanwhile: the steps ran) */
		fprintf(stderr, STEP_WHO ": warning: the second NVMe measurement failed (above);"
			" the bound uses the one before the steps\n");
		*r2 = *r;
		r2->passes = 0;
	}
	for (unsigned i = 0; i < r2->passes && r->passes < 2 * BENCH_IO_MAX_PASSES; i++) {
		r->read_pass_s[r->passes] = r2->read_pass_s[i];
		r->write_pass_s[r->passes++] = r2->write_pass_s[i];
	}
	nv->read_Bps = (double)su->io_size / ((r->read_s + r2->read_s) / 2);
	nv->write_Bps = (double)su->io_size / ((r->write_s + r2->write_s) / 2);
}

/*
 * The bound: the larger of the NVMe time of the step's bytes (read bytes /
 * read bandwidth + write bytes / write bandwidth, one disk serving both)
 * and the update time.  The mixed bound: the same bytes at the rate the
 * disk gave them mixed; where it serves reads and writes at once faster
 * than one after the other, this is the tighter floor (then efficiency > 1).
 */
void step_bounds(const struct step_setup *su, const struct step_nvme *nv, double update_s,
		 double rd_b, double wr_b, const struct step_link *link, struct step_bound *b)
{
	const struct bench_io_result *r2 = &nv->io2;

	b->update_s = update_s;
	b->nvme_s = (nv->read_Bps > 0 ? rd_b / nv->read_Bps : 0) +
		    (nv->write_Bps > 0 ? wr_b / nv->write_Bps : 0);
	b->hbm_regime = link != NULL;
	if (link) {
		/* the lanes run at once: each its share of the update */
		double cpu_s = (1 - link->gpu_share) * update_s;
		double gpu_s = link->gpu_share * link->gpu_update_s;

		b->link = *link;
		b->update_s = update_s = cpu_s > gpu_s ? cpu_s : gpu_s;
	}
	b->bound_s = b->nvme_s > update_s ? b->nvme_s : update_s;
	if (link && link->link_s > b->bound_s)
		b->bound_s = link->link_s;
	b->mixed_Bps = r2->mixed_s > 0 ? (double)su->io_size / r2->mixed_s : 0;
	b->mixed_read_share = (double)r2->mixed_read_bytes / (double)su->io_size;
	b->mixed_nvme_s = b->mixed_Bps > 0 ? (rd_b + wr_b) / b->mixed_Bps : 0;
	b->mixed_bound_s = b->mixed_nvme_s > update_s ? b->mixed_nvme_s : update_s;
}

/* ------------------------------------------------ the HBM-resident regime */

#define LINK_BYTES (256ull << 20)
#define LINK_PASSES 5
#define LINK_BOTH_ROUNDS 2

/* One direction's copies of LINK_BYTES: each one's rate in r[]. */
struct link_dir {
	void *dst;
	const void *src;
	unsigned n;
	double r[LINK_PASSES + 2];
	int rc;
	/* the device-to-host thread: its own buffers (tier_gpu_alloc makes
	 * the device current on the thread), then the start together */
	int gpu;
	void *host, *dev;
	pthread_barrier_t *go;
};

static void link_copies(struct link_dir *d)
{
	for (unsigned k = 0; k < d->n && !d->rc; k++) {
		uint64_t t0 = now_ns();

		d->rc = tier_gpu_copy(d->dst, d->src, LINK_BYTES);
		d->r[k] = (double)LINK_BYTES / ((double)(now_ns() - t0) * 1e-9);
	}
}

static void *link_thread(void *arg)
{
	struct link_dir *d = arg;

	if (!(d->rc = tier_gpu_alloc(d->gpu, TIER_GPU_PINNED, LINK_BYTES, &d->host)) &&
	    !(d->rc = tier_gpu_alloc(d->gpu, TIER_GPU_DEVICE, LINK_BYTES, &d->dev))) {
		d->dst = d->host;
		d->src = d->dev;
	}
	pthread_barrier_wait(d->go);
	if (!d->rc)
		link_copies(d);
	tier_gpu_free(TIER_GPU_PINNED, d->host);
	tier_gpu_free(TIER_GPU_DEVICE, d->dev);
	return NULL;
}

static int dcmp(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

/*
 * The pinned copy rates of the manifest's GPU, each way: alone (the best
 * of LINK_PASSES copies of LINK_BYTES, the directions in turn), and with
 * both directions copying at once as a step does (two threads, each
 * LINK_PASSES + 2 copies on its own stream; the median of the middle
 * LINK_PASSES, which overlap the other direction's; the faster of
 * LINK_BOTH_ROUNDS such rounds: on the H100 one run in seven measured half
 * the rate the others did).  0, or 1 after a message.
 */
static int link_rates(const struct step_setup *su, struct step_link *lk)
{
	void *host = NULL, *dev = NULL;
	struct link_dir up = { 0 }, down = { 0 };
	pthread_barrier_t go;
	pthread_t th;
	int rc, ret = 1;

	lk->h2d_Bps = lk->d2h_Bps = lk->h2d_both_Bps = lk->d2h_both_Bps = 0;
	if ((rc = tier_gpu_alloc(su->gpu_index, TIER_GPU_PINNED, LINK_BYTES, &host)) ||
	    (rc = tier_gpu_alloc(su->gpu_index, TIER_GPU_DEVICE, LINK_BYTES, &dev))) {
		ret = step_fail("the link measurement's buffers", rc);
		goto out;
	}
	memset(host, 0x5a, LINK_BYTES);
	for (int k = 0; k < 2 * LINK_PASSES; k++) {
		struct link_dir d = { .dst = k % 2 ? host : dev, .src = k % 2 ? dev : host, .n = 1 };

		link_copies(&d);
		if ((rc = d.rc)) {
			ret = step_fail("the link measurement's copies", rc);
			goto out;
		}
		if (k % 2 == 0 && d.r[0] > lk->h2d_Bps)
			lk->h2d_Bps = d.r[0];
		if (k % 2 && d.r[0] > lk->d2h_Bps)
			lk->d2h_Bps = d.r[0];
	}
	for (int round = 0; round < LINK_BOTH_ROUNDS; round++) {
		up = (struct link_dir){ .dst = dev, .src = host, .n = LINK_PASSES + 2 };
		down = (struct link_dir){ .n = LINK_PASSES + 2, .gpu = su->gpu_index, .go = &go };
		pthread_barrier_init(&go, NULL, 2);
		if ((rc = -pthread_create(&th, NULL, link_thread, &down))) {
			pthread_barrier_destroy(&go);
			ret = step_fail("the link measurement's thread", rc);
			goto out;
		}
		pthread_barrier_wait(&go);
		if (!down.rc)
			link_copies(&up);
		pthread_join(th, NULL);
		pthread_barrier_destroy(&go);
		if ((rc = up.rc ? up.rc : down.rc)) {
			ret = step_fail("the link measurement's copies both ways", rc);
			goto out;
		}
		qsort(up.r + 1, LINK_PASSES, sizeof(double), dcmp);
		qsort(down.r + 1, LINK_PASSES, sizeof(double), dcmp);
		if (up.r[1 + LINK_PASSES / 2] > lk->h2d_both_Bps)
			lk->h2d_both_Bps = up.r[1 + LINK_PASSES / 2];
		if (down.r[1 + LINK_PASSES / 2] > lk->d2h_both_Bps)
			lk->d2h_both_Bps = down.r[1 + LINK_PASSES / 2];
	}
	ret = 0;
out:
	tier_gpu_free(TIER_GPU_PINNED, host);
	tier_gpu_free(TIER_GPU_DEVICE, dev);
	return ret;
}

double step_link_time(double h2d_b, double d2h_b, const struct step_link *lk)
{
	double tu, td;

	if (lk->h2d_both_Bps <= 0 || lk->d2h_both_Bps <= 0 || lk->h2d_Bps <= 0 || lk->d2h_Bps <= 0)
		return 0;
	tu = h2d_b / lk->h2d_both_Bps;
	td = d2h_b / lk->d2h_both_Bps;
	/* both at once until one is done, then the other alone */
	if (tu <= td)
		return tu + (d2h_b - tu * lk->d2h_both_Bps) / lk->d2h_Bps;
	return td + (h2d_b - td * lk->h2d_both_Bps) / lk->h2d_Bps;
}

/* The CUDA update's time over @numel elements: o->update_runs timed
 * launches over one shard's elements in device memory (the median),
 * scaled.  0, or 1 after a message. */
static int gpu_update_time(const struct step_opts *o, const struct step_setup *su, uint64_t numel,
			   double *out)
{
	size_t n = su->shard_elems < numel ? (size_t)su->shard_elems : (size_t)numel;
	struct tier_adam_tensors h = { 0 }, d;
	struct tier_adam_params hp;
	double *times = calloc(o->update_runs, sizeof(double));
	int rc, ret = 1;

	tier_adam_params_init(&hp);
	if (!times || adam_arrays(&h, n, su->moments, TIER_FP32, o->copy_out)) {
		fprintf(stderr, STEP_WHO ": out of memory for the GPU update of %zu elements\n", n);
		free(times);
		return 1;
	}
	if (adam_gpu_arrays(su->gpu_index, &h, &d))
		goto out_h;
	for (uint64_t r = 0; r <= o->update_runs; r++) {
		uint64_t t0 = now_ns();

		hp.step++;
		if ((rc = tier_adam_step_gpu(su->gpu_index, &hp, &d)) || (rc = tier_gpu_sync(su->gpu_index))) {
			ret = step_fail("the GPU update", rc);
			goto out_d;
		}
		if (r) /* the first launch warms up */
			times[r - 1] = (double)(now_ns() - t0) * 1e-9;
	}
	*out = median(times, o->update_runs) * (double)numel / (double)n;
	ret = 0;
out_d:
	adam_gpu_free(&d);
out_h:
	adam_arrays_free(&h);
	free(times);
	return ret;
}

int step_link_measure(const struct step_opts *o, const struct step_setup *su,
		      const struct step_record *rec, struct step_link *lk)
{
	double gelems, cpu;
	size_t os = dtype_size(o->copy_out);

	memset(lk, 0, sizeof(*lk));
	step_hbm_medians(o, rec, &lk->h2d_b, &lk->d2h_b, &cpu);
	lk->gpu_share = 1 - cpu;
	gelems = lk->gpu_share * (double)su->numel;
	/* host buffers cross the link too: the gradient in, the copy out */
	if (su->grads != STEP_GRADS_DEVICE) {
		lk->h2d_b += gelems * 4;
		lk->d2h_b += gelems * (double)os;
	}
	if (su->gpu) {
		if (link_rates(su, lk) || gpu_update_time(o, su, su->numel, &lk->gpu_update_s))
			return 1;
	} else {
		struct tier_pool *one = NULL;
		int rc;

		/* the emulated link: each direction at its rate, at once too */
		lk->h2d_Bps = lk->d2h_Bps = o->hbm_bandwidth;
		lk->h2d_both_Bps = lk->d2h_both_Bps = o->hbm_bandwidth;
		/* the emulated lane runs the CPU kernel on its one thread */
		if ((rc = tier_pool_create(1, &one)))
			return step_fail("a one-thread pool", rc);
		rc = step_update_time(o, su, one, su->numel, &lk->gpu_update_s);
		tier_pool_destroy(one);
		if (rc)
			return 1;
	}
	lk->link_s = step_link_time(lk->h2d_b, lk->d2h_b, lk);
	return 0;
}
