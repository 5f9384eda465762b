/*
 * copy.c - ts_copy_stream(): memcpy with non-temporal stores (kernels/copy.h).
 *
 * The body copies whole 64-byte lines of the destination, four a loop
 * (each line's loads before its stores, unaligned loads from the source),
 * with streaming stores that the CPU combines into whole-line writes; the
 * destination's head up to its first line boundary and the tail after its
 * last whole line are memcpy's.  A store fence ends every copy: streaming
 * stores are weakly ordered, and the caller hands the destination to
 * another agent (a pool's join, then the link's DMA) after it.
 */
#include "config.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>

#include "common/log.h"
#include "kernels/copy.h"
#include "kernels/simd.h"

#if defined(__x86_64__)
#include <immintrin.h>
#define COPY_X86 1
#else
#define COPY_X86 0
#endif

#define LINE 64u

/* Splits a copy: @head bytes to a line boundary of @dst, then @lines whole
 * lines, then the rest.  False when the copy is memcpy's alone. */
static bool split(const void *dst, size_t n, size_t *head, size_t *lines)
{
	if (n <= COPY_STREAM_MIN)
		return false;
	*head = (LINE - ((uintptr_t)dst & (LINE - 1))) & (LINE - 1);
	*lines = (n - *head) / LINE;
	return true;
}

#if COPY_X86

__attribute__((target("avx2"))) static void lines_avx2(char *d, const char *s, size_t lines)
{
	size_t i = 0;

	for (; i + 4 <= lines; i += 4, d += 4 * LINE, s += 4 * LINE) {
		__m256i a = _mm256_loadu_si256((const void *)s);
		__m256i b = _mm256_loadu_si256((const void *)(s + 32));
		__m256i c = _mm256_loadu_si256((const void *)(s + 64));
		__m256i e = _mm256_loadu_si256((const void *)(s + 96));
		__m256i f = _mm256_loadu_si256((const void *)(s + 128));
		__m256i g = _mm256_loadu_si256((const void *)(s + 160));
		__m256i h = _mm256_loadu_si256((const void *)(s + 192));
		__m256i k = _mm256_loadu_si256((const void *)(s + 224));

		_mm256_stream_si256((void *)d, a);
		_mm256_stream_si256((void *)(d + 32), b);
		_mm256_stream_si256((void *)(d + 64), c);
		_mm256_stream_si256((void *)(d + 96), e);
		_mm256_stream_si256((void *)(d + 128), f);
		_mm256_stream_si256((void *)(d + 160), g);
		_mm256_stream_si256((void *)(d + 192), h);
		_mm256_stream_si256((void *)(d + 224), k);
	}
	for (; i < lines; i++, d += LINE, s += LINE) {
		__m256i a = _mm256_loadu_si256((const void *)s);
		__m256i b = _mm256_loadu_si256((const void *)(s + 32));

		_mm256_stream_si256((void *)d, a);
		_mm256_stream_si256((void *)(d + 32), b);
	}
	_mm_sfence();
}

__attribute__((target("avx512f"))) static void lines_avx512(char *d, const char *s, size_t lines)
{
	size_t i = 0;

	for (; i + 4 <= lines; i += 4, d += 4 * LINE, s += 4 * LINE) {
		__m512i a = _mm512_loadu_si512(s);
		__m512i b = _mm512_loadu_si512(s + 64);
		__m512i c = _mm512_loadu_si512(s + 128);
		__m512i e = _mm512_loadu_si512(s + 192);

		_mm512_stream_si512((void *)d, a);
		_mm512_stream_si512((void *)(d + 64), b);
		_mm512_stream_si512((void *)(d + 128), c);
		_mm512_stream_si512((void *)(d + 192), e);
	}
	for (; i < lines; i++, d += LINE, s += LINE)
		_mm512_stream_si512((void *)d, _mm512_loadu_si512(s));
	_mm_sfence();
}

static bool isa_cpu(enum copy_isa isa)
{
	switch (isa) {
	case COPY_SCALAR:
		return true;
	case COPY_AVX2:
		return __builtin_cpu_supports("avx2");
	case COPY_AVX512:
		return __builtin_cpu_supports("avx512f");
	default:
		return false;
	}
}

#else

static bool isa_cpu(enum copy_isa isa)
{
	return isa == COPY_SCALAR;
}

#endif

const char *copy_isa_name(enum copy_isa isa)
{
	switch (isa) {
	case COPY_SCALAR:
		return "scalar";
	case COPY_AVX2:
		return "avx2";
	case COPY_AVX512:
		return "avx512";
	default:
		return "?";
	}
}

bool copy_isa_supported(enum copy_isa isa)
{
	return (unsigned)isa < COPY_ISA__COUNT && isa_cpu(isa);
}

static pthread_once_t g_isa_once = PTHREAD_ONCE_INIT;
/* -1 until chosen; stored (release) once, read (acquire) on every call. */
static _Atomic int g_isa = -1;

/*
 * TIER_SIMD (kernels/simd.h): the first entry among scalar|avx2|avx512
 * decides, falling back to the best version below it that the CPU has,
 * with a warning; none, or "auto" first, takes the best the CPU has.
 */
static void isa_select(void)
{
	const char *env;
	int k = ts_simd_choice("scalar|avx2|avx512", &env);
	int isa = COPY_AVX512;

	if (k >= 0)
		isa = k;
	while (isa > COPY_SCALAR && !isa_cpu((enum copy_isa)isa))
		isa--;
	if (k > 0 && isa != k)
		TIER_WARN(TIER_SS_KERNELS, "TIER_SIMD=%s: this CPU lacks %s; streaming copies use %s",
			  env, copy_isa_name((enum copy_isa)k), copy_isa_name((enum copy_isa)isa));
	TIER_DEBUG_LOG(TIER_SS_KERNELS, "streaming copy: %s", copy_isa_name((enum copy_isa)isa));
	atomic_store_explicit(&g_isa, isa, memory_order_release);
}

enum copy_isa copy_isa(void)
{
	int isa = atomic_load_explicit(&g_isa, memory_order_acquire);

	if (isa < 0) {
		pthread_once(&g_isa_once, isa_select);
		isa = atomic_load_explicit(&g_isa, memory_order_acquire);
	}
	return (enum copy_isa)isa;
}

static void copy_with(enum copy_isa isa, void *dst, const void *src, size_t n)
{
	char *d = dst;
	const char *s = src;
	size_t head, lines;

	if (isa == COPY_SCALAR || !split(dst, n, &head, &lines)) {
		memcpy(dst, src, n);
		return;
	}
	memcpy(d, s, head);
#if COPY_X86
	if (isa == COPY_AVX512)
		lines_avx512(d + head, s + head, lines);
	else
		lines_avx2(d + head, s + head, lines);
#endif
	head += lines * LINE;
	memcpy(d + head, s + head, n - head);
}

void ts_copy_stream(void *dst, const void *src, size_t n)
{
	copy_with(copy_isa(), dst, src, n);
}

int ts_copy_stream_isa(enum copy_isa isa, void *dst, const void *src, size_t n)
{
	if (!copy_isa_supported(isa))
		return -ENOTSUP;
	copy_with(isa, dst, src, n);
	return 0;
}
