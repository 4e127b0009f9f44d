// lanes_avx2.h: the AVX2 vector width in floats and its lane masks, for every AVX2 kernel
// (window kernels, one-row products).
#pragma once

#if defined(__AVX2__)

#include <immintrin.h>

#include <cstdint>

namespace opforge_nn::avx2 {

constexpr int kLanes = 8;  ///< floats per vector

/// Lanes [0, n) set (none for n <= 0, all from 8 on), as maskload / maskstore take them.
__attribute__((always_inline)) inline __m256i first_lanes(int64_t n) {
  const int c = n <= 0 ? 0 : n >= kLanes ? kLanes : int(n);
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(c), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

/// The floats at even (odd) positions of the 16 in lo then hi, in order: a stride-2 row's picks.
__attribute__((always_inline)) inline __m256 even_lanes(__m256 lo, __m256 hi) {
  return _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(_mm256_shuffle_ps(lo, hi, 0x88)), 0xD8));
}
__attribute__((always_inline)) inline __m256 odd_lanes(__m256 lo, __m256 hi) {
  return _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(_mm256_shuffle_ps(lo, hi, 0xDD)), 0xD8));
}

}  // namespace opforge_nn::avx2

#endif
