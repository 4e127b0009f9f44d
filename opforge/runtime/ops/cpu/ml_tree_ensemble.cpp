// ml_tree_ensemble.cpp: ai.onnx.ml's TreeEnsembleRegressor and TreeEnsembleClassifier (opsets 1
// and 3). Scores are summed tree by tree and finished as onnxruntime finishes them (base values,
// the binary cases, post transforms), so one thread gives its results bit for bit. Big batches
// split rows over threads; a single row splits its trees, partial sums added in tree order.
// String class labels are not offered (a string tensor cannot cross the op ABI): a node with
// classlabels_strings is refused when bound and runs on the reference provider.
#include <algorithm>
#include <vector>

#include "ml_common.h"
#include "ml_tree.h"

namespace {

using namespace opforge_ml;
using opforge::InferContext;
using opforge::KernelContext;
using opforge::Tensor;

enum class Aggregate { Sum, Average, Min, Max };

Aggregate aggregate(const std::string& name) {
  if (name == "SUM") return Aggregate::Sum;
  if (name == "AVERAGE") return Aggregate::Average;
  if (name == "MIN") return Aggregate::Min;
  if (name == "MAX") return Aggregate::Max;
  throw opforge::Error("aggregate_function '" + name + "' is not one of SUM, AVERAGE, MIN, MAX");
}

/// Everything a node's attributes say, laid out once and kept with the node.
template <class T> struct Model {
  Forest<T> forest;
  std::vector<T> base;
  std::vector<int64_t> labels;  ///< classifier only
  PostTransform transform = PostTransform::None;
  Aggregate agg = Aggregate::Sum;
  bool classifier = false;
};

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

/// Adds (or compares) one leaf's weights into score/has.
template <class T> void add_leaf(const Model<T>& m, const TreeNode<T>& leaf, T* score, uint8_t* has) {
  const LeafWeight<T>* w = m.forest.weights.data() + leaf.next_true;
  if (m.agg == Aggregate::Sum || m.agg == Aggregate::Average) {
    for (int32_t k = 0; k < leaf.feature; ++k) {
      score[w[k].target] += w[k].value;
      has[w[k].target] = 1;
    }
    return;
  }
  for (int32_t k = 0; k < leaf.feature; ++k) {
    T& s = score[w[k].target];
    const T v = w[k].value;
    if (m.agg == Aggregate::Min)
      s = !has[w[k].target] || v < s ? v : s;
    else
      s = !has[w[k].target] || v > s ? v : s;
    has[w[k].target] = 1;
  }
}

/// Adds the leaves that trees [t0, t1) reach for row x into score/has.
template <class T, class X>
void add_trees(const Model<T>& m, const X* x, size_t t0, size_t t1, T* score, uint8_t* has) {
  for (size_t t = t0; t < t1; ++t) add_leaf(m, m.forest.leaf(m.forest.roots[t], x), score, has);
}

/// Rows walked together through each tree of a plain forest.
constexpr int kBlock = 8;

/// Scores of kBlock rows (x, `cols` apart) into score/has (n per row): tree by tree, so that
/// each row still adds its trees in order.
template <class T, class X> void add_trees_block(const Model<T>& m, const X* x, int64_t cols, T* score, uint8_t* has) {
  const int64_t n = m.forest.targets;
  const TreeNode<T>* leaves[kBlock];
  for (int32_t root : m.forest.roots) {
    m.forest.template plain_leaves<kBlock>(root, x, cols, leaves);
    for (int r = 0; r < kBlock; ++r) add_leaf(m, *leaves[r], score + r * n, has + r * n);
  }
}

/// Folds partial scores (other trees of the same row) into score/has.
template <class T> void merge(Aggregate agg, int64_t n, T* score, uint8_t* has, const T* more, const uint8_t* more_has) {
  for (int64_t j = 0; j < n; ++j) {
    if (!more_has[j]) continue;
    if (!has[j])
      score[j] = more[j];
    else if (agg == Aggregate::Min)
      score[j] = std::min(score[j], more[j]);
    else if (agg == Aggregate::Max)
      score[j] = std::max(score[j], more[j]);
    else
      score[j] += more[j];
    has[j] = 1;
  }
}

/// A regressor row's outputs from its summed scores.
template <class T> void finish_regression(const Model<T>& m, T* s, const uint8_t* has, float* y) {
  const int64_t n = m.forest.targets;
  const T trees = T(m.forest.roots.size());
  if (n == 1) {  // onnxruntime applies only PROBIT to a single target
    T v = has[0] ? s[0] : T(0);
    if (m.agg == Aggregate::Average) v /= trees;
    if (m.base.size() == 1) v += m.base[0];
    y[0] = m.transform == PostTransform::Probit ? probit(float(v)) : float(v);
    return;
  }
  for (int64_t j = 0; j < n; ++j) {  // a target no leaf scored stays 0, base value or not
    const T b = m.base.empty() ? T(0) : m.base[size_t(j)];
    if (!has[j])
      s[j] = T(0);
    else
      s[j] = m.agg == Aggregate::Average ? (m.base.empty() ? s[j] / trees : s[j] / trees + b) : b + s[j];
  }
  apply(m.transform, s, n);
  for (int64_t j = 0; j < n; ++j) y[j] = float(s[j]);
}

/// The two-class label and how the one score becomes two probabilities (onnxruntime's cases).
template <class T> int64_t binary_label(const Model<T>& m, const T* s, const uint8_t* has, int64_t count, int* second) {
  const T positive = count == 2 && has[1] ? s[1] : (has[0] ? s[0] : T(0));
  if (m.forest.weight_targets == 1) {
    if (m.forest.weights_positive) {
      *second = positive > T(0.5) ? 0 : 1;
    } else {
      *second = positive > T(0) ? 2 : 3;
    }
    return m.labels[*second == 0 || *second == 2 ? 1 : 0];
  }
  return positive > T(0) ? 1 : 0;
}

/// A classifier row's label and probabilities from its summed scores.
template <class T> void finish_classification(const Model<T>& m, T* s, uint8_t* has, float* z, int64_t* label) {
  const int64_t n = m.forest.targets;
  int64_t count = n;
  int second = -1;
  if (n > 2) {
    for (size_t j = 0; j < m.base.size(); ++j) {
      s[j] = has[j] ? s[j] + m.base[j] : m.base[j];
      has[j] = 1;
    }
    int64_t best = -1;
    for (int64_t j = 0; j < n; ++j)
      if (has[j] && (best < 0 || s[j] > s[best])) best = j;
    *label = m.labels[size_t(best < 0 ? 0 : best)];
  } else {
    if (m.base.size() == 2) {
      if (has[1]) {
        s[1] = m.base[1] + s[0];
        s[0] = -s[1];
      } else {
        s[1] += m.base[1];
        s[0] += m.base[0];
      }
    } else {
      if (m.base.size() == 1) s[0] += m.base[0];
      second = m.base.empty() ? 3 : -1;
      count = has[1] ? 2 : 1;
    }
    *label = binary_label(m, s, has, count, &second);
  }
  if (count >= 2) {
    apply(m.transform, s, count);
    for (int64_t j = 0; j < count; ++j) z[j] = float(s[j]);
  } else if (m.transform == PostTransform::Probit) {  // one score: its probit, and 0
    z[0] = probit(float(s[0]));
    z[1] = 0;
  } else if (m.transform == PostTransform::Logistic) {
    z[0] = logistic(float(-s[0]));
    z[1] = logistic(float(s[0]));
  } else if (second == 0 || second == 1) {  // probabilities: p and 1 - p
    z[0] = float(1 - s[0]);
    z[1] = float(s[0]);
  } else if (second >= 2) {  // margins: s and -s
    z[0] = float(-s[0]);
    z[1] = float(s[0]);
  } else {
    z[0] = float(s[0]);
    z[1] = 0;
  }
}

template <class T> void finish(const Model<T>& m, int64_t row, T* s, uint8_t* has, KernelContext& ctx) {
  const int64_t n = m.forest.targets;
  if (m.classifier)
    finish_classification(m, s, has, ctx.output(1).data<float>() + row * n, ctx.output(0).data<int64_t>() + row);
  else
    finish_regression(m, s, has, ctx.output(0).data<float>() + row * n);
}

template <class T, class X> void run(const Model<T>& m, KernelContext& ctx) {
  int64_t rows, cols;
  rows_cols(ctx.input(0), &rows, &cols);
  OPFORGE_CHECK(cols >= m.forest.features, "X has ", cols, " features; the trees read feature ",
                m.forest.features - 1);
  const X* x = ctx.input(0).data<X>();
  const int64_t n = m.forest.targets;
  const size_t trees = m.forest.roots.size();
  const int threads = ctx.num_threads();
  if (threads > 1 && rows < threads && trees >= size_t(4 * threads)) {
    // Few rows: each row's trees in one chunk per thread, partial scores added in chunk order.
    std::vector<T> score(size_t(threads * n));
    std::vector<uint8_t> has(size_t(threads * n));
    for (int64_t r = 0; r < rows; ++r) {
      std::fill(score.begin(), score.end(), T(0));
      std::fill(has.begin(), has.end(), 0);
      ctx.parallel_for(threads, 1, [&](int64_t begin, int64_t end) {
        for (int64_t c = begin; c < end; ++c)
          add_trees(m, x + r * cols, trees * size_t(c) / size_t(threads), trees * size_t(c + 1) / size_t(threads),
                    score.data() + c * n, has.data() + c * n);
      });
      for (int c = 1; c < threads; ++c) merge(m.agg, n, score.data(), has.data(), score.data() + c * n, has.data() + c * n);
      finish(m, r, score.data(), has.data(), ctx);
    }
    return;
  }
  const int64_t grain = std::max<int64_t>(kBlock, 4096 / int64_t(trees));
  ctx.parallel_for(rows, grain, [&](int64_t begin, int64_t end) {
    std::vector<T> score(static_cast<size_t>(kBlock * n));
    std::vector<uint8_t> has(static_cast<size_t>(kBlock * n));
    int64_t r = begin;
    for (; m.forest.plain && r + kBlock <= end; r += kBlock) {
      std::fill(score.begin(), score.end(), T(0));
      std::fill(has.begin(), has.end(), 0);
      add_trees_block(m, x + r * cols, cols, score.data(), has.data());
      for (int k = 0; k < kBlock; ++k) finish(m, r + k, score.data() + k * n, has.data() + k * n, ctx);
    }
    for (; r < end; ++r) {
      std::fill(score.begin(), score.end(), T(0));
      std::fill(has.begin(), has.end(), 0);
      add_trees(m, x + r * cols, 0, trees, score.data(), has.data());
      finish(m, r, score.data(), has.data(), ctx);
    }
  });
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
      .optional_attr("nodes_values_as_tensor", AttrType::Tensor)        \
      .optional_attr("nodes_hitrates", AttrType::Floats)                \
      .optional_attr("nodes_hitrates_as_tensor", AttrType::Tensor)      \
      .optional_attr("nodes_modes", AttrType::Strings)                  \
      .optional_attr("nodes_truenodeids", AttrType::Ints)               \
      .optional_attr("nodes_falsenodeids", AttrType::Ints)              \
      .optional_attr("nodes_missing_value_tracks_true", AttrType::Ints) \
      .optional_attr("base_values", AttrType::Floats)                   \
      .optional_attr("base_values_as_tensor", AttrType::Tensor)         \
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
      .optional_attr("target_weights_as_tensor", AttrType::Tensor)                         \
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
      .optional_attr("class_weights_as_tensor", AttrType::Tensor)                          \
      .infer(classifier_infer)                                                             \
      .compute(classifier_compute)

OPFORGE_TREE_REGRESSOR(1);
OPFORGE_TREE_REGRESSOR(3);
OPFORGE_TREE_CLASSIFIER(1);
OPFORGE_TREE_CLASSIFIER(3);
