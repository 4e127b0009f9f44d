// elementwise_cast.cpp: Cast and CastLike between every numeric dtype, bool, float16, bfloat16
// and the narrow types (float8 with `saturate`, float8e8m0 with `round_mode`, float4, 4- and
// 2-bit integers).
#include <string>
#include <type_traits>

#include "elementwise/elementwise.h"
#include "common/narrow_types.h"

#ifdef __F16C__
#include <immintrin.h>
#endif

namespace opforge_cpu::ew {
namespace {

using opforge::bfloat16_t;
using opforge::float16_t;

/// Element types computed in float rather than held as bits.
template <class T> constexpr bool is_half_v =
    std::is_same_v<T, float16_t> || std::is_same_v<T, bfloat16_t>;

/// How an element is held: bools as bytes (0 or 1), since loops converting from or to C++'s
/// bool do not vectorise.
template <class T> using storage_t = std::conditional_t<std::is_same_v<T, bool>, uint8_t, T>;

/// What a cast to a narrow type needs beyond the two dtypes.
struct CastOptions {
  bool saturate = true;
  narrow::RoundMode round_mode = narrow::RoundMode::Up;
};

/// An element as a C++ number: halves and narrow floats as float, narrow integers as int32.
template <class From> auto widen(storage_t<From> v) {
  if constexpr (is_half_v<From>) return opforge::to_float(v);
  else if constexpr (narrow::is_minifloat_v<From>) return narrow::decode(narrow::format_of<From>::value, v.bits);
  else if constexpr (narrow::is_e8m0_v<From>) return narrow::decode_e8m0(v.bits);
  else if constexpr (narrow::is_narrow_int_v<From>) return narrow::decode_int<From>(v.bits);
  else return v;
}

/// A C++ number as a narrow element.
template <class To, class W> To to_narrow(W w, const CastOptions& opt) {
  if constexpr (narrow::is_minifloat_v<To>) {
    return To{narrow::encode(narrow::format_of<To>::value, double(w), opt.saturate)};
  } else if constexpr (narrow::is_e8m0_v<To>) {
    return To{narrow::encode_e8m0(float(w), opt.saturate, opt.round_mode)};
  } else if constexpr (std::is_floating_point_v<W>) {
    return To{narrow::encode_int<To>(narrow::truncate(double(w)))};
  } else {
    return To{narrow::encode_int<To>(int64_t(w))};
  }
}

/// One element From -> To: numeric values convert as C++'s static_cast, to bool as `v != 0`.
template <class From, class To> storage_t<To> convert(storage_t<From> v, const CastOptions& opt) {
  const auto w = widen<From>(v);
  if constexpr (narrow::is_narrow_v<To>) return to_narrow<To>(w, opt);
  else if constexpr (is_half_v<To>) return opforge::from_float(float(w), To{});
  else if constexpr (std::is_same_v<To, bool>) return uint8_t(w != decltype(w)(0));
  else return static_cast<To>(w);
}

template <class From, class To>
void cast_run(const storage_t<From>* in, storage_t<To>* out, int64_t n, const CastOptions& opt) {
  for (int64_t i = 0; i < n; ++i) out[i] = convert<From, To>(in[i], opt);
}

#ifdef __F16C__
// The CPU's own conversions (round to nearest even, as from_float) for the common half casts.
template <> void cast_run<float16_t, float>(const float16_t* in, float* out, int64_t n, const CastOptions&) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(out + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(in + i))));
  for (; i < n; ++i) out[i] = opforge::to_float(in[i]);
}
template <> void cast_run<float, float16_t>(const float* in, float16_t* out, int64_t n, const CastOptions&) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i),
                     _mm256_cvtps_ph(_mm256_loadu_ps(in + i), _MM_FROUND_TO_NEAREST_INT));
  for (; i < n; ++i) out[i] = opforge::from_float(in[i], float16_t{});
}
#endif

#define EW_CAST_TYPES                                                                          \
  float, double, float16_t, bfloat16_t, int8_t, int16_t, int32_t, int64_t, uint8_t, uint16_t,  \
      uint32_t, uint64_t, bool, opforge::float8e4m3fn_t, opforge::float8e4m3fnuz_t,            \
      opforge::float8e5m2_t, opforge::float8e5m2fnuz_t, opforge::uint4_t, opforge::int4_t,     \
      opforge::float4e2m1_t, opforge::float8e8m0_t, opforge::uint2_t, opforge::int2_t

/// A type-erased cast of n elements, so that one parallel loop serves all 529 pairs.
using CastFn = void (*)(const void*, void*, int64_t, const CastOptions&);

template <class From, class To>
void cast_erased(const void* in, void* out, int64_t n, const CastOptions& opt) {
  cast_run<From, To>(static_cast<const storage_t<From>*>(in), static_cast<storage_t<To>*>(out), n, opt);
}

CastFn find_cast(int32_t from_dtype, int32_t to_dtype) {
  CastFn fn = nullptr;
  opforge::dispatch<EW_CAST_TYPES>(from_dtype, [&](auto from) {
    opforge::dispatch<EW_CAST_TYPES>(to_dtype, [&](auto to) {
      fn = cast_erased<typename decltype(from)::type, typename decltype(to)::type>;
    });
  });
  OPFORGE_CHECK(fn != nullptr, "cannot cast ", opforge::dtype_name(from_dtype), " to ",
                opforge::dtype_name(to_dtype));
  return fn;
}

/// Converts `in` into `out` (same element count, any supported dtypes), in parallel.
void cast_tensor(const KernelContext& ctx, const Tensor& in, const Tensor& out, const CastOptions& opt) {
  if (in.dtype() == out.dtype()) {
    parallel_copy(ctx, in.raw(), out.raw(), in.nbytes());
    return;
  }
  const CastFn fn = find_cast(in.dtype(), out.dtype());
  const char* src = static_cast<const char*>(in.raw());
  char* dst = static_cast<char*>(out.raw());
  const int64_t in_size = opforge::dtype_size(in.dtype()), out_size = opforge::dtype_size(out.dtype());
  ctx.parallel_for(in.numel(), kCheapGrain, [&](int64_t begin, int64_t end) {
    fn(src + begin * in_size, dst + begin * out_size, end - begin, opt);
  });
}

bool castable(int64_t dtype) {
  return dtype != OPF_STRING && opforge::dtype_size(int32_t(dtype)) > 0;
}

/// Validates round_mode (from opset 24; it only affects casts to float8e8m0).
void check_round_mode(const InferContext& ctx) {
  if (!ctx.has_attr("round_mode")) return;
  const std::string mode = ctx.attr<std::string>("round_mode");
  OPFORGE_CHECK(mode == "up" || mode == "down" || mode == "nearest",
                "attribute 'round_mode' must be 'up', 'down' or 'nearest', got '", mode, "'");
}

void cast_infer(InferContext& ctx) {
  const int64_t to = ctx.attr<int64_t>("to");
  OPFORGE_CHECK(castable(to), "attribute 'to' = ", to, " is not a dtype this kernel casts to");
  check_round_mode(ctx);
  ctx.set_output(0, int32_t(to), ctx.input(0).sizes());
}

void castlike_infer(InferContext& ctx) {
  check_round_mode(ctx);
  ctx.set_output(0, ctx.input(1).dtype(), ctx.input(0).sizes());
}

void cast_compute(KernelContext& ctx) {
  CastOptions opt;
  if (ctx.has_attr("saturate")) opt.saturate = ctx.attr<int64_t>("saturate") != 0;
  if (ctx.has_attr("round_mode")) opt.round_mode = narrow::round_mode(ctx.attr<std::string>("round_mode"));
  cast_tensor(ctx, ctx.input(0), ctx.output(0), opt);
}

/// Bits per element as ONNX counts them (4 for int4, not the byte it is held in).
int64_t bit_width(int32_t dtype) {
  switch (dtype) {
    case OPF_UINT4: case OPF_INT4: case OPF_FLOAT4E2M1: return 4;
    case OPF_UINT2: case OPF_INT2: return 2;
    default: return opforge::dtype_size(dtype) * 8;
  }
}

void bitcast_infer(InferContext& ctx) {
  const int64_t to = ctx.attr<int64_t>("to");
  const int32_t from = ctx.input(0).dtype();
  OPFORGE_CHECK(castable(to), "attribute 'to' = ", to, " is not a dtype this kernel reinterprets to");
  OPFORGE_CHECK(bit_width(from) == bit_width(int32_t(to)), "input 'input' holds ",
                opforge::dtype_name(from), " (", bit_width(from), " bits) but attribute 'to' names ",
                opforge::dtype_name(int32_t(to)), " (", bit_width(int32_t(to)),
                " bits): BitCast needs types of the same bit width");
  ctx.set_output(0, int32_t(to), ctx.input(0).sizes());
}

/// The same bits under another dtype of the same width.
void bitcast_compute(KernelContext& ctx) {
  parallel_copy(ctx, ctx.input(0).raw(), ctx.output(0).raw(), ctx.input(0).nbytes());
}

}  // namespace
}  // namespace opforge_cpu::ew
OPFORGE_OP(Cast)
    .since(6)
    .input("input", OPFORGE_ALL_WITH_NARROW_DTYPES)
    .output("output")
    .required_attr("to", opforge::AttrType::Int, "the ONNX dtype number to cast to")
    .attr("saturate", int64_t(1), "float8 only: clamp to the finite range").attr_versions(19)
    .attr("round_mode", "up", "float8e8m0 only: up, down or nearest").attr_versions(24)
    .infer(opforge_cpu::ew::cast_infer)
    .compute(opforge_cpu::ew::cast_compute);
OPFORGE_OP(CastLike)
    .since(15)
    .input("input", OPFORGE_ALL_WITH_NARROW_DTYPES)
    .input("target_type", OPFORGE_ALL_WITH_NARROW_DTYPES)
    .output("output")
    .attr("saturate", int64_t(1), "float8 only: clamp to the finite range").attr_versions(19)
    .attr("round_mode", "up", "float8e8m0 only: up, down or nearest").attr_versions(24)
    .infer(opforge_cpu::ew::castlike_infer)
    .compute(opforge_cpu::ew::cast_compute);

OPFORGE_OP(BitCast)
    .since(26)
    .input("input", OPFORGE_ALL_WITH_NARROW_DTYPES)
    .output("output")
    .required_attr("to", opforge::AttrType::Int, "the ONNX dtype number whose bits the output reads as")
    .infer(opforge_cpu::ew::bitcast_infer)
    .compute(opforge_cpu::ew::bitcast_compute);
