/*
 * adamw_cuda_impl.cuh - what the CUDA kernels of kernels/adamw_cuda.h
 * share; private to kernels/adamw.cu (the update), kernels/adamw_roofline.cu
 * (its same-traffic kernel) and kernels/gradcheck.cu (the gradient check):
 * the update's launch parameters, the loads and stores of an element, a
 * block's piece and tile, and the launches of the update's tiles.
 *
 * Launches.  The chunk list travels by value in the kernel's parameters (a
 * __grid_constant__ struct, under the classic 4 KiB limit): up to
 * MAX_PIECES pieces a launch, so no device table, no allocation and no
 * host-to-device copy that could make the host wait for the stream.  A
 * launch's blocks map to (piece, tile) through the inclusive prefix of the
 * pieces' tile counts (a binary search per block).  Empty chunks are left
 * out; a chunk too large for one launch's grid is cut into pieces at tile
 * boundaries (the elements are independent, the pieces keep the chunk's
 * alignment and, in the gradient check, its tiles and their order), and
 * more than MAX_PIECES chunks make several launches.
 *
 * Included by .cu files alone, after config.h.
 */
#ifndef TIER_KERNELS_ADAMW_CUDA_IMPL_CUH
#define TIER_KERNELS_ADAMW_CUDA_IMPL_CUH

#include <cuda_runtime_api.h>
#include <stddef.h>
#include <stdint.h>

#include "kernels/adam_math.h"
#include "kernels/adamw_cuda.h"

#define MAX_PIECES 48                 /* pieces per launch (the parameters under 4 KiB) */
#define STEP_THREADS 256
#define STEP_TILE 4096                /* elements per block of the update */
/* Tiles per launch, far below the grid limit (2^31 - 1 blocks). */
#define MAX_LAUNCH_TILES (1u << 30)

static_assert(STEP_TILE % (STEP_THREADS * 4) == 0, "a tile is whole vector rounds");
static_assert(STEP_TILE % TIER_Q8_BLOCK == 0, "q8: a tile is whole blocks");

/* The launch parameters of the update (and of its roofline). */
struct step_batch {
	struct adam_consts c;
	uint32_t roof_mask;                   /* the roofline's: 0, unknown to the compiler */
	unsigned n;                           /* pieces */
	unsigned long long vec;               /* bit i: piece i takes vector loads */
	unsigned tile_end[MAX_PIECES];        /* inclusive prefix of the pieces' tiles */
	struct adamw_chunk k[MAX_PIECES];
};

static_assert(sizeof(struct step_batch) <= 4000, "launch parameters under 4 KiB");

/* ------------------------------------------------------------ element I/O */

/* Loads and stores of one element, or of 4 (vector-aligned), as fp32. */
template <int DT> struct io;

template <> struct io<TIER_FP32> {
	static __device__ __forceinline__ float ld(const void *b, size_t i)
	{
		return ((const float *)b)[i];
	}
	static __device__ __forceinline__ void st(void *b, size_t i, float v)
	{
		((float *)b)[i] = v;
	}
	static __device__ __forceinline__ void ld4(const void *b, size_t i, float v[4])
	{
		float4 x = *(const float4 *)((const float *)b + i);

		v[0] = x.x;
		v[1] = x.y;
		v[2] = x.z;
		v[3] = x.w;
	}
	static __device__ __forceinline__ void st4(void *b, size_t i, const float v[4])
	{
		*(float4 *)((float *)b + i) = make_float4(v[0], v[1], v[2], v[3]);
	}
};

/* 16-bit types: 4 elements are one uint2, element 0 in the low half of .x. */
template <int DT> struct io16 {
	static __device__ __forceinline__ float cvt_in(uint16_t h)
	{
		return DT == TIER_BF16 ? bf16_to_f32(h) : f16_to_f32(h);
	}
	static __device__ __forceinline__ uint16_t cvt_out(float f)
	{
		return DT == TIER_BF16 ? f32_to_bf16(f) : f32_to_f16(f);
	}
	static __device__ __forceinline__ float ld(const void *b, size_t i)
	{
		return cvt_in(((const uint16_t *)b)[i]);
	}
	static __device__ __forceinline__ void st(void *b, size_t i, float v)
	{
		((uint16_t *)b)[i] = cvt_out(v);
	}
	static __device__ __forceinline__ void ld4(const void *b, size_t i, float v[4])
	{
		uint2 x = *(const uint2 *)((const uint16_t *)b + i);

		v[0] = cvt_in((uint16_t)(x.x & 0xffffu));
		v[1] = cvt_in((uint16_t)(x.x >> 16));
		v[2] = cvt_in((uint16_t)(x.y & 0xffffu));
		v[3] = cvt_in((uint16_t)(x.y >> 16));
	}
	static __device__ __forceinline__ void st4(void *b, size_t i, const float v[4])
	{
		uint2 x;

		x.x = (unsigned)cvt_out(v[0]) | (unsigned)cvt_out(v[1]) << 16;
		x.y = (unsigned)cvt_out(v[2]) | (unsigned)cvt_out(v[3]) << 16;
		*(uint2 *)((uint16_t *)b + i) = x;
	}
};

template <> struct io<TIER_BF16> : io16<TIER_BF16> {};
template <> struct io<TIER_FP16> : io16<TIER_FP16> {};

static inline size_t dtype_size(int dt)
{
	return dt == TIER_FP32 ? 4 : dt == TIER_Q8 ? 1 : 2;
}

/* The piece containing launch tile @tile: the first i with tile < end[i]. */
__device__ __forceinline__ unsigned find_piece(const unsigned *end, unsigned n, unsigned long long tile)
{
	unsigned lo = 0, hi = n - 1;

	while (lo < hi) {
		unsigned mid = (lo + hi) / 2;

		if (tile < end[mid])
			hi = mid;
		else
			lo = mid + 1;
	}
	return lo;
}

/* This block's tile of @b: its piece *pc and elements [*begin, *end) of it. */
__device__ __forceinline__ void tile_of(const struct step_batch &b, unsigned *pc, size_t *begin,
					size_t *end)
{
	const unsigned tile = blockIdx.x;
	const unsigned p = find_piece(b.tile_end, b.n, tile);
	const size_t n = b.k[p].n;

	*pc = p;
	*begin = (size_t)(tile - (p ? b.tile_end[p - 1] : 0u)) * STEP_TILE;
	*end = n - *begin < STEP_TILE ? n : *begin + STEP_TILE;
}

/* Launches @b's tiles: @grid blocks on @st. */
typedef void (*step_launch_fn)(const struct step_batch &b, unsigned grid, cudaStream_t st);

/*
 * Launches @launch over @chunks with the parameters of @b (its n, vec,
 * tile_end and k are filled in here): each chunk cut into pieces of whole
 * tiles, MAX_PIECES pieces or MAX_LAUNCH_TILES tiles a launch, vector
 * loads for the pieces whose arrays allow them (kernels/adamw.cu).  0 or
 * the CUDA error, with the detail.
 */
int adamw_cuda_launch_chunks(struct step_batch &b, step_launch_fn launch,
			     enum tier_dtype moment_dtype, enum tier_dtype grad_dtype,
			     enum tier_dtype out_dtype, const struct adamw_chunk *chunks,
			     size_t nchunks, cudaStream_t st);

#endif
