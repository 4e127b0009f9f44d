// gemm_packed_tiles.h: the register tiles of opforge's GEMM on packed weights (gemm_packed.cpp):
// AVX-512F (up to 12 rows x 32 columns), AVX2 + FMA (up to 6 rows x 16 columns, twice per
// panel) and plain loops, each compiled for its instruction set whatever the -march, so one
// library runs the best its CPU has. The x86 tiles exist on x86 only; aarch64's NEON tile is in
// gemm_packed_tiles_neon.h.
#pragma once

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define OPFORGE_GEMM_X86_TILES 1
#endif

#include <cstdint>

namespace opforge_gemm {

constexpr int64_t kPanel = 32;  ///< columns per packed panel

/// One register tile's operands: rows of A (row r, element k at a[r * lda + k]), a panel's
/// block of packed rows, and the C rows it accumulates into.
struct Tile {
  const float* a;
  int64_t lda;
  const float* b;
  float* c;
  int64_t ldc;
  int64_t kc;
  int cols;            ///< valid columns of the panel, <= 32
  bool first, last;    ///< first K block starts from zero; the last applies bias and Relu
  const float* bias;   ///< the panel's bias (cols values), or null
  bool relu;
  /// The packed block the next panel runs over (kc rows), fetched into L2 by the first row tile
  /// of this one so that its own first tile does not wait on memory; or null.
  const float* next;
};

#if defined(OPFORGE_GEMM_X86_TILES)
// ---- AVX-512F: up to 12 rows x 32 columns (24 accumulators) -----------------------------------

#define OPFORGE_AVX512 __attribute__((target("avx512f"), always_inline)) inline

OPFORGE_AVX512 __mmask16 lanes16(int n) {
  return n >= 16 ? __mmask16(0xFFFF) : n <= 0 ? __mmask16(0) : __mmask16((1u << n) - 1);
}

template <int R, bool Prefetch>
__attribute__((target("avx512f"))) void tile_avx512(const Tile& t) {
  const __mmask16 m0 = lanes16(t.cols), m1 = lanes16(t.cols - 16);
  __m512 lo[R], hi[R];
#pragma GCC unroll 12
  for (int r = 0; r < R; ++r) {
    lo[r] = t.first ? _mm512_setzero_ps() : _mm512_maskz_loadu_ps(m0, t.c + r * t.ldc);
    hi[r] = t.first ? _mm512_setzero_ps() : _mm512_maskz_loadu_ps(m1, t.c + r * t.ldc + 16);
  }
  const float* b = t.b;
  for (int64_t k = 0; k < t.kc; ++k, b += kPanel) {
    if (Prefetch) _mm_prefetch(reinterpret_cast<const char*>(t.next + k * kPanel), _MM_HINT_T1);
    if (Prefetch) _mm_prefetch(reinterpret_cast<const char*>(t.next + k * kPanel + 16), _MM_HINT_T1);
    const __m512 b0 = _mm512_loadu_ps(b), b1 = _mm512_loadu_ps(b + 16);
#pragma GCC unroll 12
    for (int r = 0; r < R; ++r) {
      const __m512 av = _mm512_set1_ps(t.a[r * t.lda + k]);
      lo[r] = _mm512_fmadd_ps(av, b0, lo[r]);
      hi[r] = _mm512_fmadd_ps(av, b1, hi[r]);
    }
  }
  if (t.last && t.bias != nullptr) {
    const __m512 bias0 = _mm512_maskz_loadu_ps(m0, t.bias), bias1 = _mm512_maskz_loadu_ps(m1, t.bias + 16);
#pragma GCC unroll 12
    for (int r = 0; r < R; ++r) lo[r] = _mm512_add_ps(lo[r], bias0), hi[r] = _mm512_add_ps(hi[r], bias1);
  }
  if (t.last && t.relu) {
    // max returns its second operand where either is NaN: NaN stays NaN, as in the Relu kernel
    // (the masked form: GCC 12 warns of an uninitialised operand in the unmasked one)
    const __m512 zero = _mm512_setzero_ps();
#pragma GCC unroll 12
    for (int r = 0; r < R; ++r)
      lo[r] = _mm512_mask_max_ps(zero, 0xFFFF, zero, lo[r]), hi[r] = _mm512_mask_max_ps(zero, 0xFFFF, zero, hi[r]);
  }
#pragma GCC unroll 12
  for (int r = 0; r < R; ++r) {
    _mm512_mask_storeu_ps(t.c + r * t.ldc, m0, lo[r]);
    _mm512_mask_storeu_ps(t.c + r * t.ldc + 16, m1, hi[r]);
  }
}

constexpr int kRowsAvx512 = 12;

template <bool Prefetch>
void run_avx512_rows(int rows, const Tile& t) {
  switch (rows) {
    case 1: return tile_avx512<1, Prefetch>(t);
    case 2: return tile_avx512<2, Prefetch>(t);
    case 3: return tile_avx512<3, Prefetch>(t);
    case 4: return tile_avx512<4, Prefetch>(t);
    case 5: return tile_avx512<5, Prefetch>(t);
    case 6: return tile_avx512<6, Prefetch>(t);
    case 7: return tile_avx512<7, Prefetch>(t);
    case 8: return tile_avx512<8, Prefetch>(t);
    case 9: return tile_avx512<9, Prefetch>(t);
    case 10: return tile_avx512<10, Prefetch>(t);
    case 11: return tile_avx512<11, Prefetch>(t);
    default: return tile_avx512<12, Prefetch>(t);
  }
}

inline void run_avx512(int rows, const Tile& t) {
  if (t.next != nullptr)
    run_avx512_rows<true>(rows, t);
  else
    run_avx512_rows<false>(rows, t);
}

// ---- AVX2 + FMA: up to 6 rows x 16 columns (12 accumulators), two halves per panel ---------------

#define OPFORGE_AVX2 __attribute__((target("avx2,fma"), always_inline)) inline

/// Lanes [0, n) of 8 set, as maskload/maskstore want them.
OPFORGE_AVX2 __m256i lanes8(int n) {
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

template <int R, bool Prefetch>
__attribute__((target("avx2,fma"))) void tile_avx2(const Tile& t, int half) {
  const int cols = t.cols - 16 * half;
  const __m256i m0 = lanes8(cols), m1 = lanes8(cols - 8);
  float* c = t.c + 16 * half;
  __m256 lo[R], hi[R];
#pragma GCC unroll 12
  for (int r = 0; r < R; ++r) {
    lo[r] = t.first ? _mm256_setzero_ps() : _mm256_maskload_ps(c + r * t.ldc, m0);
    hi[r] = t.first ? _mm256_setzero_ps() : _mm256_maskload_ps(c + r * t.ldc + 8, m1);
  }
  const float* b = t.b + 16 * half;
  // Each row of A's own pointer in a register, so that a broadcast is one load at (ar[r], k, 4)
  // (GCC otherwise added r x lda anew at each k: 5 LEAs beside 12 FMAs), and two ks an
  // iteration: on a host whose cores are shared every uop besides the FMAs costs time (see
  // conv_packed.cpp's tile).
  const float* ar[R];
#pragma GCC unroll 12
  for (int r = 0; r < R; ++r) {
    ar[r] = t.a + r * t.lda;
    __asm__("" : "+r"(ar[r]));
  }
  const int64_t kc = t.kc;
#pragma GCC unroll 2
  for (int64_t k = 0; k < kc; ++k, b += kPanel) {
    if (Prefetch) _mm_prefetch(reinterpret_cast<const char*>(t.next + k * kPanel), _MM_HINT_T1);
    if (Prefetch) _mm_prefetch(reinterpret_cast<const char*>(t.next + k * kPanel + 16), _MM_HINT_T1);
    const __m256 b0 = _mm256_loadu_ps(b), b1 = _mm256_loadu_ps(b + 8);
#pragma GCC unroll 12
    for (int r = 0; r < R; ++r) {
      const __m256 av = _mm256_broadcast_ss(ar[r] + k);
      lo[r] = _mm256_fmadd_ps(av, b0, lo[r]);
      hi[r] = _mm256_fmadd_ps(av, b1, hi[r]);
    }
  }
  if (t.last && t.bias != nullptr) {
    const __m256 bias0 = _mm256_maskload_ps(t.bias + 16 * half, m0);
    const __m256 bias1 = _mm256_maskload_ps(t.bias + 16 * half + 8, m1);
#pragma GCC unroll 12
    for (int r = 0; r < R; ++r) lo[r] = _mm256_add_ps(lo[r], bias0), hi[r] = _mm256_add_ps(hi[r], bias1);
  }
  if (t.last && t.relu) {
    const __m256 zero = _mm256_setzero_ps();
#pragma GCC unroll 12
    for (int r = 0; r < R; ++r) lo[r] = _mm256_max_ps(zero, lo[r]), hi[r] = _mm256_max_ps(zero, hi[r]);
  }
#pragma GCC unroll 12
  for (int r = 0; r < R; ++r) {
    _mm256_maskstore_ps(c + r * t.ldc, m0, lo[r]);
    _mm256_maskstore_ps(c + r * t.ldc + 8, m1, hi[r]);
  }
}

constexpr int kRowsAvx2 = 6;

template <int R>
void tile_avx2_panel(const Tile& t) {
  if (t.next != nullptr)
    tile_avx2<R, true>(t, 0);
  else
    tile_avx2<R, false>(t, 0);
  if (t.cols > 16) tile_avx2<R, false>(t, 1);
}

inline void run_avx2(int rows, const Tile& t) {
  switch (rows) {
    case 1: return tile_avx2_panel<1>(t);
    case 2: return tile_avx2_panel<2>(t);
    case 3: return tile_avx2_panel<3>(t);
    case 4: return tile_avx2_panel<4>(t);
    case 5: return tile_avx2_panel<5>(t);
    default: return tile_avx2_panel<6>(t);
  }
}
#endif  // OPFORGE_GEMM_X86_TILES

// ---- Plain loops: any CPU ------------------------------------------------------------------------

constexpr int kRowsPortable = 4;

inline void run_portable(int rows, const Tile& t) {
  for (int r = 0; r < rows; ++r) {
    float acc[kPanel];
    float* c = t.c + r * t.ldc;
    for (int j = 0; j < kPanel; ++j) acc[j] = t.first || j >= t.cols ? 0.f : c[j];
    for (int64_t k = 0; k < t.kc; ++k) {
      const float av = t.a[r * t.lda + k];
      const float* b = t.b + k * kPanel;
      for (int j = 0; j < kPanel; ++j) acc[j] += av * b[j];
    }
    for (int j = 0; j < t.cols; ++j) {
      float v = acc[j];
      if (t.last && t.bias != nullptr) v += t.bias[j];
      if (t.last && t.relu) v = v < 0.f ? 0.f : v;
      c[j] = v;
    }
  }
}

}  // namespace opforge_gemm
