/*
 * abi_dump - prints, as JSON, what the Python binding
 * (python/tierstore/_lib.py) must agree with, as the C compiler sees the
 * trainer's header: "structs", the layout of the public structs the
 * binding declares with ctypes (each struct's size and alignment, every
 * field's offset and size; tests/python/test_abi.py); "constants", the
 * value and kind ("int" or "double") of every constant of the trainer's
 * headers (tierstore.h, tierstore/common.h, tierstore/live.h, and the
 * generated tierstore/version.h's numbers); and "defaults", every field
 * of the parameter structs as the library's tier_*_params_init fills them
 * (tests/python/test_binding.py).  It includes tierstore.h alone: the
 * trainer's header compiles standalone.
 */
#include <stdalign.h>
#include <stdbool.h>
#include <stdio.h>

#include <tierstore.h>

static int nstruct;
static int nfield;

static void open_struct(const char *name, size_t size, size_t align)
{
	printf("%s\n    \"%s\": {\"size\": %zu, \"align\": %zu, \"fields\": {",
	       nstruct++ ? "," : "", name, size, align);
	nfield = 0;
}

static void field(const char *name, size_t off, size_t size)
{
	printf("%s\"%s\": [%zu, %zu]", nfield++ ? ", " : "", name, off, size);
}

#define S(T) open_struct(#T, sizeof(struct T), alignof(struct T))
#define F(T, f) field(#f, offsetof(struct T, f), sizeof(((struct T *)0)->f))
#define E() printf("}}")

static void structs(void)
{
	S(tier_optim_params);
	F(tier_optim_params, size); F(tier_optim_params, lr); F(tier_optim_params, beta1);
	F(tier_optim_params, beta2); F(tier_optim_params, eps);
	F(tier_optim_params, weight_decay); F(tier_optim_params, decoupled);
	F(tier_optim_params, moment_dtype); F(tier_optim_params, rounding);
	F(tier_optim_params, out_rounding); F(tier_optim_params, seed);
	F(tier_optim_params, offload_fraction);
	F(tier_optim_params, max_grad_norm); F(tier_optim_params, loss_scale);
	F(tier_optim_params, dynamic_loss_scale); F(tier_optim_params, min_loss_scale);
	F(tier_optim_params, growth_factor); F(tier_optim_params, backoff_factor);
	F(tier_optim_params, growth_interval); F(tier_optim_params, hysteresis);
	F(tier_optim_params, shard_size); F(tier_optim_params, threads);
	F(tier_optim_params, comm);
	E();
	S(tier_group_params);
	F(tier_group_params, size); F(tier_group_params, lr); F(tier_group_params, beta1);
	F(tier_group_params, beta2); F(tier_group_params, eps);
	F(tier_group_params, weight_decay); F(tier_group_params, decoupled);
	E();
	S(tier_tensor);
	F(tier_tensor, ptr); F(tier_tensor, dtype); F(tier_tensor, mem); F(tier_tensor, numel);
	E();
	S(tier_step_result);
	F(tier_step_result, applied); F(tier_step_result, step);
	F(tier_step_result, grad_norm); F(tier_step_result, loss_scale);
	F(tier_step_result, next_loss_scale); F(tier_step_result, clip_coef);
	F(tier_step_result, offload_fraction); F(tier_step_result, cpu_shards);
	F(tier_step_result, gpu_shards); F(tier_step_result, step_s);
	F(tier_step_result, stall_s); F(tier_step_result, cpu_stall_s);
	F(tier_step_result, gpu_stall_s); F(tier_step_result, nvme_read_bytes);
	F(tier_step_result, nvme_write_bytes); F(tier_step_result, h2d_bytes);
	F(tier_step_result, d2h_bytes); F(tier_step_result, nvme_read_Bps);
	F(tier_step_result, nvme_write_Bps); F(tier_step_result, h2d_Bps);
	F(tier_step_result, d2h_Bps); F(tier_step_result, params_updated);
	F(tier_step_result, params_skipped); F(tier_step_result, rank);
	F(tier_step_result, world); F(tier_step_result, collectives);
	F(tier_step_result, comm_bytes); F(tier_step_result, comm_s);
	F(tier_step_result, comm_wait_s);
	E();
	S(tier_param_info);
	F(tier_param_info, name); F(tier_param_info, numel); F(tier_param_info, group);
	F(tier_param_info, nshards); F(tier_param_info, step); F(tier_param_info, frozen);
	F(tier_param_info, part_off); F(tier_param_info, part_numel);
	E();
	S(tier_loss_scaler);
	F(tier_loss_scaler, scale); F(tier_loss_scaler, min_scale);
	F(tier_loss_scaler, growth_factor); F(tier_loss_scaler, backoff_factor);
	F(tier_loss_scaler, growth_interval); F(tier_loss_scaler, hysteresis);
	F(tier_loss_scaler, growth_tracker); F(tier_loss_scaler, hysteresis_tracker);
	E();
	S(tier_store_params);
	F(tier_store_params, size); F(tier_store_params, dram_capacity);
	F(tier_store_params, hbm_backend); F(tier_store_params, hbm_capacity);
	F(tier_store_params, hbm_bandwidth); F(tier_store_params, policy);
	F(tier_store_params, flags); F(tier_store_params, generation);
	E();
	S(tier_optim_info);
	F(tier_optim_info, moment_dtype); F(tier_optim_info, bytes_per_elem);
	F(tier_optim_info, block_bytes);
	F(tier_optim_info, shard_elems); F(tier_optim_info, shard_bytes);
	F(tier_optim_info, window_bytes); F(tier_optim_info, hbm_budget);
	F(tier_optim_info, write_behind); F(tier_optim_info, threads);
	F(tier_optim_info, offload_fraction); F(tier_optim_info, auto_split);
	F(tier_optim_info, gpu_lane); F(tier_optim_info, nparams);
	F(tier_optim_info, nshards); F(tier_optim_info, state_bytes);
	F(tier_optim_info, rank); F(tier_optim_info, world);
	F(tier_optim_info, part_elems); F(tier_optim_info, total_elems);
	F(tier_optim_info, rounding); F(tier_optim_info, out_rounding); F(tier_optim_info, seed);
	E();
	S(tier_manifest_info);
	F(tier_manifest_info, source); F(tier_manifest_info, name); F(tier_manifest_info, gpu);
	F(tier_manifest_info, hbm_capacity); F(tier_manifest_info, dram_capacity);
	F(tier_manifest_info, numa_node); F(tier_manifest_info, npaths);
	F(tier_manifest_info, nvme_capacity); F(tier_manifest_info, stripe_unit);
	F(tier_manifest_info, checksum); F(tier_manifest_info, keep_commits);
	F(tier_manifest_info, lookahead); F(tier_manifest_info, write_behind);
	F(tier_manifest_info, offload_fraction); F(tier_manifest_info, moment_dtype);
	F(tier_manifest_info, rounding); F(tier_manifest_info, out_rounding);
	F(tier_manifest_info, seed);
	F(tier_manifest_info, shard_size); F(tier_manifest_info, rank);
	E();
	S(tier_rank);
	F(tier_rank, rank); F(tier_rank, local_rank); F(tier_rank, world_size);
	F(tier_rank, local_world_size);
	E();
	S(tier_comm_callbacks);
	F(tier_comm_callbacks, user); F(tier_comm_callbacks, reduce_scatter);
	F(tier_comm_callbacks, allgatherv); F(tier_comm_callbacks, allreduce);
	F(tier_comm_callbacks, barrier);
	E();
	S(tier_comm_params);
	F(tier_comm_params, size); F(tier_comm_params, backend); F(tier_comm_params, mpi_comm);
	F(tier_comm_params, nccl_comm); F(tier_comm_params, nccl_id); F(tier_comm_params, rank);
	F(tier_comm_params, nranks); F(tier_comm_params, device); F(tier_comm_params, timeout_s);
	F(tier_comm_params, callbacks);
	E();
}

/* ------------------------------------------------------------- values */

static int nvalue;

static void key(const char *name)
{
	printf("%s\"%s\": ", nvalue++ ? ", " : "", name);
}

static void v_int(const char *name, long long v) { key(name); printf("[%lld, \"int\"]", v); }
static void v_uint(const char *name, unsigned long long v)
{
	key(name);
	printf("[%llu, \"int\"]", v);
}
static void v_dbl(const char *name, double v) { key(name); printf("[%.17g, \"double\"]", v); }
static void v_bool(const char *name, bool v)
{
	key(name);
	printf("[%s, \"bool\"]", v ? "true" : "false");
}
static void v_ptr(const char *name, const void *v)
{
	key(name);
	printf("[%s, \"pointer\"]", v ? "\"not NULL\"" : "null");
}

/* A value by its C type: an enum is its compatible integer type; a
 * pointer field of a type not listed here is a compile error (list it). */
#define VALUE(name, x) _Generic((x), \
	double: v_dbl, bool: v_bool, \
	int: v_int, long: v_int, long long: v_int, \
	unsigned: v_uint, unsigned long: v_uint, unsigned long long: v_uint, \
	const char *: v_ptr, void *: v_ptr, const void *: v_ptr, \
	struct tier_comm *: v_ptr, \
	const struct tier_comm_callbacks *: v_ptr)(name, x)

/* Every public constant of the trainer's headers.  test_binding.py checks
 * that this list names each one the headers define. */
static void constants(void)
{
	nvalue = 0;
	printf("{");
	VALUE("TIER_VERSION_MAJOR", TIER_VERSION_MAJOR);
	VALUE("TIER_VERSION_MINOR", TIER_VERSION_MINOR);
	VALUE("TIER_VERSION_PATCH", TIER_VERSION_PATCH);
	VALUE("TIER_VERSION_NUMBER", TIER_VERSION_NUMBER);
	VALUE("TIER_LAT_BUCKETS", TIER_LAT_BUCKETS);
	VALUE("TIER_FP32", TIER_FP32);
	VALUE("TIER_BF16", TIER_BF16);
	VALUE("TIER_FP16", TIER_FP16);
	VALUE("TIER_Q8", TIER_Q8);
	VALUE("TIER_ROUND_NEAREST", TIER_ROUND_NEAREST);
	VALUE("TIER_ROUND_STOCHASTIC", TIER_ROUND_STOCHASTIC);
	VALUE("TIER_HBM", TIER_HBM);
	VALUE("TIER_DRAM", TIER_DRAM);
	VALUE("TIER_NVME", TIER_NVME);
	VALUE("TIER_LEVELS", TIER_LEVELS);
	VALUE("TIER_POLICY_BELADY", TIER_POLICY_BELADY);
	VALUE("TIER_POLICY_LRU", TIER_POLICY_LRU);
	VALUE("TIER_STORE_SCRATCH", TIER_STORE_SCRATCH);
	VALUE("TIER_OFFLOAD_AUTO", TIER_OFFLOAD_AUTO);
	VALUE("TIER_MANIFEST_NO_PROBE", TIER_MANIFEST_NO_PROBE);
	VALUE("TIER_MEM_HOST", TIER_MEM_HOST);
	VALUE("TIER_MEM_DEVICE", TIER_MEM_DEVICE);
	VALUE("TIER_DTYPE_MANIFEST", TIER_DTYPE_MANIFEST);
	VALUE("TIER_ROUND_MANIFEST", TIER_ROUND_MANIFEST);
	VALUE("TIER_SEED_MANIFEST", TIER_SEED_MANIFEST);
	VALUE("TIER_OFFLOAD_MANIFEST", TIER_OFFLOAD_MANIFEST);
	VALUE("TIER_LR_KEEP", TIER_LR_KEEP);
	VALUE("TIER_COMM_F64", TIER_COMM_F64);
	VALUE("TIER_COMM_F32", TIER_COMM_F32);
	VALUE("TIER_COMM_BF16", TIER_COMM_BF16);
	VALUE("TIER_COMM_F16", TIER_COMM_F16);
	VALUE("TIER_LIVE_VERSION", TIER_LIVE_VERSION);
	VALUE("TIER_LIVE_MAX_PATHS", TIER_LIVE_MAX_PATHS);
	printf("}");
}

#define D(var, f) VALUE(#f, (var).f)

/* The parameter structs as their exported init functions fill them. */
static void defaults(void)
{
	struct tier_optim_params op;
	struct tier_group_params gp;
	struct tier_store_params sp;
	struct tier_comm_params cp;

	tier_optim_params_init(&op);
	tier_group_params_init(&gp);
	tier_store_params_init(&sp);
	tier_comm_params_init(&cp);

	nvalue = 0;
	printf("{\n    \"tier_optim_params\": {");
	D(op, size); D(op, lr);
	D(op, beta1); D(op, beta2);
	D(op, eps); D(op, weight_decay);
	D(op, decoupled); D(op, moment_dtype);
	D(op, rounding); D(op, out_rounding);
	D(op, seed); D(op, offload_fraction);
	D(op, max_grad_norm); D(op, loss_scale);
	D(op, dynamic_loss_scale); D(op, min_loss_scale);
	D(op, growth_factor); D(op, backoff_factor);
	D(op, growth_interval); D(op, hysteresis);
	D(op, shard_size); D(op, threads);
	D(op, comm);
	nvalue = 0;
	printf("},\n    \"tier_group_params\": {");
	D(gp, size); D(gp, lr);
	D(gp, beta1); D(gp, beta2);
	D(gp, eps); D(gp, weight_decay);
	D(gp, decoupled);
	nvalue = 0;
	printf("},\n    \"tier_store_params\": {");
	D(sp, size); D(sp, dram_capacity);
	D(sp, hbm_backend); D(sp, hbm_capacity);
	D(sp, hbm_bandwidth); D(sp, policy);
	D(sp, flags); D(sp, generation);
	nvalue = 0;
	printf("},\n    \"tier_comm_params\": {");
	D(cp, size); D(cp, backend);
	D(cp, mpi_comm); D(cp, nccl_comm);
	D(cp, nccl_id); D(cp, rank);
	D(cp, nranks); D(cp, device);
	D(cp, timeout_s); D(cp, callbacks);
	printf("}\n  }");
}

int main(void)
{
	printf("{\n  \"structs\": {");
	structs();
	printf("\n  },\n  \"constants\": ");
	constants();
	printf(",\n  \"defaults\": ");
	defaults();
	printf("\n}\n");
	return 0;
}
