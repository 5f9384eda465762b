/*
 * crc32c.c - CRC-32C: a portable slicing-by-8 variant, an x86-64 SSE4.2
 * variant, the run-time choice between them, and combining checksums.
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
 * tier_crc32c_combine()).
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
 * Tables.  The slicing tables, the powers x^(2^k) mod P used by
 * tier_crc32c_combine() and the stream-joining constants are computed once,
 * under pthread_once, by the first caller of any function here; after that
 * they are read-only.
 */
#include "config.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "common/log.h"
#include "kernels/crc32c.h"

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

bool crc32c_sse42_supported(void)
{
	return __builtin_cpu_supports("sse4.2") && __builtin_cpu_supports("pclmul");
}

#else

uint32_t crc32c_sse42(uint32_t crc, const void *buf, size_t len)
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

static pthread_once_t g_impl_once = PTHREAD_ONCE_INIT;
/* NULL until chosen; stored (release) once, read (acquire) on every call. */
static const struct crc32c_impl *_Atomic g_impl;

static void impl_select(void)
{
	const char *env = getenv("TIER_SIMD");
	const struct crc32c_impl *impl = &impl_scalar;
	bool force_scalar = false;

	if (env && *env && strcasecmp(env, "auto") != 0) {
		if (strcasecmp(env, "scalar") == 0) {
			force_scalar = true;
			TIER_INFO(TIER_SS_KERNELS, "TIER_SIMD=%s: crc32c uses the scalar code", env);
		} else {
			TIER_WARN(TIER_SS_KERNELS,
				  "TIER_SIMD='%s' is not one of auto|scalar; using auto", env);
		}
	}
	if (!force_scalar && crc32c_sse42_supported())
		impl = &impl_sse42;
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

uint32_t tier_crc32c(uint32_t crc, const void *buf, size_t len)
{
	return impl_get()->fn(crc, buf, len);
}

const char *tier_crc32c_impl(void)
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
uint32_t tier_crc32c_combine(uint32_t crc1, uint32_t crc2, size_t len2)
{
	tables_ensure();
	return multmodp(x2nmodp(len2, 3), crc1) ^ crc2;
}
