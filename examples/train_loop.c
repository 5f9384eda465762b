/*
 * train_loop.c - a small training loop over tierstore's optimizer: a
 * linear model y = W x + b fitted to a fixed target by AdamW, its
 * optimizer state in a store whose DRAM tier is smaller than the state, so
 * every step streams the shards through the NVMe file.
 *
 *   train_loop DIR [STEPS]
 *
 * DIR is where the NVMe backing file goes (created if need be).  Prints
 * the loss every few steps and exits 0 when it fell, 1 on an error (the
 * library's message on stderr), 2 when the loss did not fall.
 *
 * Build against an installed tierstore:
 *   cc train_loop.c $(pkg-config --cflags --libs tierstore) -lm -o train_loop
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <tierstore.h>

#define IN 512
#define OUT 1024   /* W: 512 Ki elements; with its moments 6 MiB of state */

static int fail(const char *what, int rc)
{
	fprintf(stderr, "train_loop: %s: %s: %s\n", what, tier_strerror(rc), tier_last_error());
	return 1;
}

/*
 * A step that fails part way with an error that may pass (an I/O error
 * that outlasted the NVMe tier's own retries, a timeout, an interrupted
 * call) is completed by calling it again with the same gradients and
 * output buffers (docs/optimizer.md, "A step that fails"): the state then
 * ends bit for bit as if it had not failed.  Any other error is not
 * retried: bad input, no room, damaged data (restore a checkpoint).
 */
#define STEP_TRIES 3

static int transient(int rc)
{
	return rc == -EIO || rc == -ETIMEDOUT || rc == -EILSEQ || rc == -EAGAIN || rc == -EINTR;
}

/* tier_optim_step, called again while it fails with a transient error, up
 * to STEP_TRIES calls in all; each retry is said on stderr. */
static int step_retrying(struct tier_optim *o, double lr, const struct tier_tensor *g,
			 const struct tier_tensor *out, struct tier_step_result *res, int k)
{
	for (int tries = 1;; tries++) {
		int rc = tier_optim_step(o, lr, g, out, res);

		if (!rc || !transient(rc) || tries == STEP_TRIES)
			return rc;
		fprintf(stderr, "train_loop: step %d failed with a transient error (%s: %s);"
			" running it again with the same gradients (try %d of %d)\n", k + 1,
			tier_strerror(rc), tier_last_error(), tries + 1, STEP_TRIES);
	}
}

/* The loss of W, b on one input x against the target's output, and its
 * gradients: 0.5 |W x + b - t|^2. */
static double loss_and_grads(const float *w, const float *b, const float *x, const float *t,
			     float *gw, float *gb)
{
	double loss = 0;

	for (int i = 0; i < OUT; i++) {
		double y = (double)b[i];

		for (int j = 0; j < IN; j++)
			y += (double)w[i * IN + j] * (double)x[j];
		double e = y - (double)t[i];

		loss += 0.5 * e * e;
		gb[i] = (float)e;
		for (int j = 0; j < IN; j++)
			gw[i * IN + j] = (float)(e * (double)x[j]);
	}
	return loss;
}

static int run(struct tier_optim *o, int steps)
{
	float *w = calloc(IN * OUT, 4), *gw = calloc(IN * OUT, 4), *b = calloc(OUT, 4);
	float *gb = calloc(OUT, 4), x[IN], t[OUT];
	double first = 0, last = 0;
	int rc = 0;

	if (!w || !gw || !b || !gb)
		return fail("memory", -12);
	for (int j = 0; j < IN; j++)
		x[j] = (float)sin(j * 0.1);
	for (int i = 0; i < OUT; i++)
		t[i] = (float)cos(i * 0.05);
	for (int k = 0; k < steps && rc == 0; k++) {
		struct tier_tensor g[2] = { { gw, TIER_FP32, TIER_MEM_HOST, IN * OUT }, { gb, TIER_FP32, TIER_MEM_HOST, OUT } };
		struct tier_tensor out[2] = { { w, TIER_FP32, TIER_MEM_HOST, IN * OUT }, { b, TIER_FP32, TIER_MEM_HOST, OUT } };
		struct tier_step_result res;
		double loss = loss_and_grads(w, b, x, t, gw, gb);

		if (k == 0)
			first = loss;
		last = loss;
		if (k % 5 == 0)
			printf("step %3d  loss %.6f\n", k, loss);
		/* The updated parameters come back into w and b (the outputs). */
		rc = step_retrying(o, 2e-3, g, out, &res, k);
		if (rc)
			rc = fail("step", rc);
	}
	free(w);
	free(gw);
	free(b);
	free(gb);
	if (rc)
		return rc;
	printf("loss %.6f -> %.6f over %d steps\n", first, last, steps);
	return last < first ? 0 : 2;
}

int main(int argc, char **argv)
{
	char text[1024];
	struct tier_manifest *m = NULL;
	struct tier_store *s = NULL;
	struct tier_optim *o = NULL;
	struct tier_store_params sp;
	struct tier_optim_params op;
	int steps = argc > 2 ? atoi(argv[2]) : 20, n, rc;

	if (argc < 2 || steps < 1) {
		fprintf(stderr, "usage: train_loop DIR [STEPS]\n");
		return 1;
	}
	if (TIER_VERSION_CHECK() != 0)
		return fail("version", -22);
	/* DRAM 2 MiB for 6 MiB of state: the shards stream through NVMe. */
	n = snprintf(text, sizeof(text),
		     "name: train-loop\ngpu:\n  device: none\ndram:\n  capacity: 2MiB\n"
		     "nvme:\n  paths:\n    - path: %s/\n      capacity: 64MiB\n      create: true\n",
		     argv[1]);
	if ((rc = tier_manifest_parse(text, (size_t)n, "train_loop", 0, &m)))
		return fail("manifest", rc);
	tier_store_params_init(&sp);
	sp.flags = TIER_STORE_SCRATCH;
	if ((rc = tier_store_open(m, &sp, &s)))
		return fail("store", rc);
	tier_optim_params_init(&op);
	op.weight_decay = 0;
	if ((rc = tier_optim_create(s, &op, &o)) ||
	    (rc = tier_optim_add_param(o, "w", IN * OUT, NULL, NULL)) ||
	    (rc = tier_optim_add_param(o, "b", OUT, NULL, NULL)))
		return fail("optimizer", rc);
	rc = run(o, steps);
	tier_optim_destroy(o);
	if (tier_store_close(s) && rc == 0)
		rc = fail("close", -5);
	tier_manifest_free(m);
	return rc;
}
