// gemm_packed_tiles_neon.h: the NEON register tile of opforge's GEMM on packed weights
// (gemm_packed.cpp), for aarch64: up to 6 rows x 16 columns (24 of the 32 vector registers
// accumulate), twice per 32-column panel, as the AVX2 tile does with 16 ymm registers.
#pragma once

#include <arm_neon.h>

#include <cstdint>

#include "gemm/gemm_packed_tiles.h"

namespace opforge_gemm {

constexpr int kRowsNeon = 6;

/// Loads 16 floats of `src`, the first `n` of them when n < 16 (the rest zero).
inline void load16(const float* src, int n, float32x4_t v[4]) {
  if (n >= 16) {
    for (int q = 0; q < 4; ++q) v[q] = vld1q_f32(src + 4 * q);
    return;
  }
  float part[16] = {};
  for (int j = 0; j < n; ++j) part[j] = src[j];
  for (int q = 0; q < 4; ++q) v[q] = vld1q_f32(part + 4 * q);
}

/// Stores the first `n` (<= 16) floats of v to `dst`.
inline void store16(float* dst, int n, const float32x4_t v[4]) {
  if (n >= 16) {
    for (int q = 0; q < 4; ++q) vst1q_f32(dst + 4 * q, v[q]);
    return;
  }
  float part[16];
  for (int q = 0; q < 4; ++q) vst1q_f32(part + 4 * q, v[q]);
  for (int j = 0; j < n; ++j) dst[j] = part[j];
}

template <int R, bool Prefetch>
void tile_neon(const Tile& t, int half) {
  const int cols = t.cols - 16 * half;
  float* c = t.c + 16 * half;
  float32x4_t acc[R][4];
#pragma GCC unroll 6
  for (int r = 0; r < R; ++r) {
    if (t.first)
      for (int q = 0; q < 4; ++q) acc[r][q] = vdupq_n_f32(0.f);
    else
      load16(c + r * t.ldc, cols, acc[r]);
  }
  // the packed panel is zero past N, so whole vectors of it are always in bounds
  const float* b = t.b + 16 * half;
  for (int64_t k = 0; k < t.kc; ++k, b += kPanel) {
    if (Prefetch) __builtin_prefetch(t.next + k * kPanel, 0, 2);
    if (Prefetch) __builtin_prefetch(t.next + k * kPanel + 16, 0, 2);
    const float32x4_t b0 = vld1q_f32(b), b1 = vld1q_f32(b + 4), b2 = vld1q_f32(b + 8), b3 = vld1q_f32(b + 12);
#pragma GCC unroll 6
    for (int r = 0; r < R; ++r) {
      const float32x4_t av = vld1q_dup_f32(t.a + r * t.lda + k);
      acc[r][0] = vfmaq_f32(acc[r][0], av, b0);
      acc[r][1] = vfmaq_f32(acc[r][1], av, b1);
      acc[r][2] = vfmaq_f32(acc[r][2], av, b2);
      acc[r][3] = vfmaq_f32(acc[r][3], av, b3);
    }
  }
  if (t.last && t.bias != nullptr) {
    float32x4_t bias[4];
    load16(t.bias + 16 * half, cols, bias);
#pragma GCC unroll 6
    for (int r = 0; r < R; ++r)
      for (int q = 0; q < 4; ++q) acc[r][q] = vaddq_f32(acc[r][q], bias[q]);
  }
  if (t.last && t.relu) {
    // FMAX returns NaN where either operand is NaN: NaN stays NaN, as in the Relu kernel
    const float32x4_t zero = vdupq_n_f32(0.f);
#pragma GCC unroll 6
    for (int r = 0; r < R; ++r)
      for (int q = 0; q < 4; ++q) acc[r][q] = vmaxq_f32(zero, acc[r][q]);
  }
#pragma GCC unroll 6
  for (int r = 0; r < R; ++r) store16(c + r * t.ldc, cols, acc[r]);
}

template <int R>
void tile_neon_panel(const Tile& t) {
  if (t.next != nullptr)
    tile_neon<R, true>(t, 0);
  else
    tile_neon<R, false>(t, 0);
  if (t.cols > 16) tile_neon<R, false>(t, 1);
}

inline void run_neon(int rows, const Tile& t) {
  switch (rows) {
    case 1: return tile_neon_panel<1>(t);
    case 2: return tile_neon_panel<2>(t);
    case 3: return tile_neon_panel<3>(t);
    case 4: return tile_neon_panel<4>(t);
    case 5: return tile_neon_panel<5>(t);
    default: return tile_neon_panel<6>(t);
  }
}

}  // namespace opforge_gemm
