// conv_tiles.h: the AVX-512 register tile of opforge's float32 convolution GEMM: up to kMR rows
// of output channels by kNR positions, accumulated over one packed block of K = channels x taps.
#pragma once

#if defined(__AVX512F__)

#include <immintrin.h>

#include <cstdint>

#include "conv/conv_run.h"

namespace opforge_conv::tiles {

constexpr int kLanes = 16;         ///< floats per vector
constexpr int kNR = 2 * kLanes;    ///< positions per tile (two vectors)
constexpr int kMR = 12;            ///< output channels per tile (24 accumulators)

/// Where one vector's lanes go in an output row: lane i of segment s is element off[s] + i of
/// the row, for the lanes set in mask[s]. A tile over whole output positions has one segment;
/// one over a padded grid has one per output row it crosses (its other lanes are discarded).
struct Lanes {
  int count = 0;
  __mmask16 mask[kLanes];
  int64_t off[kLanes];
};

/// One tile's operands. The first K block starts from bias + Z (Z read before C is written, so
/// Z may be C itself); later blocks add to C; the last applies the register activations.
struct TileArgs {
  int64_t k;
  const float* a;   ///< weights: row r is a + r * lda, k values
  int64_t lda;
  const float* b;   ///< packed input: k rows of kNR floats; direct: see below
  float* c;         ///< C rows, ldc apart
  int64_t ldc;
  const Lanes* lanes;  ///< [2]: per vector
  const float* bias;   ///< per row, or null
  const float* z;      ///< rows of Z (leading dimension ldc), or null
  bool first, last;
  const Epilogue* e;
  /// Direct tiles read B where it lies: row (channel c, tap t) is b + c * cstride + tapoff[t].
  const int64_t* tapoff = nullptr;
  int64_t taps = 1, cstride = 0;
};

using opforge_conv::in_register;

// max / min with every lane selected: GCC 12's unmasked forms warn of an uninitialised operand.
// Each returns its second operand where either is NaN, so NaN passes through as it does in
// the standalone activation kernels.
__attribute__((always_inline)) inline __m512 vmax(__m512 a, __m512 b) { return _mm512_mask_max_ps(a, 0xFFFF, a, b); }
__attribute__((always_inline)) inline __m512 vmin(__m512 a, __m512 b) { return _mm512_mask_min_ps(a, 0xFFFF, a, b); }

__attribute__((always_inline)) inline __m512 activate(__m512 v, const Epilogue& e) {
  const __m512 zero = _mm512_setzero_ps();
  switch (e.act) {
    case Activation::Relu:
      return vmax(zero, v);
    case Activation::LeakyRelu:
      return _mm512_mask_mul_ps(v, _mm512_cmp_ps_mask(v, zero, _CMP_LT_OQ), v, _mm512_set1_ps(e.a));
    case Activation::Clip:
      return vmin(_mm512_set1_ps(e.b), vmax(_mm512_set1_ps(e.a), v));
    case Activation::HardSigmoid: {
      const __m512 y = _mm512_fmadd_ps(v, _mm512_set1_ps(e.a), _mm512_set1_ps(e.b));
      return vmin(_mm512_set1_ps(1.f), vmax(zero, y));
    }
    case Activation::HardSwish: {
      const __m512 y = _mm512_fmadd_ps(v, _mm512_set1_ps(e.a), _mm512_set1_ps(e.b));
      return _mm512_mul_ps(v, vmin(_mm512_set1_ps(1.f), vmax(zero, y)));
    }
    default:
      return v;
  }
}

/// The lanes of `row` that `l` names, merged into v.
__attribute__((always_inline)) inline __m512 load_lanes(__m512 v, const float* row, const Lanes& l) {
  for (int s = 0; s < l.count; ++s) v = _mm512_mask_loadu_ps(v, l.mask[s], row + l.off[s]);
  return v;
}

__attribute__((always_inline)) inline void store_lanes(float* row, const Lanes& l, __m512 v) {
  for (int s = 0; s < l.count; ++s) _mm512_mask_storeu_ps(row + l.off[s], l.mask[s], v);
}

/// Copies n <= kNR floats of src into a packed row, zero after them.
inline void pack_row(float* dst, const float* src, int64_t n) {
  if (n == kNR) {
    _mm512_storeu_ps(dst, _mm512_loadu_ps(src));
    _mm512_storeu_ps(dst + kLanes, _mm512_loadu_ps(src + kLanes));
    return;
  }
  const __mmask16 m0 = n >= kLanes ? __mmask16(0xFFFF) : __mmask16((1u << n) - 1);
  const __mmask16 m1 = n <= kLanes ? __mmask16(0) : __mmask16((1u << (n - kLanes)) - 1);
  _mm512_storeu_ps(dst, _mm512_maskz_loadu_ps(m0, src));
  _mm512_storeu_ps(dst + kLanes, _mm512_maskz_loadu_ps(m1, src + kLanes));
}

/// C[R x V*16] (+)= A[R x K] * B[K x V*16], then the epilogue; V is 1 or 2 vectors; Direct reads
/// B in place (TileArgs).
template <int R, int V, bool Direct>
__attribute__((always_inline)) inline void tile(const TileArgs& t) {
  __m512 acc[R][V];
#pragma GCC unroll 12
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 2
    for (int h = 0; h < V; ++h) {
      __m512 v = _mm512_setzero_ps();
      if (t.first) {
        if (t.z) v = load_lanes(v, t.z + r * t.ldc, t.lanes[h]);
        if (t.bias) v = _mm512_add_ps(v, _mm512_set1_ps(t.bias[r]));
      } else {
        v = load_lanes(v, t.c + r * t.ldc, t.lanes[h]);
      }
      acc[r][h] = v;
    }
  const float* a[R];
#pragma GCC unroll 12
  for (int r = 0; r < R; ++r) a[r] = t.a + r * t.lda;
  auto step = [&](int64_t k, const float* b) __attribute__((always_inline)) {
    __m512 bv[V];
#pragma GCC unroll 2
    for (int h = 0; h < V; ++h) bv[h] = _mm512_loadu_ps(b + h * kLanes);
#pragma GCC unroll 12
    for (int r = 0; r < R; ++r) {
      const __m512 av = _mm512_set1_ps(a[r][k]);
#pragma GCC unroll 2
      for (int h = 0; h < V; ++h) acc[r][h] = _mm512_fmadd_ps(av, bv[h], acc[r][h]);
    }
  };
  if constexpr (Direct) {
    int64_t k = 0;
    for (const float* bc = t.b; k < t.k; bc += t.cstride)
      for (int64_t tap = 0; tap < t.taps; ++tap, ++k) step(k, bc + t.tapoff[tap]);
  } else {
    const float* b = t.b;
    for (int64_t k = 0; k < t.k; ++k, b += kNR) step(k, b);
  }
  const bool act = t.last && t.e->act != Activation::None;
#pragma GCC unroll 12
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 2
    for (int h = 0; h < V; ++h) store_lanes(t.c + r * t.ldc, t.lanes[h], act ? activate(acc[r][h], *t.e) : acc[r][h]);
}

/// tile<rows, vectors, direct> for rows in [1, kMR] and vectors in {1, 2}.
void run_tile(int rows, int vectors, bool direct, const TileArgs& t);

}  // namespace opforge_conv::tiles

#endif  // __AVX512F__
