// pool_separable.h: 2-D MaxPool of 8-bit planes as a max down the window's rows, then a max
// along the resulting row: kh + kw passes over contiguous bytes per output row instead of
// kh * kw strided taps (squeezenet's quantized 3x3/2 pools, rows of 13-55 outputs).
#pragma once

#include <algorithm>
#include <cstring>
#include <limits>
#include <type_traits>
#include <vector>

#if defined(__AVX2__)
#include <immintrin.h>
#endif

#include "pool/pool_window.h"

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
#endif
#if defined(__AVX2__)
template <class T> inline __m256i max8(__m256i a, __m256i b) {
  return std::is_signed_v<T> ? _mm256_max_epi8(a, b) : _mm256_max_epu8(a, b);
}

/// Bytes a row buffer holds past the last one a window reads: AVX2's loads of 32 bytes at a
/// row's last outputs (stride 2: up to 31 past the last tap) stay inside it.
constexpr int64_t kRowSlack = 32;
#else
constexpr int64_t kRowSlack = 0;
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
#if defined(__AVX2__)
  // 32 bytes at a time, the last vector shifted back over the one before (the same maxima again)
  if (n >= 32) {
    for (int64_t i = 0; i < n; i += 32) {
      const int64_t at = std::min(i, n - 32);
      __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(first + at));
      for (int64_t r = 1; r < rows; ++r)
        v = max8<T>(v, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(first + r * ld + at)));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(mid + at), v);
    }
    return;
  }
#endif
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
#elif defined(__AVX2__)
  // 32 outputs a vector at stride 1, 16 at stride 2 (the maxima of 32 bytes from 2j + t, whose
  // even bytes are the outputs); a row's last vector shifted back over the one before. The
  // loads reach up to 31 bytes past the last tap: the row buffer has kRowSlack more.
  if (s == 1 && n >= 32) {
    for (int64_t j0 = 0; j0 < n; j0 += 32) {
      const int64_t j = std::min(j0, n - 32);
      __m256i acc = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(row + j));
      for (int64_t t = 1; t < kw; ++t)
        acc = max8<T>(acc, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(row + j + t)));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(y + j), acc);
    }
    return;
  }
  if (s == 2 && n >= 16) {
    const __m256i even = _mm256_setr_epi8(0, 2, 4, 6, 8, 10, 12, 14, -1, -1, -1, -1, -1, -1, -1, -1, 0, 2, 4, 6, 8,
                                          10, 12, 14, -1, -1, -1, -1, -1, -1, -1, -1);
    for (int64_t j0 = 0; j0 < n; j0 += 16) {
      const int64_t j = std::min(j0, n - 16);
      __m256i acc = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(row + 2 * j));
      for (int64_t t = 1; t < kw; ++t)
        acc = max8<T>(acc, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(row + 2 * j + t)));
      // each lane's 8 even bytes to its low half, then the two halves together
      const __m256i packed = _mm256_permute4x64_epi64(_mm256_shuffle_epi8(acc, even), 0x08);
      _mm_storeu_si128(reinterpret_cast<__m128i*>(y + j), _mm256_castsi256_si128(packed));
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

#if defined(__AVX512VBMI__) && defined(__AVX512BW__) && defined(__AVX512VL__)
/// Rows of at most 128 input and 64 output bytes, kernel at most 8 wide, pooled in registers: the
/// column max is two 64-byte vectors, and each tap of the row max one vpermi2b of them
/// (idx[t][j] = j * stride + t - pad), lanes that read the padding set to the lowest value.
/// Storing the column max with masked stores and reloading it at other offsets stalls on store
/// forwarding: 27-wide rows ran at a third of this speed.
struct RegisterRows {
  static constexpr int64_t kMaxTaps = 8;
  __m512i idx[kMaxTaps];
  __mmask64 inside[kMaxTaps];  ///< output lanes whose tap t reads the input
  __mmask64 in_lanes, out_lanes;
  int64_t taps;
  static bool fits(const Window& w) { return w.in[2] <= 128 && w.out[2] <= 64 && w.k[2] <= kMaxTaps; }
  explicit RegisterRows(const Window& w) : taps(w.k[2]) {
    in_lanes = first_lanes(std::min<int64_t>(w.in[2], 64));
    out_lanes = first_lanes(w.out[2]);
    for (int64_t t = 0; t < taps; ++t) {
      alignas(64) uint8_t lane[64];
      inside[t] = 0;
      for (int64_t j = 0; j < 64; ++j) {
        const int64_t at = j * w.stride[2] + t - w.pad[2];
        const bool in = j < w.out[2] && at >= 0 && at < w.in[2];
        lane[j] = uint8_t(in ? at : 0);
        inside[t] |= __mmask64(in) << j;
      }
      idx[t] = _mm512_load_si512(lane);
    }
  }
  /// y[0, out_w) = the row max of the column max of `rows` input rows from `first` (ld apart).
  template <class T> void row(const T* first, int64_t ld, int64_t rows, int64_t in_w, T* y) const {
    const __mmask64 high_lanes = in_w > 64 ? first_lanes(in_w - 64) : 0;
    __m512i low = _mm512_maskz_loadu_epi8(in_lanes, first), high = _mm512_maskz_loadu_epi8(high_lanes, first + 64);
    for (int64_t r = 1; r < rows; ++r) {
      low = max8<T>(low, _mm512_maskz_loadu_epi8(in_lanes, first + r * ld));
      high = max8<T>(high, _mm512_maskz_loadu_epi8(high_lanes, first + r * ld + 64));
    }
    const __m512i lowest = _mm512_set1_epi8(char(std::numeric_limits<T>::lowest()));
    __m512i acc = lowest;
    for (int64_t t = 0; t < taps; ++t)
      acc = max8<T>(acc, _mm512_mask_blend_epi8(inside[t], lowest, _mm512_permutex2var_epi8(low, idx[t], high)));
    _mm512_mask_storeu_epi8(y, out_lanes, acc);
  }
};
#else
struct RegisterRows {
  static bool fits(const Window&) { return false; }
  explicit RegisterRows(const Window&) {}
};
#endif

/// One plane of MaxPool: x is the (in_h, in_w) plane, y the (out_h, out_w) one, its rows pooled
/// by `registers` when given (RegisterRows::fits), else through `buf`, which holds one padded
/// input row: the left pad, the input's columns, lowest values wherever a window reads past the
/// input. A window with no input row gives the lowest value, as the tap loops do.
template <class T>
void separable_max_plane(const PoolPlan& plan, const T* x, T* y, std::vector<T>& buf, const RegisterRows* registers) {
  const Window& w = plan.w;
  const AxisTaps& th = plan.taps[1];
  const int64_t in_w = w.in[2], out_w = w.out[2], s = w.stride[2], left = w.pad[2];
  const int64_t width = std::max((out_w - 1) * s + w.k[2], left + in_w);
  const int64_t cols = std::min(in_w, width - left);  // input columns some window reads
  const T lowest = std::numeric_limits<T>::lowest();
  if (registers == nullptr) buf.assign(size_t(width + kRowSlack), lowest);
  T* mid = registers == nullptr ? buf.data() + left : nullptr;
  for (int64_t oh = 0; oh < w.out[1]; ++oh) {
    T* yo = y + oh * out_w;
    if (th.lo[oh] >= th.hi[oh]) {
      std::fill(yo, yo + out_w, lowest);
      continue;
    }
#if defined(__AVX512VBMI__) && defined(__AVX512BW__) && defined(__AVX512VL__)
    if (registers != nullptr) {
      registers->row(x + (th.start[oh] + th.lo[oh]) * in_w, in_w, th.hi[oh] - th.lo[oh], in_w, yo);
      continue;
    }
#endif
    column_max(x + (th.start[oh] + th.lo[oh]) * in_w, in_w, th.hi[oh] - th.lo[oh], cols, mid);
    row_max(buf.data(), out_w, w.k[2], s, yo);
  }
}

}  // namespace opforge_nn
