/// opforge/op.h: define an operator once (schema, infer, workspace, compute) and register it.
///
///   #include <opforge/op.h>
///
///   static void scale(opforge::KernelContext& ctx) { ... }
///
///   OPFORGE_OP(scale)
///       .input("X", {opforge::f32, opforge::f64})
///       .output("Y")
///       .attr("alpha", 1.0f)
///       .infer(opforge::same_as_input0)
///       .compute(scale);
///
/// Every library built from such sources exports the C table of opforge/abi.h under the one
/// symbol `opforge_library`, defined in opforge_support.cpp, which the builder compiles once per
/// toolchain and links in; the host reads schemas from the table and calls the entry points.
#ifndef OPFORGE_OP_H_
#define OPFORGE_OP_H_

#include <cstdint>
#include <initializer_list>
#include <string>

#include "opforge/abi.h"
#include "opforge/context.h"
#include "opforge/dtype.h"
#include "opforge/tensor.h"

namespace opforge __attribute__((visibility("hidden"))) {

/// Computes output dtypes and shapes with ctx.set_output(...).
using InferFn = void (*)(InferContext&);
/// Returns the scratch bytes compute needs for these inputs.
using WorkspaceFn = int64_t (*)(InferContext&);
/// Fills the outputs.
using ComputeFn = void (*)(KernelContext&);

/// The common infer: every output has the dtype and shape of input 0.
inline void same_as_input0(InferContext& ctx) {
  for (int i = 0; i < ctx.num_outputs(); ++i) ctx.set_output_like(i, 0);
}

/// Attribute kinds, for attributes declared without a default.
enum class AttrType : int32_t {
  Float = OPF_ATTR_FLOAT,
  Int = OPF_ATTR_INT,
  String = OPF_ATTR_STRING,
  Tensor = OPF_ATTR_TENSOR,
  Graph = OPF_ATTR_GRAPH,
  Floats = OPF_ATTR_FLOATS,
  Ints = OPF_ATTR_INTS,
  Strings = OPF_ATTR_STRINGS,
  Tensors = OPF_ATTR_TENSORS,
  Graphs = OPF_ATTR_GRAPHS,
  SparseTensor = OPF_ATTR_SPARSE_TENSOR,
  TypeProto = OPF_ATTR_TYPE_PROTO,
};

/// One op's definition, filled by chained calls and frozen into an opf_op_def at load.
/// The methods live in opforge_support.cpp so that a user's source parses only declarations.
class OpDef {
 public:
  explicit OpDef(const char* name);
  OpDef(const OpDef&) = delete;
  OpDef& operator=(const OpDef&) = delete;
  const char* name() const;

  OpDef& domain(const char* d);
  /// The opset versions of the domain this definition serves: since .. until (inclusive; by
  /// default from 1 on, with no end). A library may define an op once per range, ranges not
  /// overlapping; what changed within a range is said on the attribute or dtype it concerns.
  OpDef& since(int version);
  OpDef& until(int version);
  OpDef& versions(int since_version, int until_version);
  OpDef& doc(const char* text);
  /// Where compute runs. Ops of a CUDA library default to OPF_BACKEND_CUDA (device tensors,
  /// ctx.stream()), others to OPF_BACKEND_CPU.
  OpDef& backend(opf_backend b);

  /// Inputs and outputs, in order. An empty dtype list accepts any type.
  OpDef& input(const char* name, std::initializer_list<DType> dtypes = {}, const char* doc = "");
  OpDef& optional_input(const char* name, std::initializer_list<DType> dtypes = {}, const char* doc = "");
  /// Zero or more trailing inputs of this name (only the last input may be variadic).
  OpDef& variadic_input(const char* name, std::initializer_list<DType> dtypes = {}, const char* doc = "");
  OpDef& output(const char* name, std::initializer_list<DType> dtypes = {}, const char* doc = "");
  OpDef& optional_output(const char* name, std::initializer_list<DType> dtypes = {}, const char* doc = "");
  OpDef& variadic_output(const char* name, std::initializer_list<DType> dtypes = {}, const char* doc = "");

  /// An attribute with a default; its kind follows the default's C++ type.
  OpDef& attr(const char* name, float v, const char* doc = "");
  OpDef& attr(const char* name, double v, const char* doc = "");
  OpDef& attr(const char* name, int64_t v, const char* doc = "");
  OpDef& attr(const char* name, int v, const char* doc = "");
  OpDef& attr(const char* name, bool v, const char* doc = "");
  OpDef& attr(const char* name, const char* v, const char* doc = "");
  OpDef& attr(const char* name, std::initializer_list<int64_t> v, const char* doc = "");
  OpDef& attr(const char* name, std::initializer_list<float> v, const char* doc = "");
  OpDef& attr(const char* name, std::initializer_list<const char*> v, const char* doc = "");
  /// An attribute the caller must give.
  OpDef& required_attr(const char* name, AttrType type, const char* doc = "");
  /// An attribute that may be left out; check ctx.has_attr(name) before reading it.
  OpDef& optional_attr(const char* name, AttrType type, const char* doc = "");
  /// The attribute declared last exists in these opsets only (0: no end): a node of another
  /// opset that gives it is refused. Its default still applies in every version.
  OpDef& attr_versions(int since_version, int until_version = 0);
  /// The input or output declared last also takes these dtypes, from opset `version` on.
  OpDef& dtypes_since(int version, std::initializer_list<DType> dtypes);

  /// Output `output` may be written over input `input` (same dtype and size), saving memory.
  OpDef& inplace(int output, int input);
  /// Inputs may arrive with any strides; by default the host makes them contiguous first.
  OpDef& accepts_strided();

  OpDef& infer(InferFn f);
  OpDef& workspace(WorkspaceFn f);
  OpDef& compute(ComputeFn f);

  /// The C descriptor; valid while the library is loaded. Throws on an incomplete definition.
  const opf_op_def* freeze();

  /// Where OPFORGE_OP defined it ("file.cpp:12"); set by detail::register_op.
  void impl_source(std::string where);

  /// Opaque storage, defined in opforge_support.cpp.
  struct Impl;

 private:
  Impl* impl_;
};

namespace detail {
/// Adds a new OpDef to this library's table, defined at file:line; used by OPFORGE_OP.
OpDef& register_op(const char* name, const char* file, int line);
}  // namespace detail

}  // namespace opforge

#define OPFORGE_CONCAT_INNER(a, b) a##b
#define OPFORGE_CONCAT(a, b) OPFORGE_CONCAT_INNER(a, b)

/// Registers an op named `name` (an identifier) and starts its definition chain.
#define OPFORGE_OP(name)                                                              \
  [[maybe_unused]] static ::opforge::OpDef& OPFORGE_CONCAT(opforge_op_, __COUNTER__) = \
      ::opforge::detail::register_op(#name, __FILE__, __LINE__)

#endif  // OPFORGE_OP_H_
