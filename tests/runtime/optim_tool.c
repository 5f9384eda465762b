/*
 * optim_tool - the optimizer side of tests/runtime/test_export.py (pytest): trains
 * the shared test run (tests/helpers/t_train_*) on a store whose state is
 * larger than its DRAM tier, exports it, imports files Python wrote, and
 * dumps what tier_optim_read returns, for Python's safetensors and torch
 * to compare bit for bit.
 *
 *   optim_tool train DIR MOMENT STEPS [EXPORT] DUMP
 *       a fresh store in DIR (2 paths, 4 MiB of DRAM), STEPS steps,
 *       exported to EXPORT unless it is "-", the state dumped to DUMP.*.bin
 *   optim_tool import FILE DIR STEPS DUMP
 *       FILE imported into a fresh store in DIR of another geometry (3
 *       paths, another stripe unit and shard size), trained on to step
 *       STEPS, dumped to DUMP.*.bin
 *
 * DUMP.NAME.master.bin etc. hold the raw bytes (fp32, or the moment dtype).
 * Exit status 0, or 1 with the error on stderr.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "t_helpers.h"
#include "tierstore.h"

static int fail(const char *what)
{
	fprintf(stderr, "optim_tool: %s: %s\n", what, tier_last_error());
	return 1;
}

static int open_store(const char *dir, const char *moment, bool other, struct tier_store **s,
		      struct tier_manifest **m)
{
	char text[4096];
	int n;

	if (!other)
		n = snprintf(text, sizeof(text),
			     "name: tool\ngpu:\n  device: none\ndram:\n  capacity: 4MiB\n"
			     "optimizer:\n  moment_dtype: %s\n  shard_size: 256KiB\n"
			     "nvme:\n  stripe_unit: 64KiB\n  paths:\n"
			     "    - path: %s/p0/\n      capacity: 64MiB\n      create: true\n"
			     "    - path: %s/p1/\n      capacity: 64MiB\n      create: true\n",
			     moment, dir, dir);
	else
		n = snprintf(text, sizeof(text),
			     "name: other\ngpu:\n  device: none\ndram:\n  capacity: 6MiB\n"
			     "optimizer:\n  shard_size: 128KiB\n"
			     "nvme:\n  stripe_unit: 128KiB\n  checksum: none\n  paths:\n"
			     "    - path: %s/p0/\n      capacity: 64MiB\n      create: true\n"
			     "    - path: %s/p1/\n      capacity: 64MiB\n      create: true\n"
			     "    - path: %s/p2/\n      capacity: 64MiB\n      create: true\n",
			     dir, dir, dir);
	if (tier_manifest_parse(text, (size_t)n, "tool.yaml", 0, m))
		return fail("manifest");
	if (tier_store_open(*m, NULL, s))
		return fail("store");
	return 0;
}

static int train_to(struct tier_optim *o, unsigned to)
{
	struct tier_tensor g[T_TRAIN_NPARAMS];

	for (unsigned p = 0; p < T_TRAIN_NPARAMS; p++)
		g[p] = (struct tier_tensor){ malloc(t_train_numel[p] * 4), TIER_FP32, TIER_MEM_HOST,
					     t_train_numel[p] };
	for (unsigned t = (unsigned)tier_optim_step_count(o) + 1; t <= to; t++) {
		for (unsigned p = 0; p < T_TRAIN_NPARAMS; p++)
			for (size_t i = 0; i < t_train_numel[p]; i++)
				((float *)g[p].ptr)[i] = t_train_grad(t, p, i);
		if (tier_optim_step(o, t_train_lr(t), g, NULL, NULL))
			return fail("step");
	}
	for (unsigned p = 0; p < T_TRAIN_NPARAMS; p++)
		free(g[p].ptr);
	return 0;
}

static int dump(struct tier_optim *o, const char *prefix)
{
	struct tier_optim_info oi;

	if (tier_optim_info(o, &oi))
		return fail("info");
	size_t mb = tier_dtype_size(oi.moment_dtype);

	for (uint32_t p = 0; p < tier_optim_nparams(o); p++) {
		struct tier_param_info pi;

		if (tier_optim_param_info(o, p, &pi))
			return fail("param_info");
		size_t n = pi.numel;
		void *part[3] = { malloc(n * 4), malloc(n * mb), malloc(n * mb) };
		static const char *const names[3] = { "master", "exp_avg", "exp_avg_sq" };

		if (tier_optim_read(o, p, part[0], part[1], part[2]))
			return fail("read");
		for (int k = 0; k < 3; k++) {
			char path[4096];
			FILE *f;

			snprintf(path, sizeof(path), "%s.%s.%s.bin", prefix, pi.name, names[k]);
			f = fopen(path, "wb");
			if (!f || fwrite(part[k], k ? mb : 4, n, f) != n || fclose(f) != 0) {
				fprintf(stderr, "optim_tool: %s: %s\n", path, strerror(errno));
				return 1;
			}
			free(part[k]);
		}
	}
	return 0;
}

int main(int argc, char **argv)
{
	struct tier_manifest *m = NULL;
	struct tier_store *s = NULL;
	struct tier_optim *o = NULL;
	int rc;

	if (argc == 7 && !strcmp(argv[1], "train")) {
		struct tier_optim_params hp;

		if ((rc = open_store(argv[2], argv[3], false, &s, &m)))
			return rc;
		tier_optim_params_init(&hp);
		hp.max_grad_norm = 0.5;
		if (tier_optim_create(s, &hp, &o))
			return fail("create");
		for (unsigned p = 0; p < T_TRAIN_NPARAMS; p++) {
			float *init = malloc(t_train_numel[p] * 4);

			for (size_t i = 0; i < t_train_numel[p]; i++)
				init[i] = t_train_init(p, i);
			if (tier_optim_add_param(o, t_train_name[p], t_train_numel[p], init, NULL))
				return fail("add_param");
			free(init);
		}
		if ((rc = train_to(o, (unsigned)atoi(argv[4]))))
			return rc;
		if (strcmp(argv[5], "-") && tier_optim_export(o, argv[5]))
			return fail("export");
		rc = dump(o, argv[6]);
	} else if (argc == 6 && !strcmp(argv[1], "import")) {
		if ((rc = open_store(argv[3], NULL, true, &s, &m)))
			return rc;
		if (tier_optim_import(s, argv[2], NULL, &o))
			return fail("import");
		if ((rc = train_to(o, (unsigned)atoi(argv[4]))))
			return rc;
		rc = dump(o, argv[5]);
	} else {
		fprintf(stderr, "usage: optim_tool train DIR MOMENT STEPS EXPORT|- DUMP\n"
				"       optim_tool import FILE DIR STEPS DUMP\n");
		return 2;
	}
	if (tier_optim_destroy(o) || tier_store_close(s))
		return fail("close");
	tier_manifest_free(m);
	return rc;
}
