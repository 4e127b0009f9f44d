// launch.cu: a kernel and its launcher, called from host_ops.cpp.
#include <cuda_runtime_api.h>

#include <cstdint>

__global__ void negate_kernel(float* y, const float* x, int64_t n) {
  int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (i < n) y[i] = -x[i];
}

void launch_negate(float* y, const float* x, int64_t n, cudaStream_t stream) {
  negate_kernel<<<unsigned((n + 255) / 256 > 0 ? (n + 255) / 256 : 1), 256, 0, stream>>>(y, x, n);
}
