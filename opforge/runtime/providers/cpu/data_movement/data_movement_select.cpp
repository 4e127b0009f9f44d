// data_movement_select.cpp: ops whose output size depends on the input's values: Compress,
// NonZero and Unique. Their infer reads the data (present at run time) to size the outputs.
#include <algorithm>
#include <numeric>

#include "data_movement/data_movement.h"
#include "common/elements.h"

namespace opforge_cpu {
namespace {

using namespace data_movement;

/// A tensor seen as (outer, n, inner) around one axis; axis -1 when it is flattened to (1, n, 1).
struct AxisView {
  int64_t outer, n, inner, axis;
};

/// The view around attribute 'axis', or the flattened tensor when the node gives none.
template <class Ctx> AxisView axis_view(const Ctx& ctx, const Shape& shape) {
  if (!ctx.has_attr("axis")) return {1, numel(shape), 1, -1};
  const int64_t axis = normalize_axis(ctx.template attr<int64_t>("axis"), int64_t(shape.size()));
  return {dims_product(shape, 0, size_t(axis)), shape[size_t(axis)], dims_product(shape, size_t(axis) + 1, shape.size()),
          axis};
}

/// The selected positions of Compress's condition, checked against the dim it selects from.
std::vector<int64_t> selected(const Tensor& condition, int64_t dim) {
  OPFORGE_CHECK(condition.ndim() == 1, "input 'condition' must be 1-D, got rank ", condition.ndim());
  OPFORGE_CHECK(condition.numel() <= dim, "input 'condition' has ", condition.numel(),
                " values for a dim of size ", dim);
  std::vector<int64_t> keep;
  const bool* c = condition.data<bool>();
  for (int64_t i = 0; i < condition.numel(); ++i)
    if (c[i]) keep.push_back(i);
  return keep;
}


void compress_infer(InferContext& ctx) {
  const Shape shape = ctx.input(0).sizes();
  const AxisView s = axis_view(ctx, shape);
  if (!ctx.input(1).has_data()) throw needs_value("Compress", "condition");
  const int64_t kept = int64_t(selected(ctx.input(1), s.n).size());
  Shape out = {kept};
  if (s.axis >= 0) {
    out = shape;
    out[size_t(s.axis)] = kept;
  }
  ctx.set_output(0, ctx.input(0).dtype(), out);
}

void compress_compute(KernelContext& ctx) {
  const Tensor x = ctx.input(0);
  const AxisView s = axis_view(ctx, x.sizes());
  const std::vector<int64_t> keep = selected(ctx.input(1), s.n);
  const int64_t row = s.inner * elem_size(x), kept = int64_t(keep.size());
  const char* src = static_cast<const char*>(x.raw());
  char* dst = static_cast<char*>(ctx.output(0).raw());
  for (int64_t o = 0; o < s.outer; ++o)
    for (int64_t j = 0; j < kept; ++j)
      std::memcpy(dst + (o * kept + j) * row, src + (o * s.n + keep[size_t(j)]) * row, size_t(row));
}

/// Flat positions of the non-zero elements of x (NaN counts as non-zero, -0.0 as zero).
std::vector<int64_t> nonzero_positions(const Tensor& x) {
  std::vector<int64_t> at;
  dispatch_elements(x, [&](auto tag) {
    using S = typename decltype(tag)::type;
    using C = compute_t<S>;
    const S* p = static_cast<const S*>(x.raw());
    for (int64_t i = 0; i < x.numel(); ++i)
      if (load_as<C>(p[i]) != C(0)) at.push_back(i);
  });
  return at;
}

void nonzero_infer(InferContext& ctx) {
  const Tensor x = ctx.input(0);
  if (!x.has_data()) throw needs_value("NonZero", "X");
  ctx.set_output(0, opforge::i64, {x.ndim(), int64_t(nonzero_positions(x).size())});
}

void nonzero_compute(KernelContext& ctx) {
  const Tensor x = ctx.input(0);
  const std::vector<int64_t> at = nonzero_positions(x);
  const Shape shape = x.sizes();
  const int64_t count = int64_t(at.size());
  int64_t* y = ctx.output(0).data<int64_t>();
  for (int64_t j = 0; j < count; ++j) {
    int64_t rest = at[size_t(j)];
    for (size_t d = shape.size(); d-- > 0;) {
      y[int64_t(d) * count + j] = rest % shape[d];
      rest /= shape[d];
    }
  }
}

/// Unique's result: the first occurrence of each unique slice (in output order), the output
/// position of every input slice, and how often each unique slice occurs.
struct UniqueGroups {
  std::vector<int64_t> first, inverse, counts;
};

/// Slices k of x along the split's axis compared element by element (lexicographically, as
/// numpy's unique with an axis does); groups of equal slices in sorted or first-seen order.
template <class S> UniqueGroups unique_groups(const S* x, const AxisView& s, bool sorted) {
  using C = compute_t<S>;
  auto at = [&](int64_t k, int64_t e) { return load_as<C>(x[((e / s.inner) * s.n + k) * s.inner + e % s.inner]); };
  const int64_t width = s.outer * s.inner;
  auto less = [&](int64_t a, int64_t b) {
    for (int64_t e = 0; e < width; ++e) {
      const C u = at(a, e), v = at(b, e);
      if (u != v) return u < v;
    }
    return false;
  };
  std::vector<int64_t> order(size_t(s.n));
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), less);
  std::vector<int64_t> group_of(size_t(s.n)), group_first, group_count;
  for (size_t i = 0; i < order.size(); ++i) {
    if (i == 0 || less(order[i - 1], order[i])) {
      group_first.push_back(order[i]);
      group_count.push_back(0);
    }
    group_of[size_t(order[i])] = int64_t(group_first.size()) - 1;
    ++group_count.back();
  }
  std::vector<int64_t> rank(group_first.size());
  std::iota(rank.begin(), rank.end(), 0);
  if (!sorted)
    std::sort(rank.begin(), rank.end(), [&](int64_t a, int64_t b) { return group_first[size_t(a)] < group_first[size_t(b)]; });
  UniqueGroups g;
  std::vector<int64_t> position(rank.size());
  for (size_t p = 0; p < rank.size(); ++p) {
    position[size_t(rank[p])] = int64_t(p);
    g.first.push_back(group_first[size_t(rank[p])]);
    g.counts.push_back(group_count[size_t(rank[p])]);
  }
  for (int64_t k = 0; k < s.n; ++k) g.inverse.push_back(position[size_t(group_of[size_t(k)])]);
  return g;
}


template <class Ctx> UniqueGroups unique_of(const Ctx& ctx, const Tensor& x) {
  const AxisView s = axis_view(ctx, x.sizes());
  UniqueGroups g;
  dispatch_elements(x, [&](auto tag) {
    using S = typename decltype(tag)::type;
    g = unique_groups(static_cast<const S*>(x.raw()), s, ctx.template attr<int64_t>("sorted") != 0);
  });
  return g;
}

void unique_infer(InferContext& ctx) {
  const Tensor x = ctx.input(0);
  if (!x.has_data()) throw needs_value("Unique", "X");
  const AxisView s = axis_view(ctx, x.sizes());
  const int64_t u = int64_t(unique_of(ctx, x).first.size());
  Shape y = {u};
  if (s.axis >= 0) {
    y = x.sizes();
    y[size_t(s.axis)] = u;
  }
  ctx.set_output(0, x.dtype(), y);
  if (ctx.num_outputs() > 1) ctx.set_output(1, opforge::i64, {u});
  if (ctx.num_outputs() > 2) ctx.set_output(2, opforge::i64, {s.n});
  if (ctx.num_outputs() > 3) ctx.set_output(3, opforge::i64, {u});
}

void unique_compute(KernelContext& ctx) {
  const Tensor x = ctx.input(0);
  const AxisView s = axis_view(ctx, x.sizes());
  const UniqueGroups g = unique_of(ctx, x);
  const int64_t u = int64_t(g.first.size()), row = s.inner * elem_size(x);
  const char* src = static_cast<const char*>(x.raw());
  char* dst = static_cast<char*>(ctx.output(0).raw());
  for (int64_t o = 0; o < s.outer; ++o)
    for (int64_t j = 0; j < u; ++j)
      std::memcpy(dst + (o * u + j) * row, src + (o * s.n + g.first[size_t(j)]) * row, size_t(row));
  const std::vector<int64_t>* lists[] = {&g.first, &g.inverse, &g.counts};
  for (int i = 1; i < ctx.num_outputs() && i < 4; ++i)
    if (ctx.output(i).defined()) std::copy(lists[i - 1]->begin(), lists[i - 1]->end(), ctx.output(i).data<int64_t>());
}

}  // namespace
}  // namespace opforge_cpu

using namespace opforge_cpu;

OPFORGE_OP(Compress)
    .since(9)
    .input("input", OPFORGE_ALL_DTYPES)
    .input("condition", {opforge::boolean})
    .output("output")
    .optional_attr("axis", opforge::AttrType::Int)
    .infer(compress_infer)
    .compute(compress_compute);

OPFORGE_OP(NonZero)
    .since(9)
    .input("X", OPFORGE_ALL_DTYPES)
    .output("Y", {opforge::i64})
    .infer(nonzero_infer)
    .compute(nonzero_compute);

OPFORGE_OP(Unique)
    .since(11)
    .input("X", OPFORGE_ALL_DTYPES)
    .output("Y")
    .optional_output("indices", {opforge::i64})
    .optional_output("inverse_indices", {opforge::i64})
    .optional_output("counts", {opforge::i64})
    .optional_attr("axis", opforge::AttrType::Int)
    .attr("sorted", int64_t(1))
    .infer(unique_infer)
    .compute(unique_compute);
