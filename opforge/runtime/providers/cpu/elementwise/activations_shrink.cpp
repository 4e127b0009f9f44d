// activations_shrink.cpp: Shrink (opset 9): y = x + bias below -lambd, x - bias above lambd, 0
// between, for every numeric dtype. Computed in double and converted back, as onnx's reference
// computes in float and casts (a result out of an integer dtype's range wraps, as numpy's cast).
#include <cstdint>
#include <type_traits>

#include "common/float_io.h"
#include "reduce/reduce.h"

namespace {

using namespace opforge_cpu;
using opforge_cpu::reduction::grain_for;

/// v converted to T; integers truncate toward zero and wrap through int64 (never a float-to-
/// unsigned conversion of a negative value, which C++ leaves undefined).
template <class T> T from_double(double v) {
  if constexpr (std::is_integral_v<T>)
    return T(int64_t(v));
  else
    return store_as<T>(v);
}

template <class T> void shrink_run(KernelContext& ctx, double lambd, double bias) {
  const Tensor x = ctx.input(0);
  const T* in = x.data<T>();
  T* out = ctx.output(0).data<T>();
  ctx.parallel_for(x.numel(), grain_for(2), [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      const double v = load_as<double>(in[i]);
      out[i] = from_double<T>(v < -lambd ? v + bias : v > lambd ? v - bias : 0.0);
    }
  });
}

void compute(KernelContext& ctx) {
  const double lambd = ctx.attr<float>("lambd"), bias = ctx.attr<float>("bias");
  const int32_t dt = ctx.input(0).dtype();
  const bool found = opforge::dispatch<float, double, opforge::float16_t, opforge::bfloat16_t, int8_t, int16_t,
                                       int32_t, int64_t, uint8_t, uint16_t, uint32_t, uint64_t>(dt, [&](auto tag) {
    shrink_run<typename decltype(tag)::type>(ctx, lambd, bias);
  });
  OPFORGE_CHECK(found, "input 'input' has unsupported dtype ", opforge::dtype_name(dt));
}

}  // namespace

OPFORGE_OP(Shrink)
    .since(9)
    .input("input", {opforge::f32, opforge::f64, opforge::f16, opforge::bf16, opforge::i8, opforge::i16, opforge::i32,
                     opforge::i64, opforge::u8, opforge::u16, opforge::u32, opforge::u64})
    .output("output")
    .attr("lambd", 0.5f)
    .attr("bias", 0.0f)
    .inplace(0, 0)
    .infer(opforge::same_as_input0)
    .compute(compute);
