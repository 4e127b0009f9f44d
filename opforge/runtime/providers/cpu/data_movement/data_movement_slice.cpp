// data_movement_slice.cpp: Slice, Expand and Tile, each a strided view of its input copied out.
#include <algorithm>
#include <limits>

#include "data_movement/data_movement.h"

namespace opforge_cpu {
namespace {

using namespace data_movement;

/// What a Slice reads: the output shape, and per dim the first index and the step.
struct SliceView {
  Shape shape, first, step;
};

/// Clamps one axis like onnxruntime: start into [0, dim] ([0, dim-1] for negative steps), end
/// into [0, dim] ([-1, dim-1]); sets the output size, first index and step of dim `d`.
void slice_axis(SliceView& v, size_t d, int64_t dim, int64_t start, int64_t end, int64_t step) {
  OPFORGE_CHECK(step != 0, "'steps' must not be 0 (axis ", d, ")");
  if (dim < 0) {  // unknown during shape inference
    v.shape[d] = -1;
    return;
  }
  if (start < 0) start += dim;
  if (end < 0) end += dim;
  int64_t size;
  if (step > 0) {
    start = std::clamp<int64_t>(start, 0, dim);
    end = std::clamp<int64_t>(end, 0, dim);
    step = std::min(step, std::max<int64_t>(dim, 1));
    size = end > start ? (end - start + step - 1) / step : 0;
  } else {
    start = std::clamp<int64_t>(start, 0, std::max<int64_t>(dim - 1, 0));
    end = std::clamp<int64_t>(end, -1, dim - 1);
    step = std::max(step, -std::max<int64_t>(dim, 1));
    size = start > end && dim > 0 ? (start - end - step - 1) / -step : 0;
  }
  v.shape[d] = size;
  v.first[d] = start;
  v.step[d] = step;
}

/// The view of a Slice given its starts, ends, axes (empty: 0..n-1) and steps (empty: 1s).
SliceView slice_view(const Shape& in, const Shape& starts, const Shape& ends, Shape axes, Shape steps) {
  OPFORGE_CHECK(starts.size() == ends.size(), "'starts' has ", starts.size(), " entries, 'ends' has ",
                ends.size());
  if (axes.empty())
    for (size_t i = 0; i < starts.size(); ++i) axes.push_back(int64_t(i));
  if (steps.empty()) steps.assign(starts.size(), 1);
  OPFORGE_CHECK(axes.size() == starts.size() && steps.size() == starts.size(), "'axes' (", axes.size(),
                ") and 'steps' (", steps.size(), ") must match 'starts' (", starts.size(), ")");
  SliceView v{in, Shape(in.size(), 0), Shape(in.size(), 1)};
  std::vector<bool> seen(in.size(), false);
  for (size_t i = 0; i < axes.size(); ++i) {
    const size_t d = size_t(normalize_axis(axes[i], int64_t(in.size())));
    OPFORGE_CHECK(!seen[d], "axis ", axes[i], " appears twice in 'axes'");
    seen[d] = true;
    slice_axis(v, d, in[d], starts[i], ends[i], steps[i]);
  }
  return v;
}

/// Slice-1 takes starts/ends/axes as attributes, Slice-10 as inputs.
template <class Ctx> SliceView slice_view_of(const Ctx& ctx, int version) {
  const Shape in = ctx.input(0).sizes();
  if (version < 10) {
    Shape axes = ctx.has_attr("axes") ? ctx.template attr<Shape>("axes") : Shape{};
    return slice_view(in, ctx.template attr<Shape>("starts"), ctx.template attr<Shape>("ends"), axes, {});
  }
  const char* names[] = {"data", "starts", "ends", "axes", "steps"};
  Shape values[5];
  for (int i = 1; i < 5; ++i) {
    if (!ctx.has_input(i)) continue;
    if (!ctx.input(i).has_data()) throw needs_value("Slice", names[i]);
    values[i] = read_ints(ctx.input(i));
  }
  return slice_view(in, values[1], values[2], values[3], values[4]);
}

template <int V> void slice_infer(InferContext& ctx) {
  ctx.set_output(0, ctx.input(0).dtype(), slice_view_of(ctx, V).shape);
}

template <int V> void slice_compute(KernelContext& ctx) {
  const Tensor x = ctx.input(0);
  const SliceView v = slice_view_of(ctx, V);
  const Shape in_strides = contiguous_strides(x.sizes());
  Shape strides(v.shape.size());
  int64_t offset = 0;
  for (size_t d = 0; d < v.shape.size(); ++d) {
    offset += v.first[d] * in_strides[d];
    strides[d] = v.step[d] * in_strides[d];
  }
  if (numel(v.shape) == 0) return;
  const int64_t es = elem_size(x);
  strided_copy(ctx, ctx.output(0).raw(), static_cast<const char*>(x.raw()) + offset * es, es, v.shape, strides);
}

/// Expand's output: the input and the 'shape' value broadcast together.
template <class Ctx> Shape expand_shape(const Ctx& ctx) {
  const Tensor shape = ctx.input(1);
  if (!shape.has_data()) throw needs_value("Expand", "shape");
  OPFORGE_CHECK(shape.ndim() == 1, "input 'shape' must be 1-D, got rank ", shape.ndim());
  const Shape want = read_ints(shape);
  for (int64_t d : want) OPFORGE_CHECK(d >= 0, "input 'shape' has a negative dim ", d);
  return broadcast_shapes(ctx.input(0).sizes(), want);
}

void expand_infer(InferContext& ctx) { ctx.set_output(0, ctx.input(0).dtype(), expand_shape(ctx)); }

void expand_compute(KernelContext& ctx) {
  const Tensor x = ctx.input(0), y = ctx.output(0);
  const Shape out = y.sizes();
  strided_copy(ctx, y.raw(), x.raw(), elem_size(x), out, broadcast_strides(x.sizes(), out));
}

/// Tile's 'repeats', one non-negative entry per input dim.
template <class Ctx> Shape tile_repeats(const Ctx& ctx) {
  const Tensor r = ctx.input(1);
  if (!r.has_data()) throw needs_value("Tile", "repeats");
  const Shape reps = read_ints(r);
  OPFORGE_CHECK(int64_t(reps.size()) == ctx.input(0).ndim(), "input 'repeats' has ", reps.size(),
                " entries for an input of rank ", ctx.input(0).ndim());
  for (int64_t k : reps) OPFORGE_CHECK(k >= 0, "input 'repeats' has a negative entry ", k);
  return reps;
}

void tile_infer(InferContext& ctx) {
  const Shape reps = tile_repeats(ctx);
  Shape out = ctx.input(0).sizes();
  for (size_t d = 0; d < out.size(); ++d) out[d] = out[d] < 0 ? -1 : size_mul(out[d], reps[d]);
  ctx.set_output(0, ctx.input(0).dtype(), out);
}

void tile_compute(KernelContext& ctx) {
  const Tensor x = ctx.input(0);
  const Shape reps = tile_repeats(ctx), in = x.sizes(), in_strides = contiguous_strides(in);
  // Output dim d of size reps[d] * in[d] is the pair (repeat, index) with strides (0, in_strides[d]).
  Shape shape, strides;
  for (size_t d = 0; d < in.size(); ++d) {
    shape.insert(shape.end(), {reps[d], in[d]});
    strides.insert(strides.end(), {0, in_strides[d]});
  }
  strided_copy(ctx, ctx.output(0).raw(), x.raw(), elem_size(x), shape, strides);
}

}  // namespace
}  // namespace opforge_cpu

using namespace opforge_cpu;

OPFORGE_OP(Slice)
    .since(1)
    .input("data", OPFORGE_ALL_WITH_NARROW_DTYPES)
    .output("output")
    .required_attr("starts", opforge::AttrType::Ints)
    .required_attr("ends", opforge::AttrType::Ints)
    .optional_attr("axes", opforge::AttrType::Ints)
    .infer(slice_infer<1>)
    .compute(slice_compute<1>);

OPFORGE_OP(Slice)
    .since(10)
    .input("data", OPFORGE_ALL_WITH_NARROW_DTYPES)
    .input("starts", {opforge::i32, opforge::i64})
    .input("ends", {opforge::i32, opforge::i64})
    .optional_input("axes", {opforge::i32, opforge::i64})
    .optional_input("steps", {opforge::i32, opforge::i64})
    .output("output")
    .infer(slice_infer<10>)
    .compute(slice_compute<10>);

OPFORGE_OP(Expand)
    .since(8)
    .input("input", OPFORGE_ALL_WITH_NARROW_DTYPES)
    .input("shape", {opforge::i64})
    .output("output")
    .infer(expand_infer)
    .compute(expand_compute);

OPFORGE_OP(Tile)
    .since(6)
    .input("input", OPFORGE_ALL_WITH_NARROW_DTYPES)
    .input("repeats", {opforge::i64})
    .output("output")
    .infer(tile_infer)
    .compute(tile_compute);
