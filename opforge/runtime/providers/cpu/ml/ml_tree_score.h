// ml_tree_score.h: scoring rows with a laid-out tree ensemble (ml_tree.h), as onnxruntime scores
// them: leaves added tree by tree, then base values, the binary cases and post transforms.
// Big batches split rows over threads (8 rows walk each plain tree together); a single row
// splits its trees, partial sums added in tree order. Shared by TreeEnsembleRegressor/Classifier
// and TreeEnsemble.
#pragma once

#include <algorithm>
#include <string>
#include <vector>

#include "ml/ml_common.h"
#include "ml/ml_tree.h"

namespace opforge_ml {

using opforge::KernelContext;

enum class Aggregate { Sum, Average, Min, Max };

inline Aggregate aggregate(const std::string& name) {
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
  bool double_output = false;   ///< TreeEnsemble on double features gives double scores
};

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
  const Forest<T>& f = m.forest;
  for (size_t t = t0; t < t1; ++t)
    add_leaf(m, f.plain ? f.plain_leaf(f.roots[t], x) : f.leaf(f.roots[t], x), score, has);
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
template <class T, class O> void finish_regression(const Model<T>& m, T* s, const uint8_t* has, O* y) {
  const int64_t n = m.forest.targets;
  const T trees = T(m.forest.roots.size());
  if (n == 1) {  // onnxruntime applies only PROBIT to a single target
    T v = has[0] ? s[0] : T(0);
    if (m.agg == Aggregate::Average) v /= trees;
    if (m.base.size() == 1) v += m.base[0];
    y[0] = m.transform == PostTransform::Probit ? O(probit(float(v))) : O(v);
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
  for (int64_t j = 0; j < n; ++j) y[j] = O(s[j]);
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
  else if (m.double_output)
    finish_regression(m, s, has, ctx.output(0).data<double>() + row * n);
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

}  // namespace opforge_ml
