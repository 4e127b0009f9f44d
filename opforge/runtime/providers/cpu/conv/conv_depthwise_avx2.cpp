// conv_depthwise_avx2.cpp: float32 depthwise convolution (one input channel per group) with
// AVX2 + FMA, for builds without AVX-512 (conv_depthwise_f32.cpp has those). A 3x3 window of
// stride 1 padded 1 reads the input where it lies, its rows' neighbouring columns in registers.
// Other windows take one output plane per task over a zero-padded copy of its input plane, so
// no tap needs a bounds check; the outputs run 8 to a vector along each output row, four vectors
// in flight (across rows on small maps), each tap's weight broadcast once for them. Stride 2
// along rows reads a copy with each row's even and odd columns apart, so every tap is one load.
// Bias, Z and the activation are applied in registers.
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
using opforge_nn::avx2::even_lanes;
using opforge_nn::avx2::odd_lanes;
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
      _mm256_storeu_ps(row + evens_at + j, even_lanes(a, b));
      _mm256_storeu_ps(row + odds_at + j, odd_lanes(a, b));
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

/// One input row's 8 columns from c0 and their neighbours one column before and after, zero
/// past the row's ends (a row of `width` >= 8 floats; c0 + 8 <= width).
struct Columns {
  __m256 before, at, after;
};

__attribute__((always_inline)) inline Columns columns(const float* row, int64_t c0, int64_t width) {
  const __m256 zero = _mm256_setzero_ps(), at = _mm256_loadu_ps(row + c0);
  // at the row's ends the column past it is zero: the vector itself shifted a lane, zero in
  const __m256 before = c0 > 0 ? _mm256_loadu_ps(row + c0 - 1)
                               : _mm256_blend_ps(_mm256_permutevar8x32_ps(at, _mm256_setr_epi32(0, 0, 1, 2, 3, 4, 5, 6)),
                                                 zero, 0x01);
  const __m256 after = c0 + kLanes < width
                           ? _mm256_loadu_ps(row + c0 + 1)
                           : _mm256_blend_ps(_mm256_permutevar8x32_ps(at, _mm256_setr_epi32(1, 2, 3, 4, 5, 6, 7, 7)),
                                             zero, 0x80);
  return {before, at, after};
}

constexpr int64_t kStripRows = 16;  ///< output rows a strip: each column of a strip is walked down, then the next

/// One plane of a 3x3 depthwise conv of stride 1, padding 1 on every side, read where it lies
/// (rows of 8 or more). Down each column of 8 outputs (the last shifted back over the one before
/// where the row is not a multiple of 8), the three input rows around an output row are in
/// registers with their neighbouring columns, so each output vector is 9 FMAs (a chain per
/// kernel row) on 3 loads, where the padded copy took 9 loads and the copy itself. The columns
/// are walked in strips of 16 output rows: down whole columns of a 112x112 plane, its rows left
/// L1 before the next column read them (0.5-1.8x onnxruntime's time from one round to the next,
/// against 0.55-0.60 in strips). Z (not Y's own floats: the shifted vector stores lanes twice)
/// and the register activation are applied.
void run_same3x3(const Window& w, const float* x, const __m256* wv, float bias, const float* z, const Epilogue& e,
                 bool act, float* y) {
  const int64_t height = w.in[1], width = w.in[2];
  const Columns none{_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()};
  const __m256 b = _mm256_set1_ps(bias);
  for (int64_t r0 = 0; r0 < height; r0 += kStripRows)
    for (int64_t j = 0; j < width; j += kLanes) {
      const int64_t c0 = std::min(j, width - kLanes);
      Columns above = r0 > 0 ? columns(x + (r0 - 1) * width, c0, width) : none;
      Columns mid = columns(x + r0 * width, c0, width);
      for (int64_t r = r0; r < std::min(height, r0 + kStripRows); ++r) {
        const Columns below = r + 1 < height ? columns(x + (r + 1) * width, c0, width) : none;
        const Columns* rows[3] = {&above, &mid, &below};
        __m256 sums[3];
#pragma GCC unroll 3
        for (int k = 0; k < 3; ++k)
          sums[k] = _mm256_fmadd_ps(wv[3 * k + 2], rows[k]->after,
                                    _mm256_fmadd_ps(wv[3 * k + 1], rows[k]->at, _mm256_mul_ps(wv[3 * k], rows[k]->before)));
        __m256 out = _mm256_add_ps(_mm256_add_ps(b, sums[0]), _mm256_add_ps(sums[1], sums[2]));
        const int64_t at = r * width + c0;
        if (z != nullptr) out = _mm256_add_ps(out, _mm256_loadu_ps(z + at));
        _mm256_storeu_ps(y + at, act ? avx2::activate(out, e) : out);
        above = mid, mid = below;
      }
    }
}

PlaneRun plane_run(int64_t taps) {
  return taps == 9 ? run_plane<9> : taps == 25 ? run_plane<25> : run_plane<0>;
}

/// A 3x3 window of stride 1 and padding 1 on every side over rows of 8 or more: run_same3x3's.
bool same3x3(const Window& w) {
  for (int a = 1; a < 3; ++a)
    if (w.k[a] != 3 || w.stride[a] != 1 || w.dil[a] != 1 || w.pad[a] != 1 || w.pad_end[a] != 1) return false;
  return w.in[2] >= kLanes;
}

}  // namespace

bool conv_depthwise_f32(KernelContext& ctx, const ConvShape& s, const float* x, const float* wt, const float* bias,
                        const float* z, float* y, const Epilogue& e) {
  const Window& w = s.w;
  const bool fits = w.in[0] == 1 && w.k[0] == 1 && w.out[0] == 1 && (w.stride[2] == 1 || w.stride[2] == 2);
  if (!fits || w.k_size() > kMaxTaps) return false;
  auto input = [&](int64_t plane) { return x + ((plane / s.m) * s.c + (plane % s.m) / s.mg) * w.in_size(); };
  const bool act = in_register(e.act);
  const int64_t taps = w.k_size(), out = w.out_size();
  // Z in place (Y's own floats) is read vector by vector: no vector may write lanes another
  // reads, so no vector is stored whole over lanes a later one stores again.
  const int64_t bytes = s.n * s.m * out * int64_t(sizeof(float));
  const bool whole = z == nullptr || !overlap(z, bytes, y, bytes);
  if (whole && same3x3(w)) {
    OPFORGE_KERNEL_PATH("conv.depthwise.same3x3");
    ctx.parallel_for(s.n * s.m, std::max<int64_t>(1, 16384 / (9 * out)), [&](int64_t begin, int64_t end) {
      for (int64_t plane = begin; plane < end; ++plane) {
        const int64_t mm = plane % s.m;
        __m256 wv[9];
        for (int t = 0; t < 9; ++t) wv[t] = _mm256_set1_ps(wt[mm * 9 + t]);
        float* yp = y + plane * out;
        run_same3x3(w, input(plane), wv, bias != nullptr ? bias[mm] : 0.f, z != nullptr ? z + plane * out : nullptr, e,
                    act && e.act != Activation::None, yp);
        if (!act) activate_rows(e, yp, out, 1, 0, out);
      }
    });
    return true;
  }
  const bool split = w.stride[2] == 2;
  if (split)
    OPFORGE_KERNEL_PATH("conv.depthwise.split");
  else
    OPFORGE_KERNEL_PATH("conv.depthwise.padded");
  const Split sp = split ? split_for(w) : Split{padded_for(w), 0};
  const Padded& p = sp.p;
  Window along = w;  // the split copy's outputs read consecutive columns of a half
  along.stride[2] = 1;
  const std::vector<OutVector> vecs = out_vectors(along, p, whole);
  const PlaneRun run = plane_run(taps);
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
