// activations_glu.cpp: SwiGLU (opset 28): y = a * sigmoid(alpha * a) * b, elementwise over two
// inputs of one shape; and its gate Swish (opset 24): y = x * sigmoid(alpha * x).
#include <algorithm>
#include <cmath>

#include "common/float_io.h"
#include "reduce/reduce.h"

namespace {

using namespace opforge_cpu;
using opforge_cpu::reduction::grain_for;

void infer(InferContext& ctx) {
  Tensor a = ctx.input(0), b = ctx.input(1);
  OPFORGE_CHECK(a.dtype() == b.dtype(), "inputs A and B must share a dtype, got ", opforge::dtype_name(a.dtype()),
                " and ", opforge::dtype_name(b.dtype()));
  bool same = a.ndim() == b.ndim();
  for (int d = 0; same && d < a.ndim(); ++d) same = a.size(d) < 0 || b.size(d) < 0 || a.size(d) == b.size(d);
  OPFORGE_CHECK(same, "inputs A and B must have the same shape (SwiGLU does not broadcast)");
  ctx.set_output_like(0, 0);
}

void compute(KernelContext& ctx) {
  Tensor a = ctx.input(0), b = ctx.input(1), y = ctx.output(0);
  const double alpha = ctx.attr<float>("alpha");
  const int64_t n = y.numel();
  dispatch_storage(a, "A", [&](auto tag) {
    using S = typename decltype(tag)::type;
    using C = std::conditional_t<std::is_same_v<S, double>, double, float>;
    const S* pa = static_cast<const S*>(a.raw());
    const S* pb = static_cast<const S*>(b.raw());
    S* py = static_cast<S*>(y.raw());
    const C k = C(alpha);
    ctx.parallel_for(n, grain_for(8), [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) {
        const C va = load_as<C>(pa[i]);
        py[i] = store_as<S>(va / (C(1) + std::exp(-k * va)) * load_as<C>(pb[i]));
      }
    });
  });
}

/// y = x * sigmoid(alpha * x) over n floats, from e^-|alpha x| so the exponent never overflows
/// and the loop vectorises.
void swish_floats(const float* x, float* y, int64_t n, float alpha) {
  for (int64_t i = 0; i < n; ++i) {
    const float z = alpha * x[i], e = reduction::exp_fast(-std::abs(z));
    y[i] = x[i] * (reduction::select_bits(z >= 0.f, 1.f, e) / (1.f + e));
  }
}

/// Swish over [begin, end) of storage S: floats directly, 16-bit floats through a float block,
/// doubles with std::exp.
template <class S> void swish_range(const S* x, S* y, int64_t begin, int64_t end, float alpha) {
  if constexpr (std::is_same_v<S, float>) {
    swish_floats(x + begin, y + begin, end - begin, alpha);
  } else if constexpr (std::is_same_v<S, double>) {
    for (int64_t i = begin; i < end; ++i) y[i] = x[i] / (1 + std::exp(-double(alpha) * x[i]));
  } else {
    constexpr int64_t kBlock = 256;
    float in[kBlock], out[kBlock];
    for (int64_t b = begin; b < end; b += kBlock) {
      const int64_t n = std::min(kBlock, end - b);
      for (int64_t i = 0; i < n; ++i) in[i] = load_as<float>(x[b + i]);
      swish_floats(in, out, n, alpha);
      for (int64_t i = 0; i < n; ++i) y[b + i] = store_as<S>(out[i]);
    }
  }
}

void swish(KernelContext& ctx) {
  Tensor x = ctx.input(0), y = ctx.output(0);
  const float alpha = ctx.attr<float>("alpha");
  dispatch_storage(x, "X", [&](auto tag) {
    using S = typename decltype(tag)::type;
    const S* px = static_cast<const S*>(x.raw());
    S* py = static_cast<S*>(y.raw());
    ctx.parallel_for(y.numel(), grain_for(8), [&](int64_t begin, int64_t end) {
      swish_range(px, py, begin, end, alpha);
    });
  });
}

}  // namespace

OPFORGE_OP(Swish)
    .since(24)
    .input("X", {opforge::f32, opforge::f64, opforge::f16, opforge::bf16})
    .output("Y")
    .attr("alpha", 1.0f)
    .inplace(0, 0)
    .infer(opforge::same_as_input0)
    .compute(swish);

OPFORGE_OP(SwiGLU)
    .since(28)
    .input("A", {opforge::f32, opforge::f64, opforge::f16, opforge::bf16})
    .input("B", {opforge::f32, opforge::f64, opforge::f16, opforge::bf16})
    .output("Y")
    .attr("alpha", 1.0f)
    .inplace(0, 0)
    .infer(infer)
    .compute(compute);
