// quant_linear.cpp: QuantizeLinear and DequantizeLinear (per tensor, per axis from opset 13,
// blocked from opset 21; float8, float4, 4- and 2-bit types) and DynamicQuantizeLinear, rounding
// as onnxruntime does.
#include "common/narrow_types.h"
#include "quantization/quant.h"

namespace {

using namespace opforge_quant;

/// Runs fn(begin, end, o, j) over the rows (o, j) of x seen as (outer, n, inner), in parallel;
/// each row is `inner` contiguous elements.
template <class F> void for_rows(const KernelContext& ctx, const ScaleLayout& s, F&& fn) {
  const int64_t rows = s.outer * s.n;
  ctx.parallel_for(rows, std::max<int64_t>(1, 16384 / std::max<int64_t>(s.inner, 1)), [&](int64_t b, int64_t e) {
    for (int64_t r = b; r < e; ++r) fn(r * s.inner, r / s.n, r % s.n);
  });
}

ScaleLayout layout_of(const KernelContext& ctx, bool has_axis, bool has_block) {
  const Tensor zp = ctx.has_input(2) ? ctx.input(2) : Tensor();
  return scale_layout(ctx.input(0), ctx.input(1), ctx.has_input(2) ? &zp : nullptr,
                      has_axis ? ctx.attr<int64_t>("axis") : 1, has_block ? ctx.attr<int64_t>("block_size") : 0);
}

template <class Q, class X>
void quantize_all(const KernelContext& ctx, const ScaleLayout& s, const X* x, Q* y) {
  const std::vector<float> sc = scales(ctx.input(1));
  const std::vector<int32_t> zp = zero_points(ctx, 2, int64_t(sc.size()));
  if constexpr (std::is_same_v<X, float>) {
    if (s.kind == ScaleLayout::PerTensor) {  // the common case: chunks over the threads
      const int64_t n = s.inner, chunk = 16384;
      ctx.parallel_for((n + chunk - 1) / chunk, 1, [&](int64_t b, int64_t e) {
        for (int64_t c = b; c < e; ++c)
          quantize_row(x + c * chunk, std::min(chunk, n - c * chunk), sc[0], zp[0], y + c * chunk);
      });
      return;
    }
  }
  for_rows(ctx, s, [&](int64_t at, int64_t o, int64_t j) {
    for (int64_t i = 0; i < s.inner; ++i) {
      const int64_t k = s.index(o, j, i);
      y[at + i] = quantize<Q>(as_float(x[at + i]), sc[size_t(k)], zp[size_t(k)]);
    }
  });
}

/// Calls f(type_tag<T>) for the narrow type QuantizeLinear writes and DequantizeLinear reads.
template <class F> bool dispatch_narrow(int32_t dtype, F&& f) {
  using namespace opforge;
  return dispatch<float8e4m3fn_t, float8e4m3fnuz_t, float8e5m2_t, float8e5m2fnuz_t, uint4_t, int4_t,
                  float4e2m1_t, uint2_t, int2_t>(dtype, static_cast<F&&>(f));
}

/// A narrow element's value as float.
template <class N> float narrow_value(N v) {
  if constexpr (opforge_cpu::narrow::is_minifloat_v<N>)
    return opforge_cpu::narrow::decode(opforge_cpu::narrow::format_of<N>::value, v.bits);
  else return float(opforge_cpu::narrow::decode_int<N>(v.bits));
}

/// The zero points as float (zeros when absent): narrow ones read as values.
template <class N> std::vector<float> narrow_zero_points(const KernelContext& ctx, int i, int64_t count) {
  std::vector<float> out(size_t(std::max<int64_t>(count, 1)), 0.f);
  if (!ctx.has_input(i)) return out;
  const N* p = ctx.input(i).data<N>();
  for (size_t k = 0; k < out.size(); ++k) out[k] = narrow_value(p[k]);
  return out;
}

/// x / scale + zero point as narrow N: integers round half to even and saturate to N's range;
/// float8 and float4 round to nearest even, saturating when `saturate` (float4 always does).
template <class N, class X> void quantize_narrow(const KernelContext& ctx, const ScaleLayout& s, const X* x, N* y) {
  namespace nw = opforge_cpu::narrow;
  const std::vector<float> sc = scales(ctx.input(1));
  const std::vector<float> zp = narrow_zero_points<N>(ctx, 2, int64_t(sc.size()));
  const bool saturate = !ctx.has_attr("saturate") || ctx.attr<int64_t>("saturate") != 0;
  for_rows(ctx, s, [&](int64_t at, int64_t o, int64_t j) {
    for (int64_t i = 0; i < s.inner; ++i) {
      const size_t k = size_t(s.index(o, j, i));
      const float v = as_float(x[at + i]) / sc[k];
      if constexpr (nw::is_minifloat_v<N>) {
        y[at + i] = N{nw::encode(nw::format_of<N>::value, double(v + zp[k]), saturate)};
      } else {
        const float lo = float(nw::decode_int<N>(std::is_same_v<N, opforge::int4_t> ? 0x8
                                                 : std::is_same_v<N, opforge::int2_t> ? 0x2 : 0)) - zp[k];
        const float hi = float(nw::decode_int<N>(std::is_same_v<N, opforge::int4_t> ? 0x7
                                                 : std::is_same_v<N, opforge::int2_t> ? 0x1
                                                 : std::is_same_v<N, opforge::uint4_t> ? 0xF : 0x3)) - zp[k];
        float q = v > lo ? v : lo;  // a NaN lands on the lowest value, as quantize() does
        q = q < hi ? q : hi;
        y[at + i] = N{nw::encode_int<N>(int64_t(std::nearbyint(q)) + int64_t(zp[k]))};
      }
    }
  });
}

/// The output's dtype: the zero point's, else attribute output_dtype (opset 21), else uint8.
int32_t quantized_dtype(const InferContext& ctx, bool has_output_dtype) {
  if (ctx.has_input(2)) return ctx.input(2).dtype();
  const int64_t wanted = has_output_dtype ? ctx.attr<int64_t>("output_dtype") : 0;
  return wanted != 0 ? int32_t(wanted) : int32_t(OPF_UINT8);
}

template <bool kAxis, bool kBlock> void quantize_infer(InferContext& ctx) {
  const Tensor x = ctx.input(0), scale = ctx.input(1);
  const Tensor zp = ctx.has_input(2) ? ctx.input(2) : Tensor();
  scale_layout(x, scale, ctx.has_input(2) ? &zp : nullptr, kAxis ? ctx.attr<int64_t>("axis") : 1,
               kBlock ? ctx.attr<int64_t>("block_size") : 0);
  const int32_t out = quantized_dtype(ctx, kBlock);
  if (kBlock && ctx.has_input(2) && ctx.attr<int64_t>("output_dtype") != 0)
    OPFORGE_CHECK(ctx.attr<int64_t>("output_dtype") == out, "attribute 'output_dtype' ",
                  ctx.attr<int64_t>("output_dtype"), " differs from y_zero_point's dtype ", opforge::dtype_name(out));
  OPFORGE_CHECK(dispatch_qint(out, [](auto) {}) || dispatch_narrow(out, [](auto) {}), "cannot quantize to ",
                opforge::dtype_name(out), ": supported are uint8, int8, uint16, int16, the float8 types, "
                "float4e2m1 and the 4- and 2-bit integers");
  // Precision (opset 23): the division runs in float, which is exact enough for float and for
  // y_scale's own type (the default); a narrower one would round differently, so it is refused.
  const int64_t precision = kBlock ? ctx.attr<int64_t>("precision") : 0;
  OPFORGE_CHECK(precision == 0 || precision == OPF_FLOAT32 || precision == scale.dtype(), "attribute 'precision' ",
                precision, " is not supported: use 0 (y_scale's dtype) or 1 (float)");
  OPFORGE_CHECK(x.dtype() == OPF_INT32 || scale.dtype() == x.dtype(), "y_scale's dtype ",
                opforge::dtype_name(scale.dtype()), " differs from x's ", opforge::dtype_name(x.dtype()));
  ctx.set_output(0, out, x.sizes());
}

template <bool kAxis, bool kBlock> void quantize_compute(KernelContext& ctx) {
  const ScaleLayout s = layout_of(ctx, kAxis, kBlock);
  const Tensor x = ctx.input(0), y = ctx.output(0);
  const auto for_x = [&](auto&& fn) {
    return opforge::dispatch<float, opforge::float16_t, opforge::bfloat16_t, int32_t>(x.dtype(), fn);
  };
  bool ok = false;  // set by the dispatch on x inside the one on y
  const bool qint = dispatch_qint(y.dtype(), [&](auto qt) {
    using Q = typename decltype(qt)::type;
    ok = for_x([&](auto xt) { quantize_all(ctx, s, x.data<typename decltype(xt)::type>(), y.data<Q>()); });
  });
  if (!qint) dispatch_narrow(y.dtype(), [&](auto qt) {
    using N = typename decltype(qt)::type;
    ok = for_x([&](auto xt) { quantize_narrow(ctx, s, x.data<typename decltype(xt)::type>(), y.data<N>()); });
  });
  OPFORGE_CHECK(ok, "unsupported dtypes: x ", opforge::dtype_name(x.dtype()), ", y ", opforge::dtype_name(y.dtype()));
}

template <bool kAxis, bool kBlock> void dequantize_infer(InferContext& ctx) {
  const Tensor x = ctx.input(0), scale = ctx.input(1);
  const Tensor zp = ctx.has_input(2) ? ctx.input(2) : Tensor();
  scale_layout(x, scale, ctx.has_input(2) ? &zp : nullptr, kAxis ? ctx.attr<int64_t>("axis") : 1,
               kBlock ? ctx.attr<int64_t>("block_size") : 0);
  if (ctx.has_input(2))
    OPFORGE_CHECK(zp.dtype() == x.dtype(), "x_zero_point's dtype ", opforge::dtype_name(zp.dtype()),
                  " differs from x's ", opforge::dtype_name(x.dtype()));
  const int64_t wanted = kBlock && ctx.has_attr("output_dtype") ? ctx.attr<int64_t>("output_dtype") : 0;
  OPFORGE_CHECK(wanted == 0 || wanted == scale.dtype(), "attribute 'output_dtype' ", wanted,
                " differs from x_scale's dtype ", opforge::dtype_name(scale.dtype()));
  ctx.set_output(0, scale.dtype(), x.sizes());
}

/// y = (x - zp) * scale over a whole 8-bit tensor with one scale, as onnxruntime computes it: a
/// flat loop the compiler vectorises (the general path indexes the scale per element).
template <class Q> void dequantize_flat(const KernelContext& ctx, const Q* x, int64_t n, int32_t zp, float scale,
                                        float* y) {
  ctx.parallel_for(n, 16384, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) y[i] = float(int32_t(x[i]) - zp) * scale;
  });
}

template <bool kAxis, bool kBlock> void dequantize_compute(KernelContext& ctx) {
  const ScaleLayout s = layout_of(ctx, kAxis, kBlock);
  const Tensor x = ctx.input(0), y = ctx.output(0);
  const std::vector<float> sc = scales(ctx.input(1));
  if (sc.size() == 1 && y.dtype() == OPF_FLOAT32 && (x.dtype() == OPF_UINT8 || x.dtype() == OPF_INT8)) {
    const int32_t zp = zero_points(ctx, 2, 1)[0];
    if (x.dtype() == OPF_UINT8)
      dequantize_flat(ctx, x.data<uint8_t>(), x.numel(), zp, sc[0], y.data<float>());
    else
      dequantize_flat(ctx, x.data<int8_t>(), x.numel(), zp, sc[0], y.data<float>());
    return;
  }
  if (dispatch_narrow(x.dtype(), [&](auto qt) {
        using N = typename decltype(qt)::type;
        const std::vector<float> zp = narrow_zero_points<N>(ctx, 2, int64_t(sc.size()));
        OPFORGE_CHECK(dispatch_scale(y.dtype(), [&](auto yt) {
          using Y = typename decltype(yt)::type;
          const N* xp = x.data<N>();
          Y* yp = y.data<Y>();
          for_rows(ctx, s, [&](int64_t at, int64_t o, int64_t j) {
            for (int64_t i = 0; i < s.inner; ++i) {
              const size_t k = size_t(s.index(o, j, i));
              yp[at + i] = from_float<Y>((narrow_value(xp[at + i]) - zp[k]) * sc[k]);
            }
          });
        }), "unsupported output dtype ", opforge::dtype_name(y.dtype()));
      }))
    return;
  const std::vector<int32_t> zp = zero_points(ctx, 2, int64_t(sc.size()));
  if (x.dtype() == OPF_INT32)
    for (int32_t z : zp) OPFORGE_CHECK(z == 0, "an int32 input takes no zero point but 0, got ", z);
  bool ok = opforge::dispatch<uint8_t, int8_t, uint16_t, int16_t, int32_t>(x.dtype(), [&](auto qt) {
    using Q = typename decltype(qt)::type;
    ok = dispatch_scale(y.dtype(), [&](auto yt) {
      using Y = typename decltype(yt)::type;
      const Q* xp = x.data<Q>();
      Y* yp = y.data<Y>();
      for_rows(ctx, s, [&](int64_t at, int64_t o, int64_t j) {
        for (int64_t i = 0; i < s.inner; ++i) {
          const int64_t k = s.index(o, j, i);
          yp[at + i] = from_float<Y>(float(int32_t(xp[at + i]) - zp[size_t(k)]) * sc[size_t(k)]);
        }
      });
    });
  });
  OPFORGE_CHECK(ok, "unsupported dtypes: x ", opforge::dtype_name(x.dtype()), ", y ", opforge::dtype_name(y.dtype()));
}

void dynamic_quantize_infer(InferContext& ctx) {
  const Tensor x = ctx.input(0);
  ctx.set_output(0, OPF_UINT8, x.sizes());
  ctx.set_output(1, OPF_FLOAT32, {});
  ctx.set_output(2, OPF_UINT8, {});
}

/// y, its scale and zero point from x's range (see dynamic_qparams).
void dynamic_quantize_compute(KernelContext& ctx) {
  const Tensor x = ctx.input(0);
  const float* xp = x.data<float>();
  const int64_t n = x.numel();
  float scale;
  int32_t zp;
  dynamic_qparams(xp, n, &scale, &zp);
  uint8_t* y = ctx.output(0).data<uint8_t>();
  ctx.parallel_for(n, 16384, [&](int64_t b, int64_t e) { quantize_row(xp + b, e - b, scale, zp, y + b); });
  *ctx.output(1).data<float>() = scale;
  *ctx.output(2).data<uint8_t>() = uint8_t(zp);
}

}  // namespace

#define Q_X_DTYPES {opforge::f32, opforge::f16, opforge::bf16, opforge::i32}
#define Q_F8_DTYPES {opforge::f8e4m3fn, opforge::f8e4m3fnuz, opforge::f8e5m2, opforge::f8e5m2fnuz}
/// The quantized types of opset 21: opset 23 adds float4e2m1, 25 the 2-bit integers.
#define Q_NARROW21_DTYPES                                                                          \
  {opforge::u8, opforge::i8, opforge::u16, opforge::i16, opforge::f8e4m3fn, opforge::f8e4m3fnuz,  \
   opforge::f8e5m2, opforge::f8e5m2fnuz, opforge::u4, opforge::i4}
#define DQ_NARROW21_DTYPES                                                                         \
  {opforge::u8, opforge::i8, opforge::u16, opforge::i16, opforge::i32, opforge::f8e4m3fn,         \
   opforge::f8e4m3fnuz, opforge::f8e5m2, opforge::f8e5m2fnuz, opforge::u4, opforge::i4}
// Opsets 10-19 are per-tensor (10), per-axis (13), then float8 with saturate (19); opset 21
// adds blocks and output_dtype, 23 precision.
OPFORGE_OP(QuantizeLinear)
    .since(10)
    .input("x", {opforge::f32, opforge::i32}).dtypes_since(19, {opforge::f16, opforge::bf16})
    .input("y_scale", {opforge::f32}).dtypes_since(19, {opforge::f16, opforge::bf16, opforge::i32})
    .optional_input("y_zero_point", {opforge::u8, opforge::i8}).dtypes_since(19, Q_F8_DTYPES)
    .output("y")
    .attr("axis", int64_t(1)).attr_versions(13)
    .attr("saturate", int64_t(1), "float8 outputs only").attr_versions(19)
    .infer(quantize_infer<true, false>)
    .compute(quantize_compute<true, false>);

OPFORGE_OP(QuantizeLinear)
    .since(21)
    .input("x", Q_X_DTYPES)
    .input("y_scale", Q_X_DTYPES)
    .optional_input("y_zero_point", Q_NARROW21_DTYPES)
    .dtypes_since(23, {opforge::f4e2m1})
    .dtypes_since(25, {opforge::u2, opforge::i2})
    .output("y")
    .attr("axis", int64_t(1))
    .attr("block_size", int64_t(0))
    .attr("output_dtype", int64_t(0))
    .attr("saturate", int64_t(1), "float8 outputs only")
    .attr("precision", int64_t(0), "the division's dtype: float, or y_scale's (0: y_scale's)")
    .attr_versions(23)
    .infer(quantize_infer<true, true>)
    .compute(quantize_compute<true, true>);
// Opsets 10-19 are per-tensor (10), per-axis (13), then float8 (19); opset 21 adds blocks and
// the narrow integers, 23 output_dtype and float4e2m1, 25 the 2-bit integers.
OPFORGE_OP(DequantizeLinear)
    .since(10)
    .input("x", {opforge::u8, opforge::i8, opforge::i32}).dtypes_since(19, Q_F8_DTYPES)
    .input("x_scale", {opforge::f32}).dtypes_since(19, {opforge::f16, opforge::bf16})
    .optional_input("x_zero_point", {opforge::u8, opforge::i8, opforge::i32}).dtypes_since(19, Q_F8_DTYPES)
    .output("y")
    .attr("axis", int64_t(1)).attr_versions(13)
    .infer(dequantize_infer<true, false>)
    .compute(dequantize_compute<true, false>);

OPFORGE_OP(DequantizeLinear)
    .since(21)
    .input("x", DQ_NARROW21_DTYPES)
    .dtypes_since(23, {opforge::f4e2m1})
    .dtypes_since(25, {opforge::u2, opforge::i2})
    .input("x_scale", OPFORGE_QSCALE_DTYPES)
    .optional_input("x_zero_point", DQ_NARROW21_DTYPES)
    .dtypes_since(23, {opforge::f4e2m1})
    .dtypes_since(25, {opforge::u2, opforge::i2})
    .output("y")
    .attr("axis", int64_t(1))
    .attr("block_size", int64_t(0))
    .attr("output_dtype", int64_t(0)).attr_versions(23)
    .infer(dequantize_infer<true, true>)
    .compute(dequantize_compute<true, true>);

OPFORGE_OP(DynamicQuantizeLinear)
    .since(11)
    .input("x", {opforge::f32})
    .output("y", {opforge::u8})
    .output("y_scale", {opforge::f32})
    .output("y_zero_point", {opforge::u8})
    .infer(dynamic_quantize_infer)
    .compute(dynamic_quantize_compute);
