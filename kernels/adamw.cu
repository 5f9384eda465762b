/*
 * adamw.cu - the Adam/AdamW update on a CUDA device (adamw_cuda_step of
 * kernels/adamw_cuda.h), many tensors per launch: the update of fp32 and
 * bf16 moments, that of q8 moments, and the launches of their tiles
 * (kernels/adamw_cuda_impl.cuh says how a launch's blocks map to the
 * tensors).  Its same-traffic kernel is kernels/adamw_roofline.cu's, the
 * gradient check kernels/gradcheck.cu's.
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
 */
#include "config.h"

#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "common/cuda_check.h"
#include "common/error.h"
#include "kernels/adam_math.h"
#include "kernels/adamw_cuda.h"
#include "kernels/adamw_cuda_impl.cuh"

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

/* adamw_cuda_impl.cuh: the launches of the update and of its roofline. */
int adamw_cuda_launch_chunks(struct step_batch &b, step_launch_fn launch,
			     enum tier_dtype moment_dtype, enum tier_dtype grad_dtype,
			     enum tier_dtype out_dtype, const struct adamw_chunk *chunks,
			     size_t nchunks, cudaStream_t st)
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
	rc = adamw_cuda_launch_chunks(b, launch, moment_dtype, grad_dtype, out_dtype, chunks, nchunks,
				      st);
	if (rc)
		ts_err_prefix("adamw cuda: step launch");
	return rc;
}
