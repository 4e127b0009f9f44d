// conv_depthwise_f32.cpp: float32 depthwise convolution (one input channel per group) with
// AVX-512, one output plane per task over a zero-padded copy of its input plane
// (plane_vectors.h). Bias, Z and the activation are applied in registers.
#include <algorithm>
#include <cstring>
#include <vector>

#include "conv/conv_pack.h"
#include "conv/conv_run.h"
#include "common/kernel_paths.h"
#include "conv/plane_vectors.h"

namespace opforge_conv {

#if !defined(__AVX512F__) && !(defined(__AVX2__) && defined(__FMA__))

bool conv_depthwise_f32(KernelContext&, const ConvShape&, const float*, const float*, const float*, const float*,
                        float*, const Epilogue&) {
  return false;
}

#elif defined(__AVX512F__)  // AVX2 + FMA builds: conv_depthwise_avx2.cpp

namespace {

using planes::OutVector;
using planes::Plane;
using planes::taps;
using tiles::kLanes;

constexpr int64_t kMaxTaps = 64;  ///< kernels up to 8x8 keep their weights in registers or on the stack

constexpr int kGroup = 4;  ///< output vectors in flight: each tap's FMAs are independent

/// One plane: the output vectors kGroup at a time, each tap's weight broadcast once for them.
/// Taps is the tap count when fixed at compile time (3x3), else 0.
template <int Step, int Taps>
void run_plane(const Plane& p, const std::vector<OutVector>& vecs, const float* xp, const __m512* wv, float bias,
               const float* z, const Epilogue& e, float* y) {
  const int64_t n = Taps > 0 ? Taps : int64_t(p.tapoff.size());
  const int64_t* off = p.tapoff.data();
  for (size_t v0 = 0; v0 < vecs.size(); v0 += kGroup) {
    const int g = int(std::min<size_t>(kGroup, vecs.size() - v0));
    __m512 acc[kGroup];
    const float* src[kGroup];
#pragma GCC unroll 4
    for (int i = 0; i < kGroup; ++i) {
      acc[i] = _mm512_set1_ps(bias);
      src[i] = xp + vecs[v0 + size_t(std::min(i, g - 1))].src;
    }
#pragma GCC unroll 9
    for (int64_t t = 0; t < n; ++t)
#pragma GCC unroll 4
      for (int i = 0; i < kGroup; ++i) acc[i] = _mm512_fmadd_ps(wv[t], taps<Step>(src[i] + off[t]), acc[i]);
    for (int i = 0; i < g; ++i) {
      const tiles::Lanes& l = vecs[v0 + size_t(i)].lanes;
      __m512 v = acc[i];
      if (z != nullptr) v = _mm512_add_ps(v, tiles::load_lanes(_mm512_setzero_ps(), z, l));
      tiles::store_lanes(y, l, tiles::activate(v, e));
    }
  }
}

/// The lanes of a 16-float load at column c (>= 0) of a row of n floats that lie inside it.
inline __mmask16 planes_lanes(int64_t c, int64_t n) { return tiles::first_lanes(n - c); }

/// A row's vector j and its neighbours one column before and after, zero outside the row.
struct Columns {
  __m512 before, at, after;
};

__attribute__((always_inline)) inline Columns columns(const float* row, int64_t j, int64_t vectors, __mmask16 tail) {
  const __mmask16 m = j + 1 < vectors ? __mmask16(0xFFFF) : tail;
  const float* p = row + j * kLanes;
  const __m512i at = _mm512_castps_si512(_mm512_maskz_loadu_ps(m, p));
  const __m512i prev = j > 0 ? _mm512_castps_si512(_mm512_loadu_ps(p - kLanes)) : _mm512_setzero_si512();
  // of the next vector only its first column is shifted in
  const __m512i next = _mm512_castps_si512(_mm512_maskz_loadu_ps(__mmask16(j + 1 < vectors), p + kLanes));
  return {_mm512_castsi512_ps(_mm512_alignr_epi32(at, prev, 15)), _mm512_castsi512_ps(at),
          _mm512_castsi512_ps(_mm512_alignr_epi32(next, at, 1))};
}

/// Output vector `at` (lanes m) of a 3x3 window: bias + the weights times the columns of the
/// rows above, at and below it, plus Z, then the register activation.
__attribute__((always_inline)) inline void store_window(const __m512 wv[9], float bias, const Columns& above,
                                                        const Columns& mid, const Columns& below, const float* z,
                                                        const Epilogue& e, __mmask16 m, int64_t at, float* y) {
  const Columns* rows[3] = {&above, &mid, &below};
  __m512 acc = _mm512_set1_ps(bias);
#pragma GCC unroll 3
  for (int r = 0; r < 3; ++r) {
    acc = _mm512_fmadd_ps(wv[3 * r], rows[r]->before, acc);
    acc = _mm512_fmadd_ps(wv[3 * r + 1], rows[r]->at, acc);
    acc = _mm512_fmadd_ps(wv[3 * r + 2], rows[r]->after, acc);
  }
  if (z != nullptr) acc = _mm512_add_ps(acc, _mm512_maskz_loadu_ps(m, z + at));
  _mm512_mask_storeu_ps(y + at, m, tiles::activate(acc, e));
}

/// One plane of a 3x3 depthwise conv of stride 1 and padding 1, read where it lies: down each
/// column of vectors, the three input rows around an output row are in registers with their
/// columns shifted a lane each way (valignd), zero past the plane's edges, so each output
/// vector is 9 FMAs on registers and each input row is loaded once per column, with no padded
/// copy.
void run_same3x3(const Window& w, const float* x, const float* wt, float bias, const float* z, const Epilogue& e,
                 float* y) {
  const int64_t height = w.in[1], width = w.in[2], vectors = (width + kLanes - 1) / kLanes;
  const __mmask16 tail = tiles::first_lanes(width - (vectors - 1) * kLanes);
  __m512 wv[9];
  for (int t = 0; t < 9; ++t) wv[t] = _mm512_set1_ps(wt[t]);
  const Columns none{_mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps()};
  for (int64_t j = 0; j < vectors; ++j) {
    const __mmask16 m = j + 1 < vectors ? __mmask16(0xFFFF) : tail;
    Columns above = none, mid = columns(x, j, vectors, tail);
    for (int64_t r = 0; r < height; ++r) {
      const Columns below = r + 1 < height ? columns(x + (r + 1) * width, j, vectors, tail) : none;
      store_window(wv, bias, above, mid, below, z, e, m, r * width + j * kLanes, y);
      above = mid, mid = below;
    }
  }
}

/// Output vector `at` (lanes m) of a KxK window whose input rows h0 .. h0 + K - 1 hold their
/// tap columns in ring[row % K] (rows outside [0, height) add nothing): bias + the weights times
/// the ring, each kernel row's K FMAs in a chain of their own (one chain of K * K dependent FMAs
/// waited on their latency: 5x5, 100 cycles a vector), plus Z, then the register activation.
template <int K>
__attribute__((always_inline)) inline void store_ring(const __m512* wv, const __m512 (&ring)[K][K], int64_t h0,
                                                      int64_t height, float bias, const float* z, const Epilogue& e,
                                                      __mmask16 m, int64_t at, float* y) {
  __m512 sums[K];
#pragma GCC unroll 7
  for (int kh = 0; kh < K; ++kh) {
    const int64_t h = h0 + kh;
    sums[kh] = _mm512_setzero_ps();
    if (h < 0 || h >= height) continue;
    const __m512* row = ring[h % K];
#pragma GCC unroll 7
    for (int kw = 0; kw < K; ++kw) sums[kh] = _mm512_fmadd_ps(wv[kh * K + kw], row[kw], sums[kh]);
  }
  __m512 acc = _mm512_add_ps(_mm512_set1_ps(bias), sums[0]);
#pragma GCC unroll 7
  for (int kh = 1; kh < K; ++kh) acc = _mm512_add_ps(acc, sums[kh]);
  if (z != nullptr) acc = _mm512_add_ps(acc, _mm512_maskz_loadu_ps(m, z + at));
  _mm512_mask_storeu_ps(y + at, m, tiles::activate(acc, e));
}

/// One plane of a KxK depthwise conv (K = 5, 7) of stride 1 and padding K / 2, read where it
/// lies: down each column of vectors, each input row's vector and its neighbours are shifted
/// up to K / 2 lanes each way once (valignd), zero past the plane's edges, into a ring of the
/// last K rows' shifts, from which each output vector takes its K * K FMAs; no padded copy.
template <int K>
void run_same(const Window& w, const float* x, const float* wt, float bias, const float* z, const Epilogue& e,
              float* y) {
  constexpr int P = K / 2;
  const int64_t height = w.in[1], width = w.in[2], vectors = (width + kLanes - 1) / kLanes;
  const __mmask16 tail = tiles::first_lanes(width - (vectors - 1) * kLanes);
  __m512 wv[K * K];
  for (int t = 0; t < K * K; ++t) wv[t] = _mm512_set1_ps(wt[t]);
  __m512 ring[K][K];  // [input row % K][column shift + P]
  for (int64_t j = 0; j < vectors; ++j) {
    const __mmask16 m = j + 1 < vectors ? __mmask16(0xFFFF) : tail;
    // of the next vector only its first P columns are shifted in (those inside the row)
    const __mmask16 next_m = tiles::first_lanes(std::min<int64_t>(P, width - (j + 1) * kLanes));
    auto shift_row = [&](int64_t h) __attribute__((always_inline)) {
      __m512* out = ring[h % K];
      const float* p = x + h * width + j * kLanes;
      const __m512i at = _mm512_castps_si512(_mm512_maskz_loadu_ps(m, p));
      const __m512i prev = j > 0 ? _mm512_castps_si512(_mm512_loadu_ps(p - kLanes)) : _mm512_setzero_si512();
      const __m512i next = _mm512_castps_si512(_mm512_maskz_loadu_ps(next_m, p + kLanes));
      if constexpr (P >= 3) out[P - 3] = _mm512_castsi512_ps(_mm512_alignr_epi32(at, prev, 13));
      out[P - 2] = _mm512_castsi512_ps(_mm512_alignr_epi32(at, prev, 14));
      out[P - 1] = _mm512_castsi512_ps(_mm512_alignr_epi32(at, prev, 15));
      out[P] = _mm512_castsi512_ps(at);
      out[P + 1] = _mm512_castsi512_ps(_mm512_alignr_epi32(next, at, 1));
      out[P + 2] = _mm512_castsi512_ps(_mm512_alignr_epi32(next, at, 2));
      if constexpr (P >= 3) out[P + 3] = _mm512_castsi512_ps(_mm512_alignr_epi32(next, at, 3));
    };
    for (int64_t h = 0; h < std::min<int64_t>(P, height); ++h) shift_row(h);
    for (int64_t r = 0; r < height; ++r) {
      if (r + P < height) shift_row(r + P);
      store_ring<K>(wv, ring, r - P, height, bias, z, e, m, r * width + j * kLanes, y);
    }
  }
}

/// One plane of a 5x5 depthwise conv of stride 2 padded Pad before each axis, read where it
/// lies: each input row's even and odd columns are picked once per column of vectors (two
/// permutes) and shifted a lane where a tap needs it, into a ring of the last five rows', from
/// which each output vector takes its 25 FMAs, a chain per kernel row (small planes still pay
/// for each row's scalar edges).
template <int Pad>
void run_stride2_5x5(const Window& w, const float* x, const float* wt, float bias, const float* z, const Epilogue& e,
                     float* y) {
  constexpr int K = 5;
  const int64_t height = w.in[1], width = w.in[2], out_h = w.out[1], out_w = w.out[2];
  const int64_t vectors = (out_w + kLanes - 1) / kLanes;
  const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
  const __m512i odd = _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
  __m512 wv[K * K];
  for (int t = 0; t < K * K; ++t) wv[t] = _mm512_set1_ps(wt[t]);
  __m512 ring[K][K];  // [input row % K][tap column]: lane i holds column 2 (16 j + i) + kw - Pad
  int64_t held[K];    // the input row each ring slot holds
  for (int64_t j = 0; j < vectors; ++j) {
    const int64_t c = 2 * j * kLanes;
    const __mmask16 m = tiles::first_lanes(out_w - j * kLanes);
    auto at = [&](const float* row, int64_t col) { return col >= 0 && col < width ? row[col] : 0.f; };
    auto shift_row = [&](int64_t h) __attribute__((always_inline)) {
      __m512* out = ring[h % K];
      held[h % K] = h;
      const float* row = x + h * width;
      const __m512 a = _mm512_maskz_loadu_ps(planes_lanes(c, width), row + c);
      const __m512 b = _mm512_maskz_loadu_ps(planes_lanes(c + kLanes, width), row + c + kLanes);
      const __m512i evens = _mm512_castps_si512(_mm512_permutex2var_ps(a, even, b));
      const __m512i odds = _mm512_castps_si512(_mm512_permutex2var_ps(a, odd, b));
#pragma GCC unroll 5
      for (int kw = 0; kw < K; ++kw) {
        const int d = kw - Pad;  // lane i: column c + 2 i + d
        const __m512i v = (d & 1) ? odds : evens;
        const int shift = d >= 0 ? d / 2 : -((1 - d) / 2);  // floor(d / 2)
        if (shift == 0)
          out[kw] = _mm512_castsi512_ps(v);
        else if (shift < 0)  // lane 0 from the pair before
          out[kw] = _mm512_castsi512_ps(_mm512_alignr_epi32(v, _mm512_castps_si512(_mm512_set1_ps(at(row, c + d))), 15));
        else  // lane 15 from the pair after
          out[kw] = _mm512_castsi512_ps(_mm512_alignr_epi32(_mm512_castps_si512(_mm512_set1_ps(at(row, c + 30 + d))), v, 1));
      }
    };
    for (int t = 0; t < K; ++t) held[t] = -1 - t;  // no row
    for (int64_t r = 0; r < out_h; ++r) {
      const int64_t h0 = 2 * r - Pad;
      for (int64_t h = std::max<int64_t>(h0, 0); h < std::min<int64_t>(h0 + K, height); ++h)
        if (held[h % K] != h) shift_row(h);
      store_ring<K>(wv, ring, h0, height, bias, z, e, m, r * out_w + j * kLanes, y);
    }
  }
}

/// Input row `row`'s columns for output vector j of a stride-2 3x3 window padded by Pad (0 or 1)
/// before the row: columns 2o - Pad, 2o - Pad + 1 and 2o - Pad + 2 for each of its outputs o,
/// zero outside the row (and for a row past the plane).
template <int Pad>
__attribute__((always_inline)) inline Columns columns_stride2(const float* row, int64_t j, int64_t width) {
  if (row == nullptr) return {_mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps()};
  const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
  const __m512i odd = _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
  const int64_t c = 2 * j * kLanes;
  const __m512 a = _mm512_maskz_loadu_ps(planes_lanes(c, width), row + c);
  const __m512 b = _mm512_maskz_loadu_ps(planes_lanes(c + kLanes, width), row + c + kLanes);
  const __m512 evens = _mm512_permutex2var_ps(a, even, b), odds = _mm512_permutex2var_ps(a, odd, b);
  if constexpr (Pad == 1) {
    const __m512 last = _mm512_set1_ps(j > 0 ? row[c - 1] : 0.f);  // column 2o - 1 of the first output
    return {_mm512_castsi512_ps(_mm512_alignr_epi32(_mm512_castps_si512(odds), _mm512_castps_si512(last), 15)), evens,
            odds};
  } else {
    // column 2o + 2 of the last output
    const __m512 first = _mm512_set1_ps(c + 2 * kLanes < width ? row[c + 2 * kLanes] : 0.f);
    return {evens, odds,
            _mm512_castsi512_ps(_mm512_alignr_epi32(_mm512_castps_si512(first), _mm512_castps_si512(evens), 1))};
  }
}

/// One plane of a 3x3 depthwise conv of stride 2 and padding 0 or 1 before each axis, read where
/// it lies: as run_same3x3, with each input row's even and odd columns picked by two permutes,
/// and the input row below an output row kept as the row above the next.
template <int Pad>
void run_stride2_rows(const Window& w, const float* x, const float* wt, float bias, const float* z, const Epilogue& e,
                      float* y) {
  const int64_t height = w.in[1], width = w.in[2], out_h = w.out[1], out_w = w.out[2];
  const int64_t vectors = (out_w + kLanes - 1) / kLanes;
  __m512 wv[9];
  for (int t = 0; t < 9; ++t) wv[t] = _mm512_set1_ps(wt[t]);
  auto row = [&](int64_t h) { return h >= 0 && h < height ? x + h * width : nullptr; };
  for (int64_t j = 0; j < vectors; ++j) {
    const __mmask16 m = tiles::first_lanes(out_w - j * kLanes);
    const int64_t top = -w.pad[1];  // the input row above output row 0
    Columns above = columns_stride2<Pad>(row(top), j, width);
    for (int64_t r = 0; r < out_h; ++r) {
      const Columns mid = columns_stride2<Pad>(row(top + 2 * r + 1), j, width);
      const Columns below = columns_stride2<Pad>(row(top + 2 * r + 2), j, width);
      store_window(wv, bias, above, mid, below, z, e, m, r * out_w + j * kLanes, y);
      above = below;
    }
  }
}

void run_stride2_3x3(const Window& w, const float* x, const float* wt, float bias, const float* z, const Epilogue& e,
                     float* y) {
  (w.pad[2] == 1 ? run_stride2_rows<1> : run_stride2_rows<0>)(w, x, wt, bias, z, e, y);
}

using PlaneRun = void (*)(const Window&, const float*, const float*, float, const float*, const Epilogue&, float*);

/// The path that reads the input in place for this window, or null (planes then go through a
/// padded copy): 2-D, square, no dilation, and stride 1 with padding K / 2 on every side for
/// K = 3, 5, 7; or stride 2 with 3x3 padded 0 or 1 before each axis, or 5x5 padded 1 or 2
/// before both (TensorFlow's SAME pads one less before an even size); any padding after.
PlaneRun in_place_run(const Window& w) {
  const int64_t k = w.k[1], stride = w.stride[1];
  if (w.in[0] != 1 || w.k[0] != 1 || w.out[0] != 1 || w.k[2] != k || w.stride[2] != stride || w.dil[1] != 1 ||
      w.dil[2] != 1)
    return nullptr;
  if (stride == 1) {
    for (int a = 1; a < 3; ++a)
      if (w.pad[a] != k / 2 || w.pad_end[a] != k / 2) return nullptr;
    return k == 3 ? run_same3x3 : k == 5 ? run_same<5> : k == 7 ? run_same<7> : nullptr;
  }
  if (stride != 2) return nullptr;
  if (k == 3 && w.pad[1] <= 1 && w.pad[2] <= 1) return run_stride2_3x3;
  if (k == 5 && w.pad[1] == w.pad[2] && (w.pad[1] == 1 || w.pad[1] == 2))
    return w.pad[1] == 1 ? run_stride2_5x5<1> : run_stride2_5x5<2>;
  return nullptr;
}

/// Counts the call under the in-place path `run` names.
void count_in_place(PlaneRun run) {
  if (run == run_same3x3)
    OPFORGE_KERNEL_PATH("conv.depthwise.same3x3");
  else if (run == run_same<5>)
    OPFORGE_KERNEL_PATH("conv.depthwise.same5x5");
  else if (run == run_same<7>)
    OPFORGE_KERNEL_PATH("conv.depthwise.same7x7");
  else if (run == run_stride2_3x3)
    OPFORGE_KERNEL_PATH("conv.depthwise.stride2_3x3");
  else
    OPFORGE_KERNEL_PATH("conv.depthwise.stride2_5x5");
}

}  // namespace

bool conv_depthwise_f32(KernelContext& ctx, const ConvShape& s, const float* x, const float* wt, const float* bias,
                        const float* z, float* y, const Epilogue& e) {
  const Window& w = s.w;
  auto input = [&](int64_t plane) { return x + ((plane / s.m) * s.c + (plane % s.m) / s.mg) * w.in_size(); };
  if (const PlaneRun run = in_place_run(w)) {
    count_in_place(run);
    const int64_t out = w.out_size(), taps = w.k_size();
    ctx.parallel_for(s.n * s.m, std::max<int64_t>(1, 16384 / (taps * out)), [&](int64_t begin, int64_t end) {
      for (int64_t plane = begin; plane < end; ++plane) {
        const int64_t mm = plane % s.m;
        float* yp = y + plane * out;
        run(w, input(plane), wt + mm * taps, bias != nullptr ? bias[mm] : 0.f, z != nullptr ? z + plane * out : nullptr, e, yp);
        if (!tiles::in_register(e.act)) activate_rows(e, yp, out, 1, 0, out);
      }
    });
    return true;
  }
  if (!planes::plane_fits(w) || w.k_size() > kMaxTaps) return false;
  OPFORGE_KERNEL_PATH("conv.depthwise.padded");
  const Plane p = planes::plane_for(w);
  const std::vector<OutVector> vecs = planes::out_vectors(w, p);
  const int64_t taps = w.k_size(), out = w.out_size();
  const int64_t grain = std::max<int64_t>(1, 16384 / std::max<int64_t>(1, out * taps));
  ctx.parallel_for(s.n * s.m, grain, [&](int64_t begin, int64_t end) {
    // Two padded buffers: plane i + 1 is copied while plane i's taps read the other, so the
    // copy's stores have left the store queue before the taps load them.
    thread_local std::vector<float> padded;
    const int64_t size = p.ph * p.pw + p.slack;
    padded.assign(size_t(2 * size), 0.f);
    planes::copy_interior(w, p, input(begin), 0.f, padded.data());
    for (int64_t plane = begin; plane < end; ++plane) {
      float* now = padded.data() + ((plane - begin) % 2) * size;
      if (plane + 1 < end) planes::copy_interior(w, p, input(plane + 1), 0.f, padded.data() + ((plane + 1 - begin) % 2) * size);
      const int64_t mm = plane % s.m;
      const float b = bias != nullptr ? bias[mm] : 0.f;
      const float* zp = z != nullptr ? z + plane * out : nullptr;
      float* yp = y + plane * out;
      __m512 wv[kMaxTaps];
      for (int64_t t = 0; t < taps; ++t) wv[t] = _mm512_set1_ps(wt[mm * taps + t]);
      const bool nine = taps == 9;
      if (w.stride[2] == 1)
        (nine ? run_plane<1, 9> : run_plane<1, 0>)(p, vecs, now, wv, b, zp, e, yp);
      else
        (nine ? run_plane<2, 9> : run_plane<2, 0>)(p, vecs, now, wv, b, zp, e, yp);
      if (!tiles::in_register(e.act)) activate_rows(e, yp, out, 1, 0, out);
    }
  });
  return true;
}

#endif  // __AVX512F__

}  // namespace opforge_conv
