// ml_tree.h: a tree ensemble (TreeEnsembleRegressor/Classifier's node and leaf attributes) laid
// out for walking: nodes in one array with their children's positions resolved, each leaf's
// weights in one run. Built once per node (kept with KernelContext::state) and checked then: ids
// that resolve, children in their own tree, no cycles, targets and features in range.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "common/common.h"

namespace opforge_ml {

/// How a node compares a feature with its threshold; LEAF ends a walk.
enum class Mode : uint8_t { Leq, Lt, Gte, Gt, Eq, Neq, Member, Leaf };

inline Mode node_mode(const std::string& name) {
  static const char* names[] = {"BRANCH_LEQ", "BRANCH_LT", "BRANCH_GTE", "BRANCH_GT", "BRANCH_EQ", "BRANCH_NEQ"};
  for (int m = 0; m < 6; ++m)
    if (name == names[m]) return Mode(m);
  if (name == "LEAF") return Mode::Leaf;
  throw opforge::Error("nodes_modes holds '" + name + "', not a BRANCH_* mode or LEAF");
}

/// One node, laid out so that a branch's false child is the node right after it (a walk that
/// goes false reads the next cache line, or the same). A leaf's weights are
/// Forest::weights[next_true, next_true + feature).
template <class T> struct TreeNode {
  T threshold;
  int32_t feature;     ///< a leaf: its weight count
  int32_t next_true;   ///< a leaf: its first weight
  Mode mode;
  bool missing_true;   ///< a NaN feature takes the true branch
};

/// A node while the ensemble is being checked: both children by position, a leaf's weights.
template <class T> struct DraftNode {
  T threshold;
  int32_t feature, next_true, next_false, first_weight, weights;
  Mode mode;
  bool missing_true;
  int32_t members;     ///< BRANCH_MEMBER: its set is Forest::sets[members]
};

/// One leaf weight: `value` added to (or compared with) target or class `target`.
template <class T> struct LeafWeight {
  int32_t target;
  T value;
};

/// A whole ensemble. T is the type of thresholds and scores (float, or double when the model
/// gives its values as double tensors).
template <class T> struct Forest {
  std::vector<TreeNode<T>> nodes;
  std::vector<int32_t> roots;          ///< one per tree, in the order trees first appear
  std::vector<LeafWeight<T>> weights;
  std::vector<std::vector<T>> sets;    ///< BRANCH_MEMBER nodes' values
  std::vector<int32_t> set_of;         ///< by node position, its set (empty without BRANCH_MEMBER)
  int64_t targets = 0;                 ///< targets (regressor) or classes (classifier)
  int64_t features = 0;                ///< 1 + the largest feature id a branch reads
  bool weights_positive = true;        ///< no weight below zero
  int64_t weight_targets = 0;          ///< distinct targets that any weight goes to
  bool plain = true;                   ///< every branch BRANCH_LEQ, no missing_value_tracks_true

  /// The leaf one row reaches from root position `at` in a `plain` forest.
  template <class X> const TreeNode<T>& plain_leaf(int32_t at, const X* x) const {
    const TreeNode<T>* n = &nodes[size_t(at)];
    while (n->mode != Mode::Leaf) n = x[n->feature] <= n->threshold ? &nodes[size_t(n->next_true)] : n + 1;
    return *n;
  }

  /// The leaves that rows x[0..R) (each `stride` apart) reach from root position `at`, walked
  /// together so that their memory reads overlap. Only for a `plain` forest.
  template <int R, class X> void plain_leaves(int32_t at, const X* x, int64_t stride, const TreeNode<T>** out) const {
    int32_t pos[R];
    for (int r = 0; r < R; ++r) pos[r] = at;
    for (bool moving = true; moving;) {
      moving = false;
      for (int r = 0; r < R; ++r) {
        const TreeNode<T>& n = nodes[size_t(pos[r])];
        if (n.mode == Mode::Leaf) continue;
        pos[r] = x[r * stride + n.feature] <= n.threshold ? n.next_true : pos[r] + 1;
        moving = true;
      }
    }
    for (int r = 0; r < R; ++r) out[r] = &nodes[size_t(pos[r])];
  }

  /// The leaf `x` (one row of features) reaches from root position `at`.
  template <class X> const TreeNode<T>& leaf(int32_t at, const X* x) const {
    const TreeNode<T>* n = &nodes[size_t(at)];
    while (n->mode != Mode::Leaf) {
      const X v = x[n->feature];
      bool go;
      switch (n->mode) {
        case Mode::Leq: go = v <= n->threshold; break;
        case Mode::Lt: go = v < n->threshold; break;
        case Mode::Gte: go = v >= n->threshold; break;
        case Mode::Gt: go = v > n->threshold; break;
        case Mode::Eq: go = v == n->threshold; break;
        case Mode::Neq: go = v != n->threshold; break;
        default: {
          const std::vector<T>& set = sets[size_t(set_of[size_t(n - nodes.data())])];
          go = std::any_of(set.begin(), set.end(), [&](T member) { return v == member; });
        }
      }
      go = go || (n->missing_true && std::isnan(double(v)));
      n = go ? &nodes[size_t(n->next_true)] : n + 1;
    }
    return *n;
  }
};

/// The node and leaf attributes, as read from the op (prefix "target_" or "class_" for leaves).
template <class T> struct ForestSpec {
  std::vector<int64_t> tree_ids, node_ids, features, true_ids, false_ids, missing_true;
  std::vector<T> thresholds;
  std::vector<std::string> modes;
  std::vector<int64_t> leaf_tree_ids, leaf_node_ids, leaf_targets;
  std::vector<T> leaf_weights;
  int64_t targets = 0;
};

namespace detail {

inline uint64_t key(int64_t tree, int64_t node) { return (uint64_t(uint32_t(tree)) << 32) | uint32_t(node); }

inline void check_id(int64_t id, const char* what) {
  OPFORGE_CHECK(id >= 0 && id <= INT32_MAX, what, " ", id, " is out of range");
}

/// The nodes reachable from each root in depth-first order, true child after false child so
/// that every false child follows its parent. A leaf reached twice is copied; a branch reached
/// twice (a cycle, or a shared subtree) fails. Sets `roots` to the roots' new positions.
template <class T>
std::vector<TreeNode<T>> lay_out(const std::vector<DraftNode<T>>& draft, std::vector<int32_t>& roots,
                                 std::vector<int32_t>& set_of) {
  const bool members = std::any_of(draft.begin(), draft.end(), [](const DraftNode<T>& d) { return d.mode == Mode::Member; });
  struct Visit {
    int32_t at, parent;  ///< parent: the new position of a node whose true child this is, or -1
  };
  std::vector<uint8_t> seen(draft.size(), 0);
  std::vector<TreeNode<T>> nodes;
  std::vector<Visit> stack;
  nodes.reserve(draft.size());
  for (int32_t& root : roots) {
    stack.assign(1, {root, -1});
    root = int32_t(nodes.size());
    while (!stack.empty()) {
      const Visit v = stack.back();
      stack.pop_back();
      const DraftNode<T>& d = draft[size_t(v.at)];
      const bool leaf = d.mode == Mode::Leaf;
      OPFORGE_CHECK(leaf || !seen[size_t(v.at)], "the ensemble is not a set of trees: node position ", v.at,
                    " is reached twice");
      seen[size_t(v.at)] = 1;
      const int32_t here = int32_t(nodes.size());
      if (v.parent >= 0) nodes[size_t(v.parent)].next_true = here;
      nodes.push_back({d.threshold, leaf ? d.weights : d.feature, leaf ? d.first_weight : 0, d.mode, d.missing_true});
      if (members) set_of.push_back(d.members);
      if (leaf) continue;
      stack.push_back({d.next_true, here});
      stack.push_back({d.next_false, -1});
    }
  }
  return nodes;
}

}  // namespace detail

/// Lays out and checks the ensemble `s` describes; throws naming the first bad id.
template <class T> Forest<T> build_forest(const ForestSpec<T>& s) {
  const size_t n = s.node_ids.size();
  OPFORGE_CHECK(n > 0, "the ensemble has no nodes");
  OPFORGE_CHECK(s.tree_ids.size() == n && s.features.size() == n && s.true_ids.size() == n &&
                    s.false_ids.size() == n && s.thresholds.size() == n && s.modes.size() == n &&
                    (s.missing_true.empty() || s.missing_true.size() == n),
                "the nodes_* attributes must all have one entry per node (", n, " nodes_nodeids)");
  OPFORGE_CHECK(s.leaf_node_ids.size() == s.leaf_tree_ids.size() && s.leaf_targets.size() == s.leaf_tree_ids.size() &&
                    s.leaf_weights.size() == s.leaf_tree_ids.size(),
                "the leaf attributes (treeids, nodeids, ids, weights) must all have one entry per weight");
  Forest<T> f;
  f.targets = s.targets;
  std::vector<DraftNode<T>> draft(n);
  std::unordered_map<uint64_t, int32_t> position;
  std::unordered_map<int64_t, bool> tree_seen;
  position.reserve(n);
  for (size_t i = 0; i < n; ++i) {
    detail::check_id(s.tree_ids[i], "tree id");
    detail::check_id(s.node_ids[i], "node id");
    OPFORGE_CHECK(position.emplace(detail::key(s.tree_ids[i], s.node_ids[i]), int32_t(i)).second, "node ",
                  s.node_ids[i], " of tree ", s.tree_ids[i], " is given twice");
    if (tree_seen.emplace(s.tree_ids[i], true).second) f.roots.push_back(int32_t(i));
  }
  for (size_t i = 0; i < n; ++i) {
    DraftNode<T>& node = draft[i];
    node.mode = node_mode(s.modes[i]);
    node.threshold = s.thresholds[i];
    node.missing_true = !s.missing_true.empty() && s.missing_true[i] != 0;
    node.next_true = node.next_false = node.first_weight = node.weights = node.feature = node.members = 0;
    if (node.mode == Mode::Leaf) continue;
    f.plain = f.plain && node.mode == Mode::Leq && !node.missing_true;
    OPFORGE_CHECK(s.features[i] >= 0 && s.features[i] < INT32_MAX, "node ", s.node_ids[i], " of tree ",
                  s.tree_ids[i], " reads feature ", s.features[i]);
    node.feature = int32_t(s.features[i]);
    f.features = std::max(f.features, s.features[i] + 1);
    for (int side = 0; side < 2; ++side) {
      const int64_t child = side ? s.false_ids[i] : s.true_ids[i];
      auto found = position.find(detail::key(s.tree_ids[i], child));
      OPFORGE_CHECK(child >= 0 && child <= INT32_MAX && found != position.end(), "node ", s.node_ids[i],
                    " of tree ", s.tree_ids[i], " goes to node ", child, ", which that tree does not have");
      (side ? node.next_false : node.next_true) = found->second;
    }
  }
  // Weights sorted by (tree, node), then as given: the order onnxruntime adds them in.
  std::vector<std::pair<uint64_t, int32_t>> order(s.leaf_tree_ids.size());
  for (size_t k = 0; k < order.size(); ++k) {
    detail::check_id(s.leaf_tree_ids[k], "leaf tree id");
    detail::check_id(s.leaf_node_ids[k], "leaf node id");
    order[k] = {detail::key(s.leaf_tree_ids[k], s.leaf_node_ids[k]), int32_t(k)};
  }
  std::sort(order.begin(), order.end());
  std::vector<uint8_t> used(size_t(std::max<int64_t>(s.targets, 0)), 0);
  for (const auto& [k, index] : order) {
    auto found = position.find(k);
    OPFORGE_CHECK(found != position.end(), "a weight goes to node ", s.leaf_node_ids[size_t(index)], " of tree ",
                  s.leaf_tree_ids[size_t(index)], ", which the ensemble does not have");
    DraftNode<T>& leaf = draft[size_t(found->second)];
    OPFORGE_CHECK(leaf.mode == Mode::Leaf, "a weight goes to node ", s.leaf_node_ids[size_t(index)], " of tree ",
                  s.leaf_tree_ids[size_t(index)], ", which is not a LEAF");
    const int64_t target = s.leaf_targets[size_t(index)];
    OPFORGE_CHECK(target >= 0 && target < s.targets, "a weight goes to target or class ", target,
                  "; the ensemble has ", s.targets);
    if (leaf.weights == 0) leaf.first_weight = int32_t(f.weights.size());
    ++leaf.weights;
    const T value = s.leaf_weights[size_t(index)];
    f.weights.push_back({int32_t(target), value});
    f.weights_positive = f.weights_positive && !(value < 0);
    f.weight_targets += used[size_t(target)] ? 0 : 1;
    used[size_t(target)] = 1;
  }
  f.nodes = detail::lay_out(draft, f.roots, f.set_of);
  return f;
}

}  // namespace opforge_ml
