/*
 * test_gpu_zero.c - the partitioned optimizer over NCCL on one GPU (issue
 * 19): a one-rank "nccl" communicator (an NCCL unique id made here, rank 0
 * of 1) passed as tier_optim_params.comm, against the same optimizer
 * without one, both on the "cuda" HBM backend with their own stores, fed
 * the same device gradients.  A comm of one rank keeps the whole of each
 * parameter and moves no gradient or output through the comm (the piece
 * is the pushed gradient, read in place; include/tierstore.h): a step's
 * collectives are its two exchanges over NCCL, the norms and the outcome.
 * So the device outputs and the state read back must equal the plain
 * optimizer's bit for bit after every step.  NCCL cannot put two ranks on
 * one GPU: several ranks over NCCL need a machine with several GPUs.
 *
 * Cases: fp32 moments, gradients and outputs, every shard on the GPU lane;
 * bf16 moments, gradients and outputs, half the shards on each lane,
 * clipped.  Six steps each, the state through NVMe (1 MiB HBM, 2 MiB DRAM,
 * ~4.5 MB of state).  Without a CUDA build with NCCL, or without a device,
 * the program exits 77 (SKIP).
 */
#include "config.h"

#include <check.h>
#include <stdio.h>
#include <stdlib.h>

#include "t_helpers.h"

#if TIER_HAVE_CUDA && TIER_HAVE_NCCL

#include <cuda_runtime_api.h>
#include <math.h>
#include <nccl.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "tierstore.h"

#define KiB (1ull << 10)
#define MiB (1ull << 20)
#define NP 4
#define STEPS 6

#define CU(call)                                                                    \
	do {                                                                        \
		cudaError_t cu_e_ = (call);                                         \
		ck_assert_msg(cu_e_ == cudaSuccess, "%s: %s", #call,                \
			      cudaGetErrorString(cu_e_));                           \
	} while (0)

static const size_t k_sizes[NP] = { 1, 4099, 70000, 300000 };

static const struct zcase {
	const char *name;
	int md, dt;            /* moments; gradients and outputs */
	double offload, clip;
} k_cases[] = {
	{ "fp32, all on the GPU lane", TIER_FP32, TIER_FP32, 0.0, 0.0 },
	{ "bf16, half on each lane, clipped", TIER_BF16, TIER_BF16, 0.5, 0.5 },
};

struct side {
	char *dir;
	struct tier_manifest *man;
	struct tier_store *s;
	struct tier_optim *o;
};

static void side_open(struct side *w, const struct zcase *c, struct tier_comm *comm,
		      float *const init[NP])
{
	struct tier_store_params sp = { .size = sizeof(struct tier_store_params),
		.dram_capacity = 2 * MiB, .hbm_backend = "cuda", .hbm_capacity = 1 * MiB,
		.flags = TIER_STORE_SCRATCH };
	struct tier_optim_params hp;
	char text[1024];
	int n, rc;

	w->dir = t_mkdtemp();
	n = snprintf(text, sizeof(text),
		     "gpu:\n  device: 0\ndram:\n  capacity: 2MiB\noptimizer:\n  shard_size: 64KiB\n"
		     "nvme:\n  stripe_unit: 64KiB\n"
		     "  paths:\n    - path: %s/nvme/\n      capacity: 64MiB\n      create: true\n",
		     w->dir);
	rc = tier_manifest_parse(text, (size_t)n, "gpu-zero.yaml", 0, &w->man);
	ck_assert_msg(rc == 0, "manifest: %s", tier_last_error());
	rc = tier_store_open(w->man, &sp, &w->s);
	ck_assert_msg(rc == 0, "store open: %s", tier_last_error());
	tier_optim_params_init(&hp);
	hp.moment_dtype = c->md;
	hp.offload_fraction = c->offload;
	hp.max_grad_norm = c->clip;
	hp.shard_size = 64 * KiB;
	hp.threads = 2;
	hp.comm = comm;
	rc = tier_optim_create(w->s, &hp, &w->o);
	ck_assert_msg(rc == 0, "optim create: %s", tier_last_error());
	for (int i = 0; i < NP; i++) {
		char name[32];

		snprintf(name, sizeof(name), "layer%d", i);
		rc = tier_optim_add_param(w->o, name, k_sizes[i], init[i], NULL);
		ck_assert_msg(rc == 0, "add %s: %s", name, tier_last_error());
	}
}

static void side_close(struct side *w)
{
	ck_assert_int_eq(tier_optim_destroy(w->o), 0);
	ck_assert_int_eq(tier_store_close(w->s), 0);
	tier_manifest_free(w->man);
	t_rmtree(w->dir);
	free(w->dir);
}

START_TEST(zero_nccl_one_rank)
{
	const struct zcase *c = &k_cases[_i];
	size_t es = tier_dtype_size((enum tier_dtype)c->dt), ms = tier_dtype_size((enum tier_dtype)c->md);
	struct tier_comm_params cp;
	struct tier_comm *comm = NULL;
	ncclUniqueId id;
	struct side a, b;
	float *init[NP];
	void *dg[NP], *douta[NP], *doutb[NP];
	uint64_t seed = 0x51ed + (uint64_t)_i;
	int rc;

	CU(cudaSetDevice(0));
	ck_assert_int_eq(ncclGetUniqueId(&id), ncclSuccess);
	tier_comm_params_init(&cp);
	cp.backend = "nccl";
	cp.nccl_id = &id;
	cp.rank = 0;
	cp.nranks = 1;
	cp.device = 0;
	cp.timeout_s = 60;
	rc = tier_comm_open(&cp, &comm);
	ck_assert_msg(rc == 0, "nccl comm: %s", tier_last_error());
	ck_assert_str_eq(tier_comm_backend(comm), "nccl");
	for (int i = 0; i < NP; i++) {
		init[i] = malloc(k_sizes[i] * 4);
		ck_assert_ptr_nonnull(init[i]);
		for (size_t k = 0; k < k_sizes[i]; k++)
			init[i][k] = (float)((double)(t_rnd_next(&seed) >> 11) * 0x1p-53 - 0.5);
		CU(cudaMalloc(&dg[i], k_sizes[i] * es));
		CU(cudaMalloc(&douta[i], k_sizes[i] * es));
		CU(cudaMalloc(&doutb[i], k_sizes[i] * es));
	}
	side_open(&a, c, comm, init);
	side_open(&b, c, NULL, init);
	for (int st = 0; st < STEPS; st++) {
		struct tier_tensor g[NP], oa[NP], ob[NP];
		struct tier_step_result ra, rb;

		for (int i = 0; i < NP; i++) {
			size_t n = k_sizes[i];
			unsigned char *h = malloc(n * es);

			ck_assert_ptr_nonnull(h);
			for (size_t k = 0; k < n; k++) {
				float x = (float)((double)(t_rnd_next(&seed) >> 11) * 0x1p-52 - 1.0);

				if (es == 4) {
					memcpy(h + 4 * k, &x, 4);
				} else {
					uint32_t u;

					memcpy(&u, &x, 4);
					((uint16_t *)(void *)h)[k] = (uint16_t)(u >> 16);
				}
			}
			CU(cudaMemcpy(dg[i], h, n * es, cudaMemcpyHostToDevice));
			free(h);
			g[i] = (struct tier_tensor){ dg[i], (enum tier_dtype)c->dt, TIER_MEM_DEVICE, n };
			oa[i] = (struct tier_tensor){ douta[i], (enum tier_dtype)c->dt, TIER_MEM_DEVICE, n };
			ob[i] = (struct tier_tensor){ doutb[i], (enum tier_dtype)c->dt, TIER_MEM_DEVICE, n };
		}
		ck_assert_int_eq(tier_optim_begin(a.o, TIER_LR_KEEP), 0);
		for (int i = NP - 1; i >= 0; i--) {
			rc = tier_optim_push(a.o, (uint32_t)i, &g[i], &oa[i]);
			ck_assert_msg(rc == 0, "push %d: %s", i, tier_last_error());
		}
		rc = tier_optim_end(a.o, &ra);
		ck_assert_msg(rc == 0, "%s: step %d: end: %s", c->name, st, tier_last_error());
		rc = tier_optim_step(b.o, TIER_LR_KEEP, g, ob, &rb);
		ck_assert_msg(rc == 0, "%s: step %d: plain: %s", c->name, st, tier_last_error());
		ck_assert(ra.applied && rb.applied);
		ck_assert_int_eq(ra.world, 1);
		ck_assert_uint_eq(ra.collectives, 2); /* the norm and the outcome exchanges */
		printf("%s: step %d: norm %.9g (plain %.9g), clip %.9g, %u collectives, %.3f ms in flight, %.3f ms waited\n",
		       c->name, st, ra.grad_norm, rb.grad_norm, ra.clip_coef, ra.collectives,
		       ra.comm_s * 1e3, ra.comm_wait_s * 1e3);
		for (int i = 0; i < NP; i++) {
			size_t n = k_sizes[i];
			unsigned char *x = malloc(n * es), *y = malloc(n * es);

			CU(cudaMemcpy(x, douta[i], n * es, cudaMemcpyDeviceToHost));
			CU(cudaMemcpy(y, doutb[i], n * es, cudaMemcpyDeviceToHost));
			ck_assert_msg(memcmp(x, y, n * es) == 0, "%s: step %d: layer%d: outputs differ",
				      c->name, st, i);
			free(x);
			free(y);
		}
	}
	for (int i = 0; i < NP; i++) {
		size_t n = k_sizes[i];
		float *pa = malloc(n * 4), *pb = malloc(n * 4);
		void *ma = malloc(n * ms), *mb = malloc(n * ms), *va = malloc(n * ms), *vb = malloc(n * ms);

		ck_assert_int_eq(tier_optim_read(a.o, (uint32_t)i, pa, ma, va), 0);
		ck_assert_int_eq(tier_optim_read(b.o, (uint32_t)i, pb, mb, vb), 0);
		ck_assert_msg(!memcmp(pa, pb, n * 4) && !memcmp(ma, mb, n * ms) && !memcmp(va, vb, n * ms),
			      "%s: layer%d: the state differs", c->name, i);
		free(pa);
		free(pb);
		free(ma);
		free(mb);
		free(va);
		free(vb);
		CU(cudaFree(dg[i]));
		CU(cudaFree(douta[i]));
		CU(cudaFree(doutb[i]));
		free(init[i]);
	}
	side_close(&a);
	side_close(&b);
	ck_assert_int_eq(tier_comm_close(comm), 0);
}
END_TEST

static Suite *gpu_zero_suite(void)
{
	Suite *s = suite_create("gpu-zero");
	TCase *tc = tcase_create("nccl");

	tcase_add_unchecked_fixture(tc, t_case_setup, t_case_teardown);
	tcase_set_timeout(tc, 300);
	tcase_add_loop_test(tc, zero_nccl_one_rank, 0, (int)ARRAY_SIZE(k_cases));
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	if (!t_gpu_present(NULL))
		return T_EXIT_SKIP;
	return t_run_suite(gpu_zero_suite());
}

#else

int main(void)
{
	fprintf(stderr, "no NCCL: this build has no CUDA with NCCL (meson -Dcuda=enabled -Dnccl=enabled)\n");
	return T_EXIT_SKIP;
}

#endif
