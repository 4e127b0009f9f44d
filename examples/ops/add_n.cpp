// A variadic input: the elementwise sum of any number of same-shaped tensors.
#include <opforge/op.h>

namespace {

void infer(opforge::InferContext& ctx) {
  OPFORGE_CHECK(ctx.num_inputs() >= 1, "add_n needs at least one input");
  for (int i = 1; i < ctx.num_inputs(); ++i) {
    OPFORGE_CHECK(ctx.input(i).dtype() == ctx.input(0).dtype(), "input ", i, " has another dtype");
    OPFORGE_CHECK(ctx.input(i).sizes() == ctx.input(0).sizes(), "input ", i, " has another shape");
  }
  ctx.set_output_like(0, 0);
}

void compute(opforge::KernelContext& ctx) {
  opforge::Tensor y = ctx.output(0);
  opforge::dispatch<float, double, int32_t, int64_t>(y.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    T* out = y.data<T>();
    const int64_t n = y.numel();
    for (int64_t i = 0; i < n; ++i) out[i] = T(0);
    for (int k = 0; k < ctx.num_inputs(); ++k) {
      const T* in = ctx.input(k).data<T>();
      for (int64_t i = 0; i < n; ++i) out[i] += in[i];
    }
  });
}

}  // namespace

OPFORGE_OP(add_n)
    .domain("com.example")
    .doc("Sum of all inputs, which share one dtype and shape.")
    .variadic_input("inputs", {opforge::f32, opforge::f64, opforge::i32, opforge::i64})
    .output("sum")
    .infer(infer)
    .compute(compute);
