/*
 * test_null.c - every public function given NULL for each of its pointer
 * arguments (docs/api.md, "NULL arguments"), table-driven over the whole
 * public header.
 *
 * One row per (function, pointer argument): the call with NULL there and
 * valid values elsewhere (a store opened from a manifest with a DRAM tier
 * and one NVMe path in a scratch directory, an object on it, an NVMe
 * object, an optimizer with one parameter, the store's live segment).
 * Each row runs in its own process (a loop test), so a crash fails that
 * row alone.  Kinds of row:
 *  - INT: returns -EINVAL, and tier_last_error() has "FN: ARG is NULL";
 *  - PTR, ZERO: returns NULL / 0 (false, 0 bytes) with the same detail;
 *  - VAL: returns the documented value (want) with the same detail;
 *  - VOID: returns, having done nothing, with the same detail;
 *  - NOOP: a close or free function: NULL is a no-op returning 0.
 * Optional arguments (documented "NULL: none" / "may be NULL") have no
 * row: the suites of their modules call them so.
 *
 * null_exports reads tierstore.map ($TIER_MAP) and checks that every
 * exported function has a row here or is in the exemption list below
 * (with the reason), so a new public function cannot come without its
 * NULL rows; and that every function named here is exported.
 */
#include "config.h"

#include <check.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "t_helpers.h"
#include "tierstore/toolkit.h"

#define OBJ_BYTES (64u << 10)

struct fx {
	char *dir;
	struct tier_manifest *m;
	struct tier_store *s;
	struct tier_nvme *n;
	struct tier_obj *o;
	struct tier_nvme_obj *no;
	struct tier_optim *op;
	struct tier_live *l;
	struct tier_pool *pool;
	struct tier_tensor grad;
	struct tier_group_params gp;
	struct tier_adam_params ap;
	struct tier_adam_tensors at;
	struct tier_loss_scaler ls;
	float g[64], p[64], m1[64], m2[64];
	char buf[OBJ_BYTES];
};

static struct fx F;

static void fx_open(struct fx *f)
{
	struct tier_store_params sp;
	char text[1024];
	int n, rc;

	memset(f, 0, sizeof(*f));
	f->dir = t_mkdtemp();
	n = snprintf(text, sizeof(text),
		     "gpu:\n  device: none\ndram:\n  capacity: 16MiB\n"
		     "optimizer:\n  shard_size: 64KiB\n"
		     "nvme:\n  stripe_unit: 64KiB\n  direct: false\n"
		     "  paths:\n    - path: %s/nvme/\n      capacity: 64MiB\n      create: true\n",
		     f->dir);
	ck_assert_int_lt(n, (int)sizeof(text));
	rc = tier_manifest_parse(text, (size_t)n, "null-test.yaml", 0, &f->m);
	ck_assert_msg(rc == 0, "manifest: %s", tier_last_error());
	tier_store_params_init(&sp);
	sp.hbm_backend = "none";
	sp.flags = TIER_STORE_SCRATCH;
	rc = tier_store_open(f->m, &sp, &f->s);
	ck_assert_msg(rc == 0, "store: %s", tier_last_error());
	f->n = tier_store_nvme(f->s);
	ck_assert_ptr_nonnull(f->n);
	rc = tier_obj_create(f->s, "obj", OBJ_BYTES, &f->o);
	ck_assert_msg(rc == 0, "obj: %s", tier_last_error());
	rc = tier_nvme_obj_create(f->n, "nobj", OBJ_BYTES, &f->no);
	ck_assert_msg(rc == 0, "nvme obj: %s", tier_last_error());
	rc = tier_optim_create(f->s, NULL, &f->op);
	ck_assert_msg(rc == 0, "optim: %s", tier_last_error());
	rc = tier_optim_add_param(f->op, "w", 64, NULL, NULL);
	ck_assert_msg(rc == 0, "param: %s", tier_last_error());
	if (tier_store_stats_path(f->s))
		tier_live_open(tier_store_stats_path(f->s), &f->l);
	rc = tier_pool_create(1, &f->pool);
	ck_assert_msg(rc == 0, "pool: %s", tier_last_error());
	f->grad = (struct tier_tensor){ f->g, TIER_FP32, TIER_MEM_HOST, 64 };
	tier_group_params_init(&f->gp);
	tier_adam_params_init(&f->ap);
	f->at = (struct tier_adam_tensors){ .n = 64, .param = f->p, .exp_avg = f->m1,
		.exp_avg_sq = f->m2, .moment_dtype = TIER_FP32, .grad = f->g,
		.grad_dtype = TIER_FP32, .out_dtype = TIER_FP32 };
	tier_loss_scaler_init(&f->ls, 1, 1, 2, 0.5, 1000, 2);
}

static void fx_close(struct fx *f)
{
	tier_live_close(f->l);
	ck_assert_int_eq(tier_optim_destroy(f->op), 0);
	ck_assert_int_eq(tier_nvme_obj_destroy(f->n, f->no), 0);
	ck_assert_int_eq(tier_obj_destroy(f->s, f->o), 0);
	ck_assert_int_eq(tier_store_close(f->s), 0);
	tier_manifest_free(f->m);
	tier_pool_destroy(f->pool);
	t_rmtree(f->dir);
	free(f->dir);
}

static void io_cb(void *arg, int result, const char *detail)
{
	(void)arg;
	(void)result;
	(void)detail;
}

/*
 * The rows: X(KIND, WANT, FN, ARG, CALL).  f is the fixture; NEEDS_LIVE
 * rows are skipped in a build whose store publishes no segment.
 */
#define EINV (-EINVAL)
#define NULL_ROWS(X)                                                                      \
	X(INT, EINV, tier_options_print, out, tier_options_print(NULL))                  \
	X(INT, EINV, tier_dtype_parse, name, tier_dtype_parse(NULL, &(enum tier_dtype){ 0 })) \
	X(INT, EINV, tier_dtype_parse, out, tier_dtype_parse("fp32", NULL))              \
	X(INT, EINV, tier_pool_create, out, tier_pool_create(1, NULL))                   \
	X(NOOP, 0, tier_pool_destroy, pool, (tier_pool_destroy(NULL), 0))                \
	X(ZERO, 0, tier_pool_size, pool, tier_pool_size(NULL))                           \
	X(INT, EINV, tier_ticket_wait, tk, tier_ticket_wait(NULL))                       \
	X(ZERO, 0, tier_lat_quantile_ns, hist, tier_lat_quantile_ns(NULL, 0.5))          \
	X(VOID, 0, tier_adam_params_init, p, (tier_adam_params_init(NULL), 0))           \
	X(INT, EINV, tier_adam_step, p, tier_adam_step(f->pool, NULL, &f->at))           \
	X(INT, EINV, tier_adam_step, t, tier_adam_step(f->pool, &f->ap, NULL))           \
	X(INT, EINV, tier_adam_roofline, t, tier_adam_roofline(f->pool, NULL))           \
	X(INT, EINV, tier_gpu_alloc, ptr, tier_gpu_alloc(0, TIER_GPU_DEVICE, 64, NULL))  \
	X(NOOP, 0, tier_gpu_free, ptr, (tier_gpu_free(TIER_GPU_DEVICE, NULL), 0))        \
	X(INT, EINV, tier_gpu_copy, dst, tier_gpu_copy(NULL, f->p, 64))                  \
	X(INT, EINV, tier_gpu_copy, src, tier_gpu_copy(f->p, NULL, 64))                  \
	X(INT, EINV, tier_adam_step_gpu, p, tier_adam_step_gpu(0, NULL, &f->at))         \
	X(INT, EINV, tier_adam_step_gpu, t, tier_adam_step_gpu(0, &f->ap, NULL))         \
	X(INT, EINV, tier_adam_roofline_gpu, t, tier_adam_roofline_gpu(0, NULL))         \
	X(INT, EINV, tier_q8_decode, codes, tier_q8_decode(NULL, f->m2, 64, TIER_Q8_EXP_AVG, f->m1)) \
	X(INT, EINV, tier_q8_decode, scales, tier_q8_decode(f->p, NULL, 64, TIER_Q8_EXP_AVG, f->m1)) \
	X(INT, EINV, tier_q8_decode, out, tier_q8_decode(f->p, f->m2, 64, TIER_Q8_EXP_AVG, NULL)) \
	X(INT, EINV, tier_q8_encode, in, tier_q8_encode(NULL, 64, TIER_Q8_EXP_AVG, f->p, f->m2)) \
	X(INT, EINV, tier_q8_encode, codes, tier_q8_encode(f->g, 64, TIER_Q8_EXP_AVG, NULL, f->m2)) \
	X(INT, EINV, tier_q8_encode, scales, tier_q8_encode(f->g, 64, TIER_Q8_EXP_AVG, f->p, NULL)) \
	X(INT, EINV, tier_grad_check, grad,                                              \
	  tier_grad_check(f->pool, NULL, TIER_FP32, 64, &(struct tier_grad_stats){ 0 })) \
	X(INT, EINV, tier_grad_check, acc, tier_grad_check(f->pool, f->g, TIER_FP32, 64, NULL)) \
	X(INT, EINV, tier_loss_scaler_init, s, tier_loss_scaler_init(NULL, 1, 1, 2, 0.5, 1000, 2)) \
	X(ZERO, 0, tier_loss_scaler_update, s, tier_loss_scaler_update(NULL, false))     \
	X(INT, EINV, tier_gpu_count, count, tier_gpu_count(NULL, NULL, 0))               \
	X(INT, EINV, tier_manifest_load, path, tier_manifest_load(NULL, &(struct tier_manifest *){ 0 }))          \
	X(INT, EINV, tier_manifest_load, out, tier_manifest_load("x.yaml", NULL))        \
	X(INT, EINV, tier_manifest_parse, text, tier_manifest_parse(NULL, 4, "n", 0, &(struct tier_manifest *){ 0 })) \
	X(INT, EINV, tier_manifest_parse, out, tier_manifest_parse("{}", 2, "n", 0, NULL)) \
	X(INT, EINV, tier_manifest_load_rank, path, tier_manifest_load_rank(NULL, 0, NULL, &(struct tier_manifest *){ 0 })) \
	X(INT, EINV, tier_manifest_load_rank, out, tier_manifest_load_rank("x.yaml", 0, NULL, NULL)) \
	X(INT, EINV, tier_manifest_parse_rank, text, tier_manifest_parse_rank(NULL, 4, "n", 0, NULL, &(struct tier_manifest *){ 0 })) \
	X(INT, EINV, tier_manifest_parse_rank, out, tier_manifest_parse_rank("{}", 2, "n", 0, NULL, NULL)) \
	X(INT, EINV, tier_rank_from_env, out, tier_rank_from_env(NULL))                  \
	X(INT, EINV, tier_manifest_resolve, out, tier_manifest_resolve("x.yaml", NULL))  \
	X(INT, EINV, tier_manifest_default, out, tier_manifest_default(NULL))            \
	X(INT, EINV, tier_manifest_default_text, out, tier_manifest_default_text(NULL))  \
	X(INT, EINV, tier_manifest_default_in, dir, tier_manifest_default_in(NULL, &(struct tier_manifest *){ 0 })) \
	X(INT, EINV, tier_manifest_default_in, out, tier_manifest_default_in("d", NULL)) \
	X(INT, EINV, tier_manifest_emit, m, tier_manifest_emit(NULL, stdout))            \
	X(INT, EINV, tier_manifest_emit, out, tier_manifest_emit(f->m, NULL))            \
	X(PTR, 0, tier_manifest_source, m, tier_manifest_source(NULL))                   \
	X(INT, EINV, tier_manifest_info, m,                                              \
	  tier_manifest_info(NULL, &(struct tier_manifest_info){ 0 }))                   \
	X(INT, EINV, tier_manifest_info, out, tier_manifest_info(f->m, NULL))            \
	X(INT, EINV, tier_manifest_path, m,                                              \
	  tier_manifest_path(NULL, 0, &(struct tier_manifest_path){ 0 }))                \
	X(INT, EINV, tier_manifest_path, out, tier_manifest_path(f->m, 0, NULL))         \
	X(NOOP, 0, tier_manifest_free, m, (tier_manifest_free(NULL), 0))                 \
	X(INT, EINV, tier_nvme_open, m, tier_nvme_open(NULL, 0, &(struct tier_nvme *){ 0 }))                  \
	X(INT, EINV, tier_nvme_open, out, tier_nvme_open(f->m, 0, NULL))                 \
	X(VOID, 0, tier_store_params_init, p, (tier_store_params_init(NULL), 0))         \
	X(INT, EINV, tier_store_open, m, tier_store_open(NULL, NULL, &(struct tier_store *){ 0 }))             \
	X(INT, EINV, tier_store_open, out, tier_store_open(f->m, NULL, NULL))            \
	X(NOOP, 0, tier_store_close, s, tier_store_close(NULL))                          \
	X(VOID, 0, tier_optim_params_init, p, (tier_optim_params_init(NULL), 0))         \
	X(VOID, 0, tier_group_params_init, g, (tier_group_params_init(NULL), 0))         \
	X(INT, EINV, tier_optim_create, s, tier_optim_create(NULL, NULL, &(struct tier_optim *){ 0 }))        \
	X(INT, EINV, tier_optim_create, out, tier_optim_create(f->s, NULL, NULL))        \
	X(INT, EINV, tier_optim_add_param, o, tier_optim_add_param(NULL, "v", 64, NULL, NULL)) \
	X(INT, EINV, tier_optim_add_param, name, tier_optim_add_param(f->op, NULL, 64, NULL, NULL)) \
	X(ZERO, 0, tier_optim_nparams, o, tier_optim_nparams(NULL))                      \
	X(INT, EINV, tier_optim_step, o, tier_optim_step(NULL, 0, &f->grad, NULL, NULL)) \
	X(INT, EINV, tier_optim_step, grads, tier_optim_step(f->op, 0, NULL, NULL, NULL)) \
	X(INT, EINV, tier_optim_begin, o, tier_optim_begin(NULL, 0))                     \
	X(INT, EINV, tier_optim_push, o, tier_optim_push(NULL, 0, &f->grad, NULL))       \
	X(INT, EINV, tier_optim_push, grad,                                              \
	  tier_optim_push(f->op, 0, NULL, NULL))           \
	X(INT, EINV, tier_optim_end, o, tier_optim_end(NULL, NULL))                      \
	X(INT, EINV, tier_optim_read, o, tier_optim_read(NULL, 0, f->p, NULL, NULL))     \
	X(INT, EINV, tier_optim_info, o, tier_optim_info(NULL, &(struct tier_optim_info){ 0 })) \
	X(INT, EINV, tier_optim_info, out, tier_optim_info(f->op, NULL))                 \
	X(NOOP, 0, tier_optim_destroy, o, tier_optim_destroy(NULL))                      \
	X(INT, EINV, tier_nvme_file_probe, file,                                         \
	  tier_nvme_file_probe(NULL, &(struct tier_nvme_file_info){ 0 }))                \
	X(INT, EINV, tier_nvme_file_probe, out, tier_nvme_file_probe("/nonexistent", NULL)) \
	X(INT, EINV, tier_nvme_file_remove_stale, file, tier_nvme_file_remove_stale(NULL)) \
	X(NOOP, 0, tier_nvme_close, t, tier_nvme_close(NULL))                            \
	X(INT, EINV, tier_nvme_register_buffer, t, tier_nvme_register_buffer(NULL, f->buf, 4096)) \
	X(INT, EINV, tier_nvme_register_buffer, base, tier_nvme_register_buffer(f->n, NULL, 4096)) \
	X(INT, EINV, tier_nvme_obj_create, t, tier_nvme_obj_create(NULL, "x", 4096, &(struct tier_nvme_obj *){ 0 })) \
	X(INT, EINV, tier_nvme_obj_create, name, tier_nvme_obj_create(f->n, NULL, 4096, &(struct tier_nvme_obj *){ 0 })) \
	X(INT, EINV, tier_nvme_obj_create, out, tier_nvme_obj_create(f->n, "x", 4096, NULL)) \
	X(INT, EINV, tier_nvme_obj_destroy, t, tier_nvme_obj_destroy(NULL, f->no))       \
	X(INT, EINV, tier_nvme_obj_destroy, o, tier_nvme_obj_destroy(f->n, NULL))        \
	X(ZERO, 0, tier_nvme_obj_size, o, tier_nvme_obj_size(NULL))                      \
	X(PTR, 0, tier_nvme_obj_name, o, tier_nvme_obj_name(NULL))                       \
	X(INT, EINV, tier_nvme_submit, t,                                                \
	  tier_nvme_submit(NULL, f->no, TIER_IO_READ, 0, 4096, f->buf, io_cb, NULL))     \
	X(INT, EINV, tier_nvme_submit, o,                                                \
	  tier_nvme_submit(f->n, NULL, TIER_IO_READ, 0, 4096, f->buf, io_cb, NULL))      \
	X(INT, EINV, tier_nvme_submit, buf,                                              \
	  tier_nvme_submit(f->n, f->no, TIER_IO_READ, 0, 4096, NULL, io_cb, NULL))       \
	X(INT, EINV, tier_nvme_submit, cb,                                               \
	  tier_nvme_submit(f->n, f->no, TIER_IO_READ, 0, 4096, f->buf, NULL, NULL))      \
	X(INT, EINV, tier_nvme_submit_ticket, t,                                         \
	  tier_nvme_submit_ticket(NULL, f->no, TIER_IO_READ, 0, 4096, f->buf, &(struct tier_ticket *){ 0 })) \
	X(INT, EINV, tier_nvme_submit_ticket, o,                                         \
	  tier_nvme_submit_ticket(f->n, NULL, TIER_IO_READ, 0, 4096, f->buf, &(struct tier_ticket *){ 0 })) \
	X(INT, EINV, tier_nvme_submit_ticket, buf,                                       \
	  tier_nvme_submit_ticket(f->n, f->no, TIER_IO_READ, 0, 4096, NULL, &(struct tier_ticket *){ 0 })) \
	X(INT, EINV, tier_nvme_submit_ticket, out,                                       \
	  tier_nvme_submit_ticket(f->n, f->no, TIER_IO_READ, 0, 4096, f->buf, NULL))     \
	X(INT, EINV, tier_nvme_read, t, tier_nvme_read(NULL, f->no, 0, 4096, f->buf))    \
	X(INT, EINV, tier_nvme_read, o, tier_nvme_read(f->n, NULL, 0, 4096, f->buf))     \
	X(INT, EINV, tier_nvme_read, buf, tier_nvme_read(f->n, f->no, 0, 4096, NULL))    \
	X(INT, EINV, tier_nvme_write, t, tier_nvme_write(NULL, f->no, 0, 4096, f->buf))  \
	X(INT, EINV, tier_nvme_write, o, tier_nvme_write(f->n, NULL, 0, 4096, f->buf))   \
	X(INT, EINV, tier_nvme_write, buf, tier_nvme_write(f->n, f->no, 0, 4096, NULL))  \
	X(VOID, 0, tier_nvme_get_stats, t,                                               \
	  (tier_nvme_get_stats(NULL, &(struct tier_nvme_stats){ 0 }), 0))                \
	X(VOID, 0, tier_nvme_get_stats, out, (tier_nvme_get_stats(f->n, NULL), 0))       \
	X(VOID, 0, tier_nvme_get_path_stats, t,                                          \
	  (tier_nvme_get_path_stats(NULL, 0, (struct tier_nvme_path_stats *)(void *)f->buf), 0)) \
	X(VOID, 0, tier_nvme_get_path_stats, out, (tier_nvme_get_path_stats(f->n, 0, NULL), 0)) \
	X(ZERO, 0, tier_store_has_level, s, tier_store_has_level(NULL, TIER_DRAM))       \
	X(VAL, TIER_HBM, tier_store_home, s, tier_store_home(NULL))                      \
	X(INT, EINV, tier_obj_create, s, tier_obj_create(NULL, "x", 4096, &(struct tier_obj *){ 0 }))        \
	X(INT, EINV, tier_obj_create, name, tier_obj_create(f->s, NULL, 4096, &(struct tier_obj *){ 0 }))    \
	X(INT, EINV, tier_obj_create, out, tier_obj_create(f->s, "x", 4096, NULL))       \
	X(PTR, 0, tier_obj_find, s, tier_obj_find(NULL, "obj"))                          \
	X(PTR, 0, tier_obj_find, name, tier_obj_find(f->s, NULL))                        \
	X(INT, EINV, tier_obj_destroy, s, tier_obj_destroy(NULL, f->o))                  \
	X(INT, EINV, tier_obj_destroy, o, tier_obj_destroy(f->s, NULL))                  \
	X(ZERO, 0, tier_obj_size, o, tier_obj_size(NULL))                                \
	X(PTR, 0, tier_obj_name, o, tier_obj_name(NULL))                                 \
	X(INT, EINV, tier_obj_acquire, s,                                                \
	  tier_obj_acquire(NULL, f->o, TIER_DRAM, TIER_ACQUIRE_READ, &(void *){ 0 }))    \
	X(INT, EINV, tier_obj_acquire, o,                                                \
	  tier_obj_acquire(f->s, NULL, TIER_DRAM, TIER_ACQUIRE_READ, &(void *){ 0 }))    \
	X(INT, EINV, tier_obj_acquire, ptr,                                              \
	  tier_obj_acquire(f->s, f->o, TIER_DRAM, TIER_ACQUIRE_READ, NULL))              \
	X(INT, EINV, tier_obj_acquire_async, s,                                          \
	  tier_obj_acquire_async(NULL, f->o, TIER_DRAM, TIER_ACQUIRE_READ, &(void *){ 0 }, \
				 &(struct tier_ticket *){ 0 }))                         \
	X(INT, EINV, tier_obj_acquire_async, o,                                          \
	  tier_obj_acquire_async(f->s, NULL, TIER_DRAM, TIER_ACQUIRE_READ, &(void *){ 0 }, \
				 &(struct tier_ticket *){ 0 }))                         \
	X(INT, EINV, tier_obj_acquire_async, ptr,                                        \
	  tier_obj_acquire_async(f->s, f->o, TIER_DRAM, TIER_ACQUIRE_READ, NULL,         \
				 &(struct tier_ticket *){ 0 }))                         \
	X(INT, EINV, tier_obj_acquire_async, tk,                                         \
	  tier_obj_acquire_async(f->s, f->o, TIER_DRAM, TIER_ACQUIRE_READ, &(void *){ 0 }, NULL)) \
	X(INT, EINV, tier_obj_release, s, tier_obj_release(NULL, f->o, TIER_DRAM, false)) \
	X(INT, EINV, tier_obj_release, o, tier_obj_release(f->s, NULL, TIER_DRAM, false)) \
	X(INT, EINV, tier_obj_prefetch, s, tier_obj_prefetch(NULL, f->o, TIER_DRAM))     \
	X(INT, EINV, tier_obj_prefetch, o, tier_obj_prefetch(f->s, NULL, TIER_DRAM))     \
	X(INT, EINV, tier_obj_write, s, tier_obj_write(NULL, f->o, 0, 8, f->buf))        \
	X(INT, EINV, tier_obj_write, o, tier_obj_write(f->s, NULL, 0, 8, f->buf))        \
	X(INT, EINV, tier_obj_write, buf, tier_obj_write(f->s, f->o, 0, 8, NULL))        \
	X(INT, EINV, tier_obj_read, s, tier_obj_read(NULL, f->o, 0, 8, f->buf))          \
	X(INT, EINV, tier_obj_read, o, tier_obj_read(f->s, NULL, 0, 8, f->buf))          \
	X(INT, EINV, tier_obj_read, buf, tier_obj_read(f->s, f->o, 0, 8, NULL))          \
	X(INT, EINV, tier_obj_flush, s, tier_obj_flush(NULL, f->o))                      \
	X(INT, EINV, tier_obj_flush, o, tier_obj_flush(f->s, NULL))                      \
	X(INT, EINV, tier_store_flush, s, tier_store_flush(NULL))                        \
	X(INT, EINV, tier_store_set_schedule, s, tier_store_set_schedule(NULL, &f->o, 1)) \
	X(INT, EINV, tier_store_set_schedule, objs, tier_store_set_schedule(f->s, NULL, 1)) \
	X(INT, EINV, tier_store_validate, s, tier_store_validate(NULL))                  \
	X(VOID, 0, tier_store_get_stats, s,                                              \
	  (tier_store_get_stats(NULL, &(struct tier_store_stats){ 0 }), 0))              \
	X(VOID, 0, tier_store_get_stats, out, (tier_store_get_stats(f->s, NULL), 0))     \
	X(PTR, 0, tier_store_nvme, s, tier_store_nvme(NULL))                             \
	X(PTR, 0, tier_store_stats_path, s, tier_store_stats_path(NULL))                 \
	X(INT, EINV, tier_store_publish_stats, s, tier_store_publish_stats(NULL))        \
	X(INT, EINV, tier_live_list, cb, tier_live_list(f->dir, NULL, NULL))             \
	X(INT, EINV, tier_live_open, path, tier_live_open(NULL, &(struct tier_live *){ 0 }))                  \
	X(INT, EINV, tier_live_open, out, tier_live_open("/nonexistent", NULL))          \
	X(INT, EINV, tier_live_read, l, tier_live_read(NULL, (void *)f->buf))            \
	X(INT, EINV, tier_live_read, out, f->l ? tier_live_read(f->l, NULL) : SKIP_ROW)  \
	X(VOID, 0, tier_live_info, l, (tier_live_info(NULL, &(struct tier_live_info){ 0 }), 0)) \
	X(VOID, 0, tier_live_info, out, f->l ? (tier_live_info(f->l, NULL), 0) : SKIP_ROW) \
	X(ZERO, 0, tier_live_stale, l, tier_live_stale(NULL))                            \
	X(INT, EINV, tier_nvme_commit, t, tier_nvme_commit(NULL, NULL, 0, NULL))         \
	X(INT, EINV, tier_nvme_commit, record, tier_nvme_commit(f->n, NULL, 8, NULL))    \
	X(INT, EINV, tier_nvme_committed, t,                                             \
	  tier_nvme_committed(NULL, &(struct tier_commit_info){ 0 }))                    \
	X(INT, EINV, tier_nvme_committed, out, tier_nvme_committed(f->n, NULL))          \
	X(INT, EINV, tier_nvme_record, t,                                                \
	  tier_nvme_record(NULL, &(const void *){ 0 }, &(size_t){ 0 }))                  \
	X(INT, EINV, tier_nvme_record, record, tier_nvme_record(f->n, NULL, &(size_t){ 0 })) \
	X(INT, EINV, tier_nvme_record, len, tier_nvme_record(f->n, &(const void *){ 0 }, NULL)) \
	X(INT, EINV, tier_nvme_check_files, files,                                       \
	  tier_nvme_check_files(NULL, 1, NULL, NULL, &(struct tier_nvme_check_report){ 0 })) \
	X(INT, EINV, tier_nvme_check_files, out,                                         \
	  tier_nvme_check_files((const char *const[]){ "x" }, 1, NULL, NULL, NULL))      \
	X(INT, EINV, tier_optim_checkpoint, o, tier_optim_checkpoint(NULL, NULL))        \
	X(INT, EINV, tier_optim_resume, s, tier_optim_resume(NULL, NULL, &(struct tier_optim *){ 0 })) \
	X(INT, EINV, tier_optim_resume, out, tier_optim_resume(f->s, NULL, NULL))        \
	X(ZERO, 0, tier_optim_step_count, o, tier_optim_step_count(NULL))                \
	X(INT, EINV, tier_optim_export, o, tier_optim_export(NULL, "x.safetensors"))     \
	X(INT, EINV, tier_optim_export, path, tier_optim_export(f->op, NULL))            \
	X(INT, EINV, tier_optim_import, s,                                               \
	  tier_optim_import(NULL, "x", NULL, &(struct tier_optim *){ 0 }))               \
	X(INT, EINV, tier_optim_import, path,                                            \
	  tier_optim_import(f->s, NULL, NULL, &(struct tier_optim *){ 0 }))              \
	X(INT, EINV, tier_optim_import, out, tier_optim_import(f->s, "x", NULL, NULL))   \
	X(INT, EINV, tier_optim_add_group, o,                                            \
	  tier_optim_add_group(NULL, &f->gp, NULL))                                      \
	X(INT, EINV, tier_optim_add_group, g, tier_optim_add_group(f->op, NULL, NULL))   \
	X(INT, EINV, tier_optim_set_group, o, tier_optim_set_group(NULL, 0, &f->gp))      \
	X(INT, EINV, tier_optim_set_group, g, tier_optim_set_group(f->op, 0, NULL))      \
	X(INT, EINV, tier_optim_get_group, o,                                            \
	  tier_optim_get_group(NULL, 0, &(struct tier_group_params){ 0 }))               \
	X(INT, EINV, tier_optim_get_group, out, tier_optim_get_group(f->op, 0, NULL))    \
	X(ZERO, 0, tier_optim_ngroups, o, tier_optim_ngroups(NULL))                      \
	X(INT, EINV, tier_optim_add_param_to, o,                                         \
	  tier_optim_add_param_to(NULL, 0, "x", 64, NULL, NULL))                         \
	X(INT, EINV, tier_optim_add_param_to, name,                                      \
	  tier_optim_add_param_to(f->op, 0, NULL, 64, NULL, NULL))                       \
	X(INT, EINV, tier_optim_freeze, o, tier_optim_freeze(NULL, 0, true))             \
	X(INT, EINV, tier_optim_remove_param, o, tier_optim_remove_param(NULL, 0))       \
	X(INT, EINV, tier_optim_param_info, o,                                           \
	  tier_optim_param_info(NULL, 0, &(struct tier_param_info){ 0 }))                \
	X(INT, EINV, tier_optim_param_info, out, tier_optim_param_info(f->op, 0, NULL))  \
	X(INT, EINV, tier_optim_set_param_step, o, tier_optim_set_param_step(NULL, 0, 1)) \
	X(INT, EINV, tier_optim_write, o, tier_optim_write(NULL, 0, NULL, NULL, NULL))   \
	X(INT, EINV, tier_optim_get_scaler, o,                                           \
	  tier_optim_get_scaler(NULL, &(struct tier_loss_scaler){ 0 }))                  \
	X(INT, EINV, tier_optim_get_scaler, out, tier_optim_get_scaler(f->op, NULL))     \
	X(INT, EINV, tier_optim_set_scaler, o,                                           \
	  tier_optim_set_scaler(NULL, &(struct tier_loss_scaler){ 0 }))                  \
	X(INT, EINV, tier_optim_set_scaler, in, tier_optim_set_scaler(f->op, NULL))      \
	X(INT, EINV, tier_store_commit, s, tier_store_commit(NULL, NULL, 0, NULL))       \
	X(INT, EINV, tier_store_commit, record, tier_store_commit(f->s, NULL, 8, NULL))  \
	X(INT, EINV, tier_store_committed, s,                                            \
	  tier_store_committed(NULL, &(struct tier_commit_info){ 0 }))                   \
	X(INT, EINV, tier_store_committed, out, tier_store_committed(f->s, NULL))        \
	X(INT, EINV, tier_store_record, s,                                               \
	  tier_store_record(NULL, &(const void *){ 0 }, &(size_t){ 0 }))                 \
	X(INT, EINV, tier_store_record, record, tier_store_record(f->s, NULL, &(size_t){ 0 })) \
	X(INT, EINV, tier_store_record, len, tier_store_record(f->s, &(const void *){ 0 }, NULL)) \
	X(INT, EINV, tier_live_remove, l, tier_live_remove(NULL))                        \
	X(VOID, 0, tier_comm_params_init, p, (tier_comm_params_init(NULL), 0))           \
	X(INT, EINV, tier_comm_open, out, tier_comm_open(NULL, NULL))                    \
	X(NOOP, 0, tier_comm_close, c, tier_comm_close(NULL))                            \
	X(VAL, -1, tier_comm_rank, c, tier_comm_rank(NULL))                              \
	X(VAL, -1, tier_comm_size, c, tier_comm_size(NULL))                              \
	X(PTR, 0, tier_comm_backend, c, tier_comm_backend(NULL))                         \
	X(NOOP, 0, tier_live_close, l, (tier_live_close(NULL), 0))

/* A row that cannot run in this build (no live segment). */
#define SKIP_ROW (-9999)

/*
 * Exported functions without a row, and why: they take no pointer, or
 * every pointer they take is optional (a row would be a success).
 */
static const char *const exempt[][2] = {
	{ "tier_version", "no pointer argument" },
	{ "tier_build_features", "no pointer argument" },
	{ "tier_version_number", "no pointer argument" },
	{ "tier_version_check", "no pointer argument" },
	{ "tier_strerror", "no pointer argument" },
	{ "tier_last_error", "no pointer argument" },
	{ "tier_dtype_size", "no pointer argument" },
	{ "tier_dtype_name", "no pointer argument" },
	{ "tier_lat_bucket", "no pointer argument" },
	{ "tier_lat_bucket_upper_ns", "no pointer argument" },
	{ "tier_adam_isa", "no pointer argument" },
	{ "tier_clip_coef", "no pointer argument" },
	{ "tier_gpu_selftest", "no pointer argument" },
	{ "tier_gpu_sync", "no pointer argument" },
	{ "tier_level_name", "no pointer argument" },
	{ "tier_live_dir", "no pointer argument" },
};

enum kind { INT, PTR, ZERO, VAL, VOID, NOOP };

struct row {
	enum kind kind;
	long long want;
	const char *fn, *arg;
	long long (*call)(struct fx *f);
};

static long long as_ll_int(long long v) { return v; }
static long long as_ll_ptr(const void *p) { return p != NULL; }
static long long as_ll_dbl(double d) { return (long long)d; }

#define AS_LL(x) _Generic((x), \
	double: as_ll_dbl, \
	const char *: as_ll_ptr, char *: as_ll_ptr, \
	struct tier_obj *: as_ll_ptr, struct tier_nvme *: as_ll_ptr, \
	default: as_ll_int)(x)

#define ROW_FN(KIND, WANT, FN, ARG, CALL) \
	static long long call_##FN##_##ARG(struct fx *f) { (void)f; return AS_LL(CALL); }
NULL_ROWS(ROW_FN)

#define ROW_ENTRY(KIND, WANT, FN, ARG, CALL) { KIND, WANT, #FN, #ARG, call_##FN##_##ARG },
static const struct row rows[] = { NULL_ROWS(ROW_ENTRY) };

static void setup(void)
{
	fx_open(&F);
}

static void teardown(void)
{
	fx_close(&F);
}

START_TEST(null_row)
{
	const struct row *r = &rows[_i];
	char want[160];
	long long got;

	snprintf(want, sizeof(want), "%s: %s is NULL", r->fn, r->arg);
	fprintf(stderr, "row %d: %s(%s = NULL)\n", _i, r->fn, r->arg);
	got = r->call(&F);
	if (got == SKIP_ROW) {
		fprintf(stderr, "row %d: no live segment in this build; skipped\n", _i);
		return;
	}
	ck_assert_msg(got == r->want, "%s: returned %lld, not %lld (detail '%s')", want, got,
		      r->want, tier_last_error());
	if (r->kind != NOOP)
		ck_assert_msg(strstr(tier_last_error(), want), "detail '%s' lacks '%s'",
			      tier_last_error(), want);
}
END_TEST

static bool has_row(const char *fn)
{
	for (size_t i = 0; i < ARRAY_SIZE(rows); i++)
		if (!strcmp(rows[i].fn, fn))
			return true;
	return false;
}

static bool exempted(const char *fn)
{
	for (size_t i = 0; i < ARRAY_SIZE(exempt); i++)
		if (!strcmp(exempt[i][0], fn))
			return true;
	return false;
}

/* The symbols of tierstore.map's global lists; returns how many. */
static size_t map_symbols(char names[][64], size_t max)
{
	const char *path = getenv("TIER_MAP");
	char line[256], sym[64];
	bool global = false;
	size_t n = 0;
	FILE *fp;

	ck_assert_msg(path, "TIER_MAP is not set");
	fp = fopen(path, "r");
	ck_assert_msg(fp, "%s: %s", path, strerror(errno));
	while (fgets(line, sizeof(line), fp)) {
		if (strstr(line, "global:"))
			global = true;
		else if (strstr(line, "local:"))
			global = false;
		else if (global && sscanf(line, " %63[a-z0-9_];", sym) == 1) {
			ck_assert_uint_lt(n, max);
			strcpy(names[n++], sym);
		}
	}
	fclose(fp);
	return n;
}

START_TEST(null_exports)
{
	static char names[256][64];
	size_t n = map_symbols(names, ARRAY_SIZE(names));
	bool found;

	ck_assert_uint_gt(n, 50);
	for (size_t i = 0; i < n; i++)
		ck_assert_msg(has_row(names[i]) || exempted(names[i]),
			      "%s is exported but has no NULL row in tests/runtime/test_null.c nor an exemption",
			      names[i]);
	for (size_t i = 0; i < ARRAY_SIZE(rows) + ARRAY_SIZE(exempt); i++) {
		const char *fn = i < ARRAY_SIZE(rows) ? rows[i].fn : exempt[i - ARRAY_SIZE(rows)][0];

		found = false;
		for (size_t j = 0; j < n && !found; j++)
			found = !strcmp(names[j], fn);
		ck_assert_msg(found, "%s is in tests/runtime/test_null.c but not in tierstore.map", fn);
		ck_assert_msg(!(has_row(fn) && exempted(fn)), "%s has rows and an exemption", fn);
	}
}
END_TEST

/*
 * Handles carry a magic, checked at entry in builds with
 * TIER_DEBUG_HANDLES (buildtype debug, debugoptimized): a pointer to
 * memory that is no open store, NVMe tier or optimizer (here zeros, as a
 * closed one's poisoned magic would be) is -EINVAL "FN: ARG is not an open
 * WHAT (closed, or not a tier_WHAT)", or NULL/0/false/nothing as for a
 * NULL argument.  A release build checks NULL alone: skipped there.
 */
START_TEST(null_handles)
{
#if TIER_DEBUG_HANDLES
	static uint64_t junk[4096];
	struct tier_store *s = (struct tier_store *)(void *)junk;
	struct tier_nvme *t = (struct tier_nvme *)(void *)junk;
	struct tier_optim *o = (struct tier_optim *)(void *)junk;
	struct tier_nvme_stats ns = { 0 };
	char buf[64];

#define NOT_OPEN(expr, want, fn, arg, what)                                              \
	do {                                                                             \
		char w_[200];                                                            \
		long long got_ = (long long)(expr);                                      \
                                                                                         \
		snprintf(w_, sizeof(w_), "%s: %s is not an open %s (closed, or not a ", fn, \
			 arg, what);                                                     \
		ck_assert_msg(got_ == (want), "%s: %lld", #expr, got_);                  \
		ck_assert_msg(strstr(tier_last_error(), w_), "%s: detail '%s' lacks '%s'", \
			      #expr, tier_last_error(), w_);                             \
	} while (0)
	NOT_OPEN(tier_store_flush(s), -EINVAL, "tier_store_flush", "s", "store");
	NOT_OPEN(tier_obj_read(s, NULL, 0, 8, buf), -EINVAL, "tier_obj_read", "s", "store");
	NOT_OPEN(tier_store_has_level(s, TIER_DRAM), 0, "tier_store_has_level", "s", "store");
	NOT_OPEN(tier_obj_find(s, "x") != NULL, 0, "tier_obj_find", "s", "store");
	NOT_OPEN(tier_nvme_read(t, NULL, 0, 8, buf), -EINVAL, "tier_nvme_read", "t", "NVMe tier");
	NOT_OPEN((tier_nvme_get_stats(t, &ns), 0), 0, "tier_nvme_get_stats", "t", "NVMe tier");
	ck_assert_uint_eq(ns.capacity, 0);
	NOT_OPEN(tier_optim_begin(o, 0), -EINVAL, "tier_optim_begin", "o", "optimizer");
	NOT_OPEN(tier_optim_nparams(o), 0, "tier_optim_nparams", "o", "optimizer");
	/* Closing what is not open (a second close, while the memory is there). */
	NOT_OPEN(tier_store_close(s), -EINVAL, "tier_store_close", "s", "store");
	NOT_OPEN(tier_nvme_close(t), -EINVAL, "tier_nvme_close", "t", "NVMe tier");
	NOT_OPEN(tier_optim_destroy(o), -EINVAL, "tier_optim_destroy", "o", "optimizer");
#undef NOT_OPEN
#else
	fprintf(stderr, "null_handles: a build without TIER_DEBUG_HANDLES (release); skipped\n");
#endif
}
END_TEST

static Suite *null_suite(void)
{
	Suite *s = suite_create("null");
	TCase *tc = tcase_create("rows");

	tcase_add_unchecked_fixture(tc, t_case_setup, t_case_teardown);
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_loop_test(tc, null_row, 0, (int)ARRAY_SIZE(rows));
	suite_add_tcase(s, tc);
	tc = tcase_create("exports");
	tcase_add_test(tc, null_exports);
	tcase_add_test(tc, null_handles);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return t_run_suite(null_suite());
}
