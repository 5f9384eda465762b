/*
 * adamw_roofline.cu - the roofline of the CUDA update (adamw_cuda_roofline
 * of kernels/adamw_cuda.h, behind tier_adam_roofline_gpu), as
 * tier_adam_roofline is the CPU kernels'.  It launches its tiles as the
 * update does (kernels/adamw.cu), through kernels/adamw_cuda_impl.cuh.
 *
 * The update's same-traffic kernel: the same tiles, the same loads and
 * stores of every array (vector ones where the update takes them), with
 * one integer operation per word instead of the arithmetic: each word
 * stored is the word loaded XOR (a gradient word AND roof_mask), and the
 * mask is 0, so the arrays keep their values, but the compiler cannot know
 * it and must move every byte.  Arrays are handled as words of their
 * element size S (4 elements: S words).  q8 moments (S = 1): the thread at
 * each TIER_Q8_BLOCK boundary loads and stores both block scales.
 */
#include "config.h"

#include <errno.h>
#include <stdint.h>
#include <string.h>

#include "common/cuda_check.h"
#include "common/error.h"
#include "kernels/adamw_cuda.h"
#include "kernels/adamw_cuda_impl.cuh"

template <int S> __device__ __forceinline__ void ldw(const void *a, size_t i, uint32_t *w)
{
	if (S == 4) {
		uint4 x = ((const uint4 *)a)[i / 4];
		w[0] = x.x; w[1] = x.y; w[2] = x.z; w[3] = x.w;
	} else if (S == 2) {
		uint2 x = ((const uint2 *)a)[i / 4];
		w[0] = x.x; w[1] = x.y;
	} else {
		w[0] = ((const uint32_t *)a)[i / 4];
	}
}

template <int S> __device__ __forceinline__ void stw(void *a, size_t i, const uint32_t *w)
{
	if (S == 4)
		((uint4 *)a)[i / 4] = make_uint4(w[0], w[1], w[2], w[3]);
	else if (S == 2)
		((uint2 *)a)[i / 4] = make_uint2(w[0], w[1]);
	else
		((uint32_t *)a)[i / 4] = w[0];
}

/* One element of @S bytes, as a word, and back. */
template <int S> __device__ __forceinline__ uint32_t ld1(const void *a, size_t i)
{
	return S == 4 ? ((const uint32_t *)a)[i] : S == 2 ? ((const uint16_t *)a)[i]
							  : ((const uint8_t *)a)[i];
}

template <int S> __device__ __forceinline__ void st1(void *a, size_t i, uint32_t w)
{
	if (S == 4)
		((uint32_t *)a)[i] = w;
	else if (S == 2)
		((uint16_t *)a)[i] = (uint16_t)w;
	else
		((uint8_t *)a)[i] = (uint8_t)w;
}

/* The two scales of the q8 block starting at element @i. */
__device__ __forceinline__ void roof_scales(const struct adamw_chunk &k, size_t i, uint32_t x)
{
	uint32_t *ms = (uint32_t *)k.exp_avg_scale, *vs = (uint32_t *)k.exp_avg_sq_scale;

	ms[i / TIER_Q8_BLOCK] ^= x;
	vs[i / TIER_Q8_BLOCK] ^= x;
}

template <int MS, int GS, int OS>
__global__ void __launch_bounds__(STEP_THREADS) roof_kernel(const __grid_constant__ struct step_batch b)
{
	unsigned pc;
	size_t begin, end;

	tile_of(b, &pc, &begin, &end);
	const struct adamw_chunk k = b.k[pc];
	const uint32_t mask = b.roof_mask;
	size_t i = begin;

	if ((b.vec >> pc) & 1u) {
		const size_t vend = begin + ((end - begin) & ~(size_t)3);

#pragma unroll 4
		for (i = begin + 4 * (size_t)threadIdx.x; i < vend; i += 4 * STEP_THREADS) {
			uint32_t p[4], g[GS], m[MS], v[MS], o[OS > 0 ? OS : 1];

			ldw<GS>(k.grad, i, g);
			ldw<4>(k.param, i, p);
			ldw<MS>(k.exp_avg, i, m);
			ldw<MS>(k.exp_avg_sq, i, v);
			const uint32_t x = g[0] & mask;
#pragma unroll
			for (int j = 0; j < 4; j++)
				p[j] ^= x;
#pragma unroll
			for (int j = 0; j < MS; j++) {
				m[j] ^= x;
				v[j] ^= x;
			}
			stw<4>(k.param, i, p);
			stw<MS>(k.exp_avg, i, m);
			stw<MS>(k.exp_avg_sq, i, v);
			if (MS == 1 && i % TIER_Q8_BLOCK == 0)
				roof_scales(k, i, x);
			if (OS && k.param_out) {
#pragma unroll
				for (int j = 0; j < OS; j++)
					o[j] = p[j];
				stw<OS>(k.param_out, i, o);
			}
		}
		i = vend;
	}
	for (i += threadIdx.x; i < end; i += STEP_THREADS) {
		const uint32_t x = ld1<GS>(k.grad, i) & mask;
		uint32_t p = ((uint32_t *)k.param)[i] ^ x;

		((uint32_t *)k.param)[i] = p;
		st1<MS>(k.exp_avg, i, ld1<MS>(k.exp_avg, i) ^ x);
		st1<MS>(k.exp_avg_sq, i, ld1<MS>(k.exp_avg_sq, i) ^ x);
		if (MS == 1 && i % TIER_Q8_BLOCK == 0)
			roof_scales(k, i, x);
		if (OS && k.param_out)
			st1<OS>(k.param_out, i, p);
	}
}

template <int MS, int GS, int OS>
static void roof_launch(const struct step_batch &b, unsigned grid, cudaStream_t st)
{
	roof_kernel<MS, GS, OS><<<grid, STEP_THREADS, 0, st>>>(b);
}

/* [moment size 4, 2, 1][gradient size 4, 2][output size 4, 2] */
#define ROOF_OUTS(m, g) { roof_launch<m, g, 4>, roof_launch<m, g, 2> }
#define ROOF_GRADS(m) { ROOF_OUTS(m, 4), ROOF_OUTS(m, 2) }
static const step_launch_fn roof_table[3][2][2] = { ROOF_GRADS(4), ROOF_GRADS(2), ROOF_GRADS(1) };

extern "C" int adamw_cuda_roofline(enum tier_dtype moment_dtype, enum tier_dtype grad_dtype,
				   enum tier_dtype out_dtype, const struct adamw_chunk *chunks,
				   size_t nchunks, void *stream)
{
	struct step_batch b;
	step_launch_fn launch;
	size_t msz = dtype_size(moment_dtype), gsz = dtype_size(grad_dtype), osz = dtype_size(out_dtype);
	int rc;

	if (!chunks && nchunks)
		return ts_err(-EINVAL, "adamw cuda: %zu chunks but no chunk array", nchunks);
	if ((unsigned)moment_dtype > (unsigned)TIER_Q8 || (unsigned)grad_dtype > (unsigned)TIER_FP16 ||
	    (unsigned)out_dtype > (unsigned)TIER_FP16)
		return ts_err(-EINVAL, "adamw cuda: roofline: dtypes %d, %d, %d (moment, gradient, output)",
				(int)moment_dtype, (int)grad_dtype, (int)out_dtype);
	for (size_t i = 0; i < nchunks; i++) {
		const struct adamw_chunk *k = &chunks[i];

		if (k->n && (!k->param || !k->exp_avg || !k->exp_avg_sq || !k->grad ||
			     (moment_dtype == TIER_Q8 && (!k->exp_avg_scale || !k->exp_avg_sq_scale))))
			return ts_err(-EINVAL, "adamw cuda: roofline: chunk %zu of %zu elements has a NULL array",
					i, k->n);
	}
	memset(&b, 0, sizeof(b));
	launch = roof_table[msz == 4 ? 0 : msz == 2 ? 1 : 2][gsz == 4 ? 0 : 1][osz == 4 ? 0 : 1];
	rc = adamw_cuda_launch_chunks(b, launch, moment_dtype, grad_dtype, out_dtype, chunks, nchunks,
				      (cudaStream_t)stream);
	if (rc)
		ts_err_prefix("adamw cuda: roofline launch");
	return rc;
}
