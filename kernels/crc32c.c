/*
 * crc32c.c - CRC-32C: a portable slicing-by-8 variant, two x86-64 variants
 * (three crc32 streams; PCLMULQDQ folding), the run-time choice between
 * them, and combining checksums.
 *
 * It lives in kernels/ because it is pure compute on a pointer and a length;
 * the NVMe tier checksums each unit it writes and checks it on every read,
 * so it must run at memory speed rather than a byte per cycle.
 *
 * Notation.  A CRC register value c stands for the polynomial C(x) whose
 * x^31 coefficient is bit 0 and whose x^0 coefficient is bit 31 (the
 * "reflected" order in which the bits go over the wire).  Without the
 * inversions, the register after a message M of n bytes from state S is
 * S(x)*x^(8n) + M(x)*x^32 mod P.  That is linear in S and in M, which is what
 * lets independent streams be joined: the register over A||B is
 * crc(A)*x^(8|B|) + crc(B) (the inversions cancel the same way; see
 * ts_crc32c_combine()).
 *
 * SSE4.2 variant.  The crc32 instruction takes 8 bytes at a time with a
 * latency of 3 cycles but, on Intel cores, can start one every cycle, so a
 * single dependency chain reaches only a third of its throughput (on AMD
 * Zen 1/2 it starts one every 2-3 cycles, and three chains gain about 20%
 * there rather than 3x).  Large inputs are therefore
 * cut into blocks of three equal streams, checksummed in lockstep, and
 * joined: the first two registers are moved to the end of the block by a
 * carry-less multiply with a constant x^(8k-33) mod P followed by one crc32
 * of the 64-bit product (crc32 of a 64-bit V from 0 is V*x^32 mod P, and the
 * reflected product of two 32-bit values carries one extra factor x, hence
 * the 33).
 *
 * Folding (PCLMULQDQ) variant.  Where crc32 starts only one instruction
 * every 2-3 cycles (AMD Zen 1/2) the carry-less multiply does better: the
 * bulk of the input is cut into 16-byte lanes, four lanes side by side, and
 * each lane's 128-bit register X = H*x^64 + L (H the first 8 bytes, as a
 * reflected 64-bit value) is moved 64 bytes on by
 *   X*x^512 = H*x^576 + L*x^512  ==  clmul(H, x^543 mod P) + clmul(L, x^479 mod P)
 * and xored onto the data there.  Each constant is a 32-bit reflected value
 * in the low half of a 64-bit lane, which reads as K*x^32, and the reflected
 * product carries one factor x more: so a shift by x^n needs
 * K = x^(n-33) mod P, the same rule as for joining streams above.  The
 * products have degree < 128, so a lane never needs reducing.  At the end the
 * four lanes are folded into one (x^159, x^95 mod P: move by 16 bytes) and
 * the last 128 bits X are reduced by the crc32 instruction itself rather than
 * by a Barrett reduction: crc32 of a 64-bit V from register c is
 * c*x^64 + V*x^32 mod P, so crc32(crc32(0, H), L) = X*x^32 mod P, the CRC
 * register of the folded bytes.  Head bytes (up to 16-byte alignment) and
 * the tail (< 64 bytes) go through crc32 too.  One carry-less multiply per 8
 * bytes is the whole cost: 4 B/cycle where PCLMULQDQ starts every 2 cycles
 * (Zen 1, measured: about 10-11 GB/s), twice that where it starts every
 * cycle.  On Zen 1 crc32 and PCLMULQDQ also compete for one unit (each crc32
 * among PCLMULQDQs costs as much as one more PCLMULQDQ), so running crc32
 * streams beside the folding gains nothing there; on Intel the folding runs
 * about as fast as the three streams.  Which one a CPU gets is timed at the
 * first call (impl_race()).
 *
 * Tables.  The slicing tables, the powers x^(2^k) mod P used by
 * ts_crc32c_combine(), the stream-joining and the folding constants are
 * computed once, under pthread_once, by the first caller of any function
 * here; after that they are read-only.
 */
#include "config.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "common/clock.h"
#include "common/log.h"
#include "kernels/crc32c.h"
#include "kernels/simd.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#define CRC32C_POLY 0x82F63B78u /* reflected 0x1EDC6F41 */
#define X0 0x80000000u          /* the polynomial 1, in reflected order */

/*
 * Bytes per stream of a three-stream block, large and small.  Joining a
 * block costs about 15 cycles, about 1% of the 3*STREAM_LONG/8 cycles of
 * crc32 in a long block; short blocks keep inputs of a few KiB off the
 * single chain.
 */
#define STREAM_LONG 4096
#define STREAM_SHORT 256

/* x^(2^k) mod P for k up to 3 + 63: enough for x^(8n) with any 64-bit n. */
#define X2N_COUNT 67

static uint32_t g_table[8][256];   /* g_table[k][b]: byte b followed by k zero bytes */
static uint32_t g_x2n[X2N_COUNT];
/* x^(8*2L-33), x^(8*L-33) mod P: move stream 0 and 1 to the end of a block */
static uint32_t g_k_long[2], g_k_short[2];
/*
 * Folding constants, {x^(n+31), x^(n-33)} mod P for a move of n bits:
 * n = 512 (4 lanes of 128 bits) gives {0x740EEF02, 0x9E4ADDF8} and n = 128
 * gives {0xF20C0DFE, 0x493C7D27}, the k1/k2 and k3/k4 of Intel's PCLMULQDQ
 * CRC paper as Intel ISA-L and Corsix's fast-crc32 list them for CRC-32C.
 */
static uint32_t g_k_fold64[2], g_k_fold16[2];

static pthread_once_t g_tables_once = PTHREAD_ONCE_INIT;
/* Set (release) after the tables are written; read (acquire) before use. */
static _Atomic bool g_tables_ready;

/* a(x)*b(x) mod P, both in reflected order. */
static uint32_t multmodp(uint32_t a, uint32_t b)
{
	uint32_t p = 0;

	for (uint32_t m = X0; m != 0; m >>= 1) {
		if (a & m)
			p ^= b;
		b = (b & 1) ? (b >> 1) ^ CRC32C_POLY : b >> 1;
	}
	return p;
}

/* x^(n * 2^k) mod P; n * 2^k may exceed 64 bits (k + bits of n <= X2N_COUNT). */
static uint32_t x2nmodp(uint64_t n, unsigned k)
{
	uint32_t p = X0;

	for (; n != 0; n >>= 1, k++)
		if (n & 1)
			p = multmodp(g_x2n[k], p);
	return p;
}

static void tables_init(void)
{
	for (uint32_t b = 0; b < 256; b++) {
		uint32_t c = b;

		for (int i = 0; i < 8; i++)
			c = (c & 1) ? (c >> 1) ^ CRC32C_POLY : c >> 1;
		g_table[0][b] = c;
	}
	for (int k = 1; k < 8; k++)
		for (int b = 0; b < 256; b++) {
			uint32_t c = g_table[k - 1][b];

			g_table[k][b] = (c >> 8) ^ g_table[0][c & 0xff];
		}

	g_x2n[0] = X0 >> 1; /* x */
	for (int k = 1; k < X2N_COUNT; k++)
		g_x2n[k] = multmodp(g_x2n[k - 1], g_x2n[k - 1]);

	g_k_long[0] = x2nmodp(8u * 2 * STREAM_LONG - 33, 0);
	g_k_long[1] = x2nmodp(8u * STREAM_LONG - 33, 0);
	g_k_short[0] = x2nmodp(8u * 2 * STREAM_SHORT - 33, 0);
	g_k_short[1] = x2nmodp(8u * STREAM_SHORT - 33, 0);
	g_k_fold64[0] = x2nmodp(8u * 64 + 31, 0);
	g_k_fold64[1] = x2nmodp(8u * 64 - 33, 0);
	g_k_fold16[0] = x2nmodp(8u * 16 + 31, 0);
	g_k_fold16[1] = x2nmodp(8u * 16 - 33, 0);

	atomic_store_explicit(&g_tables_ready, true, memory_order_release);
}

static inline void tables_ensure(void)
{
	if (!atomic_load_explicit(&g_tables_ready, memory_order_acquire))
		pthread_once(&g_tables_once, tables_init);
}

/* ------------------------------------------------------------------ scalar */

uint32_t crc32c_scalar(uint32_t crc, const void *buf, size_t len)
{
	const unsigned char *p = buf;
	uint32_t c = ~crc;

	tables_ensure();
	while (len > 0 && ((uintptr_t)p & 7) != 0) {
		c = (c >> 8) ^ g_table[0][(c ^ *p++) & 0xff];
		len--;
	}
	/* Little-endian loads spelt out: one mov on x86, correct on big-endian too. */
	for (; len >= 8; p += 8, len -= 8) {
		uint32_t lo = c ^ ((uint32_t)p[0] | (uint32_t)p[1] << 8 |
				   (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24);
		uint32_t hi = (uint32_t)p[4] | (uint32_t)p[5] << 8 |
			      (uint32_t)p[6] << 16 | (uint32_t)p[7] << 24;

		c = g_table[7][lo & 0xff] ^ g_table[6][(lo >> 8) & 0xff] ^
		    g_table[5][(lo >> 16) & 0xff] ^ g_table[4][lo >> 24] ^
		    g_table[3][hi & 0xff] ^ g_table[2][(hi >> 8) & 0xff] ^
		    g_table[1][(hi >> 16) & 0xff] ^ g_table[0][hi >> 24];
	}
	while (len-- > 0)
		c = (c >> 8) ^ g_table[0][(c ^ *p++) & 0xff];
	return ~c;
}

/* ------------------------------------------------------------------ SSE4.2 */

#if defined(__x86_64__)

#define SSE42 __attribute__((target("sse4.2,pclmul")))

SSE42 static inline uint64_t load64(const unsigned char *p)
{
	uint64_t v;

	memcpy(&v, p, sizeof(v));
	return v;
}

/*
 * The register after the 3*@n bytes at @p from register @c: three streams
 * of @n bytes (a multiple of 8), joined with k[0] = x^(16n-33) and
 * k[1] = x^(8n-33) mod P.
 */
SSE42 static inline uint64_t crc3(uint64_t c, const unsigned char *p, size_t n,
				  const uint32_t k[2])
{
	uint64_t c1 = 0, c2 = 0;
	__m128i a, b;

	for (size_t i = 0; i < n; i += 8) {
		c = _mm_crc32_u64(c, load64(p + i));
		c1 = _mm_crc32_u64(c1, load64(p + n + i));
		c2 = _mm_crc32_u64(c2, load64(p + 2 * n + i));
	}
	a = _mm_clmulepi64_si128(_mm_cvtsi64_si128((long long)c),
				 _mm_cvtsi64_si128((long long)k[0]), 0x00);
	b = _mm_clmulepi64_si128(_mm_cvtsi64_si128((long long)c1),
				 _mm_cvtsi64_si128((long long)k[1]), 0x00);
	/* crc32 is linear: one instruction moves both products. */
	return _mm_crc32_u64(0, (uint64_t)_mm_cvtsi128_si64(_mm_xor_si128(a, b))) ^ c2;
}

SSE42 uint32_t crc32c_sse42(uint32_t crc, const void *buf, size_t len)
{
	const unsigned char *p = buf;
	uint64_t c = ~crc;

	tables_ensure();
	/* Whole words from here on, so no load straddles a cache line. */
	while (len > 0 && ((uintptr_t)p & 7) != 0) {
		c = _mm_crc32_u8((uint32_t)c, *p++);
		len--;
	}
	for (; len >= 3 * STREAM_LONG; p += 3 * STREAM_LONG, len -= 3 * STREAM_LONG)
		c = crc3(c, p, STREAM_LONG, g_k_long);
	for (; len >= 3 * STREAM_SHORT; p += 3 * STREAM_SHORT, len -= 3 * STREAM_SHORT)
		c = crc3(c, p, STREAM_SHORT, g_k_short);
	for (; len >= 8; p += 8, len -= 8)
		c = _mm_crc32_u64(c, load64(p));
	while (len-- > 0)
		c = _mm_crc32_u8((uint32_t)c, *p++);
	return ~(uint32_t)c;
}

/* ------------------------------------------------------------------- clmul */

/* Inputs shorter than this go to crc32c_sse42(): the fold's fixed cost (a
 * 16-byte alignment, the final folds and reduction, the tail) is not worth it. */
#define CLMUL_MIN 256

SSE42 static inline __m128i load128(const unsigned char *p)
{
	return _mm_loadu_si128((const __m128i *)(const void *)p);
}

/* X*x^n + D for a 128-bit lane X, with k = {x^(n+31), x^(n-33)} mod P. */
SSE42 static inline __m128i fold128(__m128i x, __m128i k, __m128i d)
{
	return _mm_xor_si128(_mm_xor_si128(_mm_clmulepi64_si128(x, k, 0x00), d),
			     _mm_clmulepi64_si128(x, k, 0x11));
}

SSE42 static inline __m128i fold_key(const uint32_t k[2])
{
	return _mm_set_epi64x((long long)k[1], (long long)k[0]);
}

SSE42 uint32_t crc32c_clmul(uint32_t crc, const void *buf, size_t len)
{
	const unsigned char *p = buf;
	__m128i x0, x1, x2, x3, k;
	uint64_t c;

	if (len < CLMUL_MIN)
		return crc32c_sse42(crc, buf, len);
	tables_ensure();
	c = ~crc;
	/* 16-byte aligned loads from here on; at least 256 - 15 bytes remain. */
	while (((uintptr_t)p & 7) != 0) {
		c = _mm_crc32_u8((uint32_t)c, *p++);
		len--;
	}
	if (((uintptr_t)p & 8) != 0) {
		c = _mm_crc32_u64(c, load64(p));
		p += 8;
		len -= 8;
	}

	/* The register so far goes onto the first 4 bytes, as for a seed. */
	x0 = _mm_xor_si128(load128(p), _mm_cvtsi32_si128((int)(uint32_t)c));
	x1 = load128(p + 16);
	x2 = load128(p + 32);
	x3 = load128(p + 48);
	p += 64;
	len -= 64;
	k = fold_key(g_k_fold64);
	for (; len >= 64; p += 64, len -= 64) {
		x0 = fold128(x0, k, load128(p));
		x1 = fold128(x1, k, load128(p + 16));
		x2 = fold128(x2, k, load128(p + 32));
		x3 = fold128(x3, k, load128(p + 48));
	}
	k = fold_key(g_k_fold16);
	x1 = fold128(x0, k, x1);
	x2 = fold128(x1, k, x2);
	x3 = fold128(x2, k, x3);
	/* X*x^32 mod P, with X = H*x^64 + L: crc32(crc32(0, H), L). */
	c = _mm_crc32_u64(0, (uint64_t)_mm_cvtsi128_si64(x3));
	c = _mm_crc32_u64(c, (uint64_t)_mm_extract_epi64(x3, 1));

	for (; len >= 8; p += 8, len -= 8)
		c = _mm_crc32_u64(c, load64(p));
	while (len-- > 0)
		c = _mm_crc32_u8((uint32_t)c, *p++);
	return ~(uint32_t)c;
}

bool crc32c_sse42_supported(void)
{
	return __builtin_cpu_supports("sse4.2") && __builtin_cpu_supports("pclmul");
}

#else

uint32_t crc32c_sse42(uint32_t crc, const void *buf, size_t len)
{
	return crc32c_scalar(crc, buf, len);
}

uint32_t crc32c_clmul(uint32_t crc, const void *buf, size_t len)
{
	return crc32c_scalar(crc, buf, len);
}

bool crc32c_sse42_supported(void)
{
	return false;
}

#endif

/* ---------------------------------------------------------------- dispatch */

struct crc32c_impl {
	const char *name;
	uint32_t (*fn)(uint32_t crc, const void *buf, size_t len);
};

static const struct crc32c_impl impl_scalar = { "scalar", crc32c_scalar };
static const struct crc32c_impl impl_sse42 = { "sse4.2", crc32c_sse42 };
static const struct crc32c_impl impl_clmul = { "clmul", crc32c_clmul };

static pthread_once_t g_impl_once = PTHREAD_ONCE_INIT;
/* NULL until chosen; stored (release) once, read (acquire) on every call. */
static const struct crc32c_impl *_Atomic g_impl;

/*
 * The self-timing of impl_race(): PROBE_ROUNDS alternating runs of each
 * variant over a PROBE_LEN-byte buffer, the best run of each compared.  A
 * 64 KiB run takes 3-11 us at 6-20 GB/s, so the race costs under 0.1 ms,
 * once; the best of four rejects a run cut short by an interrupt.
 */
#define PROBE_LEN (64 * 1024)
#define PROBE_ROUNDS 4

/*
 * Zero (.bss): the content does not change the speed of either variant.
 * Never written, so its pages stay the kernel's shared zero page: no memory
 * is spent on it, and the runs time the computation from cache, not RAM.
 */
static unsigned char g_probe[PROBE_LEN];
/* Where the probe results go, so that no run can be left out. */
static volatile uint32_t g_probe_sink;

/* Nanoseconds of one run of @fn over g_probe. */
static uint64_t probe_ns(uint32_t (*fn)(uint32_t, const void *, size_t))
{
	uint64_t t0 = ts_now_ns();

	g_probe_sink = fn(g_probe_sink, g_probe, PROBE_LEN);
	return ts_now_ns() - t0;
}

/*
 * crc32c_clmul() if its best run beats the best of crc32c_sse42() by at
 * least 1/16, else crc32c_sse42().  The margin makes the choice stable
 * where the two are close and keeps the three-stream code there: on an
 * Intel Xeon VM they measured 2.82 us and 2.77 us, on an AMD EPYC (Zen 1)
 * VM 12.4 us and 5.5 us.
 */
static const struct crc32c_impl *impl_race(void)
{
	uint64_t best_sse42 = UINT64_MAX, best_clmul = UINT64_MAX;
	const struct crc32c_impl *impl;

	for (int r = 0; r < PROBE_ROUNDS; r++) {
		uint64_t t = probe_ns(crc32c_sse42);

		if (t < best_sse42)
			best_sse42 = t;
		t = probe_ns(crc32c_clmul);
		if (t < best_clmul)
			best_clmul = t;
	}
	impl = best_clmul + best_clmul / 16 <= best_sse42 ? &impl_clmul : &impl_sse42;
	TIER_DEBUG_LOG(TIER_SS_KERNELS, "crc32c: %d KiB in %llu ns (sse4.2), %llu ns (clmul)",
		       PROBE_LEN / 1024, (unsigned long long)best_sse42,
		       (unsigned long long)best_clmul);
	return impl;
}

static void impl_select(void)
{
	static const struct crc32c_impl *const choices[] = { &impl_scalar, &impl_sse42, &impl_clmul };
	const char *env;
	const struct crc32c_impl *impl = NULL;
	bool simd = crc32c_sse42_supported();
	int k = ts_simd_choice("scalar|sse4.2|clmul", &env);

	if (k >= 0) {
		const struct crc32c_impl *want = choices[k];

		if (want != &impl_scalar && !simd) {
			TIER_WARN(TIER_SS_KERNELS,
				  "TIER_SIMD=%s: this CPU lacks SSE4.2 or PCLMULQDQ; using auto", env);
		} else {
			impl = want;
			TIER_INFO(TIER_SS_KERNELS, "TIER_SIMD=%s: crc32c uses %s", env, impl->name);
		}
	}
	if (!impl)
		impl = simd ? impl_race() : &impl_scalar;
	TIER_DEBUG_LOG(TIER_SS_KERNELS, "crc32c: %s", impl->name);
	atomic_store_explicit(&g_impl, impl, memory_order_release);
}

static inline const struct crc32c_impl *impl_get(void)
{
	const struct crc32c_impl *impl = atomic_load_explicit(&g_impl, memory_order_acquire);

	if (!impl) {
		pthread_once(&g_impl_once, impl_select);
		impl = atomic_load_explicit(&g_impl, memory_order_acquire);
	}
	return impl;
}

uint32_t ts_crc32c(uint32_t crc, const void *buf, size_t len)
{
	return impl_get()->fn(crc, buf, len);
}

const char *ts_crc32c_impl(void)
{
	return impl_get()->name;
}

/* ----------------------------------------------------------------- combine */

/*
 * With u = ~0 and R(S, M) = S*x^(8|M|) + M*x^32 mod P (the register over M
 * from state S), crc(M) = u + R(u, M).  So
 *   crc(AB) = u + R(R(u, A), B) = u + (crc(A) + u)*x^(8|B|) + B*x^32
 *           = crc(A)*x^(8|B|) + crc(B),  as crc(B) = u + u*x^(8|B|) + B*x^32.
 */
uint32_t ts_crc32c_combine(uint32_t crc1, uint32_t crc2, size_t len2)
{
	tables_ensure();
	return multmodp(x2nmodp(len2, 3), crc1) ^ crc2;
}
