// conv_avx2.h: what the AVX2 + FMA convolution paths share: the register activations and an 8x8
// transpose (lane masks come from common/lanes_avx2.h).
#pragma once

#if defined(__AVX2__) && defined(__FMA__) && !defined(__AVX512F__)

#include <immintrin.h>

#include <cstdint>

#include "common/lanes_avx2.h"
#include "conv/conv_run.h"

namespace opforge_conv::avx2 {

using opforge_nn::avx2::first_lanes;
using opforge_nn::avx2::kLanes;  ///< floats per vector

/// The activations a register applies (those of in_register). max / min return their
/// second operand where either is NaN, so NaN passes through as in the standalone kernels.
__attribute__((always_inline)) inline __m256 activate(__m256 v, const Epilogue& e) {
  const __m256 zero = _mm256_setzero_ps();
  switch (e.act) {
    case Activation::Relu:
      return _mm256_max_ps(zero, v);
    case Activation::LeakyRelu:
      return _mm256_blendv_ps(v, _mm256_mul_ps(v, _mm256_set1_ps(e.a)), _mm256_cmp_ps(v, zero, _CMP_LT_OQ));
    case Activation::Clip:
      return _mm256_min_ps(_mm256_set1_ps(e.b), _mm256_max_ps(_mm256_set1_ps(e.a), v));
    case Activation::HardSigmoid: {
      const __m256 y = _mm256_fmadd_ps(v, _mm256_set1_ps(e.a), _mm256_set1_ps(e.b));
      return _mm256_min_ps(_mm256_set1_ps(1.f), _mm256_max_ps(zero, y));
    }
    case Activation::HardSwish: {
      const __m256 y = _mm256_fmadd_ps(v, _mm256_set1_ps(e.a), _mm256_set1_ps(e.b));
      return _mm256_mul_ps(v, _mm256_min_ps(_mm256_set1_ps(1.f), _mm256_max_ps(zero, y)));
    }
    default:
      return v;
  }
}

/// v[0, 8) transposed in place: lane j of v[i] becomes lane i of v[j].
__attribute__((always_inline)) inline void transpose8(__m256 v[8]) {
  __m256 t[8], u[8];
#pragma GCC unroll 4
  for (int i = 0; i < 8; i += 2) {
    t[i] = _mm256_unpacklo_ps(v[i], v[i + 1]);
    t[i + 1] = _mm256_unpackhi_ps(v[i], v[i + 1]);
  }
#pragma GCC unroll 2
  for (int g = 0; g < 8; g += 4) {
    u[g] = _mm256_shuffle_ps(t[g], t[g + 2], 0x44);
    u[g + 1] = _mm256_shuffle_ps(t[g], t[g + 2], 0xEE);
    u[g + 2] = _mm256_shuffle_ps(t[g + 1], t[g + 3], 0x44);
    u[g + 3] = _mm256_shuffle_ps(t[g + 1], t[g + 3], 0xEE);
  }
#pragma GCC unroll 4
  for (int j = 0; j < 4; ++j) {
    v[j] = _mm256_permute2f128_ps(u[j], u[j + 4], 0x20);
    v[j + 4] = _mm256_permute2f128_ps(u[j], u[j + 4], 0x31);
  }
}

}  // namespace opforge_conv::avx2

#endif
