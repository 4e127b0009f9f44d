// swish_cpu.cpp: the CPU twin of swish.cu (same name, domain and schema).
#include <opforge/op.h>

#include <cmath>

static void swish(opforge::KernelContext& ctx) {
  opforge::Tensor x = ctx.input(0), y = ctx.output(0);
  float beta = ctx.attr<float>("beta");
  opforge::dispatch<float, double>(x.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* in = x.data<T>();
    T* out = y.data<T>();
    ctx.parallel_for(x.numel(), 1 << 14, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) out[i] = in[i] / (T(1) + std::exp(-T(beta) * in[i]));
    });
  });
}

OPFORGE_OP(Swish)
    .domain("com.example")
    .doc("x * sigmoid(beta * x), on the CPU")
    .input("X", {opforge::f32, opforge::f64})
    .output("Y")
    .attr("beta", 1.0f)
    .infer(opforge::same_as_input0)
    .compute(swish);
