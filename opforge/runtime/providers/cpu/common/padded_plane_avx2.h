// padded_plane_avx2.h: what the AVX2 window kernels (depthwise conv, pools) share besides the
// lane masks of lanes_avx2.h: the padded copy of a plane that lets every tap load without a
// bounds check, the output vectors over it (or over the plane read in place), one tap's 8
// inputs at stride 1 or 2, and the walk over a plane's vectors four at a time.
#pragma once

#if defined(__AVX2__)

#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <type_traits>
#include <vector>

#include "common/lanes_avx2.h"
#include "conv/conv.h"

namespace opforge_nn::avx2 {

/// The padded copy of one input plane: large enough for every window (ceil_mode's last ones
/// included), `slack` floats after it for the last vectors' loads (lanes past the row are never
/// stored), and each tap's (kh, kw) offset in it.
struct Padded {
  int64_t ph, pw, slack;
  std::vector<int64_t> tapoff;
  int64_t size() const { return ph * pw + slack; }
};

/// One output vector: where its tap-0 inputs start in the padded plane, where its lanes go in
/// the output plane, and how many there are.
struct OutVector {
  int64_t src, y;
  int lanes;
};

/// Each tap's (kh, kw) offset in a plane of p.pw floats a row.
inline void set_tap_offsets(const Window& w, Padded& p) {
  for (int64_t kh = 0; kh < w.k[1]; ++kh)
    for (int64_t kw = 0; kw < w.k[2]; ++kw) p.tapoff.push_back(kh * w.dil[1] * p.pw + kw * w.dil[2]);
}

inline Padded padded_for(const Window& w) {
  Padded p;
  p.ph = std::max(w.in[1] + w.pad[1] + w.pad_end[1], (w.out[1] - 1) * w.stride[1] + (w.k[1] - 1) * w.dil[1] + 1);
  p.pw = std::max(w.in[2] + w.pad[2] + w.pad_end[2], (w.out[2] - 1) * w.stride[2] + (w.k[2] - 1) * w.dil[2] + 1);
  p.slack = 2 * kLanes * w.stride[2] + kLanes;
  set_tap_offsets(w, p);
  return p;
}

/// The output vectors of a plane, row by row, 8 lanes each but a row's last. With `overlap`, a
/// row of 8 or more ends on a whole vector shifted back over the one before it (the lanes it
/// repeats get the same values), so only rows narrower than a vector have a vector of fewer
/// lanes.
inline std::vector<OutVector> out_vectors(const Window& w, const Padded& p, bool overlap = false) {
  std::vector<OutVector> out;
  for (int64_t oh = 0; oh < w.out[1]; ++oh)
    for (int64_t ow = 0; ow < w.out[2]; ow += kLanes) {
      const int64_t at = overlap && w.out[2] >= kLanes ? std::min(ow, w.out[2] - kLanes) : ow;
      out.push_back({oh * w.stride[1] * p.pw + at * w.stride[2], oh * w.out[2] + at,
                     int(std::min<int64_t>(kLanes, w.out[2] - at))});
    }
  return out;
}

/// Whether vector `i` of `vecs` (over a plane of `out` floats) may be stored whole: it has 8
/// lanes, or its lanes past its own all fall on the plane's outputs that later vectors store
/// (vectors are stored in order, so those lanes are written again). A masked store costs about
/// as much as the nine FMAs of a 3x3 window on Zen 3 (22% of a depthwise conv on 14x14 maps).
/// Only where nothing reads Y between the stores (no Z in place).
__attribute__((always_inline)) inline bool store_whole(const std::vector<OutVector>& vecs, size_t i, int64_t out) {
  return vecs[i].lanes == kLanes || (i + 1 < vecs.size() && vecs[i].y + kLanes <= out);
}

/// Row `n` floats from src into dst, 8 at a time; the last vector's lanes past the row are
/// written as `fill` (the padding's value): the caller's padded rows are copied in order, so
/// what they reach of the next row is copied over after, and the last row's reach is slack.
__attribute__((always_inline)) inline void copy_row(const float* src, int64_t n, float* dst, __m256 fill) {
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) _mm256_storeu_ps(dst + i, _mm256_loadu_ps(src + i));
  if (i < n) {
    const __m256i m = first_lanes(n - i);
    _mm256_storeu_ps(dst + i, _mm256_blendv_ps(fill, _mm256_maskload_ps(src + i, m), _mm256_castsi256_ps(m)));
  }
}

/// The plane read where it lies, as a Padded of its own size, where the window has no pads and
/// every window lies inside the input; else ph = 0. Its last vectors' loads reach as far past it
/// as padded_for's slack (lanes never stored): a plane may be read in place only where that many
/// floats of the input follow it.
inline Padded in_place_for(const Window& w) {
  Padded p{0, w.in[2], 2 * kLanes * w.stride[2] + kLanes, {}};
  for (int a = 1; a < 3; ++a)
    if (w.pad[a] != 0 || w.pad_end[a] != 0 || (w.out[a] - 1) * w.stride[a] + (w.k[a] - 1) * w.dil[a] + 1 > w.in[a])
      return p;
  p.ph = w.in[1];
  set_tap_offsets(w, p);
  return p;
}

/// The 8 inputs of one tap for consecutive outputs, consecutive floats (step 1) or every other,
/// with step 2 in the lane order of `in_order`: taps combined lane by lane (max, add, fma with a
/// broadcast weight) are put in order once, not a permute per tap.
template <int Step>
__attribute__((always_inline)) inline __m256 taps_unordered(const float* src) {
  if constexpr (Step == 1) {
    return _mm256_loadu_ps(src);
  } else {
    return _mm256_shuffle_ps(_mm256_loadu_ps(src), _mm256_loadu_ps(src + kLanes), 0x88);
  }
}

/// A combination of taps_unordered's vectors in output order.
template <int Step>
__attribute__((always_inline)) inline __m256 in_order(__m256 v) {
  if constexpr (Step == 1) {
    return v;
  } else {
    return _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(v), 0xD8));
  }
}

/// run(std::integral_constant<int, G>, v0) over `count` output vectors: groups of 4 from v0 = 0,
/// then one group of the last 1 to 3. Each group's vectors read their own entries: a short last
/// group clamped to its last vector made GCC work the four addresses out in vector registers,
/// some 20 instructions between each group and its loads (a depthwise 3x3 on 88 x 28x28 took
/// 1.3x as long, a 3x3 max pool on 256 x 28x28 1.2-1.5x).
template <class F>
__attribute__((always_inline)) inline void in_groups_of_4(size_t count, F&& run) {
  size_t v0 = 0;
  for (; v0 + 4 <= count; v0 += 4) run(std::integral_constant<int, 4>{}, v0);
  switch (count - v0) {
    case 3: return run(std::integral_constant<int, 3>{}, v0);
    case 2: return run(std::integral_constant<int, 2>{}, v0);
    case 1: return run(std::integral_constant<int, 1>{}, v0);
    default: return;
  }
}

}  // namespace opforge_nn::avx2

#endif
