// ml_tree_ensemble.cpp: ai.onnx.ml's TreeEnsembleRegressor and TreeEnsembleClassifier (opsets 1
// and 3): their attributes read into a Model once per node, scored by ml_tree_score.h, so one
// thread gives onnxruntime's results bit for bit. String class labels are not offered (a string
// tensor cannot cross the op ABI): a node with classlabels_strings runs here with labels 0..n-1,
// mapped to its strings by the CPU provider's Python wrapper (providers/cpu/ml_labels.py).
#include <algorithm>
#include <vector>

#include "ml/ml_tree_score.h"

namespace {

using namespace opforge_ml;
using opforge::InferContext;
using opforge::KernelContext;
using opforge::Tensor;

std::vector<int64_t> ints(const KernelContext& ctx, const char* name) {
  return ctx.has_attr(name) ? ctx.attr<std::vector<int64_t>>(name) : std::vector<int64_t>();
}

/// A float list attribute, or its double/float tensor twin (opset 3's *_as_tensor) when given.
template <class T> std::vector<T> reals(const KernelContext& ctx, const char* name, const char* tensor_name) {
  if (ctx.has_attr(tensor_name)) {
    const Tensor t = ctx.attr<Tensor>(tensor_name);
    if (t.dtype() == OPF_FLOAT64) return std::vector<T>(t.data<double>(), t.data<double>() + t.numel());
    OPFORGE_CHECK(t.dtype() == OPF_FLOAT32, tensor_name, " must hold float or double values");
    return std::vector<T>(t.data<float>(), t.data<float>() + t.numel());
  }
  if (!ctx.has_attr(name)) return {};
  const std::vector<float> v = ctx.attr<std::vector<float>>(name);
  return std::vector<T>(v.begin(), v.end());
}

template <class T> Model<T> read_model(const KernelContext& ctx, bool classifier) {
  const std::string prefix = classifier ? "class_" : "target_";
  ForestSpec<T> s;
  s.tree_ids = ints(ctx, "nodes_treeids");
  s.node_ids = ints(ctx, "nodes_nodeids");
  s.features = ints(ctx, "nodes_featureids");
  s.true_ids = ints(ctx, "nodes_truenodeids");
  s.false_ids = ints(ctx, "nodes_falsenodeids");
  s.missing_true = ints(ctx, "nodes_missing_value_tracks_true");
  s.thresholds = reals<T>(ctx, "nodes_values", "nodes_values_as_tensor");
  if (ctx.has_attr("nodes_modes")) s.modes = ctx.attr<std::vector<std::string>>("nodes_modes");
  s.leaf_tree_ids = ints(ctx, (prefix + "treeids").c_str());
  s.leaf_node_ids = ints(ctx, (prefix + "nodeids").c_str());
  s.leaf_targets = ints(ctx, (prefix + "ids").c_str());
  s.leaf_weights = reals<T>(ctx, (prefix + "weights").c_str(), (prefix + "weights_as_tensor").c_str());
  Model<T> m;
  m.classifier = classifier;
  if (classifier) {
    m.labels = ints(ctx, "classlabels_int64s");
    OPFORGE_CHECK(m.labels.size() >= 2, "classlabels_int64s must name at least two classes");
    s.targets = int64_t(m.labels.size());
  } else {
    s.targets = ctx.attr<int64_t>("n_targets");
    OPFORGE_CHECK(s.targets >= 1, "n_targets must be at least 1, got ", s.targets);
    m.agg = aggregate(ctx.attr<std::string>("aggregate_function"));
  }
  m.forest = build_forest(s);
  m.base = reals<T>(ctx, "base_values", "base_values_as_tensor");
  OPFORGE_CHECK(m.base.empty() || int64_t(m.base.size()) == s.targets || (classifier && m.base.size() <= 2),
                "base_values must be empty or hold one value per target or class (", s.targets, "), got ",
                m.base.size());
  m.transform = post_transform(ctx.attr<std::string>("post_transform"));
  return m;
}

template <class T> void run_typed(KernelContext& ctx, bool classifier) {
  const Model<T>& m = ctx.state<Model<T>>([&] { return read_model<T>(ctx, classifier); });
  switch (ctx.input(0).dtype()) {
    case OPF_FLOAT32: return run<T, float>(m, ctx);
    case OPF_FLOAT64: return run<T, double>(m, ctx);
    case OPF_INT64: return run<T, int64_t>(m, ctx);
    default: return run<T, int32_t>(m, ctx);
  }
}

/// Thresholds and scores in double for double features, or when the model gives its values as
/// a double tensor (as onnxruntime keeps them).
bool double_thresholds(const KernelContext& ctx) {
  return ctx.input(0).dtype() == OPF_FLOAT64 ||
         (ctx.has_attr("nodes_values_as_tensor") && ctx.attr<Tensor>("nodes_values_as_tensor").dtype() == OPF_FLOAT64);
}

void compute(KernelContext& ctx, bool classifier) {
  if (double_thresholds(ctx))
    run_typed<double>(ctx, classifier);
  else
    run_typed<float>(ctx, classifier);
}

void regressor_compute(KernelContext& ctx) { compute(ctx, false); }
void classifier_compute(KernelContext& ctx) { compute(ctx, true); }

int64_t rows_of(const InferContext& ctx) {
  const Tensor x = ctx.input(0);
  OPFORGE_CHECK(x.ndim() == 1 || x.ndim() == 2, "X must be (N, C) or (C), got rank ", x.ndim());
  return x.ndim() == 1 ? 1 : x.size(0);
}

void regressor_infer(InferContext& ctx) {
  ctx.set_output(0, opforge::f32, {rows_of(ctx), ctx.attr<int64_t>("n_targets")});
}

void classifier_infer(InferContext& ctx) {
  OPFORGE_CHECK(ctx.has_attr("classlabels_int64s"), "classlabels_int64s must be given");
  const int64_t rows = rows_of(ctx), classes = int64_t(ctx.attr<std::vector<int64_t>>("classlabels_int64s").size());
  ctx.set_output(0, opforge::i64, {rows});
  ctx.set_output(1, opforge::f32, {rows, classes});
}

}  // namespace

using opforge::AttrType;

/// The node attributes both ops share, in both opsets.
#define OPFORGE_TREE_NODE_ATTRS                                         \
  .optional_attr("nodes_treeids", AttrType::Ints)                       \
      .optional_attr("nodes_nodeids", AttrType::Ints)                   \
      .optional_attr("nodes_featureids", AttrType::Ints)                \
      .optional_attr("nodes_values", AttrType::Floats)                  \
      .optional_attr("nodes_values_as_tensor", AttrType::Tensor).attr_versions(3)        \
      .optional_attr("nodes_hitrates", AttrType::Floats)                \
      .optional_attr("nodes_hitrates_as_tensor", AttrType::Tensor).attr_versions(3)      \
      .optional_attr("nodes_modes", AttrType::Strings)                  \
      .optional_attr("nodes_truenodeids", AttrType::Ints)               \
      .optional_attr("nodes_falsenodeids", AttrType::Ints)              \
      .optional_attr("nodes_missing_value_tracks_true", AttrType::Ints) \
      .optional_attr("base_values", AttrType::Floats)                   \
      .optional_attr("base_values_as_tensor", AttrType::Tensor).attr_versions(3)         \
      .attr("post_transform", "NONE")

#define OPFORGE_TREE_REGRESSOR(SINCE)                                                      \
  OPFORGE_OP(TreeEnsembleRegressor)                                                        \
      .domain("ai.onnx.ml")                                                                \
      .since(SINCE)                                                                        \
      .input("X", {opforge::f32, opforge::f64, opforge::i64, opforge::i32})                \
      .output("Y", {opforge::f32}) OPFORGE_TREE_NODE_ATTRS                                 \
      .attr("aggregate_function", "SUM")                                                   \
      .attr("n_targets", int64_t(1))                                                       \
      .optional_attr("target_treeids", AttrType::Ints)                                     \
      .optional_attr("target_nodeids", AttrType::Ints)                                     \
      .optional_attr("target_ids", AttrType::Ints)                                         \
      .optional_attr("target_weights", AttrType::Floats)                                   \
      .optional_attr("target_weights_as_tensor", AttrType::Tensor).attr_versions(3)                         \
      .infer(regressor_infer)                                                              \
      .compute(regressor_compute)

#define OPFORGE_TREE_CLASSIFIER(SINCE)                                                     \
  OPFORGE_OP(TreeEnsembleClassifier)                                                       \
      .domain("ai.onnx.ml")                                                                \
      .since(SINCE)                                                                        \
      .input("X", {opforge::f32, opforge::f64, opforge::i64, opforge::i32})                \
      .output("Y", {opforge::i64})                                                         \
      .output("Z", {opforge::f32}) OPFORGE_TREE_NODE_ATTRS                                 \
      .optional_attr("classlabels_int64s", AttrType::Ints)                                 \
      .optional_attr("class_treeids", AttrType::Ints)                                      \
      .optional_attr("class_nodeids", AttrType::Ints)                                      \
      .optional_attr("class_ids", AttrType::Ints)                                          \
      .optional_attr("class_weights", AttrType::Floats)                                    \
      .optional_attr("class_weights_as_tensor", AttrType::Tensor).attr_versions(3)                          \
      .infer(classifier_infer)                                                             \
      .compute(classifier_compute)

OPFORGE_TREE_REGRESSOR(1);
OPFORGE_TREE_CLASSIFIER(1);
