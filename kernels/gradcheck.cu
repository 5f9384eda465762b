/*
 * gradcheck.cu - the gradient check on a CUDA device (adamw_cuda_grad_check
 * of kernels/adamw_cuda.h): the sum of the squares of many tensors'
 * gradients and whether one is inf or nan, as kernels/gradcheck.c computes
 * it on the CPU.  Its launches carry their pieces as the update's do
 * (kernels/adamw_cuda_impl.cuh, "Launches"); its scratch comes from a
 * memory pool of its own.  kernels/meson.build compiles it with
 * kernels/adamw.cu's flags (no FMA contraction), which the order of its
 * additions needs.
 *
 * The order.  It follows the summation order of kernels/gradcheck.h,
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
#include "kernels/adamw_cuda.h"
#include "kernels/adamw_cuda_impl.cuh"
#include "kernels/gradcheck.h"

#define GC_THREADS 256
#define GC_TILES_PER_BLOCK (GC_THREADS / GRADCHECK_LANES)
#define GC_BATCH 16                   /* loads in flight per lane of the check */

static_assert(GRADCHECK_LANES == 16, "gc_tiles() joins 16 lanes");
static_assert(GC_THREADS % GRADCHECK_LANES == 0, "whole half-warps per tile");
static_assert(GRADCHECK_TILE % GRADCHECK_LANES == 0, "a tile is whole lane rounds");

/* The launch parameters of the gradient check's first pass. */
struct gc_batch {
	const void *grad[MAX_PIECES];
	unsigned long long len[MAX_PIECES];
	unsigned tile_end[MAX_PIECES];        /* inclusive prefix of the pieces' tiles */
	long long chunk[MAX_PIECES];          /* chunk number if the piece starts one, else -1 */
	unsigned long long tile_base;         /* global number of this launch's first tile */
	unsigned n;
};

static_assert(sizeof(struct gc_batch) <= 4000, "launch parameters under 4 KiB");

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

