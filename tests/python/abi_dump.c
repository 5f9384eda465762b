/*
 * abi_dump - prints the layout of the public structs the Python binding
 * (python/tierstore/_lib.py) declares with ctypes: for each struct its
 * size and alignment, and every field's offset and size, as JSON.
 * tests/python/test_abi.py compares them with the ctypes layout.
 */
#include <stdalign.h>
#include <stdio.h>

#include <tierstore.h>

static int nstruct;
static int nfield;

static void open_struct(const char *name, size_t size, size_t align)
{
	printf("%s\n  \"%s\": {\"size\": %zu, \"align\": %zu, \"fields\": {",
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

int main(void)
{
	printf("{");
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
	F(tier_step_result, cpu_fraction); F(tier_step_result, cpu_shards);
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
	F(tier_optim_info, cpu_fraction); F(tier_optim_info, auto_split);
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
	printf("\n}\n");
	return 0;
}
