// pool_f32.cpp: float32 2-D MaxPool (without Indices) and AveragePool with AVX-512, one plane per
// task over a padded copy of it (plane_vectors.h): -inf around it for max, 0 for the mean, whose
// divisor per output position (taps inside the input, or inside the padded input with
// count_include_pad) is worked out once per call. A window covering the whole plane is a plain
// reduction.
#include <algorithm>
#include <limits>
#include <vector>

#include "plane_vectors.h"
#include "pool_f32.h"

namespace opforge_nn {

#if !defined(__AVX512F__)

bool pool_f32(KernelContext&, const PoolPlan&, bool, bool) { return false; }

#else

namespace {

using opforge_conv::planes::OutVector;
using opforge_conv::planes::Plane;
using opforge_conv::planes::taps;
using opforge_conv::tiles::kLanes;

constexpr int kGroup = 4;  ///< output vectors in flight

/// 1 / (taps counted) per output position.
std::vector<float> inverse_counts(const PoolPlan& plan, bool include_pad) {
  const AxisTaps &th = plan.taps[1], &tw = plan.taps[2];
  std::vector<float> inv;
  for (size_t oh = 0; oh < th.lo.size(); ++oh)
    for (size_t ow = 0; ow < tw.lo.size(); ++ow) {
      const int64_t n = include_pad ? th.padded[oh] * tw.padded[ow] : (th.hi[oh] - th.lo[oh]) * (tw.hi[ow] - tw.lo[ow]);
      inv.push_back(n > 0 ? 1.f / float(n) : 0.f);
    }
  return inv;
}

/// One plane: each output vector's max or sum over the taps, kGroup vectors at a time.
template <int Step, bool Max>
void run_plane(const Plane& p, const std::vector<OutVector>& vecs, const float* xp, const float* inv, float* y) {
  const int64_t n = int64_t(p.tapoff.size());
  const int64_t* off = p.tapoff.data();
  for (size_t v0 = 0; v0 < vecs.size(); v0 += kGroup) {
    const int g = int(std::min<size_t>(kGroup, vecs.size() - v0));
    __m512 acc[kGroup];
    const float* src[kGroup];
#pragma GCC unroll 4
    for (int i = 0; i < kGroup; ++i) {
      src[i] = xp + vecs[v0 + size_t(std::min(i, g - 1))].src;
      acc[i] = taps<Step>(src[i] + off[0]);
    }
    for (int64_t t = 1; t < n; ++t)
#pragma GCC unroll 4
      for (int i = 0; i < kGroup; ++i) {
        const __m512 v = taps<Step>(src[i] + off[t]);
        acc[i] = Max ? _mm512_mask_max_ps(v, 0xFFFF, v, acc[i]) : _mm512_add_ps(acc[i], v);  // a NaN seen stays
      }
    for (int i = 0; i < g; ++i) {
      const opforge_conv::tiles::Lanes& l = vecs[v0 + size_t(i)].lanes;
      __m512 v = acc[i];
      if (!Max) v = _mm512_mul_ps(v, opforge_conv::tiles::load_lanes(_mm512_setzero_ps(), inv, l));
      opforge_conv::tiles::store_lanes(y, l, v);
    }
  }
}

/// The whole plane of n floats reduced to one.
float reduce_plane(const float* x, int64_t n, bool max) {
  const float lowest = -std::numeric_limits<float>::infinity();
  __m512 acc = _mm512_set1_ps(max ? lowest : 0.f);
  for (int64_t i = 0; i < n; i += kLanes) {
    const __mmask16 m = opforge_conv::tiles::first_lanes(n - i);
    const __m512 v = _mm512_mask_loadu_ps(_mm512_set1_ps(max ? lowest : 0.f), m, x + i);
    acc = max ? _mm512_mask_max_ps(v, 0xFFFF, v, acc) : _mm512_add_ps(acc, v);
  }
  return max ? _mm512_reduce_max_ps(acc) : _mm512_reduce_add_ps(acc);
}

bool is_global(const Window& w) {
  return w.out_size() == 1 && w.k[1] == w.in[1] && w.k[2] == w.in[2] && w.pad[1] == 0 && w.pad[2] == 0 &&
         w.dil[1] == 1 && w.dil[2] == 1;
}

}  // namespace

bool pool_f32(KernelContext& ctx, const PoolPlan& plan, bool max, bool include_pad) {
  const Window& w = plan.w;
  if (!opforge_conv::planes::plane_fits(w)) return false;
  const float* x = ctx.input(0).data<float>();
  float* y = ctx.output(0).data<float>();
  const int64_t in = w.in_size(), out = w.out_size();
  if (is_global(w)) {
    ctx.parallel_for(plan.planes, std::max<int64_t>(1, 16384 / std::max<int64_t>(1, in)), [&](int64_t b, int64_t e) {
      for (int64_t c = b; c < e; ++c) y[c] = reduce_plane(x + c * in, in, max) / (max ? 1.f : float(in));
    });
    return true;
  }
  const Plane p = opforge_conv::planes::plane_for(w);
  const std::vector<OutVector> vecs = opforge_conv::planes::out_vectors(w, p);
  const std::vector<float> inv = max ? std::vector<float>() : inverse_counts(plan, include_pad);
  const float fill = max ? -std::numeric_limits<float>::infinity() : 0.f;
  const int64_t grain = std::max<int64_t>(1, 16384 / std::max<int64_t>(1, out * w.k_size()));
  ctx.parallel_for(plan.planes, grain, [&](int64_t begin, int64_t end) {
    thread_local std::vector<float> padded;
    padded.assign(size_t(p.ph * p.pw + p.slack), fill);
    for (int64_t c = begin; c < end; ++c) {
      opforge_conv::planes::copy_interior(w, p, x + c * in, fill, padded.data());
      auto run = w.stride[2] == 1 ? (max ? run_plane<1, true> : run_plane<1, false>)
                                  : (max ? run_plane<2, true> : run_plane<2, false>);
      run(p, vecs, padded.data(), inv.data(), y + c * out);
    }
  });
  return true;
}

#endif  // __AVX512F__

}  // namespace opforge_nn
