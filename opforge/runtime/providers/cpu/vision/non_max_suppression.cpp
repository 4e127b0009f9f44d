// non_max_suppression.cpp: NonMaxSuppression (opsets 10, 11), greedy per (batch, class) as
// onnxruntime runs it: candidates above score_threshold by descending score (ties: lower box
// index first), each kept unless its IoU with a kept box of that class exceeds iou_threshold,
// until max_output_boxes_per_class are kept. The output lists (batch, class, box) by batch, then
// class, then score. Its row count depends on the data, so infer runs the selection too; compute
// reuses that result when it sees the same inputs (see Memo).

// The IoU decides which box survives: keep onnxruntime's rounding (no fused multiply-add where
// it computes a product and a difference separately).
#pragma GCC optimize("fp-contract=off")

#include <algorithm>
#include <cstring>
#include <vector>

#include "common/common.h"

namespace {

using namespace opforge_cpu;

/// What the optional inputs and the attribute say.
struct Params {
  int64_t max_per_class = 0;
  float iou_threshold = 0;
  bool has_score_threshold = false;
  float score_threshold = 0;
  bool center_point_box = false;

  bool operator==(const Params& o) const {
    return max_per_class == o.max_per_class && iou_threshold == o.iou_threshold &&
           has_score_threshold == o.has_score_threshold && score_threshold == o.score_threshold &&
           center_point_box == o.center_point_box;
  }
};

/// The first value of optional scalar input i, or false when it is absent or empty.
template <class T> bool scalar_input(const Tensor& t, const char* name, T* out) {
  if (!t.defined() || t.numel() == 0) return false;
  OPFORGE_CHECK(t.has_data(), "input '", name, "' must be known to run NonMaxSuppression");
  *out = *t.data<T>();
  return true;
}

template <class Ctx> Params read_params(const Ctx& ctx) {
  Params p;
  const int64_t center = ctx.template attr<int64_t>("center_point_box");
  OPFORGE_CHECK(center == 0 || center == 1, "attribute 'center_point_box' must be 0 or 1, got ", center);
  p.center_point_box = center == 1;
  if (ctx.has_input(2) && scalar_input(ctx.input(2), "max_output_boxes_per_class", &p.max_per_class))
    p.max_per_class = std::max<int64_t>(p.max_per_class, 0);
  if (ctx.has_input(3)) scalar_input(ctx.input(3), "iou_threshold", &p.iou_threshold);
  OPFORGE_CHECK(p.iou_threshold >= 0 && p.iou_threshold <= 1, "input 'iou_threshold' must be in [0, 1], got ",
                p.iou_threshold);
  if (ctx.has_input(4)) p.has_score_threshold = scalar_input(ctx.input(4), "score_threshold", &p.score_threshold);
  return p;
}

/// Checks boxes (batches, boxes, 4) against scores (batches, classes, boxes); -1 dims pass.
void check_shapes(const Tensor& boxes, const Tensor& scores) {
  OPFORGE_CHECK(boxes.ndim() == 3 && (boxes.size(2) < 0 || boxes.size(2) == 4),
                "input 'boxes' must be (num_batches, spatial_dimension, 4), got rank ", boxes.ndim());
  OPFORGE_CHECK(scores.ndim() == 3, "input 'scores' must be (num_batches, num_classes, spatial_dimension), got rank ",
                scores.ndim());
  auto agree = [](int64_t a, int64_t b) { return a < 0 || b < 0 || a == b; };
  OPFORGE_CHECK(agree(boxes.size(0), scores.size(0)), "inputs 'boxes' and 'scores' disagree on num_batches: ",
                boxes.size(0), " vs ", scores.size(0));
  OPFORGE_CHECK(agree(boxes.size(1), scores.size(2)), "inputs 'boxes' and 'scores' disagree on spatial_dimension: ",
                boxes.size(1), " vs ", scores.size(2));
}

/// One box's corners and area, as onnxruntime's SuppressByIOU derives them.
struct Corners {
  float x_min, y_min, x_max, y_max, area;
};

Corners corners(const float* b, bool center_point_box) {
  Corners c;
  if (center_point_box) {  // [x_center, y_center, width, height]
    const float half_w = b[2] / 2, half_h = b[3] / 2;
    c.x_min = b[0] - half_w;
    c.x_max = b[0] + half_w;
    c.y_min = b[1] - half_h;
    c.y_max = b[1] + half_h;
  } else {  // [y1, x1, y2, x2], either corner first
    c.x_min = std::min(b[1], b[3]);
    c.x_max = std::max(b[1], b[3]);
    c.y_min = std::min(b[0], b[2]);
    c.y_max = std::max(b[0], b[2]);
  }
  c.area = (c.x_max - c.x_min) * (c.y_max - c.y_min);
  return c;
}

/// The boxes kept so far in one class, by field, so that one candidate is checked against
/// many kept boxes at once.
struct KeptBoxes {
  std::vector<float> x_min, y_min, x_max, y_max, area;

  size_t size() const { return area.size(); }
  void push(const Corners& c) {
    x_min.push_back(c.x_min), y_min.push_back(c.y_min), x_max.push_back(c.x_max), y_max.push_back(c.y_max);
    area.push_back(c.area);
  }
  /// Whether a kept box suppresses `c`: IoU above the threshold, with onnxruntime's early outs
  /// (no overlap, degenerate boxes) as conditions, each negated as it is written there so that
  /// NaNs decide alike. Blocks of 16 kept boxes are checked branch-free.
  bool suppress(const Corners& c, float iou_threshold) const {
    for (size_t base = 0; base < size(); base += 16) {
      const size_t end = std::min(size(), base + 16);
      int hits = 0;
      for (size_t j = base; j < end; ++j) {
        const float ix_min = std::max(c.x_min, x_min[j]), ix_max = std::min(c.x_max, x_max[j]);
        const float iy_min = std::max(c.y_min, y_min[j]), iy_max = std::min(c.y_max, y_max[j]);
        const float intersection = (ix_max - ix_min) * (iy_max - iy_min);
        const float union_area = c.area + area[j] - intersection;
        hits += !(ix_max <= ix_min) & !(iy_max <= iy_min) & !(intersection <= 0) & !(c.area <= 0) &
                !(area[j] <= 0) & !(union_area <= 0) & (intersection / union_area > iou_threshold);
      }
      if (hits) return true;
    }
    return false;
  }
};

/// A candidate box; the heap's top is the highest score, then the lowest index.
struct Candidate {
  float score;
  int64_t index;
};
bool ranks_below(const Candidate& a, const Candidate& b) {
  return a.score < b.score || (a.score == b.score && a.index > b.index);
}

/// The kept box indices of one (batch, class), in the order they were kept.
std::vector<int64_t> select_class(const float* scores, const std::vector<Corners>& boxes, const Params& p,
                                  std::vector<Candidate>& heap) {
  heap.clear();
  const int64_t n = int64_t(boxes.size());
  for (int64_t i = 0; i < n; ++i)
    if (!p.has_score_threshold || scores[i] > p.score_threshold) heap.push_back({scores[i], i});
  std::make_heap(heap.begin(), heap.end(), ranks_below);
  std::vector<int64_t> kept;
  KeptBoxes kept_boxes;
  while (!heap.empty() && int64_t(kept.size()) < p.max_per_class) {
    std::pop_heap(heap.begin(), heap.end(), ranks_below);
    const int64_t i = heap.back().index;
    heap.pop_back();
    if (!kept_boxes.suppress(boxes[size_t(i)], p.iou_threshold)) {
      kept.push_back(i);
      kept_boxes.push(boxes[size_t(i)]);
    }
  }
  return kept;
}

/// The selected (batch, class, box) triples, flat, in onnxruntime's order. `run` maps a range
/// of (batch, class) pairs, serially in infer and on the host's threads in compute.
template <class Run> std::vector<int64_t> select_all(const Tensor& boxes, const Tensor& scores, const Params& p, Run&& run) {
  const int64_t batches = boxes.size(0), num_boxes = boxes.size(1), classes = scores.size(1);
  const float* box_data = boxes.data<float>();
  const float* score_data = scores.data<float>();
  if (p.max_per_class == 0 || num_boxes == 0 || classes == 0) return {};
  std::vector<std::vector<Corners>> corner_sets(static_cast<size_t>(batches));
  std::vector<std::vector<int64_t>> kept(static_cast<size_t>(batches * classes));
  for (int64_t b = 0; b < batches; ++b) {
    corner_sets[size_t(b)].resize(size_t(num_boxes));
    for (int64_t i = 0; i < num_boxes; ++i)
      corner_sets[size_t(b)][size_t(i)] = corners(box_data + (b * num_boxes + i) * 4, p.center_point_box);
  }
  run(batches * classes, [&](int64_t begin, int64_t end) {
    std::vector<Candidate> heap;
    for (int64_t u = begin; u < end; ++u)
      kept[size_t(u)] = select_class(score_data + u * num_boxes, corner_sets[size_t(u / classes)], p, heap);
  });
  std::vector<int64_t> out;
  for (int64_t u = 0; u < batches * classes; ++u)
    for (int64_t i : kept[size_t(u)]) out.insert(out.end(), {u / classes, u % classes, i});
  return out;
}

/// The last selection infer made on this thread, with copies of the inputs it was made from:
/// the host calls infer, then compute, on one thread, so compute need not select twice. A
/// selection is reused only for byte-identical boxes, scores and parameters, so it is never
/// stale; any other call selects afresh. Compute takes the memo, so its copies live no longer.
struct Memo {
  std::vector<char> boxes, scores;
  Shape box_shape, score_shape;
  Params params;
  std::vector<int64_t> selected;
  bool valid = false;

  static bool same_bytes(const std::vector<char>& saved, const Tensor& t) {
    return saved.size() == size_t(t.nbytes()) && std::memcmp(saved.data(), t.raw(), saved.size()) == 0;
  }
  bool matches(const Tensor& b, const Tensor& s, const Params& p) const {
    return valid && b.sizes() == box_shape && s.sizes() == score_shape && p == params &&
           same_bytes(boxes, b) && same_bytes(scores, s);
  }
  void save(const Tensor& b, const Tensor& s, const Params& p, const std::vector<int64_t>& sel) {
    const char* bp = static_cast<const char*>(b.raw());
    const char* sp = static_cast<const char*>(s.raw());
    boxes.assign(bp, bp + b.nbytes());
    scores.assign(sp, sp + s.nbytes());
    box_shape = b.sizes();
    score_shape = s.sizes();
    params = p;
    selected = sel;
    valid = true;
  }
};
thread_local Memo memo;

/// Whether input i's value is at hand (an absent or empty optional input needs none).
bool value_known(const InferContext& ctx, int i) {
  return !ctx.has_input(i) || ctx.input(i).numel() == 0 || ctx.input(i).has_data();
}

void infer(InferContext& ctx) {
  Tensor boxes = ctx.input(0), scores = ctx.input(1);
  check_shapes(boxes, scores);
  bool known = true;
  for (int i = 0; i < 5; ++i) known = known && value_known(ctx, i);
  if (!known) {
    ctx.set_output(0, opforge::i64, {-1, 3});
    return;
  }
  const Params p = read_params(ctx);
  const std::vector<int64_t> selected = select_all(boxes, scores, p, [](int64_t n, auto&& fn) { fn(0, n); });
  memo.save(boxes, scores, p, selected);
  ctx.set_output(0, opforge::i64, {int64_t(selected.size() / 3), 3});
}

void compute(KernelContext& ctx) {
  Tensor boxes = ctx.input(0), scores = ctx.input(1), out = ctx.output(0);
  check_shapes(boxes, scores);
  const Params p = read_params(ctx);
  Memo taken;
  std::swap(taken, memo);
  std::vector<int64_t> selected = taken.matches(boxes, scores, p)
      ? std::move(taken.selected)
      : select_all(boxes, scores, p, [&](int64_t n, auto&& fn) { ctx.parallel_for(n, 1, fn); });
  OPFORGE_CHECK(out.numel() == int64_t(selected.size()), "output 'selected_indices' holds ", out.numel() / 3,
                " rows, the selection has ", selected.size() / 3);
  std::copy(selected.begin(), selected.end(), out.data<int64_t>());
}

}  // namespace

OPFORGE_OP(NonMaxSuppression)
    .since(10)
    .input("boxes", {opforge::f32})
    .input("scores", {opforge::f32})
    .optional_input("max_output_boxes_per_class", {opforge::i64})
    .optional_input("iou_threshold", {opforge::f32})
    .optional_input("score_threshold", {opforge::f32})
    .output("selected_indices", {opforge::i64})
    .attr("center_point_box", int64_t(0))
    .infer(infer)
    .compute(compute);
