// elementwise_unary.cpp: one-input elementwise kernels: arithmetic, rounding, math, NaN/inf tests.
#include <cmath>
#include <limits>
#include <type_traits>

#include "elementwise/elementwise.h"
#include "elementwise/elementwise_math.h"
#include "common/narrow_types.h"

namespace opforge_cpu::ew {
namespace {

/// Output 0 = Op::apply(input 0), for the element types Ts, and for float16 and bfloat16
/// computed in float (rounded once per result).
template <class Op, int64_t Grain, class... Ts> void map_same(KernelContext& ctx) {
  const int32_t dt = ctx.input(0).dtype();
  if (opforge::dispatch<opforge::float16_t, opforge::bfloat16_t>(dt, [&](auto tag) {
        using H = typename decltype(tag)::type;
        unary_map<H, H>(ctx, [](H v) {
          return opforge::from_float(float(Op::apply(opforge::to_float(v))), H{});
        }, Grain);
      }))
    return;
  require_dispatched(opforge::dispatch<Ts...>(dt, [&](auto tag) {
    using T = typename decltype(tag)::type;
    unary_map<T, T>(ctx, [](T v) { return T(Op::apply(v)); }, Grain);
  }), dt);
}

/// Defines a struct NAME whose apply(v) returns EXPR, for any element type T.
#define EW_UNARY_FN(NAME, EXPR) \
  struct NAME {                 \
    template <class T> static T apply(T v) { return EXPR; } \
  }

template <class T> T abs_of(T v) {
  if constexpr (std::is_floating_point_v<T>) return std::fabs(v);
  else if constexpr (std::is_unsigned_v<T>) return v;
  else return v < 0 ? T(-v) : v;
}

/// -1, 0 or 1; NaN stays NaN.
template <class T> T sign_of(T v) {
  const T s = v > T(0) ? T(1) : v < T(0) ? T(-1) : T(0);
  if constexpr (std::is_floating_point_v<T>) return vmath::select(v != v, v, s);
  else return s;
}

EW_UNARY_FN(NegFn, T(-v));
EW_UNARY_FN(AbsFn, abs_of(v));
EW_UNARY_FN(SignFn, sign_of(v));
EW_UNARY_FN(ExpFn, vmath::exp(v));
EW_UNARY_FN(LogFn, vmath::log(v));
EW_UNARY_FN(SqrtFn, std::sqrt(v));
EW_UNARY_FN(ReciprocalFn, T(1) / v);
EW_UNARY_FN(FloorFn, std::floor(v));
EW_UNARY_FN(CeilFn, std::ceil(v));
EW_UNARY_FN(RoundFn, std::nearbyint(v));  // the default rounding mode: half to even
EW_UNARY_FN(ErfFn, vmath::erf(v));
EW_UNARY_FN(SinFn, std::sin(v));
EW_UNARY_FN(CosFn, std::cos(v));
EW_UNARY_FN(TanFn, std::tan(v));
EW_UNARY_FN(AsinFn, std::asin(v));
EW_UNARY_FN(AcosFn, std::acos(v));
EW_UNARY_FN(AtanFn, std::atan(v));
EW_UNARY_FN(SinhFn, std::sinh(v));
EW_UNARY_FN(CoshFn, std::cosh(v));
EW_UNARY_FN(AsinhFn, std::asinh(v));
EW_UNARY_FN(AcoshFn, std::acosh(v));
EW_UNARY_FN(AtanhFn, std::atanh(v));

/// The float types IsNaN and IsInf test: halves and float8 are read as float.
#define EW_TESTED_FLOATS                                                                       \
  float, double, opforge::float16_t, opforge::bfloat16_t, opforge::float8e4m3fn_t,            \
      opforge::float8e4m3fnuz_t, opforge::float8e5m2_t, opforge::float8e5m2fnuz_t
#define EW_TESTED_FLOAT_DTYPES                                                                 \
  {opforge::f32, opforge::f64, opforge::f16, opforge::bf16, opforge::f8e4m3fn,                \
   opforge::f8e4m3fnuz, opforge::f8e5m2, opforge::f8e5m2fnuz}

template <class T> auto float_value(T v) {
  if constexpr (std::is_floating_point_v<T>) return v;
  else if constexpr (narrow::is_minifloat_v<T>) return narrow::decode(narrow::format_of<T>::value, v.bits);
  else return opforge::to_float(v);
}

void isnan_compute(KernelContext& ctx) {
  const int32_t dt = ctx.input(0).dtype();
  require_dispatched(opforge::dispatch<EW_TESTED_FLOATS>(dt, [&](auto tag) {
    using T = typename decltype(tag)::type;
    unary_map<T, bool>(ctx, [](T v) { return std::isnan(float_value(v)); });
  }), dt);
}

void isinf_compute(KernelContext& ctx) {
  const bool neg = ctx.attr<bool>("detect_negative"), pos = ctx.attr<bool>("detect_positive");
  const int32_t dt = ctx.input(0).dtype();
  require_dispatched(opforge::dispatch<EW_TESTED_FLOATS>(dt, [&](auto tag) {
    using T = typename decltype(tag)::type;
    unary_map<T, bool>(ctx, [=](T v) {
      const auto f = float_value(v);
      return std::isinf(f) && (f > 0 ? pos : neg);
    });
  }), dt);
}

void infer_bool_like_input0(InferContext& ctx) {
  ctx.set_output(0, opforge::boolean, ctx.input(0).sizes());
}

void identity_compute(KernelContext& ctx) {
  parallel_copy(ctx, ctx.input(0).raw(), ctx.output(0).raw(), ctx.input(0).nbytes());
}

}  // namespace
}  // namespace opforge_cpu::ew

using opforge_cpu::ew::kCheapGrain;
using opforge_cpu::ew::kCostlyGrain;
using opforge_cpu::ew::map_same;

/// Registers a same-dtype unary op NAME(IN) -> OUT computed by FN over the element types `...`.
#define EW_UNARY_OP(NAME, SINCE, IN, OUT, DTYPES, FN, GRAIN, ...)                    \
  OPFORGE_OP(NAME).since(SINCE).input(IN, DTYPES).output(OUT).inplace(0, 0)          \
      .infer(opforge::same_as_input0)                                                \
      .compute(map_same<opforge_cpu::ew::FN, GRAIN, __VA_ARGS__>)
#define EW_FLOATS float, double
#define EW_SIGNED float, double, int32_t, int64_t, int8_t, int16_t
#define EW_SIGNED_DTYPES                                                                  \
  {opforge::f32, opforge::f64, opforge::i32, opforge::i64, opforge::i8, opforge::i16,     \
   opforge::f16, opforge::bf16}

EW_UNARY_OP(Neg, 6, "X", "Y", EW_SIGNED_DTYPES, NegFn, kCheapGrain, EW_SIGNED);
EW_UNARY_OP(Abs, 6, "X", "Y", OPFORGE_EW_ALLNUM_HALF_DTYPES, AbsFn, kCheapGrain, OPFORGE_EW_REAL_TYPES);
EW_UNARY_OP(Sign, 9, "input", "output", OPFORGE_EW_ALLNUM_HALF_DTYPES, SignFn, kCheapGrain,
            OPFORGE_EW_REAL_TYPES);
EW_UNARY_OP(Exp, 6, "input", "output", OPFORGE_EW_FLOAT_HALF_DTYPES, ExpFn, kCheapGrain, EW_FLOATS);
EW_UNARY_OP(Log, 6, "input", "output", OPFORGE_EW_FLOAT_HALF_DTYPES, LogFn, kCheapGrain, EW_FLOATS);
EW_UNARY_OP(Sqrt, 6, "X", "Y", OPFORGE_EW_FLOAT_HALF_DTYPES, SqrtFn, kCheapGrain, EW_FLOATS);
EW_UNARY_OP(Reciprocal, 6, "X", "Y", OPFORGE_EW_FLOAT_HALF_DTYPES, ReciprocalFn, kCheapGrain, EW_FLOATS);
EW_UNARY_OP(Floor, 6, "X", "Y", OPFORGE_EW_FLOAT_HALF_DTYPES, FloorFn, kCheapGrain, EW_FLOATS);
EW_UNARY_OP(Ceil, 6, "X", "Y", OPFORGE_EW_FLOAT_HALF_DTYPES, CeilFn, kCheapGrain, EW_FLOATS);
EW_UNARY_OP(Round, 11, "X", "Y", OPFORGE_EW_FLOAT_HALF_DTYPES, RoundFn, kCheapGrain, EW_FLOATS);
EW_UNARY_OP(Erf, 9, "input", "output", OPFORGE_EW_FLOAT_HALF_DTYPES, ErfFn, kCheapGrain, EW_FLOATS);
EW_UNARY_OP(Sin, 7, "input", "output", OPFORGE_EW_FLOAT_HALF_DTYPES, SinFn, kCostlyGrain, EW_FLOATS);
EW_UNARY_OP(Cos, 7, "input", "output", OPFORGE_EW_FLOAT_HALF_DTYPES, CosFn, kCostlyGrain, EW_FLOATS);
EW_UNARY_OP(Tan, 7, "input", "output", OPFORGE_EW_FLOAT_HALF_DTYPES, TanFn, kCostlyGrain, EW_FLOATS);
EW_UNARY_OP(Asin, 7, "input", "output", OPFORGE_EW_FLOAT_HALF_DTYPES, AsinFn, kCostlyGrain, EW_FLOATS);
EW_UNARY_OP(Acos, 7, "input", "output", OPFORGE_EW_FLOAT_HALF_DTYPES, AcosFn, kCostlyGrain, EW_FLOATS);
EW_UNARY_OP(Atan, 7, "input", "output", OPFORGE_EW_FLOAT_HALF_DTYPES, AtanFn, kCostlyGrain, EW_FLOATS);
EW_UNARY_OP(Sinh, 9, "input", "output", OPFORGE_EW_FLOAT_HALF_DTYPES, SinhFn, kCostlyGrain, EW_FLOATS);
EW_UNARY_OP(Cosh, 9, "input", "output", OPFORGE_EW_FLOAT_HALF_DTYPES, CoshFn, kCostlyGrain, EW_FLOATS);
EW_UNARY_OP(Asinh, 9, "input", "output", OPFORGE_EW_FLOAT_HALF_DTYPES, AsinhFn, kCostlyGrain, EW_FLOATS);
EW_UNARY_OP(Acosh, 9, "input", "output", OPFORGE_EW_FLOAT_HALF_DTYPES, AcoshFn, kCostlyGrain, EW_FLOATS);
EW_UNARY_OP(Atanh, 9, "input", "output", OPFORGE_EW_FLOAT_HALF_DTYPES, AtanhFn, kCostlyGrain, EW_FLOATS);

OPFORGE_OP(IsNaN)
    .since(9)
    .input("X", EW_TESTED_FLOAT_DTYPES)
    .output("Y", {opforge::boolean})
    .infer(opforge_cpu::ew::infer_bool_like_input0)
    .compute(opforge_cpu::ew::isnan_compute);

OPFORGE_OP(IsInf)
    .since(10)
    .input("X", EW_TESTED_FLOAT_DTYPES)
    .output("Y", {opforge::boolean})
    .attr("detect_negative", int64_t(1), "report -inf")
    .attr("detect_positive", int64_t(1), "report +inf")
    .infer(opforge_cpu::ew::infer_bool_like_input0)
    .compute(opforge_cpu::ew::isinf_compute);

OPFORGE_OP(Identity)
    .since(1)
    .input("input", OPFORGE_ALL_WITH_NARROW_DTYPES)
    .output("output")
    .inplace(0, 0)
    .infer(opforge::same_as_input0)
    .compute(opforge_cpu::ew::identity_compute);
