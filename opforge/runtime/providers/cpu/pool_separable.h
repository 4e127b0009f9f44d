// pool_separable.h: 2-D MaxPool of 8-bit planes as a max down the window's rows, then a max
// along the resulting row: kh + kw passes over contiguous bytes per output row instead of
// kh * kw strided taps (squeezenet's quantized 3x3/2 pools, rows of 13-55 outputs).
#pragma once

#include <algorithm>
#include <cstring>
#include <limits>
#include <type_traits>
#include <vector>

#if defined(__AVX512BW__)
#include <immintrin.h>
#endif

#include "pool_window.h"

namespace opforge_nn {

/// Whether separable_max_plane can pool this window: 2-D, no dilation, no negative pads.
inline bool separable_max_fits(const Window& w) {
  return w.in[0] == 1 && w.k[0] == 1 && w.dil[1] == 1 && w.dil[2] == 1 && w.pad[1] >= 0 && w.pad[2] >= 0 &&
         w.pad_end[1] >= 0 && w.pad_end[2] >= 0;
}

#if defined(__AVX512BW__) && defined(__AVX512VL__)
/// The first n of 64 byte lanes (all of them for n >= 64).
inline __mmask64 first_lanes(int64_t n) { return n >= 64 ? ~__mmask64(0) : (__mmask64(1) << n) - 1; }

template <class T> inline __m512i max8(__m512i a, __m512i b) {
  return std::is_signed_v<T> ? _mm512_max_epi8(a, b) : _mm512_max_epu8(a, b);
}
template <class T> inline __m256i max8(__m256i a, __m256i b) {
  return std::is_signed_v<T> ? _mm256_max_epi8(a, b) : _mm256_max_epu8(a, b);
}
#endif

/// mid[i] = max over `rows` rows of first[r * ld + i], for i < n.
template <class T>
inline void column_max(const T* first, int64_t ld, int64_t rows, int64_t n, T* mid) {
#if defined(__AVX512BW__) && defined(__AVX512VL__)
  for (int64_t i = 0; i < n; i += 64) {
    const __mmask64 m = first_lanes(n - i);
    __m512i v = _mm512_maskz_loadu_epi8(m, first + i);
    for (int64_t r = 1; r < rows; ++r) v = max8<T>(v, _mm512_maskz_loadu_epi8(m, first + r * ld + i));
    _mm512_mask_storeu_epi8(mid + i, m, v);
  }
#else
  std::memcpy(mid, first, size_t(n) * sizeof(T));
  for (int64_t r = 1; r < rows; ++r)
    for (int64_t i = 0; i < n; ++i) mid[i] = std::max(mid[i], first[r * ld + i]);
#endif
}

/// y[j] = max over taps t < kw of row[j * s + t], for j < n. With AVX-512 the strides 1 and 2
/// run on vectors (stride 2 keeps the even bytes of each 16-bit pair, vpmovwb), one masked
/// block for the row's tail; the rest one output at a time.
template <class T>
inline void row_max(const T* row, int64_t n, int64_t kw, int64_t s, T* y) {
#if defined(__AVX512BW__) && defined(__AVX512VL__)
  if (s == 1) {
    for (int64_t j = 0; j < n; j += 64) {
      const __mmask64 m = first_lanes(n - j);
      __m512i acc = _mm512_maskz_loadu_epi8(m, row + j);
      for (int64_t t = 1; t < kw; ++t) acc = max8<T>(acc, _mm512_maskz_loadu_epi8(m, row + j + t));
      _mm512_mask_storeu_epi8(y + j, m, acc);
    }
    return;
  }
  if (s == 2) {
    for (int64_t j = 0; j < n; j += 32) {
      const int64_t count = std::min<int64_t>(32, n - j);
      const __mmask64 m = first_lanes(2 * count - 1);  // the taps' bytes, up to the last even one
      __m256i acc = _mm512_cvtepi16_epi8(_mm512_maskz_loadu_epi8(m, row + 2 * j));
      for (int64_t t = 1; t < kw; ++t)
        acc = max8<T>(acc, _mm512_cvtepi16_epi8(_mm512_maskz_loadu_epi8(m, row + 2 * j + t)));
      _mm256_mask_storeu_epi8(y + j, __mmask32(first_lanes(count)), acc);
    }
    return;
  }
#endif
  for (int64_t j = 0; j < n; ++j) {
    T best = row[j * s];
    for (int64_t t = 1; t < kw; ++t) best = std::max(best, row[j * s + t]);
    y[j] = best;
  }
}

/// One plane of MaxPool: x is the (in_h, in_w) plane, y the (out_h, out_w) one. `buf` holds one
/// padded input row: the left pad, the input's columns, lowest values wherever a window reads
/// past the input. A window with no input row gives the lowest value, as the tap loops do.
template <class T>
void separable_max_plane(const PoolPlan& plan, const T* x, T* y, std::vector<T>& buf) {
  const Window& w = plan.w;
  const AxisTaps& th = plan.taps[1];
  const int64_t in_w = w.in[2], out_w = w.out[2], s = w.stride[2], left = w.pad[2];
  const int64_t width = std::max((out_w - 1) * s + w.k[2], left + in_w);
  const int64_t cols = std::min(in_w, width - left);  // input columns some window reads
  const T lowest = std::numeric_limits<T>::lowest();
  buf.assign(size_t(width), lowest);
  T* mid = buf.data() + left;
  for (int64_t oh = 0; oh < w.out[1]; ++oh) {
    T* yo = y + oh * out_w;
    if (th.lo[oh] >= th.hi[oh]) {
      std::fill(yo, yo + out_w, lowest);
      continue;
    }
    column_max(x + (th.start[oh] + th.lo[oh]) * in_w, in_w, th.hi[oh] - th.lo[oh], cols, mid);
    row_max(buf.data(), out_w, w.k[2], s, yo);
  }
}

}  // namespace opforge_nn
