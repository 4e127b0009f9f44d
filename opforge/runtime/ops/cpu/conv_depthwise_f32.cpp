// conv_depthwise_f32.cpp: float32 depthwise convolution (one input channel per group) with
// AVX-512, one output plane per task. Each plane is first copied into a zero-padded buffer, so no
// tap needs a bounds check. Stride 1 runs over the padded grid: 16 consecutive grid positions
// read 16 consecutive floats per tap, and positions in the padding columns are discarded by
// masked stores. Stride 2 along the rows runs one output row at a time, every tap's 16 inputs
// gathered from two loads and a permute. Bias, Z and the activation are applied in registers.
#include <algorithm>
#include <cstring>
#include <vector>

#include "conv_pack.h"
#include "conv_run.h"

namespace opforge_conv {

#if !defined(__AVX512F__)

bool conv_depthwise_f32(KernelContext&, const ConvShape&, const float*, const float*, const float*, const float*,
                        float*, const Epilogue&) {
  return false;
}

#else

namespace {

using tiles::kLanes;

constexpr int64_t kMaxTaps = 64;  ///< kernels up to 8x8 keep their weights in registers or on the stack

/// The padded plane's geometry; `slack` floats after it keep the last loads inside the buffer.
struct Plane {
  int64_t ph, pw, slack;
  std::vector<int64_t> tapoff;  ///< per tap (kh, kw): offset in the padded plane
};

Plane plane_for(const Window& w) {
  Plane p;
  p.ph = w.in[1] + w.pad[1] + w.pad_end[1];
  p.pw = w.in[2] + w.pad[2] + w.pad_end[2];
  p.slack = 2 * kLanes * w.stride[2] + w.k[2] * w.dil[2] + kLanes;
  for (int64_t kh = 0; kh < w.k[1]; ++kh)
    for (int64_t kw = 0; kw < w.k[2]; ++kw) p.tapoff.push_back(kh * w.dil[1] * p.pw + kw * w.dil[2]);
  return p;
}

/// Copies plane x into the interior of the padded buffer, whose border the caller zeroed once
/// (every plane of a call has the same geometry). Each row goes in whole vectors, the lanes past
/// its end zero: they land on the border (zero anyway) or on the next rows' interior, which is
/// written after. Unmasked stores let the taps' loads that follow be forwarded from them.
void copy_interior(const Window& w, const Plane& p, const float* x, float* out) {
  for (int64_t h = 0; h < w.in[1]; ++h) {
    float* dst = out + (h + w.pad[1]) * p.pw + w.pad[2];
    const float* src = x + h * w.in[2];
    for (int64_t j = 0; j < w.in[2]; j += kLanes)
      _mm512_storeu_ps(dst + j, _mm512_maskz_loadu_ps(tiles::first_lanes(w.in[2] - j), src + j));
  }
}

/// The 16 inputs of one tap for outputs j, j + 1, ... of a row: consecutive (step 1) or every
/// other float (step 2).
template <int Step>
__attribute__((always_inline)) inline __m512 taps(const float* src) {
  if constexpr (Step == 1) {
    return _mm512_loadu_ps(src);
  } else {
    const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
    return _mm512_permutex2var_ps(_mm512_loadu_ps(src), even, _mm512_loadu_ps(src + kLanes));
  }
}

/// One output vector of a plane: where its tap-0 inputs start in the padded plane, and where
/// its lanes go in the output plane.
struct OutVector {
  int64_t src;
  tiles::Lanes lanes;
};

/// The output vectors of every plane. Stride 1: 16 consecutive positions of the padded grid;
/// stride 2 along rows: 16 outputs of one row, their inputs every other float.
std::vector<OutVector> out_vectors(const Window& w, const Plane& p) {
  std::vector<OutVector> out;
  if (w.stride[2] == 1) {
    tiles::Grid g;
    g.plane = p.ph * p.pw, g.pitch = p.pw, g.out_h = w.out[1], g.out_w = w.out[2];
    g.count = (w.out[1] - 1) * p.pw + w.out[2];
    for (int64_t v = 0; v < g.count; v += tiles::kNR) {
      const tiles::TileMap map = tiles::map_grid_tile(g, v);
      for (int h = 0; h < map.vectors; ++h) out.push_back({v + h * kLanes, map.lanes[h]});
    }
    return out;
  }
  for (int64_t oh = 0; oh < w.out[1]; ++oh)
    for (int64_t ow = 0; ow < w.out[2]; ow += kLanes) {
      OutVector v{oh * w.stride[1] * p.pw + 2 * ow, {}};
      v.lanes.count = 1;
      v.lanes.mask[0] = tiles::first_lanes(w.out[2] - ow);
      v.lanes.off[0] = oh * w.out[2] + ow;
      out.push_back(v);
    }
  return out;
}

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

}  // namespace

bool conv_depthwise_f32(KernelContext& ctx, const ConvShape& s, const float* x, const float* wt, const float* bias,
                        const float* z, float* y, const Epilogue& e) {
  const Window& w = s.w;
  const bool flat = w.in[0] == 1 && w.k[0] == 1 && w.out[0] == 1;
  if (!flat || w.stride[2] > 2 || (w.stride[2] == 1 && w.stride[1] != 1) || w.k_size() > kMaxTaps) return false;
  const Plane p = plane_for(w);
  const std::vector<OutVector> vecs = out_vectors(w, p);
  const int64_t taps = w.k_size(), out = w.out_size();
  const int64_t grain = std::max<int64_t>(1, 16384 / std::max<int64_t>(1, out * taps));
  ctx.parallel_for(s.n * s.m, grain, [&](int64_t begin, int64_t end) {
    // Two padded buffers: plane i + 1 is copied while plane i's taps read the other, so the
    // copy's stores have left the store queue before the taps load them.
    thread_local std::vector<float> padded;
    const int64_t size = p.ph * p.pw + p.slack;
    padded.assign(size_t(2 * size), 0.f);
    auto input = [&](int64_t plane) { return x + ((plane / s.m) * s.c + (plane % s.m) / s.mg) * w.in_size(); };
    copy_interior(w, p, input(begin), padded.data());
    for (int64_t plane = begin; plane < end; ++plane) {
      float* now = padded.data() + ((plane - begin) % 2) * size;
      if (plane + 1 < end) copy_interior(w, p, input(plane + 1), padded.data() + ((plane + 1 - begin) % 2) * size);
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
