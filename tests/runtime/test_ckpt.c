/*
 * test_ckpt.c - optimizer checkpoints (runtime/optim/optim_ckpt.c,
 * docs/optimizer.md "Checkpoints"): a run checkpointed, interrupted and
 * resumed ends bit for bit where the uninterrupted run ends, with fp32,
 * bf16 and q8 moments (q8 also exported and imported: the same state read
 * back, the same steps after), clipping, dynamic loss scaling through a skipped step, the
 * emulated GPU lane and several paths; and the crash test: a training
 * loop whose state is four times the DRAM tier, killed with SIGKILL at
 * random moments (in steps, in write-behind, in commits) again and again,
 * also with a fault injected into the commit path, resumes from its last
 * checkpoint every time and ends equal to the uninterrupted run.
 */
#include "config.h"

#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <math.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "common/error.h"
#include "common/fault.h"
#include "t_helpers.h"

#define KiB (1ull << 10)
#define MiB (1ull << 20)
#define U64(x) ((unsigned long long)(x))

static char *g_dir;

static void setup(void)
{
	ts_err_clear();
	g_dir = t_mkdtemp();
}

static void teardown(void)
{
	ts_fault_reset_all();
	t_rmtree(g_dir);
	free(g_dir);
	g_dir = NULL;
}

/* ------------------------------------------------------------ a run */

struct run {
	const char *name;
	const char *moment;     /* fp32 / bf16 / q8 */
	unsigned npaths;
	uint64_t hbm;           /* "host" HBM tier bytes; 0: none */
	double offload;         /* the CPU share */
	double clip;            /* max_grad_norm */
	bool dyn;               /* dynamic loss scaling, an inf gradient at step 7 */
	unsigned keep;
	unsigned every;         /* checkpoint every this many steps */
	unsigned steps;         /* N */
	bool nocsum;            /* checksum: none */
};

#define NPARAMS T_TRAIN_NPARAMS
#define g_numel t_train_numel
#define g_pname t_train_name

static struct tier_manifest *manifest(const char *sub, const struct run *r)
{
	struct tier_manifest *m = NULL;
	char text[4096];
	size_t n = 0;
	int rc;

	n += (size_t)snprintf(text + n, sizeof(text) - n,
			      "name: ckpt\ngpu:\n  device: none\ndram:\n  capacity: 4MiB\n"
			      "optimizer:\n  moment_dtype: %s\n  shard_size: 256KiB\n"
			      "nvme:\n  stripe_unit: 64KiB\n  checksum: %s\n  keep_commits: %u\n  paths:\n",
			      r->moment, r->nocsum ? "none" : "crc32c", r->keep ? r->keep : 2);
	for (unsigned i = 0; i < r->npaths; i++)
		n += (size_t)snprintf(text + n, sizeof(text) - n,
				      "    - path: %s/%s/p%u/\n      capacity: 128MiB\n      create: true\n",
				      g_dir, sub, i);
	rc = tier_manifest_parse(text, n, "ckpt.yaml", 0, &m);
	ck_assert_msg(rc == 0, "manifest: %s\n%s", tier_last_error(), text);
	return m;
}

static int store_open(const struct tier_manifest *m, const struct run *r, struct tier_store **s)
{
	struct tier_store_params sp;

	tier_store_params_init(&sp);
	sp.hbm_backend = r->hbm ? "host" : "none";
	sp.hbm_capacity = r->hbm;
	return tier_store_open(m, &sp, s);
}

#define grad_of t_train_grad
#define lr_at t_train_lr

/* Steps from the optimizer's count + 1 to @to, checkpointing every
 * r->every steps (writing "STEP GEN" lines to @fd when >= 0).  A failed
 * checkpoint (an injected fault) is reported on @fd as "STEP 0" and the
 * run goes on.  Returns 0 or the first error. */
static int steps(struct tier_optim *o, const struct run *r, unsigned to, int fd, bool tolerate)
{
	struct tier_tensor g[NPARAMS];
	float *gb[NPARAMS];
	bool skipped = false;
	int rc = 0;

	for (unsigned p = 0; p < NPARAMS; p++) {
		gb[p] = malloc(g_numel[p] * 4);
		g[p] = (struct tier_tensor){ gb[p], TIER_FP32, TIER_MEM_HOST, g_numel[p] };
	}
	for (unsigned t = (unsigned)tier_optim_step_count(o) + 1; t <= to && !rc; t++) {
		struct tier_step_result res;

		for (unsigned p = 0; p < NPARAMS; p++) {
			float scale = r->dyn ? 1024.0f : 1.0f;

			for (size_t i = 0; i < g_numel[p]; i++)
				gb[p][i] = grad_of(t, p, i) * scale;
		}
		/* A dynamic-scale run overflows once: step 7 is skipped (its
		 * count is not applied; the scaler backs off). */
		if (r->dyn && t == 7 && !skipped) {
			gb[1][5] = INFINITY;
			skipped = true;
		}
		rc = tier_optim_step(o, lr_at(t), g, NULL, &res);
		if (rc)
			break;
		if (res.applied && r->every && res.step % r->every == 0) {
			uint64_t gen = 0;
			int crc = tier_optim_checkpoint(o, &gen);
			char line[64];
			int n;

			if (crc && !tolerate)
				rc = crc;
			n = snprintf(line, sizeof(line), "%" PRIu64 " %" PRIu64 "\n", res.step, crc ? 0 : gen);
			if (fd >= 0 && write(fd, line, (size_t)n) != n)
				rc = -EIO;
		}
		if (!res.applied)
			t = (unsigned)res.step; /* the same step again, without the inf */
	}
	for (unsigned p = 0; p < NPARAMS; p++)
		free(gb[p]);
	return rc;
}

/* A fresh optimizer of the run's parameters, or the checkpointed one. */
static int optim_open(struct tier_store *s, const struct run *r, struct tier_optim **o)
{
	struct tier_optim_params hp;
	int rc = tier_optim_resume(s, NULL, o);

	if (rc != -ENOENT)
		return rc;
	tier_optim_params_init(&hp);
	hp.offload_fraction = r->offload;
	hp.max_grad_norm = r->clip;
	hp.threads = 2;
	if (r->dyn) {
		hp.dynamic_loss_scale = true;
		hp.loss_scale = 1024;
		hp.growth_interval = 3;
	}
	rc = tier_optim_create(s, &hp, o);
	for (unsigned p = 0; p < NPARAMS && !rc; p++) {
		float *init = malloc(g_numel[p] * 4);

		for (size_t i = 0; i < g_numel[p]; i++)
			init[i] = t_train_init(p, i);
		rc = tier_optim_add_param(*o, g_pname[p], g_numel[p], init, NULL);
		free(init);
	}
	return rc;
}

/* The state: master, exp_avg, exp_avg_sq of every parameter, concatenated. */
struct state {
	unsigned char *b;
	size_t n;
	uint64_t step;
};

/* Bytes per element of tier_optim_read's moments (q8: fp32 values). */
static size_t read_mb(enum tier_dtype md)
{
	return md == TIER_Q8 ? 4 : tier_dtype_size(md);
}

static void read_state(struct tier_optim *o, struct state *st)
{
	struct tier_optim_info oi;

	ck_assert_int_eq(tier_optim_info(o, &oi), 0);
	size_t mb = read_mb(oi.moment_dtype), total = 0, at = 0;

	for (unsigned p = 0; p < NPARAMS; p++)
		total += g_numel[p] * (4 + 2 * mb);
	st->b = malloc(total);
	st->n = total;
	st->step = tier_optim_step_count(o);
	for (unsigned p = 0; p < NPARAMS; p++) {
		unsigned char *q = st->b + at;
		int rc = tier_optim_read(o, p, (float *)(void *)q, q + g_numel[p] * 4,
					 q + g_numel[p] * (4 + mb));

		ck_assert_msg(rc == 0, "read: %s", tier_last_error());
		at += g_numel[p] * (4 + 2 * mb);
	}
}

static void expect_equal(const struct state *a, const struct state *b, const char *what)
{
	ck_assert_uint_eq(a->n, b->n);
	ck_assert_msg(a->step == b->step, "%s: step %" PRIu64 ", expected %" PRIu64, what, a->step,
		      b->step);
	for (size_t i = 0; i < a->n; i++)
		if (a->b[i] != b->b[i])
			ck_abort_msg("%s: state differs at byte %zu of %zu", what, i, a->n);
}

/* The uninterrupted run's final state. */
static void reference(const struct run *r, struct state *st)
{
	struct tier_manifest *m = manifest("ref", r);
	struct tier_store *s;
	struct tier_optim *o;
	int rc;

	ck_assert_int_eq(store_open(m, r, &s), 0);
	rc = optim_open(s, r, &o);
	ck_assert_msg(rc == 0, "%s", tier_last_error());
	rc = steps(o, r, r->steps, -1, false);
	ck_assert_msg(rc == 0, "reference: %s", tier_last_error());
	read_state(o, st);
	ck_assert_int_eq(tier_optim_destroy(o), 0);
	ck_assert_int_eq(tier_store_close(s), 0);
	tier_manifest_free(m);
}

/* ------------------------------------------------- interrupted, resumed */

static const struct run resume_runs[] = {
	{ "fp32", "fp32", 1, 0, 1, 0, false, 2, 3, 14, false },
	{ "bf16", "bf16", 2, 0, 1, 0, false, 2, 3, 14, false },
	{ "q8", "q8", 2, 0, 1, 0, false, 2, 3, 14, false },
	{ "q8 GPU lane", "q8", 2, 2 * MiB, 0.5, 0.5, true, 1, 4, 12, false },
	{ "clip", "fp32", 1, 0, 1, 0.5, false, 2, 3, 14, false },
	{ "dynamic scale", "fp32", 1, 0, 1, 0, true, 2, 3, 14, false },
	{ "GPU lane", "fp32", 3, 2 * MiB, 0.5, 0, false, 1, 2, 12, false },
	{ "auto split", "bf16", 2, 2 * MiB, TIER_OFFLOAD_AUTO, 0.5, false, 3, 4, 12, false },
};

START_TEST(test_resume_exact)
{
	const struct run *r = &resume_runs[_i];
	struct tier_manifest *m = manifest("run", r);
	struct state ref, got;
	struct tier_store *s;
	struct tier_optim *o;
	unsigned stop = r->every * 2 + 1; /* one step past a checkpoint, lost */
	int rc;

	reference(r, &ref);
	ck_assert_int_eq(store_open(m, r, &s), 0);
	ck_assert_int_eq(optim_open(s, r, &o), 0);
	ck_assert_int_eq(steps(o, r, stop, -1, false), 0);
	/* Gone without a checkpoint: the steps after the last one are lost. */
	ck_assert_int_eq(tier_optim_destroy(o), 0);
	ck_assert_int_eq(tier_store_close(s), 0);

	ck_assert_int_eq(store_open(m, r, &s), 0);
	/* A new optimizer over a checkpointed one is refused. */
	ck_assert_int_eq(tier_optim_create(s, NULL, &o), -EEXIST);
	rc = tier_optim_resume(s, NULL, &o);
	ck_assert_msg(rc == 0, "resume: %s", tier_last_error());
	ck_assert_uint_eq(tier_optim_step_count(o), r->every * 2);
	ck_assert_uint_eq(tier_optim_nparams(o), NPARAMS);
	for (unsigned p = 0; p < NPARAMS; p++) {
		struct tier_param_info pi;

		ck_assert_int_eq(tier_optim_param_info(o, p, &pi), 0);
		ck_assert_str_eq(pi.name, g_pname[p]);
		ck_assert_uint_eq(pi.numel, g_numel[p]);
	}
	ck_assert_int_eq(steps(o, r, r->steps, -1, false), 0);
	read_state(o, &got);
	expect_equal(&got, &ref, r->name);
	ck_assert_int_eq(tier_optim_destroy(o), 0);
	ck_assert_int_eq(tier_store_close(s), 0);
	free(ref.b);
	free(got.b);
	tier_manifest_free(m);
}
END_TEST

/* ------------------------------------------------- export and import */

#include "formats/safetensors.h"

static const struct run export_runs[] = {
	{ "fp32", "fp32", 1, 0, 1, 0.5, false, 2, 0, 15, false },
	{ "bf16", "bf16", 2, 0, 1, 0, true, 2, 0, 15, false },
	{ "q8", "q8", 2, 0, 1, 0, true, 2, 0, 15, false },
	{ "q8 GPU lane", "q8", 1, 2 * MiB, 0.5, 0.5, false, 2, 0, 15, false },
};

/* Another node: three paths, another stripe unit and shard size. */
static struct tier_manifest *other_manifest(const struct run *r)
{
	struct tier_manifest *m = NULL;
	char text[4096];
	int n, rc;

	n = snprintf(text, sizeof(text),
		     "name: other\ngpu:\n  device: none\ndram:\n  capacity: 6MiB\n"
		     "optimizer:\n  moment_dtype: %s\n  shard_size: 128KiB\n"
		     "nvme:\n  stripe_unit: 128KiB\n  checksum: none\n  paths:\n"
		     "    - path: %s/o/p0/\n      capacity: 64MiB\n      create: true\n"
		     "    - path: %s/o/p1/\n      capacity: 64MiB\n      create: true\n"
		     "    - path: %s/o/p2/\n      capacity: 64MiB\n      create: true\n",
		     r->moment, g_dir, g_dir, g_dir);
	rc = tier_manifest_parse(text, (size_t)n, "other.yaml", 0, &m);
	ck_assert_msg(rc == 0, "manifest: %s", tier_last_error());
	return m;
}

START_TEST(test_export_import)
{
	const struct run *r = &export_runs[_i];
	struct tier_manifest *m = manifest("exp", r), *m2 = other_manifest(r);
	struct state ref, got;
	struct tier_store *s;
	struct tier_optim *o;
	struct st_reader *rd;
	char file[4200];
	size_t mb = !strcmp(r->moment, "bf16") ? 2 : 4, at = 0; /* q8: fp32 values */
	struct tier_store_stats st;
	int rc;

	reference(r, &ref);
	snprintf(file, sizeof(file), "%s/state.safetensors", g_dir);
	ck_assert_int_eq(store_open(m, r, &s), 0);
	ck_assert_int_eq(optim_open(s, r, &o), 0);
	ck_assert_int_eq(steps(o, r, 5, -1, false), 0);
	/* The state is larger than the DRAM tier (3x with fp32, 2x bf16). */
	tier_store_get_stats(s, &st);
	{
		struct tier_optim_info oi;

		ck_assert_int_eq(tier_optim_info(o, &oi), 0);
		ck_assert_uint_gt(oi.state_bytes, st.level[TIER_DRAM].capacity);
	}
	rc = tier_optim_export(o, file);
	ck_assert_msg(rc == 0, "export: %s", tier_last_error());
	read_state(o, &got);
	ck_assert_int_eq(tier_optim_destroy(o), 0);
	ck_assert_int_eq(tier_store_close(s), 0);

	/* The file holds tier_optim_read's bytes, and the metadata its step. */
	ck_assert_int_eq(st_reader_open(file, &rd), 0);
	ck_assert_str_eq(st_reader_meta(rd, "step"), "5");
	ck_assert_str_eq(st_reader_meta(rd, "format"), "tierstore.optimizer");
	for (unsigned p = 0; p < NPARAMS; p++) {
		static const char *const parts[] = { "master", "exp_avg", "exp_avg_sq" };

		for (int k = 0; k < 3; k++) {
			char tn[128];
			size_t i, len = g_numel[p] * (k ? mb : 4);
			unsigned char *b = malloc(len);

			snprintf(tn, sizeof(tn), "%s.%s", parts[k], g_pname[p]);
			ck_assert_int_eq(st_reader_find(rd, tn, &i), 0);
			ck_assert_int_eq(st_reader_pread(rd, i, 0, b, len), 0);
			ck_assert_msg(memcmp(b, got.b + at, len) == 0, "%s differs from tier_optim_read", tn);
			at += len;
			free(b);
		}
	}
	st_reader_close(rd);

	/* Imported on another node: the state reads back as exported (q8:
	 * its fp32 values encode to the same codes and scales), then to step
	 * 15: the uninterrupted run. */
	ck_assert_int_eq(store_open(m2, r, &s), 0);
	rc = tier_optim_import(s, file, NULL, &o);
	ck_assert_msg(rc == 0, "import: %s", tier_last_error());
	ck_assert_uint_eq(tier_optim_step_count(o), 5);
	{
		struct state imp;

		read_state(o, &imp);
		expect_equal(&imp, &got, "imported, read back");
		free(imp.b);
	}
	free(got.b);
	ck_assert_int_eq(steps(o, r, r->steps, -1, false), 0);
	read_state(o, &got);
	expect_equal(&got, &ref, "imported, then 10 steps");
	free(got.b);
	/* Imported twice on one store: the names are taken. */
	{
		struct tier_optim *o2;

		ck_assert_int_eq(tier_optim_import(s, file, NULL, &o2), -EEXIST);
	}
	ck_assert_int_eq(tier_optim_destroy(o), 0);
	ck_assert_int_eq(tier_store_close(s), 0);
	free(ref.b);
	tier_manifest_free(m);
	tier_manifest_free(m2);
}
END_TEST

/* Files that are not an export, or a damaged one, are refused by name. */
START_TEST(test_import_refused)
{
	static const struct {
		const char *meta_key, *meta_val;   /* the one metadata entry changed */
		const char *tensor;                /* a tensor left out (NULL: none) */
		int rc;
		const char *says;
	} cases[] = {
		{ "format", "something.else", NULL, -EBADMSG, "not a tierstore optimizer export" },
		{ "format_version", "9", NULL, -EPROTO, "format_version 9" },
		{ "step", "-3", NULL, -EBADMSG, "'step'" },
		{ "beta1", "abc", NULL, -EBADMSG, "'beta1' = 'abc' is not a number" },
		{ "param.1", "nope", NULL, -ENOENT, "parameter 'nope' has no tensor" },
		{ NULL, NULL, "exp_avg.head", -ENOENT, "no tensor 'exp_avg.head'" },
		{ "nparams", "2", NULL, -EBADMSG, "tensors of no parameter" },
	};
	const struct run r = { "refused", "fp32", 1, 0, 1, 0, false, 2, 0, 2, false };
	struct tier_manifest *m = manifest("src", &r), *m2 = other_manifest(&r);
	struct tier_store *s;
	struct tier_optim *o;
	char file[4200], bad[4200];

	snprintf(file, sizeof(file), "%s/good.safetensors", g_dir);
	snprintf(bad, sizeof(bad), "%s/bad.safetensors", g_dir);
	ck_assert_int_eq(store_open(m, &r, &s), 0);
	ck_assert_int_eq(optim_open(s, &r, &o), 0);
	ck_assert_int_eq(steps(o, &r, 2, -1, false), 0);
	ck_assert_int_eq(tier_optim_export(o, file), 0);
	ck_assert_int_eq(tier_optim_destroy(o), 0);
	ck_assert_int_eq(tier_store_close(s), 0);
	for (size_t c = 0; c < ARRAY_SIZE(cases); c++) {
		struct st_reader *rd;
		struct st_writer *w;
		struct st_desc d[16];
		const char *kv[128];
		size_t nt = 0, nm, nkv = 0;
		int rc;

		ck_assert_int_eq(st_reader_open(file, &rd), 0);
		nm = st_reader_meta_count(rd);
		for (size_t i = 0; i < nm; i++) {
			const char *k, *v;

			st_reader_meta_at(rd, i, &k, &v);
			kv[2 * nkv] = k;
			kv[2 * nkv + 1] = cases[c].meta_key && !strcmp(k, cases[c].meta_key) ? cases[c].meta_val : v;
			nkv++;
		}
		for (size_t i = 0; i < st_reader_count(rd); i++) {
			const struct st_tensor *t = st_reader_tensor(rd, i);

			if (cases[c].tensor && !strcmp(t->name, cases[c].tensor))
				continue;
			d[nt].name = t->name;
			d[nt].dtype = t->dtype;
			d[nt].ndim = t->ndim;
			memcpy(d[nt].shape, t->shape, sizeof(d[nt].shape));
			nt++;
		}
		ck_assert_int_eq(st_writer_open(bad, d, nt, kv, nkv, &w), 0);
		ck_assert_int_eq(st_writer_finish(w), 0);
		st_reader_close(rd);
		ck_assert_int_eq(store_open(m2, &r, &s), 0);
		rc = tier_optim_import(s, bad, NULL, &o);
		ck_assert_msg(rc == cases[c].rc, "case %zu: import gave %d (%s), expected %d: %s", c, rc,
			      tier_strerror(rc), cases[c].rc, tier_last_error());
		ck_assert_msg(strstr(tier_last_error(), cases[c].says), "case %zu: '%s' lacks '%s'", c,
			      tier_last_error(), cases[c].says);
		ck_assert_ptr_nonnull(strstr(tier_last_error(), "bad.safetensors"));
		/* Nothing is left behind: the store takes a good import after. */
		ck_assert_int_eq(tier_optim_import(s, file, NULL, &o), 0);
		ck_assert_int_eq(tier_optim_destroy(o), 0);
		ck_assert_int_eq(tier_store_close(s), 0);
	}
	tier_manifest_free(m);
	tier_manifest_free(m2);
}
END_TEST

/* ------------------------------------------------------ killed for real */

/* The child: trains from wherever the files are to r->steps, reporting
 * each checkpoint on @fd; with @fault, a random commit-path site fails
 * once at a random call. */
static void child(const struct run *r, const struct tier_manifest *m, int fd, unsigned fault,
		  unsigned seed)
{
	static const enum ts_fault_site sites[] = {
		TIER_FAULT_COMMIT_TABLE, TIER_FAULT_COMMIT_SYNC, TIER_FAULT_COMMIT_SLOT,
		TIER_FAULT_COMMIT_SLOT_SYNC, TIER_FAULT_NVME_IO_ERR,
	};
	struct tier_store *s;
	struct tier_optim *o;
	int rc;

	if (fault) {
		enum ts_fault_site site = sites[seed % ARRAY_SIZE(sites)];

		ts_fault_arm(site, 1 + seed / 7 % 3, 1, -EIO);
	}
	rc = store_open(m, r, &s);
	if (!rc)
		rc = optim_open(s, r, &o);
	if (!rc)
		rc = steps(o, r, r->steps, fd, fault != 0);
	if (rc) {
		fprintf(stderr, "child: %s\n", tier_last_error());
		_exit(3);
	}
	tier_optim_destroy(o);
	tier_store_close(s);
	_exit(0);
}

/* The last "STEP GEN" line with a generation read from @fd so far. */
static void read_reports(int fd, uint64_t *step, uint64_t *gen)
{
	char buf[4096];
	ssize_t n;

	while ((n = read(fd, buf, sizeof(buf) - 1)) > 0) {
		char *line = buf, *nl;

		buf[n] = '\0';
		while ((nl = strchr(line, '\n'))) {
			unsigned long long a, b;

			*nl = '\0';
			if (sscanf(line, "%llu %llu", &a, &b) == 2 && b) {
				*step = a;
				*gen = b;
			}
			line = nl + 1;
		}
	}
}

/* How long a child runs from its files' state to the end, undisturbed
 * (the kills are spread over it; nothing asserts on it). */
static uint64_t uninterrupted_ns(const struct run *r, const struct tier_manifest *m)
{
	struct timespec a, b;
	pid_t pid;
	int st;

	clock_gettime(CLOCK_MONOTONIC, &a);
	pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0)
		child(r, m, -1, 0, 0);
	ck_assert_int_eq(waitpid(pid, &st, 0), pid);
	ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0, "an uninterrupted child failed");
	clock_gettime(CLOCK_MONOTONIC, &b);
	return (uint64_t)(b.tv_sec - a.tv_sec) * 1000000000ull + (uint64_t)(b.tv_nsec - a.tv_nsec);
}

/* Removes the crash run's files. */
static void start_over(void)
{
	char p[4200];

	snprintf(p, sizeof(p), "%s/crash", g_dir);
	t_rmtree(p);
}

static const struct run crash_run = { "crash", "fp32", 2, 0, 1, 0.75, false, 2, 3, 24, false };

/* 50 kills per case; under a sanitizer, which runs it several times
 * slower, 6 (the release builds of CI run the 50). TIER_CRASH_KILLS sets
 * another count. */
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define KILLS_DEFAULT 6
#else
#define KILLS_DEFAULT 50
#endif

static unsigned kills_wanted(void)
{
	const char *e = getenv("TIER_CRASH_KILLS");

	return e && atoi(e) > 0 ? (unsigned)atoi(e) : KILLS_DEFAULT;
}

/* The crash test; with @fault, each child's commit path fails once. */
static void killed(bool fault)
{
	const struct run *r = &crash_run;
	struct tier_manifest *m = manifest("crash", r);
	struct state ref;
	unsigned kills = 0, unreported = 0, resumed_at[64] = { 0 };
	uint64_t rng = 12345 + (unsigned)fault;
	uint64_t prev_gen = 0, prev_step = 0;
	uint64_t full_ns = 0;
	unsigned want = kills_wanted();

	reference(r, &ref);
	/* An uninterrupted child's time, to spread the kills over. */
	full_ns = uninterrupted_ns(r, m);
	start_over();
	while (kills < want) {
		int pfd[2], st;
		/* What the files held when this child started: it can only go on. */
		uint64_t rstep = prev_step, rgen = prev_gen, delay;
		struct tier_store *s;
		struct tier_optim *o;
		struct tier_commit_info ci;
		pid_t pid;
		int rc;

		ck_assert_int_eq(pipe2(pfd, O_CLOEXEC), 0);
		/* the child's fault site and call */
		unsigned seed = (unsigned)(t_rnd_next(&rng) >> 32);

		pid = fork();
		ck_assert_int_ge(pid, 0);
		if (pid == 0) {
			close(pfd[0]);
			child(r, m, pfd[1], fault, seed);
		}
		close(pfd[1]);
		/* Anywhere in what is left of the run (it goes on from
		 * prev_step), its start (opening, resuming) too: 64 random
		 * bits, since the run may last seconds (a 32-bit value shifted
		 * gave at most 0.27 s, the start of a slow run). */
		delay = t_rnd_next(&rng) % (full_ns * (r->steps - prev_step + 2) / (r->steps + 2) + 1);
		{
			struct timespec ts = { (time_t)(delay / 1000000000u), (long)(delay % 1000000000u) };

			nanosleep(&ts, NULL);
		}
		if (waitpid(pid, &st, WNOHANG) == 0) {
			kill(pid, SIGKILL);
			ck_assert_int_eq(waitpid(pid, &st, 0), pid);
		}
		/* Killed, or (it may end between the look and the kill) done. */
		if (WIFSIGNALED(st))
			kills++;
		else
			ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0,
				      "kill %u: the child failed on its own (status %d)", kills, st);
		read_reports(pfd[0], &rstep, &rgen);
		close(pfd[0]);

		/* The files reopen at the last checkpoint the child reported,
		 * or a later one it made before it could say so. */
		rc = store_open(m, r, &s);
		ck_assert_msg(rc == 0, "kill %u: reopen: %s", kills, tier_last_error());
		ck_assert_int_eq(tier_store_committed(s, &ci), 0);
		ck_assert_msg(ci.generation >= rgen, "kill %u: generation %" PRIu64 " is older than the reported %" PRIu64,
			      kills, ci.generation, rgen);
		rc = tier_optim_resume(s, NULL, &o);
		prev_gen = ci.generation;
		prev_step = 0;
		if (rc == -ENOENT) {
			ck_assert_uint_eq(rgen, 0); /* killed before its first checkpoint */
			rc = optim_open(s, r, &o);
			ck_assert_msg(rc == 0, "kill %u: %s", kills, tier_last_error());
		} else {
			ck_assert_msg(rc == 0, "kill %u: resume: %s", kills, tier_last_error());
			ck_assert_msg(tier_optim_step_count(o) >= rstep && tier_optim_step_count(o) % r->every == 0,
				      "kill %u: resumed at step %" PRIu64 ", the child reported step %" PRIu64,
				      kills, tier_optim_step_count(o), rstep);
			if (ci.generation > rgen)
				unreported++;
			prev_step = tier_optim_step_count(o);
		}
		/* From here to step N, no checkpoint: equal to the uninterrupted
		 * run, and the files stay at the commit the kill left (these
		 * writes are copied on write, never committed). */
		{
			struct run r2 = *r;
			struct state got;

			r2.every = 0;
			resumed_at[tier_optim_step_count(o) / r->every]++;
			rc = steps(o, &r2, r->steps, -1, false);
			ck_assert_msg(rc == 0, "kill %u: to the end: %s", kills, tier_last_error());
			read_state(o, &got);
			expect_equal(&got, &ref, "a run resumed after a kill");
			free(got.b);
		}
		ck_assert_int_eq(tier_optim_destroy(o), 0);
		ck_assert_int_eq(tier_store_close(s), 0);
		if (WIFEXITED(st)) { /* the child finished: start over from empty files */
			start_over();
			prev_gen = prev_step = 0;
		}
	}
	/* And the last one runs to the end undisturbed, from where it is. */
	{
		pid_t pid = fork();
		int st;
		struct tier_store *s;
		struct tier_optim *o;
		struct state got;

		if (pid == 0)
			child(r, m, -1, 0, 0);
		ck_assert_int_eq(waitpid(pid, &st, 0), pid);
		ck_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0);
		ck_assert_int_eq(store_open(m, r, &s), 0);
		ck_assert_int_eq(tier_optim_resume(s, NULL, &o), 0);
		read_state(o, &got);
		expect_equal(&got, &ref, "the final run");
		free(got.b);
		ck_assert_int_eq(tier_optim_destroy(o), 0);
		ck_assert_int_eq(tier_store_close(s), 0);
	}
	fprintf(stderr, "%s: %u kills at random moments, each resumed, run to step %u and checked bit for bit; %u of them after a commit was durable and before the child reported it; resumed at steps:",
		fault ? "with faults" : "no faults", kills, r->steps, unreported);
	for (unsigned i = 0; i <= r->steps / r->every; i++)
		fprintf(stderr, " %u:%u", i * r->every, resumed_at[i]);
	fprintf(stderr, "\n");
	free(ref.b);
	tier_manifest_free(m);
}

START_TEST(test_killed)
{
	killed(false);
}
END_TEST

START_TEST(test_killed_faulted)
{
	NEED_FAULTS();
	killed(true);
}
END_TEST

/* ------------------------------------- kill, restart, step, kill, roll back */

#include "tiers/nvme_format.h"

/*
 * The kept commits of the run's files, newest first (read from path 0's
 * newer valid slot), and where the newest one's object table lies.
 */
static unsigned kept_gens(const struct tier_manifest *m, uint64_t *gens, uint64_t *table_off)
{
	struct tier_manifest_path mp;
	struct ts_nvme_slot a, b, *s;
	int fd;

	ck_assert_int_eq(tier_manifest_path(m, 0, &mp), 0);
	fd = open(mp.file, O_RDONLY);
	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(pread(fd, &a, sizeof(a), TIER_NVME_SLOT_OFF(0)), (ssize_t)sizeof(a));
	ck_assert_int_eq(pread(fd, &b, sizeof(b), TIER_NVME_SLOT_OFF(1)), (ssize_t)sizeof(b));
	close(fd);
	if (nvme_slot_check(&a) != 0 && nvme_slot_check(&b) != 0)
		return 0;
	s = nvme_slot_check(&a) != 0 ? &b : nvme_slot_check(&b) != 0 ? &a : a.seq > b.seq ? &a : &b;
	for (unsigned i = 0; i < s->ncommits; i++)
		gens[i] = s->c[i].gen;
	*table_off = s->c[0].table_off;
	return s->ncommits;
}

/* tier-stat --check-files on the run's files: every kept commit sound,
 * its data verified where it has checksums, and reachable. */
static void check_files_all_sound(const struct tier_manifest *m, const struct run *r,
				  unsigned kept, const char *when)
{
	struct tier_manifest_path mp[4];
	const char *files[4];
	struct tier_nvme_check_report rep;
	int rc;

	for (unsigned i = 0; i < r->npaths; i++) {
		ck_assert_int_eq(tier_manifest_path(m, i, &mp[i]), 0);
		files[i] = mp[i].file;
	}
	rc = tier_nvme_check_files(files, r->npaths, NULL, NULL, &rep);
	ck_assert_msg(rc == 0, "%s: check-files: %s", when, tier_last_error());
	ck_assert_uint_eq(rep.commits_kept, kept);
	ck_assert_uint_eq(rep.commits_ok, kept);
	ck_assert_uint_eq(rep.commits_reachable, kept);
	ck_assert_uint_eq(rep.units_bad, 0);
	if (!r->nocsum)
		ck_assert_uint_gt(rep.units_checked, 0);
}

/* Reads lines from @fd until one starts with @tag; false at EOF. */
static bool wait_line(int fd, char tag)
{
	char c, first = 0;
	bool bol = true;

	while (read(fd, &c, 1) == 1) {
		if (bol)
			first = c;
		bol = c == '\n';
		if (bol && first == tag)
			return true;
	}
	return false;
}

/* The restarted child: resumes at the files' commit, says "R", then steps
 * to the end saying "S" after each, checkpointing every @every steps. */
static void child_restart(const struct run *r, const struct tier_manifest *m, int fd, unsigned every)
{
	struct run r2 = *r;
	struct tier_store *s;
	struct tier_optim *o;
	int rc;

	r2.every = every;
	rc = store_open(m, r, &s);
	if (!rc)
		rc = optim_open(s, r, &o);
	if (!rc && write(fd, "R\n", 2) != 2)
		rc = -EIO;
	while (!rc && tier_optim_step_count(o) < r->steps) {
		rc = steps(o, &r2, (unsigned)tier_optim_step_count(o) + 1, -1, false);
		if (!rc && write(fd, "S\n", 2) != 2)
			rc = -EIO;
	}
	if (rc) {
		fprintf(stderr, "child: %s\n", tier_last_error());
		_exit(3);
	}
	_exit(0);
}

/* Opens the files (at @gen, 0: the newest), resumes, runs to the end
 * without a checkpoint and compares with @ref; returns the step resumed
 * at. */
static uint64_t resume_check(const struct tier_manifest *m, const struct run *r, uint64_t gen,
			     uint64_t expect_gen, const struct state *ref, const char *what)
{
	struct tier_store_params sp;
	struct tier_store *s;
	struct tier_optim *o;
	struct tier_commit_info ci;
	struct run r2 = *r;
	struct state got;
	uint64_t at;
	int rc;

	tier_store_params_init(&sp);
	sp.generation = gen;
	rc = tier_store_open(m, &sp, &s);
	ck_assert_msg(rc == 0, "%s: open at generation %" PRIu64 ": %s", what, gen, tier_last_error());
	ck_assert_int_eq(tier_store_committed(s, &ci), 0);
	ck_assert_msg(ci.generation == expect_gen, "%s: opened at generation %" PRIu64 ", expected %" PRIu64,
		      what, ci.generation, expect_gen);
	rc = tier_optim_resume(s, NULL, &o);
	ck_assert_msg(rc == 0, "%s: resume at generation %" PRIu64 ": %s", what, ci.generation,
		      tier_last_error());
	at = tier_optim_step_count(o);
	r2.every = 0;
	rc = steps(o, &r2, r->steps, -1, false);
	ck_assert_msg(rc == 0, "%s: generation %" PRIu64 " to the end: %s", what, ci.generation,
		      tier_last_error());
	read_state(o, &got);
	expect_equal(&got, ref, what);
	free(got.b);
	ck_assert_int_eq(tier_optim_destroy(o), 0);
	ck_assert_int_eq(tier_store_close(s), 0);
	return at;
}

static void sleep_ns(uint64_t ns)
{
	struct timespec ts = { (time_t)(ns / 1000000000u), (long)(ns % 1000000000u) };

	nanosleep(&ts, NULL);
}

/* Kills @pid (unless it ended first) and reaps it; true if killed. */
static bool kill_reap(pid_t pid)
{
	int st;

	kill(pid, SIGKILL);
	ck_assert_int_eq(waitpid(pid, &st, 0), pid);
	if (WIFSIGNALED(st))
		return true;
	ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0, "a child failed on its own (status %d)", st);
	return false;
}

/* checksum, keep_commits: each with the fixed seeds below. */
static const struct run rollback_runs[] = {
	{ "crc32c keep 1", "fp32", 2, 0, 1, 0.75, false, 1, 3, 18, false },
	{ "crc32c keep 2", "fp32", 2, 0, 1, 0.75, false, 2, 3, 18, false },
	{ "crc32c keep 3", "fp32", 2, 0, 1, 0.75, false, 3, 3, 18, false },
	{ "none keep 1", "fp32", 2, 0, 1, 0.75, false, 1, 3, 18, true },
	{ "none keep 2", "fp32", 2, 0, 1, 0.75, false, 2, 3, 18, true },
	{ "none keep 3", "fp32", 2, 0, 1, 0.75, false, 3, 3, 18, true },
};

/*
 * Seed bit 0: the restart checkpoints (or only steps); bit 1: the newest
 * table is damaged before the kept commits are opened (the open falls
 * back on its own), else each is opened by generation.  The seeds also
 * place the kills.
 */
static const unsigned rollback_seeds[] = { 0x11, 0x52, 0x93, 0xd4, 0x2a7, 0x6e0 };

START_TEST(test_rollback_killed)
{
	const struct run *r = &rollback_runs[_i];
	struct tier_manifest *m;
	struct state ref;
	uint64_t full_ns, step_ns;
	unsigned opened = 0, trials = 0;
	char sub[32];

	snprintf(sub, sizeof(sub), "rb%d", _i);
	m = manifest(sub, r);
	reference(r, &ref);
	full_ns = uninterrupted_ns(r, m);
	step_ns = full_ns / r->steps;
	for (size_t k = 0; k < ARRAY_SIZE(rollback_seeds); k++) {
		unsigned seed = rollback_seeds[k] * 2654435761u + (unsigned)_i;
		bool restart_ckpt = rollback_seeds[k] & 1, damage = rollback_seeds[k] & 2;
		uint64_t gens[TIER_NVME_MAX_KEEP], toff = 0;
		char dir[4200];
		unsigned kept;
		int pfd[2];
		pid_t pid;

		snprintf(dir, sizeof(dir), "%s/%s", g_dir, sub);
		t_rmtree(dir);
		/* 1. A run killed at a random moment once it has made two
		 * checkpoints: commits older than the newest are kept. */
		ck_assert_int_eq(pipe2(pfd, O_CLOEXEC), 0);
		pid = fork();
		ck_assert_int_ge(pid, 0);
		if (pid == 0) {
			close(pfd[0]);
			child(r, m, pfd[1], 0, 0);
		}
		close(pfd[1]);
		{
			char line[64];
			unsigned reports = 0;
			FILE *f = fdopen(pfd[0], "r");

			while (reports < 2 && fgets(line, sizeof(line), f))
				reports++;
			sleep_ns((seed >> 4) % (2 * r->every * step_ns + 1));
			kill_reap(pid);
			fclose(f);
		}
		/* 2. Restarted: it resumes, steps (and checkpoints, or not),
		 * and is killed again after its first step. */
		ck_assert_int_eq(pipe2(pfd, O_CLOEXEC), 0);
		pid = fork();
		ck_assert_int_ge(pid, 0);
		if (pid == 0) {
			close(pfd[0]);
			child_restart(r, m, pfd[1], restart_ckpt ? r->every : 0);
		}
		close(pfd[1]);
		ck_assert_msg(wait_line(pfd[0], 'R'), "seed %#x: the restart did not resume", rollback_seeds[k]);
		if (wait_line(pfd[0], 'S'))
			sleep_ns((seed >> 12) % (2 * r->every * step_ns + 1));
		kill_reap(pid);
		close(pfd[0]);

		/* 3. Every kept commit is sound, and each reopens and resumes
		 * bit for bit: newest first, each rollback dropping only the
		 * ones already checked. */
		kept = kept_gens(m, gens, &toff);
		ck_assert_uint_ge(kept, 1);
		ck_assert_uint_eq(kept, r->keep < gens[0] ? r->keep : gens[0]);
		check_files_all_sound(m, r, kept, "after kill, restart, kill");
		for (unsigned i = 0; i < kept; i++) {
			char what[128];

			snprintf(what, sizeof(what), "%s, seed %#x, generation %" PRIu64 " of %u kept", r->name,
				 rollback_seeds[k], gens[i], kept);
			if (i == 0 && damage) {
				/* The newest table damaged: the open falls back to
				 * the next kept commit, or (keep 1) refuses and
				 * changes nothing. */
				struct tier_manifest_path mp;
				struct tier_store *s;
				uint64_t g2[TIER_NVME_MAX_KEEP], t2;
				int fd, rc;
				unsigned char c;

				ck_assert_int_eq(tier_manifest_path(m, 0, &mp), 0);
				fd = open(mp.file, O_RDWR);
				ck_assert_int_ge(fd, 0);
				/* data_off: 64 KiB units, the area after 12 KiB. */
				ck_assert_int_eq(pread(fd, &c, 1, (off_t)(64 * KiB + toff + 40)), 1);
				c ^= 0x5a;
				ck_assert_int_eq(pwrite(fd, &c, 1, (off_t)(64 * KiB + toff + 40)), 1);
				close(fd);
				if (kept == 1) {
					rc = store_open(m, r, &s);
					ck_assert_int_eq(rc, -EBADMSG);
					ck_assert_ptr_nonnull(strstr(tier_last_error(), "nothing was changed"));
					ck_assert_uint_eq(kept_gens(m, g2, &t2), 1);
					ck_assert_uint_eq(g2[0], gens[0]);
					break;
				}
				resume_check(m, r, 0, gens[1], &ref, what);
				opened++;
				i++; /* the open fell back to it */
				continue;
			}
			resume_check(m, r, i == 0 ? 0 : gens[i], gens[i], &ref, what);
			opened++;
		}
		trials++;
	}
	fprintf(stderr, "%s: %u trials of kill, restart, step, kill; %u kept commits reopened and resumed bit for bit\n",
		r->name, trials, opened);
	free(ref.b);
	tier_manifest_free(m);
}
END_TEST

static Suite *ckpt_suite(void)
{
	Suite *s = suite_create("ckpt");
	TCase *tc;

	tc = tcase_create("resume");
	tcase_add_unchecked_fixture(tc, t_case_setup, t_case_teardown);
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_set_timeout(tc, 120);
	tcase_add_loop_test(tc, test_resume_exact, 0, (int)ARRAY_SIZE(resume_runs));
	suite_add_tcase(s, tc);

	tc = tcase_create("export");
	tcase_add_unchecked_fixture(tc, t_case_setup, t_case_teardown);
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_set_timeout(tc, 120);
	tcase_add_loop_test(tc, test_export_import, 0, (int)ARRAY_SIZE(export_runs));
	tcase_add_test(tc, test_import_refused);
	suite_add_tcase(s, tc);

	tc = tcase_create("rollback");
	tcase_set_timeout(tc, 600);
	tcase_add_unchecked_fixture(tc, t_case_setup, t_case_teardown);
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_loop_test(tc, test_rollback_killed, 0, (int)ARRAY_SIZE(rollback_runs));
	suite_add_tcase(s, tc);

	tc = tcase_create("killed");
	tcase_add_unchecked_fixture(tc, t_case_setup, t_case_teardown);
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_set_timeout(tc, 600);
	tcase_add_test(tc, test_killed);
	suite_add_tcase(s, tc);

	/* Its own test in tests/meson.build (CK_RUN_CASE), as the others. */
	tc = t_tcase_faults("killed-faults");
	tcase_add_unchecked_fixture(tc, t_case_setup, t_case_teardown);
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_set_timeout(tc, 600);
	tcase_add_test(tc, test_killed_faulted);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return t_run_suite(ckpt_suite());
}
