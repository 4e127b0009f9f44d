// pool_simd.h: the pooling kernels' SIMD inner loop: whole blocks of outputs along a row, each
// reduced over its window with the accumulators kept in registers (GCC vector extensions).
#pragma once

#include <algorithm>
#include <cstring>
#include <vector>

#include "pool/pool_window.h"

namespace opforge_nn {

/// A SIMD vector of T of `Bytes` bytes (GCC vector extension), and its lane count. Rows too
/// short for 32 bytes (a uint8 row of 27 outputs, squeezenet's quantized pools) use 16 or 8.
template <class T, int Bytes = 32>
struct Simd {
  typedef T type __attribute__((vector_size(Bytes)));
  static constexpr int64_t lanes = Bytes / int64_t(sizeof(T));
};
template <size_t Bytes> struct LaneInt;
template <> struct LaneInt<1> { using type = int8_t; };
template <> struct LaneInt<2> { using type = int16_t; };
template <> struct LaneInt<4> { using type = int32_t; };
template <> struct LaneInt<8> { using type = int64_t; };

/// Lanes [0, L) of the vector x[0], x[step], ...; reads up to x[2L - 1] when step is 2.
template <int S, int Bytes, class T>
inline typename Simd<T, Bytes>::type load_lanes(const T* x, int64_t step) {
  using V = typename Simd<T, Bytes>::type;
  constexpr int64_t L = Simd<T, Bytes>::lanes;
  V v;
  if constexpr (S == 1) {
    std::memcpy(&v, x, sizeof(V));
#if defined(__GNUC__) && !defined(__clang__)
  } else if constexpr (S == 2) {
    typedef typename LaneInt<sizeof(T)>::type I;
    typedef I Mask __attribute__((vector_size(Bytes)));
    Mask even;
    for (int64_t t = 0; t < L; ++t) even[t] = I(2 * t);
    V lo, hi;
    std::memcpy(&lo, x, sizeof(V));
    std::memcpy(&hi, x + L, sizeof(V));
    v = __builtin_shuffle(lo, hi, even);
#endif
  } else {
    for (int64_t t = 0; t < L; ++t) v[t] = x[t * step];
  }
  return v;
}

/// y[j] = f-reduction of `init` and every tap, for j in [lo, end), where every tap lands inside
/// its input row, in blocks of NV SIMD vectors (the last block moved back to finish at `end`,
/// which recomputes a few outputs). S is the stride when fixed at compile time (1, 2), else 0
/// and `s` is used. Needs end - lo >= NV lanes.
template <int S, int NV, int Bytes, class T, class F>
void stationary_blocks(const T* x, const std::vector<int64_t>& rows, const PoolPlan& plan, int64_t s, int64_t lo,
                       int64_t end, T init, F f, T* y) {
  using V = typename Simd<T, Bytes>::type;
  constexpr int64_t L = Simd<T, Bytes>::lanes, B = NV * L;
  const int64_t step = S > 0 ? S : s;
  for (int64_t j = lo;; j += B) {
    j = std::min(j, end - B);
    V acc[NV];
    for (int v = 0; v < NV; ++v)
      for (int64_t t = 0; t < L; ++t) acc[v][t] = init;
    for (int64_t row : rows)
      for (int64_t off : plan.col_offset) {
        const T* src = x + row + off + j * step;
        for (int v = 0; v < NV; ++v) acc[v] = f(acc[v], load_lanes<S, Bytes>(src + v * L * step, step));
      }
    std::memcpy(y + j, acc, sizeof(acc));
    if (j == end - B) return;
  }
}

/// stationary() for one stride: blocks of two 32-byte vectors, or of one; for a shorter row one
/// vector of 16 or 8 bytes.
template <int S, class T, class F>
int64_t stationary_stride(const T* x, const std::vector<int64_t>& rows, const PoolPlan& plan, T init, F f, T* y) {
  constexpr int64_t L = Simd<T>::lanes;
  const int64_t lo = plan.inner_lo;
  // With stride 2 a vector reads one element past its last tap: keep that inside the row.
  const int64_t end = S == 2 ? plan.inner_hi - 1 : plan.inner_hi;
  const int64_t s = plan.w.stride[2];
  if (end - lo >= 2 * L) {
    stationary_blocks<S, 2, 32>(x, rows, plan, s, lo, end, init, f, y);
  } else if (end - lo >= L) {
    stationary_blocks<S, 1, 32>(x, rows, plan, s, lo, end, init, f, y);
  } else if (end - lo >= Simd<T, 16>::lanes && Simd<T, 16>::lanes >= 4) {
    stationary_blocks<S, 1, 16>(x, rows, plan, s, lo, end, init, f, y);
  } else if (end - lo >= Simd<T, 8>::lanes && Simd<T, 8>::lanes >= 4) {
    stationary_blocks<S, 1, 8>(x, rows, plan, s, lo, end, init, f, y);
  } else {
    return lo;
  }
  return end;
}

/// Computes the outputs y[j] of one row for j in the returned range (empty when the row is too
/// short for a vector) as the f-reduction of `init` and the window's taps.
template <class T, class F>
Range stationary(const T* x, const std::vector<int64_t>& rows, const PoolPlan& plan, T init, F f, T* y) {
  const int64_t s = plan.w.stride[2], lo = plan.inner_lo;
  if (s == 1) return {lo, stationary_stride<1>(x, rows, plan, init, f, y)};
  if (s == 2) return {lo, stationary_stride<2>(x, rows, plan, init, f, y)};
  return {lo, stationary_stride<0>(x, rows, plan, init, f, y)};
}

}  // namespace opforge_nn
