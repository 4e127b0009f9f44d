// activations_glu.cpp: SwiGLU (opset 28): y = a * sigmoid(alpha * a) * b, elementwise over two
// inputs of one shape; and its gate Swish (opset 24): y = x * sigmoid(alpha * x).
#include <cmath>

#include "float_io.h"
#include "reduce.h"

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

void swish(KernelContext& ctx) {
  Tensor x = ctx.input(0), y = ctx.output(0);
  const double alpha = ctx.attr<float>("alpha");
  const int64_t n = y.numel();
  dispatch_storage(x, "X", [&](auto tag) {
    using S = typename decltype(tag)::type;
    using C = std::conditional_t<std::is_same_v<S, double>, double, float>;
    const S* px = static_cast<const S*>(x.raw());
    S* py = static_cast<S*>(y.raw());
    const C k = C(alpha);
    ctx.parallel_for(n, grain_for(8), [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) {
        const C v = load_as<C>(px[i]);
        py[i] = store_as<S>(v / (C(1) + std::exp(-k * v)));
      }
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
