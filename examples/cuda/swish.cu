// swish.cu: Swish(x) = x * sigmoid(beta * x), a CUDA op (com.example::Swish). Its CPU twin,
// swish_cpu.cpp, has the same name, domain and schema, so a model using Swish runs on a GPU
// with this kernel and on a CPU-only machine with the twin.
#include <opforge/cuda.h>

template <class T>
__global__ void swish_kernel(T* y, const T* x, float beta, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    float v = float(x[i]);
    y[i] = T(v / (1.0f + __expf(-beta * v)));
  }
}

static void swish(opforge::KernelContext& ctx) {
  opforge::Tensor x = ctx.input(0), y = ctx.output(0);
  int64_t n = x.numel();
  float beta = ctx.attr<float>("beta");
  unsigned int blocks = opforge::grid_for(n) < 65535u ? opforge::grid_for(n) : 65535u;
  opforge::dispatch<float, double>(x.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    swish_kernel<<<blocks, 256, 0, ctx.stream()>>>(y.data<T>(), x.data<T>(), beta, n);
  });
}

OPFORGE_OP(Swish)
    .domain("com.example")
    .doc("x * sigmoid(beta * x), on the GPU")
    .input("X", {opforge::f32, opforge::f64})
    .output("Y")
    .attr("beta", 1.0f)
    .infer(opforge::same_as_input0)
    .compute(swish);
