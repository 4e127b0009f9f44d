// kernel.h: one node's kernel in onnxruntime, calling its op through opforge's call sequence.
#pragma once

#include <vector>

#include "attributes.h"

namespace opforge_ort {

/// What CreateKernelV2 makes for a node: its attributes (and state), which outputs the node
/// names, and where workspace and unread outputs come from.
class Kernel {
 public:
  /// Reads the node's attributes and outputs; throws RuntimeError naming the op.
  Kernel(const Runtime& rt, const opf_op_def* def, bool cuda, const OrtKernelInfo* info);
  Kernel(const Kernel&) = delete;
  Kernel& operator=(const Kernel&) = delete;
  ~Kernel();

  /// One call: inputs from `ctx`, call_op, outputs into `ctx`. Returns null or an error
  /// status whose message starts with the op's name.
  OrtStatus* compute(OrtKernelContext* ctx);

  const Runtime& rt;
  const opf_op_def* const def;
  const bool cuda;

 private:
  friend class OrtHost;
  void read_inputs(OrtKernelContext* ctx, std::vector<opf_tensor>& ins) const;
  opf_tensor view_of(const OrtValue* value, bool input) const;
  OrtAllocator* allocator(OrtKernelContext* ctx);

  NodeAttrs attrs_;
  std::vector<opforge_core::Need> need_;  ///< per output the node declares
  OrtAllocator* allocator_ = nullptr;     ///< the kernel's own (API >= 18), released with it
  OrtMemoryInfo* memory_ = nullptr;       ///< where to ask a call's allocator (API 16-17)
};

}  // namespace opforge_ort
