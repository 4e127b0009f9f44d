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

}  // namespace opforge_nn::avx2

#endif
