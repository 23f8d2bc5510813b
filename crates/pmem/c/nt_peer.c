/* The benchmark peer for easyio's persistent copy: a plain C loop of 64-byte
 * non-temporal stores followed by sfence, the textbook way to write persistent memory.
 * `easyio bench raw` reports the Rust copy as a fraction of this loop in the same run. */
#include <immintrin.h>
#include <stddef.h>
#include <stdint.h>

__attribute__((target("avx512f"))) static void nt_loop_avx512(void *dst, const void *src, size_t len)
{
	char *d = dst;
	const char *s = src;
	for (size_t i = 0; i + 64 <= len; i += 64)
		_mm512_stream_si512((__m512i *)(d + i), _mm512_loadu_si512((const void *)(s + i)));
	_mm_sfence();
}

static void nt_loop_sse2(void *dst, const void *src, size_t len)
{
	char *d = dst;
	const char *s = src;
	for (size_t i = 0; i + 64 <= len; i += 64)
		for (size_t k = 0; k < 64; k += 16)
			_mm_stream_si128((__m128i *)(d + i + k), _mm_loadu_si128((const __m128i *)(s + i + k)));
	_mm_sfence();
}

/* dst must be 64-byte aligned and len a multiple of 64: the loop is the peer for the
 * aligned case only. */
void easyio_peer_nt_copy(void *dst, const void *src, size_t len)
{
	if (__builtin_cpu_supports("avx512f"))
		nt_loop_avx512(dst, src, len);
	else
		nt_loop_sse2(dst, src, len);
}
