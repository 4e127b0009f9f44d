// ml_tree_ensemble5.cpp: ai.onnx.ml 5's TreeEnsemble: trees given by their roots' positions,
// interior nodes and leaves in separate lists, modes and thresholds as tensors, BRANCH_MEMBER
// sets of values. Scored as TreeEnsembleRegressor is (ml_tree_score.h), in the features' type.
#include <cmath>
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

/// A float or double tensor attribute as T values (empty when left out).
template <class T> std::vector<T> values(const KernelContext& ctx, const char* name) {
  if (!ctx.has_attr(name)) return {};
  const Tensor t = ctx.attr<Tensor>(name);
  if (t.dtype() == OPF_FLOAT64) return std::vector<T>(t.data<double>(), t.data<double>() + t.numel());
  OPFORGE_CHECK(t.dtype() == OPF_FLOAT32, name, " must hold float or double values");
  return std::vector<T>(t.data<float>(), t.data<float>() + t.numel());
}

/// Interior node i's child on one side: a node position, or a leaf's (after the nodes).
int32_t child(int64_t id, bool leaf, size_t nodes, size_t leaves, size_t i, const char* side) {
  OPFORGE_CHECK(id >= 0 && size_t(id) < (leaf ? leaves : nodes), "node ", i, "'s ", side, " branch goes to ",
                leaf ? "leaf " : "node ", id, ", past the ", leaf ? leaves : nodes, leaf ? " leaves" : " nodes");
  return int32_t(leaf ? nodes + size_t(id) : size_t(id));
}

template <class T> Model<T> read_model(const KernelContext& ctx) {
  const std::vector<int64_t> features = ints(ctx, "nodes_featureids"), true_ids = ints(ctx, "nodes_truenodeids"),
                             false_ids = ints(ctx, "nodes_falsenodeids"), true_leaf = ints(ctx, "nodes_trueleafs"),
                             false_leaf = ints(ctx, "nodes_falseleafs"), missing = ints(ctx, "nodes_missing_value_tracks_true"),
                             targets = ints(ctx, "leaf_targetids");
  const std::vector<T> splits = values<T>(ctx, "nodes_splits"), weights = values<T>(ctx, "leaf_weights"),
                       members = values<T>(ctx, "membership_values");
  const Tensor modes = ctx.attr<Tensor>("nodes_modes");
  OPFORGE_CHECK(modes.dtype() == OPF_UINT8, "nodes_modes must be a uint8 tensor");
  const size_t n = features.size(), leaves = targets.size();
  OPFORGE_CHECK(n > 0 && true_ids.size() == n && false_ids.size() == n && true_leaf.size() == n && false_leaf.size() == n &&
                    splits.size() == n && size_t(modes.numel()) == n && (missing.empty() || missing.size() == n),
                "the nodes_* attributes must all have one entry per node (", n, " nodes_featureids)");
  OPFORGE_CHECK(weights.size() == leaves, "leaf_weights and leaf_targetids must have one entry per leaf");
  Model<T> m;
  m.double_output = ctx.input(0).dtype() == OPF_FLOAT64;
  Forest<T>& f = m.forest;
  f.targets = ctx.attr<int64_t>("n_targets");
  OPFORGE_CHECK(f.targets >= 1, "n_targets must be at least 1, got ", f.targets);
  std::vector<DraftNode<T>> draft(n + leaves);
  size_t member_at = 0;
  for (size_t i = 0; i < n; ++i) {
    DraftNode<T>& d = draft[i];
    const uint8_t mode = modes.data<uint8_t>()[i];
    OPFORGE_CHECK(mode <= 6, "nodes_modes holds ", int(mode), " at node ", i, "; modes are 0 (BRANCH_LEQ) to 6 (BRANCH_MEMBER)");
    d = {splits[i], 0, 0, 0, 0, 0, Mode(mode), !missing.empty() && missing[i] != 0, 0};
    OPFORGE_CHECK(features[i] >= 0 && features[i] < INT32_MAX, "node ", i, " reads feature ", features[i]);
    d.feature = int32_t(features[i]);
    f.features = std::max(f.features, features[i] + 1);
    d.next_true = child(true_ids[i], true_leaf[i] != 0, n, leaves, i, "true");
    d.next_false = child(false_ids[i], false_leaf[i] != 0, n, leaves, i, "false");
    f.plain = f.plain && d.mode == Mode::Leq && !d.missing_true;
    if (d.mode != Mode::Member) continue;
    d.members = int32_t(f.sets.size());  // this node's values run up to the next NaN
    f.sets.emplace_back();
    for (; member_at < members.size() && !std::isnan(double(members[member_at])); ++member_at)
      f.sets.back().push_back(members[member_at]);
    ++member_at;
  }
  for (size_t k = 0; k < leaves; ++k) {
    OPFORGE_CHECK(targets[k] >= 0 && targets[k] < f.targets, "leaf ", k, " goes to target ", targets[k],
                  "; the ensemble has ", f.targets);
    draft[n + k] = {T(0), 0, 0, 0, int32_t(k), 1, Mode::Leaf, false, 0};
    f.weights.push_back({int32_t(targets[k]), weights[k]});
  }
  for (int64_t root : ctx.attr<std::vector<int64_t>>("tree_roots")) {
    OPFORGE_CHECK(root >= 0 && size_t(root) < n, "tree_roots holds ", root, ", past the ", n, " nodes");
    f.roots.push_back(int32_t(root));
  }
  f.nodes = detail::lay_out(draft, f.roots, f.set_of);
  const int64_t agg = ctx.attr<int64_t>("aggregate_function"), transform = ctx.attr<int64_t>("post_transform");
  OPFORGE_CHECK(agg >= 0 && agg <= 3, "aggregate_function ", agg, " is not 0 (AVERAGE) to 3 (MAX)");
  OPFORGE_CHECK(transform >= 0 && transform <= 4, "post_transform ", transform, " is not 0 (NONE) to 4 (PROBIT)");
  static const Aggregate aggregates[] = {Aggregate::Average, Aggregate::Sum, Aggregate::Min, Aggregate::Max};
  m.agg = aggregates[agg];
  m.transform = PostTransform(transform);
  return m;
}

template <class T, class X> void run_typed(KernelContext& ctx) {
  run<T, X>(ctx.state<Model<T>>([&] { return read_model<T>(ctx); }), ctx);
}

void compute(KernelContext& ctx) {
  if (ctx.input(0).dtype() == OPF_FLOAT64)
    run_typed<double, double>(ctx);
  else
    run_typed<float, float>(ctx);
}

void infer(InferContext& ctx) {
  const Tensor x = ctx.input(0);
  OPFORGE_CHECK(x.ndim() == 1 || x.ndim() == 2, "X must be (N, C) or (C), got rank ", x.ndim());
  ctx.set_output(0, x.dtype(), {x.ndim() == 1 ? 1 : x.size(0), ctx.attr<int64_t>("n_targets")});
}

}  // namespace

using opforge::AttrType;

OPFORGE_OP(TreeEnsemble)
    .domain("ai.onnx.ml")
    .since(5)
    .input("X", {opforge::f32, opforge::f64})
    .output("Y")
    .attr("aggregate_function", int64_t(1))
    .optional_attr("leaf_targetids", AttrType::Ints)
    .optional_attr("leaf_weights", AttrType::Tensor)
    .optional_attr("membership_values", AttrType::Tensor)
    .optional_attr("n_targets", AttrType::Int)
    .optional_attr("nodes_falseleafs", AttrType::Ints)
    .optional_attr("nodes_falsenodeids", AttrType::Ints)
    .optional_attr("nodes_featureids", AttrType::Ints)
    .optional_attr("nodes_hitrates", AttrType::Tensor)
    .optional_attr("nodes_missing_value_tracks_true", AttrType::Ints)
    .optional_attr("nodes_modes", AttrType::Tensor)
    .optional_attr("nodes_splits", AttrType::Tensor)
    .optional_attr("nodes_trueleafs", AttrType::Ints)
    .optional_attr("nodes_truenodeids", AttrType::Ints)
    .attr("post_transform", int64_t(0))
    .optional_attr("tree_roots", AttrType::Ints)
    .infer(infer)
    .compute(compute);
