// quant.h: what the quantized kernels share: the integer types, onnxruntime's rounding and
// saturation, and where each element finds its scale and zero point (per tensor, per axis, blocked).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>
#include <vector>

#include "common/common.h"

#if defined(__AVX2__)
#include <immintrin.h>
#endif

namespace opforge_quant {

using opforge::InferContext;
using opforge::KernelContext;
using opforge::Tensor;
using opforge_cpu::Shape;

/// The 8-bit types every quantized GEMM takes.
#define OPFORGE_Q8_DTYPES {opforge::u8, opforge::i8}
/// The integer types QuantizeLinear writes and DequantizeLinear reads (int32 is read only).
#define OPFORGE_QINT_DTYPES {opforge::u8, opforge::i8, opforge::u16, opforge::i16}
/// Scale types: QuantizeLinear's input and DequantizeLinear's output share them.
#define OPFORGE_QSCALE_DTYPES {opforge::f32, opforge::f16, opforge::bf16}

/// Calls f(type_tag<T>) for the quantized integer type of `dtype`; false when it is none.
template <class F> bool dispatch_qint(int32_t dtype, F&& f) {
  return opforge::dispatch<uint8_t, int8_t, uint16_t, int16_t>(dtype, static_cast<F&&>(f));
}

/// A float, half or bfloat16 element as float.
template <class T> inline float as_float(T v) {
  if constexpr (std::is_same_v<T, float>) return v;
  else if constexpr (std::is_arithmetic_v<T>) return float(v);
  else return opforge::to_float(v);
}
/// A float stored as T (float, half or bfloat16).
template <class T> inline T from_float(float v) {
  if constexpr (std::is_same_v<T, float>) return v;
  else return opforge::from_float(v, T{});
}

/// Calls f(type_tag<T>) for float, half or bfloat16.
template <class F> bool dispatch_scale(int32_t dtype, F&& f) {
  return opforge::dispatch<float, opforge::float16_t, opforge::bfloat16_t>(dtype, static_cast<F&&>(f));
}

/// v / scale rounded half to even, plus zp, saturated to Q: onnxruntime's MlasQuantizeLinear,
/// which clamps before rounding (so NaN lands on Q's lowest value, as MAXPS gives it).
template <class Q> inline Q quantize(float v, float scale, int32_t zp) {
  const float lo = float(int32_t(std::numeric_limits<Q>::min()) - zp);
  const float hi = float(int32_t(std::numeric_limits<Q>::max()) - zp);
  float q = v / scale;
  q = q > lo ? q : lo;  // a NaN fails the comparison, as in MAXPS
  q = q < hi ? q : hi;
  return Q(int32_t(std::nearbyint(q)) + zp);
}

/// An int32 accumulator scaled by `scale`, rounded half to even, plus zp, saturated to Q:
/// onnxruntime's MlasRequantizeOutput.
template <class Q> inline Q requantize(int32_t acc, float scale, int32_t zp) {
  return quantize<Q>(float(acc) * scale, 1.0f, zp);
}

/// The uint8 scale and zero point DynamicQuantizeLinear gives x: its range widened to hold 0, as
/// onnxruntime computes them (a range of one value gets scale 1).
inline void dynamic_qparams(const float* x, int64_t n, float* scale, int32_t* zp) {
  float lo = 0.f, hi = 0.f;
  int64_t i = 0;
#if defined(__AVX512F__)
  // Four chains of 16 lanes (a single scalar chain is latency-bound); min_ps(x, lo) keeps lo for
  // a NaN x, as std::min(lo, x) does, so the result is the scalar loop's.
  __m512 vlo[4], vhi[4];
  for (int j = 0; j < 4; ++j) vlo[j] = vhi[j] = _mm512_setzero_ps();
  for (; i + 64 <= n; i += 64)
    for (int j = 0; j < 4; ++j) {
      const __m512 v = _mm512_loadu_ps(x + i + 16 * j);
      vlo[j] = _mm512_min_ps(v, vlo[j]);
      vhi[j] = _mm512_max_ps(v, vhi[j]);
    }
  lo = _mm512_reduce_min_ps(_mm512_min_ps(_mm512_min_ps(vlo[0], vlo[1]), _mm512_min_ps(vlo[2], vlo[3])));
  hi = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_max_ps(vhi[0], vhi[1]), _mm512_max_ps(vhi[2], vhi[3])));
#elif defined(__AVX2__)
  // the same on four chains of 8 lanes
  __m256 vlo[4], vhi[4];
  for (int j = 0; j < 4; ++j) vlo[j] = vhi[j] = _mm256_setzero_ps();
  for (; i + 32 <= n; i += 32)
    for (int j = 0; j < 4; ++j) {
      const __m256 v = _mm256_loadu_ps(x + i + 8 * j);
      vlo[j] = _mm256_min_ps(v, vlo[j]);
      vhi[j] = _mm256_max_ps(v, vhi[j]);
    }
  alignas(32) float lanes[2][8];
  _mm256_store_ps(lanes[0], _mm256_min_ps(_mm256_min_ps(vlo[0], vlo[1]), _mm256_min_ps(vlo[2], vlo[3])));
  _mm256_store_ps(lanes[1], _mm256_max_ps(_mm256_max_ps(vhi[0], vhi[1]), _mm256_max_ps(vhi[2], vhi[3])));
  for (int j = 0; j < 8; ++j) lo = std::min(lo, lanes[0][j]), hi = std::max(hi, lanes[1][j]);
#endif
  for (; i < n; ++i) lo = std::min(lo, x[i]), hi = std::max(hi, x[i]);
  *scale = hi == lo ? 1.0f : (hi - lo) / 255.0f;
  *zp = int32_t(std::nearbyint(std::max(0.0f, std::min(255.0f, 0.0f - lo / *scale))));
}

#if defined(__AVX512F__)
/// requantize() on 16 lanes: (acc + add) * scale clamped to Q's range less zp, rounded half to even
/// by cvtps2dq (as nearbyint), plus zp, as 16 saturated bytes of Q.
template <class Q> struct Requantize16 {
  __m512 lo, hi;
  __m512i zp;
  explicit Requantize16(int32_t z)
      : lo(_mm512_set1_ps(float(int32_t(std::numeric_limits<Q>::min()) - z))),
        hi(_mm512_set1_ps(float(int32_t(std::numeric_limits<Q>::max()) - z))), zp(_mm512_set1_epi32(z)) {}
  __m128i operator()(__m512i acc, __m512i add, __m512 scale) const {
    const __m512 f = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_add_epi32(acc, add)), scale);
    const __m512i q = _mm512_add_epi32(_mm512_cvtps_epi32(_mm512_min_ps(_mm512_max_ps(f, lo), hi)), zp);
    return std::is_signed_v<Q> ? _mm512_cvtsepi32_epi8(q) : _mm512_cvtusepi32_epi8(q);
  }
};
#endif

#if defined(__AVX2__) && !defined(__AVX512F__)
/// Eight int32 lanes already clamped to Q's range, as 8 bytes of Q (each lane's low byte).
inline void store_low_bytes(__m256i q, void* out) {
  const __m256i low = _mm256_shuffle_epi8(q, _mm256_setr_epi8(0, 4, 8, 12, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1,
                                                              -1, 0, 4, 8, 12, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1,
                                                              -1, -1));
  const __m256i both = _mm256_permutevar8x32_epi32(low, _mm256_setr_epi32(0, 4, 0, 0, 0, 0, 0, 0));
  _mm_storel_epi64(reinterpret_cast<__m128i*>(out), _mm256_castsi256_si128(both));
}

/// Q's range less zp as floats (what a value is clamped to before rounding), and zp.
template <class Q> struct Clamp8 {
  __m256 lo, hi;
  __m256i zp;
  explicit Clamp8(int32_t z)
      : lo(_mm256_set1_ps(float(int32_t(std::numeric_limits<Q>::min()) - z))),
        hi(_mm256_set1_ps(float(int32_t(std::numeric_limits<Q>::max()) - z))), zp(_mm256_set1_epi32(z)) {}
  /// f clamped (max(f, lo) with f first: a NaN gives lo, as quantize() does), rounded half to even
  /// by cvtps2dq, plus zp, stored as 8 bytes of Q.
  void store(__m256 f, Q* out) const {
    store_low_bytes(_mm256_add_epi32(_mm256_cvtps_epi32(_mm256_min_ps(_mm256_max_ps(f, lo), hi)), zp), out);
  }
};
#endif

/// out[i] = requantize(acc[i] + add, scale, zp) for a row of n: 16 lanes at a time with AVX-512,
/// the tail through a masked load and store (a conv's rows are often a few lanes past a multiple
/// of 16; one by one they cost more than the rest); 8 at a time with AVX2, the tail one by one.
template <class Q>
inline void requantize_row(const int32_t* acc, int64_t n, int32_t add, float scale, int32_t zp, Q* out) {
  int64_t i = 0;
#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__)
  if constexpr (sizeof(Q) == 1) {
    const Requantize16<Q> requantize16(zp);
    const __m512 vs = _mm512_set1_ps(scale);
    const __m512i vadd = _mm512_set1_epi32(add);
    for (; i + 16 <= n; i += 16)
      _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i), requantize16(_mm512_loadu_si512(acc + i), vadd, vs));
    if (i < n) {
      const __mmask16 tail = __mmask16((1u << (n - i)) - 1);
      _mm_mask_storeu_epi8(out + i, tail, requantize16(_mm512_maskz_loadu_epi32(tail, acc + i), vadd, vs));
    }
    return;
  }
#elif defined(__AVX2__)
  if constexpr (sizeof(Q) == 1) {
    const Clamp8<Q> clamp(zp);
    const __m256 vs = _mm256_set1_ps(scale);
    const __m256i vadd = _mm256_set1_epi32(add);
    for (; i + 8 <= n; i += 8) {
      const __m256i sum = _mm256_add_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(acc + i)), vadd);
      clamp.store(_mm256_mul_ps(_mm256_cvtepi32_ps(sum), vs), out + i);
    }
  }
#endif
  for (; i < n; ++i) out[i] = requantize<Q>(int32_t(uint32_t(acc[i]) + uint32_t(add)), scale, zp);
}

/// to[i] = table[from[i]] for n bytes (a 256-entry table of 8-bit values indexed by their bits):
/// 64 at a time with AVX-512 VBMI (two 128-entry vpermi2b lookups, picked by each index's top
/// bit), the tail one by one.
inline void lookup_bytes(const uint8_t* table, const uint8_t* from, uint8_t* to, int64_t n) {
  int64_t i = 0;
#if defined(__AVX512VBMI__) && defined(__AVX512BW__)
  const __m512i t0 = _mm512_loadu_si512(table), t1 = _mm512_loadu_si512(table + 64);
  const __m512i t2 = _mm512_loadu_si512(table + 128), t3 = _mm512_loadu_si512(table + 192);
  for (; i + 64 <= n; i += 64) {
    const __m512i idx = _mm512_loadu_si512(from + i);
    const __m512i low = _mm512_permutex2var_epi8(t0, idx, t1), high = _mm512_permutex2var_epi8(t2, idx, t3);
    _mm512_storeu_si512(to + i, _mm512_mask_blend_epi8(_mm512_movepi8_mask(idx), low, high));
  }
#endif
  for (; i < n; ++i) to[i] = table[from[i]];
}

/// out[i] = quantize(x[i], scale, zp) for a row of n floats: 16 lanes at a time with AVX-512, 8
/// with AVX2 (a division, clamping and cvtps2dq, as MLAS's MlasQuantizeLinear), the tail one by
/// one.
template <class Q> inline void quantize_row(const float* x, int64_t n, float scale, int32_t zp, Q* out) {
  int64_t i = 0;
#if defined(__AVX512F__)
  if constexpr (sizeof(Q) == 1) {
    const __m512 vs = _mm512_set1_ps(scale);
    const __m512 lo = _mm512_set1_ps(float(int32_t(std::numeric_limits<Q>::min()) - zp));
    const __m512 hi = _mm512_set1_ps(float(int32_t(std::numeric_limits<Q>::max()) - zp));
    const __m512i vzp = _mm512_set1_epi32(zp);
    for (; i + 16 <= n; i += 16) {
      // max(v, lo) with v first gives lo for a NaN v, as quantize() does
      const __m512 f = _mm512_min_ps(_mm512_max_ps(_mm512_div_ps(_mm512_loadu_ps(x + i), vs), lo), hi);
      const __m512i q = _mm512_add_epi32(_mm512_cvtps_epi32(f), vzp);
      const __m128i bytes = std::is_signed_v<Q> ? _mm512_cvtsepi32_epi8(q) : _mm512_cvtusepi32_epi8(q);
      _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i), bytes);
    }
  }
#elif defined(__AVX2__)
  if constexpr (sizeof(Q) == 1) {
    const Clamp8<Q> clamp(zp);
    const __m256 vs = _mm256_set1_ps(scale);
    for (; i + 8 <= n; i += 8) clamp.store(_mm256_div_ps(_mm256_loadu_ps(x + i), vs), out + i);
  }
#endif
  for (; i < n; ++i) out[i] = quantize<Q>(x[i], scale, zp);
}

/// How a scale (and its zero point) maps onto the elements: one value, one per index along
/// `axis`, or one per block of `block` indices along it (the scale has x's rank).
struct ScaleLayout {
  enum Kind { PerTensor, PerAxis, Blocked } kind = PerTensor;
  int64_t outer = 1, n = 1, inner = 1, block = 0;

  /// The scale index of element (o, j, i) of x seen as (outer, n, inner).
  int64_t index(int64_t o, int64_t j, int64_t i) const {
    switch (kind) {
      case PerTensor: return 0;
      case PerAxis: return j;
      default: return (o * ((n + block - 1) / block) + j / block) * inner + i;
    }
  }
};

/// Checks the scale (and zero point, when given) against x and works out their layout.
/// `axis` and `block` are the op's attributes (block 0: not blocked).
inline ScaleLayout scale_layout(const Tensor& x, const Tensor& scale, const Tensor* zp, int64_t axis, int64_t block) {
  ScaleLayout s;
  if (zp != nullptr && scale.numel() == 1) {  // one value each: a scalar and a 1-element tensor mix freely
    OPFORGE_CHECK(zp->numel() == 1 || zp->numel() < 0, "the zero point holds ", zp->numel(),
                  " values but the scale one");
  } else if (zp != nullptr) {
    OPFORGE_CHECK(zp->ndim() == scale.ndim(), "the zero point's rank ", zp->ndim(), " differs from the scale's ",
                  scale.ndim());
    for (int d = 0; d < zp->ndim(); ++d)
      OPFORGE_CHECK(zp->size(d) == scale.size(d) || zp->size(d) < 0 || scale.size(d) < 0,
                    "the zero point's shape differs from the scale's at dim ", d);
  }
  const bool one = scale.ndim() == 0 || (scale.ndim() == 1 && scale.size(0) == 1 && block == 0);
  if (one) {
    for (int d = 0; d < x.ndim(); ++d) s.inner *= x.size(d);  // one row of every element
    return s;
  }
  OPFORGE_CHECK(x.ndim() > 0, "a scalar input takes a single scale, got a scale of rank ", scale.ndim());
  const int64_t a = opforge_cpu::normalize_axis(axis, x.ndim());
  for (int d = 0; d < x.ndim(); ++d) (d < a ? s.outer : d > a ? s.inner : s.n) *= x.size(d);
  if (block == 0) {
    OPFORGE_CHECK(scale.ndim() == 1, "the scale must be a scalar or 1-D (one per index along axis ", a,
                  "), got rank ", scale.ndim());
    OPFORGE_CHECK(scale.size(0) == x.size(int(a)) || scale.size(0) < 0 || x.size(int(a)) < 0,
                  "the scale has ", scale.size(0), " values but x has ", x.size(int(a)), " along axis ", a);
    s.kind = ScaleLayout::PerAxis;
    return s;
  }
  OPFORGE_CHECK(block > 0, "attribute 'block_size' must be positive, got ", block);
  OPFORGE_CHECK(scale.ndim() == x.ndim(), "blocked quantization needs a scale of x's rank ", x.ndim(),
                ", got rank ", scale.ndim());
  for (int d = 0; d < x.ndim(); ++d) {
    const int64_t want = d == a ? (x.size(d) + block - 1) / block : x.size(d);
    OPFORGE_CHECK(scale.size(d) == want || scale.size(d) < 0 || x.size(d) < 0, "the scale's dim ", d, " is ",
                  scale.size(d), "; blocks of ", block, " along axis ", a, " need ", want);
  }
  s.kind = ScaleLayout::Blocked;
  s.block = block;
  return s;
}

/// The zero points as int32, one per scale value (zeros when absent).
inline std::vector<int32_t> zero_points(const KernelContext& ctx, int i, int64_t count) {
  std::vector<int32_t> out(size_t(std::max<int64_t>(count, 1)), 0);
  if (!ctx.has_input(i)) return out;
  const Tensor z = ctx.input(i);
  const bool ok = opforge::dispatch<uint8_t, int8_t, uint16_t, int16_t, int32_t>(z.dtype(), [&](auto tag) {
    using Z = typename decltype(tag)::type;
    const Z* p = z.data<Z>();
    for (size_t k = 0; k < out.size(); ++k) out[k] = int32_t(p[k]);
  });
  OPFORGE_CHECK(ok, "unsupported zero point dtype ", opforge::dtype_name(z.dtype()));
  return out;
}

/// The scales as float, one per value.
inline std::vector<float> scales(const Tensor& s) {
  std::vector<float> out(size_t(s.numel()));
  const bool ok = dispatch_scale(s.dtype(), [&](auto tag) {
    using S = typename decltype(tag)::type;
    const S* p = s.data<S>();
    for (size_t k = 0; k < out.size(); ++k) out[k] = as_float(p[k]);
  });
  OPFORGE_CHECK(ok, "unsupported scale dtype ", opforge::dtype_name(s.dtype()));
  return out;
}

/// Checks that input `i` holds one value (a scalar or a 1-element 1-D tensor), naming it.
template <class Ctx> void expect_single(const Ctx& ctx, int i, const char* name) {
  if (!ctx.has_input(i)) return;
  const Tensor t = ctx.input(i);
  OPFORGE_CHECK(t.ndim() == 0 || (t.ndim() == 1 && (t.size(0) == 1 || t.size(0) < 0)), "input ", name,
                " must be a scalar, got rank ", t.ndim(), t.ndim() == 1 ? opforge::str(" of ", t.size(0)) : "");
}

}  // namespace opforge_quant
