// pool_f32.cpp: float32 1-D/2-D MaxPool (without Indices) and AveragePool with AVX-512, separably:
// each input row of a plane is first reduced along its width, window by window, straight from
// the input (masked loads stand in for the padding: -inf for max, 0 for the mean), then each
// output row reduces the rows its window covers. An input row is read once however many windows
// overlap it, and no padded copy of the plane is made. Planes are split between the host's
// threads; the scratch rows are per thread and kept between calls. The mean's divisor per output
// (taps inside the input, or inside the padded input with count_include_pad) is worked out once
// per call. A window covering the whole plane is a plain reduction; a small plane pooled at
// stride 1 into its own size runs as one run of floats (run_flat).
#include <algorithm>
#include <limits>
#include <vector>

#include "common/kernel_paths.h"
#include "pool/pool_f32.h"

#if defined(__AVX512F__)
#include <immintrin.h>
#endif

namespace opforge_nn {

#if !defined(__AVX512F__) && !defined(__AVX2__)

bool pool_f32(KernelContext&, const PoolPlan&, bool, bool) { return false; }

#elif defined(__AVX512F__)  // AVX2 builds: pool_avx2.cpp

namespace {

constexpr int64_t kLanes = 16;

/// Lanes t of a 16-float load at column `col` of a row of n floats with 0 <= col + t < n.
inline __mmask16 lanes_inside(int64_t col, int64_t n) {
  const int64_t lo = std::clamp<int64_t>(-col, 0, kLanes), hi = std::clamp<int64_t>(n - col, 0, kLanes);
  const uint32_t below_hi = (1u << hi) - 1, below_lo = (1u << lo) - 1;
  return __mmask16(below_hi & ~below_lo);
}

/// One tap of one output vector along a row: its first input column and the lanes of the (one,
/// or for stride 2 two) 16-float loads that fall inside the row.
struct TapLoad {
  int64_t col;
  __mmask16 first, second;
};

/// The row pass of a call: per output vector of a row, its taps' loads ([vector][tap]) and the
/// lanes that are outputs of the row.
struct RowTaps {
  int64_t vectors = 0, k = 0;
  bool adjacent = false;  ///< taps one column apart: with stride 2, two taps share their loads
  int64_t inner_begin = 0, inner_end = 0;  ///< output vectors whose every tap lies inside the row
  /// Vectors [inner_end, over_end) read past the row's end only for lanes that are no outputs
  /// (a 13-output row of 27 floats reads 33): inner too, on rows with `overrun` floats of the
  /// plane after them.
  int64_t over_end = 0, overrun = 0;
  std::vector<TapLoad> loads;
  std::vector<__mmask16> stores;
};

void row_taps(const Window& w, RowTaps& t) {
  const int64_t s = w.stride[2];
  t.vectors = (w.out[2] + kLanes - 1) / kLanes;
  t.k = w.k[2];
  t.adjacent = w.dil[2] == 1;
  t.loads.resize(size_t(t.vectors * t.k));
  t.stores.resize(size_t(t.vectors));
  for (int64_t v = 0; v < t.vectors; ++v) {
    for (int64_t kw = 0; kw < t.k; ++kw) {
      const int64_t col = v * kLanes * s - w.pad[2] + kw * w.dil[2];
      t.loads[size_t(v * t.k + kw)] = {col, lanes_inside(col, w.in[2]), lanes_inside(col + kLanes, w.in[2])};
    }
    t.stores[size_t(v)] = lanes_inside(v * kLanes, w.out[2]);
  }
  // With adjacent taps vector v reads columns [v * 16 * s - pad, that + 16 * s + k - 1)
  t.inner_begin = std::min(t.vectors, (w.pad[2] + kLanes * s - 1) / (kLanes * s));
  const int64_t past = w.in[2] + w.pad[2] - kLanes * s - t.k + 1;  // the last inner vector's first column, + pad
  t.inner_end = t.adjacent && past >= 0 ? std::clamp<int64_t>(past / (kLanes * s) + 1, t.inner_begin, t.vectors)
                                        : t.inner_begin;
  t.over_end = t.inner_end, t.overrun = 0;
  for (int64_t v = t.inner_end; t.adjacent && v < t.vectors; ++v) {
    const int64_t first = v * kLanes * s - w.pad[2], last_output = std::min(w.out[2], (v + 1) * kLanes) - 1;
    if (first < 0 || last_output * s - w.pad[2] + t.k > w.in[2]) break;
    t.overrun = std::max(t.overrun, first + kLanes * s + t.k - 1 - w.in[2]);
    t.over_end = v + 1;
  }
}

template <bool Max>
__attribute__((always_inline)) inline __m512 combine(__m512 acc, __m512 v) {
  // max: a NaN already in acc stays (the all-lanes masked form spares GCC an undefined source)
  return Max ? _mm512_mask_max_ps(v, 0xFFFF, v, acc) : _mm512_add_ps(acc, v);
}

/// One output vector of a row whose K adjacent taps all lie inside it, from its first column x,
/// with unmasked loads and the taps combined in the same order as reduce_row's masked form. 3x3
/// at stride 2: taps 0 and 1 are the even and odd lanes of x[0, 32), tap 2 is tap 0 moved down
/// a lane with x[32] last. Other windows: the reduction at each of the 16 * Step columns from x
/// (K loads and combines per 16 columns), of which stride 2 keeps the even ones.
template <int Step, int K, bool Max>
__attribute__((always_inline)) inline __m512 reduce_inner(const float* x, __m512 fill, __m512i even, __m512i odd) {
  if constexpr (Step == 2 && K == 3) {
    const __m512i next = _mm512_setr_epi32(1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16);
    const __m512 a = _mm512_loadu_ps(x), b = _mm512_loadu_ps(x + kLanes);
    const __m512 e = _mm512_permutex2var_ps(a, even, b);
    const __m512 acc = combine<Max>(combine<Max>(fill, e), _mm512_permutex2var_ps(a, odd, b));
    return combine<Max>(acc, _mm512_permutex2var_ps(e, next, _mm512_castps128_ps512(_mm_load_ss(x + 2 * kLanes))));
  }
  __m512 lo = fill;
#pragma GCC unroll 8
  for (int kw = 0; kw < K; ++kw) lo = combine<Max>(lo, _mm512_loadu_ps(x + kw));
  if constexpr (Step == 1) {
    return lo;
  } else {
    __m512 hi = fill;
#pragma GCC unroll 8
    for (int kw = 0; kw < K; ++kw) hi = combine<Max>(hi, _mm512_loadu_ps(x + kLanes + kw));
    return _mm512_permutex2var_ps(lo, even, hi);
  }
}

/// Output vector v of row x by the masked loads of `load` (taps in adjacent pairs when Pairs):
/// any vector, the row's edges included.
template <int Step, bool Max, bool Pairs>
__attribute__((always_inline)) inline __m512 reduce_masked(const TapLoad* load, int64_t k, const float* x, __m512 pad,
                                                           __m512i even, __m512i odd) {
  constexpr int64_t tap_step = Step == 2 && Pairs ? 2 : 1;
  __m512 acc = pad;
#pragma GCC unroll 4
  for (int64_t kw = 0; kw < k; kw += tap_step) {
    // masked lanes are not read, so a column before or past the row is safe
    const __m512 a = _mm512_mask_loadu_ps(pad, load[kw].first, x + load[kw].col);
    if constexpr (Step == 1) {
      acc = combine<Max>(acc, a);
    } else {
      const __m512 b = _mm512_mask_loadu_ps(pad, load[kw].second, x + load[kw].col + kLanes);
      acc = combine<Max>(acc, _mm512_permutex2var_ps(a, even, b));
      if (tap_step == 2 && kw + 1 < k) acc = combine<Max>(acc, _mm512_permutex2var_ps(a, odd, b));
    }
  }
  return acc;
}

/// out[v * 16 + t] = reduction over the window's taps along input row x, for every output
/// column of the row (the last vector's lanes past the row's outputs are scratch). K is the
/// window's width when fixed at compile time, else 0.
template <int Step, int K, bool Max>
void reduce_row(const RowTaps& t, const float* x, float fill, float* out, bool may_overrun) {
  const __m512 pad = _mm512_set1_ps(fill);
  const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
  const __m512i odd = _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
  const int64_t k = K > 0 ? K : t.k;
  const int64_t inner_end = may_overrun ? t.over_end : t.inner_end;
  for (int64_t v = 0; v < t.vectors; ++v) {
    const TapLoad* load = t.loads.data() + v * k;
    if constexpr (K > 0) {
      if (v >= t.inner_begin && v < inner_end) {
        _mm512_storeu_ps(out + v * kLanes, reduce_inner<Step, K, Max>(x + load[0].col, pad, even, odd));
        continue;
      }
    }
    // With stride 2 and adjacent taps, the 32 floats loaded for tap kw hold tap kw + 1's inputs
    // too (the odd lanes), so taps go in pairs.
    const __m512 acc = t.adjacent ? reduce_masked<Step, Max, true>(load, k, x, pad, even, odd)
                                  : reduce_masked<Step, Max, false>(load, k, x, pad, even, odd);
    _mm512_storeu_ps(out + v * kLanes, acc);
  }
}

/// 1 / (taps counted) per output position, in rows of `pitch` floats.
void inverse_counts(const PoolPlan& plan, bool include_pad, int64_t pitch, std::vector<float>& inv) {
  const AxisTaps &th = plan.taps[1], &tw = plan.taps[2];
  inv.assign(size_t(plan.w.out[1] * pitch), 0.f);
  for (int64_t oh = 0; oh < plan.w.out[1]; ++oh)
    for (int64_t ow = 0; ow < plan.w.out[2]; ++ow) {
      const int64_t n = include_pad ? th.padded[oh] * tw.padded[ow] : (th.hi[oh] - th.lo[oh]) * (tw.hi[ow] - tw.lo[ow]);
      inv[size_t(oh * pitch + ow)] = n > 0 ? 1.f / float(n) : 0.f;
    }
}

/// One output row of a KxK window (K = 2 or 3) of stride 2 along rows whose K input rows (from
/// r0, consecutive) all lie in the plane: each output vector takes the reduction down the rows
/// first, then along it (two permutes pick the even and odd columns, for K = 3 a third the next
/// even), instead of reducing each row along its width into a scratch row and the scratch rows
/// down: a third of the permutes, and no scratch. The vectors at the row's edges take each
/// row's masked reduction.
template <int K, bool Max>
void window_row_s2(const RowTaps& t, const float* r0, int64_t pitch, const float* inv, float* out, bool may_overrun) {
  static_assert(K == 2 || K == 3);
  const __m512 pad = _mm512_set1_ps(Max ? -std::numeric_limits<float>::infinity() : 0.f);
  const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
  const __m512i odd = _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
  const __m512i next = _mm512_setr_epi32(1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16);
  const float* r1 = r0 + pitch;
  const float* r2 = K == 3 ? r1 + pitch : nullptr;
  const int64_t inner_end = may_overrun ? t.over_end : t.inner_end;
  for (int64_t v = 0; v < t.vectors; ++v) {
    const TapLoad* load = t.loads.data() + v * K;
    __m512 acc;
    if (v >= t.inner_begin && v < inner_end) {
      const float* c0 = r0 + load[0].col;
      const float* c1 = r1 + load[0].col;
      __m512 a = combine<Max>(_mm512_loadu_ps(c0), _mm512_loadu_ps(c1));
      __m512 b = combine<Max>(_mm512_loadu_ps(c0 + kLanes), _mm512_loadu_ps(c1 + kLanes));
      if constexpr (K == 3) {
        const float* c2 = r2 + load[0].col;
        a = combine<Max>(a, _mm512_loadu_ps(c2));
        b = combine<Max>(b, _mm512_loadu_ps(c2 + kLanes));
        // the next even column, of which the permute reads lane 0
        const __m128 l0 = _mm_load_ss(c0 + 2 * kLanes), l1 = _mm_load_ss(c1 + 2 * kLanes), l2 = _mm_load_ss(c2 + 2 * kLanes);
        const __m512 last = _mm512_zextps128_ps512(Max ? _mm_max_ss(l2, _mm_max_ss(l1, l0)) : _mm_add_ss(_mm_add_ss(l0, l1), l2));
        const __m512 e = _mm512_permutex2var_ps(a, even, b);
        acc = combine<Max>(combine<Max>(e, _mm512_permutex2var_ps(a, odd, b)), _mm512_permutex2var_ps(e, next, last));
      } else {
        acc = combine<Max>(_mm512_permutex2var_ps(a, even, b), _mm512_permutex2var_ps(a, odd, b));
      }
    } else {
      acc = combine<Max>(reduce_masked<2, Max, true>(load, K, r0, pad, even, odd),
                         reduce_masked<2, Max, true>(load, K, r1, pad, even, odd));
      if constexpr (K == 3) acc = combine<Max>(acc, reduce_masked<2, Max, true>(load, K, r2, pad, even, odd));
    }
    if (!Max) acc = _mm512_mul_ps(acc, _mm512_loadu_ps(inv + v * kLanes));
    _mm512_mask_storeu_ps(out + v * kLanes, t.stores[size_t(v)], acc);
  }
}

/// One plane: every needed input row reduced along its width into `rows` (one row of `pitch`
/// floats per input row), then each output row reduced over its window's rows. K is the
/// window's height and width when both are the same and fixed at compile time, else 0.
template <int Step, int K, bool Max>
void run_plane(const PoolPlan& plan, const RowTaps& t, const float* x, const float* inv, float* rows, float* y) {
  const Window& w = plan.w;
  const AxisTaps& th = plan.taps[1];
  const int64_t pitch = t.vectors * kLanes;
  const float fill = Max ? -std::numeric_limits<float>::infinity() : 0.f;
  int64_t done = 0;  // input rows [0, done) are reduced, or need not be
  for (int64_t oh = 0; oh < w.out[1]; ++oh) {
    if constexpr (Step == 2 && (K == 2 || K == 3)) {
      if (th.lo[oh] == 0 && th.hi[oh] == K && w.dil[1] == 1 && t.adjacent) {
        const int64_t h0 = th.start[oh];
        window_row_s2<K, Max>(t, x + h0 * w.in[2], w.in[2], inv + oh * pitch, y + oh * w.out[2],
                              (w.in[1] - K - h0) * w.in[2] >= t.overrun);
        continue;
      }
    }
    const int64_t first = th.start[oh] + th.lo[oh] * w.dil[1], last = th.start[oh] + (th.hi[oh] - 1) * w.dil[1];
    // Windows move down the plane, so the rows still to reduce start at max(done, first); with
    // dilation a row between two taps may be reduced needlessly.
    if (th.hi[oh] > th.lo[oh]) {
      for (int64_t h = std::max(done, first); h <= last; ++h)
        reduce_row<Step, K, Max>(t, x + h * w.in[2], fill, rows + h * pitch, (w.in[1] - 1 - h) * w.in[2] >= t.overrun);
      done = std::max(done, last + 1);
    }
    float* out = y + oh * w.out[2];
    const float* top = rows + th.start[oh] * pitch;
    const int64_t lo = th.lo[oh], hi = th.hi[oh], step = w.dil[1] * pitch;
    for (int64_t v = 0; v < t.vectors; ++v) {
      __m512 acc = _mm512_set1_ps(fill);
      if (K > 0 && lo == 0 && hi == K) {  // the whole window inside the plane
#pragma GCC unroll 4
        for (int64_t jh = 0; jh < K; ++jh) acc = combine<Max>(acc, _mm512_loadu_ps(top + jh * step + v * kLanes));
      } else {
        for (int64_t jh = lo; jh < hi; ++jh) acc = combine<Max>(acc, _mm512_loadu_ps(top + jh * step + v * kLanes));
      }
      if (!Max) acc = _mm512_mul_ps(acc, _mm512_loadu_ps(inv + oh * pitch + v * kLanes));
      _mm512_mask_storeu_ps(out + v * kLanes, t.stores[size_t(v)], acc);
    }
  }
}

/// The whole plane of n floats reduced to one.
float reduce_plane(const float* x, int64_t n, bool max) {
  const float lowest = -std::numeric_limits<float>::infinity();
  const __m512 fill = _mm512_set1_ps(max ? lowest : 0.f);
  __m512 acc = fill;
  for (int64_t i = 0; i < n; i += kLanes) {
    const __m512 v = _mm512_mask_loadu_ps(fill, lanes_inside(i, n), x + i);
    acc = max ? combine<true>(acc, v) : combine<false>(acc, v);
  }
  return max ? _mm512_reduce_max_ps(acc) : _mm512_reduce_add_ps(acc);
}

constexpr int64_t kFlatMax = 1024;  ///< floats of a plane at most, for run_flat

/// Whether planes run flat (run_flat): stride 1 with the output the input's size (the padding
/// "same"), on planes small enough that going row by row is mostly overhead (a 7x7 plane is
/// one vector a quarter full per row, and its pool took 3x onnxruntime's time).
bool runs_flat(const Window& w) {
  return w.stride[1] == 1 && w.stride[2] == 1 && w.out[1] == w.in[1] && w.out[2] == w.in[2] &&
         w.in_size() <= kFlatMax;
}

/// A plane as one run of floats: tap kw of position i reads i + off_w[kw] and tap kh of the
/// row pass's result reads i + off_h[kh], in the lanes of mask_w / mask_h ([vector][tap]) whose
/// tap stays inside the position's row or column.
struct FlatTaps {
  int64_t vectors = 0;
  std::vector<int64_t> off_w, off_h;
  std::vector<__mmask16> mask_w, mask_h, stores;
};

void flat_taps(const Window& w, FlatTaps& t) {
  const int64_t n = w.in_size(), width = w.in[2], height = w.in[1];
  t.vectors = (n + kLanes - 1) / kLanes;
  t.off_w.clear(), t.off_h.clear(), t.mask_w.clear(), t.mask_h.clear(), t.stores.clear();
  for (int64_t kw = 0; kw < w.k[2]; ++kw) t.off_w.push_back(kw * w.dil[2] - w.pad[2]);
  for (int64_t kh = 0; kh < w.k[1]; ++kh) t.off_h.push_back((kh * w.dil[1] - w.pad[1]) * width);
  // Each lane's column and row, counted on from lane to lane (no division), then one compare per
  // tap and bound: working the masks out lane by lane cost more than the pooling.
  alignas(64) int32_t cols[kLanes], rows[kLanes];
  int64_t col = 0, row = 0;
  for (int64_t v = 0; v < t.vectors; ++v) {
    for (int l = 0; l < kLanes; ++l) {
      cols[l] = int32_t(col), rows[l] = int32_t(row);
      if (++col == width) col = 0, ++row;
    }
    const __m512i c = _mm512_load_si512(cols), r = _mm512_load_si512(rows);
    const __mmask16 in_plane = lanes_inside(v * kLanes, n);
    auto inside = [&](__m512i at, int64_t d, int64_t size) {  // lanes with 0 <= at + d < size
      return __mmask16(in_plane & _mm512_cmpge_epi32_mask(at, _mm512_set1_epi32(int32_t(-d))) &
                       _mm512_cmplt_epi32_mask(at, _mm512_set1_epi32(int32_t(size - d))));
    };
    for (int64_t kw = 0; kw < w.k[2]; ++kw) t.mask_w.push_back(inside(c, kw * w.dil[2] - w.pad[2], width));
    for (int64_t kh = 0; kh < w.k[1]; ++kh) t.mask_h.push_back(inside(r, kh * w.dil[1] - w.pad[1], height));
    t.stores.push_back(in_plane);
  }
}

/// One plane run flat: the row pass into `h` (t.vectors * 16 floats), then the column pass
/// into y, times inv (per position) for the mean. K is the window's height and width when both
/// are the same and fixed at compile time (3x3: the tap loops unroll), else 0.
template <bool Max, int K>
void run_flat(const FlatTaps& t, const float* x, const float* inv, float* h, float* y) {
  const __m512 fill = _mm512_set1_ps(Max ? -std::numeric_limits<float>::infinity() : 0.f);
  const int64_t kw_n = K > 0 ? K : int64_t(t.off_w.size()), kh_n = K > 0 ? K : int64_t(t.off_h.size());
  for (int64_t v = 0; v < t.vectors; ++v) {
    __m512 acc = fill;
#pragma GCC unroll 4
    for (int64_t kw = 0; kw < kw_n; ++kw)
      acc = combine<Max>(acc, _mm512_mask_loadu_ps(fill, t.mask_w[size_t(v * kw_n + kw)], x + v * kLanes + t.off_w[size_t(kw)]));
    _mm512_storeu_ps(h + v * kLanes, acc);
  }
  for (int64_t v = 0; v < t.vectors; ++v) {
    __m512 acc = fill;
#pragma GCC unroll 4
    for (int64_t kh = 0; kh < kh_n; ++kh)
      acc = combine<Max>(acc, _mm512_mask_loadu_ps(fill, t.mask_h[size_t(v * kh_n + kh)], h + v * kLanes + t.off_h[size_t(kh)]));
    if (!Max) acc = _mm512_mul_ps(acc, _mm512_loadu_ps(inv + v * kLanes));
    _mm512_mask_storeu_ps(y + v * kLanes, t.stores[size_t(v)], acc);
  }
}

/// pool_f32 for windows that run flat.
void pool_flat(KernelContext& ctx, const PoolPlan& plan, bool max, bool include_pad, const float* x, float* y) {
  thread_local FlatTaps taps;
  thread_local std::vector<float> inv;
  const Window& w = plan.w;
  flat_taps(w, taps);
  const int64_t n = w.in_size(), padded = taps.vectors * kLanes;
  if (!max) {
    inverse_counts(plan, include_pad, w.out[2], inv);
    inv.resize(size_t(padded), 0.f);
  }
  const FlatTaps& shared_taps = taps;
  const float* shared_inv = inv.data();
  using Runner = void (*)(const FlatTaps&, const float*, const float*, float*, float*);
  const bool k3 = w.k[1] == 3 && w.k[2] == 3;
  const Runner run = max ? (k3 ? run_flat<true, 3> : run_flat<true, 0>) : (k3 ? run_flat<false, 3> : run_flat<false, 0>);
  ctx.parallel_for(plan.planes, std::max<int64_t>(1, 16384 / (2 * n)), [&](int64_t begin, int64_t end) {
    thread_local std::vector<float> h;
    if (h.size() < size_t(padded)) h.resize(size_t(padded));
    for (int64_t c = begin; c < end; ++c) run(shared_taps, x + c * n, shared_inv, h.data(), y + c * n);
  });
}

/// Whether a plane runs row by row down first (run_rows3x3): a 3x3 window of stride 1 and
/// padding 1 on every side, the output the input's size, on rows of at least kRows3x3Min floats
/// (narrower planes run flat: a 7x7 plane's rows fill a vector less than half).
constexpr int64_t kRows3x3Min = 12;
bool runs_rows3x3(const Window& w) {
  for (int a = 1; a < 3; ++a)
    if (w.k[a] != 3 || w.stride[a] != 1 || w.dil[a] != 1 || w.pad[a] != 1 || w.pad_end[a] != 1) return false;
  return w.out[1] == w.in[1] && w.out[2] == w.in[2] && w.in[2] >= kRows3x3Min;
}

/// One plane of a 3x3 window of stride 1, padding 1: each output row reduces its (up to) three
/// input rows down first, a vector at a time, then along the row with its neighbours shifted in
/// a lane (valignd), the fill coming in at the row's ends, times inv (per position, rows of
/// width floats) for the mean. No lane masks but the row's last vector's.
template <bool Max>
void run_rows3x3(const Window& w, const float* x, const float* inv, float* y) {
  const int64_t height = w.in[1], width = w.in[2], vectors = (width + kLanes - 1) / kLanes;
  const __m512 fill = _mm512_set1_ps(Max ? -std::numeric_limits<float>::infinity() : 0.f);
  const __m512i fill_bits = _mm512_castps_si512(fill);
  const __mmask16 tail = lanes_inside((vectors - 1) * kLanes, width);
  for (int64_t r = 0; r < height; ++r) {
    const float* mid = x + r * width;
    const float* up = r > 0 ? mid - width : nullptr;
    const float* down = r + 1 < height ? mid + width : nullptr;
    // the rows' reduction down at vector j, the fill past the row's end
    auto column = [&](int64_t j) __attribute__((always_inline)) {
      const __mmask16 m = j + 1 < vectors ? __mmask16(0xFFFF) : tail;
      __m512 v = _mm512_mask_loadu_ps(fill, m, mid + j * kLanes);
      if (up) v = combine<Max>(v, _mm512_mask_loadu_ps(fill, m, up + j * kLanes));
      if (down) v = combine<Max>(v, _mm512_mask_loadu_ps(fill, m, down + j * kLanes));
      return _mm512_castps_si512(v);
    };
    __m512i left = fill_bits, cur = column(0);
    for (int64_t j = 0; j < vectors; ++j) {
      const __m512i next = j + 1 < vectors ? column(j + 1) : fill_bits;
      const __m512 before = _mm512_castsi512_ps(_mm512_alignr_epi32(cur, left, 15));  // lane i: column i - 1
      const __m512 after = _mm512_castsi512_ps(_mm512_alignr_epi32(next, cur, 1));    // lane i: column i + 1
      __m512 acc = combine<Max>(combine<Max>(_mm512_castsi512_ps(cur), before), after);
      const __mmask16 m = j + 1 < vectors ? __mmask16(0xFFFF) : tail;
      if (!Max) acc = _mm512_mul_ps(acc, _mm512_maskz_loadu_ps(m, inv + r * width + j * kLanes));
      _mm512_mask_storeu_ps(y + r * width + j * kLanes, m, acc);
      left = cur, cur = next;
    }
  }
}

/// pool_f32 for windows that run row by row (runs_rows3x3).
void pool_rows3x3(KernelContext& ctx, const PoolPlan& plan, bool max, bool include_pad, const float* x, float* y) {
  thread_local std::vector<float> inv;
  const Window& w = plan.w;
  const int64_t n = w.in_size();
  if (!max) inverse_counts(plan, include_pad, w.out[2], inv);
  const float* shared_inv = inv.data();
  const auto run = max ? run_rows3x3<true> : run_rows3x3<false>;
  ctx.parallel_for(plan.planes, std::max<int64_t>(1, 16384 / (2 * n)), [&](int64_t begin, int64_t end) {
    for (int64_t c = begin; c < end; ++c) run(w, x + c * n, shared_inv, y + c * n);
  });
}

bool is_global(const Window& w) {
  return w.out_size() == 1 && w.k[1] == w.in[1] && w.k[2] == w.in[2] && w.pad[1] == 0 && w.pad[2] == 0 &&
         w.dil[1] == 1 && w.dil[2] == 1;
}

/// Whether this window runs here: one plane of rows (1-D or 2-D), stride 1 or 2 along rows.
bool fits(const Window& w) {
  return w.in[0] == 1 && w.k[0] == 1 && w.out[0] == 1 && (w.stride[2] == 1 || w.stride[2] == 2);
}

using PlaneRunner = void (*)(const PoolPlan&, const RowTaps&, const float*, const float*, float*, float*);

template <int Step, bool Max>
PlaneRunner plane_runner_for(int64_t k) {
  return k == 2 ? run_plane<Step, 2, Max> : k == 3 ? run_plane<Step, 3, Max> : run_plane<Step, 0, Max>;
}

/// run_plane for this window's row stride and (square 2x2 or 3x3, else any) kernel.
PlaneRunner plane_runner(const Window& w, bool max) {
  const int64_t k = w.k[1] == w.k[2] ? w.k[2] : 0;
  if (w.stride[2] == 1) return max ? plane_runner_for<1, true>(k) : plane_runner_for<1, false>(k);
  return max ? plane_runner_for<2, true>(k) : plane_runner_for<2, false>(k);
}

}  // namespace

bool pool_f32(KernelContext& ctx, const PoolPlan& plan, bool max, bool include_pad) {
  const Window& w = plan.w;
  if (!fits(w)) return false;
  const float* x = ctx.input(0).data<float>();
  float* y = ctx.output(0).data<float>();
  const int64_t in = w.in_size(), out = w.out_size();
  if (is_global(w)) {
    OPFORGE_KERNEL_PATH("pool.global");
    ctx.parallel_for(plan.planes, std::max<int64_t>(1, 16384 / std::max<int64_t>(1, in)), [&](int64_t b, int64_t e) {
      for (int64_t c = b; c < e; ++c) y[c] = reduce_plane(x + c * in, in, max) / (max ? 1.f : float(in));
    });
    return true;
  }
  if (runs_rows3x3(w)) {
    OPFORGE_KERNEL_PATH("pool.rows3x3");
    pool_rows3x3(ctx, plan, max, include_pad, x, y);
    return true;
  }
  if (runs_flat(w)) {
    OPFORGE_KERNEL_PATH("pool.flat");
    pool_flat(ctx, plan, max, include_pad, x, y);
    return true;
  }
  OPFORGE_KERNEL_PATH("pool.rows");
  // Kept between calls, so a call allocates nothing once the largest plane has been seen.
  thread_local RowTaps taps;
  thread_local std::vector<float> inv;
  row_taps(w, taps);
  const int64_t pitch = taps.vectors * kLanes;
  if (!max) inverse_counts(plan, include_pad, pitch, inv);
  auto run = plane_runner(w, max);
  const int64_t grain = std::max<int64_t>(1, 16384 / std::max<int64_t>(1, in + out * w.k[1]));
  const RowTaps& shared_taps = taps;
  const float* shared_inv = inv.data();
  ctx.parallel_for(plan.planes, grain, [&](int64_t begin, int64_t end) {
    thread_local std::vector<float> rows;
    if (rows.size() < size_t(w.in[1] * pitch)) rows.resize(size_t(w.in[1] * pitch));
    for (int64_t c = begin; c < end; ++c) run(plan, shared_taps, x + c * in, shared_inv, rows.data(), y + c * out);
  });
  return true;
}

#endif  // __AVX512F__

}  // namespace opforge_nn
