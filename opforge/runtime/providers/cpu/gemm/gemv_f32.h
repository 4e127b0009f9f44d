// gemv_f32.h: one row times a matrix in float32 on AVX-512 or AVX2 registers, for the one-row
// products of a batch-1 step (an RNN cell, a decoder's logits, an LSTM gate), where OpenBLAS's
// sgemv pays a call's overhead on a product that takes a fraction of a microsecond, and on AVX2
// streams the matrix at about half the rate these loops do.
#pragma once

#include <algorithm>
#include <cstdint>

#if defined(__AVX512F__) || (defined(__AVX2__) && defined(__FMA__))
#include <immintrin.h>
#endif
#if defined(__AVX2__) && defined(__FMA__) && !defined(__AVX512F__)
#include "common/lanes_avx2.h"
#endif

namespace opforge_nn {

#if defined(__AVX512F__) || (defined(__AVX2__) && defined(__FMA__))
namespace gemv_detail {

/// The first (up to 256) floats of R rows ldb apart from `next` fetched into L1 (none for null):
/// the rows a dot_rows call after this one reads.
template <int R>
inline void fetch_rows(const float* next, int64_t ldb, int64_t k) {
  if (next != nullptr)
    for (int r = 0; r < R; ++r)
      for (int64_t kk = 0; kk < k && kk < 256; kk += 16)
        _mm_prefetch(reinterpret_cast<const char*>(next + r * ldb + kk), _MM_HINT_T0);
}

}  // namespace gemv_detail
#endif

#if defined(__AVX512F__)

constexpr bool kHasGemvF32 = true;

namespace gemv_detail {

constexpr int kLanes = 16;  ///< floats a vector

/// Lanes [0, lanes) of y (V vectors, the last possibly partial) from accumulators: alpha * acc
/// + beta * y, with y not read when beta is 0 (fresh memory may hold NaNs).
template <int V>
inline void store(__m512* acc, int lanes, float alpha, float beta, float* y) {
  const __m512 va = _mm512_set1_ps(alpha), vb = _mm512_set1_ps(beta);
  for (int v = 0; v < V; ++v) {
    const int left = lanes - 16 * v;
    const __mmask16 m = left >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << left) - 1);
    __m512 r = _mm512_mul_ps(acc[v], va);
    if (beta != 0.f) r = _mm512_fmadd_ps(vb, _mm512_maskz_loadu_ps(m, y + 16 * v), r);
    _mm512_mask_storeu_ps(y + 16 * v, m, r);
  }
}

/// The sum of v's lanes: halves folded in registers, with masked adds (the unmasked swizzles of
/// GCC 12's headers leave a lane "undefined" that -Wmaybe-uninitialized reports).
inline float lane_sum(__m512 v) {
  const __m512i swap256 = _mm512_set_epi32(7, 6, 5, 4, 3, 2, 1, 0, 15, 14, 13, 12, 11, 10, 9, 8);
  const __m512i swap128 = _mm512_set_epi32(11, 10, 9, 8, 15, 14, 13, 12, 3, 2, 1, 0, 7, 6, 5, 4);
  const __m512i swap64 = _mm512_set_epi32(13, 12, 15, 14, 9, 8, 11, 10, 5, 4, 7, 6, 1, 0, 3, 2);
  const __m512i swap32 = _mm512_set_epi32(14, 15, 12, 13, 10, 11, 8, 9, 6, 7, 4, 5, 2, 3, 0, 1);
  v = _mm512_add_ps(v, _mm512_mask_permutexvar_ps(v, 0xFFFF, swap256, v));
  v = _mm512_add_ps(v, _mm512_mask_permutexvar_ps(v, 0xFFFF, swap128, v));
  v = _mm512_add_ps(v, _mm512_mask_permutexvar_ps(v, 0xFFFF, swap64, v));
  v = _mm512_add_ps(v, _mm512_mask_permutexvar_ps(v, 0xFFFF, swap32, v));
  return _mm512_cvtss_f32(v);
}

/// Columns [0, lanes) of x @ B, 16 (V - 1) < lanes <= 16 V: each row of B's block read once, in order, into
/// V accumulators that stay in registers for the whole of K.
template <int V>
inline void row_block(int64_t k, const float* x, const float* b, int64_t ldb, int lanes, float alpha, float beta,
                      float* y) {
  __m512 acc[V];
  for (int v = 0; v < V; ++v) acc[v] = _mm512_setzero_ps();
  const int last = lanes - 16 * (V - 1);
  const __mmask16 tail = last >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << last) - 1);
  for (int64_t kk = 0; kk < k; ++kk) {
    const __m512 a = _mm512_set1_ps(x[kk]);
    const float* row = b + kk * ldb;
    for (int v = 0; v < V - 1; ++v) acc[v] = _mm512_fmadd_ps(a, _mm512_loadu_ps(row + 16 * v), acc[v]);
    acc[V - 1] = _mm512_fmadd_ps(a, _mm512_maskz_loadu_ps(tail, row + 16 * (V - 1)), acc[V - 1]);
  }
  store<V>(acc, lanes, alpha, beta, y);
}

/// y[j] for rows [j, j + R) of B (x @ B^T): R dot products over K at once, so R independent
/// accumulator chains keep the FMA units busy. `next`: the R rows after these, whose first
/// (up to 256) floats are fetched into L1 first (null for none): 5-9% less time at 128-512
/// rows of 128 than the hardware prefetcher alone.
template <int R>
inline void dot_rows(int64_t k, const float* x, const float* b, int64_t ldb, float alpha, float beta, float* y,
                     const float* next = nullptr) {
  fetch_rows<R>(next, ldb, k);
  __m512 acc[R];
  for (int r = 0; r < R; ++r) acc[r] = _mm512_setzero_ps();
  int64_t kk = 0;
  for (; kk + 16 <= k; kk += 16) {
    const __m512 a = _mm512_loadu_ps(x + kk);
    for (int r = 0; r < R; ++r) acc[r] = _mm512_fmadd_ps(a, _mm512_loadu_ps(b + r * ldb + kk), acc[r]);
  }
  if (kk < k) {
    const __mmask16 m = __mmask16((1u << (k - kk)) - 1);
    const __m512 a = _mm512_maskz_loadu_ps(m, x + kk);
    for (int r = 0; r < R; ++r) acc[r] = _mm512_fmadd_ps(a, _mm512_maskz_loadu_ps(m, b + r * ldb + kk), acc[r]);
  }
  for (int r = 0; r < R; ++r) {
    const float s = alpha * lane_sum(acc[r]);
    y[r] = beta != 0.f ? s + beta * y[r] : s;
  }
}

}  // namespace gemv_detail

#elif defined(__AVX2__) && defined(__FMA__)

constexpr bool kHasGemvF32 = true;

namespace gemv_detail {

using avx2::first_lanes;
using avx2::kLanes;

/// alpha * r + beta * y into lanes [0, lanes) of y (all 8 when lanes >= 8); y is not read when
/// beta is 0 (fresh memory may hold NaNs).
inline void store(__m256 r, int lanes, float alpha, float beta, float* y) {
  r = _mm256_mul_ps(r, _mm256_set1_ps(alpha));
  if (lanes >= 8) {
    if (beta != 0.f) r = _mm256_fmadd_ps(_mm256_set1_ps(beta), _mm256_loadu_ps(y), r);
    _mm256_storeu_ps(y, r);
  } else {
    const __m256i m = first_lanes(lanes);
    if (beta != 0.f) r = _mm256_fmadd_ps(_mm256_set1_ps(beta), _mm256_maskload_ps(y, m), r);
    _mm256_maskstore_ps(y, m, r);
  }
}

/// Columns [0, lanes) of x @ B, 8 (V - 1) < lanes <= 8 V (V <= 8): each row of B's block read
/// once, in order, into V accumulators that stay in registers for the whole of K.
template <int V>
inline void row_block(int64_t k, const float* x, const float* b, int64_t ldb, int lanes, float alpha, float beta,
                      float* y) {
  __m256 acc[V];
  for (int v = 0; v < V; ++v) acc[v] = _mm256_setzero_ps();
  const __m256i tail = first_lanes(lanes - 8 * (V - 1));
  for (int64_t kk = 0; kk < k; ++kk) {
    const __m256 a = _mm256_broadcast_ss(x + kk);
    const float* row = b + kk * ldb;
    for (int v = 0; v < V - 1; ++v) acc[v] = _mm256_fmadd_ps(a, _mm256_loadu_ps(row + 8 * v), acc[v]);
    acc[V - 1] = _mm256_fmadd_ps(a, _mm256_maskload_ps(row + 8 * (V - 1), tail), acc[V - 1]);
  }
  for (int v = 0; v < V; ++v) store(acc[v], lanes - 8 * v, alpha, beta, y + 8 * v);
}

/// The lane sums of eight accumulators, as one vector (lane r: the sum of acc[r]).
inline __m256 lane_sums(const __m256* acc) {
  const __m256 t0 = _mm256_hadd_ps(acc[0], acc[1]), t1 = _mm256_hadd_ps(acc[2], acc[3]);
  const __m256 t2 = _mm256_hadd_ps(acc[4], acc[5]), t3 = _mm256_hadd_ps(acc[6], acc[7]);
  const __m256 u0 = _mm256_hadd_ps(t0, t1), u1 = _mm256_hadd_ps(t2, t3);  // halves of rows 0-3, 4-7
  return _mm256_add_ps(_mm256_permute2f128_ps(u0, u1, 0x20), _mm256_permute2f128_ps(u0, u1, 0x31));
}

/// y[j] for rows [j, j + R) of B (x @ B^T), R = 8 or 1: R dot products over K at once, so R
/// independent accumulator chains keep the FMA units busy. `next`: the rows after these, whose
/// first (up to 256) floats are fetched into L1 first (null for none), as the AVX-512 loop's.
template <int R>
inline void dot_rows(int64_t k, const float* x, const float* b, int64_t ldb, float alpha, float beta, float* y,
                     const float* next = nullptr) {
  fetch_rows<R>(next, ldb, k);
  __m256 acc[8];
  for (int r = 0; r < 8; ++r) acc[r] = _mm256_setzero_ps();
  int64_t kk = 0;
  for (; kk + 8 <= k; kk += 8) {
    const __m256 a = _mm256_loadu_ps(x + kk);
    for (int r = 0; r < R; ++r) acc[r] = _mm256_fmadd_ps(a, _mm256_loadu_ps(b + r * ldb + kk), acc[r]);
  }
  if (kk < k) {
    const __m256i m = first_lanes(int(k - kk));
    const __m256 a = _mm256_maskload_ps(x + kk, m);
    for (int r = 0; r < R; ++r) acc[r] = _mm256_fmadd_ps(a, _mm256_maskload_ps(b + r * ldb + kk, m), acc[r]);
  }
  store(lane_sums(acc), R, alpha, beta, y);
}

/// y += the sum over r < R of xv[r] times row r of B (columns [0, n)), 8 columns at a time with
/// the last vector masked: the rows stream in order, y stays in L1.
template <int R>
inline void add_rows(int64_t n, const __m256* xv, const float* const* rows, float* y) {
  const auto sum = [&](int64_t j, auto load) {
    __m256 acc[2] = {_mm256_setzero_ps(), _mm256_setzero_ps()};  // two chains
    for (int r = 0; r < R; ++r) acc[r & 1] = _mm256_fmadd_ps(xv[r], load(rows[r] + j), acc[r & 1]);
    return _mm256_add_ps(acc[0], acc[1]);
  };
  const auto whole = [](const float* p) { return _mm256_loadu_ps(p); };
  int64_t j = 0;
  for (; j + 8 <= n; j += 8) _mm256_storeu_ps(y + j, _mm256_add_ps(_mm256_loadu_ps(y + j), sum(j, whole)));
  if (j < n) {
    const __m256i m = first_lanes(int(n - j));
    const __m256 s = sum(j, [&](const float* p) { return _mm256_maskload_ps(p, m); });
    _mm256_maskstore_ps(y + j, m, _mm256_add_ps(_mm256_maskload_ps(y + j, m), s));
  }
}

}  // namespace gemv_detail

#else

constexpr bool kHasGemvF32 = false;

inline void row_times_matrix(int64_t, int64_t, float, const float*, const float*, int64_t, float, float*) {}
inline void row_times_matrix_t(int64_t, int64_t, float, const float*, const float*, int64_t, float, float*) {}

#endif  // __AVX512F__, AVX2 + FMA

#if defined(__AVX512F__) || (defined(__AVX2__) && defined(__FMA__))

namespace gemv_detail {

/// Columns [0, lanes) of x @ B with row_block of the fewest vectors that hold them (at most V).
template <int V>
inline void row_blocks_of(int64_t k, const float* x, const float* b, int64_t ldb, int lanes, float alpha, float beta,
                          float* y) {
  if constexpr (V > 1)
    if (lanes <= kLanes * (V - 1)) return row_blocks_of<V - 1>(k, x, b, ldb, lanes, alpha, beta, y);
  row_block<V>(k, x, b, ldb, lanes, alpha, beta, y);
}

}  // namespace gemv_detail

#endif

#if defined(__AVX512F__)

/// y (n floats) = alpha * x (k floats) @ B + beta * y, B row-major k x n with rows ldb apart;
/// y is not read when beta is 0.
inline void row_times_matrix(int64_t k, int64_t n, float alpha, const float* x, const float* b, int64_t ldb,
                             float beta, float* y) {
  using namespace gemv_detail;
  int64_t j = 0;
  for (; n - j >= 256; j += 256) row_block<16>(k, x, b + j, ldb, 256, alpha, beta, y + j);
  if (j == n) return;
  row_blocks_of<16>(k, x, b + j, ldb, int(n - j), alpha, beta, y + j);
}

#elif defined(__AVX2__) && defined(__FMA__)

/// y (n floats) = alpha * x (k floats) @ B + beta * y, B row-major k x n with rows ldb apart;
/// y is not read when beta is 0. From 64 columns, four rows of B at a time over every column,
/// y in L1 (k = 128: 0.89x OpenBLAS's sgemv at n = 256 and 1024, where blocks of 96 columns
/// in registers, reading each row in pieces, were 1.1-1.3x); below that, the columns' sums in
/// registers.
inline void row_times_matrix(int64_t k, int64_t n, float alpha, const float* x, const float* b, int64_t ldb,
                             float beta, float* y) {
  using namespace gemv_detail;
  if (n >= 64) {
    for (int64_t j = 0; j < n; j += 8)  // y = beta y, or 0
      store(_mm256_setzero_ps(), int(std::min<int64_t>(8, n - j)), 0.f, beta, y + j);
    for (int64_t kk = 0; kk < k; kk += 4) {
      __m256 xv[4];
      const float* rows[4];
      const int r_count = int(std::min<int64_t>(4, k - kk));
      for (int r = 0; r < r_count; ++r) xv[r] = _mm256_set1_ps(alpha * x[kk + r]), rows[r] = b + (kk + r) * ldb;
      switch (r_count) {
        case 4: add_rows<4>(n, xv, rows, y); break;
        case 3: add_rows<3>(n, xv, rows, y); break;
        case 2: add_rows<2>(n, xv, rows, y); break;
        default: add_rows<1>(n, xv, rows, y);
      }
    }
    return;
  }
  row_blocks_of<8>(k, x, b, ldb, int(n), alpha, beta, y);
}

#endif

#if defined(__AVX512F__) || (defined(__AVX2__) && defined(__FMA__))

/// y (n floats) = alpha * x (k floats) @ B^T + beta * y, B row-major n x k with rows ldb apart;
/// y is not read when beta is 0.
inline void row_times_matrix_t(int64_t k, int64_t n, float alpha, const float* x, const float* b, int64_t ldb,
                               float beta, float* y) {
  using namespace gemv_detail;
  int64_t j = 0;
  for (; j + 8 <= n; j += 8)
    dot_rows<8>(k, x, b + j * ldb, ldb, alpha, beta, y + j, j + 16 <= n ? b + (j + 8) * ldb : nullptr);
  for (; j < n; ++j) dot_rows<1>(k, x, b + j * ldb, ldb, alpha, beta, y + j);
}

#endif

}  // namespace opforge_nn
