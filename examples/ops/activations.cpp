// Elementwise activations: one definition serves float32, float64 and float16.
#include <opforge/op.h>

#include <cmath>

namespace {

// float16 and float32 compute in float32, float64 in float64
template <class T> T load(T v) { return v; }
float load(opforge::float16_t v) { return opforge::to_float(v); }
template <class T, class C> T store(C v, T) { return T(v); }
opforge::float16_t store(float v, opforge::float16_t tag) { return opforge::from_float(v, tag); }

void leaky_relu(opforge::KernelContext& ctx) {
  opforge::Tensor x = ctx.input(0), y = ctx.output(0);
  const float alpha = ctx.attr<float>("alpha");
  opforge::dispatch<float, double, opforge::float16_t>(x.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* in = x.data<T>();
    T* out = y.data<T>();
    ctx.parallel_for(x.numel(), 1 << 14, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) {
        auto v = load(in[i]);
        out[i] = store(v > 0 ? v : decltype(v)(alpha) * v, T{});
      }
    });
  });
}

}  // namespace

OPFORGE_OP(leaky_relu)
    .domain("com.example")
    .doc("y = x if x > 0 else alpha * x")
    .input("X", {opforge::f32, opforge::f64, opforge::f16})
    .output("Y", {opforge::f32, opforge::f64, opforge::f16})
    .attr("alpha", 0.01f, "slope for negative inputs")
    .inplace(0, 0)
    .infer(opforge::same_as_input0)
    .compute(leaky_relu);
