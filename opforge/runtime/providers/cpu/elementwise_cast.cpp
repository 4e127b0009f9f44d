// elementwise_cast.cpp: Cast and CastLike between every numeric dtype, bool, float16 and bfloat16.
#include <string>
#include <type_traits>

#include "elementwise.h"

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

template <class From> auto widen(storage_t<From> v) {
  if constexpr (is_half_v<From>) return opforge::to_float(v);
  else return v;
}

/// One element From -> To: numeric values convert as C++'s static_cast, to bool as `v != 0`.
template <class From, class To> storage_t<To> convert(storage_t<From> v) {
  const auto w = widen<From>(v);
  if constexpr (is_half_v<To>) return opforge::from_float(float(w), To{});
  else if constexpr (std::is_same_v<To, bool>) return uint8_t(w != decltype(w)(0));
  else return static_cast<To>(w);
}

template <class From, class To>
void cast_run(const storage_t<From>* in, storage_t<To>* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = convert<From, To>(in[i]);
}

#ifdef __F16C__
// The CPU's own conversions (round to nearest even, as from_float) for the common half casts.
template <> void cast_run<float16_t, float>(const float16_t* in, float* out, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(out + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(in + i))));
  for (; i < n; ++i) out[i] = opforge::to_float(in[i]);
}
template <> void cast_run<float, float16_t>(const float* in, float16_t* out, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i),
                     _mm256_cvtps_ph(_mm256_loadu_ps(in + i), _MM_FROUND_TO_NEAREST_INT));
  for (; i < n; ++i) out[i] = opforge::from_float(in[i], float16_t{});
}
#endif

#define EW_CAST_TYPES \
  float, double, float16_t, bfloat16_t, int8_t, int16_t, int32_t, int64_t, uint8_t, uint16_t, \
      uint32_t, uint64_t, bool

/// A type-erased cast of n elements, so that one parallel loop serves all 169 pairs.
using CastFn = void (*)(const void*, void*, int64_t);

template <class From, class To> void cast_erased(const void* in, void* out, int64_t n) {
  cast_run<From, To>(static_cast<const storage_t<From>*>(in), static_cast<storage_t<To>*>(out), n);
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
void cast_tensor(const KernelContext& ctx, const Tensor& in, const Tensor& out) {
  if (in.dtype() == out.dtype()) {
    parallel_copy(ctx, in.raw(), out.raw(), in.nbytes());
    return;
  }
  const CastFn fn = find_cast(in.dtype(), out.dtype());
  const char* src = static_cast<const char*>(in.raw());
  char* dst = static_cast<char*>(out.raw());
  const int64_t in_size = opforge::dtype_size(in.dtype()), out_size = opforge::dtype_size(out.dtype());
  ctx.parallel_for(in.numel(), kCheapGrain, [&](int64_t begin, int64_t end) {
    fn(src + begin * in_size, dst + begin * out_size, end - begin);
  });
}

bool castable(int64_t dtype) {
  return dtype != OPF_STRING && opforge::dtype_size(int32_t(dtype)) > 0;
}

/// Validates round_mode (from opset 24; it only affects float8e8m0, which is not supported).
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

void cast_compute(KernelContext& ctx) { cast_tensor(ctx, ctx.input(0), ctx.output(0)); }

}  // namespace
}  // namespace opforge_cpu::ew

OPFORGE_OP(Cast)
    .since(6)
    .input("input", OPFORGE_ALL_DTYPES)
    .output("output")
    .required_attr("to", opforge::AttrType::Int, "the ONNX dtype number to cast to")
    .infer(opforge_cpu::ew::cast_infer)
    .compute(opforge_cpu::ew::cast_compute);

OPFORGE_OP(Cast)
    .since(19)
    .input("input", OPFORGE_ALL_DTYPES)
    .output("output")
    .required_attr("to", opforge::AttrType::Int, "the ONNX dtype number to cast to")
    .attr("saturate", int64_t(1), "float8 only: clamp to the finite range")
    .infer(opforge_cpu::ew::cast_infer)
    .compute(opforge_cpu::ew::cast_compute);

OPFORGE_OP(Cast)
    .since(24)
    .input("input", OPFORGE_ALL_DTYPES)
    .output("output")
    .required_attr("to", opforge::AttrType::Int, "the ONNX dtype number to cast to")
    .attr("saturate", int64_t(1), "float8 only: clamp to the finite range")
    .attr("round_mode", "up", "float8e8m0 only: up, down or nearest")
    .infer(opforge_cpu::ew::cast_infer)
    .compute(opforge_cpu::ew::cast_compute);

OPFORGE_OP(CastLike)
    .since(15)
    .input("input", OPFORGE_ALL_DTYPES)
    .input("target_type", OPFORGE_ALL_DTYPES)
    .output("output")
    .infer(opforge_cpu::ew::castlike_infer)
    .compute(opforge_cpu::ew::cast_compute);

OPFORGE_OP(CastLike)
    .since(19)
    .input("input", OPFORGE_ALL_DTYPES)
    .input("target_type", OPFORGE_ALL_DTYPES)
    .output("output")
    .attr("saturate", int64_t(1), "float8 only: clamp to the finite range")
    .infer(opforge_cpu::ew::castlike_infer)
    .compute(opforge_cpu::ew::cast_compute);

OPFORGE_OP(CastLike)
    .since(24)
    .input("input", OPFORGE_ALL_DTYPES)
    .input("target_type", OPFORGE_ALL_DTYPES)
    .output("output")
    .attr("saturate", int64_t(1), "float8 only: clamp to the finite range")
    .attr("round_mode", "up", "float8e8m0 only: up, down or nearest")
    .infer(opforge_cpu::ew::castlike_infer)
    .compute(opforge_cpu::ew::cast_compute);
