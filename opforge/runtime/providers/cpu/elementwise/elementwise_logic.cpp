// elementwise_logic.cpp: comparisons, And/Or/Xor/Not, Where, BitShift and the Bitwise ops, all
// broadcasting.
#include <algorithm>
#include <cstring>
#include <string>
#include <type_traits>

#include "elementwise/elementwise.h"

namespace opforge_cpu::ew {
namespace {

struct EqualFn { template <class T> bool operator()(T a, T b) const { return a == b; } };
struct LessFn { template <class T> bool operator()(T a, T b) const { return a < b; } };
struct LessEqualFn { template <class T> bool operator()(T a, T b) const { return a <= b; } };
// Bools as bytes (0 or 1): byte-wise logic vectorises where conversions from bool do not.
struct AndFn { uint8_t operator()(uint8_t a, uint8_t b) const { return a & b; } };
struct OrFn { uint8_t operator()(uint8_t a, uint8_t b) const { return a | b; } };
struct XorFn { uint8_t operator()(uint8_t a, uint8_t b) const { return a ^ b; } };

/// Output 0 (bool) = Fn(A, B) broadcast, for every numeric element type; with Swap, Fn(B, A),
/// so that Greater and GreaterOrEqual reuse the loops of Less and LessOrEqual.
template <class Fn, bool Swap = false> void compare_compute(KernelContext& ctx) {
  const Tensor a = ctx.input(Swap ? 1 : 0), b = ctx.input(Swap ? 0 : 1), y = ctx.output(0);
  if (opforge::dispatch<opforge::float16_t, opforge::bfloat16_t>(a.dtype(), [&](auto tag) {
        using H = typename decltype(tag)::type;  // compared as the floats they hold
        binary_map(ctx, a.data<H>(), a.sizes(), b.data<H>(), b.sizes(), y.data<bool>(), y.sizes(),
                   [](H u, H v) { return Fn{}(opforge::to_float(u), opforge::to_float(v)); });
      }))
    return;
  require_dispatched(opforge::dispatch<OPFORGE_EW_REAL_TYPES>(a.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    binary_map(ctx, a.data<T>(), a.sizes(), b.data<T>(), b.sizes(), y.data<bool>(), y.sizes(), Fn{});
  }), a.dtype());
}

void equal_compute(KernelContext& ctx) {
  const int32_t dt = ctx.input(0).dtype();
  if (dt == OPF_FLOAT16 || dt == OPF_BFLOAT16) return compare_compute<EqualFn>(ctx);  // -0 == 0, NaN != NaN
  require_dispatched(dispatch_bits(dt, [&](auto tag) {
    using T = typename decltype(tag)::type;
    binary_map<T, T, bool>(ctx, EqualFn{});
  }), dt);
}

template <class Fn> void logic_compute(KernelContext& ctx) {
  binary_map<uint8_t, uint8_t, uint8_t>(ctx, Fn{});
}

void not_compute(KernelContext& ctx) {
  const Tensor x = ctx.input(0), y = ctx.output(0);
  const uint8_t* in = reinterpret_cast<const uint8_t*>(x.data<bool>());
  uint8_t* out = reinterpret_cast<uint8_t*>(y.data<bool>());
  unary_map(ctx, in, out, x.numel(), [](uint8_t v) { return uint8_t(v ^ 1); });
}

/// n elements of `src` at stride 0 or 1 into `out`.
template <class T> void copy_run(const T* src, int64_t stride, T* out, int64_t n) {
  if (stride) std::memcpy(out, src, size_t(n) * sizeof(T));
  else std::fill(out, out + n, *src);
}

/// c ? a : b for unsigned T and c 0 or 1, as a mask: conditional loads would keep the loop
/// scalar, and so would a conversion from bool, hence c as a byte.
template <class T> T pick(uint8_t c, T a, T b) {
  const T mask = T(T(0) - T(c));
  return T((a & mask) | (b & T(~mask)));
}

/// o[i] = c[i] ? x[i] : y[i] for one run, strides 0 or 1, with a plain loop for each pattern.
template <class T>
void where_run(const uint8_t* c, int64_t sc, const T* x, int64_t sx, const T* y, int64_t sy, T* o,
               int64_t n) {
  if (!sc) {
    if (*c) copy_run(x, sx, o, n);
    else copy_run(y, sy, o, n);
  } else if (sx && sy) {
    for (int64_t i = 0; i < n; ++i) o[i] = pick(c[i], x[i], y[i]);
  } else if (sx) {
    const T b = *y;
    for (int64_t i = 0; i < n; ++i) o[i] = pick(c[i], x[i], b);
  } else if (sy) {
    const T a = *x;
    for (int64_t i = 0; i < n; ++i) o[i] = pick(c[i], a, y[i]);
  } else {
    const T a = *x, b = *y;
    for (int64_t i = 0; i < n; ++i) o[i] = pick(c[i], a, b);
  }
}

void where_infer(InferContext& ctx) {
  check_same_dtype(ctx, 1);
  ctx.set_output(0, ctx.input(1).dtype(), broadcast_inputs(ctx, 0));
}

/// The buffers of one Where call, handed to its runs.
template <class T> struct WhereArgs {
  const uint8_t* c;  // bools, read as bytes
  const T* x;
  const T* y;
  T* out;
  int64_t sc, sx, sy;
};

void where_compute(KernelContext& ctx) {
  const Tensor c = ctx.input(0), x = ctx.input(1), y = ctx.input(2), out = ctx.output(0);
  dispatch_by_size(x.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;  // elements are only moved: any type of that width
    const Shape shapes[3] = {c.sizes(), x.sizes(), y.sizes()};
    const BroadcastPlan<3> plan(out.sizes(), shapes);
    const WhereArgs<T> args{reinterpret_cast<const uint8_t*>(c.data<bool>()),
                            static_cast<const T*>(x.raw()), static_cast<const T*>(y.raw()),
                            static_cast<T*>(out.raw()), plan.inner_stride(0), plan.inner_stride(1),
                            plan.inner_stride(2)};
    plan.run(ctx, kCheapGrain, [](const void* p, const int64_t* off, int64_t o, int64_t n) {
      const WhereArgs<T>& s = *static_cast<const WhereArgs<T>*>(p);
      where_run(s.c + off[0], s.sc, s.x + off[1], s.sx, s.y + off[2], s.sy, s.out + o, n);
    }, &args);
  });
}

bool shift_left(const std::string& direction) {
  OPFORGE_CHECK(direction == "LEFT" || direction == "RIGHT",
                "attribute 'direction' must be 'LEFT' or 'RIGHT', got '", direction, "'");
  return direction == "LEFT";
}

void bitshift_infer(InferContext& ctx) {
  shift_left(ctx.attr<std::string>("direction"));
  infer_broadcast_same(ctx);
}

/// Whether v < 0, without a comparison that is always false for unsigned types.
template <class T> bool is_negative(T v) {
  if constexpr (std::is_signed_v<T>) return v < T(0);
  else return false;
}

/// x << y on the bits (a signed x loses what passes its sign bit); a negative y or one of the
/// bit width or more gives 0 (C leaves both undefined).
struct ShiftLeftFn {
  template <class T> T operator()(T a, T b) const {
    using U = std::make_unsigned_t<T>;
    constexpr T bits = T(sizeof(T) * 8);
    return is_negative(b) || b >= bits ? T(0) : T(U(U(a) << U(b)));
  }
};

/// x >> y, arithmetic for a signed x; out-of-range shifts give what the sign fill alone gives:
/// -1 for a negative x, else 0.
struct ShiftRightFn {
  template <class T> T operator()(T a, T b) const {
    constexpr T bits = T(sizeof(T) * 8);
    if (is_negative(b) || b >= bits) return is_negative(a) ? T(-1) : T(0);
    return T(a >> b);
  }
};

void bitshift_compute(KernelContext& ctx) {
  const bool left = shift_left(ctx.attr<std::string>("direction"));
  const int32_t dt = ctx.input(0).dtype();
  require_dispatched(opforge::dispatch<uint8_t, uint16_t, uint32_t, uint64_t, int8_t, int16_t,
                                       int32_t, int64_t>(dt, [&](auto tag) {
    using T = typename decltype(tag)::type;
    if (left) binary_map<T, T, T>(ctx, ShiftLeftFn{});
    else binary_map<T, T, T>(ctx, ShiftRightFn{});
  }), dt);
}

struct BitAndFn { template <class T> T operator()(T a, T b) const { return T(a & b); } };
struct BitOrFn { template <class T> T operator()(T a, T b) const { return T(a | b); } };
struct BitXorFn { template <class T> T operator()(T a, T b) const { return T(a ^ b); } };

/// BitwiseAnd/Or/Xor: the bits ignore signedness, so each width has one loop.
template <class Fn> void bitwise_compute(KernelContext& ctx) {
  dispatch_by_size(ctx.input(0).dtype(), [&](auto tag) {
    using U = typename decltype(tag)::type;
    binary_map<U, U, U>(ctx, Fn{});
  });
}

void bitwise_not_compute(KernelContext& ctx) {
  const Tensor x = ctx.input(0), y = ctx.output(0);
  dispatch_by_size(x.dtype(), [&](auto tag) {
    using U = typename decltype(tag)::type;
    unary_map(ctx, static_cast<const U*>(x.raw()), static_cast<U*>(y.raw()), x.numel(), [](U v) { return U(~v); });
  });
}

}  // namespace
}  // namespace opforge_cpu::ew

using opforge_cpu::ew::compare_compute;
using opforge_cpu::ew::logic_compute;

#define EW_EQUAL7_DTYPES {opforge::i32, opforge::i64, opforge::boolean}
/// Registers NAME(A, B) -> C over DTYPES, with a bool C.
#define EW_BOOL_OP(NAME, SINCE, DTYPES, COMPUTE)                                               \
  OPFORGE_OP(NAME).since(SINCE).input("A", DTYPES).input("B", DTYPES)                          \
      .output("C", {opforge::boolean}).infer(opforge_cpu::ew::infer_broadcast_bool).compute(COMPUTE)

/// Registers NAME(A, B) -> bool C over DTYPES, which grew by ADDED at opset WHEN.
#define EW_BOOL_OP_GROWN(NAME, SINCE, DTYPES, WHEN, ADDED, COMPUTE)                              \
  OPFORGE_OP(NAME).since(SINCE).input("A", DTYPES).dtypes_since(WHEN, ADDED)                     \
      .input("B", DTYPES).dtypes_since(WHEN, ADDED).output("C", {opforge::boolean})              \
      .infer(opforge_cpu::ew::infer_broadcast_bool).compute(COMPUTE)

/// What opset 11 added to Equal, and opset 9 to Less and Greater.
#define EW_EQUAL11_ADDED                                                                        \
  {opforge::f32, opforge::f64, opforge::i8, opforge::i16, opforge::u8, opforge::u16, opforge::u32, \
   opforge::u64, opforge::f16, opforge::bf16}
#define EW_COMPARE9_ADDED                                                                       \
  {opforge::i32, opforge::i64, opforge::i8, opforge::i16, opforge::u8, opforge::u16, opforge::u32, \
   opforge::u64, opforge::f16, opforge::bf16}

EW_BOOL_OP_GROWN(Equal, 7, EW_EQUAL7_DTYPES, 11, EW_EQUAL11_ADDED, opforge_cpu::ew::equal_compute);
EW_BOOL_OP_GROWN(Less, 7, OPFORGE_EW_FLOAT_DTYPES, 9, EW_COMPARE9_ADDED, compare_compute<opforge_cpu::ew::LessFn>);
EW_BOOL_OP_GROWN(Greater, 7, OPFORGE_EW_FLOAT_DTYPES, 9, EW_COMPARE9_ADDED,
                 (compare_compute<opforge_cpu::ew::LessFn, true>));
EW_BOOL_OP(LessOrEqual, 12, OPFORGE_EW_ALLNUM_HALF_DTYPES, compare_compute<opforge_cpu::ew::LessEqualFn>);
EW_BOOL_OP(GreaterOrEqual, 12, OPFORGE_EW_ALLNUM_HALF_DTYPES,
           (compare_compute<opforge_cpu::ew::LessEqualFn, true>));
EW_BOOL_OP(And, 7, {opforge::boolean}, logic_compute<opforge_cpu::ew::AndFn>);
EW_BOOL_OP(Or, 7, {opforge::boolean}, logic_compute<opforge_cpu::ew::OrFn>);
EW_BOOL_OP(Xor, 7, {opforge::boolean}, logic_compute<opforge_cpu::ew::XorFn>);

OPFORGE_OP(Not)
    .since(1)
    .input("X", {opforge::boolean})
    .output("Y", {opforge::boolean})
    .inplace(0, 0)
    .infer(opforge::same_as_input0)
    .compute(opforge_cpu::ew::not_compute);

OPFORGE_OP(Where)
    .since(9)
    .input("condition", {opforge::boolean})
    .input("X", OPFORGE_ALL_WITH_NARROW_DTYPES)
    .input("Y", OPFORGE_ALL_WITH_NARROW_DTYPES)
    .output("output")
    .infer(opforge_cpu::ew::where_infer)
    .compute(opforge_cpu::ew::where_compute);

#define EW_UNSIGNED_DTYPES {opforge::u8, opforge::u16, opforge::u32, opforge::u64}
#define EW_INTEGER_DTYPES                                                                      \
  {opforge::u8, opforge::u16, opforge::u32, opforge::u64, opforge::i8, opforge::i16,          \
   opforge::i32, opforge::i64}

#define EW_SIGNED_INTEGER_DTYPES {opforge::i8, opforge::i16, opforge::i32, opforge::i64}

// Opset 28 added the signed integers.
OPFORGE_OP(BitShift)
    .since(11)
    .input("X", EW_UNSIGNED_DTYPES).dtypes_since(28, EW_SIGNED_INTEGER_DTYPES)
    .input("Y", EW_UNSIGNED_DTYPES).dtypes_since(28, EW_SIGNED_INTEGER_DTYPES)
    .output("Z")
    .required_attr("direction", opforge::AttrType::String, "LEFT or RIGHT")
    .infer(opforge_cpu::ew::bitshift_infer)
    .compute(opforge_cpu::ew::bitshift_compute);

/// Registers a bitwise NAME(A, B) -> C over every integer type.
#define EW_BITWISE_OP(NAME, FN)                                                                \
  OPFORGE_OP(NAME).since(18).input("A", EW_INTEGER_DTYPES).input("B", EW_INTEGER_DTYPES)       \
      .output("C").infer(opforge_cpu::ew::infer_broadcast_same)                                \
      .compute(opforge_cpu::ew::bitwise_compute<opforge_cpu::ew::FN>)

EW_BITWISE_OP(BitwiseAnd, BitAndFn);
EW_BITWISE_OP(BitwiseOr, BitOrFn);
EW_BITWISE_OP(BitwiseXor, BitXorFn);

OPFORGE_OP(BitwiseNot)
    .since(18)
    .input("X", EW_INTEGER_DTYPES)
    .output("Y")
    .inplace(0, 0)
    .infer(opforge::same_as_input0)
    .compute(opforge_cpu::ew::bitwise_not_compute);
