// opforge_cuda_support.cpp: how a CUDA library runs its CUDA ops. Linked, with the CUDA runtime
// (statically, so the library loads on a machine without CUDA), into CUDA libraries only.
//
// Before an op's compute: a device must be there (else an error that says why: no driver, a
// driver older than this runtime, no GPU), every tensor must be in the memory of one GPU, and
// that GPU becomes current (the caller's is current again after). After it: a failed kernel
// launch (cudaGetLastError) becomes the op's error. The op's own CUDA calls are checked with
// OPFORGE_CUDA_CHECK (opforge/cuda.h).
#include <cuda_runtime_api.h>

#include <string>

#include "cuda_hook.h"
#include "opforge/op.h"

namespace opforge {
namespace {

std::string cuda_version(int v) { return str(v / 1000, ".", (v % 1000) / 10); }

// Why no CUDA op can run in this process ("" when they can); asked once.
const std::string& unavailable() {
  static const std::string why = []() -> std::string {
    int count = 0;
    cudaError_t status = cudaGetDeviceCount(&count);
    if (status == cudaSuccess && count > 0) return "";
    int driver = 0;
    cudaDriverGetVersion(&driver);
    if (driver == 0)
      return "no CUDA device is available: no NVIDIA driver is installed on this machine";
    if (status == cudaErrorInsufficientDriver)
      return str("the NVIDIA driver is too old: it supports CUDA ", cuda_version(driver),
                 ", but this library was built with the CUDA ", cuda_version(CUDART_VERSION),
                 " runtime; update the driver, or build with an nvcc of CUDA ", cuda_version(driver),
                 " or older (set NVCC)");
    if (status == cudaSuccess) return "no CUDA device is available: the driver sees no GPU";
    return str("no CUDA device is available: ", cudaGetErrorName(status), " (",
               cudaGetErrorString(status), ")");
  }();
  return why;
}

// The GPU holding every tensor of the call (-1 if none has data); throws for host memory.
int device_of(const opf_compute_ctx* c) {
  int device = -1;
  auto visit = [&](const opf_tensor* ts, int32_t n, const char* kind) {
    for (int32_t i = 0; i < n; ++i) {
      const opf_tensor& t = ts[i];
      if (t.dtype == OPF_UNDEFINED) continue;  // an absent optional input or output
      if (t.device_type != OPF_CUDA)
        throw Error(str(kind, " #", i, " is in host memory; a CUDA op takes GPU tensors"));
      if (device < 0) device = t.device_id;
      if (t.device_id != device)
        throw Error(str(kind, " #", i, " is on GPU ", t.device_id, " and another tensor on GPU ", device));
    }
  };
  visit(c->inputs, c->num_inputs, "input");
  visit(c->outputs, c->num_outputs, "output");
  return device;
}

// The call's GPU made current for the op, and the caller's current again when the op ends: the
// host (cupy, onnxruntime, the user's own code) keeps its current device across a call.
class DeviceSwitch {
 public:
  explicit DeviceSwitch(int device) {
    if (device < 0) return;
    if (cudaGetDevice(&previous_) != cudaSuccess) previous_ = -1;
    if (previous_ == device) return;
    cudaError_t set = cudaSetDevice(device);
    if (set != cudaSuccess) throw Error(str("cannot use GPU ", device, ": ", cudaGetErrorString(set)));
  }
  ~DeviceSwitch() {
    int now = -1;
    if (previous_ < 0 || (cudaGetDevice(&now) == cudaSuccess && now == previous_)) return;
    if (cudaSetDevice(previous_) != cudaSuccess) cudaGetLastError();
  }
  DeviceSwitch(const DeviceSwitch&) = delete;
  DeviceSwitch& operator=(const DeviceSwitch&) = delete;

 private:
  int previous_ = -1;
};

void run_cuda(const opf_compute_ctx* c, ComputeFn fn) {
  if (!unavailable().empty()) throw Error(unavailable());
  DeviceSwitch on_device(device_of(c));
  cudaGetLastError();  // a launch that failed before this op is not its failure
  KernelContext ctx(c);
  fn(ctx);
  cudaError_t launch = cudaGetLastError();
  if (launch != cudaSuccess)
    throw Error(str("a kernel launch failed: ", cudaGetErrorName(launch), " (", cudaGetErrorString(launch),
                    ")"));
}

struct Install {
  Install() { detail::cuda_runner = &run_cuda; }
} install;

}  // namespace
}  // namespace opforge
