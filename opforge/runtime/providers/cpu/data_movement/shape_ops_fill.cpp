// shape_ops_fill.cpp: ops that make a tensor from a shape or a few scalars (ConstantOfShape, Range, EyeLike).
#include <algorithm>
#include <cmath>

#include "data_movement/data_movement.h"

namespace opforge_cpu {
namespace {

using namespace data_movement;

/// ConstantOfShape's dtype and value bits: the 'value' attribute, or float32 zero.
template <class Ctx> int32_t fill_value(const Ctx& ctx, uint64_t& bits) {
  bits = 0;
  if (!ctx.has_attr("value")) return OPF_FLOAT32;
  const Tensor v = ctx.template attr<Tensor>("value");
  OPFORGE_CHECK(v.numel() == 1, "attribute 'value' must hold one element, got ", v.numel());
  std::memcpy(&bits, v.raw(), size_t(elem_size(v)));
  return v.dtype();
}

void constant_of_shape_infer(InferContext& ctx) {
  uint64_t bits;
  const int32_t dtype = fill_value(ctx, bits);
  const Shape shape = input_ints(ctx, 0, "ConstantOfShape", "input");
  for (int64_t d : shape) OPFORGE_CHECK(d >= 0, "input 'input' has a negative dim ", d);
  ctx.set_output(0, dtype, shape);
}

void constant_of_shape_compute(KernelContext& ctx) {
  uint64_t bits;
  const int32_t dtype = fill_value(ctx, bits);
  const Tensor y = ctx.output(0);
  const int64_t n = y.numel(), es = opforge::dtype_size(dtype);
  ctx.parallel_for(n, 65536, [&](int64_t b, int64_t e) {
    fill_bits(static_cast<char*>(y.raw()) + b * es, e - b, es, bits);
  });
}

/// A Range scalar widened to the type the arithmetic runs in (float16/bfloat16 to float or double).
template <class M, class T> M widen(T v) { return M(v); }
template <class M> M widen(opforge::float16_t v) { return M(opforge::to_float(v)); }
template <class M> M widen(opforge::bfloat16_t v) { return M(opforge::to_float(v)); }
template <class T, class M> T narrow(M v) { return T(v); }
template <> opforge::float16_t narrow(float v) { return opforge::from_float(v, opforge::float16_t{}); }
template <> opforge::float16_t narrow(double v) { return opforge::from_float(float(v), opforge::float16_t{}); }
template <> opforge::bfloat16_t narrow(float v) { return opforge::from_float(v, opforge::bfloat16_t{}); }
template <> opforge::bfloat16_t narrow(double v) { return opforge::from_float(float(v), opforge::bfloat16_t{}); }

/// Range's three scalars (of type T) as M; throws unless each holds exactly one value. An absent
/// delta (com.microsoft's Range leaves it optional) is 1.
template <class T, class M, class Ctx> void range_scalars(const Ctx& ctx, M& start, M& limit, M& delta) {
  const char* names[] = {"start", "limit", "delta"};
  M* dst[] = {&start, &limit, &delta};
  delta = M(1);
  for (int i = 0; i < 3; ++i) {
    if (i == 2 && !ctx.has_input(2)) break;
    const Tensor t = ctx.input(i);
    if (!t.has_data()) throw needs_value("Range", names[i]);
    OPFORGE_CHECK(t.numel() == 1, "input '", names[i], "' must be a scalar, got ", t.numel(), " elements");
    OPFORGE_CHECK(t.dtype() == ctx.input(0).dtype(), "input '", names[i], "' has another dtype than 'start'");
    *dst[i] = widen<M>(*t.template data<T>());
  }
  OPFORGE_CHECK(delta != M(0), "input 'delta' must not be 0");
}

/// Elements Range produces, computed in double as onnxruntime does; throws when that count is
/// not finite (a NaN or infinite input) or does not fit in int64.
template <class M> int64_t range_count(M start, M limit, M delta) {
  const double n = std::ceil((double(limit) - double(start)) / double(delta));
  OPFORGE_CHECK(std::isfinite(n), "the element count ceil((limit - start) / delta) is not finite");
  OPFORGE_CHECK(n < 0x1p63, "the element count ", n, " does not fit in int64");
  return n > 0 ? int64_t(n) : 0;
}

/// Calls f(type_tag<T>, type_tag<M>): T the element type, M the type Range computes in
/// (T itself; float or double for float16/bfloat16, following 'stash_type').
template <class Ctx, class F> void range_dispatch(const Ctx& ctx, F&& f) {
  using opforge::type_tag;
  const int32_t dtype = ctx.input(0).dtype();
  if (dtype == OPF_FLOAT16 || dtype == OPF_BFLOAT16) {
    const int64_t stash = ctx.has_attr("stash_type") ? ctx.template attr<int64_t>("stash_type") : 1;
    OPFORGE_CHECK(stash == OPF_FLOAT32 || stash == OPF_FLOAT64, "attribute 'stash_type' must be 1 or 11, got ",
                  stash);
    opforge::dispatch<opforge::float16_t, opforge::bfloat16_t>(dtype, [&](auto tag) {
      if (stash == OPF_FLOAT64) f(tag, type_tag<double>{});
      else f(tag, type_tag<float>{});
    });
    return;
  }
  opforge::dispatch<float, double, int16_t, int32_t, int64_t>(dtype, [&](auto tag) { f(tag, tag); });
}

void range_infer(InferContext& ctx) {
  int64_t n = 0;
  range_dispatch(ctx, [&](auto tag, auto math) {
    typename decltype(math)::type start, limit, delta;
    range_scalars<typename decltype(tag)::type>(ctx, start, limit, delta);
    n = range_count(start, limit, delta);
  });
  ctx.set_output(0, ctx.input(0).dtype(), {n});
}

void range_compute(KernelContext& ctx) {
  range_dispatch(ctx, [&](auto tag, auto math) {
    using T = typename decltype(tag)::type;
    using M = typename decltype(math)::type;
    M start, limit, delta;
    range_scalars<T>(ctx, start, limit, delta);
    const int64_t n = range_count(start, limit, delta);
    T* out = ctx.output(0).data<T>();
    for (int64_t i = 0; i < n; ++i) out[i] = narrow<T>(M(start + M(i) * delta));
  });
}

/// EyeLike's output dtype: the 'dtype' attribute, else the input's.
template <class Ctx> int32_t eye_dtype(const Ctx& ctx) {
  const int32_t dtype = ctx.has_attr("dtype") ? int32_t(ctx.template attr<int64_t>("dtype")) : ctx.input(0).dtype();
  OPFORGE_CHECK(opforge::dtype_size(dtype) > 0, "attribute 'dtype' ", dtype, " is not a supported type");
  return dtype;
}

void eye_like_infer(InferContext& ctx) {
  OPFORGE_CHECK(ctx.input(0).ndim() == 2, "EyeLike needs a 2-D input, got rank ", ctx.input(0).ndim());
  ctx.set_output(0, eye_dtype(ctx), ctx.input(0).sizes());
}

void eye_like_compute(KernelContext& ctx) {
  const Tensor y = ctx.output(0);
  const int64_t rows = y.size(0), cols = y.size(1), k = ctx.attr<int64_t>("k"), es = elem_size(y);
  char* out = static_cast<char*>(y.raw());
  if (y.numel() == 0) return;
  std::memset(out, 0, size_t(y.nbytes()));
  const uint64_t one = scalar_bits(y.dtype(), 1.0);
  for (int64_t i = std::max<int64_t>(0, -k); i < rows && i + k < cols; ++i)
    fill_bits(out + (i * cols + i + k) * es, 1, es, one);
}

}  // namespace
}  // namespace opforge_cpu

using namespace opforge_cpu;

OPFORGE_OP(ConstantOfShape)
    .since(9)
    .input("input", {opforge::i64})
    .output("output")
    .optional_attr("value", opforge::AttrType::Tensor)
    .infer(constant_of_shape_infer)
    .compute(constant_of_shape_compute);

#define RANGE_DTYPES {opforge::f32, opforge::f64, opforge::i16, opforge::i32, opforge::i64}
// Opset 27 adds float16 and bfloat16, and stash_type (the precision they count in).
OPFORGE_OP(Range)
    .since(11)
    .input("start", RANGE_DTYPES).dtypes_since(27, {opforge::f16, opforge::bf16})
    .input("limit", RANGE_DTYPES).dtypes_since(27, {opforge::f16, opforge::bf16})
    .input("delta", RANGE_DTYPES).dtypes_since(27, {opforge::f16, opforge::bf16})
    .output("output")
    .attr("stash_type", int64_t(1)).attr_versions(27)
    .infer(range_infer)
    .compute(range_compute);

// onnxruntime's contrib Range, which exporters wrote before opset 11.
OPFORGE_OP(Range)
    .domain("com.microsoft")
    .since(1)
    .input("start", {opforge::f32, opforge::f64, opforge::i16, opforge::i32, opforge::i64})
    .input("limit", {opforge::f32, opforge::f64, opforge::i16, opforge::i32, opforge::i64})
    .optional_input("delta", {opforge::f32, opforge::f64, opforge::i16, opforge::i32, opforge::i64})
    .output("output")
    .infer(range_infer)
    .compute(range_compute);

OPFORGE_OP(EyeLike)
    .since(9)
    .input("input", OPFORGE_ALL_DTYPES)
    .output("output")
    .optional_attr("dtype", opforge::AttrType::Int)
    .attr("k", int64_t(0))
    .infer(eye_like_infer)
    .compute(eye_like_compute);
