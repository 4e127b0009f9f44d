// activations.cpp: activation kernels (Relu family, sigmoids, Gelu, Mish...) and Clip.
#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <type_traits>

#include "elementwise/elementwise.h"
#include "elementwise/elementwise_math.h"

namespace opforge_cpu::ew {
namespace {

/// Output 0 = f(input 0) for float and double, and for float16 and bfloat16 computed in float;
/// f is generic over the element type.
template <class F> void map_float(KernelContext& ctx, F f, int64_t grain = kCheapGrain) {
  const int32_t dt = ctx.input(0).dtype();
  if (opforge::dispatch<opforge::float16_t, opforge::bfloat16_t>(dt, [&](auto tag) {
        using H = typename decltype(tag)::type;
        unary_map<H, H>(ctx, [f](H v) { return opforge::from_float(float(f(opforge::to_float(v))), H{}); }, grain);
      }))
    return;
  require_dispatched(opforge::dispatch<float, double>(dt, [&](auto tag) {
    using T = typename decltype(tag)::type;
    unary_map<T, T>(ctx, [f](T v) { return T(f(v)); }, grain);
  }), dt);
}

void relu_compute(KernelContext& ctx) {
  const int32_t dt = ctx.input(0).dtype();
  if (dt == OPF_FLOAT16 || dt == OPF_BFLOAT16) return map_float(ctx, [](auto v) { return v < 0 ? decltype(v)(0) : v; });
  const bool found = opforge::dispatch<float, double, int32_t, int64_t, int8_t, int16_t>(dt, [&](auto tag) {
    using T = typename decltype(tag)::type;
    unary_map<T, T>(ctx, [](T v) { return v < T(0) ? T(0) : v; });
  });
  require_dispatched(found, dt);
}

void leaky_relu_compute(KernelContext& ctx) {
  const float alpha = ctx.attr<float>("alpha");
  map_float(ctx, [=](auto v) { return vmath::select(v < 0, decltype(v)(alpha) * v, v); });
}

void thresholded_relu_compute(KernelContext& ctx) {
  const float alpha = ctx.attr<float>("alpha");
  map_float(ctx, [=](auto v) { return v > decltype(v)(alpha) ? v : decltype(v)(0); });
}

void elu_compute(KernelContext& ctx) {
  const float alpha = ctx.attr<float>("alpha");
  map_float(ctx, [=](auto v) {
    using T = decltype(v);
    return vmath::select(v > 0, v, T(alpha) * (vmath::exp(v) - T(1)));
  });
}

void selu_compute(KernelContext& ctx) {
  const float alpha = ctx.attr<float>("alpha"), gamma = ctx.attr<float>("gamma");
  map_float(ctx, [=](auto v) {
    using T = decltype(v);
    return T(gamma) * vmath::select(v > 0, v, T(alpha) * vmath::exp(v) - T(alpha));
  });
}

void celu_compute(KernelContext& ctx) {
  const float alpha = ctx.attr<float>("alpha");
  OPFORGE_CHECK(alpha != 0.f, "attribute 'alpha' must not be 0");
  map_float(ctx, [=](auto v) {
    using T = decltype(v);
    const T neg = T(alpha) * (vmath::exp(v / T(alpha)) - T(1));
    return (v > 0 ? v : T(0)) + (neg < 0 ? neg : T(0));
  });
}

void hard_sigmoid_compute(KernelContext& ctx) {
  const float alpha = ctx.attr<float>("alpha"), beta = ctx.attr<float>("beta");
  map_float(ctx, [=](auto v) {
    using T = decltype(v);
    const T y = T(alpha) * v + T(beta);
    return vmath::select(y < 0, T(0), vmath::select(y > 1, T(1), y));
  });
}

void hard_swish_compute(KernelContext& ctx) {
  map_float(ctx, [](auto v) {
    using T = decltype(v);
    const T y = v * T(1.0 / 6.0) + T(0.5);
    return v * vmath::select(y < 0, T(0), vmath::select(y > 1, T(1), y));
  });
}

void sigmoid_compute(KernelContext& ctx) {
  map_float(ctx, [](auto v) { return vmath::sigmoid(v); });
}

void tanh_compute(KernelContext& ctx) {
  map_float(ctx, [](auto v) { return vmath::tanh(v); });
}

void softplus_compute(KernelContext& ctx) {
  map_float(ctx, [](auto v) { return vmath::softplus(v); });
}

void softsign_compute(KernelContext& ctx) {
  map_float(ctx, [](auto v) { return v / (decltype(v)(1) + std::fabs(v)); });
}

void mish_compute(KernelContext& ctx) {
  map_float(ctx, [](auto v) { return v * vmath::tanh(vmath::softplus(v)); });
}

/// True for approximate = "tanh", false for "none"; throws naming anything else.
bool gelu_tanh(const std::string& approximate) {
  OPFORGE_CHECK(approximate == "none" || approximate == "tanh",
                "attribute 'approximate' must be 'none' or 'tanh', got '", approximate, "'");
  return approximate == "tanh";
}

void gelu_infer(InferContext& ctx) {
  gelu_tanh(ctx.attr<std::string>("approximate"));
  ctx.set_output_like(0, 0);
}

void gelu_compute(KernelContext& ctx) {
  if (gelu_tanh(ctx.attr<std::string>("approximate"))) {
    map_float(ctx, [](auto v) {
      using T = decltype(v);
      // 0.5 * (1 + tanh(u)) is sigmoid(2u), which keeps its precision where tanh(u) nears -1
      const T inner = T(2 * 0.7978845608028654) * (v + T(0.044715) * v * v * v);
      return v * vmath::sigmoid(inner);
    });
  } else {
    map_float(ctx, [](auto v) {
      using T = decltype(v);
      return T(0.5) * v * (T(1) + vmath::erf(v * T(0.7071067811865476)));
    });
  }
}

/// PRelu's slope broadcasts to X one way: the output has X's shape.
void prelu_infer(InferContext& ctx) {
  check_same_dtype(ctx, 0);
  const Shape x = ctx.input(0).sizes(), both = broadcast_known(x, ctx.input(1).sizes());
  OPFORGE_CHECK(both.size() == x.size(), "input 'slope' has more dimensions (",
                ctx.input(1).ndim(), ") than input 'X' (", x.size(), ")");
  for (size_t d = 0; d < x.size(); ++d)
    OPFORGE_CHECK(x[d] < 0 || both[d] == x[d], "input 'slope' does not broadcast to the shape of "
                  "input 'X' along dimension ", d);
  ctx.set_output(0, ctx.input(0).dtype(), x);
}

void prelu_compute(KernelContext& ctx) {
  const int32_t dt = ctx.input(0).dtype();
  if (opforge::dispatch<opforge::float16_t, opforge::bfloat16_t>(dt, [&](auto tag) {
        using H = typename decltype(tag)::type;  // the product rounded once, from float
        binary_map<H, H, H>(ctx, [](H x, H s) {
          const float v = opforge::to_float(x);
          return v < 0.f ? opforge::from_float(opforge::to_float(s) * v, H{}) : x;
        });
      }))
    return;
  const bool found = opforge::dispatch<float, double, int32_t, int64_t, uint32_t, uint64_t>(dt, [&](auto tag) {
    using T = typename decltype(tag)::type;
    binary_map<T, T, T>(ctx, [](T x, T s) { return vmath::select(x < T(0), T(s * x), x); });
  });
  require_dispatched(found, dt);
}

/// Clip's bound in `input` (one element) when given, else `fallback`.
template <class T> T clip_bound(const KernelContext& ctx, int input, T fallback) {
  return ctx.has_input(input) ? *ctx.input(input).data<T>() : fallback;
}

/// max(v, lo) then min(., hi), as onnxruntime: hi wins when lo > hi; NaN stays NaN.
template <class T> void clip_run(const KernelContext& ctx, T lo, T hi) {
  unary_map<T, T>(ctx, [=](T v) {
    const T a = v < lo ? lo : v;
    return hi < a ? hi : a;
  });
}

void clip_infer(InferContext& ctx) {
  for (int i = 1; i < 3; ++i) {
    if (!ctx.has_input(i)) continue;
    const int64_t n = ctx.input(i).numel();
    OPFORGE_CHECK(n < 0 || n == 1, "input '", i == 1 ? "min" : "max", "' must hold one value, got ",
                  n);
  }
  check_same_dtype(ctx, 0);
  ctx.set_output_like(0, 0);
}

/// Clip from opset 11: bounds as optional inputs.
void clip_compute(KernelContext& ctx) {
  const int32_t dt = ctx.input(0).dtype();
  if (opforge::dispatch<opforge::float16_t, opforge::bfloat16_t>(dt, [&](auto tag) {
        using H = typename decltype(tag)::type;  // bounds and values compared as floats
        const float lo = ctx.has_input(1) ? opforge::to_float(*ctx.input(1).data<H>()) : -INFINITY;
        const float hi = ctx.has_input(2) ? opforge::to_float(*ctx.input(2).data<H>()) : INFINITY;
        unary_map<H, H>(ctx, [=](H h) {
          const float v = opforge::to_float(h), a = v < lo ? lo : v;
          return hi < a ? opforge::from_float(hi, H{}) : a == v ? h : opforge::from_float(a, H{});
        });
      }))
    return;
  require_dispatched(opforge::dispatch<OPFORGE_EW_REAL_TYPES>(dt, [&](auto tag) {
    using T = typename decltype(tag)::type;
    using limits = std::numeric_limits<T>;
    const T lo = limits::has_infinity ? -limits::infinity() : limits::lowest();
    const T hi = limits::has_infinity ? limits::infinity() : limits::max();
    clip_run<T>(ctx, clip_bound(ctx, 1, lo), clip_bound(ctx, 2, hi));
  }), dt);
}

/// Clip of opset 6: bounds as attributes.
void clip_attr_compute(KernelContext& ctx) {
  const float lo = ctx.attr<float>("min"), hi = ctx.attr<float>("max");
  const int32_t dt = ctx.input(0).dtype();
  if (dt == OPF_FLOAT16 || dt == OPF_BFLOAT16)
    return map_float(ctx, [=](auto v) { const auto a = v < lo ? lo : v; return hi < a ? hi : a; });
  require_dispatched(opforge::dispatch<float, double>(dt, [&](auto tag) {
    using T = typename decltype(tag)::type;
    clip_run<T>(ctx, T(lo), T(hi));
  }), dt);
}

}  // namespace
}  // namespace opforge_cpu::ew

/// Registers a float activation NAME(IN) -> OUT that may overwrite its input.
#define EW_ACTIVATION(NAME, SINCE, IN, OUT, COMPUTE)                                           \
  OPFORGE_OP(NAME).since(SINCE).input(IN, OPFORGE_EW_FLOAT_HALF_DTYPES).output(OUT).inplace(0, 0)\
      .infer(opforge::same_as_input0).compute(opforge_cpu::ew::COMPUTE)

OPFORGE_OP(Relu).since(6)
    .input("X", OPFORGE_EW_FLOAT_HALF_DTYPES).dtypes_since(14, {opforge::i32, opforge::i64, opforge::i8, opforge::i16})
    .output("Y").inplace(0, 0).infer(opforge::same_as_input0).compute(opforge_cpu::ew::relu_compute);

EW_ACTIVATION(LeakyRelu, 6, "X", "Y", leaky_relu_compute).attr("alpha", 0.01f);
EW_ACTIVATION(ThresholdedRelu, 10, "X", "Y", thresholded_relu_compute).attr("alpha", 1.0f);
EW_ACTIVATION(Elu, 6, "X", "Y", elu_compute).attr("alpha", 1.0f);
EW_ACTIVATION(Selu, 6, "X", "Y", selu_compute)
    .attr("alpha", 1.67326319217681884765625f)
    .attr("gamma", 1.05070102214813232421875f);
EW_ACTIVATION(Celu, 12, "X", "Y", celu_compute).attr("alpha", 1.0f);
EW_ACTIVATION(HardSigmoid, 6, "X", "Y", hard_sigmoid_compute).attr("alpha", 0.2f).attr("beta", 0.5f);
EW_ACTIVATION(HardSwish, 14, "X", "Y", hard_swish_compute);
EW_ACTIVATION(Sigmoid, 6, "X", "Y", sigmoid_compute);
EW_ACTIVATION(Tanh, 6, "input", "output", tanh_compute);
EW_ACTIVATION(Softplus, 1, "X", "Y", softplus_compute);
EW_ACTIVATION(Softsign, 1, "input", "output", softsign_compute);
EW_ACTIVATION(Mish, 18, "X", "Y", mish_compute);


OPFORGE_OP(Gelu)
    .since(20)
    .input("X", OPFORGE_EW_FLOAT_HALF_DTYPES)
    .output("Y")
    .attr("approximate", "none", "none: exact, with erf; tanh: the tanh approximation")
    .inplace(0, 0)
    .infer(opforge_cpu::ew::gelu_infer)
    .compute(opforge_cpu::ew::gelu_compute);

// onnxruntime's contrib Gelu (the erf form), which fusions emit for models before opset 20.
OPFORGE_OP(Gelu)
    .domain("com.microsoft")
    .since(1)
    .input("X", OPFORGE_EW_FLOAT_HALF_DTYPES)
    .output("Y")
    .attr("approximate", "none", "always none: the contrib op is the erf form")
    .inplace(0, 0)
    .infer(opforge_cpu::ew::gelu_infer)
    .compute(opforge_cpu::ew::gelu_compute);

#define EW_PRELU9_ADDED {opforge::i32, opforge::i64, opforge::u32, opforge::u64}
OPFORGE_OP(PRelu)
    .since(7)
    .input("X", OPFORGE_EW_FLOAT_HALF_DTYPES).dtypes_since(9, EW_PRELU9_ADDED)
    .input("slope", OPFORGE_EW_FLOAT_HALF_DTYPES).dtypes_since(9, EW_PRELU9_ADDED)
    .output("Y")
    .inplace(0, 0)
    .infer(opforge_cpu::ew::prelu_infer)
    .compute(opforge_cpu::ew::prelu_compute);

OPFORGE_OP(Clip)
    .since(6)
    .input("input", OPFORGE_EW_FLOAT_HALF_DTYPES)
    .output("output")
    .attr("max", 3.4028234663852886e+38f)
    .attr("min", -3.4028234663852886e+38f)
    .inplace(0, 0)
    .infer(opforge::same_as_input0)
    .compute(opforge_cpu::ew::clip_attr_compute);

// Opset 11 made min and max inputs (before: attributes, above); opset 12 added the integers.
#define EW_CLIP12_ADDED {opforge::i32, opforge::i64, opforge::i8, opforge::i16, opforge::u8, opforge::u16, \
                         opforge::u32, opforge::u64}
OPFORGE_OP(Clip)
    .since(11)
    .input("input", OPFORGE_EW_FLOAT_HALF_DTYPES).dtypes_since(12, EW_CLIP12_ADDED)
    .optional_input("min", OPFORGE_EW_FLOAT_HALF_DTYPES).dtypes_since(12, EW_CLIP12_ADDED)
    .optional_input("max", OPFORGE_EW_FLOAT_HALF_DTYPES).dtypes_since(12, EW_CLIP12_ADDED)
    .output("output")
    .inplace(0, 0)
    .infer(opforge_cpu::ew::clip_infer)
    .compute(opforge_cpu::ew::clip_compute);

