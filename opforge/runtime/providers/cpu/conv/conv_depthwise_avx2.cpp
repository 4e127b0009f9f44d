// conv_depthwise_avx2.cpp: float32 depthwise convolution (one input channel per group) with
// AVX2 + FMA, for builds without AVX-512 (conv_depthwise_f32.cpp has those). One output plane per
// task over a zero-padded copy of its input plane, so no tap needs a bounds check; the outputs
// run 8 to a vector along each output row, four vectors in flight (across rows on small maps),
// each tap's weight broadcast once for them. Stride 2 along rows reads a copy with each row's
// even and odd columns apart, so every tap is one load. Bias, Z and the activation are applied
// in registers.
#include <algorithm>
#include <cstring>
#include <vector>

#include "common/kernel_paths.h"
#include "common/padded_plane_avx2.h"
#include "conv/conv_avx2.h"
#include "conv/conv_run.h"

namespace opforge_conv {

#if defined(__AVX2__) && defined(__FMA__) && !defined(__AVX512F__)

namespace {

using avx2::kLanes;
using opforge_nn::avx2::OutVector;
using opforge_nn::avx2::Padded;
using opforge_nn::avx2::copy_row;
using opforge_nn::avx2::out_vectors;
using opforge_nn::avx2::store_whole;
using opforge_nn::avx2::in_groups_of_4;
using opforge_nn::avx2::in_order;
using opforge_nn::avx2::padded_for;

constexpr int64_t kMaxTaps = 64;  ///< kernels up to 8x8 keep their weights on the stack

/// Copies plane x into the interior of the padded buffer, whose border stays zero (row by row
/// in vectors: a memcpy call per row of a 14x14 plane cost more than its copy).
void copy_interior(const Window& w, const Padded& p, const float* x, float* out) {
  for (int64_t h = 0; h < w.in[1]; ++h)
    copy_row(x + h * w.in[2], w.in[2], out + (h + w.pad[1]) * p.pw + w.pad[2], _mm256_setzero_ps());
}

/// A window of stride 2 along rows reads a padded copy with each row's even columns and odd
/// columns apart: a padded row of `p.pw` floats is two halves of `half`, the even columns, then
/// the odd ones. A tap's inputs for 8 consecutive outputs are then 8 consecutive floats of one
/// half, one load, where the interleaved row took two and a shuffle (a 5x5 window: 50 loads a
/// vector, more than Zen 3's two 256-bit loads a cycle feed its 25 FMAs).
struct Split {
  Padded p;
  int64_t half;
};

Split split_for(const Window& w) {
  const Padded whole_rows = padded_for(w);
  // copy_split stores whole vectors: its last ones reach half-row column 8 * chunks + ceil(pad / 2)
  const int64_t chunks = (w.in[2] + 2 * kLanes - 1) / (2 * kLanes);
  Split s{{whole_rows.ph, 0, 2 * kLanes, {}}, std::max((whole_rows.pw + 1) / 2, chunks * kLanes + (w.pad[2] + 1) / 2)};
  s.p.pw = 2 * s.half;
  for (int64_t kh = 0; kh < w.k[1]; ++kh)
    for (int64_t kw = 0; kw < w.k[2]; ++kw) {
      const int64_t col = kw * w.dil[2];  // output o reads padded column 2 o + col
      s.p.tapoff.push_back(kh * w.dil[1] * s.p.pw + (col % 2) * s.half + col / 2);
    }
  return s;
}

/// Copies plane x into the split copy's interior: input column i is padded column i + pad,
/// which lies in half (i + pad) % 2 at (i + pad) / 2. Sixteen columns at a time, the evens and
/// odds picked by two shuffles; the last ones' lanes past the row store zeros on the padding.
void copy_split(const Window& w, const Split& s, const float* x, float* out) {
  const int64_t n = w.in[2], pad = w.pad[2];
  const int64_t evens_at = (pad % 2) * s.half + pad / 2, odds_at = ((pad + 1) % 2) * s.half + (pad + 1) / 2;
  for (int64_t h = 0; h < w.in[1]; ++h) {
    const float* src = x + h * n;
    float* row = out + (h + w.pad[1]) * s.p.pw;
    for (int64_t i = 0, j = 0; i < n; i += 2 * kLanes, j += kLanes) {
      __m256 a, b;
      if (i + 2 * kLanes <= n) {
        a = _mm256_loadu_ps(src + i), b = _mm256_loadu_ps(src + i + kLanes);
      } else {
        a = _mm256_maskload_ps(src + i, avx2::first_lanes(n - i));
        b = _mm256_maskload_ps(src + i + kLanes, avx2::first_lanes(n - i - kLanes));
      }
      _mm256_storeu_ps(row + evens_at + j, in_order<2>(_mm256_shuffle_ps(a, b, 0x88)));
      _mm256_storeu_ps(row + odds_at + j, in_order<2>(_mm256_shuffle_ps(a, b, 0xDD)));
    }
  }
}

/// What a plane's output vectors read and where they go.
struct PlaneArgs {
  const std::vector<OutVector>& vecs;
  const int64_t* off;   ///< each tap's offset in the padded plane
  const float* xp;      ///< the padded plane
  float bias;
  const float* z;
  const Epilogue& e;
  bool act, whole;
  int64_t out_size;
  float* y;
};

/// Output vectors [v0, v0 + G) of a plane, each tap's weight (w[t]) broadcast once for them: G
/// independent sums in flight. Taps is the tap count when fixed at compile time, else 0 (n).
template <int Taps, int G>
__attribute__((always_inline)) inline void run_group(const PlaneArgs& a, const __m256* w, int64_t n, size_t v0) {
  __m256 acc[G];
  const float* src[G];
#pragma GCC unroll 4
  for (int i = 0; i < G; ++i) {
    acc[i] = _mm256_set1_ps(a.bias);
    src[i] = a.xp + a.vecs[v0 + size_t(i)].src;
  }
#pragma GCC unroll 25
  for (int64_t t = 0; t < (Taps > 0 ? Taps : n); ++t)
#pragma GCC unroll 4
    for (int i = 0; i < G; ++i) acc[i] = _mm256_fmadd_ps(w[t], _mm256_loadu_ps(src[i] + a.off[t]), acc[i]);
#pragma GCC unroll 4
  for (int i = 0; i < G; ++i) {
    const OutVector& v = a.vecs[v0 + size_t(i)];
    __m256 out = acc[i];
    if (v.lanes == kLanes || (a.whole && store_whole(a.vecs, v0 + size_t(i), a.out_size))) {
      if (a.z != nullptr) out = _mm256_add_ps(out, _mm256_loadu_ps(a.z + v.y));
      _mm256_storeu_ps(a.y + v.y, a.act ? avx2::activate(out, a.e) : out);
    } else {
      const __m256i m = avx2::first_lanes(v.lanes);
      if (a.z != nullptr) out = _mm256_add_ps(out, _mm256_maskload_ps(a.z + v.y, m));
      _mm256_maskstore_ps(a.y + v.y, m, a.act ? avx2::activate(out, a.e) : out);
    }
  }
}

/// One plane: the output vectors 4 at a time (each tap's FMAs independent), then the last few. Taps is the tap count
/// when fixed at compile time (3x3, 5x5), else 0. `whole`: vectors may be stored whole where
/// store_whole says (Z is not Y).
template <int Taps>
void run_plane(const Padded& p, const std::vector<OutVector>& vecs, const float* xp, const __m256* wv, float bias,
               const float* z, const Epilogue& e, bool act, bool whole, int64_t out_size, float* y) {
  const int64_t n = Taps > 0 ? Taps : int64_t(p.tapoff.size());
  const PlaneArgs a{vecs, p.tapoff.data(), xp, bias, z, e, act, whole, out_size, y};
  // 3x3: the nine weights stay in registers (read from the stack beside each tap's load, an
  // FMA took two loads: 18 a vector, more than its 9 FMAs at three loads a cycle)
  constexpr bool kHeld = Taps > 0 && Taps <= 9;
  __m256 held[kHeld ? Taps : 1];
  if constexpr (kHeld)
    for (int t = 0; t < Taps; ++t) held[t] = wv[t];
  const __m256* w = kHeld ? held : wv;
  in_groups_of_4(vecs.size(), [&](auto g, size_t v0) { run_group<Taps, g()>(a, w, n, v0); });
}

using PlaneRun = void (*)(const Padded&, const std::vector<OutVector>&, const float*, const __m256*, float,
                          const float*, const Epilogue&, bool, bool, int64_t, float*);

PlaneRun plane_run(int64_t taps) {
  return taps == 9 ? run_plane<9> : taps == 25 ? run_plane<25> : run_plane<0>;
}

}  // namespace

bool conv_depthwise_f32(KernelContext& ctx, const ConvShape& s, const float* x, const float* wt, const float* bias,
                        const float* z, float* y, const Epilogue& e) {
  const Window& w = s.w;
  const bool fits = w.in[0] == 1 && w.k[0] == 1 && w.out[0] == 1 && (w.stride[2] == 1 || w.stride[2] == 2);
  if (!fits || w.k_size() > kMaxTaps) return false;
  const bool split = w.stride[2] == 2;
  if (split)
    OPFORGE_KERNEL_PATH("conv.depthwise.split");
  else
    OPFORGE_KERNEL_PATH("conv.depthwise.padded");
  const Split sp = split ? split_for(w) : Split{padded_for(w), 0};
  const Padded& p = sp.p;
  const int64_t taps = w.k_size(), out = w.out_size();
  // Z in place (Y's own floats) is read vector by vector: no vector may write lanes another reads.
  const int64_t bytes = s.n * s.m * out * int64_t(sizeof(float));
  const bool whole = z == nullptr || !overlap(z, bytes, y, bytes);
  Window along = w;  // the split copy's outputs read consecutive columns of a half
  along.stride[2] = 1;
  const std::vector<OutVector> vecs = out_vectors(along, p, whole);
  const PlaneRun run = plane_run(taps);
  const bool act = in_register(e.act);
  auto input = [&](int64_t plane) { return x + ((plane / s.m) * s.c + (plane % s.m) / s.mg) * w.in_size(); };
  const int64_t grain = std::max<int64_t>(1, 16384 / std::max<int64_t>(1, out * taps));
  ctx.parallel_for(s.n * s.m, grain, [&](int64_t begin, int64_t end) {
    thread_local std::vector<float> padded;
    padded.assign(size_t(p.size()), 0.f);
    for (int64_t plane = begin; plane < end; ++plane) {
      if (split)
        copy_split(w, sp, input(plane), padded.data());
      else
        copy_interior(w, p, input(plane), padded.data());
      const int64_t mm = plane % s.m;
      __m256 wv[kMaxTaps];
      for (int64_t t = 0; t < taps; ++t) wv[t] = _mm256_set1_ps(wt[mm * taps + t]);
      float* yp = y + plane * out;
      run(p, vecs, padded.data(), wv, bias != nullptr ? bias[mm] : 0.f, z != nullptr ? z + plane * out : nullptr, e,
          act && e.act != Activation::None, whole, out, yp);
      if (!act) activate_rows(e, yp, out, 1, 0, out);
    }
  });
  return true;
}

#endif  // __AVX2__ && __FMA__ && !__AVX512F__

}  // namespace opforge_conv
