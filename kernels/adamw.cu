/*
 * adamw.cu - the Adam/AdamW update and the gradient check on a CUDA device
 * (kernels/adamw_cuda.h), many tensors per launch.
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
 * Update.  One block of STEP_THREADS threads per tile of STEP_TILE
 * elements.  A piece whose arrays are all aligned to a 4-element vector
 * (float4 for fp32, 8 bytes for 16-bit types) loads and stores 4 elements
 * per thread per round, the tail (n % 4) element by element; any other
 * piece goes element by element (coalesced).  The per-element arithmetic is
 * adam_elem() of adam_math.h with the adam_consts that adam_consts_init()
 * computed once on the host, so the results equal the CPU kernels' bit for
 * bit, provided this file is compiled with --fmad=false (no contraction of
 * a multiply and an add into an FMA; kernels/meson.build builds this file
 * on its own with it, and with the IEEE defaults --prec-div=true
 * --prec-sqrt=true --ftz=false spelled out) and without --use_fast_math.
 * Its host part (adam_consts_init) is compiled with -ffp-contract=off, as
 * the C kernels are.
 *
 * Conversions.  bf16 and fp16, both ways, through adam_math.h (the
 * functions the CPU kernels use; __host__ __device__ here), so a parameter
 * copy or a moment is the same bits on both, NaNs included.  (A NaN that
 * the arithmetic itself produces is the GPU's canonical NaN, not x86's
 * default NaN, so NaN results differ in their bits: finite data, and infs,
 * are bit for bit.)
 *
 * q8 moments (adam_math.h, "q8 moments").  The same tiles; a warp per
 * TIER_Q8_BLOCK-element block of the tile, TIER_Q8_BLOCK / 32 elements per
 * lane (runs of 4 with vector loads where the piece is aligned): decode,
 * adam_elem(), the parameter and its copy stored; the block's largest
 * magnitudes (integer maxima of the bits, sign cleared: exact in any
 * order, a NaN wins) by warp shuffles; every lane computes the scales
 * (q8_scale), lane 0 stores them, each lane its codes.  The same functions
 * as the CPU kernels, so the same bytes.  A piece starts at a tile
 * boundary, a multiple of TIER_Q8_BLOCK, so its blocks are its chunk's,
 * and a block's indices share their high 32 bits: the random stream's key
 * once per block.
 *
 * Gradient check.  It follows the summation order of kernels/gradcheck.h,
 * so the sum is tier_grad_check()'s, bit for bit (the squares are exact in
 * double, every addition is in the same order):
 *   1. one half-warp per GRADCHECK_TILE tile: lane k adds the squares of
 *      elements k, k + 16, ... of the tile in order; lane 0 joins the 16
 *      lanes with the fixed tree and writes the tile's sum;
 *   2. one block: a thread per chunk adds its tiles' sums in tile order from
 *      0.0; then thread 0 adds the chunks' sums in chunk order from 0.0.
 * The flag is !isfinite(sum), as on the CPU (gradcheck.c explains why that
 * is exactly "an element is inf or nan").  Step 2 is sequential per chunk
 * (one double add per 16384 elements), which the order requires.
 */
#include "config.h"

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <string.h>

#include "common/cuda_check.h"
#include "common/error.h"
#include "kernels/adam_math.h"
#include "kernels/adamw_cuda.h"
#include "kernels/gradcheck.h"

#define MAX_PIECES 48                 /* pieces per launch (the parameters under 4 KiB) */
#define STEP_THREADS 256
#define STEP_TILE 4096                /* elements per block of the update */
#define GC_THREADS 256
#define GC_TILES_PER_BLOCK (GC_THREADS / GRADCHECK_LANES)
#define GC_BATCH 16                   /* loads in flight per lane of the check */
/* Tiles per launch, far below the grid limit (2^31 - 1 blocks). */
#define MAX_LAUNCH_TILES (1u << 30)

static_assert(STEP_TILE % (STEP_THREADS * 4) == 0, "a tile is whole vector rounds");
static_assert(STEP_TILE % TIER_Q8_BLOCK == 0, "q8: a tile is whole blocks");
static_assert(GRADCHECK_LANES == 16, "gc_tiles() joins 16 lanes");
static_assert(GC_THREADS % GRADCHECK_LANES == 0, "whole half-warps per tile");
static_assert(GRADCHECK_TILE % GRADCHECK_LANES == 0, "a tile is whole lane rounds");

/* The launch parameters of the update. */
struct step_batch {
	struct adam_consts c;
	uint32_t roof_mask;                   /* the roofline's: 0, unknown to the compiler */
	unsigned n;                           /* pieces */
	unsigned long long vec;               /* bit i: piece i takes vector loads */
	unsigned tile_end[MAX_PIECES];        /* inclusive prefix of the pieces' tiles */
	struct adamw_chunk k[MAX_PIECES];
};

/* The launch parameters of the gradient check's first pass. */
struct gc_batch {
	const void *grad[MAX_PIECES];
	unsigned long long len[MAX_PIECES];
	unsigned tile_end[MAX_PIECES];        /* inclusive prefix of the pieces' tiles */
	long long chunk[MAX_PIECES];          /* chunk number if the piece starts one, else -1 */
	unsigned long long tile_base;         /* global number of this launch's first tile */
	unsigned n;
};

static_assert(sizeof(struct step_batch) <= 4000, "launch parameters under 4 KiB");
static_assert(sizeof(struct gc_batch) <= 4000, "launch parameters under 4 KiB");

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

static size_t dtype_size(int dt)
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

/* ----------------------------------------------------------------- update */

/* The random bits of element @i of @k (adam_math.h, sr_hash32). */
__device__ __forceinline__ uint32_t sr_bits(const struct adam_consts &c, const struct adamw_chunk &k,
					    size_t i)
{
	uint64_t idx = k.index0 + i;

	return sr_hash32(sr_key(c.sr_base, (uint32_t)(idx >> 32)) ^ (uint32_t)idx);
}

/* Stores the moments and the copy of element @i, rounded as @c says. */
template <int MT, int OT>
__device__ __forceinline__ void store1(const struct adam_consts &c, const struct adamw_chunk &k,
				       size_t i, float p, float m, float v)
{
	const bool srm = MT == TIER_BF16 && c.sr_moments;
	const bool sro = OT == TIER_BF16 && c.sr_out && k.param_out;
	uint32_t r = srm || sro ? sr_bits(c, k, i) : 0;

	if (srm) {
		((uint16_t *)k.exp_avg)[i] = f32_to_bf16_sr(m, r & 0xffffu);
		((uint16_t *)k.exp_avg_sq)[i] = f32_to_bf16_sr(v, r >> 16);
	} else {
		io<MT>::st(k.exp_avg, i, m);
		io<MT>::st(k.exp_avg_sq, i, v);
	}
	if (sro)
		((uint16_t *)k.param_out)[i] = f32_to_bf16_sr(p, sr_out_bits(r));
	else if (k.param_out)
		io<OT>::st(k.param_out, i, p);
}

template <int MT, int GT, int OT>
__device__ __forceinline__ void step1(const struct adam_consts &c, const struct adamw_chunk &k,
				      size_t i)
{
	float g = io<GT>::ld(k.grad, i), p = k.param[i];
	float m = io<MT>::ld(k.exp_avg, i), v = io<MT>::ld(k.exp_avg_sq, i);

	adam_elem(&c, g, &p, &m, &v);
	k.param[i] = p;
	store1<MT, OT>(c, k, i, p, m, v);
}

template <int MT, int GT, int OT>
__device__ __forceinline__ void step4(const struct adam_consts &c, const struct adamw_chunk &k,
				      size_t i)
{
	float g[4], p[4], m[4], v[4];

	io<GT>::ld4(k.grad, i, g);
	io<TIER_FP32>::ld4(k.param, i, p);
	io<MT>::ld4(k.exp_avg, i, m);
	io<MT>::ld4(k.exp_avg_sq, i, v);
#pragma unroll
	for (int j = 0; j < 4; j++)
		adam_elem(&c, g[j], &p[j], &m[j], &v[j]);
	io<TIER_FP32>::st4(k.param, i, p);
	if ((MT == TIER_BF16 && c.sr_moments) || (OT == TIER_BF16 && c.sr_out && k.param_out)) {
#pragma unroll
		for (int j = 0; j < 4; j++)
			store1<MT, OT>(c, k, i + j, p[j], m[j], v[j]);
		return;
	}
	io<MT>::st4(k.exp_avg, i, m);
	io<MT>::st4(k.exp_avg_sq, i, v);
	if (k.param_out)
		io<OT>::st4(k.param_out, i, p);
}

template <int MT, int GT, int OT>
__global__ void __launch_bounds__(STEP_THREADS) step_kernel(const __grid_constant__ struct step_batch b)
{
	unsigned p;
	size_t begin, end;

	tile_of(b, &p, &begin, &end);
	const struct adamw_chunk k = b.k[p];
	const struct adam_consts c = b.c;
	size_t i = begin;

	if ((b.vec >> p) & 1u) {
		const size_t vend = begin + ((end - begin) & ~(size_t)3);

#pragma unroll 4
		for (i = begin + 4 * (size_t)threadIdx.x; i < vend; i += 4 * STEP_THREADS)
			step4<MT, GT, OT>(c, k, i);
		i = vend;
	}
	for (i += threadIdx.x; i < end; i += STEP_THREADS)
		step1<MT, GT, OT>(c, k, i);
}

typedef void (*step_launch_fn)(const struct step_batch &b, unsigned grid, cudaStream_t st);

template <int MT, int GT, int OT>
static void step_launch(const struct step_batch &b, unsigned grid, cudaStream_t st)
{
	step_kernel<MT, GT, OT><<<grid, STEP_THREADS, 0, st>>>(b);
}

#define STEP_OUTS(m, g) { step_launch<m, g, TIER_FP32>, step_launch<m, g, TIER_BF16>, \
			  step_launch<m, g, TIER_FP16> }
#define STEP_GRADS(m) { STEP_OUTS(m, TIER_FP32), STEP_OUTS(m, TIER_BF16), STEP_OUTS(m, TIER_FP16) }

/* [moment][grad][out] */
static const step_launch_fn step_table[2][3][3] = { STEP_GRADS(TIER_FP32), STEP_GRADS(TIER_BF16) };

/* ------------------------------------------------------------- q8 update */

/* Elements of a q8 block per lane: a warp updates a whole block. */
#define Q8_PER_LANE (TIER_Q8_BLOCK / 32)
static_assert(TIER_Q8_BLOCK % 128 == 0, "q8: a block is whole runs of 4 elements a lane");

/* The largest of the warp's @x, to every lane. */
__device__ __forceinline__ uint32_t warp_max(uint32_t x)
{
#pragma unroll
	for (int o = 16; o > 0; o /= 2) {
		uint32_t y = __shfl_xor_sync(0xffffffffu, x, o);

		x = y > x ? y : x;
	}
	return x;
}

/*
 * The stochastic-rounding key of the q8 block at element @q of @k: index0
 * and q are multiples of TIER_Q8_BLOCK, a divisor of 2^32, so the block's
 * indices share their high 32 bits, and an element's bits are
 * sr_hash32(key ^ (uint32_t)index), as sr_bits() gives them.
 */
__device__ __forceinline__ uint32_t q8_key(const struct adam_consts &c, const struct adamw_chunk &k,
					   size_t q)
{
	return sr_key(c.sr_base, (uint32_t)((k.index0 + q) >> 32));
}

/*
 * One element of a q8 block: its moments decoded from codes @bm, @bv with
 * the block's scales @sm, @sv, updated with gradient @g (parameter *@p,
 * the new moments to *@m, *@v), and its random bits (index @idx's low 32
 * bits) to *@r, 0 when nothing rounds stochastically.
 */
__device__ __forceinline__ void q8_elem(const struct adam_consts &c, uint32_t key, uint32_t idx,
					bool srm, bool sro, uint32_t bm, uint32_t bv, float sm, float sv,
					float g, float *p, float *m, float *v, uint32_t *r)
{
	*m = q8_dec_m(bm, sm);
	*v = q8_dec_v(bv, sv);
	adam_elem(&c, g, p, m, v);
	*r = srm || sro ? sr_hash32(key ^ idx) : 0u;
}

/* The codes of an element's new moments @m, @v in a block of inverses
 * @invm, @invv (q8_scale), rounded with its random bits @r when @srm. */
__device__ __forceinline__ void q8_codes(bool srm, float invm, float invv, float m, float v, uint32_t r,
					 uint32_t *cm, uint32_t *cv)
{
	const uint32_t rm = srm ? (r & 0xffffu) << 4 : Q8_RND_NEAREST;
	const uint32_t rv = srm ? (r >> 16) << 4 : Q8_RND_NEAREST;

	*cm = invm != 0.0f ? q8_enc_m(m, invm, rm) : 0u;
	*cv = invv != 0.0f ? q8_enc_v(v, invv, rv) : 0u;
}

/*
 * The scales of block @blk from each lane's largest magnitudes @hm, @hv:
 * lane 0 stores them, every lane gets their inverses *@invm, *@invv.
 */
__device__ __forceinline__ void q8_block_scales(const struct adamw_chunk &k, size_t blk, unsigned lane,
						uint32_t hm, uint32_t hv, float *invm, float *invv)
{
	float scm, scv;

	hm = warp_max(hm);
	hv = warp_max(hv);
	scm = q8_scale(hm, invm);
	scv = q8_scale(hv, invv);
	if (lane == 0) {
		k.exp_avg_scale[blk] = scm;
		k.exp_avg_sq_scale[blk] = scv;
	}
}

/*
 * A whole block whose arrays are vector-aligned: lane l holds the runs of
 * 4 elements at 4l, 4l + 128, ... of the block (Q8_PER_LANE / 4 of them),
 * each run one 16-byte load of the parameter and of an fp32 gradient and
 * one 4-byte load of each moment's codes, all issued before the first is
 * used; each warp load is one contiguous span.  The same arithmetic per
 * element as q8_block_1, so the same bytes.
 */
template <int GT, int OT>
__device__ __forceinline__ void q8_block_vec(const struct adam_consts &c, const struct adamw_chunk &k,
					     size_t q, unsigned lane, bool srm, bool sro)
{
	constexpr int R = Q8_PER_LANE / 4;
	const size_t blk = q / TIER_Q8_BLOCK;
	const uint32_t key = q8_key(c, k, q), lo = (uint32_t)(k.index0 + q);
	const float sm = k.exp_avg_scale[blk], sv = k.exp_avg_sq_scale[blk];
	float g[R][4], p[R][4], m[R][4], v[R][4], invm, invv;
	uint32_t bm[R], bv[R], r[R][4], hm = 0, hv = 0;

#pragma unroll
	for (int e = 0; e < R; e++) {
		const size_t i = q + (size_t)e * 128 + 4 * lane;

		io<GT>::ld4(k.grad, i, g[e]);
		io<TIER_FP32>::ld4(k.param, i, p[e]);
		bm[e] = *(const uint32_t *)((const unsigned char *)k.exp_avg + i);
		bv[e] = *(const uint32_t *)((const unsigned char *)k.exp_avg_sq + i);
	}
#pragma unroll
	for (int e = 0; e < R; e++) {
		const size_t i = q + (size_t)e * 128 + 4 * lane;
		const uint32_t o = (uint32_t)e * 128 + 4 * lane;

#pragma unroll
		for (int j = 0; j < 4; j++) {
			q8_elem(c, key, lo + o + j, srm, sro, (bm[e] >> 8 * j) & 0xffu,
				    (bv[e] >> 8 * j) & 0xffu, sm, sv, g[e][j], &p[e][j], &m[e][j],
				    &v[e][j], &r[e][j]);
			hm = max(hm, f32_bits(m[e][j]) & 0x7fffffffu);
			hv = max(hv, f32_bits(v[e][j]) & 0x7fffffffu);
		}
		io<TIER_FP32>::st4(k.param, i, p[e]);
		if (sro) {
			uint2 x;

			x.x = (uint32_t)f32_to_bf16_sr(p[e][0], sr_out_bits(r[e][0])) |
			      (uint32_t)f32_to_bf16_sr(p[e][1], sr_out_bits(r[e][1])) << 16;
			x.y = (uint32_t)f32_to_bf16_sr(p[e][2], sr_out_bits(r[e][2])) |
			      (uint32_t)f32_to_bf16_sr(p[e][3], sr_out_bits(r[e][3])) << 16;
			*(uint2 *)((uint16_t *)k.param_out + i) = x;
		} else if (k.param_out) {
			io<OT>::st4(k.param_out, i, p[e]);
		}
	}
	q8_block_scales(k, blk, lane, hm, hv, &invm, &invv);
#pragma unroll
	for (int e = 0; e < R; e++) {
		const size_t i = q + (size_t)e * 128 + 4 * lane;
		uint32_t wm = 0, wv = 0;

#pragma unroll
		for (int j = 0; j < 4; j++) {
			uint32_t cm, cv;

			q8_codes(srm, invm, invv, m[e][j], v[e][j], r[e][j], &cm, &cv);
			wm |= cm << 8 * j;
			wv |= cv << 8 * j;
		}
		*(uint32_t *)((unsigned char *)k.exp_avg + i) = wm;
		*(uint32_t *)((unsigned char *)k.exp_avg_sq + i) = wv;
	}
}

/*
 * Any other block (an unaligned piece, or a piece's last, partial block):
 * lane l holds elements l, l + 32, ... of the block (each load and store
 * of the warp is contiguous), Q8_PER_LANE of them, all loaded before the
 * first is used.
 */
template <int GT, int OT>
__device__ __forceinline__ void q8_block_1(const struct adam_consts &c, const struct adamw_chunk &k,
					   size_t q, size_t end, unsigned lane, bool srm, bool sro)
{
	const unsigned char *cm = (const unsigned char *)k.exp_avg, *cv = (const unsigned char *)k.exp_avg_sq;
	const size_t blk = q / TIER_Q8_BLOCK;
	const uint32_t key = q8_key(c, k, q), lo = (uint32_t)(k.index0 + q);
	const float sm = k.exp_avg_scale[blk], sv = k.exp_avg_sq_scale[blk];
	float g[Q8_PER_LANE], p[Q8_PER_LANE], m[Q8_PER_LANE], v[Q8_PER_LANE];
	unsigned char bm[Q8_PER_LANE], bv[Q8_PER_LANE];
	uint32_t r[Q8_PER_LANE], hm = 0, hv = 0;
	float invm, invv;

#pragma unroll
	for (int e = 0; e < Q8_PER_LANE; e++) {
		const size_t i = q + (size_t)e * 32 + lane;

		if (i < end) {
			g[e] = io<GT>::ld(k.grad, i);
			p[e] = k.param[i];
			bm[e] = cm[i];
			bv[e] = cv[i];
		}
	}
#pragma unroll
	for (int e = 0; e < Q8_PER_LANE; e++) {
		const size_t i = q + (size_t)e * 32 + lane;

		m[e] = v[e] = 0.0f; /* out of range lanes add 0 to the maxima */
		r[e] = 0;
		if (i >= end)
			continue;
		q8_elem(c, key, lo + (uint32_t)e * 32 + lane, srm, sro, bm[e], bv[e], sm, sv, g[e],
			    &p[e], &m[e], &v[e], &r[e]);
		k.param[i] = p[e];
		if (sro)
			((uint16_t *)k.param_out)[i] = f32_to_bf16_sr(p[e], sr_out_bits(r[e]));
		else if (k.param_out)
			io<OT>::st(k.param_out, i, p[e]);
		hm = max(hm, f32_bits(m[e]) & 0x7fffffffu);
		hv = max(hv, f32_bits(v[e]) & 0x7fffffffu);
	}
	q8_block_scales(k, blk, lane, hm, hv, &invm, &invv);
#pragma unroll
	for (int e = 0; e < Q8_PER_LANE; e++) {
		const size_t i = q + (size_t)e * 32 + lane;

		if (i < end) {
			uint32_t wm, wv;

			q8_codes(srm, invm, invv, m[e], v[e], r[e], &wm, &wv);
			((unsigned char *)k.exp_avg)[i] = (unsigned char)wm;
			((unsigned char *)k.exp_avg_sq)[i] = (unsigned char)wv;
		}
	}
}

/*
 * A warp per TIER_Q8_BLOCK-element block, the tile's blocks dealt out to
 * the warps, each block's largest magnitudes by shuffles alone, so no
 * barrier: q8_block_vec for a whole block of a vector-aligned piece,
 * q8_block_1 otherwise.  At most 80 registers a thread (a few spill to
 * L1), so three blocks of STEP_THREADS an SM: measured on an H100
 * (performance.md, "q8 on the GPU"), 0.92 of the same-traffic kernel,
 * against 0.80 with the compiler's 94 registers and two blocks an SM.
 * Before: a thread per element of a block, the blocks one after another,
 * two barriers per block, 0.57; a warp per block, element by element, the
 * random stream's key (three 64-bit multiplies) computed per element, 0.64.
 */
template <int GT, int OT>
__global__ void __launch_bounds__(STEP_THREADS, 3) q8_kernel(const __grid_constant__ struct step_batch b)
{
	const unsigned lane = threadIdx.x % 32, warp = threadIdx.x / 32;
	unsigned pc;
	size_t begin, end;

	tile_of(b, &pc, &begin, &end);
	const struct adamw_chunk k = b.k[pc];
	const struct adam_consts c = b.c;
	const bool srm = c.sr_moments != 0, sro = OT == TIER_BF16 && c.sr_out && k.param_out;
	const bool vec = (b.vec >> pc) & 1u;

	for (size_t q = begin + (size_t)warp * TIER_Q8_BLOCK; q < end;
	     q += (size_t)(STEP_THREADS / 32) * TIER_Q8_BLOCK) {
		if (vec && end - q >= TIER_Q8_BLOCK)
			q8_block_vec<GT, OT>(c, k, q, lane, srm, sro);
		else
			q8_block_1<GT, OT>(c, k, q, end, lane, srm, sro);
	}
}

template <int GT, int OT>
static void q8_launch(const struct step_batch &b, unsigned grid, cudaStream_t st)
{
	q8_kernel<GT, OT><<<grid, STEP_THREADS, 0, st>>>(b);
}

#define Q8_OUTS(g) { q8_launch<g, TIER_FP32>, q8_launch<g, TIER_BF16>, q8_launch<g, TIER_FP16> }

/* [grad][out] */
static const step_launch_fn q8_table[3][3] = { Q8_OUTS(TIER_FP32), Q8_OUTS(TIER_BF16),
					       Q8_OUTS(TIER_FP16) };

static bool aligned(const void *ptr, size_t to)
{
	return (uintptr_t)ptr % to == 0;
}

/* Elements [off, off + n) of @k, same arrays. */
static struct adamw_chunk chunk_slice(const struct adamw_chunk &k, size_t off, size_t n,
				      size_t msz, size_t gsz, size_t osz)
{
	struct adamw_chunk s;

	s.param = k.param + off;
	s.exp_avg = (char *)k.exp_avg + off * msz;
	s.exp_avg_sq = (char *)k.exp_avg_sq + off * msz;
	s.grad = (const char *)k.grad + off * gsz;
	s.param_out = k.param_out ? (char *)k.param_out + off * osz : NULL;
	s.n = n;
	s.index0 = k.index0 + off;
	/* q8 (msz 1): off is a multiple of STEP_TILE, so of TIER_Q8_BLOCK */
	s.exp_avg_scale = k.exp_avg_scale && msz == 1 ? k.exp_avg_scale + off / TIER_Q8_BLOCK : k.exp_avg_scale;
	s.exp_avg_sq_scale = k.exp_avg_sq_scale && msz == 1 ? k.exp_avg_sq_scale + off / TIER_Q8_BLOCK
							    : k.exp_avg_sq_scale;
	return s;
}

/*
 * Launches @launch over @chunks with the parameters of @proto: each chunk
 * cut into pieces of whole tiles, MAX_PIECES pieces or MAX_LAUNCH_TILES
 * tiles a launch, vector loads for the pieces whose arrays allow them.
 */
static int launch_chunks(struct step_batch &b, step_launch_fn launch, enum tier_dtype moment_dtype,
			 enum tier_dtype grad_dtype, enum tier_dtype out_dtype,
			 const struct adamw_chunk *chunks, size_t nchunks, cudaStream_t st)
{
	size_t msz = dtype_size(moment_dtype), gsz = dtype_size(grad_dtype), osz = dtype_size(out_dtype);
	size_t ma = 4 * msz, ga = 4 * gsz, oa = 4 * osz;
	unsigned tiles = 0;
	int rc = 0;

	b.n = 0;
	b.vec = 0;
	for (size_t i = 0; i < nchunks; i++) {
		const struct adamw_chunk &k = chunks[i];
		bool vec = aligned(k.param, 16) && aligned(k.exp_avg, ma) && aligned(k.exp_avg_sq, ma) &&
			   aligned(k.grad, ga) && (!k.param_out || aligned(k.param_out, oa));

		for (size_t done = 0; done < k.n;) {
			size_t left = (k.n - done + STEP_TILE - 1) / STEP_TILE;
			size_t take = left < MAX_LAUNCH_TILES - tiles ? left : MAX_LAUNCH_TILES - tiles;
			size_t cnt = take * STEP_TILE < k.n - done ? take * STEP_TILE : k.n - done;

			b.k[b.n] = chunk_slice(k, done, cnt, msz, gsz, osz);
			if (vec)
				b.vec |= 1ull << b.n;
			tiles += (unsigned)take;
			b.tile_end[b.n++] = tiles;
			done += cnt;
			if (b.n == MAX_PIECES || tiles == MAX_LAUNCH_TILES) {
				launch(b, tiles, st);
				TIER_CUDA_CHECK_GOTO(cudaGetLastError(), rc, out);
				b.n = 0;
				b.vec = 0;
				tiles = 0;
			}
		}
	}
	if (b.n) {
		launch(b, tiles, st);
		TIER_CUDA_CHECK_GOTO(cudaGetLastError(), rc, out);
	}
out:
	return rc;
}

extern "C" int adamw_cuda_step(const struct tier_adam_params *p, enum tier_dtype moment_dtype,
			       enum tier_dtype grad_dtype, enum tier_dtype out_dtype,
			       const struct adamw_chunk *chunks, size_t nchunks, void *stream)
{
	cudaStream_t st = (cudaStream_t)stream;
	struct step_batch b;
	step_launch_fn launch;
	bool any_out = false, any_work = false;
	int rc = 0;

	rc = adam_params_check(p, "adamw cuda");
	if (rc)
		return rc;
	if (!chunks && nchunks)
		return ts_err(-EINVAL, "adamw cuda: %zu chunks but no chunk array", nchunks);
	if (moment_dtype != TIER_FP32 && moment_dtype != TIER_BF16 && moment_dtype != TIER_Q8)
		return ts_err(-EINVAL, "adamw cuda: moment dtype %d is not TIER_FP32, TIER_BF16 or TIER_Q8",
				(int)moment_dtype);
	if ((unsigned)grad_dtype > (unsigned)TIER_FP16)
		return ts_err(-EINVAL, "adamw cuda: gradient dtype %d is not TIER_FP32, TIER_BF16 "
				"or TIER_FP16", (int)grad_dtype);
	for (size_t i = 0; i < nchunks; i++) {
		const struct adamw_chunk *k = &chunks[i];

		any_out |= k->param_out != NULL;
		if (!k->n)
			continue;
		any_work = true;
		if (!k->param || !k->exp_avg || !k->exp_avg_sq || !k->grad)
			return ts_err(-EINVAL, "adamw cuda: chunk %zu of %zu elements has a NULL %s", i,
					k->n, !k->param ? "param" : !k->exp_avg ? "exp_avg"
					: !k->exp_avg_sq ? "exp_avg_sq" : "grad");
		if (moment_dtype == TIER_Q8 && (!k->exp_avg_scale || !k->exp_avg_sq_scale))
			return ts_err(-EINVAL, "adamw cuda: chunk %zu of %zu elements has q8 moments and a NULL %s",
					i, k->n, !k->exp_avg_scale ? "exp_avg_scale" : "exp_avg_sq_scale");
		if (moment_dtype == TIER_Q8 && k->index0 % TIER_Q8_BLOCK)
			return ts_err(-EINVAL, "adamw cuda: chunk %zu: index0 %llu of q8 moments is not a multiple of the block (%d)",
					i, (unsigned long long)k->index0, TIER_Q8_BLOCK);
	}
	if (any_out && (unsigned)out_dtype > (unsigned)TIER_FP16)
		return ts_err(-EINVAL, "adamw cuda: output dtype %d is not TIER_FP32, TIER_BF16 or "
				"TIER_FP16", (int)out_dtype);
	if (!any_work)
		return 0;
	if (!any_out)
		out_dtype = TIER_FP32; /* never stored */

	memset(&b, 0, sizeof(b));
	adam_consts_init(p, &b.c);
	launch = moment_dtype == TIER_Q8 ? q8_table[grad_dtype][out_dtype]
					 : step_table[moment_dtype][grad_dtype][out_dtype];
	rc = launch_chunks(b, launch, moment_dtype, grad_dtype, out_dtype, chunks, nchunks, st);
	if (rc)
		ts_err_prefix("adamw cuda: step launch");
	return rc;
}

/* ------------------------------------------------------------- roofline */

/*
 * The update's same-traffic kernel: the same tiles, the same loads and
 * stores of every array (vector ones where the update takes them), with
 * one integer operation per word instead of the arithmetic: each word
 * stored is the word loaded XOR (a gradient word AND roof_mask), and the
 * mask is 0, so the arrays keep their values, but the compiler cannot know
 * it and must move every byte.  Arrays are handled as words of their
 * element size S (4 elements: S words).  q8 moments (S = 1): the thread at
 * each TIER_Q8_BLOCK boundary loads and stores both block scales.
 */
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
	rc = launch_chunks(b, roof_table[msz == 4 ? 0 : msz == 2 ? 1 : 2][gsz == 4 ? 0 : 1][osz == 4 ? 0 : 1],
			   moment_dtype, grad_dtype, out_dtype, chunks, nchunks, (cudaStream_t)stream);
	if (rc)
		ts_err_prefix("adamw cuda: roofline launch");
	return rc;
}

/* --------------------------------------------------------- gradient check */

template <int GT>
__device__ __forceinline__ double gc_sq(const void *g, size_t i)
{
	float x = io<GT>::ld(g, i);

	return (double)x * (double)x;
}

/*
 * Pass 1: half-warp h of block b sums launch tile b * GC_TILES_PER_BLOCK + h
 * into tile_sums[tile_base + that]; the piece's first tile, when the piece
 * starts a chunk, records that tile number in chunk_start[chunk].
 */
template <int GT>
__global__ void __launch_bounds__(GC_THREADS)
gc_tiles(const __grid_constant__ struct gc_batch b, double *tile_sums, unsigned long long *chunk_start)
{
	__shared__ double lanes[GC_THREADS];
	const unsigned long long tile = (unsigned long long)blockIdx.x * GC_TILES_PER_BLOCK +
					threadIdx.x / GRADCHECK_LANES;
	const unsigned lane = threadIdx.x % GRADCHECK_LANES;
	const bool valid = tile < b.tile_end[b.n - 1];
	unsigned p = 0;
	unsigned long long first = 0;
	double s = 0.0;

	if (valid) {
		p = find_piece(b.tile_end, b.n, tile);
		first = p ? b.tile_end[p - 1] : 0u;

		const size_t begin = (size_t)(tile - first) * GRADCHECK_TILE;
		const size_t len = b.len[p];
		const size_t end = len - begin < GRADCHECK_TILE ? len : begin + GRADCHECK_TILE;
		const void *g = b.grad[p];

		/* The adds are one chain in a fixed order; the loads are not:
		 * GC_BATCH of them issued before their adds hide the memory's
		 * latency (the loop unrolled 8 by the compiler left a lane
		 * waiting on about 128 round trips per tile). */
		size_t j = begin + lane;

		for (; j + (GC_BATCH - 1) * GRADCHECK_LANES < end; j += GC_BATCH * GRADCHECK_LANES) {
			float x[GC_BATCH];

#pragma unroll
			for (int u = 0; u < GC_BATCH; u++)
				x[u] = io<GT>::ld(g, j + (size_t)u * GRADCHECK_LANES);
#pragma unroll
			for (int u = 0; u < GC_BATCH; u++)
				s += (double)x[u] * (double)x[u];
		}
		for (; j < end; j += GRADCHECK_LANES)
			s += gc_sq<GT>(g, j);
	}
	lanes[threadIdx.x] = s;
	__syncthreads();
	if (valid && lane == 0) {
		const double *l = &lanes[threadIdx.x];
		double v[4];

		for (int k = 0; k < 4; k++)
			v[k] = (l[k] + l[4 + k]) + (l[8 + k] + l[12 + k]);
		tile_sums[b.tile_base + tile] = (v[0] + v[1]) + (v[2] + v[3]);
		if (tile == first && b.chunk[p] >= 0)
			chunk_start[b.chunk[p]] = b.tile_base + tile;
	}
}

/*
 * Pass 2 (one block): chunk c's sum is its tiles' sums added in order from
 * 0.0, into csum[c]; *out is the chunks' sums added in order from 0.0.
 */
__global__ void __launch_bounds__(GC_THREADS)
gc_final(const double *tile_sums, const unsigned long long *chunk_start, unsigned long long nchunks,
	 unsigned long long ntiles, double *csum, double *out)
{
	for (unsigned long long c = threadIdx.x; c < nchunks; c += GC_THREADS) {
		const unsigned long long e = c + 1 < nchunks ? chunk_start[c + 1] : ntiles;
		double t = 0.0;

		unsigned long long i = chunk_start[c];

		for (; i + GC_BATCH <= e; i += GC_BATCH) { /* as gc_tiles: loads first */
			double x[GC_BATCH];

#pragma unroll
			for (int u = 0; u < GC_BATCH; u++)
				x[u] = tile_sums[i + u];
#pragma unroll
			for (int u = 0; u < GC_BATCH; u++)
				t += x[u];
		}
		for (; i < e; i++)
			t += tile_sums[i];
		csum[c] = t;
	}
	__syncthreads();
	if (threadIdx.x == 0) {
		double t = 0.0;

		for (unsigned long long c = 0; c < nchunks; c++)
			t += csum[c];
		*out = t;
	}
}

typedef void (*gc_launch_fn)(const struct gc_batch &b, unsigned grid, cudaStream_t st,
			     double *tile_sums, unsigned long long *chunk_start);

template <int GT>
static void gc_launch(const struct gc_batch &b, unsigned grid, cudaStream_t st, double *tile_sums,
		      unsigned long long *chunk_start)
{
	gc_tiles<GT><<<grid, GC_THREADS, 0, st>>>(b, tile_sums, chunk_start);
}

static const gc_launch_fn gc_table[3] = { gc_launch<TIER_FP32>, gc_launch<TIER_BF16>,
					  gc_launch<TIER_FP16> };

static int cuda_fail(cudaError_t e, const char *call)
{
	(void)cudaGetLastError();
	return ts_err(ts_cuda_errno(e), "%s: %s (%s:%d)", call, cudaGetErrorString(e), __FILE__,
			__LINE__);
}

/*
 * The check's scratch comes from a memory pool of our own per device, which
 * keeps up to GC_POOL_KEEP bytes it was given back.  The device's default
 * pool gives everything back to the driver at each synchronization (its
 * release threshold is 0), so every check, which ends in one, mapped and
 * unmapped its scratch anew.  Created on first use and kept for the
 * process's life (a pool per device, a few MiB).  NULL where the device has
 * no stream-ordered allocator: then cudaMalloc.
 */
#define GC_POOL_KEEP (64ull << 20)
#define GC_POOL_DEVICES 64

static pthread_mutex_t gc_pool_lock = PTHREAD_MUTEX_INITIALIZER;
static cudaMemPool_t gc_pools[GC_POOL_DEVICES];
static bool gc_pool_tried[GC_POOL_DEVICES];

static cudaMemPool_t gc_pool(void)
{
	cudaMemPool_t pool = NULL;
	int dev;

	if (cudaGetDevice(&dev) != cudaSuccess || dev < 0 || dev >= GC_POOL_DEVICES) {
		(void)cudaGetLastError();
		return NULL;
	}
	pthread_mutex_lock(&gc_pool_lock);
	if (!gc_pool_tried[dev]) {
		cudaMemPoolProps props;
		unsigned long long keep = GC_POOL_KEEP; /* cuuint64_t */

		gc_pool_tried[dev] = true;
		memset(&props, 0, sizeof(props));
		props.allocType = cudaMemAllocationTypePinned;
		props.location.type = cudaMemLocationTypeDevice;
		props.location.id = dev;
		if (cudaMemPoolCreate(&gc_pools[dev], &props) == cudaSuccess) {
			if (cudaMemPoolSetAttribute(gc_pools[dev], cudaMemPoolAttrReleaseThreshold,
						    &keep) != cudaSuccess) {
				(void)cudaMemPoolDestroy(gc_pools[dev]);
				gc_pools[dev] = NULL;
			}
		} else {
			gc_pools[dev] = NULL;
		}
		(void)cudaGetLastError();
	}
	pool = gc_pools[dev];
	pthread_mutex_unlock(&gc_pool_lock);
	return pool;
}

extern "C" int adamw_cuda_grad_check(const struct adamw_chunk *chunks, size_t nchunks,
				     enum tier_dtype dtype, void *stream, double *sumsq, int *nonfinite)
{
	cudaStream_t st = (cudaStream_t)stream;
	unsigned long long ntiles = 0, nchunk_used = 0;
	gc_launch_fn launch;
	cudaMemPool_t pool;
	struct gc_batch b;
	size_t gsz, bytes;
	char *scratch = NULL;
	double *tile_sums, *csum, *result, host_sum = 0.0;
	unsigned long long *chunk_start;
	unsigned tiles = 0;
	bool async_alloc = true;
	cudaError_t e;
	int rc = 0;

	if (!sumsq || !nonfinite)
		return ts_err(-EINVAL, "adamw cuda: grad check without a place for its results");
	if (!chunks && nchunks)
		return ts_err(-EINVAL, "adamw cuda: %zu chunks but no chunk array", nchunks);
	if ((unsigned)dtype > (unsigned)TIER_FP16)
		return ts_err(-EINVAL, "adamw cuda: gradient dtype %d is not TIER_FP32, TIER_BF16 "
				"or TIER_FP16", (int)dtype);
	for (size_t i = 0; i < nchunks; i++) {
		if (!chunks[i].n)
			continue;
		if (!chunks[i].grad)
			return ts_err(-EINVAL, "adamw cuda: chunk %zu of %zu elements has a NULL grad",
					i, chunks[i].n);
		ntiles += (chunks[i].n + GRADCHECK_TILE - 1) / GRADCHECK_TILE;
		nchunk_used++;
	}
	*sumsq = 0.0;
	*nonfinite = 0;
	if (!nchunk_used)
		return 0;

	/* Scratch: tile sums, chunk sums, chunk starts, the result. */
	bytes = (size_t)(ntiles + 2 * nchunk_used + 1) * 8;

	pool = gc_pool();
	e = pool ? cudaMallocFromPoolAsync((void **)&scratch, bytes, pool, st) : cudaErrorNotSupported;
	if (e == cudaErrorNotSupported) {
		(void)cudaGetLastError();
		async_alloc = false;
		e = cudaMalloc((void **)&scratch, bytes);
		if (e != cudaSuccess) {
			scratch = NULL;
			rc = cuda_fail(e, "cudaMalloc");
			goto out;
		}
	} else if (e != cudaSuccess) {
		scratch = NULL;
		rc = cuda_fail(e, "cudaMallocFromPoolAsync");
		goto out;
	}
	tile_sums = (double *)scratch;
	csum = tile_sums + ntiles;
	chunk_start = (unsigned long long *)(csum + nchunk_used);
	result = (double *)(chunk_start + nchunk_used);

	launch = gc_table[dtype];
	gsz = dtype_size(dtype);
	memset(&b, 0, sizeof(b));
	nchunk_used = 0;
	for (size_t i = 0; i < nchunks; i++) {
		const struct adamw_chunk &k = chunks[i];

		for (size_t done = 0; done < k.n;) {
			size_t left = (k.n - done + GRADCHECK_TILE - 1) / GRADCHECK_TILE;
			size_t take = left < MAX_LAUNCH_TILES - tiles ? left : MAX_LAUNCH_TILES - tiles;
			size_t cnt = take * GRADCHECK_TILE < k.n - done ? take * GRADCHECK_TILE
									 : k.n - done;

			b.grad[b.n] = (const char *)k.grad + done * gsz;
			b.len[b.n] = cnt;
			b.chunk[b.n] = done == 0 ? (long long)nchunk_used : -1;
			tiles += (unsigned)take;
			b.tile_end[b.n++] = tiles;
			done += cnt;
			if (b.n == MAX_PIECES || tiles == MAX_LAUNCH_TILES) {
				launch(b, (tiles + GC_TILES_PER_BLOCK - 1) / GC_TILES_PER_BLOCK, st,
				       tile_sums, chunk_start);
				TIER_CUDA_CHECK_GOTO(cudaGetLastError(), rc, out);
				b.tile_base += tiles;
				b.n = 0;
				tiles = 0;
			}
		}
		if (k.n)
			nchunk_used++;
	}
	if (b.n) {
		launch(b, (tiles + GC_TILES_PER_BLOCK - 1) / GC_TILES_PER_BLOCK, st, tile_sums,
		       chunk_start);
		TIER_CUDA_CHECK_GOTO(cudaGetLastError(), rc, out);
	}
	gc_final<<<1, GC_THREADS, 0, st>>>(tile_sums, chunk_start, nchunk_used, ntiles, csum, result);
	TIER_CUDA_CHECK_GOTO(cudaGetLastError(), rc, out);
	TIER_CUDA_CHECK_GOTO(cudaMemcpyAsync(&host_sum, result, sizeof(host_sum),
					     cudaMemcpyDeviceToHost, st), rc, out);
	if (async_alloc) {
		e = cudaFreeAsync(scratch, st);
		scratch = NULL;
		if (e != cudaSuccess) {
			rc = cuda_fail(e, "cudaFreeAsync");
			goto out;
		}
	}
	TIER_CUDA_CHECK_GOTO(cudaStreamSynchronize(st), rc, out);
out:
	/* Cleanup keeps the first error. */
	if (scratch) {
		if (async_alloc) {
			(void)cudaFreeAsync(scratch, st);
		} else {
			(void)cudaStreamSynchronize(st);
			(void)cudaFree(scratch);
		}
		(void)cudaGetLastError();
	}
	if (rc) {
		ts_err_prefix("adamw cuda: grad check");
		return rc;
	}
	*sumsq = host_sum;
	*nonfinite = !isfinite(host_sum);
	return 0;
}
