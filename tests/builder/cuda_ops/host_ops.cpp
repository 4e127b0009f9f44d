// host_ops.cpp: the host-compiled half of the test CUDA library. `numel` runs on the CPU
// (it says so with .backend), `scale_host_launch` is a CUDA op whose kernel lives in launch.cu.
#include <opforge/op.h>
#include <cuda_runtime_api.h>

void launch_negate(float* y, const float* x, int64_t n, cudaStream_t stream);

static void numel(opforge::KernelContext& ctx) { ctx.output(0).data<int64_t>()[0] = ctx.input(0).numel(); }
static void one_int64(opforge::InferContext& ctx) { ctx.set_output(0, opforge::DType::Int64, {1}); }

OPFORGE_OP(numel).input("X").output("N").backend(OPF_BACKEND_CPU).infer(one_int64).compute(numel);

static void negate(opforge::KernelContext& ctx) {
  launch_negate(ctx.output(0).data<float>(), ctx.input(0).data<float>(), ctx.input(0).numel(), ctx.stream());
}

OPFORGE_OP(negate).input("X", {opforge::f32}).output("Y").infer(opforge::same_as_input0).compute(negate);
