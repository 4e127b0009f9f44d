// plane_vectors.h: 2-D windows over one plane at a time with AVX-512, for the depthwise conv.
// The plane is copied into a padded buffer, so no tap needs a bounds check;
// stride 1 runs over the padded grid (16 consecutive grid positions read 16 consecutive floats
// per tap, positions in the padding columns discarded by masked stores); stride 2 along rows
// runs one output row at a time, each tap's 16 inputs gathered by two loads and a permute.
#pragma once

#if defined(__AVX512F__)

#include <immintrin.h>

#include <algorithm>
#include <vector>

#include "conv/conv.h"
#include "conv/conv_pack.h"

namespace opforge_conv::planes {

using opforge_nn::Window;
using tiles::kLanes;

/// The padded plane's geometry (large enough for every window, ceil_mode's last ones included);
/// `slack` floats after it keep the last vector loads inside the buffer.
struct Plane {
  int64_t ph, pw, slack;
  std::vector<int64_t> tapoff;  ///< per tap (kh, kw): offset in the padded plane
};

/// Whether planes of this 2-D window can run here: stride 1 or 2 along rows.
inline bool plane_fits(const Window& w) {
  return w.in[0] == 1 && w.k[0] == 1 && w.out[0] == 1 && (w.stride[2] == 1 || w.stride[2] == 2);
}

inline Plane plane_for(const Window& w) {
  Plane p;
  p.ph = std::max(w.in[1] + w.pad[1] + w.pad_end[1], (w.out[1] - 1) * w.stride[1] + (w.k[1] - 1) * w.dil[1] + 1);
  p.pw = std::max(w.in[2] + w.pad[2] + w.pad_end[2], (w.out[2] - 1) * w.stride[2] + (w.k[2] - 1) * w.dil[2] + 1);
  p.slack = 2 * kLanes * w.stride[2] + w.k[2] * w.dil[2] + kLanes;
  for (int64_t kh = 0; kh < w.k[1]; ++kh)
    for (int64_t kw = 0; kw < w.k[2]; ++kw) p.tapoff.push_back(kh * w.dil[1] * p.pw + kw * w.dil[2]);
  return p;
}

/// Copies plane x into the interior of the padded buffer, whose border the caller filled with
/// `fill` once (every plane of a call has the same geometry). Each row goes in whole vectors,
/// the lanes past its end `fill`: they land on the border or on the next rows' interior, which
/// is written after. Unmasked stores let the taps' loads that follow be forwarded from them.
inline void copy_interior(const Window& w, const Plane& p, const float* x, float fill, float* out) {
  const __m512 border = _mm512_set1_ps(fill);
  for (int64_t h = 0; h < w.in[1]; ++h) {
    float* dst = out + (h + w.pad[1]) * p.pw + w.pad[2];
    const float* src = x + h * w.in[2];
    for (int64_t j = 0; j < w.in[2]; j += kLanes)
      _mm512_storeu_ps(dst + j, _mm512_mask_loadu_ps(border, tiles::first_lanes(w.in[2] - j), src + j));
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

/// The output vectors of every plane. Stride 1 both ways: 16 consecutive positions of the padded
/// grid; otherwise 16 outputs of one row, their inputs stride[2] floats apart.
inline std::vector<OutVector> out_vectors(const Window& w, const Plane& p) {
  std::vector<OutVector> out;
  if (w.stride[2] == 1 && w.stride[1] == 1) {
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
      OutVector v{oh * w.stride[1] * p.pw + w.stride[2] * ow, {}};
      v.lanes.count = 1;
      v.lanes.mask[0] = tiles::first_lanes(w.out[2] - ow);
      v.lanes.off[0] = oh * w.out[2] + ow;
      out.push_back(v);
    }
  return out;
}

}  // namespace opforge_conv::planes

#endif  // __AVX512F__
