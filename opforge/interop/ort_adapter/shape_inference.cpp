// shape_inference.cpp: onnxruntime's shape inference of an adapted op, from the op's infer, so
// that onnxruntime's memory planner sees its outputs' types and shapes.
#include <atomic>
#include <string>
#include <vector>

#include "attributes.h"
#include "custom_op.h"

namespace opforge_ort {

namespace {

/// An input's type and shape as shape inference sees them; unknown sizes are -1 and keep
/// their symbolic names.
struct InputMeta {
  opf_tensor view{};
  std::vector<std::string> symbols;
};

/// Null when shape inference gives no rank for `info` (a value of unknown shape).
bool read_meta(const Runtime& rt, const OrtTensorTypeAndShapeInfo* info, InputMeta& m) {
  size_t rank = 0;
  rt.check(rt.GetTensorElementType(info, &m.view.dtype), "reading an input's type");
  if (rt.TensorTypeAndShape_HasShape && !rt.TensorTypeAndShape_HasShape(info)) return false;
  rt.check(rt.GetDimensionsCount(info, &rank), "reading an input's shape");
  if (rank > OPF_MAX_DIMS) return false;
  m.view.ndim = int32_t(rank);
  rt.check(rt.GetDimensions(info, m.view.shape, rank), "reading an input's shape");
  std::vector<const char*> names(rank, nullptr);
  rt.check(rt.GetSymbolicDimensions(info, names.data(), rank), "reading an input's shape");
  for (size_t d = 0; d < rank; ++d) m.symbols.emplace_back(names[d] ? names[d] : "");
  return true;
}

/// Symbolic names for an output's unknown sizes: an input's whose shape it has, else new ones
/// (onnxruntime's planner then treats them as sizes of their own).
std::vector<std::string> symbols_for(const opf_tensor& out, const std::vector<InputMeta>& ins) {
  static std::atomic<uint64_t> fresh{0};
  for (const InputMeta& m : ins) {
    bool same = m.view.ndim == out.ndim && m.symbols.size() == size_t(out.ndim);
    for (int32_t d = 0; same && d < out.ndim; ++d) same = m.view.shape[d] == out.shape[d];
    if (same) return m.symbols;
  }
  std::vector<std::string> names(size_t(out.ndim));
  for (int32_t d = 0; d < out.ndim; ++d)
    if (out.shape[d] < 0) names[size_t(d)] = "opforge_unk_" + std::to_string(fresh++);
  return names;
}

void set_output(const Runtime& rt, OrtShapeInferContext* ctx, size_t k, const opf_tensor& out,
                const std::vector<std::string>& symbols) {
  OrtTensorTypeAndShapeInfo* info = nullptr;
  rt.check(rt.CreateTensorTypeAndShapeInfo(&info), "describing an output");
  std::vector<const char*> names;
  for (const auto& s : symbols) names.push_back(s.c_str());
  OrtStatus* st = rt.SetTensorElementType(info, out.dtype);
  if (st == nullptr) st = rt.SetDimensions(info, out.shape, size_t(out.ndim));
  if (st == nullptr) st = rt.SetSymbolicDimensions(info, names.data(), names.size());
  if (st == nullptr) st = rt.ShapeInferContext_SetOutputTypeShape(ctx, k, info);
  rt.ReleaseTensorTypeAndShapeInfo(info);
  if (st != nullptr) rt.ReleaseStatus(st);  // an output the node leaves out
}

}  // namespace

OrtStatus* infer_output_shapes(const AdaptedOp& op, OrtShapeInferContext* ctx) {
  const Runtime& rt = op.rt;
  const opf_op_def* def = op.def;
  const int32_t num_outputs = def->num_outputs;
  if (num_outputs > 0 && (def->outputs[num_outputs - 1].flags & OPF_PARAM_VARIADIC)) return nullptr;
  try {
    size_t n = 0;
    rt.check(rt.ShapeInferContext_GetInputCount(ctx, &n), "counting inputs");
    std::vector<InputMeta> metas(n);
    std::vector<opf_tensor> ins(n);
    for (size_t i = 0; i < n; ++i) {
      OrtTensorTypeAndShapeInfo* info = nullptr;  // the context's own
      rt.check(rt.ShapeInferContext_GetInputTypeShape(ctx, i, &info), "reading an input");
      if (!read_meta(rt, info, metas[i])) return nullptr;  // a rank only the run will tell
      ins[i] = metas[i].view;
    }
    NodeAttrs attrs(def);
    attrs.read(rt, ctx);
    std::vector<opf_tensor> outs(static_cast<size_t>(num_outputs));
    try {
      opforge_core::check_call(def, ins.data(), int32_t(n), num_outputs, opforge_core::Sizes::MaybeUnknown);
    } catch (const opforge_core::CallError& e) {
      return rt.status(e.what(), ORT_INVALID_ARGUMENT);
    }
    try {
      opforge_core::infer(def, ins.data(), int32_t(n), attrs.view(), outs.data(), num_outputs,
                          opforge_core::Sizes::MaybeUnknown, true);
    } catch (const opforge_core::CallError&) {
      return nullptr;  // infer needs a value, or an attribute shape inference cannot read
    }
    for (size_t k = 0; k < outs.size(); ++k)
      if (outs[k].dtype != OPF_UNDEFINED) set_output(rt, ctx, k, outs[k], symbols_for(outs[k], metas));
    return nullptr;
  } catch (const std::exception& e) {
    return rt.status(std::string(def->name) + ": " + e.what());
  }
}

}  // namespace opforge_ort
