// elementwise.cu: CUDA ops the tests build and, on a GPU, launch.
#include <opforge/cuda.h>

#include "factor.cuh"

template <class T>
__global__ void scale_kernel(T* y, const T* x, float alpha, int64_t n) {
  int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (i < n) y[i] = T(OPF_TEST_FACTOR * alpha * float(x[i]));
}

static void scale(opforge::KernelContext& ctx) {
  opforge::Tensor x = ctx.input(0), y = ctx.output(0);
  int64_t n = x.numel();
  float alpha = ctx.attr<float>("alpha");
  opforge::dispatch<float, double>(x.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    scale_kernel<<<opforge::grid_for(n), 256, 0, ctx.stream()>>>(y.data<T>(), x.data<T>(), alpha, n);
  });
}

OPFORGE_OP(scale)
    .domain("com.example")
    .input("X", {opforge::f32, opforge::f64})
    .output("Y")
    .attr("alpha", 1.0f)
    .infer(opforge::same_as_input0)
    .compute(scale);

// y = a + b through a device workspace: copies a into the workspace, then adds b.
__global__ void add_kernel(float* y, const float* a, const float* b, int64_t n) {
  int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (i < n) y[i] = a[i] + b[i];
}

static int64_t add_workspace(opforge::InferContext& ctx) { return ctx.input(0).numel() * 4; }

static void add_via_workspace(opforge::KernelContext& ctx) {
  int64_t n = ctx.input(0).numel();
  float* scratch = ctx.workspace<float>();
  OPFORGE_CUDA_CHECK(cudaMemcpyAsync(scratch, ctx.input(0).data<float>(), n * sizeof(float),
                                     cudaMemcpyDeviceToDevice, ctx.stream()));
  add_kernel<<<opforge::grid_for(n), 256, 0, ctx.stream()>>>(ctx.output(0).data<float>(), scratch,
                                                           ctx.input(1).data<float>(), n);
}

OPFORGE_OP(add_via_workspace)
    .domain("com.example")
    .input("A", {opforge::f32})
    .input("B", {opforge::f32})
    .output("C")
    .infer(opforge::same_as_input0)
    .workspace(add_workspace)
    .compute(add_via_workspace);

// Launches with more threads per block than any GPU allows: the launch fails.
static void bad_launch(opforge::KernelContext& ctx) {
  int64_t n = ctx.input(0).numel();
  scale_kernel<<<1, 4096, 0, ctx.stream()>>>(ctx.output(0).data<float>(), ctx.input(0).data<float>(), 1.0f, n);
}

OPFORGE_OP(bad_launch).input("X", {opforge::f32}).output("Y").infer(opforge::same_as_input0).compute(bad_launch);

// A CUDA call that fails (no GPU has number -1), checked with OPFORGE_CUDA_CHECK.
static void bad_call(opforge::KernelContext&) { OPFORGE_CUDA_CHECK(cudaSetDevice(-1)); }

OPFORGE_OP(bad_call).input("X", {opforge::f32}).output("Y").infer(opforge::same_as_input0).compute(bad_call);

// Its infer reads an input's value (how many times to tile X), as a CPU op's may: for a CUDA op
// that value is in GPU memory, which infer, run on the host, cannot read.
static void infer_tiled(opforge::InferContext& ctx) {
  ctx.set_output(0, ctx.input(0).dtype(), {ctx.input(0).numel() * ctx.input(1).data<int64_t>()[0]});
}

static void tiled(opforge::KernelContext&) {}

OPFORGE_OP(tiled).input("X", {opforge::f32}).input("Times", {opforge::i64}).output("Y").infer(infer_tiled).compute(tiled);
