// pool_avx2.cpp: float32 1-D/2-D MaxPool (without Indices) and AveragePool with AVX2, for builds
// without AVX-512 (pool_f32.cpp has those). A plane is read where it lies when every window is
// inside it, else copied into a buffer padded with the reduction's identity (-inf for max, 0 for
// the mean), so no tap needs a bounds check; outputs
// run 8 to a vector along each output row, four vectors in flight (across rows on small maps),
// stride 2 picking every other float of two loads. The mean multiplies by each output's inverse
// tap count, worked out once per call. A window covering the whole plane is a plain reduction.
#include <algorithm>
#include <cstring>
#include <limits>
#include <vector>

#include "common/kernel_paths.h"
#include "common/padded_plane_avx2.h"
#include "pool/pool_f32.h"

#if defined(__AVX2__) && !defined(__AVX512F__)

#include <immintrin.h>

namespace opforge_nn {

namespace {

using avx2::kLanes;
using avx2::OutVector;
using avx2::Padded;
using avx2::first_lanes;
using avx2::in_groups_of_4;
using avx2::in_order;
using avx2::in_place_for;
using avx2::copy_row;
using avx2::out_vectors;
using avx2::store_whole;
using avx2::padded_for;
using avx2::taps_unordered;

/// max: a NaN already in acc stays (as pool_f32.cpp's AVX-512 path combines).
template <bool Max>
__attribute__((always_inline)) inline __m256 combine(__m256 acc, __m256 v) {
  return Max ? _mm256_max_ps(v, acc) : _mm256_add_ps(acc, v);
}

std::vector<float> inverse_counts(const PoolPlan& plan, bool include_pad) {
  const AxisTaps &th = plan.taps[1], &tw = plan.taps[2];
  std::vector<float> inv(size_t(plan.w.out[1] * plan.w.out[2]));
  for (int64_t oh = 0; oh < plan.w.out[1]; ++oh)
    for (int64_t ow = 0; ow < plan.w.out[2]; ++ow) {
      const int64_t n = include_pad ? th.padded[oh] * tw.padded[ow] : (th.hi[oh] - th.lo[oh]) * (tw.hi[ow] - tw.lo[ow]);
      inv[size_t(oh * plan.w.out[2] + ow)] = n > 0 ? 1.f / float(n) : 0.f;
    }
  return inv;
}

/// Output vectors [v0, v0 + G) of one plane from its padded copy xp (inv: 1 / each output's
/// count, for averages).
template <int Step, int Taps, bool Max, int G>
__attribute__((always_inline)) inline void run_group(const Padded& p, const std::vector<OutVector>& vecs,
                                                     const float* xp, const float* inv, int64_t out, float* y,
                                                     size_t v0) {
  const int64_t n = Taps > 0 ? Taps : int64_t(p.tapoff.size());
  const int64_t* off = p.tapoff.data();
  __m256 acc[G];
  const float* src[G];
#pragma GCC unroll 4
  for (int i = 0; i < G; ++i) {
    acc[i] = _mm256_set1_ps(Max ? -std::numeric_limits<float>::infinity() : 0.f);
    src[i] = xp + vecs[v0 + size_t(i)].src;
  }
#pragma GCC unroll 9
  for (int64_t t = 0; t < n; ++t)
#pragma GCC unroll 4
    for (int i = 0; i < G; ++i) acc[i] = combine<Max>(acc[i], taps_unordered<Step>(src[i] + off[t]));
#pragma GCC unroll 4
  for (int i = 0; i < G; ++i) {
    acc[i] = in_order<Step>(acc[i]);
    const OutVector& v = vecs[v0 + size_t(i)];
    if (store_whole(vecs, v0 + size_t(i), out)) {
      _mm256_storeu_ps(y + v.y, Max ? acc[i] : _mm256_mul_ps(acc[i], _mm256_loadu_ps(inv + v.y)));
    } else {
      const __m256i m = first_lanes(v.lanes);
      _mm256_maskstore_ps(y + v.y, m, Max ? acc[i] : _mm256_mul_ps(acc[i], _mm256_maskload_ps(inv + v.y, m)));
    }
  }
}

/// One plane from its padded copy: the output vectors 4 at a time, then the last few.
/// Taps: the tap count when fixed at compile time (2x2, 3x3), else 0.
template <int Step, int Taps, bool Max>
void run_plane(const Padded& p, const std::vector<OutVector>& vecs, const float* xp, const float* inv, int64_t out,
               float* y) {
  in_groups_of_4(vecs.size(), [&](auto g, size_t v0) { run_group<Step, Taps, Max, g()>(p, vecs, xp, inv, out, y, v0); });
}

using PlaneRun = void (*)(const Padded&, const std::vector<OutVector>&, const float*, const float*, int64_t, float*);

/// max(x[2j], x[2j + 1], x[2j + 2]) for 8 consecutive j from src = x + 2 j0, in taps_unordered<2>'s
/// lane order: the pairwise maxima of 16 consecutive inputs (two loads, and two more one float
/// on), then their even and odd lanes.
__attribute__((always_inline)) inline __m256 max3_stride2(const float* src) {
  const __m256 lo = _mm256_max_ps(_mm256_loadu_ps(src), _mm256_loadu_ps(src + 1));
  const __m256 hi = _mm256_max_ps(_mm256_loadu_ps(src + kLanes), _mm256_loadu_ps(src + kLanes + 1));
  return _mm256_max_ps(_mm256_shuffle_ps(lo, hi, 0x88), _mm256_shuffle_ps(lo, hi, 0xDD));
}

/// MaxPool 3x3 at stride 2 (squeezenet's, resnet50's), separably: each output vector takes the
/// three-wide maxima of its window's rows, the top one kept from the output row above (its
/// bottom row), so 2 rows of 4 loads each instead of 9 taps of 2 loads and a shuffle. Alone, 1
/// thread, against the tap-by-tap run: 0.55-0.74 (64 x 111x111, 128 x 55x55, 256 x 27x27,
/// 64 x 112x112 padded).
void run_plane_max3s2(const Padded& p, const std::vector<OutVector>& vecs, const float* xp, const float*, int64_t out,
                      float* y) {
  constexpr size_t kKept = 64;  // output vectors a row whose bottom maxima are kept (rows of 512)
  size_t per_row = 1;
  while (per_row < vecs.size() && vecs[per_row].src - vecs[0].src < 2 * p.pw) ++per_row;
  __m256 kept[kKept];
  const bool keep = per_row <= kKept;
  for (size_t i = 0; i < vecs.size(); ++i) {
    const OutVector& v = vecs[i];
    const float* src = xp + v.src;
    const size_t col = i % per_row;
    const __m256 top = keep && i >= per_row ? kept[col] : max3_stride2(src);
    const __m256 bottom = max3_stride2(src + 2 * p.pw);
    if (keep) kept[col] = bottom;
    const __m256 m = in_order<2>(_mm256_max_ps(_mm256_max_ps(top, max3_stride2(src + p.pw)), bottom));
    if (store_whole(vecs, i, out))
      _mm256_storeu_ps(y + v.y, m);
    else
      _mm256_maskstore_ps(y + v.y, first_lanes(v.lanes), m);
  }
}

template <int Step, bool Max>
PlaneRun plane_run(int64_t taps) {
  return taps == 4 ? run_plane<Step, 4, Max> : taps == 9 ? run_plane<Step, 9, Max> : run_plane<Step, 0, Max>;
}

float reduce_plane(const float* x, int64_t n, bool max) {
  const __m256 fill = _mm256_set1_ps(max ? -std::numeric_limits<float>::infinity() : 0.f);
  __m256 acc[4] = {fill, fill, fill, fill};
  int64_t i = 0;
  for (; i + 4 * kLanes <= n; i += 4 * kLanes)
    for (int j = 0; j < 4; ++j) {
      const __m256 v = _mm256_loadu_ps(x + i + j * kLanes);
      acc[j] = max ? combine<true>(acc[j], v) : combine<false>(acc[j], v);
    }
  for (; i < n; i += kLanes) {
    const __m256i m = first_lanes(n - i);
    const __m256 v = _mm256_blendv_ps(fill, _mm256_maskload_ps(x + i, m), _mm256_castsi256_ps(m));
    acc[0] = max ? combine<true>(acc[0], v) : combine<false>(acc[0], v);
  }
  for (int j = 1; j < 4; ++j) acc[0] = max ? combine<true>(acc[0], acc[j]) : combine<false>(acc[0], acc[j]);
  alignas(32) float lanes[kLanes];
  _mm256_store_ps(lanes, acc[0]);
  float r = lanes[0];
  for (int j = 1; j < kLanes; ++j) r = max ? (lanes[j] > r ? lanes[j] : r) : r + lanes[j];
  return r;
}

bool is_global(const Window& w) {
  return w.out_size() == 1 && w.k[1] == w.in[1] && w.k[2] == w.in[2] && w.pad[1] == 0 && w.pad[2] == 0 &&
         w.dil[1] == 1 && w.dil[2] == 1;
}

}  // namespace

bool pool_f32(KernelContext& ctx, const PoolPlan& plan, bool max, bool include_pad) {
  const Window& w = plan.w;
  if (!(w.in[0] == 1 && w.k[0] == 1 && w.out[0] == 1 && (w.stride[2] == 1 || w.stride[2] == 2))) return false;
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
  const Padded p = padded_for(w), direct = in_place_for(w);
  // Planes are read where they lie when no window reaches past them and enough of the input
  // follows for the last vectors' loads; the others (and every plane of a padded window) from a
  // padded copy.
  const int64_t direct_planes =
      direct.ph == 0 ? 0 : std::max<int64_t>(0, plan.planes - (direct.slack + in - 1) / std::max<int64_t>(1, in));
  if (direct_planes > 0) OPFORGE_KERNEL_PATH("pool.in_place");
  if (direct_planes < plan.planes) OPFORGE_KERNEL_PATH("pool.padded");
  const std::vector<OutVector> vecs = out_vectors(w, p, true);
  const std::vector<OutVector> direct_vecs = direct_planes > 0 ? out_vectors(w, direct, true) : std::vector<OutVector>();
  const std::vector<float> inv = max ? std::vector<float>() : inverse_counts(plan, include_pad);
  const int64_t taps = w.k_size();
  PlaneRun run = w.stride[2] == 1 ? (max ? plane_run<1, true>(taps) : plane_run<1, false>(taps))
                                  : (max ? plane_run<2, true>(taps) : plane_run<2, false>(taps));
  const bool max3s2 = max && w.k[1] == 3 && w.k[2] == 3 && w.stride[1] == 2 && w.stride[2] == 2 && w.dil[1] == 1 &&
                      w.dil[2] == 1;
  if (max3s2) {
    OPFORGE_KERNEL_PATH("pool.max3x3_stride2");
    run = run_plane_max3s2;
  }
  const float fill = max ? -std::numeric_limits<float>::infinity() : 0.f;
  const int64_t grain = std::max<int64_t>(1, 16384 / std::max<int64_t>(1, in + out * taps));
  ctx.parallel_for(plan.planes, grain, [&](int64_t begin, int64_t end) {
    thread_local std::vector<float> padded;
    bool filled = false;
    for (int64_t c = begin; c < end; ++c) {
      const float* xc = x + c * in;
      if (c < direct_planes) {
        run(direct, direct_vecs, xc, inv.data(), out, y + c * out);
        continue;
      }
      if (!filled) padded.assign(size_t(p.size()), fill), filled = true;
      for (int64_t h = 0; h < w.in[1]; ++h)
        copy_row(xc + h * w.in[2], w.in[2], padded.data() + (h + w.pad[1]) * p.pw + w.pad[2], _mm256_set1_ps(fill));
      run(p, vecs, padded.data(), inv.data(), out, y + c * out);
    }
  });
  return true;
}

}  // namespace opforge_nn

#endif  // __AVX2__ && !__AVX512F__
