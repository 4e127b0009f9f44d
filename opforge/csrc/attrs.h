// attrs.h: Python attribute values -> the opf_attr array an op reads, defaults filled.
#pragma once

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "invoke.h"
#include "opforge/abi.h"

namespace opforge_core {

namespace py = pybind11;

/// One op's attributes in declaration order, owning every buffer the opf_attr fields point at.
/// Built once per node by the runtime, or per call by an eager call.
class AttrPack {
 public:
  /// Fills defaults from `op`, then the values in `given` (name -> Python value). Raises
  /// TypeError naming the op and attribute for unknown names, missing required ones, values
  /// of the wrong kind and, for a node of `opset` (0: an eager call, any version), attributes
  /// that version of the op does not have.
  AttrPack(const opf_op_def* op, const py::dict& given, int opset = 0);
  AttrPack(const AttrPack&) = delete;
  AttrPack& operator=(const AttrPack&) = delete;
  ~AttrPack();

  const opf_attr* data() const { return attrs_.data(); }
  int32_t size() const { return int32_t(attrs_.size()); }
  /// The slot where the op keeps state made from these attributes (opf_compute_ctx::state).
  opf_state** state_slot() const { return &state_; }
  /// Keeps `owner` (the op's library) alive until the state its code made is released.
  void keep_alive(std::shared_ptr<const void> owner) { owner_ = std::move(owner); }
  /// What a call reads: the values and the state's slot.
  AttrView view() const { return AttrView{attrs_.data(), int32_t(attrs_.size()), &state_, opset_}; }

 private:
  void set(const opf_op_def* op, const opf_attr_def& def, opf_attr& out, const py::handle& value);
  void set_tensors(opf_attr& out, const py::handle& value, bool many);

  std::vector<opf_attr> attrs_;
  int32_t opset_ = 0;
  std::deque<std::string> strings_;
  std::deque<std::vector<int64_t>> ints_;
  std::deque<std::vector<float>> floats_;
  std::deque<std::vector<const char*>> string_ptrs_;
  std::deque<std::vector<opf_tensor>> tensors_;
  std::vector<py::object> keep_;
  mutable opf_state* state_ = nullptr;
  std::shared_ptr<const void> owner_;  // released after state_ (declared last)
};

/// A Python-facing name for an attribute kind ("float", "ints").
const char* attr_type_name(int32_t type);

/// The Python value of an attribute (None when absent).
py::object attr_value(const opf_attr& a);

// Text from C++ as a Python str: bytes that are not UTF-8 (a string attribute holds any bytes,
// and messages quote them) come out as \xNN escapes instead of raising UnicodeDecodeError.
py::str py_text(const char* s, size_t n);
inline py::str py_text(const std::string& s) { return py_text(s.data(), s.size()); }

}  // namespace opforge_core
