// attributes.h: a node's attribute values as an op reads them, read from onnxruntime.
#pragma once

#include <deque>
#include <string>
#include <vector>

#include "invoke.h"
#include "runtime.h"

namespace opforge_ort {

/// One node's attributes in declaration order, defaults filled, owning every buffer the
/// opf_attr fields point at, and the slot of the node's state (released with it).
class NodeAttrs {
 public:
  explicit NodeAttrs(const opf_op_def* def);
  NodeAttrs(const NodeAttrs&) = delete;
  NodeAttrs& operator=(const NodeAttrs&) = delete;
  ~NodeAttrs();

  /// Reads every declared attribute a kernel's node gives. Throws RuntimeError naming the op
  /// and attribute for one of another kind, a missing required one, or a kind this
  /// onnxruntime cannot hand to custom ops.
  void read(const Runtime& rt, const OrtKernelInfo* info);
  /// Reads the attributes shape inference can see (no tensors); others keep their defaults.
  void read(const Runtime& rt, const OrtShapeInferContext* ctx);

  opforge_core::AttrView view() { return {attrs_.data(), int32_t(attrs_.size()), &state_}; }

 private:
  bool read_kind(const Runtime& rt, const OrtKernelInfo* info, const char* name, int32_t kind, opf_attr& out);
  bool read_op_attr(const Runtime& rt, const OrtOpAttr* attr, int32_t kind, opf_attr& out);
  void set_string(opf_attr& out, std::string value);
  void set_strings(opf_attr& out, std::vector<std::string> values);
  void set_tensor(const Runtime& rt, opf_attr& out, OrtValue* value);
  [[noreturn]] void refuse(const opf_attr_def& a, const std::string& why) const;

  const opf_op_def* def_;
  std::vector<opf_attr> attrs_;
  std::deque<std::string> strings_;
  std::deque<std::vector<int64_t>> ints_;
  std::deque<std::vector<float>> floats_;
  std::deque<std::vector<const char*>> string_ptrs_;
  std::deque<std::vector<unsigned char>> bytes_;
  std::deque<opf_tensor> tensors_;
  opf_state* state_ = nullptr;
};

/// "float", "ints"...: an attribute kind as messages name it.
const char* kind_name(int32_t kind);

}  // namespace opforge_ort
