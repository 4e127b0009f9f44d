/// opforge/cuda.h: <opforge/op.h> plus what a CUDA op needs: the CUDA runtime API,
/// OPFORGE_CUDA_CHECK, and a grid-size helper.
///
///   #include <opforge/cuda.h>
///
///   __global__ void scale_kernel(float* y, const float* x, float a, int64_t n) { ... }
///
///   static void scale(opforge::KernelContext& ctx) {
///     int64_t n = ctx.input(0).numel();
///     scale_kernel<<<opforge::grid_for(n), 256, 0, ctx.stream()>>>(
///         ctx.output(0).data<float>(), ctx.input(0).data<float>(), ctx.attr<float>("alpha"), n);
///   }
///
/// A failed launch is caught after compute returns and reported as the op's error.
#ifndef OPFORGE_CUDA_H_
#define OPFORGE_CUDA_H_

#include <cuda_runtime_api.h>

#include <cstdint>

#include "opforge/op.h"

namespace opforge __attribute__((visibility("hidden"))) {

/// Throws opforge::Error naming a failed CUDA call, its error and where it was made; the caller
/// gets opforge.OpError starting with the op's name.
inline void cuda_check(cudaError_t status, const char* call, const char* file, int line) {
  if (status != cudaSuccess)
    throw Error(str("CUDA error ", cudaGetErrorName(status), " (", cudaGetErrorString(status), ") in ",
                    call, " at ", file, ":", line));
}

/// Blocks of `threads` threads that cover `n` elements (at least one block).
inline unsigned int grid_for(int64_t n, unsigned int threads = 256) {
  int64_t blocks = (n + threads - 1) / threads;
  return static_cast<unsigned int>(blocks > 0 ? blocks : 1);
}

}  // namespace opforge

/// Checks a CUDA runtime call: OPFORGE_CUDA_CHECK(cudaMemsetAsync(p, 0, n, ctx.stream()));
#define OPFORGE_CUDA_CHECK(expr) ::opforge::cuda_check((expr), #expr, __FILE__, __LINE__)

#endif  // OPFORGE_CUDA_H_
