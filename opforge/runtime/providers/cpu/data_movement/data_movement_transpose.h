// data_movement_transpose.h: register-blocked 2-D transposes of 1/2/4/8-byte elements (SSE2/AVX).
#pragma once

#include <cstdint>

#if defined(__SSE2__)
#include <immintrin.h>
#endif

namespace opforge_cpu {
namespace data_movement {

/// Transposes an N x N block: dst[a * dst_stride + b] = src[b * src_stride + a] for a, b < N.
/// N is 1 (plain copy) where no vector kernel exists for U on this machine.
template <class U> struct TransposeBlock {
  static constexpr int N = 1;
  static void run(const U* src, int64_t, U* dst, int64_t) { *dst = *src; }
};

#if defined(__AVX__)
template <> struct TransposeBlock<uint32_t> {
  static constexpr int N = 8;
  static void run(const uint32_t* src, int64_t ss, uint32_t* dst, int64_t ds) {
    const float* s = reinterpret_cast<const float*>(src);
    __m256 r[8], t[8];
    for (int i = 0; i < 8; ++i) r[i] = _mm256_loadu_ps(s + i * ss);
    for (int i = 0; i < 8; i += 2) {
      t[i] = _mm256_unpacklo_ps(r[i], r[i + 1]);
      t[i + 1] = _mm256_unpackhi_ps(r[i], r[i + 1]);
    }
    for (int i = 0; i < 8; i += 4) {
      r[i] = _mm256_shuffle_ps(t[i], t[i + 2], _MM_SHUFFLE(1, 0, 1, 0));
      r[i + 1] = _mm256_shuffle_ps(t[i], t[i + 2], _MM_SHUFFLE(3, 2, 3, 2));
      r[i + 2] = _mm256_shuffle_ps(t[i + 1], t[i + 3], _MM_SHUFFLE(1, 0, 1, 0));
      r[i + 3] = _mm256_shuffle_ps(t[i + 1], t[i + 3], _MM_SHUFFLE(3, 2, 3, 2));
    }
    float* d = reinterpret_cast<float*>(dst);
    for (int i = 0; i < 4; ++i) {
      _mm256_storeu_ps(d + i * ds, _mm256_permute2f128_ps(r[i], r[i + 4], 0x20));
      _mm256_storeu_ps(d + (i + 4) * ds, _mm256_permute2f128_ps(r[i], r[i + 4], 0x31));
    }
  }
};

template <> struct TransposeBlock<uint64_t> {
  static constexpr int N = 4;
  static void run(const uint64_t* src, int64_t ss, uint64_t* dst, int64_t ds) {
    const double* s = reinterpret_cast<const double*>(src);
    __m256d r0 = _mm256_loadu_pd(s), r1 = _mm256_loadu_pd(s + ss), r2 = _mm256_loadu_pd(s + 2 * ss),
            r3 = _mm256_loadu_pd(s + 3 * ss);
    __m256d t0 = _mm256_unpacklo_pd(r0, r1), t1 = _mm256_unpackhi_pd(r0, r1), t2 = _mm256_unpacklo_pd(r2, r3),
            t3 = _mm256_unpackhi_pd(r2, r3);
    double* d = reinterpret_cast<double*>(dst);
    _mm256_storeu_pd(d, _mm256_permute2f128_pd(t0, t2, 0x20));
    _mm256_storeu_pd(d + ds, _mm256_permute2f128_pd(t1, t3, 0x20));
    _mm256_storeu_pd(d + 2 * ds, _mm256_permute2f128_pd(t0, t2, 0x31));
    _mm256_storeu_pd(d + 3 * ds, _mm256_permute2f128_pd(t1, t3, 0x31));
  }
};
#endif

#if defined(__SSE2__)
template <> struct TransposeBlock<uint16_t> {
  static constexpr int N = 8;
  static void run(const uint16_t* src, int64_t ss, uint16_t* dst, int64_t ds) {
    __m128i r[8], t[8];
    for (int i = 0; i < 8; ++i) r[i] = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i * ss));
    for (int i = 0; i < 8; i += 2) {
      t[i] = _mm_unpacklo_epi16(r[i], r[i + 1]);
      t[i + 1] = _mm_unpackhi_epi16(r[i], r[i + 1]);
    }
    // t[2k], t[2k+1]: rows 2k, 2k+1 interleaved, columns 0-3 and 4-7.
    for (int h = 0; h < 2; ++h) {
      r[4 * h] = _mm_unpacklo_epi32(t[h], t[2 + h]);
      r[4 * h + 1] = _mm_unpackhi_epi32(t[h], t[2 + h]);
      r[4 * h + 2] = _mm_unpacklo_epi32(t[4 + h], t[6 + h]);
      r[4 * h + 3] = _mm_unpackhi_epi32(t[4 + h], t[6 + h]);
    }
    // r[4h + j] (j = 0, 1): rows 0-3 of columns 4h + 2j, 4h + 2j + 1; r[4h + 2 + j]: rows 4-7.
    for (int h = 0; h < 2; ++h)
      for (int j = 0; j < 2; ++j) {
        const int col = 4 * h + 2 * j;
        __m128i lo = r[4 * h + j], hi = r[4 * h + 2 + j];
        _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + col * ds), _mm_unpacklo_epi64(lo, hi));
        _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + (col + 1) * ds), _mm_unpackhi_epi64(lo, hi));
      }
  }
};

template <> struct TransposeBlock<uint8_t> {
  static constexpr int N = 8;
  static void run(const uint8_t* src, int64_t ss, uint8_t* dst, int64_t ds) {
    __m128i r[8];
    for (int i = 0; i < 8; ++i) r[i] = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(src + i * ss));
    __m128i t0 = _mm_unpacklo_epi8(r[0], r[1]), t1 = _mm_unpacklo_epi8(r[2], r[3]),
            t2 = _mm_unpacklo_epi8(r[4], r[5]), t3 = _mm_unpacklo_epi8(r[6], r[7]);
    __m128i u0 = _mm_unpacklo_epi16(t0, t1), u1 = _mm_unpackhi_epi16(t0, t1), u2 = _mm_unpacklo_epi16(t2, t3),
            u3 = _mm_unpackhi_epi16(t2, t3);
    __m128i v[4] = {_mm_unpacklo_epi32(u0, u2), _mm_unpackhi_epi32(u0, u2), _mm_unpacklo_epi32(u1, u3),
                    _mm_unpackhi_epi32(u1, u3)};
    for (int i = 0; i < 4; ++i) {
      _mm_storel_epi64(reinterpret_cast<__m128i*>(dst + 2 * i * ds), v[i]);
      _mm_storel_epi64(reinterpret_cast<__m128i*>(dst + (2 * i + 1) * ds), _mm_srli_si128(v[i], 8));
    }
  }
};
#endif

}  // namespace data_movement
}  // namespace opforge_cpu
