// elementwise_binary.cpp: broadcasting arithmetic: Add, Sub, Mul, Div, Pow, Mod, Max, Min, Sum, Mean.
#include <cmath>
#include <type_traits>

#include "elementwise/elementwise.h"

namespace opforge_cpu::ew {
namespace {

struct AddFn { template <class T> T operator()(T a, T b) const { return T(a + b); } };
struct SubFn { template <class T> T operator()(T a, T b) const { return T(a - b); } };
struct MulFn { template <class T> T operator()(T a, T b) const { return T(a * b); } };
/// NaN in either operand wins, as in numpy.
struct MaxFn { template <class T> T operator()(T a, T b) const { return a > b || a != a ? a : b; } };
struct MinFn { template <class T> T operator()(T a, T b) const { return a < b || a != a ? a : b; } };

/// -a without signed overflow (INT_MIN stays INT_MIN, as the hardware wraps).
template <class T> T wrapping_neg(T a) {
  using U = std::make_unsigned_t<T>;
  return T(U(0) - U(a));
}

/// Integer division truncates toward zero like C; x / -1 is a negation, never a trap.
struct DivFn {
  template <class T> T operator()(T a, T b) const {
    if constexpr (std::is_floating_point_v<T> || std::is_unsigned_v<T>) return T(a / b);
    else return b == T(-1) ? wrapping_neg(a) : T(a / b);
  }
};

/// Remainder with the divisor's sign (Python's %, numpy's mod), ONNX Mod with fmod = 0.
struct FloorModFn {
  template <class T> T operator()(T a, T b) const {
    if constexpr (std::is_floating_point_v<T>) {
      T r = std::fmod(a, b);
      if (b == T(0)) return r;
      if (r != T(0)) return (b < T(0)) != (r < T(0)) ? T(r + b) : r;
      return std::copysign(T(0), b);
    } else if constexpr (std::is_unsigned_v<T>) {
      return T(a % b);
    } else {
      const T r = b == T(-1) ? T(0) : T(a % b);
      return r != 0 && ((r < 0) != (b < 0)) ? T(r + b) : r;
    }
  }
};

/// Remainder with the dividend's sign (C's fmod and %), ONNX Mod with fmod = 1.
struct TruncModFn {
  template <class T> T operator()(T a, T b) const {
    if constexpr (std::is_floating_point_v<T>) return std::fmod(a, b);
    else if constexpr (std::is_unsigned_v<T>) return T(a % b);
    else return b == T(-1) ? T(0) : T(a % b);
  }
};

/// Fn computed in float for float16 and bfloat16 elements, rounded once to the half type (the
/// correctly rounded result for +, -, *, /: float holds more than twice a half's precision).
template <class Fn> struct InFloat {
  template <class H> H operator()(H a, H b) const {
    return opforge::from_float(float(Fn{}(opforge::to_float(a), opforge::to_float(b))), H{});
  }
};

/// Calls f(type_tag<H>) with H float16_t or bfloat16_t; false for other dtypes.
template <class F> bool dispatch_half(int32_t dtype, F&& f) {
  return opforge::dispatch<opforge::float16_t, opforge::bfloat16_t>(dtype, f);
}

/// Output 0 = Fn(A, B) broadcast, for Add, Sub and Mul, whose bits ignore signedness.
template <class Fn> void arith_compute(KernelContext& ctx) {
  const int32_t dt = ctx.input(0).dtype();
  if (dispatch_half(dt, [&](auto tag) {
        using H = typename decltype(tag)::type;
        binary_map<H, H, H>(ctx, InFloat<Fn>{});
      }))
    return;
  require_dispatched(dispatch_bits(dt, [&](auto tag) {
    using T = typename decltype(tag)::type;
    binary_map<T, T, T>(ctx, Fn{});
  }), dt);
}

/// Throws if an integer divisor holds a zero (which would trap the process).
template <class T> void check_no_zero(const Tensor& divisor) {
  const T* b = divisor.data<T>();
  const int64_t n = divisor.numel();
  bool zero = false;
  for (int64_t i = 0; i < n; ++i) zero |= b[i] == T(0);
  OPFORGE_CHECK(!zero, "input 'B' holds a zero: integer division by zero");
}

void div_compute(KernelContext& ctx) {
  const int32_t dt = ctx.input(0).dtype();
  if (dispatch_half(dt, [&](auto tag) {
        using H = typename decltype(tag)::type;
        binary_map<H, H, H>(ctx, InFloat<DivFn>{});
      }))
    return;
  require_dispatched(opforge::dispatch<OPFORGE_EW_REAL_TYPES>(dt, [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (std::is_integral_v<T>) check_no_zero<T>(ctx.input(1));
    binary_map<T, T, T>(ctx, DivFn{});
  }), dt);
}

void mod_infer(InferContext& ctx) {
  const int64_t fmod = ctx.attr<int64_t>("fmod");
  OPFORGE_CHECK(fmod == 0 || fmod == 1, "attribute 'fmod' must be 0 or 1, got ", fmod);
  infer_broadcast_same(ctx);
}

/// fmod = 1: C's fmod (the dividend's sign); fmod = 0: numpy's mod (the divisor's sign), for
/// floats too, as onnxruntime and onnx's reference compute it.
void mod_compute(KernelContext& ctx) {
  const bool fmod = ctx.attr<int64_t>("fmod") != 0;
  const int32_t dt = ctx.input(0).dtype();
  if (dispatch_half(dt, [&](auto tag) {
        using H = typename decltype(tag)::type;
        if (fmod) binary_map<H, H, H>(ctx, InFloat<TruncModFn>{});
        else binary_map<H, H, H>(ctx, InFloat<FloorModFn>{});
      }))
    return;
  require_dispatched(opforge::dispatch<OPFORGE_EW_REAL_TYPES>(dt, [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (std::is_integral_v<T>) check_no_zero<T>(ctx.input(1));
    if (fmod) binary_map<T, T, T>(ctx, TruncModFn{});
    else binary_map<T, T, T>(ctx, FloorModFn{});
  }), dt);
}

/// x^e for integers, exactly; a negative e truncates 1/x^|e| toward zero as C's cast would.
template <class T, class E> T int_pow(T x, E e) {
  if (e < 0) return x == T(1) ? T(1) : x == T(-1) ? ((e & 1) ? T(-1) : T(1)) : T(0);
  T r = 1;
  for (; e; e >>= 1, x = T(x * x))
    if (e & 1) r = T(r * x);
  return r;
}

template <class T, class E> T pow_of(T x, E e) {
  if constexpr (std::is_integral_v<T> && std::is_integral_v<E>) return int_pow(x, e);
  else if constexpr (std::is_same_v<T, float> && std::is_same_v<E, float>) return std::pow(x, e);
  else return T(std::pow(double(x), double(e)));
}

/// Pow with a one-element exponent of 1, 2 or 3 becomes multiplications; returns false otherwise.
template <class T> bool pow_by_products(const KernelContext& ctx, double e) {
  if (e == 1) unary_map<T, T>(ctx, [](T a) { return a; });
  else if (e == 2) unary_map<T, T>(ctx, [](T a) { return T(a * a); });
  else if (e == 3) unary_map<T, T>(ctx, [](T a) { return T(a * a * a); });
  return e == 1 || e == 2 || e == 3;
}

/// The exponent's value when it has one element and the output keeps the base's shape.
bool scalar_exponent(const KernelContext& ctx, double* value) {
  const Tensor e = ctx.input(1);
  if (e.numel() != 1 || ctx.output(0).sizes() != ctx.input(0).sizes()) return false;
  return opforge::dispatch<float, double, int32_t, int64_t>(e.dtype(), [&](auto tag) {
    *value = double(*e.data<typename decltype(tag)::type>());
  });
}

/// Calls f(type_tag<E>) for every exponent type Pow takes (halves included); false otherwise.
template <class F> bool dispatch_exponent(int32_t dtype, F&& f) {
  return opforge::dispatch<OPFORGE_EW_REAL_TYPES, opforge::float16_t, opforge::bfloat16_t>(dtype, f);
}

/// An exponent as a number pow_of takes: halves read as float.
template <class E> auto exponent_value(E e) {
  if constexpr (std::is_same_v<E, opforge::float16_t> || std::is_same_v<E, opforge::bfloat16_t>)
    return opforge::to_float(e);
  else return e;
}

void pow_compute(KernelContext& ctx) {
  const int32_t bt = ctx.input(0).dtype(), et = ctx.input(1).dtype();
  double e = 0;
  const bool scalar = scalar_exponent(ctx, &e);
  if (dispatch_half(bt, [&](auto base) {
        using H = typename decltype(base)::type;
        require_dispatched(dispatch_exponent(et, [&](auto exp) {
          using E = typename decltype(exp)::type;
          binary_map<H, E, H>(ctx, [](H x, E e) {
            return opforge::from_float(float(pow_of(opforge::to_float(x), exponent_value(e))), H{});
          }, kCostlyGrain);
        }), et);
      }))
    return;
  require_dispatched(opforge::dispatch<float, double, int32_t, int64_t>(bt, [&](auto base) {
    using T = typename decltype(base)::type;
    if (scalar && pow_by_products<T>(ctx, e)) return;
    require_dispatched(dispatch_exponent(et, [&](auto exp) {
      using E = typename decltype(exp)::type;
      binary_map<T, E, T>(ctx, [](T x, E e) { return pow_of(x, exponent_value(e)); }, kCostlyGrain);
    }), et);
  }), bt);
}

void pow_infer(InferContext& ctx) {
  ctx.set_output(0, ctx.input(0).dtype(), broadcast_inputs(ctx, 0));
}

/// Folds every input into output 0 with Fn, broadcasting.
template <class T, class Fn> void fold_inputs(KernelContext& ctx) {
  const Tensor y = ctx.output(0), first = ctx.input(0);
  T* out = y.data<T>();
  const Shape so = y.sizes();
  if (ctx.num_inputs() == 1) parallel_copy(ctx, first.raw(), out, y.nbytes());
  for (int k = 1; k < ctx.num_inputs(); ++k) {
    const Tensor b = ctx.input(k);
    const bool from_first = k == 1;
    binary_map(ctx, from_first ? first.data<T>() : out, from_first ? first.sizes() : so,
               b.data<T>(), b.sizes(), out, so, Fn{});
  }
}

/// Max and Min, over every numeric type.
template <class Fn> void extremum_compute(KernelContext& ctx) {
  const int32_t dt = ctx.output(0).dtype();
  if (dispatch_half(dt, [&](auto tag) { fold_inputs<typename decltype(tag)::type, InFloat<Fn>>(ctx); }))
    return;
  require_dispatched(opforge::dispatch<OPFORGE_EW_REAL_TYPES>(dt, [&](auto tag) {
    fold_inputs<typename decltype(tag)::type, Fn>(ctx);
  }), dt);
}

/// Sum, and Mean (the sum divided by the input count), over float and double.
template <bool Mean> void sum_compute(KernelContext& ctx) {
  const Tensor y = ctx.output(0);
  if (dispatch_half(y.dtype(), [&](auto tag) {
        using H = typename decltype(tag)::type;
        fold_inputs<H, InFloat<AddFn>>(ctx);
        if (!Mean) return;
        const float scale = 1.0f / float(ctx.num_inputs());
        unary_map<H, H>(ctx, y.data<H>(), y.data<H>(), y.numel(),
                        [=](H v) { return opforge::from_float(opforge::to_float(v) * scale, H{}); });
      }))
    return;
  require_dispatched(opforge::dispatch<float, double>(y.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    fold_inputs<T, AddFn>(ctx);
    if (!Mean) return;
    const T scale = T(1) / T(ctx.num_inputs());
    unary_map<T, T>(ctx, y.data<T>(), y.data<T>(), y.numel(), [=](T v) { return v * scale; });
  }), y.dtype());
}

}  // namespace
}  // namespace opforge_cpu::ew

using opforge_cpu::ew::arith_compute;
using opforge_cpu::ew::extremum_compute;
using opforge_cpu::ew::infer_broadcast_same;

/// Opset 14 added the 8- and 16-bit integers to Add, Sub, Mul and Div.
#define EW_ARITH14_ADDED {opforge::i8, opforge::i16, opforge::u8, opforge::u16}
#define EW_ARITH_OP(NAME, COMPUTE)                                                                \
  OPFORGE_OP(NAME).since(7)                                                                       \
      .input("A", OPFORGE_EW_ARITH7_HALF_DTYPES).dtypes_since(14, EW_ARITH14_ADDED)               \
      .input("B", OPFORGE_EW_ARITH7_HALF_DTYPES).dtypes_since(14, EW_ARITH14_ADDED)               \
      .output("C").infer(infer_broadcast_same).compute(COMPUTE)

EW_ARITH_OP(Add, arith_compute<opforge_cpu::ew::AddFn>);
EW_ARITH_OP(Sub, arith_compute<opforge_cpu::ew::SubFn>);
EW_ARITH_OP(Mul, arith_compute<opforge_cpu::ew::MulFn>);
EW_ARITH_OP(Div, opforge_cpu::ew::div_compute);

OPFORGE_OP(Mod)
    .since(10)
    .input("A", OPFORGE_EW_ALLNUM_HALF_DTYPES)
    .input("B", OPFORGE_EW_ALLNUM_HALF_DTYPES)
    .output("C")
    .attr("fmod", int64_t(0), "1: C's fmod (sign of A); 0: integer remainder with B's sign")
    .infer(opforge_cpu::ew::mod_infer)
    .compute(opforge_cpu::ew::mod_compute);

// Opset 12 lets the exponent's type differ from the base's, and adds integers to both; pow_infer
// gives Z the base's type, which before 12 was also the exponent's.
OPFORGE_OP(Pow)
    .since(7)
    .input("X", OPFORGE_EW_FLOAT_HALF_DTYPES).dtypes_since(12, {opforge::i32, opforge::i64})
    .input("Y", OPFORGE_EW_FLOAT_HALF_DTYPES)
    .dtypes_since(12, {opforge::i32, opforge::i64, opforge::i8, opforge::i16, opforge::u8, opforge::u16,
                       opforge::u32, opforge::u64})
    .output("Z")
    .infer(opforge_cpu::ew::pow_infer)
    .compute(opforge_cpu::ew::pow_compute);

/// Registers a variadic NAME(data_0...) -> OUT folding its broadcast inputs with COMPUTE.
#define EW_VARIADIC_OP(NAME, SINCE, OUT, DTYPES, COMPUTE)                                      \
  OPFORGE_OP(NAME).since(SINCE).variadic_input("data_0", DTYPES).output(OUT)                   \
      .infer(infer_broadcast_same).compute(COMPUTE)

/// Opset 12 added the integers to Max and Min.
#define EW_EXTREMUM12_ADDED {opforge::i32, opforge::i64, opforge::i8, opforge::i16, opforge::u8, opforge::u16, \
                             opforge::u32, opforge::u64}
OPFORGE_OP(Max).since(6).variadic_input("data_0", OPFORGE_EW_FLOAT_HALF_DTYPES).dtypes_since(12, EW_EXTREMUM12_ADDED)
    .output("max").infer(infer_broadcast_same).compute(extremum_compute<opforge_cpu::ew::MaxFn>);
OPFORGE_OP(Min).since(6).variadic_input("data_0", OPFORGE_EW_FLOAT_HALF_DTYPES).dtypes_since(12, EW_EXTREMUM12_ADDED)
    .output("min").infer(infer_broadcast_same).compute(extremum_compute<opforge_cpu::ew::MinFn>);
EW_VARIADIC_OP(Sum, 6, "sum", OPFORGE_EW_FLOAT_HALF_DTYPES, opforge_cpu::ew::sum_compute<false>);
EW_VARIADIC_OP(Mean, 6, "mean", OPFORGE_EW_FLOAT_HALF_DTYPES, opforge_cpu::ew::sum_compute<true>);
