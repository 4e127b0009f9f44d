// ort_host_library.h: an onnxruntime custom-op library loaded into opforge, and its kernels.
#pragma once

#include <stdexcept>
#include <string>
#include <vector>

#include "ort_host.h"

namespace opforge_ort {

/// A library's op: its domain and the OrtCustomOp its RegisterCustomOps added.
struct HostOp {
  std::string domain;
  const OrtCustomOp* op;
};

/// dlopen()s `path` (never unloaded: its ops are function pointers), calls its RegisterCustomOps
/// with the host's API and returns the ops it added. Throws std::runtime_error naming the path
/// and what failed (no such symbol, the library's error status, an unimplemented entry).
std::vector<HostOp> load_host_library(const std::string& path);

/// One kernel of a library's op bound to a node.
class HostKernel {
 public:
  /// Creates the kernel (CreateKernelV2, or CreateKernel). Throws std::runtime_error with the
  /// library's message, prefixed by the op's name.
  HostKernel(const OrtCustomOp* op, OrtKernelInfo info);
  HostKernel(const HostKernel&) = delete;
  HostKernel& operator=(const HostKernel&) = delete;
  ~HostKernel();

  /// One call on the inputs in `ctx`, which gets its outputs. Thread-safe as onnxruntime's
  /// kernels are (a kernel may be called from several threads at once). Throws
  /// std::runtime_error prefixed by the op's name.
  void compute(OrtKernelContext& ctx) const;

  const OrtCustomOp* op() const { return op_; }
  const OrtKernelInfo& info() const { return info_; }

 private:
  [[noreturn]] void fail(const std::string& what) const;

  const OrtCustomOp* op_;
  OrtKernelInfo info_;
  void* kernel_ = nullptr;
};

/// Runs the op's own shape inference (op version >= 17 and InferOutputShapeFn set) on `ctx`,
/// whose outputs are sized to the node's. Returns false when the op has none; throws
/// std::runtime_error with its error.
bool infer_shapes(const OrtCustomOp* op, OrtShapeInferContext& ctx);

/// The version fields of an OrtCustomOp that onnxruntime reads only from these versions on.
constexpr uint32_t kOpV2Callbacks = 16;
constexpr uint32_t kOpShapeInference = 17;
constexpr uint32_t kOpVariadic = 14;
constexpr uint32_t kOpOptional = 8;

}  // namespace opforge_ort
